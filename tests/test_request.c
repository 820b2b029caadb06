/*
 * test_request.c - the daemon's reading of requests (daemon/request.c),
 * in-process through the daemon's library: submissions written into a
 * real client segment, read by pgd_drain() as the serving loop reads them,
 * answered through the real tokenizing workers and engine on a generated
 * tiny model (tests/pgd_fixture.h).
 *
 *  - every malformed case request.c checks gets its ERROR: the exact code,
 *    PG_CQE_F_LAST or not, and the exact message: payloads outside the
 *    arena or over --max-payload, GENERATE payloads too short or whose
 *    counts run past them (32-bit overflow included), unknown prompt kinds
 *    and flags, too many samples, stop strings or log-probabilities,
 *    sampling values out of range (NaN included), token prompts of a bad
 *    length or with ids out of range, prompts and max_tokens over the
 *    limits or the KV pool, malformed chat messages, unknown operations and
 *    TOKENIZE flags, DETOKENIZE ids of a bad length or out of range, results
 *    too large for a completion;
 *  - duplicates, the in-flight limit, draining, CANCEL (in the engine,
 *    while tokenizing, of nothing);
 *  - valid requests of every kind are accepted, and the request handed to
 *    the engine (caught with ld --wrap=pg_engine_submit) carries what the
 *    client sent: prompt ids (as the tokenizer makes them from text or
 *    chat), sampling values (clamped where wire/client_proto.h says so), counts, flags,
 *    stop strings, the client; their completions (TOKENS, LOGPROBS, DONE
 *    with its seed, PONG, INFO, TOKENS_RESULT, TEXT_RESULT) are right;
 *  - a client past PGD_MAX_MALFORMED malformed requests is dropped with
 *    its last word in the segment, and another client is not disturbed.
 */
#include <math.h>
#include <stdarg.h>

#include "tests/pgd_fixture.h"
#include "daemon/engine/grammar.h"
#include "daemon/engine/tokenizer.h"

/* ---- the engine's view: what pgd handed to pg_engine_submit ---- */

#define CAP_IDS 512

static struct {
	int n_calls;
	struct pg_request q;		/* prompt and stop point below */
	int32_t ids[CAP_IDS];
	char stops[PGD_MAX_STOP][64];
	int rc;
} caught;

int __real_pg_engine_submit(struct pg_engine *e, const struct pg_request *req,
			    uint64_t *id);
int __wrap_pg_engine_submit(struct pg_engine *e, const struct pg_request *req,
			    uint64_t *id);

int __wrap_pg_engine_submit(struct pg_engine *e, const struct pg_request *req,
			    uint64_t *id)
{
	caught.n_calls++;
	caught.q = *req;
	memcpy(caught.ids, req->prompt,
	       sizeof(int32_t) * (size_t)(req->n_prompt < CAP_IDS ? req->n_prompt : CAP_IDS));
	caught.q.prompt = caught.ids;
	for (int i = 0; i < req->n_stop && i < PGD_MAX_STOP; i++)
		snprintf(caught.stops[i], sizeof(caught.stops[i]), "%s", req->stop[i]);
	caught.q.stop = NULL;
	caught.rc = __real_pg_engine_submit(e, req, id);
	return caught.rc;
}

/* ---- building submissions ---- */

static struct fx F;
static uint8_t buf[80 << 10];

/* A GENERATE wire header: greedy, n 1, everything off. */
static struct pg_gen_wire gen(uint32_t kind, uint32_t prompt_bytes)
{
	return (struct pg_gen_wire){
		.prompt_kind = kind, .prompt_bytes = prompt_bytes,
		.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f,
		.repeat_last_n = -1, .max_tokens = 4,
		.flags = PG_GEN_IGNORE_EOS,
	};
}

/* g, prompt, stops into buf; the payload's length. */
static uint32_t gen_payload(const struct pg_gen_wire *g, const void *prompt,
			    uint32_t prompt_len, const void *stops,
			    uint32_t stops_len)
{
	memcpy(buf, g, sizeof(*g));
	if (prompt_len)
		memcpy(buf + sizeof(*g), prompt, prompt_len);
	if (stops_len)
		memcpy(buf + sizeof(*g) + prompt_len, stops, stops_len);
	return (uint32_t)sizeof(*g) + prompt_len + stops_len;
}

/* Submit e and its payload (may be NULL), serve the client, read what came. */
static void send1(struct fx_client *cl, struct pg_sqe *e, const void *payload,
		  uint32_t len)
{
	fx_clear(cl);
	CHECK(fx_put(cl, e, payload, len) == 0, "the submission ring is full");
	CHECK(fx_serve(&F, cl) == 1, "the submission was not consumed");
	fx_take(cl);
}

static void send_gen(struct fx_client *cl, uint64_t req_id, const void *payload,
		     uint32_t len)
{
	struct pg_sqe e = { .req_id = req_id, .op = PG_OP_GENERATE };

	send1(cl, &e, payload, len);
}

/* The one completion read must be ERROR code for req_id, with this message. */
static void __attribute__((format(printf, 6, 7)))
want_error_at(int line, const struct fx_client *cl, uint64_t req_id,
	      enum pg_error code, int last, const char *fmt, ...)
{
	char want[512];
	va_list ap;
	const struct fx_cqe *g = cl->got;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	CHECK(cl->n_got == 1, "line %d: %d completions, not one ERROR (%s)", line,
	      cl->n_got, want);
	if (cl->n_got < 1)
		return;
	CHECK(g->e.type == PG_CQE_ERROR && g->e.req_id == req_id,
	      "line %d: type %u req_id %llu, not an ERROR of %llu", line,
	      g->e.type, (unsigned long long)g->e.req_id, (unsigned long long)req_id);
	CHECK(g->e.code == (int32_t)code, "line %d: code %d, not %d (%s)", line,
	      g->e.code, code, (const char *)g->payload);
	CHECK(!!(g->e.flags & PG_CQE_F_LAST) == !!last, "line %d: flags 0x%x", line,
	      g->e.flags);
	CHECK(!strcmp((const char *)g->payload, want),
	      "line %d: message\n  '%s', not\n  '%s'", line, (const char *)g->payload, want);
}

#define want_error(...) want_error_at(__LINE__, __VA_ARGS__)

/* The completions read carry no ERROR. */
static void want_no_error_at(int line, const struct fx_client *cl)
{
	for (int i = 0; i < cl->n_got; i++)
		CHECK(cl->got[i].e.type != PG_CQE_ERROR, "line %d: ERROR %d: %s", line,
		      cl->got[i].e.code, (const char *)cl->got[i].payload);
}

#define want_no_error(cl) want_no_error_at(__LINE__, cl)

static int count_type(const struct fx_client *cl, uint64_t req_id, int type)
{
	int n = 0;

	for (int i = 0; i < cl->n_got; i++)
		n += cl->got[i].e.req_id == req_id && cl->got[i].e.type == type;
	return n;
}

/* The tokenizer's own ids for text. */
static int tokenize(const char *text, size_t len, int add_bos, int special,
		    int32_t *out, int max)
{
	return (int)pg_tokenize(F.m->tok, text, len, add_bos, special, out, max);
}

/* ---- payload and operation checks ---- */

static void test_payload_bounds(struct fx_client *cl)
{
	struct pg_sqe e = { .req_id = 1, .op = PG_OP_TOKENIZE };
	uint32_t arena = F.cfg.sq_arena;

	e.payload_off = arena - 4;
	e.payload_len = 5;
	send1(cl, &e, NULL, 0);
	want_error(cl, 1, PG_EINVAL, 1,
		   "payload_off %u + payload_len %u lies outside the submission arena of %u bytes",
		   arena - 4, 5u, arena);
	e.payload_off = UINT32_MAX;	/* off + len wraps in 32 bits */
	e.payload_len = 2;
	send1(cl, &e, NULL, 0);
	want_error(cl, 1, PG_EINVAL, 1,
		   "payload_off %u + payload_len %u lies outside the submission arena of %u bytes",
		   UINT32_MAX, 2u, arena);
	e.op = PG_OP_DETOKENIZE;
	e.payload_off = 8;
	e.payload_len = arena;
	send1(cl, &e, NULL, 0);
	want_error(cl, 1, PG_EINVAL, 1,
		   "payload_off %u + payload_len %u lies outside the submission arena of %u bytes",
		   8u, arena, arena);
	/* inside the arena, over --max-payload */
	e.payload_off = 0;
	e.payload_len = F.d.lim.max_payload + 4;
	send1(cl, &e, NULL, 0);
	want_error(cl, 1, PG_ETOOBIG, 1,
		   "the payload of %u bytes is over the daemon's limit of %u bytes (--max-payload)",
		   F.d.lim.max_payload + 4, F.d.lim.max_payload);
	/* an op without a payload ignores payload_off and payload_len */
	e = (struct pg_sqe){ .req_id = 2, .op = PG_OP_PING, .arg = 77,
			     .payload_off = UINT32_MAX, .payload_len = UINT32_MAX };
	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_PONG &&
	      cl->got[0].e.arg == 77, "PING with a bogus payload was not answered");
}

/*
 * INFO with PG_INFO_CHAT: the chat part after pg_info_wire, naming the
 * daemon's formats; flags it does not know are ignored (the answer an
 * older daemon gives to a newer client's flags).
 */
static void test_info_chat(struct fx_client *cl)
{
	struct pg_sqe e = { .req_id = 9, .op = PG_OP_INFO, .flags = PG_INFO_CHAT };
	const size_t with = sizeof(struct pg_info_wire) + sizeof(struct pg_chat_info_wire);
	struct pg_chat_info_wire ci;

	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_INFO && cl->got[0].len == with,
	      "INFO with PG_INFO_CHAT: %u bytes, not %zu", cl->n_got ? cl->got[0].len : 0, with);
	if (cl->n_got == 1 && cl->got[0].len == with) {
		memcpy(&ci, cl->got[0].payload + sizeof(struct pg_info_wire), sizeof(ci));
		CHECK(!strcmp(ci.format, pg_chat_format_name((enum pg_chat_format)F.d.chat_fmt)) &&
		      !strcmp(ci.tools, pg_tool_format_name((enum pg_tool_format)F.d.chat_tools)),
		      "INFO's chat part: '%.16s' '%.16s'", ci.format, ci.tools);
		CHECK(ci.format[15] == 0 && ci.tools[15] == 0, "INFO's chat names are terminated");
	}
	e = (struct pg_sqe){ .req_id = 9, .op = PG_OP_INFO, .flags = 0xfffe };
	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_INFO &&
	      cl->got[0].len == sizeof(struct pg_info_wire),
	      "INFO with flags this daemon lacks: not the 200 bytes alone");
}

static void test_simple_ops(struct fx_client *cl)
{
	struct pg_sqe e = { .req_id = 5, .op = PG_OP_NOP };
	const struct pg_info_wire *w;

	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 0, "NOP answered");
	e = (struct pg_sqe){ .req_id = 6, .op = PG_OP_PING, .arg = 0xfeedfacecafebeefull };
	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_PONG &&
	      cl->got[0].e.req_id == 6 && cl->got[0].e.arg == 0xfeedfacecafebeefull &&
	      cl->got[0].len == 0, "PING: no PONG with its arg");
	for (unsigned op = PG_OP_MAX; op <= 255; op += 248) {
		e = (struct pg_sqe){ .req_id = 7, .op = (uint8_t)op };
		send1(cl, &e, NULL, 0);
		want_error(cl, 7, PG_EINVAL, 1,
			   "unknown operation %u (this daemon knows 0 to %d)", op, PG_OP_MAX - 1);
	}
	e = (struct pg_sqe){ .req_id = 8, .op = PG_OP_INFO };
	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_INFO &&
	      cl->got[0].len == sizeof(*w), "INFO: no pg_info_wire");
	if (cl->n_got == 1 && cl->got[0].len == sizeof(*w)) {
		w = (const struct pg_info_wire *)cl->got[0].payload;
		CHECK(!strcmp(w->model, F.m->name), "INFO model '%s'", w->model);
		CHECK(!strcmp(w->arch, "llama"), "INFO arch '%s'", w->arch);
		CHECK(w->n_vocab == (uint32_t)F.m->hp.n_vocab, "INFO n_vocab %u", w->n_vocab);
		CHECK(w->n_blocks == (uint32_t)F.m->hp.n_blocks, "INFO n_blocks %u", w->n_blocks);
		CHECK(w->kv_pages == 16 && w->page_tokens == 16, "INFO pool %u × %u",
		      w->kv_pages, w->page_tokens);
		CHECK(w->generation == F.d.generation, "INFO generation");
		CHECK(w->n_clients == F.d.n_live && w->n_active == 0,
		      "INFO n_clients %u n_active %u", w->n_clients, w->n_active);
		CHECK(w->pp == 1 && w->tp == 1 && w->cp == 1, "INFO plan");
	}
	test_info_chat(cl);
}

/* ---- GENERATE: the payload's structure ---- */

static void test_gen_structure(struct fx_client *cl)
{
	struct pg_gen_wire g = gen(PG_PROMPT_TOKENS, 4);
	int32_t one = 3;
	uint32_t len;

	send_gen(cl, 10, NULL, 0);	/* no payload at all */
	want_error(cl, 10, PG_EINVAL, 1,
		   "a GENERATE payload starts with struct pg_gen_wire (%zu bytes); this one has %u bytes",
		   sizeof(g), 0u);
	send_gen(cl, 10, &g, sizeof(g) - 1);
	want_error(cl, 10, PG_EINVAL, 1,
		   "a GENERATE payload starts with struct pg_gen_wire (%zu bytes); this one has %u bytes",
		   sizeof(g), (unsigned)sizeof(g) - 1);
	g.prompt_bytes = 5;
	len = gen_payload(&g, &one, 4, NULL, 0);
	send_gen(cl, 11, buf, len);
	want_error(cl, 11, PG_EINVAL, 1,
		   "prompt_bytes %u + stop_bytes %u + grammar_bytes %u run past the payload's %u bytes",
		   5u, 0u, 0u, len);
	g.prompt_bytes = 4;
	g.stop_bytes = 1;
	len = gen_payload(&g, &one, 4, NULL, 0);
	send_gen(cl, 11, buf, len);
	want_error(cl, 11, PG_EINVAL, 1,
		   "prompt_bytes %u + stop_bytes %u + grammar_bytes %u run past the payload's %u bytes",
		   4u, 1u, 0u, len);
	/* counts whose 32-bit sum wraps to fit */
	g.prompt_bytes = UINT32_MAX;
	g.stop_bytes = 5;
	len = gen_payload(&g, &one, 4, NULL, 0);
	send_gen(cl, 12, buf, len);
	want_error(cl, 12, PG_EINVAL, 1,
		   "prompt_bytes %u + stop_bytes %u + grammar_bytes %u run past the payload's %u bytes",
		   UINT32_MAX, 5u, 0u, len);
	g = gen(3, 4);
	len = gen_payload(&g, &one, 4, NULL, 0);
	send_gen(cl, 13, buf, len);
	want_error(cl, 13, PG_EINVAL, 1,
		   "prompt_kind %u is not 0 (text), 1 (tokens) or 2 (chat)", 3u);
	g = gen(0xffffffffu, 4);
	len = gen_payload(&g, &one, 4, NULL, 0);
	send_gen(cl, 13, buf, len);
	want_error(cl, 13, PG_EINVAL, 1,
		   "prompt_kind %u is not 0 (text), 1 (tokens) or 2 (chat)", 0xffffffffu);
	CHECK(caught.n_calls == 0, "a malformed request reached the engine");
}

/* ---- GENERATE: counts, flags and sampling values ---- */

/* A token prompt with the values of g (one of them bad): its error. */
static void gen_bad_value(struct fx_client *cl, struct pg_gen_wire g,
			  enum pg_error code, const char *want, int line)
{
	int32_t ids[2] = { 5, 6 };
	uint32_t len;

	g.prompt_kind = PG_PROMPT_TOKENS;
	g.prompt_bytes = sizeof(ids);
	len = gen_payload(&g, ids, sizeof(ids), NULL, 0);
	send_gen(cl, 20, buf, len);
	want_error_at(line, cl, 20, code, 1, "%s", want);
}

#define BAD_VALUE(field, value, code, ...) do {				\
	struct pg_gen_wire g_ = gen(PG_PROMPT_TOKENS, 8);		\
	char w_[256];							\
									\
	g_.field = value;						\
	snprintf(w_, sizeof(w_), __VA_ARGS__);				\
	gen_bad_value(cl, g_, code, w_, __LINE__);			\
} while (0)

static void test_gen_values(struct fx_client *cl)
{
	BAD_VALUE(flags, PG_GEN_TEXT | 0x20, PG_EINVAL, "unknown GENERATE flags 0x%x", 0x20);
	BAD_VALUE(grammar_kind, PG_GRAMMAR_GBNF, PG_EINVAL,
		  "grammar_kind and grammar_bytes are set without the PG_GEN_GRAMMAR flag");
	BAD_VALUE(flags, PG_GEN_TEXT | PG_GEN_GRAMMAR, PG_EINVAL,
		  "grammar_bytes %u: give 1 to %u bytes of grammar", 0u, PG_GRAMMAR_MAX_TEXT);
	BAD_VALUE(flags, 0x80000000u, PG_EINVAL, "unknown GENERATE flags 0x%x", 0x80000000u);
	BAD_VALUE(n, PGD_MAX_SAMPLES + 1, PG_EINVAL, "n = %u samples: give 1 to %d",
		  PGD_MAX_SAMPLES + 1, PGD_MAX_SAMPLES);
	BAD_VALUE(n, UINT32_MAX, PG_EINVAL, "n = %u samples: give 1 to %d", UINT32_MAX,
		  PGD_MAX_SAMPLES);
	BAD_VALUE(max_tokens, 33, PG_ETOOBIG,
		  "max_tokens %u is over the daemon's limit of %d (--max-tokens)", 33u, 32);
	BAD_VALUE(max_tokens, UINT32_MAX, PG_ETOOBIG,
		  "max_tokens %u is over the daemon's limit of %d (--max-tokens)", UINT32_MAX, 32);
	BAD_VALUE(n_logprobs, PG_MAX_LOGPROBS + 1, PG_EINVAL,
		  "n_logprobs %u: at most %d log-probabilities per token",
		  PG_MAX_LOGPROBS + 1, PG_MAX_LOGPROBS);
	BAD_VALUE(n_logprobs, UINT32_MAX, PG_EINVAL,
		  "n_logprobs %u: at most %d log-probabilities per token", UINT32_MAX,
		  PG_MAX_LOGPROBS);
	BAD_VALUE(temperature, 100.5f, PG_EINVAL, "temperature must be in [0, 100] (0: greedy)");
	BAD_VALUE(temperature, NAN, PG_EINVAL, "temperature must be in [0, 100] (0: greedy)");
	BAD_VALUE(temperature, INFINITY, PG_EINVAL, "temperature must be in [0, 100] (0: greedy)");
	BAD_VALUE(top_p, -0.5f, PG_EINVAL, "top_p must be in [0, 1] (1: off)");
	BAD_VALUE(top_p, NAN, PG_EINVAL, "top_p must be in [0, 1] (1: off)");
	BAD_VALUE(min_p, 1.5f, PG_EINVAL, "min_p must be in [0, 1] (0: off)");
	BAD_VALUE(min_p, NAN, PG_EINVAL, "min_p must be in [0, 1] (0: off)");
	BAD_VALUE(repeat_penalty, 0.0f, PG_EINVAL, "repeat_penalty must be in (0, 10] (1: off)");
	BAD_VALUE(repeat_penalty, 10.5f, PG_EINVAL, "repeat_penalty must be in (0, 10] (1: off)");
	BAD_VALUE(repeat_penalty, NAN, PG_EINVAL, "repeat_penalty must be in (0, 10] (1: off)");
	BAD_VALUE(repeat_last_n, -2, PG_EINVAL, "repeat_last_n must be >= -1 (-1: all, 0: off)");
	BAD_VALUE(presence_penalty, 2.5f, PG_EINVAL, "presence_penalty must be in [-2, 2] (0: off)");
	BAD_VALUE(presence_penalty, -INFINITY, PG_EINVAL,
		  "presence_penalty must be in [-2, 2] (0: off)");
	BAD_VALUE(frequency_penalty, -2.5f, PG_EINVAL,
		  "frequency_penalty must be in [-2, 2] (0: off)");
	BAD_VALUE(frequency_penalty, NAN, PG_EINVAL,
		  "frequency_penalty must be in [-2, 2] (0: off)");
	CHECK(caught.n_calls == 0, "a malformed request reached the engine");
}

/* ---- GENERATE: token prompts, stop strings, limits ---- */

static void test_gen_tokens_bad(struct fx_client *cl)
{
	struct pg_gen_wire g = gen(PG_PROMPT_TOKENS, 6);
	int32_t ids[300];
	int n_vocab = F.m->hp.n_vocab;
	uint32_t len;

	for (int i = 0; i < 300; i++)
		ids[i] = i % 100 + 3;
	len = gen_payload(&g, ids, 6, NULL, 0);
	send_gen(cl, 30, buf, len);
	want_error(cl, 30, PG_EINVAL, 1,
		   "a token prompt is a non-empty array of int32 ids; prompt_bytes %u is not", 6u);
	g.prompt_bytes = 0;
	len = gen_payload(&g, NULL, 0, NULL, 0);
	send_gen(cl, 30, buf, len);
	want_error(cl, 30, PG_EINVAL, 1,
		   "a token prompt is a non-empty array of int32 ids; prompt_bytes %u is not", 0u);
	ids[1] = n_vocab;
	g.prompt_bytes = 8;
	len = gen_payload(&g, ids, 8, NULL, 0);
	send_gen(cl, 31, buf, len);
	want_error(cl, 31, PG_EINVAL, 1,
		   "prompt token %u (id %d) is out of range: the vocabulary has %d tokens",
		   1u, n_vocab, n_vocab);
	ids[1] = INT32_MIN;
	len = gen_payload(&g, ids, 8, NULL, 0);
	send_gen(cl, 31, buf, len);
	want_error(cl, 31, PG_EINVAL, 1,
		   "prompt token %u (id %d) is out of range: the vocabulary has %d tokens",
		   1u, INT32_MIN, n_vocab);
	ids[1] = 4;
	/* over the pool the default max_prompt is */
	g.prompt_bytes = 257 * 4;
	len = gen_payload(&g, ids, 257 * 4, NULL, 0);
	send_gen(cl, 32, buf, len);
	want_error(cl, 32, PG_ETOOBIG, 1,
		   "the prompt has %lld tokens, more than the KV pool holds (%d pages of %d tokens = %d): shorten it, or give pagodad a larger pool (--ctx-size or --kv-size)",
		   257LL, 16, 16, 256);
	/* over --max-prompt, once set (as a reload sets it) */
	F.cfg.max_prompt = 8;
	pgd_limits_resolve(&F.d);
	g.prompt_bytes = 9 * 4;
	len = gen_payload(&g, ids, 9 * 4, NULL, 0);
	send_gen(cl, 33, buf, len);
	want_error(cl, 33, PG_ETOOBIG, 1,
		   "the prompt has %lld tokens, over the daemon's limit of %d (--max-prompt): shorten it, or raise the limit",
		   9LL, 8);
	F.cfg.max_prompt = 0;
	pgd_limits_resolve(&F.d);
	/* a full pool leaves max_tokens 0 no room */
	g.prompt_bytes = 256 * 4;
	g.max_tokens = 0;
	len = gen_payload(&g, ids, 256 * 4, NULL, 0);
	send_gen(cl, 34, buf, len);
	want_error(cl, 34, PG_ETOOBIG, 1,
		   "the prompt of %d tokens leaves no room in the KV pool of %d tokens: shorten it, or give pagodad a larger pool (--ctx-size or --kv-size)",
		   256, 256);
	/* the engine's own refusal: prompt + max_tokens over the pool */
	g.prompt_bytes = 250 * 4;
	g.max_tokens = 32;
	len = gen_payload(&g, ids, 250 * 4, NULL, 0);
	send_gen(cl, 35, buf, len);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_ERROR &&
	      cl->got[0].e.code == PG_ETOOBIG && (cl->got[0].e.flags & PG_CQE_F_LAST),
	      "prompt + max_tokens over the pool: no ETOOBIG");
	if (cl->n_got == 1) {
		const char *msg = (const char *)cl->got[0].payload;
		const char *hint = ": ask for fewer tokens (max_tokens), shorten the prompt, or give pagodad a larger pool (--ctx-size or --kv-size)";

		CHECK(strlen(msg) > strlen(hint) + 10 &&
		      !strcmp(msg + strlen(msg) - strlen(hint), hint),
		      "the engine's refusal without its hint: %s", msg);
	}
	CHECK(caught.n_calls == 1 && caught.rc == PG_ENGINE_ETOOBIG,
	      "the engine was asked %d times (rc %d)", caught.n_calls, caught.rc);
	CHECK(cl->c->n_inflight == 0, "a refused request stays in flight");
	caught.n_calls = 0;
}

static void test_gen_stops_bad(struct fx_client *cl)
{
	struct pg_gen_wire g = gen(PG_PROMPT_TOKENS, 4);
	int32_t id = 9;
	uint32_t len;

	g.n_stop = PGD_MAX_STOP + 1;
	g.stop_bytes = 2 * (PGD_MAX_STOP + 1);
	memset(buf, 0, sizeof(buf));
	len = gen_payload(&g, &id, 4, "a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a\0a", 34);
	send_gen(cl, 40, buf, len);
	want_error(cl, 40, PG_EINVAL, 1, "n_stop %u: at most %d stop strings",
		   PGD_MAX_STOP + 1, PGD_MAX_STOP);
	g.n_stop = 2;
	g.stop_bytes = 5;
	len = gen_payload(&g, &id, 4, "ab\0cd", 5);	/* the second has no NUL */
	send_gen(cl, 41, buf, len);
	want_error(cl, 41, PG_EINVAL, 1, "stop string %u does not end (NUL) within stop_bytes", 1u);
	g.n_stop = 3;
	g.stop_bytes = 6;
	len = gen_payload(&g, &id, 4, "ab\0c\0\0", 6);
	send_gen(cl, 42, buf, len);
	want_error(cl, 42, PG_EINVAL, 1, "stop string %u is empty", 2u);
	g.n_stop = 1;
	g.stop_bytes = 0;
	len = gen_payload(&g, &id, 4, NULL, 0);
	send_gen(cl, 43, buf, len);
	want_error(cl, 43, PG_EINVAL, 1, "stop string %u does not end (NUL) within stop_bytes", 0u);
	CHECK(caught.n_calls == 0, "a malformed request reached the engine");
}

/* Append one chat message (role, text, padding) at p; the bytes written. */
static uint32_t chat_msg(uint8_t *p, uint32_t role, const char *text, int pad)
{
	struct pg_chat_msg_wire w = { .role = role, .len = (uint32_t)strlen(text) };
	uint32_t n = (uint32_t)sizeof(w) + w.len;

	memcpy(p, &w, sizeof(w));
	memcpy(p + sizeof(w), text, w.len);
	while (pad && n % 4)
		p[n++] = 0;
	return n;
}

static void test_gen_chat_bad(struct fx_client *cl)
{
	struct pg_gen_wire g = gen(PG_PROMPT_CHAT, 0);
	uint8_t m[256];
	uint32_t n, len;

	len = gen_payload(&g, NULL, 0, NULL, 0);
	send_gen(cl, 50, buf, len);
	want_error(cl, 50, PG_EINVAL, 1, "a chat prompt needs at least one message");
	n = chat_msg(m, 1, "hello", 1);
	m[n++] = 1;		/* a second header cut short */
	m[n++] = 0;
	g.prompt_bytes = n;
	len = gen_payload(&g, m, n, NULL, 0);
	send_gen(cl, 51, buf, len);
	want_error(cl, 51, PG_EINVAL, 1, "chat message %d: its header runs past prompt_bytes", 1);
	n = chat_msg(m, 4, "hello", 1);
	g.prompt_bytes = n;
	len = gen_payload(&g, m, n, NULL, 0);
	send_gen(cl, 52, buf, len);
	want_error(cl, 52, PG_EINVAL, 1,
		   "chat message %d: role %u is not 0 (system), 1 (user), 2 (assistant) or 3 (tool)",
		   0, 4u);
	n = chat_msg(m, 0, "sys", 1);
	n += chat_msg(m + n, 1, "hello", 0);
	g.prompt_bytes = n - 1;	/* the last message's text cut short */
	len = gen_payload(&g, m, n - 1, NULL, 0);
	send_gen(cl, 53, buf, len);
	want_error(cl, 53, PG_EINVAL, 1, "chat message %d: its %u bytes run past prompt_bytes",
		   1, 5u);
	n = chat_msg(m, 1, "he\1lo", 1);
	m[8 + 2] = 0;		/* a NUL inside the content */
	g.prompt_bytes = n;
	len = gen_payload(&g, m, n, NULL, 0);
	send_gen(cl, 54, buf, len);
	want_error(cl, 54, PG_EINVAL, 1, "chat message %d contains a NUL byte", 0);
	/* a length whose 32-bit sum with the offset would wrap */
	n = chat_msg(m, 1, "hi", 1);
	memcpy(m + 4, &(uint32_t){ UINT32_MAX - 4 }, 4);
	g.prompt_bytes = n;
	len = gen_payload(&g, m, n, NULL, 0);
	send_gen(cl, 55, buf, len);
	want_error(cl, 55, PG_EINVAL, 1, "chat message %d: its %u bytes run past prompt_bytes",
		   0, UINT32_MAX - 4);
	CHECK(caught.n_calls == 0 && pgd_tok_busy(&F.d) == 0,
	      "a malformed chat request went on (%d engine calls, %d jobs)", caught.n_calls,
	      pgd_tok_busy(&F.d));
}

/* ---- GENERATE: valid requests ---- */

static void test_gen_tokens_ok(struct fx_client *cl)
{
	struct pg_gen_wire g = gen(PG_PROMPT_TOKENS, 3 * 4);
	int32_t ids[3] = { 17, 0, 383 };
	const struct pg_done_wire *dw;
	uint32_t len;
	int n_tok = 0, n_done = 0, n_lp = 0;

	g.max_tokens = 5;
	g.n = 2;
	g.priority = -7;
	g.seed = 4242;
	g.n_logprobs = 3;
	g.temperature = -1.0f;	/* <= 0: greedy, passed on as 0 */
	g.top_k = -5;		/* <= 0: off, as 0 */
	g.top_p = 7.0f;		/* >= 1: off, as 1 */
	g.min_p = -3.0f;	/* <= 0: off, as 0 */
	g.repeat_penalty = 1.25f;
	g.repeat_last_n = 12;
	g.presence_penalty = 0.5f;
	g.frequency_penalty = -0.25f;
	g.flags = PG_GEN_IGNORE_EOS | PG_GEN_TEXT;
	g.n_stop = 2;
	g.stop_bytes = 10;
	len = gen_payload(&g, ids, sizeof(ids), "\x01stop\0\x02z\0\0", 10);	/* 1 spare byte */
	send_gen(cl, 60, buf, len);
	CHECK(cl->n_got == 0, "an accepted GENERATE answered at once (%d)", cl->n_got);
	CHECK(caught.n_calls == 1 && caught.rc == 0, "engine calls %d rc %d", caught.n_calls, caught.rc);
	CHECK(caught.q.n_prompt == 3 && !memcmp(caught.ids, ids, sizeof(ids)), "the prompt ids");
	CHECK(caught.q.max_tokens == 5 && caught.q.n == 2 && caught.q.priority == -7 &&
	      caught.q.ignore_eos == 1 && caught.q.client == cl->c->id,
	      "counts: max_tokens %d n %d priority %d ignore_eos %d client %llu",
	      caught.q.max_tokens, caught.q.n, caught.q.priority, caught.q.ignore_eos,
	      (unsigned long long)caught.q.client);
	CHECK(caught.q.sampling.temperature == 0.0f && caught.q.sampling.top_k == 0 &&
	      caught.q.sampling.top_p == 1.0f && caught.q.sampling.min_p == 0.0f &&
	      caught.q.sampling.repeat_penalty == 1.25f && caught.q.sampling.repeat_last_n == 12 &&
	      caught.q.sampling.presence_penalty == 0.5f &&
	      caught.q.sampling.frequency_penalty == -0.25f && caught.q.sampling.seed == 4242 &&
	      caught.q.sampling.n_logprobs == 3, "the sampling values");
	CHECK(caught.q.n_stop == 2 && !strcmp(caught.stops[0], "\x01stop") &&
	      !strcmp(caught.stops[1], "\x02z"), "the stop strings");
	CHECK(cl->c->n_inflight == 1, "in flight: %d", cl->c->n_inflight);
	fx_settle(&F);
	fx_take(cl);
	want_no_error(cl);
	for (int i = 0; i < cl->n_got; i++) {
		const struct fx_cqe *c = &cl->got[i];

		CHECK(c->e.req_id == 60 && c->e.sample < 2, "completion of %llu sample %u",
		      (unsigned long long)c->e.req_id, c->e.sample);
		if (c->e.type == PG_CQE_TOKENS && c->e.n_ids == 0) {
			CHECK(c->len > 0, "a TOKENS entry with neither ids nor text");
		} else if (c->e.type == PG_CQE_TOKENS) {
			n_tok++;
			CHECK(c->e.n_ids == 1 && c->e.ids[0] >= 0 && c->e.ids[0] < 384 &&
			      c->e.t_ns > 0, "TOKENS entry");
		} else if (c->e.type == PG_CQE_LOGPROBS) {
			n_lp++;
			CHECK(c->len == 4 * sizeof(struct pg_logprob_wire) &&
			      i > 0 && cl->got[i - 1].e.type == PG_CQE_TOKENS &&
			      c->e.ids[0] == cl->got[i - 1].e.ids[0] &&
			      ((const struct pg_logprob_wire *)c->payload)->id == c->e.ids[0],
			      "LOGPROBS after its token, 1 + 3 entries, the token's own first");
		} else if (c->e.type == PG_CQE_DONE) {
			n_done++;
			dw = (const struct pg_done_wire *)c->payload;
			CHECK(c->e.code == PG_FINISH_WIRE_LENGTH && c->len == sizeof(*dw),
			      "DONE code %d", c->e.code);
			CHECK(c->len != sizeof(*dw) || (dw->seed == 4242 && dw->n_prompt == 3 &&
							dw->n_gen == 5),
			      "DONE figures: seed %llu n_prompt %u n_gen %u",
			      (unsigned long long)dw->seed, dw->n_prompt, dw->n_gen);
			CHECK(!!(c->e.flags & PG_CQE_F_LAST) == (n_done == 2),
			      "PG_CQE_F_LAST on DONE %d", n_done);
		}
	}
	CHECK(n_tok == 10 && n_lp == 10 && n_done == 2,
	      "%d TOKENS, %d LOGPROBS, %d DONE; not 10, 10, 2", n_tok, n_lp, n_done);
	CHECK(cl->c->n_inflight == 0, "still in flight: %d", cl->c->n_inflight);
	/* max_tokens 0: as many as the daemon allows and the pool leaves */
	caught.n_calls = 0;
	g = gen(PG_PROMPT_TOKENS, 250 * 4);
	g.max_tokens = 0;
	g.flags = PG_GEN_SEED_RANDOM;
	g.seed = 4242;
	memcpy(buf, &g, sizeof(g));
	for (int i = 0; i < 250; i++)
		memcpy(buf + sizeof(g) + 4 * i, &(int32_t){ 3 + i % 200 }, 4);
	send_gen(cl, 61, buf, (uint32_t)sizeof(g) + 250 * 4);
	CHECK(caught.n_calls == 1 && caught.rc == 0 && caught.q.max_tokens == 6 && caught.q.n == 1 &&
	      caught.q.ignore_eos == 0, "max_tokens 0 with 6 free tokens: %d", caught.q.max_tokens);
	CHECK(caught.q.sampling.seed != 4242, "PG_GEN_SEED_RANDOM kept the seed given");
	fx_settle(&F);
	fx_take(cl);
	want_no_error(cl);
	CHECK(count_type(cl, 61, PG_CQE_DONE) == 1, "one DONE");
	for (int i = 0; i < cl->n_got; i++)
		if (cl->got[i].e.type == PG_CQE_DONE) {
			dw = (const struct pg_done_wire *)cl->got[i].payload;
			CHECK(dw->seed == caught.q.sampling.seed, "DONE reports seed %llu, drew %llu",
			      (unsigned long long)dw->seed,
			      (unsigned long long)caught.q.sampling.seed);
		}
	g = gen(PG_PROMPT_TOKENS, 4);
	g.max_tokens = 0;
	len = gen_payload(&g, ids, 4, NULL, 0);
	send_gen(cl, 62, buf, len);
	CHECK(caught.q.max_tokens == 32, "max_tokens 0: %d, not --max-tokens 32", caught.q.max_tokens);
	fx_settle(&F);
	fx_take(cl);
	want_no_error(cl);
	CHECK(count_type(cl, 62, PG_CQE_TOKENS) == 32, "max_tokens 0: %d tokens, not 32",
	      count_type(cl, 62, PG_CQE_TOKENS));
}

static void test_gen_text_ok(struct fx_client *cl)
{
	static const char text[] = "Hello, world! \xc3\xa9t\xc3\xa9 \xff\xfe";
	struct pg_gen_wire g = gen(PG_PROMPT_TEXT, sizeof(text) - 1);
	int32_t want[64];
	int n_want = tokenize(text, sizeof(text) - 1, 1, 1, want, 64);
	uint8_t m[128];
	uint32_t n, len;

	caught.n_calls = 0;
	len = gen_payload(&g, text, sizeof(text) - 1, "x\0", 2);
	((struct pg_gen_wire *)buf)->n_stop = 1;
	((struct pg_gen_wire *)buf)->stop_bytes = 2;
	send_gen(cl, 70, buf, len);
	CHECK(cl->n_got == 0 && pgd_tok_busy(&F.d) == 1 && cl->c->n_inflight == 1,
	      "a text GENERATE: %d answers, %d jobs", cl->n_got, pgd_tok_busy(&F.d));
	fx_settle(&F);
	fx_take(cl);
	want_no_error(cl);
	CHECK(caught.n_calls == 1 && caught.q.n_prompt == n_want &&
	      !memcmp(caught.ids, want, sizeof(int32_t) * (size_t)n_want),
	      "the text prompt's ids: %d, not the tokenizer's %d", caught.q.n_prompt, n_want);
	CHECK(caught.q.n_stop == 1 && !strcmp(caught.stops[0], "x"), "the text request's stop");
	CHECK(count_type(cl, 70, PG_CQE_DONE) == 1, "text GENERATE: no DONE");
	/* chat: two messages, the last without its padding */
	caught.n_calls = 0;
	n = chat_msg(m, 0, "Be brief.", 1);
	n += chat_msg(m + n, 1, "Hi", 0);
	g = gen(PG_PROMPT_CHAT, n);
	len = gen_payload(&g, m, n, NULL, 0);
	send_gen(cl, 71, buf, len);
	fx_settle(&F);
	fx_take(cl);
	want_no_error(cl);
	CHECK(caught.n_calls == 1 && caught.rc == 0 && caught.q.n_prompt > 4,
	      "chat GENERATE: %d calls, %d prompt tokens", caught.n_calls, caught.q.n_prompt);
	CHECK(count_type(cl, 71, PG_CQE_DONE) == 1, "chat GENERATE: no DONE");
	/* a tool's result (role 3) after the question */
	caught.n_calls = 0;
	n = chat_msg(m, 1, "Weather?", 1);
	n += chat_msg(m + n, 2, "call", 1);
	n += chat_msg(m + n, 3, "sunny", 0);
	g = gen(PG_PROMPT_CHAT, n);
	len = gen_payload(&g, m, n, NULL, 0);
	send_gen(cl, 74, buf, len);
	fx_settle(&F);
	fx_take(cl);
	want_no_error(cl);
	CHECK(caught.n_calls == 1 && caught.rc == 0 && caught.q.n_prompt > 4,
	      "chat GENERATE with a tool's result: %d calls, %d prompt tokens",
	      caught.n_calls, caught.q.n_prompt);
	CHECK(count_type(cl, 74, PG_CQE_DONE) == 1, "chat GENERATE with a tool's result: no DONE");
	/* a text prompt that gives no tokens (the model adds no BOS) */
	if (!pg_tokenizer_add_bos(F.m->tok)) {
		g = gen(PG_PROMPT_TEXT, 0);
		len = gen_payload(&g, NULL, 0, NULL, 0);
		send_gen(cl, 72, buf, len);
		fx_settle(&F);
		fx_take(cl);
		want_error(cl, 72, PG_EINVAL, 1, "the prompt is empty: it gives no tokens");
	}
	/* a text prompt over --max-prompt, found once tokenized */
	F.cfg.max_prompt = 3;
	pgd_limits_resolve(&F.d);
	g = gen(PG_PROMPT_TEXT, sizeof(text) - 1);
	len = gen_payload(&g, text, sizeof(text) - 1, NULL, 0);
	send_gen(cl, 73, buf, len);
	fx_settle(&F);
	fx_take(cl);
	want_error(cl, 73, PG_ETOOBIG, 1,
		   "the prompt has %lld tokens, over the daemon's limit of %d (--max-prompt): shorten it, or raise the limit",
		   (long long)n_want, 3);
	F.cfg.max_prompt = 0;
	pgd_limits_resolve(&F.d);
	CHECK(cl->c->n_inflight == 0, "still in flight: %d", cl->c->n_inflight);
}

/* ---- in flight: duplicates, the limit, draining, CANCEL ---- */

static void test_inflight(struct fx_client *cl)
{
	struct pg_gen_wire g = gen(PG_PROMPT_TOKENS, 4);
	struct pg_sqe e;
	int32_t id = 12;
	uint32_t len = gen_payload(&g, &id, 4, NULL, 0);

	for (uint64_t r = 100; r < 104; r++) {
		send_gen(cl, r, buf, len);
		CHECK(cl->n_got == 0, "request %llu answered at once", (unsigned long long)r);
	}
	send_gen(cl, 102, buf, len);
	want_error(cl, 102, PG_EDUPLICATE, 0,
		   "a request with id %llu is already in flight: choose another id", 102ULL);
	send_gen(cl, 104, buf, len);
	want_error(cl, 104, PG_ELIMIT, 1,
		   "%d requests are already in flight for this client (--max-inflight %d): wait for one to finish",
		   4, 4);
	for (uint64_t r = 100; r < 104; r++) {
		e = (struct pg_sqe){ .req_id = r, .op = PG_OP_CANCEL };
		send1(cl, &e, NULL, 0);
		CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_DONE &&
		      cl->got[0].e.code == PG_FINISH_WIRE_CANCELLED &&
		      (cl->got[0].e.flags & PG_CQE_F_LAST), "CANCEL %llu: no DONE CANCELLED",
		      (unsigned long long)r);
	}
	e = (struct pg_sqe){ .req_id = 101, .op = PG_OP_CANCEL };
	send1(cl, &e, NULL, 0);
	want_error(cl, 101, PG_ENOENT, 0, "no request %llu in flight to cancel", 101ULL);
	CHECK(cl->c->n_inflight == 0, "still in flight: %d", cl->c->n_inflight);
	/* a text request cancelled while it is tokenized: one DONE per sample */
	g = gen(PG_PROMPT_TEXT, 5);
	g.n = 3;
	len = gen_payload(&g, "hello", 5, NULL, 0);
	send_gen(cl, 110, buf, len);
	CHECK(cl->n_got == 0 && pgd_tok_busy(&F.d) == 1, "a text GENERATE answered at once");
	send_gen(cl, 110, buf, len);	/* its id is taken while it is tokenized */
	want_error(cl, 110, PG_EDUPLICATE, 0,
		   "a request with id %llu is already in flight: choose another id", 110ULL);
	e = (struct pg_sqe){ .req_id = 110, .op = PG_OP_CANCEL };
	send1(cl, &e, NULL, 0);
	fx_settle(&F);
	fx_take(cl);
	CHECK(cl->n_got == 3 && count_type(cl, 110, PG_CQE_DONE) == 3,
	      "a request cancelled while tokenized: %d completions", cl->n_got);
	for (int i = 0; i < cl->n_got; i++)
		CHECK(cl->got[i].e.code == PG_FINISH_WIRE_CANCELLED && cl->got[i].e.sample == i &&
		      !!(cl->got[i].e.flags & PG_CQE_F_LAST) == (i == 2),
		      "DONE %d of a request cancelled while tokenized", i);
	/* draining: GENERATE refused before anything else is looked at */
	F.d.draining = 1;
	send_gen(cl, 120, buf, 3);
	want_error(cl, 120, PG_EBUSY, 1, "the daemon is draining: retry later");
	F.d.draining = 0;
}

/* ---- TOKENIZE and DETOKENIZE ---- */

static void test_tokenize(struct fx_client *cl)
{
	static int32_t big[8192];
	static const char text[] = "The quick brown fox \xe2\x80\x94 <|x|> \x80 jumps";
	struct pg_sqe e = { .req_id = 200, .op = PG_OP_TOKENIZE,
			    .flags = PG_TOK_ADD_BOS | PG_TOK_SPECIAL };
	int32_t want[128];
	int n;

	send1(cl, &e, text, sizeof(text) - 1);
	fx_settle(&F);
	fx_take(cl);
	n = tokenize(text, sizeof(text) - 1, 1, 1, want, 128);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_TOKENS_RESULT &&
	      cl->got[0].len == 4u * (uint32_t)n &&
	      !memcmp(cl->got[0].payload, want, 4 * (size_t)n),
	      "TOKENIZE: not the tokenizer's %d ids", n);
	e.flags = 0;
	e.req_id = 201;
	send1(cl, &e, text, sizeof(text) - 1);
	fx_settle(&F);
	fx_take(cl);
	n = tokenize(text, sizeof(text) - 1, 0, 0, want, 128);
	CHECK(cl->n_got == 1 && cl->got[0].len == 4u * (uint32_t)n &&
	      !memcmp(cl->got[0].payload, want, 4 * (size_t)n),
	      "TOKENIZE without flags: not the tokenizer's %d ids", n);
	e.flags = PG_TOK_SPECIAL | 0x40;
	send1(cl, &e, text, sizeof(text) - 1);
	want_error(cl, 201, PG_EINVAL, 1, "unknown TOKENIZE flags 0x%x", 0x40);
	/* more ids than the completion arena carries (bytes that are not UTF-8 too) */
	for (int i = 0; i < 6000; i++)
		buf[i] = (uint8_t)(1 + (i * 7919u) % 255);
	n = tokenize((const char *)buf, 6000, 0, 0, big, 8192);
	CHECK(n * 4 > (int)F.cfg.cq_arena, "6000 bytes give only %d tokens", n);
	e = (struct pg_sqe){ .req_id = 202, .op = PG_OP_TOKENIZE };
	send1(cl, &e, buf, 6000);
	fx_settle(&F);
	fx_take(cl);
	want_error(cl, 202, PG_ETOOBIG, 1,
		   "the text gives %lld tokens, more than a completion can carry (%u bytes): tokenize it in parts",
		   (long long)n, F.cfg.cq_arena);
	/* an empty text */
	e = (struct pg_sqe){ .req_id = 203, .op = PG_OP_TOKENIZE };
	send1(cl, &e, NULL, 0);
	fx_settle(&F);
	fx_take(cl);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_TOKENS_RESULT &&
	      cl->got[0].len == 0, "TOKENIZE of nothing");
}

/* The text of ids as the daemon's detokenizer gives it, in out (cap). */
static size_t detok(const int32_t *ids, int n, int special, char *out, size_t cap)
{
	struct pg_detok_stream s = { .n_tail = 0 };
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += (size_t)pg_detok_push(F.m->tok, &s, ids[i], special, out + len, cap - len);
	return len + (size_t)pg_detok_flush(&s, out + len, cap - len);
}

static void test_detokenize(struct fx_client *cl)
{
	static const char text[] = "caf\xc3\xa9 \xe2\x82\xac 42";
	struct pg_sqe e = { .req_id = 300, .op = PG_OP_DETOKENIZE };
	int32_t ids[64], bad[3] = { 5, 384, 6 };
	int n = tokenize(text, sizeof(text) - 1, 0, 0, ids, 64);
	char want[256];
	size_t n_want;
	int32_t longest = 0;
	int best = 0;

	n_want = detok(ids, n, 0, want, sizeof(want));
	CHECK(n_want == sizeof(text) - 1 && !memcmp(want, text, n_want), "round trip");
	send1(cl, &e, ids, 4u * (uint32_t)n);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_TEXT_RESULT &&
	      cl->got[0].len == n_want && !memcmp(cl->got[0].payload, want, n_want),
	      "DETOKENIZE: '%s'", cl->n_got ? (const char *)cl->got[0].payload : "");
	/* half a character: the daemon completes it with U+FFFD */
	ids[0] = tokenize("\xc3", 1, 0, 0, ids, 64) == 1 ? ids[0] : 0;
	e.req_id = 301;
	send1(cl, &e, ids, 4);
	CHECK(cl->n_got == 1 && cl->got[0].len == 3 &&
	      !memcmp(cl->got[0].payload, "\xef\xbf\xbd", 3), "a lone lead byte: no U+FFFD");
	send1(cl, &e, ids, 6);
	want_error(cl, 301, PG_EINVAL, 1,
		   "a DETOKENIZE payload is int32 ids; %u bytes is not a whole number of them", 6u);
	send1(cl, &e, bad, sizeof(bad));
	want_error(cl, 301, PG_EINVAL, 1,
		   "token %u (id %d) is out of range: the vocabulary has %d tokens", 1u, 384, 384);
	bad[1] = -1;
	send1(cl, &e, bad, sizeof(bad));
	want_error(cl, 301, PG_EINVAL, 1,
		   "token %u (id %d) is out of range: the vocabulary has %d tokens", 1u, -1, 384);
	e = (struct pg_sqe){ .req_id = 302, .op = PG_OP_DETOKENIZE };
	send1(cl, &e, NULL, 0);
	CHECK(cl->n_got == 1 && cl->got[0].e.type == PG_CQE_TEXT_RESULT && cl->got[0].len == 0,
	      "DETOKENIZE of nothing");
	/* more text than a completion carries */
	for (int32_t id = 0; id < F.d.lim.n_vocab; id++) {
		int len = pg_token_to_piece(F.m->tok, id, 0, want, sizeof(want));

		if (len > best) {
			best = len;
			longest = id;
		}
	}
	n = (int)(F.cfg.cq_arena + 1024) / best + 2;
	CHECK(4 * n <= (int)F.d.lim.max_payload, "%d ids of %d bytes", n, best);
	for (int i = 0; i < n; i++)
		memcpy(buf + 4 * i, &longest, 4);
	e.req_id = 303;
	send1(cl, &e, buf, 4u * (uint32_t)n);
	want_error(cl, 303, PG_ETOOBIG, 1,
		   "the text of these %u tokens is more than a completion can carry (%zu bytes): detokenize them in parts",
		   (unsigned)n, (size_t)F.cfg.cq_arena);
}

/* ---- PGD_MAX_MALFORMED, and a client that breaks its ring ---- */

static void test_malformed_limit(struct fx_client *bad, struct fx_client *good)
{
	struct pg_sqe e = { .op = 99 };
	struct pg_sqe ping = { .req_id = 1, .op = PG_OP_PING, .arg = 5 };
	int sent = 0, errors = 0, good_malformed = good->c->n_malformed;

	while (sent < PGD_MAX_MALFORMED + 1) {
		int batch = 0;

		while (sent < PGD_MAX_MALFORMED + 1 && batch < 8) {
			e.req_id = (uint64_t)++sent;
			CHECK(fx_put(bad, &e, NULL, 0) == 0, "ring full");
			batch++;
		}
		fx_serve(&F, bad);
		fx_clear(bad);
		fx_take(bad);
		for (int i = 0; i < bad->n_got; i++)
			errors += bad->got[i].e.type == PG_CQE_ERROR &&
				  bad->got[i].e.code == PG_EINVAL;
	}
	CHECK(errors == PGD_MAX_MALFORMED + 1, "%d errors for %d malformed requests", errors,
	      PGD_MAX_MALFORMED + 1);
	CHECK(bad->c->dead && bad->c->dead_code == PG_EPROTO &&
	      !strcmp(bad->c->dead_msg,
		      "more than 100 malformed requests: disconnected; fix the client"),
	      "not dropped after %d malformed requests: '%s'", PGD_MAX_MALFORMED + 1,
	      bad->c->dead_msg);
	/* nothing more is read from it; the other client is served */
	CHECK(fx_put(bad, &ping, NULL, 0) == 0, "ring full");
	CHECK(fx_serve(&F, bad) == 0, "a dropped client's submissions are still read");
	fx_clear(good);
	send1(good, &ping, NULL, 0);
	CHECK(good->n_got == 1 && good->got[0].e.type == PG_CQE_PONG,
	      "the other client is not served");
	CHECK(good->c->n_malformed == good_malformed && !good->c->dead,
	      "the other client was touched");
	fx_clear(bad);
	fx_disconnect(&F, bad);
	CHECK(atomic_load(&bad->h->closed) == 1 && bad->h->bye.code == PG_EPROTO &&
	      !strcmp(bad->h->bye.message,
		      "more than 100 malformed requests: disconnected; fix the client"),
	      "the last word: closed %u code %d '%s'", atomic_load(&bad->h->closed),
	      bad->h->bye.code, bad->h->bye.message);
	fx_take(bad);
	CHECK(bad->n_got == 1 && bad->got[0].e.type == PG_CQE_ERROR &&
	      bad->got[0].e.req_id == 0 && bad->got[0].e.code == PG_EPROTO &&
	      !(bad->got[0].e.flags & PG_CQE_F_LAST),
	      "the final ERROR of the connection (%d completions)", bad->n_got);
	fx_close(bad);
}

int main(void)
{
	struct pgd_config cfg = fx_config();
	struct fx_client a, b;

	cfg.max_payload = 32 << 10;
	fx_init(&F, &cfg, 16, 16);
	fx_connect(&F, &a, 0);
	fx_connect(&F, &b, 1);
	test_payload_bounds(&a);
	test_simple_ops(&a);
	test_gen_structure(&a);
	test_gen_values(&a);
	test_gen_tokens_bad(&a);
	test_gen_stops_bad(&a);
	test_gen_chat_bad(&a);
	CHECK(!a.c->dead && a.c->n_malformed < PGD_MAX_MALFORMED,
	      "dropped after %d malformed requests", a.c->n_malformed);
	fx_disconnect(&F, &a);
	fx_close(&a);
	fx_connect(&F, &a, 0);
	test_gen_tokens_ok(&a);
	test_gen_text_ok(&a);
	test_inflight(&a);
	test_tokenize(&a);
	test_detokenize(&a);
	test_malformed_limit(&b, &a);
	fx_disconnect(&F, &a);
	fx_close(&a);
	fx_free(&F);
	if (failures) {
		fprintf(stderr, "test_request: %d checks failed\n", (int)failures);
		return 1;
	}
	printf("test_request: all checks passed\n");
	return 0;
}
