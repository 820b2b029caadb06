/*
 * q4_avx2.c - AVX2 dots of Q4_0 / Q4_1 weight rows with 8-bit activations
 * (Q8_0 for Q4_0, Q8_1 for Q4_1) in pagoda's numerics: one row, 4 rows,
 * and tiles of 4 rows x 2 tokens.  The 8-row loop for many tokens is in
 * gemm_avx2.c; llama.cpp's numerics keep their own Q4_1 loops
 * (dot_avx2.c, dot4x2_avx2.c, gemm_avx2.c: the *_llama_avx2 ones).
 *
 * Every loop gives each row bit for bit what the reference gives
 * (pg_dot_q4_0_ref, pg_dot_q4_1_ref in dot.c):
 *
 *   for each block b, in order:
 *     i   = the exact integer sum of the block's 32 products
 *           (Q4_0: (q - 8) x; Q4_1: q x)
 *     acc = fma(d_w d_x, (float)i, acc)     d_w d_x: one rounded product
 *     ms  = fma(m_w, s_x, ms)               Q4_1 only
 *   the row: acc, or acc + ms for Q4_1
 *
 * and a part of struct pg_cuts starts both sums afresh.  One conversion
 * and one fused multiply-add per row and block: the llama.cpp order
 * spends eight of each (one per 4 products), which is most of the work
 * of the batched loops on the CPUs we run on.  The integers: maddubs
 * gives 16 sums of 2 products a row (|.| <= 2 x 15 x 127 = 3810); 4 rows'
 * are then summed side by side in int16 by a tree of unpacks and adds (a
 * 4 x 4 transpose folded into the sums: 8 pairs, <= 30480, no wrap) and
 * widened to int32 for the last add.  Q4_0: maddubs of the unsigned
 * nibbles, less maddubs(8, x) (computed once a block for all rows): the
 * same integers as (q - 8) x, in range.
 *
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

enum q4_kind { Q4_0, Q4_1 };

static inline size_t wbytes(enum q4_kind k)
{
	return k == Q4_0 ? sizeof(struct pg_block_q4_0) :
	       sizeof(struct pg_block_q4_1);
}

static inline size_t xbytes(enum q4_kind k)
{
	return k == Q4_0 ? sizeof(struct pg_block_q8_0) :
	       sizeof(struct pg_block_q8_1);
}

/* Where the quants start in a weight block and in an activation block:
 * after d (Q4_0, Q8_0), after d and m or s (Q4_1, Q8_1). */
static inline size_t qoff(enum q4_kind k)
{
	return k == Q4_0 ? 2 : 4;
}

/* Q4_0's offset: 8 x the sums of pairs of activations (0 for Q4_1). */
static inline __m256i offset8(enum q4_kind k, __m256i xq)
{
	return k == Q4_0 ? _mm256_maddubs_epi16(_mm256_set1_epi8(8), xq) :
	       _mm256_setzero_si256();
}

/* A block's products summed in pairs: 16 int16s. */
static inline __m256i block_pairs(enum q4_kind k, __m256i wq, __m256i xq,
				  __m256i off)
{
	__m256i p = _mm256_maddubs_epi16(wq, xq);

	return k == Q4_0 ? _mm256_sub_epi16(p, off) : p;
}

/*
 * The block sums of 4 rows: lane r = the sum of row r's 32 products.
 * Each level adds two of a row's partial sums, which the unpacks put side
 * by side: u01 holds (row 0, row 1) pairs, v (row 0 .. row 3) quads.
 */
static inline __m128i block_sums4(enum q4_kind k, const __m256i wq[4],
				  __m256i xq, __m256i off)
{
	__m256i p0 = block_pairs(k, wq[0], xq, off);
	__m256i p1 = block_pairs(k, wq[1], xq, off);
	__m256i p2 = block_pairs(k, wq[2], xq, off);
	__m256i p3 = block_pairs(k, wq[3], xq, off);
	__m256i u01 = _mm256_add_epi16(_mm256_unpacklo_epi16(p0, p1),
				       _mm256_unpackhi_epi16(p0, p1));
	__m256i u23 = _mm256_add_epi16(_mm256_unpacklo_epi16(p2, p3),
				       _mm256_unpackhi_epi16(p2, p3));
	__m256i v = _mm256_add_epi16(_mm256_unpacklo_epi32(u01, u23),
				     _mm256_unpackhi_epi32(u01, u23));

	v = _mm256_add_epi16(v, _mm256_shuffle_epi32(v, 0x4e));
	return _mm_add_epi32(_mm_cvtepi16_epi32(_mm256_castsi256_si128(v)),
			     _mm_cvtepi16_epi32(_mm256_extracti128_si256(v, 1)));
}

/* The activation block's d and s (junk for Q8_0) as floats 0 and 1. */
static inline __m128 x_scales(const uint8_t *xb)
{
	return load_f16x2((const uint16_t *)xb);
}

/* One row, no parts (the tables' dot). */
static inline __attribute__((always_inline)) float
q4_dot1(enum q4_kind k, int64_t n, const uint8_t *w, const uint8_t *x)
{
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		const uint8_t *wb = w + (size_t)i * wbytes(k);
		const uint8_t *xb = x + (size_t)i * xbytes(k);
		__m256i xq = _mm256_loadu_si256((const void *)(xb + qoff(k)));
		int s = hsum256_i32(_mm256_madd_epi16(
			block_pairs(k, unpack_nibbles(wb + qoff(k)), xq,
				    offset8(k, xq)), _mm256_set1_epi16(1)));
		__m128 ws = load_f16x2((const uint16_t *)wb);
		__m128 xs = x_scales(xb);
		float f = _mm_cvtss_f32(ws) * _mm_cvtss_f32(xs);

		acc = __builtin_fmaf(f, (float)s, acc);
		if (k == Q4_1)
			ms = __builtin_fmaf(_mm_cvtss_f32(_mm_movehdup_ps(ws)),
					    _mm_cvtss_f32(_mm_movehdup_ps(xs)),
					    ms);
	}
	return k == Q4_1 ? acc + ms : acc;
}

float pg_dot_q4_0_avx2(int64_t n, const void *w, const void *x)
{
	return q4_dot1(Q4_0, n, w, x);
}

float pg_dot_q4_1_avx2(int64_t n, const void *w, const void *x)
{
	return q4_dot1(Q4_1, n, w, x);
}

/*
 * One block of 4 rows (wb, wb + ws, ...) against one activation block:
 * acc += (d_r d_x) x (the row's integer sum), ms += m_r s_x, lane r.
 */
static inline __attribute__((always_inline)) void
q4_step4(enum q4_kind k, const __m256i wq[4], __m128 d4, __m128 m4,
	 const uint8_t *xb, __m128 *acc, __m128 *ms)
{
	__m256i xq = _mm256_loadu_si256((const void *)(xb + qoff(k)));
	__m128i s = block_sums4(k, wq, xq, offset8(k, xq));
	__m128 xs = x_scales(xb);

	*acc = _mm_fmadd_ps(_mm_mul_ps(d4, _mm_shuffle_ps(xs, xs, 0x00)),
			    _mm_cvtepi32_ps(s), *acc);
	if (k == Q4_1)
		*ms = _mm_fmadd_ps(m4, _mm_shuffle_ps(xs, xs, 0x55), *ms);
}

/* The 4 rows' scales (d) and minimums (m) of block wb (rows ws apart). */
static inline void rows4(const uint8_t *wb, size_t ws, __m128 *d4, __m128 *m4)
{
	__m256 sc = row_scales4(wb, ws);	/* d0 m0 d1 m1 .. d3 m3 */
	__m128 lo = _mm256_castps256_ps128(sc), hi = _mm256_extractf128_ps(sc, 1);

	*d4 = _mm_shuffle_ps(lo, hi, 0x88);
	*m4 = _mm_shuffle_ps(lo, hi, 0xdd);
}

/* Part p's value v (summed into *run, or stored) for the 4 rows. */
static inline void put4(const struct pg_cuts *cuts, int p, float *out,
			size_t os, __m128 v, __m128 *run)
{
	if (!pg_cuts_summed(cuts))
		_mm_storeu_ps(pg_cuts_out(cuts, p, out) + os, v);
	else	/* the earlier parts, then this */
		*run = p ? _mm_add_ps(*run, v) : v;
}

static inline __attribute__((always_inline)) void
q4_dot4(enum q4_kind k, int64_t n, const uint8_t *w, size_t ws,
	const uint8_t *x, float *out, const struct pg_cuts *cuts)
{
	__m128 run = _mm_setzero_ps();
	int64_t i = 0;

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		__m128 acc = _mm_setzero_ps(), ms = acc;

		for (int64_t end = cuts ? cuts->end[p] : n / PG_QK; i < end; i++) {
			const uint8_t *wb = w + (size_t)i * wbytes(k);
			__m256i wq[4];
			__m128 d4, m4;

			prefetch_group(w, ws, i, wbytes(k));
			for (int r = 0; r < 4; r++)
				wq[r] = unpack_nibbles(wb + (size_t)r * ws + qoff(k));
			rows4(wb, ws, &d4, &m4);
			q4_step4(k, wq, d4, m4, x + (size_t)i * xbytes(k), &acc, &ms);
		}
		put4(cuts, p, out, 0, k == Q4_1 ? _mm_add_ps(acc, ms) : acc, &run);
	}
	if (pg_cuts_summed(cuts))
		_mm_storeu_ps(out, run);
}

void pg_dot4_q4_0_avx2(int64_t n, const void *w, size_t ws, const void *x,
		       float *out, const struct pg_cuts *cuts)
{
	q4_dot4(Q4_0, n, w, ws, x, out, cuts);
}

/* The hot path of Q4_1 models at one token a step. */
void pg_dot4_q4_1_avx2(int64_t n, const void *w, size_t ws, const void *x,
		       float *out, const struct pg_cuts *cuts)
{
	q4_dot4(Q4_1, n, w, ws, x, out, cuts);
}

/* 4 rows x 2 tokens (xs bytes apart); out[t * os + r]. */
static inline __attribute__((always_inline)) void
q4_tile4x2(enum q4_kind k, int64_t n, const uint8_t *w, size_t ws,
	   const uint8_t *x, size_t xs, float *out, size_t os,
	   const struct pg_cuts *cuts)
{
	__m128 run[2] = { _mm_setzero_ps(), _mm_setzero_ps() };
	int64_t i = 0;

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		__m128 acc[2] = { _mm_setzero_ps(), _mm_setzero_ps() };
		__m128 ms[2] = { _mm_setzero_ps(), _mm_setzero_ps() };

		for (int64_t end = cuts ? cuts->end[p] : n / PG_QK; i < end; i++) {
			const uint8_t *wb = w + (size_t)i * wbytes(k);
			const uint8_t *xb = x + (size_t)i * xbytes(k);
			__m256i wq[4];
			__m128 d4, m4;

			for (int r = 0; r < 4; r++)
				wq[r] = unpack_nibbles(wb + (size_t)r * ws + qoff(k));
			rows4(wb, ws, &d4, &m4);
			q4_step4(k, wq, d4, m4, xb, &acc[0], &ms[0]);
			q4_step4(k, wq, d4, m4, xb + xs, &acc[1], &ms[1]);
		}
		for (int t = 0; t < 2; t++)
			put4(cuts, p, out, (size_t)t * os, k == Q4_1 ?
			     _mm_add_ps(acc[t], ms[t]) : acc[t], &run[t]);
	}
	if (pg_cuts_summed(cuts))
		for (int t = 0; t < 2; t++)
			_mm_storeu_ps(out + (size_t)t * os, run[t]);
}

void pg_dot4x2_q4_0_avx2(int64_t n, const void *w, size_t ws, const void *x,
			 size_t xs, float *out, size_t os,
			 const struct pg_cuts *cuts)
{
	q4_tile4x2(Q4_0, n, w, ws, x, xs, out, os, cuts);
}

void pg_dot4x2_q4_1_avx2(int64_t n, const void *w, size_t ws, const void *x,
			 size_t xs, float *out, size_t os,
			 const struct pg_cuts *cuts)
{
	q4_tile4x2(Q4_1, n, w, ws, x, xs, out, os, cuts);
}
