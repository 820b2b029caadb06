/*
 * oneshot.c - pagodad's command line: the serving daemon (the default
 * mode: pagodad.conf and the options over it, then pgd_serve()), the
 * one-shot completion and tokenize modes that operators and tests use
 * without a running daemon, --plan, which shows the parallel plan the
 * options give without loading weights, and --check-config and
 * --print-config.
 *
 * This is the only daemon code that prints to the terminal on its own; it
 * parses the options, loads the model and builds the forward pass.  The
 * options, their defaults and --help come from the table of settings
 * (settings.h): an option that stands for a key of pagodad.conf goes to
 * config.c, which applies it over the file; the others' values land in a
 * struct pgd_cmdline here.  The serving loop (sockets, rings) is
 * server.c's and logs through log.h.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <config.h>		/* autoconf's: daemon/config.h shadows "config.h" */

#include "config.h"
#include "common/clock.h"
#include "daemon/pagodad.h"
#include "engine/chat.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/tokenizer.h"
#include "log.h"
#include "notify.h"
#include "server.h"
#include "settings.h"

struct options {
	struct pgd_cmdline cl;	/* the command line's own settings and the
				   environment's (settings.h) */
	const char *given[PGD_SETTINGS_MAX];	/* per row: its last argument
						   ("" without one), or NULL */
	struct pgd_conf *conf;	/* pagodad.conf's keys, the options over them */
};

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
static void *cl_slot(struct options *o, const struct pgd_setting *s)
{
	return (char *)&o->cl + s->off;
}

/*
 * One option (name: as given, its alias or short form aside): a key's
 * value goes to config.c, checked now and applied over the file; the
 * others' are the command line's own.
 */
static int parse_setting(struct options *o, const struct pgd_setting *s,
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
static void read_env(struct options *o)
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
static int set_defaults(struct options *o)
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
static int parse_options(int argc, char **argv, struct options *o)
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
static int load_config(struct options *o, int serving)
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
static int run_check_config(const struct options *o)
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

/* The plan of the options for a model of facts f (malloc'd), or NULL. */
static struct pg_plan *make_plan(const struct options *o,
				 const struct pg_model_facts *f,
				 struct pg_plan_request *req)
{
	struct pg_plan *plan = malloc(sizeof(*plan));
	char err[768];

	if (!plan) {
		fprintf(stderr, "pagodad: out of memory for the plan\n");
		return NULL;
	}
	pgd_conf_plan_request(o->conf, f, req);
	if (pg_plan_make(req, f, plan, err, sizeof(err))) {
		fprintf(stderr, "pagodad: %s\n", err);
		free(plan);
		return NULL;
	}
	return plan;
}

/* --plan: the model's facts from its metadata, the plan, printed. */
static int run_plan(const struct options *o, const char *path)
{
	struct pg_model_facts f;
	struct pg_plan_request req;
	struct pg_plan *plan;
	char err[1024];
	int rc = pg_model_facts_read(path, &f, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "pagodad: %s\n", err);
		if (rc == -ENOENT && !o->conf->model)
			fprintf(stderr, "pagodad: fetch the default model with scripts/fetch-model, or pass --model FILE\n");
		return 1;
	}
	plan = make_plan(o, &f, &req);
	if (!plan)
		return 1;
	printf("file: %s\n", path);
	pg_plan_print(stdout, plan, &f, &req);
	free(plan);
	return 0;
}

/* Read all of FILE ('-': standard input) into a NUL-terminated buffer. */
static char *read_all(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	size_t cap = 4096, n = 0, r;
	char *buf = NULL, *nb;

	if (!f)
		return NULL;
	for (;;) {
		nb = realloc(buf, cap + 1);
		if (!nb)
			break;
		buf = nb;
		r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (n < cap)
			break;
		cap *= 2;
	}
	if (ferror(f) || !nb) {
		free(buf);
		buf = NULL;
	} else {
		buf[n] = '\0';
		*len = n;
	}
	if (f != stdin)
		fclose(f);
	return buf;
}

static int print_ids(const struct pg_tokenizer *tok, const char *text,
		     size_t len, int parse_special)
{
	int64_t n = pg_tokenize(tok, text, len, pg_tokenizer_add_bos(tok),
				parse_special, NULL, 0);
	int32_t *ids;

	if (n < 0)
		return -1;
	ids = malloc(sizeof(*ids) * (size_t)(n ? n : 1));
	if (!ids)
		return -1;
	pg_tokenize(tok, text, len, pg_tokenizer_add_bos(tok), parse_special,
		    ids, n);
	putchar('[');
	for (int64_t i = 0; i < n; i++)
		printf(i ? ", %d" : "%d", ids[i]);
	puts("]");
	free(ids);
	return 0;
}

static int run_tokenize(const struct options *o, const struct pg_model *m)
{
	size_t len = 0;
	char *buf, *line, *save = NULL;
	int rc = 0;

	if (o->cl.tokenize)
		return print_ids(m->tok, o->cl.tokenize, strlen(o->cl.tokenize),
				 o->cl.parse_special) ? 1 : 0;
	buf = read_all(o->cl.tokenize_file, &len);
	if (!buf) {
		fprintf(stderr, "pagodad: cannot read %s: %s\n", o->cl.tokenize_file,
			strerror(errno ? errno : ENOMEM));
		return 1;
	}
	for (line = buf; line && !rc; line = save) {
		char *nl = memchr(line, '\n', len - (size_t)(line - buf));

		save = nl ? nl + 1 : NULL;
		if (!nl && !*line)
			break;
		rc = print_ids(m->tok, line, nl ? (size_t)(nl - line) : strlen(line),
			       o->cl.parse_special);
	}
	free(buf);
	return rc ? 1 : 0;
}

static int emit_stdout(void *ctx, const char *text, size_t len)
{
	(void)ctx;
	fwrite(text, 1, len, stdout);
	fflush(stdout);
	return 0;
}

/* The prompt text, as given (malloc'd; *len its length). */
static char *prompt_text(const struct options *o, size_t *len)
{
	char *text = o->cl.prompt_file ? read_all(o->cl.prompt_file, len)
				    : strdup(o->cl.prompt);

	if (text)
		*len = strlen(text);
	return text;
}

/*
 * With --chat: text as a user message in the model's chat template, whose
 * markers are special tokens while the message is text (unless
 * --parse-special).  The template's name goes to standard error, with a
 * warning when pagoda does not know it and renders ChatML.
 */
static int64_t chat_ids(const struct options *o, const struct pg_model *m,
			const char *text, int32_t **ids)
{
	size_t tlen = m->chat_template ? strlen(m->chat_template) : 0;
	struct pg_chat_msg msg = { .role = "user", .content = text };
	enum pg_chat_format fmt;
	char warn[512], *sys;
	int64_t n;

	fmt = pg_chat_choose(m->chat_template, tlen, m->tok, warn,
			     sizeof(warn));
	if (warn[0])
		fprintf(stderr, "pagodad: warning: %s\n", warn);
	if (!o->cl.quiet)
		fprintf(stderr, "pagodad: chat template: %s\n",
			pg_chat_format_name(fmt));
	sys = pg_chat_default_system(m->chat_template, tlen);
	n = pg_chat_tokenize(m->tok, fmt, &msg, 1, 1, sys,
			     pg_tokenizer_add_bos(m->tok), o->cl.parse_special, ids);
	free(sys);
	return n;
}

static int32_t *tokenize_prompt(const struct options *o,
				const struct pg_model *m, int *n_out)
{
	size_t len = 0;
	char *text = prompt_text(o, &len);
	int32_t *ids = NULL;
	int64_t n = 0;

	if (!text) {
		fprintf(stderr, "pagodad: cannot read the prompt%s%s: %s\n",
			o->cl.prompt_file ? " from " : "",
			o->cl.prompt_file ? o->cl.prompt_file : "", strerror(errno ? errno : ENOMEM));
		return NULL;
	}
	if (o->cl.chat) {
		n = chat_ids(o, m, text, &ids);
	} else {
		n = pg_tokenize(m->tok, text, len, pg_tokenizer_add_bos(m->tok),
				o->cl.parse_special, NULL, 0);
		if (n > 0 && n < INT_MAX)
			ids = malloc(sizeof(*ids) * (size_t)n);
		if (ids)
			pg_tokenize(m->tok, text, len,
				    pg_tokenizer_add_bos(m->tok),
				    o->cl.parse_special, ids, n);
	}
	if (!ids || n <= 0 || n >= INT_MAX) {
		fprintf(stderr, n < 0 ? "pagodad: out of memory tokenizing the prompt\n"
			: "pagodad: the prompt is empty: it gives no tokens\n");
		free(ids);
		ids = NULL;
	}
	free(text);
	*n_out = (int)n;
	return ids;
}

/*
 * Per device of a parallel plan: compute and communication time (a later
 * pipeline stage's wait for its input is the pipeline bubble), bytes sent
 * and collectives.
 */
static void print_devices(const struct pg_forward *fw)
{
	fprintf(stderr, "pagodad: %-7s %5s %3s %3s %7s %7s %12s %12s %6s %9s %9s\n",
		"device", "stage", "tp", "cp", "blocks", "steps", "compute ms",
		"comm ms", "comm %", "MB sent", "colls");
	for (int i = 0; i < pg_forward_n_devices(fw); i++) {
		struct pg_forward_dev_stats d;
		double busy;

		pg_forward_device_stats(fw, i, &d);
		busy = (double)d.busy_ns;
		fprintf(stderr, "pagodad: %-7s %5d %3d %3d %3d-%-3d %7llu %12.1f %12.1f %5.1f%% %9.2f %9llu\n",
			d.name, d.stage, d.tp_rank, d.cp_rank, d.first_block,
			d.first_block + d.n_blocks - 1,
			(unsigned long long)d.steps, d.compute_ns / 1e6,
			d.comm_ns / 1e6, busy > 0 ? 100.0 * d.comm_ns / busy : 0.0,
			d.bytes / 1e6,
			(unsigned long long)(d.n_all_reduce + d.n_all_gather));
	}
}

static void print_figures(const struct options *o, const struct pg_forward *fw,
			  double load_s, const struct pg_gen_stats *st)
{
	if (o->cl.quiet)
		return;
	fprintf(stderr, "\n\npagodad: load %.3f s; prompt %d tokens in %.3f s (%.1f tokens/s); "
		"generated %d tokens, decode %.1f tokens/s; finish %s; seed %llu; "
		"%d threads (%s)%s\n",
		load_s, st->n_prompt, st->prefill_s,
		st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0.0,
		st->n_gen,
		st->decode_s > 0 ? (st->n_gen - 1) / st->decode_s : 0.0,
		pg_finish_name(st->finish),
		(unsigned long long)o->cl.gen.sampling.seed,
		pg_forward_threads(fw), pg_forward_isa_name(fw),
		pg_forward_numerics(fw) == PG_NUMERICS_LLAMA_CPP ?
		"; llama.cpp numerics" : "");
	if (pg_forward_n_devices(fw) > 1)
		print_devices(fw);
}

/*
 * The forward pass of the options for m: its plan (malloc'd, to free after
 * the forward pass) in *plan_out.  Returns 0, or 1 after saying why.
 */
static int make_forward(const struct options *o, const struct pg_model *m,
			struct pg_forward **fw, struct pg_plan **plan_out)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct pg_model_facts facts;
	struct pg_plan_request req;
	struct pg_plan *plan;
	char err[512];

	const struct pgd_conf *c = o->conf;

	fp.n_threads = c->threads >= 0 ? c->threads : 2;
	fp.max_batch_tokens = c->max_batch_tokens;
	fp.kv_type = c->kv_type;
	fp.numerics = c->numerics;
	fp.kv_bytes = c->kv_bytes;
	fp.kv_fraction = c->kv_fraction;
	fp.kv_mem = c->kv_mem;
	fp.page_tokens = c->page_tokens;
	fp.nccl_timeout_s = o->cl.nccl_timeout_s;
	if (!c->kv_bytes && !c->kv_fraction)
		fp.n_pages = (c->ctx_size + fp.page_tokens - 1) / fp.page_tokens;
	pg_model_facts_of(m, &facts);
	plan = make_plan(o, &facts, &req);
	if (!plan)
		return 1;
	/*
	 * Without parallel options the plan is one device of every CPU; the
	 * forward pass runs it unpinned, as it always has.
	 */
	if (pgd_conf_parallel_given(c))
		fp.plan = plan;
	if (pg_forward_create(m, &fp, fw, err, sizeof(err))) {
		fprintf(stderr, "pagodad: %s\n", err);
		free(plan);
		return 1;
	}
	*plan_out = plan;
	return 0;
}

static int run_prompt(const struct options *o, const struct pg_model *m,
		      double t_start)
{
	struct pg_forward *fw = NULL;
	struct pg_plan *plan;
	struct pg_kvc *kvc;
	struct pg_gen_stats st;
	char err[512];
	double load_s;
	int32_t *ids;
	int n, rc;

	if (make_forward(o, m, &fw, &plan))
		return 1;
	load_s = pg_now_s() - t_start;	/* model mapped, backend and KV pool up */
	kvc = pg_kvc_for_forward(fw, m);
	ids = kvc ? tokenize_prompt(o, m, &n) : NULL;
	if (!kvc)
		fprintf(stderr, "pagodad: out of memory for the KV page table\n");
	rc = ids ? pg_generate(fw, kvc, m, ids, n, &o->cl.gen, emit_stdout, NULL,
			       NULL, &st, err, sizeof(err)) : -EINVAL;
	if (rc && ids)
		fprintf(stderr, "pagodad: %s\n", err);
	if (!rc)
		print_figures(o, fw, load_s, &st);
	free(ids);
	pg_kvc_destroy(kvc);
	pg_forward_destroy(fw);
	free(plan);
	return rc ? 1 : 0;
}

/* The serving daemon: signals blocked before any thread starts, then serve. */
static int run_daemon(struct options *o, const struct pg_model *m)
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
	if (make_forward(o, m, &fw, &plan)) {
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
static int run_mode(struct options *o, double t0)
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
	path = pgd_conf_model_path(o->conf, path_buf, sizeof(path_buf));
	if (o->cl.plan)
		return run_plan(o, path);
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
		rc = vocab_only ? run_tokenize(o, m) : run_prompt(o, m, t0);
	pg_model_free(m);
	return rc;
}

int pagodad_main(int argc, char **argv)
{
	struct options o;
	double t0 = pg_now_s();
	int rc = parse_options(argc, argv, &o);

	if (!rc)
		rc = run_mode(&o, t0);
	else
		rc = rc > 0 ? 0 : 2;
	pgd_conf_free(o.conf);
	return rc;
}
