/*
 * access.c - the --allow-users / --allow-groups rules (access.h).
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/access.h"

/* A decimal id, or -1 when s is not one. */
static long long parse_id(const char *s)
{
	char *end;
	long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < 0 || v >= UINT_MAX)
		return -1;
	return v;
}

static int resolve(const char *name, int group, unsigned *id)
{
	long long v = parse_id(name);

	if (v >= 0) {
		*id = (unsigned)v;
		return 0;
	}
	if (group) {
		struct group *g = getgrnam(name);

		if (!g)
			return -1;
		*id = g->gr_gid;
	} else {
		struct passwd *p = getpwnam(name);

		if (!p)
			return -1;
		*id = p->pw_uid;
	}
	return 0;
}

/* Parse one comma-separated list into *ids (malloc'd, n in *n). */
static int parse_list(const char *list, int group, unsigned **ids, int *n,
		      char *err, size_t err_len)
{
	const char *what = group ? "--allow-groups" : "--allow-users";
	char *copy, *tok, *save = NULL;
	size_t cap = 1;

	for (const char *p = list; *p; p++)
		cap += *p == ',';
	*ids = calloc(cap, sizeof(**ids));
	copy = strdup(list);
	if (!*ids || !copy) {
		free(copy);
		snprintf(err, err_len, "out of memory reading %s", what);
		return -ENOMEM;
	}
	*n = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (resolve(tok, group, &(*ids)[*n])) {
			snprintf(err, err_len, "%s: no %s named '%s' (give a name known to this host or a numeric id)",
				 what, group ? "group" : "user", tok);
			free(copy);
			return -EINVAL;
		}
		(*n)++;
	}
	free(copy);
	if (!*n) {
		snprintf(err, err_len, "%s: the list is empty", what);
		return -EINVAL;
	}
	return 0;
}

int pgd_access_init(struct pgd_access *a, const char *users,
		    const char *groups, char *err, size_t err_len)
{
	unsigned *ids = NULL;
	int rc;

	memset(a, 0, sizeof(*a));
	a->self = geteuid();
	a->restricted = users || groups;
	if (users) {
		rc = parse_list(users, 0, &ids, &a->n_uids, err, err_len);
		a->uids = ids;
		if (rc)
			goto out_free;
	}
	if (groups) {
		ids = NULL;
		rc = parse_list(groups, 1, &ids, &a->n_gids, err, err_len);
		a->gids = ids;
		if (rc)
			goto out_free;
	}
	return 0;
out_free:
	pgd_access_free(a);
	return rc;
}

void pgd_access_free(struct pgd_access *a)
{
	free(a->uids);
	free(a->gids);
	a->uids = NULL;
	a->gids = NULL;
	a->n_uids = a->n_gids = 0;
}

int pgd_access_allowed(const struct pgd_access *a, uid_t uid,
		       const gid_t *gids, int n_gids)
{
	if (uid == 0 || uid == a->self || !a->restricted)
		return 1;
	for (int i = 0; i < a->n_uids; i++)
		if (a->uids[i] == uid)
			return 1;
	for (int i = 0; i < a->n_gids; i++)
		for (int j = 0; j < n_gids; j++)
			if (a->gids[i] == gids[j])
				return 1;
	return 0;
}
