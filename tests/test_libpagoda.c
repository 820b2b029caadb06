/*
 * test_libpagoda.c - libpagoda without pagodad: its error texts, a missing
 * socket, and a fake daemon in a thread of this test that speaks
 * wire/client_proto.h over a real Unix socket and a real sealed memfd.
 *
 * The fake daemon either refuses in one bad way per case (a refusal, a
 * bad version, an unsealed or short memfd, a corrupt header, a hang-up),
 * each of which the library must turn down cleanly, or serves: it answers
 * pings, tokenizes bytes, answers INFO as a daemon of this version or of
 * one before PG_INFO_CHAT would, and answers generations with scripted
 * tokens while it records the payload the library built, so that the test
 * can compare it byte for byte with the wire format.
 *
 * It is not a test of pagodad (tests/test-client.sh runs the real one).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "include/pagoda.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "wire/client_proto.h"

static int failures;

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__,    \
				__LINE__, #cond);                         \
			failures++;                                       \
		}                                                         \
	} while (0)

#define CHECK_RC(expr, want)                                              \
	do {                                                              \
		int rc_ = (expr);                                         \
		if (rc_ != (want)) {                                      \
			fprintf(stderr, "%s:%d: FAIL: %s = %d (%s), want %d\n", \
				__FILE__, __LINE__, #expr, rc_,           \
				pagoda_strerror(rc_), (want));            \
			failures++;                                       \
		}                                                         \
	} while (0)

static char tmpdir[64];

/* ---- the fake daemon ---- */

enum scenario {
	SC_SERVE,		/* a working daemon */
	SC_REFUSE,		/* status PG_ECLIENTS with a message */
	SC_OLD_DAEMON,		/* status 0 but protocol 99 */
	SC_BAD_MAGIC,		/* not a pagoda welcome */
	SC_NO_FDS,		/* status 0 and no descriptors */
	SC_UNSEALED,		/* a memfd without seals */
	SC_SHORT,		/* a memfd smaller than the welcome says */
	SC_CORRUPT,		/* a header with a bad magic */
	SC_GEOMETRY,		/* a header whose regions overrun the file */
	SC_HANGUP,		/* closes after the hello */
};

struct fake {
	enum scenario sc;
	char path[108];
	int lsock, sock;
	pthread_t thread;
	/* geometry of SC_SERVE */
	uint32_t sq_slots, cq_slots, arena;
	/* the segment, daemon side */
	uint8_t *map;
	size_t map_bytes;	/* the segment's size (the welcome's) */
	size_t mapped;		/* bytes mapped at map */
	struct pg_seg_header *h;
	int sq_efd, cq_efd;
	struct pg_ring sq, cq;
	struct pg_arena cq_arena;
	uint64_t *cq_end;
	/* what the test looks at */
	pthread_mutex_t mu;
	uint8_t gen[8192];	/* the last GENERATE payload */
	uint32_t gen_len;
	uint64_t gen_id;
	unsigned n_requests;
	/* a request held until cancelled */
	uint64_t held_id;
	uint32_t held_n;
	/* INFO: the answer (the test's to set, under mu), the flags asked */
	enum { INFO_NEW, INFO_OLD, INFO_BROKEN } info_as;
	uint16_t info_flags;
};

static int listen_at(struct fake *f)
{
	static int serial;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(f->path, sizeof(f->path), "%s/d%d.sock", tmpdir, serial++);
	strcpy(sa.sun_path, f->path);
	f->lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lsock < 0 || bind(f->lsock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(f->lsock, 4))
		return -1;
	return 0;
}

static int send_welcome(int sock, const struct pg_welcome *w, const int *fds,
			int n_fds)
{
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)w, sizeof(*w) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(&ctl, 0, sizeof(ctl));
	if (n_fds) {
		struct cmsghdr *c;

		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, n_fds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(*w) ? 0 : -1;
}

/* make_segment - the memfd, mapped and laid out, sealed or not. */
static int make_segment(struct fake *f, int seal, uint64_t file_bytes)
{
	struct pg_seg_header h;
	int fd;

	if (pg_seg_layout(&h, f->sq_slots, f->cq_slots, f->arena, f->arena))
		return -1;
	h.generation = 0x1234;
	h.client_id = 7;
	h.max_inflight = 64;
	h.max_prompt = 1000;
	h.max_tokens = 4096;
	h.max_payload = 3000;
	h.n_vocab = 256;
	strcpy(h.model, "fake-model");
	f->map_bytes = h.seg_bytes;
	fd = memfd_create("pagoda-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)(file_bytes ? file_bytes : h.seg_bytes)))
		return -1;
	f->mapped = f->map_bytes;
	f->map = mmap(NULL, f->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return -1;
	}
	if (file_bytes < f->map_bytes && file_bytes)
		f->map_bytes = file_bytes;	/* only this much may be touched */
	else
		memcpy(f->map, &h, sizeof(h));
	f->h = (struct pg_seg_header *)f->map;
	if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return -1;
	return fd;
}

static void welcome_for(struct pg_welcome *w, const struct fake *f)
{
	memset(w, 0, sizeof(*w));
	w->magic = PG_PROTO_MAGIC;
	w->version = PG_PROTO_VERSION;
	w->client_id = 7;
	w->generation = 0x1234;
	w->seg_bytes = f->map_bytes;
}

/* ---- the fake daemon serving ---- */

/* The fake's stamp on the tokens of sample s (pg_cqe.t_ns). */
#define FAKE_T_NS(s) (1000000007ull + (s))

/*
 * post - one completion; data beyond PG_CQE_TEXT goes to the arena; arg
 * is PONG's echo, or the time stamp of TOKENS and LOGPROBS.
 */
static void post(struct fake *f, uint64_t id, uint8_t type, uint8_t sample,
		 uint8_t flags, int32_t code, const int32_t *ids, int n_ids,
		 const void *data, uint32_t len, uint64_t arg)
{
	struct pg_cqe c = { .req_id = id, .type = type, .sample = sample,
			    .flags = flags, .code = code, .len = len };
	void *slot, *buf;
	uint32_t off = 0;

	for (;;) {
		slot = pg_ring_reserve(&f->cq);
		if (slot) {
			pg_arena_reclaim(&f->cq_arena, pg_ring_consumed(&f->cq));
			buf = pg_arena_alloc(&f->cq_arena, f->cq.local,
					     len > PG_CQE_TEXT ? len : 0, &off);
			if (buf)
				break;
		}
		if (pg_ring_publish(&f->cq))
			eventfd_write(f->cq_efd, 1);
		usleep(50);
	}
	if (type == PG_CQE_TOKENS || type == PG_CQE_LOGPROBS)
		c.t_ns = arg;
	if (type == PG_CQE_PONG)
		c.arg = arg;
	else if (n_ids)
		memcpy(c.ids, ids, (size_t)n_ids * sizeof(int32_t));
	c.n_ids = (uint8_t)n_ids;
	if (len > PG_CQE_TEXT) {
		memcpy(buf, data, len);
		c.flags |= PG_CQE_F_ARENA;
		c.off = off;
	} else if (len) {
		memcpy(c.text, data, len);
	}
	memcpy(slot, &c, sizeof(c));
	pg_ring_commit(&f->cq);
}

static const char long_text[] = " and a piece of text longer than one slot";

/* The seed the fake daemon "draws" for the n-th request without one. */
#define FAKE_SEED(n) (0x5eed0000ull + (n))

static void answer_samples(struct fake *f, uint64_t id, uint32_t n,
			   uint32_t n_logprobs, int finish, uint64_t seed)
{
	static const int32_t a[] = { 10, 11 }, b[] = { 12 };
	struct pg_done_wire d = { .queue_s = 0.25, .ttft_s = 0.5, .itl_s = 0.125,
				  .n_prompt = 5, .n_cached = 1, .n_gen = 3,
				  .n_preempt = 0, .seed = seed };

	for (uint32_t s = 0; s < n; s++) {
		if (finish != PG_FINISH_WIRE_CANCELLED) {
			post(f, id, PG_CQE_TOKENS, (uint8_t)s, 0, 0, a, 2, "he", 2,
			     FAKE_T_NS(s));
			post(f, id, PG_CQE_TOKENS, (uint8_t)s, 0, 0, b, 1, long_text,
			     sizeof(long_text) - 1, FAKE_T_NS(s));
			if (n_logprobs) {	/* token 12's own, then the top */
				struct pg_logprob_wire lp[21] = { { 12, -0.25f } };

				for (uint32_t i = 0; i < n_logprobs; i++)
					lp[1 + i] = (struct pg_logprob_wire){ 12 + (int)i, -0.5f * (float)i };
				post(f, id, PG_CQE_LOGPROBS, (uint8_t)s, 0, 0, b, 1, lp,
				     (1 + n_logprobs) * (uint32_t)sizeof(lp[0]), FAKE_T_NS(s));
			}
		}
		d.n_gen = 3 + s;
		post(f, id, PG_CQE_DONE, (uint8_t)s, s + 1 == n ? PG_CQE_F_LAST : 0,
		     finish, NULL, 0, &d, sizeof(d), 0);
	}
}

/* last: the request is over (pagodad's errors but a cancel's ENOENT,
   a duplicate's and the goodbye of req_id 0) */
static void error_reply(struct fake *f, uint64_t id, int code, int last,
			const char *msg)
{
	post(f, id, PG_CQE_ERROR, 0, last ? PG_CQE_F_LAST : 0, code, NULL, 0,
	     msg, (uint32_t)strlen(msg), 0);
}

static void error_answer(struct fake *f, uint64_t id, int code, const char *msg)
{
	error_reply(f, id, code, 1, msg);
}

/* As pagodad closes a segment: the reason in the header, then closed. */
static void goodbye(struct fake *f, int code, const char *why)
{
	pg_ring_publish(&f->cq);
	f->h->bye.code = code;
	snprintf(f->h->bye.message, sizeof(f->h->bye.message), "%s", why);
	atomic_store(&f->h->closed, 1);
	eventfd_write(f->cq_efd, 1);
}

/* pagodad's reason for dropping a client that does not read (session.c) */
#define DROP_WHY "the client left its completion ring full for 1.0 s (1 waiting): disconnected"

/*
 * As pagodad drops a client that left its completion ring full: the ring
 * is full of the request's tokens, so the reason is in the header alone.
 */
static void drop_unread(struct fake *f, uint64_t id)
{
	static const int32_t a[] = { 10 };

	for (uint32_t i = 0; i < f->h->cq_slots; i++)
		post(f, id, PG_CQE_TOKENS, 0, 0, 0, a, 1, "x", 1, FAKE_T_NS(0));
	goodbye(f, PG_EPROTO, DROP_WHY);
}

/* Returns -1 when the fake daemon should stop. */
static int on_generate(struct fake *f, const struct pg_sqe *e,
		       const uint8_t *pl, uint32_t len)
{
	struct pg_gen_wire w;
	const char *prompt = (const char *)pl + sizeof(w);

	if (len < sizeof(w)) {
		error_answer(f, e->req_id, PG_EINVAL, "short payload");
		return 0;
	}
	memcpy(&w, pl, sizeof(w));
	pthread_mutex_lock(&f->mu);
	memcpy(f->gen, pl, len);
	f->gen_len = len;
	f->gen_id = e->req_id;
	pthread_mutex_unlock(&f->mu);
	if (w.prompt_kind == PG_PROMPT_TEXT && w.prompt_bytes == 4 &&
	    !memcmp(prompt, "hold", 4)) {
		f->held_id = e->req_id;
		f->held_n = w.n;
	} else if (w.prompt_kind == PG_PROMPT_TEXT && w.prompt_bytes == 4 &&
		   !memcmp(prompt, "fail", 4)) {
		error_answer(f, e->req_id, PG_ETOOBIG, "the fake daemon's limit");
	} else if (w.prompt_kind == PG_PROMPT_TEXT && w.prompt_bytes == 5 &&
		   !memcmp(prompt, "close", 5)) {
		error_reply(f, 0, PG_ESHUTDOWN, 0, "pagodad is stopping (SIGTERM)");
		goodbye(f, PG_ESHUTDOWN, "pagodad is stopping (SIGTERM)");
	} else if (w.prompt_kind == PG_PROMPT_TEXT && w.prompt_bytes == 7 &&
		   !memcmp(prompt, "grammar", 7)) {	/* as finish_max allows */
		answer_samples(f, e->req_id, w.n, 0, w.finish_max >= PG_FINISH_WIRE_GRAMMAR ?
			       PG_FINISH_WIRE_GRAMMAR : PG_FINISH_WIRE_ERROR, w.seed);
	} else if (w.prompt_kind == PG_PROMPT_TEXT && w.prompt_bytes == 3 &&
		   !memcmp(prompt, "die", 3)) {
		return -1;
	} else if (w.prompt_kind == PG_PROMPT_TEXT && w.prompt_bytes == 4 &&
		   !memcmp(prompt, "drop", 4)) {
		drop_unread(f, e->req_id);
		return -1;
	} else {
		answer_samples(f, e->req_id, w.n, w.n_logprobs, PG_FINISH_WIRE_LENGTH,
			       w.flags & PG_GEN_SEED_RANDOM ? FAKE_SEED(f->n_requests) : w.seed);
	}
	return 0;
}

/*
 * INFO as this version answers it (the chat part with PG_INFO_CHAT, its
 * names filling their 16 bytes but for the NUL), as a daemon before
 * PG_INFO_CHAT did (the flag ignored), or with a length neither gives.
 */
static void on_info(struct fake *f, const struct pg_sqe *e)
{
	struct {
		struct pg_info_wire w;
		struct pg_chat_info_wire chat;
		uint8_t extra[10];
	} a = { .w = { .n_vocab = 256, .n_ctx_train = 512,
		       .n_blocks = 2, .n_embd = 64, .kv_pages = 100,
		       .page_tokens = 16, .bos = 1, .eos = 0xffffffff,
		       .generation = 0x1234, .pp = 1, .tp = 1, .cp = 1,
		       .n_clients = 3, .n_active = 2 } };
	size_t len = sizeof(a.w);

	strcpy(a.w.model, "fake-model");
	strcpy(a.w.arch, "llama");
	strcpy(a.chat.format, "qwen2");
	strcpy(a.chat.tools, "hermes-123456789");	/* 15 bytes kept */
	pthread_mutex_lock(&f->mu);
	f->info_flags = e->flags;
	if (f->info_as == INFO_NEW && (e->flags & PG_INFO_CHAT))
		len += sizeof(a.chat);
	else if (f->info_as == INFO_BROKEN && (e->flags & PG_INFO_CHAT))
		len += 10;
	pthread_mutex_unlock(&f->mu);
	post(f, e->req_id, PG_CQE_INFO, 0, 0, 0, NULL, 0, &a, (uint32_t)len, 0);
}

static int on_entry(struct fake *f, const struct pg_sqe *e, const uint8_t *pl,
		    uint32_t len)
{
	int32_t ids[1024];
	char text[1024];
	uint32_t n = 0;

	f->n_requests++;
	switch (e->op) {
	case PG_OP_PING:
		post(f, e->req_id, PG_CQE_PONG, 0, 0, 0, NULL, 0, NULL, 0, e->arg);
		break;
	case PG_OP_GENERATE:
		return on_generate(f, e, pl, len);
	case PG_OP_CANCEL:
		if (e->req_id == f->held_id && f->held_id) {
			answer_samples(f, e->req_id, f->held_n, 0, PG_FINISH_WIRE_CANCELLED, 0);
			f->held_id = 0;
		} else {
			error_reply(f, e->req_id, PG_ENOENT, 0, "no such request");
		}
		break;
	case PG_OP_TOKENIZE:
		if (e->flags & PG_TOK_ADD_BOS)
			ids[n++] = 1;
		for (uint32_t i = 0; i < len && n < 1024; i++)
			ids[n++] = pl[i];
		post(f, e->req_id, PG_CQE_TOKENS_RESULT, 0, 0, 0, NULL, 0, ids,
		     n * 4, 0);
		break;
	case PG_OP_DETOKENIZE:
		for (n = 0; n < len / 4 && n < sizeof(text); n++) {
			int32_t id;

			memcpy(&id, pl + 4 * n, 4);
			text[n] = (char)('a' + id % 26);
		}
		post(f, e->req_id, PG_CQE_TEXT_RESULT, 0, 0, 0, NULL, 0, text, n, 0);
		break;
	case PG_OP_INFO:
		on_info(f, e);
		break;
	default:
		error_answer(f, e->req_id, PG_EINVAL, "unknown op");
	}
	return 0;
}

/* fake_idle - sleep on the submission doorbell; -1 when the client left. */
static int fake_idle(struct fake *f)
{
	struct pollfd fds[2] = { { .fd = f->sq_efd, .events = POLLIN },
				 { .fd = f->sock, .events = POLLIN } };
	eventfd_t v;
	int rc = 0;

	if (!pg_ring_prepare_sleep(&f->sq))
		return 0;
	if (poll(fds, 2, 2000) > 0) {
		if (fds[0].revents & POLLIN)
			eventfd_read(f->sq_efd, &v);
		if (fds[1].revents)
			rc = -1;
	}
	pg_ring_awake(&f->sq);
	return rc;
}

static void serve(struct fake *f)
{
	static uint8_t payload[PG_SEG_MAX_ARENA / 1024];
	unsigned idle = 0;

	for (;;) {
		const struct pg_sqe *slot = pg_ring_peek(&f->sq);
		struct pg_sqe e;
		int stop = 0;

		if (!slot) {
			if (pg_ring_publish(&f->cq))
				eventfd_write(f->cq_efd, 1);
			if (++idle < 2000)
				continue;	/* busy-poll a while, like pagodad */
			idle = 0;
			if (fake_idle(f))
				return;
			continue;
		}
		idle = 0;
		memcpy(&e, slot, sizeof(e));
		if (e.payload_len > sizeof(payload) ||
		    !pg_arena_check(f->h->sq_arena, e.payload_off, e.payload_len)) {
			error_answer(f, e.req_id, PG_EINVAL, "payload out of bounds");
		} else {
			memcpy(payload, f->map + f->h->sq_arena_off + e.payload_off,
			       e.payload_len);
			stop = on_entry(f, &e, payload, e.payload_len) < 0;
		}
		pg_ring_consume(&f->sq);
		pg_ring_release(&f->sq);
		if (stop)
			return;
	}
}

static int fake_accept(struct fake *f)
{
	struct pg_hello hello;

	f->sock = accept4(f->lsock, NULL, NULL, SOCK_CLOEXEC);
	if (f->sock < 0 || recv(f->sock, &hello, sizeof(hello), MSG_WAITALL) !=
	    (ssize_t)sizeof(hello))
		return -1;
	if (hello.magic != PG_PROTO_MAGIC || hello.version != PG_PROTO_VERSION)
		return -1;
	return 0;
}

/* refuse - the scenarios that end at the handshake. */
static void refuse(struct fake *f)
{
	struct pg_welcome w;
	int fds[3] = { -1, -1, -1 }, seal = f->sc != SC_UNSEALED;

	f->sq_slots = f->cq_slots = 8;
	f->arena = 4096;
	fds[0] = make_segment(f, seal, f->sc == SC_SHORT ? 4096 : 0);
	fds[1] = eventfd(0, EFD_CLOEXEC);
	fds[2] = eventfd(0, EFD_CLOEXEC);
	welcome_for(&w, f);
	if (f->sc == SC_SHORT)
		w.seg_bytes = f->mapped;	/* the file has only 4096 */
	if (f->sc == SC_CORRUPT)
		f->h->magic = 0xdeadbeef;
	if (f->sc == SC_GEOMETRY)
		f->h->cq_arena_off = (uint32_t)f->map_bytes;
	switch (f->sc) {
	case SC_REFUSE:
		w.status = PG_ECLIENTS;
		strcpy(w.message, "64 clients are connected: the limit (max_clients)");
		send_welcome(f->sock, &w, NULL, 0);
		break;
	case SC_OLD_DAEMON:
		w.version = 99;
		send_welcome(f->sock, &w, fds, 3);
		break;
	case SC_BAD_MAGIC:
		w.magic = 0x12345678;
		send_welcome(f->sock, &w, NULL, 0);
		break;
	case SC_NO_FDS:
		send_welcome(f->sock, &w, NULL, 0);
		break;
	case SC_HANGUP:
		shutdown(f->sock, SHUT_RDWR);
		break;
	default:
		send_welcome(f->sock, &w, fds, 3);
	}
	/* wait for the client to go */
	{
		char c;

		while (recv(f->sock, &c, 1, 0) > 0)
			;
	}
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (f->map)
		munmap(f->map, f->mapped);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	struct pg_welcome w;
	int fds[3];

	if (fake_accept(f))
		return NULL;
	if (f->sc != SC_SERVE) {
		refuse(f);
		close(f->sock);
		return NULL;
	}
	fds[0] = make_segment(f, 1, 0);
	fds[1] = f->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	fds[2] = f->cq_efd = eventfd(0, EFD_CLOEXEC);
	pg_ring_attach(&f->sq, &f->h->sq, f->map + f->h->sq_off, f->h->sq_slots, 0);
	pg_ring_attach(&f->cq, &f->h->cq, f->map + f->h->cq_off, f->h->cq_slots, 1);
	f->cq_end = calloc(f->h->cq_slots, sizeof(uint64_t));
	pg_arena_init(&f->cq_arena, f->map + f->h->cq_arena_off, f->h->cq_arena,
		      f->cq_end, f->h->cq_slots, f->cq.local);
	welcome_for(&w, f);
	if (!send_welcome(f->sock, &w, fds, 3))
		serve(f);
	close(fds[0]);
	close(f->sq_efd);
	close(f->cq_efd);
	close(f->sock);
	munmap(f->map, f->mapped);
	free(f->cq_end);
	return NULL;
}

static struct fake *fake_start(enum scenario sc, uint32_t slots, uint32_t arena)
{
	struct fake *f = calloc(1, sizeof(*f));

	f->sc = sc;
	f->sq_slots = f->cq_slots = slots;
	f->arena = arena;
	f->sock = -1;
	pthread_mutex_init(&f->mu, NULL);
	if (listen_at(f) || pthread_create(&f->thread, NULL, fake_main, f)) {
		perror("fake daemon");
		exit(1);
	}
	return f;
}

static void fake_stop(struct fake *f)
{
	pthread_join(f->thread, NULL);
	close(f->lsock);
	unlink(f->path);
	free(f);
}

/* ---- tests that need no daemon ---- */

static void test_strerror(void)
{
	for (int c = 0; c < PG_ERROR_MAX; c++) {
		const char *s = pagoda_strerror(-c);

		CHECK(s && *s && strcmp(s, "unknown error"));
		CHECK(pagoda_strerror(c) == s);
		for (int d = 0; d < c; d++)
			CHECK(strcmp(s, pagoda_strerror(-d)));
	}
	CHECK(!strcmp(pagoda_strerror(-PG_ERROR_MAX), "unknown error"));
	CHECK(!strcmp(pagoda_strerror(PAGODA_ESHUTDOWN), "the daemon stopped or restarted"));
	CHECK(!strcmp(pagoda_finish_name(PAGODA_FINISH_LENGTH), "length"));
	CHECK(!strcmp(pagoda_finish_name(PAGODA_FINISH_CANCELLED), "cancelled"));
	CHECK(!strcmp(pagoda_finish_name(PAGODA_FINISH_GRAMMAR), "grammar"));
	CHECK(!strcmp(pagoda_finish_name((enum pagoda_finish)99), "unknown"));
}

static void test_missing_socket(void)
{
	char path[128];
	pagoda_t *p = (pagoda_t *)&p;

	snprintf(path, sizeof(path), "%s/none.sock", tmpdir);
	CHECK_RC(pagoda_connect(path, &p), PAGODA_ECONNECT);
	CHECK(p == NULL);
	CHECK(strstr(pagoda_last_error(NULL), "is pagodad running"));
	CHECK(strstr(pagoda_last_error(NULL), "pagodad --foreground"));
	CHECK(strstr(pagoda_last_error(NULL), path));

	setenv("PAGODA_SOCKET", path, 1);
	CHECK_RC(pagoda_connect(NULL, &p), PAGODA_ECONNECT);
	CHECK(strstr(pagoda_last_error(NULL), path));
	unsetenv("PAGODA_SOCKET");
}

static void test_permission(void)
{
	struct fake f = { .sc = SC_HANGUP };
	pagoda_t *p;

	if (geteuid() == 0)
		return;	/* root connects to anything */
	if (listen_at(&f))
		return;
	chmod(f.path, 0);
	CHECK_RC(pagoda_connect(f.path, &p), PAGODA_EACCESS);
	CHECK(strstr(pagoda_last_error(NULL), "pagoda group"));
	close(f.lsock);
	unlink(f.path);
}

/* Each bad daemon is refused with code and a message containing want. */
static void test_refusal(enum scenario sc, int code, const char *want)
{
	struct fake *f = fake_start(sc, 8, 4096);
	pagoda_t *p = (pagoda_t *)&p;
	int rc = pagoda_connect(f->path, &p);

	if (rc != code || !strstr(pagoda_last_error(NULL), want)) {
		fprintf(stderr, "FAIL: scenario %d: %d (%s) '%s', want %d '%s'\n",
			sc, rc, pagoda_strerror(rc), pagoda_last_error(NULL),
			code, want);
		failures++;
	}
	CHECK(p == NULL);
	fake_stop(f);
}

/* ---- against the serving fake daemon ---- */

/* The payload the library must build for req (by hand, from client_proto.h). */
static uint32_t expected_text_payload(uint8_t *buf)
{
	struct pg_gen_wire w = {
		.prompt_kind = PG_PROMPT_TEXT, .prompt_bytes = 5, .n_stop = 2,
		.stop_bytes = 7, .max_tokens = 9, .priority = -3, .n = 1,
		.flags = PG_GEN_TEXT | PG_GEN_IGNORE_EOS, .temperature = 0.5f,
		.top_k = 7, .top_p = 0.9f, .min_p = 0.01f, .repeat_penalty = 1.1f,
		.repeat_last_n = 32, .presence_penalty = 0.2f,
		.frequency_penalty = 0.3f, .seed = 1234, .n_logprobs = 2,
		.finish_max = PG_FINISH_WIRE_GRAMMAR,
	};

	memcpy(buf, &w, sizeof(w));
	memcpy(buf + sizeof(w), "hello\n\n\0END\0", 12);
	return sizeof(w) + 12;
}

static void test_encoding(pagoda_t *p, struct fake *f)
{
	static const char *const stop[] = { "\n\n", "END" };
	static const int32_t toks[] = { 1, 2, 3 };
	struct pagoda_message msgs[] = { { PAGODA_ROLE_SYSTEM, "be brief" },
					 { PAGODA_ROLE_USER, "hi" },
					 { PAGODA_ROLE_TOOL, "21C" } };
	struct pagoda_request req;
	struct pagoda_completion c;
	struct pg_gen_wire w;
	uint8_t want[256];
	uint32_t len = expected_text_payload(want);

	pagoda_request_init(&req);
	req.prompt = "hello";
	req.temperature = 0.5f;
	req.top_k = 7;
	req.top_p = 0.9f;
	req.min_p = 0.01f;
	req.repeat_penalty = 1.1f;
	req.repeat_last_n = 32;
	req.presence_penalty = 0.2f;
	req.frequency_penalty = 0.3f;
	req.seed = 1234;
	req.n_logprobs = 2;
	req.max_tokens = 9;
	req.stop = stop;
	req.n_stop = 2;
	req.ignore_eos = 1;
	req.priority = -3;
	req.id = 77;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	pthread_mutex_lock(&f->mu);
	CHECK(f->gen_len == len && !memcmp(f->gen, want, len));
	CHECK(f->gen_id == 77);
	pthread_mutex_unlock(&f->mu);
	CHECK(c.id == 77);
	pagoda_completion_free(&c);

	/* token ids: 4 bytes each, as they are */
	pagoda_request_init(&req);
	req.tokens = toks;
	req.n_tokens = 3;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	pagoda_completion_free(&c);
	pthread_mutex_lock(&f->mu);
	memcpy(&w, f->gen, sizeof(w));
	CHECK(w.prompt_kind == PG_PROMPT_TOKENS && w.prompt_bytes == 12);
	CHECK(w.n_stop == 0 && w.stop_bytes == 0 && w.n == 1 && w.max_tokens == 128);
	/* the defaults are the pagoda command's: sampling, with a fresh seed */
	CHECK(w.flags == (PG_GEN_TEXT | PG_GEN_SEED_RANDOM) && w.seed == 0);
	CHECK(w.temperature == 0.8f && w.top_k == 40 && w.top_p == 0.95f &&
	      w.min_p == 0.05f);
	CHECK(w.repeat_penalty == 1.0f && w.repeat_last_n == 64);
	CHECK(f->gen_len == sizeof(w) + 12 && !memcmp(f->gen + sizeof(w), toks, 12));
	pthread_mutex_unlock(&f->mu);

	/* chat: (role, len) then the content padded to 4 bytes */
	pagoda_request_init(&req);
	req.messages = msgs;
	req.n_messages = 3;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	pagoda_completion_free(&c);
	pthread_mutex_lock(&f->mu);
	{
		static const uint8_t chat[] = {
			0, 0, 0, 0, 8, 0, 0, 0, 'b', 'e', ' ', 'b', 'r', 'i', 'e', 'f',
			1, 0, 0, 0, 2, 0, 0, 0, 'h', 'i', 0, 0,
			3, 0, 0, 0, 3, 0, 0, 0, '2', '1', 'C', 0,
		};

		memcpy(&w, f->gen, sizeof(w));
		CHECK(w.prompt_kind == PG_PROMPT_CHAT && w.prompt_bytes == sizeof(chat));
		CHECK(f->gen_len == sizeof(w) + sizeof(chat));
		CHECK(!memcmp(f->gen + sizeof(w), chat, sizeof(chat)));
	}
	pthread_mutex_unlock(&f->mu);
}

static void test_bad_requests(pagoda_t *p)
{
	static const int32_t toks[] = { 1 };
	static char big[4000];
	struct pagoda_request req;
	struct pagoda_completion c;
	uint64_t id;

	pagoda_request_init(&req);
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_EINVAL);	/* no prompt */
	CHECK(strstr(pagoda_last_error(p), "exactly one"));
	req.prompt = "x";
	req.tokens = toks;
	req.n_tokens = 1;
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_EINVAL);	/* two */
	req.tokens = NULL;
	req.n = 0;
	CHECK_RC(pagoda_generate(p, &req, &c), PAGODA_EINVAL);
	req.n = 17;
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_EINVAL);
	req.n = 1;
	req.n_logprobs = 21;
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_EINVAL);
	req.n_logprobs = 0;
	req.id = 1ull << 63;
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_EINVAL);
	req.id = 0;
	req.max_tokens = 5000;	/* the segment says 4096 */
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_ETOOBIG);
	CHECK(strstr(pagoda_last_error(p), "4096"));
	req.max_tokens = 4;
	memset(big, 'a', sizeof(big) - 1);
	req.prompt = big;	/* over max_payload 3000 */
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_ETOOBIG);
	req.prompt = "";
	CHECK_RC(pagoda_submit(p, &req, &id), PAGODA_EINVAL);
	CHECK(strstr(pagoda_last_error(p), "empty"));
	{
		/* the role after PAGODA_ROLE_TOOL is none */
		struct pagoda_message bad = { (enum pagoda_role)(PAGODA_ROLE_TOOL + 1), "x" };
		struct pagoda_request chat;

		pagoda_request_init(&chat);
		chat.messages = &bad;
		chat.n_messages = 1;
		CHECK_RC(pagoda_submit(p, &chat, &id), PAGODA_EINVAL);
		CHECK(strstr(pagoda_last_error(p), "unknown role"));
	}

	/* the daemon's refusal comes back with its code and message */
	req.prompt = "fail";
	CHECK_RC(pagoda_generate(p, &req, &c), PAGODA_ETOOBIG);
	CHECK(!strcmp(pagoda_last_error(p), "the fake daemon's limit"));
	CHECK(c.n_samples == 0 && c.samples == NULL);
	CHECK_RC(pagoda_cancel(p, 424242), PAGODA_ENOENT);
}

static void test_generate(pagoda_t *p)
{
	struct pagoda_request req;
	struct pagoda_completion c;
	char want[128];

	snprintf(want, sizeof(want), "he%s", long_text);
	pagoda_request_init(&req);
	req.prompt = "hello";
	req.n = 3;
	req.n_logprobs = 4;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	CHECK(c.n_samples == 3);
	for (size_t s = 0; s < c.n_samples && c.samples; s++) {
		struct pagoda_sample *x = &c.samples[s];

		CHECK(!strcmp(x->text, want) && x->text_len == strlen(want));
		CHECK(x->n_ids == 3 && x->ids[0] == 10 && x->ids[2] == 12);
		CHECK(x->finish == PAGODA_FINISH_LENGTH);
		CHECK(x->figures.n_gen == 3 + s && x->figures.ttft_s == 0.5);
		CHECK(x->figures.n_cached == 1 && x->figures.itl_s == 0.125);
		/* the log-probs belong to the last token */
		CHECK(x->logprobs_at && x->logprobs_at[0] == 0 &&
		      x->logprobs_at[2] == 0 && x->logprobs_at[3] == 4);
		CHECK(x->logprobs && x->logprobs[1].id == 13 &&
		      x->logprobs[1].logprob == -0.5f);
		/* each token's own log-probability: the last one's came */
		CHECK(x->token_logprobs && isnan(x->token_logprobs[0]) &&
		      x->token_logprobs[2] == -0.25f);
	}
	pagoda_completion_free(&c);
	CHECK(c.samples == NULL);

	/* without logprobs there are none */
	req.n = 1;
	req.n_logprobs = 0;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	CHECK(c.n_samples == 1 && c.samples && !c.samples[0].token_logprobs &&
	      !c.samples[0].logprobs);
	pagoda_completion_free(&c);
}

/*
 * A grammar that allowed no token: the library says it reads that finish
 * (finish_max), and gives it back as PAGODA_FINISH_GRAMMAR, both in a
 * completion and as a DONE event.
 */
static void test_finish_grammar(pagoda_t *p, struct fake *f)
{
	struct pagoda_request req;
	struct pagoda_completion c;
	struct pagoda_event ev;
	struct pg_gen_wire w;
	uint64_t id;
	int done = 0;

	pagoda_request_init(&req);
	req.prompt = "grammar";
	req.n = 2;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	pthread_mutex_lock(&f->mu);
	memcpy(&w, f->gen, sizeof(w));
	pthread_mutex_unlock(&f->mu);
	CHECK(w.finish_max == PG_FINISH_WIRE_GRAMMAR);
	CHECK(c.n_samples == 2 && c.samples &&
	      c.samples[0].finish == PAGODA_FINISH_GRAMMAR &&
	      c.samples[1].finish == PAGODA_FINISH_GRAMMAR && c.samples[1].n_ids == 3);
	pagoda_completion_free(&c);
	req.n = 1;
	CHECK_RC(pagoda_submit(p, &req, &id), 0);
	while (!done && pagoda_next_event(p, &ev, 2000) > 0)
		if (ev.type == PAGODA_EVENT_DONE) {
			CHECK(ev.id == id && ev.finish == PAGODA_FINISH_GRAMMAR && ev.last);
			done = 1;
		}
	CHECK(done);
}

/*
 * Seeds: a request that sets none asks the daemon for a fresh one
 * (PG_GEN_SEED_RANDOM, seed 0 on the wire) and gets it back in its
 * figures; a request that sets one sends it and gets it back.
 */
static void test_seed(pagoda_t *p, struct fake *f)
{
	struct pagoda_request req;
	struct pagoda_completion c;
	struct pg_gen_wire w;
	uint64_t first = 0;

	pagoda_request_init(&req);
	CHECK(req.seed == PAGODA_SEED_RANDOM && req.temperature > 0.0f);
	req.prompt = "hello";
	for (int i = 0; i < 2; i++) {
		CHECK_RC(pagoda_generate(p, &req, &c), 0);
		pthread_mutex_lock(&f->mu);
		memcpy(&w, f->gen, sizeof(w));
		CHECK((w.flags & PG_GEN_SEED_RANDOM) && w.seed == 0);
		CHECK(c.n_samples == 1 && c.samples &&
		      c.samples[0].figures.seed == FAKE_SEED(f->n_requests));
		pthread_mutex_unlock(&f->mu);
		if (c.samples && i == 0)
			first = c.samples[0].figures.seed;
		else if (c.samples)
			CHECK(c.samples[0].figures.seed != first);
		pagoda_completion_free(&c);
	}
	req.seed = 4242;
	CHECK_RC(pagoda_generate(p, &req, &c), 0);
	pthread_mutex_lock(&f->mu);
	memcpy(&w, f->gen, sizeof(w));
	CHECK(!(w.flags & PG_GEN_SEED_RANDOM) && w.seed == 4242);
	pthread_mutex_unlock(&f->mu);
	CHECK(c.samples && c.samples[0].figures.seed == 4242);
	pagoda_completion_free(&c);
}

/*
 * pagoda_chat_info against this daemon (the names), an older one (""
 * and 0) and a broken one; pagoda_model_info still asks without flags.
 */
static void test_chat_info(pagoda_t *p, struct fake *f)
{
	struct pagoda_model_info info;
	struct pagoda_chat_info ci;

	pthread_mutex_lock(&f->mu);
	CHECK(f->info_flags == 0);	/* pagoda_model_info's */
	pthread_mutex_unlock(&f->mu);
	memset(&ci, 0x55, sizeof(ci));
	CHECK_RC(pagoda_chat_info(p, &ci), 0);
	CHECK(!strcmp(ci.format, "qwen2") && !strcmp(ci.tools, "hermes-12345678"));
	pthread_mutex_lock(&f->mu);
	CHECK(f->info_flags == PG_INFO_CHAT);
	f->info_as = INFO_OLD;
	pthread_mutex_unlock(&f->mu);
	memset(&ci, 0x55, sizeof(ci));
	CHECK_RC(pagoda_chat_info(p, &ci), 0);
	CHECK(ci.format[0] == 0 && ci.tools[0] == 0);
	CHECK_RC(pagoda_model_info(p, &info), 0);
	CHECK(!strcmp(info.model, "fake-model"));
	pthread_mutex_lock(&f->mu);
	f->info_as = INFO_BROKEN;
	pthread_mutex_unlock(&f->mu);
	CHECK_RC(pagoda_chat_info(p, &ci), PAGODA_EPROTO);
	CHECK(strstr(pagoda_last_error(p), "210 bytes"));
	CHECK(ci.format[0] == 0 && ci.tools[0] == 0);
	pthread_mutex_lock(&f->mu);
	f->info_as = INFO_NEW;
	pthread_mutex_unlock(&f->mu);
}

static void test_ops(pagoda_t *p, struct fake *f)
{
	static const char text[] = "a text long enough to need the arena";
	struct pagoda_model_info info;
	int32_t *ids, back[3] = { 0, 1, 25 };
	size_t n, len;
	uint64_t rtt;
	char *s;

	CHECK_RC(pagoda_model_info(p, &info), 0);
	CHECK(!strcmp(info.model, "fake-model") && !strcmp(info.arch, "llama"));
	CHECK(info.n_vocab == 256 && info.bos == 1 && info.eos == -1);
	CHECK(info.generation == 0x1234 && info.client_id == 7);
	CHECK(info.max_inflight == 64 && info.max_payload == 3000);
	CHECK(info.n_clients == 3 && info.n_active == 2 && info.tp == 1);
	test_chat_info(p, f);

	CHECK_RC(pagoda_tokenize(p, text, strlen(text), PAGODA_TOKENIZE_ADD_BOS,
				 &ids, &n), 0);
	CHECK(n == strlen(text) + 1 && ids[0] == 1 && ids[1] == 'a');
	free(ids);
	CHECK_RC(pagoda_tokenize(p, "hi", 2, 0, &ids, &n), 0);
	CHECK(n == 2 && ids[0] == 'h');
	free(ids);
	CHECK_RC(pagoda_detokenize(p, back, 3, &s, &len), 0);
	CHECK(len == 3 && !strcmp(s, "abz"));
	free(s);

	for (int i = 0; i < 1000; i++)
		CHECK_RC(pagoda_ping(p, &rtt), 0);
	CHECK(rtt > 0 && rtt < 1000000000u);
	pagoda_set_spin_us(p, 0);	/* sleep at once: the doorbells work */
	for (int i = 0; i < 50; i++)
		CHECK_RC(pagoda_ping(p, &rtt), 0);
	pagoda_set_spin_us(p, 20);
}

/* Streamed requests, interleaved, each complete and in order. */
static void test_stream(pagoda_t *p)
{
	struct pagoda_request req;
	struct pagoda_event ev;
	uint64_t ids[5];
	int tokens[5] = { 0 }, done[5] = { 0 }, rc, n_done = 0, n_lp = 0;
	char text[5][128] = { { 0 } };

	pagoda_request_init(&req);
	req.prompt = "hello";
	req.n_logprobs = 2;
	for (int i = 0; i < 5; i++)
		CHECK_RC(pagoda_submit(p, &req, &ids[i]), 0);
	CHECK(ids[0] != ids[1]);
	while (n_done < 5 && (rc = pagoda_next_event(p, &ev, 2000)) > 0) {
		int i = 0;

		while (i < 5 && ids[i] != ev.id)
			i++;
		CHECK(i < 5);
		if (i == 5)
			break;
		CHECK(!done[i]);
		if (ev.type == PAGODA_EVENT_TOKENS) {
			CHECK(ev.emitted_ns == FAKE_T_NS(ev.sample));
			tokens[i] += (int)ev.n_ids;
			strncat(text[i], ev.text, sizeof(text[i]) - strlen(text[i]) - 1);
		} else if (ev.type == PAGODA_EVENT_LOGPROBS) {
			/* the token's own first on the wire, then the top 2 */
			CHECK(ev.logprob == -0.25f && ev.n_logprobs == 2);
			CHECK(ev.n_ids == 1 && ev.ids[0] == 12);
			CHECK(ev.logprobs[0].id == 12 && ev.logprobs[1].id == 13 &&
			      ev.logprobs[1].logprob == -0.5f);
			n_lp++;
		} else if (ev.type == PAGODA_EVENT_DONE) {
			CHECK(ev.last && ev.finish == PAGODA_FINISH_LENGTH);
			done[i] = 1;
			n_done++;
		}
	}
	CHECK(n_lp == 5);
	for (int i = 0; i < 5; i++)
		CHECK(tokens[i] == 3 && !strncmp(text[i], "he and", 6));
	CHECK_RC(pagoda_next_event(p, &ev, 0), 0);
	/* a timeout on an idle handle */
	CHECK_RC(pagoda_next_event(p, &ev, 30), 0);
	/* an id the caller chose is refused while it is in flight */
	req.n_logprobs = 0;
	req.id = 9;
	req.prompt = "hold";
	CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	CHECK_RC(pagoda_submit(p, &req, NULL), PAGODA_EDUPLICATE);
	CHECK_RC(pagoda_cancel(p, 9), 0);
	CHECK_RC(pagoda_next_event(p, &ev, 2000), 1);
	CHECK(ev.type == PAGODA_EVENT_DONE && ev.id == 9 &&
	      ev.finish == PAGODA_FINISH_CANCELLED && ev.last);

	/* a cancel that arrives after the end: its ENOENT is dropped */
	req.id = 0;
	req.prompt = "hello";
	CHECK_RC(pagoda_submit(p, &req, &ids[0]), 0);
	CHECK_RC(pagoda_cancel(p, ids[0]), 0);
	for (int i = 0; i < 3; i++) {
		CHECK_RC(pagoda_next_event(p, &ev, 2000), 1);
		CHECK(ev.id == ids[0] && ev.type != PAGODA_EVENT_ERROR);
	}
	CHECK(ev.type == PAGODA_EVENT_DONE && ev.last);
	CHECK_RC(pagoda_next_event(p, &ev, 50), 0);

	/* an ENOENT for a request still running (the daemon lost it) is not
	   its end: the fake holds only the newest held request */
	req.prompt = "hold";
	req.id = 20;
	CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	req.id = 21;
	CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	CHECK_RC(pagoda_cancel(p, 20), 0);
	CHECK_RC(pagoda_cancel(p, 21), 0);
	CHECK_RC(pagoda_next_event(p, &ev, 2000), 1);
	CHECK(ev.type == PAGODA_EVENT_DONE && ev.id == 21);
	CHECK_RC(pagoda_cancel(p, 20), 0);	/* still in flight for us */
	CHECK_RC(pagoda_next_event(p, &ev, 50), 0);
}

/* An event loop: poll pagoda_fd(), then read events without waiting. */
static void test_event_loop(pagoda_t *p)
{
	struct pagoda_request req;
	struct pagoda_event ev;
	struct pollfd pfd = { .events = POLLIN };
	int got_done = 0, rounds = 0, rc;

	pfd.fd = pagoda_fd(p);
	CHECK(pfd.fd >= 0);
	CHECK(pagoda_fd(p) == pfd.fd);
	CHECK(poll(&pfd, 1, 0) == 0);	/* idle: not readable */
	pagoda_request_init(&req);
	req.prompt = "hello";
	CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	while (!got_done && rounds++ < 100) {
		CHECK(poll(&pfd, 1, 2000) == 1);
		while ((rc = pagoda_next_event(p, &ev, 0)) > 0)
			got_done |= ev.type == PAGODA_EVENT_DONE;
		CHECK(rc == 0);
	}
	CHECK(got_done);
	CHECK(poll(&pfd, 1, 20) == 0);	/* drained: quiet again */
}

struct gen_arg {
	pagoda_t *p;
	int rc;
	struct pagoda_completion c;
};

static void *generate_held(void *arg)
{
	struct gen_arg *g = arg;
	struct pagoda_request req;

	pagoda_request_init(&req);
	req.prompt = "hold";
	req.id = 555;
	req.n = 2;
	g->rc = pagoda_generate(g->p, &req, &g->c);
	return NULL;
}

/* One thread blocks in pagoda_generate; another cancels it and pings. */
static void test_threads(pagoda_t *p)
{
	struct gen_arg g = { .p = p };
	pthread_t t;
	uint64_t rtt;
	int rc;

	pthread_create(&t, NULL, generate_held, &g);
	usleep(20000);
	/* round trips beside the waiter, sleeping each time: the doorbell
	   wakes both, and neither may lose the other's answer */
	pagoda_set_spin_us(p, 0);
	for (int i = 0; i < 300; i++)
		CHECK_RC(pagoda_ping(p, &rtt), 0);
	pagoda_set_spin_us(p, 20);
	do {
		rc = pagoda_cancel(p, 555);
		if (rc == PAGODA_ENOENT)
			usleep(1000);	/* not submitted yet */
	} while (rc == PAGODA_ENOENT);
	CHECK_RC(rc, 0);
	pthread_join(t, NULL);
	CHECK_RC(g.rc, 0);
	CHECK(g.c.n_samples == 2 && g.c.samples &&
	      g.c.samples[1].finish == PAGODA_FINISH_CANCELLED);
	pagoda_completion_free(&g.c);
}

struct worker {
	pagoda_t *p;
	int seed;
	int bad;
};

/* One of several threads on one handle: generations, pings, tokenizing. */
static void *work(void *arg)
{
	struct worker *w = arg;
	struct pagoda_request req;
	struct pagoda_completion c;
	int32_t *ids;
	size_t n;
	uint64_t rtt;

	pagoda_request_init(&req);
	req.prompt = "hello";
	for (int i = 0; i < 150; i++) {
		switch ((i + w->seed) % 3) {
		case 0:
			req.n = 1 + i % 3;
			if (pagoda_generate(w->p, &req, &c) || c.n_samples != (size_t)req.n ||
			    c.samples[req.n - 1].n_ids != 3 ||
			    c.samples[0].finish != PAGODA_FINISH_LENGTH)
				w->bad++;
			pagoda_completion_free(&c);
			break;
		case 1:
			w->bad += pagoda_ping(w->p, &rtt) != 0;
			break;
		case 2:
			if (pagoda_tokenize(w->p, "abc", 3, 0, &ids, &n) || n != 3 ||
			    ids[2] != 'c')
				w->bad++;
			free(ids);
			break;
		}
	}
	return NULL;
}

/*
 * Four threads on one handle, each waiting for its own answers, while this
 * thread streams its requests' events: every answer reaches its caller
 * and nothing hangs (a lost wake-up would).
 */
static void test_many_threads(void)
{
	struct fake *f = fake_start(SC_SERVE, 16, 8192);
	struct worker w[4];
	pthread_t t[4];
	struct pagoda_request req;
	struct pagoda_event ev;
	pagoda_t *p;
	int n_done = 0, rc;

	CHECK_RC(pagoda_connect(f->path, &p), 0);
	if (!p) {
		fake_stop(f);
		return;
	}
	pagoda_set_spin_us(p, 2);	/* sleep often: exercise the doorbells */
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .p = p, .seed = i };
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	pagoda_request_init(&req);
	req.prompt = "hello";
	for (int i = 0; i < 100; i++) {
		CHECK_RC(pagoda_submit(p, &req, NULL), 0);
		while ((rc = pagoda_next_event(p, &ev, i % 2 ? 0 : 5)) > 0)
			n_done += ev.type == PAGODA_EVENT_DONE;
		CHECK(rc == 0);
	}
	while (n_done < 100 && pagoda_next_event(p, &ev, 5000) > 0)
		n_done += ev.type == PAGODA_EVENT_DONE;
	CHECK(n_done == 100);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].bad == 0);
	}
	pagoda_close(p);
	fake_stop(f);
}

/* A small segment: the rings and arenas wrap and fill; nothing is lost. */
static void test_full_rings(void)
{
	struct fake *f = fake_start(SC_SERVE, 8, 4096);
	struct pagoda_request req;
	struct pagoda_event ev;
	char prompt[1001];
	pagoda_t *p;
	int n_done = 0, n_tok = 0, rc;

	memset(prompt, 'x', 1000);
	prompt[1000] = 0;
	CHECK_RC(pagoda_connect(f->path, &p), 0);
	if (!p) {
		fake_stop(f);
		return;
	}
	pagoda_request_init(&req);
	req.prompt = prompt;
	/* 60 submissions of about 1 KB through 4 KB of arena, 8 slots */
	for (int i = 0; i < 60; i++)
		CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	while (n_done < 60 && (rc = pagoda_next_event(p, &ev, 2000)) > 0) {
		n_done += ev.type == PAGODA_EVENT_DONE;
		n_tok += ev.type == PAGODA_EVENT_TOKENS ? (int)ev.n_ids : 0;
	}
	CHECK(n_done == 60 && n_tok == 180);
	pagoda_close(p);
	fake_stop(f);
}

/* The daemon marks the segment closed, or dies: every call says so. */
static void test_shutdown(const char *how, const char *why)
{
	struct fake *f = fake_start(SC_SERVE, 64, 65536);
	struct pagoda_request req;
	struct pagoda_event ev;
	pagoda_t *p;
	uint64_t rtt;

	CHECK_RC(pagoda_connect(f->path, &p), 0);
	if (!p) {
		fake_stop(f);
		return;
	}
	pagoda_request_init(&req);
	req.prompt = how;
	CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	CHECK_RC(pagoda_next_event(p, &ev, 3000), PAGODA_ESHUTDOWN);
	CHECK(strstr(pagoda_last_error(p), "reconnect"));
	CHECK(strstr(pagoda_last_error(p), why));
	CHECK_RC(pagoda_ping(p, &rtt), PAGODA_ESHUTDOWN);
	CHECK_RC(pagoda_submit(p, &req, NULL), PAGODA_ESHUTDOWN);
	pagoda_close(p);
	fake_stop(f);
}

/*
 * A client dropped for not reading: its events first, then the daemon's
 * own code and reason from the header, not "it stopped or restarted".
 */
static void test_dropped(void)
{
	struct fake *f = fake_start(SC_SERVE, 8, 4096);
	struct pagoda_request req;
	struct pagoda_event ev;
	pagoda_t *p;
	uint64_t rtt;
	int rc, n_tok = 0;

	CHECK_RC(pagoda_connect(f->path, &p), 0);
	if (!p) {
		fake_stop(f);
		return;
	}
	pagoda_request_init(&req);
	req.prompt = "drop";
	CHECK_RC(pagoda_submit(p, &req, NULL), 0);
	pthread_join(f->thread, NULL);	/* the ring full, the fake gone */
	while ((rc = pagoda_next_event(p, &ev, 3000)) > 0)
		n_tok += ev.type == PAGODA_EVENT_TOKENS;
	CHECK(n_tok == 8);
	CHECK_RC(rc, PAGODA_EPROTO);
	CHECK(strstr(pagoda_last_error(p), DROP_WHY));
	CHECK(strstr(pagoda_last_error(p), "reconnect"));
	CHECK_RC(pagoda_ping(p, &rtt), PAGODA_EPROTO);
	CHECK_RC(pagoda_submit(p, &req, NULL), PAGODA_EPROTO);
	pagoda_close(p);
	close(f->lsock);
	unlink(f->path);
	free(f);
}

static void test_serve(void)
{
	struct fake *f = fake_start(SC_SERVE, 64, 65536);
	pagoda_t *p;

	CHECK_RC(pagoda_connect(f->path, &p), 0);
	if (!p) {
		fprintf(stderr, "connect: %s\n", pagoda_last_error(NULL));
		fake_stop(f);
		return;
	}
	test_ops(p, f);
	test_encoding(p, f);
	test_generate(p);
	test_seed(p, f);
	test_finish_grammar(p, f);
	test_bad_requests(p);
	test_stream(p);
	test_threads(p);
	test_event_loop(p);
	pagoda_close(p);
	fake_stop(f);
}

int main(void)
{
	strcpy(tmpdir, "/tmp/test_libpagoda.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_strerror();
	test_missing_socket();
	test_permission();
	test_refusal(SC_REFUSE, PAGODA_ECLIENTS, "64 clients are connected");
	test_refusal(SC_OLD_DAEMON, PAGODA_EVERSION, "protocol 99");
	test_refusal(SC_BAD_MAGIC, PAGODA_EPROTO, "not a pagodad socket");
	test_refusal(SC_NO_FDS, PAGODA_EPROTO, "descriptors");
	test_refusal(SC_UNSEALED, PAGODA_EPROTO, "not sealed");
	test_refusal(SC_SHORT, PAGODA_EPROTO, "its welcome says");
	test_refusal(SC_CORRUPT, PAGODA_EPROTO, "not a pagoda segment");
	test_refusal(SC_GEOMETRY, PAGODA_EPROTO, "do not fit");
	test_refusal(SC_HANGUP, PAGODA_ECONNECT, "hung up");
	test_serve();
	test_full_rings();
	test_many_threads();
	test_shutdown("close", "pagodad is stopping (SIGTERM)");
	test_shutdown("die", "hung up");
	test_dropped();
	rmdir(tmpdir);
	if (failures)
		fprintf(stderr, "test_libpagoda: %d failures\n", failures);
	else
		printf("test_libpagoda: all passed\n");
	return failures ? 1 : 0;
}
