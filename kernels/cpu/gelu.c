/*
 * gelu.c - the element-wise ops of the Gemma family: gelu_mul (GeGLU, the
 * gate of the feed-forward block), scale (the embedding scale) and softcap
 * (logit soft-capping).
 *
 * GELU is its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))),
 * computed as ggml's CPU build computes it, in both numerics: 0 at or below
 * -10, x at or above 10, and between them x rounded to F16, the GELU of
 * that (libm's tanhf) rounded to F16 again, read from a table of 65536
 * floats indexed by x's F16 bits (gelu_table, made once).  The F16
 * steps cost at most 2^-11 of the value, under a tenth of the 8-bit
 * quantisation of ffn_down's input that follows; the table makes the op a
 * load per value (the ISA table's loop gathers 8 at a time) instead of a
 * libm tanhf, and its values are llama.cpp's.  Long vectors (prompts) are
 * split among threads; one token's vector is done by the caller alone.
 */
#include <math.h>
#include <pthread.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"

#define PG_GELU_PAR_MIN 32768
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_COEF_A 0.044715f

static inline float gelu(float x)
{
	return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x *
					(1.0f + GELU_COEF_A * x * x)));
}

static float gelu_tab[65536];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_tab_init(void)
{
	for (uint32_t h = 0; h < 65536; h++)
		gelu_tab[h] = pg_fp16_to_fp32(pg_fp32_to_fp16(
			gelu(pg_fp16_to_fp32((uint16_t)h))));
}

/* GELU of every F16 value, rounded to F16, as floats: made once,
   thread-safe. */
static const float *gelu_table(void)
{
	pthread_once(&gelu_once, gelu_tab_init);
	return gelu_tab;
}

void pg_gelu_mul_ref(int64_t n, float *gate, const float *up,
		     const float *tab)
{
	for (int64_t i = 0; i < n; i++) {
		float x = gate[i];

		x = x <= -10.0f ? 0.0f : x >= 10.0f ? x :
		    tab[pg_fp32_to_fp16(x)];
		gate[i] = x * up[i];
	}
}

enum { OP_GELU_MUL, OP_SCALE, OP_SOFTCAP };

struct elt_ctx {
	int op;
	const struct pg_cpu_kernels *k;
	const float *tab;	/* gelu_mul: gelu_table() */
	float *x;		/* (n): gate, or the values scaled / capped */
	const float *up;	/* (n) gelu_mul */
	float s;		/* scale's factor, softcap's cap */
	int64_t n;
};

static void elt_range(const struct elt_ctx *c, int64_t lo, int64_t hi)
{
	float *x = c->x, s = c->s;

	switch (c->op) {
	case OP_GELU_MUL:
		c->k->gelu_mul(hi - lo, x + lo, c->up + lo, c->tab);
		break;
	case OP_SCALE:
		for (int64_t i = lo; i < hi; i++)
			x[i] *= s;
		break;
	default:
		for (int64_t i = lo; i < hi; i++)
			x[i] = s * tanhf(x[i] / s);
		break;
	}
}

static void elt_worker(void *arg, int ith, int nth)
{
	const struct elt_ctx *c = arg;
	int64_t lo, hi;

	if (pg_split16(c->n, ith, nth, &lo, &hi))
		elt_range(c, lo, hi);
}

static void elt_run(struct pg_backend *be, const struct elt_ctx *c)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);

	if (c->n >= PG_GELU_PAR_MIN && cpu->n_threads > 1)
		pg_pool_run(cpu->pool, elt_worker, (void *)c);
	else
		elt_range(c, 0, c->n);
}

void pg_cpu_gelu_mul(struct pg_backend *be, float *gate, const float *up,
		     int64_t n)
{
	struct elt_ctx c = {
		.op = OP_GELU_MUL, .k = pg_cpu(be)->k, .tab = gelu_table(),
		.x = gate, .up = up, .n = n,
	};

	elt_run(be, &c);
}

void pg_cpu_scale(struct pg_backend *be, float *x, float s, int64_t n)
{
	struct elt_ctx c = { .op = OP_SCALE, .x = x, .s = s, .n = n };

	elt_run(be, &c);
}

void pg_cpu_softcap(struct pg_backend *be, float *x, float cap, int64_t n)
{
	struct elt_ctx c = { .op = OP_SOFTCAP, .x = x, .s = cap, .n = n };

	elt_run(be, &c);
}
