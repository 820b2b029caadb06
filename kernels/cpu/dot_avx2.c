/*
 * dot_avx2.c - AVX2/FMA/F16C dot products of weight rows with activation
 * rows, and the quantisers of activations to Q8_0 / Q8_1.
 *
 * Quantised dots (Q8_0 weights, and Q4_1 weights in llama.cpp's numerics)
 * stay in integers inside a block (maddubs: u8 x s8 pairs summed to i16,
 * then to i32: 8 sums of 4 products) and scale each of the 8 once per
 * block in float, as llama.cpp's AVX2 kernels do.  Q4_0 and Q4_1 in
 * pagoda's numerics are q4_avx2.c's.  The quantisers round exactly as
 * the reference (quant.c), so their output is bit-identical to it.
 * Compiled with -mavx2 -mfma -mf16c; reached only through the AVX2 table.
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

static inline float h2f(uint16_t h)
{
	return _cvtsh_ss(h);
}

enum float_kind { W_F32, W_F16, W_BF16 };

/* 8 weights from element i of a row of the given kind, as floats. */
static inline __m256 load_w8(enum float_kind k, const void *w, int64_t i)
{
	if (k == W_F16)
		return load_f16x8((const uint16_t *)w + i);
	if (k == W_BF16)
		return load_bf16x8((const uint16_t *)w + i);
	return _mm256_loadu_ps((const float *)w + i);
}

/*
 * w: (n) weights of kind k; x: (n) floats.  Four accumulators over 32
 * values a step, the tail (n % 8) by the scalar reference.  Returns the
 * sum and the index where the tail starts in *tail.
 */
static inline __attribute__((always_inline)) float
dot_float(enum float_kind k, int64_t n, const void *w, const float *b,
	  int64_t *tail)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm256_fmadd_ps(load_w8(k, w, i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(load_w8(k, w, i + 8), _mm256_loadu_ps(b + i + 8), s1);
		s2 = _mm256_fmadd_ps(load_w8(k, w, i + 16), _mm256_loadu_ps(b + i + 16), s2);
		s3 = _mm256_fmadd_ps(load_w8(k, w, i + 24), _mm256_loadu_ps(b + i + 24), s3);
	}
	for (; i + 8 <= n; i += 8)
		s0 = _mm256_fmadd_ps(load_w8(k, w, i), _mm256_loadu_ps(b + i), s0);
	*tail = i;
	return hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

/* w: (n) floats; x: (n) floats */
float pg_dot_f32_avx2(int64_t n, const void *w, const void *x)
{
	const float *a = w, *b = x;
	int64_t i;
	float s = dot_float(W_F32, n, w, b, &i);

	return s + pg_dot_f32_ref(n - i, a + i, b + i);
}

/* w: (n) F16; x: (n) floats */
float pg_dot_f16_avx2(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const float *b = x;
	int64_t i;
	float s = dot_float(W_F16, n, w, b, &i);

	return s + pg_dot_f16_ref(n - i, a + i, b + i);
}

/* w: (n) BF16; x: (n) floats */
float pg_dot_bf16_avx2(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const float *b = x;
	int64_t i;
	float s = dot_float(W_BF16, n, w, b, &i);

	return s + pg_dot_bf16_ref(n - i, a + i, b + i);
}

/*
 * Quantised dots: one block step (qblock_step) serves the one-row dots and
 * the 4-row dots, so a row's result is the same bits whichever loop
 * reached it: a TP rank's slice, or a vocabulary slice, leaves other rows
 * over for the one-row dot than one device does.
 */
enum qkind { K_Q8_0, K_Q4_1 };

static inline size_t wblock_bytes(enum qkind k)
{
	return k == K_Q8_0 ? sizeof(struct pg_block_q8_0) :
	       sizeof(struct pg_block_q4_1);
}

/* An activation block (Q8_1 for Q4_1, else Q8_0): its 32 quants, and its
 * (d, s) as a pair for Q8_1, its d otherwise. */
struct xblock {
	__m256i q;
	__m128 ds;
	float d;
};

static inline __attribute__((always_inline)) struct xblock
x_block(enum qkind k, const void *x, int64_t i)
{
	struct xblock b;

	if (k == K_Q4_1) {
		const struct pg_block_q8_1 *xb = (const struct pg_block_q8_1 *)x + i;

		b.q = _mm256_loadu_si256((const void *)xb->qs);
		b.ds = load_f16x2(&xb->d);
		b.d = 0.0f;
	} else {
		const struct pg_block_q8_0 *xb = (const struct pg_block_q8_0 *)x + i;

		b.q = _mm256_loadu_si256((const void *)xb->qs);
		b.ds = _mm_setzero_ps();
		b.d = h2f(xb->d);
	}
	return b;
}

/*
 * One weight block a against activation block x: acc += (d_a d_x) x the
 * 8 int32 sums of 4 products each; Q4_1 also *ms += (d_a d_x, m_a s_x),
 * whose second lane collects the minimum terms.
 */
static inline __attribute__((always_inline)) __m256
qblock_step(enum qkind k, const uint8_t *a, const struct xblock *x,
	    __m256 acc, __m128 *ms)
{
	if (k == K_Q4_1) {
		const struct pg_block_q4_1 *wq = (const void *)a;
		__m128 f = _mm_mul_ps(load_f16x2(&wq->d), x->ds);
		__m256i q = dot_u8s8(unpack_nibbles(wq->qs), x->q);

		*ms = _mm_add_ps(*ms, f);
		return _mm256_fmadd_ps(_mm256_broadcastss_ps(f),
				       _mm256_cvtepi32_ps(q), acc);
	}
	const struct pg_block_q8_0 *wq = (const void *)a;
	__m256i q = dot_s8s8(_mm256_loadu_si256((const void *)wq->qs), x->q);

	return _mm256_fmadd_ps(_mm256_set1_ps(h2f(wq->d) * x->d),
			       _mm256_cvtepi32_ps(q), acc);
}

/* One row: w (n / 32 blocks of kind k) . x. */
static inline __attribute__((always_inline)) float
dot1(enum qkind k, int64_t n, const void *w, const void *x)
{
	__m256 acc = _mm256_setzero_ps();
	__m128 ms = _mm_setzero_ps();
	float v;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		struct xblock xb = x_block(k, x, i);

		acc = qblock_step(k, (const uint8_t *)w + (size_t)i * wblock_bytes(k),
				  &xb, acc, &ms);
	}
	v = hsum256(acc);
	if (k == K_Q4_1)
		v += _mm_cvtss_f32(_mm_movehdup_ps(ms));
	return v;
}

/* w: (n / 32) Q8_0; x: (n / 32) Q8_0 */
float pg_dot_q8_0_avx2(int64_t n, const void *w, const void *x)
{
	return dot1(K_Q8_0, n, w, x);
}

/*
 * w: (n / 32) Q4_1; x: (n / 32) Q8_1, in llama.cpp's order (the top of
 * the file); minimum terms summed on the side.  Pagoda's own numerics
 * take q4_avx2.c's.
 */
float pg_dot_q4_1_llama_avx2(int64_t n, const void *w, const void *x)
{
	return dot1(K_Q4_1, n, w, x);
}

/*
 * The 4-row dots: block i of the activations against block i of rows w,
 * w + stride, w + 2 stride, w + 3 stride, part by part (struct pg_cuts);
 * the accumulators are named variables, not an array, so that they stay
 * in registers from one part to the next.
 */
static inline __attribute__((always_inline)) void
dot4(enum qkind k, int64_t n, const void *w, size_t stride, const void *x,
     float *out, const struct pg_cuts *cuts)
{
	size_t wb = wblock_bytes(k);
	const uint8_t *wp = w;
	__m128 run = _mm_setzero_ps(), v;
	int64_t i = 0;

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m128 m0 = _mm_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;

		for (int64_t end = cuts ? cuts->end[p] : n / PG_QK; i < end; i++) {
			const uint8_t *wr = wp + (size_t)i * wb;
			struct xblock xb = x_block(k, x, i);

			prefetch_group(w, stride, i, wb);
			a0 = qblock_step(k, wr, &xb, a0, &m0);
			a1 = qblock_step(k, wr + stride, &xb, a1, &m1);
			a2 = qblock_step(k, wr + 2 * stride, &xb, a2, &m2);
			a3 = qblock_step(k, wr + 3 * stride, &xb, a3, &m3);
		}
		v = hsum256x4(a0, a1, a2, a3);
		if (k == K_Q4_1)	/* the minimum terms */
			v = _mm_add_ps(v, lane1x4(m0, m1, m2, m3));
		if (!pg_cuts_summed(cuts))
			_mm_storeu_ps(pg_cuts_out(cuts, p, out), v);
		else	/* the earlier parts, then this */
			run = p ? _mm_add_ps(run, v) : v;
	}
	if (pg_cuts_summed(cuts))
		_mm_storeu_ps(out, run);
}

void pg_dot4_q8_0_avx2(int64_t n, const void *w, size_t stride,
		       const void *x, float *out, const struct pg_cuts *cuts)
{
	dot4(K_Q8_0, n, w, stride, x, out, cuts);
}

/* Q4_1 in llama.cpp's order (llama.cpp numerics). */
void pg_dot4_q4_1_llama_avx2(int64_t n, const void *w, size_t stride,
		       const void *x, float *out, const struct pg_cuts *cuts)
{
	dot4(K_Q4_1, n, w, stride, x, out, cuts);
}

/*
 * Quantise one block of 32 floats to 8 bits with the reference's d and
 * rounding; store the 32 q at qs, return d and sum(q) in *d, *sum.
 */
static inline void quant_block_q8(const float *x, int8_t *qs, float *d,
				  int *sum)
{
	__m256 sign = _mm256_set1_ps(-0.0f);
	__m256 v[4], amax;
	__m256i q[4];

	for (int k = 0; k < 4; k++)
		v[k] = _mm256_loadu_ps(x + 8 * k);
	amax = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]),
					   _mm256_andnot_ps(sign, v[1])),
			     _mm256_max_ps(_mm256_andnot_ps(sign, v[2]),
					   _mm256_andnot_ps(sign, v[3])));
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(amax),
			      _mm256_extractf128_ps(amax, 1));

	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	/* llama.cpp's activation rounding: x * (127 / amax), half to even */
	*d = _mm_cvtss_f32(m) / 127.0f;
	__m256 id = _mm256_set1_ps(*d != 0.0f ? 127.0f / _mm_cvtss_f32(m) : 0.0f);

	for (int k = 0; k < 4; k++)
		q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
	*sum = hsum256_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
					    _mm256_add_epi32(q[2], q[3])));
	__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
				       _mm256_packs_epi32(q[2], q[3]));

	p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((void *)qs, p);
}

/* x: (n) floats; dst: (n / 32) Q8_0 */
void pg_quant_q8_0_avx2(const float *x, void *dst, int64_t n)
{
	struct pg_block_q8_0 *b = dst;
	float d;
	int sum;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		quant_block_q8(x + i * PG_QK, b[i].qs, &d, &sum);
		b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
	}
}

/* x: (n) floats; dst: (n / 32) Q8_1 */
void pg_quant_q8_1_avx2(const float *x, void *dst, int64_t n)
{
	struct pg_block_q8_1 *b = dst;
	float d;
	int sum;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		quant_block_q8(x + i * PG_QK, b[i].qs, &d, &sum);
		b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
		b[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
	}
}

/*
 * Q8_0 weights x many tokens (matmul's gemm8 loop for Q8_0, from 6
 * tokens): each weight block is loaded, and its absolute value taken,
 * once for up to 8 tokens, and the d_w d_x of the 8 come from one
 * multiply; each token's lanes then take qblock_step's very integers,
 * scale and fma, in the same order, and hsum256x4 gives hsum256's bits,
 * so every output is the one-token dot's (dot1, dot4), bit for bit.
 *
 * xp: the tokens as pg_gemm_prep_q8_0 lays them out (cpu_impl.h): for
 * each group of 8 tokens (the last one: the rest), for each block, the
 * group's d as floats, then its tokens' 32 quants one after another.
 */
#define Q8G 8	/* tokens a group */

/* A token's sum of each of the 8 accumulators, into out (tokens os
 * floats apart), or added to run[t] for a summed part. */
static inline __attribute__((always_inline)) void
q8g_put(const struct pg_cuts *cuts, int p, float *out, size_t os, int nt,
	const __m256 acc[Q8G], float run[Q8G])
{
	float v[Q8G] __attribute__((aligned(16)));
	__m256 z = _mm256_setzero_ps();

	_mm_store_ps(v, hsum256x4(acc[0], nt > 1 ? acc[1] : z,
				  nt > 2 ? acc[2] : z, nt > 3 ? acc[3] : z));
	if (nt > 4)
		_mm_store_ps(v + 4, hsum256x4(acc[4], nt > 5 ? acc[5] : z,
					      nt > 6 ? acc[6] : z,
					      nt > 7 ? acc[7] : z));
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++) {
		if (!pg_cuts_summed(cuts))
			pg_cuts_out(cuts, p, out)[(size_t)t * os] = v[t];
		else	/* the earlier parts, then this: dot4's order */
			run[t] = p ? run[t] + v[t] : v[t];
	}
}

/* One row (w) against the nt tokens of a group (xg: its block 0). */
static inline __attribute__((always_inline)) void
q8g_row(int nt, int64_t nb, const uint8_t *w, const uint8_t *xg,
	float *out, size_t os, const struct pg_cuts *cuts)
{
	size_t xb_bytes = (size_t)nt * (sizeof(float) + PG_QK);
	int np = cuts ? cuts->n : 1;
	float run[Q8G] = { 0 };
	int64_t i = 0;

	for (int p = 0; p < np; p++) {
		int64_t end = cuts ? cuts->end[p] : nb;
		__m256 acc[Q8G];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			acc[t] = _mm256_setzero_ps();
		for (; i < end; i++) {
			const struct pg_block_q8_0 *wb =
				(const struct pg_block_q8_0 *)w + i;
			const uint8_t *xb = xg + (size_t)i * xb_bytes;
			__m256i wq = _mm256_loadu_si256((const void *)wb->qs);
			__m256i aw = _mm256_sign_epi8(wq, wq);
			/* lanes past nt: the group's quants, unused */
			__m256 sc = _mm256_mul_ps(_mm256_set1_ps(h2f(wb->d)),
						  _mm256_loadu_ps((const float *)xb));
			float f[Q8G] __attribute__((aligned(32)));

			_mm256_store_ps(f, sc);
#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				__m256i xq = _mm256_loadu_si256((const void *)(
					xb + (size_t)nt * sizeof(float) +
					(size_t)t * PG_QK));
				__m256i q = dot_u8s8(aw, _mm256_sign_epi8(xq, wq));

				acc[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&f[t]),
							 _mm256_cvtepi32_ps(q), acc[t]);
			}
		}
		q8g_put(cuts, p, out, os, nt, acc, run);
	}
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			out[(size_t)t * os] = run[t];
}

/* The 8 rows against a group of nt tokens. */
static inline __attribute__((always_inline)) void
q8g_rows(int nt, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *xg,
	 float *out, size_t os, const struct pg_cuts *cuts)
{
	for (int r = 0; r < 8; r++)
		q8g_row(nt, nb, w + (size_t)r * ws, xg, out + r, os, cuts);
}

/* work unused: the rows are read as they are, from L1 for every group */
void pg_gemm8_q8_0_avx2(int64_t n, const void *w, size_t ws, const void *xp,
			int n_tok, float *out, size_t os, void *work,
			const struct pg_cuts *cuts)
{
	int64_t nb = n / PG_QK;
	size_t gb = (size_t)nb * Q8G * (sizeof(float) + PG_QK);

	(void)work;
	for (int t0 = 0; t0 < n_tok; t0 += Q8G) {
		const uint8_t *xg = (const uint8_t *)xp + (size_t)(t0 / Q8G) * gb;
		float *o = out + (size_t)t0 * os;

		switch (n_tok - t0 < Q8G ? n_tok - t0 : Q8G) {
		case 8: q8g_rows(8, nb, w, ws, xg, o, os, cuts); break;
		case 7: q8g_rows(7, nb, w, ws, xg, o, os, cuts); break;
		case 6: q8g_rows(6, nb, w, ws, xg, o, os, cuts); break;
		case 5: q8g_rows(5, nb, w, ws, xg, o, os, cuts); break;
		case 4: q8g_rows(4, nb, w, ws, xg, o, os, cuts); break;
		case 3: q8g_rows(3, nb, w, ws, xg, o, os, cuts); break;
		case 2: q8g_rows(2, nb, w, ws, xg, o, os, cuts); break;
		default: q8g_rows(1, nb, w, ws, xg, o, os, cuts); break;
		}
	}
}
