/*
 * test_golden.c - pagoda against llama.cpp on the default model, from the
 * reference data tests/ref/gen-model-ref.py stored in
 * tests/data/golden-smollm2.txt (format described at the top of that file).
 *
 * For every prompt:
 *  - tokenisation must be identical;
 *  - teacher forcing (prompt + llama.cpp's greedy completion in one batch):
 *    pagoda's argmax is compared with llama.cpp's top token at every
 *    position; every disagreement must be at a near-tie in llama.cpp's own
 *    logits (top-2 gap below NEAR_TIE), and agreement must be at least
 *    MIN_AGREE;
 *  - pagoda's logit of each of llama.cpp's top-16 tokens must lie within
 *    LOGIT_MAX of llama.cpp's, with a mean difference below LOGIT_MEAN;
 *  - at position 0 (one-token prompts), where attention is the identity
 *    and nothing but the matmuls, norms and FFN run, the logits of an
 *    engine summing as llama.cpp does (one_accumulator: Wo and Wdown
 *    without forward.c's canonical parts) must equal llama.cpp's to the 4
 *    decimals stored (FIRST_TOL): this pins every kernel outside attention
 *    to llama.cpp's arithmetic exactly.  The engine as it serves sums
 *    those products in parts, so that every parallel plan gives one
 *    device's bits; that order flips a few 8-bit roundings against
 *    llama.cpp's, and the bounds below hold it like any other;
 *  - greedy completion of up to 64 tokens, decoded one token at a time: how
 *    many match exactly is reported, and where one diverges, the divergence
 *    must be at a near-tie in llama.cpp's logits.
 *
 * Why these bounds.  Both programs quantise activations to 8 bits before
 * every quantised matmul, with the same rounding, and summing as llama.cpp
 * does, pagoda's logits at the first positions are bit-identical to
 * llama.cpp's.  But 8-bit rounding is discontinuous: a last-bit difference
 * anywhere (llama.cpp's batched kernels sum in another order, round the
 * attention weights to F16, use their own expf; pagoda sums Wo and Wdown
 * in canonical parts) flips some roundings, and across 30 blocks those
 * flips grow to the size of the quantisation noise itself.  Measured
 * against an exact float64 forward pass of a Q4_1 model, pagoda and
 * llama.cpp are equally far from it (mean |diff| 0.020 and 0.021) and
 * 0.012 from each other.  llama.cpp is not consistent with itself at this
 * level either: its batched teacher forcing disagrees with its own greedy
 * tokens at 36 of 1658 positions of this data (97.8%), and its batched and
 * one-token logits differ by up to 1.07 (the data's "spread" lines).  The
 * summation orders pagoda has used all landed between 97.0% and 97.9%
 * agreement, and every disagreement at a near-tie.  So the bounds are set
 * from what two correct implementations show: near-ties only, agreement
 * within a point of llama.cpp's with itself, mean logit difference well
 * under the quantisation noise of ~0.15-0.2, and a maximum that a wrong
 * RoPE, norm, mask or page table (which move logits by whole units at most
 * positions) cannot meet.
 *
 * Exits 77 when the default model has not been fetched.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/forward.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"

#define LOGIT_MAX 2.0
#define LOGIT_MEAN 0.25
#define MIN_AGREE 0.965
#define FIRST_TOL 2e-4
#define NEAR_TIE 0.5
#define TOP_K 16
#define MAX_TOK 1024

struct record {
	char *prompt;
	size_t prompt_len;
	int n_tokens;
	int32_t tokens[MAX_TOK];
	int n_greedy;
	int32_t greedy[MAX_TOK];
	float spread;		/* llama.cpp's batched vs incremental: max |diff| */
	int n_pos;
	int pos[MAX_TOK];
	int32_t top_id[MAX_TOK][TOP_K];
	float top_logit[MAX_TOK][TOP_K];
};

struct totals {
	int records, tok_equal;
	long positions, argmax_agree, logit_pairs, logit_bad;
	long greedy_positions, greedy_agree, argmax_far;
	int first_positions;
	double first_max_err, llama_spread;
	double max_logit_err, sum_logit_err;
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
			r->spread = strtof(line + 7, NULL);
		else if (!strncmp(line, "pos ", 4))
			rc = parse_pos(line + 4, r) ? -1 : rc;
		else if (!strncmp(line, "end", 3))
			break;
		if (rc < 0)
			break;
	}
	free(line);
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
			 struct totals *t)
{
	int32_t ids[MAX_TOK];
	int64_t n = pg_tokenize(m->tok, r->prompt, r->prompt_len,
				pg_tokenizer_add_bos(m->tok), 1, ids, MAX_TOK);

	if (n == r->n_tokens && !memcmp(ids, r->tokens, sizeof(int32_t) * (size_t)n))
		t->tok_equal++;
	else
		fprintf(stderr, "record %d: tokenisation differs (%lld vs %d tokens)\n",
			t->records, (long long)n, r->n_tokens);
}

/* Prompt + greedy in one batch; compare every pos line. */
static struct pg_kvc *kvc;	/* page accounting over fw's KV pages */

/* An engine that sums as llama.cpp does, for position 0 (check_first). */
static struct {
	const struct pg_model *m;
	struct pg_forward *fw;
	struct pg_kvc *kvc;
} one;

/* Position 0 of record r (its pos line i) on the one-accumulator engine. */
static void check_first(const struct record *r, int i, struct totals *t)
{
	int V = one.m->hp.n_vocab;
	float *lg = malloc(sizeof(float) * (size_t)V);
	struct pg_kvc_seq *s = pg_kvc_seq_new(one.kvc, 0);

	if (!lg || !s || pg_run_tokens(one.fw, one.kvc, s, r->tokens, 1, 1, lg)) {
		fprintf(stderr, "position 0: forward pass failed\n");
		t->logit_bad++;
	} else {
		for (int k = 0; k < TOP_K; k++) {
			double e = fabs(lg[r->top_id[i][k]] - r->top_logit[i][k]);

			t->first_max_err = e > t->first_max_err ? e : t->first_max_err;
		}
		t->first_positions++;
	}
	pg_kvc_seq_free(one.kvc, s);
	free(lg);
}

static void check_teacher(struct pg_forward *fw, const struct pg_model *m,
			  const struct record *r, struct totals *t)
{
	int V = m->hp.n_vocab, n = r->n_tokens + r->n_greedy;
	int32_t seq[2 * MAX_TOK];
	float *lg = malloc(sizeof(float) * (size_t)n * V);
	struct pg_kvc_seq *s = pg_kvc_seq_new(kvc, 0);

	memcpy(seq, r->tokens, sizeof(int32_t) * r->n_tokens);
	memcpy(seq + r->n_tokens, r->greedy, sizeof(int32_t) * r->n_greedy);
	if (!lg || !s || pg_run_tokens(fw, kvc, s, seq, n, 1, lg)) {
		fprintf(stderr, "record %d: forward pass failed\n", t->records);
		t->logit_bad++;
		goto out;
	}
	for (int i = 0; i < r->n_pos; i++) {
		const float *row = lg + (size_t)r->pos[i] * V;

		int best = argmax(row, V), next = r->pos[i] + 1 - r->n_tokens;

		t->positions++;
		t->argmax_agree += best == r->top_id[i][0];
		if (best != r->top_id[i][0] &&
		    r->top_logit[i][0] - r->top_logit[i][1] >= NEAR_TIE) {
			t->argmax_far++;
			printf("record %d position %d: argmax %d, llama.cpp %d with a margin of %.3f\n",
			       t->records, r->pos[i], best, r->top_id[i][0],
			       r->top_logit[i][0] - r->top_logit[i][1]);
		}
		if (next >= 0 && next < r->n_greedy) {
			t->greedy_positions++;
			t->greedy_agree += best == r->greedy[next];
		}
		for (int k = 0; k < TOP_K; k++) {
			double e = fabs(row[r->top_id[i][k]] - r->top_logit[i][k]);

			t->logit_pairs++;
			t->sum_logit_err += e;
			t->max_logit_err = e > t->max_logit_err ? e : t->max_logit_err;
			t->logit_bad += e > LOGIT_MAX;
		}
		if (r->pos[i] == 0)
			check_first(r, i, t);
	}
out:
	pg_kvc_seq_free(kvc, s);
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

static void check_greedy(struct pg_forward *fw, const struct pg_model *m,
			 const struct record *r, struct totals *t)
{
	float *lg = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	struct pg_kvc_seq *s = pg_kvc_seq_new(kvc, 0);
	int i = 0, rc;
	int32_t id = -1;

	rc = pg_run_tokens(fw, kvc, s, r->tokens, r->n_tokens, 0, lg);
	for (; !rc && i < r->n_greedy; i++) {
		id = argmax(lg, m->hp.n_vocab);
		if (id != r->greedy[i])
			break;
		rc = pg_run_tokens(fw, kvc, s, &id, 1, 0, lg);
	}
	t->greedy_tokens += r->n_greedy;
	t->greedy_tokens_matched += i;
	if (i == r->n_greedy) {
		t->greedy_full++;
	} else {
		double gap = gap_at(r, r->n_tokens - 1 + i, id);

		printf("record %d: greedy diverges at token %d of %d: llama.cpp %d, pagoda %d, llama.cpp's gap %.3f (%s)\n",
		       t->records, i, r->n_greedy, r->greedy[i], id, gap,
		       gap < NEAR_TIE ? "near-tie" : "NOT a near-tie");
		if (gap < NEAR_TIE)
			t->greedy_near_tie++;
		else
			t->greedy_bad++;
	}
	pg_kvc_seq_free(kvc, s);
	free(lg);
}

static int report(const struct totals *t)
{
	double agree = t->positions ? (double)t->argmax_agree / t->positions : 0;
	double mean_err = t->logit_pairs ? t->sum_logit_err / t->logit_pairs : 1e9;
	int ok = 1;

	printf("golden: %d prompts; tokenisation identical on %d\n", t->records, t->tok_equal);
	printf("golden: teacher forcing: argmax agrees at %ld of %ld positions (%.2f%%); %ld disagreements away from near-ties\n",
	       t->argmax_agree, t->positions, 100 * agree, t->argmax_far);
	printf("golden: teacher forcing: argmax = llama.cpp's greedy next token at %ld of %ld positions (%.2f%%)\n",
	       t->greedy_agree, t->greedy_positions,
	       t->greedy_positions ? 100.0 * t->greedy_agree / t->greedy_positions : 0.0);
	printf("golden: logits of llama.cpp's top-%d: max |diff| %.4f (bound %.2f), mean %.4f (bound %.2f); llama.cpp's own batched vs one-token spread: max %.4f\n",
	       TOP_K, t->max_logit_err, LOGIT_MAX, mean_err, LOGIT_MEAN,
	       t->llama_spread);
	printf("golden: position 0 of %d one-token prompts: max |diff| %.5f (bound %.4f)\n",
	       t->first_positions, t->first_max_err, FIRST_TOL);
	printf("golden: greedy 64-token completions identical on %d of %d prompts (%ld of %ld tokens); %d diverge at near-ties, %d elsewhere\n",
	       t->greedy_full, t->records, t->greedy_tokens_matched, t->greedy_tokens,
	       t->greedy_near_tie, t->greedy_bad);
	ok &= t->records >= 20 && t->tok_equal == t->records;
	ok &= agree >= MIN_AGREE && t->argmax_far == 0;
	ok &= t->logit_bad == 0 && mean_err < LOGIT_MEAN;
	ok &= t->greedy_bad == 0;
	ok &= t->first_positions >= 1 && t->first_max_err <= FIRST_TOL;
	return ok ? 0 : 1;
}

int main(void)
{
	struct pg_forward_params fp = pg_forward_params_default();
	const char *srcdir = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
	char path[4096], data[4096], err[1024];
	struct pg_forward *fw;
	struct pg_model *m;
	struct totals t = { 0 };
	struct record *r = malloc(sizeof(*r));
	FILE *f;
	int rc;

	if (pg_model_load(pg_model_default_path(path, sizeof(path)), 0, &m, err,
			  sizeof(err))) {
		fprintf(stderr, "test_golden: skipped: %s (run scripts/fetch-model)\n", err);
		return 77;
	}
	snprintf(data, sizeof(data), "%s/tests/data/golden-smollm2.txt", srcdir);
	f = fopen(data, "r");
	fp.max_batch_tokens = 2 * MAX_TOK;
	fp.n_pages = 256;
	if (!f || !r || pg_forward_create(m, &fp, &fw, err, sizeof(err)) ||
	    !(kvc = pg_kvc_for_forward(fw, m))) {
		fprintf(stderr, "test_golden: cannot open %s or start the engine\n", data);
		return 1;
	}
	fp.max_batch_tokens = 16;
	fp.n_pages = 4;
	fp.one_accumulator = 1;
	one.m = m;
	if (pg_forward_create(m, &fp, &one.fw, err, sizeof(err)) ||
	    !(one.kvc = pg_kvc_for_forward(one.fw, m))) {
		fprintf(stderr, "test_golden: cannot start the one-accumulator engine: %s\n", err);
		return 1;
	}
	while ((rc = read_record(f, r)) == 1) {
		if (r->spread > t.llama_spread)
			t.llama_spread = r->spread;
		check_tokens(m, r, &t);
		check_teacher(fw, m, r, &t);
		check_greedy(fw, m, r, &t);
		free(r->prompt);
		t.records++;
	}
	fclose(f);
	if (rc < 0)
		fprintf(stderr, "test_golden: %s: malformed record %d\n", data, t.records);
	rc = rc < 0 ? 1 : report(&t);
	pg_kvc_destroy(kvc);
	pg_forward_destroy(fw);
	pg_kvc_destroy(one.kvc);
	pg_forward_destroy(one.fw);
	pg_model_free(m);
	free(r);
	return rc;
}
