/*
 * gemm_avx2.c - AVX2 quantised matmul of 8 weight rows x many tokens, for
 * prompts and batches: the rows' blocks are repacked once into a small
 * work area (L1-resident for the usual widths) and every token then runs
 * over them.  Bit for bit the results of the 4-row dots of the same
 * numerics (q4_avx2.c for pagoda's, dot_avx2.c for llama.cpp's), so of
 * the 4x2 tiles and of the one-token path: a token's logits do not depend
 * on what it was batched with.
 *
 * The repacked block of 8 rows: with w the 32 weights of a block (nibbles
 * expanded), x the token's, it holds for each chunk pair (c, c + 4), c <
 * 4 ("chunk" j: weights 4j .. 4j + 3), two vectors with row i in 32-bit
 * lane i:
 *   wa[c]: w[4c], w[4c + 1], w[16 + 4c], w[16 + 4c + 1];
 *   wb[c]: w[4c + 2], w[4c + 3], w[16 + 4c + 2], w[16 + 4c + 3];
 * and pg_gemm_prep lays the token's quants out the same way, so that one
 * vpbroadcastd of its 4 bytes meets wa[c] (and one wb[c]).  maddubs(wa[c])
 * + maddubs(wb[c]) gives in int16 lane 2i the sum of chunk c of row i and
 * in lane 2i + 1 that of chunk c + 4 (|sum| <= 4 x 15 x 127 = 7620).
 *
 * Pagoda's numerics (q4_avx2.c: one integer sum a block and row, one fma
 * of it a block): the four such vectors of a block summed in int16 (lane
 * 2i: the first 16 products, lane 2i + 1 the last 16, |sum| <= 30480: no
 * wrap), then madd with ones gives each row's block sum in int32 lane i;
 * converted once, fma'd once with the rows' d_w d_x.  Q4_0 multiplies the
 * unsigned nibbles q by x and adds -8 x (the block's sum of x), which
 * pg_gemm_prep puts beside the quants: the same integers as (q - 8) x.
 *
 * llama.cpp's numerics (Q4_1 only; dot_avx2.c's order: each chunk
 * converted and fma'd on its own, lane j of an accumulator): read as
 * int32 after a shift left by 16 (chunk c) or with the low half masked
 * off (chunk c + 4), the lanes hold the chunk sums times 2^16, which
 * convert exactly; the rows' scales are kept times 2^-16 (an exact
 * scaling, far from underflow: d_w d_x >= 2^-48 or 0), so each fma
 * rounds the very product the 4-row dot rounds.  The 8 chunk accumulators
 * have rows in their lanes, so the final hsum is 7 vertical adds.
 *
 * Q5_0 (pagoda's numerics) repacks its 5-bit quants (nibble | fifth bit
 * << 4, in [0, 31]) the same way; a chunk pair's int16 lanes then hold up
 * to 8 products of 31 x 128 (31744: no wrap), so the two halves are
 * widened by madd before they are added, and -16 x the block's sum of x
 * is twice pg_gemm_prep's Q4_0 offset.
 *
 * Why: on Zen 1 maddubs and madd issue on one FP pipe only, and a 4-row
 * dot spends 2 maddubs uops and 2 madd uops per 32 products there, besides
 * unpacking each block's nibbles once per row and token pair; these loops
 * spend the 2 maddubs uops (and a quarter of a madd), and unpack once per
 * 8 rows.  Q8_0 weights (signed bytes: one pair of products can fill an
 * int16) are left to the tiles.
 *
 * In pagoda's numerics the sweep over a repacked buffer takes GT tokens
 * a pass (part_q4_tok): each of a block's 8 weight vectors is loaded once
 * for all of them, and the GT chains of fma (one a token, each block's
 * waiting for the last) run side by side; a token alone kept the
 * multipliers waiting on its chain and on the loads.  Each token's
 * integers and floats are part_q4's, in the same order.
 *
 * Compiled with -mavx2 -mfma -mf16c; reached only through the tables.
 */
#include "kernels/cpu/gemm_q4.h"

/* 4 bytes at p in all 8 lanes. */
static inline __m256i bcast4(const uint8_t *p)
{
	int32_t v;

	__builtin_memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* Part p's 8 values v for a token (off floats into out): stored, or
 * summed into *run. */
static inline void put8(const struct pg_cuts *cuts, int p, float *out,
			size_t off, __m256 v, __m256 *run)
{
	if (!pg_cuts_summed(cuts))
		_mm256_storeu_ps(pg_cuts_out(cuts, p, out) + off, v);
	else	/* the earlier parts, then this */
		*run = p ? _mm256_add_ps(*run, v) : v;
}

/*
 * Bytes ahead of the block in use that a packed sweep asks for: one
 * token's sweep (decode) reads each packed group once, from memory, and
 * the groups of a thread's chunks lie one after the other, so this runs
 * into the next group the same thread reads.  About 25 blocks of Q4_1
 * (measured here, Q4_1 576x1536 packed, 1 thread, cold: 8.5 GB/s without,
 * 10.1 at 2048 bytes, 10.6 at 3072 and at 4096).
 */
#define PACKED_AHEAD 4096

/*
 * Blocks i0 .. i1 - 1 of the 8 rows against one token (xb: its block i0)
 * in pagoda's numerics: one integer sum, conversion and fma a block and
 * row.  The blocks come from buf, or with packed set straight from the
 * packed group pk, expanded in registers (and, with pf, PACKED_AHEAD
 * bytes on asked for: the first token's pass, the one that reads them).
 */
static inline __attribute__((always_inline)) __m256
part_q4(enum gemm_kind k, const struct gemm_block *buf, int packed,
	const uint8_t *pk, int64_t i0, int64_t i1, const uint8_t *xb, int pf)
{
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 ? PG_Q8_1 : PG_Q8_0);
	__m256i ones = _mm256_set1_epi16(1);
	__m256 acc = _mm256_setzero_ps(), ms = acc;

	for (int64_t i = i0; i < i1; i++, xb += pb) {
		struct gemm_block tmp;
		const struct gemm_block *b = &tmp;
		const float *xf = (const float *)(xb + 32);
		__m256i s[2], is;

		if (packed) {	/* expanded here, in registers */
			const uint8_t *p = pk + (size_t)i * packed_bytes(k);

			if (pf) {	/* 3 lines: more than a block spans */
				_mm_prefetch((const char *)p + PACKED_AHEAD, _MM_HINT_T0);
				_mm_prefetch((const char *)p + PACKED_AHEAD + 64, _MM_HINT_T0);
				_mm_prefetch((const char *)p + PACKED_AHEAD + 128, _MM_HINT_T0);
			}
			expand(k, p, &tmp);
		} else
			b = &buf[i];

#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {	/* c = 2h, 2h + 1 */
			int c = 2 * h;

			s[h] = _mm256_add_epi16(
				_mm256_add_epi16(
					_mm256_maddubs_epi16(b->wa[c], bcast4(xb + 8 * c)),
					_mm256_maddubs_epi16(b->wb[c], bcast4(xb + 8 * c + 4))),
				_mm256_add_epi16(
					_mm256_maddubs_epi16(b->wa[c + 1], bcast4(xb + 8 * c + 8)),
					_mm256_maddubs_epi16(b->wb[c + 1], bcast4(xb + 8 * c + 12))));
		}
		if (k == G_Q5_0) {	/* 8 products of up to 31 x 128 each */
			is = _mm256_add_epi32(_mm256_madd_epi16(s[0], ones),
					      _mm256_madd_epi16(s[1], ones));
			/* - 16 x the block's sum of x: twice Q4_0's */
			is = _mm256_add_epi32(is, _mm256_slli_epi32(
				bcast4(xb + 36), 1));
		} else {
			is = _mm256_madd_epi16(_mm256_add_epi16(s[0], s[1]), ones);
		}
		if (k == G_Q4_0)	/* - 8 x the block's sum of x */
			is = _mm256_add_epi32(is, bcast4(xb + 36));
		acc = _mm256_fmadd_ps(_mm256_mul_ps(b->d, _mm256_broadcast_ss(xf)),
				      _mm256_cvtepi32_ps(is), acc);
		if (k == G_Q4_1)
			ms = _mm256_fmadd_ps(b->m, _mm256_broadcast_ss(xf + 1), ms);
	}
	return k == G_Q4_1 ? _mm256_add_ps(acc, ms) : acc;
}

#define GT 4	/* tokens a pass of part_q4_tok (register blocking) */

/*
 * part_q4's loop for nt (<= GT) tokens at xb, xs bytes apart, against
 * the repacked blocks of buf: each weight vector loaded once for the nt
 * tokens, and nt independent chains of fma per pass, where one token's
 * chain (each block's fma waits for the last) left the multipliers idle.
 * The same integers and floats as part_q4, token by token; v[t]: token
 * t's 8 values.
 */
static inline __attribute__((always_inline)) void
part_q4_tok(enum gemm_kind k, const struct gemm_block *buf, int64_t i0,
	    int64_t i1, const uint8_t *xb, size_t xs, int nt, __m256 v[GT])
{
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 ? PG_Q8_1 : PG_Q8_0);
	__m256i ones = _mm256_set1_epi16(1);
	__m256 acc[GT], ms[GT];

#pragma GCC unroll 4
	for (int t = 0; t < nt; t++)
		acc[t] = ms[t] = _mm256_setzero_ps();
	for (int64_t i = i0; i < i1; i++, xb += pb) {
		const struct gemm_block *b = &buf[i];
		__m256i s0[GT];
		__m256i wa = _mm256_load_si256(&b->wa[0]);
		__m256i wb = _mm256_load_si256(&b->wb[0]);
		__m256i wa1 = _mm256_load_si256(&b->wa[1]);
		__m256i wb1 = _mm256_load_si256(&b->wb[1]);

#pragma GCC unroll 4
		for (int t = 0; t < nt; t++) {	/* chunks 0, 1 (and 4, 5) */
			const uint8_t *x = xb + (size_t)t * xs;

			s0[t] = _mm256_add_epi16(
				_mm256_add_epi16(_mm256_maddubs_epi16(wa, bcast4(x)),
						 _mm256_maddubs_epi16(wb, bcast4(x + 4))),
				_mm256_add_epi16(_mm256_maddubs_epi16(wa1, bcast4(x + 8)),
						 _mm256_maddubs_epi16(wb1, bcast4(x + 12))));
		}
		wa = _mm256_load_si256(&b->wa[2]);
		wb = _mm256_load_si256(&b->wb[2]);
		wa1 = _mm256_load_si256(&b->wa[3]);
		wb1 = _mm256_load_si256(&b->wb[3]);
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++) {	/* chunks 2, 3 (6, 7), the rest */
			const uint8_t *x = xb + (size_t)t * xs;
			const float *xf = (const float *)(x + 32);
			__m256i s1 = _mm256_add_epi16(
				_mm256_add_epi16(_mm256_maddubs_epi16(wa, bcast4(x + 16)),
						 _mm256_maddubs_epi16(wb, bcast4(x + 20))),
				_mm256_add_epi16(_mm256_maddubs_epi16(wa1, bcast4(x + 24)),
						 _mm256_maddubs_epi16(wb1, bcast4(x + 28))));
			__m256i is;

			if (k == G_Q5_0) {	/* as part_q4 */
				is = _mm256_add_epi32(_mm256_madd_epi16(s0[t], ones),
						      _mm256_madd_epi16(s1, ones));
				is = _mm256_add_epi32(is, _mm256_slli_epi32(
					bcast4(x + 36), 1));
			} else {
				is = _mm256_madd_epi16(_mm256_add_epi16(s0[t], s1), ones);
			}
			if (k == G_Q4_0)
				is = _mm256_add_epi32(is, bcast4(x + 36));
			acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(b->d, _mm256_broadcast_ss(xf)),
						 _mm256_cvtepi32_ps(is), acc[t]);
			if (k == G_Q4_1)
				ms[t] = _mm256_fmadd_ps(b->m, _mm256_broadcast_ss(xf + 1),
							ms[t]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < nt; t++)
		v[t] = k == G_Q4_1 ? _mm256_add_ps(acc[t], ms[t]) : acc[t];
}

/* nt tokens from token t0 against buf, part by part (sweep's outputs). */
static inline __attribute__((always_inline)) void
sweep_tok(enum gemm_kind k, const struct gemm_block *buf, int64_t nb,
	  const void *xp, int t0, int nt, float *out, size_t os,
	  const struct pg_cuts *cuts)
{
	int np = cuts ? cuts->n : 1;
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 ? PG_Q8_1 : PG_Q8_0);
	size_t xs = (size_t)nb * pb;
	const uint8_t *xt = (const uint8_t *)xp + (size_t)t0 * xs;
	__m256 run[GT], v[GT];
	int64_t i = 0;

#pragma GCC unroll 4
	for (int t = 0; t < GT; t++)
		run[t] = _mm256_setzero_ps();
	for (int p = 0; p < np; p++) {
		int64_t end = cuts ? cuts->end[p] : nb;

		part_q4_tok(k, buf, i, end, xt + (size_t)i * pb, xs, nt, v);
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			put8(cuts, p, out, (size_t)(t0 + t) * os, v[t], &run[t]);
		i = end;
	}
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 4
		for (int t = 0; t < nt; t++)
			_mm256_storeu_ps(out + (size_t)(t0 + t) * os, run[t]);
}

/* Every token against the repacked blocks of buf, GT a pass. */
static inline __attribute__((always_inline)) void
sweep_buf(enum gemm_kind k, const struct gemm_block *buf, int64_t nb,
	  const void *xp, int n_tok, float *out, size_t os,
	  const struct pg_cuts *cuts)
{
	int t = 0;

	for (; t + GT <= n_tok; t += GT)
		sweep_tok(k, buf, nb, xp, t, GT, out, os, cuts);
	switch (n_tok - t) {
	case 3: sweep_tok(k, buf, nb, xp, t, 3, out, os, cuts); break;
	case 2: sweep_tok(k, buf, nb, xp, t, 2, out, os, cuts); break;
	case 1: sweep_tok(k, buf, nb, xp, t, 1, out, os, cuts); break;
	default: break;
	}
}

/*
 * The same in llama.cpp's numerics, Q4_1 only (the top of the file): the
 * 8 chunk sums of a block converted and fma'd each on its own.
 */
static inline __attribute__((always_inline)) __m256
part_llama(const struct gemm_block *buf, int64_t i0, int64_t i1,
	   const uint8_t *xb)
{
	size_t pb = PG_GEMM_XP_BYTES(PG_Q8_1);
	__m256i hi16 = _mm256_set1_epi32((int32_t)0xffff0000u);
	__m256 acc[8], ms = _mm256_setzero_ps();

	/* unrolled: a loop here became a memset of a stack copy */
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		acc[j] = _mm256_setzero_ps();
	for (int64_t i = i0; i < i1; i++, xb += pb) {
		const struct gemm_block *b = &buf[i];
		const float *xf = (const float *)(xb + 32);
		__m256 f = _mm256_mul_ps(b->d, _mm256_broadcast_ss(xf));

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m256i s = _mm256_add_epi16(
				_mm256_maddubs_epi16(b->wa[c], bcast4(xb + 8 * c)),
				_mm256_maddubs_epi16(b->wb[c], bcast4(xb + 8 * c + 4)));
			__m256i lo = _mm256_slli_epi32(s, 16);
			__m256i hi = _mm256_and_si256(s, hi16);

			acc[c] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(lo), acc[c]);
			acc[c + 4] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(hi),
						     acc[c + 4]);
		}
		ms = _mm256_add_ps(ms, _mm256_mul_ps(b->m,
						     _mm256_broadcast_ss(xf + 1)));
	}
	/* hsum256's order, lane by lane */
	return _mm256_add_ps(_mm256_add_ps(
		_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]),
			      _mm256_add_ps(acc[2], acc[6])),
		_mm256_add_ps(_mm256_add_ps(acc[1], acc[5]),
			      _mm256_add_ps(acc[3], acc[7]))), ms);
}

/*
 * out[t * os + r] = row r . token t for r < 8, t < n_tok (part p of cuts
 * at out + p * cuts->stride), in k's numerics; see the pg_gemm8_fn
 * comment in cpu_impl.h for xp and work.
 */
static inline __attribute__((always_inline)) void
sweep(enum gemm_kind k, const struct gemm_block *buf, int packed,
      const uint8_t *pk, int64_t nb, const void *xp, int n_tok, float *out,
      size_t os, const struct pg_cuts *cuts)
{
	int np = cuts ? cuts->n : 1;
	size_t pb = PG_GEMM_XP_BYTES(k == G_Q4_1 || k == G_LLAMA ? PG_Q8_1 :
				     PG_Q8_0);

	for (int t = 0; t < n_tok; t++) {
		const uint8_t *xt = (const uint8_t *)xp + (size_t)t * (size_t)nb * pb;
		__m256 run = _mm256_setzero_ps(), v;
		int64_t i = 0;

		for (int p = 0; p < np; p++) {
			int64_t end = cuts ? cuts->end[p] : nb;

			v = k == G_LLAMA ? part_llama(buf, i, end, xt + (size_t)i * pb) :
			    part_q4(k, buf, packed, pk, i, end, xt + (size_t)i * pb,
				    packed && t == 0);
			put8(cuts, p, out, (size_t)t * os, v, &run);
			i = end;
		}
		if (pg_cuts_summed(cuts))
			_mm256_storeu_ps(out + (size_t)t * os, run);
	}
}

/* The rows' blocks repacked into work, then every token over them. */
static inline __attribute__((always_inline)) void
gemm8(enum gemm_kind k, int64_t n, const void *w, size_t ws, const void *xp,
      int n_tok, float *out, size_t os, void *work, const struct pg_cuts *cuts)
{
	struct gemm_block *buf = work;

	for (int64_t i = 0; i < n / PG_QK; i++)
		repack(k, w, ws, i, &buf[i]);
	if (k == G_LLAMA)
		sweep(k, buf, 0, NULL, n / PG_QK, xp, n_tok, out, os, cuts);
	else
		sweep_buf(k, buf, n / PG_QK, xp, n_tok, out, os, cuts);
}

/*
 * A packed group (pg_cpu_q4x8_pack) at w: with work (many tokens), its
 * blocks expanded there once; without (a few), each as it is used.
 */
static inline __attribute__((always_inline)) void
gemm8_packed(enum gemm_kind k, int64_t n, const void *w, const void *xp,
	     int n_tok, float *out, size_t os, void *work,
	     const struct pg_cuts *cuts)
{
	struct gemm_block *buf = work;
	const uint8_t *pk = w;

	if (!work) {
		sweep(k, NULL, 1, pk, n / PG_QK, xp, n_tok, out, os, cuts);
		return;
	}
	for (int64_t i = 0; i < n / PG_QK; i++)
		expand(k, pk + (size_t)i * packed_bytes(k), &buf[i]);
	sweep_buf(k, buf, n / PG_QK, xp, n_tok, out, os, cuts);
}

void pg_gemm8_q4_0_avx2(int64_t n, const void *w, size_t ws, const void *xp,
			int n_tok, float *out, size_t os, void *work,
			const struct pg_cuts *cuts)
{
	gemm8(G_Q4_0, n, w, ws, xp, n_tok, out, os, work, cuts);
}

void pg_gemm8_q4_1_avx2(int64_t n, const void *w, size_t ws, const void *xp,
			int n_tok, float *out, size_t os, void *work,
			const struct pg_cuts *cuts)
{
	gemm8(G_Q4_1, n, w, ws, xp, n_tok, out, os, work, cuts);
}

/* Q5_0 . Q8_0: the nibbles and fifth bits as one 5-bit quant. */
void pg_gemm8_q5_0_avx2(int64_t n, const void *w, size_t ws, const void *xp,
			int n_tok, float *out, size_t os, void *work,
			const struct pg_cuts *cuts)
{
	gemm8(G_Q5_0, n, w, ws, xp, n_tok, out, os, work, cuts);
}

void pg_gemm8_q4_1_llama_avx2(int64_t n, const void *w, size_t ws,
			      const void *xp, int n_tok, float *out, size_t os,
			      void *work, const struct pg_cuts *cuts)
{
	gemm8(G_LLAMA, n, w, ws, xp, n_tok, out, os, work, cuts);
}

/* Packed groups (PG_LAYOUT_Q4X8); ws unused, work NULL for few tokens. */
void pg_gemm8_q4x8_q4_0_avx2(int64_t n, const void *w, size_t ws,
			     const void *xp, int n_tok, float *out, size_t os,
			     void *work, const struct pg_cuts *cuts)
{
	(void)ws;
	gemm8_packed(G_Q4_0, n, w, xp, n_tok, out, os, work, cuts);
}

void pg_gemm8_q4x8_q4_1_avx2(int64_t n, const void *w, size_t ws,
			     const void *xp, int n_tok, float *out, size_t os,
			     void *work, const struct pg_cuts *cuts)
{
	(void)ws;
	gemm8_packed(G_Q4_1, n, w, xp, n_tok, out, os, work, cuts);
}

void pg_gemm8_q4x8_q5_0_avx2(int64_t n, const void *w, size_t ws,
			     const void *xp, int n_tok, float *out, size_t os,
			     void *work, const struct pg_cuts *cuts)
{
	(void)ws;
	gemm8_packed(G_Q5_0, n, w, xp, n_tok, out, os, work, cuts);
}
