/*
 * admin.c - the admin socket (admin.h, protocol in wire/admin_proto.h).
 *
 * A connection's life, all through the daemon's io_uring:
 *   accept -> SO_PEERCRED check (refused: a short answer saying which
 *   group to join, then close) -> recv of one struct pg_admin_request,
 *   linked to a 2 s timeout -> the command runs on the loop thread ->
 *   send of the answer, linked to a 5 s timeout -> close.
 * `drain --wait` parks the connection until the engine is idle
 * (pgd_admin_tick).  A connection's fd is closed only when none of its
 * operations is in flight, so the io_uring never writes into a slot that
 * has been reused.
 *
 * The commands act on the daemon's own structures (the engine's
 * eviction, the draining flag request.c checks, the clients' dead mark,
 * the log level, the statistics' baselines); each answer says what was
 * done, as text or as one JSON object.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/escape.h"
#include "daemon/admin.h"
#include "daemon/daemon.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/fault.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"
#include "daemon/log.h"
#include "daemon/stats.h"
#include "wire/admin_proto.h"
#include "wire/stats_layout.h"

/* Connections being served at once; more wait in the kernel's backlog. */
#define MAX_CONN 16

/* Seconds a peer has to send its request, and to take the answer. */
#define READ_TIMEOUT_S 2
#define SEND_TIMEOUT_S 5

/* Forward-pass failures within this window make the daemon unhealthy. */
#define HEALTH_WINDOW_S 60.0

enum sub_op {
	SUB_ACCEPT = 1,
	SUB_READ,
	SUB_SEND,
	SUB_TIMEOUT,		/* the linked timeouts: nothing to do */
};

enum conn_state {
	CONN_FREE = 0,
	CONN_READ,		/* the request's recv is in flight */
	CONN_WAIT,		/* drain --wait: parked until idle */
	CONN_SEND,		/* the answer's send is in flight */
};

struct conn {
	enum conn_state state;
	int fd;
	uint32_t serial;
	uid_t uid;
	pid_t pid;
	int json;
	struct pg_admin_request req;	/* the io_uring receives into it */
	char *out;			/* (out_len) header + text being sent */
	size_t out_len, out_sent;
	long fault_arm;			/* FAULT: arm once answered (0: no) */
};

struct pgd_admin {
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char group[64];			/* "" when root only */
	gid_t gid;			/* (gid_t)-1 when root only */
	int listen_fd;
	dev_t sock_dev;
	ino_t sock_ino;			/* to unlink only our own socket */
	int accept_armed;
	uint32_t next_serial;
	struct __kernel_timespec read_ts, send_ts;
	double drain_since;		/* monotonic seconds */
	struct conn conn[MAX_CONN];
};

/* An answer being built: the reply header, then the text. */
struct out {
	char *buf;
	size_t len, cap;
	int json;
	int status;
};

/* ---- io_uring operations ---- */

static uint64_t tag(enum sub_op op, uint32_t slot, uint32_t serial)
{
	return (uint64_t)PGD_OP_ADMIN << 56 | (uint64_t)op << 48 |
	       (uint64_t)serial << 16 | (slot & 0xffff);
}

static struct io_uring_sqe *get_sqe(struct pgd *d)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);

	if (!sqe) {
		io_uring_submit(&d->ring);
		sqe = io_uring_get_sqe(&d->ring);
	}
	if (!sqe)
		pgd_log(PGD_LOG_ERROR, "admin: the io_uring submission queue is full");
	return sqe;
}

static void arm_accept(struct pgd *d)
{
	struct pgd_admin *a = d->admin;
	struct io_uring_sqe *sqe;

	if (a->accept_armed || d->stop_signal)
		return;
	sqe = get_sqe(d);
	if (!sqe)
		return;
	io_uring_prep_accept(sqe, a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	sqe->user_data = tag(SUB_ACCEPT, 0, 0);
	a->accept_armed = 1;
}

/* An operation on k's socket, linked to a timeout (two free slots first). */
static int arm_linked(struct pgd *d, struct conn *k, enum sub_op op,
		      void *buf, size_t len, struct __kernel_timespec *ts)
{
	uint32_t slot = (uint32_t)(k - d->admin->conn);
	struct io_uring_sqe *sqe, *op_sqe;

	if (io_uring_sq_space_left(&d->ring) < 2)
		io_uring_submit(&d->ring);
	sqe = get_sqe(d);
	if (!sqe)
		return -1;
	if (op == SUB_READ)
		io_uring_prep_recv(sqe, k->fd, buf, len, MSG_WAITALL);
	else
		io_uring_prep_send(sqe, k->fd, buf, len, MSG_NOSIGNAL);
	sqe->user_data = tag(op, slot, k->serial);
	sqe->flags |= IOSQE_IO_LINK;
	op_sqe = sqe;
	sqe = get_sqe(d);
	if (!sqe) {	/* it goes without its timeout, linked to nothing */
		op_sqe->flags &= (uint8_t)~IOSQE_IO_LINK;
		return 0;
	}
	io_uring_prep_link_timeout(sqe, ts, 0);
	sqe->user_data = tag(SUB_TIMEOUT, 0, 0);
	return 0;
}

static void conn_close(struct conn *k)
{
	if (k->fd >= 0)
		close(k->fd);
	free(k->out);
	k->out = NULL;
	k->fd = -1;
	k->state = CONN_FREE;
}

/* ---- answers ---- */

static int out_grow(struct out *o, size_t need)
{
	size_t cap = o->cap ? o->cap : 1024;
	char *b;

	while (cap < need)
		cap *= 2;
	b = realloc(o->buf, cap);
	if (!b)
		return -1;
	o->buf = b;
	o->cap = cap;
	return 0;
}

static void out_printf(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void out_printf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = o->cap - o->len;

		va_start(ap, fmt);
		n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->buf ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (o->buf && (size_t)n < room) {
			o->len += (size_t)n;
			return;
		}
		if (o->len + (size_t)n + 1 > PG_ADMIN_MAX_REPLY) {
			o->status = o->status ? o->status : E2BIG;
			return;
		}
		if (out_grow(o, o->len + (size_t)n + 1))
			return;
	}
}

/* s in mode (common/escape.h): what a client chose is never sent as itself. */
static void out_escaped(struct out *o, const char *s, int mode)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n;) {
		char one[PG_ESCAPE_MAX];

		i += pg_escape_char(s + i, n - i, mode, one);
		out_printf(o, "%s", one);
	}
}

/* A JSON string value (quotes included). */
static void out_json_str(struct out *o, const char *s)
{
	out_printf(o, "\"");
	out_escaped(o, s, PG_ESCAPE_JSON);
	out_printf(o, "\"");
}

/*
 * The one-line answer of most commands: text "MESSAGE\n", or JSON
 * {"command":...,"ok":...,"message":"MESSAGE", FIELDS} where fields is
 * already-formatted JSON members (or "").
 */
static void answer(struct out *o, const char *cmd, int status,
		   const char *fields, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void answer(struct out *o, const char *cmd, int status,
		   const char *fields, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	o->status = status;
	if (!o->json) {
		out_printf(o, "%s\n", msg);
		return;
	}
	out_printf(o, "{\"command\":\"%s\",\"ok\":%s,\"status\":%d,\"message\":",
		   cmd, status ? "false" : "true", status);
	out_json_str(o, msg);
	out_printf(o, "%s%s}\n", fields && *fields ? "," : "", fields ? fields : "");
}

/* Send o (status and text) on k; k is closed once it is sent. */
static void reply(struct pgd *d, struct conn *k, struct out *o)
{
	struct pg_admin_reply h = { .magic = PG_ADMIN_MAGIC,
				    .version = PG_ADMIN_VERSION,
				    .status = o->status,
				    .len = (uint32_t)o->len };

	k->out = malloc(sizeof(h) + o->len);
	if (!k->out) {
		free(o->buf);
		conn_close(k);
		return;
	}
	memcpy(k->out, &h, sizeof(h));
	if (o->len)
		memcpy(k->out + sizeof(h), o->buf, o->len);
	free(o->buf);
	k->out_len = sizeof(h) + o->len;
	k->out_sent = 0;
	k->state = CONN_SEND;
	if (arm_linked(d, k, SUB_SEND, k->out, k->out_len, &d->admin->send_ts))
		conn_close(k);
}

/* ---- commands ---- */

static const char *const by_names[] = { "all", "age", "pages", "client", "prefix" };

static int evict_prefix_ids(struct pgd *d, const struct pg_admin_request *q,
			    struct pg_kvc_evict *ev, struct out *o)
{
	int64_t n = pg_tokenize(d->m->tok, q->text, q->text_len, 1, 1, d->ids,
				d->ids_cap);

	if (n < 0) {
		answer(o, "evict", ENOMEM, NULL, "pagodad is out of memory tokenizing the prefix");
		return -1;
	}
	if (n < 1 || n > d->ids_cap) {
		answer(o, "evict", EINVAL, NULL, "the prefix gives %lld tokens: give 1 to %d",
		       (long long)n, d->ids_cap);
		return -1;
	}
	ev->prefix = d->ids;
	ev->n_prefix = (int)n;
	return 0;
}

static void cmd_evict(struct pgd *d, const struct pg_admin_request *q, struct out *o)
{
	struct pg_kvc_evict ev = { .by = PG_KVC_EVICT_ALL };
	struct pg_engine_stats st;
	char fields[256];
	int n;

	switch (q->evict_by) {
	case PG_ADMIN_EVICT_ALL: ev.by = PG_KVC_EVICT_ALL; break;
	case PG_ADMIN_EVICT_AGE: ev.by = PG_KVC_EVICT_AGE; ev.age_s = q->seconds; break;
	case PG_ADMIN_EVICT_PAGES: ev.by = PG_KVC_EVICT_PAGES; break;
	case PG_ADMIN_EVICT_CLIENT: ev.by = PG_KVC_EVICT_CLIENT; ev.client = q->arg; break;
	case PG_ADMIN_EVICT_PREFIX:
		ev.by = PG_KVC_EVICT_PREFIX;
		if (evict_prefix_ids(d, q, &ev, o))
			return;
		break;
	default:
		answer(o, "evict", EINVAL, NULL, "evict: unknown kind %u (all, age, pages, client or prefix)",
		       q->evict_by);
		return;
	}
	if (q->evict_by == PG_ADMIN_EVICT_PAGES)
		ev.n_pages = q->arg > INT_MAX ? INT_MAX : (int)q->arg;
	if ((q->evict_by == PG_ADMIN_EVICT_AGE && !(q->seconds >= 0)) ||
	    (q->evict_by == PG_ADMIN_EVICT_PAGES && q->arg < 1)) {
		answer(o, "evict", EINVAL, NULL, "evict %s: give a positive number",
		       by_names[q->evict_by]);
		return;
	}
	n = pg_engine_evict(d->engine, &ev);
	if (n < 0) {
		answer(o, "evict", EINVAL, NULL, "evict: %s", pg_engine_last_error(d->engine));
		return;
	}
	pgd_stats_evicted(d->stats, n);
	pg_engine_stats(d->engine, &st);
	snprintf(fields, sizeof(fields),
		 "\"by\":\"%s\",\"evicted_pages\":%d,\"evicted_tokens\":%lld,\"cached_pages\":%d,\"used_pages\":%d,\"free_pages\":%d",
		 by_names[q->evict_by], n, (long long)n * pg_forward_page_tokens(d->fw),
		 st.kv.n_cached, st.kv.n_used, st.kv.n_free);
	pgd_log(PGD_LOG_INFO, "admin: evicted %d cached pages (%s)", n, by_names[q->evict_by]);
	answer(o, "evict", 0, fields,
	       "evicted %d pages (%lld tokens) by %s; now %d cached, %d used, %d free of %d",
	       n, (long long)n * pg_forward_page_tokens(d->fw), by_names[q->evict_by],
	       st.kv.n_cached, st.kv.n_used, st.kv.n_free, st.kv.n_pages);
}

/* The engine's load, for drain and health answers (and JSON members). */
static void load_fields(struct pgd *d, char *buf, size_t len, int *running,
			int *waiting, int *inflight)
{
	struct pg_engine_stats st;

	pg_engine_stats(d->engine, &st);
	*running = st.n_running;
	*waiting = st.n_waiting;
	*inflight = 0;
	for (int i = 0; i < d->n_live; i++)
		*inflight += d->live[i]->n_inflight;
	snprintf(buf, len, "\"draining\":%s,\"running\":%d,\"waiting\":%d,\"inflight\":%d,\"clients\":%d",
		 d->draining ? "true" : "false", *running, *waiting, *inflight, d->n_live);
}

static void answer_drained(struct pgd *d, struct out *o)
{
	char fields[256];
	int running, waiting, inflight;

	load_fields(d, fields, sizeof(fields), &running, &waiting, &inflight);
	answer(o, "drain", 0, fields, "drained: the engine is idle after %.1f s; new requests are refused until pagodactl resume",
	       pg_now_s() - d->admin->drain_since);
}

static void cmd_drain(struct pgd *d, struct conn *k, struct out *o)
{
	struct pgd_admin *a = d->admin;
	char fields[256];
	int running, waiting, inflight;

	if (!d->draining) {
		d->draining = 1;
		a->drain_since = pg_now_s();
		pgd_log(PGD_LOG_INFO, "admin: draining (uid %u): new requests are refused", (unsigned)k->uid);
	}
	if (k->req.flags & PG_ADMIN_F_WAIT) {
		if (pgd_idle(d)) {
			answer_drained(d, o);
			return;
		}
		k->state = CONN_WAIT;	/* pgd_admin_tick answers */
		return;
	}
	load_fields(d, fields, sizeof(fields), &running, &waiting, &inflight);
	answer(o, "drain", 0, fields,
	       "draining: new requests are refused; %d running, %d waiting, %d requests in flight finish (pagodactl drain --wait waits for them)",
	       running, waiting, inflight);
}

static void cmd_resume(struct pgd *d, const struct conn *k, struct out *o)
{
	char fields[64];
	double was = d->draining ? pg_now_s() - d->admin->drain_since : 0;

	snprintf(fields, sizeof(fields), "\"was_draining\":%s", d->draining ? "true" : "false");
	if (!d->draining) {
		answer(o, "resume", 0, fields, "not draining: requests were already admitted");
		return;
	}
	d->draining = 0;
	pgd_log(PGD_LOG_INFO, "admin: resumed (uid %u) after draining %.1f s", (unsigned)k->uid, was);
	answer(o, "resume", 0, fields, "resumed: admitting requests again (drained for %.1f s)", was);
}

static void client_line(struct pgd *d, const struct pgd_client *c, struct out *o,
			int first)
{
	uint64_t requests, tokens;
	char comm[16], shown[16 * 4 + 1];
	char path[64];
	FILE *f;

	pgd_stats_client(d->stats, c, &requests, &tokens);
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)c->pid);
	comm[0] = '\0';
	f = fopen(path, "re");
	if (f) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
	}
	comm[strcspn(comm, "\n")] = '\0';
	if (!o->json) {
		pg_escape_str(shown, sizeof(shown), comm, sizeof(comm), PG_ESCAPE_TEXT);
		out_printf(o, "%6u %8d %6u %-15s %8d %10llu %12llu %8.0f\n", c->id,
			   (int)c->pid, (unsigned)c->uid, shown[0] ? shown : "?",
			   c->n_inflight, (unsigned long long)requests,
			   (unsigned long long)tokens, d->now - c->since);
		return;
	}
	out_printf(o, "%s{\"id\":%u,\"pid\":%d,\"uid\":%u,\"gid\":%u,\"comm\":", first ? "" : ",",
		   c->id, (int)c->pid, (unsigned)c->uid, (unsigned)c->gid);
	out_json_str(o, comm);
	out_printf(o, ",\"inflight\":%d,\"requests\":%llu,\"generated_tokens\":%llu,\"connected_s\":%.3f}",
		   c->n_inflight, (unsigned long long)requests,
		   (unsigned long long)tokens, d->now - c->since);
}

static void cmd_clients(struct pgd *d, struct out *o)
{
	o->status = 0;
	if (o->json)
		out_printf(o, "{\"command\":\"clients\",\"ok\":true,\"status\":0,\"count\":%d,\"clients\":[",
			   d->n_live);
	else
		out_printf(o, "%d clients connected\n%6s %8s %6s %-15s %8s %10s %12s %8s\n",
			   d->n_live, "ID", "PID", "UID", "COMMAND", "INFLIGHT",
			   "REQUESTS", "TOKENS", "SECONDS");
	for (int i = 0, n = 0; i < d->cfg->max_clients; i++)
		if (d->slots[i] && !d->slots[i]->dead)
			client_line(d, d->slots[i], o, !n++);
	if (o->json)
		out_printf(o, "]}\n");
}

static void cmd_disconnect(struct pgd *d, const struct conn *k, struct out *o)
{
	const struct pg_admin_request *q = &k->req;
	struct pgd_client *c = NULL;
	char fields[128];

	/* ids are unique for the daemon's life: a client that left is not
	   confused with a newer one in its slot */
	for (int i = 0; i < d->cfg->max_clients && !c; i++)
		if (d->slots[i] && d->slots[i]->id == q->arg)
			c = d->slots[i];

	if (!c || c->dead) {
		answer(o, "disconnect", ENOENT, NULL, "no client %llu is connected (pagodactl clients lists them)",
		       (unsigned long long)q->arg);
		return;
	}
	snprintf(fields, sizeof(fields), "\"id\":%u,\"pid\":%d,\"uid\":%u,\"inflight\":%d",
		 c->id, (int)c->pid, (unsigned)c->uid, c->n_inflight);
	pgd_mark_dead(d, c, PG_ESHUTDOWN, "disconnected by an administrator of pagodad (uid %u)",
		      (unsigned)k->uid);
	pgd_log(PGD_LOG_INFO, "admin: client %u disconnected by uid %u", c->id, (unsigned)k->uid);
	answer(o, "disconnect", 0, fields, "client %u (pid %d, uid %u) disconnected; its %d requests in flight are cancelled",
	       c->id, (int)c->pid, (unsigned)c->uid, c->n_inflight);
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };

static void cmd_loglevel(struct pgd *d, const struct conn *k, struct out *o)
{
	char name[16], fields[64];
	int level, old = PGD_LOG_ERROR;

	(void)d;
	snprintf(name, sizeof(name), "%.*s", (int)(k->req.text_len < sizeof(name) ? k->req.text_len : sizeof(name) - 1),
		 k->req.text);
	level = pgd_log_parse(name);
	if (level < 0) {
		answer(o, "loglevel", EINVAL, NULL, "loglevel '%s': give error, warn, info or debug", name);
		return;
	}
	for (int l = PGD_LOG_DEBUG; l > PGD_LOG_ERROR; l--)
		if (pgd_log_enabled((enum pgd_log_level)l)) {
			old = l;
			break;
		}
	pgd_log_set_level((enum pgd_log_level)level);
	pgd_log(PGD_LOG_WARN, "admin: log level %s (was %s), set by uid %u",
		level_names[level], level_names[old], (unsigned)k->uid);
	snprintf(fields, sizeof(fields), "\"level\":\"%s\",\"was\":\"%s\"", level_names[level],
		 level_names[old]);
	answer(o, "loglevel", 0, fields, "log level %s (was %s)", level_names[level], level_names[old]);
}

static void cmd_stats_reset(struct pgd *d, const struct conn *k, struct out *o)
{
	if (!d->stats) {
		answer(o, "stats-reset", ENOENT, NULL, "pagodad publishes no statistics (--stats-path none): nothing to reset");
		return;
	}
	pgd_stats_reset(d);
	pgd_log(PGD_LOG_INFO, "admin: statistics reset by uid %u", (unsigned)k->uid);
	answer(o, "stats-reset", 0, NULL, "statistics reset: counters and histograms are zero (gauges stay as they are)");
}

static void cmd_health(struct pgd *d, struct out *o)
{
	char fields[384], load[256];
	int running, waiting, inflight, errors;
	double last;

	load_fields(d, load, sizeof(load), &running, &waiting, &inflight);
	errors = pgd_stats_engine_errors(d->stats, HEALTH_WINDOW_S, &last);
	if (!d->stats)
		errors = d->step_errors > 0;
	snprintf(fields, sizeof(fields), "%s,\"engine_errors\":%d", load, errors);
	if (d->stop_signal)
		answer(o, "health", ESHUTDOWN, fields, "unhealthy: pagodad is stopping");
	else if (d->draining)
		answer(o, "health", EBUSY, fields, "unhealthy: draining since %.1f s ago, new requests are refused (pagodactl resume)",
		       pg_now_s() - d->admin->drain_since);
	else if (errors)
		answer(o, "health", EIO, fields, "unhealthy: the forward pass failed %d times in the last %.0f s (last %.1f s ago); see pagodad's log",
		       errors, HEALTH_WINDOW_S, last);
	else
		answer(o, "health", 0, fields, "healthy: serving %s; %d clients, %d running, %d waiting",
		       d->m->name, d->n_live, running, waiting);
}

/*
 * FAULT (tests only, wire/admin_proto.h): report the last arming, then
 * arm anew.  The arming itself waits until the answer is built (on_read),
 * so that the answer's own allocations do not count.
 */
static void cmd_fault(struct pgd *d, struct conn *k, struct out *o)
{
	long seen = 0;
	bool fired;

	if (!d->cfg->fault_injection) {	/* PAGODA_FAULT_INJECTION (settings.c) */
		answer(o, "fault", EPERM, NULL,
		       "allocation failure injection is for tests: start pagodad with PAGODA_FAULT_INJECTION=1 in its environment to use it");
		return;
	}
	fired = pg_fault_fired(&seen);
	pg_fault_arm(0);
	k->fault_arm = (long)(k->req.arg > (uint64_t)LONG_MAX ? LONG_MAX : (long)k->req.arg);
	answer(o, "fault", 0, NULL, "fired: %s; seen: %ld; armed: %ld",
	       fired ? "yes" : "no", seen, k->fault_arm);
	pgd_log(PGD_LOG_INFO, "admin: fault injection: the last arming %s after %ld allocations; %s %ld",
		fired ? "fired" : "did not fire", seen,
		k->fault_arm ? "failing the allocation numbered" : "disarmed:", k->fault_arm);
}

static const char *const cmd_names[] = {
	"?", "evict", "drain", "resume", "clients", "disconnect", "loglevel",
	"stats-reset", "health", "fault",
};

static void run_command(struct pgd *d, struct conn *k, struct out *o)
{
	const struct pg_admin_request *q = &k->req;

	if (q->magic != PG_ADMIN_MAGIC || q->version != PG_ADMIN_VERSION) {
		answer(o, "?", EPROTO, NULL, "admin protocol mismatch: pagodad speaks version %u; use the pagodactl of this pagoda",
		       PG_ADMIN_VERSION);
		return;
	}
	if (q->text_len >= PG_ADMIN_TEXT) {
		answer(o, "?", EINVAL, NULL, "text_len %u is over %u bytes", q->text_len, PG_ADMIN_TEXT - 1);
		return;
	}
	pgd_log(PGD_LOG_DEBUG, "admin: %s from uid %u pid %d",
		q->cmd < PG_ADMIN_CMD_MAX ? cmd_names[q->cmd] : "?", (unsigned)k->uid, (int)k->pid);
	switch (q->cmd) {
	case PG_ADMIN_EVICT: cmd_evict(d, q, o); return;
	case PG_ADMIN_DRAIN: cmd_drain(d, k, o); return;
	case PG_ADMIN_RESUME: cmd_resume(d, k, o); return;
	case PG_ADMIN_CLIENTS: cmd_clients(d, o); return;
	case PG_ADMIN_DISCONNECT: cmd_disconnect(d, k, o); return;
	case PG_ADMIN_LOGLEVEL: cmd_loglevel(d, k, o); return;
	case PG_ADMIN_STATS_RESET: cmd_stats_reset(d, k, o); return;
	case PG_ADMIN_HEALTH: cmd_health(d, o); return;
	case PG_ADMIN_FAULT: cmd_fault(d, k, o); return;
	}
	answer(o, "?", EINVAL, NULL, "unknown admin command %u (this pagodad knows 1 to %d)",
	       q->cmd, PG_ADMIN_CMD_MAX - 1);
}

/* ---- connections ---- */

/* Whether gid is among the groups in /proc/PID/status (the fallback). */
static int proc_in_group(pid_t pid, gid_t gid)
{
	char path[64], line[4096];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = line + 7, *end;

		if (strncmp(line, "Groups:", 7))
			continue;
		for (;;) {
			unsigned long v = strtoul(p, &end, 10);

			if (end == p)
				break;
			found |= (gid_t)v == gid;
			p = end;
		}
	}
	fclose(f);
	return found;
}

static int peer_in_group(int fd, const struct ucred *cr, gid_t gid)
{
	if (cr->gid == gid)
		return 1;
#ifdef SO_PEERGROUPS
	{
		gid_t groups[256];
		socklen_t len = sizeof(groups);

		if (!getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
			for (size_t i = 0; i < len / sizeof(gid_t); i++)
				if (groups[i] == gid)
					return 1;
			return 0;
		}
	}
#else
	(void)fd;
#endif
	return proc_in_group(cr->pid, gid);
}

static int authorized(const struct pgd_admin *a, int fd, const struct ucred *cr)
{
	if (cr->uid == 0 || cr->uid == geteuid())
		return 1;
	return a->gid != (gid_t)-1 && peer_in_group(fd, cr, a->gid);
}

/*
 * Answer the peer on fd at once, without reading its request, and close:
 * a short answer fits any socket buffer.
 */
static void answer_now(int fd, pid_t pid, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void answer_now(int fd, pid_t pid, int status, const char *fmt, ...)
{
	struct {
		struct pg_admin_reply h;
		char text[400];
	} r = { .h = { .magic = PG_ADMIN_MAGIC, .version = PG_ADMIN_VERSION,
		       .status = status } };
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(r.text, sizeof(r.text), fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(r.text))
		n = (int)sizeof(r.text) - 1;
	r.h.len = (uint32_t)n;
	if (send(fd, &r, sizeof(r.h) + (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		pgd_log(PGD_LOG_DEBUG, "admin: cannot answer pid %d: %s", (int)pid, strerror(errno));
	close(fd);
}

static void refuse(const struct pgd_admin *a, int fd, const struct ucred *cr)
{
	pgd_log(PGD_LOG_INFO, "admin: refused pid %d uid %u: not root nor in the admin group",
		(int)cr->pid, (unsigned)cr->uid);
	if (a->group[0])
		answer_now(fd, cr->pid, EACCES,
			   "permission denied: pagodad's admin commands are for root and the group '%s'; uid %u is not in it (add the user to '%s', e.g. usermod -aG %s USER, then log in again)\n",
			   a->group, (unsigned)cr->uid, a->group, a->group);
	else
		answer_now(fd, cr->pid, EACCES,
			   "permission denied: pagodad's admin commands are for root only (no admin group: create the group '%s', or start pagodad with --admin-group GROUP)\n",
			   PGD_DEFAULT_ADMIN_GROUP);
}

static struct conn *free_conn(struct pgd_admin *a)
{
	for (int i = 0; i < MAX_CONN; i++)
		if (a->conn[i].state == CONN_FREE)
			return &a->conn[i];
	return NULL;
}

static void on_accept(struct pgd *d, int res)
{
	struct pgd_admin *a = d->admin;
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct conn *k;

	a->accept_armed = 0;
	arm_accept(d);
	if (res < 0) {
		if (res != -EINTR && res != -ECONNABORTED && res != -EAGAIN && res != -ECANCELED)
			pgd_log(PGD_LOG_WARN, "admin: accept: %s", strerror(-res));
		return;
	}
	if (getsockopt(res, SOL_SOCKET, SO_PEERCRED, &cr, &len)) {
		close(res);
		return;
	}
	if (!authorized(a, res, &cr)) {
		refuse(a, res, &cr);
		return;
	}
	k = free_conn(a);
	if (!k) {
		pgd_log(PGD_LOG_WARN, "admin: %d connections already: pid %d must retry", MAX_CONN, (int)cr.pid);
		answer_now(res, cr.pid, EBUSY, "pagodad is serving %d admin connections already: retry in a few seconds\n",
			   MAX_CONN);
		return;
	}
	memset(k, 0, sizeof(*k));
	k->fd = res;
	k->serial = ++a->next_serial;
	k->uid = cr.uid;
	k->pid = cr.pid;
	k->state = CONN_READ;
	if (arm_linked(d, k, SUB_READ, &k->req, sizeof(k->req), &a->read_ts))
		conn_close(k);
}

static void on_read(struct pgd *d, struct conn *k, int res)
{
	struct out o = { 0 };

	if (res != (int)sizeof(k->req)) {
		pgd_log(PGD_LOG_DEBUG, "admin: pid %d sent no whole request within %d s: closed",
			(int)k->pid, READ_TIMEOUT_S);
		conn_close(k);
		return;
	}
	o.json = !!(k->req.flags & PG_ADMIN_F_JSON);
	k->json = o.json;
	k->fault_arm = 0;
	run_command(d, k, &o);
	pgd_stats_admin_command(d->stats);
	pgd_stats_tick(d, 1);	/* what the command did is in the figures */
	if (k->state == CONN_WAIT) {
		free(o.buf);
		return;
	}
	reply(d, k, &o);
	if (k->fault_arm)
		pg_fault_arm(k->fault_arm);	/* FAULT: from the next allocation on */
}

static void on_send(struct pgd *d, struct conn *k, int res)
{
	if (res > 0)
		k->out_sent += (size_t)res;
	if (res <= 0 || k->out_sent >= k->out_len) {
		conn_close(k);
		return;
	}
	if (arm_linked(d, k, SUB_SEND, k->out + k->out_sent, k->out_len - k->out_sent,
		       &d->admin->send_ts))
		conn_close(k);
}

void pgd_admin_on_cqe(struct pgd *d, uint64_t ud, int res)
{
	struct pgd_admin *a = d->admin;
	enum sub_op op = (enum sub_op)((ud >> 48) & 0xff);
	uint32_t slot = ud & 0xffff, serial = (uint32_t)(ud >> 16);
	struct conn *k;

	if (!a)
		return;
	if (op == SUB_ACCEPT) {
		on_accept(d, res);
		return;
	}
	if ((op != SUB_READ && op != SUB_SEND) || slot >= MAX_CONN)
		return;
	k = &a->conn[slot];
	if (k->serial != serial)
		return;
	if (op == SUB_READ && k->state == CONN_READ)
		on_read(d, k, res);
	else if (op == SUB_SEND && k->state == CONN_SEND)
		on_send(d, k, res);
}

void pgd_admin_tick(struct pgd *d)
{
	struct pgd_admin *a = d->admin;
	int idle = -1;

	if (!a)
		return;
	if (!a->accept_armed)
		arm_accept(d);
	for (int i = 0; i < MAX_CONN; i++) {
		struct conn *k = &a->conn[i];
		struct out o = { .json = k->json };

		if (k->state != CONN_WAIT)
			continue;
		if (idle < 0)
			idle = pgd_idle(d);
		if (!d->draining)
			answer(&o, "drain", ECANCELED, NULL, "resumed before the engine became idle: no longer draining");
		else if (idle)
			answer_drained(d, &o);
		else
			continue;
		reply(d, k, &o);
	}
}

/* ---- the socket ---- */

/*
 * The admin group: --admin-group (a name or a number, which must exist),
 * else PGD_DEFAULT_ADMIN_GROUP when it exists, else none (root only).
 */
int pgd_admin_group_lookup(const char *given, gid_t *gid, char *name, size_t name_len,
			   char *err, size_t err_len)
{
	struct group *g = getgrnam(given ? given : PGD_DEFAULT_ADMIN_GROUP);
	char *end;
	unsigned long v;

	*gid = (gid_t)-1;
	if (name_len)
		name[0] = '\0';
	if (!g && given && *given >= '0' && *given <= '9') {
		v = strtoul(given, &end, 10);
		if (!*end && v < UINT_MAX)
			g = getgrgid((gid_t)v);
	}
	if (g) {
		*gid = g->gr_gid;
		snprintf(name, name_len, "%s", g->gr_name);
		return 0;
	}
	if (given) {
		snprintf(err, err_len, "--admin-group: no group '%s' (create it with groupadd, or give a group that exists)",
			 given);
		return -1;
	}
	return 0;
}

static int admin_gid(struct pgd_admin *a, const char *given, char *err, size_t err_len)
{
	return pgd_admin_group_lookup(given, &a->gid, a->group, sizeof(a->group), err, err_len);
}

/* Remove a socket file no daemon listens on; refuse to take a live one. */
static int clear_stale(const struct sockaddr_un *addr, char *err, size_t err_len)
{
	struct stat st;
	int fd, live;

	if (lstat(addr->sun_path, &st))
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, err_len, "%s exists and is not a socket: remove it or choose another --admin-socket",
			 addr->sun_path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	live = fd >= 0 && !connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
	if (fd >= 0)
		close(fd);
	if (live) {
		snprintf(err, err_len, "another pagodad listens on the admin socket %s: stop it, or choose another --admin-socket",
			 addr->sun_path);
		return -1;
	}
	if (unlink(addr->sun_path) && errno != ENOENT) {
		snprintf(err, err_len, "cannot replace the admin socket %s: %s", addr->sun_path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Group and mode: 0660 in the admin group, else 0600. */
static int socket_perms(struct pgd_admin *a, int given, char *err, size_t err_len)
{
	unsigned mode = 0600;

	if (a->gid != (gid_t)-1) {
		if (!chown(a->path, (uid_t)-1, a->gid)) {
			mode = 0660;
		} else if (given) {
			snprintf(err, err_len, "cannot give %s to group %s: %s (run pagodad as root or as a member of the group)",
				 a->path, a->group, strerror(errno));
			return -1;
		} else {
			pgd_log(PGD_LOG_WARN, "admin: cannot give %s to group %s: %s; only root may administer",
				a->path, a->group, strerror(errno));
			a->gid = (gid_t)-1;
			a->group[0] = '\0';
		}
	}
	if (chmod(a->path, mode)) {
		snprintf(err, err_len, "cannot set the mode of %s: %s", a->path, strerror(errno));
		return -1;
	}
	pgd_log(PGD_LOG_INFO, "admin socket %s (mode %04o%s%s)", a->path, mode,
		a->group[0] ? ", group " : ", root only", a->group);
	return 0;
}

static int admin_listen(struct pgd *d, struct pgd_admin *a, char *err, size_t err_len)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old_mask;
	int rc;

	memcpy(addr.sun_path, a->path, strlen(a->path) + 1);
	if (clear_stale(&addr, err, err_len))
		return -1;
	a->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (a->listen_fd < 0) {
		snprintf(err, err_len, "cannot create the admin socket: %s", strerror(errno));
		return -1;
	}
	old_mask = umask(0177);	/* nobody gets in before the mode is set */
	rc = bind(a->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old_mask);
	if (rc) {
		snprintf(err, err_len, "cannot bind the admin socket %s: %s", a->path, strerror(errno));
		return -1;
	}
	if (!stat(a->path, &st)) {
		a->sock_dev = st.st_dev;
		a->sock_ino = st.st_ino;
	}
	if (socket_perms(a, d->cfg->admin_group != NULL, err, err_len))
		return -1;
	if (listen(a->listen_fd, 16)) {
		snprintf(err, err_len, "cannot listen on %s: %s", a->path, strerror(errno));
		return -1;
	}
	return 0;
}

/* The path: --admin-socket, else beside the client socket; 1 for none. */
static int admin_path(const struct pgd_config *cfg, char *out, size_t len,
		      char *err, size_t err_len)
{
	const char *p = cfg->admin_socket;

	if (p && !strcmp(p, "none"))
		return 1;
	if (p ? (size_t)snprintf(out, len, "%s", p) < len
	      : !pg_stats_path_beside(cfg->socket_path, "-admin.sock", out, len))
		return 0;
	snprintf(err, err_len, "--admin-socket: the path is longer than %zu bytes", len - 1);
	return -1;
}

int pgd_admin_open(struct pgd *d, char *err, size_t err_len)
{
	struct pgd_admin *a = calloc(1, sizeof(*a));
	int rc;

	if (!a) {
		snprintf(err, err_len, "out of memory for the admin socket");
		return -1;
	}
	a->listen_fd = -1;
	for (int i = 0; i < MAX_CONN; i++)
		a->conn[i].fd = -1;
	a->read_ts.tv_sec = READ_TIMEOUT_S;
	a->send_ts.tv_sec = SEND_TIMEOUT_S;
	rc = admin_path(d->cfg, a->path, sizeof(a->path), err, err_len);
	if (rc) {
		free(a);
		return rc < 0 ? -1 : 0;
	}
	pgd_make_parent_dir(a->path);
	if (admin_gid(a, d->cfg->admin_group, err, err_len) ||
	    admin_listen(d, a, err, err_len)) {
		if (a->listen_fd >= 0)
			close(a->listen_fd);
		free(a);
		return -1;
	}
	d->admin = a;
	arm_accept(d);
	return 0;
}

const char *pgd_admin_path(const struct pgd_admin *a)
{
	return a ? a->path : "";
}

const char *pgd_admin_group(const struct pgd_admin *a)
{
	return a ? a->group : "";
}

gid_t pgd_admin_gid(const struct pgd_admin *a)
{
	return a ? a->gid : (gid_t)-1;
}

void pgd_admin_close(struct pgd *d)
{
	struct pgd_admin *a = d->admin;
	struct stat st;

	if (!a)
		return;
	for (int i = 0; i < MAX_CONN; i++) {
		struct conn *k = &a->conn[i];

		if (k->state == CONN_WAIT) {
			static const char msg[] = "pagodad stopped before the engine became idle\n";
			struct pg_admin_reply h = { .magic = PG_ADMIN_MAGIC,
						    .version = PG_ADMIN_VERSION,
						    .status = ESHUTDOWN,
						    .len = sizeof(msg) - 1 };
			struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)msg, sizeof(msg) - 1 } };
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };

			if (sendmsg(k->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
				pgd_log(PGD_LOG_DEBUG, "admin: a drain --wait did not hear of the stop");
		}
		if (k->state != CONN_FREE)
			conn_close(k);
	}
	if (a->listen_fd >= 0) {
		if (a->sock_ino && !stat(a->path, &st) && st.st_dev == a->sock_dev &&
		    st.st_ino == a->sock_ino)
			unlink(a->path);
		close(a->listen_fd);
	}
	free(a);
	d->admin = NULL;
}
