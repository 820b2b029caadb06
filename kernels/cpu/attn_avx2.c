/*
 * attn_avx2.c - AVX2 inner loops of attention: scores of a run of keys
 * against one query, the exponentials of a softmax run, and the weighted
 * sum of a run of V rows, for F32, F16 and BF16 pages.
 *
 * Also llamacpp.c's llama.cpp attention loop (pg_fa16_run_avx2), and the
 * multi-row forms of these for attention.c's tiles (the same bits per row).
 *
 * Scores are taken 8 keys at a time and reduced together; V rows are summed
 * into 64-dim slices of the accumulator held in registers across the run.
 * head_dim must be a multiple of 8 here (else the reference loops run).
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

/* 8 values of KV type t at p (element index i) as floats. */
static inline __m256 load8(enum pg_dtype t, const void *p, size_t i)
{
	if (t == PG_F16)
		return load_f16x8((const uint16_t *)p + i);
	if (t == PG_BF16)
		return load_bf16x8((const uint16_t *)p + i);
	return _mm256_loadu_ps((const float *)p + i);
}

/* Lane j of the result: the sum of the 8 lanes of a[j]. */
static inline __m256 hsum8x8(const __m256 a[8])
{
	__m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]),
				   _mm256_hadd_ps(a[2], a[3]));
	__m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]),
				   _mm256_hadd_ps(a[6], a[7]));

	return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
			     _mm256_permute2f128_ps(h0, h1, 0x31));
}

/* s[0..7] = keys k0 .. k0 + 7 . q; k: rows of hd elements of type t. */
static inline __attribute__((always_inline)) void
scores8(enum pg_dtype t, int hd, const void *k, size_t k0, const float *q,
	float *s)
{
	__m256 a[8];

	for (int j = 0; j < 8; j++)
		a[j] = _mm256_setzero_ps();
	for (int d = 0; d < hd; d += 8) {
		__m256 qv = _mm256_loadu_ps(q + d);

#pragma GCC unroll 8
		for (int j = 0; j < 8; j++)
			a[j] = _mm256_fmadd_ps(load8(t, k, (k0 + (size_t)j) * (size_t)hd + (size_t)d),
					       qv, a[j]);
	}
	_mm256_storeu_ps(s, hsum8x8(a));
}

static inline __attribute__((always_inline)) void
scores(enum pg_dtype t, int n, int hd, const void *k, const float *q, float *s)
{
	int j = 0;

	for (; j + 8 <= n; j += 8)
		scores8(t, hd, k, (size_t)j, q, s + j);
	for (; j < n; j++) {
		__m256 a = _mm256_setzero_ps();

		for (int d = 0; d < hd; d += 8)
			a = _mm256_fmadd_ps(load8(t, k, (size_t)j * (size_t)hd + (size_t)d),
					    _mm256_loadu_ps(q + d), a);
		s[j] = hsum256(a);
	}
}

void pg_attn_scores_avx2(enum pg_dtype t, int n, int hd, const void *k,
			 const float *q, float *s)
{
	if (hd % 8)
		pg_attn_scores_ref(t, n, hd, k, q, s);
	else if (t == PG_F16)
		scores(PG_F16, n, hd, k, q, s);
	else if (t == PG_BF16)
		scores(PG_BF16, n, hd, k, q, s);
	else
		scores(PG_F32, n, hd, k, q, s);
}

/* acc[d0 .. d0 + 63] += sum of p[j] v_j[d0 ..], the slice in registers. */
static inline __attribute__((always_inline)) void
values64(enum pg_dtype t, int n, int hd, int d0, const float *p,
	 const void *v, float *acc)
{
	__m256 a[8];

	for (int r = 0; r < 8; r++)
		a[r] = _mm256_loadu_ps(acc + d0 + 8 * r);
	for (int j = 0; j < n; j++) {
		__m256 pj = _mm256_broadcast_ss(&p[j]);
		size_t base = (size_t)j * (size_t)hd + (size_t)d0;

#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			a[r] = _mm256_fmadd_ps(pj, load8(t, v, base + 8 * (size_t)r), a[r]);
	}
	for (int r = 0; r < 8; r++)
		_mm256_storeu_ps(acc + d0 + 8 * r, a[r]);
}

/* The same for a slice of 8 values (what is left after 64-wide slices). */
static inline __attribute__((always_inline)) void
values8(enum pg_dtype t, int n, int hd, int d0, const float *p,
	const void *v, float *acc)
{
	__m256 a = _mm256_loadu_ps(acc + d0);

	for (int j = 0; j < n; j++)
		a = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[j]),
				    load8(t, v, (size_t)j * (size_t)hd + (size_t)d0), a);
	_mm256_storeu_ps(acc + d0, a);
}

static inline __attribute__((always_inline)) void
values(enum pg_dtype t, int n, int hd, const float *p, const void *v,
       float *acc)
{
	int d = 0;

	for (; d + 64 <= hd; d += 64)
		values64(t, n, hd, d, p, v, acc);
	for (; d < hd; d += 8)
		values8(t, n, hd, d, p, v, acc);
}

void pg_attn_values_avx2(enum pg_dtype t, int n, int hd, const float *p,
			 const void *v, float *acc)
{
	if (hd % 8)
		pg_attn_values_ref(t, n, hd, p, v, acc);
	else if (t == PG_F16)
		values(PG_F16, n, hd, p, v, acc);
	else if (t == PG_BF16)
		values(PG_BF16, n, hd, p, v, acc);
	else
		values(PG_F32, n, hd, p, v, acc);
}

static inline __attribute__((always_inline)) float
exp_sum(int n, float *s, float max)
{
	__m256 vm = _mm256_set1_ps(max), sum = _mm256_setzero_ps();
	int j = 0;

	for (; j + 8 <= n; j += 8) {
		__m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));

		_mm256_storeu_ps(s + j, e);
		sum = _mm256_add_ps(sum, e);
	}
	return hsum256(sum) + pg_exp_sum_ref(n - j, s + j, max);
}

float pg_exp_sum_avx2(int n, float *s, float max)
{
	return exp_sum(n, s, max);
}

/*
 * The n scores at s times scale, and their maximum with m: vectors of 8
 * scaled and compared lane by lane (a NaN score is passed over as the
 * scalar `s > mx ? s : mx` passes it), the rest one by one.  Equal
 * values are the same bits whichever wins, but for zeros: a zero
 * maximum is taken again in the scalar order, so that its sign is the
 * one attention.c's loop finds.
 */
static inline __attribute__((always_inline)) float
scale_max(int n, float *s, float scale, float m)
{
	__m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(m);
	float mx;
	int j = 0;

	for (; j + 8 <= n; j += 8) {
		__m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);

		_mm256_storeu_ps(s + j, x);
		vm = _mm256_max_ps(x, vm);	/* x NaN or equal: vm */
	}
	{
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(vm),
				      _mm256_extractf128_ps(vm, 1));

		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		mx = _mm_cvtss_f32(h);
	}
	for (; j < n; j++) {
		s[j] *= scale;
		mx = s[j] > mx ? s[j] : mx;
	}
	if (mx == 0.0f) {
		mx = m;
		for (j = 0; j < n; j++)
			mx = s[j] > mx ? s[j] : mx;
	}
	return mx;
}

void pg_attn_softmax_rows_avx2(int nr, int n, int hd, float scale,
			       float *const *s, struct pg_attn_state *const *st)
{
	for (int r = 0; r < nr; r++) {
		struct pg_attn_state *a = st[r];
		float mx = scale_max(n, s[r], scale, a->m);

		if (mx > a->m) {
			float f = expf(a->m - mx);	/* 0 on the first run */

			pg_scale_avx2(hd, f, a->acc);
			a->l *= f;
			a->m = mx;
		}
		a->l += exp_sum(n, s[r], mx);
	}
}

/* F16 through F16C (round to nearest even, as pg_fp32_to_fp16 rounds
 * finite values); BF16 by the reference. */
void pg_round_kv_avx2(enum pg_dtype t, int n, const float *x, float *out)
{
	int i = 0;

	if (t == PG_F16)
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(
				_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
	pg_round_kv_ref(t, n - i, x + i, out + i);
}

/* llamacpp.c's score: ggml_vec_dot_f16's order, in its registers. */
static inline float fa16_dot8(int hd, const uint16_t *x, const uint16_t *y)
{
	__m256 a[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(),
			_mm256_setzero_ps(), _mm256_setzero_ps() };
	int np = hd & ~31;
	__m128 t0, t1;
	double sum;

	for (int i = 0; i < np; i += 32)
		for (int j = 0; j < 4; j++)
			a[j] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * j),
					       load_f16x8(y + i + 8 * j), a[j]);
	a[0] = _mm256_add_ps(a[0], a[2]);
	a[1] = _mm256_add_ps(a[1], a[3]);
	a[0] = _mm256_add_ps(a[0], a[1]);
	t0 = _mm_add_ps(_mm256_castps256_ps128(a[0]),
			_mm256_extractf128_ps(a[0], 1));
	t1 = _mm_hadd_ps(t0, t0);
	sum = (double)_mm_cvtss_f32(_mm_hadd_ps(t1, t1));
	for (int i = np; i < hd; i++)
		sum += (double)(pg_fp16_to_fp32(x[i]) * pg_fp16_to_fp32(y[i]));
	return (float)sum;
}

/* pg_fa16_run_ref's bits; head_dim a multiple of 8 (else the reference). */
void pg_fa16_run_avx2(int n, int hd, const uint16_t *k, const uint16_t *v,
		      const uint16_t *q16, float scale, float *m, float *l,
		      uint16_t *acc)
{
	if (hd % 8) {
		pg_fa16_run_ref(n, hd, k, v, q16, scale, m, l, acc);
		return;
	}
	for (int j = 0; j < n; j++, k += hd, v += hd) {
		float s = fa16_dot8(hd, k, q16) * scale, ms = 1.0f, vs = 1.0f;
		__m256 w;

		if (s > *m) {
			ms = expf(*m - s);
			*m = s;
			w = _mm256_set1_ps(ms);
			for (int d = 0; d < hd; d += 8)
				store_f16x8(acc + d, _mm256_mul_ps(load_f16x8(acc + d), w));
		} else {
			vs = expf(s - *m);
		}
		w = _mm256_set1_ps(vs);
		for (int d = 0; d < hd; d += 8)
			store_f16x8(acc + d, _mm256_fmadd_ps(load_f16x8(v + d), w,
							     load_f16x8(acc + d)));
		*l = fmaf(*l, ms, vs);
	}
}

/*
 * Many rows at once (attention.c's tiles): R <= 3 query rows against 4
 * keys in 12 registers, each key's 8 values converted once for the R rows.
 * Each (row, key) sum is the one scores() makes: 8 lanes over d, fused,
 * in order; then reduced as scores8 reduces it for the keys before the
 * run's last n % 8 (pairs: lanes 0 + 1, 2 + 3, those two, and the same for
 * 4 .. 7, then lo + hi) and as hsum256 for those last ones.
 */
static inline __attribute__((always_inline)) void
dots_r4(enum pg_dtype t, int R, int hd, const void *k, size_t k0,
	const float *const *q, __m256 a[3][4])
{
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			a[r][j] = _mm256_setzero_ps();
	for (int d = 0; d < hd; d += 8)
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m256 kv = load8(t, k, (k0 + (size_t)j) * (size_t)hd + (size_t)d);

#pragma GCC unroll 3
			for (int r = 0; r < R; r++)
				a[r][j] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[r] + d),
							  a[r][j]);
		}
}

/* hsum8x8's sums of four vectors (lane j: a[j]'s), as 4 floats. */
static inline __m128 hsum4_pairs(const __m256 a[4])
{
	__m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]),
				  _mm256_hadd_ps(a[2], a[3]));

	return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

static inline __attribute__((always_inline)) void
scores_block(enum pg_dtype t, int R, int n, int hd, const void *k,
	     const float *const *q, float *const *s)
{
	int n8 = n & ~7, j = 0;
	__m256 a[3][4];

	for (; j < n8; j += 4) {
		dots_r4(t, R, hd, k, (size_t)j, q, a);
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			_mm_storeu_ps(s[r] + j, hsum4_pairs(a[r]));
	}
	for (; j + 4 <= n; j += 4) {
		dots_r4(t, R, hd, k, (size_t)j, q, a);
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			_mm_storeu_ps(s[r] + j, hsum256x4(a[r][0], a[r][1],
							  a[r][2], a[r][3]));
	}
	for (; j < n; j++) {
		__m256 b[3];

		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			b[r] = _mm256_setzero_ps();
		for (int d = 0; d < hd; d += 8) {
			__m256 kv = load8(t, k, (size_t)j * (size_t)hd + (size_t)d);

			#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				b[r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[r] + d), b[r]);
		}
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			s[r][j] = hsum256(b[r]);
	}
}

static inline __attribute__((always_inline)) void
scores_rows(enum pg_dtype t, int nr, int n, int hd, const void *k,
	    const float *const *q, float *const *s)
{
	int r = 0;

	for (; r + 3 <= nr; r += 3)
		scores_block(t, 3, n, hd, k, q + r, s + r);
	if (nr - r == 2)
		scores_block(t, 2, n, hd, k, q + r, s + r);
	else if (nr - r == 1)
		scores_block(t, 1, n, hd, k, q + r, s + r);
}

void pg_attn_scores_rows_avx2(enum pg_dtype t, int nr, int n, int hd,
			      const void *k, const float *const *q,
			      float *const *s)
{
	if (hd % 8)
		for (int r = 0; r < nr; r++)
			pg_attn_scores_ref(t, n, hd, k, q[r], s[r]);
	else if (t == PG_F16)
		scores_rows(PG_F16, nr, n, hd, k, q, s);
	else if (t == PG_BF16)
		scores_rows(PG_BF16, nr, n, hd, k, q, s);
	else
		scores_rows(PG_F32, nr, n, hd, k, q, s);
}

/*
 * acc[r][d0 .. d0 + 8W - 1] += sum of p[r][j] v_j[d0 ..] for R <= 3 rows,
 * each V vector converted once for the R rows; every value the same fused
 * multiply-adds in the same order as values() (each one is alone).
 */
static inline __attribute__((always_inline)) void
values_block(enum pg_dtype t, int R, int W, int n, int hd, int d0,
	     const float *const *p, const void *v, float *const *acc)
{
	__m256 a[3][4];

	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		#pragma GCC unroll 4
		for (int w = 0; w < W; w++)
			a[r][w] = _mm256_loadu_ps(acc[r] + d0 + 8 * w);
	for (int j = 0; j < n; j++) {
		size_t base = (size_t)j * (size_t)hd + (size_t)d0;
		__m256 pb[3];

		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			pb[r] = _mm256_broadcast_ss(&p[r][j]);
#pragma GCC unroll 4
		for (int w = 0; w < W; w++) {
			__m256 vv = load8(t, v, base + 8 * (size_t)w);

			#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				a[r][w] = _mm256_fmadd_ps(pb[r], vv, a[r][w]);
		}
	}
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		#pragma GCC unroll 4
		for (int w = 0; w < W; w++)
			_mm256_storeu_ps(acc[r] + d0 + 8 * w, a[r][w]);
}

static inline __attribute__((always_inline)) void
values_rows_r(enum pg_dtype t, int R, int n, int hd, const float *const *p,
	      const void *v, float *const *acc)
{
	int d = 0;

	for (; d + 32 <= hd; d += 32)
		values_block(t, R, 4, n, hd, d, p, v, acc);
	for (; d < hd; d += 8)
		values_block(t, R, 1, n, hd, d, p, v, acc);
}

static inline __attribute__((always_inline)) void
values_rows(enum pg_dtype t, int nr, int n, int hd, const float *const *p,
	    const void *v, float *const *acc)
{
	int r = 0;

	for (; r + 3 <= nr; r += 3)
		values_rows_r(t, 3, n, hd, p + r, v, acc + r);
	if (nr - r == 2)
		values_rows_r(t, 2, n, hd, p + r, v, acc + r);
	else if (nr - r == 1)
		values_rows_r(t, 1, n, hd, p + r, v, acc + r);
}

void pg_attn_values_rows_avx2(enum pg_dtype t, int nr, int n, int hd,
			      const float *const *p, const void *v,
			      float *const *acc)
{
	if (hd % 8)
		for (int r = 0; r < nr; r++)
			pg_attn_values_ref(t, n, hd, p[r], v, acc[r]);
	else if (t == PG_F16)
		values_rows(PG_F16, nr, n, hd, p, v, acc);
	else if (t == PG_BF16)
		values_rows(PG_BF16, nr, n, hd, p, v, acc);
	else
		values_rows(PG_F32, nr, n, hd, p, v, acc);
}

#define FA16_MAX_ROWS 32

/*
 * pg_fa16_run_avx2 for nr rows over the same keys: key by key, each row's
 * score, maximum and V update exactly as there (the same operations in
 * the same order per row), each value row converted once for all rows.
 */
void pg_fa16_rows_avx2(int nr, int n, int hd, const uint16_t *k,
		       const uint16_t *v, const uint16_t *const *q16,
		       float scale, float *const *m, float *const *l,
		       uint16_t *const *acc)
{
	float ms[FA16_MAX_ROWS], vs[FA16_MAX_ROWS];

	if (hd % 8 || nr > FA16_MAX_ROWS) {
		for (int r = 0; r < nr; r++)
			pg_fa16_run_avx2(n, hd, k, v, q16[r], scale, m[r], l[r],
					 acc[r]);
		return;
	}
	for (int j = 0; j < n; j++, k += hd, v += hd) {
		for (int r = 0; r < nr; r++) {
			float s = fa16_dot8(hd, k, q16[r]) * scale;

			ms[r] = 1.0f;
			vs[r] = 1.0f;
			if (s > *m[r]) {
				__m256 w;

				ms[r] = expf(*m[r] - s);
				*m[r] = s;
				w = _mm256_set1_ps(ms[r]);
				for (int d = 0; d < hd; d += 8)
					store_f16x8(acc[r] + d,
						    _mm256_mul_ps(load_f16x8(acc[r] + d), w));
			} else {
				vs[r] = expf(s - *m[r]);
			}
		}
		for (int d = 0; d < hd; d += 8) {
			__m256 vv = load_f16x8(v + d);

			for (int r = 0; r < nr; r++)
				store_f16x8(acc[r] + d,
					    _mm256_fmadd_ps(vv, _mm256_set1_ps(vs[r]),
							    load_f16x8(acc[r] + d)));
		}
		for (int r = 0; r < nr; r++)
			*l[r] = fmaf(*l[r], ms[r], vs[r]);
	}
}
