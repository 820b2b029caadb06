/*
 * notify_sink.c - a stand-in for systemd's notification socket, for
 * tests/test-systemd.sh.  It binds an AF_UNIX datagram socket (a path, or
 * @NAME in the abstract namespace), prints "ready", then one line per
 * line of each notification received:
 *
 *     MS PID LINE
 *
 * MS: milliseconds since it started; PID: the sender's, as the kernel
 * gives it (SCM_CREDENTIALS), which is what NotifyAccess=main checks.  It
 * exits 0 once a STOPPING=1 has come, 1 after TIMEOUT seconds without.
 *
 * Usage: notify_sink SOCKET TIMEOUT_S
 */
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int bind_sink(const char *name)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t len = strlen(name);
	socklen_t alen;
	int one = 1, fd;

	if (len < 2 || len >= sizeof(addr.sun_path)) {
		fprintf(stderr, "notify_sink: bad socket name %s\n", name);
		return -1;
	}
	memcpy(addr.sun_path, name, len);
	if (name[0] == '@')
		addr.sun_path[0] = '\0';
	alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&addr, alen)) {
		perror("notify_sink: socket");
		return -1;
	}
	return fd;
}

/* Print each line of one datagram; 1 when it says STOPPING=1. */
static int print_message(long long t, int pid, char *msg)
{
	int stopping = 0;

	for (char *line = strtok(msg, "\n"); line; line = strtok(NULL, "\n")) {
		printf("%lld %d %s\n", t, pid, line);
		stopping |= !strcmp(line, "STOPPING=1");
	}
	fflush(stdout);
	return stopping;
}

static int receive(int fd, long long t0)
{
	char buf[4096];
	union {
		char c[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.c, .msg_controllen = sizeof(u.c) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(fd, &mh, 0);
	int pid = -1;

	if (n < 0)
		return 0;
	buf[n] = '\0';
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
			struct ucred cr;

			memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
			pid = (int)cr.pid;
		}
	return print_message(now_ms() - t0, pid, buf);
}

int main(int argc, char **argv)
{
	long long t0 = now_ms(), deadline;
	struct pollfd pfd = { .events = POLLIN };

	if (argc != 3) {
		fprintf(stderr, "usage: notify_sink SOCKET TIMEOUT_S\n");
		return 2;
	}
	pfd.fd = bind_sink(argv[1]);
	if (pfd.fd < 0)
		return 1;
	deadline = t0 + atoll(argv[2]) * 1000;
	printf("ready\n");
	fflush(stdout);
	for (long long left; (left = deadline - now_ms()) > 0;)
		if (poll(&pfd, 1, (int)left) > 0 && receive(pfd.fd, t0))
			return 0;
	fprintf(stderr, "notify_sink: no STOPPING=1 within %s s\n", argv[2]);
	return 1;
}
