/*
 * rope.c - the rope op: rotary position embedding in place, NORM (adjacent
 * pairs) or NEOX (halves) layout, as llama.cpp computes it.
 *
 * theta_i = pos * freq_base^(-2i / n_rot), built by repeated products of
 * the per-pair factor as llama.cpp does, so that angles round the same.
 * Each output is one product plus the other product rounded, in one fused
 * multiply-add, as llama.cpp's build (FMA on, contraction on) rounds it.
 * The sines and cosines of a token are computed once for all its heads.
 * Dims at or beyond n_rot are left alone.  With frequency factors (Llama
 * 3.1+'s rope_freqs) pair i turns by theta_i / factor_i, the quotient
 * rounded to float before its sine and cosine, as llama.cpp's
 * ggml_rope_cache_init does.  Scalar only: it is cheap.
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

/* Pairs whose sin/cos one pass holds on the stack. */
#define PG_ROPE_CHUNK 64

struct rope_ctx {
	float *x;		/* (n, n_heads * head_dim) */
	const int32_t *pos;	/* (n) */
	int n, n_heads, head_dim, n_rot;
	float theta_scale;
	enum pg_rope_mode mode;
	const float *factors;	/* (n_rot / 2) or NULL */
};

/* Rotate pairs i0 .. i0 + np - 1 of every head of one token. */
static void rope_pairs(const struct rope_ctx *c, float *x, int i0, int np,
		       const float *cs, const float *sn)
{
	int half = c->n_rot / 2;

	for (int h = 0; h < c->n_heads; h++, x += c->head_dim) {
		for (int i = 0; i < np; i++) {
			int a = c->mode == PG_ROPE_NEOX ? i0 + i : 2 * (i0 + i);
			int b = c->mode == PG_ROPE_NEOX ? a + half : a + 1;
			float x0 = x[a], x1 = x[b];

			x[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
			x[b] = fmaf(x0, sn[i], x1 * cs[i]);
		}
	}
}

static void rope_token(const struct rope_ctx *c, int64_t t)
{
	float cs[PG_ROPE_CHUNK], sn[PG_ROPE_CHUNK];
	float *x = c->x + t * c->n_heads * c->head_dim;
	float theta = (float)c->pos[t];
	int half = c->n_rot / 2;

	for (int i0 = 0; i0 < half; i0 += PG_ROPE_CHUNK) {
		int np = half - i0 < PG_ROPE_CHUNK ? half - i0 : PG_ROPE_CHUNK;

		for (int i = 0; i < np; i++) {
			float th = c->factors ? theta / c->factors[i0 + i] :
				   theta;

			cs[i] = cosf(th);
			sn[i] = sinf(th);
			theta *= c->theta_scale;
		}
		rope_pairs(c, x, i0, np, cs, sn);
	}
}

static void rope_worker(void *arg, int ith, int nth)
{
	const struct rope_ctx *c = arg;
	int64_t lo, hi;

	pg_split(c->n, ith, nth, &lo, &hi);
	for (int64_t t = lo; t < hi; t++)
		rope_token(c, t);
}

void pg_cpu_rope(struct pg_backend *be, float *x, int n, int n_heads,
		 int head_dim, int n_rot, const int32_t *pos,
		 float freq_base, enum pg_rope_mode mode)
{
	pg_cpu_rope_factors(be, x, n, n_heads, head_dim, n_rot, pos, freq_base,
			    mode, NULL);
}

void pg_cpu_rope_factors(struct pg_backend *be, float *x, int n, int n_heads,
			 int head_dim, int n_rot, const int32_t *pos,
			 float freq_base, enum pg_rope_mode mode,
			 const float *factors)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct rope_ctx c = {
		.x = x, .pos = pos, .n = n, .n_heads = n_heads,
		.head_dim = head_dim, .n_rot = n_rot, .mode = mode,
		.theta_scale = powf(freq_base, -2.0f / (float)n_rot),
		.factors = factors,
	};

	if (n >= 2 * cpu->n_threads)
		pg_pool_run(cpu->pool, rope_worker, &c);
	else
		rope_worker(&c, 0, 1);
}
