/*
 * clock.h - the monotonic clock, read the one way every part of pagoda
 * reads it: CLOCK_MONOTONIC, in nanoseconds or in seconds.
 *
 * CLOCK_MONOTONIC is one clock for every process of the host, so a time
 * the daemon stamps (proto.h, t_ns) can be compared with one a client
 * reads.  clock_gettime() on it is a vDSO call: no system call, cheap
 * enough for a spin loop.  Header-only and free of any module's types,
 * so that kernels/, shm/, daemon/ and client/ may all include it.
 */
#ifndef PAGODA_COMMON_CLOCK_H
#define PAGODA_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* pg_now_ns - CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t pg_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* pg_now_s - CLOCK_MONOTONIC in seconds. */
static inline double pg_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
