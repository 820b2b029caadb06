/*
 * constrain.h - grammars in the engine: each grammar text compiled once and
 * cached (by its hash and text) while requests use it and a while after,
 * and the draw of a sample's next token under its grammar.
 *
 * The draw is lazy where that is exact: with greedy decoding, or sampling
 * with temperature and penalties only (no top-k, top-p, min-p) and no
 * log-probabilities asked for, the sampler draws from the whole
 * distribution and the grammar is asked about that one token; only when
 * it is refused are the refused tokens masked out (-inf) and the draw
 * made again.  Drawing from p and, when the token is refused, again from
 * p restricted to the allowed set A gives token t of A with probability
 * p(t) + (1 - p(A)) p(t) / p(A) = p(t) / p(A): exactly the constrained
 * distribution.  Truncation (top-k, top-p, min-p) depends on which tokens
 * are left, and log-probabilities report the distribution, so those mask
 * first, always.
 *
 * One thread (the engine's) uses a pg_constrain and what it gives.
 */
#ifndef PAGODA_CONSTRAIN_H
#define PAGODA_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/grammar.h"
#include "daemon/engine/sampler.h"

struct pg_tokenizer;
struct pg_constrain;
struct pg_cgrammar;

/* Compiled grammars kept unused, most recently used first, at most. */
#define PG_CONSTRAIN_KEEP 32

/* Figures, for the engine's statistics. */
struct pg_constrain_stats {
	uint64_t compiles;	/* grammar texts compiled */
	uint64_t cache_hits;	/* requests whose grammar was compiled already */
	uint64_t draws;		/* tokens drawn under a grammar */
	uint64_t masked;	/* of which needed the mask */
	uint64_t stuck;		/* samples ended: no token was allowed */
	size_t cached;		/* compiled grammars held now */
};

/*
 * pg_constrain_create - for a model's tokenizer and vocabulary size (the
 * logits' length).  The vocabulary is prepared for matching on the first
 * grammar.  NULL on ENOMEM.
 */
struct pg_constrain *pg_constrain_create(const struct pg_tokenizer *t,
					 int n_vocab);

/* pg_constrain_free - free, with every grammar; NULL is allowed. */
void pg_constrain_free(struct pg_constrain *c);

/*
 * pg_constrain_get - the compiled grammar of len bytes of GBNF text, with a
 * reference taken (pg_constrain_put gives it back): from the cache, else
 * compiled.  Returns 0, -EINVAL with the compiler's message in err, or
 * -ENOMEM.
 */
int pg_constrain_get(struct pg_constrain *c, const char *text, size_t len,
		     struct pg_cgrammar **out, char *err, size_t err_len);

/* pg_constrain_put - drop a reference; NULL is allowed. */
void pg_constrain_put(struct pg_cgrammar *g);

/* pg_constrain_start - a new sample's position in g; NULL on ENOMEM. */
struct pg_grammar_state *pg_constrain_start(struct pg_cgrammar *g);

/* pg_constrain_lazy - whether sampling p may draw lazily (above). */
int pg_constrain_lazy(const struct pg_sampling *p);

enum pg_constrain_draw {
	PG_CONSTRAIN_TOKEN = 0,	/* *id is allowed */
	PG_CONSTRAIN_STUCK = 1,	/* no token is allowed, not even the end */
	PG_CONSTRAIN_NOMEM = 2,
};

/*
 * pg_constrain_draw - draw the next token of the sample at gs with its
 * sampler from a row of logits (not changed; scratch holds n_vocab
 * floats), lazily when lazy (pg_constrain_lazy).  With no_eog (the
 * request's ignore_eos) end-of-generation tokens are never drawn, even
 * where the grammar is complete.  lp and top as pg_sampler_sample (NULL
 * when not asked for).  The token is not accepted: pg_grammar_accept()
 * does that once the engine keeps it.
 */
enum pg_constrain_draw pg_constrain_draw(struct pg_constrain *c,
					 struct pg_grammar_state *gs,
					 struct pg_sampler *smp, int lazy, int no_eog,
					 const float *row, float *scratch,
					 float *lp, struct pg_logprob *top,
					 int32_t *id);

/* pg_constrain_vocab - the prepared vocabulary (NULL before a grammar). */
const struct pg_grammar_vocab *pg_constrain_vocab(const struct pg_constrain *c);

/* pg_constrain_stats - c's figures into st. */
void pg_constrain_stats(const struct pg_constrain *c,
			struct pg_constrain_stats *st);

#endif
