/*
 * cuda_impl.h - the CUDA backend's insides: its handle, the recorded form
 * of every op, and the launchers the op files (*.cu) export to
 * backend_cuda.c.
 *
 * Shared by kernels/cuda/ only, in C (backend_cuda.c) and in CUDA C++ (the
 * .cu files), so it declares plain structs and C linkage.  Device-side
 * helpers are in common.cuh.
 *
 * How an op travels: backend_cuda.c validates it, stages its host index
 * array (ids, pos, slots, or attention's sequences and page tables) in the
 * pinned host ring, and fills a struct pg_cuda_op, zeroed first so that two
 * records of the same op compare equal with memcmp.  The record is then
 * either run at once (pg_cuda_op_run: the staged bytes' copy, then the
 * op's launcher) or, between step_begin and step_end with graphs on, kept
 * in the step's list, run inside a stream capture, and replayed as a CUDA
 * graph whenever the same list comes again.  Launchers therefore read
 * everything that varies between steps from the staged device copy, and
 * size their grids from the record alone.
 */
#ifndef PAGODA_KERNELS_CUDA_IMPL_H
#define PAGODA_KERNELS_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>	/* streams, events, graphs */
#include <cublas_v2.h>		/* the prefill GEMMs */

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many decode-path tokens take the GEMV kernels (matmul.cu). */
#define PG_CUDA_GEMV_MAX_N 8

/* The largest head_dim the attention kernels take (a multiple of 8). */
#define PG_CUDA_MAX_HEAD_DIM 256

/*
 * A weight matrix or embedding as recorded: pg_matrix's fields, without
 * its padding.
 */
struct pg_cuda_mat {
	const void *data;
	int64_t n_rows;
	int64_t n_cols;
	uint64_t row_bytes;
	int32_t type;		/* enum pg_dtype */
	int32_t pad;
};

/* A KV store as recorded: pg_kv_layout's fields (cp_size 0 read as 1). */
struct pg_cuda_kv {
	void *base;
	uint64_t page_bytes;
	int32_t page_tokens;
	int32_t n_blocks;
	int32_t n_kv_heads;
	int32_t head_dim;
	int32_t type;		/* PG_F32, PG_F16 or PG_BF16 */
	int32_t cp_size;	/* >= 1 */
	int32_t cp_rank;
	int32_t pad;
};

/*
 * One sequence of an attention call on the device.  The staged blob of an
 * attention call is n_seqs of these, then n_seqs page tables of p_cap
 * entries each (sequence s's at entry s * p_cap).
 */
struct pg_cuda_attn_seq {
	int32_t n_ctx;
	int32_t first_row;
	int32_t n_rows;
	int32_t n_pages;	/* entries of its table that are filled */
};

/* Bytes staged for one op: at off in both rings; copy: this op copies. */
struct pg_cuda_staged {
	uint32_t off;
	uint32_t bytes;
	uint32_t copy;
	uint32_t pad;
};

enum pg_cuda_op_kind {
	PG_CUDA_OP_GET_ROWS = 1,
	PG_CUDA_OP_RMSNORM,
	PG_CUDA_OP_MATMUL,
	PG_CUDA_OP_ROPE,
	PG_CUDA_OP_KV_WRITE,
	PG_CUDA_OP_ATTENTION,
	PG_CUDA_OP_ATTN_MERGE,
	PG_CUDA_OP_SILU_MUL,
	PG_CUDA_OP_ADD,
	PG_CUDA_OP_GELU_MUL,
	PG_CUDA_OP_SCALE,
	PG_CUDA_OP_SOFTCAP,
	PG_CUDA_OP_SUM_PARTS,
};

struct pg_cuda_get_rows {
	struct pg_cuda_mat m;
	float *out;		/* (n, m.n_cols) */
	int32_t n;		/* ids: the op's staged int32 (n) */
	int32_t pad;
};

struct pg_cuda_rmsnorm {
	const float *x;		/* (n, dim) */
	const float *w;		/* (dim) */
	float *out;		/* (n, dim) */
	int32_t n;
	int32_t dim;
	float eps;
	int32_t pad;
};

struct pg_cuda_matmul {
	struct pg_cuda_mat w;
	const float *x;		/* (n, w.n_cols) */
	const float *bias;	/* (w.n_rows) or NULL */
	float *y;		/* (n, w.n_rows) */
	int32_t n;
	int32_t pad;
};

struct pg_cuda_rope {
	float *x;		/* (n, n_heads * head_dim) */
	int32_t n;		/* pos: the op's staged int32 (n) */
	int32_t n_heads;
	int32_t head_dim;
	int32_t n_rot;
	float theta_scale;	/* freq_base^(-2 / n_rot), powf on the host */
	int32_t mode;		/* enum pg_rope_mode */
};

struct pg_cuda_kv_write {
	struct pg_cuda_kv kv;
	const float *k;		/* (n, n_kv_heads * head_dim) */
	const float *v;		/* (n, n_kv_heads * head_dim) */
	int32_t block;
	int32_t n;		/* slots: the op's staged int32 (n) */
};

/*
 * Attention: the grid is sized from bucket (a bound on every n_ctx),
 * max_rows (the most rows of one sequence) and rows (the batch's rows, a
 * bound on first_row + n_rows), never from the staged values themselves.
 */
struct pg_cuda_attention {
	struct pg_cuda_kv kv;
	const float *q;		/* (rows, n_heads * head_dim) */
	float *out;		/* (rows, n_heads * head_dim) */
	float *lse;		/* (rows, n_heads) or NULL */
	int32_t block;
	int32_t n_heads;
	int32_t head0;
	int32_t group;
	int32_t kv_head0;
	int32_t n_seqs;
	float scale;
	int32_t p_cap;		/* page-table entries staged per sequence */
	int32_t bucket;
	int32_t max_rows;
	int32_t rows;
	int32_t window;		/* pg_attn_heads.window, 0: none */
	float softcap;		/* pg_attn_heads.softcap, 0: none */
	int32_t pad;
};

struct pg_cuda_attn_merge {
	const float *parts;	/* n_parts x part_floats */
	float *out;		/* (rows, n_heads * head_dim) */
	uint64_t part_floats;
	int32_t n_parts;
	int32_t rows;
	int32_t n_heads;
	int32_t head_dim;
};

struct pg_cuda_eltwise {
	float *x;		/* silu_mul, gelu_mul: gate; add, scale,
				 * softcap: x.  (n) */
	const float *y;		/* silu_mul, gelu_mul: up; add: y; else
				 * NULL.  (n) */
	int64_t n;
	float s;		/* scale: the factor; softcap: the cap */
	int32_t pad;
};

/*
 * sum_parts: out = ((p_0 + p_1) + ..); the n_parts part pointers are the
 * op's staged bytes (device pointers, 8 bytes each).
 */
struct pg_cuda_sum_parts {
	float *out;		/* (n) */
	int64_t n;
	int32_t n_parts;
	int32_t pad;
};

/* One recorded op; zeroed before it is filled (compared with memcmp). */
struct pg_cuda_op {
	int32_t kind;		/* enum pg_cuda_op_kind */
	int32_t pad;
	struct pg_cuda_staged st;	/* bytes == 0: nothing staged */
	union {
		struct pg_cuda_get_rows get_rows;
		struct pg_cuda_rmsnorm rmsnorm;
		struct pg_cuda_matmul matmul;
		struct pg_cuda_rope rope;
		struct pg_cuda_kv_write kv_write;
		struct pg_cuda_attention attention;
		struct pg_cuda_attn_merge attn_merge;
		struct pg_cuda_eltwise elt;
		struct pg_cuda_sum_parts sum_parts;
	} a;
};

/* One cached graph: the op list it was captured from, and its exec. */
struct pg_cuda_graph {
	struct pg_cuda_op *ops;
	size_t n_ops;
	uint64_t hash;
	uint64_t last_used;
	cudaGraphExec_t exec;
};

/* The handle: the public one first, so that casts work. */
struct pg_cuda_backend {
	struct pg_backend be;
	int device;
	int n_sm;			/* multiprocessors */
	cudaStream_t stream;		/* every op, copy and graph runs here */
	cublasHandle_t cublas;
	void *cublas_ws;		/* cuBLAS's workspace, fixed for capture */

	int failed;			/* sticky: ops are skipped once set */
	char err[256];			/* the first failure */

	/* alloc()'s live pointers, which destroy() frees (a handful) */
	void **live;
	size_t n_live, live_cap;

	/* upload(): two pinned chunks, each free once its event has fired */
	void *up_host[2];
	cudaEvent_t up_done[2];
	size_t up_chunk_bytes;
	int up_next;

	/* index staging: pinned host ring, its device twin, fill offset */
	uint8_t *meta_host;
	uint8_t *meta_dev;
	size_t meta_bytes;
	size_t meta_off;
	/* the last blob staged per kind, reused while its bytes are equal */
	struct pg_cuda_staged last[5];

	/* the ops' device scratch (activation tiles, attention partials) */
	void *ws;
	size_t ws_bytes;

	/*
	 * Dynamic shared memory a block may opt in to on this device
	 * (pg_cuda_attention_init): the tiled attention kernel for head_dim
	 * over 128 needs 101 KiB, more than sm_86/sm_89 allow (99 KiB).
	 */
	int smem_optin;

	/* CUDA graphs (PAGODA_CUDA_GRAPHS=1) */
	int graphs;			/* enabled */
	int recording;			/* inside step_begin .. step_end */
	struct pg_cuda_op *rec;		/* the step's ops so far */
	size_t n_rec, rec_cap;
	struct pg_cuda_graph *cache;	/* (n_cache), LRU by last_used */
	int n_cache;
	uint64_t tick;
};

static inline struct pg_cuda_backend *pg_cuda(struct pg_backend *be)
{
	return (struct pg_cuda_backend *)be;
}

/*
 * pg_cuda_fail - record a failure (the first one sticks) as "what: the
 * error's string (its name=code)".  Returns -EIO.
 */
int pg_cuda_fail(struct pg_cuda_backend *cb, cudaError_t e, const char *what);

/* pg_cuda_fail_blas - the same for a cuBLAS status. */
int pg_cuda_fail_blas(struct pg_cuda_backend *cb, cublasStatus_t s,
		      const char *what);

/* pg_cuda_fail_msg - a failure that is no CUDA error (a bad shape). */
int pg_cuda_fail_msg(struct pg_cuda_backend *cb, const char *msg);

/*
 * pg_cuda_launched - check the launch just made (cudaGetLastError) and
 * record a failure naming kernel.  Returns 0 or -EIO.
 */
int pg_cuda_launched(struct pg_cuda_backend *cb, const char *kernel);

/* pg_cuda_staged_dev - the device copy of an op's staged bytes. */
static inline const void *pg_cuda_staged_dev(const struct pg_cuda_backend *cb,
					     const struct pg_cuda_op *op)
{
	return cb->meta_dev + op->st.off;
}

/*
 * Workspace bytes an op needs in cb->ws (0 for none); backend_cuda.c
 * grows the workspace before the op is run or recorded.
 */
size_t pg_cuda_matmul_ws(const struct pg_cuda_matmul *a);
size_t pg_cuda_attention_ws(const struct pg_cuda_backend *cb,
			    const struct pg_cuda_attention *a);

/*
 * The launchers: enqueue the op's kernels on cb->stream, reading its
 * staged data from pg_cuda_staged_dev(cb, op), which is already copied.
 * Failures are recorded with pg_cuda_fail*(); nothing is returned.
 */
void pg_cuda_run_get_rows(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op);
void pg_cuda_run_rmsnorm(struct pg_cuda_backend *cb,
			 const struct pg_cuda_op *op);
void pg_cuda_run_matmul(struct pg_cuda_backend *cb,
			const struct pg_cuda_op *op);
void pg_cuda_run_rope(struct pg_cuda_backend *cb, const struct pg_cuda_op *op);
void pg_cuda_run_kv_write(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op);
void pg_cuda_run_attention(struct pg_cuda_backend *cb,
			   const struct pg_cuda_op *op);
void pg_cuda_run_attn_merge(struct pg_cuda_backend *cb,
			    const struct pg_cuda_op *op);
void pg_cuda_run_silu_mul(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op);
void pg_cuda_run_add(struct pg_cuda_backend *cb, const struct pg_cuda_op *op);
/* gelu_mul, scale and softcap (silu_mul.cu), sum_parts (add.cu) */
void pg_cuda_run_gelu_mul(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op);
void pg_cuda_run_scale(struct pg_cuda_backend *cb,
		       const struct pg_cuda_op *op);
void pg_cuda_run_softcap(struct pg_cuda_backend *cb,
			 const struct pg_cuda_op *op);
void pg_cuda_run_sum_parts(struct pg_cuda_backend *cb,
			   const struct pg_cuda_op *op);

/*
 * pg_cuda_attention_init - read the device's opt-in shared memory limit
 * into cb->smem_optin and raise the tiled kernels' dynamic shared memory
 * limit to what each needs, for those that fit (once per device, at
 * creation).  0 or -EIO.
 */
int pg_cuda_attention_init(struct pg_cuda_backend *cb);

/*
 * pg_cuda_argmax_launch / pg_cuda_topk_launch - sample.cu's kernels on
 * cb->stream: ids (rows) device int32, or vals/ids (rows, k) device.
 */
void pg_cuda_argmax_launch(struct pg_cuda_backend *cb, const float *logits,
			   int n_rows, int n_vocab, int32_t *ids);
void pg_cuda_topk_launch(struct pg_cuda_backend *cb, const float *logits,
			 int n_rows, int n_vocab, int k, float *vals,
			 int32_t *ids);

#ifdef __CUDACC__
#define PG_CUDA_HD __host__ __device__
#else
#define PG_CUDA_HD
#endif

/*
 * pg_cuda_n_held - of positions 0 .. n - 1, how many the store of CP rank
 * `rank` of cps holds (page runs of pt positions, dealt round-robin); its
 * local keys are numbered in position order, so a row that sees n
 * positions sees local keys 0 .. pg_cuda_n_held(n) - 1.
 */
static inline PG_CUDA_HD int pg_cuda_n_held(int n, int pt, int cps, int rank)
{
	int span = pt * cps, m = n - rank * pt, r;

	if (m <= 0)
		return 0;
	r = m % span;
	return m / span * pt + (r < pt ? r : pt);
}

#ifdef __cplusplus
}
#endif

#endif
