/*
 * pagoda.c - the `pagoda` command: talk to pagodad from a shell.
 *
 *     pagoda [--socket PATH] [--json] COMMAND ...
 *
 * generate (stream one completion), chat (a conversation, interactive or
 * from a pipe), tokenize, detokenize, info and ping.  It is built on
 * libpagoda's public API only, like any other client; the library does the
 * protocol, this file the command line and the terminal.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/cli/cli.h"
#include "config.h"

#define MAX_STOP 16

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* The first SIGINT cancels the request; a second one kills as usual. */
static void catch_sigint(void)
{
	struct sigaction sa = { .sa_handler = on_sigint, .sa_flags = SA_RESETHAND };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
}

/* ---- usage ---- */

static void usage(FILE *out)
{
	fprintf(out,
"Usage: pagoda [--socket PATH] [--json] [--verbose] COMMAND [options] [ARGS]\n"
"\n"
"Commands:\n"
"  generate [options] [PROMPT]   stream a completion of PROMPT (default: standard\n"
"                                input) to standard output; --chat sends it as\n"
"                                a user message (instruct models)\n"
"  chat [options]                a conversation: each line read is a user turn;\n"
"                                /reset forgets the history, /quit ends\n"
"  tokenize [--no-bos] [--special] [TEXT]   the token ids of TEXT (default: each\n"
"                                line of standard input)\n"
"  detokenize ID...              the text of token ids\n"
"  info                          the daemon's model, plan, limits and chat format\n"
"  ping [--count N]              round trips through the shared-memory rings\n"
"\n"
"Generation options (generate and chat):\n"
"  --temperature T        0 = greedy (default 0.8)\n"
"  --top-k K              keep the K likeliest tokens, 0 = off (default 40)\n"
"  --top-p P              nucleus sampling, 1 = off (default 0.95)\n"
"  --min-p P              drop tokens under P x the likeliest, 0 = off (default 0.05)\n"
"  --repeat-penalty R     1 = off (default 1)\n"
"  --repeat-last-n N      tokens the penalties look back at, -1 = all (default 64)\n"
"  --presence-penalty X   -2..2, 0 = off (default 0)\n"
"  --frequency-penalty X  -2..2, 0 = off (default 0)\n"
"  --seed S               sampling seed (default: a fresh one, which -v and\n"
"                         --json report)\n"
"  --max-tokens N         tokens to generate at most; 0 = the daemon's limit\n"
"                         (default 128; chat 512)\n"
"  --stop STR             stop string (repeatable, up to %d)\n"
"  --ignore-eos           do not stop at end-of-generation tokens\n"
"  --priority N           higher first among this connection's requests\n"
"  --n N                  samples of the prompt, 1..16 (generate only)\n"
"  --logprobs N           the token's log-probability and the top N, 0..20\n"
"                         (on standard error, or in --json)\n"
"  --chat                 generate: PROMPT is a user message, rendered with\n"
"                         the model's chat template\n"
"  --system TEXT          chat, generate --chat: a system message first\n"
"  --grammar FILE         the output follows the GBNF grammar in FILE\n"
"                         (pagoda-grammar(7))\n"
"  --json-schema FILE     the output is JSON valid under the JSON Schema in\n"
"                         FILE (pagoda-json-schema(7))\n"
"\n"
"Global options:\n"
"  -s, --socket PATH      pagodad's socket (default $PAGODA_SOCKET, else\n"
"                         " PAGODA_DEFAULT_SOCKET ")\n"
"  -j, --json             JSON lines on standard output\n"
"  -v, --verbose          the daemon's figures on standard error\n"
"      --spin-us US       spin this long before sleeping (default 20)\n"
"  -h, --help             this text\n"
"      --version          the version\n"
"\n"
"Exit status: 0 success, 1 the daemon refused or failed the request, 2 usage\n"
"error or input that is not text, 3 cannot connect, 4 the daemon stopped,\n"
"130 interrupted.  See pagoda(1).\n",
		MAX_STOP);
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs("pagoda: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nTry 'pagoda --help' for more information.\n", stderr);
	return CLI_USAGE;
}

/* ---- numbers ---- */

static int parse_float(const char *opt, const char *s, float *out)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (!*s || *end || errno || !isfinite(v)) {
		fprintf(stderr, "pagoda: %s '%s': expected a number\n", opt, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi) {
		fprintf(stderr, "pagoda: %s '%s': expected an integer in %ld..%ld\n",
			opt, s, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int parse_u64(const char *opt, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (!*s || *end || errno || *s == '-') {
		fprintf(stderr, "pagoda: %s '%s': expected a non-negative integer\n",
			opt, s);
		return -1;
	}
	*out = v;
	return 0;
}

/* ---- generation options ---- */

enum {
	OPT_TEMP = 256, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT,
	OPT_REPEAT_N, OPT_PRESENCE, OPT_FREQUENCY, OPT_SEED, OPT_MAX_TOKENS,
	OPT_STOP, OPT_PRIORITY, OPT_N, OPT_IGNORE_EOS, OPT_LOGPROBS,
	OPT_SYSTEM, OPT_COUNT, OPT_NO_BOS, OPT_SPECIAL, OPT_SPIN, OPT_VERSION,
	OPT_CHAT, OPT_GRAMMAR, OPT_JSON_SCHEMA,
};

static const struct option gen_options[] = {
	{ "temperature", required_argument, NULL, OPT_TEMP },
	{ "top-k", required_argument, NULL, OPT_TOP_K },
	{ "top-p", required_argument, NULL, OPT_TOP_P },
	{ "min-p", required_argument, NULL, OPT_MIN_P },
	{ "repeat-penalty", required_argument, NULL, OPT_REPEAT },
	{ "repeat-last-n", required_argument, NULL, OPT_REPEAT_N },
	{ "presence-penalty", required_argument, NULL, OPT_PRESENCE },
	{ "frequency-penalty", required_argument, NULL, OPT_FREQUENCY },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "max-tokens", required_argument, NULL, OPT_MAX_TOKENS },
	{ "stop", required_argument, NULL, OPT_STOP },
	{ "priority", required_argument, NULL, OPT_PRIORITY },
	{ "n", required_argument, NULL, OPT_N },
	{ "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
	{ "logprobs", required_argument, NULL, OPT_LOGPROBS },
	{ "system", required_argument, NULL, OPT_SYSTEM },
	{ "chat", no_argument, NULL, OPT_CHAT },
	{ "grammar", required_argument, NULL, OPT_GRAMMAR },
	{ "json-schema", required_argument, NULL, OPT_JSON_SCHEMA },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

struct gen_opts {
	struct pagoda_request req;
	const char *stop[MAX_STOP];
	const char *system;	/* chat, generate --chat */
	int chat;		/* generate --chat */
	int n_given;
	int max_given;
};

/*
 * The defaults are libpagoda's (pagoda_request_init), which are pagodad
 * --prompt's, so that the three sample alike; the daemon draws the seed.
 */
static void gen_defaults(struct gen_opts *g)
{
	memset(g, 0, sizeof(*g));
	pagoda_request_init(&g->req);
	g->req.stop = g->stop;
}

static int gen_sampling_opt(struct gen_opts *g, int opt, const char *arg)
{
	struct pagoda_request *r = &g->req;

	switch (opt) {
	case OPT_TEMP: return parse_float("--temperature", arg, &r->temperature);
	case OPT_TOP_K: return parse_int("--top-k", arg, 0, INT_MAX, &r->top_k);
	case OPT_TOP_P: return parse_float("--top-p", arg, &r->top_p);
	case OPT_MIN_P: return parse_float("--min-p", arg, &r->min_p);
	case OPT_REPEAT: return parse_float("--repeat-penalty", arg, &r->repeat_penalty);
	case OPT_REPEAT_N: return parse_int("--repeat-last-n", arg, -1, INT_MAX, &r->repeat_last_n);
	case OPT_PRESENCE: return parse_float("--presence-penalty", arg, &r->presence_penalty);
	case OPT_FREQUENCY: return parse_float("--frequency-penalty", arg, &r->frequency_penalty);
	case OPT_SEED: return parse_u64("--seed", arg, &r->seed);
	}
	return 1;
}

/* The text of --grammar or --json-schema; kept to the end. */
static char *grammar_text;

/*
 * read_grammar - the file named by --grammar or --json-schema (opt) into
 * grammar_text and *out; 0, or -1 after saying why.
 */
static int read_grammar(const char *opt, const char *path, const char **out)
{
	enum { MAX = 1 << 20 };
	FILE *f;
	size_t n;
	char *buf;

	if (grammar_text) {
		fprintf(stderr, "pagoda: --grammar and --json-schema: give one of them, once\n");
		return -1;
	}
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "pagoda: %s %s: %s\n", opt, path, strerror(errno));
		return -1;
	}
	buf = malloc(MAX + 1);
	n = buf ? fread(buf, 1, MAX + 1, f) : 0;
	if (!buf || ferror(f) || n == 0 || n > MAX || memchr(buf, 0, n)) {
		fprintf(stderr, "pagoda: %s %s: %s\n", opt, path,
			!buf ? "out of memory" : ferror(f) ? strerror(errno)
			: n == 0 ? "the file is empty"
			: n > MAX ? "the file is over 1 MiB"
			: "the file holds a NUL byte: it is not text");
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	buf[n] = '\0';
	grammar_text = buf;
	*out = buf;
	return 0;
}

/* gen_opt - one generation option; 0, or -1 on a usage error. */
static int gen_opt(struct gen_opts *g, int opt, const char *arg)
{
	struct pagoda_request *r = &g->req;
	int rc = gen_sampling_opt(g, opt, arg);

	if (rc <= 0)
		return rc;
	switch (opt) {
	case OPT_MAX_TOKENS:
		g->max_given = 1;
		return parse_int("--max-tokens", arg, 0, INT_MAX, &r->max_tokens);
	case OPT_PRIORITY: return parse_int("--priority", arg, INT_MIN, INT_MAX, &r->priority);
	case OPT_N:
		g->n_given = 1;
		return parse_int("--n", arg, 1, 16, &r->n);
	case OPT_LOGPROBS: return parse_int("--logprobs", arg, 0, 20, &r->n_logprobs);
	case OPT_IGNORE_EOS:
		r->ignore_eos = 1;
		return 0;
	case OPT_SYSTEM:
		g->system = arg;
		return 0;
	case OPT_CHAT:
		g->chat = 1;
		return 0;
	case OPT_GRAMMAR: return read_grammar("--grammar", arg, &r->grammar);
	case OPT_JSON_SCHEMA: return read_grammar("--json-schema", arg, &r->json_schema);
	case OPT_STOP:
		if (r->n_stop == MAX_STOP || !*arg) {
			fprintf(stderr, "pagoda: --stop: %s\n", *arg ? "at most 16 stop strings"
					: "a stop string cannot be empty");
			return -1;
		}
		g->stop[r->n_stop++] = arg;
		return 0;
	}
	return -1;
}

/* parse_gen - the options of generate/chat; returns optind or -1. */
static int parse_gen(int argc, char **argv, struct gen_opts *g)
{
	int opt;

	gen_defaults(g);
	optind = 0;	/* glibc: start afresh; options may follow the prompt */
	while ((opt = getopt_long(argc, argv, "h", gen_options, NULL)) != -1) {
		if (opt == 'h') {
			usage(stdout);
			exit(CLI_OK);
		}
		if (opt == '?' || gen_opt(g, opt, optarg))
			return -1;
	}
	return optind;
}

/* ---- connecting ---- */

static int open_handle(const struct cli *c, pagoda_t **p)
{
	int rc = pagoda_connect(c->socket, p);

	if (rc) {
		cli_error(rc, pagoda_last_error(NULL));
		return CLI_CONNECT;
	}
	if (c->spin_us >= 0)
		pagoda_set_spin_us(*p, (unsigned)c->spin_us);
	return 0;
}

/* ---- streaming one request ---- */

struct run {
	const struct cli *cli;
	pagoda_t *p;
	uint64_t id;
	int n;
	struct cli_buf *text;	/* (n) each sample's text so far */
	const char *hint;	/* said when a sample ends at its first token */
	int quiet_toobig;	/* PAGODA_ETOOBIG: the caller retries; say nothing */
	int error;		/* the request's error code, or 0 */
	char note[160];		/* for stderr once the request is taken */
	int over;		/* the last event came */
	int status;		/* the exit status it earned */
	int at_line_start;	/* the text printed ends with a newline */
	size_t tok_at[16];	/* (n) where each sample's last token's text starts */
};

/* say_note - the pending note, once the daemon has taken the request. */
static void say_note(struct run *r)
{
	if (r->note[0])
		fprintf(stderr, "pagoda: %s\n", r->note);
	r->note[0] = 0;
}

static void on_tokens(struct run *r, const struct pagoda_event *ev)
{
	if (ev->sample >= (unsigned)r->n)
		return;
	if (ev->n_ids)
		r->tok_at[ev->sample] = r->text[ev->sample].len;
	cli_buf_add(&r->text[ev->sample], ev->text, ev->text_len);
	if (r->cli->json) {
		cli_json_event(ev, NULL);
	} else if (r->n == 1 && ev->text_len) {
		fwrite(ev->text, 1, ev->text_len, stdout);
		fflush(stdout);
		r->at_line_start = ev->text[ev->text_len - 1] == '\n';
	}
}

/* on_logprobs - with --json an event; else a line on stderr. */
static void on_logprobs(struct run *r, const struct pagoda_event *ev)
{
	const struct cli_buf *t;

	if (r->cli->json) {
		cli_json_event(ev, NULL);
		return;
	}
	if (ev->sample >= (unsigned)r->n)
		return;
	t = &r->text[ev->sample];
	cli_logprobs(ev, t->s ? t->s + r->tok_at[ev->sample] : "",
		     t->len - r->tok_at[ev->sample]);
}

/*
 * say_grammar - a sample that its grammar left without a token: what
 * happened and where to read why, on a line of its own (after the text of
 * a single sample on a terminal).
 */
static void say_grammar(struct run *r, const struct pagoda_event *ev)
{
	char which[32] = "";

	if (r->n == 1 && !r->cli->json && !r->at_line_start && isatty(STDOUT_FILENO)) {
		putchar('\n');
		fflush(stdout);
		r->at_line_start = 1;
	}
	if (r->n > 1)
		snprintf(which, sizeof(which), "sample %u: ", ev->sample);
	fprintf(stderr, "pagoda: %sthe grammar allowed no token after %u tokens: no token of the model's vocabulary continues the text (within the matcher's limits on parses and nesting); see pagoda-grammar(7)\n",
		which, ev->figures.n_gen);
}

static void on_done(struct run *r, const struct pagoda_event *ev)
{
	const struct cli_buf *t = ev->sample < (unsigned)r->n ? &r->text[ev->sample] : NULL;

	if (r->cli->json)
		cli_json_event(ev, t);
	if (r->cli->verbose)
		cli_figures(ev, r->hint);
	if (ev->finish == PAGODA_FINISH_GRAMMAR)
		say_grammar(r, ev);
	if (ev->finish == PAGODA_FINISH_ERROR || ev->finish == PAGODA_FINISH_GRAMMAR)
		r->status = CLI_FAIL;
	r->over = ev->last;
}

static void on_event(struct run *r, const struct pagoda_event *ev)
{
	if (ev->type != PAGODA_EVENT_ERROR)
		say_note(r);
	switch (ev->type) {
	case PAGODA_EVENT_TOKENS:
		on_tokens(r, ev);
		break;
	case PAGODA_EVENT_LOGPROBS:
		on_logprobs(r, ev);
		break;
	case PAGODA_EVENT_DONE:
		on_done(r, ev);
		break;
	case PAGODA_EVENT_ERROR:
		r->error = ev->error;
		r->over = 1;
		if (r->quiet_toobig && ev->error == PAGODA_ETOOBIG) {
			r->status = CLI_FAIL;
			break;
		}
		if (r->cli->json)
			cli_json_event(ev, NULL);
		r->status = cli_error(ev->error, ev->text);
		break;
	}
}

/* print_samples - n > 1 without --json: each sample after the others. */
static void print_samples(const struct run *r)
{
	for (int i = 0; i < r->n; i++) {
		const struct cli_buf *t = &r->text[i];

		printf("%s--- sample %d ---\n%s", i ? "\n" : "", i, t->s ? t->s : "");
		if (t->len && t->s[t->len - 1] != '\n')
			putchar('\n');
	}
	fflush(stdout);
}

/*
 * run_request - submit req and stream its events until the last; SIGINT
 * cancels it.  Returns the exit status; the texts stay in r->text, the
 * error code (if any) in r->error.
 */
static int run_request(struct run *r, const struct pagoda_request *req)
{
	struct pagoda_event ev;
	int rc, cancelled = 0;

	r->n = req->n;
	r->status = CLI_OK;
	r->error = 0;
	r->over = 0;
	r->at_line_start = 1;
	for (int i = 0; i < r->n; i++)
		r->text[i].len = r->tok_at[i] = 0;
	rc = pagoda_submit(r->p, req, &r->id);
	if (rc) {
		r->error = rc;
		if (r->quiet_toobig && rc == PAGODA_ETOOBIG)
			return CLI_FAIL;
		return cli_error(rc, pagoda_last_error(r->p));
	}
	while (!r->over) {
		rc = pagoda_next_event(r->p, &ev, 200);
		if (rc < 0) {
			r->error = rc;
			return cli_error(rc, pagoda_last_error(r->p));
		}
		if (interrupted && !cancelled) {
			cancelled = 1;
			pagoda_cancel(r->p, r->id);
		}
		if (rc == 1)
			on_event(r, &ev);
	}
	if (!r->cli->json && r->n > 1)
		print_samples(r);
	return cancelled ? CLI_INTERRUPTED : r->status;
}

/* ---- reading text ---- */

/*
 * text_check - n bytes read at offset base of standard input: a NUL byte
 * cannot be part of a prompt (the library's strings end there), so it is
 * refused rather than cut at.  Returns 0, or -1 after saying where.
 */
static int text_check(const char *s, size_t n, size_t base)
{
	const char *nul = memchr(s, 0, n);

	if (!nul)
		return 0;
	fprintf(stderr, "pagoda: standard input holds a NUL byte at offset %zu; pagoda prompts are text: remove it (tr -d '\\000')\n",
		base + (size_t)(nul - s));
	return -1;
}

/* ---- generate ---- */

/*
 * read_stdin - all of standard input into *out (malloc'd).  Returns 0,
 * CLI_FAIL when it cannot be read, CLI_USAGE when it is not text (both
 * said on stderr).
 */
static int read_stdin(char **out)
{
	struct cli_buf b = { 0 };
	char chunk[4096];
	size_t n;

	while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
		cli_buf_add(&b, chunk, n);
	if (ferror(stdin)) {
		fprintf(stderr, "pagoda: cannot read the prompt from standard input: %s\n",
			strerror(errno));
		free(b.s);
		return CLI_FAIL;
	}
	if (!b.s)
		cli_buf_add(&b, "", 0);
	if (text_check(b.s, b.len, 0)) {
		free(b.s);
		return CLI_USAGE;
	}
	*out = b.s;
	return 0;
}

/* join - the words of argv as one prompt (malloc'd). */
static char *join(int argc, char **argv)
{
	struct cli_buf b = { 0 };

	for (int i = 0; i < argc; i++) {
		if (i)
			cli_buf_add(&b, " ", 1);
		cli_buf_add(&b, argv[i], strlen(argv[i]));
	}
	return b.s;
}

/* The note of a sample that ended at its first token, by prompt kind. */
#define HINT_RAW "the model ended at once: it produced no token; for an instruct model try --chat"
#define HINT_CHAT "the model ended at once: it produced no token"

static int cmd_generate(const struct cli *c, int argc, char **argv)
{
	struct cli_buf text[16] = { { 0 } };
	struct run r = { .cli = c, .text = text };
	struct pagoda_message msgs[2];
	struct gen_opts g;
	char *prompt = NULL;
	int i = parse_gen(argc, argv, &g), status = 0;

	if (i < 0)
		return CLI_USAGE;
	if (g.system && !g.chat)
		return usage_error("generate: %s needs --chat (or use pagoda chat)", "--system");
	if (i < argc)
		prompt = join(argc - i, argv + i);
	else
		status = read_stdin(&prompt);
	if (status)
		return status;
	if (g.chat) {
		size_t n = 0;

		if (g.system)
			msgs[n++] = (struct pagoda_message){ PAGODA_ROLE_SYSTEM, g.system };
		msgs[n++] = (struct pagoda_message){ PAGODA_ROLE_USER, prompt };
		g.req.messages = msgs;
		g.req.n_messages = n;
		r.hint = HINT_CHAT;
	} else {
		g.req.prompt = prompt;
		r.hint = HINT_RAW;
	}
	status = open_handle(c, &r.p);
	if (!status) {
		catch_sigint();
		status = run_request(&r, &g.req);
		if (!c->json && g.req.n == 1 && !r.at_line_start && isatty(STDOUT_FILENO))
			putchar('\n');
		pagoda_close(r.p);
	}
	for (int k = 0; k < 16; k++)
		free(text[k].s);
	free(prompt);
	return status;
}

/* ---- chat ---- */

struct history {
	struct pagoda_message *msgs;
	size_t n, cap;
	size_t keep;		/* the system message stays on /reset */
	unsigned context;	/* tokens the daemon can hold; 0: unknown */
	size_t read;		/* bytes of standard input read so far */
};

static void history_add(struct history *h, enum pagoda_role role,
			const char *content, size_t len)
{
	char *copy = malloc(len + 1);

	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 16;
		h->msgs = realloc(h->msgs, h->cap * sizeof(*h->msgs));
	}
	if (!copy || !h->msgs) {
		fputs("pagoda: out of memory\n", stderr);
		exit(CLI_FAIL);
	}
	memcpy(copy, content, len);
	copy[len] = 0;
	h->msgs[h->n++] = (struct pagoda_message){ role, copy };
}

static void history_trim(struct history *h, size_t n)
{
	while (h->n > n)
		free((char *)h->msgs[--h->n].content);
}

/*
 * history_drop_oldest - forget the oldest turn (a user message and the
 * reply to it) after the system message; never the last message, the
 * turn being asked.  Returns 1, or 0 when there is nothing to drop.
 */
static int history_drop_oldest(struct history *h)
{
	size_t k = h->keep, n = 1;

	if (h->n < k + 2)
		return 0;
	if (k + 2 < h->n && h->msgs[k + 1].role == PAGODA_ROLE_ASSISTANT)
		n = 2;
	for (size_t i = k; i < k + n; i++)
		free((char *)h->msgs[i].content);
	memmove(h->msgs + k, h->msgs + k + n, (h->n - k - n) * sizeof(*h->msgs));
	h->n -= n;
	return 1;
}

/* drop_note - what the note says after dropping n turns. */
static void drop_note(struct run *r, const struct history *h, int n)
{
	char ctx[64] = "the daemon's limits";

	if (h->context)
		snprintf(ctx, sizeof(ctx), "the context of %u tokens", h->context);
	if (n == 1)
		snprintf(r->note, sizeof(r->note), "dropped the oldest turn to fit %s", ctx);
	else
		snprintf(r->note, sizeof(r->note), "dropped the %d oldest turns to fit %s",
			 n, ctx);
}

/*
 * chat_turn - ask for the reply to the conversation in h, whose last
 * message is the user's new turn.  When the daemon finds the conversation
 * too big for it, the oldest turns go (the system message stays) until
 * it fits or only this turn is left, and a note says so.  Returns the
 * exit status of the request that ran.
 */
static int chat_turn(struct run *r, struct gen_opts *g, struct history *h)
{
	int status, dropped = 0;

	for (;;) {
		r->quiet_toobig = h->n > h->keep + 1;
		g->req.messages = h->msgs;
		g->req.n_messages = h->n;
		status = run_request(r, &g->req);
		if (status != CLI_FAIL || r->error != PAGODA_ETOOBIG ||
		    !r->quiet_toobig || !history_drop_oldest(h))
			break;
		drop_note(r, h, ++dropped);
	}
	say_note(r);	/* when no event came to say it */
	r->quiet_toobig = 0;
	return status;
}

/*
 * chat_line - one line read (n bytes): a command or a turn.  Returns 1 to
 * stop: the daemon is gone, the line was not text (from a pipe), or
 * SIGINT cancelled a reply read from a pipe (on a terminal it only ends
 * the reply).
 */
static int chat_line(struct run *r, struct gen_opts *g, struct history *h,
		     char *line, size_t len, int tty, int *status)
{
	size_t at = h->read;

	h->read += len;
	if (text_check(line, len, at)) {
		if (!tty)
			*status = CLI_USAGE;
		return !tty;
	}
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		line[--len] = 0;
	if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
		return 1;
	if (!strcmp(line, "/reset")) {
		history_trim(h, h->keep);
		return 0;
	}
	if (!len)
		return 0;
	history_add(h, PAGODA_ROLE_USER, line, len);
	interrupted = 0;
	*status = chat_turn(r, g, h);
	if (!r->cli->json) {
		if (!r->at_line_start)
			putchar('\n');
		fflush(stdout);
	}
	if (*status == CLI_OK || *status == CLI_INTERRUPTED)
		history_add(h, PAGODA_ROLE_ASSISTANT, r->text[0].s ? r->text[0].s : "",
			    r->text[0].len);
	else
		history_trim(h, h->n - 1);	/* the turn did not happen */
	return *status == CLI_GONE || (*status == CLI_INTERRUPTED && !tty);
}

static int chat_loop(struct run *r, struct gen_opts *g, struct history *h)
{
	int tty = isatty(STDIN_FILENO) && !r->cli->json, status = CLI_OK;
	size_t cap = 0;
	char *line = NULL;
	ssize_t n;

	if (tty)
		fputs("pagoda chat: /reset forgets the conversation, /quit ends it\n", stderr);
	for (;;) {
		if (tty) {
			fputs("> ", stdout);
			fflush(stdout);
		}
		interrupted = 0;
		n = getline(&line, &cap, stdin);
		if (n < 0 || chat_line(r, g, h, line, (size_t)n, tty, &status))
			break;
		catch_sigint();
	}
	free(line);
	if (tty && status != CLI_GONE)
		putchar('\n');
	return interrupted && status == CLI_OK ? CLI_INTERRUPTED : status;
}

/* chat_context - the tokens a conversation may take: the KV pool, or the
   prompt limit when that is lower; 0 when the daemon does not say. */
static unsigned chat_context(pagoda_t *p)
{
	struct pagoda_model_info m;
	unsigned long long pool;

	if (pagoda_model_info(p, &m))
		return 0;
	pool = (unsigned long long)m.kv_pages * m.page_tokens;
	if (m.max_prompt && m.max_prompt < pool)
		pool = m.max_prompt;
	return pool > UINT_MAX ? UINT_MAX : (unsigned)pool;
}

static int cmd_chat(const struct cli *c, int argc, char **argv)
{
	struct cli_buf text[1] = { { 0 } };
	struct run r = { .cli = c, .text = text, .hint = HINT_CHAT };
	struct history h = { 0 };
	struct gen_opts g;
	int i = parse_gen(argc, argv, &g), status;

	if (i < 0)
		return CLI_USAGE;
	if (i < argc)
		return usage_error("chat: unexpected argument '%s' (the turns come from standard input)",
				   argv[i]);
	if (g.n_given)
		return usage_error("chat: %s is for generate", "--n");
	if (!g.max_given)
		g.req.max_tokens = 512;
	g.req.prompt = NULL;
	if (g.system)
		history_add(&h, PAGODA_ROLE_SYSTEM, g.system, strlen(g.system));
	h.keep = h.n;
	status = open_handle(c, &r.p);
	if (!status) {
		h.context = chat_context(r.p);
		catch_sigint();
		status = chat_loop(&r, &g, &h);
		pagoda_close(r.p);
	}
	history_trim(&h, 0);
	free(h.msgs);
	free(text[0].s);
	return status;
}

/* ---- tokenize, detokenize ---- */

static int print_ids(const struct cli *c, pagoda_t *p, const char *text,
		     size_t len, unsigned flags)
{
	int32_t *ids;
	size_t n;
	int rc = pagoda_tokenize(p, text, len, flags, &ids, &n);

	if (rc)
		return cli_error(rc, pagoda_last_error(p));
	fputs(c->json ? "{\"ids\":[" : "[", stdout);
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? (c->json ? "," : ", ") : "", ids[i]);
	puts(c->json ? "]}" : "]");
	free(ids);
	return CLI_OK;
}

static int cmd_tokenize(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "no-bos", no_argument, NULL, OPT_NO_BOS },
		{ "special", no_argument, NULL, OPT_SPECIAL },
		{ NULL, 0, NULL, 0 },
	};
	unsigned flags = PAGODA_TOKENIZE_ADD_BOS;
	int opt, status;
	pagoda_t *p;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == OPT_NO_BOS)
			flags &= ~PAGODA_TOKENIZE_ADD_BOS;
		else if (opt == OPT_SPECIAL)
			flags |= PAGODA_TOKENIZE_SPECIAL;
		else
			return CLI_USAGE;
	}
	status = open_handle(c, &p);
	if (status)
		return status;
	if (optind < argc) {
		char *text = join(argc - optind, argv + optind);

		status = print_ids(c, p, text, strlen(text), flags);
		free(text);
	} else {
		char *line = NULL;
		size_t cap = 0, read = 0;
		ssize_t n;

		while (!status && (n = getline(&line, &cap, stdin)) >= 0) {
			if (text_check(line, (size_t)n, read)) {
				status = CLI_USAGE;
				break;
			}
			read += (size_t)n;
			if (n && line[n - 1] == '\n')
				line[--n] = 0;
			status = print_ids(c, p, line, (size_t)n, flags);
		}
		free(line);
	}
	pagoda_close(p);
	return status;
}

static int cmd_detokenize(const struct cli *c, int argc, char **argv)
{
	int32_t *ids = calloc((size_t)argc, sizeof(*ids));
	int status = ids ? CLI_OK : CLI_FAIL, id;
	pagoda_t *p = NULL;
	size_t len;
	char *text;

	if (argc < 2)
		status = usage_error("detokenize: give the token ids%s", "");
	for (int i = 1; !status && i < argc; i++)
		if (parse_int("detokenize", argv[i], 0, INT32_MAX, &id))
			status = CLI_USAGE;
		else
			ids[i - 1] = id;
	if (!status)
		status = open_handle(c, &p);
	if (!status) {
		int rc = pagoda_detokenize(p, ids, (size_t)argc - 1, &text, &len);

		if (rc) {
			status = cli_error(rc, pagoda_last_error(p));
		} else if (c->json) {
			fputs("{\"text\":", stdout);
			cli_json_string(stdout, text, len);
			puts("}");
		} else {
			fwrite(text, 1, len, stdout);
			if (isatty(STDOUT_FILENO))
				putchar('\n');
		}
		if (!rc)
			free(text);
		pagoda_close(p);
	}
	free(ids);
	return status;
}

/* ---- info ---- */

/* chat info is "" from a daemon too old to say: JSON gets "" too */
static void info_json(const struct pagoda_model_info *m,
		      const struct pagoda_chat_info *ci)
{
	fputs("{\"model\":", stdout);
	cli_json_string(stdout, m->model, strlen(m->model));
	fputs(",\"arch\":", stdout);
	cli_json_string(stdout, m->arch, strlen(m->arch));
	printf(",\"n_vocab\":%u,\"n_ctx_train\":%u,\"n_blocks\":%u,\"n_embd\":%u,"
	       "\"kv_pages\":%u,\"page_tokens\":%u,\"bos\":%d,\"eos\":%d,"
	       "\"generation\":\"%016llx\",\"pp\":%u,\"tp\":%u,\"cp\":%u,"
	       "\"n_clients\":%u,\"n_active\":%u,\"client_id\":%u,\"max_inflight\":%u,\"max_prompt\":%u,"
	       "\"max_tokens\":%u,\"max_payload\":%u,\"chat_format\":",
	       m->n_vocab, m->n_ctx_train, m->n_blocks, m->n_embd, m->kv_pages,
	       m->page_tokens, m->bos, m->eos, (unsigned long long)m->generation,
	       m->pp, m->tp, m->cp, m->n_clients, m->n_active, m->client_id,
	       m->max_inflight, m->max_prompt,
	       m->max_tokens, m->max_payload);
	cli_json_string(stdout, ci->format, strlen(ci->format));
	fputs(",\"tool_format\":", stdout);
	cli_json_string(stdout, ci->tools, strlen(ci->tools));
	fputs("}\n", stdout);
}

static void info_text(const struct pagoda_model_info *m,
		      const struct pagoda_chat_info *ci)
{
	printf("model:        %s (%s)\n", m->model, m->arch);
	printf("vocabulary:   %u tokens (bos %d, eos %d)\n", m->n_vocab, m->bos, m->eos);
	printf("shape:        %u blocks, embedding %u, trained context %u\n",
	       m->n_blocks, m->n_embd, m->n_ctx_train);
	printf("KV cache:     %u pages of %u tokens (%llu tokens)\n", m->kv_pages,
	       m->page_tokens, (unsigned long long)m->kv_pages * m->page_tokens);
	printf("plan:         pipeline %u x tensor %u x context %u\n", m->pp, m->tp, m->cp);
	printf("daemon:       generation %016llx; %u clients (this is client %u); %u sequences active\n",
	       (unsigned long long)m->generation, m->n_clients, m->client_id,
	       m->n_active);
	printf("limits:       %u requests in flight, prompt %u tokens, %u tokens generated, %u bytes a request\n",
	       m->max_inflight, m->max_prompt, m->max_tokens, m->max_payload);
	if (ci->format[0])
		printf("chat:         %s template, tool calls in the %s format\n",
		       ci->format, ci->tools);
	else
		printf("chat:         not reported (pagodad is older than this client)\n");
}

static int cmd_info(const struct cli *c, int argc, char **argv)
{
	struct pagoda_model_info m;
	struct pagoda_chat_info ci;
	pagoda_t *p;
	int status, rc;

	if (argc > 1)
		return usage_error("info: unexpected argument '%s'", argv[1]);
	status = open_handle(c, &p);
	if (status)
		return status;
	rc = pagoda_model_info(p, &m);
	if (!rc)
		rc = pagoda_chat_info(p, &ci);
	if (rc)
		status = cli_error(rc, pagoda_last_error(p));
	else if (c->json)
		info_json(&m, &ci);
	else
		info_text(&m, &ci);
	pagoda_close(p);
	return status;
}

/* ---- ping ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void ping_summary(const struct cli *c, uint64_t *ns, int n)
{
	double us[4];

	qsort(ns, (size_t)n, sizeof(*ns), cmp_u64);
	us[0] = ns[0] / 1e3;
	us[1] = ns[n / 2] / 1e3;
	us[2] = ns[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3;
	us[3] = ns[n - 1] / 1e3;
	if (c->json)
		printf("{\"count\":%d,\"min_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.3f}\n",
		       n, us[0], us[1], us[2], us[3]);
	else
		printf("%d pings: min %.2f us, median %.2f us, p99 %.2f us, max %.2f us\n",
		       n, us[0], us[1], us[2], us[3]);
}

static int cmd_ping(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, OPT_COUNT },
		{ NULL, 0, NULL, 0 },
	};
	int count = 10, opt, status, rc = 0, i;
	uint64_t *ns;
	pagoda_t *p = NULL;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "c:", opts, NULL)) != -1)
		if ((opt != OPT_COUNT && opt != 'c') ||
		    parse_int("--count", optarg, 1, 100000000, &count))
			return CLI_USAGE;
	if (optind < argc)
		return usage_error("ping: unexpected argument '%s'", argv[optind]);
	ns = malloc(sizeof(*ns) * (size_t)count);
	if (!ns)
		return cli_error(PAGODA_ENOMEM, "out of memory");
	status = open_handle(c, &p);
	for (i = 0; !status && i < count && !rc; i++) {
		rc = pagoda_ping(p, &ns[i]);
		if (!rc && !c->json && count <= 20)
			printf("pong %d: %.2f us\n", i + 1, ns[i] / 1e3);
	}
	if (rc)
		status = cli_error(rc, pagoda_last_error(p));
	else if (!status)
		ping_summary(c, ns, count);
	pagoda_close(p);
	free(ns);
	return status;
}

/* ---- main ---- */

static const struct option main_options[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "json", no_argument, NULL, 'j' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "spin-us", required_argument, NULL, OPT_SPIN },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* parse_main - the global options; the command's index, or -(status+1). */
static int parse_main(int argc, char **argv, struct cli *c)
{
	int opt;

	while ((opt = getopt_long(argc, argv, "+s:jvh", main_options, NULL)) != -1) {
		switch (opt) {
		case 's': c->socket = optarg; break;
		case 'j': c->json = 1; break;
		case 'v': c->verbose = 1; break;
		case OPT_SPIN:
			if (parse_int("--spin-us", optarg, 0, 1000000, &c->spin_us))
				return -CLI_USAGE - 1;
			break;
		case 'h':
			usage(stdout);
			return -CLI_OK - 1;
		case OPT_VERSION:
			printf("pagoda %s\n", PACKAGE_VERSION);
			return -CLI_OK - 1;
		default:
			fputs("Try 'pagoda --help' for more information.\n", stderr);
			return -CLI_USAGE - 1;
		}
	}
	if (optind >= argc)
		return -usage_error("give a command: generate, chat, tokenize, detokenize, info or ping%s", "") - 1;
	return optind;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(const struct cli *c, int argc, char **argv);
	} cmds[] = {
		{ "generate", cmd_generate }, { "chat", cmd_chat },
		{ "tokenize", cmd_tokenize }, { "detokenize", cmd_detokenize },
		{ "info", cmd_info }, { "ping", cmd_ping },
	};
	struct cli c = { .spin_us = -1 };
	int i = parse_main(argc, argv, &c);

	if (i < 0)
		return -i - 1;
	signal(SIGPIPE, SIG_IGN);
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++)
		if (!strcmp(argv[i], cmds[k].name))
			return cmds[k].run(&c, argc - i, argv + i);
	return usage_error("unknown command '%s': generate, chat, tokenize, detokenize, info or ping",
			   argv[i]);
}
