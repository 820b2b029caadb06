/*
 * comm_nccl.h - the NCCL communicator: the interface of comm.h between CUDA
 * devices, one rank per device, the ranks being threads of one process or
 * processes on one or several hosts.
 *
 * It does not move the unique id between processes (the caller does, see
 * the design note at the top of comm_nccl.c) and declares no CUDA type, so
 * that its callers need not include CUDA's headers.
 *
 * Buffers are device pointers of the rank's device.  Every operation is
 * enqueued on the stream given at creation and that stream is waited for
 * (by polling, so that abort() can interrupt it) before the call returns:
 * the semantics are those of the shared-memory communicator, with these
 * differences:
 *
 *  - all_reduce_sum is ncclAllReduce(ncclFloat, ncclSum).  NCCL does not
 *    promise rank order: the sum's rounding depends on its ring or tree
 *    algorithm.  The results are still bit-identical on all ranks, because
 *    every rank receives the same reduced bytes (the reduction is done once
 *    per element and broadcast), which is what replicated state needs.
 *  - send/recv are ncclSend/ncclRecv on bytes, one at a time: a send may
 *    block until the peer posts its recv, so order the calls (one side of
 *    each pair receives first).  NCCL cannot see a size mismatch: sizes that
 *    disagree are the caller's bug (a hang or truncated data), not
 *    -EMSGSIZE.
 *  - abort() marks every handle of the same group in this process; each
 *    rank's thread then aborts its NCCL communicator (ncclCommAbort) in the
 *    operation it waits in, or at its next call, which returns -ECANCELED.
 *    Ranks in other processes are not reached: their process must call
 *    abort() on its own handles (the control plane relays the failure).
 *  - An aborted NCCL communicator cannot be revived and its unique id
 *    cannot be used again (NCCL's bootstrap root serves one
 *    initialisation), so reset() returns -ENOTSUP once the handle has been
 *    aborted or has failed: destroy every rank's handle and create new ones
 *    from a fresh unique id.  On a handle never aborted, reset() returns 0.
 *  - Errors: -EINVAL for arguments NCCL refuses; -EIO for a CUDA or NCCL
 *    failure, after which the handle is broken (its communicator aborted).
 *    pg_comm_nccl_error() gives the message, naming the call and the CUDA
 *    or NCCL error string.
 *  - stats count as the shared-memory communicator's do (logical sizes).
 */
#ifndef PAGODA_KERNELS_CUDA_COMM_NCCL_H
#define PAGODA_KERNELS_CUDA_COMM_NCCL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/comm.h"

/* The size of a unique id (NCCL's ncclUniqueId). */
#define PG_COMM_NCCL_ID_BYTES 128

/*
 * pg_comm_nccl_unique_id - make the id of a new group, to be given to every
 * rank's pg_comm_nccl_create (rank 0's process makes it: NCCL's bootstrap
 * root runs there).  id holds len >= PG_COMM_NCCL_ID_BYTES bytes.  Returns
 * 0, -EINVAL (len too small) or -EIO with a message in err (err_len bytes,
 * may be 0).
 */
int pg_comm_nccl_unique_id(void *id, size_t len, char *err, size_t err_len);

/*
 * pg_comm_nccl_create - the handle of rank `rank` of a group of `size`
 * made from id (PG_COMM_NCCL_ID_BYTES bytes), on CUDA device cuda_device,
 * enqueuing on stream (a cudaStream_t of that device; NULL for the default
 * stream).  Every rank calls it at about the same time: it returns once
 * all have joined, and waits for ever for a rank that never comes (use
 * pg_comm_nccl_join to bound the wait).  The stream stays the caller's.
 * Free the handle with c->ops->destroy(c) (any thread, once no operation
 * of it is running).
 *
 * Returns 0 and the handle in *out, or -EINVAL (bad size, rank or device),
 * -ENOMEM, or -EIO with a message in err (err_len bytes, may be 0).
 */
int pg_comm_nccl_create(int size, int rank, const void *id, int cuda_device,
			void *stream, struct pg_comm **out, char *err,
			size_t err_len);

/*
 * How long pg_comm_nccl_join waits for the other ranks: until *cancel is
 * not 0 (NULL: no flag), or until the CLOCK_MONOTONIC time deadline_ns
 * (0: no deadline).  The ranks of one process share one flag, which
 * whoever fails sets, so that none of them waits for a rank that will
 * never join.
 */
struct pg_comm_nccl_wait {
	const atomic_int *cancel;
	int64_t deadline_ns;
};

/*
 * pg_comm_nccl_join - pg_comm_nccl_create that gives up: the communicator
 * is created non-blocking and its initialisation polled; when *w->cancel
 * becomes non-zero or the deadline passes first, the half-made
 * communicator is aborted (ncclCommAbort) and freed.  w may be NULL (as
 * pg_comm_nccl_create).  It does not set *w->cancel itself: the caller
 * does, on any failure, so that the other ranks give up too.
 *
 * Returns as pg_comm_nccl_create, or -ECANCELED (the flag was set) or
 * -ETIMEDOUT (the deadline passed), with a message in err.
 */
int pg_comm_nccl_join(int size, int rank, const void *id, int cuda_device,
		      void *stream, const struct pg_comm_nccl_wait *w,
		      struct pg_comm **out, char *err, size_t err_len);

/*
 * pg_comm_nccl_error - the message of c's last failed operation ("" when
 * none); c must be an NCCL handle.  Valid until c's next operation.
 */
const char *pg_comm_nccl_error(const struct pg_comm *c);

#endif
