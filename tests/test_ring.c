/*
 * test_ring.c - stress and hostile-peer tests of the shared-memory rings,
 * arenas and segment layout (shm/ring.h, shm/segment.h).
 *
 * The stress cases move millions of messages between two threads (and,
 * once, between two processes over a sealed memfd) through rings of 8 and
 * 1024 slots whose 32-bit counters start just below UINT32_MAX, with
 * payloads of every length in the arenas, random batch sizes, random
 * pauses on both sides and the consumer sleeping on an eventfd doorbell
 * whenever it runs dry.  Every message's content is a function of its
 * sequence number, so the consumer checks order, entry checksum, arena
 * bounds and every payload byte.  A consumer asleep for 2 s while entries
 * are published is a lost wake-up and fails the test.
 *
 * Built twice: test_ring with the tree's flags (ASan and UBSan under
 * --enable-sanitizers) and test_ring_tsan under ThreadSanitizer with
 * fewer messages (tests/test-ring-tsan.sh runs it).
 * TEST_RING_SCALE (a factor, e.g. 0.1 or 4) scales the message counts.
 *
 * Not a benchmark: bench/ipc measures the rings.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "shm/ring.h"
#include "shm/segment.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/*
 * Messages per stress case; AddressSanitizer runs half, ThreadSanitizer a
 * sixteenth.  The small rings cost a doorbell every few messages, hence
 * fewer of them.
 */
#define ONEWAY_MSGS (UNDER_TSAN ? 256u << 10 : UNDER_ASAN ? 2u << 20 : 4u << 20)
#define ONEWAY_SMALL_MSGS (ONEWAY_MSGS / 2)
#define PINGPONG_MSGS (UNDER_TSAN ? 32u << 10 : 512u << 10 >> UNDER_ASAN)
#define FORK_MSGS (UNDER_TSAN ? 16u << 10 : 256u << 10 >> UNDER_ASAN)

#define WATCHDOG_MS 2000	/* a sleep this long with entries pending fails */
#define HANG_S 240		/* the whole program */
#define PAUSE_ONE_IN 16		/* batches followed by a random pause */

static double g_scale = 1.0;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "test_ring: FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CHECK(cond) do { \
	if (!(cond)) \
		die("%s:%d: %s", __FILE__, __LINE__, #cond); \
} while (0)

static void on_alarm(int sig)
{
	static const char msg[] = "test_ring: FAIL: still running after "
		"240 s: a side is stuck (lost wake-up or livelock)\n";

	(void)sig;
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

static uint64_t scaled(uint64_t n)
{
	uint64_t s = (uint64_t)(n * g_scale);

	return s ? s : 1;
}

/* ---- randomness and message content ---- */

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *g)
{
	g->s ^= g->s >> 12;
	g->s ^= g->s << 25;
	g->s ^= g->s >> 27;
	return g->s * 0x2545f4914f6cdd1dull;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint64_t sum_step(uint64_t h, uint64_t w)
{
	return (h ^ w) * 0x100000001b3ull + (h >> 29);
}

/*
 * The payload length of message seq: mostly short, some medium, and now
 * and then anything up to the whole arena (which must still be allocated
 * once the reader has caught up).
 */
static uint32_t msg_len(uint64_t salt, uint64_t seq, uint32_t arena_bytes)
{
	uint64_t h = mix64(salt ^ (seq * 0x9e3779b97f4a7c15ull));
	uint32_t pick = (uint32_t)(h % 1024), r = (uint32_t)(h >> 32);

	if (pick < 614)
		return r % 65;
	if (pick < 1022)
		return 65 + r % 448;
	if (pick == 1022)
		return r % (arena_bytes + 1);
	return arena_bytes - r % 2 * (r % 64);
}

static uint64_t payload_word(uint64_t seed, uint32_t j)
{
	return seed + (uint64_t)(j + 1) * 0x9e3779b97f4a7c15ull;
}

/* payload_write - fill p (len bytes) with seed's pattern; its checksum. */
static uint64_t payload_write(uint8_t *p, uint32_t len, uint64_t seed)
{
	uint64_t h = seed, w;
	uint32_t j;

	for (j = 0; 8 * j + 8 <= len; j++) {
		w = payload_word(seed, j);
		memcpy(p + 8 * j, &w, 8);
		h = sum_step(h, w);
	}
	if (len % 8) {
		w = payload_word(seed, j);
		memcpy(p + 8 * j, &w, len % 8);
		h = sum_step(h, w & ((1ull << 8 * (len % 8)) - 1));
	}
	return h;
}

/*
 * payload_check - the checksum of the len bytes at p (into *sum) and the
 * number of 8-byte words that differ from seed's pattern.
 */
static uint32_t payload_check(const uint8_t *p, uint32_t len, uint64_t seed,
			      uint64_t *sum)
{
	uint64_t h = seed, w, mask = ~0ull;
	uint32_t j, bad = 0;

	for (j = 0; 8 * j < len; j++) {
		uint32_t n = len - 8 * j < 8 ? len - 8 * j : 8;

		w = 0;
		memcpy(&w, p + 8 * j, n);
		if (n < 8)
			mask = (1ull << 8 * n) - 1;
		bad += w != (payload_word(seed, j) & mask);
		h = sum_step(h, w);
	}
	*sum = h;
	return bad;
}

/* ---- entries ---- */

/* One 64-byte ring entry of the stress cases. */
struct entry {
	uint64_t seq;		/* message number, from 0 */
	uint32_t off;		/* payload: len bytes at off in the arena */
	uint32_t len;
	uint64_t payload_sum;	/* payload_write()'s checksum */
	uint64_t fill[4];	/* mix64 of (salt, seq) */
	uint64_t entry_sum;	/* of the 56 bytes above */
};
static_assert(sizeof(struct entry) == PG_SLOT_BYTES, "entry");

static uint64_t entry_hash(const struct entry *e)
{
	uint64_t w[7], h = 0;

	memcpy(w, e, sizeof(w));
	for (int i = 0; i < 7; i++)
		h = sum_step(h, w[i]);
	return h;
}

static uint64_t fill_word(uint64_t salt, uint64_t seq, int i)
{
	return mix64(salt + 4 * seq + i);
}

static void entry_fill(struct entry *e, uint64_t salt, uint64_t seq,
		       uint32_t off, uint32_t len, uint64_t psum)
{
	e->seq = seq;
	e->off = off;
	e->len = len;
	e->payload_sum = psum;
	for (int i = 0; i < 4; i++)
		e->fill[i] = fill_word(salt, seq, i);
	e->entry_sum = entry_hash(e);
}

/* ---- a channel: one ring, its arena, its consumer's doorbell ---- */

struct chan {
	const char *name;
	struct pg_ring_ctl *ctl;
	void *slots;		/* n_slots × PG_SLOT_BYTES */
	uint32_t n_slots;
	uint8_t *arena;		/* arena_bytes */
	uint32_t arena_bytes;
	uint64_t salt;		/* message content */
	int bell;		/* eventfd: the producer rings the consumer */
	pid_t peer;		/* the other process, or 0 for a thread */
};

/* The producer's end. */
struct tx {
	const struct chan *c;
	struct pg_ring r;
	struct pg_arena a;
	uint64_t *end;		/* (n_slots) the arena's bookkeeping */
	uint64_t seq;		/* next message */
	uint32_t batch;		/* entries left before publishing */
	struct rng rng;
	uint64_t n_publish;	/* batches published */
	uint64_t n_rung;	/* doorbells rung */
};

/* The consumer's end. */
struct rx {
	const struct chan *c;
	struct pg_ring r;
	uint64_t seq;		/* next message expected */
	uint32_t batch;		/* entries left before releasing */
	struct rng rng;
	uint64_t n_sleep;	/* waits on the doorbell */
};

static void spin(uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		atomic_signal_fence(memory_order_seq_cst);
}

/* maybe_pause - now and then yield, spin or sleep a few microseconds. */
static void maybe_pause(struct rng *g)
{
	uint64_t r = rng_next(g);
	struct timespec ts = { 0, 0 };

	if (r % PAUSE_ONE_IN)
		return;
	switch ((r >> 8) % 3) {
	case 0:
		sched_yield();
		break;
	case 1:
		spin((r >> 16) % 4096);
		break;
	default:
		ts.tv_nsec = 1000 + (r >> 16) % 30000;
		nanosleep(&ts, NULL);
	}
}

static void bell_ring(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) != sizeof(one))
		die("eventfd write: %s", strerror(errno));
}

static void peer_check(const struct chan *c)
{
	int st;

	if (c->peer > 0 && waitpid(c->peer, &st, WNOHANG) == c->peer)
		die("%s: the peer process ended (status %#x) while this side waited",
		    c->name, st);
	if (c->peer < 0 && getppid() != -c->peer)
		die("%s: the parent process ended while this side waited", c->name);
}

static void tx_init(struct tx *t, const struct chan *c, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	t->c = c;
	t->rng.s = seed | 1;
	t->end = calloc(c->n_slots, sizeof(*t->end));
	CHECK(t->end);
	pg_ring_attach(&t->r, c->ctl, c->slots, c->n_slots, 1);
	pg_arena_init(&t->a, c->arena, c->arena_bytes, t->end, c->n_slots,
		      t->r.local);
	t->batch = 1;
}

static void rx_init(struct rx *x, const struct chan *c, uint64_t seed)
{
	memset(x, 0, sizeof(*x));
	x->c = c;
	x->rng.s = seed | 1;
	pg_ring_attach(&x->r, c->ctl, c->slots, c->n_slots, 0);
	x->batch = 1;
}

/* tx_flush - publish what is committed; ring the doorbell when asked. */
static void tx_flush(struct tx *t)
{
	if (t->r.local == t->r.shared)
		return;
	t->n_publish++;
	if (pg_ring_publish(&t->r)) {
		bell_ring(t->c->bell);
		t->n_rung++;
	}
}

/* tx_alloc - the arena run of the next entry, reclaiming when short. */
static uint8_t *tx_alloc(struct tx *t, uint32_t len, uint32_t *off)
{
	uint8_t *p = pg_arena_alloc(&t->a, t->r.local, len, off);
	uint32_t head;

	if (p)
		return p;
	head = pg_ring_consumed(&t->r);
	if (pg_ring_corrupt(&t->r))
		die("%s: the producer saw a corrupt head", t->c->name);
	pg_arena_reclaim(&t->a, head);
	p = pg_arena_alloc(&t->a, t->r.local, len, off);
	if (!p && head == t->r.local)
		die("%s: the arena refused %u of %u bytes with every run free "
		    "(alloc %llu, freed %llu)", t->c->name, len,
		    t->c->arena_bytes, (unsigned long long)t->a.alloc,
		    (unsigned long long)t->a.freed);
	return p;
}

/*
 * tx_try - commit message t->seq; 0 when the ring or the arena has no
 * room now.  Publishes at the end of a random-sized batch.
 */
static int tx_try(struct tx *t)
{
	const struct chan *c = t->c;
	uint32_t len = msg_len(c->salt, t->seq, c->arena_bytes), off;
	struct entry *e = pg_ring_reserve(&t->r);
	uint8_t *p;

	if (!e) {
		if (pg_ring_corrupt(&t->r))
			die("%s: the producer saw a corrupt head", c->name);
		return 0;
	}
	p = tx_alloc(t, len, &off);
	if (!p)
		return 0;
	entry_fill(e, c->salt, t->seq, off, len,
		   payload_write(p, len, mix64(c->salt ^ t->seq)));
	pg_ring_commit(&t->r);
	t->seq++;
	if (--t->batch == 0) {
		tx_flush(t);
		t->batch = 1 + rng_next(&t->rng) % (2 * c->n_slots);
		maybe_pause(&t->rng);
	}
	return 1;
}

static void entry_verify(const struct chan *c, const struct entry *e,
			 uint64_t seq)
{
	uint64_t sum;

	if (e->seq != seq)
		die("%s: expected message %llu, got %llu", c->name,
		    (unsigned long long)seq, (unsigned long long)e->seq);
	if (e->entry_sum != entry_hash(e))
		die("%s: message %llu: entry checksum wrong", c->name,
		    (unsigned long long)seq);
	for (int i = 0; i < 4; i++)
		if (e->fill[i] != fill_word(c->salt, seq, i))
			die("%s: message %llu: entry word %d wrong", c->name,
			    (unsigned long long)seq, i);
	if (e->len != msg_len(c->salt, seq, c->arena_bytes) ||
	    !pg_arena_check(c->arena_bytes, e->off, e->len))
		die("%s: message %llu: run (%u, %u) wrong or outside the arena",
		    c->name, (unsigned long long)seq, e->off, e->len);
	if (payload_check(c->arena + e->off, e->len, mix64(c->salt ^ seq), &sum) ||
	    sum != e->payload_sum)
		die("%s: message %llu: payload of %u bytes at %u corrupted",
		    c->name, (unsigned long long)seq, e->len, e->off);
}

/* rx_try - check and consume message x->seq; 0 when the ring is empty. */
static int rx_try(struct rx *x)
{
	const struct entry *e = pg_ring_peek(&x->r);
	struct entry copy;

	if (!e) {
		if (pg_ring_corrupt(&x->r))
			die("%s: the consumer saw a corrupt tail", x->c->name);
		return 0;
	}
	memcpy(&copy, e, sizeof(copy));
	entry_verify(x->c, &copy, x->seq);
	pg_ring_consume(&x->r);
	x->seq++;
	if (--x->batch == 0) {
		pg_ring_release(&x->r);
		x->batch = 1 + rng_next(&x->rng) % (2 * x->c->n_slots);
		maybe_pause(&x->rng);
	}
	return 1;
}

/*
 * rx_wait_bell - block on the doorbell.  Waking up from the watchdog's
 * timeout with entries published means the producer never rang: a lost
 * wake-up (the grace period covers a producer caught between its publish
 * and its write to the eventfd).
 */
static void rx_wait_bell(struct rx *x)
{
	struct pollfd p = { .fd = x->c->bell, .events = POLLIN };
	uint64_t v;
	int rc, late = 0;

	for (;;) {
		rc = poll(&p, 1, late ? 500 : WATCHDOG_MS);
		if (rc > 0)
			break;
		if (rc < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (rc < 0)
			continue;
		if (atomic_load_explicit(&x->c->ctl->tail, memory_order_acquire) !=
		    x->r.local) {
			if (late)
				die("%s: lost wake-up: the consumer slept %.1f s "
				    "with entries published",
				    x->c->name, WATCHDOG_MS / 1000.0 + 0.5);
			late = 1;
			continue;
		}
		peer_check(x->c);
	}
	if (read(x->c->bell, &v, sizeof(v)) != sizeof(v))
		die("eventfd read: %s", strerror(errno));
}

/*
 * rx_idle - the ring is empty: give back what was consumed, spin a
 * little, then sleep on the doorbell unless entries arrived meanwhile.
 */
static void rx_idle(struct rx *x)
{
	uint64_t r = rng_next(&x->rng);
	uint32_t n = r % 4 ? (uint32_t)(r >> 8) % 512 : 0;

	pg_ring_release(&x->r);
	for (uint32_t i = 0; i < n; i++) {
		if (pg_ring_peek(&x->r))
			return;
		spin(32);
	}
	if (!pg_ring_prepare_sleep(&x->r))
		return;
	x->n_sleep++;
	rx_wait_bell(x);
	pg_ring_awake(&x->r);
}

/* ---- segments ---- */

/* A segment in the heap: header and regions as pg_seg_layout puts them. */
static struct pg_seg_header *seg_heap(uint32_t sq_slots, uint32_t cq_slots,
				      uint32_t sq_arena, uint32_t cq_arena)
{
	struct pg_seg_header h;
	void *seg;

	CHECK(pg_seg_layout(&h, sq_slots, cq_slots, sq_arena, cq_arena) == 0);
	seg = aligned_alloc(4096, h.seg_bytes);
	CHECK(seg);
	memset(seg, 0, h.seg_bytes);
	memcpy(seg, &h, sizeof(h));
	return seg;
}

/* Counters set before either side attaches: both wrap soon. */
static void seg_counters(struct pg_seg_header *h, uint32_t sq_start,
			 uint32_t cq_start)
{
	atomic_store(&h->sq.tail, sq_start);
	atomic_store(&h->sq.head, sq_start);
	atomic_store(&h->cq.tail, cq_start);
	atomic_store(&h->cq.head, cq_start);
}

static int bell_new(void)
{
	int fd = eventfd(0, EFD_CLOEXEC);

	if (fd < 0)
		die("eventfd: %s", strerror(errno));
	return fd;
}

/* The submission (0) or completion (1) channel of a segment. */
static void seg_chan(struct chan *c, struct pg_seg_header *h, int cq,
		     const char *name, int bell, pid_t peer)
{
	uint8_t *base = (uint8_t *)h;

	c->name = name;
	c->ctl = cq ? &h->cq : &h->sq;
	c->slots = base + (cq ? h->cq_off : h->sq_off);
	c->n_slots = cq ? h->cq_slots : h->sq_slots;
	c->arena = base + (cq ? h->cq_arena_off : h->sq_arena_off);
	c->arena_bytes = cq ? h->cq_arena : h->sq_arena;
	c->salt = cq ? 0x43514350434f4d50ull : 0x535153554247454eull;
	c->bell = bell;
	c->peer = peer;
}

/* ---- 1. one way: a producer thread, a consumer thread ---- */

struct oneway {
	struct tx t;
	struct rx x;
	uint64_t n;
};

static void *oneway_producer(void *arg)
{
	struct oneway *w = arg;

	prctl(PR_SET_TIMERSLACK, 1UL);
	while (w->t.seq < w->n) {
		if (tx_try(&w->t))
			continue;
		tx_flush(&w->t);
		sched_yield();
	}
	tx_flush(&w->t);
	return NULL;
}

static void *oneway_consumer(void *arg)
{
	struct oneway *w = arg;

	prctl(PR_SET_TIMERSLACK, 1UL);
	while (w->x.seq < w->n)
		if (!rx_try(&w->x))
			rx_idle(&w->x);
	pg_ring_release(&w->x.r);
	return NULL;
}

static void report(const char *name, uint64_t n, double s, uint64_t sleeps,
		   uint64_t rung, uint64_t batches)
{
	printf("test_ring: %-28s %8llu messages %6.2f s (%5.2f M/s), "
	       "%llu sleeps, %llu doorbells, %llu batches\n", name,
	       (unsigned long long)n, s, n / s / 1e6,
	       (unsigned long long)sleeps, (unsigned long long)rung,
	       (unsigned long long)batches);
	fflush(stdout);
}

/* Sleeps must be common, or the sleep/wake protocol went untested. */
static void check_sleeps(const char *name, uint64_t sleeps, uint64_t n)
{
	uint64_t want = n / 4096 < 50 ? n / 4096 : 50;

	if (sleeps < want)
		die("%s: only %llu sleeps in %llu messages: the doorbell path "
		    "was hardly exercised", name, (unsigned long long)sleeps,
		    (unsigned long long)n);
}

static void test_oneway(uint32_t n_slots, uint32_t arena_bytes,
			uint32_t start, uint64_t n)
{
	struct pg_seg_header *h = seg_heap(n_slots, 8, arena_bytes, 4096);
	struct oneway *w = calloc(1, sizeof(*w));
	struct chan c;
	pthread_t tp, tc;
	char name[64];
	double t0;

	CHECK(w);
	snprintf(name, sizeof(name), "one way, %u slots", n_slots);
	seg_counters(h, start, 0);
	seg_chan(&c, h, 0, name, bell_new(), 0);
	tx_init(&w->t, &c, 0x1234 + n_slots);
	rx_init(&w->x, &c, 0x5678 + n_slots);
	w->n = n;
	t0 = pg_now_s();
	CHECK(pthread_create(&tc, NULL, oneway_consumer, w) == 0);
	CHECK(pthread_create(&tp, NULL, oneway_producer, w) == 0);
	CHECK(pthread_join(tp, NULL) == 0);
	CHECK(pthread_join(tc, NULL) == 0);
	CHECK(atomic_load(&h->sq.tail) == (uint32_t)(start + n));
	CHECK(atomic_load(&h->sq.head) == (uint32_t)(start + n));
	report(name, n, pg_now_s() - t0, w->x.n_sleep, w->t.n_rung, w->t.n_publish);
	check_sleeps(name, w->x.n_sleep, n);
	close(c.bell);
	free(w->t.end);
	free(w);
	free(h);
}

/* ---- 2. ping-pong: a client and a daemon, sq and cq ---- */

/*
 * The client keeps up to `window` requests in flight; it may sleep on the
 * completion doorbell only while answers are due (nothing rings when the
 * submission ring gains room: then it polls).
 */
static void client_run(struct tx *t, struct rx *x, uint64_t n)
{
	uint64_t window = 1 + rng_next(&t->rng) % (4 * t->c->n_slots);
	int progress;

	while (x->seq < n) {
		progress = 0;
		while (t->seq < n && t->seq - x->seq < window && tx_try(t))
			progress = 1;
		while (rx_try(x))
			progress = 1;
		if (progress) {
			if (rng_next(&t->rng) % 64 == 0)
				window = 1 + rng_next(&t->rng) % (4 * t->c->n_slots);
			continue;
		}
		tx_flush(t);
		if (x->seq < t->seq) {
			rx_idle(x);
		} else {
			pg_ring_release(&x->r);
			sched_yield();
		}
	}
	pg_ring_release(&x->r);
}

/* The daemon answers every request, in order, with one completion. */
static void daemon_run(struct rx *x, struct tx *t, uint64_t n)
{
	while (x->seq < n) {
		if (!rx_try(x)) {
			tx_flush(t);
			rx_idle(x);
			continue;
		}
		while (!tx_try(t)) {
			pg_ring_release(&x->r);
			tx_flush(t);
			sched_yield();
		}
	}
	tx_flush(t);
	pg_ring_release(&x->r);
}

/* One side of a ping-pong: its producer end and its consumer end. */
struct side {
	struct tx t;
	struct rx x;
	uint64_t n;
};

static void *client_thread(void *arg)
{
	struct side *s = arg;

	prctl(PR_SET_TIMERSLACK, 1UL);
	client_run(&s->t, &s->x, s->n);
	return NULL;
}

static void *daemon_thread(void *arg)
{
	struct side *s = arg;

	prctl(PR_SET_TIMERSLACK, 1UL);
	daemon_run(&s->x, &s->t, s->n);
	return NULL;
}

static void test_pingpong(uint32_t sq_slots, uint32_t cq_slots, uint64_t n)
{
	struct pg_seg_header *h = seg_heap(sq_slots, cq_slots, 8192, 65536);
	struct side *cl = calloc(1, sizeof(*cl)), *dm = calloc(1, sizeof(*dm));
	struct chan sq, cq;
	pthread_t tcl, tdm;
	char name[64];
	double t0;

	CHECK(cl && dm);
	snprintf(name, sizeof(name), "ping-pong, sq %u cq %u", sq_slots, cq_slots);
	seg_counters(h, UINT32_MAX - 2, UINT32_MAX - cq_slots - 3);
	seg_chan(&sq, h, 0, "ping-pong sq", bell_new(), 0);
	seg_chan(&cq, h, 1, "ping-pong cq", bell_new(), 0);
	rx_init(&dm->x, &sq, 11);
	tx_init(&dm->t, &cq, 12);
	tx_init(&cl->t, &sq, 13);
	rx_init(&cl->x, &cq, 14);
	cl->n = dm->n = n;
	t0 = pg_now_s();
	CHECK(pthread_create(&tdm, NULL, daemon_thread, dm) == 0);
	CHECK(pthread_create(&tcl, NULL, client_thread, cl) == 0);
	CHECK(pthread_join(tcl, NULL) == 0);
	CHECK(pthread_join(tdm, NULL) == 0);
	report(name, n, pg_now_s() - t0, cl->x.n_sleep + dm->x.n_sleep,
	       cl->t.n_rung + dm->t.n_rung, cl->t.n_publish + dm->t.n_publish);
	check_sleeps(name, cl->x.n_sleep, n);
	check_sleeps(name, dm->x.n_sleep, n);
	close(sq.bell);
	close(cq.bell);
	free(cl->t.end);
	free(dm->t.end);
	free(cl);
	free(dm);
	free(h);
}

/* ---- 3. ping-pong between two processes over a sealed memfd ---- */

/*
 * The daemon's part: a segment in a memfd, laid out, sized and sealed
 * against growing and shrinking.  Returns the fd; *map its mapping.
 */
static int memfd_segment(uint32_t sq_slots, uint32_t cq_slots,
			 struct pg_seg_header **map)
{
	struct pg_seg_header h;
	int fd = memfd_create("pagoda-test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		die("memfd_create: %s", strerror(errno));
	CHECK(pg_seg_layout(&h, sq_slots, cq_slots, 16384, 16384) == 0);
	if (ftruncate(fd, (off_t)h.seg_bytes) < 0)
		die("ftruncate: %s", strerror(errno));
	*map = mmap(NULL, h.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	memcpy(*map, &h, sizeof(h));
	seg_counters(*map, UINT32_MAX - 5, UINT32_MAX);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		die("F_ADD_SEALS: %s", strerror(errno));
	return fd;
}

/* The client's part: check the seals and the header, then map it all. */
static struct pg_seg_header *memfd_client_map(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	char err[256];
	void *m;

	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
	    (F_SEAL_SHRINK | F_SEAL_GROW))
		die("the segment is not sealed (seals %#x)", seals);
	if (fstat(fd, &st) < 0)
		die("fstat: %s", strerror(errno));
	m = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	if (pg_seg_check(m, st.st_size, err, sizeof(err)) < 0)
		die("the client refused the segment: %s", err);
	return m;
}

static void fork_client(int fd, int sq_bell, int cq_bell, pid_t parent,
			uint64_t n)
{
	struct pg_seg_header *h;
	struct chan sq, cq;
	struct side *s = calloc(1, sizeof(*s));
	double t0 = pg_now_s();

	alarm(HANG_S);
	prctl(PR_SET_TIMERSLACK, 1UL);
	CHECK(s);
	h = memfd_client_map(fd);
	seg_chan(&sq, h, 0, "fork sq", sq_bell, -parent);
	seg_chan(&cq, h, 1, "fork cq", cq_bell, -parent);
	tx_init(&s->t, &sq, 21);
	rx_init(&s->x, &cq, 22);
	client_run(&s->t, &s->x, n);
	report("fork ping-pong, client side", n, pg_now_s() - t0, s->x.n_sleep,
	       s->t.n_rung, s->t.n_publish);
	check_sleeps("fork ping-pong client", s->x.n_sleep, n);
	free(s->t.end);
	free(s);
	exit(0);
}

static void test_fork(uint32_t sq_slots, uint32_t cq_slots, uint64_t n)
{
	struct pg_seg_header *h;
	int fd = memfd_segment(sq_slots, cq_slots, &h);
	int sq_bell = bell_new(), cq_bell = bell_new(), st;
	struct chan sq, cq;
	struct side *s;
	pid_t child;
	double t0 = pg_now_s();

	fflush(NULL);
	child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0)
		fork_client(fd, sq_bell, cq_bell, getppid(), n);
	s = calloc(1, sizeof(*s));
	CHECK(s);
	seg_chan(&sq, h, 0, "fork sq", sq_bell, child);
	seg_chan(&cq, h, 1, "fork cq", cq_bell, child);
	rx_init(&s->x, &sq, 23);
	tx_init(&s->t, &cq, 24);
	prctl(PR_SET_TIMERSLACK, 1UL);
	daemon_run(&s->x, &s->t, n);
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
		die("fork ping-pong: the client process failed (status %#x)", st);
	report("fork ping-pong, daemon side", n, pg_now_s() - t0, s->x.n_sleep,
	       s->t.n_rung, s->t.n_publish);
	check_sleeps("fork ping-pong daemon", s->x.n_sleep, n);
	free(s->t.end);
	free(s);
	munmap(h, h->seg_bytes);
	close(fd);
	close(sq_bell);
	close(cq_bell);
}

/* ---- 4. hostile peers ---- */

#define HN 8u			/* slots of the hostile-peer rings */

struct fixture {
	struct pg_ring_ctl ctl;
	_Alignas(64) uint8_t slots[HN * PG_SLOT_BYTES];
	struct pg_ring p, c;	/* producer's and consumer's views */
};

/* Every slot poisoned; counters at start; both views attached. */
static void fixture_init(struct fixture *f, uint32_t start)
{
	memset(f, 0, sizeof(*f));
	for (uint32_t i = 0; i < HN; i++)
		memset(f->slots + i * PG_SLOT_BYTES, 0xee, PG_SLOT_BYTES);
	atomic_store(&f->ctl.tail, start);
	atomic_store(&f->ctl.head, start);
	pg_ring_attach(&f->p, &f->ctl, f->slots, HN, 1);
	pg_ring_attach(&f->c, &f->ctl, f->slots, HN, 0);
}

/* The legitimate producer fills one entry, tagged with its number. */
static void fixture_put(struct fixture *f)
{
	uint64_t *slot = pg_ring_reserve(&f->p);

	CHECK(slot);
	slot[0] = 0x7a67000000000000ull | f->p.local;
	pg_ring_commit(&f->p);
}

/* ... and publishes n of them. */
static void fixture_publish(struct fixture *f, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		fixture_put(f);
	pg_ring_publish(&f->p);
}

/* The consumer reads what it will; every entry must be a published one. */
static uint32_t fixture_drain(struct fixture *f, uint32_t published_end)
{
	const uint64_t *e;
	uint32_t n = 0;

	while ((e = pg_ring_peek(&f->c))) {
		CHECK(n++ < 2 * HN);
		CHECK(*e == (0x7a67000000000000ull | f->c.local));
		CHECK(published_end - f->c.local - 1 < HN);
		pg_ring_consume(&f->c);
	}
	return n;
}

/*
 * A producer publishes 5 entries; the consumer reads 3 and releases 1;
 * then the producer's tail turns to garbage.  The consumer must still
 * deliver the 2 it had seen, then stop, corrupt, for good.
 */
static void hostile_tail_once(uint32_t start, uint32_t bad)
{
	struct fixture f;
	uint32_t n;

	fixture_init(&f, start);
	fixture_publish(&f, 5);
	for (int i = 0; i < 3; i++) {
		CHECK(pg_ring_peek(&f.c));
		pg_ring_consume(&f.c);
		if (i == 0)
			pg_ring_release(&f.c);
	}
	atomic_store(&f.ctl.tail, bad);
	n = fixture_drain(&f, start + 5);
	CHECK(n == 2);
	CHECK(pg_ring_corrupt(&f.c));
	atomic_store(&f.ctl.tail, start + 5);
	CHECK(pg_ring_peek(&f.c) == NULL);
}

static void test_hostile_tail(void)
{
	static const uint32_t starts[] = { 0, 100, UINT32_MAX - 2, UINT32_MAX };

	for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		uint32_t s = starts[i];
		const uint32_t bad[] = {
			s + 4, s + 3, s + 1, s, s - 1,	/* backwards */
			s + 1 + HN + 1, s + 5 + HN, s + 5 + 0x80000000u,
			s + 5 - 0x80000000u, s + 5 + UINT32_MAX, s - HN,
		};

		for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++)
			hostile_tail_once(s, bad[j]);
	}
}

/* A tail of exactly n entries past the released head is legitimate. */
static void test_tail_bounds(void)
{
	struct fixture f;
	uint32_t s = UINT32_MAX - 3;

	fixture_init(&f, s);
	fixture_publish(&f, HN);
	CHECK(fixture_drain(&f, s + HN) == HN);
	CHECK(!pg_ring_corrupt(&f.c));

	/* consumed but not released: still at most n past the released head */
	fixture_init(&f, s);
	fixture_publish(&f, 3);
	CHECK(fixture_drain(&f, s + 3) == 3);
	atomic_store(&f.ctl.tail, s + HN + 1);
	CHECK(pg_ring_peek(&f.c) == NULL && pg_ring_corrupt(&f.c));
}

/* Garbage already in place when a side attaches. */
static void test_hostile_attach(void)
{
	struct fixture f;
	uint32_t s = UINT32_MAX - 1;

	fixture_init(&f, s);
	atomic_store(&f.ctl.tail, s + HN + 1);
	pg_ring_attach(&f.c, &f.ctl, f.slots, HN, 0);
	CHECK(pg_ring_peek(&f.c) == NULL);
	CHECK(pg_ring_corrupt(&f.c));

	fixture_init(&f, s);
	atomic_store(&f.ctl.tail, s - 1);	/* head ahead of tail */
	pg_ring_attach(&f.c, &f.ctl, f.slots, HN, 0);
	CHECK(pg_ring_peek(&f.c) == NULL);
	CHECK(pg_ring_corrupt(&f.c));

	fixture_init(&f, s);
	atomic_store(&f.ctl.head, s + 1);	/* consumed what was never published */
	pg_ring_attach(&f.p, &f.ctl, f.slots, HN, 1);
	CHECK(pg_ring_reserve(&f.p) == NULL);
	CHECK(pg_ring_corrupt(&f.p));

	fixture_init(&f, s);
	atomic_store(&f.ctl.tail, s + HN);	/* full, legitimately */
	pg_ring_attach(&f.c, &f.ctl, f.slots, HN, 0);
	CHECK(!pg_ring_corrupt(&f.c));
	pg_ring_attach(&f.p, &f.ctl, f.slots, HN, 1);
	CHECK(pg_ring_reserve(&f.p) == NULL && !pg_ring_corrupt(&f.p));
}

/* A full ring whose consumer writes head = bad: the producer stops. */
static void hostile_head_once(uint32_t start, uint32_t bad, int via_consumed)
{
	struct fixture f;

	fixture_init(&f, start);
	fixture_publish(&f, HN);
	CHECK(pg_ring_reserve(&f.p) == NULL && !pg_ring_corrupt(&f.p));
	atomic_store(&f.ctl.head, bad);
	if (via_consumed)
		CHECK(pg_ring_consumed(&f.p) == start);
	CHECK(pg_ring_reserve(&f.p) == NULL);
	CHECK(pg_ring_corrupt(&f.p));
	atomic_store(&f.ctl.head, start + HN);
	CHECK(pg_ring_reserve(&f.p) == NULL);
}

static void test_hostile_head(void)
{
	static const uint32_t starts[] = { 0, 7, UINT32_MAX - 4, UINT32_MAX };

	for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		uint32_t s = starts[i];
		const uint32_t bad[] = {
			s + HN + 1, s + HN + 100, s - 1, s - HN,
			s + 0x80000000u, s + UINT32_MAX,
		};

		for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
			hostile_head_once(s, bad[j], 0);
			hostile_head_once(s, bad[j], 1);
		}
	}
}

/* A legitimate head lets the producer reuse exactly the slots released. */
static void test_head_bounds(void)
{
	struct fixture f;
	uint32_t s = UINT32_MAX - 1, n = 0;

	fixture_init(&f, s);
	fixture_publish(&f, HN);
	atomic_store(&f.ctl.head, s + 3);
	while (pg_ring_reserve(&f.p)) {
		pg_ring_commit(&f.p);
		n++;
	}
	CHECK(n == 3 && !pg_ring_corrupt(&f.p));
	CHECK(pg_ring_consumed(&f.p) == s + 3);
	atomic_store(&f.ctl.head, s + 2);	/* backwards */
	pg_ring_consumed(&f.p);
	CHECK(pg_ring_corrupt(&f.p));
}

/* The flag and the answers of the sleep protocol, on one thread. */
static void test_sleep_flag(void)
{
	struct fixture f;

	fixture_init(&f, UINT32_MAX);
	CHECK(pg_ring_prepare_sleep(&f.c) == 1);
	CHECK(atomic_load(&f.ctl.sleeping) == 1);
	CHECK(pg_ring_publish(&f.p) == 0);	/* nothing new: no doorbell */
	fixture_publish(&f, 1);
	CHECK(f.p.shared == 0);
	pg_ring_awake(&f.c);
	CHECK(atomic_load(&f.ctl.sleeping) == 0);
	CHECK(pg_ring_prepare_sleep(&f.c) == 0);	/* an entry is there */
	CHECK(atomic_load(&f.ctl.sleeping) == 0);
	fixture_put(&f);
	CHECK(pg_ring_publish(&f.p) == 0);	/* awake: no doorbell */
	CHECK(fixture_drain(&f, 1) == 2);
	CHECK(pg_ring_prepare_sleep(&f.c) == 1);
	fixture_put(&f);
	CHECK(pg_ring_publish(&f.p) == 1);	/* asleep: ring */
}

/* ---- 5. arenas ---- */

static int arena_ok_ref(uint32_t size, uint32_t off, uint32_t len)
{
	return (uint64_t)off + len <= size;
}

static void test_arena_check(void)
{
	static const uint32_t sizes[] = { 0, 1, 7, 4096, 65536, UINT32_MAX - 1, UINT32_MAX };
	static const uint32_t edge[] = {
		0, 1, 2, 63, 64, 4095, 4096, 4097, 65535, 65536,
		0x7fffffffu, 0x80000000u, UINT32_MAX - 4096, UINT32_MAX - 1, UINT32_MAX,
	};
	size_t ns = sizeof(sizes) / sizeof(sizes[0]), ne = sizeof(edge) / sizeof(edge[0]);

	for (size_t i = 0; i < ns; i++)
		for (size_t j = 0; j < ne; j++)
			for (size_t k = 0; k < ne; k++) {
				uint32_t s = sizes[i], o = edge[j], l = edge[k];

				CHECK(pg_arena_check(s, o, l) == arena_ok_ref(s, o, l));
				CHECK(pg_arena_check(s, s - o, l) == arena_ok_ref(s, s - o, l));
				CHECK(pg_arena_check(s, o, s - o + l) ==
				      arena_ok_ref(s, o, s - o + l));
			}
	/* wrapping sums that a naive off + len <= size would let through */
	CHECK(!pg_arena_check(4096, 2, UINT32_MAX - 1));
	CHECK(!pg_arena_check(4096, UINT32_MAX, 1));
	CHECK(!pg_arena_check(4096, UINT32_MAX - 4094, 4096));
	CHECK(!pg_arena_check(4096, 4096, 1));
	CHECK(pg_arena_check(4096, 4096, 0));
	CHECK(pg_arena_check(4096, 0, 4096));
}

/* A live run: entry k's bytes, checked when the reader consumes k. */
struct run {
	uint32_t off, len;
};

static void arena_consume(struct pg_arena *a, const struct run *runs,
			  uint32_t mask, uint32_t k, uint64_t salt)
{
	const struct run *r = &runs[k & mask];
	uint64_t sum;

	CHECK(payload_check(a->base + r->off, r->len, mix64(salt ^ k), &sum) == 0);
}

/* No live run overlaps the new one; no run leaves the arena. */
static void arena_no_overlap(const struct run *runs, uint32_t mask,
			     uint32_t head, uint32_t k, uint32_t size)
{
	const struct run *n = &runs[k & mask];

	CHECK((uint64_t)n->off + n->len <= size);
	for (uint32_t i = head; i != k; i++) {
		const struct run *r = &runs[i & mask];

		CHECK(!r->len || !n->len || r->off + r->len <= n->off ||
		      n->off + n->len <= r->off);
	}
}

/*
 * The writer's allocation: reclaiming first (eager), or only when refused
 * (lazy).  Either way, with every run free any length is granted.
 */
static uint8_t *arena_model_alloc(struct pg_arena *a, uint32_t head,
				  uint32_t k, uint32_t len, uint32_t *off,
				  int lazy)
{
	uint8_t *p;

	if (!lazy)
		pg_arena_reclaim(a, head);
	p = pg_arena_alloc(a, k, len, off);
	if (!p && lazy) {
		pg_arena_reclaim(a, head);
		p = pg_arena_alloc(a, k, len, off);
	}
	CHECK(p || head != k);
	return p;
}

/*
 * A model of the arena's use: entries allocated in order with lengths of
 * every size, consumed at random.  Each run's bytes must survive until
 * its entry is consumed, and once the reader has consumed everything any
 * length up to the arena's size must be granted.
 */
static void arena_model(uint32_t n_slots, uint32_t size, uint32_t start,
			uint32_t steps, uint64_t seed, int lazy)
{
	uint64_t *end = calloc(n_slots, sizeof(*end));
	struct run *runs = calloc(n_slots, sizeof(*runs));
	uint8_t *base = malloc(size);
	struct rng g = { seed | 1 };
	struct pg_arena a;
	uint32_t head = start, k = start, mask = n_slots - 1;

	CHECK(end && runs && base);
	pg_arena_init(&a, base, size, end, n_slots, start);
	for (uint32_t step = 0; step < steps; step++) {
		uint64_t r = rng_next(&g);
		uint32_t len = msg_len(seed, r, size);
		uint8_t *p;

		if (k - head == n_slots || r % 3 == 0) {
			for (uint32_t n = (r >> 40) % (k - head + 1); n; n--, head++)
				arena_consume(&a, runs, mask, head, seed);
			continue;
		}
		p = arena_model_alloc(&a, head, k, len, &runs[k & mask].off, lazy);
		if (!p)
			continue;
		runs[k & mask].len = len;
		CHECK(p == base + runs[k & mask].off);
		arena_no_overlap(runs, mask, head, k, size);
		payload_write(p, len, mix64(seed ^ k));
		k++;
	}
	free(base);
	free(runs);
	free(end);
}

/* The case that once hung: an empty arena positioned mid-way. */
static void test_arena_empty_midway(void)
{
	uint64_t end[8];
	uint8_t base[4096];
	struct pg_arena a;
	uint32_t off;

	pg_arena_init(&a, base, sizeof(base), end, 8, UINT32_MAX);
	CHECK(pg_arena_alloc(&a, UINT32_MAX, 2048, &off) && off == 0);
	pg_arena_reclaim(&a, 0);
	CHECK(pg_arena_alloc(&a, 0, 3000, &off) && off == 0);
	CHECK(!pg_arena_alloc(&a, 1, 1200, &off));	/* 3000 bytes are live */
	pg_arena_reclaim(&a, 1);
	CHECK(pg_arena_alloc(&a, 1, 4096, &off) && off == 0);
	CHECK(pg_arena_alloc(&a, 2, 0, &off));
	CHECK(!pg_arena_alloc(&a, 3, 1, &off));
	CHECK(!pg_arena_alloc(&a, 3, 4097, &off));
}

/*
 * A writer that allocates before it reclaims: entry k + n_slots must not
 * get a run while entry k's is unreclaimed (its bookkeeping would be
 * overwritten and live runs freed).
 */
static void test_arena_unreclaimed(void)
{
	uint64_t end[8];
	uint8_t base[4096];
	struct pg_arena a;
	uint32_t off, s = UINT32_MAX - 2;

	pg_arena_init(&a, base, sizeof(base), end, 8, s);
	for (uint32_t i = 0; i < 8; i++)
		CHECK(pg_arena_alloc(&a, s + i, 100, &off) && off == 100 * i);
	CHECK(!pg_arena_alloc(&a, s + 8, 100, &off));
	pg_arena_reclaim(&a, s + 1);
	CHECK(pg_arena_alloc(&a, s + 8, 100, &off) && off == 800);
	CHECK(!pg_arena_alloc(&a, s + 9, 100, &off));
	CHECK(a.freed == 100);
}

static void test_arenas(void)
{
	static const uint32_t sizes[] = { 4096, 4097, 5000, 12345, 65536 };
	static const uint32_t slots[] = { 8, 64, 1024 };

	test_arena_check();
	test_arena_empty_midway();
	test_arena_unreclaimed();
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t j = 0; j < sizeof(slots) / sizeof(slots[0]); j++)
			for (int lazy = 0; lazy < 2; lazy++)
				arena_model(slots[j], sizes[i],
					    UINT32_MAX - 5 * (uint32_t)j,
					    (uint32_t)scaled(UNDER_TSAN ? 10000 : 50000),
					    0xa7e4a + i * 31 + j, lazy);
}

/* ---- 6. segments ---- */

struct region {
	uint64_t off, bytes;
};

static void seg_regions(const struct pg_seg_header *h, struct region r[4])
{
	r[0] = (struct region){ h->sq_off, (uint64_t)h->sq_slots * PG_SLOT_BYTES };
	r[1] = (struct region){ h->cq_off, (uint64_t)h->cq_slots * PG_SLOT_BYTES };
	r[2] = (struct region){ h->sq_arena_off, h->sq_arena };
	r[3] = (struct region){ h->cq_arena_off, h->cq_arena };
}

/*
 * regions_safe - the property pg_seg_check exists for: in-bounds
 * geometry, and four aligned regions after the header, inside the
 * mapping, not overlapping.
 */
static int regions_safe(const struct pg_seg_header *h, uint64_t map_bytes)
{
	struct region r[4];

	if (map_bytes < PG_SEG_HEADER_BYTES || h->seg_bytes != map_bytes ||
	    !pg_seg_pow2(h->sq_slots) || !pg_seg_pow2(h->cq_slots) ||
	    h->sq_slots < PG_SEG_MIN_SLOTS || h->sq_slots > PG_SEG_MAX_SLOTS ||
	    h->cq_slots < PG_SEG_MIN_SLOTS || h->cq_slots > PG_SEG_MAX_SLOTS ||
	    h->sq_arena < PG_SEG_MIN_ARENA || h->sq_arena > PG_SEG_MAX_ARENA ||
	    h->cq_arena < PG_SEG_MIN_ARENA || h->cq_arena > PG_SEG_MAX_ARENA)
		return 0;
	seg_regions(h, r);
	for (int i = 0; i < 4; i++) {
		if (r[i].off < PG_SEG_HEADER_BYTES || r[i].off % PG_CACHE_LINE ||
		    r[i].off + r[i].bytes > map_bytes)
			return 0;
		for (int j = 0; j < i; j++)
			if (r[i].off < r[j].off + r[j].bytes &&
			    r[j].off < r[i].off + r[i].bytes)
				return 0;
	}
	return 1;
}

enum field {
	F_MAGIC, F_VERSION, F_SQ_SLOTS, F_CQ_SLOTS, F_SQ_ARENA, F_CQ_ARENA,
	F_SQ_OFF, F_CQ_OFF, F_SQ_ARENA_OFF, F_CQ_ARENA_OFF, F_SEG_BYTES,
	N_FIELDS
};

static const char *const field_names[N_FIELDS] = {
	"magic", "version", "sq_slots", "cq_slots", "sq_arena", "cq_arena",
	"sq_off", "cq_off", "sq_arena_off", "cq_arena_off", "seg_bytes",
};

static uint32_t *field_u32(struct pg_seg_header *h, enum field f)
{
	switch (f) {
	case F_MAGIC: return &h->magic;
	case F_VERSION: return &h->version;
	case F_SQ_SLOTS: return &h->sq_slots;
	case F_CQ_SLOTS: return &h->cq_slots;
	case F_SQ_ARENA: return &h->sq_arena;
	case F_CQ_ARENA: return &h->cq_arena;
	case F_SQ_OFF: return &h->sq_off;
	case F_CQ_OFF: return &h->cq_off;
	case F_SQ_ARENA_OFF: return &h->sq_arena_off;
	case F_CQ_ARENA_OFF: return &h->cq_arena_off;
	default: return NULL;
	}
}

static uint64_t field_get(struct pg_seg_header *h, enum field f)
{
	return f == F_SEG_BYTES ? h->seg_bytes : *field_u32(h, f);
}

static void field_set(struct pg_seg_header *h, enum field f, uint64_t v)
{
	if (f == F_SEG_BYTES)
		h->seg_bytes = v;
	else
		*field_u32(h, f) = (uint32_t)v;
}

/* Values of field f that pg_seg_check must refuse, given its good value g. */
static size_t bad_values(enum field f, uint64_t g, uint64_t *v)
{
	size_t n = 0;

	switch (f) {
	case F_MAGIC:
		v[n++] = g ^ 1; v[n++] = 0; v[n++] = __builtin_bswap32((uint32_t)g);
		break;
	case F_VERSION:
		v[n++] = 0; v[n++] = g + 1; v[n++] = UINT32_MAX;
		break;
	case F_SQ_SLOTS: case F_CQ_SLOTS:	/* not a power of two, out of bounds, overlapping */
		v[n++] = g + 1; v[n++] = g - 1; v[n++] = 3 * g; v[n++] = 0;
		v[n++] = 4; v[n++] = 2 * PG_SEG_MAX_SLOTS; v[n++] = 2 * g;
		v[n++] = UINT32_MAX; v[n++] = 1u << 31;
		break;
	case F_SQ_ARENA: case F_CQ_ARENA:	/* out of bounds, overlapping or outside */
		v[n++] = 0; v[n++] = PG_SEG_MIN_ARENA - 1; v[n++] = PG_SEG_MAX_ARENA + 1;
		v[n++] = UINT32_MAX;
		if (g + 4160 <= PG_SEG_MAX_ARENA)
			v[n++] = f == F_SQ_ARENA ? g + 64 : g + 4160;
		break;
	case F_SEG_BYTES:
		v[n++] = g + 4096; v[n++] = g - 4096; v[n++] = g + 1; v[n++] = 0;
		v[n++] = UINT64_MAX;
		break;
	default:	/* offsets: misaligned, overlapping, outside, wrapping */
		v[n++] = g + 1; v[n++] = g - 64; v[n++] = 0; v[n++] = UINT32_MAX;
		v[n++] = UINT32_MAX & ~63u;
		v[n++] = f == F_CQ_ARENA_OFF ? g + 4160 : g + 64;
		if (f == F_SQ_OFF)
			v[n++] = PG_SEG_HEADER_BYTES - 64;
		break;
	}
	return n;
}

static void seg_corruptions(const struct pg_seg_header *good)
{
	uint64_t v[16];
	char err[256];

	for (int f = 0; f < N_FIELDS; f++) {
		size_t n = bad_values(f, field_get((struct pg_seg_header *)good, f), v);

		for (size_t i = 0; i < n; i++) {
			struct pg_seg_header h = *good;

			field_set(&h, f, v[i]);
			err[0] = 0;
			if (pg_seg_check(&h, good->seg_bytes, err, sizeof(err)) == 0)
				die("pg_seg_check accepted %s = %#llx (layout %u/%u/%u/%u)",
				    field_names[f], (unsigned long long)v[i],
				    good->sq_slots, good->cq_slots, good->sq_arena,
				    good->cq_arena);
			CHECK(err[0]);
		}
	}
}

/*
 * Random single-field damage (bit flips, nearby and random values): what
 * pg_seg_check accepts must be safe to use.
 */
static void seg_fuzz(const struct pg_seg_header *good, struct rng *g, int trials)
{
	char err[256];

	for (int i = 0; i < trials; i++) {
		struct pg_seg_header h = *good;
		enum field f = rng_next(g) % N_FIELDS;
		uint64_t r = rng_next(g), val = field_get(&h, f);
		uint64_t map = good->seg_bytes;

		switch (r % 4) {
		case 0: val ^= 1ull << (r >> 8) % (f == F_SEG_BYTES ? 64 : 32); break;
		case 1: val += (int64_t)((r >> 8) % 8192) - 4096; break;
		case 2: val = r >> 2; break;
		default: map = (r >> 8) % (2 * good->seg_bytes + 1);
		}
		field_set(&h, f, val);
		if (pg_seg_check(&h, map, err, sizeof(err)) == 0 && !regions_safe(&h, map))
			die("pg_seg_check accepted an unsafe segment: %s = %#llx, "
			    "mapping %llu bytes", field_names[f],
			    (unsigned long long)field_get(&h, f),
			    (unsigned long long)map);
	}
}

static void seg_one(uint32_t sq_slots, uint32_t cq_slots, uint32_t sq_arena,
		    uint32_t cq_arena, struct rng *g)
{
	struct pg_seg_header h;
	struct region r[4];
	char err[256];

	CHECK(pg_seg_layout(&h, sq_slots, cq_slots, sq_arena, cq_arena) == 0);
	CHECK(h.magic == PG_PROTO_MAGIC && h.version == PG_PROTO_VERSION);
	CHECK(h.sq_slots == sq_slots && h.cq_slots == cq_slots);
	CHECK(h.sq_arena == sq_arena && h.cq_arena == cq_arena);
	CHECK(h.seg_bytes % 4096 == 0 && regions_safe(&h, h.seg_bytes));
	seg_regions(&h, r);
	CHECK(r[0].off == PG_SEG_HEADER_BYTES);
	for (int i = 1; i < 4; i++)	/* in order, padded less than a line */
		CHECK(r[i].off >= r[i - 1].off + r[i - 1].bytes &&
		      r[i].off < r[i - 1].off + r[i - 1].bytes + PG_CACHE_LINE);
	CHECK(h.seg_bytes - (r[3].off + r[3].bytes) < 4096);
	CHECK(pg_seg_check(&h, h.seg_bytes, err, sizeof(err)) == 0);
	CHECK(pg_seg_check(&h, h.seg_bytes + 4096, err, sizeof(err)) < 0);
	CHECK(pg_seg_check(&h, h.seg_bytes - 1, err, sizeof(err)) < 0);
	CHECK(pg_seg_check(&h, PG_SEG_HEADER_BYTES - 1, err, sizeof(err)) < 0);
	seg_corruptions(&h);
	seg_fuzz(&h, g, UNDER_TSAN ? 500 : 5000);
}

static void test_segments(void)
{
	static const uint32_t slots[] = { 8, 16, 1024, 65536 };
	static const uint32_t arenas[] = {
		4096, 4097, 5000, 65536, 1u << 20, 12345679, 256u << 20,
	};
	const size_t ns = sizeof(slots) / sizeof(slots[0]);
	const size_t na = sizeof(arenas) / sizeof(arenas[0]);
	struct pg_seg_header h;
	struct rng g = { 0x5e6 };

	for (size_t a = 0; a < ns; a++)
		for (size_t b = 0; b < ns; b++)
			for (size_t c = 0; c < na; c++)
				seg_one(slots[a], slots[b], arenas[c],
					arenas[(c + b + 1) % na], &g);
	CHECK(pg_seg_layout(&h, 4, 8, 4096, 4096) < 0);
	CHECK(pg_seg_layout(&h, 8, 12, 4096, 4096) < 0);
	CHECK(pg_seg_layout(&h, 0, 8, 4096, 4096) < 0);
	CHECK(pg_seg_layout(&h, 8, 2 * PG_SEG_MAX_SLOTS, 4096, 4096) < 0);
	CHECK(pg_seg_layout(&h, 8, 8, PG_SEG_MIN_ARENA - 1, 4096) < 0);
	CHECK(pg_seg_layout(&h, 8, 8, 4096, PG_SEG_MAX_ARENA + 1) < 0);
	CHECK(pg_seg_layout(&h, UINT32_MAX, 8, 4096, 4096) < 0);
}

/* ---- main ---- */

int main(void)
{
	const char *s = getenv("TEST_RING_SCALE");
	double t0 = pg_now_s();

	signal(SIGALRM, on_alarm);
	alarm(HANG_S);
	if (s && atof(s) > 0)
		g_scale = atof(s);

	test_segments();
	test_arenas();
	test_hostile_tail();
	test_tail_bounds();
	test_hostile_attach();
	test_hostile_head();
	test_head_bounds();
	test_sleep_flag();
	printf("test_ring: segment, arena and hostile-peer checks passed\n");
	fflush(stdout);

	test_oneway(8, 4096, UINT32_MAX - 3, scaled(ONEWAY_SMALL_MSGS));
	test_oneway(1024, 65536, UINT32_MAX - 1500, scaled(ONEWAY_MSGS));
	test_pingpong(8, 1024, scaled(PINGPONG_MSGS));
	test_pingpong(1024, 8, scaled(PINGPONG_MSGS));
	test_fork(8, 1024, scaled(FORK_MSGS));
	printf("test_ring: all passed in %.1f s%s\n", pg_now_s() - t0,
	       UNDER_TSAN ? " (ThreadSanitizer build)" :
	       UNDER_ASAN ? " (AddressSanitizer build)" : "");
	return 0;
}
