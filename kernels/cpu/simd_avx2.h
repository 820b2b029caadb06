/*
 * simd_avx2.h - small AVX2 helpers shared by the files compiled with
 * -mavx2 -mfma -mf16c (and by the AVX-512 ones, which build on them).
 *
 * Include only from *_avx2.c / *_avx512.c: elsewhere these instructions
 * are not enabled.
 */
#ifndef PAGODA_KERNELS_CPU_SIMD_AVX2_H
#define PAGODA_KERNELS_CPU_SIMD_AVX2_H

#include <immintrin.h>

static inline float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
			      _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/*
 * hsum256 of four vectors at once, bit for bit: lane i = hsum256(a_i).
 * The lanes meet in hsum256's order ((lo + hi), then lanes 0 + 2 and
 * 1 + 3, then those two), only side by side, and stay in registers.
 */
static inline __m128 hsum256x4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
	__m256 s01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20),
				   _mm256_permute2f128_ps(a0, a1, 0x31));
	__m256 s23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20),
				   _mm256_permute2f128_ps(a2, a3, 0x31));
	__m256 t01 = _mm256_add_ps(s01, _mm256_permute_ps(s01, 0xee));
	__m256 t23 = _mm256_add_ps(s23, _mm256_permute_ps(s23, 0xee));
	__m256 u = _mm256_shuffle_ps(t01, t23, 0x44);
	__m256 v = _mm256_add_ps(u, _mm256_movehdup_ps(u));
	/* v: a0's sum in lane 0, a2's in 2, a1's in 4, a3's in 6 */
	__m128 r = _mm_shuffle_ps(_mm256_castps256_ps128(v),
				  _mm256_extractf128_ps(v, 1), 0x88);

	return _mm_permute_ps(r, 0xd8);	/* (a0, a2, a1, a3) -> in order */
}

/* Lane 1 of each of four vectors, in order. */
static inline __m128 lane1x4(__m128 m0, __m128 m1, __m128 m2, __m128 m3)
{
	return _mm_shuffle_ps(_mm_shuffle_ps(m0, m1, 0x55),
			      _mm_shuffle_ps(m2, m3, 0x55), 0x88);
}

static inline int hsum256_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
				  _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* 8 BF16 values at p as floats. */
static inline __m256 load_bf16x8(const uint16_t *p)
{
	__m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline __m256 load_f16x8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const void *)p));
}

/* 8 floats stored at p as F16, rounded to nearest even. */
static inline void store_f16x8(uint16_t *p, __m256 v)
{
	_mm_storeu_si128((void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* 16 bytes of nibbles as 32 bytes: low nibbles first, then high ones. */
static inline __m256i unpack_nibbles(const uint8_t *qs)
{
	__m128i b = _mm_loadu_si128((const void *)qs);
	__m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b),
					       _mm_srli_epi16(b, 4), 1);

	return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* The first 4 bytes of the block of each of 4 rows (stride bytes apart)
 * as 8 halves converted: (d_r, m_r) in lanes 2r, 2r + 1 for Q4_1 (for
 * the other types lane 2r + 1 is junk). */
static inline __m256 row_scales4(const uint8_t *w0, size_t stride)
{
	int32_t v0, v1, v2, v3;
	__m128i h;

	__builtin_memcpy(&v0, w0, 4);
	__builtin_memcpy(&v1, w0 + stride, 4);
	__builtin_memcpy(&v2, w0 + 2 * stride, 4);
	__builtin_memcpy(&v3, w0 + 3 * stride, 4);
	h = _mm_insert_epi32(_mm_cvtsi32_si128(v0), v1, 1);
	h = _mm_insert_epi32(_mm_insert_epi32(h, v2, 2), v3, 3);
	return _mm256_cvtph_ps(h);
}

/*
 * Decode reads each weight once, from memory, and matmul walks groups of
 * 4 rows in order; 4 rows read side by side are 4 short streams that the
 * hardware prefetcher follows badly.  So block i of a group asks for the
 * matching bytes of the group PG_DOT4_AHEAD groups on (measured here, 1
 * thread, cold: Q4_1 3.5 -> 5.3 GB/s, Q8_0 4.9 -> 6.5 GB/s).  Prefetches
 * never fault, so running past the matrix is harmless.
 * always_inline: a prefetch has no side effects, so GCC (12) finds a
 * function made of prefetches "const" and deletes its calls when it is
 * not inlined early.
 */
#define PG_DOT4_AHEAD 2

static inline __attribute__((always_inline)) void
prefetch_group(const void *w, size_t stride, int64_t i, size_t block_bytes)
{
	const char *ahead = (const char *)w + PG_DOT4_AHEAD * 4 * stride;
	size_t lo = (size_t)i * 4 * block_bytes, hi = lo + 4 * block_bytes;

	for (size_t o = lo & ~(size_t)63; o < hi; o += 64)
		_mm_prefetch(ahead + o, _MM_HINT_T0);
}

/*
 * prefetch_group's lines as a fixed number of prefetches, for small blocks
 * (Q5_0, Q5_1): no loop whose trip count changes from block to block,
 * whose mispredictions cost more than a spare prefetch (Q5_0 hot, 1
 * thread, about 12%).  Block i asks for the lines at p, p + 64, ... short
 * of p + 4 block_bytes; whatever of that span lies past the last is in the
 * line of block i + 1's p.  (The K-quants' large blocks measured no
 * better either way; the older loops keep prefetch_group, unmeasured.)
 */
static inline __attribute__((always_inline)) void
prefetch_group_fixed(const void *w, size_t stride, int64_t i,
		     size_t block_bytes)
{
	const char *p = (const char *)w + PG_DOT4_AHEAD * 4 * stride +
			(size_t)i * 4 * block_bytes;

#pragma GCC unroll 16
	for (size_t o = 0; o < 4 * block_bytes; o += 64)
		_mm_prefetch(p + o, _MM_HINT_T0);
}

/* Two consecutive F16 values at p (a block's d and m, or d and s). */
static inline __m128 load_f16x2(const uint16_t *p)
{
	int32_t v;

	__builtin_memcpy(&v, p, sizeof(v));
	return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

/* Sums of pairs of u8 * s8 products, then of pairs again: 8 int32s. */
static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
				 _mm256_set1_epi16(1));
}

/* The same for two signed vectors: move a's sign onto b. */
static inline __m256i dot_s8s8(__m256i a, __m256i b)
{
	return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/*
 * expf of 8 floats, about 2 ulp: 2^n * p(r), n = round(x / ln 2), r the
 * remainder (ln 2 split in two for exactness), p a degree-7 polynomial.
 * Inputs are clamped to [-87, 88] so the result stays a normal float.
 */
static inline __m256 exp256(__m256 x)
{
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)),
			  _mm256_set1_ps(88.0f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);

	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);

	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
	p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
				      _mm256_set1_epi32(127)), 23);

	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif
