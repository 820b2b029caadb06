/*
 * gemm_q4.h - the repacked blocks of 8 rows of Q4_0, Q4_1 and Q5_0 weights
 * that the batched loops sweep (gemm_avx2.c's layout, described at its
 * top), and the code that makes them: from rows as they are (repack) and
 * from groups packed by pg_cpu_q4x8_pack (expand).  Shared by the AVX2
 * loops (gemm_avx2.c) and the AVX-512 VNNI ones (gemm_vnni.c), which
 * sweep the same blocks two groups of 8 rows at a time.
 *
 * Included only by files compiled with -mavx2 -mfma -mf16c (or more).
 */
#ifndef PAGODA_KERNELS_CPU_GEMM_Q4_H
#define PAGODA_KERNELS_CPU_GEMM_Q4_H

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

/* G_LLAMA: Q4_1 weights in llama.cpp's numerics; G_Q5_0: Q5_0 weights
 * in pagoda's (below) */
enum gemm_kind { G_Q4_0, G_Q4_1, G_LLAMA, G_Q5_0 };

/* One repacked block of 8 rows; PG_GEMM8_WORK bytes. */
struct gemm_block {
	__m256i wa[4];		/* see the top of gemm_avx2.c */
	__m256i wb[4];
	__m256 d;		/* the rows' scales (x 2^-16 for G_LLAMA) */
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

/* Row r's 32 weights as the 8 32-bit lanes wa[0], wb[0], .. wb[3] of the
 * top of gemm_avx2.c: lo = lanes 0-3 (wa[0] .. wb[1]), hi = lanes 4-7. */
static inline void row_lanes(const uint8_t *qs, __m128i *lo, __m128i *hi)
{
	__m128i b = _mm_loadu_si128((const void *)qs), m = _mm_set1_epi8(0x0f);
	__m128i l = _mm_and_si128(b, m);			/* w[0 .. 15] */
	__m128i h = _mm_and_si128(_mm_srli_epi16(b, 4), m);	/* w[16 .. 31] */

	*lo = _mm_unpacklo_epi16(l, h);
	*hi = _mm_unpackhi_epi16(l, h);
}

/* The same for a Q5 block (qh: its 32 fifth bits, bit j for w[j]). */
static inline void row_lanes5(const uint8_t *qs, const uint8_t *qh,
			      __m128i *lo, __m128i *hi)
{
	__m128i b = _mm_loadu_si128((const void *)qs), m = _mm_set1_epi8(0x0f);
	__m128i l = _mm_and_si128(b, m);			/* w[0 .. 15] */
	__m128i h = _mm_and_si128(_mm_srli_epi16(b, 4), m);	/* w[16 .. 31] */
	uint32_t bits;
	__m256i v, sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);

	/* byte j: 0x10 where bit j of qh is set */
	__builtin_memcpy(&bits, qh, 4);
	v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), _mm256_setr_epi8(
		0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
		2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
	v = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel),
			     _mm256_set1_epi8(0x10));
	l = _mm_or_si128(l, _mm256_castsi256_si128(v));
	h = _mm_or_si128(h, _mm256_extracti128_si256(v, 1));

	*lo = _mm_unpacklo_epi16(l, h);
	*hi = _mm_unpackhi_epi16(l, h);
}

/*
 * Block i of the 8 rows at w (stride ws) into *b: rows r and r + 4 share
 * a vector (r in the low half), then a 4 x 4 transpose of 32-bit lanes in
 * each half puts lane j of every row into vector j.
 */
static inline void repack(enum gemm_kind k, const uint8_t *w, size_t ws,
			  int64_t i, struct gemm_block *b)
{
	size_t bb = k == G_Q4_0 ? sizeof(struct pg_block_q4_0) :
		    k == G_Q5_0 ? sizeof(struct pg_block_q5_0) :
		    sizeof(struct pg_block_q4_1);
	size_t qo = k == G_Q4_0 ? 2 : k == G_Q5_0 ? 6 : 4;
	const uint8_t *wb = w + (size_t)i * bb;
	__m128i lo[8], hi[8];
	__m256i v[2][4], out[8];

#pragma GCC unroll 8
	for (int r = 0; r < 8; r++) {
		if (k == G_Q5_0)
			row_lanes5(wb + (size_t)r * ws + qo,
				   wb + (size_t)r * ws + 2, &lo[r], &hi[r]);
		else
			row_lanes(wb + (size_t)r * ws + qo, &lo[r], &hi[r]);
	}
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++) {
		v[0][r] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo[r]),
						  lo[r + 4], 1);
		v[1][r] = _mm256_inserti128_si256(_mm256_castsi128_si256(hi[r]),
						  hi[r + 4], 1);
	}
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i t0 = _mm256_unpacklo_epi32(v[h][0], v[h][1]);
		__m256i t1 = _mm256_unpackhi_epi32(v[h][0], v[h][1]);
		__m256i t2 = _mm256_unpacklo_epi32(v[h][2], v[h][3]);
		__m256i t3 = _mm256_unpackhi_epi32(v[h][2], v[h][3]);

		out[4 * h] = _mm256_unpacklo_epi64(t0, t2);
		out[4 * h + 1] = _mm256_unpackhi_epi64(t0, t2);
		out[4 * h + 2] = _mm256_unpacklo_epi64(t1, t3);
		out[4 * h + 3] = _mm256_unpackhi_epi64(t1, t3);
	}
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		b->wa[c] = out[2 * c];
		b->wb[c] = out[2 * c + 1];
	}
	b->d = gather_f16(wb, ws);
	if (k == G_LLAMA)
		b->d = _mm256_mul_ps(b->d, _mm256_set1_ps(1.0f / 65536));
	b->m = k == G_Q4_0 || k == G_Q5_0 ? _mm256_setzero_ps() :
	       gather_f16(wb + 2, ws);
}

/*
 * Block i of a group packed by pg_cpu_q4x8_pack (pk: its bytes) as a
 * repacked block: each 32 bytes of nibbles hold wa[c] in their low
 * nibbles and wb[c] in their high ones; Q5_0's 32 bytes of fifth bits
 * then hold wa[c]'s in bit c and wb[c]'s in bit 4 + c of the same byte,
 * each shifted to bit 4 (16-bit shifts: what crosses into a byte from
 * its neighbour lands outside bit 4); then the rows' d and m in F16.
 */
static inline __attribute__((always_inline)) void
expand(enum gemm_kind k, const uint8_t *pk, struct gemm_block *b)
{
	__m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
	__m256i hb = k == G_Q5_0 ?
		     _mm256_loadu_si256((const void *)(pk + 128)) :
		     _mm256_setzero_si256();

#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		__m256i v = _mm256_loadu_si256((const void *)(pk + 32 * c));

		b->wa[c] = _mm256_and_si256(v, m4);
		b->wb[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
		if (k == G_Q5_0) {
			b->wa[c] = _mm256_or_si256(b->wa[c], _mm256_and_si256(
				_mm256_slli_epi16(hb, 4 - c), b4));
			b->wb[c] = _mm256_or_si256(b->wb[c], _mm256_and_si256(
				_mm256_srli_epi16(hb, c), b4));
		}
	}
	b->d = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(
		pk + (k == G_Q5_0 ? 160 : 128))));
	b->m = k == G_Q4_1 ?
	       _mm256_cvtph_ps(_mm_loadu_si128((const void *)(pk + 144))) :
	       _mm256_setzero_ps();
}

/* Bytes of one packed block of 8 rows. */
static inline size_t packed_bytes(enum gemm_kind k)
{
	return k == G_Q4_0 ? 8 * sizeof(struct pg_block_q4_0) :
	       k == G_Q5_0 ? 8 * sizeof(struct pg_block_q5_0) :
	       8 * sizeof(struct pg_block_q4_1);
}

#endif
