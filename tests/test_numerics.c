/*
 * test_numerics.c - pagoda's llama.cpp numerics (forward.h) against
 * llama.cpp's logits on generated models, bit for bit.
 *
 * tests/data/llama-numerics.txt (tests/ref/gen-numerics-ref.py; format at
 * its top) names models by their gguf-gen options over the "tiny" preset:
 * Qwen2 with Q/K/V biases, NEOX RoPE and Q8_0 matrices; head size 128 with
 * 4 query heads per KV head; plain multi-head attention with an untied
 * output head.  For each, this writes the same model through ggufgen.h
 * (seeded, so the same bytes llama.cpp read), runs every stored sequence in
 * one batch with llama.cpp numerics, and requires each stored top-8 logit
 * (exact float32) to be equal, and the argmax to be llama.cpp's.  What the
 * default model cannot show (test_golden.c covers it) is shown here.
 *
 * tests/data/arch-numerics.txt (gen-numerics-ref.py --set arch) adds the
 * architectures that came later: Qwen3 (per-head Q/K RMSNorm, head size
 * 128 over a hidden size of 256), Llama with rope_freqs factors, Gemma
 * (GeGLU, scaled embeddings), Gemma 3 (post-norms, windows of 8 and 16
 * over sequences of 40 and 100, a global seventh block with its own RoPE
 * base), Gemma 2 (soft-caps), Phi-3 (fused Q/K/V and gate|up, half the
 * head rotated), and every weight type after the first
 * ones (Q5_0, Q5_1, Q2_K .. Q6_K, the Q4_K_M mix); its Q4_1 and Q8_0
 * models are held to llama.cpp's bits the same way.
 *
 * Both files are also run with pagoda's own numerics (the default), held
 * to llama.cpp within tolerances: the mean and largest |d logit| over the
 * stored top-8, and the same argmax except where llama.cpp's own top two
 * nearly tie.
 *
 * Exits 77 without AVX2 (the numerics reproduce llama.cpp's AVX2 build).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/forward.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"

#define TOP_K 8
#define MAX_SEQ 256

/*
 * pagoda's numerics against llama.cpp's logits (the stored ones are a few
 * units): measured mean |d| 1e-3 (F32) to 2e-2 (8-bit activations), largest
 * 0.09; other argmaxes only where llama.cpp's top two are within 0.1.
 */
#define NEAR_MEAN_TOL 0.05
#define NEAR_MAX_TOL 0.5
#define NEAR_TIE_TOL 0.1

static int parse_type(const char *s, enum pg_dtype *t)
{
	static const struct { const char *name; enum pg_dtype t; } types[] = {
		{ "f32", PG_F32 }, { "f16", PG_F16 }, { "bf16", PG_BF16 },
		{ "q8_0", PG_Q8_0 }, { "q4_0", PG_Q4_0 }, { "q4_1", PG_Q4_1 },
		{ "q5_0", PG_Q5_0 }, { "q5_1", PG_Q5_1 }, { "q2_k", PG_Q2_K },
		{ "q3_k", PG_Q3_K }, { "q4_k", PG_Q4_K }, { "q5_k", PG_Q5_K },
		{ "q6_k", PG_Q6_K }, { "q4_k_m", PG_Q4_K },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(s, types[i].name))
			return *t = types[i].t, 0;
	return -1;
}

/* "model NAME key value ...": gguf-gen's options over the tiny preset. */
static int parse_model(char *line, struct ggufgen_opts *o, char *name,
		       size_t name_len)
{
	char *save, *k = strtok_r(line, " \n", &save), *v;

	ggufgen_preset(o, "tiny");
	o->n_threads = 1;
	snprintf(name, name_len, "%s", strtok_r(NULL, " \n", &save));
	while ((k = strtok_r(NULL, " \n", &save)) &&
	       (v = strtok_r(NULL, " \n", &save))) {
		if (!strcmp(k, "arch"))
			o->arch = !strcmp(v, "qwen3") ? GGUFGEN_QWEN3 :
				  !strcmp(v, "qwen2") ? GGUFGEN_QWEN2 :
				  !strcmp(v, "gemma") ? GGUFGEN_GEMMA :
				  !strcmp(v, "gemma2") ? GGUFGEN_GEMMA2 :
				  !strcmp(v, "gemma3") ? GGUFGEN_GEMMA3 :
				  !strcmp(v, "phi3") ? GGUFGEN_PHI3 : GGUFGEN_LLAMA;
		else if (!strcmp(k, "rope_dim"))
			o->rope_dim = atoi(v);
		else if (!strcmp(k, "sliding_window"))
			o->sliding_window = atoi(v);
		else if (!strcmp(k, "attn_softcap"))
			o->attn_softcap = strtof(v, NULL);
		else if (!strcmp(k, "final_softcap"))
			o->final_softcap = strtof(v, NULL);
		else if (!strcmp(k, "head_dim"))
			o->head_dim = atoi(v);
		else if (!strcmp(k, "rope_freqs"))
			o->rope_freqs = atoi(v);
		else if (!strcmp(k, "blocks"))
			o->n_blocks = atoi(v);
		else if (!strcmp(k, "hidden"))
			o->hidden = atoi(v);
		else if (!strcmp(k, "heads"))
			o->n_heads = atoi(v);
		else if (!strcmp(k, "kv_heads"))
			o->n_kv_heads = atoi(v);
		else if (!strcmp(k, "ffn"))
			o->ffn = atoi(v);
		else if (!strcmp(k, "seed"))
			o->seed = strtoull(v, NULL, 10);
		else if (!strcmp(k, "untied"))
			o->untied = atoi(v);
		else if (!strcmp(k, "type") && !strcmp(v, "q4_k_m"))
			o->type = PG_Q4_K, o->mix_q4_k_m = 1;
		else if (!strcmp(k, "type") ? parse_type(v, &o->type) :
			 !strcmp(k, "embd_type") ? parse_type(v, &o->embd_type) : 1)
			return -1;
	}
	o->qkv_bias = o->arch == GGUFGEN_QWEN2;	/* as gguf-gen --arch does */
	return 0;
}

/*
 * How a file's logits are held: bit for bit with llama.cpp numerics, or,
 * with pagoda's own (the default), within tolerances: the mean and the
 * largest |pagoda - llama.cpp| over the stored top-8 logits, and the same
 * argmax except where llama.cpp's top two are within tie_tol.
 */
struct mode {
	enum pg_numerics numerics;
	double mean_tol, max_tol, tie_tol;	/* 0: bit for bit */
};

struct model_run {
	char name[64];
	struct mode mode;
	double sum_d, max_d;	/* |pagoda - llama.cpp| over stored logits */
	long n_d, near_ties;
	struct pg_model *m;
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	float *lg;		/* the current sequence's logits */
	int n_tok;
	long positions, exact, agree;
};

static int open_model(struct model_run *r, const struct ggufgen_opts *o)
{
	struct pg_forward_params fp = pg_forward_params_default();
	char path[] = "/tmp/pagoda-numerics-XXXXXX", err[512];
	int fd = mkstemp(path);

	if (fd < 0) {
		CHECK(0, "%s: mkstemp failed", r->name);
		return -1;
	}
	close(fd);
	fp.numerics = r->mode.numerics;
	fp.max_batch_tokens = MAX_SEQ;
	fp.n_pages = 64;
	if (ggufgen_write(o, path, err, sizeof(err)) ||
	    pg_model_load(path, 0, &r->m, err, sizeof(err)) ||
	    pg_forward_create(r->m, &fp, &r->fw, err, sizeof(err)) ||
	    !(r->kvc = pg_kvc_for_forward(r->fw, r->m))) {
		CHECK(0, "%s: %s", r->name, err);
		unlink(path);
		return -1;
	}
	unlink(path);		/* the model stays mapped */
	r->lg = xmalloc(sizeof(float) * MAX_SEQ * (size_t)r->m->hp.n_vocab);
	return 0;
}

static void close_model(struct model_run *r)
{
	double mean = r->n_d ? r->sum_d / (double)r->n_d : 0;

	if (r->mode.mean_tol > 0) {
		printf("%s, pagoda numerics: %ld positions, top-%d |d logit| mean %.2e max %.2e, argmax llama.cpp's at %ld (+%ld near-ties)\n",
		       r->name, r->positions, TOP_K, mean, r->max_d, r->agree,
		       r->near_ties);
		CHECK(r->positions > 0 && mean < r->mode.mean_tol &&
		      r->max_d < r->mode.max_tol &&
		      r->agree + r->near_ties == r->positions,
		      "%s: pagoda numerics too far from llama.cpp's logits (mean %.3g < %.3g, max %.3g < %.3g, %ld of %ld argmaxes)",
		      r->name, mean, r->mode.mean_tol, r->max_d, r->mode.max_tol,
		      r->agree, r->positions);
	} else {
		printf("%s: %ld positions, top-%d logits bit-identical at %ld, argmax llama.cpp's at %ld\n",
		       r->name, r->positions, TOP_K, r->exact, r->agree);
		CHECK(r->positions > 0 && r->exact == r->positions &&
		      r->agree == r->positions, "%s: not llama.cpp's logits", r->name);
	}
	pg_kvc_destroy(r->kvc);
	pg_forward_destroy(r->fw);
	pg_model_free(r->m);
	free(r->lg);
	*r = (struct model_run){ .mode = r->mode };
}

/* "seq n id ...": run it in one batch, every position's logits. */
static void run_seq(struct model_run *r, char *line)
{
	int32_t ids[MAX_SEQ];
	char *end;
	long n = strtol(line + 4, &end, 10);
	struct pg_kvc_seq *s;

	r->n_tok = 0;
	if (n < 1 || n > MAX_SEQ) {
		CHECK(0, "%s: bad seq line", r->name);
		return;
	}
	for (long i = 0; i < n; i++)
		ids[i] = (int32_t)strtol(end, &end, 10);
	s = pg_kvc_seq_new(r->kvc, 0);
	if (!s || pg_run_tokens(r->fw, r->kvc, s, ids, (int)n, 1, r->lg))
		CHECK(0, "%s: the forward pass failed", r->name);
	else
		r->n_tok = (int)n;
	pg_kvc_seq_free(r->kvc, s);
}

/* "pos i id:logit ...": llama.cpp's top-8 after token i. */
static void check_pos(struct model_run *r, char *line)
{
	char *end;
	long i = strtol(line + 4, &end, 10);
	int V = r->m->hp.n_vocab, same = 1, best = 0, am = 0, am_k = -1;
	float top[TOP_K];
	long ids[TOP_K];
	const float *row;

	if (i < 0 || i >= r->n_tok) {
		CHECK(0, "%s: pos %ld outside the sequence", r->name, i);
		return;
	}
	row = r->lg + (size_t)i * V;
	for (int k = 0; k < TOP_K; k++) {
		long id = strtol(end, &end, 10);
		float want;

		if (*end != ':' || id < 0 || id >= V) {
			CHECK(0, "%s: bad pos line %ld", r->name, i);
			return;
		}
		want = strtof(end + 1, &end);
		top[k] = want;
		ids[k] = id;
		r->sum_d += fabs((double)row[id] - want);
		r->max_d = fmax(r->max_d, fabs((double)row[id] - want));
		r->n_d++;
		if (row[id] != want) {
			if (same && r->mode.mean_tol == 0)
				fprintf(stderr, "%s, position %ld: token %ld: %.9g, llama.cpp %.9g\n",
					r->name, i, id, row[id], want);
			same = 0;
		}
		if (k == 0)
			best = (int)id;
	}
	for (int t = 0; t < V; t++)	/* the first highest, as ties go */
		if (row[t] > row[am])
			am = t;
	r->agree += am == best;
	for (int k = 0; k < TOP_K; k++)
		am_k = ids[k] == am ? k : am_k;
	/* another argmax where llama.cpp's own logits nearly tie */
	r->near_ties += am != best && am_k > 0 &&
			top[0] - top[am_k] < r->mode.tie_tol;
	r->exact += same;
	r->positions++;
}

/* Weights llama.cpp numerics reproduce (forward.h). */
static int llama_type(enum pg_dtype t)
{
	return t == PG_Q4_1 || t == PG_Q8_0;
}

/* Every model of one reference file, held as mode says. */
static void run_file(const char *path, struct mode mode)
{
	char *line = NULL;
	size_t cap = 0;
	struct model_run r = { .mode = mode };
	int live = 0;
	FILE *f = fopen(path, "r");

	if (!f) {
		CHECK(0, "cannot open %s", path);
		return;
	}
	while (getline(&line, &cap, f) > 0) {
		if (!strncmp(line, "model ", 6)) {
			struct ggufgen_opts o;

			if (parse_model(line, &o, r.name, sizeof(r.name))) {
				CHECK(0, "%s: bad model line", path);
				break;
			}
			if (mode.numerics == PG_NUMERICS_LLAMA_CPP &&
			    !(llama_type(o.type) && llama_type(o.embd_type))) {
				printf("%s: llama.cpp numerics take Q4_1 and Q8_0 only: pagoda's numerics only\n",
				       r.name);
				live = 0;
				continue;
			}
			live = !open_model(&r, &o);
		} else if (live && !strncmp(line, "seq ", 4)) {
			run_seq(&r, line);
		} else if (live && !strncmp(line, "pos ", 4)) {
			check_pos(&r, line);
		} else if (live && !strncmp(line, "end", 3)) {
			close_model(&r);
			live = 0;
		}
	}
	free(line);
	fclose(f);
	if (live)
		close_model(&r);
}

int main(void)
{
	const char *srcdir = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
	const struct mode exact = { PG_NUMERICS_LLAMA_CPP, 0, 0, 0 };
	/*
	 * pagoda's numerics sum in other orders than llama.cpp's, so 8-bit
	 * activations round differently now and then: logits move by
	 * hundredths on average, a few tenths at worst.
	 */
	const struct mode near = { PG_NUMERICS_PAGODA, NEAR_MEAN_TOL,
				   NEAR_MAX_TOL, NEAR_TIE_TOL };
	char path[4096];

	if (pg_cpu_isa_best() < PG_ISA_AVX2) {
		fprintf(stderr, "test_numerics: skipped: no AVX2 here, and llama.cpp's numerics are its AVX2 build's\n");
		return 77;
	}
	snprintf(path, sizeof(path), "%s/tests/data/llama-numerics.txt", srcdir);
	run_file(path, exact);
	run_file(path, near);
	snprintf(path, sizeof(path), "%s/tests/data/arch-numerics.txt", srcdir);
	run_file(path, exact);
	run_file(path, near);
	if (failures)
		fprintf(stderr, "test_numerics: %d failures\n", (int)failures);
	else
		printf("test_numerics: all passed\n");
	return failures ? 1 : 0;
}
