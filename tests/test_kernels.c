/*
 * test_kernels.c - conformance of the CPU backend's ops: every op, at every
 * instruction-set level this processor has (scalar, avx2, avx512,
 * avx512vnni), on 1 and 2 threads, against the scalar backend and
 * against double-precision references.
 *
 * Inputs: each case draws from a random stream of its own (reseed), so
 * that no result depends on which tables ran before it.  The references
 * quantise activations as the backends do (quant_act).
 *
 * Error measure: normalised MSE, sum (a - b)^2 / sum b^2, with bounds:
 *   - scalar quantised dots vs a float dot of dequantised values: each dot
 *     within 1e-5 of sum |w x| (only summation order differs; Q4_1's
 *     m_w s_x terms take s_x as stored, in F16);
 *   - matmul, float weights, any level vs double: 1e-9 (F32), and the
 *     same after rounding W to F16/BF16 (the reference uses rounded W);
 *   - matmul, quantised weights, scalar vs double of dequantised W and
 *     unquantised x: 1e-3 (the 8-bit activations' error, ~1e-5 typical);
 *     SIMD levels vs scalar: 2e-5 (accumulation order differs);
 *   - rmsnorm, silu_mul, add vs double: 1e-10; rope vs double: 1e-8;
 *   - attention vs double over the stored (rounded) K and V, q rounded to
 *     the same type (the scores' precision, attention.c): 1e-9;
 *   - kv_write, get_rows: exact;
 *   - each table's activation quantisers: bit-identical to the reference;
 *     its 1-row, 4-row and 4x2 quantised dots: bit-identical to each other,
 *     and within 1e-5 of sum |w x| of the scalar dot (same integers, float
 *     sums in another order); Q4_0 and Q4_1 in pagoda's numerics
 *     bit-identical to the scalar dot; Q4_1's llama.cpp-order loops
 *     likewise against their own reference (within 1e-5);
 *   - each table's gemm8 loops (8 rows x n tokens, repacked weights, both
 *     numerics): bit-identical to its 4-row dots; these and the quantised
 *     matmul on rows 13, 27, 70 for every n in 1..37: each output within 1e-5 of
 *     sum |w x| of the scalar dot, and the matmul's outputs for n tokens
 *     bit-identical to each token's alone and, on the scalar table (and
 *     for Q4_0/Q4_1 in pagoda's numerics on every table), to the scalar
 *     dots themselves;
 *   - Q4 matrices repacked in 8-row groups (pg_cpu_q4x8_pack): matmul and
 *     matmul_parts bit-identical to the same matrix in rows, n = 1..37;
 *   - every quantised type's matmul (in rows and repacked, Q4_1 in both
 *     numerics) for n = 1..19 and 64: each token's outputs bit-identical
 *     to its one-token (decode) result;
 *   - Q5_0, Q5_1 and the K-quants: hand-built blocks dequantised exactly
 *     as a per-value formula of the layout says (pg_dequantize_row and
 *     every backend's get_rows); the scalar matmul within 1e-5 of the sum
 *     of |terms| of the float dot of dequantised W and activations; every
 *     table on 1 and 2 threads, n = 1, 2, 5, 9 with a bias and
 *     matmul_parts: bit-identical to the scalar table; a part's outputs
 *     those of its columns alone; a cut inside a 256-block gives NaN;
 *   - llama.cpp numerics (kernels/cpu/llamacpp.c): each table's attention
 *     loop and silu bit-identical to the references; the reference
 *     attention loop within 1e-5 nmse of softmax attention in double (its
 *     F16 accumulator); its expf within 3e-7 relative of exp in double.
 * The same level on 1 and 2 threads must agree bit for bit: each output is
 * computed by the same code whatever the split.
 * PAGODA_CPU_KERNELS (kernels/cpu/cpu.h) set to a level tests only the
 * levels up to it, the scalar reference always; its handling is checked
 * too.  A line "test_kernels: tables run: scalar avx2 ..." says which ran,
 * and the next which were skipped and why.  TEST_KERNELS_SEED=N draws
 * other inputs.  --tables prints the levels this processor runs and exits.
 * Exits 0 on success, 1 on failure.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"	/* the ISA tables, for direct checks */
#include "kernels/cpu/threadpool.h"
#include "tests/check.h"

/* The backends under test: every level present, 1 and 2 threads. */
#define MAX_BE (2 * (PG_ISA_TOP + 1))	/* every table on 1 and 2 threads */
static struct pg_backend *bes[MAX_BE];
static int n_bes;
static struct pg_backend *ref;		/* scalar, 1 thread: bes[0] */
/* The highest table under test: the processor's best, or the forced one. */
static enum pg_cpu_isa top;

/*
 * The random inputs.  Each case of each check draws from a stream of its
 * own, seeded from its name and shape (reseed), never from where earlier
 * checks left one stream: a case's inputs are the same whichever tables
 * this processor has and however many ran before (with one stream, an
 * extra table shifted every later draw).  TEST_KERNELS_SEED (a number,
 * default 1) moves every stream at once, to try other inputs.
 */
static uint32_t rng, base_seed = 1;

static uint32_t fnv(uint32_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 16777619u;
	return h;
}

static void reseed(const char *check, int64_t a, int64_t b, int64_t c)
{
	int64_t v[3] = { a, b, c };
	uint32_t h = fnv(2166136261u, &base_seed, sizeof(base_seed));

	h = fnv(h, check, strlen(check));
	rng = fnv(h, v, sizeof(v));
}

static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)(rng >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static void fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = frand();
}

static double nmse(const float *a, const double *b, size_t n)
{
	double se = 0, ss = 0;

	for (size_t i = 0; i < n; i++) {
		se += (a[i] - b[i]) * (a[i] - b[i]);
		ss += b[i] * b[i];
	}
	return ss > 0 ? se / ss : se;
}

static double nmse_f(const float *a, const float *b, size_t n)
{
	double se = 0, ss = 0;

	for (size_t i = 0; i < n; i++) {
		se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		ss += (double)b[i] * b[i];
	}
	return ss > 0 ? se / ss : se;
}

static const char *be_name(struct pg_backend *be)
{
	static char buf[4][32];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%dt",
		 pg_cpu_isa_name(pg_cpu_backend_isa(be)),
		 pg_cpu_backend_threads(be));
	return buf[k];
}

/*
 * Compare out (from backend bes[i]) with want: nmse against the double
 * reference, and bit-identity with the same level's 1-thread output.
 */
static void compare(const char *what, int i, const float *out,
		    const double *want, double bound, float *first, size_t n)
{
	double e = nmse(out, want, n);

	CHECK(e <= bound, "%s on %s: nmse %.3g > %.3g", what,
	      be_name(bes[i]), e, bound);
	if (pg_cpu_backend_threads(bes[i]) == 1)
		memcpy(first, out, n * sizeof(float));
	else
		CHECK(!memcmp(first, out, n * sizeof(float)),
		      "%s on %s differs from 1 thread", what, be_name(bes[i]));
}

/* ---- dots: scalar quantised matmul row vs dequantised float dot ---- */

static const enum pg_dtype wtypes[] = {
	PG_F32, PG_F16, PG_BF16, PG_Q8_0, PG_Q4_0, PG_Q4_1,
};
#define N_WTYPES (sizeof(wtypes) / sizeof(wtypes[0]))

static int is_quant(enum pg_dtype t)
{
	return pg_dtype_block_size(t) == PG_QK;
}

/*
 * n activations x quantised to vt as the backends quantise them (Q8_0,
 * Q8_1: pg_quant_q8_*_ref, x * 127/amax with halves to even; F32: copied),
 * not as pg_quantize_row quantises Q8_0 weights (x / d, halves away from
 * zero): a reference on the weights' rounding is a step off the backends
 * wherever the two part, which a 1e-5 bound does not hold.
 */
static void quant_act(enum pg_dtype vt, const float *x, void *dst, int64_t n)
{
	if (vt == PG_Q8_0)
		pg_quant_q8_0_ref(x, dst, n);
	else if (vt == PG_Q8_1)
		pg_quant_q8_1_ref(x, dst, n);
	else if (vt == PG_Q8_K)
		pg_quant_q8_k_ref(x, dst, n);
	else
		memcpy(dst, x, (size_t)n * sizeof(float));
}

/*
 * Make the 32 values at x a block of ties: amax 127, so that x / d and
 * x * 127/amax are both exactly k + 0.5, where the weights' rounding (away
 * from zero) and the activations' (to even) part.  A reference quantising
 * activations as weights cannot match the backends on such a block
 * (random blocks part only about once in 10^4).
 */
static void plant_ties(float *x)
{
	x[0] = 127.0f;
	for (int j = 1; j < PG_QK; j++)
		x[j] = (float)(j - 16) + 0.5f;
}

/* A weight matrix of random values in type t; *wf: the rounded values. */
static struct pg_matrix make_matrix(enum pg_dtype t, int64_t rows,
				    int64_t cols, float **wf)
{
	struct pg_matrix m = { .type = t, .n_rows = rows, .n_cols = cols };
	float *f = xmalloc((size_t)(rows * cols) * sizeof(float));
	uint8_t *d;

	m.row_bytes = pg_dtype_row_bytes(t, (uint64_t)cols);
	d = xmalloc(m.row_bytes * (size_t)rows);
	fill(f, (size_t)(rows * cols));
	for (int64_t r = 0; r < rows; r++) {
		pg_quantize_row(t, f + r * cols, d + r * m.row_bytes, cols);
		pg_dequantize_row(t, d + r * m.row_bytes, f + r * cols, cols);
	}
	m.data = d;
	*wf = f;
	return m;
}

/*
 * The float dot a scalar quantised dot stands for, in double, into *s, and
 * sum |w x| into *a: row wf (dequantised) . xd (the activations xq of type
 * vt, dequantised), n values; for Q4_1 weights (row w) the minimum's term
 * m_w * s_x of each block takes s_x as the block stores it (d_x * sum q_x
 * rounded to F16), as the dot does, not as sum xd.
 */
static void float_dot(enum pg_dtype t, const void *w, const float *wf,
		      const void *xq, const float *xd, int64_t n, double *s,
		      double *a)
{
	const struct pg_block_q4_1 *wb = w;
	const struct pg_block_q8_1 *xb = xq;

	*s = 0;
	*a = 0;
	for (int64_t i = 0; i < n; i++) {
		double m = t == PG_Q4_1 ? pg_fp16_to_fp32(wb[i / PG_QK].m) : 0;

		*s += ((double)wf[i] - m) * xd[i];
		*a += fabs((double)wf[i] * xd[i]);
		if (t == PG_Q4_1 && i % PG_QK == PG_QK - 1)
			*s += m * pg_fp16_to_fp32(xb[i / PG_QK].s);
	}
}

/*
 * The scalar backend's matmul of one token, each output against the float
 * dot of dequantised W and dequantised activations (quantised here the
 * same way as the backend's reference), within 1e-5 of sum |w x|.
 */
static void check_dots(void)
{
	enum { ROWS = 8, COLS = 1056 };	/* 33 blocks: not a multiple of 64 */

	for (size_t k = 0; k < N_WTYPES; k++) {
		enum pg_dtype t = wtypes[k];
		enum pg_dtype vt = t == PG_Q4_1 ? PG_Q8_1 :
				   is_quant(t) ? PG_Q8_0 : PG_F32;
		float *wf, x[COLS], xd[COLS], y[ROWS];
		_Alignas(16) uint8_t xq[COLS * sizeof(float)];
		struct pg_matrix m;

		reseed("dots", t, 0, 0);
		m = make_matrix(t, ROWS, COLS, &wf);
		fill(x, COLS);
		plant_ties(x + PG_QK);
		quant_act(vt, x, xq, COLS);
		pg_dequantize_row(vt, xq, xd, COLS);
		ref->ops->matmul(ref, &m, x, 1, NULL, y);
		for (int r = 0; r < ROWS; r++) {
			double s, a;

			float_dot(t, (const uint8_t *)m.data + r * m.row_bytes,
				  wf + r * COLS, xq, xd, COLS, &s, &a);
			CHECK(fabs(y[r] - s) <= 1e-5 * a,
			      "dot %s: %g vs %g (sum |wx| %g)",
			      pg_dtype_name(t), y[r], s, a);
		}
		free(wf);
		free((void *)m.data);
	}
	printf("dots: scalar quantised dots match dequantised float dots\n");
}

/* ---- matmul ---- */

static void matmul_ref(const float *wf, int64_t rows, int64_t cols,
		       const float *x, int n, const float *bias, double *y)
{
	for (int t = 0; t < n; t++)
		for (int64_t r = 0; r < rows; r++) {
			double s = bias ? bias[r] : 0;

			for (int64_t i = 0; i < cols; i++)
				s += (double)wf[r * cols + i] * x[t * cols + i];
			y[t * rows + r] = s;
		}
}

static void check_matmul_case(enum pg_dtype t, int64_t rows, int64_t cols,
			      int n, int with_bias)
{
	float *wf, *x, *y, *first, *scalar, *bias = NULL;
	double *want;
	struct pg_matrix m;
	size_t ny = (size_t)n * (size_t)rows;
	char what[96];

	reseed("matmul", t, rows * 100000 + cols, n * 2 + with_bias);
	m = make_matrix(t, rows, cols, &wf);
	x = xmalloc((size_t)n * (size_t)cols * sizeof(float));
	y = xmalloc(ny * sizeof(float));
	first = xmalloc(ny * sizeof(float));
	scalar = xmalloc(ny * sizeof(float));
	want = xmalloc(ny * sizeof(double));
	fill(x, (size_t)n * (size_t)cols);
	if (with_bias) {
		bias = xmalloc((size_t)rows * sizeof(float));
		fill(bias, (size_t)rows);
	}
	matmul_ref(wf, rows, cols, x, n, bias, want);
	snprintf(what, sizeof(what), "matmul %s %lldx%lld n=%d%s",
		 pg_dtype_name(t), (long long)rows, (long long)cols, n,
		 bias ? " +bias" : "");
	for (int i = 0; i < n_bes; i++) {
		int simd = pg_cpu_backend_isa(bes[i]) != PG_ISA_SCALAR;

		bes[i]->ops->matmul(bes[i], &m, x, n, bias, y);
		compare(what, i, y, want, is_quant(t) ? 1e-3 : 1e-9, first, ny);
		if (i == 0)
			memcpy(scalar, y, ny * sizeof(float));
		if (simd && is_quant(t)) {
			double e = nmse_f(y, scalar, ny);

			CHECK(e <= 2e-5, "%s on %s vs scalar: nmse %.3g",
			      what, be_name(bes[i]), e);
		}
	}
	free(wf), free((void *)m.data), free(x), free(y), free(first);
	free(scalar), free(want), free(bias);
}

static void check_matmul(void)
{
	static const int64_t shapes[][2] = {
		{ 33, 96 }, { 64, 576 }, { 17, 1536 }, { 130, 160 }, { 5, 32 },
	};
	static const int ns[] = { 1, 7, 33 };

	for (size_t k = 0; k < N_WTYPES; k++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (size_t j = 0; j < sizeof(ns) / sizeof(ns[0]); j++)
				check_matmul_case(wtypes[k], shapes[s][0],
						  shapes[s][1], ns[j],
						  (int)(s + j) % 2);
	printf("matmul: 6 types x 5 shapes x n = 1, 7, 33\n");
}

/*
 * matmul_parts: each part bit for bit the matmul of a matrix of just its
 * columns (what a TP rank holding those columns computes), on every
 * backend and path (1 token, tiles, gemm8); add_parts: the parts summed
 * in order, then added.
 */
static void check_matmul_parts(void)
{
	static const int64_t cols[] = { 0, 64, 96, 320, 576 };
	static const int ns[] = { 1, 2, 7, 33 };
	enum { ROWS = 37, NP = 4, C = 576 };

	for (size_t k = 0; k < N_WTYPES; k++)
		for (size_t j = 0; j < sizeof(ns) / sizeof(ns[0]); j++) {
			int n = ns[j];
			size_t ny = (size_t)n * ROWS;
			float *wf, *x = xmalloc((size_t)n * C * 4);
			float *xs = xmalloc((size_t)n * C * 4);
			float *parts = xmalloc(NP * ny * 4), *y = xmalloc(ny * 4);
			float *acc = xmalloc(ny * 4), *got = xmalloc(ny * 4);
			float *t = xmalloc(ny * 4);
			const float *ptr[NP];
			struct pg_matrix m;

			reseed("matmul_parts", wtypes[k], n, 0);
			m = make_matrix(wtypes[k], ROWS, C, &wf);
			fill(x, (size_t)n * C);
			fill(acc, ny);
			for (int i = 0; i < n_bes; i++) {
				struct pg_backend *be = bes[i];

				be->ops->matmul_parts(be, &m, x, n, NP, cols, 0, parts);
				for (int p = 0; p < NP; p++) {
					int64_t w = cols[p + 1] - cols[p];
					struct pg_matrix v = m;

					v.data = (const uint8_t *)m.data +
						 pg_dtype_row_bytes(m.type, (uint64_t)cols[p]);
					v.n_cols = w;
					for (int r = 0; r < n; r++)
						memcpy(xs + (size_t)r * w,
						       x + (size_t)r * C + cols[p],
						       (size_t)w * 4);
					be->ops->matmul(be, &v, xs, n, NULL, y);
					CHECK(!memcmp(y, parts + (size_t)p * ny, ny * 4),
					      "matmul_parts %s n=%d part %d on %s: not the matmul of its columns",
					      pg_dtype_name(m.type), n, p, be_name(be));
					ptr[p] = parts + (size_t)p * ny;
				}
				for (size_t e = 0; e < ny; e++) {
					t[e] = ptr[0][e];
					for (int p = 1; p < NP; p++)
						t[e] += ptr[p][e];
					y[e] = acc[e] + t[e];
				}
				memcpy(got, acc, ny * 4);
				be->ops->add_parts(be, got, ptr, NP, (int64_t)ny);
				CHECK(!memcmp(got, y, ny * 4),
				      "add_parts %s n=%d on %s: not the parts summed in order",
				      pg_dtype_name(m.type), n, be_name(be));
				/* summed in the loops: the same sum */
				be->ops->matmul_parts(be, &m, x, n, NP, cols, 1, got);
				for (size_t e = 0; e < ny; e++)
					got[e] += acc[e];
				CHECK(!memcmp(got, y, ny * 4),
				      "matmul_parts %s n=%d on %s: summed parts differ from add_parts'",
				      pg_dtype_name(m.type), n, be_name(be));
			}
			free(wf), free((void *)m.data), free(x), free(xs);
			free(parts), free(y), free(acc), free(got), free(t);
		}
	printf("matmul_parts (apart and summed), add_parts: 6 types, 4 parts, n = 1, 2, 7, 33, bit for bit\n");
}

/* ---- get_rows ---- */

static void check_get_rows(void)
{
	enum { ROWS = 50, COLS = 160, N = 7 };
	static const int32_t ids[N] = { 3, 0, 49, 3, 17, 25, 8 };
	float out[N * COLS];

	for (size_t k = 0; k < N_WTYPES; k++) {
		float *wf;
		struct pg_matrix m;

		reseed("get_rows", wtypes[k], 0, 0);
		m = make_matrix(wtypes[k], ROWS, COLS, &wf);
		for (int i = 0; i < n_bes; i++) {
			bes[i]->ops->get_rows(bes[i], &m, ids, N, out);
			for (int t = 0; t < N; t++)
				CHECK(!memcmp(out + t * COLS,
					      wf + ids[t] * COLS,
					      COLS * sizeof(float)),
				      "get_rows %s row %d on %s",
				      pg_dtype_name(wtypes[k]), t,
				      be_name(bes[i]));
		}
		free(wf);
		free((void *)m.data);
	}
	printf("get_rows: exact\n");
}

/* ---- rmsnorm, silu_mul, add ---- */

static void check_rmsnorm(void)
{
	static const int shapes[][2] = { { 1, 576 }, { 7, 100 }, { 33, 64 },
					 { 64, 576 }, { 3, 5 } };

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int n = shapes[s][0], dim = shapes[s][1];
		size_t sz = (size_t)n * (size_t)dim;
		float *x = xmalloc(sz * 4), *y = xmalloc(sz * 4);
		float *first = xmalloc(sz * 4), *w = xmalloc((size_t)dim * 4);
		double *want = xmalloc(sz * 8);

		reseed("rmsnorm", n, dim, 0);
		fill(x, sz);
		fill(w, (size_t)dim);
		for (int t = 0; t < n; t++) {
			double ss = 0;

			for (int i = 0; i < dim; i++)
				ss += (double)x[t * dim + i] * x[t * dim + i];
			ss = 1.0 / sqrt(ss / dim + 1e-5);
			for (int i = 0; i < dim; i++)
				want[t * dim + i] = x[t * dim + i] * ss * w[i];
		}
		for (int i = 0; i < n_bes; i++) {
			memcpy(y, x, sz * 4);	/* in place */
			bes[i]->ops->rmsnorm(bes[i], y, w, n, dim, 1e-5f, y);
			compare("rmsnorm", i, y, want, 1e-10, first, sz);
		}
		free(x), free(y), free(first), free(w), free(want);
	}
	printf("rmsnorm: ok\n");
}

static void check_silu_add(void)
{
	static const int64_t sizes[] = { 1, 7, 33, 576, 1536, 100003 };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = (size_t)sizes[s];
		float *g = xmalloc(n * 4), *u = xmalloc(n * 4);
		float *y = xmalloc(n * 4), *first = xmalloc(n * 4);
		float *first2 = xmalloc(n * 4);
		double *want = xmalloc(n * 8), *want2 = xmalloc(n * 8);

		reseed("silu_add", (int64_t)n, 0, 0);
		fill(g, n);
		fill(u, n);
		for (size_t i = 0; i < n; i++) {
			g[i] *= 8.0f;
			want[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
			want2[i] = (double)g[i] + u[i];
		}
		for (int i = 0; i < n_bes; i++) {
			memcpy(y, g, n * 4);
			bes[i]->ops->silu_mul(bes[i], y, u, (int64_t)n);
			compare("silu_mul", i, y, want, 1e-10, first, n);
		}
		/*
		 * GeGLU against float64: the F16 steps of gelu.c's table cost
		 * up to 2^-11 of a value (nmse ~1e-7); the clamps at +-10 are
		 * hit by every 5th value, spread to +-12.  Every table gives
		 * the scalar loop's bits.
		 */
		for (size_t i = 0; i < n; i++) {
			double x;

			if (i % 5 == 4)
				g[i] = g[i] * 1.5f + (g[i] < 0 ? -1.0f : 1.0f);
			if (i % 97 == 3)
				g[i] = i % 2 ? 10.0f : -10.0f;
			x = g[i];
			want2[i] = x + u[i];
			want[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) *
						       (x + 0.044715 * x * x * x))) * u[i];
		}
		for (int i = 0; i < n_bes; i++) {
			memcpy(y, g, n * 4);
			bes[i]->ops->gelu_mul(bes[i], y, u, (int64_t)n);
			compare("gelu_mul", i, y, want, 1e-6, first, n);
			if (i == 0)
				memcpy(first2, y, n * 4);
			CHECK(!memcmp(first2, y, n * 4),
			      "gelu_mul on %s differs from the scalar loop",
			      be_name(bes[i]));
		}
		for (int i = 0; i < n_bes; i++) {
			memcpy(y, g, n * 4);
			bes[i]->ops->add(bes[i], y, u, (int64_t)n);
			compare("add", i, y, want2, 1e-12, first2, n);
		}
		free(g), free(u), free(y), free(first), free(want);
		free(want2), free(first2);
	}
	printf("silu_mul, gelu_mul, add: ok\n");
}

/* ---- rope ---- */

static void rope_ref(const float *x, double *y, int n, int n_heads, int hd,
		     int n_rot, const int32_t *pos, double base,
		     enum pg_rope_mode mode)
{
	for (int t = 0; t < n; t++)
		for (int h = 0; h < n_heads; h++) {
			const float *a = x + ((size_t)t * n_heads + h) * hd;
			double *b = y + ((size_t)t * n_heads + h) * hd;

			for (int i = 0; i < hd; i++)
				b[i] = a[i];
			for (int i = 0; i < n_rot / 2; i++) {
				double th = pos[t] * pow(base, -2.0 * i / n_rot);
				int p = mode == PG_ROPE_NEOX ? i : 2 * i;
				int q = mode == PG_ROPE_NEOX ? i + n_rot / 2 :
					p + 1;

				b[p] = a[p] * cos(th) - a[q] * sin(th);
				b[q] = a[p] * sin(th) + a[q] * cos(th);
			}
		}
}

static void check_rope(void)
{
	static const int cases[][4] = {	/* n, n_heads, head_dim, n_rot */
		{ 1, 9, 64, 64 }, { 7, 3, 128, 128 }, { 33, 4, 64, 32 },
		{ 2, 2, 256, 160 },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		for (int mode = 0; mode <= 2; mode += 2) {
			int n = cases[c][0], nh = cases[c][1];
			int hd = cases[c][2], nr = cases[c][3];
			size_t sz = (size_t)n * nh * hd;
			float *x = xmalloc(sz * 4), *y = xmalloc(sz * 4);
			float *first = xmalloc(sz * 4);
			double *want = xmalloc(sz * 8);
			int32_t pos[64];

			reseed("rope", (int64_t)c, mode, 0);
			fill(x, sz);
			for (int t = 0; t < n; t++)
				pos[t] = t * 37 + (int)c * 500;
			rope_ref(x, want, n, nh, hd, nr, pos, 10000.0,
				 (enum pg_rope_mode)mode);
			for (int i = 0; i < n_bes; i++) {
				memcpy(y, x, sz * 4);
				bes[i]->ops->rope(bes[i], y, n, nh, hd, nr, pos,
						  10000.0f,
						  (enum pg_rope_mode)mode);
				compare(mode ? "rope neox" : "rope norm", i, y,
					want, 1e-8, first, sz);
			}
			free(x), free(y), free(first), free(want);
		}
	printf("rope: norm and neox, partial rotation\n");
}

/* ---- kv_write and attention ---- */

struct attn_case {
	enum pg_dtype type;
	int page_tokens, head_dim, n_kv_heads, group;
	int n_seqs;
	int n_ctx[3], n_rows[3];
};

/* Positions 0 .. n_ctx - 1 of each sequence, pages dealt backwards. */
static int32_t *make_pages(const struct attn_case *ac, int32_t **pages,
			   int *n_pages)
{
	int total = 0, next;
	int32_t *slots;

	for (int s = 0; s < ac->n_seqs; s++)
		total += (ac->n_ctx[s] + ac->page_tokens - 1) / ac->page_tokens;
	*n_pages = total;
	next = total;
	for (int s = 0; s < ac->n_seqs; s++) {
		int np = (ac->n_ctx[s] + ac->page_tokens - 1) / ac->page_tokens;

		pages[s] = xmalloc((size_t)np * sizeof(int32_t));
		for (int p = 0; p < np; p++)
			pages[s][p] = --next;
	}
	slots = xmalloc((size_t)total * ac->page_tokens * sizeof(int32_t));
	return slots;
}

/* Attention over the stored K, V (read back as floats) in double. */
static void attn_ref(const struct attn_case *ac, const float *kf,
		     const float *vf, const float *q, int n_heads,
		     const struct pg_attn_seq *seqs, float scale, double *out)
{
	int hd = ac->head_dim, kvd = ac->n_kv_heads * hd;
	int ctx0 = 0;

	for (int s = 0; s < ac->n_seqs; s++) {
		const struct pg_attn_seq *sq = &seqs[s];

		for (int i = 0; i < sq->n_rows; i++)
			for (int h = 0; h < n_heads; h++) {
				int nk = sq->n_ctx - sq->n_rows + i + 1;
				int kvh = h / ac->group;
				const float *qr = q + ((size_t)(sq->first_row + i) * n_heads + h) * hd;
				double *o = out + ((size_t)(sq->first_row + i) * n_heads + h) * hd;
				double *sc = xmalloc((size_t)nk * 8), mx = -INFINITY, l = 0;

				for (int p = 0; p < nk; p++) {
					const float *kr = kf + (size_t)(ctx0 + p) * kvd + kvh * hd;
					double d = 0;

					for (int e = 0; e < hd; e++)
						d += (double)qr[e] * kr[e];
					sc[p] = d * scale;
					mx = fmax(mx, sc[p]);
				}
				for (int e = 0; e < hd; e++)
					o[e] = 0;
				for (int p = 0; p < nk; p++) {
					const float *vr = vf + (size_t)(ctx0 + p) * kvd + kvh * hd;
					double w = exp(sc[p] - mx);

					l += w;
					for (int e = 0; e < hd; e++)
						o[e] += w * vr[e];
				}
				for (int e = 0; e < hd; e++)
					o[e] /= l;
				free(sc);
			}
		ctx0 += sq->n_ctx;
	}
}

/*
 * Attention in two lanes (halves of every page's slots): close to the
 * whole attention, and bit for bit what two CP ranks give, each holding
 * one half in a store of its own (copied here from kv), after attn_merge.
 */
static void check_lanes(struct pg_backend *be, const struct pg_kv_layout *kv,
			int n_pages, int block, const float *q,
			const struct pg_attn_heads *hs,
			const struct pg_attn_seq *seqs, int n_seqs, size_t qsz,
			const double *want, const char *what)
{
	size_t nrh = qsz / (size_t)kv->head_dim, part = qsz + nrh;
	int rows = (int)(nrh / (size_t)hs->n_heads), lt = kv->page_tokens / 2;
	size_t eb = pg_dtype_block_bytes(kv->type);
	size_t run = (size_t)lt * (size_t)kv->head_dim * eb;
	float *parts = xmalloc(2 * part * 4), *out = xmalloc(qsz * 4);
	float *lanes = xmalloc(qsz * 4);
	float scale = 1.0f / sqrtf((float)kv->head_dim);
	struct pg_kv_layout lv = *kv, cp = *kv;
	double e;

	lv.lanes = 2;
	be->ops->attention(be, &lv, block, q, hs, seqs, n_seqs, scale, lanes,
			   NULL);
	e = nmse(lanes, want, qsz);
	CHECK(e <= 1e-9, "%s in two lanes on %s: nmse %.3g", what,
	      be_name(be), e);
	/* CP rank r's store: half r of every page's slots */
	cp.page_tokens = lt;
	cp.page_bytes = kv->page_bytes / 2;
	cp.cp_size = 2;
	cp.base = xmalloc(cp.page_bytes * (size_t)n_pages);
	for (cp.cp_rank = 0; cp.cp_rank < 2; cp.cp_rank++) {
		for (int pg = 0; pg < n_pages; pg++)
			for (int k = 0; k < kv->n_blocks * 2 * kv->n_kv_heads; k++)
				memcpy((uint8_t *)cp.base + pg * cp.page_bytes +
				       (size_t)k * run,
				       (const uint8_t *)kv->base +
				       pg * kv->page_bytes + (size_t)k * 2 * run +
				       (size_t)cp.cp_rank * run, run);
		be->ops->attention(be, &cp, block, q, hs, seqs, n_seqs, scale,
				   parts + cp.cp_rank * part,
				   parts + cp.cp_rank * part + qsz);
	}
	be->ops->attn_merge(be, parts, part, 2, rows, hs->n_heads,
			    kv->head_dim, out);
	CHECK(!memcmp(out, lanes, qsz * 4),
	      "%s in two lanes on %s: not the bits of two CP ranks merged",
	      what, be_name(be));
	free(parts), free(out), free(lanes), free(cp.base);
}

static void check_attn_case(const struct attn_case *ac)
{
	enum { BLOCK = 1, N_BLOCKS = 2 };
	int hd = ac->head_dim, nkv = ac->n_kv_heads, n_heads = nkv * ac->group;
	int kvd = nkv * hd, total_ctx = 0, rows = 0, n_pages;
	int32_t *pages[3];
	int32_t *slots = make_pages(ac, pages, &n_pages);
	struct pg_kv_layout kv = {
		.page_tokens = ac->page_tokens, .n_blocks = N_BLOCKS,
		.n_kv_heads = nkv, .head_dim = hd, .type = ac->type,
	};
	struct pg_attn_seq seqs[3];

	kv.page_bytes = (size_t)N_BLOCKS * 2 * nkv * ac->page_tokens * hd *
			pg_dtype_block_bytes(ac->type);
	for (int s = 0; s < ac->n_seqs; s++) {
		seqs[s] = (struct pg_attn_seq){ .pages = pages[s],
			.n_ctx = ac->n_ctx[s], .first_row = rows,
			.n_rows = ac->n_rows[s] };
		for (int p = 0; p < ac->n_ctx[s]; p++)
			slots[total_ctx + p] = pages[s][p / ac->page_tokens] *
				ac->page_tokens + p % ac->page_tokens;
		total_ctx += ac->n_ctx[s];
		rows += ac->n_rows[s];
	}

	size_t qsz = (size_t)rows * n_heads * hd;
	float *k = xmalloc((size_t)total_ctx * kvd * 4);
	float *v = xmalloc((size_t)total_ctx * kvd * 4);
	float *kf = xmalloc((size_t)total_ctx * kvd * 4);
	float *vf = xmalloc((size_t)total_ctx * kvd * 4);
	float *q = xmalloc(qsz * 4), *out = xmalloc(qsz * 4);
	float *qf = xmalloc(qsz * 4), *first = xmalloc(qsz * 4);
	double *want = xmalloc(qsz * 8);
	char what[128];

	kv.base = xmalloc(kv.page_bytes * (size_t)n_pages);
	fill(k, (size_t)total_ctx * kvd);
	fill(v, (size_t)total_ctx * kvd);
	fill(q, qsz);
	for (size_t i = 0; i < (size_t)total_ctx * kvd; i++) {
		k[i] *= 3.0f;		/* peakier softmax */
		/* what the pages will hold: each value rounded to the type */
		pg_quantize_row(ac->type, &k[i], &kf[i], 1);
		pg_dequantize_row(ac->type, &kf[i], &kf[i], 1);
		pg_quantize_row(ac->type, &v[i], &vf[i], 1);
		pg_dequantize_row(ac->type, &vf[i], &vf[i], 1);
	}
	for (size_t i = 0; i < qsz; i++) {
		pg_quantize_row(ac->type, &q[i], &qf[i], 1);
		pg_dequantize_row(ac->type, &qf[i], &qf[i], 1);
	}
	snprintf(what, sizeof(what),
		 "attention %s pt=%d hd=%d kv=%d group=%d seqs=%d",
		 pg_dtype_name(ac->type), ac->page_tokens, hd, nkv, ac->group,
		 ac->n_seqs);
	attn_ref(ac, kf, vf, qf, n_heads, seqs, 1.0f / sqrtf((float)hd), want);
	for (int i = 0; i < n_bes; i++) {
		memset(kv.base, 0xff, kv.page_bytes * (size_t)n_pages);
		bes[i]->ops->kv_write(bes[i], &kv, BLOCK, k, v, total_ctx,
				      slots);
		for (int p = 0; p < total_ctx; p++)
			for (int h = 0; h < nkv; h++) {
				float tmp[256];
				int32_t sl = slots[p];
				uint8_t *pg = (uint8_t *)kv.base +
					(size_t)(sl / ac->page_tokens) * kv.page_bytes;
				size_t eb = pg_dtype_block_bytes(ac->type);
				size_t off = ((((size_t)BLOCK * 2 + 1) * nkv + h) *
					      ac->page_tokens + sl % ac->page_tokens) * hd * eb;

				pg_dequantize_row(ac->type, pg + off, tmp, hd);
				CHECK(!memcmp(tmp, vf + (size_t)p * kvd + h * hd,
					      (size_t)hd * 4),
				      "kv_write V pos %d head %d on %s", p, h,
				      be_name(bes[i]));
			}
		struct pg_attn_heads hs = { .n_heads = n_heads,
					    .group = ac->group };

		bes[i]->ops->attention(bes[i], &kv, BLOCK, q, &hs, seqs,
				       ac->n_seqs, 1.0f / sqrtf((float)hd), out,
				       NULL);
		compare(what, i, out, want, 1e-9, first, qsz);
		if (ac->page_tokens % 2 == 0)
			check_lanes(bes[i], &kv, n_pages, BLOCK, q, &hs, seqs,
				    ac->n_seqs, qsz, want, what);
	}
	for (int s = 0; s < ac->n_seqs; s++)
		free(pages[s]);
	free(slots), free(k), free(v), free(kf), free(vf), free(q), free(qf);
	free(out), free(first), free(want), free(kv.base);
}

static void check_attention(void)
{
	static const struct attn_case cases[] = {
		{ PG_F32, 16, 64, 3, 3, 2, { 40, 17 }, { 1, 1 } },
		{ PG_F16, 7, 64, 3, 3, 2, { 40, 17 }, { 7, 17 } },
		{ PG_BF16, 16, 128, 2, 4, 1, { 100 }, { 33 } },
		{ PG_F32, 7, 128, 1, 1, 3, { 1, 30, 71 }, { 1, 1, 7 } },
		{ PG_F16, 16, 128, 2, 1, 2, { 200, 5 }, { 1, 5 } },
		{ PG_BF16, 7, 64, 4, 3, 1, { 15 }, { 15 } },
		{ PG_F32, 16, 64, 1, 4, 1, { 33 }, { 33 } },
		{ PG_F16, 16, 40, 2, 2, 1, { 50 }, { 3 } },	/* 8-wide slices */
		{ PG_BF16, 7, 20, 1, 3, 1, { 30 }, { 30 } },	/* reference path */
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		reseed("attention", (int64_t)c, 0, 0);
		check_attn_case(&cases[c]);
	}
	printf("kv_write, attention: F32/F16/BF16, pages 16 and 7, "
	       "head_dim 20, 40, 64 and 128, GQA 1, 2, 3, 4; "
	       "pages of 16 in two lanes = two CP ranks merged, bit for bit\n");
}

/* ---- the ISA tables' inner loops, directly ---- */

static const struct pg_cpu_kernels *table_of(enum pg_cpu_isa isa)
{
	return isa == PG_ISA_AVX512VNNI ? pg_cpu_kernels_avx512vnni() :
	       isa == PG_ISA_AVX512 ? pg_cpu_kernels_avx512() :
	       isa == PG_ISA_AVX2 ? &pg_cpu_kernels_avx2 :
	       &pg_cpu_kernels_scalar;
}

/*
 * ---- attention in tiles = attention row by row ----
 *
 * attention.c computes prompts in tiles (many query rows against each run
 * of keys, the ISA table's multi-row loops); every row must keep the bits
 * the previous code gave it, one query row at a time.  That code is kept
 * here as the reference (old_*: the per-row loop over page runs of at most
 * 64 keys through the table's one-row loops; llama.cpp numerics: fa16_run
 * page by page), and each backend's attention must equal it bit for bit,
 * in one call for the whole batch and with the rows fed in smaller
 * batches (1, 2, 5, ... rows a call: batch-size independence).
 */
#define OLD_CHUNK 64
#define OLD_MAX_HD 256

struct old_ctx {
	const struct pg_cpu_kernels *k;
	const struct pg_kv_layout *kv;
	int block, window, group;
	float scale, softcap;
};

struct old_state {
	float m, l;
	float *acc;
};

static void old_run(const struct old_ctx *c, int kvh, int32_t slot0, int n,
		    const float *q, struct old_state *st)
{
	const struct pg_kv_layout *kv = c->kv;
	float s[OLD_CHUNK], mx = st->m;

	c->k->attn_scores(kv->type, n, kv->head_dim,
			  pg_kv_row(kv, c->block, 0, kvh, slot0), q, s);
	for (int j = 0; j < n; j++)
		s[j] *= c->scale;
	if (c->softcap > 0.0f) {
		float cap = c->softcap, inv = 1.0f / cap;

		for (int j = 0; j < n; j++)
			s[j] = cap * tanhf(s[j] * inv);
	}
	for (int j = 0; j < n; j++)
		mx = s[j] > mx ? s[j] : mx;
	if (mx > st->m) {
		float r = expf(st->m - mx);

		c->k->scale(kv->head_dim, r, st->acc);
		st->l *= r;
		st->m = mx;
	}
	st->l += c->k->exp_sum(n, s, mx);
	c->k->attn_values(kv->type, n, kv->head_dim, s,
			  pg_kv_row(kv, c->block, 1, kvh, slot0), st->acc);
}

static __attribute__((noinline)) void
old_merge(const float *const *outs, const float *lses, int n, int hd, float *o)
{
	float mx = -INFINITY, sum = 0.0f;

	for (int p = 0; p < n; p++)
		mx = lses[p] > mx ? lses[p] : mx;
	for (int d = 0; d < hd; d++)
		o[d] = 0.0f;
	if (mx == -INFINITY)
		return;
	for (int p = 0; p < n; p++) {
		float w;

		if (lses[p] == -INFINITY)
			continue;
		w = expf(lses[p] - mx);
		sum += w;
		for (int d = 0; d < hd; d++)
			o[d] += w * outs[p][d];
	}
	for (int d = 0; d < hd; d++)
		o[d] /= sum;
}

static void old_finish(const struct old_state *st, int hd, float *out,
		       float *lse)
{
	if (st->l == 0.0f) {
		for (int i = 0; i < hd; i++)
			out[i] = 0.0f;
		*lse = -INFINITY;
		return;
	}
	for (int i = 0; i < hd; i++)
		out[i] = st->acc[i] / st->l;
	*lse = st->m + logf(st->l);
}

/* One query over positions lo .. n_keys - 1 (no CP), lanes as kv says. */
static void old_one(const struct old_ctx *c, const int32_t *pages, int lo,
		    int n_keys, int kvh, const float *q, float *out, float *lse)
{
	const struct pg_kv_layout *kv = c->kv;
	int pt = kv->page_tokens, hd = kv->head_dim;
	int nl = kv->lanes > 1 ? kv->lanes : 1, lt = pt / nl;
	static float acc[2][OLD_MAX_HD];
	float qr[OLD_MAX_HD], lses[2], lse1;
	const float *outs[2];
	struct old_state st[2];

	for (int l = 0; l < nl; l++) {
		st[l] = (struct old_state){ .m = -INFINITY, .acc = acc[l] };
		for (int i = 0; i < hd; i++)
			acc[l][i] = 0.0f;
	}
	if (kv->type != PG_F32) {
		c->k->round_kv(kv->type, hd, q, qr);
		q = qr;
	}
	for (int j = lo / pt; j * pt < n_keys; j++)
		for (int l = 0; l < nl; l++) {
			int p0 = j * pt + l * lt;
			int end = p0 + lt < n_keys ? p0 + lt : n_keys;
			int from = p0 > lo ? p0 : lo;

			for (int p = from; p < end; p += OLD_CHUNK) {
				int n = end - p < OLD_CHUNK ? end - p : OLD_CHUNK;

				old_run(c, kvh, pages[j] * pt + l * lt + (p - p0),
					n, q, &st[l]);
			}
		}
	if (nl == 1) {
		old_finish(&st[0], hd, out, lse ? lse : &lse1);
		return;
	}
	for (int l = 0; l < nl; l++) {
		old_finish(&st[l], hd, acc[l], &lses[l]);
		outs[l] = acc[l];
	}
	old_merge(outs, lses, nl, hd, out);
}

/* llama.cpp numerics: one query, page by page through fa16_run. */
static void old_llama(const struct old_ctx *c, const int32_t *pages, int lo,
		      int n_keys, int kvh, const float *q, float *out)
{
	const struct pg_kv_layout *kv = c->kv;
	int pt = kv->page_tokens, hd = kv->head_dim;
	uint16_t q16[OLD_MAX_HD], acc[OLD_MAX_HD];
	float m = -INFINITY, l = 0.0f, inv;

	for (int i = 0; i < hd; i++) {
		q16[i] = pg_fp32_to_fp16(q[i]);
		acc[i] = 0;
	}
	for (int j = lo / pt; j * pt < n_keys; j++) {
		int p0 = j * pt > lo ? j * pt : lo;
		int n = n_keys - p0 < (j + 1) * pt - p0 ? n_keys - p0 :
			(j + 1) * pt - p0;
		int32_t slot = pages[j] * pt + (p0 - j * pt);

		c->k->fa16_run(n, hd, pg_kv_row(kv, c->block, 0, kvh, slot),
			       pg_kv_row(kv, c->block, 1, kvh, slot), q16,
			       c->scale, &m, &l, acc);
	}
	inv = l == 0.0f ? 0.0f : 1.0f / l;
	for (int i = 0; i < hd; i++)
		out[i] = pg_fp16_to_fp32(acc[i]) * inv;
}

struct tile_case {
	enum pg_dtype type;
	int page_tokens, head_dim, n_kv_heads, group;
	int window;
	float softcap;
	int lanes;
	int n_seqs;
	int n_ctx[2], n_rows[2];
};

/* Every row of every sequence through old_one / old_llama. */
static void old_attention(const struct old_ctx *c, int llama, int n_heads,
			  const struct pg_attn_seq *seqs, int n_seqs,
			  const float *q, float *out, float *lse)
{
	int hd = c->kv->head_dim;

	for (int s = 0; s < n_seqs; s++)
		for (int i = 0; i < seqs[s].n_rows; i++) {
			int nk = seqs[s].n_ctx - seqs[s].n_rows + i + 1;
			int lo = c->window > 0 && nk > c->window ? nk - c->window : 0;

			for (int h = 0; h < n_heads; h++) {
				size_t rh = (size_t)(seqs[s].first_row + i) * n_heads + h;

				if (llama)
					old_llama(c, seqs[s].pages, lo, nk,
						  h / c->group, q + rh * hd,
						  out + rh * hd);
				else
					old_one(c, seqs[s].pages, lo, nk,
						h / c->group, q + rh * hd,
						out + rh * hd,
						lse ? lse + rh : NULL);
			}
		}
}

static void check_tile_case(const struct tile_case *tc, int llama)
{
	enum { BLOCK = 0, N_BLOCKS = 1 };
	static const int batches[] = { 1, 2, 5, 13 };
	int hd = tc->head_dim, nkv = tc->n_kv_heads, n_heads = nkv * tc->group;
	int kvd = nkv * hd, total = 0, rows = 0, n_pages = 0, next;
	struct pg_kv_layout kv = {
		.page_tokens = tc->page_tokens, .n_blocks = N_BLOCKS,
		.n_kv_heads = nkv, .head_dim = hd, .type = tc->type,
		.lanes = tc->lanes,
	};
	struct pg_attn_heads hs = { .n_heads = n_heads, .group = tc->group,
				    .window = tc->window,
				    .softcap = tc->softcap };
	struct pg_attn_seq seqs[2];
	int32_t *pages[2], *slots;
	float scale = 1.0f / sqrtf((float)hd);
	char what[160];

	for (int s = 0; s < tc->n_seqs; s++)
		n_pages += (tc->n_ctx[s] + tc->page_tokens - 1) / tc->page_tokens;
	kv.page_bytes = (size_t)N_BLOCKS * 2 * nkv * tc->page_tokens * hd *
			pg_dtype_block_bytes(tc->type);
	kv.base = xmalloc(kv.page_bytes * (size_t)n_pages);
	memset(kv.base, 0xff, kv.page_bytes * (size_t)n_pages);	/* NaN */
	next = n_pages;
	for (int s = 0; s < tc->n_seqs; s++) {
		int np = (tc->n_ctx[s] + tc->page_tokens - 1) / tc->page_tokens;

		pages[s] = xmalloc((size_t)np * sizeof(int32_t));
		for (int p = 0; p < np; p++)
			pages[s][p] = --next;
		seqs[s] = (struct pg_attn_seq){ .pages = pages[s],
			.n_ctx = tc->n_ctx[s], .first_row = rows,
			.n_rows = tc->n_rows[s] };
		total += tc->n_ctx[s];
		rows += tc->n_rows[s];
	}
	slots = xmalloc((size_t)total * sizeof(int32_t));
	for (int s = 0, t0 = 0; s < tc->n_seqs; t0 += tc->n_ctx[s], s++)
		for (int p = 0; p < tc->n_ctx[s]; p++)
			slots[t0 + p] = pages[s][p / tc->page_tokens] *
					tc->page_tokens + p % tc->page_tokens;

	size_t qsz = (size_t)rows * n_heads * hd, nrh = (size_t)rows * n_heads;
	float *k = xmalloc((size_t)total * kvd * 4);
	float *v = xmalloc((size_t)total * kvd * 4);
	float *q = xmalloc(qsz * 4), *want = xmalloc(qsz * 4);
	float *out = xmalloc(qsz * 4), *part = xmalloc(qsz * 4);
	float *lw = xmalloc(nrh * 4), *lo = xmalloc(nrh * 4);
	int want_lse = tc->lanes <= 1 && !llama;

	fill(k, (size_t)total * kvd);
	fill(v, (size_t)total * kvd);
	fill(q, qsz);
	for (size_t i = 0; i < (size_t)total * kvd; i++)
		k[i] *= 3.0f;
	ref->ops->kv_write(ref, &kv, BLOCK, k, v, total, slots);
	snprintf(what, sizeof(what),
		 "tiled attention%s %s pt=%d hd=%d kv=%d group=%d window=%d "
		 "softcap=%g lanes=%d rows=%d",
		 llama ? " (llama.cpp numerics)" : "", pg_dtype_name(tc->type),
		 tc->page_tokens, hd, nkv, tc->group, tc->window,
		 (double)tc->softcap, tc->lanes, rows);
	for (int i = 0; i < n_bes; i++) {
		struct pg_backend *be = bes[i];
		struct old_ctx oc = {
			.k = table_of(pg_cpu_backend_isa(be)), .kv = &kv,
			.block = BLOCK, .window = tc->window,
			.group = tc->group, .scale = scale,
			.softcap = tc->softcap,
		};

		old_attention(&oc, llama, n_heads, seqs, tc->n_seqs, q, want,
			      want_lse ? lw : NULL);
		if (llama)
			pg_cpu_backend_llama_numerics(be, 1);
		be->ops->attention(be, &kv, BLOCK, q, &hs, seqs, tc->n_seqs,
				   scale, out, want_lse ? lo : NULL);
		CHECK(!memcmp(out, want, qsz * 4) &&
		      (!want_lse || !memcmp(lo, lw, nrh * 4)),
		      "%s on %s: not the row-by-row bits", what, be_name(be));
		/* the same rows in batches of b rows a call */
		for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); b++)
			for (int s = 0; s < tc->n_seqs; s++)
				for (int r0 = 0; r0 < seqs[s].n_rows;
				     r0 += batches[b]) {
					int nb = seqs[s].n_rows - r0 < batches[b] ?
						 seqs[s].n_rows - r0 : batches[b];
					struct pg_attn_seq one = {
						.pages = seqs[s].pages,
						.n_ctx = seqs[s].n_ctx -
							 seqs[s].n_rows + r0 + nb,
						.first_row = 0, .n_rows = nb,
					};
					size_t off = (size_t)(seqs[s].first_row + r0) *
						     n_heads;

					be->ops->attention(be, &kv, BLOCK,
							   q + off * hd, &hs, &one,
							   1, scale, part, NULL);
					CHECK(!memcmp(part, out + off * hd,
						      (size_t)nb * n_heads * hd * 4),
					      "%s on %s: rows %d.. of seq %d in "
					      "batches of %d differ from one batch",
					      what, be_name(be), r0, s, batches[b]);
				}
		if (llama)
			pg_cpu_backend_llama_numerics(be, 0);
	}
	for (int s = 0; s < tc->n_seqs; s++)
		free(pages[s]);
	free(slots), free(k), free(v), free(q), free(want), free(out);
	free(part), free(lw), free(lo), free(kv.base);
}

static void check_attention_tiles(void)
{
	static const struct tile_case cases[] = {
		/* type pt hd kv group window softcap lanes seqs ctx rows */
		{ PG_F16, 16, 64, 3, 3, 0, 0, 1, 1, { 333 }, { 77 } },
		{ PG_F16, 16, 64, 2, 3, 0, 0, 1, 2, { 100, 41 }, { 100, 9 } },
		{ PG_BF16, 16, 128, 2, 4, 0, 0, 1, 1, { 150 }, { 37 } },
		{ PG_F32, 7, 128, 1, 8, 0, 0, 1, 2, { 61, 30 }, { 29, 30 } },
		{ PG_F16, 16, 256, 2, 2, 0, 0, 1, 1, { 90 }, { 31 } },
		{ PG_F16, 16, 64, 3, 3, 23, 0, 1, 1, { 120 }, { 50 } },
		{ PG_BF16, 7, 64, 2, 2, 5, 2.0f, 1, 1, { 45 }, { 45 } },
		{ PG_F32, 16, 64, 1, 1, 0, 1.5f, 1, 1, { 70 }, { 33 } },
		{ PG_F16, 128, 64, 1, 3, 70, 0, 1, 1, { 300 }, { 41 } },
		{ PG_F16, 128, 128, 2, 3, 0, 0, 1, 1, { 200 }, { 19 } },
		{ PG_F16, 16, 64, 3, 3, 0, 0, 2, 1, { 97 }, { 40 } },
		{ PG_BF16, 16, 40, 2, 3, 9, 0, 2, 1, { 60 }, { 23 } },
		{ PG_F16, 7, 20, 1, 3, 0, 0, 1, 1, { 30 }, { 30 } },
		{ PG_F16, 16, 64, 1, 12, 0, 0, 1, 1, { 50 }, { 5 } },
	};
	int nc = (int)(sizeof(cases) / sizeof(cases[0]));

	for (int c = 0; c < nc; c++) {
		reseed("attention tiles", c, 0, 0);
		check_tile_case(&cases[c], 0);
		if (cases[c].type == PG_F16 && cases[c].lanes <= 1 &&
		    !(cases[c].softcap > 0.0f)) {
			reseed("attention tiles llama", c, 0, 0);
			check_tile_case(&cases[c], 1);
		}
	}
	printf("attention in tiles: %d shapes (F32/F16/BF16, head_dim 20..256, "
	       "GQA 1..12, windows, softcap, lanes, pages 7/16/128, ragged), "
	       "both numerics: the row-by-row bits, in batches of 1, 2, 5, 13 "
	       "rows too\n", nc);
}

/*
 * The softmax step attention.c takes for one row and run, written out
 * with table k's exp_sum and scale: what attn_softmax_rows must give.
 */
static void softmax_steps(const struct pg_cpu_kernels *k, int n, int hd,
			  float scale, float *s, struct pg_attn_state *st)
{
	float mx = st->m;

	for (int j = 0; j < n; j++)
		s[j] *= scale;
	for (int j = 0; j < n; j++)
		mx = s[j] > mx ? s[j] : mx;
	if (mx > st->m) {
		float r = expf(st->m - mx);

		k->scale(hd, r, st->acc);
		st->l *= r;
		st->m = mx;
	}
	st->l += k->exp_sum(n, s, mx);
}

/*
 * attn_softmax_rows of every table that has one against softmax_steps
 * row by row, bit for bit (scores, maximum, sum, accumulator), over four
 * runs carried in the states from the empty one: random scores, runs
 * whose maximum is below the running one, a run of zeros (its maximum
 * +0), one of -0 and +0 mixed at the top, large and NaN scores, lengths
 * 1..64 (tails past the last 8).
 */
static void check_softmax_rows(void)
{
	enum { MAXR = 6, MAXN = 64, HD = 72, RUNS = 4 };
	static const int ns[] = { 1, 5, 8, 16, 23, 64 };
	int tables = 0;

	for (int isa = PG_ISA_SCALAR; isa <= (int)top; isa++) {
		const struct pg_cpu_kernels *k = table_of((enum pg_cpu_isa)isa);

		if (!k->attn_softmax_rows)
			continue;
		tables++;
		for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++)
			for (int nr = 1; nr <= MAXR; nr++) {
				static float s[MAXR][MAXN], w[MAXR][MAXN];
				static float acc[MAXR][HD], wacc[MAXR][HD];
				struct pg_attn_state st[MAXR], ws[MAXR];
				struct pg_attn_state *sp[MAXR];
				float *rows[MAXR];
				int n = ns[c];

				reseed("softmax rows", isa, n, nr);
				for (int r = 0; r < nr; r++) {
					st[r] = (struct pg_attn_state){
						-INFINITY, 0.0f, acc[r] };
					ws[r] = (struct pg_attn_state){
						-INFINITY, 0.0f, wacc[r] };
					fill(acc[r], HD);
					memcpy(wacc[r], acc[r], sizeof(acc[r]));
					sp[r] = &st[r];
					rows[r] = s[r];
				}
				for (int run = 0; run < RUNS; run++) {
					for (int r = 0; r < nr; r++) {
						int kind = (run + r) % 5;

						for (int j = 0; j < n; j++) {
							float x = 8.0f * frand();

							s[r][j] = kind == 1 ? x - 40.0f :
								  kind == 2 ? 0.0f :
								  kind == 3 ? (j % 2 ? 0.0f : -0.0f) - 1.0f * (j % 3 == 2) :
								  kind == 4 && j == n / 2 ? NAN :
								  kind == 4 && j == 0 ? 80.0f : x;
						}
						memcpy(w[r], s[r], sizeof(s[r]));
						softmax_steps(k, n, HD, 0.125f, w[r], &ws[r]);
					}
					k->attn_softmax_rows(nr, n, HD, 0.125f, rows, sp);
					for (int r = 0; r < nr; r++) {
						CHECK(!memcmp(s[r], w[r], n * sizeof(float)) &&
						      !memcmp(&st[r].m, &ws[r].m, sizeof(float)) &&
						      !memcmp(&st[r].l, &ws[r].l, sizeof(float)) &&
						      !memcmp(acc[r], wacc[r], sizeof(acc[r])),
						      "attn_softmax_rows on %s: %d rows x %d scores, run %d, row %d: not the row-by-row bits (m %a/%a l %a/%a)",
						      pg_cpu_isa_name(k->isa), nr, n, run, r,
						      st[r].m, ws[r].m, st[r].l, ws[r].l);
					}
				}
			}
	}
	printf("softmax rows: %d tables, 1..6 rows x 1..64 scores over 4 runs "
	       "(zeros, -0/+0, NaN, falling maxima): the row-by-row bits\n",
	       tables);
}

/* Quantisers: random rows, and ties (d = 1, values k + 0.5). */
static void check_table_quant(const struct pg_cpu_kernels *k)
{
	enum { N = 32 * 37 };
	static float x[N];
	static uint8_t a[N * 2], b[N * 2];

	reseed("table_quant", 0, 0, 0);
	fill(x, N);
	for (int j = 0; j < 32; j++)
		x[j] = j == 0 ? 127.0f : (float)(j - 16) + 0.5f;
	for (int j = 32; j < 64; j++)
		x[j] = 0.0f;			/* d = 0 */
	pg_quant_q8_0_ref(x, a, N);
	k->quant_q8_0(x, b, N);
	CHECK(!memcmp(a, b, pg_dtype_row_bytes(PG_Q8_0, N)),
	      "%s quant_q8_0 differs from the reference",
	      pg_cpu_isa_name(k->isa));
	pg_quant_q8_1_ref(x, a, N);
	k->quant_q8_1(x, b, N);
	CHECK(!memcmp(a, b, pg_dtype_row_bytes(PG_Q8_1, N)),
	      "%s quant_q8_1 differs from the reference",
	      pg_cpu_isa_name(k->isa));
	/* Q8_K: 4 super-blocks, the first with the ties and zeros */
	pg_quant_q8_k_ref(x, a, 1024);
	k->quant_q8_k(x, b, 1024);
	CHECK(!memcmp(a, b, pg_dtype_row_bytes(PG_Q8_K, 1024)),
	      "%s quant_q8_k differs from the reference",
	      pg_cpu_isa_name(k->isa));
	for (int j = 0; j < 256; j++)
		x[j] = 0.0f;			/* d = 0 */
	pg_quant_q8_k_ref(x, a, 256);
	k->quant_q8_k(x, b, 256);
	CHECK(!memcmp(a, b, pg_dtype_row_bytes(PG_Q8_K, 256)),
	      "%s quant_q8_k (zeros) differs from the reference",
	      pg_cpu_isa_name(k->isa));
}

/*
 * A table's loops for weights of type t: pagoda's numerics, or with llama
 * set (Q4_1 only) llama.cpp's order; ref: the scalar dot they answer to,
 * exact: whether they must give its very bits.
 */
struct qloops {
	enum pg_dtype vt;		/* the activations' type */
	pg_dot_fn dot, ref;
	pg_dot4_fn dot4;
	pg_dot4x2_fn dot4x2;
	pg_gemm8_fn gemm8;
	int exact;
	const char *name;
};

static struct qloops loops_for(const struct pg_cpu_kernels *k,
			       enum pg_dtype t, int llama)
{
	enum pg_dtype vt, ref_vt;
	pg_dot_fn dot = pg_cpu_dot_for(k, t, &vt);
	struct pg_mm_loops mm;
	struct qloops l;

	pg_cpu_mm_loops(k, t, &mm);	/* what matmul runs */
	l = (struct qloops){
		.vt = vt,
		.dot = dot,
		.ref = pg_cpu_dot_for(&pg_cpu_kernels_scalar, t, &ref_vt),
		.dot4 = mm.dot4,
		.dot4x2 = mm.dot4x2,
		.gemm8 = mm.gemm8,
		/* pagoda's numerics: all but the float types and Q8_0 */
		.exact = t != PG_F32 && t != PG_F16 && t != PG_BF16 &&
			 t != PG_Q8_0,
		.name = pg_dtype_name(t),
	};

	if (llama) {
		l.dot = k->dot_q4_1_llama;
		l.ref = pg_dot_q4_1_llama_ref;
		l.dot4 = k->dot4_q4_1_llama;
		l.dot4x2 = k->dot4x2_q4_1_llama;
		l.gemm8 = k->gemm8_q4_1_llama;
		l.exact = 0;
		l.name = "Q4_1 (llama.cpp order)";
	}
	return l;
}

/* The scalar dot of 4 rows with 2 tokens; *mag: sum |w x| of each. */
static void ref_dots(enum pg_dtype vt, pg_dot_fn ref_dot,
		     const struct pg_matrix *m, const float *wf,
		     const uint8_t *xq, size_t xs, float want[2][4],
		     double mag[2][4])
{
	int64_t cols = m->n_cols;
	float xd[2048];

	for (int k = 0; k < 2; k++) {
		pg_dequantize_row(vt, xq + (size_t)k * xs, xd, cols);
		for (int r = 0; r < 4; r++) {
			want[k][r] = ref_dot(cols, (const uint8_t *)m->data +
					     r * m->row_bytes, xq + k * xs);
			mag[k][r] = 0;
			for (int64_t i = 0; i < cols; i++)
				mag[k][r] += fabs((double)wf[r * cols + i] * xd[i]);
		}
	}
}

/* 1-row, 4-row and 4x2 dots of 4 random rows against the scalar dot. */
static void check_table_dots(const struct pg_cpu_kernels *k, enum pg_dtype t,
			     int llama, int64_t cols)
{
	float *wf, x[2048], want[2][4], got[3][2][4];
	double mag[2][4];
	uint8_t xq[2048 * 8];
	struct pg_matrix m;
	struct qloops l = loops_for(k, t, llama);
	enum pg_dtype vt = l.vt;
	pg_dot_fn dot = l.dot;
	pg_dot4_fn dot4 = l.dot4;
	pg_dot4x2_fn dot4x2 = l.dot4x2;
	size_t xs = vt == PG_F32 ? (size_t)cols * 4 :
		    pg_dtype_row_bytes(vt, (uint64_t)cols);
	static const char *what[3] = { "dot", "dot4", "dot4x2" };

	reseed("table_dots", t, llama, cols);
	m = make_matrix(t, 4, cols, &wf);
	for (int j = 0; j < 2; j++) {
		fill(x, (size_t)cols);
		quant_act(vt, x, xq + j * xs, cols);
	}
	ref_dots(vt, l.ref, &m, wf, xq, xs, want, mag);
	for (int j = 0; j < 2; j++)
		for (int r = 0; r < 4; r++) {
			got[0][j][r] = dot(cols, (const uint8_t *)m.data +
					   r * m.row_bytes, xq + j * xs);
			got[1][j][r] = got[0][j][r];
		}
	if (dot4)
		for (int j = 0; j < 2; j++)
			dot4(cols, m.data, m.row_bytes, xq + j * xs, got[1][j],
			     NULL);
	memcpy(got[2], got[1], sizeof(got[1]));
	if (dot4x2)
		dot4x2(cols, m.data, m.row_bytes, xq, xs, got[2][0], 4, NULL);
	/* a row's result must not depend on the loop that reached it */
	CHECK(!memcmp(got[0], got[1], sizeof(got[0])) &&
	      !memcmp(got[1], got[2], sizeof(got[1])),
	      "%s %s n=%lld: dot, dot4 and dot4x2 differ in their bits",
	      pg_cpu_isa_name(k->isa), l.name, (long long)cols);
	CHECK(!l.exact || !memcmp(got[0], want, sizeof(want)),
	      "%s %s n=%lld: the dots differ from the reference in their bits",
	      pg_cpu_isa_name(k->isa), l.name, (long long)cols);
	for (int v = 0; v < 3; v++)
		for (int j = 0; j < 2; j++)
			for (int r = 0; r < 4; r++)
				CHECK(fabs(got[v][j][r] - want[j][r]) <=
				      1e-5 * mag[j][r],
				      "%s %s %s n=%lld: %g vs %g",
				      pg_cpu_isa_name(k->isa), what[v],
				      l.name, (long long)cols,
				      got[v][j][r], want[j][r]);
	free(wf);
	free((void *)m.data);
}

static void check_tables(void)
{
	static const int64_t cols[] = { 32, 64, 96, 576, 1056, 2048 };
	static const int64_t kcols[] = { 256, 512, 768, 2048 };
	static const enum pg_dtype qtypes[] = {	/* Q5 and the K-quants */
		PG_Q5_0, PG_Q5_1, PG_Q2_K, PG_Q3_K, PG_Q4_K, PG_Q5_K, PG_Q6_K,
	};

	for (int isa = PG_ISA_SCALAR; isa <= (int)top; isa++) {
		const struct pg_cpu_kernels *k = table_of((enum pg_cpu_isa)isa);

		check_table_quant(k);
		for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++) {
			for (size_t t = 0; t < N_WTYPES; t++)
				check_table_dots(k, wtypes[t], 0, cols[c]);
			check_table_dots(k, PG_Q4_1, 1, cols[c]);
			check_table_dots(k, PG_Q5_0, 0, cols[c]);
			check_table_dots(k, PG_Q5_1, 0, cols[c]);
		}
		for (size_t c = 0; c < sizeof(kcols) / sizeof(kcols[0]); c++)
			for (size_t t = 2; t < sizeof(qtypes) / sizeof(qtypes[0]); t++)
				check_table_dots(k, qtypes[t], 0, kcols[c]);
		/* the multi-row loops where the types' files run them */
		for (size_t t = 0; isa > PG_ISA_SCALAR &&
		     t < sizeof(qtypes) / sizeof(qtypes[0]); t++) {
			struct pg_mm_loops mm;

			pg_cpu_mm_loops(k, qtypes[t], &mm);
			CHECK(mm.dot4 && mm.dot4x2, "%s has no 4-row loops for %s",
			      pg_cpu_isa_name(k->isa), pg_dtype_name(qtypes[t]));
		}
	}
	printf("tables: quantisers bit-identical, dots within bounds "
	       "(Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K: 1, 4 and 4x2 rows, the "
	       "reference's bits; Q4_1 in llama.cpp's order too)\n");
}

/* ---- llama.cpp numerics (llamacpp.c): tables against the references ---- */

/* expf_llama against exp in double, and at its edges. */
static void check_expf_llama(void)
{
	double worst = 0;

	for (int i = 0; i <= 40000; i++) {
		float x = -87.0f + 175.0f * (float)i / 40000.0f;
		double want = exp((double)x);
		double e = fabs(pg_expf_llama(x) - want) / want;

		worst = e > worst ? e : worst;
	}
	CHECK(worst < 3e-7, "expf_llama: relative error %.3g (bound 3e-7)", worst);
	CHECK(pg_expf_llama(0.0f) == 1.0f, "expf_llama(0) = %g",
	      pg_expf_llama(0.0f));
	CHECK(pg_expf_llama(-200.0f) == 0.0f, "expf_llama(-200) = %g",
	      pg_expf_llama(-200.0f));
	CHECK(isinf(pg_expf_llama(100.0f)), "expf_llama(100) = %g",
	      pg_expf_llama(100.0f));
	CHECK(fabs(pg_expf_llama(-100.0f) - exp(-100.0)) <= 0x1p-149,
	      "expf_llama(-100) = %g: not within a step of the subnormal %g",
	      pg_expf_llama(-100.0f), exp(-100.0));
}

/*
 * fa16_run of table k against the reference, bit for bit, over keys fed in
 * three runs (the state carries), for head sizes with and without a tail
 * past the last 32 (and not a multiple of 8); and the reference against
 * softmax attention in double (its F16 accumulator: within 1e-5).
 */
static void check_fa16(const struct pg_cpu_kernels *k)
{
	enum { NK = 37, MAXD = 128 };
	static const int hds[] = { 64, 128, 40, 36 };
	static uint16_t kk[NK * MAXD], vv[NK * MAXD], q16[MAXD];
	uint16_t a[MAXD], b[MAXD];
	float out[MAXD];
	double want[MAXD], sc[NK];

	for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
		int hd = hds[h], runs[] = { 5, 16, NK - 21 }, j = 0;
		float ma = -INFINITY, la = 0, mb = -INFINITY, lb = 0, mx = -INFINITY;
		double sum = 0;

		reseed("fa16", hd, 0, 0);
		for (int i = 0; i < NK * hd; i++) {
			kk[i] = pg_fp32_to_fp16(2.0f * frand());
			vv[i] = pg_fp32_to_fp16(frand());
		}
		for (int i = 0; i < hd; i++) {
			q16[i] = pg_fp32_to_fp16(frand());
			a[i] = b[i] = 0;
		}
		for (int r = 0; r < 3; j += runs[r], r++) {
			pg_fa16_run_ref(runs[r], hd, kk + j * hd, vv + j * hd, q16,
					0.125f, &ma, &la, a);
			k->fa16_run(runs[r], hd, kk + j * hd, vv + j * hd, q16,
				    0.125f, &mb, &lb, b);
		}
		CHECK(ma == mb && la == lb && !memcmp(a, b, sizeof(uint16_t) * hd),
		      "%s fa16_run, head size %d: differs from the reference",
		      pg_cpu_isa_name(k->isa), hd);
		for (int n = 0; n < NK; n++) {
			sc[n] = 0;
			for (int i = 0; i < hd; i++)
				sc[n] += (double)pg_fp16_to_fp32(kk[n * hd + i]) *
					 pg_fp16_to_fp32(q16[i]);
			sc[n] *= 0.125;
			mx = sc[n] > mx ? (float)sc[n] : mx;
		}
		for (int i = 0; i < hd; i++)
			want[i] = 0;
		for (int n = 0; n < NK; n++) {
			double w = exp(sc[n] - mx);

			sum += w;
			for (int i = 0; i < hd; i++)
				want[i] += w * pg_fp16_to_fp32(vv[n * hd + i]);
		}
		for (int i = 0; i < hd; i++) {
			want[i] /= sum;
			out[i] = pg_fp16_to_fp32(a[i]) * (1.0f / la);
		}
		CHECK(nmse(out, want, (size_t)hd) < 1e-5,
		      "fa16_run_ref, head size %d: nmse %.3g against double",
		      hd, nmse(out, want, (size_t)hd));
	}
}

/* silu_mul_llama of table k against the reference, bit for bit. */
static void check_silu_llama(const struct pg_cpu_kernels *k)
{
	enum { N = 1543 };
	static float g[N], u[N], a[N], b[N];

	reseed("silu_llama", 0, 0, 0);
	fill(g, N);
	fill(u, N);
	for (int i = 0; i < N; i++)
		g[i] *= 12.0f;
	g[3] = 90.0f;			/* the far branches of expf_llama */
	g[4] = -95.0f;
	g[5] = -200.0f;
	g[6] = 0.0f;
	memcpy(a, g, sizeof(g));
	memcpy(b, g, sizeof(g));
	pg_silu_mul_llama_ref(N, a, u);
	k->silu_mul_llama(N, b, u);
	CHECK(!memcmp(a, b, sizeof(a)),
	      "%s silu_mul_llama differs from the reference",
	      pg_cpu_isa_name(k->isa));
}

static void check_llama_numerics(void)
{
	check_expf_llama();
	for (int isa = PG_ISA_SCALAR; isa <= (int)top; isa++) {
		check_fa16(table_of((enum pg_cpu_isa)isa));
		check_silu_llama(table_of((enum pg_cpu_isa)isa));
	}
	printf("llama.cpp numerics: expf within 3e-7, attention loop and silu bit-identical to the references\n");
}

/* ---- gemm8: 8 rows x many tokens, repacked weights ---- */

/*
 * Tokens xq (n of them, xs bytes apart) against rows of m: the scalar dot
 * of each (token t, row r) in want[t * rows + r], and sum |w x| of the
 * dequantised values in mag, for per-output bounds.
 */
static void gemm_ref(enum pg_dtype vt, pg_dot_fn ref_dot,
		     const struct pg_matrix *m, const float *wf,
		     const uint8_t *xq, size_t xs, int n, float *want,
		     double *mag)
{
	int64_t rows = m->n_rows, cols = m->n_cols;
	float *xd = xmalloc((size_t)cols * sizeof(float));

	for (int k = 0; k < n; k++) {
		pg_dequantize_row(vt, xq + (size_t)k * xs, xd, cols);
		for (int64_t r = 0; r < rows; r++) {
			double a = 0;

			want[k * rows + r] = ref_dot(cols, (const uint8_t *)m->data +
						     r * m->row_bytes,
						     xq + (size_t)k * xs);
			for (int64_t i = 0; i < cols; i++)
				a += fabs((double)wf[r * cols + i] * xd[i]);
			mag[k * rows + r] = a;
		}
	}
	free(xd);
}

/*
 * Each table's gemm8 loops directly: every 8-row group of a matrix against
 * n tokens must equal bit for bit the table's 4-row dot of each half of
 * the group (which the 4x2 tiles and one-token matmuls equal too: a
 * token's result may not depend on its batch), and lie within 1e-5 of
 * sum |w x| of the scalar dot (the same integers, float sums in another
 * order).
 */
static void check_gemm8_case(const struct pg_cpu_kernels *k, enum pg_dtype t,
			     const struct qloops *l, int64_t rows,
			     int64_t cols, int n)
{
	enum pg_dtype vt = l->vt;	/* Q8_K: xp is the rows, no prep */
	int kq = vt == PG_Q8_K;
	pg_dot4_fn dot4 = l->dot4;
	pg_gemm8_fn gemm8 = l->gemm8;
	size_t xs = pg_dtype_row_bytes(vt, (uint64_t)cols);
	size_t ny = (size_t)n * (size_t)rows;
	float *wf, *x = xmalloc((size_t)cols * sizeof(float));
	float *want = xmalloc(ny * sizeof(float)), *got = xmalloc(ny * sizeof(float));
	uint8_t *xp = xmalloc((size_t)n * (size_t)(cols / 32) *
			      PG_GEMM_XP_BYTES(vt));
	void *work = aligned_alloc(32, vt == PG_Q8_K ?
				   (size_t)(cols / 256) * PG_GEMM8_KWORK :
				   (size_t)(cols / 32) * PG_GEMM8_WORK);
	double *mag = xmalloc(ny * sizeof(double));
	uint8_t *xq = xmalloc((size_t)n * xs);
	struct pg_matrix m;
	int bad = 0, differ = 0;

	reseed(l->name, rows, cols, n);	/* the type: Q4_1's two orders apart */
	m = make_matrix(t, rows, cols, &wf);
	for (int j = 0; j < n; j++) {
		fill(x, (size_t)cols);
		quant_act(vt, x, xq + (size_t)j * xs, cols);
	}
	gemm_ref(vt, l->ref, &m, wf, xq, xs, n, want, mag);
	for (size_t i = 0; i < ny; i++)
		got[i] = NAN;			/* every output must be written */
	if (!kq)
		pg_gemm_prep(vt, xq, (int64_t)n * (cols / 32), xp);
	for (int64_t r = 0; r + 8 <= rows; r += 8)
		gemm8(cols, (const uint8_t *)m.data + r * m.row_bytes,
		      m.row_bytes, kq ? (const void *)xq : xp, n, got + r,
		      (size_t)rows, work, NULL);
	for (int j = 0; j < n; j++)
		for (int64_t r = 0; r < rows / 8 * 8; r += 4) {
			size_t i = (size_t)j * (size_t)rows + (size_t)r;
			float d4[4];

			dot4(cols, (const uint8_t *)m.data + r * m.row_bytes,
			     m.row_bytes, xq + (size_t)j * xs, d4, NULL);
			if (memcmp(d4, got + i, sizeof(d4)) && !differ++)
				CHECK(0, "%s gemm8 %s %lldx%lld n=%d: token %d "
				      "rows %lld..: %.9g vs dot4 %.9g",
				      pg_cpu_isa_name(k->isa), l->name,
				      (long long)rows, (long long)cols, n, j,
				      (long long)r, got[i], d4[0]);
			for (int q = 0; q < 4; q++, i++)
				if (!(fabs(got[i] - want[i]) <= 1e-5 * mag[i]) &&
				    !bad++)
					CHECK(0, "%s gemm8 %s %lldx%lld n=%d: token "
					      "%d row %lld: %g vs %g",
					      pg_cpu_isa_name(k->isa),
					      l->name, (long long)rows,
					      (long long)cols, n, j,
					      (long long)r + q, got[i], want[i]);
		}
	free(wf), free((void *)m.data), free(x), free(want), free(got);
	free(xp), free(work), free(mag), free(xq);
}

static void check_gemm8(void)
{
	static const int64_t cols[] = { 32, 96, 544, 1536, 2080 };
	static const int ns[] = { 1, 2, 3, 8, 18, 19, 37 };
	static const int64_t kcols[] = { 256, 768, 2048 };
	/* Q4_0, Q4_1, Q4_1 in llama.cpp's order, Q5_0, the K-quants */
	static const enum pg_dtype types[] = {
		PG_Q4_0, PG_Q4_1, PG_Q4_1, PG_Q5_0, PG_Q2_K, PG_Q3_K, PG_Q4_K,
		PG_Q5_K, PG_Q6_K,
	};
	int tested = 0;

	for (int isa = PG_ISA_SCALAR; isa <= (int)top; isa++) {
		const struct pg_cpu_kernels *k = table_of((enum pg_cpu_isa)isa);

		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
			struct qloops l = loops_for(k, types[t], t == 2);

			CHECK(isa == PG_ISA_SCALAR || l.gemm8,
			      "%s has no gemm8 for %s", pg_cpu_isa_name(k->isa),
			      l.name);
			if (!l.gemm8)
				continue;
			for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
				for (size_t j = 0; l.vt != PG_Q8_K &&
				     j < sizeof(ns) / sizeof(ns[0]); j++)
					check_gemm8_case(k, types[t], &l, 16,
							 cols[c], ns[j]);
			for (size_t c = 0; c < sizeof(kcols) / sizeof(kcols[0]); c++)
				for (size_t j = 0; l.vt == PG_Q8_K &&
				     j < sizeof(ns) / sizeof(ns[0]); j++)
					check_gemm8_case(k, types[t], &l, 16,
							 kcols[c], ns[j]);
			tested++;
		}
	}
	printf("gemm8: %d tables x types (Q4_0, Q4_1 both orders, Q5_0, "
	       "Q2_K..Q6_K), 16 rows x 32..2080 columns x n = 1..37: "
	       "bit-identical to dot4, within 1e-5 of sum |wx|\n",
	       tested);
}

/*
 * The matmul op on every backend against the scalar dots of the same
 * quantised activations, per output (within 1e-5 of sum |w x|): row
 * counts that leave a tail after the 8-row groups, and every n from 1 to
 * 37, so that gemm8, the 4x2 tiles, the 4-row and 1-row dots all meet.
 * And batch invariance: each token's outputs for every n equal, bit for
 * bit, those of the same token alone (n = 1).  And the reference's very
 * bits where the tables promise them: on the scalar table, and Q4_0 and
 * Q4_1 in pagoda's numerics on every table; this also holds the
 * reference to the backends' activation quantiser (quant_act), which a
 * bound alone lets slip on lucky inputs.
 */
static void check_matmul_tokens(void)
{
	static const int64_t shapes[][2] = {
		{ 13, 32 }, { 27, 96 }, { 70, 1536 },
	};
	/* the last: Q4_1 with the backends in llama.cpp numerics */
	static const enum pg_dtype types[] = { PG_Q8_0, PG_Q4_0, PG_Q4_1, PG_Q4_1 };
	enum { N = 37 };

	for (size_t ti = 0; ti < 4; ti++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			enum pg_dtype t = types[ti];
			int llama = ti == 3;
			enum pg_dtype vt = t == PG_Q4_1 ? PG_Q8_1 : PG_Q8_0;
			int64_t rows = shapes[s][0], cols = shapes[s][1];
			size_t xs = pg_dtype_row_bytes(vt, (uint64_t)cols);
			size_t ny = (size_t)N * (size_t)rows;
			float *wf, *x = xmalloc((size_t)N * (size_t)cols * 4);
			float *want = xmalloc(ny * 4), *y = xmalloc(ny * 4);
			double *mag = xmalloc(ny * sizeof(double));
			float *alone = xmalloc(ny * 4);
			uint8_t *xq = xmalloc((size_t)N * xs);
			struct pg_matrix m;

			reseed("matmul_tokens", (int64_t)ti, (int64_t)s, 0);
			m = make_matrix(t, rows, cols, &wf);
			fill(x, (size_t)N * (size_t)cols);
			for (int j = 0; j < N; j += 4)	/* a block of ties */
				plant_ties(x + (size_t)j * (size_t)cols +
					   (size_t)(j % (cols / PG_QK)) * PG_QK);
			for (int j = 0; j < N; j++)
				quant_act(vt, x + (size_t)j * (size_t)cols,
					  xq + (size_t)j * xs, cols);
			gemm_ref(vt, loops_for(&pg_cpu_kernels_scalar, t, llama).ref,
				 &m, wf, xq, xs, N, want, mag);
			for (int i = 0; i < n_bes; i++) {
				pg_cpu_backend_llama_numerics(bes[i], llama);
				for (int j = 0; j < N; j++)
					bes[i]->ops->matmul(bes[i], &m,
						x + (size_t)j * (size_t)cols, 1,
						NULL, alone + (size_t)j * (size_t)rows);
				/* where the tables promise the reference's bits */
				int exact = pg_cpu_backend_isa(bes[i]) == PG_ISA_SCALAR ||
					    (t != PG_Q8_0 && !llama);

				for (int n = 1; n <= N; n++) {
					int bad = 0, differ = 0;

					bes[i]->ops->matmul(bes[i], &m, x, n, NULL, y);
					CHECK(!memcmp(y, alone, (size_t)n * (size_t)rows * 4),
					      "matmul %s %lldx%lld n=%d on %s: not "
					      "the tokens' one-token results",
					      pg_dtype_name(t), (long long)rows,
					      (long long)cols, n, be_name(bes[i]));
					for (size_t o = 0; o < (size_t)n * (size_t)rows; o++)
						if (!(fabs(y[o] - want[o]) <= 1e-5 * mag[o]) &&
						    !bad++)
							CHECK(0, "matmul %s %lldx%lld n=%d on %s: "
							      "output %zu: %g vs %g",
							      pg_dtype_name(t), (long long)rows,
							      (long long)cols, n,
							      be_name(bes[i]), o, y[o], want[o]);
					for (size_t o = 0; exact && o < (size_t)n * (size_t)rows; o++)
						if (pg_f32_bits(y[o]) != pg_f32_bits(want[o]) &&
						    !differ++)
							CHECK(0, "matmul %s%s %lldx%lld n=%d on %s: "
							      "output %zu: %.9g, not the reference's "
							      "%.9g (its activations quantised as "
							      "the backend's?)",
							      pg_dtype_name(t), llama ? " (llama.cpp order)" : "",
							      (long long)rows, (long long)cols, n,
							      be_name(bes[i]), o, y[o], want[o]);
				}
				pg_cpu_backend_llama_numerics(bes[i], 0);
			}
			free(wf), free((void *)m.data), free(x), free(want);
			free(y), free(mag), free(alone), free(xq);
		}
	printf("matmul tokens: Q8_0/Q4_0/Q4_1 (and Q4_1 in llama.cpp "
	       "numerics), rows 13, 27, 70 x n = 1..37, each output within "
	       "1e-5 of sum |wx|, batch-invariant, the reference's bits on "
	       "scalar (and Q4_0/Q4_1 on every table)\n");
}

/*
 * Repacked Q4_0, Q4_1 and Q5_0 matrices (pg_cpu_q4x8_pack), and the
 * K-quants packed in groups of 16 rows (Q4_K, Q5_K, Q6_K; the avx512vnni
 * table's): on every backend that takes them, matmul and matmul_parts
 * (parts apart and summed) give the very bits of the same matrix in
 * rows, for every n from 1 to 37 (the packed loops expand blocks as they
 * go under 4 tokens, into work areas from 4; the K-quants' take 8 tokens
 * a pass in 16 rows, and from 4 tokens on 32 rows (two groups) up to 6
 * tokens a pass: 48 rows are 32 + 16); the backends that do not (scalar, llama.cpp
 * numerics, the K-quants below avx512vnni), and shapes they do not take
 * (rows not a multiple of 8, of 16 for the K-quants), say 0 bytes.
 */
static void check_q4x8(void)
{
	/* 80 rows: the 32-row loop twice, then 16 rows; 40: 32, then 8 */
	static const int64_t q4_shapes[][2] = { { 16, 32 }, { 40, 544 }, { 24, 1536 },
						{ 80, 544 } };
	static const int64_t k_shapes[][2] = { { 16, 768 }, { 48, 768 }, { 32, 1536 },
					       { 64, 768 } };
	static const enum pg_dtype types[] = { PG_Q4_0, PG_Q4_1, PG_Q5_0,
					       PG_Q4_K, PG_Q5_K, PG_Q6_K };
	enum { N = 37, NP = 3 };
	int tested = 0;

	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
		for (size_t sh = 0; sh < sizeof(q4_shapes) / sizeof(q4_shapes[0]); sh++) {
			enum pg_dtype t = types[ti];
			int kq = PG_KX16_BYTES(t) != 0;
			int64_t rows = kq ? k_shapes[sh][0] : q4_shapes[sh][0];
			int64_t cols = kq ? k_shapes[sh][1] : q4_shapes[sh][1];
			int64_t bs = pg_dtype_block_size(t);	/* cuts at blocks */
			int64_t cuts[NP + 1] = { 0, cols / bs / 3 * bs,
						 cols / bs * 2 / 3 * bs, cols };
			size_t ny = (size_t)N * (size_t)rows;
			float *wf, *x = xmalloc((size_t)N * (size_t)cols * 4);
			float *want = xmalloc(NP * ny * 4), *got = xmalloc(NP * ny * 4);
			struct pg_matrix m, odd;

			reseed("q4x8", (int64_t)ti, (int64_t)sh, 0);
			m = make_matrix(t, rows, cols, &wf);
			odd = m;
			fill(x, (size_t)N * (size_t)cols);
			odd.n_rows = rows - (kq ? 8 : 1);
			for (int i = 0; i < n_bes; i++) {
				struct pg_backend *be = bes[i];
				size_t bytes = pg_cpu_q4x8_bytes(be, &m);
				struct pg_matrix pk = m;
				enum pg_cpu_isa isa = pg_cpu_backend_isa(be);
				void *buf;

				CHECK(!pg_cpu_q4x8_bytes(be, &odd),
				      "q4x8: %s takes %lld rows", be_name(be),
				      (long long)odd.n_rows);
				pg_cpu_backend_llama_numerics(be, 1);
				CHECK(!pg_cpu_q4x8_bytes(be, &m),
				      "q4x8: %s packs in llama.cpp numerics",
				      be_name(be));
				pg_cpu_backend_llama_numerics(be, 0);
				CHECK((bytes == 0) == (kq ? isa != PG_ISA_AVX512VNNI :
						       isa == PG_ISA_SCALAR),
				      "q4x8: %s %s packing %s", be_name(be),
				      bytes ? "offers" : "refuses", pg_dtype_name(t));
				if (!bytes)
					continue;
				CHECK(bytes == (kq ? PG_KX16_BYTES(t) / 16 *
						(size_t)(cols / PG_QK_K) :
						pg_dtype_row_bytes(t, (uint64_t)cols)) *
				      (size_t)rows, "q4x8: %zu bytes", bytes);
				buf = aligned_alloc(32, (bytes + 31) / 32 * 32);
				if (!buf) {
					fprintf(stderr, "out of memory\n");
					exit(1);
				}
				pg_cpu_q4x8_pack(be, &pk, buf);
				CHECK(pk.layout == PG_LAYOUT_Q4X8 && pk.data == buf,
				      "q4x8: the packed matrix does not describe its bytes");
				for (int n = 1; n <= N; n += n < 9 ? 1 : 7) {
					size_t nyn = (size_t)n * (size_t)rows;

					be->ops->matmul(be, &m, x, n, NULL, want);
					be->ops->matmul(be, &pk, x, n, NULL, got);
					CHECK(!memcmp(want, got, nyn * 4),
					      "q4x8 %s %lldx%lld n=%d on %s: not the rows' bits",
					      pg_dtype_name(t), (long long)rows,
					      (long long)cols, n, be_name(be));
					for (int sum = 0; sum < 2; sum++) {
						size_t o = sum ? nyn : NP * nyn;

						be->ops->matmul_parts(be, &m, x, n, NP, cuts, sum, want);
						be->ops->matmul_parts(be, &pk, x, n, NP, cuts, sum, got);
						CHECK(!memcmp(want, got, o * 4),
						      "q4x8 %s %lldx%lld n=%d on %s: parts (%s) not the rows' bits",
						      pg_dtype_name(t), (long long)rows,
						      (long long)cols, n, be_name(be),
						      sum ? "summed" : "apart");
					}
				}
				free(buf);
				tested++;
			}
			free(wf), free((void *)m.data), free(x), free(want), free(got);
		}
	printf("q4x8: Q4_0/Q4_1/Q5_0 repacked, Q4_K/Q5_K/Q6_K packed, %d backend x shape cases, n = 1..37: "
	       "matmul and matmul_parts bit for bit the rows'\n", tested);
}

/*
 * Batched matmuls column by column: for every quantised type (Q4_1 in
 * both numerics), in rows and repacked where the backend repacks it, on
 * every backend, each token's outputs of a batch of n (n = 1..19 and 64:
 * every remainder of the loops' 4-token blocks, below and above where the
 * 8-row loops and their repacking take over) equal bit for bit those of
 * the same token alone (n = 1, the decode path).  44 rows: five 8-row
 * groups and a 4-row tail.
 */
static void check_matmul_batch(void)
{
	static const enum pg_dtype types[] = {
		PG_Q4_0, PG_Q4_1, PG_Q4_1, PG_Q8_0, PG_Q5_0, PG_Q5_1, PG_Q2_K,
		PG_Q3_K, PG_Q4_K, PG_Q5_K, PG_Q6_K,
	};
	enum { N = 64, ROWS = 44, COLS = 768 };
	int tested = 0;

	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		enum pg_dtype t = types[ti];
		int llama = ti == 2;
		float *wf, *x = xmalloc((size_t)N * COLS * 4);
		float *y = xmalloc((size_t)N * ROWS * 4);
		float *alone = xmalloc((size_t)N * ROWS * 4);
		struct pg_matrix rows;

		reseed("matmul_batch", (int64_t)ti, 0, 0);
		rows = make_matrix(t, ROWS, COLS, &wf);
		fill(x, (size_t)N * COLS);
		for (int i = 0; i < n_bes; i++)
			for (int packed = 0; packed < 2; packed++) {
				struct pg_backend *be = bes[i];
				struct pg_matrix m = rows;
				void *buf = NULL;

				pg_cpu_backend_llama_numerics(be, llama);
				if (packed) {
					size_t bytes;

					if (PG_KX16_BYTES(t))	/* groups of 16 */
						m.n_rows = ROWS / 16 * 16;
					bytes = pg_cpu_q4x8_bytes(be, &m);

					if (!bytes) {
						pg_cpu_backend_llama_numerics(be, 0);
						continue;
					}
					buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
					CHECK(buf != NULL, "out of memory");
					if (!buf)
						continue;
					pg_cpu_q4x8_pack(be, &m, buf);
				}
				for (int j = 0; j < N; j++)
					be->ops->matmul(be, &m, x + (size_t)j * COLS, 1,
							NULL, alone + (size_t)j * (size_t)m.n_rows);
				for (int n = 1; n <= N; n = n < 19 ? n + 1 : N) {
					for (size_t o = 0; o < (size_t)n * (size_t)m.n_rows; o++)
						y[o] = NAN;
					be->ops->matmul(be, &m, x, n, NULL, y);
					for (int j = 0; j < n; j++)
						CHECK(!memcmp(y + (size_t)j * (size_t)m.n_rows,
							      alone + (size_t)j * (size_t)m.n_rows,
							      (size_t)m.n_rows * 4),
						      "matmul %s%s%s %dx%d n=%d on %s: "
						      "token %d not its one-token result",
						      pg_dtype_name(t), llama ? " (llama.cpp "
						      "numerics)" : "", packed ? " packed" : "",
						      (int)m.n_rows, COLS, n, be_name(be), j);
					if (n == N)
						break;
				}
				free(buf);
				pg_cpu_backend_llama_numerics(be, 0);
				tested++;
			}
		free(wf), free((void *)rows.data), free(x), free(y), free(alone);
	}
	printf("matmul batch: Q4_0..Q8_0, Q5_0/Q5_1, Q2_K..Q6_K (Q4_1 both "
	       "numerics; in rows and repacked), %d backend cases, n = 1..19, "
	       "64: each token bit for bit its one-token result\n", tested);
}

/* ---- the thread pool ---- */

struct pool_count {
	long runs[4];
	int slow;		/* workers sleep 0.5 ms: the caller must sleep */
};

static void pool_fn(void *arg, int ith, int nth)
{
	struct pool_count *c = arg;

	if (c->slow && ith)
		usleep(500);
	c->runs[ith] += nth;
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Many back-to-back runs (spinning), then runs with sleeps on both sides. */
static void check_pool(int nth)
{
	struct pg_pool *pool;
	struct pool_count c = { { 0 }, 0 };
	enum { N_FAST = 20000, N_SLOW = 20 };
	double t;

	CHECK(pg_pool_create(nth, &pool) == 0, "pg_pool_create");
	t = mono();
	for (int i = 0; i < N_FAST; i++)
		pg_pool_run(pool, pool_fn, &c);
	t = mono() - t;
	for (int i = 0; i < N_SLOW; i++) {
		usleep(i % 2 ? 1000 : 0);	/* workers fall asleep */
		c.slow = i % 3 == 0;
		pg_pool_run(pool, pool_fn, &c);
	}
	for (int i = 0; i < nth; i++)
		CHECK(c.runs[i] == (long)nth * (N_FAST + N_SLOW), "pool thread "
		      "%d ran %ld times", i, c.runs[i] / nth);
	pg_pool_destroy(pool);
	printf("pool: %d runs on %d threads, %.2f us a run; sleeping runs ok\n",
	       N_FAST, nth, t / N_FAST * 1e6);
}

/* ---- the tables and PAGODA_CPU_KERNELS ---- */

/*
 * PAGODA_CPU_KERNELS, set here in turn to every level, to names of none
 * and (where the processor lacks it) to a level beyond it: what
 * pg_cpu_isa_forced, pg_cpu_isa_best and pg_cpu_backend_create make of
 * each.  The caller's value is back in place at the end.
 */
static void check_env_value(const char *v, enum pg_cpu_isa hw)
{
	int want = pg_cpu_isa_parse(v), rc;
	enum pg_cpu_isa isa = PG_ISA_SCALAR;
	struct pg_backend *be;
	char err[512] = "";

	setenv(PG_CPU_KERNELS_ENV, v, 1);
	rc = pg_cpu_isa_forced(&isa, err, sizeof(err));
	be = pg_cpu_backend_create(1, PG_ISA_TOP);
	if (want >= 0 && want <= (int)hw) {
		CHECK(rc == 1 && isa == (enum pg_cpu_isa)want &&
		      pg_cpu_isa_best() == isa, "%s=%s: forced %d, level %s",
		      PG_CPU_KERNELS_ENV, v, rc, pg_cpu_isa_name(isa));
		CHECK(be && pg_cpu_backend_isa(be) == isa,
		      "%s=%s: the backend does not run that table",
		      PG_CPU_KERNELS_ENV, v);
		if (be)
			be->ops->destroy(be);
		/* a lower level asked for is still the lower one */
		be = pg_cpu_backend_create(1, PG_ISA_SCALAR);
		CHECK(be && pg_cpu_backend_isa(be) == PG_ISA_SCALAR,
		      "%s=%s: no scalar backend", PG_CPU_KERNELS_ENV, v);
	} else {
		int code = want < 0 ? EINVAL : ENOTSUP;

		CHECK(rc == -code && strstr(err, v) &&
		      strstr(err, want < 0 ? "use scalar, avx2, avx512 or avx512vnni" :
			     "this processor cannot run"),
		      "%s=%s: %d, message \"%s\"", PG_CPU_KERNELS_ENV, v, rc,
		      err);
		CHECK(!be && errno == code, "%s=%s: a backend was made",
		      PG_CPU_KERNELS_ENV, v);
		CHECK(pg_cpu_isa_best() == hw, "%s=%s: best level %s",
		      PG_CPU_KERNELS_ENV, v, pg_cpu_isa_name(pg_cpu_isa_best()));
	}
	if (be)
		be->ops->destroy(be);
}

static void check_env(void)
{
	static const char *const bad[] = { "avx512bf16", "avxvnni", "AVX2", "avx", " avx2" };
	const char *was = getenv(PG_CPU_KERNELS_ENV);
	char *saved = was ? strdup(was) : NULL;
	enum pg_cpu_isa hw = pg_cpu_isa_hw();

	unsetenv(PG_CPU_KERNELS_ENV);
	CHECK(pg_cpu_isa_forced(NULL, NULL, 0) == 0 && pg_cpu_isa_best() == hw,
	      "%s unset: not the processor's best", PG_CPU_KERNELS_ENV);
	setenv(PG_CPU_KERNELS_ENV, "", 1);
	CHECK(pg_cpu_isa_forced(NULL, NULL, 0) == 0 && pg_cpu_isa_best() == hw,
	      "%s empty: not the processor's best", PG_CPU_KERNELS_ENV);
	for (int isa = PG_ISA_SCALAR; isa <= PG_ISA_TOP; isa++)
		check_env_value(pg_cpu_isa_name((enum pg_cpu_isa)isa), hw);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_env_value(bad[i], hw);
	if (saved)
		setenv(PG_CPU_KERNELS_ENV, saved, 1);
	else
		unsetenv(PG_CPU_KERNELS_ENV);
	free(saved);
	printf("%s: every level, unknown names, levels beyond the "
	       "processor (%s here): as documented\n", PG_CPU_KERNELS_ENV,
	       pg_cpu_isa_name(hw));
}

/*
 * Every table up to top, on 1 and 2 threads; the others named with why
 * they were skipped.  One line for logs to find: "test_kernels: tables
 * run: scalar avx2 ...".
 */
static void open_backends(void)
{
	enum pg_cpu_isa hw = pg_cpu_isa_hw();
	const char *forced = getenv(PG_CPU_KERNELS_ENV);
	char run[64] = "", skipped[256] = "";

	top = pg_cpu_isa_best();
	for (int isa = PG_ISA_SCALAR; isa <= PG_ISA_TOP; isa++) {
		const char *name = pg_cpu_isa_name((enum pg_cpu_isa)isa);
		size_t len = strlen(skipped);

		if (isa > (int)top) {
			if (isa > (int)hw)
				snprintf(skipped + len, sizeof(skipped) - len,
					 " %s (this processor lacks it)", name);
			else
				snprintf(skipped + len, sizeof(skipped) - len,
					 " %s (%s=%s)", name, PG_CPU_KERNELS_ENV,
					 forced);
			printf("level %s: skipped\n", name);
			continue;
		}
		for (int t = 1; t <= 2; t++) {
			struct pg_backend *be =
				pg_cpu_backend_create(t, (enum pg_cpu_isa)isa);

			if (!be) {
				perror("pg_cpu_backend_create");
				exit(1);
			}
			CHECK(pg_cpu_backend_isa(be) == (enum pg_cpu_isa)isa &&
			      pg_cpu_backend_threads(be) == t, "backend %d/%d",
			      isa, t);
			bes[n_bes++] = be;
		}
		printf("level %s: tested on 1 and 2 threads\n", name);
		len = strlen(run);
		snprintf(run + len, sizeof(run) - len, " %s", name);
	}
	ref = bes[0];
	printf("test_kernels: tables run:%s\n", run);
	if (*skipped)
		printf("test_kernels: tables skipped:%s\n", skipped);
}

/* --tables: the tables this processor runs, whatever PAGODA_CPU_KERNELS says. */
static int list_tables(void)
{
	for (int isa = PG_ISA_SCALAR; isa <= (int)pg_cpu_isa_hw(); isa++)
		printf("%s%s", isa ? " " : "",
		       pg_cpu_isa_name((enum pg_cpu_isa)isa));
	printf("\n");
	return 0;
}

/* ---- Q5_0, Q5_1 and the K-quants ---- */

static const enum pg_dtype ktypes[] = {
	PG_Q5_0, PG_Q5_1, PG_Q2_K, PG_Q3_K, PG_Q4_K, PG_Q5_K, PG_Q6_K,
};
#define N_KTYPES (sizeof(ktypes) / sizeof(ktypes[0]))

static int bit(const uint8_t *p, int i)
{
	return (p[i / 8] >> (i % 8)) & 1;
}

/*
 * Value v of the block at b of type t straight from the layout's
 * definition (kernels/dtype.h), written per value and independently of
 * quant.c's loops; *mn: the value's min term (dmin * m, 0 for none), for
 * error bounds.  The float operations are those llama.cpp's dequantisation
 * does ((d * sc) * q - dmin * m), so the result is exact.
 */
static float kvalue(enum pg_dtype t, const uint8_t *b, int v, float *mn)
{
	uint16_t h[2];
	int u, sc, m;

	*mn = 0;
	switch (t) {
	case PG_Q5_0: case PG_Q5_1: {
		int off = t == PG_Q5_0 ? 2 : 4;	/* qh; qs 4 bytes on */
		int lo = v < 16 ? b[off + 4 + v] & 15 : b[off + 4 + v - 16] >> 4;

		memcpy(h, b, 4);
		u = lo | bit(b + off, v) << 4;
		if (t == PG_Q5_0)
			return pg_fp16_to_fp32(h[0]) * (float)(u - 16);
		*mn = -pg_fp16_to_fp32(h[1]);
		return pg_fp16_to_fp32(h[0]) * (float)u + pg_fp16_to_fp32(h[1]);
	}
	case PG_Q2_K: {
		const struct pg_block_q2_k *q = (const void *)b;
		int j = v / 16;

		u = (q->qs[32 * (v / 128) + v % 32] >> (2 * (v % 128 / 32))) & 3;
		*mn = pg_fp16_to_fp32(q->dmin) * (float)(q->scales[j] >> 4);
		return pg_fp16_to_fp32(q->d) * (float)(q->scales[j] & 15) *
		       (float)u - *mn;
	}
	case PG_Q3_K: {
		const struct pg_block_q3_k *q = (const void *)b;
		int j = v / 16;
		/* 6-bit scale j: nibble j of bytes 0..7 (low nibbles first),
		 * 2-bit pair j of bytes 8..11 (byte j % 4, pair j / 4) */
		int lo = (q->scales[j % 8] >> (4 * (j / 8))) & 15;
		int hi = (q->scales[8 + j % 4] >> (2 * (j / 4))) & 3;

		u = (q->qs[32 * (v / 128) + v % 32] >> (2 * (v % 128 / 32))) & 3;
		u -= bit(q->hmask, 8 * (v % 32) + v / 32) ? 0 : 4;
		return pg_fp16_to_fp32(q->d) * (float)((lo | hi << 4) - 32) *
		       (float)u;
	}
	case PG_Q4_K: case PG_Q5_K: {
		const struct pg_block_q4_k *q4 = (const void *)b;
		const struct pg_block_q5_k *q5 = (const void *)b;
		const uint8_t *s8 = t == PG_Q4_K ? q4->scales : q5->scales;
		const uint8_t *qs = t == PG_Q4_K ? q4->qs : q5->qs;
		int j = v / 32;

		memcpy(h, b, 4);
		if (j < 4) {
			sc = s8[j] & 63;
			m = s8[4 + j] & 63;
		} else {
			sc = (s8[8 + j - 4] & 15) | (s8[j - 4] >> 6) << 4;
			m = (s8[8 + j - 4] >> 4) | (s8[j] >> 6) << 4;
		}
		u = (qs[32 * (j / 2) + v % 32] >> (4 * (j % 2))) & 15;
		if (t == PG_Q5_K)
			u |= bit(q5->qh, 8 * (v % 32) + j) << 4;
		*mn = pg_fp16_to_fp32(h[1]) * (float)m;
		return pg_fp16_to_fp32(h[0]) * (float)sc * (float)u - *mn;
	}
	case PG_Q6_K: {
		const struct pg_block_q6_k *q = (const void *)b;
		int half = v / 128, k = v % 128 / 32, l = v % 32;

		u = (q->ql[64 * half + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
		u |= ((q->qh[32 * half + l] >> (2 * k)) & 3) << 4;
		return pg_fp16_to_fp32(q->d) * (float)q->scales[v / 16] *
		       (float)(u - 32);
	}
	default:
		return NAN;
	}
}

/* A random block of type t with finite scales: random bytes, then d and
 * dmin set to small F16 values. */
static void random_block(enum pg_dtype t, uint8_t *b)
{
	size_t bytes = pg_dtype_block_bytes(t);
	uint16_t d = pg_fp32_to_fp16(0.01f + 0.001f * frand());
	uint16_t dm = pg_fp32_to_fp16(0.02f + 0.001f * frand());

	for (size_t i = 0; i < bytes; i++)
		b[i] = (uint8_t)(frand() * 128.0f + 128.0f);
	switch (t) {
	case PG_Q5_0: memcpy(b, &d, 2); break;
	case PG_Q5_1: memcpy(b, &d, 2); memcpy(b + 2, &dm, 2); break;
	case PG_Q4_K: case PG_Q5_K: memcpy(b, &d, 2); memcpy(b + 2, &dm, 2);
		break;
	case PG_Q2_K: memcpy(b + 80, &d, 2); memcpy(b + 82, &dm, 2); break;
	case PG_Q3_K: memcpy(b + 108, &d, 2); break;
	case PG_Q6_K: memcpy(b + 208, &d, 2); break;
	default: break;
	}
}

/*
 * Known answers: hand-built (random) blocks of each type dequantised by
 * pg_dequantize_row and by every backend's get_rows, against kvalue.
 */
static void check_kquant_dequant(void)
{
	enum { NB = 3 };

	for (size_t k = 0; k < N_KTYPES; k++) {
		enum pg_dtype t = ktypes[k];
		int bs = pg_dtype_block_size(t);
		size_t bb = pg_dtype_block_bytes(t);
		uint8_t *blk = xmalloc(NB * bb);
		float *y = xmalloc(NB * (size_t)bs * sizeof(float));
		float *g = xmalloc(NB * (size_t)bs * sizeof(float));
		struct pg_matrix m = {
			.type = t, .n_rows = NB, .n_cols = bs,
			.row_bytes = bb, .data = blk,
		};
		int32_t ids[NB] = { 2, 0, 1 };
		int bad = 0;
		float mn;

		reseed("kdequant", t, 0, 0);
		for (int i = 0; i < NB; i++)
			random_block(t, blk + i * bb);
		pg_dequantize_row(t, blk, y, NB * bs);
		for (int i = 0; i < NB * bs && bad < 3; i++) {
			float want = kvalue(t, blk + (i / bs) * bb, i % bs, &mn);

			if (pg_f32_bits(y[i]) != pg_f32_bits(want)) {
				bad++;
				CHECK(0, "dequant %s value %d: %.9g, want %.9g",
				      pg_dtype_name(t), i, y[i], want);
			}
		}
		for (int i = 0; i < n_bes; i++) {
			bes[i]->ops->get_rows(bes[i], &m, ids, NB, g);
			for (int r = 0; r < NB; r++)
				CHECK(!memcmp(g + r * bs, y + ids[r] * bs,
					      (size_t)bs * sizeof(float)),
				      "get_rows %s on %s", pg_dtype_name(t),
				      be_name(bes[i]));
		}
		free(blk);
		free(y);
		free(g);
	}
	printf("kquants: dequantisation of hand-built blocks exact\n");
}

/*
 * Each new type's matmul on the scalar table against the float dot of the
 * dequantised weights and the dequantised activations (Q8_0, Q8_1 or
 * Q8_K as the backend quantises them; Q5_1's minimum terms take s_x as
 * stored, as Q4_1's): within 1e-5 of the sum of |terms| (the dequantised
 * products and, for the types with mins, the min terms separately).
 * Then every backend (table, thread count), for n = 1, 2, 5 and 9 tokens
 * with a bias and matmul_parts cut at block bounds: bit-identical to the
 * scalar table.
 */
static void check_kquant_matmul(void)
{
	/* 21 rows: two 8-row groups, a 4-row one and a single row; every
	 * n from 1 to 5 (the 4x2 tiles' odd token, gemm8 from 4) and more
	 * (Q4_K's repacked gemm8 from 16) */
	enum { ROWS = 21, MAXC = 800, NT = 17 };

	for (size_t k = 0; k < N_KTYPES; k++) {
		enum pg_dtype t = ktypes[k];
		enum pg_dtype vt = t == PG_Q5_0 ? PG_Q8_0 :
				   t == PG_Q5_1 ? PG_Q8_1 : PG_Q8_K;
		int bs = pg_dtype_block_size(t);
		/* 25 blocks for Q5_*: the 8-block loops' tail too */
		const int nc = bs == PG_QK ? MAXC : 768;
		size_t bb = pg_dtype_block_bytes(t);
		float *wf, *x = xmalloc(NT * MAXC * sizeof(float));
		float xd[MAXC], bias[ROWS], *y0, *y1;
		uint8_t *xq = xmalloc(pg_dtype_row_bytes(vt, nc));
		struct pg_matrix m;
		int64_t cols[4] = { 0, 256, 512, nc };
		const int ns[] = { 1, 2, 3, 4, 5, 9, 16, NT };

		reseed("kmatmul", t, 0, 0);
		m = make_matrix(t, ROWS, nc, &wf);
		fill(x, NT * nc);
		fill(bias, ROWS);
		if (vt == PG_Q8_K)
			pg_quant_q8_k_ref(x, xq, nc);
		else
			quant_act(vt, x, xq, nc);
		pg_dequantize_row(vt, xq, xd, nc);
		y0 = xmalloc(4 * NT * ROWS * sizeof(float));
		y1 = xmalloc(4 * NT * ROWS * sizeof(float));
		ref->ops->matmul(ref, &m, x, 1, NULL, y0);
		for (int r = 0; r < ROWS; r++) {
			const uint8_t *w = (const uint8_t *)m.data + r * m.row_bytes;
			double s = 0, a = 0;
			float mn;

			for (int i = 0; i < nc; i++) {
				float wv = kvalue(t, w + (i / bs) * bb, i % bs,
						  &mn);

				CHECK(wv == wf[r * nc + i], "%s value", pg_dtype_name(t));
				if (t == PG_Q5_1) {	/* m_w s_x as stored */
					s += ((double)wv + mn) * xd[i];
					if (i % PG_QK == PG_QK - 1) {
						const struct pg_block_q8_1 *xb =
							(const void *)xq;

						s -= (double)mn * pg_fp16_to_fp32(
							xb[i / PG_QK].s);
					}
				} else {
					s += (double)wv * xd[i];
				}
				a += fabs((double)wv * xd[i]) +
				     fabs((double)mn * xd[i]);
			}
			CHECK(fabs(y0[r] - s) <= 1e-5 * a,
			      "dot %s row %d: %.9g vs %.9g (sum |terms| %g)",
			      pg_dtype_name(t), r, y0[r], s, a);
		}
		for (size_t q = 0; q < sizeof(ns) / sizeof(ns[0]); q++) {
			int n = ns[q];
			size_t ny = (size_t)n * ROWS;

			ref->ops->matmul(ref, &m, x, n, bias, y0);
			ref->ops->matmul_parts(ref, &m, x, n, 3, cols, 0,
					       y0 + ny);
			for (int i = 0; i < n_bes; i++) {
				bes[i]->ops->matmul(bes[i], &m, x, n, bias, y1);
				CHECK(!memcmp(y0, y1, ny * sizeof(float)),
				      "matmul %s n=%d on %s differs from scalar",
				      pg_dtype_name(t), n, be_name(bes[i]));
				bes[i]->ops->matmul_parts(bes[i], &m, x, n, 3,
							  cols, 0, y1 + ny);
				CHECK(!memcmp(y0 + ny, y1 + ny,
					      3 * ny * sizeof(float)),
				      "matmul_parts %s n=%d on %s differs from scalar",
				      pg_dtype_name(t), n, be_name(bes[i]));
			}
			/* each part is the matmul of its columns alone */
			for (int p = 0; p < 3 && n == 1; p++) {
				struct pg_matrix mp = m;
				int64_t pc = cols[p + 1] - cols[p];
				float yp[ROWS], *xp = xmalloc((size_t)pc *
							       sizeof(float));

				mp.n_cols = pc;
				mp.data = (const uint8_t *)m.data +
					  cols[p] / bs * bb;
				memcpy(xp, x + cols[p], (size_t)pc * sizeof(float));
				ref->ops->matmul(ref, &mp, xp, 1, NULL, yp);
				CHECK(!memcmp(yp, y0 + ny + p * ny,
					      ROWS * sizeof(float)),
				      "matmul_parts %s part %d", pg_dtype_name(t), p);
				free(xp);
			}
		}
		/* a cut inside a block: NaN, not wrong numbers */
		if (bs == PG_QK_K) {
			int64_t bad[3] = { 0, 128, nc };

			ref->ops->matmul_parts(ref, &m, x, 1, 2, bad, 1, y1);
			CHECK(isnan(y1[0]) && isnan(y1[ROWS - 1]),
			      "matmul_parts %s cut inside a block", pg_dtype_name(t));
		}
		free(wf);
		free((void *)m.data);
		free(x);
		free(xq);
		free(y0);
		free(y1);
	}
	printf("kquants: Q5_0 Q5_1 Q2_K..Q6_K matmuls match float dots; every table bit-identical to scalar\n");
}

int main(int argc, char **argv)
{
	const char *seed = getenv("TEST_KERNELS_SEED");
	char err[512];

	if (argc == 2 && !strcmp(argv[1], "--tables"))
		return list_tables();
	if (argc > 1) {
		fprintf(stderr, "usage: test_kernels [--tables]\n");
		return 2;
	}
	if (pg_cpu_isa_forced(NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, "test_kernels: %s\n", err);
		return 1;
	}
	if (seed) {
		base_seed = (uint32_t)strtoul(seed, NULL, 0);
		printf("inputs: TEST_KERNELS_SEED=%s\n", seed);
	}
	check_pool(2);
	check_pool(3);
	check_env();
	open_backends();
	check_dots();
	check_tables();
	check_gemm8();
	check_get_rows();
	check_rmsnorm();
	check_silu_add();
	check_rope();
	check_matmul();
	check_matmul_tokens();
	check_matmul_parts();
	check_q4x8();
	check_matmul_batch();
	check_attention();
	check_attention_tiles();
	check_softmax_rows();
	check_llama_numerics();
	check_kquant_dequant();
	check_kquant_matmul();
	for (int i = 0; i < n_bes; i++)
		bes[i]->ops->destroy(bes[i]);
	if (failures)
		fprintf(stderr, "test_kernels: %d failures\n", failures);
	else
		printf("test_kernels: all passed\n");
	return failures ? 1 : 0;
}
