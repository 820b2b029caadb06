/*
 * block.c - the model math of one transformer block, read off the model's
 * struct pg_arch (model.h), through backend and communicator operations:
 *
 *   n = rmsnorm(x, attn_norm)
 *   q, k, v = Wq n + bq, Wk n + bk, Wv n + bv
 *   q, k = rmsnorm of every head (q_norm, k_norm)      where arch.qk_norm
 *   q, k = rope(q), rope(k), frequencies / rope_freqs  where arch.rope_factors
 *                            (base arch.rope_base_swa in windowed blocks)
 *   a = Wo attn(q, K, V)     with the scale arch.attn_scale (on q where
 *                            arch.scale_q), K and V of the
 *                            sequences' KV pages, k and v written first;
 *                            only the last arch.window positions in a
 *                            windowed block; scores soft-capped where
 *                            arch.attn_softcap
 *   x += rmsnorm(a, attn_post_norm), or x += a without post-norms
 *   n = rmsnorm(x, ffn_norm)
 *   f = Wdown (act(Wgate n) * (Wup n))                  act: arch.act (SiLU
 *                                                       or GELU)
 *   x += rmsnorm(f, ffn_post_norm), or x += f
 *
 * Devices, threads, weight slices and the parallel plan are forward.c's:
 * here a device's slices are just smaller matrices, and the exact
 * parallel sums of the row-split products (forward.c's top comment) are
 * row_split's.  No intrinsics here.
 */
#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/forward_impl.h"

/* x += out, RMS-normalised first when the sub-layer has a post-norm. */
static void residual(struct device *d, const float *post_norm, float *out,
		     int n)
{
	const struct pg_hparams *hp = &d->fw->m->hp;
	const struct pg_backend_ops *ops = d->be->ops;

	if (post_norm)
		ops->rmsnorm(d->be, out, post_norm, n, hp->n_embd, hp->rms_eps,
			     out);
	ops->add(d->be, d->s.x, out, (int64_t)n * hp->n_embd);
}

/*
 * x += w · in for a row-split w (which: 0 Wo, 1 Wdown), through the
 * sub-layer's post-norm when it has one: exact, as this rank's canonical
 * parts, gathered from every TP rank and summed in order; else one
 * product, all-reduced over TP.
 */
static int row_split(struct device *d, const struct pg_matrix *w,
		     const float *in, int n, int which, const float *post_norm)
{
	const struct pg_backend_ops *ops = d->be->ops;
	struct scratch *s = &d->s;
	size_t pf = (size_t)n * (size_t)d->fw->m->hp.n_embd, most;
	int rc, k = 0;

	if (!d->exact) {
		ops->matmul(d->be, w, in, n, NULL, s->xb2);
		if (d->tp && (rc = d->tp->ops->all_reduce_sum(d->tp, s->xb2, pf)))
			return rc;
		residual(d, post_norm, s->xb2, n);
		return 0;
	}
	if (!d->tp) {
		/* the parts summed in the kernels, as add_parts would */
		ops->matmul_parts(d->be, w, in, n, d->rank_parts[which][d->t],
				  d->part_cols[which], 1, s->xb2);
		residual(d, post_norm, s->xb2, n);
		return 0;
	}
	ops->matmul_parts(d->be, w, in, n, d->rank_parts[which][d->t],
			  d->part_cols[which], 0, s->wparts);
	most = (size_t)d->max_parts[which];
	rc = d->tp->ops->all_gather(d->tp, s->wparts, most * pf * sizeof(float),
				    s->wgath);
	if (rc)
		return rc;
	for (int t = 0; t < d->fw->plan.tp; t++)
		for (int i = 0; i < d->rank_parts[which][t]; i++)
			d->part_ptr[k++] = s->wgath +
				((size_t)t * most + (size_t)i) * pf;
	if (post_norm) {
		/* the sum matmul_parts gives one device, then the norm */
		ops->sum_parts(d->be, s->xb2, d->part_ptr, k, (int64_t)pf);
		residual(d, post_norm, s->xb2, n);
		return 0;
	}
	ops->add_parts(d->be, s->x, d->part_ptr, k, (int64_t)pf);
	return 0;
}

/*
 * Q and K of n tokens as attention wants them: each head RMS-normalised
 * when the architecture says so (qwen3), then rotated, with the model's
 * frequency factors when it has them (Llama 3.1+).
 */
static void rotate_qk(struct device *d, const struct job *j,
		      const struct pg_block_weights *w, float base)
{
	const struct pg_model *m = d->fw->m;
	const struct pg_hparams *hp = &m->hp;
	const struct pg_arch *a = &m->arch;
	const struct pg_backend_ops *ops = d->be->ops;
	struct pg_backend *be = d->be;
	struct scratch *s = &d->s;
	int n = j->n_tokens, hd = hp->head_dim;

	if (a->qk_norm) {
		ops->rmsnorm(be, s->q, w->q_norm, n * d->nq, hd, hp->rms_eps,
			     s->q);
		ops->rmsnorm(be, s->k, w->k_norm, n * d->nkv, hd, hp->rms_eps,
			     s->k);
	}
	if (a->rope_factors) {
		ops->rope_factors(be, s->q, n, d->nq, hd, hp->n_rot, j->pos,
				  base, a->rope_mode, d->rope_freqs);
		ops->rope_factors(be, s->k, n, d->nkv, hd, hp->n_rot, j->pos,
				  base, a->rope_mode, d->rope_freqs);
		return;
	}
	ops->rope(be, s->q, n, d->nq, hd, hp->n_rot, j->pos, base,
		  a->rope_mode);
	ops->rope(be, s->k, n, d->nkv, hd, hp->n_rot, j->pos, base,
		  a->rope_mode);
}

static int attention_layer(struct device *d, const struct job *j,
			   const struct pg_block_weights *w, int lb)
{
	const struct pg_hparams *hp = &d->fw->m->hp;
	const struct pg_arch *a = &d->fw->m->arch;
	int windowed = pg_block_windowed(a, d->first_block + lb);
	float scale = a->attn_scale;
	const struct pg_backend_ops *ops = d->be->ops;
	struct pg_backend *be = d->be;
	struct scratch *s = &d->s;
	int n = j->n_tokens, hd = hp->head_dim, rc;
	const struct pg_kv_layout *kv = pg_kv_store_layout(d->kv);
	struct pg_attn_heads heads = {
		.n_heads = d->nq, .head0 = d->h0,
		.group = hp->n_heads / hp->n_kv_heads, .kv_head0 = d->k0,
		.window = windowed ? a->window : 0, .softcap = a->attn_softcap,
	};
	size_t part = (size_t)n * (size_t)d->nq * (size_t)(hd + 1);

	ops->rmsnorm(be, s->x, w->attn_norm, n, hp->n_embd, hp->rms_eps, s->xb);
	ops->matmul(be, &w->wq, s->xb, n, w->bq, s->q);
	ops->matmul(be, &w->wk, s->xb, n, w->bk, s->k);
	ops->matmul(be, &w->wv, s->xb, n, w->bv, s->v);
	rotate_qk(d, j, w, windowed && a->rope_base_swa > 0.0f ?
		  a->rope_base_swa : hp->rope_base);
	if (a->scale_q) {
		ops->scale(be, s->q, scale, (int64_t)n * d->nq * hd);
		scale = 1.0f;
	}
	ops->kv_write(be, kv, lb, s->k, s->v, n, s->slots);
	if (!d->cp) {
		/* in lanes (or one) merged as CP ranks' parts are: CP's bits */
		struct pg_kv_layout lv = *kv;

		lv.lanes = d->lanes;
		ops->attention(be, &lv, lb, s->q, &heads, j->aseqs, j->n_seqs,
			       scale, s->att, NULL);
	} else {
		ops->attention(be, kv, lb, s->q, &heads, j->aseqs, j->n_seqs,
			       scale, s->att,
			       s->att + (size_t)n * d->nq * hd);
		rc = d->cp->ops->all_gather(d->cp, s->att, part * sizeof(float),
					    s->parts);
		if (rc)
			return rc;
		ops->attn_merge(be, s->parts, part, d->fw->plan.cp, n, d->nq,
				hd, s->att);
	}
	return row_split(d, &w->wo, s->att, n, 0, w->attn_post_norm);
}

static int ffn_layer(struct device *d, const struct job *j,
		     const struct pg_block_weights *w)
{
	const struct pg_hparams *hp = &d->fw->m->hp;
	const struct pg_backend_ops *ops = d->be->ops;
	struct pg_backend *be = d->be;
	struct scratch *s = &d->s;
	int n = j->n_tokens;

	ops->rmsnorm(be, s->x, w->ffn_norm, n, hp->n_embd, hp->rms_eps, s->xb);
	ops->matmul(be, &w->w_gate, s->xb, n, NULL, s->hb);
	ops->matmul(be, &w->w_up, s->xb, n, NULL, s->hb2);
	if (d->fw->m->arch.act == PG_ACT_GELU)
		ops->gelu_mul(be, s->hb, s->hb2, (int64_t)n * d->nff);
	else
		ops->silu_mul(be, s->hb, s->hb2, (int64_t)n * d->nff);
	return row_split(d, &w->w_down, s->hb, n, 1, w->ffn_post_norm);
}

int pg_block_run(struct device *d, const struct job *j, int lb)
{
	int rc = attention_layer(d, j, &d->w[lb], lb);

	return rc ? rc : ffn_layer(d, j, &d->w[lb]);
}
