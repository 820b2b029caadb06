/*
 * http/http.h - pagoda-http, the OpenAI-compatible HTTP gateway: what its
 * two files share.  server.c holds main(), the options, libmicrohttpd, API
 * keys, limits, the pool of daemon connections and the metrics; api.c the
 * endpoints (JSON in, libpagoda requests, JSON and server-sent events out).
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

#endif
