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
 * The commands act on the daemon through control.h alone (the engine's
 * eviction, the draining flag request.c checks, the clients' dead mark,
 * the statistics' baselines) and on the log level; each answer says what
 * was done, as text or as one JSON object.  The sockets are listen.h's,
 * the io_uring loop.h's.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/escape.h"
#include "daemon/admin.h"
#include "daemon/control.h"
#include "daemon/engine/fault.h"
#include "daemon/engine/kvcache.h"
#include "daemon/listen.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/server.h"
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
	struct pgd_listener listener;	/* listen.h */
	struct pgd *d;			/* the daemon it administers */
	struct pgd_loop *loop;		/* the daemon's (loop.h) */
	int owner;			/* its owner in the loop */
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

static uint64_t tag(const struct pgd_admin *a, enum sub_op op, uint32_t slot,
		    uint32_t serial)
{
	return pgd_loop_tag(a->owner, op, slot, serial);
}

static void arm_accept(struct pgd_admin *a)
{
	if (a->accept_armed || pgd_ctl_stopping(a->d))
		return;
	if (!pgd_loop_accept(a->loop, a->listener.fd, tag(a, SUB_ACCEPT, 0, 0)))
		a->accept_armed = 1;
}

/* An operation on k's socket, linked to a timeout (two free slots first). */
static int arm_linked(struct pgd_admin *a, struct conn *k, enum sub_op op,
		      void *buf, size_t len, struct __kernel_timespec *ts)
{
	uint32_t slot = (uint32_t)(k - a->conn);
	uint64_t ud = tag(a, op, slot, k->serial);
	struct io_uring_sqe *sqe;

	pgd_loop_reserve(a->loop, 2);
	sqe = pgd_loop_sqe(a->loop, ud);
	if (!sqe)
		return -1;
	if (op == SUB_READ)
		io_uring_prep_recv(sqe, k->fd, buf, len, MSG_WAITALL);
	else
		io_uring_prep_send(sqe, k->fd, buf, len, MSG_NOSIGNAL);
	sqe->user_data = ud;
	pgd_loop_link_timeout(a->loop, sqe, ts, tag(a, SUB_TIMEOUT, 0, 0));
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
static void reply(struct pgd_admin *a, struct conn *k, struct out *o)
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
	if (arm_linked(a, k, SUB_SEND, k->out, k->out_len, &a->send_ts))
		conn_close(k);
}

/* ---- commands ---- */

static const char *const by_names[] = { "all", "age", "pages", "client", "prefix" };

static int evict_prefix_ids(struct pgd *d, const struct pg_admin_request *q,
			    struct pg_kvc_evict *ev, struct out *o)
{
	const int32_t *ids;
	int cap;
	int64_t n = pgd_ctl_tokenize_prefix(d, q->text, q->text_len, &ids, &cap);

	if (n < 0) {
		answer(o, "evict", ENOMEM, NULL, "pagodad is out of memory tokenizing the prefix");
		return -1;
	}
	if (n < 1 || n > cap) {
		answer(o, "evict", EINVAL, NULL, "the prefix gives %lld tokens: give 1 to %d",
		       (long long)n, cap);
		return -1;
	}
	ev->prefix = ids;
	ev->n_prefix = (int)n;
	return 0;
}

static void cmd_evict(struct pgd *d, const struct pg_admin_request *q, struct out *o)
{
	struct pg_kvc_evict ev = { .by = PG_KVC_EVICT_ALL };
	struct pgd_ctl_load st;
	const char *why = "";
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
	n = pgd_ctl_evict(d, &ev, &why);
	if (n < 0) {
		answer(o, "evict", EINVAL, NULL, "evict: %s", why);
		return;
	}
	pgd_ctl_load(d, &st);
	snprintf(fields, sizeof(fields),
		 "\"by\":\"%s\",\"evicted_pages\":%d,\"evicted_tokens\":%lld,\"cached_pages\":%d,\"used_pages\":%d,\"free_pages\":%d",
		 by_names[q->evict_by], n, (long long)n * st.page_tokens,
		 st.kv_cached, st.kv_used, st.kv_free);
	pgd_log(PGD_LOG_INFO, "admin: evicted %d cached pages (%s)", n, by_names[q->evict_by]);
	answer(o, "evict", 0, fields,
	       "evicted %d pages (%lld tokens) by %s; now %d cached, %d used, %d free of %d",
	       n, (long long)n * st.page_tokens, by_names[q->evict_by],
	       st.kv_cached, st.kv_used, st.kv_free, st.kv_pages);
}

/* The engine's load, for drain and health answers (and JSON members). */
static void load_fields(struct pgd *d, char *buf, size_t len, int *running,
			int *waiting, int *inflight)
{
	struct pgd_ctl_load st;

	pgd_ctl_load(d, &st);
	*running = st.running;
	*waiting = st.waiting;
	*inflight = st.inflight;
	snprintf(buf, len, "\"draining\":%s,\"running\":%d,\"waiting\":%d,\"inflight\":%d,\"clients\":%d",
		 st.draining ? "true" : "false", *running, *waiting, *inflight, st.clients);
}

static void answer_drained(struct pgd_admin *a, struct out *o)
{
	char fields[256];
	int running, waiting, inflight;

	load_fields(a->d, fields, sizeof(fields), &running, &waiting, &inflight);
	answer(o, "drain", 0, fields, "drained: the engine is idle after %.1f s; new requests are refused until pagodactl resume",
	       pg_now_s() - a->drain_since);
}

static void cmd_drain(struct pgd_admin *a, struct conn *k, struct out *o)
{
	struct pgd *d = a->d;
	char fields[256];
	int running, waiting, inflight;

	if (!pgd_ctl_set_draining(d, 1)) {
		a->drain_since = pg_now_s();
		pgd_log(PGD_LOG_INFO, "admin: draining (uid %u): new requests are refused", (unsigned)k->uid);
	}
	if (k->req.flags & PG_ADMIN_F_WAIT) {
		if (pgd_ctl_idle(d)) {
			answer_drained(a, o);
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

static void cmd_resume(struct pgd_admin *a, const struct conn *k, struct out *o)
{
	char fields[64];
	int draining = pgd_ctl_set_draining(a->d, 0);
	double was = draining ? pg_now_s() - a->drain_since : 0;

	snprintf(fields, sizeof(fields), "\"was_draining\":%s", draining ? "true" : "false");
	if (!draining) {
		answer(o, "resume", 0, fields, "not draining: requests were already admitted");
		return;
	}
	pgd_log(PGD_LOG_INFO, "admin: resumed (uid %u) after draining %.1f s", (unsigned)k->uid, was);
	answer(o, "resume", 0, fields, "resumed: admitting requests again (drained for %.1f s)", was);
}

static void client_line(const struct pgd_ctl_client *c, struct out *o, int first)
{
	char comm[16], shown[16 * 4 + 1];
	char path[64];
	FILE *f;

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
			   c->inflight, (unsigned long long)c->requests,
			   (unsigned long long)c->tokens, c->connected_s);
		return;
	}
	out_printf(o, "%s{\"id\":%u,\"pid\":%d,\"uid\":%u,\"gid\":%u,\"comm\":", first ? "" : ",",
		   c->id, (int)c->pid, (unsigned)c->uid, (unsigned)c->gid);
	out_json_str(o, comm);
	out_printf(o, ",\"inflight\":%d,\"requests\":%llu,\"generated_tokens\":%llu,\"connected_s\":%.3f}",
		   c->inflight, (unsigned long long)c->requests,
		   (unsigned long long)c->tokens, c->connected_s);
}

static void cmd_clients(struct pgd *d, struct out *o)
{
	struct pgd_ctl_load st;
	struct pgd_ctl_client c;
	int rc, n = 0;

	pgd_ctl_load(d, &st);
	o->status = 0;
	if (o->json)
		out_printf(o, "{\"command\":\"clients\",\"ok\":true,\"status\":0,\"count\":%d,\"clients\":[",
			   st.clients);
	else
		out_printf(o, "%d clients connected\n%6s %8s %6s %-15s %8s %10s %12s %8s\n",
			   st.clients, "ID", "PID", "UID", "COMMAND", "INFLIGHT",
			   "REQUESTS", "TOKENS", "SECONDS");
	for (int i = 0; (rc = pgd_ctl_client_at(d, i, &c)) >= 0; i++)
		if (rc)
			client_line(&c, o, !n++);
	if (o->json)
		out_printf(o, "]}\n");
}

static void cmd_disconnect(struct pgd *d, const struct conn *k, struct out *o)
{
	const struct pg_admin_request *q = &k->req;
	struct pgd_ctl_client c;
	char fields[128];

	if (pgd_ctl_disconnect(d, q->arg, k->uid, &c)) {
		answer(o, "disconnect", ENOENT, NULL, "no client %llu is connected (pagodactl clients lists them)",
		       (unsigned long long)q->arg);
		return;
	}
	snprintf(fields, sizeof(fields), "\"id\":%u,\"pid\":%d,\"uid\":%u,\"inflight\":%d",
		 c.id, (int)c.pid, (unsigned)c.uid, c.inflight);
	pgd_log(PGD_LOG_INFO, "admin: client %u disconnected by uid %u", c.id, (unsigned)k->uid);
	answer(o, "disconnect", 0, fields, "client %u (pid %d, uid %u) disconnected; its %d requests in flight are cancelled",
	       c.id, (int)c.pid, (unsigned)c.uid, c.inflight);
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
	if (pgd_ctl_stats_reset(d)) {
		answer(o, "stats-reset", ENOENT, NULL, "pagodad publishes no statistics (--stats-path none): nothing to reset");
		return;
	}
	pgd_log(PGD_LOG_INFO, "admin: statistics reset by uid %u", (unsigned)k->uid);
	answer(o, "stats-reset", 0, NULL, "statistics reset: counters and histograms are zero (gauges stay as they are)");
}

static void cmd_health(struct pgd_admin *a, struct out *o)
{
	struct pgd *d = a->d;
	char fields[384], load[256];
	int running, waiting, inflight, errors;
	struct pgd_ctl_load st;
	double last;

	load_fields(d, load, sizeof(load), &running, &waiting, &inflight);
	pgd_ctl_load(d, &st);
	errors = pgd_ctl_engine_errors(d, HEALTH_WINDOW_S, &last);
	snprintf(fields, sizeof(fields), "%s,\"engine_errors\":%d", load, errors);
	if (st.stopping)
		answer(o, "health", ESHUTDOWN, fields, "unhealthy: pagodad is stopping");
	else if (st.draining)
		answer(o, "health", EBUSY, fields, "unhealthy: draining since %.1f s ago, new requests are refused (pagodactl resume)",
		       pg_now_s() - a->drain_since);
	else if (errors)
		answer(o, "health", EIO, fields, "unhealthy: the forward pass failed %d times in the last %.0f s (last %.1f s ago); see pagodad's log",
		       errors, HEALTH_WINDOW_S, last);
	else
		answer(o, "health", 0, fields, "healthy: serving %s; %d clients, %d running, %d waiting",
		       st.model, st.clients, running, waiting);
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

	if (!pgd_ctl_config(d)->fault_injection) {	/* PAGODA_FAULT_INJECTION (settings.c) */
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

static void run_command(struct pgd_admin *a, struct conn *k, struct out *o)
{
	struct pgd *d = a->d;
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
	case PG_ADMIN_DRAIN: cmd_drain(a, k, o); return;
	case PG_ADMIN_RESUME: cmd_resume(a, k, o); return;
	case PG_ADMIN_CLIENTS: cmd_clients(d, o); return;
	case PG_ADMIN_DISCONNECT: cmd_disconnect(d, k, o); return;
	case PG_ADMIN_LOGLEVEL: cmd_loglevel(d, k, o); return;
	case PG_ADMIN_STATS_RESET: cmd_stats_reset(d, k, o); return;
	case PG_ADMIN_HEALTH: cmd_health(a, o); return;
	case PG_ADMIN_FAULT: cmd_fault(d, k, o); return;
	}
	answer(o, "?", EINVAL, NULL, "unknown admin command %u (this pagodad knows 1 to %d)",
	       q->cmd, PG_ADMIN_CMD_MAX - 1);
}

/* ---- connections ---- */

static int authorized(const struct pgd_admin *a, int fd, const struct ucred *cr)
{
	if (cr->uid == 0 || cr->uid == geteuid())
		return 1;
	return a->gid != (gid_t)-1 && pgd_peer_in_group(fd, cr, a->gid);
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

static void on_accept(struct pgd_admin *a, int res)
{
	struct ucred cr;
	struct conn *k;

	a->accept_armed = 0;
	arm_accept(a);
	if (res < 0) {
		if (res != -EINTR && res != -ECONNABORTED && res != -EAGAIN && res != -ECANCELED)
			pgd_log(PGD_LOG_WARN, "admin: accept: %s", strerror(-res));
		return;
	}
	if (pgd_peer_cred(res, &cr)) {
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
	if (arm_linked(a, k, SUB_READ, &k->req, sizeof(k->req), &a->read_ts))
		conn_close(k);
}

static void on_read(struct pgd_admin *a, struct conn *k, int res)
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
	run_command(a, k, &o);
	pgd_ctl_answered(a->d);	/* what the command did is in the figures */
	if (k->state == CONN_WAIT) {
		free(o.buf);
		return;
	}
	reply(a, k, &o);
	if (k->fault_arm)
		pg_fault_arm(k->fault_arm);	/* FAULT: from the next allocation on */
}

static void on_send(struct pgd_admin *a, struct conn *k, int res)
{
	if (res > 0)
		k->out_sent += (size_t)res;
	if (res <= 0 || k->out_sent >= k->out_len) {
		conn_close(k);
		return;
	}
	if (arm_linked(a, k, SUB_SEND, k->out + k->out_sent, k->out_len - k->out_sent,
		       &a->send_ts))
		conn_close(k);
}

/* The admin socket's completions (loop.h). */
static void on_cqe(void *ctx, unsigned sub, uint32_t slot, uint32_t serial, int res)
{
	struct pgd_admin *a = ctx;
	enum sub_op op = (enum sub_op)sub;
	struct conn *k;

	if (op == SUB_ACCEPT) {
		on_accept(a, res);
		return;
	}
	if ((op != SUB_READ && op != SUB_SEND) || slot >= MAX_CONN)
		return;
	k = &a->conn[slot];
	if (k->serial != serial)
		return;
	if (op == SUB_READ && k->state == CONN_READ)
		on_read(a, k, res);
	else if (op == SUB_SEND && k->state == CONN_SEND)
		on_send(a, k, res);
}

void pgd_admin_tick(struct pgd_admin *a)
{
	int idle = -1;

	if (!a)
		return;
	if (!a->accept_armed)
		arm_accept(a);
	for (int i = 0; i < MAX_CONN; i++) {
		struct conn *k = &a->conn[i];
		struct out o = { .json = k->json };

		if (k->state != CONN_WAIT)
			continue;
		if (idle < 0)
			idle = pgd_ctl_idle(a->d);
		if (!pgd_ctl_draining(a->d))
			answer(&o, "drain", ECANCELED, NULL, "resumed before the engine became idle: no longer draining");
		else if (idle)
			answer_drained(a, &o);
		else
			continue;
		reply(a, k, &o);
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
	if (!pgd_listen_group(given ? given : PGD_DEFAULT_ADMIN_GROUP, given != NULL,
			      gid, name, name_len) || !given)
		return 0;
	snprintf(err, err_len, "--admin-group: no group '%s' (create it with groupadd, or give a group that exists)",
		 given);
	return -1;
}

static int admin_gid(struct pgd_admin *a, const char *given, char *err, size_t err_len)
{
	return pgd_admin_group_lookup(given, &a->gid, a->group, sizeof(a->group), err, err_len);
}

/* Group and mode: 0660 in the admin group, else 0600. */
static int socket_perms(struct pgd_admin *a, int given, char *err, size_t err_len)
{
	unsigned mode = 0600;

	if (a->gid != (gid_t)-1) {
		if (!pgd_listen_chown(&a->listener, a->gid)) {
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
	if (pgd_listen_chmod(&a->listener, mode)) {
		snprintf(err, err_len, "cannot set the mode of %s: %s", a->path, strerror(errno));
		return -1;
	}
	pgd_log(PGD_LOG_INFO, "admin socket %s (mode %04o%s%s)", a->path, mode,
		a->group[0] ? ", group " : ", root only", a->group);
	return 0;
}

static int admin_listen(const struct pgd_config *cfg, struct pgd_admin *a,
			char *err, size_t err_len)
{
	switch (pgd_listen_bind(&a->listener, a->path, NULL)) {
	case PGD_LISTEN_OK:
	case PGD_LISTEN_REMOVED_STALE:
		break;
	case PGD_LISTEN_TOO_LONG:	/* admin_path() checked it */
	case PGD_LISTEN_NOT_SOCKET:
		snprintf(err, err_len, "%s exists and is not a socket: remove it or choose another --admin-socket",
			 a->path);
		return -1;
	case PGD_LISTEN_LIVE:
		snprintf(err, err_len, "another pagodad listens on the admin socket %s: stop it, or choose another --admin-socket",
			 a->path);
		return -1;
	case PGD_LISTEN_REPLACE:
		snprintf(err, err_len, "cannot replace the admin socket %s: %s", a->path, strerror(errno));
		return -1;
	case PGD_LISTEN_SOCKET:
		snprintf(err, err_len, "cannot create the admin socket: %s", strerror(errno));
		return -1;
	case PGD_LISTEN_BIND:
		snprintf(err, err_len, "cannot bind the admin socket %s: %s", a->path, strerror(errno));
		return -1;
	}
	if (socket_perms(a, cfg->admin_group != NULL, err, err_len))
		return -1;
	if (pgd_listen_start(&a->listener, 16)) {
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

int pgd_admin_open(struct pgd *d, struct pgd_admin **out, char *err, size_t err_len)
{
	const struct pgd_config *cfg = pgd_ctl_config(d);
	struct pgd_admin *a = calloc(1, sizeof(*a));
	int rc;

	*out = NULL;
	if (!a) {
		snprintf(err, err_len, "out of memory for the admin socket");
		return -1;
	}
	pgd_listener_init(&a->listener);
	for (int i = 0; i < MAX_CONN; i++)
		a->conn[i].fd = -1;
	a->read_ts.tv_sec = READ_TIMEOUT_S;
	a->send_ts.tv_sec = SEND_TIMEOUT_S;
	rc = admin_path(cfg, a->path, sizeof(a->path), err, err_len);
	if (rc) {
		free(a);
		return rc < 0 ? -1 : 0;
	}
	if (admin_gid(a, cfg->admin_group, err, err_len) ||
	    admin_listen(cfg, a, err, err_len)) {
		pgd_listen_close(&a->listener);
		free(a);
		return -1;
	}
	a->d = d;
	a->loop = pgd_ctl_loop(d);
	a->owner = pgd_loop_register(a->loop, "admin: ", on_cqe, a);
	*out = a;
	arm_accept(a);
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

void pgd_admin_close(struct pgd_admin *a)
{
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
	pgd_listen_close(&a->listener);
	free(a);
}
