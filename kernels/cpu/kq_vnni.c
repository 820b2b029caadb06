/*
 * kq_vnni.c - AVX-512 VNNI batched matmul of the K-quants (Q2_K .. Q6_K), 16
 * rows x many tokens, in pagoda's numerics: the loops of the avx512vnni
 * table that kq_avx2.c's repacked 8-row loops are in the AVX2 one, bit
 * for bit their results.
 *
 * The super-blocks are repacked into work 16 rows at once, the layout of
 * kq_avx2.c's 8-row blocks widened: chunk c (values 4c .. 4c + 3) of row
 * r in 32-bit lane r of one zmm register.  A chunk of 4 activation bytes is one vpdpbusd of the 64
 * weight bytes of its 16 rows, so a sub-block's products sum straight
 * into int32 (Q4_K: 32 of up to 15 x 128; Q6_K: 16 of up to 63 x 128:
 * far from overflow), where the AVX2 loops sum pairs in int16 and widen
 * with madd by the scales; here the sub-block's sum is multiplied by its
 * scale in int32 (vpmulld).  The integers are exact either way, so each
 * row's super-block integer is the AVX2 loops' one; the mins (Q4_K) and
 * the -32 offsets (Q6_K) go against Q8_K's bsums by madd exactly as
 * there, and the floats follow in the same order, lane by lane.
 *
 * GK tokens a pass: each weight vector is loaded once for them and used
 * at once; each token's sub-block sum runs in two chains (even and odd
 * chunks), 2 GK chains in flight to cover vpdpbusd's latency.  Below
 * KG16_MIN tokens, or without work, the AVX2 loop runs each half of the
 * rows (what pays there: no repacking).
 *
 * Compiled with -mavx2 -mfma -mf16c -mavx512f/bw/vl/dq -mavx512vnni;
 * reached only through the avx512vnni table.
 */
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/vnni16.h"

#define GK 8		/* tokens a pass */
#define KG16_MIN 16	/* tokens from which the repacking pays */

/* Q4_K (Q5_K, Q2_K), 16 rows: kq_avx2.c's kg8_block widened, the scales
 * as int32. */
struct kq16_q4_k {
	__m512i q[64];		/* chunk c of the 16 rows */
	__m512i sc[8];		/* sub-block j's scale, row r in lane r */
	__m512i mn[8];		/* its mins, int16 pairs against the bsum pairs */
	__m512 d, dmin;
};

/* Q6_K (Q3_K), 16 rows: kq_avx2.c's kg6_block widened, the scales as
 * int32. */
struct kq16_q6_k {
	__m512i q[64];
	__m512i sc[16];		/* sub-block j's (signed) scale, row r in lane r */
	__m512i off[8];		/* lane r: row r's scales 2j, 2j + 1 (int16) */
	__m512 d;
};

_Static_assert(sizeof(struct kq16_q4_k) <= PG_GEMM16_KWORK &&
	       sizeof(struct kq16_q6_k) <= PG_GEMM16_KWORK,
	       "PG_GEMM16_KWORK holds a joined Q4_K or Q6_K super-block");

/* A row's int16 scale, repeated in both halves of its 32-bit lane, as an
 * int32: unsigned (Q4_K's 6 bits) or sign-extended (Q6_K's int8). */
static inline __m512i scale32(__m512i pair, int is_signed)
{
	return is_signed ? _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16) :
	       _mm512_and_si512(pair, _mm512_set1_epi32(0xffff));
}

/*
 * Every type's super-block goes straight to 16 rows: each row's 32 values
 * 32g .. 32g + 31 unpacked to bytes in value order and the 16 rows
 * transposed into chunks 8g .. 8g + 7 (two of kq_avx2.c's 8-row blocks
 * joined cost more: their repack, then a copy).
 */

/* 32 bytes of v >> shift, masked to the low `mask` bits (bytes). */
static inline __m256i bits_at(__m256i v, int shift, int mask)
{
	return _mm256_and_si256(_mm256_srli_epi16(v, shift),
				_mm256_set1_epi8((char)mask));
}

/* Q4_K / Q5_K's 6-bit scales and mins (pg_scale_min_k4) from the 12
 * bytes at q: sc[j] in byte j of *sc, m[j] of *m (kq_avx2.c's). */
static inline void scale_min_k4x8(const uint8_t *q, uint64_t *sc,
				  uint64_t *m)
{
	uint32_t u[3], s_hi, m_hi;

	__builtin_memcpy(u, q, sizeof(u));
	s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
	m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
	*sc = (uint64_t)(u[0] & 0x3f3f3f3fu) | (uint64_t)s_hi << 32;
	*m = (uint64_t)(u[1] & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

/* Q3_K's 16 scales (pg_scale_q3_k, in [-32, 31]) as 16 int8 (kq_avx2.c's). */
static inline __m128i scales_q3_k(const uint8_t *s)
{
	uint32_t a[3], v[4];

	__builtin_memcpy(a, s, sizeof(a));
	v[0] = (a[0] & 0x0f0f0f0fu) | (a[2] & 0x03030303u) << 4;
	v[1] = (a[1] & 0x0f0f0f0fu) | ((a[2] >> 2) & 0x03030303u) << 4;
	v[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 4) & 0x03030303u) << 4;
	v[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 6) & 0x03030303u) << 4;
	return _mm_sub_epi8(_mm_loadu_si128((const __m128i *)v),
			    _mm_set1_epi8(32));
}

/* The int16 pairs of 32-bit lanes: the low one, the high one (signed or
 * not) as int32; and either spread to both halves (against bsum pairs). */
static inline __m512i lo16(__m512i v, int is_signed)
{
	return is_signed ? _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16) :
	       _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
}

static inline __m512i hi16(__m512i v, int is_signed)
{
	return is_signed ? _mm512_srai_epi32(v, 16) : _mm512_srli_epi32(v, 16);
}

static inline __m512i dup16(__m512i v32)
{
	return _mm512_or_si512(v32, _mm512_slli_epi32(v32, 16));
}

/*
 * Super-block i of the 16 Q4_K (Q5_K: qh, the fifth bits) rows at w, of
 * block size bs, into *o: each row's sub-block g unpacked to bytes and the
 * 16 rows transposed into chunks 8g .. 8g + 7.
 */
static inline __attribute__((always_inline)) void
repack16_q45_k(const uint8_t *w, size_t ws, int64_t i, size_t bs,
	       size_t qs_at, int has_qh, size_t sc_at, size_t d_at,
	       struct kq16_q4_k *o)
{
	const uint8_t *w0 = w + (size_t)i * bs;
	__m256i in[16];
	__m512i out[8];

#pragma GCC unroll 1
	for (int g = 0; g < 8; g++) {	/* sub-block g: values 32g .. */
#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			const uint8_t *a = w0 + (size_t)r * ws;
			__m256i q = _mm256_loadu_si256((const __m256i *)(a + qs_at + 32 * (g >> 1)));
			__m256i v = g & 1 ? bits_at(q, 4, 0x0f) :
				    _mm256_and_si256(q, _mm256_set1_epi8(0x0f));

			if (has_qh) {
				__m256i h = _mm256_loadu_si256((const __m256i *)
					(a + offsetof(struct pg_block_q5_k, qh)));

				v = _mm256_or_si256(v, _mm256_slli_epi16(bits_at(h, g, 1), 4));
			}
			in[r] = v;
		}
		tr16(in, o->q + 8 * g);
	}
#pragma GCC unroll 16
	for (int r = 0; r < 16; r++) {
		uint64_t sc, mn;

		scale_min_k4x8(w0 + (size_t)r * ws + sc_at, &sc, &mn);
		in[r] = _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mn,
							    (long long)sc));
	}
	tr16(in, out);	/* out[j]: pairs 2j, 2j + 1 (scales j < 4, then mins) */
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		o->sc[2 * j] = lo16(out[j], 0);
		o->sc[2 * j + 1] = hi16(out[j], 0);
		o->mn[2 * j] = dup16(lo16(out[j + 4], 0));
		o->mn[2 * j + 1] = dup16(hi16(out[j + 4], 0));
	}
	o->d = f16_rows16(w0 + d_at, ws);
	o->dmin = f16_rows16(w0 + d_at + 2, ws);
}

static void repack16_q5_k(const uint8_t *w, size_t ws, int64_t i,
			  struct kq16_q4_k *o)
{
	repack16_q45_k(w, ws, i, sizeof(struct pg_block_q5_k),
		       offsetof(struct pg_block_q5_k, qs), 1,
		       offsetof(struct pg_block_q5_k, scales),
		       offsetof(struct pg_block_q5_k, d), o);
}

static void repack16_q4_k(const uint8_t *w, size_t ws, int64_t i,
				struct kq16_q4_k *o)
{
	repack16_q45_k(w, ws, i, sizeof(struct pg_block_q4_k),
		       offsetof(struct pg_block_q4_k, qs), 0,
		       offsetof(struct pg_block_q4_k, scales),
		       offsetof(struct pg_block_q4_k, d), o);
}

/* Super-block i of the 16 Q6_K rows at w into *o, straight: value l of
 * each quarter from ql's nibble and qh's 2 bits (dequantize's order). */
static void repack16_q6_k(const uint8_t *w, size_t ws, int64_t i,
				struct kq16_q6_k *o)
{
	const uint8_t *w0 = w + (size_t)i * sizeof(struct pg_block_q6_k);
	__m256i in[16];

#pragma GCC unroll 1
	for (int g = 0; g < 8; g++) {	/* values 128h + 32c .. */
		int h = g >> 2, c = g & 3;

#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			const struct pg_block_q6_k *a = (const void *)(w0 + (size_t)r * ws);
			__m256i l = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h + 32 * (c & 1)));
			__m256i hb = _mm256_loadu_si256((const __m256i *)(a->qh + 32 * h));
			__m256i lo = c & 2 ? bits_at(l, 4, 0x0f) :
				     _mm256_and_si256(l, _mm256_set1_epi8(0x0f));

			in[r] = _mm256_or_si256(lo, _mm256_slli_epi16(bits_at(hb, 2 * c, 3), 4));
		}
		tr16(in, o->q + 8 * g);
	}
#pragma GCC unroll 16
	for (int r = 0; r < 16; r++)
		in[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)
			(w0 + (size_t)r * ws + offsetof(struct pg_block_q6_k, scales))));
	tr16(in, o->off);	/* lane r: row r's scales 2j, 2j + 1 */
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		o->sc[2 * j] = lo16(o->off[j], 1);
		o->sc[2 * j + 1] = hi16(o->off[j], 1);
	}
	o->d = f16_rows16(w0 + offsetof(struct pg_block_q6_k, d), ws);
}

/* Super-block i of the 16 Q3_K rows at w into *o (Q6_K's layout, u in
 * [0, 7], offset 4). */
static void repack16_q3_k(const uint8_t *w, size_t ws, int64_t i,
			  struct kq16_q6_k *o)
{
	const uint8_t *w0 = w + (size_t)i * sizeof(struct pg_block_q3_k);
	__m256i in[16];

#pragma GCC unroll 1
	for (int g = 0; g < 8; g++) {	/* values 128h + 32c .. */
		int h = g >> 2, c = g & 3;

#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			const struct pg_block_q3_k *a = (const void *)(w0 + (size_t)r * ws);
			__m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * h));
			__m256i hm = _mm256_loadu_si256((const __m256i *)a->hmask);

			in[r] = _mm256_or_si256(bits_at(q, 2 * c, 3),
				_mm256_slli_epi16(bits_at(hm, g, 1), 2));
		}
		tr16(in, o->q + 8 * g);
	}
#pragma GCC unroll 16
	for (int r = 0; r < 16; r++)
		in[r] = _mm256_cvtepi8_epi16(scales_q3_k(w0 + (size_t)r * ws +
			offsetof(struct pg_block_q3_k, scales)));
	tr16(in, o->off);	/* lane r: row r's scales 2j, 2j + 1 */
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		o->sc[2 * j] = lo16(o->off[j], 1);
		o->sc[2 * j + 1] = hi16(o->off[j], 1);
	}
	o->d = f16_rows16(w0 + offsetof(struct pg_block_q3_k, d), ws);
}

/*
 * Super-block i of the 16 Q2_K rows at w into *o (Q4_K's layout, sc
 * unused): each quant times its sub-block's scale, at most 3 x 15 = 45,
 * still one unsigned byte, so that a super-block's products sum in one
 * run of vpdpbusd (the same integer: sc x (sum of q x) = sum of (sc q) x);
 * mn[j] lane r: row r's mins 2j, 2j + 1 against those bsums.
 */
static void repack16_q2_k(const uint8_t *w, size_t ws, int64_t i,
			  struct kq16_q4_k *o)
{
	const uint8_t *w0 = w + (size_t)i * sizeof(struct pg_block_q2_k);
	__m256i in[16];

#pragma GCC unroll 1
	for (int g = 0; g < 8; g++) {	/* values 128h + 32c ..: sub-blocks 2g, 2g + 1 */
		int h = g >> 2, c = g & 3;

#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			const struct pg_block_q2_k *a = (const void *)(w0 + (size_t)r * ws);
			__m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * h));
			/* each byte's product < 256: an int16 multiply by the
			 * scale keeps the two bytes of a lane apart */
			__m256i s = _mm256_set_m128i(
				_mm_set1_epi16((short)(a->scales[2 * g + 1] & 15)),
				_mm_set1_epi16((short)(a->scales[2 * g] & 15)));

			in[r] = _mm256_mullo_epi16(bits_at(q, 2 * c, 3), s);
		}
		tr16(in, o->q + 8 * g);
	}
	{
		__m512i out[8];

#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			__m128i sc = _mm_loadu_si128((const __m128i *)
				(w0 + (size_t)r * ws + offsetof(struct pg_block_q2_k, scales)));

			in[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4),
							       _mm_set1_epi8(15)));
		}
		tr16(in, out);
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++)
			o->mn[j] = out[j];
	}
	o->d = f16_rows16(w0 + offsetof(struct pg_block_q2_k, d), ws);
	o->dmin = f16_rows16(w0 + offsetof(struct pg_block_q2_k, dmin), ws);
}

/* 4 bytes at p in all 16 lanes. */
static inline __m512i bc4(const void *p)
{
	int32_t v;

	__builtin_memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/*
 * Chunks c0 .. c0 + nc - 1 (nc even) of super-block b against the nt
 * tokens' Q8_K blocks xb[t]: each token's int32 sum, in two chains.
 */
#define SUB_SUM(b, c0, nc, xb, nt, a)					\
	do {								\
		__m512i a1_[GK];					\
									\
		_Pragma("GCC unroll 8")					\
		for (int t = 0; t < (nt); t++)				\
			(a)[t] = a1_[t] = _mm512_setzero_si512();	\
		_Pragma("GCC unroll 8")					\
		for (int c = (c0); c < (c0) + (nc); c += 2) {		\
			__m512i q0 = _mm512_load_si512(&(b)->q[c]);	\
			__m512i q1 = _mm512_load_si512(&(b)->q[c + 1]);	\
									\
			_Pragma("GCC unroll 8")				\
			for (int t = 0; t < (nt); t++) {		\
				(a)[t] = _mm512_dpbusd_epi32((a)[t], q0,\
					bc4((xb)[t]->qs + 4 * c));	\
				a1_[t] = _mm512_dpbusd_epi32(a1_[t], q1,\
					bc4((xb)[t]->qs + 4 * c + 4));	\
			}						\
		}							\
		_Pragma("GCC unroll 8")					\
		for (int t = 0; t < (nt); t++)				\
			(a)[t] = _mm512_add_epi32((a)[t], a1_[t]);	\
	} while (0)

/* The end of cut p of nt tokens' sums v: stored, or added to run. */
static inline __attribute__((always_inline)) void
part_end16(const struct pg_cuts *cuts, int p, float *out, size_t os, int nt,
	   const __m512 *v, __m512 *run)
{
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++) {
		if (!pg_cuts_summed(cuts))
			_mm512_storeu_ps(pg_cuts_out(cuts, p, out) +
					 (size_t)t * os, v[t]);
		else
			run[t] = p ? _mm512_add_ps(run[t], v[t]) : v[t];
	}
}

static inline __attribute__((always_inline)) void
sums_out16(const struct pg_cuts *cuts, float *out, size_t os, int nt,
	   const __m512 *run)
{
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			_mm512_storeu_ps(out + (size_t)t * os, run[t]);
}

/*
 * nt (<= GK) Q4_K (Q5_K) tokens at x, xs bytes apart, against buf; pre:
 * Q2_K's, whose quants come multiplied by their scales (no sc).
 */
static inline __attribute__((always_inline)) void
tokens_mins(const struct kq16_q4_k *buf, int64_t nb, const uint8_t *x,
	    size_t xs, int nt, float *out, size_t os,
	    const struct pg_cuts *cuts, int pre)
{
	__m512 run[GK];
	int64_t i = 0;

#pragma GCC unroll 8
	for (int t = 0; t < GK; t++)
		run[t] = _mm512_setzero_ps();

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		int64_t end = cuts ? cuts->end[p] / (PG_QK_K / PG_QK) : nb;
		__m512 acc[GK], ms[GK];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			acc[t] = ms[t] = _mm512_setzero_ps();
		for (; i < end; i++) {
			const struct kq16_q4_k *b = &buf[i];
			const struct pg_block_q8_k *xb[GK];
			__m512i s[GK];

#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				xb[t] = (const struct pg_block_q8_k *)
					(x + (size_t)t * xs) + i;
				s[t] = _mm512_setzero_si512();
			}
#pragma GCC unroll 1
			for (int j = 0; j < 8; j++) {	/* sub-blocks of 32 */
				__m512i a[GK];

				SUB_SUM(b, 8 * j, 8, xb, nt, a);
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++)
					s[t] = _mm512_add_epi32(s[t], pre ? a[t] :
						_mm512_mullo_epi32(a[t],
							_mm512_load_si512(&b->sc[j])));
			}
#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				__m512i m = _mm512_setzero_si512();
				__m512 dx = _mm512_set1_ps(xb[t]->d);

#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)
					m = _mm512_add_epi32(m, _mm512_madd_epi16(
						b->mn[j], bc4(&xb[t]->bsums[2 * j])));
				acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(b->d, dx),
							 _mm512_cvtepi32_ps(s[t]), acc[t]);
				ms[t] = _mm512_fmadd_ps(_mm512_mul_ps(b->dmin, dx),
							_mm512_cvtepi32_ps(m), ms[t]);
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			acc[t] = _mm512_sub_ps(acc[t], ms[t]);
		part_end16(cuts, p, out, os, nt, acc, run);
	}
	sums_out16(cuts, out, os, nt, run);
}

/*
 * nt (<= GK) Q6_K (Q3_K) tokens at x, xs bytes apart, against buf; the
 * quants' offset 1 << sh (32: sh 5; Q3_K's 4: sh 2).
 */
static inline __attribute__((always_inline)) void
tokens_off(const struct kq16_q6_k *buf, int64_t nb, const uint8_t *x,
	   size_t xs, int nt, float *out, size_t os,
	   const struct pg_cuts *cuts, int sh)
{
	__m512 run[GK];
	int64_t i = 0;

#pragma GCC unroll 8
	for (int t = 0; t < GK; t++)
		run[t] = _mm512_setzero_ps();

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		int64_t end = cuts ? cuts->end[p] / (PG_QK_K / PG_QK) : nb;
		__m512 acc[GK];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			acc[t] = _mm512_setzero_ps();
		for (; i < end; i++) {
			const struct kq16_q6_k *b = &buf[i];
			const struct pg_block_q8_k *xb[GK];
			__m512i s[GK];

#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				xb[t] = (const struct pg_block_q8_k *)
					(x + (size_t)t * xs) + i;
				s[t] = _mm512_setzero_si512();
			}
#pragma GCC unroll 1
			for (int j = 0; j < 16; j++) {	/* sub-blocks of 16 */
				__m512i a[GK];
				__m512i sc = _mm512_load_si512(&b->sc[j]);

				SUB_SUM(b, 4 * j, 4, xb, nt, a);
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++)
					s[t] = _mm512_add_epi32(s[t],
						_mm512_mullo_epi32(a[t], sc));
			}
#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				__m512i o = _mm512_setzero_si512();

#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)	/* the -32 of every quant */
					o = _mm512_add_epi32(o, _mm512_madd_epi16(
						b->off[j], bc4(&xb[t]->bsums[2 * j])));
				s[t] = _mm512_sub_epi32(s[t], _mm512_slli_epi32(o, sh));
				acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(b->d,
						_mm512_set1_ps(xb[t]->d)),
					_mm512_cvtepi32_ps(s[t]), acc[t]);
			}
		}
		part_end16(cuts, p, out, os, nt, acc, run);
	}
	sums_out16(cuts, out, os, nt, run);
}

/* Every token through TOKENS, GK a pass, the rest with a constant count. */
#define SWEEP16(NAME, TOKENS, BLOCK)					\
static void NAME(const BLOCK *buf, int64_t nb, const uint8_t *x,	\
		 int n_tok, float *out, size_t os,			\
		 const struct pg_cuts *cuts)				\
{									\
	size_t xs = (size_t)nb * sizeof(struct pg_block_q8_k);		\
	int t = 0;							\
									\
	for (; t + GK <= n_tok; t += GK)				\
		TOKENS(buf, nb, x + (size_t)t * xs, xs, GK,		\
		       out + (size_t)t * os, os, cuts);			\
	x += (size_t)t * xs;						\
	out += (size_t)t * os;						\
	switch (n_tok - t) {						\
	case 7: TOKENS(buf, nb, x, xs, 7, out, os, cuts); break;	\
	case 6: TOKENS(buf, nb, x, xs, 6, out, os, cuts); break;	\
	case 5: TOKENS(buf, nb, x, xs, 5, out, os, cuts); break;	\
	case 4: TOKENS(buf, nb, x, xs, 4, out, os, cuts); break;	\
	case 3: TOKENS(buf, nb, x, xs, 3, out, os, cuts); break;	\
	case 2: TOKENS(buf, nb, x, xs, 2, out, os, cuts); break;	\
	case 1: TOKENS(buf, nb, x, xs, 1, out, os, cuts); break;	\
	default: break;							\
	}								\
}

#define TOKENS16(NAME, BASE, BLOCK, ARG)				\
static inline __attribute__((always_inline)) void			\
NAME(const BLOCK *buf, int64_t nb, const uint8_t *x, size_t xs, int nt,\
     float *out, size_t os, const struct pg_cuts *cuts)			\
{									\
	BASE(buf, nb, x, xs, nt, out, os, cuts, ARG);			\
}

TOKENS16(tokens_q4_k, tokens_mins, struct kq16_q4_k, 0)
TOKENS16(tokens_q2_k, tokens_mins, struct kq16_q4_k, 1)
TOKENS16(tokens_q6_k, tokens_off, struct kq16_q6_k, 5)
TOKENS16(tokens_q3_k, tokens_off, struct kq16_q6_k, 2)

SWEEP16(sweep16_q4_k, tokens_q4_k, struct kq16_q4_k)
SWEEP16(sweep16_q2_k, tokens_q2_k, struct kq16_q4_k)
SWEEP16(sweep16_q6_k, tokens_q6_k, struct kq16_q6_k)
SWEEP16(sweep16_q3_k, tokens_q3_k, struct kq16_q6_k)

#define KQ_GEMM16(name, BLOCK, SWEEP)					\
void pg_gemm16_##name##_vnni(int64_t n, const void *w, size_t ws,	\
			     const void *xp, int n_tok, float *out,	\
			     size_t os, void *work,			\
			     const struct pg_cuts *cuts)		\
{									\
	BLOCK *buf = work;						\
									\
	if (!work || n_tok < KG16_MIN) {				\
		pg_gemm8_##name##_avx2(n, w, ws, xp, n_tok, out, os,	\
				       NULL, cuts);			\
		pg_gemm8_##name##_avx2(n, (const uint8_t *)w + 8 * ws,	\
				       ws, xp, n_tok, out + 8, os,	\
				       NULL, cuts);			\
		return;							\
	}								\
	for (int64_t i = 0; i < n / PG_QK_K; i++)			\
		repack16_##name(w, ws, i, &buf[i]);			\
	SWEEP(buf, n / PG_QK_K, xp, n_tok, out, os, cuts);		\
}

KQ_GEMM16(q4_k, struct kq16_q4_k, sweep16_q4_k)
KQ_GEMM16(q6_k, struct kq16_q6_k, sweep16_q6_k)
KQ_GEMM16(q5_k, struct kq16_q4_k, sweep16_q4_k)
KQ_GEMM16(q3_k, struct kq16_q6_k, sweep16_q3_k)
KQ_GEMM16(q2_k, struct kq16_q4_k, sweep16_q2_k)

/* ---- K-quants packed once, at load time (pg_cpu_q4x8_pack) ----
 *
 * Repacking a group of rows for every call costs a quarter of a 16-token
 * matmul (Q4_K 27%, Q6_K 29%), and a decode cannot take the repacked
 * form (twice the file's bytes, where a decode is bound by the bytes it
 * reads).  So the avx512vnni table also offers the K-quants packed once,
 * in groups of 16 rows, at about the file's size: per super-block the
 * 16 rows' chunks as above, two to a byte (low nibble: chunk 2k, high:
 * 2k + 1), the high bits in planes of their own, the scales as bytes in
 * row order and the F16 d side by side.  A sweep unpacks a vector with
 * two or three logic operations, once for all its tokens; the integers
 * and the order of the floats are those of the loops above, so the bits
 * are too, for every token count (the decode included).
 */

/* Q4_K, Q5_K: the scales first, then the sub-blocks, each read from
 * one stream. */
struct kx16_head {
	uint8_t sc[8][16];	/* sc[j][r]: row r's sub-block j scale */
	uint8_t mn[8][16];	/* and its min */
	uint16_t d[16], dmin[16];	/* row r's, F16 */
};

/* Q4_K: 148 bytes a row and super-block (the file: 144); sub-block j's
 * q[j][k], lane r: row r's chunk 8j + 2k (low nibbles), 8j + 2k + 1
 * (high). */
struct kx16_q4_k {
	struct kx16_head h;
	uint8_t q[8][4][64];
};

/* Q5_K: 180 bytes a row (the file: 176); sub-block j's chunks as Q4_K's,
 * then its fifth bits: bit i of lane r's bytes of hb, that of chunk
 * 8j + i of row r. */
struct kx16_q5_k {
	struct kx16_head h;
	struct {
		uint8_t q[4][64];
		uint8_t hb[64];
	} s[8];
};

/* Q6_K: 212 bytes a row (the file: 210); sub-block j (chunks 4j ..
 * 4j + 3): the low nibbles as Q4_K's, then the high 2 bits of chunk
 * 4j + i at bits 2i, 2i + 1 of lane r's bytes of qh. */
struct kx16_q6_k {
	int8_t sc[16][16];	/* sc[j][r]: row r's sub-block j scale */
	uint16_t d[16];
	uint8_t pad[32];	/* to a whole number of cache lines */
	struct {
		uint8_t ql[2][64];
		uint8_t qh[64];
	} s[16];
};

_Static_assert(sizeof(struct kx16_q4_k) == PG_KX16_BYTES(PG_Q4_K) &&
	       sizeof(struct kx16_q5_k) == PG_KX16_BYTES(PG_Q5_K) &&
	       sizeof(struct kx16_q6_k) == PG_KX16_BYTES(PG_Q6_K),
	       "PG_KX16_BYTES is the packed super-blocks' size");

/* Sub-block j's vector k of a packed Q4_K (q5: Q5_K) super-block at b,
 * and (Q5_K) its fifth bits. */
static inline const uint8_t *kx16_q(const void *b, int q5, int j, int k)
{
	const struct kx16_q5_k *b5 = b;
	const struct kx16_q4_k *b4 = b;

	return q5 ? b5->s[j].q[k] : b4->q[j][k];
}

/* Two chunks' bytes (values < 16 each) as one vector of nibbles. */
static inline __m512i nibbles(__m512i lo, __m512i hi)
{
	return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

/* Row r's 32-bit lane of the int32 vector v as a byte, r < 16. */
static inline void bytes16(__m512i v, void *o)
{
	_mm_storeu_si128(o, _mm512_cvtepi32_epi8(v));
}

static void kx16_pack_q45_k(const uint8_t *w, size_t ws, int64_t nb,
			    int q5, uint8_t *dst)
{
	struct kq16_q4_k t;
	size_t bs = q5 ? sizeof(struct pg_block_q5_k) :
		    sizeof(struct pg_block_q4_k);

	for (int64_t i = 0; i < nb; i++) {
		uint8_t *ob = dst + (size_t)i * (q5 ? sizeof(struct kx16_q5_k) :
						sizeof(struct kx16_q4_k));
		struct kx16_head *o = (void *)ob;

		if (q5)
			repack16_q5_k(w, ws, i, &t);
		else
			repack16_q4_k(w, ws, i, &t);
		for (int k = 0; k < 32; k++)
			_mm512_storeu_si512((void *)kx16_q(ob, q5, k / 4, k % 4), nibbles(
				_mm512_and_si512(t.q[2 * k], _mm512_set1_epi8(15)),
				_mm512_and_si512(t.q[2 * k + 1], _mm512_set1_epi8(15))));
		for (int j = 0; j < 8; j++) {
			bytes16(t.sc[j], o->sc[j]);
			/* mn[j]: the min in both int16 halves */
			bytes16(_mm512_and_si512(t.mn[j], _mm512_set1_epi32(0xffff)),
				o->mn[j]);
		}
		for (int r = 0; r < 16; r++) {
			const uint8_t *a = w + (size_t)r * ws + (size_t)i * bs +
					   (q5 ? offsetof(struct pg_block_q5_k, d) :
					    offsetof(struct pg_block_q4_k, d));

			o->d[r] = load16(a);
			o->dmin[r] = load16(a + 2);
		}
		if (!q5)
			continue;
		for (int j = 0; j < 8; j++) {	/* chunks 8j .. 8j + 7 */
			__m512i h = _mm512_setzero_si512();

			for (int c = 0; c < 8; c++)
				h = _mm512_or_si512(h, _mm512_slli_epi16(
					_mm512_and_si512(_mm512_srli_epi16(t.q[8 * j + c], 4),
							 _mm512_set1_epi8(1)), c));
			_mm512_storeu_si512(((struct kx16_q5_k *)ob)->s[j].hb, h);
		}
	}
}

static void kx16_pack_q6_k(const uint8_t *w, size_t ws, int64_t nb,
			   uint8_t *dst)
{
	struct kq16_q6_k t;

	for (int64_t i = 0; i < nb; i++) {
		struct kx16_q6_k *o = (void *)(dst + (size_t)i * sizeof(*o));

		repack16_q6_k(w, ws, i, &t);
		for (int k = 0; k < 32; k++)
			_mm512_storeu_si512(o->s[k / 2].ql[k % 2], nibbles(
				_mm512_and_si512(t.q[2 * k], _mm512_set1_epi8(15)),
				_mm512_and_si512(t.q[2 * k + 1], _mm512_set1_epi8(15))));
		for (int j = 0; j < 16; j++) {
			__m512i h = _mm512_setzero_si512();

			for (int c = 0; c < 4; c++)
				h = _mm512_or_si512(h, _mm512_slli_epi16(
					_mm512_and_si512(_mm512_srli_epi16(t.q[4 * j + c], 4),
							 _mm512_set1_epi8(3)), 2 * c));
			_mm512_storeu_si512(o->s[j].qh, h);
			bytes16(t.sc[j], o->sc[j]);
		}
		memset(o->pad, 0, sizeof(o->pad));
		for (int r = 0; r < 16; r++)
			o->d[r] = load16(w + (size_t)r * ws + (size_t)i *
					 sizeof(struct pg_block_q6_k) +
					 offsetof(struct pg_block_q6_k, d));
	}
}

void pg_kx16_pack_vnni(enum pg_dtype t, const void *w, size_t ws,
		       int64_t n, void *dst)
{
	switch (t) {
	case PG_Q4_K: kx16_pack_q45_k(w, ws, n / PG_QK_K, 0, dst); break;
	case PG_Q5_K: kx16_pack_q45_k(w, ws, n / PG_QK_K, 1, dst); break;
	case PG_Q6_K: kx16_pack_q6_k(w, ws, n / PG_QK_K, dst); break;
	default: break;
	}
}

/* Chunk pair k of a packed vector v: the low nibbles, the high ones. */
static inline __m512i nib_lo(__m512i v)
{
	return _mm512_and_si512(v, _mm512_set1_epi8(15));
}

static inline __m512i nib_hi(__m512i v)
{
	return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15));
}

/* Bits of each byte of h moved from bit `from` up or down to bit `to`,
 * `mask` (at `to`) kept, or'ed into q. */
static inline __m512i put_bits(__m512i q, __m512i h, int from, int to,
			       int mask)
{
	__m512i s = to >= from ? _mm512_slli_epi16(h, to - from) :
		    _mm512_srli_epi16(h, from - to);

	return _mm512_ternarylogic_epi32(q, s, _mm512_set1_epi8((char)mask),
					 0xf8);	/* q | (s & mask) */
}

/* The sum of one token over two chunks' vectors q0, q1 (chunks c, c + 1),
 * into a and a1 (or twice into one chain). */
#define DP2(a, a1, q0, q1, xq, c)					\
	do {								\
		(a) = _mm512_dpbusd_epi32((a), (q0), bc4((xq) + 4 * (c)));\
		(a1) = _mm512_dpbusd_epi32((a1), (q1), bc4((xq) + 4 * (c) + 4));\
	} while (0)

/*
 * nt (<= GK) Q4_K (Q5_K: q5) tokens at x, xs bytes apart, against ng (1
 * or 2) packed groups of 16 rows at w (bsz bytes a super-block; group g
 * at w + g nb bsz, its rows' sums at out + 16 g): tokens_mins' sums and
 * floats.  With two groups each token's broadcast chunk serves both
 * groups' vpdpbusd, where one group loads it for each: the loads, not the
 * multiplies, bound the one-group loop (a load a vpdpbusd halves its
 * rate on the cores measured).  Integers exact, floats in the same order
 * lane by lane: the bits of one group twice.
 */
static inline __attribute__((always_inline)) void
ptokens_mins(const uint8_t *w, size_t bsz, int q5, int64_t nb, int ng,
	     const uint8_t *x, size_t xs, int nt, float *out, size_t os,
	     const struct pg_cuts *cuts)
{
	size_t gs = (size_t)nb * bsz;	/* a group's bytes */
	__m512 run[2][GK];
	int64_t i = 0;

#pragma GCC unroll 2
	for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
		for (int t = 0; t < GK; t++)
			run[g][t] = _mm512_setzero_ps();

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		int64_t end = cuts ? cuts->end[p] / (PG_QK_K / PG_QK) : nb;
		__m512 acc[2][GK], ms[2][GK];

#pragma GCC unroll 2
		for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
			for (int t = 0; t < nt; t++)
				acc[g][t] = ms[g][t] = _mm512_setzero_ps();
		for (; i < end; i++) {
			const uint8_t *b[2] = { w + (size_t)i * bsz,
						w + (size_t)i * bsz + gs };
			const struct pg_block_q8_k *xb[GK];
			__m512i s[2][GK], m[2][GK];

#pragma GCC unroll 8
			for (int t = 0; t < nt; t++)
				xb[t] = (const struct pg_block_q8_k *)
					(x + (size_t)t * xs) + i;
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++)
					s[g][t] = _mm512_setzero_si512();
#pragma GCC unroll 1
			for (int j = 0; j < 8; j++) {	/* sub-blocks of 32 */
				__m512i a[2][GK], h[2];

#pragma GCC unroll 2
				for (int g = 0; g < ng; g++) {
					h[g] = q5 ? _mm512_loadu_si512(
						((const struct kx16_q5_k *)b[g])->s[j].hb) :
						_mm512_setzero_si512();
#pragma GCC unroll 8
					for (int t = 0; t < nt; t++)
						a[g][t] = _mm512_setzero_si512();
				}
#pragma GCC unroll 4
				for (int k = 0; k < 4; k++) {	/* chunks 8j + 2k, + 1 */
					__m512i q0[2], q1[2];

#pragma GCC unroll 2
					for (int g = 0; g < ng; g++) {
						__m512i v = _mm512_loadu_si512(
							kx16_q(b[g], q5, j, k));

						q0[g] = nib_lo(v), q1[g] = nib_hi(v);
						if (q5) {
							q0[g] = put_bits(q0[g], h[g], 2 * k, 4, 0x10);
							q1[g] = put_bits(q1[g], h[g], 2 * k + 1, 4, 0x10);
						}
					}
#pragma GCC unroll 8
					for (int t = 0; t < nt; t++) {
						const int8_t *xq = xb[t]->qs + 4 * (8 * j + 2 * k);
						__m512i x0 = bc4(xq), x1 = bc4(xq + 4);

#pragma GCC unroll 2
						for (int g = 0; g < ng; g++) {
							a[g][t] = _mm512_dpbusd_epi32(a[g][t], q0[g], x0);
							a[g][t] = _mm512_dpbusd_epi32(a[g][t], q1[g], x1);
						}
					}
				}
#pragma GCC unroll 2
				for (int g = 0; g < ng; g++) {
					const struct kx16_head *hd = (const void *)b[g];
					__m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(
						(const __m128i *)hd->sc[j]));

#pragma GCC unroll 8
					for (int t = 0; t < nt; t++)
						s[g][t] = _mm512_add_epi32(s[g][t],
							_mm512_mullo_epi32(a[g][t], sc));
				}
			}
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++)
					m[g][t] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++)	/* the mins */
#pragma GCC unroll 2
				for (int g = 0; g < ng; g++) {
					const struct kx16_head *hd = (const void *)b[g];
					__m512i mn = dup16(_mm512_cvtepu8_epi32(_mm_loadu_si128(
						(const __m128i *)hd->mn[j])));

#pragma GCC unroll 8
					for (int t = 0; t < nt; t++)
						m[g][t] = _mm512_add_epi32(m[g][t], _mm512_madd_epi16(
							mn, bc4(&xb[t]->bsums[2 * j])));
				}
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++) {
				const struct kx16_head *hd = (const void *)b[g];
				__m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
					(const __m256i *)hd->d));
				__m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(
					(const __m256i *)hd->dmin));

#pragma GCC unroll 8
				for (int t = 0; t < nt; t++) {
					__m512 dx = _mm512_set1_ps(xb[t]->d);

					acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx),
						_mm512_cvtepi32_ps(s[g][t]), acc[g][t]);
					ms[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, dx),
						_mm512_cvtepi32_ps(m[g][t]), ms[g][t]);
				}
			}
		}
#pragma GCC unroll 2
		for (int g = 0; g < ng; g++) {
#pragma GCC unroll 8
			for (int t = 0; t < nt; t++)
				acc[g][t] = _mm512_sub_ps(acc[g][t], ms[g][t]);
			part_end16(cuts, p, out + 16 * g, os, nt, acc[g], run[g]);
		}
	}
#pragma GCC unroll 2
	for (int g = 0; g < ng; g++)
		sums_out16(cuts, out + 16 * g, os, nt, run[g]);
}

/* nt (<= GK) Q6_K tokens against ng packed groups at w (as
 * ptokens_mins): tokens_off's sums and floats. */
static inline __attribute__((always_inline)) void
ptokens_q6_k(const uint8_t *w, int64_t nb, int ng, const uint8_t *x,
	     size_t xs, int nt, float *out, size_t os,
	     const struct pg_cuts *cuts)
{
	size_t gs = (size_t)nb * sizeof(struct kx16_q6_k);
	__m512 run[2][GK];
	int64_t i = 0;

#pragma GCC unroll 2
	for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
		for (int t = 0; t < GK; t++)
			run[g][t] = _mm512_setzero_ps();

	for (int p = 0; p < (cuts ? cuts->n : 1); p++) {
		int64_t end = cuts ? cuts->end[p] / (PG_QK_K / PG_QK) : nb;
		__m512 acc[2][GK];

#pragma GCC unroll 2
		for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
			for (int t = 0; t < nt; t++)
				acc[g][t] = _mm512_setzero_ps();
		for (; i < end; i++) {
			const struct kx16_q6_k *b[2] = {
				(const void *)(w + (size_t)i * sizeof(*b[0])),
				(const void *)(w + (size_t)i * sizeof(*b[0]) + gs) };
			const struct pg_block_q8_k *xb[GK];
			__m512i s[2][GK], o[2][GK];

#pragma GCC unroll 8
			for (int t = 0; t < nt; t++)
				xb[t] = (const struct pg_block_q8_k *)
					(x + (size_t)t * xs) + i;
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++)
					s[g][t] = _mm512_setzero_si512();
#pragma GCC unroll 1
			for (int j = 0; j < 16; j++) {	/* sub-blocks of 16 */
				__m512i a[2][GK], q[2][4];

#pragma GCC unroll 2
				for (int g = 0; g < ng; g++) {
					__m512i h = _mm512_loadu_si512(b[g]->s[j].qh);
					__m512i l0 = _mm512_loadu_si512(b[g]->s[j].ql[0]);
					__m512i l1 = _mm512_loadu_si512(b[g]->s[j].ql[1]);

					q[g][0] = put_bits(nib_lo(l0), h, 0, 4, 0x30);
					q[g][1] = put_bits(nib_hi(l0), h, 2, 4, 0x30);
					q[g][2] = put_bits(nib_lo(l1), h, 4, 4, 0x30);
					q[g][3] = put_bits(nib_hi(l1), h, 6, 4, 0x30);
				}
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++) {
					const int8_t *xq = xb[t]->qs + 16 * j;

#pragma GCC unroll 2
					for (int g = 0; g < ng; g++)
						a[g][t] = _mm512_setzero_si512();
#pragma GCC unroll 4
					for (int c = 0; c < 4; c++) {
						__m512i xc = bc4(xq + 4 * c);

#pragma GCC unroll 2
						for (int g = 0; g < ng; g++)
							a[g][t] = _mm512_dpbusd_epi32(a[g][t],
								q[g][c], xc);
					}
				}
#pragma GCC unroll 2
				for (int g = 0; g < ng; g++) {
					__m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(
						(const __m128i *)b[g]->sc[j]));

#pragma GCC unroll 8
					for (int t = 0; t < nt; t++)
						s[g][t] = _mm512_add_epi32(s[g][t],
							_mm512_mullo_epi32(a[g][t], sc));
				}
			}
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++)
#pragma GCC unroll 8
				for (int t = 0; t < nt; t++)
					o[g][t] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++)	/* the -32s: scales 2j, 2j + 1 */
#pragma GCC unroll 2
				for (int g = 0; g < ng; g++) {
					__m512i off = _mm512_or_si512(
						_mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128(
							(const __m128i *)b[g]->sc[2 * j])),
							_mm512_set1_epi32(0xffff)),
						_mm512_slli_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(
							(const __m128i *)b[g]->sc[2 * j + 1])), 16));

#pragma GCC unroll 8
					for (int t = 0; t < nt; t++)
						o[g][t] = _mm512_add_epi32(o[g][t], _mm512_madd_epi16(
							off, bc4(&xb[t]->bsums[2 * j])));
				}
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++) {
				__m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
					(const __m256i *)b[g]->d));

#pragma GCC unroll 8
				for (int t = 0; t < nt; t++) {
					s[g][t] = _mm512_sub_epi32(s[g][t],
						_mm512_slli_epi32(o[g][t], 5));
					acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(d,
							_mm512_set1_ps(xb[t]->d)),
						_mm512_cvtepi32_ps(s[g][t]), acc[g][t]);
				}
			}
		}
#pragma GCC unroll 2
		for (int g = 0; g < ng; g++)
			part_end16(cuts, p, out + 16 * g, os, nt, acc[g], run[g]);
	}
#pragma GCC unroll 2
	for (int g = 0; g < ng; g++)
		sums_out16(cuts, out + 16 * g, os, nt, run[g]);
}

#define PTOKENS(NAME, CALL)						\
static inline __attribute__((always_inline)) void			\
NAME(const uint8_t *w, int64_t nb, int ng, const uint8_t *x, size_t xs,\
     int nt, float *out, size_t os, const struct pg_cuts *cuts)		\
{									\
	CALL;								\
}

PTOKENS(ptokens_q4_k, ptokens_mins(w, sizeof(struct kx16_q4_k), 0, nb, ng,
				   x, xs, nt, out, os, cuts))
PTOKENS(ptokens_q5_k, ptokens_mins(w, sizeof(struct kx16_q5_k), 1, nb, ng,
				   x, xs, nt, out, os, cuts))
PTOKENS(ptokens_q6_k1, ptokens_q6_k(w, nb, ng, x, xs, nt, out, os, cuts))

#define PTOKENS1(NAME, TOKENS)						\
static inline __attribute__((always_inline)) void			\
NAME(const uint8_t *w, int64_t nb, const uint8_t *x, size_t xs, int nt,\
     float *out, size_t os, const struct pg_cuts *cuts)			\
{									\
	TOKENS(w, nb, 1, x, xs, nt, out, os, cuts);			\
}

PTOKENS1(ptokens16_q4_k, ptokens_q4_k)
PTOKENS1(ptokens16_q5_k, ptokens_q5_k)
PTOKENS1(ptokens16_q6_k, ptokens_q6_k1)

SWEEP16(psweep_q4_k, ptokens16_q4_k, uint8_t)
SWEEP16(psweep_q5_k, ptokens16_q5_k, uint8_t)
SWEEP16(psweep_q6_k, ptokens16_q6_k, uint8_t)

#define GK2 6		/* tokens a pass of two groups */

/*
 * Every token against two packed groups, in passes of as even a size as
 * GK2 allows (16 tokens: 6, 5, 5; a pass of few tokens loads more for
 * each vpdpbusd), each with a constant count.
 */
#define PSWEEP32(NAME, TOKENS)						\
static void NAME(const uint8_t *w, int64_t nb, const uint8_t *x,	\
		 int n_tok, float *out, size_t os,			\
		 const struct pg_cuts *cuts)				\
{									\
	size_t xs = (size_t)nb * sizeof(struct pg_block_q8_k);		\
	int passes = (n_tok + GK2 - 1) / GK2;				\
									\
	for (int t = 0, p = 0; p < passes; p++) {			\
		int nt = (n_tok - t + (passes - p) - 1) / (passes - p);	\
		const uint8_t *xt = x + (size_t)t * xs;			\
		float *ot = out + (size_t)t * os;			\
									\
		switch (nt) {						\
		case 6: TOKENS(w, nb, 2, xt, xs, 6, ot, os, cuts); break;\
		case 5: TOKENS(w, nb, 2, xt, xs, 5, ot, os, cuts); break;\
		case 4: TOKENS(w, nb, 2, xt, xs, 4, ot, os, cuts); break;\
		case 3: TOKENS(w, nb, 2, xt, xs, 3, ot, os, cuts); break;\
		case 2: TOKENS(w, nb, 2, xt, xs, 2, ot, os, cuts); break;\
		default: TOKENS(w, nb, 2, xt, xs, 1, ot, os, cuts); break;\
		}							\
		t += nt;						\
	}								\
}
_Static_assert(GK2 == 6 && GK2 <= GK,
	       "PSWEEP32 has a case for each pass size up to GK2; the tokens' arrays hold GK");

PSWEEP32(psweep32_q4_k, ptokens_q4_k)
PSWEEP32(psweep32_q5_k, ptokens_q5_k)
PSWEEP32(psweep32_q6_k, ptokens_q6_k1)

#define KX16_GEMM(name)							\
void pg_gemm16_kx16_##name##_vnni(int64_t n, const void *w, size_t ws,	\
				  const void *xq, int n_tok, float *out,\
				  size_t os, void *work,		\
				  const struct pg_cuts *cuts)		\
{									\
	(void)ws, (void)work;						\
	psweep_##name(w, n / PG_QK_K, xq, n_tok, out, os, cuts);	\
}									\
									\
void pg_gemm32_kx16_##name##_vnni(int64_t n, const void *w, size_t ws,	\
				  const void *xq, int n_tok, float *out,\
				  size_t os, void *work,		\
				  const struct pg_cuts *cuts)		\
{									\
	(void)ws, (void)work;						\
	psweep32_##name(w, n / PG_QK_K, xq, n_tok, out, os, cuts);	\
}

KX16_GEMM(q4_k)
KX16_GEMM(q5_k)
KX16_GEMM(q6_k)
