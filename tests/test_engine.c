/*
 * test_engine.c - the serving engine's scheduler on a generated tiny model,
 * greedy sampling throughout:
 *
 *  - batch invariance: 32 varied requests with staggered arrival and
 *    chunked prefill give exactly the tokens each gives alone;
 *  - prefix cache: a second request sharing a long prefix computes only
 *    its new tokens and gives the same tokens as with the cache off;
 *  - memory pressure: a pool far too small for the load still completes
 *    every request unchanged, with preemptions, and ends with no page used;
 *  - cancellation mid-prefill and mid-decode frees everything;
 *  - n = 3 samples share the prompt's pages and agree;
 *  - a request too large for the pool is refused at submission;
 *  - fairness: one request of client B is not starved by 20 of client A;
 *    within a client, priority goes first;
 *  - a stop token ends generation before it;
 *  - a grammar that allows no token ends its samples with finish
 *    "grammar" (drawn lazily, and masked first), counted, its text the
 *    prefix it had, while a request beside it in the batch is unchanged;
 *  - steps bounded by cost (under a known, injected cost): the step cost
 *    model recovers a linear cost; next to decoding streams a long
 *    prompt is spread over chunks that keep each step under twice the
 *    decodes' own, and still gives its tokens; alone it is cut by
 *    max_batch_tokens only; an explicit target below the decodes' step
 *    still lets it progress PG_ENGINE_MIN_CHUNK tokens a step.
 *
 * It does not check the forward pass's numbers (test_forward does).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/stepcost.h"
#include "daemon/engine/tokenizer.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"

#define MAX_REQ 64
#define MAX_GEN 64
#define MAX_N 3

/* What the events said, indexed by request id - 1 (ids start at 1). */
struct result {
	int32_t toks[MAX_N][MAX_GEN];
	int n_toks[MAX_N];
	int done[MAX_N];
	enum pg_engine_finish finish[MAX_N];
	struct pg_request_figures fig[MAX_N];
	int done_rank;			/* order of the last DONE */
};

struct results {
	struct result r[MAX_REQ];
	int n_done;
	int bad;			/* events that made no sense */
};

static void on_event(void *ctx, const struct pg_engine_event *ev)
{
	struct results *rs = ctx;
	struct result *r;

	if (ev->id < 1 || ev->id > MAX_REQ || ev->sample < 0 || ev->sample >= MAX_N) {
		rs->bad++;
		return;
	}
	r = &rs->r[ev->id - 1];
	if (r->done[ev->sample]) {
		rs->bad++;
		return;
	}
	if (ev->type == PG_ENGINE_EV_TOKEN) {
		if (r->n_toks[ev->sample] < MAX_GEN)
			r->toks[ev->sample][r->n_toks[ev->sample]++] = ev->token;
		return;
	}
	r->done[ev->sample] = 1;
	r->finish[ev->sample] = ev->finish;
	r->fig[ev->sample] = *ev->fig;
	if (ev->last)
		r->done_rank = ++rs->n_done;
}

/* ---- set-up ---- */

static struct pg_model *make_model(void)
{
	char path[] = "/tmp/pagoda-test-engine-XXXXXX";
	struct ggufgen_opts o;
	struct pg_model *m = NULL;
	char err[256];
	int fd = mkstemp(path);

	if (fd < 0)
		return NULL;
	close(fd);
	ggufgen_preset(&o, "tiny");
	o.seed = 7;
	if (ggufgen_write(&o, path, err, sizeof(err)) ||
	    pg_model_load(path, 0, &m, err, sizeof(err)))
		fprintf(stderr, "model: %s\n", err);
	unlink(path);
	return m;
}

/*
 * The parallel plan the engine's forward passes run under: none, or
 * $PAGODA_TEST_PLAN = "PPxTPxCP" (e.g. "2x2x1") one-thread CPU devices,
 * so that every test here also runs under a pipeline and TP plan.
 */
static struct pg_plan test_plan;
static int have_plan;

static void read_plan(const struct pg_model *m)
{
	const char *v = getenv("PAGODA_TEST_PLAN");
	int pp, tp, cp, reps = 1;

	/* "PPxTPxCP", or "PPxTPxCPrR": R replicas of it */
	if (!v || sscanf(v, "%dx%dx%dr%d", &pp, &tp, &cp, &reps) < 3)
		return;
	test_plan = (struct pg_plan){ .pp = pp, .tp = tp, .cp = cp,
				      .replicas = reps,
				      .n_devices = reps * pp * tp * cp };
	for (int i = 0; i < test_plan.n_devices; i++) {
		test_plan.dev[i].kind = PG_DEV_CPU;
		snprintf(test_plan.dev[i].name, sizeof(test_plan.dev[i].name),
			 "cpu:%d", i);
		test_plan.dev[i].n_threads = 1;
		test_plan.dev[i].numa_node = -1;
	}
	for (int s = 0; s <= pp; s++)
		test_plan.first_block[s] = s * m->hp.n_blocks / pp;
	have_plan = 1;
	printf("engine tests under plan %d replica(s) of pp %d × tp %d × cp %d\n",
	       reps, pp, tp, cp);
}

static struct pg_forward *make_fw(const struct pg_model *m, int n_pages,
				  int page_tokens)
{
	struct pg_forward_params p = pg_forward_params_default();
	struct pg_forward *fw = NULL;
	char err[256];

	p.n_threads = 1;
	p.max_batch_tokens = 64;
	/* replicas: every zone as large as the pool the test asks for */
	p.n_pages = n_pages * (have_plan ? pg_plan_n_replicas(&test_plan) : 1);
	p.page_tokens = page_tokens;
	if (have_plan)
		p.plan = &test_plan;
	if (pg_forward_create(m, &p, &fw, err, sizeof(err)))
		fprintf(stderr, "forward: %s\n", err);
	return fw;
}

/* The injected cost: 2 ms a step, 0.1 ms a token, 0.5 ms a sequence,
   2 us a token-position of attention. */
static double known_cost(const struct pg_fw_seq *seqs, int n_seqs)
{
	double t = 2e-3;

	for (int i = 0; i < n_seqs; i++) {
		double n = seqs[i].n_tokens;

		t += 1e-4 * n + 5e-4 + 2e-6 * n * (seqs[i].n_past + (n + 1) / 2);
	}
	return t;
}

/* The engines' clock: known_cost, so that the step bound plans the same
   batches on every run and host. */
static double fixed_seconds(void *ctx, const struct pg_fw_seq *seqs,
			    int n_seqs)
{
	(void)ctx;
	return known_cost(seqs, n_seqs);
}

static struct pg_engine *make_engine(const struct pg_model *m,
				     struct pg_forward *fw, int max_tokens,
				     int max_seqs, int cache, struct results *rs)
{
	struct pg_engine_config c = pg_engine_config_default();
	struct pg_engine *e = NULL;
	char err[256];

	c.max_batch_tokens = max_tokens;
	c.max_batch_seqs = max_seqs;
	c.prefix_cache = cache;
	c.batch_seconds = fixed_seconds;
	c.on_event = on_event;
	c.ctx = rs;
	memset(rs, 0, sizeof(*rs));
	if (pg_engine_create(m, fw, &c, &e, err, sizeof(err)))
		fprintf(stderr, "engine: %s\n", err);
	return e;
}

static void run_idle(struct pg_engine *e)
{
	int guard = 0;

	while (!pg_engine_idle(e) && guard++ < 100000)
		CHECK(pg_engine_step(e) >= 0, "step: %s", pg_engine_last_error(e));
	CHECK(pg_engine_idle(e), "the engine never went idle");
}

/* A request's prompt: len ids drawn from seed, above the control tokens. */
static void make_prompt(int32_t *out, int len, uint32_t seed)
{
	for (int i = 0; i < len; i++) {
		seed = seed * 1664525u + 1013904223u;
		out[i] = 3 + (int32_t)((seed >> 8) % 300);
	}
}

static struct pg_request request(const int32_t *prompt, int n, int max_tokens)
{
	return (struct pg_request){ .prompt = prompt, .n_prompt = n,
				    .sampling = pg_sampling_default(),
				    .max_tokens = max_tokens };
}

/* Whether every used page is back: none used, the rest free or cached. */
static void check_pool_back(struct pg_engine *e, const char *what)
{
	struct pg_kvc_stats st;
	char err[256];

	pg_kvc_get_stats(pg_engine_kvc(e), &st);
	CHECK(st.n_used == 0 && st.n_free + st.n_cached == st.n_pages,
	      "%s: %d pages used, %d free, %d cached of %d", what, st.n_used,
	      st.n_free, st.n_cached, st.n_pages);
	CHECK(pg_kvc_check(pg_engine_kvc(e), err, sizeof(err)) == 0, "%s: %s",
	      what, err);
}

/* The tokens req gives alone, on a fresh engine with the cache off. */
static void run_alone(const struct pg_model *m, struct pg_forward *fw,
		      const struct pg_request *req, struct result *out)
{
	static struct results rs;
	struct pg_engine *e = make_engine(m, fw, 16, 8, 0, &rs);
	uint64_t id;

	CHECK(e && pg_engine_submit(e, req, &id) == 0, "alone: submit");
	run_idle(e);
	*out = rs.r[0];
	pg_engine_destroy(e);
}

static int same_tokens(const struct result *a, const struct result *b, int s)
{
	return a->n_toks[s] == b->n_toks[s] &&
	       !memcmp(a->toks[s], b->toks[s], sizeof(int32_t) * (size_t)a->n_toks[s]);
}

/* ---- the tests ---- */

struct load {
	int32_t prompt[MAX_REQ][64];
	struct pg_request req[MAX_REQ];
	int n;
};

static void make_load(struct load *l, int n, int max_prompt, int max_gen)
{
	l->n = n;
	for (int i = 0; i < n; i++) {
		int len = 1 + (i * 37) % max_prompt;

		make_prompt(l->prompt[i], len, 100u + (uint32_t)i);
		l->req[i] = request(l->prompt[i], len, 1 + (i * 13) % max_gen);
	}
}

/* Run a load through e, submitting `per` requests every `every` steps. */
static void run_load(struct pg_engine *e, const struct load *l, int per,
		     int every)
{
	int next = 0, step = 0;
	uint64_t id;

	while (next < l->n || !pg_engine_idle(e)) {
		for (int k = 0; k < per && next < l->n && step % every == 0; k++, next++)
			CHECK(pg_engine_submit(e, &l->req[next], &id) == 0 &&
			      id == (uint64_t)next + 1, "submit %d: %s", next,
			      pg_engine_last_error(e));
		CHECK(pg_engine_step(e) >= 0, "step: %s", pg_engine_last_error(e));
		if (++step > 100000)
			break;
	}
}

static void check_against_alone(const struct pg_model *m, struct pg_forward *fw,
				const struct load *l, const struct results *rs,
				const char *what)
{
	static struct result alone;

	CHECK(rs->bad == 0, "%s: %d stray events", what, rs->bad);
	for (int i = 0; i < l->n; i++) {
		const struct result *r = &rs->r[i];

		run_alone(m, fw, &l->req[i], &alone);
		CHECK(r->fig[0].n_prompt == l->req[i].n_prompt &&
		      r->fig[0].n_gen == r->n_toks[0] && r->fig[0].queue_s >= 0 &&
		      (!r->n_toks[0] || r->fig[0].ttft_s >= r->fig[0].queue_s),
		      "%s: request %d: figures wrong", what, i);
		CHECK(r->done[0] && r->finish[0] == alone.finish[0] &&
		      same_tokens(r, &alone, 0),
		      "%s: request %d (prompt %d, max %d): %d tokens, alone %d",
		      what, i, l->req[i].n_prompt, l->req[i].max_tokens,
		      r->n_toks[0], alone.n_toks[0]);
	}
}

static void test_batch_invariance(const struct pg_model *m)
{
	static struct load l;
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 1024, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 8, 1, &rs) : NULL;
	struct pg_engine_stats st;

	CHECK(e, "batch: set-up");
	if (!e)
		goto out;
	make_load(&l, 32, 60, 40);
	run_load(e, &l, 3, 2);
	pg_engine_stats(e, &st);
	CHECK(st.n_done == 32 && st.generated_tokens > 32 * 8,
	      "batch: %llu done, %llu tokens", (unsigned long long)st.n_done,
	      (unsigned long long)st.generated_tokens);
	CHECK(st.steps < st.generated_tokens / 3, "batch: %llu steps for %llu tokens: little batching",
	      (unsigned long long)st.steps, (unsigned long long)st.generated_tokens);
	fprintf(stderr, "batch: %llu steps, %llu tokens computed for %llu generated\n",
		(unsigned long long)st.steps, (unsigned long long)st.forward_tokens,
		(unsigned long long)st.generated_tokens);
	check_against_alone(m, fw, &l, &rs, "batch");
	check_pool_back(e, "batch");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

static void test_prefix_cache(const struct pg_model *m)
{
	static struct results rs;
	static struct result alone;
	struct pg_forward *fw = make_fw(m, 256, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 8, 1, &rs) : NULL;
	struct pg_engine_stats a, b;
	int32_t p1[50], p2[50];
	struct pg_request r1 = request(p1, 45, 6), r2 = request(p2, 47, 6);
	uint64_t id;

	CHECK(e, "prefix: set-up");
	if (!e)
		goto out;
	make_prompt(p1, 50, 1);
	memcpy(p2, p1, sizeof(int32_t) * 40);
	make_prompt(p2 + 40, 10, 2);
	CHECK(pg_engine_submit(e, &r1, &id) == 0, "prefix: submit 1");
	run_idle(e);
	pg_engine_stats(e, &a);
	CHECK(pg_engine_submit(e, &r2, &id) == 0, "prefix: submit 2");
	run_idle(e);
	pg_engine_stats(e, &b);
	/* 40 shared tokens are 10 full pages: 7 prompt tokens are computed,
	 * then each generated token but the last */
	CHECK(b.cached_tokens - a.cached_tokens == 40, "prefix: %llu cached",
	      (unsigned long long)(b.cached_tokens - a.cached_tokens));
	CHECK(rs.r[1].n_toks[0] >= 1 && b.forward_tokens - a.forward_tokens ==
	      (uint64_t)(7 + rs.r[1].n_toks[0] - 1),
	      "prefix: %llu tokens computed for %d generated",
	      (unsigned long long)(b.forward_tokens - a.forward_tokens),
	      rs.r[1].n_toks[0]);
	CHECK(rs.r[1].fig[0].n_cached == 40, "prefix: figures say %d cached",
	      rs.r[1].fig[0].n_cached);
	run_alone(m, fw, &r2, &alone);
	CHECK(same_tokens(&rs.r[1], &alone, 0), "prefix: tokens differ from the cache off");
	CHECK(pg_engine_evict(e, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL }) ==
	      (int)b.kv.n_cached, "prefix: evict all");
	pg_engine_stats(e, &b);
	CHECK(b.kv.n_cached == 0 && b.kv.n_free == b.kv.n_pages, "prefix: %d cached after evict",
	      b.kv.n_cached);
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

static void test_memory_pressure(const struct pg_model *m)
{
	static struct load l;
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 24, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 8, 1, &rs) : NULL;
	struct pg_engine_stats st;

	CHECK(e, "pressure: set-up");
	if (!e)
		goto out;
	make_load(&l, 16, 50, 40);
	for (int i = 0; i < l.n; i++)	/* force long generations */
		l.req[i].ignore_eos = 1;
	run_load(e, &l, 16, 1);
	pg_engine_stats(e, &st);
	CHECK(st.preemptions > 0, "pressure: no preemption");
	CHECK(st.n_done == (uint64_t)l.n && st.n_failed == 0,
	      "pressure: %llu done, %llu failed", (unsigned long long)st.n_done,
	      (unsigned long long)st.n_failed);
	check_pool_back(e, "pressure");
	check_against_alone(m, fw, &l, &rs, "pressure");
	fprintf(stderr, "pressure: %llu preemptions, %llu tokens computed for %llu generated\n",
		(unsigned long long)st.preemptions,
		(unsigned long long)st.forward_tokens,
		(unsigned long long)st.generated_tokens);
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

static void test_cancel(const struct pg_model *m)
{
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 128, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 8, 1, &rs) : NULL;
	struct pg_request r1, r2;
	struct pg_engine_stats st;
	int32_t p[60];
	uint64_t a, b;

	CHECK(e, "cancel: set-up");
	if (!e)
		goto out;
	make_prompt(p, 60, 9);
	r1 = request(p, 60, 20);
	r2 = request(p + 30, 10, 30);
	r2.ignore_eos = 1;
	CHECK(pg_engine_submit(e, &r1, &a) == 0 && pg_engine_submit(e, &r2, &b) == 0,
	      "cancel: submit");
	pg_engine_step(e);
	CHECK(pg_engine_cancel(e, a) == 0, "cancel: mid-prefill");
	/* a sample in a batch in flight ends when its batch does */
	for (int i = 0; i < 8 && !rs.r[0].done[0]; i++)
		pg_engine_step(e);
	CHECK(rs.r[0].done[0] && rs.r[0].finish[0] == PG_ENGINE_FINISH_CANCELLED &&
	      rs.r[0].n_toks[0] == 0, "cancel: no cancelled event mid-prefill");
	for (int i = 0; i < 100 && rs.r[1].n_toks[0] < 3; i++)
		pg_engine_step(e);
	CHECK(rs.r[1].n_toks[0] == 3, "cancel: decode did not start");
	CHECK(pg_engine_cancel(e, b) == 0, "cancel: mid-decode");
	for (int i = 0; i < 8 && !rs.r[1].done[0]; i++)
		pg_engine_step(e);
	CHECK(rs.r[1].done[0] && rs.r[1].finish[0] == PG_ENGINE_FINISH_CANCELLED,
	      "cancel: no cancelled event mid-decode");
	CHECK(pg_engine_cancel(e, b) == PG_ENGINE_ENOENT, "cancel: twice");
	CHECK(pg_engine_idle(e) && pg_engine_step(e) == 0, "cancel: not idle");
	pg_engine_stats(e, &st);
	CHECK(st.n_cancelled == 2, "cancel: %llu cancelled",
	      (unsigned long long)st.n_cancelled);
	check_pool_back(e, "cancel");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

static void test_parallel_samples(const struct pg_model *m)
{
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 128, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 8, 1, &rs) : NULL;
	struct pg_request r;
	struct pg_kvc_stats st;
	int32_t p[20];
	int max_used = 0;
	uint64_t id;

	CHECK(e, "n=3: set-up");
	if (!e)
		goto out;
	make_prompt(p, 20, 11);
	r = request(p, 18, 8);	/* the last prompt page is shared part-full */
	r.ignore_eos = 1;
	r.n = 3;
	CHECK(pg_engine_submit(e, &r, &id) == 0, "n=3: submit");
	while (!pg_engine_idle(e)) {
		pg_engine_step(e);
		pg_kvc_get_stats(pg_engine_kvc(e), &st);
		max_used = st.n_used > max_used ? st.n_used : max_used;
	}
	CHECK(max_used < 3 * 5, "n=3: %d pages used at most (prompt: 5)", max_used);
	CHECK(st.cow_copies >= 2, "n=3: %llu pages copied on write",
	      (unsigned long long)st.cow_copies);
	for (int s = 0; s < 3; s++)
		CHECK(rs.r[0].done[s] && rs.r[0].n_toks[s] == 8 &&
		      !memcmp(rs.r[0].toks[s], rs.r[0].toks[0], sizeof(int32_t) * 8),
		      "n=3: sample %d differs", s);
	CHECK(rs.r[0].done_rank == 1, "n=3: request not done once");
	check_pool_back(e, "n=3");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

static void test_refusal(const struct pg_model *m)
{
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 8, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 8, 1, &rs) : NULL;
	int32_t p[30];
	struct pg_request r = request(p, 30, 2);
	uint64_t id;

	CHECK(e, "refusal: set-up");
	if (!e)
		goto out;
	make_prompt(p, 30, 3);
	CHECK(pg_engine_submit(e, &r, &id) == 0, "refusal: 32 tokens fit 8 pages of 4");
	r.max_tokens = 3;
	CHECK(pg_engine_submit(e, &r, &id) == PG_ENGINE_ETOOBIG &&
	      strstr(pg_engine_last_error(e), "pages"),
	      "refusal: not refused (%s)", pg_engine_last_error(e));
	r.n_prompt = 0;
	CHECK(pg_engine_submit(e, &r, &id) == PG_ENGINE_EINVAL, "refusal: empty prompt");
	run_idle(e);
	CHECK(rs.r[0].done[0], "refusal: the request that fits did not run");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

static void test_fairness(const struct pg_model *m)
{
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 256, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 2, 1, &rs) : NULL;
	int32_t p[21][8];
	struct pg_request r;
	uint64_t id;

	CHECK(e, "fairness: set-up");
	if (!e)
		goto out;
	for (int i = 0; i < 21; i++) {
		make_prompt(p[i], 8, 50u + (uint32_t)i);
		r = request(p[i], 8, 10);
		r.ignore_eos = 1;
		r.client = i < 20 ? 1 : 2;
		CHECK(pg_engine_submit(e, &r, &id) == 0, "fairness: submit");
	}
	run_idle(e);
	CHECK(rs.r[20].done_rank && rs.r[20].done_rank <= 5,
	      "fairness: client B's request finished %d of 21", rs.r[20].done_rank);
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

/* Within a client, a higher priority is admitted first. */
static void test_priority(const struct pg_model *m)
{
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 64, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 1, 1, &rs) : NULL;
	int32_t p[8];
	struct pg_request r;
	uint64_t id;

	CHECK(e, "priority: set-up");
	if (!e)
		goto out;
	make_prompt(p, 8, 5);
	for (int i = 0; i < 3; i++) {
		r = request(p, 8, 4);
		r.ignore_eos = 1;
		r.priority = i == 2 ? 5 : 0;
		CHECK(pg_engine_submit(e, &r, &id) == 0, "priority: submit");
	}
	run_idle(e);
	CHECK(rs.r[2].done_rank == 1, "priority: finished %d of 3", rs.r[2].done_rank);
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

/* A stop token ends generation before it, with finish "stop". */
static void test_stop_ids(const struct pg_model *m)
{
	static struct result alone;
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 64, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 16, 4, 1, &rs) : NULL;
	int32_t p[10], stop;
	struct pg_request r;
	uint64_t id;
	int at = 0;

	CHECK(e, "stop: set-up");
	if (!e)
		goto out;
	make_prompt(p, 10, 21);
	r = request(p, 10, 12);
	r.ignore_eos = 1;
	run_alone(m, fw, &r, &alone);
	stop = alone.toks[0][5];
	while (alone.toks[0][at] != stop)
		at++;
	r.stop_ids = &stop;
	r.n_stop_ids = 1;
	CHECK(pg_engine_submit(e, &r, &id) == 0, "stop: submit");
	run_idle(e);
	CHECK(rs.r[0].finish[0] == PG_ENGINE_FINISH_STOP && rs.r[0].n_toks[0] == at,
	      "stop: %s after %d tokens, want stop after %d",
	      pg_engine_finish_name(rs.r[0].finish[0]), rs.r[0].n_toks[0], at);
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

/* The text of sample s of r, as the tokenizer spells its tokens. */
static void result_text(const struct pg_model *m, const struct result *r, int s,
			char *out, size_t cap)
{
	size_t len = 0;

	for (int i = 0; i < r->n_toks[s]; i++) {
		int n = pg_token_to_piece(m->tok, r->toks[s][i], 0, out + len,
					  cap - 1 - len);

		if (n > 0 && (size_t)n <= cap - 1 - len)
			len += (size_t)n;
	}
	out[len] = 0;
}

/* One grammar-stuck request: its samples' finish, and the text each had. */
static void check_stuck(const struct pg_model *m, const struct result *r, int n,
			const char *want, const char *what)
{
	char text[MAX_GEN * 16];

	for (int s = 0; s < n; s++) {
		result_text(m, r, s, text, sizeof(text));
		CHECK(r->done[s] && r->finish[s] == PG_ENGINE_FINISH_GRAMMAR &&
		      r->fig[s].n_gen == r->n_toks[s] && !strcmp(text, want),
		      "%s: sample %d finished %s after \"%s\", want grammar after \"%s\"",
		      what, s, pg_engine_finish_name(r->finish[s]), text, want);
	}
}

/*
 * Grammars that allow no token.  Every character is a token of the tiny
 * model's byte-level vocabulary, so the two ways left: an ambiguous
 * grammar whose parses double with every "a" (after eleven, any token
 * would pass PG_GRAMMAR_MAX_STACKS), drawn lazily (greedy, n = 2) and
 * masked first (top-k); and the empty grammar under ignore_eos (only
 * end-of-generation would fit).  An unconstrained request runs in the
 * same batches and gives what it gives alone.
 */
static void test_grammar_stuck(const struct pg_model *m)
{
	static const char ambiguous[] = "root ::= \"x\" e\ne ::= \"a\" e \"b\" | \"a\" e \"c\"\n";
	static const char empty[] = "root ::= \"\"\n";
	static struct result alone;
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 256, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 64, 8, 0, &rs) : NULL;
	struct pg_request r[4];
	struct pg_engine_stats st;
	int32_t p[12];
	uint64_t id;

	CHECK(e, "grammar stuck: set-up");
	if (!e)
		goto out;
	make_prompt(p, 12, 77);
	for (int i = 0; i < 4; i++)
		r[i] = request(p, 12, 32);
	r[0].grammar = ambiguous;
	r[0].grammar_len = strlen(ambiguous);
	r[0].n = 2;
	r[1] = r[0];
	r[1].n = 1;
	r[1].sampling.temperature = 1.0f;
	r[1].sampling.top_k = 5;
	r[1].sampling.seed = 3;
	r[2].grammar = empty;
	r[2].grammar_len = strlen(empty);
	r[2].ignore_eos = 1;
	r[3].ignore_eos = 1;
	run_alone(m, fw, &r[3], &alone);
	for (int i = 0; i < 4; i++)
		CHECK(pg_engine_submit(e, &r[i], &id) == 0, "grammar stuck: submit %d: %s",
		      i, pg_engine_last_error(e));
	run_idle(e);
	check_stuck(m, &rs.r[0], 2, "xaaaaaaaaaaa", "grammar stuck (lazy)");
	check_stuck(m, &rs.r[1], 1, "xaaaaaaaaaaa", "grammar stuck (masked)");
	check_stuck(m, &rs.r[2], 1, "", "grammar stuck (empty, ignore_eos)");
	CHECK(rs.r[3].done[0] && rs.r[3].finish[0] == alone.finish[0] &&
	      same_tokens(&rs.r[3], &alone, 0),
	      "grammar stuck: the unconstrained request beside them changed (%s, %d tokens; alone %d)",
	      pg_engine_finish_name(rs.r[3].finish[0]), rs.r[3].n_toks[0], alone.n_toks[0]);
	CHECK(rs.bad == 0, "grammar stuck: %d stray events", rs.bad);
	pg_engine_stats(e, &st);
	CHECK(st.grammar_samples == 4 && st.grammar_failures == 4 && st.n_failed == 0 &&
	      st.n_done == 4,
	      "grammar stuck: %llu samples under a grammar, %llu failures, %llu requests failed, %llu done; want 4, 4, 0, 4",
	      (unsigned long long)st.grammar_samples, (unsigned long long)st.grammar_failures,
	      (unsigned long long)st.n_failed, (unsigned long long)st.n_done);
	check_pool_back(e, "grammar stuck");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

/*
 * Under a plan: a device that fails mid-batch fails that batch's requests
 * with an error; the engine goes on and later requests are right.
 */
static void test_device_fault(const struct pg_model *m)
{
	static struct results rs;
	struct pg_forward *fw = make_fw(m, 128, 4);
	struct pg_engine *e = fw ? make_engine(m, fw, 64, 8, 0, &rs) : NULL;
	struct result want;
	struct pg_request r;
	int32_t p[20];
	uint64_t id;
	int rc, failed = 0;

	CHECK(e, "fault: set-up");
	if (!e)
		goto out;
	make_prompt(p, 20, 3);
	r = request(p, 20, 8);
	r.ignore_eos = 1;
	CHECK(pg_engine_submit(e, &r, &id) == 0, "fault: submit");
	run_idle(e);
	want = rs.r[0];
	/* replicas: the request's zone is 0, where its prefix is cached */
	CHECK(pg_forward_inject_fault(fw, pg_forward_n_zones(fw) > 1 ? 0 :
				      pg_forward_n_devices(fw) - 1, 1) == 0,
	      "fault: inject");
	CHECK(pg_engine_submit(e, &r, &id) == 0, "fault: submit 2");
	for (int i = 0; i < 50 && !pg_engine_idle(e); i++) {
		rc = pg_engine_step(e);
		failed += rc == PG_ENGINE_EFORWARD;
	}
	CHECK(failed == 1 && rs.r[1].done[0] &&
	      rs.r[1].finish[0] == PG_ENGINE_FINISH_ERROR,
	      "fault: the failed batch's request did not end with an error (%d failed steps)",
	      failed);
	CHECK(pg_engine_submit(e, &r, &id) == 0, "fault: submit 3");
	run_idle(e);
	CHECK(rs.r[2].finish[0] == want.finish[0] &&
	      rs.r[2].n_toks[0] == want.n_toks[0] &&
	      !memcmp(rs.r[2].toks[0], want.toks[0],
		      sizeof(int32_t) * (size_t)want.n_toks[0]),
	      "fault: the request after the failure differs");
	check_pool_back(e, "fault");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

/* ---- steps bounded by cost ---- */

#define MAX_STEPS 4096

/* Every batch's shape, as the engine ran them. */
struct trace {
	struct results rs;
	int n;
	int n_seqs[MAX_STEPS];
	int n_dec[MAX_STEPS];		/* sequences of one token */
	int chunk[MAX_STEPS];		/* tokens of the one longer, or 0 */
	double cost[MAX_STEPS];		/* known_cost */
	double dec_cost[MAX_STEPS];	/* ... of its one-token sequences */
};

static double trace_seconds(void *ctx, const struct pg_fw_seq *seqs,
			    int n_seqs)
{
	struct trace *t = ctx;
	struct pg_fw_seq dec[64];
	int n_dec = 0, chunk = 0;

	for (int i = 0; i < n_seqs; i++) {
		if (seqs[i].n_tokens == 1 && n_dec < 64)
			dec[n_dec++] = seqs[i];
		else
			chunk += seqs[i].n_tokens;
	}
	if (t->n < MAX_STEPS) {
		t->n_seqs[t->n] = n_seqs;
		t->n_dec[t->n] = n_dec;
		t->chunk[t->n] = chunk;
		t->cost[t->n] = known_cost(seqs, n_seqs);
		t->dec_cost[t->n] = known_cost(dec, n_dec);
		t->n++;
	}
	return known_cost(seqs, n_seqs);
}

static void trace_event(void *ctx, const struct pg_engine_event *ev)
{
	on_event(&((struct trace *)ctx)->rs, ev);
}

static struct pg_engine *make_traced(const struct pg_model *m,
				     struct pg_forward *fw, double target_s,
				     struct trace *t)
{
	struct pg_engine_config c = pg_engine_config_default();
	struct pg_engine *e = NULL;
	char err[256];

	c.max_batch_tokens = 64;
	c.max_batch_seqs = 8;
	c.prefix_cache = 0;
	c.step_target_s = target_s;
	c.batch_seconds = trace_seconds;
	c.on_event = trace_event;
	c.ctx = t;
	memset(t, 0, sizeof(*t));
	if (pg_engine_create(m, fw, &c, &e, err, sizeof(err)))
		fprintf(stderr, "engine: %s\n", err);
	return e;
}

/* The model fits a cost that is linear in its terms. */
static void test_cost_model(const struct pg_model *m)
{
	struct pg_step_cost c;
	struct pg_fw_seq seqs[8];
	uint32_t seed = 5;

	pg_step_cost_init(&c, &m->hp);
	for (int k = 0; k < 200; k++) {
		struct pg_step_shape sh = { 0 };
		int n = 1 + k % 8;

		for (int i = 0; i < n; i++) {
			seed = seed * 1664525u + 1013904223u;
			seqs[i] = (struct pg_fw_seq){
				.n_past = (int)(seed >> 20) % 300,
				.n_tokens = k % 3 ? 1 : 1 + (int)(seed >> 8) % 64,
			};
			pg_step_shape_add(&sh, seqs[i].n_past, seqs[i].n_tokens);
		}
		pg_step_cost_observe(&c, &sh, known_cost(seqs, n));
	}
	for (int k = 0; k < 4; k++) {
		struct pg_step_shape sh = { 0 };

		seqs[0] = (struct pg_fw_seq){ .n_past = 50 * k, .n_tokens = 1 + 20 * k };
		pg_step_shape_add(&sh, seqs[0].n_past, seqs[0].n_tokens);
		CHECK(fabs(pg_step_cost_predict(&c, &sh) / known_cost(seqs, 1) - 1) < 0.02,
		      "cost: predicts %.3f ms for %.3f ms",
		      pg_step_cost_predict(&c, &sh) * 1e3, known_cost(seqs, 1) * 1e3);
	}
	CHECK(pg_step_cost_chunk(&c, 100, 1000, pg_step_cost_chunk_s(&c, 100, 40)) == 40,
	      "cost: the chunk for 40 tokens' budget is not 40");
}

/* n streams (prompts of 6, ignore_eos, gen tokens), then run until each
   has decoded `warm`. */
static void start_streams(struct pg_engine *e, struct trace *t,
			  int32_t (*p)[6], int n, int gen, int warm)
{
	struct pg_request r;
	uint64_t id;
	int ready = 0;

	for (int i = 0; i < n; i++) {
		make_prompt(p[i], 6, 70u + (uint32_t)i);
		r = request(p[i], 6, gen);
		r.ignore_eos = 1;
		CHECK(pg_engine_submit(e, &r, &id) == 0, "bounded: submit stream");
	}
	for (int k = 0; k < 1000 && !ready; k++) {
		CHECK(pg_engine_step(e) >= 0, "bounded: step");
		ready = 1;
		for (int i = 0; i < n; i++)
			ready &= t->rs.r[i].n_toks[0] >= warm;
	}
	CHECK(ready, "bounded: the streams did not decode");
}

static void test_bounded_steps(const struct pg_model *m)
{
	static struct trace t;
	static struct result alone;
	struct pg_forward *fw = make_fw(m, 256, 4);
	struct pg_engine *e;
	int32_t streams[4][6], p[240];
	struct pg_request r;
	int from, mixed = 0, over = 0, taken = 0, starved = 0, worst = 0;
	uint64_t id;

	if (have_plan) {	/* micro-batches split the streams and the prompt */
		printf("bounded steps: not under a plan\n");
		pg_forward_destroy(fw);
		return;
	}
	CHECK(fw, "bounded: set-up");
	if (!fw)
		return;
	make_prompt(p, 240, 99);
	r = request(p, 240, 4);
	r.ignore_eos = 1;
	run_alone(m, fw, &r, &alone);

	/* alone: chunks of max_batch_tokens, as without a bound */
	e = make_traced(m, fw, 0, &t);
	CHECK(e && pg_engine_submit(e, &r, &id) == 0, "bounded: submit alone");
	run_idle(e);
	CHECK(t.n >= 4 && t.chunk[0] == 64 && t.chunk[1] == 64 &&
	      t.chunk[2] == 64 && t.chunk[3] == 48,
	      "bounded: alone, the prompt went in %d, %d, %d, %d tokens",
	      t.chunk[0], t.chunk[1], t.chunk[2], t.chunk[3]);
	pg_engine_destroy(e);

	/* next to 4 decoding streams: steps under twice their own */
	e = make_traced(m, fw, 0, &t);
	CHECK(e, "bounded: engine");
	if (!e)
		goto out;
	start_streams(e, &t, streams, 4, 120, 12);
	from = t.n;
	CHECK(pg_engine_submit(e, &r, &id) == 0, "bounded: submit the prompt");
	while (t.rs.r[4].n_toks[0] == 0 && t.n < MAX_STEPS)
		CHECK(pg_engine_step(e) >= 0, "bounded: step");
	for (int i = from; i < t.n; i++) {
		if (!t.chunk[i]) {
			starved++;
			continue;
		}
		mixed++;
		taken += t.chunk[i];
		CHECK(t.n_dec[i] == 4, "bounded: step %d has %d decodes", i, t.n_dec[i]);
		CHECK(t.chunk[i] < 16 || t.chunk[i] % 16 == 0 || i == t.n - 1,
		      "bounded: a chunk of %d tokens", t.chunk[i]);
		if (t.cost[i] > 2.0 * t.dec_cost[i] * 1.05)
			over++;
		if (t.cost[i] > t.cost[worst])
			worst = i;
	}
	fprintf(stderr, "bounded: the prompt took %d steps beside 4 streams; worst %.2f ms (decodes alone %.2f ms)\n",
		mixed, t.cost[worst] * 1e3, t.dec_cost[worst] * 1e3);
	CHECK(mixed >= 8 && taken >= 240 - 1, "bounded: %d chunks, %d tokens", mixed, taken);
	CHECK(over <= 1, "bounded: %d of %d steps over twice the decodes' (worst %.2f ms against %.2f ms)",
	      over, mixed, t.cost[worst] * 1e3, t.dec_cost[worst] * 1e3);
	CHECK(!starved, "bounded: %d steps without a chunk of the prompt", starved);
	run_idle(e);
	CHECK(same_tokens(&t.rs.r[4], &alone, 0), "bounded: the prompt's tokens differ from alone");
	pg_engine_destroy(e);

	/* a target below the decodes' own step: 16 tokens a step still */
	e = make_traced(m, fw, 1e-6, &t);
	CHECK(e, "bounded: engine, tiny target");
	if (!e)
		goto out;
	start_streams(e, &t, streams, 4, 40, 2);
	from = t.n;
	CHECK(pg_engine_submit(e, &r, &id) == 0, "bounded: submit the prompt");
	while (t.rs.r[4].n_toks[0] == 0 && t.n < MAX_STEPS)
		CHECK(pg_engine_step(e) >= 0, "bounded: step");
	for (int i = from; i < t.n - 1; i++)
		CHECK(t.chunk[i] == PG_ENGINE_MIN_CHUNK, "bounded: tiny target: a chunk of %d",
		      t.chunk[i]);
	run_idle(e);
	CHECK(same_tokens(&t.rs.r[4], &alone, 0), "bounded: tiny target: tokens differ");
	pg_engine_destroy(e);
out:
	pg_forward_destroy(fw);
}

int main(void)
{
	struct pg_model *m = make_model();

	if (!m)
		return 1;
	read_plan(m);
	if (have_plan)
		test_device_fault(m);
	test_batch_invariance(m);
	test_prefix_cache(m);
	test_memory_pressure(m);
	test_cancel(m);
	test_parallel_samples(m);
	test_refusal(m);
	test_fairness(m);
	test_priority(m);
	test_stop_ids(m);
	test_grammar_stuck(m);
	test_cost_model(m);
	test_bounded_steps(m);
	pg_model_free(m);
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
