/*
 * loop.h - pagodad's one io_uring and the dispatch of its completions.
 * Every operation of the daemon's loop thread goes through this ring:
 * the client side's (server.c: accepts, hellos, doorbells, hang-ups,
 * signals, ...) and the admin socket's (admin.c).  Each side registers a
 * handler and gets an owner number; an operation's user_data is one tag,
 * packed one way for all:
 *
 *   bits 63..56  owner  (pgd_loop_register; 0: nobody, ignored)
 *   bits 55..48  op     (the owner's own kind of operation)
 *   bits 47..16  gen    (the owner's generation of the object, so that a
 *                        late completion for a slot since reused is
 *                        recognised and dropped)
 *   bits 15..0   index  (the owner's slot)
 *
 * The caller owns the struct, this module manages its life (as liburing
 * does): pgd_loop_init ... pgd_loop_exit.  Not the daemon's iteration
 * (server.c), nor the sockets (listen.h).  Loop thread only; nothing is
 * locked.
 */
#ifndef PAGODA_DAEMON_LOOP_H
#define PAGODA_DAEMON_LOOP_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>

/* Owners a loop dispatches to (the client side, the admin socket). */
#define PGD_LOOP_MAX_OWNERS 4

/*
 * A completion for an owner: its op, index and gen as tagged, and the
 * kernel's result (cqe->res).  The handler checks that index and gen still
 * name a live object of its own.
 */
typedef void (*pgd_loop_handler)(void *ctx, unsigned op, uint32_t index,
				 uint32_t gen, int res);

struct pgd_loop {
	struct io_uring ring;
	int ready;			/* the ring exists */
	int n_owners;
	struct {
		pgd_loop_handler fn;
		void *ctx;
		const char *log_prefix;	/* before its log lines, e.g. "admin: " */
	} owners[PGD_LOOP_MAX_OWNERS];
};

/*
 * pgd_loop_init - an io_uring of at least `entries` submission entries.
 * Returns 0, or -1 with a message in err that says what to change (the
 * kernel has no io_uring, or forbids it).
 */
int pgd_loop_init(struct pgd_loop *l, unsigned entries, char *err, size_t err_len);

/*
 * pgd_loop_exit - let the ring go (the kernel cancels what is in flight).
 * A loop that was never initialised (zeroed) is allowed.
 */
void pgd_loop_exit(struct pgd_loop *l);

/*
 * pgd_loop_register - hand l's completions tagged with the returned owner
 * to fn(ctx, ...); log_prefix starts the loop's log lines about this
 * owner's operations ("" for none; kept, not copied).  Returns the owner
 * (1 or more), or -1 when PGD_LOOP_MAX_OWNERS are registered.
 */
int pgd_loop_register(struct pgd_loop *l, const char *log_prefix,
		      pgd_loop_handler fn, void *ctx);

/* pgd_loop_tag - the user_data of an operation (the layout above). */
static inline uint64_t pgd_loop_tag(int owner, unsigned op, uint32_t index,
				    uint32_t gen)
{
	return (uint64_t)(owner & 0xff) << 56 | (uint64_t)(op & 0xff) << 48 |
	       (uint64_t)gen << 16 | (index & 0xffff);
}

/*
 * pgd_loop_sqe - a free submission entry, prepared as a no-op tagged
 * `tag` (the caller prepares its operation over it and sets user_data
 * again: liburing's prep functions may clear it); when the queue is full
 * it is submitted first.  NULL only when the kernel refuses to take the
 * queue (logged).
 */
struct io_uring_sqe *pgd_loop_sqe(struct pgd_loop *l, uint64_t tag);

/* pgd_loop_reserve - submit what is queued unless n entries are free. */
void pgd_loop_reserve(struct pgd_loop *l, unsigned n);

/*
 * pgd_loop_link_timeout - bound op_sqe (just prepared, the last entry
 * queued) by a linked timeout of ts (which must live until it completes),
 * tagged timeout_tag.  Reserve two entries before preparing op_sqe.  With
 * no entry left, op_sqe goes unbounded, linked to nothing.
 */
void pgd_loop_link_timeout(struct pgd_loop *l, struct io_uring_sqe *op_sqe,
			   struct __kernel_timespec *ts, uint64_t timeout_tag);

/*
 * pgd_loop_accept - queue an accept(2) on the listening socket fd
 * (close-on-exec, blocking connections), tagged `tag`.  Returns 0, or -1
 * when no entry could be had.
 */
int pgd_loop_accept(struct pgd_loop *l, int fd, uint64_t tag);

/*
 * pgd_loop_cancel - queue the cancellation of the operation tagged
 * target; the cancellation's own completion is tagged cancel_tag.
 */
void pgd_loop_cancel(struct pgd_loop *l, uint64_t target, uint64_t cancel_tag);

/* pgd_loop_flush - submit the queued entries, if any. */
void pgd_loop_flush(struct pgd_loop *l);

/*
 * pgd_loop_submit - submit the queued entries (a system call even when
 * there are none: it also reaps the kernel's side).
 */
void pgd_loop_submit(struct pgd_loop *l);

/*
 * pgd_loop_reap - hand every completion there is now to its owner's
 * handler; no system call.  Completions of owner 0 or of an owner not
 * registered are dropped.  Returns how many were taken.
 */
int pgd_loop_reap(struct pgd_loop *l);

/*
 * pgd_loop_wait - submit what is queued and sleep until a completion
 * arrives, or (ts not NULL) at most ts.  The completions stay for
 * pgd_loop_reap.
 */
void pgd_loop_wait(struct pgd_loop *l, struct __kernel_timespec *ts);

#endif
