/*
 * ctl.h - pagodactl's parts: reading the statistics segment
 * (ctl_stats.c), showing it (stats, metrics, top) and the admin socket's
 * client (ctl_admin.c).  pagodactl links shm/ and libc only: never the
 * engine, never libpagoda.
 */
#ifndef PAGODA_CLIENT_CTL_H
#define PAGODA_CLIENT_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shm/stats.h"

/* Exit statuses (pagodactl(8)). */
enum {
	CTL_OK = 0,
	CTL_FAIL = 1,		/* refused or failed; health: unhealthy */
	CTL_USAGE = 2,
	CTL_DOWN = 3,		/* pagodad is not running or not reachable */
	CTL_DENIED = 4,		/* permission denied */
};

struct ctl_opts {
	const char *stats_path;
	const char *admin_socket;
	int json;
	double interval_s;	/* stats: rates over this; top: refresh */
	int interval_given;
	int once;		/* top: one frame */
	int wait;		/* drain --wait */
	double timeout_s;	/* admin: 0 = none */
};

/* The mapped segment, read-only. */
struct ctl_seg {
	const char *path;
	int fd;
	const uint8_t *map;
	size_t bytes;
};

/* A consistent private copy of the segment. */
struct ctl_snap {
	uint8_t *buf;			/* (bytes) */
	size_t bytes;
	const struct pg_stats_header *h;
	const struct pg_stats_device *dev;	/* (h->n_devices) */
	const struct pg_stats_client *cli;	/* (h->n_client_slots) */
	const struct pg_stats_hist *hist;	/* (PG_STATS_N_HIST) */
	int64_t read_unix_ns;		/* when it was copied */
};

/*
 * ctl_seg_open - open and map path read-only and check its header.
 * Returns CTL_OK, or CTL_DOWN / CTL_DENIED / CTL_FAIL with a message in
 * err that says what to do.
 */
int ctl_seg_open(const char *path, struct ctl_seg *seg, char *err, size_t err_len);
void ctl_seg_close(struct ctl_seg *seg);

/*
 * ctl_seg_read - copy the segment under its seqlock into snap (freeing
 * what snap held) and check that the daemon that writes it is alive.
 * Returns CTL_OK or CTL_DOWN / CTL_FAIL with a message.
 */
int ctl_seg_read(const struct ctl_seg *seg, struct ctl_snap *snap, char *err,
		 size_t err_len);
void ctl_snap_free(struct ctl_snap *snap);

/* ---- figures derived from snapshots ---- */

/* The quantile q (0..1) of histogram h in seconds (0 when empty). */
double ctl_hist_quantile(const struct pg_stats_header *hd,
			 const struct pg_stats_hist *h, double q);

/* Seconds since the daemon started (or its counters were reset), now. */
double ctl_counting_s(const struct ctl_snap *s);

/*
 * Rates between two snapshots of one daemon (prev may be NULL: since
 * start or the last reset).
 */
struct ctl_rates {
	double interval_s;
	double requests, prompt_tokens, generated_tokens, forward_tokens, steps;
};
void ctl_rates(const struct ctl_snap *prev, const struct ctl_snap *cur,
	       struct ctl_rates *r);

/* Names of the histograms and states, for output. */
extern const char *const ctl_hist_names[PG_STATS_N_HIST];
extern const char *const ctl_hist_titles[PG_STATS_N_HIST];
const char *ctl_state_name(uint32_t state);

/* Human-readable durations ("1h02m", "250 ms"), into buf. */
const char *ctl_fmt_dur(double s, char *buf, size_t len);
const char *ctl_fmt_bytes(double b, char *buf, size_t len);

/* A JSON string value, quotes included. */
void ctl_json_str(FILE *f, const char *s);

/* ---- commands ---- */

int ctl_cmd_stats(const struct ctl_opts *o);
int ctl_cmd_metrics(const struct ctl_opts *o);
int ctl_cmd_top(const struct ctl_opts *o);

/* ctl_stats_print - the stats text (top reuses parts); rates may be NULL. */
void ctl_print_stats(FILE *f, const struct ctl_snap *s, const struct ctl_rates *r);
void ctl_print_stats_json(FILE *f, const struct ctl_snap *s, const struct ctl_rates *r);

/*
 * ctl_admin - send one admin request (shm/admin.h) and print the answer.
 * Returns the exit status.
 */
struct pg_admin_request;
int ctl_admin(const struct ctl_opts *o, struct pg_admin_request *q);

#endif
