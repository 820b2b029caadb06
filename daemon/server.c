/*
 * server.c - pagodad serving clients: the Unix socket and its handshake,
 * and the one daemon thread that runs both the io_uring loop and the
 * engine (the engine is single-threaded; the forward pass has its own
 * device threads).
 *
 * The loop, one iteration:
 *   1. reap the io_uring's completions without blocking (accepts, hellos,
 *      hang-ups, clients' exits (pidfds), doorbells, signals): no system
 *      call;
 *   2. for every client: move its backlog into its completion ring, drain
 *      its submission ring (request.c), publish its completions (PONG and
 *      errors go out in this same iteration);
 *   3. when the engine has work, one pg_engine_step(), whose events become
 *      completions, then one publication per client;
 *   4. close the clients marked dead; submit queued io_uring operations
 *      (only when something above queued one).
 * With nothing to do it polls for --spin-us, then advertises sleep on
 * every submission ring (pg_ring_prepare_sleep) and, if all may sleep,
 * waits in io_uring_submit_and_wait for any doorbell, hang-up, client
 * exit, accept or signal (and a 1 ms timer while a client's backlog waits
 * for room).
 * While busy nothing here makes a system call per request: a client
 * rings its doorbell only when the daemon said it sleeps, and the daemon
 * rings a client only when the client said so.
 *
 * Requests and completions are request.c's and session.c's; access rules
 * are access.c's (and reload.c's, which sets them); the io_uring, its tags
 * and their dispatch loop.c's; the socket file and peer credentials
 * listen.c's; the tokenizing workers' eventfd tokwork.c's; the statistics'
 * publications go through control.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spin.h"
#include "daemon/admin.h"
#include "daemon/control.h"
#include "daemon/daemon.h"
#include "daemon/engine/chat.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/engine/tokenizer.h"
#include "daemon/listen.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/notify.h"
#include "daemon/stats.h"

/* Seconds a new connection has to send its hello. */
#define PGD_HELLO_TIMEOUT_S 1

/* How long to sleep at most while a client's backlog waits for room. */
#define PGD_BACKLOG_POLL_NS 1000000

int pgd_block_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		return -errno;
	return -pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/*
 * ---- io_uring operations (loop.h): op is the kind, gen the connection's
 * serial, index its slot ----
 */

enum op_kind {
	OP_ACCEPT = 1,
	OP_HELLO,		/* slot: handshake */
	OP_HELLO_TIMEOUT,
	OP_HUP,			/* slot: client */
	OP_BELL,		/* a read of the submission doorbell */
	OP_BELL_POLL,		/* a poll of it, where reads would not wait */
	OP_SIGNAL,
	OP_CANCEL,
	OP_WAKE,		/* a write to a client's completion doorbell */
	OP_WATCHDOG,		/* time for the service manager's ping */
	OP_EXIT,		/* slot: client; its pidfd's poll */
};

static uint64_t tag(const struct pgd *d, enum op_kind k, uint32_t slot, uint64_t serial)
{
	return pgd_loop_tag(d->loop_owner, k, slot, (uint32_t)serial);
}

static struct io_uring_sqe *get_sqe(struct pgd *d, uint64_t user_data)
{
	return pgd_loop_sqe(&d->loop, user_data);
}

static void arm_accept(struct pgd *d)
{
	if (d->accept_armed || d->stop_signal)	/* on_accept() makes room */
		return;
	/* blocking sockets: the io_uring then waits for the hello on any kernel */
	if (!pgd_loop_accept(&d->loop, d->listener.fd, tag(d, OP_ACCEPT, 0, 0)))
		d->accept_armed = 1;
}

static void arm_signal(struct pgd *d)
{
	struct io_uring_sqe *sqe = get_sqe(d, tag(d, OP_SIGNAL, 0, 0));

	if (sqe) {
		io_uring_prep_read(sqe, d->sig_fd, &d->sig_buf, sizeof(d->sig_buf), 0);
		sqe->user_data = tag(d, OP_SIGNAL, 0, 0);
	}
}

/*
 * The watchdog's timer: the ping goes out when the loop reaps it, so a
 * loop that hangs stops pinging and systemd restarts the daemon.
 */
static void arm_watchdog(struct pgd *d)
{
	struct io_uring_sqe *sqe;

	if (!d->watchdog_ts.tv_sec && !d->watchdog_ts.tv_nsec)
		return;
	sqe = get_sqe(d, tag(d, OP_WATCHDOG, 0, 0));
	if (sqe) {
		io_uring_prep_timeout(sqe, &d->watchdog_ts, 0, 0);
		sqe->user_data = tag(d, OP_WATCHDOG, 0, 0);
	}
}

static void arm_hup(struct pgd *d, struct pgd_client *c)
{
	uint64_t ud = tag(d, OP_HUP, c->slot, c->serial);
	struct io_uring_sqe *sqe = get_sqe(d, ud);

	if (!sqe)
		return;
	io_uring_prep_poll_add(sqe, c->sock, POLLRDHUP | POLLHUP | POLLERR);
	sqe->user_data = ud;
	c->hup_armed = 1;
}

/* The client's process exiting: its pidfd polls readable. */
static void arm_exit(struct pgd *d, struct pgd_client *c)
{
	uint64_t ud = tag(d, OP_EXIT, c->slot, c->serial);
	struct io_uring_sqe *sqe;

	if (c->pidfd < 0)
		return;
	sqe = get_sqe(d, ud);
	if (!sqe)
		return;
	io_uring_prep_poll_add(sqe, c->pidfd, POLLIN);
	sqe->user_data = ud;
	c->exit_armed = 1;
}

static void arm_bell(struct pgd *d, struct pgd_client *c)
{
	enum op_kind k = d->bell_poll ? OP_BELL_POLL : OP_BELL;
	uint64_t ud = tag(d, k, c->slot, c->serial);
	struct io_uring_sqe *sqe;

	if (c->bell_armed)
		return;
	sqe = get_sqe(d, ud);
	if (!sqe)
		return;
	if (d->bell_poll)
		io_uring_prep_poll_add(sqe, c->sq_bell, POLLIN);
	else
		io_uring_prep_read(sqe, c->sq_bell, &d->bell_buf[c->slot],
				   sizeof(d->bell_buf[0]), 0);
	sqe->user_data = ud;
	c->bell_armed = 1;
}

static void cancel_op(struct pgd *d, uint64_t ud)
{
	pgd_loop_cancel(&d->loop, ud, tag(d, OP_CANCEL, 0, 0));
}

/* ---- the socket (listen.c) ---- */

/*
 * Whether a pagodad answers on the socket at addr: connecting is not
 * proof, since a daemon killed a moment ago may leave its listening socket
 * open while the kernel tears its io_uring down; a live one answers a
 * hello within its loop's next turn.
 */
static int daemon_answers(const struct sockaddr_un *addr)
{
	struct pg_hello h = { .magic = PG_PROTO_MAGIC, .version = PG_PROTO_VERSION };
	struct timeval tv = { .tv_sec = 2 };
	struct pg_welcome w;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), live = 0;

	if (fd < 0)
		return 0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) &&
	    send(fd, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h) &&
	    recv(fd, &w, sizeof(w), MSG_WAITALL) == (ssize_t)sizeof(w))
		live = w.magic == PG_PROTO_MAGIC;
	close(fd);	/* fds that came with a welcome were not accepted: gone */
	return live;
}

/*
 * The socket's group: --socket-group (a name or a number), else the
 * "pagoda" group when it exists.  *given: it was asked for explicitly.
 * Returns 0 (gid (gid_t)-1: leave the daemon's), or -1 with a message.
 */
static int socket_gid(const struct pgd_config *cfg, gid_t *gid, int *given,
		      char *err, size_t err_len)
{
	const char *name = cfg->socket_group ? cfg->socket_group : PGD_DEFAULT_GROUP;

	*given = cfg->socket_group != NULL;
	if (!pgd_listen_group(name, *given ? 2 : 0, gid, NULL, 0) || !*given)
		return 0;
	snprintf(err, err_len, "--socket-group: no group named '%s' (create it, or give a group name or id that exists)",
		 name);
	return -1;
}

/* Give the socket file its group and mode. */
static int socket_perms(const struct pgd_config *cfg, const struct pgd_listener *l,
			char *err, size_t err_len)
{
	gid_t gid;
	int given;

	if (socket_gid(cfg, &gid, &given, err, err_len))
		return -1;
	if (pgd_listen_chown(l, gid)) {
		if (given) {
			snprintf(err, err_len, "cannot give %s to group %u: %s (run pagodad as root or as a member of the group, or choose another --socket-group)",
				 l->path, (unsigned)gid, strerror(errno));
			return -1;
		}
		pgd_log(PGD_LOG_WARN, "cannot give %s to group %s: %s; it keeps the daemon's group",
			l->path, PGD_DEFAULT_GROUP, strerror(errno));
	}
	if (pgd_listen_chmod(l, cfg->socket_mode)) {
		snprintf(err, err_len, "cannot set the mode of %s: %s", l->path, strerror(errno));
		return -1;
	}
	return 0;
}

static int listen_socket(struct pgd *d, char *err, size_t err_len)
{
	const char *path = d->cfg->socket_path;
	struct pgd_listener *l = &d->listener;

	switch (pgd_listen_bind(l, path, daemon_answers)) {
	case PGD_LISTEN_OK:
		break;
	case PGD_LISTEN_REMOVED_STALE:
		pgd_log(PGD_LOG_INFO, "removed the stale socket %s", path);
		break;
	case PGD_LISTEN_TOO_LONG:
		snprintf(err, err_len, "--socket %s: the path is longer than %zu bytes",
			 path, sizeof(l->path) - 1);
		return -1;
	case PGD_LISTEN_NOT_SOCKET:
		snprintf(err, err_len, "%s exists and is not a socket: remove it or choose another --socket", path);
		return -1;
	case PGD_LISTEN_LIVE:
		snprintf(err, err_len, "another pagodad is already serving %s: stop it first, or choose another --socket", path);
		return -1;
	case PGD_LISTEN_REPLACE:
		snprintf(err, err_len, "cannot replace the socket %s: %s", path, strerror(errno));
		return -1;
	case PGD_LISTEN_SOCKET:
		snprintf(err, err_len, "cannot create a socket: %s", strerror(errno));
		return -1;
	case PGD_LISTEN_BIND:
		snprintf(err, err_len, "cannot bind %s: %s", path, strerror(errno));
		return -1;
	}
	if (socket_perms(d->cfg, l, err, err_len))
		return -1;
	if (pgd_listen_start(l, 128)) {
		snprintf(err, err_len, "cannot listen on %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- the handshake ---- */

static int send_welcome(int fd, const struct pg_welcome *w, const int *fds,
			int n_fds)
{
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)w, .iov_len = sizeof(*w) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	if (n_fds) {
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)n_fds * sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(*w) ? 0 : -1;
}

/* Refusals logged in one second at most (a flood of refused connections
   must not flood the log); the rest are counted. */
#define PGD_REFUSALS_LOGGED 20

static void log_refusal(const struct ucred *cr, const char *msg)
{
	static time_t second;	/* the daemon's one loop is the only caller */
	static int n, n_quiet;
	time_t now = time(NULL);

	if (now != second) {
		if (n_quiet)
			pgd_log(PGD_LOG_INFO, "%d more refusals were not logged (at most %d a second)",
				n_quiet, PGD_REFUSALS_LOGGED);
		second = now;
		n = n_quiet = 0;
	}
	if (n++ < PGD_REFUSALS_LOGGED)
		pgd_log(PGD_LOG_INFO, "refused pid %d uid %u: %s", (int)cr->pid,
			(unsigned)cr->uid, msg);
	else
		n_quiet++;
}

static void refuse(int fd, const struct ucred *cr, enum pg_error status,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void refuse(int fd, const struct ucred *cr, enum pg_error status,
		   const char *fmt, ...)
{
	struct pg_welcome w = { .magic = PG_PROTO_MAGIC,
				.version = PG_PROTO_VERSION,
				.status = status };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w.message, sizeof(w.message), fmt, ap);
	va_end(ap);
	log_refusal(cr, w.message);
	send_welcome(fd, &w, NULL, 0);
	close(fd);
}

/* The peer's groups: its primary group and, where the kernel says, the rest. */
static int peer_groups(int fd, gid_t primary, gid_t *gids, int max)
{
	int n = pgd_peer_groups(fd, gids + 1, max - 1);

	gids[0] = primary;
	return (n < 0 ? 0 : n) + 1;
}

static int free_slot(const struct pgd *d)
{
	for (int i = 0; i < d->cfg->max_clients; i++)
		if (!d->slots[i])
			return i;
	return -1;
}

static void add_client(struct pgd *d, struct pgd_client *c)
{
	d->slots[c->slot] = c;
	d->live[d->n_live++] = c;
	pgd_stats_client_join(d->stats, c->slot, c->id, c->pid);
	arm_hup(d, c);
	arm_exit(d, c);
	arm_bell(d, c);
	pgd_log(PGD_LOG_INFO, "client %u connected: pid %d uid %u gid %u (%d connected)",
		c->id, (int)c->pid, (unsigned)c->uid, (unsigned)c->gid, d->n_live);
}

/*
 * Refuse the peer on fd before its hello: what of the hello has come is
 * read first, so that the peer's socket is not reset under the refusal.
 */
static void refuse_early(int fd, const struct ucred *cr, enum pg_error status,
			 const char *msg)
{
	struct pg_hello h;

	if (recv(fd, &h, sizeof(h), MSG_DONTWAIT) < 0 && errno != EAGAIN)
		pgd_log(PGD_LOG_DEBUG, "pid %d: reading its hello: %s", (int)cr->pid,
			strerror(errno));
	refuse(fd, cr, status, "%s", msg);
}

/* Whether hello h is one this daemon speaks; else refuses fd and says so. */
static int hello_ok(int fd, const struct ucred *cr, const struct pg_hello *h)
{
	if (h->magic != PG_PROTO_MAGIC) {
		refuse(fd, cr, PG_EPROTO, "the peer does not speak pagoda's protocol (magic 0x%08x, expected 0x%08x)",
		       h->magic, PG_PROTO_MAGIC);
		return 0;
	}
	if (h->version != PG_PROTO_VERSION) {
		refuse(fd, cr, PG_EVERSION, "protocol version mismatch: the client speaks version %u, pagodad speaks version %u; use a libpagoda of version %u",
		       h->version, PG_PROTO_VERSION, PG_PROTO_VERSION);
		return 0;
	}
	if (h->flags) {
		refuse(fd, cr, PG_EVERSION, "the hello asks for flags 0x%x, which pagodad (protocol version %u) does not know: use a libpagoda of version %u, which sends none",
		       h->flags, PG_PROTO_VERSION, PG_PROTO_VERSION);
		return 0;
	}
	if (h->reserved) {
		refuse(fd, cr, PG_EPROTO, "the hello's reserved field is 0x%x, not 0: the client is broken; use libpagoda",
		       h->reserved);
		return 0;
	}
	return 1;
}

static void close_dead(struct pgd *d);

/*
 * reap_hung_up - every slot is taken: a client that closed its socket a
 * moment ago may not have been seen yet (its hang-up poll completes in a
 * later loop iteration), so ask each socket now, and let those that are
 * gone make room rather than refuse a client that connects right after
 * another left.
 */
static void reap_hung_up(struct pgd *d)
{
	for (int i = 0; i < d->n_live; i++) {
		struct pgd_client *c = d->live[i];
		struct pollfd pf = { .fd = c->sock, .events = POLLRDHUP };

		if (c->dead || poll(&pf, 1, 0) != 1 ||
		    !(pf.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			continue;
		c->hung_up = 1;
		pgd_mark_dead(d, c, PG_OK, "hung up");
	}
}

/* Admit (or refuse) the peer cr on fd that sent hello h (access checked). */
static void handshake(struct pgd *d, int fd, const struct ucred *cr,
		      const struct pg_hello *h)
{
	struct pg_welcome w = { .magic = PG_PROTO_MAGIC, .version = PG_PROTO_VERSION };
	struct pgd_client *c;
	char err[224];
	int slot, fds[3];

	if (!hello_ok(fd, cr, h))
		return;
	slot = free_slot(d);
	if (slot < 0)
		reap_hung_up(d);
	if (slot < 0 && d->n_dead) {	/* a client that just left makes room */
		close_dead(d);
		slot = free_slot(d);
	}
	if (slot < 0) {
		refuse(fd, cr, PG_ECLIENTS, "pagodad already serves %d clients (--max-clients %d): try again later, or raise --max-clients",
		       d->n_live, d->cfg->max_clients);
		return;
	}
	c = pgd_session_create(d, slot, fd, cr->pid, cr->uid, cr->gid, err, sizeof(err));
	if (!c) {
		refuse(fd, cr, PG_ENOMEM, "%s", err);
		return;
	}
	c->pidfd = pgd_peer_pidfd(fd, &d->no_pidfd);
	w.client_id = c->id;
	w.generation = d->generation;
	w.seg_bytes = c->seg_bytes;
	fds[0] = c->memfd;
	fds[1] = c->sq_bell;
	fds[2] = c->cq_bell;
	if (send_welcome(fd, &w, fds, 3)) {
		pgd_log(PGD_LOG_WARN, "cannot send the welcome to pid %d: %s", (int)cr->pid, strerror(errno));
		pgd_session_destroy(c);
		return;
	}
	close(c->memfd);	/* the mapping and the client's fd keep it */
	c->memfd = -1;
	add_client(d, c);
}

/*
 * The peer's credentials, checked against the access rules before it may
 * take anything: 0, or -1 after refusing (or closing) fd.
 */
static int admit_peer(struct pgd *d, int fd, struct ucred *cr)
{
	gid_t gids[256];
	char msg[224];
	int n_gids;

	if (pgd_peer_cred(fd, cr)) {
		pgd_log(PGD_LOG_WARN, "cannot read a peer's credentials: %s", strerror(errno));
		close(fd);
		return -1;
	}
	n_gids = peer_groups(fd, cr->gid, gids, 256);
	if (pgd_access_allowed(&d->access, cr->uid, gids, n_gids))
		return 0;
	snprintf(msg, sizeof(msg), "uid %u is not allowed by pagodad's access rules: add it to --allow-users, or one of its groups to --allow-groups",
		 (unsigned)cr->uid);
	refuse_early(fd, cr, PG_EACCESS, msg);
	return -1;
}

/* The oldest waiting handshake of uid, or NULL. */
static struct pgd_handshake *oldest_of(struct pgd *d, uid_t uid)
{
	struct pgd_handshake *old = NULL;

	for (int i = 0; i < PGD_HS_SLOTS; i++) {
		struct pgd_handshake *hs = &d->hs[i];

		if (hs->fd >= 0 && !hs->closing && hs->cr.uid == uid &&
		    (!old || hs->serial < old->serial))
			old = hs;
	}
	return old;
}

static int waiting_of(const struct pgd *d, uid_t uid)
{
	int n = 0;

	for (int i = 0; i < PGD_HS_SLOTS; i++)
		n += d->hs[i].fd >= 0 && !d->hs[i].closing && d->hs[i].cr.uid == uid;
	return n;
}

/* The user with the most handshakes waiting (all are taken). */
static uid_t greediest_user(const struct pgd *d)
{
	uid_t uid = 0;
	int most = -1;

	for (int i = 0; i < PGD_HS_SLOTS; i++) {
		const struct pgd_handshake *hs = &d->hs[i];
		int n = hs->fd >= 0 && !hs->closing ? waiting_of(d, hs->cr.uid) : -1;

		if (n > most) {
			most = n;
			uid = hs->cr.uid;
		}
	}
	return uid;
}

/*
 * Close hs to make room: its peer gets a refusal, its receive ends at
 * once (the socket is shut down), and on_hello() frees the slot.
 */
static void evict(struct pgd *d, struct pgd_handshake *hs, int n_waiting)
{
	struct pg_welcome w = { .magic = PG_PROTO_MAGIC,
				.version = PG_PROTO_VERSION,
				.status = PG_ECLIENTS };

	snprintf(w.message, sizeof(w.message), "closed before its hello: uid %u has %d connections waiting to send theirs (at most %d per user, %d in all): send the hello at once after connecting",
		 (unsigned)hs->cr.uid, n_waiting, PGD_MAX_HANDSHAKES_PER_USER,
		 PGD_MAX_HANDSHAKES);
	pgd_log(PGD_LOG_DEBUG, "pid %d uid %u: %s", (int)hs->cr.pid,
		(unsigned)hs->cr.uid, w.message);
	send_welcome(hs->fd, &w, NULL, 0);
	shutdown(hs->fd, SHUT_RDWR);
	hs->closing = 1;
	d->n_handshakes--;
}

/*
 * A slot for a handshake of uid: past its user's share, that user's
 * oldest makes room; when all are taken, the oldest of the user holding
 * the most.  NULL only while every slot is still being let go.
 */
static struct pgd_handshake *hs_slot(struct pgd *d, uid_t uid)
{
	int mine = waiting_of(d, uid);
	uid_t victim = uid;

	if (mine >= PGD_MAX_HANDSHAKES_PER_USER || d->n_handshakes >= PGD_MAX_HANDSHAKES) {
		struct pgd_handshake *old;

		if (mine < PGD_MAX_HANDSHAKES_PER_USER)
			victim = greediest_user(d);
		old = oldest_of(d, victim);
		if (old)
			evict(d, old, waiting_of(d, victim));
	}
	for (int i = 0; i < PGD_HS_SLOTS; i++)
		if (d->hs[i].fd < 0)
			return &d->hs[i];
	return NULL;
}

/* Wait (in the io_uring, at most the hello timeout) for fd's hello. */
static void wait_hello(struct pgd *d, int fd, const struct ucred *cr)
{
	struct pgd_handshake *hs = hs_slot(d, cr->uid);
	struct io_uring_sqe *sqe;

	if (!hs) {
		refuse_early(fd, cr, PG_ECLIENTS, "too many connections are waiting to send their hello: try again, and send the hello at once after connecting");
		return;
	}
	pgd_loop_reserve(&d->loop, 2);	/* the pair stays linked */
	hs->serial = pgd_session_serial(d);
	sqe = get_sqe(d, tag(d, OP_HELLO, (uint32_t)(hs - d->hs), hs->serial));
	if (!sqe) {
		close(fd);
		return;
	}
	hs->fd = fd;
	hs->closing = 0;
	hs->cr = *cr;
	d->n_handshakes++;
	io_uring_prep_recv(sqe, fd, &hs->hello, sizeof(hs->hello), MSG_WAITALL);
	sqe->user_data = tag(d, OP_HELLO, (uint32_t)(hs - d->hs), hs->serial);
	pgd_loop_link_timeout(&d->loop, sqe, &d->hello_timeout,
			      tag(d, OP_HELLO_TIMEOUT, 0, 0));
}

/*
 * A new connection: its credentials are checked at once (a refused user
 * takes no slot); a hello already there is answered at once; otherwise
 * it waits for its hello in a slot.
 */
/* take_conn - a connection just accepted: its peer checked, its hello
   read now or waited for */
static void take_conn(struct pgd *d, int res)
{
	struct pg_hello h;
	struct ucred cr;

	if (admit_peer(d, res, &cr))
		return;
	if (recv(res, &h, sizeof(h), MSG_DONTWAIT | MSG_PEEK) == (ssize_t)sizeof(h) &&
	    recv(res, &h, sizeof(h), MSG_DONTWAIT) == (ssize_t)sizeof(h)) {
		handshake(d, res, &cr, &h);
		return;
	}
	wait_hello(d, res, &cr);
}

/* Connections taken at once after an accept completes, at most: those
   already queued on the (non-blocking) listener, so that a burst of
   clients is not admitted one per loop iteration, each behind a step. */
#define ACCEPT_BURST 64

static void on_accept(struct pgd *d, int res)
{
	d->accept_armed = 0;
	if (res < 0) {
		if (res != -EINTR && res != -ECONNABORTED && res != -EAGAIN)
			pgd_log(PGD_LOG_WARN, "accept: %s", strerror(-res));
		return;
	}
	take_conn(d, res);
	for (int i = 0; i < ACCEPT_BURST && !d->stop_signal; i++) {
		int fd = accept4(d->listener.fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			break;	/* EAGAIN: none queued; else the next accept says */
		take_conn(d, fd);
	}
}

static void on_hello(struct pgd *d, struct pgd_handshake *hs, int res)
{
	struct pg_hello h = hs->hello;
	int fd = hs->fd, closing = hs->closing;

	hs->fd = -1;
	hs->closing = 0;
	if (closing) {		/* evict() counted it out already */
		close(fd);
		return;
	}
	d->n_handshakes--;
	if (res != (int)sizeof(h)) {
		pgd_log(PGD_LOG_DEBUG, "a connection sent no hello within %d s: closed",
			PGD_HELLO_TIMEOUT_S);
		close(fd);
		return;
	}
	handshake(d, fd, &hs->cr, &h);
}

/* ---- completions of the io_uring ---- */

static void on_signal(struct pgd *d, int res)
{
	int sig = res == (int)sizeof(d->sig_buf) ? (int)d->sig_buf.ssi_signo : 0;

	if (sig == SIGTERM || sig == SIGINT) {
		pgd_log(PGD_LOG_INFO, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
		d->stop_signal = sig;
		return;
	}
	if (sig == SIGHUP) {
		pgd_notify_reloading();
		pgd_reload(d);
		pgd_notify("READY=1");
	} else if (res < 0)
		pgd_log(PGD_LOG_WARN, "reading signals: %s", strerror(-res));
	arm_signal(d);
}

/* The client an operation was for, unless it has gone since. */
static struct pgd_client *client_of(struct pgd *d, uint32_t slot, uint32_t gen)
{
	struct pgd_client *c = slot < (uint32_t)d->cfg->max_clients ? d->slots[slot] : NULL;

	return c && (uint32_t)c->serial == gen ? c : NULL;
}

static void on_bell(struct pgd *d, struct pgd_client *c, enum op_kind k, int res)
{
	uint64_t v;

	c->bell_armed = 0;
	if (k == OP_BELL_POLL) {
		if (read(c->sq_bell, &v, sizeof(v)) < 0 && errno != EAGAIN)
			pgd_log(PGD_LOG_WARN, "client %u: reading its doorbell: %s", c->id, strerror(errno));
		return;
	}
	if (res == -EAGAIN && !d->bell_poll) {
		/* this kernel does not wait on a non-blocking file: poll it */
		pgd_log(PGD_LOG_DEBUG, "doorbell reads do not wait on this kernel: polling them");
		d->bell_poll = 1;
	} else if (res < 0 && res != -ECANCELED) {
		pgd_log(PGD_LOG_WARN, "client %u: reading its doorbell: %s", c->id, strerror(-res));
	}
}

static void on_hup(struct pgd *d, struct pgd_client *c)
{
	c->hup_armed = 0;
	c->hung_up = 1;
	pgd_mark_dead(d, c, PG_OK, "hung up");
}

/* The pidfd's poll: the process that connected has exited. */
static void on_peer_exit(struct pgd *d, struct pgd_client *c, int res)
{
	c->exit_armed = 0;
	if (res < 0) {
		if (res != -ECANCELED)
			pgd_log(PGD_LOG_WARN, "client %u: polling its pidfd: %s; its death is seen through the socket alone",
				c->id, strerror(-res));
		return;
	}
	c->hung_up = 1;		/* a departure, not a fault */
	pgd_mark_dead(d, c, PG_OK, "its process %d exited", (int)c->pid);
}

/* The client side's completions (loop.h). */
static void on_cqe(void *ctx, unsigned op, uint32_t slot, uint32_t gen, int res)
{
	struct pgd *d = ctx;
	enum op_kind k = (enum op_kind)op;
	struct pgd_client *c;

	switch (k) {
	case OP_ACCEPT:
		on_accept(d, res);
		return;
	case OP_HELLO:
		if (slot < PGD_HS_SLOTS && d->hs[slot].fd >= 0 &&
		    (uint32_t)d->hs[slot].serial == gen)
			on_hello(d, &d->hs[slot], res);
		return;
	case OP_SIGNAL:
		on_signal(d, res);
		return;
	case OP_WATCHDOG:
		pgd_notify("WATCHDOG=1");
		arm_watchdog(d);
		return;
	case OP_HUP:
	case OP_EXIT:
	case OP_BELL:
	case OP_BELL_POLL:
		c = client_of(d, slot, gen);
		if (!c)
			return;
		if (k == OP_BELL || k == OP_BELL_POLL)
			on_bell(d, c, k, res);
		else if (k == OP_EXIT)
			on_peer_exit(d, c, res);
		else
			on_hup(d, c);
		return;
	default:		/* timeouts and cancellations: nothing to do */
		return;
	}
}

/* ---- clients ---- */

static void log_engine(struct pgd *d, const char *when)
{
	struct pg_engine_stats st;

	if (!pgd_log_enabled(PGD_LOG_DEBUG))
		return;
	pg_engine_stats(d->engine, &st);
	pgd_log(PGD_LOG_DEBUG, "%s: %d clients; engine %d running, %d waiting; KV pages %d used, %d cached, %d free",
		when, d->n_live, st.n_running, st.n_waiting, st.kv.n_used,
		st.kv.n_cached, st.kv.n_free);
}

/* Let a dead client go: its requests, last words, operations, memory. */
static void close_client(struct pgd *d, struct pgd_client *c)
{
	uint32_t slot = c->slot;
	int n = pgd_requests_drop(d, c);

	pgd_say_goodbye(c, c->dead_code, c->dead_msg);
	/*
	 * Queued operations name c's fds by number: hand them to the kernel
	 * while the numbers are still c's, not a later connection's.
	 */
	pgd_loop_flush(&d->loop);
	if (c->bell_armed)
		cancel_op(d, tag(d, d->bell_poll ? OP_BELL_POLL : OP_BELL, slot, c->serial));
	if (c->hup_armed)
		cancel_op(d, tag(d, OP_HUP, slot, c->serial));
	if (c->exit_armed)
		cancel_op(d, tag(d, OP_EXIT, slot, c->serial));
	d->slots[slot] = NULL;
	pgd_stats_client_leave(d->stats, slot);
	pgd_tok_forget(d, slot);	/* its jobs not begun are dropped */
	for (int i = 0; i < d->n_live; i++)
		if (d->live[i] == c) {
			d->live[i] = d->live[--d->n_live];
			break;
		}
	pgd_log(c->hung_up ? PGD_LOG_INFO : PGD_LOG_WARN,
		"client %u (pid %d uid %u) gone: %s; %d requests cancelled (%d connected)",
		c->id, (int)c->pid, (unsigned)c->uid, c->dead_msg, n, d->n_live);
	pgd_session_destroy(c);
	log_engine(d, "after a client left");
}

static void close_dead(struct pgd *d)
{
	for (int i = d->n_live - 1; d->n_dead && i >= 0; i--)
		if (i < d->n_live && d->live[i]->dead) {
			close_client(d, d->live[i]);
			d->n_dead--;
		}
	d->n_dead = 0;
}

/* The requests whose prompts the worker has tokenized. */
static int finish_tokjobs(struct pgd *d)
{
	struct pgd_tokjob *j = pgd_tok_collect(d);
	int n = 0;

	while (j) {
		struct pgd_tokjob *next = j->next;

		pgd_tok_finish(d, j);
		j = next;
		n++;
	}
	return n;
}

/* Backlogs, submissions and immediate answers of every client. */
static int serve_clients(struct pgd *d)
{
	int n = 0;

	for (int i = 0; i < d->n_live; i++) {
		struct pgd_client *c = d->live[i];

		if (c->dead)
			continue;
		n += pgd_flush_backlog(d, c);
		n += pgd_drain(d, c);
		pgd_publish(c);
	}
	return n;
}

/*
 * Publish every client's completions of a step.  A step can end with
 * many clients asleep: their doorbells go out in one io_uring submission
 * rather than one write(2) each, so that the last is not a syscall-train
 * behind the first.
 */
static void publish_step(struct pgd *d)
{
	static const uint64_t one = 1;
	int n_wake = 0;

	for (int i = 0; i < d->n_live; i++) {
		struct pgd_client *c = d->live[i];
		struct io_uring_sqe *sqe;

		if (!pgd_publish_quiet(c))
			continue;
		sqe = get_sqe(d, tag(d, OP_WAKE, 0, 0));
		if (sqe) {
			io_uring_prep_write(sqe, c->cq_bell, &one, sizeof(one), 0);
			sqe->user_data = tag(d, OP_WAKE, 0, 0);
			n_wake++;
		} else if (write(c->cq_bell, &one, sizeof(one)) < 0) {
			pgd_log(PGD_LOG_WARN, "client %u: ringing its doorbell: %s", c->id, strerror(errno));
		}
	}
	if (n_wake)
		pgd_loop_submit(&d->loop);
}

static void engine_step(struct pgd *d)
{
	int rc;

	pgd_stats_step_begin(d->stats);
	rc = pg_engine_step(d->engine);
	if (pgd_stats_step_end(d->stats, rc))	/* idle: before the clients see the step */
		pgd_ctl_publish(d, PGD_CTL_PUBLISH_NOW);
	if (rc < 0 && d->step_errors++ < 100)
		pgd_log(PGD_LOG_ERROR, "%s", pg_engine_last_error(d->engine));
	publish_step(d);
	if (pg_engine_idle(d->engine))
		log_engine(d, "engine idle");
}

/*
 * Nothing to do: advertise sleep on every submission ring and, if no entry
 * slipped in meanwhile, wait for the io_uring.
 */
static void sleep_until_woken(struct pgd *d)
{
	struct __kernel_timespec ts = { .tv_nsec = PGD_BACKLOG_POLL_NS };
	int may_sleep = 1, backlog = 0;

	for (int i = 0; i < d->n_live; i++) {
		struct pgd_client *c = d->live[i];

		arm_bell(d, c);
		if (pgd_tok_held(d, c))
			continue;	/* the workers' eventfd wakes us */
		if (!pg_ring_prepare_sleep(&c->sq))
			may_sleep = 0;
		backlog |= c->bl_head != NULL;
	}
	if (may_sleep)
		pgd_loop_wait(&d->loop, backlog ? &ts : NULL);
	for (int i = 0; i < d->n_live; i++)
		pg_ring_awake(&d->live[i]->sq);
}

static void run_loop(struct pgd *d)
{
	double idle_since = pg_now_s();

	while (!d->stop_signal) {
		int busy;

		d->now = pg_now_s();
		busy = pgd_loop_reap(&d->loop);
		busy += finish_tokjobs(d);
		busy += serve_clients(d);
		if (!pg_engine_idle(d->engine)) {
			engine_step(d);
			busy = 1;
		}
		if (d->n_dead)
			close_dead(d);
		pgd_admin_tick(d->admin);
		pgd_ctl_publish(d, PGD_CTL_PUBLISH_DUE);
		pgd_notify_serving(d->n_live);
		arm_accept(d);
		pgd_loop_flush(&d->loop);
		if (busy) {
			idle_since = d->now;
		} else if (d->now - idle_since < d->cfg->spin_us * 1e-6) {	/* SIGHUP may change it */
			pg_cpu_relax();
		} else {
			/* an idle daemon's figures are final */
			pgd_ctl_publish(d, PGD_CTL_PUBLISH_CHANGED);
			sleep_until_woken(d);
			idle_since = pg_now_s();
		}
	}
}

/* ---- start and stop ---- */

static uint64_t new_generation(void)
{
	uint64_t g = 0;

	if (getrandom(&g, sizeof(g), 0) != (ssize_t)sizeof(g))
		g = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	return g ? g : 1;
}

static int alloc_tables(struct pgd *d)
{
	size_t n = (size_t)d->cfg->max_clients;

	d->slots = calloc(n, sizeof(*d->slots));
	d->live = calloc(n, sizeof(*d->live));
	d->bell_buf = calloc(n, sizeof(*d->bell_buf));
	for (int i = 0; i < PGD_HS_SLOTS; i++)
		d->hs[i].fd = -1;
	return d->slots && d->live && d->bell_buf && !pgd_requests_init(d) ? 0 : -1;
}

static int start_engine(struct pgd *d, char *err, size_t err_len)
{
	struct pg_engine_config ec = pg_engine_config_default();
	const char *tmpl = d->m->chat_template;
	size_t tlen = tmpl ? strlen(tmpl) : 0;
	int forced = d->cfg->chat_format >= 0;
	char warn[512] = "";

	ec.on_event = pgd_on_event;
	ec.ctx = d;
	ec.max_batch_tokens = d->cfg->max_batch_tokens;
	ec.max_batch_seqs = d->cfg->max_batch_seqs;
	ec.step_target_s = d->cfg->step_target_ms * 1e-3;
	/* the operator's choice is taken as it is: no warning to second it */
	d->chat_fmt = forced ? d->cfg->chat_format :
		      (int)pg_chat_choose(tmpl, tlen, d->m->tok, warn, sizeof(warn));
	d->chat_tools = (int)pg_chat_tool_format((enum pg_chat_format)d->chat_fmt,
						 tmpl, tlen, forced);
	if (warn[0])
		pgd_log(PGD_LOG_WARN, "%s", warn);
	pgd_log(PGD_LOG_INFO, "chat requests use the %s template%s; its tool calls are in the %s format",
		pg_chat_format_name((enum pg_chat_format)d->chat_fmt),
		forced ? " (chat_format)" : "",
		pg_tool_format_name((enum pg_tool_format)d->chat_tools));
	d->chat_system = pg_chat_default_system(tmpl, tlen);
	return pg_engine_create(d->m, d->fw, &ec, &d->engine, err, err_len);
}

static int start_ring(struct pgd *d, char *err, size_t err_len)
{
	unsigned entries = 64;
	sigset_t set;

	while (entries < 3u * (unsigned)d->cfg->max_clients + 2u * PGD_HS_SLOTS + 16u)
		entries <<= 1;
	if (pgd_loop_init(&d->loop, entries, err, err_len))
		return -1;
	d->loop_owner = pgd_loop_register(&d->loop, "", on_cqe, d);
	d->hello_timeout.tv_sec = PGD_HELLO_TIMEOUT_S;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	d->sig_fd = signalfd(-1, &set, SFD_CLOEXEC);
	if (d->sig_fd < 0) {
		snprintf(err, err_len, "cannot create a signalfd: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The statistics, which show the admin socket; without one, the
 * per-client table is still for the admin group when it exists.
 */
static int open_stats(struct pgd *d, char *err, size_t err_len)
{
	struct pgd_stats_setup su = { .cfg = d->cfg, .m = d->m, .fw = d->fw,
				      .engine = d->engine,
				      .generation = d->generation,
				      .max_prompt = d->lim.max_prompt,
				      .max_tokens = d->lim.max_tokens };
	struct pgd_stats_admin adm = { "", "", (gid_t)-1 };
	char name[64], why[256];

	if (d->admin) {
		adm.path = pgd_admin_path(d->admin);
		adm.group = pgd_admin_group(d->admin);
		adm.gid = pgd_admin_gid(d->admin);
	} else if (pgd_admin_group_lookup(d->cfg->admin_group, &adm.gid, name,
					  sizeof(name), why, sizeof(why))) {
		adm.gid = (gid_t)-1;
	}
	su.admin = adm;
	return pgd_stats_open(&su, &d->stats, err, err_len);
}

static int daemon_start(struct pgd *d, char *err, size_t err_len)
{
	uint64_t wd_ns = pgd_notify_watchdog_ns();
	struct pgd_access access;

	d->generation = new_generation();
	pgd_listener_init(&d->listener);
	d->sig_fd = -1;
	d->watchdog_ts.tv_sec = (long long)(wd_ns / 1000000000u);
	d->watchdog_ts.tv_nsec = (long long)(wd_ns % 1000000000u);
	if (pgd_limits_init(d, err, err_len) ||
	    pgd_access_init(&access, d->cfg->allow_users,
			    d->cfg->allow_groups, err, err_len))
		return -1;
	pgd_access_set(d, &access);
	if (alloc_tables(d)) {
		snprintf(err, err_len, "out of memory for the daemon's tables");
		return -1;
	}
	if (start_engine(d, err, err_len) || pgd_tok_start(d, err, err_len) ||
	    start_ring(d, err, err_len) || pgd_tok_attach(d, err, err_len) ||
	    listen_socket(d, err, err_len) ||
	    pgd_admin_open(d, &d->admin, err, err_len) ||
	    open_stats(d, err, err_len))
		return -1;
	/* non-blocking, so that on_accept() takes what is queued and stops */
	if (fcntl(d->listener.fd, F_SETFL, fcntl(d->listener.fd, F_GETFL) | O_NONBLOCK) < 0) {
		snprintf(err, err_len, "cannot make the listening socket non-blocking: %s",
			 strerror(errno));
		return -1;
	}
	arm_signal(d);
	arm_accept(d);
	arm_watchdog(d);
	pgd_loop_submit(&d->loop);
	return 0;
}

static void log_start(const struct pgd *d)
{
	const struct pg_model *m = d->m;
	const struct pg_plan *plan = pg_forward_plan(d->fw);
	char packed[64] = "";

	pgd_log(PGD_LOG_INFO, "serving %s (%s, %d blocks, vocabulary %d) from %s",
		m->name, pg_arch_name(m->hp.arch), m->hp.n_blocks, m->hp.n_vocab,
		m->path ? m->path : "?");
	if (pg_forward_packed_bytes(d->fw))
		snprintf(packed, sizeof(packed), "; weights repacked or on huge pages (%.1f MiB)",
			 (double)pg_forward_packed_bytes(d->fw) / (1 << 20));
	pgd_log(PGD_LOG_INFO, "plan: pipeline %d x tensor %d x context %d%s%s; KV pool %d pages of %d tokens; %d threads (%s)%s%s",
		plan->pp, plan->tp, plan->cp, d->cfg->plan_desc ? "; " : "",
		d->cfg->plan_desc ? d->cfg->plan_desc : "",
		pg_forward_n_pages(d->fw), pg_forward_page_tokens(d->fw),
		pg_forward_threads(d->fw), pg_forward_isa_name(d->fw),
		pg_forward_numerics(d->fw) == PG_NUMERICS_LLAMA_CPP ?
		"; llama.cpp numerics" : "", packed);
	pgd_log(PGD_LOG_INFO, "limits: %d clients, %d requests in flight each, prompts of %d tokens, %d tokens generated, payloads of %u bytes",
		d->cfg->max_clients, d->cfg->max_inflight, d->lim.max_prompt,
		d->lim.max_tokens, d->lim.max_payload);
	pgd_log(PGD_LOG_INFO, "listening on %s (mode %04o); generation %016llx; pid %d",
		d->cfg->socket_path, d->cfg->socket_mode,
		(unsigned long long)d->generation, (int)getpid());
}

/* Tell every client the daemon stops, then let all of them go. */
static void stop_clients(struct pgd *d, int sig)
{
	char msg[128];

	snprintf(msg, sizeof(msg), "pagodad is stopping (%s): reconnect once it is back",
		 sig == SIGINT ? "SIGINT" : "SIGTERM");
	while (d->n_live) {
		struct pgd_client *c = d->live[--d->n_live];

		pgd_say_goodbye(c, PG_ESHUTDOWN, msg);
		d->slots[c->slot] = NULL;
		pgd_session_destroy(c);
	}
}

static void daemon_stop(struct pgd *d)
{
	for (int i = 0; i < PGD_HS_SLOTS; i++)
		if (d->hs[i].fd >= 0)
			close(d->hs[i].fd);
	pgd_loop_exit(&d->loop);
	pgd_tok_stop(d);	/* after the clients: frees what waits for it */
	pgd_admin_close(d->admin);	/* after the io_uring: it wrote into them */
	d->admin = NULL;
	pgd_stats_close(d->stats);
	d->stats = NULL;
	pgd_listen_close(&d->listener);
	if (d->sig_fd >= 0)
		close(d->sig_fd);
	pg_engine_destroy(d->engine);	/* sends no events */
	pgd_requests_free(d);
	pgd_access_set(d, NULL);
	free(d->chat_system);
	free(d->slots);
	free(d->live);
	free(d->bell_buf);
}

int pgd_serve(const struct pgd_config *cfg, const struct pg_model *m,
	      struct pg_forward *fw)
{
	struct pgd *d = calloc(1, sizeof(*d));
	char err[512] = "";
	int status = 0;

	if (!d) {
		pgd_log(PGD_LOG_ERROR, "out of memory");
		return 1;
	}
	d->cfg = cfg;
	d->m = m;
	d->fw = fw;
	if (daemon_start(d, err, sizeof(err))) {
		pgd_log(PGD_LOG_ERROR, "%s", err);
		pgd_notify_status("cannot start: %s", err);
		status = 1;
	} else {
		log_start(d);
		pgd_notify("READY=1");
		run_loop(d);
		pgd_notify("STOPPING=1\nSTATUS=stopping (%s)",
			   d->stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
		stop_clients(d, d->stop_signal);
	}
	daemon_stop(d);
	if (!status)
		pgd_log(PGD_LOG_INFO, "stopped");
	free(d);
	return status;
}
