/*
 * test_settings.c - the table of pagodad's settings (daemon/settings.h)
 * against itself and against what pagodad does with it, in-process
 * through pagodad_main:
 *   - every row has help text, a name (key, option or environment
 *     variable), a section among the file's for a key, and the keys come
 *     first; keys, options (aliases included), short options and
 *     environment names are unique, but for a shared option's pair;
 *   - every default reads as a value of its row (so it lies in its range),
 *     a key's default writes back the same, a key without a default may be
 *     left unset and says what happens then;
 *   - pagodad --help shows every option and variable with its argument,
 *     its help text and its default;
 *   - every key's option, given its default (or its lowest value), is
 *     accepted and shows in --print-config as "key = value"; one past the
 *     top of an integer range is a usage error (2); every other option is
 *     accepted too;
 *   - every variable is documented in man/pagodad.8;
 *   - --chat-format takes every chat format's name and auto, and any
 *     other is a usage error whose text lists them all.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/chat.h"
#include "daemon/pagodad.h"
#include "daemon/settings.h"
#include "tests/check.h"

static const char *const sections[] = {
	"model", "devices", "kv", "batch", "daemon", "limits", "access", "log",
	"stats",
};

/* text with every run of white space as one space, trimmed (malloc'd) */
static char *squeeze(const char *text)
{
	char *out = xmalloc(strlen(text) + 1), *p = out;

	for (; *text; text++) {
		if (isspace((unsigned char)*text)) {
			if (p > out && p[-1] != ' ')
				*p++ = ' ';
		} else {
			*p++ = *text;
		}
	}
	while (p > out && p[-1] == ' ')
		p--;
	*p = '\0';
	return out;
}

/* What a file holds (malloc'd, NUL-terminated), or NULL. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = xmalloc((size_t)n + 1);
	buf[fread(buf, 1, (size_t)n, f)] = '\0';
	fclose(f);
	return buf;
}

/*
 * pagodad_main with argv (NULL-terminated), its standard output into
 * *out (malloc'd, squeezed when squeezed); returns its exit status.
 */
static int run(const char *const *argv, char **out, int squeezed)
{
	char path[] = "/tmp/test_settings.XXXXXX";
	int fd = mkstemp(path), null = open("/dev/null", O_WRONLY), saved, saved2;
	int argc = 0, rc;
	char *text;

	if (fd < 0) {
		perror("mkstemp");
		exit(1);
	}
	while (argv[argc])
		argc++;
	fflush(stdout);
	fflush(stderr);
	saved = dup(1);
	saved2 = dup(2);
	dup2(fd, 1);
	dup2(null, 2);		/* the errors asked for; the checks say what failed */
	rc = pagodad_main(argc, (char **)argv);
	fflush(stdout);
	fflush(stderr);
	dup2(saved, 1);
	dup2(saved2, 2);
	close(saved);
	close(saved2);
	close(null);
	close(fd);
	text = slurp(path);
	unlink(path);
	if (!text)
		text = calloc(1, 1);
	if (squeezed) {
		*out = squeeze(text);
		free(text);
	} else {
		*out = text;
	}
	return rc;
}

static int is_key(const struct pgd_setting *s)
{
	return s->key != NULL;
}

/* Rows sharing an option: only a PGD_F_SHARED key and one other row. */
static int same_option(const struct pgd_setting *a, const struct pgd_setting *b)
{
	const char *na[2] = { a->option, a->alias }, *nb[2] = { b->option, b->alias };

	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			if (na[i] && nb[j] && !strcmp(na[i], nb[j]))
				return 1;
	return 0;
}

static void check_rows(void)
{
	int n_keys = pgd_settings_keys();

	CHECK(pgd_n_settings <= PGD_SETTINGS_MAX, "%d rows, PGD_SETTINGS_MAX %d",
	      pgd_n_settings, PGD_SETTINGS_MAX);
	CHECK(n_keys == 41, "%d keys, pagoda.conf(5) documents 41", n_keys);
	for (int i = 0; i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		const char *name = s->key ? s->key : s->option ? s->option : s->env;
		int in_section = 0, n_names = !!s->key + !!s->option + !!s->env;

		CHECK(name != NULL, "row %d has no key, option nor variable", i);
		if (!name)
			continue;
		CHECK(n_names >= 1 && (!s->env || n_names == 1),
		      "%s: a variable is a row of its own", name);
		CHECK(s->help && s->help[0] && !strchr(s->help, '\n') &&
		      s->help[strlen(s->help) - 1] != '.',
		      "%s: no help text, or one --help cannot lay out", name);
		CHECK((i < n_keys) == is_key(s), "%s: the keys must come first", name);
		CHECK(s->group >= 0 && s->group < PGD_H_COUNT, "%s: no --help section", name);
		CHECK(!s->env || (!strncmp(s->env, "PAGODA_", 7) && s->group == PGD_H_ENV),
		      "%s: a variable is PAGODA_* and in --help's environment", name);
		CHECK(!pgd_setting_takes_arg(s) || (s->arg && s->arg[0]),
		      "%s takes a value but --help has no name for it", name);
		if (is_key(s)) {
			for (size_t j = 0; j < sizeof(sections) / sizeof(sections[0]); j++)
				in_section |= !strcmp(s->section, sections[j]);
			CHECK(in_section, "%s: [%s] is not a section", name, s->section);
			CHECK(s->option != NULL, "key %s has no option", name);
		}
		if (i > 0 && is_key(s) && strcmp(pgd_settings[i - 1].section, s->section))
			for (int j = 0; j < i - 1; j++)
				CHECK(strcmp(pgd_settings[j].section, s->section),
				      "[%s]'s keys are not together (%s)", s->section, name);
		for (int j = 0; j < i; j++) {
			const struct pgd_setting *t = &pgd_settings[j];
			int shared = (t->flags & PGD_F_SHARED) && !is_key(s);

			CHECK(!s->key || !t->key || strcmp(s->key, t->key), "key %s twice", s->key);
			CHECK(!s->env || !t->env || strcmp(s->env, t->env), "variable %s twice", s->env);
			CHECK(!s->short_opt || s->short_opt != t->short_opt, "-%c twice", s->short_opt);
			CHECK(!same_option(s, t) || shared, "option --%s twice", s->option);
		}
		if (s->flags & PGD_F_SHARED) {
			int twins = 0;

			for (int j = n_keys; j < pgd_n_settings; j++)
				twins += pgd_settings[j].option && !strcmp(pgd_settings[j].option, s->option);
			CHECK(is_key(s) && twins == 1, "shared --%s: %d one-shot rows", s->option, twins);
		}
	}
}

static void check_defaults(void)
{
	for (int i = 0; i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		const char *name = s->key ? s->key : s->option ? s->option : s->env;
		unsigned char value[256] = { 0 }, value2[256] = { 0 };
		char buf[4096], exp[160];
		int rc;

		CHECK(pgd_setting_bytes(s) <= sizeof(value), "%s", name);
		if (s->type == PGD_T_HELP || s->type == PGD_T_VERSION)
			continue;
		if (s->flags & PGD_F_UNSET) {
			CHECK(s->unset && s->unset[0], "%s may be unset but does not say what then", name);
			CHECK(!s->def, "%s has a default and may be unset", name);
			CHECK(!pgd_setting_default(s, value), "%s", name);
			CHECK(pgd_setting_is_unset(s, value), "%s: its default is not its unset value", name);
			if (s->type == PGD_T_STR || s->type == PGD_T_MODEL)
				free(*(char **)value);
			continue;
		}
		CHECK(!s->unset, "%s says what unset means but cannot be unset", name);
		CHECK(s->def || !pgd_setting_takes_arg(s) || s->type == PGD_T_ARG ||
		      s->type == PGD_T_STOP,
		      "%s takes a value and has no default", name);
		if (!s->def)
			continue;
		pgd_setting_expected(s, exp, sizeof(exp));
		rc = pgd_setting_parse(s, s->def, value);
		CHECK(rc == 0, "%s: its default '%s' is not a value of it (%s)", name, s->def, exp);
		CHECK(!pgd_setting_default(s, value2), "%s", name);
		if (s->type == PGD_T_STR || s->type == PGD_T_MODEL)
			CHECK(!rc && !strcmp(*(char **)value, *(char **)value2),
			      "%s: pgd_setting_default is not its default read", name);
		else
			CHECK(!memcmp(value, value2, sizeof(value)),
			      "%s: pgd_setting_default is not its default read", name);
		if (is_key(s) && !rc) {
			pgd_setting_format(s, value, buf, sizeof(buf));
			CHECK(!strcmp(buf, s->def), "%s: its default '%s' writes as '%s'", name,
			      s->def, buf);
		}
		if (s->type == PGD_T_STR || s->type == PGD_T_MODEL) {
			free(*(char **)value);
			free(*(char **)value2);
		}
	}
}

/* What --help must say of s, squeezed (malloc'd). */
static char *help_entry(const struct pgd_setting *s)
{
	char raw[2048], note[512] = "";
	const char *arg = pgd_setting_takes_arg(s) ? s->arg : NULL;

	if (s->type == PGD_T_STOP)
		snprintf(note, sizeof(note), " (repeatable, up to %lld)", s->hi);
	else if (s->def && arg)
		snprintf(note, sizeof(note), " (default %s)", s->def);
	else if (s->unset)
		snprintf(note, sizeof(note), " (default: %s)", s->unset);
	if (s->env)
		snprintf(raw, sizeof(raw), "%s=%s %s%s", s->env, s->arg, s->help, note);
	else
		snprintf(raw, sizeof(raw), "--%s%s%s%s%s%s%s %s%s", s->option,
			 arg ? " " : "", arg ? arg : "", s->alias ? ", --" : "",
			 s->alias ? s->alias : "", s->alias && arg ? " " : "",
			 s->alias && arg ? arg : "", s->help, note);
	return squeeze(raw);
}

static void check_help(void)
{
	const char *argv[] = { "pagodad", "--help", NULL };
	char *help;
	int rc = run(argv, &help, 1);

	CHECK(rc == 0, "pagodad --help: exit %d", rc);
	for (int i = 0; i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		char *want, opt[8];

		if (!s->option && !s->env)
			continue;
		want = help_entry(s);
		CHECK(strstr(help, want), "pagodad --help lacks \"%s\"", want);
		free(want);
		snprintf(opt, sizeof(opt), "-%c, --", s->short_opt);
		CHECK(!s->short_opt || strstr(help, opt), "--help lacks -%c", s->short_opt);
	}
	free(help);
}

/*
 * A value of s that it accepts: the top of an integer range, else its
 * default, else its lowest.
 */
static void some_value(const struct pgd_setting *s, char *buf, size_t len)
{
	if (s->type == PGD_T_INT || s->type == PGD_T_SLOTS)
		snprintf(buf, len, "%lld", s->hi);
	else if (s->def)
		snprintf(buf, len, "%s", s->def);
	else if (s->type == PGD_T_FRACTION)
		snprintf(buf, len, "1");
	else if (s->type == PGD_T_STR || s->type == PGD_T_MODEL)
		snprintf(buf, len, "/tmp/x");
	else
		snprintf(buf, len, "%lld", s->lo);
}

static void check_options(void)
{
	for (int i = 0; i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		char opt[128], val[64], line[256], *out;
		const char *argv[8] = { "pagodad", "--config", "/dev/null", "--print-config",
					opt, NULL, NULL, NULL };
		int rc;

		if (!s->option || s->type == PGD_T_HELP || s->type == PGD_T_VERSION ||
		    !strcmp(s->option, "check-config"))
			continue;	/* --check-config asks the host */
		snprintf(opt, sizeof(opt), "--%s", s->option);
		some_value(s, val, sizeof(val));
		if (pgd_setting_takes_arg(s))
			argv[5] = s->type == PGD_T_ARG || s->type == PGD_T_STOP ? "/dev/null" : val;
		rc = run(argv, &out, 0);
		if (is_key(s)) {
			unsigned char v[256] = { 0 };
			char want[128];

			if (pgd_setting_takes_arg(s))
				pgd_setting_parse(s, val, v);
			else
				pgd_setting_parse(s, "yes", v);
			pgd_setting_format(s, v, want, sizeof(want));
			if (s->type == PGD_T_STR || s->type == PGD_T_MODEL)
				free(*(char **)v);
			snprintf(line, sizeof(line), "\n%s = %s\n", s->key, want);
			CHECK(rc == 0 && strstr(out, line), "%s %s: exit %d, no line '%s = %s'",
			      opt, argv[5] ? argv[5] : "", rc, s->key, want);
		} else {
			CHECK(rc == 0, "%s %s: exit %d", opt, argv[5] ? argv[5] : "", rc);
		}
		free(out);
		for (int end = 0; s->type == PGD_T_INT && end < 2; end++) {
			if (end ? s->hi >= INT32_MAX : s->lo <= INT32_MIN)
				continue;
			snprintf(val, sizeof(val), "%lld", end ? s->hi + 1 : s->lo - 1);
			argv[5] = val;
			rc = run(argv, &out, 0);
			CHECK(rc == 2, "%s %s (outside %lld..%lld): exit %d, not 2", opt, val,
			      s->lo, s->hi, rc);
			free(out);
		}
	}
}

static void check_man(void)
{
	const char *srcdir = getenv("top_srcdir");
	char path[4096], *page;

	snprintf(path, sizeof(path), "%s/man/pagodad.8", srcdir ? srcdir : ".");
	page = slurp(path);
	CHECK(page, "cannot read %s", path);
	for (int i = 0; page && i < pgd_n_settings; i++) {
		char want[128];

		if (!pgd_settings[i].env)
			continue;
		snprintf(want, sizeof(want), ".B %s\n", pgd_settings[i].env);
		CHECK(strstr(page, want), "man/pagodad.8 does not document %s", pgd_settings[i].env);
	}
	free(page);
}

static void check_chat_format(void)
{
	const struct pgd_setting *s = pgd_setting_by_option("chat-format");
	const char *argv[] = { "pagodad", "--config", "/dev/null", "--print-config",
			       "--chat-format", "qwen2", NULL };
	char exp[256], *out;
	int v, rc;

	CHECK(s && s->type == PGD_T_CHAT_FORMAT && s->key && !strcmp(s->key, "chat_format"),
	      "--chat-format is the key chat_format");
	if (!s)
		return;
	pgd_setting_expected(s, exp, sizeof(exp));
	for (int f = 0; f < PG_CHAT_N_FORMATS; f++) {
		const char *name = pg_chat_format_name((enum pg_chat_format)f);

		CHECK(!pgd_setting_parse(s, name, &v) && v == f, "--chat-format %s", name);
		CHECK(strstr(exp, name), "--chat-format's error (%s) does not name %s", exp, name);
	}
	CHECK(!pgd_setting_parse(s, "auto", &v) && v == -1, "--chat-format auto");
	CHECK(pgd_setting_parse(s, "jinja", &v) == -1 && pgd_setting_parse(s, "", &v) == -1,
	      "--chat-format takes a name it does not know");
	rc = run(argv, &out, 0);
	CHECK(rc == 0 && strstr(out, "\nchat_format = qwen2\n"),
	      "--chat-format qwen2: exit %d, no line 'chat_format = qwen2'", rc);
	free(out);
	argv[5] = "jinja";
	rc = run(argv, &out, 0);
	CHECK(rc == 2, "--chat-format jinja: exit %d, not 2", rc);
	free(out);
}

int main(void)
{
	check_rows();
	check_defaults();
	check_help();
	check_options();
	check_man();
	check_chat_format();
	if (failures) {
		fprintf(stderr, "test_settings: %d failures\n", (int)failures);
		return 1;
	}
	printf("test_settings: %d settings (%d keys), their defaults, --help and options checked\n",
	       pgd_n_settings, pgd_settings_keys());
	return 0;
}
