/*
 * ggufgen.h - write GGUF v3 files of random-weight Llama-shaped models.
 *
 * For fast tests and synthetic benchmarks: any Llama (or Qwen2) shape, one
 * weight type, values drawn from a fixed seed, tensor names, shapes and
 * metadata keys as llama.cpp writes them, and a vocabulary copied from
 * another GGUF file or a small built-in byte-level BPE one.  Weights are
 * streamed row by row, so an 8B-shaped model never sits in memory.  This is
 * not a converter of real models and not the loader: it only writes.
 *
 * Linking: tests/gen/libggufgen.la needs $(ENGINE_LIBS) after it (the GGUF
 * reader for --vocab-from and the kernels' quantisation).
 */
#ifndef PAGODA_TESTS_GGUFGEN_H
#define PAGODA_TESTS_GGUFGEN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

enum ggufgen_arch {
	GGUFGEN_LLAMA = 0,	/* general.architecture "llama", llama.* keys */
	GGUFGEN_QWEN2 = 1,	/* "qwen2", qwen2.* keys, Q/K/V biases */
	GGUFGEN_QWEN3 = 2,	/* "qwen3", qwen3.* keys, attn_q_norm and
				   attn_k_norm, key_length/value_length */
	GGUFGEN_GEMMA = 3,	/* "gemma": Llama's tensors (GeGLU and the
				   embedding scale are the loader's) */
	GGUFGEN_GEMMA2 = 4,	/* "gemma2": + post_attention_norm and
				   post_ffw_norm, soft-caps, sliding window */
	GGUFGEN_GEMMA3 = 5,	/* "gemma3": gemma2's tensors + attn_q_norm
				   and attn_k_norm, sliding window */
	GGUFGEN_PHI3 = 6,	/* "phi3": fused attn_qkv, and ffn_up of
				   2 * ffn rows (gate, then up), no ffn_gate */
};

/* The built-in vocabulary's smallest size: 3 control tokens + 256 bytes. */
#define GGUFGEN_MIN_VOCAB 259

struct ggufgen_opts {
	enum ggufgen_arch arch;
	const char *name;	/* general.name; NULL: "pagoda-random" */
	int n_blocks;
	int hidden;		/* embedding_length */
	int head_dim;		/* 0: hidden / n_heads; else written as
				   attention.key_length and value_length */
	int rope_dim;		/* > 0: rope.dimension_count (partial
				   rotary), else head_dim */
	int rope_freqs;		/* llama: write rope_freqs.weight (head_dim / 2
				   factors, drawn within [0.27, 3.73]) */
	int sliding_window;	/* > 0: write <arch>.attention.sliding_window
				   (as Mistral v0.1's files have it; gemma2
				   and gemma3 need one) */
	float attn_softcap;	/* > 0: <arch>.attn_logit_softcapping */
	float final_softcap;	/* > 0: <arch>.final_logit_softcapping */
	int n_heads;
	int n_kv_heads;
	int ffn;		/* feed_forward_length */
	int n_vocab;		/* ignored with vocab_from: the file's count */
	int n_ctx;		/* context_length */
	float rope_freq_base;
	float rms_eps;
	int qkv_bias;		/* attn_{q,k,v}.bias (F32); Qwen2 has them */
	int untied;		/* write output.weight (else tied: token_embd) */
	enum pg_dtype type;	/* the matrices: F32 F16 BF16 Q8_0 Q4_0 Q4_1
				   Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K */
	enum pg_dtype embd_type;/* token_embd.weight: `type` or Q8_0 */
	int mix_q4_k_m;		/* with type Q4_K: llama.cpp's Q4_K_M mix,
				   attn_v, ffn_down and output Q6_K, the rest
				   Q4_K, and any matrix whose rows are not
				   whole 256-blocks Q5_0 */
	uint64_t seed;
	const char *vocab_from;	/* copy all tokenizer.* keys from this GGUF */
	int vocab_only;		/* metadata only, no tensors (as llama.cpp's
				   vocab files, for tokenizer-only use) */
	int n_threads;		/* drawing threads; <= 0: one per online CPU.
				 * The bytes written do not depend on it. */
};

/*
 * ggufgen_preset - fill *o with a named shape: "tiny" (2 blocks, hidden 64,
 * F32, built-in vocabulary of 384), "smollm2-135m" (Q4_1, Q8_0
 * embedding) or "llama3-8b" (BF16, untied).  Returns 0 or -EINVAL for an
 * unknown name.  Fields can be changed afterwards.
 */
int ggufgen_preset(struct ggufgen_opts *o, const char *name);

/*
 * ggufgen_check - 0 when the options describe a model that can be written,
 * else -EINVAL with a message naming the option in err.
 */
int ggufgen_check(const struct ggufgen_opts *o, char *err, size_t err_len);

/*
 * ggufgen_write - write the model to path (created or truncated; removed
 * again on failure).  Returns 0, or -EINVAL (bad options, unreadable
 * vocab_from), -ENOMEM or the -errno of a failed open or write, with a
 * message in err (always NUL-terminated when err_len > 0).
 */
int ggufgen_write(const struct ggufgen_opts *o, const char *path, char *err,
		  size_t err_len);

/*
 * ggufgen_write_mem - the same into a malloc'd buffer, for small models in
 * tests: on success *buf (free() it) holds *len bytes.
 */
int ggufgen_write_mem(const struct ggufgen_opts *o, void **buf, size_t *len,
		      char *err, size_t err_len);

/*
 * ggufgen_row - the values of row `row` of tensor `name` (ne[0] floats into
 * out) as the generator draws them, before conversion to the tensor's
 * type: what a test compares the file against.  Returns 0, -ENOENT for a
 * tensor these options do not produce, -ERANGE for a row out of range.
 * Rows are independent: each has its own stream from (seed, name, row).
 */
int ggufgen_row(const struct ggufgen_opts *o, const char *name, uint64_t row,
		float *out);

/*
 * ggufgen_tensor_shape - ne[0] and ne[1] of tensor `name` (ne[1] = 1 for
 * vectors) and its type: 0 or -ENOENT.
 */
int ggufgen_tensor_shape(const struct ggufgen_opts *o, const char *name,
			 uint64_t *ne0, uint64_t *ne1, enum pg_dtype *type);

#endif
