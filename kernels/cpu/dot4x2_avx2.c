/*
 * dot4x2_avx2.c - AVX2 tiles of 4 weight rows x 2 tokens for quantised
 * matmuls of several tokens (prompts): each weight block is unpacked once
 * for both tokens and each activation block loaded once for four rows.
 * Q8_0 weights, and Q4_1 in llama.cpp's numerics (the order of
 * dot_avx2.c); Q4_0 and Q4_1 in pagoda's numerics are q4_avx2.c's.
 *
 * The block scales of the 4 rows are converted together: their first 4
 * bytes (d and m for Q4_1; d and two quants otherwise) go into one vector
 * of 8 halves, converted in one instruction; lanes 2r hold d_r, lanes
 * 2r + 1 hold m_r (meaningful for Q4_1 only).  The same numbers as
 * dot_avx2.c's 4-row dots, bit for bit.
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

enum tile_kind { TILE_Q8_0, TILE_Q4_1 };

/* Byte sizes and offsets of the weight and activation blocks. */
static inline size_t wblock_bytes(enum tile_kind k)
{
	return k == TILE_Q8_0 ? sizeof(struct pg_block_q8_0) :
	       sizeof(struct pg_block_q4_1);
}

static inline size_t wqs_offset(enum tile_kind k)
{
	return k == TILE_Q4_1 ? 4 : 2;
}

static inline size_t xblock_bytes(enum tile_kind k)
{
	return k == TILE_Q4_1 ? sizeof(struct pg_block_q8_1) :
	       sizeof(struct pg_block_q8_0);
}

static inline size_t xqs_offset(enum tile_kind k)
{
	return k == TILE_Q4_1 ? 4 : 2;
}

/* A token's (d, s) as (d, s, d, s, ...); s is junk except for Q8_1. */
static inline __m256 tok_scales(const uint8_t *xb)
{
	int32_t v;

	__builtin_memcpy(&v, xb, 4);
	return _mm256_cvtph_ps(_mm_set1_epi32(v));
}

/* The 32 weights of a block, as the u8 / s8 operand of maddubs. */
static inline __m256i wquants(enum tile_kind k, const uint8_t *wb)
{
	const uint8_t *qs = wb + wqs_offset(k);

	if (k == TILE_Q8_0)
		return _mm256_loadu_si256((const void *)qs);
	return unpack_nibbles(qs);
}

/* Integer dot of a weight block with an activation block: 8 int32 sums. */
static inline __m256i block_dot(enum tile_kind k, __m256i wq, __m256i xq)
{
	return k == TILE_Q4_1 ? dot_u8s8(wq, xq) : dot_s8s8(wq, xq);
}

/*
 * out[t * out_stride + r] = row r of w . token t of x, r < 4, t < 2.
 * w: 4 rows, w_stride bytes apart; x: 2 rows, x_stride bytes apart.
 */
static inline __attribute__((always_inline)) void
tile_4x2(enum tile_kind k, int64_t n, const void *w,
			    size_t ws, const void *x, size_t xs, float *out,
			    size_t os, const struct pg_cuts *cuts)
{
	const uint8_t *wp = w, *xp = x;
	int np = cuts ? cuts->n : 1;
	int64_t i = 0;
	__m128 run[2] = { _mm_setzero_ps(), _mm_setzero_ps() };

	for (int p = 0; p < np; p++) {
		int64_t end = cuts ? cuts->end[p] : n / PG_QK;
		__m256 acc[2][4], ms[2];

#pragma GCC unroll 2
		for (int t = 0; t < 2; t++) {
			ms[t] = _mm256_setzero_ps();
#pragma GCC unroll 4
			for (int r = 0; r < 4; r++)
				acc[t][r] = _mm256_setzero_ps();
		}
		for (; i < end; i++) {
			const uint8_t *wb = wp + (size_t)i * wblock_bytes(k);
			const uint8_t *xb = xp + (size_t)i * xblock_bytes(k);
			__m256 wsc = row_scales4(wb, ws);
			__m256i xq[2];
			/* products of scales, read back as broadcasts: load
			 * ports are idle here, shuffle ports are not */
			float f[2][8] __attribute__((aligned(32)));

			for (int t = 0; t < 2; t++) {
				const uint8_t *xt = xb + (size_t)t * xs;
				__m256 ft = _mm256_mul_ps(wsc, tok_scales(xt));

				xq[t] = _mm256_loadu_si256((const void *)(xt + xqs_offset(k)));
				_mm256_store_ps(f[t], ft);
				if (k == TILE_Q4_1)
					ms[t] = _mm256_add_ps(ms[t], ft);
			}
#pragma GCC unroll 4
			for (int r = 0; r < 4; r++) {
				__m256i wq = wquants(k, wb + (size_t)r * ws);

#pragma GCC unroll 2
				for (int t = 0; t < 2; t++) {
					__m256i q = block_dot(k, wq, xq[t]);

					acc[t][r] = _mm256_fmadd_ps(
						_mm256_broadcast_ss(&f[t][2 * r]),
						_mm256_cvtepi32_ps(q), acc[t][r]);
				}
			}
		}
		/* dot4's epilogue, a token at a time */
		for (int t = 0; t < 2; t++) {
			__m128 v = hsum256x4(acc[t][0], acc[t][1], acc[t][2],
					     acc[t][3]);

			if (k == TILE_Q4_1)	/* lanes 2r + 1: the minimum terms */
				v = _mm_add_ps(v, _mm_shuffle_ps(
					_mm256_castps256_ps128(ms[t]),
					_mm256_extractf128_ps(ms[t], 1), 0xdd));
			if (!pg_cuts_summed(cuts))
				_mm_storeu_ps(pg_cuts_out(cuts, p, out) +
					      (size_t)t * os, v);
			else	/* the earlier parts, then this */
				run[t] = p ? _mm_add_ps(run[t], v) : v;
		}
	}
	if (pg_cuts_summed(cuts))
		for (int t = 0; t < 2; t++)
			_mm_storeu_ps(out + (size_t)t * os, run[t]);
}

void pg_dot4x2_q8_0_avx2(int64_t n, const void *w, size_t ws, const void *x,
			 size_t xs, float *out, size_t os,
			 const struct pg_cuts *cuts)
{
	tile_4x2(TILE_Q8_0, n, w, ws, x, xs, out, os, cuts);
}

/* Q4_1 in llama.cpp's order (llama.cpp numerics); pagoda's: q4_avx2.c. */
void pg_dot4x2_q4_1_llama_avx2(int64_t n, const void *w, size_t ws,
			       const void *x, size_t xs, float *out, size_t os,
			       const struct pg_cuts *cuts)
{
	tile_4x2(TILE_Q4_1, n, w, ws, x, xs, out, os, cuts);
}
