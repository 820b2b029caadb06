/*
 * parallel-pagoda.c - bench/parallel's program: decode throughput and the
 * per-device figures of parallel plans (PP 2, TP 2, PP 2 x TP 2, CP 2) on
 * CPU devices, each against one device measured in the same run; and
 * replicas (2 one-thread devices, data parallel, as --parallel auto plans
 * them when the model fits one device) against one one-thread device,
 * with --rep-seqs concurrent requests.
 *
 * Every plan gets its own forward (forward.h, with the plan of plan.h) and
 * serving engine (engine.h), all set up first.  Before anything is timed,
 * each plan's last-token logits of one prompt are compared with the one
 * device's, and must agree bit for bit (forward.c sums TP and CP in one
 * device's order).  Then, --reps times and
 * interleaved plan by plan, N requests are submitted at once (N = 1, then
 * --seqs): prompts of --prompt pseudo-random token ids, distinct per
 * request, prefix cache off, --gen tokens each, greedy, ignore_eos.  The
 * machines are shared: a run during which other processes took 10% of the
 * CPUs or more is run once more, and the run kept is the fastest of those
 * left alone, else the fastest.
 *
 * Only the decode phase counts: from the step after which every request
 * has its second token to the one after which it has its last but one
 * (run_load says why).  A request that fails or ends short is an error,
 * and its plan's ratio is nan.  The greedy tokens are compared with the
 * one device's, for information.
 *
 * Not a test.  The last line is "parallel-pagoda: KEY=VALUE ...", a group
 * of keys per plan; bench/parallel picks them up (see bench/README).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"

#define MAX_SEQS 64
#define MAX_GEN 512
#define MAX_PROMPT 512
#define MAX_DEV 8
#define QUIET_PCT 10		/* other processes' CPU share that spoils a run */
#define MAX_RETRIES 1		/* more runs of a plan spoilt that way */

struct plan_spec {
	const char *key;	/* in the last line: KEY_ratio ... */
	const char *label;
	int pp, tp, cp;		/* 1, 1, 1: no plan (the baseline) */
	int replicas;		/* > 1: --parallel auto's replicas */
	int threads;		/* a device's threads; 0: --threads split */
	int base;		/* the plan its ratio is to (plans[]) */
	int rep_load;		/* its concurrent run has --rep-seqs requests */
};

#define ONE1 5			/* plans[]: one one-thread device */
static const struct plan_spec plans[] = {
	{ "one", "1 device", 1, 1, 1, 1, 0, 0, 0 },
	{ "pp2", "PP 2", 2, 1, 1, 1, 0, 0, 0 },
	{ "tp2", "TP 2", 1, 2, 1, 1, 0, 0, 0 },
	{ "pp2tp2", "PP 2 x TP 2", 2, 2, 1, 1, 0, 0, 0 },
	{ "cp2", "CP 2", 1, 1, 2, 1, 0, 0, 0 },
	{ "one1", "1 dev 1 thr", 1, 1, 1, 1, 1, ONE1, 1 },
	{ "rep2", "2 replicas", 1, 1, 1, 2, 1, ONE1, 1 },
};
#define N_PLANS ((int)(sizeof(plans) / sizeof(plans[0])))

struct opts {
	const char *model;
	const char *plans;	/* comma-separated keys, or NULL: all */
	int threads;		/* in all: the baseline's, split over devices */
	int seqs;		/* the concurrent run's requests */
	int rep_seqs;		/* ... of the replica plans and their base */
	int prompt, gen;
	int reps;
};

/*
 * One device over a decode phase: the difference of two snapshots of its
 * counters (see run_load), so a figure can be a little off, idle time
 * slightly below zero.
 */
struct dev_fig {
	char name[16];
	int stage, t, c, first_block, n_blocks;
	double steps, wall_ms, busy_ms, comm_ms;
	double kib;			/* KiB sent to other devices */
	double n_ar, n_ag;		/* all-reduces, all-gathers */
};

/* One measured run: a plan with n_seqs requests. */
struct run {
	int n_seqs;
	double decode_s;		/* the decode phase's wall time */
	long decode_tokens;		/* tokens generated in it */
	double tps;
	int errors;			/* requests that failed or ended short */
	double others_pct;		/* CPU other processes took meanwhile */
	int n_dev;
	struct dev_fig d[MAX_DEV];
	int32_t toks[MAX_SEQS][MAX_GEN];	/* (n_seqs, gen) greedy tokens */
};

/* A plan set up, and what it measured: [0] 1 sequence, [1] --seqs. */
struct rig {
	const struct plan_spec *ps;
	const struct rig *base;		/* the rig its ratios are to */
	struct pg_plan plan;		/* must outlive fw */
	struct pg_forward *fw;
	struct pg_engine *e;
	double logit_d;			/* max |logit - one device's| ... */
	double logit_max;		/* ... and max |one device's logit| */
	int argmax_same;
	int bad;			/* the logits check failed */
	int errors[2];			/* failed requests, all repetitions */
	struct run best[2];		/* the run kept (better()) */
	int same[2];			/* sequences with the one device's tokens */
	int first_diff[2];		/* first position that differs, or -1 */
};

/* The requests of one run, as the event callback sees them. */
struct load {
	int n;
	uint64_t id[MAX_SEQS];
	int n_gen[MAX_SEQS];
	int done[MAX_SEQS];		/* 1: by length; 2: otherwise */
	int errors;
	long gen;
	struct run *r;			/* gets the tokens, or NULL */
};

static struct load load;

static void die(const char *msg, const char *detail)
{
	fprintf(stderr, "parallel-pagoda: %s%s%s\n", msg, detail ? ": " : "",
		detail ? detail : "");
	exit(1);
}

/*
 * CPU seconds spent by the whole machine (/proc/stat: user, nice, system,
 * irq, softirq, steal) and by this process, to tell how much of the CPUs
 * other processes took during a run: the figures of a device pinned to a
 * CPU that another process uses are worth little.  -1 without /proc.
 */
static double machine_cpu_s(void)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return -1;
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) /
	       (double)sysconf(_SC_CLK_TCK);
}

static double own_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int index_of(const struct load *l, uint64_t id)
{
	for (int i = 0; i < l->n; i++)
		if (l->id[i] == id)
			return i;
	return -1;
}

static void on_event(void *ctx, const struct pg_engine_event *ev)
{
	struct load *l = ctx;
	int i = index_of(l, ev->id);

	if (i < 0)
		return;
	if (ev->type == PG_ENGINE_EV_TOKEN) {
		if (l->r && l->n_gen[i] < MAX_GEN)
			l->r->toks[i][l->n_gen[i]] = ev->token;
		l->n_gen[i]++;
		l->gen++;
		return;
	}
	l->done[i] = 1;
	if (ev->finish != PG_ENGINE_FINISH_LENGTH) {
		fprintf(stderr, "parallel-pagoda: request %d ended with '%s' after %d tokens\n",
			i, pg_engine_finish_name(ev->finish), l->n_gen[i]);
		l->done[i] = 2;
		l->errors++;
	}
}

/* Prompt of request i: ids drawn from i, the same for every plan. */
static void prompt_of(int i, int n, int n_vocab, int32_t *out)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);

	for (int k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		out[k] = (int32_t)(x % (uint64_t)n_vocab);
	}
}

/* The fewest tokens any request of the load has. */
static int min_gen(const struct load *l)
{
	int k = l->n_gen[0];

	for (int i = 1; i < l->n; i++)
		k = l->n_gen[i] < k ? l->n_gen[i] : k;
	return k;
}

/* One end of a measured window: the device counters, clocks and tokens. */
struct mark {
	struct pg_forward_dev_stats st[MAX_DEV];
	double t;			/* pg_now_s() */
	double machine_s, own_s;	/* machine_cpu_s(), own_cpu_s() */
	long gen;			/* tokens generated so far */
};

static void mark_take(struct mark *m, struct pg_forward *fw,
		      const struct load *l)
{
	for (int i = 0; i < pg_forward_n_devices(fw); i++)
		pg_forward_device_stats(fw, i, &m->st[i]);
	m->machine_s = machine_cpu_s();
	m->own_s = own_cpu_s();
	m->t = pg_now_s();
	m->gen = l->gen;
}

/* f = b - a, the figures of what ran between a and b. */
static void dev_fig_of(struct dev_fig *f, const struct pg_forward_dev_stats *a,
		       const struct pg_forward_dev_stats *b)
{
	memcpy(f->name, b->name, sizeof(f->name));
	f->stage = b->stage;
	f->t = b->tp_rank;
	f->c = b->cp_rank;
	f->first_block = b->first_block;
	f->n_blocks = b->n_blocks;
	f->steps = (double)b->steps - (double)a->steps;
	f->wall_ms = ((double)b->wall_ns - (double)a->wall_ns) * 1e-6;
	f->busy_ms = ((double)b->busy_ns - (double)a->busy_ns) * 1e-6;
	f->comm_ms = ((double)b->comm_ns - (double)a->comm_ns) * 1e-6;
	f->kib = ((double)b->bytes - (double)a->bytes) / 1024.0;
	f->n_ar = (double)b->n_all_reduce - (double)a->n_all_reduce;
	f->n_ag = (double)b->n_all_gather - (double)a->n_all_gather;
}

/* r's figures over the window from a to b. */
static void run_of(struct run *r, struct pg_forward *fw, const struct mark *a,
		   const struct mark *b)
{
	r->decode_s = b->t - a->t;
	r->decode_tokens = b->gen - a->gen;
	r->tps = r->decode_s > 0 ? r->decode_tokens / r->decode_s : 0;
	r->n_dev = pg_forward_n_devices(fw);
	for (int i = 0; i < r->n_dev; i++)
		dev_fig_of(&r->d[i], &a->st[i], &b->st[i]);
	r->others_pct = a->machine_s < 0 || r->decode_s <= 0 ? -1 : 100.0 *
		(b->machine_s - a->machine_s - (b->own_s - a->own_s)) /
		(r->decode_s * (double)sysconf(_SC_NPROCESSORS_ONLN));
}

/* Queue n requests of gen tokens each (the callback's load is reset). */
static void submit_load(struct rig *g, const struct opts *o, int n_vocab,
			int n, int gen, struct run *r)
{
	static int32_t prompt[MAX_PROMPT];

	memset(&load, 0, sizeof(load));
	load.n = n;
	load.r = r;
	for (int i = 0; i < n; i++) {
		struct pg_request q = {
			.prompt = prompt, .n_prompt = o->prompt,
			.max_tokens = gen, .sampling = pg_sampling_default(),
			.ignore_eos = 1, .n = 1,
		};

		prompt_of(i, o->prompt, n_vocab, prompt);
		if (pg_engine_submit(g->e, &q, &load.id[i]))
			die("submit failed", pg_engine_last_error(g->e));
	}
}

/* Requests that ended by length but short of gen tokens, as errors. */
static void count_short(const struct rig *g, int gen)
{
	for (int i = 0; i < load.n; i++)
		if (load.done[i] != 2 && load.n_gen[i] != gen) {
			fprintf(stderr, "parallel-pagoda: %s: request %d generated %d tokens of %d\n",
				g->ps->label, i, load.n_gen[i], gen);
			load.errors++;
		}
}

/*
 * Submit n requests at once, gen tokens each, and step until idle.  With
 * r, the decode phase is measured: from the step after which every
 * request has 2 tokens to the step after which every one has gen - 1, so
 * that the prefill, the first decode step (which, in a pipeline, overlaps
 * the end of the prefill) and the last step's drain are left out.  Both
 * ends are taken at the same point of the steady pipeline: there, one
 * micro-batch is in flight, and a device counts a batch's busy time when
 * it ends, so the one in flight at the start is counted and the one in
 * flight at the end is not, and the window holds whole steps.  (The
 * marks read counters that a device thread may be updating: plain
 * aligned 64-bit words, which x86-64 reads whole; a benchmark's liberty.)
 */
static void run_load(struct rig *g, const struct opts *o, int n_vocab,
		     int n, int gen, struct run *r)
{
	static struct mark a, b;
	int phase = 0;

	submit_load(g, o, n_vocab, n, gen, r);
	while (!pg_engine_idle(g->e)) {
		if (pg_engine_step(g->e) < 0)
			fprintf(stderr, "parallel-pagoda: %s: step: %s\n",
				g->ps->label, pg_engine_last_error(g->e));
		if (phase == 0 && min_gen(&load) >= 2) {
			mark_take(&a, g->fw, &load);
			phase = 1;
		}
		if (phase == 1 && min_gen(&load) >= gen - 1) {
			mark_take(&b, g->fw, &load);
			phase = 2;
		}
	}
	count_short(g, gen);
	if (!r)
		return;
	r->n_seqs = n;
	r->errors = load.errors + (phase != 2);
	if (phase == 2) {
		run_of(r, g->fw, &a, &b);
	} else {
		r->decode_s = r->tps = 0;
		r->decode_tokens = 0;
		r->n_dev = 0;
		r->others_pct = -1;
	}
}

static int plan_threads(const struct plan_spec *ps, const struct opts *o)
{
	int n_dev = ps->pp * ps->tp * ps->cp * ps->replicas;

	if (ps->threads)
		return ps->threads;
	if (n_dev == 1)
		return o->threads;
	return o->threads / n_dev > 0 ? o->threads / n_dev : 1;
}

/*
 * Replicas as the operator gets them: --parallel auto over cpu:0 ..
 * cpu:R-1 of one thread each, which must plan R replicas.
 */
static void make_replica_plan(struct rig *g, const struct pg_model *m,
			      const struct opts *o)
{
	const struct plan_spec *ps = g->ps;
	char devices[64] = "", err[1024];
	struct pg_plan_request req = {
		.autoplan = 1, .devices = devices, .n_threads = ps->threads,
		.ctx_tokens = o->prompt + o->gen, .batch_seqs = o->rep_seqs,
	};
	struct pg_model_facts f;

	for (int i = 0; i < ps->replicas; i++)
		snprintf(devices + strlen(devices), sizeof(devices) - strlen(devices),
			 "%scpu:%d", i ? "," : "", i);
	pg_model_facts_of(m, &f);
	if (pg_plan_make(&req, &f, &g->plan, err, sizeof(err)))
		die(ps->label, err);
	if (g->plan.replicas != ps->replicas)
		die(ps->label, g->plan.reason);
}

/* The forward of g's plan: without a plan for the baseline. */
static void make_forward(struct rig *g, const struct pg_model *m,
			 const struct opts *o)
{
	struct pg_forward_params fp = pg_forward_params_default();
	const struct plan_spec *ps = g->ps;
	int per_seq = (o->prompt + o->gen + fp.page_tokens - 1) / fp.page_tokens;
	int seqs = o->seqs > o->rep_seqs ? o->seqs : o->rep_seqs;
	char err[1024];

	fp.n_threads = plan_threads(ps, o);
	fp.max_batch_tokens = 512;
	/* replicas: room for them all in each zone */
	fp.n_pages = (seqs * (per_seq + 1) + 16) * ps->replicas;
	if (ps->replicas > 1) {
		make_replica_plan(g, m, o);
		fp.plan = &g->plan;
	} else if (ps->pp * ps->tp * ps->cp > 1) {
		struct pg_plan_request req = {
			.pipeline_parallel = ps->pp, .tensor_parallel = ps->tp,
			.context_parallel = ps->cp,
			.n_threads = plan_threads(ps, o),
			.ctx_tokens = o->prompt + o->gen, .batch_seqs = o->seqs,
		};
		struct pg_model_facts f;

		pg_model_facts_of(m, &f);
		if (pg_plan_make(&req, &f, &g->plan, err, sizeof(err)))
			die(ps->label, err);
		fp.plan = &g->plan;
	}
	if (pg_forward_create(m, &fp, &g->fw, err, sizeof(err)))
		die(ps->label, err);
	if (pg_forward_n_devices(g->fw) > MAX_DEV)
		die("too many devices", ps->label);
}

/*
 * Before timing: the last-token logits of request 0's prompt, through
 * pg_forward_batch on pages 0 .. (the engine has not used them yet),
 * against the one device's, ref (which the baseline fills).
 */
static void check_logits(struct rig *g, const struct opts *o, int n_vocab,
			 float *ref)
{
	static int32_t prompt[MAX_PROMPT], pages[MAX_PROMPT];
	int is_base = g->ps == &plans[0];
	float *lg = is_base ? ref : malloc(sizeof(float) * (size_t)n_vocab);
	struct pg_fw_seq seq = { .pages = pages, .n_tokens = o->prompt };
	int best = 0, best_ref = 0, rc;

	if (!lg)
		die("out of memory", NULL);
	for (int i = 0; i < MAX_PROMPT; i++)
		pages[i] = i;
	prompt_of(0, o->prompt, n_vocab, prompt);
	if ((rc = pg_forward_batch(g->fw, prompt, o->prompt, &seq, 1, lg)))
		die("the logits check's forward pass failed", strerror(-rc));
	g->logit_d = g->logit_max = 0;
	for (int v = 0; v < n_vocab; v++) {
		double d = fabs((double)lg[v] - ref[v]);

		g->logit_d = d > g->logit_d ? d : g->logit_d;
		if (fabs(ref[v]) > g->logit_max)
			g->logit_max = fabs(ref[v]);
		best = lg[v] > lg[best] ? v : best;
		best_ref = ref[v] > ref[best_ref] ? v : best_ref;
	}
	g->argmax_same = best == best_ref;
	/* every CPU plan gives one device's bits (forward.c's exact sums) */
	g->bad = g->logit_d != 0;
	if (g->bad)
		fprintf(stderr, "parallel-pagoda: %s: logits differ from one device's by %.3g (largest %.3g)\n",
			g->ps->label, g->logit_d, g->logit_max);
	if (!is_base)
		free(lg);
}

/* Forward, logits check, engine and a warm-up run. */
static void rig_setup(struct rig *g, const struct pg_model *m,
		      const struct opts *o, float *ref)
{
	struct pg_engine_config ec = pg_engine_config_default();
	char err[1024];

	make_forward(g, m, o);
	check_logits(g, o, m->hp.n_vocab, ref);
	ec.max_batch_tokens = 512;
	ec.prefix_cache = 0;
	ec.on_event = on_event;
	ec.ctx = &load;
	if (pg_engine_create(m, g->fw, &ec, &g->e, err, sizeof(err)))
		die(err, NULL);
	run_load(g, o, m->hp.n_vocab, 2, 4, NULL);
}

static void rig_free(struct rig *g)
{
	pg_engine_destroy(g->e);
	pg_forward_destroy(g->fw);
}

/*
 * Which run to keep: the fastest of those that other processes left
 * alone (under QUIET_PCT of the CPUs), else the fastest.
 */
static int better(const struct run *r, const struct run *best)
{
	int quiet = r->others_pct < QUIET_PCT;

	if (quiet != (best->others_pct < QUIET_PCT))
		return quiet;
	return r->tps > best->tps;
}

/* The requests of g's concurrent run. */
static int seqs_of(const struct rig *g, const struct opts *o)
{
	return g->ps->rep_load ? o->rep_seqs : o->seqs;
}

/* Run k (0: 1 sequence, 1: o->seqs) of g once more; 1 when it is kept. */
static int rig_measure(struct rig *g, const struct opts *o, int n_vocab,
		       int k, int first, double *tps, double *others)
{
	static struct run r;

	run_load(g, o, n_vocab, k ? seqs_of(g, o) : 1, o->gen, &r);
	g->errors[k] += r.errors;
	*tps = r.tps;
	*others = r.others_pct;
	if (!first && !better(&r, &g->best[k]))
		return 0;
	g->best[k] = r;
	return 1;
}

/* Runs that other processes spoilt, once more. */
static void retry_spoilt(struct rig *rigs, int n_rigs, const struct opts *o,
			 int n_vocab)
{
	for (int p = 0; p < n_rigs; p++)
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < MAX_RETRIES &&
			     rigs[p].best[k].others_pct >= QUIET_PCT; i++) {
				double tps, oth;
				int kept = rig_measure(&rigs[p], o, n_vocab, k, 0,
						       &tps, &oth);

				printf("  retry %-12s %d seq%s %6.1f tok/s (other processes took %.0f%%; %s)\n",
				       rigs[p].ps->label, k ? seqs_of(&rigs[p], o) : 1,
				       k ? "s" : "", tps, oth,
				       kept ? "kept" : "not kept");
				fflush(stdout);
			}
}

static void same_tokens(struct rig *g, const struct rig *base, int gen)
{
	for (int k = 0; k < 2; k++) {
		const struct run *r = &g->best[k], *b = &base->best[k];

		g->same[k] = 0;
		g->first_diff[k] = -1;
		for (int i = 0; i < r->n_seqs; i++) {
			int p = 0;

			while (p < gen && r->toks[i][p] == b->toks[i][p])
				p++;
			g->same[k] += p == gen;
			if (p < gen && (g->first_diff[k] < 0 ||
					p < g->first_diff[k]))
				g->first_diff[k] = p;
		}
	}
}

/* Sums over the devices: comm / busy and idle / wall, in percent. */
static double comm_pct(const struct run *r)
{
	double c = 0, b = 0;

	for (int i = 0; i < r->n_dev; i++) {
		c += r->d[i].comm_ms;
		b += r->d[i].busy_ms;
	}
	return b > 0 ? 100.0 * c / b : 0;
}

static double idle_pct(const struct run *r)
{
	double w = 0, b = 0;

	for (int i = 0; i < r->n_dev; i++) {
		w += r->d[i].wall_ms;
		b += r->d[i].busy_ms;
	}
	return w > 0 ? 100.0 * (w - b) / w : 0;
}

/* g's tok/s over its base's (plan_spec.base), run k. */
static double ratio(const struct rig *g, int k)
{
	const struct rig *base = g->base;

	if (g->errors[k] || g->bad || base->errors[k] || base->bad ||
	    base->best[k].tps <= 0)
		return NAN;
	return g->best[k].tps / base->best[k].tps;
}

static void print_summary(const struct rig *rigs, int n_rigs,
			  const struct opts *o)
{
	printf("\ndecode phase, all devices; of each plan's runs, the fastest that other processes\n"
	       "left alone (oth%% < %d), else the fastest (comm%% = sum comm / sum busy, idle%% =\n"
	       "sum (wall - busy) / sum wall, oth%% = CPU taken by other processes; same =\n"
	       "sequences whose %d tokens equal the one device's, 1st = first that differs):\n",
	       QUIET_PCT, o->gen);
	printf("%-12s %4s %4s %5s %8s %6s %6s %6s %5s %6s %4s %6s\n", "plan",
	       "devs", "thr", "seqs", "tok/s", "ratio", "comm%", "idle%",
	       "oth%", "same", "1st", "errors");
	for (int p = 0; p < n_rigs; p++)
		for (int k = 0; k < 2; k++) {
			const struct rig *g = &rigs[p];
			const struct run *r = &g->best[k];
			int n_dev = r->n_dev;
			char same[16], first[16];

			snprintf(same, sizeof(same), "%d/%d", g->same[k], r->n_seqs);
			snprintf(first, sizeof(first), "%d", g->first_diff[k]);
			printf("%-12s %4d %4d %5d %8.1f %6.2f %6.1f %6.1f %5.0f %6s %4s %6d\n",
			       k ? "" : g->ps->label, n_dev,
			       plan_threads(g->ps, o) * n_dev, r->n_seqs, r->tps,
			       ratio(g, k), comm_pct(r), idle_pct(r),
			       r->others_pct, same,
			       g->first_diff[k] < 0 ? "-" : first,
			       g->errors[k]);
		}
	for (int p = 0; p < n_rigs; p++) {
		int n_dev = rigs[p].best[0].n_dev;
		long n_cpus = sysconf(_SC_NPROCESSORS_ONLN);

		if (n_dev > 1 && plan_threads(rigs[p].ps, o) * n_dev > n_cpus)
			printf("%s: %d threads on %ld CPUs, oversubscribed: its devices take turns on the\n"
			       "  cores, and a rank that is off its core keeps its peers waiting (comm)\n",
			       rigs[p].ps->label,
			       plan_threads(rigs[p].ps, o) * n_dev, n_cpus);
	}
}

static void print_device(const char *label, const struct run *r,
			 const struct dev_fig *d)
{
	double steps = d->steps > 0 ? d->steps : 1;
	char stc[16], blk[16];

	snprintf(stc, sizeof(stc), "%d.%d.%d", d->stage, d->t, d->c);
	snprintf(blk, sizeof(blk), "%d-%d", d->first_block,
		 d->first_block + d->n_blocks - 1);
	printf("%-12s %-6s %5s %6s %5.0f %8.1f %8.1f %8.1f %9.1f %6.1f %6.1f %6.2f\n",
	       label, d->name, stc, blk, d->steps, d->busy_ms - d->comm_ms,
	       d->comm_ms, d->wall_ms - d->busy_ms, d->kib, d->n_ar / steps,
	       d->n_ag / steps,
	       r->decode_tokens ? d->n_ar / (double)r->decode_tokens : 0);
}

static void print_devices(const struct rig *rigs, int n_rigs, int k)
{
	int n = rigs[0].best[k].n_seqs;

	printf("\nper device, %d sequence%s, decode phase (ms; s.t.c = stage, TP rank, CP rank;\n"
	       "AR, AG = all-reduces, all-gathers, per batch step; AR/tok per generated token):\n",
	       n, n > 1 ? "s" : "");
	printf("%-12s %-6s %5s %6s %5s %8s %8s %8s %9s %6s %6s %6s\n", "plan",
	       "device", "s.t.c", "blocks", "steps", "compute", "comm", "idle",
	       "KiB sent", "AR/stp", "AG/stp", "AR/tok");
	for (int p = 0; p < n_rigs; p++)
		for (int i = 0; i < rigs[p].best[k].n_dev; i++)
			print_device(i ? "" : rigs[p].ps->label,
				     &rigs[p].best[k], &rigs[p].best[k].d[i]);
}

static void print_last_line(const struct rig *rigs, int n_rigs)
{
	double others = 0;
	int errors = 0, differ = 0;

	printf("parallel-pagoda:");
	for (int p = 0; p < n_rigs; p++) {
		const struct rig *g = &rigs[p];
		const struct run *r1 = &g->best[0], *rn = &g->best[1];
		const char *key = g->ps->key;

		printf(" %s_tps1=%.2f %s_tps%d=%.2f", key, r1->tps, key,
		       rn->n_seqs, rn->tps);
		if (g->base != g)
			printf(" %s_ratio1=%.2f %s_ratio=%.2f %s_comm_pct1=%.1f %s_idle_pct1=%.1f %s_comm_pct=%.1f %s_idle_pct=%.1f",
			       key, ratio(g, 0), key,
			       ratio(g, 1), key, comm_pct(r1), key,
			       idle_pct(r1), key, comm_pct(rn), key,
			       idle_pct(rn));
		errors += g->errors[0] + g->errors[1] + g->bad;
		differ += (r1->n_seqs - g->same[0]) + (rn->n_seqs - g->same[1]);
		for (int k = 0; k < 2; k++)
			if (g->best[k].others_pct > others)
				others = g->best[k].others_pct;
	}
	printf(" errors=%d differ=%d others_pct=%.0f\n", errors, differ, others);
}

/* Whether --plans names plan p (all: no --plans). */
static int named(const struct opts *o, int p)
{
	size_t n = strlen(plans[p].key);

	if (!o->plans)
		return 1;
	for (const char *s = o->plans; *s; s += strcspn(s, ",")) {
		s += *s == ',';
		if (!strncmp(s, plans[p].key, n) && (s[n] == ',' || !s[n]))
			return 1;
	}
	return 0;
}

/*
 * Plan p is run: the baseline always, the others when --plans names them
 * or a named plan is compared with them.
 */
static int chosen(const struct opts *o, int p)
{
	if (!p || named(o, p))
		return 1;
	for (int q = 0; q < N_PLANS; q++)
		if (q != p && plans[q].base == p && named(o, q))
			return 1;
	return 0;
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "plans", required_argument, NULL, 'P' },
		{ "threads", required_argument, NULL, 't' },
		{ "seqs", required_argument, NULL, 's' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "gen", required_argument, NULL, 'g' },
		{ "reps", required_argument, NULL, 'r' },
		{ "rep-seqs", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .threads = 2, .seqs = 8, .rep_seqs = 16,
			    .prompt = 32, .gen = 32, .reps = 2 };
	while ((c = getopt_long(argc, argv, "m:t:", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 'P': o->plans = optarg; break;
		case 't': o->threads = atoi(optarg); break;
		case 's': o->seqs = atoi(optarg); break;
		case 'p': o->prompt = atoi(optarg); break;
		case 'g': o->gen = atoi(optarg); break;
		case 'r': o->reps = atoi(optarg); break;
		case 'R': o->rep_seqs = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: parallel-pagoda [--model FILE] [--plans pp2,tp2,pp2tp2,cp2,one1,rep2] [--threads N] [--seqs N] [--rep-seqs N] [--prompt N] [--gen N] [--reps N]\n");
			exit(2);
		}
	}
	if (o->threads < 1 || o->seqs < 2 || o->seqs > MAX_SEQS ||
	    o->rep_seqs < 2 || o->rep_seqs > MAX_SEQS ||
	    o->prompt < 1 || o->prompt > MAX_PROMPT || o->gen < 4 ||
	    o->gen > MAX_GEN || o->reps < 1)
		die("--threads >= 1, --seqs and --rep-seqs 2..64, --prompt 1..512, --gen 4..512, --reps >= 1", NULL);
}

static void print_header(const struct pg_model *m, const struct opts *o)
{
	printf("model %s: %d blocks, hidden %d, %d heads (%d KV), FFN %d, vocabulary %d, %s, %.1f MiB\n",
	       m->name, m->hp.n_blocks, m->hp.n_embd, m->hp.n_heads,
	       m->hp.n_kv_heads, m->hp.n_ff, m->hp.n_vocab,
	       pg_dtype_name(m->blocks[0].wq.type), m->weight_bytes / 1048576.0);
	printf("%ld CPUs online; one device runs %d threads; a plan's devices %d / (devices) each, at\n"
	       "least 1, each pinned to a CPU (more devices than CPUs: oversubscribed)\n",
	       sysconf(_SC_NPROCESSORS_ONLN), o->threads, o->threads);
	printf("requests: %d-token prompts, %d generated, greedy; 1, then %d at once (replicas and\n"
	       "  their one-thread device: %d); %d repetitions\n",
	       o->prompt, o->gen, o->seqs, o->rep_seqs, o->reps);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct rig rigs[N_PLANS];
	char path[4096], err[1024];
	struct pg_model *m;
	struct opts o;
	float *ref;	/* (n_vocab) the one device's logits */
	int n_rigs = 0;

	parse(argc, argv, &o);
	if (!o.model)
		o.model = pg_model_default_path(path, sizeof(path));
	if (pg_model_load(o.model, 0, &m, err, sizeof(err)))
		die(err, NULL);
	ref = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	if (!ref)
		die("out of memory", NULL);
	print_header(m, &o);
	for (int p = 0; p < N_PLANS; p++) {
		if (!chosen(&o, p))
			continue;
		rigs[n_rigs].ps = &plans[p];
		rigs[n_rigs].base = &rigs[0];
		for (int q = 0; q < n_rigs + 1; q++)
			if (rigs[q].ps == &plans[plans[p].base])
				rigs[n_rigs].base = &rigs[q];
		rig_setup(&rigs[n_rigs], m, &o, ref);
		printf("  %-12s set up; logits differ from one device's by %.3g (largest %.3g), argmax %s%s\n",
		       plans[p].label, rigs[n_rigs].logit_d,
		       rigs[n_rigs].logit_max,
		       rigs[n_rigs].argmax_same ? "the same" : "differs",
		       rigs[n_rigs].bad ? ": WRONG, the plan's ratios are nan" : "");
		n_rigs++;
	}
	for (int rep = 0; rep < o.reps; rep++)
		for (int p = 0; p < n_rigs; p++) {
			double t0 = pg_now_s(), tps[2], oth[2];

			for (int k = 0; k < 2; k++)
				rig_measure(&rigs[p], &o, m->hp.n_vocab, k,
					    rep == 0, &tps[k], &oth[k]);
			printf("  rep %d %-12s 1 seq %6.1f tok/s, %d seqs %6.1f tok/s (%.0f s; other processes took %.0f%%, %.0f%% of the CPUs)\n",
			       rep + 1, rigs[p].ps->label, tps[0],
			       seqs_of(&rigs[p], &o), tps[1],
			       pg_now_s() - t0, oth[0], oth[1]);
			fflush(stdout);
		}
	retry_spoilt(rigs, n_rigs, &o, m->hp.n_vocab);
	for (int p = 0; p < n_rigs; p++)
		same_tokens(&rigs[p], rigs[p].base, o.gen);
	print_summary(rigs, n_rigs, &o);
	print_devices(rigs, n_rigs, 0);
	print_devices(rigs, n_rigs, 1);
	print_last_line(rigs, n_rigs);
	for (int p = 0; p < n_rigs; p++)
		rig_free(&rigs[p]);
	free(ref);
	pg_model_free(m);
	return 0;
}
