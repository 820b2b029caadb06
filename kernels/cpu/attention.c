/*
 * attention.c - the attention op: causal, grouped-query scaled dot-product
 * attention over paged KV storage.
 *
 * Queries go in tiles (flash-attention style): a tile is the query heads
 * that share one KV head, times several positions of one sequence (at most
 * PG_ATTN_TILE_ROWS rows), and it walks the keys a page run at a time (at
 * most PG_ATTN_CHUNK of them), each run loaded once for all the tile's rows.
 * Every row keeps a softmax of its own: for each run its scores go to a
 * small stack buffer, its running maximum is updated once per run (online
 * softmax), and V rows are accumulated in f32.  The ISA table's multi-row
 * loops (attn_scores_rows, attn_values_rows: several rows against a few
 * keys in registers; attn_softmax_rows: the softmax step of all the rows
 * of a run in one call) give each row the bits its one-row steps give, so
 * a row's result is the same whatever tile, batch or thread it is in: the
 * same runs in the same order, the same sums.  Rows of a tile whose run
 * differs from the others' (the last page of a causal row, the first page
 * of a window) take that run alone.  Loops read F32, F16 or BF16 pages
 * directly.  Scores take q rounded to the pages' type, the keys' precision.
 * A sliding-window block's row reads only the pages of its window; a
 * soft-capped block caps each score before the softmax.
 * Work is shared by tiles (prompts) or by runs of heads (decode).
 * With llama.cpp numerics (pg_cpu_backend_llama_numerics), each query runs
 * llama.cpp's loop instead (llamacpp.c), key by key, in tiles the same way
 * (fa16_rows: one load of each key for all rows).
 * It does not write the KV pages (kv_write.c does).
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

#define PG_ATTN_CHUNK 64
#define PG_ATTN_MAX_HEAD_DIM 1024
#define PG_ATTN_MAX_LANES 4
#define PG_ATTN_MAX_MERGE 64	/* CP ranks attn_merge takes (the plan's
				   devices at most) */
#define PG_ATTN_TILE_ROWS 24	/* query rows of a tile at most */
#define PG_ATTN_TILE_FLOATS 16384	/* their accumulators (lanes x
					   head_dim each), on the stack */

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

/*
 * Fold the n raw scores s of one run into st (their V rows still to be
 * added): scale, cap, the run's maximum, rescale, s[j] = the weights.
 * The same code for a row alone or in a tile.
 */
static void attn_softmax_run(const struct attn_ctx *c, int n, float *s,
			     struct pg_attn_state *st)
{
	float mx = st->m;

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

		c->k->scale(c->kv->head_dim, r, st->acc);
		st->l *= r;
		st->m = mx;
	}
	st->l += c->k->exp_sum(n, s, mx);
}

/*
 * attn_softmax_run for nr rows' scores s[r] of one run: the table's loop
 * for all rows at once where it has one (the same bits), else row by row.
 */
static void attn_softmax_rows(const struct attn_ctx *c, int nr, int n,
			      float *const *s, struct pg_attn_state *const *st)
{
	if (c->k->attn_softmax_rows && !(c->heads.softcap > 0.0f)) {
		c->k->attn_softmax_rows(nr, n, c->kv->head_dim, c->scale, s, st);
		return;
	}
	for (int r = 0; r < nr; r++)
		attn_softmax_run(c, n, s[r], st[r]);
}

/* Fold keys slot0 .. slot0 + n - 1 (one page, contiguous) into st. */
static void attn_run(const struct attn_ctx *c, int kvh, int32_t slot0, int n,
		     const float *q, struct pg_attn_state *st)
{
	const struct pg_kv_layout *kv = c->kv;
	float s[PG_ATTN_CHUNK];

	c->k->attn_scores(kv->type, n, kv->head_dim,
			  pg_kv_row(kv, c->block, 0, kvh, slot0), q, s);
	attn_softmax_rows(c, 1, n, (float *const[]){ s },
			  (struct pg_attn_state *const[]){ st });
	c->k->attn_values(kv->type, n, kv->head_dim, s,
			  pg_kv_row(kv, c->block, 1, kvh, slot0), st->acc);
}

/*
 * The same run folded into nr rows at once (queries q[r], states st[r]):
 * its keys and values loaded once for all of them, each row's bits those
 * of attn_run.
 */
static void attn_run_rows(const struct attn_ctx *c, int kvh, int32_t slot0,
			  int n, int nr, const float *const *q,
			  struct pg_attn_state *const *st)
{
	const struct pg_kv_layout *kv = c->kv;
	const void *k = pg_kv_row(kv, c->block, 0, kvh, slot0);
	const void *v = pg_kv_row(kv, c->block, 1, kvh, slot0);
	float s[PG_ATTN_TILE_ROWS][PG_ATTN_CHUNK];
	float *sp[PG_ATTN_TILE_ROWS], *accs[PG_ATTN_TILE_ROWS];

	for (int r = 0; r < nr; r++) {
		sp[r] = s[r];
		accs[r] = st[r]->acc;
	}
	if (c->k->attn_scores_rows)
		c->k->attn_scores_rows(kv->type, nr, n, kv->head_dim, k, q, sp);
	else
		for (int r = 0; r < nr; r++)
			c->k->attn_scores(kv->type, n, kv->head_dim, k, q[r],
					  sp[r]);
	attn_softmax_rows(c, nr, n, sp, st);
	if (c->k->attn_values_rows)
		c->k->attn_values_rows(kv->type, nr, n, kv->head_dim,
				       (const float *const *)sp, v, accs);
	else
		for (int r = 0; r < nr; r++)
			c->k->attn_values(kv->type, n, kv->head_dim, sp[r], v,
					  accs[r]);
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
static void attn_finish(const struct pg_attn_state *st, int hd, float *out,
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

/*
 * The rows of one tile: positions i0 .. i1 - 1 of a sequence times query
 * heads h0 .. h1 - 1 (all reading KV head kvh), position-major.
 */
struct attn_tile {
	const struct pg_attn_seq *seq;
	int i0, i1, h0, h1, kvh;
};

/* Row r of tile t: its query, output and lse offsets, key range. */
static size_t tile_row(const struct attn_ctx *c, const struct attn_tile *t,
		       int r, int *lo, int *n_keys)
{
	int nh = t->h1 - t->h0, i = t->i0 + r / nh, h = t->h0 + r % nh;
	const struct pg_attn_seq *seq = t->seq;
	int nk = seq->n_ctx - seq->n_rows + i + 1, w = c->heads.window;

	*n_keys = nk;
	*lo = w > 0 && nk > w ? nk - w : 0;
	return (size_t)(seq->first_row + i) * (size_t)c->n_heads + (size_t)h;
}

/*
 * llama.cpp numerics: llama.cpp's attention of each query of the tile,
 * its keys in position order, a page at a time; the rows that take a
 * whole page take it together (fa16_rows), the others alone.  Each row
 * sees the same keys in the same order as alone, so the same bits.
 */
static void attn_llama_tile(const struct attn_ctx *c,
			    const struct attn_tile *t)
{
	const struct pg_kv_layout *kv = c->kv;
	const struct pg_attn_seq *seq = t->seq;
	int pt = kv->page_tokens, hd = kv->head_dim;
	int nr = (t->i1 - t->i0) * (t->h1 - t->h0), min_lo = 1 << 30, max_n = 0;
	static __thread uint16_t q16[PG_ATTN_TILE_FLOATS],
		acc[PG_ATTN_TILE_FLOATS];
	const uint16_t *qs[PG_ATTN_TILE_ROWS];
	uint16_t *accs[PG_ATTN_TILE_ROWS];
	float m[PG_ATTN_TILE_ROWS], l[PG_ATTN_TILE_ROWS];
	float *ms[PG_ATTN_TILE_ROWS], *ls[PG_ATTN_TILE_ROWS];
	int lo[PG_ATTN_TILE_ROWS], nk[PG_ATTN_TILE_ROWS], full[PG_ATTN_TILE_ROWS];
	size_t rh[PG_ATTN_TILE_ROWS];

	for (int r = 0; r < nr; r++) {
		const float *q;

		rh[r] = tile_row(c, t, r, &lo[r], &nk[r]);
		q = c->q + rh[r] * (size_t)hd;
		min_lo = lo[r] < min_lo ? lo[r] : min_lo;
		max_n = nk[r] > max_n ? nk[r] : max_n;
		m[r] = -INFINITY;
		l[r] = 0.0f;
		for (int i = 0; i < hd; i++) {
			q16[r * hd + i] = pg_fp32_to_fp16(q[i]);
			acc[r * hd + i] = 0;
		}
	}
	for (int j = min_lo / pt; j * pt < max_n; j++) {
		const uint16_t *k, *v;
		int nf = 0;

		for (int r = 0; r < nr; r++) {
			int p0 = j * pt > lo[r] ? j * pt : lo[r];
			int end = nk[r] < (j + 1) * pt ? nk[r] : (j + 1) * pt;
			int32_t slot = seq->pages[j] * pt + (p0 - j * pt);

			if (p0 >= end)
				continue;
			if (p0 == j * pt && end == (j + 1) * pt) {
				full[nf++] = r;
				continue;
			}
			c->k->fa16_run(end - p0, hd,
				       pg_kv_row(kv, c->block, 0, t->kvh, slot),
				       pg_kv_row(kv, c->block, 1, t->kvh, slot),
				       q16 + r * hd, c->scale, &m[r], &l[r],
				       acc + r * hd);
		}
		if (!nf)
			continue;
		for (int f = 0; f < nf; f++) {
			qs[f] = q16 + full[f] * hd;
			accs[f] = acc + full[f] * hd;
			ms[f] = &m[full[f]];
			ls[f] = &l[full[f]];
		}
		k = pg_kv_row(kv, c->block, 0, t->kvh, seq->pages[j] * pt);
		v = pg_kv_row(kv, c->block, 1, t->kvh, seq->pages[j] * pt);
		if (c->k->fa16_rows)
			c->k->fa16_rows(nf, pt, hd, k, v, qs, c->scale, ms, ls,
					accs);
		else
			for (int f = 0; f < nf; f++)
				c->k->fa16_run(pt, hd, k, v, qs[f], c->scale,
					       ms[f], ls[f], accs[f]);
	}
	for (int r = 0; r < nr; r++) {
		float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
		float *out = c->out + rh[r] * (size_t)hd;

		for (int i = 0; i < hd; i++)
			out[i] = pg_fp16_to_fp32(acc[r * hd + i]) * inv;
	}
}

/*
 * out = softmax(q K^T * scale) V for each row of tile t, over the
 * positions lo .. n_keys - 1 of that row that this store holds (lo > 0:
 * a sliding window): page table entry j covers page_tokens * cp_size
 * positions, of which this store holds the run starting cp_rank *
 * page_tokens (all of them without CP).  lse = log sum exp(scores), or
 * -inf (and out = 0) when no position is held.
 *
 * With lanes (kv->lanes > 1), each lane of that run (page_tokens / lanes
 * slots) has a softmax of its own, read in runs of the same length and
 * order as a CP rank's store of one lane, and the lanes are merged as
 * attn_merge merges CP ranks' parts: the same bits as that many CP ranks.
 * lse is then NULL.
 *
 * Each row's runs are those it would take alone, in the same order: for
 * each (page, lane) segment, the rows that take all of it go through its
 * runs together (attn_run_rows); a row that takes part of it (its last
 * keys, or the first of its window) takes its runs alone (attn_run).
 */
static void attn_tile(const struct attn_ctx *c, const struct attn_tile *t)
{
	const struct pg_kv_layout *kv = c->kv;
	const struct pg_attn_seq *seq = t->seq;
	int pt = kv->page_tokens, hd = kv->head_dim;
	int cps = kv->cp_size > 1 ? kv->cp_size : 1;
	int nl = kv->lanes > 1 ? kv->lanes : 1, lt = pt / nl;
	int span = pt * cps, first = cps > 1 ? kv->cp_rank * pt : 0;
	int nr = (t->i1 - t->i0) * (t->h1 - t->h0), min_lo = 1 << 30, max_n = 0;
	static __thread float acc[PG_ATTN_TILE_FLOATS], qr[PG_ATTN_TILE_FLOATS];
	struct pg_attn_state st[PG_ATTN_TILE_ROWS][PG_ATTN_MAX_LANES];
	struct pg_attn_state *sts[PG_ATTN_TILE_ROWS];
	const float *q[PG_ATTN_TILE_ROWS], *qs[PG_ATTN_TILE_ROWS];
	int lo[PG_ATTN_TILE_ROWS], nk[PG_ATTN_TILE_ROWS], full[PG_ATTN_TILE_ROWS];
	size_t rh[PG_ATTN_TILE_ROWS];

	for (int r = 0; r < nr; r++) {
		rh[r] = tile_row(c, t, r, &lo[r], &nk[r]);
		min_lo = lo[r] < min_lo ? lo[r] : min_lo;
		max_n = nk[r] > max_n ? nk[r] : max_n;
		for (int l = 0; l < nl; l++) {
			float *a = acc + ((size_t)r * nl + l) * hd;

			st[r][l] = (struct pg_attn_state){ .m = -INFINITY,
							.l = 0.0f, .acc = a };
			for (int i = 0; i < hd; i++)
				a[i] = 0.0f;
		}
		/*
		 * The keys are stored as F16 (or BF16): q is rounded to the
		 * same type, so that each score sums exact products of two
		 * 16-bit values, as llama.cpp and the CUDA backend compute
		 * them.
		 */
		q[r] = c->q + rh[r] * (size_t)hd;
		if (kv->type != PG_F32) {
			c->k->round_kv(kv->type, hd, q[r], qr + (size_t)r * hd);
			q[r] = qr + (size_t)r * hd;
		}
	}
	/*
	 * A window's first position starts each run it cuts, in lanes as in
	 * a CP rank's store: the same runs, so the same bits.
	 */
	for (int j = min_lo / span; j * span + first < max_n; j++)
		for (int l = 0; l < nl; l++) {
			int p0 = j * span + first + l * lt, nf = 0;
			int32_t slot0 = seq->pages[j] * pt + l * lt;

			for (int r = 0; r < nr; r++) {
				int end = p0 + lt < nk[r] ? p0 + lt : nk[r];
				int from = p0 > lo[r] ? p0 : lo[r];

				if (from >= end)
					continue;
				if (from == p0 && end == p0 + lt) {
					full[nf++] = r;
					continue;
				}
				for (int p = from; p < end; p += PG_ATTN_CHUNK) {
					int n = end - p < PG_ATTN_CHUNK ?
						end - p : PG_ATTN_CHUNK;

					attn_run(c, t->kvh, slot0 + (p - p0), n,
						 q[r], &st[r][l]);
				}
			}
			if (!nf)
				continue;
			for (int f = 0; f < nf; f++) {
				qs[f] = q[full[f]];
				sts[f] = &st[full[f]][l];
			}
			for (int p = p0; p < p0 + lt; p += PG_ATTN_CHUNK) {
				int n = p0 + lt - p < PG_ATTN_CHUNK ?
					p0 + lt - p : PG_ATTN_CHUNK;

				attn_run_rows(c, t->kvh, slot0 + (p - p0), n, nf,
					      qs, sts);
			}
		}
	for (int r = 0; r < nr; r++) {
		float *out = c->out + rh[r] * (size_t)hd, lse1;
		float lses[PG_ATTN_MAX_LANES];
		const float *outs[PG_ATTN_MAX_LANES];

		if (nl == 1) {
			attn_finish(&st[r][0], hd, out,
				    c->lse ? c->lse + rh[r] : &lse1);
			continue;
		}
		/* each lane as a CP rank would store it, then attn_merge's
		 * merge */
		for (int l = 0; l < nl; l++) {
			attn_finish(&st[r][l], hd, st[r][l].acc, &lses[l]);
			outs[l] = st[r][l].acc;
		}
		merge_parts(outs, lses, nl, hd, out);
	}
}

static void run_tile(const struct attn_ctx *c, const struct attn_tile *t)
{
	if (c->llama)
		attn_llama_tile(c, t);
	else
		attn_tile(c, t);
}

/* The KV head query head h reads. */
static int head_kv(const struct attn_ctx *c, int h)
{
	return (c->heads.head0 + h) / c->heads.group - c->heads.kv_head0;
}

/*
 * The tile shape: at most hmax heads of one KV head, pmax positions (so
 * that hmax * pmax rows fit the tile's rows and its stack buffers).
 */
static void tile_shape(const struct attn_ctx *c, int *hmax, int *pmax)
{
	int nl = c->kv->lanes > 1 ? c->kv->lanes : 1;
	int cap = PG_ATTN_TILE_FLOATS / (nl * c->kv->head_dim);

	cap = cap < PG_ATTN_TILE_ROWS ? cap : PG_ATTN_TILE_ROWS;
	cap = cap > 1 ? cap : 1;
	*hmax = c->heads.group < cap ? c->heads.group : cap;
	*pmax = cap / *hmax;
}

/*
 * Query heads h0 .. h1 - 1 of row i, in tiles of the heads sharing a KV
 * head, so its K and V are read from memory once.
 */
static void attn_heads(const struct attn_ctx *c, const struct pg_attn_seq *seq,
		       int i, int h0, int h1)
{
	int hmax, pmax;

	tile_shape(c, &hmax, &pmax);
	while (h0 < h1) {
		struct attn_tile t = { .seq = seq, .i0 = i, .i1 = i + 1,
				       .h0 = h0, .kvh = head_kv(c, h0) };

		t.h1 = h0 + 1;
		while (t.h1 < h1 && t.h1 - h0 < hmax &&
		       head_kv(c, t.h1) == t.kvh)
			t.h1++;
		run_tile(c, &t);
		h0 = t.h1;
	}
}

/*
 * Many rows (prompts): tiles of pmax positions times the heads of one KV
 * head, dealt round-robin (later positions of a causal sequence have more
 * keys; pmax shrinks until there are several tiles per thread).  Few rows
 * (decode): each row's heads split into contiguous runs, one per thread.
 * Neither changes any row's bits.
 */
static void attn_worker(void *arg, int ith, int nth)
{
	const struct attn_ctx *c = arg;
	int n_rows = 0, k = 0, hmax, pmax, n_groups = 0;

	for (int s = 0; s < c->n_seqs; s++)
		n_rows += c->seqs[s].n_rows;
	if (n_rows < 2 * nth) {
		for (int s = 0; s < c->n_seqs; s++) {
			const struct pg_attn_seq *seq = &c->seqs[s];

			for (int i = 0; i < seq->n_rows; i++) {
				int64_t h0, h1;

				pg_split(c->n_heads, ith, nth, &h0, &h1);
				attn_heads(c, seq, i, (int)h0, (int)h1);
			}
		}
		return;
	}
	tile_shape(c, &hmax, &pmax);
	for (int h = 0; h < c->n_heads; n_groups++) {
		int h1 = h + 1;

		while (h1 < c->n_heads && h1 - h < hmax &&
		       head_kv(c, h1) == head_kv(c, h))
			h1++;
		h = h1;
	}
	for (;;) {
		int n_tiles = 0;

		for (int s = 0; s < c->n_seqs; s++)
			n_tiles += (c->seqs[s].n_rows + pmax - 1) / pmax;
		if (pmax == 1 || n_tiles * n_groups >= 4 * nth)
			break;
		pmax /= 2;
	}
	for (int s = 0; s < c->n_seqs; s++) {
		const struct pg_attn_seq *seq = &c->seqs[s];

		for (int i = 0; i < seq->n_rows; i += pmax)
			for (int h = 0; h < c->n_heads; k++) {
				struct attn_tile t = { .seq = seq, .i0 = i,
						       .h0 = h,
						       .kvh = head_kv(c, h) };

				t.i1 = i + pmax < seq->n_rows ? i + pmax :
				       seq->n_rows;
				t.h1 = h + 1;
				while (t.h1 < c->n_heads && t.h1 - h < hmax &&
				       head_kv(c, t.h1) == t.kvh)
					t.h1++;
				h = t.h1;
				if (k % nth == ith)
					run_tile(c, &t);
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
