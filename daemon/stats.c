/*
 * stats.c - the daemon's statistics (stats.h): accumulators kept on the
 * loop thread, and their publication into the statistics segment
 * (wire/stats_layout.h), a file in the runtime directory mapped shared.
 *
 * Publication gathers everything first (engine figures, the KV pool's
 * written slots, the devices' times) and only then opens the seqlock, so
 * the window in which readers retry lasts a few memcpy's.  It happens at
 * most every interval_ms while the engine is busy, at once when a step
 * leaves the engine idle (before the step's completions reach their
 * clients, so a client that saw its last DONE also sees it counted), and
 * before the loop sleeps; the caller (control.c, pgd_ctl_publish) decides
 * with pgd_stats_due and hands in what the daemon looks like.  It is not
 * the admin socket (admin.c), never reads anything a reader wrote, and
 * never sees the daemon's structures (daemon.h).
 *
 * Two files: the public figures (0644, or 0640 in the socket's group),
 * and the per-client table (who runs what: pid, uid, command name) in a
 * file of its own, 0640 in the admin group or else 0600, so that only
 * those the admin socket serves can read it.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/listen.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "daemon/stats.h"
#include "wire/stats_layout.h"

/* Forward-pass failures remembered for health's window. */
#define ERR_RING 64

/* One client slot's figures, for the client that holds it now. */
struct client_acc {
	uint32_t id;		/* the client these are of (0: none) */
	pid_t pid;		/* its process */
	int comm_read;		/* comm holds its command name */
	char comm[16];
	uint64_t requests, done, prompt_tokens, generated_tokens;
};

/* One of the two files, mapped shared. */
struct seg_file {
	char path[PATH_MAX];
	int fd;
	dev_t dev;
	ino_t ino;			/* to remove only our own file */
	uint8_t *map;			/* (bytes) */
	size_t bytes;
	uint64_t seq;			/* its seqlock's value, even */
};

struct pgd_stats {
	const struct pg_engine *engine;	/* the daemon's, read only */
	const struct pg_forward *fw;
	struct seg_file pub;		/* the public figures */
	struct seg_file cli;		/* the per-client table */
	struct pg_stats_header *h;		/* in pub */
	struct pg_stats_device *dev_tab;	/* (n_devices) in pub */
	struct pg_stats_hist *hist_tab;		/* (PG_STATS_N_HIST) in pub */
	struct pg_stats_clients_header *ch;	/* in cli */
	struct pg_stats_client *cli_tab;	/* (n_slots) in cli */
	/* accumulators since start or the last reset */
	struct pg_stats_hist hist[PG_STATS_N_HIST];
	struct client_acc *clients;	/* (n_slots) */
	int n_slots;
	uint64_t submitted, refused, evicted, admin_commands, step_errors;
	/* baselines of the last reset */
	struct pg_engine_stats base;
	struct pg_forward_dev_stats *dev_base;	/* (n_devices) */
	struct pg_stats_device *dev_now;	/* (n_devices) gathered */
	int n_devices;
	double err_t[ERR_RING];		/* monotonic times of failed steps */
	uint64_t n_err;			/* ever, for the ring */
	/* time, in monotonic seconds */
	double t_start, t_reset, t_published, interval_s;
	int64_t unix_at_start_ns;	/* CLOCK_REALTIME - CLOCK_MONOTONIC */
	double step_t0;
	double ev_time;			/* this step's events' time (0: unread) */
	/* what the last publication saw */
	int dirty;
	struct pgd_stats_view seen;
};

static int64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t to_ns(double s)
{
	return s > 0 ? (uint64_t)(s * 1e9 + 0.5) : 0;
}

/* ---- histograms ---- */

/* Upper bounds: 10 us × 10^(i/4), i = 0 .. 28, then +Inf. */
static void bucket_bounds(uint64_t *le)
{
	static const double quarter[4] = { 1.0, 1.7782794100389228,
					   3.1622776601683795, 5.6234132519034912 };
	double decade = 1e4;	/* ns */

	for (int i = 0; i < PG_STATS_N_BUCKETS - 1; i++) {
		le[i] = (uint64_t)(decade * quarter[i % 4] + 0.5);
		if (i % 4 == 3)
			decade *= 10;
	}
	le[PG_STATS_N_BUCKETS - 1] = UINT64_MAX;
}

static void observe(struct pgd_stats *s, enum pg_stats_hist_id id, double sec)
{
	struct pg_stats_hist *hh = &s->hist[id];
	const uint64_t *le = s->h->bucket_le_ns;
	uint64_t ns = to_ns(sec);
	int lo = 0, hi = PG_STATS_N_BUCKETS - 1;

	while (lo < hi) {	/* the first bucket whose bound is >= ns */
		int mid = (lo + hi) / 2;

		if (ns <= le[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	hh->bucket[lo]++;
	hh->count++;
	hh->sum_ns += ns;
	s->dirty = 1;
}

/* ---- clients ---- */

static void read_comm(pid_t pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	out[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, out, len - 1);
	close(fd);
	if (n < 0)
		n = 0;
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

/* The figures of the client `id` in slot, or NULL when it is not there. */
static struct client_acc *client_acc(struct pgd_stats *s, uint32_t slot, uint32_t id)
{
	struct client_acc *a;

	if (slot >= (uint32_t)s->n_slots || !id)
		return NULL;
	a = &s->clients[slot];
	if (a->id != id)
		return NULL;
	if (!a->comm_read) {	/* at first use: the process has named itself */
		read_comm(a->pid, a->comm, sizeof(a->comm));
		a->comm_read = 1;
	}
	return a;
}

void pgd_stats_client_join(struct pgd_stats *s, uint32_t slot, uint32_t id,
			   pid_t pid)
{
	struct client_acc *a;

	if (!s || slot >= (uint32_t)s->n_slots)
		return;
	a = &s->clients[slot];
	memset(a, 0, sizeof(*a));
	a->id = id;
	a->pid = pid;
}

void pgd_stats_client_leave(struct pgd_stats *s, uint32_t slot)
{
	if (s && slot < (uint32_t)s->n_slots)
		s->clients[slot].id = 0;
}

void pgd_stats_submitted(struct pgd_stats *s, const struct pgd_stats_req *r,
			 int n_prompt)
{
	struct client_acc *a;

	if (!s)
		return;
	a = client_acc(s, r->slot, r->id);
	if (a) {
		a->requests++;
		a->prompt_tokens += (uint64_t)n_prompt;
	}
	s->submitted++;
	s->dirty = 1;
}

void pgd_stats_client(struct pgd_stats *s, uint32_t slot, uint32_t id,
		      uint64_t *requests, uint64_t *tokens)
{
	const struct client_acc *a = s ? client_acc(s, slot, id) : NULL;

	*requests = a ? a->requests : 0;
	*tokens = a ? a->generated_tokens : 0;
}

void pgd_stats_refused(struct pgd_stats *s)
{
	if (s) {
		s->refused++;
		s->dirty = 1;
	}
}

void pgd_stats_evicted(struct pgd_stats *s, int n)
{
	if (s && n > 0) {
		s->evicted += (uint64_t)n;
		s->dirty = 1;
	}
}

void pgd_stats_admin_command(struct pgd_stats *s)
{
	if (s) {
		s->admin_commands++;
		s->dirty = 1;
	}
}

/* ---- engine events and steps ---- */

/* The time of this step's events: read once per step. */
static double event_time(struct pgd_stats *s)
{
	if (!s->ev_time)
		s->ev_time = pg_now_s();
	return s->ev_time;
}

static void on_token(struct pgd_stats *s, struct pgd_stats_req *r,
		     const struct pg_engine_event *ev)
{
	struct client_acc *a = client_acc(s, r->slot, r->id);
	double now = event_time(s);
	int k = ev->sample;

	if (a)
		a->generated_tokens++;
	if (k < 0 || k >= PGD_STATS_MAX_SAMPLES)
		return;
	if (r->t_tok[k] > 0)
		observe(s, PG_STATS_H_ITL, now - r->t_tok[k]);
	r->t_tok[k] = now;
}

void pgd_stats_event(struct pgd_stats *s, struct pgd_stats_req *r,
		     const struct pg_engine_event *ev)
{
	const struct pg_request_figures *f = ev->fig;
	struct client_acc *a;

	if (!s)
		return;
	s->dirty = 1;
	if (ev->type == PG_ENGINE_EV_TOKEN) {
		on_token(s, r, ev);
		return;
	}
	if (f && f->n_gen > 0) {
		observe(s, PG_STATS_H_TTFT, f->ttft_s);
		observe(s, PG_STATS_H_LATENCY, f->ttft_s + f->itl_s * (f->n_gen - 1));
	}
	if (!ev->last)
		return;
	if (f)
		observe(s, PG_STATS_H_QUEUE, f->queue_s);
	a = client_acc(s, r->slot, r->id);
	if (a)
		a->done++;
}

void pgd_stats_step_begin(struct pgd_stats *s)
{
	if (s) {
		s->step_t0 = pg_now_s();
		s->ev_time = 0;
	}
}

int pgd_stats_step_end(struct pgd_stats *s, int rc)
{
	double t1;

	if (!s)
		return 0;
	t1 = pg_now_s();
	s->ev_time = 0;		/* events outside a step read the clock */
	if (rc)
		observe(s, PG_STATS_H_STEP, t1 - s->step_t0);
	if (rc < 0) {
		s->err_t[s->n_err++ % ERR_RING] = t1;
		s->step_errors++;
	}
	return pg_engine_idle(s->engine);
}

int pgd_stats_engine_errors(const struct pgd_stats *s, double window_s,
			    double *since_last)
{
	double now = pg_now_s();
	int n = 0;

	*since_last = -1;
	if (!s || !s->n_err)
		return 0;
	*since_last = now - s->err_t[(s->n_err - 1) % ERR_RING];
	for (uint64_t i = 0; i < s->n_err && i < ERR_RING; i++)
		n += now - s->err_t[(s->n_err - 1 - i) % ERR_RING] <= window_s;
	return n;
}

/* ---- gathering ---- */

/*
 * Written slots of the n_used used pages: a scan of the pool's page
 * states, which stops at the last used page (an idle engine uses none).
 */
static void kv_slots(const struct pgd_stats *s, int n_used, uint64_t *used,
		     uint64_t *waste)
{
	const struct pg_kvc *kvc = pg_engine_kvc(s->engine);
	int n = pg_forward_n_pages(s->fw), pt = pg_forward_page_tokens(s->fw);
	const int32_t *tokens;

	*used = *waste = 0;
	for (int p = 0, seen = 0; p < n && seen < n_used; p++) {
		int k;

		if (pg_kvc_page_refs(kvc, p) <= 0)
			continue;
		seen++;
		k = pg_kvc_page_tokens(kvc, p, &tokens);
		if (k < 0)
			k = 0;
		*used += (uint64_t)k;
		*waste += (uint64_t)(pt - k);
	}
}

static uint64_t since(uint64_t now, uint64_t base)
{
	return now >= base ? now - base : 0;
}

static void gather_counters(const struct pgd_stats *s, const struct pgd_stats_view *v,
			    struct pg_stats_counters *c)
{
	const struct pg_engine_stats *b = &s->base;
	struct pg_engine_stats st;

	memset(c, 0, sizeof(*c));
	pg_engine_stats(s->engine, &st);
	c->requests_inflight = v->inflight;
	c->seqs_running = (uint64_t)st.n_running;
	c->seqs_waiting = (uint64_t)st.n_waiting;
	c->requests_submitted = s->submitted;
	c->requests_done = since(st.n_done, b->n_done);
	c->requests_failed = since(st.n_failed, b->n_failed);
	c->requests_cancelled = since(st.n_cancelled, b->n_cancelled);
	c->requests_refused = s->refused;
	c->prompt_tokens = since(st.prompt_tokens, b->prompt_tokens);
	c->cached_tokens = since(st.cached_tokens, b->cached_tokens);
	c->generated_tokens = since(st.generated_tokens, b->generated_tokens);
	c->forward_tokens = since(st.forward_tokens, b->forward_tokens);
	c->steps = since(st.steps, b->steps);
	c->step_errors = s->step_errors;
	c->preemptions = since(st.preemptions, b->preemptions);
	c->kv_pages = (uint64_t)st.kv.n_pages;
	c->kv_free = (uint64_t)st.kv.n_free;
	c->kv_used = (uint64_t)st.kv.n_used;
	c->kv_cached = (uint64_t)st.kv.n_cached;
	kv_slots(s, st.kv.n_used, &c->kv_slots_used, &c->kv_slots_waste);
	c->prefix_queries = since(st.kv.queries, b->kv.queries);
	c->prefix_query_tokens = since(st.kv.query_tokens, b->kv.query_tokens);
	c->prefix_hit_pages = since(st.kv.hit_pages, b->kv.hit_pages);
	c->prefix_hit_tokens = since(st.kv.hit_tokens, b->kv.hit_tokens);
	c->prefix_evictions = since(st.kv.evictions, b->kv.evictions);
	c->admin_evicted_pages = s->evicted;
	c->cow_copies = since(st.kv.cow_copies, b->kv.cow_copies);
	c->clients_connected = (uint64_t)v->clients;
	c->admin_commands = s->admin_commands;
	c->grammar_samples = since(st.grammar_samples, b->grammar_samples);
	c->grammar_failures = since(st.grammar_failures, b->grammar_failures);
}

static void gather_device(const struct pgd_stats *s, int i, struct pg_stats_device *o)
{
	const struct pg_forward_dev_stats *b = &s->dev_base[i];
	struct pg_forward_dev_stats f;

	pg_forward_device_stats(s->fw, i, &f);
	memset(o, 0, sizeof(*o));
	snprintf(o->name, sizeof(o->name), "%s", f.name);
	o->stage = f.stage;
	o->tp_rank = f.tp_rank;
	o->cp_rank = f.cp_rank;
	o->first_block = f.first_block;
	o->n_blocks = f.n_blocks;
	o->steps = since(f.steps, b->steps);
	o->busy_ns = since(f.busy_ns, b->busy_ns);
	o->comm_ns = since(f.comm_ns, b->comm_ns);
	o->compute_ns = since(o->busy_ns, o->comm_ns);
	o->bytes_sent = since(f.bytes, b->bytes);
	o->n_all_reduce = since(f.n_all_reduce, b->n_all_reduce);
	o->n_all_gather = since(f.n_all_gather, b->n_all_gather);
	o->n_send = since(f.n_send, b->n_send);
	o->n_recv = since(f.n_recv, b->n_recv);
}

static void write_client(struct pgd_stats *s, uint32_t slot,
			 const struct pgd_stats_conn *c, struct pg_stats_client *o)
{
	const struct client_acc *a = client_acc(s, slot, c->id);

	if (!a) {	/* not joined (pgd_stats_client_join): figures from now */
		pgd_stats_client_join(s, slot, c->id, c->pid);
		a = client_acc(s, slot, c->id);
	}
	memset(o, 0, sizeof(*o));
	o->id = c->id;
	o->pid = (int32_t)c->pid;
	o->uid = (uint32_t)c->uid;
	o->gid = (uint32_t)c->gid;
	memcpy(o->comm, a->comm, sizeof(o->comm));
	o->connected_unix_ns = s->unix_at_start_ns + (int64_t)to_ns(c->since);
	o->inflight = (uint64_t)c->inflight;
	o->requests = a->requests;
	o->done = a->done;
	o->prompt_tokens = a->prompt_tokens;
	o->generated_tokens = a->generated_tokens;
}

/* ---- publication ---- */

/* A seqlock's write section: odd while the writer is inside. */
static void seq_begin(_Atomic uint64_t *seq, uint64_t even)
{
	atomic_store_explicit(seq, even + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void seq_end(_Atomic uint64_t *seq, uint64_t *even)
{
	*even += 2;
	atomic_store_explicit(seq, *even, memory_order_release);
}

int pgd_stats_due(const struct pgd_stats *s, double now, int clients,
		  uint64_t serial, int force)
{
	if (!s)
		return 0;
	if (!s->dirty && s->seen.clients == clients && s->seen.serial == serial)
		return 0;
	return force || now - s->t_published >= s->interval_s;
}

void pgd_stats_publish_begin(struct pgd_stats *s, const struct pgd_stats_view *v)
{
	struct pg_stats_header *h;
	struct pg_stats_counters c;
	double now;

	if (!s)
		return;
	h = s->h;
	gather_counters(s, v, &c);
	for (int i = 0; i < s->n_devices; i++)
		gather_device(s, i, &s->dev_now[i]);
	now = pg_now_s();
	seq_begin(&h->seq, s->pub.seq);
	h->c = c;
	memcpy(s->dev_tab, s->dev_now, sizeof(*s->dev_tab) * (size_t)s->n_devices);
	memcpy(s->hist_tab, s->hist, sizeof(s->hist));
	h->state = v->draining ? PG_STATS_DRAINING : PG_STATS_SERVING;
	h->updated_unix_ns = unix_ns();
	h->uptime_ns = to_ns(now - s->t_start);
	h->reset_uptime_ns = s->t_reset > 0 ? to_ns(s->t_reset - s->t_start) : 0;
	h->n_updates++;
	seq_end(&h->seq, &s->pub.seq);
	s->seen = *v;
	seq_begin(&s->ch->seq, s->cli.seq);
}

void pgd_stats_publish_client(struct pgd_stats *s, uint32_t slot,
			      const struct pgd_stats_conn *conn)
{
	if (!s || slot >= (uint32_t)s->n_slots)
		return;
	if (conn)
		write_client(s, slot, conn, &s->cli_tab[slot]);
	else if (s->cli_tab[slot].id)
		memset(&s->cli_tab[slot], 0, sizeof(s->cli_tab[slot]));
}

void pgd_stats_publish_end(struct pgd_stats *s, double at)
{
	if (!s)
		return;
	seq_end(&s->ch->seq, &s->cli.seq);
	s->dirty = 0;
	s->t_published = at;
}

/* The first publication, of a daemon with no client yet (at open). */
static void publish_first(struct pgd_stats *s)
{
	const struct pgd_stats_view v = { 0 };

	pgd_stats_publish_begin(s, &v);
	for (int i = 0; i < s->n_slots; i++)
		pgd_stats_publish_client(s, (uint32_t)i, NULL);
	pgd_stats_publish_end(s, 0);
}

void pgd_stats_reset(struct pgd_stats *s)
{
	if (!s)
		return;
	pg_engine_stats(s->engine, &s->base);
	for (int i = 0; i < s->n_devices; i++)
		pg_forward_device_stats(s->fw, i, &s->dev_base[i]);
	memset(s->hist, 0, sizeof(s->hist));
	for (int i = 0; i < s->n_slots; i++) {
		struct client_acc *a = &s->clients[i];

		a->requests = a->done = a->prompt_tokens = a->generated_tokens = 0;
	}
	s->submitted = s->refused = s->evicted = s->admin_commands = 0;
	s->step_errors = 0;
	s->t_reset = pg_now_s();
	s->dirty = 1;
}

/* ---- the segments ---- */

/*
 * The paths: cfg->stats_path, else beside the client socket, and the
 * per-client table's beside it.  Returns 0, 1 for "none" (no
 * statistics), -1 with a message.
 */
static int stats_paths(const struct pgd_config *cfg, struct pgd_stats *s,
		       char *err, size_t err_len)
{
	const char *p = cfg->stats_path;
	size_t len = sizeof(s->pub.path);

	if (p && !strcmp(p, "none"))
		return 1;
	if (p ? (size_t)snprintf(s->pub.path, len, "%s", p) < len
	      : !pg_stats_path_beside(cfg->socket_path, ".stats", s->pub.path, len)) {
		if (!pg_stats_clients_path(s->pub.path, s->cli.path, sizeof(s->cli.path)))
			return 0;
	}
	snprintf(err, err_len, "--stats-path: the path is too long (give one under %zu bytes)", len - 9);
	return -1;
}

/* Whether another live daemon publishes at path (its pid in *pid). */
static int other_daemon(const char *path, pid_t *pid)
{
	struct pg_stats_header h;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), live = 0;
	uint64_t start;

	if (fd < 0)
		return 0;
	if (pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    h.magic == PG_STATS_MAGIC && h.state != PG_STATS_STOPPED &&
	    h.pid > 0 && h.pid != getpid() &&
	    (!kill(h.pid, 0) || errno == EPERM)) {
		start = pg_stats_pid_start(h.pid);
		live = !start || !h.pid_start_ticks || start == h.pid_start_ticks;
		*pid = h.pid;
	}
	close(fd);
	return live;
}

/* Give fd to gid (unless (gid_t)-1) with group_mode, else owner_mode. */
static unsigned set_perms(int fd, gid_t gid, unsigned group_mode, unsigned owner_mode,
			  const char *what)
{
	unsigned mode = owner_mode;

	if (gid != (gid_t)-1 && !fchown(fd, (uid_t)-1, gid))
		mode = group_mode;
	if (fchmod(fd, mode))
		pgd_log(PGD_LOG_WARN, "statistics: cannot set the mode of the %s: %s", what,
			strerror(errno));
	return mode;
}

/*
 * The public figures: readable by all (0644), or by the socket's group
 * only (0640) when that group exists and the file can be given to it.
 */
static unsigned public_perms(const struct pgd_config *cfg, int fd)
{
	const char *name = cfg->socket_group ? cfg->socket_group : PGD_DEFAULT_GROUP;
	struct group *g = getgrnam(name);

	return set_perms(fd, g ? g->gr_gid : (gid_t)-1, 0640, 0644, "statistics file");
}

/*
 * The per-client table: for those the admin socket serves, root, the
 * daemon's user and the admin group (0640 in it), else 0600.
 */
static unsigned clients_perms(const struct pgd_stats_admin *adm, int fd)
{
	return set_perms(fd, adm->gid, 0640, 0600, "per-client table");
}

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

/* The facts that do not change while the daemon runs. */
static void write_static(const struct pgd_stats_setup *su, struct pgd_stats *s)
{
	struct pg_stats_header *h = s->h;
	const struct pg_hparams *hp = &su->m->hp;
	const struct pg_plan *plan = pg_forward_plan(su->fw);
	const struct pgd_config *cfg = su->cfg;
	const struct pgd_stats_admin *adm = &su->admin;

	h->magic = PG_STATS_MAGIC;
	h->version = PG_STATS_VERSION;
	h->header_bytes = PG_STATS_HEADER_BYTES;
	h->total_bytes = (uint32_t)s->pub.bytes;
	h->generation = su->generation;
	h->pid = (int32_t)getpid();
	h->state = PG_STATS_STARTING;
	h->pid_start_ticks = pg_stats_pid_start(getpid());
	h->start_unix_ns = s->unix_at_start_ns + (int64_t)to_ns(s->t_start);
	h->interval_ms = (uint32_t)(s->interval_s * 1000 + 0.5);
	h->n_devices = (uint32_t)s->n_devices;
	h->dev_off = PG_STATS_HEADER_BYTES;
	h->n_hist = PG_STATS_N_HIST;
	h->hist_off = h->dev_off + h->n_devices * (uint32_t)sizeof(struct pg_stats_device);
	h->n_buckets = PG_STATS_N_BUCKETS;
	bucket_bounds(h->bucket_le_ns);
	copy_str(h->model, sizeof(h->model), su->m->name);
	copy_str(h->arch, sizeof(h->arch), pg_arch_name(hp->arch));
	copy_str(h->model_path, sizeof(h->model_path), su->m->path);
	copy_str(h->plan, sizeof(h->plan), cfg->plan_desc);
	copy_str(h->isa, sizeof(h->isa), pg_forward_isa_name(su->fw));
	copy_str(h->socket, sizeof(h->socket), cfg->socket_path);
	copy_str(h->admin_socket, sizeof(h->admin_socket), adm->path);
	copy_str(h->admin_group, sizeof(h->admin_group), adm->group);
	h->n_vocab = (uint32_t)hp->n_vocab;
	h->n_ctx_train = (uint32_t)hp->n_ctx_train;
	h->n_blocks = (uint32_t)hp->n_blocks;
	h->n_embd = (uint32_t)hp->n_embd;
	h->pp = (uint32_t)plan->pp;
	h->tp = (uint32_t)plan->tp;
	h->cp = (uint32_t)plan->cp;
	h->n_threads = (uint32_t)pg_forward_threads(su->fw);
	h->page_tokens = (uint32_t)pg_forward_page_tokens(su->fw);
	h->max_clients = (uint32_t)cfg->max_clients;
	h->max_inflight = (uint32_t)cfg->max_inflight;
	h->max_prompt = (uint32_t)su->max_prompt;
	h->max_tokens = (uint32_t)su->max_tokens;
	s->dev_tab = (struct pg_stats_device *)(s->pub.map + h->dev_off);
	s->hist_tab = (struct pg_stats_hist *)(s->pub.map + h->hist_off);
}

static void write_clients_static(const struct pgd_stats_setup *su, struct pgd_stats *s)
{
	struct pg_stats_clients_header *ch = s->ch;

	ch->magic = PG_STATS_CLIENTS_MAGIC;
	ch->version = PG_STATS_VERSION;
	ch->header_bytes = (uint32_t)sizeof(*ch);
	ch->total_bytes = (uint32_t)s->cli.bytes;
	ch->generation = su->generation;
	ch->pid = (int32_t)getpid();
	ch->n_slots = (uint32_t)s->n_slots;
	ch->slot_off = (uint32_t)sizeof(*ch);
	s->cli_tab = (struct pg_stats_client *)(s->cli.map + ch->slot_off);
}

/*
 * Create f's file under a temporary name (tmp), mode 0600 until the
 * caller sets its own, sized and mapped.  Returns 0, or -1 with a message.
 */
static int seg_create(struct seg_file *f, char *tmp, size_t tmp_len, char *err,
		      size_t err_len)
{
	snprintf(tmp, tmp_len, "%s.%d.tmp", f->path, (int)getpid());
	unlink(tmp);
	f->fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (f->fd < 0) {
		snprintf(err, err_len, "cannot create the statistics file %s: %s (choose another --stats-path, or none)",
			 tmp, strerror(errno));
		return -1;
	}
	if (ftruncate(f->fd, (off_t)f->bytes))
		goto out_errno;
	f->map = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		goto out_errno;
	}
	return 0;
out_errno:
	snprintf(err, err_len, "cannot set up the statistics file %s: %s", f->path, strerror(errno));
	unlink(tmp);
	return -1;
}

/* Put f's temporary file tmp in its place. */
static int seg_install(struct seg_file *f, const char *tmp, char *err, size_t err_len)
{
	struct stat st;

	if (rename(tmp, f->path)) {
		snprintf(err, err_len, "cannot set up the statistics file %s: %s", f->path,
			 strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (!fstat(f->fd, &st)) {
		f->dev = st.st_dev;
		f->ino = st.st_ino;
	}
	return 0;
}

/* Remove f's file when it is still the one we made. */
static void seg_remove(const struct seg_file *f)
{
	struct stat st;

	if (f->ino && !stat(f->path, &st) && st.st_dev == f->dev && st.st_ino == f->ino)
		unlink(f->path);
}

static void seg_free(struct seg_file *f)
{
	if (f->map)
		munmap(f->map, f->bytes);
	if (f->fd >= 0)
		close(f->fd);
	f->map = NULL;
	f->fd = -1;
}

/* Both files, the per-client table first: the public file announces a daemon. */
static int create_segments(const struct pgd_stats_setup *su, struct pgd_stats *s,
			   char *err, size_t err_len)
{
	char tmp[PATH_MAX + 32];
	unsigned mode, cmode;

	if (seg_create(&s->cli, tmp, sizeof(tmp), err, err_len))
		return -1;
	s->ch = (struct pg_stats_clients_header *)s->cli.map;
	write_clients_static(su, s);
	cmode = clients_perms(&su->admin, s->cli.fd);
	if (seg_install(&s->cli, tmp, err, err_len))
		return -1;
	if (seg_create(&s->pub, tmp, sizeof(tmp), err, err_len))
		goto out_remove;
	s->h = (struct pg_stats_header *)s->pub.map;
	write_static(su, s);
	mode = public_perms(su->cfg, s->pub.fd);
	if (seg_install(&s->pub, tmp, err, err_len))
		goto out_remove;
	pgd_log(PGD_LOG_INFO, "statistics at %s (mode %04o, %zu bytes, published every %u ms while busy); the per-client table at %s (mode %04o)",
		s->pub.path, mode, s->pub.bytes, s->h->interval_ms, s->cli.path, cmode);
	return 0;
out_remove:
	seg_remove(&s->cli);
	return -1;
}

static int alloc_acc(const struct pgd_stats_setup *su, struct pgd_stats *s)
{
	s->n_slots = su->cfg->max_clients;
	s->n_devices = pg_forward_n_devices(su->fw);
	s->clients = calloc((size_t)s->n_slots, sizeof(*s->clients));
	s->dev_base = calloc((size_t)s->n_devices, sizeof(*s->dev_base));
	s->dev_now = calloc((size_t)s->n_devices, sizeof(*s->dev_now));
	s->pub.bytes = (size_t)pg_stats_bytes((uint32_t)s->n_devices);
	s->cli.bytes = (size_t)pg_stats_clients_bytes((uint32_t)s->n_slots);
	return s->clients && s->dev_base && s->dev_now ? 0 : -1;
}

static void stats_free(struct pgd_stats *s)
{
	seg_free(&s->pub);
	seg_free(&s->cli);
	free(s->clients);
	free(s->dev_base);
	free(s->dev_now);
	free(s);
}

static void start_clock(const struct pgd_config *cfg, struct pgd_stats *s)
{
	int ms = cfg->stats_interval_ms > 0 ? cfg->stats_interval_ms
					       : PGD_STATS_INTERVAL_MS;

	s->t_start = pg_now_s();
	s->unix_at_start_ns = unix_ns() - (int64_t)to_ns(s->t_start);
	s->interval_s = ms * 1e-3;
}

int pgd_stats_open(const struct pgd_stats_setup *su, struct pgd_stats **out,
		   char *err, size_t err_len)
{
	struct pgd_stats *s = calloc(1, sizeof(*s));
	pid_t other = 0;
	int rc;

	*out = NULL;
	if (!s) {
		snprintf(err, err_len, "out of memory for the statistics");
		return -1;
	}
	s->pub.fd = s->cli.fd = -1;
	s->engine = su->engine;
	s->fw = su->fw;
	rc = stats_paths(su->cfg, s, err, err_len);
	if (rc) {
		free(s);
		return rc < 0 ? -1 : 0;
	}
	if (other_daemon(s->pub.path, &other)) {
		snprintf(err, err_len, "another pagodad (pid %d) publishes its statistics at %s: stop it, or choose another --stats-path",
			 (int)other, s->pub.path);
		goto out_free;
	}
	if (alloc_acc(su, s)) {
		snprintf(err, err_len, "out of memory for the statistics");
		goto out_free;
	}
	start_clock(su->cfg, s);
	pgd_make_parent_dir(s->pub.path);
	if (create_segments(su, s, err, err_len))
		goto out_free;
	pg_engine_stats(s->engine, &s->base);
	for (int i = 0; i < s->n_devices; i++)
		pg_forward_device_stats(s->fw, i, &s->dev_base[i]);
	publish_first(s);
	*out = s;
	return 0;
out_free:
	stats_free(s);
	return -1;
}

void pgd_stats_close(struct pgd_stats *s)
{
	if (!s)
		return;
	seq_begin(&s->h->seq, s->pub.seq);
	s->h->state = PG_STATS_STOPPED;
	s->h->updated_unix_ns = unix_ns();
	seq_end(&s->h->seq, &s->pub.seq);
	seg_remove(&s->pub);
	seg_remove(&s->cli);
	stats_free(s);
}
