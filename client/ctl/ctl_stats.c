/*
 * ctl_stats.c - pagodactl's reading of the statistics segments
 * (wire/stats_layout.h) and `pagodactl stats`: a table for people, or one
 * JSON object for scripts.
 *
 * Reading never asks the daemon anything: the segments are mapped
 * read-only and copied under their seqlocks (retrying while the daemon
 * writes), then checked against a live daemon (its pid, and the pid's
 * start time, so a recycled pid is not mistaken for it).  The public
 * figures are everyone's; the per-client table is read when this user
 * may (the admin group), and otherwise replaced by a note saying who
 * may.  Strings from the files are shown escaped (common/escape.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl/ctl.h"
#include "common/escape.h"

/* Copies a reader tries while the daemon keeps writing. */
#define READ_TRIES 100000

/* Names of the histograms, for JSON and for text. */
static const char *const ctl_hist_names[PG_STATS_N_HIST] = {
	"time_to_first_token", "inter_token_latency", "queue_time",
	"request_latency", "step_time",
};

static const char *const ctl_hist_titles[PG_STATS_N_HIST] = {
	"time to first token", "inter-token latency", "queue time",
	"request latency", "engine step",
};

const char *ctl_state_name(uint32_t state)
{
	switch (state) {
	case PG_STATS_STARTING: return "starting";
	case PG_STATS_SERVING: return "serving";
	case PG_STATS_DRAINING: return "draining";
	case PG_STATS_STOPPED: return "stopped";
	}
	return "unknown";
}

static int64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the segment ---- */

static int open_error(const char *path, int err_no, char *err, size_t err_len)
{
	struct stat st;
	struct group *g;

	if (err_no == ENOENT) {
		snprintf(err, err_len, "pagodad is not running: there are no statistics at %s (start pagodad, or give the daemon's --stats-path / --socket)",
			 path);
		return CTL_DOWN;
	}
	if (err_no == EACCES && !stat(path, &st) && (g = getgrgid(st.st_gid)))
		snprintf(err, err_len, "permission denied reading %s: it is readable by the group '%s' (join it, then log in again)",
			 path, g->gr_name);
	else
		snprintf(err, err_len, "cannot open %s: %s", path, strerror(err_no));
	return err_no == EACCES ? CTL_DENIED : CTL_FAIL;
}

static int check_layout(const struct pg_stats_header *h, size_t bytes,
			const char *path, char *err, size_t err_len)
{
	if (h->magic != PG_STATS_MAGIC) {
		snprintf(err, err_len, "%s is not a pagodad statistics file", path);
		return CTL_FAIL;
	}
	if (h->version != PG_STATS_VERSION) {
		snprintf(err, err_len, "%s holds statistics of version %u; this pagodactl reads version %u (use the pagodactl of the running pagoda)",
			 path, h->version, PG_STATS_VERSION);
		return CTL_FAIL;
	}
	if (h->header_bytes != PG_STATS_HEADER_BYTES || h->total_bytes != bytes ||
	    h->n_hist != PG_STATS_N_HIST || h->n_buckets != PG_STATS_N_BUCKETS ||
	    h->dev_off < PG_STATS_HEADER_BYTES ||
	    (uint64_t)h->dev_off + (uint64_t)h->n_devices * sizeof(struct pg_stats_device) > bytes ||
	    (uint64_t)h->hist_off + PG_STATS_N_HIST * sizeof(struct pg_stats_hist) > bytes ||
	    h->dev_off % 8 || h->hist_off % 8) {
		snprintf(err, err_len, "%s: the layout in its header does not fit the file", path);
		return CTL_FAIL;
	}
	return CTL_OK;
}

/* Why this user may not read the per-client table at path (errno e). */
static void cli_denied(struct ctl_seg *seg, int e)
{
	struct stat st;
	struct group *g;

	if (e == ENOENT)
		snprintf(seg->cli_note, sizeof(seg->cli_note), "no per-client table at %.300s",
			 seg->cli_path);
	else if (e != EACCES)
		snprintf(seg->cli_note, sizeof(seg->cli_note), "the per-client table %.300s: %s",
			 seg->cli_path, strerror(e));
	else if (!stat(seg->cli_path, &st) && (st.st_mode & 0040) && st.st_gid &&
		 (g = getgrgid(st.st_gid)))
		snprintf(seg->cli_note, sizeof(seg->cli_note), "the per-client table (pid, uid and command of each client) is shown to members of group '%s' only (join it, then log in again)",
			 g->gr_name);
	else
		snprintf(seg->cli_note, sizeof(seg->cli_note), "the per-client table (pid, uid and command of each client) is shown to root and pagodad's user only (the daemon has no admin group: see --admin-group in pagodad(8))");
}

static int cli_layout_ok(const struct pg_stats_clients_header *ch, size_t bytes)
{
	return ch->magic == PG_STATS_CLIENTS_MAGIC && ch->version == PG_STATS_VERSION &&
	       ch->header_bytes == sizeof(*ch) && ch->total_bytes == bytes &&
	       ch->slot_off >= sizeof(*ch) && ch->slot_off % 8 == 0 &&
	       (uint64_t)ch->slot_off + (uint64_t)ch->n_slots * sizeof(struct pg_stats_client) <= bytes;
}

/* The per-client table, when this user may read it; a note when not. */
static void cli_open(struct ctl_seg *seg)
{
	struct pg_stats_clients_header ch;
	struct stat st;

	if (pg_stats_clients_path(seg->path, seg->cli_path, sizeof(seg->cli_path))) {
		snprintf(seg->cli_note, sizeof(seg->cli_note), "the per-client table's path is too long");
		return;
	}
	seg->cli_fd = open(seg->cli_path, O_RDONLY | O_CLOEXEC);
	if (seg->cli_fd < 0) {
		cli_denied(seg, errno);
		return;
	}
	if (fstat(seg->cli_fd, &st) || pread(seg->cli_fd, &ch, sizeof(ch), 0) != (ssize_t)sizeof(ch) ||
	    !cli_layout_ok(&ch, (size_t)st.st_size)) {
		snprintf(seg->cli_note, sizeof(seg->cli_note), "%.300s is not a per-client table of this pagodactl's version",
			 seg->cli_path);
		goto out_close;
	}
	seg->cli_bytes = (size_t)st.st_size;
	seg->cli_map = mmap(NULL, seg->cli_bytes, PROT_READ, MAP_SHARED, seg->cli_fd, 0);
	if (seg->cli_map != MAP_FAILED)
		return;
	snprintf(seg->cli_note, sizeof(seg->cli_note), "cannot map %.300s: %s", seg->cli_path,
		 strerror(errno));
out_close:
	seg->cli_map = NULL;
	close(seg->cli_fd);
	seg->cli_fd = -1;
}

int ctl_seg_open(const char *path, struct ctl_seg *seg, char *err, size_t err_len)
{
	struct pg_stats_header h;
	struct stat st;
	int rc;

	memset(seg, 0, sizeof(*seg));
	seg->path = path;
	seg->cli_fd = -1;
	seg->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (seg->fd < 0)
		return open_error(path, errno, err, err_len);
	if (fstat(seg->fd, &st) || pread(seg->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(err, err_len, "%s is not a pagodad statistics file (too short)", path);
		rc = CTL_FAIL;
		goto out_close;
	}
	rc = check_layout(&h, (size_t)st.st_size, path, err, err_len);
	if (rc)
		goto out_close;
	seg->bytes = (size_t)st.st_size;
	seg->map = mmap(NULL, seg->bytes, PROT_READ, MAP_SHARED, seg->fd, 0);
	if (seg->map == MAP_FAILED) {
		snprintf(err, err_len, "cannot map %s: %s", path, strerror(errno));
		rc = CTL_FAIL;
		goto out_close;
	}
	cli_open(seg);
	return CTL_OK;
out_close:
	close(seg->fd);
	seg->fd = -1;
	seg->map = NULL;
	return rc;
}

void ctl_seg_close(struct ctl_seg *seg)
{
	if (seg->map)
		munmap((void *)seg->map, seg->bytes);
	if (seg->fd >= 0)
		close(seg->fd);
	if (seg->cli_map)
		munmap((void *)seg->cli_map, seg->cli_bytes);
	if (seg->cli_fd >= 0)
		close(seg->cli_fd);
	seg->map = seg->cli_map = NULL;
	seg->fd = seg->cli_fd = -1;
}

void ctl_snap_free(struct ctl_snap *snap)
{
	free(snap->buf);
	free(snap->cli_buf);
	memset(snap, 0, sizeof(*snap));
}

/*
 * Copy bytes of map, whose seqlock is *seq, while no write is under way;
 * -1 when it never settles.
 */
static int copy_consistent(const uint8_t *map, size_t bytes, _Atomic uint64_t *seq,
			   uint8_t *buf)
{
	struct timespec pause = { .tv_nsec = 20000 };

	for (int i = 0; i < READ_TRIES; i++) {
		uint64_t s1 = atomic_load_explicit(seq, memory_order_acquire);

		if (s1 & 1) {
			nanosleep(&pause, NULL);
			continue;
		}
		memcpy(buf, map, bytes);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(seq, memory_order_relaxed) == s1)
			return 0;
	}
	return -1;
}

/* Whether the daemon that wrote h still runs; a message when not. */
static int daemon_alive(const struct pg_stats_header *h, const char *path,
			char *err, size_t err_len)
{
	uint64_t start;

	if (h->state == PG_STATS_STOPPED) {
		snprintf(err, err_len, "pagodad is not running: the daemon (pid %d) that wrote %s has stopped",
			 h->pid, path);
		return 0;
	}
	if (kill(h->pid, 0) && errno == ESRCH) {
		snprintf(err, err_len, "pagodad is not running: %s was left by pid %d, which has died (restart pagodad)",
			 path, h->pid);
		return 0;
	}
	start = pg_stats_pid_start(h->pid);
	if (start && h->pid_start_ticks && start != h->pid_start_ticks) {
		snprintf(err, err_len, "pagodad is not running: %s was left by pid %d, which has died (the pid is another process's now)",
			 path, h->pid);
		return 0;
	}
	return 1;
}

/* The header's strings end within their fields, whoever wrote the file. */
static void terminate_strings(struct pg_stats_header *h)
{
	h->model[sizeof(h->model) - 1] = '\0';
	h->arch[sizeof(h->arch) - 1] = '\0';
	h->model_path[sizeof(h->model_path) - 1] = '\0';
	h->plan[sizeof(h->plan) - 1] = '\0';
	h->isa[sizeof(h->isa) - 1] = '\0';
	h->socket[sizeof(h->socket) - 1] = '\0';
	h->admin_socket[sizeof(h->admin_socket) - 1] = '\0';
	h->admin_group[sizeof(h->admin_group) - 1] = '\0';
}

/*
 * The per-client table of the daemon whose header is h into snap, or a
 * note in snap->cli_note saying why there is none.
 */
static void cli_read(const struct ctl_seg *seg, const struct pg_stats_header *h,
		     struct ctl_snap *snap)
{
	const struct pg_stats_clients_header *ch;
	uint8_t *buf;

	if (!seg->cli_map) {
		snprintf(snap->cli_note, sizeof(snap->cli_note), "%s", seg->cli_note);
		return;
	}
	buf = malloc(seg->cli_bytes);
	if (!buf) {
		snprintf(snap->cli_note, sizeof(snap->cli_note), "out of memory for the per-client table");
		return;
	}
	ch = (const struct pg_stats_clients_header *)seg->cli_map;
	if (copy_consistent(seg->cli_map, seg->cli_bytes,
			    &((struct pg_stats_clients_header *)ch)->seq, buf)) {
		snprintf(snap->cli_note, sizeof(snap->cli_note), "%.300s never held still", seg->cli_path);
		free(buf);
		return;
	}
	ch = (const struct pg_stats_clients_header *)buf;
	if (!cli_layout_ok(ch, seg->cli_bytes) || ch->generation != h->generation ||
	    ch->pid != h->pid) {
		snprintf(snap->cli_note, sizeof(snap->cli_note), "%.200s is not the per-client table of the daemon (pid %d) that writes %.200s",
			 seg->cli_path, h->pid, seg->path);
		free(buf);
		return;
	}
	snap->cli_buf = buf;
	snap->cli = (const struct pg_stats_client *)(buf + ch->slot_off);
	snap->n_cli = ch->n_slots;
}

int ctl_seg_read(const struct ctl_seg *seg, struct ctl_snap *snap, char *err,
		 size_t err_len)
{
	const struct pg_stats_header *h;
	uint8_t *buf = malloc(seg->bytes);

	if (!buf) {
		snprintf(err, err_len, "out of memory");
		return CTL_FAIL;
	}
	if (copy_consistent(seg->map, seg->bytes,
			    &((struct pg_stats_header *)seg->map)->seq, buf)) {
		free(buf);
		snprintf(err, err_len, "%s never held still: the daemon writes it without pause", seg->path);
		return CTL_FAIL;
	}
	h = (const struct pg_stats_header *)buf;
	if (check_layout(h, seg->bytes, seg->path, err, err_len)) {
		free(buf);
		return CTL_FAIL;
	}
	if (!daemon_alive(h, seg->path, err, err_len)) {
		free(buf);
		return CTL_DOWN;
	}
	terminate_strings((struct pg_stats_header *)buf);
	ctl_snap_free(snap);
	snap->buf = buf;
	snap->bytes = seg->bytes;
	snap->h = h;
	snap->dev = (const struct pg_stats_device *)(buf + h->dev_off);
	snap->hist = (const struct pg_stats_hist *)(buf + h->hist_off);
	cli_read(seg, h, snap);
	snap->read_unix_ns = unix_ns();
	return CTL_OK;
}

/* ---- derived figures ---- */

double ctl_hist_quantile(const struct pg_stats_header *hd,
			 const struct pg_stats_hist *h, double q)
{
	double want = q * (double)h->count, seen = 0, lo = 0;

	if (!h->count)
		return 0;
	for (int i = 0; i < PG_STATS_N_BUCKETS; i++) {
		double n = (double)h->bucket[i];
		double hi = i < PG_STATS_N_BUCKETS - 1 ? hd->bucket_le_ns[i] * 1e-9 : lo;

		if (n > 0 && seen + n >= want)
			return lo + (hi - lo) * ((want - seen) / n);
		seen += n;
		lo = hi;
	}
	return lo;
}

/* Seconds since the daemon started (or its counters were reset), now. */
static double ctl_counting_s(const struct ctl_snap *s)
{
	double up = (double)(s->read_unix_ns - s->h->start_unix_ns) * 1e-9;
	double reset = (double)s->h->reset_uptime_ns * 1e-9;

	return up - reset > 0 ? up - reset : 0;
}

void ctl_rates(const struct ctl_snap *prev, const struct ctl_snap *cur,
	       struct ctl_rates *r)
{
	const struct pg_stats_counters *c = &cur->h->c, *p = NULL;
	double dt;

	memset(r, 0, sizeof(*r));
	if (prev && prev->h->generation == cur->h->generation &&
	    prev->h->reset_uptime_ns == cur->h->reset_uptime_ns) {
		p = &prev->h->c;
		dt = (double)(cur->read_unix_ns - prev->read_unix_ns) * 1e-9;
	} else {
		dt = ctl_counting_s(cur);
	}
	r->interval_s = dt;
	if (dt <= 0)
		return;
#define RATE(field) ((double)(c->field - (p ? p->field : 0)) / dt)
	r->requests = RATE(requests_done);
	r->prompt_tokens = RATE(prompt_tokens);
	r->generated_tokens = RATE(generated_tokens);
	r->forward_tokens = RATE(forward_tokens);
	r->steps = RATE(steps);
#undef RATE
}

const char *ctl_fmt_dur(double s, char *buf, size_t len)
{
	long t = (long)s;

	if (s < 1e-3)
		snprintf(buf, len, "%.0f us", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.1f ms", s * 1e3);
	else if (s < 60)
		snprintf(buf, len, "%.2f s", s);
	else if (s < 3600)
		snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
	else if (s < 86400)
		snprintf(buf, len, "%ldh%02ldm", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, len, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
	return buf;
}

const char *ctl_fmt_bytes(double b, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
	return buf;
}

/* ---- strings from elsewhere ---- */

const char *ctl_shown(char *buf, size_t len, const char *s, size_t max)
{
	pg_escape_str(buf, len, s, max, PG_ESCAPE_TEXT);
	return buf;
}

void ctl_put_escaped(FILE *f, const char *s, size_t max, int mode)
{
	pg_escape_fput(f, s, strnlen(s, max), mode);
}

/* A JSON string value, quotes included (max bytes of s at most). */
static void ctl_json_str(FILE *f, const char *s, size_t max)
{
	fputc('"', f);
	ctl_put_escaped(f, s, max, PG_ESCAPE_JSON);
	fputc('"', f);
}

void ctl_put_safe(FILE *f, const char *s, size_t len, int json)
{
	int mode = (json ? PG_ESCAPE_JSON : PG_ESCAPE_TEXT) | PG_ESCAPE_F_KEEP;

	pg_escape_fput(f, s, len, mode);
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

/* ---- text ---- */

static void print_head(FILE *f, const struct ctl_snap *s)
{
	const struct pg_stats_header *h = s->h;
	char up[32], b1[sizeof(h->model_path) * 4], b2[sizeof(h->plan) * 4];

	fprintf(f, "pagodad %d %s %s", h->pid, ctl_state_name(h->state),
		ctl_shown(b1, sizeof(b1), h->model, sizeof(h->model)));
	fprintf(f, " (%s, %u blocks, vocabulary %u), up %s\n",
		ctl_shown(b2, sizeof(b2), h->arch, sizeof(h->arch)), h->n_blocks, h->n_vocab,
		ctl_fmt_dur((double)(s->read_unix_ns - h->start_unix_ns) * 1e-9, up, sizeof(up)));
	fprintf(f, "  model        %s\n", ctl_shown(b1, sizeof(b1), h->model_path, sizeof(h->model_path)));
	fprintf(f, "  plan         pipeline %u x tensor %u x context %u, %u devices, %u threads (%s)",
		h->pp, h->tp, h->cp, h->n_devices, h->n_threads,
		ctl_shown(b1, sizeof(b1), h->isa, sizeof(h->isa)));
	fprintf(f, "%s%s\n", h->plan[0] ? ": " : "", ctl_shown(b2, sizeof(b2), h->plan, sizeof(h->plan)));
	if (h->reset_uptime_ns)
		fprintf(f, "  counters     since a reset %s ago\n",
			ctl_fmt_dur(ctl_counting_s(s), up, sizeof(up)));
}

static void print_counts(FILE *f, const struct ctl_snap *s, const struct ctl_rates *r)
{
	const struct pg_stats_counters *c = &s->h->c;
	const struct pg_stats_header *h = s->h;
	uint64_t slots = c->kv_used * h->page_tokens;

	fprintf(f, "requests       %llu running, %llu waiting (sequences); %llu in flight\n",
		(unsigned long long)c->seqs_running, (unsigned long long)c->seqs_waiting,
		(unsigned long long)c->requests_inflight);
	fprintf(f, "               %llu submitted, %llu done, %llu failed, %llu cancelled, %llu refused while draining\n",
		(unsigned long long)c->requests_submitted, (unsigned long long)c->requests_done,
		(unsigned long long)c->requests_failed, (unsigned long long)c->requests_cancelled,
		(unsigned long long)c->requests_refused);
	fprintf(f, "tokens         %llu prompt (%llu cached, %.1f%%), %llu generated, %llu through the forward pass\n",
		(unsigned long long)c->prompt_tokens, (unsigned long long)c->cached_tokens,
		pct(c->cached_tokens, c->prompt_tokens), (unsigned long long)c->generated_tokens,
		(unsigned long long)c->forward_tokens);
	if (r)
		fprintf(f, "rates          %.1f requests/s, %.1f prompt tokens/s, %.1f generated tokens/s, %.1f steps/s (over %.1f s)\n",
			r->requests, r->prompt_tokens, r->generated_tokens, r->steps, r->interval_s);
	fprintf(f, "KV pool        %llu pages of %u tokens: %llu used (%.1f%%), %llu cached, %llu free\n",
		(unsigned long long)c->kv_pages, h->page_tokens, (unsigned long long)c->kv_used,
		pct(c->kv_used, c->kv_pages), (unsigned long long)c->kv_cached,
		(unsigned long long)c->kv_free);
	fprintf(f, "               %llu token slots written in used pages, waste %llu (%.1f%% of their slots)\n",
		(unsigned long long)c->kv_slots_used, (unsigned long long)c->kv_slots_waste,
		pct(c->kv_slots_waste, slots));
	fprintf(f, "prefix cache   %llu lookups: %llu pages hit, %llu of %llu tokens (%.1f%%); %llu pages evicted (%llu by pagodactl); %llu copies on write\n",
		(unsigned long long)c->prefix_queries, (unsigned long long)c->prefix_hit_pages,
		(unsigned long long)c->prefix_hit_tokens, (unsigned long long)c->prefix_query_tokens,
		pct(c->prefix_hit_tokens, c->prefix_query_tokens),
		(unsigned long long)c->prefix_evictions, (unsigned long long)c->admin_evicted_pages,
		(unsigned long long)c->cow_copies);
	fprintf(f, "engine         %llu steps, %llu failed; %llu preemptions\n",
		(unsigned long long)c->steps, (unsigned long long)c->step_errors,
		(unsigned long long)c->preemptions);
	fprintf(f, "grammars       %llu samples constrained, %llu ended with no token allowed (finish grammar)\n",
		(unsigned long long)c->grammar_samples, (unsigned long long)c->grammar_failures);
}

static void print_devices(FILE *f, const struct ctl_snap *s)
{
	char b1[32], b2[32], b3[32], b4[32], b5[32];

	fprintf(f, "devices        %-8s %5s %3s %3s %7s %8s %10s %10s %6s %10s %10s %8s %12s %12s\n",
		"DEVICE", "STAGE", "TP", "CP", "BLOCKS", "STEPS", "COMPUTE", "COMM", "COMM%",
		"SENT", "COLLECTIVES", "SENDS", "COMPUTE/STEP", "COMM/STEP");
	for (uint32_t i = 0; i < s->h->n_devices; i++) {
		const struct pg_stats_device *d = &s->dev[i];
		double steps = d->steps ? (double)d->steps : 1;
		char blocks[16], name[sizeof(d->name) * 4 + 1];

		snprintf(blocks, sizeof(blocks), "%d-%d", d->first_block, d->first_block + d->n_blocks - 1);
		fprintf(f, "               %-8s %5d %3d %3d %7s %8llu %10s %10s %5.1f%% %10s %10llu %8llu %12s %12s\n",
			ctl_shown(name, sizeof(name), d->name, sizeof(d->name)),
			d->stage, d->tp_rank, d->cp_rank, blocks,
			(unsigned long long)d->steps,
			ctl_fmt_dur((double)d->compute_ns * 1e-9, b1, sizeof(b1)),
			ctl_fmt_dur((double)d->comm_ns * 1e-9, b2, sizeof(b2)),
			pct(d->comm_ns, d->busy_ns),
			ctl_fmt_bytes((double)d->bytes_sent, b3, sizeof(b3)),
			(unsigned long long)(d->n_all_reduce + d->n_all_gather),
			(unsigned long long)d->n_send,
			ctl_fmt_dur((double)d->compute_ns * 1e-9 / steps, b4, sizeof(b4)),
			ctl_fmt_dur((double)d->comm_ns * 1e-9 / steps, b5, sizeof(b5)));
	}
}

static void print_latency(FILE *f, const struct ctl_snap *s)
{
	char m[24], p50[24], p90[24], p99[24];

	fprintf(f, "latency        %-20s %10s %10s %10s %10s %10s\n", "", "COUNT", "MEAN",
		"P50", "P90", "P99");
	for (int i = 0; i < PG_STATS_N_HIST; i++) {
		const struct pg_stats_hist *hh = &s->hist[i];
		double mean = hh->count ? (double)hh->sum_ns * 1e-9 / (double)hh->count : 0;

		fprintf(f, "               %-20s %10llu %10s %10s %10s %10s\n", ctl_hist_titles[i],
			(unsigned long long)hh->count, ctl_fmt_dur(mean, m, sizeof(m)),
			ctl_fmt_dur(ctl_hist_quantile(s->h, hh, 0.50), p50, sizeof(p50)),
			ctl_fmt_dur(ctl_hist_quantile(s->h, hh, 0.90), p90, sizeof(p90)),
			ctl_fmt_dur(ctl_hist_quantile(s->h, hh, 0.99), p99, sizeof(p99)));
	}
}

static void print_clients(FILE *f, const struct ctl_snap *s)
{
	fprintf(f, "clients        %llu connected (at most %u)\n",
		(unsigned long long)s->h->c.clients_connected, s->h->max_clients);
	if (!s->cli) {
		fprintf(f, "               %s\n", s->cli_note);
		return;
	}
	if (!s->h->c.clients_connected)
		return;
	fprintf(f, "               %6s %8s %6s %-15s %8s %9s %9s %10s %10s\n", "ID", "PID",
		"UID", "COMMAND", "INFLIGHT", "REQUESTS", "DONE", "PROMPT", "GENERATED");
	for (uint32_t i = 0; i < s->n_cli; i++) {
		const struct pg_stats_client *c = &s->cli[i];
		char comm[sizeof(c->comm) * 4 + 1];

		if (!c->id)
			continue;
		ctl_shown(comm, sizeof(comm), c->comm, sizeof(c->comm));
		fprintf(f, "               %6u %8d %6u %-15s %8llu %9llu %9llu %10llu %10llu\n",
			c->id, c->pid, c->uid, comm[0] ? comm : "?",
			(unsigned long long)c->inflight, (unsigned long long)c->requests,
			(unsigned long long)c->done, (unsigned long long)c->prompt_tokens,
			(unsigned long long)c->generated_tokens);
	}
}

/* The stats text; rates may be NULL. */
static void ctl_print_stats(FILE *f, const struct ctl_snap *s, const struct ctl_rates *r)
{
	print_head(f, s);
	print_counts(f, s, r);
	print_devices(f, s);
	print_latency(f, s);
	print_clients(f, s);
}

/* ---- JSON ---- */

#define JU(name, v) fprintf(f, "\"%s\":%llu", name, (unsigned long long)(v))

static void json_counts(FILE *f, const struct pg_stats_counters *c)
{
	fprintf(f, "\"requests\":{");
	JU("running", c->seqs_running); fputc(',', f);
	JU("waiting", c->seqs_waiting); fputc(',', f);
	JU("inflight", c->requests_inflight); fputc(',', f);
	JU("submitted", c->requests_submitted); fputc(',', f);
	JU("done", c->requests_done); fputc(',', f);
	JU("failed", c->requests_failed); fputc(',', f);
	JU("cancelled", c->requests_cancelled); fputc(',', f);
	JU("refused", c->requests_refused);
	fprintf(f, "},\"tokens\":{");
	JU("prompt", c->prompt_tokens); fputc(',', f);
	JU("cached", c->cached_tokens); fputc(',', f);
	JU("generated", c->generated_tokens); fputc(',', f);
	JU("forward", c->forward_tokens);
	fprintf(f, "},\"kv\":{");
	JU("pages", c->kv_pages); fputc(',', f);
	JU("used", c->kv_used); fputc(',', f);
	JU("cached", c->kv_cached); fputc(',', f);
	JU("free", c->kv_free); fputc(',', f);
	JU("slots_used", c->kv_slots_used); fputc(',', f);
	JU("waste", c->kv_slots_waste);
	fprintf(f, ",\"usage_ratio\":%.6f},\"prefix_cache\":{",
		c->kv_pages ? (double)c->kv_used / (double)c->kv_pages : 0.0);
	JU("queries", c->prefix_queries); fputc(',', f);
	JU("query_tokens", c->prefix_query_tokens); fputc(',', f);
	JU("hit_pages", c->prefix_hit_pages); fputc(',', f);
	JU("hit_tokens", c->prefix_hit_tokens); fputc(',', f);
	JU("evictions", c->prefix_evictions); fputc(',', f);
	JU("admin_evictions", c->admin_evicted_pages); fputc(',', f);
	JU("cow_copies", c->cow_copies);
	fprintf(f, ",\"hit_rate\":%.6f},\"engine\":{",
		c->prefix_query_tokens ? (double)c->prefix_hit_tokens / (double)c->prefix_query_tokens : 0.0);
	JU("steps", c->steps); fputc(',', f);
	JU("step_errors", c->step_errors); fputc(',', f);
	JU("preemptions", c->preemptions);
	fprintf(f, "},\"grammar\":{");
	JU("samples", c->grammar_samples); fputc(',', f);
	JU("failures", c->grammar_failures);
	fprintf(f, "},");
	JU("clients_connected", c->clients_connected); fputc(',', f);
	JU("admin_commands", c->admin_commands);
}

static void json_devices(FILE *f, const struct ctl_snap *s)
{
	fprintf(f, "\"devices\":[");
	for (uint32_t i = 0; i < s->h->n_devices; i++) {
		const struct pg_stats_device *d = &s->dev[i];

		fprintf(f, "%s{\"name\":", i ? "," : "");
		ctl_json_str(f, d->name, sizeof(d->name));
		fprintf(f, ",\"stage\":%d,\"tp_rank\":%d,\"cp_rank\":%d,\"first_block\":%d,\"n_blocks\":%d,",
			d->stage, d->tp_rank, d->cp_rank, d->first_block, d->n_blocks);
		JU("steps", d->steps);
		fprintf(f, ",\"busy_s\":%.9f,\"compute_s\":%.9f,\"comm_s\":%.9f,",
			(double)d->busy_ns * 1e-9, (double)d->compute_ns * 1e-9,
			(double)d->comm_ns * 1e-9);
		JU("bytes_sent", d->bytes_sent); fputc(',', f);
		JU("all_reduce", d->n_all_reduce); fputc(',', f);
		JU("all_gather", d->n_all_gather); fputc(',', f);
		JU("sends", d->n_send); fputc(',', f);
		JU("recvs", d->n_recv);
		fputc('}', f);
	}
	fputc(']', f);
}

static void json_latency(FILE *f, const struct ctl_snap *s)
{
	fprintf(f, "\"latency\":{");
	for (int i = 0; i < PG_STATS_N_HIST; i++) {
		const struct pg_stats_hist *hh = &s->hist[i];

		fprintf(f, "%s\"%s\":{", i ? "," : "", ctl_hist_names[i]);
		JU("count", hh->count);
		fprintf(f, ",\"sum_s\":%.9f,\"mean_s\":%.9f,\"p50_s\":%.9f,\"p90_s\":%.9f,\"p99_s\":%.9f}",
			(double)hh->sum_ns * 1e-9,
			hh->count ? (double)hh->sum_ns * 1e-9 / (double)hh->count : 0.0,
			ctl_hist_quantile(s->h, hh, 0.50), ctl_hist_quantile(s->h, hh, 0.90),
			ctl_hist_quantile(s->h, hh, 0.99));
	}
	fputc('}', f);
}

static void json_clients(FILE *f, const struct ctl_snap *s)
{
	int n = 0;

	if (!s->cli) {
		fprintf(f, "\"clients\":null,\"clients_note\":");
		ctl_json_str(f, s->cli_note, sizeof(s->cli_note));
		return;
	}
	fprintf(f, "\"clients\":[");
	for (uint32_t i = 0; i < s->n_cli; i++) {
		const struct pg_stats_client *c = &s->cli[i];

		if (!c->id)
			continue;
		fprintf(f, "%s{\"id\":%u,\"pid\":%d,\"uid\":%u,\"gid\":%u,\"comm\":", n++ ? "," : "",
			c->id, c->pid, c->uid, c->gid);
		ctl_json_str(f, c->comm, sizeof(c->comm));
		fprintf(f, ",\"connected_unix\":%.3f,", (double)c->connected_unix_ns * 1e-9);
		JU("inflight", c->inflight); fputc(',', f);
		JU("requests", c->requests); fputc(',', f);
		JU("done", c->done); fputc(',', f);
		JU("prompt_tokens", c->prompt_tokens); fputc(',', f);
		JU("generated_tokens", c->generated_tokens);
		fputc('}', f);
	}
	fputc(']', f);
}

static void json_head(FILE *f, const struct ctl_snap *s)
{
	const struct pg_stats_header *h = s->h;

	fprintf(f, "{\"pid\":%d,\"generation\":\"%016llx\",\"state\":\"%s\",\"uptime_s\":%.3f,\"counting_s\":%.3f,\"updates\":%llu,",
		h->pid, (unsigned long long)h->generation, ctl_state_name(h->state),
		(double)(s->read_unix_ns - h->start_unix_ns) * 1e-9, ctl_counting_s(s),
		(unsigned long long)h->n_updates);
	fprintf(f, "\"model\":{\"name\":");
	ctl_json_str(f, h->model, sizeof(h->model));
	fprintf(f, ",\"arch\":");
	ctl_json_str(f, h->arch, sizeof(h->arch));
	fprintf(f, ",\"path\":");
	ctl_json_str(f, h->model_path, sizeof(h->model_path));
	fprintf(f, ",\"n_vocab\":%u,\"n_ctx_train\":%u,\"n_blocks\":%u,\"n_embd\":%u},",
		h->n_vocab, h->n_ctx_train, h->n_blocks, h->n_embd);
	fprintf(f, "\"plan\":{\"pp\":%u,\"tp\":%u,\"cp\":%u,\"n_devices\":%u,\"threads\":%u,\"isa\":",
		h->pp, h->tp, h->cp, h->n_devices, h->n_threads);
	ctl_json_str(f, h->isa, sizeof(h->isa));
	fprintf(f, ",\"reason\":");
	ctl_json_str(f, h->plan, sizeof(h->plan));
	fprintf(f, ",\"page_tokens\":%u},\"limits\":{\"max_clients\":%u,\"max_inflight\":%u,\"max_prompt\":%u,\"max_tokens\":%u},",
		h->page_tokens, h->max_clients, h->max_inflight, h->max_prompt, h->max_tokens);
}

/* The stats as one JSON object; rates may be NULL. */
static void ctl_print_stats_json(FILE *f, const struct ctl_snap *s, const struct ctl_rates *r)
{
	json_head(f, s);
	json_counts(f, &s->h->c);
	fputc(',', f);
	if (r)
		fprintf(f, "\"rates\":{\"interval_s\":%.3f,\"requests_per_s\":%.3f,\"prompt_tokens_per_s\":%.3f,\"generated_tokens_per_s\":%.3f,\"forward_tokens_per_s\":%.3f,\"steps_per_s\":%.3f},",
			r->interval_s, r->requests, r->prompt_tokens, r->generated_tokens,
			r->forward_tokens, r->steps);
	json_devices(f, s);
	fputc(',', f);
	json_latency(f, s);
	fputc(',', f);
	json_clients(f, s);
	fprintf(f, "}\n");
}

/* ---- pagodactl stats ---- */

int ctl_cmd_stats(const struct ctl_opts *o)
{
	struct ctl_seg seg;
	struct ctl_snap prev = { 0 }, cur = { 0 };
	struct ctl_rates r;
	char err[512];
	int rc = ctl_seg_open(o->stats_path, &seg, err, sizeof(err));

	if (rc)
		goto out_err;
	rc = ctl_seg_read(&seg, &cur, err, sizeof(err));
	if (!rc && o->interval_s > 0) {
		struct timespec ts = { .tv_sec = (time_t)o->interval_s,
				       .tv_nsec = (long)((o->interval_s - (double)(time_t)o->interval_s) * 1e9) };

		prev = cur;
		memset(&cur, 0, sizeof(cur));
		nanosleep(&ts, NULL);
		rc = ctl_seg_read(&seg, &cur, err, sizeof(err));
	}
	ctl_seg_close(&seg);
	if (rc)
		goto out_err;
	ctl_rates(o->interval_s > 0 ? &prev : NULL, &cur, &r);
	if (o->json)
		ctl_print_stats_json(stdout, &cur, &r);
	else
		ctl_print_stats(stdout, &cur, &r);
	ctl_snap_free(&prev);
	ctl_snap_free(&cur);
	return fflush(stdout) ? CTL_FAIL : CTL_OK;
out_err:
	ctl_snap_free(&prev);
	fprintf(stderr, "pagodactl: %s\n", err);
	return rc;
}
