/*
 * generate.c - synchronous generation of one sequence (see generate.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "generate.h"
#include "tokenizer.h"

double pg_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *pg_finish_name(enum pg_finish f)
{
	switch (f) {
	case PG_FINISH_LENGTH: return "length";
	case PG_FINISH_STOP: return "stop";
	case PG_FINISH_CANCELLED: return "cancelled";
	}
	return "unknown";
}

struct gen {
	struct pg_forward *fw;
	const struct pg_model *m;
	struct pg_seq_kv kv;
	struct pg_sampler *sampler;
	struct pg_stop *stop;
	struct pg_detok_stream detok;
	float *logits;			/* (n_vocab) */
	pg_gen_emit_fn emit;
	void *ctx;
};

/* Run n ids of the sequence in chunks of the batch limit; logits of the last. */
static int feed(struct gen *g, const int32_t *ids, int n)
{
	int max = pg_forward_max_batch(g->fw);

	for (int off = 0; off < n; off += max) {
		int len = n - off < max ? n - off : max;
		struct pg_fw_seq sq = { .kv = &g->kv, .n_tokens = len };
		int rc = pg_forward_batch(g->fw, ids + off, len, &sq, 1, g->logits);

		if (rc)
			return rc;
	}
	return 0;
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

static int decode_loop(struct gen *g, const struct pg_gen_params *p,
		       int32_t *out_ids, struct pg_gen_stats *st)
{
	double t0 = 0;
	int stopped = 0, rc;

	st->finish = PG_FINISH_LENGTH;
	while (st->n_gen < p->max_tokens) {
		int32_t id = pg_sampler_sample(g->sampler, g->logits, NULL, NULL);

		if (!p->ignore_eos && pg_tokenizer_is_eog(g->m->tok, id)) {
			st->finish = PG_FINISH_STOP;
			break;
		}
		pg_sampler_accept(g->sampler, id);
		if (out_ids)
			out_ids[st->n_gen] = id;
		if (st->n_gen++ == 0)
			t0 = pg_now();
		rc = emit_token(g, id, &stopped);
		if (rc < 0)
			return rc;
		if (rc > 0 || stopped) {
			st->finish = rc > 0 ? PG_FINISH_CANCELLED : PG_FINISH_STOP;
			break;
		}
		if (st->n_gen == p->max_tokens)
			break;
		if ((rc = feed(g, &id, 1)))
			return rc;
	}
	if (st->n_gen > 1)
		st->decode_s = pg_now() - t0;
	return finish_text(g, stopped);
}

int pg_generate(struct pg_forward *fw, const struct pg_model *m,
		const int32_t *prompt, int n_prompt,
		const struct pg_gen_params *p, pg_gen_emit_fn emit, void *ctx,
		int32_t *out_ids, struct pg_gen_stats *stats, char *err,
		size_t err_len)
{
	struct gen g = { .fw = fw, .m = m, .emit = emit, .ctx = ctx };
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
	rc = -ENOMEM;
	if (!g.sampler || !g.stop || !g.logits)
		goto out;
	for (int i = 0; i < n_prompt; i++)
		pg_sampler_accept(g.sampler, prompt[i]);
	t0 = pg_now();
	rc = feed(&g, prompt, n_prompt);
	stats->prefill_s = pg_now() - t0;
	if (!rc)
		rc = decode_loop(&g, p, out_ids, stats);
out:
	if (rc == -ENOSPC)
		snprintf(err, err_len, "the context (%d prompt + %d generated tokens) does not fit in the KV pool of %d pages of %d tokens; raise the pool size or lower max tokens",
			 n_prompt, stats->n_gen,
			 pg_kv_pool_n_pages(pg_forward_kv_pool(fw)),
			 pg_kv_pool_layout(pg_forward_kv_pool(fw))->page_tokens);
	else if (rc == -EINVAL)
		snprintf(err, err_len, "a token id is out of range (the vocabulary has %d tokens)",
			 m->hp.n_vocab);
	else if (rc < 0)
		snprintf(err, err_len, "generation failed: %s", strerror(-rc));
	pg_seq_kv_release(pg_forward_kv_pool(fw), &g.kv);
	pg_sampler_free(g.sampler);
	pg_stop_free(g.stop);
	free(g.logits);
	return rc < 0 ? rc : 0;
}
