/*
 * ctl_admin.c - pagodactl's side of the admin socket
 * (wire/admin_proto.h): one request, one answer, printed as the daemon wrote it (text or JSON),
 * except that what a terminal would obey (controls, invalid UTF-8) is
 * shown escaped, whatever daemon wrote it (ctl_put_safe).
 * Connection errors become messages that say what to do: the daemon is
 * not running, or which group the user must join.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/ctl/ctl.h"
#include "wire/admin_proto.h"

/* A refused connect(): who may use the socket, from its group and mode. */
static int connect_denied(const char *path)
{
	struct stat st;
	struct group *g;

	if (!stat(path, &st) && (st.st_mode & 0060) == 0060 && st.st_gid != 0 &&
	    (g = getgrgid(st.st_gid)))
		fprintf(stderr, "pagodactl: permission denied on %s: pagodad's admin commands are for root and the group '%s' (join it, e.g. usermod -aG %s USER, then log in again)\n",
			path, g->gr_name, g->gr_name);
	else
		fprintf(stderr, "pagodactl: permission denied on %s: pagodad's admin commands are for root only here (the daemon has no admin group; see --admin-group in pagodad(8))\n",
			path);
	return CTL_DENIED;
}

static int admin_connect(const char *path, double timeout_s, int *fd_out)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = (time_t)timeout_s,
			      .tv_usec = (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6) };
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		fprintf(stderr, "pagodactl: --admin-socket %s: the path is too long\n", path);
		return CTL_USAGE;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "pagodactl: cannot create a socket: %s\n", strerror(errno));
		return CTL_FAIL;
	}
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr))) {
		int e = errno;

		close(fd);
		if (e == EACCES || e == EPERM)
			return connect_denied(path);
		if (e == ENOENT || e == ECONNREFUSED) {
			fprintf(stderr, "pagodactl: pagodad is not running: nothing answers on the admin socket %s (start pagodad, or give its --admin-socket / --socket)\n",
				path);
			return CTL_DOWN;
		}
		fprintf(stderr, "pagodactl: cannot connect to %s: %s\n", path, strerror(e));
		return CTL_DOWN;
	}
	if (timeout_s > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	*fd_out = fd;
	return CTL_OK;
}

/* Read exactly len bytes; 0, or -1 with errno (0 at end of file). */
static int read_all(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (!n)
				errno = 0;
			return -1;
		}
		got += (size_t)n;
	}
	return 0;
}

static int read_reply(int fd, const char *path, struct pg_admin_reply *h, char **text,
		      int send_errno)
{
	if (read_all(fd, h, sizeof(*h))) {
		if (send_errno)
			fprintf(stderr, "pagodactl: cannot send to %s: %s\n", path, strerror(send_errno));
		else if (errno == EAGAIN || errno == EWOULDBLOCK)
			fprintf(stderr, "pagodactl: no answer from pagodad within --timeout\n");
		else
			fprintf(stderr, "pagodactl: pagodad closed the admin connection without an answer%s%s\n",
				errno ? ": " : "", errno ? strerror(errno) : "");
		return CTL_FAIL;
	}
	if (h->magic != PG_ADMIN_MAGIC || h->len > PG_ADMIN_MAX_REPLY) {
		fprintf(stderr, "pagodactl: %s does not answer as pagodad's admin socket\n", path);
		return CTL_FAIL;
	}
	*text = malloc((size_t)h->len + 1);
	if (!*text || read_all(fd, *text, h->len)) {
		fprintf(stderr, "pagodactl: the answer was cut short\n");
		return CTL_FAIL;
	}
	(*text)[h->len] = '\0';
	return CTL_OK;
}

int ctl_admin(const struct ctl_opts *o, struct pg_admin_request *q)
{
	struct pg_admin_reply h;
	char *text = NULL;
	int fd, rc, send_errno = 0;

	q->magic = PG_ADMIN_MAGIC;
	q->version = PG_ADMIN_VERSION;
	if (o->json)
		q->flags |= PG_ADMIN_F_JSON;
	rc = admin_connect(o->admin_socket, o->timeout_s, &fd);
	if (rc)
		return rc;
	/* a refusal may come (and the daemon close) before the request is
	   sent: read the answer whatever the send says */
	if (send(fd, q, sizeof(*q), MSG_NOSIGNAL) != (ssize_t)sizeof(*q))
		send_errno = errno;
	rc = read_reply(fd, o->admin_socket, &h, &text, send_errno);
	close(fd);
	if (rc) {
		free(text);
		return rc;
	}
	if (o->json || !h.status) {
		ctl_put_safe(stdout, text, h.len, o->json);
	} else {
		fputs("pagodactl: ", stderr);
		ctl_put_safe(stderr, text, h.len, 0);
	}
	free(text);
	if (fflush(stdout))
		return CTL_FAIL;
	return !h.status ? CTL_OK : h.status == EACCES ? CTL_DENIED : CTL_FAIL;
}
