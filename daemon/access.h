/*
 * access.h - who may use the daemon: the --allow-users and --allow-groups
 * rules, checked against a client's credentials (SO_PEERCRED and its
 * groups) when its connection is accepted, before its hello.  The socket's own mode and group are the
 * first gate (server.c); these rules narrow it.  Not an authentication
 * scheme: the kernel vouches for the credentials.
 */
#ifndef PAGODA_DAEMON_ACCESS_H
#define PAGODA_DAEMON_ACCESS_H

#include <stddef.h>
#include <sys/types.h>

struct pgd_access {
	int restricted;		/* any list given: only these (and root) */
	unsigned *uids;		/* (n_uids) */
	int n_uids;
	unsigned *gids;		/* (n_gids) */
	int n_gids;
	uid_t self;		/* the daemon's own user, always allowed */
};

/*
 * pgd_access_init - parse the comma-separated lists (NULL: not given) of
 * user and group names or numeric ids; names are resolved now, numbers
 * are taken as they are (an id need not exist).  Returns 0, or -EINVAL /
 * -ENOMEM with a message naming the entry in err.
 */
int pgd_access_init(struct pgd_access *a, const char *users,
		    const char *groups, char *err, size_t err_len);

/* pgd_access_free - free the lists; the struct may be initialised again. */
void pgd_access_free(struct pgd_access *a);

/*
 * pgd_access_allowed - whether a peer of user uid in groups gids[0 ..
 * n_gids - 1] (its primary group included) may connect: root and the
 * daemon's own user always; otherwise anyone when no list was given, else
 * a listed user or a member of a listed group.
 */
int pgd_access_allowed(const struct pgd_access *a, uid_t uid,
		       const gid_t *gids, int n_gids);

#endif
