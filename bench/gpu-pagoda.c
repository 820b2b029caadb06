/*
 * gpu-pagoda.c - bench/gpu's program: on CUDA device 0, the copy bandwidth
 * (the baseline), then decode tokens/s at batch 1, 8 and 64 and prefill
 * tokens/s through pg_forward on a cuda:0 plan, and paged decode attention
 * at 4k context through the backend's attention op alone.
 *
 * Baseline: cudaMemcpy device to device of --copy-mib MiB, bytes read and
 * written / time, best of 10 (the backend has no read-only kernel; its add
 * op, two reads and a write per value, is shown beside it).  A decode step
 * reads every weight once, so weight bytes / copy bandwidth bounds decode
 * tokens/s at batch 1 (the roofline); bench/gpu prints the ratios.
 *
 * Validation before any timing: the last-token logits of a short prompt on
 * cuda:0 against the CPU backend's (NMSE below 1e-2 and finite: a bound for
 * garbage, not for precision; test_backend_ops holds the ops to theirs),
 * and the attention op against the scalar CPU backend on two sequences.
 *
 * Not a test.  Without the CUDA backend or a GPU it says so and exits 77
 * (--probe: only that, and the device's name, so that bench/gpu generates
 * no model for nothing).
 * The last line is "gpu-pagoda: KEY=VALUE ..." (bench/README, bench/gpu).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef HAVE_CUDA
int main(void)
{
	printf("gpu-pagoda: this build has no CUDA backend (configure found no "
	       "nvcc/cuBLAS); nothing to measure\n");
	return 77;
}
#else

#include <cuda_runtime_api.h>	/* the copy baseline only */

#include "common/clock.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/backend_cuda.h"

#define PROMPT 16		/* tokens of each decode sequence's prompt */
#define WARM_STEPS 4		/* decode steps before timing (graph capture) */
#define MAX_BATCH 64
#define VALIDATE_NMSE 1e-2

struct opts {
	const char *model;	/* NULL: the attention and copy parts only */
	int steps;		/* timed decode steps per repetition */
	int prefill;		/* prompt tokens of the prefill figure */
	int reps;
	int attn_seqs;		/* sequences of the 4k attention figure */
	int attn_ctx;
	int copy_mib;
	int validate_tokens;	/* prompt of the logits check; 0: none */
	int no_attn;
	int probe;		/* only say whether there is a GPU */
};

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "gpu-pagoda: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	exit(1);
}

static void cuda_check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		die(what, cudaGetErrorString(e));
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory", NULL);
	return p;
}

static uint32_t rng = 7;

static uint32_t urand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return rng >> 8;
}

/* ---- the baseline: device-to-device copy ---- */

/* GB/s (1e9) of bytes read + written by cudaMemcpy, best of 10. */
static double copy_gbs(size_t bytes)
{
	void *a, *b;
	cudaEvent_t e0, e1;
	float ms, best = 1e30f;

	cuda_check(cudaSetDevice(0), "cudaSetDevice");
	cuda_check(cudaMalloc(&a, bytes), "cudaMalloc (copy source)");
	cuda_check(cudaMalloc(&b, bytes), "cudaMalloc (copy target)");
	cuda_check(cudaMemset(a, 1, bytes), "cudaMemset");
	cuda_check(cudaEventCreate(&e0), "cudaEventCreate");
	cuda_check(cudaEventCreate(&e1), "cudaEventCreate");
	cuda_check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "warm-up copy");
	for (int r = 0; r < 10; r++) {
		cuda_check(cudaEventRecord(e0, 0), "cudaEventRecord");
		cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0),
			   "cudaMemcpyAsync");
		cuda_check(cudaEventRecord(e1, 0), "cudaEventRecord");
		cuda_check(cudaEventSynchronize(e1), "cudaEventSynchronize");
		cuda_check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
		best = ms < best ? ms : best;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	return 2.0 * (double)bytes / (best * 1e-3) / 1e9;
}

/* GB/s of the backend's add op over bytes of floats (2 reads, 1 write). */
static double add_gbs(struct pg_backend *be, size_t bytes)
{
	int64_t n = (int64_t)(bytes / 4);
	float *x = be->ops->alloc(be, bytes), *y = be->ops->alloc(be, bytes);
	double best = 1e30;
	char err[512];

	/* left as allocated: what the floats hold does not change the time */
	if (!x || !y)
		die("alloc for the add op's figure", strerror(ENOMEM));
	for (int r = 0; r < 6; r++) {
		double t = pg_now_s();

		be->ops->add(be, x, y, n);
		if (be->ops->sync(be, err, sizeof(err)))
			die("add", err);
		t = pg_now_s() - t;
		best = r && t < best ? t : best;	/* the first warms up */
	}
	be->ops->free(be, x);
	be->ops->free(be, y);
	return 3.0 * (double)bytes / best / 1e9;
}

/* ---- paged decode attention at 4k context ---- */

struct attn_rig {
	struct pg_kv_layout kv;		/* base: device store */
	size_t store_bytes;
	int n_seqs, n_ctx, n_heads, group;
	int32_t *pages;			/* (n_seqs, n_ctx / page_tokens) */
	struct pg_attn_seq *seqs;
	float *q, *out;			/* device (n_seqs, n_heads * head_dim) */
	float *hq;			/* host copy of q */
};

/* Llama-3-8B's attention: 8 KV heads of 128, 4 query heads each, F16. */
static void attn_rig_make(struct pg_backend *be, struct attn_rig *r,
			  int n_seqs, int n_ctx)
{
	int pt = 16, per = n_ctx / pt, n_pages = n_seqs * per;
	size_t nq, half = 0;
	uint16_t *h;
	char err[512];

	r->n_seqs = n_seqs;
	r->n_ctx = n_ctx;
	r->group = 4;
	r->kv = (struct pg_kv_layout){ .page_tokens = pt, .n_blocks = 1,
		.n_kv_heads = 8, .head_dim = 128, .type = PG_F16,
		.cp_size = 1 };
	r->n_heads = r->kv.n_kv_heads * r->group;
	r->kv.page_bytes = (size_t)2 * r->kv.n_kv_heads * pt * 128 * 2;
	r->store_bytes = r->kv.page_bytes * (size_t)n_pages;
	r->kv.base = be->ops->alloc(be, r->store_bytes);
	if (!r->kv.base)
		die("alloc of the KV store", strerror(ENOMEM));
	/* random F16 in [-1, 1]: a 64 MiB pattern repeated over the store */
	half = (size_t)64 << 20;
	half = half < r->store_bytes ? half : r->store_bytes;
	h = xmalloc(half);
	for (size_t i = 0; i < half / 2; i++)
		h[i] = pg_fp32_to_fp16((float)urand() / 8388608.0f - 1.0f);
	for (size_t off = 0; off < r->store_bytes; off += half)
		if (be->ops->upload(be, (uint8_t *)r->kv.base + off, h,
				    r->store_bytes - off < half ?
				    r->store_bytes - off : half, err, sizeof(err)))
			die("upload of the KV store", err);
	free(h);
	/* each sequence's pages scattered over the store */
	r->pages = xmalloc((size_t)n_pages * sizeof(int32_t));
	for (int i = 0; i < n_pages; i++)
		r->pages[i] = i;
	for (int i = n_pages - 1; i > 0; i--) {
		int j = (int)(urand() % (uint32_t)(i + 1));
		int32_t s = r->pages[i];

		r->pages[i] = r->pages[j];
		r->pages[j] = s;
	}
	r->seqs = xmalloc((size_t)n_seqs * sizeof(*r->seqs));
	for (int s = 0; s < n_seqs; s++)
		r->seqs[s] = (struct pg_attn_seq){ .pages = r->pages + s * per,
			.n_ctx = n_ctx, .first_row = s, .n_rows = 1 };
	nq = (size_t)n_seqs * r->n_heads * 128;
	r->hq = xmalloc(nq * 4);
	for (size_t i = 0; i < nq; i++)
		r->hq[i] = (float)urand() / 8388608.0f - 1.0f;
	r->q = be->ops->alloc(be, nq * 4);
	r->out = be->ops->alloc(be, nq * 4);
	if (!r->q || !r->out)
		die("alloc of q and out", strerror(ENOMEM));
	if (be->ops->upload(be, r->q, r->hq, nq * 4, err, sizeof(err)))
		die("upload of q", err);
}

static void attn_call(struct pg_backend *be, const struct attn_rig *r,
		      int n_seqs, const struct pg_kv_layout *kv,
		      const float *q, float *out)
{
	struct pg_attn_heads hs = { .n_heads = r->n_heads, .group = r->group };

	be->ops->attention(be, kv, 0, q, &hs, r->seqs, n_seqs,
			   1.0f / sqrtf(128.0f), out, NULL);
}

/*
 * The first two sequences against the scalar CPU backend over the same
 * store, downloaded (only their pages).
 */
static void attn_validate(struct pg_backend *be, const struct attn_rig *r)
{
	int per = r->n_ctx / r->kv.page_tokens, nv = 2;
	size_t nq = (size_t)nv * r->n_heads * 128;
	struct pg_backend *cpu = pg_cpu_backend_create(0, PG_ISA_SCALAR);
	struct pg_kv_layout hkv = r->kv;
	float *got = xmalloc(nq * 4), *want = xmalloc(nq * 4);
	double se = 0, ss = 0;
	char err[512];

	if (!cpu)
		die("pg_cpu_backend_create", strerror(errno));
	hkv.base = xmalloc(r->store_bytes);
	for (int i = 0; i < nv * per; i++) {
		size_t off = (size_t)r->pages[i] * r->kv.page_bytes;

		if (be->ops->download(be, (uint8_t *)hkv.base + off,
				      (const uint8_t *)r->kv.base + off,
				      r->kv.page_bytes, err, sizeof(err)))
			die("download of a KV page", err);
	}
	attn_call(be, r, nv, &r->kv, r->q, r->out);
	if (be->ops->download(be, got, r->out, nq * 4, err, sizeof(err)))
		die("attention", err);
	attn_call(cpu, r, nv, &hkv, r->hq, want);
	for (size_t i = 0; i < nq; i++) {
		se += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
		ss += (double)want[i] * want[i];
	}
	if (!(se / ss < 1e-5)) {
		char m[128];

		snprintf(m, sizeof(m), "NMSE %.3g against the scalar CPU backend", se / ss);
		die("attention at 4k is wrong", m);
	}
	printf("attention at %d context validated on 2 sequences: NMSE %.2g\n",
	       r->n_ctx, se / ss);
	free(hkv.base), free(got), free(want);
	cpu->ops->destroy(cpu);
}

/* GB/s of K and V read by one decode attention call over every sequence. */
static double attn_gbs(struct pg_backend *be, const struct attn_rig *r,
		       double *us)
{
	double kv_bytes = (double)r->n_seqs * r->n_ctx * r->kv.n_kv_heads *
			  128 * 2 * 2, best = 1e30;
	char err[512];

	for (int rep = 0; rep < 4; rep++) {
		double t;

		if (be->ops->sync(be, err, sizeof(err)))
			die("attention", err);
		t = pg_now_s();
		for (int i = 0; i < 10; i++)
			attn_call(be, r, r->n_seqs, &r->kv, r->q, r->out);
		if (be->ops->sync(be, err, sizeof(err)))
			die("attention", err);
		t = (pg_now_s() - t) / 10;
		best = rep && t < best ? t : best;	/* the first warms up */
	}
	*us = best * 1e6;
	return kv_bytes / best / 1e9;
}

static void attn_rig_free(struct pg_backend *be, struct attn_rig *r)
{
	be->ops->free(be, r->kv.base);
	be->ops->free(be, r->q);
	be->ops->free(be, r->out);
	free(r->pages), free(r->seqs), free(r->hq);
}

/* ---- the model through pg_forward ---- */

struct fw_rig {
	struct pg_plan plan;		/* outlives fw */
	struct pg_forward *fw;
	int per_seq;			/* pages of each decode sequence */
	int32_t *pages;			/* sequence s: pages + s * per_seq */
	int32_t *tokens;		/* (MAX_BATCH * PROMPT or prefill) */
	float *logits;			/* (MAX_BATCH, n_vocab) */
};

static void fw_rig_make(const struct pg_model *m, const struct opts *o,
			struct fw_rig *g)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct pg_plan_request req = { .devices = "cuda:0",
		.ctx_tokens = o->prefill, .batch_seqs = MAX_BATCH };
	struct pg_model_facts f;
	int ctx = PROMPT + WARM_STEPS + o->steps;
	int n_tok = o->prefill > MAX_BATCH * PROMPT ? o->prefill : MAX_BATCH * PROMPT;
	int n_pages;
	char err[1024];

	pg_model_facts_of(m, &f);
	if (pg_plan_make(&req, &f, &g->plan, err, sizeof(err)))
		die("cuda:0 plan", err);
	g->per_seq = (ctx + fp.page_tokens - 1) / fp.page_tokens;
	n_pages = MAX_BATCH * g->per_seq;
	if (n_pages < (o->prefill + fp.page_tokens - 1) / fp.page_tokens)
		n_pages = (o->prefill + fp.page_tokens - 1) / fp.page_tokens;
	fp.plan = &g->plan;
	fp.n_pages = n_pages;
	fp.max_batch_tokens = n_tok;
	if (pg_forward_create(m, &fp, &g->fw, err, sizeof(err)))
		die("pg_forward_create on cuda:0", err);
	g->pages = xmalloc((size_t)n_pages * sizeof(int32_t));
	for (int i = 0; i < n_pages; i++)
		g->pages[i] = i;
	g->tokens = xmalloc((size_t)n_tok * sizeof(int32_t));
	for (int i = 0; i < n_tok; i++)
		g->tokens[i] = (int32_t)(urand() % (uint32_t)m->hp.n_vocab);
	g->logits = xmalloc((size_t)MAX_BATCH * m->hp.n_vocab * sizeof(float));
}

static void fw_rig_free(struct fw_rig *g)
{
	pg_forward_destroy(g->fw);
	free(g->pages), free(g->tokens), free(g->logits);
}

/* One batch of sequences 0 .. n - 1, n_tokens each from n_past. */
static void fw_step(struct fw_rig *g, int n, int n_past, int n_tokens,
		    const int32_t *tokens)
{
	struct pg_fw_seq seqs[MAX_BATCH];
	int rc;

	for (int s = 0; s < n; s++)
		seqs[s] = (struct pg_fw_seq){ .pages = g->pages + s * g->per_seq,
			.n_past = n_past, .n_tokens = n_tokens };
	rc = pg_forward_batch(g->fw, tokens, n * n_tokens, seqs, n, g->logits);
	if (rc)
		die("pg_forward_batch", strerror(-rc));
}

/* Decode tokens/s at batch n: best of reps runs of o->steps steps. */
static double decode_tps(struct fw_rig *g, const struct opts *o, int n)
{
	double best = 1e30;

	fw_step(g, n, 0, PROMPT, g->tokens);
	for (int r = 0; r < o->reps; r++) {
		double t = 0;

		for (int i = 0; i < WARM_STEPS + o->steps; i++) {
			if (i == WARM_STEPS)
				t = pg_now_s();
			fw_step(g, n, PROMPT + i, 1, g->tokens + (i % 8) * n);
		}
		t = pg_now_s() - t;
		best = t < best ? t : best;
	}
	return (double)n * o->steps / best;
}

/* Prefill tokens/s: o->prefill tokens of one sequence into empty KV. */
static double prefill_tps(struct fw_rig *g, const struct opts *o)
{
	double best = 1e30;

	fw_step(g, 1, 0, o->prefill, g->tokens);	/* warm-up */
	for (int r = 0; r < o->reps; r++) {
		double t = pg_now_s();

		fw_step(g, 1, 0, o->prefill, g->tokens);
		t = pg_now_s() - t;
		best = t < best ? t : best;
	}
	return o->prefill / best;
}

/*
 * The last-token logits of a short prompt on the CPU backend (the default
 * one-device forward, all cores), for fw_validate.
 */
static float *cpu_logits(const struct pg_model *m, const int32_t *tokens,
			 int n)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct pg_forward *fw;
	int32_t pages[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	struct pg_fw_seq seq = { .pages = pages, .n_tokens = n };
	float *lg = xmalloc((size_t)m->hp.n_vocab * sizeof(float));
	char err[1024];
	int rc;

	fp.n_threads = 0;
	fp.n_pages = 8;
	fp.max_batch_tokens = n;
	if (pg_forward_create(m, &fp, &fw, err, sizeof(err)))
		die("pg_forward_create on the CPU", err);
	rc = pg_forward_batch(fw, tokens, n, &seq, 1, lg);
	if (rc)
		die("pg_forward_batch on the CPU", strerror(-rc));
	pg_forward_destroy(fw);
	return lg;
}

static int argmax(const float *x, int n)
{
	int b = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

static void fw_validate(struct fw_rig *g, const struct pg_model *m, int n)
{
	int nv = m->hp.n_vocab;
	float *want = cpu_logits(m, g->tokens, n);
	double se = 0, ss = 0, e;

	fw_step(g, 1, 0, n, g->tokens);
	for (int i = 0; i < nv; i++) {
		se += ((double)g->logits[i] - want[i]) * ((double)g->logits[i] - want[i]);
		ss += (double)want[i] * want[i];
	}
	e = ss > 0 ? se / ss : se;
	printf("logits after %d tokens, cuda:0 against the CPU: NMSE %.2g, "
	       "top token %s\n", n, e,
	       argmax(g->logits, nv) == argmax(want, nv) ? "equal" : "differs");
	if (!(e < VALIDATE_NMSE))
		die("cuda:0's logits are not the CPU's", "not timing a wrong forward pass");
	free(want);
}

/* ---- the program ---- */

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "steps", required_argument, NULL, 's' },
		{ "prefill", required_argument, NULL, 'p' },
		{ "reps", required_argument, NULL, 'r' },
		{ "attn-seqs", required_argument, NULL, 'a' },
		{ "attn-ctx", required_argument, NULL, 'c' },
		{ "copy-mib", required_argument, NULL, 'C' },
		{ "validate-tokens", required_argument, NULL, 'v' },
		{ "no-attn", no_argument, NULL, 'n' },
		{ "probe", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .steps = 64, .prefill = 512, .reps = 3,
		.attn_seqs = 32, .attn_ctx = 4096, .copy_mib = 2048,
		.validate_tokens = 4 };
	while ((c = getopt_long(argc, argv, "m:", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 's': o->steps = atoi(optarg); break;
		case 'p': o->prefill = atoi(optarg); break;
		case 'r': o->reps = atoi(optarg); break;
		case 'a': o->attn_seqs = atoi(optarg); break;
		case 'c': o->attn_ctx = atoi(optarg); break;
		case 'C': o->copy_mib = atoi(optarg); break;
		case 'v': o->validate_tokens = atoi(optarg); break;
		case 'n': o->no_attn = 1; break;
		case 'P': o->probe = 1; break;
		default:
			fprintf(stderr, "usage: gpu-pagoda [--model FILE] [--steps N] "
				"[--prefill N] [--reps N] [--attn-seqs N] [--attn-ctx N] "
				"[--copy-mib N] [--validate-tokens N] [--no-attn] [--probe]\n");
			exit(2);
		}
	}
	if (o->steps < 1 || o->reps < 1 || o->prefill < 1 || o->attn_seqs < 1 ||
	    o->attn_ctx < 16 || o->attn_ctx % 16 || o->copy_mib < 1 ||
	    o->validate_tokens < 0 || o->validate_tokens > 128)
		die("bad option value (see the usage)", NULL);
}

/* What the model part measured. */
struct model_figures {
	uint64_t weight_bytes;		/* read by one decode step */
	double decode_tps[3];		/* batch 1, 8, 64 */
	double prefill_tps;
};

static void model_part(const struct opts *o, struct model_figures *mf)
{
	static const int batch[3] = { 1, 8, MAX_BATCH };
	struct pg_model *m;
	struct pg_model_facts f;
	struct fw_rig g;
	double t;
	char err[1024];

	t = pg_now_s();
	if (pg_model_load(o->model, 0, &m, err, sizeof(err)))
		die(err, NULL);
	pg_model_facts_of(m, &f);
	mf->weight_bytes = (uint64_t)f.n_blocks * f.block_bytes + f.output_bytes;
	fw_rig_make(m, o, &g);
	printf("model %s: %d blocks, hidden %d, %.2f GB read per decode step; "
	       "loaded onto cuda:0 in %.1f s\n", m->name, f.n_blocks, f.n_embd,
	       mf->weight_bytes / 1e9, pg_now_s() - t);
	if (o->validate_tokens)
		fw_validate(&g, m, o->validate_tokens);
	for (int i = 0; i < 3; i++) {
		mf->decode_tps[i] = decode_tps(&g, o, batch[i]);
		printf("decode batch %d: %.2f tokens/s\n", batch[i],
		       mf->decode_tps[i]);
	}
	mf->prefill_tps = prefill_tps(&g, o);
	printf("prefill %d tokens: %.1f tokens/s\n", o->prefill, mf->prefill_tps);
	fw_rig_free(&g);
	pg_model_free(m);
}

int main(int argc, char **argv)
{
	struct pg_cuda_device_info info;
	struct pg_backend *be;
	struct opts o;
	struct model_figures mf = { 0, { 0, 0, 0 }, 0 };
	double copy, add, agbs = 0, aus = 0;
	char err[512];

	parse(argc, argv, &o);
	if (pg_cuda_device_count() <= 0) {
		printf("gpu-pagoda: no CUDA device is visible; nothing to measure\n");
		return 77;
	}
	if (pg_cuda_device_info(0, &info, err, sizeof(err)))
		die("pg_cuda_device_info", err);
	printf("cuda:0: %s, %.1f GiB, %d SMs, compute %d.%d, peak %.0f GB/s\n",
	       info.name, info.total_bytes / 1073741824.0, info.sm_count,
	       info.cc_major, info.cc_minor, info.peak_bandwidth_gbs);
	if (o.probe)
		return 0;
	if (!getenv("PAGODA_CUDA_GRAPHS"))
		setenv("PAGODA_CUDA_GRAPHS", "1", 1);
	printf("CUDA graphs: PAGODA_CUDA_GRAPHS=%s\n", getenv("PAGODA_CUDA_GRAPHS"));
	copy = copy_gbs((size_t)o.copy_mib << 20);
	printf("copy bandwidth (cudaMemcpy D2D, %d MiB, read + written): %.1f GB/s\n",
	       o.copy_mib, copy);
	be = pg_cuda_backend_create(0, err, sizeof(err));
	if (!be)
		die("pg_cuda_backend_create", err);
	add = add_gbs(be, (size_t)o.copy_mib << 20);
	printf("the add op (2 reads + 1 write): %.1f GB/s\n", add);
	if (!o.no_attn) {
		struct attn_rig r;

		attn_rig_make(be, &r, o.attn_seqs, o.attn_ctx);
		attn_validate(be, &r);
		agbs = attn_gbs(be, &r, &aus);
		printf("decode attention, %d sequences x %d positions, F16 KV, "
		       "8 KV heads x 4: %.1f us, %.1f GB/s of K and V\n",
		       r.n_seqs, r.n_ctx, aus, agbs);
		attn_rig_free(be, &r);
	}
	be->ops->destroy(be);
	if (o.model)
		model_part(&o, &mf);
	printf("gpu-pagoda: copy_gbs=%.1f add_gbs=%.1f peak_gbs=%.0f "
	       "attn4k_gbs=%.1f attn4k_us=%.1f weight_bytes=%llu "
	       "decode1_tps=%.2f decode8_tps=%.2f decode64_tps=%.2f "
	       "prefill_tps=%.1f\n", copy, add, info.peak_bandwidth_gbs, agbs,
	       aus, (unsigned long long)mf.weight_bytes, mf.decode_tps[0],
	       mf.decode_tps[1], mf.decode_tps[2], mf.prefill_tps);
	return 0;
}
#endif
