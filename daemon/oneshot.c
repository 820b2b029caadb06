/*
 * oneshot.c - pagodad's command line: the serving daemon (the default
 * mode: options into a struct pgd_config, then pgd_serve()), the one-shot
 * completion and tokenize modes that operators and tests use without a
 * running daemon, and --plan, which shows the parallel plan the options
 * give without loading weights.
 *
 * This is the only daemon code that prints to the terminal on its own; it
 * parses the options, loads the model and builds the forward pass.  The
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

#include "config.h"
#include "daemon/pagodad.h"
#include "engine/chat.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/tokenizer.h"
#include "log.h"
#include "server.h"

#define MAX_STOP 16

struct options {
	const char *model;
	const char *prompt;
	const char *prompt_file;
	const char *tokenize;
	const char *tokenize_file;
	int chat;
	int parse_special;
	int quiet;
	int threads;
	int threads_given;
	const char *devices;	/* --devices, or NULL */
	int pp, tp, cp;		/* parallel counts; 0: not given */
	int autoplan;		/* --parallel auto */
	int parallel_given;	/* any of the four above */
	int plan_only;		/* --plan */
	int ctx_size;
	size_t kv_bytes;
	double kv_fraction;
	struct pg_kv_mem kv_mem;
	int batch;
	enum pg_dtype kv_type;
	struct pg_gen_params gen;
	int seed_given;
	int max_tokens_given;
	const char *stop[MAX_STOP];
	struct pgd_config daemon;	/* the serving daemon's options */
	int log_level;
};

enum {
	OPT_PROMPT_FILE = 256, OPT_MAX_TOKENS, OPT_TEMP, OPT_TOP_K, OPT_TOP_P,
	OPT_MIN_P, OPT_REPEAT, OPT_PRESENCE, OPT_FREQUENCY, OPT_SEED, OPT_STOP,
	OPT_IGNORE_EOS, OPT_CTX, OPT_BATCH, OPT_KV_TYPE, OPT_TOKENIZE,
	OPT_TOKENIZE_FILE, OPT_PARSE_SPECIAL, OPT_CHAT, OPT_VERSION,
	OPT_KV_SIZE, OPT_KV_FRACTION, OPT_KV_LOCK, OPT_KV_HUGETLB, OPT_NUMA_NODE,
	OPT_DEVICES, OPT_PP, OPT_TP, OPT_CP, OPT_PARALLEL, OPT_PLAN,
	OPT_SOCKET, OPT_SOCKET_MODE, OPT_SOCKET_GROUP, OPT_ALLOW_USERS,
	OPT_ALLOW_GROUPS, OPT_MAX_CLIENTS, OPT_MAX_INFLIGHT, OPT_MAX_PROMPT,
	OPT_MAX_PAYLOAD, OPT_SQ_SLOTS, OPT_CQ_SLOTS, OPT_SQ_ARENA, OPT_CQ_ARENA,
	OPT_SPIN_US, OPT_DRAIN_TIMEOUT, OPT_LOG_LEVEL, OPT_FOREGROUND,
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
	{ "ctx-size", required_argument, NULL, OPT_CTX },
	{ "batch", required_argument, NULL, OPT_BATCH },
	{ "kv-type", required_argument, NULL, OPT_KV_TYPE },
	{ "kv-size", required_argument, NULL, OPT_KV_SIZE },
	{ "kv-fraction", required_argument, NULL, OPT_KV_FRACTION },
	{ "kv-lock", no_argument, NULL, OPT_KV_LOCK },
	{ "kv-hugetlb", no_argument, NULL, OPT_KV_HUGETLB },
	{ "numa-node", required_argument, NULL, OPT_NUMA_NODE },
	{ "devices", required_argument, NULL, OPT_DEVICES },
	{ "pipeline-parallel", required_argument, NULL, OPT_PP },
	{ "tensor-parallel", required_argument, NULL, OPT_TP },
	{ "context-parallel", required_argument, NULL, OPT_CP },
	{ "parallel", required_argument, NULL, OPT_PARALLEL },
	{ "plan", no_argument, NULL, OPT_PLAN },
	{ "tokenize", required_argument, NULL, OPT_TOKENIZE },
	{ "tokenize-file", required_argument, NULL, OPT_TOKENIZE_FILE },
	{ "parse-special", no_argument, NULL, OPT_PARSE_SPECIAL },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
	{ "socket-group", required_argument, NULL, OPT_SOCKET_GROUP },
	{ "allow-users", required_argument, NULL, OPT_ALLOW_USERS },
	{ "allow-groups", required_argument, NULL, OPT_ALLOW_GROUPS },
	{ "max-clients", required_argument, NULL, OPT_MAX_CLIENTS },
	{ "max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT },
	{ "max-prompt", required_argument, NULL, OPT_MAX_PROMPT },
	{ "max-payload", required_argument, NULL, OPT_MAX_PAYLOAD },
	{ "sq-slots", required_argument, NULL, OPT_SQ_SLOTS },
	{ "cq-slots", required_argument, NULL, OPT_CQ_SLOTS },
	{ "sq-arena", required_argument, NULL, OPT_SQ_ARENA },
	{ "cq-arena", required_argument, NULL, OPT_CQ_ARENA },
	{ "spin-us", required_argument, NULL, OPT_SPIN_US },
	{ "drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "foreground", no_argument, NULL, OPT_FOREGROUND },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

static void usage(FILE *out)
{
	fprintf(out,
"Usage: pagodad --model FILE [--socket PATH] [--foreground] [options]   serve\n"
"       pagodad --model FILE --prompt TEXT [options]   one-shot completion\n"
"       pagodad --model FILE --tokenize TEXT             print token ids\n"
"       pagodad --model FILE --tokenize-file FILE|-      one line of ids per line\n"
"       pagodad --model FILE --plan [parallel options]   show the parallel plan\n"
"\n"
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
"      --context-parallel N  ranks dividing the KV tokens; divides 16 (default 1)\n"
"      --parallel auto|manual  auto: choose the counts from memory and links\n"
"                            (default manual: the counts given)\n"
"      --plan                print the plan (devices, stages, memory and\n"
"                            communication per token) and exit; loads no weights\n"
"      --ctx-size N          KV cache capacity in tokens (default 8192)\n"
"      --batch N             tokens per forward pass (default 512)\n"
"      --kv-type f16|bf16|f32  KV cache element type (default f16)\n"
"      --kv-size SIZE        KV cache in bytes (K, M, G suffixes); overrides\n"
"                            --ctx-size\n"
"      --kv-fraction F       KV cache as a fraction (0..1) of available memory\n"
"      --kv-lock             lock the KV cache in memory (mlock)\n"
"      --kv-hugetlb          put the KV cache on explicit huge pages if any\n"
"      --numa-node N         bind the KV cache to NUMA node N\n"
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
"      --log-level LEVEL     error, warn, info or debug (default info)\n"
"      --foreground          stay in the foreground (pagodad always does)\n"
"Other:\n"
"  -q, --quiet               no figures on standard error\n"
"  -h, --help                this text\n"
"      --version             the version\n", MAX_STOP, PGD_DEFAULT_SOCKET);
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

/* A size in bytes with an optional K, M or G (binary) suffix. */
static int parse_size(const char *opt, const char *s, size_t *out)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	if (shift)
		end++;
	if (errno || end == s || *end || *s == '-' || v == 0 ||
	    v > (~0ull >> shift)) {
		fprintf(stderr, "pagodad: %s '%s': expected a size in bytes such as 512M or 4G\n",
			opt, s);
		return -1;
	}
	*out = (size_t)(v << shift);
	return 0;
}

static int parse_kv_type(const char *s, enum pg_dtype *t)
{
	if (!strcmp(s, "f16"))
		*t = PG_F16;
	else if (!strcmp(s, "bf16"))
		*t = PG_BF16;
	else if (!strcmp(s, "f32"))
		*t = PG_F32;
	else {
		fprintf(stderr, "pagodad: --kv-type '%s': expected f16, bf16 or f32\n", s);
		return -1;
	}
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
	case 'm': o->model = arg; return 0;
	case 'p': o->prompt = arg; return 0;
	case OPT_PROMPT_FILE: o->prompt_file = arg; return 0;
	case OPT_CHAT: o->chat = 1; return 0;
	case OPT_MAX_TOKENS:
		o->max_tokens_given = 1;
		return parse_int("--max-tokens", arg, 0, 1 << 24, &o->gen.max_tokens);
	case OPT_STOP:
		if (o->gen.n_stop == MAX_STOP) {
			fprintf(stderr, "pagodad: at most %d --stop strings\n", MAX_STOP);
			return -1;
		}
		o->stop[o->gen.n_stop++] = arg;
		return 0;
	case OPT_IGNORE_EOS: o->gen.ignore_eos = 1; return 0;
	case 't':
		o->threads_given = 1;
		return parse_int("--threads", arg, 0, 1024, &o->threads);
	case OPT_CTX: return parse_int("--ctx-size", arg, 1, 1 << 24, &o->ctx_size);
	case OPT_BATCH: return parse_int("--batch", arg, 1, 1 << 16, &o->batch);
	case OPT_KV_TYPE: return parse_kv_type(arg, &o->kv_type);
	case OPT_KV_SIZE: return parse_size("--kv-size", arg, &o->kv_bytes);
	case OPT_KV_LOCK: o->kv_mem.lock = 1; return 0;
	case OPT_KV_HUGETLB: o->kv_mem.hugetlb = 1; return 0;
	case OPT_NUMA_NODE: return parse_int("--numa-node", arg, 0, 1023, &o->kv_mem.numa_node);
	case OPT_KV_FRACTION: {
		float f;

		if (parse_float("--kv-fraction", arg, &f))
			return -1;
		if (!(f > 0 && f <= 1)) {
			fprintf(stderr, "pagodad: --kv-fraction '%s': expected a number in (0, 1]\n", arg);
			return -1;
		}
		o->kv_fraction = f;
		return 0;
	}
	case OPT_PLAN: o->plan_only = 1; return 0;
	case OPT_TOKENIZE: o->tokenize = arg; return 0;
	case OPT_TOKENIZE_FILE: o->tokenize_file = arg; return 0;
	case OPT_PARSE_SPECIAL: o->parse_special = 1; return 0;
	case 'q': o->quiet = 1; return 0;
	}
	return 1;
}

static int parse_parallel_opt(struct options *o, int c, const char *arg)
{
	const int max = PG_PLAN_MAX_DEVICES;

	switch (c) {
	case OPT_DEVICES:
		o->parallel_given = 1;
		o->devices = arg;
		return 0;
	case OPT_PARALLEL:
		o->parallel_given = 1;
		o->autoplan = !strcmp(arg, "auto");
		if (o->autoplan || !strcmp(arg, "manual"))
			return 0;
		fprintf(stderr, "pagodad: --parallel '%s': expected auto or manual\n", arg);
		return -1;
	case OPT_PP:
		o->parallel_given = 1;
		return parse_int("--pipeline-parallel", arg, 1, max, &o->pp);
	case OPT_TP:
		o->parallel_given = 1;
		return parse_int("--tensor-parallel", arg, 1, max, &o->tp);
	case OPT_CP:
		o->parallel_given = 1;
		return parse_int("--context-parallel", arg, 1, max, &o->cp);
	}
	return 1;
}

/* An unsigned size in bytes that fits 32 bits. */
static int parse_size32(const char *opt, const char *s, uint32_t *out)
{
	size_t v;

	if (parse_size(opt, s, &v))
		return -1;
	if (v > UINT32_MAX) {
		fprintf(stderr, "pagodad: %s '%s': at most 4G\n", opt, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int parse_mode(const char *s, unsigned *mode)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 8);
	if (errno || end == s || *end || v > 0777) {
		fprintf(stderr, "pagodad: --socket-mode '%s': expected an octal mode such as 0660\n", s);
		return -1;
	}
	*mode = (unsigned)v;
	return 0;
}

static int parse_slots(const char *opt, const char *s, uint32_t *out)
{
	int v;

	if (parse_int(opt, s, 8, 65536, &v))
		return -1;
	if (v & (v - 1)) {
		fprintf(stderr, "pagodad: %s '%s': expected a power of two\n", opt, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int parse_daemon_opt(struct options *o, int c, const char *arg)
{
	struct pgd_config *d = &o->daemon;
	float f;

	switch (c) {
	case OPT_SOCKET: d->socket_path = arg; return 0;
	case OPT_SOCKET_MODE: return parse_mode(arg, &d->socket_mode);
	case OPT_SOCKET_GROUP: d->socket_group = arg; return 0;
	case OPT_ALLOW_USERS: d->allow_users = arg; return 0;
	case OPT_ALLOW_GROUPS: d->allow_groups = arg; return 0;
	case OPT_MAX_CLIENTS: return parse_int("--max-clients", arg, 1, 4096, &d->max_clients);
	case OPT_MAX_INFLIGHT: return parse_int("--max-inflight", arg, 1, 65536, &d->max_inflight);
	case OPT_MAX_PROMPT: return parse_int("--max-prompt", arg, 1, 1 << 24, &d->max_prompt);
	case OPT_MAX_PAYLOAD: return parse_size32("--max-payload", arg, &d->max_payload);
	case OPT_SQ_SLOTS: return parse_slots("--sq-slots", arg, &d->sq_slots);
	case OPT_CQ_SLOTS: return parse_slots("--cq-slots", arg, &d->cq_slots);
	case OPT_SQ_ARENA: return parse_size32("--sq-arena", arg, &d->sq_arena);
	case OPT_CQ_ARENA: return parse_size32("--cq-arena", arg, &d->cq_arena);
	case OPT_SPIN_US: return parse_int("--spin-us", arg, 0, 1000000, &d->spin_us);
	case OPT_DRAIN_TIMEOUT:
		if (parse_float("--drain-timeout", arg, &f))
			return -1;
		if (!(f > 0)) {
			fprintf(stderr, "pagodad: --drain-timeout '%s': expected a positive number of seconds\n", arg);
			return -1;
		}
		d->drain_timeout_s = f;
		return 0;
	case OPT_LOG_LEVEL:
		o->log_level = pgd_log_parse(arg);
		if (o->log_level >= 0)
			return 0;
		fprintf(stderr, "pagodad: --log-level '%s': expected error, warn, info or debug\n", arg);
		return -1;
	case OPT_FOREGROUND: return 0;
	}
	return 1;
}

static void set_defaults(struct options *o)
{
	memset(o, 0, sizeof(*o));
	o->threads = 2;
	o->ctx_size = 8192;
	o->batch = 512;
	o->kv_type = PG_F16;
	o->kv_mem.numa_node = -1;
	o->gen.sampling = pg_sampling_default();
	o->gen.sampling.temperature = 0.8f;
	o->gen.sampling.top_k = 40;
	o->gen.sampling.top_p = 0.95f;
	o->gen.sampling.min_p = 0.05f;
	o->gen.max_tokens = 128;
	o->gen.stop = o->stop;
	pgd_config_default(&o->daemon);
	o->log_level = PGD_LOG_INFO;
}

/* Returns 0 to run, 1 to exit successfully (help), -1 on a usage error. */
static int parse_options(int argc, char **argv, struct options *o)
{
	int c, rc;

	set_defaults(o);
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:t:qh", long_opts, NULL)) != -1) {
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
		rc = parse_sampling_opt(o, c, optarg);
		if (rc > 0)
			rc = parse_parallel_opt(o, c, optarg);
		if (rc > 0)
			rc = parse_daemon_opt(o, c, optarg);
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

/* The model path: --model, else the default model's (model.h). */
static const char *model_path(const struct options *o, char *buf, size_t len)
{
	return o->model ? o->model : pg_model_default_path(buf, len);
}

/*
 * The plan request of the options.  Threads: --threads, else 2 for the
 * plain one-device run (as before there were plans), else one per CPU of
 * each device.  KV: one sequence of --ctx-size tokens, or as many tokens as
 * --kv-size holds.
 */
static void plan_request(const struct options *o,
			 const struct pg_model_facts *f,
			 struct pg_plan_request *req)
{
	int elem = o->kv_type == PG_F32 ? 4 : 2;
	uint64_t token_bytes = 2ull * (uint64_t)f->n_kv_heads *
			       (uint64_t)f->head_dim * (uint64_t)elem *
			       (uint64_t)f->n_blocks;

	memset(req, 0, sizeof(*req));
	req->devices = o->devices;
	req->pipeline_parallel = o->pp;
	req->tensor_parallel = o->tp;
	req->context_parallel = o->cp;
	req->autoplan = o->autoplan;
	req->n_threads = o->threads_given || !o->parallel_given ? o->threads : 0;
	req->ctx_tokens = o->ctx_size;
	if (o->kv_bytes && token_bytes) {
		uint64_t n = o->kv_bytes / token_bytes;

		req->ctx_tokens = n < 1 ? 1 : n > (1 << 24) ? 1 << 24 : (int)n;
	}
	req->batch_seqs = 1;
	req->kv_bytes_per_elem = elem;
	req->page_tokens = pg_forward_params_default().page_tokens;
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
	plan_request(o, f, req);
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
		if (rc == -ENOENT && !o->model)
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

/* The prompt text, wrapped in the chat template with --chat (malloc'd). */
static char *prompt_text(const struct options *o, const struct pg_model *m)
{
	size_t len, tlen = m->chat_template ? strlen(m->chat_template) : 0;
	char *text = o->prompt_file ? read_all(o->prompt_file, &len)
				    : strdup(o->prompt);
	struct pg_chat_msg msg = { .role = "user" };
	char *out = NULL, *sys;
	int fmt;

	if (!text || !o->chat)
		return text;
	fmt = pg_chat_detect(m->chat_template, tlen);
	sys = pg_chat_default_system(m->chat_template, tlen);
	msg.content = text;
	if (pg_chat_render(fmt < 0 ? PG_CHAT_CHATML : (enum pg_chat_format)fmt,
			   &msg, 1, 1, sys, &out))
		out = NULL;
	free(sys);
	free(text);
	return out;
}

static int32_t *tokenize_prompt(const struct options *o,
				const struct pg_model *m, int *n_out)
{
	char *text = prompt_text(o, m);
	int32_t *ids = NULL;
	int64_t n;

	if (!text) {
		fprintf(stderr, "pagodad: cannot read the prompt%s%s: %s\n",
			o->prompt_file ? " from " : "",
			o->prompt_file ? o->prompt_file : "", strerror(errno ? errno : ENOMEM));
		return NULL;
	}
	n = pg_tokenize(m->tok, text, strlen(text), pg_tokenizer_add_bos(m->tok),
			o->chat || o->parse_special, NULL, 0);
	if (n > 0 && n < INT_MAX)
		ids = malloc(sizeof(*ids) * (size_t)n);
	if (ids)
		pg_tokenize(m->tok, text, strlen(text),
			    pg_tokenizer_add_bos(m->tok),
			    o->chat || o->parse_special, ids, n);
	else
		fprintf(stderr, "pagodad: the prompt is empty: it gives no tokens\n");
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
		"comm ms", "comm %", "MB sent", "reduces");
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
			d.bytes / 1e6, (unsigned long long)d.n_all_reduce);
	}
}

static void print_figures(const struct options *o, const struct pg_forward *fw,
			  double load_s, const struct pg_gen_stats *st)
{
	if (o->quiet)
		return;
	fprintf(stderr, "\n\npagodad: load %.3f s; prompt %d tokens in %.3f s (%.1f tokens/s); "
		"generated %d tokens, decode %.1f tokens/s; finish %s; seed %llu; "
		"%d threads (%s)\n",
		load_s, st->n_prompt, st->prefill_s,
		st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0.0,
		st->n_gen,
		st->decode_s > 0 ? (st->n_gen - 1) / st->decode_s : 0.0,
		pg_finish_name(st->finish),
		(unsigned long long)o->gen.sampling.seed,
		pg_forward_threads(fw), pg_forward_isa_name(fw));
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

	fp.n_threads = o->threads;
	fp.max_batch_tokens = o->batch;
	fp.kv_type = o->kv_type;
	fp.kv_bytes = o->kv_bytes;
	fp.kv_fraction = o->kv_fraction;
	fp.kv_mem = o->kv_mem;
	if (!o->kv_bytes && !o->kv_fraction)
		fp.n_pages = (o->ctx_size + fp.page_tokens - 1) / fp.page_tokens;
	pg_model_facts_of(m, &facts);
	plan = make_plan(o, &facts, &req);
	if (!plan)
		return 1;
	/*
	 * Without parallel options the plan is one device of every CPU; the
	 * forward pass runs it unpinned, as it always has.
	 */
	if (o->parallel_given)
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

	pgd_log_set_level((enum pgd_log_level)o->log_level);
	if (o->max_tokens_given) {
		if (o->gen.max_tokens < 1) {
			fprintf(stderr, "pagodad: --max-tokens: the daemon's limit must be at least 1\n");
			return 2;
		}
		o->daemon.max_tokens = o->gen.max_tokens;
	}
	rc = pgd_block_signals();
	if (rc) {
		fprintf(stderr, "pagodad: cannot block signals: %s\n", strerror(-rc));
		return 1;
	}
	if (make_forward(o, m, &fw, &plan))
		return 1;
	o->daemon.plan_desc = o->parallel_given ? plan->reason : "one CPU device, threads not pinned";
	o->daemon.max_batch_tokens = o->batch;
	rc = pgd_serve(&o->daemon, m, fw);
	pg_forward_destroy(fw);
	free(plan);
	return rc;
}

int pagodad_main(int argc, char **argv)
{
	struct options o;
	struct pg_model *m = NULL;
	char path_buf[4096], err[1024];
	const char *path;
	double t0 = pg_now();
	int rc, vocab_only, serve;

	rc = parse_options(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	serve = !o.prompt && !o.prompt_file && !o.tokenize && !o.tokenize_file &&
		!o.plan_only;
	path = model_path(&o, path_buf, sizeof(path_buf));
	if (o.plan_only)
		return run_plan(&o, path);
	vocab_only = (o.tokenize || o.tokenize_file) && !o.prompt && !o.prompt_file;
	rc = pg_model_load(path, vocab_only, &m, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "pagodad: %s\n", err);
		if (rc == -ENOENT && !o.model)
			fprintf(stderr, "pagodad: fetch the default model with scripts/fetch-model, or pass --model FILE\n");
		return 1;
	}
	if (serve)
		rc = run_daemon(&o, m);
	else
		rc = vocab_only ? run_tokenize(&o, m) : run_prompt(&o, m, t0);
	pg_model_free(m);
	return rc;
}
