/*
 * libpagoda.c - the handle: connecting to pagodad (the handshake over the
 * Unix socket, the checks of the segment it hands over, the mapping),
 * closing, and the error messages.
 *
 * What flows through the segment afterwards is io.c's; this file makes
 * the connection and takes it down.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/internal.h"
#include "shm/segment.h"

#define PGC_HANDSHAKE_MS 10000	/* the daemon's welcome, at most */
#define PGC_SPIN_US 20

static_assert(PAGODA_EDUPLICATE == -PG_EDUPLICATE && PG_ERROR_MAX == 16,
	      "pagoda_error mirrors pg_error");
static_assert(PAGODA_ECONNECT == -PG_ECONNECT && PAGODA_EPROTO == -PG_EPROTO,
	      "pagoda_error mirrors pg_error");

static _Thread_local char connect_err[256];	/* pagoda_last_error(NULL) */
static _Thread_local char err_copy[256];	/* what it returned */

int pgc_fail(struct pagoda *p, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (p) {
		pthread_mutex_lock(&p->err_lock);
		vsnprintf(p->err, sizeof(p->err), fmt, ap);
		pthread_mutex_unlock(&p->err_lock);
	} else {
		vsnprintf(connect_err, sizeof(connect_err), fmt, ap);
	}
	va_end(ap);
	return code;
}

const char *pagoda_last_error(pagoda_t *p)
{
	if (!p)
		return connect_err;
	pthread_mutex_lock(&p->err_lock);
	memcpy(err_copy, p->err, sizeof(err_copy));
	pthread_mutex_unlock(&p->err_lock);
	return err_copy;
}

const char *pagoda_strerror(int code)
{
	static const char *const names[PG_ERROR_MAX] = {
		[PG_OK] = "success",
		[PG_EINVAL] = "malformed request",
		[PG_ETOOBIG] = "request over a limit",
		[PG_ELIMIT] = "too many requests in flight",
		[PG_ENOMEM] = "out of memory",
		[PG_EBUSY] = "the daemon is draining",
		[PG_EENGINE] = "the forward pass failed",
		[PG_ENOENT] = "no such request",
		[PG_EVERSION] = "protocol versions differ",
		[PG_EACCESS] = "access refused",
		[PG_EPROTO] = "protocol error",
		[PG_ECLIENTS] = "too many clients",
		[PG_ESHUTDOWN] = "the daemon stopped or restarted",
		[PG_ECONNECT] = "cannot reach the daemon",
		[PG_ECANCELLED] = "cancelled",
		[PG_EDUPLICATE] = "duplicate request id",
	};

	if (code < 0)
		code = -code;
	if (code >= PG_ERROR_MAX)
		return "unknown error";
	return names[code];
}

void pagoda_set_spin_us(pagoda_t *p, unsigned us)
{
	pthread_mutex_lock(&p->lock);
	p->spin_ns = (uint64_t)us * 1000;
	pthread_mutex_unlock(&p->lock);
}

/* ---- connecting ---- */

static const char *resolve_path(const char *path)
{
	const char *env = getenv("PAGODA_SOCKET");

	if (path && *path)
		return path;
	return env && *env ? env : PAGODA_DEFAULT_SOCKET;
}

static int connect_fail(const char *path, int e)
{
	if (e == ENOENT)
		return pgc_fail(NULL, PAGODA_ECONNECT,
				"cannot connect to %s: no such socket: is pagodad running? start it with systemctl start pagodad or pagodad --foreground (or name its socket with $PAGODA_SOCKET)",
				path);
	if (e == ECONNREFUSED)
		return pgc_fail(NULL, PAGODA_ECONNECT,
				"cannot connect to %s: nobody is listening: is pagodad running? start it with systemctl start pagodad or pagodad --foreground",
				path);
	if (e == EACCES || e == EPERM)
		return pgc_fail(NULL, PAGODA_EACCESS,
				"cannot connect to %s: permission denied: add yourself to the pagoda group (usermod -aG pagoda $USER, then log in again)",
				path);
	return pgc_fail(NULL, PAGODA_ECONNECT, "cannot connect to %s: %s",
			path, strerror(e));
}

/* open_socket - a connected stream socket, or a negative code. */
static int open_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, e;

	if (strlen(path) >= sizeof(sa.sun_path))
		return pgc_fail(NULL, PAGODA_ECONNECT,
				"cannot connect to %s: the path is longer than %zu bytes",
				path, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return pgc_fail(NULL, PAGODA_ECONNECT, "cannot make a socket: %s",
				strerror(errno));
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == EINTR)
			continue;
		e = errno;
		close(fd);
		return connect_fail(path, e);
	}
	return fd;
}

static int hello_failed(const char *path)
{
	return pgc_fail(NULL, PAGODA_ECONNECT,
			"%s: the daemon hung up during the handshake", path);
}

static int send_hello(int fd, const char *path)
{
	struct pg_hello h = { .magic = PG_PROTO_MAGIC, .version = PG_PROTO_VERSION };
	ssize_t n;

	do
		n = send(fd, &h, sizeof(h), MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(h) ? 0 : hello_failed(path);
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* take_fds - the descriptors of an SCM_RIGHTS message into fds[*n_fds]. */
static void take_fds(struct msghdr *mh, int *fds, int *n_fds)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*n_fds < 3)
				fds[(*n_fds)++] = fd;
			else
				close(fd);
		}
	}
}

/*
 * recv_welcome - the whole struct pg_welcome and the fds that came with
 * it (up to 3; more are closed).  Returns 0 or a negative code.
 */
static int recv_welcome(int fd, const char *path, struct pg_welcome *w,
			int *fds, int *n_fds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	size_t got = 0;

	*n_fds = 0;
	while (got < sizeof(*w)) {
		struct iovec iov = { (char *)w + got, sizeof(*w) - got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf) };
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, PGC_HANDSHAKE_MS);
		ssize_t n;

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return pgc_fail(NULL, PAGODA_ECONNECT,
					"%s: the daemon did not answer within %d s",
					path, PGC_HANDSHAKE_MS / 1000);
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return pgc_fail(NULL, PAGODA_ECONNECT,
					"%s: the daemon hung up during the handshake%s%s",
					path, n < 0 ? ": " : "",
					n < 0 ? strerror(errno) : "");
		take_fds(&mh, fds, n_fds);
		if (mh.msg_flags & MSG_CTRUNC)
			return pgc_fail(NULL, PAGODA_EPROTO,
					"%s: the daemon sent more descriptors than the protocol has",
					path);
		got += (size_t)n;
	}
	return 0;
}

/* check_welcome - the daemon's answer: a refusal, or a welcome we speak. */
static int check_welcome(struct pg_welcome *w, int n_fds, const char *path)
{
	w->message[sizeof(w->message) - 1] = 0;
	if (w->magic != PG_PROTO_MAGIC)
		return pgc_fail(NULL, PAGODA_EPROTO,
				"%s is not a pagodad socket (bad magic in its answer)",
				path);
	if (w->status != PG_OK) {
		int code = w->status < PG_ERROR_MAX ? -(int)w->status : PAGODA_EPROTO;

		return pgc_fail(NULL, code, "pagodad refused the connection: %s",
				w->message[0] ? w->message : pagoda_strerror(code));
	}
	if (w->version != PG_PROTO_VERSION)
		return pgc_fail(NULL, PAGODA_EVERSION,
				"pagodad speaks protocol %u and this libpagoda protocol %u: use a libpagoda and pagodad of the same release",
				w->version, PG_PROTO_VERSION);
	if (n_fds != 3)
		return pgc_fail(NULL, PAGODA_EPROTO,
				"pagodad sent %d descriptors with its welcome, not 3",
				n_fds);
	return 0;
}

/*
 * check_memfd - before mapping: a regular file of the size the welcome
 * says, sealed so that it can neither shrink (a mapping past its end would
 * fault) nor grow.
 */
static int check_memfd(int fd, const struct pg_welcome *w)
{
	const int want = F_SEAL_SHRINK | F_SEAL_GROW;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || (seals & want) != want)
		return pgc_fail(NULL, PAGODA_EPROTO,
				"pagodad's shared segment is not sealed against shrinking and growing (seals %#x): refusing to map it",
				seals < 0 ? 0 : seals);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return pgc_fail(NULL, PAGODA_EPROTO,
				"pagodad's shared segment is not a memory file");
	if ((uint64_t)st.st_size != w->seg_bytes ||
	    st.st_size < PG_SEG_HEADER_BYTES || (uint64_t)st.st_size > SIZE_MAX / 2)
		return pgc_fail(NULL, PAGODA_EPROTO,
				"pagodad's shared segment is %lld bytes, its welcome says %llu",
				(long long)st.st_size,
				(unsigned long long)w->seg_bytes);
	return 0;
}

/* check_eventfd - fd is an eventfd (when /proc can tell). */
static int check_eventfd(int fd)
{
	char link[64], target[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return 0;
	target[n] = 0;
	if (strcmp(target, "anon_inode:[eventfd]"))
		return pgc_fail(NULL, PAGODA_EPROTO,
				"pagodad's doorbell is not an eventfd (%s)", target);
	return 0;
}

/* check_header - the mapped header: geometry and identity. */
static int check_header(const struct pagoda *p, const struct pg_welcome *w)
{
	const struct pg_seg_header *h = p->hdr;
	char err[160];

	if (pg_seg_check(h, p->map_bytes, err, sizeof(err)))
		return pgc_fail(NULL, PAGODA_EPROTO, "pagodad: %s", err);
	if (h->generation != w->generation || h->client_id != w->client_id)
		return pgc_fail(NULL, PAGODA_EPROTO,
				"pagodad's shared segment belongs to another connection");
	if (atomic_load_explicit(&((struct pg_seg_header *)h)->closed,
				 memory_order_acquire))
		return pgc_fail(NULL, PAGODA_ESHUTDOWN,
				"pagodad closed the connection at once");
	return 0;
}

/* map_segment - map the checked memfd and set up both rings. */
static int map_segment(struct pagoda *p, const struct pg_welcome *w)
{
	struct pg_seg_header *h;
	int rc;

	p->map_bytes = (size_t)w->seg_bytes;
	p->map = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		      p->seg_fd, 0);
	if (p->map == MAP_FAILED) {
		p->map = NULL;
		return pgc_fail(NULL, PAGODA_EPROTO,
				"cannot map pagodad's shared segment: %s",
				strerror(errno));
	}
	p->hdr = h = (struct pg_seg_header *)p->map;
	rc = check_header(p, w);
	if (rc)
		return rc;
	p->sq_end = calloc(h->sq_slots, sizeof(*p->sq_end));
	if (!p->sq_end)
		return pgc_fail(NULL, PAGODA_ENOMEM, "out of memory");
	pg_ring_attach(&p->sq, &h->sq, p->map + h->sq_off, h->sq_slots, 1);
	pg_ring_attach(&p->cq, &h->cq, p->map + h->cq_off, h->cq_slots, 0);
	pg_arena_init(&p->sq_arena, p->map + h->sq_arena_off, h->sq_arena,
		      p->sq_end, h->sq_slots, p->sq.local);
	p->cq_arena = p->map + h->cq_arena_off;
	p->cq_arena_bytes = h->cq_arena;
	p->generation = w->generation;
	return 0;
}

static struct pagoda *handle_new(void)
{
	struct pagoda *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	pthread_condattr_t ca;

	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->err_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_condattr_destroy(&ca);
	p->sock = p->seg_fd = p->sq_efd = p->cq_efd = p->ep_fd = -1;
	p->spin_ns = PGC_SPIN_US * 1000;
	p->spin_score = 8;	/* io.c: PGC_SPIN_SCORE */
	p->next_id = 1;
	return p;
}

/* handshake - hello, welcome and its checks; the fds land in p. */
static int handshake(struct pagoda *p, const char *path)
{
	struct pg_welcome w;
	int fds[3] = { -1, -1, -1 }, n_fds = 0, rc;

	rc = send_hello(p->sock, path);
	/* read the answer even when the hello could not go out: a daemon that
	   refuses at accept (its access rules, too many pending handshakes)
	   answers and hangs up before it reads, and its answer says why */
	if (!rc) {
		rc = recv_welcome(p->sock, path, &w, fds, &n_fds);
		if (!rc)
			rc = check_welcome(&w, n_fds, path);
	} else if (!recv_welcome(p->sock, path, &w, fds, &n_fds)) {
		rc = check_welcome(&w, n_fds, path);
	} else {
		rc = hello_failed(path);	/* no answer: say so of the hello */
	}
	if (rc) {
		close_fds(fds, n_fds);
		return rc;
	}
	p->seg_fd = fds[0];
	p->sq_efd = fds[1];
	p->cq_efd = fds[2];
	rc = check_memfd(p->seg_fd, &w);
	if (!rc)
		rc = check_eventfd(p->sq_efd);
	if (!rc)
		rc = check_eventfd(p->cq_efd);
	if (!rc)
		rc = map_segment(p, &w);
	/* Only we read this doorbell: it must never block us. */
	if (!rc && fcntl(p->cq_efd, F_SETFL,
			 fcntl(p->cq_efd, F_GETFL) | O_NONBLOCK) < 0)
		rc = pgc_fail(NULL, PAGODA_EPROTO,
			      "cannot set up pagodad's doorbell: %s", strerror(errno));
	return rc;
}

int pagoda_connect(const char *socket_path, pagoda_t **out)
{
	const char *path = resolve_path(socket_path);
	struct pagoda *p;
	int rc;

	*out = NULL;
	connect_err[0] = 0;
	p = handle_new();
	if (!p)
		return pgc_fail(NULL, PAGODA_ENOMEM, "out of memory");
	rc = p->sock = open_socket(path);
	if (rc >= 0)
		rc = handshake(p, path);
	if (rc < 0) {
		pagoda_close(p);
		return rc;
	}
	*out = p;
	return 0;
}

void pagoda_close(pagoda_t *p)
{
	if (!p)
		return;
	if (p->map)
		munmap(p->map, p->map_bytes);
	/* closing the socket is what tells the daemon we are gone */
	int fds[] = { p->ep_fd, p->cq_efd, p->sq_efd, p->seg_fd, p->sock };
	close_fds(fds, 5);
	pgc_queue_free(p);
	pgc_rx_free(&p->ev_rx);
	free(p->flight);
	free(p->sq_end);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->err_lock);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
