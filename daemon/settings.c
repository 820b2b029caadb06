/*
 * settings.c - the table of pagodad's settings (settings.h), and how each
 * kind of value reads, writes, defaults and shows in --help.
 *
 * The rows' order is the file's (--print-config's) for the keys, then
 * the command line's own settings, then the environment's; --help shows
 * them by section, each section in this order.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/admin.h"
#include "daemon/config.h"
#include "daemon/engine/chat.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/plan.h"
#include "daemon/log.h"
#include "daemon/settings.h"
#include "daemon/stats.h"
#include "shm/segment.h"

#define STR_(x) #x
#define STR(x) STR_(x)

#define C(field) offsetof(struct pgd_conf, field)
#define D(field) offsetof(struct pgd_conf, daemon.field)
#define L(field) offsetof(struct pgd_cmdline, field)
#define MAX_TOKENS (1 << 24)

/* A key: its section, its name, its option. */
#define KEY(sec, name, opt) .section = sec, .key = name, .option = opt

const struct pgd_setting pgd_settings[] = {
	/* ---- pagodad.conf's keys, in the file's order ---- */
	{ KEY("model", "path", "model"), .short_opt = 'm', .type = PGD_T_MODEL,
	  .flags = PGD_F_UNSET, .off = C(model), .group = PGD_H_MODEL, .arg = "FILE",
	  .unset = "$PAGODA_MODEL, else the default model in ${PAGODA_MODEL_DIR:-~/.cache/pagoda/models}",
	  .help = "GGUF model" },
	{ KEY("model", "chat_format", "chat-format"), .type = PGD_T_CHAT_FORMAT,
	  .def = "auto", .off = D(chat_format), .group = PGD_H_MODEL, .arg = "NAME",
	  .help = "render chat requests in this format: chatml, qwen2, qwen3, llama3, llama2, gemma or phi3, whatever the model's template is; auto: the format recognised in the template" },

	{ KEY("devices", "devices", "devices"), .type = PGD_T_STR, .flags = PGD_F_UNSET,
	  .off = C(devices), .group = PGD_H_MODEL, .arg = "LIST",
	  .unset = "one CPU device of every CPU, threads not pinned",
	  .help = "devices, e.g. cpu:0,cpu:1 (CPU groups, one NUMA node each when there are enough)" },
	{ KEY("devices", "parallel", "parallel"), .type = PGD_T_PARALLEL, .lo = 0, .hi = 1,
	  .def = "manual", .off = C(autoplan), .group = PGD_H_MODEL, .arg = "auto|manual",
	  .help = "auto: choose the counts from memory and links; manual: the counts given" },
	{ KEY("devices", "pipeline_parallel", "pipeline-parallel"), .type = PGD_T_INT,
	  .lo = 1, .hi = PG_PLAN_MAX_DEVICES, .flags = PGD_F_UNSET, .off = C(pp),
	  .group = PGD_H_MODEL, .arg = "N",
	  .unset = "the devices left over by tensor_parallel and context_parallel",
	  .help = "stages, each a contiguous range of blocks" },
	{ KEY("devices", "tensor_parallel", "tensor-parallel"), .type = PGD_T_INT,
	  .lo = 1, .hi = PG_PLAN_MAX_DEVICES, .flags = PGD_F_UNSET, .off = C(tp),
	  .group = PGD_H_MODEL, .arg = "N", .unset = "1, or chosen by parallel = auto",
	  .help = "ranks dividing each block's heads and FFN" },
	{ KEY("devices", "context_parallel", "context-parallel"), .type = PGD_T_INT,
	  .lo = 1, .hi = PG_PLAN_MAX_DEVICES, .flags = PGD_F_UNSET, .off = C(cp),
	  .group = PGD_H_MODEL, .arg = "N", .unset = "1, or chosen by parallel = auto",
	  .help = "ranks dividing the KV tokens; divides --page-tokens" },
	{ KEY("devices", "threads", "threads"), .short_opt = 't', .type = PGD_T_INT,
	  .lo = 0, .hi = 1024, .flags = PGD_F_UNSET, .off = C(threads),
	  .group = PGD_H_MODEL, .arg = "N",
	  .unset = "2 on the one unpinned CPU device; one per CPU of each device of a plan",
	  .help = "CPU threads (0: all online CPUs); with --devices or a parallel count: threads per device" },
	{ KEY("devices", "numerics", "numerics"), .type = PGD_T_NUMERICS, .lo = 0, .hi = 1,
	  .def = "pagoda", .off = C(numerics), .group = PGD_H_MODEL, .arg = "pagoda|llama.cpp",
	  .help = "pagoda: every parallel plan gives one device's bits; llama.cpp: one CPU device gives llama.cpp's logits bit for bit (AVX2, F16 KV)" },

	{ KEY("kv", "ctx_size", "ctx-size"), .type = PGD_T_INT, .lo = 1, .hi = MAX_TOKENS,
	  .def = "8192", .flags = PGD_F_POOL, .off = C(ctx_size), .group = PGD_H_MODEL,
	  .arg = "N", .help = "KV cache capacity in tokens" },
	{ KEY("kv", "kv_size", "kv-size"), .type = PGD_T_SIZE, .lo = 1, .hi = 1ll << 50,
	  .flags = PGD_F_UNSET | PGD_F_POOL, .off = C(kv_bytes), .group = PGD_H_MODEL,
	  .arg = "SIZE", .unset = "the pool holds ctx_size tokens",
	  .help = "KV cache in bytes (K, M, G, T suffixes)" },
	{ KEY("kv", "kv_fraction", "kv-fraction"), .type = PGD_T_FRACTION, .lo = 0, .hi = 1,
	  .flags = PGD_F_UNSET | PGD_F_POOL, .off = C(kv_fraction), .group = PGD_H_MODEL,
	  .arg = "F", .unset = "the pool holds ctx_size tokens",
	  .help = "KV cache as a fraction (0..1] of available memory (the last of --ctx-size, --kv-size and --kv-fraction given sizes the cache)" },
	{ KEY("kv", "page_tokens", "page-tokens"), .type = PGD_T_INT, .lo = 1, .hi = 1024,
	  .def = "16", .off = C(page_tokens), .group = PGD_H_MODEL, .arg = "N",
	  .help = "tokens per KV page" },
	{ KEY("kv", "kv_type", "kv-type"), .type = PGD_T_KV_TYPE, .def = "f16",
	  .off = C(kv_type), .group = PGD_H_MODEL, .arg = "f16|bf16|f32",
	  .help = "KV cache element type" },
	{ KEY("kv", "kv_lock", "kv-lock"), .type = PGD_T_BOOL, .lo = 0, .hi = 1, .def = "no",
	  .off = C(kv_mem.lock), .group = PGD_H_MODEL,
	  .help = "lock the KV cache in memory (mlock)" },
	{ KEY("kv", "kv_hugetlb", "kv-hugetlb"), .type = PGD_T_BOOL, .lo = 0, .hi = 1,
	  .def = "no", .off = C(kv_mem.hugetlb), .group = PGD_H_MODEL,
	  .help = "put the KV cache on explicit huge pages if any" },
	{ KEY("kv", "numa_node", "numa-node"), .type = PGD_T_INT, .lo = 0, .hi = 1023,
	  .flags = PGD_F_UNSET, .off = C(kv_mem.numa_node), .group = PGD_H_MODEL,
	  .arg = "N", .unset = "no binding", .help = "bind the KV cache to NUMA node N" },

	{ KEY("batch", "max_batch_tokens", "max-batch-tokens"), .alias = "batch",
	  .type = PGD_T_INT, .lo = 1, .hi = 1 << 16, .def = "512",
	  .off = C(max_batch_tokens), .group = PGD_H_MODEL, .arg = "N",
	  .help = "tokens per forward pass" },
	{ KEY("batch", "max_batch_seqs", "max-batch-seqs"), .type = PGD_T_INT, .lo = 1,
	  .hi = 4096, .def = "64", .off = C(max_batch_seqs), .group = PGD_H_MODEL,
	  .arg = "N", .help = "sequences per step when serving" },
	{ KEY("batch", "step_target_ms", "step-target-ms"), .type = PGD_T_INT, .lo = 1,
	  .hi = 60000, .flags = PGD_F_UNSET, .off = D(step_target_ms),
	  .group = PGD_H_MODEL, .arg = "MS",
	  .unset = "auto: twice the time of the step's decodes alone, as measured",
	  .help = "while requests decode, cut prompt chunks so that a step should take at most MS milliseconds" },

	{ KEY("daemon", "socket", "socket"), .type = PGD_T_STR, .def = PGD_DEFAULT_SOCKET,
	  .off = D(socket_path), .group = PGD_H_SERVE, .arg = "PATH",
	  .help = "the Unix socket" },
	{ KEY("daemon", "socket_mode", "socket-mode"), .type = PGD_T_MODE, .lo = 0,
	  .hi = 0777, .def = "0660", .off = D(socket_mode), .group = PGD_H_SERVE,
	  .arg = "MODE", .help = "its mode, octal" },
	{ KEY("daemon", "socket_group", "socket-group"), .type = PGD_T_STR,
	  .flags = PGD_F_UNSET, .off = D(socket_group), .group = PGD_H_SERVE,
	  .arg = "GROUP", .unset = PGD_DEFAULT_GROUP " when that group exists, else the daemon's own group",
	  .help = "its group" },
	{ KEY("daemon", "admin_socket", "admin-socket"), .type = PGD_T_STR,
	  .flags = PGD_F_UNSET, .off = D(admin_socket), .group = PGD_H_SERVE,
	  .arg = "PATH", .unset = "beside the socket, its name ending in -admin.sock",
	  .help = "the admin socket (none: no admin socket)" },
	{ KEY("daemon", "admin_group", "admin-group"), .type = PGD_T_STR,
	  .flags = PGD_F_UNSET, .off = D(admin_group), .group = PGD_H_SERVE,
	  .arg = "GROUP", .unset = PGD_DEFAULT_ADMIN_GROUP " when that group exists, else root and pagodad's own user only",
	  .help = "who may use the admin socket besides root" },
	{ KEY("daemon", "sq_slots", "sq-slots"), .type = PGD_T_SLOTS,
	  .lo = PG_SEG_MIN_SLOTS, .hi = PG_SEG_MAX_SLOTS, .def = "256",
	  .off = D(sq_slots), .group = PGD_H_SERVE, .arg = "N",
	  .help = "submission ring entries per client" },
	{ KEY("daemon", "cq_slots", "cq-slots"), .type = PGD_T_SLOTS,
	  .lo = PG_SEG_MIN_SLOTS, .hi = PG_SEG_MAX_SLOTS, .def = "1024",
	  .off = D(cq_slots), .group = PGD_H_SERVE, .arg = "N",
	  .help = "completion ring entries per client" },
	{ KEY("daemon", "sq_arena", "sq-arena"), .type = PGD_T_SIZE32,
	  .lo = PG_SEG_MIN_ARENA, .hi = PG_SEG_MAX_ARENA, .def = "1M",
	  .off = D(sq_arena), .group = PGD_H_SERVE, .arg = "SIZE",
	  .help = "each client's submission payload arena" },
	{ KEY("daemon", "cq_arena", "cq-arena"), .type = PGD_T_SIZE32,
	  .lo = PG_SEG_MIN_ARENA, .hi = PG_SEG_MAX_ARENA, .def = "4M",
	  .off = D(cq_arena), .group = PGD_H_SERVE, .arg = "SIZE",
	  .help = "each client's completion payload arena" },
	{ KEY("daemon", "spin_us", "spin-us"), .type = PGD_T_INT, .lo = 0, .hi = 1000000,
	  .def = "50", .flags = PGD_F_RELOAD, .off = D(spin_us), .group = PGD_H_SERVE,
	  .arg = "N", .help = "poll this many microseconds before sleeping" },

	{ KEY("limits", "max_clients", "max-clients"), .type = PGD_T_INT, .lo = 1,
	  .hi = 4096, .def = "64", .off = D(max_clients), .group = PGD_H_SERVE,
	  .arg = "N", .help = "clients connected at once" },
	{ KEY("limits", "max_inflight", "max-inflight"), .type = PGD_T_INT, .lo = 1,
	  .hi = 65536, .def = "64", .flags = PGD_F_RELOAD, .off = D(max_inflight),
	  .group = PGD_H_SERVE, .arg = "N", .help = "requests in flight per client" },
	{ KEY("limits", "max_prompt", "max-prompt"), .type = PGD_T_INT, .lo = 1,
	  .hi = MAX_TOKENS, .flags = PGD_F_RELOAD | PGD_F_UNSET, .off = D(max_prompt),
	  .group = PGD_H_SERVE, .arg = "N", .unset = "the KV pool's capacity",
	  .help = "prompt tokens" },
	{ KEY("limits", "max_tokens", "max-tokens"), .type = PGD_T_INT, .lo = 1,
	  .hi = MAX_TOKENS, .def = "4096", .flags = PGD_F_RELOAD | PGD_F_SHARED,
	  .off = D(max_tokens), .group = PGD_H_SERVE, .arg = "N",
	  .help = "tokens one request may generate" },
	{ KEY("limits", "max_payload", "max-payload"), .type = PGD_T_SIZE32, .lo = 1,
	  .hi = PG_SEG_MAX_ARENA, .flags = PGD_F_RELOAD | PGD_F_UNSET,
	  .off = D(max_payload), .group = PGD_H_SERVE, .arg = "SIZE", .unset = "sq_arena",
	  .help = "bytes of one request's payload" },
	{ KEY("limits", "drain_timeout", "drain-timeout"), .type = PGD_T_SECONDS,
	  .def = "10", .flags = PGD_F_RELOAD, .off = D(drain_timeout_s),
	  .group = PGD_H_SERVE, .arg = "S",
	  .help = "drop a client whose completion ring stays full this many seconds" },

	{ KEY("access", "allow_users", "allow-users"), .type = PGD_T_STR,
	  .flags = PGD_F_RELOAD | PGD_F_UNSET, .off = D(allow_users),
	  .group = PGD_H_SERVE, .arg = "LIST",
	  .unset = "anyone who can open the socket, unless allow_groups is set",
	  .help = "only these users (names or uids, comma-separated; root always)" },
	{ KEY("access", "allow_groups", "allow-groups"), .type = PGD_T_STR,
	  .flags = PGD_F_RELOAD | PGD_F_UNSET, .off = D(allow_groups),
	  .group = PGD_H_SERVE, .arg = "LIST", .unset = "no group beyond allow_users",
	  .help = "... and members of these groups" },

	{ KEY("log", "log_level", "log-level"), .type = PGD_T_LOG_LEVEL, .def = "info",
	  .flags = PGD_F_RELOAD, .off = C(log_level), .group = PGD_H_SERVE,
	  .arg = "LEVEL", .help = "error, warn, info or debug" },

	{ KEY("stats", "stats_path", "stats-path"), .type = PGD_T_STR, .flags = PGD_F_UNSET,
	  .off = D(stats_path), .group = PGD_H_SERVE, .arg = "PATH",
	  .unset = "beside the socket, its name ending in .stats",
	  .help = "the statistics segment (none: no statistics)" },
	{ KEY("stats", "stats_interval_ms", "stats-interval-ms"), .type = PGD_T_INT,
	  .lo = 1, .hi = 3600000, .flags = PGD_F_UNSET, .off = D(stats_interval_ms),
	  .group = PGD_H_SERVE, .arg = "N", .unset = STR(PGD_STATS_INTERVAL_MS),
	  .help = "publish statistics this often while busy" },

	/* ---- the command line's own ---- */
	{ .option = "config", .type = PGD_T_ARG, .flags = PGD_F_UNSET, .off = L(config),
	  .group = PGD_H_CONFIG, .arg = "FILE",
	  .unset = PGD_DEFAULT_CONFIG ", which may be absent; a file given here must exist",
	  .help = "the configuration file" },
	{ .option = "check-config", .type = PGD_T_FLAG, .off = L(check_config),
	  .group = PGD_H_CONFIG,
	  .help = "check the file and the options: report every error with its line, then the model, plan, users and groups on this host; exit 0 when all is well, else 1" },
	{ .option = "print-config", .type = PGD_T_FLAG, .off = L(print_config),
	  .group = PGD_H_CONFIG,
	  .help = "print the configuration in effect (the file, then the options) in the file's format, and exit" },
	{ .option = "plan", .type = PGD_T_FLAG, .off = L(plan), .group = PGD_H_MODEL,
	  .help = "print the plan (devices, stages, memory and communication per token) and exit; loads no weights" },

	{ .option = "prompt", .short_opt = 'p', .type = PGD_T_ARG, .off = L(prompt),
	  .group = PGD_H_GEN, .arg = "TEXT", .help = "the prompt" },
	{ .option = "prompt-file", .type = PGD_T_ARG, .off = L(prompt_file),
	  .group = PGD_H_GEN, .arg = "FILE",
	  .help = "read the prompt from FILE ('-' for standard input)" },
	{ .option = "chat", .type = PGD_T_FLAG, .off = L(chat), .group = PGD_H_GEN,
	  .help = "wrap the prompt as a user message in the model's chat template" },
	{ .option = "max-tokens", .type = PGD_T_INT, .lo = 0, .hi = MAX_TOKENS,
	  .def = "128", .off = L(gen.max_tokens), .group = PGD_H_GEN, .arg = "N",
	  .help = "tokens to generate at most" },
	{ .option = "temperature", .type = PGD_T_FLOAT, .def = "0.8",
	  .off = L(gen.sampling.temperature), .group = PGD_H_GEN, .arg = "T",
	  .help = "sampling temperature; 0 = greedy" },
	{ .option = "top-k", .type = PGD_T_INT, .lo = 0, .hi = INT_MAX, .def = "40",
	  .off = L(gen.sampling.top_k), .group = PGD_H_GEN, .arg = "N",
	  .help = "truncation: the N most likely tokens (0: off)" },
	{ .option = "top-p", .type = PGD_T_FLOAT, .def = "0.95",
	  .off = L(gen.sampling.top_p), .group = PGD_H_GEN, .arg = "P",
	  .help = "truncation: the most likely tokens up to a probability of P (1: off)" },
	{ .option = "min-p", .type = PGD_T_FLOAT, .def = "0.05",
	  .off = L(gen.sampling.min_p), .group = PGD_H_GEN, .arg = "P",
	  .help = "truncation: the tokens at least P times as likely as the most likely (0: off)" },
	{ .option = "repeat-penalty", .type = PGD_T_FLOAT, .def = "1",
	  .off = L(gen.sampling.repeat_penalty), .group = PGD_H_GEN, .arg = "R",
	  .help = "penalty on tokens already in the context (1: off)" },
	{ .option = "presence-penalty", .type = PGD_T_FLOAT, .def = "0",
	  .off = L(gen.sampling.presence_penalty), .group = PGD_H_GEN, .arg = "P",
	  .help = "penalty on tokens already in the context (0: off)" },
	{ .option = "frequency-penalty", .type = PGD_T_FLOAT, .def = "0",
	  .off = L(gen.sampling.frequency_penalty), .group = PGD_H_GEN, .arg = "F",
	  .help = "penalty on tokens by their count in the context (0: off)" },
	{ .option = "seed", .type = PGD_T_SEED, .flags = PGD_F_UNSET,
	  .off = L(gen.sampling.seed), .group = PGD_H_GEN, .arg = "S",
	  .unset = "from the clock, printed", .help = "sampling seed" },
	{ .option = "stop", .type = PGD_T_STOP, .hi = PGD_MAX_STOP, .off = L(stop),
	  .group = PGD_H_GEN, .arg = "TEXT", .help = "stop string" },
	{ .option = "ignore-eos", .type = PGD_T_FLAG, .off = L(gen.ignore_eos),
	  .group = PGD_H_GEN, .help = "do not stop at end-of-generation tokens" },
	{ .option = "grammar", .type = PGD_T_ARG, .off = L(grammar_file),
	  .group = PGD_H_GEN, .arg = "FILE",
	  .help = "the output follows the GBNF grammar in FILE (pagoda-grammar(7))" },
	{ .option = "json-schema", .type = PGD_T_ARG, .off = L(schema_file),
	  .group = PGD_H_GEN, .arg = "FILE",
	  .help = "the output is JSON valid under the JSON Schema in FILE (pagoda-json-schema(7))" },

	{ .option = "tokenize", .type = PGD_T_ARG, .off = L(tokenize),
	  .group = PGD_H_TOKENIZE, .arg = "TEXT", .help = "print TEXT's token ids" },
	{ .option = "tokenize-file", .type = PGD_T_ARG, .off = L(tokenize_file),
	  .group = PGD_H_TOKENIZE, .arg = "FILE",
	  .help = "tokenize each line of FILE ('-': standard input)" },
	{ .option = "parse-special", .type = PGD_T_FLAG, .off = L(parse_special),
	  .group = PGD_H_TOKENIZE,
	  .help = "recognise special tokens such as <|im_start|>" },

	{ .option = "foreground", .type = PGD_T_FLAG, .off = L(foreground),
	  .group = PGD_H_SERVE, .help = "stay in the foreground (pagodad always does)" },
	{ .option = "quiet", .short_opt = 'q', .type = PGD_T_FLAG, .off = L(quiet),
	  .group = PGD_H_OTHER, .help = "no figures on standard error" },
	{ .option = "help", .short_opt = 'h', .type = PGD_T_HELP, .group = PGD_H_OTHER,
	  .help = "this text" },
	{ .option = "version", .type = PGD_T_VERSION, .group = PGD_H_OTHER,
	  .help = "the version" },

	/* ---- the environment ---- */
	{ .env = "PAGODA_NCCL_TIMEOUT", .type = PGD_T_INT, .lo = 1, .hi = 86400,
	  .def = STR(PG_FW_NCCL_TIMEOUT_S), .off = L(nccl_timeout_s),
	  .group = PGD_H_ENV, .arg = "SECONDS",
	  .help = "how long the GPUs of a plan of several CUDA devices have to form their NCCL groups at start" },
	{ .env = "PAGODA_FAULT_INJECTION", .type = PGD_T_BOOL, .lo = 0, .hi = 1,
	  .def = "no", .off = L(fault_injection), .group = PGD_H_ENV, .arg = "1",
	  .help = "tests only: the admin command FAULT N fails the Nth allocation from then on" },
};

const int pgd_n_settings = (int)(sizeof(pgd_settings) / sizeof(pgd_settings[0]));

int pgd_settings_keys(void)
{
	int n = 0;

	while (n < pgd_n_settings && pgd_settings[n].key)
		n++;
	return n;
}

_Static_assert(sizeof(pgd_settings) / sizeof(pgd_settings[0]) <= PGD_SETTINGS_MAX,
	       "PGD_SETTINGS_MAX is too small for the table");

/* ---- reading and writing values ---- */

int pgd_parse_ll(const char *s, int base, long long *v)
{
	char *end;

	errno = 0;
	*v = strtoll(s, &end, base);
	return errno || end == s || *end ? -1 : 0;
}

/* A size in bytes with an optional binary K, M, G or T suffix. */
static int parse_bytes(const char *s, unsigned long long *out)
{
	static const char suffixes[] = "KMGT";
	unsigned long long v;
	const char *sfx;
	char *end;
	int shift = 0;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end && (sfx = strchr(suffixes, *end & ~0x20)) != NULL) {
		shift = 10 * (int)(sfx - suffixes + 1);
		end++;
	}
	if (errno || end == s || *end || v > (~0ull >> shift))
		return -1;
	*out = v << shift;
	return 0;
}

void pgd_format_bytes(unsigned long long v, char *buf, size_t len)
{
	static const char suffixes[] = "KMGT";
	int i = -1;

	while (v && i < 3 && !(v & 1023)) {
		v >>= 10;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", v);
	else
		snprintf(buf, len, "%llu%c", v, suffixes[i]);
}

/* The shortest of %.15g and %.17g that reads back as v. */
static void format_double(double v, char *buf, size_t len)
{
	snprintf(buf, len, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, len, "%.17g", v);
}

static int parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i]))
			return *out = 1, 0;
		if (!strcasecmp(s, no[i]))
			return *out = 0, 0;
	}
	return -1;
}

static int parse_kv_type(const char *s, enum pg_dtype *t)
{
	if (!strcmp(s, "f16"))
		*t = PG_F16;
	else if (!strcmp(s, "bf16"))
		*t = PG_BF16;
	else if (!strcmp(s, "f32"))
		*t = PG_F32;
	else
		return -1;
	return 0;
}

void pgd_setting_expected(const struct pgd_setting *s, char *buf, size_t len)
{
	char lo[32], hi[32];

	pgd_format_bytes((unsigned long long)s->lo, lo, sizeof(lo));
	pgd_format_bytes((unsigned long long)s->hi, hi, sizeof(hi));
	switch (s->type) {
	case PGD_T_STR:
	case PGD_T_MODEL: snprintf(buf, len, "expected text without control characters"); break;
	case PGD_T_INT: snprintf(buf, len, "expected an integer in %lld..%lld", s->lo, s->hi); break;
	case PGD_T_SIZE:
	case PGD_T_SIZE32: snprintf(buf, len, "expected a size in bytes from %s to %s, with an optional K, M, G or T suffix (such as 512M)", lo, hi); break;
	case PGD_T_SLOTS: snprintf(buf, len, "expected a power of two from %lld to %lld", s->lo, s->hi); break;
	case PGD_T_FRACTION: snprintf(buf, len, "expected a number in (0, 1]"); break;
	case PGD_T_SECONDS: snprintf(buf, len, "expected a positive number of seconds"); break;
	case PGD_T_BOOL: snprintf(buf, len, "expected yes or no"); break;
	case PGD_T_MODE: snprintf(buf, len, "expected an octal mode such as 0660"); break;
	case PGD_T_KV_TYPE: snprintf(buf, len, "expected f16, bf16 or f32"); break;
	case PGD_T_LOG_LEVEL: snprintf(buf, len, "expected error, warn, info or debug"); break;
	case PGD_T_PARALLEL: snprintf(buf, len, "expected auto or manual"); break;
	case PGD_T_NUMERICS: snprintf(buf, len, "expected pagoda or llama.cpp"); break;
	case PGD_T_CHAT_FORMAT: snprintf(buf, len, "expected auto, chatml, qwen2, qwen3, llama3, llama2, gemma or phi3"); break;
	case PGD_T_FLOAT: snprintf(buf, len, "expected a number"); break;
	case PGD_T_SEED: snprintf(buf, len, "expected a non-negative integer"); break;
	case PGD_T_STOP: snprintf(buf, len, "at most %lld of them may be given", s->hi); break;
	default: snprintf(buf, len, "expected no value"); break;
	}
}

static int parse_str(const char *s, char **out)
{
	char *copy;

	for (const char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return -1;
	copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	free(*out);
	*out = copy;
	return 0;
}

/* The integers, sizes and real numbers. */
static int parse_number(const struct pgd_setting *s, const char *text, void *v)
{
	unsigned long long b;
	long long n;
	double d;
	float f;
	char *end;

	switch (s->type) {
	case PGD_T_INT:
	case PGD_T_SLOTS:
		if (pgd_parse_ll(text, 10, &n) || n < s->lo || n > s->hi ||
		    (s->type == PGD_T_SLOTS && (n & (n - 1))))
			return -1;
		if (s->type == PGD_T_INT)
			*(int *)v = (int)n;
		else
			*(uint32_t *)v = (uint32_t)n;
		return 0;
	case PGD_T_SIZE:
	case PGD_T_SIZE32:
		if (parse_bytes(text, &b) || b < (unsigned long long)s->lo ||
		    b > (unsigned long long)s->hi)
			return -1;
		if (s->type == PGD_T_SIZE)
			*(size_t *)v = (size_t)b;
		else
			*(uint32_t *)v = (uint32_t)b;
		return 0;
	case PGD_T_FLOAT:
		errno = 0;
		f = strtof(text, &end);
		if (errno || end == text || *end || !isfinite(f))
			return -1;
		*(float *)v = f;
		return 0;
	case PGD_T_SEED:
		errno = 0;
		b = strtoull(text, &end, 0);
		if (errno || end == text || *end || *text == '-')
			return -1;
		*(uint64_t *)v = b;
		return 0;
	default:		/* PGD_T_FRACTION, PGD_T_SECONDS */
		errno = 0;
		d = strtod(text, &end);
		if (errno || end == text || *end || !isfinite(d) || !(d > 0) ||
		    (s->type == PGD_T_FRACTION && d > 1))
			return -1;
		*(double *)v = d;
		return 0;
	}
}

int pgd_setting_parse(const struct pgd_setting *s, const char *text,
		      void *value)
{
	struct pgd_strings *list = value;
	long long n;
	int i;

	switch (s->type) {
	case PGD_T_STR:
	case PGD_T_MODEL:
		return parse_str(text, (char **)value);
	case PGD_T_ARG:
		*(const char **)value = text;
		return 0;
	case PGD_T_FLAG:
		*(int *)value = 1;
		return 0;
	case PGD_T_STOP:
		if (list->n >= s->hi || list->n >= PGD_MAX_STOP)
			return -1;
		list->v[list->n++] = text;
		return 0;
	case PGD_T_HELP:
	case PGD_T_VERSION:
		return 0;
	case PGD_T_BOOL:
		return parse_bool(text, (int *)value);
	case PGD_T_MODE:
		if (*text < '0' || *text > '7' || pgd_parse_ll(text, 8, &n) ||
		    n < 0 || n > 0777)
			return -1;
		*(unsigned *)value = (unsigned)n;
		return 0;
	case PGD_T_KV_TYPE:
		return parse_kv_type(text, (enum pg_dtype *)value);
	case PGD_T_LOG_LEVEL:
		i = pgd_log_parse(text);
		if (i < 0)
			return -1;
		*(int *)value = i;
		return 0;
	case PGD_T_PARALLEL:
		if (strcmp(text, "auto") && strcmp(text, "manual"))
			return -1;
		*(int *)value = !strcmp(text, "auto");
		return 0;
	case PGD_T_NUMERICS:
		if (strcmp(text, "pagoda") && strcmp(text, "llama.cpp"))
			return -1;
		*(int *)value = strcmp(text, "pagoda") ? PG_NUMERICS_LLAMA_CPP :
							 PG_NUMERICS_PAGODA;
		return 0;
	case PGD_T_CHAT_FORMAT:
		i = strcmp(text, "auto") ? pg_chat_format_parse(text) : -1;
		if (i < 0 && strcmp(text, "auto"))
			return -1;
		*(int *)value = i;
		return 0;
	default:
		return parse_number(s, text, value);
	}
}

size_t pgd_setting_bytes(const struct pgd_setting *s)
{
	switch (s->type) {
	case PGD_T_STR:
	case PGD_T_MODEL:
	case PGD_T_ARG: return sizeof(char *);
	case PGD_T_SIZE: return sizeof(size_t);
	case PGD_T_SIZE32:
	case PGD_T_SLOTS: return sizeof(uint32_t);
	case PGD_T_FRACTION:
	case PGD_T_SECONDS: return sizeof(double);
	case PGD_T_MODE: return sizeof(unsigned);
	case PGD_T_KV_TYPE: return sizeof(enum pg_dtype);
	case PGD_T_FLOAT: return sizeof(float);
	case PGD_T_SEED: return sizeof(uint64_t);
	case PGD_T_STOP: return sizeof(struct pgd_strings);
	case PGD_T_HELP:
	case PGD_T_VERSION: return 0;
	default: return sizeof(int);
	}
}

int pgd_setting_is_unset(const struct pgd_setting *s, const void *v)
{
	if (!(s->flags & PGD_F_UNSET))
		return 0;
	switch (s->type) {
	case PGD_T_STR:
	case PGD_T_MODEL:
	case PGD_T_ARG: return !*(const char *const *)v;
	case PGD_T_SIZE: return !*(const size_t *)v;
	case PGD_T_SIZE32: return !*(const uint32_t *)v;
	case PGD_T_FRACTION: return !(*(const double *)v > 0);
	case PGD_T_SEED: return !*(const uint64_t *)v;
	default: return *(const int *)v < s->lo;
	}
}

int pgd_setting_default(const struct pgd_setting *s, void *value)
{
	if (s->type == PGD_T_HELP || s->type == PGD_T_VERSION)
		return 0;
	memset(value, 0, pgd_setting_bytes(s));
	if (s->def) {
		int rc = pgd_setting_parse(s, s->def, value);

		return rc == -ENOMEM ? -ENOMEM : 0;	/* tests/test_settings.c: it parses */
	}
	if ((s->flags & PGD_F_UNSET) && (s->type == PGD_T_INT ||
	    s->type == PGD_T_LOG_LEVEL || s->type == PGD_T_PARALLEL ||
	    s->type == PGD_T_NUMERICS))
		*(int *)value = (int)(s->lo - 1);
	return 0;
}

static const char *kv_type_name(enum pg_dtype t)
{
	return t == PG_F32 ? "f32" : t == PG_BF16 ? "bf16" : "f16";
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void pgd_setting_format(const struct pgd_setting *s, const void *v,
			char *buf, size_t len)
{
	if (pgd_setting_is_unset(s, v)) {
		buf[0] = '\0';
		return;
	}
	switch (s->type) {
	case PGD_T_STR:
	case PGD_T_MODEL:
	case PGD_T_ARG: snprintf(buf, len, "%s", *(const char *const *)v); break;
	case PGD_T_INT: snprintf(buf, len, "%d", *(const int *)v); break;
	case PGD_T_SLOTS: snprintf(buf, len, "%u", *(const uint32_t *)v); break;
	case PGD_T_SIZE: pgd_format_bytes(*(const size_t *)v, buf, len); break;
	case PGD_T_SIZE32: pgd_format_bytes(*(const uint32_t *)v, buf, len); break;
	case PGD_T_FRACTION:
	case PGD_T_SECONDS: format_double(*(const double *)v, buf, len); break;
	case PGD_T_FLOAT: format_double(*(const float *)v, buf, len); break;
	case PGD_T_SEED: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)v); break;
	case PGD_T_BOOL:
	case PGD_T_FLAG: snprintf(buf, len, "%s", *(const int *)v ? "yes" : "no"); break;
	case PGD_T_MODE: snprintf(buf, len, "%04o", *(const unsigned *)v); break;
	case PGD_T_KV_TYPE: snprintf(buf, len, "%s", kv_type_name(*(const enum pg_dtype *)v)); break;
	case PGD_T_LOG_LEVEL: snprintf(buf, len, "%s", level_names[*(const int *)v]); break;
	case PGD_T_PARALLEL: snprintf(buf, len, "%s", *(const int *)v ? "auto" : "manual"); break;
	case PGD_T_NUMERICS:
		snprintf(buf, len, "%s", *(const int *)v ==
			 PG_NUMERICS_LLAMA_CPP ? "llama.cpp" : "pagoda");
		break;
	case PGD_T_CHAT_FORMAT:
		snprintf(buf, len, "%s", *(const int *)v < 0 ? "auto" :
			 pg_chat_format_name((enum pg_chat_format)*(const int *)v));
		break;
	default: buf[0] = '\0'; break;
	}
}

/* ---- options ---- */

int pgd_setting_takes_arg(const struct pgd_setting *s)
{
	return s->type != PGD_T_FLAG && s->type != PGD_T_BOOL &&
	       s->type != PGD_T_HELP && s->type != PGD_T_VERSION;
}

int pgd_setting_index(const struct pgd_setting *s)
{
	return (int)(s - pgd_settings);
}

void pgd_settings_getopt(struct option *opts, char *shortopts)
{
	int n = 0;
	char *p = shortopts;

	/* bounded: an option left out fails tests/test_settings */
	for (int i = 0; i < pgd_n_settings && n + 2 <= PGD_SETTINGS_MAX &&
	     p - shortopts < 60; i++) {
		const struct pgd_setting *s = &pgd_settings[i];
		int has = pgd_setting_takes_arg(s) ? required_argument : no_argument;
		int val = s->short_opt ? s->short_opt : PGD_OPT_BASE + i;

		if (!s->option || (s->flags & PGD_F_SHARED))
			continue;	/* the shared option is its twin's */
		opts[n++] = (struct option){ s->option, has, NULL, val };
		if (s->alias)
			opts[n++] = (struct option){ s->alias, has, NULL, val };
		if (s->short_opt) {
			*p++ = s->short_opt;
			if (has == required_argument)
				*p++ = ':';
		}
	}
	opts[n] = (struct option){ NULL, 0, NULL, 0 };
	*p = '\0';
}

const struct pgd_setting *pgd_setting_of_opt(int val)
{
	if (val >= PGD_OPT_BASE && val < PGD_OPT_BASE + pgd_n_settings)
		return &pgd_settings[val - PGD_OPT_BASE];
	for (int i = 0; val > 0 && val < PGD_OPT_BASE && i < pgd_n_settings; i++)
		if (pgd_settings[i].short_opt == val)
			return &pgd_settings[i];
	return NULL;
}

const struct pgd_setting *pgd_setting_by_option(const char *option)
{
	for (int i = 0; i < pgd_n_settings; i++) {
		const struct pgd_setting *s = &pgd_settings[i];

		if ((s->option && !strcmp(s->option, option)) ||
		    (s->alias && !strcmp(s->alias, option)))
			return s;	/* a shared option's key comes first */
	}
	return NULL;
}

/* ---- --help ---- */

static const char *const headings[PGD_H_COUNT] = {
	[PGD_H_CONFIG] = "Configuration (pagoda.conf(5); options override the file's keys):",
	[PGD_H_MODEL] = "Model and devices:",
	[PGD_H_GEN] = "Prompt and generation:",
	[PGD_H_TOKENIZE] = "Tokenizing:",
	[PGD_H_SERVE] = "Serving (without --prompt, --tokenize or --plan):",
	[PGD_H_OTHER] = "Other:",
	[PGD_H_ENV] = "Environment (see pagodad(8) for the others):",
};

#define HELP_COLUMN 28
#define HELP_WIDTH 79

/* text from column col on, wrapped at HELP_WIDTH; returns the column. */
static int put_words(FILE *out, const char *text, int col)
{
	while (*text) {
		size_t n = strcspn(text, " ");

		if (col > HELP_COLUMN && col + 1 + (int)n > HELP_WIDTH) {
			fprintf(out, "\n%*s", HELP_COLUMN, "");
			col = HELP_COLUMN;
		} else if (col > HELP_COLUMN) {
			fputc(' ', out);
			col++;
		}
		fprintf(out, "%.*s", (int)n, text);
		col += (int)n;
		text += n;
		text += strspn(text, " ");
	}
	return col;
}

/* "  -m, --model FILE", "      --batch N, --max-batch-tokens N", "  NAME=ARG" */
static void put_names(const struct pgd_setting *s, char *buf, size_t len)
{
	const char *arg = pgd_setting_takes_arg(s) ? s->arg : NULL;
	size_t n;

	if (s->env) {
		snprintf(buf, len, "  %s=%s", s->env, s->arg);
		return;
	}
	if (s->short_opt)
		n = (size_t)snprintf(buf, len, "  -%c, --%s", s->short_opt, s->option);
	else
		n = (size_t)snprintf(buf, len, "      --%s", s->option);
	if (arg && n < len)
		n += (size_t)snprintf(buf + n, len - n, " %s", arg);
	if (s->alias && n < len)
		snprintf(buf + n, len - n, ", --%s%s%s", s->alias, arg ? " " : "",
			 arg ? arg : "");
}

static void put_setting(FILE *out, const struct pgd_setting *s)
{
	char names[128], note[256];
	int col;

	put_names(s, names, sizeof(names));
	fputs(names, out);
	col = (int)strlen(names);
	if (col > HELP_COLUMN - 2) {
		fputc('\n', out);
		col = 0;
	}
	fprintf(out, "%*s", HELP_COLUMN - col, "");
	col = put_words(out, s->help, HELP_COLUMN);
	note[0] = '\0';
	if (s->type == PGD_T_STOP)
		snprintf(note, sizeof(note), "(repeatable, up to %lld)", s->hi);
	else if (s->def && pgd_setting_takes_arg(s))
		snprintf(note, sizeof(note), "(default %s)", s->def);
	else if (s->unset)
		snprintf(note, sizeof(note), "(default: %s)", s->unset);
	if (note[0])
		put_words(out, note, col);
	fputc('\n', out);
}

void pgd_settings_help(FILE *out)
{
	for (int g = 0; g < PGD_H_COUNT; g++) {
		fprintf(out, "%s\n", headings[g]);
		for (int i = 0; i < pgd_n_settings; i++)
			if (pgd_settings[i].group == (enum pgd_help_group)g)
				put_setting(out, &pgd_settings[i]);
	}
}
