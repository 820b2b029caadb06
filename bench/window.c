/*
 * bench/window - the cost of sliding-window attention on paged KV against
 * attention over the whole context, same run, same backend.
 *
 * One decode row (Gemma 3 270M's shape: 4 query heads of 256 on one KV
 * head, F16 pages of 16 tokens) at the end of a context of --ctx tokens
 * (default 8192), attending once to the whole context (the baseline: what
 * every block cost before windows) and once to the last --window
 * positions (default 512, Gemma 3's).  Before timing, the windowed output
 * is checked against the full attention of a store that holds only the
 * window's positions (the same keys, so it must agree to float rounding).
 * Prints the fastest of --reps timings of each (the machines are shared:
 * the least disturbed run is the kernel's cost) and, last,
 *
 *   bench/window: speedup=X window_us=W full_us=F ctx=C window=N threads=T
 *
 * where speedup = full_us / window_us: about ctx / window when a windowed
 * row reads only its window's pages.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu.h"

#define HEADS 4
#define HEAD_DIM 256
#define PAGE 16

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* A one-block F16 store of n_tok positions, filled from position p0 on. */
struct store {
	struct pg_kv_layout kv;
	int32_t *pages;
	int n_tok;
};

static int store_make(struct pg_backend *be, struct store *s, int n_tok,
		      int p0, const float *k, const float *v)
{
	int n_pages = (n_tok + PAGE - 1) / PAGE;
	int32_t *slots = malloc(sizeof(*slots) * (size_t)n_tok);

	s->n_tok = n_tok;
	s->kv = (struct pg_kv_layout){
		.page_tokens = PAGE, .n_blocks = 1, .n_kv_heads = 1,
		.head_dim = HEAD_DIM, .type = PG_F16,
	};
	s->kv.page_bytes = (size_t)2 * PAGE * HEAD_DIM * 2;
	s->kv.base = be->ops->alloc(be, s->kv.page_bytes * (size_t)n_pages);
	s->pages = malloc(sizeof(*s->pages) * (size_t)n_pages);
	if (!s->kv.base || !s->pages || !slots)
		return -1;
	/* pages in reverse order: a page table, not a contiguous run */
	for (int i = 0; i < n_pages; i++)
		s->pages[i] = n_pages - 1 - i;
	for (int t = 0; t < n_tok; t++)
		slots[t] = s->pages[t / PAGE] * PAGE + t % PAGE;
	be->ops->kv_write(be, &s->kv, 0, k + (size_t)p0 * HEAD_DIM,
			  v + (size_t)p0 * HEAD_DIM, n_tok, slots);
	free(slots);
	return 0;
}

static void attend(struct pg_backend *be, const struct store *s,
		   const float *q, int window, float *out)
{
	struct pg_attn_heads h = {
		.n_heads = HEADS, .group = HEADS, .window = window,
	};
	struct pg_attn_seq seq = {
		.pages = s->pages, .n_ctx = s->n_tok, .n_rows = 1,
	};

	be->ops->attention(be, &s->kv, 0, q, &h, &seq, 1,
			   1.0f / sqrtf((float)HEAD_DIM), out, NULL);
}

static double time_us(struct pg_backend *be, const struct store *s,
		      const float *q, int window, float *out, int reps)
{
	double *t = malloc(sizeof(*t) * (size_t)reps), best;

	for (int r = 0; r < reps; r++) {
		double t0 = now_us();

		for (int i = 0; i < 8; i++)
			attend(be, s, q, window, out);
		t[r] = (now_us() - t0) / 8;
	}
	qsort(t, (size_t)reps, sizeof(*t), cmp_double);
	best = t[0];
	free(t);
	return best;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ctx", required_argument, NULL, 'c' },
		{ "window", required_argument, NULL, 'w' },
		{ "threads", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	int ctx = 8192, window = 512, threads = 2, reps = 15, c;
	struct pg_backend *be;
	struct store full, win;
	float *k, *v, q[HEADS * HEAD_DIM], a[HEADS * HEAD_DIM], b[HEADS * HEAD_DIM];
	double full_us, win_us, err = 0;
	unsigned seed = 1;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c': ctx = atoi(optarg); break;
		case 'w': window = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: bench/window [--ctx N] [--window N] [--threads N] [--reps N]\n");
			return 1;
		}
	}
	if (ctx < 2 || window < 1 || window >= ctx || threads < 1 || reps < 1) {
		fprintf(stderr, "bench/window: need 1 <= window < ctx, threads >= 1, reps >= 1\n");
		return 1;
	}
	be = pg_cpu_backend_create(threads, pg_cpu_isa_best());
	k = malloc(sizeof(float) * (size_t)ctx * HEAD_DIM);
	v = malloc(sizeof(float) * (size_t)ctx * HEAD_DIM);
	if (!be || !k || !v) {
		fprintf(stderr, "bench/window: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < (size_t)ctx * HEAD_DIM; i++) {
		k[i] = (float)rand_r(&seed) / RAND_MAX - 0.5f;
		v[i] = (float)rand_r(&seed) / RAND_MAX - 0.5f;
	}
	for (int i = 0; i < HEADS * HEAD_DIM; i++)
		q[i] = 4.0f * ((float)rand_r(&seed) / RAND_MAX - 0.5f);
	if (store_make(be, &full, ctx, 0, k, v) ||
	    store_make(be, &win, window, ctx - window, k, v)) {
		fprintf(stderr, "bench/window: out of memory\n");
		return 1;
	}
	/* the window over the whole store = all of a store of the window */
	attend(be, &full, q, window, a);
	attend(be, &win, q, 0, b);
	for (int i = 0; i < HEADS * HEAD_DIM; i++)
		err = fmax(err, fabs((double)a[i] - b[i]));
	if (!(err < 1e-4)) {
		fprintf(stderr, "bench/window: the windowed attention differs from the window's own by %g\n",
			err);
		return 1;
	}
	full_us = time_us(be, &full, q, 0, b, reps);
	win_us = time_us(be, &full, q, window, a, reps);
	printf("%s, %d threads: one decode row, %d heads of %d, F16 pages of %d\n",
	       pg_cpu_isa_name(pg_cpu_backend_isa(be)), threads, HEADS, HEAD_DIM,
	       PAGE);
	printf("  whole context of %d: %9.1f us\n", ctx, full_us);
	printf("  window of %d:        %9.1f us (max |d| against the window's own store %.1e)\n",
	       window, win_us, err);
	printf("bench/window: speedup=%.2f window_us=%.1f full_us=%.1f ctx=%d window=%d threads=%d\n",
	       full_us / win_us, win_us, full_us, ctx, window, threads);
	be->ops->free(be, full.kv.base);
	be->ops->free(be, win.kv.base);
	be->ops->destroy(be);
	free(full.pages);
	free(win.pages);
	free(k);
	free(v);
	return 0;
}
