/*
 * rmsnorm.c - the rmsnorm op: each row divided by its root mean square,
 * then multiplied by a weight vector.
 *
 * With llama.cpp numerics the mean square is summed as llama.cpp sums it
 * (pg_sumsq_llama).  Rows are shared among the pool's threads only when
 * there are enough of them to pay for the hand-off; the inner loops come
 * from the ISA table.
 */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

struct rmsnorm_ctx {
	const struct pg_cpu_kernels *k;
	int llama;		/* the mean square as llama.cpp sums it */
	const float *x;		/* (n, dim) */
	const float *w;		/* (dim) */
	float *out;		/* (n, dim) */
	int n, dim;
	float eps;
};

static void rmsnorm_rows(const struct rmsnorm_ctx *c, int64_t lo, int64_t hi)
{
	for (int64_t i = lo; i < hi; i++) {
		const float *x = c->x + i * c->dim;
		float ms = c->llama ? (float)(pg_sumsq_llama(c->dim, x) / c->dim) :
			   c->k->sumsq(c->dim, x) / (float)c->dim;

		c->k->scale_mul(c->dim, x, 1.0f / sqrtf(ms + c->eps), c->w,
				c->out + i * c->dim);
	}
}

static void rmsnorm_worker(void *arg, int ith, int nth)
{
	const struct rmsnorm_ctx *c = arg;
	int64_t lo, hi;

	pg_split(c->n, ith, nth, &lo, &hi);
	rmsnorm_rows(c, lo, hi);
}

void pg_cpu_rmsnorm(struct pg_backend *be, const float *x, const float *w,
		    int n, int dim, float eps, float *out)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct rmsnorm_ctx c = {
		.k = cpu->k, .llama = cpu->llama, .x = x, .w = w, .out = out,
		.n = n, .dim = dim, .eps = eps,
	};

	if (n >= 2 * cpu->n_threads && (int64_t)n * dim >= 16384)
		pg_pool_run(cpu->pool, rmsnorm_worker, &c);
	else
		rmsnorm_rows(&c, 0, n);
}
