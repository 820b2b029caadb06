/*
 * threadpool.c - the fork-join pool: workers spin briefly on a generation
 * counter, then sleep on it with futex(2); the caller waits for the last
 * worker the same way.
 *
 * Wake-ups cannot be lost: a sleeper announces itself (sleepers++) before
 * futex_wait checks that the generation is still the one it saw, and the
 * caller bumps the generation before it reads sleepers; both sides use
 * sequentially consistent atomics, so one of them sees the other.  The
 * same holds for the caller's wait on `pending` with `caller_asleep`.
 * It is not a work queue and does no load balancing of its own.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spin.h"
#include "kernels/cpu/threadpool.h"

/*
 * Wait this long before sleeping: far more than the gaps between the ops
 * of a forward pass (so that a pass never pays a 7 us wake-up), short
 * enough not to hold a shared CPU long once the work has stopped.  Time,
 * not iterations, since PAUSE costs 5 to 60 ns depending on the machine.
 * Past the first PG_POOL_PAUSE_NS the waiter yields between checks, so
 * that on an oversubscribed machine the thread it waits for gets the CPU
 * instead of waiting for the end of a scheduler slice.
 */
#define PG_POOL_SPIN_NS 200000
#define PG_POOL_PAUSE_NS 10000
#define PG_POOL_SPIN_CHECK 32		/* pauses between clock reads */

struct pg_pool_worker {
	struct pg_pool *pool;
	pthread_t thread;
	int ith;
};

struct pg_pool {
	int n_threads;
	pg_pool_fn fn;			/* written before gen is bumped */
	void *arg;
	_Atomic uint32_t gen;		/* futex word: one per run */
	_Atomic uint32_t sleepers;	/* workers in or entering futex_wait */
	_Atomic uint32_t pending;	/* futex word: workers not yet done */
	_Atomic uint32_t caller_asleep;
	_Atomic int stop;
	struct pg_pool_worker *workers;	/* (n_threads - 1) */
};

static void futex_wait(void *addr, uint32_t val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(void *addr, int n)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/*
 * Spin until (*word == val) == equal, or the spin time is over; 1 when
 * the condition was met.
 */
static int spin_for(_Atomic uint32_t *word, uint32_t val, int equal)
{
	int64_t start = 0, t;

	for (int i = 1;; i++) {
		if ((atomic_load_explicit(word, memory_order_acquire) == val) ==
		    equal)
			return 1;
		pg_cpu_relax();
		if (i % PG_POOL_SPIN_CHECK)
			continue;
		t = pg_now_ns();
		if (!start)
			start = t;
		else if (t - start > PG_POOL_SPIN_NS)
			return 0;
		else if (t - start > PG_POOL_PAUSE_NS)
			sched_yield();
	}
}

/* Wait until the generation differs from seen; return the new one. */
static uint32_t wait_gen(struct pg_pool *pool, uint32_t seen)
{
	uint32_t g;

	if (spin_for(&pool->gen, seen, 0))
		return atomic_load_explicit(&pool->gen, memory_order_acquire);
	for (;;) {
		atomic_fetch_add(&pool->sleepers, 1);
		futex_wait(&pool->gen, seen);
		atomic_fetch_sub(&pool->sleepers, 1);
		g = atomic_load(&pool->gen);
		if (g != seen)
			return g;
	}
}

static void *worker_main(void *p)
{
	struct pg_pool_worker *w = p;
	struct pg_pool *pool = w->pool;
	uint32_t seen = 0;

	for (;;) {
		seen = wait_gen(pool, seen);
		if (atomic_load(&pool->stop))
			return NULL;
		pool->fn(pool->arg, w->ith, pool->n_threads);
		if (atomic_fetch_sub(&pool->pending, 1) == 1 &&
		    atomic_load(&pool->caller_asleep))
			futex_wake(&pool->pending, 1);
	}
}

/* The caller's side: wait until every worker has finished its call. */
static void wait_done(struct pg_pool *pool)
{
	uint32_t p;

	if (spin_for(&pool->pending, 0, 1))
		return;
	atomic_store(&pool->caller_asleep, 1);
	while ((p = atomic_load(&pool->pending)) != 0)
		futex_wait(&pool->pending, p);
	atomic_store(&pool->caller_asleep, 0);
}

/* Publish a new generation and wake the workers that sleep. */
static void bump_gen(struct pg_pool *pool)
{
	atomic_fetch_add(&pool->gen, 1);
	if (atomic_load(&pool->sleepers))
		futex_wake(&pool->gen, INT_MAX);
}

void pg_pool_run(struct pg_pool *pool, pg_pool_fn fn, void *arg)
{
	if (pool->n_threads == 1) {
		fn(arg, 0, 1);
		return;
	}
	pool->fn = fn;
	pool->arg = arg;
	atomic_store(&pool->pending, (uint32_t)pool->n_threads - 1);
	bump_gen(pool);
	fn(arg, 0, pool->n_threads);
	wait_done(pool);
}

/* Stop and join the first n_started workers. */
static void stop_workers(struct pg_pool *pool, int n_started)
{
	atomic_store(&pool->stop, 1);
	bump_gen(pool);
	for (int i = 0; i < n_started; i++)
		pthread_join(pool->workers[i].thread, NULL);
}

int pg_pool_create(int n_threads, struct pg_pool **out)
{
	struct pg_pool *pool;
	int i, err;

	if (n_threads < 1)
		n_threads = 1;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->n_threads = n_threads;
	pool->workers = calloc((size_t)n_threads, sizeof(*pool->workers));
	if (!pool->workers) {
		err = -ENOMEM;
		goto out_free_pool;
	}
	for (i = 0; i < n_threads - 1; i++) {
		pool->workers[i].pool = pool;
		pool->workers[i].ith = i + 1;
		err = pthread_create(&pool->workers[i].thread, NULL,
				     worker_main, &pool->workers[i]);
		if (err) {
			err = -err;
			goto out_stop;
		}
	}
	*out = pool;
	return 0;

out_stop:
	stop_workers(pool, i);
	free(pool->workers);
out_free_pool:
	free(pool);
	return err;
}

int pg_pool_pin(struct pg_pool *pool, const int *cpus, int n_cpus)
{
	if (n_cpus < 1)
		return 0;
	for (int i = 0; i < pool->n_threads - 1; i++) {
		cpu_set_t set;
		int err;

		CPU_ZERO(&set);
		CPU_SET(cpus[(i + 1) % n_cpus], &set);
		err = pthread_setaffinity_np(pool->workers[i].thread,
					     sizeof(set), &set);
		if (err)
			return -err;
	}
	return 0;
}

void pg_pool_destroy(struct pg_pool *pool)
{
	if (!pool)
		return;
	stop_workers(pool, pool->n_threads - 1);
	free(pool->workers);
	free(pool);
}
