/*
 * bench/kernels.c - decode-shaped matmul throughput of the CPU backend in
 * GB/s of weights read, against the machine's read bandwidth measured in
 * the same run; batched matmuls against the cores' int8 multiply-add peak
 * measured in the same run.
 *
 * Decode: a Q4_1 576x1536 matrix (an FFN matrix of SmolLM2-135M), in rows
 * and repacked as pagodad repacks it (pg_cpu_q4x8_pack), and the Q8_0
 * 49152x576 output matrix, one token (n = 1), on 1 and 2 threads at the
 * best ISA level.  "cold" rotates through copies spanning 256 MiB so
 * that weights come from memory, as in a forward pass; "hot" reuses one
 * copy.  The same decode rows for Q4_K, Q5_0 and Q6_K matrices of that
 * shape (the types of a Q4_K_M file), each also packed where pagodad
 * packs it (Q5_0 with AVX2; Q4_K and Q6_K on the avx512vnni table).
 *
 * Batched: the int8 peak first, a micro-kernel of independent
 * vpmaddubsw + vpmaddwd + vpaddd chains (32 multiply-adds of unsigned by
 * signed bytes summed into int32, the AVX2 kernels' building block), or
 * where the best table is avx512vnni of vpdpbusd chains on zmm registers
 * (64 a instruction, that table's building block), on every thread of a
 * pool of the matmul's size, in GMAC/s.  Then Q4_0,
 * Q4_1, Q8_0, Q4_K, Q5_0 and Q6_K matrices of 576x1536 and 1536x576 (the
 * default model's FFN shapes; not the K-quants, whose rows are multiples
 * of 256) and 2048x2048 against n = 16 and 64 tokens, hot, 2 threads, the
 * Q4_0 / Q4_1 / Q5_0 ones repacked as pagodad repacks them, each in
 * GMAC/s (quantising the activations included) and as a fraction of the
 * peak.  Every figure is the best of 8 short repetitions (the machines
 * are shared: the best is the least disturbed); the peak is the best of
 * its measurements before the matmuls and after each type's.
 *
 * Results are validated against the scalar backend before timing.
 * Not part of make check.  Last line: q4_1_gbps, q4_1_packed_gbps,
 * q8_0_gbps, q4_k_gbps, q4_k_packed_gbps, q5_0_gbps, q5_0_packed_gbps,
 * q6_k_gbps, q6_k_packed_gbps (0 where not packed) (2
 * threads, cold), read_gbps (2 threads), int8_peak_gmacs (2 threads),
 * TYPE_n16_frac and TYPE_n64_frac for each batched type (the smallest
 * fraction over its shapes) and gemm_peak_frac, the smallest of the Q4
 * (Q4_0, Q4_1) and K-quant (Q4_K, Q6_K) ones.
 *
 * PAGODA_BENCH_BATCHED=q6_k,q8_0 (keys as in the last line) runs only the
 * batched matmuls of those types, and prints no last line: for work on
 * one loop.
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
		struct pg_backend *be = pg_cpu_backend_create(th, PG_ISA_TOP);
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

/* ---- the int8 multiply-add peak ---- */

#define BATCH_THREADS 2		/* as the decode rows' "2t" */
#define PEAK_STEPS 10000000L	/* loop trips of a thread's run */

#if defined(__x86_64__)
/* One chain's step: t = maddubs(w, x); t = madd(t, ones); acc += t. */
#define PEAK_CHAIN(w, t, acc)					\
	"vpmaddubsw %%ymm12, %%" w ", %%" t "\n\t"		\
	"vpmaddwd %%ymm13, %%" t ", %%" t "\n\t"		\
	"vpaddd %%" t ", %%" acc ", %%" acc "\n\t"

/*
 * steps trips of 8 independent chains acc += madd(maddubs(w, x), 1):
 * 8 x 32 multiply-adds a trip, in assembly so that the compiler can
 * neither hoist nor merge the products.  Returns the sums so that
 * nothing is dead.
 */
__attribute__((target("avx2"))) static int32_t peak_avx2(long steps)
{
	int32_t out[8], s = 0;

	__asm__ volatile(
		"vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
		"vmovdqa %%ymm0, %%ymm1\n\tvmovdqa %%ymm0, %%ymm2\n\t"
		"vmovdqa %%ymm0, %%ymm3\n\tvmovdqa %%ymm0, %%ymm4\n\t"
		"vmovdqa %%ymm0, %%ymm5\n\tvmovdqa %%ymm0, %%ymm6\n\t"
		"vmovdqa %%ymm0, %%ymm7\n\t"
		"vpcmpeqw %%ymm13, %%ymm13, %%ymm13\n\t"	/* -1 */
		"vpabsw %%ymm13, %%ymm13\n\t"			/* 1 */
		"vpaddw %%ymm13, %%ymm13, %%ymm8\n\t"
		"vpaddw %%ymm8, %%ymm13, %%ymm9\n\t"
		"vpaddw %%ymm9, %%ymm13, %%ymm10\n\t"
		"vpaddw %%ymm10, %%ymm13, %%ymm11\n\t"
		"vpsubw %%ymm11, %%ymm0, %%ymm12\n\t"
		"1:\n\t"
		PEAK_CHAIN("ymm8", "ymm14", "ymm0")
		PEAK_CHAIN("ymm9", "ymm15", "ymm1")
		PEAK_CHAIN("ymm10", "ymm14", "ymm2")
		PEAK_CHAIN("ymm11", "ymm15", "ymm3")
		PEAK_CHAIN("ymm8", "ymm14", "ymm4")
		PEAK_CHAIN("ymm9", "ymm15", "ymm5")
		PEAK_CHAIN("ymm10", "ymm14", "ymm6")
		PEAK_CHAIN("ymm11", "ymm15", "ymm7")
		"dec %[n]\n\t"
		"jnz 1b\n\t"
		"vpaddd %%ymm1, %%ymm0, %%ymm0\n\tvpaddd %%ymm3, %%ymm2, %%ymm2\n\t"
		"vpaddd %%ymm5, %%ymm4, %%ymm4\n\tvpaddd %%ymm7, %%ymm6, %%ymm6\n\t"
		"vpaddd %%ymm2, %%ymm0, %%ymm0\n\tvpaddd %%ymm6, %%ymm4, %%ymm4\n\t"
		"vpaddd %%ymm4, %%ymm0, %%ymm0\n\t"
		"vmovdqu %%ymm0, %[out]\n\t"
		"vzeroupper\n\t"
		: [n] "+r"(steps), [out] "=m"(out)
		:
		: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
		  "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
		  "xmm14", "xmm15", "cc");
	for (int j = 0; j < 8; j++)
		s += out[j];
	return s;
}

/* One VNNI chain's step: acc += dpbusd(w, x), 64 multiply-adds. */
#define PEAK_VNNI(acc) "vpdpbusd %%zmm13, %%zmm12, %%" acc "\n\t"

/*
 * The same for AVX-512 VNNI: steps trips of 12 independent chains acc +=
 * vpdpbusd(w, x) on zmm registers (12 x 64 multiply-adds a trip: enough
 * chains to cover the instruction's latency at two a cycle).
 */
__attribute__((target("avx512f,avx512vnni"))) static int32_t
peak_vnni(long steps)
{
	int32_t out[16], s = 0;

	__asm__ volatile(
		"vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
		"vmovdqa64 %%zmm0, %%zmm1\n\tvmovdqa64 %%zmm0, %%zmm2\n\t"
		"vmovdqa64 %%zmm0, %%zmm3\n\tvmovdqa64 %%zmm0, %%zmm4\n\t"
		"vmovdqa64 %%zmm0, %%zmm5\n\tvmovdqa64 %%zmm0, %%zmm6\n\t"
		"vmovdqa64 %%zmm0, %%zmm7\n\tvmovdqa64 %%zmm0, %%zmm8\n\t"
		"vmovdqa64 %%zmm0, %%zmm9\n\tvmovdqa64 %%zmm0, %%zmm10\n\t"
		"vmovdqa64 %%zmm0, %%zmm11\n\t"
		"vpternlogd $0xff, %%zmm12, %%zmm12, %%zmm12\n\t"	/* -1 */
		"vpabsb %%zmm12, %%zmm13\n\t"				/* 1 */
		"1:\n\t"
		PEAK_VNNI("zmm0") PEAK_VNNI("zmm1") PEAK_VNNI("zmm2")
		PEAK_VNNI("zmm3") PEAK_VNNI("zmm4") PEAK_VNNI("zmm5")
		PEAK_VNNI("zmm6") PEAK_VNNI("zmm7") PEAK_VNNI("zmm8")
		PEAK_VNNI("zmm9") PEAK_VNNI("zmm10") PEAK_VNNI("zmm11")
		"dec %[n]\n\t"
		"jnz 1b\n\t"
		"vpaddd %%zmm1, %%zmm0, %%zmm0\n\tvpaddd %%zmm3, %%zmm2, %%zmm2\n\t"
		"vpaddd %%zmm5, %%zmm4, %%zmm4\n\tvpaddd %%zmm7, %%zmm6, %%zmm6\n\t"
		"vpaddd %%zmm9, %%zmm8, %%zmm8\n\tvpaddd %%zmm11, %%zmm10, %%zmm10\n\t"
		"vpaddd %%zmm2, %%zmm0, %%zmm0\n\tvpaddd %%zmm6, %%zmm4, %%zmm4\n\t"
		"vpaddd %%zmm10, %%zmm8, %%zmm8\n\tvpaddd %%zmm4, %%zmm0, %%zmm0\n\t"
		"vpaddd %%zmm8, %%zmm0, %%zmm0\n\t"
		"vmovdqu32 %%zmm0, %[out]\n\t"
		"vzeroupper\n\t"
		: [n] "+r"(steps), [out] "=m"(out)
		:
		: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
		  "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
		  "cc");
	for (int j = 0; j < 16; j++)
		s += out[j];
	return s;
}
#endif

static volatile int32_t peak_sink;

/* Whether the peak is VNNI's: the table the matmuls run has it. */
static int peak_is_vnni(void)
{
	return pg_cpu_isa_best() >= PG_ISA_AVX512VNNI;
}

/* Multiply-adds of one thread's peak run. */
static double peak_macs(void)
{
	return peak_is_vnni() ? (double)PEAK_STEPS / 2 * 12 * 64 :
	       (double)PEAK_STEPS * 256;
}

static void peak_worker(void *arg, int ith, int nth)
{
	(void)arg, (void)ith, (void)nth;
#if defined(__x86_64__)
	if (peak_is_vnni())
		peak_sink += peak_vnni(PEAK_STEPS / 2);
	else
		peak_sink += peak_avx2(PEAK_STEPS);
#endif
}

/* The cores' int8 multiply-add rate on `pool`'s threads, in GMAC/s: the
 * best of reps runs; 0 without AVX2. */
static double int8_peak(struct pg_pool *pool, int nth, int reps)
{
	double best = 0;

	if (pg_cpu_isa_best() < PG_ISA_AVX2)
		return 0;
	for (int r = 0; r < reps; r++) {
		double t0 = pg_now_s(), t;

		pg_pool_run(pool, peak_worker, NULL);
		t = pg_now_s() - t0;
		if (peak_macs() * nth / t / 1e9 > best)
			best = peak_macs() * nth / t / 1e9;
	}
	return best;
}

/* ---- batched matmuls ---- */

struct batch_type {
	enum pg_dtype t;
	const char *name, *key;
	int in_target;		/* counted in gemm_peak_frac */
};

static const struct batch_type batch_types[] = {
	{ PG_Q4_0, "Q4_0", "q4_0", 1 }, { PG_Q4_1, "Q4_1", "q4_1", 1 },
	{ PG_Q8_0, "Q8_0", "q8_0", 0 }, { PG_Q4_K, "Q4_K", "q4_k", 1 },
	{ PG_Q5_0, "Q5_0", "q5_0", 0 }, { PG_Q6_K, "Q6_K", "q6_k", 1 },
};
#define N_BATCH_TYPES (int)(sizeof(batch_types) / sizeof(batch_types[0]))

static const int64_t batch_shapes[][2] = {
	{ 576, 1536 }, { 1536, 576 }, { 2048, 2048 },
};
#define N_BATCH_SHAPES 3
static const int batch_ns[2] = { 16, 64 };

/*
 * GMAC/s of a (rows, cols) matrix of type t against n tokens on be,
 * hot, repacked where be packs the type; validated against ref first.
 * The best of reps runs of about `seconds` each; 0 if the type cannot
 * take the shape.
 */
static double batch_rate(struct pg_backend *be, struct pg_backend *ref,
			 enum pg_dtype t, int64_t rows, int64_t cols, int n,
			 int reps, double seconds)
{
	size_t rb, nx = (size_t)n * (size_t)cols, ny = (size_t)n * (size_t)rows;
	struct pg_matrix m, mr;
	float *x, *y, *want, *row;
	uint8_t *data, *packed = NULL;
	double se = 0, ss = 0, best = 0;
	size_t pbytes;

	if (cols % pg_dtype_block_size(t))
		return 0;
	rb = pg_dtype_row_bytes(t, (uint64_t)cols);
	data = xmalloc(rb * (size_t)rows);
	row = xmalloc((size_t)cols * 4);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < cols; i++)
			row[i] = frand();
		pg_quantize_row(t, row, data + (size_t)r * rb, cols);
	}
	mr = (struct pg_matrix){ .type = t, .n_rows = rows, .n_cols = cols,
				 .row_bytes = rb, .data = data };
	m = mr;
	pbytes = pg_cpu_q4x8_bytes(be, &m);
	if (pbytes) {
		packed = aligned_alloc(64, (pbytes + 63) / 64 * 64);
		if (!packed) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
		pg_cpu_q4x8_pack(be, &m, packed);
	}
	x = xmalloc(nx * 4), y = xmalloc(ny * 4), want = xmalloc(ny * 4);
	for (size_t i = 0; i < nx; i++)
		x[i] = frand();
	ref->ops->matmul(ref, &mr, x, n, NULL, want);
	be->ops->matmul(be, &m, x, n, NULL, y);
	for (size_t i = 0; i < ny; i++) {
		se += ((double)y[i] - want[i]) * ((double)y[i] - want[i]);
		ss += (double)want[i] * want[i];
	}
	if (!(se / ss < 1e-4)) {
		fprintf(stderr, "%s %lldx%lld n=%d: wrong result, nmse %g\n",
			pg_dtype_name(t), (long long)rows, (long long)cols, n,
			se / ss);
		exit(1);
	}
	for (int r = 0; r < reps; r++) {
		double t0 = pg_now_s(), dt;
		long k = 0;

		do {
			be->ops->matmul(be, &m, x, n, NULL, y);
			k++;
			dt = pg_now_s() - t0;
		} while (dt < seconds);
		if ((double)rows * (double)cols * n * (double)k / dt / 1e9 > best)
			best = (double)rows * (double)cols * n * (double)k / dt / 1e9;
	}
	free(x), free(y), free(want), free(row), free(data), free(packed);
	return best;
}

/*
 * The batched section: the peak, every type x shape x n against it, the
 * peak again.  frac[k][j]: type k's smallest fraction at batch_ns[j];
 * frac[N_BATCH_TYPES][0]: the peak.
 */
/*
 * Whether $PAGODA_BENCH_BATCHED (a comma-separated list of keys: q4_0,
 * q6_k ...) names bt; unset: every type.  For work on one loop: with it
 * set, only the batched matmuls run.
 */
static int batch_wanted(const struct batch_type *bt)
{
	const char *only = getenv("PAGODA_BENCH_BATCHED");
	size_t n = strlen(bt->key);

	if (!only || !*only)
		return 1;
	for (const char *p = only; p; p = strchr(p, ',')) {
		p += *p == ',';
		if (!strncmp(p, bt->key, n) && (p[n] == ',' || !p[n]))
			return 1;
	}
	return 0;
}

static void batched(struct pg_backend *ref, double frac[][2])
{
	struct pg_backend *be = pg_cpu_backend_create(BATCH_THREADS,
						      PG_ISA_TOP);
	double rate[N_BATCH_TYPES][N_BATCH_SHAPES][2], peak, p2;
	struct pg_pool *pool;

	if (!be || pg_pool_create(BATCH_THREADS, &pool)) {
		perror("pg_cpu_backend_create");
		exit(1);
	}
	peak = int8_peak(pool, BATCH_THREADS, 5);
	memset(rate, 0, sizeof(rate));
	for (int k = 0; k < N_BATCH_TYPES; k++) {
		if (!batch_wanted(&batch_types[k]))
			continue;
		for (int s = 0; s < N_BATCH_SHAPES; s++)
			for (int j = 0; j < 2; j++)
				rate[k][s][j] = batch_rate(be, ref,
					batch_types[k].t, batch_shapes[s][0],
					batch_shapes[s][1], batch_ns[j], 8, 0.05);
		p2 = int8_peak(pool, BATCH_THREADS, 3);
		if (p2 > peak)
			peak = p2;
	}
	printf("int8 multiply-add peak (%s, %s, %dt): %.1f GMAC/s\n",
	       peak_is_vnni() ? "vpdpbusd zmm" :
	       "vpmaddubsw + vpmaddwd + vpaddd",
	       pg_cpu_isa_name(pg_cpu_backend_isa(be)),
	       BATCH_THREADS, peak);
	frac[N_BATCH_TYPES][0] = peak;
	for (int k = 0; k < N_BATCH_TYPES; k++) {
		frac[k][0] = frac[k][1] = 1e9;
		for (int s = 0; s < N_BATCH_SHAPES; s++)
			for (int j = 0; j < 2; j++) {
				double r = rate[k][s][j];
				double f = peak > 0 ? r / peak : 0;

				if (!r)
					continue;
				printf("%-4s %4lldx%-4lld %dt n=%-2d hot: %6.1f GMAC/s  "
				       "%.3f of peak\n", batch_types[k].name,
				       (long long)batch_shapes[s][0],
				       (long long)batch_shapes[s][1],
				       BATCH_THREADS, batch_ns[j], r, f);
				if (f < frac[k][j])
					frac[k][j] = f;
			}
	}
	pg_pool_destroy(pool);
	be->ops->destroy(be);
}

int main(void)
{
	struct pg_backend *ref = pg_cpu_backend_create(1, PG_ISA_SCALAR);
	struct pg_backend *best = pg_cpu_backend_create(1, PG_ISA_TOP);
	static struct mat_set q41, q80, q41p, q4k, q4kp, q50, q50p, q6k, q6kp;
	double r1, r2, g41, g80, g41p = 0, g4k, g4kp = 0, g50, g50p = 0, g6k;
	double g6kp = 0;
	int packed;
	double frac[N_BATCH_TYPES + 1][2], target = 1e9;

	if (!ref || !best) {
		perror("pg_cpu_backend_create");
		return 1;
	}
	if (getenv("PAGODA_BENCH_BATCHED") && *getenv("PAGODA_BENCH_BATCHED")) {
		batched(ref, frac);	/* that part alone: no last line */
		ref->ops->destroy(ref);
		best->ops->destroy(best);
		return 0;
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
	if (make_packed(&q4kp, &q4k, best)) {
		g4kp = bench_one("Q4_K 576x1536 packed", &q4kp, ref);
		free(q4kp.data);
	}
	free(q4k.data), free(q4k.x);
	make_set(&q50, PG_Q5_0, 576, 1536);
	g50 = bench_one("Q5_0 576x1536", &q50, ref);
	if (make_packed(&q50p, &q50, best)) {
		g50p = bench_one("Q5_0 576x1536 packed", &q50p, ref);
		free(q50p.data);
	}
	free(q50.data), free(q50.x);
	make_set(&q6k, PG_Q6_K, 576, 1536);
	g6k = bench_one("Q6_K 576x1536", &q6k, ref);
	if (make_packed(&q6kp, &q6k, best)) {
		g6kp = bench_one("Q6_K 576x1536 packed", &q6kp, ref);
		free(q6kp.data);
	}
	free(q6k.data), free(q6k.x);
	batched(ref, frac);
	printf("ratio to read bandwidth (2t, cold): Q4_1 %.2f (packed %.2f), Q8_0 %.2f\n",
	       g41 / r2, g41p / r2, g80 / r2);
	printf("ratio to read bandwidth (2t, cold): Q4_K %.2f (packed %.2f), Q5_0 %.2f (packed %.2f), Q6_K %.2f (packed %.2f)\n",
	       g4k / r2, g4kp / r2, g50 / r2, g50p / r2, g6k / r2, g6kp / r2);
	printf("bench/kernels: q4_1_gbps=%.2f q4_1_packed_gbps=%.2f q8_0_gbps=%.2f q4_k_gbps=%.2f q4_k_packed_gbps=%.2f q5_0_gbps=%.2f q5_0_packed_gbps=%.2f q6_k_gbps=%.2f q6_k_packed_gbps=%.2f read_gbps=%.2f int8_peak_gmacs=%.1f",
	       g41, g41p, g80, g4k, g4kp, g50, g50p, g6k, g6kp, r2,
	       frac[N_BATCH_TYPES][0]);
	for (int k = 0; k < N_BATCH_TYPES; k++)
		for (int j = 0; j < 2; j++) {
			printf(" %s_n%d_frac=%.3f", batch_types[k].key,
			       batch_ns[j], frac[k][j]);
			if (batch_types[k].in_target && frac[k][j] < target)
				target = frac[k][j];
		}
	printf(" gemm_peak_frac=%.3f\n", target);
	ref->ops->destroy(ref);
	best->ops->destroy(best);
	free(q41.data), free(q41.x), free(q80.data), free(q80.x);
	if (packed)
		free(q41p.data);
	return 0;
}
