/*
 * vnni16.h - the register helpers of the AVX-512 VNNI 16-row loops
 * (kq_vnni.c, q8_vnni.c): joining two 8-row halves into one zmm register,
 * the 16-row transpose of int32 lanes, and 16 rows' F16 scales as floats.
 *
 * Included only by files compiled with -mavx512f/bw/vl/dq -mavx512vnni.
 */
#ifndef PAGODA_KERNELS_CPU_VNNI16_H
#define PAGODA_KERNELS_CPU_VNNI16_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* lo in lanes 0-7, hi in lanes 8-15 (int32 or float lanes). */
static inline __m512i join_i(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static inline __m512 join_f(__m256 lo, __m256 hi)
{
	return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* Lane r of out[j] = lane j of in[r], r < 8 (kq_avx2.c's tr8x8). */
static inline __attribute__((always_inline)) void
tr8(const __m256i in[8], __m256i out[8])
{
	__m256i t[8], u[8];

#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		t[2 * k] = _mm256_unpacklo_epi32(in[2 * k], in[2 * k + 1]);
		t[2 * k + 1] = _mm256_unpackhi_epi32(in[2 * k], in[2 * k + 1]);
	}
#pragma GCC unroll 2
	for (int k = 0; k < 2; k++) {
		u[4 * k] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
		u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
		u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
		u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
	}
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		out[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
		out[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
	}
}

/* The same for 16 rows: lane r of out[j] = lane j of in[r], r < 16. */
static inline __attribute__((always_inline)) void
tr16(const __m256i in[16], __m512i out[8])
{
	__m256i lo[8], hi[8];

	tr8(in, lo);
	tr8(in + 8, hi);
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		out[j] = join_i(lo[j], hi[j]);
}

static inline uint16_t load16(const uint8_t *p)
{
	uint16_t h;

	__builtin_memcpy(&h, p, sizeof(h));
	return h;
}

/* The F16 at p + r * ws for r < 16 as floats in lane r (put together in
 * general registers: 2-byte stores read back wider miss forwarding). */
static inline __m512 f16_rows16(const uint8_t *p, size_t ws)
{
	uint64_t v[4] = { 0, 0, 0, 0 };

#pragma GCC unroll 16
	for (int r = 0; r < 16; r++)
		v[r / 4] |= (uint64_t)load16(p + (size_t)r * ws) << (16 * (r % 4));
	return _mm512_cvtph_ps(_mm256_set_epi64x((long long)v[3],
		(long long)v[2], (long long)v[1], (long long)v[0]));
}

#endif
