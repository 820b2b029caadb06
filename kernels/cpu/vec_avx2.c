/*
 * vec_avx2.c - AVX2/FMA float loops (axpy over F32/F16/BF16 rows, norms,
 * SwiGLU, residual add) and the AVX2 table of inner loops.
 *
 * Tails shorter than a vector go to the reference loops of vec.c.
 * Compiled with -mavx2 -mfma -mf16c; reached only through the table.
 */
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

/* v: (n) floats; acc: (n) */
void pg_axpy_f32_avx2(int n, float a, const void *v, float *acc)
{
	const float *x = v;
	__m256 va = _mm256_set1_ps(a);
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
							  _mm256_loadu_ps(acc + i)));
	pg_axpy_f32_ref(n - i, a, x + i, acc + i);
}

/* v: (n) F16; acc: (n) */
void pg_axpy_f16_avx2(int n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;
	__m256 va = _mm256_set1_ps(a);
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, load_f16x8(x + i),
							  _mm256_loadu_ps(acc + i)));
	pg_axpy_f16_ref(n - i, a, x + i, acc + i);
}

/* v: (n) BF16; acc: (n) */
void pg_axpy_bf16_avx2(int n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;
	__m256 va = _mm256_set1_ps(a);
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(acc + i, _mm256_fmadd_ps(va, load_bf16x8(x + i),
							  _mm256_loadu_ps(acc + i)));
	pg_axpy_bf16_ref(n - i, a, x + i, acc + i);
}

void pg_scale_avx2(int64_t n, float s, float *x)
{
	__m256 vs = _mm256_set1_ps(s);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(vs, _mm256_loadu_ps(x + i)));
	pg_scale_ref(n - i, s, x + i);
}

float pg_sumsq_avx2(int64_t n, const float *x)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = s0;
	int64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);

		s0 = _mm256_fmadd_ps(a, a, s0);
		s1 = _mm256_fmadd_ps(b, b, s1);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 a = _mm256_loadu_ps(x + i);

		s0 = _mm256_fmadd_ps(a, a, s0);
	}
	return hsum256(_mm256_add_ps(s0, s1)) + pg_sumsq_ref(n - i, x + i);
}

void pg_scale_mul_avx2(int64_t n, const float *x, float s, const float *w,
			   float *out)
{
	__m256 vs = _mm256_set1_ps(s);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
							_mm256_loadu_ps(w + i)));
	pg_scale_mul_ref(n - i, x + i, s, w + i, out + i);
}

/* gate = gate / (1 + ex(0 - gate)) * up, 8 at a time, the tail by the
 * reference (libm's expf); ex is inlined. */
static inline __attribute__((always_inline)) void
silu_mul_with(int64_t n, float *gate, const float *up, __m256 (*ex)(__m256))
{
	__m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 g = _mm256_loadu_ps(gate + i);
		__m256 e = ex(_mm256_sub_ps(zero, g));
		__m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));

		_mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
	}
	pg_silu_mul_ref(n - i, gate + i, up + i);
}

void pg_silu_mul_avx2(int64_t n, float *gate, const float *up)
{
	silu_mul_with(n, gate, up, exp256);
}

void pg_add_avx2(int64_t n, float *x, const float *y)
{
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i),
						      _mm256_loadu_ps(y + i)));
	pg_add_ref(n - i, x + i, y + i);
}

/*
 * pg_gelu_mul_ref 8 at a time: F16C's round to nearest even (as
 * pg_fp32_to_fp16 rounds) gives the table index, a gather the GELU; lanes
 * at or below -10 take 0, at or above 10 their x.  The tail by the
 * reference.
 */
void pg_gelu_mul_avx2(int64_t n, float *gate, const float *up,
		      const float *tab)
{
	const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(gate + i);
		__m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(
			x, _MM_FROUND_TO_NEAREST_INT));
		__m256 g = _mm256_i32gather_ps(tab, h, 4);

		g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
		g = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), g);
		_mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
	}
	pg_gelu_mul_ref(n - i, gate + i, up + i, tab);
}

const struct pg_cpu_kernels pg_cpu_kernels_avx2 = {
	.isa = PG_ISA_AVX2,
	.dot_f32 = pg_dot_f32_avx2,
	.dot_f16 = pg_dot_f16_avx2,
	.dot_bf16 = pg_dot_bf16_avx2,
	.dot_q8_0 = pg_dot_q8_0_avx2,
	.dot_q4_0 = pg_dot_q4_0_avx2,
	.dot_q4_1 = pg_dot_q4_1_avx2,
	.dot_q5_0 = pg_dot_q5_0_avx2,
	.dot_q5_1 = pg_dot_q5_1_avx2,
	.dot_q2_k = pg_dot_q2_k_avx2,
	.dot_q3_k = pg_dot_q3_k_avx2,
	.dot_q4_k = pg_dot_q4_k_avx2,
	.dot_q5_k = pg_dot_q5_k_avx2,
	.dot_q6_k = pg_dot_q6_k_avx2,
	.dot4_q8_0 = pg_dot4_q8_0_avx2,
	.dot4_q4_0 = pg_dot4_q4_0_avx2,
	.dot4_q4_1 = pg_dot4_q4_1_avx2,
	.dot4x2_q8_0 = pg_dot4x2_q8_0_avx2,
	.dot4x2_q4_0 = pg_dot4x2_q4_0_avx2,
	.dot4x2_q4_1 = pg_dot4x2_q4_1_avx2,
	.gemm8_q4_0 = pg_gemm8_q4_0_avx2,
	.gemm8_q4_1 = pg_gemm8_q4_1_avx2,
	.dot4_q5_0 = pg_dot4_q5_0_avx2,
	.dot4_q5_1 = pg_dot4_q5_1_avx2,
	.dot4_q2_k = pg_dot4_q2_k_avx2,
	.dot4_q3_k = pg_dot4_q3_k_avx2,
	.dot4_q4_k = pg_dot4_q4_k_avx2,
	.dot4_q5_k = pg_dot4_q5_k_avx2,
	.dot4_q6_k = pg_dot4_q6_k_avx2,
	.dot4x2_q5_0 = pg_dot4x2_q5_0_avx2,
	.dot4x2_q5_1 = pg_dot4x2_q5_1_avx2,
	.dot4x2_q2_k = pg_dot4x2_q2_k_avx2,
	.dot4x2_q3_k = pg_dot4x2_q3_k_avx2,
	.dot4x2_q4_k = pg_dot4x2_q4_k_avx2,
	.dot4x2_q5_k = pg_dot4x2_q5_k_avx2,
	.dot4x2_q6_k = pg_dot4x2_q6_k_avx2,
	.gemm8_q5_0 = pg_gemm8_q5_0_avx2,
	.gemm8_q2_k = pg_gemm8_q2_k_avx2,
	.gemm8_q3_k = pg_gemm8_q3_k_avx2,
	.gemm8_q4_k = pg_gemm8_q4_k_avx2,
	.gemm8_q5_k = pg_gemm8_q5_k_avx2,
	.gemm8_q6_k = pg_gemm8_q6_k_avx2,
	.dot_q4_1_llama = pg_dot_q4_1_llama_avx2,
	.dot4_q4_1_llama = pg_dot4_q4_1_llama_avx2,
	.dot4x2_q4_1_llama = pg_dot4x2_q4_1_llama_avx2,
	.gemm8_q4_1_llama = pg_gemm8_q4_1_llama_avx2,
	.gemm8_q4x8_q4_0 = pg_gemm8_q4x8_q4_0_avx2,
	.gemm8_q4x8_q4_1 = pg_gemm8_q4x8_q4_1_avx2,
	.gemm8_q4x8_q5_0 = pg_gemm8_q4x8_q5_0_avx2,
	.gemm8_q8_0 = pg_gemm8_q8_0_avx2,
	.quant_q8_0 = pg_quant_q8_0_avx2,
	.quant_q8_1 = pg_quant_q8_1_avx2,
	.quant_q8_k = pg_quant_q8_k_avx2,
	.axpy_f32 = pg_axpy_f32_avx2,
	.axpy_f16 = pg_axpy_f16_avx2,
	.axpy_bf16 = pg_axpy_bf16_avx2,
	.scale = pg_scale_avx2,
	.sumsq = pg_sumsq_avx2,
	.scale_mul = pg_scale_mul_avx2,
	.attn_scores = pg_attn_scores_avx2,
	.attn_values = pg_attn_values_avx2,
	.attn_scores_rows = pg_attn_scores_rows_avx2,
	.attn_values_rows = pg_attn_values_rows_avx2,
	.exp_sum = pg_exp_sum_avx2,
	.attn_softmax_rows = pg_attn_softmax_rows_avx2,
	.round_kv = pg_round_kv_avx2,
	.fa16_run = pg_fa16_run_avx2,
	.fa16_rows = pg_fa16_rows_avx2,
	.silu_mul = pg_silu_mul_avx2,
	.silu_mul_llama = pg_silu_mul_llama_avx2,
	.add = pg_add_avx2,
	.gelu_mul = pg_gelu_mul_avx2,
};

/* pg_expf_llama for 8 lanes, the same operations lane by lane. */
static inline __m256 expf_llama8(__m256 x)
{
	const __m256 shift = _mm256_set1_ps(0x1.8p23f);
	__m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
	__m256 n = _mm256_sub_ps(z, shift);
	__m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
				    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
	__m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
	__m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e,
				_mm256_castps_si256(_mm256_set1_ps(1.0f))));
	__m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
	__m256 big = _mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
	__m256 u = _mm256_mul_ps(b, b);
	__m256 j = _mm256_fmadd_ps(
		_mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
						_mm256_set1_ps(0x1.573e2ep-5f)), u,
				_mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
						_mm256_set1_ps(0x1.fffdb6p-2f))),
		u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
	__m256 r = _mm256_fmadd_ps(k, j, k), s1, s2, far;
	__m256i g;

	if (!_mm256_movemask_ps(big))
		return r;
	g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
			     _mm256_set1_epi32((int)0x82000000u));
	s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
	s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
	far = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
	r = _mm256_blendv_ps(r, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1), big);
	return _mm256_blendv_ps(r, _mm256_mul_ps(s1, s1), far);
}

void pg_silu_mul_llama_avx2(int64_t n, float *gate, const float *up)
{
	silu_mul_with(n, gate, up, expf_llama8);
}
