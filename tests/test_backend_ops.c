/*
 * test_backend_ops.c - every backend op on every backend present, against
 * the scalar CPU backend, in the style of ggml's test-backend-ops.
 *
 * Targets: the CPU backend at the best SIMD level this processor has, and
 * CUDA device 0 when the CUDA backend is built and a GPU is present.  The
 * reference is the CPU backend at PG_ISA_SCALAR (tests/test_kernels.c pins
 * it to double-precision references).  Every input is made in host memory
 * and reaches a backend through its alloc/upload, every output comes back
 * through download, so one code path drives the CPU and the GPU alike.
 * This is not a benchmark (bench/gpu is) and not a test of the CPU levels
 * one by one (test_kernels is).
 *
 * Error measure: NMSE = sum (a - b)^2 / sum b^2 over an op's output, b the
 * reference's.  Bounds, CPU SIMD | CUDA, and why:
 *   get_rows            0     | 0      dequantising is exact in float
 *                                      (every weight type, K-quants too)
 *   add, scale,         0     | 0      one rounding either way; sum_parts
 *   sum_parts                          adds the parts in order, as
 *                                      add_parts (1, 2, 3 and 9 parts, and
 *                                      in place on the first)
 *   gelu_mul            0     | 1e-8   gelu.c's F16 table on the CPU;
 *                                      the device's tanhf can move its
 *                                      last F16 rounding by a step
 *   softcap             1e-10 | 1e-9   the device's tanhf
 *   kv_write            0     | 0      (bytes of the store that differ) F16
 *                                      and BF16 round to nearest even
 *   rmsnorm             1e-10 | 1e-10  summation order, rsqrt's last bits
 *   silu_mul            1e-10 | 1e-9   the device's exp
 *   rope                1e-8  | 1e-8   the same angles (llama.cpp's
 *                                      products), sin/cos correctly rounded
 *   matmul F32/F16/BF16, n <= 8       1e-9 | 1e-9   float dots, another
 *                                      summation order
 *   ... n >= 16 (prefill)             1e-9 | 1e-5   GEMM may round the
 *                                      activations to BF16/F16 for tensor
 *                                      cores (2^-9: ~1.3e-6)
 *   matmul Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 and the K-quants Q2_K..Q6_K,
 *     n <= 8                          2e-5 | 2e-5  both quantise the
 *                                      activations to 8 bits like the
 *                                      reference (Q8_0, Q8_1, Q8_K); a tie
 *                                      (x/d at .5) may round the other way
 *   ... n >= 16 (prefill)             2e-5 | 1e-4  the device
 *                                      dequantises W to F16 tiles and
 *                                      multiplies F16 activations:
 *                                      then it differs from the reference
 *                                      by the reference's own 8-bit
 *                                      activation noise (~1.5e-5)
 *   attention           1e-8  | 1e-7   float kernels, another summation
 *                                      order and the device's expf; one key
 *                                      too few costs 1e-6 and more, a scale
 *                                      0.1% off 1e-7 and more (a kernel
 *                                      that rounds Q or P to F16/BF16 for
 *                                      tensor cores would need 1e-5)
 *   attention lse       1e-10 | 1e-9   (finite entries; -inf must match)
 *   attention window/softcap: as attention.  Sliding windows shorter than
 *                                      the context, not multiples of a
 *                                      page, in decode, prefill, mixed,
 *                                      split-KV and CP batches; positions
 *                                      before every row's window are never
 *                                      written (NaN), so a kernel that
 *                                      reads them fails; softcap small
 *                                      enough (1.5, 2) to change every
 *                                      softmax
 *   attn_merge          1e-10 | 1e-9
 * KV pages never written hold NaN, so reading past a context shows.
 * Decode steps (get_rows, rope, kv_write, attention; one new token per
 * sequence, contexts growing across page boundaries) run on every target
 * inside step_begin/step_end where a backend has them, and on CUDA once
 * more with PAGODA_CUDA_GRAPHS=1, so that the steps after the first replay
 * a captured graph with new ids, positions, slots and n_ctx; every step
 * must match the reference.
 *
 * Output: one line per op and shape family with its worst NMSE on each
 * target.  Exit status: 1 when any comparison fails; 77 when no GPU is
 * present (the CPU SIMD part passed, the CUDA part was skipped); else 0.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/cpu/cpu.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/backend_cuda.h"
#endif
#include "tests/check.h"

#define MAX_TARGETS 3
#define MAX_FAMILIES 160
#define MAX_SEQS 8

/* ---- plumbing: targets, families, random data, device memory ---- */

struct target {
	char name[32];
	struct pg_backend *be;
	int cuda;		/* selects the CUDA column of the bounds */
};

/*
 * The ops run on targets 0 .. n_op_targets - 1; the decode steps also on
 * the rest (CUDA with graphs on, which changes nothing outside a step).
 */
static struct target targets[MAX_TARGETS];
static int n_targets, n_op_targets;
static struct pg_backend *ref;	/* scalar CPU */

/* The worst error of one op and shape family on each target. */
struct family {
	char name[64];
	double bound[2];	/* CPU SIMD, CUDA */
	double worst[MAX_TARGETS];
	int ran[MAX_TARGETS];
};

static struct family fams[MAX_FAMILIES];
static int n_fams;
static char current[160];	/* the case running, for device errors */

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "test_backend_ops: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static uint32_t rng = 12345;

static uint32_t urand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return rng >> 8;
}

static float frand(void)	/* uniform in [-1, 1) */
{
	return (float)urand() / 16777216.0f * 2.0f - 1.0f;
}

static void fill(float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = frand() * scale;
}

static struct family *family(const char *name, double cpu, double cuda)
{
	for (int i = 0; i < n_fams; i++)
		if (!strcmp(fams[i].name, name))
			return &fams[i];
	if (n_fams == MAX_FAMILIES)
		die("more than %d families", MAX_FAMILIES);
	snprintf(fams[n_fams].name, sizeof(fams[n_fams].name), "%s", name);
	fams[n_fams].bound[0] = cpu;
	fams[n_fams].bound[1] = cuda;
	return &fams[n_fams++];
}

/* Record error e of target t on the case `current`; NaN always fails. */
static void record(struct family *f, int t, double e)
{
	double bound = f->bound[targets[t].cuda];

	if (!f->ran[t] || isnan(e) || e > f->worst[t])
		if (!isnan(f->worst[t]))
			f->worst[t] = e;
	f->ran[t] = 1;
	if (isnan(e) || e > bound) {
		fprintf(stderr, "FAIL %s on %s: %s: error %.3g > %.3g%s\n",
			f->name, targets[t].name, current, e, bound,
			isnan(e) ? " (NaN: reads unwritten KV slots?)" : "");
		failures++;
	}
}

/* NMSE of a against the reference b; NaN anywhere in a gives NaN. */
static double nmse(const float *a, const float *b, size_t n)
{
	double se = 0, ss = 0;

	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - b[i];

		se += d * d;
		ss += (double)b[i] * b[i];
	}
	return ss > 0 ? se / ss : se;
}

/* NMSE over finite reference entries; a -inf must be matched exactly. */
static double nmse_lse(const float *a, const float *b, size_t n)
{
	double se = 0, ss = 0;

	for (size_t i = 0; i < n; i++) {
		if (isinf(b[i]) || isinf(a[i])) {
			if (a[i] != b[i])
				return NAN;
			continue;
		}
		se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		ss += (double)b[i] * b[i];
	}
	return ss > 0 ? se / ss : se;
}

static void *dput(struct pg_backend *be, const void *src, size_t bytes)
{
	char err[256];
	void *p = be->ops->alloc(be, bytes ? bytes : 1);

	if (!p)
		die("%s: %s: alloc of %zu bytes failed", be->ops->name,
		    current, bytes);
	if (src && be->ops->upload(be, p, src, bytes, err, sizeof(err)))
		die("%s: %s: upload: %s", be->ops->name, current, err);
	return p;
}

/* Upload into memory dput() gave. */
static void dput_to(struct pg_backend *be, void *dst, const void *src,
		    size_t bytes)
{
	char err[256];

	if (be->ops->upload(be, dst, src, bytes, err, sizeof(err)))
		die("%s: %s: upload: %s", be->ops->name, current, err);
}

static void dget(struct pg_backend *be, void *dst, const void *src,
		 size_t bytes)
{
	char err[256];

	if (be->ops->download(be, dst, src, bytes, err, sizeof(err)))
		die("%s: %s: download: %s", be->ops->name, current, err);
}

static void dfree(struct pg_backend *be, void *p)
{
	be->ops->free(be, p);
}

/* The backend of target t, or the reference for t = -1. */
static struct pg_backend *be_of(int t)
{
	return t < 0 ? ref : targets[t].be;
}

/* ---- get_rows ---- */

static const enum pg_dtype wtypes[] = {
	PG_F32, PG_F16, PG_BF16, PG_Q8_0, PG_Q4_0, PG_Q4_1, PG_Q5_0, PG_Q5_1,
	PG_Q2_K, PG_Q3_K, PG_Q4_K, PG_Q5_K, PG_Q6_K,
};
#define N_WTYPES (sizeof(wtypes) / sizeof(wtypes[0]))

static int is_quant(enum pg_dtype t)
{
	return pg_dtype_block_size(t) > 1;
}

/* cols rounded up to a multiple of t's block (256 for the K-quants). */
static int64_t fit_cols(enum pg_dtype t, int64_t cols)
{
	int64_t bs = pg_dtype_block_size(t);

	return (cols + bs - 1) / bs * bs;
}

/* rows x cols of random values in type t, in host memory. */
static struct pg_matrix make_matrix(enum pg_dtype t, int64_t rows,
				    int64_t cols)
{
	struct pg_matrix m = { .type = t, .n_rows = rows, .n_cols = cols };
	float *f = xmalloc((size_t)cols * sizeof(float));
	uint8_t *d;

	m.row_bytes = pg_dtype_row_bytes(t, (uint64_t)cols);
	d = xmalloc(m.row_bytes * (size_t)rows);
	for (int64_t r = 0; r < rows; r++) {
		fill(f, (size_t)cols, 1.0f);
		pg_quantize_row(t, f, d + r * m.row_bytes, cols);
	}
	free(f);
	m.data = d;
	return m;
}

static size_t matrix_bytes(const struct pg_matrix *m)
{
	return m->row_bytes * (size_t)m->n_rows;
}

static void run_get_rows(int t, const struct pg_matrix *hm,
			 const int32_t *ids, int n, float *out)
{
	struct pg_backend *be = be_of(t);
	struct pg_matrix m = *hm;
	size_t ob = (size_t)n * (size_t)m.n_cols * sizeof(float);
	float *d_out = dput(be, NULL, ob);

	m.data = dput(be, hm->data, matrix_bytes(hm));
	be->ops->get_rows(be, &m, ids, n, d_out);
	dget(be, out, d_out, ob);
	dfree(be, (void *)m.data);
	dfree(be, d_out);
}

static void check_get_rows(void)
{
	/* 96 columns: 352 (Q8_0..Q5_1: 11 blocks), 256 (one super-block) */
	static const int64_t shapes[][2] = { { 1000, 4096 }, { 37, 352 } };
	static const int ns[] = { 1, 8, 77 };
	int32_t ids[77];

	for (size_t k = 0; k < N_WTYPES; k++)
		for (size_t s = 0; s < 2; s++) {
			struct pg_matrix m = make_matrix(wtypes[k], shapes[s][0],
							 fit_cols(wtypes[k],
								  shapes[s][1]));
			char fam[64];

			snprintf(fam, sizeof(fam), "get_rows %s",
				 pg_dtype_name(wtypes[k]));
			for (size_t j = 0; j < 3; j++) {
				int n = ns[j];
				size_t sz = (size_t)n * (size_t)m.n_cols;
				float *want = xmalloc(sz * 4), *got = xmalloc(sz * 4);

				for (int i = 0; i < n; i++)	/* repeats too */
					ids[i] = (int32_t)(urand() % m.n_rows);
				ids[0] = (int32_t)m.n_rows - 1;
				snprintf(current, sizeof(current), "%lldx%lld n=%d",
					 (long long)m.n_rows, (long long)m.n_cols, n);
				run_get_rows(-1, &m, ids, n, want);
				for (int t = 0; t < n_op_targets; t++) {
					run_get_rows(t, &m, ids, n, got);
					record(family(fam, 0, 0), t,
					       nmse(got, want, sz));
				}
				free(want), free(got);
			}
			free((void *)m.data);
		}
}

/* ---- matmul ---- */

struct mm_dev {
	struct pg_matrix w;	/* data: the backend's copy */
	float *bias;		/* (n_rows) or NULL */
};

static void run_matmul(int t, const struct mm_dev *d, const float *x, int n,
		       float *y)
{
	struct pg_backend *be = be_of(t);
	size_t xb = (size_t)n * (size_t)d->w.n_cols * 4;
	size_t yb = (size_t)n * (size_t)d->w.n_rows * 4;
	float *d_x = dput(be, x, xb), *d_y = dput(be, NULL, yb);

	be->ops->matmul(be, &d->w, d_x, n, d->bias, d_y);
	dget(be, y, d_y, yb);
	dfree(be, d_x);
	dfree(be, d_y);
}

static struct mm_dev mm_upload(int t, const struct pg_matrix *w,
			       const float *bias)
{
	struct pg_backend *be = be_of(t);
	struct mm_dev d = { .w = *w };

	d.w.data = dput(be, w->data, matrix_bytes(w));
	if (bias)
		d.bias = dput(be, bias, (size_t)w->n_rows * 4);
	return d;
}

static void mm_free(int t, struct mm_dev *d)
{
	dfree(be_of(t), (void *)d->w.data);
	if (d->bias)
		dfree(be_of(t), d->bias);
}

/* One weight matrix against every n of ns on every target. */
static void check_matmul_case(enum pg_dtype type, int64_t rows, int64_t cols,
			      const int *ns, int n_ns, int with_bias)
{
	struct pg_matrix w = make_matrix(type, rows, cols);
	float *bias = NULL;
	float *x[16], *want[16];
	struct mm_dev d;

	if (with_bias) {
		bias = xmalloc((size_t)rows * 4);
		fill(bias, (size_t)rows, 1.0f);
	}
	d = mm_upload(-1, &w, bias);
	for (int j = 0; j < n_ns; j++) {
		x[j] = xmalloc((size_t)ns[j] * (size_t)cols * 4);
		want[j] = xmalloc((size_t)ns[j] * (size_t)rows * 4);
		fill(x[j], (size_t)ns[j] * (size_t)cols, 1.0f);
		run_matmul(-1, &d, x[j], ns[j], want[j]);
	}
	mm_free(-1, &d);
	for (int t = 0; t < n_op_targets; t++) {
		d = mm_upload(t, &w, bias);
		for (int j = 0; j < n_ns; j++) {
			size_t ny = (size_t)ns[j] * (size_t)rows;
			float *y = xmalloc(ny * 4);
			int decode = ns[j] <= 8;
			char fam[64];

			snprintf(fam, sizeof(fam), "matmul %s %s",
				 pg_dtype_name(type),
				 decode ? "n=1..8" : "n>=16");
			snprintf(current, sizeof(current), "%lldx%lld n=%d%s",
				 (long long)rows, (long long)cols, ns[j],
				 bias ? " +bias" : "");
			run_matmul(t, &d, x[j], ns[j], y);
			record(family(fam, is_quant(type) ? 2e-5 : 1e-9,
				      is_quant(type) ? (decode ? 2e-5 : 1e-4) :
				      decode ? 1e-9 : 1e-5),
			       t, nmse(y, want[j], ny));
			free(y);
		}
		mm_free(t, &d);
	}
	for (int j = 0; j < n_ns; j++)
		free(x[j]), free(want[j]);
	free(bias);
	free((void *)w.data);
}

/*
 * Decode sizes n = 1 .. 8 and prefill sizes 16 .. 512 on shapes whose
 * rows and blocks are not multiples of any tile (the K-quants' columns
 * rounded up to 256: 1280 and 256, 1 and 5 super-blocks, not a multiple
 * of the 4 a warp takes at once); 4096-wide shapes (the Llama-3-8B width)
 * only where a GPU makes them worth the reference's time.
 */
static void check_matmul(int large)
{
	static const int dec[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	static const int pre[] = { 16, 33, 64, 128, 512 };
	static const int big_dec[] = { 1, 8 }, big_pre[] = { 64, 512 };
	static const int64_t dshapes[][2] = {
		{ 512, 4096 }, { 129, 1056 }, { 33, 96 }, { 1000, 64 },
	};
	static const int64_t pshapes[][2] = { { 160, 512 }, { 67, 1056 } };

	for (size_t k = 0; k < N_WTYPES; k++) {
		for (size_t s = 0; s < 4; s++)
			check_matmul_case(wtypes[k], dshapes[s][0],
					  fit_cols(wtypes[k], dshapes[s][1]),
					  dec, 8, (int)s % 2);
		for (size_t s = 0; s < 2; s++)
			check_matmul_case(wtypes[k], pshapes[s][0],
					  fit_cols(wtypes[k], pshapes[s][1]),
					  pre, 5, (int)s % 2);
		if (large && wtypes[k] != PG_F32) {
			check_matmul_case(wtypes[k], 4096, 4096, big_dec, 2, 0);
			check_matmul_case(wtypes[k], 1024, 4096, big_pre, 2, 1);
		}
	}
}

/* ---- rmsnorm, silu_mul, add ---- */

static void run_rmsnorm(int t, const float *x, const float *w, int n,
			int dim, int in_place, float *out)
{
	struct pg_backend *be = be_of(t);
	size_t xb = (size_t)n * (size_t)dim * 4;
	float *d_x = dput(be, x, xb), *d_w = dput(be, w, (size_t)dim * 4);
	float *d_o = in_place ? d_x : dput(be, NULL, xb);

	be->ops->rmsnorm(be, d_x, d_w, n, dim, 1e-5f, d_o);
	dget(be, out, d_o, xb);
	if (!in_place)
		dfree(be, d_o);
	dfree(be, d_x);
	dfree(be, d_w);
}

static void check_rmsnorm(void)
{
	static const int shapes[][2] = { { 1, 4096 }, { 8, 4096 }, { 7, 100 },
					 { 64, 576 }, { 512, 4096 }, { 3, 5 } };

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int n = shapes[s][0], dim = shapes[s][1];
		size_t sz = (size_t)n * (size_t)dim;
		float *x = xmalloc(sz * 4), *w = xmalloc((size_t)dim * 4);
		float *want = xmalloc(sz * 4), *got = xmalloc(sz * 4);

		fill(x, sz, 4.0f);
		fill(w, (size_t)dim, 1.0f);
		snprintf(current, sizeof(current), "n=%d dim=%d", n, dim);
		run_rmsnorm(-1, x, w, n, dim, 0, want);
		for (int t = 0; t < n_op_targets; t++)
			for (int ip = 0; ip < 2; ip++) {
				run_rmsnorm(t, x, w, n, dim, ip, got);
				record(family("rmsnorm", 1e-10, 1e-10), t,
				       nmse(got, want, sz));
			}
		free(x), free(w), free(want), free(got);
	}
}

enum { ELT_SILU_MUL, ELT_ADD, ELT_GELU_MUL, ELT_SCALE, ELT_SOFTCAP, ELT_N };

static const char *const elt_names[ELT_N] = {
	"silu_mul", "add", "gelu_mul", "scale", "softcap",
};

/*
 * Element-wise op `which` of n values, in place on a copy of g (u: the
 * second operand of silu_mul, gelu_mul and add).  A backend without the
 * op (an optional one) fails the comparison.
 */
static int run_eltwise(int t, int which, const float *g, const float *u,
		       int64_t n, float *out)
{
	struct pg_backend *be = be_of(t);
	const struct pg_backend_ops *o = be->ops;
	size_t b = (size_t)n * 4;
	float *d_g = dput(be, g, b), *d_u = dput(be, u, b);
	int ok = 1;

	switch (which) {
	case ELT_SILU_MUL: o->silu_mul(be, d_g, d_u, n); break;
	case ELT_ADD: o->add(be, d_g, d_u, n); break;
	case ELT_GELU_MUL:
		if ((ok = o->gelu_mul != NULL))
			o->gelu_mul(be, d_g, d_u, n);
		break;
	case ELT_SCALE:	/* Gemma's sqrt(n_embd) */
		if ((ok = o->scale != NULL))
			o->scale(be, d_g, 45.254833995939f, n);
		break;
	default:	/* small enough to bend most values */
		if ((ok = o->softcap != NULL))
			o->softcap(be, d_g, 3.0f, n);
		break;
	}
	dget(be, out, d_g, b);
	dfree(be, d_g);
	dfree(be, d_u);
	return ok;
}

static void check_eltwise(void)
{
	static const int64_t sizes[] = { 1, 7, 4096, 14336 * 8, 1000003 };
	static const double bound[ELT_N][2] = {
		{ 1e-10, 1e-9 }, { 0, 0 }, { 0, 1e-8 }, { 0, 0 },
		{ 1e-10, 1e-9 },
	};

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = (size_t)sizes[s];
		float *g = xmalloc(n * 4), *u = xmalloc(n * 4);
		float *want = xmalloc(n * 4), *got = xmalloc(n * 4);

		fill(g, n, 8.0f);
		fill(u, n, 1.0f);
		snprintf(current, sizeof(current), "n=%zu", n);
		for (int which = 0; which < ELT_N; which++) {
			struct family *f = family(elt_names[which],
						  bound[which][0],
						  bound[which][1]);

			if (!run_eltwise(-1, which, g, u, (int64_t)n, want))
				die("the reference has no %s", elt_names[which]);
			for (int t = 0; t < n_op_targets; t++)
				record(f, t, run_eltwise(t, which, g, u,
							 (int64_t)n, got) ?
				       nmse(got, want, n) : NAN);
		}
		free(g), free(u), free(want), free(got);
	}
}

/*
 * sum_parts of n_parts parts into a fresh array, or (in_place) into part
 * 0 itself; NULL op: the comparison fails.
 */
static int run_sum_parts(int t, const float *parts, int n_parts, int64_t n,
			 int in_place, float *out)
{
	struct pg_backend *be = be_of(t);
	size_t b = (size_t)n * 4;
	float *d_p = dput(be, parts, b * (size_t)n_parts);
	float *d_o = in_place ? d_p : dput(be, NULL, b);
	const float *ptrs[16];

	for (int p = 0; p < n_parts; p++)
		ptrs[p] = d_p + (size_t)p * (size_t)n;
	if (!be->ops->sum_parts) {
		memset(out, 0, b);
		dfree(be, d_p);
		if (!in_place)
			dfree(be, d_o);
		return 0;
	}
	be->ops->sum_parts(be, d_o, ptrs, n_parts, n);
	dget(be, out, d_o, b);
	dfree(be, d_p);
	if (!in_place)
		dfree(be, d_o);
	return 1;
}

static void check_sum_parts(void)
{
	static const int parts[] = { 1, 2, 3, 9 };
	static const int64_t sizes[] = { 5, 4096, 1000003 };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++)
			for (int ip = 0; ip < 2; ip++) {
				size_t n = (size_t)sizes[s], np = (size_t)parts[k];
				float *p = xmalloc(n * np * 4);
				float *want = xmalloc(n * 4), *got = xmalloc(n * 4);

				/* magnitudes apart, so the order shows */
				for (size_t j = 0; j < np; j++)
					fill(p + j * n, n, j % 2 ? 1e-3f : 1e3f);
				snprintf(current, sizeof(current),
					 "n=%zu parts=%zu%s", n, np,
					 ip ? " in place" : "");
				if (!run_sum_parts(-1, p, (int)np, (int64_t)n, ip,
						   want))
					die("the reference has no sum_parts");
				for (int t = 0; t < n_op_targets; t++)
					record(family("sum_parts", 0, 0), t,
					       run_sum_parts(t, p, (int)np,
							     (int64_t)n, ip, got) ?
					       nmse(got, want, n) : NAN);
				free(p), free(want), free(got);
			}
}

/* ---- rope ---- */

struct rope_case {
	int n, n_heads, head_dim, n_rot;
	float base;
};

static void run_rope(int t, const struct rope_case *c, const float *x,
		     const int32_t *pos, enum pg_rope_mode mode, float *out)
{
	struct pg_backend *be = be_of(t);
	size_t b = (size_t)c->n * c->n_heads * c->head_dim * 4;
	float *d_x = dput(be, x, b);

	be->ops->rope(be, d_x, c->n, c->n_heads, c->head_dim, c->n_rot, pos,
		      c->base, mode);
	dget(be, out, d_x, b);
	dfree(be, d_x);
}

static void check_rope(void)
{
	static const struct rope_case cases[] = {
		{ 1, 32, 128, 128, 500000.0f }, { 8, 8, 128, 128, 10000.0f },
		{ 77, 9, 64, 64, 10000.0f }, { 33, 4, 64, 32, 1000000.0f },
		{ 512, 8, 128, 128, 500000.0f }, { 5, 2, 256, 160, 10000.0f },
	};
	int32_t pos[512];

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		for (int mode = 0; mode <= 2; mode += 2) {
			const struct rope_case *rc = &cases[c];
			size_t sz = (size_t)rc->n * rc->n_heads * rc->head_dim;
			float *x = xmalloc(sz * 4), *want = xmalloc(sz * 4);
			float *got = xmalloc(sz * 4);

			fill(x, sz, 1.0f);
			/* a prompt's run of positions, or a decode batch's */
			for (int i = 0; i < rc->n; i++)
				pos[i] = c % 2 ? (int32_t)(urand() % 8192) :
					 (int32_t)(c * 700 + (size_t)i);
			snprintf(current, sizeof(current),
				 "n=%d heads=%d hd=%d n_rot=%d base=%g", rc->n,
				 rc->n_heads, rc->head_dim, rc->n_rot, rc->base);
			run_rope(-1, rc, x, pos, (enum pg_rope_mode)mode, want);
			for (int t = 0; t < n_op_targets; t++) {
				run_rope(t, rc, x, pos, (enum pg_rope_mode)mode,
					 got);
				record(family(mode ? "rope NEOX" : "rope NORM",
					      1e-8, 1e-8), t,
				       nmse(got, want, sz));
			}
			free(x), free(want), free(got);
		}
}

/* ---- kv_write and attention over paged KV ---- */

/*
 * One attention case.  The store holds n_kv_heads KV heads, the first
 * being kv_head0 of the model; the call computes n_heads query heads from
 * head0 (TP ranks: see pg_attn_heads); n_heads = 0 means all the store's
 * (n_kv_heads * group, from 0).  cp = 2: two stores, one per CP rank.
 */
struct attn_case {
	const char *kind;
	enum pg_dtype type;
	int page_tokens, head_dim, n_kv_heads, group;
	int n_heads, head0, kv_head0;
	int cp;
	int n_seqs;
	int n_ctx[MAX_SEQS], n_rows[MAX_SEQS];
	int window;		/* pg_attn_heads.window, 0: none */
	float softcap;		/* pg_attn_heads.softcap, 0: none */
};

/* The host side of a case: K, V, Q, page tables, slots per CP rank. */
struct attn_data {
	const struct attn_case *c;
	struct pg_kv_layout kv;		/* base: NULL (per target) */
	int n_pages;			/* pages of each store */
	int total_ctx, rows, n_heads, head0;
	float *k, *v;			/* (total_ctx, n_kv_heads * head_dim) */
	float *q;			/* (rows, n_heads * head_dim) */
	int32_t *pages[MAX_SEQS];	/* page tables */
	int32_t *slots[2];		/* (total_ctx) per CP rank, -1: not held */
	struct pg_attn_seq seqs[MAX_SEQS];
	uint8_t *blank;			/* a store of NaN, never written */
	size_t store_bytes;
	float scale;
};

enum { ATTN_BLOCK = 1, ATTN_N_BLOCKS = 2 };

static void shuffle(int32_t *a, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(urand() % (uint32_t)(i + 1));
		int32_t s = a[i];

		a[i] = a[j];
		a[j] = s;
	}
}

/* Page tables over a shuffled pool with spare pages: never contiguous. */
static void attn_pages(struct attn_data *a)
{
	const struct attn_case *c = a->c;
	int span = c->page_tokens * c->cp, total = 0, next = 0;
	int32_t *pool;

	for (int s = 0; s < c->n_seqs; s++)
		total += (c->n_ctx[s] + span - 1) / span;
	a->n_pages = total + 5;
	pool = xmalloc((size_t)a->n_pages * sizeof(int32_t));
	for (int i = 0; i < a->n_pages; i++)
		pool[i] = i;
	shuffle(pool, a->n_pages);
	for (int s = 0; s < c->n_seqs; s++) {
		int np = (c->n_ctx[s] + span - 1) / span;

		a->pages[s] = xmalloc((size_t)np * sizeof(int32_t));
		for (int p = 0; p < np; p++)
			a->pages[s][p] = pool[next++];
	}
	free(pool);
}

/*
 * Each position's slot in rank r's store (CP: pages hold cp runs).  With a
 * window, positions before the first row's window are seen by no row:
 * they get no slot, so their K and V stay NaN and a kernel that reads
 * them shows.
 */
static void attn_slots(struct attn_data *a)
{
	const struct attn_case *c = a->c;
	int pt = c->page_tokens, span = pt * c->cp, i = 0;

	for (int r = 0; r < c->cp; r++)
		a->slots[r] = xmalloc((size_t)a->total_ctx * sizeof(int32_t));
	for (int s = 0; s < c->n_seqs; s++) {
		int n_keys0 = c->n_ctx[s] - c->n_rows[s] + 1;
		int lo = c->window > 0 && n_keys0 > c->window ?
			 n_keys0 - c->window : 0;

		for (int p = 0; p < c->n_ctx[s]; p++, i++)
			for (int r = 0; r < c->cp; r++) {
				int off = p % span;

				a->slots[r][i] = off / pt != r || p < lo ? -1 :
					a->pages[s][p / span] * pt + off % pt;
			}
	}
}

static void attn_data_make(const struct attn_case *c, struct attn_data *a)
{
	size_t eb = pg_dtype_block_bytes(c->type), kvd;

	memset(a, 0, sizeof(*a));
	a->c = c;
	a->n_heads = c->n_heads ? c->n_heads : c->n_kv_heads * c->group;
	a->head0 = c->head0;
	for (int s = 0; s < c->n_seqs; s++) {
		a->seqs[s] = (struct pg_attn_seq){ .n_ctx = c->n_ctx[s],
			.first_row = a->rows, .n_rows = c->n_rows[s] };
		a->total_ctx += c->n_ctx[s];
		a->rows += c->n_rows[s];
	}
	attn_pages(a);
	for (int s = 0; s < c->n_seqs; s++)
		a->seqs[s].pages = a->pages[s];
	attn_slots(a);
	a->kv = (struct pg_kv_layout){ .page_tokens = c->page_tokens,
		.n_blocks = ATTN_N_BLOCKS, .n_kv_heads = c->n_kv_heads,
		.head_dim = c->head_dim, .type = c->type, .cp_size = c->cp };
	a->kv.page_bytes = (size_t)ATTN_N_BLOCKS * 2 * c->n_kv_heads *
			   c->page_tokens * c->head_dim * eb;
	a->store_bytes = a->kv.page_bytes * (size_t)a->n_pages;
	a->blank = xmalloc(a->store_bytes);
	memset(a->blank, 0xff, a->store_bytes);		/* NaN in all types */
	kvd = (size_t)c->n_kv_heads * c->head_dim;
	a->k = xmalloc((size_t)a->total_ctx * kvd * 4);
	a->v = xmalloc((size_t)a->total_ctx * kvd * 4);
	a->q = xmalloc((size_t)a->rows * a->n_heads * c->head_dim * 4);
	fill(a->k, (size_t)a->total_ctx * kvd, 3.0f);	/* peaky softmax */
	fill(a->v, (size_t)a->total_ctx * kvd, 1.0f);
	fill(a->q, (size_t)a->rows * a->n_heads * c->head_dim, 1.0f);
	a->scale = 1.0f / sqrtf((float)c->head_dim);
}

static void attn_data_free(struct attn_data *a)
{
	for (int s = 0; s < a->c->n_seqs; s++)
		free(a->pages[s]);
	for (int r = 0; r < a->c->cp; r++)
		free(a->slots[r]);
	free(a->k), free(a->v), free(a->q), free(a->blank);
}

/* What one backend produced for a case (host memory). */
struct attn_result {
	uint8_t *store[2];	/* each rank's store after kv_write */
	float *out[2], *lse[2];	/* each rank's attention */
	float *merged;		/* cp = 2: attn_merge of the two ranks */
};

static size_t attn_out_floats(const struct attn_data *a)
{
	return (size_t)a->rows * a->n_heads * a->c->head_dim;
}

/*
 * Run a case on a backend: per rank, write K and V into a blank store and
 * attend (with lse when asked; with cp = 2 always, into the part layout
 * attn_merge reads), then merge.
 */
static void run_attention(int t, const struct attn_data *a, int with_lse,
			  struct attn_result *res)
{
	struct pg_backend *be = be_of(t);
	const struct attn_case *c = a->c;
	size_t kvb = (size_t)a->total_ctx * c->n_kv_heads * c->head_dim * 4;
	size_t nout = attn_out_floats(a), nlse = (size_t)a->rows * a->n_heads;
	size_t part = nout + nlse;
	float *d_k = dput(be, a->k, kvb), *d_v = dput(be, a->v, kvb);
	float *d_q = dput(be, a->q, nout * 4);
	float *d_parts = dput(be, NULL, part * 4 * (size_t)c->cp);
	struct pg_attn_heads hs = { .n_heads = a->n_heads, .head0 = a->head0,
				    .group = c->group,
				    .kv_head0 = c->kv_head0,
				    .window = c->window,
				    .softcap = c->softcap };

	for (int r = 0; r < c->cp; r++) {
		struct pg_kv_layout kv = a->kv;
		float *d_out = d_parts + part * (size_t)r;
		int lse = with_lse || c->cp > 1;

		kv.cp_rank = r;
		kv.base = dput(be, a->blank, a->store_bytes);
		be->ops->kv_write(be, &kv, ATTN_BLOCK, d_k, d_v, a->total_ctx,
				  a->slots[r]);
		be->ops->attention(be, &kv, ATTN_BLOCK, d_q, &hs, a->seqs,
				   c->n_seqs, a->scale, d_out,
				   lse ? d_out + nout : NULL);
		res->store[r] = xmalloc(a->store_bytes);
		res->out[r] = xmalloc(nout * 4);
		res->lse[r] = lse ? xmalloc(nlse * 4) : NULL;
		dget(be, res->store[r], kv.base, a->store_bytes);
		dget(be, res->out[r], d_out, nout * 4);
		if (lse)
			dget(be, res->lse[r], d_out + nout, nlse * 4);
		dfree(be, kv.base);
	}
	res->merged = NULL;
	if (c->cp > 1) {
		float *d_m = dput(be, NULL, nout * 4);

		be->ops->attn_merge(be, d_parts, part, c->cp, a->rows,
				    a->n_heads, c->head_dim, d_m);
		res->merged = xmalloc(nout * 4);
		dget(be, res->merged, d_m, nout * 4);
		dfree(be, d_m);
	}
	dfree(be, d_k), dfree(be, d_v), dfree(be, d_q), dfree(be, d_parts);
}

static void attn_result_free(const struct attn_data *a, struct attn_result *r)
{
	for (int i = 0; i < a->c->cp; i++)
		free(r->store[i]), free(r->out[i]), free(r->lse[i]);
	free(r->merged);
}

static double bytes_differing(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t d = 0;

	for (size_t i = 0; i < n; i++)
		d += a[i] != b[i];
	return (double)d;
}

static void attn_compare(int t, const struct attn_data *a,
			 const struct attn_result *want,
			 const struct attn_result *got, const float *full)
{
	const struct attn_case *c = a->c;
	size_t nout = attn_out_floats(a), nlse = (size_t)a->rows * a->n_heads;
	char fam[64];

	for (int r = 0; r < c->cp; r++) {
		snprintf(fam, sizeof(fam), "kv_write %s", pg_dtype_name(c->type));
		record(family(fam, 0, 0), t, bytes_differing(got->store[r],
			       want->store[r], a->store_bytes));
		snprintf(fam, sizeof(fam), "attention %s %s", c->kind,
			 pg_dtype_name(c->type));
		record(family(fam, 1e-8, 1e-7), t,
		       nmse(got->out[r], want->out[r], nout));
		if (want->lse[r]) {
			snprintf(fam, sizeof(fam), "attention lse %s", c->kind);
			record(family(fam, 1e-10, 1e-9), t,
			       nmse_lse(got->lse[r], want->lse[r], nlse));
		}
	}
	if (got->merged) {
		record(family("attn_merge (cp2 ranks)", 1e-10, 1e-9), t,
		       nmse(got->merged, want->merged, nout));
		/* the merged ranks equal attention over one whole store */
		record(family("attn_merge vs one store", 1e-8, 1e-7), t,
		       nmse(got->merged, full, nout));
	}
}

static void check_attn_case(const struct attn_case *c, int with_lse)
{
	struct attn_data a;
	struct attn_result want, got, whole;
	float *full = NULL;

	attn_data_make(c, &a);
	snprintf(current, sizeof(current),
		 "%s pt=%d hd=%d kv=%d group=%d heads=%d@%d cp=%d seqs=%d "
		 "(ctx %d rows %d, ...) window=%d softcap=%g",
		 pg_dtype_name(c->type), c->page_tokens, c->head_dim,
		 c->n_kv_heads, c->group, a.n_heads, a.head0, c->cp, c->n_seqs,
		 c->n_ctx[0], c->n_rows[0], c->window, (double)c->softcap);
	run_attention(-1, &a, with_lse, &want);
	if (c->cp > 1) {
		/* the same keys in one store: what the ranks add up to */
		struct attn_case one = *c;
		struct attn_data a1;

		one.cp = 1;
		attn_data_make(&one, &a1);
		memcpy(a1.k, a.k, (size_t)a.total_ctx * c->n_kv_heads *
		       c->head_dim * 4);
		memcpy(a1.v, a.v, (size_t)a.total_ctx * c->n_kv_heads *
		       c->head_dim * 4);
		memcpy(a1.q, a.q, attn_out_floats(&a) * 4);
		run_attention(-1, &a1, 0, &whole);
		full = whole.out[0];
		whole.out[0] = NULL;
		attn_result_free(&a1, &whole);
		attn_data_free(&a1);
	}
	for (int t = 0; t < n_op_targets; t++) {
		run_attention(t, &a, with_lse, &got);
		attn_compare(t, &a, &want, &got, full);
		attn_result_free(&a, &got);
	}
	attn_result_free(&a, &want);
	attn_data_free(&a);
	free(full);
}

/*
 * decode: one row per sequence; mixed: decode rows, a fresh prompt and a
 * prompt chunk after earlier context in one batch; prefill: whole prompts;
 * 4k: contexts long enough for split-KV; TP: a rank's heads that start
 * inside a GQA group; cp2: two CP ranks' stores, merged.
 */
static const struct attn_case attn_cases[] = {
	{ "decode", PG_F16, 16, 128, 8, 4, 0, 0, 0, 1, 5,
	  { 1, 17, 100, 333, 1000 }, { 1, 1, 1, 1, 1 }, 0, 0.0f },
	{ "decode", PG_BF16, 16, 64, 3, 3, 0, 0, 0, 1, 4,
	  { 5, 64, 65, 200 }, { 1, 1, 1, 1 }, 0, 0.0f },
	{ "decode", PG_F32, 16, 128, 4, 1, 0, 0, 0, 1, 2,
	  { 31, 257 }, { 1, 1 }, 0, 0.0f },
	{ "decode", PG_F16, 32, 64, 1, 8, 0, 0, 0, 1, 3,
	  { 48, 500, 2 }, { 1, 1, 1 }, 0, 0.0f },
	{ "TP heads", PG_BF16, 16, 128, 1, 3, 2, 1, 0, 1, 2,
	  { 90, 7 }, { 1, 7 }, 0, 0.0f },
	{ "TP heads", PG_F16, 16, 64, 1, 4, 4, 4, 1, 1, 2,
	  { 150, 20 }, { 1, 4 }, 0, 0.0f },
	{ "mixed", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 4,
	  { 40, 17, 300, 9 }, { 1, 17, 33, 1 }, 0, 0.0f },
	{ "mixed", PG_F32, 16, 64, 2, 3, 0, 0, 0, 1, 3,
	  { 100, 1, 64 }, { 7, 1, 64 }, 0, 0.0f },
	{ "mixed", PG_BF16, 16, 128, 1, 8, 0, 0, 0, 1, 3,
	  { 70, 200, 3 }, { 1, 50, 3 }, 0, 0.0f },
	{ "prefill", PG_BF16, 16, 128, 2, 4, 0, 0, 0, 1, 2,
	  { 256, 100 }, { 256, 100 }, 0, 0.0f },
	{ "prefill", PG_F16, 16, 64, 4, 1, 0, 0, 0, 1, 2,
	  { 200, 130 }, { 200, 64 }, 0, 0.0f },
	{ "prefill", PG_F32, 16, 128, 1, 8, 0, 0, 0, 1, 1,
	  { 129 }, { 129 }, 0, 0.0f },
	{ "4k", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 4,
	  { 4096, 4000, 2049, 1 }, { 1, 1, 1, 1 }, 0, 0.0f },
	{ "4k", PG_BF16, 16, 64, 1, 8, 0, 0, 0, 1, 2,
	  { 4096, 3001 }, { 1, 1 }, 0, 0.0f },
	{ "4k", PG_F16, 16, 128, 1, 4, 0, 0, 0, 1, 1,
	  { 4096 }, { 16 }, 0, 0.0f },
	{ "4k", PG_F32, 16, 64, 2, 3, 0, 0, 0, 1, 1,
	  { 4095 }, { 1 }, 0, 0.0f },
	{ "cp2", PG_F16, 16, 128, 2, 4, 0, 0, 0, 2, 5,
	  { 1, 16, 17, 40, 1000 }, { 1, 1, 1, 8, 1 }, 0, 0.0f },
	{ "cp2", PG_BF16, 16, 64, 1, 8, 0, 0, 0, 2, 2,
	  { 4096, 300 }, { 1, 33 }, 0, 0.0f },
	/*
	 * Sliding windows (40, 50, 64, 100, 512: not multiples of a page)
	 * shorter than most contexts, some contexts inside the window;
	 * soft caps small enough to reshape every softmax.
	 */
	{ "window decode", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 5,
	  { 1, 17, 40, 333, 1000 }, { 1, 1, 1, 1, 1 }, 40, 0.0f },
	{ "window decode", PG_BF16, 32, 64, 3, 3, 0, 0, 0, 1, 3,
	  { 65, 200, 41 }, { 1, 1, 1 }, 40, 0.0f },
	{ "window prefill", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 2,
	  { 256, 100 }, { 256, 100 }, 50, 0.0f },
	{ "window prefill", PG_F32, 16, 64, 1, 8, 0, 0, 0, 1, 1,
	  { 300 }, { 200 }, 64, 0.0f },
	{ "window mixed", PG_BF16, 16, 128, 2, 3, 0, 0, 0, 1, 4,
	  { 300, 70, 9, 150 }, { 33, 1, 9, 1 }, 64, 0.0f },
	{ "window 4k", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 3,
	  { 4096, 3001, 200 }, { 1, 1, 1 }, 512, 0.0f },
	{ "window 4k", PG_BF16, 16, 64, 1, 8, 0, 0, 0, 1, 1,
	  { 4000 }, { 16 }, 1000, 0.0f },
	{ "window cp2", PG_F16, 16, 128, 2, 4, 0, 0, 0, 2, 3,
	  { 1000, 40, 600 }, { 1, 8, 1 }, 100, 0.0f },
	{ "softcap", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 3,
	  { 300, 17, 1 }, { 1, 1, 1 }, 0, 1.5f },
	{ "softcap", PG_BF16, 16, 64, 2, 4, 0, 0, 0, 1, 2,
	  { 200, 64 }, { 200, 33 }, 0, 2.0f },
	{ "window softcap", PG_F16, 16, 128, 2, 4, 0, 0, 0, 1, 3,
	  { 500, 128, 3000 }, { 100, 1, 1 }, 33, 2.0f },
	{ "window softcap", PG_F32, 16, 64, 1, 4, 0, 0, 0, 2, 2,
	  { 700, 90 }, { 1, 90 }, 77, 1.5f },
};

static void check_attention(void)
{
	for (size_t i = 0; i < sizeof(attn_cases) / sizeof(attn_cases[0]); i++)
		check_attn_case(&attn_cases[i], (int)i % 2);
}

/* attn_merge alone: 3 parts, random lse, some parts (and rows) empty. */
static void run_merge(int t, const float *parts, size_t part, int n_parts,
		      int rows, int nh, int hd, float *out)
{
	struct pg_backend *be = be_of(t);
	size_t ob = (size_t)rows * nh * hd * 4;
	float *d_p = dput(be, parts, part * (size_t)n_parts * 4);
	float *d_o = dput(be, NULL, ob);

	be->ops->attn_merge(be, d_p, part, n_parts, rows, nh, hd, d_o);
	dget(be, out, d_o, ob);
	dfree(be, d_p);
	dfree(be, d_o);
}

static void check_merge(void)
{
	enum { PARTS = 3, ROWS = 9, NH = 8, HD = 128 };
	size_t nout = (size_t)ROWS * NH * HD, nrh = (size_t)ROWS * NH;
	size_t part = nout + nrh + 64;	/* parts need not be packed */
	float *parts = xmalloc(part * PARTS * 4);
	float *want = xmalloc(nout * 4), *got = xmalloc(nout * 4);

	fill(parts, part * PARTS, 1.0f);
	for (int p = 0; p < PARTS; p++) {
		float *lse = parts + part * (size_t)p + nout;

		for (size_t i = 0; i < nrh; i++)
			lse[i] = i % 7 == (size_t)p || i < (size_t)NH ?
				 -INFINITY : frand() * 20.0f;
		for (size_t i = 0; i < nrh; i++)
			if (isinf(lse[i]))
				memset(parts + part * (size_t)p + i * HD, 0,
				       HD * 4);
	}
	snprintf(current, sizeof(current), "%d parts, %d rows, %d heads, "
		 "rows with no keys", PARTS, ROWS, NH);
	run_merge(-1, parts, part, PARTS, ROWS, NH, HD, want);
	for (int t = 0; t < n_op_targets; t++) {
		run_merge(t, parts, part, PARTS, ROWS, NH, HD, got);
		record(family("attn_merge", 1e-10, 1e-9), t,
		       nmse(got, want, nout));
	}
	free(parts), free(want), free(got);
}

/* ---- decode steps, replayed: step_begin / step_end ---- */

/*
 * Decode steps as the forward pass makes them: each sequence gets one new
 * token per step, and a step is get_rows (its query from an embedding),
 * rope, kv_write of the new K and V, and attention over the context so
 * far.  From step to step only the ids, positions, slots and n_ctx change
 * (and contexts cross page boundaries), so a backend with graphs records
 * the step once and replays it; every step must match the reference.
 */
#define REPLAY_STEPS 6
#define REPLAY_SEQS 5

struct replay {
	struct pg_kv_layout kv;		/* base: NULL (per backend) */
	int group, n_heads, kvd;
	int window;			/* the steps' sliding window, or 0 */
	size_t store_bytes;
	uint8_t *blank;			/* NaN store */
	struct pg_matrix embd;		/* (300, n_heads * head_dim) BF16 */
	int base[REPLAY_SEQS];		/* context before the first step */
	int32_t *pages[REPLAY_SEQS];	/* cover base + REPLAY_STEPS */
	int total0;			/* sum of base */
	float *k0, *v0;			/* (total0, kvd): the context */
	int32_t *slots0;		/* (total0) */
	/* per step: */
	int32_t ids[REPLAY_STEPS][REPLAY_SEQS], pos[REPLAY_STEPS][REPLAY_SEQS];
	int32_t slots[REPLAY_STEPS][REPLAY_SEQS];
	float *k[REPLAY_STEPS], *v[REPLAY_STEPS];	/* (seqs, kvd) */
	float *want[REPLAY_STEPS];	/* the reference's output */
};

static int32_t replay_slot(const struct replay *r, int s, int p)
{
	int pt = r->kv.page_tokens;

	return r->pages[s][p / pt] * pt + p % pt;
}

static void replay_make(struct replay *r)
{
	/* 253: the context crosses 256 mid-replay (a new grid bucket) */
	static const int base[REPLAY_SEQS] = { 30, 253, 1, 77, 14 };
	int pt = 16, hd = 128, nkv = 2, n_pages = 0, next = 0, i = 0;
	int32_t *pool;

	memset(r, 0, sizeof(*r));
	r->kv = (struct pg_kv_layout){ .page_tokens = pt,
		.n_blocks = ATTN_N_BLOCKS, .n_kv_heads = nkv, .head_dim = hd,
		.type = PG_F16, .cp_size = 1 };
	r->group = 3;
	r->n_heads = nkv * r->group;
	r->kvd = nkv * hd;
	for (int s = 0; s < REPLAY_SEQS; s++) {
		r->base[s] = base[s];
		r->total0 += base[s];
		n_pages += (base[s] + REPLAY_STEPS + pt - 1) / pt;
	}
	r->kv.page_bytes = (size_t)ATTN_N_BLOCKS * 2 * nkv * pt * hd * 2;
	r->store_bytes = r->kv.page_bytes * (size_t)(n_pages + 3);
	r->blank = xmalloc(r->store_bytes);
	memset(r->blank, 0xff, r->store_bytes);
	pool = xmalloc((size_t)(n_pages + 3) * sizeof(int32_t));
	for (int p = 0; p < n_pages + 3; p++)
		pool[p] = p;
	shuffle(pool, n_pages + 3);
	for (int s = 0; s < REPLAY_SEQS; s++) {
		int np = (base[s] + REPLAY_STEPS + pt - 1) / pt;

		r->pages[s] = xmalloc((size_t)np * sizeof(int32_t));
		for (int p = 0; p < np; p++)
			r->pages[s][p] = pool[next++];
	}
	free(pool);
	r->embd = make_matrix(PG_BF16, 300, (int64_t)r->n_heads * hd);
	r->k0 = xmalloc((size_t)r->total0 * r->kvd * 4);
	r->v0 = xmalloc((size_t)r->total0 * r->kvd * 4);
	fill(r->k0, (size_t)r->total0 * r->kvd, 3.0f);
	fill(r->v0, (size_t)r->total0 * r->kvd, 1.0f);
	r->slots0 = xmalloc((size_t)r->total0 * sizeof(int32_t));
	for (int s = 0; s < REPLAY_SEQS; s++)
		for (int p = 0; p < base[s]; p++)
			r->slots0[i++] = replay_slot(r, s, p);
	for (int j = 0; j < REPLAY_STEPS; j++) {
		r->k[j] = xmalloc((size_t)REPLAY_SEQS * r->kvd * 4);
		r->v[j] = xmalloc((size_t)REPLAY_SEQS * r->kvd * 4);
		fill(r->k[j], (size_t)REPLAY_SEQS * r->kvd, 3.0f);
		fill(r->v[j], (size_t)REPLAY_SEQS * r->kvd, 1.0f);
		for (int s = 0; s < REPLAY_SEQS; s++) {
			r->ids[j][s] = (int32_t)(urand() % 300);
			r->pos[j][s] = base[s] + j;
			r->slots[j][s] = replay_slot(r, s, base[s] + j);
		}
	}
}

static void replay_free(struct replay *r)
{
	for (int s = 0; s < REPLAY_SEQS; s++)
		free(r->pages[s]);
	for (int j = 0; j < REPLAY_STEPS; j++)
		free(r->k[j]), free(r->v[j]), free(r->want[j]);
	free(r->blank), free((void *)r->embd.data), free(r->k0), free(r->v0);
	free(r->slots0);
}

/* One backend's copies: the embedding, the store, the step's arrays. */
struct replay_dev {
	struct pg_matrix m;
	struct pg_kv_layout kv;
	float *q, *k, *v, *o;
};

static size_t replay_q_floats(const struct replay *r)
{
	return (size_t)REPLAY_SEQS * r->n_heads * r->kv.head_dim;
}

/* Upload, and write the context before the first step (no step open). */
static void replay_setup(struct pg_backend *be, const struct replay *r,
			 struct replay_dev *d)
{
	size_t nk = (size_t)r->total0 * r->kvd * 4;
	float *k0 = dput(be, r->k0, nk), *v0 = dput(be, r->v0, nk);

	d->m = r->embd;
	d->m.data = dput(be, r->embd.data, matrix_bytes(&r->embd));
	d->kv = r->kv;
	d->kv.base = dput(be, r->blank, r->store_bytes);
	be->ops->kv_write(be, &d->kv, ATTN_BLOCK, k0, v0, r->total0,
			  r->slots0);
	d->q = dput(be, NULL, replay_q_floats(r) * 4);
	d->o = dput(be, NULL, replay_q_floats(r) * 4);
	d->k = dput(be, NULL, (size_t)REPLAY_SEQS * r->kvd * 4);
	d->v = dput(be, NULL, (size_t)REPLAY_SEQS * r->kvd * 4);
	dfree(be, k0);
	dfree(be, v0);
}

static void replay_step(struct pg_backend *be, const struct replay *r,
			struct replay_dev *d, int j, float *out)
{
	size_t kb = (size_t)REPLAY_SEQS * r->kvd * 4;
	struct pg_attn_heads hs = { .n_heads = r->n_heads, .group = r->group,
				    .window = r->window };
	struct pg_attn_seq seqs[REPLAY_SEQS];
	int bracket = be->ops->step_begin && be->ops->step_end;
	char err[256];

	for (int s = 0; s < REPLAY_SEQS; s++)
		seqs[s] = (struct pg_attn_seq){ .pages = r->pages[s],
			.n_ctx = r->base[s] + j + 1, .first_row = s,
			.n_rows = 1 };
	dput_to(be, d->k, r->k[j], kb);
	dput_to(be, d->v, r->v[j], kb);
	if (bracket)
		be->ops->step_begin(be);
	be->ops->get_rows(be, &d->m, r->ids[j], REPLAY_SEQS, d->q);
	be->ops->rope(be, d->q, REPLAY_SEQS, r->n_heads, r->kv.head_dim,
		      r->kv.head_dim, r->pos[j], 500000.0f, PG_ROPE_NORM);
	be->ops->kv_write(be, &d->kv, ATTN_BLOCK, d->k, d->v, REPLAY_SEQS,
			  r->slots[j]);
	be->ops->attention(be, &d->kv, ATTN_BLOCK, d->q, &hs, seqs,
			   REPLAY_SEQS, 1.0f / sqrtf((float)r->kv.head_dim),
			   d->o, NULL);
	if (bracket && be->ops->step_end(be, err, sizeof(err)))
		die("%s: %s: step_end: %s", be->ops->name, current, err);
	dget(be, out, d->o, replay_q_floats(r) * 4);
}

static void replay_release(struct pg_backend *be, struct replay_dev *d)
{
	dfree(be, (void *)d->m.data), dfree(be, d->kv.base);
	dfree(be, d->q), dfree(be, d->k), dfree(be, d->v), dfree(be, d->o);
}

/* window > 0: the same steps with a sliding window (its start moves). */
static void check_replay(int window)
{
	struct replay r;
	struct replay_dev d;
	size_t nq;
	float *got;

	replay_make(&r);
	r.window = window;
	nq = replay_q_floats(&r);
	got = xmalloc(nq * 4);
	snprintf(current, sizeof(current), "%d decode steps of %d sequences",
		 REPLAY_STEPS, REPLAY_SEQS);
	replay_setup(ref, &r, &d);
	for (int j = 0; j < REPLAY_STEPS; j++) {
		r.want[j] = xmalloc(nq * 4);
		replay_step(ref, &r, &d, j, r.want[j]);
	}
	replay_release(ref, &d);
	for (int t = 0; t < n_targets; t++) {
		struct pg_backend *be = targets[t].be;

		replay_setup(be, &r, &d);
		for (int j = 0; j < REPLAY_STEPS; j++) {
			snprintf(current, sizeof(current), "decode step %d", j);
			replay_step(be, &r, &d, j, got);
			record(family(window ? "decode steps, window (graph "
				      "replay)" : "decode steps (graph replay)",
				      1e-8, 1e-7), t, nmse(got, r.want[j], nq));
		}
		replay_release(be, &d);
	}
	replay_free(&r);
	free(got);
}

/* ---- targets and the report ---- */

static struct pg_backend *cpu_backend(enum pg_cpu_isa isa)
{
	struct pg_backend *be = pg_cpu_backend_create(0, isa);

	if (!be)
		die("pg_cpu_backend_create(%s): %s", pg_cpu_isa_name(isa),
		    strerror(errno));
	return be;
}

#ifdef HAVE_CUDA
static void add_cuda_target(const char *name, int graphs)
{
	struct target *t = &targets[n_targets];
	char err[512];

	/* the backend reads its graphs switch at creation */
	if (graphs)
		setenv("PAGODA_CUDA_GRAPHS", "1", 1);
	else
		unsetenv("PAGODA_CUDA_GRAPHS");
	t->be = pg_cuda_backend_create(0, err, sizeof(err));
	if (!t->be)
		die("pg_cuda_backend_create(0): %s", err);
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->cuda = 1;
	n_targets++;
}
#endif

/* CUDA device 0, plainly and with graphs; returns 1 when there is one. */
static int open_cuda(void)
{
#ifdef HAVE_CUDA
	struct pg_cuda_device_info info;
	char err[512];

	if (pg_cuda_device_count() <= 0) {
		printf("cuda: no GPU present: the CUDA part is skipped\n");
		return 0;
	}
	if (pg_cuda_device_info(0, &info, err, sizeof(err)) == 0)
		printf("cuda:0: %s, compute capability %d.%d, %d SMs\n",
		       info.name, info.cc_major, info.cc_minor, info.sm_count);
	add_cuda_target("cuda:0", 0);
	n_op_targets = n_targets;
	add_cuda_target("cuda:0 graphs", 1);
	return 1;
#else
	printf("cuda: this build has no CUDA backend: the CUDA part is skipped\n");
	return 0;
#endif
}

static void open_targets(void)
{
	enum pg_cpu_isa best = pg_cpu_isa_best();

	ref = cpu_backend(PG_ISA_SCALAR);
	targets[0].be = cpu_backend(best);
	snprintf(targets[0].name, sizeof(targets[0].name), "cpu %s",
		 pg_cpu_isa_name(best));
	n_targets = n_op_targets = 1;
	printf("reference: cpu scalar, %d threads; target cpu %s, %d threads%s\n",
	       pg_cpu_backend_threads(ref), pg_cpu_isa_name(best),
	       pg_cpu_backend_threads(targets[0].be),
	       best == PG_ISA_SCALAR ? " (no SIMD level on this processor)" : "");
}

static int family_cmp(const void *a, const void *b)
{
	return strcmp(((const struct family *)a)->name,
		      ((const struct family *)b)->name);
}

static void report(void)
{
	qsort(fams, (size_t)n_fams, sizeof(fams[0]), family_cmp);
	printf("\n%-30s", "family: worst NMSE / bound");
	for (int t = 0; t < n_targets; t++)
		printf("  %-22s", targets[t].name);
	printf("\n");
	for (int i = 0; i < n_fams; i++) {
		printf("%-30s", fams[i].name);
		for (int t = 0; t < n_targets; t++) {
			char cell[64];
			double w = fams[i].worst[t];
			double b = fams[i].bound[targets[t].cuda];

			if (!fams[i].ran[t])
				snprintf(cell, sizeof(cell), "-");
			else
				snprintf(cell, sizeof(cell), "%.1e / %.0e %s",
					 w, b, isnan(w) || w > b ? "FAIL" : "ok");
			printf("  %-22s", cell);
		}
		printf("\n");
	}
}

int main(void)
{
	double t0 = pg_now_s();
	int cuda;

	open_targets();
	cuda = open_cuda();
	check_get_rows();
	check_rmsnorm();
	check_eltwise();
	check_sum_parts();
	check_rope();
	check_matmul(cuda);
	check_attention();
	check_merge();
	check_replay(0);
	check_replay(20);
	report();
	for (int t = 0; t < n_targets; t++)
		targets[t].be->ops->destroy(targets[t].be);
	ref->ops->destroy(ref);
	printf("\n%d families, %.1f s\n", n_fams, pg_now_s() - t0);
	if (failures) {
		printf("test_backend_ops: %d comparisons failed\n", failures);
		return 1;
	}
	if (!cuda) {
		printf("test_backend_ops: the CPU SIMD part passed; the CUDA "
		       "part was skipped (no GPU): exit 77\n");
		return 77;
	}
	printf("test_backend_ops: all passed on the CPU SIMD and CUDA backends\n");
	return 0;
}
