/*
 * vec.c - reference float loops (axpy, norms, activations) and the scalar
 * table of inner loops, the level every other table is checked against.
 *
 * Plain C, no threading; the ops that call these are in their own files.
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

/* v: (n) floats; acc: (n) */
void pg_axpy_f32_ref(int n, float a, const void *v, float *acc)
{
	const float *x = v;

	for (int i = 0; i < n; i++)
		acc[i] += a * x[i];
}

/* v: (n) F16; acc: (n) */
void pg_axpy_f16_ref(int n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;

	for (int i = 0; i < n; i++)
		acc[i] += a * pg_fp16_to_fp32(x[i]);
}

/* v: (n) BF16; acc: (n) */
void pg_axpy_bf16_ref(int n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;

	for (int i = 0; i < n; i++)
		acc[i] += a * pg_bf16_to_fp32(x[i]);
}

void pg_scale_ref(int64_t n, float s, float *x)
{
	for (int64_t i = 0; i < n; i++)
		x[i] *= s;
}

float pg_sumsq_ref(int64_t n, const float *x)
{
	float s = 0.0f;

	for (int64_t i = 0; i < n; i++)
		s += x[i] * x[i];
	return s;
}

void pg_scale_mul_ref(int64_t n, const float *x, float s, const float *w,
		      float *out)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = x[i] * s * w[i];
}

void pg_silu_mul_ref(int64_t n, float *gate, const float *up)
{
	for (int64_t i = 0; i < n; i++)
		gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* k: (n, hd) of type t; q: (hd); s: (n) */
void pg_attn_scores_ref(enum pg_dtype t, int n, int hd, const void *k,
			const float *q, float *s)
{
	size_t row = (size_t)hd * pg_dtype_block_bytes(t);
	pg_dot_fn dot = t == PG_F16 ? pg_dot_f16_ref :
			t == PG_BF16 ? pg_dot_bf16_ref : pg_dot_f32_ref;

	for (int j = 0; j < n; j++)
		s[j] = dot(hd, (const uint8_t *)k + j * row, q);
}

/* p: (n); v: (n, hd) of type t; acc: (hd) */
void pg_attn_values_ref(enum pg_dtype t, int n, int hd, const float *p,
			const void *v, float *acc)
{
	size_t row = (size_t)hd * pg_dtype_block_bytes(t);
	pg_axpy_fn axpy = t == PG_F16 ? pg_axpy_f16_ref :
			  t == PG_BF16 ? pg_axpy_bf16_ref : pg_axpy_f32_ref;

	for (int j = 0; j < n; j++)
		axpy(hd, p[j], (const uint8_t *)v + j * row, acc);
}

float pg_exp_sum_ref(int n, float *s, float max)
{
	float sum = 0.0f;

	for (int j = 0; j < n; j++) {
		s[j] = expf(s[j] - max);
		sum += s[j];
	}
	return sum;
}

void pg_round_kv_ref(enum pg_dtype t, int n, const float *x, float *out)
{
	for (int i = 0; i < n; i++)
		out[i] = t == PG_BF16 ? pg_bf16_to_fp32(pg_fp32_to_bf16(x[i])) :
			 pg_fp16_to_fp32(pg_fp32_to_fp16(x[i]));
}

void pg_add_ref(int64_t n, float *x, const float *y)
{
	for (int64_t i = 0; i < n; i++)
		x[i] += y[i];
}

const struct pg_cpu_kernels pg_cpu_kernels_scalar = {
	.isa = PG_ISA_SCALAR,
	.dot_f32 = pg_dot_f32_ref,
	.dot_f16 = pg_dot_f16_ref,
	.dot_bf16 = pg_dot_bf16_ref,
	.dot_q8_0 = pg_dot_q8_0_ref,
	.dot_q4_0 = pg_dot_q4_0_ref,
	.dot_q4_1 = pg_dot_q4_1_ref,
	.dot_q5_0 = pg_dot_q5_0_ref,
	.dot_q5_1 = pg_dot_q5_1_ref,
	.dot_q2_k = pg_dot_q2_k_ref,
	.dot_q3_k = pg_dot_q3_k_ref,
	.dot_q4_k = pg_dot_q4_k_ref,
	.dot_q5_k = pg_dot_q5_k_ref,
	.dot_q6_k = pg_dot_q6_k_ref,
	.dot_q4_1_llama = pg_dot_q4_1_llama_ref,
	.quant_q8_0 = pg_quant_q8_0_ref,
	.quant_q8_1 = pg_quant_q8_1_ref,
	.quant_q8_k = pg_quant_q8_k_ref,
	.axpy_f32 = pg_axpy_f32_ref,
	.axpy_f16 = pg_axpy_f16_ref,
	.axpy_bf16 = pg_axpy_bf16_ref,
	.scale = pg_scale_ref,
	.sumsq = pg_sumsq_ref,
	.scale_mul = pg_scale_mul_ref,
	.attn_scores = pg_attn_scores_ref,
	.attn_values = pg_attn_values_ref,
	.exp_sum = pg_exp_sum_ref,
	.round_kv = pg_round_kv_ref,
	.fa16_run = pg_fa16_run_ref,
	.silu_mul = pg_silu_mul_ref,
	.silu_mul_llama = pg_silu_mul_llama_ref,
	.add = pg_add_ref,
	.gelu_mul = pg_gelu_mul_ref,
};
