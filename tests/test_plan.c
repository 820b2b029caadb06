/*
 * test_plan.c - tests of devices and the parallel plan (daemon/engine/plan.c):
 * device lists, the TP split of heads and FFN columns, the stage cut
 * against brute force, the validation messages, the planner's decisions on
 * synthetic models and devices, and a model's facts read from its metadata
 * against those of the loaded model.
 *
 * Nothing here runs a model; generated GGUF files are only read.
 * Exits 0 or 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "tests/gen/ggufgen.h"

static int failed;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__);				\
		fprintf(stderr, "\n");					\
		failed = 1;						\
		return 1;						\
	}								\
} while (0)

#define GiB (1024ull * 1024 * 1024)

/* Devices and plans are large (a device holds its CPU list): one each. */
static struct pg_device devs[PG_PLAN_MAX_DEVICES];
static struct pg_plan plan;

static char err[1024];

/* ---- device lists ---- */

static int test_devices_good(void)
{
	int n = pg_devices_parse(NULL, 0, devs, PG_PLAN_MAX_DEVICES, err, sizeof(err));
	int seen[PG_DEVICE_MAX_CPUS] = { 0 }, total = 0;

	CHECK(n == 1, "NULL: %d %s", n, err);
	CHECK(devs[0].kind == PG_DEV_CPU && !strcmp(devs[0].name, "cpu:0") &&
	      devs[0].n_cpus >= 1 && devs[0].n_threads == devs[0].n_cpus &&
	      devs[0].numa_node == -1, "cpu:0: %s %d cpus %d threads node %d",
	      devs[0].name, devs[0].n_cpus, devs[0].n_threads, devs[0].numa_node);
	total = devs[0].n_cpus;
	n = pg_devices_parse(" cpu:1 , cpu:0", 3, devs, PG_PLAN_MAX_DEVICES, err, sizeof(err));
	CHECK(n == 2, "two: %d %s", n, err);
	CHECK(devs[0].index == 1 && !strcmp(devs[0].name, "cpu:1") &&
	      devs[1].index == 0, "list order kept: %s %s", devs[0].name, devs[1].name);
	CHECK(devs[0].n_threads == 3 && devs[1].n_threads == 3, "threads override");
	if (total >= 2 && devs[0].numa_node < 0) {
		/* equal contiguous groups that cover every CPU once */
		for (int d = 0; d < 2; d++)
			for (int i = 0; i < devs[d].n_cpus; i++)
				seen[devs[d].cpus[i]]++;
		for (int d = 0; d < 2; d++)
			CHECK(devs[d].n_cpus == total / 2 || devs[d].n_cpus == (total + 1) / 2,
			      "group %d has %d of %d CPUs", d, devs[d].n_cpus, total);
		CHECK(devs[1].cpus[devs[1].n_cpus - 1] < devs[0].cpus[0],
		      "cpu:0's group comes before cpu:1's");
		for (int c = 0; c < PG_DEVICE_MAX_CPUS; c++)
			CHECK(seen[c] <= 1, "CPU %d in two groups", c);
	}
	/* more devices than CPUs: one CPU each, shared round-robin */
	n = pg_devices_parse("cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7,cpu:8,cpu:9,cpu:10,cpu:11,cpu:12,cpu:13,cpu:14,cpu:15,cpu:16,cpu:17,cpu:18,cpu:19,cpu:20,cpu:21,cpu:22,cpu:23,cpu:24,cpu:25,cpu:26,cpu:27,cpu:28,cpu:29,cpu:30,cpu:31,cpu:32,cpu:33,cpu:34,cpu:35,cpu:36,cpu:37,cpu:38,cpu:39,cpu:40,cpu:41,cpu:42,cpu:43,cpu:44,cpu:45,cpu:46,cpu:47,cpu:48,cpu:49,cpu:50,cpu:51,cpu:52,cpu:53,cpu:54,cpu:55,cpu:56,cpu:57,cpu:58,cpu:59,cpu:60,cpu:61,cpu:62,cpu:63",
			     0, devs, PG_PLAN_MAX_DEVICES, err, sizeof(err));
	CHECK(n == 64, "64 devices: %d %s", n, err);
	for (int i = 0; i < n; i++)
		CHECK(devs[i].n_cpus >= 1 && devs[i].n_threads >= 1, "device %d empty", i);
	return 0;
}

static int bad_devices(const char *spec, const char *want)
{
	int n = pg_devices_parse(spec, 0, devs, PG_PLAN_MAX_DEVICES, err, sizeof(err));

	CHECK(n == -EINVAL, "'%s' accepted (%d)", spec, n);
	CHECK(strstr(err, want), "'%s': message '%s' lacks '%s'", spec, err, want);
	return 0;
}

/*
 * cuda:1 on this host: without the CUDA backend built, how to build it;
 * with it, that no GPU is visible or how many there are (this test cannot
 * run where cuda:1 exists: the device machines have one GPU at most).
 */
static int bad_cuda1(void)
{
	int n = pg_devices_parse("cuda:1", 0, devs, PG_PLAN_MAX_DEVICES, err,
				 sizeof(err));

	if (n == 1)
		return 0;	/* a host with two GPUs: nothing to refuse */
	CHECK(n == -EINVAL, "'cuda:1' gave %d", n);
	CHECK(!strncmp(err, "cuda:1: ", 8) || strstr(err, "without CUDA"),
	      "'cuda:1': message '%s' does not name it", err);
	CHECK(strstr(err, "rebuild with ./configure --with-cuda") ||
	      strstr(err, "no CUDA device is visible") ||
	      strstr(err, "this host has 1 CUDA device (cuda:0 .. cuda:0)"),
	      "'cuda:1': message '%s' says neither how to build CUDA nor which GPUs there are",
	      err);
	return 0;
}

static int test_devices_bad(void)
{
	char many[1024];
	size_t len = 0;

	for (int i = 0; i < 65; i++)
		len += (size_t)snprintf(many + len, sizeof(many) - len, "%scpu:%d",
					i ? "," : "", i);
	return bad_devices("gpu:0", "'gpu:0': expected cpu:N or cuda:N") ||
	       bad_devices("cpu", "'cpu'") ||
	       bad_devices("cpu:", "'cpu:'") ||
	       bad_devices("cpu:x", "'cpu:x'") ||
	       bad_devices("cpu:-1", "'cpu:-1'") ||
	       bad_devices("cpu:1024", "'cpu:1024'") ||
	       bad_devices("cpu:0,", "''") ||
	       bad_devices(",cpu:0", "''") ||
	       bad_devices("cpu:0,cpu:0", "cpu:0 is named twice") ||
	       bad_devices("cpu:1", "with one CPU device, name it cpu:0") ||
	       bad_devices("cpu:0,cpu:2", "name them cpu:0 .. cpu:1") ||
	       bad_devices("cpu:0,cuda:0", "cannot be mixed") ||
	       bad_devices(many, "more than 64 devices") ||
	       bad_devices("cuda:0,cuda:0", "cuda:0") ||
	       bad_cuda1();
}

/* ---- the TP split ---- */

static int check_heads(int n_heads, int n_kv, int tp)
{
	int g = n_heads / n_kv, next = 0, held[4096] = { 0 }, replicated = 0;
	int h0, h1, k0, k1;

	for (int t = 0; t < tp; t++) {
		pg_plan_tp_heads(n_heads, n_kv, tp, t, &h0, &h1, &k0, &k1);
		CHECK(h0 == next && h1 > h0, "%d/%d tp %d rank %d: heads %d..%d",
		      n_heads, n_kv, tp, t, h0, h1);
		CHECK(k0 == h0 / g && k1 == (h1 - 1) / g + 1,
		      "%d/%d tp %d rank %d: KV %d..%d", n_heads, n_kv, tp, t, k0, k1);
		for (int h = h0; h < h1; h++)
			CHECK(h / g >= k0 && h / g < k1, "head %d's KV not held", h);
		for (int k = k0; k < k1; k++)
			held[k]++;
		next = h1;
	}
	CHECK(next == n_heads, "%d/%d tp %d: heads end at %d", n_heads, n_kv, tp, next);
	for (int k = 0; k < n_kv; k++) {
		CHECK(held[k] >= 1, "KV head %d held by none", k);
		replicated |= held[k] > 1;
	}
	return replicated;
}

static int check_ffn(int n_ff, int qblock, int tp)
{
	int next = 0, f0, f1;

	for (int t = 0; t < tp; t++) {
		pg_plan_tp_ffn(n_ff, qblock, tp, t, &f0, &f1);
		CHECK(f0 == next && f1 - f0 >= qblock && f0 % qblock == 0 &&
		      f1 % qblock == 0, "ffn %d/%d tp %d rank %d: %d..%d",
		      n_ff, qblock, tp, t, f0, f1);
		CHECK(f0 == (t * (n_ff / qblock) / tp) * qblock, "f0 formula");
		next = f1;
	}
	CHECK(next == n_ff, "ffn %d tp %d ends at %d", n_ff, tp, next);
	return 0;
}

/* Synthetic facts: a model of n_blocks blocks of block_gib GiB. */
static struct pg_model_facts facts(int n_blocks, int n_heads, int n_kv,
				   int n_ff, uint64_t block_bytes)
{
	struct pg_model_facts f = {
		.n_blocks = n_blocks, .n_embd = n_heads * 64, .n_heads = n_heads,
		.n_kv_heads = n_kv, .head_dim = 64, .n_ff = n_ff, .n_vocab = 32000,
		.n_ctx_train = 4096, .block_bytes = block_bytes,
		.embd_bytes = 64 << 20, .output_bytes = 64 << 20, .qblock = 32,
	};

	return f;
}

/* n devices of one kind, mem_bytes each, CPU ones on NUMA nodes 0 .. n-1. */
static void synth_devices(int n, enum pg_device_kind kind, uint64_t mem,
			  int numa, int fast)
{
	memset(devs, 0, sizeof(devs));
	for (int i = 0; i < n; i++) {
		devs[i].kind = kind;
		devs[i].index = i;
		snprintf(devs[i].name, sizeof(devs[i].name), "%s:%d",
			 kind == PG_DEV_CPU ? "cpu" : "cuda", i);
		devs[i].n_threads = 1;
		devs[i].numa_node = kind == PG_DEV_CPU && numa ? i : -1;
		devs[i].mem_bytes = mem;
		devs[i].fast_links = fast;
	}
}

static int make(int n_dev, int pp, int tp, int cp, int autoplan,
		const struct pg_model_facts *f, struct pg_plan_request *req)
{
	struct pg_plan_request r = {
		.pipeline_parallel = pp, .tensor_parallel = tp,
		.context_parallel = cp, .autoplan = autoplan, .ctx_tokens = 4096,
		.batch_seqs = 1, .devs = devs, .n_devs = n_dev,
	};

	if (req) {
		r.ctx_tokens = req->ctx_tokens ? req->ctx_tokens : r.ctx_tokens;
		r.batch_seqs = req->batch_seqs ? req->batch_seqs : r.batch_seqs;
	}
	err[0] = '\0';
	return pg_plan_make(&r, f, &plan, err, sizeof(err));
}

static int test_tp_split(void)
{
	struct pg_model_facts f;
	int k0, k1, h0, h1;

	for (int n_heads = 1; n_heads <= 64; n_heads++)
		for (int n_kv = 1; n_kv <= n_heads; n_kv++) {
			if (n_heads % n_kv)
				continue;
			for (int tp = 1; tp <= n_heads && tp <= 16; tp++)
				if (check_heads(n_heads, n_kv, tp) < 0 || failed)
					return 1;
		}
	CHECK(check_heads(9, 3, 2) == 1, "9/3 over 2 ranks shares a KV head");
	CHECK(check_heads(32, 8, 4) == 0, "32/8 over 4 ranks is clean");
	pg_plan_tp_heads(9, 3, 2, 0, &h0, &h1, &k0, &k1);
	CHECK(h0 == 0 && h1 == 4 && k0 == 0 && k1 == 2, "9/3 rank 0");
	pg_plan_tp_heads(9, 3, 2, 1, &h0, &h1, &k0, &k1);
	CHECK(h0 == 4 && h1 == 9 && k0 == 1 && k1 == 3, "9/3 rank 1");
	for (int tp = 1; tp <= 48; tp++)
		if (check_ffn(1536, 32, tp) || check_ffn(1536, 1, tp) ||
		    (tp <= 4 && check_ffn(128, 32, tp)))
			return 1;
	/* the plan's flag */
	f = facts(30, 9, 3, 1536, 1 << 20);
	synth_devices(2, PG_DEV_CPU, 64 * GiB, 1, 0);
	CHECK(!make(2, 1, 2, 1, 0, &f, NULL) && plan.kv_replicated, "9/3 tp 2: %s", err);
	f = facts(32, 32, 8, 14336, 1 << 20);
	synth_devices(4, PG_DEV_CPU, 64 * GiB, 1, 0);
	CHECK(!make(4, 1, 4, 1, 0, &f, NULL) && !plan.kv_replicated, "32/8 tp 4: %s", err);
	return 0;
}

/*
 * The canonical parts of n units of `unit` columns (qb-column blocks):
 * one device's bounds are increasing, whole blocks, at most
 * PG_PLAN_EXACT_SPLITS + 1 parts; for each TP size, every rank's parts
 * (split [t * n / tp, (t + 1) * n / tp)) are whole blocks inside its
 * share, and put end to end they are one device's parts exactly when tp
 * divides PG_PLAN_EXACT_SPLITS (and their union of bounds contains one
 * device's otherwise).  Returns 1 on a failed check.
 */
static int check_parts(int n, int unit, int qb)
{
	int64_t one[PG_PLAN_EXACT_SPLITS + 2], r[PG_PLAN_EXACT_SPLITS + 2];
	int64_t all[2 * PG_PLAN_EXACT_SPLITS + 64];
	int n1 = pg_plan_tp_parts(n, unit, qb, 0, n, one);

	CHECK(n1 >= 1 && n1 <= PG_PLAN_EXACT_SPLITS + 1 && one[0] == 0 &&
	      one[n1] == (int64_t)n * unit, "n %d unit %d: %d parts", n, unit, n1);
	for (int i = 0; i < n1; i++)
		CHECK(one[i] < one[i + 1] && one[i] % qb == 0,
		      "n %d unit %d: bound %d = %lld", n, unit, i, (long long)one[i]);
	for (int tp = 1; tp <= 12 && tp <= n; tp++) {
		int k = 0;

		all[0] = 0;
		for (int t = 0; t < tp; t++) {
			int lo = t * n / tp, hi = (t + 1) * n / tp;
			int m = pg_plan_tp_parts(n, unit, qb, lo, hi, r);

			if (((int64_t)lo * unit) % qb)
				return 0;	/* a split plan.c refuses */
			CHECK(m >= 1 && r[0] == 0 && r[m] == (int64_t)(hi - lo) * unit,
			      "n %d tp %d rank %d: %d parts", n, tp, t, m);
			for (int i = 1; i <= m; i++)
				all[++k] = (int64_t)lo * unit + r[i];
		}
		if (PG_PLAN_EXACT_SPLITS % tp == 0) {
			CHECK(k == n1 && !memcmp(all, one, sizeof(int64_t) * (size_t)(k + 1)),
			      "n %d unit %d tp %d: the ranks' parts are not one device's",
			      n, unit, tp);
		} else {
			for (int i = 0, j = 0; i <= n1; i++) {
				while (j < k && all[j] < one[i])
					j++;
				CHECK(all[j] == one[i], "n %d tp %d: bound %lld missing",
				      n, tp, (long long)one[i]);
			}
		}
	}
	return 0;
}

static int test_tp_parts(void)
{
	int64_t c[PG_PLAN_EXACT_SPLITS + 2];

	for (int n = 1; n <= 64; n++)
		if (check_parts(n, 64, 32) || check_parts(n, 32, 32) ||
		    check_parts(n, 1, 1) || check_parts(n, 16, 32))
			return 1;
	/* SmolLM2: 9 heads of 64 (Wo) and 48 FFN blocks (Wdown) */
	CHECK(pg_plan_tp_parts(9, 64, 32, 0, 9, c) == 9, "9 heads: one a part");
	CHECK(pg_plan_tp_parts(48, 32, 32, 0, 48, c) == 12 && c[1] == 128,
	      "48 blocks: 12 parts of 4");
	CHECK(pg_plan_tp_parts(9, 64, 32, 4, 9, c) == 5 && c[5] == 5 * 64,
	      "TP 2 rank 1 of 9 heads: 5 parts");
	return 0;
}

/* ---- the stage cut ---- */

static uint64_t max_stage(const uint64_t *cost, int n, uint64_t extra,
			  int pp, const int *fb)
{
	uint64_t worst = 0;

	for (int s = 0; s < pp; s++) {
		uint64_t c = s == pp - 1 ? extra : 0;

		for (int i = fb[s]; i < fb[s + 1]; i++)
			c += cost[i];
		worst = c > worst ? c : worst;
	}
	return worst;
}

/* The least largest stage over every cut, by enumeration. */
static uint64_t brute_cut(const uint64_t *cost, int n, uint64_t extra, int pp,
			  int s, int *fb)
{
	uint64_t best = UINT64_MAX;

	if (s == pp) {
		fb[pp] = n;
		return max_stage(cost, n, extra, pp, fb);
	}
	for (int b = fb[s - 1] + 1; b <= n - (pp - s); b++) {
		uint64_t m;

		fb[s] = b;
		m = brute_cut(cost, n, extra, pp, s + 1, fb);
		best = m < best ? m : best;
	}
	return best;
}

static int test_cut(void)
{
	uint64_t cost[64], extra;
	int fb[PG_PLAN_MAX_DEVICES + 1], bf[PG_PLAN_MAX_DEVICES + 1];
	unsigned seed = 12345;

	for (int iter = 0; iter < 3000; iter++) {
		int n = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 9;
		int pp = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % n;

		for (int i = 0; i < n; i++)
			cost[i] = 1 + ((seed = seed * 1103515245u + 12345u) >> 16) % (iter % 3 ? 100 : 3);
		extra = ((seed = seed * 1103515245u + 12345u) >> 16) % 250;
		CHECK(!pg_plan_cut(cost, n, extra, pp, fb), "cut %d into %d", n, pp);
		CHECK(fb[0] == 0 && fb[pp] == n, "ends %d %d", fb[0], fb[pp]);
		for (int s = 0; s < pp; s++)
			CHECK(fb[s + 1] > fb[s], "stage %d empty", s);
		bf[0] = 0;
		CHECK(max_stage(cost, n, extra, pp, fb) == brute_cut(cost, n, extra, pp, 1, bf),
		      "iter %d: n %d pp %d extra %llu: %llu, brute force %llu", iter, n,
		      pp, (unsigned long long)extra,
		      (unsigned long long)max_stage(cost, n, extra, pp, fb),
		      (unsigned long long)brute_cut(cost, n, extra, pp, 1, bf));
	}
	/* equal blocks and no head: as even as possible */
	for (int i = 0; i < 30; i++)
		cost[i] = 7;
	CHECK(!pg_plan_cut(cost, 30, 0, 4, fb), "30 into 4");
	for (int s = 0; s < 4; s++)
		CHECK(fb[s + 1] - fb[s] == 7 || fb[s + 1] - fb[s] == 8,
		      "stage %d has %d blocks", s, fb[s + 1] - fb[s]);
	CHECK(!pg_plan_cut(cost, 30, 0, 2, fb) && fb[1] == 15, "30 into 2: %d", fb[1]);
	/* the output head weighs 4 blocks: the last stage gets fewer */
	CHECK(!pg_plan_cut(cost, 30, 28, 2, fb) && fb[1] == 17, "head: %d", fb[1]);
	CHECK(!pg_plan_cut(cost, 30, 0, 30, fb) && fb[29] == 29, "one each");
	CHECK(pg_plan_cut(cost, 30, 0, 31, fb) == -EINVAL, "more stages than blocks");
	CHECK(pg_plan_cut(cost, 30, 0, 0, fb) == -EINVAL, "no stage");
	return 0;
}

/* ---- manual plans ---- */

static int bad_plan(int n_dev, int pp, int tp, int cp, int autoplan,
		    const struct pg_model_facts *f, const char *want)
{
	CHECK(make(n_dev, pp, tp, cp, autoplan, f, NULL) == -EINVAL,
	      "%d devices %d x %d x %d accepted", n_dev, pp, tp, cp);
	CHECK(strstr(err, want), "message '%s' lacks '%s'", err, want);
	return 0;
}

static int test_manual(void)
{
	struct pg_model_facts f = facts(4, 4, 2, 64, 1 << 20), g;
	struct pg_plan_request r = { .pipeline_parallel = 2, .tensor_parallel = 2 };

	synth_devices(8, PG_DEV_CPU, 64 * GiB, 1, 0);
	CHECK(!make(4, 0, 0, 0, 0, &f, NULL) && plan.pp == 4 && plan.tp == 1 &&
	      plan.cp == 1 && plan.n_devices == 4 && plan.replicas == 1,
	      "bare list is a pipeline: %s", err);
	CHECK(!strcmp(plan.reason, "as configured"), "reason %s", plan.reason);
	CHECK(!make(4, 0, 2, 0, 0, &f, NULL) && plan.pp == 2 && plan.tp == 2,
	      "pp from tp: %s", err);
	CHECK(!make(8, 2, 2, 2, 0, &f, NULL) && plan.n_devices == 8, "2x2x2: %s", err);
	CHECK(pg_plan_device(&plan, 1, 0, 1) == &plan.dev[5], "device (1, 0, 1)");
	CHECK(!make(1, 0, 0, 0, 0, &f, NULL) && plan.pp == 1 &&
	      plan.first_block[1] == 4, "one device: %s", err);
	if (bad_plan(5, 5, 0, 0, 0, &f, "the model has 4 blocks") ||
	    bad_plan(5, 5, 1, 1, 0, &f, "use at most 4 stages") ||
	    bad_plan(5, 0, 0, 0, 0, &f, "5 devices make 5 pipeline stages") ||
	    bad_plan(5, 1, 5, 1, 0, &f, "the model has 4 attention heads") ||
	    bad_plan(3, 1, 3, 1, 0, &f, "make 2 quantisation blocks of 32") ||
	    bad_plan(3, 1, 1, 3, 0, &f, "page_tokens = 16") ||
	    bad_plan(4, 3, 0, 0, 0, &f, "= 3 devices, but 4 devices are named") ||
	    bad_plan(3, 0, 2, 0, 0, &f, "do not make whole groups") ||
	    bad_plan(4, 2, 0, 0, 1, &f, "--parallel auto chooses"))
		return 1;
	g = f;
	g.n_ff = 80;
	if (bad_plan(1, 0, 0, 0, 0, &g, "inconsistent"))
		return 1;
	/* counts without devices: cpu:0 .. cpu:3 of this host */
	CHECK(!pg_plan_make(&r, &f, &plan, err, sizeof(err)) && plan.n_devices == 4 &&
	      !strcmp(plan.dev[3].name, "cpu:3"), "generated devices: %s", err);
	r.devices = "cpu:0,cpu:1";
	CHECK(pg_plan_make(&r, &f, &plan, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "2 devices are named"), "named too few: %s", err);
	return 0;
}

/* ---- parallel = auto ---- */

static int auto_plan(int n_dev, const struct pg_model_facts *f, int ctx,
		     const char *want)
{
	struct pg_plan_request r = { .ctx_tokens = ctx };

	CHECK(!make(n_dev, 0, 0, 0, 1, f, &r), "auto: %s", err);
	CHECK(strstr(plan.reason, want), "reason '%s' lacks '%s'", plan.reason, want);
	return 0;
}

static int test_auto(void)
{
	/* 32 blocks of 3 GiB: 96 GiB of weights; KV 64 KiB a token */
	struct pg_model_facts big = facts(32, 32, 8, 14336, 3 * GiB);
	struct pg_model_facts small = facts(32, 32, 8, 14336, 64 << 20);
	struct pg_model_facts longctx = facts(4, 32, 8, 14336, 64 << 20);

	synth_devices(4, PG_DEV_CPU, 64 * GiB, 1, 0);
	if (auto_plan(4, &small, 4096, "fits one device") ||
	    auto_plan(4, &small, 4096, "so 4 replicas, one a device"))
		return 1;
	/* fits one device and four are given: a replica on each */
	CHECK(plan.replicas == 4 && plan.n_devices == 4 && plan.pp == 1 &&
	      plan.tp == 1 && plan.cp == 1 && !strcmp(plan.dev[3].name, "cpu:3") &&
	      pg_plan_n_replicas(&plan) == 4 && !strstr(plan.reason, "unused"),
	      "replicas %d, %d devices: %s", plan.replicas, plan.n_devices,
	      plan.reason);
	/* one device: one copy, no replicas */
	if (auto_plan(1, &small, 4096, "fits one device"))
		return 1;
	CHECK(plan.replicas == 1 && plan.n_devices == 1 &&
	      !strstr(plan.reason, "replicas"), "one device: %s", plan.reason);
	/*
	 * Devices on one memory share the weights (2 GiB) but not the KV:
	 * 330k tokens of 64 KiB (20.1 GiB) a replica leave room for 2 copies
	 * in 57.6 GiB, not 3
	 */
	synth_devices(4, PG_DEV_CPU, 64 * GiB, 0, 0);
	if (auto_plan(4, &small, 330000, "so 2 replicas") ||
	    auto_plan(4, &small, 330000, "2 other devices unused (one more copy of the model does not fit their memory)"))
		return 1;
	CHECK(plan.replicas == 2 && plan.n_devices == 2, "replicas %d",
	      plan.replicas);
	/* small enough for four on one memory */
	if (auto_plan(4, &small, 4096, "so 4 replicas"))
		return 1;
	/* GPUs: a replica on each too */
	synth_devices(2, PG_DEV_CUDA, 80 * GiB, 0, 1);
	if (auto_plan(2, &small, 4096, "so 2 replicas"))
		return 1;
	CHECK(plan.replicas == 2 && plan.tp == 1, "GPU replicas %d", plan.replicas);
	/* too big for one NUMA node: the fewest stages that fit */
	synth_devices(4, PG_DEV_CPU, 64 * GiB, 1, 0);
	if (auto_plan(4, &big, 4096, "slow links, so a pipeline: stages 2"))
		return 1;
	CHECK(plan.pp == 2 && plan.tp == 1 && plan.n_devices == 2 &&
	      plan.replicas == 1, "pp %d", plan.pp);
	if (auto_plan(4, &big, 4096, "2 other devices unused (replicas of a split model are not built yet)"))
		return 1;
	/* CUDA with fast links: TP; links unknown: a pipeline */
	synth_devices(4, PG_DEV_CUDA, 80 * GiB, 0, 1);
	if (auto_plan(4, &big, 4096, "fast peer links, so tensor parallelism"))
		return 1;
	CHECK(plan.tp == 2 && plan.pp == 1 && !plan.kv_replicated, "tp %d", plan.tp);
	synth_devices(4, PG_DEV_CUDA, 80 * GiB, 0, 0);
	if (auto_plan(4, &big, 4096, "cannot be probed yet"))
		return 1;
	CHECK(plan.pp == 2 && plan.tp == 1, "pp %d", plan.pp);
	/* a GPU keeps 6 GB back: 2.4 GiB do not fit 8 GB */
	synth_devices(2, PG_DEV_CUDA, 8000000000ull, 0, 1);
	if (auto_plan(2, &small, 4096, "less 6 GB"))
		return 1;
	CHECK(plan.tp == 2, "tp %d: %s", plan.tp, plan.reason);
	/* CPU devices on one memory: splitting does not help */
	synth_devices(4, PG_DEV_CPU, 64 * GiB, 0, 0);
	if (auto_plan(4, &big, 4096, "the devices share one memory"))
		return 1;
	/* one device too small */
	synth_devices(1, PG_DEV_CPU, 64 * GiB, 1, 0);
	if (auto_plan(1, &big, 4096, "there is no split to make (1 device)"))
		return 1;
	/* unknown memory is assumed to be enough */
	synth_devices(2, PG_DEV_CPU, 0, 1, 0);
	if (auto_plan(2, &big, 4096, "fits one device"))
		return 1;
	/*
	 * One sequence of 8M tokens needs 16 GiB of KV a block (2 KiB a
	 * token): even one block a stage (4 stages) leaves it too big for
	 * 16 GiB nodes, so the KV is divided by tokens as well.
	 */
	synth_devices(8, PG_DEV_CPU, 16 * GiB, 1, 0);
	if (auto_plan(8, &longctx, 8 << 20, "divided by token range"))
		return 1;
	CHECK(plan.pp == 4 && plan.cp == 2 && plan.n_devices == 8,
	      "pp %d cp %d", plan.pp, plan.cp);
	/* with half the tokens, 8 GiB a block: stages alone */
	if (auto_plan(8, &longctx, 4 << 20, "pipeline: stages 4"))
		return 1;
	CHECK(plan.cp == 1 && plan.pp == 4, "pp %d cp %d", plan.pp, plan.cp);
	return 0;
}

/* ---- printing ---- */

static int test_print(void)
{
	struct pg_model_facts f = facts(30, 9, 3, 1536, 2 << 20);
	char *text = NULL;
	size_t len = 0;
	FILE *out;

	synth_devices(4, PG_DEV_CPU, 64 * GiB, 1, 0);
	CHECK(!make(4, 2, 2, 1, 0, &f, NULL), "2 x 2: %s", err);
	out = open_memstream(&text, &len);
	CHECK(out, "open_memstream");
	pg_plan_print(out, &plan, &f, NULL);
	fclose(out);
	CHECK(strstr(text, "plan: pipeline 2 x tensor 2 x context 1 = 4 devices") &&
	      strstr(text, "embedding") && strstr(text, "output head") &&
	      strstr(text, "TP: 60 all-gathers (2 per block) of partial sums") &&
	      strstr(text, "PP: 1 stage hand-off of 2.2 KiB") &&
	      strstr(text, "KV heads do not divide among 2 TP ranks: KV head 1 is held by ranks 0 and 1"),
	      "printout:\n%s", text);
	free(text);
	/* replicas on one memory: the second reads the first's weights */
	synth_devices(2, PG_DEV_CPU, 64 * GiB, 0, 0);
	CHECK(!make(2, 0, 0, 0, 1, &f, NULL) && plan.replicas == 2, "auto: %s", err);
	out = open_memstream(&text, &len);
	CHECK(out, "open_memstream");
	pg_plan_print(out, &plan, &f, NULL);
	fclose(out);
	CHECK(strstr(text, "plan: 2 replicas (data parallel) of pipeline 1 x tensor 1 x context 1 = 2 devices") &&
	      strstr(text, "embedding, output head  cpu:0 | cpu:1") &&
	      strstr(text, "cpu:0's") &&
	      strstr(text, "total: 0 B (replicas: each device serves its own sequences)") &&
	      strstr(text, "reason: fits one device") && strstr(text, "so 2 replicas"),
	      "printout:\n%s", text);
	free(text);
	return 0;
}

/* ---- model facts ---- */

static int facts_agree(struct ggufgen_opts *o, const char *path)
{
	struct pg_model_facts a, b;
	struct pg_model *m;

	CHECK(!ggufgen_write(o, path, err, sizeof(err)), "ggufgen: %s", err);
	CHECK(!pg_model_facts_read(path, &a, err, sizeof(err)), "read: %s", err);
	CHECK(!pg_model_load(path, 0, &m, err, sizeof(err)), "load: %s", err);
	pg_model_facts_of(m, &b);
	pg_model_free(m);
	CHECK(a.n_blocks == o->n_blocks && a.n_embd == o->hidden &&
	      a.n_heads == o->n_heads && a.n_kv_heads == o->n_kv_heads &&
	      a.n_ff == o->ffn && a.n_vocab == o->n_vocab &&
	      a.head_dim == (o->head_dim ? o->head_dim : o->hidden / o->n_heads) &&
	      a.n_ctx_train == o->n_ctx,
	      "shape");
	CHECK(a.tied_output == !o->untied && a.qblock == pg_dtype_block_size(o->type),
	      "tied %d qblock %d", a.tied_output, a.qblock);
	CHECK(!memcmp(&a, &b, sizeof(a)),
	      "read and loaded differ: blocks %llu/%llu embd %llu/%llu out %llu/%llu",
	      (unsigned long long)a.block_bytes, (unsigned long long)b.block_bytes,
	      (unsigned long long)a.embd_bytes, (unsigned long long)b.embd_bytes,
	      (unsigned long long)a.output_bytes, (unsigned long long)b.output_bytes);
	return 0;
}

static int test_facts(void)
{
	char dir[] = "/tmp/test_plan.XXXXXX", path[64];
	struct ggufgen_opts o;
	struct pg_model_facts f;
	int rc;

	CHECK(mkdtemp(dir), "mkdtemp");
	snprintf(path, sizeof(path), "%s/m.gguf", dir);
	ggufgen_preset(&o, "tiny");
	o.n_threads = 1;
	rc = facts_agree(&o, path);
	o.type = PG_Q4_1;
	o.embd_type = PG_Q8_0;
	o.untied = 1;
	rc = rc || facts_agree(&o, path);
	o.arch = GGUFGEN_QWEN2;
	o.qkv_bias = 1;
	o.type = PG_Q8_0;
	rc = rc || facts_agree(&o, path);
	/* the loader's reader, not a copy: Qwen3's explicit head size need
	 * not divide the embedding (6 heads of 16 in 64) */
	o.arch = GGUFGEN_QWEN3;
	o.qkv_bias = 0;
	o.n_heads = 6;
	o.n_kv_heads = 2;
	o.head_dim = 16;
	rc = rc || facts_agree(&o, path);
	ggufgen_preset(&o, "tiny");
	o.n_threads = 1;
	o.arch = GGUFGEN_GEMMA3;	/* + q/k norms and post-norms */
	o.sliding_window = 8;
	rc = rc || facts_agree(&o, path);
	o.sliding_window = 0;
	o.arch = GGUFGEN_PHI3;
	rc = rc || facts_agree(&o, path);
	o.vocab_only = 1;
	if (!rc && !ggufgen_write(&o, path, err, sizeof(err))) {
		rc = pg_model_facts_read(path, &f, err, sizeof(err)) != -EINVAL ||
		     !strstr(err, "vocabulary-only");
		if (rc)
			fprintf(stderr, "vocab-only file: %s\n", err);
	}
	unlink(path);
	rmdir(dir);
	CHECK(!rc, "model facts");
	CHECK(pg_model_facts_read("/nonexistent.gguf", &f, err, sizeof(err)) == -ENOENT,
	      "absent file");
	return 0;
}

int main(void)
{
	test_devices_good();
	test_devices_bad();
	test_tp_split();
	test_tp_parts();
	test_cut();
	test_manual();
	test_auto();
	test_print();
	test_facts();
	if (!failed)
		printf("test_plan: all passed\n");
	return failed;
}
