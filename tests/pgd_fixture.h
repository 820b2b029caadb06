/*
 * pgd_fixture.h - pagodad's serving code in-process, for the tests that
 * link the daemon's library (daemon/libpagodad.la), as lldpd's tests link
 * its daemon: a generated tiny model, its forward pass and engine, the
 * tokenizing workers and a struct pgd set up as server.c's daemon_start()
 * sets it up, without the socket and the io_uring.  A test connects
 * clients (a real sealed segment each, which the test maps a second time
 * as a client would), writes submissions into their rings by hand, calls
 * the loop's own functions (pgd_drain, pgd_tok_finish, pg_engine_step,
 * pgd_flush_backlog) and reads back every completion.
 *
 * Header-only for tests/test_request.c and tests/test_segment.c; it
 * checks nothing itself beyond set-up (which fails the test with exit 1).
 */
#ifndef PAGODA_TESTS_PGD_FIXTURE_H
#define PAGODA_TESTS_PGD_FIXTURE_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/daemon.h"
#include "daemon/engine/chat.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/log.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"

/* The daemon: its model, forward pass, configuration and state. */
struct fx {
	struct pg_model *m;
	struct pg_forward *fw;
	struct pgd_config cfg;
	struct pgd d;
};

/* One completion as the client read it, its payload copied out. */
struct fx_cqe {
	struct pg_cqe e;
	uint8_t *payload;		/* (len) + NUL; inline text or arena */
	uint32_t len;
};

/* A client: the daemon's struct and the client's own view of the segment. */
struct fx_client {
	struct pgd_client *c;		/* the daemon's */
	uint8_t *map;			/* the client's mapping of the memfd */
	size_t map_bytes;
	struct pg_seg_header *h;	/* in the mapping */
	struct pg_seg_header geo;	/* its geometry as checked at connection
					   (a client never reads it back) */
	struct pg_ring sq;		/* producer */
	struct pg_ring cq;		/* consumer */
	uint32_t arena_pos;		/* next payload offset in the sq arena */
	struct fx_cqe *got;		/* (n_got) completions read so far */
	int n_got, cap_got;
};

static inline void fx_die(const char *what, const char *err)
{
	fprintf(stderr, "set-up: %s: %s\n", what, err);
	exit(1);
}

/* The configuration the tests run under, as pagodad's defaults but small. */
static inline struct pgd_config fx_config(void)
{
	return (struct pgd_config){
		.max_clients = 4, .max_inflight = 4, .max_prompt = 0,
		.max_tokens = 32, .max_payload = 0,
		.sq_slots = 16, .cq_slots = 64,
		.sq_arena = 64 << 10, .cq_arena = 4096,
		.drain_timeout_s = 5.0,
	};
}

static inline struct pg_model *fx_model(void)
{
	char path[] = "/tmp/pagoda-test-fixture-XXXXXX";
	struct ggufgen_opts o;
	struct pg_model *m = NULL;
	char err[256] = "";
	int fd = mkstemp(path);

	if (fd < 0)
		fx_die("mkstemp", strerror(errno));
	close(fd);
	ggufgen_preset(&o, "tiny");
	o.seed = 11;
	if (ggufgen_write(&o, path, err, sizeof(err)) ||
	    pg_model_load(path, 0, &m, err, sizeof(err))) {
		unlink(path);
		fx_die("model", err);
	}
	unlink(path);
	return m;
}

/* The tables, engine and workers of daemon_start(), for cfg and fw. */
static inline void fx_init(struct fx *f, const struct pgd_config *cfg,
			   int n_pages, int page_tokens)
{
	struct pg_forward_params p = pg_forward_params_default();
	struct pg_engine_config ec = pg_engine_config_default();
	struct pgd *d = &f->d;
	char err[512] = "";
	size_t n;

	pgd_log_set_level(PGD_LOG_ERROR);
	memset(f, 0, sizeof(*f));
	f->cfg = *cfg;
	f->m = fx_model();
	p.n_threads = 1;
	p.max_batch_tokens = 64;
	p.n_pages = n_pages;
	p.page_tokens = page_tokens;
	if (pg_forward_create(f->m, &p, &f->fw, err, sizeof(err)))
		fx_die("forward", err);
	d->cfg = &f->cfg;
	d->m = f->m;
	d->fw = f->fw;
	d->generation = 0x5eed0000c0ffee01ull;
	pgd_listener_init(&d->listener);
	d->sig_fd = -1;
	d->now = pg_now_s();
	if (pgd_limits_init(d, err, sizeof(err)))
		fx_die("limits", err);
	n = (size_t)cfg->max_clients;
	d->slots = calloc(n, sizeof(*d->slots));
	d->live = calloc(n, sizeof(*d->live));
	for (int i = 0; i < PGD_HS_SLOTS; i++)
		d->hs[i].fd = -1;
	if (!d->slots || !d->live || pgd_requests_init(d))
		fx_die("tables", "out of memory");
	ec.on_event = pgd_on_event;
	ec.ctx = d;
	d->chat_fmt = (int)pg_chat_choose(f->m->chat_template,
					   f->m->chat_template ? strlen(f->m->chat_template) : 0,
					   f->m->tok, err, sizeof(err));
	d->chat_tools = (int)pg_chat_tool_format((enum pg_chat_format)d->chat_fmt,
						 f->m->chat_template,
						 f->m->chat_template ? strlen(f->m->chat_template) : 0,
						 0);
	if (pg_engine_create(f->m, f->fw, &ec, &d->engine, err, sizeof(err)))
		fx_die("engine", err);
	if (pgd_tok_start(d, err, sizeof(err)))
		fx_die("tokenizing workers", err);
}

/* Connect a client in slot: its segment made and mapped again as a client. */
static inline void fx_connect(struct fx *f, struct fx_client *cl, int slot)
{
	struct pgd *d = &f->d;
	char err[256] = "";

	memset(cl, 0, sizeof(*cl));
	cl->c = pgd_session_create(d, slot, -1, getpid(), getuid(), getgid(),
				   err, sizeof(err));
	if (!cl->c)
		fx_die("session", err);
	d->slots[slot] = cl->c;
	d->live[d->n_live++] = cl->c;
	cl->map_bytes = cl->c->seg_bytes;
	cl->map = mmap(NULL, cl->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		       cl->c->memfd, 0);
	if (cl->map == MAP_FAILED)
		fx_die("client mapping", strerror(errno));
	cl->h = (struct pg_seg_header *)cl->map;
	if (pg_seg_check(cl->h, cl->map_bytes, err, sizeof(err)))
		fx_die("the new segment", err);
	cl->geo = *cl->h;
	pg_ring_attach(&cl->sq, &cl->h->sq, cl->map + cl->geo.sq_off, cl->geo.sq_slots, 1);
	pg_ring_attach(&cl->cq, &cl->h->cq, cl->map + cl->geo.cq_off, cl->geo.cq_slots, 0);
}

/* Read every published completion into cl->got; release them. */
static inline int fx_take(struct fx_client *cl)
{
	const struct pg_cqe *e;
	int n = 0;

	while ((e = pg_ring_peek(&cl->cq))) {
		struct fx_cqe *g;
		const uint8_t *src;

		if (cl->n_got == cl->cap_got) {
			cl->cap_got = cl->cap_got ? 2 * cl->cap_got : 64;
			cl->got = realloc(cl->got, sizeof(*cl->got) * (size_t)cl->cap_got);
			if (!cl->got)
				fx_die("completions", "out of memory");
		}
		g = &cl->got[cl->n_got++];
		memcpy(&g->e, e, sizeof(g->e));
		g->len = g->e.len;
		src = (const uint8_t *)g->e.text;
		if (g->e.flags & PG_CQE_F_ARENA) {
			CHECK(pg_arena_check(cl->geo.cq_arena, g->e.off, g->e.len),
			      "completion payload %u+%u outside the arena", g->e.off, g->e.len);
			if (!pg_arena_check(cl->geo.cq_arena, g->e.off, g->e.len))
				g->len = 0;
			src = cl->map + cl->geo.cq_arena_off + g->e.off;
		} else {
			CHECK(g->len <= PG_CQE_TEXT, "inline payload of %u bytes", g->len);
		}
		g->payload = xmalloc(g->len + 1);
		memcpy(g->payload, src, g->len);
		g->payload[g->len] = 0;
		pg_ring_consume(&cl->cq);
		n++;
	}
	pg_ring_release(&cl->cq);
	return n;
}

/* Forget the completions read so far. */
static inline void fx_clear(struct fx_client *cl)
{
	for (int i = 0; i < cl->n_got; i++)
		free(cl->got[i].payload);
	cl->n_got = 0;
}

/*
 * Write e (its payload at the next free arena offset, unless e->payload_off
 * is already set or payload is NULL) into the ring and publish it.
 * Returns 0, or -1 when the ring is full.
 */
static inline int fx_put(struct fx_client *cl, struct pg_sqe *e,
			 const void *payload, uint32_t len)
{
	void *slot = pg_ring_reserve(&cl->sq);

	if (!slot)
		return -1;
	if (payload) {
		if (cl->arena_pos + len > cl->geo.sq_arena)
			cl->arena_pos = 0;
		memcpy(cl->map + cl->geo.sq_arena_off + cl->arena_pos, payload, len);
		e->payload_off = cl->arena_pos;
		e->payload_len = len;
		cl->arena_pos += len;
	}
	memcpy(slot, e, sizeof(*e));
	pg_ring_commit(&cl->sq);
	pg_ring_publish(&cl->sq);
	return 0;
}

/* One turn of the loop for cl: its backlog, its submissions, publication. */
static inline int fx_serve(struct fx *f, struct fx_client *cl)
{
	int n;

	f->d.now = pg_now_s();
	pgd_flush_backlog(&f->d, cl->c);
	n = pgd_drain(&f->d, cl->c);
	pgd_publish(cl->c);
	return n;
}

/*
 * Run the loop until nothing is left: the workers' jobs finished, the
 * engine idle (at most 30 s: a hang fails the test, it does not block it).
 */
static inline void fx_settle(struct fx *f)
{
	struct pgd *d = &f->d;
	double until = pg_now_s() + 30;

	while (!pgd_idle(d) && pg_now_s() < until) {
		struct pgd_tokjob *j = pgd_tok_collect(d);

		d->now = pg_now_s();
		while (j) {
			struct pgd_tokjob *next = j->next;

			pgd_tok_finish(d, j);
			j = next;
		}
		if (!pg_engine_idle(d->engine)) {
			CHECK(pg_engine_step(d->engine) >= 0, "engine step: %s",
			      pg_engine_last_error(d->engine));
		} else if (pgd_tok_busy(d)) {
			struct pollfd p = { .fd = pgd_tok_fd(d), .events = POLLIN };
			uint64_t v;

			if (poll(&p, 1, 100) == 1 && read(p.fd, &v, sizeof(v)) < 0)
				break;
		}
		for (int i = 0; i < d->n_live; i++)
			pgd_publish(d->live[i]);
	}
	CHECK(pgd_idle(d), "the daemon did not go idle within 30 s");
	for (int i = 0; i < d->n_live; i++)
		pgd_publish(d->live[i]);
}

/*
 * The daemon lets cl go as server.c's close_client() does (its last word
 * in the segment); the client's mapping stays until fx_close().
 */
static inline void fx_disconnect(struct fx *f, struct fx_client *cl)
{
	struct pgd *d = &f->d;
	struct pgd_client *c = cl->c;

	pgd_requests_drop(d, c);
	pgd_say_goodbye(c, c->dead_code, c->dead_msg);
	d->slots[c->slot] = NULL;
	pgd_tok_forget(d, c->slot);
	for (int i = 0; i < d->n_live; i++)
		if (d->live[i] == c) {
			d->live[i] = d->live[--d->n_live];
			break;
		}
	if (c->dead)
		d->n_dead--;
	pgd_session_destroy(c);
	cl->c = NULL;
}

/* The client's side goes: its mapping and what it read. */
static inline void fx_close(struct fx_client *cl)
{
	fx_clear(cl);
	free(cl->got);
	munmap(cl->map, cl->map_bytes);
	memset(cl, 0, sizeof(*cl));
}

static inline void fx_free(struct fx *f)
{
	struct pgd *d = &f->d;

	fx_settle(f);
	pgd_tok_stop(d);
	pg_engine_destroy(d->engine);
	pgd_requests_free(d);
	free(d->live);
	free(d->slots);
	pg_forward_destroy(f->fw);
	pg_model_free(f->m);
}

#endif
