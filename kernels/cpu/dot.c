/*
 * dot.c - reference dot products of a weight row with an activation row,
 * straight from the block formats without dequantising the row.
 *
 * These define the results the SIMD versions (dot_avx2.c, q4_avx2.c,
 * gemm_avx2.c) must match: Q4_0 and Q4_1 bit for bit, the others within
 * rounding; they are plain C and slow.
 */
#include <math.h>

#include "cpu_impl.h"

/* w: (n) floats; x: (n) floats */
float pg_dot_f32_ref(int64_t n, const void *w, const void *x)
{
	const float *a = w, *b = x;
	float s = 0.0f;

	for (int64_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* w: (n) F16; x: (n) floats */
float pg_dot_f16_ref(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const float *b = x;
	float s = 0.0f;

	for (int64_t i = 0; i < n; i++)
		s += pg_fp16_to_fp32(a[i]) * b[i];
	return s;
}

/* w: (n) BF16; x: (n) floats */
float pg_dot_bf16_ref(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const float *b = x;
	float s = 0.0f;

	for (int64_t i = 0; i < n; i++)
		s += pg_bf16_to_fp32(a[i]) * b[i];
	return s;
}

/* w: (n / 32) Q8_0; x: (n / 32) Q8_0 */
float pg_dot_q8_0_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q8_0 *a = w, *b = x;
	float s = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		int acc = 0;

		for (int j = 0; j < PG_QK; j++)
			acc += a[i].qs[j] * b[i].qs[j];
		s += (float)acc * pg_fp16_to_fp32(a[i].d) *
		     pg_fp16_to_fp32(b[i].d);
	}
	return s;
}

/*
 * Q4_0 and Q4_1 in pagoda's numerics, which the SIMD loops give bit for
 * bit (q4_avx2.c, gemm_avx2.c): per block, the exact integer sum i of the
 * 32 products, then acc = fma(d_w d_x, i, acc), d_w d_x one rounded
 * product; Q4_1's minimum terms ms = fma(m_w, s_x, ms) on the side, and
 * the row is acc + ms.
 */

/* w: (n / 32) Q4_0; x: (n / 32) Q8_0 */
float pg_dot_q4_0_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q4_0 *a = w;
	const struct pg_block_q8_0 *b = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		int sum = 0;

		for (int j = 0; j < PG_QK / 2; j++) {
			sum += ((a[i].qs[j] & 0x0f) - 8) * b[i].qs[j];
			sum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
		}
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * pg_fp16_to_fp32(b[i].d),
			   (float)sum, acc);
	}
	return acc;
}

/*
 * w: (n / 32) Q4_1; x: (n / 32) Q8_1.  Per block
 * sum (dw qw + mw) dx qx = dw dx sum(qw qx) + mw sx, sx = dx sum(qx).
 */
float pg_dot_q4_1_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q4_1 *a = w;
	const struct pg_block_q8_1 *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		int sum = 0;

		for (int j = 0; j < PG_QK / 2; j++) {
			sum += (a[i].qs[j] & 0x0f) * b[i].qs[j];
			sum += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
		}
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * pg_fp16_to_fp32(b[i].d),
			   (float)sum, acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].m), pg_fp16_to_fp32(b[i].s), ms);
	}
	return acc + ms;
}

/*
 * Q4_1 for llama.cpp's numerics: the same products, the float sums in
 * another order (the AVX2 loops sum 8 lanes of 4 products each); this is
 * their reference within rounding.
 */
float pg_dot_q4_1_llama_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q4_1 *a = w;
	const struct pg_block_q8_1 *b = x;
	float s = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		int acc = 0;

		for (int j = 0; j < PG_QK / 2; j++) {
			acc += (a[i].qs[j] & 0x0f) * b[i].qs[j];
			acc += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
		}
		s += (float)acc * pg_fp16_to_fp32(a[i].d) *
		     pg_fp16_to_fp32(b[i].d);
		s += pg_fp16_to_fp32(a[i].m) * pg_fp16_to_fp32(b[i].s);
	}
	return s;
}
