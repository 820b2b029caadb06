/*
 * kq_avx2.c - AVX2 dots of Q5_0, Q5_1 and the K-quants (Q2_K .. Q6_K)
 * with 8-bit activations (Q8_0, Q8_1, Q8_K) in pagoda's numerics: one
 * row, 4 rows (decode), tiles of 4 rows x 2 tokens, and for the K-quants
 * 8 rows x many tokens, 4 tokens a pass (prompts; Q5_0's is in
 * gemm_avx2.c), each bit for bit what the references in dot.c give.
 * Also the Q8_K activation quantiser, bit for bit pg_quant_q8_k_ref.
 *
 * The references sum every block's (super-block's) products of quants
 * exactly in int32, so any order of the integer adds gives the same
 * integer; these loops get it with maddubs (unsigned weight quants times
 * signed activations, pairs summed in int16: |.| <= 2 x 63 x 128 = 16128
 * for the widest, Q6_K's 6 bits, so nothing saturates) and madd by the
 * sub-block scales into int32, and subtract the offsets of the signed
 * types (Q5_0's 16, Q3_K's 4, Q6_K's 32) as offset x the activations'
 * sums (maddubs of the offset for Q5_0; Q8_K's bsums for the K-quants).
 * Q5_0 / Q5_1 keep a block's 16 pair sums in int16 and add 4 rows' side
 * by side up to 8 products (|.| <= 8 x 31 x 128 = 31744) before widening.
 * The floats then go exactly as in the reference, one block after
 * another: acc = fma(d_w d_x, (float)sum, acc), the mins' ms likewise,
 * 4 rows in the 4 lanes of one vector (a lane's fma is the scalar fmaf).
 * Scales are converted with F16C (exact, as pg_fp16_to_fp32).
 *
 * One loop (kq_loop) serves every row count and token count, so a row's
 * bits do not depend on which of them reached it.
 *
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include <stddef.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx2.h"

enum kq { KQ_Q5_0, KQ_Q5_1, KQ_Q2_K, KQ_Q3_K, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K };

static inline float h2f(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* Whether the type's blocks are 256-value super-blocks (Q8_K). */
static inline int kq_super(enum kq k)
{
	return k >= KQ_Q2_K;
}

static inline size_t kq_wbytes(enum kq k)
{
	switch (k) {
	case KQ_Q5_0: return sizeof(struct pg_block_q5_0);
	case KQ_Q5_1: return sizeof(struct pg_block_q5_1);
	case KQ_Q2_K: return sizeof(struct pg_block_q2_k);
	case KQ_Q3_K: return sizeof(struct pg_block_q3_k);
	case KQ_Q4_K: return sizeof(struct pg_block_q4_k);
	case KQ_Q5_K: return sizeof(struct pg_block_q5_k);
	default: return sizeof(struct pg_block_q6_k);
	}
}

static inline size_t kq_xbytes(enum kq k)
{
	return k == KQ_Q5_0 ? sizeof(struct pg_block_q8_0) :
	       k == KQ_Q5_1 ? sizeof(struct pg_block_q8_1) :
	       sizeof(struct pg_block_q8_k);
}

/* Where a weight block's F16 d is, and its F16 min (dmin, m). */
static inline size_t kq_doff(enum kq k)
{
	switch (k) {
	case KQ_Q2_K: return offsetof(struct pg_block_q2_k, d);
	case KQ_Q3_K: return offsetof(struct pg_block_q3_k, d);
	case KQ_Q6_K: return offsetof(struct pg_block_q6_k, d);
	default: return 0;	/* Q5_0, Q5_1, Q4_K, Q5_K */
	}
}

static inline size_t kq_moff(enum kq k)
{
	return k == KQ_Q2_K ? offsetof(struct pg_block_q2_k, dmin) : 2;
}

/* Whether the row has a second running sum: Q5_1 (added), Q2_K, Q4_K,
 * Q5_K (subtracted). */
static inline int kq_mins(enum kq k)
{
	return k == KQ_Q5_1 || k == KQ_Q2_K || k == KQ_Q4_K || k == KQ_Q5_K;
}

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
	/* the 16 bytes in both halves, the high half shifted by 4: one
	 * variable shift instead of a shift and an insert */
	__m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
	__m256i v = _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(
		0, 0, 4, 4)), _mm256_set1_epi8(0x0f));

	return _mm256_or_si256(v, q5_high(qh));
}

/* 32 bytes of v >> shift, masked to the low `mask` bits (bytes). */
static inline __m256i bits_at(__m256i v, int shift, int mask)
{
	return _mm256_and_si256(_mm256_srli_epi16(v, shift),
				_mm256_set1_epi8((char)mask));
}

/*
 * From 16 int8 scales broadcast to both halves of scb: int16 sc[j] in
 * the low half, sc[j + 1] in the high half (sub-blocks j and j + 1 of 16
 * values under one maddubs), sign-extended (signed) or not.
 */
static inline __m256i scale_pair(__m256i scb, int j, int is_signed)
{
	if (is_signed) {	/* the byte into the high half, then >> 8 */
		__m256i m = _mm256_set_m128i(_mm_set1_epi16((short)((j + 1) << 8 | 0x80)),
					     _mm_set1_epi16((short)(j << 8 | 0x80)));

		return _mm256_srai_epi16(_mm256_shuffle_epi8(scb, m), 8);
	}
	return _mm256_shuffle_epi8(scb, _mm256_set_m128i(
		_mm_set1_epi16((short)(0x8000 | (j + 1))),
		_mm_set1_epi16((short)(0x8000 | j))));
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

/* Q3_K's 16 scales (pg_scale_q3_k, in [-32, 31]) as 16 int8. */
static inline __m128i scales_q3_k(const uint8_t *s)
{
	uint32_t a[3], v[4];

	memcpy(a, s, sizeof(a));
	v[0] = (a[0] & 0x0f0f0f0fu) | (a[2] & 0x03030303u) << 4;
	v[1] = (a[1] & 0x0f0f0f0fu) | ((a[2] >> 2) & 0x03030303u) << 4;
	v[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 4) & 0x03030303u) << 4;
	v[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 6) & 0x03030303u) << 4;
	return _mm_sub_epi8(_mm_loadu_si128((const __m128i *)v),
			    _mm_set1_epi8(32));
}

/*
 * A K-quant super-block of one row against nt (1, 2 or 4) tokens' Q8_K
 * blocks xb[t]: s[t] = 8 int32 whose sum is the reference's sumi, m[t]
 * the same for summ (the types with mins).
 */
static inline __attribute__((always_inline)) void
k_row(enum kq k, const uint8_t *wb, const struct pg_block_q8_k *const xb[4],
      int nt, __m256i s[4], __m256i m[4])
{
	if (k == KQ_Q4_K || k == KQ_Q5_K) {
		int five = k == KQ_Q5_K;
		const uint8_t *qs = wb + (five ? offsetof(struct pg_block_q5_k, qs) :
					  offsetof(struct pg_block_q4_k, qs));
		__m256i h = five ? _mm256_loadu_si256((const __m256i *)
			(wb + offsetof(struct pg_block_q5_k, qh))) :
			_mm256_setzero_si256();
		uint64_t sc, mn;
		__m256i scv, mv;

		scale_min_k4x8(wb + 4, &sc, &mn);
		/* the 8 scales as int16, in both halves; the mins as int16
		 * pairs (m_j twice) against the bsums */
		scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(
			_mm_cvtsi64_si128((long long)sc)));
		mv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
			_mm_cvtsi64_si128((long long)mn),
			_mm_cvtsi64_si128((long long)mn)));
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			s[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
			__m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
			__m256i hi = bits_at(q, 4, 0x0f);
			/* int16 j of scv everywhere: bytes 2j, 2j + 1 */
			__m256i s0 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16(
				(short)(0x0100 + 0x0202 * (2 * c))));
			__m256i s1 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16(
				(short)(0x0100 + 0x0202 * (2 * c + 1))));

			if (five) {	/* bits 2c and 2c + 1 of qh[l], as 16 */
				lo = _mm256_or_si256(lo, _mm256_slli_epi16(
					bits_at(h, 2 * c, 1), 4));
				hi = _mm256_or_si256(hi, _mm256_slli_epi16(
					bits_at(h, 2 * c + 1, 1), 4));
			}
#pragma GCC unroll 4
			for (int t = 0; t < nt; t++) {
				const int8_t *xq = xb[t]->qs + 64 * c;

				s[t] = _mm256_add_epi32(s[t], _mm256_add_epi32(
					_mm256_madd_epi16(_mm256_maddubs_epi16(lo,
						_mm256_loadu_si256((const __m256i *)xq)), s0),
					_mm256_madd_epi16(_mm256_maddubs_epi16(hi,
						_mm256_loadu_si256((const __m256i *)(xq + 32))),
						s1)));
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)	/* last: fewer live registers */
			m[t] = _mm256_madd_epi16(mv, _mm256_loadu_si256(
				(const __m256i *)xb[t]->bsums));
		return;
	}
	if (k == KQ_Q6_K) {
		const struct pg_block_q6_k *a = (const void *)wb;
		__m128i sc = _mm_loadu_si128((const __m128i *)a->scales);
		__m256i sc16 = _mm256_cvtepi8_epi16(sc);
		/* the even scales' int16 in the low half, the odd ones' in the
		 * high half: sub-blocks j, j + 1 (j even) under one maddubs
		 * take int16 j / 2 of either half, one shuffle */
		__m256i scp = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_setr_epi8(
			0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));

#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)	/* the -32 of every quant */
			s[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
				_mm256_slli_epi32(_mm256_madd_epi16(sc16,
					_mm256_loadu_si256((const __m256i *)
							   xb[t]->bsums)), 5));
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = a->ql + 64 * h;
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i qh = _mm256_loadu_si256((const __m256i *)
							(a->qh + 32 * h));

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				__m256i lq = bits_at(c & 1 ? l1 : l0, 4 * (c >> 1),
						     0x0f);
				/* bits 2c, 2c + 1 of qh moved to 4, 5 of the
				 * byte (what leaks across bytes is masked off) */
				__m256i hq = c == 3 ? _mm256_srli_epi16(qh, 2) :
					     _mm256_slli_epi16(qh, 4 - 2 * c);
				__m256i u = _mm256_or_si256(lq, _mm256_and_si256(hq,
					_mm256_set1_epi8(0x30)));
				int j = 4 * h + c;	/* (8h + 2c) / 2 */
				__m256i sp = _mm256_shuffle_epi8(scp, _mm256_set1_epi16(
					(short)(0x0100 + 0x0202 * j)));

#pragma GCC unroll 4
				for (int t = 0; t < nt; t++)
					s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(
						_mm256_maddubs_epi16(u, _mm256_loadu_si256(
							(const __m256i *)(xb[t]->qs +
									  128 * h + 32 * c))),
						sp));
			}
		}
		return;
	}
	if (k == KQ_Q2_K) {
		const struct pg_block_q2_k *a = (const void *)wb;
		__m128i sc = _mm_loadu_si128((const __m128i *)a->scales);
		__m256i scb = _mm256_broadcastsi128_si256(
			_mm_and_si128(sc, _mm_set1_epi8(15)));
		__m256i mv = _mm256_cvtepu8_epi16(_mm_and_si128(
			_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));

#pragma GCC unroll 4
		for (int t = 0; t < nt; t++) {
			m[t] = _mm256_madd_epi16(mv, _mm256_loadu_si256(
				(const __m256i *)xb[t]->bsums));
			s[t] = _mm256_setzero_si256();
		}
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)
						       (a->qs + 32 * h));

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				__m256i u = bits_at(q, 2 * c, 3);
				__m256i sp = scale_pair(scb, 8 * h + 2 * c, 0);

#pragma GCC unroll 4
				for (int t = 0; t < nt; t++)
					s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(
						_mm256_maddubs_epi16(u, _mm256_loadu_si256(
							(const __m256i *)(xb[t]->qs +
									  128 * h + 32 * c))),
						sp));
			}
		}
		return;
	}
	/* Q3_K */
	const struct pg_block_q3_k *a = (const void *)wb;
	__m128i sc = scales_q3_k(a->scales);
	__m256i scb = _mm256_broadcastsi128_si256(sc);
	__m256i sc16 = _mm256_cvtepi8_epi16(sc);
	__m256i hm = _mm256_loadu_si256((const __m256i *)a->hmask);

#pragma GCC unroll 4
	for (int t = 0; t < nt; t++)	/* the -4 of every quant */
		s[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
			_mm256_slli_epi32(_mm256_madd_epi16(sc16,
				_mm256_loadu_si256((const __m256i *)xb[t]->bsums)),
				2));
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * h));

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			/* u in [0, 7]: 4 where the high bit is set */
			__m256i u = _mm256_or_si256(bits_at(q, 2 * c, 3),
				_mm256_slli_epi16(bits_at(hm, 4 * h + c, 1), 2));
			__m256i sp = scale_pair(scb, 8 * h + 2 * c, 1);

#pragma GCC unroll 4
			for (int t = 0; t < nt; t++)
				s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(
					_mm256_maddubs_epi16(u, _mm256_loadu_si256(
						(const __m256i *)(xb[t]->qs + 128 * h +
								  32 * c))),
					sp));
		}
	}
}

/* Lane r = the sum of the 8 int32 of v[r], r < 4. */
static inline __m128i red4_i32(const __m256i v[4])
{
	__m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]),
				      _mm256_hadd_epi32(v[2], v[3]));

	return _mm_add_epi32(_mm256_castsi256_si128(h),
			     _mm256_extracti128_si256(h, 1));
}

/* Lane r = the sum of the 16 int16 of p[r] (pair sums of a Q5 block, 8
 * products added in int16 at most), r < 4: dwords of rows 0, 1 (2, 3)
 * side by side, then per half a dword of each row, whose two int16 madd
 * adds into int32 (16 products), then the halves. */
static inline __m128i red4_i16(const __m256i p[4])
{
	__m256i u01 = _mm256_add_epi16(_mm256_unpacklo_epi32(p[0], p[1]),
				       _mm256_unpackhi_epi32(p[0], p[1]));
	__m256i u23 = _mm256_add_epi16(_mm256_unpacklo_epi32(p[2], p[3]),
				       _mm256_unpackhi_epi32(p[2], p[3]));
	/* per half: (row 0, 1, 2, 3), two int16 of 8 products each */
	__m256i v = _mm256_add_epi16(_mm256_unpacklo_epi64(u01, u23),
				     _mm256_unpackhi_epi64(u01, u23));
	__m256i w = _mm256_madd_epi16(v, _mm256_set1_epi16(1));

	return _mm_add_epi32(_mm256_castsi256_si128(w),
			     _mm256_extracti128_si256(w, 1));
}

/* The F16 at p + r * stride for r < nr (nr <= 4) as floats in lane r. */
static inline uint16_t load16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return h;
}

/* (put together in a general register: 2-byte stores read back as one
 * 8-byte load would miss store forwarding, and inserts lane by lane cost
 * vector shuffles) */
static inline __m128 f16_rows(const uint8_t *p, size_t stride, int nr)
{
	uint64_t v = load16(p);

	if (nr == 4)
		v |= (uint64_t)load16(p + stride) << 16 |
		     (uint64_t)load16(p + 2 * stride) << 32 |
		     (uint64_t)load16(p + 3 * stride) << 48;
	return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

/*
 * Rows w + r * ws (r < nr: 1 or 4) against nt tokens (1 or 2; 4 for the
 * K-quants) at x, x + xs, ...: out[t * os + r], part by part (struct pg_cuts: its ends count
 * 32-value blocks).  Per block: the rows' exact integer sums, then in
 * lane r the reference's fma of that row.
 */
static inline __attribute__((always_inline)) void
kq_loop(enum kq k, int nr, int nt, int64_t n, const uint8_t *w, size_t ws,
	const uint8_t *x, size_t xs, float *out, size_t os,
	const struct pg_cuts *cuts)
{
	size_t wb = kq_wbytes(k), xb = kq_xbytes(k);
	int per = kq_super(k) ? PG_QK_K / PG_QK : 1;
	int64_t i = 0;
	__m128 run[4] = { _mm_setzero_ps(), _mm_setzero_ps(),
			  _mm_setzero_ps(), _mm_setzero_ps() };

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		__m128 acc[4] = { _mm_setzero_ps(), _mm_setzero_ps(),
				  _mm_setzero_ps(), _mm_setzero_ps() };
		__m128 ms[4] = { _mm_setzero_ps(), _mm_setzero_ps(),
				 _mm_setzero_ps(), _mm_setzero_ps() };
		int64_t end = cuts ? cuts->end[p] / per : n / (PG_QK * per);

		for (; i < end; i++) {
			const uint8_t *wr = w + (size_t)i * wb;
			const uint8_t *xr = x + (size_t)i * xb;
			__m128i si[4], mi[4];
			__m128 dx[4], sx[4];

			if (nr == 4 && kq_super(k))
				prefetch_group(w, ws, i, wb);
			else if (nr == 4)
				prefetch_group_fixed(w, ws, i, wb);
			if (!kq_super(k)) {
				size_t xo = k == KQ_Q5_0 ? 2 : 4;
				size_t qho = k == KQ_Q5_0 ? 2 : 4;
				__m256i xq[2], off[2], pr[2][4];

#pragma GCC unroll 4
				for (int t = 0; t < nt; t++) {
					const uint8_t *xt = xr + (size_t)t * xs;

					xq[t] = _mm256_loadu_si256((const __m256i *)(xt + xo));
					off[t] = k == KQ_Q5_0 ? _mm256_maddubs_epi16(
						_mm256_set1_epi8(16), xq[t]) :
						_mm256_setzero_si256();
					sx[t] = _mm_setzero_ps();
					if (k == KQ_Q5_0) {
						/* the F16 in every lane, then converted */
						dx[t] = _mm_cvtph_ps(_mm_set1_epi16((short)load16(xt)));
					} else {
						__m128 ds = load_f16x2((const uint16_t *)xt);

						dx[t] = _mm_shuffle_ps(ds, ds, 0x00);
						sx[t] = _mm_shuffle_ps(ds, ds, 0x55);
					}
				}
#pragma GCC unroll 4
				for (int r = 0; r < nr; r++) {
					const uint8_t *b = wr + (size_t)r * ws;
					__m256i q = q5_quants(b + qho + 4, b + qho);

#pragma GCC unroll 4
					for (int t = 0; t < nt; t++) {
						pr[t][r] = _mm256_maddubs_epi16(q, xq[t]);
						if (k == KQ_Q5_0)	/* (q - 16) x */
							pr[t][r] = _mm256_sub_epi16(
								pr[t][r], off[t]);
					}
				}
#pragma GCC unroll 4
				for (int t = 0; t < nt; t++)
					si[t] = nr == 4 ? red4_i16(pr[t]) :
						_mm_cvtsi32_si128(hsum256_i32(
							_mm256_madd_epi16(pr[t][0],
								_mm256_set1_epi16(1))));
			} else {
				const struct pg_block_q8_k *xk[4] = {
					(const void *)xr, (const void *)(xr + xs),
					(const void *)(xr + 2 * xs),
					(const void *)(xr + 3 * xs),
				};
				__m256i s[4][4], m[4][4], sr[4], mr[4] = {
					_mm256_setzero_si256(), _mm256_setzero_si256(),
					_mm256_setzero_si256(), _mm256_setzero_si256(),
				};

#pragma GCC unroll 4
				for (int r = 0; r < nr; r++) {
					k_row(k, wr + (size_t)r * ws, xk, nt, sr, mr);
#pragma GCC unroll 4
					for (int t = 0; t < nt; t++) {
						s[t][r] = sr[t];
						m[t][r] = mr[t];
					}
				}
#pragma GCC unroll 4
				for (int t = 0; t < nt; t++) {
					dx[t] = _mm_set1_ps(xk[t]->d);
					if (nr == 4) {
						si[t] = red4_i32(s[t]);
						if (kq_mins(k))
							mi[t] = red4_i32(m[t]);
					} else {
						si[t] = _mm_cvtsi32_si128(hsum256_i32(s[t][0]));
						if (kq_mins(k))
							mi[t] = _mm_cvtsi32_si128(
								hsum256_i32(m[t][0]));
					}
				}
			}
			__m128 d = f16_rows(wr + kq_doff(k), ws, nr);
			__m128 mw = kq_mins(k) ? f16_rows(wr + kq_moff(k), ws, nr) :
				    _mm_setzero_ps();

#pragma GCC unroll 4
			for (int t = 0; t < nt; t++) {
				acc[t] = _mm_fmadd_ps(_mm_mul_ps(d, dx[t]),
						      _mm_cvtepi32_ps(si[t]), acc[t]);
				if (k == KQ_Q5_1)
					ms[t] = _mm_fmadd_ps(mw, sx[t], ms[t]);
				else if (kq_mins(k))
					ms[t] = _mm_fmadd_ps(_mm_mul_ps(mw, dx[t]),
							     _mm_cvtepi32_ps(mi[t]),
							     ms[t]);
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++) {
			__m128 v = k == KQ_Q5_1 ? _mm_add_ps(acc[t], ms[t]) :
				   kq_mins(k) ? _mm_sub_ps(acc[t], ms[t]) : acc[t];
			float *o = pg_cuts_out(cuts, p, out) + (size_t)t * os;

			if (pg_cuts_summed(cuts))	/* the earlier parts, then this */
				run[t] = p ? _mm_add_ps(run[t], v) : v;
			else if (nr == 4)
				_mm_storeu_ps(o, v);
			else
				*o = _mm_cvtss_f32(v);
		}
	}
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++) {
			if (nr == 4)
				_mm_storeu_ps(out + (size_t)t * os, run[t]);
			else
				out[(size_t)t * os] = _mm_cvtss_f32(run[t]);
		}
}

#define KQ_LOOPS(name, kind)						\
float pg_dot_##name##_avx2(int64_t n, const void *w, const void *x)	\
{									\
	float v;							\
									\
	kq_loop(kind, 1, 1, n, w, 0, x, 0, &v, 0, NULL);		\
	return v;							\
}									\
									\
void pg_dot4_##name##_avx2(int64_t n, const void *w, size_t ws,		\
			   const void *x, float *out,			\
			   const struct pg_cuts *cuts)			\
{									\
	kq_loop(kind, 4, 1, n, w, ws, x, 0, out, 0, cuts);		\
}									\
									\
void pg_dot4x2_##name##_avx2(int64_t n, const void *w, size_t ws,	\
			     const void *x, size_t xs, float *out,	\
			     size_t os, const struct pg_cuts *cuts)	\
{									\
	kq_loop(kind, 4, 2, n, w, ws, x, xs, out, os, cuts);		\
}

/*
 * 8 K-quant rows x n_tok tokens (gemm8's shape): xp the tokens' Q8_K rows
 * as quantised, one after another; work unused.  Each half of the rows
 * sweeps the tokens 4 at a time (the 4-row loop's very lanes), the
 * weights unpacked once per 4 tokens and kept in L1.
 */
static inline __attribute__((always_inline)) void
kq_gemm(enum kq k, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x,
	int n_tok, float *out, size_t os, const struct pg_cuts *cuts)
{
	size_t xs = (size_t)(n / PG_QK_K) * sizeof(struct pg_block_q8_k);

	for (int h = 0; h < 2; h++) {
		const uint8_t *wh = w + (size_t)(4 * h) * ws;
		float *oh = out + 4 * h;
		int t = 0;

		for (; t + 4 <= n_tok; t += 4)
			kq_loop(k, 4, 4, n, wh, ws, x + (size_t)t * xs, xs,
				oh + (size_t)t * os, os, cuts);
		for (; t + 2 <= n_tok; t += 2)
			kq_loop(k, 4, 2, n, wh, ws, x + (size_t)t * xs, xs,
				oh + (size_t)t * os, os, cuts);
		for (; t < n_tok; t++)
			kq_loop(k, 4, 1, n, wh, ws, x + (size_t)t * xs, 0,
				oh + (size_t)t * os, os, cuts);
	}
}

/*
 * Q4_K, many tokens: 8 rows' super-block repacked once into work (struct
 * kg8_block below; Q6_K's kg6_block likewise) so that one
 * broadcast of 4 activations meets 4 quants of each of the 8 rows (row r
 * in 32-bit lane r), as gemm_avx2.c does for Q4_0.  A sub-block's 8
 * chunk products summed in int16 (lane 2r, 2r + 1: 16 products of up
 * to 15 x 128 each, 30720: no wrap), then madd by the rows' scales
 * (both lanes of a row) gives each row's exact scale x sum in int32
 * lane r; the mins likewise against the pairs of bsums.  The floats are
 * kq_loop's, lane by lane: the 4-row loop's bits.
 *
 * The sweeps take KG_TOK tokens a pass, each weight vector loaded once
 * for all of them (one load then feeds 4 maddubs instead of 1: the
 * loads, not the multipliers, bounded the one-token sweep), and the
 * repacks transpose in registers (tr8x8) rather than through bytes
 * stored and read back, which missed store forwarding: at 16 tokens the
 * repacking had cost about as much as the products.  Bench/kernels
 * (Zen 3, AVX2, 1 thread): Q4_K 0.2-0.45 of the int8 peak before, 0.6-0.7
 * after; Q6_K 0.1-0.3 before, 0.55-0.75 after.
 */
struct kg8_block {
	__m256i q[64];		/* chunk c: values 4c .. 4c + 3, row r in lane r */
	__m256i sc[8];		/* sub-block j's scales: int16 2r, 2r + 1 = row r's */
	__m256i mn[8];		/* its mins, the same way */
	__m256 d, dmin;		/* the rows' */
};

/* Q6_K's: 16 sub-blocks of 16; the -32 offsets against the bsums' pairs */
struct kg6_block {
	__m256i q[64];		/* as kg8_block's, u in [0, 63] */
	__m256i sc[16];		/* sub-block j's scales, both lanes of a row */
	__m256i off[8];		/* lanes 2r, 2r + 1: row r's sc[2j], sc[2j + 1] */
	__m256 d;
};

_Static_assert(sizeof(struct kg8_block) <= PG_GEMM8_KWORK &&
	       sizeof(struct kg6_block) <= PG_GEMM8_KWORK,
	       "PG_GEMM8_KWORK holds a repacked Q4_K or Q6_K block");



#define KG8_MIN 16	/* tokens from which the repacking pays */
#define KG_TOK 4	/* tokens a pass of the sweeps (register blocking) */

/*
 * The 8 x 8 transpose of 32-bit lanes: lane r of out[j] = lane j of
 * in[r].  Three rounds of unpacks and lane swaps, no memory: the repacks
 * feed the sweeps from registers, not from stores read back narrower or
 * wider (which miss store forwarding).
 */
static inline __attribute__((always_inline)) void
tr8x8(const __m256i in[8], __m256i out[8])
{
	__m256i t[8], u[8];

#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		t[2 * k] = _mm256_unpacklo_epi32(in[2 * k], in[2 * k + 1]);
		t[2 * k + 1] = _mm256_unpackhi_epi32(in[2 * k], in[2 * k + 1]);
	}
#pragma GCC unroll 2
	for (int k = 0; k < 2; k++) {	/* rows 4k .. 4k + 3 */
		u[4 * k] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
		u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
		u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
		u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
	}
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		out[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
		out[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
	}
}

/* The F16 at p + r * stride for r < 8 as floats in lane r (put together
 * in general registers, as f16_rows). */
static inline __m256 f16_rows8(const uint8_t *p, size_t stride)
{
	uint64_t lo = 0, hi = 0;

#pragma GCC unroll 4
	for (int r = 0; r < 4; r++) {
		lo |= (uint64_t)load16(p + (size_t)r * stride) << (16 * r);
		hi |= (uint64_t)load16(p + (size_t)(r + 4) * stride) << (16 * r);
	}
	return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* The int16 pairs of v's 32-bit lanes as (low, low) or (high, high). */
static inline __m256i dup_lo16(__m256i v)
{
	return _mm256_shuffle_epi8(v, _mm256_setr_epi8(
		0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
		0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
}

static inline __m256i dup_hi16(__m256i v)
{
	return _mm256_shuffle_epi8(v, _mm256_setr_epi8(
		2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
		2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
}

/*
 * Super-block i of the 8 Q4_K rows at w into *b: each row's 4 x 32 bytes
 * of nibbles split into low and high (values 64k .. 64k + 31 and the 32
 * after), 8 rows of each transposed so that chunk c of every row sits in
 * q[c]; the rows' scales and mins as int16 (a row's 8 scales, then its 8
 * mins: 8 lanes of pairs) transposed the same way, each pair then spread
 * to both int16 of a lane.
 */
static void kg8_repack(const uint8_t *w, size_t ws, int64_t i,
		       struct kg8_block *b)
{
	const uint8_t *w0 = w + (size_t)i * sizeof(struct pg_block_q4_k);
	__m256i in[8], out[8];

#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		__m256i v[8];

#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			v[r] = _mm256_loadu_si256((const __m256i *)(w0 + (size_t)r * ws +
				offsetof(struct pg_block_q4_k, qs) + 32 * k));
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			in[r] = _mm256_and_si256(v[r], _mm256_set1_epi8(0x0f));
		tr8x8(in, b->q + 16 * k);
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			in[r] = bits_at(v[r], 4, 0x0f);
		tr8x8(in, b->q + 16 * k + 8);
	}
#pragma GCC unroll 8
	for (int r = 0; r < 8; r++) {
		uint64_t sc, mn;

		scale_min_k4x8(w0 + (size_t)r * ws + offsetof(struct pg_block_q4_k,
							      scales), &sc, &mn);
		in[r] = _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mn,
							    (long long)sc));
	}
	tr8x8(in, out);	/* out[j]: pairs 2j, 2j + 1 (scales j < 4, mins) */
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		b->sc[2 * j] = dup_lo16(out[j]);
		b->sc[2 * j + 1] = dup_hi16(out[j]);
		b->mn[2 * j] = dup_lo16(out[j + 4]);
		b->mn[2 * j + 1] = dup_hi16(out[j + 4]);
	}
	b->d = f16_rows8(w0 + offsetof(struct pg_block_q4_k, d), ws);
	b->dmin = f16_rows8(w0 + offsetof(struct pg_block_q4_k, dmin), ws);
}

/* 4 bytes at p in all 8 lanes. */
static inline __m256i bcast4(const void *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/*
 * The end of cut p of nt tokens' sums v: stored (the parts apart), or
 * added to the running sums (summed: the earlier parts, then this).
 */
static inline __attribute__((always_inline)) void
kg_part_end(const struct pg_cuts *cuts, int p, float *out, size_t os, int nt,
	    const __m256 *v, __m256 *run)
{
#pragma GCC unroll 4
	for (int t = 0; t < nt; t++) {
		if (!pg_cuts_summed(cuts))
			_mm256_storeu_ps(pg_cuts_out(cuts, p, out) +
					 (size_t)t * os, v[t]);
		else
			run[t] = p ? _mm256_add_ps(run[t], v[t]) : v[t];
	}
}

/* The running sums out, when the cuts are summed (kg_part_end). */
static inline __attribute__((always_inline)) void
kg_sums_out(const struct pg_cuts *cuts, float *out, size_t os, int nt,
	    const __m256 *run)
{
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			_mm256_storeu_ps(out + (size_t)t * os, run[t]);
}

/*
 * NAME(buf, nb, x, n_tok, out, os, cuts) - n_tok tokens through TOKENS,
 * KG_TOK at a time, the rest (1 .. 3) with a constant count so that each
 * call is specialised for it.
 */
#define KG_SWEEP(NAME, TOKENS, BLOCK)					\
static void NAME(const BLOCK *buf, int64_t nb, const uint8_t *x,	\
		 int n_tok, float *out, size_t os,			\
		 const struct pg_cuts *cuts)				\
{									\
	size_t xs = (size_t)nb * sizeof(struct pg_block_q8_k);		\
	int t = 0;							\
									\
	for (; t + KG_TOK <= n_tok; t += KG_TOK)			\
		TOKENS(buf, nb, x + (size_t)t * xs, xs, KG_TOK,		\
		       out + (size_t)t * os, os, cuts);			\
	switch (n_tok - t) {						\
	case 3: TOKENS(buf, nb, x + (size_t)t * xs, xs, 3,		\
		       out + (size_t)t * os, os, cuts); break;		\
	case 2: TOKENS(buf, nb, x + (size_t)t * xs, xs, 2,		\
		       out + (size_t)t * os, os, cuts); break;		\
	case 1: TOKENS(buf, nb, x + (size_t)t * xs, xs, 1,		\
		       out + (size_t)t * os, os, cuts); break;		\
	default: break;							\
	}								\
}

/*
 * nt (<= KG_TOK) tokens at x, xs bytes apart, against the repacked
 * blocks: each weight vector loaded once for the nt tokens.  Per token
 * and super-block: a sub-block's 8 chunk products summed in int16, madd
 * by the scales into int32; the mins against the bsums; then kq_loop's
 * floats, lane by lane (the 4-row loop's bits).
 */
static inline __attribute__((always_inline)) void
kg8_tokens(const struct kg8_block *buf, int64_t nb, const uint8_t *x,
	   size_t xs, int nt, float *out, size_t os,
	   const struct pg_cuts *cuts)
{
	__m256 run[KG_TOK];
	int64_t i = 0;

#pragma GCC unroll 4
	for (int t = 0; t < KG_TOK; t++)
		run[t] = _mm256_setzero_ps();

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		int64_t end = cuts ? cuts->end[p] / (PG_QK_K / PG_QK) : nb;
		__m256 acc[KG_TOK], ms[KG_TOK];

#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			acc[t] = ms[t] = _mm256_setzero_ps();
		for (; i < end; i++) {
			const struct kg8_block *b = &buf[i];
			const struct pg_block_q8_k *xb[KG_TOK];
			__m256i s[KG_TOK];

#pragma GCC unroll 4
			for (int t = 0; t < nt; t++) {
				xb[t] = (const struct pg_block_q8_k *)
					(x + (size_t)t * xs) + i;
				s[t] = _mm256_setzero_si256();
			}
#pragma GCC unroll 1	/* one sub-block's code: no spills */
			for (int j = 0; j < 8; j++) {
				__m256i a[KG_TOK];

				/* the next block's weights, 6 of its 41 lines a
				 * sub-block (L1 holds them only for narrow rows) */
#pragma GCC unroll 6
				for (int l = 0; l < 6; l++)
					_mm_prefetch((const char *)(b + 1) + 384 * j + 64 * l,
						     _MM_HINT_T0);

#pragma GCC unroll 4
				for (int t = 0; t < nt; t++)
					a[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
				for (int c = 8 * j; c < 8 * j + 8; c++) {
					__m256i q = _mm256_load_si256(&b->q[c]);

#pragma GCC unroll 4
					for (int t = 0; t < nt; t++)
						a[t] = _mm256_add_epi16(a[t],
							_mm256_maddubs_epi16(q,
								bcast4(xb[t]->qs + 4 * c)));
				}
#pragma GCC unroll 4
				for (int t = 0; t < nt; t++)
					s[t] = _mm256_add_epi32(s[t],
						_mm256_madd_epi16(a[t], b->sc[j]));
			}
#pragma GCC unroll 4
			for (int t = 0; t < nt; t++) {
				__m256i m = _mm256_setzero_si256();
				__m256 dx = _mm256_set1_ps(xb[t]->d);

#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)
					m = _mm256_add_epi32(m, _mm256_madd_epi16(
						b->mn[j], bcast4(&xb[t]->bsums[2 * j])));
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(b->d, dx),
							 _mm256_cvtepi32_ps(s[t]), acc[t]);
				ms[t] = _mm256_fmadd_ps(_mm256_mul_ps(b->dmin, dx),
							_mm256_cvtepi32_ps(m), ms[t]);
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			acc[t] = _mm256_sub_ps(acc[t], ms[t]);
		kg_part_end(cuts, p, out, os, nt, acc, run);
	}
	kg_sums_out(cuts, out, os, nt, run);
}

KG_SWEEP(kg8_sweep, kg8_tokens, struct kg8_block)

/*
 * Super-block i of the 8 Q6_K rows at w into *b: k_row's 6-bit quants
 * (8 vectors of 32 a row) transposed as kg8_repack's; the scales as
 * int16, 8 lanes of pairs a row, transposed into off (pairs 2j, 2j + 1)
 * and spread from there into sc.
 */
static void kg6_repack(const uint8_t *w, size_t ws, int64_t i,
		       struct kg6_block *b)
{
	const uint8_t *w0 = w + (size_t)i * sizeof(struct pg_block_q6_k);

#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i l0[8], l1[8], qh[8], in[8];

#pragma GCC unroll 8
		for (int r = 0; r < 8; r++) {
			const struct pg_block_q6_k *a = (const void *)
				(w0 + (size_t)r * ws);

			l0[r] = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h));
			l1[r] = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h + 32));
			qh[r] = _mm256_loadu_si256((const __m256i *)(a->qh + 32 * h));
		}
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
#pragma GCC unroll 8
			for (int r = 0; r < 8; r++)
				in[r] = _mm256_or_si256(bits_at(c & 1 ? l1[r] : l0[r],
								4 * (c >> 1), 0x0f),
					_mm256_slli_epi16(bits_at(qh[r], 2 * c, 3), 4));
			tr8x8(in, b->q + 32 * h + 8 * c);
		}
	}
	{
		__m256i in[8], lo[8], hi[8];

#pragma GCC unroll 8
		for (int r = 0; r < 8; r++) {
			__m128i sc = _mm_loadu_si128((const __m128i *)
				(w0 + (size_t)r * ws + offsetof(struct pg_block_q6_k,
								scales)));

			in[r] = _mm256_cvtepi8_epi16(sc);
		}
		tr8x8(in, b->off);	/* lane r: row r's scales 2j, 2j + 1 */
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			lo[j] = dup_lo16(b->off[j]);
			hi[j] = dup_hi16(b->off[j]);
		}
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			b->sc[2 * j] = lo[j];
			b->sc[2 * j + 1] = hi[j];
		}
	}
	b->d = f16_rows8(w0 + offsetof(struct pg_block_q6_k, d), ws);
}

/* kg8_tokens for Q6_K: pairs of chunks (4 products of up to 63 x 128:
 * 32256) before each madd; a sub-block's 4 weight vectors loaded once. */
static inline __attribute__((always_inline)) void
kg6_tokens(const struct kg6_block *buf, int64_t nb, const uint8_t *x,
	   size_t xs, int nt, float *out, size_t os,
	   const struct pg_cuts *cuts)
{
	__m256 run[KG_TOK];
	int64_t i = 0;

#pragma GCC unroll 4
	for (int t = 0; t < KG_TOK; t++)
		run[t] = _mm256_setzero_ps();

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		int64_t end = cuts ? cuts->end[p] / (PG_QK_K / PG_QK) : nb;
		__m256 acc[KG_TOK];

#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			acc[t] = _mm256_setzero_ps();
		for (; i < end; i++) {
			const struct kg6_block *b = &buf[i];
			const struct pg_block_q8_k *xb[KG_TOK];
			__m256i s[KG_TOK];

#pragma GCC unroll 4
			for (int t = 0; t < nt; t++) {
				xb[t] = (const struct pg_block_q8_k *)
					(x + (size_t)t * xs) + i;
				s[t] = _mm256_setzero_si256();
			}
#pragma GCC unroll 2	/* no spills */
			for (int j = 0; j < 16; j++) {
				int c = 4 * j;

				/* the next block's weights, 3 of its 45 lines a
				 * sub-block (L1 holds them only for narrow rows) */
				_mm_prefetch((const char *)(b + 1) + 192 * j, _MM_HINT_T0);
				_mm_prefetch((const char *)(b + 1) + 192 * j + 64,
					     _MM_HINT_T0);
				_mm_prefetch((const char *)(b + 1) + 192 * j + 128,
					     _MM_HINT_T0);
				__m256i q0 = _mm256_load_si256(&b->q[c]);
				__m256i q1 = _mm256_load_si256(&b->q[c + 1]);
				__m256i q2 = _mm256_load_si256(&b->q[c + 2]);
				__m256i q3 = _mm256_load_si256(&b->q[c + 3]);
				__m256i sc = _mm256_load_si256(&b->sc[j]);

#pragma GCC unroll 4
				for (int t = 0; t < nt; t++) {
					const int8_t *xq = xb[t]->qs + 4 * c;
					__m256i a0 = _mm256_add_epi16(
						_mm256_maddubs_epi16(q0, bcast4(xq)),
						_mm256_maddubs_epi16(q1, bcast4(xq + 4)));
					__m256i a1 = _mm256_add_epi16(
						_mm256_maddubs_epi16(q2, bcast4(xq + 8)),
						_mm256_maddubs_epi16(q3, bcast4(xq + 12)));

					s[t] = _mm256_add_epi32(s[t], _mm256_add_epi32(
						_mm256_madd_epi16(a0, sc),
						_mm256_madd_epi16(a1, sc)));
				}
			}
#pragma GCC unroll 4
			for (int t = 0; t < nt; t++) {
				__m256i o = _mm256_setzero_si256();

#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)	/* the -32 of every quant */
					o = _mm256_add_epi32(o, _mm256_madd_epi16(
						b->off[j], bcast4(&xb[t]->bsums[2 * j])));
				s[t] = _mm256_sub_epi32(s[t], _mm256_slli_epi32(o, 5));
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(b->d,
						_mm256_set1_ps(xb[t]->d)),
					_mm256_cvtepi32_ps(s[t]), acc[t]);
			}
		}
		kg_part_end(cuts, p, out, os, nt, acc, run);
	}
	kg_sums_out(cuts, out, os, nt, run);
}

KG_SWEEP(kg6_sweep, kg6_tokens, struct kg6_block)

/* Q6_K: repacked from KG8_MIN tokens on (with work), else kq_gemm. */
void pg_gemm8_q6_k_avx2(int64_t n, const void *w, size_t ws, const void *xp,
			int n_tok, float *out, size_t os, void *work,
			const struct pg_cuts *cuts)
{
	struct kg6_block *buf = work;

	if (!work || n_tok < KG8_MIN) {
		kq_gemm(KQ_Q6_K, n, w, ws, xp, n_tok, out, os, cuts);
		return;
	}
	for (int64_t i = 0; i < n / PG_QK_K; i++)
		kg6_repack(w, ws, i, &buf[i]);
	kg6_sweep(buf, n / PG_QK_K, xp, n_tok, out, os, cuts);
}

/* Q4_K: repacked from KG8_MIN tokens on (with work), else kq_gemm. */
void pg_gemm8_q4_k_avx2(int64_t n, const void *w, size_t ws, const void *xp,
			int n_tok, float *out, size_t os, void *work,
			const struct pg_cuts *cuts)
{
	struct kg8_block *buf = work;

	if (!work || n_tok < KG8_MIN) {
		kq_gemm(KQ_Q4_K, n, w, ws, xp, n_tok, out, os, cuts);
		return;
	}
	for (int64_t i = 0; i < n / PG_QK_K; i++)
		kg8_repack(w, ws, i, &buf[i]);
	kg8_sweep(buf, n / PG_QK_K, xp, n_tok, out, os, cuts);
}

#define KQ_GEMM(name, kind)						\
void pg_gemm8_##name##_avx2(int64_t n, const void *w, size_t ws,		\
			    const void *xp, int n_tok, float *out,	\
			    size_t os, void *work,			\
			    const struct pg_cuts *cuts)			\
{									\
	(void)work;							\
	kq_gemm(kind, n, w, ws, xp, n_tok, out, os, cuts);		\
}

KQ_GEMM(q2_k, KQ_Q2_K)
KQ_GEMM(q3_k, KQ_Q3_K)
KQ_GEMM(q5_k, KQ_Q5_K)

KQ_LOOPS(q5_0, KQ_Q5_0)
KQ_LOOPS(q5_1, KQ_Q5_1)
KQ_LOOPS(q2_k, KQ_Q2_K)
KQ_LOOPS(q3_k, KQ_Q3_K)
KQ_LOOPS(q4_k, KQ_Q4_K)
KQ_LOOPS(q5_k, KQ_Q5_K)
KQ_LOOPS(q6_k, KQ_Q6_K)

/*
 * Q8_K activations as pg_quant_q8_k_ref makes them: d = amax / 127, q =
 * x * (127 / amax) rounded half to even (the default rounding of
 * cvtps_epi32), the sums of each 16 q.
 */
void pg_quant_q8_k_avx2(const float *x, void *dst, int64_t n)
{
	struct pg_block_q8_k *b = dst;
	const __m256 sign = _mm256_set1_ps(-0.0f);

	for (int64_t i = 0; i < n / PG_QK_K; i++, x += PG_QK_K) {
		__m256 amax = _mm256_setzero_ps();
		__m128 m;
		float a, id;

		for (int j = 0; j < PG_QK_K; j += 8)
			amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign,
				_mm256_loadu_ps(x + j)));
		m = _mm_max_ps(_mm256_castps256_ps128(amax),
			       _mm256_extractf128_ps(amax, 1));
		m = _mm_max_ps(m, _mm_movehl_ps(m, m));
		m = _mm_max_ss(m, _mm_movehdup_ps(m));
		a = _mm_cvtss_f32(m);
		id = a != 0.0f ? 127.0f / a : 0.0f;
		b[i].d = a / 127.0f;
		for (int j = 0; j < PG_QK_K; j += 32) {
			__m256 idv = _mm256_set1_ps(id);
			__m256i q[4], p;

			for (int k = 0; k < 4; k++)
				q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(
					_mm256_loadu_ps(x + j + 8 * k), idv));
			p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
					       _mm256_packs_epi32(q[2], q[3]));
			p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(
				0, 4, 1, 5, 2, 6, 3, 7));
			_mm256_storeu_si256((__m256i *)(b[i].qs + j), p);
			/* the two 16s: int16 pairs summed, then halves */
			__m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), p);
			__m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
			__m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32),
				_mm_shuffle_epi32(_mm256_castsi256_si128(s32), 0x4e));
			__m128i g = _mm_add_epi32(_mm256_extracti128_si256(s32, 1),
				_mm_shuffle_epi32(_mm256_extracti128_si256(s32, 1), 0x4e));

			h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
			g = _mm_add_epi32(g, _mm_shuffle_epi32(g, 0xb1));
			b[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(h);
			b[i].bsums[j / 16 + 1] = (int16_t)_mm_cvtsi128_si32(g);
		}
	}
}
