/*
 * gemm_vnni.c - AVX-512 VNNI batched matmul of Q4_0, Q4_1 and Q5_0
 * weights, 16 rows x many tokens, in pagoda's numerics: the loops of the
 * avx512vnni table that gemm_avx2.c's 8-row loops are in the AVX2 one,
 * bit for bit their results.
 *
 * The blocks are gemm_avx2.c's repacked blocks (gemm_q4.h), two groups of
 * 8 rows joined: zmm lanes 0-7 hold rows 0-7, lanes 8-15 rows 8-15.  A
 * token's chunk of 4 activation bytes (pg_gemm_prep's layout) is then one
 * vpdpbusd of its 64 weight bytes, the 4 bytes broadcast from memory
 * ({1to16}): 64 products summed into each row's int32 lane, where the
 * AVX2 loops spend two maddubs and a share of a madd on 32.  Every
 * product and sum is exact in int32 (|block| <= 32 x 31 x 128), so the
 * block's integer is the AVX2 loops' whatever the order of its adds; the
 * offsets (Q4_0's -8 x the block's sum of x, Q5_0's -16 x) start the
 * sums instead of being added at the end, which is the same integer.
 * The floats then go exactly as there, lane by lane: one conversion and
 * fma of d_w d_x a block, Q4_1's mins in a second chain, added at the end
 * of each cut.
 *
 * GV tokens a pass: each of the block's 8 weight vectors is loaded once
 * for them and used at once (chunk by chunk, so that only two are live
 * and the sums stay in registers), and each token's block sum runs in
 * two chains of 4 vpdpbusd (wa and wb), so that 2 GV chains are in flight;
 * Q4_1's mins, a chain of their own, take a second pass over the blocks,
 * which leaves the registers to the sums.
 *
 * Compiled with -mavx2 -mfma -mf16c -mavx512f/bw/vl/dq -mavx512vnni;
 * reached only through the avx512vnni table.
 */
#include <pthread.h>

#include "kernels/cpu/gemm_q4.h"

/* Two repacked blocks of 8 rows side by side; PG_GEMM16_WORK bytes. */
struct gemm16_block {
	__m512i wa[4];		/* gemm_block's wa[c], rows 0-7 then 8-15 */
	__m512i wb[4];
	__m512 d;		/* the rows' scales */
	__m512 m;		/* the rows' mins (Q4_1) */
};

_Static_assert(sizeof(struct gemm16_block) == PG_GEMM16_WORK,
	       "PG_GEMM16_WORK is the size of a joined block");

#ifndef GV
#define GV 8	/* tokens a pass (register blocking) */
#endif

/* The blocks of rows 0-7 (a) and 8-15 (b) as one. */
static inline __attribute__((always_inline)) void
join(const struct gemm_block *a, const struct gemm_block *b,
     struct gemm16_block *o)
{
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		o->wa[c] = _mm512_inserti64x4(_mm512_castsi256_si512(a->wa[c]),
					      b->wa[c], 1);
		o->wb[c] = _mm512_inserti64x4(_mm512_castsi256_si512(a->wb[c]),
					      b->wb[c], 1);
	}
	o->d = _mm512_insertf32x8(_mm512_castps256_ps512(a->d), b->d, 1);
	o->m = _mm512_insertf32x8(_mm512_castps256_ps512(a->m), b->m, 1);
}

/* 4 bytes at p in all 16 lanes (a broadcast operand of vpdpbusd). */
static inline __m512i bcast4x16(const uint8_t *p)
{
	int32_t v;

	__builtin_memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/*
 * Blocks i0 .. i1 - 1 of buf against nt (<= GV) tokens at xb, xs bytes
 * apart (xb: the first token's block i0); v[t]: token t's 16 values.
 */
static inline __attribute__((always_inline)) void
part16(enum gemm_kind k, const struct gemm16_block *buf, int64_t i0,
       int64_t i1, const uint8_t *xb, size_t xs, int nt, __m512 v[GV])
{
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 ? PG_Q8_1 : PG_Q8_0);
	const uint8_t *xm = xb;
	__m512 acc[GV], ms[GV];

#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		acc[t] = ms[t] = _mm512_setzero_ps();
	for (int64_t i = i0; i < i1; i++, xb += pb) {
		const struct gemm16_block *b = &buf[i];
		__m512i s0[GV], s1[GV];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++) {
			int32_t off;

			__builtin_memcpy(&off, xb + (size_t)t * xs + 36, 4);
			/* Q4_0: - 8 x the block's sum of x; Q5_0: twice that */
			s0[t] = k == G_Q4_0 ? _mm512_set1_epi32(off) :
				k == G_Q5_0 ? _mm512_set1_epi32(2 * off) :
				_mm512_setzero_si512();
			s1[t] = _mm512_setzero_si512();
		}
		/* chunk by chunk: two weight vectors live, the sums in
		 * registers */
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m512i wa = _mm512_load_si512(&b->wa[c]);
			__m512i wb = _mm512_load_si512(&b->wb[c]);

#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				const uint8_t *x = xb + (size_t)t * xs + 8 * c;

				s0[t] = _mm512_dpbusd_epi32(s0[t], wa, bcast4x16(x));
				s1[t] = _mm512_dpbusd_epi32(s1[t], wb, bcast4x16(x + 4));
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++) {
			const float *xf = (const float *)(xb + (size_t)t * xs + 32);

			acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(b->d, _mm512_set1_ps(xf[0])),
						 _mm512_cvtepi32_ps(_mm512_add_epi32(s0[t], s1[t])),
						 acc[t]);
		}
	}
	/* Q4_1's mins: their own chain, so a pass of its own (registers) */
	for (int64_t i = i0; k == G_Q4_1 && i < i1; i++, xm += pb) {
		const struct gemm16_block *b = &buf[i];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
			ms[t] = _mm512_fmadd_ps(b->m, _mm512_set1_ps(
				((const float *)(xm + (size_t)t * xs + 32))[1]), ms[t]);
	}
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		v[t] = k == G_Q4_1 ? _mm512_add_ps(acc[t], ms[t]) : acc[t];
}

/* ---- 32 rows a pass ----
 *
 * Where a machine runs vpdpbusd at two a cycle (Intel's two 512-bit
 * ports), the 16-row sweep above is bound by its loads: each vpdpbusd
 * takes a broadcast of its own, and one load a vpdpbusd halves the rate
 * (measured: 12 independent chains run at the peak with one load for
 * two, at 0.6 of it with one for one).  Two 16-row blocks a pass share
 * each token's broadcast, so a pass of GW tokens loads 2 weight vectors
 * and GW broadcasts for 2 GW vpdpbusd; each (group, token) sum is one
 * chain (the 2 GW chains cover the latency), and the floats go as in
 * part16, lane by lane, so the bits are the 16-row loop's.  The joined
 * blocks of rows 0-15 and 16-31 lie side by side in work
 * (PG_GEMM32_WORK a block).
 */
#ifndef GW
#define GW 6	/* tokens a pass (24 sums and accumulators in registers) */
#endif

/*
 * Blocks i0 .. i1 - 1 of buf (2 joined blocks each) against nt (<= GW)
 * tokens at xb, xs bytes apart; v[g][t]: token t's 16 values of group g.
 */
static inline __attribute__((always_inline)) void
part32(enum gemm_kind k, const struct gemm16_block *buf, int64_t i0,
       int64_t i1, const uint8_t *xb, size_t xs, int nt, __m512 v[2][GV])
{
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 ? PG_Q8_1 : PG_Q8_0);
	const uint8_t *xm = xb;
	__m512 acc[2][GW], ms[2][GW];

#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		acc[0][t] = acc[1][t] = ms[0][t] = ms[1][t] = _mm512_setzero_ps();
	for (int64_t i = i0; i < i1; i++, xb += pb) {
		const struct gemm16_block *b = &buf[2 * i];
		__m512i s[2][GW];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++) {
			int32_t off;

			__builtin_memcpy(&off, xb + (size_t)t * xs + 36, 4);
			s[0][t] = k == G_Q4_0 ? _mm512_set1_epi32(off) :
				  k == G_Q5_0 ? _mm512_set1_epi32(2 * off) :
				  _mm512_setzero_si512();
			s[1][t] = s[0][t];
		}
#pragma GCC unroll 8
		for (int c = 0; c < 8; c++) {
			__m512i w0 = _mm512_load_si512(c < 4 ? &b[0].wa[c] :
						       &b[0].wb[c - 4]);
			__m512i w1 = _mm512_load_si512(c < 4 ? &b[1].wa[c] :
						       &b[1].wb[c - 4]);
			/* wa[c]: bytes 8c..8c+3 of a token's block; wb: +4 */
			size_t xo = c < 4 ? 8 * (size_t)c : 8 * (size_t)(c - 4) + 4;

#pragma GCC unroll 8
			for (int t = 0; t < nt; t++) {
				__m512i x = bcast4x16(xb + (size_t)t * xs + xo);

				s[0][t] = _mm512_dpbusd_epi32(s[0][t], w0, x);
				s[1][t] = _mm512_dpbusd_epi32(s[1][t], w1, x);
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++) {
			const float *xf = (const float *)(xb + (size_t)t * xs + 32);
			__m512 dx = _mm512_set1_ps(xf[0]);

#pragma GCC unroll 2
			for (int g = 0; g < 2; g++)
				acc[g][t] = _mm512_fmadd_ps(
					_mm512_mul_ps(b[g].d, dx),
					_mm512_cvtepi32_ps(s[g][t]), acc[g][t]);
		}
	}
	/* Q4_1's mins: their own chain, as in part16 */
	for (int64_t i = i0; k == G_Q4_1 && i < i1; i++, xm += pb) {
		const struct gemm16_block *b = &buf[2 * i];

#pragma GCC unroll 8
		for (int t = 0; t < nt; t++) {
			__m512 sx = _mm512_set1_ps(
				((const float *)(xm + (size_t)t * xs + 32))[1]);

			ms[0][t] = _mm512_fmadd_ps(b[0].m, sx, ms[0][t]);
			ms[1][t] = _mm512_fmadd_ps(b[1].m, sx, ms[1][t]);
		}
	}
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
#pragma GCC unroll 2
		for (int g = 0; g < 2; g++)
			v[g][t] = k == G_Q4_1 ? _mm512_add_ps(acc[g][t], ms[g][t]) :
				  acc[g][t];
}

/*
 * nt tokens from token t0 against buf, cut by cut (gemm8's outputs): ng
 * = 1, the 16-row blocks (part16, nt <= GV); ng = 2, the joined pairs of
 * the 32-row loop (part32, nt <= GW), the second group's outputs 16 on.
 */
static inline __attribute__((always_inline)) void
sweep_tok(enum gemm_kind k, int ng, const struct gemm16_block *buf,
	  int64_t nb, const void *xp, int t0, int nt, float *out, size_t os,
	  const struct pg_cuts *cuts)
{
	int np = cuts ? cuts->n : 1;
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 ? PG_Q8_1 : PG_Q8_0);
	size_t xs = (size_t)nb * pb;
	const uint8_t *xt = (const uint8_t *)xp + (size_t)t0 * xs;
	__m512 run[2][GV], v[2][GV];
	int64_t i = 0;

#pragma GCC unroll 8
	for (int t = 0; t < GV; t++)
		run[0][t] = run[1][t] = _mm512_setzero_ps();
	for (int p = 0; p < np; p++) {
		int64_t end = cuts ? cuts->end[p] : nb;

		if (ng == 1)
			part16(k, buf, i, end, xt + (size_t)i * pb, xs, nt, v[0]);
		else
			part32(k, buf, i, end, xt + (size_t)i * pb, xs, nt, v);
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++) {
				size_t off = (size_t)(t0 + t) * os + 16 * (size_t)g;

				if (!pg_cuts_summed(cuts))
					_mm512_storeu_ps(pg_cuts_out(cuts, p, out) +
							 off, v[g][t]);
				else	/* the earlier cuts, then this */
					run[g][t] = p ? _mm512_add_ps(run[g][t],
								      v[g][t]) :
						  v[g][t];
			}
		i = end;
	}
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 8
		for (int t = 0; t < nt; t++)
#pragma GCC unroll 2
			for (int g = 0; g < ng; g++)
				_mm512_storeu_ps(out + (size_t)(t0 + t) * os +
						 16 * (size_t)g, run[g][t]);
}

/* Every token against buf, GV a pass, the rest with a constant count. */
static inline __attribute__((always_inline)) void
sweep16(enum gemm_kind k, const struct gemm16_block *buf, int64_t nb,
	const void *xp, int n_tok, float *out, size_t os,
	const struct pg_cuts *cuts)
{
	int t = 0;

	for (; t + GV <= n_tok; t += GV)
		sweep_tok(k, 1, buf, nb, xp, t, GV, out, os, cuts);
	switch (n_tok - t) {
	case 7: sweep_tok(k, 1, buf, nb, xp, t, 7, out, os, cuts); break;
	case 6: sweep_tok(k, 1, buf, nb, xp, t, 6, out, os, cuts); break;
	case 5: sweep_tok(k, 1, buf, nb, xp, t, 5, out, os, cuts); break;
	case 4: sweep_tok(k, 1, buf, nb, xp, t, 4, out, os, cuts); break;
	case 3: sweep_tok(k, 1, buf, nb, xp, t, 3, out, os, cuts); break;
	case 2: sweep_tok(k, 1, buf, nb, xp, t, 2, out, os, cuts); break;
	case 1: sweep_tok(k, 1, buf, nb, xp, t, 1, out, os, cuts); break;
	default: break;
	}
}

/* 16 rows as they are (ws apart): repacked into work, then swept. */
static inline __attribute__((always_inline)) void
gemm16(enum gemm_kind k, int64_t n, const void *w, size_t ws, const void *xp,
       int n_tok, float *out, size_t os, void *work,
       const struct pg_cuts *cuts)
{
	struct gemm16_block *buf = work;
	const uint8_t *w8 = (const uint8_t *)w + 8 * ws;

	for (int64_t i = 0; i < n / PG_QK; i++) {
		struct gemm_block a, b;

		repack(k, w, ws, i, &a);
		repack(k, w8, ws, i, &b);
		join(&a, &b, &buf[i]);
	}
	sweep16(k, buf, n / PG_QK, xp, n_tok, out, os, cuts);
}

/* Two consecutive packed groups (pg_cpu_q4x8_pack) at w, expanded into
 * work once and swept. */
static inline __attribute__((always_inline)) void
gemm16_packed(enum gemm_kind k, int64_t n, const void *w, const void *xp,
	      int n_tok, float *out, size_t os, void *work,
	      const struct pg_cuts *cuts)
{
	struct gemm16_block *buf = work;
	const uint8_t *pk = w;
	const uint8_t *pk8 = pk + (size_t)(n / PG_QK) * packed_bytes(k);

	for (int64_t i = 0; i < n / PG_QK; i++) {
		struct gemm_block a, b;

		expand(k, pk + (size_t)i * packed_bytes(k), &a);
		expand(k, pk8 + (size_t)i * packed_bytes(k), &b);
		join(&a, &b, &buf[i]);
	}
	sweep16(k, buf, n / PG_QK, xp, n_tok, out, os, cuts);
}

/*
 * Every token against buf in passes of as even a size as GW allows (16
 * tokens: 6, 5, 5, not 6, 6, 4: a pass of few tokens loads more for each
 * vpdpbusd), each with a constant count.
 */
static inline __attribute__((always_inline)) void
sweep32(enum gemm_kind k, const struct gemm16_block *buf, int64_t nb,
	const void *xp, int n_tok, float *out, size_t os,
	const struct pg_cuts *cuts)
{
	int passes = (n_tok + GW - 1) / GW;

	for (int t = 0, p = 0; p < passes; p++) {
		int nt = (n_tok - t + (passes - p) - 1) / (passes - p);

		switch (nt) {
		case 6: sweep_tok(k, 2, buf, nb, xp, t, 6, out, os, cuts); break;
		case 5: sweep_tok(k, 2, buf, nb, xp, t, 5, out, os, cuts); break;
		case 4: sweep_tok(k, 2, buf, nb, xp, t, 4, out, os, cuts); break;
		case 3: sweep_tok(k, 2, buf, nb, xp, t, 3, out, os, cuts); break;
		case 2: sweep_tok(k, 2, buf, nb, xp, t, 2, out, os, cuts); break;
		default: sweep_tok(k, 2, buf, nb, xp, t, 1, out, os, cuts); break;
		}
		t += nt;
	}
}
_Static_assert(GW == 6 && GW <= GV,
	       "sweep32 has a case for each pass size up to GW; sweep_tok's arrays hold GV");

/* Four consecutive packed groups (32 rows) at w, expanded into work once
 * (rows 0-15 and 16-31 of a block side by side) and swept. */
static inline __attribute__((always_inline)) void
gemm32_packed(enum gemm_kind k, int64_t n, const void *w, const void *xp,
	      int n_tok, float *out, size_t os, void *work,
	      const struct pg_cuts *cuts)
{
	struct gemm16_block *buf = work;
	size_t gb = (size_t)(n / PG_QK) * packed_bytes(k);	/* a group */
	const uint8_t *pk = w;

	for (int64_t i = 0; i < n / PG_QK; i++)
#pragma GCC unroll 2
		for (int g = 0; g < 2; g++) {
			const uint8_t *p = pk + 2 * (size_t)g * gb +
					   (size_t)i * packed_bytes(k);
			struct gemm_block a, b;

			expand(k, p, &a);
			expand(k, p + gb, &b);
			join(&a, &b, &buf[2 * i + g]);
		}
	sweep32(k, buf, n / PG_QK, xp, n_tok, out, os, cuts);
}

/*
 * The entry points.  Without work (matmul gives one wherever these run)
 * each falls back on the 8-row AVX2 loop twice, which says what that
 * means for it.
 */
#define GEMM16_ROWS(name, kind)						\
void pg_gemm16_##name##_vnni(int64_t n, const void *w, size_t ws,	\
			     const void *xp, int n_tok, float *out,	\
			     size_t os, void *work,			\
			     const struct pg_cuts *cuts)		\
{									\
	if (!work) {							\
		pg_gemm8_##name##_avx2(n, w, ws, xp, n_tok, out, os,	\
				       NULL, cuts);			\
		pg_gemm8_##name##_avx2(n, (const uint8_t *)w + 8 * ws,	\
				       ws, xp, n_tok, out + 8, os,	\
				       NULL, cuts);			\
		return;							\
	}								\
	gemm16(kind, n, w, ws, xp, n_tok, out, os, work, cuts);		\
}

#define GEMM16_PACKED(name, kind)					\
void pg_gemm16_q4x8_##name##_vnni(int64_t n, const void *w, size_t ws,	\
				  const void *xp, int n_tok,		\
				  float *out, size_t os, void *work,	\
				  const struct pg_cuts *cuts)		\
{									\
	if (!work) {							\
		const uint8_t *w8 = (const uint8_t *)w +		\
			(size_t)(n / PG_QK) * packed_bytes(kind);	\
									\
		pg_gemm8_q4x8_##name##_avx2(n, w, ws, xp, n_tok, out,	\
					    os, NULL, cuts);		\
		pg_gemm8_q4x8_##name##_avx2(n, w8, ws, xp, n_tok,	\
					    out + 8, os, NULL, cuts);	\
		return;							\
	}								\
	gemm16_packed(kind, n, w, xp, n_tok, out, os, work, cuts);	\
}

/* 32 rows (four packed groups); without work, the 16-row loop twice. */
#define GEMM32_PACKED(name, kind)					\
void pg_gemm32_q4x8_##name##_vnni(int64_t n, const void *w, size_t ws,	\
				  const void *xp, int n_tok,		\
				  float *out, size_t os, void *work,	\
				  const struct pg_cuts *cuts)		\
{									\
	if (!work) {							\
		const uint8_t *w16 = (const uint8_t *)w +		\
			2 * (size_t)(n / PG_QK) * packed_bytes(kind);	\
									\
		pg_gemm16_q4x8_##name##_vnni(n, w, ws, xp, n_tok, out,	\
					     os, NULL, cuts);		\
		pg_gemm16_q4x8_##name##_vnni(n, w16, ws, xp, n_tok,	\
					     out + 16, os, NULL, cuts);	\
		return;							\
	}								\
	gemm32_packed(kind, n, w, xp, n_tok, out, os, work, cuts);	\
}

GEMM16_ROWS(q4_0, G_Q4_0)
GEMM16_ROWS(q4_1, G_Q4_1)
GEMM16_ROWS(q5_0, G_Q5_0)
GEMM16_PACKED(q4_0, G_Q4_0)
GEMM16_PACKED(q4_1, G_Q4_1)
GEMM16_PACKED(q5_0, G_Q5_0)
GEMM32_PACKED(q4_0, G_Q4_0)
GEMM32_PACKED(q4_1, G_Q4_1)
GEMM32_PACKED(q5_0, G_Q5_0)

/* ---- the avx512vnni table ---- */

static struct pg_cpu_kernels vnni;
static pthread_once_t vnni_once = PTHREAD_ONCE_INIT;

/* The AVX-512 table, then the 16-row loops (this file's, kq_vnni.c's,
 * q8_vnni.c's). */
static void vnni_make(void)
{
	vnni = *pg_cpu_kernels_avx512();
	vnni.isa = PG_ISA_AVX512VNNI;
	vnni.gemm16_q4_0 = pg_gemm16_q4_0_vnni;
	vnni.gemm16_q4_1 = pg_gemm16_q4_1_vnni;
	vnni.gemm16_q5_0 = pg_gemm16_q5_0_vnni;
	vnni.gemm16_q4x8_q4_0 = pg_gemm16_q4x8_q4_0_vnni;
	vnni.gemm16_q4x8_q4_1 = pg_gemm16_q4x8_q4_1_vnni;
	vnni.gemm16_q4x8_q5_0 = pg_gemm16_q4x8_q5_0_vnni;
	vnni.gemm32_q4x8_q4_0 = pg_gemm32_q4x8_q4_0_vnni;
	vnni.gemm32_q4x8_q4_1 = pg_gemm32_q4x8_q4_1_vnni;
	vnni.gemm32_q4x8_q5_0 = pg_gemm32_q4x8_q5_0_vnni;
	vnni.gemm16_q2_k = pg_gemm16_q2_k_vnni;
	vnni.gemm16_q3_k = pg_gemm16_q3_k_vnni;
	vnni.gemm16_q4_k = pg_gemm16_q4_k_vnni;
	vnni.gemm16_q5_k = pg_gemm16_q5_k_vnni;
	vnni.gemm16_q6_k = pg_gemm16_q6_k_vnni;
	vnni.gemm16_q8_0 = pg_gemm16_q8_0_vnni;
	vnni.kx16_pack = pg_kx16_pack_vnni;
	vnni.gemm16_kx16_q4_k = pg_gemm16_kx16_q4_k_vnni;
	vnni.gemm16_kx16_q5_k = pg_gemm16_kx16_q5_k_vnni;
	vnni.gemm16_kx16_q6_k = pg_gemm16_kx16_q6_k_vnni;
	vnni.gemm32_kx16_q4_k = pg_gemm32_kx16_q4_k_vnni;
	vnni.gemm32_kx16_q5_k = pg_gemm32_kx16_q5_k_vnni;
	vnni.gemm32_kx16_q6_k = pg_gemm32_kx16_q6_k_vnni;
}

const struct pg_cpu_kernels *pg_cpu_kernels_avx512vnni(void)
{
	pthread_once(&vnni_once, vnni_make);
	return &vnni;
}
