/*
 * session.c - one client's shared state: the sealed memfd segment and its
 * doorbells, the completion ring as the daemon writes it (payloads inline
 * or in the completion arena, a bounded backlog in daemon memory when the
 * ring is full, batched publication, doorbells only for a sleeping
 * client), and the last words when a client goes.
 *
 * It does not read submissions (request.c) nor touch the socket beyond
 * closing it (server.c does the handshake).  Of struct pgd it writes only
 * the identities it gives (next_client_id, next_serial) and the count of
 * clients marked dead; the limits it copies are reload.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/engine/model.h"
#include "daemon/log.h"

/* Bounds of one client's backlog: beyond either it is dropped. */
#define PGD_BACKLOG_MAX_ENTRIES 65536u
#define PGD_BACKLOG_MAX_BYTES (16u << 20)

/* ---- creation ---- */

/* The segment's header: the layout's geometry, identity and limits. */
static void write_header(const struct pgd *d, struct pgd_client *c)
{
	const struct pgd_limits *lim = &d->lim;
	struct pg_seg_header *h = c->hdr;

	memcpy(h, &lim->layout, sizeof(*h));
	h->generation = d->generation;
	h->client_id = c->id;
	h->max_inflight = (uint32_t)d->cfg->max_inflight;
	h->max_prompt = (uint32_t)lim->max_prompt;
	h->max_tokens = (uint32_t)lim->max_tokens;
	h->max_payload = lim->max_payload;
	h->n_vocab = (uint32_t)lim->n_vocab;
	snprintf(h->model, sizeof(h->model), "%s", d->m->name);
}

void pgd_session_set_limits(const struct pgd *d, struct pgd_client *c)
{
	const struct pgd_limits *lim = &d->lim;
	struct pg_seg_header *h = c->hdr;

	__atomic_store_n(&h->max_inflight, (uint32_t)d->cfg->max_inflight,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&h->max_prompt, (uint32_t)lim->max_prompt, __ATOMIC_RELAXED);
	__atomic_store_n(&h->max_tokens, (uint32_t)lim->max_tokens, __ATOMIC_RELAXED);
	__atomic_store_n(&h->max_payload, lim->max_payload, __ATOMIC_RELAXED);
}

/* Create, size, map and seal the memfd; lay the rings and arenas over it. */
static int map_segment(const struct pgd *d, struct pgd_client *c, char *err,
		       size_t err_len)
{
	const struct pg_seg_header *l = &d->lim.layout;
	char name[32];

	snprintf(name, sizeof(name), "pagoda-client-%u", c->id);
	c->memfd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->memfd < 0 || ftruncate(c->memfd, (off_t)l->seg_bytes)) {
		snprintf(err, err_len, "cannot create the shared segment of %llu bytes: %s",
			 (unsigned long long)l->seg_bytes, strerror(errno));
		return -1;
	}
	c->seg = mmap(NULL, l->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		      c->memfd, 0);
	if (c->seg == MAP_FAILED) {
		c->seg = NULL;
		snprintf(err, err_len, "cannot map the shared segment: %s", strerror(errno));
		return -1;
	}
	c->seg_bytes = l->seg_bytes;
	c->hdr = (struct pg_seg_header *)c->seg;
	write_header(d, c);
	/* no shrink: a client that truncated it would fault the daemon */
	if (fcntl(c->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		snprintf(err, err_len, "cannot seal the shared segment: %s", strerror(errno));
		return -1;
	}
	pg_ring_attach(&c->sq, &c->hdr->sq, c->seg + l->sq_off, l->sq_slots, 0);
	pg_ring_attach(&c->cq, &c->hdr->cq, c->seg + l->cq_off, l->cq_slots, 1);
	c->sq_arena = c->seg + l->sq_arena_off;
	c->sq_arena_bytes = l->sq_arena;
	c->cq_end = calloc(l->cq_slots, sizeof(*c->cq_end));
	if (!c->cq_end) {
		snprintf(err, err_len, "out of memory for a client");
		return -1;
	}
	pg_arena_init(&c->cq_arena, c->seg + l->cq_arena_off, l->cq_arena,
		      c->cq_end, l->cq_slots, 0);
	return 0;
}

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

uint64_t pgd_session_serial(struct pgd *d)
{
	return ++d->next_serial;
}

struct pgd_client *pgd_session_create(struct pgd *d, int slot, int fd,
				      pid_t pid, uid_t uid, gid_t gid,
				      char *err, size_t err_len)
{
	struct pgd_client *c = calloc(1, sizeof(*c));
	uint32_t n_buckets = pow2_at_least(2u * (uint32_t)d->cfg->max_inflight);

	if (!c) {
		snprintf(err, err_len, "out of memory for a client");
		return NULL;
	}
	c->slot = (uint32_t)slot;
	if (++d->next_client_id == 0)	/* after 2^32 connections */
		d->next_client_id = 1;
	c->id = d->next_client_id;
	c->serial = pgd_session_serial(d);
	c->sock = fd;
	c->memfd = c->sq_bell = c->cq_bell = c->pidfd = -1;
	c->pid = pid;
	c->uid = uid;
	c->gid = gid;
	c->since = d->now;
	c->reqs = calloc(n_buckets, sizeof(*c->reqs));
	c->reqs_mask = n_buckets - 1;
	if (!c->reqs) {
		snprintf(err, err_len, "out of memory for a client");
		goto out_destroy;
	}
	if (map_segment(d, c, err, err_len))
		goto out_destroy;
	c->sq_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->cq_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->sq_bell < 0 || c->cq_bell < 0) {
		snprintf(err, err_len, "cannot create the doorbells: %s", strerror(errno));
		goto out_destroy;
	}
	return c;
out_destroy:
	c->sock = -1;		/* the caller's until we succeed */
	pgd_session_destroy(c);
	return NULL;
}

/* ---- destruction ---- */

static void backlog_free(struct pgd_client *c)
{
	while (c->bl_head) {
		struct pgd_pending *p = c->bl_head;

		c->bl_head = p->next;
		free(p);
	}
	c->bl_tail = NULL;
	c->bl_count = c->bl_bytes = 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void pgd_session_destroy(struct pgd_client *c)
{
	if (!c)
		return;
	backlog_free(c);
	if (c->seg)
		munmap(c->seg, c->seg_bytes);
	close_fd(&c->memfd);
	close_fd(&c->sq_bell);
	close_fd(&c->cq_bell);
	close_fd(&c->pidfd);
	if (c->sock >= 0)
		shutdown(c->sock, SHUT_RDWR);	/* the peer sees the hang-up
						   even while the io_uring
						   still holds the file */
	close_fd(&c->sock);
	free(c->cq_end);
	free(c->reqs);
	free(c);
}

/* ---- completions ---- */

/* A client that moved its completion ring's head where it cannot be. */
#define RING_CORRUPT "the completion ring's head moved backwards or past the ring: disconnected; fix the client"

int pgd_payload_fits(const struct pgd_client *c, size_t len)
{
	return len <= c->cq_arena.size;
}

/*
 * The arena run of len bytes (0 for an inline entry) for ring entry k,
 * reclaiming what the client has consumed when there is no room: every
 * entry takes its run, even an empty one, so that runs free in order.
 */
static uint8_t *arena_run(struct pgd_client *c, uint32_t k, uint32_t len,
			  uint32_t *off)
{
	uint8_t *dst = pg_arena_alloc(&c->cq_arena, k, len, off);

	if (!dst) {
		pg_arena_reclaim(&c->cq_arena, pg_ring_consumed(&c->cq));
		dst = pg_arena_alloc(&c->cq_arena, k, len, off);
	}
	return dst;
}

/*
 * Write cqe (len and any inline text already in it) into the next slot of
 * the ring, its arena payload (cqe->len bytes; NULL when len is 0) beside
 * it.  Returns 0, or -1 when the ring or the arena has no room now
 * (nothing written).
 */
static int put(struct pgd_client *c, struct pg_cqe *cqe, const void *payload)
{
	void *slot = pg_ring_reserve(&c->cq);
	uint32_t k = c->cq.local, off = 0;
	int in_arena;
	uint8_t *dst;

	if (!slot)
		return -1;
	in_arena = cqe->len > PG_CQE_TEXT;
	dst = arena_run(c, k, in_arena ? cqe->len : 0, &off);
	if (!dst)
		return -1;
	if (in_arena) {
		memcpy(dst, payload, cqe->len);
		cqe->flags |= PG_CQE_F_ARENA;
	} else {
		off = 0;
	}
	cqe->off = off;
	memcpy(slot, cqe, sizeof(*cqe));
	pg_ring_commit(&c->cq);
	return 0;
}

/*
 * Keep cqe (inline text already in it) and, for an arena entry, its
 * cqe->len bytes of payload until the ring has room.  payload may be NULL
 * when nothing is to be copied (a PONG, a token whose text is held back).
 */
static void backlog_push(struct pgd *d, struct pgd_client *c,
			 const struct pg_cqe *cqe, const void *payload)
{
	uint32_t extra = cqe->len > PG_CQE_TEXT ? cqe->len : 0;
	struct pgd_pending *p;

	if (c->bl_count + 1 > PGD_BACKLOG_MAX_ENTRIES ||
	    c->bl_bytes + sizeof(*p) + extra > PGD_BACKLOG_MAX_BYTES) {
		pgd_mark_dead(d, c, PG_EPROTO,
			      "the client does not read its completions (%zu waiting, %zu bytes): disconnected; read them promptly and reconnect",
			      c->bl_count, c->bl_bytes);
		return;
	}
	p = malloc(sizeof(*p) + extra);
	if (!p) {
		pgd_mark_dead(d, c, PG_ENOMEM, "pagodad is out of memory for this client's completions");
		return;
	}
	p->next = NULL;
	p->cqe = *cqe;
	p->len = cqe->len;
	if (extra)
		memcpy(p->payload, payload, extra);
	if (!c->bl_head) {
		c->bl_head = p;
		c->bl_progress = d->now;
	} else {
		c->bl_tail->next = p;
	}
	c->bl_tail = p;
	c->bl_count++;
	c->bl_bytes += sizeof(*p) + extra;
}

void pgd_emit(struct pgd *d, struct pgd_client *c, struct pg_cqe *cqe,
	      const void *payload, uint32_t len)
{
	if (c->dead)
		return;
	cqe->len = len;
	if (len && len <= PG_CQE_TEXT)
		memcpy(cqe->text, payload, len);
	if (!c->bl_head && !put(c, cqe, payload))
		return;
	if (pg_ring_corrupt(&c->cq)) {
		pgd_mark_dead(d, c, PG_EPROTO, RING_CORRUPT);
		return;
	}
	backlog_push(d, c, cqe, payload);
}

int pgd_flush_backlog(struct pgd *d, struct pgd_client *c)
{
	int moved = 0;

	if (!c->bl_head)
		return 0;
	while (c->bl_head && !c->dead) {
		struct pgd_pending *p = c->bl_head;

		if (put(c, &p->cqe, p->payload))
			break;
		c->bl_head = p->next;
		c->bl_count--;
		c->bl_bytes -= sizeof(*p) + (p->len > PG_CQE_TEXT ? p->len : 0);
		free(p);
		moved++;
	}
	if (!c->bl_head)
		c->bl_tail = NULL;
	if (moved)
		c->bl_progress = d->now;
	if (pg_ring_corrupt(&c->cq))
		pgd_mark_dead(d, c, PG_EPROTO, RING_CORRUPT);
	else if (c->bl_head && d->now - c->bl_progress > d->cfg->drain_timeout_s)
		pgd_mark_dead(d, c, PG_EPROTO,
			      "the client left its completion ring full for %.1f s (%zu waiting): disconnected; read completions promptly (or raise --drain-timeout) and reconnect",
			      d->now - c->bl_progress, c->bl_count);
	return moved;
}

static void ring_bell(int fd)
{
	uint64_t one = 1;

	/* EAGAIN only when the counter is full: the client has a wake anyway */
	if (write(fd, &one, sizeof(one)) < 0)
		return;
}

void pgd_publish(struct pgd_client *c)
{
	if (pg_ring_publish(&c->cq))
		ring_bell(c->cq_bell);
}

int pgd_publish_quiet(struct pgd_client *c)
{
	return pg_ring_publish(&c->cq);
}

void pgd_mark_dead(struct pgd *d, struct pgd_client *c, enum pg_error code,
		   const char *fmt, ...)
{
	va_list ap;

	if (c->dead)
		return;
	c->dead = 1;
	c->dead_code = code;
	va_start(ap, fmt);
	vsnprintf(c->dead_msg, sizeof(c->dead_msg), fmt, ap);
	va_end(ap);
	d->n_dead++;
}

/*
 * The reason in the header, where it needs no room in the ring
 * (client_proto.h, pg_goodbye_wire): visible to the client with closed,
 * which is stored after it with release order.
 */
static void write_bye(struct pgd_client *c, enum pg_error code, const char *msg)
{
	struct pg_goodbye_wire *b = &c->hdr->bye;

	b->code = (int32_t)code;
	snprintf(b->message, sizeof(b->message), "%s", code != PG_OK ? msg : "");
}

void pgd_say_goodbye(struct pgd_client *c, enum pg_error code,
		     const char *msg)
{
	write_bye(c, code, msg);
	if (code != PG_OK && !pg_ring_corrupt(&c->cq)) {
		struct pg_cqe cqe = { .type = PG_CQE_ERROR, .code = (int32_t)code };
		size_t len = strlen(msg);

		/* req_id 0 without PG_CQE_F_LAST: the connection's, not a request's */
		cqe.len = (uint32_t)len;
		if (len <= PG_CQE_TEXT)
			memcpy(cqe.text, msg, len);
		put(c, &cqe, msg);
	}
	pg_ring_publish(&c->cq);
	atomic_store_explicit(&c->hdr->closed, 1, memory_order_release);
	ring_bell(c->cq_bell);
}
