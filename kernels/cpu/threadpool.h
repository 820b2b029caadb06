/*
 * threadpool.h - a persistent pool of threads that run one function on all
 * of them at once, cheaply enough to be called thousands of times a pass.
 *
 * It is not a task queue: pg_pool_run() is a fork-join of exactly n_threads
 * calls, the caller's thread being number 0.  Not reentrant: one run at a
 * time, from one caller thread.
 */
#ifndef PAGODA_KERNELS_CPU_THREADPOOL_H
#define PAGODA_KERNELS_CPU_THREADPOOL_H

/* The work of one thread: ith in 0 .. nth - 1. */
typedef void (*pg_pool_fn)(void *arg, int ith, int nth);

struct pg_pool;

/*
 * pg_pool_create - start n_threads - 1 workers (n_threads >= 1).  Returns 0
 * and the pool in *out, or -errno (ENOMEM, or pthread_create's error).
 */
int pg_pool_create(int n_threads, struct pg_pool **out);

/*
 * pg_pool_pin - pin worker ith (1 .. n_threads - 1) to cpus[ith % n_cpus];
 * the caller pins its own thread (number 0) if it wants.  Returns 0 or
 * -errno of pthread_setaffinity_np.
 */
int pg_pool_pin(struct pg_pool *pool, const int *cpus, int n_cpus);

/* pg_pool_destroy - stop and join the workers, free the pool.  NULL ok. */
void pg_pool_destroy(struct pg_pool *pool);

/*
 * pg_pool_run - call fn(arg, ith, n) on every thread and return when all
 * calls have returned; fn's writes are then visible to the caller.
 */
void pg_pool_run(struct pg_pool *pool, pg_pool_fn fn, void *arg);

#endif
