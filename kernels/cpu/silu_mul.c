/*
 * silu_mul.c - the silu_mul op: gate = silu(gate) * up, the SwiGLU of the
 * feed-forward block.
 *
 * With llama.cpp numerics, llama.cpp's silu (llamacpp.c); rows of the
 * feed-forward width are then taken as one vector, which gives llama.cpp's
 * bits when that width is a multiple of 8, as in every model we know.
 * Long vectors (prompts) are split among threads; one token's vector is
 * done by the caller alone.
 */
#include "kernels/cpu/cpu_impl.h"

/* Below this many values the hand-off costs more than it saves. */
#define PG_SILU_PAR_MIN 32768

struct silu_ctx {
	void (*fn)(int64_t n, float *gate, const float *up);
	float *gate;		/* (n) */
	const float *up;	/* (n) */
	int64_t n;
};

static void silu_worker(void *arg, int ith, int nth)
{
	const struct silu_ctx *c = arg;
	int64_t lo, hi;

	if (pg_split16(c->n, ith, nth, &lo, &hi))
		c->fn(hi - lo, c->gate + lo, c->up + lo);
}

void pg_cpu_silu_mul(struct pg_backend *be, float *gate, const float *up,
		     int64_t n)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct silu_ctx c = {
		.fn = cpu->llama ? cpu->k->silu_mul_llama : cpu->k->silu_mul,
		.gate = gate, .up = up, .n = n,
	};

	if (n >= PG_SILU_PAR_MIN && cpu->n_threads > 1)
		pg_pool_run(cpu->pool, silu_worker, &c);
	else
		c.fn(n, gate, up);
}
