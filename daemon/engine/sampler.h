/*
 * sampler.h - choosing the next token from logits, per request.
 *
 * Greedy, temperature, top-k, top-p, min-p, repetition / presence /
 * frequency penalties, a seed that makes a request reproducible on its own
 * (one generator per request, never shared), and the top-n
 * log-probabilities.  Also stop-string matching over the generated text.
 */
#ifndef PAGODA_SAMPLER_H
#define PAGODA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* Sampling parameters; pg_sampling_default() gives greedy decoding. */
struct pg_sampling {
	float temperature;	/* <= 0: greedy (argmax) */
	int top_k;		/* <= 0: off */
	float top_p;		/* >= 1: off */
	float min_p;		/* <= 0: off */
	float repeat_penalty;	/* 1: off; llama.cpp's rule (divide positive logits) */
	int repeat_last_n;	/* tokens looked back for penalties; -1 all */
	float presence_penalty;	/* 0: off */
	float frequency_penalty;/* 0: off */
	uint64_t seed;
	int n_logprobs;		/* top-n log-probabilities to report, 0..20 */
};

#define PG_MAX_LOGPROBS 20

struct pg_logprob {
	int32_t id;
	float logprob;
};

/* pg_sampling_default - greedy, no penalties, seed 0, no log-probs. */
struct pg_sampling pg_sampling_default(void);

/*
 * pg_sampling_check - 0 when the parameters are usable, else -EINVAL with a
 * message naming the parameter and its allowed range in err.
 */
int pg_sampling_check(const struct pg_sampling *p, char *err, size_t err_len);

struct pg_sampler;

/* pg_sampler_create - a sampler for a vocabulary of n_vocab; NULL on ENOMEM. */
struct pg_sampler *pg_sampler_create(const struct pg_sampling *p,
				     int n_vocab);

/* pg_sampler_free - free; NULL is allowed. */
void pg_sampler_free(struct pg_sampler *s);

/*
 * pg_sampler_accept - record a token of the context (prompt or generated)
 * for the penalties.
 */
void pg_sampler_accept(struct pg_sampler *s, int32_t id);

/*
 * pg_sampler_sample - pick the next token from logits (n_vocab values; the
 * array is used as scratch and changed).  When the parameters ask for
 * log-probabilities, the chosen token's comes in *chosen_lp and the top
 * n_logprobs (of the distribution after penalties, before truncation and
 * temperature) in top[], best first; either may be NULL.
 */
int32_t pg_sampler_sample(struct pg_sampler *s, float *logits,
			  float *chosen_lp, struct pg_logprob *top);

/*
 * Stop strings: a matcher over generated text that says how much of it is
 * safe to emit (cannot be the start of a stop string) and whether a stop
 * string has appeared.
 */
struct pg_stop;

/* pg_stop_create - from n strings (copied); NULL on ENOMEM. n may be 0. */
struct pg_stop *pg_stop_create(const char *const *strs, int n);

/* pg_stop_free - free; NULL is allowed. */
void pg_stop_free(struct pg_stop *st);

/*
 * pg_stop_feed - append len bytes of generated text.  Returns 1 when a stop
 * string is now complete (the text to emit ends before it), else 0.  After
 * the call *emit_len bytes of the text fed so far (counted from the last
 * call's end) may be emitted; the rest is held back.  Returns -ENOMEM when
 * the text could not be taken (nothing changed; *emit_len is 0).
 */
int pg_stop_feed(struct pg_stop *st, const char *text, size_t len,
		 const char **emit, size_t *emit_len);

/* pg_stop_flush - at the end: the held-back text that may now be emitted. */
void pg_stop_flush(struct pg_stop *st, const char **emit, size_t *emit_len);

#endif
