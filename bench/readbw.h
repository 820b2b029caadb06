/*
 * readbw.h - the machine's read bandwidth, as the benchmarks measure it:
 * n_threads threads of a pg_pool sum their shares of a 256 MiB buffer
 * (64-bit loads, 4 sums each), best of 5.  The limit a matmul that reads
 * every weight once can reach; bench/kernels and bench/decode-pagoda
 * print their figures beside it.
 */
#ifndef PAGODA_BENCH_READBW_H
#define PAGODA_BENCH_READBW_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/cpu/threadpool.h"

#define READBW_BYTES ((size_t)256 << 20)

struct readbw_ctx {
	const uint64_t *buf;	/* (n) */
	size_t n;
	uint64_t sums[64];
};

static void readbw_worker(void *arg, int ith, int nth)
{
	struct readbw_ctx *c = arg;
	size_t per = c->n / (size_t)nth, lo = per * (size_t)ith;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (size_t i = lo; i + 4 <= lo + per; i += 4) {
		s0 += c->buf[i];
		s1 += c->buf[i + 1];
		s2 += c->buf[i + 2];
		s3 += c->buf[i + 3];
	}
	c->sums[ith] = s0 + s1 + s2 + s3;
}

/* GB/s read by n_threads threads (exits on a failed allocation). */
static inline double readbw_gbps(int n_threads)
{
	struct pg_pool *pool;
	struct readbw_ctx c = { .n = READBW_BYTES / 8 };
	uint64_t *buf = malloc(READBW_BYTES);
	double best = 0;

	if (!buf || pg_pool_create(n_threads, &pool)) {
		perror("readbw");
		exit(1);
	}
	memset(buf, 1, READBW_BYTES);
	c.buf = buf;
	for (int r = 0; r < 5; r++) {
		double t = pg_now_s();

		pg_pool_run(pool, readbw_worker, &c);
		t = pg_now_s() - t;
		if (READBW_BYTES / t / 1e9 > best)
			best = READBW_BYTES / t / 1e9;
	}
	pg_pool_destroy(pool);
	free(buf);
	return best;
}

#endif
