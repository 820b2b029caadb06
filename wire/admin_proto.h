/*
 * admin_proto.h - the protocol of pagodad's admin socket, shared by the
 * daemon (daemon/admin.c) and pagodactl: one fixed-size request, one
 * answer.
 *
 * The admin socket is a Unix stream socket apart from the client socket
 * (default: beside it, /run/pagoda/pagodad-admin.sock), mode 0660 in the
 * admin group (--admin-group, default "pagoda-admin" when it exists),
 * else 0600.  The daemon checks the peer with SO_PEERCRED: root, the
 * daemon's own user and members of the admin group only; anyone else
 * gets an answer with status EACCES whose text says which group to join.
 *
 * A conversation: connect, send one struct pg_admin_request (the daemon
 * waits 2 s for it), read one struct pg_admin_reply and its len bytes of
 * UTF-8 text (a human-readable answer ending in a newline, or one JSON
 * object when PG_ADMIN_F_JSON was set), then the daemon closes.  Every
 * answer says what the daemon did ("evicted 12 pages ...").  DRAIN with
 * PG_ADMIN_F_WAIT answers only once the engine is idle.  Integers are
 * host order (both ends are on one host); every struct has a fixed size.
 */
#ifndef PAGODA_WIRE_ADMIN_PROTO_H
#define PAGODA_WIRE_ADMIN_PROTO_H

#include <assert.h>
#include <stdint.h>

#define PG_ADMIN_MAGIC 0x4e4d4441u	/* "ADMN" */
#define PG_ADMIN_VERSION 1u

/* The most text an answer carries (a long client list is cut). */
#define PG_ADMIN_MAX_REPLY (256u << 10)

enum pg_admin_cmd {
	PG_ADMIN_EVICT = 1,	/* evict_by, arg / seconds / text */
	PG_ADMIN_DRAIN = 2,	/* stop admitting; PG_ADMIN_F_WAIT: answer
				   once idle */
	PG_ADMIN_RESUME = 3,	/* admit again */
	PG_ADMIN_CLIENTS = 4,	/* list the connected clients */
	PG_ADMIN_DISCONNECT = 5,/* arg: the client id */
	PG_ADMIN_LOGLEVEL = 6,	/* text: error, warn, info or debug */
	PG_ADMIN_STATS_RESET = 7,	/* zero the counters and histograms */
	PG_ADMIN_HEALTH = 8,	/* status 0: healthy; else why not */
	PG_ADMIN_FAULT = 9,	/* tests only: arg N >= 1 makes the Nth
				   allocation from now fail; arg 0 disarms.
				   Answers "fired: yes|no; seen: M" (of the
				   previous arming).  EPERM unless pagodad was
				   started with PAGODA_FAULT_INJECTION=1
				   (daemon/engine/fault.h) */
	PG_ADMIN_CMD_MAX
};

enum pg_admin_evict_by {
	PG_ADMIN_EVICT_ALL = 0,
	PG_ADMIN_EVICT_AGE = 1,		/* seconds: unused at least this long */
	PG_ADMIN_EVICT_PAGES = 2,	/* arg: pages, least recently used first */
	PG_ADMIN_EVICT_CLIENT = 3,	/* arg: the client id whose pages go */
	PG_ADMIN_EVICT_PREFIX = 4,	/* text: tokenized as a prompt is */
};

#define PG_ADMIN_F_JSON 1u	/* answer with one JSON object */
#define PG_ADMIN_F_WAIT 2u	/* DRAIN: answer once the engine is idle */

#define PG_ADMIN_TEXT 4052

/* pagodactl → daemon. */
struct pg_admin_request {
	uint32_t magic;		/* PG_ADMIN_MAGIC */
	uint32_t version;	/* PG_ADMIN_VERSION */
	uint32_t cmd;		/* enum pg_admin_cmd */
	uint32_t flags;		/* PG_ADMIN_F_* */
	uint32_t evict_by;	/* enum pg_admin_evict_by */
	uint32_t reserved;
	uint64_t arg;		/* pages or client id */
	double seconds;		/* EVICT AGE */
	uint32_t text_len;	/* bytes of text used, < PG_ADMIN_TEXT */
	char text[PG_ADMIN_TEXT];	/* prefix text or log level (need
					   not end with NUL) */
};
static_assert(sizeof(struct pg_admin_request) == 4096, "pg_admin_request");

/* daemon → pagodactl, followed by len bytes of text. */
struct pg_admin_reply {
	uint32_t magic;		/* PG_ADMIN_MAGIC */
	uint32_t version;	/* PG_ADMIN_VERSION */
	int32_t status;		/* 0, or an errno value: EACCES (not an
				   administrator), EINVAL (bad request),
				   ENOENT (no such client), EBUSY (HEALTH:
				   draining), EIO (HEALTH: engine errors),
				   EPROTO (version mismatch) */
	uint32_t len;		/* bytes of text that follow */
};
static_assert(sizeof(struct pg_admin_reply) == 16, "pg_admin_reply");

#endif
