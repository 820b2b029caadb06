/*
 * generate.c - synchronous generation of one sequence (see generate.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/engine/constrain.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/tokenizer.h"

const char *pg_finish_name(enum pg_finish f)
{
	switch (f) {
	case PG_FINISH_LENGTH: return "length";
	case PG_FINISH_STOP: return "stop";
	case PG_FINISH_CANCELLED: return "cancelled";
	case PG_FINISH_GRAMMAR: return "grammar";
	}
	return "unknown";
}

struct gen {
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	struct pg_kvc_seq *seq;
	const struct pg_model *m;
	struct pg_sampler *sampler;
	struct pg_stop *stop;
	struct pg_detok_stream detok;
	float *logits;			/* (n_vocab) */
	/* under a grammar: its cache, the grammar, the position, a scratch
	   row of logits and whether the draw may be lazy (constrain.h) */
	struct pg_constrain *con;
	struct pg_cgrammar *grammar;
	struct pg_grammar_state *gs;
	float *scratch;
	int lazy;
	pg_gen_emit_fn emit;
	void *ctx;
};

struct pg_kvc *pg_kvc_for_forward(const struct pg_forward *fw,
				  const struct pg_model *m)
{
	struct pg_kvc_params p = {
		.n_pages = pg_forward_n_pages(fw),
		.page_tokens = pg_forward_page_tokens(fw),
		.salt = pg_model_identity(m),
		.n_zones = pg_forward_n_zones(fw),
	};
	struct pg_kvc *c;

	return pg_kvc_create(&p, &c) ? NULL : c;
}

/* One chunk: reserve, copy on write, forward, record. */
static int run_chunk(struct pg_forward *fw, struct pg_kvc *kvc,
		     struct pg_kvc_seq *s, const int32_t *ids, int n,
		     int logits_all, float *logits)
{
	struct pg_kvc_copy copies[4];
	struct pg_fw_seq sq;
	int n_copies = 0, rc;

	rc = pg_kvc_seq_reserve(kvc, s, pg_kvc_seq_len(s) + n, copies, &n_copies);
	if (rc)
		return rc;
	for (int i = 0; i < n_copies; i++)
		pg_forward_copy_page(fw, copies[i].src, copies[i].dst);
	sq = (struct pg_fw_seq){
		.pages = pg_kvc_seq_pages(s),
		.n_past = pg_kvc_seq_len(s),
		.n_tokens = n,
		.logits_all = logits_all,
	};
	rc = pg_forward_batch(fw, ids, n, &sq, 1, logits);
	if (!rc)
		pg_kvc_seq_append(kvc, s, ids, n);
	return rc;
}

int pg_run_tokens(struct pg_forward *fw, struct pg_kvc *kvc,
		  struct pg_kvc_seq *s, const int32_t *ids, int n,
		  int logits_all, float *logits)
{
	int max = pg_forward_max_batch(fw);

	if (logits_all && n > max)
		return -E2BIG;
	for (int off = 0; off < n; off += max) {
		int len = n - off < max ? n - off : max;
		int rc = run_chunk(fw, kvc, s, ids + off, len, logits_all, logits);

		if (rc)
			return rc;
	}
	return 0;
}

/* Run n ids of the sequence; logits of the last. */
static int feed(struct gen *g, const int32_t *ids, int n)
{
	return pg_run_tokens(g->fw, g->kvc, g->seq, ids, n, 0, g->logits);
}

/* Pass a token's text through the UTF-8 stream and the stop matcher. */
static int emit_token(struct gen *g, int32_t id, int *stopped)
{
	char buf[512];
	const char *out;
	size_t out_len;
	int n = pg_detok_push(g->m->tok, &g->detok, id, 0, buf, sizeof(buf));

	if (n < 0)
		return n;
	n = pg_stop_feed(g->stop, buf, (size_t)n, &out, &out_len);
	if (n < 0)
		return n;
	*stopped = n;
	if (out_len && g->emit && g->emit(g->ctx, out, out_len))
		return 1;
	return 0;
}

static int finish_text(struct gen *g, int stopped)
{
	char buf[64];
	const char *out;
	size_t out_len;
	int n;

	if (stopped || !g->emit)
		return 0;
	n = pg_detok_flush(&g->detok, buf, sizeof(buf));
	if (n > 0)
		pg_stop_feed(g->stop, buf, (size_t)n, &out, &out_len);
	if (n > 0 && out_len)
		g->emit(g->ctx, out, out_len);
	pg_stop_flush(g->stop, &out, &out_len);
	if (out_len)
		g->emit(g->ctx, out, out_len);
	return 0;
}

/* draw - the next token into *id: 0, 1 when the grammar allows none, or
   -ENOMEM. */
static int draw(struct gen *g, const struct pg_gen_params *p, int32_t *id)
{
	if (!g->gs) {
		*id = pg_sampler_sample(g->sampler, g->logits, NULL, NULL);
		return 0;
	}
	switch (pg_constrain_draw(g->con, g->gs, g->sampler, g->lazy, p->ignore_eos,
				  g->logits, g->scratch, NULL, NULL, id)) {
	case PG_CONSTRAIN_TOKEN:
		return 0;
	case PG_CONSTRAIN_STUCK:
		return 1;
	case PG_CONSTRAIN_NOMEM:
		break;
	}
	return -ENOMEM;
}

static int decode_loop(struct gen *g, const struct pg_gen_params *p,
		       int32_t *out_ids, struct pg_gen_stats *st)
{
	double t0 = 0;
	int stopped = 0, rc;

	st->finish = PG_FINISH_LENGTH;
	while (st->n_gen < p->max_tokens) {
		int32_t id;

		if ((rc = draw(g, p, &id)) < 0)
			return rc;
		if (rc) {
			st->finish = PG_FINISH_GRAMMAR;
			break;
		}
		if (!p->ignore_eos && pg_tokenizer_is_eog(g->m->tok, id)) {
			st->finish = PG_FINISH_STOP;
			break;
		}
		if (g->gs && (rc = pg_grammar_accept(g->gs, pg_constrain_vocab(g->con), id))) {
			if (rc == -ENOMEM)
				return rc;
			st->finish = PG_FINISH_GRAMMAR;	/* as the engine's */
			break;
		}
		pg_sampler_accept(g->sampler, id);
		if (out_ids)
			out_ids[st->n_gen] = id;
		if (st->n_gen++ == 0)
			t0 = pg_now_s();
		rc = emit_token(g, id, &stopped);
		if (rc < 0)
			return rc;
		if (rc > 0 || stopped) {
			st->finish = rc > 0 ? PG_FINISH_CANCELLED : PG_FINISH_STOP;
			break;
		}
		if (g->gs && pg_grammar_dead(g->gs)) {
			st->finish = PG_FINISH_STOP;	/* nothing may follow */
			break;
		}
		if (st->n_gen == p->max_tokens)
			break;
		if ((rc = feed(g, &id, 1)))
			return rc;
	}
	if (st->n_gen > 1)
		st->decode_s = pg_now_s() - t0;
	return finish_text(g, stopped);
}

/* Prefill: take what the prefix cache holds, compute the rest. */
static int prefill(struct gen *g, const int32_t *prompt, int n_prompt,
		   struct pg_gen_stats *stats)
{
	int cached = pg_kvc_seq_match(g->kvc, g->seq, prompt, n_prompt);

	if (cached < 0)
		return cached;
	stats->n_cached = cached;
	return feed(g, prompt + cached, n_prompt - cached);
}

static void report_error(int rc, struct pg_forward *fw,
			 const struct pg_model *m, const struct pg_gen_stats *st,
			 char *err, size_t err_len)
{
	if (rc == -ENOSPC)
		snprintf(err, err_len, "the context (%d prompt + %d generated tokens) does not fit in the KV cache of %d pages of %d tokens; raise the cache size (--ctx-size) or lower max tokens",
			 st->n_prompt, st->n_gen, pg_forward_n_pages(fw),
			 pg_forward_page_tokens(fw));
	else if (rc == -EINVAL)
		snprintf(err, err_len, "a token id is out of range (the vocabulary has %d tokens)",
			 m->hp.n_vocab);
	else if (rc < 0)
		snprintf(err, err_len, "generation failed: %s", strerror(-rc));
}

int pg_generate(struct pg_forward *fw, struct pg_kvc *kvc,
		const struct pg_model *m,
		const int32_t *prompt, int n_prompt,
		const struct pg_gen_params *p, pg_gen_emit_fn emit, void *ctx,
		int32_t *out_ids, struct pg_gen_stats *stats, char *err,
		size_t err_len)
{
	struct gen g = { .fw = fw, .kvc = kvc, .m = m, .emit = emit, .ctx = ctx };
	double t0;
	int rc;

	*stats = (struct pg_gen_stats){ .n_prompt = n_prompt };
	if (n_prompt < 1 || p->max_tokens < 0) {
		snprintf(err, err_len, "the prompt is empty (at least one token is needed)");
		return -EINVAL;
	}
	if ((rc = pg_sampling_check(&p->sampling, err, err_len)))
		return rc;
	g.sampler = pg_sampler_create(&p->sampling, m->hp.n_vocab);
	g.stop = pg_stop_create(p->stop, p->n_stop);
	g.logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	g.seq = pg_kvc_seq_new(kvc, 0);
	rc = -ENOMEM;
	if (!g.sampler || !g.stop || !g.logits || !g.seq)
		goto out;
	if (p->grammar) {
		char gerr[200];

		g.con = pg_constrain_create(m->tok, m->hp.n_vocab);
		g.scratch = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
		if (!g.con || !g.scratch)
			goto out;
		rc = pg_constrain_get(g.con, p->grammar, p->grammar_len, &g.grammar,
				      gerr, sizeof(gerr));
		if (rc == -EINVAL) {
			snprintf(err, err_len, "the grammar: %s", gerr);
			goto out_free;
		}
		if (rc || !(g.gs = pg_constrain_start(g.grammar))) {
			rc = -ENOMEM;
			goto out;
		}
		g.lazy = pg_constrain_lazy(&p->sampling);
	}
	for (int i = 0; i < n_prompt; i++)
		pg_sampler_accept(g.sampler, prompt[i]);
	t0 = pg_now_s();
	rc = prefill(&g, prompt, n_prompt, stats);
	stats->prefill_s = pg_now_s() - t0;
	if (!rc)
		rc = decode_loop(&g, p, out_ids, stats);
out:
	report_error(rc, fw, m, stats, err, err_len);
out_free:
	pg_grammar_state_free(g.gs);
	pg_constrain_put(g.grammar);
	pg_constrain_free(g.con);
	free(g.scratch);
	pg_kvc_seq_free(kvc, g.seq);
	pg_sampler_free(g.sampler);
	pg_stop_free(g.stop);
	free(g.logits);
	return rc < 0 ? rc : 0;
}
