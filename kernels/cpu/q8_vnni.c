/*
 * q8_vnni.c - AVX-512 VNNI batched matmul of Q8_0 weights, 16 rows x many
 * tokens: the loop of the avx512vnni table that dot_avx2.c's 8-row
 * gemm8_q8_0 is in the AVX2 one, bit for bit its results.
 *
 * Q8_0's numerics are llama.cpp's AVX2 ones (dot_avx2.c): a block's 32
 * products are summed into 8 int32 lanes of 4 products each (chunk k:
 * bytes 4k .. 4k + 3), each lane converted and multiplied by d_w d_x
 * into its own float accumulator, and the 8 accumulators summed at the
 * end of each cut as hsum256x4 sums them.  Here zmm lane r is row r, so
 * each chunk k of a block is one vpdpbusd for 16 rows, and its
 * accumulator acc[k] one zmm register; the sums of the 8 follow
 * hsum256x4's tree, ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)), lane by
 * lane.
 *
 * vpdpbusd multiplies unsigned bytes by signed ones, so the weights are
 * stored plus 128 (w + 128 in [0, 255]) and each chunk's sum starts at
 * -128 x the sum of its 4 activation bytes: the sum is then exactly the
 * integer of the signed products (|sum| <= 4 x 255 x 127), the one the
 * AVX2 loop's maddubs and madd give.
 *
 * Two tokens a pass (16 accumulators, 8 weight vectors in registers).
 * The tokens come as pg_gemm_prep lays them out for gemm8_q8_0
 * (matmul.c's q8_prep): groups of 8, block i of a group of nt tokens
 * their nt scales as floats, then their nt x 32 quants.
 *
 * Compiled with -mavx2 -mfma -mf16c -mavx512f/bw/vl/dq -mavx512vnni;
 * reached only through the avx512vnni table.
 */
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/vnni16.h"

#define Q8V_GROUP 8	/* tokens a group of the layout (gemm8_q8_0's) */
#define Q8V_MIN 4	/* tokens from which the repacking pays */

/* Block i of 16 rows: chunk k's 4 bytes (plus 128) of row r in lane r. */
struct q8v_block {
	__m512i w[8];
	__m512 d;
};

_Static_assert(sizeof(struct q8v_block) <= PG_GEMM16_WORK,
	       "PG_GEMM16_WORK holds a 16-row Q8_0 block");

static void repack16_q8_0(const uint8_t *w, size_t ws, int64_t nb,
			  struct q8v_block *buf)
{
	const __m256i bias = _mm256_set1_epi8((char)0x80);

	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *w0 = w + (size_t)i * sizeof(struct pg_block_q8_0);
		__m256i in[16];

#pragma GCC unroll 16
		for (int r = 0; r < 16; r++)
			in[r] = _mm256_xor_si256(bias, _mm256_loadu_si256(
				(const __m256i *)(w0 + (size_t)r * ws +
				offsetof(struct pg_block_q8_0, qs))));
		tr16(in, buf[i].w);
		buf[i].d = f16_rows16(w0 + offsetof(struct pg_block_q8_0, d), ws);
	}
}

/* -128 x the sum of each 4 bytes of the 32 at x, one int32 each. */
static inline __m256i neg_sums(const uint8_t *x)
{
	return _mm256_sub_epi32(_mm256_setzero_si256(),
		_mm256_dpbusd_epi32(_mm256_setzero_si256(),
				    _mm256_set1_epi8((char)0x80),
				    _mm256_loadu_si256((const __m256i *)x)));
}

/* The 8 accumulators summed in hsum256x4's order, lane by lane. */
static inline __m512 tree8(const __m512 a[8])
{
	return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]),
					   _mm512_add_ps(a[2], a[6])),
			     _mm512_add_ps(_mm512_add_ps(a[1], a[5]),
					   _mm512_add_ps(a[3], a[7])));
}

/*
 * nt (1 or 2) tokens j, j + 1 of a group of gn tokens at xg against the
 * nb blocks of buf, cut by cut, into out (token j's row 0) os apart.
 */
static inline __attribute__((always_inline)) void
q8v_tokens(int nt, const struct q8v_block *buf, int64_t nb,
	   const uint8_t *xg, int gn, int j, float *out, size_t os,
	   const struct pg_cuts *cuts)
{
	size_t bb = (size_t)gn * (sizeof(float) + PG_QK);
	int np = cuts ? cuts->n : 1;
	__m512 run[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
	int64_t i = 0;

	for (int p = 0; p < np; p++) {
		int64_t end = cuts ? cuts->end[p] : nb;
		__m512 acc[2][8];

#pragma GCC unroll 2
		for (int t = 0; t < nt; t++)
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++)
				acc[t][k] = _mm512_setzero_ps();
		for (; i < end; i++) {
			const struct q8v_block *b = &buf[i];
			const uint8_t *xb = xg + (size_t)i * bb;
			__m512i wv[8];

#pragma GCC unroll 8
			for (int k = 0; k < 8; k++)
				wv[k] = _mm512_load_si512(&b->w[k]);
#pragma GCC unroll 2
			for (int t = 0; t < nt; t++) {
				const uint8_t *xq = xb + (size_t)gn * sizeof(float) +
						    (size_t)(j + t) * PG_QK;
				float dx;
				int32_t neg[8] __attribute__((aligned(32)));
				__m512 sc;

				__builtin_memcpy(&dx, xb + (size_t)(j + t) *
						 sizeof(float), sizeof(dx));
				sc = _mm512_mul_ps(b->d, _mm512_set1_ps(dx));
				_mm256_store_si256((__m256i *)neg, neg_sums(xq));
#pragma GCC unroll 8
				for (int k = 0; k < 8; k++) {
					int32_t xv;
					__m512i s;

					__builtin_memcpy(&xv, xq + 4 * k, 4);
					s = _mm512_dpbusd_epi32(
						_mm512_set1_epi32(neg[k]), wv[k],
						_mm512_set1_epi32(xv));
					acc[t][k] = _mm512_fmadd_ps(sc,
						_mm512_cvtepi32_ps(s), acc[t][k]);
				}
			}
		}
#pragma GCC unroll 2
		for (int t = 0; t < nt; t++) {
			__m512 v = tree8(acc[t]);

			if (!pg_cuts_summed(cuts))
				_mm512_storeu_ps(pg_cuts_out(cuts, p, out) +
						 (size_t)t * os, v);
			else	/* the earlier cuts, then this */
				run[t] = p ? _mm512_add_ps(run[t], v) : v;
		}
	}
	if (pg_cuts_summed(cuts))
#pragma GCC unroll 2
		for (int t = 0; t < nt; t++)
			_mm512_storeu_ps(out + (size_t)t * os, run[t]);
}

/*
 * 16 rows (ws apart) against n_tok tokens at xp (gemm8_q8_0's layout);
 * work: n / 32 x PG_GEMM16_WORK bytes, 64-byte aligned.  Without work or
 * below Q8V_MIN tokens, the AVX2 loop for each half of the rows.
 */
void pg_gemm16_q8_0_vnni(int64_t n, const void *w, size_t ws, const void *xp,
			 int n_tok, float *out, size_t os, void *work,
			 const struct pg_cuts *cuts)
{
	int64_t nb = n / PG_QK;
	size_t gbytes = (size_t)nb * Q8V_GROUP * (sizeof(float) + PG_QK);
	struct q8v_block *buf = work;

	if (!work || n_tok < Q8V_MIN) {
		pg_gemm8_q8_0_avx2(n, w, ws, xp, n_tok, out, os, NULL, cuts);
		pg_gemm8_q8_0_avx2(n, (const uint8_t *)w + 8 * ws, ws, xp,
				   n_tok, out + 8, os, NULL, cuts);
		return;
	}
	repack16_q8_0(w, ws, nb, buf);
	for (int g = 0; g * Q8V_GROUP < n_tok; g++) {
		const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gbytes;
		int gn = n_tok - g * Q8V_GROUP < Q8V_GROUP ?
			 n_tok - g * Q8V_GROUP : Q8V_GROUP;
		float *o = out + (size_t)g * Q8V_GROUP * os;
		int j = 0;

		for (; j + 2 <= gn; j += 2)
			q8v_tokens(2, buf, nb, xg, gn, j, o + (size_t)j * os,
				   os, cuts);
		if (j < gn)
			q8v_tokens(1, buf, nb, xg, gn, j, o + (size_t)j * os,
				   os, cuts);
	}
}
