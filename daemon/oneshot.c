/*
 * oneshot.c - pagodad's command line: the serving daemon (the default
 * mode: pagodad.conf and the options over it, then pgd_serve()), the
 * one-shot completion and tokenize modes that operators and tests use
 * without a running daemon, --plan, which shows the parallel plan the
 * options give without loading weights, and --check-config and
 * --print-config.
 *
 * This is the only daemon code that prints to the terminal on its own; it
 * parses the options, loads the model and builds the forward pass.  An
 * option that stands for a key of pagodad.conf goes to config.c, which
 * applies it over the file; the one-shot modes' options stay here.  The
 * serving loop (sockets, rings) is server.c's and logs through log.h.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <config.h>		/* autoconf's: daemon/config.h shadows "config.h" */

#include "config.h"
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

#define MAX_STOP 16

struct options {
	const char *prompt;
	const char *prompt_file;
	const char *tokenize;
	const char *tokenize_file;
	int chat;
	int parse_special;
	int quiet;
	int plan_only;		/* --plan */
	int check_config;	/* --check-config */
	int print_config;	/* --print-config */
	const char *config;	/* --config, or NULL: PGD_DEFAULT_CONFIG */
	const char *max_tokens; /* --max-tokens: also the daemon's limit */
	struct pg_gen_params gen;
	int seed_given;
	const char *stop[MAX_STOP];
	struct pgd_conf *conf;	/* pagodad.conf's keys, the options over them */
};

enum {
	OPT_KEY = 256,		/* an option that stands for a key (config.h) */
	OPT_PROMPT_FILE, OPT_MAX_TOKENS, OPT_TEMP, OPT_TOP_K, OPT_TOP_P,
	OPT_MIN_P, OPT_REPEAT, OPT_PRESENCE, OPT_FREQUENCY, OPT_SEED, OPT_STOP,
	OPT_IGNORE_EOS, OPT_TOKENIZE, OPT_TOKENIZE_FILE, OPT_PARSE_SPECIAL,
	OPT_CHAT, OPT_VERSION, OPT_PLAN, OPT_FOREGROUND, OPT_CONFIG,
	OPT_CHECK_CONFIG, OPT_PRINT_CONFIG,
};

static const struct option long_opts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "prompt", required_argument, NULL, 'p' },
	{ "prompt-file", required_argument, NULL, OPT_PROMPT_FILE },
	{ "chat", no_argument, NULL, OPT_CHAT },
	{ "max-tokens", required_argument, NULL, OPT_MAX_TOKENS },
	{ "temperature", required_argument, NULL, OPT_TEMP },
	{ "top-k", required_argument, NULL, OPT_TOP_K },
	{ "top-p", required_argument, NULL, OPT_TOP_P },
	{ "min-p", required_argument, NULL, OPT_MIN_P },
	{ "repeat-penalty", required_argument, NULL, OPT_REPEAT },
	{ "presence-penalty", required_argument, NULL, OPT_PRESENCE },
	{ "frequency-penalty", required_argument, NULL, OPT_FREQUENCY },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "stop", required_argument, NULL, OPT_STOP },
	{ "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
	{ "threads", required_argument, NULL, 't' },
	{ "ctx-size", required_argument, NULL, OPT_KEY },
	{ "batch", required_argument, NULL, OPT_KEY },
	{ "max-batch-tokens", required_argument, NULL, OPT_KEY },
	{ "max-batch-seqs", required_argument, NULL, OPT_KEY },
	{ "page-tokens", required_argument, NULL, OPT_KEY },
	{ "kv-type", required_argument, NULL, OPT_KEY },
	{ "numerics", required_argument, NULL, OPT_KEY },
	{ "kv-size", required_argument, NULL, OPT_KEY },
	{ "kv-fraction", required_argument, NULL, OPT_KEY },
	{ "kv-lock", no_argument, NULL, OPT_KEY },
	{ "kv-hugetlb", no_argument, NULL, OPT_KEY },
	{ "numa-node", required_argument, NULL, OPT_KEY },
	{ "devices", required_argument, NULL, OPT_KEY },
	{ "pipeline-parallel", required_argument, NULL, OPT_KEY },
	{ "tensor-parallel", required_argument, NULL, OPT_KEY },
	{ "context-parallel", required_argument, NULL, OPT_KEY },
	{ "parallel", required_argument, NULL, OPT_KEY },
	{ "plan", no_argument, NULL, OPT_PLAN },
	{ "tokenize", required_argument, NULL, OPT_TOKENIZE },
	{ "tokenize-file", required_argument, NULL, OPT_TOKENIZE_FILE },
	{ "parse-special", no_argument, NULL, OPT_PARSE_SPECIAL },
	{ "socket", required_argument, NULL, OPT_KEY },
	{ "socket-mode", required_argument, NULL, OPT_KEY },
	{ "socket-group", required_argument, NULL, OPT_KEY },
	{ "admin-socket", required_argument, NULL, OPT_KEY },
	{ "admin-group", required_argument, NULL, OPT_KEY },
	{ "allow-users", required_argument, NULL, OPT_KEY },
	{ "allow-groups", required_argument, NULL, OPT_KEY },
	{ "max-clients", required_argument, NULL, OPT_KEY },
	{ "max-inflight", required_argument, NULL, OPT_KEY },
	{ "max-prompt", required_argument, NULL, OPT_KEY },
	{ "max-payload", required_argument, NULL, OPT_KEY },
	{ "sq-slots", required_argument, NULL, OPT_KEY },
	{ "cq-slots", required_argument, NULL, OPT_KEY },
	{ "sq-arena", required_argument, NULL, OPT_KEY },
	{ "cq-arena", required_argument, NULL, OPT_KEY },
	{ "spin-us", required_argument, NULL, OPT_KEY },
	{ "drain-timeout", required_argument, NULL, OPT_KEY },
	{ "log-level", required_argument, NULL, OPT_KEY },
	{ "stats-path", required_argument, NULL, OPT_KEY },
	{ "stats-interval-ms", required_argument, NULL, OPT_KEY },
	{ "foreground", no_argument, NULL, OPT_FOREGROUND },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
	{ "print-config", no_argument, NULL, OPT_PRINT_CONFIG },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

static void usage(FILE *out)
{
	fprintf(out,
"Usage: pagodad [--config FILE] [--model FILE] [options]   serve (the default)\n"
"       pagodad --model FILE --prompt TEXT [options]   one-shot completion\n"
"       pagodad --model FILE --tokenize TEXT             print token ids\n"
"       pagodad --model FILE --tokenize-file FILE|-      one line of ids per line\n"
"       pagodad --model FILE --plan [parallel options]   show the parallel plan\n"
"       pagodad --check-config [--config FILE] [options] check the configuration\n"
"       pagodad --print-config [--config FILE] [options] print the configuration\n"
"\n"
"Configuration (pagoda.conf(5); options override the file's keys):\n"
"      --config FILE         the configuration file (default %s;\n"
"                            the default file may be absent, a given one not)\n"
"      --check-config        check the file and the options: report every error\n"
"                            with its line, then the model, plan, users and groups\n"
"                            on this host; exit 0 when all is well, else 1\n"
"      --print-config        print the configuration in effect (the file, then the\n"
"                            options) in the file's format, and exit\n"
"Model and devices:\n"
"  -m, --model FILE          GGUF model (default: $PAGODA_MODEL, else the default\n"
"                            model in ${PAGODA_MODEL_DIR:-~/.cache/pagoda/models})\n"
"  -t, --threads N           CPU threads (default 2; 0 = all online CPUs); with\n"
"                            --devices or a parallel count: threads per device\n"
"                            (default: one per CPU of the device)\n"
"      --devices LIST        devices, e.g. cpu:0,cpu:1 (CPU groups, one NUMA\n"
"                            node each when there are enough) (default cpu:0)\n"
"      --pipeline-parallel N stages, each a contiguous range of blocks\n"
"                            (default: the devices left over by TP and CP)\n"
"      --tensor-parallel N   ranks dividing each block's heads and FFN (default 1)\n"
"      --context-parallel N  ranks dividing the KV tokens; divides --page-tokens\n"
"                            (default 1)\n"
"      --parallel auto|manual  auto: choose the counts from memory and links\n"
"                            (default manual: the counts given)\n"
"      --plan                print the plan (devices, stages, memory and\n"
"                            communication per token) and exit; loads no weights\n"
"      --numerics pagoda|llama.cpp  pagoda (default): every parallel plan gives\n"
"                            one device's bits; llama.cpp: one CPU device gives\n"
"                            llama.cpp's logits bit for bit (AVX2, F16 KV)\n"
"      --ctx-size N          KV cache capacity in tokens (default 8192)\n"
"      --kv-size SIZE        KV cache in bytes (K, M, G, T suffixes)\n"
"      --kv-fraction F       KV cache as a fraction (0..1] of available memory\n"
"                            (the last of these three given sizes the cache)\n"
"      --page-tokens N       tokens per KV page (default 16)\n"
"      --kv-type f16|bf16|f32  KV cache element type (default f16)\n"
"      --kv-lock             lock the KV cache in memory (mlock)\n"
"      --kv-hugetlb          put the KV cache on explicit huge pages if any\n"
"      --numa-node N         bind the KV cache to NUMA node N\n"
"      --batch N, --max-batch-tokens N  tokens per forward pass (default 512)\n"
"      --max-batch-seqs N    sequences per step when serving (default 64)\n"
"Prompt and generation:\n"
"  -p, --prompt TEXT         the prompt\n"
"      --prompt-file FILE    read the prompt from FILE ('-' for standard input)\n"
"      --chat                wrap the prompt as a user message in the model's\n"
"                            chat template\n"
"      --max-tokens N        tokens to generate at most (default 128)\n"
"      --temperature T       0 = greedy (default 0.8)\n"
"      --top-k N --top-p P --min-p P   truncation (defaults 40, 0.95, 0.05)\n"
"      --repeat-penalty R --presence-penalty P --frequency-penalty F\n"
"      --seed S              sampling seed (default: from the clock, printed)\n"
"      --stop TEXT           stop string (repeatable, up to %d)\n"
"      --ignore-eos          do not stop at end-of-generation tokens\n"
"Tokenizing:\n"
"      --tokenize TEXT       print TEXT's token ids\n"
"      --tokenize-file FILE  tokenize each line of FILE ('-': standard input)\n"
"      --parse-special       recognise special tokens such as <|im_start|>\n"
"Serving (without --prompt, --tokenize or --plan):\n"
"      --socket PATH         the Unix socket (default %s)\n"
"      --socket-mode MODE    its mode, octal (default 0660)\n"
"      --socket-group GROUP  its group (default pagoda when it exists)\n"
"      --admin-socket PATH   the admin socket (default: beside --socket,\n"
"                            NAME-admin.sock; none: no admin socket)\n"
"      --admin-group GROUP   who may use it besides root (default pagoda-admin\n"
"                            when it exists)\n"
"      --allow-users LIST    only these users (names or uids, comma-separated;\n"
"                            root always); default: anyone who can open the socket\n"
"      --allow-groups LIST   ... and members of these groups\n"
"      --max-clients N       clients connected at once (default 64)\n"
"      --max-inflight N      requests in flight per client (default 64)\n"
"      --max-prompt N        prompt tokens (default: the KV pool's capacity)\n"
"      --max-tokens N        tokens one request may generate (default 4096)\n"
"      --max-payload SIZE    bytes of one request's payload (default: --sq-arena)\n"
"      --sq-slots N --cq-slots N   ring entries per client (default 256, 1024)\n"
"      --sq-arena SIZE --cq-arena SIZE   payload arenas (default 1M, 4M)\n"
"      --spin-us N           poll this long before sleeping (default 50)\n"
"      --drain-timeout S     drop a client whose completion ring stays full\n"
"                            this many seconds (default 10)\n"
"      --stats-path PATH     the statistics segment (default: beside --socket,\n"
"                            NAME.stats; none: no statistics)\n"
"      --stats-interval-ms N  publish statistics this often while busy\n"
"      --log-level LEVEL     error, warn, info or debug (default info)\n"
"      --foreground          stay in the foreground (pagodad always does)\n"
"Other:\n"
"  -q, --quiet               no figures on standard error\n"
"  -h, --help                this text\n"
"      --version             the version\n", PGD_DEFAULT_CONFIG, MAX_STOP,
		PGD_DEFAULT_SOCKET);
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "pagodad: %s '%s': expected an integer in %d..%d\n",
			opt, s, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int parse_float(const char *opt, const char *s, float *out)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end || !isfinite(v)) {
		fprintf(stderr, "pagodad: %s '%s': expected a number\n", opt, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_seed(const char *s, uint64_t *seed)
{
	char *end;

	errno = 0;
	*seed = strtoull(s, &end, 0);
	if (errno || end == s || *end || *s == '-') {
		fprintf(stderr, "pagodad: --seed '%s': expected a non-negative integer\n", s);
		return -1;
	}
	return 0;
}

static int parse_sampling_opt(struct options *o, int c, const char *arg)
{
	struct pg_sampling *sp = &o->gen.sampling;

	switch (c) {
	case OPT_TEMP: return parse_float("--temperature", arg, &sp->temperature);
	case OPT_TOP_K: return parse_int("--top-k", arg, 0, INT_MAX, &sp->top_k);
	case OPT_TOP_P: return parse_float("--top-p", arg, &sp->top_p);
	case OPT_MIN_P: return parse_float("--min-p", arg, &sp->min_p);
	case OPT_REPEAT: return parse_float("--repeat-penalty", arg, &sp->repeat_penalty);
	case OPT_PRESENCE: return parse_float("--presence-penalty", arg, &sp->presence_penalty);
	case OPT_FREQUENCY: return parse_float("--frequency-penalty", arg, &sp->frequency_penalty);
	case OPT_SEED:
		o->seed_given = 1;
		return parse_seed(arg, &sp->seed);
	}
	return 1;
}

static int parse_other_opt(struct options *o, int c, const char *arg)
{
	switch (c) {
	case 'p': o->prompt = arg; return 0;
	case OPT_PROMPT_FILE: o->prompt_file = arg; return 0;
	case OPT_CHAT: o->chat = 1; return 0;
	case OPT_MAX_TOKENS:
		o->max_tokens = arg;
		return parse_int("--max-tokens", arg, 0, 1 << 24, &o->gen.max_tokens);
	case OPT_STOP:
		if (o->gen.n_stop == MAX_STOP) {
			fprintf(stderr, "pagodad: at most %d --stop strings\n", MAX_STOP);
			return -1;
		}
		o->stop[o->gen.n_stop++] = arg;
		return 0;
	case OPT_IGNORE_EOS: o->gen.ignore_eos = 1; return 0;
	case OPT_PLAN: o->plan_only = 1; return 0;
	case OPT_TOKENIZE: o->tokenize = arg; return 0;
	case OPT_TOKENIZE_FILE: o->tokenize_file = arg; return 0;
	case OPT_PARSE_SPECIAL: o->parse_special = 1; return 0;
	case OPT_CONFIG: o->config = arg; return 0;
	case OPT_CHECK_CONFIG: o->check_config = 1; return 0;
	case OPT_PRINT_CONFIG: o->print_config = 1; return 0;
	case OPT_FOREGROUND: return 0;
	case 'q': o->quiet = 1; return 0;
	}
	return 1;
}

/*
 * An option that stands for a configuration key (-m and -t are --model
 * and --threads): checked now, applied over the file once it is read.
 */
static int parse_key_opt(struct options *o, int c, int index, const char *arg)
{
	const char *name = c == 'm' ? "model" : c == 't' ? "threads" :
			   long_opts[index].name;
	char err[512];

	if (!pgd_conf_set_option(o->conf, name, arg ? arg : "yes", err, sizeof(err)))
		return 0;
	fprintf(stderr, "pagodad: %s\n", err);
	return -1;
}

static int set_defaults(struct options *o)
{
	memset(o, 0, sizeof(*o));
	o->gen.sampling = pg_sampling_default();
	o->gen.sampling.temperature = 0.8f;
	o->gen.sampling.top_k = 40;
	o->gen.sampling.top_p = 0.95f;
	o->gen.sampling.min_p = 0.05f;
	o->gen.max_tokens = 128;
	o->gen.stop = o->stop;
	o->conf = pgd_conf_create();
	if (o->conf)
		return 0;
	fprintf(stderr, "pagodad: out of memory\n");
	return -1;
}

/* Returns 0 to run, 1 to exit successfully (help), -1 on a usage error. */
static int parse_options(int argc, char **argv, struct options *o)
{
	int c, rc, index;

	if (set_defaults(o))
		return -1;
	optind = 1;
	while (index = -1,
	       (c = getopt_long(argc, argv, "m:p:t:qh", long_opts, &index)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 1;
		}
		if (c == OPT_VERSION) {
			printf("pagodad %s\n", PACKAGE_VERSION);
			return 1;
		}
		if (c == '?')
			goto bad;
		if (c == OPT_KEY || c == 'm' || c == 't')
			rc = parse_key_opt(o, c, index, optarg);
		else
			rc = parse_sampling_opt(o, c, optarg);
		if (rc > 0)
			rc = parse_other_opt(o, c, optarg);
		if (rc)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "pagodad: unexpected argument '%s'\n", argv[optind]);
		goto bad;
	}
	if (!o->seed_given)
		o->gen.sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
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
 * --max-tokens is then also the daemon's limit.  Returns 0, 1 (errors in
 * the configuration) or 2 (a bad --max-tokens for the daemon).
 */
static int load_config(struct options *o, int serving)
{
	const char *path = o->config ? o->config : PGD_DEFAULT_CONFIG;
	char err[512];
	int n;

	if (serving && o->max_tokens &&
	    pgd_conf_set_option(o->conf, "max-tokens", o->max_tokens, err, sizeof(err))) {
		fprintf(stderr, "pagodad: %s (the daemon's limit)\n", err);
		return 2;
	}
	n = pgd_conf_load(o->conf, path, o->config != NULL, report_stderr, NULL);
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

	if (o->tokenize)
		return print_ids(m->tok, o->tokenize, strlen(o->tokenize),
				 o->parse_special) ? 1 : 0;
	buf = read_all(o->tokenize_file, &len);
	if (!buf) {
		fprintf(stderr, "pagodad: cannot read %s: %s\n", o->tokenize_file,
			strerror(errno ? errno : ENOMEM));
		return 1;
	}
	for (line = buf; line && !rc; line = save) {
		char *nl = memchr(line, '\n', len - (size_t)(line - buf));

		save = nl ? nl + 1 : NULL;
		if (!nl && !*line)
			break;
		rc = print_ids(m->tok, line, nl ? (size_t)(nl - line) : strlen(line),
			       o->parse_special);
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
	char *text = o->prompt_file ? read_all(o->prompt_file, len)
				    : strdup(o->prompt);

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
	if (!o->quiet)
		fprintf(stderr, "pagodad: chat template: %s\n",
			pg_chat_format_name(fmt));
	sys = pg_chat_default_system(m->chat_template, tlen);
	n = pg_chat_tokenize(m->tok, fmt, &msg, 1, 1, sys,
			     pg_tokenizer_add_bos(m->tok), o->parse_special, ids);
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
			o->prompt_file ? " from " : "",
			o->prompt_file ? o->prompt_file : "", strerror(errno ? errno : ENOMEM));
		return NULL;
	}
	if (o->chat) {
		n = chat_ids(o, m, text, &ids);
	} else {
		n = pg_tokenize(m->tok, text, len, pg_tokenizer_add_bos(m->tok),
				o->parse_special, NULL, 0);
		if (n > 0 && n < INT_MAX)
			ids = malloc(sizeof(*ids) * (size_t)n);
		if (ids)
			pg_tokenize(m->tok, text, len,
				    pg_tokenizer_add_bos(m->tok),
				    o->parse_special, ids, n);
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
	if (o->quiet)
		return;
	fprintf(stderr, "\n\npagodad: load %.3f s; prompt %d tokens in %.3f s (%.1f tokens/s); "
		"generated %d tokens, decode %.1f tokens/s; finish %s; seed %llu; "
		"%d threads (%s)%s\n",
		load_s, st->n_prompt, st->prefill_s,
		st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0.0,
		st->n_gen,
		st->decode_s > 0 ? (st->n_gen - 1) / st->decode_s : 0.0,
		pg_finish_name(st->finish),
		(unsigned long long)o->gen.sampling.seed,
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
	load_s = pg_now() - t_start;	/* model mapped, backend and KV pool up */
	kvc = pg_kvc_for_forward(fw, m);
	ids = kvc ? tokenize_prompt(o, m, &n) : NULL;
	if (!kvc)
		fprintf(stderr, "pagodad: out of memory for the KV page table\n");
	rc = ids ? pg_generate(fw, kvc, m, ids, n, &o->gen, emit_stdout, NULL,
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

	serve = !o->prompt && !o->prompt_file && !o->tokenize && !o->tokenize_file &&
		!o->plan_only;
	rc = load_config(o, serve);
	if (rc)
		return rc;
	if (o->check_config)
		return run_check_config(o);
	if (o->print_config) {
		pgd_conf_print(o->conf, stdout);
		return 0;
	}
	path = pgd_conf_model_path(o->conf, path_buf, sizeof(path_buf));
	if (o->plan_only)
		return run_plan(o, path);
	vocab_only = (o->tokenize || o->tokenize_file) && !o->prompt && !o->prompt_file;
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
	double t0 = pg_now();
	int rc = parse_options(argc, argv, &o);

	if (!rc)
		rc = run_mode(&o, t0);
	else
		rc = rc > 0 ? 0 : 2;
	pgd_conf_free(o.conf);
	return rc;
}
