/*
 * quant.c - reference quantisation and dequantisation of rows: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q8_1, the K-quants and Q8_K in llama.cpp's block
 * layouts (kernels/dtype.h), plus F32/F16/BF16 as trivial cases.  Q4_0,
 * Q4_1, Q8_0 and the activation types round as llama.cpp does; the other
 * weight quantisers choose their scales simply (min/max or absmax per
 * sub-block, see each), not by llama.cpp's search, so their blocks are
 * valid but not llama.cpp's bit for bit.
 *
 * Scalar only: used for weights, tests, and as the reference the SIMD
 * activation quantisers are checked against.  Dot products are in dot.c.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

static float absmax(const float *x, int n)
{
	float m = 0.0f;

	for (int i = 0; i < n; i++)
		m = fmaxf(m, fabsf(x[i]));
	return m;
}

/*
 * Weights, as llama.cpp's reference quantiser: d = amax / 127,
 * q = roundf(x / d) (halves away from zero).
 */
static void quant_q8_0_weights(const float *x, struct pg_block_q8_0 *b,
			       int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK) {
		float d = absmax(x, PG_QK) / 127.0f;
		float id = d ? 1.0f / d : 0.0f;

		b[i].d = pg_fp32_to_fp16(d);
		for (int j = 0; j < PG_QK; j++)
			b[i].qs[j] = (int8_t)roundf(x[j] * id);
	}
}

/*
 * Activations, as llama.cpp quantises them before a matmul: d = amax / 127
 * but q = x * (127 / amax) rounded half to even.  Matching this rounding
 * exactly (not just its accuracy) keeps pagoda's logits bit-identical to
 * llama.cpp's wherever the rest of the computation is the same.
 * Returns sum(q) for Q8_1.
 */
static int quant_block_act(const float *x, int8_t *qs, float *d)
{
	float amax = absmax(x, PG_QK);
	float id = amax != 0.0f ? 127.0f / amax : 0.0f;
	int sum = 0;

	*d = amax / 127.0f;
	for (int j = 0; j < PG_QK; j++) {
		qs[j] = (int8_t)nearbyintf(x[j] * id);
		sum += qs[j];
	}
	return sum;
}

/* x: (n) floats; dst: (n / 32) Q8_0 blocks (activations). */
void pg_quant_q8_0_ref(const float *x, void *dst, int64_t n)
{
	struct pg_block_q8_0 *b = dst;
	float d;

	for (int64_t i = 0; i < n / PG_QK; i++, x += PG_QK) {
		quant_block_act(x, b[i].qs, &d);
		b[i].d = pg_fp32_to_fp16(d);
	}
}

/* As Q8_0, plus s = d * sum(q) for the Q4_1 dot's minimum term. */
void pg_quant_q8_1_ref(const float *x, void *dst, int64_t n)
{
	struct pg_block_q8_1 *b = dst;
	float d;
	int sum;

	for (int64_t i = 0; i < n / PG_QK; i++, x += PG_QK) {
		sum = quant_block_act(x, b[i].qs, &d);
		b[i].d = pg_fp32_to_fp16(d);
		b[i].s = pg_fp32_to_fp16((float)sum * d);
	}
}

/* d = (value of largest magnitude) / -8, q = min(15, x / d + 8.5). */
static void quant_q4_0(const float *x, struct pg_block_q4_0 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK) {
		float amax = 0.0f, max = 0.0f;

		for (int j = 0; j < PG_QK; j++) {
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		float d = max / -8.0f;
		float id = d ? 1.0f / d : 0.0f;

		b[i].d = pg_fp32_to_fp16(d);
		for (int j = 0; j < PG_QK / 2; j++) {
			int q0 = (int)(int8_t)(x[j] * id + 8.5f);
			int q1 = (int)(int8_t)(x[j + 16] * id + 8.5f);

			q0 = q0 < 15 ? q0 : 15;
			q1 = q1 < 15 ? q1 : 15;
			b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

/* d = (max - min) / 15, m = min, q = min(15, (x - min) / d + 0.5). */
static void quant_q4_1(const float *x, struct pg_block_q4_1 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK) {
		float min = x[0], max = x[0];

		for (int j = 1; j < PG_QK; j++) {
			min = fminf(min, x[j]);
			max = fmaxf(max, x[j]);
		}
		float d = (max - min) / 15.0f;
		float id = d ? 1.0f / d : 0.0f;

		b[i].d = pg_fp32_to_fp16(d);
		b[i].m = pg_fp32_to_fp16(min);
		for (int j = 0; j < PG_QK / 2; j++) {
			int q0 = (int)(int8_t)((x[j] - min) * id + 0.5f);
			int q1 = (int)(int8_t)((x[j + 16] - min) * id + 0.5f);

			q0 = q0 < 15 ? q0 : 15;
			q1 = q1 < 15 ? q1 : 15;
			b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

/* Q8_K activations: per 256 values d = amax / 127, q = x * (127 / amax)
 * rounded half to even (as Q8_0's), and the sums of each 16 q. */
void pg_quant_q8_k_ref(const float *x, void *dst, int64_t n)
{
	struct pg_block_q8_k *b = dst;

	for (int64_t i = 0; i < n / PG_QK_K; i++, x += PG_QK_K) {
		float amax = absmax(x, PG_QK_K);
		float id = amax != 0.0f ? 127.0f / amax : 0.0f;

		b[i].d = amax / 127.0f;
		for (int j = 0; j < PG_QK_K; j++)
			b[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
		for (int j = 0; j < 16; j++) {
			int sum = 0;

			for (int l = 0; l < 16; l++)
				sum += b[i].qs[16 * j + l];
			b[i].bsums[j] = (int16_t)sum;
		}
	}
}

static int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Q5_0: as Q4_0, d = (value of largest magnitude) / -16, q in [0, 31]. */
static void quant_q5_0(const float *x, struct pg_block_q5_0 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK) {
		float amax = 0.0f, max = 0.0f;
		uint32_t qh = 0;

		for (int j = 0; j < PG_QK; j++) {
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		float d = max / -16.0f;
		float id = d ? 1.0f / d : 0.0f;

		b[i].d = pg_fp32_to_fp16(d);
		for (int j = 0; j < PG_QK / 2; j++) {
			int q0 = clampi((int)(x[j] * id + 16.5f), 0, 31);
			int q1 = clampi((int)(x[j + 16] * id + 16.5f), 0, 31);

			b[i].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
			qh |= (uint32_t)(q0 >> 4) << j;
			qh |= (uint32_t)(q1 >> 4) << (j + 16);
		}
		for (int j = 0; j < 4; j++)
			b[i].qh[j] = (uint8_t)(qh >> (8 * j));
	}
}

/* Q5_1: as Q4_1, d = (max - min) / 31, m = min. */
static void quant_q5_1(const float *x, struct pg_block_q5_1 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK) {
		float min = x[0], max = x[0];
		uint32_t qh = 0;

		for (int j = 1; j < PG_QK; j++) {
			min = fminf(min, x[j]);
			max = fmaxf(max, x[j]);
		}
		float d = (max - min) / 31.0f;
		float id = d ? 1.0f / d : 0.0f;

		b[i].d = pg_fp32_to_fp16(d);
		b[i].m = pg_fp32_to_fp16(min);
		for (int j = 0; j < PG_QK / 2; j++) {
			int q0 = clampi((int)((x[j] - min) * id + 0.5f), 0, 31);
			int q1 = clampi((int)((x[j + 16] - min) * id + 0.5f), 0,
					31);

			b[i].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
			qh |= (uint32_t)(q0 >> 4) << j;
			qh |= (uint32_t)(q1 >> 4) << (j + 16);
		}
		for (int j = 0; j < 4; j++)
			b[i].qh[j] = (uint8_t)(qh >> (8 * j));
	}
}

/*
 * The K-quants with mins (Q2_K, Q4_K, Q5_K), one super-block of ns
 * sub-blocks of len values, each y = d sc q - dmin m: sub-block j's
 * min_j = -min(0, its minimum) and scale_j = (max + min_j) / qmax; d =
 * max scale_j / smax, dmin = max min_j / smax (F16); m[j] = ceil(min_j /
 * dmin) so that the grid starts at or below the minimum, then sc[j] =
 * ceil((max + dmin m[j]) / qmax / d) so that it reaches the maximum (both
 * in [0, smax]); q = round((x + dmin m) / (d sc)) in [0, qmax].  Every
 * value is then within half a step (d sc) of its own, but where a scale
 * or min is clamped at smax.
 */
static void quant_kmin(const float *x, int ns, int len, int qmax, int smax,
		       uint16_t *d16, uint16_t *dmin16, uint8_t *sc,
		       uint8_t *m, uint8_t *q)
{
	float hi[16], mn[16], smax_f = 0.0f, mmax = 0.0f, d, dmin;

	for (int j = 0; j < ns; j++) {
		float lo = 0.0f;

		hi[j] = x[j * len];
		for (int l = 0; l < len; l++) {
			lo = fminf(lo, x[j * len + l]);
			hi[j] = fmaxf(hi[j], x[j * len + l]);
		}
		mn[j] = -lo;
		smax_f = fmaxf(smax_f, (hi[j] + mn[j]) / (float)qmax);
		mmax = fmaxf(mmax, mn[j]);
	}
	*d16 = pg_fp32_to_fp16(smax_f / (float)smax);
	*dmin16 = pg_fp32_to_fp16(mmax / (float)smax);
	d = pg_fp16_to_fp32(*d16);
	dmin = pg_fp16_to_fp32(*dmin16);
	for (int j = 0; j < ns; j++) {
		float ds, dm;

		m[j] = (uint8_t)clampi(dmin ? (int)ceilf(mn[j] / dmin) : 0, 0,
				       smax);
		dm = dmin * (float)m[j];
		sc[j] = (uint8_t)clampi(d ? (int)ceilf((hi[j] + dm) /
						      (float)qmax / d) : 0,
					0, smax);
		ds = d * (float)sc[j];
		for (int l = 0; l < len; l++)
			q[j * len + l] = (uint8_t)clampi(ds ? (int)nearbyintf(
				(x[j * len + l] + dm) / ds) : 0, 0, qmax);
	}
}

/*
 * The symmetric K-quants (Q3_K, Q6_K), one super-block of 16 sub-blocks of
 * 16, each y = d sc q with q in [-qlo, qlo - 1], as Q4_0 and Q5_0 choose
 * their scale: s_j = (sub-block j's value of largest magnitude) / -qlo, so
 * that it maps to -qlo; d = max |s_j| / smax (F16); sc[j] = s_j / d
 * rounded away from zero (in [-smax - 1, smax]) so that |d sc| >= |s_j|
 * and that value is not clamped; q = round(x / (d sc)).  Values of the
 * other sign clamp at qlo - 1: each value within one step (|d sc|) of its
 * own, half a step but at that end.
 */
static void quant_ksym(const float *x, int qlo, int smax, uint16_t *d16,
		       int *sc, int *q)
{
	float s[16], amax = 0.0f, d;

	for (int j = 0; j < 16; j++) {
		float a = 0.0f, v = 0.0f;

		for (int l = 0; l < 16; l++)
			if (fabsf(x[16 * j + l]) > a) {
				a = fabsf(x[16 * j + l]);
				v = x[16 * j + l];
			}
		s[j] = v / (float)-qlo;
		amax = fmaxf(amax, fabsf(s[j]));
	}
	*d16 = pg_fp32_to_fp16(amax / (float)smax);
	d = pg_fp16_to_fp32(*d16);
	for (int j = 0; j < 16; j++) {
		float ds, r = d ? ceilf(fabsf(s[j]) / d) : 0.0f;

		sc[j] = clampi(s[j] < 0 ? -(int)r : (int)r, -smax - 1, smax);
		ds = d * (float)sc[j];
		for (int l = 0; l < 16; l++)
			q[16 * j + l] = clampi(ds ? (int)nearbyintf(
				x[16 * j + l] / ds) : 0, -qlo, qlo - 1);
	}
}

static void quant_q2_k(const float *x, struct pg_block_q2_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK_K) {
		uint8_t sc[16], m[16], q[PG_QK_K];

		quant_kmin(x, 16, 16, 3, 15, &b[i].d, &b[i].dmin, sc, m, q);
		for (int j = 0; j < 16; j++)
			b[i].scales[j] = (uint8_t)(sc[j] | m[j] << 4);
		memset(b[i].qs, 0, sizeof(b[i].qs));
		for (int v = 0; v < PG_QK_K; v++)
			b[i].qs[32 * (v / 128) + v % 32] |=
				(uint8_t)(q[v] << (2 * (v % 128 / 32)));
	}
}

static void quant_q3_k(const float *x, struct pg_block_q3_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK_K) {
		int sc[16], q[PG_QK_K];

		quant_ksym(x, 4, 31, &b[i].d, sc, q);
		memset(b[i].scales, 0, sizeof(b[i].scales));
		for (int j = 0; j < 16; j++) {
			int u = sc[j] + 32;

			b[i].scales[j % 8] |= (uint8_t)((u & 15) << (4 * (j / 8)));
			b[i].scales[8 + j % 4] |=
				(uint8_t)((u >> 4) << (2 * (j / 4)));
		}
		memset(b[i].qs, 0, sizeof(b[i].qs));
		memset(b[i].hmask, 0, sizeof(b[i].hmask));
		for (int v = 0; v < PG_QK_K; v++) {
			int u = q[v] + 4;	/* [0, 7]: hbit set = no -4 */

			b[i].qs[32 * (v / 128) + v % 32] |=
				(uint8_t)((u & 3) << (2 * (v % 128 / 32)));
			b[i].hmask[v % 32] |= (uint8_t)((u >> 2) << (v / 32));
		}
	}
}

/* Q4_K and Q5_K: sub-block j's 6-bit scale and min packed as
 * pg_scale_min_k4 reads them. */
static void pack_scale_min_k4(const uint8_t *sc, const uint8_t *m,
			      uint8_t *q)
{
	for (int j = 0; j < 4; j++) {
		q[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
		q[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
		q[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
	}
}

static void quant_q4_k(const float *x, struct pg_block_q4_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK_K) {
		uint8_t sc[8], m[8], q[PG_QK_K];

		quant_kmin(x, 8, 32, 15, 63, &b[i].d, &b[i].dmin, sc, m, q);
		pack_scale_min_k4(sc, m, b[i].scales);
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < 32; l++)
				b[i].qs[32 * k + l] = (uint8_t)(q[64 * k + l] |
						      q[64 * k + 32 + l] << 4);
	}
}

static void quant_q5_k(const float *x, struct pg_block_q5_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK_K) {
		uint8_t sc[8], m[8], q[PG_QK_K];

		quant_kmin(x, 8, 32, 31, 63, &b[i].d, &b[i].dmin, sc, m, q);
		pack_scale_min_k4(sc, m, b[i].scales);
		memset(b[i].qh, 0, sizeof(b[i].qh));
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < 32; l++) {
				int lo = q[64 * k + l], hi = q[64 * k + 32 + l];

				b[i].qs[32 * k + l] = (uint8_t)((lo & 15) |
							       (hi & 15) << 4);
				b[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * k) |
							(hi >> 4) << (2 * k + 1));
			}
	}
}

static void quant_q6_k(const float *x, struct pg_block_q6_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += PG_QK_K) {
		int sc[16], q[PG_QK_K];

		quant_ksym(x, 32, 127, &b[i].d, sc, q);
		for (int j = 0; j < 16; j++)
			b[i].scales[j] = (int8_t)sc[j];
		memset(b[i].ql, 0, sizeof(b[i].ql));
		memset(b[i].qh, 0, sizeof(b[i].qh));
		for (int v = 0; v < PG_QK_K; v++) {
			int u = q[v] + 32, h = v / 128, k = v % 128 / 32;
			int l = v % 32;

			b[i].ql[64 * h + l + 32 * (k & 1)] |=
				(uint8_t)((u & 15) << (4 * (k >> 1)));
			b[i].qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
		}
	}
}

size_t pg_quantize_row(enum pg_dtype type, const float *src, void *dst,
		       int64_t n)
{
	size_t bytes = pg_dtype_row_bytes(type, (uint64_t)n);
	uint16_t *h = dst;

	switch (type) {
	case PG_F32:
		memcpy(dst, src, bytes);
		break;
	case PG_F16:
		for (int64_t i = 0; i < n; i++)
			h[i] = pg_fp32_to_fp16(src[i]);
		break;
	case PG_BF16:
		for (int64_t i = 0; i < n; i++)
			h[i] = pg_fp32_to_bf16(src[i]);
		break;
	case PG_Q4_0:
		quant_q4_0(src, dst, n / PG_QK);
		break;
	case PG_Q4_1:
		quant_q4_1(src, dst, n / PG_QK);
		break;
	case PG_Q8_0:
		quant_q8_0_weights(src, dst, n / PG_QK);
		break;
	case PG_Q8_1:
		pg_quant_q8_1_ref(src, dst, n);
		break;
	case PG_Q5_0:
		quant_q5_0(src, dst, n / PG_QK);
		break;
	case PG_Q5_1:
		quant_q5_1(src, dst, n / PG_QK);
		break;
	case PG_Q2_K:
		quant_q2_k(src, dst, n / PG_QK_K);
		break;
	case PG_Q3_K:
		quant_q3_k(src, dst, n / PG_QK_K);
		break;
	case PG_Q4_K:
		quant_q4_k(src, dst, n / PG_QK_K);
		break;
	case PG_Q5_K:
		quant_q5_k(src, dst, n / PG_QK_K);
		break;
	case PG_Q6_K:
		quant_q6_k(src, dst, n / PG_QK_K);
		break;
	case PG_Q8_K:
		pg_quant_q8_k_ref(src, dst, n);
		break;
	default:
		return 0;
	}
	return bytes;
}

/* One block of 4-bit values: y = d * (q + off) + m, q from nibbles. */
static void dequant_q4(const uint8_t *qs, int off, float d, float m, float *y)
{
	for (int j = 0; j < PG_QK / 2; j++) {
		y[j] = d * (float)((qs[j] & 0x0f) + off) + m;
		y[j + 16] = d * (float)((qs[j] >> 4) + off) + m;
	}
}

static void dequant_q8(const int8_t *qs, float d, float *y)
{
	for (int j = 0; j < PG_QK; j++)
		y[j] = d * (float)qs[j];
}

/* Q5_0 (off -16, m 0) and Q5_1 (off 0): 4 low bits and the qh bit. */
static void dequant_q5(const uint8_t *qs, const uint8_t *qh8, int off,
		       float d, float m, float *y)
{
	uint32_t qh = (uint32_t)qh8[0] | (uint32_t)qh8[1] << 8 |
		      (uint32_t)qh8[2] << 16 | (uint32_t)qh8[3] << 24;

	for (int j = 0; j < PG_QK / 2; j++) {
		int q0 = (qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
		int q1 = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;

		y[j] = d * (float)(q0 + off) + m;
		y[j + 16] = d * (float)(q1 + off) + m;
	}
}

/*
 * The K-quants, one super-block each, in llama.cpp's loop order: each
 * value d * sc * q - dmin * m with d * sc (and dmin * m) rounded once per
 * sub-block, as llama.cpp's dequantisation does.
 */
static void dequant_q2_k(const struct pg_block_q2_k *b, float *y)
{
	float d = pg_fp16_to_fp32(b->d), dmin = pg_fp16_to_fp32(b->dmin);
	const uint8_t *q = b->qs;
	int is = 0;

	for (int h = 0; h < 2; h++, q += 32)
		for (int shift = 0; shift < 8; shift += 2)
			for (int k = 0; k < 2; k++, is++) {
				float dl = d * (float)(b->scales[is] & 15);
				float ml = dmin * (float)(b->scales[is] >> 4);

				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((q[16 * k + l] >>
							     shift) & 3) - ml;
			}
}

static void dequant_q3_k(const struct pg_block_q3_k *b, float *y)
{
	float d = pg_fp16_to_fp32(b->d);
	const uint8_t *q = b->qs;
	int is = 0, mbit = 0;

	for (int h = 0; h < 2; h++, q += 32)
		for (int shift = 0; shift < 8; shift += 2, mbit++)
			for (int k = 0; k < 2; k++, is++) {
				float dl = d * (float)pg_scale_q3_k(is,
								    b->scales);

				for (int l = 0; l < 16; l++) {
					int v = 16 * k + l;
					int u = (q[v] >> shift) & 3;

					if (!((b->hmask[v] >> mbit) & 1))
						u -= 4;
					*y++ = dl * (float)u;
				}
			}
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
static void dequant_q45_k(uint16_t d16, uint16_t dmin16, const uint8_t *sc8,
			  const uint8_t *qs, const uint8_t *qh, float *y)
{
	float d = pg_fp16_to_fp32(d16), dmin = pg_fp16_to_fp32(dmin16);

	for (int k = 0; k < 4; k++, qs += 32)
		for (int half = 0; half < 2; half++) {
			int j = 2 * k + half, sc, m;

			pg_scale_min_k4(j, sc8, &sc, &m);
			float dl = d * (float)sc, ml = dmin * (float)m;

			for (int l = 0; l < 32; l++) {
				int u = half ? qs[l] >> 4 : qs[l] & 15;

				if (qh)
					u |= ((qh[l] >> j) & 1) << 4;
				*y++ = dl * (float)u - ml;
			}
		}
}

static void dequant_q6_k(const struct pg_block_q6_k *b, float *y)
{
	float d = pg_fp16_to_fp32(b->d);
	const uint8_t *ql = b->ql, *qh = b->qh;
	const int8_t *sc = b->scales;

	for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128)
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
			int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
			int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
			int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;

			y[l] = d * (float)sc[is] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
}

/* The K-quants and Q8_K: nb super-blocks of src into 256 floats each. */
static void dequant_super(enum pg_dtype type, const void *src, float *y,
			  int64_t nb)
{
	const struct pg_block_q2_k *b2 = src;
	const struct pg_block_q3_k *b3 = src;
	const struct pg_block_q4_k *b4 = src;
	const struct pg_block_q5_k *b5 = src;
	const struct pg_block_q6_k *b6 = src;
	const struct pg_block_q8_k *b8 = src;

	for (int64_t i = 0; i < nb; i++, y += PG_QK_K) {
		switch (type) {
		case PG_Q2_K: dequant_q2_k(&b2[i], y); break;
		case PG_Q3_K: dequant_q3_k(&b3[i], y); break;
		case PG_Q4_K:
			dequant_q45_k(b4[i].d, b4[i].dmin, b4[i].scales,
				      b4[i].qs, NULL, y);
			break;
		case PG_Q5_K:
			dequant_q45_k(b5[i].d, b5[i].dmin, b5[i].scales,
				      b5[i].qs, b5[i].qh, y);
			break;
		case PG_Q6_K: dequant_q6_k(&b6[i], y); break;
		case PG_Q8_K:
			for (int j = 0; j < PG_QK_K; j++)
				y[j] = b8[i].d * (float)b8[i].qs[j];
			break;
		default:
			return;
		}
	}
}

/* The quantised types: nb blocks of src into 32 floats each. */
static void dequant_blocks(enum pg_dtype type, const void *src, float *y,
			   int64_t nb)
{
	const struct pg_block_q4_0 *b40 = src;
	const struct pg_block_q4_1 *b41 = src;
	const struct pg_block_q8_0 *b80 = src;
	const struct pg_block_q8_1 *b81 = src;
	const struct pg_block_q5_0 *b50 = src;
	const struct pg_block_q5_1 *b51 = src;

	for (int64_t i = 0; i < nb; i++, y += PG_QK) {
		switch (type) {
		case PG_Q4_0:
			dequant_q4(b40[i].qs, -8, pg_fp16_to_fp32(b40[i].d),
				   0.0f, y);
			break;
		case PG_Q4_1:
			dequant_q4(b41[i].qs, 0, pg_fp16_to_fp32(b41[i].d),
				   pg_fp16_to_fp32(b41[i].m), y);
			break;
		case PG_Q8_0:
			dequant_q8(b80[i].qs, pg_fp16_to_fp32(b80[i].d), y);
			break;
		case PG_Q8_1:
			dequant_q8(b81[i].qs, pg_fp16_to_fp32(b81[i].d), y);
			break;
		case PG_Q5_0:
			dequant_q5(b50[i].qs, b50[i].qh, -16,
				   pg_fp16_to_fp32(b50[i].d), 0.0f, y);
			break;
		case PG_Q5_1:
			dequant_q5(b51[i].qs, b51[i].qh, 0,
				   pg_fp16_to_fp32(b51[i].d),
				   pg_fp16_to_fp32(b51[i].m), y);
			break;
		default:
			return;
		}
	}
}

void pg_dequantize_row(enum pg_dtype type, const void *src, float *dst,
		       int64_t n)
{
	const uint16_t *h = src;

	switch (type) {
	case PG_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		break;
	case PG_F16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = pg_fp16_to_fp32(h[i]);
		break;
	case PG_BF16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = pg_bf16_to_fp32(h[i]);
		break;
	default:
		if (pg_dtype_block_size(type) == PG_QK_K)
			dequant_super(type, src, dst, n / PG_QK_K);
		else
			dequant_blocks(type, src, dst, n / PG_QK);
		break;
	}
}
