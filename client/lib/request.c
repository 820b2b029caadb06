/*
 * request.c - generation requests: their defaults, their checks, their
 * wire form (struct pg_gen_wire, the prompt, the stop strings), and the
 * calls that send them: pagoda_submit, pagoda_generate (which also
 * gathers the whole completion) and pagoda_cancel.
 *
 * The sampling values are the daemon's to judge (one truth: the engine's
 * pg_sampling_check); this file checks only what it must to build the
 * payload.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/internal.h"

#define PGC_MAX_N 16
#define PGC_MAX_LOGPROBS 20
#define PGC_ID_MAX (PGC_OP_ID_BIT - 1)

static_assert(sizeof(struct pagoda_logprob) == sizeof(struct pg_logprob_wire),
	      "logprobs are copied as they come");

/* The one set of defaults: the `pagoda` command's and pagodad --prompt's. */
void pagoda_request_init(struct pagoda_request *req)
{
	memset(req, 0, sizeof(*req));
	req->temperature = 0.8f;
	req->top_k = 40;
	req->top_p = 0.95f;
	req->min_p = 0.05f;
	req->repeat_penalty = 1.0f;
	req->repeat_last_n = 64;
	req->seed = PAGODA_SEED_RANDOM;
	req->max_tokens = 128;
	req->n = 1;
}

static size_t pad4(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

/* prompt_size - bytes of req's prompt on the wire, or 0 when malformed. */
static size_t prompt_size(struct pagoda *p, const struct pagoda_request *req,
			  int *kind)
{
	size_t bytes = 0;
	int given = !!req->prompt + !!req->tokens + !!req->messages;

	if (given != 1)
		return pgc_fail(p, 0, "give the prompt as exactly one of text, tokens or messages (%d given)",
				given);
	if (req->prompt) {
		*kind = PG_PROMPT_TEXT;
		bytes = strlen(req->prompt);
	} else if (req->tokens) {
		*kind = PG_PROMPT_TOKENS;
		if (req->n_tokens > SIZE_MAX / 8)
			return 0;
		bytes = req->n_tokens * sizeof(int32_t);
	} else {
		*kind = PG_PROMPT_CHAT;
		for (size_t i = 0; i < req->n_messages; i++) {
			const struct pagoda_message *m = &req->messages[i];

			if (!m->content || (unsigned)m->role > PAGODA_ROLE_TOOL)
				return pgc_fail(p, 0, "chat message %zu has %s",
						i, m->content ? "an unknown role" : "no content");
			bytes += sizeof(struct pg_chat_msg_wire) + pad4(strlen(m->content));
		}
	}
	if (!bytes)
		pgc_fail(p, 0, "the prompt is empty");
	return bytes;
}

/* The most bytes of grammar or schema text a request carries (1 MiB,
   the daemon's limit). */
#define PGC_MAX_GRAMMAR (1u << 20)

/* grammar_len - the bytes of req's grammar or schema text, 0: none. */
static size_t grammar_len(const struct pagoda_request *req)
{
	const char *t = req->grammar ? req->grammar : req->json_schema;

	return t ? strlen(t) : 0;
}

/* check_counts - the fields with fixed ranges on the wire. */
static int check_counts(struct pagoda *p, const struct pagoda_request *req)
{
	const struct pg_seg_header *h = p->hdr;

	if (req->n < 1 || req->n > PGC_MAX_N)
		return pgc_fail(p, PAGODA_EINVAL, "n must be in 1..%d, not %d",
				PGC_MAX_N, req->n);
	if (req->n_logprobs < 0 || req->n_logprobs > PGC_MAX_LOGPROBS)
		return pgc_fail(p, PAGODA_EINVAL, "n_logprobs must be in 0..%d, not %d",
				PGC_MAX_LOGPROBS, req->n_logprobs);
	if (req->max_tokens < 0)
		return pgc_fail(p, PAGODA_EINVAL, "max_tokens must be >= 0, not %d",
				req->max_tokens);
	if (req->id > PGC_ID_MAX)
		return pgc_fail(p, PAGODA_EINVAL,
				"request ids are 1 .. 2^63 - 1 (0: automatic)");
	if (h->max_tokens && (unsigned)req->max_tokens > h->max_tokens)
		return pgc_fail(p, PAGODA_ETOOBIG,
				"max_tokens %d is over the daemon's limit of %u",
				req->max_tokens, h->max_tokens);
	if (req->tokens && h->max_prompt && req->n_tokens > h->max_prompt)
		return pgc_fail(p, PAGODA_ETOOBIG,
				"the prompt has %zu tokens, over the daemon's limit of %u",
				req->n_tokens, h->max_prompt);
	for (size_t i = 0; i < req->n_stop; i++)
		if (!req->stop || !req->stop[i] || !req->stop[i][0])
			return pgc_fail(p, PAGODA_EINVAL, "stop string %zu is empty", i);
	if (req->grammar && req->json_schema)
		return pgc_fail(p, PAGODA_EINVAL,
				"give a grammar or a json_schema, not both");
	if ((req->grammar && !req->grammar[0]) ||
	    (req->json_schema && !req->json_schema[0]))
		return pgc_fail(p, PAGODA_EINVAL, "the %s is empty",
				req->grammar ? "grammar" : "json_schema");
	if (grammar_len(req) > PGC_MAX_GRAMMAR)
		return pgc_fail(p, PAGODA_ETOOBIG, "the %s has %zu bytes: at most %u",
				req->grammar ? "grammar" : "json_schema",
				grammar_len(req), PGC_MAX_GRAMMAR);
	return 0;
}

/*
 * pgc_gen_size - check req and count its GENERATE payload's bytes; 0 or
 * PAGODA_EINVAL / PAGODA_ETOOBIG with a message on p.
 */
static int pgc_gen_size(struct pagoda *p, const struct pagoda_request *req,
			uint32_t *bytes)
{
	const struct pg_seg_header *h = p->hdr;
	size_t prompt, stop = 0, total;
	int kind, rc = check_counts(p, req);

	if (rc)
		return rc;
	prompt = prompt_size(p, req, &kind);
	if (!prompt)
		return PAGODA_EINVAL;
	for (size_t i = 0; i < req->n_stop; i++)
		stop += strlen(req->stop[i]) + 1;
	total = sizeof(struct pg_gen_wire) + prompt + stop + grammar_len(req);
	if (prompt > UINT32_MAX || stop > UINT32_MAX || total > UINT32_MAX ||
	    (h->max_payload && total > h->max_payload))
		return pgc_fail(p, PAGODA_ETOOBIG,
				"the request is %zu bytes, over the daemon's limit of %u",
				total, h->max_payload);
	*bytes = (uint32_t)total;
	return 0;
}

static uint8_t *put(uint8_t *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return dst + n;
}

static uint8_t *encode_prompt(const struct pagoda_request *req, uint8_t *dst)
{
	static const uint8_t zero[3];

	if (req->prompt)
		return put(dst, req->prompt, strlen(req->prompt));
	if (req->tokens)
		return put(dst, req->tokens, req->n_tokens * sizeof(int32_t));
	for (size_t i = 0; i < req->n_messages; i++) {
		const struct pagoda_message *m = &req->messages[i];
		size_t len = strlen(m->content);
		struct pg_chat_msg_wire w = { (uint32_t)m->role, (uint32_t)len };

		dst = put(dst, &w, sizeof(w));
		dst = put(dst, m->content, len);
		dst = put(dst, zero, pad4(len) - len);
	}
	return dst;
}

/* pgc_gen_encode - write req's payload (pgc_gen_size bytes) to buf. */
static void pgc_gen_encode(const struct pagoda_request *req, uint8_t *buf)
{
	int random = req->seed == PAGODA_SEED_RANDOM;
	struct pg_gen_wire w = {
		.prompt_kind = req->prompt ? PG_PROMPT_TEXT
			       : req->tokens ? PG_PROMPT_TOKENS : PG_PROMPT_CHAT,
		.n_stop = (uint32_t)req->n_stop,
		.max_tokens = (uint32_t)req->max_tokens,
		.priority = req->priority,
		.n = (uint32_t)req->n,
		.flags = PG_GEN_TEXT | (req->ignore_eos ? PG_GEN_IGNORE_EOS : 0) |
			 (random ? PG_GEN_SEED_RANDOM : 0) |
			 (req->content_special ? PG_GEN_CONTENT_SPECIAL : 0),
		.temperature = req->temperature,
		.top_k = req->top_k,
		.top_p = req->top_p,
		.min_p = req->min_p,
		.repeat_penalty = req->repeat_penalty,
		.repeat_last_n = req->repeat_last_n,
		.presence_penalty = req->presence_penalty,
		.frequency_penalty = req->frequency_penalty,
		.seed = random ? 0 : req->seed,
		.n_logprobs = (uint32_t)req->n_logprobs,
		.finish_max = PGC_FINISH_MAX,
	};
	uint8_t *prompt = buf + sizeof(w), *dst = encode_prompt(req, prompt);

	w.prompt_bytes = (uint32_t)(dst - prompt);
	for (size_t i = 0; i < req->n_stop; i++)
		dst = put(dst, req->stop[i], strlen(req->stop[i]) + 1);
	w.stop_bytes = (uint32_t)(dst - prompt) - w.prompt_bytes;
	if (grammar_len(req)) {
		w.flags |= PG_GEN_GRAMMAR;
		w.grammar_kind = req->grammar ? PG_GRAMMAR_GBNF : PG_GRAMMAR_JSON_SCHEMA;
		w.grammar_bytes = (uint32_t)grammar_len(req);
		dst = put(dst, req->grammar ? req->grammar : req->json_schema, w.grammar_bytes);
	}
	memcpy(buf, &w, sizeof(w));
}

static void fill_gen(void *ctx, uint8_t *buf)
{
	pgc_gen_encode(ctx, buf);
}

/* pick_id - req's id, or a free automatic one; 0 when taken. */
static uint64_t pick_id(struct pagoda *p, const struct pagoda_request *req)
{
	if (req->id)
		return pgc_flight_owner(p, req->id) == PGC_NONE ? req->id : 0;
	while (pgc_flight_owner(p, p->next_id) != PGC_NONE)
		p->next_id = p->next_id % PGC_ID_MAX + 1;
	uint64_t id = p->next_id;

	p->next_id = p->next_id % PGC_ID_MAX + 1;
	return id;
}

/* send_gen - check, encode and submit req for owner; its id to *id. */
static int send_gen(struct pagoda *p, const struct pagoda_request *req,
		    enum pgc_owner owner, uint64_t *id)
{
	struct pg_sqe sqe = { .op = PG_OP_GENERATE };
	const struct pg_seg_header *h = p->hdr;
	uint32_t len = 0;
	int rc = pgc_alive(p);

	if (!rc)
		rc = pgc_gen_size(p, req, &len);
	if (rc)
		return rc;
	if (h->max_inflight && p->n_flight >= h->max_inflight)
		return pgc_fail(p, PAGODA_ELIMIT,
				"%zu requests in flight: the daemon's limit for one client is %u",
				p->n_flight, h->max_inflight);
	sqe.req_id = pick_id(p, req);
	if (!sqe.req_id)
		return pgc_fail(p, PAGODA_EDUPLICATE,
				"request %llu is already in flight",
				(unsigned long long)req->id);
	rc = pgc_flight_add(p, sqe.req_id, owner);
	if (!rc)
		rc = pgc_submit(p, &sqe, len, fill_gen, (void *)req);
	if (rc)
		pgc_flight_remove(p, sqe.req_id);
	else
		*id = sqe.req_id;
	return rc;
}

int pagoda_submit(pagoda_t *p, const struct pagoda_request *req, uint64_t *id)
{
	uint64_t got = 0;
	int rc;

	pthread_mutex_lock(&p->lock);
	rc = send_gen(p, req, PGC_STREAM, &got);
	pthread_mutex_unlock(&p->lock);
	if (!rc && id)
		*id = got;
	return rc;
}

int pagoda_cancel(pagoda_t *p, uint64_t id)
{
	struct pg_sqe sqe = { .req_id = id, .op = PG_OP_CANCEL };
	int rc;

	pthread_mutex_lock(&p->lock);
	rc = pgc_alive(p);
	if (!rc && (id & PGC_OP_ID_BIT || pgc_flight_owner(p, id) == PGC_NONE))
		rc = pgc_fail(p, PAGODA_ENOENT, "request %llu is not in flight",
			      (unsigned long long)id);
	if (!rc)
		rc = pgc_submit(p, &sqe, 0, NULL, NULL);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

/* ---- gathering a whole completion ---- */

static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
	size_t cap2 = *cap ? *cap : 16;
	void *b;

	if (need <= *cap)
		return 0;
	while (cap2 < need)
		cap2 *= 2;
	b = realloc(*buf, cap2 * elem);
	if (!b)
		return -1;
	*buf = b;
	*cap = cap2;
	return 0;
}

/* What pagoda_generate keeps per sample besides the result. */
struct gather {
	size_t cap_text, cap_ids, cap_lp, cap_at, cap_tlp;
	int done;
};

static int add_tokens(struct pagoda_sample *s, struct gather *g,
		      const struct pgc_rx *rx, int logprobs)
{
	size_t n = rx->cqe.n_ids;

	if (grow((void **)&s->text, &g->cap_text, s->text_len + rx->len + 1, 1) ||
	    grow((void **)&s->ids, &g->cap_ids, s->n_ids + n, sizeof(*s->ids)))
		return -1;
	memcpy(s->text + s->text_len, rx->data ? (char *)rx->data : "", rx->len);
	s->text_len += rx->len;
	s->text[s->text_len] = 0;
	memcpy(s->ids + s->n_ids, rx->cqe.ids, n * sizeof(int32_t));
	if (logprobs) {
		size_t end = s->logprobs_at ? s->logprobs_at[s->n_ids] : 0;

		if (grow((void **)&s->logprobs_at, &g->cap_at, s->n_ids + n + 1,
			 sizeof(size_t)) ||
		    grow((void **)&s->token_logprobs, &g->cap_tlp, s->n_ids + n,
			 sizeof(float)))
			return -1;
		for (size_t i = 0; i <= n; i++)
			s->logprobs_at[s->n_ids + i] = end;
		for (size_t i = 0; i < n; i++)	/* until its LOGPROBS comes */
			s->token_logprobs[s->n_ids + i] = NAN;
	}
	s->n_ids += n;
	return 0;
}

/* add_logprobs - a LOGPROBS payload (wire/client_proto.h: the token's own,
   then the top ones) onto the sample's last token. */
static int add_logprobs(struct pagoda_sample *s, struct gather *g,
			const struct pgc_rx *rx)
{
	const size_t one = sizeof(struct pagoda_logprob);
	size_t n = rx->len / one - 1, end;
	struct pagoda_logprob own;

	if (!s->logprobs_at || !s->n_ids)
		return 0;	/* nothing to attach them to */
	memcpy(&own, rx->data, one);
	s->token_logprobs[s->n_ids - 1] = own.logprob;
	end = s->logprobs_at[s->n_ids];
	if (grow((void **)&s->logprobs, &g->cap_lp, end + n, sizeof(*s->logprobs)))
		return -1;
	memcpy(s->logprobs + end, rx->data + one, n * one);
	s->logprobs_at[s->n_ids] = end + n;
	return 0;
}

/*
 * gather_one - one completion of the request into out.  Returns 1 when
 * the request is over, 0 to go on, or a negative code.
 */
static int gather_one(struct pagoda *p, struct pagoda_completion *out,
		      struct gather *g, const struct pgc_rx *rx, int logprobs)
{
	const struct pg_cqe *c = &rx->cqe;
	struct pagoda_sample *s;

	if (c->type == PG_CQE_ERROR)
		return pgc_fail(p, pgc_error_code(c->code), "%s",
				rx->len ? (const char *)rx->data : pagoda_strerror(pgc_error_code(c->code)));
	if (c->sample >= out->n_samples)
		return pgc_fail(p, PAGODA_EPROTO,
				"pagodad sent sample %u of a request of %zu",
				c->sample, out->n_samples);
	s = &out->samples[c->sample];
	g = &g[c->sample];
	switch (c->type) {
	case PG_CQE_TOKENS:
		return add_tokens(s, g, rx, logprobs) ? PAGODA_ENOMEM : 0;
	case PG_CQE_LOGPROBS:
		if (!pgc_logprobs_ok(rx))
			return pgc_fail(p, PAGODA_EPROTO, "pagodad sent a malformed LOGPROBS");
		return add_logprobs(s, g, rx) ? PAGODA_ENOMEM : 0;
	case PG_CQE_DONE:
		if (!pgc_finish_ok(c->code) || pgc_figures(rx, &s->figures))
			return pgc_fail(p, PAGODA_EPROTO, "pagodad sent a malformed DONE");
		s->finish = (enum pagoda_finish)c->code;
		g->done = 1;
		return (c->flags & PG_CQE_F_LAST) != 0;
	default:
		return pgc_fail(p, PAGODA_EPROTO,
				"pagodad answered a generation with a completion of type %u",
				c->type);
	}
}

/* alloc_samples - n empty samples, each with an empty text. */
static int alloc_samples(struct pagoda_completion *out, size_t n)
{
	out->samples = calloc(n, sizeof(*out->samples));
	if (!out->samples)
		return -1;
	out->n_samples = n;
	for (size_t i = 0; i < n; i++) {
		out->samples[i].text = calloc(1, 1);
		if (!out->samples[i].text)
			return -1;
	}
	return 0;
}

/* collect - read the completions of id into out until it is over. */
static int collect(struct pagoda *p, uint64_t id, struct pagoda_completion *out,
		   struct gather *g, int logprobs)
{
	struct pgc_rx rx = { 0 };
	int rc;

	do {
		rc = pgc_wait(p, pgc_match_id, &id, &rx, -1, PGC_TOKENS);
		if (rc > 0)
			rc = gather_one(p, out, g, &rx, logprobs);
	} while (rc == 0);
	pgc_rx_free(&rx);
	return rc < 0 ? rc : 0;
}

int pagoda_generate(pagoda_t *p, const struct pagoda_request *req,
		    struct pagoda_completion *out)
{
	struct gather *g = NULL;
	uint64_t id = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&p->lock);
	if (req->n < 1 || req->n > PGC_MAX_N) {
		rc = pgc_fail(p, PAGODA_EINVAL, "n must be in 1..%d, not %d",
			      PGC_MAX_N, req->n);
		goto out_unlock;
	}
	g = calloc((size_t)req->n, sizeof(*g));
	if (!g || alloc_samples(out, (size_t)req->n)) {
		rc = pgc_fail(p, PAGODA_ENOMEM, "out of memory");
		goto out_free;
	}
	rc = send_gen(p, req, PGC_WAIT, &id);
	if (rc)
		goto out_free;
	out->id = id;
	rc = collect(p, id, out, g, req->n_logprobs > 0);
	if (rc && pgc_flight_owner(p, id) != PGC_NONE) {
		/* we are leaving: whatever still comes for it is dropped */
		struct pg_sqe sqe = { .req_id = id, .op = PG_OP_CANCEL };

		pgc_flight_remove(p, id);
		if (!pgc_alive(p))
			pgc_submit(p, &sqe, 0, NULL, NULL);
	}
out_free:
	if (rc)
		pagoda_completion_free(out);
	free(g);
out_unlock:
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void pagoda_completion_free(struct pagoda_completion *c)
{
	for (size_t i = 0; c->samples && i < c->n_samples; i++) {
		free(c->samples[i].text);
		free(c->samples[i].ids);
		free(c->samples[i].logprobs);
		free(c->samples[i].logprobs_at);
		free(c->samples[i].token_logprobs);
	}
	free(c->samples);
	memset(c, 0, sizeof(*c));
}
