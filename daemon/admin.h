/*
 * admin.h - pagodad's admin socket (protocol: wire/admin_proto.h): evict,
 * drain, resume, clients, disconnect, log level, statistics reset and
 * health, for root, the daemon's user and the admin group only
 * (SO_PEERCRED).
 *
 * Served by the loop thread through its io_uring: accepts, reads of the
 * one request (2 s to arrive) and writes of the answer are io_uring
 * operations, so a slow or silent peer never holds up the engine; the
 * commands themselves are short, and reach the daemon through control.h
 * alone.  Not the client socket (server.c) nor the statistics (stats.c),
 * which pagodactl reads without asking.
 */
#ifndef PAGODA_DAEMON_ADMIN_H
#define PAGODA_DAEMON_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pgd;
struct pgd_admin;

/* The admin group when --admin-group is not given (used when it exists). */
#define PGD_DEFAULT_ADMIN_GROUP "pagoda-admin"

/*
 * pgd_admin_open - listen on cfg->admin_socket (NULL: beside the client
 * socket, <name>-admin.sock; "none": no admin socket) with its group and
 * mode, register its completions' handler in d's loop (control.h,
 * loop.h), arm the first accept, and set *a (NULL with no admin socket).
 * d is the daemon it administers, reached through control.h only; it
 * must outlive *a.  Returns 0, or -1 with a message in err that says what
 * to change.
 */
int pgd_admin_open(struct pgd *d, struct pgd_admin **a, char *err, size_t err_len);

/*
 * pgd_admin_close - answer any `drain --wait` still waiting, close every
 * connection and the socket, remove the socket file, free.  Call it after
 * the io_uring is gone (its operations point into the connections).
 * NULL a is allowed.
 */
void pgd_admin_close(struct pgd_admin *a);

/*
 * pgd_admin_tick - once per loop iteration: answer `drain --wait` once
 * the engine is idle, and re-arm the accept if it could not be armed.
 * NULL a is allowed.
 */
void pgd_admin_tick(struct pgd_admin *a);

/* The socket's path and the admin group's name ("" when none). */
const char *pgd_admin_path(const struct pgd_admin *a);
const char *pgd_admin_group(const struct pgd_admin *a);

/*
 * pgd_admin_gid - the admin group the socket was given, or (gid_t)-1
 * when only root and the daemon's user may administer (NULL a too).  The
 * statistics' per-client table is readable by the same group.
 */
gid_t pgd_admin_gid(const struct pgd_admin *a);

/*
 * pgd_admin_group_lookup - the admin group: `given` (--admin-group, a
 * name or a number), else PGD_DEFAULT_ADMIN_GROUP when it exists.  Sets
 * *gid ((gid_t)-1: none) and its name in name (name_len bytes; "" when
 * none).  Returns 0, or -1 with a message in err when `given` names no
 * group.
 */
int pgd_admin_group_lookup(const char *given, gid_t *gid, char *name, size_t name_len,
			   char *err, size_t err_len);

#endif
