/*
 * attention.c - the attention op: causal, grouped-query scaled dot-product
 * attention over paged KV storage.
 *
 * Keys are taken a page run at a time (at most PG_ATTN_CHUNK of them): their
 * scores go to a small stack buffer, the running maximum is updated once per
 * run (online softmax), and V rows are accumulated in f32 through the ISA
 * table's attention loops, which read F32, F16 or BF16 pages directly.
 * Scores take q rounded to the pages' type, the keys' precision.
 * A sliding-window block's row reads only the pages of its window; a
 * soft-capped block caps each score before the softmax.
 * Work is shared by rows (prompts) or by runs of heads (decode).
 * With llama.cpp numerics (pg_cpu_backend_llama_numerics), each query runs
 * llama.cpp's loop instead (llamacpp.c).
 * It does not write the KV pages (kv_write.c does).
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

#define PG_ATTN_CHUNK 64
#define PG_ATTN_MAX_HEAD_DIM 1024
#define PG_ATTN_MAX_LANES 4
#define PG_ATTN_MAX_MERGE 64	/* CP ranks attn_merge takes (the plan's
				   devices at most) */

struct attn_ctx {
	const struct pg_cpu_kernels *k;
	int llama;			/* llama.cpp's loop (llamacpp.c) */
	const struct pg_kv_layout *kv;
	int block;
	const float *q;			/* (rows, n_heads * head_dim) */
	int n_heads;
	struct pg_attn_heads heads;
	const struct pg_attn_seq *seqs;	/* (n_seqs) */
	int n_seqs;
	float scale;
	float *out;			/* (rows, n_heads * head_dim) */
	float *lse;			/* (rows, n_heads) or NULL */
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
	for (int j = 0; j < n; j++)
		s[j] *= c->scale;
	if (c->heads.softcap > 0.0f) {
		float cap = c->heads.softcap, inv = 1.0f / cap;

		for (int j = 0; j < n; j++)	/* as ggml: by 1/cap, not / cap */
			s[j] = cap * tanhf(s[j] * inv);
	}
	for (int j = 0; j < n; j++)
		mx = s[j] > mx ? s[j] : mx;	/* fmaxf() is a libm call */
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

/*
 * Merge n partial attentions of one query over disjoint key sets: out_p
 * (hd values) with lse_p each, weights exp(lse_p - max) summed in part
 * order.  One function, not inlined, for attn_merge and for the lanes of
 * attn_one, so that both round alike: a device's lanes give what CP
 * ranks give once gathered.
 */
static __attribute__((noinline)) void
merge_parts(const float *const *outs, const float *lses, int n, int hd,
	    float *o)
{
	float mx = -INFINITY, sum = 0.0f;

	for (int p = 0; p < n; p++)
		mx = lses[p] > mx ? lses[p] : mx;
	for (int d = 0; d < hd; d++)
		o[d] = 0.0f;
	if (mx == -INFINITY)
		return;
	for (int p = 0; p < n; p++) {
		float w;

		if (lses[p] == -INFINITY)
			continue;
		w = expf(lses[p] - mx);
		sum += w;
		for (int d = 0; d < hd; d++)
			o[d] += w * outs[p][d];
	}
	for (int d = 0; d < hd; d++)
		o[d] /= sum;
}

/* out = acc / l and *lse = log sum exp of st, or 0 and -inf when empty. */
static void attn_finish(const struct attn_state *st, int hd, float *out,
			float *lse)
{
	if (st->l == 0.0f) {
		for (int i = 0; i < hd; i++)
			out[i] = 0.0f;
		*lse = -INFINITY;
		return;
	}
	for (int i = 0; i < hd; i++)
		out[i] = st->acc[i] / st->l;
	*lse = st->m + logf(st->l);
}

/* llama.cpp numerics: llama.cpp's attention of one query (llamacpp.c). */
static void attn_llama(const struct attn_ctx *c, const struct pg_attn_seq *seq,
		       int lo, int n_keys, int kvh, const float *q, float *out)
{
	const struct pg_kv_layout *kv = c->kv;
	int pt = kv->page_tokens, hd = kv->head_dim;
	uint16_t q16[PG_ATTN_MAX_HEAD_DIM], acc[PG_ATTN_MAX_HEAD_DIM];
	float m = -INFINITY, l = 0.0f, inv;

	for (int i = 0; i < hd; i++) {
		q16[i] = pg_fp32_to_fp16(q[i]);
		acc[i] = 0;
	}
	for (int j = lo / pt; j * pt < n_keys; j++) {
		int p0 = j * pt > lo ? j * pt : lo;
		int n = n_keys - p0 < (j + 1) * pt - p0 ? n_keys - p0 :
			(j + 1) * pt - p0;
		int32_t slot = seq->pages[j] * pt + (p0 - j * pt);

		c->k->fa16_run(n, hd, pg_kv_row(kv, c->block, 0, kvh, slot),
			       pg_kv_row(kv, c->block, 1, kvh, slot), q16,
			       c->scale, &m, &l, acc);
	}
	inv = l == 0.0f ? 0.0f : 1.0f / l;
	for (int i = 0; i < hd; i++)
		out[i] = pg_fp16_to_fp32(acc[i]) * inv;
}

/*
 * out = softmax(q K^T * scale) V over the positions lo .. n_keys - 1 that
 * this store holds (lo > 0: a sliding window): page table entry j covers
 * page_tokens * cp_size positions, of which this store holds the run
 * starting cp_rank *
 * page_tokens (all of them without CP).  *lse = log sum exp(scores), or
 * -inf (and out = 0) when no position is held.
 *
 * With lanes (kv->lanes > 1), each lane of that run (page_tokens / lanes
 * slots) has a softmax of its own, read in runs of the same length and
 * order as a CP rank's store of one lane, and the lanes are merged as
 * attn_merge merges CP ranks' parts: the same bits as that many CP ranks.
 * lse is then NULL.
 */
static void attn_one(const struct attn_ctx *c, const struct pg_attn_seq *seq,
		     int lo, int n_keys, int kvh, const float *q, float *out,
		     float *lse)
{
	const struct pg_kv_layout *kv = c->kv;
	int pt = kv->page_tokens, hd = kv->head_dim;
	int cps = kv->cp_size > 1 ? kv->cp_size : 1;
	int nl = kv->lanes > 1 ? kv->lanes : 1, lt = pt / nl;
	int span = pt * cps, first = cps > 1 ? kv->cp_rank * pt : 0;
	float acc[PG_ATTN_MAX_LANES][PG_ATTN_MAX_HEAD_DIM];
	float qr[PG_ATTN_MAX_HEAD_DIM], lses[PG_ATTN_MAX_LANES];
	const float *outs[PG_ATTN_MAX_LANES];
	struct attn_state st[PG_ATTN_MAX_LANES];

	for (int l = 0; l < nl; l++) {
		st[l] = (struct attn_state){ .m = -INFINITY, .l = 0.0f,
					     .acc = acc[l] };
		for (int i = 0; i < hd; i++)
			acc[l][i] = 0.0f;
	}
	/*
	 * The keys are stored as F16 (or BF16): q is rounded to the same
	 * type, so that each score sums exact products of two 16-bit values,
	 * as llama.cpp and the CUDA backend compute them.
	 */
	if (kv->type != PG_F32) {
		c->k->round_kv(kv->type, hd, q, qr);
		q = qr;
	}
	/*
	 * A window's first position starts each run it cuts, in lanes as in
	 * a CP rank's store: the same runs, so the same bits.
	 */
	for (int j = lo / span; j * span + first < n_keys; j++)
		for (int l = 0; l < nl; l++) {
			int p0 = j * span + first + l * lt;
			int end = p0 + lt < n_keys ? p0 + lt : n_keys;
			int from = p0 > lo ? p0 : lo;

			for (int p = from; p < end; p += PG_ATTN_CHUNK) {
				int n = end - p < PG_ATTN_CHUNK ?
					end - p : PG_ATTN_CHUNK;

				attn_run(c, kvh, seq->pages[j] * pt + l * lt +
					 (p - p0), n, q, &st[l]);
			}
		}
	if (nl == 1) {
		float lse1;

		attn_finish(&st[0], hd, out, lse ? lse : &lse1);
		return;
	}
	/* each lane as a CP rank would store it, then attn_merge's merge */
	for (int l = 0; l < nl; l++) {
		attn_finish(&st[l], hd, acc[l], &lses[l]);
		outs[l] = acc[l];
	}
	merge_parts(outs, lses, nl, hd, out);
}

/* Query heads h0 .. h1 - 1 of one row, in order: heads sharing a KV head
 * follow each other, so its K and V are read from memory once. */
static void attn_heads(const struct attn_ctx *c, const struct pg_attn_seq *seq,
		       int i, int h0, int h1)
{
	const struct pg_attn_heads *hs = &c->heads;
	int hd = c->kv->head_dim;
	size_t row = (size_t)(seq->first_row + i);
	int n_keys = seq->n_ctx - seq->n_rows + i + 1;
	int lo = hs->window > 0 && n_keys > hs->window ? n_keys - hs->window : 0;

	for (int h = h0; h < h1; h++) {
		size_t rh = row * (size_t)c->n_heads + (size_t)h;
		int kvh = (hs->head0 + h) / hs->group - hs->kv_head0;

		if (c->llama)
			attn_llama(c, seq, lo, n_keys, kvh, c->q + rh * (size_t)hd,
				   c->out + rh * (size_t)hd);
		else
			attn_one(c, seq, lo, n_keys, kvh, c->q + rh * (size_t)hd,
				 c->out + rh * (size_t)hd,
				 c->lse ? c->lse + rh : NULL);
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
		      int block, const float *q,
		      const struct pg_attn_heads *heads,
		      const struct pg_attn_seq *seqs, int n_seqs,
		      float scale, float *out, float *lse)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct attn_ctx c = {
		.k = cpu->k, .kv = kv, .block = block, .q = q,
		.llama = cpu->llama && kv->type == PG_F16 && kv->cp_size <= 1 &&
			 kv->lanes <= 1 && !(heads->softcap > 0.0f),
		.n_heads = heads->n_heads, .heads = *heads, .seqs = seqs,
		.n_seqs = n_seqs, .scale = scale, .out = out, .lse = lse,
	};

	pg_pool_run(cpu->pool, attn_worker, &c);
}

/*
 * Merge partial attentions: per (row, head), weights exp(lse_p - max) in
 * part order (merge_parts), so every rank that merges the same parts gets
 * the same bits.  Cheap (rows × heads × head_dim × parts): run on the
 * caller's thread.
 */
void pg_cpu_attn_merge(struct pg_backend *be, const float *parts,
		       size_t part_floats, int n_parts, int rows, int n_heads,
		       int head_dim, float *out)
{
	size_t n_rh = (size_t)rows * (size_t)n_heads, hd = (size_t)head_dim;
	const float *outs[PG_ATTN_MAX_MERGE];
	float lses[PG_ATTN_MAX_MERGE];

	(void)be;
	for (size_t rh = 0; rh < n_rh; rh++) {
		for (int p = 0; p < n_parts; p++) {
			const float *part = parts + (size_t)p * part_floats;

			outs[p] = part + rh * hd;
			lses[p] = part[n_rh * hd + rh];
		}
		merge_parts(outs, lses, n_parts, head_dim, out + rh * hd);
	}
}
