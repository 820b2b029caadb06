/*
 * matmul.c - the matmul op: y = W x (+ bias) for a batch of token rows,
 * W in F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 or a K-quant.
 *
 * Quantised weights take activations quantised once per call (Q8_0, Q8_1
 * for Q4_1) by all threads into the backend's scratch.  Rows of W are then
 * dealt in chunks, each thread's own run of them first (mm_worker), and
 * inside a chunk blocks of
 * PG_MM_ROWS rows are swept over all tokens (4 rows x 2 tokens a tile
 * where the table has one) so that they stay in L1 while used.  From
 * PG_MM_GEMM_MIN tokens on, where the table has a gemm8 loop for the type
 * (Q4_0, Q4_1, Q5_0, the K-quants; pg_cpu_mm_loops says which loops a
 * type has; Q8_0's, from 6 tokens, reads its rows as they are, q8_prep,
 * and its 16-row one repacks them, with its own work area),
 * groups of 8 rows are repacked once and swept over all the tokens by it
 * instead (rows left over take the tiles); where the table also has a
 * 16-row loop (gemm16: the AVX-512 VNNI table's, which hold 16 rows in one
 * zmm register), each whole block of 16 rows takes it, and the work areas
 * are sized for it.  The dot loops come from the ISA table; this file
 * holds no intrinsics.
 *
 * Matrices the backend repacked (PG_LAYOUT_Q4X8, pg_cpu_q4x8_pack below)
 * take the packed gemm8 loops for every token count, 8 rows at a time
 * (the K-quants packed on the avx512vnni table: 16): their blocks need no
 * expanding of nibbles per call, and the group's sums come out side by
 * side; from PG_MM_GEMM_MIN tokens the avx512vnni table's packed Q4_0,
 * Q4_1 and Q5_0 take 32 rows at a time (gemm32_q4x8_*, four groups: each
 * token's broadcast shared by twice the rows), and chunks are then whole
 * 32s (step_rows), the 16- and 8-row loops taking what is left.  Same
 * numbers as the rows' loops, bit for bit.
 *
 * matmul_parts runs the same loops over whole rows but closes a part at
 * each cut of the input columns (struct pg_cuts), one output per part:
 * each part's numbers are those of a matmul of just its columns, since
 * the loops start a part with fresh accumulators and its activations
 * quantise block by block the same way.  forward.c uses it to make one
 * device's row-split products the sum of the very parts TP ranks compute.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

#define PG_MM_ROWS 16		/* weight rows kept hot over the tokens */
#define PG_MM_CHUNKS 8		/* chunks per thread, for load balance */
#define PG_MM_QUANT_PAR 64	/* blocks per thread worth a parallel run */
#define PG_MM_GEMM_MIN 4	/* tokens from which gemm8 pays */
#define PG_MM_MAX_PARTS 64	/* matmul_parts' parts the loops take at once */
#define PG_MM_REGIONS 16	/* threads with a run of chunks of their own */

/* A run of consecutive chunks, its counter on a cache line of its own. */
struct mm_region {
	_Atomic int64_t next;
	int64_t end;
	char pad[64 - 2 * sizeof(int64_t)];
};

struct mm_ctx {
	const struct pg_cpu_kernels *k;
	const struct pg_matrix *w;
	const void *xq;		/* (n, xq_row_bytes): activations as dotted */
	size_t xq_row_bytes;
	const float *x;		/* (n, n_cols): for the quantise step */
	void *xq_out;		/* the same buffer as xq, writable */
	pg_quant_fn quant;
	int n;
	const float *bias;	/* (n_rows) or NULL (one part only) */
	float *y;		/* (n, n_rows): part 0's outputs */
	int n_parts;		/* runs of columns, each with its own y */
	const int64_t *cols;	/* (n_parts + 1) their bounds */
	size_t part_floats;	/* floats from one part's y to the next */
	int sum;		/* parts summed in order into one y instead */
	const struct pg_cuts *cuts;	/* the same for the loops, or NULL */
	pg_dot_fn dot;
	pg_dot4_fn dot4;	/* or NULL */
	pg_dot4x2_fn dot4x2;	/* or NULL */
	pg_gemm8_fn gemm8;	/* or NULL; used for n >= PG_MM_GEMM_MIN (the
				 * K-quants' take xq itself, not xp) */
	pg_gemm8_fn packed;	/* PG_LAYOUT_Q4X8: the loop for every n */
	int packed_rows;	/* its group: 8 rows (Q4_0, Q4_1, Q5_0) or 16
				 * (the K-quants: no work, xp their Q8_K rows) */
	pg_gemm8_fn gemm16;	/* or NULL: gemm8's for 16 rows at once */
	pg_gemm8_fn packed16;	/* or NULL: packed's for 2 groups, n >=
				 * PG_MM_GEMM_MIN with work areas */
	pg_gemm8_fn packed32;	/* or NULL: the same for 4 groups */
	int step_rows;		/* rows mm_chunk gives mm_rows at a time */
	int q8;			/* gemm8 is Q8_0's: xp laid out by q8_prep */
	int gemm_min;		/* tokens from which gemm8 runs */
	enum pg_dtype vt;	/* the activations' type */
	uint8_t *xp;		/* gemm8's activations, in the scratch */
	uint8_t *work;		/* gemm8's work areas, one a thread */
	size_t work_bytes;	/* each */
	int64_t chunk_rows;
	int64_t n_chunks;
	int n_regions;
	struct mm_region region[PG_MM_REGIONS];
};

/*
 * Blocks lo .. hi - 1 of the quantised tokens (block j: token j / nb,
 * block j % nb) laid out for gemm8_q8_0 (cpu_impl.h): group g of 8
 * tokens at g x 8 x nb x 36 bytes, its block i at i x nt x 36 on, nt
 * the group's tokens: their d as floats, then their quants.
 */
static void q8_prep(const struct mm_ctx *c, int64_t lo, int64_t hi)
{
	const struct pg_block_q8_0 *b = c->xq_out;
	int64_t nb = c->w->n_cols / PG_QK;
	size_t bb = sizeof(float) + PG_QK;

	for (int64_t j = lo; j < hi; j++) {
		int64_t t = j / nb, i = j % nb, g = t / 8;
		int nt = c->n - 8 * g < 8 ? (int)(c->n - 8 * g) : 8;
		uint8_t *o = c->xp + (size_t)(g * 8 * nb) * bb +
			     (size_t)i * (size_t)nt * bb;
		float d = pg_fp16_to_fp32(b[j].d);

		memcpy(o + sizeof(float) * (size_t)(t % 8), &d, sizeof(d));
		memcpy(o + sizeof(float) * (size_t)nt + PG_QK * (size_t)(t % 8),
		       b[j].qs, PG_QK);
	}
}

/* Quantise this thread's share of the n * n_cols / 32 blocks (and lay
 * them out for gemm8 if it runs). */
static void mm_quant_worker(void *arg, int ith, int nth)
{
	struct mm_ctx *c = arg;
	int64_t bs = pg_dtype_block_size(c->vt);
	int64_t nb = (int64_t)c->n * c->w->n_cols / bs, lo, hi;
	size_t bb = pg_dtype_block_bytes(c->vt);

	pg_split(nb, ith, nth, &lo, &hi);
	if (hi <= lo)
		return;
	c->quant(c->x + lo * bs, (uint8_t *)c->xq_out + lo * bb,
		 (hi - lo) * bs);
	if (c->xp && c->q8)
		q8_prep(c, lo, hi);
	else if (c->xp)
		pg_gemm_prep(c->vt, (uint8_t *)c->xq_out + lo * bb, hi - lo,
			     c->xp + (size_t)lo * PG_GEMM_XP_BYTES(c->vt));
}

/*
 * yt[r0 .. r1 - 1] = rows r0 .. r1 - 1 of W . token xt, 4 rows a call if
 * we can (every part at once); other rows part by part.
 */
static void mm_token(const struct mm_ctx *c, int64_t r0, int64_t r1,
		     const uint8_t *xt, float *yt)
{
	const uint8_t *wd = c->w->data;
	size_t rb = c->w->row_bytes;
	int64_t r = r0;

	if (c->dot4)
		for (; r + 4 <= r1; r += 4)
			c->dot4(c->w->n_cols, wd + (size_t)r * rb, rb, xt,
				yt + r, c->cuts);
	for (int p = 0; p < c->n_parts && r < r1; p++) {
		int64_t c0 = c->cols[p], nc = c->cols[p + 1] - c0;
		const uint8_t *wp = wd + pg_dtype_row_bytes(c->w->type,
							    (uint64_t)c0);
		const uint8_t *xp = xt + pg_dtype_row_bytes(c->vt, (uint64_t)c0);
		float *yp = c->sum ? yt : yt + (size_t)p * c->part_floats;

		for (int64_t q = r; q < r1; q++) {
			float v = c->dot(nc, wp + (size_t)q * rb, xp);

			yp[q] = p && c->sum ? yp[q] + v : v;
		}
	}
}

/* Tokens t and t + 1 against rows r0 .. r1 - 1, in 4 x 2 tiles. */
static void mm_pair(const struct mm_ctx *c, int64_t r0, int64_t r1, int t)
{
	const uint8_t *wd = c->w->data;
	const uint8_t *xt = (const uint8_t *)c->xq + (size_t)t * c->xq_row_bytes;
	size_t rb = c->w->row_bytes, nr = (size_t)c->w->n_rows;
	float *yt = c->y + (size_t)t * nr;
	int64_t r = r0;

	for (; r + 4 <= r1; r += 4)
		c->dot4x2(c->w->n_cols, wd + (size_t)r * rb, rb, xt,
			  c->xq_row_bytes, yt + r, nr, c->cuts);
	mm_token(c, r, r1, xt, yt);
	mm_token(c, r, r1, xt + c->xq_row_bytes, yt + nr);
}

/* Rows r0 .. r1 - 1 of W against every token; work: this thread's. */
static void mm_rows(struct mm_ctx *c, int64_t r0, int64_t r1, void *work)
{
	int64_t nr = c->w->n_rows, r = r0;
	int t = 0;

	if (c->packed) {	/* whole groups: n_rows % packed_rows == 0 */
		/* the K-quants' (16-row groups) take no work */
		if (c->packed32 && c->n >= PG_MM_GEMM_MIN &&
		    (c->work_bytes || c->packed_rows == 16))
			for (; r + 32 <= r1; r += 32)
				c->packed32(c->w->n_cols, (const uint8_t *)c->w->data +
					    (size_t)r * c->w->row_bytes, 0,
					    c->xp ? (const void *)c->xp : c->xq,
					    c->n, c->y + r, (size_t)nr, work,
					    c->cuts);
		if (c->packed16 && c->n >= PG_MM_GEMM_MIN && c->work_bytes)
			for (; r + 16 <= r1; r += 16)
				c->packed16(c->w->n_cols, (const uint8_t *)c->w->data +
					    (size_t)r * c->w->row_bytes, 0, c->xp,
					    c->n, c->y + r, (size_t)nr, work,
					    c->cuts);
		for (; r < r1; r += c->packed_rows)
			c->packed(c->w->n_cols, (const uint8_t *)c->w->data +
				  (size_t)r * c->w->row_bytes, 0,
				  c->xp ? (const void *)c->xp : c->xq, c->n,
				  c->y + r, (size_t)nr,
				  c->n >= PG_MM_GEMM_MIN && c->work_bytes ?
				  work : NULL, c->cuts);
		goto bias;
	}
	if (c->gemm16 && (c->xp || (c->vt == PG_Q8_K &&
				     c->n >= PG_MM_GEMM_MIN)))
		for (; r + 16 <= r1; r += 16)
			c->gemm16(c->w->n_cols, (const uint8_t *)c->w->data +
				  (size_t)r * c->w->row_bytes, c->w->row_bytes,
				  c->xp ? (const void *)c->xp : c->xq, c->n,
				  c->y + r, (size_t)nr,
				  c->work_bytes ? work : NULL, c->cuts);
	if (c->xp || (c->gemm8 && c->vt == PG_Q8_K && c->n >= PG_MM_GEMM_MIN))
		for (; r + 8 <= r1; r += 8)	/* Q8_K: the rows as they are */
			c->gemm8(c->w->n_cols, (const uint8_t *)c->w->data +
				 (size_t)r * c->w->row_bytes, c->w->row_bytes,
				 c->xp ? (const void *)c->xp : c->xq, c->n,
				 c->y + r, (size_t)nr,
				 c->work_bytes ? work : NULL, c->cuts);
	if (c->dot4x2)
		for (; t + 2 <= c->n; t += 2)
			mm_pair(c, r, r1, t);
	for (; t < c->n; t++)
		mm_token(c, r, r1, (const uint8_t *)c->xq +
			 (size_t)t * c->xq_row_bytes, c->y + (size_t)t * nr);
bias:
	if (!c->bias)
		return;
	for (t = 0; t < c->n; t++)
		for (r = r0; r < r1; r++)
			c->y[(size_t)t * nr + r] += c->bias[r];
}

static void mm_chunk(struct mm_ctx *c, int64_t chunk, void *work)
{
	int64_t r0 = chunk * c->chunk_rows;
	int64_t r1 = r0 + c->chunk_rows < c->w->n_rows ?
		     r0 + c->chunk_rows : c->w->n_rows;

	for (int64_t r = r0; r < r1; r += c->step_rows)
		mm_rows(c, r, r + c->step_rows < r1 ? r + c->step_rows : r1,
			work);
}

/*
 * Each thread first takes the chunks of its own region in order, so that
 * it reads one stream of weights, which the prefetchers follow (chunks
 * dealt in turn from one counter left each thread a stream broken at
 * every chunk); then it helps the others, taking from their counters, so
 * that a thread the scheduler delays (a busy machine) holds up no chunk
 * of its own.  Which thread computes a row never changes its numbers.
 */
static void mm_worker(void *arg, int ith, int nth)
{
	struct mm_ctx *c = arg;
	void *work = c->work ? c->work + (size_t)ith * c->work_bytes : NULL;
	int nr = c->n_regions;
	int64_t chunk;

	(void)nth;
	for (int k = 0; k < nr; k++) {
		struct mm_region *g = &c->region[(ith + k) % nr];

		while ((chunk = atomic_fetch_add_explicit(
				&g->next, 1, memory_order_relaxed)) < g->end)
			mm_chunk(c, chunk, work);
	}
}

/* Grow the scratch to want bytes if possible; return what it holds. */
static size_t mm_scratch(struct pg_cpu_backend *cpu, size_t want)
{
	void *p;

	if (want <= cpu->scratch_bytes)
		return cpu->scratch_bytes;
	p = realloc(cpu->scratch, want);
	if (p) {
		cpu->scratch = p;
		cpu->scratch_bytes = want;
	}
	return cpu->scratch_bytes;
}

/* Split the rows into chunks of whole PG_MM_ROWS blocks and run them. */
static void mm_run(struct pg_cpu_backend *cpu, struct mm_ctx *c)
{
	int nth = cpu->n_threads;
	int64_t nr = c->w->n_rows;
	int64_t per = (nr + (int64_t)nth * PG_MM_CHUNKS - 1) /
		      ((int64_t)nth * PG_MM_CHUNKS);

	if (!c->step_rows)
		c->step_rows = PG_MM_ROWS;
	per = (per + c->step_rows - 1) / c->step_rows * c->step_rows;
	c->chunk_rows = per;
	c->n_chunks = (nr + per - 1) / per;
	c->n_regions = nth < PG_MM_REGIONS ? nth : PG_MM_REGIONS;
	for (int j = 0; j < c->n_regions; j++) {
		atomic_store_explicit(&c->region[j].next,
				      c->n_chunks * j / c->n_regions,
				      memory_order_relaxed);
		c->region[j].end = c->n_chunks * (j + 1) / c->n_regions;
	}
	pg_pool_run(cpu->pool, mm_worker, c);
}

void pg_gemm_prep(enum pg_dtype vt, const void *xq, int64_t n_blocks,
		  void *xp)
{
	size_t qo = vt == PG_Q8_1 ? 4 : 2;
	size_t bb = vt == PG_Q8_1 ? sizeof(struct pg_block_q8_1) :
		    sizeof(struct pg_block_q8_0);
	const uint8_t *b = xq;
	uint8_t *p = xp;

	for (int64_t i = 0; i < n_blocks; i++, b += bb,
	     p += PG_GEMM_XP_BYTES(vt)) {
		const int8_t *q = (const int8_t *)(b + qo);
		uint16_t h[2];
		float d;

		for (int j = 0; j < 8; j++) {
			memcpy(p + 4 * j, q + 2 * j, 2);
			memcpy(p + 4 * j + 2, q + 16 + 2 * j, 2);
		}
		memcpy(h, b, sizeof(h));	/* d, and s for Q8_1 */
		d = pg_fp16_to_fp32(h[0]);
		memcpy(p + 32, &d, sizeof(d));
		if (vt == PG_Q8_1) {
			float s = pg_fp16_to_fp32(h[1]);

			memcpy(p + 36, &s, sizeof(s));
		} else {	/* Q4_0's offset: -8 x the sum of the quants */
			int32_t sum = 0;

			for (int j = 0; j < PG_QK; j++)
				sum += q[j];
			sum *= -8;
			memcpy(p + 36, &sum, sizeof(sum));
		}
	}
}

/*
 * Quantise tokens then multiply, as many tokens a pass as scratch holds.
 * With gemm8 the scratch holds, in order: the activations laid out for it
 * (pg_gemm_prep), the quantised rows, then one work area a thread (64-byte
 * aligned, each as big as the 16-row loops need where they run); without,
 * the quantised rows only.
 */
static void mm_quantised(struct pg_cpu_backend *cpu, struct mm_ctx *c,
			 const float *x, int n, float *y)
{
	size_t rb = c->xq_row_bytes, pb = 0, fixed = 0;
	int64_t nc = c->w->n_cols, nr = c->w->n_rows;
	int per;

	if (c->packed || (c->gemm8 && n >= c->gemm_min)) {
		/* Q8_K: the rows as they are (no xp); Q8_0: no work */
		pb = c->vt == PG_Q8_K ? 0 :
		     (size_t)(nc / PG_QK) * PG_GEMM_XP_BYTES(c->vt);
		int wide = c->gemm16 || c->packed16;
		size_t q4_work = c->packed32 ? PG_GEMM32_WORK :
				 wide ? PG_GEMM16_WORK : PG_GEMM8_WORK;

		/* Q8_0: work for its 16-row loop only (gemm8 reads the rows) */
		c->work_bytes = c->packed_rows == 16 ? 0 :
				c->q8 ? (c->gemm16 ? (size_t)(nc / PG_QK) *
						   PG_GEMM16_WORK : 0) :
				c->vt == PG_Q8_K ?
				(size_t)(nc / PG_QK_K) * (wide ? PG_GEMM16_KWORK :
							  PG_GEMM8_KWORK) :
				(size_t)(nc / PG_QK) * q4_work;
		fixed = n >= c->gemm_min ?
			64 + (size_t)cpu->n_threads * c->work_bytes : 0;
		if (mm_scratch(cpu, (rb + pb) * (size_t)n + fixed) <
		    (rb + pb) * (size_t)c->gemm_min + fixed) {
			if (c->packed) {	/* no memory: no work areas */
				fixed = 0;
				c->work_bytes = 0;
			} else {	/* no memory: the tiles */
				c->gemm8 = c->gemm16 = NULL;
				pb = fixed = 0;
			}
		}
	}
	per = (int)((mm_scratch(cpu, rb * (size_t)n) - fixed) / (rb + pb));
	for (int t = 0; t < n; t += per) {
		uint8_t *end;

		c->n = n - t < per ? n - t : per;
		c->x = x + (size_t)t * (size_t)nc;
		c->y = y + (size_t)t * (size_t)nr;
		c->xp = pb && (c->packed || c->n >= c->gemm_min) ?
			cpu->scratch : NULL;
		c->xq = c->xq_out = (uint8_t *)cpu->scratch + pb * (size_t)c->n;
		end = (uint8_t *)c->xq_out + rb * (size_t)c->n;
		c->work = end + (-(uintptr_t)end & 63);
		if ((int64_t)c->n * nc / PG_QK >=
		    (int64_t)PG_MM_QUANT_PAR * cpu->n_threads)
			pg_pool_run(cpu->pool, mm_quant_worker, c);
		else
			mm_quant_worker(c, 0, 1);
		mm_run(cpu, c);
	}
}

void pg_cpu_mm_loops(const struct pg_cpu_kernels *k, enum pg_dtype t,
		     struct pg_mm_loops *l)
{
	l->dot4 = pg_cpu_dot4_for(k, t);
	l->dot4x2 = pg_cpu_dot4x2_for(k, t);
	l->gemm8 = t == PG_Q4_0 ? k->gemm8_q4_0 : t == PG_Q4_1 ? k->gemm8_q4_1 :
		   t == PG_Q5_0 ? k->gemm8_q5_0 : NULL;
	l->gemm16 = t == PG_Q4_0 ? k->gemm16_q4_0 :
		    t == PG_Q4_1 ? k->gemm16_q4_1 :
		    t == PG_Q5_0 ? k->gemm16_q5_0 : NULL;
	switch (t) {
	case PG_Q5_0: l->dot4 = k->dot4_q5_0, l->dot4x2 = k->dot4x2_q5_0; break;
	case PG_Q5_1: l->dot4 = k->dot4_q5_1, l->dot4x2 = k->dot4x2_q5_1; break;
	case PG_Q2_K: l->dot4 = k->dot4_q2_k, l->dot4x2 = k->dot4x2_q2_k;
		l->gemm8 = k->gemm8_q2_k, l->gemm16 = k->gemm16_q2_k; break;
	case PG_Q3_K: l->dot4 = k->dot4_q3_k, l->dot4x2 = k->dot4x2_q3_k;
		l->gemm8 = k->gemm8_q3_k, l->gemm16 = k->gemm16_q3_k; break;
	case PG_Q4_K: l->dot4 = k->dot4_q4_k, l->dot4x2 = k->dot4x2_q4_k;
		l->gemm8 = k->gemm8_q4_k, l->gemm16 = k->gemm16_q4_k; break;
	case PG_Q5_K: l->dot4 = k->dot4_q5_k, l->dot4x2 = k->dot4x2_q5_k;
		l->gemm8 = k->gemm8_q5_k, l->gemm16 = k->gemm16_q5_k; break;
	case PG_Q6_K: l->dot4 = k->dot4_q6_k, l->dot4x2 = k->dot4x2_q6_k;
		l->gemm8 = k->gemm8_q6_k, l->gemm16 = k->gemm16_q6_k; break;
	default: break;
	}
	if (!l->dot4)
		l->gemm8 = NULL;
	if (!l->gemm8)
		l->gemm16 = NULL;
}

/* The table's loop for matrices of type t packed by pg_cpu_q4x8_pack,
 * or NULL (a type it does not pack, or a table without it). */
static pg_gemm8_fn q4x8_loop(const struct pg_cpu_kernels *k, enum pg_dtype t)
{
	switch (t) {
	case PG_Q4_0: return k->gemm8_q4x8_q4_0;
	case PG_Q4_1: return k->gemm8_q4x8_q4_1;
	case PG_Q5_0: return k->gemm8_q4x8_q5_0;
	case PG_Q4_K: return k->gemm16_kx16_q4_k;
	case PG_Q5_K: return k->gemm16_kx16_q5_k;
	case PG_Q6_K: return k->gemm16_kx16_q6_k;
	default: return NULL;
	}
}

/* The same for two such groups at once (16 rows), or NULL. */
static pg_gemm8_fn q4x16_loop(const struct pg_cpu_kernels *k,
			      enum pg_dtype t)
{
	switch (t) {
	case PG_Q4_0: return k->gemm16_q4x8_q4_0;
	case PG_Q4_1: return k->gemm16_q4x8_q4_1;
	case PG_Q5_0: return k->gemm16_q4x8_q5_0;
	default: return NULL;
	}
}

/* The same for 32 rows at once (four such Q4 groups, two K-quant ones),
 * or NULL. */
static pg_gemm8_fn q4x32_loop(const struct pg_cpu_kernels *k,
			      enum pg_dtype t)
{
	switch (t) {
	case PG_Q4_0: return k->gemm32_q4x8_q4_0;
	case PG_Q4_1: return k->gemm32_q4x8_q4_1;
	case PG_Q5_0: return k->gemm32_q4x8_q5_0;
	case PG_Q4_K: return k->gemm32_kx16_q4_k;
	case PG_Q5_K: return k->gemm32_kx16_q5_k;
	case PG_Q6_K: return k->gemm32_kx16_q6_k;
	default: return NULL;
	}
}

/* The rows of a packed group of type t: 16 for the K-quants, else 8. */
static int packed_group_rows(enum pg_dtype t)
{
	return PG_KX16_BYTES(t) ? 16 : 8;
}

/* y = W x (+ bias) in n_parts runs of columns (see mm_ctx). */
static void mm(struct pg_backend *be, const struct pg_matrix *w,
	       const float *x, int n, const float *bias, int n_parts,
	       const int64_t *cols, int sum, float *y)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	enum pg_dtype vt;
	struct pg_mm_loops loops;
	int64_t end[PG_MM_MAX_PARTS];
	struct pg_cuts cuts = {
		.n = n_parts, .end = end,
		.stride = (size_t)n * (size_t)w->n_rows, .sum = sum,
	};
	struct mm_ctx c = {
		.k = cpu->k, .w = w, .bias = bias, .n_parts = n_parts,
		.cols = cols, .part_floats = cuts.stride, .sum = sum,
		.cuts = n_parts > 1 ? &cuts : NULL,
	};

	for (int p = 0; p < n_parts; p++)	/* whole blocks only: backend.h */
		if (cols[p + 1] % pg_dtype_block_size(w->type)) {
			size_t ny = (size_t)n * (size_t)w->n_rows *
				    (size_t)(sum ? 1 : n_parts);

			for (size_t i = 0; i < ny; i++)
				y[i] = NAN;
			return;
		}
	for (int p = 0; p < n_parts && p < PG_MM_MAX_PARTS; p++)
		end[p] = cols[p + 1] / PG_QK;
	c.dot = pg_cpu_dot_for(cpu->k, w->type, &vt);
	pg_cpu_mm_loops(cpu->k, w->type, &loops);
	c.dot4 = loops.dot4;
	c.dot4x2 = loops.dot4x2;
	if (cpu->llama && w->type == PG_Q4_1) {	/* llama.cpp's order */
		c.dot = cpu->k->dot_q4_1_llama;
		c.dot4 = cpu->k->dot4_q4_1_llama;
		c.dot4x2 = cpu->k->dot4x2_q4_1_llama;
		loops.gemm8 = cpu->k->gemm8_q4_1_llama;
		loops.gemm16 = NULL;
	}
	if (n_parts > PG_MM_MAX_PARTS || vt == PG_F32)
		c.cuts = NULL;	/* no multi-row loops: dot part by part */
	if (!c.cuts && n_parts > 1)
		c.dot4 = NULL, c.dot4x2 = NULL;
	c.vt = vt;
	if (vt == PG_F32) {
		c.xq = x;
		c.xq_row_bytes = (size_t)w->n_cols * sizeof(float);
		c.n = n;
		c.y = y;
		mm_run(cpu, &c);
		return;
	}
	c.quant = vt == PG_Q8_1 ? cpu->k->quant_q8_1 :
		  vt == PG_Q8_K ? cpu->k->quant_q8_k : cpu->k->quant_q8_0;
	c.gemm8 = c.dot4 ? loops.gemm8 : NULL;
	c.gemm16 = c.gemm8 ? loops.gemm16 : NULL;
	c.gemm_min = PG_MM_GEMM_MIN;
	if (w->type == PG_Q8_0 && c.dot4 && cpu->k->gemm8_q8_0) {
		/* one weight block for 8 tokens: pays from 6 on (tiles below) */
		c.gemm8 = cpu->k->gemm8_q8_0;
		c.gemm16 = cpu->k->gemm16_q8_0;	/* or NULL */
		c.q8 = 1;
		c.gemm_min = 6;
	}
	if (w->layout == PG_LAYOUT_Q4X8) {	/* pg_cpu_q4x8_pack made it */
		c.packed = q4x8_loop(cpu->k, w->type);
		c.packed_rows = packed_group_rows(w->type);
		c.packed16 = cpu->llama ? NULL : q4x16_loop(cpu->k, w->type);
		c.packed32 = cpu->llama ? NULL : q4x32_loop(cpu->k, w->type);
		if (c.packed32 && n >= PG_MM_GEMM_MIN)	/* chunks of 32s */
			c.step_rows = 32;
		if (!c.packed) {	/* packed for another backend: cpu.h */
			size_t ny = (size_t)n * (size_t)w->n_rows *
				    (size_t)(sum ? 1 : n_parts);

			for (size_t i = 0; i < ny; i++)
				y[i] = NAN;
			return;
		}
	}
	c.xq_row_bytes = pg_dtype_row_bytes(vt, (uint64_t)w->n_cols);
	mm_quantised(cpu, &c, x, n, y);
}

/* w: (n_rows, n_cols); x: (n, n_cols); bias: (n_rows) or NULL; y: (n, n_rows) */
void pg_cpu_matmul(struct pg_backend *be, const struct pg_matrix *w,
		   const float *x, int n, const float *bias, float *y)
{
	int64_t cols[2] = { 0, w->n_cols };

	mm(be, w, x, n, bias, 1, cols, 0, y);
}

/* out: (n_parts, n, n_rows), or (n, n_rows) with sum; see backend.h */
void pg_cpu_matmul_parts(struct pg_backend *be, const struct pg_matrix *w,
			 const float *x, int n, int n_parts,
			 const int64_t *cols, int sum, float *out)
{
	mm(be, w, x, n, NULL, n_parts, cols, sum, out);
}

/* ---- repacked Q4 matrices (cpu.h) ---- */

/* A row's bytes packed: those of its rows, or for the K-quants (groups
 * of 16 rows) PG_KX16_BYTES / 16 a super-block. */
static size_t packed_row_bytes(const struct pg_matrix *m)
{
	size_t kb = PG_KX16_BYTES(m->type);

	return kb ? kb / 16 * (size_t)(m->n_cols / PG_QK_K) :
	       pg_dtype_row_bytes(m->type, (uint64_t)m->n_cols);
}

size_t pg_cpu_q4x8_bytes(struct pg_backend *be, const struct pg_matrix *m)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	pg_gemm8_fn f = q4x8_loop(cpu->k, m->type);

	if (!f || cpu->llama || m->layout != PG_LAYOUT_ROWS ||
	    m->n_rows % packed_group_rows(m->type) || m->n_rows <= 0)
		return 0;
	return packed_row_bytes(m) * (size_t)m->n_rows;
}

/*
 * Block i of 8 rows (rows[r]: row r's block i) packed at o: for each
 * chunk pair c < 4, 32 bytes, byte 4r + j holding in its low nibble
 * weight j of wa[c] of row r and in its high nibble weight j of wb[c]
 * (gemm_avx2.c: wa[c] = w[4c], w[4c + 1], w[16 + 4c], w[16 + 4c + 1];
 * wb[c] the next two of each half), w the block's 32 weights in order
 * (Q5_0: their low 4 bits); then, Q5_0 only, 32 bytes of fifth bits, byte
 * 4r + j holding in bit c that of weight j of wa[c] and in bit 4 + c that
 * of weight j of wb[c]; then the rows' d, then (Q4_1) their m, as F16.
 */
static void q4x8_block(enum pg_dtype t, const uint8_t *const rows[8],
		       uint8_t *o)
{
	size_t qo = t == PG_Q4_0 ? 2 : t == PG_Q5_0 ? 6 : 4;
	size_t dofs = t == PG_Q5_0 ? 160 : 128;

	if (t == PG_Q5_0)
		memset(o + 128, 0, 32);
	for (int r = 0; r < 8; r++) {
		const uint8_t *qs = rows[r] + qo;
		uint8_t w[PG_QK], h[PG_QK] = { 0 };
		uint32_t qh = 0;

		if (t == PG_Q5_0)	/* bit j: weight j's fifth bit */
			memcpy(&qh, rows[r] + 2, sizeof(qh));
		for (int j = 0; j < PG_QK / 2; j++) {
			w[j] = qs[j] & 0x0f;
			w[j + 16] = qs[j] >> 4;
		}
		for (int j = 0; j < PG_QK; j++)
			h[j] = (uint8_t)(qh >> j & 1);
		for (int c = 0; c < 4; c++) {
			const int a[4] = { 4 * c, 4 * c + 1, 16 + 4 * c, 17 + 4 * c };

			for (int j = 0; j < 4; j++) {
				o[32 * c + 4 * r + j] = (uint8_t)(w[a[j]] |
								  w[a[j] + 2] << 4);
				if (t == PG_Q5_0)
					o[128 + 4 * r + j] |= (uint8_t)(
						h[a[j]] << c | h[a[j] + 2] << (4 + c));
			}
		}
		memcpy(o + dofs + 2 * r, rows[r], 2);		/* d */
		if (t == PG_Q4_1)
			memcpy(o + 144 + 2 * r, rows[r] + 2, 2);	/* m */
	}
}

void pg_cpu_q4x8_pack(struct pg_backend *be, struct pg_matrix *m, void *dst)
{
	size_t rb = packed_row_bytes(m);
	size_t bb = pg_dtype_row_bytes(m->type, PG_QK);
	int64_t nb = m->n_cols / PG_QK;
	uint8_t *o = dst;

	if (packed_group_rows(m->type) == 16) {	/* the table's packer */
		for (int64_t g = 0; g < m->n_rows / 16; g++)
			pg_cpu(be)->k->kx16_pack(m->type, (const uint8_t *)m->data +
						 (size_t)(16 * g) * m->row_bytes,
						 m->row_bytes, m->n_cols,
						 o + (size_t)(16 * g) * rb);
		m->data = dst;
		m->row_bytes = rb;
		m->layout = PG_LAYOUT_Q4X8;
		return;
	}
	for (int64_t g = 0; g < m->n_rows / 8; g++)
		for (int64_t i = 0; i < nb; i++, o += 8 * bb) {
			const uint8_t *rows[8];

			for (int r = 0; r < 8; r++)
				rows[r] = (const uint8_t *)m->data +
					  (size_t)(8 * g + r) * m->row_bytes +
					  (size_t)i * bb;
			q4x8_block(m->type, rows, o);
		}
	m->data = dst;
	m->row_bytes = rb;
	m->layout = PG_LAYOUT_Q4X8;
}
