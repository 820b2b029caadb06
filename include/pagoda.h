/*
 * pagoda.h - libpagoda, the client library of pagodad: connect to the
 * daemon on this host, send it generation requests and read the tokens it
 * streams back through shared memory.
 *
 * It is not the engine: nothing here loads a model or computes anything.
 * Link with `pkg-config --cflags --libs pagoda`; man libpagoda(3).
 *
 * Handles.  pagoda_connect() gives an opaque pagoda_t, one connection (one
 * shared-memory segment) to the daemon; pagoda_close() ends it and frees
 * everything.  A program may hold several handles.
 *
 * Errors.  Functions return 0 (or a count) on success and a negative enum
 * pagoda_error on failure; pagoda_strerror() names a code and
 * pagoda_last_error() gives the message of the last failure, which says
 * what went wrong and what to do.  The library never calls exit(), never
 * writes to stderr and never raises signals (it sends with MSG_NOSIGNAL).
 * After PAGODA_ESHUTDOWN (the daemon stopped, crashed or restarted) every
 * call on the handle fails the same way: pagoda_close() it and connect
 * again.
 *
 * Ownership.  The library copies everything it is given before the call
 * returns.  What it returns is either the caller's to free (with free(),
 * or pagoda_completion_free() for a completion) or, for events, the
 * handle's, valid until the next pagoda_next_event() on the handle.
 *
 * Threads.  A handle may be used from several threads: every call locks
 * the handle, so concurrent calls are safe and take turns.  A call that
 * waits for the daemon (pagoda_generate, pagoda_next_event, pagoda_ping,
 * pagoda_tokenize, ...) lets go of the handle while it sleeps, so another
 * thread may submit or cancel meanwhile (e.g. cancel a pagoda_generate()
 * that another thread is blocked in).  The events of a request submitted
 * with pagoda_submit() go to pagoda_next_event(), which one thread at a
 * time should call; the answers of the blocking calls go to their
 * callers only.  The handle must not be used during or after
 * pagoda_close().  After fork() only the parent may use a handle: the
 * connection is the process's that connected, and where the kernel says
 * (Linux 6.5, SO_PEERPIDFD) the daemon lets it go when that process
 * exits, even if a child still holds it.
 */
#ifndef PAGODA_H
#define PAGODA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The socket pagoda_connect(NULL, ...) uses unless $PAGODA_SOCKET is set. */
#define PAGODA_DEFAULT_SOCKET "/run/pagoda/pagodad.sock"

/* Errors: the daemon's codes (wire/client_proto.h's enum pg_error), negated. */
enum pagoda_error {
	PAGODA_OK = 0,
	PAGODA_EINVAL = -1,	/* malformed request or argument */
	PAGODA_ETOOBIG = -2,	/* prompt, max_tokens or payload over a limit */
	PAGODA_ELIMIT = -3,	/* too many requests in flight */
	PAGODA_ENOMEM = -4,	/* out of memory (daemon or library) */
	PAGODA_EBUSY = -5,	/* the daemon is draining: not admitting */
	PAGODA_EENGINE = -6,	/* the forward pass failed */
	PAGODA_ENOENT = -7,	/* no such request in flight */
	PAGODA_EVERSION = -8,	/* the daemon speaks another protocol */
	PAGODA_EACCESS = -9,	/* refused: socket permissions or the
				   daemon's access rules */
	PAGODA_EPROTO = -10,	/* the daemon broke the protocol */
	PAGODA_ECLIENTS = -11,	/* too many clients connected */
	PAGODA_ESHUTDOWN = -12,	/* the daemon stopped or restarted */
	PAGODA_ECONNECT = -13,	/* cannot reach the daemon's socket */
	PAGODA_ECANCELLED = -14,/* the request was cancelled */
	PAGODA_EDUPLICATE = -15,/* a request with this id is in flight */
};

/* pagoda_strerror - a short text for an error code (either sign). */
const char *pagoda_strerror(int code);

typedef struct pagoda pagoda_t;

/*
 * pagoda_connect - connect to the daemon listening on socket_path (NULL:
 * $PAGODA_SOCKET, else PAGODA_DEFAULT_SOCKET) and map the shared segment
 * it hands over.  On success *out is the handle and 0 is returned; on
 * failure *out is NULL and the code is returned: PAGODA_ECONNECT (no
 * socket, nobody listening, no answer), PAGODA_EACCESS (permission denied
 * on the socket, or the daemon's access rules), PAGODA_EVERSION,
 * PAGODA_ECLIENTS, PAGODA_EBUSY, PAGODA_EPROTO (the daemon's answer or
 * segment failed the checks), PAGODA_ENOMEM; pagoda_last_error(NULL)
 * says why, in the calling thread.
 */
int pagoda_connect(const char *socket_path, pagoda_t **out);

/*
 * pagoda_close - disconnect (the daemon cancels whatever is in flight) and
 * free the handle.  NULL is allowed.
 */
void pagoda_close(pagoda_t *p);

/*
 * pagoda_last_error - the message of the last failed call on p, or with p
 * NULL of the calling thread's last failed pagoda_connect().  The text
 * stays valid in the calling thread until its next pagoda_last_error().
 * Never NULL ("" when nothing failed).
 */
const char *pagoda_last_error(pagoda_t *p);

/*
 * pagoda_set_spin_us - how long a waiting call spins on the ring before
 * it sleeps on its doorbell (default 20 µs; 0: sleep at once).  Spinning
 * answers in about a microsecond when the daemon is polling, at the price
 * of a core while it lasts.  A call whose submission woke a sleeping
 * daemon spins up to five times as long (at most 200 µs) when it waits
 * for an answer without engine work (ping, tokenize, detokenize, model
 * info), so that it pays the daemon's wake-up but not a wake-up of its
 * own; other waits on a sleeping daemon sleep at once.  Waits for tokens spin only while spinning has lately caught them.
 */
void pagoda_set_spin_us(pagoda_t *p, unsigned us);

/* ---- requests ---- */

enum pagoda_role {
	PAGODA_ROLE_SYSTEM = 0,
	PAGODA_ROLE_USER = 1,
	PAGODA_ROLE_ASSISTANT = 2,
	/*
	 * A tool's result, rendered the way the model's template renders tool
	 * messages (Qwen's <tool_response>, Llama 3.1's ipython turn; a user
	 * turn in <tool_response> for templates that have none).  A daemon
	 * older than this library refuses it (PAGODA_EINVAL, "role 3 is not
	 * ..."); pagoda_chat_info() answers "" there.
	 */
	PAGODA_ROLE_TOOL = 3,
};

struct pagoda_message {
	enum pagoda_role role;
	const char *content;	/* UTF-8, NUL-terminated */
};

/* pagoda_request.seed: no seed; the daemon draws a fresh one per request
   and reports it in the figures (pagoda_figures.seed). */
#define PAGODA_SEED_RANDOM UINT64_MAX

/*
 * A generation request.  Fill it with pagoda_request_init() and then set
 * the fields wanted.  The defaults are the `pagoda` command's (and
 * pagodad --prompt's): sampling at temperature 0.8 with top-k 40, top-p
 * 0.95 and min-p 0.05, a fresh seed for every request, at most 128
 * tokens; set temperature to 0 for greedy decoding, and a seed to
 * reproduce a sampled text.  The prompt is exactly one of: prompt (text; special
 * tokens such as <|im_start|> are recognised and the model's BOS is
 * added), tokens (ids, taken as they are) or messages (a chat, rendered
 * by the daemon with the model's chat template, ending with the
 * assistant's turn).  The sampling fields mean what they mean in pagodad
 * (libpagoda(3) lists their ranges); the daemon checks them.
 */
struct pagoda_request {
	const char *prompt;
	const int32_t *tokens;
	size_t n_tokens;
	const struct pagoda_message *messages;
	size_t n_messages;

	float temperature;	/* <= 0: greedy (default 0.8) */
	int top_k;		/* <= 0: off (default 40) */
	float top_p;		/* >= 1: off (default 0.95) */
	float min_p;		/* <= 0: off (default 0.05) */
	float repeat_penalty;	/* 1: off (default) */
	int repeat_last_n;	/* tokens looked back; -1 all (default 64) */
	float presence_penalty;	/* 0: off (default) */
	float frequency_penalty;/* 0: off (default) */
	uint64_t seed;		/* sample i uses seed + i (default
				   PAGODA_SEED_RANDOM: a fresh one) */
	int n_logprobs;		/* top log-probabilities per token, 0..20 */

	int max_tokens;		/* tokens to generate at most (default 128;
				   0: as many as the daemon allows) */
	const char *const *stop;/* stop strings (n_stop of them) */
	size_t n_stop;
	int ignore_eos;		/* keep going past end-of-generation */

	int priority;		/* higher first among this client's requests */
	int n;			/* samples of the one prompt, 1..16 (default 1) */
	uint64_t id;		/* 1 .. 2^63 - 1, unique among the handle's
				   requests in flight; 0: the library picks */
	/* messages: 1 lets control tokens written inside a message's
	   content (<|im_start|>, ...) act as such; 0 (default) reads content
	   as text, so that only the chat template's own markers are special */
	int content_special;
	int reserved_int;	/* zero */
	/* structured output: the samples follow a grammar, at most one of
	   these two (NULL: none); a grammar or schema that pagodad cannot
	   honour is refused with PAGODA_EINVAL and a message that names the
	   construct, never run unconstrained.  End-of-generation then comes
	   only where the grammar is complete (never with ignore_eos),
	   a sample ends once nothing more may follow, and a sample that
	   no token can continue ends with PAGODA_FINISH_GRAMMAR */
	const char *grammar;	/* GBNF text, pagoda-grammar(7) */
	const char *json_schema;/* a JSON Schema, pagoda-json-schema(7) */
	uint64_t reserved[1];	/* zero: room to grow without a new size */
};

/* pagoda_request_init - zero req and set the defaults above. */
void pagoda_request_init(struct pagoda_request *req);

/* ---- results ---- */

enum pagoda_finish {
	PAGODA_FINISH_STOP = 0,		/* end-of-generation or a stop string */
	PAGODA_FINISH_LENGTH = 1,	/* max_tokens reached */
	PAGODA_FINISH_CANCELLED = 2,	/* pagoda_cancel() */
	PAGODA_FINISH_ERROR = 3,	/* the forward pass failed */
	/*
	 * The grammar (or JSON Schema) allowed no token: no token of the
	 * model's vocabulary continues the text under it, within the
	 * matcher's limits on parses and nesting (pagoda-grammar(7) says
	 * when that happens and what to change).  The text so far follows
	 * the grammar but may be incomplete.  A daemon older than this
	 * library ends such a sample with PAGODA_FINISH_ERROR.
	 */
	PAGODA_FINISH_GRAMMAR = 4,
};

/* pagoda_finish_name - "stop", "length", "cancelled", "error",
   "grammar"; "unknown" for any other value. */
const char *pagoda_finish_name(enum pagoda_finish f);

/* The daemon's figures for one sample of a request (times in seconds). */
struct pagoda_figures {
	double queue_s;		/* submission to admission */
	double ttft_s;		/* submission to the first token */
	double itl_s;		/* mean time between tokens */
	unsigned n_prompt;	/* prompt tokens */
	unsigned n_cached;	/* of which the prefix cache supplied */
	unsigned n_gen;		/* tokens generated */
	unsigned n_preempt;	/* times preempted for memory */
	uint64_t seed;		/* the request's seed, the one given or the
				   one the daemon drew: sample i drew with
				   seed + i, and a request with this seed
				   (and the same prompt and settings) draws
				   the same text */
};

struct pagoda_logprob {
	int32_t id;
	float logprob;
};

/* One sample's whole output. */
struct pagoda_sample {
	char *text;		/* UTF-8, NUL-terminated; stop string cut */
	size_t text_len;
	int32_t *ids;		/* the tokens generated */
	size_t n_ids;
	/* with n_logprobs: token i's top log-probabilities are
	   logprobs[logprobs_at[i] .. logprobs_at[i + 1]); else NULL */
	struct pagoda_logprob *logprobs;
	size_t *logprobs_at;	/* n_ids + 1 offsets */
	enum pagoda_finish finish;
	struct pagoda_figures figures;
	/* with n_logprobs: token i's own log-probability (of the same
	   distribution as the top ones); else NULL */
	float *token_logprobs;	/* n_ids */
};

/* What pagoda_generate() returns: the request's n samples. */
struct pagoda_completion {
	uint64_t id;
	size_t n_samples;
	struct pagoda_sample *samples;	/* samples[0 .. n_samples - 1] */
};

/* pagoda_completion_free - free what a completion holds (not c itself). */
void pagoda_completion_free(struct pagoda_completion *c);

/*
 * pagoda_generate - run req and wait until every sample has finished; the
 * result goes to *out (free it with pagoda_completion_free()).  Returns 0
 * whatever the finish reasons (cancelled and error included: look at
 * each sample's finish), or a negative code when the daemon refused or
 * failed the request (its message in pagoda_last_error(p)); *out is then
 * empty.
 */
int pagoda_generate(pagoda_t *p, const struct pagoda_request *req,
		    struct pagoda_completion *out);

/* ---- streaming ---- */

/*
 * pagoda_submit - send req and return at once; its id (req->id, or the
 * one the library picked) goes to *id (may be NULL).  Its events then come
 * from pagoda_next_event().  Waits only when the rings are full.
 * Returns 0, PAGODA_EINVAL, PAGODA_ETOOBIG, PAGODA_ELIMIT,
 * PAGODA_EDUPLICATE, PAGODA_ENOMEM or PAGODA_ESHUTDOWN.
 */
int pagoda_submit(pagoda_t *p, const struct pagoda_request *req,
		  uint64_t *id);

enum pagoda_event_type {
	PAGODA_EVENT_TOKENS = 1,	/* ids and their text */
	PAGODA_EVENT_LOGPROBS = 2,	/* of the last token of the sample's
					   previous TOKENS event */
	PAGODA_EVENT_DONE = 3,		/* a sample finished */
	PAGODA_EVENT_ERROR = 4,		/* the request failed: it is over */
};

/*
 * One event.  Its pointers are the handle's, valid until the next
 * pagoda_next_event() on it.  `last` is set on the request's last event
 * (the DONE of its last sample, or an ERROR): its id is free again.
 */
struct pagoda_event {
	enum pagoda_event_type type;
	uint64_t id;			/* the request */
	unsigned sample;		/* 0 .. n - 1 */
	int last;
	const int32_t *ids;		/* TOKENS; LOGPROBS: ids[0], the token */
	size_t n_ids;
	const char *text;		/* TOKENS: the text (may be empty, and
					   may end inside a character that the
					   next event completes); ERROR: the
					   daemon's message.  NUL-terminated. */
	size_t text_len;
	const struct pagoda_logprob *logprobs;	/* LOGPROBS: the top n_logprobs,
						   best first */
	size_t n_logprobs;
	enum pagoda_finish finish;	/* DONE */
	struct pagoda_figures figures;	/* DONE */
	int error;			/* ERROR: a negative code */
	/*
	 * TOKENS, LOGPROBS: when the daemon's engine emitted the token,
	 * CLOCK_MONOTONIC in nanoseconds.  That clock is the same for every
	 * process of the host, so clock_gettime(CLOCK_MONOTONIC) now less
	 * emitted_ns is how long the token took to reach this process.  0
	 * for other events.
	 */
	uint64_t emitted_ns;
	/* LOGPROBS: the token's own log-probability (after penalties, at
	   temperature 1: what the model gave it, whether or not it is among
	   the top n_logprobs) */
	float logprob;
};

/*
 * pagoda_next_event - the next event of the requests sent with
 * pagoda_submit(), waiting up to timeout_ms (0: do not wait; -1: no
 * limit).  Returns 1 with *ev filled, 0 when none came in time or a
 * signal interrupted the wait, or a negative code (PAGODA_ESHUTDOWN once
 * the daemon is gone and every event it sent has been read, PAGODA_EPROTO,
 * PAGODA_ENOMEM).
 */
int pagoda_next_event(pagoda_t *p, struct pagoda_event *ev, int timeout_ms);

/*
 * pagoda_fd - a file descriptor that polls readable (POLLIN) when
 * pagoda_next_event() may have something: an event, or the daemon's
 * departure.  For event loops: poll it, then call pagoda_next_event(p,
 * &ev, 0) until it returns 0 (which arms the descriptor again).  The fd is
 * the handle's: do not read it or close it.  Returns the fd, or a negative
 * code.
 */
int pagoda_fd(pagoda_t *p);

/*
 * pagoda_cancel - ask the daemon to end request id; each of its samples
 * still running then finishes with PAGODA_FINISH_CANCELLED (the events,
 * or pagoda_generate()'s result, say so).  Returns 0 (sent),
 * PAGODA_ENOENT (no such request in flight on this handle) or
 * PAGODA_ESHUTDOWN.
 */
int pagoda_cancel(pagoda_t *p, uint64_t id);

/* ---- other operations (each one blocking round trip) ---- */

/*
 * pagoda_ping - one round trip through the rings with no engine work;
 * the time it took, in nanoseconds, goes to *rtt_ns (may be NULL).  Makes
 * no allocation, and no system call when the daemon answers while this
 * call spins.
 */
int pagoda_ping(pagoda_t *p, uint64_t *rtt_ns);

/* pagoda_tokenize flags */
#define PAGODA_TOKENIZE_ADD_BOS 1u	/* the model's BOS, if it uses one */
#define PAGODA_TOKENIZE_SPECIAL 2u	/* recognise special tokens */

/*
 * pagoda_tokenize - the model's token ids of len bytes of UTF-8 text; *ids
 * (the caller's to free()) and *n_ids get them.
 */
int pagoda_tokenize(pagoda_t *p, const char *text, size_t len,
		    unsigned flags, int32_t **ids, size_t *n_ids);

/*
 * pagoda_detokenize - the text of n_ids ids; *text (NUL-terminated, the
 * caller's to free()) and *len (may be NULL) get it.
 */
int pagoda_detokenize(pagoda_t *p, const int32_t *ids, size_t n_ids,
		      char **text, size_t *len);

struct pagoda_model_info {
	char model[128];	/* the model's name */
	char arch[16];		/* "llama", ... */
	unsigned n_vocab;
	unsigned n_ctx_train;
	unsigned n_blocks;
	unsigned n_embd;
	unsigned kv_pages;	/* the daemon's KV pool */
	unsigned page_tokens;
	int32_t bos;		/* -1: none */
	int32_t eos;		/* -1: none */
	uint64_t generation;	/* the daemon's: changes at every start */
	unsigned pp, tp, cp;	/* its parallel plan */
	unsigned n_clients;	/* clients connected now */
	unsigned n_active;	/* sequences running or waiting now (0: idle;
				   at most 65535) */
	/* this connection's limits, from the segment */
	unsigned client_id;
	unsigned max_inflight;	/* requests in flight */
	unsigned max_prompt;	/* prompt tokens */
	unsigned max_tokens;	/* generated tokens per request */
	unsigned max_payload;	/* bytes of one request */
};

/* pagoda_model_info - the daemon's model, plan and limits. */
int pagoda_model_info(pagoda_t *p, struct pagoda_model_info *info);

/* The daemon's handling of chat requests (NUL-terminated names). */
struct pagoda_chat_info {
	char format[16];	/* the chat template's format: "chatml",
				   "qwen2", "qwen3", "llama3", "llama2",
				   "gemma", "phi3" */
	char tools[16];		/* how the model writes tool calls:
				   "hermes" (<tool_call>{"name": ...,
				   "arguments": ...}</tool_call> blocks),
				   "llama3" ({"name": ..., "parameters": ...}),
				   "json" (pagoda-http's own convention) */
};

/*
 * pagoda_chat_info - the format chat requests are rendered in (the one
 * pagodad recognised in the model's template, or its --chat-format) and
 * the tool-call format that goes with it, for a caller that offers the
 * model tools and parses its calls.  0 with both names; 0 with both ""
 * when the daemon is older than this library and does not say.
 */
int pagoda_chat_info(pagoda_t *p, struct pagoda_chat_info *ci);

#ifdef __cplusplus
}
#endif

#endif
