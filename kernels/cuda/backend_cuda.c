/*
 * backend_cuda.c - the CUDA backend's host side: creation, memory ops,
 * error handling, index staging, the op table, and CUDA graphs.
 *
 * No kernel is here: each op's kernels and launcher are in its own .cu
 * file.  An op call validates its shapes, stages its host index array in
 * the pinned ring (cuda_impl.h explains the journey of an op), and runs or
 * records the op.
 *
 * Index staging: meta_host (pinned) and meta_dev have the same size and
 * offsets; an op's bytes are written at meta_off in the host ring and
 * copied to the same offset on the device by the op itself, on the stream.
 * The ring only moves forward and is rewound when the stream is known to
 * be idle (download, sync, step_end, or a full ring, which waits first).
 * A blob equal to the last one of its kind (rope's positions for q then k,
 * attention's sequences for every block) is not staged again.
 *
 * Graphs: with PAGODA_CUDA_GRAPHS=1, step_begin() waits for the stream,
 * rewinds the ring and starts keeping records instead of running them.
 * step_end() looks the list up among the cached graphs (by hash, then
 * memcmp of the records, which hold pointers, shapes, grid buckets and
 * ring offsets): a hit launches the cached graph, whose copy nodes read
 * the ring where this step's indices now are; a miss captures the list on
 * the stream, instantiates and launches it.  Anything that cannot be
 * recorded (a full ring, an upload) runs the records so far and finishes
 * the step without a graph, as does a step with a prompt in it (a matmul
 * past the GEMV path: graph_worthy); a capture that fails turns graphs
 * off for the backend and runs the step without one (graph_abandon).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_impl.h"

#define CUDA_UP_CHUNK_BYTES (4u << 20)	/* per pinned upload chunk */
#define CUDA_META_BYTES (4u << 20)	/* initial index ring */
#define CUDA_CUBLAS_WS_BYTES (32u << 20)	/* cuBLAS's, Hopper's advice */
#define CUDA_GRAPH_CACHE 64		/* graphs kept per backend */

/* Kinds of staged blobs, each with its own "last" for reuse. */
enum { META_IDS, META_POS, META_SLOTS, META_ATTN, META_PTRS };

/* Remember p as live, growing the set if need be: 0 or -ENOMEM. */
static int live_add(struct pg_cuda_backend *cb, void *p)
{
	if (cb->n_live == cb->live_cap) {
		size_t cap = cb->live_cap ? 2 * cb->live_cap : 16;
		void **v = realloc(cb->live, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		cb->live = v;
		cb->live_cap = cap;
	}
	cb->live[cb->n_live++] = p;
	return 0;
}

/* Forget p (weights, KV, scratch: few, freed rarely, so a linear scan). */
static void live_del(struct pg_cuda_backend *cb, const void *p)
{
	for (size_t i = 0; i < cb->n_live; i++)
		if (cb->live[i] == p) {
			cb->live[i] = cb->live[--cb->n_live];
			return;
		}
}

/* Format a message into buf (len bytes, may be 0). */
static void __attribute__((format(printf, 3, 4)))
say(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

int pg_cuda_fail(struct pg_cuda_backend *cb, cudaError_t e, const char *what)
{
	if (!cb->failed) {
		say(cb->err, sizeof(cb->err), "%s: %s (%s=%d)", what,
		    cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
		cb->failed = 1;
	}
	return -EIO;
}

int pg_cuda_fail_blas(struct pg_cuda_backend *cb, cublasStatus_t s,
		      const char *what)
{
	if (!cb->failed) {
		say(cb->err, sizeof(cb->err), "%s: %s (%s=%d)", what,
		    cublasGetStatusString(s), cublasGetStatusName(s), (int)s);
		cb->failed = 1;
	}
	return -EIO;
}

int pg_cuda_fail_msg(struct pg_cuda_backend *cb, const char *msg)
{
	if (!cb->failed) {
		say(cb->err, sizeof(cb->err), "%s", msg);
		cb->failed = 1;
	}
	return -EIO;
}

int pg_cuda_launched(struct pg_cuda_backend *cb, const char *kernel)
{
	cudaError_t e = cudaGetLastError();
	char what[96];

	if (e == cudaSuccess)
		return 0;
	say(what, sizeof(what), "kernel %s", kernel);
	return pg_cuda_fail(cb, e, what);
}

/* Check a CUDA call; on failure record it under `what`.  0 or -EIO. */
static int ck(struct pg_cuda_backend *cb, cudaError_t e, const char *what)
{
	return e == cudaSuccess ? 0 : pg_cuda_fail(cb, e, what);
}

/* -EIO with the sticky message in err when the backend has failed. */
static int report(struct pg_cuda_backend *cb, char *err, size_t err_len)
{
	if (!cb->failed)
		return 0;
	say(err, err_len, "%s", cb->err);
	return -EIO;
}

/* Make the backend's device current on this thread. */
static int enter(struct pg_cuda_backend *cb)
{
	if (cb->failed)
		return -EIO;
	return ck(cb, cudaSetDevice(cb->device), "cudaSetDevice");
}

int pg_cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

int pg_cuda_device_info(int device, struct pg_cuda_device_info *out,
			char *err, size_t err_len)
{
	struct cudaDeviceProp p;
	size_t free_b = 0, total_b = 0;
	int n = pg_cuda_device_count(), bus = 0, clk = 0, was = -1;
	cudaError_t e;

	memset(out, 0, sizeof(*out));
	if (device < 0 || device >= n) {
		say(err, err_len, "no CUDA device %d: %d device(s)", device, n);
		return -ENODEV;
	}
	e = cudaGetDeviceProperties(&p, device);
	if (e == cudaSuccess)
		e = cudaGetDevice(&was);
	if (e == cudaSuccess)
		e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&free_b, &total_b);
	if (was >= 0)	/* the caller's current device stays current */
		cudaSetDevice(was);
	if (e != cudaSuccess) {
		say(err, err_len, "CUDA device %d: %s (%s=%d)", device,
		    cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
		cudaGetLastError();
		return -EIO;
	}
	snprintf(out->name, sizeof(out->name), "%s", p.name);
	out->total_bytes = total_b;
	out->free_bytes = free_b;
	out->sm_count = p.multiProcessorCount;
	out->cc_major = p.major;
	out->cc_minor = p.minor;
	/* CUDA 13 dropped these from cudaDeviceProp; attributes remain. */
	if (cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth,
				   device) != cudaSuccess ||
	    cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate,
				   device) != cudaSuccess) {
		cudaGetLastError();
		bus = clk = 0;
	}
	out->mem_bus_bits = bus;
	out->mem_clock_khz = clk;
	out->peak_bandwidth_gbs = 2.0 * clk * 1e3 * (bus / 8.0) / 1e9;
	return 0;
}

void *pg_cuda_backend_stream(struct pg_backend *be)
{
	return pg_cuda(be)->stream;
}

/* ---- graphs' cache ---- */

static void graph_drop(struct pg_cuda_graph *g)
{
	if (g->exec)
		cudaGraphExecDestroy(g->exec);
	free(g->ops);
	memset(g, 0, sizeof(*g));
}

/* Forget every cached graph (their pointers into ws or the ring moved). */
static void graphs_clear(struct pg_cuda_backend *cb)
{
	for (int i = 0; i < cb->n_cache; i++)
		graph_drop(&cb->cache[i]);
	cb->n_cache = 0;
}

/* ---- index staging ---- */

static void meta_rewind(struct pg_cuda_backend *cb)
{
	cb->meta_off = 0;
	memset(cb->last, 0, sizeof(cb->last));
}

static void record_flush(struct pg_cuda_backend *cb);

/* Wait for the stream, then rewind the ring. */
static int meta_drain(struct pg_cuda_backend *cb)
{
	if (cb->recording)
		record_flush(cb);
	if (ck(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize"))
		return -EIO;
	meta_rewind(cb);
	return 0;
}

/* Replace the ring by one of at least `bytes` (the stream is idle). */
static int meta_grow(struct pg_cuda_backend *cb, size_t bytes)
{
	size_t sz = cb->meta_bytes ? cb->meta_bytes : CUDA_META_BYTES;
	char what[64];

	while (sz < bytes)
		sz *= 2;
	if (sz > UINT32_MAX)
		return pg_cuda_fail_msg(cb, "index staging: over 4 GiB");
	graphs_clear(cb);
	cudaFreeHost(cb->meta_host);
	cudaFree(cb->meta_dev);
	cb->meta_host = cb->meta_dev = NULL;
	cb->meta_bytes = 0;
	say(what, sizeof(what), "cudaHostAlloc(%zu KiB)", sz >> 10);
	if (ck(cb, cudaHostAlloc((void **)&cb->meta_host, sz,
				 cudaHostAllocDefault), what))
		return -EIO;
	say(what, sizeof(what), "cudaMalloc(%zu KiB)", sz >> 10);
	if (ck(cb, cudaMalloc((void **)&cb->meta_dev, sz), what))
		return -EIO;
	cb->meta_bytes = sz;
	return 0;
}

/*
 * Room for bytes in the host ring: its address, with *off its offset; NULL
 * on failure (recorded).  A full ring is drained (which ends recording).
 */
static void *meta_reserve(struct pg_cuda_backend *cb, size_t bytes,
			  uint32_t *off)
{
	size_t at = (cb->meta_off + 15) & ~(size_t)15;

	if (at + bytes > cb->meta_bytes) {
		if (meta_drain(cb))
			return NULL;
		at = 0;
		if (bytes > cb->meta_bytes && meta_grow(cb, bytes))
			return NULL;
	}
	cb->meta_off = at + bytes;
	*off = (uint32_t)at;
	return cb->meta_host + at;
}

/*
 * Finish staging bytes at off (just reserved) as a blob of `kind`: reuse
 * the last blob of that kind when equal, else this op copies its own.
 */
static void meta_commit(struct pg_cuda_backend *cb, int kind, uint32_t off,
			size_t bytes, struct pg_cuda_staged *st)
{
	struct pg_cuda_staged *last = &cb->last[kind];

	st->bytes = (uint32_t)bytes;
	if (last->bytes == bytes && last->off != off &&
	    !memcmp(cb->meta_host + last->off, cb->meta_host + off, bytes)) {
		cb->meta_off = off;	/* give the room back */
		st->off = last->off;
		st->copy = 0;
		return;
	}
	st->off = off;
	st->copy = 1;
	*last = *st;
}

/* Stage n int32s of src as a blob of `kind`.  0 or -EIO. */
static int stage_i32(struct pg_cuda_backend *cb, int kind, const int32_t *src,
		     int n, struct pg_cuda_staged *st)
{
	size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int32_t);
	uint32_t off;
	void *p = meta_reserve(cb, bytes, &off);

	if (!p)
		return -EIO;
	memset(p, 0, bytes);
	if (n > 0)
		memcpy(p, src, (size_t)n * sizeof(int32_t));
	meta_commit(cb, kind, off, bytes, st);
	return 0;
}

/* ---- the workspace ---- */

/* Make cb->ws hold at least `need` bytes.  0 or -EIO. */
static int ws_reserve(struct pg_cuda_backend *cb, size_t need)
{
	size_t sz = cb->ws_bytes * 2;
	char what[64];

	if (need <= cb->ws_bytes)
		return 0;
	if (ck(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize"))
		return -EIO;
	graphs_clear(cb);
	cudaFree(cb->ws);
	cb->ws = NULL;
	cb->ws_bytes = 0;
	if (sz < need)
		sz = need;
	sz = (sz + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
	if (cudaMalloc(&cb->ws, sz) != cudaSuccess) {
		cudaGetLastError();
		sz = need;
		say(what, sizeof(what), "workspace cudaMalloc(%zu MiB)",
		    (sz + (1u << 20) - 1) >> 20);
		if (ck(cb, cudaMalloc(&cb->ws, sz), what))
			return -EIO;
	}
	cb->ws_bytes = sz;
	return 0;
}

/* ---- running and recording ops ---- */

static void op_run(struct pg_cuda_backend *cb, const struct pg_cuda_op *op)
{
	if (cb->failed)
		return;
	if (op->st.bytes && op->st.copy &&
	    ck(cb, cudaMemcpyAsync(cb->meta_dev + op->st.off,
				   cb->meta_host + op->st.off, op->st.bytes,
				   cudaMemcpyHostToDevice, cb->stream),
	       "cudaMemcpyAsync(indices)"))
		return;
	switch (op->kind) {
	case PG_CUDA_OP_GET_ROWS: pg_cuda_run_get_rows(cb, op); break;
	case PG_CUDA_OP_RMSNORM: pg_cuda_run_rmsnorm(cb, op); break;
	case PG_CUDA_OP_MATMUL: pg_cuda_run_matmul(cb, op); break;
	case PG_CUDA_OP_ROPE: pg_cuda_run_rope(cb, op); break;
	case PG_CUDA_OP_KV_WRITE: pg_cuda_run_kv_write(cb, op); break;
	case PG_CUDA_OP_ATTENTION: pg_cuda_run_attention(cb, op); break;
	case PG_CUDA_OP_ATTN_MERGE: pg_cuda_run_attn_merge(cb, op); break;
	case PG_CUDA_OP_SILU_MUL: pg_cuda_run_silu_mul(cb, op); break;
	case PG_CUDA_OP_ADD: pg_cuda_run_add(cb, op); break;
	case PG_CUDA_OP_GELU_MUL: pg_cuda_run_gelu_mul(cb, op); break;
	case PG_CUDA_OP_SCALE: pg_cuda_run_scale(cb, op); break;
	case PG_CUDA_OP_SOFTCAP: pg_cuda_run_softcap(cb, op); break;
	case PG_CUDA_OP_SUM_PARTS: pg_cuda_run_sum_parts(cb, op); break;
	}
}

/* Run the step's records so far and stop recording it. */
static void record_flush(struct pg_cuda_backend *cb)
{
	cb->recording = 0;
	for (size_t i = 0; i < cb->n_rec; i++)
		op_run(cb, &cb->rec[i]);
	cb->n_rec = 0;
}

/* Run op now, or keep it for the step's graph. */
static void submit(struct pg_cuda_backend *cb, const struct pg_cuda_op *op)
{
	if (cb->failed)
		return;
	if (!cb->recording) {
		op_run(cb, op);
		return;
	}
	if (cb->n_rec == cb->rec_cap) {
		size_t cap = cb->rec_cap ? cb->rec_cap * 2 : 256;
		struct pg_cuda_op *r = realloc(cb->rec, cap * sizeof(*r));

		if (!r) {
			record_flush(cb);
			op_run(cb, op);
			return;
		}
		cb->rec = r;
		cb->rec_cap = cap;
	}
	/* memcpy: the records are compared bytewise, padding included */
	memcpy(&cb->rec[cb->n_rec++], op, sizeof(*op));
}

/* Enter the device for an op and zero its record.  0 when it may run. */
static int op_begin(struct pg_cuda_backend *cb, struct pg_cuda_op *op,
		    int kind)
{
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	return enter(cb);
}

static void mat_of(struct pg_cuda_mat *m, const struct pg_matrix *w)
{
	m->data = w->data;
	m->n_rows = w->n_rows;
	m->n_cols = w->n_cols;
	m->row_bytes = w->row_bytes;
	m->type = (int32_t)w->type;
}

static void kv_of(struct pg_cuda_kv *k, const struct pg_kv_layout *kv)
{
	k->base = kv->base;
	k->page_bytes = kv->page_bytes;
	k->page_tokens = kv->page_tokens;
	k->n_blocks = kv->n_blocks;
	k->n_kv_heads = kv->n_kv_heads;
	k->head_dim = kv->head_dim;
	k->type = (int32_t)kv->type;
	k->cp_size = kv->cp_size > 1 ? kv->cp_size : 1;
	k->cp_rank = kv->cp_size > 1 ? kv->cp_rank : 0;
}

static int weight_type_ok(enum pg_dtype t)
{
	switch (t) {
	case PG_F32: case PG_F16: case PG_BF16:
	case PG_Q8_0: case PG_Q4_0: case PG_Q4_1: case PG_Q5_0: case PG_Q5_1:
	case PG_Q2_K: case PG_Q3_K: case PG_Q4_K: case PG_Q5_K: case PG_Q6_K:
		return 1;
	default:
		return 0;
	}
}

static int kv_ok(struct pg_cuda_backend *cb, const struct pg_kv_layout *kv,
		 const char *op)
{
	char msg[160];

	if ((kv->type == PG_F32 || kv->type == PG_F16 || kv->type == PG_BF16) &&
	    kv->head_dim > 0 && kv->head_dim % 8 == 0 &&
	    kv->head_dim <= PG_CUDA_MAX_HEAD_DIM &&
	    ((uintptr_t)kv->base | kv->page_bytes) % 16 == 0)
		return 1;
	say(msg, sizeof(msg), "%s: KV store of %s, head_dim %d, base %p, "
	    "page_bytes %zu not supported (head_dim a multiple of 8 up to %d, "
	    "16-byte aligned pages)", op, pg_dtype_name(kv->type),
	    kv->head_dim, kv->base, kv->page_bytes, PG_CUDA_MAX_HEAD_DIM);
	pg_cuda_fail_msg(cb, msg);
	return 0;
}

/* ---- the ops ---- */

static void cuda_get_rows(struct pg_backend *be, const struct pg_matrix *m,
			  const int32_t *ids, int n, float *out)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, PG_CUDA_OP_GET_ROWS) || n <= 0)
		return;
	if (!weight_type_ok(m->type) ||
	    m->n_cols % pg_dtype_block_size(m->type)) {
		pg_cuda_fail_msg(cb, "get_rows: weight type not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K)");
		return;
	}
	mat_of(&op.a.get_rows.m, m);
	op.a.get_rows.out = out;
	op.a.get_rows.n = n;
	if (stage_i32(cb, META_IDS, ids, n, &op.st))
		return;
	submit(cb, &op);
}

static void cuda_rmsnorm(struct pg_backend *be, const float *x,
			 const float *w, int n, int dim, float eps, float *out)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, PG_CUDA_OP_RMSNORM) || n <= 0 || dim <= 0)
		return;
	op.a.rmsnorm.x = x;
	op.a.rmsnorm.w = w;
	op.a.rmsnorm.out = out;
	op.a.rmsnorm.n = n;
	op.a.rmsnorm.dim = dim;
	op.a.rmsnorm.eps = eps;
	submit(cb, &op);
}

static void cuda_matmul(struct pg_backend *be, const struct pg_matrix *w,
			const float *x, int n, const float *bias, float *y)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;
	char msg[96];

	if (op_begin(cb, &op, PG_CUDA_OP_MATMUL) || n <= 0)
		return;
	if (w->layout != PG_LAYOUT_ROWS) {
		pg_cuda_fail_msg(cb, "matmul: a matrix packed by another backend (its pack operation) given to a CUDA device");
		return;
	}
	if (!weight_type_ok(w->type) ||
	    w->n_cols % pg_dtype_block_size(w->type)) {
		say(msg, sizeof(msg), "matmul: %s weights of %lld columns not "
		    "supported", pg_dtype_name(w->type), (long long)w->n_cols);
		pg_cuda_fail_msg(cb, msg);
		return;
	}
	mat_of(&op.a.matmul.w, w);
	op.a.matmul.x = x;
	op.a.matmul.bias = bias;
	op.a.matmul.y = y;
	op.a.matmul.n = n;
	if (ws_reserve(cb, pg_cuda_matmul_ws(&op.a.matmul)))
		return;
	submit(cb, &op);
}

static void cuda_rope(struct pg_backend *be, float *x, int n, int n_heads,
		      int head_dim, int n_rot, const int32_t *pos,
		      float freq_base, enum pg_rope_mode mode)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, PG_CUDA_OP_ROPE) || n <= 0 || n_rot < 2)
		return;
	if (n_rot > head_dim || n_rot > 1024 || n_rot % 2) {
		pg_cuda_fail_msg(cb, "rope: n_rot must be even, <= head_dim "
				 "and <= 1024");
		return;
	}
	op.a.rope.x = x;
	op.a.rope.n = n;
	op.a.rope.n_heads = n_heads;
	op.a.rope.head_dim = head_dim;
	op.a.rope.n_rot = n_rot;
	/* powf here, as rope.c, so that the angles start from the same bits */
	op.a.rope.theta_scale = powf(freq_base, -2.0f / (float)n_rot);
	op.a.rope.mode = (int32_t)mode;
	if (stage_i32(cb, META_POS, pos, n, &op.st))
		return;
	submit(cb, &op);
}

static void cuda_kv_write(struct pg_backend *be,
			  const struct pg_kv_layout *kv, int block,
			  const float *k, const float *v, int n,
			  const int32_t *slots)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, PG_CUDA_OP_KV_WRITE) || n <= 0 ||
	    !kv_ok(cb, kv, "kv_write"))
		return;
	kv_of(&op.a.kv_write.kv, kv);
	op.a.kv_write.k = k;
	op.a.kv_write.v = v;
	op.a.kv_write.block = block;
	op.a.kv_write.n = n;
	if (stage_i32(cb, META_SLOTS, slots, n, &op.st))
		return;
	submit(cb, &op);
}

/*
 * The positions an attention grid covers: a power of two while recording
 * (few graph shapes), the next multiple of 256 otherwise.
 */
static int attn_bucket(const struct pg_cuda_backend *cb, int max_ctx)
{
	int b = 256;

	if (!cb->recording)
		return max_ctx > 256 ? (max_ctx + 255) / 256 * 256 : 256;
	while (b < max_ctx)
		b *= 2;
	return b;
}

/* Stage the sequences and their page tables (struct pg_cuda_attn_seq). */
static int attn_stage(struct pg_cuda_backend *cb, struct pg_cuda_op *op,
		      const struct pg_attn_seq *seqs)
{
	const struct pg_cuda_attention *a = &op->a.attention;
	int span = a->kv.page_tokens * a->kv.cp_size;
	int first = a->kv.cp_rank * a->kv.page_tokens;
	size_t bytes = (size_t)a->n_seqs * sizeof(struct pg_cuda_attn_seq) +
		       (size_t)a->n_seqs * (size_t)a->p_cap * sizeof(int32_t);
	struct pg_cuda_attn_seq *d;
	int32_t *pages;
	uint32_t off;

	d = meta_reserve(cb, bytes, &off);
	if (!d)
		return -EIO;
	memset(d, 0, bytes);
	pages = (int32_t *)(d + a->n_seqs);
	for (int s = 0; s < a->n_seqs; s++) {
		int nc = seqs[s].n_ctx;
		int np = nc > first ? (nc - first + span - 1) / span : 0;

		d[s].n_ctx = nc;
		d[s].first_row = seqs[s].first_row;
		d[s].n_rows = seqs[s].n_rows;
		d[s].n_pages = np;
		if (np)
			memcpy(pages + (size_t)s * (size_t)a->p_cap,
			       seqs[s].pages, (size_t)np * sizeof(int32_t));
	}
	meta_commit(cb, META_ATTN, off, bytes, &op->st);
	return 0;
}

static void cuda_attention(struct pg_backend *be,
			   const struct pg_kv_layout *kv, int block,
			   const float *q, const struct pg_attn_heads *heads,
			   const struct pg_attn_seq *seqs, int n_seqs,
			   float scale, float *out, float *lse)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_attention *a;
	struct pg_cuda_op op;
	int max_ctx = 0, span;

	if (op_begin(cb, &op, PG_CUDA_OP_ATTENTION) || n_seqs <= 0 ||
	    heads->n_heads <= 0 || !kv_ok(cb, kv, "attention"))
		return;
	if (n_seqs > 65535) {
		pg_cuda_fail_msg(cb, "attention: over 65535 sequences");
		return;
	}
	if (kv->lanes > 1) {	/* exact_parallel is 0: never asked */
		pg_cuda_fail_msg(cb, "attention: lanes (exact parallel sums) are not supported on CUDA");
		return;
	}
	a = &op.a.attention;
	kv_of(&a->kv, kv);
	a->q = q;
	a->out = out;
	a->lse = lse;
	a->block = block;
	a->n_heads = heads->n_heads;
	a->head0 = heads->head0;
	a->group = heads->group;
	a->kv_head0 = heads->kv_head0;
	a->n_seqs = n_seqs;
	a->scale = scale;
	a->window = heads->window > 0 ? heads->window : 0;
	a->softcap = heads->softcap > 0.0f ? heads->softcap : 0.0f;
	for (int s = 0; s < n_seqs; s++) {
		int end = seqs[s].first_row + seqs[s].n_rows;

		max_ctx = seqs[s].n_ctx > max_ctx ? seqs[s].n_ctx : max_ctx;
		a->max_rows = seqs[s].n_rows > a->max_rows ? seqs[s].n_rows :
			      a->max_rows;
		a->rows = end > a->rows ? end : a->rows;
	}
	span = kv->page_tokens * a->kv.cp_size;
	a->bucket = attn_bucket(cb, max_ctx);
	a->p_cap = (a->bucket + span - 1) / span;
	if (a->max_rows <= 0)
		return;
	if (attn_stage(cb, &op, seqs) ||
	    ws_reserve(cb, pg_cuda_attention_ws(cb, a)))
		return;
	submit(cb, &op);
}

static void cuda_attn_merge(struct pg_backend *be, const float *parts,
			    size_t part_floats, int n_parts, int rows,
			    int n_heads, int head_dim, float *out)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, PG_CUDA_OP_ATTN_MERGE) || rows <= 0 ||
	    n_heads <= 0 || head_dim <= 0)
		return;
	op.a.attn_merge.parts = parts;
	op.a.attn_merge.out = out;
	op.a.attn_merge.part_floats = part_floats;
	op.a.attn_merge.n_parts = n_parts;
	op.a.attn_merge.rows = rows;
	op.a.attn_merge.n_heads = n_heads;
	op.a.attn_merge.head_dim = head_dim;
	submit(cb, &op);
}

static void cuda_eltwise(struct pg_backend *be, int kind, float *x,
			 const float *y, int64_t n)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, kind) || n <= 0)
		return;
	op.a.elt.x = x;
	op.a.elt.y = y;
	op.a.elt.n = n;
	submit(cb, &op);
}

static void cuda_silu_mul(struct pg_backend *be, float *gate, const float *up,
			  int64_t n)
{
	cuda_eltwise(be, PG_CUDA_OP_SILU_MUL, gate, up, n);
}

static void cuda_add(struct pg_backend *be, float *x, const float *y,
		     int64_t n)
{
	cuda_eltwise(be, PG_CUDA_OP_ADD, x, y, n);
}

static void cuda_gelu_mul(struct pg_backend *be, float *gate, const float *up,
			  int64_t n)
{
	cuda_eltwise(be, PG_CUDA_OP_GELU_MUL, gate, up, n);
}

/* scale and softcap: x in place with a float parameter. */
static void cuda_eltwise_s(struct pg_backend *be, int kind, float *x, float s,
			   int64_t n)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_op op;

	if (op_begin(cb, &op, kind) || n <= 0)
		return;
	op.a.elt.x = x;
	op.a.elt.n = n;
	op.a.elt.s = s;
	submit(cb, &op);
}

static void cuda_scale(struct pg_backend *be, float *x, float s, int64_t n)
{
	cuda_eltwise_s(be, PG_CUDA_OP_SCALE, x, s, n);
}

static void cuda_softcap(struct pg_backend *be, float *x, float cap,
			 int64_t n)
{
	cuda_eltwise_s(be, PG_CUDA_OP_SOFTCAP, x, cap, n);
}

/* The parts' pointers (device memory) are staged like index arrays. */
static void cuda_sum_parts(struct pg_backend *be, float *out,
			   const float *const *parts, int n_parts, int64_t n)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	size_t bytes = (size_t)(n_parts > 0 ? n_parts : 1) * sizeof(*parts);
	struct pg_cuda_op op;
	uint32_t off;
	void *p;

	if (op_begin(cb, &op, PG_CUDA_OP_SUM_PARTS) || n <= 0)
		return;
	if (n_parts < 1) {
		pg_cuda_fail_msg(cb, "sum_parts: no parts");
		return;
	}
	op.a.sum_parts.out = out;
	op.a.sum_parts.n = n;
	op.a.sum_parts.n_parts = n_parts;
	p = meta_reserve(cb, bytes, &off);
	if (!p)
		return;
	memcpy(p, parts, bytes);
	meta_commit(cb, META_PTRS, off, bytes, &op.st);
	submit(cb, &op);
}

/* ---- memory ---- */

static void *cuda_alloc(struct pg_backend *be, size_t bytes)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	void *p = NULL;
	cudaError_t e;
	char what[64];

	if (enter(cb)) {
		errno = EIO;
		return NULL;
	}
	e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e == cudaSuccess) {
		if (!live_add(cb, p))
			return p;
		cudaFree(p);	/* no room to remember it: host memory */
		errno = ENOMEM;
		return NULL;
	}
	cudaGetLastError();	/* not sticky: the next launch must not see it */
	if (e == cudaErrorMemoryAllocation) {
		errno = ENOMEM;
		return NULL;
	}
	say(what, sizeof(what), "cudaMalloc(%zu bytes)", bytes);
	pg_cuda_fail(cb, e, what);
	errno = EIO;
	return NULL;
}

static void cuda_free(struct pg_backend *be, void *p)
{
	struct pg_cuda_backend *cb = pg_cuda(be);

	/* a failed backend keeps p in the set: destroy() frees it */
	if (!p || enter(cb))
		return;
	if (cb->recording)
		record_flush(cb);
	live_del(cb, p);
	/*
	 * Cached graphs may name p: they are replayed only for the same
	 * pointers, i.e. once p is allocated again, as eager ops would be.
	 */
	ck(cb, cudaFree(p), "cudaFree");
}

static int cuda_upload(struct pg_backend *be, void *dst, const void *src,
		       size_t bytes, char *err, size_t err_len)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	const uint8_t *s = src;
	uint8_t *d = dst;

	if (enter(cb))
		return report(cb, err, err_len);
	if (cb->recording)
		record_flush(cb);
	while (bytes && !cb->failed) {
		int i = cb->up_next;
		size_t len = bytes < cb->up_chunk_bytes ? bytes :
			     cb->up_chunk_bytes;

		/* the chunk's last copy must be done before it is refilled */
		if (ck(cb, cudaEventSynchronize(cb->up_done[i]),
		       "cudaEventSynchronize(upload)"))
			break;
		memcpy(cb->up_host[i], s, len);
		if (ck(cb, cudaMemcpyAsync(d, cb->up_host[i], len,
					   cudaMemcpyHostToDevice, cb->stream),
		       "cudaMemcpyAsync(upload)") ||
		    ck(cb, cudaEventRecord(cb->up_done[i], cb->stream),
		       "cudaEventRecord(upload)"))
			break;
		cb->up_next ^= 1;
		s += len;
		d += len;
		bytes -= len;
	}
	return report(cb, err, err_len);
}

/* Wait for the stream; the ring is free again.  0 or -EIO with err. */
static int cuda_sync(struct pg_backend *be, char *err, size_t err_len)
{
	struct pg_cuda_backend *cb = pg_cuda(be);

	if (!enter(cb))
		meta_drain(cb);
	return report(cb, err, err_len);
}

static int cuda_download(struct pg_backend *be, void *dst, const void *src,
			 size_t bytes, char *err, size_t err_len)
{
	struct pg_cuda_backend *cb = pg_cuda(be);

	if (enter(cb))
		return report(cb, err, err_len);
	if (cb->recording)
		record_flush(cb);
	if (bytes)
		ck(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
				       cb->stream), "cudaMemcpyAsync(download)");
	return cuda_sync(be, err, err_len);
}

/* ---- steps and graphs ---- */

static uint64_t ops_hash(const struct pg_cuda_op *ops, size_t n)
{
	const uint8_t *p = (const uint8_t *)ops;
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */

	for (size_t i = 0; i < n * sizeof(*ops); i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static struct pg_cuda_graph *graph_find(struct pg_cuda_backend *cb,
					uint64_t h)
{
	for (int i = 0; i < cb->n_cache; i++) {
		struct pg_cuda_graph *g = &cb->cache[i];

		if (g->hash == h && g->n_ops == cb->n_rec &&
		    !memcmp(g->ops, cb->rec, cb->n_rec * sizeof(*cb->rec)))
			return g;
	}
	return NULL;
}

/* A free entry of the cache: a new one, or the least recently used. */
static struct pg_cuda_graph *graph_slot(struct pg_cuda_backend *cb)
{
	struct pg_cuda_graph *g = &cb->cache[0];

	if (cb->n_cache < CUDA_GRAPH_CACHE)
		return &cb->cache[cb->n_cache++];
	for (int i = 1; i < cb->n_cache; i++)
		if (cb->cache[i].last_used < g->last_used)
			g = &cb->cache[i];
	graph_drop(g);
	return g;
}

/*
 * A capture that failed (an op the stream cannot capture, a graph the
 * driver will not instantiate): end the capture if it is still open, drop
 * the graph, clear the error (capturing leaves it unsticky) and turn
 * graphs off for this backend; the caller then runs the step without a
 * graph, as every later one.  A context that has really faulted fails the
 * synchronisation here and stays failed.
 */
static void graph_abandon(struct pg_cuda_backend *cb, cudaGraph_t graph)
{
	enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
	cudaGraph_t open = NULL;

	if (cudaStreamIsCapturing(cb->stream, &st) == cudaSuccess &&
	    st != cudaStreamCaptureStatusNone &&
	    cudaStreamEndCapture(cb->stream, &open) == cudaSuccess && open)
		cudaGraphDestroy(open);
	if (graph)
		cudaGraphDestroy(graph);
	(void)cudaGetLastError();
	cb->graphs = 0;
	cb->failed = 0;
	cb->err[0] = '\0';
	ck(cb, cudaStreamSynchronize(cb->stream),
	   "cudaStreamSynchronize (after a failed graph capture)");
}

/*
 * Capture the step's records on the stream and instantiate them.  NULL
 * when there was no memory for the copy of the records, or when the
 * capture failed (graph_abandon: graphs are off from then on).
 */
static struct pg_cuda_graph *graph_capture(struct pg_cuda_backend *cb,
					   uint64_t h)
{
	struct pg_cuda_graph *g;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	struct pg_cuda_op *ops;

	ops = malloc(cb->n_rec * sizeof(*ops));
	if (!ops)
		return NULL;
	memcpy(ops, cb->rec, cb->n_rec * sizeof(*ops));
	if (ck(cb, cudaStreamBeginCapture(cb->stream,
					  cudaStreamCaptureModeRelaxed),
	       "cudaStreamBeginCapture"))
		goto out_abandon;
	for (size_t i = 0; i < cb->n_rec; i++)
		op_run(cb, &ops[i]);
	if (ck(cb, cudaStreamEndCapture(cb->stream, &graph),
	       "cudaStreamEndCapture") || cb->failed)
		goto out_abandon;
	if (ck(cb, cudaGraphInstantiate(&exec, graph, 0),
	       "cudaGraphInstantiate"))
		goto out_abandon;
	cudaGraphDestroy(graph);
	g = graph_slot(cb);
	g->ops = ops;
	g->n_ops = cb->n_rec;
	g->hash = h;
	g->exec = exec;
	return g;

out_abandon:
	graph_abandon(cb, graph);
	free(ops);
	return NULL;
}

static void cuda_step_begin(struct pg_backend *be)
{
	struct pg_cuda_backend *cb = pg_cuda(be);

	if (!cb->graphs || enter(cb))
		return;
	if (cb->recording)
		record_flush(cb);
	if (meta_drain(cb))
		return;
	cb->recording = 1;
	cb->n_rec = 0;
}

/*
 * Whether the step is worth a graph: only decode-shaped steps (every
 * matmul on the GEMV path) repeat; a prompt's step, whose length varies,
 * would take a cache slot of its own each time, and its cuBLAS calls
 * gain nothing from a graph.
 */
static int graph_worthy(const struct pg_cuda_backend *cb)
{
	for (size_t i = 0; i < cb->n_rec; i++)
		if (cb->rec[i].kind == PG_CUDA_OP_MATMUL &&
		    cb->rec[i].a.matmul.n > PG_CUDA_GEMV_MAX_N)
			return 0;
	return 1;
}

static int cuda_step_end(struct pg_backend *be, char *err, size_t err_len)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	struct pg_cuda_graph *g;
	uint64_t h;

	if (enter(cb) || !cb->recording || !cb->n_rec) {
		cb->recording = 0;
		cb->n_rec = 0;
		return cuda_sync(be, err, err_len);
	}
	if (!graph_worthy(cb)) {
		record_flush(cb);
		return cuda_sync(be, err, err_len);
	}
	cb->recording = 0;
	h = ops_hash(cb->rec, cb->n_rec);
	g = graph_find(cb, h);
	if (!g && !cb->failed) {
		g = graph_capture(cb, h);
		if (!g && !cb->failed) {	/* no graph: run it plainly */
			for (size_t i = 0; i < cb->n_rec; i++)
				op_run(cb, &cb->rec[i]);
		}
	}
	if (g) {
		g->last_used = ++cb->tick;
		ck(cb, cudaGraphLaunch(g->exec, cb->stream), "cudaGraphLaunch");
	}
	cb->n_rec = 0;
	return cuda_sync(be, err, err_len);
}

/* ---- creation ---- */

static void cuda_destroy(struct pg_backend *be)
{
	struct pg_cuda_backend *cb = pg_cuda(be);

	if (!cb)
		return;
	cudaSetDevice(cb->device);
	if (cb->stream)
		cudaStreamSynchronize(cb->stream);
	graphs_clear(cb);
	free(cb->cache);
	free(cb->rec);
	for (size_t i = 0; i < cb->n_live; i++)
		cudaFree(cb->live[i]);
	free(cb->live);
	for (int i = 0; i < 2; i++) {
		if (cb->up_done[i])
			cudaEventDestroy(cb->up_done[i]);
		cudaFreeHost(cb->up_host[i]);
	}
	cudaFreeHost(cb->meta_host);
	cudaFree(cb->meta_dev);
	cudaFree(cb->ws);
	if (cb->cublas)
		cublasDestroy(cb->cublas);
	cudaFree(cb->cublas_ws);
	if (cb->stream)
		cudaStreamDestroy(cb->stream);
	cudaGetLastError();
	free(cb);
}

static const struct pg_backend_ops cuda_ops = {
	.name = "cuda",
	.destroy = cuda_destroy,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.upload = cuda_upload,
	.download = cuda_download,
	.sync = cuda_sync,
	.get_rows = cuda_get_rows,
	.rmsnorm = cuda_rmsnorm,
	.matmul = cuda_matmul,
	.rope = cuda_rope,
	.kv_write = cuda_kv_write,
	.attention = cuda_attention,
	.attn_merge = cuda_attn_merge,
	.silu_mul = cuda_silu_mul,
	.add = cuda_add,
	.step_begin = cuda_step_begin,
	.step_end = cuda_step_end,
	.gelu_mul = cuda_gelu_mul,
	.scale = cuda_scale,
	.softcap = cuda_softcap,
	.sum_parts = cuda_sum_parts,
	.attn_window = 1,
	.attn_softcap = 1,
};

/* The stream, cuBLAS on it with a fixed workspace, pinned buffers. */
static int cuda_setup(struct pg_cuda_backend *cb)
{
	cublasStatus_t s;

	if (ck(cb, cudaDeviceGetAttribute(&cb->n_sm,
					  cudaDevAttrMultiProcessorCount,
					  cb->device), "cudaDeviceGetAttribute") ||
	    ck(cb, cudaStreamCreateWithFlags(&cb->stream,
					     cudaStreamNonBlocking),
	       "cudaStreamCreate"))
		return -EIO;
	s = cublasCreate(&cb->cublas);
	if (s != CUBLAS_STATUS_SUCCESS)
		return pg_cuda_fail_blas(cb, s, "cublasCreate");
	if (ck(cb, cudaMalloc(&cb->cublas_ws, CUDA_CUBLAS_WS_BYTES),
	       "cudaMalloc(cuBLAS workspace, 32 MiB)"))
		return -EIO;
	s = cublasSetStream(cb->cublas, cb->stream);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasSetWorkspace(cb->cublas, cb->cublas_ws,
				       CUDA_CUBLAS_WS_BYTES);
	if (s != CUBLAS_STATUS_SUCCESS)
		return pg_cuda_fail_blas(cb, s, "cublasSetStream/Workspace");
	cb->up_chunk_bytes = CUDA_UP_CHUNK_BYTES;
	for (int i = 0; i < 2; i++)
		if (ck(cb, cudaHostAlloc(&cb->up_host[i], cb->up_chunk_bytes,
					 cudaHostAllocDefault),
		       "cudaHostAlloc(upload, 4 MiB)") ||
		    ck(cb, cudaEventCreateWithFlags(&cb->up_done[i],
						    cudaEventDisableTiming),
		       "cudaEventCreate"))
			return -EIO;
	if (meta_grow(cb, CUDA_META_BYTES))
		return -EIO;
	cb->cache = calloc(CUDA_GRAPH_CACHE, sizeof(*cb->cache));
	if (!cb->cache)
		return pg_cuda_fail_msg(cb, "out of host memory");
	return pg_cuda_attention_init(cb);
}

struct pg_backend *pg_cuda_backend_create(int device, char *err,
					  size_t err_len)
{
	struct pg_cuda_backend *cb;
	const char *g = getenv("PAGODA_CUDA_GRAPHS");
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || device < 0 || device >= n) {
		if (e != cudaSuccess)
			say(err, err_len, "no CUDA device %d: %s (%s=%d)",
			    device, cudaGetErrorString(e), cudaGetErrorName(e),
			    (int)e);
		else
			say(err, err_len, "no CUDA device %d: %d device(s)",
			    device, n);
		cudaGetLastError();
		return NULL;
	}
	cb = calloc(1, sizeof(*cb));
	if (!cb) {
		say(err, err_len, "CUDA device %d: out of host memory", device);
		return NULL;
	}
	cb->be.ops = &cuda_ops;
	cb->device = device;
	cb->graphs = g && !strcmp(g, "1");
	if (enter(cb) || cuda_setup(cb)) {
		say(err, err_len, "CUDA device %d: %s", device, cb->err);
		cuda_destroy(&cb->be);
		return NULL;
	}
	return &cb->be;
}

/* ---- sampling helpers ---- */

/* Launch, copy `bytes` of results from the workspace to dst, wait. */
static int sample_finish(struct pg_cuda_backend *cb, void *dst,
			 const void *src, size_t bytes, char *err,
			 size_t err_len)
{
	if (!cb->failed)
		ck(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
				       cb->stream), "cudaMemcpyAsync(sample)");
	return cuda_sync(&cb->be, err, err_len);
}

int pg_cuda_argmax(struct pg_backend *be, const float *logits, int n_rows,
		   int n_vocab, int32_t *ids, char *err, size_t err_len)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	size_t bytes = (size_t)n_rows * sizeof(int32_t);

	if (enter(cb))
		return report(cb, err, err_len);
	if (n_rows <= 0 || n_vocab <= 0)
		return 0;
	if (cb->recording)
		record_flush(cb);
	if (ws_reserve(cb, bytes))
		return report(cb, err, err_len);
	pg_cuda_argmax_launch(cb, logits, n_rows, n_vocab, cb->ws);
	return sample_finish(cb, ids, cb->ws, bytes, err, err_len);
}

int pg_cuda_topk(struct pg_backend *be, const float *logits, int n_rows,
		 int n_vocab, int k, float *vals, int32_t *ids, char *err,
		 size_t err_len)
{
	struct pg_cuda_backend *cb = pg_cuda(be);
	size_t n = (size_t)n_rows * (size_t)k;
	float *dv;
	int32_t *di;
	int rc;

	if (k < 1 || k > 1024) {
		say(err, err_len, "top-k: k %d is not in 1 .. 1024", k);
		return -EINVAL;
	}
	if (enter(cb))
		return report(cb, err, err_len);
	if (n_rows <= 0 || n_vocab <= 0)
		return 0;
	if (cb->recording)
		record_flush(cb);
	if (ws_reserve(cb, n * (sizeof(float) + sizeof(int32_t))))
		return report(cb, err, err_len);
	dv = cb->ws;
	di = (int32_t *)(dv + n);
	pg_cuda_topk_launch(cb, logits, n_rows, n_vocab, k, dv, di);
	if (!cb->failed)
		ck(cb, cudaMemcpyAsync(vals, dv, n * sizeof(float),
				       cudaMemcpyDeviceToHost, cb->stream),
		   "cudaMemcpyAsync(sample)");
	rc = sample_finish(cb, ids, di, n * sizeof(int32_t), err, err_len);
	return rc;
}
