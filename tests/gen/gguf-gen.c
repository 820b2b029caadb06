/*
 * gguf-gen.c - the command that writes a random-weight Llama-shaped GGUF
 * file (tests/gen/ggufgen.h does the work).
 *
 * For tests and synthetic benchmarks only: the weights are noise, so the
 * model's text is noise too.  It is not a converter of real models.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/gen/ggufgen.h"

static const char usage[] =
"usage: gguf-gen --out FILE [options]\n"
"\n"
"Write a GGUF v3 file of a Llama-shaped model with random weights.\n"
"\n"
"  --out FILE          the file to write (required)\n"
"  --preset NAME       tiny (default), smollm2-135m, llama3-8b; the options\n"
"                      below change it, whatever their order\n"
"  --arch A            llama (default), qwen2 (Q/K/V biases on), qwen3\n"
"                      (per-head Q/K norms, explicit head size), gemma,\n"
"                      gemma2 or gemma3 (post-norms; these two need\n"
"                      --sliding-window), phi3 (fused attn_qkv, gate|up)\n"
"  --rope-dim N        rope.dimension_count: partial rotary (default: the\n"
"                      head size)\n"
"  --sliding-window N  write <arch>.attention.sliding_window\n"
"  --attn-softcap F    write <arch>.attn_logit_softcapping (Gemma 2)\n"
"  --final-softcap F   write <arch>.final_logit_softcapping (Gemma 2)\n"
"  --head-dim N        head size (default hidden / heads)\n"
"  --rope-freqs        llama: write rope_freqs.weight (Llama 3.1+ factors)\n"
"  --blocks N          transformer blocks\n"
"  --hidden N          embedding length (head_dim = hidden / heads)\n"
"  --heads N           attention heads\n"
"  --kv-heads N        key/value heads (divides heads)\n"
"  --ffn N             feed-forward length\n"
"  --vocab N           vocabulary size (built-in vocabulary, >= 259)\n"
"  --vocab-from FILE   copy the tokenizer.* keys of this GGUF instead\n"
"  --ctx N             context length\n"
"  --rope-base F       RoPE frequency base\n"
"  --rms-eps F         RMSNorm epsilon\n"
"  --type T            f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k\n"
"                      q4_k q5_k q6_k (the matrices), or q4_k_m: Q4_K with\n"
"                      attn_v, ffn_down, output Q6_K, Q5_0 where rows are\n"
"                      not whole 256-blocks (llama.cpp's Q4_K_M mix)\n"
"  --embd-type T       token embedding: the --type or q8_0\n"
"  --untied            write output.weight (default: tied to token_embd)\n"
"  --vocab-only        write the metadata and vocabulary only, no tensors\n"
"  --tied              no output.weight\n"
"  --bias, --no-bias   Q/K/V biases on or off\n"
"  --seed S            the seed of the weights (default 1)\n"
"  --threads N         threads drawing weights (default: all CPUs; the\n"
"                      file is the same whatever N)\n"
"  --name S            general.name\n"
"  --quiet             print nothing on success\n"
"  --help              this text\n";

enum {
	OPT_OUT = 256, OPT_PRESET, OPT_ARCH, OPT_BLOCKS, OPT_HIDDEN, OPT_HEADS,
	OPT_HEAD_DIM, OPT_ROPE_FREQS, OPT_SLIDING_WINDOW, OPT_ATTN_SOFTCAP,
	OPT_FINAL_SOFTCAP, OPT_ROPE_DIM,
	OPT_KV_HEADS, OPT_FFN, OPT_VOCAB, OPT_VOCAB_FROM, OPT_CTX,
	OPT_ROPE_BASE, OPT_RMS_EPS, OPT_TYPE, OPT_EMBD_TYPE, OPT_UNTIED, OPT_VOCAB_ONLY,
	OPT_TIED, OPT_BIAS, OPT_NO_BIAS, OPT_SEED, OPT_THREADS, OPT_NAME,
	OPT_QUIET, OPT_HELP,
};

static const struct option longopts[] = {
	{ "out", required_argument, NULL, OPT_OUT },
	{ "preset", required_argument, NULL, OPT_PRESET },
	{ "arch", required_argument, NULL, OPT_ARCH },
	{ "blocks", required_argument, NULL, OPT_BLOCKS },
	{ "hidden", required_argument, NULL, OPT_HIDDEN },
	{ "head-dim", required_argument, NULL, OPT_HEAD_DIM },
	{ "rope-freqs", no_argument, NULL, OPT_ROPE_FREQS },
	{ "sliding-window", required_argument, NULL, OPT_SLIDING_WINDOW },
	{ "rope-dim", required_argument, NULL, OPT_ROPE_DIM },
	{ "attn-softcap", required_argument, NULL, OPT_ATTN_SOFTCAP },
	{ "final-softcap", required_argument, NULL, OPT_FINAL_SOFTCAP },
	{ "heads", required_argument, NULL, OPT_HEADS },
	{ "kv-heads", required_argument, NULL, OPT_KV_HEADS },
	{ "ffn", required_argument, NULL, OPT_FFN },
	{ "vocab", required_argument, NULL, OPT_VOCAB },
	{ "vocab-from", required_argument, NULL, OPT_VOCAB_FROM },
	{ "ctx", required_argument, NULL, OPT_CTX },
	{ "rope-base", required_argument, NULL, OPT_ROPE_BASE },
	{ "rms-eps", required_argument, NULL, OPT_RMS_EPS },
	{ "type", required_argument, NULL, OPT_TYPE },
	{ "embd-type", required_argument, NULL, OPT_EMBD_TYPE },
	{ "untied", no_argument, NULL, OPT_UNTIED },
	{ "vocab-only", no_argument, NULL, OPT_VOCAB_ONLY },
	{ "tied", no_argument, NULL, OPT_TIED },
	{ "bias", no_argument, NULL, OPT_BIAS },
	{ "no-bias", no_argument, NULL, OPT_NO_BIAS },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "name", required_argument, NULL, OPT_NAME },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static void die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gguf-gen: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

static int parse_int(const char *opt, const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > INT_MAX)
		die("--%s: '%s' is not a positive integer", opt, s);
	return (int)v;
}

static float parse_float(const char *opt, const char *s)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end || !(v > 0.0f))
		die("--%s: '%s' is not a positive number", opt, s);
	return v;
}

static uint64_t parse_u64(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-')
		die("--%s: '%s' is not an unsigned integer", opt, s);
	return v;
}

static enum pg_dtype parse_type(const char *opt, const char *s)
{
	static const struct { const char *name; enum pg_dtype t; } types[] = {
		{ "f32", PG_F32 }, { "f16", PG_F16 }, { "bf16", PG_BF16 },
		{ "q8_0", PG_Q8_0 }, { "q4_0", PG_Q4_0 }, { "q4_1", PG_Q4_1 },
		{ "q5_0", PG_Q5_0 }, { "q5_1", PG_Q5_1 }, { "q2_k", PG_Q2_K },
		{ "q3_k", PG_Q3_K }, { "q4_k", PG_Q4_K }, { "q5_k", PG_Q5_K },
		{ "q6_k", PG_Q6_K },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcasecmp(s, types[i].name))
			return types[i].t;
	die("--%s: '%s' is not one of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k%s",
	    opt, s, strcmp(opt, "type") ? "" : " q4_k_m");
}

/* preset_first - apply --preset (the last one given) before the rest. */
static void preset_first(int argc, char **argv, struct ggufgen_opts *o)
{
	const char *name = "tiny";
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		if (c == OPT_PRESET)
			name = optarg;
	opterr = 1;
	optind = 1;
	if (ggufgen_preset(o, name))
		die("--preset: '%s' is not one of tiny smollm2-135m llama3-8b",
		    name);
}

struct cli {
	struct ggufgen_opts o;
	const char *out;
	int embd_set, bias_set, quiet;
};

static void apply(struct cli *c, int opt, const char *arg)
{
	const char *n = NULL;

	for (const struct option *l = longopts; l->name; l++)
		if (l->val == opt)
			n = l->name;
	switch (opt) {
	case OPT_OUT: c->out = arg; break;
	case OPT_PRESET: break;
	case OPT_ARCH:
		if (!strcmp(arg, "llama"))
			c->o.arch = GGUFGEN_LLAMA;
		else if (!strcmp(arg, "qwen2"))
			c->o.arch = GGUFGEN_QWEN2;
		else if (!strcmp(arg, "qwen3"))
			c->o.arch = GGUFGEN_QWEN3;
		else if (!strcmp(arg, "gemma"))
			c->o.arch = GGUFGEN_GEMMA;
		else if (!strcmp(arg, "gemma2"))
			c->o.arch = GGUFGEN_GEMMA2;
		else if (!strcmp(arg, "gemma3"))
			c->o.arch = GGUFGEN_GEMMA3;
		else if (!strcmp(arg, "phi3"))
			c->o.arch = GGUFGEN_PHI3;
		else
			die("--arch: '%s' is not llama, qwen2, qwen3, gemma, gemma2, gemma3 or phi3", arg);
		break;
	case OPT_SLIDING_WINDOW: c->o.sliding_window = parse_int(n, arg); break;
	case OPT_ROPE_DIM: c->o.rope_dim = parse_int(n, arg); break;
	case OPT_ATTN_SOFTCAP: c->o.attn_softcap = parse_float(n, arg); break;
	case OPT_FINAL_SOFTCAP: c->o.final_softcap = parse_float(n, arg); break;
	case OPT_BLOCKS: c->o.n_blocks = parse_int(n, arg); break;
	case OPT_HIDDEN: c->o.hidden = parse_int(n, arg); break;
	case OPT_HEAD_DIM: c->o.head_dim = parse_int(n, arg); break;
	case OPT_ROPE_FREQS: c->o.rope_freqs = 1; break;
	case OPT_HEADS: c->o.n_heads = parse_int(n, arg); break;
	case OPT_KV_HEADS: c->o.n_kv_heads = parse_int(n, arg); break;
	case OPT_FFN: c->o.ffn = parse_int(n, arg); break;
	case OPT_VOCAB: c->o.n_vocab = parse_int(n, arg); break;
	case OPT_VOCAB_FROM: c->o.vocab_from = arg; break;
	case OPT_CTX: c->o.n_ctx = parse_int(n, arg); break;
	case OPT_ROPE_BASE: c->o.rope_freq_base = parse_float(n, arg); break;
	case OPT_RMS_EPS: c->o.rms_eps = parse_float(n, arg); break;
	case OPT_TYPE:
		c->o.mix_q4_k_m = !strcasecmp(arg, "q4_k_m");
		c->o.type = c->o.mix_q4_k_m ? PG_Q4_K : parse_type(n, arg);
		break;
	case OPT_EMBD_TYPE:
		c->o.embd_type = parse_type(n, arg);
		c->embd_set = 1;
		break;
	case OPT_UNTIED: c->o.untied = 1; break;
	case OPT_VOCAB_ONLY: c->o.vocab_only = 1; break;
	case OPT_TIED: c->o.untied = 0; break;
	case OPT_BIAS: c->o.qkv_bias = 1; c->bias_set = 1; break;
	case OPT_NO_BIAS: c->o.qkv_bias = 0; c->bias_set = 1; break;
	case OPT_SEED: c->o.seed = parse_u64(n, arg); break;
	case OPT_THREADS: c->o.n_threads = parse_int(n, arg); break;
	case OPT_NAME: c->o.name = arg; break;
	case OPT_QUIET: c->quiet = 1; break;
	}
}

static void parse(int argc, char **argv, struct cli *c)
{
	int opt, type_set = 0;

	preset_first(argc, argv, &c->o);
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (opt == OPT_HELP) {
			fputs(usage, stdout);
			exit(0);
		}
		if (opt == '?')
			die("try --help");
		type_set |= opt == OPT_TYPE;
		apply(c, opt, optarg);
	}
	if (optind < argc)
		die("unexpected argument '%s'", argv[optind]);
	if (!c->out)
		die("--out FILE is required (see --help)");
	if (type_set && !c->embd_set)
		c->o.embd_type = c->o.type;
	if (!c->bias_set)
		c->o.qkv_bias = c->o.arch == GGUFGEN_QWEN2;
}

int main(int argc, char **argv)
{
	struct cli c = { 0 };
	struct timespec a, b;
	struct stat st;
	char err[512];
	double s;

	parse(argc, argv, &c);
	clock_gettime(CLOCK_MONOTONIC, &a);
	if (ggufgen_write(&c.o, c.out, err, sizeof(err)) < 0)
		die("%s", err);
	clock_gettime(CLOCK_MONOTONIC, &b);
	s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	if (!c.quiet && c.o.vocab_only && !stat(c.out, &st))
		printf("%s: vocabulary only, %.1f kB\n", c.out, st.st_size / 1e3);
	else if (!c.quiet && !stat(c.out, &st))
		printf("%s: %d blocks, hidden %d, %s, %.1f MB in %.2f s (%.0f MB/s)\n",
		       c.out, c.o.n_blocks, c.o.hidden,
		       c.o.mix_q4_k_m ? "Q4_K_M mix" : pg_dtype_name(c.o.type),
		       st.st_size / 1e6, s,
		       st.st_size / 1e6 / (s > 0 ? s : 1e-9));
	return 0;
}
