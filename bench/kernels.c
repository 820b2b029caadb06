/*
 * bench/kernels.c - decode-shaped matmul throughput of the CPU backend in
 * GB/s of weights read, against the machine's read bandwidth measured in
 * the same run.
 *
 * Shapes: a Q4_1 576x1536 matrix (an FFN matrix of SmolLM2-135M), in rows
 * and repacked as pagodad repacks it (pg_cpu_q4x8_pack), and the Q8_0
 * 49152x576 output matrix, one token (n = 1), on 1 and 2 threads at the
 * best ISA level.  "cold" rotates through copies spanning 256 MiB so
 * that weights come from memory, as in a forward pass; "hot" reuses one
 * copy.  The same decode rows for Q4_K, Q5_0 (also repacked, as
 * pagodad runs it) and Q6_K matrices of that shape (the types of a Q4_K_M
 * file), and each against 64 tokens (hot, GMAC/s).  Then the Q4_1 matrix against 64
 * and 16 tokens at once (prompts,
 * batches; 16 packed too), hot, in GMAC/s.  Results are validated against the scalar
 * backend before timing.
 * Not part of make check.  Last line: q4_1_gbps, q4_1_packed_gbps,
 * q8_0_gbps, q4_k_gbps, q5_0_gbps, q5_0_packed_gbps, q6_k_gbps (2
 * threads, cold) and
 * read_gbps (2 threads).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/threadpool.h"
#include "bench/readbw.h"

#define SPAN_BYTES ((size_t)256 << 20)

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p) {
		perror("malloc");
		exit(1);
	}
	return p;
}

static uint32_t rng = 7;

static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)(rng >> 8) / 16777216.0f * 2.0f - 1.0f;
}

/* ---- matmul ---- */

struct mat_set {
	struct pg_matrix m[1024];	/* copies of one matrix */
	int n_copies;
	uint8_t *data;
	float *x;			/* (n_cols) */
	const struct pg_matrix *rows;	/* the matrix in rows, for the
					 * reference */
};

static void make_set(struct mat_set *s, enum pg_dtype t, int64_t rows,
		     int64_t cols)
{
	size_t rb = pg_dtype_row_bytes(t, (uint64_t)cols);
	size_t bytes = rb * (size_t)rows;
	float *row = xmalloc((size_t)cols * sizeof(float));

	s->n_copies = (int)(SPAN_BYTES / bytes) + 1;
	if (s->n_copies > 1024)
		s->n_copies = 1024;
	s->data = xmalloc(bytes * (size_t)s->n_copies);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < cols; i++)
			row[i] = frand();
		pg_quantize_row(t, row, s->data + (size_t)r * rb, cols);
	}
	for (int k = 0; k < s->n_copies; k++) {
		if (k)
			memcpy(s->data + bytes * (size_t)k, s->data, bytes);
		s->m[k] = (struct pg_matrix){ .type = t, .n_rows = rows,
			.n_cols = cols, .row_bytes = rb,
			.data = s->data + bytes * (size_t)k };
	}
	s->x = row;
	for (int64_t i = 0; i < cols; i++)
		s->x[i] = frand();
	s->rows = &s->m[0];
}

/*
 * The same matrices repacked for the CPU backend's 8-row loops
 * (pg_cpu_q4x8_pack, what pagodad does at start): into p's copies, from
 * s's; 0 when the backend does not take them (no AVX2).
 */
static int make_packed(struct mat_set *p, const struct mat_set *s,
		       struct pg_backend *be)
{
	size_t bytes = pg_cpu_q4x8_bytes(be, &s->m[0]);

	if (!bytes)
		return 0;
	*p = *s;
	p->data = aligned_alloc(64, (bytes + 63) / 64 * 64 * (size_t)s->n_copies);
	if (!p->data) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	for (int k = 0; k < s->n_copies; k++)
		pg_cpu_q4x8_pack(be, &p->m[k],
				 p->data + (bytes + 63) / 64 * 64 * (size_t)k);
	return 1;
}

/* The backend's result against the scalar backend's: normalised MSE. */
static double validate(struct pg_backend *be, struct pg_backend *ref,
		       const struct mat_set *s)
{
	size_t n = (size_t)s->m[0].n_rows;
	float *y = xmalloc(n * 4), *want = xmalloc(n * 4);
	double se = 0, ss = 0;

	be->ops->matmul(be, &s->m[0], s->x, 1, NULL, y);
	ref->ops->matmul(ref, s->rows, s->x, 1, NULL, want);
	for (size_t i = 0; i < n; i++) {
		se += ((double)y[i] - want[i]) * ((double)y[i] - want[i]);
		ss += (double)want[i] * want[i];
	}
	free(y);
	free(want);
	return se / ss;
}

/* GB/s of weights over `reps` decode matmuls, cold or hot. */
static double time_matmul(struct pg_backend *be, const struct mat_set *s,
			  int cold, double seconds)
{
	float *y = xmalloc((size_t)s->m[0].n_rows * 4);
	size_t bytes = s->m[0].row_bytes * (size_t)s->m[0].n_rows;
	double t0 = pg_now_s(), t;
	long reps = 0;

	do {
		for (int k = 0; k < 16; k++, reps++)
			be->ops->matmul(be, &s->m[cold ? reps % s->n_copies : 0],
					s->x, 1, NULL, y);
		t = pg_now_s() - t0;
	} while (t < seconds);
	free(y);
	return (double)bytes * (double)reps / t / 1e9;
}

static double bench_one(const char *name, const struct mat_set *s,
			struct pg_backend *ref)
{
	double cold2 = 0;

	for (int th = 1; th <= 2; th++) {
		struct pg_backend *be = pg_cpu_backend_create(th, PG_ISA_AVX512);
		double e, hot, cold;

		if (!be) {
			perror("pg_cpu_backend_create");
			exit(1);
		}
		e = validate(be, ref, s);
		if (!(e < 1e-4)) {
			fprintf(stderr, "%s: wrong result, nmse %g\n", name, e);
			exit(1);
		}
		time_matmul(be, s, 1, 0.2);	/* warm up */
		cold = time_matmul(be, s, 1, 1.0);
		hot = time_matmul(be, s, 0, 1.0);
		printf("%-25s %s %dt: cold %6.2f GB/s  hot %6.2f GB/s  "
		       "(%.1f us/token cold)\n", name,
		       pg_cpu_isa_name(pg_cpu_backend_isa(be)), th, cold, hot,
		       (double)s->m[0].row_bytes * (double)s->m[0].n_rows /
		       cold / 1e3);
		if (th == 2)
			cold2 = cold;
		be->ops->destroy(be);
	}
	return cold2;
}

/*
 * Prompt-shaped: n tokens at once against hot weights (the repacked
 * gemm8 loops where the table has them), in GMAC/s, 1 and 2 threads,
 * validated against the scalar backend first.
 */
static void bench_tokens(const char *name, const struct mat_set *s, int n,
			 struct pg_backend *ref)
{
	int64_t rows = s->m[0].n_rows, cols = s->m[0].n_cols;
	size_t ny = (size_t)n * (size_t)rows;
	float *x = xmalloc((size_t)n * (size_t)cols * 4), *y = xmalloc(ny * 4);
	float *want = xmalloc(ny * 4);

	for (size_t i = 0; i < (size_t)n * (size_t)cols; i++)
		x[i] = frand();
	ref->ops->matmul(ref, s->rows, x, n, NULL, want);
	for (int th = 1; th <= 2; th++) {
		struct pg_backend *be = pg_cpu_backend_create(th, PG_ISA_AVX512);
		double t0, t, se = 0, ss = 0;
		long reps = 0;

		if (!be) {
			perror("pg_cpu_backend_create");
			exit(1);
		}
		be->ops->matmul(be, &s->m[0], x, n, NULL, y);
		for (size_t i = 0; i < ny; i++) {
			se += ((double)y[i] - want[i]) * ((double)y[i] - want[i]);
			ss += (double)want[i] * want[i];
		}
		if (!(se / ss < 1e-4)) {
			fprintf(stderr, "%s n=%d: wrong result, nmse %g\n", name,
				n, se / ss);
			exit(1);
		}
		t0 = pg_now_s();
		do {
			be->ops->matmul(be, &s->m[0], x, n, NULL, y);
			reps++;
			t = pg_now_s() - t0;
		} while (t < 1.0);
		printf("%-25s %s %dt: n=%d tokens, hot: %6.2f GMAC/s\n", name,
		       pg_cpu_isa_name(pg_cpu_backend_isa(be)), th, n,
		       (double)rows * (double)cols * n * (double)reps / t / 1e9);
		be->ops->destroy(be);
	}
	free(x), free(y), free(want);
}

int main(void)
{
	struct pg_backend *ref = pg_cpu_backend_create(1, PG_ISA_SCALAR);
	struct pg_backend *best = pg_cpu_backend_create(1, PG_ISA_AVX512);
	static struct mat_set q41, q80, q41p, q4k, q50, q50p, q6k;
	double r1, r2, g41, g80, g41p = 0, g4k, g50, g50p = 0, g6k;
	int packed;

	if (!ref || !best) {
		perror("pg_cpu_backend_create");
		return 1;
	}
	r1 = readbw_gbps(1);
	r2 = readbw_gbps(2);
	printf("read bandwidth: 1t %.2f GB/s, 2t %.2f GB/s\n", r1, r2);
	make_set(&q41, PG_Q4_1, 576, 1536);
	make_set(&q80, PG_Q8_0, 49152, 576);
	packed = make_packed(&q41p, &q41, best);
	g41 = bench_one("Q4_1 576x1536", &q41, ref);
	if (packed)
		g41p = bench_one("Q4_1 576x1536 packed", &q41p, ref);
	g80 = bench_one("Q8_0 49152x576", &q80, ref);
	make_set(&q4k, PG_Q4_K, 576, 1536);
	g4k = bench_one("Q4_K 576x1536", &q4k, ref);
	bench_tokens("Q4_K 576x1536", &q4k, 64, ref);
	free(q4k.data), free(q4k.x);
	make_set(&q50, PG_Q5_0, 576, 1536);
	g50 = bench_one("Q5_0 576x1536", &q50, ref);
	bench_tokens("Q5_0 576x1536", &q50, 64, ref);
	if (make_packed(&q50p, &q50, best)) {
		g50p = bench_one("Q5_0 576x1536 packed", &q50p, ref);
		bench_tokens("Q5_0 576x1536 packed", &q50p, 64, ref);
		free(q50p.data);
	}
	free(q50.data), free(q50.x);
	make_set(&q6k, PG_Q6_K, 576, 1536);
	g6k = bench_one("Q6_K 576x1536", &q6k, ref);
	bench_tokens("Q6_K 576x1536", &q6k, 64, ref);
	free(q6k.data), free(q6k.x);
	bench_tokens("Q4_1 576x1536", &q41, 64, ref);
	bench_tokens("Q4_1 576x1536", &q41, 16, ref);
	if (packed)
		bench_tokens("Q4_1 576x1536 packed", &q41p, 16, ref);
	printf("ratio to read bandwidth (2t, cold): Q4_1 %.2f (packed %.2f), Q8_0 %.2f\n",
	       g41 / r2, g41p / r2, g80 / r2);
	printf("ratio to read bandwidth (2t, cold): Q4_K %.2f, Q5_0 %.2f (packed %.2f), Q6_K %.2f\n",
	       g4k / r2, g50 / r2, g50p / r2, g6k / r2);
	printf("bench/kernels: q4_1_gbps=%.2f q4_1_packed_gbps=%.2f q8_0_gbps=%.2f q4_k_gbps=%.2f q5_0_gbps=%.2f q5_0_packed_gbps=%.2f q6_k_gbps=%.2f read_gbps=%.2f\n",
	       g41, g41p, g80, g4k, g50, g50p, g6k, r2);
	ref->ops->destroy(ref);
	best->ops->destroy(best);
	free(q41.data), free(q41.x), free(q80.data), free(q80.x);
	if (packed)
		free(q41p.data);
	return 0;
}
