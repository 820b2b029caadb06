/*
 * attention.c - the attention op: causal, grouped-query scaled dot-product
 * attention over paged KV storage.
 *
 * Keys are taken a page run at a time (at most PG_ATTN_CHUNK of them): their
 * scores go to a small stack buffer, the running maximum is updated once per
 * run (online softmax), and V rows are accumulated in f32 through the ISA
 * table's attention loops, which read F32, F16 or BF16 pages directly.
 * Work is shared by rows (prompts) or by runs of heads (decode).
 * It does not write the KV pages (kv_write.c does).
 */
#include <math.h>

#include "cpu_impl.h"

#define PG_ATTN_CHUNK 64
#define PG_ATTN_MAX_HEAD_DIM 1024

struct attn_ctx {
	const struct pg_cpu_kernels *k;
	const struct pg_kv_layout *kv;
	int block;
	const float *q;			/* (rows, n_heads * head_dim) */
	int n_heads;
	const struct pg_attn_seq *seqs;	/* (n_seqs) */
	int n_seqs;
	float scale;
	float *out;			/* (rows, n_heads * head_dim) */
};

/* Running state of one query's softmax: max m, sum l, weighted V in acc. */
struct attn_state {
	float m, l;
	float *acc;			/* (head_dim) */
};

/* Fold keys slot0 .. slot0 + n - 1 (one page, contiguous) into st. */
static void attn_run(const struct attn_ctx *c, int kvh, int32_t slot0, int n,
		     const float *q, struct attn_state *st)
{
	const struct pg_kv_layout *kv = c->kv;
	float s[PG_ATTN_CHUNK], mx = st->m;

	c->k->attn_scores(kv->type, n, kv->head_dim,
			  pg_kv_row(kv, c->block, 0, kvh, slot0), q, s);
	for (int j = 0; j < n; j++) {
		s[j] *= c->scale;
		mx = s[j] > mx ? s[j] : mx;	/* fmaxf() is a libm call */
	}
	if (mx > st->m) {
		float r = expf(st->m - mx);	/* 0 on the first run */

		c->k->scale(kv->head_dim, r, st->acc);
		st->l *= r;
		st->m = mx;
	}
	st->l += c->k->exp_sum(n, s, mx);
	c->k->attn_values(kv->type, n, kv->head_dim, s,
			  pg_kv_row(kv, c->block, 1, kvh, slot0), st->acc);
}

/* out = softmax(q K^T * scale) V over positions 0 .. n_keys - 1. */
static void attn_one(const struct attn_ctx *c, const struct pg_attn_seq *seq,
		     int n_keys, int kvh, const float *q, float *out)
{
	int pt = c->kv->page_tokens, hd = c->kv->head_dim;
	float acc[PG_ATTN_MAX_HEAD_DIM];
	struct attn_state st = { .m = -INFINITY, .l = 0.0f, .acc = acc };

	for (int i = 0; i < hd; i++)
		acc[i] = 0.0f;
	for (int p = 0; p < n_keys;) {
		int off = p % pt;
		int n = pt - off;

		n = n < n_keys - p ? n : n_keys - p;
		n = n < PG_ATTN_CHUNK ? n : PG_ATTN_CHUNK;
		attn_run(c, kvh, seq->pages[p / pt] * pt + off, n, q, &st);
		p += n;
	}
	for (int i = 0; i < hd; i++)
		out[i] = acc[i] / st.l;
}

/* Query heads h0 .. h1 - 1 of one row, in order: heads sharing a KV head
 * follow each other, so its K and V are read from memory once. */
static void attn_heads(const struct attn_ctx *c, const struct pg_attn_seq *seq,
		       int i, int h0, int h1)
{
	int hd = c->kv->head_dim, group = c->n_heads / c->kv->n_kv_heads;
	size_t row = (size_t)(seq->first_row + i);
	int n_keys = seq->n_ctx - seq->n_rows + i + 1;

	for (int h = h0; h < h1; h++) {
		size_t o = (row * (size_t)c->n_heads + (size_t)h) * (size_t)hd;

		attn_one(c, seq, n_keys, h / group, c->q + o, c->out + o);
	}
}

/*
 * Many rows (prompts): whole rows dealt round-robin, since later rows of a
 * causal sequence have more keys.  Few rows (decode): each row's heads
 * split into contiguous runs, one per thread.
 */
static void attn_worker(void *arg, int ith, int nth)
{
	const struct attn_ctx *c = arg;
	int n_rows = 0, k = 0;

	for (int s = 0; s < c->n_seqs; s++)
		n_rows += c->seqs[s].n_rows;
	for (int s = 0; s < c->n_seqs; s++) {
		const struct pg_attn_seq *seq = &c->seqs[s];

		for (int i = 0; i < seq->n_rows; i++, k++) {
			int64_t h0, h1;

			if (n_rows >= 2 * nth) {
				if (k % nth == ith)
					attn_heads(c, seq, i, 0, c->n_heads);
				continue;
			}
			pg_split(c->n_heads, ith, nth, &h0, &h1);
			attn_heads(c, seq, i, (int)h0, (int)h1);
		}
	}
}

void pg_cpu_attention(struct pg_backend *be, const struct pg_kv_layout *kv,
		      int block, const float *q, int n_heads,
		      const struct pg_attn_seq *seqs, int n_seqs,
		      float scale, float *out)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct attn_ctx c = {
		.k = cpu->k, .kv = kv, .block = block, .q = q,
		.n_heads = n_heads, .seqs = seqs, .n_seqs = n_seqs,
		.scale = scale, .out = out,
	};

	pg_pool_run(cpu->pool, attn_worker, &c);
}
