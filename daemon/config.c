/*
 * config.c - pagodad.conf and the options that override it (config.h).
 *
 * The keys are the first rows of pagodad's one table of settings
 * (settings.h): each with its section, its command-line option, its type,
 * range and default, where its value lives in struct pgd_conf, and whether
 * a reload may change it.  The file, the options, the checks,
 * --print-config and SIGHUP's comparison all go through that table, so a
 * key cannot be known to one and not to the others.
 *
 * libinih splits each "key = value" line (whitespace, inline comments).
 * It reports only the first line it could not parse, so the lines are
 * fed to it through a reader that checks every line first: sections,
 * lines that are neither comments, sections nor keys, and lines longer
 * than libinih reads are reported here, each with its number, and inih
 * sees key lines only.  The reader also strips leading whitespace, which
 * turns off inih's continuation lines: one key, one line.
 *
 * Not here: the one-shot modes' options (pagodad.c), and what the daemon
 * does with a reloaded configuration (reload.c).
 */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "daemon/access.h"
#include "daemon/config.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/log.h"
#include "daemon/settings.h"

/* The keys: the table's first N_KEYS rows (settings.h). */
static const struct pgd_setting *const keys = pgd_settings;
#define N_KEYS pgd_settings_keys()

static const char *const sections[] = {
	"model", "devices", "kv", "batch", "daemon", "limits", "access", "log",
	"stats",
};

#define N_SECTIONS ((int)(sizeof(sections) / sizeof(sections[0])))

/* Where a value came from: a line of the file (> 0), an option, or neither. */
#define FROM_DEFAULT 0
#define FROM_OPTION (-1)

/* An option's value, applied again after every load. */
struct override {
	int key;
	char *value;
};

struct pgd_conf_src {
	char *path;			/* the file last loaded */
	int required;
	int found;			/* it existed */
	int from[PGD_SETTINGS_MAX];	/* per key: FROM_* or the line */
	struct override *ov;		/* (n_ov) in the order given */
	int n_ov;
};

/* ---- values: pointers, defaults, copies ---- */

static void *slot(const struct pgd_conf *c, const struct pgd_setting *k)
{
	return (char *)c + k->off;
}

static char **str_slot(const struct pgd_conf *c, const struct pgd_setting *k)
{
	return (char **)slot(c, k);
}

static int is_str(const struct pgd_setting *k)
{
	return k->type == PGD_T_STR || k->type == PGD_T_MODEL;
}

static void free_strings(struct pgd_conf *c)
{
	for (int i = 0; i < N_KEYS; i++)
		if (is_str(&keys[i])) {
			free(*str_slot(c, &keys[i]));
			*str_slot(c, &keys[i]) = NULL;
		}
}

/* The defaults: the table's (settings.c); strings are copies. */
static int set_defaults(struct pgd_conf *c)
{
	struct pgd_conf_src *src = c->src;

	free_strings(c);
	memset(c, 0, sizeof(*c));
	c->src = src;
	c->daemon.conf = c;
	for (int i = 0; i < N_KEYS; i++)
		if (pgd_setting_default(&keys[i], slot(c, &keys[i])))
			return -1;	/* the strings so far are c's to free */
	return 0;
}

/* Copy key k's value from src to dst.  Returns 0, or -1 out of memory. */
static int copy_value(struct pgd_conf *dst, const struct pgd_conf *src,
		      const struct pgd_setting *k)
{
	char *s;

	if (!is_str(k)) {
		memcpy(slot(dst, k), slot(src, k), pgd_setting_bytes(k));
		return 0;
	}
	s = *str_slot(src, k);
	if (s && !(s = strdup(s)))
		return -1;
	free(*str_slot(dst, k));
	*str_slot(dst, k) = s;
	return 0;
}

/* Move key k's value from src to dst: no allocation. */
static void move_value(struct pgd_conf *dst, struct pgd_conf *src,
		       const struct pgd_setting *k)
{
	if (!is_str(k)) {
		copy_value(dst, src, k);
		return;
	}
	free(*str_slot(dst, k));
	*str_slot(dst, k) = *str_slot(src, k);
	*str_slot(src, k) = NULL;
}

/* Key k back to its default. */
static int reset_value(struct pgd_conf *c, const struct pgd_setting *k)
{
	if (is_str(k)) {
		free(*str_slot(c, k));
		*str_slot(c, k) = NULL;
	}
	return pgd_setting_default(k, slot(c, k)) ? -1 : 0;
}

/* An unset key holds its default: NULL, or a number below its range. */
static int is_unset(const struct pgd_conf *c, const struct pgd_setting *k)
{
	return pgd_setting_is_unset(k, slot(c, k));
}

/* Parse s as k's value into c.  Returns 0, -1 (bad value) or -ENOMEM. */
static int parse_value(struct pgd_conf *c, const struct pgd_setting *k,
		       const char *s)
{
	return pgd_setting_parse(k, s, slot(c, k));
}

/* What a value of k must look like, for error messages. */
static void expected(const struct pgd_setting *k, char *buf, size_t len)
{
	pgd_setting_expected(k, buf, len);
}

/*
 * Key k's value as the file writes it ("" when unset; the default model's
 * path for an unset [model] path).
 */
static void format_value(const struct pgd_conf *c, const struct pgd_setting *k,
			 char *buf, size_t len)
{
	if (k->type == PGD_T_MODEL) {
		const char *path = pgd_conf_model_path(c, buf, len);

		if (path != buf)
			snprintf(buf, len, "%s", path);
		return;
	}
	pgd_setting_format(k, slot(c, k), buf, len);
}


/* ---- reading the file ---- */

#define NO_SECTION (-1)		/* before the first [section] */
#define BAD_SECTION (-2)	/* under one already reported */

struct load {
	struct pgd_conf *c;
	const char *path;
	FILE *f;
	char *buf;			/* getline's line */
	size_t cap;
	int read_errno;			/* why getline stopped, if not EOF */
	int line;			/* the number of the line last read */
	int section;			/* sections[] index, or the two above */
	int n_errors;
	int oom;
	pgd_conf_report_fn report;
	void *ctx;
};

static void fail(struct load *l, const char *loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct load *l, const char *loc, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n = snprintf(msg, sizeof(msg), "%s", loc);

	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	va_end(ap);
	l->n_errors++;
	l->report(l->ctx, msg);
}

/* "PATH:LINE: " of the line last read. */
static const char *here(const struct load *l, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%d: ", l->path, l->line);
	return buf;
}

/* Where key i's value came from: "PATH:LINE: ", "--OPTION: " or "". */
static const char *origin(const struct load *l, int i, char *buf, size_t len)
{
	int from = l->c->src->from[i];

	if (from > 0)
		snprintf(buf, len, "%s:%d: ", l->path, from);
	else if (from == FROM_OPTION)
		snprintf(buf, len, "--%s: ", keys[i].option);
	else
		buf[0] = '\0';
	return buf;
}

static int section_index(const char *name)
{
	for (int i = 0; i < N_SECTIONS; i++)
		if (!strcmp(sections[i], name))
			return i;
	return -1;
}

static int key_index(const char *name)
{
	for (int i = 0; i < N_KEYS; i++)
		if (!strcmp(keys[i].key, name))
			return i;
	return -1;
}

/* "[model], [devices], ..." or the keys of one section, into buf. */
static void list_names(const char *section, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	if (!section)
		for (int i = 0; i < N_SECTIONS && n < len; i++)
			n += (size_t)snprintf(buf + n, len - n, "%s[%s]", i ? ", " : "", sections[i]);
	for (int i = 0; section && i < N_KEYS && n < len; i++)
		if (!strcmp(keys[i].section, section))
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", keys[i].key);
}

/* A [section] line: the section its keys go to, or an error. */
static void on_section(struct load *l, const char *p)
{
	const char *end = strchr(p, ']'), *rest;
	char name[64], loc[300], names[256];
	size_t n;

	l->section = BAD_SECTION;
	if (!end) {
		fail(l, here(l, loc, sizeof(loc)), "'%s' has no ']': expected [SECTION]", p);
		return;
	}
	p += 1 + strspn(p + 1, " \t");
	n = (size_t)(end - p);
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	snprintf(name, sizeof(name), "%.*s", (int)n, p);
	rest = end + 1 + strspn(end + 1, " \t");
	if (*rest && *rest != '#' && *rest != ';')
		fail(l, here(l, loc, sizeof(loc)), "unexpected '%s' after [%s]: a comment starts with # or ;",
		     rest, name);
	l->section = section_index(name);
	if (l->section >= 0)
		return;
	l->section = BAD_SECTION;
	list_names(NULL, names, sizeof(names));
	fail(l, here(l, loc, sizeof(loc)), "unknown section [%s]: the sections are %s", name, names);
}

/*
 * Whether p is "key = value" as inih reads it: an '=' before any ':'
 * (inih's other separator, not ours) and before any inline comment.
 */
static int has_equals(const char *p)
{
	for (const char *q = p; *q; q++) {
		if (*q == '=')
			return q > p;
		if (*q == ':' || (*q == ';' && (q[-1] == ' ' || q[-1] == '\t')))
			return 0;
	}
	return 0;
}

/* Check one line (leading blanks gone); 1: a key line for inih. */
static int is_key_line(struct load *l, const char *p, int num)
{
	char loc[300];

	if (!*p || *p == '#' || *p == ';')
		return 0;
	if (*p == '[') {
		on_section(l, p);
		return 0;
	}
	if (!has_equals(p)) {
		fail(l, here(l, loc, sizeof(loc)), "'%.60s%s' is not a line of pagodad.conf: expected 'key = value', [section] or a comment (# or ;)",
		     p, strlen(p) > 60 ? "..." : "");
		return 0;
	}
	if (l->section == BAD_SECTION)
		return 0;	/* the section's error said it */
	if ((int)strlen(p) > num - 3) {
		fail(l, here(l, loc, sizeof(loc)), "the line is longer than %d characters, the most libinih reads in one line",
		     num - 3);
		return 0;
	}
	return 1;
}

/* inih's reader: one line of the file, or "" for a line it need not see. */
static char *read_line(char *str, int num, void *stream)
{
	struct load *l = stream;
	char loc[300];
	ssize_t n;
	char *p;

	errno = 0;
	n = getline(&l->buf, &l->cap, l->f);
	if (n < 0) {
		l->read_errno = errno;
		return NULL;
	}
	l->line++;
	p = l->buf;
	while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == '\r'))
		p[--n] = '\0';
	str[0] = '\0';
	if (memchr(p, '\0', (size_t)n)) {
		fail(l, here(l, loc, sizeof(loc)), "the line holds a NUL byte: pagodad.conf is text");
		return str;
	}
	if (l->line == 1 && !strncmp(p, "\xef\xbb\xbf", 3))
		p += 3;		/* a UTF-8 byte order mark */
	p += strspn(p, " \t");
	if (is_key_line(l, p, num))
		memcpy(str, p, strlen(p) + 1);
	return str;
}

static void unknown_key(struct load *l, const char *name)
{
	char loc[300], names[512];
	const char *sec = l->section >= 0 ? sections[l->section] : NULL;

	if (!sec) {
		fail(l, here(l, loc, sizeof(loc)), "unknown key '%s': see pagoda.conf(5) for the keys", name);
		return;
	}
	list_names(sec, names, sizeof(names));
	fail(l, here(l, loc, sizeof(loc)), "unknown key '%s' in [%s]: its keys are %s", name, sec, names);
}

/* Another KV pool size set by the file before key i, or -1. */
static int pool_set_before(const struct load *l, int i)
{
	for (int j = 0; j < N_KEYS; j++)
		if (j != i && (keys[j].flags & PGD_F_POOL) && l->c->src->from[j] > 0)
			return j;
	return -1;
}

static void set_from_file(struct load *l, int i, const char *value)
{
	const struct pgd_setting *k = &keys[i];
	char loc[300], exp[160];
	int j, rc;

	here(l, loc, sizeof(loc));
	if (!*value) {
		fail(l, loc, "%s has no value: give one, or remove the line to leave it at its default", k->key);
		return;
	}
	if ((k->flags & PGD_F_POOL) && (j = pool_set_before(l, i)) >= 0) {
		fail(l, loc, "%s: the KV pool's size is already given by %s at line %d: keep one of ctx_size, kv_size and kv_fraction",
		     k->key, keys[j].key, l->c->src->from[j]);
		return;
	}
	rc = parse_value(l->c, k, value);
	if (rc == -ENOMEM) {
		l->oom = 1;
	} else if (rc) {
		expected(k, exp, sizeof(exp));
		fail(l, loc, "%s '%s': %s", k->key, value, exp);
	} else {
		l->c->src->from[i] = l->line;
	}
}

/* inih's handler: one "key = value" line (its section is l->section). */
static int on_key(void *user, const char *section, const char *name,
		  const char *value)
{
	struct load *l = user;
	int i = key_index(name);
	char loc[300];

	(void)section;
	here(l, loc, sizeof(loc));
	if (i < 0)
		unknown_key(l, name);
	else if (l->section == NO_SECTION)
		fail(l, loc, "%s is outside any section: put it under [%s]", name, keys[i].section);
	else if (strcmp(sections[l->section], keys[i].section))
		fail(l, loc, "%s belongs in [%s], not [%s]", name, keys[i].section,
		     sections[l->section]);
	else if (l->c->src->from[i] > 0)
		fail(l, loc, "%s is given twice (first at line %d)", name, l->c->src->from[i]);
	else
		set_from_file(l, i, value);
	return 1;
}

static void read_file(struct load *l)
{
	struct pgd_conf_src *src = l->c->src;
	int rc;

	l->f = fopen(l->path, "re");
	if (!l->f) {
		if (errno != ENOENT || src->required)
			fail(l, "", "cannot open %s: %s%s", l->path, strerror(errno),
			     src->required ? "" : " (give another file with --config)");
		return;
	}
	src->found = 1;
	rc = ini_parse_stream(read_line, l, on_key, l);
	if (rc == -2)
		l->oom = 1;
	else if (rc > 0)	/* on_key never refuses: inih itself did */
		fail(l, "", "%s:%d: libinih cannot read the line", l->path, rc);
	if (l->read_errno)
		fail(l, "", "cannot read %s: %s", l->path, strerror(l->read_errno));
	fclose(l->f);
	free(l->buf);
	l->buf = NULL;
}

/* ---- options, and the checks between keys ---- */

/* The key of a long option (its alias too), or -1. */
static int option_index(const char *option)
{
	const struct pgd_setting *s = pgd_setting_by_option(option);
	int i = s ? pgd_setting_index(s) : -1;

	return i < N_KEYS ? i : -1;
}

static int add_override(struct pgd_conf *c, int key, const char *value)
{
	struct pgd_conf_src *src = c->src;
	struct override *ov = realloc(src->ov, sizeof(*ov) * (size_t)(src->n_ov + 1));
	char *v = strdup(value);

	if (ov)
		src->ov = ov;
	if (!ov || !v) {
		free(v);
		return -1;
	}
	ov[src->n_ov++] = (struct override){ .key = key, .value = v };
	return 0;
}

int pgd_conf_set_option(struct pgd_conf *c, const char *option,
			const char *value, char *err, size_t err_len)
{
	int i = option_index(option), rc;
	char exp[160];

	if (i < 0)
		return 1;
	if (!*value) {
		snprintf(err, err_len, "--%s: expected a value, not an empty one", option);
		return -1;
	}
	rc = parse_value(c, &keys[i], value);
	if (!rc)
		rc = add_override(c, i, value) ? -ENOMEM : 0;
	if (rc == -ENOMEM) {
		snprintf(err, err_len, "out of memory reading --%s", option);
		return -1;
	}
	if (rc) {
		expected(&keys[i], exp, sizeof(exp));
		snprintf(err, err_len, "--%s '%s': %s", option, value, exp);
		return -1;
	}
	c->src->from[i] = FROM_OPTION;
	return 0;
}

/* An option's KV pool size replaces the file's, whichever key gave it. */
static void clear_other_pool_keys(struct load *l, int i)
{
	for (int j = 0; j < N_KEYS; j++)
		if (j != i && (keys[j].flags & PGD_F_POOL) &&
		    l->c->src->from[j] != FROM_DEFAULT) {
			if (reset_value(l->c, &keys[j]))
				l->oom = 1;
			l->c->src->from[j] = FROM_DEFAULT;
		}
}

static void apply_options(struct load *l)
{
	const struct pgd_conf_src *src = l->c->src;
	char exp[160];

	for (int n = 0; n < src->n_ov; n++) {
		const struct override *ov = &src->ov[n];
		const struct pgd_setting *k = &keys[ov->key];
		int rc;

		if (k->flags & PGD_F_POOL)
			clear_other_pool_keys(l, ov->key);
		rc = parse_value(l->c, k, ov->value);
		if (rc == -ENOMEM)
			l->oom = 1;
		else if (rc) {	/* checked when given: cannot happen */
			expected(k, exp, sizeof(exp));
			fail(l, "", "--%s '%s': %s", k->option, ov->value, exp);
		}
		l->c->src->from[ov->key] = FROM_OPTION;
	}
}

static void check_socket(struct load *l, const char *name, const char *path)
{
	char loc[300];
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;

	if (path && strlen(path) > max)
		fail(l, origin(l, key_index(name), loc, sizeof(loc)),
		     "%s %s: a socket's path has at most %zu bytes", name, path, max);
}

static void check_keys(struct load *l)
{
	const struct pgd_config *d = &l->c->daemon;
	char loc[300], a[32], b[32];

	if (d->max_payload > d->sq_arena) {
		pgd_format_bytes(d->max_payload, a, sizeof(a));
		pgd_format_bytes(d->sq_arena, b, sizeof(b));
		fail(l, origin(l, key_index("max_payload"), loc, sizeof(loc)),
		     "max_payload %s is more than the submission arena holds (sq_arena %s): lower max_payload or raise sq_arena",
		     a, b);
	}
	check_socket(l, "socket", d->socket_path);
	check_socket(l, "admin_socket", d->admin_socket);
	if (d->socket_path && d->admin_socket && !strcmp(d->socket_path, d->admin_socket))
		fail(l, origin(l, key_index("admin_socket"), loc, sizeof(loc)),
		     "admin_socket is the same path as socket: the admin commands need a socket of their own");
}

int pgd_conf_load(struct pgd_conf *c, const char *path, int required,
		  pgd_conf_report_fn report, void *ctx)
{
	struct pgd_conf_src *src = c->src;
	struct load l = { .c = c, .section = NO_SECTION, .report = report,
			  .ctx = ctx };
	char *p = strdup(path);

	if (!p || set_defaults(c)) {
		free(p);
		return -1;
	}
	free(src->path);
	src->path = p;
	src->required = required;
	src->found = 0;
	memset(src->from, 0, sizeof(src->from));
	l.path = p;
	read_file(&l);
	apply_options(&l);
	check_keys(&l);
	return l.oom ? -1 : l.n_errors;
}

/* ---- the host's checks (--check-config) ---- */

/* Where the plan's keys came from: the first one set. */
static const char *plan_origin(const struct load *l, char *buf, size_t len)
{
	static const char *const names[] = {
		"devices", "parallel", "pipeline_parallel", "tensor_parallel",
		"context_parallel", "threads", "page_tokens",
	};

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !buf[0]; i++)
		origin(l, key_index(names[i]), buf, len);
	return buf;
}

static void check_model_and_plan(struct load *l)
{
	const struct pgd_conf *c = l->c;
	struct pg_model_facts f;
	struct pg_plan_request req;
	struct pg_plan *plan;
	char path_buf[4096], err[1024], loc[300];
	const char *path = pgd_conf_model_path(c, path_buf, sizeof(path_buf));
	int rc = pg_model_facts_read(path, &f, err, sizeof(err));

	if (rc) {
		fail(l, origin(l, key_index("path"), loc, sizeof(loc)), "%s%s", err,
		     rc == -ENOENT && !c->model ? " (fetch the default model with scripts/fetch-model, or set [model] path)" : "");
		return;
	}
	plan = malloc(sizeof(*plan));
	if (!plan) {
		l->oom = 1;
		return;
	}
	pgd_conf_plan_request(c, &f, &req);
	if (pg_plan_make(&req, &f, plan, err, sizeof(err)))
		fail(l, plan_origin(l, loc, sizeof(loc)), "%s", err);
	free(plan);
}

static void check_access(struct load *l, const char *name, int groups)
{
	const char *list = *str_slot(l->c, &keys[key_index(name)]);
	struct pgd_access a;
	char err[512], loc[300];

	if (!list)
		return;
	if (pgd_access_init(&a, groups ? NULL : list, groups ? list : NULL,
			    err, sizeof(err)))	/* err: "--allow-users: ..." */
		fail(l, origin(l, key_index(name), loc, sizeof(loc)), "%s: %s", name,
		     strncmp(err, "--allow-", 8) || !strchr(err, ' ') ? err : strchr(err, ' ') + 1);
	else
		pgd_access_free(&a);
}

/* A group name, or a number (the admin group's must exist, as admin.c wants). */
static void check_group(struct load *l, const char *name, int must_exist)
{
	const char *group = *str_slot(l->c, &keys[key_index(name)]);
	char loc[300];
	long long id;

	if (!group || getgrnam(group))
		return;
	if (!pgd_parse_ll(group, 10, &id) && id >= 0 && id < UINT_MAX &&
	    (!must_exist || getgrgid((gid_t)id)))
		return;
	fail(l, origin(l, key_index(name), loc, sizeof(loc)),
	     "%s: no group named '%s' on this host (create it, or give a group that exists)",
	     name, group);
}

int pgd_conf_check_host(const struct pgd_conf *c, pgd_conf_report_fn report,
			void *ctx)
{
	struct load l = { .c = (struct pgd_conf *)c, .path = c->src->path,
			  .report = report, .ctx = ctx };

	check_model_and_plan(&l);
	check_access(&l, "allow_users", 0);
	check_access(&l, "allow_groups", 1);
	check_group(&l, "socket_group", 0);
	check_group(&l, "admin_group", 1);
	return l.oom ? -1 : l.n_errors;
}

/* ---- life, reload, printing ---- */

struct pgd_conf *pgd_conf_create(void)
{
	struct pgd_conf *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->src = calloc(1, sizeof(*c->src));
	if (!c->src || set_defaults(c)) {
		pgd_conf_free(c);
		return NULL;
	}
	return c;
}

void pgd_conf_free(struct pgd_conf *c)
{
	if (!c)
		return;
	free_strings(c);
	if (c->src) {
		for (int i = 0; i < c->src->n_ov; i++)
			free(c->src->ov[i].value);
		free(c->src->ov);
		free(c->src->path);
		free(c->src);
	}
	free(c);
}

struct pgd_conf *pgd_conf_reread(const struct pgd_conf *c,
				 pgd_conf_report_fn report, void *ctx,
				 int *n_errors)
{
	struct pgd_conf *fresh = pgd_conf_create();
	int n = -1;

	for (int i = 0; fresh && i < c->src->n_ov; i++)
		if (add_override(fresh, c->src->ov[i].key, c->src->ov[i].value)) {
			pgd_conf_free(fresh);
			fresh = NULL;
		}
	if (fresh)
		n = pgd_conf_load(fresh, c->src->path, c->src->required, report, ctx);
	*n_errors = n;
	if (n) {
		pgd_conf_free(fresh);
		return NULL;
	}
	return fresh;
}

#define VALUE_MAX 4096

int pgd_conf_apply(struct pgd_conf *running, const struct pgd_conf *fresh,
		   pgd_conf_change_fn changed, void *ctx)
{
	struct pgd_conf *staged = pgd_conf_create();
	char was[VALUE_MAX], now[VALUE_MAX];
	unsigned char differs[PGD_SETTINGS_MAX];
	int n = 0;

	if (!staged)
		return -1;
	/* copy first, so that running is unchanged when memory runs out */
	for (int i = 0; i < N_KEYS; i++) {
		format_value(running, &keys[i], was, sizeof(was));
		format_value(fresh, &keys[i], now, sizeof(now));
		differs[i] = strcmp(was, now) != 0;
		if (differs[i] && (keys[i].flags & PGD_F_RELOAD) &&
		    copy_value(staged, fresh, &keys[i])) {
			pgd_conf_free(staged);
			return -1;
		}
	}
	for (int i = 0; i < N_KEYS; i++) {
		int applied = (keys[i].flags & PGD_F_RELOAD) != 0;

		if (!differs[i])
			continue;
		format_value(running, &keys[i], was, sizeof(was));
		format_value(fresh, &keys[i], now, sizeof(now));
		if (applied) {
			move_value(running, staged, &keys[i]);
			n++;
		}
		changed(ctx, keys[i].key, was, now, applied);
	}
	pgd_conf_free(staged);
	return n;
}

void pgd_conf_print(const struct pgd_conf *c, FILE *out)
{
	char buf[VALUE_MAX];
	const char *sec = NULL;

	fprintf(out, "# pagodad's effective configuration: %s%s, then the command line\n",
		c->src->path ? c->src->path : "no file",
		c->src->path && !c->src->found ? " (absent)" : "");
	for (int i = 0; i < N_KEYS; i++) {
		const struct pgd_setting *k = &keys[i];

		if (!sec || strcmp(sec, k->section))
			fprintf(out, "\n[%s]\n", k->section);
		sec = k->section;
		if (k->off == offsetof(struct pgd_conf, ctx_size) && (c->kv_bytes || c->kv_fraction > 0)) {
			fprintf(out, "# ctx_size is not used: %s gives the pool's size\n",
				c->kv_bytes ? "kv_size" : "kv_fraction");
			continue;
		}
		if (is_unset(c, k) && k->type != PGD_T_MODEL) {
			fprintf(out, "# %s is not set: %s\n", k->key, k->unset);
			continue;
		}
		format_value(c, k, buf, sizeof(buf));
		fprintf(out, "%s = %s\n", k->key, buf);
	}
}

const char *pgd_conf_path(const struct pgd_conf *c)
{
	return c->src->path;
}

int pgd_conf_parallel_given(const struct pgd_conf *c)
{
	return c->devices || c->pp || c->tp || c->cp || c->autoplan;
}

const char *pgd_conf_model_path(const struct pgd_conf *c, char *buf,
				size_t len)
{
	return c->model ? c->model : pg_model_default_path(buf, len);
}

void pgd_conf_plan_request(const struct pgd_conf *c,
			   const struct pg_model_facts *f,
			   struct pg_plan_request *req)
{
	int elem = c->kv_type == PG_F32 ? 4 : 2;
	uint64_t token_bytes = 2ull * (uint64_t)f->n_kv_heads *
			       (uint64_t)f->head_dim * (uint64_t)elem *
			       (uint64_t)f->n_blocks;

	memset(req, 0, sizeof(*req));
	req->devices = c->devices;
	req->pipeline_parallel = c->pp;
	req->tensor_parallel = c->tp;
	req->context_parallel = c->cp;
	req->autoplan = c->autoplan;
	req->n_threads = c->threads >= 0 ? c->threads :
			 pgd_conf_parallel_given(c) ? 0 : 2;
	req->ctx_tokens = c->ctx_size;
	if (c->kv_bytes && token_bytes) {
		uint64_t n = c->kv_bytes / token_bytes;

		req->ctx_tokens = n < 1 ? 1 : n > (1 << 24) ? 1 << 24 : (int)n;
	}
	req->batch_seqs = 1;
	req->kv_bytes_per_elem = elem;
	req->page_tokens = c->page_tokens;
}
