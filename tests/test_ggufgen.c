/*
 * test_ggufgen.c - the GGUF generator's files read back through gguf_open.
 *
 * For each weight type a tiny model is written to a temporary file and
 * opened with the engine's reader: keys, tensor names, shapes, types and
 * alignment must be as asked, and every row, dequantised, must match the
 * generator's values within the type's rounding.  Also: the in-memory
 * writer gives the same bytes, a copied vocabulary equals its source, and
 * bad options are refused with a message.  Exits 0 or 1.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "kernels/cpu/cpu.h"
#include "tests/gen/ggufgen.h"

static int failures;

#define CHECK(cond)							\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "%s:%d: check failed: %s\n",	\
				__FILE__, __LINE__, #cond);		\
			failures++;					\
		}							\
	} while (0)

/* tmp_path - a fresh temporary file name in $TMPDIR (or /tmp). */
static void tmp_path(char *buf, size_t len)
{
	const char *dir = getenv("TMPDIR");
	int fd;

	snprintf(buf, len, "%s/ggufgen-XXXXXX", dir && *dir ? dir : "/tmp");
	fd = mkstemp(buf);
	if (fd < 0) {
		perror("mkstemp");
		exit(1);
	}
	close(fd);
}

static void tiny(struct ggufgen_opts *o, enum pg_dtype type)
{
	ggufgen_preset(o, "tiny");
	o->hidden = 64;
	o->ffn = 96;
	o->n_vocab = 300;
	o->n_ctx = 128;
	o->type = type;
	o->embd_type = type;
	o->seed = 12345;
}

/* block_tol - the largest error the type's rounding allows in a block. */
static float block_tol(enum pg_dtype type, const float *x, int n)
{
	float amax = 0.0f, mn = x[0], mx = x[0];

	for (int i = 0; i < n; i++) {
		amax = fmaxf(amax, fabsf(x[i]));
		mn = fminf(mn, x[i]);
		mx = fmaxf(mx, x[i]);
	}
	switch (type) {
	case PG_F32: return 0.0f;
	case PG_F16: return amax * 0x1p-11f + 1e-7f;
	case PG_BF16: return amax * 0x1p-8f;
	case PG_Q8_0: return amax * (0.5f / 127.0f + 2e-3f);
	case PG_Q4_0: return amax * (1.0f / 8.0f + 2e-3f);
	case PG_Q4_1: return (mx - mn) * (0.5f / 15.0f + 2e-3f) +
			     fabsf(mn) * 2e-3f;
	/*
	 * Q5 and the K-quants (simple scales, kernels/cpu/quant.c): the
	 * symmetric ones map the value of largest magnitude to -qlo (a step
	 * amax / qlo) and clamp the other side's at qlo - 1, one step off at
	 * most; the ones with a minimum err by half a step of their range
	 * (at most 2 amax over qmax), 0.6 with the scales' rounding.
	 */
	case PG_Q5_0: return amax * (1.1f / 16.0f);
	case PG_Q3_K: return amax * (1.1f / 4.0f);
	case PG_Q6_K: return amax * (1.1f / 32.0f);
	case PG_Q5_1: return (mx - mn) * (0.6f / 31.0f);
	case PG_Q2_K: return amax * (1.2f / 3.0f);
	case PG_Q4_K: return amax * (1.2f / 15.0f);
	case PG_Q5_K: return amax * (1.2f / 31.0f);
	default: return 0.0f;
	}
}

/* rows_match - every row of t, dequantised, against the generator's. */
static int rows_match(const struct ggufgen_opts *o,
		      const struct gguf_tensor *t, const char *name)
{
	size_t row_bytes = pg_dtype_row_bytes(t->type, t->ne[0]);
	float *want = malloc(t->ne[0] * sizeof(float));
	float *got = malloc(t->ne[0] * sizeof(float));
	int ok = 1;

	for (uint64_t r = 0; r < t->ne[1] && ok; r++) {
		const char *src = (const char *)t->data + r * row_bytes;

		ok = ggufgen_row(o, name, r, want) == 0;
		pg_dequantize_row(t->type, src, got, (int64_t)t->ne[0]);
		for (uint64_t b = 0; b < t->ne[0] && ok; b += 32) {
			int n = t->ne[0] - b < 32 ? (int)(t->ne[0] - b) : 32;
			float tol = block_tol(t->type, want + b, n);

			for (int i = 0; i < n; i++)
				if (!(fabsf(got[b + i] - want[b + i]) <= tol)) {
					fprintf(stderr, "%s row %llu col %llu: "
						"%g, want %g (tol %g)\n", name,
						(unsigned long long)r,
						(unsigned long long)(b + i),
						got[b + i], want[b + i], tol);
					ok = 0;
					break;
				}
		}
	}
	free(want);
	free(got);
	return ok;
}

static int check_tensor(const struct ggufgen_opts *o,
			const struct gguf_tensor *t)
{
	char name[128];
	uint64_t ne0, ne1;
	enum pg_dtype type;

	snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
	if (ggufgen_tensor_shape(o, name, &ne0, &ne1, &type)) {
		fprintf(stderr, "unexpected tensor %s\n", name);
		return 0;
	}
	if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->type != type ||
	    t->n_dims != (ne1 > 1 ? 2u : 1u) || (uintptr_t)t->data % 32) {
		fprintf(stderr, "tensor %s: shape, type or alignment wrong\n",
			name);
		return 0;
	}
	return rows_match(o, t, name);
}

static int key_u32(const struct gguf_file *f, const char *arch,
		   const char *key, uint32_t want)
{
	char k[128];
	uint32_t v = 0;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	if (gguf_get_u32(f, k, &v) || v != want) {
		fprintf(stderr, "%s: %u, want %u\n", k, v, want);
		return 0;
	}
	return 1;
}

static int key_f32(const struct gguf_file *f, const char *arch,
		   const char *key, float want)
{
	char k[128];
	float v = 0.0f;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	return !gguf_get_f32(f, k, &v) && v == want;
}

static int str_is(const struct gguf_file *f, const char *key,
		  const char *want)
{
	struct gguf_str s;

	return !gguf_get_str(f, key, &s) && gguf_str_eq(s, want);
}

static void check_keys(const struct ggufgen_opts *o,
		       const struct gguf_file *f)
{
	const char *a = o->arch == GGUFGEN_QWEN2 ? "qwen2" : "llama";
	uint32_t align = 0;

	CHECK(gguf_version(f) == 3);
	CHECK(str_is(f, "general.architecture", a));
	CHECK(!gguf_get_u32(f, "general.alignment", &align) && align == 32);
	CHECK(key_u32(f, a, "block_count", (uint32_t)o->n_blocks));
	CHECK(key_u32(f, a, "embedding_length", (uint32_t)o->hidden));
	CHECK(key_u32(f, a, "feed_forward_length", (uint32_t)o->ffn));
	CHECK(key_u32(f, a, "context_length", (uint32_t)o->n_ctx));
	CHECK(key_u32(f, a, "attention.head_count", (uint32_t)o->n_heads));
	CHECK(key_u32(f, a, "attention.head_count_kv",
		      (uint32_t)o->n_kv_heads));
	CHECK(key_u32(f, a, "rope.dimension_count",
		      (uint32_t)(o->hidden / o->n_heads)));
	CHECK(key_f32(f, a, "rope.freq_base", o->rope_freq_base));
	CHECK(key_f32(f, a, "attention.layer_norm_rms_epsilon", o->rms_eps));
}

static void check_vocab(const struct gguf_file *f, int n_vocab)
{
	enum gguf_type et;
	uint64_t n = 0;
	struct gguf_str s;
	const int32_t *tt;

	CHECK(str_is(f, "tokenizer.ggml.model", "gpt2"));
	CHECK(str_is(f, "tokenizer.ggml.pre", "smollm"));
	CHECK(!gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n) &&
	      et == GGUF_STRING && n == (uint64_t)n_vocab);
	CHECK(!gguf_get_arr_str(f, "tokenizer.ggml.tokens", 2, &s) &&
	      gguf_str_eq(s, "<|im_end|>"));
	CHECK(!gguf_get_arr_str(f, "tokenizer.ggml.tokens", 3 + ' ', &s) &&
	      gguf_str_eq(s, "\xc4\xa0"));	/* "Ġ", GPT-2's space */
	CHECK(!gguf_get_arr_str(f, "tokenizer.ggml.tokens", 3 + 'a', &s) &&
	      gguf_str_eq(s, "a"));
	CHECK(!gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n) &&
	      n == (uint64_t)(n_vocab - GGUFGEN_MIN_VOCAB));
	CHECK(!gguf_get_arr_str(f, "tokenizer.ggml.merges", 0, &s) &&
	      gguf_str_eq(s, "\xc4\xa0 a"));
	CHECK(!gguf_get_arr_str(f, "tokenizer.ggml.merges", 26, &s) &&
	      gguf_str_eq(s, "a a"));
	tt = gguf_get_arr_data(f, "tokenizer.ggml.token_type");
	CHECK(tt && tt[1] == 3 && tt[100] == 1);
}

static int n_tensors_expected(const struct ggufgen_opts *o)
{
	return 2 + o->n_blocks * (9 + 3 * !!o->qkv_bias) + !!o->untied;
}

/* check_model - write o to a file, read it back, check all of it. */
static void check_model(const struct ggufgen_opts *o, const char *what)
{
	char path[256], err[256] = "";
	struct gguf_file *f = NULL;
	int bad = failures;

	tmp_path(path, sizeof(path));
	CHECK(ggufgen_write(o, path, err, sizeof(err)) == 0);
	if (gguf_open(path, &f, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", what, err);
		failures++;
		unlink(path);
		return;
	}
	check_keys(o, f);
	check_vocab(f, o->n_vocab);
	CHECK(gguf_n_tensors(f) == (uint64_t)n_tensors_expected(o));
	CHECK(gguf_find_tensor(f, "blk.1.ffn_down.weight") != NULL);
	CHECK(!gguf_find_tensor(f, "output.weight") == !o->untied);
	CHECK(!gguf_find_tensor(f, "blk.0.attn_k.bias") == !o->qkv_bias);
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++)
		CHECK(check_tensor(o, gguf_tensor_at(f, i)));
	gguf_close(f);
	unlink(path);
	printf("%-36s %s\n", what, failures == bad ? "ok" : "FAILED");
}

static const enum pg_dtype ktypes[] = {
	PG_Q5_0, PG_Q5_1, PG_Q2_K, PG_Q3_K, PG_Q4_K, PG_Q5_K, PG_Q6_K,
};

static void test_types(void)
{
	static const enum pg_dtype types[] = {
		PG_F32, PG_F16, PG_BF16, PG_Q8_0, PG_Q4_0, PG_Q4_1,
	};
	struct ggufgen_opts o;
	char what[64];

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		tiny(&o, types[i]);
		o.untied = i % 2;
		snprintf(what, sizeof(what), "llama %s%s",
			 pg_dtype_name(types[i]), o.untied ? " untied" : "");
		check_model(&o, what);
	}
	tiny(&o, PG_Q4_1);
	o.embd_type = PG_Q8_0;
	check_model(&o, "llama Q4_1, Q8_0 embedding");
	tiny(&o, PG_Q4_0);
	o.arch = GGUFGEN_QWEN2;
	o.qkv_bias = 1;
	check_model(&o, "qwen2 Q4_0 with biases");
	for (size_t i = 0; i < sizeof(ktypes) / sizeof(ktypes[0]); i++) {
		tiny(&o, ktypes[i]);
		o.hidden = o.ffn = 256;	/* whole 256-blocks for the K-quants */
		o.untied = 1;
		snprintf(what, sizeof(what), "llama %s untied",
			 pg_dtype_name(ktypes[i]));
		check_model(&o, what);
	}
	/* the Q4_K_M mix: ffn_down, 320 wide, takes Q5_0, attn_v and
	 * output Q6_K, the rest Q4_K, the embedding Q8_0 */
	tiny(&o, PG_Q4_K);
	o.mix_q4_k_m = 1;
	o.hidden = 256;
	o.ffn = 320;
	o.untied = 1;
	o.embd_type = PG_Q8_0;
	check_model(&o, "llama Q4_K_M mix");
	{
		uint64_t ne0, ne1;
		enum pg_dtype t[5];

		ggufgen_tensor_shape(&o, "blk.0.attn_q.weight", &ne0, &ne1, &t[0]);
		ggufgen_tensor_shape(&o, "blk.0.attn_v.weight", &ne0, &ne1,
				     &t[1]);
		ggufgen_tensor_shape(&o, "blk.0.ffn_down.weight", &ne0, &ne1,
				     &t[2]);
		ggufgen_tensor_shape(&o, "token_embd.weight", &ne0, &ne1, &t[3]);
		ggufgen_tensor_shape(&o, "output.weight", &ne0, &ne1, &t[4]);
		CHECK(t[0] == PG_Q4_K && t[1] == PG_Q6_K && t[2] == PG_Q5_0 &&
		      t[3] == PG_Q8_0 && t[4] == PG_Q6_K);
	}
}

/* read_file - the whole file into a malloc'd buffer. */
static void *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	void *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/*
 * the in-memory writer gives the same bytes, whatever the number of
 * threads (the model is large enough for batches to be split), and they
 * open
 */
static void test_mem(void)
{
	struct ggufgen_opts o;
	char path[256], err[256];
	void *mem = NULL, *disk;
	size_t mem_len = 0, disk_len = 0;
	struct gguf_file *f = NULL;

	tiny(&o, PG_Q8_0);
	o.hidden = 256;
	o.ffn = 512;
	o.n_vocab = 1000;
	o.n_threads = 1;
	tmp_path(path, sizeof(path));
	CHECK(ggufgen_write(&o, path, err, sizeof(err)) == 0);
	o.n_threads = 5;
	CHECK(ggufgen_write_mem(&o, &mem, &mem_len, err, sizeof(err)) == 0);
	disk = read_file(path, &disk_len);
	CHECK(disk && mem && disk_len == mem_len &&
	      !memcmp(disk, mem, mem_len));
	CHECK(gguf_open_mem(mem, mem_len, "mem", &f, err, sizeof(err)) == 0);
	gguf_close(f);
	free(disk);
	free(mem);
	unlink(path);
}

/* a vocabulary copied from another file is the same, key for key */
static void test_vocab_from(void)
{
	struct ggufgen_opts a, b;
	char pa[256], pb[256], err[256];
	struct gguf_file *fa = NULL, *fb = NULL;
	struct gguf_str sa, sb;
	uint64_t n_keys = 0;
	const char *tk = "tokenizer.ggml.tokens";

	tiny(&a, PG_F16);
	a.n_vocab = 1000;
	tmp_path(pa, sizeof(pa));
	tmp_path(pb, sizeof(pb));
	CHECK(ggufgen_write(&a, pa, err, sizeof(err)) == 0);
	tiny(&b, PG_Q4_1);
	b.vocab_from = pa;
	b.n_vocab = 0;
	CHECK(ggufgen_write(&b, pb, err, sizeof(err)) == 0);
	CHECK(gguf_open(pa, &fa, err, sizeof(err)) == 0);
	CHECK(gguf_open(pb, &fb, err, sizeof(err)) == 0);
	if (fa && fb) {
		for (uint64_t i = 0; i < gguf_n_keys(fa); i++) {
			struct gguf_str k = gguf_key_name(fa, i);
			char key[128];

			if (k.len < 10 || memcmp(k.ptr, "tokenizer.", 10))
				continue;
			snprintf(key, sizeof(key), "%.*s", (int)k.len, k.ptr);
			CHECK(gguf_find_key(fb, key) >= 0);
			n_keys++;
		}
		CHECK(n_keys >= 10);
		CHECK(!gguf_get_arr_str(fa, tk, 999, &sa) &&
		      !gguf_get_arr_str(fb, tk, 999, &sb) &&
		      sa.len == sb.len && !memcmp(sa.ptr, sb.ptr, sa.len));
		CHECK(!gguf_get_str(fa, "tokenizer.chat_template", &sa) &&
		      !gguf_get_str(fb, "tokenizer.chat_template", &sb) &&
		      sa.len == sb.len && !memcmp(sa.ptr, sb.ptr, sa.len));
		CHECK(gguf_find_tensor(fb, "token_embd.weight")->ne[1] == 1000);
	}
	gguf_close(fa);
	gguf_close(fb);
	unlink(pa);
	unlink(pb);
}

static void expect_refused(const struct ggufgen_opts *o, const char *word)
{
	char err[256] = "", path[256];

	tmp_path(path, sizeof(path));
	CHECK(ggufgen_write(o, path, err, sizeof(err)) == -EINVAL);
	if (!strstr(err, word)) {
		fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, word);
		failures++;
	}
	CHECK(access(path, F_OK) != 0);	/* removed on failure */
}

static void test_refused(void)
{
	struct ggufgen_opts o;

	tiny(&o, PG_F32); o.n_heads = 5; expect_refused(&o, "heads");
	tiny(&o, PG_F32); o.n_kv_heads = 3; expect_refused(&o, "kv-heads");
	tiny(&o, PG_Q4_0); o.ffn = 100; expect_refused(&o, "multiples of 32");
	tiny(&o, PG_Q4_K); expect_refused(&o, "of 256 for Q4_K");
	tiny(&o, PG_Q4_0); o.mix_q4_k_m = 1; expect_refused(&o, "Q4_K_M");
	tiny(&o, PG_F32); o.n_vocab = 100; expect_refused(&o, "vocab");
	tiny(&o, PG_F16); o.embd_type = PG_Q4_0;
	expect_refused(&o, "embd_type");
	tiny(&o, PG_F32); o.vocab_from = "/nonexistent/x.gguf";
	CHECK(ggufgen_write(&o, "/nonexistent-dir/y.gguf", NULL, 0) < 0);
}

int main(void)
{
	test_types();
	test_mem();
	test_vocab_from();
	test_refused();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ggufgen: all checks passed\n");
	return 0;
}
