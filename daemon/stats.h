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
 */
#ifndef PAGODA_DAEMON_STATS_H
#define PAGODA_DAEMON_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pgd;
struct pgd_client;
struct pgd_req;
struct pgd_stats;
struct pg_engine_event;

/* The default publication period while busy, in milliseconds. */
#define PGD_STATS_INTERVAL_MS 100

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
 * pgd_stats_open - create the segment (cfg->stats_path, or beside the
 * client socket when NULL; "none": no statistics) and set d->stats.  The
 * model, plan and forward pass must be in d; adm says what the figures
 * show of the admin socket.  Returns 0, or -1 with a message in err
 * (another live daemon publishes there, the directory cannot be written
 * ...).
 */
int pgd_stats_open(struct pgd *d, const struct pgd_stats_admin *adm, char *err,
		   size_t err_len);

/* pgd_stats_close - mark the segment stopped, remove it, free; NULL ok. */
void pgd_stats_close(struct pgd *d);

/* pgd_stats_submitted - c's GENERATE of n_prompt tokens entered the engine. */
void pgd_stats_submitted(struct pgd_stats *s, const struct pgd_client *c,
			 int n_prompt);

/* pgd_stats_refused - a GENERATE was refused because the daemon drains. */
void pgd_stats_refused(struct pgd_stats *s);

/* pgd_stats_event - an engine event of request r (its client may be gone). */
void pgd_stats_event(struct pgd_stats *s, struct pgd_req *r,
		     const struct pg_engine_event *ev);

/* pgd_stats_step_begin / _end - around pg_engine_step (rc: its result). */
void pgd_stats_step_begin(struct pgd_stats *s);
void pgd_stats_step_end(struct pgd *d, int rc);

/*
 * pgd_stats_client - c's requests and generated tokens since it connected
 * (or the last reset); zeros without statistics.
 */
void pgd_stats_client(struct pgd_stats *s, const struct pgd_client *c,
		      uint64_t *requests, uint64_t *tokens);

/* pgd_stats_evicted - an administrator evicted n pages. */
void pgd_stats_evicted(struct pgd_stats *s, int n);

/* pgd_stats_admin_command - an admin command was answered. */
void pgd_stats_admin_command(struct pgd_stats *s);

/*
 * pgd_stats_tick - publish when the period has passed and something
 * changed, or (force) whenever something changed: the loop forces it
 * before it sleeps, so an idle daemon's figures are final.
 */
void pgd_stats_tick(struct pgd *d, int force);

/* pgd_stats_reset - zero counters and histograms (gauges stay). */
void pgd_stats_reset(struct pgd *d);

/*
 * pgd_stats_engine_errors - forward-pass failures in the last `window_s`
 * seconds, and the time since the last one (-1: none ever).
 */
int pgd_stats_engine_errors(const struct pgd_stats *s, double window_s,
			    double *since_last);

#endif
