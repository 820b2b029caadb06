/*
 * serve-pagoda.c - pagoda's side of bench/serve: the serving engine under
 * concurrent load, driven in-process (no daemon, no sockets).
 *
 * It measures (greedy, ignore_eos, every request generates its full count):
 *  - aggregate generation tokens/s with 1, 4, 16 and 64 requests submitted
 *    at once (a batch of N, not a closed loop): generated tokens / wall time
 *    from the first submit to the last DONE;
 *  - time to first token of a ~1000-token prompt on an empty cache (miss)
 *    and of the same 1000 tokens + another short suffix once the first has
 *    finished (hit: the prefix cache supplies the full pages);
 *  - KV waste under two mixed loads (a closed loop of 16 in flight): 32
 *    requests of chat-trace lengths (kv_waste_pct) and 48 short chats
 *    (kv_waste_short_pct): (allocated token slots - used token slots) /
 *    allocated, sampled after every step in which every sequence holding
 *    pages is decoding (so its KV length is known exactly: prompt +
 *    generated - 1); other steps are counted as skipped;
 *  - mixed load: 8 streams decoding while a 4096-token prompt arrives.
 *    Alone first: the 8 streams' inter-token gaps (128 tokens each; p99
 *    over all gaps) and the prompt's time to first token; then together:
 *    the streams decode 16 tokens, the prompt is submitted, and the gaps
 *    are taken from its submission to its first token (the streams then
 *    cancelled), beside its TTFT.
 * It is not a test and checks no output text; the engine's tests do.  Last
 * line: "serve-pagoda: tps1=.. tps4=.. tps16=.. tps64=.. ttft_miss_ms=..
 * ttft_hit_ms=.. kv_waste_pct=.. kv_waste_short_pct=.. itl_solo_p99_ms=..
 * itl_mixed_p99_ms=.. ttft_long_solo_ms=.. ttft_long_mixed_ms=..".
 * --mixed-only runs the mixed load alone (its four keys only);
 * --step-target-ms and --step-factor set the engine's step bound.
 * --dump-prompts N prints the texts of the N-request run's prompts, one a
 * line, for the llama-server side.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"

#define MAX_SLOTS 64
#define GEN_TOKENS 128
#define LONG_PROMPT 1000
#define MIXED_STREAMS 8
#define MIXED_PROMPT 4096
#define MIXED_SOLO_GEN 128	/* tokens each stream gives alone */
#define MIXED_WARM 16		/* ... and before the prompt arrives */
#define MIXED_MAX_GEN 2048	/* a bound the streams should not reach */

static const char *const texts[] = {
	"Explain how a bicycle stays upright while it is moving, in simple words.",
	"Write a short story about a lighthouse keeper who finds a message in a bottle.",
	"List the main causes of the French Revolution and describe each briefly.",
	"What are the differences between a virus and a bacterium? Give examples.",
	"Describe a walk through a busy market in the morning, with its sounds and smells.",
	"How does a compiler turn source code into a program the computer can run?",
	"Give some advice to a student who is starting to learn the piano as an adult.",
	"Summarise the water cycle and explain why it matters for farming.",
};
#define N_TEXTS ((int)(sizeof(texts) / sizeof(texts[0])))

struct slot {
	uint64_t id;
	int n_prompt;
	int n_gen;
	int live;
	int stream;		/* the mixed load's: its gaps are recorded */
	double ttft_s;
	double t_last;		/* its latest token */
};

/* Inter-token gaps of the streams, in seconds, while on. */
struct gaps {
	double *v;
	int n, cap;
	int on;
};

struct bench {
	const struct pg_model *m;
	struct pg_engine *e;
	int page_tokens;
	struct slot slots[MAX_SLOTS];
	int n_slots;
	int n_done;
	long gen;
	struct gaps gaps;
};

struct opts {
	const char *model;
	int threads;
	int dump;
	int mixed_only;
	double step_target_ms;	/* 0: the engine's auto */
	double step_factor;	/* 0: the engine's default */
};

static void die(const char *msg, const char *detail)
{
	fprintf(stderr, "serve-pagoda: %s%s%s\n", msg, detail ? ": " : "",
		detail ? detail : "");
	exit(1);
}

static struct slot *find_slot(struct bench *b, uint64_t id)
{
	for (int i = 0; i < b->n_slots; i++)
		if (b->slots[i].live && b->slots[i].id == id)
			return &b->slots[i];
	return NULL;
}

static void gap_push(struct gaps *g, double dt)
{
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 4096;
		double *v = realloc(g->v, sizeof(*v) * (size_t)cap);

		if (!v)
			die("out of memory", NULL);
		g->v = v;
		g->cap = cap;
	}
	g->v[g->n++] = dt;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The q-quantile (0..1) of the gaps recorded, nearest rank; sorts them. */
static double gap_quantile(struct gaps *g, double q)
{
	int i;

	if (!g->n)
		return 0;
	qsort(g->v, (size_t)g->n, sizeof(*g->v), cmp_double);
	i = (int)(q * g->n + 0.999999) - 1;
	return g->v[i < 0 ? 0 : i >= g->n ? g->n - 1 : i];
}

static void on_event(void *ctx, const struct pg_engine_event *ev)
{
	struct bench *b = ctx;
	struct slot *s = find_slot(b, ev->id);

	if (!s)
		return;
	if (ev->type == PG_ENGINE_EV_TOKEN) {
		double t = pg_now_s();

		if (s->stream && b->gaps.on && s->n_gen)
			gap_push(&b->gaps, t - s->t_last);
		s->t_last = t;
		s->n_gen++;
		b->gen++;
		return;
	}
	if (ev->finish == PG_ENGINE_FINISH_ERROR)
		die("a request failed in the forward pass", NULL);
	s->ttft_s = ev->fig ? ev->fig->ttft_s : 0;
	s->live = 0;
	b->n_done++;
}

/* The text of request i of run tag (distinct first page for each). */
static void prompt_text(char *buf, size_t len, int tag, int i, int repeat)
{
	size_t n = (size_t)snprintf(buf, len, "[run %d, request %d] ", tag, i);

	for (int r = 0; r < repeat && n < len; r++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", r ? " " : "",
				      texts[(i + r) % N_TEXTS]);
}

static int tokenize(const struct pg_model *m, const char *text, int bos,
		    int32_t *out, int max)
{
	int64_t n = pg_tokenize(m->tok, text, strlen(text),
				bos && pg_tokenizer_add_bos(m->tok), 0, out, max);

	if (n < 0 || n > max)
		die("tokenising a prompt failed or it is too long", text);
	return (int)n;
}

/* Submit tokens as a new request in a free slot. */
static struct slot *submit(struct bench *b, const int32_t *toks, int n,
			   int max_tokens)
{
	struct pg_request q = {
		.prompt = toks, .n_prompt = n, .max_tokens = max_tokens,
		.sampling = pg_sampling_default(), .ignore_eos = 1, .n = 1,
	};
	struct slot *s = NULL;

	for (int i = 0; i < MAX_SLOTS && !s; i++)
		if (!b->slots[i].live)
			s = &b->slots[i];
	if (!s)
		die("internal: no free slot", NULL);
	if (s - b->slots >= b->n_slots)
		b->n_slots = (int)(s - b->slots) + 1;
	*s = (struct slot){ .n_prompt = n, .live = 1 };
	if (pg_engine_submit(b->e, &q, &s->id))
		die("submit failed", pg_engine_last_error(b->e));
	return s;
}

static void step(struct bench *b)
{
	if (pg_engine_step(b->e) < 0)
		die("step failed", pg_engine_last_error(b->e));
}

static void reset(struct bench *b)
{
	pg_engine_evict(b->e, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	memset(b->slots, 0, sizeof(b->slots));
	b->n_slots = b->n_done = 0;
	b->gen = 0;
}

/* Submit n requests at once, run until all are done; tokens/s. */
static double run_batch(struct bench *b, int n, int tag)
{
	static int32_t toks[MAX_SLOTS][512];
	int nt[MAX_SLOTS];
	char text[2048];
	double t0;

	reset(b);
	for (int i = 0; i < n; i++) {
		prompt_text(text, sizeof(text), tag, i, 1);
		nt[i] = tokenize(b->m, text, 1, toks[i], 512);
	}
	t0 = pg_now_s();
	for (int i = 0; i < n; i++)
		submit(b, toks[i], nt[i], GEN_TOKENS);
	while (!pg_engine_idle(b->e))
		step(b);
	t0 = pg_now_s() - t0;
	if (b->gen != (long)n * GEN_TOKENS)
		die("a request did not generate its full count", NULL);
	return b->gen / t0;
}

/* A long prompt: the texts repeated, cut to len tokens (<= max). */
static int long_prompt(const struct pg_model *m, int32_t *toks, int max,
		       int len, const char *tag)
{
	static char text[65536];
	size_t n = (size_t)snprintf(text, sizeof(text), "%s", tag);
	int nt = 0;

	for (int r = 0; nt < len; r++) {
		if (n >= sizeof(text) - 1024)
			die("internal: the long prompt's text is too short", NULL);
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%sPart %d. %s",
				      r ? " " : "", r, texts[r % N_TEXTS]);
		if (n > (size_t)len * 3)	/* ~4 bytes a token: near */
			nt = tokenize(m, text, 1, toks, max);
	}
	return len;
}

/* TTFT of prompt = prefix + suffix, run alone to its end. */
static double ttft_of(struct bench *b, const int32_t *prefix, int n_prefix,
		      const char *suffix)
{
	static int32_t toks[LONG_PROMPT + 64];
	struct slot *s;
	int ns;

	memcpy(toks, prefix, sizeof(*toks) * (size_t)n_prefix);
	ns = tokenize(b->m, suffix, 0, toks + n_prefix, 64);
	s = submit(b, toks, n_prefix + ns, 8);
	while (!pg_engine_idle(b->e))
		step(b);
	return s->ttft_s;
}

static void run_ttft(struct bench *b, double *miss, double *hit)
{
	static int32_t prefix[4096];
	int n = long_prompt(b->m, prefix, 4096, LONG_PROMPT, "");

	reset(b);
	*miss = ttft_of(b, prefix, n, " Question: what is this text about?");
	*hit = ttft_of(b, prefix, n, " Question: list the parts it names.");
}

/* One waste sample: allocated and used slots, or 0 when not exact. */
static int waste_sample(struct bench *b, long *alloc, long *used)
{
	struct pg_engine_stats st;
	int decoding = 0;

	long u = 0;

	pg_engine_stats(b->e, &st);
	for (int i = 0; i < b->n_slots; i++) {
		struct slot *s = &b->slots[i];

		if (s->live && s->n_gen > 0) {
			decoding++;
			u += s->n_prompt + s->n_gen - 1;
		}
	}
	if (decoding != st.n_running || !decoding)
		return 0;
	*alloc += (long)st.kv.n_used * b->page_tokens;
	*used += u;
	return 1;
}

/*
 * A mixed load: n_req requests, a closed loop of 16 in flight; request i
 * has sent[i % n_len] sentences of prompt and out[i * 3 % n_len] output
 * tokens (without out: 16 + 37 i mod 113).  Returns the waste in percent.
 */
struct load {
	const char *name;
	int n_req, n_len;
	const int *sent, *out;
};

static double run_mixed(struct bench *b, const struct load *l)
{
	static int32_t toks[1024];
	char text[16384];
	long alloc = 0, used = 0, prompt = 0, gen = 0;
	int next = 0, in_flight = 0, samples = 0, skipped = 0, done;

	reset(b);
	while (next < l->n_req || !pg_engine_idle(b->e)) {
		while (next < l->n_req && in_flight < 16) {
			int nt, no = l->out ? l->out[next * 3 % l->n_len] :
					      16 + next * 37 % 113;

			prompt_text(text, sizeof(text), 100, next,
				    l->sent[next % l->n_len]);
			nt = tokenize(b->m, text, 1, toks, 1024);
			submit(b, toks, nt, no);
			prompt += nt;
			gen += no;
			next++;
			in_flight++;
		}
		done = b->n_done;
		step(b);
		in_flight -= b->n_done - done;
		if (waste_sample(b, &alloc, &used))
			samples++;
		else
			skipped++;
	}
	printf("mixed load, %s: %d requests (mean prompt %ld, mean output %ld tokens), 16 in flight, %d steps sampled, %d skipped (a prefill in flight): waste %.2f%%\n",
	       l->name, l->n_req, prompt / l->n_req, gen / l->n_req, samples,
	       skipped, alloc ? 100.0 * (alloc - used) / alloc : 0);
	fflush(stdout);
	return alloc ? 100.0 * (alloc - used) / alloc : 0;
}

/*
 * Chat-trace lengths: prompts of 1 to 30 sentences (~17 tokens each) and
 * outputs of 32 to 640 tokens, means near the public chat traces' that
 * serving papers use (ShareGPT: ~160 prompt and ~340 output tokens).
 */
static const int trace_sent[] = { 1, 2, 3, 5, 8, 12, 20, 30 };
static const int trace_out[] = { 32, 64, 128, 192, 256, 384, 512, 640 };
static const struct load trace_load = {
	"chat-trace lengths", 32, 8, trace_sent, trace_out,
};

/* Short chats only: 1 to 5 sentences, 16 to 128 output tokens. */
static const int short_sent[] = { 1, 2, 3, 4, 5 };
static const struct load short_load = {
	"short chats", 48, 5, short_sent, NULL,
};

/* ---- mixed load: streams decoding while a long prompt arrives ---- */

/* Submit the streams, max_tokens each, into st. */
static void submit_streams(struct bench *b, int max_tokens, struct slot **st)
{
	static int32_t toks[512];
	char text[2048];

	for (int i = 0; i < MIXED_STREAMS; i++) {
		prompt_text(text, sizeof(text), 300, i, 2);
		st[i] = submit(b, toks, tokenize(b->m, text, 1, toks, 512),
			       max_tokens);
		st[i]->stream = 1;
	}
}

static void run_idle(struct bench *b)
{
	while (!pg_engine_idle(b->e))
		step(b);
}

/* The streams alone: their gaps' p50 and p99. */
static void streams_alone(struct bench *b, double *p50, double *p99)
{
	struct slot *st[MIXED_STREAMS];

	reset(b);
	b->gaps.n = 0;
	b->gaps.on = 1;
	submit_streams(b, MIXED_SOLO_GEN, st);
	run_idle(b);
	b->gaps.on = 0;
	*p50 = gap_quantile(&b->gaps, 0.50);
	*p99 = gap_quantile(&b->gaps, 0.99);
}

/* The long prompt alone: its TTFT. */
static double long_alone(struct bench *b, const int32_t *toks, int n)
{
	struct slot *s;

	reset(b);
	s = submit(b, toks, n, 1);
	run_idle(b);
	return s->ttft_s;
}

/*
 * Together: the streams' gaps from the prompt's submission to its first
 * token (p50, p99), its TTFT, and the steps it took.
 */
static void together(struct bench *b, const int32_t *toks, int n,
		     double *p50, double *p99, double *ttft, long *steps)
{
	struct slot *st[MIXED_STREAMS], *lp;
	struct pg_engine_stats s0, s1;
	int warm = 0;

	reset(b);
	b->gaps.n = 0;
	submit_streams(b, MIXED_MAX_GEN, st);
	while (!warm) {
		step(b);
		warm = 1;
		for (int i = 0; i < MIXED_STREAMS; i++)
			warm &= st[i]->n_gen >= MIXED_WARM;
	}
	pg_engine_stats(b->e, &s0);
	b->gaps.on = 1;
	lp = submit(b, toks, n, 1);
	while (lp->live)
		step(b);
	b->gaps.on = 0;
	pg_engine_stats(b->e, &s1);
	for (int i = 0; i < MIXED_STREAMS; i++) {
		if (!st[i]->live)
			die("a stream ended before the long prompt's first token: raise MIXED_MAX_GEN", NULL);
		pg_engine_cancel(b->e, st[i]->id);
	}
	run_idle(b);
	*p50 = gap_quantile(&b->gaps, 0.50);
	*p99 = gap_quantile(&b->gaps, 0.99);
	*ttft = lp->ttft_s;
	*steps = (long)(s1.steps - s0.steps);
}

struct mixed {
	double solo_p50, solo_p99, mixed_p50, mixed_p99;
	double ttft_solo, ttft_mixed;
};

static void run_mixed_load(struct bench *b, struct mixed *r)
{
	static int32_t toks[MIXED_PROMPT + 64];
	struct pg_engine_cost c;
	long steps;
	int n = long_prompt(b->m, toks, MIXED_PROMPT + 64, MIXED_PROMPT,
			    "[mixed load] ");

	streams_alone(b, &r->solo_p50, &r->solo_p99);
	r->ttft_solo = long_alone(b, toks, n);
	together(b, toks, n, &r->mixed_p50, &r->mixed_p99, &r->ttft_mixed,
		 &steps);
	pg_engine_cost(b->e, &c);
	printf("mixed load, %d streams + a %d-token prompt: stream gaps p50/p99 alone %.1f/%.1f ms, with the prompt %.1f/%.1f ms (ratio %.2f); prompt TTFT alone %.0f ms, with the streams %.0f ms (ratio %.2f) in %ld steps\n",
	       MIXED_STREAMS, n, r->solo_p50 * 1e3, r->solo_p99 * 1e3,
	       r->mixed_p50 * 1e3, r->mixed_p99 * 1e3,
	       r->solo_p99 > 0 ? r->mixed_p99 / r->solo_p99 : 0,
	       r->ttft_solo * 1e3, r->ttft_mixed * 1e3,
	       r->ttft_solo > 0 ? r->ttft_mixed / r->ttft_solo : 0, steps);
	printf("step cost model: %.2f ms + %.3f ms/token + %.3f ms/sequence + %.3f us/token-position; decode step %.1f ms, target %.1f ms; %llu chunks bounded, %ld batches seen\n",
	       c.fixed_s * 1e3, c.token_s * 1e3, c.seq_s * 1e3, c.depth_s * 1e6,
	       c.decode_step_s * 1e3, c.target_s * 1e3,
	       (unsigned long long)c.bounded_chunks, c.n_obs);
	fflush(stdout);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "dump-prompts", required_argument, NULL, 'd' },
		{ "mixed-only", no_argument, NULL, 'x' },
		{ "step-target-ms", required_argument, NULL, 'T' },
		{ "step-factor", required_argument, NULL, 'F' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .threads = 2 };
	while ((c = getopt_long(argc, argv, "m:t:", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 't': o->threads = atoi(optarg); break;
		case 'd': o->dump = atoi(optarg); break;
		case 'x': o->mixed_only = 1; break;
		case 'T': o->step_target_ms = atof(optarg); break;
		case 'F': o->step_factor = atof(optarg); break;
		default:
			fprintf(stderr, "usage: serve-pagoda --model FILE [--threads N] [--dump-prompts N] [--mixed-only] [--step-target-ms MS] [--step-factor F]\n");
			exit(2);
		}
	}
	if (!o->model || o->threads < 1 || o->dump < 0 || o->dump > MAX_SLOTS)
		die("--model FILE is required; --threads >= 1; --dump-prompts 1..64", NULL);
}

/* The prompts of the n-request run, as text, for the other side. */
static void dump_prompts(int n)
{
	char text[2048];

	for (int i = 0; i < n; i++) {
		prompt_text(text, sizeof(text), n, i, 1);
		printf("%s\n", text);
	}
}

static void setup(struct bench *b, const struct opts *o, struct pg_forward **fw)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct pg_engine_config ec = pg_engine_config_default();
	struct pg_model *m;
	char err[1024];

	if (pg_model_load(o->model, 0, &m, err, sizeof(err)))
		die(err, NULL);
	fp.n_threads = o->threads;
	fp.max_batch_tokens = 512;
	fp.n_pages = 64 * (256 + GEN_TOKENS) / fp.page_tokens + 256;
	if (pg_forward_create(m, &fp, fw, err, sizeof(err)))
		die(err, NULL);
	ec.max_batch_tokens = 512;
	ec.step_target_s = o->step_target_ms * 1e-3;
	if (o->step_factor > 0)
		ec.step_factor = o->step_factor;
	ec.on_event = on_event;
	ec.ctx = b;
	b->m = m;
	b->page_tokens = pg_forward_page_tokens(*fw);
	if (pg_engine_create(m, *fw, &ec, &b->e, err, sizeof(err)))
		die(err, NULL);
	printf("model %s, %d threads (%s), %d KV pages of %d tokens\n", m->name,
	       pg_forward_threads(*fw), pg_forward_isa_name(*fw),
	       pg_forward_n_pages(*fw), pg_forward_page_tokens(*fw));
}

int main(int argc, char **argv)
{
	static const int conc[] = { 1, 4, 16, 64 };
	static struct bench b;
	struct pg_forward *fw;
	struct pg_model *m;
	struct opts o;
	double tps[4], miss, hit, waste, waste_short;
	struct mixed mx;

	parse(argc, argv, &o);
	if (o.dump) {
		dump_prompts(o.dump);
		return 0;
	}
	setup(&b, &o, &fw);
	m = (struct pg_model *)b.m;
	run_batch(&b, 2, 0);	/* warm-up: pages the weights in */
	if (o.mixed_only) {
		run_mixed_load(&b, &mx);
		printf("serve-pagoda: itl_solo_p99_ms=%.2f itl_mixed_p99_ms=%.2f ttft_long_solo_ms=%.1f ttft_long_mixed_ms=%.1f\n",
		       mx.solo_p99 * 1e3, mx.mixed_p99 * 1e3,
		       mx.ttft_solo * 1e3, mx.ttft_mixed * 1e3);
		goto out;
	}
	for (int i = 0; i < 4; i++) {
		tps[i] = run_batch(&b, conc[i], conc[i]);
		printf("concurrency %2d (batch submitted at once): %ld tokens, %.1f tokens/s\n",
		       conc[i], b.gen, tps[i]);
		fflush(stdout);
	}
	run_ttft(&b, &miss, &hit);
	printf("ttft, %d-token prompt: miss %.1f ms, hit %.1f ms (ratio %.3f)\n",
	       LONG_PROMPT, miss * 1e3, hit * 1e3, miss > 0 ? hit / miss : 0);
	waste_short = run_mixed(&b, &short_load);
	waste = run_mixed(&b, &trace_load);
	run_mixed_load(&b, &mx);
	printf("serve-pagoda: tps1=%.1f tps4=%.1f tps16=%.1f tps64=%.1f ttft_miss_ms=%.1f ttft_hit_ms=%.1f kv_waste_pct=%.2f kv_waste_short_pct=%.2f itl_solo_p99_ms=%.2f itl_mixed_p99_ms=%.2f ttft_long_solo_ms=%.1f ttft_long_mixed_ms=%.1f\n",
	       tps[0], tps[1], tps[2], tps[3], miss * 1e3, hit * 1e3, waste,
	       waste_short, mx.solo_p99 * 1e3, mx.mixed_p99 * 1e3,
	       mx.ttft_solo * 1e3, mx.ttft_mixed * 1e3);
out:
	free(b.gaps.v);
	pg_engine_destroy(b.e);
	pg_forward_destroy(fw);
	pg_model_free(m);
	return 0;
}
