/*
 * add.c - the add ops: x += y, the residual connection, and x += the sum
 * of parts in part order (add_parts), or x = that sum (sum_parts).
 *
 * Long vectors are split among threads; short ones are done by the caller.
 */
#include "kernels/cpu/cpu_impl.h"

#define PG_ADD_PAR_MIN 65536

struct add_ctx {
	const struct pg_cpu_kernels *k;
	float *x;		/* (n) */
	const float *y;		/* (n) */
	int64_t n;
	const float *const *parts;	/* add_parts: (n_parts), else NULL */
	int n_parts;
	int set;			/* sum_parts: x = the sum */
};

#define PG_ADD_RUN 1024		/* add_parts' floats a run, on the stack */

/*
 * x[lo .. hi - 1] += ((p0 + p1) + p2) .. : the parts summed in order into
 * a small buffer first, run by run; an add of two floats rounds the same
 * whatever the vector width, so only the order matters.
 */
static void add_parts_range(const struct add_ctx *c, int64_t lo, int64_t hi)
{
	float t[PG_ADD_RUN];

	for (int64_t i = lo; i < hi; i += PG_ADD_RUN) {
		int64_t n = hi - i < PG_ADD_RUN ? hi - i : PG_ADD_RUN;

		for (int64_t j = 0; j < n; j++)
			t[j] = c->parts[0][i + j];
		for (int p = 1; p < c->n_parts; p++)
			c->k->add(n, t, c->parts[p] + i);
		if (c->set)
			for (int64_t j = 0; j < n; j++)
				c->x[i + j] = t[j];
		else
			c->k->add(n, c->x + i, t);
	}
}

static void add_worker(void *arg, int ith, int nth)
{
	const struct add_ctx *c = arg;
	int64_t lo, hi;

	if (!pg_split16(c->n, ith, nth, &lo, &hi))
		return;
	if (c->parts)
		add_parts_range(c, lo, hi);
	else
		c->k->add(hi - lo, c->x + lo, c->y + lo);
}

void pg_cpu_add(struct pg_backend *be, float *x, const float *y, int64_t n)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct add_ctx c = { .k = cpu->k, .x = x, .y = y, .n = n };

	if (n >= PG_ADD_PAR_MIN && cpu->n_threads > 1)
		pg_pool_run(cpu->pool, add_worker, &c);
	else
		cpu->k->add(n, x, y);
}

void pg_cpu_add_parts(struct pg_backend *be, float *x,
		      const float *const *parts, int n_parts, int64_t n)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct add_ctx c = {
		.k = cpu->k, .x = x, .n = n, .parts = parts, .n_parts = n_parts,
	};

	if (n * n_parts >= PG_ADD_PAR_MIN && cpu->n_threads > 1)
		pg_pool_run(cpu->pool, add_worker, &c);
	else
		add_parts_range(&c, 0, n);
}

void pg_cpu_sum_parts(struct pg_backend *be, float *out,
		      const float *const *parts, int n_parts, int64_t n)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);
	struct add_ctx c = {
		.k = cpu->k, .x = out, .n = n, .parts = parts,
		.n_parts = n_parts, .set = 1,
	};

	if (n * n_parts >= PG_ADD_PAR_MIN && cpu->n_threads > 1)
		pg_pool_run(cpu->pool, add_worker, &c);
	else
		add_parts_range(&c, 0, n);
}
