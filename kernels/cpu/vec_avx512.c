/*
 * vec_avx512.c - the AVX-512 table: float-weight dots (F32, F16, BF16) and
 * the F16/BF16 axpy of attention widened to 512 bits; everything else is
 * the AVX2 loops: the table is made as a copy of the AVX2 table with those
 * entries replaced, so a loop added to the AVX2 table is on AVX-512 hosts
 * too.
 *
 * Why so little: decode is bound by memory bandwidth, and on the target
 * (Zen 4) a 512-bit op is issued as two 256-bit halves, so widening the
 * integer dots of the quantised types buys nothing without VNNI, which
 * this library's build flags do not enable.  Compiled with -mavx512f/bw/
 * vl/dq; reached only when pg_cpu_isa_best() sees those flags.
 */
#include <pthread.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

static inline __m512 load_f16x16(const uint16_t *p)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const void *)p));
}

static inline __m512 load_bf16x16(const uint16_t *p)
{
	__m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p));

	return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* w: (n) floats; x: (n) floats */
static float dot_f32_avx512(int64_t n, const void *w, const void *x)
{
	const float *a = w, *b = x;
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) +
	       pg_dot_f32_avx2(n - i, a + i, b + i);
}

/* w: (n) F16; x: (n) floats */
static float dot_f16_avx512(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const float *b = x;
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(load_f16x16(a + i), _mm512_loadu_ps(b + i), s0);
		s1 = _mm512_fmadd_ps(load_f16x16(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) +
	       pg_dot_f16_avx2(n - i, a + i, b + i);
}

/* w: (n) BF16; x: (n) floats */
static float dot_bf16_avx512(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w;
	const float *b = x;
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(load_bf16x16(a + i), _mm512_loadu_ps(b + i), s0);
		s1 = _mm512_fmadd_ps(load_bf16x16(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) +
	       pg_dot_bf16_avx2(n - i, a + i, b + i);
}

/* v: (n) F16; acc: (n) */
static void axpy_f16_avx512(int n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;
	__m512 va = _mm512_set1_ps(a);
	int i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(acc + i, _mm512_fmadd_ps(va, load_f16x16(x + i),
							  _mm512_loadu_ps(acc + i)));
	pg_axpy_f16_avx2(n - i, a, x + i, acc + i);
}

/* v: (n) BF16; acc: (n) */
static void axpy_bf16_avx512(int n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;
	__m512 va = _mm512_set1_ps(a);
	int i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(acc + i, _mm512_fmadd_ps(va, load_bf16x16(x + i),
							  _mm512_loadu_ps(acc + i)));
	pg_axpy_bf16_avx2(n - i, a, x + i, acc + i);
}

static struct pg_cpu_kernels avx512;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

/* The AVX2 table, then the entries this file widens. */
static void avx512_make(void)
{
	avx512 = pg_cpu_kernels_avx2;
	avx512.isa = PG_ISA_AVX512;
	avx512.dot_f32 = dot_f32_avx512;
	avx512.dot_f16 = dot_f16_avx512;
	avx512.dot_bf16 = dot_bf16_avx512;
	avx512.axpy_f16 = axpy_f16_avx512;
	avx512.axpy_bf16 = axpy_bf16_avx512;
}

const struct pg_cpu_kernels *pg_cpu_kernels_avx512(void)
{
	pthread_once(&avx512_once, avx512_make);
	return &avx512;
}
