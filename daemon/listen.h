/*
 * listen.h - pagodad's listening Unix sockets, for both the client socket
 * (server.c) and the admin socket (admin.c): the runtime directory, the
 * socket file's creation (a stale one left by a dead daemon is removed, a
 * live one is not taken), its group and mode, its removal at the end (only
 * if it is still ours), and the credentials of a peer that connected.
 *
 * Not the protocols spoken on them (wire/), nor the accepts, which are
 * io_uring operations of the loop (loop.h).  The functions say what
 * happened and leave the wording of errors to their callers, whose
 * messages name their own options (--socket, --admin-socket, ...).
 */
#ifndef PAGODA_DAEMON_LISTEN_H
#define PAGODA_DAEMON_LISTEN_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* A socket file this daemon listens on. */
struct pgd_listener {
	int fd;				/* -1: none */
	dev_t dev;
	ino_t ino;			/* of the file bound: to unlink only
					   our own socket (0: unknown) */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/*
 * Whether a daemon answers on the socket at addr (pgd_listen_bind's
 * probe); NULL probe: whether connect() succeeds.
 */
typedef int (*pgd_listen_probe)(const struct sockaddr_un *addr);

/* What pgd_listen_bind did, or the step that failed (errno says why). */
enum pgd_listen_result {
	PGD_LISTEN_OK = 0,		/* bound; no file was in the way */
	PGD_LISTEN_REMOVED_STALE,	/* bound, after removing a stale file */
	PGD_LISTEN_TOO_LONG,		/* the path does not fit sun_path */
	PGD_LISTEN_NOT_SOCKET,		/* the path exists and is no socket */
	PGD_LISTEN_LIVE,		/* a daemon answers on it: not taken */
	PGD_LISTEN_REPLACE,		/* the stale file cannot be removed */
	PGD_LISTEN_SOCKET,		/* socket() failed */
	PGD_LISTEN_BIND,		/* bind() failed */
};

/*
 * pgd_make_parent_dir - create the directory that holds path (the runtime
 * directory of the sockets and the statistics file, e.g. /run/pagoda)
 * when it is missing, mode 0755; logs what it created or could not.
 */
void pgd_make_parent_dir(const char *path);

/*
 * pgd_listener_init - l holds no socket (fd -1), to be bound or closed.
 */
void pgd_listener_init(struct pgd_listener *l);

/*
 * pgd_listen_bind - create a stream socket bound at path, mode 0600 until
 * the caller sets its own (pgd_listen_chmod), its directory first when
 * missing (pgd_make_parent_dir): a socket file already there
 * is removed when probe says no daemon answers on it.  Records the file's
 * identity for pgd_listen_close.  Returns PGD_LISTEN_OK or
 * PGD_LISTEN_REMOVED_STALE with l->fd open, else the failing step with
 * errno set where a system call failed (l->fd may then be open: close it
 * with pgd_listen_close).
 */
enum pgd_listen_result pgd_listen_bind(struct pgd_listener *l, const char *path,
				       pgd_listen_probe probe);

/*
 * pgd_listen_chown - give the socket file group gid ((gid_t)-1: leave it).
 * Returns 0, or -1 with errno.
 */
int pgd_listen_chown(const struct pgd_listener *l, gid_t gid);

/* pgd_listen_chmod - set the socket file's mode.  Returns 0, or -1 with errno. */
int pgd_listen_chmod(const struct pgd_listener *l, unsigned mode);

/*
 * pgd_listen_start - listen() with this backlog.  Returns 0, or -1 with
 * errno.
 */
int pgd_listen_start(struct pgd_listener *l, int backlog);

/*
 * pgd_listen_close - remove the socket file if it is still the one bound
 * (another daemon's that replaced it stays), close the socket; l holds no
 * socket after.  A listener that holds none is left alone.
 */
void pgd_listen_close(struct pgd_listener *l);

/*
 * pgd_listen_group - look a group up by name, else (when numeric is set)
 * by number.  Sets *gid and, when name_len, its name in name.  Returns 0,
 * or -1 when there is no such group (*gid is then (gid_t)-1, name "").
 * With numeric 2 a number is taken as it is, even with no group of that
 * id (the client socket's --socket-group); with 1 the group must exist.
 */
int pgd_listen_group(const char *given, int numeric, gid_t *gid, char *name,
		     size_t name_len);

/*
 * pgd_peer_cred - the credentials of the peer connected on fd
 * (SO_PEERCRED).  Returns 0, or -1 with errno.
 */
int pgd_peer_cred(int fd, struct ucred *cr);

/*
 * pgd_peer_groups - the peer's supplementary groups (SO_PEERGROUPS) into
 * gids (max of them).  Returns how many, or -1 where the kernel does not
 * say (no SO_PEERGROUPS, or more than max).
 */
int pgd_peer_groups(int fd, gid_t *gids, int max);

/*
 * pgd_peer_in_group - whether the peer cr on fd is in group gid: its
 * primary group, its supplementary groups, or (where the kernel does not
 * give them) the Groups: line of /proc/PID/status.
 */
int pgd_peer_in_group(int fd, const struct ucred *cr, gid_t gid);

/*
 * pgd_peer_pidfd - a pidfd of the process that connected on fd
 * (SO_PEERPIDFD, Linux 6.5; close-on-exec), so that its exit is seen even
 * when a child keeps the socket open.  Returns it, or -1: then *none is
 * set when the kernel never gives one (said once in the debug log), and a
 * caller that keeps *none set asks no more.
 */
int pgd_peer_pidfd(int fd, int *none);

#endif
