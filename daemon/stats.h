/*
 * stats.h - the daemon's live statistics: counters and histograms kept on
 * the loop thread, published into the read-only statistics segment
 * (wire/stats_layout.h) for pagodactl.  Publication never waits for a
 * reader: one seqlock, written by this thread only.
 *
 * Not the engine's own figures (pg_engine_stats, pg_forward_device_stats):
 * this module reads those at each publication, subtracts the baseline of
 * the last `stats reset`, and adds what only the daemon sees (latency
 * histograms, per-client figures, draining refusals).  Every function
 * accepts a NULL handle (statistics disabled) and then does nothing.
 *
 * It sees no struct of the daemon's (daemon.h): clients are numbers (slot
 * and id), a request's timing is the struct pgd_stats_req the daemon's
 * request embeds, and what a publication shows of the daemon is handed
 * in (control.c gathers it); it calls only the engine's and the forward
 * pass's read-only functions, never back into the daemon.
 */
#ifndef PAGODA_DAEMON_STATS_H
#define PAGODA_DAEMON_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pg_engine;
struct pg_engine_event;
struct pg_forward;
struct pg_model;
struct pgd_config;
struct pgd_stats;

/* The default publication period while busy, in milliseconds. */
#define PGD_STATS_INTERVAL_MS 100

/* Samples of one request whose inter-token times are observed. */
#define PGD_STATS_MAX_SAMPLES 16

/*
 * The admin socket as the statistics show it: its path and group ("" for
 * none), and the group the per-client table is readable by ((gid_t)-1:
 * root and the daemon's user only).  The caller's; copied at open.
 */
struct pgd_stats_admin {
	const char *path;
	const char *group;
	gid_t gid;
};

/*
 * What the statistics are of, given at open (server.c): the daemon's
 * settings, model, forward pass and engine (read only, and outliving the
 * statistics), and the facts of this start.  The module never sees the
 * daemon's own structures (daemon.h).
 */
struct pgd_stats_setup {
	const struct pgd_config *cfg;
	const struct pg_model *m;
	const struct pg_forward *fw;
	const struct pg_engine *engine;
	uint64_t generation;		/* the daemon's, per start */
	int max_prompt, max_tokens;	/* the limits as enforced at start */
	struct pgd_stats_admin admin;
};

/*
 * A request's part that the statistics keep, embedded in the daemon's
 * request (struct pgd_req) and zeroed with it: whose it is, and when each
 * sample's last token came.  The daemon sets slot and id.
 */
struct pgd_stats_req {
	uint32_t slot;			/* its client's slot and id */
	uint32_t id;
	double t_tok[PGD_STATS_MAX_SAMPLES];	/* monotonic seconds; 0: none yet */
};

/*
 * The daemon as one publication shows it, gathered by the caller
 * (control.c) at that moment.
 */
struct pgd_stats_view {
	int draining;			/* GENERATE is refused */
	int clients;			/* connected */
	uint64_t inflight;		/* GENERATE requests of all clients */
	uint64_t serial;		/* the daemon's connection counter: any
					   connection since the last publication
					   changes it */
};

/* A client in the per-client table, as the caller gives it. */
struct pgd_stats_conn {
	uint32_t id;			/* unique for the daemon's life */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	double since;			/* monotonic seconds at connection */
	int inflight;			/* its GENERATE requests */
};

/*
 * pgd_stats_open - create the segment (su->cfg->stats_path, or beside the
 * client socket when NULL; "none": no statistics, *out NULL) and publish
 * it once.  Returns 0, or -1 with a message in err (another live daemon
 * publishes there, the directory cannot be written ...).
 */
int pgd_stats_open(const struct pgd_stats_setup *su, struct pgd_stats **out,
		   char *err, size_t err_len);

/* pgd_stats_close - mark the segment stopped, remove it, free; NULL ok. */
void pgd_stats_close(struct pgd_stats *s);

/*
 * pgd_stats_client_join / _leave - the client `id` connected in `slot`
 * (its figures start afresh; pid names its command) / the client in slot
 * went (events of its requests no longer count for anyone).
 */
void pgd_stats_client_join(struct pgd_stats *s, uint32_t slot, uint32_t id,
			   pid_t pid);
void pgd_stats_client_leave(struct pgd_stats *s, uint32_t slot);

/* pgd_stats_submitted - the GENERATE of r, n_prompt tokens, entered the engine. */
void pgd_stats_submitted(struct pgd_stats *s, const struct pgd_stats_req *r,
			 int n_prompt);

/* pgd_stats_refused - a GENERATE was refused because the daemon drains. */
void pgd_stats_refused(struct pgd_stats *s);

/* pgd_stats_event - an engine event of request r (its client may be gone). */
void pgd_stats_event(struct pgd_stats *s, struct pgd_stats_req *r,
		     const struct pg_engine_event *ev);

/*
 * pgd_stats_step_begin / _end - around pg_engine_step (rc: its result).
 * _end returns 1 when the step left the engine idle: the caller publishes
 * at once (pgd_ctl_publish), before the step's completions reach their
 * clients; 0 otherwise and without statistics.
 */
void pgd_stats_step_begin(struct pgd_stats *s);
int pgd_stats_step_end(struct pgd_stats *s, int rc);

/*
 * pgd_stats_client - the figures of the client `id` in slot: its requests
 * and generated tokens since it connected (or the last reset); zeros
 * without statistics.
 */
void pgd_stats_client(struct pgd_stats *s, uint32_t slot, uint32_t id,
		      uint64_t *requests, uint64_t *tokens);

/* pgd_stats_evicted - an administrator evicted n pages. */
void pgd_stats_evicted(struct pgd_stats *s, int n);

/* pgd_stats_admin_command - an admin command was answered. */
void pgd_stats_admin_command(struct pgd_stats *s);

/*
 * pgd_stats_due - whether to publish now: something changed since the
 * last publication (a figure, or the daemon's clients and serial as given)
 * and (unless force) the period has passed since it, at monotonic `now`.
 * 0 without statistics.
 */
int pgd_stats_due(const struct pgd_stats *s, double now, int clients,
		  uint64_t serial, int force);

/*
 * A publication, in three steps that the caller (control.c) makes in a
 * row: _begin gathers the engine's and devices' figures and writes the
 * public segment with v; _client writes the per-client table's slot
 * (conn NULL: the slot is free), for every slot in order; _end closes
 * the table and remembers `at` (monotonic seconds) as the publication's
 * time.  Nothing without statistics.
 */
void pgd_stats_publish_begin(struct pgd_stats *s, const struct pgd_stats_view *v);
void pgd_stats_publish_client(struct pgd_stats *s, uint32_t slot,
			      const struct pgd_stats_conn *conn);
void pgd_stats_publish_end(struct pgd_stats *s, double at);

/*
 * pgd_stats_reset - zero counters and histograms (gauges stay); the
 * caller publishes next.
 */
void pgd_stats_reset(struct pgd_stats *s);

/*
 * pgd_stats_engine_errors - forward-pass failures in the last `window_s`
 * seconds, and the time since the last one (-1: none ever).
 */
int pgd_stats_engine_errors(const struct pgd_stats *s, double window_s,
			    double *since_last);

#endif
