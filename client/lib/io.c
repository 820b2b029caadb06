/*
 * io.c - libpagoda's traffic on the segment: submitting entries (with
 * their payloads in the submission arena), reading completions (checked,
 * copied out, routed to whoever waits for them), spinning, and sleeping
 * on the completion doorbell without losing a wake-up.
 *
 * Every function here runs with the handle's lock held; the waits let go
 * of it while they spin or sleep.  Several threads may wait at once: one
 * of them (the poller) sleeps on the doorbell and the socket, the others
 * on the handle's condition variable.  Whoever reads a completion meant
 * for another queues it and wakes the others; a poller that leaves wakes
 * them too, so that one of them takes its place.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/internal.h"
#include "common/clock.h"
#include "common/spin.h"

/* ring - add one to an eventfd (a doorbell). */
static void ring(int efd)
{
	uint64_t one = 1;
	ssize_t n;

	do
		n = write(efd, &one, sizeof(one));
	while (n < 0 && errno == EINTR);
}

/* ---- requests in flight ---- */

int pgc_flight_add(struct pagoda *p, uint64_t id, enum pgc_owner owner)
{
	if (p->n_flight == p->cap_flight) {
		size_t cap = p->cap_flight ? 2 * p->cap_flight : 16;
		struct pgc_flight *f = realloc(p->flight, cap * sizeof(*f));

		if (!f)
			return pgc_fail(p, PAGODA_ENOMEM, "out of memory");
		p->flight = f;
		p->cap_flight = cap;
	}
	p->flight[p->n_flight++] = (struct pgc_flight){ id, owner };
	return 0;
}

enum pgc_owner pgc_flight_owner(const struct pagoda *p, uint64_t id)
{
	for (size_t i = 0; i < p->n_flight; i++)
		if (p->flight[i].id == id)
			return p->flight[i].owner;
	return PGC_NONE;
}

void pgc_flight_remove(struct pagoda *p, uint64_t id)
{
	for (size_t i = 0; i < p->n_flight; i++)
		if (p->flight[i].id == id) {
			p->flight[i] = p->flight[--p->n_flight];
			return;
		}
}

uint64_t pgc_op_id(struct pagoda *p)
{
	return PGC_OP_ID_BIT | ++p->next_op_id;
}

int pgc_match_id(const struct pg_cqe *c, enum pgc_owner owner, void *ctx)
{
	return owner == PGC_WAIT && c->req_id == *(const uint64_t *)ctx;
}

/* ---- completions: check, copy, route ---- */

/*
 * The last completion of a request or operation.  An ERROR without
 * PG_CQE_F_LAST answers something else than the request of its id (a
 * CANCEL that found nothing, a duplicate submission): that request goes on.
 */
static int is_final(const struct pg_cqe *c)
{
	switch (c->type) {
	case PG_CQE_DONE:
		return (c->flags & PG_CQE_F_LAST) != 0;
	case PG_CQE_ERROR:
		return (c->flags & PG_CQE_F_LAST) || (c->req_id & PGC_OP_ID_BIT);
	case PG_CQE_TOKENS:
	case PG_CQE_LOGPROBS:
		return 0;
	default:
		return 1;
	}
}

/* fail_closed - the handle is dead for the daemon's reason why (code). */
static int fail_closed(struct pagoda *p, int code, const char *why)
{
	return pgc_fail(p, code, "pagodad closed the connection: %s%s", why,
			strstr(why, "reconnect") ? "" : "; reconnect");
}

/*
 * header_bye - the daemon's last word in the segment's header
 * (wire/client_proto.h, pg_goodbye_wire): its code as a libpagoda error and its message in why
 * (why_len bytes), or 0 when the segment is not closed or gives no
 * reason.  The daemon wrote it before closed, which is read first.
 */
static int header_bye(struct pagoda *p, char *why, size_t why_len)
{
	const struct pg_goodbye_wire *b = &p->hdr->bye;
	int32_t code;

	if (!atomic_load_explicit(&p->hdr->closed, memory_order_acquire))
		return 0;
	code = b->code;
	if (code <= 0)
		return 0;
	/* the daemon's bytes, which need not end in a NUL */
	snprintf(why, why_len, "%.*s", (int)sizeof(b->message), b->message);
	return pgc_error_code(code);
}

/*
 * Completions nobody reads: those of no request in flight (a cancel's
 * answer after the request ended), and the non-final errors above.  The
 * daemon's goodbye (an ERROR of req_id 0, before it closes the segment)
 * too: the segment header's bye says the same, ring full or not (gone).
 */
static int unwanted(const struct pg_cqe *c, enum pgc_owner owner)
{
	if (c->type == PG_CQE_ERROR && c->req_id == 0)
		return 1;
	return owner == PGC_NONE || (c->type == PG_CQE_ERROR && !is_final(c));
}

/*
 * cqe_data - where the text or payload of c (a copy) lies: inline in the
 * copy or in the completion arena; NULL when c makes no sense.
 */
static const uint8_t *cqe_data(const struct pagoda *p, const struct pg_cqe *c)
{
	if (c->type < PG_CQE_TOKENS || c->type > PG_CQE_LOGPROBS ||
	    c->n_ids > PG_CQE_IDS)
		return NULL;
	if (c->flags & PG_CQE_F_ARENA)
		return pg_arena_check(p->cq_arena_bytes, c->off, c->len)
			? p->cq_arena + c->off : NULL;
	return c->len <= PG_CQE_TEXT ? (const uint8_t *)c->text : NULL;
}

/* rx_store - c and a copy of its len bytes of data into rx. */
static int rx_store(struct pgc_rx *rx, const struct pg_cqe *c,
		    const uint8_t *data, uint32_t len)
{
	if (len && (size_t)len + 1 > rx->cap) {
		uint8_t *d = realloc(rx->data, (size_t)len + 1);

		if (!d)
			return PAGODA_ENOMEM;
		rx->data = d;
		rx->cap = (size_t)len + 1;
	}
	rx->cqe = *c;
	rx->len = len;
	if (len) {
		memcpy(rx->data, data, len);
		rx->data[len] = 0;
	}
	return 0;
}

void pgc_rx_free(struct pgc_rx *rx)
{
	free(rx->data);
	rx->data = NULL;
	rx->cap = 0;
}

static int queue_push(struct pagoda *p, const struct pg_cqe *c,
		      enum pgc_owner owner, const uint8_t *data, uint32_t len)
{
	struct pgc_item *it = malloc(sizeof(*it) + (size_t)len + 1);

	if (!it)
		return PAGODA_ENOMEM;
	it->next = NULL;
	it->cqe = *c;
	it->owner = owner;
	it->len = len;
	memcpy(it->data, data, len);
	it->data[len] = 0;
	if (p->q_tail)
		p->q_tail->next = it;
	else
		p->q_head = it;
	p->q_tail = it;
	atomic_fetch_add_explicit(&p->q_gen, 1, memory_order_release);
	return 0;
}

/* queue_take - the first queued completion match accepts, into rx. */
static int queue_take(struct pagoda *p, pgc_match_fn match, void *ctx,
		      struct pgc_rx *rx)
{
	struct pgc_item **link = &p->q_head, *prev = NULL;

	for (struct pgc_item *it = p->q_head; it; prev = it, it = it->next) {
		if (!match(&it->cqe, it->owner, ctx)) {
			link = &it->next;
			continue;
		}
		if (rx_store(rx, &it->cqe, it->data, it->len))
			return pgc_fail(p, PAGODA_ENOMEM, "out of memory");
		*link = it->next;
		if (p->q_tail == it)
			p->q_tail = prev;
		free(it);
		return 1;
	}
	return 0;
}

void pgc_queue_free(struct pagoda *p)
{
	while (p->q_head) {
		struct pgc_item *it = p->q_head;

		p->q_head = it->next;
		free(it);
	}
	p->q_tail = NULL;
}

static int broke(struct pagoda *p, const char *what)
{
	if (!p->dead)
		p->dead = pgc_fail(p, PAGODA_EPROTO,
				   "pagodad broke the protocol (%s): reconnect",
				   what);
	return p->dead;
}

/*
 * take_entry - route the completion at the ring's head: to rx when match
 * accepts it (returns 1), else to the queue for its reader, or nowhere
 * when no request of ours owns it (a cancel's answer to a request that had
 * already ended).  Returns 0 or a negative code (the entry stays).
 */
static int take_entry(struct pagoda *p, const struct pg_cqe *slot,
		      pgc_match_fn match, void *ctx, struct pgc_rx *rx,
		      int *queued)
{
	struct pg_cqe c;
	const uint8_t *data;
	enum pgc_owner owner;
	int hit, rc = 0;

	memcpy(&c, slot, sizeof(c));
	data = cqe_data(p, &c);
	if (!data)
		return broke(p, "a completion out of bounds");
	owner = pgc_flight_owner(p, c.req_id);
	if (unwanted(&c, owner))
		owner = PGC_NONE;
	hit = owner != PGC_NONE && match && match(&c, owner, ctx);
	if (hit)
		rc = rx_store(rx, &c, data, c.len);
	else if (owner != PGC_NONE)
		rc = queue_push(p, &c, owner, data, c.len);
	if (rc)
		return pgc_fail(p, rc, "out of memory");
	*queued |= !hit && owner != PGC_NONE;
	if (owner != PGC_NONE && is_final(&c))
		pgc_flight_remove(p, c.req_id);
	pg_ring_consume(&p->cq);
	pg_ring_release(&p->cq);
	return hit;
}

/*
 * wake_others - completions were queued, or the poller left: the threads
 * waiting on the condition variable look again, and an event loop polling
 * pagoda_fd() is woken if something may be there for it (its doorbell may
 * have been read by a poller here).
 */
static void wake_others(struct pagoda *p)
{
	pthread_cond_broadcast(&p->cond);
	if (!p->fd_armed)
		return;
	if (atomic_load_explicit(&p->hdr->cq.tail, memory_order_acquire) != p->cq.local) {
		ring(p->cq_efd);
		return;
	}
	for (struct pgc_item *it = p->q_head; it; it = it->next)
		if (it->owner == PGC_STREAM) {
			ring(p->cq_efd);
			return;
		}
}

/*
 * drain - read completions until one matches (1) or the ring is empty (0);
 * a negative code when the ring or memory failed.  match NULL queues all.
 */
static int drain(struct pagoda *p, pgc_match_fn match, void *ctx,
		 struct pgc_rx *rx)
{
	const struct pg_cqe *slot;
	int rc = 0, queued = 0;

	while (!rc && (slot = pg_ring_peek(&p->cq)))
		rc = take_entry(p, slot, match, ctx, rx, &queued);
	if (!rc && pg_ring_corrupt(&p->cq))
		rc = broke(p, "the completion ring's counters");
	if (queued)
		wake_others(p);
	return rc;
}

/* ---- the daemon's liveness ---- */

/*
 * gone - the daemon closed the segment or hung up (why): the handle fails
 * from now on with the daemon's own code and reason when it gave one in
 * the header (it writes them before it hangs up), else with
 * PAGODA_ESHUTDOWN (it died).
 */
static int gone(struct pagoda *p, const char *why)
{
	char bye[sizeof(p->hdr->bye.message) + 1];
	int code;

	if (p->dead)
		return p->dead;
	code = header_bye(p, bye, sizeof(bye));
	if (code)
		p->dead = fail_closed(p, code, bye);
	else
		p->dead = pgc_fail(p, PAGODA_ESHUTDOWN,
				   "pagodad %s: it stopped or restarted; reconnect",
				   why);
	return p->dead;
}

/* closed - whether the daemon has marked the segment closed. */
static int closed(struct pagoda *p)
{
	if (p->dead)
		return 1;
	if (atomic_load_explicit(&p->hdr->closed, memory_order_acquire))
		gone(p, "closed the connection");
	return p->dead != 0;
}

/* socket_event - the daemon's socket polled with revents. */
static void socket_event(struct pagoda *p, short revents)
{
	char buf[64];
	ssize_t n;

	if (revents & (POLLHUP | POLLRDHUP | POLLERR)) {
		gone(p, "hung up");
		return;
	}
	if (!(revents & POLLIN))
		return;
	/* nothing is meant to come after the welcome: EOF or discard */
	n = recv(p->sock, buf, sizeof(buf), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		gone(p, "hung up");
}

int pgc_check_socket(struct pagoda *p)
{
	struct pollfd pfd = { .fd = p->sock, .events = POLLIN | POLLRDHUP };

	if (!p->dead && poll(&pfd, 1, 0) > 0)
		socket_event(p, pfd.revents);
	return p->dead;
}

void pgc_ring_self(struct pagoda *p)
{
	ring(p->cq_efd);
}

int pgc_alive(struct pagoda *p)
{
	return closed(p) ? p->dead : 0;
}

/* ---- waiting ---- */

/* spin - let go of the handle and watch the ring until `until` (ns). */
static void spin(struct pagoda *p, uint64_t until)
{
	uint32_t seen = p->cq.local;
	uint64_t q = atomic_load_explicit(&p->q_gen, memory_order_acquire);
	struct pg_seg_header *h = p->hdr;

	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(&h->cq.tail, memory_order_relaxed) != seen ||
		    atomic_load_explicit(&p->q_gen, memory_order_relaxed) != q ||
		    atomic_load_explicit(&h->closed, memory_order_relaxed))
			break;
		if (!(i % 64) && pg_now_ns() >= until)
			break;
		pg_cpu_relax();
	}
	pthread_mutex_lock(&p->lock);
}

/*
 * poll_once - as the poller: advertise sleep on the completion ring and
 * wait on its doorbell and the socket for up to ms (-1: no limit).
 * Returns 0, or -EINTR when a signal came.
 */
static int poll_once(struct pagoda *p, int ms)
{
	struct pollfd fds[2] = {
		{ .fd = p->cq_efd, .events = POLLIN },
		{ .fd = p->sock, .events = POLLIN | POLLRDHUP },
	};
	uint64_t v;
	int n, e;

	if (!pg_ring_prepare_sleep(&p->cq))
		return 0;
	p->poller = 1;
	pthread_mutex_unlock(&p->lock);
	n = poll(fds, 2, ms);
	e = errno;
	pthread_mutex_lock(&p->lock);
	p->poller = 0;
	if (n > 0 && (fds[0].revents & POLLIN))
		(void)!read(p->cq_efd, &v, sizeof(v));	/* non-blocking */
	if (n > 0 && fds[1].revents)
		socket_event(p, fds[1].revents);
	if (!p->fd_armed)
		pg_ring_awake(&p->cq);
	wake_others(p);
	return n < 0 && e == EINTR ? -EINTR : 0;
}

/* follow - another thread polls: wait until it wakes us, or until deadline
   (ns, CLOCK_MONOTONIC; 0: no limit). */
static void follow(struct pagoda *p, uint64_t deadline)
{
	struct timespec ts;

	if (!deadline) {
		pthread_cond_wait(&p->cond, &p->lock);
		return;
	}
	ts.tv_sec = (time_t)(deadline / 1000000000u);
	ts.tv_nsec = (long)(deadline % 1000000000u);
	pthread_cond_timedwait(&p->cond, &p->lock, &ts);
}

/* sleep_once - as the poller, or as a follower when another polls. */
static int sleep_once(struct pagoda *p, int ms, uint64_t deadline)
{
	if (!p->poller)
		return poll_once(p, ms);
	follow(p, ms < 0 ? 0 : deadline);
	return 0;
}

#define PGC_SPIN_SCORE 8	/* misses before tokens waits stop spinning */
#define PGC_SPIN_PROBE 32	/* then one wait in this many spins anyway */
#define PGC_WAKE_SPIN 5		/* × spin_ns, up to PGC_WAKE_SPIN_MAX_NS: */
#define PGC_WAKE_SPIN_MAX_NS 200000	/* a quick answer from a daemon that
					   had to be woken */

/*
 * spin_budget - how long to spin.  A daemon that sleeps (it says so in
 * the submission ring's control words) was rung by our submission and
 * answers after its wake-up, tens of microseconds on a virtual machine:
 * a wait for an answer without engine work spins through that wake-up,
 * so that only the daemon's is paid and not ours too.  The bound keeps
 * the cost small where the scheduler wakes the daemon on this CPU and
 * lets the spin finish first.  (Yielding between looks avoids that, but
 * on a loaded machine hands the CPU to other work for a whole time slice:
 * measured, a 2 ms median round trip.)  Any other wait on a sleeping
 * daemon sleeps at once: the engine's work outlasts a spin.  Waits for
 * tokens spin only while spinning has paid off lately: an engine step
 * takes far longer than a spin, and many streaming clients spinning for
 * nothing take the CPUs the daemon needs.
 */
static uint64_t spin_budget(struct pagoda *p, enum pgc_pace pace)
{
	uint64_t wake = PGC_WAKE_SPIN * p->spin_ns;

	if (atomic_load_explicit(&p->hdr->sq.sleeping, memory_order_relaxed)) {
		if (pace != PGC_QUICK)
			return 0;
		return wake < PGC_WAKE_SPIN_MAX_NS ? wake : PGC_WAKE_SPIN_MAX_NS;
	}
	if (pace == PGC_TOKENS && p->spin_score <= 0 &&
	    ++p->spin_probe % PGC_SPIN_PROBE)
		return 0;
	return p->spin_ns;
}

/* spin_learn - a TOKENS wait that spun got its answer (hit) or slept. */
static void spin_learn(struct pagoda *p, int hit)
{
	if (hit)
		p->spin_score = PGC_SPIN_SCORE;
	else if (p->spin_score > 0)
		p->spin_score--;
}

int pgc_wait(struct pagoda *p, pgc_match_fn match, void *ctx,
	     struct pgc_rx *rx, int timeout_ms, enum pgc_pace pace)
{
	uint64_t start = pg_now_ns(), spin_end = start + spin_budget(p, pace);
	uint64_t deadline = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
	int rc, spun = 0, slept = 0;

	for (;;) {
		int ended = closed(p);
		uint64_t t;

		rc = queue_take(p, match, ctx, rx);
		if (!rc)
			rc = drain(p, match, ctx, rx);
		if (rc)
			break;
		if (ended) {
			rc = p->dead;
			break;
		}
		if (timeout_ms == 0)
			break;
		t = pg_now_ns();
		if (t < spin_end) {
			spin(p, spin_end);
			spun = 1;
			continue;
		}
		if (timeout_ms > 0 && t >= deadline)
			break;
		slept = 1;
		if (sleep_once(p, timeout_ms < 0 ? -1
				  : (int)((deadline - t + 999999) / 1000000), deadline))
			break;
	}
	if (pace == PGC_TOKENS && spun && rc > 0)
		spin_learn(p, !slept);
	return rc;
}

/* ---- submitting ---- */

/* wait_space - the ring or arena is full: let the daemon catch up. */
static void wait_space(struct pagoda *p, unsigned round)
{
	struct timespec ts = { 0, 0 };

	/* the daemon may be waiting for room in the completion ring */
	drain(p, NULL, NULL, NULL);
	if (round < 64) {
		pthread_mutex_unlock(&p->lock);
		for (int i = 0; i < 64; i++)
			pg_cpu_relax();
		pthread_mutex_lock(&p->lock);
		return;
	}
	pgc_check_socket(p);
	ts.tv_nsec = round < 80 ? 20000 : 1000000;
	pthread_mutex_unlock(&p->lock);
	nanosleep(&ts, NULL);
	pthread_mutex_lock(&p->lock);
}

/* reserve - a slot and len bytes of arena for the next entry, or NULL. */
static struct pg_sqe *reserve(struct pagoda *p, uint32_t len, uint8_t **buf,
			      uint32_t *off)
{
	struct pg_sqe *slot = pg_ring_reserve(&p->sq);

	if (!slot)
		return NULL;
	/* runs of entries the daemon has consumed are free again */
	pg_arena_reclaim(&p->sq_arena, p->sq.cached);
	*buf = pg_arena_alloc(&p->sq_arena, p->sq.local, len, off);
	if (!*buf) {
		pg_arena_reclaim(&p->sq_arena, pg_ring_consumed(&p->sq));
		*buf = pg_arena_alloc(&p->sq_arena, p->sq.local, len, off);
	}
	return *buf ? slot : NULL;
}

int pgc_submit(struct pagoda *p, const struct pg_sqe *sqe, uint32_t len,
	       void (*fill)(void *ctx, uint8_t *buf), void *ctx)
{
	struct pg_sqe *slot, e = *sqe;
	uint8_t *buf = NULL;
	int rc;

	if (len > p->sq_arena.size)
		return pgc_fail(p, PAGODA_ETOOBIG,
				"the request is %u bytes, more than the %u bytes of the submission arena",
				len, p->sq_arena.size);
	for (unsigned round = 0;; round++) {
		rc = pgc_alive(p);
		if (rc)
			return rc;
		slot = reserve(p, len, &buf, &e.payload_off);
		if (slot)
			break;
		if (pg_ring_corrupt(&p->sq))
			return broke(p, "the submission ring's counters");
		wait_space(p, round);
	}
	if (len)
		fill(ctx, buf);
	else
		e.payload_off = 0;
	e.payload_len = len;
	memcpy(slot, &e, sizeof(e));
	pg_ring_commit(&p->sq);
	if (pg_ring_publish(&p->sq))
		ring(p->sq_efd);
	return 0;
}
