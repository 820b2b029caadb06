/*
 * oneshot.c - pagodad's modes that need no running daemon (oneshot.h):
 * --plan, which shows the parallel plan the options give without loading
 * weights, and the one-shot completion (--prompt) and tokenize modes that
 * operators and tests use; and the forward pass the options give, which
 * the serving daemon (pagodad.c) builds the same way.  The command line
 * itself is pagodad.c's.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/config.h"
#include "daemon/engine/chat.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/engine/tokenizer.h"
#include "daemon/oneshot.h"
#include "daemon/schema.h"

/* The plan of the options for a model of facts f (malloc'd), or NULL. */
static struct pg_plan *make_plan(const struct pgd_options *o,
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
int pgd_run_plan(const struct pgd_options *o, const char *path)
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

int pgd_run_tokenize(const struct pgd_options *o, const struct pg_model *m)
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
static char *prompt_text(const struct pgd_options *o, size_t *len)
{
	char *text = o->cl.prompt_file ? read_all(o->cl.prompt_file, len)
				    : strdup(o->cl.prompt);

	if (text)
		*len = strlen(text);
	return text;
}

/*
 * With --chat: text as a user message in the model's chat template (or
 * the format --chat-format names), whose markers are special tokens while
 * the message is text (unless --parse-special).  The format's name and
 * its tool-call format go to standard error, with a warning when pagoda
 * does not know the template and renders ChatML.
 */
static int64_t chat_ids(const struct pgd_options *o, const struct pg_model *m,
			const char *text, int32_t **ids)
{
	size_t tlen = m->chat_template ? strlen(m->chat_template) : 0;
	struct pg_chat_msg msg = { .role = "user", .content = text };
	int forced = o->conf->daemon.chat_format >= 0;
	enum pg_chat_format fmt;
	char warn[512] = "", *sys;
	int64_t n;

	fmt = forced ? (enum pg_chat_format)o->conf->daemon.chat_format :
		       pg_chat_choose(m->chat_template, tlen, m->tok, warn,
				      sizeof(warn));
	if (warn[0])
		fprintf(stderr, "pagodad: warning: %s\n", warn);
	if (!o->cl.quiet)
		fprintf(stderr, "pagodad: chat template: %s%s; tool calls: %s\n",
			pg_chat_format_name(fmt), forced ? " (chat_format)" : "",
			pg_tool_format_name(pg_chat_tool_format(fmt, m->chat_template,
								tlen, forced)));
	sys = pg_chat_default_system(m->chat_template, tlen);
	n = pg_chat_tokenize(m->tok, fmt, &msg, 1, 1, sys,
			     pg_tokenizer_add_bos(m->tok), o->cl.parse_special, ids);
	free(sys);
	return n;
}

static int32_t *tokenize_prompt(const struct pgd_options *o,
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

static void print_figures(const struct pgd_options *o,
			  const struct pg_forward *fw, double load_s,
			  const struct pg_gen_stats *st)
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
int pgd_make_forward(const struct pgd_options *o, const struct pg_model *m,
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

/*
 * The one-shot's grammar (--grammar, --json-schema translated) into gen
 * (*text holds it, malloc'd); 0, or -1 after saying why.
 */
static int oneshot_grammar(const struct pgd_options *o, struct pg_gen_params *gen,
			   char **text)
{
	const char *path = o->cl.grammar_file ? o->cl.grammar_file : o->cl.schema_file;
	char err[256], *gbnf;
	size_t len = 0;
	int rc;

	*text = NULL;
	if (!path)
		return 0;
	*text = read_all(path, &len);
	if (!*text) {
		fprintf(stderr, "pagodad: cannot read %s %s: %s\n",
			o->cl.grammar_file ? "--grammar" : "--json-schema", path,
			strerror(errno ? errno : ENOMEM));
		return -1;
	}
	len = strlen(*text);
	if (o->cl.schema_file) {
		rc = pg_schema_to_gbnf(*text, len, &gbnf, err, sizeof(err));
		free(*text);
		*text = NULL;
		if (rc) {
			fprintf(stderr, "pagodad: --json-schema %s: %s\n", path,
				rc == -EINVAL ? err : "out of memory");
			return -1;
		}
		*text = gbnf;
		len = strlen(gbnf);
	}
	gen->grammar = *text;
	gen->grammar_len = len;
	return 0;
}

int pgd_run_prompt(const struct pgd_options *o, const struct pg_model *m,
		   double t_start)
{
	struct pg_forward *fw = NULL;
	struct pg_plan *plan;
	struct pg_kvc *kvc;
	struct pg_gen_stats st;
	struct pg_gen_params gen;
	char err[512], *grammar = NULL;
	double load_s;
	int32_t *ids;
	int n, rc;

	if (pgd_make_forward(o, m, &fw, &plan))
		return 1;
	load_s = pg_now_s() - t_start;	/* model mapped, backend and KV pool up */
	kvc = pg_kvc_for_forward(fw, m);
	ids = kvc ? tokenize_prompt(o, m, &n) : NULL;
	if (!kvc)
		fprintf(stderr, "pagodad: out of memory for the KV page table\n");
	gen = o->cl.gen;
	if (ids && oneshot_grammar(o, &gen, &grammar)) {
		free(ids);
		ids = NULL;
	}
	rc = ids ? pg_generate(fw, kvc, m, ids, n, &gen, emit_stdout, NULL,
			       NULL, &st, err, sizeof(err)) : -EINVAL;
	if (rc && ids)
		fprintf(stderr, "pagodad: %s\n", err);
	free(grammar);
	if (!rc)
		print_figures(o, fw, load_s, &st);
	if (!rc && st.finish == PG_FINISH_GRAMMAR) {
		fprintf(stderr, "pagodad: the grammar allowed no token after %d generated tokens: no token of the model's vocabulary continues the text (within the matcher's limits on parses and nesting); see pagoda-grammar(7)\n",
			st.n_gen);
		rc = 1;
	}
	free(ids);
	pg_kvc_destroy(kvc);
	pg_forward_destroy(fw);
	free(plan);
	return rc ? 1 : 0;
}
