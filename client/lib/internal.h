/*
 * internal.h - libpagoda's handle and the functions its files share: the
 * connection (libpagoda.c), the ring traffic (io.c), requests (request.c),
 * events (event.c) and the small operations (ops.c).
 *
 * Not installed and not exported: only pagoda_* symbols leave the library.
 *
 * Locking: one mutex per handle guards everything below.  A call takes it
 * on entry and gives it up only while it spins or sleeps waiting for the
 * daemon (io.c), so that other threads may submit or cancel meanwhile;
 * one waiting thread polls the doorbell, the others wait on cond.
 */
#ifndef PAGODA_CLIENT_LIB_INTERNAL_H
#define PAGODA_CLIENT_LIB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "include/pagoda.h"
#include "shm/ring.h"
#include "wire/client_proto.h"

/* Who reads a request's completions. */
enum pgc_owner {
	PGC_NONE = 0,	/* nobody: the request is not in flight; dropped */
	PGC_STREAM,	/* pagoda_next_event() */
	PGC_WAIT,	/* the blocking call that sent it */
};

/* Ids of the library's own operations (ping, tokenize, ...) have the top
   bit set; callers' requests use 1 .. 2^63 - 1. */
#define PGC_OP_ID_BIT (1ull << 63)

/* A completion read off the ring but not yet delivered: the entry and a
   copy of its text or payload. */
struct pgc_item {
	struct pgc_item *next;
	struct pg_cqe cqe;
	enum pgc_owner owner;
	uint32_t len;
	uint8_t data[];		/* len bytes, then a NUL */
};

/* Where a waiting call receives one completion. */
struct pgc_rx {
	struct pg_cqe cqe;
	uint8_t *data;		/* len bytes and a NUL; grown as needed */
	size_t cap;
	uint32_t len;
};

struct pgc_flight {
	uint64_t id;
	enum pgc_owner owner;
};

struct pagoda {
	pthread_mutex_t lock;
	int sock;			/* the daemon's socket: its hang-up */
	int seg_fd;
	int sq_efd;			/* doorbell we ring */
	int cq_efd;			/* doorbell the daemon rings */
	int ep_fd;			/* pagoda_fd(): cq_efd + sock, or -1 */
	uint8_t *map;			/* the segment, map_bytes */
	size_t map_bytes;
	struct pg_seg_header *hdr;
	struct pg_ring sq;		/* we produce */
	struct pg_ring cq;		/* we consume */
	struct pg_arena sq_arena;
	uint64_t *sq_end;		/* (sq_slots) for sq_arena */
	const uint8_t *cq_arena;	/* cq_arena_bytes, read only */
	uint32_t cq_arena_bytes;
	uint64_t generation;
	uint64_t spin_ns;
	int spin_score;			/* PGC_TOKENS waits: recent spin hits */
	unsigned spin_probe;
	int dead;			/* 0, or the code every call returns
					   once the ring is empty */
	int poller;			/* a thread sleeps on cq_efd */
	pthread_cond_t cond;		/* (CLOCK_MONOTONIC) the others */
	int fd_armed;			/* pagoda_fd's user waits on it */
	_Atomic uint64_t q_gen;		/* bumped whenever an item is queued */

	struct pgc_flight *flight;	/* (n_flight) requests in flight */
	size_t n_flight, cap_flight;
	uint64_t next_id;		/* automatic ids */
	uint64_t next_op_id;

	struct pgc_item *q_head, *q_tail;	/* read, not delivered */

	struct pgc_rx ev_rx;		/* pagoda_next_event's event */
	int32_t ev_ids[PG_CQE_IDS];

	pthread_mutex_t err_lock;
	char err[256];
};

/* ---- libpagoda.c ---- */

/* pgc_fail - keep a message for pagoda_last_error(p); returns code. */
int pgc_fail(struct pagoda *p, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- io.c: the rings (lock held by the caller) ---- */

/* pgc_alive - 0, or the code when the daemon is gone (submitting is
   pointless then). */
int pgc_alive(struct pagoda *p);

/* pgc_check_socket - look (without waiting) whether the daemon hung up;
   returns p->dead. */
int pgc_check_socket(struct pagoda *p);

/* pgc_ring_self - ring our own completion doorbell (wake its pollers). */
void pgc_ring_self(struct pagoda *p);

/*
 * pgc_submit - one entry: *sqe with payload_off/len filled in, and len
 * bytes of payload that fill(ctx, buf) writes into the arena (fill may be
 * NULL when len is 0).  Waits while the ring or arena is full.  Returns 0
 * or a negative code.
 */
int pgc_submit(struct pagoda *p, const struct pg_sqe *sqe, uint32_t len,
	       void (*fill)(void *ctx, uint8_t *buf), void *ctx);

typedef int (*pgc_match_fn)(const struct pg_cqe *c, enum pgc_owner owner,
			    void *ctx);

/* What a wait waits for, which decides whether spinning may pay. */
enum pgc_pace {
	PGC_QUICK,	/* an answer without engine work (ping, tokenize) */
	PGC_TOKENS,	/* the engine's tokens: spin while it has paid */
};

/*
 * pgc_wait - wait up to timeout_ms (-1: no limit) for a completion that
 * match accepts, from the queue first and then from the ring; it goes to
 * *rx.  Other completions are queued for their readers.  Returns 1, 0 on
 * timeout or signal, or a negative code.
 */
int pgc_wait(struct pagoda *p, pgc_match_fn match, void *ctx,
	     struct pgc_rx *rx, int timeout_ms, enum pgc_pace pace);

/* pgc_match_id - match for pgc_wait: the WAIT completions of *(uint64_t *)ctx. */
int pgc_match_id(const struct pg_cqe *c, enum pgc_owner owner, void *ctx);

/* pgc_flight_add - record id in flight for owner; 0 or PAGODA_ENOMEM. */
int pgc_flight_add(struct pagoda *p, uint64_t id, enum pgc_owner owner);

/* pgc_flight_owner - the owner of id, PGC_NONE when not in flight. */
enum pgc_owner pgc_flight_owner(const struct pagoda *p, uint64_t id);

/* pgc_flight_remove - forget id (nothing if absent). */
void pgc_flight_remove(struct pagoda *p, uint64_t id);

/* pgc_op_id - a fresh id for one of the library's own operations. */
uint64_t pgc_op_id(struct pagoda *p);

/* pgc_queue_free - drop every queued completion. */
void pgc_queue_free(struct pagoda *p);

/* pgc_rx_free - free what rx holds. */
void pgc_rx_free(struct pgc_rx *rx);

/* ---- request.c ---- */

/* ---- event.c ---- */

/*
 * pgc_error_code - the library's code for an ERROR completion's code
 * (a pg_error): its negation, PAGODA_EPROTO when out of range.
 */
int pgc_error_code(int32_t wire);

/*
 * The highest finish code this library reads, as it tells the daemon in
 * each GENERATE (pg_gen_wire.finish_max); the wire's codes are
 * enum pagoda_finish's values.
 */
#define PGC_FINISH_MAX PG_FINISH_WIRE_GRAMMAR

/* pgc_finish_ok - whether a DONE's code is one this library reads. */
int pgc_finish_ok(int32_t wire);

/* pgc_figures - a DONE payload's figures; 0 or -1 when malformed. */
int pgc_figures(const struct pgc_rx *rx, struct pagoda_figures *fig);

/* pgc_logprobs_ok - a LOGPROBS payload is whole entries, the token's own
   first (client_proto.h). */
int pgc_logprobs_ok(const struct pgc_rx *rx);

#endif
