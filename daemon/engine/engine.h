/*
 * engine.h - the serving engine: many requests at once over one forward
 * pass and one pool of KV pages, with continuous batching, chunked
 * prefill, the prefix cache, preemption under memory pressure and
 * fairness between clients.
 *
 * The daemon and the tests drive it; it knows nothing of sockets, shared
 * memory or text prompts (the caller tokenises).  It is single-threaded by
 * design: one engine thread owns an engine and calls every function here,
 * typically pg_engine_step() in a loop; nothing is locked.  Events (tokens,
 * completions) go to a callback given at creation, called from within
 * pg_engine_step() and pg_engine_cancel(); the callback must not call back
 * into the engine.
 *
 * Errors: the functions return 0 or a negative enum pg_engine_error and
 * leave a message on the handle (pg_engine_last_error).  Memory pressure is
 * never an error: a request whose pages cannot be had waits, and a running
 * one may be preempted and recomputed later, cached prefix included.
 */
#ifndef PAGODA_ENGINE_H
#define PAGODA_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/forward.h"
#include "daemon/engine/kvcache.h"
#include "daemon/engine/model.h"
#include "daemon/engine/sampler.h"

enum pg_engine_error {
	PG_ENGINE_OK = 0,
	PG_ENGINE_EINVAL = -1,	/* bad configuration or request */
	PG_ENGINE_ETOOBIG = -2,	/* prompt + max_tokens cannot fit in the KV
				   pool even alone */
	PG_ENGINE_ENOMEM = -3,
	PG_ENGINE_ENOENT = -4,	/* no such request (done or never was) */
	PG_ENGINE_EFORWARD = -5,/* the forward pass failed */
};

enum pg_engine_finish {
	PG_ENGINE_FINISH_STOP = 0,	/* end-of-generation token, stop id or
					   stop string */
	PG_ENGINE_FINISH_LENGTH,	/* max_tokens reached */
	PG_ENGINE_FINISH_CANCELLED,	/* pg_engine_cancel */
	PG_ENGINE_FINISH_ERROR,		/* the forward pass failed, or memory
					   ran out */
	PG_ENGINE_FINISH_GRAMMAR,	/* the grammar allowed no token: no
					   token of the vocabulary continues
					   the text (within the matcher's
					   limits); the text so far follows
					   the grammar */
};

/* pg_engine_finish_name - "stop", "length", "cancelled", "error",
   "grammar". */
const char *pg_engine_finish_name(enum pg_engine_finish f);

/* Figures of one sample of a request (times in seconds). */
struct pg_request_figures {
	double queue_s;		/* submission to first admission */
	double ttft_s;		/* submission to first token */
	double itl_s;		/* mean time between tokens after the first */
	int n_prompt;		/* prompt tokens */
	int n_cached;		/* prompt tokens the prefix cache supplied at
				   first admission */
	int n_gen;		/* tokens generated */
	int n_preempt;		/* times preempted */
};

enum pg_engine_event_type {
	PG_ENGINE_EV_TOKEN = 0,	/* a token was generated */
	PG_ENGINE_EV_DONE,	/* a sample finished */
};

/*
 * One event.  Pointers are valid only during the callback.  text is
 * valid UTF-8 (stop strings held back and cut); it may be empty for a
 * token whose bytes are held back.  A DONE event carries the text still
 * held back (if any), the finish reason and the figures; `last` is set on
 * the DONE of the request's last sample, after which its id is unknown.
 */
struct pg_engine_event {
	enum pg_engine_event_type type;
	uint64_t id;			/* request */
	int sample;			/* 0 .. n - 1 */
	int32_t token;			/* TOKEN: the id generated */
	const char *text;
	size_t text_len;
	/* TOKEN, when the request's sampling asks for n_logprobs > 0: the
	   token's log-probability and the top n_logprobs, best first (of the
	   distribution after penalties, before truncation and temperature) */
	float logprob;
	const struct pg_logprob *top;
	int n_top;
	enum pg_engine_finish finish;	/* DONE */
	int last;			/* DONE */
	const struct pg_request_figures *fig;	/* DONE */
};

typedef void (*pg_engine_event_fn)(void *ctx, const struct pg_engine_event *ev);

/*
 * For tests: the seconds a batch of n_seqs sequences (seqs: their
 * positions and token counts) is to be taken to have run, in place of the
 * time measured, so that the step cost model sees a known cost.
 */
typedef double (*pg_engine_batch_seconds_fn)(void *ctx,
					     const struct pg_fw_seq *seqs,
					     int n_seqs);

struct pg_engine_config {
	int max_batch_tokens;	/* tokens per step, <= the forward's max
				   batch; <= 0: the forward's */
	int max_batch_seqs;	/* sequences per step; <= 0: 64 */
	int prefix_cache;	/* reuse cached pages for new prompts */
	/*
	 * Steps bounded by cost: while sequences decode, a step's prompt
	 * chunks are cut so that the step's predicted time (stepcost.h)
	 * stays under a target, a long prompt being spread over many steps
	 * (the oldest prefill progresses every step: PG_ENGINE_MIN_CHUNK
	 * tokens at least when the target leaves no room); with nothing
	 * decoding, chunks are as large as max_batch_tokens allows.
	 */
	double step_target_s;	/* the target in seconds; 0: auto,
				   step_factor times the predicted time of
				   the step's decodes alone; < 0: no bound */
	double step_factor;	/* auto's multiple; <= 0: 2 */
	pg_engine_batch_seconds_fn batch_seconds;	/* tests; NULL: the
							   wall clock */
	pg_engine_event_fn on_event;	/* may be NULL */
	void *ctx;		/* on_event's and batch_seconds' */
};

/* A prompt chunk in a bounded step: this many when the target leaves no
   room; cut to a multiple of PG_ENGINE_CHUNK_ALIGN when it leaves more. */
#define PG_ENGINE_MIN_CHUNK 16
#define PG_ENGINE_CHUNK_ALIGN 16

/* pg_engine_config_default - the forward's batch, 64 sequences, cache on,
   step target auto (twice the decodes' step). */
struct pg_engine_config pg_engine_config_default(void);

struct pg_request {
	const int32_t *prompt;	/* token ids, copied */
	int n_prompt;		/* >= 1 */
	struct pg_sampling sampling;	/* sample i uses seed + i */
	int max_tokens;		/* >= 0 */
	const int32_t *stop_ids;/* extra tokens that end generation */
	int n_stop_ids;
	const char *const *stop;/* stop strings, copied */
	int n_stop;
	int ignore_eos;		/* do not stop at end-of-generation tokens */
	int priority;		/* higher first, within a client's turn */
	uint64_t client;	/* fairness and eviction by client */
	int n;			/* samples sharing the prompt; 0 means 1 */
	/* a grammar (pagoda-grammar(7)) the samples must follow: grammar_len
	   bytes of GBNF text, compiled at submission (or found compiled
	   already); NULL: unconstrained.  An end-of-generation token then
	   comes only where the grammar is complete (never with ignore_eos);
	   a sample whose grammar allows no token ends with
	   PG_ENGINE_FINISH_GRAMMAR, its text held back given as for
	   PG_ENGINE_FINISH_STOP */
	const char *grammar;
	size_t grammar_len;
	double arrived;		/* CLOCK_MONOTONIC seconds when the request
				   arrived, when that was before this
				   submission (e.g. it was tokenized first):
				   queue_s and ttft_s count from there; 0 or
				   a time ahead of now: now */
};

struct pg_engine;

/*
 * pg_engine_create - an engine running fw (which must outlive it, as must
 * m, the model fw runs).  The engine owns a page accounting over fw's KV
 * pages.  Returns 0, or -errno (-EINVAL, -ENOMEM) with a message in err.
 */
int pg_engine_create(const struct pg_model *m, struct pg_forward *fw,
		     const struct pg_engine_config *cfg,
		     struct pg_engine **out, char *err, size_t err_len);

/*
 * pg_engine_destroy - free the engine and every request still in it (no
 * events are sent).  NULL is allowed.
 */
void pg_engine_destroy(struct pg_engine *e);

/*
 * pg_engine_submit - queue a request; its id goes to *id.  Nothing is
 * computed until pg_engine_step.  Returns 0, PG_ENGINE_EINVAL (empty
 * prompt, token id out of range, bad sampling or counts, a grammar that does not compile),
 * PG_ENGINE_ETOOBIG (one sample's prompt + max_tokens needs more pages
 * than the pool has), PG_ENGINE_ENOMEM; the message says which.
 */
int pg_engine_submit(struct pg_engine *e, const struct pg_request *req,
		     uint64_t *id);

/*
 * pg_engine_step - one scheduler step: running decodes first, then
 * running chunked prefills, then admission of waiting requests, all under
 * max_batch_tokens and max_batch_seqs (and, while something decodes, the
 * step target: see struct pg_engine_config), in one forward call; then
 * sampling and events.  With a pipeline of pp stages (pg_forward_max_inflight), a
 * step starts a batch of about 1/pp of the sequences and collects the
 * oldest batch in flight once pp are in flight (or when nothing new could
 * start), so that the stages work on different micro-batches at once; a
 * sequence is in one batch at a time, and cancelling one in flight takes
 * effect when its batch ends.  Returns the number of sequences the step
 * started or collected (0: idle), or PG_ENGINE_EFORWARD when the forward
 * pass failed (the requests of that batch finish with
 * PG_ENGINE_FINISH_ERROR; the engine stays usable).
 */
int pg_engine_step(struct pg_engine *e);

/*
 * pg_engine_cancel - end request id at any point: every sample gets a
 * DONE event with PG_ENGINE_FINISH_CANCELLED and its pages are released
 * (full ones stay cached).  Returns 0 or PG_ENGINE_ENOENT.
 */
int pg_engine_cancel(struct pg_engine *e, uint64_t id);

/*
 * pg_engine_evict - drop cached pages (see pg_kvc_evict).  Returns the
 * number of pages evicted, or PG_ENGINE_EINVAL / PG_ENGINE_ENOMEM.
 */
int pg_engine_evict(struct pg_engine *e, const struct pg_kvc_evict *ev);

struct pg_engine_stats {
	int n_running;		/* sequences holding pages */
	int n_waiting;		/* sequences queued (new or preempted) */
	uint64_t n_done;	/* requests finished (stop, length or
				   grammar) */
	uint64_t n_failed;	/* requests finished with an error */
	uint64_t n_cancelled;
	uint64_t prompt_tokens;	/* of submitted requests */
	uint64_t cached_tokens;	/* prompt tokens the prefix cache supplied
				   (re-admissions after preemption included) */
	uint64_t generated_tokens;
	uint64_t forward_tokens;/* tokens put through the forward pass */
	uint64_t steps;		/* steps that ran a batch */
	uint64_t preemptions;
	uint64_t grammar_compiles;	/* grammar texts compiled (not found
					   compiled already) */
	uint64_t grammar_draws;	/* tokens drawn under a grammar */
	uint64_t grammar_masked;/* of which needed the allowed-token mask */
	uint64_t grammar_samples;	/* samples submitted under a grammar */
	uint64_t grammar_failures;	/* samples ended with
					   PG_ENGINE_FINISH_GRAMMAR */
	struct pg_kvc_stats kv;	/* pages free/used/cached, prefix counters */
};

/*
 * The step cost model's fit (stepcost.h) and the bound it gives: what a
 * step costs in seconds, per step, per token, per sequence and per token
 * of attention depth (position attended to), as last fitted.
 */
struct pg_engine_cost {
	double fixed_s, token_s, seq_s, depth_s;
	double decode_step_s;	/* the last planned step's decodes alone,
				   predicted; 0: none yet */
	double target_s;	/* the bound that step was planned under;
				   0: none yet */
	long n_obs;		/* batches the model has seen */
	uint64_t bounded_chunks;/* prompt chunks cut short by the bound */
};

/* pg_engine_cost - the cost model now. */
void pg_engine_cost(const struct pg_engine *e, struct pg_engine_cost *out);

/* pg_engine_stats - the figures now. */
void pg_engine_stats(const struct pg_engine *e, struct pg_engine_stats *st);

/* pg_engine_idle - 1 when no request is running or waiting. */
int pg_engine_idle(const struct pg_engine *e);

/* pg_engine_kvc - the page accounting, for tests and statistics. */
const struct pg_kvc *pg_engine_kvc(const struct pg_engine *e);

/* pg_engine_last_error - the message of the last error. */
const char *pg_engine_last_error(const struct pg_engine *e);

#endif
