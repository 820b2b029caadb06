/*
 * event.c - the streaming side: pagoda_next_event() turns the completions
 * of submitted requests into struct pagoda_event, and pagoda_fd() gives
 * event loops something to poll.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "client/lib/internal.h"

static_assert((int)PAGODA_FINISH_ERROR == (int)PG_FINISH_WIRE_ERROR &&
	      (int)PAGODA_FINISH_GRAMMAR == (int)PG_FINISH_WIRE_GRAMMAR,
	      "pagoda_finish mirrors pg_finish_wire");

const char *pagoda_finish_name(enum pagoda_finish f)
{
	switch (f) {
	case PAGODA_FINISH_STOP: return "stop";
	case PAGODA_FINISH_LENGTH: return "length";
	case PAGODA_FINISH_CANCELLED: return "cancelled";
	case PAGODA_FINISH_ERROR: return "error";
	case PAGODA_FINISH_GRAMMAR: return "grammar";
	}
	return "unknown";
}

int pgc_finish_ok(int32_t wire)
{
	return wire >= 0 && wire <= PGC_FINISH_MAX;
}

int pgc_error_code(int32_t wire)
{
	return wire > 0 && wire < PG_ERROR_MAX ? -wire : PAGODA_EPROTO;
}

int pgc_figures(const struct pgc_rx *rx, struct pagoda_figures *fig)
{
	struct pg_done_wire d;

	if (rx->len != sizeof(d))
		return -1;
	memcpy(&d, rx->data, sizeof(d));
	*fig = (struct pagoda_figures){
		.queue_s = d.queue_s, .ttft_s = d.ttft_s, .itl_s = d.itl_s,
		.n_prompt = d.n_prompt, .n_cached = d.n_cached,
		.n_gen = d.n_gen, .n_preempt = d.n_preempt, .seed = d.seed,
	};
	return 0;
}

int pgc_logprobs_ok(const struct pgc_rx *rx)
{
	return rx->len >= sizeof(struct pg_logprob_wire) &&
	       rx->len % sizeof(struct pg_logprob_wire) == 0;
}

static int match_stream(const struct pg_cqe *c, enum pgc_owner owner, void *ctx)
{
	(void)c;
	(void)ctx;
	return owner == PGC_STREAM;
}

/* to_event - the completion in p->ev_rx as an event; 1, or a code. */
static int to_event(struct pagoda *p, struct pagoda_event *ev)
{
	const struct pgc_rx *rx = &p->ev_rx;
	const struct pg_cqe *c = &rx->cqe;
	const char *text = rx->len ? (const char *)rx->data : "";

	memset(ev, 0, sizeof(*ev));
	ev->id = c->req_id;
	ev->sample = c->sample;
	ev->text = "";
	switch (c->type) {
	case PG_CQE_TOKENS:
		ev->type = PAGODA_EVENT_TOKENS;
		memcpy(p->ev_ids, c->ids, c->n_ids * sizeof(int32_t));
		ev->ids = p->ev_ids;
		ev->n_ids = c->n_ids;
		ev->text = text;
		ev->text_len = rx->len;
		ev->emitted_ns = c->t_ns;
		return 1;
	case PG_CQE_LOGPROBS: {
		const struct pagoda_logprob *lp = (const struct pagoda_logprob *)rx->data;

		if (!pgc_logprobs_ok(rx))
			return pgc_fail(p, PAGODA_EPROTO, "pagodad sent a malformed LOGPROBS");
		ev->type = PAGODA_EVENT_LOGPROBS;
		p->ev_ids[0] = c->ids[0];	/* the token */
		ev->ids = p->ev_ids;
		ev->n_ids = 1;
		ev->emitted_ns = c->t_ns;
		ev->logprob = lp[0].logprob;	/* client_proto.h: the token's own first */
		ev->logprobs = lp + 1;
		ev->n_logprobs = rx->len / sizeof(*lp) - 1;
		return 1;
	}
	case PG_CQE_DONE:
		ev->type = PAGODA_EVENT_DONE;
		if (!pgc_finish_ok(c->code) || pgc_figures(rx, &ev->figures))
			return pgc_fail(p, PAGODA_EPROTO, "pagodad sent a malformed DONE");
		ev->finish = (enum pagoda_finish)c->code;
		ev->last = (c->flags & PG_CQE_F_LAST) != 0;
		return 1;
	case PG_CQE_ERROR:
		ev->type = PAGODA_EVENT_ERROR;
		ev->error = pgc_error_code(c->code);
		ev->last = 1;	/* the others never get here (io.c) */
		ev->text = rx->len ? text : pagoda_strerror(ev->error);
		ev->text_len = strlen(ev->text);
		return 1;
	default:
		return pgc_fail(p, PAGODA_EPROTO,
				"pagodad answered a generation with a completion of type %u",
				c->type);
	}
}

/*
 * arm - nothing is left for the event loop: drain the doorbell, then ask
 * the daemon to ring it.  Returns 1 when it will, 0 when completions came
 * meanwhile (read them first).
 */
static int arm(struct pagoda *p)
{
	uint64_t v;

	if (pgc_check_socket(p))
		return 0;	/* gone: the next look says so */
	(void)!read(p->cq_efd, &v, sizeof(v));	/* non-blocking */
	if (!pg_ring_prepare_sleep(&p->cq))
		return 0;
	p->fd_armed = 1;
	return 1;
}

int pagoda_next_event(pagoda_t *p, struct pagoda_event *ev, int timeout_ms)
{
	int rc;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		int was_armed = p->fd_armed;

		p->fd_armed = 0;
		if (was_armed && !p->poller)
			pg_ring_awake(&p->cq);
		rc = pgc_wait(p, match_stream, NULL, &p->ev_rx, timeout_ms,
			      PGC_TOKENS);
		if (rc > 0)
			rc = to_event(p, ev);
		/* an event loop (timeout 0) wants the fd armed when idle */
		if (rc || timeout_ms != 0 || p->ep_fd < 0 || arm(p))
			break;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int pagoda_fd(pagoda_t *p)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int rc = 0, fd;

	pthread_mutex_lock(&p->lock);
	if (p->ep_fd >= 0)
		goto out;
	fd = epoll_create1(EPOLL_CLOEXEC);
	if (fd < 0) {
		rc = pgc_fail(p, PAGODA_ENOMEM, "cannot make the event fd: %s",
			      strerror(errno));
		goto out;
	}
	ev.data.fd = p->cq_efd;
	if (!epoll_ctl(fd, EPOLL_CTL_ADD, p->cq_efd, &ev)) {
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.fd = p->sock;
		if (!epoll_ctl(fd, EPOLL_CTL_ADD, p->sock, &ev))
			p->ep_fd = fd;
	}
	if (p->ep_fd < 0) {
		rc = pgc_fail(p, PAGODA_ENOMEM, "cannot make the event fd: %s",
			      strerror(errno));
		close(fd);
		goto out;
	}
	/* from now on an idle handle has the daemon ring the doorbell */
	if (!arm(p))
		pgc_ring_self(p);
out:
	pthread_mutex_unlock(&p->lock);
	return rc ? rc : p->ep_fd;
}
