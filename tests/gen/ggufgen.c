/*
 * ggufgen.c - the writer of random-weight Llama-shaped GGUF v3 files.
 *
 * The metadata (a few MB at most, even with a 128k vocabulary) is built in
 * memory first, because the header must give its key count; the tensor
 * data is then streamed row by row through a buffered FILE, each row drawn
 * from its own seeded stream and converted with pg_quantize_row().  This is
 * not a GGUF reader (that is daemon/engine/gguf.c, used here only to copy
 * a vocabulary) and knows nothing of running a model.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "kernels/cpu/cpu.h"
#include "tests/gen/ggufgen.h"

#define ALIGNMENT 32
#define MAX_NAME 64

/* ---- messages ---- */

static int fail(char *err, size_t err_len, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t err_len, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* ---- presets and checks ---- */

static void preset_tiny(struct ggufgen_opts *o)
{
	o->n_blocks = 2;
	o->hidden = 64;
	o->n_heads = 4;
	o->n_kv_heads = 2;
	o->ffn = 128;
	o->n_vocab = 384;
	o->n_ctx = 256;
	o->rope_freq_base = 10000.0f;
	o->type = PG_F32;
	o->embd_type = PG_F32;
}

static void preset_smollm2(struct ggufgen_opts *o)
{
	o->n_blocks = 30;
	o->hidden = 576;
	o->n_heads = 9;
	o->n_kv_heads = 3;
	o->ffn = 1536;
	o->n_vocab = 49152;
	o->n_ctx = 8192;
	o->rope_freq_base = 100000.0f;
	o->type = PG_Q4_1;
	o->embd_type = PG_Q8_0;
}

static void preset_llama3_8b(struct ggufgen_opts *o)
{
	o->n_blocks = 32;
	o->hidden = 4096;
	o->n_heads = 32;
	o->n_kv_heads = 8;
	o->ffn = 14336;
	o->n_vocab = 128256;
	o->n_ctx = 8192;
	o->rope_freq_base = 500000.0f;
	o->untied = 1;
	o->type = PG_BF16;
	o->embd_type = PG_BF16;
}

int ggufgen_preset(struct ggufgen_opts *o, const char *name)
{
	memset(o, 0, sizeof(*o));
	o->arch = GGUFGEN_LLAMA;
	o->rms_eps = 1e-5f;
	o->seed = 1;
	if (!strcmp(name, "tiny"))
		preset_tiny(o);
	else if (!strcmp(name, "smollm2-135m"))
		preset_smollm2(o);
	else if (!strcmp(name, "llama3-8b"))
		preset_llama3_8b(o);
	else
		return -EINVAL;
	return 0;
}

/* gen_head_dim - the head size the options describe. */
static int gen_head_dim(const struct ggufgen_opts *o)
{
	return o->head_dim ? o->head_dim :
	       o->n_heads ? o->hidden / o->n_heads : 0;
}

static int type_ok(enum pg_dtype t)
{
	return t == PG_F32 || t == PG_F16 || t == PG_BF16 || t == PG_Q8_0 ||
	       t == PG_Q4_0 || t == PG_Q4_1 || t == PG_Q5_0 || t == PG_Q5_1 ||
	       t == PG_Q2_K || t == PG_Q3_K || t == PG_Q4_K || t == PG_Q5_K ||
	       t == PG_Q6_K;
}

/*
 * The type of a matrix with rows of ne0 values: `type`, or in the Q4_K_M
 * mix Q6_K for attn_v, ffn_down and output (six true) and Q4_K for the
 * rest, Q5_0 where ne0 is not a whole number of 256-blocks.
 */
static enum pg_dtype mat_type(const struct ggufgen_opts *o, uint64_t ne0,
			      int six)
{
	if (!o->mix_q4_k_m)
		return o->type;
	if (ne0 % PG_QK_K)
		return PG_Q5_0;
	return six ? PG_Q6_K : PG_Q4_K;
}

static int check_types(const struct ggufgen_opts *o, char *err,
		       size_t err_len)
{
	int bs = o->mix_q4_k_m ? PG_QK : pg_dtype_block_size(o->type);

	if (!type_ok(o->type))
		return fail(err, err_len, -EINVAL,
			    "type must be one of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k (or the q4_k_m mix)");
	if (o->mix_q4_k_m && o->type != PG_Q4_K)
		return fail(err, err_len, -EINVAL,
			    "the Q4_K_M mix needs type q4_k");
	if (o->embd_type != o->type && o->embd_type != PG_Q8_0)
		return fail(err, err_len, -EINVAL,
			    "embd_type must be the weight type or q8_0");
	if (o->hidden % bs || o->ffn % bs)
		return fail(err, err_len, -EINVAL,
			    "hidden (%d) and ffn (%d) must be multiples of %d for %s",
			    o->hidden, o->ffn, bs, pg_dtype_name(o->type));
	if (o->hidden % pg_dtype_block_size(o->embd_type))
		return fail(err, err_len, -EINVAL,
			    "hidden (%d) must be a multiple of 32 for a %s embedding",
			    o->hidden, pg_dtype_name(o->embd_type));
	return 0;
}

int ggufgen_check(const struct ggufgen_opts *o, char *err, size_t err_len)
{
	if (o->n_blocks < 1 || o->hidden < 1 || o->ffn < 1 || o->n_ctx < 1)
		return fail(err, err_len, -EINVAL,
			    "blocks, hidden, ffn and ctx must be >= 1");
	if (o->n_heads < 1 || (!o->head_dim && o->hidden % o->n_heads))
		return fail(err, err_len, -EINVAL,
			    "heads (%d) must divide hidden (%d)", o->n_heads,
			    o->hidden);
	if (o->head_dim < 0 || gen_head_dim(o) % 2 || gen_head_dim(o) < 2)
		return fail(err, err_len, -EINVAL,
			    "head_dim (%d) must be even for RoPE",
			    gen_head_dim(o));
	if ((o->n_heads * gen_head_dim(o)) %
	    (o->mix_q4_k_m ? PG_QK : pg_dtype_block_size(o->type)))
		return fail(err, err_len, -EINVAL,
			    "heads * head_dim (%d) must be a multiple of %d for %s",
			    o->n_heads * gen_head_dim(o),
			    o->mix_q4_k_m ? PG_QK : pg_dtype_block_size(o->type),
			    pg_dtype_name(o->type));
	if ((o->arch == GGUFGEN_GEMMA2 || o->arch == GGUFGEN_GEMMA3) &&
	    o->sliding_window <= 0)
		return fail(err, err_len, -EINVAL,
			    "gemma2 and gemma3 need a sliding window (> 0)");
	if (o->attn_softcap < 0.0f || o->final_softcap < 0.0f)
		return fail(err, err_len, -EINVAL, "soft-caps must be >= 0");
	if (o->rope_dim < 0 || o->rope_dim % 2 || o->rope_dim > gen_head_dim(o))
		return fail(err, err_len, -EINVAL,
			    "rope_dim (%d) must be even and at most the head size",
			    o->rope_dim);
	if (o->rope_freqs && o->arch != GGUFGEN_LLAMA)
		return fail(err, err_len, -EINVAL,
			    "rope_freqs is for the llama architecture only");
	if (o->n_kv_heads < 1 || o->n_heads % o->n_kv_heads)
		return fail(err, err_len, -EINVAL,
			    "kv-heads (%d) must divide heads (%d)", o->n_kv_heads,
			    o->n_heads);
	if (!o->vocab_from && o->n_vocab < GGUFGEN_MIN_VOCAB)
		return fail(err, err_len, -EINVAL,
			    "vocab (%d) must be >= %d with the built-in vocabulary",
			    o->n_vocab, GGUFGEN_MIN_VOCAB);
	if (!(o->rope_freq_base > 0.0f) || !(o->rms_eps > 0.0f))
		return fail(err, err_len, -EINVAL,
			    "rope freq base and rms eps must be > 0");
	return check_types(o, err, err_len);
}

/* ---- the tensors ---- */

struct gen_tensor {
	char name[MAX_NAME];
	uint64_t ne[2];		/* ne[0] contiguous; ne[1] = 1 for vectors */
	uint32_t n_dims;
	enum pg_dtype type;
	float center;		/* values are center + scale * normal-ish */
	float scale;
	uint64_t offset;	/* from the start of the data section */
	uint64_t n_bytes;
};

struct gen_plan {
	struct gen_tensor *t;	/* (n) in file order */
	int n;
	uint64_t data_bytes;
};

/* mat_scale - 1/sqrt(fan-in), kept in [0.02, 0.1]: activations stay sane. */
static float mat_scale(uint64_t fan_in)
{
	float s = 1.0f / sqrtf((float)fan_in);

	return s < 0.02f ? 0.02f : s > 0.1f ? 0.1f : s;
}

static void plan_add(struct gen_plan *p, const char *name, uint64_t ne0,
		     uint64_t ne1, enum pg_dtype type)
{
	struct gen_tensor *t = &p->t[p->n++];

	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ne[0] = ne0;
	t->ne[1] = ne1;
	t->n_dims = strstr(name, "norm") || strstr(name, ".bias") ? 1 : 2;
	t->type = type;
	t->center = strstr(name, "norm") ? 1.0f : 0.0f;	/* norms near 1 */
	t->scale = t->n_dims == 2 ? mat_scale(ne0) :
		   strstr(name, "norm") ? 0.05f : 0.02f;
	if (!strcmp(name, "rope_freqs.weight")) {
		/* RoPE factors: 2 +- 0.5 z, within [0.27, 3.73] */
		t->n_dims = 1;
		t->center = 2.0f;
		t->scale = 0.5f;
	}
	t->offset = (p->data_bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
	t->n_bytes = pg_dtype_row_bytes(type, ne0) * ne1;
	p->data_bytes = t->offset + t->n_bytes;
}

static void plan_block(struct gen_plan *p, const struct ggufgen_opts *o,
		       int b)
{
	uint64_t h = (uint64_t)o->hidden, f = (uint64_t)o->ffn;
	uint64_t hd = (uint64_t)gen_head_dim(o);
	uint64_t q = hd * (uint64_t)o->n_heads;
	uint64_t kv = hd * (uint64_t)o->n_kv_heads;
	char n[MAX_NAME];

#define BLK(suffix, ne0, ne1, type)					\
	do {								\
		snprintf(n, sizeof(n), "blk.%d." suffix, b);		\
		plan_add(p, n, ne0, ne1, type);				\
	} while (0)
	BLK("attn_norm.weight", h, 1, PG_F32);
	if (o->arch == GGUFGEN_PHI3) {
		BLK("attn_qkv.weight", h, q + 2 * kv, mat_type(o, h, 0));
	} else {
		BLK("attn_q.weight", h, q, mat_type(o, h, 0));
		BLK("attn_k.weight", h, kv, mat_type(o, h, 0));
		BLK("attn_v.weight", h, kv, mat_type(o, h, 1));
	}
	if (o->qkv_bias) {
		BLK("attn_q.bias", q, 1, PG_F32);
		BLK("attn_k.bias", kv, 1, PG_F32);
		BLK("attn_v.bias", kv, 1, PG_F32);
	}
	if (o->arch == GGUFGEN_QWEN3 || o->arch == GGUFGEN_GEMMA3) {
		BLK("attn_q_norm.weight", hd, 1, PG_F32);
		BLK("attn_k_norm.weight", hd, 1, PG_F32);
	}
	BLK("attn_output.weight", q, h, mat_type(o, q, 0));
	if (o->arch == GGUFGEN_GEMMA2 || o->arch == GGUFGEN_GEMMA3)
		BLK("post_attention_norm.weight", h, 1, PG_F32);
	BLK("ffn_norm.weight", h, 1, PG_F32);
	if (o->arch == GGUFGEN_PHI3) {
		BLK("ffn_up.weight", h, 2 * f, mat_type(o, h, 0));
	} else {
		BLK("ffn_gate.weight", h, f, mat_type(o, h, 0));
		BLK("ffn_up.weight", h, f, mat_type(o, h, 0));
	}
	BLK("ffn_down.weight", f, h, mat_type(o, f, 1));
	if (o->arch == GGUFGEN_GEMMA2 || o->arch == GGUFGEN_GEMMA3)
		BLK("post_ffw_norm.weight", h, 1, PG_F32);
#undef BLK
}

/* plan_build - every tensor of the model, offsets aligned.  0 or -ENOMEM. */
static int plan_build(struct gen_plan *p, const struct ggufgen_opts *o,
		      int n_vocab)
{
	uint64_t h = (uint64_t)o->hidden;

	memset(p, 0, sizeof(*p));
	p->t = calloc((size_t)o->n_blocks * 16 + 4, sizeof(*p->t));
	if (!p->t)
		return -ENOMEM;
	if (o->vocab_only)
		return 0;
	plan_add(p, "token_embd.weight", h, (uint64_t)n_vocab, o->embd_type);
	for (int b = 0; b < o->n_blocks; b++)
		plan_block(p, o, b);
	plan_add(p, "output_norm.weight", h, 1, PG_F32);
	if (o->rope_freqs)
		plan_add(p, "rope_freqs.weight", (uint64_t)gen_head_dim(o) / 2,
			 1, PG_F32);
	if (o->untied)
		plan_add(p, "output.weight", h, (uint64_t)n_vocab,
			 mat_type(o, h, 1));
	return 0;
}

static const struct gen_tensor *plan_find(const struct gen_plan *p,
					  const char *name)
{
	for (int i = 0; i < p->n; i++)
		if (!strcmp(p->t[i].name, name))
			return &p->t[i];
	return NULL;
}

/* ---- values ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* row_stream - the start of row `row`'s stream: (seed, name, row). */
static uint64_t row_stream(uint64_t seed, const char *name, uint64_t row)
{
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */
	uint64_t x;

	for (const char *c = name; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
	x = h ^ seed;
	x = splitmix64(&x) + row * 0xd1b54a32d192ed03ull;
	return splitmix64(&x);
}

/*
 * gen_row - n values center + scale * z, z the sum of four 16-bit uniforms
 * centred and scaled to variance 1 (Irwin-Hall: bell-shaped, bounded).
 */
static void gen_row(const struct gen_tensor *t, uint64_t seed, uint64_t row,
		    float *out)
{
	uint64_t x = row_stream(seed, t->name, row);
	const float k = 1.7320508f / 65536.0f;	/* sqrt(3) / 2^16 */
	float s = t->scale * k;

	for (uint64_t i = 0; i < t->ne[0]; i++) {
		uint64_t r = splitmix64(&x);
		int32_t sum = (int32_t)((r & 0xffff) + ((r >> 16) & 0xffff) +
					((r >> 32) & 0xffff) + (r >> 48));

		out[i] = t->center + (float)(sum - 131070) * s;
	}
}

/* ---- buffered output ---- */

struct out {
	FILE *f;
	uint64_t pos;		/* bytes written */
	int err;		/* first errno; later writes are skipped */
};

static void out_bytes(struct out *w, const void *p, size_t n)
{
	if (w->err || !n)
		return;
	if (fwrite(p, 1, n, w->f) != n)
		w->err = errno ? errno : EIO;
	w->pos += n;
}

static void out_u32(struct out *w, uint32_t v)
{
	out_bytes(w, &v, sizeof(v));	/* GGUF is little-endian, as are we */
}

static void out_u64(struct out *w, uint64_t v)
{
	out_bytes(w, &v, sizeof(v));
}

static void out_str(struct out *w, const char *s, size_t len)
{
	out_u64(w, len);
	out_bytes(w, s, len);
}

static void out_pad(struct out *w)
{
	static const char zero[ALIGNMENT];
	size_t n = (size_t)((ALIGNMENT - w->pos % ALIGNMENT) % ALIGNMENT);

	out_bytes(w, zero, n);
}

/* ---- metadata ---- */

struct meta {
	struct out w;		/* into a memory stream */
	char *buf;
	size_t len;
	uint64_t n_kv;
};

static void kv_key(struct meta *m, const char *key, enum gguf_type type)
{
	out_str(&m->w, key, strlen(key));
	out_u32(&m->w, type);
	m->n_kv++;
}

static void kv_u32(struct meta *m, const char *key, uint32_t v)
{
	kv_key(m, key, GGUF_UINT32);
	out_u32(&m->w, v);
}

static void kv_f32(struct meta *m, const char *key, float v)
{
	kv_key(m, key, GGUF_FLOAT32);
	out_bytes(&m->w, &v, sizeof(v));
}

static void kv_bool(struct meta *m, const char *key, int v)
{
	uint8_t b = v != 0;

	kv_key(m, key, GGUF_BOOL);
	out_bytes(&m->w, &b, 1);
}

static void kv_str(struct meta *m, const char *key, const char *v)
{
	kv_key(m, key, GGUF_STRING);
	out_str(&m->w, v, strlen(v));
}

static void kv_arr(struct meta *m, const char *key, enum gguf_type elem,
		   uint64_t n)
{
	kv_key(m, key, GGUF_ARRAY);
	out_u32(&m->w, elem);
	out_u64(&m->w, n);
}

/* arch_kv - "<arch>.<key>" as a u32. */
static void arch_u32(struct meta *m, const char *arch, const char *key,
		     uint32_t v)
{
	char k[96];

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	kv_u32(m, k, v);
}

static void arch_f32(struct meta *m, const char *arch, const char *key,
		     float v)
{
	char k[96];

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	kv_f32(m, k, v);
}

/* file_type - llama.cpp's LLAMA_FTYPE for the weight type. */
static uint32_t file_type(const struct ggufgen_opts *o)
{
	if (o->mix_q4_k_m)
		return 15;			/* MOSTLY_Q4_K_M */
	switch (o->type) {
	case PG_F16: return 1;
	case PG_Q4_0: return 2;
	case PG_Q4_1: return 3;
	case PG_Q8_0: return 7;
	case PG_Q5_0: return 8;
	case PG_Q5_1: return 9;
	case PG_Q2_K: return 10;
	case PG_Q3_K: return 11;		/* the _S variants */
	case PG_Q4_K: return 14;
	case PG_Q5_K: return 16;
	case PG_Q6_K: return 18;
	case PG_BF16: return 32;
	default: return 0;
	}
}

static void meta_model(struct meta *m, const struct ggufgen_opts *o,
		       int n_vocab)
{
	static const char *const names[] = {
		[GGUFGEN_LLAMA] = "llama", [GGUFGEN_QWEN2] = "qwen2",
		[GGUFGEN_QWEN3] = "qwen3", [GGUFGEN_GEMMA] = "gemma",
		[GGUFGEN_GEMMA2] = "gemma2", [GGUFGEN_GEMMA3] = "gemma3",
		[GGUFGEN_PHI3] = "phi3",
	};
	const char *a = names[o->arch];

	kv_str(m, "general.architecture", a);
	kv_str(m, "general.name", o->name ? o->name : "pagoda-random");
	kv_u32(m, "general.alignment", ALIGNMENT);
	kv_u32(m, "general.file_type", file_type(o));
	kv_u32(m, "general.quantization_version", 2);
	arch_u32(m, a, "vocab_size", (uint32_t)n_vocab);
	arch_u32(m, a, "context_length", (uint32_t)o->n_ctx);
	arch_u32(m, a, "embedding_length", (uint32_t)o->hidden);
	arch_u32(m, a, "block_count", (uint32_t)o->n_blocks);
	arch_u32(m, a, "feed_forward_length", (uint32_t)o->ffn);
	arch_u32(m, a, "rope.dimension_count",
		 (uint32_t)(o->rope_dim > 0 ? o->rope_dim : gen_head_dim(o)));
	if (o->head_dim || o->arch == GGUFGEN_QWEN3 || o->arch == GGUFGEN_GEMMA3) {
		arch_u32(m, a, "attention.key_length", (uint32_t)gen_head_dim(o));
		arch_u32(m, a, "attention.value_length", (uint32_t)gen_head_dim(o));
	}
	arch_f32(m, a, "rope.freq_base", o->rope_freq_base);
	arch_u32(m, a, "attention.head_count", (uint32_t)o->n_heads);
	arch_u32(m, a, "attention.head_count_kv", (uint32_t)o->n_kv_heads);
	arch_f32(m, a, "attention.layer_norm_rms_epsilon", o->rms_eps);
	if (o->sliding_window > 0)
		arch_u32(m, a, "attention.sliding_window",
			 (uint32_t)o->sliding_window);
	if (o->attn_softcap > 0.0f)
		arch_f32(m, a, "attn_logit_softcapping", o->attn_softcap);
	if (o->final_softcap > 0.0f)
		arch_f32(m, a, "final_logit_softcapping", o->final_softcap);
}

/* ---- the built-in byte-level BPE vocabulary ---- */

static const char *const specials[3] = {
	"<|endoftext|>", "<|im_start|>", "<|im_end|>",
};

static const char chatml[] =
	"{% for message in messages %}"
	"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
	"'<|im_end|>' + '\\n'}}{% endfor %}"
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
	"{% endif %}";

/*
 * byte_symbol - GPT-2's printable stand-in for byte b, as UTF-8 in s (at
 * most 3 bytes); returns its length.  Printable Latin-1 bytes stand for
 * themselves, the others for U+0100 onwards in byte order.
 */
static int byte_symbol(int b, char *s)
{
	int cp = b, k = 0;

	if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
	      (b >= 0xae && b <= 0xff))) {
		for (int i = 0; i < b; i++)
			k += !((i >= 0x21 && i <= 0x7e) ||
			       (i >= 0xa1 && i <= 0xac) ||
			       (i >= 0xae && i <= 0xff));
		cp = 0x100 + k;
	}
	if (cp < 0x80) {
		s[0] = (char)cp;
		return 1;
	}
	s[0] = (char)(0xc0 | (cp >> 6));
	s[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

/*
 * The merges, in rank order: "Ġ x" for each letter, then for L = 2, 3, ...
 * every lowercase word w of length L, as "w[:-1] w[-1]" and "Ġw[:-1]
 * w[-1]".  Each merge's parts exist before it, so the list is valid at any
 * length; "Ġ" is GPT-2's symbol for a space.
 */
struct merge_it {
	int level;		/* word length */
	uint64_t idx;		/* word number in the level, times 2 */
};

static uint64_t pow26(int l)
{
	uint64_t p = 1;

	while (l-- > 0)
		p *= 26;
	return p;
}

/* merge_next - the next merge's two parts (NUL-terminated). */
static void merge_next(struct merge_it *it, char *left, char *right)
{
	uint64_t n = it->level == 1 ? 26 : 2 * pow26(it->level);
	int spaced = it->level == 1 || (it->idx & 1);
	uint64_t w = it->level == 1 ? it->idx : it->idx >> 1;
	char word[16];

	for (int i = it->level - 1; i >= 0; i--, w /= 26)
		word[i] = (char)('a' + w % 26);
	word[it->level] = 0;
	snprintf(left, 24, "%s%.*s", spaced ? "\xc4\xa0" : "",
		 it->level - 1, word);
	snprintf(right, 4, "%c", word[it->level - 1]);
	if (++it->idx == n) {
		it->level++;
		it->idx = 0;
	}
}

static void meta_tokens(struct meta *m, int n_vocab)
{
	struct merge_it it = { .level = 1 };
	char sym[4], left[24], right[4], tok[32];

	kv_arr(m, "tokenizer.ggml.tokens", GGUF_STRING, (uint64_t)n_vocab);
	for (int i = 0; i < 3; i++)
		out_str(&m->w, specials[i], strlen(specials[i]));
	for (int b = 0; b < 256; b++)
		out_str(&m->w, sym, (size_t)byte_symbol(b, sym));
	for (int i = GGUFGEN_MIN_VOCAB; i < n_vocab; i++) {
		merge_next(&it, left, right);
		snprintf(tok, sizeof(tok), "%s%s", left, right);
		out_str(&m->w, tok, strlen(tok));
	}
}

static void meta_merges(struct meta *m, int n_vocab)
{
	struct merge_it it = { .level = 1 };
	char left[24], right[4], mg[32];

	kv_arr(m, "tokenizer.ggml.merges", GGUF_STRING,
	       (uint64_t)(n_vocab - GGUFGEN_MIN_VOCAB));
	for (int i = GGUFGEN_MIN_VOCAB; i < n_vocab; i++) {
		merge_next(&it, left, right);
		snprintf(mg, sizeof(mg), "%s %s", left, right);
		out_str(&m->w, mg, strlen(mg));
	}
}

static void meta_builtin_vocab(struct meta *m, int n_vocab)
{
	kv_str(m, "tokenizer.ggml.model", "gpt2");
	kv_str(m, "tokenizer.ggml.pre", "smollm");
	meta_tokens(m, n_vocab);
	kv_arr(m, "tokenizer.ggml.token_type", GGUF_INT32, (uint64_t)n_vocab);
	for (int i = 0; i < n_vocab; i++)
		out_u32(&m->w, i < 3 ? 3 : 1);	/* CONTROL, NORMAL */
	meta_merges(m, n_vocab);
	kv_u32(m, "tokenizer.ggml.bos_token_id", 1);
	kv_u32(m, "tokenizer.ggml.eos_token_id", 2);
	kv_u32(m, "tokenizer.ggml.unknown_token_id", 0);
	kv_u32(m, "tokenizer.ggml.padding_token_id", 2);
	kv_bool(m, "tokenizer.ggml.add_bos_token", 0);
	kv_str(m, "tokenizer.chat_template", chatml);
}

/* ---- a vocabulary copied from another file ---- */

static size_t elem_bytes(enum gguf_type t)
{
	switch (t) {
	case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
	case GGUF_UINT16: case GGUF_INT16: return 2;
	case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
	case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

static int copy_array(struct meta *m, const struct gguf_file *f,
		      const char *key)
{
	enum gguf_type et;
	uint64_t n;
	struct gguf_str s;

	if (gguf_get_arr(f, key, &et, &n))
		return -EINVAL;
	if (et != GGUF_STRING && !elem_bytes(et))
		return -EINVAL;	/* arrays of arrays: not in vocabularies */
	kv_arr(m, key, et, n);
	if (et != GGUF_STRING) {
		out_bytes(&m->w, gguf_get_arr_data(f, key), n * elem_bytes(et));
		return 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		if (gguf_get_arr_str(f, key, i, &s))
			return -EINVAL;
		out_str(&m->w, s.ptr, s.len);
	}
	return 0;
}

/* copy_scalar - a scalar through the typed getters, in its own type. */
static int copy_scalar(struct meta *m, const struct gguf_file *f,
		       const char *key, enum gguf_type t)
{
	struct gguf_str s;
	int64_t i;
	float v;
	int b;

	if (t == GGUF_STRING) {
		if (gguf_get_str(f, key, &s))
			return -EINVAL;
		kv_key(m, key, t);
		out_str(&m->w, s.ptr, s.len);
		return 0;
	}
	if (t == GGUF_FLOAT32 || t == GGUF_FLOAT64) {
		if (gguf_get_f32(f, key, &v))
			return -EINVAL;
		kv_f32(m, key, v);
		return 0;
	}
	if (t == GGUF_BOOL) {
		if (gguf_get_bool(f, key, &b))
			return -EINVAL;
		kv_bool(m, key, b);
		return 0;
	}
	if (!elem_bytes(t) || gguf_get_i64(f, key, &i))
		return -EINVAL;
	kv_key(m, key, t);
	out_bytes(&m->w, &i, elem_bytes(t));	/* little-endian truncation */
	return 0;
}

static int copy_key(struct meta *m, const struct gguf_file *f, uint64_t i)
{
	struct gguf_str name = gguf_key_name(f, i);
	enum gguf_type t = gguf_key_type(f, i);
	char key[256];

	if (name.len >= sizeof(key) || name.len < 10 ||
	    memcmp(name.ptr, "tokenizer.", 10))
		return 0;
	memcpy(key, name.ptr, name.len);
	key[name.len] = 0;
	if (t == GGUF_ARRAY)
		return copy_array(m, f, key);
	return copy_scalar(m, f, key, t);
}

/* vocab_open - open vocab_from and count its tokens. */
static int vocab_open(const char *path, struct gguf_file **f, int *n_vocab,
		      char *err, size_t err_len)
{
	enum gguf_type et;
	uint64_t n;
	int rc = gguf_open(path, f, err, err_len);

	if (rc)
		return rc;
	if (gguf_get_arr(*f, "tokenizer.ggml.tokens", &et, &n) ||
	    et != GGUF_STRING || n < 1 || n > INT32_MAX) {
		gguf_close(*f);
		*f = NULL;
		return fail(err, err_len, -EINVAL,
			    "%s: no usable tokenizer.ggml.tokens array", path);
	}
	*n_vocab = (int)n;
	return 0;
}

static int meta_copied_vocab(struct meta *m, const struct gguf_file *f,
			     char *err, size_t err_len)
{
	for (uint64_t i = 0; i < gguf_n_keys(f); i++)
		if (copy_key(m, f, i))
			return fail(err, err_len, -EINVAL,
				    "%s: key %" PRIu64 " cannot be copied",
				    gguf_path(f), i);
	return 0;
}

/* ---- the file ---- */

static void write_tensor_infos(struct out *w, const struct gen_plan *p)
{
	for (int i = 0; i < p->n; i++) {
		const struct gen_tensor *t = &p->t[i];

		out_str(w, t->name, strlen(t->name));
		out_u32(w, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims; d++)
			out_u64(w, t->ne[d]);
		out_u32(w, t->type);
		out_u64(w, t->offset);
	}
}

/*
 * Rows are drawn and converted by n_threads threads into a batch buffer of
 * about BATCH_BYTES, which is then written in order; rows are independent,
 * so the bytes do not depend on the number of threads.
 */
#define BATCH_BYTES (8u << 20)
#define MAX_THREADS 64

struct batch {
	const struct gen_tensor *t;
	uint64_t seed;
	uint64_t row0;		/* the tensor's first row in this batch */
	size_t row_bytes;
	uint8_t *dst;		/* (rows of the batch, row_bytes) */
};

struct worker {
	const struct batch *b;
	uint64_t r0, r1;	/* rows [r0, r1) of the batch */
	float *row;		/* (ne[0]) scratch */
	pthread_t th;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	const struct batch *b = w->b;

	for (uint64_t r = w->r0; r < w->r1; r++) {
		gen_row(b->t, b->seed, b->row0 + r, w->row);
		pg_quantize_row(b->t->type, w->row, b->dst + r * b->row_bytes,
				(int64_t)b->t->ne[0]);
	}
	return NULL;
}

/*
 * fill_batch - n_rows rows split over the workers (one for small batches);
 * a thread that fails to start has its share run on this thread.
 */
static void fill_batch(struct worker *ws, int n_threads, const struct batch *b,
		       uint64_t n_rows)
{
	int n = n_rows * b->t->ne[0] < 65536 ? 1 : n_threads;
	int started[MAX_THREADS] = { 0 };

	for (int i = 0; i < n; i++) {
		ws[i].b = b;
		ws[i].r0 = n_rows * (uint64_t)i / (uint64_t)n;
		ws[i].r1 = n_rows * (uint64_t)(i + 1) / (uint64_t)n;
	}
	for (int i = 1; i < n; i++)
		started[i] = !pthread_create(&ws[i].th, NULL, worker_run,
					     &ws[i]);
	worker_run(&ws[0]);
	for (int i = 1; i < n; i++) {
		if (started[i])
			pthread_join(ws[i].th, NULL);
		else
			worker_run(&ws[i]);
	}
}

static void write_tensor(struct out *w, struct worker *ws, int n_threads,
			 const struct gen_tensor *t, uint64_t seed,
			 uint8_t *buf)
{
	struct batch b = { .t = t, .seed = seed, .dst = buf };
	uint64_t per;

	b.row_bytes = pg_dtype_row_bytes(t->type, t->ne[0]);
	per = BATCH_BYTES / b.row_bytes ? BATCH_BYTES / b.row_bytes : 1;
	out_pad(w);
	for (b.row0 = 0; b.row0 < t->ne[1] && !w->err; b.row0 += per) {
		uint64_t n = t->ne[1] - b.row0 < per ? t->ne[1] - b.row0 : per;

		fill_batch(ws, n_threads, &b, n);
		out_bytes(w, buf, n * b.row_bytes);
	}
}

static int n_threads_of(const struct ggufgen_opts *o)
{
	long n = o->n_threads > 0 ? o->n_threads :
		 sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* write_data - every tensor, in batches of rows, converted to its type. */
static int write_data(struct out *w, const struct gen_plan *p,
		      const struct ggufgen_opts *o)
{
	struct worker ws[MAX_THREADS] = { 0 };
	int n_threads = n_threads_of(o), rc = 0;
	uint64_t max_ne0 = 0;
	uint8_t *buf;

	for (int i = 0; i < p->n; i++)
		if (p->t[i].ne[0] > max_ne0)
			max_ne0 = p->t[i].ne[0];
	buf = malloc(BATCH_BYTES + max_ne0 * sizeof(float));
	for (int i = 0; i < n_threads && buf; i++) {
		ws[i].row = malloc(max_ne0 * sizeof(float));
		if (!ws[i].row)
			rc = -ENOMEM;
	}
	if (!buf)
		rc = -ENOMEM;
	for (int i = 0; i < p->n && !rc && !w->err; i++)
		write_tensor(w, ws, n_threads, &p->t[i], o->seed, buf);
	for (int i = 0; i < n_threads; i++)
		free(ws[i].row);
	free(buf);
	return rc;
}

/* meta_build - all metadata into m's memory stream. */
static int meta_build(struct meta *m, const struct ggufgen_opts *o,
		      const struct gguf_file *vf, int n_vocab, char *err,
		      size_t err_len)
{
	int rc = 0;

	memset(m, 0, sizeof(*m));
	m->w.f = open_memstream(&m->buf, &m->len);
	if (!m->w.f)
		return fail(err, err_len, -ENOMEM, "out of memory");
	meta_model(m, o, n_vocab);
	if (vf)
		rc = meta_copied_vocab(m, vf, err, err_len);
	else
		meta_builtin_vocab(m, n_vocab);
	if (fclose(m->w.f) && !m->w.err)
		m->w.err = errno;
	m->w.f = NULL;
	if (!rc && m->w.err)
		rc = fail(err, err_len, -m->w.err, "metadata: %s",
			  strerror(m->w.err));
	return rc;
}

/* write_model - header, metadata, tensor infos, data into w. */
static int write_model(struct out *w, const struct ggufgen_opts *o,
		       const struct meta *m, const struct gen_plan *p,
		       char *err, size_t err_len)
{
	int rc;

	out_bytes(w, "GGUF", 4);
	out_u32(w, 3);
	out_u64(w, (uint64_t)p->n);
	out_u64(w, m->n_kv);
	out_bytes(w, m->buf, m->len);
	write_tensor_infos(w, p);
	out_pad(w);
	rc = write_data(w, p, o);
	if (rc)
		return fail(err, err_len, rc, "out of memory");
	if (w->err)
		return fail(err, err_len, -w->err, "write: %s",
			    strerror(w->err));
	return 0;
}

/* generate - check, resolve the vocabulary, plan and write into f. */
static int generate(const struct ggufgen_opts *o, FILE *f, char *err,
		    size_t err_len)
{
	struct gguf_file *vf = NULL;
	struct out w = { .f = f };
	struct gen_plan p = { 0 };
	struct meta m = { 0 };
	int n_vocab = o->n_vocab, rc;

	rc = ggufgen_check(o, err, err_len);
	if (rc)
		return rc;
	if (o->vocab_from) {
		rc = vocab_open(o->vocab_from, &vf, &n_vocab, err, err_len);
		if (rc)
			return rc;
	}
	rc = plan_build(&p, o, n_vocab);
	if (rc) {
		fail(err, err_len, rc, "out of memory");
		goto out_close;
	}
	rc = meta_build(&m, o, vf, n_vocab, err, err_len);
	if (!rc)
		rc = write_model(&w, o, &m, &p, err, err_len);
	free(m.buf);
	free(p.t);
out_close:
	gguf_close(vf);
	return rc;
}

int ggufgen_write(const struct ggufgen_opts *o, const char *path, char *err,
		  size_t err_len)
{
	FILE *f = fopen(path, "wb");
	int rc;

	if (!f)
		return fail(err, err_len, -errno, "%s: %s", path,
			    strerror(errno));
	setvbuf(f, NULL, _IOFBF, 1 << 22);
	rc = generate(o, f, err, err_len);
	if (fclose(f) && !rc)
		rc = fail(err, err_len, -errno, "%s: %s", path,
			  strerror(errno));
	if (rc)
		unlink(path);
	return rc;
}

int ggufgen_write_mem(const struct ggufgen_opts *o, void **buf, size_t *len,
		      char *err, size_t err_len)
{
	char *b = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&b, &n);
	int rc;

	if (!f)
		return fail(err, err_len, -ENOMEM, "out of memory");
	rc = generate(o, f, err, err_len);
	if (fclose(f) && !rc)
		rc = fail(err, err_len, -ENOMEM, "out of memory");
	if (rc) {
		free(b);
		return rc;
	}
	*buf = b;
	*len = n;
	return 0;
}

/* ---- for tests ---- */

/* with_plan - the plan of o (the vocabulary size read when copied). */
static int with_plan(const struct ggufgen_opts *o, struct gen_plan *p)
{
	struct gguf_file *vf = NULL;
	int n_vocab = o->n_vocab, rc;

	if (o->vocab_from) {
		rc = vocab_open(o->vocab_from, &vf, &n_vocab, NULL, 0);
		gguf_close(vf);
		if (rc)
			return rc;
	}
	return plan_build(p, o, n_vocab);
}

int ggufgen_row(const struct ggufgen_opts *o, const char *name, uint64_t row,
		float *out)
{
	struct gen_plan p;
	const struct gen_tensor *t;
	int rc = with_plan(o, &p);

	if (rc)
		return rc;
	t = plan_find(&p, name);
	if (!t)
		rc = -ENOENT;
	else if (row >= t->ne[1])
		rc = -ERANGE;
	else
		gen_row(t, o->seed, row, out);
	free(p.t);
	return rc;
}

int ggufgen_tensor_shape(const struct ggufgen_opts *o, const char *name,
			 uint64_t *ne0, uint64_t *ne1, enum pg_dtype *type)
{
	struct gen_plan p;
	const struct gen_tensor *t;
	int rc = with_plan(o, &p);

	if (rc)
		return rc;
	t = plan_find(&p, name);
	if (t) {
		*ne0 = t->ne[0];
		*ne1 = t->ne[1];
		*type = t->type;
	}
	free(p.t);
	return t ? 0 : -ENOENT;
}
