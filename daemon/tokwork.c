/*
 * tokwork.c - tokenizing off the loop: two worker threads that turn the
 * text of GENERATE and TOKENIZE requests (and chat messages, rendered with
 * the model's template first) into token ids, so that a prompt of a
 * megabyte, which takes the tokenizer a good part of a second, does not
 * hold up the loop's pings and token streams.
 *
 * The loop (request.c) checks a request, copies its payload into a job
 * and hands the job over; a worker fills in the ids (or an error) and
 * puts the job on the done list, then writes an eventfd that the loop's
 * io_uring reads, so a sleeping loop wakes up.  The loop collects finished
 * jobs at every iteration and finishes their requests (request.c).  The
 * workers touch nothing but their jobs, the tokenizer (which threads may
 * share) and the chat template's format; everything about clients and
 * requests stays on the loop, which also decides whether a finished job
 * still matters (its request may have been cancelled, its client gone).
 *
 * Clients are served in turn, not first come first served: every client
 * (by slot) has its own queue, and the workers take the waiting job with
 * the smallest finish tag, as weighted fair queueing does with packets.
 * A job's tag is its bytes past the later of its client's previous tag and
 * the virtual clock, which advances by each finished job's bytes shared
 * among the clients that had work; so a client that sends a few bytes
 * goes ahead of one that has megabytes queued, however many of those
 * there are.  One client's jobs run one at a time, in order.  Since a
 * megabyte cannot be interrupted, the second thread only takes jobs of at
 * most PGD_TOK_SMALL_BYTES: a short prompt never waits for a long one to
 * end; and the first runs at a lower priority, so that on a small host the
 * loop and the forward pass come first.  The loop bounds what waits here
 * (pgd_tok_held, daemon.h).
 *
 * The loop's side of the workers is this file's too: the count and bytes
 * of the jobs handed over (pgd_tok_busy, pgd_tok_total), and the read of
 * the eventfd, which it keeps armed in the daemon's io_uring as an owner
 * of its own (pgd_tok_attach, loop.h).  Of struct pgd it writes only
 * d->tok.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/engine/chat.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"
#include "daemon/log.h"
#include "daemon/loop.h"

/* Jobs of at most this many bytes may also go to the second thread. */
#define PGD_TOK_SMALL_BYTES (8u << 10)

/* The nice value of the first thread, which runs the long jobs. */
#define PGD_TOK_BULK_NICE 5

/* One client's waiting jobs (by slot: a new client in the slot inherits
   only the position of its predecessor's last job, if still running). */
struct tokq {
	struct pgd_tokjob *head, *tail;	/* FIFO, tags increasing */
	uint64_t last_tag;		/* of its latest job */
	int busy;			/* one of its jobs is being tokenized */
	int pos;			/* in active[]; -1: not there */
};

struct pgd_tok;

/* A worker thread and the largest job it takes. */
struct lane {
	struct pgd_tok *w;
	pthread_t thread;
	uint32_t max_bytes;
	int started;
};

struct pgd_tok {
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* the workers wait for jobs */
	struct tokq *q;			/* (n_q) one per client slot */
	int n_q;
	int *active;			/* (n_q) slots whose queue has a job
					   waiting or running, n_active of them */
	int n_active;
	uint64_t vclock;		/* the virtual clock, in bytes */
	uint64_t seq;			/* jobs submitted, orders equal tags */
	struct pgd_tokjob *done, *done_tail;	/* FIFO */
	int stop;
	_Atomic int n_done;		/* jobs on the done list */
	int efd;			/* written once per finished job */
	struct lane lanes[2];		/* [0] any job, [1] small ones */
	const struct pg_tokenizer *tok;
	enum pg_chat_format chat_fmt;
	const char *chat_system;
	/* the loop's alone (no lock) */
	int n_jobs;			/* handed over, not yet collected */
	size_t total;			/* their payload bytes */
	struct pgd_loop *loop;		/* the io_uring that reads efd */
	int owner;			/* the workers' owner in it */
	uint64_t efd_buf;		/* the sink of its reads */
	int armed;			/* a read of efd is in the io_uring */
};

/* the wire's role numbers (pg_chat_msg_wire) */
static const char *const chat_roles[] = { "system", "user", "assistant", "tool" };

int pgd_chat_walk(const uint8_t *p, uint32_t bytes, struct pg_chat_msg *msgs,
		  char *text, char *err, size_t err_len)
{
	uint32_t off = 0, pad;
	int n = 0;

	while (off < bytes) {
		struct pg_chat_msg_wire w;

		if (bytes - off < sizeof(w)) {
			snprintf(err, err_len, "chat message %d: its header runs past prompt_bytes", n);
			return -1;
		}
		memcpy(&w, p + off, sizeof(w));
		off += sizeof(w);
		if (w.role >= sizeof(chat_roles) / sizeof(chat_roles[0])) {
			snprintf(err, err_len, "chat message %d: role %u is not 0 (system), 1 (user), 2 (assistant) or 3 (tool)",
				 n, w.role);
			return -1;
		}
		if (w.len > bytes - off) {
			snprintf(err, err_len, "chat message %d: its %u bytes run past prompt_bytes", n, w.len);
			return -1;
		}
		if (memchr(p + off, 0, w.len)) {
			snprintf(err, err_len, "chat message %d contains a NUL byte", n);
			return -1;
		}
		if (msgs) {
			memcpy(text, p + off, w.len);
			text[w.len] = '\0';
			msgs[n].role = chat_roles[w.role];
			msgs[n].content = text;
			text += w.len + 1;
		}
		off += w.len;
		pad = (4 - w.len % 4) % 4;	/* the last message may omit it */
		off += pad < bytes - off ? pad : bytes - off;
		n++;
	}
	if (!n)
		snprintf(err, err_len, "a chat prompt needs at least one message");
	return n ? n : -1;
}

static void job_fail(struct pgd_tokjob *j, enum pg_error code, const char *msg)
{
	j->code = code;
	snprintf(j->msg, sizeof(j->msg), "%s", msg);
}

/*
 * The chat messages of j (checked by the loop) rendered and tokenized into
 * j's ids: the template's markers as special tokens, the messages' content
 * as text unless the request opted in (j->content_special).
 */
static void job_chat(const struct pgd_tok *w, struct pgd_tokjob *j)
{
	int n = pgd_chat_walk(j->in, j->in_len, NULL, NULL, j->msg, sizeof(j->msg));
	struct pg_chat_msg *msgs = n > 0 ? malloc(sizeof(*msgs) * (size_t)n) : NULL;
	char *text = n > 0 ? malloc((size_t)j->in_len + (size_t)n) : NULL;
	int64_t got;

	if (n < 0) {
		j->code = PG_EINVAL;
		goto out_free;
	}
	if (!msgs || !text) {
		job_fail(j, PG_ENOMEM, "pagodad is out of memory for the chat prompt");
		goto out_free;
	}
	pgd_chat_walk(j->in, j->in_len, msgs, text, j->msg, sizeof(j->msg));
	got = pg_chat_tokenize(w->tok, w->chat_fmt, msgs, n, 1, w->chat_system,
			       j->add_bos, j->content_special, &j->ids);
	if (got == -EINVAL) {
		j->code = PG_EINVAL;
		snprintf(j->msg, sizeof(j->msg), "the model's chat template (%s) cannot render these roles",
			 pg_chat_format_name(w->chat_fmt));
	} else if (got < 0) {
		job_fail(j, PG_ENOMEM, "pagodad is out of memory tokenizing the chat prompt");
	} else {
		j->n_ids = got;
	}
out_free:
	free(msgs);
	free(text);
}

/* The worker's part of a job: ids (or an error) from its text or chat. */
static void job_run(const struct pgd_tok *w, struct pgd_tokjob *j)
{
	int64_t cap, n;

	if (j->chat) {
		job_chat(w, j);
		return;
	}
	/* every token takes at least a byte, BOS none */
	cap = (int64_t)j->in_len + 1;
	j->ids = malloc(sizeof(*j->ids) * (size_t)cap);
	n = j->ids ? pg_tokenize(w->tok, (const char *)j->in, j->in_len,
				 j->add_bos, j->special, j->ids, cap) : -ENOMEM;
	if (n < 0 || n > cap)
		job_fail(j, PG_ENOMEM, "pagodad is out of memory tokenizing");
	else
		j->n_ids = n;
}

/* ---- the queues (under the lock) ---- */

static void active_add(struct pgd_tok *w, struct tokq *q)
{
	if (q->pos >= 0)
		return;
	q->pos = w->n_active;
	w->active[w->n_active++] = (int)(q - w->q);
}

/* Off the active list once it has nothing waiting or running. */
static void active_drop_idle(struct pgd_tok *w, struct tokq *q)
{
	struct tokq *moved;

	if (q->pos < 0 || q->head || q->busy)
		return;
	moved = &w->q[w->active[--w->n_active]];
	w->active[q->pos] = (int)(moved - w->q);
	moved->pos = q->pos;
	q->pos = -1;
}

/*
 * The queue whose next job a lane taking jobs of at most max_bytes runs
 * now: the smallest tag (then the oldest) of the clients not running one.
 */
static struct tokq *pick(const struct pgd_tok *w, uint32_t max_bytes)
{
	struct tokq *best = NULL;

	for (int i = 0; i < w->n_active; i++) {
		struct tokq *q = &w->q[w->active[i]];
		const struct pgd_tokjob *j = q->head;

		if (q->busy || !j || j->bytes > max_bytes)
			continue;
		if (!best || j->tag < best->head->tag ||
		    (j->tag == best->head->tag && j->seq < best->head->seq))
			best = q;
	}
	return best;
}

static struct pgd_tokjob *take(struct tokq *q)
{
	struct pgd_tokjob *j = q->head;

	q->head = j->next;
	if (!q->head)
		q->tail = NULL;
	q->busy = 1;
	return j;
}

/* j onto the done list; the loop's io_uring hears of it. */
static void put_done(struct pgd_tok *w, struct pgd_tokjob *j)
{
	const uint64_t one = 1;

	j->next = NULL;
	if (w->done_tail)
		w->done_tail->next = j;
	else
		w->done = j;
	w->done_tail = j;
	atomic_fetch_add_explicit(&w->n_done, 1, memory_order_release);
	if (write(w->efd, &one, sizeof(one)) < 0)	/* only when full: */
		return;					/* a wake is due */
}

/*
 * j of q has been tokenized: the clock advances by its bytes shared among
 * the clients that had work meanwhile (the fluid model's progress).
 */
static void job_done(struct pgd_tok *w, struct tokq *q, struct pgd_tokjob *j)
{
	w->vclock += j->bytes / (uint64_t)(w->n_active ? w->n_active : 1);
	q->busy = 0;
	active_drop_idle(w, q);
	put_done(w, j);
	if (q->head)		/* its next job may go to either lane */
		pthread_cond_broadcast(&w->cond);
}

static void *worker(void *arg)
{
	struct lane *l = arg;
	struct pgd_tok *w = l->w;

	/* long jobs give way to the loop, the engine and short jobs */
	if (l->max_bytes > PGD_TOK_SMALL_BYTES &&
	    setpriority(PRIO_PROCESS, (id_t)gettid(), PGD_TOK_BULK_NICE))
		pgd_log(PGD_LOG_DEBUG, "cannot lower the bulk tokenizing thread's priority: %s",
			strerror(errno));
	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct tokq *q = NULL;
		struct pgd_tokjob *j;

		while (!w->stop && !(q = pick(w, l->max_bytes)))
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->stop)
			break;
		j = take(q);
		pthread_mutex_unlock(&w->lock);
		job_run(w, j);
		pthread_mutex_lock(&w->lock);
		job_done(w, q, j);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* ---- the loop's side ---- */

static void tok_free(struct pgd_tok *w)
{
	close(w->efd);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w->q);
	free(w->active);
	free(w);
}

static int start_lanes(struct pgd_tok *w, char *err, size_t err_len)
{
	static const uint32_t max_bytes[2] = { UINT32_MAX, PGD_TOK_SMALL_BYTES };

	for (int i = 0; i < 2; i++) {
		struct lane *l = &w->lanes[i];
		int rc;

		l->w = w;
		l->max_bytes = max_bytes[i];
		rc = pthread_create(&l->thread, NULL, worker, l);
		if (rc) {
			snprintf(err, err_len, "cannot start a tokenizing thread: %s", strerror(rc));
			return -1;
		}
		l->started = 1;
	}
	return 0;
}

int pgd_tok_start(struct pgd *d, char *err, size_t err_len)
{
	struct pgd_tok *w = calloc(1, sizeof(*w));
	int n = d->cfg->max_clients;

	if (w) {
		w->q = calloc((size_t)n, sizeof(*w->q));
		w->active = calloc((size_t)n, sizeof(*w->active));
	}
	if (!w || !w->q || !w->active) {
		if (w) {
			free(w->q);
			free(w->active);
		}
		free(w);
		snprintf(err, err_len, "out of memory for the tokenizing workers");
		return -1;
	}
	w->n_q = n;
	for (int i = 0; i < n; i++)
		w->q[i].pos = -1;
	w->tok = d->m->tok;
	w->chat_fmt = (enum pg_chat_format)d->chat_fmt;
	w->chat_system = d->chat_system;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->efd = eventfd(0, EFD_CLOEXEC);	/* blocking: the io_uring waits */
	if (w->efd < 0) {
		snprintf(err, err_len, "cannot create an eventfd: %s", strerror(errno));
		w->efd = -1;
		tok_free(w);
		return -1;
	}
	d->tok = w;	/* pgd_tok_stop() joins what started */
	return start_lanes(w, err, err_len);
}

int pgd_tok_fd(const struct pgd *d)
{
	return d->tok->efd;
}

int pgd_tok_busy(const struct pgd *d)
{
	return d->tok ? d->tok->n_jobs : 0;
}

size_t pgd_tok_total(const struct pgd *d)
{
	return d->tok ? d->tok->total : 0;
}

/* The workers' io_uring operation: a read of their eventfd. */
#define OP_TOKDONE 1

/* Keep a read of the eventfd in the io_uring: a job done wakes the loop. */
static void arm_read(struct pgd_tok *w)
{
	uint64_t ud = pgd_loop_tag(w->owner, OP_TOKDONE, 0, 0);
	struct io_uring_sqe *sqe;

	if (w->armed)
		return;
	sqe = pgd_loop_sqe(w->loop, ud);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, w->efd, &w->efd_buf, sizeof(w->efd_buf), 0);
	sqe->user_data = ud;
	w->armed = 1;
}

/* The read's completion (loop.h): the jobs are collected every iteration. */
static void on_cqe(void *ctx, unsigned op, uint32_t index, uint32_t gen, int res)
{
	struct pgd_tok *w = ctx;

	if (op != OP_TOKDONE)
		return;
	w->armed = 0;
	if (res > 0)
		arm_read(w);
	else if (res != -ECANCELED)
		pgd_log(PGD_LOG_ERROR, "reading the tokenizing worker's eventfd: %s",
			strerror(-res));
}

int pgd_tok_attach(struct pgd *d, char *err, size_t err_len)
{
	struct pgd_tok *w = d->tok;

	w->loop = &d->loop;
	w->owner = pgd_loop_register(w->loop, "", on_cqe, w);
	if (w->owner < 0) {
		snprintf(err, err_len, "no room in the io_uring's dispatch for the tokenizing workers");
		return -1;
	}
	arm_read(w);
	return 0;
}

void pgd_tok_submit(struct pgd *d, struct pgd_tokjob *j)
{
	struct pgd_tok *w = d->tok;
	struct tokq *q = &w->q[j->slot];
	uint64_t from;

	j->next = NULL;
	w->n_jobs++;
	w->total += j->bytes;
	pthread_mutex_lock(&w->lock);
	from = q->last_tag > w->vclock ? q->last_tag : w->vclock;
	j->tag = from + j->bytes;
	j->seq = w->seq++;
	q->last_tag = j->tag;
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
	active_add(w, q);
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void pgd_tok_forget(struct pgd *d, uint32_t slot)
{
	struct pgd_tok *w = d->tok;
	struct tokq *q = &w->q[slot];

	pthread_mutex_lock(&w->lock);
	while (q->head) {
		struct pgd_tokjob *j = q->head;

		q->head = j->next;
		j->code = PG_ECANCELLED;	/* nobody will read it */
		put_done(w, j);
	}
	q->tail = NULL;
	q->last_tag = 0;
	active_drop_idle(w, q);
	pthread_mutex_unlock(&w->lock);
}

struct pgd_tokjob *pgd_tok_collect(struct pgd *d)
{
	struct pgd_tok *w = d->tok;
	struct pgd_tokjob *list;

	if (!atomic_load_explicit(&w->n_done, memory_order_acquire))
		return NULL;
	pthread_mutex_lock(&w->lock);
	list = w->done;
	w->done = w->done_tail = NULL;
	atomic_store_explicit(&w->n_done, 0, memory_order_relaxed);
	pthread_mutex_unlock(&w->lock);
	for (struct pgd_tokjob *j = list; j; j = j->next) {
		w->n_jobs--;
		w->total -= j->bytes;
	}
	return list;
}

void pgd_tokjob_free(struct pgd_tokjob *j)
{
	if (!j)
		return;
	if (j->r)
		j->r->job = NULL;
	free(j->buf);
	free(j->ids);
	free(j->grammar);
	free(j);
}

/* Free a list of jobs and the requests that still wait for them. */
static void free_jobs(struct pgd_tokjob *j)
{
	while (j) {
		struct pgd_tokjob *next = j->next;

		free(j->r);	/* in no table the daemon still frees */
		j->r = NULL;
		pgd_tokjob_free(j);
		j = next;
	}
}

void pgd_tok_stop(struct pgd *d)
{
	struct pgd_tok *w = d->tok;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < 2; i++)
		if (w->lanes[i].started)
			pthread_join(w->lanes[i].thread, NULL);
	for (int i = 0; i < w->n_q; i++)
		free_jobs(w->q[i].head);
	free_jobs(w->done);
	tok_free(w);
	d->tok = NULL;
}
