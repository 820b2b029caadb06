/*
 * control.h - what the admin socket (admin.c) may ask of the serving
 * daemon, and all it may read of it: a few functions over struct pgd, so
 * that admin.c never sees the daemon's structures (daemon.h) and writes
 * none of their fields.  Each call is short and runs on the loop thread,
 * between two iterations, like everything that touches struct pgd.  The
 * statistics' publications go through here too (pgd_ctl_publish), so
 * that stats.c is handed the daemon's facts and never reads struct pgd.
 *
 * Not the admin protocol (wire/admin_proto.h) nor its wording (admin.c):
 * these functions act and report facts; admin.c words the answers and
 * the log lines.
 */
#ifndef PAGODA_DAEMON_CONTROL_H
#define PAGODA_DAEMON_CONTROL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pgd;
struct pgd_config;
struct pgd_loop;
struct pg_kvc_evict;

/* The daemon's load and KV pool now (pgd_ctl_load). */
struct pgd_ctl_load {
	int draining;			/* GENERATE is refused (pgd_ctl_set_draining) */
	int stopping;			/* SIGTERM or SIGINT came: the loop ends */
	int clients;			/* connected */
	int running, waiting;		/* the engine's sequences */
	int inflight;			/* GENERATE requests of all clients */
	int kv_pages;			/* the KV pool: all its pages, */
	int kv_cached, kv_used, kv_free;	/* by state */
	int page_tokens;		/* tokens a page holds */
	const char *model;		/* the model's name (the daemon's) */
};

/* One connected client, as `pagodactl clients` shows it. */
struct pgd_ctl_client {
	uint32_t id;			/* unique for the daemon's life */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int inflight;			/* its GENERATE requests in flight */
	uint64_t requests, tokens;	/* since it connected or the last
					   statistics reset (0 without
					   statistics) */
	double connected_s;		/* seconds since it connected */
};

/* pgd_ctl_config - the daemon's settings (read only; the daemon's). */
const struct pgd_config *pgd_ctl_config(const struct pgd *d);

/* pgd_ctl_loop - the daemon's io_uring, to register a handler in (loop.h). */
struct pgd_loop *pgd_ctl_loop(struct pgd *d);

/* pgd_ctl_stopping - SIGTERM or SIGINT came: arm nothing new. */
int pgd_ctl_stopping(const struct pgd *d);

/* pgd_ctl_load - the daemon's load and KV pool now, into *out. */
void pgd_ctl_load(const struct pgd *d, struct pgd_ctl_load *out);

/*
 * pgd_ctl_set_draining - refuse new GENERATE requests (on) or admit them
 * again (off); requests already admitted go on.  Returns the previous
 * state (1: it was draining).
 */
int pgd_ctl_set_draining(struct pgd *d, int on);

/* pgd_ctl_draining - whether GENERATE is refused (pgd_ctl_set_draining). */
int pgd_ctl_draining(const struct pgd *d);

/*
 * pgd_ctl_idle - no request left anywhere: the engine idle and no prompt
 * being tokenized.
 */
int pgd_ctl_idle(const struct pgd *d);

/*
 * pgd_ctl_tokenize_prefix - text (len bytes) as the token ids an
 * eviction by prefix looks for (with BOS, control tokens parsed), in the
 * daemon's scratch: *ids stays valid until the loop's next request.  Sets
 * *cap to the most ids it holds.  Returns the number of ids (more than
 * *cap: too many, not kept), or -1 when out of memory.
 */
int64_t pgd_ctl_tokenize_prefix(struct pgd *d, const char *text, size_t len,
				const int32_t **ids, int *cap);

/*
 * pgd_ctl_evict - evict cached KV pages as ev says (pg_kvc_evict) and
 * count them in the statistics.  Returns the pages evicted, or -1 with
 * the engine's reason in *why (the engine's string, valid until its next
 * call).
 */
int pgd_ctl_evict(struct pgd *d, const struct pg_kvc_evict *ev, const char **why);

/*
 * pgd_ctl_client_at - the client in slot (0, 1, ... in slot order) into
 * *out.  Returns 1, 0 when the slot holds none (or one that is going), or
 * -1 past the last slot.
 */
int pgd_ctl_client_at(const struct pgd *d, int slot, struct pgd_ctl_client *out);

/*
 * pgd_ctl_disconnect - drop the client whose id is `id` at the end of
 * this iteration, its last word saying that administrator uid `by` did;
 * its requests are cancelled.  *out: the client as it was.  Returns 0, or
 * -1 when no such client is connected (ids are never reused, so a client
 * that left is not confused with a newer one).
 */
int pgd_ctl_disconnect(struct pgd *d, uint64_t id, uid_t by,
		       struct pgd_ctl_client *out);

/*
 * pgd_ctl_stats_reset - zero the statistics' counters and histograms.
 * Returns 0, or -1 when the daemon publishes none (--stats-path none).
 */
int pgd_ctl_stats_reset(struct pgd *d);

/*
 * pgd_ctl_engine_errors - forward-pass failures in the last window_s
 * seconds and the seconds since the last (-1: none); without statistics,
 * 1 when any step ever failed (*since_last -1).
 */
int pgd_ctl_engine_errors(const struct pgd *d, double window_s, double *since_last);

/*
 * pgd_ctl_answered - an admin command was answered: counted, and the
 * statistics published at once, so that what it did is in the figures.
 */
void pgd_ctl_answered(struct pgd *d);

/* When pgd_ctl_publish publishes the statistics. */
enum pgd_ctl_publish {
	PGD_CTL_PUBLISH_DUE,		/* something changed and the period
					   passed (the loop, every iteration) */
	PGD_CTL_PUBLISH_CHANGED,	/* something changed (before the loop
					   sleeps: an idle daemon's figures are
					   final) */
	PGD_CTL_PUBLISH_NOW,		/* at once (a step left the engine
					   idle: before its completions go out) */
};

/*
 * pgd_ctl_publish - publish the statistics (stats.h) with the daemon's
 * load and clients as they are now, when `when` says; nothing without
 * statistics.
 */
void pgd_ctl_publish(struct pgd *d, enum pgd_ctl_publish when);

#endif
