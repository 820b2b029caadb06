/*
 * test_comm.c - the shared-memory communicator (kernels/cpu/comm_shm.c)
 * under load: groups of 1 to 5 ranks as threads, more ranks than cores.
 *
 * Checked: all-reduce against a rank-order reference sum bit for bit (on
 * data where the order changes the result); all-gather, separate and in
 * place; thousands of point-to-point messages in ring, pipeline and
 * all-pairs patterns, in order; mismatched sizes and bad peers; the
 * barrier; abort while ranks are blocked in a collective, a send, a recv or
 * a reset (they must return -ECANCELED promptly), abort at random moments
 * (every operation must complete on all ranks or on none), and reset; the
 * stats counters, exactly.
 *
 * Exits 0 on success, 1 on failure.  It does not measure speed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/cpu/comm_shm.h"
#include "tests/check.h"

#define MAX_RANKS 5

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, us % 1000000 * 1000 };

	nanosleep(&ts, NULL);
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A float of either sign and exponent in 2^-20 .. 2^20: sums round a lot. */
static float rng_float(uint64_t *s)
{
	uint64_t x = rng_next(s);
	uint32_t u = (uint32_t)(x >> 63) << 31 |
		     (uint32_t)(127 - 20 + (x >> 32) % 41) << 23 |
		     ((uint32_t)x & 0x7fffff);
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* ---- running a group: one thread per rank, the main thread beside ---- */

typedef void (*rank_fn)(struct pg_comm *c, void *arg);
typedef void (*main_fn)(struct pg_comm **comm, int size, void *arg);

struct group_run {
	struct pg_comm_shm_group *g;
	struct pg_comm *comm[MAX_RANKS];
	pthread_barrier_t ready;	/* the ranks and the main thread */
	rank_fn fn;
	void *arg;
};

struct rank_thread {
	struct group_run *run;
	int rank;
	pthread_t tid;
};

static void *rank_main(void *p)
{
	struct rank_thread *t = p;
	struct group_run *run = t->run;
	struct pg_comm *c = pg_comm_shm_join(run->g, t->rank);

	if (!c) {
		perror("pg_comm_shm_join");
		exit(1);
	}
	run->comm[t->rank] = c;
	pthread_barrier_wait(&run->ready);
	run->fn(c, run->arg);
	pthread_barrier_wait(&run->ready);
	c->ops->destroy(c);
	return NULL;
}

/*
 * Run fn on every rank of a new group of `size`, and mfn (if any) on the
 * main thread meanwhile, with every handle in hand; the handles live until
 * both are done.
 */
static void run_group(int size, rank_fn fn, main_fn mfn, void *arg)
{
	struct group_run run = { .fn = fn, .arg = arg };
	struct rank_thread t[MAX_RANKS];
	int err;

	err = pg_comm_shm_group_create(size, &run.g);
	if (err) {
		fprintf(stderr, "pg_comm_shm_group_create: %s\n", strerror(-err));
		exit(1);
	}
	pthread_barrier_init(&run.ready, NULL, (unsigned)size + 1);
	for (int r = 0; r < size; r++) {
		t[r] = (struct rank_thread){ .run = &run, .rank = r };
		if (pthread_create(&t[r].tid, NULL, rank_main, &t[r])) {
			fprintf(stderr, "pthread_create failed\n");
			exit(1);
		}
	}
	pthread_barrier_wait(&run.ready);
	if (mfn)
		mfn(run.comm, size, arg);
	pthread_barrier_wait(&run.ready);
	for (int r = 0; r < size; r++)
		pthread_join(t[r].tid, NULL);
	pthread_barrier_destroy(&run.ready);
	pg_comm_shm_group_destroy(run.g);
}

/* ---- all-reduce ---- */

struct ar_ctx {
	size_t n;
	int rounds;
	float *in[MAX_RANKS];	/* (size, n) each rank's input */
	float *ref;		/* (n) in[0] + in[1] + ... in rank order */
};

static void ar_rank(struct pg_comm *c, void *arg)
{
	struct ar_ctx *x = arg;
	float *buf = xmalloc(x->n * sizeof(float));	/* (n) */
	int err;

	for (int i = 0; i < x->rounds; i++) {
		memcpy(buf, x->in[c->rank], x->n * sizeof(float));
		err = c->ops->all_reduce_sum(c, buf, x->n);
		CHECK(err == 0, "all_reduce size %d n %zu: %d", c->size, x->n,
		      err);
		CHECK(!memcmp(buf, x->ref, x->n * sizeof(float)),
		      "all_reduce size %d n %zu rank %d: not the rank-order sum",
		      c->size, x->n, c->rank);
	}
	free(buf);
}

/* How many elements a reverse-order sum gets differently (data check). */
static size_t ar_order_matters(const struct ar_ctx *x, int size)
{
	size_t diff = 0;
	float s;

	for (size_t i = 0; i < x->n; i++) {
		s = x->in[size - 1][i];
		for (int r = size - 2; r >= 0; r--)
			s += x->in[r][i];
		diff += memcmp(&s, &x->ref[i], sizeof(s)) != 0;
	}
	return diff;
}

static void test_all_reduce(int size, size_t n, int rounds)
{
	struct ar_ctx x = { .n = n, .rounds = rounds };
	uint64_t seed = (uint64_t)size << 32 ^ n;

	for (int r = 0; r < size; r++) {
		x.in[r] = xmalloc(n * sizeof(float));
		for (size_t i = 0; i < n; i++)
			x.in[r][i] = rng_float(&seed);
	}
	x.ref = xmalloc(n * sizeof(float));
	memcpy(x.ref, x.in[0], n * sizeof(float));
	for (int r = 1; r < size; r++)
		for (size_t i = 0; i < n; i++)
			x.ref[i] += x.in[r][i];
	if (size > 2 && n >= 1000)
		CHECK(ar_order_matters(&x, size) > 0,
		      "test data: summation order makes no difference");
	run_group(size, ar_rank, NULL, &x);
	for (int r = 0; r < size; r++)
		free(x.in[r]);
	free(x.ref);
}

/* ---- all-gather ---- */

struct ag_ctx {
	size_t bytes;
	int rounds;
};

static unsigned char ag_byte(int rank, size_t i, int round)
{
	return (unsigned char)(rank * 31 + i * 7 + (size_t)round * 13 + i / 251);
}

static void ag_rank(struct pg_comm *c, void *arg)
{
	struct ag_ctx *x = arg;
	size_t bytes = x->bytes, bad;
	unsigned char *send = xmalloc(bytes);			/* (bytes) */
	unsigned char *recv = xmalloc(bytes * (size_t)c->size);	/* (size, bytes) */
	unsigned char *mine;
	int err;

	for (int i = 0; i < x->rounds; i++) {
		/* Odd rounds gather in place. */
		mine = i & 1 ? recv + (size_t)c->rank * bytes : send;
		memset(recv, 0xee, bytes * (size_t)c->size);
		for (size_t k = 0; k < bytes; k++)
			mine[k] = ag_byte(c->rank, k, i);
		err = c->ops->all_gather(c, mine, bytes, recv);
		CHECK(err == 0, "all_gather: %d", err);
		bad = 0;
		for (int r = 0; r < c->size; r++)
			for (size_t k = 0; k < bytes; k++)
				bad += recv[(size_t)r * bytes + k] !=
				       ag_byte(r, k, i);
		CHECK(!bad, "all_gather size %d bytes %zu round %d: %zu wrong",
		      c->size, bytes, i, bad);
	}
	free(send);
	free(recv);
}

static void test_all_gather(int size, size_t bytes, int rounds)
{
	struct ag_ctx x = { .bytes = bytes, .rounds = rounds };

	run_group(size, ag_rank, NULL, &x);
}

/* Counts that differ between ranks: -EINVAL everywhere, then it works. */
static void mismatch_rank(struct pg_comm *c, void *arg)
{
	float buf[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	unsigned char recv[8 * MAX_RANKS];
	size_t n = c->rank == 0 ? 5 : 6;
	int err;

	err = c->ops->all_reduce_sum(c, buf, n);
	CHECK(err == -EINVAL, "all_reduce count mismatch: %d", err);
	CHECK(buf[0] == 1, "all_reduce count mismatch wrote the buffer");
	err = c->ops->all_gather(c, buf, n, recv);
	CHECK(err == -EINVAL, "all_gather size mismatch: %d", err);
	err = c->ops->all_reduce_sum(c, buf, 8);
	CHECK(err == 0 && buf[7] == (float)c->size,
	      "all_reduce after a mismatch: %d, %g", err, buf[7]);
	CHECK(c->ops->all_reduce_sum(c, NULL, 0) == 0, "all_reduce of 0");
	CHECK(c->ops->all_gather(c, NULL, 0, NULL) == 0, "all_gather of 0");
}

/* ---- barrier ---- */

static void barrier_rank(struct pg_comm *c, void *arg)
{
	atomic_int *count = arg;
	int err, seen;

	for (int i = 0; i < 1000; i++) {
		atomic_fetch_add(count, 1);
		err = c->ops->barrier(c);
		CHECK(err == 0, "barrier: %d", err);
		seen = atomic_load(count);
		CHECK(seen == c->size * (i + 1), "barrier %d let rank %d "
		      "through at count %d", i, c->rank, seen);
		err = c->ops->barrier(c);
		CHECK(err == 0, "barrier: %d", err);
	}
}

/* ---- point to point ---- */

struct msg_head {
	uint32_t seq;
	uint32_t from;
};

/* A message of seq: its length (>= 8) and its bytes after the head. */
static size_t msg_len(uint32_t seq)
{
	return sizeof(struct msg_head) + seq * 37 % 200;
}

static void msg_fill(unsigned char *m, uint32_t seq, int from)
{
	struct msg_head h = { seq, (uint32_t)from };

	memcpy(m, &h, sizeof(h));
	for (size_t i = sizeof(h); i < msg_len(seq); i++)
		m[i] = (unsigned char)(seq + i * 3 + (size_t)from);
}

static int msg_ok(const unsigned char *m, uint32_t seq, int from)
{
	unsigned char want[256];

	msg_fill(want, seq, from);
	return !memcmp(m, want, msg_len(seq));
}

#define N_RING 1000
#define N_PIPE 3000

/* A token goes round the ring N_RING times; each rank adds its rank. */
static void ring_rank(struct pg_comm *c, void *arg)
{
	int next = (c->rank + 1) % c->size;
	int prev = (c->rank + c->size - 1) % c->size;
	uint64_t tok;
	int err;

	for (uint64_t i = 0; i < N_RING; i++) {
		if (c->rank == 0) {
			tok = i * 1000;
			err = c->ops->send(c, next, &tok, sizeof(tok));
			CHECK(err == 0, "ring send: %d", err);
		}
		err = c->ops->recv(c, prev, &tok, sizeof(tok));
		CHECK(err == 0, "ring recv: %d", err);
		if (c->rank == 0) {
			CHECK(tok == i * 1000 + (uint64_t)(c->size *
			      (c->size - 1) / 2), "ring token %llu at %llu",
			      (unsigned long long)tok, (unsigned long long)i);
			continue;
		}
		CHECK(tok == i * 1000 + (uint64_t)(c->rank * (c->rank - 1) / 2),
		      "ring token %llu at rank %d", (unsigned long long)tok,
		      c->rank);
		tok += (uint64_t)c->rank;
		err = c->ops->send(c, next, &tok, sizeof(tok));
		CHECK(err == 0, "ring send: %d", err);
	}
}

/* N_PIPE messages of varying length flow from rank 0 to the last rank. */
static void pipe_rank(struct pg_comm *c, void *arg)
{
	unsigned char m[256];
	int bad = 0, err;

	for (uint32_t i = 0; i < N_PIPE; i++) {
		if (c->rank == 0) {
			msg_fill(m, i, 0);
		} else {
			err = c->ops->recv(c, c->rank - 1, m, msg_len(i));
			CHECK(err == 0, "pipe recv: %d", err);
			bad += !msg_ok(m, i, 0);
		}
		if (c->rank < c->size - 1) {
			err = c->ops->send(c, c->rank + 1, m, msg_len(i));
			CHECK(err == 0, "pipe send: %d", err);
		}
	}
	CHECK(!bad, "pipe: rank %d got %d messages wrong or out of order",
	      c->rank, bad);
}

#define PAIR_BYTES (1u << 20)

/*
 * Every pair swaps a large message, pairs taken in one global order (the
 * lower rank sends first), which cannot deadlock.
 */
static void pairs_rank(struct pg_comm *c, void *arg)
{
	unsigned char *out = xmalloc(PAIR_BYTES), *in = xmalloc(PAIR_BYTES);
	int me = c->rank, peer, err1, err2;
	size_t bad;

	for (size_t k = 0; k < PAIR_BYTES; k++)
		out[k] = (unsigned char)(k * 13 + (size_t)me * 101 + k / 4093);
	for (int i = 0; i < c->size; i++)
		for (int j = i + 1; j < c->size; j++) {
			if (me != i && me != j)
				continue;
			peer = me == i ? j : i;
			if (me == i) {
				err1 = c->ops->send(c, peer, out, PAIR_BYTES);
				err2 = c->ops->recv(c, peer, in, PAIR_BYTES);
			} else {
				err2 = c->ops->recv(c, peer, in, PAIR_BYTES);
				err1 = c->ops->send(c, peer, out, PAIR_BYTES);
			}
			CHECK(!err1 && !err2, "pairs: %d %d", err1, err2);
			bad = 0;
			for (size_t k = 0; k < PAIR_BYTES; k++)
				bad += in[k] != (unsigned char)(k * 13 +
				       (size_t)peer * 101 + k / 4093);
			CHECK(!bad, "pairs: %zu bytes wrong from %d", bad, peer);
		}
	free(out);
	free(in);
}

/* Sizes that disagree, bad peers; the pair works afterwards. */
static void p2p_errors_rank(struct pg_comm *c, void *arg)
{
	uint64_t a[2] = { 7, 8 }, b[2] = { 0, 0 };
	int err;

	CHECK(c->ops->send(c, c->rank, a, 8) == -EINVAL, "send to self");
	CHECK(c->ops->send(c, c->size, a, 8) == -EINVAL, "send to size");
	CHECK(c->ops->recv(c, -1, b, 8) == -EINVAL, "recv from -1");
	if (c->rank == 0) {
		err = c->ops->send(c, 1, a, 8);
		CHECK(err == -EMSGSIZE, "short send: %d", err);
		err = c->ops->send(c, 1, a, 16);
		CHECK(err == 0, "send after a mismatch: %d", err);
		err = c->ops->send(c, 1, NULL, 0);
		CHECK(err == 0, "send of 0 bytes: %d", err);
	} else if (c->rank == 1) {
		err = c->ops->recv(c, 0, b, 16);
		CHECK(err == -EMSGSIZE, "long recv: %d", err);
		CHECK(b[0] == 0, "a mismatched recv wrote its buffer");
		err = c->ops->recv(c, 0, b, 16);
		CHECK(err == 0 && b[0] == 7 && b[1] == 8,
		      "recv after a mismatch: %d", err);
		err = c->ops->recv(c, 0, NULL, 0);
		CHECK(err == 0, "recv of 0 bytes: %d", err);
	}
	CHECK(c->ops->barrier(c) == 0, "barrier");
}

/* ---- abort and reset ---- */

#define PROMPT_NS 200000000	/* an abort must wake the waiters this fast */

struct abort_ctx {
	pthread_barrier_t sync;		/* the ranks and the main thread */
	_Atomic int64_t t_abort;
	int ret[MAX_RANKS];
	int64_t t_ret[MAX_RANKS];
	int64_t worst_ns;		/* the slowest return after an abort */
	atomic_int entering;		/* ranks about to wait in reset */
};

/* Block in some operation that rank 0 never joins. */
static int block_in_op(struct pg_comm *c)
{
	float buf[1000] = { 0 };

	if (c->rank == 1 && c->size >= 3)
		return c->ops->recv(c, 0, buf, sizeof(buf));
	if (c->rank == 2)
		return c->ops->send(c, 0, buf, sizeof(buf));
	if (c->rank == 3)
		return c->ops->barrier(c);
	return c->ops->all_reduce_sum(c, buf, 1000);
}

/* After the reset: an all-reduce and a ring work again. */
static void check_works(struct pg_comm *c)
{
	float v[3] = { 1, 2, (float)c->rank };
	int next = (c->rank + 1) % c->size, prev;
	uint32_t tok = 0;
	int err;

	err = c->ops->all_reduce_sum(c, v, 3);
	CHECK(err == 0 && v[0] == (float)c->size &&
	      v[2] == (float)(c->size * (c->size - 1) / 2),
	      "all_reduce after reset: %d", err);
	prev = (c->rank + c->size - 1) % c->size;
	if (c->rank == 0)
		CHECK(c->ops->send(c, next, &tok, 4) == 0, "send after reset");
	CHECK(c->ops->recv(c, prev, &tok, 4) == 0, "recv after reset");
	if (c->rank != 0) {
		tok++;
		CHECK(c->ops->send(c, next, &tok, 4) == 0, "send after reset");
	} else {
		CHECK(tok == (uint32_t)c->size - 1, "ring after reset: %u", tok);
	}
}

static void abort_rank(struct pg_comm *c, void *arg)
{
	struct abort_ctx *x = arg;
	float f = 1;
	int err;

	/* A: blocked ranks, rank 0 absent, the main thread aborts. */
	if (c->rank != 0) {
		x->ret[c->rank] = block_in_op(c);
		x->t_ret[c->rank] = pg_now_ns();
	}
	pthread_barrier_wait(&x->sync);
	CHECK(c->ops->barrier(c) == -ECANCELED, "barrier while aborted");
	CHECK(c->ops->all_reduce_sum(c, &f, 1) == -ECANCELED,
	      "all_reduce while aborted");
	CHECK(c->ops->send(c, (c->rank + 1) % c->size, &f, 4) == -ECANCELED,
	      "send while aborted");
	CHECK(c->ops->recv(c, (c->rank + 1) % c->size, &f, 4) == -ECANCELED,
	      "recv while aborted");
	pthread_barrier_wait(&x->sync);
	err = c->ops->reset(c);
	CHECK(err == 0, "reset: %d", err);
	check_works(c);

	/* B: an abort while ranks wait in reset (rank 0 late) cancels it. */
	if (c->rank != 0) {
		atomic_fetch_add(&x->entering, 1);
		x->ret[c->rank] = c->ops->reset(c);
		x->t_ret[c->rank] = pg_now_ns();
	}
	pthread_barrier_wait(&x->sync);
	pthread_barrier_wait(&x->sync);		/* the main thread checked */
	err = c->ops->reset(c);
	CHECK(err == 0, "reset after a cancelled reset: %d", err);
	check_works(c);

	/* C: one of the ranks aborts the group from its own thread. */
	if (c->rank == 0) {
		sleep_us(20000);
		atomic_store(&x->t_abort, pg_now_ns());
		c->ops->abort(c);
	} else {
		x->ret[c->rank] = block_in_op(c);
		x->t_ret[c->rank] = pg_now_ns();
	}
	pthread_barrier_wait(&x->sync);
	CHECK(c->ops->reset(c) == 0, "reset");
	check_works(c);
}

/* The ranks blocked in phase A, B or C returned -ECANCELED promptly. */
static void abort_check(struct abort_ctx *x, int size, const char *phase)
{
	int64_t dt;

	for (int r = 1; r < size; r++) {
		dt = x->t_ret[r] - atomic_load(&x->t_abort);
		CHECK(x->ret[r] == -ECANCELED, "%s: rank %d returned %d",
		      phase, r, x->ret[r]);
		CHECK(dt >= 0 && dt < PROMPT_NS, "%s: rank %d took %lld us",
		      phase, r, (long long)dt / 1000);
		if (dt > x->worst_ns)
			x->worst_ns = dt;
	}
}

static void abort_main(struct pg_comm **comm, int size, void *arg)
{
	struct abort_ctx *x = arg;

	sleep_us(20000);
	atomic_store(&x->t_abort, pg_now_ns());
	comm[0]->ops->abort(comm[0]);
	pthread_barrier_wait(&x->sync);
	abort_check(x, size, "abort in ops");
	pthread_barrier_wait(&x->sync);

	/* Let the ranks other than 0 settle in reset, then abort. */
	while (atomic_load(&x->entering) < size - 1)
		sleep_us(1000);
	sleep_us(20000);
	atomic_store(&x->t_abort, pg_now_ns());
	comm[size - 1]->ops->abort(comm[size - 1]);
	pthread_barrier_wait(&x->sync);
	abort_check(x, size, "abort in reset");
	pthread_barrier_wait(&x->sync);

	pthread_barrier_wait(&x->sync);
	abort_check(x, size, "abort by a rank");
}

static int64_t test_abort(int size)
{
	struct abort_ctx x = { 0 };

	pthread_barrier_init(&x.sync, NULL, (unsigned)size + 1);
	run_group(size, abort_rank, abort_main, &x);
	pthread_barrier_destroy(&x.sync);
	return x.worst_ns;
}

/*
 * Aborts at random moments while the ranks loop over all-reduces or pass
 * messages down a pipeline: each operation must have completed on every
 * rank or on none, so the ranks count the same all-reduces, and each
 * receiver as many messages as its sender sent.
 */
#define N_STORM 12

struct storm_ctx {
	pthread_barrier_t sync;		/* the ranks and the main thread */
	long done_ar[MAX_RANKS];	/* all-reduces that returned 0 */
	long sent[MAX_RANKS], got[MAX_RANKS];
};

static long storm_all_reduce(struct pg_comm *c)
{
	float v[256];
	long n;
	int err;

	for (n = 0;; n++) {
		for (int i = 0; i < 256; i++)
			v[i] = (float)(c->rank + i);
		err = c->ops->all_reduce_sum(c, v, 256);
		if (err)
			break;
		CHECK(v[5] == (float)(c->size * (c->size - 1) / 2 + 5 * c->size),
		      "storm all_reduce: %g", v[5]);
	}
	CHECK(err == -ECANCELED, "storm all_reduce: %d", err);
	return n;
}

static void storm_pipe(struct pg_comm *c, long *sent, long *got)
{
	unsigned char m[256];
	int err = 0;

	*sent = *got = 0;
	for (uint32_t i = 0; !err; i++) {
		if (c->rank == 0) {
			msg_fill(m, i, 0);
		} else {
			err = c->ops->recv(c, c->rank - 1, m, msg_len(i));
			if (err)
				break;
			CHECK(msg_ok(m, i, 0), "storm pipe: message %u", i);
			++*got;
		}
		if (c->rank < c->size - 1) {
			err = c->ops->send(c, c->rank + 1, m, msg_len(i));
			*sent += !err;
		}
	}
	CHECK(err == -ECANCELED, "storm pipe: %d", err);
}

static void storm_rank(struct pg_comm *c, void *arg)
{
	struct storm_ctx *x = arg;

	for (int t = 0; t < N_STORM; t++) {
		if (t & 1)
			storm_pipe(c, &x->sent[c->rank], &x->got[c->rank]);
		else
			x->done_ar[c->rank] = storm_all_reduce(c);
		pthread_barrier_wait(&x->sync);
		CHECK(c->ops->reset(c) == 0, "storm reset");
		pthread_barrier_wait(&x->sync);
	}
}

static void storm_main(struct pg_comm **comm, int size, void *arg)
{
	struct storm_ctx *x = arg;
	uint64_t seed = (uint64_t)size;
	int who;

	for (int t = 0; t < N_STORM; t++) {
		sleep_us((long)(rng_next(&seed) % 3000));
		who = (int)(rng_next(&seed) % (uint64_t)size);
		comm[who]->ops->abort(comm[who]);
		pthread_barrier_wait(&x->sync);
		for (int r = 1; r < size; r++) {
			if (t & 1)
				CHECK(x->sent[r - 1] == x->got[r],
				      "storm: rank %d sent %ld, rank %d got %ld",
				      r - 1, x->sent[r - 1], r, x->got[r]);
			else
				CHECK(x->done_ar[r] == x->done_ar[0],
				      "storm: rank %d did %ld all_reduces, "
				      "rank 0 %ld", r, x->done_ar[r],
				      x->done_ar[0]);
		}
		pthread_barrier_wait(&x->sync);
	}
}

static void test_storm(int size)
{
	struct storm_ctx x = { 0 };

	pthread_barrier_init(&x.sync, NULL, (unsigned)size + 1);
	run_group(size, storm_rank, storm_main, &x);
	pthread_barrier_destroy(&x.sync);
}

/* ---- stats ---- */

static void stats_rank(struct pg_comm *c, void *arg)
{
	const struct pg_comm_stats *st = &c->stats;
	uint64_t peers = (uint64_t)c->size - 1, out, in;
	unsigned char g[32 * MAX_RANKS], m[32] = { 0 };
	float v[100] = { 0 };
	int next = (c->rank + 1) % c->size;
	int prev = (c->rank + c->size - 1) % c->size;

	for (int i = 0; i < 5; i++)
		c->ops->all_reduce_sum(c, v, 100);
	for (int i = 0; i < 3; i++)
		c->ops->all_gather(c, m, sizeof(m), g);
	for (int i = 0; i < 10; i++) {
		if (c->rank == 0)
			c->ops->send(c, next, m, sizeof(m));
		c->ops->recv(c, prev, m, sizeof(m));
		if (c->rank != 0)
			c->ops->send(c, next, m, sizeof(m));
	}
	/* A failed pair: counted, but no bytes. */
	if (c->rank == 0)
		c->ops->send(c, next, m, 8);
	else if (c->rank == 1)
		c->ops->recv(c, prev, m, 16);
	c->ops->barrier(c);

	out = 5 * 400 + 3 * 32 + 10 * 32;
	in = 5 * 400 * peers + 3 * 32 * peers + 10 * 32;
	CHECK(st->n_all_reduce == 5 && st->n_all_gather == 3,
	      "stats: %llu all_reduce, %llu all_gather",
	      (unsigned long long)st->n_all_reduce,
	      (unsigned long long)st->n_all_gather);
	CHECK(st->n_send == 10 + (c->rank == 0) &&
	      st->n_recv == 10 + (c->rank == 1),
	      "stats rank %d: %llu sends, %llu recvs", c->rank,
	      (unsigned long long)st->n_send, (unsigned long long)st->n_recv);
	CHECK(st->bytes_out == out && st->bytes_in == in,
	      "stats rank %d: %llu bytes out (want %llu), %llu in (want %llu)",
	      c->rank, (unsigned long long)st->bytes_out,
	      (unsigned long long)out, (unsigned long long)st->bytes_in,
	      (unsigned long long)in);
	CHECK(st->wait_ns > 0, "stats: no wait_ns");
}

/* ---- the API's own errors, and a group of one ---- */

static void single_rank(struct pg_comm *c, void *arg)
{
	float v[3] = { 1.5f, -2, 3 };
	int x = 42, y = 0;

	CHECK(c->ops->all_reduce_sum(c, v, 3) == 0 && v[0] == 1.5f &&
	      v[1] == -2 && v[2] == 3, "all_reduce of one rank");
	CHECK(c->ops->all_gather(c, &x, sizeof(x), &y) == 0 && y == 42,
	      "all_gather of one rank");
	CHECK(c->ops->barrier(c) == 0, "barrier of one rank");
	CHECK(c->ops->send(c, 0, &x, 4) == -EINVAL, "send to self");
	c->ops->abort(c);
	CHECK(c->ops->barrier(c) == -ECANCELED, "barrier of one, aborted");
	CHECK(c->ops->reset(c) == 0, "reset of one rank");
	CHECK(c->ops->barrier(c) == 0, "barrier of one after reset");
	CHECK(!strcmp(c->ops->name, "shm"), "name %s", c->ops->name);
}

static void test_api(void)
{
	struct pg_comm_shm_group *g = NULL;
	struct pg_comm *a, *b;

	CHECK(pg_comm_shm_group_create(0, &g) == -EINVAL, "group of 0");
	CHECK(pg_comm_shm_group_create(PG_COMM_SHM_MAX_RANKS + 1, &g) ==
	      -EINVAL, "group too large");
	CHECK(pg_comm_shm_group_create(2, &g) == 0, "group of 2");
	if (!g)
		return;
	errno = 0;
	CHECK(!pg_comm_shm_join(g, 2) && errno == EINVAL, "join rank 2 of 2");
	CHECK(!pg_comm_shm_join(g, -1) && errno == EINVAL, "join rank -1");
	a = pg_comm_shm_join(g, 1);
	CHECK(a && a->rank == 1 && a->size == 2, "join rank 1");
	errno = 0;
	CHECK(!pg_comm_shm_join(g, 1) && errno == EBUSY, "join rank 1 twice");
	if (a)
		a->ops->destroy(a);
	b = pg_comm_shm_join(g, 1);
	CHECK(b, "join rank 1 again after destroy");
	if (b)
		b->ops->destroy(b);
	pg_comm_shm_group_destroy(g);
	pg_comm_shm_group_destroy(NULL);
	run_group(1, single_rank, NULL, NULL);
}

/* ---- main ---- */

static double since(int64_t t0)
{
	return (double)(pg_now_ns() - t0) / 1e9;
}

int main(void)
{
	static const size_t ar_n[] = { 1, 7, 1000, 1 << 20 };
	static const int ar_rounds[] = { 300, 300, 100, 3 };
	static const size_t ag_bytes[] = { 1, 13, 4096, 1 << 20 };
	atomic_int count;
	int64_t t0 = pg_now_ns(), t, worst = 0, w;

	test_api();
	for (int size = 2; size <= MAX_RANKS; size++) {
		printf("%d ranks:", size);
		t = pg_now_ns();
		for (int i = 0; i < 4; i++)
			test_all_reduce(size, ar_n[i], ar_rounds[i]);
		printf(" all_reduce %.2fs", since(t));
		t = pg_now_ns();
		for (int i = 0; i < 4; i++)
			test_all_gather(size, ag_bytes[i], ar_rounds[i]);
		run_group(size, mismatch_rank, NULL, NULL);
		printf(", all_gather %.2fs", since(t));
		t = pg_now_ns();
		atomic_init(&count, 0);
		run_group(size, barrier_rank, NULL, &count);
		printf(", barrier %.2fs", since(t));
		t = pg_now_ns();
		run_group(size, ring_rank, NULL, NULL);
		run_group(size, pipe_rank, NULL, NULL);
		run_group(size, pairs_rank, NULL, NULL);
		run_group(size, p2p_errors_rank, NULL, NULL);
		printf(", send/recv %.2fs", since(t));
		t = pg_now_ns();
		w = test_abort(size);
		worst = w > worst ? w : worst;
		test_storm(size);
		printf(", abort %.2fs", since(t));
		run_group(size, stats_rank, NULL, NULL);
		printf("\n");
		fflush(stdout);
	}
	printf("slowest return after an abort: %.0f us; total %.2fs\n",
	       (double)worst / 1e3, since(t0));
	if (failures) {
		fprintf(stderr, "%d failures\n", atomic_load(&failures));
		return 1;
	}
	return 0;
}
