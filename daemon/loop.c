/*
 * loop.c - pagodad's io_uring, its tags and the dispatch of completions
 * to the owners that registered (loop.h).  Not what the operations mean:
 * that is each owner's (server.c, admin.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/log.h"
#include "daemon/loop.h"

int pgd_loop_init(struct pgd_loop *l, unsigned entries, char *err, size_t err_len)
{
	int rc = io_uring_queue_init(entries, &l->ring, 0);

	if (rc) {
		snprintf(err, err_len, "io_uring is not available (%s): pagodad needs Linux 5.6 or later with io_uring allowed (sysctl kernel.io_uring_disabled = 0, and no seccomp filter against it)",
			 strerror(-rc));
		return -1;
	}
	l->ready = 1;
	return 0;
}

void pgd_loop_exit(struct pgd_loop *l)
{
	if (l->ready)
		io_uring_queue_exit(&l->ring);
	l->ready = 0;
}

int pgd_loop_register(struct pgd_loop *l, const char *log_prefix,
		      pgd_loop_handler fn, void *ctx)
{
	int owner = l->n_owners + 1;

	if (owner >= PGD_LOOP_MAX_OWNERS)
		return -1;
	l->owners[owner].fn = fn;
	l->owners[owner].ctx = ctx;
	l->owners[owner].log_prefix = log_prefix;
	l->n_owners++;
	return owner;
}

struct io_uring_sqe *pgd_loop_sqe(struct pgd_loop *l, uint64_t tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
	unsigned owner = (unsigned)(tag >> 56);

	if (!sqe) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	if (!sqe) {
		pgd_log(PGD_LOG_ERROR, "%sthe io_uring submission queue is full",
			owner < PGD_LOOP_MAX_OWNERS && l->owners[owner].log_prefix ?
			l->owners[owner].log_prefix : "");
		return NULL;
	}
	io_uring_prep_nop(sqe);
	sqe->user_data = tag;
	return sqe;
}

void pgd_loop_reserve(struct pgd_loop *l, unsigned n)
{
	if (io_uring_sq_space_left(&l->ring) < n)
		io_uring_submit(&l->ring);
}

void pgd_loop_link_timeout(struct pgd_loop *l, struct io_uring_sqe *op_sqe,
			   struct __kernel_timespec *ts, uint64_t timeout_tag)
{
	struct io_uring_sqe *sqe;

	op_sqe->flags |= IOSQE_IO_LINK;
	sqe = pgd_loop_sqe(l, timeout_tag);
	if (!sqe) {	/* it goes without its timeout, linked to nothing */
		op_sqe->flags &= (uint8_t)~IOSQE_IO_LINK;
		return;
	}
	io_uring_prep_link_timeout(sqe, ts, 0);
	sqe->user_data = timeout_tag;
}

int pgd_loop_accept(struct pgd_loop *l, int fd, uint64_t tag)
{
	struct io_uring_sqe *sqe = pgd_loop_sqe(l, tag);

	if (!sqe)
		return -1;
	io_uring_prep_accept(sqe, fd, NULL, NULL, SOCK_CLOEXEC);
	sqe->user_data = tag;
	return 0;
}

void pgd_loop_cancel(struct pgd_loop *l, uint64_t target, uint64_t cancel_tag)
{
	struct io_uring_sqe *sqe = pgd_loop_sqe(l, cancel_tag);

	if (sqe) {
		io_uring_prep_cancel(sqe, (void *)(uintptr_t)target, 0);
		sqe->user_data = cancel_tag;
	}
}

void pgd_loop_flush(struct pgd_loop *l)
{
	if (io_uring_sq_ready(&l->ring))
		io_uring_submit(&l->ring);
}

void pgd_loop_submit(struct pgd_loop *l)
{
	io_uring_submit(&l->ring);
}

int pgd_loop_reap(struct pgd_loop *l)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&l->ring, head, cqe) {
		uint64_t ud = cqe->user_data;
		unsigned owner = (unsigned)(ud >> 56);

		if (owner && owner < PGD_LOOP_MAX_OWNERS && l->owners[owner].fn)
			l->owners[owner].fn(l->owners[owner].ctx,
					    (unsigned)(ud >> 48) & 0xff,
					    (uint32_t)(ud & 0xffff),
					    (uint32_t)(ud >> 16), cqe->res);
		n++;
	}
	io_uring_cq_advance(&l->ring, n);
	return (int)n;
}

void pgd_loop_wait(struct pgd_loop *l, struct __kernel_timespec *ts)
{
	struct io_uring_cqe *cqe;

	if (ts) {
		io_uring_submit(&l->ring);
		io_uring_wait_cqe_timeout(&l->ring, &cqe, ts);
	} else {
		io_uring_submit_and_wait(&l->ring, 1);
	}
}
