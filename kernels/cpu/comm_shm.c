/*
 * comm_shm.c - the shared-memory communicator of comm.h for ranks that are
 * threads of one process: collectives read the other ranks' buffers in
 * place, point-to-point messages are copied straight from the sender's
 * buffer into the receiver's.
 *
 * Synchronisation is one barrier word and one futex "doorbell" per rank.
 * A rank only ever sleeps on its own doorbell; whoever changes something a
 * rank may wait for (a barrier's generation, a mailbox's state, the abort
 * flag) changes it first and then rings that rank's doorbell (seq++, and a
 * futex wake when the rank has announced that it sleeps).  The sleeper
 * announces itself (sleepers++), reads seq, checks its condition and only
 * then sleeps on seq; every access is sequentially consistent, so either it
 * sees the change or futex_wait sees seq moved: no wake-up is lost.
 *
 * Abort without harm to buffers: the barrier that opens a collective is
 * all-or-nothing (a cancelled waiter withdraws its arrival unless the last
 * rank has already arrived), and the barrier that closes it is not
 * cancellable (every rank that passed the first reaches it after a bounded
 * amount of copying).  A sender withdraws a message that no receiver has
 * claimed; once claimed, it waits for the copy to end.  So an operation
 * completes everywhere or nowhere, and no state is left behind by an abort.
 *
 * It is not a cross-process transport, and it knows nothing of NUMA.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spin.h"
#include "kernels/cpu/comm_shm.h"

/*
 * Spin this long before sleeping, by default: enough to catch a peer that
 * arrives a few microseconds later (a futex wake-up costs several), short
 * enough not to steal the CPU from that peer when there are more ranks than
 * cores.  pg_comm_shm_group_set_spin() changes it per group.
 */
#define SHM_SPIN_NS 30000
#define SHM_SPIN_CHECK 64	/* pauses between clock reads */

#define SHM_SUM_BLOCK 512	/* floats summed per pass (2 KiB of stack) */
#define SHM_SEG_ALIGN 16	/* floats: segments start on 64-byte lines */

/* One rank's shared state: its doorbell, and what it publishes. */
struct shm_rank {
	_Alignas(64) _Atomic uint32_t seq;	/* futex word, rung by others */
	_Atomic uint32_t sleepers;	/* 1 while the rank is in or entering futex_wait */
	_Atomic uint32_t joined;	/* a handle exists for this rank */

	/* Written before a collective's first barrier, read before its second. */
	_Alignas(64) const void *src;	/* all_gather's send */
	float *acc;			/* all_reduce's buffer (n floats) */
	size_t n;			/* floats (all_reduce) or bytes (all_gather) */
};

/* The state of a mailbox. */
enum {
	BOX_EMPTY,
	BOX_POSTED,	/* buf, bytes are valid; the receiver may claim it */
	BOX_COPYING,	/* claimed: the receiver reads buf */
	BOX_DONE,	/* copied; the sender empties the box */
	BOX_MISMATCH,	/* sizes differed, nothing copied; the sender empties it */
};

/* The mailbox of one ordered pair src -> dst: one message at most. */
struct shm_box {
	_Alignas(64) _Atomic uint32_t state;
	const void *buf;	/* the sender's buffer, set before BOX_POSTED */
	size_t bytes;
};

struct pg_comm_shm_group {
	_Alignas(64) _Atomic uint64_t bar;	/* generation << 32 | ranks arrived */
	_Alignas(64) _Atomic uint32_t aborted;	/* 1 from abort() to reset() */
	_Atomic uint32_t abort_seq;	/* abort() calls, to cancel reset() */
	int size;
	int64_t spin_ns;		/* spin before sleeping */
	struct shm_rank *rank;		/* (size) */
	struct shm_box *box;		/* (size, size): [src * size + dst] */
};

struct shm_comm {
	struct pg_comm base;
	struct pg_comm_shm_group *g;
};

static struct shm_comm *shm_of(struct pg_comm *c)
{
	return (struct shm_comm *)c;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Tell rank r that something it may wait for has changed. */
static void shm_ring(struct pg_comm_shm_group *g, int r)
{
	struct shm_rank *p = &g->rank[r];

	atomic_fetch_add(&p->seq, 1);
	if (atomic_load(&p->sleepers))
		futex_wake(&p->seq);
}

/* A condition a rank waits for: nonzero once it holds. */
typedef int (*shm_done_fn)(const void *arg);

static int shm_cancelled(_Atomic uint32_t *cancel, uint32_t cancel_val)
{
	return cancel && atomic_load(cancel) != cancel_val;
}

/*
 * Spin until done(arg) or a cancel (0), or until spin_ns have passed
 * (1: time to sleep).
 */
static int shm_spin(int64_t spin_ns, shm_done_fn done, const void *arg,
		    _Atomic uint32_t *cancel, uint32_t cancel_val)
{
	int64_t start = 0, t;

	for (int i = 1;; i++) {
		if (done(arg) || shm_cancelled(cancel, cancel_val))
			return 0;
		pg_cpu_relax();
		if (i % SHM_SPIN_CHECK)
			continue;
		t = pg_now_ns();
		if (!start)
			start = t;
		else if (t - start > spin_ns)
			return 1;
	}
}

/*
 * shm_wait - wait on c's doorbell until done(arg) holds (0), or until
 * *cancel differs from cancel_val (-ECANCELED; never when cancel is NULL).
 */
static int shm_wait(struct shm_comm *c, shm_done_fn done, const void *arg,
		    _Atomic uint32_t *cancel, uint32_t cancel_val)
{
	struct shm_rank *me = &c->g->rank[c->base.rank];
	int stop = !shm_spin(c->g->spin_ns, done, arg, cancel, cancel_val);
	uint32_t seq;

	while (!stop) {
		atomic_fetch_add(&me->sleepers, 1);
		seq = atomic_load(&me->seq);
		stop = done(arg) || shm_cancelled(cancel, cancel_val);
		if (!stop)
			futex_wait(&me->seq, seq);
		atomic_fetch_sub(&me->sleepers, 1);
	}
	return done(arg) ? 0 : -ECANCELED;
}

/* ---- the barrier ---- */

struct shm_bar_wait {
	_Atomic uint64_t *bar;
	uint32_t gen;		/* the generation the rank arrived in */
};

static int shm_bar_passed(const void *arg)
{
	const struct shm_bar_wait *w = arg;

	return (uint32_t)(atomic_load(w->bar) >> 32) != w->gen;
}

/*
 * A cancelled barrier wait: take the arrival back, unless the last rank has
 * arrived, in which case the barrier passes here too (once the last rank has
 * opened it, which takes it no time).  Returns err or 0.
 */
static int shm_bar_withdraw(struct shm_comm *c, struct shm_bar_wait *w,
			    int err)
{
	uint64_t v = atomic_load(w->bar);

	for (;;) {
		if ((uint32_t)(v >> 32) != w->gen)
			return 0;
		if ((uint32_t)v == (uint32_t)c->base.size)
			return shm_wait(c, shm_bar_passed, w, NULL, 0);
		if (atomic_compare_exchange_weak(w->bar, &v, v - 1))
			return err;
	}
}

/*
 * shm_barrier - wait until every rank of the group has arrived.  Cancelled
 * (see shm_wait) before the last rank arrives, it returns -ECANCELED on
 * every rank that waited, and the last one never arrives (it checks the
 * cancel first); after, on none.  The last rank runs last(g), when not
 * NULL, before it opens the barrier.
 */
static int shm_barrier(struct shm_comm *c, _Atomic uint32_t *cancel,
		       uint32_t cancel_val,
		       void (*last)(struct pg_comm_shm_group *g))
{
	struct pg_comm_shm_group *g = c->g;
	struct shm_bar_wait w = { .bar = &g->bar };
	uint64_t v;
	int err;

	if (shm_cancelled(cancel, cancel_val))
		return -ECANCELED;
	v = atomic_fetch_add(&g->bar, 1);
	w.gen = (uint32_t)(v >> 32);
	if ((uint32_t)v + 1 == (uint32_t)g->size) {
		if (last)
			last(g);
		atomic_store(&g->bar, (uint64_t)(uint32_t)(w.gen + 1) << 32);
		for (int r = 0; r < g->size; r++)
			if (r != c->base.rank)
				shm_ring(g, r);
		return 0;
	}
	err = shm_wait(c, shm_bar_passed, &w, cancel, cancel_val);
	if (err)
		err = shm_bar_withdraw(c, &w, err);
	return err;
}

/* ---- collectives ---- */

/*
 * Publish this rank's buffers and meet the others: afterwards every rank's
 * shm_rank fields may be read until the closing barrier.  0 or -ECANCELED.
 */
static int shm_open(struct shm_comm *c, const void *src, float *acc, size_t n)
{
	struct shm_rank *me = &c->g->rank[c->base.rank];

	me->src = src;
	me->acc = acc;
	me->n = n;
	return shm_barrier(c, &c->g->aborted, 0, NULL);
}

/* The closing barrier: every rank that passed the opening one comes. */
static void shm_close(struct shm_comm *c)
{
	shm_barrier(c, NULL, 0, NULL);
}

/* -EINVAL unless every rank published the same count (all see the same). */
static int shm_check_counts(const struct pg_comm_shm_group *g, size_t n)
{
	for (int r = 0; r < g->size; r++)
		if (g->rank[r].n != n)
			return -EINVAL;
	return 0;
}

/* Sum len floats at off over the ranks in order; write the sum to all. */
static void shm_sum_block(const struct pg_comm_shm_group *g, size_t off,
			  size_t len)
{
	float acc[SHM_SUM_BLOCK];	/* (len) */

	memcpy(acc, g->rank[0].acc + off, len * sizeof(float));
	for (int r = 1; r < g->size; r++) {
		const float *x = g->rank[r].acc + off;	/* (len) */

		for (size_t i = 0; i < len; i++)
			acc[i] += x[i];
	}
	for (int r = 0; r < g->size; r++)
		memcpy(g->rank[r].acc + off, acc, len * sizeof(float));
}

/* This rank's share of an all-reduce of n floats: segment `rank`. */
static void shm_sum_segment(const struct shm_comm *c, size_t n)
{
	size_t size = (size_t)c->base.size, seg, lo, hi, len;

	seg = (n + size - 1) / size;
	seg = (seg + SHM_SEG_ALIGN - 1) / SHM_SEG_ALIGN * SHM_SEG_ALIGN;
	lo = seg * (size_t)c->base.rank;
	hi = lo < n && n - lo > seg ? lo + seg : n;
	for (; lo < hi; lo += len) {
		len = hi - lo < SHM_SUM_BLOCK ? hi - lo : SHM_SUM_BLOCK;
		shm_sum_block(c->g, lo, len);
	}
}

static int shm_all_reduce_sum(struct pg_comm *pc, float *buf, size_t n)
{
	struct shm_comm *c = shm_of(pc);
	struct pg_comm_stats *st = &pc->stats;
	int64_t t0 = pg_now_ns();
	int err;

	st->n_all_reduce++;
	err = shm_open(c, NULL, buf, n);
	if (err)
		goto out;
	err = shm_check_counts(c->g, n);
	if (!err)
		shm_sum_segment(c, n);
	shm_close(c);
	if (!err) {
		st->bytes_out += (uint64_t)n * sizeof(float);
		st->bytes_in += (uint64_t)n * sizeof(float) *
				(uint64_t)(pc->size - 1);
	}
out:
	st->wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

/* Copy every rank's `bytes` into place r of recv. */
static void shm_gather_copy(const struct shm_comm *c, size_t bytes,
			    unsigned char *recv)
{
	const struct pg_comm_shm_group *g = c->g;

	if (!bytes)
		return;		/* the pointers may be NULL */
	for (int r = 0; r < g->size; r++) {
		unsigned char *dst = recv + (size_t)r * bytes;

		if (r != c->base.rank)
			memcpy(dst, g->rank[r].src, bytes);
		else if (dst != g->rank[r].src)
			memmove(dst, g->rank[r].src, bytes);
	}
}

static int shm_all_gather(struct pg_comm *pc, const void *send, size_t bytes,
			  void *recv)
{
	struct shm_comm *c = shm_of(pc);
	struct pg_comm_stats *st = &pc->stats;
	int64_t t0 = pg_now_ns();
	int err;

	st->n_all_gather++;
	err = shm_open(c, send, NULL, bytes);
	if (err)
		goto out;
	err = shm_check_counts(c->g, bytes);
	if (!err)
		shm_gather_copy(c, bytes, recv);
	shm_close(c);
	if (!err) {
		st->bytes_out += bytes;
		st->bytes_in += (uint64_t)bytes * (uint64_t)(pc->size - 1);
	}
out:
	st->wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

static int shm_barrier_op(struct pg_comm *pc)
{
	struct shm_comm *c = shm_of(pc);
	int64_t t0 = pg_now_ns();
	int err;

	err = shm_barrier(c, &c->g->aborted, 0, NULL);
	pc->stats.wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

/* ---- point to point ---- */

static int shm_box_posted(const void *arg)
{
	const struct shm_box *b = arg;

	return atomic_load((_Atomic uint32_t *)&b->state) == BOX_POSTED;
}

static int shm_box_answered(const void *arg)
{
	const struct shm_box *b = arg;
	uint32_t s = atomic_load((_Atomic uint32_t *)&b->state);

	return s == BOX_DONE || s == BOX_MISMATCH;
}

/* -EINVAL unless peer is another rank of the group. */
static int shm_check_peer(const struct pg_comm *pc, int peer)
{
	return peer < 0 || peer >= pc->size || peer == pc->rank ? -EINVAL : 0;
}

/*
 * Post buf in the box to peer and wait for the receiver's answer; withdraw
 * the message on abort unless the receiver has claimed it.
 */
static int shm_post(struct shm_comm *c, int peer, const void *buf,
		    size_t bytes)
{
	struct pg_comm_shm_group *g = c->g;
	struct shm_box *b = &g->box[c->base.rank * g->size + peer];
	uint32_t s = BOX_POSTED;
	int err;

	if (atomic_load(&g->aborted))
		return -ECANCELED;
	b->buf = buf;
	b->bytes = bytes;
	atomic_store(&b->state, BOX_POSTED);
	shm_ring(g, peer);
	err = shm_wait(c, shm_box_answered, b, &g->aborted, 0);
	if (err) {
		if (atomic_compare_exchange_strong(&b->state, &s, BOX_EMPTY))
			return err;
		shm_wait(c, shm_box_answered, b, NULL, 0);
	}
	err = atomic_load(&b->state) == BOX_DONE ? 0 : -EMSGSIZE;
	atomic_store(&b->state, BOX_EMPTY);
	return err;
}

static int shm_send(struct pg_comm *pc, int peer, const void *buf,
		    size_t bytes)
{
	struct shm_comm *c = shm_of(pc);
	int64_t t0 = pg_now_ns();
	int err;

	pc->stats.n_send++;
	err = shm_check_peer(pc, peer);
	if (!err)
		err = shm_post(c, peer, buf, bytes);
	if (!err)
		pc->stats.bytes_out += bytes;
	pc->stats.wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

/*
 * Wait for peer's message and claim it: BOX_COPYING when the sizes agree,
 * BOX_MISMATCH (and the sender told) when not.  0, -EMSGSIZE or -ECANCELED.
 */
static int shm_claim(struct shm_comm *c, struct shm_box *b, int peer,
		     size_t bytes)
{
	struct pg_comm_shm_group *g = c->g;
	uint32_t s, to;
	int err;

	do {
		err = shm_wait(c, shm_box_posted, b, &g->aborted, 0);
		if (err)
			return err;
		s = BOX_POSTED;
		to = b->bytes == bytes ? BOX_COPYING : BOX_MISMATCH;
		/* Failing means the sender withdrew: the next wait cancels. */
	} while (!atomic_compare_exchange_strong(&b->state, &s, to));
	if (to == BOX_COPYING)
		return 0;
	shm_ring(g, peer);
	return -EMSGSIZE;
}

static int shm_recv(struct pg_comm *pc, int peer, void *buf, size_t bytes)
{
	struct shm_comm *c = shm_of(pc);
	struct shm_box *b;
	int64_t t0 = pg_now_ns();
	int err;

	pc->stats.n_recv++;
	err = shm_check_peer(pc, peer);
	if (err)
		goto out;
	b = &c->g->box[peer * pc->size + pc->rank];
	err = shm_claim(c, b, peer, bytes);
	if (err)
		goto out;
	if (bytes)
		memcpy(buf, b->buf, bytes);
	atomic_store(&b->state, BOX_DONE);
	shm_ring(c->g, peer);
	pc->stats.bytes_in += bytes;
out:
	pc->stats.wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

/* ---- abort, reset, handles ---- */

static void shm_abort(struct pg_comm *pc)
{
	struct pg_comm_shm_group *g = shm_of(pc)->g;

	atomic_store(&g->aborted, 1);
	atomic_fetch_add(&g->abort_seq, 1);
	for (int r = 0; r < g->size; r++)
		shm_ring(g, r);
}

static void shm_clear_abort(struct pg_comm_shm_group *g)
{
	atomic_store(&g->aborted, 0);
}

/*
 * A barrier that ignores the abort flag, cancelled only by a new abort();
 * the last rank in clears the flag.  Nothing else is left to clear: an
 * aborted operation leaves no message posted and no barrier half full.
 */
static int shm_reset(struct pg_comm *pc)
{
	struct shm_comm *c = shm_of(pc);
	uint32_t seen = atomic_load(&c->g->abort_seq);

	return shm_barrier(c, &c->g->abort_seq, seen, shm_clear_abort);
}

static void shm_destroy(struct pg_comm *pc)
{
	struct shm_comm *c = shm_of(pc);

	atomic_store(&c->g->rank[pc->rank].joined, 0);
	free(c);
}

static const struct pg_comm_ops shm_ops = {
	.name = "shm",
	.destroy = shm_destroy,
	.all_reduce_sum = shm_all_reduce_sum,
	.all_gather = shm_all_gather,
	.send = shm_send,
	.recv = shm_recv,
	.barrier = shm_barrier_op,
	.abort = shm_abort,
	.reset = shm_reset,
};

struct pg_comm *pg_comm_shm_join(struct pg_comm_shm_group *g, int rank)
{
	struct shm_comm *c;
	uint32_t no = 0;

	if (!g || rank < 0 || rank >= g->size) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (!atomic_compare_exchange_strong(&g->rank[rank].joined, &no, 1)) {
		free(c);
		errno = EBUSY;
		return NULL;
	}
	c->base.ops = &shm_ops;
	c->base.rank = rank;
	c->base.size = g->size;
	c->g = g;
	return &c->base;
}

/* aligned_alloc of n zeroed elements of `elem` bytes (a multiple of 64). */
static void *shm_calloc_lines(size_t n, size_t elem)
{
	void *p = aligned_alloc(64, n * elem);

	if (p)
		memset(p, 0, n * elem);
	return p;
}

int pg_comm_shm_group_create(int size, struct pg_comm_shm_group **out)
{
	struct pg_comm_shm_group *g;

	if (size < 1 || size > PG_COMM_SHM_MAX_RANKS)
		return -EINVAL;
	g = shm_calloc_lines(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->size = size;
	g->spin_ns = SHM_SPIN_NS;
	g->rank = shm_calloc_lines((size_t)size, sizeof(*g->rank));
	if (!g->rank)
		goto out_free_group;
	g->box = shm_calloc_lines((size_t)size * (size_t)size, sizeof(*g->box));
	if (!g->box)
		goto out_free_rank;
	*out = g;
	return 0;

out_free_rank:
	free(g->rank);
out_free_group:
	free(g);
	return -ENOMEM;
}

void pg_comm_shm_group_destroy(struct pg_comm_shm_group *g)
{
	if (!g)
		return;
	free(g->box);
	free(g->rank);
	free(g);
}

void pg_comm_shm_group_set_spin(struct pg_comm_shm_group *g, int64_t spin_ns)
{
	g->spin_ns = spin_ns < 0 ? 0 : spin_ns;
}
