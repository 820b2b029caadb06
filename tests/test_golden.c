/*
 * test_golden.c - pagoda against llama.cpp on the default model, from the
 * reference data tests/ref/gen-model-ref.py stored in
 * tests/data/golden-smollm2.txt (format and llama.cpp's configuration at
 * the top of that file: flash attention on, where llama.cpp's batched and
 * one-token evaluations agree bit for bit).
 *
 * For every prompt, tokenisation must be identical; then two engines run
 * teacher forcing (prompt + llama.cpp's greedy completion in one batch)
 * and greedy decoding (up to 64 tokens, one token at a time):
 *
 *  - pagoda's llama.cpp numerics (forward.h: llama.cpp's arithmetic, on
 *    the AVX2 kernels): its logits are llama.cpp's bit for bit, so every
 *    logit of every pos line must equal the stored one to its 4 decimals
 *    (LLAMA_TOL), the argmax must agree at >= LLAMA_AGREE of positions
 *    and every greedy completion must be identical; and the same prompts,
 *    submitted at once to a serving engine with these numerics (chunked
 *    prefill beside other sequences' decodes), must each complete exactly
 *    as llama.cpp's greedy output, twice, the second time from the prefix
 *    cache: batching and cached pages change no bit;
 *
 *  - pagoda's own numerics, the engine as it serves: Wo and Wdown summed
 *    in canonical parts, so that every parallel plan gives one device's
 *    bits, and attention in float.  Both programs quantise activations to
 *    8 bits before every quantised matmul with the same rounding; but
 *    8-bit rounding is discontinuous: a last-bit difference anywhere (the
 *    order of a sum, F16 against float accumulation) flips some roundings,
 *    and across 30 blocks those flips grow to the size of the quantisation
 *    noise itself (~0.15-0.2 in the logits).  Measured against an exact
 *    float64 forward pass of a Q4_1 model, pagoda and llama.cpp are equally
 *    far from it (mean |diff| 0.020 and 0.021) and 0.012 from each other.
 *    So here: every argmax disagreement must be at a near-tie in
 *    llama.cpp's logits (top-2 gap below NEAR_TIE), agreement at least
 *    MIN_AGREE (the orders tried all landed between 97.0% and 97.9% on
 *    earlier data), pagoda's logit of each of llama.cpp's top-16 tokens
 *    within LOGIT_MAX with a mean difference below LOGIT_MEAN (a wrong
 *    RoPE, norm, mask or page table moves logits by whole units at most
 *    positions), and a greedy completion may diverge only at a near-tie.
 *    (On other models llama.cpp disagrees with itself: a record's spread,
 *    its batched against its one-token logits, is 0 on the default model
 *    but up to ~1.9 on its requantised copies and 1.4 on Gemma 3; so their
 *    data are made with gen-model-ref.py --teacher one-token, their pos
 *    lines the greedy run's own logits, and have no pos line after an
 *    end-of-generation token: pos lines P-1 .. P+G-2 are required, P+G-1
 *    is optional.  The messages name the spread.)
 *
 * Exits 77 when the default model has not been fetched, or when the CPU
 * has no AVX2 (the llama.cpp numerics need it).
 *
 * Other models: `tests/test_golden MODEL DATA` runs the same checks with
 * pagoda's numerics only (llama.cpp's numerics cover the default model's
 * types only) against DATA, gen-model-ref.py's output for MODEL, with issue
 * 17's agreement bound MODEL_MIN_AGREE; tests/test-golden-gemma3.sh and
 * tests/test-golden-requant.sh run it, after checking that MODEL's SHA-256
 * is the one DATA's header names.  Exits 77 when MODEL cannot be loaded.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"

#define LOGIT_MAX 2.0
#define LOGIT_MEAN 0.25
#define MIN_AGREE 0.965
#define MODEL_MIN_AGREE 0.97	/* issue 17's bound, for MODEL DATA runs */
#define LLAMA_TOL 6e-5		/* 4 decimals stored: 5e-5, and strtof's error */
#define LLAMA_AGREE 0.99
#define NEAR_TIE 0.5
#define MAX_RECORDS 64
#define SERVE_BATCH 64	/* tokens per engine step: prompts go in chunks */
#define TOP_K 16
#define STR_(x) #x
#define STR(x) STR_(x)
#define MAX_TOK 1024

struct record {
	char *prompt;
	size_t prompt_len;
	int n_tokens;
	int32_t tokens[MAX_TOK];
	int n_greedy;
	int32_t greedy[MAX_TOK];
	double spread;		/* llama.cpp's batched against one-token, for messages */
	int n_pos;
	int pos[MAX_TOK];
	int32_t top_id[MAX_TOK][TOP_K];
	float top_logit[MAX_TOK][TOP_K];
};

struct totals {
	int records;
	long positions, argmax_agree, logit_pairs, logit_bad;
	long greedy_positions, greedy_agree, argmax_far;
	double max_logit_err, sum_logit_err;
	int max_err_record, max_err_pos, max_err_rank;	/* where the max is */
	long logit_over_1;			/* pairs more than 1 apart */
	int greedy_full, greedy_near_tie, greedy_bad;
	long greedy_tokens_matched, greedy_tokens;
};

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int parse_hex(const char *s, struct record *r)
{
	size_t n = strcspn(s, "\n");

	r->prompt = malloc(n / 2 + 1);
	if (!r->prompt || n % 2)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		r->prompt[i] = (char)(hi * 16 + lo);
	}
	r->prompt_len = n / 2;
	return 0;
}

static int parse_ids(char *s, int32_t *ids, int *n)
{
	char *end;
	long cnt = strtol(s, &end, 10);

	if (cnt < 0 || cnt > MAX_TOK)
		return -1;
	for (long i = 0; i < cnt; i++)
		ids[i] = (int32_t)strtol(end, &end, 10);
	*n = (int)cnt;
	return 0;
}

static int parse_pos(char *s, struct record *r)
{
	char *end;
	int i = r->n_pos;

	if (i >= MAX_TOK)
		return -1;
	r->pos[i] = (int)strtol(s, &end, 10);
	for (int k = 0; k < TOP_K; k++) {
		r->top_id[i][k] = (int32_t)strtol(end, &end, 10);
		if (*end != ':')
			return -1;
		r->top_logit[i][k] = strtof(end + 1, &end);
	}
	r->n_pos++;
	return 0;
}

/*
 * Whether r's pos lines are the ones check_teacher can use: consecutive
 * from P-1 (the last prompt token), one for every generated token's
 * position P-1 .. P+G-2, and then at most one more, P+G-1: data made with
 * gen-model-ref.py --teacher one-token have none after a completion that
 * ended on an end-of-generation token (nothing is generated after it).
 */
static int pos_lines_ok(const struct record *r)
{
	if (r->n_tokens < 1 || r->n_pos < r->n_greedy || r->n_pos > r->n_greedy + 1)
		return 0;
	for (int i = 0; i < r->n_pos; i++)
		if (r->pos[i] != r->n_tokens - 1 + i)
			return 0;
	return 1;
}

/* Read the next record; 1 when one was read, 0 at the end, -1 on error. */
static int read_record(FILE *f, struct record *r)
{
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	while (getline(&line, &cap, f) > 0) {
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (!strncmp(line, "prompt ", 7))
			rc = parse_hex(line + 7, r) ? -1 : 1;
		else if (!strncmp(line, "tokens ", 7))
			rc = parse_ids(line + 7, r->tokens, &r->n_tokens) ? -1 : rc;
		else if (!strncmp(line, "greedy ", 7))
			rc = parse_ids(line + 7, r->greedy, &r->n_greedy) ? -1 : rc;
		else if (!strncmp(line, "spread ", 7))
			r->spread = strtod(line + 7, NULL);
		else if (!strncmp(line, "pos ", 4))
			rc = parse_pos(line + 4, r) ? -1 : rc;
		else if (!strncmp(line, "end", 3))
			break;
		if (rc < 0)
			break;
	}
	free(line);
	if (rc == 1 && !pos_lines_ok(r)) {
		fprintf(stderr, "test_golden: a record's pos lines are not P-1 .. P+G-2 (and P+G-1 at most) for its %d prompt and %d greedy tokens: regenerate the data with tests/ref/gen-model-ref.py\n",
			r->n_tokens, r->n_greedy);
		rc = -1;
	}
	return rc;
}

static int argmax(const float *v, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

static void check_tokens(const struct pg_model *m, const struct record *r,
			 int *tok_equal, int record)
{
	int32_t ids[MAX_TOK];
	int64_t n = pg_tokenize(m->tok, r->prompt, r->prompt_len,
				pg_tokenizer_add_bos(m->tok), 1, ids, MAX_TOK);

	if (n == r->n_tokens && !memcmp(ids, r->tokens, sizeof(int32_t) * (size_t)n))
		(*tok_equal)++;
	else
		fprintf(stderr, "record %d: tokenisation differs (%lld vs %d tokens)\n",
			record, (long long)n, r->n_tokens);
}

/* One engine under test: pagoda's or llama.cpp's numerics. */
struct engine {
	const char *name;
	int llama;			/* llama.cpp numerics: exact bounds */
	struct pg_forward *fw;
	struct pg_kvc *kvc;		/* page accounting over fw's pages */
	struct totals t;
};

/*
 * PAGODA_GOLDEN_DUMP=FILE: pagoda's numerics write, per pos line, its
 * logits of the line's 16 ids ("dump RECORD POS id:logit ..."), for
 * tests/ref/llama-self-check.py --pagoda FILE to set beside llama.cpp's
 * and an exact float64 forward pass.
 */
static FILE *dump;

/* Prompt + greedy in one batch; compare every pos line. */
static void check_teacher(struct engine *e, const struct pg_model *m,
			  const struct record *r)
{
	struct totals *t = &e->t;
	int V = m->hp.n_vocab, n = r->n_tokens + r->n_greedy;
	int32_t seq[2 * MAX_TOK];
	float *lg = malloc(sizeof(float) * (size_t)n * V);
	struct pg_kvc_seq *s = pg_kvc_seq_new(e->kvc, 0);

	memcpy(seq, r->tokens, sizeof(int32_t) * r->n_tokens);
	memcpy(seq + r->n_tokens, r->greedy, sizeof(int32_t) * r->n_greedy);
	if (!lg || !s || pg_run_tokens(e->fw, e->kvc, s, seq, n, 1, lg)) {
		fprintf(stderr, "%s, record %d: forward pass failed\n", e->name,
			t->records);
		t->logit_bad++;
		goto out;
	}
	for (int i = 0; i < r->n_pos; i++) {
		const float *row = lg + (size_t)r->pos[i] * V;
		int best = argmax(row, V), next = r->pos[i] + 1 - r->n_tokens;
		double gap = r->top_logit[i][0] - r->top_logit[i][1];

		t->positions++;
		t->argmax_agree += best == r->top_id[i][0];
		if (best != r->top_id[i][0] && (e->llama || gap >= NEAR_TIE)) {
			t->argmax_far++;
			printf("%s, record %d position %d: argmax %d, llama.cpp %d with a margin of %.4f\n",
			       e->name, t->records, r->pos[i], best,
			       r->top_id[i][0], gap);
		}
		if (dump && !e->llama) {
			fprintf(dump, "dump %d %d", t->records, r->pos[i]);
			for (int k = 0; k < TOP_K; k++)
				fprintf(dump, " %d:%.6f", r->top_id[i][k],
					row[r->top_id[i][k]]);
			fputc('\n', dump);
		}
		if (next >= 0 && next < r->n_greedy) {
			t->greedy_positions++;
			t->greedy_agree += best == r->greedy[next];
		}
		for (int k = 0; k < TOP_K; k++) {
			double d = fabs(row[r->top_id[i][k]] - r->top_logit[i][k]);
			double bound = e->llama ? LLAMA_TOL : LOGIT_MAX;

			t->logit_pairs++;
			t->sum_logit_err += d;
			t->logit_over_1 += d > 1;
			if (d > t->max_logit_err) {
				t->max_logit_err = d;
				t->max_err_record = t->records;
				t->max_err_pos = r->pos[i];
				t->max_err_rank = k;
			}
			if (d > bound && t->logit_bad++ < 10)
				printf("%s, record %d position %d: logit of %d (rank %d) %.4f, llama.cpp's %.4f: |diff| above %g (llama.cpp's own spread on this record %.4f)\n",
				       e->name, t->records, r->pos[i],
				       r->top_id[i][k], k, row[r->top_id[i][k]],
				       r->top_logit[i][k], bound, r->spread);
		}
	}
out:
	pg_kvc_seq_free(e->kvc, s);
	free(lg);
}

/* llama.cpp's logit gap between its choice and ours at a pos line. */
static double gap_at(const struct record *r, int pos, int32_t ours)
{
	for (int i = 0; i < r->n_pos; i++) {
		if (r->pos[i] != pos)
			continue;
		for (int k = 0; k < TOP_K; k++)
			if (r->top_id[i][k] == ours)
				return r->top_logit[i][0] - r->top_logit[i][k];
		return INFINITY;
	}
	return INFINITY;
}

static void check_greedy(struct engine *e, const struct pg_model *m,
			 const struct record *r)
{
	struct totals *t = &e->t;
	float *lg = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	struct pg_kvc_seq *s = pg_kvc_seq_new(e->kvc, 0);
	int i = 0, rc;
	int32_t id = -1;

	rc = !lg || !s ? -ENOMEM :
	     pg_run_tokens(e->fw, e->kvc, s, r->tokens, r->n_tokens, 0, lg);
	for (; !rc && i < r->n_greedy; i++) {
		id = argmax(lg, m->hp.n_vocab);
		if (id != r->greedy[i])
			break;
		rc = pg_run_tokens(e->fw, e->kvc, s, &id, 1, 0, lg);
	}
	t->greedy_tokens += r->n_greedy;
	t->greedy_tokens_matched += i;
	if (i == r->n_greedy) {
		t->greedy_full++;
	} else if (rc) {
		fprintf(stderr, "%s, record %d: forward pass failed\n", e->name,
			t->records);
		t->greedy_bad++;
	} else {
		double gap = gap_at(r, r->n_tokens - 1 + i, id);
		int tie = !e->llama && gap < NEAR_TIE;

		printf("%s, record %d: greedy diverges at token %d of %d: llama.cpp %d, pagoda %d, llama.cpp's gap %.4f (%s)\n",
		       e->name, t->records, i, r->n_greedy, r->greedy[i], id,
		       gap, tie ? "near-tie" : "NOT allowed");
		if (tie)
			t->greedy_near_tie++;
		else
			t->greedy_bad++;
	}
	pg_kvc_seq_free(e->kvc, s);
	free(lg);
}

/*
 * Served: every prompt submitted at once to a serving engine with llama.cpp
 * numerics, steps of SERVE_BATCH tokens (chunked prefill beside other
 * sequences' decodes); each completion must be llama.cpp's greedy one.
 */
struct served {
	int32_t prompt[MAX_TOK], want[MAX_TOK], got[MAX_TOK];
	int n_prompt, n_want, n_got;
	uint64_t id;
};

static struct served *served;
static int n_served;

static void on_served(void *ctx, const struct pg_engine_event *ev)
{
	(void)ctx;
	for (int i = 0; i < n_served; i++)
		if (served[i].id == ev->id && ev->type == PG_ENGINE_EV_TOKEN &&
		    served[i].n_got < MAX_TOK)
			served[i].got[served[i].n_got++] = ev->token;
}

/* One round: submit every prompt at once, run until idle; completions
 * identical to llama.cpp's. */
static int serve_round(struct pg_engine *e, int round)
{
	struct pg_engine_stats st;
	int same = 0, steps = 0;

	for (int i = 0; i < n_served; i++) {
		struct pg_request q = {
			.prompt = served[i].prompt, .n_prompt = served[i].n_prompt,
			.max_tokens = served[i].n_want, .ignore_eos = 1, .n = 1,
			.sampling = pg_sampling_default(),
		};

		served[i].n_got = 0;
		if (pg_engine_submit(e, &q, &served[i].id))
			fprintf(stderr, "served, record %d: %s\n", i,
				pg_engine_last_error(e));
	}
	while (!pg_engine_idle(e) && pg_engine_step(e) >= 0)
		steps++;
	for (int i = 0; i < n_served; i++) {
		int ok = served[i].n_got == served[i].n_want &&
			 !memcmp(served[i].got, served[i].want,
				 sizeof(int32_t) * (size_t)served[i].n_want);

		same += ok;
		if (!ok)
			printf("served, round %d, record %d: the completion differs from llama.cpp's (%d tokens, %d wanted)\n",
			       round, i, served[i].n_got, served[i].n_want);
	}
	pg_engine_stats(e, &st);
	printf("golden, llama.cpp numerics served, round %d: %d prompts at once, %d-token steps (%d steps), %llu prompt tokens from the prefix cache so far: %d of %d completions identical to llama.cpp's\n",
	       round, n_served, SERVE_BATCH, steps,
	       (unsigned long long)st.cached_tokens, same, n_served);
	return same == n_served && n_served >= 20;
}

/*
 * Served twice by one engine: the second round takes every prompt's full
 * pages from the prefix cache (pages the first round's sequences left),
 * and must still give llama.cpp's completions.
 */
static int check_served(const struct pg_model *m)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct pg_engine_config ec = pg_engine_config_default();
	struct pg_engine_stats st;
	struct pg_forward *fw;
	struct pg_engine *e;
	char err[1024];
	int ok;

	fp.numerics = PG_NUMERICS_LLAMA_CPP;
	fp.max_batch_tokens = SERVE_BATCH;
	fp.n_pages = 512;
	ec.max_batch_tokens = SERVE_BATCH;
	ec.prefix_cache = 1;
	ec.on_event = on_served;
	if (pg_forward_create(m, &fp, &fw, err, sizeof(err)) ||
	    pg_engine_create(m, fw, &ec, &e, err, sizeof(err))) {
		fprintf(stderr, "test_golden: cannot start the serving engine: %s\n", err);
		return 0;
	}
	ok = serve_round(e, 1);
	ok &= serve_round(e, 2);
	pg_engine_stats(e, &st);
	if (!st.cached_tokens) {
		fprintf(stderr, "test_golden: the second round took nothing from the prefix cache\n");
		ok = 0;
	}
	pg_engine_destroy(e);
	pg_forward_destroy(fw);
	return ok;
}

static int report(const struct engine *e, int tok_equal, double min_agree)
{
	const struct totals *t = &e->t;
	double agree = t->positions ? (double)t->argmax_agree / t->positions : 0;
	double mean_err = t->logit_pairs ? t->sum_logit_err / t->logit_pairs : 1e9;
	int ok = 1;

	printf("golden, %s: teacher forcing: argmax agrees with llama.cpp's at %ld of %ld positions (%.2f%%); %ld disagreements %s\n",
	       e->name, t->argmax_agree, t->positions, 100 * agree,
	       t->argmax_far, e->llama ? "in all" : "away from near-ties");
	printf("golden, %s: teacher forcing: argmax = llama.cpp's greedy next token at %ld of %ld positions (%.2f%%)\n",
	       e->name, t->greedy_agree, t->greedy_positions,
	       t->greedy_positions ? 100.0 * t->greedy_agree / t->greedy_positions : 0.0);
	printf("golden, %s: logits of llama.cpp's top-%d: max |diff| %.5f (bound %g; record %d, position %d, rank %d), mean %.5f%s, %ld of %ld more than 1 apart\n",
	       e->name, TOP_K, t->max_logit_err,
	       e->llama ? LLAMA_TOL : LOGIT_MAX,
	       t->max_err_record,
	       t->max_err_pos, t->max_err_rank, mean_err,
	       e->llama ? "" : " (bound " STR(LOGIT_MEAN) ")",
	       t->logit_over_1, t->logit_pairs);
	printf("golden, %s: greedy 64-token completions identical on %d of %d prompts (%ld of %ld tokens); %d diverge at near-ties, %d otherwise\n",
	       e->name, t->greedy_full, t->records, t->greedy_tokens_matched,
	       t->greedy_tokens, t->greedy_near_tie, t->greedy_bad);
	ok &= t->records >= 20 && tok_equal == t->records;
	ok &= t->logit_bad == 0 && t->greedy_bad == 0;
	if (e->llama)
		ok &= agree >= LLAMA_AGREE && t->greedy_full == t->records;
	else
		ok &= agree >= min_agree && t->argmax_far == 0 &&
		      mean_err < LOGIT_MEAN;
	return ok;
}

int main(int argc, char **argv)
{
	struct pg_forward_params fp = pg_forward_params_default();
	const char *srcdir = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
	const char *model_path;
	char path[4096], data[4096], err[1024];
	struct engine eng[2] = {
		{ .name = "llama.cpp numerics", .llama = 1 },
		{ .name = "pagoda numerics" },
	};
	struct pg_model *m;
	struct record *r = malloc(sizeof(*r));
	int rc, tok_equal = 0, ok = 1, first = 0;	/* eng[first..1] run */
	FILE *f;

	if (argc != 1 && argc != 3) {
		fprintf(stderr, "usage: tests/test_golden [MODEL DATA]\n"
			"  without arguments: the default model against tests/data/golden-smollm2.txt;\n"
			"  with them: MODEL against DATA (tests/ref/gen-model-ref.py's output for it),\n"
			"  pagoda's numerics only\n");
		return 1;
	}
	if (argc == 3) {
		first = 1;
		model_path = argv[1];
		snprintf(data, sizeof(data), "%s", argv[2]);
	} else {
		model_path = pg_model_default_path(path, sizeof(path));
		snprintf(data, sizeof(data), "%s/tests/data/golden-smollm2.txt", srcdir);
	}
	if (pg_model_load(model_path, 0, &m, err, sizeof(err))) {
		fprintf(stderr, "test_golden: skipped: %s (%s)\n", err,
			first ? "give a model that loads" : "run scripts/fetch-model");
		return 77;
	}
	if (!first && pg_cpu_isa_best() < PG_ISA_AVX2) {
		fprintf(stderr, "test_golden: skipped: no AVX2 here, and llama.cpp's numerics (and its reference data) are its AVX2 build's\n");
		pg_model_free(m);
		return 77;
	}
	f = fopen(data, "r");
	if (!f || !r) {
		fprintf(stderr, "test_golden: cannot open %s\n", data);
		return 1;
	}
	if (getenv("PAGODA_GOLDEN_DUMP") &&
	    !(dump = fopen(getenv("PAGODA_GOLDEN_DUMP"), "w"))) {
		perror(getenv("PAGODA_GOLDEN_DUMP"));
		return 1;
	}
	fp.max_batch_tokens = 2 * MAX_TOK;
	fp.n_pages = 256;
	for (int k = first; k < 2; k++) {
		fp.numerics = eng[k].llama ? PG_NUMERICS_LLAMA_CPP :
					     PG_NUMERICS_PAGODA;
		if (pg_forward_create(m, &fp, &eng[k].fw, err, sizeof(err)) ||
		    !(eng[k].kvc = pg_kvc_for_forward(eng[k].fw, m))) {
			fprintf(stderr, "test_golden: cannot start the engine with %s: %s\n",
				eng[k].name, err);
			return 1;
		}
	}
	served = calloc(MAX_RECORDS, sizeof(*served));
	if (!served)
		return 1;
	while ((rc = read_record(f, r)) == 1) {
		check_tokens(m, r, &tok_equal, eng[first].t.records);
		if (n_served < MAX_RECORDS) {
			struct served *sv = &served[n_served++];

			memcpy(sv->prompt, r->tokens, sizeof(int32_t) * r->n_tokens);
			memcpy(sv->want, r->greedy, sizeof(int32_t) * r->n_greedy);
			sv->n_prompt = r->n_tokens;
			sv->n_want = r->n_greedy;
		}
		for (int k = first; k < 2; k++) {
			check_teacher(&eng[k], m, r);
			check_greedy(&eng[k], m, r);
			eng[k].t.records++;
		}
		free(r->prompt);
	}
	fclose(f);
	if (rc < 0) {
		fprintf(stderr, "test_golden: %s: malformed record %d\n", data,
			eng[first].t.records);
		ok = 0;
	}
	if (first)
		printf("golden: model %s, data %s\n", model_path, data);
	printf("golden: %d prompts; tokenisation identical on %d\n",
	       eng[first].t.records, tok_equal);
	for (int k = first; k < 2; k++) {
		ok &= report(&eng[k], tok_equal,
			     first ? MODEL_MIN_AGREE : MIN_AGREE);
		pg_kvc_destroy(eng[k].kvc);
		pg_forward_destroy(eng[k].fw);
	}
	if (!first)
		ok &= check_served(m);
	if (dump && fclose(dump)) {
		perror(getenv("PAGODA_GOLDEN_DUMP"));
		ok = 0;
	}
	free(served);
	pg_model_free(m);
	free(r);
	return ok ? 0 : 1;
}
