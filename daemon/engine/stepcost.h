/*
 * stepcost.h - what one step of the serving engine costs: a model of a
 * batch's wall time, fitted online from the batches the engine ran, and
 * the largest prompt chunk that fits a time budget.
 *
 * The model is linear in four terms of a batch's shape:
 *
 *     seconds = fixed + per_token * tokens + per_seq * sequences
 *             + per_depth * depth
 *
 * where depth is the attention work, sum over the batch's tokens of the
 * positions they attend to (a chunk of n tokens after n_past attends to
 * n * (n_past + (n + 1) / 2)).  The fixed term is what a step costs
 * whatever it carries (reading the weights once, launching kernels), the
 * per-sequence term the logits row and sampling of each sequence.  It is
 * a least-squares fit of relative errors over exponentially forgotten
 * observations, held by a weak prior drawn from the model's sizes where
 * the data leaves a term open.  Batches that only decode, small mixed
 * ones and large ones (over 128 tokens: whole prompt chunks) are
 * forgotten separately, so that a long run of one kind (a prompt spread
 * beside decodes) does not erase what the others taught (how the cost
 * grows with depth, seen on the large chunks).
 *
 * It knows nothing of requests or of the forward pass; the engine (one
 * thread) owns one.  Not thread-safe.
 */
#ifndef PAGODA_STEPCOST_H
#define PAGODA_STEPCOST_H

#include "daemon/engine/model.h"

#define PG_STEPCOST_TERMS 4
#define PG_STEPCOST_CLASSES 3

/* A batch's shape: what the model's terms count. */
struct pg_step_shape {
	double n_tokens;	/* tokens through the forward pass */
	double n_seqs;		/* sequences (a logits row each) */
	double depth;		/* attention work, token x position */
};

/* The model; the caller owns it (pg_step_cost_init fills it). */
struct pg_step_cost {
	/* per class (decode only, small, large): forgotten sums of
	   f f^T / s^2 and of f / s, f the shape's terms scaled to ~1 and s
	   the seconds observed */
	double ff[PG_STEPCOST_CLASSES][PG_STEPCOST_TERMS][PG_STEPCOST_TERMS];
	double fy[PG_STEPCOST_CLASSES][PG_STEPCOST_TERMS];
	double prior[PG_STEPCOST_TERMS];	/* seconds per scaled term */
	double theta[PG_STEPCOST_TERMS];	/* the fit, same units */
	long n_obs;				/* batches observed */
};

/* pg_step_shape_add - count a chunk of n tokens after n_past into sh. */
void pg_step_shape_add(struct pg_step_shape *sh, int n_past, int n);

/*
 * pg_step_cost_init - an empty model whose prior comes from hp's sizes
 * (multiply-adds per token, per logits row and per attended position, at
 * a guessed rate); the first batches observed soon outweigh it.
 */
void pg_step_cost_init(struct pg_step_cost *c, const struct pg_hparams *hp);

/*
 * pg_step_cost_observe - a batch of shape sh took seconds: refit.  Once
 * the model has seen a few batches, a time far above its prediction (the
 * host busy elsewhere) is taken as a bounded excess only.
 */
void pg_step_cost_observe(struct pg_step_cost *c,
			  const struct pg_step_shape *sh, double seconds);

/*
 * pg_step_cost_coef - the fit in seconds: coef[0] per batch, [1] per
 * token, [2] per sequence, [3] per unit of depth.
 */
void pg_step_cost_coef(const struct pg_step_cost *c,
		       double coef[PG_STEPCOST_TERMS]);

/* pg_step_cost_predict - the seconds a batch of shape sh should take. */
double pg_step_cost_predict(const struct pg_step_cost *c,
			    const struct pg_step_shape *sh);

/*
 * pg_step_cost_chunk_s - the seconds that adding a sequence's chunk of n
 * tokens after n_past to a batch should add to it (the fixed term aside).
 */
double pg_step_cost_chunk_s(const struct pg_step_cost *c, int n_past, int n);

/*
 * pg_step_cost_chunk - the most tokens (0 .. max) of a chunk after n_past
 * whose pg_step_cost_chunk_s is at most budget_s.
 */
int pg_step_cost_chunk(const struct pg_step_cost *c, int n_past, int max,
		       double budget_s);

#endif
