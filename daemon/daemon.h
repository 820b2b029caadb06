/*
 * daemon.h - the serving daemon's internal types: struct pgd, its clients
 * and requests.  Not an API: everything here runs on the one daemon
 * thread, and nothing is locked.
 *
 * Who may include it: server.c (the loop's iteration, the handshake, the
 * clients table), session.c (a client's segment, rings and completions),
 * request.c (requests, their validation, the engine's events), tokwork.c
 * (the tokenizing workers), reload.c (the limits, the access rules,
 * SIGHUP) and control.c (the narrow functions of control.h); and the
 * in-process tests' fixture (tests/pgd_fixture.h).  Nothing else: admin.c
 * goes through control.h, stats.c is handed plain facts (stats.h).
 *
 * Each group of struct pgd's fields names the one file that writes it;
 * the others only read it, and nothing outside those six files writes any
 * of it.
 */
#ifndef PAGODA_DAEMON_DAEMON_H
#define PAGODA_DAEMON_DAEMON_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "daemon/access.h"
#include "daemon/engine/engine.h"
#include "daemon/listen.h"
#include "daemon/loop.h"
#include "daemon/server.h"
#include "daemon/stats.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "wire/client_proto.h"

struct pg_engine;
struct pg_forward;
struct pg_model;
struct pgd_admin;
struct pgd_stats;
struct pgd_tok;

/*
 * Connections between accept() and their hello (a hello already there at
 * accept() is read at once and takes none).  One user may hold
 * PGD_MAX_HANDSHAKES_PER_USER of them; past that, or when all are taken,
 * the oldest of the user holding the most is closed to make room, so
 * silent connections delay nobody but their own user's.  Closed ones keep
 * their slot until the io_uring lets go of it: twice as many slots.
 */
#define PGD_MAX_HANDSHAKES 32
#define PGD_MAX_HANDSHAKES_PER_USER 8
#define PGD_HS_SLOTS (2 * PGD_MAX_HANDSHAKES)

/* Malformed requests a client may send before it is dropped. */
#define PGD_MAX_MALFORMED 100

/* Stop strings in one GENERATE request. */
#define PGD_MAX_STOP 16

/* Samples of one GENERATE request (pg_gen_wire.n). */
#define PGD_MAX_SAMPLES 16
_Static_assert(PGD_MAX_SAMPLES <= PGD_STATS_MAX_SAMPLES,
	       "the statistics time every sample of a request");

/*
 * A completion waiting in daemon memory because the client's completion
 * ring (or arena) was full: the entry as it will be written, and its
 * payload when it goes to the arena.
 */
struct pgd_pending {
	struct pgd_pending *next;
	struct pg_cqe cqe;
	uint32_t len;			/* payload bytes */
	uint8_t payload[];		/* (len) when len > PG_CQE_TEXT */
};

struct pgd_tokjob;

/* One GENERATE request: its prompt being tokenized (job), or in the engine. */
struct pgd_req {
	struct pgd_req *next_engine;	/* chain of the engine-id table */
	struct pgd_req *next_client;	/* chain of the client's table */
	uint64_t engine_id;
	uint64_t req_id;		/* the client's */
	struct pgd_client *c;		/* NULL once the client is gone: its
					   events are dropped until the last */
	int text;			/* send text with the ids */
	int n_samples;			/* pg_request.n */
	uint64_t seed;			/* the sampling seed, given or drawn:
					   reported in DONE */
	uint32_t finish_max;		/* the highest pg_finish_wire the
					   client reads (pg_gen_wire) */
	struct pgd_tokjob *job;		/* while the worker tokenizes its prompt
					   (then in the client's table only, not
					   the engine's); NULL once submitted */
	struct pgd_stats_req st;	/* stats.c's: its client (slot, id) and
					   its samples' last tokens */
};

/* A client: its socket, doorbells, segment and requests. */
struct pgd_client {
	uint32_t id;			/* its id, unique for this daemon's
					   life (pagodactl clients, disconnect,
					   evict --client); the engine's client */
	uint32_t slot;			/* its index in slots[] and tables */
	uint64_t serial;		/* tags its io_uring operations */
	int sock;
	int memfd;			/* until the welcome has carried it */
	int sq_bell;			/* eventfd: the client wakes us */
	int cq_bell;			/* eventfd: we wake the client */
	int pidfd;			/* the connecting process (SO_PEERPIDFD),
					   readable once it exited; -1: none */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	double since;			/* monotonic seconds at connection */
	/* the segment: the header and regions as laid out at creation (the
	   daemon never reads geometry back from shared memory) */
	uint8_t *seg;
	size_t seg_bytes;
	struct pg_seg_header *hdr;
	struct pg_ring sq;		/* consumer */
	struct pg_ring cq;		/* producer */
	const uint8_t *sq_arena;
	uint32_t sq_arena_bytes;
	struct pg_arena cq_arena;
	uint64_t *cq_end;		/* (cq_slots) the arena's run ends */
	/* GENERATE requests in flight, by the client's req_id */
	struct pgd_req **reqs;		/* (reqs_mask + 1) hash chains */
	uint32_t reqs_mask;
	int n_inflight;
	size_t tok_bytes;		/* payload bytes of its jobs at the
					   tokenizing worker */
	/* completions that did not fit, oldest first */
	struct pgd_pending *bl_head, *bl_tail;
	size_t bl_count, bl_bytes;
	double bl_progress;		/* when the backlog last shrank (or began) */
	int n_malformed;
	int bell_armed;			/* a doorbell read is in the io_uring */
	int hup_armed;			/* the hang-up poll is in the io_uring */
	int exit_armed;			/* the pidfd's poll is in the io_uring */
	int hung_up;			/* it went by itself (not dropped) */
	/* set when the client must go: closed at the end of the iteration */
	int dead;
	enum pg_error dead_code;	/* final ERROR to send, or PG_OK */
	char dead_msg[160];
};

/* An accepted connection waiting for its hello. */
struct pgd_handshake {
	int fd;				/* -1: slot free */
	int closing;			/* closed to make room: its receive
					   ends, then the slot is free */
	uint64_t serial;		/* also its age: the oldest is lowest */
	struct ucred cr;		/* the peer's, read at accept() */
	struct pg_hello hello;		/* the io_uring receives into it */
};

/*
 * The limits as enforced: the configuration's, defaults resolved against
 * the KV pool and the submission arena, and what every segment gets.
 * reload.c writes them (pgd_limits_init at start, pgd_limits_resolve
 * again on SIGHUP); everyone else reads them.
 */
struct pgd_limits {
	int max_prompt;			/* tokens of one prompt */
	int max_tokens;			/* tokens generated per request */
	uint32_t max_payload;		/* bytes of one submission's payload */
	int n_vocab;			/* token ids are below it */
	struct pg_seg_header layout;	/* geometry every segment gets */
};

struct pgd {
	/* pgd_serve's (server.c), set once at start; read by all */
	const struct pgd_config *cfg;
	const struct pg_model *m;
	struct pg_forward *fw;
	struct pg_engine *engine;
	uint64_t generation;		/* random, per start */
	int chat_fmt;			/* enum pg_chat_format */
	int chat_tools;			/* enum pg_tool_format: INFO says it */
	char *chat_system;		/* the template's default system message */
	struct pgd_stats *stats;	/* stats.c's handle; NULL: none published */
	struct pgd_admin *admin;	/* admin.c's; NULL: no admin socket */
	/* reload.c's: the rules as enforced, replaced on SIGHUP */
	struct pgd_limits lim;
	struct pgd_access access;	/* pgd_access_set */
	/* server.c's: the socket, the loop, the handshakes, the clients */
	struct pgd_listener listener;	/* the client socket (listen.h) */
	int sig_fd;
	struct pgd_loop loop;		/* the one io_uring (loop.h) */
	int loop_owner;			/* the client side's owner in it */
	int accept_armed;
	int no_pidfd;			/* the kernel has no SO_PEERPIDFD */
	int bell_poll;			/* the kernel answers reads of a
					   non-blocking eventfd with EAGAIN:
					   poll doorbells instead */
	struct __kernel_timespec hello_timeout;
	struct __kernel_timespec watchdog_ts;	/* half of $WATCHDOG_USEC;
						   zero: no pings */
	struct signalfd_siginfo sig_buf;
	struct pgd_handshake hs[PGD_HS_SLOTS];
	int n_handshakes;		/* waiting, not closing */
	struct pgd_client **slots;	/* (max_clients) clients by slot */
	uint64_t *bell_buf;		/* (max_clients) sinks of doorbell reads */
	struct pgd_client **live;	/* (max_clients) the live ones, packed */
	int n_live;
	int n_dead;			/* clients marked dead this iteration
					   (pgd_mark_dead counts them up) */
	int stop_signal;		/* SIGTERM or SIGINT received */
	double now;			/* monotonic seconds, once per iteration */
	int step_errors;		/* forward failures, for the log */
	/* session.c's: identities (pgd_session_create, pgd_session_serial) */
	uint64_t next_serial;		/* the last serial given */
	uint32_t next_client_id;	/* the last client id given */
	/* request.c's: requests in the engine by engine id, and scratch for
	   one request at a time (pgd_requests_init) */
	struct pgd_req **by_engine;	/* (by_engine_mask + 1) chains */
	uint32_t by_engine_mask;
	uint8_t *payload;		/* (sq_arena + 1) the copy of a payload */
	int32_t *ids;			/* (ids_cap) prompt or tokenize ids */
	int ids_cap;
	/* tokwork.c's: the tokenizing workers, opaque (pgd_tok_busy, ...) */
	struct pgd_tok *tok;
	/* control.c's: set by the admin socket (pgd_ctl_set_draining) */
	int draining;			/* GENERATE is refused */
};

/* ---- session.c: segments, completions, closing ---- */

/*
 * pgd_session_create - a new client on socket fd with these credentials:
 * its sealed segment, doorbells and tables, in slot `slot`.  Returns the
 * client, or NULL with a message in err.
 */
struct pgd_client *pgd_session_create(struct pgd *d, int slot, int fd,
				      pid_t pid, uid_t uid, gid_t gid,
				      char *err, size_t err_len);

/*
 * pgd_session_serial - a new serial, never given before: it tags the
 * io_uring operations of a connection waiting for its hello (server.c)
 * or of a client.
 */
uint64_t pgd_session_serial(struct pgd *d);

/*
 * pgd_session_set_limits - write d's limits as enforced now (d->lim and
 * --max-inflight) into c's segment header, where the client reads them
 * (after SIGHUP).
 */
void pgd_session_set_limits(const struct pgd *d, struct pgd_client *c);

/*
 * pgd_session_destroy - unmap and close everything of c and free it.  Its
 * requests must have been let go (pgd_requests_drop) and its io_uring
 * operations cancelled by the caller.
 */
void pgd_session_destroy(struct pgd_client *c);

/*
 * pgd_emit - queue one completion for c.  cqe carries req_id, type,
 * sample, n_ids, ids or arg, flags and code; this sets len, off and
 * PG_CQE_F_ARENA for the len bytes of payload (inline when they fit).  The
 * entry goes straight into the ring (committed, not yet published) when
 * there is room and nothing is waiting before it; otherwise to the
 * client's backlog.  A backlog over its bounds marks the client dead.
 * len must be at most the completion arena's size (pgd_payload_fits).
 */
void pgd_emit(struct pgd *d, struct pgd_client *c, struct pg_cqe *cqe,
	      const void *payload, uint32_t len);

/* pgd_payload_fits - whether a payload of len bytes can ever be sent to c. */
int pgd_payload_fits(const struct pgd_client *c, size_t len);

/*
 * pgd_flush_backlog - move what the backlog can into the ring; drop a
 * client whose ring stayed full past --drain-timeout.  Returns the number
 * of completions moved.
 */
int pgd_flush_backlog(struct pgd *d, struct pgd_client *c);

/* pgd_publish - publish c's committed completions; ring it if it sleeps. */
void pgd_publish(struct pgd_client *c);

/*
 * pgd_publish_quiet - the same without ringing: returns 1 when c sleeps
 * and the caller must ring c->cq_bell.
 */
int pgd_publish_quiet(struct pgd_client *c);

/*
 * pgd_mark_dead - c must go at the end of this iteration; code (unless
 * PG_OK) and the message are its last word (pgd_say_goodbye).  The first
 * reason given wins.
 */
void pgd_mark_dead(struct pgd *d, struct pgd_client *c, enum pg_error code,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * pgd_say_goodbye - the last words to c: code and msg in the segment
 * header's bye (always: it needs no room in the ring), the final ERROR too
 * when code is not PG_OK and the ring has room, the segment marked closed,
 * and its doorbell rung.
 */
void pgd_say_goodbye(struct pgd_client *c, enum pg_error code,
		     const char *msg);

/* ---- request.c: submissions, requests, engine events ---- */

/* Payload bytes a client may have at the tokenizing workers before its
   submissions wait (it is not read meanwhile; nothing is refused). */
#define PGD_TOK_MAX_BYTES (4u << 20)

/* Payload bytes of all clients at the tokenizing workers past which a
   client that already has a job there waits too. */
#define PGD_TOK_MAX_TOTAL (32u << 20)

/*
 * pgd_tok_busy - the jobs at the tokenizing workers (tokwork.c): handed
 * over, not yet collected (pgd_tok_collect); pgd_tok_total - their
 * payload bytes.
 */
int pgd_tok_busy(const struct pgd *d);
size_t pgd_tok_total(const struct pgd *d);

/*
 * pgd_tok_held - c's submissions wait for the tokenizing workers: it has
 * PGD_TOK_MAX_BYTES there, or some while all clients have
 * PGD_TOK_MAX_TOTAL.  A client with nothing there is never held, so the
 * workers hold at most PGD_TOK_MAX_TOTAL + max_clients * max_payload
 * bytes, and a newcomer is never kept out by the others.
 */
static inline int pgd_tok_held(const struct pgd *d, const struct pgd_client *c)
{
	return c->tok_bytes >= PGD_TOK_MAX_BYTES ||
	       (c->tok_bytes && pgd_tok_total(d) >= PGD_TOK_MAX_TOTAL);
}

/*
 * pgd_holding - c's submissions wait: its completions have a backlog, or
 * the workers have much of its text (or of everyone's) to tokenize.  A
 * held client does not keep the loop awake: what frees it (the client
 * reading, a job of its own finishing) wakes the loop.
 */
static inline int pgd_holding(const struct pgd *d, const struct pgd_client *c)
{
	return c->bl_head != NULL || pgd_tok_held(d, c);
}

/*
 * pgd_drain - read every submission of c (unless it has a backlog: then
 * it is not admitting), each copied out of the segment before it is
 * checked, and act on it.  Returns the number of entries consumed.
 */
int pgd_drain(struct pgd *d, struct pgd_client *c);

/* pgd_on_event - the engine's event callback (ctx: the struct pgd). */
struct pg_engine_event;
void pgd_on_event(void *ctx, const struct pg_engine_event *ev);

/*
 * pgd_requests_drop - cancel every request of c in the engine and forget
 * the client in them (later events of those requests are dropped).
 * Returns how many there were.
 */
int pgd_requests_drop(struct pgd *d, struct pgd_client *c);

/*
 * pgd_requests_init / _free - the engine-id table and the scratch (a
 * payload of the submission arena's size, the ids of a prompt of
 * d->lim.max_prompt tokens); after pgd_limits_init.
 */
int pgd_requests_init(struct pgd *d);
void pgd_requests_free(struct pgd *d);

/*
 * pgd_requests_fit_prompt - grow the ids scratch for prompts of n tokens.
 * Returns the ids it holds: n or more, or fewer when out of memory (it
 * stays as it was).
 */
int pgd_requests_fit_prompt(struct pgd *d, int n);

/*
 * pgd_tok_finish - the loop's end of a job the worker is done with (its
 * request submitted to the engine, or answered, or dropped when its
 * request was cancelled or its client went); frees the job.
 */
struct pgd_tokjob;
void pgd_tok_finish(struct pgd *d, struct pgd_tokjob *j);

/*
 * pgd_idle - no request left anywhere: the engine is idle and no request
 * is being tokenized (a GENERATE there becomes engine work when done).
 */
static inline int pgd_idle(const struct pgd *d)
{
	return !pgd_tok_busy(d) && pg_engine_idle(d->engine);
}

/* ---- tokwork.c: tokenizing on worker threads ---- */

/*
 * A job: the text (or chat messages) of one GENERATE or TOKENIZE request,
 * copied out of the segment, to become token ids on the worker.  The loop
 * fills the first part before pgd_tok_submit() and must not touch the job
 * until pgd_tok_collect() hands it back; the worker fills the second.
 */
struct pgd_tokjob {
	struct pgd_tokjob *next;
	/* the loop's */
	uint8_t op;			/* PG_OP_GENERATE or PG_OP_TOKENIZE */
	uint32_t slot;			/* the client, looked up again at the end */
	uint64_t serial;
	uint64_t req_id;
	struct pgd_req *r;		/* GENERATE: its request; NULL once it was
					   cancelled or its client went: the
					   result is dropped */
	uint8_t *buf;			/* the payload's copy (the job's) */
	uint32_t bytes;			/* its length */
	const uint8_t *in;		/* in buf: the text, or chat messages */
	uint32_t in_len;
	int chat;			/* in is PG_PROMPT_CHAT messages */
	int add_bos, special;		/* special: text prompts only */
	int content_special;		/* chat: control tokens in the messages
					   count (PG_GEN_CONTENT_SPECIAL) */
	struct pg_request q;		/* GENERATE: all but the prompt and
					   max_tokens; stop strings point into
					   buf */
	const char *stops[PGD_MAX_STOP];
	char *grammar;			/* GENERATE: its GBNF text (q.grammar),
					   the job's; NULL: none */
	uint32_t max_tokens;		/* as asked (0: as many as allowed) */
	uint64_t tag, seq;		/* tokwork.c's order: finish tag, then
					   submission */
	/* the worker's */
	int32_t *ids;			/* (n_ids) */
	int64_t n_ids;
	enum pg_error code;		/* PG_OK, or the answer is this error */
	char msg[256];
};

/*
 * pgd_tok_start - the worker threads and their eventfd, for d's model and
 * chat template.  Returns 0, or -1 with a message in err.
 */
int pgd_tok_start(struct pgd *d, char *err, size_t err_len);

/* pgd_tok_stop - stop the worker; free every job and the requests waiting
   for them.  After the clients are gone. */
void pgd_tok_stop(struct pgd *d);

/*
 * pgd_tok_attach - register the workers in d's io_uring (loop.h), which
 * then reads their eventfd, so that a job done wakes a sleeping loop; the
 * read is armed again as it completes.  After pgd_tok_start and
 * pgd_loop_init.  Returns 0, or -1 with a message in err.
 */
int pgd_tok_attach(struct pgd *d, char *err, size_t err_len);

/* pgd_tok_fd - the eventfd the worker writes when a job is done. */
int pgd_tok_fd(const struct pgd *d);

/* pgd_tok_submit - hand j to the workers, in its client's queue. */
void pgd_tok_submit(struct pgd *d, struct pgd_tokjob *j);

/*
 * pgd_tok_forget - the client in slot is gone: its jobs not yet started
 * come back through pgd_tok_collect() untokenized (code PG_ECANCELLED);
 * one being tokenized ends as usual.
 */
void pgd_tok_forget(struct pgd *d, uint32_t slot);

/* pgd_tok_collect - the jobs the worker has finished, oldest first (a
   list through next), or NULL; no system call when there are none. */
struct pgd_tokjob *pgd_tok_collect(struct pgd *d);

/* pgd_tokjob_free - free j, its copies and ids (not its request). */
void pgd_tokjob_free(struct pgd_tokjob *j);

/*
 * pgd_chat_walk - walk the messages of a PG_PROMPT_CHAT prompt: count them
 * and check every header and length; with msgs (n of them) and text (bytes
 * + n), fill msgs with NUL-terminated copies.  Returns the count, or -1
 * with a message in err.
 */
struct pg_chat_msg;
int pgd_chat_walk(const uint8_t *p, uint32_t bytes, struct pg_chat_msg *msgs,
		  char *text, char *err, size_t err_len);

/* ---- reload.c: limits, access rules and SIGHUP ---- */

/*
 * pgd_limits_init - d->lim from d->cfg at start: the segments' geometry,
 * the vocabulary, and the limits (pgd_limits_resolve).  Returns 0, or -1
 * with a message in err (bad segment geometry).
 */
int pgd_limits_init(struct pgd *d, char *err, size_t err_len);

/*
 * pgd_limits_resolve - the limits SIGHUP may change (max_prompt,
 * max_tokens, max_payload) from d->cfg: the defaults resolved against the
 * KV pool and the submission arena.  At start and after SIGHUP.
 */
void pgd_limits_resolve(struct pgd *d);

/*
 * pgd_access_set - d's access rules become *fresh (taken over; NULL: none
 * left, at stop); the old ones are freed.  The one way d->access changes.
 */
void pgd_access_set(struct pgd *d, struct pgd_access *fresh);

/*
 * pgd_reload - SIGHUP: read the configuration again and apply what can
 * change at run time; logs every change and every error.
 */
void pgd_reload(struct pgd *d);

#endif
