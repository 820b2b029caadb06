/*
 * backend.h - the operations the model calls, behind one opaque handle.
 *
 * A backend is a device's set of kernels (kernels/cpu/ today, kernels/cuda/
 * next) reached through a table of function pointers, so that the model
 * never calls SIMD intrinsics, CUDA or a thread pool itself.  Activations are
 * row-major float rows, one row per token of the batch.  Nothing here knows
 * of files, sequences' lifetimes or the daemon.
 */
#ifndef PAGODA_KERNELS_BACKEND_H
#define PAGODA_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/*
 * A weight matrix: n_rows rows (output features) of n_cols values (input
 * features), row-major in `type`; row r starts at data + r * row_bytes.
 * Quantised rows hold n_cols / 32 blocks (n_cols / 256 for the K-quants).
 */
struct pg_matrix {
	enum pg_dtype type;
	int64_t n_rows;
	int64_t n_cols;
	size_t row_bytes;
	const void *data;
	int layout;		/* enum pg_layout; 0 (rows) unless a backend
				 * repacked the matrix for itself */
};

/*
 * How a matrix's bytes are laid out.  PG_LAYOUT_ROWS: row r starts at
 * data + r * row_bytes, blocks in order (the GGUF file's layout); every
 * backend reads it.  PG_LAYOUT_PACKED: the bytes in a layout of the
 * backend's own, made by its pack operation (below); opaque to everyone
 * else, and only the backend that packed the matrix may be given it (what
 * the layout is, is that backend's business: the CPU's is in cpu.h).
 */
enum pg_layout {
	PG_LAYOUT_ROWS = 0,
	PG_LAYOUT_PACKED = 1,
};

/*
 * Paged KV storage of one stage.  Page p starts at base + p * page_bytes and
 * holds page_tokens token slots for each of the stage's n_blocks blocks:
 *
 *     page = [block][K=0,V=1][kv_head][slot][head_dim]   elements of `type`
 *
 * so that one KV head of one block is a contiguous page_tokens × head_dim
 * tile.  A token's physical slot is page * page_tokens + offset in page.
 */
struct pg_kv_layout {
	void *base;
	size_t page_bytes;
	int page_tokens;
	int n_blocks;
	int n_kv_heads;
	int head_dim;
	enum pg_dtype type;	/* PG_F32, PG_F16 or PG_BF16 */
	/*
	 * Context parallelism: with cp_size > 1 this store holds only CP rank
	 * cp_rank's share of every page.  The page tables' pages then cover
	 * page_tokens * cp_size positions each; entry j's positions
	 * j * page_tokens * cp_size + cp_rank * page_tokens + s, s in
	 * 0 .. page_tokens - 1, live in this store's page at slot s.  0 or 1:
	 * the store holds every position.
	 */
	int cp_size;
	int cp_rank;
	/*
	 * Lanes, for attention only, on a backend with exact_parallel: with
	 * lanes > 1 (page_tokens a multiple of it, at most 4), lane l of every
	 * page's slots (l * page_tokens / lanes ..) gets a softmax of its own,
	 * and the lanes are merged as attn_merge merges parts: bit for bit
	 * what `lanes` CP ranks each holding one lane compute, all-gather and
	 * merge.  attention's lse must then be NULL.  0 or 1: one softmax.
	 */
	int lanes;
};

/*
 * Which query heads an attention call computes: q and out hold n_heads
 * heads, the first being head0 of the model; the model has `group` query
 * heads per KV head, and the KV store's first KV head is kv_head0 of the
 * model.  Query head head0 + i reads the store's KV head
 * (head0 + i) / group - kv_head0.  One device: head0 = kv_head0 = 0.
 */
struct pg_attn_heads {
	int n_heads;
	int head0;
	int group;
	int kv_head0;
	/*
	 * The block's mask and scores (0: none).  window > 0: a row at
	 * position p attends only to positions p - window + 1 .. p (a
	 * sliding-window block, as llama.cpp's standard SWA masks it), and
	 * reads no page before them.  softcap > 0: every score s (after
	 * scale) becomes softcap * tanh(s / softcap) before the softmax
	 * (Gemma 2).  A backend without attn_window or attn_softcap in its
	 * ops is never given them.
	 */
	int window;
	float softcap;
};

/*
 * One sequence's share of a batch for attention: its rows are
 * first_row .. first_row + n_rows - 1 and hold positions
 * n_ctx - n_rows .. n_ctx - 1; row i attends causally to positions
 * 0 .. n_ctx - n_rows + i, read through the page table `pages`
 * (page ids, one per page_tokens positions).
 */
struct pg_attn_seq {
	const int32_t *pages;
	int n_ctx;
	int first_row;
	int n_rows;
};

/* RoPE pair layouts: NORM rotates (x[2i], x[2i+1]); NEOX (x[i], x[i+d/2]). */
enum pg_rope_mode {
	PG_ROPE_NORM = 0,
	PG_ROPE_NEOX = 2,
};

struct pg_backend;

/*
 * The operations.
 *
 * Memory: weights (pg_matrix.data), the KV store (pg_kv_layout.base) and
 * every float array are memory of this backend: allocated with alloc() and
 * filled with upload() (on the CPU backend any host memory will do).  The
 * small index arrays an op reads (get_rows' ids, rope's pos, kv_write's
 * slots, attention's seqs and their page tables) are host memory: a device
 * backend stages them itself, so the caller may reuse them when the op
 * returns.
 *
 * Ordering: ops of one backend run in the order they are called.  A device
 * backend may queue them and return early; download() and sync() wait for
 * everything queued before them.  Operations do not fail: shapes are
 * validated by the caller (the model checks them at load), so a bad shape
 * here is a programming error; a device fault is reported by the next
 * download() or sync().
 */
struct pg_backend_ops {
	const char *name;

	/*
	 * 1 when this backend's memory is host memory (the CPU backend):
	 * callers may then hand it views of host memory, such as a mapped
	 * model file, without alloc() and upload().
	 */
	int host_memory;

	/*
	 * 1 when this backend has matmul_parts and add_parts and honours
	 * pg_kv_layout's lanes: what forward.c needs to give every TP and CP
	 * plan the bits one device gives (see forward.c).  0: those are NULL
	 * and lanes are never set.
	 */
	int exact_parallel;

	/* Destroy the backend and everything it owns (alloc()'s memory too). */
	void (*destroy)(struct pg_backend *be);

	/*
	 * alloc - bytes of this backend's memory, aligned to 256 bytes, or
	 * NULL when it has not that much free (errno ENOMEM).  Contents are
	 * undefined.  free(NULL) is a no-op.
	 */
	void *(*alloc)(struct pg_backend *be, size_t bytes);
	void (*free)(struct pg_backend *be, void *p);

	/*
	 * upload - copy bytes from host memory src to this backend's memory
	 * dst; download - the other way, waiting until the bytes are there.
	 * src may be reused as soon as upload returns.  Both return 0, or a
	 * negative errno with a message in err (a device fault: EIO).
	 */
	int (*upload)(struct pg_backend *be, void *dst, const void *src,
		      size_t bytes, char *err, size_t err_len);
	int (*download)(struct pg_backend *be, void *dst, const void *src,
			size_t bytes, char *err, size_t err_len);

	/*
	 * sync - wait until every op called so far has finished.  0, or a
	 * negative errno with a message in err naming the failed call.
	 */
	int (*sync)(struct pg_backend *be, char *err, size_t err_len);

	/* out[i] = row ids[i] of m as floats.  out: (n, m->n_cols) */
	void (*get_rows)(struct pg_backend *be, const struct pg_matrix *m,
			 const int32_t *ids, int n, float *out);

	/* out[i] = x[i] / rms(x[i]) * w.  x, out: (n, dim); w: (dim). In place ok. */
	void (*rmsnorm)(struct pg_backend *be, const float *x, const float *w,
			int n, int dim, float eps, float *out);

	/*
	 * y[i] = w · x[i] (+ bias).  x: (n, w->n_cols); y: (n, w->n_rows);
	 * bias: (w->n_rows) or NULL.  Quantised weights take the activations
	 * quantised to 8 bits (Q8_0, or Q8_1 for Q4_1), as llama.cpp does.
	 */
	void (*matmul)(struct pg_backend *be, const struct pg_matrix *w,
		       const float *x, int n, const float *bias, float *y);

	/*
	 * matmul_parts - optional (exact_parallel): the input columns cut into
	 * n_parts runs at cols[0] = 0 < cols[1] < .. < cols[n_parts] =
	 * w->n_cols (multiples of the type's block size: 32, or 256 for the
	 * K-quants; otherwise every output is NaN), and part p =
	 * W[:, cols[p] .. cols[p + 1] - 1] · x[:, the same], computed as
	 * matmul computes a matrix of just those columns.  x: (n,
	 * w->n_cols).  sum 0: out (n_parts, n, w->n_rows), the parts; sum 1:
	 * out (n, w->n_rows), the parts summed in order (((p_0 + p_1) + p_2)
	 * + ..), bit for bit the sum add_parts adds.
	 */
	void (*matmul_parts)(struct pg_backend *be, const struct pg_matrix *w,
			     const float *x, int n, int n_parts,
			     const int64_t *cols, int sum, float *out);

	/*
	 * add_parts - optional (exact_parallel): x[i] += (((p_0[i] + p_1[i])
	 * + p_2[i]) + ..) for n values, p_k = parts[k] (memory of this
	 * backend; the array of pointers is host memory): always this order,
	 * so the result depends only on the parts.  n_parts >= 1.
	 */
	void (*add_parts)(struct pg_backend *be, float *x,
			  const float *const *parts, int n_parts, int64_t n);

	/*
	 * Rotate the first n_rot dims of every head of x in place.
	 * x: (n, n_heads * head_dim); pos: (n) token positions.
	 */
	void (*rope)(struct pg_backend *be, float *x, int n, int n_heads,
		     int head_dim, int n_rot, const int32_t *pos,
		     float freq_base, enum pg_rope_mode mode);

	/*
	 * Store K and V of n tokens of block `block` into their slots.
	 * k, v: (n, n_kv_heads * head_dim); slots: (n) physical slots, or -1
	 * for a token this store does not hold (another CP rank's).
	 */
	void (*kv_write)(struct pg_backend *be, const struct pg_kv_layout *kv,
			 int block, const float *k, const float *v, int n,
			 const int32_t *slots);

	/*
	 * Causal attention of block `block`, grouped-query aware (see struct
	 * pg_attn_heads), over the positions the store holds.
	 * q, out: (rows of the batch, heads->n_heads * head_dim).  lse, when
	 * not NULL: (rows, heads->n_heads), the log of each softmax's
	 * denominator including its maximum (log sum exp(score)), -inf for a
	 * row that has no key here (its out is then 0): what attn_merge needs
	 * to combine the shares of several CP ranks exactly.
	 */
	void (*attention)(struct pg_backend *be, const struct pg_kv_layout *kv,
			  int block, const float *q,
			  const struct pg_attn_heads *heads,
			  const struct pg_attn_seq *seqs, int n_seqs,
			  float scale, float *out, float *lse);

	/*
	 * Merge n_parts partial attentions of the same queries over disjoint
	 * key sets: out = sum_p exp(lse_p - L) out_p / sum_p exp(lse_p - L),
	 * L the largest lse_p, summed in part order.  Part p starts at parts
	 * + p * part_floats and holds its out (rows, n_heads * head_dim) then
	 * its lse (rows, n_heads), as attention wrote them.
	 * out: (rows, n_heads * head_dim).
	 */
	void (*attn_merge)(struct pg_backend *be, const float *parts,
			   size_t part_floats, int n_parts, int rows,
			   int n_heads, int head_dim, float *out);

	/* gate[i] = silu(gate[i]) * up[i] for n values. */
	void (*silu_mul)(struct pg_backend *be, float *gate, const float *up,
			 int64_t n);

	/* x[i] += y[i] for n values. */
	void (*add)(struct pg_backend *be, float *x, const float *y, int64_t n);

	/*
	 * step_begin / step_end - optional (NULL on a backend without them):
	 * bracket the ops of one forward step of one device, so that a device
	 * backend may record them and, when the same sequence of ops with the
	 * same shapes and the same backend pointers comes again, replay it as
	 * one graph (CUDA graphs, one per batch shape).  Only the host index
	 * arrays (ids, pos, slots, seqs and page tables) may differ between
	 * replays.  Between the two calls the caller makes no download(),
	 * sync() or communicator call.  step_end returns like sync().
	 */
	void (*step_begin)(struct pg_backend *be);
	int (*step_end)(struct pg_backend *be, char *err, size_t err_len);

	/*
	 * Optional ops of other architectures (NULL where a backend has none:
	 * the forward pass then refuses models that need them, by name).
	 *
	 * gelu_mul: gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form
	 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Gemma's GeGLU).
	 * scale: x[i] *= s (Gemma's embedding scale sqrt(n_embd)).
	 * softcap: x[i] = cap * tanh(x[i] / cap) (Gemma 2's final logits).
	 * sum_parts: out[i] = ((p_0[i] + p_1[i]) + ..), the sum add_parts
	 * adds, bit for bit (a row-split product followed by a norm).
	 */
	void (*gelu_mul)(struct pg_backend *be, float *gate, const float *up,
			 int64_t n);
	void (*scale)(struct pg_backend *be, float *x, float s, int64_t n);
	void (*softcap)(struct pg_backend *be, float *x, float cap, int64_t n);
	void (*sum_parts)(struct pg_backend *be, float *out,
			  const float *const *parts, int n_parts, int64_t n);

	/* attention honours pg_attn_heads' window and softcap */
	int attn_window;
	int attn_softcap;

	/*
	 * rope_factors - optional (NULL where a backend has none, and the
	 * forward pass then refuses models that need it): rope with rotary
	 * frequency i divided by factors[i] (n_rot / 2 floats, memory of this
	 * backend), as llama.cpp's freq_factors (Llama 3.1+'s rope_freqs).
	 */
	void (*rope_factors)(struct pg_backend *be, float *x, int n,
			     int n_heads, int head_dim, int n_rot,
			     const int32_t *pos, float freq_base,
			     enum pg_rope_mode mode, const float *factors);

	/*
	 * n_threads, kernels - optional figures for the operator: the threads
	 * this backend runs on (NULL: 1) and the name of the kernels it runs,
	 * e.g. the CPU's table "avx2" (NULL: name).
	 */
	int (*n_threads)(const struct pg_backend *be);
	const char *(*kernels)(const struct pg_backend *be);

	/*
	 * pack_bytes, pack - optional: matrices this backend runs faster in a
	 * layout of its own (PG_LAYOUT_PACKED; the CPU: Q4_0, Q4_1, Q5_0 in
	 * groups of 8 rows, and on AVX-512 VNNI Q4_K, Q5_K, Q6_K in groups
	 * of 16).  pack_bytes: the bytes m takes so, or 0 when it is
	 * not to be repacked.  pack: m repacked into dst (pack_bytes bytes,
	 * 32-byte aligned, not overlapping m), m then describing dst; its
	 * products give the same bits as before.  Only this backend may then
	 * be given m.
	 */
	size_t (*pack_bytes)(struct pg_backend *be, const struct pg_matrix *m);
	void (*pack)(struct pg_backend *be, struct pg_matrix *m, void *dst);
};

/* The handle every backend's own struct starts with. */
struct pg_backend {
	const struct pg_backend_ops *ops;
};

#endif
