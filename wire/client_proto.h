/*
 * client_proto.h - pagoda's client protocol: the one definition of every
 * struct that pagodad and libpagoda exchange, through the Unix socket
 * (handshake) and through the shared-memory segment (rings and payload
 * arenas).  How the rings move is shm/'s (ring.h, segment.h); what they
 * carry is defined here.
 *
 * All integers are little-endian host order (both sides run on one host);
 * every struct has a fixed size, checked below, and no pointers.  The
 * daemon trusts nothing in the segment: it copies a submission and its
 * payload out before it parses them and checks every index, length and
 * offset (daemon/session.c).  The client checks the segment's seals and
 * header before it maps and uses it.
 *
 * The segment (one memfd per client, created and sealed by the daemon):
 *
 *     [struct pg_seg_header]      4096 bytes: identity, geometry, and the
 *                                 control words of both rings, each on
 *                                 its own cache line
 *     [submission ring]           sq_slots × 64-byte struct pg_sqe
 *     [completion ring]           cq_slots × 64-byte struct pg_cqe
 *     [submission arena]          sq_arena bytes, written by the client
 *     [completion arena]          cq_arena bytes, written by the daemon
 *
 * Both rings are single-producer single-consumer (shm/ring.h).  Arenas are
 * byte rings too: a writer allocates contiguous runs in order and a run is
 * free again once the reader has consumed the ring entry that names it.
 */
#ifndef PAGODA_WIRE_CLIENT_PROTO_H
#define PAGODA_WIRE_CLIENT_PROTO_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define PG_PROTO_MAGIC 0x41444f47u	/* "GODA" */
/* 2: completions carry t_ns (the time a token was emitted) and 16 bytes
   of inline text, not 24.  3: PG_GEN_SEED_RANDOM; PG_GEN_CONTENT_SPECIAL (chat content is
   text without it); DONE's figures carry
   the seed (struct pg_done_wire is 48 bytes); a LOGPROBS payload starts
   with the sampled token's own entry; the segment header carries the
   daemon's last word (bye) */
#define PG_PROTO_VERSION 3u

#define PG_SLOT_BYTES 64
#define PG_CACHE_LINE 64
#define PG_SEG_HEADER_BYTES 4096

/* ---- errors: the codes of ERROR completions and of libpagoda ---- */

/*
 * Each is answered with a message that says what to do; libpagoda returns
 * them negated (pagoda_strerror() names them).
 */
enum pg_error {
	PG_OK = 0,
	PG_EINVAL = 1,		/* malformed request: bad op, length, offset,
				   count, token id or sampling value */
	PG_ETOOBIG = 2,		/* prompt, max_tokens or payload over a limit,
				   or more than the KV pool can ever hold */
	PG_ELIMIT = 3,		/* too many requests in flight for this client */
	PG_ENOMEM = 4,		/* the daemon is out of memory */
	PG_EBUSY = 5,		/* the daemon is draining: not admitting */
	PG_EENGINE = 6,		/* the forward pass failed for this request */
	PG_ENOENT = 7,		/* cancel: no such request in flight */
	PG_EVERSION = 8,	/* protocol versions differ */
	PG_EACCESS = 9,		/* refused by the daemon's access rules */
	PG_EPROTO = 10,		/* the peer broke the protocol */
	PG_ECLIENTS = 11,	/* too many clients connected */
	PG_ESHUTDOWN = 12,	/* the daemon stopped or restarted */
	PG_ECONNECT = 13,	/* cannot reach the daemon's socket */
	PG_ECANCELLED = 14,	/* the request was cancelled */
	PG_EDUPLICATE = 15,	/* a request with this id is in flight */
	PG_ERROR_MAX
};

/* ---- handshake, over the Unix socket ---- */

/* Client → daemon, first message after connect(). */
struct pg_hello {
	uint32_t magic;		/* PG_PROTO_MAGIC */
	uint32_t version;	/* PG_PROTO_VERSION of the client */
	uint32_t flags;		/* 0 */
	uint32_t reserved;
};
static_assert(sizeof(struct pg_hello) == 16, "pg_hello");

/*
 * Daemon → client.  On success (status 0) it travels with three fds in one
 * SCM_RIGHTS message: the segment's memfd (sealed: F_SEAL_SHRINK,
 * F_SEAL_GROW, F_SEAL_SEAL), the submission doorbell (an eventfd the client
 * writes to wake the daemon) and the completion doorbell (an eventfd the
 * daemon writes to wake the client; the client may poll it).  Otherwise
 * status is a pg_error and message says why; no fds come and the daemon
 * closes the socket.
 */
struct pg_welcome {
	uint32_t magic;
	uint32_t version;	/* the daemon's PG_PROTO_VERSION */
	uint32_t status;	/* enum pg_error */
	uint32_t client_id;	/* the daemon's number for this client */
	uint64_t generation;	/* the daemon's: changes at every start */
	uint64_t seg_bytes;	/* size of the segment (= the memfd's) */
	char message[224];	/* NUL-terminated, for a refusal */
};
static_assert(sizeof(struct pg_welcome) == 256, "pg_welcome");

/* ---- the segment ---- */

/*
 * The control words of one ring, each on its own cache line so that the
 * producer and consumer never write the same line:
 *   tail     written by the producer only (entries published)
 *   head     written by the consumer only (entries consumed)
 *   sleeping written by the consumer: 1 while it is (about to be) asleep
 *            and wants a doorbell; see shm/ring.h for the protocol.
 */
struct pg_ring_ctl {
	_Alignas(PG_CACHE_LINE) _Atomic uint32_t tail;
	_Alignas(PG_CACHE_LINE) _Atomic uint32_t head;
	_Alignas(PG_CACHE_LINE) _Atomic uint32_t sleeping;
	_Alignas(PG_CACHE_LINE) uint32_t pad;
};
static_assert(sizeof(struct pg_ring_ctl) == 4 * PG_CACHE_LINE, "pg_ring_ctl");

/*
 * The connection's last word, in the segment's header: why the daemon let
 * this client go.  The daemon writes it once, just before it sets
 * header.closed (release), so a client that has seen closed (acquire)
 * reads it whole.  It needs no room in the completion ring, which is how
 * it reaches a client dropped for leaving that ring full.  (When the ring
 * has room the same words also come as an ERROR completion of req_id 0.)
 * code 0: no reason given (the client hung up, or its process exited).
 */
struct pg_goodbye_wire {
	int32_t code;		/* enum pg_error */
	uint32_t reserved;
	char message[248];	/* NUL-terminated; says what to do (the
				   client checks the NUL) */
};
static_assert(sizeof(struct pg_goodbye_wire) == 256, "pg_goodbye_wire");

struct pg_seg_header {
	uint32_t magic;		/* PG_PROTO_MAGIC */
	uint32_t version;	/* PG_PROTO_VERSION */
	uint64_t generation;	/* as in pg_welcome */
	uint64_t seg_bytes;
	uint32_t client_id;
	uint32_t sq_slots;	/* power of two */
	uint32_t cq_slots;	/* power of two */
	uint32_t sq_arena;	/* bytes */
	uint32_t cq_arena;	/* bytes */
	uint32_t sq_off;	/* offsets from the segment's start, each a */
	uint32_t cq_off;	/* multiple of 64 */
	uint32_t sq_arena_off;
	uint32_t cq_arena_off;
	/* written by the daemon: 1 once it has stopped serving this client
	   (shutdown, disconnect), stored with release order after bye; the
	   client then fails with bye.code (PG_ESHUTDOWN when it is 0) */
	_Atomic uint32_t closed;
	uint32_t max_inflight;	/* the daemon's limits for this client */
	uint32_t max_prompt;	/* tokens */
	uint32_t max_tokens;
	uint32_t max_payload;	/* bytes of one submission's payload */
	uint32_t n_vocab;
	uint32_t reserved0;
	char model[128];	/* the model's name */
	_Alignas(PG_CACHE_LINE) struct pg_ring_ctl sq;	/* client → daemon */
	_Alignas(PG_CACHE_LINE) struct pg_ring_ctl cq;	/* daemon → client */
	struct pg_goodbye_wire bye;	/* why the daemon let the client go */
	uint8_t reserved[PG_SEG_HEADER_BYTES - 256 - 2 * sizeof(struct pg_ring_ctl)
			 - sizeof(struct pg_goodbye_wire)];
};
static_assert(sizeof(struct pg_seg_header) == PG_SEG_HEADER_BYTES,
	      "pg_seg_header");
static_assert(offsetof(struct pg_seg_header, bye) == 768, "pg_seg_header.bye");

/* ---- submissions: client → daemon ---- */

enum pg_op {
	PG_OP_NOP = 0,
	PG_OP_GENERATE = 1,	/* payload: struct pg_gen_wire + data */
	PG_OP_CANCEL = 2,	/* req_id: the request to cancel.  No
				   answer of its own: the request's samples
				   end with DONE code CANCELLED; an ERROR
				   PG_ENOENT (without PG_CQE_F_LAST) when no
				   such request is in flight */
	PG_OP_PING = 3,		/* answered with PONG, no engine work */
	PG_OP_TOKENIZE = 4,	/* payload: UTF-8 text; flags: PG_TOK_* */
	PG_OP_DETOKENIZE = 5,	/* payload: int32_t ids */
	PG_OP_INFO = 6,		/* answered with struct pg_info_wire;
				   flags: PG_INFO_* */
	PG_OP_MAX
};

/*
 * PG_OP_INFO flags: each asks for a struct appended to pg_info_wire, in
 * the flags' order.  A daemon ignores the flags it does not know, so a
 * daemon older than the flag answers the 200 bytes alone, and the client
 * knows it from the length; the answer without flags is always 200 bytes
 * (older clients require exactly that).
 */
#define PG_INFO_CHAT 1u		/* struct pg_chat_info_wire */

/* PG_OP_TOKENIZE flags */
#define PG_TOK_ADD_BOS 1u	/* add the model's BOS token if it uses one */
#define PG_TOK_SPECIAL 2u	/* parse special tokens (<|im_start|> ...) */

/*
 * One submission.  A payload, when the op has one, is payload_len bytes at
 * payload_off in the submission arena (a run that does not wrap); the
 * client may reuse those bytes once the daemon has consumed this entry
 * (the ring's head has passed it): the daemon copies payloads out first.
 */
struct pg_sqe {
	uint64_t req_id;	/* chosen by the client; echoed in completions */
	uint8_t op;		/* enum pg_op */
	uint8_t reserved0;
	uint16_t flags;
	uint32_t payload_off;
	uint32_t payload_len;
	uint32_t reserved1;
	uint64_t arg;		/* PING: echoed back (e.g. a timestamp) */
	uint8_t reserved[32];
};
static_assert(sizeof(struct pg_sqe) == PG_SLOT_BYTES, "pg_sqe");

enum pg_prompt_kind {
	PG_PROMPT_TEXT = 0,	/* UTF-8; special tokens parsed; BOS added
				   when the model wants one */
	PG_PROMPT_TOKENS = 1,	/* int32_t ids */
	PG_PROMPT_CHAT = 2,	/* messages rendered with the model's chat
				   template and the assistant prompt:
				   repeated struct pg_chat_msg_wire + text;
				   the template's markers are special, the
				   messages text (see PG_GEN_CONTENT_SPECIAL) */
};

/* One chat message in a PG_PROMPT_CHAT prompt: role, then len bytes of
 * UTF-8 content, then padding to a multiple of 4 bytes (which the last
 * message may omit). */
struct pg_chat_msg_wire {
	uint32_t role;		/* 0 system, 1 user, 2 assistant, 3 tool (a
				   tool's result; a daemon before it refuses
				   3 as an unknown role) */
	uint32_t len;
};
static_assert(sizeof(struct pg_chat_msg_wire) == 8, "pg_chat_msg_wire");

#define PG_GEN_IGNORE_EOS 1u	/* keep going past end-of-generation */
#define PG_GEN_TEXT 2u		/* send text with the token ids */
#define PG_GEN_SEED_RANDOM 4u	/* ignore seed: the daemon draws a fresh
				   one (and reports it in DONE) */
#define PG_GEN_CONTENT_SPECIAL 8u	/* PG_PROMPT_CHAT: control tokens written
				   in the messages (<|im_start|> ...) count
				   as such; without it a message is text and
				   only the template's markers are special */
#define PG_GEN_GRAMMAR 16u	/* grammar_kind and grammar_bytes are set:
				   the output must follow a grammar (a daemon
				   without grammars refuses the flag, so a
				   constraint is never dropped unseen) */

/* What the grammar_bytes of a GENERATE are. */
enum pg_grammar_kind {
	PG_GRAMMAR_GBNF = 1,		/* GBNF text (pagoda-grammar(7)) */
	PG_GRAMMAR_JSON_SCHEMA = 2,	/* a JSON Schema (pagoda-json-schema(7)) */
};

/*
 * A GENERATE payload: this struct, then prompt_bytes of prompt (text,
 * int32_t ids, or chat messages), then stop_bytes of stop strings, each
 * NUL-terminated (n_stop of them), then (PG_GEN_GRAMMAR) grammar_bytes of
 * grammar text, not NUL-terminated.
 */
struct pg_gen_wire {
	uint32_t prompt_kind;	/* enum pg_prompt_kind */
	uint32_t prompt_bytes;
	uint32_t n_stop;
	uint32_t stop_bytes;
	uint32_t max_tokens;	/* 0: as many as the daemon's limit and the
				   KV pool allow */
	int32_t priority;	/* higher first, within the client */
	uint32_t n;		/* samples, 1 .. 16 */
	uint32_t flags;		/* PG_GEN_* */
	float temperature;	/* <= 0: greedy */
	int32_t top_k;		/* <= 0: off */
	float top_p;		/* >= 1: off */
	float min_p;		/* <= 0: off */
	float repeat_penalty;	/* 1: off */
	int32_t repeat_last_n;	/* -1: all */
	float presence_penalty;
	float frequency_penalty;
	uint64_t seed;		/* sample i uses seed + i; unless
				   PG_GEN_SEED_RANDOM */
	uint32_t n_logprobs;	/* top log-probabilities per token, 0 .. 20
				   (see PG_CQE_LOGPROBS) */
	uint32_t grammar_kind;	/* enum pg_grammar_kind, with PG_GEN_GRAMMAR;
				   else 0 */
	uint32_t grammar_bytes;	/* with PG_GEN_GRAMMAR, 1 .. 1 MiB; else 0 */
	/* the highest enum pg_finish_wire the client reads; the daemon sends
	   a finish above it as PG_FINISH_WIRE_ERROR.  0 (clients before
	   PG_FINISH_WIRE_GRAMMAR, which left it zero, and which an older
	   daemon ignores) means PG_FINISH_WIRE_ERROR */
	uint32_t finish_max;
	uint32_t reserved[2];	/* zero */
};
static_assert(sizeof(struct pg_gen_wire) == 96, "pg_gen_wire");

/* ---- completions: daemon → client ---- */

enum pg_cqe_type {
	PG_CQE_TOKENS = 1,	/* n_ids ids (inline) and their text */
	PG_CQE_DONE = 2,	/* a sample ended: code = enum pg_finish_wire;
				   payload: struct pg_done_wire */
	PG_CQE_ERROR = 3,	/* code = enum pg_error; text: the message.
				   With PG_CQE_F_LAST the request is over;
				   without it (a CANCEL that found nothing,
				   a duplicate req_id) the request named is
				   unaffected.  req_id 0: the connection is
				   over (then header.closed is 1 and
				   header.bye says the same) */
	PG_CQE_PONG = 4,	/* arg echoed */
	PG_CQE_TOKENS_RESULT = 5,	/* TOKENIZE: payload int32_t ids */
	PG_CQE_TEXT_RESULT = 6,	/* DETOKENIZE: payload UTF-8 */
	PG_CQE_INFO = 7,	/* payload: struct pg_info_wire */
	PG_CQE_LOGPROBS = 8,	/* right after the TOKENS entry of one token
				   (n_ids 1), when the request asked for
				   n_logprobs: payload struct pg_logprob_wire
				   × (1 + n_logprobs): first the sampled
				   token's own, then the top tokens best
				   first, all of the distribution after
				   penalties, before truncation and
				   temperature; ids[0] is the token */
};

enum pg_finish_wire {
	PG_FINISH_WIRE_STOP = 0,	/* end-of-generation or stop string */
	PG_FINISH_WIRE_LENGTH = 1,	/* max_tokens */
	PG_FINISH_WIRE_CANCELLED = 2,
	PG_FINISH_WIRE_ERROR = 3,	/* the forward pass failed, or memory
					   ran out */
	PG_FINISH_WIRE_GRAMMAR = 4,	/* the grammar allowed no token: no
					   token of the vocabulary continues
					   the text; sent only to a client
					   whose GENERATE's finish_max says
					   it reads it (else ERROR) */
};

#define PG_CQE_IDS 4		/* token ids one TOKENS entry carries */
#define PG_CQE_TEXT 16		/* bytes of text carried inline */

#define PG_CQE_F_ARENA 1u	/* the text/payload is in the completion
				   arena at off (else inline in text[]) */
#define PG_CQE_F_LAST 2u	/* DONE/ERROR: the request's last entry */

/*
 * One completion.  Text and payloads of up to PG_CQE_TEXT bytes are
 * inline; longer ones are len bytes at off in the completion arena, which
 * the client may read until it moves the ring's head past this entry.
 */
struct pg_cqe {
	uint64_t req_id;
	uint8_t type;		/* enum pg_cqe_type */
	uint8_t sample;		/* sample index, for n > 1 */
	uint8_t n_ids;		/* TOKENS: ids[0 .. n_ids - 1] */
	uint8_t flags;		/* PG_CQE_F_* */
	int32_t code;		/* DONE: pg_finish_wire; ERROR: pg_error */
	uint32_t len;		/* bytes of text or payload */
	uint32_t off;		/* arena offset when PG_CQE_F_ARENA */
	union {
		int32_t ids[PG_CQE_IDS];
		uint64_t arg;	/* PONG */
	};
	/*
	 * TOKENS and LOGPROBS: when the engine emitted the token, as the
	 * daemon read CLOCK_MONOTONIC (ns) in its event callback, before the
	 * entry was written.  CLOCK_MONOTONIC is one clock for every process
	 * of a host, so a client subtracts it from its own reading to get
	 * the delivery time.  0 in other entries.
	 */
	uint64_t t_ns;
	char text[PG_CQE_TEXT];
};
static_assert(sizeof(struct pg_cqe) == PG_SLOT_BYTES, "pg_cqe");
static_assert(offsetof(struct pg_cqe, t_ns) % 8 == 0, "pg_cqe.t_ns aligned");

/* DONE's payload: the per-request figures. */
struct pg_done_wire {
	double queue_s;		/* submission to admission */
	double ttft_s;		/* submission to first token */
	double itl_s;		/* mean time between tokens */
	uint32_t n_prompt;	/* prompt tokens */
	uint32_t n_cached;	/* of which the prefix cache supplied */
	uint32_t n_gen;		/* generated tokens */
	uint32_t n_preempt;	/* times preempted */
	uint64_t seed;		/* the request's seed, given or drawn
				   (PG_GEN_SEED_RANDOM); sample i drew with
				   seed + i */
};
static_assert(sizeof(struct pg_done_wire) == 48, "pg_done_wire");

struct pg_logprob_wire {
	int32_t id;
	float logprob;
};
static_assert(sizeof(struct pg_logprob_wire) == 8, "pg_logprob_wire");

/* INFO's payload. */
struct pg_info_wire {
	char model[128];
	char arch[16];
	uint32_t n_vocab;
	uint32_t n_ctx_train;
	uint32_t n_blocks;
	uint32_t n_embd;
	uint32_t kv_pages;
	uint32_t page_tokens;
	uint32_t bos;		/* -1 as 0xffffffff when none */
	uint32_t eos;
	uint64_t generation;
	uint32_t pp, tp, cp;
	uint16_t n_clients;	/* clients connected now */
	uint16_t n_active;	/* sequences running or waiting in the
				   engine now (saturating); 0 when idle */
};
static_assert(sizeof(struct pg_info_wire) == 200, "pg_info_wire");

/* After pg_info_wire with PG_INFO_CHAT: how chat requests are handled. */
struct pg_chat_info_wire {
	char format[16];	/* the chat format's name, NUL-padded:
				   "chatml", "qwen2", "qwen3", "llama3",
				   "llama2", "gemma", "phi3" */
	char tools[16];		/* the tool-call format's: "json", "hermes",
				   "llama3" (daemon/engine/chat.h) */
};
static_assert(sizeof(struct pg_chat_info_wire) == 32, "pg_chat_info_wire");

#endif
