/*
 * add.c - the add op: x += y, the residual connection.
 *
 * Long vectors are split among threads; short ones are done by the caller.
 */
#include "cpu_impl.h"

#define PG_ADD_PAR_MIN 65536

struct add_ctx {
	const struct pg_cpu_kernels *k;
	float *x;		/* (n) */
	const float *y;		/* (n) */
	int64_t n;
};

static void add_worker(void *arg, int ith, int nth)
{
	const struct add_ctx *c = arg;
	int64_t lo, hi;

	pg_split((c->n + 15) / 16, ith, nth, &lo, &hi);
	lo *= 16;
	hi = hi * 16 < c->n ? hi * 16 : c->n;
	if (hi > lo)
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
