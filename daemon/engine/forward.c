/*
 * forward.c - the forward pass: embedding, the block stack stage by stage,
 * final norm and output head, all through backend and communicator
 * operations, on one device or on the devices of a parallel plan.
 *
 * The math of a block is block.c's (pg_block_run, read off the model's
 * struct pg_arch); this file owns devices, threads, weight placement and
 * the plan's communication.  K and V go into the sequences' KV pages
 * before attention reads them back through the page tables, which the
 * caller owns (kvcache.h): this file never decides which page a token goes
 * to.  No intrinsics here.
 *
 * With a plan (plan.h), every device runs the same code on its own thread
 * with its own backend, KV store and weight slices:
 *  - pipeline stage s runs blocks first_block[s] .. ; the residual stream
 *    x (n_tokens × n_embd floats) is received from stage s - 1 and sent to
 *    stage s + 1, device (t, c) to device (t, c);
 *  - TP rank t holds query heads [h0, h1), the KV heads they read, FFN
 *    columns [f0, f1) (Megatron: Q/K/V, gate, up by output rows; Wo and
 *    Wdown by input columns, then an all-reduce), and a slice of the
 *    vocabulary for the output head (then an all-gather);
 *  - CP rank c holds its share of every page's token slots; attention over
 *    it returns the softmax's log-sum-exp, the ranks all-gather their
 *    partial outputs and merge them exactly.  Matrix products are repeated
 *    on every CP rank (CP buys KV memory and attention time, not FLOPs),
 *    except the output head, which CP ranks split by vocabulary when there
 *    is no TP to split it.
 * Up to pp batches are in flight, so that stages overlap (micro-batches).
 *
 * Exact parallel sums.  Where the backend offers them (exact_parallel:
 * the CPU backend), TP and CP plans give the very bits one device gives,
 * so an operator who changes the plan changes no answer:
 *  - a row-split product (Wo, Wdown) is always computed as canonical
 *    parts of its input columns (pg_plan_tp_parts: the heads, or the
 *    FFN's quantisation blocks, cut PG_PLAN_EXACT_SPLITS ways), each part
 *    a product of its own, then x += the parts summed in order
 *    (add_parts).  A TP rank computes the parts inside its columns, the
 *    ranks all-gather them, and every rank sums all of them in the same
 *    order.  When tp divides PG_PLAN_EXACT_SPLITS (1, 2, 3, 4, 6, 12),
 *    the ranks' column ranges are unions of whole parts and the sum is
 *    one device's bit for bit; otherwise the ranks' bounds are bounds of
 *    parts too and the sums differ in rounding only.  The price: a TP
 *    rank sends its parts (about PG_PLAN_EXACT_SPLITS / tp vectors a
 *    token) instead of one vector, and each part pays a horizontal sum;
 *  - attention without CP is computed in two lanes, the first and the
 *    second half of every page's slots, each with its own softmax, merged
 *    as attn_merge merges CP ranks' parts (pg_kv_layout.lanes): what two
 *    CP ranks compute and merge, since a CP rank's store holds one such
 *    half of every page.  So CP 2 is exact; wider CP merges in another
 *    order (within rounding).
 *
 * A device whose backend has memory of its own (a GPU: ops->host_memory
 * is 0) gets its weight slices, norms, biases and token embedding
 * uploaded once into that memory, its KV pages and activations allocated
 * there, and its logits downloaded; on such a device one step's ops are
 * bracketed by step_begin/step_end so that the backend can replay them
 * as a graph.  The host index arrays (positions, slots, page tables) stay
 * in host memory, as backend.h asks.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../../kernels/comm.h"
#include "../../kernels/cpu/comm_shm.h"
#ifdef HAVE_CUDA_BACKEND
#include "../../kernels/cuda/backend_cuda.h"
#endif
#ifdef HAVE_NCCL_COMM
#include "../../kernels/cuda/comm_nccl.h"
#endif
#include "forward_impl.h"
#include "kv.h"

/* Default of PAGODA_NCCL_TIMEOUT: seconds the NCCL groups have to form. */
#define PG_FW_NCCL_TIMEOUT_S 60

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct pg_forward_params pg_forward_params_default(void)
{
	return (struct pg_forward_params){
		.n_threads = 2,
		.isa = PG_ISA_AVX512,
		.max_batch_tokens = 512,
		.n_pages = 0,
		.page_tokens = 16,
		.kv_type = PG_F16,
		.kv_mem = { .numa_node = -1 },
	};
}

/* ---- weight slices (views into the model's mapping) ---- */

/* Output rows r0 .. r0 + n - 1 of m. */
static struct pg_matrix rows_of(const struct pg_matrix *m, int64_t r0,
				int64_t n)
{
	struct pg_matrix v = *m;

	v.data = (const uint8_t *)m->data + (size_t)r0 * m->row_bytes;
	v.n_rows = n;
	return v;
}

/* Input columns c0 .. c0 + n - 1 of m (c0 a whole number of blocks). */
static struct pg_matrix cols_of(const struct pg_matrix *m, int64_t c0,
				int64_t n)
{
	struct pg_matrix v = *m;

	v.data = (const uint8_t *)m->data +
		 pg_dtype_row_bytes(m->type, (uint64_t)c0);
	v.n_cols = n;
	return v;
}

static const float *bias_of(const float *b, int64_t off)
{
	return b ? b + off : NULL;
}

static void slice_block(const struct pg_hparams *hp, const struct device *d,
			const struct pg_block_weights *w,
			struct pg_block_weights *o)
{
	int hd = hp->head_dim;

	*o = *w;
	o->wq = rows_of(&w->wq, (int64_t)d->h0 * hd, (int64_t)d->nq * hd);
	o->bq = bias_of(w->bq, (int64_t)d->h0 * hd);
	o->wk = rows_of(&w->wk, (int64_t)d->k0 * hd, (int64_t)d->nkv * hd);
	o->bk = bias_of(w->bk, (int64_t)d->k0 * hd);
	o->wv = rows_of(&w->wv, (int64_t)d->k0 * hd, (int64_t)d->nkv * hd);
	o->bv = bias_of(w->bv, (int64_t)d->k0 * hd);
	o->wo = cols_of(&w->wo, (int64_t)d->h0 * hd, (int64_t)d->nq * hd);
	o->w_gate = rows_of(&w->w_gate, d->f0, d->nff);
	o->w_up = rows_of(&w->w_up, d->f0, d->nff);
	o->w_down = cols_of(&w->w_down, d->f0, d->nff);
}

/* ---- set-up ---- */

/*
 * The matrices of device d that it reads, for walking them all: a malloc'd
 * array of *n pointers, or NULL when there is no memory.
 */
static struct pg_matrix **device_matrices(struct device *d, int *n_out)
{
	struct pg_matrix **out = malloc(sizeof(*out) *
					((size_t)d->n_blocks * 7 + 1));
	int n = 0;

	if (!out)
		return NULL;
	for (int b = 0; b < d->n_blocks; b++) {
		struct pg_block_weights *w = &d->w[b];

		out[n++] = &w->wq, out[n++] = &w->wk, out[n++] = &w->wv;
		out[n++] = &w->wo, out[n++] = &w->w_gate, out[n++] = &w->w_up;
		out[n++] = &w->w_down;
	}
	if (d->stage == d->fw->plan.pp - 1)
		out[n++] = &d->out_w;
	*n_out = n;
	return out;
}

static size_t packed_bytes(const struct pg_matrix *m)
{
	return pg_dtype_row_bytes(m->type, (uint64_t)m->n_cols) *
	       (size_t)m->n_rows;
}

/*
 * A device bound to a NUMA node reads its weights from that node: its
 * slices are copied there, packed (the row stride becomes the slice's own
 * row size).  Otherwise they stay views of the file's mapping, shared
 * with the page cache.  The token embedding stays in the mapping (a batch
 * reads a few rows of it).
 */
static int localize_weights(struct device *d, int node)
{
	struct pg_matrix **ms;
	size_t bytes = 0;
	uint8_t *p;
	int n, k = 0;

	ms = device_matrices(d, &n);
	if (!ms)
		return -ENOMEM;
	for (int i = 0; i < n; i++)	/* pack_weights places the others */
		if (!pg_cpu_q4x8_bytes(d->be, ms[i]))
			ms[k++] = ms[i];
	n = k;
	for (int i = 0; i < n; i++)
		bytes += (packed_bytes(ms[i]) + 63) / 64 * 64;
	if (numa_available() < 0 || node > numa_max_node()) {
		free(ms);
		return -EINVAL;
	}
	if (!bytes) {
		free(ms);
		return 0;
	}
	d->local = numa_alloc_onnode(bytes, node);
	if (!d->local) {
		free(ms);
		return -ENOMEM;
	}
	d->local_bytes = bytes;
	madvise(d->local, bytes, MADV_HUGEPAGE);	/* as pack_weights' */
	p = d->local;
	for (int i = 0; i < n; i++) {
		struct pg_matrix *m = ms[i];
		size_t rb = pg_dtype_row_bytes(m->type, (uint64_t)m->n_cols);

		for (int64_t r = 0; r < m->n_rows; r++)
			memcpy(p + (size_t)r * rb,
			       (const uint8_t *)m->data + (size_t)r * m->row_bytes,
			       rb);
		m->data = p;
		m->row_bytes = rb;
		p += (packed_bytes(m) + 63) / 64 * 64;
	}
	free(ms);
	return 0;
}

/*
 * The bytes matrix m takes in pack_weights' allocation: repacked for the
 * backend's 8-row loops where it takes them, else (a device bound to no
 * node; localize_weights copied them for the others) copied as rows.
 */
static size_t placed_bytes(struct device *d, const struct pg_matrix *m,
			   int node)
{
	size_t b = pg_cpu_q4x8_bytes(d->be, m);

	if (!b && node < 0)
		b = packed_bytes(m);
	return (b + 63) / 64 * 64;
}

/*
 * A CPU device's matrices in one allocation, made once: those its backend
 * takes repacked for its 8-row loops (pg_cpu_q4x8_pack: the same bits,
 * faster) repacked, and on a device bound to no node (node < 0) the others
 * copied as rows, so that a decode's sweep over every weight reads huge
 * pages (MADV_HUGEPAGE) rather than the file's 4 KiB ones: Gemma 3 270M,
 * 2 threads, tg128 +10-18% (its Q8_0 output head is 73% of the bytes).
 * On a device bound to a node (node >= 0), on that node; localize_weights
 * placed the others there.  The matrices then point into it.
 */
static int pack_weights(struct device *d, int node, char *err,
			size_t err_len)
{
	struct pg_matrix **ms;
	size_t bytes = 0, b;
	uint8_t *p;
	int n;

	ms = device_matrices(d, &n);
	if (!ms) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		bytes += placed_bytes(d, ms[i], node);
	if (!bytes) {
		free(ms);
		return 0;
	}
	if (node >= 0) {	/* a node localize_weights checked */
		p = numa_alloc_onnode(bytes, node);
		if (p)
			madvise(p, bytes, MADV_HUGEPAGE);
	} else {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			p = NULL;
		else	/* fewer TLB misses on a decode's sweep, where given */
			madvise(p, bytes, MADV_HUGEPAGE);
	}
	if (!p) {
		snprintf(err, err_len, "device %s: cannot allocate %.1f MiB for its weights, repacked for the CPU's 8-row loops or copied onto huge pages (they then replace the model file's pages): free that much memory%s",
			 d->info ? d->info->name : "cpu:0",
			 (double)bytes / (1 << 20),
			 node >= 0 ? " on the device's NUMA node" : "");
		free(ms);
		return -ENOMEM;
	}
	d->packed = p;
	d->packed_bytes = bytes;
	d->packed_numa = node >= 0;
	for (int i = 0; i < n; i++) {
		struct pg_matrix *m = ms[i];
		size_t rb = pg_dtype_row_bytes(m->type, (uint64_t)m->n_cols);

		b = placed_bytes(d, m, node);
		if (pg_cpu_q4x8_bytes(d->be, m)) {
			pg_cpu_q4x8_pack(d->be, m, p);
		} else if (b) {
			for (int64_t r = 0; r < m->n_rows; r++)
				memcpy(p + (size_t)r * rb, (const uint8_t *)m->data +
				       (size_t)r * m->row_bytes, rb);
			m->data = p;
			m->row_bytes = rb;
		}
		p += b;
	}
	free(ms);
	return 0;
}

/* ---- devices with memory of their own ---- */

#define UPLOAD_STAGE_BYTES (8u << 20)

/* Uploading a device's weights: a dry run counts, the real one copies. */
struct uploader {
	struct device *d;
	uint8_t *base;			/* NULL: count only */
	size_t off;
	uint8_t *stage;			/* host staging, UPLOAD_STAGE_BYTES */
	int rc;
};

static size_t align256(size_t b)
{
	return (b + 255) / 256 * 256;
}

/*
 * Place matrix m (packed, then pad zero rows) in the device's memory and
 * point m there.  A slice by columns is packed through the staging buffer;
 * a contiguous one goes straight from the mapping.
 */
static void up_matrix(struct uploader *u, struct pg_matrix *m, int64_t pad)
{
	struct pg_backend *be = u->d->be;
	size_t rb = pg_dtype_row_bytes(m->type, (uint64_t)m->n_cols);
	size_t bytes = rb * (size_t)(m->n_rows + pad);
	uint8_t *dst = u->base + u->off;
	int64_t per = (int64_t)(UPLOAD_STAGE_BYTES / rb);
	char *err = u->d->err;

	u->off += align256(bytes);
	if (!u->base || u->rc)
		return;
	if (per < 1)
		per = 1;
	if (m->row_bytes == rb) {
		u->rc = be->ops->upload(be, dst, m->data, rb * (size_t)m->n_rows,
					err, sizeof(u->d->err));
	} else {
		for (int64_t r = 0; r < m->n_rows && !u->rc; r += per) {
			int64_t n = m->n_rows - r < per ? m->n_rows - r : per;

			for (int64_t i = 0; i < n; i++)
				memcpy(u->stage + (size_t)i * rb,
				       (const uint8_t *)m->data +
				       (size_t)(r + i) * m->row_bytes, rb);
			u->rc = be->ops->upload(be, dst + (size_t)r * rb,
						u->stage, (size_t)n * rb, err,
						sizeof(u->d->err));
		}
	}
	if (pad > 0 && !u->rc) {
		/* zero rows are zero values in every type */
		memset(u->stage, 0, UPLOAD_STAGE_BYTES);
		for (size_t o = 0; o < rb * (size_t)pad && !u->rc;
		     o += UPLOAD_STAGE_BYTES) {
			size_t n = rb * (size_t)pad - o;

			u->rc = be->ops->upload(be, dst + rb * (size_t)m->n_rows + o,
						u->stage, n < UPLOAD_STAGE_BYTES ?
						n : UPLOAD_STAGE_BYTES,
						err, sizeof(u->d->err));
		}
	}
	m->data = dst;
	m->row_bytes = rb;
	m->n_rows += pad;
}

/* Place n floats (a norm or a bias; NULL stays NULL) in device memory. */
static void up_floats(struct uploader *u, const float **v, int64_t n)
{
	uint8_t *dst = u->base + u->off;

	if (!*v)
		return;
	u->off += align256((size_t)n * sizeof(float));
	if (!u->base || u->rc)
		return;
	u->rc = u->d->be->ops->upload(u->d->be, dst, *v,
				      (size_t)n * sizeof(float), u->d->err,
				      sizeof(u->d->err));
	*v = (const float *)dst;
}

/* Every weight device d reads, in one walk (counting or copying). */
static void up_all(struct uploader *u, int head_split)
{
	struct device *d = u->d;
	const struct pg_hparams *hp = &d->fw->m->hp;
	int64_t hd = hp->head_dim;

	if (d->stage == 0)
		up_matrix(u, &d->tok_embd, 0);
	up_floats(u, &d->rope_freqs, hp->n_rot / 2);
	for (int b = 0; b < d->n_blocks; b++) {
		struct pg_block_weights *w = &d->w[b];

		up_floats(u, &w->attn_norm, hp->n_embd);
		up_floats(u, &w->ffn_norm, hp->n_embd);
		up_floats(u, &w->attn_post_norm, hp->n_embd);
		up_floats(u, &w->ffn_post_norm, hp->n_embd);
		up_floats(u, &w->bq, d->nq * hd);
		up_floats(u, &w->bk, d->nkv * hd);
		up_floats(u, &w->bv, d->nkv * hd);
		up_floats(u, &w->q_norm, hd);
		up_floats(u, &w->k_norm, hd);
		up_matrix(u, &w->wq, 0);
		up_matrix(u, &w->wk, 0);
		up_matrix(u, &w->wv, 0);
		up_matrix(u, &w->wo, 0);
		up_matrix(u, &w->w_gate, 0);
		up_matrix(u, &w->w_up, 0);
		up_matrix(u, &w->w_down, 0);
	}
	if (d->stage == d->fw->plan.pp - 1) {
		up_floats(u, &d->output_norm, hp->n_embd);
		/* a split head's slices are padded to vpad rows, so that every
		 * rank's logits are rows of vpad floats, as all-gather wants */
		up_matrix(u, &d->out_w, head_split ? d->vpad - d->nv : 0);
	}
}

/*
 * Upload device d's weights into its backend's memory: one allocation,
 * whose size is said when it cannot be had.
 */
static int upload_weights(struct device *d, int head_split, char *err,
			  size_t err_len)
{
	struct uploader u = { .d = d };
	const char *name = d->info ? d->info->name : "cpu:0";

	up_all(&u, head_split);
	d->wmem = d->be->ops->alloc(d->be, u.off);
	if (!d->wmem) {
		char have[64] = "";

		if (d->info && d->info->mem_bytes)
			snprintf(have, sizeof(have), " (it has %.2f GiB)",
				 (double)d->info->mem_bytes / (1 << 30));
		snprintf(err, err_len, "device %s: its weights need %.2f GiB of its memory, more than it has free%s; spread the model over more devices (--pipeline-parallel, --tensor-parallel) or use a smaller or more quantised model",
			 name, (double)u.off / (1 << 30), have);
		return -ENOMEM;
	}
	u.stage = malloc(UPLOAD_STAGE_BYTES);
	if (!u.stage)
		return -ENOMEM;
	u.base = d->wmem;
	u.off = 0;
	up_all(&u, head_split);
	free(u.stage);
	if (u.rc)
		snprintf(err, err_len, "device %s: cannot upload its weights: %s",
			 name, d->err);
	return u.rc;
}

/* The ranks that share the output head by vocabulary: TP's, else CP's. */
static int head_size(const struct pg_plan *pl)
{
	return pl->tp > 1 ? pl->tp : pl->cp;
}

/* Set up the exact parallel sums of device d (see struct device). */
static void setup_exact(struct pg_forward *fw, struct device *d)
{
	const struct pg_hparams *hp = &fw->m->hp;
	const struct pg_block_weights *b = &fw->m->blocks[0];
	int tp = fw->plan.tp, hd = hp->head_dim, pt = fw->p.page_tokens;
	int qo = pg_dtype_block_size(b->wo.type);
	int qd = pg_dtype_block_size(b->w_down.type);
	int64_t cols[PG_PLAN_EXACT_SPLITS + 2];

	d->exact = d->be->ops->exact_parallel &&
		   fw->p.numerics != PG_NUMERICS_LLAMA_CPP;
	d->lanes = d->exact && fw->plan.cp == 1 && pt % PG_FW_LANES == 0 ?
		   PG_FW_LANES : 1;
	if (!d->exact)
		return;
	d->max_parts[0] = d->max_parts[1] = 0;
	for (int t = 0; t < tp; t++)
		for (int w = 0; w < 2; w++) {
			int n = pg_plan_tp_rank_parts(hp->n_heads, hp->n_kv_heads,
						      hd, hp->n_ff, w, w ? qd : qo,
						      tp, t, t == d->t ?
						      d->part_cols[w] : cols);

			d->rank_parts[w][t] = n;
			d->max_parts[w] = n > d->max_parts[w] ? n : d->max_parts[w];
		}
}

static int alloc_scratch(struct pg_forward *fw, struct device *d)
{
	const struct pg_hparams *hp = &fw->m->hp;
	size_t B = (size_t)fw->p.max_batch_tokens, hd = (size_t)hp->head_dim;
	size_t q_dim = (size_t)d->nq * hd, kv_dim = (size_t)d->nkv * hd;
	size_t att = B * (q_dim + (size_t)d->nq);
	int cp = fw->plan.cp, tp = fw->plan.tp;
	size_t floats, bytes, mine = 0, all = 0, be = B * (size_t)hp->n_embd;
	struct scratch *s = &d->s;
	char *a;

	setup_exact(fw, d);
	if (tp > 1) {		/* the parts to gather; 0 unless exact */
		mine = d->max_parts[0] > d->max_parts[1] ? d->max_parts[0] :
		       d->max_parts[1];
		all = (size_t)tp * mine;
	}
	floats = B * (3 * (size_t)hp->n_embd + q_dim + 2 * kv_dim +
		      2 * (size_t)d->nff) + att +
		 (cp > 1 ? (size_t)cp * att : 0) + (mine + all) * be;
	bytes = floats * sizeof(float) + 256 * 16;

	s->slots = malloc(B * sizeof(*s->slots));
	if (!s->slots)
		return -ENOMEM;
	if (d->devmem)
		d->arena = d->be->ops->alloc(d->be, bytes);
	else
		d->arena = aligned_alloc(64, (bytes + 63) / 64 * 64);
	if (!d->arena)
		return -ENOMEM;
	a = d->arena;
#define TAKE(ptr, n) do { (ptr) = (void *)a; a += ((n) * sizeof(*(ptr)) + 255) / 256 * 256; } while (0)
	TAKE(s->x, B * hp->n_embd);
	TAKE(s->xb, B * hp->n_embd);
	TAKE(s->xb2, B * hp->n_embd);
	TAKE(s->q, B * q_dim);
	TAKE(s->k, B * kv_dim);
	TAKE(s->v, B * kv_dim);
	TAKE(s->att, att);
	if (cp > 1)
		TAKE(s->parts, (size_t)cp * att);
	if (mine)
		TAKE(s->wparts, mine * be);
	if (all)
		TAKE(s->wgath, all * be);
	TAKE(s->hb, B * (size_t)d->nff);
	TAKE(s->hb2, B * (size_t)d->nff);
#undef TAKE
	return 0;
}

static int alloc_job(struct pg_forward *fw, struct job *j)
{
	size_t B = (size_t)fw->p.max_batch_tokens;

	j->tokens = malloc(B * sizeof(*j->tokens));
	j->pos = malloc(B * sizeof(*j->pos));
	j->out_rows = malloc(B * sizeof(*j->out_rows));
	j->seqs = malloc(B * sizeof(*j->seqs));
	j->aseqs = malloc(B * sizeof(*j->aseqs));
	if (!j->tokens || !j->pos || !j->out_rows || !j->seqs || !j->aseqs)
		return -ENOMEM;
	return 0;
}

static void free_job(struct job *j)
{
	free(j->tokens);
	free(j->pos);
	free(j->out_rows);
	free(j->seqs);
	free(j->aseqs);
}

/*
 * How many pages the parameters ask for: n_pages, else kv_bytes, else
 * kv_fraction of the memory available, else room for 4 sequences of the
 * training context (at most 8192 tokens each).  0 when that is no page.
 * page_bytes is a page of the whole model: with a plan the bytes are the
 * budget of all devices together.
 */
/*
 * The memory the KV cache may take a fraction of: the host's available
 * memory, or on GPUs what their free memory leaves after the weights.
 */
static uint64_t mem_for_kv(const struct pg_model *m,
			   const struct pg_forward_params *p)
{
	uint64_t free_bytes = 0;

	if (!p->plan || p->plan->dev[0].kind != PG_DEV_CUDA)
		return pg_mem_available();
	for (int i = 0; i < p->plan->n_devices; i++)
		free_bytes += p->plan->dev[i].mem_bytes;
	return free_bytes > m->weight_bytes ? free_bytes - m->weight_bytes : 0;
}

static int pages_wanted(const struct pg_model *m,
			const struct pg_forward_params *p, size_t page_bytes)
{
	int ctx = m->hp.n_ctx_train < 8192 ? m->hp.n_ctx_train : 8192;
	size_t bytes;

	if (p->n_pages)
		return p->n_pages;
	if (p->kv_bytes)
		bytes = p->kv_bytes;
	else if (p->kv_fraction > 0)
		bytes = (size_t)((double)mem_for_kv(m, p) * p->kv_fraction);
	else
		return 4 * ((ctx + p->page_tokens - 1) / p->page_tokens);
	bytes /= page_bytes;
	return bytes > INT32_MAX ? INT32_MAX : (int)bytes;
}

/* Say what failed in making the KV store, and what to change. */
static void kv_error(char *err, size_t err_len, int rc, int n_pages,
		     size_t page_bytes, const struct pg_kv_mem *mem)
{
	double mib = (double)n_pages * (double)page_bytes / (1 << 20);

	if (rc == -EINVAL && mem->numa_node >= 0)
		snprintf(err, err_len, "cannot bind the KV cache to NUMA node %d: no such node (or no NUMA support)",
			 mem->numa_node);
	else if (mem->lock && (rc == -EPERM || rc == -ENOMEM || rc == -EAGAIN))
		snprintf(err, err_len, "cannot lock the KV cache (%.1f MiB) in memory: %s; raise the memlock limit (ulimit -l, LimitMEMLOCK=) or do not lock it",
			 mib, strerror(-rc));
	else
		snprintf(err, err_len, "cannot allocate the KV cache (%d pages of %zu bytes, %.1f MiB): %s; make it smaller",
			 n_pages, page_bytes, mib, strerror(-rc));
}

/* Check what the plan asks of this model and these parameters. */
static int plan_ok(const struct pg_forward *fw, char *err, size_t err_len)
{
	const struct pg_plan *pl = &fw->plan;
	const struct pg_hparams *hp = &fw->m->hp;
	int qb = 1;

	if (pl->pp < 1 || pl->tp < 1 || pl->cp < 1 ||
	    pl->pp * pl->tp * pl->cp != pl->n_devices ||
	    pl->n_devices > PG_PLAN_MAX_DEVICES || pl->pp > hp->n_blocks) {
		snprintf(err, err_len, "the parallel plan is inconsistent (pp %d × tp %d × cp %d for %d devices, %d blocks)",
			 pl->pp, pl->tp, pl->cp, pl->n_devices, hp->n_blocks);
		return -EINVAL;
	}
	if (pl->first_block[0] != 0 || pl->first_block[pl->pp] != hp->n_blocks) {
		snprintf(err, err_len, "the parallel plan's stages do not cover blocks 0 .. %d",
			 hp->n_blocks - 1);
		return -EINVAL;
	}
	for (int s = 0; s < pl->pp; s++)
		if (pl->first_block[s + 1] <= pl->first_block[s]) {
			snprintf(err, err_len, "pipeline stage %d has no block", s);
			return -EINVAL;
		}
#ifndef HAVE_NCCL_COMM
	for (int i = 0; i < pl->n_devices; i++)
		if (pl->dev[i].kind != PG_DEV_CPU && pl->n_devices > 1) {
			snprintf(err, err_len, "device %s: a plan of several CUDA devices needs NCCL, which this pagodad was built without; install NCCL and rebuild, or run on one CUDA device",
				 pl->dev[i].name);
			return -ENOTSUP;
		}
#endif
	if (pl->cp > 1 && fw->p.page_tokens % pl->cp) {
		snprintf(err, err_len, "context parallelism %d must divide the KV page size (%d tokens)",
			 pl->cp, fw->p.page_tokens);
		return -EINVAL;
	}
	if (pl->tp > 1) {
		qb = pg_dtype_block_size(fw->m->blocks[0].wo.type);
		for (int t = 0; t < pl->tp; t++) {
			int h0, h1, k0, k1;

			pg_plan_tp_heads(hp->n_heads, hp->n_kv_heads, pl->tp, t,
					 &h0, &h1, &k0, &k1);
			if (h1 <= h0 || ((int64_t)h0 * hp->head_dim) % qb) {
				snprintf(err, err_len, "tensor parallelism %d cannot split %d heads of %d values along whole %d-value quantisation blocks; use fewer ranks",
					 pl->tp, hp->n_heads, hp->head_dim, qb);
				return -EINVAL;
			}
		}
		if (hp->n_ff / pg_dtype_block_size(fw->m->blocks[0].w_down.type) <
		    pl->tp) {
			snprintf(err, err_len, "tensor parallelism %d leaves a rank no feed-forward columns (%d); use fewer ranks",
				 pl->tp, hp->n_ff);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * The rest of setting up a device whose backend d->be has memory of its
 * own: weights, KV pages and activations there.
 */
static int setup_devmem(struct pg_forward *fw, struct device *d, char *err,
			size_t err_len)
{
	const struct pg_hparams *hp = &fw->m->hp;
	const struct pg_plan *pl = &fw->plan;
	const char *name = d->info ? d->info->name : "cpu:0";
	size_t page_bytes;
	int rc;

	d->devmem = 1;
	d->graphs = d->be->ops->step_begin && d->be->ops->step_end &&
		    pl->tp == 1 && pl->cp == 1;
	rc = upload_weights(d, head_size(pl) > 1, err, err_len);
	if (rc)
		return rc;
	rc = pg_kv_store_create_on(d->be, fw->p.n_pages,
				   fw->p.page_tokens / pl->cp, d->n_blocks,
				   d->nkv, hp->head_dim, fw->p.kv_type, &d->kv);
	if (rc) {
		page_bytes = pg_kv_page_bytes_for(fw->p.page_tokens / pl->cp,
						  d->n_blocks, d->nkv,
						  hp->head_dim, fw->p.kv_type);
		snprintf(err, err_len, "device %s: cannot allocate its KV cache (%d pages of %zu bytes, %.2f GiB) after its weights: %s; give the KV cache less memory (--kv-size or --ctx-size) or spread the model over more devices",
			 name, fw->p.n_pages, page_bytes,
			 (double)page_bytes * fw->p.n_pages / (1 << 30),
			 strerror(-rc));
		return rc;
	}
	pg_kv_store_set_cp(d->kv, pl->cp, d->c);
	rc = alloc_scratch(fw, d);
	if (rc)
		snprintf(err, err_len, "device %s: cannot allocate the activations of a %d-token batch: %s; lower max_batch_tokens",
			 name, fw->p.max_batch_tokens, strerror(-rc));
	return rc;
}

/* A CUDA device: its backend, then as any device with memory of its own. */
static int setup_gpu(struct pg_forward *fw, struct device *d, char *err,
		     size_t err_len)
{
#ifdef HAVE_CUDA_BACKEND
	char why[256];

	d->be = pg_cuda_backend_create(d->info->index, why, sizeof(why));
	if (!d->be) {
		snprintf(err, err_len, "device %s: %s", d->info->name, why);
		return -ENODEV;
	}
	return setup_devmem(fw, d, err, err_len);
#else
	(void)fw;
	snprintf(err, err_len, "device %s: this pagodad was built without CUDA; rebuild with ./configure --with-cuda",
		 d->info->name);
	return -ENOTSUP;
#endif
}

/*
 * Whether device d's backend has the optional ops the model's
 * architecture needs (struct pg_arch): 0, or -ENOTSUP saying which.
 */
static int arch_ops_ok(const struct device *d, char *err, size_t err_len)
{
	const struct pg_arch *a = &d->fw->m->arch;
	const struct pg_backend_ops *o = d->be->ops;
	const char *missing = NULL;

	if (a->rope_factors && !o->rope_factors)
		missing = "RoPE with frequency factors (rope_freqs.weight, Llama 3.1 and later)";
	else if (a->act == PG_ACT_GELU && !o->gelu_mul)
		missing = "the GELU feed-forward gate (GeGLU)";
	else if ((a->emb_scale > 0.0f || a->scale_q) && !o->scale)
		missing = "scaled token embeddings and queries";
	else if (a->final_softcap > 0.0f && !o->softcap)
		missing = "soft-capped logits";
	else if (a->attn_softcap > 0.0f && !o->attn_softcap)
		missing = "soft-capped attention scores";
	else if (a->window > 0 && !o->attn_window)
		missing = "sliding-window attention";
	else if (a->post_norms && o->exact_parallel && !o->sum_parts)
		missing = "exact sums before post-norms (sum_parts)";
	if (missing) {
		snprintf(err, err_len, "device %s: the %s backend has no %s, which this %s model needs: run it on CPU devices",
			 d->info ? d->info->name : "0", o->name, missing,
			 pg_arch_name(a->id));
		return -ENOTSUP;
	}
	return 0;
}

static int setup_device(struct pg_forward *fw, struct device *d,
			size_t full_page_bytes, char *err, size_t err_len)
{
	const struct pg_model *m = fw->m;
	const struct pg_hparams *hp = &m->hp;
	const struct pg_plan *pl = &fw->plan;
	struct pg_kv_mem mem = fw->p.kv_mem;
	int n_threads = fw->p.n_threads, h1, k1, f1, rc;

	d->fw = fw;
	d->first_block = pl->first_block[d->stage];
	d->n_blocks = pl->first_block[d->stage + 1] - d->first_block;
	pg_plan_tp_heads(hp->n_heads, hp->n_kv_heads, pl->tp, d->t, &d->h0, &h1,
			 &d->k0, &k1);
	pg_plan_tp_ffn(hp->n_ff, pg_dtype_block_size(m->blocks[0].w_down.type),
		       pl->tp, d->t, &d->f0, &f1);
	d->nq = h1 - d->h0;
	d->nkv = k1 - d->k0;
	d->nff = f1 - d->f0;
	/* the output head is split over the TP ranks, else over the CP ranks */
	d->vpad = (hp->n_vocab + head_size(pl) - 1) / head_size(pl);
	d->v0 = (pl->tp > 1 ? d->t : d->c) * d->vpad;
	d->nv = hp->n_vocab - d->v0 < d->vpad ? hp->n_vocab - d->v0 : d->vpad;
	d->out_w = rows_of(&m->output, d->v0, d->nv);
	d->tok_embd = m->tok_embd;
	d->output_norm = m->output_norm;
	d->rope_freqs = m->rope_freqs;
	d->w = calloc((size_t)d->n_blocks, sizeof(*d->w));
	if (!d->w)
		return -ENOMEM;
	for (int b = 0; b < d->n_blocks; b++)
		slice_block(hp, d, &m->blocks[d->first_block + b], &d->w[b]);

	if (d->info && d->info->kind == PG_DEV_CUDA) {
		rc = setup_gpu(fw, d, err, err_len);
		return rc ? rc : arch_ops_ok(d, err, err_len);
	}
	if (d->info && d->info->n_threads > 0)
		n_threads = d->info->n_threads;
	d->be = pg_cpu_backend_create(n_threads, fw->p.isa);
	if (!d->be) {
		rc = -errno;
		if (pg_cpu_isa_forced(NULL, err, err_len) < 0)
			return rc;	/* PAGODA_CPU_KERNELS: err says why */
		snprintf(err, err_len, "cannot start the CPU backend with %d threads: %s",
			 n_threads, strerror(-rc));
		return rc;
	}
	pg_cpu_backend_llama_numerics(d->be,
				      fw->p.numerics == PG_NUMERICS_LLAMA_CPP);
	if (d->info && d->info->n_cpus > 0)
		pg_cpu_backend_pin(d->be, d->info->cpus, d->info->n_cpus);
	if (fw->p.device_path)
		return setup_devmem(fw, d, err, err_len);
	if (d->info && d->info->numa_node >= 0 &&
	    (rc = localize_weights(d, d->info->numa_node))) {
		snprintf(err, err_len, "device %s: cannot place its weights on NUMA node %d: %s",
			 d->info->name, d->info->numa_node,
			 rc == -EINVAL ? "no such node" : strerror(-rc));
		return rc;
	}
	rc = pack_weights(d, d->info ? d->info->numa_node : -1, err, err_len);
	if (rc)
		return rc;
	if (d->info && d->info->numa_node >= 0)
		mem.numa_node = d->info->numa_node;
	rc = pg_kv_store_create(fw->p.n_pages, fw->p.page_tokens / pl->cp,
				d->n_blocks, d->nkv, hp->head_dim,
				fw->p.kv_type, &mem, &d->kv);
	if (rc) {
		kv_error(err, err_len, rc, fw->p.n_pages, full_page_bytes / (size_t)pl->n_devices, &mem);
		return rc;
	}
	pg_kv_store_set_cp(d->kv, pl->cp, d->c);
	rc = alloc_scratch(fw, d);
	if (rc)
		snprintf(err, err_len, "cannot allocate the activations of a %d-token batch: %s",
			 fw->p.max_batch_tokens, strerror(-rc));
	return rc;
}

/*
 * How long a device waiting for its peers spins before it sleeps: long
 * (1 ms) when every device thread has a CPU of its own, since a futex
 * wake-up costs tens of microseconds on every collective; short (20 us)
 * when the devices' threads outnumber the CPUs, so that a waiting device
 * does not hold the CPU its peer needs.
 */
static int64_t comm_spin_ns(const struct pg_forward *fw)
{
	cpu_set_t set;
	int threads = 0, cpus;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 20000;
	cpus = CPU_COUNT(&set);
	threads = pg_forward_threads(fw);
	return threads <= cpus ? 1000000 : 20000;
}

/*
 * GPUs: one NCCL unique id per group (world, each TP group, each CP group),
 * made here; the device threads then create their handles together, since
 * an NCCL group's creation returns only when all its ranks have joined.
 * Only the groups that exist get an id: each id starts an NCCL bootstrap
 * thread that waits until its ranks have come.
 */
static int make_nccl_ids(struct pg_forward *fw, char *err, size_t err_len)
{
#ifdef HAVE_NCCL_COMM
	const struct pg_plan *pl = &fw->plan;
	int n_tp = pl->pp * pl->cp;	/* ids 1 .. n_tp: the TP groups */
	int n = 1 + n_tp + pl->pp * pl->tp;	/* then the CP groups */
	char why[256];

	fw->nccl_ids = calloc((size_t)n, PG_COMM_NCCL_ID_BYTES);
	if (!fw->nccl_ids) {
		snprintf(err, err_len, "cannot make the GPUs' NCCL groups: out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		if (i > 0 && (i <= n_tp ? pl->tp == 1 : pl->cp == 1))
			continue;	/* a group that this plan has not */
		if (pg_comm_nccl_unique_id(fw->nccl_ids +
					   (size_t)i * PG_COMM_NCCL_ID_BYTES,
					   PG_COMM_NCCL_ID_BYTES, why,
					   sizeof(why))) {
			snprintf(err, err_len, "cannot make the GPUs' NCCL groups: %s",
				 why);
			return -EIO;
		}
	}
	return 0;
#else
	snprintf(err, err_len, "a plan of several CUDA devices needs NCCL, which this pagodad was built without; install NCCL and rebuild");
	return -ENOTSUP;
#endif
}

static void abort_device(struct device *d);

/*
 * How long the NCCL groups have to form: PAGODA_NCCL_TIMEOUT seconds
 * (1 .. 86400), else PG_FW_NCCL_TIMEOUT_S.
 */
static int nccl_timeout_s(void)
{
	const char *v = getenv("PAGODA_NCCL_TIMEOUT");
	char *end;
	long s;

	if (!v || !*v)
		return PG_FW_NCCL_TIMEOUT_S;
	errno = 0;
	s = strtol(v, &end, 10);
	if (errno || *end || s < 1 || s > 86400) {
		fprintf(stderr, "pagoda: PAGODA_NCCL_TIMEOUT=%s is not a number of seconds from 1 to 86400; using %d\n",
			v, PG_FW_NCCL_TIMEOUT_S);
		return PG_FW_NCCL_TIMEOUT_S;
	}
	return (int)s;
}

/*
 * In device d's thread: create its NCCL handles, world then TP then CP,
 * in the same order on every device.  Each creation gives up when another
 * device has failed (fw->nccl_cancel) or the deadline has passed; a
 * failure here sets fw->nccl_cancel for the others and aborts the groups
 * this device has joined, so that destroying them waits for nobody.
 * 0, or -errno with a message.
 */
static int join_nccl(struct device *d, char *err, size_t err_len)
{
#if defined(HAVE_NCCL_COMM) && defined(HAVE_CUDA_BACKEND)
	struct pg_forward *fw = d->fw;
	const struct pg_plan *pl = &fw->plan;
	const uint8_t *ids = fw->nccl_ids;
	const struct pg_comm_nccl_wait w = {
		.cancel = &fw->nccl_cancel,
		.deadline_ns = fw->nccl_deadline_ns,
	};
	void *stream = pg_cuda_backend_stream(d->be);
	int dev = d->info->index, g, rc;
	size_t B = PG_COMM_NCCL_ID_BYTES;
	const char *what = "the world group";
	char why[256] = "";

	rc = pg_comm_nccl_join(fw->n_dev, d->index, ids, dev, stream, &w,
			       &d->world, why, sizeof(why));
	if (!rc && pl->tp > 1) {
		what = "its tensor-parallel group";
		g = d->stage * pl->cp + d->c;
		rc = pg_comm_nccl_join(pl->tp, d->t, ids + (size_t)(1 + g) * B,
				       dev, stream, &w, &d->tp, why,
				       sizeof(why));
	}
	if (!rc && pl->cp > 1) {
		what = "its context-parallel group";
		g = d->stage * pl->tp + d->t;
		rc = pg_comm_nccl_join(pl->cp, d->c,
				       ids + (size_t)(1 + pl->pp * pl->cp + g) * B,
				       dev, stream, &w, &d->cp, why,
				       sizeof(why));
	}
	if (!rc)
		return 0;
	atomic_store(&fw->nccl_cancel, 1);
	abort_device(d);
	if (rc == -ETIMEDOUT)
		snprintf(err, err_len, "%s: not formed within %d s (PAGODA_NCCL_TIMEOUT): %s",
			 what, fw->nccl_timeout_s, why);
	else
		snprintf(err, err_len, "%s: %s", what, why);
	return rc;
#else
	(void)d;
	snprintf(err, err_len, "built without NCCL");
	return -ENOTSUP;
#endif
}

/* The communicator groups: one world, a TP group per (stage, c), a CP
 * group per (stage, t). */
static int setup_comms(struct pg_forward *fw, char *err, size_t err_len)
{
	const struct pg_plan *pl = &fw->plan;
	int64_t spin;
	int rc;

	if (fw->gpus)
		return make_nccl_ids(fw, err, err_len);
	rc = pg_comm_shm_group_create(fw->n_dev, &fw->g_world);
	fw->n_g_tp = pl->pp * pl->cp;
	fw->n_g_cp = pl->pp * pl->tp;
	fw->g_tp = calloc((size_t)fw->n_g_tp, sizeof(*fw->g_tp));
	fw->g_cp = calloc((size_t)fw->n_g_cp, sizeof(*fw->g_cp));
	if (rc || !fw->g_tp || !fw->g_cp)
		goto fail;
	for (int i = 0; i < fw->n_g_tp && pl->tp > 1; i++)
		if ((rc = pg_comm_shm_group_create(pl->tp, &fw->g_tp[i])))
			goto fail;
	for (int i = 0; i < fw->n_g_cp && pl->cp > 1; i++)
		if ((rc = pg_comm_shm_group_create(pl->cp, &fw->g_cp[i])))
			goto fail;
	spin = comm_spin_ns(fw);
	pg_comm_shm_group_set_spin(fw->g_world, spin);
	for (int i = 0; i < fw->n_g_tp && pl->tp > 1; i++)
		pg_comm_shm_group_set_spin(fw->g_tp[i], spin);
	for (int i = 0; i < fw->n_g_cp && pl->cp > 1; i++)
		pg_comm_shm_group_set_spin(fw->g_cp[i], spin);
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];

		d->world = pg_comm_shm_join(fw->g_world, i);
		if (!d->world)
			goto fail_errno;
		if (pl->tp > 1 &&
		    !(d->tp = pg_comm_shm_join(fw->g_tp[d->stage * pl->cp + d->c], d->t)))
			goto fail_errno;
		if (pl->cp > 1 &&
		    !(d->cp = pg_comm_shm_join(fw->g_cp[d->stage * pl->tp + d->t], d->c)))
			goto fail_errno;
	}
	return 0;
fail_errno:
	rc = -errno;
fail:
	if (!rc)
		rc = -ENOMEM;
	snprintf(err, err_len, "cannot set up the devices' communicators: %s",
		 strerror(-rc));
	return rc;
}

static void *device_main(void *arg);

/*
 * Wait until the device threads have created their NCCL handles (GPUs),
 * or have all given up: the creations are non-blocking and polled, and
 * stop when any rank fails (it sets fw->nccl_cancel) or when the deadline
 * passes, so every thread reports here in bounded time.  The failure
 * reported is the first cause, not the -ECANCELED of the ranks that gave
 * up because of it.
 */
static int wait_setup(struct pg_forward *fw, char *err, size_t err_len)
{
	int rc;

	pthread_mutex_lock(&fw->lock);
	while (fw->setup_pending > 0)
		pthread_cond_wait(&fw->cond, &fw->lock);
	rc = fw->setup_rc;
	if (rc)
		snprintf(err, err_len, "%s", fw->setup_err);
	pthread_mutex_unlock(&fw->lock);
	return rc;
}

/* A device's setup failed with rc (under fw->lock): keep the cause. */
static void setup_failed(struct pg_forward *fw, int rc, const char *msg)
{
	if (!rc || (fw->setup_rc && (fw->setup_rc != -ECANCELED ||
				     rc == -ECANCELED)))
		return;
	fw->setup_rc = rc;
	snprintf(fw->setup_err, sizeof(fw->setup_err), "%s", msg);
}

/*
 * Whether llama.cpp numerics can give llama.cpp's bits here: one CPU
 * device with an F16 KV cache, a CPU with AVX2 (the build they copy), and
 * Q4_1 and Q8_0 weights, the kernels llama.cpp's AVX2 build runs for them
 * (for others it takes kernels of its own: Q4_0 repacked 8 rows at a time,
 * F16 weights against F16 activations).  0, or -errno with the reason.
 */
static int llama_numerics_ok(const struct pg_model *m,
			     const struct pg_forward_params *p, char *err,
			     size_t err_len)
{
	static const char *const names[] = { "attn_q", "attn_k", "attn_v",
		"attn_output", "ffn_gate", "ffn_up", "ffn_down" };
	char what[64];

	if (p->plan || p->device_path || p->kv_type != PG_F16) {
		snprintf(err, err_len, "llama.cpp numerics run on one CPU device with an F16 KV cache only: drop the parallel plan or --kv-type");
		return -EINVAL;
	}
	if (pg_cpu_isa_best() < PG_ISA_AVX2) {
		snprintf(err, err_len, "llama.cpp numerics need a CPU with AVX2, FMA and F16C (they reproduce llama.cpp's AVX2 build); this one has only %s%s",
			 pg_cpu_isa_name(pg_cpu_isa_best()),
			 pg_cpu_isa_hw() != pg_cpu_isa_best() ?
			 " (" PG_CPU_KERNELS_ENV " says so: unset it or set avx2)" : "");
		return -ENOTSUP;
	}
	for (int b = 0; b < m->hp.n_blocks; b++) {
		const struct pg_block_weights *w = &m->blocks[b];
		const struct pg_matrix *mx[] = { &w->wq, &w->wk, &w->wv, &w->wo,
						 &w->w_gate, &w->w_up, &w->w_down };

		for (int i = 0; i < 7; i++) {
			if (mx[i]->type == PG_Q4_1 || mx[i]->type == PG_Q8_0)
				continue;
			snprintf(what, sizeof(what), "block %d's %s is %s", b,
				 names[i], pg_dtype_name(mx[i]->type));
			goto refuse;
		}
	}
	if (m->output.type == PG_Q4_1 || m->output.type == PG_Q8_0)
		return 0;
	snprintf(what, sizeof(what), "the output head is %s",
		 pg_dtype_name(m->output.type));
refuse:
	snprintf(err, err_len, "llama.cpp numerics reproduce Q4_1 and Q8_0 weights only (llama.cpp runs kernels of its own for the others, e.g. Q4_0 repacked); %s: use --numerics pagoda",
		 what);
	return -ENOTSUP;
}

int pg_forward_create(const struct pg_model *m,
		      const struct pg_forward_params *p,
		      struct pg_forward **out, char *err, size_t err_len)
{
	const struct pg_hparams *hp = &m->hp;
	struct pg_forward *fw;
	size_t page_bytes;
	int rc;

	if (p->max_batch_tokens < 1 || p->page_tokens < 1 || p->n_pages < 0 ||
	    !(p->kv_fraction >= 0 && p->kv_fraction <= 1)) {
		snprintf(err, err_len, "forward: max_batch_tokens and page_tokens must be >= 1, n_pages >= 0, kv_fraction in 0..1");
		return -EINVAL;
	}
	if (p->numerics == PG_NUMERICS_LLAMA_CPP &&
	    (rc = llama_numerics_ok(m, p, err, err_len)))
		return rc;
	page_bytes = pg_kv_page_bytes_for(p->page_tokens, hp->n_blocks,
					  hp->n_kv_heads, hp->head_dim,
					  p->kv_type);
	fw = calloc(1, sizeof(*fw));
	if (!fw)
		return -ENOMEM;
	fw->m = m;
	fw->p = *p;
	fw->p.plan = NULL;
	if (p->numerics == PG_NUMERICS_LLAMA_CPP)
		fw->p.isa = PG_ISA_AVX2;	/* the build llama.cpp's bits are of */
	pthread_mutex_init(&fw->lock, NULL);
	pthread_cond_init(&fw->cond, NULL);
	fw->p.n_pages = pages_wanted(m, p, page_bytes);
	if (fw->p.n_pages < 1) {
		snprintf(err, err_len, "the KV cache size leaves no page of %zu bytes (%d tokens); give it more memory",
			 page_bytes, p->page_tokens);
		free(fw);
		return -EINVAL;
	}
	if (p->plan) {
		fw->plan = *p->plan;
	} else {
		fw->plan = (struct pg_plan){ .pp = 1, .tp = 1, .cp = 1,
					     .n_devices = 1 };
		fw->plan.first_block[1] = hp->n_blocks;
	}
	rc = plan_ok(fw, err, err_len);
	if (rc)
		goto out_free;
	fw->n_dev = fw->plan.n_devices;
	fw->threaded = fw->n_dev > 1;
	fw->gpus = fw->plan.dev[0].kind == PG_DEV_CUDA && p->plan;
	fw->n_slots = fw->threaded ? fw->plan.pp : 1;
	if (fw->n_slots > PG_FW_MAX_INFLIGHT)
		fw->n_slots = PG_FW_MAX_INFLIGHT;
	fw->dev = calloc((size_t)fw->n_dev, sizeof(*fw->dev));
	if (!fw->dev) {
		rc = -ENOMEM;
		goto out_free;
	}
	for (int i = 0; i < fw->n_dev; i++)
		pthread_mutex_init(&fw->dev[i].be_lock, NULL);
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];

		d->index = i;
		d->c = i % fw->plan.cp;
		d->t = i / fw->plan.cp % fw->plan.tp;
		d->stage = i / (fw->plan.cp * fw->plan.tp);
		d->info = p->plan ? &fw->plan.dev[i] : NULL;
		rc = setup_device(fw, d, page_bytes, err, err_len);
		if (rc)
			goto out_free;
	}
	for (int i = 0; i < fw->n_slots; i++)
		if ((rc = alloc_job(fw, &fw->jobs[i])))
			goto out_nomem;
	if (fw->threaded) {
		rc = setup_comms(fw, err, err_len);
		if (rc)
			goto out_free;
		fw->setup_pending = fw->gpus ? fw->n_dev : 0;
		if (fw->gpus) {
			fw->nccl_timeout_s = nccl_timeout_s();
			fw->nccl_deadline_ns = (int64_t)now_ns() +
				(int64_t)fw->nccl_timeout_s * 1000000000;
		}
		for (int i = 0; i < fw->n_dev; i++) {
			rc = -pthread_create(&fw->dev[i].thread, NULL,
					     device_main, &fw->dev[i]);
			if (rc) {
				/* the started ones must not wait for it */
				atomic_store(&fw->nccl_cancel, 1);
				snprintf(err, err_len, "cannot start the thread of device %s: %s",
					 fw->dev[i].info ? fw->dev[i].info->name : "0",
					 strerror(-rc));
				goto out_free;
			}
			fw->dev[i].started = 1;
		}
		if ((rc = wait_setup(fw, err, err_len)))
			goto out_free;
	}
	fw->created_ns = fw->stats_ns = now_ns();
	*out = fw;
	return 0;
out_nomem:
	snprintf(err, err_len, "cannot allocate the batches' bookkeeping: %s",
		 strerror(-rc));
out_free:
	pg_forward_destroy(fw);
	return rc;
}

void pg_forward_destroy(struct pg_forward *fw)
{
	if (!fw)
		return;
	while (fw->n_inflight > 0)
		pg_forward_wait(fw);
	pthread_mutex_lock(&fw->lock);
	fw->stop = 1;
	pthread_cond_broadcast(&fw->cond);
	pthread_mutex_unlock(&fw->lock);
	for (int i = 0; fw->dev && i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];

		if (d->started)
			pthread_join(d->thread, NULL);
		pg_kv_store_destroy(d->kv);
		if (d->devmem) {
			d->be->ops->free(d->be, d->arena);
			d->be->ops->free(d->be, d->wmem);
			d->be->ops->free(d->be, d->s.lg);
			d->be->ops->free(d->be, d->s.lg_all);
			d->arena = d->s.lg = d->s.lg_all = NULL;
		}
		/* communicators first: an NCCL one needs its device's context */
		if (d->world)
			d->world->ops->destroy(d->world);
		if (d->tp)
			d->tp->ops->destroy(d->tp);
		if (d->cp)
			d->cp->ops->destroy(d->cp);
		if (d->be)
			d->be->ops->destroy(d->be);
		free(d->w);
		if (d->local)
			numa_free(d->local, d->local_bytes);
		if (d->packed && d->packed_numa)
			numa_free(d->packed, d->packed_bytes);
		else if (d->packed)
			munmap(d->packed, d->packed_bytes);
		free(d->arena);
		free(d->s.lg);
		free(d->s.lg_all);
		free(d->s.lg_host);
		free(d->s.slots);
		pthread_mutex_destroy(&d->be_lock);
	}
	for (int i = 0; fw->g_tp && i < fw->n_g_tp; i++)
		pg_comm_shm_group_destroy(fw->g_tp[i]);
	for (int i = 0; fw->g_cp && i < fw->n_g_cp; i++)
		pg_comm_shm_group_destroy(fw->g_cp[i]);
	pg_comm_shm_group_destroy(fw->g_world);
	free(fw->g_tp);
	free(fw->g_cp);
	free(fw->nccl_ids);
	for (int i = 0; i < PG_FW_MAX_INFLIGHT; i++)
		free_job(&fw->jobs[i]);
	free(fw->dev);
	pthread_mutex_destroy(&fw->lock);
	pthread_cond_destroy(&fw->cond);
	free(fw);
}

int pg_forward_n_pages(const struct pg_forward *fw)
{
	return fw->p.n_pages;
}

int pg_forward_page_tokens(const struct pg_forward *fw)
{
	return fw->p.page_tokens;
}

/*
 * Called on the engine's thread while earlier batches may still run on the
 * device threads (pipeline stages).  Neither page is one they use: dst is
 * newly taken, and src, shared, is written by no one (a writer copies it
 * first).  So host memory is copied at once; a device with memory of its
 * own waits for the job it runs, since its backend serves one thread.
 */
void pg_forward_copy_page(struct pg_forward *fw, int32_t src, int32_t dst)
{
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];
		int rc;

		if (d->devmem)
			pthread_mutex_lock(&d->be_lock);
		rc = pg_kv_store_copy(d->kv, src, dst, d->err, sizeof(d->err));
		/* a device that failed fails the next batch, which says so */
		if (rc && !d->sticky_rc)
			d->sticky_rc = rc;
		if (d->devmem)
			pthread_mutex_unlock(&d->be_lock);
	}
}

int pg_forward_max_batch(const struct pg_forward *fw)
{
	return fw->p.max_batch_tokens;
}

/*
 * A CPU device counts its backend's threads; a GPU counts the one host
 * thread that drives it (its kernels run on the GPU, not on CPU threads).
 */
int pg_forward_threads(const struct pg_forward *fw)
{
	int n = 0;

	for (int i = 0; i < fw->n_dev; i++)
		n += fw->dev[i].be->ops->host_memory ?
		     pg_cpu_backend_threads(fw->dev[i].be) : 1;
	return n;
}

const char *pg_forward_isa_name(const struct pg_forward *fw)
{
	if (!fw->dev[0].be->ops->host_memory)
		return fw->dev[0].be->ops->name;
	return pg_cpu_isa_name(pg_cpu_backend_isa(fw->dev[0].be));
}

enum pg_numerics pg_forward_numerics(const struct pg_forward *fw)
{
	return fw->p.numerics;
}

size_t pg_forward_packed_bytes(const struct pg_forward *fw)
{
	size_t b = 0;

	for (int i = 0; i < fw->n_dev; i++)
		b += fw->dev[i].packed_bytes;
	return b;
}

int pg_forward_max_inflight(const struct pg_forward *fw)
{
	return fw->n_slots;
}

const struct pg_plan *pg_forward_plan(const struct pg_forward *fw)
{
	return &fw->plan;
}

/* ---- one batch ---- */

/* A sequence's page table covers its positions with ids in range. */
static int pages_ok(const struct pg_forward *fw, const struct pg_fw_seq *sq)
{
	int pt = fw->p.page_tokens;
	int n_pages = (sq->n_past + sq->n_tokens + pt - 1) / pt;

	if (!sq->pages || sq->n_past < 0 || sq->n_tokens < 1)
		return 0;
	for (int i = 0; i < n_pages; i++)
		if (sq->pages[i] < 0 || sq->pages[i] >= fw->p.n_pages)
			return 0;
	return 1;
}

/* Check the batch and lay out positions and attention spans in job j. */
static int prepare(struct pg_forward *fw, struct job *j,
		   const int32_t *tokens, int n_tokens,
		   const struct pg_fw_seq *seqs, int n_seqs, float *logits)
{
	int row = 0;

	if (n_tokens > fw->p.max_batch_tokens)
		return -E2BIG;
	if (n_tokens < 1 || n_seqs < 1 || n_seqs > n_tokens || !logits)
		return -EINVAL;
	for (int i = 0; i < n_tokens; i++)
		if (tokens[i] < 0 || tokens[i] >= fw->m->hp.n_vocab)
			return -EINVAL;
	for (int i = 0; i < n_seqs; i++) {
		if (!pages_ok(fw, &seqs[i]))
			return -EINVAL;
		row += seqs[i].n_tokens;
	}
	if (row != n_tokens)
		return -EINVAL;
	memcpy(j->tokens, tokens, (size_t)n_tokens * sizeof(*tokens));
	memcpy(j->seqs, seqs, (size_t)n_seqs * sizeof(*seqs));
	j->n_tokens = n_tokens;
	j->n_seqs = n_seqs;
	j->logits = logits;
	j->n_out = 0;
	row = 0;
	for (int i = 0; i < n_seqs; i++) {
		const struct pg_fw_seq *sq = &seqs[i];

		j->aseqs[i] = (struct pg_attn_seq){
			.pages = sq->pages,
			.n_ctx = sq->n_past + sq->n_tokens,
			.first_row = row,
			.n_rows = sq->n_tokens,
		};
		for (int k = 0; k < sq->n_tokens; k++, row++) {
			j->pos[row] = sq->n_past + k;
			if (sq->logits_all || k == sq->n_tokens - 1)
				j->out_rows[j->n_out++] = row;
		}
	}
	return 0;
}

/* This device's KV slot of every row (-1: another CP rank holds it). */
static void device_slots(const struct device *d, const struct job *j)
{
	int pt = d->fw->p.page_tokens, cp = d->fw->plan.cp, ptl = pt / cp;

	for (int i = 0, row = 0; i < j->n_seqs; i++)
		for (int k = 0; k < j->seqs[i].n_tokens; k++, row++) {
			int pos = j->pos[row], o = pos % pt;

			d->s.slots[row] = o / ptl == d->c ?
				j->seqs[i].pages[pos / pt] * ptl + o % ptl : -1;
		}
}

static uint64_t comm_ns(const struct device *d)
{
	uint64_t ns = d->world ? d->world->stats.wait_ns : 0;

	if (d->tp)
		ns += d->tp->stats.wait_ns;
	if (d->cp)
		ns += d->cp->stats.wait_ns;
	return ns;
}

/* Room for rows logits rows of the local and gathered vocabulary slices. */
static int grow_logits(struct device *d, size_t rows)
{
	size_t tp = (size_t)head_size(&d->fw->plan), vp = (size_t)d->vpad;
	struct pg_backend *be = d->be;
	float *a, *b;

	if (rows <= d->s.lg_rows)
		return 0;
	if (d->devmem) {
		/* the device's logits, and the host's copy of them */
		be->ops->free(be, d->s.lg);
		be->ops->free(be, d->s.lg_all);
		free(d->s.lg_host);
		d->s.lg_rows = 0;
		d->s.lg = be->ops->alloc(be, rows * vp * sizeof(float));
		d->s.lg_all = tp > 1 ? be->ops->alloc(be, tp * rows * vp *
						      sizeof(float)) : NULL;
		d->s.lg_host = malloc(tp * rows * vp * sizeof(float));
		if (!d->s.lg || (tp > 1 && !d->s.lg_all) || !d->s.lg_host)
			return -ENOMEM;
		d->s.lg_rows = rows;
		return 0;
	}
	a = realloc(d->s.lg, rows * vp * sizeof(float));
	if (a)
		d->s.lg = a;
	b = realloc(d->s.lg_all, tp * rows * vp * sizeof(float));
	if (b)
		d->s.lg_all = b;
	if (!a || !b)
		return -ENOMEM;
	d->s.lg_rows = rows;
	return 0;
}

/*
 * End a step that step_begin opened (before the device's memory is read
 * or a communicator called): 0, or the device's error.
 */
static int close_step(struct device *d, int *open)
{
	if (!*open)
		return 0;
	*open = 0;
	return d->be->ops->step_end(d->be, d->err, sizeof(d->err));
}

/* Copy n bytes of the device's memory at src to the host, at dst. */
static int fetch(struct device *d, void *dst, const void *src, size_t n)
{
	return d->be->ops->download(d->be, dst, src, n, d->err,
				    sizeof(d->err));
}

/* Final norm and output projection of the rows whose logits are wanted. */
static int head(struct device *d, const struct job *j, int *open)
{
	int dm = d->fw->m->hp.n_embd, nv = d->fw->m->hp.n_vocab;
	int n_out = j->n_out, rc;
	float cap = d->fw->m->arch.final_softcap;
	struct scratch *s = &d->s;
	struct pg_backend *be = d->be;
	struct pg_comm *hc = d->tp ? d->tp : d->cp;
	const float *in = s->x;
	const float *lg;

	for (int i = 0; i < n_out; i++)
		if (j->out_rows[i] != i) {
			/* gather the wanted rows, as a lookup in x */
			struct pg_matrix xm = {
				.type = PG_F32, .n_rows = j->n_tokens,
				.n_cols = dm, .row_bytes = (size_t)dm * 4,
				.data = s->x,
			};

			be->ops->get_rows(be, &xm, j->out_rows, n_out, s->xb);
			in = s->xb;
			break;
		}
	be->ops->rmsnorm(be, in, d->output_norm, n_out, dm,
			 d->fw->m->hp.rms_eps, s->xb);
	if (!hc && !d->devmem) {
		be->ops->matmul(be, &d->out_w, s->xb, n_out, NULL, j->logits);
		if (cap > 0.0f)
			be->ops->softcap(be, j->logits, cap, (int64_t)n_out * nv);
		return 0;
	}
	if ((rc = grow_logits(d, (size_t)n_out))) {
		close_step(d, open);
		return rc;
	}
	/* rows of vpad floats: this rank's slice, zero-padded (tanh(0) = 0) */
	be->ops->matmul(be, &d->out_w, s->xb, n_out, NULL, s->lg);
	if (cap > 0.0f)
		be->ops->softcap(be, s->lg, cap, (int64_t)n_out * d->vpad);
	if ((rc = close_step(d, open)))
		return rc;
	if (!hc)	/* a device's memory, one rank: vpad == n_vocab */
		return fetch(d, j->logits, s->lg,
			     (size_t)n_out * nv * sizeof(float));
	if (d->nv < d->vpad && !d->devmem)	/* a device's slice is padded */
		for (int i = n_out - 1; i >= 0; i--) {
			memmove(s->lg + (size_t)i * d->vpad,
				s->lg + (size_t)i * d->nv,
				sizeof(float) * (size_t)d->nv);
			memset(s->lg + (size_t)i * d->vpad + d->nv, 0,
			       sizeof(float) * (size_t)(d->vpad - d->nv));
		}
	rc = hc->ops->all_gather(hc, s->lg,
				    (size_t)n_out * d->vpad * sizeof(float),
				    s->lg_all);
	if (rc || d->c != 0 || d->t != 0)
		return rc;
	lg = s->lg_all;
	if (d->devmem) {
		rc = fetch(d, s->lg_host, s->lg_all, (size_t)head_size(&d->fw->plan) *
			   n_out * d->vpad * sizeof(float));
		if (rc)
			return rc;
		lg = s->lg_host;
	}
	for (int r = 0; r < head_size(&d->fw->plan); r++) {
		int v0 = r * d->vpad;
		int cnt = nv - v0 < d->vpad ? nv - v0 : d->vpad;

		for (int i = 0; i < n_out; i++)
			memcpy(j->logits + (size_t)i * nv + v0,
			       lg + ((size_t)r * n_out + i) * d->vpad,
			       sizeof(float) * (size_t)cnt);
	}
	return 0;
}

/* Everything device d does for one batch. */
static int run_job(struct device *d, const struct job *j)
{
	const struct pg_plan *pl = &d->fw->plan;
	size_t x_bytes = (size_t)j->n_tokens * d->fw->m->hp.n_embd *
			 sizeof(float);
	int rc, open = 0;

	if (d->sticky_rc)
		return d->sticky_rc;
	if (d->stage > 0) {
		rc = d->world->ops->recv(d->world, d->index - pl->tp * pl->cp,
					 d->s.x, x_bytes);
		if (rc)
			return rc;
	}
	if (d->graphs) {
		d->be->ops->step_begin(d->be);
		open = 1;
	}
	if (d->stage == 0) {
		float es = d->fw->m->arch.emb_scale;

		d->be->ops->get_rows(d->be, &d->tok_embd, j->tokens,
				     j->n_tokens, d->s.x);
		if (es > 0.0f)
			d->be->ops->scale(d->be, d->s.x, es, (int64_t)j->n_tokens *
					  d->fw->m->hp.n_embd);
	}
	device_slots(d, j);
	for (int lb = 0; lb < d->n_blocks; lb++) {
		if (d->fault_after > 0 && lb + 1 == d->fault_after) {
			d->fault_after = 0;
			close_step(d, &open);
			return -EIO;
		}
		if ((rc = pg_block_run(d, j, lb))) {
			close_step(d, &open);
			return rc;
		}
	}
	if (d->stage < pl->pp - 1) {
		if ((rc = close_step(d, &open)))
			return rc;
		return d->world->ops->send(d->world, d->index + pl->tp * pl->cp,
					   d->s.x, x_bytes);
	}
	return head(d, j, &open);
}

/* Clear an abort on every group of device d. */
static void reset_device(struct device *d)
{
	if (d->world)
		d->world->ops->reset(d->world);
	if (d->tp)
		d->tp->ops->reset(d->tp);
	if (d->cp)
		d->cp->ops->reset(d->cp);
}

static void abort_device(struct device *d)
{
	if (d->world)
		d->world->ops->abort(d->world);
	if (d->tp)
		d->tp->ops->abort(d->tp);
	if (d->cp)
		d->cp->ops->abort(d->cp);
}

/*
 * Device d has finished job j with rc.  The batch's error is the cause,
 * not the -ECANCELED of the devices that the failing one's abort stopped.
 */
static void job_done(struct pg_forward *fw, struct job *j, int rc)
{
	int cur = atomic_load(&j->rc);

	while (rc && (cur == 0 || (cur == -ECANCELED && rc != -ECANCELED)) &&
	       !atomic_compare_exchange_weak(&j->rc, &cur, rc))
		;
	if (atomic_fetch_sub(&j->pending, 1) == 1) {
		pthread_mutex_lock(&fw->lock);
		j->done = 1;
		pthread_cond_broadcast(&fw->cond);
		pthread_mutex_unlock(&fw->lock);
	}
}

/*
 * A device with memory of its own failed (a device fault, which stays):
 * say what failed once, on stderr, which pagodad sends to its log.
 */
static void report_fault(struct device *d, int rc)
{
	if (!rc || !d->devmem || !d->err[0])
		return;
	fprintf(stderr, "pagoda: device %s failed: %s\n",
		d->info ? d->info->name : "cpu:0", d->err);
	d->err[0] = 0;
	if (!d->sticky_rc)
		d->sticky_rc = rc;
}

static void *device_main(void *arg)
{
	struct device *d = arg;
	struct pg_forward *fw = d->fw;
	uint64_t next = 0;

	if (d->info && d->info->n_cpus > 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(d->info->cpus[0], &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	if (fw->gpus) {
		char why[320] = "", msg[384];
		int rc = join_nccl(d, why, sizeof(why));

		snprintf(msg, sizeof(msg), "device %s: cannot join %s",
			 d->info->name, why);
		pthread_mutex_lock(&fw->lock);
		setup_failed(fw, rc, msg);
		fw->setup_pending--;
		pthread_cond_broadcast(&fw->cond);
		pthread_mutex_unlock(&fw->lock);
	}
	for (;;) {
		struct job *j;
		uint64_t t0;
		int rc;

		pthread_mutex_lock(&fw->lock);
		while (!fw->stop && fw->queued == next)
			pthread_cond_wait(&fw->cond, &fw->lock);
		if (fw->stop && fw->queued == next) {
			pthread_mutex_unlock(&fw->lock);
			return NULL;
		}
		j = fw->queue[next % (PG_FW_MAX_INFLIGHT + 1)];
		next++;
		pthread_mutex_unlock(&fw->lock);
		if (d->devmem)
			pthread_mutex_lock(&d->be_lock);
		if (j->kind == JOB_RESET) {
			reset_device(d);
			if (d->devmem)
				pthread_mutex_unlock(&d->be_lock);
			job_done(fw, j, 0);
			continue;
		}
		t0 = now_ns();
		rc = run_job(d, j);
		if (rc) {
			report_fault(d, rc);
			abort_device(d);
		}
		if (d->devmem)
			pthread_mutex_unlock(&d->be_lock);
		d->busy_ns += now_ns() - t0;
		d->steps++;
		job_done(fw, j, rc);
	}
}

/* Hand job j to every device (threaded) or run it here. */
static void start_job(struct pg_forward *fw, struct job *j)
{
	atomic_store(&j->pending, fw->n_dev);
	atomic_store(&j->rc, 0);
	j->done = 0;
	if (!fw->threaded) {
		uint64_t t0 = now_ns();
		int rc = run_job(&fw->dev[0], j);

		report_fault(&fw->dev[0], rc);
		fw->dev[0].busy_ns += now_ns() - t0;
		fw->dev[0].steps++;
		atomic_store(&j->rc, rc);
		atomic_store(&j->pending, 0);
		j->done = 1;
		return;
	}
	pthread_mutex_lock(&fw->lock);
	fw->queue[fw->queued % (PG_FW_MAX_INFLIGHT + 1)] = j;
	fw->queued++;
	pthread_cond_broadcast(&fw->cond);
	pthread_mutex_unlock(&fw->lock);
}

static int wait_job(struct pg_forward *fw, struct job *j)
{
	if (fw->threaded) {
		pthread_mutex_lock(&fw->lock);
		while (!j->done)
			pthread_cond_wait(&fw->cond, &fw->lock);
		pthread_mutex_unlock(&fw->lock);
	}
	return atomic_load(&j->rc);
}

/* After a failed batch and once nothing is in flight: clear the aborts. */
static void reset_if_needed(struct pg_forward *fw)
{
	if (!fw->need_reset || fw->n_inflight)
		return;
	fw->reset_job.kind = JOB_RESET;
	start_job(fw, &fw->reset_job);
	wait_job(fw, &fw->reset_job);
	fw->need_reset = 0;
}

int pg_forward_submit(struct pg_forward *fw, const int32_t *tokens,
		      int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		      float *logits)
{
	struct job *j;
	int rc;

	if (fw->n_inflight >= fw->n_slots)
		return -EBUSY;
	if (fw->need_reset) {
		while (fw->n_inflight)
			pg_forward_wait(fw);
		reset_if_needed(fw);
	}
	j = &fw->jobs[(fw->head + fw->n_inflight) % fw->n_slots];
	rc = prepare(fw, j, tokens, n_tokens, seqs, n_seqs, logits);
	if (rc)
		return rc;
	j->kind = JOB_RUN;
	fw->n_inflight++;
	start_job(fw, j);
	return 0;
}

int pg_forward_wait(struct pg_forward *fw)
{
	struct job *j;
	int rc;

	if (!fw->n_inflight)
		return -ENOENT;
	j = &fw->jobs[fw->head];
	rc = wait_job(fw, j);
	fw->head = (fw->head + 1) % fw->n_slots;
	fw->n_inflight--;
	if (rc && fw->threaded)
		fw->need_reset = 1;
	reset_if_needed(fw);
	return rc;
}

int pg_forward_batch(struct pg_forward *fw, const int32_t *tokens,
		     int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		     float *logits)
{
	int rc;

	while (fw->n_inflight)
		pg_forward_wait(fw);
	rc = pg_forward_submit(fw, tokens, n_tokens, seqs, n_seqs, logits);
	if (rc)
		return rc;
	return pg_forward_wait(fw);
}

/* ---- figures ---- */

int pg_forward_n_devices(const struct pg_forward *fw)
{
	return fw->n_dev;
}

void pg_forward_device_stats(const struct pg_forward *fw, int i,
			     struct pg_forward_dev_stats *st)
{
	const struct device *d = &fw->dev[i];
	const struct pg_comm *cs[3] = { d->world, d->tp, d->cp };

	memset(st, 0, sizeof(*st));
	snprintf(st->name, sizeof(st->name), "%s",
		 d->info ? d->info->name : "cpu:0");
	st->stage = d->stage;
	st->tp_rank = d->t;
	st->cp_rank = d->c;
	st->first_block = d->first_block;
	st->n_blocks = d->n_blocks;
	st->steps = d->steps;
	st->busy_ns = d->busy_ns;
	st->comm_ns = comm_ns(d);
	st->compute_ns = st->busy_ns > st->comm_ns ? st->busy_ns - st->comm_ns : 0;
	st->wall_ns = now_ns() - fw->stats_ns;
	for (int k = 0; k < 3; k++) {
		if (!cs[k])
			continue;
		st->bytes += cs[k]->stats.bytes_out;
		st->n_all_reduce += cs[k]->stats.n_all_reduce;
		st->n_all_gather += cs[k]->stats.n_all_gather;
		st->n_send += cs[k]->stats.n_send;
		st->n_recv += cs[k]->stats.n_recv;
	}
}

void pg_forward_reset_stats(struct pg_forward *fw)
{
	while (fw->n_inflight)
		pg_forward_wait(fw);
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];
		struct pg_comm *cs[3] = { d->world, d->tp, d->cp };

		d->busy_ns = 0;
		d->steps = 0;
		for (int k = 0; k < 3; k++)
			if (cs[k])
				memset(&cs[k]->stats, 0, sizeof(cs[k]->stats));
	}
	fw->stats_ns = now_ns();
}

int pg_forward_inject_fault(struct pg_forward *fw, int device, int block)
{
	if (device < 0 || device >= fw->n_dev || block < 1 ||
	    block > fw->dev[device].n_blocks)
		return -EINVAL;
	while (fw->n_inflight)
		pg_forward_wait(fw);
	fw->dev[device].fault_after = block;
	return 0;
}
