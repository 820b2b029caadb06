/*
 * ipc-pagoda.c - the cost of talking to pagodad: a ping's round trip
 * through the shared-memory rings (client submits, daemon sees, daemon
 * completes, client sees) with the daemon busy-polling and with it
 * asleep, against the same ping-pong over a Unix stream socket; the bare
 * rings between two processes (the floor), and what one or two wake-ups
 * through an eventfd cost (the floor of the asleep case); and how long
 * streamed tokens take from the engine to each of 64 clients at once.
 * bench/ipc starts the daemon and drives this.
 *
 * Every figure is validated before it is timed: pings must come back (the
 * library checks the echoed argument), socket echoes must return what was
 * sent, bare-ring and eventfd answers must carry their sequence number,
 * and every stream must deliver exactly the tokens it asked for, each
 * stamped no later than it was read.
 *
 * Not a test, and not a model benchmark (bench/decode, bench/serve).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spin.h"
#include "include/pagoda.h"
#include "shm/ring.h"

struct opts {
	const char *socket;	/* pagodad's */
	int pings;		/* round trips per measurement */
	int gap_us;		/* between pings of the asleep case */
	int cpu, peer_cpu;	/* this process; the echo and floor peers */
	int clients;		/* streaming clients */
	int tokens;		/* each one's max_tokens */
	const char *dump;	/* the streams' arrival times go there */
	int daemon_pid;		/* to check that it sleeps; 0: unchecked */
};

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ipc-pagoda: error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("cannot pin to CPU %d: %s", cpu, strerror(errno));
}

static void sleep_us(int us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- statistics ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Quantile q of n samples in ns (sorted in place), in µs. */
static double quantile_us(uint64_t *ns, size_t n, double q)
{
	size_t i;

	qsort(ns, n, sizeof(*ns), cmp_u64);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return ns[i] / 1000.0;
}

static void report(const char *what, uint64_t *ns, size_t n, double *p50,
		   double *p99)
{
	*p50 = quantile_us(ns, n, 0.50);
	*p99 = quantile_us(ns, n, 0.99);
	printf("%-34s n=%-6zu p50 %8.2f us  p99 %8.2f us  min %8.2f  max %9.2f\n",
	       what, n, *p50, *p99, ns[0] / 1000.0, ns[n - 1] / 1000.0);
	fflush(stdout);
}

/* ---- pings through pagodad ---- */

static pagoda_t *connect_or_die(const char *path)
{
	pagoda_t *p;
	int rc = pagoda_connect(path, &p);

	if (rc < 0)
		die("cannot connect to %s: %s", path, pagoda_last_error(NULL));
	return p;
}

/*
 * Whether the daemon sleeps in io_uring_enter(2) now: its main thread (the
 * loop) is blocked (state S) in system call 426.  -1: cannot tell.
 */
static int daemon_asleep(int pid)
{
	char path[64], buf[256];
	int fd, state = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/syscall", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		state = !strncmp(buf, "426 ", 4);
	}
	return state;
}

/*
 * N pings, gap_us apart (0: back to back); the client's spin is set by
 * the caller.  With daemon_pid, counts the pings before which the daemon
 * was seen asleep in io_uring_enter (looked at before the clock starts).
 */
static int ping_series(pagoda_t *p, int n, int gap_us, int daemon_pid,
		       uint64_t *ns)
{
	int asleep = 0;

	for (int i = 0; i < n; i++) {
		uint64_t t0, rtt;
		int rc;

		if (gap_us)
			sleep_us(gap_us);
		if (daemon_pid)
			asleep += daemon_asleep(daemon_pid) == 1;
		t0 = pg_now_ns();
		rc = pagoda_ping(p, &rtt);
		ns[i] = pg_now_ns() - t0;
		if (rc < 0)
			die("ping %d: %s", i, pagoda_last_error(p));
	}
	return asleep;
}


/* ---- the baseline: a ping-pong over a Unix stream socket ---- */

static void echo_child(int fd, int cpu)
{
	uint64_t v;

	pin(cpu);
	for (;;) {
		ssize_t r = read(fd, &v, sizeof(v));

		if (r == 0)
			_exit(0);
		if (r != sizeof(v) || write(fd, &v, sizeof(v)) != sizeof(v))
			_exit(1);
	}
}

static void uds_series(int fd, int n, uint64_t *ns)
{
	for (int i = 0; i < n; i++) {
		uint64_t v = 0x5eed0000u + (uint64_t)i, back = 0;
		uint64_t t0 = pg_now_ns();

		if (write(fd, &v, sizeof(v)) != sizeof(v) ||
		    read(fd, &back, sizeof(back)) != sizeof(back))
			die("socket echo: %s", strerror(errno));
		ns[i] = pg_now_ns() - t0;
		if (back != v)
			die("socket echo returned %#" PRIx64 " for %#" PRIx64, back, v);
	}
}

/* The echo process; returns the socket's other end. */
static int uds_start(const struct opts *o, pid_t *child)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	fflush(NULL);
	*child = fork();
	if (*child < 0)
		die("fork: %s", strerror(errno));
	if (*child == 0) {
		close(sv[0]);
		echo_child(sv[1], o->peer_cpu);
	}
	close(sv[1]);
	return sv[0];
}

static void peer_wait(pid_t child, const char *what)
{
	int st;

	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
		die("the %s process failed", what);
}

/* ---- the floor: bare rings between two spinning processes ---- */

struct floor_seg {
	struct pg_ring_ctl sq, cq;
	_Alignas(64) uint8_t sq_slots[8 * PG_SLOT_BYTES];
	_Alignas(64) uint8_t cq_slots[8 * PG_SLOT_BYTES];
};

/* The peer answers each entry with its sequence number until 0 comes. */
static void floor_child(struct floor_seg *s, int cpu)
{
	struct pg_ring in, out;

	pin(cpu);
	pg_ring_attach(&in, &s->sq, s->sq_slots, 8, 0);
	pg_ring_attach(&out, &s->cq, s->cq_slots, 8, 1);
	for (;;) {
		const uint64_t *e = pg_ring_peek(&in);
		uint64_t v, *slot;

		if (!e)
			continue;
		v = *e;
		pg_ring_consume(&in);
		pg_ring_release(&in);
		if (!v)
			_exit(0);
		while (!(slot = pg_ring_reserve(&out)))
			;
		*slot = v;
		pg_ring_commit(&out);
		pg_ring_publish(&out);
	}
}

static void floor_send(struct pg_ring *sq, uint64_t v)
{
	uint64_t *slot;

	while (!(slot = pg_ring_reserve(sq)))
		;
	*slot = v;
	pg_ring_commit(sq);
	pg_ring_publish(sq);
}

static void floor_ping(struct pg_ring *sq, struct pg_ring *cq, uint64_t v)
{
	const uint64_t *e;

	floor_send(sq, v);
	while (!(e = pg_ring_peek(cq)))
		;
	if (*e != v)
		die("bare ring answered %" PRIu64 " to %" PRIu64, *e, v);
	pg_ring_consume(cq);
	pg_ring_release(cq);
}

/* The bare-ring peer process, and this side's views of the rings. */
struct floor_link {
	struct floor_seg *s;
	struct pg_ring sq, cq;
	uint64_t seq;
	pid_t child;
};

static void floor_start(const struct opts *o, struct floor_link *l)
{
	l->s = mmap(NULL, sizeof(*l->s), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (l->s == MAP_FAILED)
		die("out of memory");
	fflush(NULL);
	l->child = fork();
	if (l->child < 0)
		die("fork: %s", strerror(errno));
	if (l->child == 0)
		floor_child(l->s, o->peer_cpu);
	pg_ring_attach(&l->sq, &l->s->sq, l->s->sq_slots, 8, 1);
	pg_ring_attach(&l->cq, &l->s->cq, l->s->cq_slots, 8, 0);
	l->seq = 1;
}

static void floor_series(struct floor_link *l, int n, uint64_t *ns)
{
	for (int i = 0; i < n; i++) {
		uint64_t t0 = pg_now_ns();

		floor_ping(&l->sq, &l->cq, l->seq++);
		ns[i] = pg_now_ns() - t0;
	}
}

static void floor_stop(struct floor_link *l)
{
	floor_send(&l->sq, 0);
	peer_wait(l->child, "bare-ring peer");
	munmap(l->s, sizeof(*l->s));
}

/* ---- the wake-up floor: an eventfd ping-pong with a sleeping peer ---- */

/*
 * What one wake-up costs on this machine, whatever pagoda does: the peer
 * sleeps in read(2) on an eventfd (as the daemon sleeps on its doorbell),
 * this side rings it after the same gap as the asleep pings and waits for
 * the answer either spinning on shared memory (one wake-up: the peer's)
 * or asleep on a second eventfd (two: the peer's, then ours).
 */
struct wake_seg {
	_Alignas(64) _Atomic uint64_t req;	/* 0: stop */
	_Alignas(64) _Atomic uint64_t ans;
	_Alignas(64) _Atomic int bell;		/* ring ans_fd too */
};

struct wake_link {
	struct wake_seg *s;
	int req_fd, ans_fd;	/* eventfds: to the peer, back */
	uint64_t seq;
	pid_t child;
};

static void wake_child(struct wake_link *l, int cpu)
{
	uint64_t v;

	pin(cpu);
	for (;;) {
		if (read(l->req_fd, &v, sizeof(v)) != sizeof(v))
			_exit(1);
		v = atomic_load(&l->s->req);
		if (!v)
			_exit(0);
		atomic_store(&l->s->ans, v);
		if (atomic_load(&l->s->bell) && write(l->ans_fd, &v, sizeof(v)) != sizeof(v))
			_exit(1);
	}
}

static void wake_start(const struct opts *o, struct wake_link *l)
{
	l->s = mmap(NULL, sizeof(*l->s), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	l->req_fd = eventfd(0, EFD_CLOEXEC);
	l->ans_fd = eventfd(0, EFD_CLOEXEC);
	if (l->s == MAP_FAILED || l->req_fd < 0 || l->ans_fd < 0)
		die("cannot set up the eventfd floor: %s", strerror(errno));
	fflush(NULL);
	l->child = fork();
	if (l->child < 0)
		die("fork: %s", strerror(errno));
	if (l->child == 0)
		wake_child(l, o->peer_cpu);
	l->seq = 1;
}

/* One round trip; bell: wait asleep on the answer's eventfd. */
static void wake_ping(struct wake_link *l, int bell)
{
	uint64_t v = 1, seq = l->seq++;

	atomic_store(&l->s->bell, bell);
	atomic_store(&l->s->req, seq);
	if (write(l->req_fd, &v, sizeof(v)) != sizeof(v))
		die("eventfd: %s", strerror(errno));
	if (bell && read(l->ans_fd, &v, sizeof(v)) != sizeof(v))
		die("eventfd: %s", strerror(errno));
	while (atomic_load(&l->s->ans) != seq)
		pg_cpu_relax();
}

static void wake_series(struct wake_link *l, int n, int gap_us, int bell,
			uint64_t *ns)
{
	for (int i = 0; i < n; i++) {
		uint64_t t0;

		sleep_us(gap_us);
		t0 = pg_now_ns();
		wake_ping(l, bell);
		ns[i] = pg_now_ns() - t0;
	}
}

static void wake_stop(struct wake_link *l)
{
	uint64_t v = 1;

	atomic_store(&l->s->req, 0);
	if (write(l->req_fd, &v, sizeof(v)) != sizeof(v))
		die("eventfd: %s", strerror(errno));
	peer_wait(l->child, "eventfd peer");
	close(l->req_fd);
	close(l->ans_fd);
	munmap(l->s, sizeof(*l->s));
}

/*
 * The floor of token delivery: one process on the daemon's CPU writes
 * the eventfds of n processes asleep in read(2) on this side's CPU, back
 * to back, as the daemon rings the doorbells of a step's clients; each
 * notes when it woke.  From the first write to each wake-up, and per
 * round from the first wake-up to the last.
 */
#define FAN_ROUNDS 50

struct fan_seg {
	_Alignas(64) _Atomic uint64_t t0;	/* the round's first write */
	_Alignas(64) _Atomic int done;		/* wake-ups of the round */
	uint64_t woke[];			/* (FAN_ROUNDS x n) ns */
};

static void fan_floor(const struct opts *o, int n, int gap_us, double *p50,
		      double *p99, double *sp50)
{
	size_t size = sizeof(struct fan_seg) + sizeof(uint64_t) * FAN_ROUNDS * (size_t)n;
	struct fan_seg *s = mmap(NULL, size, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int *fd = calloc((size_t)n, sizeof(*fd)), st;
	uint64_t *lag = malloc(sizeof(uint64_t) * FAN_ROUNDS * (size_t)n);
	uint64_t sp[FAN_ROUNDS];
	pid_t writer;

	if (s == MAP_FAILED || !fd || !lag)
		die("out of memory");
	for (int i = 0; i < n; i++)
		if ((fd[i] = eventfd(0, EFD_CLOEXEC)) < 0)
			die("eventfd: %s", strerror(errno));
	fflush(NULL);
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			for (int r = 0; r < FAN_ROUNDS; r++) {
				uint64_t v;

				if (read(fd[i], &v, sizeof(v)) != sizeof(v))
					_exit(1);
				s->woke[(size_t)r * n + i] = pg_now_ns();
				atomic_fetch_add(&s->done, 1);
			}
			_exit(0);
		}
	}
	writer = fork();
	if (writer < 0)
		die("fork: %s", strerror(errno));
	if (writer == 0) {
		pin(o->peer_cpu);
		for (int r = 0; r < FAN_ROUNDS; r++) {
			uint64_t v = 1;

			sleep_us(gap_us);
			atomic_store(&s->t0, pg_now_ns());
			for (int i = 0; i < n; i++)
				if (write(fd[i], &v, sizeof(v)) != sizeof(v))
					_exit(1);
			while (atomic_load(&s->done) < (r + 1) * n)
				sleep_us(100);
			for (int i = 0; i < n; i++)	/* t0 of the round, kept */
				s->woke[(size_t)r * n + i] -= atomic_load(&s->t0);
		}
		_exit(0);
	}
	while (wait(&st) > 0)
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			die("the fan-out floor's processes failed");
	for (int r = 0; r < FAN_ROUNDS; r++) {
		uint64_t lo = UINT64_MAX, hi = 0;

		for (int i = 0; i < n; i++) {
			uint64_t v = s->woke[(size_t)r * n + i];

			lag[(size_t)r * n + i] = v;
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
		}
		sp[r] = hi - lo;
	}
	printf("fan-out floor: %d sleepers woken by eventfd writes from one "
	       "process, %d rounds %d us apart\n", n, FAN_ROUNDS, gap_us);
	report("fan-out: first write to wake-up", lag, (size_t)FAN_ROUNDS * n, p50, p99);
	{
		double q;

		report("fan-out: spread of a round", sp, FAN_ROUNDS, sp50, &q);
	}
	for (int i = 0; i < n; i++)
		close(fd[i]);
	free(fd);
	free(lag);
	munmap(s, size);
}

/* ---- the round trips, interleaved ---- */

struct rtt {
	double ring50, ring99, sleep50, sleep99, uds50, uds99, fl50, fl99;
	double wake1_50, wake1_99, wake2_50, wake2_99;
};

#define ROUNDS 5

/*
 * ROUNDS rounds of: bare rings, socket, ring with the daemon polling
 * (pings back to back), ring with the daemon asleep (pings gap_us apart,
 * a quarter as many), and the eventfd floors with the same gap; a noisy
 * moment then hurts every side alike.
 */
static void bench_rtt(const struct opts *o, struct rtt *r)
{
	int k = o->pings, ks = k / 4, warm = k < 1000 ? k : 1000;
	uint64_t *fl = calloc(3 * (size_t)k + 3 * (size_t)ks, sizeof(*fl));
	uint64_t *uds = fl + k, *ring = uds + k, *slp = ring + k;
	uint64_t *w1 = slp + ks, *w2 = w1 + ks;
	struct floor_link l;
	struct wake_link wl;
	pagoda_t *p;
	pid_t echo;
	int fd, asleep = 0;

	if (!fl)
		die("out of memory");
	wake_start(o, &wl);
	fd = uds_start(o, &echo);
	p = connect_or_die(o->socket);	/* after these forks; the floor's peers,
					   forked later, never touch it */
	pagoda_set_spin_us(p, 100000);
	floor_start(o, &l);
	floor_series(&l, warm, fl);	/* validation and warm-up */
	floor_stop(&l);
	wake_series(&wl, 10, 0, 1, w1);
	uds_series(fd, warm, uds);
	ping_series(p, warm, 0, 0, ring);
	for (int i = 0; i < ROUNDS; i++) {
		int n = k / ROUNDS, ns = ks / ROUNDS;

		/* its peer spins all along: only while it is measured */
		floor_start(o, &l);
		floor_series(&l, n, fl + i * n);
		floor_stop(&l);
		uds_series(fd, n, uds + i * n);
		ping_series(p, n, 0, 0, ring + i * n);
		asleep += ping_series(p, ns, o->gap_us, o->daemon_pid, slp + i * ns);
		wake_series(&wl, ns, o->gap_us, 0, w1 + i * ns);
		wake_series(&wl, ns, o->gap_us, 1, w2 + i * ns);
	}
	k = k / ROUNDS * ROUNDS;
	ks = ks / ROUNDS * ROUNDS;
	report("bare rings, both spinning", fl, k, &r->fl50, &r->fl99);
	report("unix stream socket", uds, k, &r->uds50, &r->uds99);
	report("ring, daemon polling", ring, k, &r->ring50, &r->ring99);
	report("ring, daemon asleep", slp, ks, &r->sleep50, &r->sleep99);
	if (o->daemon_pid)
		printf("  the daemon was asleep in io_uring_enter before %d of these %d pings\n",
		       asleep, ks);
	report("eventfd, peer asleep, we spin", w1, ks, &r->wake1_50, &r->wake1_99);
	report("eventfd, both asleep", w2, ks, &r->wake2_50, &r->wake2_99);
	pagoda_close(p);
	close(fd);
	peer_wait(echo, "echo");
	wake_stop(&wl);
	free(fl);
}

/* ---- token delivery to many streaming clients ---- */

/*
 * The daemon stamps every token with the time its engine emitted it
 * (pagoda_event.emitted_ns, CLOCK_MONOTONIC: one clock for all processes
 * of the host); each client notes when pagoda_next_event() handed it the
 * token.  A token's delivery time is the difference: the daemon's work
 * after the engine (completions, publication, doorbells) and the client's
 * (spin or wake-up, reading the ring).
 */
struct deliver_fig {
	double p50, p99;		/* step's first emission to read */
	double own50, own99;		/* the token's own stamp to read */
	double spread50, spread99;	/* a step's first read to its last */
};

struct stream_log {
	int status;		/* 0 ok, else the client's error */
	int n;			/* tokens received */
	struct {
		uint64_t emitted, read;	/* ns */
	} tok[];		/* (tokens) */
};

static struct stream_log *log_of(void *base, size_t stride, int c)
{
	return (struct stream_log *)((uint8_t *)base + stride * (size_t)c);
}

/* One streaming client: connect, wait for the start, stream, log. */
static void stream_child(const struct opts *o, struct stream_log *lg,
			 int start_fd, int spin_us)
{
	struct pagoda_request req;
	struct pagoda_event ev;
	pagoda_t *p;
	char b;
	int rc;

	lg->status = 1;
	if (pagoda_connect(o->socket, &p) < 0)
		_exit(2);
	if (spin_us >= 0)
		pagoda_set_spin_us(p, (unsigned)spin_us);
	if (read(start_fd, &b, 1) < 0)
		_exit(3);
	pagoda_request_init(&req);
	req.prompt = "Once upon a time";
	req.max_tokens = o->tokens;
	req.ignore_eos = 1;
	req.temperature = 0;	/* greedy, as before the library sampled by default */
	if (pagoda_submit(p, &req, NULL) < 0)
		_exit(4);
	while ((rc = pagoda_next_event(p, &ev, -1)) == 1) {
		uint64_t t = pg_now_ns();

		if (ev.type == PAGODA_EVENT_TOKENS) {
			if (!ev.emitted_ns || ev.emitted_ns > t)
				_exit(7);	/* a stamp from the future */
			for (size_t i = 0; i < ev.n_ids && lg->n < o->tokens; i++) {
				lg->tok[lg->n].emitted = ev.emitted_ns;
				lg->tok[lg->n++].read = t;
			}
		}
		if (ev.type == PAGODA_EVENT_ERROR)
			_exit(5);
		if (ev.last) {
			lg->status = ev.finish == PAGODA_FINISH_LENGTH &&
				     lg->n == o->tokens ? 0 : 6;
			break;
		}
	}
	pagoda_close(p);
	_exit(lg->status);
}

/* The median gap between a client's successive tokens: the step time. */
static uint64_t median_step_ns(void *base, size_t stride, const struct opts *o)
{
	size_t n = 0, cap = (size_t)o->clients * o->tokens;
	uint64_t *d = malloc(cap * sizeof(*d)), med;

	if (!d)
		die("out of memory");
	for (int c = 0; c < o->clients; c++) {
		struct stream_log *lg = log_of(base, stride, c);

		for (int i = 1; i < lg->n; i++)
			d[n++] = lg->tok[i].emitted - lg->tok[i - 1].emitted;
	}
	if (!n)
		die("no token intervals to measure");
	qsort(d, n, sizeof(*d), cmp_u64);
	med = d[n / 2];
	free(d);
	return med;
}

/* One line per token: client, token index, emitted and read (ns). */
static void deliver_dump(void *base, size_t stride, const struct opts *o)
{
	FILE *f = fopen(o->dump, "w");

	if (!f)
		die("%s: %s", o->dump, strerror(errno));
	for (int c = 0; c < o->clients; c++) {
		struct stream_log *lg = log_of(base, stride, c);

		for (int i = 0; i < lg->n; i++)
			fprintf(f, "%d %d %" PRIu64 " %" PRIu64 "\n", c, i,
				lg->tok[i].emitted, lg->tok[i].read);
	}
	if (fclose(f))
		die("%s: %s", o->dump, strerror(errno));
}

struct tok_ref {
	uint64_t emitted, read;
};

static int cmp_emitted(const void *a, const void *b)
{
	const struct tok_ref *x = a, *y = b;

	return (x->emitted > y->emitted) - (x->emitted < y->emitted);
}

/*
 * Two measures of every token: from its own stamp to its read, and from
 * the first emission of its step to its read.  The daemon stamps tokens
 * one after the other as the engine emits them, so the first measure
 * hides how long the later clients of a step wait behind the earlier;
 * the second does not.  A step's tokens are those whose stamps follow
 * each other by less than a quarter of the median step time (steps are
 * hundreds of ms apart, their emissions within a millisecond or so).
 * spread: per step, from the first client's read to the last's.
 */
static void deliver_analyse(void *base, size_t stride, const struct opts *o,
			    int spin_us, struct deliver_fig *f)
{
	size_t n = 0, n_steps = 0, cap = (size_t)o->clients * o->tokens;
	uint64_t *lag = malloc(cap * sizeof(*lag));
	uint64_t *own = malloc(cap * sizeof(*own));
	uint64_t *spread = malloc(cap * sizeof(*spread));
	struct tok_ref *t = malloc(cap * sizeof(*t));
	uint64_t step = median_step_ns(base, stride, o);

	if (!lag || !own || !spread || !t)
		die("out of memory");
	for (int c = 0; c < o->clients; c++) {
		struct stream_log *lg = log_of(base, stride, c);

		for (int i = 0; i < lg->n; i++) {
			t[n].emitted = lg->tok[i].emitted;
			t[n].read = lg->tok[i].read;
			own[n] = t[n].read - t[n].emitted;
			n++;
		}
	}
	qsort(t, n, sizeof(*t), cmp_emitted);
	for (size_t i = 0, j; i < n; i = j) {
		uint64_t lo = t[i].read, hi = t[i].read;

		for (j = i + 1; j < n && t[j].emitted - t[j - 1].emitted < step / 4; j++)
			;
		for (size_t k = i; k < j; k++) {
			lag[k] = t[k].read - t[i].emitted;
			lo = t[k].read < lo ? t[k].read : lo;
			hi = t[k].read > hi ? t[k].read : hi;
		}
		if (j - i > 1)
			spread[n_steps++] = hi - lo;
	}
	printf("streaming: %d clients x %d tokens, client spin %d us, engine "
	       "step %.1f ms (median), %zu steps of 2+ tokens\n", o->clients,
	       o->tokens, spin_us, step / 1e6, n_steps);
	report("token delivery: own stamp to read", own, n, &f->own50, &f->own99);
	report("token delivery: step's first to read", lag, n, &f->p50, &f->p99);
	if (n_steps)
		report("token delivery: spread of a step", spread, n_steps,
		       &f->spread50, &f->spread99);
	free(t);
	free(spread);
	free(own);
	free(lag);
}

/*
 * clients streaming processes (on this process's CPUs), each spinning
 * spin_us (-1: the library's default) before it sleeps.
 */
static void bench_deliver(const struct opts *o, int spin_us,
			  struct deliver_fig *f)
{
	size_t stride = (sizeof(struct stream_log) +
			 o->tokens * sizeof(((struct stream_log *)0)->tok[0])
			 + 63) / 64 * 64;
	void *base = mmap(NULL, stride * o->clients, PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int start[2], st, bad = 0;

	if (base == MAP_FAILED || pipe(start) < 0)
		die("out of memory");
	fflush(NULL);
	for (int c = 0; c < o->clients; c++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			close(start[1]);
			stream_child(o, log_of(base, stride, c), start[0], spin_us);
		}
	}
	close(start[0]);
	sleep_us(500000);	/* every client connected, waiting */
	close(start[1]);
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	if (bad)
		die("%d of %d streaming clients failed (is the daemon's "
		    "--max-clients below %d?)", bad, o->clients, o->clients);
	if (o->dump && spin_us < 0)	/* the library's default spin */
		deliver_dump(base, stride, o);
	deliver_analyse(base, stride, o, spin_us < 0 ? 20 : spin_us, f);
	munmap(base, stride * o->clients);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "pings", required_argument, NULL, 'n' },
		{ "gap-us", required_argument, NULL, 'g' },
		{ "cpu", required_argument, NULL, 'c' },
		{ "peer-cpu", required_argument, NULL, 'p' },
		{ "clients", required_argument, NULL, 'k' },
		{ "tokens", required_argument, NULL, 't' },
		{ "dump", required_argument, NULL, 'd' },
		{ "daemon-pid", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { NULL, 20000, 2000, -1, -1, 64, 64, NULL, 0 };
	struct rtt r;
	struct deliver_fig dl = { 0 }, ds = { 0 };
	double fan50 = 0, fan99 = 0, fansp = 0;
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': o.socket = optarg; break;
		case 'n': o.pings = atoi(optarg); break;
		case 'g': o.gap_us = atoi(optarg); break;
		case 'c': o.cpu = atoi(optarg); break;
		case 'p': o.peer_cpu = atoi(optarg); break;
		case 'k': o.clients = atoi(optarg); break;
		case 't': o.tokens = atoi(optarg); break;
		case 'd': o.dump = optarg; break;
		case 'D': o.daemon_pid = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: ipc-pagoda --socket PATH [--pings N] "
				"[--gap-us US] [--cpu C] [--peer-cpu C] "
				"[--clients N] [--tokens N] [--daemon-pid PID]\n");
			return 2;
		}
	}
	if (o.pings < 100 * ROUNDS)
		die("--pings must be at least %d", 100 * ROUNDS);
	if (!o.socket)
		die("--socket is required (bench/ipc starts a daemon and passes it)");
	pin(o.cpu);
	bench_rtt(&o, &r);
	if (o.clients > 0) {
		fan_floor(&o, o.clients, 5000, &fan50, &fan99, &fansp);
		bench_deliver(&o, -1, &dl);
		bench_deliver(&o, 0, &ds);
	}
	printf("ipc-pagoda: ring_p50_us=%.2f ring_p99_us=%.2f sleep_p50_us=%.2f "
	       "sleep_p99_us=%.2f uds_p50_us=%.2f uds_p99_us=%.2f speedup=%.1f "
	       "floor_p50_us=%.2f wake1_p50_us=%.2f wake2_p50_us=%.2f "
	       "deliver_p50_us=%.1f deliver_p99_us=%.1f "
	       "deliver_nospin_p50_us=%.1f deliver_nospin_p99_us=%.1f "
	       "deliver_own_p50_us=%.1f deliver_own_p99_us=%.1f "
	       "deliver_spread_p50_us=%.1f deliver_spread_p99_us=%.1f "
	       "fanout_p50_us=%.1f fanout_p99_us=%.1f fanout_spread_p50_us=%.1f\n",
	       r.ring50, r.ring99, r.sleep50, r.sleep99, r.uds50, r.uds99,
	       r.uds50 / r.ring50, r.fl50, r.wake1_50, r.wake2_50, dl.p50, dl.p99,
	       ds.p50, ds.p99, dl.own50, dl.own99, dl.spread50, dl.spread99,
	       fan50, fan99, fansp);
	return 0;
}
