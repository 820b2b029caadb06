/*
 * gemm_avx2.c - AVX2 quantised matmul of 8 weight rows x many tokens, for
 * prompts and batches: the rows' blocks are repacked once into a small
 * work area (L1-resident for the usual widths) and every token then runs
 * over them.  Bit for bit the results of the 4-row dots (dot_avx2.c), so
 * of the 4x2 tiles and of the one-token path: a token's logits do not
 * depend on what it was batched with.
 *
 * What the 4-row dot computes, per row: for each block, 8 int32 sums of 4
 * products (lane j: weights 4j .. 4j + 3 of the block, a "chunk"), each
 * converted and fma'd with d_w d_x into lane j of an accumulator, the
 * lanes summed at the end as hsum256 does; for Q4_1 plus the sum over
 * blocks of m_w s_x (a multiply, then an add).  Here the same numbers come
 * from other instructions.  The repacked block of 8 rows holds, for each
 * chunk pair (k, k + 4), k < 4, two vectors of 16-bit lanes:
 *   wa[k]: lane i = row i's weights (4k, 4k + 1), lane 8 + i = row i's
 *          weights (16 + 4k, 16 + 4k + 1)   (i < 8);
 *   wb[k]: the same for weights 4k + 2, 4k + 3 and 16 + 4k + 2, + 3;
 * nibbles expanded to bytes (an 8 x 8 transpose of 16-bit words in each
 * 128-bit half).  Against the token's block shuffled to match (vpshufb:
 * its own pairs repeated 8 times in each half), maddubs(wa[k]) +
 * maddubs(wb[k]) gives in int16 the chunk sums of all 8 rows for chunks k
 * (low half) and k + 4 (high half): |sum| <= 4 x 15 x 128 = 7680, no
 * saturation.  Sign-extended (vpmovsxwd, no madd) they are 8-lane int32
 * vectors, lane r = row r, one per chunk, and the 8 chunk accumulators
 * have rows in their lanes, so the final hsum is 7 vertical adds.
 *
 * Why: on Zen 1 maddubs and madd issue on one FP pipe only, and the 4-row
 * dots spend 2 maddubs uops and 2 madd uops per 32 products there; this
 * loop spends the 2 maddubs uops only, and nibbles are unpacked once per
 * 8 rows for all tokens instead of once per row and token pair.
 *
 * Q4_0: the 4-row dot multiplies q - 8 by x; here q (unsigned) x x, and
 * -8 x (the chunk's sum of x) comes on in int32 from the side array
 * matmul.c fills (pg_gemm_xinfo): the same integers.  Q8_0 weights
 * (signed bytes: one pair of products can fill an int16) are left to the
 * tiles.
 *
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include "cpu_impl.h"
#include "simd_avx2.h"

enum gemm_kind { G_Q4_0, G_Q4_1 };

/* One repacked block of 8 rows; PG_GEMM8_WORK bytes. */
struct gemm_block {
	__m256i wa[4];		/* see the top of the file */
	__m256i wb[4];
	__m256 d;		/* the rows' scales */
	__m256 m;		/* the rows' mins (Q4_1) */
};

_Static_assert(sizeof(struct gemm_block) == PG_GEMM8_WORK,
	       "PG_GEMM8_WORK is the size of a repacked block");

/* 8 F16 values, one at p + r * stride for r < 8, as floats. */
static inline __m256 gather_f16(const uint8_t *p, size_t stride)
{
	uint16_t h[8] __attribute__((aligned(16)));

#pragma GCC unroll 8
	for (int r = 0; r < 8; r++)
		__builtin_memcpy(&h[r], p + (size_t)r * stride, 2);
	return _mm256_cvtph_ps(_mm_load_si128((const void *)h));
}

/*
 * Block i of the 8 rows at w (stride ws) into *b: nibbles to bytes, then
 * in each 128-bit half the 8 x 8 transpose of 16-bit words (word j of
 * row r -> word r of vector j); vectors 2k and 2k + 1 are wa[k], wb[k].
 */
static inline void repack(enum gemm_kind k, const uint8_t *w, size_t ws,
			  int64_t i, struct gemm_block *b)
{
	size_t bb = k == G_Q4_1 ? sizeof(struct pg_block_q4_1) :
		    sizeof(struct pg_block_q4_0);
	size_t qo = k == G_Q4_1 ? 4 : 2;
	const uint8_t *wb = w + (size_t)i * bb;
	__m256i e[8], a[8], c[8];

#pragma GCC unroll 8
	for (int r = 0; r < 8; r++)
		e[r] = unpack_nibbles(wb + (size_t)r * ws + qo);
	/* a[2j]: words 0-3 of rows 2j, 2j + 1 interleaved; a[2j + 1]: 4-7 */
#pragma GCC unroll 4
	for (int r = 0; r < 8; r += 2) {
		a[r] = _mm256_unpacklo_epi16(e[r], e[r + 1]);
		a[r + 1] = _mm256_unpackhi_epi16(e[r], e[r + 1]);
	}
	/* c[4h + 2v + u]: words 2(2v + u), 2(2v + u) + 1 of rows 4h .. 4h + 3 */
#pragma GCC unroll 2
	for (int h = 0; h < 8; h += 4) {
		c[h] = _mm256_unpacklo_epi32(a[h], a[h + 2]);		/* w0, w1 */
		c[h + 1] = _mm256_unpackhi_epi32(a[h], a[h + 2]);	/* w2, w3 */
		c[h + 2] = _mm256_unpacklo_epi32(a[h + 1], a[h + 3]);	/* w4, w5 */
		c[h + 3] = _mm256_unpackhi_epi32(a[h + 1], a[h + 3]);	/* w6, w7 */
	}
	/* word j of rows 0-3 | rows 4-7: word 2k -> wa[k], 2k + 1 -> wb[k] */
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		b->wa[j] = _mm256_unpacklo_epi64(c[j], c[4 + j]);
		b->wb[j] = _mm256_unpackhi_epi64(c[j], c[4 + j]);
	}
	b->d = gather_f16(wb, ws);
	b->m = k == G_Q4_1 ? gather_f16(wb + 2, ws) : _mm256_setzero_ps();
}

/* vpshufb masks: bytes (4k, 4k + 1) resp. (4k + 2, 4k + 3) of each half,
 * 8 times over. */
static inline __m256i pair_mask(int k, int second)
{
	int lo = 4 * k + 2 * second;

	return _mm256_set1_epi16((short)(lo | (lo + 1) << 8));
}

/*
 * out[t * os + r] = row r . token t for r < 8, t < n_tok; see the
 * pg_gemm8_fn comment in cpu_impl.h for xinfo and work.
 */
static inline __attribute__((always_inline)) void
gemm8(enum gemm_kind k, int64_t n, const void *w, size_t ws, const void *x,
      size_t xs, const float *xinfo, int n_tok, float *out, size_t os,
      void *work)
{
	struct gemm_block *buf = work;
	int64_t nb = n / PG_QK;
	size_t xb = k == G_Q4_1 ? sizeof(struct pg_block_q8_1) :
		    sizeof(struct pg_block_q8_0);
	size_t xo = k == G_Q4_1 ? 4 : 2;
	int xn = k == G_Q4_1 ? 2 : 10;	/* floats of xinfo per block */

	for (int64_t i = 0; i < nb; i++)
		repack(k, w, ws, i, &buf[i]);
	for (int t = 0; t < n_tok; t++) {
		const uint8_t *xt = (const uint8_t *)x + (size_t)t * xs + xo;
		const float *xi = xinfo + (size_t)xn * (size_t)t * (size_t)nb;
		__m256 acc[8], ms = _mm256_setzero_ps();

		for (int j = 0; j < 8; j++)
			acc[j] = _mm256_setzero_ps();
		for (int64_t i = 0; i < nb; i++, xt += xb, xi += xn) {
			const struct gemm_block *b = &buf[i];
			__m256i xq = _mm256_loadu_si256((const void *)xt);
			__m256 f = _mm256_mul_ps(b->d, _mm256_broadcast_ss(xi));

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				__m256i s = _mm256_add_epi16(
					_mm256_maddubs_epi16(b->wa[c],
						_mm256_shuffle_epi8(xq, pair_mask(c, 0))),
					_mm256_maddubs_epi16(b->wb[c],
						_mm256_shuffle_epi8(xq, pair_mask(c, 1))));
				__m256i lo = _mm256_cvtepi16_epi32(
					_mm256_castsi256_si128(s));
				__m256i hi = _mm256_cvtepi16_epi32(
					_mm256_extracti128_si256(s, 1));

				if (k == G_Q4_0) {	/* - 8 x the chunk's sum */
					lo = _mm256_add_epi32(lo, _mm256_castps_si256(
						_mm256_broadcast_ss(xi + 2 + c)));
					hi = _mm256_add_epi32(hi, _mm256_castps_si256(
						_mm256_broadcast_ss(xi + 6 + c)));
				}
				acc[c] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(lo),
							 acc[c]);
				acc[c + 4] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(hi),
							     acc[c + 4]);
			}
			if (k == G_Q4_1)
				ms = _mm256_add_ps(ms, _mm256_mul_ps(b->m,
						_mm256_broadcast_ss(xi + 1)));
		}
		/* hsum256's order, lane by lane */
		__m256 s = _mm256_add_ps(
			_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]),
				      _mm256_add_ps(acc[2], acc[6])),
			_mm256_add_ps(_mm256_add_ps(acc[1], acc[5]),
				      _mm256_add_ps(acc[3], acc[7])));

		if (k == G_Q4_1)
			s = _mm256_add_ps(s, ms);
		_mm256_storeu_ps(out + (size_t)t * os, s);
	}
}

void pg_gemm8_q4_0_avx2(int64_t n, const void *w, size_t ws, const void *x,
			size_t xs, const float *xinfo, int n_tok, float *out,
			size_t os, void *work)
{
	gemm8(G_Q4_0, n, w, ws, x, xs, xinfo, n_tok, out, os, work);
}

void pg_gemm8_q4_1_avx2(int64_t n, const void *w, size_t ws, const void *x,
			size_t xs, const float *xinfo, int n_tok, float *out,
			size_t os, void *work)
{
	gemm8(G_Q4_1, n, w, ws, x, xs, xinfo, n_tok, out, os, work);
}
