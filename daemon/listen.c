/*
 * listen.c - pagodad's listening Unix sockets and their peers (listen.h),
 * for the client socket (server.c) and the admin socket (admin.c) alike.
 * Not what is spoken on them, nor their accepts (loop.c).
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/listen.h"
#include "daemon/log.h"

void pgd_make_parent_dir(const char *path)
{
	char dir[PATH_MAX];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return;
	*slash = '\0';
	if (!mkdir(dir, 0755))
		pgd_log(PGD_LOG_INFO, "created %s", dir);
	else if (errno != EEXIST)
		pgd_log(PGD_LOG_WARN, "cannot create %s: %s", dir, strerror(errno));
}

void pgd_listener_init(struct pgd_listener *l)
{
	memset(l, 0, sizeof(*l));
	l->fd = -1;
}

static int connects(const struct sockaddr_un *addr)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), live;

	live = fd >= 0 && !connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
	if (fd >= 0)
		close(fd);
	return live;
}

/* Remove a socket file no daemon answers on; refuse to take a live one. */
static enum pgd_listen_result clear_stale(const struct sockaddr_un *addr,
					  pgd_listen_probe probe)
{
	struct stat st;

	if (lstat(addr->sun_path, &st))
		return PGD_LISTEN_OK;
	if (!S_ISSOCK(st.st_mode))
		return PGD_LISTEN_NOT_SOCKET;
	if ((probe ? probe : connects)(addr))
		return PGD_LISTEN_LIVE;
	if (unlink(addr->sun_path) && errno != ENOENT)
		return PGD_LISTEN_REPLACE;
	return PGD_LISTEN_REMOVED_STALE;
}

enum pgd_listen_result pgd_listen_bind(struct pgd_listener *l, const char *path,
				       pgd_listen_probe probe)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	enum pgd_listen_result found;
	struct stat st;
	mode_t old_mask;
	int rc;

	if (strlen(path) >= sizeof(addr.sun_path))
		return PGD_LISTEN_TOO_LONG;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	memcpy(l->path, path, strlen(path) + 1);
	pgd_make_parent_dir(path);
	found = clear_stale(&addr, probe);
	if (found != PGD_LISTEN_OK && found != PGD_LISTEN_REMOVED_STALE)
		return found;
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0)
		return PGD_LISTEN_SOCKET;
	old_mask = umask(0177);	/* nobody gets in before the mode is set */
	rc = bind(l->fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old_mask);
	if (rc)
		return PGD_LISTEN_BIND;
	if (!stat(path, &st)) {
		l->dev = st.st_dev;
		l->ino = st.st_ino;
	}
	return found;
}

int pgd_listen_chown(const struct pgd_listener *l, gid_t gid)
{
	return gid == (gid_t)-1 ? 0 : chown(l->path, (uid_t)-1, gid);
}

int pgd_listen_chmod(const struct pgd_listener *l, unsigned mode)
{
	return chmod(l->path, (mode_t)mode);
}

int pgd_listen_start(struct pgd_listener *l, int backlog)
{
	return listen(l->fd, backlog);
}

void pgd_listen_close(struct pgd_listener *l)
{
	struct stat st;

	if (l->fd < 0)
		return;
	if (l->ino && !stat(l->path, &st) && st.st_dev == l->dev &&
	    st.st_ino == l->ino)
		unlink(l->path);
	close(l->fd);
	l->fd = -1;
}

int pgd_listen_group(const char *given, int numeric, gid_t *gid, char *name,
		     size_t name_len)
{
	struct group *g = getgrnam(given);
	unsigned long v = 0;
	char *end;
	int is_number;

	*gid = (gid_t)-1;
	if (name_len)
		name[0] = '\0';
	errno = 0;
	is_number = !g && numeric && *given >= '0' && *given <= '9' &&
		    (v = strtoul(given, &end, 10), !*end) && !errno && v < UINT_MAX;
	if (is_number && numeric == 2) {
		*gid = (gid_t)v;
		return 0;
	}
	if (is_number)
		g = getgrgid((gid_t)v);
	if (!g)
		return -1;
	*gid = g->gr_gid;
	if (name_len)
		snprintf(name, name_len, "%s", g->gr_name);
	return 0;
}

int pgd_peer_cred(int fd, struct ucred *cr)
{
	socklen_t len = sizeof(*cr);

	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len);
}

int pgd_peer_groups(int fd, gid_t *gids, int max)
{
#ifdef SO_PEERGROUPS
	socklen_t len = (socklen_t)(sizeof(gid_t) * (size_t)max);

	if (!getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, gids, &len))
		return (int)(len / sizeof(gid_t));
#else
	(void)fd;
	(void)gids;
	(void)max;
#endif
	return -1;
}

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

int pgd_peer_in_group(int fd, const struct ucred *cr, gid_t gid)
{
	gid_t groups[256];
	int n;

	if (cr->gid == gid)
		return 1;
	n = pgd_peer_groups(fd, groups, 256);
	if (n < 0)
		return proc_in_group(cr->pid, gid);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/*
 * SO_PEERPIDFD (Linux 6.5).  Older headers lack the number; it is
 * asm-generic's on these machines.
 */
#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__i386__) || \
			       defined(__aarch64__) || defined(__arm__) || \
			       defined(__riscv))
#define SO_PEERPIDFD 77
#endif

int pgd_peer_pidfd(int fd, int *none)
{
	int pidfd = -1;
#ifdef SO_PEERPIDFD
	socklen_t len = sizeof(pidfd);
	int e;

	if (*none)
		return -1;
	/* the kernel makes it close-on-exec */
	if (!getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) &&
	    len == sizeof(pidfd) && pidfd >= 0)
		return pidfd;
	e = errno;
	*none = e == ENOPROTOOPT || e == EINVAL;	/* for good */
	pgd_log(PGD_LOG_DEBUG, "no pidfd for a client (SO_PEERPIDFD: %s): client death is seen through the socket alone",
		strerror(e));
#else
	(void)fd;
	*none = 1;
#endif
	return -1;
}
