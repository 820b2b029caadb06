/*
 * model.h - a Llama-family model (llama, mistral, qwen2, qwen3, gemma,
 * gemma2, gemma3, phi3) loaded from
 * a GGUF file: hyper-parameters, the architecture as data (struct
 * pg_arch), the weights of every block (pointing into the file's mapping),
 * and the tokenizer.
 *
 * Loading validates that every tensor the forward pass reads exists with
 * the shape the hyper-parameters imply; the forward pass (forward.h) then
 * trusts the model.  It does not run anything and owns no device memory.
 */
#ifndef PAGODA_MODEL_H
#define PAGODA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

struct gguf_file;
struct pg_tokenizer;

enum pg_arch_id {
	PG_ARCH_LLAMA = 0,	/* Llama 1/2/3.x, Mistral, SmolLM */
	PG_ARCH_QWEN2,		/* Llama + Q/K/V biases, NEOX RoPE */
	PG_ARCH_QWEN3,		/* Llama + per-head Q/K RMSNorm, NEOX RoPE,
				   explicit head size */
	PG_ARCH_GEMMA,		/* GeGLU, embeddings scaled, NEOX RoPE */
	PG_ARCH_GEMMA2,		/* Gemma + post-norms, soft-capped attention
				   and logits, every other block windowed */
	PG_ARCH_GEMMA3,		/* Gemma + post-norms, Q/K RMSNorm, five
				   windowed blocks (RoPE base 10000) to one
				   global */
	PG_ARCH_PHI3,		/* Llama with fused attn_qkv and gate|up
				   tensors, NEOX RoPE (partial where
				   rope.dimension_count says) */
};

/* The feed-forward gate's activation: act(gate) * up. */
enum pg_act {
	PG_ACT_SILU = 0,	/* SwiGLU */
	PG_ACT_GELU,		/* GeGLU, GELU's tanh form (Gemma) */
};

/*
 * pg_arch - an architecture as data: what the one block function
 * (block.c) does differently per architecture.  Filled by the loader from
 * general.architecture and the <arch>.* keys; every field a model has
 * that this build cannot compute is refused at load, by name.
 */
struct pg_arch {
	enum pg_arch_id id;
	int qkv_bias;		/* attn_q/k/v.bias: 1 required, 0 optional */
	int qk_norm;		/* attn_q_norm/attn_k_norm: RMSNorm of every
				   head of Q and K (head_dim weights) before
				   RoPE */
	enum pg_act act;	/* feed-forward gate */
	enum pg_rope_mode rope_mode;
	int rope_factors;	/* rope_freqs.weight: rotary frequency i is
				   divided by factor i (Llama 3.1+) */
	float attn_scale;	/* multiplies q . k: 1/sqrt(head_dim) */
	int scale_q;		/* the scale multiplies q (after RoPE), not
				   the scores, as llama.cpp's Gemma graphs
				   do: the same bits where q is rounded to
				   the keys' type */
	float emb_scale;	/* token embeddings are multiplied by it
				   (Gemma: sqrt(n_embd)); 0: not scaled */
	int post_norms;		/* post_attention_norm, post_ffw_norm: each
				   sub-layer's output RMS-normalised before
				   its residual add (Gemma 2, 3) */
	/*
	 * Sliding-window attention: with window > 0, block i attends only to
	 * the last `window` positions (itself included) when
	 * i % swa_pattern < swa_pattern - 1 (pg_block_windowed): Gemma 3's
	 * pattern is 6 (every sixth block global), Gemma 2's 2, Mistral's 1
	 * (every block).  Windowed blocks rotate with rope_base_swa when it
	 * is not 0 (Gemma 3: 10000), the others with hp.rope_base.
	 */
	int window;
	int swa_pattern;
	float rope_base_swa;
	float attn_softcap;	/* scores capped: c tanh(s / c); 0: none */
	float final_softcap;	/* logits capped the same way; 0: none */
};

/* pg_block_windowed - whether block i of a model with arch a is windowed. */
static inline int pg_block_windowed(const struct pg_arch *a, int i)
{
	return a->window > 0 &&
	       (a->swa_pattern <= 1 || i % a->swa_pattern < a->swa_pattern - 1);
}

struct pg_hparams {
	enum pg_arch_id arch;
	int n_blocks;
	int n_embd;		/* hidden size */
	int n_heads;
	int n_kv_heads;
	int head_dim;
	int n_ff;		/* feed-forward hidden size */
	int n_vocab;
	int n_ctx_train;	/* context length the model was trained for */
	int n_rot;		/* dims of each head that RoPE rotates */
	float rms_eps;
	float rope_base;
};

/* One transformer block's weights; biases are NULL when absent. */
struct pg_block_weights {
	const float *attn_norm;		/* (n_embd) */
	/*
	 * The matrices; where the file fuses them (Phi-3's attn_qkv and
	 * gate|up ffn_up), views of the rows of the fused tensor.
	 */
	struct pg_matrix wq;		/* (n_heads * head_dim, n_embd) */
	struct pg_matrix wk;		/* (n_kv_heads * head_dim, n_embd) */
	struct pg_matrix wv;		/* (n_kv_heads * head_dim, n_embd) */
	const float *bq, *bk, *bv;
	const float *q_norm, *k_norm;	/* (head_dim) or NULL (arch.qk_norm) */
	struct pg_matrix wo;		/* (n_embd, n_heads * head_dim) */
	const float *attn_post_norm;	/* (n_embd) or NULL (arch.post_norms) */
	const float *ffn_norm;		/* (n_embd) */
	const float *ffn_post_norm;	/* (n_embd) or NULL (arch.post_norms) */
	struct pg_matrix w_gate;	/* (n_ff, n_embd) */
	struct pg_matrix w_up;		/* (n_ff, n_embd) */
	struct pg_matrix w_down;	/* (n_embd, n_ff) */
};

struct pg_model {
	struct pg_hparams hp;
	struct pg_arch arch;
	char name[128];			/* general.name, or the file's base name */
	const char *path;
	size_t weight_bytes;		/* bytes of all weights */
	struct gguf_file *file;
	struct pg_tokenizer *tok;
	char *chat_template;		/* tokenizer.chat_template or NULL */
	struct pg_matrix tok_embd;	/* (n_vocab, n_embd) */
	const float *output_norm;	/* (n_embd) */
	struct pg_matrix output;	/* (n_vocab, n_embd); tok_embd when tied */
	int tied_output;
	struct pg_block_weights *blocks;/* n_blocks */
	const float *rope_freqs;	/* (n_rot / 2) or NULL (arch.rope_factors) */
	float *owned;			/* norms/biases converted to F32 */
};

/*
 * pg_model_load - open path and load the model.  vocab_only: load only the
 * tokenizer (files without tensors are accepted), as for tokenize mode.
 * Returns 0 with *out to free with pg_model_free(), or -errno with a message
 * in err that names the file, the key or tensor, and what was expected.
 */
int pg_model_load(const char *path, int vocab_only, struct pg_model **out,
		  char *err, size_t err_len);

/*
 * pg_hparams_read - the hyper-parameters and the architecture's
 * description (*arch: norms, activation, RoPE, window, caps, scales) of
 * the GGUF file f, read and checked exactly as pg_model_load reads them,
 * without its tensors: the one reader of both (the planner's model facts
 * use it).  Returns 0, or -EINVAL with a message in err that names the
 * file, the key and what was expected.
 */
int pg_hparams_read(struct gguf_file *f, struct pg_hparams *hp,
		    struct pg_arch *arch, char *err, size_t err_len);

/* pg_model_free - unmap and free; NULL is allowed. */
void pg_model_free(struct pg_model *m);

/* The default model's file name inside the model directory. */
#define PG_DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"

/*
 * pg_model_default_path - where the default model is looked for: the file
 * named by $PAGODA_MODEL, else PG_DEFAULT_MODEL in $PAGODA_MODEL_DIR (by
 * default ~/.cache/pagoda/models, where scripts/fetch-model puts it).
 * Returns $PAGODA_MODEL itself or buf (len bytes) filled in.
 */
const char *pg_model_default_path(char *buf, size_t len);

/*
 * pg_model_identity - a 64-bit value that differs between models (name,
 * shape, weight bytes): the salt of prefix-cache hashes, so that KV pages
 * computed by one model are never found for another.
 */
uint64_t pg_model_identity(const struct pg_model *m);

/* pg_arch_name - "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
 * "phi3". */
const char *pg_arch_name(enum pg_arch_id a);

#endif
