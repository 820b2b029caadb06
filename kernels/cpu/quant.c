/*
 * quant.c - reference quantisation and dequantisation of rows: Q4_0, Q4_1,
 * Q8_0, Q8_1 in llama.cpp's block layouts (kernels/dtype.h) and rounding,
 * plus F32/F16/BF16 as trivial cases.
 *
 * Scalar only: used for weights, tests, and as the reference the SIMD
 * activation quantisers are checked against.  Dot products are in dot.c.
 */
#include <math.h>
#include <string.h>

#include "cpu_impl.h"

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

/* The quantised types: nb blocks of src into 32 floats each. */
static void dequant_blocks(enum pg_dtype type, const void *src, float *y,
			   int64_t nb)
{
	const struct pg_block_q4_0 *b40 = src;
	const struct pg_block_q4_1 *b41 = src;
	const struct pg_block_q8_0 *b80 = src;
	const struct pg_block_q8_1 *b81 = src;

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
		dequant_blocks(type, src, dst, n / PG_QK);
		break;
	}
}
