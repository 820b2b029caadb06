/*
 * model.c - the Llama-family model loader: hyper-parameters from GGUF
 * metadata, every tensor checked against the shape they imply.
 *
 * Norms and biases are copied to F32 (they are small and read by every
 * kernel as floats); matrices stay in the mapping in their stored type.
 * Nothing here computes.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype.h"	/* pg_dequantize_row */
#include "daemon/engine/gguf.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"

struct loader {
	struct pg_model *m;	/* NULL: hyper-parameters only */
	struct pg_hparams *hp;	/* &m->hp, or pg_hparams_read's */
	struct pg_arch *a;	/* &m->arch, or pg_hparams_read's */
	struct gguf_file *f;
	const char *arch;	/* metadata key prefix */
	size_t n_owned;		/* floats used in m->owned */
	uint8_t *used;		/* (gguf_n_tensors) tensors the model reads */
	char *err;
	size_t err_len;
};

static int lfail(struct loader *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int lfail(struct loader *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(l->err, l->err_len, "%s: ", gguf_path(l->f));
	if (n < 0 || (size_t)n >= l->err_len)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(l->err + n, l->err_len - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

const char *pg_model_default_path(char *buf, size_t len)
{
	const char *model = getenv("PAGODA_MODEL");
	const char *dir = getenv("PAGODA_MODEL_DIR");
	const char *home = getenv("HOME");

	if (model && *model)
		return model;
	if (dir && *dir)
		snprintf(buf, len, "%s/%s", dir, PG_DEFAULT_MODEL);
	else
		snprintf(buf, len, "%s/.cache/pagoda/models/%s",
			 home && *home ? home : ".", PG_DEFAULT_MODEL);
	return buf;
}

uint64_t pg_model_identity(const struct pg_model *m)
{
	uint64_t h = 14695981039346656037ull;	/* FNV-1a */

	for (const char *p = m->name; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	h = (h ^ (uint64_t)m->hp.n_vocab) * 1099511628211ull;
	h = (h ^ (uint64_t)m->hp.n_blocks) * 1099511628211ull;
	return (h ^ (uint64_t)m->weight_bytes) * 1099511628211ull;
}

const char *pg_arch_name(enum pg_arch_id a)
{
	static const char *const names[] = {
		[PG_ARCH_LLAMA] = "llama", [PG_ARCH_QWEN2] = "qwen2",
		[PG_ARCH_QWEN3] = "qwen3", [PG_ARCH_GEMMA] = "gemma",
		[PG_ARCH_GEMMA2] = "gemma2", [PG_ARCH_GEMMA3] = "gemma3",
		[PG_ARCH_PHI3] = "phi3",
	};

	return (unsigned)a < sizeof(names) / sizeof(names[0]) && names[a] ?
	       names[a] : "llama";
}

/* Read integer hyper-parameter "<arch>.<key>"; def < 0 means required. */
static int hp_int(struct loader *l, const char *key, int def, int lo, int hi,
		  int *out)
{
	char full[128];
	int64_t v;
	int rc;

	snprintf(full, sizeof(full), "%s.%s", l->arch, key);
	rc = gguf_get_i64(l->f, full, &v);
	if (rc == -ENOENT && def >= 0) {
		*out = def;
		return 0;
	}
	if (rc == -ENOENT)
		return lfail(l, "metadata key %s is missing (expected an integer)", full);
	if (rc || v < lo || v > hi)
		return lfail(l, "metadata key %s: expected an integer in %d..%d", full, lo, hi);
	*out = (int)v;
	return 0;
}

static int hp_float(struct loader *l, const char *key, float def, float lo,
		    float hi, float *out)
{
	char full[128];
	int rc;

	snprintf(full, sizeof(full), "%s.%s", l->arch, key);
	rc = gguf_get_f32(l->f, full, out);
	if (rc == -ENOENT) {
		*out = def;
		return 0;
	}
	if (rc || !(*out >= lo && *out <= hi))
		return lfail(l, "metadata key %s: expected a float in %g..%g", full,
			     (double)lo, (double)hi);
	return 0;
}

/*
 * The architectures, as data: general.architecture, the key prefix, and
 * what the block function does for it (the scales and the window are
 * filled in later, from the hyper-parameters).  Gemma's norms are stored
 * with the 1 of its (1 + w) scale already added by the converter, so they
 * are plain RMSNorm weights here.
 */
static const struct arch_row {
	const char *name;
	struct pg_arch a;
} arch_rows[] = {
	{ "llama", { .id = PG_ARCH_LLAMA, .rope_mode = PG_ROPE_NORM } },
	{ "mistral", { .id = PG_ARCH_LLAMA, .rope_mode = PG_ROPE_NORM } },
	{ "qwen2", { .id = PG_ARCH_QWEN2, .qkv_bias = 1,
		     .rope_mode = PG_ROPE_NEOX } },
	{ "qwen3", { .id = PG_ARCH_QWEN3, .qk_norm = 1,
		     .rope_mode = PG_ROPE_NEOX } },
	{ "gemma", { .id = PG_ARCH_GEMMA, .act = PG_ACT_GELU,
		     .rope_mode = PG_ROPE_NEOX, .scale_q = 1 } },
	{ "gemma2", { .id = PG_ARCH_GEMMA2, .act = PG_ACT_GELU,
		      .rope_mode = PG_ROPE_NEOX, .post_norms = 1,
		      .swa_pattern = 2, .scale_q = 1 } },
	{ "gemma3", { .id = PG_ARCH_GEMMA3, .act = PG_ACT_GELU, .qk_norm = 1,
		      .rope_mode = PG_ROPE_NEOX, .post_norms = 1,
		      .swa_pattern = 6, .rope_base_swa = 10000.0f,
		      .scale_q = 1 } },
	{ "phi3", { .id = PG_ARCH_PHI3, .rope_mode = PG_ROPE_NEOX,
		    .scale_q = 1 } },
};

/* Architectures known to need what this build does not compute yet. */
static const char *const arch_todo[][2] = {
	{ "phi2", "LayerNorm with biases, a parallel feed-forward block and GELU" },
};

static int read_arch(struct loader *l)
{
	struct gguf_str a;
	char q[64 * 4 + 4];
	int rc = gguf_get_str(l->f, "general.architecture", &a);

	if (rc)
		return lfail(l, "general.architecture is %s (expected a string such as \"llama\")",
			     rc == -ENOENT ? "missing" : "not a string");
	for (size_t i = 0; i < sizeof(arch_rows) / sizeof(arch_rows[0]); i++)
		if (gguf_str_eq(a, arch_rows[i].name)) {
			*l->a = arch_rows[i].a;
			l->hp->arch = arch_rows[i].a.id;
			l->arch = arch_rows[i].name;
			return 0;
		}
	for (size_t i = 0; i < sizeof(arch_todo) / sizeof(arch_todo[0]); i++)
		if (gguf_str_eq(a, arch_todo[i][0]))
			return lfail(l, "general.architecture is \"%s\", which pagoda does not support yet: it needs %s (supported: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, phi3)",
				     arch_todo[i][0], arch_todo[i][1]);
	return lfail(l, "general.architecture is \"%s\", which pagoda does not support (expected llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3 or phi3)",
		     gguf_str_quote(a, 64, q, sizeof(q)));
}

/*
 * RoPE variants this build does not apply are refused rather than run with
 * the wrong positions: linear/YaRN scaling and per-dimension frequency
 * factors (Llama 3.1's rope_freqs).
 */
static int check_rope_variant(struct loader *l)
{
	char key[128];
	struct gguf_str type;
	float factor = 1.0f;

	snprintf(key, sizeof(key), "%s.rope.scaling.type", l->arch);
	if (!gguf_get_str(l->f, key, &type) && !gguf_str_eq(type, "none")) {
		snprintf(key, sizeof(key), "%s.rope.scaling.factor", l->arch);
		gguf_get_f32(l->f, key, &factor);
		if (factor != 1.0f && factor != 0.0f)
			return lfail(l, "%s.rope.scaling.type is \"%.*s\" with factor %g: RoPE scaling is not supported yet (expected none)",
				     l->arch, (int)(type.len > 32 ? 32 : type.len),
				     type.ptr, (double)factor);
	}
	if (gguf_find_tensor(l->f, "rope_factors_long.weight") ||
	    gguf_find_tensor(l->f, "rope_factors_short.weight"))
		return lfail(l, "tensors rope_factors_long/short.weight: LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini), whose frequencies depend on the context length, is not supported yet: use a 4k-context Phi-3 file");
	if (gguf_find_tensor(l->f, "rope_freqs.weight")) {
		if (l->a->id != PG_ARCH_LLAMA)
			return lfail(l, "tensor rope_freqs.weight: %s models have no per-dimension RoPE frequency factors in pagoda (only llama does): re-convert the model",
				     l->arch);
		l->a->rope_factors = 1;
	}
	return 0;
}

/*
 * Sliding-window attention, <arch>.attention.sliding_window: required by
 * the architectures that window some blocks (struct pg_arch's
 * swa_pattern); for the others (Mistral), a window shorter than the
 * context windows every block.  <arch>.attention.sliding_window_pattern,
 * where a converter writes it, overrides the architecture's pattern.
 */
static int read_window(struct loader *l)
{
	struct pg_arch *a = l->a;
	char key[128];
	int64_t w;
	int rc;

	snprintf(key, sizeof(key), "%s.attention.sliding_window", l->arch);
	if (gguf_find_key(l->f, key) < 0) {
		if (a->swa_pattern)
			return lfail(l, "metadata key %s is missing (%s models window the attention of some blocks: expected the window's length); re-convert the model",
				     key, l->arch);
		return 0;
	}
	if (gguf_get_i64(l->f, key, &w) || w < 0 || w > (1 << 24))
		return lfail(l, "metadata key %s: expected an integer in 0..%d",
			     key, 1 << 24);
	if (!a->swa_pattern) {
		if (w == 0 || w >= l->hp->n_ctx_train)
			return 0;	/* no narrower than the context */
		a->swa_pattern = 1;
	}
	if (w == 0)
		return lfail(l, "metadata key %s is 0: %s models need a positive window length; re-convert the model",
			     key, l->arch);
	a->window = (int)w;
	snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", l->arch);
	if (gguf_find_key(l->f, key) >= 0) {
		int64_t pat;

		if ((rc = gguf_get_i64(l->f, key, &pat)) || pat < 1 || pat > 4096)
			return lfail(l, "metadata key %s: expected an integer in 1..4096 (block i is windowed when i %% pattern < pattern - 1; a per-block list is not supported)",
				     key);
		a->swa_pattern = (int)pat;
	}
	return 0;
}

/*
 * Soft-capping, wherever a file has it (Gemma 2): scores and logits are
 * capped to c tanh(x / c); 0 or absent: not capped.
 */
static int read_softcaps(struct loader *l)
{
	struct pg_arch *a = l->a;
	int rc;

	if ((rc = hp_float(l, "attn_logit_softcapping", 0.0f, 0.0f, 1e6f, &a->attn_softcap)))
		return rc;
	return hp_float(l, "final_logit_softcapping", 0.0f, 0.0f, 1e6f, &a->final_softcap);
}

static int read_hparams(struct loader *l)
{
	struct pg_hparams *hp = l->hp;
	int rc, key_len;

	if ((rc = read_arch(l)) ||
	    (rc = hp_int(l, "block_count", -1, 1, 4096, &hp->n_blocks)) ||
	    (rc = hp_int(l, "embedding_length", -1, 32, 1 << 17, &hp->n_embd)) ||
	    (rc = hp_int(l, "feed_forward_length", -1, 32, 1 << 20, &hp->n_ff)) ||
	    (rc = hp_int(l, "attention.head_count", -1, 1, 4096, &hp->n_heads)) ||
	    (rc = hp_int(l, "attention.head_count_kv", hp->n_heads, 1, hp->n_heads, &hp->n_kv_heads)) ||
	    (rc = hp_int(l, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train)) ||
	    (rc = hp_float(l, "attention.layer_norm_rms_epsilon", 1e-5f, 0.0f, 1.0f, &hp->rms_eps)) ||
	    (rc = hp_float(l, "rope.freq_base", 10000.0f, 1.0f, 1e12f, &hp->rope_base)))
		return rc;
	if (hp->n_embd % hp->n_heads && !l->a->qk_norm)
		return lfail(l, "%s.embedding_length %d is not a multiple of %s.attention.head_count %d",
			     l->arch, hp->n_embd, l->arch, hp->n_heads);
	if (hp->n_heads % hp->n_kv_heads)
		return lfail(l, "%s.attention.head_count %d is not a multiple of head_count_kv %d",
			     l->arch, hp->n_heads, hp->n_kv_heads);
	if ((rc = hp_int(l, "attention.key_length", hp->n_embd / hp->n_heads, 2, 1024, &hp->head_dim)) ||
	    (rc = hp_int(l, "attention.value_length", hp->head_dim, 2, 1024, &key_len)))
		return rc;
	if (key_len != hp->head_dim || hp->head_dim % 2)
		return lfail(l, "attention key length %d and value length %d: expected the same even number",
			     hp->head_dim, key_len);
	if ((rc = hp_int(l, "rope.dimension_count", hp->head_dim, 2, hp->head_dim, &hp->n_rot)))
		return rc;
	if (hp->n_rot % 2)
		return lfail(l, "%s.rope.dimension_count %d: expected an even number", l->arch, hp->n_rot);
	l->a->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
	/*
	 * Gemma 2 27B and Gemma 3 27B scale queries by n_embd / n_heads
	 * (query_pre_attn_scalar, which GGUF does not carry; llama.cpp keys
	 * it on the block count as here).
	 */
	if ((hp->arch == PG_ARCH_GEMMA2 && hp->n_blocks == 46) ||
	    (hp->arch == PG_ARCH_GEMMA3 && hp->n_blocks == 62))
		l->a->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_heads));
	if (l->a->act == PG_ACT_GELU)	/* Gemma */
		l->a->emb_scale = sqrtf((float)hp->n_embd);
	if ((rc = check_rope_variant(l)) || (rc = read_window(l)))
		return rc;
	return read_softcaps(l);
}

/* Find a tensor and check its shape is exactly (ne0, ne1). */
static int get_tensor(struct loader *l, const char *name, int64_t ne0,
		      int64_t ne1, int optional, const struct gguf_tensor **out)
{
	const struct gguf_tensor *t = gguf_find_tensor(l->f, name);

	*out = t;
	if (!t)
		return optional ? 0 : lfail(l, "tensor %s is missing", name);
	l->used[t - gguf_tensor_at(l->f, 0)] = 1;
	if ((int64_t)t->ne[0] != ne0 || (int64_t)t->ne[1] != ne1 ||
	    t->ne[2] != 1 || t->ne[3] != 1)
		return lfail(l, "tensor %s has shape [%llu, %llu, %llu, %llu] (expected [%lld, %lld])",
			     name, (unsigned long long)t->ne[0],
			     (unsigned long long)t->ne[1],
			     (unsigned long long)t->ne[2],
			     (unsigned long long)t->ne[3],
			     (long long)ne0, (long long)ne1);
	return 0;
}

static int get_matrix(struct loader *l, const char *name, int64_t n_cols,
		      int64_t n_rows, struct pg_matrix *m)
{
	const struct gguf_tensor *t;
	int rc = get_tensor(l, name, n_cols, n_rows, 0, &t);

	if (rc)
		return rc;
	*m = (struct pg_matrix){	/* every field: layout 0, the file's rows */
		.type = t->type, .n_rows = n_rows, .n_cols = n_cols,
		.row_bytes = pg_dtype_row_bytes(t->type, (uint64_t)n_cols),
		.data = t->data,
	};
	l->m->weight_bytes += t->n_bytes;
	return 0;
}

/* A vector (norm or bias) copied to F32 in the model's owned buffer. */
static int get_vector(struct loader *l, const char *name, int64_t n,
		      int optional, const float **out)
{
	const struct gguf_tensor *t;
	float *dst;
	int rc = get_tensor(l, name, n, 1, optional, &t);

	*out = NULL;
	if (rc || !t)
		return rc;
	if (pg_dtype_block_size(t->type) != 1)
		return lfail(l, "tensor %s is %s (expected F32, F16 or BF16 for a vector)",
			     name, pg_dtype_name(t->type));
	dst = l->m->owned + l->n_owned;
	l->n_owned += (size_t)n;
	pg_dequantize_row(t->type, t->data, dst, n);
	l->m->weight_bytes += t->n_bytes;
	*out = dst;
	return 0;
}

/* Rows r0 .. r0 + n - 1 of matrix m, as a matrix of their own. */
static struct pg_matrix row_view(const struct pg_matrix *m, int64_t r0,
				 int64_t n)
{
	struct pg_matrix v = *m;

	v.n_rows = n;
	v.data = (const uint8_t *)m->data + (size_t)r0 * m->row_bytes;
	return v;
}

/*
 * Q, K and V of block i: attn_q/k/v, or Phi-3's fused attn_qkv (its rows
 * Q, then K, then V), whichever the file has.
 */
static int get_qkv(struct loader *l, int i, int64_t q_dim, int64_t kv_dim,
		   struct pg_block_weights *b)
{
	const struct pg_hparams *hp = &l->m->hp;
	struct pg_matrix qkv;
	char n[96];
	int rc;

	snprintf(n, sizeof(n), "blk.%d.attn_qkv.weight", i);
	if (gguf_find_tensor(l->f, n)) {
		if ((rc = get_matrix(l, n, hp->n_embd, q_dim + 2 * kv_dim, &qkv)))
			return rc;
		b->wq = row_view(&qkv, 0, q_dim);
		b->wk = row_view(&qkv, q_dim, kv_dim);
		b->wv = row_view(&qkv, q_dim + kv_dim, kv_dim);
		return 0;
	}
	snprintf(n, sizeof(n), "blk.%d.attn_q.weight", i);
	if ((rc = get_matrix(l, n, hp->n_embd, q_dim, &b->wq)))
		return rc;
	snprintf(n, sizeof(n), "blk.%d.attn_k.weight", i);
	if ((rc = get_matrix(l, n, hp->n_embd, kv_dim, &b->wk)))
		return rc;
	snprintf(n, sizeof(n), "blk.%d.attn_v.weight", i);
	return get_matrix(l, n, hp->n_embd, kv_dim, &b->wv);
}

/*
 * The feed-forward gate and up matrices of block i: ffn_gate and ffn_up,
 * or, without ffn_gate in a Phi-3 file, ffn_up of twice the rows, the
 * gate's first (llama.cpp's fused SwiGLU).
 */
static int get_gate_up(struct loader *l, int i, struct pg_block_weights *b)
{
	const struct pg_hparams *hp = &l->m->hp;
	struct pg_matrix up2;
	char gate[96], up[96];
	int rc;

	snprintf(gate, sizeof(gate), "blk.%d.ffn_gate.weight", i);
	snprintf(up, sizeof(up), "blk.%d.ffn_up.weight", i);
	if (l->m->arch.id == PG_ARCH_PHI3 && !gguf_find_tensor(l->f, gate)) {
		if ((rc = get_matrix(l, up, hp->n_embd, 2 * (int64_t)hp->n_ff, &up2)))
			return rc;
		b->w_gate = row_view(&up2, 0, hp->n_ff);
		b->w_up = row_view(&up2, hp->n_ff, hp->n_ff);
		return 0;
	}
	if ((rc = get_matrix(l, gate, hp->n_embd, hp->n_ff, &b->w_gate)))
		return rc;
	return get_matrix(l, up, hp->n_embd, hp->n_ff, &b->w_up);
}

static int load_block(struct loader *l, int i)
{
	const struct pg_hparams *hp = &l->m->hp;
	struct pg_block_weights *b = &l->m->blocks[i];
	int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim;
	int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
	int opt_bias = 1;
	char n[96];
	int rc;

#define NAME(s) (snprintf(n, sizeof(n), "blk.%d." s, i), n)
	if ((rc = get_vector(l, NAME("attn_norm.weight"), hp->n_embd, 0, &b->attn_norm)) ||
	    (rc = get_qkv(l, i, q_dim, kv_dim, b)) ||
	    (rc = get_vector(l, NAME("attn_q.bias"), q_dim, opt_bias, &b->bq)) ||
	    (rc = get_vector(l, NAME("attn_k.bias"), kv_dim, opt_bias, &b->bk)) ||
	    (rc = get_vector(l, NAME("attn_v.bias"), kv_dim, opt_bias, &b->bv)) ||
	    (rc = get_vector(l, NAME("attn_q_norm.weight"), hp->head_dim, !l->m->arch.qk_norm, &b->q_norm)) ||
	    (rc = get_vector(l, NAME("attn_k_norm.weight"), hp->head_dim, !l->m->arch.qk_norm, &b->k_norm)) ||
	    (rc = get_matrix(l, NAME("attn_output.weight"), q_dim, hp->n_embd, &b->wo)) ||
	    (rc = get_vector(l, NAME("post_attention_norm.weight"), hp->n_embd, !l->m->arch.post_norms, &b->attn_post_norm)) ||
	    (rc = get_vector(l, NAME("ffn_norm.weight"), hp->n_embd, 0, &b->ffn_norm)) ||
	    (rc = get_vector(l, NAME("post_ffw_norm.weight"), hp->n_embd, !l->m->arch.post_norms, &b->ffn_post_norm)) ||
	    (rc = get_gate_up(l, i, b)) ||
	    (rc = get_matrix(l, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, &b->w_down)))
		return rc;
#undef NAME
	if (l->m->arch.qkv_bias && (!b->bq || !b->bk || !b->bv))
		return lfail(l, "blk.%d: %s expects attn_q/k/v.bias tensors", i,
			     l->arch);
	if (!l->m->arch.qk_norm && (b->q_norm || b->k_norm))
		return lfail(l, "blk.%d: attn_q_norm/attn_k_norm tensors, which %s models do not have: the tensors do not match general.architecture (qwen3 has them)",
			     i, l->arch);
	return 0;
}

static size_t owned_floats(const struct pg_hparams *hp)
{
	size_t per_block = 4 * (size_t)hp->n_embd +
		(size_t)(hp->n_heads + 2 * hp->n_kv_heads + 2) * hp->head_dim;

	return per_block * hp->n_blocks + hp->n_embd + (size_t)hp->n_rot / 2;
}

/*
 * A tensor the model has but the forward pass would not read changes the
 * computation in a way pagoda does not know: refused by name, so that a
 * model loads completely or not at all.
 */
static int check_all_used(struct loader *l)
{
	char q[64 * 4 + 4];

	for (uint64_t i = 0; i < gguf_n_tensors(l->f); i++) {
		struct gguf_str n = gguf_tensor_at(l->f, i)->name;
		static const char rot[] = ".attn_rot_embd.weight";

		/* old Llama files' inverse frequencies: RoPE recomputes them */
		if (n.len > sizeof(rot) - 1 &&
		    !memcmp(n.ptr + n.len - (sizeof(rot) - 1), rot, sizeof(rot) - 1))
			continue;
		if (!l->used[i])
			return lfail(l, "tensor %s is not one pagoda's %s forward pass reads (an unsupported variant of the architecture?): pagoda does not run this model",
				     gguf_str_quote(n, 64, q, sizeof(q)), l->arch);
	}
	return 0;
}

static int load_weights(struct loader *l)
{
	struct pg_model *m = l->m;
	const struct pg_hparams *hp = &m->hp;
	const struct gguf_tensor *t;
	int rc;

	l->used = calloc(gguf_n_tensors(l->f) + 1, 1);
	if (!l->used)
		return -ENOMEM;
	t = gguf_find_tensor(l->f, "token_embd.weight");
	if (!t)
		return lfail(l, "tensor token_embd.weight is missing (a vocabulary-only file cannot run; it can only tokenize)");
	if (t->ne[1] > (1u << 24))
		return lfail(l, "tensor token_embd.weight: vocabulary of %llu (expected at most 2^24)",
			     (unsigned long long)t->ne[1]);
	m->hp.n_vocab = (int)t->ne[1];
	if ((rc = get_matrix(l, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd)))
		return rc;
	if (pg_tokenizer_n_vocab(m->tok) != hp->n_vocab)
		return lfail(l, "the vocabulary has %d tokens but token_embd.weight has %d rows",
			     pg_tokenizer_n_vocab(m->tok), hp->n_vocab);
	m->owned = malloc(owned_floats(hp) * sizeof(float));
	m->blocks = calloc((size_t)hp->n_blocks, sizeof(*m->blocks));
	if (!m->owned || !m->blocks)
		return -ENOMEM;
	for (int i = 0; i < hp->n_blocks; i++)
		if ((rc = load_block(l, i)))
			return rc;
	if ((rc = get_vector(l, "output_norm.weight", hp->n_embd, 0, &m->output_norm)) ||
	    (rc = get_vector(l, "rope_freqs.weight", hp->n_rot / 2, !m->arch.rope_factors, &m->rope_freqs)))
		return rc;
	for (int i = 0; m->rope_freqs && i < hp->n_rot / 2; i++)
		if (!(m->rope_freqs[i] > 0.0f) || isinf(m->rope_freqs[i]))
			return lfail(l, "tensor rope_freqs.weight: factor %d is %g (expected a positive number)",
				     i, (double)m->rope_freqs[i]);
	if ((rc = get_tensor(l, "output.weight", hp->n_embd, hp->n_vocab, 1, &t)))
		return rc;
	m->tied_output = !t;
	if (t && (rc = get_matrix(l, "output.weight", hp->n_embd, hp->n_vocab, &m->output)))
		return rc;
	if (!t)
		m->output = m->tok_embd;
	return check_all_used(l);
}

static void read_name(struct pg_model *m, struct gguf_file *f, const char *path)
{
	struct gguf_str s;
	const char *base = strrchr(path, '/');

	if (!gguf_get_str(f, "general.name", &s) && s.len)
		snprintf(m->name, sizeof(m->name), "%.*s",
			 (int)(s.len < sizeof(m->name) ? s.len : sizeof(m->name) - 1), s.ptr);
	else
		snprintf(m->name, sizeof(m->name), "%s", base ? base + 1 : path);
}

/*
 * general.file_type is informational (pagoda reads each tensor's own
 * type), but a value no llama.cpp file type can have means a corrupt or
 * forged header: LLAMA_FTYPE values are small (0 .. 38 today), optionally
 * with 1024 (LLAMA_FTYPE_GUESSED) added.  Values up to 255 are let through
 * so that a newer converter's types load.
 */
static int check_file_type(struct loader *l)
{
	uint32_t v;
	int rc;

	if (gguf_find_key(l->f, "general.file_type") < 0)
		return 0;
	rc = gguf_get_u32(l->f, "general.file_type", &v);
	if (rc)
		return lfail(l, "general.file_type: expected an unsigned integer (llama.cpp's file type, e.g. 7 for Q8_0); the header is corrupt: re-convert the model");
	if ((v & ~1024u) > 255)
		return lfail(l, "general.file_type is %u, which is no llama.cpp file type (0..255, optionally + 1024); the header is corrupt: re-convert the model",
			     v);
	return 0;
}

static int read_template(struct pg_model *m, struct gguf_file *f)
{
	struct gguf_str s;

	if (gguf_get_str(f, "tokenizer.chat_template", &s))
		return 0;
	m->chat_template = strndup(s.ptr, s.len);
	return m->chat_template ? 0 : -ENOMEM;
}

int pg_hparams_read(struct gguf_file *f, struct pg_hparams *hp,
		    struct pg_arch *arch, char *err, size_t err_len)
{
	struct loader l = {
		.hp = hp, .a = arch, .f = f, .err = err, .err_len = err_len,
	};

	memset(hp, 0, sizeof(*hp));
	memset(arch, 0, sizeof(*arch));
	return read_hparams(&l);
}

int pg_model_load(const char *path, int vocab_only, struct pg_model **out,
		  char *err, size_t err_len)
{
	struct loader l = { .err = err, .err_len = err_len };
	struct pg_model *m;
	char terr[512];
	int rc;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	l.m = m;
	l.hp = &m->hp;
	l.a = &m->arch;
	rc = gguf_open(path, &m->file, err, err_len);
	if (rc)
		goto out_free;
	l.f = m->file;
	m->path = gguf_path(m->file);
	read_name(m, m->file, path);
	if ((rc = check_file_type(&l)))
		goto out_free;
	rc = pg_tokenizer_load(m->file, &m->tok, terr, sizeof(terr));
	if (rc == -EINVAL)
		snprintf(err, err_len, "%s: %s", m->path, terr);
	if (rc || (rc = read_template(m, m->file)))
		goto out_free;
	if (!vocab_only && ((rc = read_hparams(&l)) || (rc = load_weights(&l))))
		goto out_free;
	free(l.used);
	*out = m;
	return 0;
out_free:
	free(l.used);
	if (rc == -ENOMEM)
		snprintf(err, err_len, "%s: out of memory while loading the model", path);
	pg_model_free(m);
	return rc;
}

void pg_model_free(struct pg_model *m)
{
	if (!m)
		return;
	pg_tokenizer_free(m->tok);
	gguf_close(m->file);
	free(m->chat_template);
	free(m->blocks);
	free(m->owned);
	free(m);
}
