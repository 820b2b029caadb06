/*
 * matmul.c - the matmul op: y = W x (+ bias) for a batch of token rows,
 * W in F32, F16, BF16, Q4_0, Q4_1 or Q8_0.
 *
 * Quantised weights take activations quantised once per call (Q8_0, Q8_1
 * for Q4_1) by all threads into the backend's scratch.  Rows of W are then
 * dealt in chunks from an atomic counter, and inside a chunk blocks of
 * PG_MM_ROWS rows are swept over all tokens (4 rows x 2 tokens a tile
 * where the table has one) so that they stay in L1 while used.  The dot loops come from the
 * ISA table; this file holds no intrinsics.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_impl.h"

#define PG_MM_ROWS 16		/* weight rows kept hot over the tokens */
#define PG_MM_CHUNKS 8		/* chunks per thread, for load balance */
#define PG_MM_QUANT_PAR 64	/* blocks per thread worth a parallel run */

struct mm_ctx {
	const struct pg_cpu_kernels *k;
	const struct pg_matrix *w;
	const void *xq;		/* (n, xq_row_bytes): activations as dotted */
	size_t xq_row_bytes;
	const float *x;		/* (n, n_cols): for the quantise step */
	void *xq_out;		/* the same buffer as xq, writable */
	pg_quant_fn quant;
	int n;
	const float *bias;	/* (n_rows) or NULL */
	float *y;		/* (n, n_rows) */
	pg_dot_fn dot;
	pg_dot4_fn dot4;	/* or NULL */
	pg_dot4x2_fn dot4x2;	/* or NULL */
	int64_t chunk_rows;
	int64_t n_chunks;
	_Atomic int64_t next_chunk;
};

/* Quantise this thread's share of the n * n_cols / 32 blocks. */
static void mm_quant_worker(void *arg, int ith, int nth)
{
	struct mm_ctx *c = arg;
	int64_t nb = (int64_t)c->n * c->w->n_cols / PG_QK, lo, hi;
	size_t bb = c->xq_row_bytes / (size_t)(c->w->n_cols / PG_QK);

	pg_split(nb, ith, nth, &lo, &hi);
	if (hi > lo)
		c->quant(c->x + lo * PG_QK, (uint8_t *)c->xq_out + lo * bb,
			 (hi - lo) * PG_QK);
}

/* yt[r0 .. r1 - 1] = rows r0 .. r1 - 1 of W . xt, 4 rows a call if we can. */
static void mm_token(const struct mm_ctx *c, int64_t r0, int64_t r1,
		     const void *xt, float *yt)
{
	const uint8_t *wd = c->w->data;
	size_t rb = c->w->row_bytes;
	int64_t nc = c->w->n_cols, r = r0;

	if (c->dot4)
		for (; r + 4 <= r1; r += 4)
			c->dot4(nc, wd + (size_t)r * rb, rb, xt, yt + r);
	for (; r < r1; r++)
		yt[r] = c->dot(nc, wd + (size_t)r * rb, xt);
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
			  c->xq_row_bytes, yt + r, nr);
	mm_token(c, r, r1, xt, yt);
	mm_token(c, r, r1, xt + c->xq_row_bytes, yt + nr);
}

/* Rows r0 .. r1 - 1 of W against every token. */
static void mm_rows(struct mm_ctx *c, int64_t r0, int64_t r1)
{
	int64_t nr = c->w->n_rows;
	int t = 0;

	if (c->dot4x2)
		for (; t + 2 <= c->n; t += 2)
			mm_pair(c, r0, r1, t);
	for (; t < c->n; t++)
		mm_token(c, r0, r1, (const uint8_t *)c->xq +
			 (size_t)t * c->xq_row_bytes, c->y + (size_t)t * nr);
	if (!c->bias)
		return;
	for (t = 0; t < c->n; t++)
		for (int64_t r = r0; r < r1; r++)
			c->y[(size_t)t * nr + r] += c->bias[r];
}

static void mm_chunk(struct mm_ctx *c, int64_t chunk)
{
	int64_t r0 = chunk * c->chunk_rows;
	int64_t r1 = r0 + c->chunk_rows < c->w->n_rows ?
		     r0 + c->chunk_rows : c->w->n_rows;

	for (int64_t r = r0; r < r1; r += PG_MM_ROWS)
		mm_rows(c, r, r + PG_MM_ROWS < r1 ? r + PG_MM_ROWS : r1);
}

/* Chunks are all dealt from the counter: a thread the scheduler delays
 * (a busy machine) then holds up no chunk of its own. */
static void mm_worker(void *arg, int ith, int nth)
{
	struct mm_ctx *c = arg;
	int64_t chunk;

	while ((chunk = atomic_fetch_add_explicit(&c->next_chunk, 1,
						  memory_order_relaxed)) <
	       c->n_chunks)
		mm_chunk(c, chunk);
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

	per = (per + PG_MM_ROWS - 1) / PG_MM_ROWS * PG_MM_ROWS;
	c->chunk_rows = per;
	c->n_chunks = (nr + per - 1) / per;
	atomic_store(&c->next_chunk, 0);
	pg_pool_run(cpu->pool, mm_worker, c);
}

/* Quantise tokens then multiply, as many tokens a pass as scratch holds. */
static void mm_quantised(struct pg_cpu_backend *cpu, struct mm_ctx *c,
			 const float *x, int n, float *y)
{
	size_t rb = c->xq_row_bytes;
	int per = (int)(mm_scratch(cpu, rb * (size_t)n) / rb);
	int64_t nc = c->w->n_cols, nr = c->w->n_rows;

	for (int t = 0; t < n; t += per) {
		c->n = n - t < per ? n - t : per;
		c->x = x + (size_t)t * (size_t)nc;
		c->y = y + (size_t)t * (size_t)nr;
		c->xq = c->xq_out = cpu->scratch;
		if ((int64_t)c->n * nc / PG_QK >=
		    (int64_t)PG_MM_QUANT_PAR * cpu->n_threads)
			pg_pool_run(cpu->pool, mm_quant_worker, c);
		else
			c->quant(c->x, c->xq_out, (int64_t)c->n * nc);
		mm_run(cpu, c);
	}
}

/* w: (n_rows, n_cols); x: (n, n_cols); bias: (n_rows) or NULL; y: (n, n_rows) */
void pg_cpu_matmul(struct pg_backend *be, const struct pg_matrix *w,
		   const float *x, int n, const float *bias, float *y)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	enum pg_dtype vt;
	struct mm_ctx c = { .k = cpu->k, .w = w, .bias = bias };

	c.dot = pg_cpu_dot_for(cpu->k, w->type, &vt);
	c.dot4 = pg_cpu_dot4_for(cpu->k, w->type);
	c.dot4x2 = pg_cpu_dot4x2_for(cpu->k, w->type);
	if (vt == PG_F32) {
		c.xq = x;
		c.xq_row_bytes = (size_t)w->n_cols * sizeof(float);
		c.n = n;
		c.y = y;
		mm_run(cpu, &c);
		return;
	}
	c.quant = vt == PG_Q8_1 ? cpu->k->quant_q8_1 : cpu->k->quant_q8_0;
	c.xq_row_bytes = pg_dtype_row_bytes(vt, (uint64_t)w->n_cols);
	mm_quantised(cpu, &c, x, n, y);
}
