/*
 * daemon_client.c - a raw pagodad client for the tests, written over
 * wire/ and shm/ alone (not libpagoda): the handshake, the seals and header checks, the
 * rings, arenas and doorbells, and sub-commands that tests/test-daemon.sh
 * runs against a live daemon:
 *
 *   daemon_client SOCK info                  print the model info
 *   daemon_client SOCK generate [opts]       print each sample's ids
 *                                            (--grammar GBNF, --finish-max N:
 *                                            the finish codes it reads)
 *   daemon_client SOCK stopcheck             stop strings end the text
 *   daemon_client SOCK tokenize TEXT [--bos] [--special]
 *   daemon_client SOCK detokenize ID,ID,...
 *   daemon_client SOCK ping [--count N]      round trips, polling and asleep
 *   daemon_client SOCK stress [--clients N] [--requests N]
 *   daemon_client SOCK garbage [--rounds N]  hostile client beside a victim
 *   daemon_client SOCK kill [--children N]   SIGKILL clients mid-stream
 *   daemon_client SOCK orphan                the connecting process exits,
 *                                            a child keeps its socket
 *   daemon_client SOCK bigprompt [--kind K]  pings stay quick while a prompt
 *                                            of ~1 MiB is tokenized
 *   daemon_client SOCK tokflood [--clients N] a short prompt's first token
 *                                            beside N clients' 1 MiB TOKENIZEs
 *   daemon_client SOCK version               another protocol version
 *   daemon_client SOCK hellofields           hello.flags, hello.reserved not 0
 *   daemon_client SOCK refused               (root) a uid the rules refuse
 *   daemon_client SOCK loris [--uid U | --refused]  handshakes beside silent
 *                                            connections (of a refused uid)
 *   daemon_client SOCK limits                against a daemon with small limits
 *   daemon_client SOCK restart-wait          outlive a daemon restart
 *   daemon_client SOCK unread                (--cq-slots 8) pings and split
 *                                            UTF-8 text into full rings
 *
 * Exit status: 0 pass, 1 fail, 2 usage, 77 skip.  It is not a library:
 * everything dies on the first unexpected system error.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "wire/client_proto.h"

static const char *sock_path;
static atomic_int failures;

#define FAIL(...) do { atomic_fetch_add(&failures, 1); \
	fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "daemon_client: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* ---- a connection ---- */

struct conn {
	int sock, sq_bell, cq_bell, memfd;
	uint8_t *seg;
	size_t seg_bytes;
	struct pg_seg_header *hdr;
	struct pg_ring sq, cq;
	struct pg_arena sq_arena;
	uint64_t *sq_end;		/* (sq_slots) */
	const uint8_t *cq_arena;
	uint32_t cq_arena_bytes;
	struct pg_welcome w;
	uint8_t *payload;		/* (cq_arena_bytes) the last completion's */
	int lost;			/* closed or hung up */
};

static int recv_welcome(int fd, struct pg_welcome *w, int *fds, int *n_fds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = w, .iov_len = sizeof(*w) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(fd, &mh, MSG_WAITALL | MSG_CMSG_CLOEXEC);

	*n_fds = 0;
	if (n != (ssize_t)sizeof(*w))
		return -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			*n_fds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			if (*n_fds > 4)
				*n_fds = 4;
			memcpy(fds, CMSG_DATA(cm), sizeof(int) * (size_t)*n_fds);
		}
	return 0;
}

/* Check what the daemon sent: seals, size, header; then map and attach. */
static int conn_map(struct conn *c)
{
	int seals = fcntl(c->memfd, F_GET_SEALS);
	struct stat st;
	char err[256];

	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) !=
	    (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		FAIL("the segment is not sealed (seals 0x%x)", seals);
		return -1;
	}
	CHECK(ftruncate(c->memfd, 0) < 0 && errno == EPERM,
	      "a sealed segment could be shrunk");
	if (fstat(c->memfd, &st) || (uint64_t)st.st_size != c->w.seg_bytes) {
		FAIL("the segment's size is not the welcome's");
		return -1;
	}
	c->seg_bytes = (size_t)st.st_size;
	c->seg = mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		      c->memfd, 0);
	if (c->seg == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	c->hdr = (struct pg_seg_header *)c->seg;
	if (pg_seg_check(c->hdr, c->seg_bytes, err, sizeof(err))) {
		FAIL("segment header: %s", err);
		return -1;
	}
	CHECK(c->hdr->generation == c->w.generation, "generation differs from the welcome's");
	pg_ring_attach(&c->sq, &c->hdr->sq, c->seg + c->hdr->sq_off, c->hdr->sq_slots, 1);
	pg_ring_attach(&c->cq, &c->hdr->cq, c->seg + c->hdr->cq_off, c->hdr->cq_slots, 0);
	c->sq_end = calloc(c->hdr->sq_slots, sizeof(*c->sq_end));
	c->cq_arena = c->seg + c->hdr->cq_arena_off;
	c->cq_arena_bytes = c->hdr->cq_arena;
	c->payload = malloc(c->cq_arena_bytes + 1);
	if (!c->sq_end || !c->payload)
		die("out of memory");
	pg_arena_init(&c->sq_arena, c->seg + c->hdr->sq_arena_off, c->hdr->sq_arena,
		      c->sq_end, c->hdr->sq_slots, c->sq.local);
	return 0;
}

/*
 * Connect and shake hands with protocol version `version`.  Returns 0, the
 * pg_error of a refusal (c->w.message says why), or -1 when the socket
 * could not be reached.
 */
static int conn_open(struct conn *c, uint32_t version)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct pg_hello h = { .magic = PG_PROTO_MAGIC, .version = version };
	int fds[4], n_fds;

	memset(c, 0, sizeof(*c));
	c->sq_bell = c->cq_bell = c->memfd = -1;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path);
	c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->sock < 0 || connect(c->sock, (struct sockaddr *)&addr, sizeof(addr)))
		goto out_close;
	/* a refusal may come before the hello went: read it all the same */
	if ((send(c->sock, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) &&
	     errno != EPIPE) || recv_welcome(c->sock, &c->w, fds, &n_fds))
		goto out_close;
	if (c->w.status) {
		for (int i = 0; i < n_fds; i++)
			close(fds[i]);
		close(c->sock);
		c->sock = -1;
		return (int)c->w.status;
	}
	if (n_fds != 3 || c->w.magic != PG_PROTO_MAGIC) {
		FAIL("a welcome without its three fds");
		goto out_close;
	}
	c->memfd = fds[0];
	c->sq_bell = fds[1];
	c->cq_bell = fds[2];
	if (conn_map(c))
		goto out_close;
	return 0;
out_close:
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	return -1;
}

static void conn_close(struct conn *c)
{
	if (c->seg)
		munmap(c->seg, c->seg_bytes);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->sq_bell >= 0)
		close(c->sq_bell);
	if (c->cq_bell >= 0)
		close(c->cq_bell);
	if (c->sock >= 0)
		close(c->sock);
	free(c->sq_end);
	free(c->payload);
	memset(c, 0, sizeof(*c));
	c->sock = c->sq_bell = c->cq_bell = c->memfd = -1;
}

static void conn_must_open(struct conn *c)
{
	int rc = conn_open(c, PG_PROTO_VERSION);

	if (rc)
		die("cannot connect to %s: %s", sock_path,
		    rc > 0 ? c->w.message : strerror(errno));
}

/*
 * Queue one submission (not yet visible).  Returns 0, or -1 when the ring
 * or the arena is full now.
 */
static int queue_sqe(struct conn *c, uint8_t op, uint64_t req_id, uint16_t flags,
		     const void *payload, uint32_t len, uint64_t arg)
{
	struct pg_sqe *e = pg_ring_reserve(&c->sq);
	uint32_t off = 0;
	void *dst;

	if (!e)
		return -1;
	dst = pg_arena_alloc(&c->sq_arena, c->sq.local, len, &off);
	if (!dst) {
		pg_arena_reclaim(&c->sq_arena, pg_ring_consumed(&c->sq));
		dst = pg_arena_alloc(&c->sq_arena, c->sq.local, len, &off);
		if (!dst)
			return -1;
	}
	if (len)
		memcpy(dst, payload, len);
	memset(e, 0, sizeof(*e));
	e->req_id = req_id;
	e->op = op;
	e->flags = flags;
	e->payload_off = off;
	e->payload_len = len;
	e->arg = arg;
	pg_ring_commit(&c->sq);
	return 0;
}

static void publish(struct conn *c)
{
	if (pg_ring_publish(&c->sq))
		eventfd_write(c->sq_bell, 1);
}

/* Read completions until one comes, the timeout passes or the link is lost. */
struct reply {
	struct pg_cqe cqe;
	const uint8_t *payload;		/* cqe.len bytes (c->payload) */
};

static int wait_bell(struct conn *c, int timeout_ms)
{
	struct pollfd p[2] = { { .fd = c->cq_bell, .events = POLLIN },
			       { .fd = c->sock, .events = POLLRDHUP } };
	eventfd_t v;
	int rc;

	rc = poll(p, 2, timeout_ms);
	if (rc > 0 && (p[0].revents & POLLIN))
		eventfd_read(c->cq_bell, &v);
	if (rc > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return -1;
	return rc;
}

/*
 * The next completion into *r: 1, or 0 after timeout_ms, or -1 when the
 * daemon closed the segment or hung up and nothing is left to read.
 * spin: poll the ring without sleeping (for round-trip figures).
 */
static int next_reply(struct conn *c, struct reply *r, int timeout_ms, int spin)
{
	double deadline = pg_now_s() + timeout_ms * 1e-3, spin_until = pg_now_s() + 50e-6;
	const struct pg_cqe *e;

	for (;;) {
		e = pg_ring_peek(&c->cq);
		if (e)
			break;
		if (pg_ring_corrupt(&c->cq)) {
			FAIL("the daemon's completion ring looks corrupt");
			return -1;
		}
		if (c->lost || atomic_load_explicit(&c->hdr->closed, memory_order_acquire)) {
			if (pg_ring_peek(&c->cq))
				continue;
			c->lost = 1;
			return -1;
		}
		if (pg_now_s() > deadline)
			return 0;
		if (spin || pg_now_s() < spin_until)
			continue;
		if (pg_ring_prepare_sleep(&c->cq)) {
			int ms = (int)((deadline - pg_now_s()) * 1e3) + 1;

			if (wait_bell(c, ms > 100 ? 100 : ms) < 0)
				c->lost = 1;
		}
		pg_ring_awake(&c->cq);
	}
	memcpy(&r->cqe, e, sizeof(r->cqe));
	if (r->cqe.flags & PG_CQE_F_ARENA) {
		if (!pg_arena_check(c->cq_arena_bytes, r->cqe.off, r->cqe.len)) {
			FAIL("a completion names bytes outside the arena");
			r->cqe.len = 0;
		}
		memcpy(c->payload, c->cq_arena + r->cqe.off, r->cqe.len);
	} else {
		if (r->cqe.len > PG_CQE_TEXT) {
			FAIL("an inline completion of %u bytes", r->cqe.len);
			r->cqe.len = PG_CQE_TEXT;
		}
		memcpy(c->payload, r->cqe.text, r->cqe.len);
	}
	c->payload[r->cqe.len] = 0;
	r->payload = c->payload;
	pg_ring_consume(&c->cq);
	pg_ring_release(&c->cq);
	return 1;
}

/* Submit, waiting (and dropping replies into sink) while the ring is full. */
typedef void (*reply_fn)(void *ctx, const struct reply *r);

static int submit(struct conn *c, uint8_t op, uint64_t req_id, uint16_t flags,
		  const void *payload, uint32_t len, uint64_t arg,
		  reply_fn sink, void *ctx)
{
	struct reply r;
	double t0 = pg_now_s();

	while (queue_sqe(c, op, req_id, flags, payload, len, arg)) {
		publish(c);
		if (next_reply(c, &r, 10, 0) > 0 && sink)
			sink(ctx, &r);
		if (c->lost || pg_now_s() - t0 > 30)
			return -1;
	}
	publish(c);
	return 0;
}

/* ---- requests ---- */

#define MAX_GEN 4096
#define MAX_SAMPLES 16

struct gen {
	int kind;			/* enum pg_prompt_kind */
	const char *text;		/* TEXT */
	const int32_t *ids;		/* TOKENS */
	int n_ids;
	const char *chat[16];		/* "role:content" */
	int n_chat;
	const char *stop[16];
	int n_stop;
	uint32_t max_tokens, n, flags;
	float temperature;
	uint64_t seed;
	const char *grammar;		/* GBNF; NULL: none */
	uint32_t finish_max;		/* pg_gen_wire's */
};

static void gen_default(struct gen *g)
{
	memset(g, 0, sizeof(*g));
	g->kind = PG_PROMPT_TOKENS;
	g->max_tokens = 16;
	g->n = 1;
}

static void sampling_greedy(struct pg_gen_wire *w)
{
	w->temperature = 0;
	w->top_k = 0;
	w->top_p = 1;
	w->min_p = 0;
	w->repeat_penalty = 1;
	w->repeat_last_n = 64;
}

static uint32_t put_chat(const struct gen *g, uint8_t *p)
{
	uint32_t off = 0;

	for (int i = 0; i < g->n_chat; i++) {
		const char *colon = strchr(g->chat[i], ':');
		struct pg_chat_msg_wire m;

		if (!colon)
			die("--chat ROLE:TEXT, not '%s'", g->chat[i]);
		m.role = !strncmp(g->chat[i], "system", 6) ? 0 :
			 !strncmp(g->chat[i], "user", 4) ? 1 : 2;
		m.len = (uint32_t)strlen(colon + 1);
		memcpy(p + off, &m, sizeof(m));
		memcpy(p + off + sizeof(m), colon + 1, m.len);
		off += (uint32_t)sizeof(m) + m.len;
		while (off % 4)
			p[off++] = 0;
	}
	return off;
}

/* A GENERATE payload for g into buf (room enough); its length. */
static uint32_t gen_payload(const struct gen *g, uint8_t *buf)
{
	struct pg_gen_wire w;
	uint8_t *p = buf + sizeof(w);

	memset(&w, 0, sizeof(w));
	sampling_greedy(&w);
	w.prompt_kind = (uint32_t)g->kind;
	if (g->kind == PG_PROMPT_TEXT) {
		w.prompt_bytes = (uint32_t)strlen(g->text);
		memcpy(p, g->text, w.prompt_bytes);
	} else if (g->kind == PG_PROMPT_TOKENS) {
		w.prompt_bytes = (uint32_t)(4 * g->n_ids);
		memcpy(p, g->ids, w.prompt_bytes);
	} else {
		w.prompt_bytes = put_chat(g, p);
	}
	p += w.prompt_bytes;
	for (int i = 0; i < g->n_stop; i++) {
		size_t l = strlen(g->stop[i]) + 1;

		memcpy(p, g->stop[i], l);
		p += l;
		w.stop_bytes += (uint32_t)l;
	}
	w.n_stop = (uint32_t)g->n_stop;
	if (g->grammar) {
		w.grammar_kind = PG_GRAMMAR_GBNF;
		w.grammar_bytes = (uint32_t)strlen(g->grammar);
		memcpy(p, g->grammar, w.grammar_bytes);
		p += w.grammar_bytes;
	}
	w.finish_max = g->finish_max;
	w.max_tokens = g->max_tokens;
	w.n = g->n;
	w.flags = g->flags | (g->grammar ? PG_GEN_GRAMMAR : 0);
	w.temperature = g->temperature;
	w.seed = g->seed;
	memcpy(buf, &w, sizeof(w));
	return (uint32_t)(p - buf);
}

/* What came back for one GENERATE request. */
struct stream {
	uint64_t req_id;
	int32_t ids[MAX_SAMPLES][MAX_GEN];
	int n_ids[MAX_SAMPLES];
	int done[MAX_SAMPLES];
	int finish[MAX_SAMPLES];
	char *text[MAX_SAMPLES];
	size_t text_len[MAX_SAMPLES];
	int last;			/* F_LAST seen */
	int error;			/* pg_error of an ERROR */
	char msg[512];
	int bad;			/* entries that broke the rules */
	uint64_t t_ns[MAX_SAMPLES];	/* the last TOKENS entry's stamp */
	uint32_t n_prompt;		/* from the first DONE */
};

static void stream_reset(struct stream *s, uint64_t req_id)
{
	for (int i = 0; i < MAX_SAMPLES; i++)
		free(s->text[i]);
	memset(s, 0, sizeof(*s));
	s->req_id = req_id;
}

static void stream_text(struct stream *s, int k, const uint8_t *p, uint32_t len)
{
	char *t = realloc(s->text[k], s->text_len[k] + len + 1);

	if (!t)
		die("out of memory");
	memcpy(t + s->text_len[k], p, len);
	s->text_len[k] += len;
	t[s->text_len[k]] = 0;
	s->text[k] = t;
}

/* Take one completion of s's request; checks order and completeness. */
static void stream_take(struct stream *s, const struct reply *r)
{
	const struct pg_cqe *e = &r->cqe;
	int k = e->sample;

	if (s->last || k >= MAX_SAMPLES) {
		s->bad++;
		return;
	}
	switch (e->type) {
	case PG_CQE_TOKENS:
		if (s->done[k] || e->n_ids > PG_CQE_IDS) {
			s->bad++;
			return;
		}
		/* stamped when the engine emitted it: in order, not ahead of us */
		if (!e->t_ns || e->t_ns < s->t_ns[k] || e->t_ns > pg_now_ns()) {
			s->bad++;
			return;
		}
		s->t_ns[k] = e->t_ns;
		for (int i = 0; i < e->n_ids && s->n_ids[k] < MAX_GEN; i++)
			s->ids[k][s->n_ids[k]++] = e->ids[i];
		if (e->len)
			stream_text(s, k, r->payload, e->len);
		return;
	case PG_CQE_DONE:
		if (s->done[k] || e->len != sizeof(struct pg_done_wire)) {
			s->bad++;
			return;
		}
		s->done[k] = 1;
		s->finish[k] = e->code;
		s->last = !!(e->flags & PG_CQE_F_LAST);
		if (!s->n_prompt) {
			struct pg_done_wire dw;

			memcpy(&dw, r->payload, sizeof(dw));
			s->n_prompt = dw.n_prompt;
		}
		return;
	case PG_CQE_ERROR:
		s->error = e->code;
		snprintf(s->msg, sizeof(s->msg), "%s", (const char *)r->payload);
		s->last = !!(e->flags & PG_CQE_F_LAST);
		return;
	}
	s->bad++;
}

/* One GENERATE alone: submit and read until its last entry. */
static int run_gen(struct conn *c, const struct gen *g, uint64_t req_id,
		   struct stream *s)
{
	uint8_t *buf = malloc(1 << 20);
	uint32_t len;
	struct reply r;
	int rc;

	if (!buf)
		die("out of memory");
	len = gen_payload(g, buf);
	stream_reset(s, req_id);
	rc = submit(c, PG_OP_GENERATE, req_id, 0, buf, len, 0, NULL, NULL);
	free(buf);
	if (rc)
		return -1;
	while (!s->last) {
		if (next_reply(c, &r, 30000, 0) <= 0)
			return -1;
		if (r.cqe.req_id != req_id) {
			s->bad++;
			continue;
		}
		stream_take(s, &r);
		if (s->error && !s->last)
			return 0;	/* DUPLICATE: the running one goes on */
	}
	return 0;
}

/* A one-entry answer (PONG, INFO, results, errors) to req_id. */
static int run_simple(struct conn *c, uint8_t op, uint64_t req_id, uint16_t flags,
		      const void *payload, uint32_t len, struct reply *r)
{
	if (submit(c, op, req_id, flags, payload, len, 0, NULL, NULL))
		return -1;
	for (;;) {
		if (next_reply(c, r, 30000, 0) <= 0)
			return -1;
		if (r->cqe.req_id == req_id)
			return 0;
	}
}

static const char *finish_name(int f)
{
	static const char *const names[] = { "stop", "length", "cancelled", "error",
					     "grammar" };

	return f >= 0 && f < 5 ? names[f] : "?";
}

/* ---- sub-commands: one request, printed ---- */

static int parse_ids(const char *s, int32_t *ids, int max)
{
	int n = 0;

	while (*s && n < max) {
		char *end;

		ids[n++] = (int32_t)strtol(s, &end, 10);
		if (end == s)
			die("bad id list '%s'", s);
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

static int cmd_info(struct conn *c)
{
	struct pg_info_wire w;
	struct reply r;

	if (run_simple(c, PG_OP_INFO, 1, 0, NULL, 0, &r) || r.cqe.type != PG_CQE_INFO ||
	    r.cqe.len != sizeof(w))
		die("no INFO answer");
	memcpy(&w, r.payload, sizeof(w));
	printf("model %s\narch %s\nn_vocab %u\nn_blocks %u\nkv_pages %u\npage_tokens %u\n"
	       "bos %d\neos %d\ngeneration %016" PRIx64 "\nplan %ux%ux%u\nclients %u\nactive %u\n",
	       w.model, w.arch, w.n_vocab, w.n_blocks, w.kv_pages, w.page_tokens,
	       (int32_t)w.bos, (int32_t)w.eos, w.generation, w.pp, w.tp, w.cp,
	       w.n_clients, w.n_active);
	return 0;
}

static int cmd_generate(struct conn *c, int argc, char **argv)
{
	static int32_t ids[8192];
	static struct stream s;
	struct gen g;
	int raw = 0;

	gen_default(&g);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--raw")) {	/* sample 0's text only, as is */
			g.flags |= PG_GEN_TEXT;
			raw = 1;
			continue;
		}
		if (!strcmp(a, "--ignore-eos")) {
			g.flags |= PG_GEN_IGNORE_EOS;
			continue;
		}
		if (!strcmp(a, "--text")) {
			g.flags |= PG_GEN_TEXT;
			continue;
		}
		if (!strcmp(a, "--content-special")) {
			g.flags |= PG_GEN_CONTENT_SPECIAL;
			continue;
		}
		if (!v)
			die("%s needs a value", a);
		i++;
		if (!strcmp(a, "--prompt")) {
			g.kind = PG_PROMPT_TEXT;
			g.text = v;
		} else if (!strcmp(a, "--prompt-ids")) {
			g.kind = PG_PROMPT_TOKENS;
			g.ids = ids;
			g.n_ids = parse_ids(v, ids, 8192);
		} else if (!strcmp(a, "--chat") && g.n_chat < 16) {
			g.kind = PG_PROMPT_CHAT;
			g.chat[g.n_chat++] = v;
		} else if (!strcmp(a, "--stop") && g.n_stop < 16) {
			g.stop[g.n_stop++] = v;
		} else if (!strcmp(a, "--max-tokens")) {
			g.max_tokens = (uint32_t)atoi(v);
		} else if (!strcmp(a, "--n")) {
			g.n = (uint32_t)atoi(v);
		} else if (!strcmp(a, "--temperature")) {
			g.temperature = strtof(v, NULL);
		} else if (!strcmp(a, "--seed")) {
			g.seed = strtoull(v, NULL, 0);
		} else if (!strcmp(a, "--grammar")) {
			g.grammar = v;
		} else if (!strcmp(a, "--finish-max")) {
			g.finish_max = (uint32_t)atoi(v);
		} else {
			die("unknown generate option %s", a);
		}
	}
	if (run_gen(c, &g, 7, &s))
		die("the request did not complete");
	if (s.error) {
		printf("error %d: %s\n", s.error, s.msg);
		return 3;
	}
	if (raw) {
		fwrite(s.text[0] ? s.text[0] : "", 1, s.text_len[0], stdout);
		return 0;
	}
	for (uint32_t k = 0; k < (g.n ? g.n : 1); k++) {
		printf("sample %u:", k);
		for (int i = 0; i < s.n_ids[k]; i++)
			printf(" %d", s.ids[k][i]);
		printf("\nfinish %u: %s\n", k, finish_name(s.finish[k]));
		if (!k)
			printf("prompt tokens %u\n", s.n_prompt);
		if (g.flags & PG_GEN_TEXT)
			printf("text %u: %s\n", k, s.text[k] ? s.text[k] : "");
	}
	CHECK(!s.bad, "%d completions broke the rules", s.bad);
	return 0;
}

static int cmd_tokenize(struct conn *c, int argc, char **argv)
{
	uint16_t flags = 0;
	struct reply r;

	if (argc < 1)
		die("tokenize TEXT [--bos] [--special]");
	for (int i = 1; i < argc; i++)
		flags |= !strcmp(argv[i], "--bos") ? PG_TOK_ADD_BOS :
			 !strcmp(argv[i], "--special") ? PG_TOK_SPECIAL : 0;
	if (run_simple(c, PG_OP_TOKENIZE, 3, flags, argv[0], (uint32_t)strlen(argv[0]), &r))
		die("no TOKENIZE answer");
	if (r.cqe.type != PG_CQE_TOKENS_RESULT)
		die("TOKENIZE answered type %u: %s", r.cqe.type, r.payload);
	putchar('[');
	for (uint32_t i = 0; i < r.cqe.len / 4; i++) {
		int32_t id;

		memcpy(&id, r.payload + 4 * i, 4);
		printf(i ? ", %d" : "%d", id);
	}
	puts("]");
	return 0;
}

static int cmd_detokenize(struct conn *c, int argc, char **argv)
{
	static int32_t ids[8192];
	struct reply r;
	int n;

	if (argc < 1)
		die("detokenize ID,ID,...");
	n = parse_ids(argv[0], ids, 8192);
	if (run_simple(c, PG_OP_DETOKENIZE, 4, 0, ids, (uint32_t)(4 * n), &r) ||
	    r.cqe.type != PG_CQE_TEXT_RESULT)
		die("no DETOKENIZE answer");
	printf("%s\n", (const char *)r.payload);
	return 0;
}

/*
 * Generate greedily, then again with a stop string taken from the middle
 * of that text: the second must stop, and its text must be the first's up
 * to the stop string.
 */
static int cmd_stopcheck(struct conn *c)
{
	static const int32_t ids[] = { 40, 41, 42, 43 };
	static struct stream a, b;
	struct gen g;
	char stop[8];
	const char *at;
	size_t cut;

	gen_default(&g);
	g.ids = ids;
	g.n_ids = 4;
	g.max_tokens = 40;
	g.flags = PG_GEN_IGNORE_EOS | PG_GEN_TEXT;
	if (run_gen(c, &g, 1, &a) || a.error || a.text_len[0] < 8)
		die("no text to take a stop string from");
	/* two bytes from the middle, not inside a UTF-8 sequence */
	for (cut = a.text_len[0] / 2; cut > 0 && ((unsigned char)a.text[0][cut] & 0xc0) == 0x80; cut--)
		;
	memcpy(stop, a.text[0] + cut, 2);
	stop[2] = 0;
	if (((unsigned char)stop[1] & 0xc0) == 0x80 || (unsigned char)stop[1] >= 0xc0)
		stop[1] = 0;
	at = strstr(a.text[0], stop);
	g.stop[g.n_stop++] = stop;
	if (run_gen(c, &g, 2, &b) || b.error)
		die("the request with a stop string did not complete");
	CHECK(b.finish[0] == PG_FINISH_WIRE_STOP, "a stop string did not stop (finish %d)", b.finish[0]);
	CHECK(at && b.text_len[0] == (size_t)(at - a.text[0]) &&
	      !memcmp(b.text[0] ? b.text[0] : "", a.text[0], b.text_len[0]),
	      "the text before the stop string differs (%zu bytes, expected %td)",
	      b.text_len[0], at ? at - a.text[0] : -1);
	printf("stopcheck: stop string of %zu bytes ended the text after %zu bytes\n",
	       strlen(stop), b.text_len[0]);
	return 0;
}

/* ---- ping ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Round trips of n pings, waiting gap_us between them; sorted µs in t. */
static void ping_series(struct conn *c, int n, int gap_us, double *t)
{
	struct reply r;

	for (int i = 0; i < n; i++) {
		double t0 = pg_now_s();

		if (submit(c, PG_OP_PING, 1000 + (uint64_t)i, 0, NULL, 0, (uint64_t)i, NULL, NULL) ||
		    next_reply(c, &r, 5000, 1) <= 0)
			die("no PONG");
		t[i] = (pg_now_s() - t0) * 1e6;
		CHECK(r.cqe.type == PG_CQE_PONG && r.cqe.arg == (uint64_t)i &&
		      r.cqe.req_id == 1000 + (uint64_t)i, "a PONG that does not echo its ping");
		if (gap_us) {
			double until = pg_now_s() + gap_us * 1e-6;

			while (pg_now_s() < until)
				usleep(100);
		}
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
}

static int cmd_ping(struct conn *c, int argc, char **argv)
{
	int n = argc >= 2 && !strcmp(argv[0], "--count") ? atoi(argv[1]) : 10000;
	double *t = calloc((size_t)(n > 100 ? n : 100), sizeof(*t));

	if (!t || n < 10)
		die("ping --count N (N >= 10)");
	ping_series(c, n / 10, 0, t);		/* warm up */
	ping_series(c, n, 0, t);
	printf("ping polling: n=%d min_us=%.2f p50_us=%.2f p99_us=%.2f\n", n, t[0],
	       t[n / 2], t[n * 99 / 100]);
	ping_series(c, 100, 2000, t);	/* the daemon falls asleep between */
	printf("ping asleep: n=100 min_us=%.2f p50_us=%.2f p99_us=%.2f\n", t[0], t[50], t[99]);
	free(t);
	return 0;
}

/* ---- a huge prompt beside pings ---- */

/*
 * Longest ping allowed while the huge prompt is being tokenized: this, or
 * half the time the big request took, whichever is longer.  A loop that
 * tokenized on its own thread would hold a ping for about the whole time
 * (a second or more under the sanitizers); a busy shared machine (or a
 * sanitizer build beside other work) preempts the loop for a few hundred
 * ms at worst, which must not count as a failure.
 */
#define BIG_PING_MAX_MS 100.0

/* len bytes of words that a word cache does not help with. */
static void big_text(char *t, size_t len)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	size_t i = 0;

	while (i < len) {
		int w = 2 + (int)(x >> 60) % 8;

		for (int k = 0; k < w && i < len; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			t[i++] = (char)('a' + (x >> 59) % 26);
		}
		if (i < len)
			t[i++] = ' ';
	}
	t[len] = 0;
}

/* A big GENERATE cancelled while it is tokenized ends with DONE CANCELLED. */
static void big_cancel(struct conn *c, const uint8_t *buf, uint32_t len)
{
	struct reply r;
	int done = 0, code = -1;

	if (submit(c, PG_OP_GENERATE, 8, 0, buf, len, 0, NULL, NULL) ||
	    submit(c, PG_OP_CANCEL, 8, 0, NULL, 0, 0, NULL, NULL))
		die("cannot submit the big request");
	while (!done && next_reply(c, &r, 30000, 0) > 0) {
		if (r.cqe.req_id != 8)
			continue;
		done = r.cqe.type == PG_CQE_ERROR || (r.cqe.flags & PG_CQE_F_LAST);
		code = r.cqe.type == PG_CQE_DONE ? r.cqe.code : -(int)r.cqe.code;
	}
	printf("bigprompt: cancelled while tokenized: %s %d\n",
	       code >= 0 ? "DONE" : "ERROR", code >= 0 ? code : -code);
	/* the cancel may come after the worker: then the prompt is too long */
	CHECK(done && (code == PG_FINISH_WIRE_CANCELLED || code == -PG_ETOOBIG),
	      "a big request cancelled while tokenized ended with %d", code);
}

/* A client that dies while its big requests are tokenized: dropped. */
static void big_death(const uint8_t *buf, uint32_t len, const char *text,
		      uint32_t text_len)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		struct conn c;

		conn_must_open(&c);
		if (submit(&c, PG_OP_GENERATE, 9, 0, buf, len, 0, NULL, NULL) ||
		    submit(&c, PG_OP_TOKENIZE, 10, 0, text, text_len, 0, NULL, NULL))
			_exit(1);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
	      "the client that dies could not submit");
	usleep(1500 * 1000);	/* its jobs end meanwhile, with nobody to answer */
}

/*
 * A client sends a GENERATE (or, with --kind tokenize, a TOKENIZE) of
 * nearly --max-payload bytes of text while another pings: tokenizing it
 * takes the daemon a long time (its figures are printed), but on a worker
 * thread, so the loop keeps answering pings.  Whatever the big request's
 * answer (its prompt is over the limits, or it is served), the longest
 * ping must stay under BIG_PING_MAX_MS.  Then (GENERATE) one is cancelled
 * while it is tokenized, and a client dies with two in the worker: the
 * daemon must still answer.
 */
static int cmd_bigprompt(int argc, char **argv)
{
	int tokenize = argc >= 2 && !strcmp(argv[0], "--kind") &&
		       !strcmp(argv[1], "tokenize");
	struct conn big, pc;
	struct gen g;
	struct reply r;
	uint8_t *buf;
	char *text;
	double t0, worst = 0, took_ms, t[100];
	uint32_t len;
	int n_pings = 0, last = 0, code = 0;

	conn_must_open(&big);
	conn_must_open(&pc);
	len = big.hdr->max_payload - (uint32_t)sizeof(struct pg_gen_wire) - 64;
	text = malloc((size_t)len + 1);
	buf = malloc((size_t)len + 1024);
	if (!text || !buf)
		die("out of memory");
	big_text(text, len);
	gen_default(&g);
	g.kind = PG_PROMPT_TEXT;
	g.text = text;
	g.max_tokens = 1;
	ping_series(&pc, 100, 0, t);	/* warm up */
	t0 = pg_now_s();
	if (tokenize ? submit(&big, PG_OP_TOKENIZE, 7, 0, text, len, 0, NULL, NULL)
		     : submit(&big, PG_OP_GENERATE, 7, 0, buf, gen_payload(&g, buf), 0, NULL, NULL))
		die("cannot submit the big request");
	while (!last && pg_now_s() - t0 < 120) {
		double p0 = pg_now_s(), ms;

		if (submit(&pc, PG_OP_PING, 1, 0, NULL, 0, 0, NULL, NULL) ||
		    next_reply(&pc, &r, 10000, 0) <= 0 || r.cqe.type != PG_CQE_PONG)
			die("no PONG while the big prompt is tokenized");
		ms = (pg_now_s() - p0) * 1e3;
		worst = ms > worst ? ms : worst;
		n_pings++;
		while (!last && next_reply(&big, &r, 0, 0) > 0) {
			last = r.cqe.type == PG_CQE_TOKENS_RESULT ||
			       r.cqe.type == PG_CQE_ERROR ||
			       (r.cqe.type == PG_CQE_DONE && (r.cqe.flags & PG_CQE_F_LAST));
			code = r.cqe.type == PG_CQE_ERROR ? r.cqe.code : 0;
		}
	}
	printf("bigprompt: %s of %u bytes answered in %.0f ms (%s %d); %d pings meanwhile, the longest %.2f ms\n",
	       tokenize ? "TOKENIZE" : "GENERATE", len, (pg_now_s() - t0) * 1e3,
	       code ? "error" : "ok", code, n_pings, worst);
	CHECK(last, "the big request got no answer within 120 s");
	took_ms = (pg_now_s() - t0) * 1e3;
	CHECK(worst < (BIG_PING_MAX_MS > took_ms / 2 ? BIG_PING_MAX_MS : took_ms / 2),
	      "a ping took %.1f ms while a big prompt was tokenized (in %.0f ms): the loop waited for it",
	      worst, took_ms);
	if (!tokenize) {
		big_cancel(&big, buf, gen_payload(&g, buf));
		big_death(buf, gen_payload(&g, buf), text, len);
		ping_series(&pc, 10, 0, t);	/* the daemon survived both */
	}
	free(text);
	free(buf);
	conn_close(&big);
	conn_close(&pc);
	return 0;
}

/* ---- a short prompt's first token beside a flood of TOKENIZE ---- */

/* Victim rounds alone (before and after) and under the flood: medians. */
#define FLOOD_ROUNDS 9

/*
 * The slack on top of twice the time alone: on a small shared host the
 * forward pass's threads wait for a core now and then (before the
 * workers served clients in turn, the victim waited some 10 s).
 */
#define FLOOD_SLACK_MS 50.0

/* Private memory (MiB) the daemon may gain while it is flooded. */
#define FLOOD_MAX_GROWTH_MIB 160

struct flooder {
	pthread_t thread;
	struct conn c;
	const char *text;
	uint32_t len;
	atomic_int *stop;
	int n_results, n_errors;
};

/* Keep TOKENIZE requests of len bytes queued, reading their results. */
static void *flooder_run(void *arg)
{
	struct flooder *f = arg;
	struct reply r;
	uint64_t id = 1;
	int inflight = 0;

	while (!atomic_load(f->stop) && !f->c.lost) {
		while (inflight < 8 &&
		       !queue_sqe(&f->c, PG_OP_TOKENIZE, id, 0, f->text, f->len, 0)) {
			id++;
			inflight++;
		}
		publish(&f->c);
		while (next_reply(&f->c, &r, inflight ? 20 : 1, 0) > 0) {
			inflight--;
			if (r.cqe.type == PG_CQE_TOKENS_RESULT)
				f->n_results++;
			else
				f->n_errors++;
		}
	}
	return NULL;
}

/* Seconds from submitting a 5-token text GENERATE to its first token. */
static double victim_ttft(struct conn *c, uint64_t req_id)
{
	static uint8_t buf[4096];
	struct gen g;
	struct reply r;
	double t0, t = -1;
	int last = 0;

	gen_default(&g);
	g.kind = PG_PROMPT_TEXT;
	g.text = "hello there, world";
	g.max_tokens = 2;
	g.flags = PG_GEN_IGNORE_EOS;
	t0 = pg_now_s();
	if (submit(c, PG_OP_GENERATE, req_id, 0, buf, gen_payload(&g, buf), 0, NULL, NULL))
		die("the victim cannot submit");
	while (!last && next_reply(c, &r, 30000, 0) > 0) {
		if (r.cqe.req_id != req_id)
			continue;
		if (r.cqe.type == PG_CQE_TOKENS && t < 0)
			t = pg_now_s() - t0;
		last = r.cqe.type == PG_CQE_ERROR || (r.cqe.flags & PG_CQE_F_LAST);
	}
	if (t < 0)
		die("the victim's request got no token");
	return t;
}

static double median(double *t, int n)
{
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	return t[n / 2];
}

/* The daemon's private resident memory in MiB (RssAnon), or -1. */
static long daemon_anon_mib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib < 0 ? -1 : kib / 1024;
}

/*
 * A victim's short text prompt (which the daemon tokenizes on its
 * workers too) while --clients N (24) connections each keep TOKENIZE
 * requests of nearly --max-payload (1 MiB) queued: the median time to its
 * first token must stay within twice its median alone (measured before
 * and after the flood, the slower taken) plus FLOOD_SLACK_MS; the daemon's private memory must not grow by more
 * than FLOOD_MAX_GROWTH_MIB (not checked under the sanitizers, whose
 * quarantine holds freed memory).
 */
static int cmd_tokflood(int argc, char **argv)
{
	int n = argc >= 2 && !strcmp(argv[0], "--clients") ? atoi(argv[1]) : 24;
	struct flooder *fs = calloc((size_t)(n > 0 ? n : 1), sizeof(*fs));
	double alone[FLOOD_ROUNDS], flood[FLOOD_ROUNDS], m_alone, m_after, m_flood, limit;
	long base_mib, peak_mib = 0;
	atomic_int stop = 0;
	struct ucred cr;
	socklen_t cr_len = sizeof(cr);
	struct conn v;
	char *text;
	uint32_t len;
	int results = 0, errors = 0;

	if (!fs || n < 1)
		die("tokflood --clients N (N >= 1)");
	conn_must_open(&v);
	if (getsockopt(v.sock, SOL_SOCKET, SO_PEERCRED, &cr, &cr_len))
		die("SO_PEERCRED: %s", strerror(errno));
	len = v.hdr->max_payload - 64;
	text = malloc((size_t)len + 1);
	if (!text)
		die("out of memory");
	big_text(text, len);
	for (int i = 0; i < 3; i++)
		victim_ttft(&v, 100 + (uint64_t)i);	/* warm up */
	for (int i = 0; i < FLOOD_ROUNDS; i++)
		alone[i] = victim_ttft(&v, 200 + (uint64_t)i);
	m_alone = median(alone, FLOOD_ROUNDS) * 1e3;
	base_mib = daemon_anon_mib(cr.pid);
	for (int i = 0; i < n; i++) {
		fs[i].text = text;
		fs[i].len = len;
		fs[i].stop = &stop;
		conn_must_open(&fs[i].c);
		if (pthread_create(&fs[i].thread, NULL, flooder_run, &fs[i]))
			die("pthread_create");
	}
	usleep(500 * 1000);	/* every flooder has its requests queued */
	for (int i = 0; i < FLOOD_ROUNDS; i++) {
		long mib = daemon_anon_mib(cr.pid);

		peak_mib = mib > peak_mib ? mib : peak_mib;
		flood[i] = victim_ttft(&v, 300 + (uint64_t)i);
		usleep(50 * 1000);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++) {
		pthread_join(fs[i].thread, NULL);
		results += fs[i].n_results;
		errors += fs[i].n_errors;
		conn_close(&fs[i].c);
	}
	usleep(500 * 1000);	/* the last long job ends */
	for (int i = 0; i < FLOOD_ROUNDS; i++)
		alone[i] = victim_ttft(&v, 400 + (uint64_t)i);
	/* the host's load may change meanwhile: the slower of before and after */
	m_after = median(alone, FLOOD_ROUNDS) * 1e3;
	m_alone = m_after > m_alone ? m_after : m_alone;
	m_flood = median(flood, FLOOD_ROUNDS) * 1e3;
	limit = 2 * m_alone + FLOOD_SLACK_MS;
	printf("tokflood: first token alone %.2f ms, beside %d clients flooding %u-byte TOKENIZE %.2f ms (limit %.1f ms); %d results, %d errors; daemon private memory %ld MiB, at most %ld MiB while flooded\n",
	       m_alone, n, len, m_flood, limit, results, errors, base_mib, peak_mib);
	CHECK(m_flood <= limit, "the victim's first token took %.1f ms beside the flood, %.1f ms alone",
	      m_flood, m_alone);
	CHECK(!errors, "%d flood requests got errors", errors);
#if !defined(__SANITIZE_ADDRESS__)
	CHECK(base_mib < 0 || peak_mib - base_mib <= FLOOD_MAX_GROWTH_MIB,
	      "the daemon's private memory grew from %ld to %ld MiB under the flood",
	      base_mib, peak_mib);
#endif
	free(text);
	free(fs);
	conn_close(&v);
	return 0;
}

/* ---- stress: many clients, many requests, checked against one alone ---- */

#define N_VARIANTS 12

struct variant {
	int32_t ids[64];
	int n_ids;
	uint32_t max_tokens, n, flags;
	struct stream *ref;		/* what one client alone gets */
};

static struct variant variants[N_VARIANTS];

static void make_variants(int n_vocab)
{
	for (int v = 0; v < N_VARIANTS; v++) {
		struct variant *x = &variants[v];

		/* pairs share a prefix, so the prefix cache is exercised */
		x->n_ids = 4 + (v * 7) % 29;
		for (int i = 0; i < x->n_ids; i++)
			x->ids[i] = (int32_t)((i < 3 ? v / 2 * 31 + i * 17 : v * 101 + i * 13) % (n_vocab - 4) + 3);
		x->max_tokens = 6 + (uint32_t)(v * 5) % 23;
		x->n = v % 5 == 4 ? 2 : 1;
		x->flags = (v % 2 ? PG_GEN_IGNORE_EOS : 0) | (v % 3 ? PG_GEN_TEXT : 0);
	}
}

static void variant_gen(const struct variant *x, struct gen *g)
{
	gen_default(g);
	g->ids = x->ids;
	g->n_ids = x->n_ids;
	g->max_tokens = x->max_tokens;
	g->n = x->n;
	g->flags = x->flags;
}

static int same_stream(const struct stream *a, const struct stream *b, int n)
{
	for (int k = 0; k < n; k++) {
		if (a->n_ids[k] != b->n_ids[k] || a->finish[k] != b->finish[k] ||
		    memcmp(a->ids[k], b->ids[k], sizeof(int32_t) * (size_t)a->n_ids[k]) ||
		    a->text_len[k] != b->text_len[k] ||
		    (a->text_len[k] && memcmp(a->text[k], b->text[k], a->text_len[k])))
			return 0;
	}
	return 1;
}

static void make_references(void)
{
	struct conn c;
	struct gen g;

	conn_must_open(&c);
	for (int v = 0; v < N_VARIANTS; v++) {
		variants[v].ref = calloc(1, sizeof(struct stream));
		variant_gen(&variants[v], &g);
		if (!variants[v].ref || run_gen(&c, &g, 1, variants[v].ref) ||
		    variants[v].ref->error)
			die("reference %d did not complete", v);
	}
	conn_close(&c);
}

/* One stress client: `requests` requests, `window` in flight at a time. */
struct worker {
	pthread_t th;
	int index, requests, window;
	int n_done, n_bad;
	struct stream *s;		/* (window) */
	int *variant;			/* (window) */
};

static struct stream *slot_of(struct worker *w, uint64_t req_id)
{
	for (int i = 0; i < w->window; i++)
		if (w->s[i].req_id == req_id && w->variant[i] >= 0)
			return &w->s[i];
	return NULL;
}

static void worker_take(void *ctx, const struct reply *r)
{
	struct worker *w = ctx;
	struct stream *s = slot_of(w, r->cqe.req_id);

	if (!s) {
		w->n_bad++;
		FAIL("client %d: a completion for unknown request %" PRIu64, w->index, r->cqe.req_id);
		return;
	}
	stream_take(s, r);
}

/* Check a finished stream in slot i against its reference; free the slot. */
static void worker_finish(struct worker *w, int i)
{
	struct stream *s = &w->s[i];
	const struct variant *x = &variants[w->variant[i]];

	if (s->bad || s->error || !same_stream(s, x->ref, (int)x->n)) {
		w->n_bad++;
		FAIL("client %d request %" PRIu64 " (variant %d): %s", w->index, s->req_id,
		     w->variant[i], s->error ? s->msg : s->bad ? "broken stream" :
		     "differs from the same request alone");
	}
	w->variant[i] = -1;
	w->n_done++;
}

static void *worker_run(void *arg)
{
	static __thread uint8_t buf[1 << 16];
	struct worker *w = arg;
	struct conn c;
	struct reply r;
	int next = 0;

	conn_must_open(&c);
	while (w->n_done < w->requests && !c.lost) {
		for (int i = 0; i < w->window && next < w->requests; i++) {
			struct gen g;
			int v = (w->index * 7 + next) % N_VARIANTS;

			if (w->variant[i] >= 0)
				continue;
			stream_reset(&w->s[i], ((uint64_t)w->index << 32) | (uint64_t)next);
			w->variant[i] = v;
			variant_gen(&variants[v], &g);
			if (submit(&c, PG_OP_GENERATE, w->s[i].req_id, 0, buf,
				   gen_payload(&g, buf), 0, worker_take, w))
				break;
			next++;
		}
		if (next_reply(&c, &r, 30000, 0) <= 0) {
			FAIL("client %d: no completion within 30 s", w->index);
			break;
		}
		worker_take(w, &r);
		for (int i = 0; i < w->window; i++)
			if (w->variant[i] >= 0 && w->s[i].last)
				worker_finish(w, i);
	}
	CHECK(w->n_done == w->requests, "client %d finished %d of %d requests", w->index,
	      w->n_done, w->requests);
	conn_close(&c);
	return NULL;
}

static struct worker *workers_start(int n, int requests, int window)
{
	struct worker *ws = calloc((size_t)n, sizeof(*ws));

	for (int i = 0; ws && i < n; i++) {
		ws[i].index = i;
		ws[i].requests = requests;
		ws[i].window = window;
		ws[i].s = calloc((size_t)window, sizeof(struct stream));
		ws[i].variant = malloc(sizeof(int) * (size_t)window);
		if (!ws[i].s || !ws[i].variant)
			die("out of memory");
		for (int k = 0; k < window; k++)
			ws[i].variant[k] = -1;
		if (pthread_create(&ws[i].th, NULL, worker_run, &ws[i]))
			die("pthread_create");
	}
	if (!ws)
		die("out of memory");
	return ws;
}

static int workers_join(struct worker *ws, int n)
{
	int done = 0;

	for (int i = 0; i < n; i++) {
		pthread_join(ws[i].th, NULL);
		done += ws[i].n_done;
		for (int k = 0; k < ws[i].window; k++)
			stream_reset(&ws[i].s[k], 0);
		free(ws[i].s);
		free(ws[i].variant);
	}
	free(ws);
	return done;
}

static int info_of(struct conn *c, struct pg_info_wire *w)
{
	struct reply r;

	if (run_simple(c, PG_OP_INFO, 99, 0, NULL, 0, &r) || r.cqe.len != sizeof(*w))
		return -1;
	memcpy(w, r.payload, sizeof(*w));
	return 0;
}

static int vocab_size(void)
{
	struct pg_info_wire w;
	struct conn c;

	conn_must_open(&c);
	if (info_of(&c, &w))
		die("no INFO answer");
	conn_close(&c);
	return (int)w.n_vocab;
}

static int cmd_stress(int argc, char **argv)
{
	int clients = 32, requests = 8;
	double t0;

	for (int i = 0; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--clients"))
			clients = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--requests"))
			requests = atoi(argv[i + 1]);
	}
	make_variants(vocab_size());
	make_references();
	t0 = pg_now_s();
	int done = workers_join(workers_start(clients, requests, 3), clients);

	printf("stress: %d clients x %d requests: %d complete and equal to alone in %.2f s\n",
	       clients, requests, done, pg_now_s() - t0);
	return 0;
}

/* ---- garbage: a hostile client beside a victim ---- */

/* Expect an ERROR of code `want` (with F_LAST when last) for req_id. */
static void expect_error(struct conn *c, uint64_t req_id, int want, const char *what)
{
	struct reply r;

	for (;;) {
		if (next_reply(c, &r, 10000, 0) <= 0) {
			FAIL("%s: no answer", what);
			return;
		}
		if (r.cqe.req_id == req_id)
			break;
	}
	CHECK(r.cqe.type == PG_CQE_ERROR && r.cqe.code == want,
	      "%s: expected error %d, got type %u code %d (%s)", what, want,
	      r.cqe.type, r.cqe.code, r.cqe.type == PG_CQE_ERROR ? (const char *)r.payload : "");
	CHECK(r.cqe.type != PG_CQE_ERROR || r.cqe.len > 10, "%s: an error without a message", what);
}

static void send_raw(struct conn *c, const struct pg_sqe *e)
{
	struct pg_sqe *slot;

	while (!(slot = pg_ring_reserve(&c->sq)))
		usleep(100);
	memcpy(slot, e, sizeof(*e));
	pg_arena_alloc(&c->sq_arena, c->sq.local, 0, &(uint32_t){ 0 });
	pg_ring_commit(&c->sq);
	publish(c);
}

/* A GENERATE payload of g, with fn() applied to its wire struct. */
static uint32_t bad_gen(uint8_t *buf, void (*fn)(struct pg_gen_wire *w, uint8_t *buf))
{
	static const int32_t ids[] = { 5, 6, 7 };
	struct gen g;
	uint32_t len;

	gen_default(&g);
	g.ids = ids;
	g.n_ids = 3;
	len = gen_payload(&g, buf);
	if (fn)
		fn((struct pg_gen_wire *)(void *)buf, buf);
	return len;
}

static void mod_big_prompt(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->prompt_bytes = 0x7fffffff; }
static void mod_bad_id(struct pg_gen_wire *w, uint8_t *b) { int32_t x = 1 << 30; (void)w; memcpy(b + sizeof(*w) + 4, &x, 4); }
static void mod_neg_id(struct pg_gen_wire *w, uint8_t *b) { int32_t x = -5; (void)w; memcpy(b + sizeof(*w), &x, 4); }
static void mod_n17(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->n = 17; }
static void mod_nan(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->temperature = NAN; }
static void mod_topk(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->repeat_penalty = -3; }
static void mod_kind(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->prompt_kind = 9; }
static void mod_flags(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->flags = 0x80; }
static void mod_nstop(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->n_stop = 1000; }
static void mod_stop_unterminated(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->n_stop = 1; }
static void mod_max_tokens(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->max_tokens = 1u << 30; }
static void mod_logprobs(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->n_logprobs = 21; }
static void mod_odd_prompt(struct pg_gen_wire *w, uint8_t *b) { (void)b; w->prompt_bytes = 7; }

static void garbage_crafted(struct conn *c)
{
	static uint8_t buf[1 << 16];
	static const struct { void (*fn)(struct pg_gen_wire *, uint8_t *); int code; const char *what; } mods[] = {
		{ mod_big_prompt, PG_EINVAL, "prompt_bytes past the payload" },
		{ mod_bad_id, PG_EINVAL, "token id out of range" },
		{ mod_neg_id, PG_EINVAL, "negative token id" },
		{ mod_n17, PG_EINVAL, "n = 17" },
		{ mod_nan, PG_EINVAL, "temperature NaN" },
		{ mod_topk, PG_EINVAL, "negative repeat penalty" },
		{ mod_kind, PG_EINVAL, "unknown prompt kind" },
		{ mod_flags, PG_EINVAL, "unknown flags" },
		{ mod_nstop, PG_EINVAL, "n_stop 1000" },
		{ mod_stop_unterminated, PG_EINVAL, "a stop string without its NUL" },
		{ mod_max_tokens, PG_ETOOBIG, "max_tokens over the limit" },
		{ mod_logprobs, PG_EINVAL, "21 log-probabilities per token" },
		{ mod_odd_prompt, PG_EINVAL, "a token prompt of 7 bytes" },
	};
	struct pg_sqe e = { .op = PG_OP_GENERATE };
	uint32_t len;
	uint64_t id = 500;

	for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
		len = bad_gen(buf, mods[i].fn);
		submit(c, PG_OP_GENERATE, ++id, 0, buf, len, 0, NULL, NULL);
		expect_error(c, id, mods[i].code, mods[i].what);
	}
	submit(c, PG_OP_GENERATE, ++id, 0, buf, 40, 0, NULL, NULL);
	expect_error(c, id, PG_EINVAL, "a payload shorter than pg_gen_wire");
	e.req_id = ++id;
	e.payload_off = c->hdr->sq_arena - 10;
	e.payload_len = 100;
	send_raw(c, &e);
	expect_error(c, id, PG_EINVAL, "payload past the arena's end");
	e.req_id = ++id;
	e.payload_off = 0xfffffff0u;
	e.payload_len = 0x20;
	send_raw(c, &e);
	expect_error(c, id, PG_EINVAL, "payload offset wrapping around");
	e.req_id = ++id;
	e.op = 77;
	send_raw(c, &e);
	expect_error(c, id, PG_EINVAL, "unknown op");
	submit(c, PG_OP_DETOKENIZE, ++id, 0, "abcde", 5, 0, NULL, NULL);
	expect_error(c, id, PG_EINVAL, "detokenize of 5 bytes");
	submit(c, PG_OP_DETOKENIZE, ++id, 0, &(int32_t){ 1 << 28 }, 4, 0, NULL, NULL);
	expect_error(c, id, PG_EINVAL, "detokenize of a bad id");
	submit(c, PG_OP_TOKENIZE, ++id, 0x100, "x", 1, 0, NULL, NULL);
	expect_error(c, id, PG_EINVAL, "tokenize with unknown flags");
	submit(c, PG_OP_CANCEL, 123456789, 0, NULL, 0, 0, NULL, NULL);
	expect_error(c, 123456789, PG_ENOENT, "cancel of no request");
}

static void garbage_chat(struct conn *c)
{
	uint8_t buf[256];
	struct pg_gen_wire w;
	struct pg_chat_msg_wire m = { .role = 7, .len = 2 };

	memset(&w, 0, sizeof(w));
	sampling_greedy(&w);
	w.prompt_kind = PG_PROMPT_CHAT;
	w.prompt_bytes = 12;
	w.max_tokens = 4;
	memcpy(buf, &w, sizeof(w));
	memcpy(buf + sizeof(w), &m, sizeof(m));
	memcpy(buf + sizeof(w) + 8, "hi\0\0", 4);
	submit(c, PG_OP_GENERATE, 901, 0, buf, sizeof(w) + 12, 0, NULL, NULL);
	expect_error(c, 901, PG_EINVAL, "chat role 7");
	m.role = 1;
	m.len = 100;
	memcpy(buf + sizeof(w), &m, sizeof(m));
	submit(c, PG_OP_GENERATE, 902, 0, buf, sizeof(w) + 12, 0, NULL, NULL);
	expect_error(c, 902, PG_EINVAL, "chat message longer than the prompt");
}

/* Duplicate ids, cancel, and a payload rewritten right after submission. */
static void garbage_requests(struct conn *c)
{
	static uint8_t buf[1 << 16];
	static struct stream s;
	static const int32_t ids[] = { 9, 8, 7, 6 };
	struct gen g;
	struct reply r;
	uint32_t len;

	gen_default(&g);
	g.ids = ids;
	g.n_ids = 4;
	g.max_tokens = 2000;
	g.flags = PG_GEN_IGNORE_EOS;
	len = gen_payload(&g, buf);
	/* one publication: the duplicate is refused before any token comes */
	queue_sqe(c, PG_OP_GENERATE, 77, 0, buf, len, 0);
	queue_sqe(c, PG_OP_GENERATE, 77, 0, buf, len, 0);
	publish(c);
	expect_error(c, 77, PG_EDUPLICATE, "a duplicate request id");
	submit(c, PG_OP_CANCEL, 77, 0, NULL, 0, 0, NULL, NULL);
	stream_reset(&s, 77);
	while (!s.last && next_reply(c, &r, 10000, 0) > 0)
		if (r.cqe.req_id == 77)
			stream_take(&s, &r);
	CHECK(s.last && s.done[0] && s.finish[0] == PG_FINISH_WIRE_CANCELLED,
	      "a cancelled request did not end as cancelled");
	/* rewrite the payload behind the daemon's back, many times */
	for (int round = 0; round < 50; round++) {
		uint8_t *p;

		g.max_tokens = 3;
		len = gen_payload(&g, buf);
		if (submit(c, PG_OP_GENERATE, 1000 + (uint64_t)round, 0, buf, len, 0, NULL, NULL))
			break;
		p = c->seg + c->hdr->sq_arena_off + ((c->sq_arena.alloc - len) % c->hdr->sq_arena);
		for (uint32_t i = 0; i < len; i++)
			p[i] = (uint8_t)rand();
		stream_reset(&s, 1000 + (uint64_t)round);
		while (!s.last && next_reply(c, &r, 10000, 0) > 0)
			if (r.cqe.req_id == s.req_id)
				stream_take(&s, &r);
		CHECK(s.last, "a rewritten request never ended");
	}
}

/* Random entries until the daemon gives up on this client. */
static void garbage_random(int rounds)
{
	struct conn c;
	struct reply r;
	int lost = 0, proto = 0;

	conn_must_open(&c);
	for (int i = 0; i < rounds && !c.lost; i++) {
		struct pg_sqe *e = pg_ring_reserve(&c.sq);
		uint8_t *b;

		if (e) {
			b = (uint8_t *)e;
			for (size_t k = 0; k < sizeof(*e); k++)
				b[k] = (uint8_t)rand();
			e->op = (uint8_t)(rand() % 9);
			if (rand() % 2)
				e->payload_len %= 4096;
			if (rand() % 2)
				e->payload_off %= c.hdr->sq_arena;
			pg_arena_alloc(&c.sq_arena, c.sq.local, 0, &(uint32_t){ 0 });
			pg_ring_commit(&c.sq);
			for (uint32_t k = 0; k < 256; k++)	/* scribble the arena too */
				c.seg[c.hdr->sq_arena_off + (uint32_t)rand() % c.hdr->sq_arena] = (uint8_t)rand();
		}
		publish(&c);
		while (next_reply(&c, &r, e ? 0 : 10, 0) > 0)
			proto |= r.cqe.type == PG_CQE_ERROR && r.cqe.code == PG_EPROTO;
	}
	while (!c.lost && next_reply(&c, &r, 5000, 0) > 0)
		proto |= r.cqe.type == PG_CQE_ERROR && r.cqe.code == PG_EPROTO;
	lost = c.lost;
	CHECK(lost, "a client sending garbage was never disconnected");
	CHECK(proto, "no final PG_EPROTO error for the garbage client");
	conn_close(&c);
}

/* A submission tail far past the head, and a completion head gone wild. */
static void garbage_corrupt(void)
{
	struct conn c;
	struct reply r;

	conn_must_open(&c);
	atomic_store(&c.hdr->sq.tail, c.sq.local + 5000);
	eventfd_write(c.sq_bell, 1);
	while (next_reply(&c, &r, 5000, 0) > 0)
		;
	CHECK(c.lost, "a corrupt submission tail did not end the connection");
	conn_close(&c);

	conn_must_open(&c);
	atomic_store(&c.hdr->cq.head, 123456u);
	for (int i = 0; i < 2000 && !c.lost; i++) {
		queue_sqe(&c, PG_OP_PING, 1, 0, NULL, 0, 0);
		publish(&c);
		usleep(500);
		if (wait_bell(&c, 0) < 0 || atomic_load(&c.hdr->closed))
			c.lost = 1;
	}
	CHECK(c.lost, "a corrupt completion head did not end the connection");
	conn_close(&c);
}

struct victim {
	pthread_t th;
	atomic_int stop;
	int n_done;
};

static void *victim_run(void *arg)
{
	struct victim *v = arg;
	struct stream *s = calloc(1, sizeof(*s));
	struct conn c;
	struct gen g;

	conn_must_open(&c);
	for (int i = 0; s && !atomic_load(&v->stop); i++) {
		const struct variant *x = &variants[i % N_VARIANTS];

		variant_gen(x, &g);
		if (run_gen(&c, &g, (uint64_t)i, s) || s->bad || s->error ||
		    !same_stream(s, x->ref, (int)x->n)) {
			FAIL("the victim's request %d went wrong beside the garbage", i);
			break;
		}
		v->n_done++;
	}
	stream_reset(s, 0);
	free(s);
	conn_close(&c);
	return NULL;
}

static int cmd_garbage(int argc, char **argv)
{
	int rounds = argc >= 2 && !strcmp(argv[0], "--rounds") ? atoi(argv[1]) : 3000;
	struct victim v = { .n_done = 0 };
	struct pg_info_wire w;
	struct conn c;

	srand(12345);
	make_variants(vocab_size());
	make_references();
	if (pthread_create(&v.th, NULL, victim_run, &v))
		die("pthread_create");
	conn_must_open(&c);
	garbage_crafted(&c);
	garbage_chat(&c);
	garbage_requests(&c);
	CHECK(!c.lost, "the daemon dropped a client whose bad requests were each answered");
	conn_close(&c);
	garbage_random(rounds);
	garbage_corrupt();
	atomic_store(&v.stop, 1);
	pthread_join(v.th, NULL);
	CHECK(v.n_done > 0, "the victim completed nothing");
	conn_must_open(&c);
	CHECK(!info_of(&c, &w), "the daemon does not answer INFO after the garbage");
	conn_close(&c);
	printf("garbage: the victim completed %d requests correctly; the daemon survived\n",
	       v.n_done);
	return 0;
}

/* ---- kill: clients die mid-stream ---- */

static void kill_child(int ready_fd)
{
	static uint8_t buf[4096];
	static const int32_t ids[] = { 11, 12, 13, 14, 15 };
	struct conn c;
	struct reply r;
	struct gen g;
	int got = 0;

	conn_must_open(&c);
	gen_default(&g);
	g.ids = ids;
	g.n_ids = 5;
	g.max_tokens = 3000;
	g.n = 2;
	g.flags = PG_GEN_IGNORE_EOS | PG_GEN_TEXT;
	for (uint64_t id = 1; id <= 3; id++)
		submit(&c, PG_OP_GENERATE, id, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	while (got < 10 && next_reply(&c, &r, 30000, 0) > 0)
		got += r.cqe.type == PG_CQE_TOKENS;
	if (write(ready_fd, "r", 1) != 1)
		_exit(1);
	for (;;)		/* stream until killed; stop reading half the time */
		if (next_reply(&c, &r, 1000, 0) < 0 || rand() % 2)
			usleep(1000);
}

static int cmd_kill(int argc, char **argv)
{
	int n = argc >= 2 && !strcmp(argv[0], "--children") ? atoi(argv[1]) : 4;
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	struct pg_info_wire w;
	struct conn c;
	int fds[2];
	double t0;
	char ch;

	if (!pids || pipe(fds))
		die("pipe");
	conn_must_open(&c);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork");
		if (!pids[i]) {
			close(fds[0]);
			kill_child(fds[1]);
		}
	}
	for (int i = 0; i < n; i++)
		if (read(fds[0], &ch, 1) != 1)
			die("a child never streamed");
	CHECK(!info_of(&c, &w) && w.n_clients == (uint32_t)n + 1 && w.n_active > 0,
	      "before the kill: %u clients, %u active (expected %d and > 0)", w.n_clients,
	      w.n_active, n + 1);
	t0 = pg_now_s();
	for (int i = 0; i < n; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	do {
		if (info_of(&c, &w))
			die("no INFO answer");
	} while ((w.n_clients != 1 || w.n_active) && pg_now_s() - t0 < 5);
	printf("kill: %d clients killed mid-stream; freed in %.1f ms (clients %u, active %u)\n",
	       n, (pg_now_s() - t0) * 1e3, w.n_clients, w.n_active);
	CHECK(w.n_clients == 1 && w.n_active == 0, "the killed clients were not freed within 5 s");
	conn_close(&c);
	free(pids);
	return 0;
}

/* ---- a client whose process exits while its socket lives on ---- */

#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__i386__) || \
			       defined(__aarch64__) || defined(__arm__) || \
			       defined(__riscv))
#define SO_PEERPIDFD 77		/* as daemon/server.c */
#endif

/* Whether this kernel gives a socket's peer as a pidfd (Linux 6.5). */
static int kernel_has_peerpidfd(void)
{
	int ok = 0;
#ifdef SO_PEERPIDFD
	int sv[2], pidfd = -1;
	socklen_t len = sizeof(pidfd);

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		die("socketpair: %s", strerror(errno));
	ok = !getsockopt(sv[0], SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) && pidfd >= 0;
	if (pidfd >= 0)
		close(pidfd);
	close(sv[0]);
	close(sv[1]);
#endif
	return ok;
}

/*
 * The process that connected forks a child and exits; the child keeps the
 * socket, the doorbells and the segment, so the socket never hangs up.
 * The daemon must still let the client go (the pidfd it took at the
 * handshake polls readable): the child sees the segment closed.  77 when
 * the kernel has no SO_PEERPIDFD (the daemon then sees the socket alone).
 */
static int cmd_orphan(void)
{
	int pfd[2], st;
	char seen = 'x';
	pid_t a;

	if (!kernel_has_peerpidfd()) {
		printf("orphan: this kernel has no SO_PEERPIDFD: skipped\n");
		return 77;
	}
	if (pipe(pfd))
		die("pipe: %s", strerror(errno));
	a = fork();
	if (a < 0)
		die("fork: %s", strerror(errno));
	if (a == 0) {
		struct conn c;
		pid_t b;

		close(pfd[0]);
		conn_must_open(&c);
		b = fork();
		if (b == 0) {	/* holds everything of c while its parent goes */
			double t0 = pg_now_s();
			char r = 'n';

			while (pg_now_s() - t0 < 10) {
				if (atomic_load(&c.hdr->closed)) {
					r = 'y';
					break;
				}
				usleep(1000);
			}
			printf("orphan: the segment %s closed after %.1f ms\n",
			       r == 'y' ? "was" : "was not", (pg_now_s() - t0) * 1e3);
			if (write(pfd[1], &r, 1) != 1)
				_exit(1);
			_exit(0);
		}
		_exit(b < 0);
	}
	close(pfd[1]);
	CHECK(waitpid(a, &st, 0) == a && WIFEXITED(st) && !WEXITSTATUS(st),
	      "the connecting process failed");
	CHECK(read(pfd[0], &seen, 1) == 1 && seen == 'y',
	      "the daemon kept a client whose process exited while a child held its socket");
	close(pfd[0]);
	return 0;
}

/* ---- handshake refusals ---- */

static int cmd_version(void)
{
	struct conn c;
	char want[32];
	int rc = conn_open(&c, 999);

	CHECK(rc == PG_EVERSION, "a client of version 999 got %d, not PG_EVERSION", rc);
	snprintf(want, sizeof(want), "version %u", PG_PROTO_VERSION);
	CHECK(strstr(c.w.message, "999") && strstr(c.w.message, want),
	      "the refusal does not name both versions: %s", c.w.message);
	printf("version: %s\n", c.w.message);
	return 0;
}

/* The status of the welcome to a hello with these flags and reserved field. */
static uint32_t hello_with(uint32_t flags, uint32_t reserved, struct pg_welcome *w)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct pg_hello h = { .magic = PG_PROTO_MAGIC, .version = PG_PROTO_VERSION,
			      .flags = flags, .reserved = reserved };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), fds[4], n_fds = 0;

	memset(w, 0, sizeof(*w));
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
	    recv_welcome(fd, w, fds, &n_fds))
		die("cannot shake hands with %s", sock_path);
	for (int i = 0; i < n_fds; i++)
		close(fds[i]);
	close(fd);
	return w->status;
}

/* hello.flags and hello.reserved must be 0: refused, saying what to do. */
static int cmd_hellofields(void)
{
	struct pg_welcome w;
	uint32_t st;

	st = hello_with(1, 0, &w);
	CHECK(st == PG_EVERSION && strstr(w.message, "flags 0x1") && strstr(w.message, "libpagoda"),
	      "hello.flags 1 got status %u: %s", st, w.message);
	printf("hellofields: %s\n", w.message);
	st = hello_with(0, 7, &w);
	CHECK(st == PG_EPROTO && strstr(w.message, "reserved") && strstr(w.message, "libpagoda"),
	      "hello.reserved 7 got status %u: %s", st, w.message);
	printf("hellofields: %s\n", w.message);
	CHECK(hello_with(0, 0, &w) == PG_OK, "a plain hello was refused: %s", w.message);
	return 0;
}

static int cmd_refused(void)
{
	int status, fds[2];
	char msg[256] = "";
	pid_t pid;

	if (geteuid() != 0) {
		printf("refused: not root, cannot become another uid: skipped\n");
		return 77;
	}
	if (pipe(fds))
		die("pipe");
	pid = fork();
	if (!pid) {
		struct conn c;
		int rc;

		close(fds[0]);
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		rc = conn_open(&c, PG_PROTO_VERSION);
		if (rc > 0 && write(fds[1], c.w.message, strlen(c.w.message)) < 0)
			_exit(3);
		_exit(rc == PG_EACCESS ? 0 : rc < 0 ? 4 : 5);
	}
	close(fds[1]);
	if (read(fds[0], msg, sizeof(msg) - 1) < 0)
		msg[0] = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "uid 65534 was not refused with PG_EACCESS (child status %d): %s",
	      WEXITSTATUS(status), msg);
	CHECK(strstr(msg, "uid 65534") && strstr(msg, "--allow-users"),
	      "the refusal does not name the uid and the option: %s", msg);
	printf("refused: %s\n", msg);
	return 0;
}

/* ---- slow loris: silent connections beside a new client ---- */

/* Silent connections opened; the longest a handshake beside them may take. */
#define LORIS_CONNECTIONS 100
#define LORIS_MAX_MS 500.0

/* Up to n connections that send nothing (fds in fds); how many connected. */
static int silent_open(int *fds, int n)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int k = 0;

	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path);
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd < 0)
			die("socket: %s", strerror(errno));
		if (connect(fd, (struct sockaddr *)&addr, sizeof(addr))) {
			close(fd);	/* the listen backlog is full */
			continue;
		}
		fds[k++] = fd;
	}
	return k;
}

/* Milliseconds a whole handshake takes (as uid when not -1); < 0: failed. */
static double timed_handshake(int uid)
{
	int fds[2], status;
	double t0 = pg_now_s(), ms = -1;
	pid_t pid;

	if (uid < 0) {
		struct conn c;
		int rc = conn_open(&c, PG_PROTO_VERSION);

		ms = (pg_now_s() - t0) * 1e3;
		conn_close(&c);
		return rc ? -1 : ms;
	}
	if (pipe(fds))
		die("pipe");
	pid = fork();
	if (!pid) {
		struct conn c;

		close(fds[0]);
		if (setgroups(0, NULL) || setgid((gid_t)uid) || setuid((uid_t)uid))
			_exit(3);
		t0 = pg_now_s();
		if (conn_open(&c, PG_PROTO_VERSION))
			_exit(4);
		ms = (pg_now_s() - t0) * 1e3;
		_exit(write(fds[1], &ms, sizeof(ms)) == (ssize_t)sizeof(ms) ? 0 : 5);
	}
	close(fds[1]);
	if (read(fds[0], &ms, sizeof(ms)) != (ssize_t)sizeof(ms))
		ms = -1;
	close(fds[0]);
	waitpid(pid, &status, 0);
	return ms;
}

/* How many of fds got a refusal with code `want` within timeout_ms. */
static int silent_refused(const int *fds, int n, uint32_t want, int timeout_ms)
{
	double deadline = pg_now_s() + timeout_ms * 1e-3;
	int got = 0;

	for (int i = 0; i < n; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLIN };
		struct pg_welcome w;
		int ms = (int)((deadline - pg_now_s()) * 1e3);

		if (poll(&p, 1, ms > 0 ? ms : 0) == 1 &&
		    recv(fds[i], &w, sizeof(w), MSG_WAITALL) == (ssize_t)sizeof(w))
			got += w.magic == PG_PROTO_MAGIC && w.status == want;
	}
	return got;
}

/*
 * LORIS_CONNECTIONS connections that never send their hello, then a new
 * client: its handshake must take under LORIS_MAX_MS (the hello timeout
 * is 1 s, and before handshakes were shared out per user the new client
 * waited for several of them).  Plain: the silent ones are this user's,
 * the new clients this user's and (as root) uid U's (--uid U, default
 * 65534; the socket must let it in).  --refused (as root,
 * against a daemon that refuses uid 65534): the silent ones are uid
 * 65534's, each refused with PG_EACCESS before any hello, and a client of
 * this user beside them.
 */
static int cmd_loris(int argc, char **argv)
{
	int refused = argc >= 1 && !strcmp(argv[0], "--refused");
	int uid = argc >= 2 && !strcmp(argv[0], "--uid") ? atoi(argv[1]) : 65534;
	int fds[LORIS_CONNECTIONS], n, st, pfd[2];
	double ms, other = 0;
	pid_t pid = -1;
	char c = 0;

	if (refused && geteuid() != 0) {
		printf("loris --refused: not root, cannot become another uid: skipped\n");
		return 77;
	}
	if (!refused) {
		n = silent_open(fds, LORIS_CONNECTIONS);
		usleep(100 * 1000);	/* the daemon has accepted them */
		ms = timed_handshake(-1);
		if (geteuid() == 0)
			other = timed_handshake(uid);
		printf("loris: %d silent connections; a handshake of this user %.2f ms, of uid %d %.2f ms\n",
		       n, ms, uid, other);
		CHECK(n == LORIS_CONNECTIONS, "only %d silent connections could be opened", n);
		CHECK(ms >= 0 && ms < LORIS_MAX_MS, "a handshake beside silent connections of its user took %.1f ms", ms);
		CHECK(geteuid() != 0 || (other >= 0 && other < LORIS_MAX_MS),
		      "a handshake of uid %d beside silent connections failed (-1: can it open the socket?) or took %.1f ms",
		      uid, other);
		for (int i = 0; i < n; i++)
			close(fds[i]);
		return 0;
	}
	if (pipe(pfd))
		die("pipe");
	pid = fork();
	if (!pid) {
		int got;

		close(pfd[0]);
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		n = silent_open(fds, LORIS_CONNECTIONS);
		if (write(pfd[1], "y", 1) != 1)
			_exit(3);
		got = silent_refused(fds, n, PG_EACCESS, 2000);
		printf("loris --refused: %d of %d silent connections of uid 65534 refused before their hello\n",
		       got, n);
		_exit(n == LORIS_CONNECTIONS && got == n ? 0 : 4);
	}
	close(pfd[1]);
	if (read(pfd[0], &c, 1) != 1)
		c = 0;
	close(pfd[0]);
	ms = timed_handshake(-1);
	waitpid(pid, &st, 0);
	printf("loris --refused: a handshake beside them %.2f ms\n", ms);
	CHECK(c == 'y', "the refused user's connections were not opened");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the silent connections of a refused user were not all refused at once (child status %d)",
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	CHECK(ms >= 0 && ms < LORIS_MAX_MS, "a handshake beside a refused user's silent connections took %.1f ms", ms);
	return 0;
}

/* ---- limits: against a daemon started with small ones ---- */

static void limits_clients(int max_clients)
{
	struct conn *cs = calloc((size_t)max_clients + 1, sizeof(*cs));
	int rc;

	for (int i = 0; i < max_clients; i++)
		conn_must_open(&cs[i]);
	rc = conn_open(&cs[max_clients], PG_PROTO_VERSION);
	CHECK(rc == PG_ECLIENTS && strstr(cs[max_clients].w.message, "--max-clients"),
	      "client %d of %d got %d: %s", max_clients + 1, max_clients, rc,
	      cs[max_clients].w.message);
	for (int i = 0; i < max_clients; i++)
		conn_close(&cs[i]);
	free(cs);
}

static void limits_requests(struct conn *c, const struct pg_seg_header *h)
{
	static uint8_t buf[1 << 16];
	static int32_t ids[4096];
	struct gen g;
	uint32_t len;

	for (int i = 0; i < 4096; i++)
		ids[i] = 3 + i % 50;
	gen_default(&g);
	g.ids = ids;
	g.n_ids = (int)h->max_prompt + 1;
	submit(c, PG_OP_GENERATE, 1, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	expect_error(c, 1, PG_ETOOBIG, "a prompt over --max-prompt");
	g.n_ids = 4;
	g.max_tokens = h->max_tokens + 1;
	submit(c, PG_OP_GENERATE, 2, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	expect_error(c, 2, PG_ETOOBIG, "max_tokens over --max-tokens");
	g.kind = PG_PROMPT_TEXT;
	g.text = "one two three four five six seven eight nine ten eleven twelve "
		 "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty";
	g.max_tokens = 4;
	submit(c, PG_OP_GENERATE, 3, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	expect_error(c, 3, PG_ETOOBIG, "a text prompt over --max-prompt");
	memset(buf, 'a', h->max_payload + 1);
	submit(c, PG_OP_TOKENIZE, 4, 0, buf, h->max_payload + 1, 0, NULL, NULL);
	expect_error(c, 4, PG_ETOOBIG, "a payload over --max-payload");
	g.kind = PG_PROMPT_TOKENS;
	g.max_tokens = 60;
	g.flags = PG_GEN_IGNORE_EOS;
	len = gen_payload(&g, buf);
	/* one publication: the daemon reads all before any of them can end */
	for (uint64_t id = 10; id < 10 + h->max_inflight; id++)
		queue_sqe(c, PG_OP_GENERATE, id, 0, buf, len, 0);
	queue_sqe(c, PG_OP_GENERATE, 99, 0, buf, len, 0);
	publish(c);
	expect_error(c, 99, PG_ELIMIT, "one request over --max-inflight");
	for (uint64_t id = 10; id < 10 + h->max_inflight; id++)
		submit(c, PG_OP_CANCEL, id, 0, NULL, 0, 0, NULL, NULL);
}

/* A client that reads late gets everything, in order, from the backlog. */
static void limits_backlog(struct conn *c)
{
	static uint8_t buf[4096];
	static struct stream s;
	static const int32_t ids[] = { 21, 22, 23 };
	struct gen g;
	struct reply r;

	gen_default(&g);
	g.ids = ids;
	g.n_ids = 3;
	g.max_tokens = 60;
	g.flags = PG_GEN_IGNORE_EOS | PG_GEN_TEXT;
	while (next_reply(c, &r, 200, 0) > 0)
		;	/* the cancelled requests' ends */
	submit(c, PG_OP_GENERATE, 500, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	usleep(300000);		/* the ring (8 entries) overflows meanwhile */
	stream_reset(&s, 500);
	while (!s.last && next_reply(c, &r, 10000, 0) > 0)
		if (r.cqe.req_id == 500)
			stream_take(&s, &r);
	CHECK(s.last && !s.bad && s.n_ids[0] == 60 && s.finish[0] == PG_FINISH_WIRE_LENGTH,
	      "a late reader lost completions: %d ids, finish %d, %d bad", s.n_ids[0],
	      s.finish[0], s.bad);
}

/* A client that never reads is dropped after --drain-timeout. */
static void limits_stall(void)
{
	static uint8_t buf[4096];
	static const int32_t ids[] = { 31, 32, 33 };
	struct conn c;
	struct gen g;
	double t0;

	conn_must_open(&c);
	gen_default(&g);
	g.ids = ids;
	g.n_ids = 3;
	g.max_tokens = 60;
	g.flags = PG_GEN_IGNORE_EOS;
	submit(&c, PG_OP_GENERATE, 1, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	t0 = pg_now_s();
	while (!atomic_load(&c.hdr->closed) && pg_now_s() - t0 < 10)
		usleep(10000);
	CHECK(atomic_load(&c.hdr->closed), "a client that never reads was not dropped");
	printf("limits: a client that never read was dropped after %.1f s\n", pg_now_s() - t0);
	conn_close(&c);
}

static int cmd_limits(void)
{
	struct pg_seg_header h;
	struct conn c;

	conn_must_open(&c);
	h = *c.hdr;
	limits_requests(&c, &h);
	limits_backlog(&c);
	conn_close(&c);
	limits_clients(3);
	limits_stall();
	printf("limits: prompt %u, tokens %u, payload %u, in flight %u: refused with their codes\n",
	       h.max_prompt, h.max_tokens, h.max_payload, h.max_inflight);
	return 0;
}

/* ---- unread: clients that leave their completion ring full ---- */

/*
 * c was dropped: the segment closed with code and a message containing
 * why in the header's goodbye (which needs no room in the full ring),
 * then the socket hung up.
 */
static void expect_dropped(struct conn *c, int code, const char *why,
			   const char *what)
{
	struct pollfd pfd = { .fd = c->sock, .events = POLLRDHUP };
	const struct pg_goodbye_wire *b = &c->hdr->bye;
	char msg[sizeof(b->message) + 1];
	double t0 = pg_now_s();

	while (!atomic_load_explicit(&c->hdr->closed, memory_order_acquire) &&
	       pg_now_s() - t0 < 30)
		usleep(10000);
	if (!atomic_load(&c->hdr->closed)) {
		FAIL("%s: not dropped within 30 s", what);
		return;
	}
	snprintf(msg, sizeof(msg), "%.*s", (int)sizeof(b->message), b->message);
	CHECK(b->code == code && strstr(msg, why),
	      "%s: dropped with code %d '%s', not code %d '...%s...'", what,
	      b->code, msg, code, why);
	CHECK(poll(&pfd, 1, 10000) == 1, "%s: the socket did not hang up", what);
	printf("unread: %s: dropped after %.1f s: %s\n", what, pg_now_s() - t0, msg);
}

/*
 * A client that sends pings and never reads: the completion ring fills
 * with PONGs, the next ones wait in the daemon (entries without payload)
 * and the client is dropped after --drain-timeout, told why.
 */
static void unread_pings(void)
{
	struct conn c;
	struct reply r;
	uint32_t n = 0, n_pong = 0;

	conn_must_open(&c);
	while (!queue_sqe(&c, PG_OP_PING, 1 + n, 0, NULL, 0, n))
		n++;
	publish(&c);
	CHECK(n > c.hdr->cq_slots, "only %u pings fit the submission ring", n);
	expect_dropped(&c, PG_EPROTO, "left its completion ring full",
		       "a client that sent pings and never read");
	while (next_reply(&c, &r, 1000, 0) > 0) {
		CHECK(r.cqe.type == PG_CQE_PONG && r.cqe.arg == n_pong,
		      "entry %u of the full ring: type %u arg %llu", n_pong,
		      r.cqe.type, (unsigned long long)r.cqe.arg);
		n_pong++;
	}
	CHECK(n_pong == c.hdr->cq_slots, "%u PONGs in a full ring of %u", n_pong,
	      c.hdr->cq_slots);
	conn_close(&c);
}

/* A prompt of single bytes and sampling that emit split UTF-8 characters. */
static void utf8_gen(struct gen *g)
{
	static const int32_t ids[] = { 3 + 0xe4, 3 + 0xb8, 3 + 0xad, 3 + 0xf0 };

	gen_default(g);
	g->ids = ids;
	g->n_ids = 4;
	g->max_tokens = 48;
	g->temperature = 1.5f;
	g->seed = 11;
	g->flags = PG_GEN_IGNORE_EOS | PG_GEN_TEXT;
}

/*
 * A slow reader of text whose characters the daemon holds back across
 * tokens (TOKENS entries without text): read late, through the backlog,
 * it gets what a prompt reader gets.
 */
static void unread_utf8(void)
{
	static uint8_t buf[4096];
	static struct stream ref, s;
	struct conn c;
	struct reply r;
	struct gen g;
	int n_entries = 0, n_held = 0;

	conn_must_open(&c);
	utf8_gen(&g);
	if (run_gen(&c, &g, 1, &ref) || ref.bad || ref.error)
		die("the prompt reader's generation did not complete");
	submit(&c, PG_OP_GENERATE, 2, 0, buf, gen_payload(&g, buf), 0, NULL, NULL);
	usleep(300000);		/* the ring (8 entries) overflows meanwhile */
	stream_reset(&s, 2);
	while (!s.last && next_reply(&c, &r, 10000, 0) > 0) {
		stream_take(&s, &r);
		n_entries++;
		n_held += r.cqe.type == PG_CQE_TOKENS && r.cqe.len == 0 &&
			  n_entries > (int)c.hdr->cq_slots;
	}
	CHECK(s.last && !s.bad && !s.error && same_stream(&s, &ref, 1),
	      "a slow reader of split UTF-8 got another stream: %d ids (%d alone), %zu bytes (%zu), error %d, %d bad",
	      s.n_ids[0], ref.n_ids[0], s.text_len[0], ref.text_len[0], s.error, s.bad);
	CHECK(n_held > 0, "no token's text was held back past the full ring: the test tests nothing");
	printf("unread: a slow reader got %d entries, %d of them held-back text past the full ring\n",
	       n_entries, n_held);
	stream_reset(&ref, 0);
	stream_reset(&s, 0);
	conn_close(&c);
}

/* Against a daemon with --cq-slots 8: a bystander is served meanwhile. */
static int cmd_unread(void)
{
	struct victim v = { .n_done = 0 };
	struct conn c;
	struct pg_info_wire w;

	make_variants(vocab_size());
	make_references();
	if (pthread_create(&v.th, NULL, victim_run, &v))
		die("pthread_create");
	unread_pings();
	unread_utf8();
	atomic_store(&v.stop, 1);
	pthread_join(v.th, NULL);
	CHECK(v.n_done > 0, "the bystander completed nothing");
	conn_must_open(&c);
	CHECK(!info_of(&c, &w), "the daemon does not answer INFO after the unread rings");
	conn_close(&c);
	printf("unread: the bystander completed %d requests correctly\n", v.n_done);
	return 0;
}

/* ---- restart: outlive the daemon ---- */

static int cmd_restart_wait(void)
{
	static const int32_t ids[] = { 3, 4, 5 };
	static struct stream s;
	struct conn c;
	struct reply r;
	struct gen g;
	uint64_t gen1;
	int shutdown = 0;
	double t0;

	conn_must_open(&c);
	gen1 = c.w.generation;
	printf("connected %016" PRIx64 "\n", gen1);
	fflush(stdout);
	t0 = pg_now_s();
	while (!c.lost && pg_now_s() - t0 < 60)
		if (next_reply(&c, &r, 1000, 0) > 0)
			shutdown |= r.cqe.type == PG_CQE_ERROR && r.cqe.code == PG_ESHUTDOWN;
	CHECK(c.lost, "the daemon's stop was never seen");
	printf("lost: %s%s\n", atomic_load(&c.hdr->closed) ? "closed" : "hung up",
	       shutdown ? " (PG_ESHUTDOWN)" : "");
	fflush(stdout);
	conn_close(&c);
	for (t0 = pg_now_s(); conn_open(&c, PG_PROTO_VERSION) && pg_now_s() - t0 < 60;)
		usleep(20000);
	if (!c.seg)
		die("could not reconnect within 60 s");
	CHECK(c.w.generation != gen1, "the new daemon has the old generation");
	gen_default(&g);
	g.ids = ids;
	g.n_ids = 3;
	g.max_tokens = 4;
	g.flags = PG_GEN_IGNORE_EOS;
	CHECK(!run_gen(&c, &g, 1, &s) && s.n_ids[0] == 4, "the new daemon does not serve");
	printf("reconnected %016" PRIx64 "\n", c.w.generation);
	conn_close(&c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd;
	struct conn c;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: daemon_client SOCKET COMMAND [ARGS] (see the file's head)\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	sock_path = argv[1];
	cmd = argv[2];
	if (!strcmp(cmd, "stress"))
		rc = cmd_stress(argc - 3, argv + 3);
	else if (!strcmp(cmd, "garbage"))
		rc = cmd_garbage(argc - 3, argv + 3);
	else if (!strcmp(cmd, "kill"))
		rc = cmd_kill(argc - 3, argv + 3);
	else if (!strcmp(cmd, "version"))
		rc = cmd_version();
	else if (!strcmp(cmd, "orphan"))
		rc = cmd_orphan();
	else if (!strcmp(cmd, "bigprompt"))
		rc = cmd_bigprompt(argc - 3, argv + 3);
	else if (!strcmp(cmd, "tokflood"))
		rc = cmd_tokflood(argc - 3, argv + 3);
	else if (!strcmp(cmd, "refused"))
		rc = cmd_refused();
	else if (!strcmp(cmd, "loris"))
		rc = cmd_loris(argc - 3, argv + 3);
	else if (!strcmp(cmd, "hellofields"))
		rc = cmd_hellofields();
	else if (!strcmp(cmd, "limits"))
		rc = cmd_limits();
	else if (!strcmp(cmd, "restart-wait"))
		rc = cmd_restart_wait();
	else if (!strcmp(cmd, "unread"))
		rc = cmd_unread();
	else {
		conn_must_open(&c);
		if (!strcmp(cmd, "info"))
			rc = cmd_info(&c);
		else if (!strcmp(cmd, "generate"))
			rc = cmd_generate(&c, argc - 3, argv + 3);
		else if (!strcmp(cmd, "tokenize"))
			rc = cmd_tokenize(&c, argc - 3, argv + 3);
		else if (!strcmp(cmd, "detokenize"))
			rc = cmd_detokenize(&c, argc - 3, argv + 3);
		else if (!strcmp(cmd, "stopcheck"))
			rc = cmd_stopcheck(&c);
		else if (!strcmp(cmd, "ping"))
			rc = cmd_ping(&c, argc - 3, argv + 3);
		else
			die("unknown command %s", cmd);
		conn_close(&c);
	}
	if (atomic_load(&failures)) {
		fprintf(stderr, "daemon_client %s: %d failures\n", cmd, atomic_load(&failures));
		return 1;
	}
	return rc;
}
