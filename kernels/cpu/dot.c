/*
 * dot.c - reference dot products of a weight row with an activation row,
 * straight from the block formats without dequantising the row.
 *
 * These define the results the SIMD versions (dot_avx2.c, q4_avx2.c,
 * gemm_avx2.c, kq_avx2.c) must match: Q4_0, Q4_1, Q5_0, Q5_1 and the
 * K-quants bit for bit, the others within rounding; they are plain C and
 * slow.
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

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

/*
 * Q5_0, Q5_1 and the K-quants in pagoda's numerics (the SIMD loops give
 * them bit for bit): every sum of products of quants is exact in int32 (a
 * sub-block's, times its integer scale, added over the block), so it has
 * no order; the floats then go in one fixed order, block by block:
 * acc = fma(d_w d_x, sum, acc), d_w d_x one rounded product, and for the
 * types with mins (Q5_1, Q2_K, Q4_K, Q5_K) a second running sum ms =
 * fma(dmin_w d_x, sum of mins times the activations' sums, ms) kept on the
 * side; the row is acc + ms (Q5_1) or acc - ms (the K-quants).
 */

/* The 32 bits of a Q5 block's qh, little-endian. */
static uint32_t q5_qh(const uint8_t *qh)
{
	return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 |
	       (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* Sum of q * x over a Q5 block's 32 values, q in [0, 31], plus off * q. */
static int q5_sum(const uint8_t *qs, uint32_t qh, const int8_t *x, int off)
{
	int sum = 0;

	for (int j = 0; j < PG_QK / 2; j++) {
		int q0 = (qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
		int q1 = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;

		sum += (q0 + off) * x[j] + (q1 + off) * x[j + 16];
	}
	return sum;
}

/* w: (n / 32) Q5_0; x: (n / 32) Q8_0 */
float pg_dot_q5_0_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q5_0 *a = w;
	const struct pg_block_q8_0 *b = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		int sum = q5_sum(a[i].qs, q5_qh(a[i].qh), b[i].qs, -16);

		acc = fmaf(pg_fp16_to_fp32(a[i].d) * pg_fp16_to_fp32(b[i].d),
			   (float)sum, acc);
	}
	return acc;
}

/* w: (n / 32) Q5_1; x: (n / 32) Q8_1 */
float pg_dot_q5_1_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q5_1 *a = w;
	const struct pg_block_q8_1 *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		int sum = q5_sum(a[i].qs, q5_qh(a[i].qh), b[i].qs, 0);

		acc = fmaf(pg_fp16_to_fp32(a[i].d) * pg_fp16_to_fp32(b[i].d),
			   (float)sum, acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].m), pg_fp16_to_fp32(b[i].s), ms);
	}
	return acc + ms;
}

/* w: (n / 256) Q2_K; x: (n / 256) Q8_K */
float pg_dot_q2_k_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q2_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		int sumi = 0, summ = 0;

		for (int j = 0; j < 16; j++) {	/* sub-block of 16 */
			const uint8_t *q = a[i].qs + 32 * (j / 8) + 16 * (j & 1);
			int shift = 2 * (j % 8 / 2), s = 0;

			for (int l = 0; l < 16; l++)
				s += ((q[l] >> shift) & 3) * b[i].qs[16 * j + l];
			sumi += (a[i].scales[j] & 15) * s;
			summ += (a[i].scales[j] >> 4) * b[i].bsums[j];
		}
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d, (float)sumi, acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].dmin) * b[i].d, (float)summ, ms);
	}
	return acc - ms;
}

/* w: (n / 256) Q3_K; x: (n / 256) Q8_K */
float pg_dot_q3_k_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q3_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		int sumi = 0;

		for (int j = 0; j < 16; j++) {
			const uint8_t *q = a[i].qs + 32 * (j / 8);
			int shift = 2 * (j % 8 / 2), s = 0;

			for (int l = 0; l < 16; l++) {
				int v = 16 * (j & 1) + l;	/* in the 32 */
				int u = (q[v] >> shift) & 3;

				if (!((a[i].hmask[v] >> (j / 2)) & 1))
					u -= 4;
				s += u * b[i].qs[16 * j + l];
			}
			sumi += pg_scale_q3_k(j, a[i].scales) * s;
		}
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d, (float)sumi, acc);
	}
	return acc;
}

/* Q4_K and Q5_K's integer sums of one super-block (qh NULL: Q4_K). */
static void q45_k_sums(const uint8_t *sc8, const uint8_t *qs,
		       const uint8_t *qh, const struct pg_block_q8_k *b,
		       int *sumi, int *summ)
{
	*sumi = *summ = 0;
	for (int j = 0; j < 8; j++) {	/* sub-block of 32 */
		const uint8_t *q = qs + 32 * (j / 2);
		int sc, m, s = 0;

		pg_scale_min_k4(j, sc8, &sc, &m);
		for (int l = 0; l < 32; l++) {
			int u = j & 1 ? q[l] >> 4 : q[l] & 15;

			if (qh)
				u |= ((qh[l] >> j) & 1) << 4;
			s += u * b->qs[32 * j + l];
		}
		*sumi += sc * s;
		*summ += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
	}
}

/* w: (n / 256) Q4_K; x: (n / 256) Q8_K */
float pg_dot_q4_k_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q4_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		int sumi, summ;

		q45_k_sums(a[i].scales, a[i].qs, NULL, &b[i], &sumi, &summ);
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d, (float)sumi, acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].dmin) * b[i].d, (float)summ, ms);
	}
	return acc - ms;
}

/* w: (n / 256) Q5_K; x: (n / 256) Q8_K */
float pg_dot_q5_k_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q5_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		int sumi, summ;

		q45_k_sums(a[i].scales, a[i].qs, a[i].qh, &b[i], &sumi, &summ);
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d, (float)sumi, acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].dmin) * b[i].d, (float)summ, ms);
	}
	return acc - ms;
}

/* w: (n / 256) Q6_K; x: (n / 256) Q8_K */
float pg_dot_q6_k_ref(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q6_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		int sumi = 0;

		for (int j = 0; j < 16; j++) {	/* sub-block of 16 */
			int h = j / 8, k = j % 8 / 2, s = 0;
			const uint8_t *ql = a[i].ql + 64 * h + 32 * (k & 1);
			const uint8_t *qh = a[i].qh + 32 * h;

			for (int l = 16 * (j & 1); l < 16 * (j & 1) + 16; l++) {
				int u = ((ql[l] >> (4 * (k >> 1))) & 15) |
					((qh[l] >> (2 * k)) & 3) << 4;

				s += (u - 32) * b[i].qs[16 * j + l % 16];
			}
			sumi += a[i].scales[j] * s;
		}
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d, (float)sumi, acc);
	}
	return acc;
}
