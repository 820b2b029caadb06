/*
 * request.c - what clients ask through their submission rings, and what
 * the engine answers.
 *
 * Every submission is copied out of the shared segment (the 64-byte entry,
 * then its payload into daemon memory) before anything in it is looked
 * at, and every field is checked: op, payload offset and length against
 * the arena and --max-payload, counts against what the payload holds,
 * token ids against the vocabulary, sampling values against the sampler's
 * ranges, limits against the configuration.  A bad request gets an ERROR
 * completion (enum pg_error and a message that says what to change); a
 * client that sends more than PGD_MAX_MALFORMED malformed ones is dropped.
 *
 * A GENERATE request lives in two tables: by the engine's id (for its
 * events) and by the client's req_id (duplicates, cancel).  When its client
 * goes, the request stays in the first table with no client until the
 * engine sends its last DONE (a cancelled sequence in a pipeline batch
 * ends when the batch does).
 *
 * Errors answering a request carry PG_CQE_F_LAST (the request is over),
 * except PG_EDUPLICATE (the request of that id is still running) and the
 * PG_ENOENT of a CANCEL (there was no such request).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/clock.h"
#include "daemon/daemon.h"
#include "daemon/engine/chat.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/grammar.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"
#include "daemon/log.h"
#include "daemon/schema.h"
#include "daemon/stats.h"

/* ---- the tables ---- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

int pgd_requests_init(struct pgd *d)
{
	uint64_t want = (uint64_t)d->cfg->max_clients * (uint64_t)d->cfg->max_inflight;
	uint32_t n = 64;

	while (n < want && n < (1u << 20))
		n <<= 1;
	d->by_engine = calloc(n, sizeof(*d->by_engine));
	d->by_engine_mask = n - 1;
	d->payload = malloc((size_t)d->cfg->sq_arena + 1);	/* any max_payload */
	d->ids_cap = d->lim.max_prompt;
	d->ids = malloc(sizeof(*d->ids) * (size_t)d->ids_cap);
	return d->by_engine && d->payload && d->ids ? 0 : -1;
}

int pgd_requests_fit_prompt(struct pgd *d, int n)
{
	int32_t *ids;

	if (n <= d->ids_cap)
		return d->ids_cap;
	ids = realloc(d->ids, sizeof(*ids) * (size_t)n);
	if (!ids)
		return d->ids_cap;
	d->ids = ids;
	d->ids_cap = n;
	return n;
}

void pgd_requests_free(struct pgd *d)
{
	free(d->payload);
	free(d->ids);
	d->payload = NULL;
	d->ids = NULL;
	if (!d->by_engine)
		return;
	for (uint32_t i = 0; i <= d->by_engine_mask; i++)
		while (d->by_engine[i]) {
			struct pgd_req *r = d->by_engine[i];

			d->by_engine[i] = r->next_engine;
			free(r);
		}
	free(d->by_engine);
	d->by_engine = NULL;
}

static struct pgd_req *req_by_engine(struct pgd *d, uint64_t id)
{
	struct pgd_req *r = d->by_engine[id & d->by_engine_mask];

	while (r && r->engine_id != id)
		r = r->next_engine;
	return r;
}

static struct pgd_req *req_by_client(struct pgd_client *c, uint64_t req_id)
{
	struct pgd_req *r = c->reqs[mix64(req_id) & c->reqs_mask];

	while (r && r->req_id != req_id)
		r = r->next_client;
	return r;
}

/* r into c's table: in flight from now on (its prompt may still be tokenized). */
static void client_insert(struct pgd_client *c, struct pgd_req *r)
{
	struct pgd_req **b = &c->reqs[mix64(r->req_id) & c->reqs_mask];

	r->c = c;
	r->next_client = *b;
	*b = r;
	c->n_inflight++;
}

/* r, submitted to the engine, into the engine-id table. */
static void engine_insert(struct pgd *d, struct pgd_req *r)
{
	struct pgd_req **e = &d->by_engine[r->engine_id & d->by_engine_mask];

	r->next_engine = *e;
	*e = r;
}

static void client_unlink(struct pgd_client *c, struct pgd_req *r)
{
	struct pgd_req **pp = &c->reqs[mix64(r->req_id) & c->reqs_mask];

	while (*pp != r)
		pp = &(*pp)->next_client;
	*pp = r->next_client;
	c->n_inflight--;
}

/* Forget a request the engine is done with. */
static void req_forget(struct pgd *d, struct pgd_req *r)
{
	struct pgd_req **pp = &d->by_engine[r->engine_id & d->by_engine_mask];

	while (*pp != r)
		pp = &(*pp)->next_engine;
	*pp = r->next_engine;
	if (r->c)
		client_unlink(r->c, r);
	free(r);
}

int pgd_requests_drop(struct pgd *d, struct pgd_client *c)
{
	int n = 0;

	for (uint32_t i = 0; i <= c->reqs_mask; i++)
		while (c->reqs[i]) {
			struct pgd_req *r = c->reqs[i];

			c->reqs[i] = r->next_client;
			r->c = NULL;
			n++;
			if (r->job) {	/* the worker's result is dropped */
				r->job->r = NULL;
				free(r);
				continue;
			}
			/* its DONE events (now or when its batch ends) free it */
			if (pg_engine_cancel(d->engine, r->engine_id) == PG_ENGINE_ENOENT)
				req_forget(d, r);
		}
	c->n_inflight = 0;
	return n;
}

/* ---- answers ---- */

/* pgd_reply_error - an ERROR completion, last: the request's final one. */
static void __attribute__((format(printf, 6, 7)))
pgd_reply_error(struct pgd *d, struct pgd_client *c, uint64_t req_id,
		enum pg_error code, int last, const char *fmt, ...)
{
	struct pg_cqe cqe = { .req_id = req_id, .type = PG_CQE_ERROR,
			      .code = (int32_t)code,
			      .flags = last ? PG_CQE_F_LAST : 0 };
	char msg[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(msg))
		n = (int)sizeof(msg) - 1;
	pgd_log(PGD_LOG_DEBUG, "client %u: request %llu: error %d: %s", c->id,
		(unsigned long long)req_id, code, msg);
	pgd_emit(d, c, &cqe, msg, (uint32_t)n);
	if (code == PG_EINVAL && ++c->n_malformed > PGD_MAX_MALFORMED)
		pgd_mark_dead(d, c, PG_EPROTO,
			      "more than %d malformed requests: disconnected; fix the client",
			      PGD_MAX_MALFORMED);
}

#define BAD(d, c, e, ...) pgd_reply_error(d, c, (e)->req_id, PG_EINVAL, 1, __VA_ARGS__)

/* ---- GENERATE ---- */

/* The KV pool's capacity in tokens. */
static int pool_tokens(const struct pgd *d)
{
	return pg_forward_n_pages(d->fw) * pg_forward_page_tokens(d->fw);
}

/*
 * A prompt of n tokens over d->lim.max_prompt: the message names the cap
 * that was hit, --max-prompt when it was set, else the KV pool it
 * defaults to.
 */
static void prompt_too_big(struct pgd *d, struct pgd_client *c, uint64_t req_id,
			   long long n)
{
	if (d->cfg->max_prompt > 0)
		pgd_reply_error(d, c, req_id, PG_ETOOBIG, 1,
				"the prompt has %lld tokens, over the daemon's limit of %d (--max-prompt): shorten it, or raise the limit",
				n, d->lim.max_prompt);
	else
		pgd_reply_error(d, c, req_id, PG_ETOOBIG, 1,
				"the prompt has %lld tokens, more than the KV pool holds (%d pages of %d tokens = %d): shorten it, or give pagodad a larger pool (--ctx-size or --kv-size)",
				n, pg_forward_n_pages(d->fw),
				pg_forward_page_tokens(d->fw), pool_tokens(d));
}

/* Token ids given as such into d->ids; the count or -1 after replying. */
static int given_ids(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
		     const uint8_t *p, uint32_t bytes)
{
	uint32_t n = bytes / 4;

	if (bytes % 4 || !n) {
		BAD(d, c, e, "a token prompt is a non-empty array of int32 ids; prompt_bytes %u is not",
		    bytes);
		return -1;
	}
	if (n > (uint32_t)d->lim.max_prompt) {
		prompt_too_big(d, c, e->req_id, n);
		return -1;
	}
	memcpy(d->ids, p, bytes);
	for (uint32_t i = 0; i < n; i++)
		if (d->ids[i] < 0 || d->ids[i] >= d->lim.n_vocab) {
			BAD(d, c, e, "prompt token %u (id %d) is out of range: the vocabulary has %d tokens",
			    i, d->ids[i], d->lim.n_vocab);
			return -1;
		}
	return (int)n;
}

/* The stop strings of g (at p, NUL-terminated each) into stops[]. */
static int stop_strings(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
			const struct pg_gen_wire *g, const char *p,
			const char **stops)
{
	uint32_t left = g->stop_bytes;

	if (g->n_stop > PGD_MAX_STOP) {
		BAD(d, c, e, "n_stop %u: at most %d stop strings", g->n_stop, PGD_MAX_STOP);
		return -1;
	}
	for (uint32_t i = 0; i < g->n_stop; i++) {
		const char *end = memchr(p, 0, left);

		if (!end) {
			BAD(d, c, e, "stop string %u does not end (NUL) within stop_bytes", i);
			return -1;
		}
		if (end == p) {
			BAD(d, c, e, "stop string %u is empty", i);
			return -1;
		}
		stops[i] = p;
		left -= (uint32_t)(end - p) + 1;
		p = end + 1;
	}
	return 0;
}

#define GEN_FLAGS (PG_GEN_IGNORE_EOS | PG_GEN_TEXT | PG_GEN_SEED_RANDOM | \
		   PG_GEN_CONTENT_SPECIAL | PG_GEN_GRAMMAR)

/*
 * The grammar of g (PG_GEN_GRAMMAR; its text at p) as GBNF into *out
 * (malloc'd, *out_len bytes), a JSON Schema translated; *out NULL when g
 * has none.  -1 after replying.  The engine compiles the text when the
 * request is submitted and answers its errors.
 */
static int gen_grammar(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
		       const struct pg_gen_wire *g, const char *p, char **out,
		       size_t *out_len)
{
	char err[256];
	int rc;

	*out = NULL;
	*out_len = 0;
	if (!(g->flags & PG_GEN_GRAMMAR)) {
		if (g->grammar_kind || g->grammar_bytes) {
			BAD(d, c, e, "grammar_kind and grammar_bytes are set without the PG_GEN_GRAMMAR flag");
			return -1;
		}
		return 0;
	}
	if (!g->grammar_bytes || g->grammar_bytes > PG_GRAMMAR_MAX_TEXT) {
		BAD(d, c, e, "grammar_bytes %u: give 1 to %u bytes of grammar", g->grammar_bytes,
		    PG_GRAMMAR_MAX_TEXT);
		return -1;
	}
	switch (g->grammar_kind) {
	case PG_GRAMMAR_GBNF:
		*out = malloc(g->grammar_bytes);
		if (!*out)
			break;
		memcpy(*out, p, g->grammar_bytes);
		*out_len = g->grammar_bytes;
		return 0;
	case PG_GRAMMAR_JSON_SCHEMA:
		rc = pg_schema_to_gbnf(p, g->grammar_bytes, out, err, sizeof(err));
		if (rc == -EINVAL) {
			BAD(d, c, e, "the JSON Schema: %s", err);
			return -1;
		}
		if (rc)
			break;
		*out_len = strlen(*out);
		return 0;
	default:
		BAD(d, c, e, "grammar_kind %u is not 1 (GBNF) or 2 (JSON Schema)", g->grammar_kind);
		return -1;
	}
	pgd_reply_error(d, c, e->req_id, PG_ENOMEM, 1, "pagodad is out of memory for the request's grammar");
	return -1;
}

/* Where g's grammar text starts in its payload. */
static const char *grammar_text(const struct pg_gen_wire *g, const uint8_t *buf)
{
	return (const char *)buf + sizeof(*g) + g->prompt_bytes + g->stop_bytes;
}

/*
 * A seed for a request that gives none (PG_GEN_SEED_RANDOM): from the
 * kernel's pool, else from the clock and a counter, so that two requests
 * never share one.
 */
static uint64_t fresh_seed(void)
{
	static uint64_t n;
	uint64_t s;

	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) == (ssize_t)sizeof(s))
		return s;
	return mix64((uint64_t)time(NULL) ^ mix64(++n) ^ (uint64_t)clock());
}

/* Check g's counts, flags and sampling values and fill q; -1 after replying. */
static int gen_params(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
		      const struct pg_gen_wire *g, struct pg_request *q)
{
	struct pg_sampling *sp = &q->sampling;
	char msg[256];

	if (g->flags & ~GEN_FLAGS) {
		BAD(d, c, e, "unknown GENERATE flags 0x%x", g->flags & ~GEN_FLAGS);
		return -1;
	}
	if (g->n > PGD_MAX_SAMPLES) {
		BAD(d, c, e, "n = %u samples: give 1 to %d", g->n, PGD_MAX_SAMPLES);
		return -1;
	}
	if (g->max_tokens > (uint32_t)d->lim.max_tokens) {
		pgd_reply_error(d, c, e->req_id, PG_ETOOBIG, 1,
				"max_tokens %u is over the daemon's limit of %d (--max-tokens)",
				g->max_tokens, d->lim.max_tokens);
		return -1;
	}
	if (g->n_logprobs > PG_MAX_LOGPROBS) {
		BAD(d, c, e, "n_logprobs %u: at most %d log-probabilities per token",
		    g->n_logprobs, PG_MAX_LOGPROBS);
		return -1;
	}
	sp->n_logprobs = (int)g->n_logprobs;
	sp->temperature = g->temperature;
	sp->top_k = g->top_k < 0 ? 0 : g->top_k;
	sp->top_p = g->top_p > 1.0f ? 1.0f : g->top_p;
	sp->min_p = g->min_p < 0.0f ? 0.0f : g->min_p;
	sp->repeat_penalty = g->repeat_penalty;
	sp->repeat_last_n = g->repeat_last_n;
	sp->presence_penalty = g->presence_penalty;
	sp->frequency_penalty = g->frequency_penalty;
	sp->seed = g->flags & PG_GEN_SEED_RANDOM ? fresh_seed() : g->seed;
	if (g->temperature < 0.0f)
		sp->temperature = 0.0f;	/* client_proto.h: <= 0 is greedy */
	if (pg_sampling_check(sp, msg, sizeof(msg))) {
		BAD(d, c, e, "%s", msg);
		return -1;
	}
	q->n = g->n ? (int)g->n : 1;
	q->ignore_eos = !!(g->flags & PG_GEN_IGNORE_EOS);
	q->priority = g->priority;
	q->client = c->id;
	return 0;
}

/*
 * max_tokens 0 means "as many as allowed": the daemon's limit, less when
 * the prompt leaves less room in the KV pool.
 */
static int gen_max_tokens(struct pgd *d, struct pgd_client *c,
			  const struct pg_sqe *e, uint32_t asked, int n_prompt)
{
	int pool = pool_tokens(d);
	int room = pool - n_prompt;

	if (asked)
		return (int)asked;
	if (room < 1) {
		pgd_reply_error(d, c, e->req_id, PG_ETOOBIG, 1,
				"the prompt of %d tokens leaves no room in the KV pool of %d tokens: shorten it, or give pagodad a larger pool (--ctx-size or --kv-size)",
				n_prompt, pool);
		return -1;
	}
	return room < d->lim.max_tokens ? room : d->lim.max_tokens;
}

static enum pg_error engine_code(int rc)
{
	switch (rc) {
	case PG_ENGINE_ETOOBIG: return PG_ETOOBIG;
	case PG_ENGINE_ENOMEM: return PG_ENOMEM;
	case PG_ENGINE_EFORWARD: return PG_EENGINE;
	default: return PG_EINVAL;
	}
}

/*
 * Submit q (its prompt filled) for r, which is in c's table: to the
 * engine, or answered (and let go) when the engine refuses it.
 */
static void gen_submit(struct pgd *d, struct pgd_client *c, struct pgd_req *r,
		       struct pg_request *q, uint32_t asked)
{
	const struct pg_sqe e = { .req_id = r->req_id };	/* for answers */
	int rc;

	q->max_tokens = gen_max_tokens(d, c, &e, asked, q->n_prompt);
	if (q->max_tokens < 0) {	/* answered */
		client_unlink(c, r);
		free(r);
		return;
	}
	rc = pg_engine_submit(d->engine, q, &r->engine_id);
	if (rc) {
		client_unlink(c, r);
		free(r);
		pgd_reply_error(d, c, e.req_id, engine_code(rc), 1, "%s%s",
				pg_engine_last_error(d->engine),
				rc == PG_ENGINE_ETOOBIG ? ": ask for fewer tokens (max_tokens), shorten the prompt, or give pagodad a larger pool (--ctx-size or --kv-size)" : "");
		return;
	}
	engine_insert(d, r);
	pgd_stats_submitted(d->stats, &r->st, q->n_prompt);
}

static struct pgd_req *req_new(struct pgd *d, struct pgd_client *c,
			       const struct pg_sqe *e, const struct pg_gen_wire *g,
			       const struct pg_request *q)
{
	struct pgd_req *r = calloc(1, sizeof(*r));

	if (!r) {
		pgd_reply_error(d, c, e->req_id, PG_ENOMEM, 1, "pagodad is out of memory for the request");
		return NULL;
	}
	r->req_id = e->req_id;
	r->st.slot = c->slot;
	r->st.id = c->id;
	r->text = !!(g->flags & PG_GEN_TEXT);
	r->n_samples = g->n ? (int)g->n : 1;
	r->seed = q->sampling.seed;
	r->finish_max = g->finish_max ? g->finish_max : PG_FINISH_WIRE_ERROR;
	return r;
}

/* A prompt of token ids: checked and submitted at once. */
static void gen_now(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
		    const struct pg_gen_wire *g, const uint8_t *buf)
{
	const char *stops[PGD_MAX_STOP];
	struct pg_request q = { .stop = stops };
	struct pgd_req *r;
	char *grammar = NULL;
	int n;

	if (gen_params(d, c, e, g, &q) ||
	    stop_strings(d, c, e, g, (const char *)buf + sizeof(*g) + g->prompt_bytes, stops))
		return;
	q.n_stop = (int)g->n_stop;
	n = given_ids(d, c, e, buf + sizeof(*g), g->prompt_bytes);
	if (n < 0)
		return;
	if (gen_grammar(d, c, e, g, grammar_text(g, buf), &grammar, &q.grammar_len))
		return;
	q.grammar = grammar;
	q.prompt = d->ids;
	q.n_prompt = n;
	r = req_new(d, c, e, g, &q);
	if (r) {
		client_insert(c, r);
		gen_submit(d, c, r, &q, g->max_tokens);	/* the engine copies it */
	}
	free(grammar);
}

/* A copy of the len bytes of payload at buf in a new job for c's e. */
static struct pgd_tokjob *job_new(struct pgd *d, struct pgd_client *c,
				  const struct pg_sqe *e, const uint8_t *buf,
				  uint32_t len)
{
	struct pgd_tokjob *j = calloc(1, sizeof(*j));

	if (j)
		j->buf = malloc(len ? len : 1);
	if (!j || !j->buf) {
		pgd_tokjob_free(j);
		pgd_reply_error(d, c, e->req_id, PG_ENOMEM, 1, "pagodad is out of memory for the request");
		return NULL;
	}
	memcpy(j->buf, buf, len);
	j->bytes = len;
	j->op = e->op;
	j->slot = c->slot;
	j->serial = c->serial;
	j->req_id = e->req_id;
	return j;
}

/* Hand j to the worker; c holds back its submissions while it has many
   bytes there (pgd_drain). */
static void job_start(struct pgd *d, struct pgd_client *c, struct pgd_tokjob *j)
{
	c->tok_bytes += j->bytes;
	pgd_tok_submit(d, j);
}

/*
 * A prompt of text or chat messages: checked here, then tokenized (and
 * rendered) by the worker; pgd_tok_finish() submits it.  The request is in
 * flight meanwhile: it counts against the limit, and may be cancelled.
 */
static void gen_later(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
		      const struct pg_gen_wire *g, const uint8_t *buf,
		      uint32_t len)
{
	struct pgd_tokjob *j = job_new(d, c, e, buf, len);
	struct pgd_req *r;
	char err[256];

	if (!j)
		return;
	j->q.stop = j->stops;
	j->q.arrived = d->now;	/* tokenizing counts as queueing */
	if (gen_params(d, c, e, g, &j->q) ||
	    stop_strings(d, c, e, g, (const char *)j->buf + sizeof(*g) + g->prompt_bytes, j->stops))
		goto out_free;
	j->q.n_stop = (int)g->n_stop;
	if (gen_grammar(d, c, e, g, grammar_text(g, j->buf), &j->grammar, &j->q.grammar_len))
		goto out_free;
	j->q.grammar = j->grammar;
	j->chat = g->prompt_kind == PG_PROMPT_CHAT;
	if (j->chat && pgd_chat_walk(buf + sizeof(*g), g->prompt_bytes, NULL, NULL,
				     err, sizeof(err)) < 0) {
		BAD(d, c, e, "%s", err);
		goto out_free;
	}
	j->in = j->buf + sizeof(*g);
	j->in_len = g->prompt_bytes;
	j->add_bos = j->special = 1;
	j->content_special = !!(g->flags & PG_GEN_CONTENT_SPECIAL);
	j->max_tokens = g->max_tokens;
	r = req_new(d, c, e, g, &j->q);
	if (!r)
		goto out_free;
	r->job = j;
	j->r = r;
	client_insert(c, r);
	job_start(d, c, j);
	return;
out_free:
	pgd_tokjob_free(j);
}

static void op_generate(struct pgd *d, struct pgd_client *c,
			const struct pg_sqe *e, const uint8_t *buf, uint32_t len)
{
	struct pg_gen_wire g;

	if (d->draining) {
		pgd_stats_refused(d->stats);
		pgd_reply_error(d, c, e->req_id, PG_EBUSY, 1,
				"the daemon is draining: retry later");
		return;
	}
	if (len < sizeof(g)) {
		BAD(d, c, e, "a GENERATE payload starts with struct pg_gen_wire (%zu bytes); this one has %u bytes",
		    sizeof(g), len);
		return;
	}
	memcpy(&g, buf, sizeof(g));
	if ((uint64_t)sizeof(g) + g.prompt_bytes + g.stop_bytes + g.grammar_bytes > len) {
		BAD(d, c, e, "prompt_bytes %u + stop_bytes %u + grammar_bytes %u run past the payload's %u bytes",
		    g.prompt_bytes, g.stop_bytes, g.grammar_bytes, len);
		return;
	}
	if (req_by_client(c, e->req_id)) {
		pgd_reply_error(d, c, e->req_id, PG_EDUPLICATE, 0,
				"a request with id %llu is already in flight: choose another id",
				(unsigned long long)e->req_id);
		return;
	}
	if (c->n_inflight >= d->cfg->max_inflight) {
		pgd_reply_error(d, c, e->req_id, PG_ELIMIT, 1,
				"%d requests are already in flight for this client (--max-inflight %d): wait for one to finish",
				c->n_inflight, d->cfg->max_inflight);
		return;
	}
	switch (g.prompt_kind) {
	case PG_PROMPT_TOKENS:
		gen_now(d, c, e, &g, buf);
		return;
	case PG_PROMPT_TEXT:
	case PG_PROMPT_CHAT:
		gen_later(d, c, e, &g, buf, len);
		return;
	}
	BAD(d, c, e, "prompt_kind %u is not 0 (text), 1 (tokens) or 2 (chat)", g.prompt_kind);
}

/* ---- the worker's results ---- */

/* The client of j if it is still here (dead or not). */
static struct pgd_client *job_client(struct pgd *d, const struct pgd_tokjob *j)
{
	struct pgd_client *c = j->slot < (uint32_t)d->cfg->max_clients ? d->slots[j->slot] : NULL;

	return c && c->serial == j->serial ? c : NULL;
}

static void generate_finish(struct pgd *d, struct pgd_client *c,
			    struct pgd_tokjob *j)
{
	struct pgd_req *r = j->r;

	if (!r)		/* cancelled, or its client went */
		return;
	r->job = NULL;
	j->r = NULL;
	if (c->dead || j->code || j->n_ids > d->lim.max_prompt || !j->n_ids) {
		client_unlink(c, r);
		free(r);
	}
	if (c->dead)
		return;
	if (j->code)
		pgd_reply_error(d, c, j->req_id, j->code, 1, "%s", j->msg);
	else if (j->n_ids > d->lim.max_prompt)
		prompt_too_big(d, c, j->req_id, (long long)j->n_ids);
	else if (!j->n_ids)
		pgd_reply_error(d, c, j->req_id, PG_EINVAL, 1, "the prompt is empty: it gives no tokens");
	if (j->code || j->n_ids > d->lim.max_prompt || !j->n_ids)
		return;
	j->q.prompt = j->ids;
	j->q.n_prompt = (int)j->n_ids;
	gen_submit(d, c, r, &j->q, j->max_tokens);
}

static void tokenize_finish(struct pgd *d, struct pgd_client *c,
			    const struct pgd_tokjob *j)
{
	struct pg_cqe cqe = { .req_id = j->req_id, .type = PG_CQE_TOKENS_RESULT };

	if (c->dead)
		return;
	if (j->code)
		pgd_reply_error(d, c, j->req_id, j->code, 1, "%s", j->msg);
	else if (!pgd_payload_fits(c, (size_t)j->n_ids * 4))
		pgd_reply_error(d, c, j->req_id, PG_ETOOBIG, 1,
				"the text gives %lld tokens, more than a completion can carry (%u bytes): tokenize it in parts",
				(long long)j->n_ids, c->cq_arena.size);
	else
		pgd_emit(d, c, &cqe, j->ids, (uint32_t)j->n_ids * 4);
}

void pgd_tok_finish(struct pgd *d, struct pgd_tokjob *j)
{
	struct pgd_client *c = job_client(d, j);

	if (c) {
		c->tok_bytes -= j->bytes;
		if (j->op == PG_OP_TOKENIZE)
			tokenize_finish(d, c, j);
		else
			generate_finish(d, c, j);
	}
	pgd_tokjob_free(j);
}

/* ---- the other operations ---- */

/*
 * Cancel r before it reached the engine: each sample ends with DONE
 * CANCELLED, as the engine's would, and the worker's result is dropped.
 */
static void cancel_pending(struct pgd *d, struct pgd_client *c, struct pgd_req *r)
{
	struct pg_done_wire w = { .seed = r->seed };

	for (int s = 0; s < r->n_samples; s++) {
		struct pg_cqe cqe = { .req_id = r->req_id, .type = PG_CQE_DONE,
				      .sample = (uint8_t)s,
				      .code = PG_FINISH_WIRE_CANCELLED,
				      .flags = s + 1 == r->n_samples ? PG_CQE_F_LAST : 0 };

		pgd_emit(d, c, &cqe, &w, sizeof(w));
	}
	r->job->r = NULL;
	client_unlink(c, r);
	free(r);
}

static void op_cancel(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e)
{
	struct pgd_req *r = req_by_client(c, e->req_id);

	if (r && r->job) {	/* still tokenized: ends here, the result dropped */
		cancel_pending(d, c, r);
		return;
	}
	if (r && pg_engine_cancel(d->engine, r->engine_id) == PG_ENGINE_ENOENT) {
		req_forget(d, r);
		r = NULL;
	}
	if (!r)
		pgd_reply_error(d, c, e->req_id, PG_ENOENT, 0,
				"no request %llu in flight to cancel",
				(unsigned long long)e->req_id);
}

static void op_tokenize(struct pgd *d, struct pgd_client *c,
			const struct pg_sqe *e, const uint8_t *buf, uint32_t len)
{
	const uint16_t known = PG_TOK_ADD_BOS | PG_TOK_SPECIAL;
	struct pgd_tokjob *j;

	if (e->flags & ~known) {
		BAD(d, c, e, "unknown TOKENIZE flags 0x%x", e->flags & ~known);
		return;
	}
	j = job_new(d, c, e, buf, len);
	if (!j)
		return;
	j->in = j->buf;
	j->in_len = len;
	j->add_bos = !!(e->flags & PG_TOK_ADD_BOS);
	j->special = !!(e->flags & PG_TOK_SPECIAL);
	job_start(d, c, j);
}

/* Append id's text to *out (grown as needed up to max); -1 when over. */
static int detok_one(const struct pg_tokenizer *tok, struct pg_detok_stream *s,
		     int32_t id, int special, char **out, size_t *len,
		     size_t *cap, size_t max)
{
	for (;;) {
		int n = pg_detok_push(tok, s, id, special, *out + *len, *cap - *len);
		char *grown;

		if (n >= 0) {
			*len += (size_t)n;
			return *len <= max ? 0 : -E2BIG;
		}
		if (*cap >= max + 1024)
			return -E2BIG;
		grown = realloc(*out, *cap * 2);
		if (!grown)
			return -ENOMEM;
		*out = grown;
		*cap *= 2;
	}
}

static void op_detokenize(struct pgd *d, struct pgd_client *c,
			  const struct pg_sqe *e, const uint8_t *buf, uint32_t len)
{
	struct pg_cqe cqe = { .req_id = e->req_id, .type = PG_CQE_TEXT_RESULT };
	struct pg_detok_stream s = { .n_tail = 0 };
	size_t cap = 4096, out_len = 0, max = c->cq_arena.size;
	char *out;
	int32_t id;

	if (len % 4) {
		BAD(d, c, e, "a DETOKENIZE payload is int32 ids; %u bytes is not a whole number of them", len);
		return;
	}
	for (uint32_t i = 0; i < len / 4; i++) {
		memcpy(&id, buf + 4 * i, 4);
		if (id < 0 || id >= d->lim.n_vocab) {
			BAD(d, c, e, "token %u (id %d) is out of range: the vocabulary has %d tokens",
			    i, id, d->lim.n_vocab);
			return;
		}
	}
	out = malloc(cap);
	for (uint32_t i = 0; out && i < len / 4; i++) {
		memcpy(&id, buf + 4 * i, 4);
		int rc = detok_one(d->m->tok, &s, id, e->flags & PG_TOK_SPECIAL, &out,
				   &out_len, &cap, max);

		if (rc == -ENOMEM) {
			pgd_reply_error(d, c, e->req_id, PG_ENOMEM, 1,
					"pagodad is out of memory for the text of these %u tokens; try again later",
					len / 4);
			free(out);
			return;
		}
		if (rc) {
			pgd_reply_error(d, c, e->req_id, PG_ETOOBIG, 1,
					"the text of these %u tokens is more than a completion can carry (%zu bytes): detokenize them in parts",
					len / 4, max);
			free(out);
			return;
		}
	}
	if (out && cap - out_len < 16) {	/* room for the held-back tail */
		char *grown = realloc(out, cap + 16);

		if (!grown)
			free(out);
		out = grown;
		cap += 16;
	}
	if (out)
		out_len += (size_t)pg_detok_flush(&s, out + out_len, cap - out_len);
	if (!out)
		pgd_reply_error(d, c, e->req_id, PG_ENOMEM, 1,
				"pagodad is out of memory for the text of these tokens; try again later");
	else if (out_len > max)
		pgd_reply_error(d, c, e->req_id, PG_ETOOBIG, 1,
				"the text of these %u tokens is more than a completion can carry (%zu bytes): detokenize them in parts",
				len / 4, max);
	else
		pgd_emit(d, c, &cqe, out, (uint32_t)out_len);
	free(out);
}

/*
 * INFO: pg_info_wire, then with PG_INFO_CHAT the chat formats.  Other
 * flags are ignored, as a daemon before PG_INFO_CHAT ignored that one, so
 * that a client asking for what this daemon lacks sees a shorter answer
 * rather than an error.
 */
static void op_info(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e)
{
	const struct pg_hparams *hp = &d->m->hp;
	const struct pg_plan *plan = pg_forward_plan(d->fw);
	struct pg_cqe cqe = { .req_id = e->req_id, .type = PG_CQE_INFO };
	struct {
		struct pg_info_wire w;
		struct pg_chat_info_wire chat;
	} ans;
	struct pg_info_wire *w = &ans.w;
	struct pg_engine_stats st;
	int busy;

	static_assert(sizeof(ans) == sizeof(ans.w) + sizeof(ans.chat), "INFO answer padded");
	memset(&ans, 0, sizeof(ans));
	snprintf(w->model, sizeof(w->model), "%s", d->m->name);
	snprintf(w->arch, sizeof(w->arch), "%s", pg_arch_name(hp->arch));
	w->n_vocab = (uint32_t)hp->n_vocab;
	w->n_ctx_train = (uint32_t)hp->n_ctx_train;
	w->n_blocks = (uint32_t)hp->n_blocks;
	w->n_embd = (uint32_t)hp->n_embd;
	w->kv_pages = (uint32_t)pg_forward_n_pages(d->fw);
	w->page_tokens = (uint32_t)pg_forward_page_tokens(d->fw);
	w->bos = (uint32_t)pg_tokenizer_bos(d->m->tok);
	w->eos = (uint32_t)pg_tokenizer_eos(d->m->tok);
	w->generation = d->generation;
	w->pp = (uint32_t)plan->pp;
	w->tp = (uint32_t)plan->tp;
	w->cp = (uint32_t)plan->cp;
	pg_engine_stats(d->engine, &st);
	busy = st.n_running + st.n_waiting;
	w->n_clients = (uint16_t)d->n_live;
	w->n_active = (uint16_t)(busy > 0xffff ? 0xffff : busy);
	snprintf(ans.chat.format, sizeof(ans.chat.format), "%s",
		 pg_chat_format_name((enum pg_chat_format)d->chat_fmt));
	snprintf(ans.chat.tools, sizeof(ans.chat.tools), "%s",
		 pg_tool_format_name((enum pg_tool_format)d->chat_tools));
	pgd_emit(d, c, &cqe, &ans,
		 e->flags & PG_INFO_CHAT ? sizeof(ans) : sizeof(ans.w));
}

static void handle(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e,
		   const uint8_t *payload, uint32_t len)
{
	struct pg_cqe pong = { .req_id = e->req_id, .type = PG_CQE_PONG };

	switch (e->op) {
	case PG_OP_NOP:
		return;
	case PG_OP_PING:
		pong.arg = e->arg;
		pgd_emit(d, c, &pong, NULL, 0);
		return;
	case PG_OP_GENERATE:
		op_generate(d, c, e, payload, len);
		return;
	case PG_OP_CANCEL:
		op_cancel(d, c, e);
		return;
	case PG_OP_TOKENIZE:
		op_tokenize(d, c, e, payload, len);
		return;
	case PG_OP_DETOKENIZE:
		op_detokenize(d, c, e, payload, len);
		return;
	case PG_OP_INFO:
		op_info(d, c, e);
		return;
	}
	BAD(d, c, e, "unknown operation %u (this daemon knows 0 to %d)", e->op, PG_OP_MAX - 1);
}

static int has_payload(uint8_t op)
{
	return op == PG_OP_GENERATE || op == PG_OP_TOKENIZE || op == PG_OP_DETOKENIZE;
}

/*
 * Copy e's payload out of the submission arena into d->payload (NUL
 * after it).  Returns 0, or -1 after replying when it lies outside the
 * arena or over --max-payload.
 */
static int copy_payload(struct pgd *d, struct pgd_client *c, const struct pg_sqe *e)
{
	if (!has_payload(e->op) || !e->payload_len)
		return 0;
	if (!pg_arena_check(c->sq_arena_bytes, e->payload_off, e->payload_len)) {
		BAD(d, c, e, "payload_off %u + payload_len %u lies outside the submission arena of %u bytes",
		    e->payload_off, e->payload_len, c->sq_arena_bytes);
		return -1;
	}
	if (e->payload_len > d->lim.max_payload) {
		pgd_reply_error(d, c, e->req_id, PG_ETOOBIG, 1,
				"the payload of %u bytes is over the daemon's limit of %u bytes (--max-payload)",
				e->payload_len, d->lim.max_payload);
		return -1;
	}
	memcpy(d->payload, c->sq_arena + e->payload_off, e->payload_len);
	d->payload[e->payload_len] = 0;
	return 0;
}

int pgd_drain(struct pgd *d, struct pgd_client *c)
{
	const void *slot;
	struct pg_sqe e;
	int n = 0;

	while (!c->dead && !pgd_holding(d, c) && (slot = pg_ring_peek(&c->sq))) {
		int ok;

		memcpy(&e, slot, sizeof(e));	/* the client may rewrite it */
		ok = !copy_payload(d, c, &e);
		pg_ring_consume(&c->sq);
		n++;
		if (ok)
			handle(d, c, &e, d->payload,
			       has_payload(e.op) ? e.payload_len : 0);
	}
	pg_ring_release(&c->sq);
	if (pg_ring_corrupt(&c->sq))
		pgd_mark_dead(d, c, PG_EPROTO,
			      "the submission ring's tail moved backwards or past the ring: disconnected");
	return n;
}

/* ---- the engine's events ---- */

/* finish_code - f on the wire, for a client that reads codes up to max. */
static int32_t finish_code(enum pg_engine_finish f, uint32_t max)
{
	uint32_t code = PG_FINISH_WIRE_ERROR;

	switch (f) {
	case PG_ENGINE_FINISH_STOP: code = PG_FINISH_WIRE_STOP; break;
	case PG_ENGINE_FINISH_LENGTH: code = PG_FINISH_WIRE_LENGTH; break;
	case PG_ENGINE_FINISH_CANCELLED: code = PG_FINISH_WIRE_CANCELLED; break;
	case PG_ENGINE_FINISH_ERROR: break;
	case PG_ENGINE_FINISH_GRAMMAR: code = PG_FINISH_WIRE_GRAMMAR; break;
	}
	return (int32_t)(code > max ? PG_FINISH_WIRE_ERROR : code);
}

static void send_token(struct pgd *d, struct pgd_req *r,
		       const struct pg_engine_event *ev)
{
	struct pg_cqe cqe = { .req_id = r->req_id, .type = PG_CQE_TOKENS,
			      .sample = (uint8_t)ev->sample, .n_ids = 1,
			      .t_ns = pg_now_ns() };

	cqe.ids[0] = ev->token;
	pgd_emit(d, r->c, &cqe, ev->text, r->text ? (uint32_t)ev->text_len : 0);
	if (ev->n_top > 0) {	/* the token's top log-probabilities */
		struct pg_cqe lq = { .req_id = r->req_id, .type = PG_CQE_LOGPROBS,
				     .sample = (uint8_t)ev->sample, .n_ids = 1,
				     .t_ns = cqe.t_ns };
		struct pg_logprob_wire w[1 + PG_MAX_LOGPROBS];
		int n = ev->n_top < PG_MAX_LOGPROBS ? ev->n_top : PG_MAX_LOGPROBS;

		/* client_proto.h: the sampled token's own first, then the top n */
		w[0] = (struct pg_logprob_wire){ .id = ev->token,
						 .logprob = ev->logprob };
		for (int i = 0; i < n; i++)
			w[1 + i] = (struct pg_logprob_wire){ .id = ev->top[i].id,
							     .logprob = ev->top[i].logprob };
		lq.ids[0] = ev->token;
		pgd_emit(d, r->c, &lq, w, (uint32_t)((1 + n) * sizeof(w[0])));
	}
}

static void send_done(struct pgd *d, struct pgd_req *r,
		      const struct pg_engine_event *ev)
{
	struct pg_cqe cqe = { .req_id = r->req_id, .type = PG_CQE_DONE,
			      .sample = (uint8_t)ev->sample,
			      .flags = ev->last ? PG_CQE_F_LAST : 0,
			      .code = finish_code(ev->finish, r->finish_max) };
	struct pg_done_wire w = { .seed = r->seed };

	if (r->text && ev->text_len) {	/* text the stop matcher held back */
		struct pg_cqe held = { .req_id = r->req_id, .type = PG_CQE_TOKENS,
				       .sample = (uint8_t)ev->sample,
				       .t_ns = pg_now_ns() };

		pgd_emit(d, r->c, &held, ev->text, (uint32_t)ev->text_len);
	}
	if (ev->fig) {
		w.queue_s = ev->fig->queue_s;
		w.ttft_s = ev->fig->ttft_s;
		w.itl_s = ev->fig->itl_s;
		w.n_prompt = (uint32_t)ev->fig->n_prompt;
		w.n_cached = (uint32_t)ev->fig->n_cached;
		w.n_gen = (uint32_t)ev->fig->n_gen;
		w.n_preempt = (uint32_t)ev->fig->n_preempt;
	}
	pgd_emit(d, r->c, &cqe, &w, sizeof(w));
}

void pgd_on_event(void *ctx, const struct pg_engine_event *ev)
{
	struct pgd *d = ctx;
	struct pgd_req *r = req_by_engine(d, ev->id);

	if (!r)
		return;
	if (ev->type == PG_ENGINE_EV_DONE && ev->finish == PG_ENGINE_FINISH_GRAMMAR)
		pgd_log(PGD_LOG_INFO, "client %u: request %llu, sample %d: its grammar allowed no token after %d generated tokens (finish grammar)",
			r->st.id, (unsigned long long)r->req_id, ev->sample,
			ev->fig ? ev->fig->n_gen : 0);
	pgd_stats_event(d->stats, &r->st, ev);
	if (r->c && !r->c->dead) {
		if (ev->type == PG_ENGINE_EV_TOKEN)
			send_token(d, r, ev);
		else
			send_done(d, r, ev);
	}
	if (ev->type == PG_ENGINE_EV_DONE && ev->last)
		req_forget(d, r);
}
