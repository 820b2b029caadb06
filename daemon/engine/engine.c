/*
 * engine.c - the serving engine's scheduler (see engine.h): requests and
 * their samples, the running and waiting queues, one batch per step.
 *
 * The schedulable unit is a sample (struct seq).  Its tokens are the
 * prompt then what it generated; the KV pages hold the first
 * pg_kvc_seq_len of them, and the rest is work for the next steps.  A
 * prefill, a chunk of one, a decode and the recompute after preemption
 * are all "put the tokens not yet in KV through the forward"; a sample is
 * drawn when the last of them went through.  This file does not compute
 * anything itself (forward.c does) nor decide which page holds what
 * (kvcache.c does).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/engine/constrain.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/stepcost.h"
#include "daemon/engine/tokenizer.h"

enum seq_state {
	SEQ_FORK = 0,	/* sample i > 0 before the prompt is computed */
	SEQ_WAITING,	/* queued, no pages */
	SEQ_RUNNING,	/* holds a page table */
	SEQ_DONE,
};

struct req;

struct seq {
	struct req *req;
	int index;			/* sample number */
	enum seq_state state;
	struct pg_kvc_seq *kv;		/* RUNNING only */
	int32_t *toks;			/* (n_prompt + max_tokens) ids */
	int n_toks;
	int preempted;			/* waiting again after preemption */
	int admitted;			/* ever admitted */
	uint64_t admit_no;		/* admission order, newest highest */
	struct pg_sampler *sampler;
	struct pg_stop *stop;
	struct pg_grammar_state *gs;	/* under a grammar: its position */
	struct pg_detok_stream detok;
	struct pg_request_figures fig;
	double t_first, t_last;		/* first and latest token */
	int chunk;			/* tokens in a batch in flight */
	int cancel;			/* cancelled while in flight */
};

struct req {
	struct req *next;
	uint64_t id;
	uint64_t client;
	int priority;
	int n;				/* samples */
	int n_live;			/* samples not DONE */
	int max_tokens;
	int ignore_eos;
	int n_logprobs;			/* per token, 0 .. PG_MAX_LOGPROBS */
	int forked;
	int failed, cancelled;
	int32_t *stop_ids;
	int n_stop_ids;
	struct pg_cgrammar *grammar;	/* NULL: unconstrained */
	int lazy;			/* pg_constrain_lazy() of its sampling */
	double t_submit;
	struct seq *seqs;		/* (n) */
};

struct client {
	uint64_t id;
	uint64_t last_turn;		/* 0: never admitted */
};

struct seq_list {
	struct seq **v;
	int n, cap;
};

/* One batch: built by a step, in flight until its forward pass is done. */
struct batch {
	int32_t *tokens;		/* (max_batch_tokens) */
	struct pg_fw_seq *fw;		/* (max_batch_seqs) */
	struct seq **seq;		/* (max_batch_seqs) */
	int n_tokens, n_seqs;
	float *logits;			/* (max_batch_seqs, n_vocab) */
	struct pg_step_shape shape;	/* for the cost model */
	double t_submit;		/* seconds */
};

#define PG_ENGINE_MAX_INFLIGHT 16

struct pg_engine {
	const struct pg_model *m;
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	struct pg_engine_config cfg;
	int page_tokens;
	int n_pages;
	int n_vocab;
	struct req *reqs;
	uint64_t next_id;
	uint64_t next_admit;
	uint64_t turn;
	struct seq_list running;	/* admission order, oldest first */
	struct seq_list waiting;
	struct client *clients;
	int n_clients;
	/*
	 * Batches in flight, oldest at b_head: up to the forward pass's
	 * pipeline depth, so that pipeline stages overlap (micro-batches).
	 */
	struct batch b[PG_ENGINE_MAX_INFLIGHT];
	int n_slots, b_head, n_inflight;
	struct batch *cur;		/* the one a step is building */
	int seq_cap;			/* sequences per batch this step */
	/*
	 * Steps bounded by cost: the model, and the step being planned's
	 * budget for prompt chunks (bounded: something decodes).
	 */
	struct pg_step_cost cost;
	int bounded;
	double budget_s;
	int n_chunks;			/* prompt chunks in the batch so far */
	double decode_step_s, target_s;	/* of the last bounded step */
	uint64_t bounded_chunks;
	double t_collect;		/* when the last batch was collected */
	float *scratch;			/* (n_vocab) */
	struct pg_constrain *con;	/* compiled grammars */
	struct pg_engine_stats st;
	char msg[256];
};

const char *pg_engine_finish_name(enum pg_engine_finish f)
{
	switch (f) {
	case PG_ENGINE_FINISH_STOP: return "stop";
	case PG_ENGINE_FINISH_LENGTH: return "length";
	case PG_ENGINE_FINISH_CANCELLED: return "cancelled";
	case PG_ENGINE_FINISH_ERROR: return "error";
	case PG_ENGINE_FINISH_GRAMMAR: return "grammar";
	}
	return "unknown";
}

/* Leave a message on the handle and return err. */
static int __attribute__((format(printf, 3, 4)))
fail(struct pg_engine *e, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return err;
}

/* ---- sequence lists ---- */

static int list_push(struct seq_list *l, struct seq *s)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 16;
		struct seq **v = realloc(l->v, sizeof(*v) * (size_t)cap);

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = s;
	return 0;
}

/* Remove s keeping the order (running is in admission order). */
static void list_remove(struct seq_list *l, struct seq *s)
{
	for (int i = 0; i < l->n; i++) {
		if (l->v[i] != s)
			continue;
		memmove(l->v + i, l->v + i + 1, sizeof(*l->v) * (size_t)(l->n - i - 1));
		l->n--;
		return;
	}
}

/* ---- create / destroy ---- */

struct pg_engine_config pg_engine_config_default(void)
{
	return (struct pg_engine_config){ .max_batch_seqs = 64, .prefix_cache = 1,
					  .step_factor = 2 };
}

static int check_config(struct pg_engine_config *c, const struct pg_forward *fw,
			char *err, size_t err_len)
{
	int max = pg_forward_max_batch(fw);

	if (c->max_batch_tokens <= 0)
		c->max_batch_tokens = max;
	if (c->max_batch_seqs <= 0)
		c->max_batch_seqs = 64;
	if (c->max_batch_tokens > max) {
		snprintf(err, err_len, "max_batch_tokens %d exceeds the forward pass's batch of %d tokens",
			 c->max_batch_tokens, max);
		return -EINVAL;
	}
	if (c->max_batch_seqs > c->max_batch_tokens)
		c->max_batch_seqs = c->max_batch_tokens;
	if (!(c->step_factor > 0))
		c->step_factor = 2;
	if (isnan(c->step_target_s)) {
		snprintf(err, err_len, "the step target is not a number");
		return -EINVAL;
	}
	return 0;
}

static int alloc_batch(struct pg_engine *e)
{
	size_t ns = (size_t)e->cfg.max_batch_seqs;

	e->n_slots = pg_forward_max_inflight(e->fw);
	if (e->n_slots > PG_ENGINE_MAX_INFLIGHT)
		e->n_slots = PG_ENGINE_MAX_INFLIGHT;
	for (int i = 0; i < e->n_slots; i++) {
		struct batch *b = &e->b[i];

		b->tokens = malloc(sizeof(int32_t) *
				   (size_t)e->cfg.max_batch_tokens);
		b->fw = malloc(sizeof(*b->fw) * ns);
		b->seq = malloc(sizeof(*b->seq) * ns);
		b->logits = malloc(sizeof(float) * ns * (size_t)e->n_vocab);
		if (!b->tokens || !b->fw || !b->seq || !b->logits)
			return -ENOMEM;
	}
	e->scratch = malloc(sizeof(float) * (size_t)e->n_vocab);
	e->con = pg_constrain_create(e->m->tok, e->n_vocab);
	return e->scratch && e->con ? 0 : -ENOMEM;
}

int pg_engine_create(const struct pg_model *m, struct pg_forward *fw,
		     const struct pg_engine_config *cfg,
		     struct pg_engine **out, char *err, size_t err_len)
{
	struct pg_engine *e = calloc(1, sizeof(*e));
	struct pg_kvc_params kp = { .salt = pg_model_identity(m) };
	int rc = -ENOMEM;

	*out = NULL;
	if (!e)
		goto out_nomem;
	e->m = m;
	e->fw = fw;
	e->cfg = *cfg;
	e->n_vocab = m->hp.n_vocab;
	kp.n_pages = pg_forward_n_pages(fw);
	e->n_pages = pg_forward_zone_pages(fw);	/* the most one sequence has */
	e->page_tokens = kp.page_tokens = pg_forward_page_tokens(fw);
	kp.n_zones = pg_forward_n_zones(fw);	/* one per replica */
	e->next_id = 1;
	if ((rc = check_config(&e->cfg, fw, err, err_len)))
		goto out_free;
	pg_step_cost_init(&e->cost, &m->hp);
	rc = pg_kvc_create(&kp, &e->kvc);
	if (rc == -EINVAL)
		snprintf(err, err_len, "the forward pass has no usable KV pages (%d pages of %d tokens)",
			 kp.n_pages, kp.page_tokens);
	if (rc)
		goto out_free;
	if ((rc = alloc_batch(e)))
		goto out_nomem;
	*out = e;
	return 0;
out_nomem:
	snprintf(err, err_len, "out of memory creating the engine");
out_free:
	pg_engine_destroy(e);
	return rc;
}

static void seq_release(struct seq *s)
{
	pg_sampler_free(s->sampler);
	pg_stop_free(s->stop);
	pg_grammar_state_free(s->gs);
	free(s->toks);
}

static void req_free(struct req *r)
{
	for (int i = 0; i < r->n; i++)
		seq_release(&r->seqs[i]);
	free(r->seqs);
	free(r->stop_ids);
	pg_constrain_put(r->grammar);
	free(r);
}

void pg_engine_destroy(struct pg_engine *e)
{
	if (!e)
		return;
	for (; e->n_inflight; e->n_inflight--)
		pg_forward_wait(e->fw);
	while (e->reqs) {
		struct req *r = e->reqs;

		e->reqs = r->next;
		req_free(r);
	}
	pg_kvc_destroy(e->kvc);
	free(e->running.v);
	free(e->waiting.v);
	free(e->clients);
	for (int i = 0; i < PG_ENGINE_MAX_INFLIGHT; i++) {
		free(e->b[i].tokens);
		free(e->b[i].fw);
		free(e->b[i].seq);
		free(e->b[i].logits);
	}
	free(e->scratch);
	pg_constrain_free(e->con);
	free(e);
}

/* ---- submission ---- */

static struct client *client_get(struct pg_engine *e, uint64_t id)
{
	struct client *c;

	for (int i = 0; i < e->n_clients; i++)
		if (e->clients[i].id == id)
			return &e->clients[i];
	c = realloc(e->clients, sizeof(*c) * (size_t)(e->n_clients + 1));
	if (!c)
		return NULL;
	e->clients = c;
	c += e->n_clients++;
	*c = (struct client){ .id = id };
	return c;
}

static int check_request(struct pg_engine *e, const struct pg_request *q)
{
	int64_t need;

	if (q->n_prompt < 1 || !q->prompt)
		return fail(e, PG_ENGINE_EINVAL, "the prompt is empty (at least one token is needed)");
	if (q->max_tokens < 0 || q->n < 0 || q->n_stop < 0 || q->n_stop_ids < 0)
		return fail(e, PG_ENGINE_EINVAL, "max_tokens, n and the stop counts must not be negative");
	for (int i = 0; i < q->n_prompt; i++)
		if (q->prompt[i] < 0 || q->prompt[i] >= e->n_vocab)
			return fail(e, PG_ENGINE_EINVAL, "prompt token %d (id %d) is out of range (the vocabulary has %d tokens)",
				    i, q->prompt[i], e->n_vocab);
	if (pg_sampling_check(&q->sampling, e->msg, sizeof(e->msg)))
		return PG_ENGINE_EINVAL;
	if (q->grammar && q->grammar_len > PG_GRAMMAR_MAX_TEXT)
		return fail(e, PG_ENGINE_EINVAL, "the grammar has %zu bytes: at most %u",
			    q->grammar_len, PG_GRAMMAR_MAX_TEXT);
	need = ((int64_t)q->n_prompt + q->max_tokens + e->page_tokens - 1) /
	       e->page_tokens;
	if (need > e->n_pages)
		return fail(e, PG_ENGINE_ETOOBIG, "the request needs %lld KV pages (%d prompt + %d max tokens, %d tokens a page) but the pool has %d",
			    (long long)need, q->n_prompt, q->max_tokens,
			    e->page_tokens, e->n_pages);
	return 0;
}

/* Build one sample: its own tokens, sampler (seeded seed + index) and matcher. */
static int seq_setup(struct pg_engine *e, struct req *r, const struct pg_request *q,
		     int index)
{
	struct seq *s = &r->seqs[index];
	struct pg_sampling sp = q->sampling;

	sp.seed += (uint64_t)index;
	s->req = r;
	s->index = index;
	s->state = index ? SEQ_FORK : SEQ_WAITING;
	s->toks = malloc(sizeof(int32_t) * ((size_t)q->n_prompt + (size_t)q->max_tokens));
	s->sampler = pg_sampler_create(&sp, e->n_vocab);
	s->stop = pg_stop_create(q->stop, q->n_stop);
	if (!s->toks || !s->sampler || !s->stop)
		return -ENOMEM;
	if (r->grammar && !(s->gs = pg_constrain_start(r->grammar)))
		return -ENOMEM;
	memcpy(s->toks, q->prompt, sizeof(int32_t) * (size_t)q->n_prompt);
	s->n_toks = q->n_prompt;
	for (int i = 0; i < q->n_prompt; i++)
		pg_sampler_accept(s->sampler, q->prompt[i]);
	s->fig.n_prompt = q->n_prompt;
	return 0;
}

/*
 * req_new - a request's record and its samples; NULL with *rc set
 * (-ENOMEM, or -EINVAL with e->msg saying what is wrong with its grammar).
 */
static struct req *req_new(struct pg_engine *e, const struct pg_request *q, int *rc)
{
	struct req *r = calloc(1, sizeof(*r));
	int n = q->n ? q->n : 1;
	char err[200];

	*rc = -ENOMEM;
	if (!r)
		return NULL;
	if (q->grammar) {
		*rc = pg_constrain_get(e->con, q->grammar, q->grammar_len, &r->grammar,
				       err, sizeof(err));
		if (*rc) {
			if (*rc == -EINVAL)
				fail(e, PG_ENGINE_EINVAL, "the grammar: %s", err);
			free(r);
			return NULL;
		}
		r->lazy = pg_constrain_lazy(&q->sampling);
		*rc = -ENOMEM;
	}
	r->n = n;
	r->seqs = calloc((size_t)n, sizeof(*r->seqs));
	r->stop_ids = malloc(sizeof(int32_t) * (size_t)(q->n_stop_ids + 1));
	if (!r->seqs || !r->stop_ids)
		goto out_free;
	for (int i = 0; i < n; i++)
		if (seq_setup(e, r, q, i))
			goto out_free;
	if (q->n_stop_ids)
		memcpy(r->stop_ids, q->stop_ids, sizeof(int32_t) * (size_t)q->n_stop_ids);
	r->n_stop_ids = q->n_stop_ids;
	r->n_live = n;
	r->max_tokens = q->max_tokens;
	r->ignore_eos = q->ignore_eos;
	r->n_logprobs = q->sampling.n_logprobs;
	r->priority = q->priority;
	r->client = q->client;
	return r;
out_free:
	if (r->seqs)
		for (int i = 0; i < n; i++)
			seq_release(&r->seqs[i]);
	free(r->seqs);
	free(r->stop_ids);
	pg_constrain_put(r->grammar);
	free(r);
	return NULL;
}

int pg_engine_submit(struct pg_engine *e, const struct pg_request *q,
		     uint64_t *id)
{
	struct req *r;
	int rc = check_request(e, q);

	if (rc)
		return rc;
	r = req_new(e, q, &rc);
	if (!r && rc == -EINVAL)
		return PG_ENGINE_EINVAL;
	if (!r || !client_get(e, q->client) || list_push(&e->waiting, &r->seqs[0])) {
		if (r)
			req_free(r);
		return fail(e, PG_ENGINE_ENOMEM, "out of memory queueing the request");
	}
	r->id = e->next_id++;
	r->t_submit = pg_now_s();
	if (q->arrived > 0 && q->arrived < r->t_submit)
		r->t_submit = q->arrived;
	r->next = e->reqs;
	e->reqs = r;
	e->st.prompt_tokens += (uint64_t)q->n_prompt;
	if (r->grammar)
		e->st.grammar_samples += (uint64_t)r->n;
	*id = r->id;
	return 0;
}

/* ---- events and the end of a sample ---- */

static void emit(struct pg_engine *e, const struct pg_engine_event *ev)
{
	if (e->cfg.on_event)
		e->cfg.on_event(e->cfg.ctx, ev);
}

/* The text a sample still holds back, into buf (cap bytes); its length. */
static size_t held_text(struct seq *s, char *buf, size_t cap)
{
	const char *out;
	size_t len = 0, out_len;
	int n = pg_detok_flush(&s->detok, buf, cap / 2);

	if (n > 0 && pg_stop_feed(s->stop, buf, (size_t)n, &out, &out_len) == 0) {
		memmove(buf, out, out_len);
		len = out_len;
	}
	pg_stop_flush(s->stop, &out, &out_len);
	if (out_len > cap - len)
		out_len = cap - len;
	memcpy(buf + len, out, out_len);
	return len + out_len;
}

static void count_request(struct pg_engine *e, struct req *r)
{
	if (r->cancelled)
		e->st.n_cancelled++;
	else if (r->failed)
		e->st.n_failed++;
	else
		e->st.n_done++;
}

/*
 * End sample s: release its pages (full ones stay cached), leave the
 * queues, send DONE.  The request is freed later, by sweep().
 */
static void finish(struct pg_engine *e, struct seq *s, enum pg_engine_finish f,
		   int stopped_by_string)
{
	struct req *r = s->req;
	struct pg_engine_event ev = { .type = PG_ENGINE_EV_DONE, .id = r->id,
				      .sample = s->index, .finish = f,
				      .fig = &s->fig };
	char buf[256];

	if (s->state == SEQ_RUNNING)
		list_remove(&e->running, s);
	else if (s->state == SEQ_WAITING)
		list_remove(&e->waiting, s);
	pg_kvc_seq_free(e->kvc, s->kv);
	s->kv = NULL;
	s->state = SEQ_DONE;
	if (f == PG_ENGINE_FINISH_ERROR)
		r->failed = 1;
	if (s->fig.n_gen > 1)
		s->fig.itl_s = (s->t_last - s->t_first) / (s->fig.n_gen - 1);
	/* stop, length and grammar: the text so far is the sample's, whole */
	if (!stopped_by_string && f != PG_ENGINE_FINISH_CANCELLED &&
	    f != PG_ENGINE_FINISH_ERROR) {
		ev.text = buf;
		ev.text_len = held_text(s, buf, sizeof(buf));
	}
	ev.last = --r->n_live == 0;
	if (ev.last)
		count_request(e, r);
	emit(e, &ev);
}

/*
 * Forget client id once no request of its is left: a client's record only
 * carries its fairness turn, and ids may be one per connection, so the
 * records must not outlive the clients' work.
 */
static void client_forget_if_idle(struct pg_engine *e, uint64_t id)
{
	for (const struct req *r = e->reqs; r; r = r->next)
		if (r->client == id)
			return;
	for (int i = 0; i < e->n_clients; i++)
		if (e->clients[i].id == id) {
			e->clients[i] = e->clients[--e->n_clients];
			return;
		}
}

/* Free the requests whose samples are all done. */
static void sweep(struct pg_engine *e)
{
	struct req **pp = &e->reqs;

	while (*pp) {
		struct req *r = *pp;
		uint64_t client = r->client;

		if (r->n_live) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		req_free(r);
		client_forget_if_idle(e, client);
	}
}

/* ---- sampling ---- */

static int is_stop_id(const struct req *r, int32_t id)
{
	for (int i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] == id)
			return 1;
	return 0;
}

/*
 * Pass token id through the UTF-8 stream and the stop matcher; send it
 * with its log-probabilities (lp, top: n_top of them) when asked for.
 */
static int emit_token(struct pg_engine *e, struct seq *s, int32_t id,
		      float lp, const struct pg_logprob *top, int n_top)
{
	struct pg_engine_event ev = { .type = PG_ENGINE_EV_TOKEN,
				      .id = s->req->id, .sample = s->index,
				      .token = id, .logprob = lp, .top = top,
				      .n_top = n_top };
	char buf[512];
	int n = pg_detok_push(e->m->tok, &s->detok, id, 0, buf, sizeof(buf));
	int stopped = 0;

	if (n > 0)
		stopped = pg_stop_feed(s->stop, buf, (size_t)n, &ev.text,
				       &ev.text_len);
	if (stopped < 0) {
		ev.text_len = 0;
		stopped = 0;
	}
	emit(e, &ev);
	return stopped;
}

static void record_token(struct pg_engine *e, struct seq *s, int32_t id)
{
	double t = pg_now_s();

	pg_sampler_accept(s->sampler, id);
	s->toks[s->n_toks++] = id;
	if (s->fig.n_gen++ == 0) {
		s->t_first = t;
		s->fig.ttft_s = t - s->req->t_submit;
	}
	s->t_last = t;
	e->st.generated_tokens++;
}

/* End s because its grammar allowed no token. */
static void finish_grammar(struct pg_engine *e, struct seq *s)
{
	e->st.grammar_failures++;
	finish(e, s, PG_ENGINE_FINISH_GRAMMAR, 0);
}

/*
 * draw_constrained - s's next token under its grammar into *id; 0, or -1
 * after ending s: with PG_ENGINE_FINISH_GRAMMAR when no token is allowed
 * (the lazy draw's refused token and the masked draw both end there, in
 * pg_constrain_draw's mask), with PG_ENGINE_FINISH_ERROR when memory ran
 * out.
 */
static int draw_constrained(struct pg_engine *e, struct seq *s, const float *row,
			    float *lp, struct pg_logprob *top, int32_t *id)
{
	switch (pg_constrain_draw(e->con, s->gs, s->sampler, s->req->lazy,
				  s->req->ignore_eos, row,
				  e->scratch, lp, top, id)) {
	case PG_CONSTRAIN_TOKEN:
		return 0;
	case PG_CONSTRAIN_STUCK:
		finish_grammar(e, s);
		return -1;
	case PG_CONSTRAIN_NOMEM:
		break;
	}
	finish(e, s, PG_ENGINE_FINISH_ERROR, 0);
	return -1;
}

/*
 * accept_constrained - advance s's grammar past the token drawn; 0, or -1
 * after ending s.  The draw gave an allowed token, so only memory can fail
 * here; any other refusal would be the grammar's, and ends s as one.
 */
static int accept_constrained(struct pg_engine *e, struct seq *s, int32_t id)
{
	int rc = pg_grammar_accept(s->gs, pg_constrain_vocab(e->con), id);

	if (!rc)
		return 0;
	if (rc == -ENOMEM)
		finish(e, s, PG_ENGINE_FINISH_ERROR, 0);
	else
		finish_grammar(e, s);
	return -1;
}

/* Draw s's next token from a logits row (not changed) and act on it. */
static void sample_one(struct pg_engine *e, struct seq *s, const float *row)
{
	struct pg_logprob top[PG_MAX_LOGPROBS];
	struct req *r = s->req;
	float lp = 0.0f;
	int32_t id;
	int n_top;

	if (s->fig.n_gen >= r->max_tokens) {
		finish(e, s, PG_ENGINE_FINISH_LENGTH, 0);
		return;
	}
	n_top = r->n_logprobs;
	if (s->gs) {
		if (draw_constrained(e, s, row, n_top ? &lp : NULL, n_top ? top : NULL, &id))
			return;
	} else {
		memcpy(e->scratch, row, sizeof(float) * (size_t)e->n_vocab);
		id = pg_sampler_sample(s->sampler, e->scratch, n_top ? &lp : NULL,
				       n_top ? top : NULL);
	}
	/* under a grammar an end-of-generation token comes only where the
	   grammar is complete, and never with ignore_eos */
	if ((!r->ignore_eos && pg_tokenizer_is_eog(e->m->tok, id)) ||
	    is_stop_id(r, id)) {
		finish(e, s, PG_ENGINE_FINISH_STOP, 0);
		return;
	}
	if (s->gs && accept_constrained(e, s, id))
		return;
	record_token(e, s, id);
	if (emit_token(e, s, id, lp, n_top ? top : NULL, n_top))
		finish(e, s, PG_ENGINE_FINISH_STOP, 1);
	else if (s->gs && pg_grammar_dead(s->gs))
		finish(e, s, PG_ENGINE_FINISH_STOP, 0);	/* nothing may follow */
	else if (s->fig.n_gen == r->max_tokens)
		finish(e, s, PG_ENGINE_FINISH_LENGTH, 0);
}

static void admitted(struct pg_engine *e, struct seq *s, int n_cached)
{
	s->admit_no = ++e->next_admit;
	if (s->admitted)
		return;
	s->admitted = 1;
	s->fig.queue_s = pg_now_s() - s->req->t_submit;
	s->fig.n_cached = n_cached;
}

/*
 * Sample 0 has just computed the prompt: the other samples take its pages
 * (shared, copied on their first write) and join the running queue.
 */
static void fork_samples(struct pg_engine *e, struct seq *s0)
{
	struct req *r = s0->req;

	r->forked = 1;
	for (int i = 1; i < r->n; i++) {
		struct seq *s = &r->seqs[i];

		if (s->state != SEQ_FORK)
			continue;
		s->kv = pg_kvc_seq_fork(e->kvc, s0->kv);
		if (!s->kv || list_push(&e->running, s)) {
			finish(e, s, PG_ENGINE_FINISH_ERROR, 0);
			continue;
		}
		s->state = SEQ_RUNNING;
		admitted(e, s, s0->fig.n_cached);
	}
}

/* s computed its last pending token; row holds its logits. */
static void sample_seq(struct pg_engine *e, struct seq *s, const float *row)
{
	struct req *r = s->req;
	int n = r->n;

	if (s->index || r->forked || n == 1) {
		sample_one(e, s, row);
		return;
	}
	fork_samples(e, s);
	for (int i = 0; i < n; i++)
		if (r->seqs[i].state == SEQ_RUNNING && r->seqs[i].fig.n_gen == 0)
			sample_one(e, &r->seqs[i], row);
}

/* ---- scheduling ---- */

static void preempt(struct pg_engine *e, struct seq *s)
{
	list_remove(&e->running, s);
	pg_kvc_seq_free(e->kvc, s->kv);
	s->kv = NULL;
	s->state = SEQ_WAITING;
	s->preempted = 1;
	s->fig.n_preempt++;
	e->st.preemptions++;
	if (list_push(&e->waiting, s))
		finish(e, s, PG_ENGINE_FINISH_ERROR, 0);
}

/* The most recently admitted running sequence not in the batch, except s. */
static struct seq *victim(struct pg_engine *e, const struct seq *s)
{
	for (int i = e->running.n - 1; i >= 0; i--) {
		struct seq *v = e->running.v[i];

		if (v != s && !v->chunk)
			return v;
	}
	return NULL;
}

/* Reserve pages for chunk more tokens of s and add them to the batch. */
static int batch_add(struct pg_engine *e, struct seq *s, int chunk)
{
	struct pg_kvc_copy cp[2];
	int len = pg_kvc_seq_len(s->kv), n_cp = 0;
	int rc = pg_kvc_seq_reserve(e->kvc, s->kv, len + chunk, cp, &n_cp);

	if (rc)
		return rc;
	for (int i = 0; i < n_cp; i++)
		pg_forward_copy_page(e->fw, cp[i].src, cp[i].dst);
	memcpy(e->cur->tokens + e->cur->n_tokens, s->toks + len,
	       sizeof(int32_t) * (size_t)chunk);
	e->cur->n_tokens += chunk;
	e->cur->seq[e->cur->n_seqs++] = s;
	s->chunk = chunk;
	return 0;
}

static int batch_room(const struct pg_engine *e)
{
	if (e->cur->n_seqs >= e->seq_cap)
		return 0;
	return e->cfg.max_batch_tokens - e->cur->n_tokens;
}

/*
 * Add chunk tokens of running s, preempting the newest sequences not in
 * the batch while pages are short.  -ENOSPC: s waits for this step.
 */
static int batch_add_running(struct pg_engine *e, struct seq *s, int chunk)
{
	for (;;) {
		int rc = batch_add(e, s, chunk);
		struct seq *v;

		if (rc != -ENOSPC)
			return rc;
		v = victim(e, s);
		if (!v)
			return rc;
		preempt(e, v);
	}
}

/* ---- steps bounded by cost ---- */

/*
 * Whether a running sequence decodes (in a batch in flight, or left out
 * of this one by the pipeline's share).
 */
static int decoding_elsewhere(const struct pg_engine *e)
{
	for (int i = 0; i < e->running.n; i++) {
		const struct seq *s = e->running.v[i];

		if (s->n_toks - pg_kvc_seq_len(s->kv) == 1)
			return 1;
	}
	return 0;
}

/*
 * Once the decodes are in the batch: the time its prompt chunks may add.
 * Unbounded when nothing decodes (a lone prompt goes as fast as alone).
 * Under a pipeline a batch may carry no decode while others are in
 * flight; it is then held to the last decode step's target.
 */
static void plan_budget(struct pg_engine *e)
{
	struct pg_step_shape dec = { 0 };
	const struct batch *b = e->cur;
	double target;

	e->bounded = 0;
	e->n_chunks = 0;
	if (e->cfg.step_target_s < 0 || (!b->n_seqs && !decoding_elsewhere(e)))
		return;
	for (int i = 0; i < b->n_seqs; i++)
		pg_step_shape_add(&dec, pg_kvc_seq_len(b->seq[i]->kv),
				  b->seq[i]->chunk);
	if (b->n_seqs)
		e->decode_step_s = pg_step_cost_predict(&e->cost, &dec);
	target = e->cfg.step_target_s > 0 ? e->cfg.step_target_s :
		 e->cfg.step_factor * e->decode_step_s;
	e->target_s = target;
	e->budget_s = target - pg_step_cost_predict(&e->cost, &dec);
	e->bounded = 1;
}

/*
 * The tokens of a prompt chunk after n_past to put in the batch (want
 * pending, room left): all that fits when unbounded; else what the budget
 * affords, cut to a multiple of PG_ENGINE_CHUNK_ALIGN when it affords
 * that many (the chunk's rows share the decodes' pass over the weights,
 * so fewer cost no extra pass).  When the budget affords nothing (an
 * explicit target below the decodes' own step), the batch's first chunk
 * still takes PG_ENGINE_MIN_CHUNK so that the prompt progresses; a later
 * one waits.
 */
static int chunk_size(const struct pg_engine *e, int n_past, int want,
		      int room)
{
	int n = want < room ? want : room, fit;

	if (!e->bounded || n <= 0)
		return n;
	fit = pg_step_cost_chunk(&e->cost, n_past, n, e->budget_s);
	if (fit >= n)
		return n;
	if (fit >= PG_ENGINE_CHUNK_ALIGN)
		fit -= fit % PG_ENGINE_CHUNK_ALIGN;
	if (!fit && !e->n_chunks)
		fit = PG_ENGINE_MIN_CHUNK;
	return fit < n ? fit : n;
}

/* A chunk of n tokens after n_past joined the batch: charge the budget. */
static void chunk_taken(struct pg_engine *e, int n_past, int n, int want)
{
	if (!e->bounded)
		return;
	e->budget_s -= pg_step_cost_chunk_s(&e->cost, n_past, n);
	e->n_chunks++;
	if (n < want)
		e->bounded_chunks++;
}

/* Whether the budget is spent: no chunk but a first one may join. */
static int budget_spent(const struct pg_engine *e)
{
	return e->bounded && e->n_chunks &&
	       pg_step_cost_chunk(&e->cost, 0, 1, e->budget_s) < 1;
}

/* Running sequences with tokens to compute: decodes (want 1) or prefills. */
static void plan_running(struct pg_engine *e, int decodes)
{
	for (int i = 0; i < e->running.n; i++) {
		struct seq *s = e->running.v[i];
		int len = pg_kvc_seq_len(s->kv), want = s->n_toks - len;
		int room = batch_room(e), chunk;

		if (room <= 0)
			return;
		if (s->chunk || (want == 1) != decodes)
			continue;
		chunk = decodes ? 1 : chunk_size(e, len, want, room);
		if (!chunk)
			continue;
		if (batch_add_running(e, s, chunk) == -ENOMEM)
			return;
		if (!decodes && s->chunk)
			chunk_taken(e, len, chunk, want);
		/* a preemption may have shifted the list: find s again */
		while (i >= 0 && (i >= e->running.n || e->running.v[i] != s))
			i--;
	}
}

static uint64_t client_turn(struct pg_engine *e, uint64_t id)
{
	struct client *c = client_get(e, id);

	return c ? c->last_turn : 0;
}

/* Whether waiting a goes before b: preempted first, then fairness. */
static int goes_before(struct pg_engine *e, const struct seq *a,
		       const struct seq *b)
{
	uint64_t ta, tb;

	if (a->preempted != b->preempted)
		return a->preempted;
	if (a->preempted)
		return a->admit_no < b->admit_no;
	ta = client_turn(e, a->req->client);
	tb = client_turn(e, b->req->client);
	if (ta != tb)
		return ta < tb;
	if (a->req->priority != b->req->priority)
		return a->req->priority > b->req->priority;
	return a->req->id < b->req->id;
}

static struct seq *pick_waiting(struct pg_engine *e)
{
	struct seq *best = NULL;

	for (int i = 0; i < e->waiting.n; i++)
		if (!best || goes_before(e, e->waiting.v[i], best))
			best = e->waiting.v[i];
	return best;
}

/*
 * Admit s when the pages for all its pending tokens can be had (after the
 * prefix cache supplied what it has); its first chunk joins the batch.
 * Returns 0, or -ENOSPC / -ENOMEM with s still waiting.
 */
static int admit(struct pg_engine *e, struct seq *s, int room)
{
	int cached = 0, want, chunk, rc;
	struct client *c;

	s->kv = pg_kvc_seq_new(e->kvc, s->req->client);
	if (!s->kv)
		return -ENOMEM;
	if (e->cfg.prefix_cache)
		cached = pg_kvc_seq_match(e->kvc, s->kv, s->toks, s->n_toks);
	rc = cached < 0 ? cached : -ENOSPC;
	if (cached < 0 || pg_kvc_pages_needed(e->kvc, s->kv, s->n_toks) >
			  pg_kvc_seq_n_available(e->kvc, s->kv))
		goto out_free;
	want = s->n_toks - cached;
	chunk = chunk_size(e, cached, want, room);
	rc = -ENOSPC;
	if (!chunk || (rc = list_push(&e->running, s)))
		goto out_free;
	if ((rc = batch_add(e, s, chunk)))
		goto out_unlist;
	chunk_taken(e, cached, chunk, want);
	list_remove(&e->waiting, s);
	s->state = SEQ_RUNNING;
	s->preempted = 0;
	e->st.cached_tokens += (uint64_t)cached;
	admitted(e, s, cached);
	if ((c = client_get(e, s->req->client)))
		c->last_turn = ++e->turn;
	return 0;
out_unlist:
	list_remove(&e->running, s);
out_free:
	pg_kvc_seq_free(e->kvc, s->kv);
	s->kv = NULL;
	return rc;
}

static void plan_admissions(struct pg_engine *e)
{
	int room;

	while ((room = batch_room(e)) > 0 && e->waiting.n && !budget_spent(e))
		if (admit(e, pick_waiting(e), room))
			return;
}

/* ---- the step ---- */

static int submit_batch(struct pg_engine *e, struct batch *b)
{
	b->shape = (struct pg_step_shape){ 0 };
	for (int i = 0; i < b->n_seqs; i++) {
		struct seq *s = b->seq[i];

		b->fw[i] = (struct pg_fw_seq){
			.pages = pg_kvc_seq_pages(s->kv),
			.n_past = pg_kvc_seq_len(s->kv),
			.n_tokens = s->chunk,
		};
		pg_step_shape_add(&b->shape, b->fw[i].n_past, s->chunk);
	}
	e->st.forward_tokens += (uint64_t)b->n_tokens;
	e->st.steps++;
	b->t_submit = pg_now_s();
	return pg_forward_submit(e->fw, b->tokens, b->n_tokens, b->fw,
				 b->n_seqs, b->logits);
}

/*
 * Batch b is back: what it cost goes to the model.  Under a pipeline a
 * batch's time counts from the later of its start and the previous
 * collection, the stages' pace rather than its latency.
 */
static void observe_batch(struct pg_engine *e, const struct batch *b)
{
	double t = pg_now_s(), from = b->t_submit > e->t_collect ?
				      b->t_submit : e->t_collect;
	double dt = t - from;

	e->t_collect = t;
	if (e->cfg.batch_seconds)
		dt = e->cfg.batch_seconds(e->cfg.ctx, b->fw, b->n_seqs);
	pg_step_cost_observe(&e->cost, &b->shape, dt);
}

static void after_batch(struct pg_engine *e, struct batch *b)
{
	for (int i = 0; i < b->n_seqs; i++) {
		struct seq *s = b->seq[i];
		int len = pg_kvc_seq_len(s->kv), chunk = s->chunk;

		s->chunk = 0;
		if (s->cancel) {
			finish(e, s, PG_ENGINE_FINISH_CANCELLED, 0);
			continue;
		}
		pg_kvc_seq_append(e->kvc, s->kv, s->toks + len, chunk);
		if (len + chunk == s->n_toks)
			sample_seq(e, s, b->logits + (size_t)i * (size_t)e->n_vocab);
	}
}

static void fail_batch(struct pg_engine *e, struct batch *b)
{
	for (int i = 0; i < b->n_seqs; i++) {
		struct seq *s = b->seq[i];

		s->chunk = 0;
		finish(e, s, s->cancel ? PG_ENGINE_FINISH_CANCELLED :
			     PG_ENGINE_FINISH_ERROR, 0);
	}
}

/*
 * Sequences one batch may carry: all of them with one batch in flight;
 * with a pipeline of n_slots stages, an equal share, so that the running
 * sequences form n_slots micro-batches that follow each other through the
 * stages.
 */
static int seq_cap(const struct pg_engine *e)
{
	int n = e->running.n + e->waiting.n, cap;

	if (e->n_slots <= 1)
		return e->cfg.max_batch_seqs;
	cap = (n + e->n_slots - 1) / e->n_slots;
	cap = cap < 1 ? 1 : cap;
	return cap < e->cfg.max_batch_seqs ? cap : e->cfg.max_batch_seqs;
}

int pg_engine_step(struct pg_engine *e)
{
	int n = 0, rc;

	if (e->n_inflight < e->n_slots) {
		e->cur = &e->b[(e->b_head + e->n_inflight) % e->n_slots];
		e->cur->n_tokens = e->cur->n_seqs = 0;
		e->seq_cap = seq_cap(e);
		plan_running(e, 1);
		plan_budget(e);
		plan_running(e, 0);
		plan_admissions(e);
		n = e->cur->n_seqs;
		if (n) {
			rc = submit_batch(e, e->cur);
			if (rc) {
				fail_batch(e, e->cur);
				sweep(e);
				return fail(e, PG_ENGINE_EFORWARD, "the forward pass refused the batch: %s",
					    strerror(-rc));
			}
			e->n_inflight++;
		}
	}
	/* collect the oldest batch when the pipeline is full or idle */
	if (e->n_inflight && (e->n_inflight == e->n_slots || !n)) {
		struct batch *b = &e->b[e->b_head];

		rc = pg_forward_wait(e->fw);
		e->b_head = (e->b_head + 1) % e->n_slots;
		e->n_inflight--;
		if (rc) {
			fail_batch(e, b);
			sweep(e);
			return fail(e, PG_ENGINE_EFORWARD, "the forward pass failed: %s; its requests end with an error",
				    strerror(-rc));
		}
		observe_batch(e, b);
		after_batch(e, b);
		sweep(e);
		if (!n)
			n = b->n_seqs;
	}
	return n;
}

/* ---- control and figures ---- */

int pg_engine_cancel(struct pg_engine *e, uint64_t id)
{
	struct req *r;

	for (r = e->reqs; r; r = r->next)
		if (r->id == id && r->n_live)
			break;
	if (!r)
		return fail(e, PG_ENGINE_ENOENT, "no request %llu in the engine",
			    (unsigned long long)id);
	r->cancelled = 1;
	for (int i = 0; i < r->n; i++) {
		struct seq *s = &r->seqs[i];

		if (s->state == SEQ_DONE)
			continue;
		if (s->chunk)		/* in flight: ends when its batch does */
			s->cancel = 1;
		else
			finish(e, s, PG_ENGINE_FINISH_CANCELLED, 0);
	}
	sweep(e);
	return 0;
}

int pg_engine_evict(struct pg_engine *e, const struct pg_kvc_evict *ev)
{
	int rc = pg_kvc_evict(e->kvc, ev);

	if (rc == -EINVAL)
		return fail(e, PG_ENGINE_EINVAL, "bad eviction request");
	if (rc < 0)
		return fail(e, PG_ENGINE_ENOMEM, "out of memory evicting");
	return rc;
}

void pg_engine_cost(const struct pg_engine *e, struct pg_engine_cost *out)
{
	double t[PG_STEPCOST_TERMS];

	pg_step_cost_coef(&e->cost, t);
	*out = (struct pg_engine_cost){
		.fixed_s = t[0], .token_s = t[1], .seq_s = t[2],
		.depth_s = t[3], .decode_step_s = e->decode_step_s,
		.target_s = e->target_s, .n_obs = e->cost.n_obs,
		.bounded_chunks = e->bounded_chunks,
	};
}

void pg_engine_stats(const struct pg_engine *e, struct pg_engine_stats *st)
{
	struct pg_constrain_stats cs;

	*st = e->st;
	pg_constrain_stats(e->con, &cs);
	st->grammar_compiles = cs.compiles;
	st->grammar_draws = cs.draws;
	st->grammar_masked = cs.masked;
	st->n_running = e->running.n;
	st->n_waiting = e->waiting.n;
	pg_kvc_get_stats(e->kvc, &st->kv);
}

int pg_engine_idle(const struct pg_engine *e)
{
	return !e->running.n && !e->waiting.n && !e->n_inflight;
}

const struct pg_kvc *pg_engine_kvc(const struct pg_engine *e)
{
	return e->kvc;
}

const char *pg_engine_last_error(const struct pg_engine *e)
{
	return e->msg;
}
