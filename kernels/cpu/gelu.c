/*
 * gelu.c - the element-wise ops of the Gemma family: gelu_mul (GeGLU, the
 * gate of the feed-forward block), scale (the embedding scale) and softcap
 * (logit soft-capping).
 *
 * GELU is its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))),
 * in float.  With llama.cpp numerics it is what ggml's CPU build computes:
 * x rounded to F16, GELU of that, rounded to F16 again (ggml reads a table
 * of F16 values indexed by the F16 input), 0 below -10 and x above 10.
 * Long vectors (prompts) are split among threads; one token's vector is
 * done by the caller alone.  No intrinsics: these are a few floats per
 * weight row against the matmuls around them.
 */
#include <math.h>

#include "cpu.h"
#include "cpu_impl.h"

#define PG_GELU_PAR_MIN 32768
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_COEF_A 0.044715f

static inline float gelu(float x)
{
	return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x *
					(1.0f + GELU_COEF_A * x * x)));
}

static inline float gelu_llama(float x)
{
	if (x <= -10.0f)
		return 0.0f;
	if (x >= 10.0f)
		return x;
	return pg_fp16_to_fp32(pg_fp32_to_fp16(
		gelu(pg_fp16_to_fp32(pg_fp32_to_fp16(x)))));
}

enum { OP_GELU_MUL, OP_GELU_MUL_LLAMA, OP_SCALE, OP_SOFTCAP };

struct elt_ctx {
	int op;
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
		for (int64_t i = lo; i < hi; i++)
			x[i] = gelu(x[i]) * c->up[i];
		break;
	case OP_GELU_MUL_LLAMA:
		for (int64_t i = lo; i < hi; i++)
			x[i] = gelu_llama(x[i]) * c->up[i];
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

	pg_split((c->n + 15) / 16, ith, nth, &lo, &hi);
	lo *= 16;
	hi = hi * 16 < c->n ? hi * 16 : c->n;
	if (hi > lo)
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
		.op = pg_cpu(be)->llama ? OP_GELU_MUL_LLAMA : OP_GELU_MUL,
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
