/*
 * test_quant.c - quantisation and conversion tests of the CPU backend:
 * fp16/bf16 conversions (known values, edge cases, and every half value's
 * round trip), known blocks of each quantised type, how weights and
 * activations round ties apart, and round-trip error bounds on random rows
 * (Q5_0, Q5_1 and the K-quants too; their known-block answers and dots
 * are in test_kernels.c).
 *
 * Exits 0 on success, 1 on failure.  Dot products are in test_kernels.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"	/* the activation quantisers */
#include "tests/check.h"

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static void check_fp16_known(void)
{
	static const struct { float f; uint16_t h; } k[] = {
		{ 0.0f, 0x0000 }, { 1.0f, 0x3c00 }, { -2.0f, 0xc000 },
		{ 0.5f, 0x3800 }, { 65504.0f, 0x7bff },
		{ 65519.0f, 0x7bff },		/* below the halfway point */
		{ 65520.0f, 0x7c00 },		/* halfway: rounds to inf */
		{ 1e9f, 0x7c00 }, { -1e9f, 0xfc00 },
		{ 0.1f, 0x2e66 }, { 6.103515625e-05f, 0x0400 },
		{ 5.9604644775390625e-08f, 0x0001 },	/* 2^-24 */
		{ 2.98023223876953125e-08f, 0x0000 },	/* 2^-25: tie, even */
		{ 4.4703483581542969e-08f, 0x0001 },	/* 1.5 * 2^-25 */
		{ 8.9406967163085938e-08f, 0x0002 },	/* 1.5 * 2^-24: even */
		{ 1e-30f, 0x0000 }, { -1e-30f, 0x8000 },
		{ 1.00048828125f, 0x3c00 },	/* 1 + 2^-11: tie, even */
		{ 1.00146484375f, 0x3c02 },	/* 1 + 3 * 2^-11: tie, even */
	};

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		CHECK(pg_fp32_to_fp16(k[i].f) == k[i].h,
		      "fp16(%g) = %04x, want %04x", k[i].f,
		      pg_fp32_to_fp16(k[i].f), k[i].h);
	CHECK(pg_fp32_to_fp16(INFINITY) == 0x7c00, "fp16(inf)");
	CHECK(pg_fp32_to_fp16(-INFINITY) == 0xfc00, "fp16(-inf)");
	CHECK(pg_fp32_to_fp16(-0.0f) == 0x8000, "fp16(-0)");
	CHECK((pg_fp32_to_fp16(NAN) & 0x7e00) == 0x7e00, "fp16(nan) quiet");
	CHECK((pg_fp32_to_fp16(bits_f32(0x7f800001)) & 0x7e00) == 0x7e00,
	      "fp16(signalling nan) is a quiet nan");
	CHECK(isinf(pg_fp16_to_fp32(0x7c00)), "fp32(inf)");
	CHECK(isnan(pg_fp16_to_fp32(0x7e00)), "fp32(nan)");
	CHECK(pg_fp16_to_fp32(0x0001) == 5.9604644775390625e-08f,
	      "fp32(smallest subnormal)");
	CHECK(pg_fp16_to_fp32(0x03ff) == 6.0975551605224609e-05f,
	      "fp32(largest subnormal)");
}

/* Every half converts to a float and back to itself (NaNs stay NaNs). */
static void check_fp16_all(void)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = pg_fp16_to_fp32((uint16_t)h);
		uint16_t back = pg_fp32_to_fp16(f);

		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
			CHECK(isnan(f) && (back & 0x7c00) == 0x7c00 &&
			      (back & 0x3ff), "nan %04x", h);
			continue;
		}
		CHECK(back == h, "fp16 round trip %04x -> %g -> %04x",
		      h, f, back);
	}
}

#ifdef __FLT16_MAX__
/* Against the compiler's own (libgcc's) conversion on random floats. */
static void check_fp16_vs_compiler(void)
{
	uint32_t s = 12345;
	int bad = 0;

	for (int i = 0; i < 2000000; i++) {
		s = s * 1664525u + 1013904223u;
		/* exponents around the half range, where rounding matters */
		uint32_t u = (s & 0x807fffff) | ((100 + (s >> 24) % 50) << 23);
		_Float16 ref = (_Float16)bits_f32(u);
		uint16_t rb;

		memcpy(&rb, &ref, 2);
		bad += pg_fp32_to_fp16(bits_f32(u)) != rb;
	}
	CHECK(bad == 0, "%d fp16 conversions differ from _Float16's", bad);
}
#endif

static void check_bf16(void)
{
	CHECK(pg_fp32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
	CHECK(pg_fp32_to_bf16(bits_f32(0x3f808000)) == 0x3f80, "bf16 tie even");
	CHECK(pg_fp32_to_bf16(bits_f32(0x3f818000)) == 0x3f82, "bf16 tie up");
	CHECK(pg_fp32_to_bf16(bits_f32(0x3f808001)) == 0x3f81, "bf16 above");
	CHECK(pg_fp32_to_bf16(INFINITY) == 0x7f80, "bf16(inf)");
	CHECK(pg_fp32_to_bf16(-INFINITY) == 0xff80, "bf16(-inf)");
	CHECK(pg_fp32_to_bf16(bits_f32(0x7f7fffff)) == 0x7f80,
	      "bf16(FLT_MAX) rounds to inf");
	CHECK(pg_fp32_to_bf16(bits_f32(0x7f800001)) == 0x7fc0,
	      "bf16(snan) quiet");
	CHECK(pg_fp32_to_bf16(bits_f32(0x00010000)) == 0x0001,
	      "bf16(subnormal)");
	CHECK(pg_bf16_to_fp32(0x0001) == bits_f32(0x00010000),
	      "fp32(bf16 subnormal)");
	CHECK(isnan(pg_bf16_to_fp32(0x7fc1)), "fp32(bf16 nan)");
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = pg_bf16_to_fp32((uint16_t)h);

		if (isnan(f))
			continue;
		CHECK(pg_fp32_to_bf16(f) == h, "bf16 round trip %04x", h);
	}
}

/* One block x[j] = j - 16, whose quantisation is worked out by hand. */
static void check_known_blocks(void)
{
	float x[32], y[32];
	struct pg_block_q8_0 b80;
	struct pg_block_q8_1 b81;
	struct pg_block_q4_0 b40;
	struct pg_block_q4_1 b41;

	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16);
	CHECK(pg_quantize_row(PG_Q8_0, x, &b80, 32) == 34, "q8_0 bytes");
	CHECK(b80.d == pg_fp32_to_fp16(16.0f / 127.0f), "q8_0 d");
	/* q = round(x * 127 / 16): 4 -> 31.75 -> 32, 15 -> 119.06 -> 119 */
	CHECK(b80.qs[0] == -127 && b80.qs[16] == 0 && b80.qs[20] == 32 &&
	      b80.qs[31] == 119, "q8_0 q: %d %d %d %d", b80.qs[0],
	      b80.qs[16], b80.qs[20], b80.qs[31]);
	CHECK(pg_quantize_row(PG_Q8_1, x, &b81, 32) == 36, "q8_1 bytes");
	int sum = 0;
	for (int j = 0; j < 32; j++)
		sum += b81.qs[j];
	CHECK(!memcmp(b81.qs, b80.qs, 32) && b81.d == b80.d, "q8_1 q, d");
	CHECK(b81.s == pg_fp32_to_fp16((float)sum * (16.0f / 127.0f)),
	      "q8_1 s");

	CHECK(pg_quantize_row(PG_Q4_0, x, &b40, 32) == 18, "q4_0 bytes");
	CHECK(b40.d == pg_fp32_to_fp16(2.0f), "q4_0 d");	/* -16 / -8 */
	/* q = x / 2 + 8.5 truncated: x0 = -16 -> 0, x16 = 0 -> 8,
	 * x15 = -1 -> 8, x31 = 15 -> 16 clamped to 15 */
	CHECK(b40.qs[0] == 0x80 && b40.qs[15] == 0xf8, "q4_0 qs %02x %02x",
	      b40.qs[0], b40.qs[15]);
	pg_dequantize_row(PG_Q4_0, &b40, y, 32);
	CHECK(y[0] == -16.0f && y[16] == 0.0f && y[31] == 14.0f,
	      "q4_0 dequant");

	CHECK(pg_quantize_row(PG_Q4_1, x, &b41, 32) == 20, "q4_1 bytes");
	CHECK(b41.d == pg_fp32_to_fp16(31.0f / 15.0f) &&
	      b41.m == pg_fp32_to_fp16(-16.0f), "q4_1 d, m");
	/* x16 = 0: 16 * 15 / 31 + 0.5 = 8.24 -> 8; x31 = 15 -> 15 */
	CHECK(b41.qs[0] == 0x80 && (b41.qs[15] >> 4) == 15, "q4_1 qs");

	memset(x, 0, sizeof(x));
	pg_quantize_row(PG_Q4_1, x, &b41, 32);
	pg_dequantize_row(PG_Q4_1, &b41, y, 32);
	CHECK(y[5] == 0.0f && b41.d == 0, "q4_1 of zeros");
	pg_quantize_row(PG_Q8_0, x, &b80, 32);
	CHECK(b80.d == 0 && b80.qs[3] == 0, "q8_0 of zeros");
	CHECK(pg_quantize_row((enum pg_dtype)77, x, &b80, 32) == 0,
	      "unknown type");
}

/*
 * Weights and activations round ties apart (quant.c): in a block of amax
 * 127 holding k + 0.5 (d = 1, so x / d and x * 127/amax are exact), Q8_0
 * weights (pg_quantize_row) round away from zero, activations
 * (pg_quant_q8_0_ref, pg_quant_q8_1_ref, and pg_quantize_row's Q8_1, which
 * is only ever activations) to even, as the backends' matmuls do.  A
 * reference that quantises a matmul's activations must take the latter.
 */
static void check_ties(void)
{
	float x[32];
	struct pg_block_q8_0 w, a;
	struct pg_block_q8_1 a1, r1;
	int apart = 0;

	x[0] = 127.0f;
	for (int j = 1; j < 32; j++)
		x[j] = (float)(j - 16) + 0.5f;
	pg_quantize_row(PG_Q8_0, x, &w, 32);
	pg_quant_q8_0_ref(x, &a, 32);
	pg_quant_q8_1_ref(x, &a1, 32);
	pg_quantize_row(PG_Q8_1, x, &r1, 32);
	CHECK(w.d == a.d && w.d == pg_fp32_to_fp16(1.0f), "ties: d");
	for (int j = 1; j < 32; j++) {
		CHECK(w.qs[j] == (int)roundf(x[j]) &&
		      a.qs[j] == (int)nearbyintf(x[j]) && a1.qs[j] == a.qs[j],
		      "ties: %g as weight %d, as activation %d / %d", x[j],
		      w.qs[j], a.qs[j], a1.qs[j]);
		apart += w.qs[j] != a.qs[j];
	}
	/* -14.5: -15 as weight, -14 as activation; -13.5: -14 both */
	CHECK(w.qs[1] == -15 && a.qs[1] == -14 && w.qs[2] == -14 &&
	      a.qs[2] == -14 && apart == 16, "ties: %d %d %d %d, %d apart",
	      w.qs[1], a.qs[1], w.qs[2], a.qs[2], apart);
	CHECK(!memcmp(&a1, &r1, sizeof(a1)),
	      "ties: pg_quantize_row's Q8_1 is not the activations' rounding");
}

static float frand(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return (float)(*s >> 8) / 16777216.0f;
}

/* Normal-ish values: the sum of four uniforms, centred. */
static void fill(float *x, int n, uint32_t seed)
{
	for (int i = 0; i < n; i++)
		x[i] = frand(&seed) + frand(&seed) + frand(&seed) +
		       frand(&seed) - 2.0f;
}

/*
 * Round trip of a random row: every value within `slack` quantisation
 * steps (step = the block's |d|, plus the fp16 rounding of the minimum for
 * Q4_1), and the normalised MSE below nmse_max.
 */
static void check_round_trip(enum pg_dtype t, double slack, double nmse_max)
{
	enum { N = 4096 };
	static float x[N], y[N];
	static uint8_t q[N * 4];
	double se = 0, ss = 0;

	fill(x, N, 99 + t);
	x[100] = 0.0f;			/* a block with one huge value */
	x[101] = 40.0f;
	CHECK(pg_quantize_row(t, x, q, N) == pg_dtype_row_bytes(t, N),
	      "%s bytes", pg_dtype_name(t));
	pg_dequantize_row(t, q, y, N);
	for (int i = 0; i < N; i++) {
		int b = i / 32;
		float d = 0, m = 0;

		switch (t) {
		case PG_Q4_0: d = pg_fp16_to_fp32(((struct pg_block_q4_0 *)q)[b].d); break;
		case PG_Q4_1: d = pg_fp16_to_fp32(((struct pg_block_q4_1 *)q)[b].d);
			m = pg_fp16_to_fp32(((struct pg_block_q4_1 *)q)[b].m); break;
		case PG_Q8_0: d = pg_fp16_to_fp32(((struct pg_block_q8_0 *)q)[b].d); break;
		case PG_Q8_1: d = pg_fp16_to_fp32(((struct pg_block_q8_1 *)q)[b].d); break;
		case PG_F16: d = fabsf(x[i]) / 1024; break;	/* ulp */
		case PG_BF16: d = fabsf(x[i]) / 128; break;
		default: break;
		}
		double bound = slack * fabs(d) + fabs(m) / 1024.0 + 1e-7;

		if (fabs(x[i] - y[i]) > bound) {
			CHECK(0, "%s: x[%d] = %g -> %g (bound %g)",
			      pg_dtype_name(t), i, x[i], y[i], bound);
			break;
		}
		se += (x[i] - y[i]) * (x[i] - y[i]);
		ss += x[i] * x[i];
	}
	CHECK(se / ss < nmse_max, "%s: nmse %g > %g", pg_dtype_name(t),
	      se / ss, nmse_max);
	printf("%-5s round trip nmse %.3g (bound %.3g)\n", pg_dtype_name(t),
	       se / ss, nmse_max);
}

/*
 * Round trip of a random row of Q5_0, Q5_1 or a K-quant (quant.c's simple
 * scale choice): every value within `slack` steps, a step being the range
 * (max - min) of the value's (super-)block over qmax, the type's largest
 * quant; the normalised MSE below nmse_max; and dequantising what we
 * and an all-zero super-block stays zero.
 */
static void check_round_trip_k(enum pg_dtype t, int qmax, double slack,
			       double nmse_max)
{
	enum { N = 4096 };
	static float x[N], y[N];
	static uint8_t q[N * 4];
	int bs = pg_dtype_block_size(t);
	double se = 0, ss = 0, worst = 0;

	fill(x, N, 77 + t);
	x[300] = 40.0f;			/* a super-block with one huge value */
	x[1000] = -25.0f;		/* and one with a huge negative one */
	x[2048] = x[2049] = 0.0f;
	for (int i = 3072; i < 3072 + 256; i++)
		x[i] = 0.0f;		/* an all-zero super-block */
	CHECK(pg_quantize_row(t, x, q, N) == pg_dtype_row_bytes(t, N),
	      "%s bytes", pg_dtype_name(t));
	pg_dequantize_row(t, q, y, N);
	for (int b = 0; b < N / bs; b++) {
		float lo = x[b * bs], hi = x[b * bs];

		for (int i = b * bs; i < (b + 1) * bs; i++) {
			lo = fminf(lo, x[i]);
			hi = fmaxf(hi, x[i]);
		}
		lo = fminf(lo, 0.0f);	/* mins are never above 0 */
		double step = (hi - lo) / qmax;

		for (int i = b * bs; i < (b + 1) * bs; i++) {
			double e = fabs(x[i] - y[i]);

			CHECK(isfinite(y[i]), "%s: x[%d] -> %g", pg_dtype_name(t),
			      i, y[i]);
			if (step > 0 && e / step > worst)
				worst = e / step;
			if (step == 0)
				CHECK(y[i] == 0, "%s: zero block x[%d] -> %g",
				      pg_dtype_name(t), i, y[i]);
			se += (x[i] - y[i]) * (x[i] - y[i]);
			ss += x[i] * x[i];
		}
	}
	CHECK(worst <= slack, "%s: an error of %.3g steps > %.3g",
	      pg_dtype_name(t), worst, slack);
	CHECK(se / ss < nmse_max, "%s: nmse %g > %g", pg_dtype_name(t),
	      se / ss, nmse_max);
	printf("%-5s round trip nmse %.3g (bound %.3g), worst %.3g steps (bound %.3g)\n",
	       pg_dtype_name(t), se / ss, nmse_max, worst, slack);
}

/* Q8_K activations: each value within half a step of d q, every bsum the
 * sum of its 16 quants, and the block's largest value at +-127. */
static void check_q8_k(void)
{
	enum { N = 512 };
	static float x[N];
	static struct pg_block_q8_k b[N / 256];

	fill(x, N, 5);
	x[7] = -9.0f;
	pg_quant_q8_k_ref(x, b, N);
	CHECK(b[0].qs[7] == -127, "Q8_K: largest at %d", b[0].qs[7]);
	for (int i = 0; i < N; i++)
		CHECK(fabsf(x[i] - b[i / 256].d * b[i / 256].qs[i % 256]) <=
		      0.5001f * b[i / 256].d, "Q8_K: x[%d]", i);
	for (int i = 0; i < N / 16; i++) {
		int s = 0;

		for (int l = 0; l < 16; l++)
			s += b[i / 16].qs[16 * (i % 16) + l];
		CHECK(b[i / 16].bsums[i % 16] == s, "Q8_K: bsum %d", i);
	}
	printf("Q8_K  activations within half a step, sums exact\n");
}

int main(void)
{
	CHECK(!strcmp(pg_dtype_name(PG_Q4_1), "Q4_1") &&
	      !strcmp(pg_dtype_name((enum pg_dtype)5), "unknown"), "names");
	check_fp16_known();
	check_fp16_all();
#ifdef __FLT16_MAX__
	check_fp16_vs_compiler();
#endif
	check_bf16();
	check_known_blocks();
	check_ties();
	/*
	 * Bounds: 8-bit types err by at most half a step, 4-bit ones by half
	 * a step too except Q4_0's clamp of +8 to +7 (one step); 0.55 and
	 * 1.05 leave room for the fp16 rounding of d.
	 */
	check_round_trip(PG_Q8_0, 0.55, 2e-4);
	check_round_trip(PG_Q8_1, 0.55, 2e-4);
	check_round_trip(PG_Q4_0, 1.05, 2e-2);
	check_round_trip(PG_Q4_1, 0.55, 2e-2);
	check_round_trip(PG_F16, 0.5, 1e-7);
	check_round_trip(PG_BF16, 0.5, 1e-5);
	/*
	 * Steps: half a step for the types with a minimum, plus the 4- or
	 * 6-bit rounding of the sub-block scales (0.6); the symmetric ones
	 * (Q5_0, Q3_K, Q6_K) spread their grid over [-amax, amax], twice
	 * the range of a one-signed block, and clamp the top value (1.1).
	 */
	check_q8_k();
	check_round_trip_k(PG_Q5_0, 31, 1.1, 1e-2);
	check_round_trip_k(PG_Q5_1, 31, 0.6, 5e-3);
	check_round_trip_k(PG_Q2_K, 3, 0.6, 0.1);
	check_round_trip_k(PG_Q3_K, 7, 1.1, 3e-2);
	check_round_trip_k(PG_Q4_K, 15, 0.6, 3e-2);
	check_round_trip_k(PG_Q5_K, 31, 0.6, 5e-3);
	check_round_trip_k(PG_Q6_K, 63, 1.1, 2e-3);
	if (failures)
		fprintf(stderr, "test_quant: %d failures\n", failures);
	return failures ? 1 : 0;
}
