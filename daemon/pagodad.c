/*
 * pagodad.c - pagodad's command line (pagodad_main, pagodad.h; main.c
 * calls it): the options, pagodad.conf and the options over it, and the
 * mode they ask for: the serving daemon (the default, pgd_serve()),
 * --check-config and --print-config here; --plan and the one-shot
 * completion and tokenize modes in oneshot.c.
 *
 * With oneshot.c, this is the only daemon code that prints to the
 * terminal on its own.  The options, their defaults and --help come from
 * the table of settings (settings.h): an option that stands for a key of
 * pagodad.conf goes to config.c, which applies it over the file; the
 * others' values land in the struct pgd_cmdline of struct pgd_options
 * (oneshot.h).  The serving loop (sockets, rings) is server.c's and logs
 * through log.h.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <config.h>		/* autoconf's: daemon/config.h shadows "config.h" */

#include "common/clock.h"
#include "daemon/config.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/oneshot.h"
#include "daemon/pagodad.h"
#include "daemon/server.h"
#include "daemon/settings.h"

static void usage(FILE *out)
{
	fputs(
"Usage: pagodad [--config FILE] [--model FILE] [options]   serve (the default)\n"
"       pagodad --model FILE --prompt TEXT [options]   one-shot completion\n"
"       pagodad --model FILE --tokenize TEXT             print token ids\n"
"       pagodad --model FILE --tokenize-file FILE|-      one line of ids per line\n"
"       pagodad --model FILE --plan [parallel options]   show the parallel plan\n"
"       pagodad --check-config [--config FILE] [options] check the configuration\n"
"       pagodad --print-config [--config FILE] [options] print the configuration\n"
"\n", out);
	pgd_settings_help(out);
}

/* The value of row s in o->cl. */
static void *cl_slot(struct pgd_options *o, const struct pgd_setting *s)
{
	return (char *)&o->cl + s->off;
}

/*
 * One option (name: as given, its alias or short form aside): a key's
 * value goes to config.c, checked now and applied over the file; the
 * others' are the command line's own.
 */
static int parse_setting(struct pgd_options *o, const struct pgd_setting *s,
			 const char *name, const char *arg)
{
	char err[512], exp[160];

	o->given[pgd_setting_index(s)] = arg ? arg : "";
	if (s->key) {
		if (!pgd_conf_set_option(o->conf, name, arg ? arg : "yes", err, sizeof(err)))
			return 0;
		fprintf(stderr, "pagodad: %s\n", err);
		return -1;
	}
	if (!pgd_setting_parse(s, arg ? arg : "", cl_slot(o, s)))
		return 0;
	pgd_setting_expected(s, exp, sizeof(exp));
	fprintf(stderr, "pagodad: --%s '%s': %s\n", name, arg ? arg : "", exp);
	return -1;
}

/* The environment's settings: a bad value is said, and the default kept. */
static void read_env(struct pgd_options *o)
{
	for (int i = 0; i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		const char *v = s->env ? getenv(s->env) : NULL;
		char exp[160];

		if (!v || !*v || !pgd_setting_parse(s, v, cl_slot(o, s)))
			continue;
		pgd_setting_expected(s, exp, sizeof(exp));
		fprintf(stderr, "pagodad: warning: %s=%s: %s; using %s\n", s->env, v,
			exp, s->def);
	}
}

/* The table's defaults (settings.c), over the sampler's for the rest. */
static int set_defaults(struct pgd_options *o)
{
	memset(o, 0, sizeof(*o));
	o->cl.gen.sampling = pg_sampling_default();
	for (int i = pgd_settings_keys(); i < pgd_n_settings; i++)
		pgd_setting_default(&pgd_settings[i], cl_slot(o, &pgd_settings[i]));
	o->conf = pgd_conf_create();
	if (o->conf)
		return 0;
	fprintf(stderr, "pagodad: out of memory\n");
	return -1;
}

/* Returns 0 to run, 1 to exit successfully (help), -1 on a usage error. */
static int parse_options(int argc, char **argv, struct pgd_options *o)
{
	struct option opts[PGD_SETTINGS_MAX + 1];
	const struct pgd_setting *s;
	char shortopts[64];
	int c, index;

	if (set_defaults(o))
		return -1;
	pgd_settings_getopt(opts, shortopts);
	optind = 1;
	while (index = -1,
	       (c = getopt_long(argc, argv, shortopts, opts, &index)) != -1) {
		s = c == '?' ? NULL : pgd_setting_of_opt(c);
		if (!s)
			goto bad;
		if (s->type == PGD_T_HELP) {
			usage(stdout);
			return 1;
		}
		if (s->type == PGD_T_VERSION) {
			printf("pagodad %s\n", PACKAGE_VERSION);
			return 1;
		}
		if (parse_setting(o, s, index >= 0 ? opts[index].name : s->option, optarg))
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "pagodad: unexpected argument '%s'\n", argv[optind]);
		goto bad;
	}
	o->cl.gen.stop = o->cl.stop.v;
	o->cl.gen.n_stop = o->cl.stop.n;
	if (!o->given[pgd_setting_index(pgd_setting_by_option("seed"))])
		o->cl.gen.sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	read_env(o);
	return 0;
bad:
	fprintf(stderr, "Try 'pagodad --help' for more information.\n");
	return -1;
}

static void report_stderr(void *ctx, const char *msg)
{
	(void)ctx;
	fprintf(stderr, "pagodad: %s\n", msg);
}

/*
 * pagodad.conf, then the options over it, every error said.  serving:
 * an option that a one-shot setting shares with a key (--max-tokens) is
 * then the key's too, the daemon's limit.  Returns 0, 1 (errors in the
 * configuration) or 2 (a bad value of a shared option for the daemon).
 */
static int load_config(struct pgd_options *o, int serving)
{
	const char *path = o->cl.config ? o->cl.config : PGD_DEFAULT_CONFIG;
	char err[512];
	int n;

	for (int i = pgd_settings_keys(); serving && i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		const struct pgd_setting *k = s->option ? pgd_setting_by_option(s->option) : NULL;

		if (k && k != s && o->given[i] &&
		    pgd_conf_set_option(o->conf, k->option, o->given[i], err, sizeof(err))) {
			fprintf(stderr, "pagodad: %s (the daemon's limit)\n", err);
			return 2;
		}
	}
	n = pgd_conf_load(o->conf, path, o->cl.config != NULL, report_stderr, NULL);
	if (!n)
		return 0;
	if (n < 0)
		fprintf(stderr, "pagodad: out of memory reading %s\n", path);
	else
		fprintf(stderr, "pagodad: %d error%s in the configuration (%s, then the options): see pagoda.conf(5)\n",
			n, n == 1 ? "" : "s", path);
	return 1;
}

/* --check-config, once the file and the options have loaded: the host. */
static int run_check_config(const struct pgd_options *o)
{
	const char *path = pgd_conf_path(o->conf);
	int n = pgd_conf_check_host(o->conf, report_stderr, NULL);

	if (n) {
		fprintf(stderr, "pagodad: %d error%s in the configuration (%s, then the options)\n",
			n < 0 ? 1 : n, n == 1 ? "" : "s", path);
		return 1;
	}
	printf("pagodad: the configuration is valid (%s, then the options)\n", path);
	return 0;
}

/* The serving daemon: signals blocked before any thread starts, then serve. */
static int run_daemon(struct pgd_options *o, const struct pg_model *m)
{
	struct pg_forward *fw = NULL;
	struct pg_plan *plan;
	int rc;

	struct pgd_conf *c = o->conf;

	pgd_log_set_level((enum pgd_log_level)c->log_level);
	rc = pgd_block_signals();
	if (rc) {
		fprintf(stderr, "pagodad: cannot block signals: %s\n", strerror(-rc));
		return 1;
	}
	pgd_notify_status("placing %s on its devices and allocating the KV cache", m->name);
	if (pgd_make_forward(o, m, &fw, &plan)) {
		pgd_notify_status("cannot place the model: see the log");
		return 1;
	}
	c->daemon.plan_desc = pgd_conf_parallel_given(c) ? plan->reason : "one CPU device, threads not pinned";
	c->daemon.max_batch_tokens = c->max_batch_tokens;
	c->daemon.max_batch_seqs = c->max_batch_seqs;
	c->daemon.fault_injection = o->cl.fault_injection;
	rc = pgd_serve(&c->daemon, m, fw);
	pg_forward_destroy(fw);
	free(plan);
	return rc;
}

/* The mode the options ask for, once the configuration has loaded. */
static int run_mode(struct pgd_options *o, double t0)
{
	struct pg_model *m = NULL;
	char path_buf[4096], err[1024];
	const char *path;
	int rc, vocab_only, serve;

	serve = !o->cl.prompt && !o->cl.prompt_file && !o->cl.tokenize && !o->cl.tokenize_file &&
		!o->cl.plan;
	rc = load_config(o, serve);
	if (rc)
		return rc;
	if (o->cl.check_config)
		return run_check_config(o);
	if (o->cl.print_config) {
		pgd_conf_print(o->conf, stdout);
		return 0;
	}
	if ((o->cl.grammar_file || o->cl.schema_file) && (o->cl.plan || serve || !(o->cl.prompt || o->cl.prompt_file))) {
		fprintf(stderr, "pagodad: --grammar and --json-schema go with --prompt or --prompt-file (a one-shot run); clients give a grammar with each request (pagoda generate --grammar, struct pagoda_request's grammar)\n");
		return 2;
	}
	if (o->cl.grammar_file && o->cl.schema_file) {
		fprintf(stderr, "pagodad: give --grammar or --json-schema, not both\n");
		return 2;
	}
	path = pgd_conf_model_path(o->conf, path_buf, sizeof(path_buf));
	if (o->cl.plan)
		return pgd_run_plan(o, path);
	vocab_only = (o->cl.tokenize || o->cl.tokenize_file) && !o->cl.prompt && !o->cl.prompt_file;
	if (serve)
		pgd_notify_status("loading model %s", path);
	rc = pg_model_load(path, vocab_only, &m, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "pagodad: %s\n", err);
		if (serve)
			pgd_notify_status("cannot load %s: %s", path, err);
		if (rc == -ENOENT && !o->conf->model)
			fprintf(stderr, "pagodad: fetch the default model with scripts/fetch-model, or pass --model FILE\n");
		return 1;
	}
	if (serve)
		rc = run_daemon(o, m);
	else
		rc = vocab_only ? pgd_run_tokenize(o, m) : pgd_run_prompt(o, m, t0);
	pg_model_free(m);
	return rc;
}

int pagodad_main(int argc, char **argv)
{
	struct pgd_options o;
	double t0 = pg_now_s();
	int rc = parse_options(argc, argv, &o);

	if (!rc)
		rc = run_mode(&o, t0);
	else
		rc = rc > 0 ? 0 : 2;
	pgd_conf_free(o.conf);
	return rc;
}
