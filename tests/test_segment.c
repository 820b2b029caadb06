/*
 * test_segment.c - a client's shared segment as the daemon makes it and
 * defends it (daemon/session.c, daemon/request.c over shm/), in-process
 * through the daemon's library (tests/pgd_fixture.h):
 *
 *  - pgd_session_create's segment: a memfd of the layout's size, sealed
 *    against shrinking, growing and resealing; its header passes the
 *    client's pg_seg_check and carries the daemon's generation, the
 *    client's id (new for each client), the limits and the model;
 *  - the daemon never reads geometry back: a client that rewrites its
 *    header's sizes and offsets is still served within the real regions;
 *  - a client that moves its submission ring's tail backwards or more
 *    than a ring ahead, or its completion ring's head where it cannot be,
 *    is dropped with EPROTO and its last word in the header; another
 *    client is not disturbed;
 *  - a full completion ring: the backlog keeps every completion in order
 *    (arena payloads too), submissions wait meanwhile, and a client that
 *    leaves the ring full past --drain-timeout is dropped;
 *  - the client's checks of a header (pg_seg_check): the message for a
 *    wrong magic, a short mapping, another protocol version, geometry out
 *    of bounds, regions that overlap, are misaligned, or run past a
 *    truncated mapping; pg_seg_layout refuses the same geometry.
 *    (tests/test_ring.c fuzzes pg_seg_check's safety; this checks what it
 *    says.)
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "tests/pgd_fixture.h"

static struct fx F;

static void ping(struct fx_client *cl, uint64_t arg)
{
	struct pg_sqe e = { .req_id = arg, .op = PG_OP_PING, .arg = arg };

	CHECK(fx_put(cl, &e, NULL, 0) == 0, "the submission ring is full");
}

/* Serve cl once and read what came; the number read. */
static int turn(struct fx_client *cl)
{
	fx_clear(cl);
	fx_serve(&F, cl);
	return fx_take(cl);
}

/* ---- the segment pgd_session_create makes ---- */

static void test_created(struct fx_client *a, struct fx_client *b)
{
	const struct pg_seg_header *h = a->h;
	struct stat st;
	int seals = fcntl(a->c->memfd, F_GET_SEALS);

	CHECK(fstat(a->c->memfd, &st) == 0 && (uint64_t)st.st_size == F.d.lim.layout.seg_bytes &&
	      a->map_bytes == F.d.lim.layout.seg_bytes, "the memfd is %lld bytes, the layout %llu",
	      (long long)st.st_size, (unsigned long long)F.d.lim.layout.seg_bytes);
	CHECK(seals == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), "seals 0x%x", seals);
	CHECK(ftruncate(a->c->memfd, 4096) < 0 && errno == EPERM, "a sealed segment shrank");
	CHECK(fcntl(a->c->memfd, F_ADD_SEALS, F_SEAL_WRITE) < 0, "sealed again");
	CHECK(h->magic == PG_PROTO_MAGIC && h->version == PG_PROTO_VERSION, "identity");
	CHECK(h->sq_slots == F.cfg.sq_slots && h->cq_slots == F.cfg.cq_slots &&
	      h->sq_arena == F.cfg.sq_arena && h->cq_arena == F.cfg.cq_arena &&
	      h->sq_off == F.d.lim.layout.sq_off && h->cq_off == F.d.lim.layout.cq_off &&
	      h->sq_arena_off == F.d.lim.layout.sq_arena_off &&
	      h->cq_arena_off == F.d.lim.layout.cq_arena_off &&
	      h->seg_bytes == F.d.lim.layout.seg_bytes, "geometry as laid out");
	CHECK(h->generation == F.d.generation, "generation");
	CHECK(h->client_id == a->c->id && b->h->client_id == b->c->id &&
	      b->c->id == a->c->id + 1 && a->c->id > 0, "client ids %u %u", a->c->id, b->c->id);
	CHECK(h->max_inflight == (uint32_t)F.cfg.max_inflight &&
	      h->max_prompt == (uint32_t)F.d.lim.max_prompt && h->max_prompt == 256 &&
	      h->max_tokens == (uint32_t)F.cfg.max_tokens &&
	      h->max_payload == F.cfg.sq_arena && h->n_vocab == (uint32_t)F.m->hp.n_vocab,
	      "limits: inflight %u prompt %u tokens %u payload %u vocab %u", h->max_inflight,
	      h->max_prompt, h->max_tokens, h->max_payload, h->n_vocab);
	CHECK(!strcmp(h->model, F.m->name), "model '%s'", h->model);
	CHECK(atomic_load(&h->closed) == 0 && h->bye.code == 0, "closed at birth");
	CHECK(atomic_load(&h->sq.tail) == 0 && atomic_load(&h->sq.head) == 0 &&
	      atomic_load(&h->cq.tail) == 0 && atomic_load(&h->cq.head) == 0, "rings empty");
}

/* A client that scribbles over its header's geometry is served as laid out. */
static void test_geometry_ignored(struct fx_client *cl)
{
	struct pg_seg_header saved = *cl->h;

	cl->h->sq_slots = 1u << 31;
	cl->h->cq_slots = 3;
	cl->h->sq_arena = cl->h->cq_arena = UINT32_MAX;
	cl->h->sq_off = cl->h->cq_off = UINT32_MAX - 63;
	cl->h->sq_arena_off = cl->h->cq_arena_off = 0;
	cl->h->seg_bytes = UINT64_MAX;
	cl->h->max_prompt = cl->h->max_payload = UINT32_MAX;
	ping(cl, 11);
	CHECK(turn(cl) == 1 && cl->got[0].e.type == PG_CQE_PONG && cl->got[0].e.arg == 11,
	      "not served after rewriting its header");
	{
		struct pg_sqe e = { .req_id = 12, .op = PG_OP_INFO };

		CHECK(fx_put(cl, &e, NULL, 0) == 0, "ring full");
	}
	CHECK(turn(cl) == 1 && cl->got[0].e.type == PG_CQE_INFO &&
	      (cl->got[0].e.flags & PG_CQE_F_ARENA) && cl->got[0].len == sizeof(struct pg_info_wire),
	      "INFO (an arena payload) after rewriting the header");
	CHECK(!cl->c->dead, "dropped for rewriting its header");
	/* the limits the daemon enforces are its own, not the header's */
	{
		struct pg_sqe e = { .req_id = 13, .op = PG_OP_DETOKENIZE,
				    .payload_off = 0, .payload_len = F.cfg.sq_arena + 4 };

		CHECK(fx_put(cl, &e, NULL, 0) == 0, "ring full");
		CHECK(turn(cl) == 1 && cl->got[0].e.type == PG_CQE_ERROR &&
		      cl->got[0].e.code == PG_EINVAL, "a payload past the real arena accepted");
	}
	memcpy(cl->h, &saved, offsetof(struct pg_seg_header, closed));
}

/* ---- hostile ring counters ---- */

static const char sq_corrupt[] =
	"the submission ring's tail moved backwards or past the ring: disconnected";
static const char cq_corrupt[] =
	"the completion ring's head moved backwards or past the ring: disconnected; fix the client";

/* cl was dropped with EPROTO and msg, which its header says too. */
static void want_dropped(int line, struct fx_client *cl, const char *msg)
{
	CHECK(cl->c->dead && cl->c->dead_code == PG_EPROTO && !strcmp(cl->c->dead_msg, msg),
	      "line %d: dead %d code %d '%s'", line, cl->c->dead, cl->c->dead_code,
	      cl->c->dead_msg);
	fx_disconnect(&F, cl);
	CHECK(atomic_load(&cl->h->closed) == 1 && cl->h->bye.code == PG_EPROTO &&
	      !strcmp(cl->h->bye.message, msg), "line %d: bye %d '%s'", line,
	      cl->h->bye.code, cl->h->bye.message);
	fx_close(cl);
}

static void test_sq_tail_ahead(struct fx_client *cl, struct fx_client *other)
{
	uint32_t head = atomic_load(&cl->h->sq.head);

	ping(cl, 1);
	CHECK(turn(cl) == 1, "a PING first");
	head = atomic_load(&cl->h->sq.head);
	atomic_store(&cl->h->sq.tail, head + F.cfg.sq_slots + 1);
	CHECK(turn(cl) == 0, "entries read from a ring claiming %u", F.cfg.sq_slots + 1);
	ping(other, 2);
	CHECK(turn(other) == 1 && other->got[0].e.type == PG_CQE_PONG,
	      "the other client is not served");
	want_dropped(__LINE__, cl, sq_corrupt);
}

static void test_sq_tail_back(struct fx_client *cl)
{
	ping(cl, 1);
	ping(cl, 2);
	CHECK(turn(cl) == 2, "two PINGs first");
	atomic_store(&cl->h->sq.tail, atomic_load(&cl->h->sq.head) - 1);
	CHECK(turn(cl) == 0, "entries read from a tail that went back");
	want_dropped(__LINE__, cl, sq_corrupt);
}

/* A full ring's worth of PINGs, not read; the submissions it took. */
static int fill_cq(struct fx_client *cl, uint64_t first, int n)
{
	int sent = 0;

	while (sent < n) {
		int batch = 0;

		while (sent < n && batch < (int)F.cfg.sq_slots) {
			ping(cl, first + (uint64_t)sent++);
			batch++;
		}
		F.d.now = pg_now_s();
		pgd_flush_backlog(&F.d, cl->c);
		pgd_drain(&F.d, cl->c);
		pgd_publish(cl->c);
	}
	return sent;
}

static void test_cq_head_bad(struct fx_client *cl)
{
	fill_cq(cl, 1, (int)F.cfg.cq_slots);
	CHECK(cl->c->bl_head == NULL, "a backlog before the ring was full");
	atomic_store(&cl->h->cq.head, 1000);	/* past what was published */
	ping(cl, 99);
	turn(cl);
	CHECK(cl->c->dead, "a completion head past the tail went unnoticed");
	want_dropped(__LINE__, cl, cq_corrupt);
}

/* ---- the backlog ---- */

static void test_backlog(struct fx_client *cl)
{
	int n = (int)F.cfg.cq_slots + 10, bad_order = 0;
	struct pg_sqe info = { .req_id = 1000, .op = PG_OP_INFO };
	struct pg_cqe event = { .req_id = 5000, .type = PG_CQE_PONG, .arg = 5000 };
	uint64_t want[12];

	/* the first PING past the ring waits in the backlog, the rest in the
	   submission ring: a client with a backlog is not read */
	fill_cq(cl, 0, n);
	CHECK(cl->c->bl_count == 1, "%zu in the backlog, not 1", cl->c->bl_count);
	CHECK(fx_put(cl, &info, NULL, 0) == 0, "ring full");
	F.d.now = pg_now_s();
	pgd_flush_backlog(&F.d, cl->c);
	CHECK(pgd_drain(&F.d, cl->c) == 0, "submissions read while the backlog waits");
	fx_clear(cl);
	fx_take(cl);
	CHECK(cl->n_got == (int)F.cfg.cq_slots, "%d in the full ring", cl->n_got);
	for (int i = 0; i < cl->n_got; i++)
		bad_order += cl->got[i].e.type != PG_CQE_PONG || cl->got[i].e.arg != (uint64_t)i;
	/* the client has read, the backlog is not yet flushed: an engine
	   event now goes behind the backlog, not past it into the ring */
	pgd_emit(&F.d, cl->c, &event, NULL, 0);
	CHECK(cl->c->bl_count == 2, "an event jumped the backlog (%zu waiting)",
	      cl->c->bl_count);
	want[0] = (uint64_t)F.cfg.cq_slots;
	want[1] = 5000;
	for (int i = 2; i < 11; i++)
		want[i] = (uint64_t)F.cfg.cq_slots + (uint64_t)i - 1;
	want[11] = 1000;
	turn(cl);
	CHECK(cl->n_got == 12, "%d completions after the backlog, not 12", cl->n_got);
	for (int i = 0; i < cl->n_got && i < 12; i++)
		bad_order += cl->got[i].e.req_id != want[i] ||
			     cl->got[i].e.type != (i == 11 ? PG_CQE_INFO : PG_CQE_PONG);
	CHECK(!bad_order, "%d completions out of order", bad_order);
	CHECK(cl->n_got < 12 || (cl->got[11].len == sizeof(struct pg_info_wire) &&
				 !strcmp(((const struct pg_info_wire *)cl->got[11].payload)->model,
					 F.m->name)), "INFO after the backlog");
	CHECK(cl->c->bl_count == 0 && cl->c->bl_head == NULL && !cl->c->dead,
	      "the backlog did not drain");
	/* a backlog of arena payloads (INFO: 200 bytes each) */
	fill_cq(cl, 0, (int)F.cfg.cq_slots);
	for (int i = 0; i < 3; i++) {
		info.req_id = 2000 + (uint64_t)i;
		CHECK(fx_put(cl, &info, NULL, 0) == 0, "ring full");
	}
	F.d.now = pg_now_s();
	pgd_drain(&F.d, cl->c);
	CHECK(cl->c->bl_count == 1, "%zu INFO in the backlog", cl->c->bl_count);
	fx_clear(cl);
	fx_take(cl);
	turn(cl);
	CHECK(cl->n_got == 3, "%d INFO after the backlog", cl->n_got);
	for (int i = 0; i < cl->n_got; i++)
		CHECK(cl->got[i].e.req_id == 2000 + (uint64_t)i &&
		      cl->got[i].e.type == PG_CQE_INFO && (cl->got[i].e.flags & PG_CQE_F_ARENA) &&
		      ((const struct pg_info_wire *)cl->got[i].payload)->generation ==
		      F.d.generation, "INFO %d from the backlog", i);
}

static void test_drain_timeout(struct fx_client *cl)
{
	char want[256];

	F.cfg.drain_timeout_s = 0.05;
	fill_cq(cl, 0, (int)F.cfg.cq_slots + 1);
	CHECK(cl->c->bl_count == 1 && !cl->c->dead, "one in the backlog");
	usleep(150 * 1000);
	F.d.now = pg_now_s();
	pgd_flush_backlog(&F.d, cl->c);
	CHECK(cl->c->dead && cl->c->dead_code == PG_EPROTO, "not dropped past --drain-timeout");
	snprintf(want, sizeof(want), "the client left its completion ring full for ");
	CHECK(!strncmp(cl->c->dead_msg, want, strlen(want)) &&
	      strstr(cl->c->dead_msg, " s (1 waiting): disconnected; read completions promptly (or raise --drain-timeout) and reconnect"),
	      "'%s'", cl->c->dead_msg);
	F.cfg.drain_timeout_s = 5.0;
	fx_disconnect(&F, cl);
	CHECK(atomic_load(&cl->h->closed) == 1 && cl->h->bye.code == PG_EPROTO &&
	      !strncmp(cl->h->bye.message, want, strlen(want)), "bye '%s'", cl->h->bye.message);
	fx_close(cl);
}

/* ---- the client's checks of a header ---- */

static void want_seg(int line, const struct pg_seg_header *h, uint64_t map,
		     const char *want)
{
	char err[256] = "";
	int rc = pg_seg_check(h, map, err, sizeof(err));

	CHECK(want ? rc < 0 && !strcmp(err, want) : rc == 0,
	      "line %d: rc %d '%s', not '%s'", line, rc, err, want ? want : "(accepted)");
}

static void test_seg_check(void)
{
	struct pg_seg_header good, h;
	char regions[128], version[128];
	uint64_t map;

	CHECK(pg_seg_layout(&good, 16, 64, 65536, 4096) == 0, "layout");
	map = good.seg_bytes;
	CHECK(map % 4096 == 0 && good.sq_off == PG_SEG_HEADER_BYTES &&
	      good.cq_off == good.sq_off + 16 * PG_SLOT_BYTES &&
	      good.sq_arena_off == good.cq_off + 64 * PG_SLOT_BYTES &&
	      good.cq_arena_off >= good.sq_arena_off + 65536 &&
	      good.cq_arena_off + 4096ull <= map, "the layout's regions");
	snprintf(regions, sizeof(regions),
		 "the shared segment's regions do not fit its %llu bytes", (unsigned long long)map);
	want_seg(__LINE__, &good, map, NULL);
	h = good;
	h.magic ^= 1;
	want_seg(__LINE__, &h, map, "the shared segment is not a pagoda segment");
	want_seg(__LINE__, &good, PG_SEG_HEADER_BYTES - 1,
		 "the shared segment is not a pagoda segment");
	h = good;
	h.version = PG_PROTO_VERSION - 1;
	snprintf(version, sizeof(version), "the shared segment speaks protocol %u, this side %u",
		 PG_PROTO_VERSION - 1, PG_PROTO_VERSION);
	want_seg(__LINE__, &h, map, version);
#define GEOM(field, value) do {						\
	h = good;							\
	h.field = value;						\
	want_seg(__LINE__, &h, map, "the shared segment's geometry is out of bounds"); \
} while (0)
	GEOM(sq_slots, 24);
	GEOM(sq_slots, 4);
	GEOM(sq_slots, 0);
	GEOM(cq_slots, PG_SEG_MAX_SLOTS * 2);
	GEOM(sq_arena, PG_SEG_MIN_ARENA - 1);
	GEOM(cq_arena, PG_SEG_MAX_ARENA + 1);
#undef GEOM
#define REGIONS(field, value, m) do {					\
	h = good;							\
	h.field = value;						\
	want_seg(__LINE__, &h, m, regions);				\
} while (0)
	REGIONS(sq_off, 0, map);			/* over the header */
	REGIONS(sq_off, PG_SEG_HEADER_BYTES + 8, map);	/* misaligned */
	REGIONS(cq_off, good.cq_off - 64, map);		/* over the sq ring */
	REGIONS(cq_off, good.cq_off + 1, map);
	REGIONS(sq_arena_off, good.sq_arena_off - 64, map);
	REGIONS(cq_arena_off, good.cq_arena_off - 64 * 1024, map);	/* over the sq arena */
	REGIONS(cq_arena_off, UINT32_MAX - 63, map);	/* past the end */
	REGIONS(seg_bytes, map + 4096, map);		/* says more than mapped */
	REGIONS(seg_bytes, map - 4096, map);
#undef REGIONS
	/* a mapping cut short of the regions (the client's view of a truncated memfd) */
	snprintf(regions, sizeof(regions),
		 "the shared segment's regions do not fit its %llu bytes",
		 (unsigned long long)(map - 4096));
	want_seg(__LINE__, &good, map - 4096, regions);
	h = good;
	h.seg_bytes = map - 4096;
	want_seg(__LINE__, &h, map - 4096, regions);
	CHECK(pg_seg_layout(&h, 24, 64, 65536, 4096) < 0, "24 slots laid out");
	CHECK(pg_seg_layout(&h, 4, 64, 65536, 4096) < 0, "4 slots laid out");
	CHECK(pg_seg_layout(&h, 16, PG_SEG_MAX_SLOTS * 2, 65536, 4096) < 0, "2^17 slots");
	CHECK(pg_seg_layout(&h, 16, 64, PG_SEG_MIN_ARENA - 1, 4096) < 0, "a small arena");
	CHECK(pg_seg_layout(&h, 16, 64, 65536, PG_SEG_MAX_ARENA + 1) < 0, "a large arena");
	CHECK(pg_seg_layout(&h, PG_SEG_MAX_SLOTS, PG_SEG_MAX_SLOTS, PG_SEG_MAX_ARENA,
			    PG_SEG_MAX_ARENA) == 0, "the largest layout");
	want_seg(__LINE__, &h, h.seg_bytes, NULL);
}

int main(void)
{
	struct pgd_config cfg = fx_config();
	struct fx_client a, b, c;

	test_seg_check();
	fx_init(&F, &cfg, 16, 16);
	fx_connect(&F, &a, 0);
	fx_connect(&F, &b, 1);
	test_created(&a, &b);
	test_geometry_ignored(&a);
	test_sq_tail_ahead(&a, &b);
	fx_connect(&F, &a, 0);
	test_sq_tail_back(&a);
	fx_connect(&F, &a, 0);
	test_cq_head_bad(&a);
	fx_connect(&F, &a, 0);
	test_backlog(&a);
	fx_connect(&F, &c, 2);
	test_drain_timeout(&c);
	ping(&b, 7);
	CHECK(turn(&b) == 1 && b.got[0].e.arg == 7 && !b.c->dead,
	      "the bystander is not served at the end");
	fx_disconnect(&F, &a);
	fx_close(&a);
	fx_disconnect(&F, &b);
	CHECK(atomic_load(&b.h->closed) == 1 && b.h->bye.code == 0 && !b.h->bye.message[0],
	      "a client let go without a reason: bye %d '%s'", b.h->bye.code, b.h->bye.message);
	fx_close(&b);
	fx_free(&F);
	if (failures) {
		fprintf(stderr, "test_segment: %d checks failed\n", (int)failures);
		return 1;
	}
	printf("test_segment: all checks passed\n");
	return 0;
}
