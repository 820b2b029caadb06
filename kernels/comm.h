/*
 * comm.h - the communicator: collective and point-to-point operations
 * between the devices of a parallel plan, behind one table of function
 * pointers, so that the model never calls NCCL or a shared-memory protocol
 * itself.
 *
 * A group is a fixed set of `size` ranks (0 .. size - 1); each rank holds its
 * own handle (struct pg_comm) and calls the operations from the one thread
 * that drives its device.  Every rank of a group must call the same
 * collectives in the same order with the same counts.  Two implementations:
 * in-host shared memory for CPU devices (kernels/cpu/comm_shm.c: the ranks
 * are threads of one process) and NCCL for CUDA devices
 * (kernels/cuda/comm_nccl.c).
 *
 * Failure: an operation returns 0, or a negative errno.  A rank that fails
 * (its own work or an injected fault) calls abort() on its groups; every
 * operation of every rank of those groups that is waiting, or that starts
 * later, then returns -ECANCELED instead of blocking for ever, until the
 * group is reset().  Nothing here allocates per call.
 */
#ifndef PAGODA_KERNELS_COMM_H
#define PAGODA_KERNELS_COMM_H

#include <stddef.h>
#include <stdint.h>

/* What one rank's handle has done since it was made (or stats were reset). */
struct pg_comm_stats {
	uint64_t n_all_reduce;	/* all_reduce_sum calls */
	uint64_t n_all_gather;	/* all_gather calls */
	uint64_t n_send, n_recv;/* point-to-point messages */
	uint64_t bytes_out;	/* bytes this rank made visible to others */
	uint64_t bytes_in;	/* bytes this rank read from others */
	uint64_t wait_ns;	/* time inside operations (waiting + copying) */
};

struct pg_comm;

struct pg_comm_ops {
	const char *name;	/* "shm", "nccl" */

	/* Free this rank's handle (every rank frees its own). */
	void (*destroy)(struct pg_comm *c);

	/*
	 * buf[i] = sum over ranks of buf[i], for n floats, in place.  The sum
	 * is taken in rank order (((r0 + r1) + r2) ...) and every rank gets
	 * bit-identical results, so replicated state never drifts apart.
	 */
	int (*all_reduce_sum)(struct pg_comm *c, float *buf, size_t n);

	/*
	 * recv = the `bytes` at send of rank 0, then of rank 1, ... (size *
	 * bytes in all).  send may lie inside recv at this rank's place.
	 */
	int (*all_gather)(struct pg_comm *c, const void *send, size_t bytes,
			  void *recv);

	/*
	 * Point-to-point: send returns once buf may be reused; recv once the
	 * bytes are in buf.  Messages between two ranks arrive in order and
	 * sizes must agree.
	 */
	int (*send)(struct pg_comm *c, int peer, const void *buf, size_t bytes);
	int (*recv)(struct pg_comm *c, int peer, void *buf, size_t bytes);

	/* Wait until every rank has called barrier. */
	int (*barrier)(struct pg_comm *c);

	/*
	 * Make every pending and later operation of every rank of the group
	 * return -ECANCELED.  Any rank may call it, from any thread.
	 */
	void (*abort)(struct pg_comm *c);

	/*
	 * Clear an abort so that the group works again.  Every rank calls it,
	 * after all of them have left their operations (the caller arranges
	 * that, e.g. after a failed step has been collected); in-flight
	 * point-to-point messages are dropped.
	 */
	int (*reset)(struct pg_comm *c);
};

/* The handle every implementation's own struct starts with. */
struct pg_comm {
	const struct pg_comm_ops *ops;
	int rank;
	int size;
	struct pg_comm_stats stats;	/* this rank's; only its thread writes */
};

#endif
