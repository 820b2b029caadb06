/*
 * weights.c - where a device's weights live: its slices of the model's
 * matrices (views into the file's mapping: rows for Q, K, V, gate, up and
 * the vocabulary, columns for Wo and Wdown), copied onto its NUMA node
 * when it is bound to one, repacked for the CPU backend's packed loops or
 * copied onto huge pages (fw_pack_weights), or uploaded into the memory of a
 * backend that has its own (a GPU).  forward.c's setup_device calls these
 * once per device; nothing here runs a batch.
 */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/engine/forward_impl.h"

/* m's rows copied end to end to p (fw_matrix_bytes(m) bytes); m then
 * describes the copy. */
static void copy_rows(struct pg_matrix *m, uint8_t *p)
{
	size_t rb = pg_dtype_row_bytes(m->type, (uint64_t)m->n_cols);

	for (int64_t r = 0; r < m->n_rows; r++)
		memcpy(p + (size_t)r * rb,
		       (const uint8_t *)m->data + (size_t)r * m->row_bytes, rb);
	m->data = p;
	m->row_bytes = rb;
}

/* The bytes m takes repacked by d's backend, or 0 (not, or no such op). */
static size_t pack_bytes(struct device *d, const struct pg_matrix *m)
{
	return d->be->ops->pack_bytes ? d->be->ops->pack_bytes(d->be, m) : 0;
}

/* ---- weight slices (views into the model's mapping) ---- */

/* Output rows r0 .. r0 + n - 1 of m. */
struct pg_matrix fw_rows_of(const struct pg_matrix *m, int64_t r0,
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

void fw_slice_block(const struct pg_hparams *hp, const struct device *d,
			const struct pg_block_weights *w,
			struct pg_block_weights *o)
{
	int hd = hp->head_dim;

	*o = *w;
	o->wq = fw_rows_of(&w->wq, (int64_t)d->h0 * hd, (int64_t)d->nq * hd);
	o->bq = bias_of(w->bq, (int64_t)d->h0 * hd);
	o->wk = fw_rows_of(&w->wk, (int64_t)d->k0 * hd, (int64_t)d->nkv * hd);
	o->bk = bias_of(w->bk, (int64_t)d->k0 * hd);
	o->wv = fw_rows_of(&w->wv, (int64_t)d->k0 * hd, (int64_t)d->nkv * hd);
	o->bv = bias_of(w->bv, (int64_t)d->k0 * hd);
	o->wo = cols_of(&w->wo, (int64_t)d->h0 * hd, (int64_t)d->nq * hd);
	o->w_gate = fw_rows_of(&w->w_gate, d->f0, d->nff);
	o->w_up = fw_rows_of(&w->w_up, d->f0, d->nff);
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

size_t fw_matrix_bytes(const struct pg_matrix *m)
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
int fw_localize_weights(struct device *d, int node)
{
	struct pg_matrix **ms;
	size_t bytes = 0;
	uint8_t *p;
	int n, k = 0;

	ms = device_matrices(d, &n);
	if (!ms)
		return -ENOMEM;
	for (int i = 0; i < n; i++)	/* fw_pack_weights places the others */
		if (!pack_bytes(d, ms[i]))
			ms[k++] = ms[i];
	n = k;
	for (int i = 0; i < n; i++)
		bytes += (fw_matrix_bytes(ms[i]) + 63) / 64 * 64;
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
	madvise(d->local, bytes, MADV_HUGEPAGE);	/* as fw_pack_weights' */
	p = d->local;
	for (int i = 0; i < n; i++) {
		copy_rows(ms[i], p);
		p += (fw_matrix_bytes(ms[i]) + 63) / 64 * 64;
	}
	free(ms);
	return 0;
}

/*
 * The bytes matrix m takes in fw_pack_weights' allocation: repacked for the
 * backend's packed loops (groups of 8 or 16 rows) where it takes them,
 * else (a device bound to no node; fw_localize_weights copied them for
 * the others) copied as rows.
 */
static size_t placed_bytes(struct device *d, const struct pg_matrix *m,
			   int node, int *packed)
{
	size_t b = pack_bytes(d, m);

	*packed = b > 0;
	if (!b && node < 0)
		b = fw_matrix_bytes(m);
	return (b + 63) / 64 * 64;
}

/*
 * A CPU device's matrices in one allocation, made once: those its backend
 * takes repacked for its packed loops (its pack op: the same bits,
 * faster) repacked, and on a device bound to no node (node < 0) the others
 * copied as rows, so that a decode's sweep over every weight reads huge
 * pages (MADV_HUGEPAGE) rather than the file's 4 KiB ones: Gemma 3 270M,
 * 2 threads, tg128 +10-18% (its Q8_0 output head is 73% of the bytes).
 * On a device bound to a node (node >= 0), on that node; fw_localize_weights
 * placed the others there.  The matrices then point into it.
 */
int fw_pack_weights(struct device *d, int node, char *err,
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
	for (int i = 0; i < n; i++) {
		int packed;

		bytes += placed_bytes(d, ms[i], node, &packed);
	}
	if (!bytes) {
		free(ms);
		return 0;
	}
	if (node >= 0) {	/* a node fw_localize_weights checked */
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
		snprintf(err, err_len, "device %s: cannot allocate %.1f MiB for its weights, repacked for the CPU's packed loops or copied onto huge pages (they then replace the model file's pages): free that much memory%s",
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
		int packed;

		b = placed_bytes(d, m, node, &packed);
		if (packed)
			d->be->ops->pack(d->be, m, p);
		else if (b)
			copy_rows(m, p);
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
int fw_upload_weights(struct device *d, int head_split, char *err,
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
