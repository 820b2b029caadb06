/*
 * http/http.h - pagoda-http, the OpenAI-compatible HTTP gateway: what its
 * files share.  server.c holds main(), the options, libmicrohttpd, API
 * keys, limits, the pool of daemon connections and the metrics; api.c the
 * endpoints (JSON in, libpagoda requests, JSON and server-sent events out);
 * tools.c tool calls (the tools' prompt and grammar, reading calls back);
 * buf.c the growing string and the 400 they share.
 *
 * Threads.  libmicrohttpd runs with MHD_USE_INTERNAL_POLLING_THREAD |
 * MHD_USE_THREAD_PER_CONNECTION: every HTTP connection has a thread of its
 * own, which runs the access handler and, for a stream, the content
 * reader.  A generation request borrows one pagoda_t from the pool for its
 * whole life (gw_take/gw_give) and is the only user of it meanwhile, so a
 * handle's events (pagoda_next_event) are read by one thread at a time as
 * pagoda.h asks; the pool itself is guarded by a mutex.  The counters are
 * updated with atomic builtins.
 */
#ifndef PAGODA_HTTP_H
#define PAGODA_HTTP_H

#include <microhttpd.h>
#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "include/pagoda.h"

/* The gateway's configuration and shared state (one, in server.c). */
struct gw {
	const char *socket;	/* pagodad's socket; NULL: libpagoda's default */
	const char *stats_path;	/* pagodad's statistics segment (/metrics) */
	size_t max_body;	/* bytes of a request body */
	size_t max_header;	/* bytes of a request's headers, all together */
	unsigned max_inflight;	/* generation requests at once */
	char **keys;		/* API keys (n_keys); none: no authentication */
	size_t n_keys;
	long created;		/* start time, for /v1/models */

	pthread_mutex_t pool_lock;	/* guards idle and n_idle */
	pagoda_t *idle[16];		/* connections not lent out */
	size_t n_idle;

	/* counters (atomic) */
	unsigned in_flight;
	int stopping;			/* SIGTERM: streams end */
	uint64_t requests;		/* HTTP requests answered */
	uint64_t by_status[6];		/* by status class: [2] 2xx, [4] 4xx .. */
	uint64_t prompt_tokens;
	uint64_t completion_tokens;
	uint64_t disconnects;		/* requests cancelled: client gone */
};

extern struct gw gw;

/*
 * gw_take - a connection to pagodad for one request: an idle one of the
 * pool, else a new one.  Returns 0 with *out set, or libpagoda's negative
 * code with *msg (static or thread-local text) saying why.
 */
int gw_take(pagoda_t **out, const char **msg);

/*
 * gw_give - give back a connection taken with gw_take.  ok 0: it failed
 * (the daemon went away, or a request could not be drained): close it.
 */
void gw_give(pagoda_t *p, int ok);

/* gw_count - count one answer with HTTP status `status`. */
void gw_count(unsigned status);

/*
 * gw_send_json - answer with `status` and the JSON of `body` (which this
 * steals).  Returns what MHD_queue_response returns.
 */
enum MHD_Result gw_send_json(struct MHD_Connection *c, unsigned status,
			     json_t *body);

/*
 * gw_send_error - answer with an OpenAI error object: {"error":
 * {"message", "type", "param", "code"}}.  param and code may be NULL
 * (null in the JSON).  type: "invalid_request_error" for 4xx but 401
 * ("authentication_error") and 429 ("rate_limit_error"), else
 * "server_error".
 */
enum MHD_Result gw_send_error(struct MHD_Connection *c, unsigned status,
			      const char *message, const char *param,
			      const char *code);

/* The endpoints (api.c).  body: the request's JSON text (len bytes). */
enum MHD_Result api_chat(struct MHD_Connection *c, const char *body, size_t len);
enum MHD_Result api_completions(struct MHD_Connection *c, const char *body,
				size_t len);
/* api_models - GET /v1/models, or with id one model (404 if not ours). */
enum MHD_Result api_models(struct MHD_Connection *c, const char *id);
enum MHD_Result api_health(struct MHD_Connection *c);

/* api_status - the HTTP status for libpagoda's code (negative). */
unsigned api_status(int code);

/* ---- what api.c and tools.c share ---- */

/* A growing NUL-terminated byte string. */
struct buf {
	char *s;
	size_t len, cap;
};

/* buf_add - append n bytes; -1 when out of memory (b unchanged). */
int buf_add(struct buf *b, const char *s, size_t n);

/* Why a request is refused before it reaches the daemon: an HTTP status,
   a message for the user, the parameter at fault and OpenAI's code. */
struct perr {
	unsigned status;
	char msg[400];
	char param[96];
	const char *code;
};

/* api_fail - a 400 into *e (code "invalid_value" unless set); returns -1. */
int api_fail(struct perr *e, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Tool calls (tools.c): OpenAI's `tools`, `tool_choice` and
 * `parallel_tool_calls`, in the tool-call format of the model's template
 * (pagoda_chat_info's tools: "hermes" for Qwen's <tool_call> blocks,
 * "llama3" for Llama 3.1's {"name", "parameters"} object, else pagoda's
 * own JSON), enforced by a grammar and read back from the text as
 * OpenAI's tool_calls.
 */
enum tool_choice { TC_NONE, TC_AUTO, TC_REQUIRED, TC_NAMED };
enum tool_dialect { TD_JSON, TD_HERMES, TD_LLAMA3 };

/* The most tools a request may offer, and calls in one answer. */
#define TOOLS_MAX 128
#define TOOLS_MAX_CALLS 16

struct tool {
	const char *name;	/* in the body */
	json_t *def;		/* {"type": "function", "function": {...}} (borrowed) */
	char *gbnf;		/* its arguments' grammar, rules prefixed tN- */
};

struct tools {
	size_t n;		/* 0: the request offers none */
	struct tool *t;
	enum tool_choice choice;
	size_t named;		/* TC_NAMED: which tool */
	int parallel;		/* more than one call per answer */
	enum tool_dialect d;	/* set by tools_dialect() before use */
};

/*
 * tools_parse - the body's tools, tool_choice and parallel_tool_calls
 * into *t (strings borrowed from body; every parameters schema translated
 * into a grammar now, so that one pagoda cannot honour is a 400 naming
 * it).  Returns 0 (t->n 0: no tools, or tool_choice "none" with none
 * used), or -1 with *e.
 */
int tools_parse(struct tools *t, json_t *body, struct perr *e);
void tools_free(struct tools *t);

/* tools_dialect - the dialect the daemon's tool-format name asks for. */
enum tool_dialect tools_dialect(const char *name);

/*
 * tools_prompt - the text that describes the tools to the model, for the
 * system message (malloc'd; NULL when out of memory).
 */
char *tools_prompt(const struct tools *t);

/*
 * tools_history - an assistant message's earlier tool_calls (OpenAI's
 * array, checked) as the model wrote them, after its content (may be
 * NULL): malloc'd text, or NULL with *e (param names messages[i]).
 */
char *tools_history(enum tool_dialect d, json_t *calls, const char *content,
		    size_t i, struct perr *e);

/*
 * tools_grammar - the GBNF the answer must match: the calls tool_choice
 * allows, and for "auto" also text (text_gbnf's, rules renamed, or any
 * text that does not open a call).  malloc'd, or NULL with *e.
 */
char *tools_grammar(const struct tools *t, const char *text_gbnf, struct perr *e);

/* gbnf_prefixed - GBNF text with every rule name prefixed (malloc'd). */
char *gbnf_prefixed(const char *gbnf, const char *prefix);

/* One call as it is read from a sample's text. */
struct tcall {
	char name[72];
	char id[40];		/* "call_" + random hex */
	struct buf args;	/* the arguments' JSON text as written */
	int named;		/* the name is complete */
	int announced;		/* a stream: its id and name were sent */
	size_t args_sent;	/* a stream: bytes of args sent */
};

/*
 * A sample's text read as content or calls.  The grammar guarantees the
 * shape, so this is a matcher of the dialect's literals around names and
 * JSON objects; text that does not match (it cannot happen under the
 * grammar) is kept as content.
 */
struct tparse {
	const struct tools *t;
	char opener[96];	/* the format's open + call_open */
	char next[96];		/* its sep + call_open */
	int state;
	struct buf pend;	/* bytes matched against a literal so far */
	int depth, in_str, esc;	/* inside arguments */
	struct tcall calls[TOOLS_MAX_CALLS];
	size_t n_calls;
	int broken;
};

void tparse_init(struct tparse *p, const struct tools *t);
/* tparse_feed - n bytes of text: content to *content, calls to p->calls. */
int tparse_feed(struct tparse *p, const char *s, size_t n, struct buf *content);
/* tparse_end - the text ended: what is pending, as content. */
int tparse_end(struct tparse *p, struct buf *content);
void tparse_free(struct tparse *p);

#endif
