/*
 * notify.c - sd_notify(3)'s protocol without libsystemd (notify.h): each
 * notification is one datagram of VAR=VALUE lines sent to the AF_UNIX
 * socket named by $NOTIFY_SOCKET, a path, or with a leading '@' a name in
 * the abstract namespace.  The service manager takes the sender's
 * credentials from the kernel, so nothing else goes with the datagram.
 *
 * Not the watchdog's timer: the io_uring loop (server.c) pings at the
 * interval pgd_notify_watchdog_ns() gives, so that a hung loop stops the
 * pings and the service manager restarts the daemon.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/log.h"
#include "daemon/notify.h"

/* Longest notification; systemd reads up to a page. */
#define NOTIFY_MAX_BYTES 1024

static struct {
	int state;			/* 0: not looked yet; 1: open; -1: none */
	int fd;
	struct sockaddr_un addr;
	socklen_t addr_len;
	int warned;			/* a failed send was logged */
	int n_serving;			/* last count sent; -1: none */
} nt = { .fd = -1, .n_serving = -1 };

/* $NOTIFY_SOCKET into nt.addr: 0, or -1 when it names no AF_UNIX socket. */
static int notify_address(const char *name)
{
	size_t len = strlen(name);

	if ((name[0] != '/' && name[0] != '@') || len < 2 ||
	    len >= sizeof(nt.addr.sun_path)) {
		pgd_log(PGD_LOG_WARN, "NOTIFY_SOCKET=%s is not an AF_UNIX socket path or @name: the service manager will not hear from pagodad",
			name);
		return -1;
	}
	memset(&nt.addr, 0, sizeof(nt.addr));
	nt.addr.sun_family = AF_UNIX;
	memcpy(nt.addr.sun_path, name, len);
	if (name[0] == '@')
		nt.addr.sun_path[0] = '\0';	/* abstract: no terminator */
	nt.addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
				  (name[0] == '/'));
	return 0;
}

/* Open the socket on first use; 1 when there is one to send to. */
static int notify_open(void)
{
	struct timeval tv = { .tv_sec = 1 };	/* never hang the loop */
	const char *name;

	if (nt.state)
		return nt.state > 0;
	nt.state = -1;
	name = getenv("NOTIFY_SOCKET");
	if (!name || !*name || notify_address(name))
		return 0;
	nt.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (nt.fd < 0) {
		pgd_log(PGD_LOG_WARN, "cannot create a socket to notify the service manager: %s",
			strerror(errno));
		return 0;
	}
	setsockopt(nt.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	nt.state = 1;
	return 1;
}

static int notify_send(const char *msg, size_t len)
{
	if (!notify_open())
		return 0;
	if (sendto(nt.fd, msg, len, MSG_NOSIGNAL, (struct sockaddr *)&nt.addr,
		   nt.addr_len) == (ssize_t)len)
		return 1;
	if (!nt.warned++)
		pgd_log(PGD_LOG_WARN, "cannot notify the service manager at %s: %s (is NOTIFY_SOCKET stale?)",
			getenv("NOTIFY_SOCKET"), strerror(errno));
	return -errno;
}

static int notify_vsend(const char *prefix, const char *fmt, va_list ap)
{
	char msg[NOTIFY_MAX_BYTES];
	int n = snprintf(msg, sizeof(msg), "%s", prefix);

	if (n < (int)sizeof(msg))
		n += vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	if (n >= (int)sizeof(msg))
		n = (int)sizeof(msg) - 1;
	return notify_send(msg, (size_t)n);
}

int pgd_notify(const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = notify_vsend("", fmt, ap);
	va_end(ap);
	return rc;
}

void pgd_notify_status(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	notify_vsend("STATUS=", fmt, ap);
	va_end(ap);
}

void pgd_notify_serving(int n_clients)
{
	if (n_clients == nt.n_serving || !notify_open())
		return;
	nt.n_serving = n_clients;
	pgd_notify("STATUS=serving %d client%s", n_clients,
		   n_clients == 1 ? "" : "s");
}

void pgd_notify_reloading(void)
{
	pgd_notify("RELOADING=1\nMONOTONIC_USEC=%llu",
		   (unsigned long long)(pg_now_ns() / 1000u));
}

uint64_t pgd_notify_watchdog_ns(void)
{
	const char *usec = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	unsigned long long v;
	char *end;

	if (!usec || !*usec)
		return 0;
	if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
		return 0;		/* meant for another process */
	errno = 0;
	v = strtoull(usec, &end, 10);
	if (errno || *end || !v || v > UINT64_MAX / 1000u) {
		pgd_log(PGD_LOG_WARN, "WATCHDOG_USEC=%s is not a number of microseconds: no watchdog pings",
			usec);
		return 0;
	}
	return v * 1000u / 2;
}
