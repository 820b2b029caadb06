/*
 * kq_avx2.c - AVX2 dots of Q5_0, Q5_1 and the K-quants (Q2_K .. Q6_K)
 * with 8-bit activations (Q8_0, Q8_1, Q8_K), one row at a time, in
 * pagoda's numerics: bit for bit what the references in dot.c give.
 *
 * The references sum every block's (super-block's) products of quants
 * exactly in int32, so any order of the integer adds gives the same
 * integer; these loops get it with maddubs (unsigned weight quants times
 * signed activations, pairs summed in int16: |.| <= 2 x 63 x 128 = 16128
 * for the widest, Q6_K's 6 bits, so nothing saturates) and madd by the
 * sub-block scales into int32, and subtract the offsets of the signed
 * types (Q5_0's 16, Q3_K's 4, Q6_K's 32) as offset x the activations'
 * sums (maddubs of the offset for Q5_0; Q8_K's bsums for the K-quants).
 * The floats then go exactly as in the reference, one block after
 * another: acc = fma(d_w d_x, (float)sum, acc), the mins' ms likewise.
 *
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include <math.h>

#include "cpu_impl.h"
#include "simd_avx2.h"

/* The 32 bits of qh as 32 bytes: 0x10 where the bit is set, else 0. */
static inline __m256i q5_high(const uint8_t *qh8)
{
	uint32_t qh;
	__m256i v, bits;
	const __m256i shuf = _mm256_setr_epi8(
		0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
		2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);

	memcpy(&qh, qh8, sizeof(qh));
	v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
	bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
	return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* A Q5 block's 32 unsigned quants in value order. */
static inline __m256i q5_quants(const uint8_t *qs, const uint8_t *qh)
{
	__m128i q = _mm_loadu_si128((const __m128i *)qs);
	__m128i m = _mm_set1_epi8(0x0f);
	__m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
				     _mm_and_si128(q, m));

	return _mm256_or_si256(v, q5_high(qh));
}

/* The int32 sum of the 16 int16 at p. */
static inline int hsum_i16(__m256i p)
{
	return hsum256_i32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* The 8 int32 sums of 8 vectors of 8 int32: lane b = the sum of v[b]. */
static inline __m256i hsum8_i32(const __m256i v[8])
{
	__m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
	__m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
	__m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
	__m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
	__m256i h03 = _mm256_hadd_epi32(h01, h23);	/* per 128-bit half */
	__m256i h47 = _mm256_hadd_epi32(h45, h67);

	return _mm256_add_epi32(_mm256_permute2x128_si256(h03, h47, 0x20),
				_mm256_permute2x128_si256(h03, h47, 0x31));
}

/*
 * Q5_0: 8 blocks' integer sums at once (one horizontal reduction for all
 * eight), then their 8 fused multiply-adds in block order, as the
 * reference does them one by one.
 */
float pg_dot_q5_0_avx2(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q5_0 *a = w;
	const struct pg_block_q8_0 *b = x;
	const __m256i sixteen = _mm256_set1_epi8(16);
	const __m256i ones = _mm256_set1_epi16(1);
	int64_t nb = n / PG_QK, i = 0;
	float acc = 0.0f;

	for (; i + 8 <= nb; i += 8) {
		__m256i v[8];
		float sum[8], d[8];

		for (int k = 0; k < 8; k++) {
			__m256i q = q5_quants(a[i + k].qs, a[i + k].qh);
			__m256i xq = _mm256_loadu_si256((const __m256i *)
							b[i + k].qs);
			__m256i p = _mm256_sub_epi16(
				_mm256_maddubs_epi16(q, xq),
				_mm256_maddubs_epi16(sixteen, xq));

			v[k] = _mm256_madd_epi16(p, ones);
			d[k] = pg_fp16_to_fp32(a[i + k].d) *
			       pg_fp16_to_fp32(b[i + k].d);
		}
		_mm256_storeu_ps(sum, _mm256_cvtepi32_ps(hsum8_i32(v)));
		for (int k = 0; k < 8; k++)
			acc = fmaf(d[k], sum[k], acc);
	}
	for (; i < nb; i++) {
		__m256i q = q5_quants(a[i].qs, a[i].qh);
		__m256i xq = _mm256_loadu_si256((const __m256i *)b[i].qs);
		__m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq),
					     _mm256_maddubs_epi16(sixteen, xq));

		acc = fmaf(pg_fp16_to_fp32(a[i].d) * pg_fp16_to_fp32(b[i].d),
			   (float)hsum_i16(p), acc);
	}
	return acc;
}

float pg_dot_q5_1_avx2(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q5_1 *a = w;
	const struct pg_block_q8_1 *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		__m256i q = q5_quants(a[i].qs, a[i].qh);
		__m256i xq = _mm256_loadu_si256((const __m256i *)b[i].qs);

		acc = fmaf(pg_fp16_to_fp32(a[i].d) * pg_fp16_to_fp32(b[i].d),
			   (float)hsum_i16(_mm256_maddubs_epi16(q, xq)), acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].m), pg_fp16_to_fp32(b[i].s), ms);
	}
	return acc + ms;
}

/* 32 bytes of v >> shift, masked to the low `mask` bits (bytes). */
static inline __m256i bits_at(__m256i v, int shift, int mask)
{
	return _mm256_and_si256(_mm256_srli_epi16(v, shift),
				_mm256_set1_epi8((char)mask));
}

/* Two sub-blocks of 16 (int16 pairs 0..7 and 8..15 of p) times their
 * scales s0 and s1, in int32. */
static inline __m256i scale2(__m256i p, int s0, int s1)
{
	__m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)s1),
				      _mm_set1_epi16((short)s0));

	return _mm256_madd_epi16(p, sc);
}

/*
 * Q4_K and Q5_K's 6-bit scales and mins (pg_scale_min_k4) unpacked from
 * the 12 bytes at q, all eight at once: sc[j] in bytes 0..7 of *sc, m[j]
 * in bytes 0..7 of *m.
 */
static inline void scale_min_k4x8(const uint8_t *q, uint64_t *sc,
				  uint64_t *m)
{
	uint32_t u[3], s_hi, m_hi;

	memcpy(u, q, sizeof(u));
	s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
	m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
	*sc = (uint64_t)(u[0] & 0x3f3f3f3fu) | (uint64_t)s_hi << 32;
	*m = (uint64_t)(u[1] & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

/* Q4_K and Q5_K: the super-block's integer sums (qh NULL for Q4_K). */
static inline void q45_k_sums(const uint8_t *sc8, const uint8_t *qs,
			      const uint8_t *qh,
			      const struct pg_block_q8_k *b, int *sumi,
			      int *summ)
{
	__m256i s = _mm256_setzero_si256();
	__m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) :
		    _mm256_setzero_si256();
	uint64_t sc, m;
	__m256i scv, mv;

	scale_min_k4x8(sc8, &sc, &m);
	/* the 8 scales as int16, in both halves; the mins as int16 pairs
	 * (m_j twice) against the bsums: m_j (bsum_2j + bsum_2j+1) */
	scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(
		_mm_cvtsi64_si128((long long)sc)));
	mv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
		_mm_cvtsi64_si128((long long)m),
		_mm_cvtsi64_si128((long long)m)));
	*summ = hsum256_i32(_mm256_madd_epi16(mv, _mm256_loadu_si256(
		(const __m256i *)b->bsums)));
	for (int k = 0; k < 4; k++) {
		__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
		__m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
		__m256i hi = bits_at(q, 4, 0x0f);
		__m256i x0 = _mm256_loadu_si256((const __m256i *)(b->qs + 64 * k));
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(b->qs + 64 * k +
								 32));
		/* int16 j of scv everywhere: bytes 2j, 2j + 1 repeated */
		__m256i s0 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16(
			(short)(0x0100 + 0x0202 * (2 * k))));
		__m256i s1 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16(
			(short)(0x0100 + 0x0202 * (2 * k + 1))));

		if (qh) {	/* bits 2k and 2k + 1 of qh[l], as 16 */
			lo = _mm256_or_si256(lo, _mm256_slli_epi16(
				bits_at(h, 2 * k, 1), 4));
			hi = _mm256_or_si256(hi, _mm256_slli_epi16(
				bits_at(h, 2 * k + 1, 1), 4));
		}
		s = _mm256_add_epi32(s, _mm256_madd_epi16(
			_mm256_maddubs_epi16(lo, x0), s0));
		s = _mm256_add_epi32(s, _mm256_madd_epi16(
			_mm256_maddubs_epi16(hi, x1), s1));
	}
	*sumi = hsum256_i32(s);
}

float pg_dot_q4_k_avx2(int64_t n, const void *w, const void *x)
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

float pg_dot_q5_k_avx2(int64_t n, const void *w, const void *x)
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

float pg_dot_q6_k_avx2(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q6_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		__m256i s = _mm256_setzero_si256();
		int off = 0;

		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = a[i].ql + 64 * h;
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i qh = _mm256_loadu_si256((const __m256i *)
							(a[i].qh + 32 * h));

			for (int k = 0; k < 4; k++) {
				int j = 8 * h + 2 * k;	/* its sub-blocks */
				__m256i lq = bits_at(k & 1 ? l1 : l0, 4 * (k >> 1),
						     0x0f);
				__m256i u = _mm256_or_si256(lq, _mm256_slli_epi16(
					bits_at(qh, 2 * k, 3), 4));
				__m256i xq = _mm256_loadu_si256((const __m256i *)
					(b[i].qs + 128 * h + 32 * k));

				s = _mm256_add_epi32(s, scale2(
					_mm256_maddubs_epi16(u, xq),
					a[i].scales[j], a[i].scales[j + 1]));
			}
		}
		for (int j = 0; j < 16; j++)	/* the -32 of every quant */
			off += a[i].scales[j] * b[i].bsums[j];
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d,
			   (float)(hsum256_i32(s) - 32 * off), acc);
	}
	return acc;
}

float pg_dot_q2_k_avx2(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q2_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f, ms = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		__m256i s = _mm256_setzero_si256();
		int summ = 0;

		for (int h = 0; h < 2; h++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)
						       (a[i].qs + 32 * h));

			for (int k = 0; k < 4; k++) {
				int j = 8 * h + 2 * k;
				__m256i xq = _mm256_loadu_si256((const __m256i *)
					(b[i].qs + 128 * h + 32 * k));

				s = _mm256_add_epi32(s, scale2(
					_mm256_maddubs_epi16(bits_at(q, 2 * k, 3),
							     xq),
					a[i].scales[j] & 15,
					a[i].scales[j + 1] & 15));
			}
		}
		for (int j = 0; j < 16; j++)
			summ += (a[i].scales[j] >> 4) * b[i].bsums[j];
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d,
			   (float)hsum256_i32(s), acc);
		ms = fmaf(pg_fp16_to_fp32(a[i].dmin) * b[i].d, (float)summ, ms);
	}
	return acc - ms;
}

float pg_dot_q3_k_avx2(int64_t n, const void *w, const void *x)
{
	const struct pg_block_q3_k *a = w;
	const struct pg_block_q8_k *b = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / PG_QK_K; i++) {
		__m256i s = _mm256_setzero_si256();
		__m256i hm = _mm256_loadu_si256((const __m256i *)a[i].hmask);
		int sc[16], off = 0;

		for (int j = 0; j < 16; j++)
			sc[j] = pg_scale_q3_k(j, a[i].scales);
		for (int h = 0; h < 2; h++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)
						       (a[i].qs + 32 * h));

			for (int k = 0; k < 4; k++) {
				int j = 8 * h + 2 * k;
				/* u in [0, 7]: 4 where the high bit is set */
				__m256i u = _mm256_or_si256(bits_at(q, 2 * k, 3),
					_mm256_slli_epi16(bits_at(hm, 4 * h + k,
								  1), 2));
				__m256i xq = _mm256_loadu_si256((const __m256i *)
					(b[i].qs + 128 * h + 32 * k));

				s = _mm256_add_epi32(s, scale2(
					_mm256_maddubs_epi16(u, xq), sc[j],
					sc[j + 1]));
			}
		}
		for (int j = 0; j < 16; j++)	/* the -4 of every quant */
			off += sc[j] * b[i].bsums[j];
		acc = fmaf(pg_fp16_to_fp32(a[i].d) * b[i].d,
			   (float)(hsum256_i32(s) - 4 * off), acc);
	}
	return acc;
}
