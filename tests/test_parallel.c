/*
 * test_parallel.c - parallel plans on CPU devices give what one device
 * gives.
 *
 * For pipeline (PP 2, 3), tensor (TP 2, 3, 4; with KV heads that do not
 * divide, so shared ones are replicated), PP 2 × TP 2, context (CP 2) and
 * TP 2 × CP 2 plans, on generated models of uneven shapes (F32, Q8_0 and
 * Q4_1 weights; llama, llama with rope_freqs, qwen2, and qwen3 with a head
 * size of its own) and on the default model when it is there:
 *
 *  - prompt logits (every position) are bit for bit one device's: PP runs
 *    the same kernels in the same order, and TP and CP sum in one
 *    device's order (forward.c's exact parallel sums: canonical parts of
 *    the row-split products, attention in two lanes);
 *  - so greedy generation gives the same tokens;
 *  - CP 4 (alone and with TP 2) is not bit-identical (it merges four
 *    quarters of each page's attention, one device two halves): held to
 *    the GPU's tolerances;
 *  - several batches in flight (PP micro-batches) give each batch's own
 *    result;
 *  - a device that fails (injected) fails that batch with its error, and
 *    the next batch runs and is right;
 *  - the path a GPU takes through forward.c (weights uploaded, KV and
 *    activations in the backend's memory), run by CPU devices, is
 *    bit-identical;
 *  - where the CUDA backend is built and a GPU is present, cuda:0 agrees
 *    with one CPU device as TP does (its sums run in other orders);
 *  - replicas (2 and 3 one-device copies, data parallel): several
 *    sequences in one batch, spread over the replicas by the page cache's
 *    zones, each give one device's logits and greedy tokens.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/forward.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/engine/tokenizer.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"

#define PT 16		/* KV page tokens */
#define N_PAGES 64

struct shape {
	int pp, tp, cp;
};

/*
 * One GPU, cuda:0, where there is one: the CUDA backend against one CPU
 * device (make_plan knows this shape by its address).
 */
static const struct shape gpu_shape = { 1, 1, 1 };

/* Whether cuda:0 can be planned: the CUDA backend built and a GPU seen. */
static int have_gpu(void)
{
	static int known = -1;
	struct pg_device d[1];
	char err[256];

	if (known < 0)
		known = pg_devices_parse("cuda:0", 0, d, 1, err,
					 sizeof(err)) == 1;
	return known;
}

static const struct shape shapes[] = {
	{ 2, 1, 1 }, { 3, 1, 1 }, { 1, 2, 1 }, { 1, 3, 1 }, { 1, 4, 1 },
	{ 2, 2, 1 }, { 1, 1, 2 }, { 1, 2, 2 },
};

/*
 * Plans that are not bit-identical to one device: CP 4 merges four
 * partial softmaxes (quarters of every page) where one device merges two
 * halves, so its attention rounds differently, and the logits agree
 * within rounding (F32), or within 8-bit activation noise (quantised
 * models), not bit for bit.  README and docs/architecture.md say so.
 */
static const struct shape approx_shapes[] = {
	{ 1, 1, 4 }, { 1, 2, 4 },
};

/* A plan of pp × tp × cp one-thread CPU devices, blocks cut evenly. */
static void make_plan(const struct shape *sh, int n_blocks, struct pg_plan *p)
{
	memset(p, 0, sizeof(*p));
	p->pp = sh->pp;
	p->tp = sh->tp;
	p->cp = sh->cp;
	p->n_devices = sh->pp * sh->tp * sh->cp;
	for (int i = 0; i < p->n_devices; i++) {
		p->dev[i].kind = PG_DEV_CPU;
		p->dev[i].index = i;
		snprintf(p->dev[i].name, sizeof(p->dev[i].name), "cpu:%d", i);
		p->dev[i].n_threads = 1;
		p->dev[i].numa_node = -1;
	}
	for (int s = 0; s <= sh->pp; s++)
		p->first_block[s] = s * n_blocks / sh->pp;
	if (sh == &gpu_shape) {
		char err[256];

		if (pg_devices_parse("cuda:0", 0, p->dev, 1, err, sizeof(err)) != 1)
			CHECK(0, "cuda:0: %s", err);
	}
}

struct rig {
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	struct pg_plan plan;
};

/*
 * A forward pass and KV cache on plan sh (NULL: one device); node0: its
 * devices bound to NUMA node 0 (weights copied there); device_path: run as
 * a GPU is run (forward.h).
 */
static int make_rig_with(struct rig *r, const struct pg_model *m,
			 const struct shape *sh, int max_batch, int node0,
			 int device_path)
{
	struct pg_forward_params p = pg_forward_params_default();
	char err[512];

	p.n_threads = 1;
	p.page_tokens = PT;
	p.n_pages = N_PAGES;
	p.max_batch_tokens = max_batch;
	p.device_path = device_path;
	memset(r, 0, sizeof(*r));
	if (sh) {
		make_plan(sh, m->hp.n_blocks, &r->plan);
		for (int i = 0; node0 && i < r->plan.n_devices; i++)
			r->plan.dev[i].numa_node = 0;
		p.plan = &r->plan;
	}
	if (pg_forward_create(m, &p, &r->fw, err, sizeof(err))) {
		CHECK(0, "pg_forward_create%s%s: %s", node0 ? " (NUMA node 0)" : "",
		      device_path ? " (device path)" : "", err);
		return -1;
	}
	r->kvc = pg_kvc_for_forward(r->fw, m);
	return r->kvc ? 0 : -1;
}

static int make_rig(struct rig *r, const struct pg_model *m,
		    const struct shape *sh, int max_batch)
{
	return make_rig_with(r, m, sh, max_batch, 0, 0);
}

static void free_rig(struct rig *r)
{
	pg_kvc_destroy(r->kvc);
	pg_forward_destroy(r->fw);
}

/* Logits of every position of ids (n <= the batch limit). */
static float *prefill(struct rig *r, const struct pg_model *m,
		      const int32_t *ids, int n)
{
	float *lg = malloc(sizeof(float) * (size_t)n * m->hp.n_vocab);
	struct pg_kvc_seq *s = pg_kvc_seq_new(r->kvc, 0);
	int rc = pg_run_tokens(r->fw, r->kvc, s, ids, n, 1, lg);

	CHECK(rc == 0, "prefill rc %d", rc);
	pg_kvc_seq_free(r->kvc, s);
	/* later runs must compute, not reuse this prompt's pages */
	pg_kvc_evict(r->kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return lg;
}

static int greedy(struct rig *r, const struct pg_model *m,
		  const int32_t *prompt, int n, int n_gen, int32_t *out)
{
	struct pg_gen_params gp = { .sampling = pg_sampling_default(),
				    .max_tokens = n_gen, .ignore_eos = 1 };
	struct pg_gen_stats st;
	char err[256];
	int rc;

	rc = pg_generate(r->fw, r->kvc, m, prompt, n, &gp, NULL, NULL, out,
			 &st, err, sizeof(err));
	CHECK(rc == 0 && st.n_gen == n_gen, "generate: %d %s", rc, err);
	pg_kvc_evict(r->kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return rc;
}

/* Top-1 minus top-2 of a row. */
static float margin(const float *row, int n)
{
	float a = -INFINITY, b = -INFINITY;

	for (int i = 0; i < n; i++)
		if (row[i] > a)
			b = a, a = row[i];
		else if (row[i] > b)
			b = row[i];
	return a - b;
}

struct figures {
	double max_d, mean_d;
	int same, n;		/* greedy runs identical */
};

/*
 * Compare one plan with one device on model m: logits of the prompts'
 * positions within logit_tol (0: bit-identical), greedy tokens equal or
 * first different where one device's top two are within tie_tol (0:
 * always equal).
 */
static void compare_plan(const struct pg_model *m, struct rig *one,
			 const struct shape *sh, int32_t prompts[][64],
			 int n_prompts, int n, int n_gen, double logit_tol,
			 double tie_tol, const char *what)
{
	int V = m->hp.n_vocab;
	struct rig r;
	struct figures f = { 0 };
	char name[96];

	if (sh == &gpu_shape)
		snprintf(name, sizeof(name), "%s cuda:0", what);
	else
		snprintf(name, sizeof(name), "%s pp%d tp%d cp%d", what, sh->pp,
			 sh->tp, sh->cp);
	if (make_rig(&r, m, sh, 64))
		return;
	for (int k = 0; k < n_prompts; k++) {
		float *a = prefill(one, m, prompts[k], n);
		float *b = prefill(&r, m, prompts[k], n);
		int32_t ga[64], gb[64], seq[128];
		int d;

		for (size_t i = 0; i < (size_t)n * V; i++) {
			double e = fabs((double)a[i] - b[i]);

			f.max_d = e > f.max_d ? e : f.max_d;
			f.mean_d += e / ((double)n * V * n_prompts);
		}
		free(a);
		free(b);
		greedy(one, m, prompts[k], n, n_gen, ga);
		greedy(&r, m, prompts[k], n, n_gen, gb);
		for (d = 0; d < n_gen && ga[d] == gb[d]; d++)
			;
		f.n++;
		if (d == n_gen) {
			f.same++;
			continue;
		}
		/* one device's logits where the two first differ */
		memcpy(seq, prompts[k], sizeof(int32_t) * (size_t)n);
		memcpy(seq + n, ga, sizeof(int32_t) * (size_t)d);
		a = prefill(one, m, seq, n + d);
		{
			float mg = margin(a + (size_t)(n + d - 1) * V, V);

			CHECK(mg <= tie_tol, "%s prompt %d: greedy differs at token %d where one device's top two are %.4f apart (near-tie bound %.3g)",
			      name, k, d, mg, tie_tol);
			printf("  %s prompt %d: first difference at generated token %d, one device's margin there %.4f\n",
			       name, k, d, mg);
		}
		free(a);
	}
	if (logit_tol == 0)
		CHECK(f.max_d == 0, "%s: logits differ by %.3g, expected bit-identical",
		      name, f.max_d);
	else
		CHECK(f.max_d <= logit_tol, "%s: logits differ by up to %.3g (tolerance %.3g)",
		      name, f.max_d, logit_tol);
	printf("%-34s logits max |d| %.2e mean %.2e; greedy identical %d/%d\n",
	       name, f.max_d, f.mean_d, f.same, f.n);
	free_rig(&r);
}

/*
 * Devices bound to a NUMA node (node 0 exists everywhere) copy their weight
 * slices there: the same results as views of the file (PP: bit-identical
 * to one device).
 */
static void check_numa_weights(const struct pg_model *m, struct rig *one,
			       int32_t prompts[][64], int n)
{
	static const struct shape shs[] = { { 2, 1, 1 }, { 2, 2, 1 } };

	for (size_t k = 0; k < sizeof(shs) / sizeof(shs[0]); k++) {
		struct rig r, views;
		float *a, *b;

		/* the same plan with its weights as views of the file */
		if (shs[k].tp == 1)
			views = *one;
		else if (make_rig(&views, m, &shs[k], 64))
			continue;
		if (make_rig_with(&r, m, &shs[k], 64, 1, 0))
			continue;
		a = prefill(&views, m, prompts[0], n);
		b = prefill(&r, m, prompts[0], n);
		CHECK(!memcmp(a, b, sizeof(float) * (size_t)n * m->hp.n_vocab),
		      "pp%d tp%d: weights copied to NUMA node 0 give other logits than views",
		      shs[k].pp, shs[k].tp);
		free(a);
		free(b);
		free_rig(&r);
		if (shs[k].tp > 1)
			free_rig(&views);
	}
	printf("pp2 and pp2 x tp2 with weight slices copied to NUMA node 0: bit-identical to views of the file\n");
}

/*
 * The path a GPU takes (weights uploaded through alloc/upload, KV and
 * activations in the backend's memory, logits downloaded, a split output
 * head padded to whole rows), run by CPU devices: bit-identical to the
 * same plan on views of the file.  The device path keeps Q4 matrices in
 * rows while the plain path repacks them (pg_cpu_q4x8_pack), so this is
 * also the repacking's end-to-end check.
 */
static void check_device_path(const struct pg_model *m, struct rig *one,
			      int32_t prompts[][64], int n, const char *what)
{
	static const struct shape shs[] = {
		{ 1, 1, 1 }, { 2, 1, 1 }, { 1, 2, 1 }, { 1, 1, 2 },
	};

	for (size_t k = 0; k < sizeof(shs) / sizeof(shs[0]); k++) {
		struct rig r, views;
		int single = shs[k].pp * shs[k].tp * shs[k].cp == 1;
		float *a, *b;
		int32_t ga[16], gb[16];

		if (single)
			views = *one;
		else if (make_rig(&views, m, &shs[k], 64))
			continue;
		if (make_rig_with(&r, m, single ? NULL : &shs[k], 64, 0, 1))
			continue;
		a = prefill(&views, m, prompts[0], n);
		b = prefill(&r, m, prompts[0], n);
		CHECK(!memcmp(a, b, sizeof(float) * (size_t)n * m->hp.n_vocab),
		      "%s pp%d tp%d cp%d: the device path gives other logits than views of the file",
		      what, shs[k].pp, shs[k].tp, shs[k].cp);
		/* decode steps: only the last row's logits, gathered */
		greedy(&views, m, prompts[1], n, 16, ga);
		greedy(&r, m, prompts[1], n, 16, gb);
		CHECK(!memcmp(ga, gb, sizeof(ga)),
		      "%s pp%d tp%d cp%d: the device path generates other tokens",
		      what, shs[k].pp, shs[k].tp, shs[k].cp);
		free(a);
		free(b);
		free_rig(&r);
		if (!single)
			free_rig(&views);
	}
	printf("%s: the device path (uploaded weights, device KV and activations, downloaded logits) is bit-identical on 1 device, pp2, tp2 and cp2\n",
	       what);
}

/* A plan of n_rep replicas of one one-thread CPU device each. */
static int make_replica_rig(struct rig *r, const struct pg_model *m,
			    int n_rep, int device_path)
{
	struct pg_forward_params p = pg_forward_params_default();
	char err[512];

	memset(r, 0, sizeof(*r));
	make_plan(&(struct shape){ 1, 1, 1 }, m->hp.n_blocks, &r->plan);
	r->plan.replicas = n_rep;
	r->plan.n_devices = n_rep;
	for (int i = 0; i < n_rep; i++) {
		r->plan.dev[i] = r->plan.dev[0];
		r->plan.dev[i].index = i;
		snprintf(r->plan.dev[i].name, sizeof(r->plan.dev[i].name),
			 "cpu:%d", i);
	}
	p.n_threads = 1;
	p.page_tokens = PT;
	p.n_pages = N_PAGES;
	p.max_batch_tokens = 256;
	p.device_path = device_path;
	p.plan = &r->plan;
	if (pg_forward_create(m, &p, &r->fw, err, sizeof(err))) {
		CHECK(0, "pg_forward_create, %d replicas: %s", n_rep, err);
		return -1;
	}
	r->kvc = pg_kvc_for_forward(r->fw, m);
	return r->kvc ? 0 : -1;
}

/*
 * K sequences of different lengths through replicas, all in each batch:
 * a prefill batch (every row's logits for some sequences, the last row's
 * for the others, so that a replica's rows are not one run of the
 * batch's), then greedy decode steps of all of them together.  Each
 * sequence must get one device's logits and tokens.
 */
#define RK 5
#define RGEN 8
static void check_replicas(const struct pg_model *m, struct rig *one,
			   int32_t prompts[][64], int n, int n_rep,
			   int device_path, const char *what)
{
	int V = m->hp.n_vocab, len[RK], rows = 0, zones[PG_PLAN_MAX_DEVICES] = { 0 };
	struct pg_kvc_seq *s[RK];
	struct pg_fw_seq fs[RK];
	int32_t toks[RK * 64], gen[RK][RGEN], want[RGEN];
	float *lg, *ref;
	struct rig r;

	if (make_replica_rig(&r, m, n_rep, device_path))
		return;
	CHECK(pg_forward_n_zones(r.fw) == n_rep && pg_kvc_n_zones(r.kvc) == n_rep &&
	      pg_forward_n_devices(r.fw) == n_rep,
	      "%d replicas: %d zones", n_rep, pg_forward_n_zones(r.fw));
	lg = malloc(sizeof(float) * (size_t)RK * 64 * V);
	for (int k = 0; k < RK; k++) {
		struct pg_kvc_copy cp[2];
		int n_cp;

		len[k] = n - 3 * k;
		s[k] = pg_kvc_seq_new(r.kvc, 0);
		CHECK(pg_kvc_seq_reserve(r.kvc, s[k], len[k], cp, &n_cp) == 0,
		      "reserve %d", k);
		zones[pg_kvc_seq_zone(s[k])]++;
		fs[k] = (struct pg_fw_seq){ .pages = pg_kvc_seq_pages(s[k]),
			.n_tokens = len[k], .logits_all = k % 2 };
		memcpy(toks + rows, prompts[k % 3] + k, sizeof(int32_t) * (size_t)len[k]);
		rows += len[k];
	}
	for (int z = 0; z < n_rep; z++)
		CHECK(zones[z] >= RK / n_rep, "%d replicas: zone %d holds %d of %d sequences",
		      n_rep, z, zones[z], RK);
	CHECK(pg_forward_batch(r.fw, toks, rows, fs, RK, lg) == 0, "prefill batch");
	rows = 0;
	for (int k = 0; k < RK; k++) {
		int n_out = fs[k].logits_all ? len[k] : 1;

		ref = prefill(one, m, prompts[k % 3] + k, len[k]);
		CHECK(!memcmp(lg + (size_t)rows * V,
			      ref + (size_t)(len[k] - n_out) * V,
			      sizeof(float) * (size_t)n_out * V),
		      "%s, %d replicas: sequence %d (zone %d) has other logits than one device's",
		      what, n_rep, k, pg_kvc_seq_zone(s[k]));
		free(ref);
		pg_kvc_seq_append(r.kvc, s[k], prompts[k % 3] + k, len[k]);
		rows += n_out;
	}
	for (int g = 0; g < RGEN; g++) {
		rows = 0;
		for (int k = 0; k < RK; k++) {
			const float *row = lg + (size_t)(rows + (fs[k].logits_all ?
					   fs[k].n_tokens - 1 : 0)) * V;
			int best = 0;
			struct pg_kvc_copy cp[2];
			int n_cp;

			for (int v = 1; v < V; v++)
				best = row[v] > row[best] ? v : best;
			rows += fs[k].logits_all ? fs[k].n_tokens : 1;
			gen[k][g] = best;
			CHECK(pg_kvc_seq_reserve(r.kvc, s[k], pg_kvc_seq_len(s[k]) + 1,
						 cp, &n_cp) == 0, "reserve");
			toks[k] = best;
		}
		for (int k = 0; k < RK; k++)
			fs[k] = (struct pg_fw_seq){ .pages = pg_kvc_seq_pages(s[k]),
				.n_past = pg_kvc_seq_len(s[k]), .n_tokens = 1 };
		CHECK(pg_forward_batch(r.fw, toks, RK, fs, RK, lg) == 0, "decode step");
		for (int k = 0; k < RK; k++)
			pg_kvc_seq_append(r.kvc, s[k], &toks[k], 1);
	}
	for (int k = 0; k < RK; k++) {
		greedy(one, m, prompts[k % 3] + k, len[k], RGEN, want);
		CHECK(!memcmp(want, gen[k], sizeof(want)),
		      "%s, %d replicas: sequence %d generates other tokens than one device",
		      what, n_rep, k);
	}
	/* every replica ran; a sequence's pages in two zones are refused */
	for (int i = 0; i < n_rep; i++) {
		struct pg_forward_dev_stats st;

		pg_forward_device_stats(r.fw, i, &st);
		CHECK(st.steps == 1 + RGEN, "replica %d ran %llu steps", i,
		      (unsigned long long)st.steps);
	}
	{
		int32_t bad[2] = { 0, N_PAGES - 1 };
		struct pg_fw_seq b = { .pages = bad, .n_tokens = PT + 1 };

		CHECK(pg_forward_batch(r.fw, toks, PT + 1, &b, 1, lg) == -EINVAL,
		      "a sequence whose pages span zones is refused");
	}
	for (int k = 0; k < RK; k++)
		pg_kvc_seq_free(r.kvc, s[k]);
	free(lg);
	free_rig(&r);
	printf("%s: %d replicas%s, %d sequences in each batch: one device's logits and greedy tokens\n",
	       what, n_rep, device_path ? " (device path)" : "", RK);
}

/* Several batches in flight give each its own result (PP micro-batches). */
static void check_inflight(const struct pg_model *m, struct rig *one,
			   int32_t prompts[][64], int n)
{
	static const struct shape sh = { 3, 1, 1 };
	int V = m->hp.n_vocab, inflight;
	struct rig r;
	struct pg_kvc_seq *s[3];
	struct pg_fw_seq fs[3];
	float *lg[3], *want;

	if (make_rig(&r, m, &sh, 64))
		return;
	inflight = pg_forward_max_inflight(r.fw);
	CHECK(inflight == 3, "pp 3 allows %d batches in flight", inflight);
	for (int k = 0; k < 3; k++) {
		struct pg_kvc_copy cp[2];
		int n_cp;

		s[k] = pg_kvc_seq_new(r.kvc, 0);
		CHECK(pg_kvc_seq_reserve(r.kvc, s[k], n, cp, &n_cp) == 0 &&
		      n_cp == 0, "reserve");
		fs[k] = (struct pg_fw_seq){ .pages = pg_kvc_seq_pages(s[k]),
			.n_tokens = n, .logits_all = 1 };
		lg[k] = malloc(sizeof(float) * (size_t)n * V);
		CHECK(pg_forward_submit(r.fw, prompts[k], n, &fs[k], 1, lg[k]) == 0,
		      "submit %d", k);
	}
	CHECK(pg_forward_submit(r.fw, prompts[0], n, &fs[0], 1, lg[0]) == -EBUSY,
	      "a fourth batch in flight is refused");
	for (int k = 0; k < 3; k++)
		CHECK(pg_forward_wait(r.fw) == 0, "wait %d", k);
	CHECK(pg_forward_wait(r.fw) == -ENOENT, "nothing left in flight");
	for (int k = 0; k < 3; k++) {
		want = prefill(one, m, prompts[k], n);
		CHECK(!memcmp(want, lg[k], sizeof(float) * (size_t)n * V),
		      "batch %d of 3 in flight differs from one device", k);
		free(want);
		free(lg[k]);
		pg_kvc_seq_free(r.kvc, s[k]);
	}
	free_rig(&r);
	printf("pp3 with 3 batches in flight: each equals one device\n");
}

/*
 * An injected failure fails one batch; the next one is right: bit for bit
 * what the same plan gave before any failure (so the failure left nothing
 * behind), and near one device's logits.
 */
static void check_fault(const struct pg_model *m, struct rig *one,
			int32_t prompts[][64], int n)
{
	static const struct shape shs[] = { { 2, 2, 1 }, { 1, 2, 2 } };
	int V = m->hp.n_vocab;

	for (size_t i = 0; i < sizeof(shs) / sizeof(shs[0]); i++) {
		struct rig r;
		float *want, *got, *before;
		int32_t pages[8];
		struct pg_fw_seq fs = { .pages = pages, .n_tokens = n,
					.logits_all = 1 };
		int nd, rc;

		if (make_rig(&r, m, &shs[i], 64))
			continue;
		for (int p = 0; p < 8; p++)
			pages[p] = p;
		got = malloc(sizeof(float) * (size_t)n * V);
		before = malloc(sizeof(float) * (size_t)n * V);
		rc = pg_forward_batch(r.fw, prompts[1], n, &fs, 1, before);
		CHECK(rc == 0, "the batch before any failure gives %d", rc);
		want = prefill(one, m, prompts[1], n);
		{
			double e = 0;

			for (size_t k = 0; k < (size_t)n * V; k++)
				e = fmax(e, fabs((double)want[k] - before[k]));
			CHECK(e < 0.1, "the plan's logits are off one device's by %.3g",
			      e);
		}
		free(want);
		nd = pg_forward_n_devices(r.fw);
		for (int dev = 0; dev < nd; dev++) {
			CHECK(pg_forward_inject_fault(r.fw, dev, 1) == 0, "inject");
			rc = pg_forward_batch(r.fw, prompts[0], n, &fs, 1, got);
			CHECK(rc == -EIO, "device %d failing: batch gives %d, expected -EIO",
			      dev, rc);
			rc = pg_forward_batch(r.fw, prompts[1], n, &fs, 1, got);
			CHECK(rc == 0, "the batch after a failure gives %d", rc);
			CHECK(!memcmp(got, before, sizeof(float) * (size_t)n * V),
			      "after a failure on device %d the next batch differs from the same plan's before it",
			      dev);
		}
		free(before);
		free(got);
		free_rig(&r);
	}
	printf("injected device failures: the batch fails with -EIO, the next one is right\n");
}

/* The figures: steps, communication counted. */
static void check_stats(const struct pg_model *m, int32_t prompts[][64], int n)
{
	static const struct shape sh = { 2, 2, 1 };
	struct rig r;
	float *lg;

	if (make_rig(&r, m, &sh, 64))
		return;
	lg = prefill(&r, m, prompts[0], n);
	free(lg);
	for (int i = 0; i < pg_forward_n_devices(r.fw); i++) {
		struct pg_forward_dev_stats st;

		pg_forward_device_stats(r.fw, i, &st);
		CHECK(st.steps >= 1 && st.busy_ns > 0, "device %d ran nothing", i);
		/*
		 * CPU TP gathers partial sums: 2 all-gathers per block, and
		 * the last stage's output head's; no all-reduce
		 */
		CHECK(st.n_all_reduce == 0 && st.n_all_gather ==
		      (2 * (uint64_t)st.n_blocks + (st.stage == 1)) * st.steps,
		      "device %d: %llu all-reduces and %llu all-gathers for %d blocks",
		      i, (unsigned long long)st.n_all_reduce,
		      (unsigned long long)st.n_all_gather, st.n_blocks);
		CHECK(st.stage == 0 ? st.n_send == st.steps : st.n_recv == st.steps,
		      "device %d: stage hand-offs not counted", i);
		CHECK(st.bytes > 0, "device %d: no bytes counted", i);
	}
	free_rig(&r);
}

/* Variants of a generated model (gen_model's flags). */
enum {
	V_HEAD_DIM = 1,		/* head size 64, not hidden / heads (32) */
	V_ROPE_FREQS = 2,	/* rope_freqs.weight (Llama 3.1+) */
	V_Q4_K_M = 4,		/* llama.cpp's Q4_K_M mix on 256-wide rows */
};

static struct pg_model *gen_model(enum ggufgen_arch arch, enum pg_dtype type,
				  int flags, char *path)
{
	struct ggufgen_opts o;
	struct pg_model *m = NULL;
	char err[512];
	int fd = mkstemp(path);

	close(fd);
	ggufgen_preset(&o, "tiny");
	o.arch = arch;
	o.qkv_bias = arch == GGUFGEN_QWEN2;
	o.type = type;
	o.embd_type = type;
	o.n_blocks = 5;
	o.hidden = 192;		/* 6 heads of 32 */
	o.n_heads = 6;
	o.n_kv_heads = 3;	/* TP 2: KV head 1 on both ranks */
	o.ffn = 224;		/* 7 blocks of 32: uneven TP splits */
	o.n_vocab = 301;	/* uneven vocabulary slices */
	o.untied = 1;
	o.head_dim = flags & V_HEAD_DIM ? 64 : 0;
	o.rope_freqs = !!(flags & V_ROPE_FREQS);
	if (flags & V_Q4_K_M) {
		/*
		 * K-quant rows are 256 wide: heads of 256 (so that Wo's
		 * columns split at any head), 5 blocks of FFN for uneven TP
		 */
		o.type = PG_Q4_K;
		o.mix_q4_k_m = 1;
		o.embd_type = PG_Q8_0;
		o.hidden = 256;
		o.n_heads = 4;
		o.n_kv_heads = 2;
		o.head_dim = 256;
		o.ffn = 1280;
	}
	/*
	 * The Gemma family: windows of 12 over prompts of 40 (cut inside
	 * pages and CP shares), 7 blocks so that Gemma 3's block 5 is global,
	 * post-norms after exact TP sums, Gemma 2's soft-caps.
	 */
	if (arch == GGUFGEN_GEMMA2 || arch == GGUFGEN_GEMMA3) {
		o.sliding_window = 12;
		o.n_blocks = 7;
	}
	if (arch == GGUFGEN_PHI3)
		o.rope_dim = 16;	/* partial rotary: half of each head */
	if (arch == GGUFGEN_GEMMA2) {
		o.attn_softcap = 3.0f;
		o.final_softcap = 2.5f;
	}
	if (ggufgen_write(&o, path, err, sizeof(err)) ||
	    pg_model_load(path, 0, &m, err, sizeof(err))) {
		CHECK(0, "model: %s", err);
		unlink(path);
		return NULL;
	}
	return m;
}

static void run_generated(enum ggufgen_arch arch, enum pg_dtype type,
			  int flags, double logit_tol, double tie_tol)
{
	char path[] = "/tmp/pagoda-test-parallel-XXXXXX", what[64];
	static int32_t prompts[3][64];
	struct pg_model *m = gen_model(arch, type, flags, path);
	struct rig one;

	if (!m)
		return;
	snprintf(what, sizeof(what), "%s%s%s %s", pg_arch_name(m->hp.arch),
		 flags & V_HEAD_DIM ? "+hd64" : "",
		 flags & V_ROPE_FREQS ? "+rope_freqs" : "",
		 flags & V_Q4_K_M ? "Q4_K_M" : pg_dtype_name(type));
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 64; i++)
			prompts[k][i] = (int32_t)((i * 37 + k * 101 + 11) % m->hp.n_vocab);
	if (make_rig(&one, m, NULL, 64) == 0) {
		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
			compare_plan(m, &one, &shapes[i], prompts, 3, 40, 16,
				     0, 0, what);
		for (size_t i = 0; i < sizeof(approx_shapes) / sizeof(approx_shapes[0]); i++)
			compare_plan(m, &one, &approx_shapes[i], prompts, 3, 40,
				     16, logit_tol, tie_tol, what);
		/*
		 * The GPU sums in other orders, and its prefill multiplies F16
		 * activations where the CPU quantises them to 8 bits, so
		 * quantised models' logits move by the quantisation noise.
		 */
		/* the CUDA backend has no RoPE frequency factors (refused) */
		if (have_gpu() && !(flags & V_ROPE_FREQS))
			compare_plan(m, &one, &gpu_shape, prompts, 3, 40, 16,
				     type == PG_F32 ? logit_tol : 2.0,
				     tie_tol, what);
		if (type == PG_Q8_0 || type == PG_Q4_1)
			check_device_path(m, &one, prompts, 40, what);
		if (type == PG_Q4_1 || arch == GGUFGEN_GEMMA3) {
			check_replicas(m, &one, prompts, 40, 2, 0, what);
			check_replicas(m, &one, prompts, 40, 3, type == PG_Q4_1, what);
		}
		if (type == PG_Q8_0 && arch == GGUFGEN_LLAMA) {
			check_inflight(m, &one, prompts, 40);
			check_numa_weights(m, &one, prompts, 40);
			check_fault(m, &one, prompts, 40);
			check_stats(m, prompts, 40);
		}
		free_rig(&one);
	}
	pg_model_free(m);
	unlink(path);
}

static void run_default_model(void)
{
	char buf[4096], err[512];
	const char *path = pg_model_default_path(buf, sizeof(buf));
	static const struct shape dshapes[] = {
		{ 2, 1, 1 }, { 3, 1, 1 }, { 1, 2, 1 }, { 1, 3, 1 }, { 2, 2, 1 },
		{ 1, 1, 2 },
	};
	/* long enough (40+ tokens) that CP ranks each hold part of them */
	static const char *texts[] = {
		"The capital of France is Paris, and the capital of Italy is Rome. "
		"Spain's capital is Madrid, Portugal's is Lisbon, and the capital "
		"of Germany is",
		"def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number, "
		"computed iteratively so that large n does not overflow the "
		"stack.\"\"\"\n",
		"<|im_start|>user\nWhat is a pagoda, and why do pagodas have an "
		"odd number of floors? Answer in two sentences.<|im_end|>\n"
		"<|im_start|>assistant\n",
	};
	static int32_t prompts[3][64];
	struct pg_model *m;
	struct rig one;
	int n = 64;

	if (access(path, R_OK)) {
		printf("default model not found (%s): its cases skipped\n", path);
		return;
	}
	if (pg_model_load(path, 0, &m, err, sizeof(err))) {
		CHECK(0, "%s", err);
		return;
	}
	for (int k = 0; k < 3; k++) {
		int32_t ids[64];
		int got = (int)pg_tokenize(m->tok, texts[k], strlen(texts[k]),
					   pg_tokenizer_add_bos(m->tok), 1,
					   ids, 64);

		CHECK(got > 0, "tokenize");
		n = got < n ? got : n;
		memcpy(prompts[k], ids, sizeof(int32_t) * (size_t)(got > 0 ? got : 0));
	}
	if (make_rig(&one, m, NULL, 64) == 0) {
		for (size_t i = 0; i < sizeof(dshapes) / sizeof(dshapes[0]); i++)
			compare_plan(m, &one, &dshapes[i], prompts, 3, n, 24,
				     0, 0, "SmolLM2");
		if (have_gpu())
			compare_plan(m, &one, &gpu_shape, prompts, 3, n, 24, 2.5,
				     0.5, "SmolLM2");
		check_replicas(m, &one, prompts, n, 2, 0, "SmolLM2");
		free_rig(&one);
	}
	pg_model_free(m);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/*
	 * Every CPU plan is held to one device's bits.  The tolerances are
	 * cuda:0's, where a GPU is present: F32 weights keep every
	 * difference at rounding size (1e-5); 8-bit activations turn a
	 * last-bit difference into a flipped rounding now and then, so those
	 * logits move by up to a few tenths, and greedy runs may part only
	 * where two tokens nearly tie.
	 */
	run_generated(GGUFGEN_LLAMA, PG_F32, 0, 1e-3, 1e-3);
	run_generated(GGUFGEN_QWEN2, PG_F32, 0, 1e-3, 1e-3);
	run_generated(GGUFGEN_QWEN3, PG_F32, V_HEAD_DIM, 1e-3, 1e-3);
	run_generated(GGUFGEN_LLAMA, PG_F32, V_ROPE_FREQS, 1e-3, 1e-3);
	run_generated(GGUFGEN_LLAMA, PG_Q8_0, 0, 0.5, 0.25);
	run_generated(GGUFGEN_QWEN2, PG_Q4_1, 0, 0.5, 0.25);
	run_generated(GGUFGEN_QWEN3, PG_Q8_0, V_HEAD_DIM, 0.5, 0.25);
	run_generated(GGUFGEN_LLAMA, PG_Q4_1, V_ROPE_FREQS, 0.5, 0.25);
	/* GELU's F16 steps flip now and then as 8-bit roundings do, only
	 * 2^-11 large: measured 1.1e-3 */
	run_generated(GGUFGEN_GEMMA3, PG_F32, V_HEAD_DIM, 3e-3, 3e-3);
	run_generated(GGUFGEN_GEMMA2, PG_F32, 0, 3e-3, 3e-3);
	run_generated(GGUFGEN_GEMMA3, PG_Q8_0, V_HEAD_DIM, 0.5, 0.25);
	run_generated(GGUFGEN_PHI3, PG_Q8_0, 0, 0.5, 0.25);
	run_generated(GGUFGEN_QWEN2, PG_Q4_K, V_Q4_K_M, 0.5, 0.25);
	run_default_model();
	if (failures) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("all parallel plans agree with one device\n");
	return 0;
}
