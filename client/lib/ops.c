/*
 * ops.c - the operations that are one round trip each: ping, tokenize,
 * detokenize, model info and chat info.  Their ids are the library's own (top bit
 * set), so they never meet a caller's request.
 */
#include <stdlib.h>
#include <string.h>

#include "client/lib/internal.h"
#include "common/clock.h"

struct payload {
	const void *data;
	uint32_t len;
};

static void fill_copy(void *ctx, uint8_t *buf)
{
	const struct payload *pl = ctx;

	memcpy(buf, pl->data, pl->len);
}

/*
 * call - send op with the payload and wait for its answer, which must be a
 * completion of type `want` (an ERROR gives its code and message).  The
 * lock is held.  Returns 0 with the answer in *rx, or a negative code.
 */
static int call(struct pagoda *p, struct pg_sqe *sqe, const void *data,
		size_t len, unsigned want, struct pgc_rx *rx)
{
	struct payload pl = { data, (uint32_t)len };
	const struct pg_cqe *c = &rx->cqe;
	uint64_t id = pgc_op_id(p);
	int rc = pgc_alive(p);

	if (rc)
		return rc;
	if (len > UINT32_MAX || (p->hdr->max_payload && len > p->hdr->max_payload))
		return pgc_fail(p, PAGODA_ETOOBIG,
				"%zu bytes: over the daemon's limit of %u for one request",
				len, p->hdr->max_payload);
	sqe->req_id = id;
	rc = pgc_flight_add(p, id, PGC_WAIT);
	if (!rc)
		rc = pgc_submit(p, sqe, pl.len, fill_copy, &pl);
	while (!rc)
		rc = pgc_wait(p, pgc_match_id, &id, rx, -1, PGC_QUICK);
	if (rc < 0) {
		pgc_flight_remove(p, id);
		return rc;
	}
	if (c->type == PG_CQE_ERROR) {
		rc = pgc_error_code(c->code);
		return pgc_fail(p, rc, "%s", rx->len ? (const char *)rx->data
						    : pagoda_strerror(rc));
	}
	if (c->type != want)
		return pgc_fail(p, PAGODA_EPROTO,
				"pagodad answered operation %u with a completion of type %u",
				sqe->op, c->type);
	return 0;
}

int pagoda_ping(pagoda_t *p, uint64_t *rtt_ns)
{
	struct pg_sqe sqe = { .op = PG_OP_PING };
	struct pgc_rx rx = { 0 };	/* a PONG has no payload: no allocation */
	uint64_t t0;
	int rc;

	pthread_mutex_lock(&p->lock);
	t0 = pg_now_ns();
	sqe.arg = t0;
	rc = call(p, &sqe, NULL, 0, PG_CQE_PONG, &rx);
	if (!rc && rx.cqe.arg != t0)
		rc = pgc_fail(p, PAGODA_EPROTO, "pagodad's PONG did not echo the PING");
	if (!rc && rtt_ns)
		*rtt_ns = pg_now_ns() - t0;
	pthread_mutex_unlock(&p->lock);
	pgc_rx_free(&rx);
	return rc;
}

int pagoda_tokenize(pagoda_t *p, const char *text, size_t len,
		    unsigned flags, int32_t **ids, size_t *n_ids)
{
	struct pg_sqe sqe = { .op = PG_OP_TOKENIZE };
	struct pgc_rx rx = { 0 };
	int rc;

	*ids = NULL;
	*n_ids = 0;
	sqe.flags = (uint16_t)((flags & PAGODA_TOKENIZE_ADD_BOS ? PG_TOK_ADD_BOS : 0) |
			       (flags & PAGODA_TOKENIZE_SPECIAL ? PG_TOK_SPECIAL : 0));
	pthread_mutex_lock(&p->lock);
	rc = call(p, &sqe, text, len, PG_CQE_TOKENS_RESULT, &rx);
	if (!rc && rx.len % sizeof(int32_t))
		rc = pgc_fail(p, PAGODA_EPROTO, "pagodad sent %u bytes of token ids",
			      rx.len);
	if (!rc) {
		*ids = malloc(rx.len ? rx.len : 1);
		if (*ids) {
			memcpy(*ids, rx.data, rx.len);
			*n_ids = rx.len / sizeof(int32_t);
		} else {
			rc = pgc_fail(p, PAGODA_ENOMEM, "out of memory");
		}
	}
	pthread_mutex_unlock(&p->lock);
	pgc_rx_free(&rx);
	return rc;
}

int pagoda_detokenize(pagoda_t *p, const int32_t *ids, size_t n_ids,
		      char **text, size_t *len)
{
	struct pg_sqe sqe = { .op = PG_OP_DETOKENIZE };
	struct pgc_rx rx = { 0 };
	int rc = 0;

	*text = NULL;
	if (len)
		*len = 0;
	pthread_mutex_lock(&p->lock);
	if (n_ids > UINT32_MAX / sizeof(int32_t))
		rc = pgc_fail(p, PAGODA_ETOOBIG, "%zu ids are too many", n_ids);
	if (!rc)
		rc = call(p, &sqe, ids, n_ids * sizeof(int32_t),
			  PG_CQE_TEXT_RESULT, &rx);
	if (!rc) {
		*text = malloc((size_t)rx.len + 1);
		if (*text) {
			memcpy(*text, rx.len ? (char *)rx.data : "", rx.len);
			(*text)[rx.len] = 0;
			if (len)
				*len = rx.len;
		} else {
			rc = pgc_fail(p, PAGODA_ENOMEM, "out of memory");
		}
	}
	pthread_mutex_unlock(&p->lock);
	pgc_rx_free(&rx);
	return rc;
}

static void copy_info(struct pagoda_model_info *info,
		      const struct pg_info_wire *w, const struct pg_seg_header *h)
{
	memset(info, 0, sizeof(*info));
	memcpy(info->model, w->model, sizeof(info->model) - 1);
	memcpy(info->arch, w->arch, sizeof(info->arch) - 1);
	info->n_vocab = w->n_vocab;
	info->n_ctx_train = w->n_ctx_train;
	info->n_blocks = w->n_blocks;
	info->n_embd = w->n_embd;
	info->kv_pages = w->kv_pages;
	info->page_tokens = w->page_tokens;
	info->bos = (int32_t)w->bos;
	info->eos = (int32_t)w->eos;
	info->generation = w->generation;
	info->pp = w->pp;
	info->tp = w->tp;
	info->cp = w->cp;
	info->n_clients = w->n_clients;
	info->n_active = w->n_active;
	info->client_id = h->client_id;
	info->max_inflight = h->max_inflight;
	info->max_prompt = h->max_prompt;
	info->max_tokens = h->max_tokens;
	info->max_payload = h->max_payload;
}

int pagoda_model_info(pagoda_t *p, struct pagoda_model_info *info)
{
	struct pg_sqe sqe = { .op = PG_OP_INFO };
	struct pgc_rx rx = { 0 };
	struct pg_info_wire w;
	int rc;

	pthread_mutex_lock(&p->lock);
	rc = call(p, &sqe, NULL, 0, PG_CQE_INFO, &rx);
	if (!rc && rx.len != sizeof(w))
		rc = pgc_fail(p, PAGODA_EPROTO, "pagodad sent %u bytes of model info, not %zu",
			      rx.len, sizeof(w));
	if (!rc) {
		memcpy(&w, rx.data, sizeof(w));
		copy_info(info, &w, p->hdr);
	}
	pthread_mutex_unlock(&p->lock);
	pgc_rx_free(&rx);
	return rc;
}

/* A NUL-padded name of the wire into dst, NUL-terminated (both 16 bytes). */
static void copy_name(char dst[16], const char src[16])
{
	memcpy(dst, src, 15);
	dst[15] = '\0';
}

static_assert(sizeof(((struct pagoda_chat_info *)0)->format) == 16 &&
	      sizeof(((struct pg_chat_info_wire *)0)->format) == 16 &&
	      sizeof(((struct pagoda_chat_info *)0)->tools) == 16 &&
	      sizeof(((struct pg_chat_info_wire *)0)->tools) == 16,
	      "chat info names are 16 bytes");

/*
 * INFO with PG_INFO_CHAT: a daemon that knows the flag appends the chat
 * formats; one before it ignores the flag and answers the model info
 * alone, which leaves the names "".
 */
int pagoda_chat_info(pagoda_t *p, struct pagoda_chat_info *ci)
{
	struct pg_sqe sqe = { .op = PG_OP_INFO, .flags = PG_INFO_CHAT };
	size_t with = sizeof(struct pg_info_wire) + sizeof(struct pg_chat_info_wire);
	struct pg_chat_info_wire w;
	struct pgc_rx rx = { 0 };
	int rc;

	memset(ci, 0, sizeof(*ci));
	pthread_mutex_lock(&p->lock);
	rc = call(p, &sqe, NULL, 0, PG_CQE_INFO, &rx);
	if (!rc && rx.len != sizeof(struct pg_info_wire) && rx.len != with)
		rc = pgc_fail(p, PAGODA_EPROTO, "pagodad sent %u bytes of model and chat info, not %zu (or %zu from an older daemon)",
			      rx.len, with, sizeof(struct pg_info_wire));
	if (!rc && rx.len == with) {
		memcpy(&w, rx.data + sizeof(struct pg_info_wire), sizeof(w));
		copy_name(ci->format, w.format);
		copy_name(ci->tools, w.tools);
	}
	pthread_mutex_unlock(&p->lock);
	pgc_rx_free(&rx);
	return rc;
}
