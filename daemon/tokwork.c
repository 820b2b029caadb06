/*
 * tokwork.c - tokenizing off the loop: a worker thread that turns the
 * text of GENERATE and TOKENIZE requests (and chat messages, rendered with
 * the model's template first) into token ids, so that a prompt of a
 * megabyte, which takes the tokenizer a good part of a second, does not
 * hold up the loop's pings and token streams.
 *
 * The loop (request.c) checks a request, copies its payload into a job
 * and hands the job over; the worker fills in the ids (or an error) and
 * puts the job on the done list, then writes an eventfd that the loop's
 * io_uring reads, so a sleeping loop wakes up.  The loop collects finished
 * jobs at every iteration and finishes their requests (request.c).  The
 * worker touches nothing but its jobs, the tokenizer (which threads may
 * share) and the chat template's format; everything about clients and
 * requests stays on the loop, which also decides whether a finished job
 * still matters (its request may have been cancelled, its client gone).
 *
 * It is not a pool: one thread is enough to keep the loop free, and the
 * engine behind it is single-threaded anyway.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon.h"
#include "engine/chat.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "log.h"

struct pgd_tok {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* the worker waits for jobs */
	struct pgd_tokjob *todo, *todo_tail;	/* FIFO */
	struct pgd_tokjob *done, *done_tail;	/* FIFO */
	int stop;
	_Atomic int n_done;		/* jobs on the done list */
	int efd;			/* written once per finished job */
	const struct pg_tokenizer *tok;
	enum pg_chat_format chat_fmt;
	const char *chat_system;
};

static const char *const chat_roles[] = { "system", "user", "assistant" };

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
		if (w.role > 2) {
			snprintf(err, err_len, "chat message %d: role %u is not 0 (system), 1 (user) or 2 (assistant)",
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

/* The chat messages of j (checked by the loop) rendered, malloc'd; NULL
   after setting j's error. */
static char *job_render(const struct pgd_tok *w, struct pgd_tokjob *j)
{
	int n = pgd_chat_walk(j->in, j->in_len, NULL, NULL, j->msg, sizeof(j->msg));
	struct pg_chat_msg *msgs = n > 0 ? malloc(sizeof(*msgs) * (size_t)n) : NULL;
	char *text = n > 0 ? malloc((size_t)j->in_len + (size_t)n) : NULL;
	char *out = NULL;
	int rc;

	if (n < 0) {
		j->code = PG_EINVAL;
		goto out_free;
	}
	if (!msgs || !text) {
		job_fail(j, PG_ENOMEM, "pagodad is out of memory for the chat prompt");
		goto out_free;
	}
	pgd_chat_walk(j->in, j->in_len, msgs, text, j->msg, sizeof(j->msg));
	rc = pg_chat_render(w->chat_fmt, msgs, n, 1, w->chat_system, &out);
	if (rc == -EINVAL) {
		j->code = PG_EINVAL;
		snprintf(j->msg, sizeof(j->msg), "the model's chat template (%s) cannot render these roles",
			 pg_chat_format_name(w->chat_fmt));
	} else if (rc) {
		job_fail(j, PG_ENOMEM, "pagodad is out of memory rendering the chat prompt");
	}
out_free:
	free(msgs);
	free(text);
	return out;
}

/* The worker's part of a job: ids (or an error) from its text or chat. */
static void job_run(const struct pgd_tok *w, struct pgd_tokjob *j)
{
	const char *text = (const char *)j->in;
	size_t len = j->in_len;
	char *rendered = NULL;
	int64_t cap, n;

	if (j->chat) {
		rendered = job_render(w, j);
		if (!rendered)
			return;
		text = rendered;
		len = strlen(rendered);
	}
	/* every token takes at least a byte, BOS none */
	cap = (int64_t)len + 1;
	j->ids = malloc(sizeof(*j->ids) * (size_t)cap);
	n = j->ids ? pg_tokenize(w->tok, text, len, j->add_bos, j->special,
				 j->ids, cap) : -ENOMEM;
	if (n < 0 || n > cap)
		job_fail(j, PG_ENOMEM, "pagodad is out of memory tokenizing");
	else
		j->n_ids = n;
	free(rendered);
}

static void *worker(void *arg)
{
	struct pgd_tok *w = arg;
	const uint64_t one = 1;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct pgd_tokjob *j;

		while (!w->todo && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->stop)
			break;
		j = w->todo;
		w->todo = j->next;
		if (!w->todo)
			w->todo_tail = NULL;
		pthread_mutex_unlock(&w->lock);
		job_run(w, j);
		pthread_mutex_lock(&w->lock);
		j->next = NULL;
		if (w->done_tail)
			w->done_tail->next = j;
		else
			w->done = j;
		w->done_tail = j;
		atomic_fetch_add_explicit(&w->n_done, 1, memory_order_release);
		if (write(w->efd, &one, sizeof(one)) < 0)	/* only when full: */
			continue;				/* a wake is due */
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int pgd_tok_start(struct pgd *d, char *err, size_t err_len)
{
	struct pgd_tok *w = calloc(1, sizeof(*w));
	int rc;

	if (!w) {
		snprintf(err, err_len, "out of memory for the tokenizing worker");
		return -1;
	}
	w->tok = d->m->tok;
	w->chat_fmt = (enum pg_chat_format)d->chat_fmt;
	w->chat_system = d->chat_system;
	w->efd = eventfd(0, EFD_CLOEXEC);	/* blocking: the io_uring waits */
	if (w->efd < 0) {
		snprintf(err, err_len, "cannot create an eventfd: %s", strerror(errno));
		free(w);
		return -1;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	rc = pthread_create(&w->thread, NULL, worker, w);
	if (rc) {
		snprintf(err, err_len, "cannot start the tokenizing thread: %s", strerror(rc));
		close(w->efd);
		free(w);
		return -1;
	}
	d->tok = w;
	return 0;
}

int pgd_tok_fd(const struct pgd *d)
{
	return d->tok->efd;
}

void pgd_tok_submit(struct pgd *d, struct pgd_tokjob *j)
{
	struct pgd_tok *w = d->tok;

	j->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->todo_tail)
		w->todo_tail->next = j;
	else
		w->todo = j;
	w->todo_tail = j;
	pthread_cond_signal(&w->cond);
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
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	free_jobs(w->todo);
	free_jobs(w->done);
	close(w->efd);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
	d->tok = NULL;
}
