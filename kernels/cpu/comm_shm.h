/*
 * comm_shm.h - the in-host shared-memory communicator: the ranks of a group
 * are threads of one process, each calling only its own handle.
 *
 * It is not a transport between processes (the buffers are plain pointers of
 * this address space) and it does not pin threads or pick cores.
 *
 * Use: one thread creates the group, every rank's thread joins it with its
 * own rank, and frees its handle with c->ops->destroy(c); once every handle
 * is gone, the group is destroyed.  The operations are those of comm.h, with
 * these particulars:
 *
 *  - all_reduce_sum: rank r sums its segment of the arrays (about n / size
 *    floats) over the ranks in rank order and writes the sum into every
 *    rank's buffer, so the results are bit-identical everywhere.  The
 *    buffers of different ranks must not overlap.
 *  - all_reduce_sum and all_gather return -EINVAL on every rank, having
 *    written nothing, when the ranks' counts differ.
 *  - send/recv are a rendezvous: send returns once the receiver has copied
 *    the message straight from the sender's buffer, so a send blocks until
 *    the peer posts the matching recv (as NCCL's do).  Order the calls so
 *    that one side of each pair receives first (a ring: rank 0 sends first,
 *    the others receive first).  A size mismatch makes both calls return
 *    -EMSGSIZE and drops that message.  A rank may not send to itself.
 *  - After abort(), an operation either completes on every rank that takes
 *    part (it returns 0: it had already started everywhere) or on none (it
 *    returns -ECANCELED and no rank's buffer was touched).  No rank's buffer
 *    is read or written after its own call has returned.
 *  - reset() is a barrier that ignores the abort flag: the last rank to
 *    arrive clears the flag, then all leave with 0.  An abort() while ranks
 *    wait in reset() makes them withdraw and return -ECANCELED, the group
 *    staying aborted (they call reset() again); one that comes just as the
 *    last rank arrives may be cleared along with the first.
 *  - Sizes in stats are logical, as NCCL's would be: an all-reduce of n
 *    floats counts 4n bytes out and 4n (size - 1) in, an all-gather `bytes`
 *    out and bytes (size - 1) in, a send its bytes out, a recv its bytes in.
 *    Calls are counted whatever their result, bytes only on success.
 *
 * Waits spin for a few tens of microseconds, then sleep on a futex.
 */
#ifndef PAGODA_KERNELS_CPU_COMM_SHM_H
#define PAGODA_KERNELS_CPU_COMM_SHM_H

#include <stdint.h>

#include "kernels/comm.h"

struct pg_comm_shm_group;

/* The largest group pg_comm_shm_group_create accepts. */
#define PG_COMM_SHM_MAX_RANKS 256

/*
 * pg_comm_shm_group_create - the shared state of a group of `size` ranks
 * (1 .. PG_COMM_SHM_MAX_RANKS).  Returns 0 and the group in *out, or
 * -EINVAL (bad size) or -ENOMEM.
 */
int pg_comm_shm_group_create(int size, struct pg_comm_shm_group **out);

/*
 * pg_comm_shm_join - the handle of rank `rank` of g, to be used by one
 * thread only and freed with c->ops->destroy(c).  Returns NULL with errno
 * EINVAL (rank out of range), EBUSY (the rank already has a handle) or
 * ENOMEM.
 */
struct pg_comm *pg_comm_shm_join(struct pg_comm_shm_group *g, int rank);

/*
 * pg_comm_shm_group_set_spin - how long a waiting rank spins before it
 * sleeps on its futex (default 30 us).  Long spins suit ranks that each
 * have a core of their own (a futex wake-up costs tens of microseconds);
 * short ones suit more ranks than cores.  Set it before the ranks start.
 */
void pg_comm_shm_group_set_spin(struct pg_comm_shm_group *g, int64_t spin_ns);

/*
 * pg_comm_shm_group_destroy - free the group, after every handle has been
 * destroyed.  NULL is fine.
 */
void pg_comm_shm_group_destroy(struct pg_comm_shm_group *g);

#endif
