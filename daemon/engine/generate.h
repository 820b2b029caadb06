/*
 * generate.h - one sequence from prompt to completion, synchronously:
 * chunked prefill, then decode with sampling, stop tokens and strings.
 *
 * This is what pagodad's one-shot mode and the benchmarks run.  The serving
 * engine (many sequences, continuous batching) drives pg_forward_batch()
 * itself and does not use this.
 */
#ifndef PAGODA_GENERATE_H
#define PAGODA_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/forward.h"
#include "daemon/engine/kvcache.h"
#include "daemon/engine/sampler.h"

struct pg_gen_params {
	struct pg_sampling sampling;
	int max_tokens;			/* tokens to generate at most */
	const char *const *stop;	/* stop strings */
	int n_stop;
	int ignore_eos;			/* keep going past end-of-generation tokens */
	/* a GBNF grammar the text follows (grammar_len bytes; NULL: none),
	   as the engine's requests (engine.h): end-of-generation only where
	   it is complete and not with ignore_eos */
	const char *grammar;
	size_t grammar_len;
};

enum pg_finish {
	PG_FINISH_LENGTH = 0,	/* max_tokens reached */
	PG_FINISH_STOP,		/* end-of-generation token or stop string */
	PG_FINISH_CANCELLED,	/* the emit callback asked to stop */
	PG_FINISH_GRAMMAR,	/* the grammar allowed no token (as
				   PG_ENGINE_FINISH_GRAMMAR) */
};

struct pg_gen_stats {
	int n_prompt;
	int n_cached;		/* prompt tokens found in the prefix cache */
	int n_gen;
	double prefill_s;	/* wall time of the prompt */
	double decode_s;	/* wall time of the generated tokens after the first */
	enum pg_finish finish;
};

/*
 * Called with each piece of generated text (valid UTF-8, stop strings held
 * back and cut).  Return nonzero to stop generating.
 */
typedef int (*pg_gen_emit_fn)(void *ctx, const char *text, size_t len);

/*
 * pg_run_tokens - run n ids of sequence s (of cache kvc, over fw's pages):
 * reserve its pages, make the copies copy-on-write asks for, run the ids in
 * chunks of the batch limit and record them in s.  logits gets the last
 * token's n_vocab floats, or n rows when logits_all (then n must fit one
 * batch).  Returns 0, -ENOSPC (no pages: the chunk was not run, s holds the
 * tokens before it), -E2BIG, -EINVAL, -ENOMEM.
 */
int pg_run_tokens(struct pg_forward *fw, struct pg_kvc *kvc,
		  struct pg_kvc_seq *s, const int32_t *ids, int n,
		  int logits_all, float *logits);

/*
 * pg_kvc_for_forward - a page cache over fw's KV pages (free with
 * pg_kvc_destroy), salted with the model's identity.  NULL on ENOMEM.
 */
struct pg_kvc *pg_kvc_for_forward(const struct pg_forward *fw,
				  const struct pg_model *m);

/*
 * pg_generate - run prompt (n_prompt >= 1 ids) and generate.  Generated ids
 * go to out_ids (max_tokens of room) when it is not NULL.  Uses a fresh
 * sequence of kvc, whose cached prefix is reused, and frees it before
 * returning (its full pages stay cached).  Returns 0 (a grammar that
 * allowed no token included: stats->finish says PG_FINISH_GRAMMAR), or
 * -errno with a message in err (-ENOSPC: the context does not fit in the
 * KV pages; -EINVAL: bad parameters or ids; -ENOMEM).
 */
int pg_generate(struct pg_forward *fw, struct pg_kvc *kvc,
		const struct pg_model *m,
		const int32_t *prompt, int n_prompt,
		const struct pg_gen_params *p, pg_gen_emit_fn emit, void *ctx,
		int32_t *out_ids, struct pg_gen_stats *stats, char *err,
		size_t err_len);

/* pg_finish_name - "length", "stop", "cancelled", "grammar". */
const char *pg_finish_name(enum pg_finish f);

#endif
