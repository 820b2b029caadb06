/*
 * ctl.h - pagodactl's parts: reading the statistics segments
 * (ctl_stats.c), showing them (stats, metrics, top) and the admin
 * socket's client (ctl_admin.c).  pagodactl includes wire/ and common/
 * and links libc only: never the engine, never libpagoda.
 *
 * Every string pagodactl shows that it did not write itself (a client's
 * command name, the model's name, the daemon's answers) goes through
 * common/escape.h on its way out: ctl_shown, ctl_put_escaped,
 * ctl_put_safe.
 */
#ifndef PAGODA_CLIENT_CTL_CTL_H
#define PAGODA_CLIENT_CTL_CTL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wire/stats_layout.h"

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

/*
 * The mapped segments, read-only: the public figures, and the per-client
 * table when this user may read it (cli_map NULL and cli_note saying why
 * not otherwise).
 */
struct ctl_seg {
	const char *path;
	int fd;
	const uint8_t *map;
	size_t bytes;
	char cli_path[PATH_MAX];
	int cli_fd;
	const uint8_t *cli_map;
	size_t cli_bytes;
	char cli_note[512];
};

/* A consistent private copy of the segments. */
struct ctl_snap {
	uint8_t *buf;			/* (bytes) */
	size_t bytes;
	const struct pg_stats_header *h;
	const struct pg_stats_device *dev;	/* (h->n_devices) */
	const struct pg_stats_hist *hist;	/* (PG_STATS_N_HIST) */
	uint8_t *cli_buf;		/* the per-client table's copy */
	const struct pg_stats_client *cli;	/* (n_cli); NULL: not shown */
	uint32_t n_cli;
	char cli_note[512];		/* why cli is NULL ("" otherwise) */
	int64_t read_unix_ns;		/* when it was copied */
};

/*
 * ctl_seg_open - open and map path read-only and check its header, then
 * the per-client table beside it (pg_stats_clients_path) when this user
 * may read it; when not, seg->cli_note says who may.  Returns CTL_OK, or
 * CTL_DOWN / CTL_DENIED / CTL_FAIL with a message in err that says what
 * to do (about the public file: the per-client table is never needed).
 */
int ctl_seg_open(const char *path, struct ctl_seg *seg, char *err, size_t err_len);
void ctl_seg_close(struct ctl_seg *seg);

/*
 * ctl_seg_read - copy the segments under their seqlocks into snap
 * (freeing what snap held) and check that the daemon that writes them
 * is alive and that the per-client table is its own.  Returns CTL_OK or
 * CTL_DOWN / CTL_FAIL with a message; without the per-client table
 * snap->cli is NULL and snap->cli_note says why.
 */
int ctl_seg_read(const struct ctl_seg *seg, struct ctl_snap *snap, char *err,
		 size_t err_len);
void ctl_snap_free(struct ctl_snap *snap);

/* ---- figures derived from snapshots ---- */

/* The quantile q (0..1) of histogram h in seconds (0 when empty). */
double ctl_hist_quantile(const struct pg_stats_header *hd,
			 const struct pg_stats_hist *h, double q);

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

/* The name of a state, for output. */
const char *ctl_state_name(uint32_t state);

/* Human-readable durations ("1h02m", "250 ms"), into buf. */
const char *ctl_fmt_dur(double s, char *buf, size_t len);
const char *ctl_fmt_bytes(double b, char *buf, size_t len);

/*
 * ctl_shown - s (at most max bytes, or to its NUL) escaped for a
 * terminal (PG_ESCAPE_TEXT: controls as \xNN, \ as \\) into buf; returns
 * buf, cut at a whole escape when len is short.
 */
const char *ctl_shown(char *buf, size_t len, const char *s, size_t max);

/* ctl_put_escaped - s (max bytes at most) escaped in mode onto f. */
void ctl_put_escaped(FILE *f, const char *s, size_t max, int mode);

/*
 * ctl_put_safe - text the daemon wrote (an admin answer: already escaped
 * by it) onto f with only what a terminal would obey neutralised: json
 * picks \u escapes, else \xNN.  Newlines, \ and " pass.
 */
void ctl_put_safe(FILE *f, const char *s, size_t len, int json);

/* ---- commands ---- */

int ctl_cmd_stats(const struct ctl_opts *o);
int ctl_cmd_metrics(const struct ctl_opts *o);

/*
 * ctl_metrics_write - every family of `pagodactl metrics` for snapshot s,
 * in the Prometheus text format, to f (pagoda-http's /metrics uses it
 * too).  Returns 0, or -1 when writing to f failed.
 */
int ctl_metrics_write(FILE *f, const struct ctl_snap *s);
int ctl_cmd_top(const struct ctl_opts *o);

/*
 * ctl_admin - send one admin request (wire/admin_proto.h) and print the
 * answer.  Returns the exit status.
 */
struct pg_admin_request;
int ctl_admin(const struct ctl_opts *o, struct pg_admin_request *q);

#endif
