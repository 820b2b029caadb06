/*
 * llamacpp.c - the arithmetic where llama.cpp's CPU backend (built for
 * AVX2/FMA/F16C, flash attention on, an F16 KV cache) rounds differently
 * from pagoda's own kernels, for the llama.cpp numerics of forward.h
 * (pg_cpu_backend_llama_numerics).  With them, and the matmuls, RoPE and
 * embedding pagoda already shares with llama.cpp, one device's logits are
 * llama.cpp's bit for bit (tests/test_golden.c).  Scalar references here;
 * attn_avx2.c and vec_avx2.c give the same bits faster.
 *
 * Attention, llama.cpp's "one chunk" flash attention loop (the one it runs
 * for batches of fewer than 64 queries, and on one thread for every
 * decode), per query with its keys in position order:
 *  - q is rounded to F16 (nearest even); a key's score is its F16 dot with
 *    q summed as ggml_vec_dot_f16 sums it: four vectors of 8 fused
 *    multiply-adds over each 32 dims, folded (0 + 2, 1 + 3, then 0 + 1,
 *    then the two 128-bit halves, then (0 + 1) + (2 + 3)), the dims past
 *    the last 32 added in double; then times scale;
 *  - an online softmax with a running maximum m and sum l, libm's expf:
 *    when a key raises the maximum, the weighted V so far is scaled by
 *    expf(old - new) and the key's weight is 1; l = fma(l, scale, weight);
 *  - the weighted V is kept in F16: every update is a fused multiply-add
 *    (or a product) in float rounded back to F16;
 *  - at the end out = V * (1 / l).
 * The F16 accumulator keeps less precision than pagoda's own attention;
 * the point here is only to give llama.cpp's bits.
 *
 * SwiGLU: silu with llama.cpp's vector expf (pg_expf_llama).  RMSNorm: the
 * squares summed in double (pg_sumsq_llama).
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

/* ggml_vec_dot_f16's sum of x . y over hd dims (AVX2 build). */
static float fa16_dot(int hd, const uint16_t *x, const uint16_t *y)
{
	float a[4][8] = { { 0.0f } }, t[4];
	int np = hd & ~31;
	double sum;

	for (int i = 0; i < np; i += 32)
		for (int j = 0; j < 4; j++)
			for (int l = 0; l < 8; l++)
				a[j][l] = fmaf(pg_fp16_to_fp32(x[i + 8 * j + l]),
					       pg_fp16_to_fp32(y[i + 8 * j + l]),
					       a[j][l]);
	for (int l = 0; l < 8; l++) {
		a[0][l] += a[2][l];
		a[1][l] += a[3][l];
	}
	for (int l = 0; l < 8; l++)
		a[0][l] += a[1][l];
	for (int l = 0; l < 4; l++)
		t[l] = a[0][l] + a[0][l + 4];
	sum = (double)((t[0] + t[1]) + (t[2] + t[3]));
	for (int i = np; i < hd; i++)
		sum += (double)(pg_fp16_to_fp32(x[i]) * pg_fp16_to_fp32(y[i]));
	return (float)sum;
}

void pg_fa16_run_ref(int n, int hd, const uint16_t *k, const uint16_t *v,
		     const uint16_t *q16, float scale, float *m, float *l,
		     uint16_t *acc)
{
	for (int j = 0; j < n; j++, k += hd, v += hd) {
		float s = fa16_dot(hd, k, q16) * scale, ms = 1.0f, vs = 1.0f;

		if (s > *m) {
			ms = expf(*m - s);
			*m = s;
			for (int d = 0; d < hd; d++)
				acc[d] = pg_fp32_to_fp16(pg_fp16_to_fp32(acc[d]) * ms);
		} else {
			vs = expf(s - *m);
		}
		for (int d = 0; d < hd; d++)
			acc[d] = pg_fp32_to_fp16(fmaf(pg_fp16_to_fp32(v[d]), vs,
						      pg_fp16_to_fp32(acc[d])));
		*l = fmaf(*l, ms, vs);
	}
}

/*
 * expf as llama.cpp's vector loops compute it (ggml's SIMD expf, after
 * ARM's optimized routines): n = x / ln 2 rounded by the 1.5 * 2^23 shift,
 * b = x - n ln 2 (ln 2 in two parts, fused), 2^n built in the exponent
 * bits, a degree-5 polynomial in b, and scaling in two steps where |n| >
 * 126 (exact 0 or infinity past |n| > 192).  One lane; the AVX2 loop in
 * vec_avx2.c computes the same bits 8 at a time.
 */
float pg_expf_llama(float x)
{
	const float shift = 0x1.8p23f;
	float z = fmaf(x, 0x1.715476p+0f, shift), n = z - shift;
	float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	uint32_t e = pg_f32_bits(z) << 23, g;
	float k = pg_bits_f32(e + pg_f32_bits(1.0f)), u = b * b, j, s1, s2;

	j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
		      fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
		 u, 0x1.ffffecp-1f * b);
	if (!(fabsf(n) > 126.0f))
		return fmaf(k, j, k);
	g = n <= 0.0f ? 0x82000000u : 0u;
	s1 = pg_bits_f32(g + 0x7f000000u);
	s2 = pg_bits_f32(e - g);
	if (fabsf(n) > 192.0f)
		return s1 * s1;
	return fmaf(s2, j, s2) * s1;
}

/*
 * llama.cpp's SwiGLU: each run of 8 values x / (1 + expf_llama(0 - x)) *
 * up, the last n % 8 with libm's expf (pg_silu_mul_ref's formula).
 */
void pg_silu_mul_llama_ref(int64_t n, float *gate, const float *up)
{
	int64_t i = 0, n8 = n - n % 8;

	for (; i < n8; i++) {
		float x = gate[i];

		gate[i] = x / (1.0f + pg_expf_llama(0.0f - x)) * up[i];
	}
	pg_silu_mul_ref(n - i, gate + i, up + i);
}

/* llama.cpp's RMSNorm sum: each square rounded to float, summed in double
 * in order. */
double pg_sumsq_llama(int64_t n, const float *x)
{
	double sum = 0.0;

	for (int64_t i = 0; i < n; i++)
		sum += (double)(x[i] * x[i]);
	return sum;
}
