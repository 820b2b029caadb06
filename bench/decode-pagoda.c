/*
 * decode-pagoda.c - pagoda's side of bench/decode: prompt processing and
 * generation tokens/s on one sequence, measured like llama-bench does.
 *
 * pp: PP tokens in batches of up to 512 into an empty sequence.
 * tg: TG single-token forward passes after a one-token prompt (no sampling,
 * as llama-bench).  Both after a warm-up, best of --reps runs.
 * --depth D (D > 0, a multiple of the page size): also pp at depth D, the
 * same PP tokens run after D tokens already in the sequence (filled once,
 * untimed; each repetition a fork of that sequence), and the machine's
 * limit for it: the attention multiply-adds those PP tokens add over depth
 * 0, at the f32 FMA peak measured on the same threads (fma_peak_gflops).
 * Last line: "decode-pagoda: pp512_tps=X tg128_tps=Y ..." (with --depth,
 * also ppN_dD_tps, attn_gflop_dD and fma_peak_gflops).  Not a test.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/readbw.h"
#include "common/clock.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"

struct bench_opts {
	const char *model;
	int threads;
	int pp;
	int tg;
	int reps;
	int depth;
};

static void die(const char *msg, const char *detail)
{
	fprintf(stderr, "decode-pagoda: %s%s%s\n", msg, detail ? ": " : "",
		detail ? detail : "");
	exit(1);
}

/* Run n ids into a fresh sequence, returning seconds taken. */
static double run_pp(struct pg_forward *fw, struct pg_kvc *kvc,
		     const int32_t *ids, int n, float *logits)
{
	struct pg_kvc_seq *s = pg_kvc_seq_new(kvc, 0);
	double t0 = pg_now_s();

	if (!s || pg_run_tokens(fw, kvc, s, ids, n, 0, logits))
		die("forward pass failed (KV pages too few?)", NULL);
	t0 = pg_now_s() - t0;
	pg_kvc_seq_free(kvc, s);
	/* timing runs must not find their own tokens cached */
	pg_kvc_evict(kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return t0;
}

/*
 * Run n ids after the depth tokens of base (a fork of it, freed after),
 * returning seconds taken.
 */
static double run_pp_at(struct pg_forward *fw, struct pg_kvc *kvc,
			const struct pg_kvc_seq *base, const int32_t *ids,
			int n, float *logits)
{
	struct pg_kvc_seq *s = pg_kvc_seq_fork(kvc, base);
	double t0 = pg_now_s();

	if (!s || pg_run_tokens(fw, kvc, s, ids, n, 0, logits))
		die("forward pass at depth failed (KV pages too few?)", NULL);
	t0 = pg_now_s() - t0;
	pg_kvc_seq_free(kvc, s);
	pg_kvc_evict(kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return t0;
}

/*
 * The f32 FMA peak of one thread: 10 independent chains of 8-lane fused
 * multiply-adds (enough to cover the FMA latency on two pipes), in
 * GFLOP/s (2 per lane).  AVX2 where the processor has it, else 4-lane
 * SSE multiply and add (no FMA: the figure is then that of mul + add).
 */
#define FMA_CHAINS 10
#define FMA_ITERS 20000000L

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(float x)
{
	typedef float v8 __attribute__((vector_size(32)));
	v8 a[FMA_CHAINS], m = { 0 }, c = { 0 };

	for (int l = 0; l < 8; l++)
		m[l] = 0.999999f, c[l] = x * 1e-7f;
	for (int i = 0; i < FMA_CHAINS; i++)
		a[i] = m * (float)(i + 1);
	for (long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 10
		for (int i = 0; i < FMA_CHAINS; i++)
			a[i] = __builtin_ia32_vfmaddps256(a[i], m, c);
	for (int i = 1; i < FMA_CHAINS; i++)
		a[0] += a[i];
	return a[0][0] + a[0][7];
}

static void *fma_thread(void *arg)
{
	float *r = arg;

	*r = fma_loop_avx2(*r);
	return NULL;
}

/* The FMA peak of n threads at once, GFLOP/s (0 without AVX2/FMA). */
static double fma_peak_gflops(int n)
{
	pthread_t t[64];
	float r[64];
	double t0;
	int k;

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return 0.0;
	n = n < 64 ? n : 64;
	r[0] = 1.0f;
	fma_thread(r);				/* clocks up */
	t0 = pg_now_s();
	for (k = 0; k < n; k++) {
		r[k] = (float)k;
		if (pthread_create(&t[k], NULL, fma_thread, &r[k]))
			break;
	}
	for (int i = 0; i < k; i++)
		pthread_join(t[i], NULL);
	t0 = pg_now_s() - t0;
	return (double)k * FMA_ITERS * FMA_CHAINS * 16.0 / t0 / 1e9;
}

/*
 * The attention multiply-adds (as flops, 2 each) that n prompt tokens
 * after depth tokens do beyond the same tokens at depth 0: each query head
 * of each layer takes more scores and as many more weighted V rows of
 * head_dim each: depth more in a global block; in a sliding-window block
 * (window w) prompt token p reads min(depth + p + 1, w) keys instead of
 * min(p + 1, w).
 */
static double attn_extra_flops(const struct pg_model *m, int depth, int n)
{
	double keys = 0;

	for (int b = 0; b < m->hp.n_blocks; b++) {
		int w = m->arch.window;

		if (!pg_block_windowed(&m->arch, b)) {
			keys += (double)depth * n;
			continue;
		}
		for (int p = 0; p < n; p++)
			keys += (depth + p + 1 < w ? depth + p + 1 : w) -
				(p + 1 < w ? p + 1 : w);
	}
	return 4.0 * (double)m->hp.head_dim * m->hp.n_heads * keys;
}

static double run_tg(struct pg_forward *fw, struct pg_kvc *kvc,
		     const int32_t *ids, int n, float *logits)
{
	struct pg_kvc_seq *s = pg_kvc_seq_new(kvc, 0);
	double t0;

	if (!s || pg_run_tokens(fw, kvc, s, ids, 1, 0, logits))
		die("forward pass failed", NULL);
	t0 = pg_now_s();
	for (int i = 1; i <= n; i++)
		if (pg_run_tokens(fw, kvc, s, &ids[i], 1, 0, logits))
			die("forward pass failed", NULL);
	t0 = pg_now_s() - t0;
	pg_kvc_seq_free(kvc, s);
	pg_kvc_evict(kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return t0;
}

static void parse(int argc, char **argv, struct bench_opts *o)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "pp", required_argument, NULL, 'p' },
		{ "tg", required_argument, NULL, 'g' },
		{ "reps", required_argument, NULL, 'r' },
		{ "depth", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct bench_opts){ .threads = 2, .pp = 512, .tg = 128, .reps = 3 };
	while ((c = getopt_long(argc, argv, "m:t:", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 't': o->threads = atoi(optarg); break;
		case 'p': o->pp = atoi(optarg); break;
		case 'g': o->tg = atoi(optarg); break;
		case 'r': o->reps = atoi(optarg); break;
		case 'd': o->depth = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: decode-pagoda --model FILE [--threads N] [--pp N] [--tg N] [--reps N] [--depth D]\n");
			exit(2);
		}
	}
	if (!o->model || o->pp < 1 || o->tg < 1 || o->reps < 1 || o->depth < 0)
		die("--model FILE is required; --pp, --tg and --reps must be >= 1, --depth >= 0", NULL);
}

/*
 * The weight bytes one decode step reads: every tensor once, the token
 * embeddings only where they are the output head too (tied; otherwise a
 * row of them per token).
 */
static double weight_bytes_per_token(const struct pg_model *m)
{
	double b = 0;

	for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(m->file, i);

		if (m->tied_output || !gguf_str_eq(t->name, "token_embd.weight"))
			b += (double)t->n_bytes;
	}
	return b;
}

int main(int argc, char **argv)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct bench_opts o;
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	struct pg_model *m;
	char err[1024];
	double best_pp = 1e30, best_tg = 1e30, best_pd = 1e30;
	int32_t *ids;
	float *logits;
	int n_ids;

	parse(argc, argv, &o);
	if (pg_model_load(o.model, 0, &m, err, sizeof(err)))
		die(err, NULL);
	fp.n_threads = o.threads;
	fp.n_pages = (o.depth + o.pp + o.tg + 64) / fp.page_tokens + 2;
	if (pg_forward_create(m, &fp, &fw, err, sizeof(err)))
		die(err, NULL);
	kvc = pg_kvc_for_forward(fw, m);
	if (o.depth % fp.page_tokens)
		die("--depth must be a multiple of the KV page size", NULL);
	n_ids = (o.pp > o.tg ? o.pp : o.tg) + 1 + o.depth;
	ids = malloc(sizeof(*ids) * (size_t)n_ids);
	logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	if (!ids || !logits || !kvc)
		die("out of memory", NULL);
	srand(1);
	for (int i = 0; i < n_ids; i++)
		ids[i] = rand() % m->hp.n_vocab;
	run_pp(fw, kvc, ids, o.pp < 64 ? o.pp : 64, logits);	/* warm-up */
	for (int r = 0; r < o.reps; r++) {
		double pp = run_pp(fw, kvc, ids, o.pp, logits);
		double tg = run_tg(fw, kvc, ids, o.tg, logits);

		best_pp = pp < best_pp ? pp : best_pp;
		best_tg = tg < best_tg ? tg : best_tg;
		printf("rep %d: pp%d %.1f tokens/s, tg%d %.1f tokens/s\n", r,
		       o.pp, o.pp / pp, o.tg, o.tg / tg);
	}
	if (o.depth > 0) {
		/* the depth tokens once, then each repetition on a fork */
		struct pg_kvc_seq *base = pg_kvc_seq_new(kvc, 0);
		const int32_t *tail = ids + o.depth;

		if (!base || pg_run_tokens(fw, kvc, base, ids, o.depth, 0, logits))
			die("forward pass filling the depth failed", NULL);
		for (int r = 0; r < o.reps; r++) {
			double pd = run_pp_at(fw, kvc, base, tail, o.pp, logits);

			best_pd = pd < best_pd ? pd : best_pd;
			printf("rep %d: pp%d at depth %d %.1f tokens/s\n", r,
			       o.pp, o.depth, o.pp / pd);
		}
		pg_kvc_seq_free(kvc, base);
	}
	printf("model %s, %d threads (%s)\n", m->name, pg_forward_threads(fw),
	       pg_forward_isa_name(fw));
	printf("decode-pagoda: pp%d_tps=%.2f tg%d_tps=%.2f weight_mb_per_token=%.1f read_gbps=%.2f",
	       o.pp, o.pp / best_pp, o.tg, o.tg / best_tg,
	       weight_bytes_per_token(m) / 1e6, readbw_gbps(o.threads));
	if (o.depth > 0)
		printf(" pp%d_d%d_tps=%.2f attn_gflop_d%d=%.3f fma_peak_gflops=%.1f",
		       o.pp, o.depth, o.pp / best_pd, o.depth,
		       attn_extra_flops(m, o.depth, o.pp) / 1e9,
		       fma_peak_gflops(o.threads));
	printf("\n");
	free(ids);
	free(logits);
	pg_kvc_destroy(kvc);
	pg_forward_destroy(fw);
	pg_model_free(m);
	return 0;
}
