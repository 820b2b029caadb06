/*
 * forward.c - the forward pass: embedding, the block stack stage by stage,
 * final norm and output head, all through backend and communicator
 * operations, on one device or on the devices of a parallel plan.
 *
 * The math of a block is block.c's (pg_block_run, read off the model's
 * struct pg_arch); where a device's weights live is weights.c's, the
 * plan's communicator groups comms.c's, the course of a batch through the
 * device threads jobs.c's; this file makes and ends the forward pass:
 * its devices (backend, KV store, weights, scratch) and their threads.  K and V go into the sequences' KV pages
 * before attention reads them back through the page tables, which the
 * caller owns (kvcache.h): this file never decides which page a token goes
 * to.  No intrinsics here.
 *
 * With a plan (plan.h), every device runs the same code on its own thread
 * with its own backend, KV store and weight slices:
 *  - pipeline stage s runs blocks first_block[s] .. ; the residual stream
 *    x (n_tokens × n_embd floats) is received from stage s - 1 and sent to
 *    stage s + 1, device (t, c) to device (t, c);
 *  - TP rank t holds query heads [h0, h1), the KV heads they read, FFN
 *    columns [f0, f1) (Megatron: Q/K/V, gate, up by output rows; Wo and
 *    Wdown by input columns, then an all-reduce), and a slice of the
 *    vocabulary for the output head (then an all-gather);
 *  - CP rank c holds its share of every page's token slots; attention over
 *    it returns the softmax's log-sum-exp, the ranks all-gather their
 *    partial outputs and merge them exactly.  Matrix products are repeated
 *    on every CP rank (CP buys KV memory and attention time, not FLOPs),
 *    except the output head, which CP ranks split by vocabulary when there
 *    is no TP to split it.
 * Up to pp batches are in flight, so that stages overlap (micro-batches).
 *
 * Replicas (data parallel): a plan of R replicas of one device each has
 * R devices that share nothing but (CPU devices on one memory) their
 * weights, which replica 0 places and the others read.  The KV page ids
 * are cut into R zones as kvcache.h cuts them, zone r's pages stored by
 * replica r (numbered from its zone's first page); a batch is split by
 * the zone of each sequence's pages, every replica runs its share on its
 * own thread at the same time, and each puts its logits rows where the
 * batch's order wants them (jobs.c).  A sequence's computation is one
 * device's, so its bits are one device's whatever the other sequences.
 *
 * Exact parallel sums.  Where the backend offers them (exact_parallel:
 * the CPU backend), TP and CP plans give the very bits one device gives,
 * so an operator who changes the plan changes no answer:
 *  - a row-split product (Wo, Wdown) is always computed as canonical
 *    parts of its input columns (pg_plan_tp_parts: the heads, or the
 *    FFN's quantisation blocks, cut PG_PLAN_EXACT_SPLITS ways), each part
 *    a product of its own, then x += the parts summed in order
 *    (add_parts).  A TP rank computes the parts inside its columns, the
 *    ranks all-gather them, and every rank sums all of them in the same
 *    order.  When tp divides PG_PLAN_EXACT_SPLITS (1, 2, 3, 4, 6, 12),
 *    the ranks' column ranges are unions of whole parts and the sum is
 *    one device's bit for bit; otherwise the ranks' bounds are bounds of
 *    parts too and the sums differ in rounding only.  The price: a TP
 *    rank sends its parts (about PG_PLAN_EXACT_SPLITS / tp vectors a
 *    token) instead of one vector, and each part pays a horizontal sum;
 *  - attention without CP is computed in two lanes, the first and the
 *    second half of every page's slots, each with its own softmax, merged
 *    as attn_merge merges CP ranks' parts (pg_kv_layout.lanes): what two
 *    CP ranks compute and merge, since a CP rank's store holds one such
 *    half of every page.  So CP 2 is exact; wider CP merges in another
 *    order (within rounding).
 *
 * A device whose backend has memory of its own (a GPU: ops->host_memory
 * is 0) gets its weight slices, norms, biases and token embedding
 * uploaded once into that memory, its KV pages and activations allocated
 * there, and its logits downloaded; on such a device one step's ops are
 * bracketed by step_begin/step_end so that the backend can replay them
 * as a graph.  The host index arrays (positions, slots, page tables) stay
 * in host memory, as backend.h asks.
 */
#include <errno.h>
#include <math.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/comm.h"
#include "kernels/registry.h"
#include "common/clock.h"
#include "daemon/engine/forward_impl.h"
#include "daemon/engine/kv.h"

struct pg_forward_params pg_forward_params_default(void)
{
	return (struct pg_forward_params){
		.n_threads = 2,
		.isa = PG_ISA_TOP,
		.max_batch_tokens = 512,
		.n_pages = 0,
		.page_tokens = 16,
		.kv_type = PG_F16,
		.kv_mem = { .numa_node = -1 },
	};
}

/* The ranks that share the output head by vocabulary: TP's, else CP's. */
int fw_head_size(const struct pg_plan *pl)
{
	return pl->tp > 1 ? pl->tp : pl->cp;
}

int32_t fw_zone_first(int n_pages, int n_rep, int z)
{
	return (int32_t)((int64_t)z * n_pages / n_rep);
}

/* Set up the exact parallel sums of device d (see struct device). */
static void setup_exact(struct pg_forward *fw, struct device *d)
{
	const struct pg_hparams *hp = &fw->m->hp;
	const struct pg_block_weights *b = &fw->m->blocks[0];
	int tp = fw->plan.tp, hd = hp->head_dim, pt = fw->p.page_tokens;
	int qo = pg_dtype_block_size(b->wo.type);
	int qd = pg_dtype_block_size(b->w_down.type);
	int64_t cols[PG_PLAN_EXACT_SPLITS + 2];

	d->exact = d->be->ops->exact_parallel &&
		   fw->p.numerics != PG_NUMERICS_LLAMA_CPP;
	d->lanes = d->exact && fw->plan.cp == 1 && pt % PG_FW_LANES == 0 ?
		   PG_FW_LANES : 1;
	if (!d->exact)
		return;
	d->max_parts[0] = d->max_parts[1] = 0;
	for (int t = 0; t < tp; t++)
		for (int w = 0; w < 2; w++) {
			int n = pg_plan_tp_rank_parts(hp->n_heads, hp->n_kv_heads,
						      hd, hp->n_ff, w, w ? qd : qo,
						      tp, t, t == d->t ?
						      d->part_cols[w] : cols);

			d->rank_parts[w][t] = n;
			d->max_parts[w] = n > d->max_parts[w] ? n : d->max_parts[w];
		}
}

static int alloc_scratch(struct pg_forward *fw, struct device *d)
{
	const struct pg_hparams *hp = &fw->m->hp;
	size_t B = (size_t)fw->p.max_batch_tokens, hd = (size_t)hp->head_dim;
	size_t q_dim = (size_t)d->nq * hd, kv_dim = (size_t)d->nkv * hd;
	size_t att = B * (q_dim + (size_t)d->nq);
	int cp = fw->plan.cp, tp = fw->plan.tp;
	size_t floats, bytes, mine = 0, all = 0, be = B * (size_t)hp->n_embd;
	struct scratch *s = &d->s;
	char *a;

	setup_exact(fw, d);
	if (tp > 1) {		/* the parts to gather; 0 unless exact */
		mine = d->max_parts[0] > d->max_parts[1] ? d->max_parts[0] :
		       d->max_parts[1];
		all = (size_t)tp * mine;
	}
	floats = B * (3 * (size_t)hp->n_embd + q_dim + 2 * kv_dim +
		      2 * (size_t)d->nff) + att +
		 (cp > 1 ? (size_t)cp * att : 0) + (mine + all) * be;
	bytes = floats * sizeof(float) + 256 * 16;

	s->slots = malloc(B * sizeof(*s->slots));
	if (!s->slots)
		return -ENOMEM;
	if (d->devmem)
		d->arena = d->be->ops->alloc(d->be, bytes);
	else
		d->arena = aligned_alloc(64, (bytes + 63) / 64 * 64);
	if (!d->arena)
		return -ENOMEM;
	a = d->arena;
#define TAKE(ptr, n) do { (ptr) = (void *)a; a += ((n) * sizeof(*(ptr)) + 255) / 256 * 256; } while (0)
	TAKE(s->x, B * hp->n_embd);
	TAKE(s->xb, B * hp->n_embd);
	TAKE(s->xb2, B * hp->n_embd);
	TAKE(s->q, B * q_dim);
	TAKE(s->k, B * kv_dim);
	TAKE(s->v, B * kv_dim);
	TAKE(s->att, att);
	if (cp > 1)
		TAKE(s->parts, (size_t)cp * att);
	if (mine)
		TAKE(s->wparts, mine * be);
	if (all)
		TAKE(s->wgath, all * be);
	TAKE(s->hb, B * (size_t)d->nff);
	TAKE(s->hb2, B * (size_t)d->nff);
#undef TAKE
	return 0;
}

static int alloc_job_arrays(struct pg_forward *fw, struct job *j)
{
	size_t B = (size_t)fw->p.max_batch_tokens;

	j->tokens = malloc(B * sizeof(*j->tokens));
	j->pos = malloc(B * sizeof(*j->pos));
	j->out_rows = malloc(B * sizeof(*j->out_rows));
	j->seqs = malloc(B * sizeof(*j->seqs));
	j->aseqs = malloc(B * sizeof(*j->aseqs));
	if (!j->tokens || !j->pos || !j->out_rows || !j->seqs || !j->aseqs)
		return -ENOMEM;
	return 0;
}

/* A batch's arrays and, with replicas, its parts' (see struct job). */
static int alloc_job(struct pg_forward *fw, struct job *j)
{
	size_t B = (size_t)fw->p.max_batch_tokens;
	int rc = alloc_job_arrays(fw, j);

	if (rc || fw->n_rep == 1)
		return rc;
	j->seq_zone = malloc(B * sizeof(*j->seq_zone));
	j->part = calloc((size_t)fw->n_rep, sizeof(*j->part));
	if (!j->seq_zone || !j->part)
		return -ENOMEM;
	for (int r = 0; r < fw->n_rep; r++) {
		struct job *pj = &j->part[r];

		if ((rc = alloc_job_arrays(fw, pj)))
			return rc;
		pj->dst_row = malloc(B * sizeof(*pj->dst_row));
		if (!pj->dst_row)
			return -ENOMEM;
	}
	return 0;
}

static void free_job_arrays(struct job *j)
{
	free(j->tokens);
	free(j->pos);
	free(j->out_rows);
	free(j->seqs);
	free(j->aseqs);
	free(j->pages);
	free(j->dst_row);
	free(j->own);
}

static void free_job(struct job *j, int n_rep)
{
	free_job_arrays(j);
	for (int r = 0; j->part && r < n_rep; r++)
		free_job_arrays(&j->part[r]);
	free(j->part);
	free(j->seq_zone);
}

/*
 * How many pages the parameters ask for: n_pages, else kv_bytes, else
 * kv_fraction of the memory available, else room for 4 sequences of the
 * training context (at most 8192 tokens each; for each replica).  0 when
 * that is no page.
 * page_bytes is a page of the whole model: with a plan the bytes are the
 * budget of all devices together.
 */
/*
 * The memory the KV cache may take a fraction of: the host's available
 * memory, or on GPUs what their free memory leaves after the weights.
 */
static uint64_t mem_for_kv(const struct pg_model *m,
			   const struct pg_forward_params *p)
{
	uint64_t free_bytes = 0;

	if (!p->plan || p->plan->dev[0].kind != PG_DEV_CUDA)
		return pg_mem_available();
	for (int i = 0; i < p->plan->n_devices; i++)
		free_bytes += p->plan->dev[i].mem_bytes;
	return free_bytes > m->weight_bytes ? free_bytes - m->weight_bytes : 0;
}

static int pages_wanted(const struct pg_model *m,
			const struct pg_forward_params *p, size_t page_bytes)
{
	int ctx = m->hp.n_ctx_train < 8192 ? m->hp.n_ctx_train : 8192;
	size_t bytes;

	if (p->n_pages)
		return p->n_pages;
	if (p->kv_bytes)
		bytes = p->kv_bytes;
	else if (p->kv_fraction > 0)
		bytes = (size_t)((double)mem_for_kv(m, p) * p->kv_fraction);
	else	/* replicas: as many for each */
		return 4 * ((ctx + p->page_tokens - 1) / p->page_tokens) *
		       (p->plan ? pg_plan_n_replicas(p->plan) : 1);
	bytes /= page_bytes;
	return bytes > INT32_MAX ? INT32_MAX : (int)bytes;
}

/* Say what failed in making the KV store, and what to change. */
static void kv_error(char *err, size_t err_len, int rc, int n_pages,
		     size_t page_bytes, const struct pg_kv_mem *mem)
{
	double mib = (double)n_pages * (double)page_bytes / (1 << 20);

	if (rc == -EINVAL && mem->numa_node >= 0)
		snprintf(err, err_len, "cannot bind the KV cache to NUMA node %d: no such node (or no NUMA support)",
			 mem->numa_node);
	else if (mem->lock && (rc == -EPERM || rc == -ENOMEM || rc == -EAGAIN))
		snprintf(err, err_len, "cannot lock the KV cache (%.1f MiB) in memory: %s; raise the memlock limit (ulimit -l, LimitMEMLOCK=) or do not lock it",
			 mib, strerror(-rc));
	else
		snprintf(err, err_len, "cannot allocate the KV cache (%d pages of %zu bytes, %.1f MiB): %s; make it smaller",
			 n_pages, page_bytes, mib, strerror(-rc));
}

/* Check what the plan asks of this model and these parameters. */
static int plan_ok(const struct pg_forward *fw, char *err, size_t err_len)
{
	const struct pg_plan *pl = &fw->plan;
	const struct pg_hparams *hp = &fw->m->hp;
	int qb = 1;

	if (pl->pp < 1 || pl->tp < 1 || pl->cp < 1 || pl->replicas < 0 ||
	    pg_plan_n_replicas(pl) * pl->pp * pl->tp * pl->cp != pl->n_devices ||
	    pl->n_devices > PG_PLAN_MAX_DEVICES || pl->pp > hp->n_blocks) {
		snprintf(err, err_len, "the parallel plan is inconsistent (%d replicas of pp %d × tp %d × cp %d for %d devices, %d blocks)",
			 pg_plan_n_replicas(pl), pl->pp, pl->tp, pl->cp,
			 pl->n_devices, hp->n_blocks);
		return -EINVAL;
	}
	if (pg_plan_n_replicas(pl) > 1 && pl->pp * pl->tp * pl->cp > 1) {
		snprintf(err, err_len, "replicas of a model split over several devices (pp %d × tp %d × cp %d) are not built yet; replicate one device each (pp = tp = cp = 1)",
			 pl->pp, pl->tp, pl->cp);
		return -ENOTSUP;
	}
	if (pg_plan_n_replicas(pl) > fw->p.n_pages) {
		snprintf(err, err_len, "%d replicas but only %d KV pages: each replica needs pages of its own; give the KV cache more memory",
			 pg_plan_n_replicas(pl), fw->p.n_pages);
		return -EINVAL;
	}
	if (pl->first_block[0] != 0 || pl->first_block[pl->pp] != hp->n_blocks) {
		snprintf(err, err_len, "the parallel plan's stages do not cover blocks 0 .. %d",
			 hp->n_blocks - 1);
		return -EINVAL;
	}
	for (int s = 0; s < pl->pp; s++)
		if (pl->first_block[s + 1] <= pl->first_block[s]) {
			snprintf(err, err_len, "pipeline stage %d has no block", s);
			return -EINVAL;
		}
	for (int i = 0; i < pl->n_devices && !pg_device_groups_built(); i++)
		if (pl->dev[i].kind != PG_DEV_CPU &&
		    pl->pp * pl->tp * pl->cp > 1) {
			snprintf(err, err_len, "device %s: a plan of several CUDA devices needs NCCL, which this pagodad was built without; install NCCL and rebuild, or run on one CUDA device",
				 pl->dev[i].name);
			return -ENOTSUP;
		}
	if (pl->cp > 1 && fw->p.page_tokens % pl->cp) {
		snprintf(err, err_len, "context parallelism %d must divide the KV page size (%d tokens)",
			 pl->cp, fw->p.page_tokens);
		return -EINVAL;
	}
	if (pl->tp > 1) {
		qb = pg_dtype_block_size(fw->m->blocks[0].wo.type);
		for (int t = 0; t < pl->tp; t++) {
			int h0, h1, k0, k1;

			pg_plan_tp_heads(hp->n_heads, hp->n_kv_heads, pl->tp, t,
					 &h0, &h1, &k0, &k1);
			if (h1 <= h0 || ((int64_t)h0 * hp->head_dim) % qb) {
				snprintf(err, err_len, "tensor parallelism %d cannot split %d heads of %d values along whole %d-value quantisation blocks; use fewer ranks",
					 pl->tp, hp->n_heads, hp->head_dim, qb);
				return -EINVAL;
			}
		}
		if (hp->n_ff / pg_dtype_block_size(fw->m->blocks[0].w_down.type) <
		    pl->tp) {
			snprintf(err, err_len, "tensor parallelism %d leaves a rank no feed-forward columns (%d); use fewer ranks",
				 pl->tp, hp->n_ff);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * The rest of setting up a device whose backend d->be has memory of its
 * own: weights, KV pages and activations there.
 */
static int setup_devmem(struct pg_forward *fw, struct device *d, char *err,
			size_t err_len)
{
	const struct pg_hparams *hp = &fw->m->hp;
	const struct pg_plan *pl = &fw->plan;
	const char *name = d->info ? d->info->name : "cpu:0";
	size_t page_bytes;
	int rc;

	d->devmem = 1;
	d->graphs = d->be->ops->step_begin && d->be->ops->step_end &&
		    pl->tp == 1 && pl->cp == 1;
	rc = fw_upload_weights(d, fw_head_size(pl) > 1, err, err_len);
	if (rc)
		return rc;
	rc = pg_kv_store_create_on(d->be, d->n_pages,
				   fw->p.page_tokens / pl->cp, d->n_blocks,
				   d->nkv, hp->head_dim, fw->p.kv_type, &d->kv);
	if (rc) {
		page_bytes = pg_kv_page_bytes_for(fw->p.page_tokens / pl->cp,
						  d->n_blocks, d->nkv,
						  hp->head_dim, fw->p.kv_type);
		snprintf(err, err_len, "device %s: cannot allocate its KV cache (%d pages of %zu bytes, %.2f GiB) after its weights: %s; give the KV cache less memory (--kv-size or --ctx-size) or spread the model over more devices",
			 name, d->n_pages, page_bytes,
			 (double)page_bytes * d->n_pages / (1 << 30),
			 strerror(-rc));
		return rc;
	}
	pg_kv_store_set_cp(d->kv, pl->cp, d->c);
	rc = alloc_scratch(fw, d);
	if (rc)
		snprintf(err, err_len, "device %s: cannot allocate the activations of a %d-token batch: %s; lower max_batch_tokens",
			 name, fw->p.max_batch_tokens, strerror(-rc));
	return rc;
}

/* A CUDA device: its backend, then as any device with memory of its own. */
static int setup_gpu(struct pg_forward *fw, struct device *d, char *err,
		     size_t err_len)
{
	const struct pg_backend_spec spec = {
		.kind = PG_BACKEND_CUDA, .index = d->info->index,
	};
	char why[256];
	int rc = pg_backend_open(&spec, &d->be, why, sizeof(why));

	if (rc) {
		snprintf(err, err_len, "device %s: %s", d->info->name, why);
		return rc;
	}
	return setup_devmem(fw, d, err, err_len);
}

/*
 * Whether device d's backend has the optional ops the model's
 * architecture needs (struct pg_arch): 0, or -ENOTSUP saying which.
 */
static int arch_ops_ok(const struct device *d, char *err, size_t err_len)
{
	const struct pg_arch *a = &d->fw->m->arch;
	const struct pg_backend_ops *o = d->be->ops;
	const char *missing = NULL;

	if (a->rope_factors && !o->rope_factors)
		missing = "RoPE with frequency factors (rope_freqs.weight, Llama 3.1 and later)";
	else if (a->act == PG_ACT_GELU && !o->gelu_mul)
		missing = "the GELU feed-forward gate (GeGLU)";
	else if ((a->emb_scale > 0.0f || a->scale_q) && !o->scale)
		missing = "scaled token embeddings and queries";
	else if (a->final_softcap > 0.0f && !o->softcap)
		missing = "soft-capped logits";
	else if (a->attn_softcap > 0.0f && !o->attn_softcap)
		missing = "soft-capped attention scores";
	else if (a->window > 0 && !o->attn_window)
		missing = "sliding-window attention";
	else if (a->post_norms && o->exact_parallel && !o->sum_parts)
		missing = "exact sums before post-norms (sum_parts)";
	if (missing) {
		snprintf(err, err_len, "device %s: the %s backend has no %s, which this %s model needs: run it on CPU devices",
			 d->info ? d->info->name : "0", o->name, missing,
			 pg_arch_name(a->id));
		return -ENOTSUP;
	}
	return 0;
}

/*
 * A replica's CPU device on the memory of replica 0's counterpart reads
 * that device's weights (set up before it: same slices, same backend
 * kind and kernels, so the same packing); 1 when it does.
 */
static int share_weights(struct pg_forward *fw, struct device *d)
{
	const struct device *o = &fw->dev[d->index % fw->group];

	if (d->replica == 0 || !o->info || o->devmem ||
	    o->info->kind != PG_DEV_CPU || o->info->numa_node != d->info->numa_node)
		return 0;
	memcpy(d->w, o->w, sizeof(*d->w) * (size_t)d->n_blocks);
	d->out_w = o->out_w;
	return 1;
}

/* A CPU device's weights: shared, or on its node, repacked (weights.c). */
static int place_weights(struct pg_forward *fw, struct device *d, char *err,
			 size_t err_len)
{
	int rc;

	if (share_weights(fw, d))
		return 0;
	if (d->info && d->info->numa_node >= 0 &&
	    (rc = fw_localize_weights(d, d->info->numa_node))) {
		snprintf(err, err_len, "device %s: cannot place its weights on NUMA node %d: %s",
			 d->info->name, d->info->numa_node,
			 rc == -EINVAL ? "no such node" : strerror(-rc));
		return rc;
	}
	return fw_pack_weights(d, d->info ? d->info->numa_node : -1, err, err_len);
}

static int setup_device(struct pg_forward *fw, struct device *d,
			size_t full_page_bytes, char *err, size_t err_len)
{
	const struct pg_model *m = fw->m;
	const struct pg_hparams *hp = &m->hp;
	const struct pg_plan *pl = &fw->plan;
	struct pg_kv_mem mem = fw->p.kv_mem;
	struct pg_backend_spec spec;
	int n_threads = fw->p.n_threads, h1, k1, f1, rc;

	d->fw = fw;
	d->first_block = pl->first_block[d->stage];
	d->n_blocks = pl->first_block[d->stage + 1] - d->first_block;
	pg_plan_tp_heads(hp->n_heads, hp->n_kv_heads, pl->tp, d->t, &d->h0, &h1,
			 &d->k0, &k1);
	pg_plan_tp_ffn(hp->n_ff, pg_dtype_block_size(m->blocks[0].w_down.type),
		       pl->tp, d->t, &d->f0, &f1);
	d->nq = h1 - d->h0;
	d->nkv = k1 - d->k0;
	d->nff = f1 - d->f0;
	/* the output head is split over the TP ranks, else over the CP ranks */
	d->vpad = (hp->n_vocab + fw_head_size(pl) - 1) / fw_head_size(pl);
	d->v0 = (pl->tp > 1 ? d->t : d->c) * d->vpad;
	d->nv = hp->n_vocab - d->v0 < d->vpad ? hp->n_vocab - d->v0 : d->vpad;
	d->out_w = fw_rows_of(&m->output, d->v0, d->nv);
	d->tok_embd = m->tok_embd;
	d->output_norm = m->output_norm;
	d->rope_freqs = m->rope_freqs;
	d->w = calloc((size_t)d->n_blocks, sizeof(*d->w));
	if (!d->w)
		return -ENOMEM;
	for (int b = 0; b < d->n_blocks; b++)
		fw_slice_block(hp, d, &m->blocks[d->first_block + b], &d->w[b]);

	if (d->info && d->info->kind == PG_DEV_CUDA) {
		rc = setup_gpu(fw, d, err, err_len);
		return rc ? rc : arch_ops_ok(d, err, err_len);
	}
	if (d->info && d->info->n_threads > 0)
		n_threads = d->info->n_threads;
	spec = (struct pg_backend_spec){
		.kind = PG_BACKEND_CPU, .n_threads = n_threads,
		.isa = fw->p.isa,
		.llama_numerics = fw->p.numerics == PG_NUMERICS_LLAMA_CPP,
		.cpus = d->info ? d->info->cpus : NULL,
		.n_cpus = d->info ? d->info->n_cpus : 0,
	};
	if ((rc = pg_backend_open(&spec, &d->be, err, err_len)))
		return rc;
	if (fw->p.device_path)
		return setup_devmem(fw, d, err, err_len);
	if ((rc = place_weights(fw, d, err, err_len)))
		return rc;
	if (d->info && d->info->numa_node >= 0)
		mem.numa_node = d->info->numa_node;
	rc = pg_kv_store_create(d->n_pages, fw->p.page_tokens / pl->cp,
				d->n_blocks, d->nkv, hp->head_dim,
				fw->p.kv_type, &mem, &d->kv);
	if (rc) {
		kv_error(err, err_len, rc, d->n_pages,
			 full_page_bytes / (size_t)fw->group, &mem);
		return rc;
	}
	pg_kv_store_set_cp(d->kv, pl->cp, d->c);
	rc = alloc_scratch(fw, d);
	if (rc)
		snprintf(err, err_len, "cannot allocate the activations of a %d-token batch: %s",
			 fw->p.max_batch_tokens, strerror(-rc));
	return rc;
}

/*
 * Wait until the device threads have created their NCCL handles (GPUs),
 * or have all given up: the creations are non-blocking and polled, and
 * stop when any rank fails (it sets fw->nccl_cancel) or when the deadline
 * passes, so every thread reports here in bounded time.  The failure
 * reported is the first cause, not the -ECANCELED of the ranks that gave
 * up because of it.
 */
static int wait_setup(struct pg_forward *fw, char *err, size_t err_len)
{
	int rc;

	pthread_mutex_lock(&fw->lock);
	while (fw->setup_pending > 0)
		pthread_cond_wait(&fw->cond, &fw->lock);
	rc = fw->setup_rc;
	if (rc)
		snprintf(err, err_len, "%s", fw->setup_err);
	pthread_mutex_unlock(&fw->lock);
	return rc;
}

/* A device's setup failed with rc (under fw->lock): keep the cause. */
void fw_setup_failed(struct pg_forward *fw, int rc, const char *msg)
{
	if (!rc || (fw->setup_rc && (fw->setup_rc != -ECANCELED ||
				     rc == -ECANCELED)))
		return;
	fw->setup_rc = rc;
	snprintf(fw->setup_err, sizeof(fw->setup_err), "%s", msg);
}

/*
 * Whether llama.cpp numerics can give llama.cpp's bits here: one CPU
 * device with an F16 KV cache, a CPU with AVX2 (the build they copy), and
 * Q4_1 and Q8_0 weights, the kernels llama.cpp's AVX2 build runs for them
 * (for others it takes kernels of its own: Q4_0 repacked 8 rows at a time,
 * F16 weights against F16 activations).  0, or -errno with the reason.
 */
static int llama_numerics_ok(const struct pg_model *m,
			     const struct pg_forward_params *p, char *err,
			     size_t err_len)
{
	static const char *const names[] = { "attn_q", "attn_k", "attn_v",
		"attn_output", "ffn_gate", "ffn_up", "ffn_down" };
	char what[64];

	if (p->plan || p->device_path || p->kv_type != PG_F16) {
		snprintf(err, err_len, "llama.cpp numerics run on one CPU device with an F16 KV cache only: drop the parallel plan or --kv-type");
		return -EINVAL;
	}
	for (int b = 0; b < m->hp.n_blocks; b++) {
		const struct pg_block_weights *w = &m->blocks[b];
		const struct pg_matrix *mx[] = { &w->wq, &w->wk, &w->wv, &w->wo,
						 &w->w_gate, &w->w_up, &w->w_down };

		for (int i = 0; i < 7; i++) {
			if (mx[i]->type == PG_Q4_1 || mx[i]->type == PG_Q8_0)
				continue;
			snprintf(what, sizeof(what), "block %d's %s is %s", b,
				 names[i], pg_dtype_name(mx[i]->type));
			goto refuse;
		}
	}
	if (m->output.type == PG_Q4_1 || m->output.type == PG_Q8_0)
		return 0;
	snprintf(what, sizeof(what), "the output head is %s",
		 pg_dtype_name(m->output.type));
refuse:
	snprintf(err, err_len, "llama.cpp numerics reproduce Q4_1 and Q8_0 weights only (llama.cpp runs kernels of its own for the others, e.g. Q4_0 repacked); %s: use --numerics pagoda",
		 what);
	return -ENOTSUP;
}

int pg_forward_create(const struct pg_model *m,
		      const struct pg_forward_params *p,
		      struct pg_forward **out, char *err, size_t err_len)
{
	const struct pg_hparams *hp = &m->hp;
	struct pg_forward *fw;
	size_t page_bytes;
	int rc;

	if (p->max_batch_tokens < 1 || p->page_tokens < 1 || p->n_pages < 0 ||
	    !(p->kv_fraction >= 0 && p->kv_fraction <= 1)) {
		snprintf(err, err_len, "forward: max_batch_tokens and page_tokens must be >= 1, n_pages >= 0, kv_fraction in 0..1");
		return -EINVAL;
	}
	if (p->numerics == PG_NUMERICS_LLAMA_CPP &&
	    (rc = llama_numerics_ok(m, p, err, err_len)))
		return rc;
	page_bytes = pg_kv_page_bytes_for(p->page_tokens, hp->n_blocks,
					  hp->n_kv_heads, hp->head_dim,
					  p->kv_type);
	fw = calloc(1, sizeof(*fw));
	if (!fw)
		return -ENOMEM;
	fw->m = m;
	fw->p = *p;
	fw->p.plan = NULL;
	if (p->numerics == PG_NUMERICS_LLAMA_CPP)
		fw->p.isa = PG_ISA_AVX2;	/* the build llama.cpp's bits are of */
	pthread_mutex_init(&fw->lock, NULL);
	pthread_cond_init(&fw->cond, NULL);
	fw->p.n_pages = pages_wanted(m, p, page_bytes);
	if (fw->p.n_pages < 1) {
		snprintf(err, err_len, "the KV cache size leaves no page of %zu bytes (%d tokens); give it more memory",
			 page_bytes, p->page_tokens);
		free(fw);
		return -EINVAL;
	}
	if (p->plan) {
		fw->plan = *p->plan;
	} else {
		fw->plan = (struct pg_plan){ .pp = 1, .tp = 1, .cp = 1,
					     .n_devices = 1 };
		fw->plan.first_block[1] = hp->n_blocks;
	}
	rc = plan_ok(fw, err, err_len);
	if (rc)
		goto out_free;
	fw->n_dev = fw->plan.n_devices;
	fw->n_rep = pg_plan_n_replicas(&fw->plan);
	fw->group = fw->n_dev / fw->n_rep;
	fw->plan.replicas = fw->n_rep;
	fw->threaded = fw->n_dev > 1;
	/* NCCL groups join the devices of a split model; replicas need none */
	fw->gpus = fw->plan.dev[0].kind == PG_DEV_CUDA && p->plan &&
		   fw->group > 1;
	fw->n_slots = fw->threaded ? fw->plan.pp : 1;
	if (fw->n_slots > PG_FW_MAX_INFLIGHT)
		fw->n_slots = PG_FW_MAX_INFLIGHT;
	fw->dev = calloc((size_t)fw->n_dev, sizeof(*fw->dev));
	if (!fw->dev) {
		rc = -ENOMEM;
		goto out_free;
	}
	for (int i = 0; i < fw->n_dev; i++)
		pthread_mutex_init(&fw->dev[i].be_lock, NULL);
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];

		d->index = i;
		d->replica = i / fw->group;
		d->c = i % fw->group % fw->plan.cp;
		d->t = i % fw->group / fw->plan.cp % fw->plan.tp;
		d->stage = i % fw->group / (fw->plan.cp * fw->plan.tp);
		d->page0 = fw_zone_first(fw->p.n_pages, fw->n_rep, d->replica);
		d->n_pages = fw_zone_first(fw->p.n_pages, fw->n_rep,
					   d->replica + 1) - d->page0;
		d->info = p->plan ? &fw->plan.dev[i] : NULL;
		rc = setup_device(fw, d, page_bytes, err, err_len);
		if (rc)
			goto out_free;
	}
	for (int i = 0; i < fw->n_slots; i++)
		if ((rc = alloc_job(fw, &fw->jobs[i])))
			goto out_nomem;
	if (fw->threaded && fw->group > 1) {
		rc = fw_setup_comms(fw, err, err_len);
		if (rc)
			goto out_free;
	}
	if (fw->threaded) {
		fw->setup_pending = fw->gpus ? fw->n_dev : 0;
		if (fw->gpus) {
			fw->nccl_timeout_s = p->nccl_timeout_s > 0 ?
				p->nccl_timeout_s : PG_FW_NCCL_TIMEOUT_S;
			fw->nccl_deadline_ns = (int64_t)pg_now_ns() +
				(int64_t)fw->nccl_timeout_s * 1000000000;
		}
		for (int i = 0; i < fw->n_dev; i++) {
			rc = -pthread_create(&fw->dev[i].thread, NULL,
					     fw_device_main, &fw->dev[i]);
			if (rc) {
				/* the started ones must not wait for it */
				atomic_store(&fw->nccl_cancel, 1);
				snprintf(err, err_len, "cannot start the thread of device %s: %s",
					 fw->dev[i].info ? fw->dev[i].info->name : "0",
					 strerror(-rc));
				goto out_free;
			}
			fw->dev[i].started = 1;
		}
		if ((rc = wait_setup(fw, err, err_len)))
			goto out_free;
	}
	fw->stats_ns = pg_now_ns();
	*out = fw;
	return 0;
out_nomem:
	snprintf(err, err_len, "cannot allocate the batches' bookkeeping: %s",
		 strerror(-rc));
out_free:
	pg_forward_destroy(fw);
	return rc;
}

void pg_forward_destroy(struct pg_forward *fw)
{
	if (!fw)
		return;
	while (fw->n_inflight > 0)
		pg_forward_wait(fw);
	pthread_mutex_lock(&fw->lock);
	fw->stop = 1;
	pthread_cond_broadcast(&fw->cond);
	pthread_mutex_unlock(&fw->lock);
	for (int i = 0; fw->dev && i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];

		if (d->started)
			pthread_join(d->thread, NULL);
		pg_kv_store_destroy(d->kv);
		if (d->devmem) {
			d->be->ops->free(d->be, d->arena);
			d->be->ops->free(d->be, d->wmem);
			d->be->ops->free(d->be, d->s.lg);
			d->be->ops->free(d->be, d->s.lg_all);
			d->arena = d->s.lg = d->s.lg_all = NULL;
		}
		/* communicators first: an NCCL one needs its device's context */
		if (d->world)
			d->world->ops->destroy(d->world);
		if (d->tp)
			d->tp->ops->destroy(d->tp);
		if (d->cp)
			d->cp->ops->destroy(d->cp);
		if (d->be)
			d->be->ops->destroy(d->be);
		free(d->w);
		if (d->local)
			numa_free(d->local, d->local_bytes);
		if (d->packed && d->packed_numa)
			numa_free(d->packed, d->packed_bytes);
		else if (d->packed)
			munmap(d->packed, d->packed_bytes);
		free(d->arena);
		free(d->s.lg);
		free(d->s.lg_all);
		free(d->s.lg_host);
		free(d->s.slots);
		pthread_mutex_destroy(&d->be_lock);
	}
	for (int i = 0; fw->g_tp && i < fw->n_g_tp; i++)
		pg_host_group_destroy(fw->g_tp[i]);
	for (int i = 0; fw->g_cp && i < fw->n_g_cp; i++)
		pg_host_group_destroy(fw->g_cp[i]);
	pg_host_group_destroy(fw->g_world);
	free(fw->g_tp);
	free(fw->g_cp);
	free(fw->nccl_ids);
	for (int i = 0; i < PG_FW_MAX_INFLIGHT; i++)
		free_job(&fw->jobs[i], fw->n_rep);
	free(fw->dev);
	pthread_mutex_destroy(&fw->lock);
	pthread_cond_destroy(&fw->cond);
	free(fw);
}

int pg_forward_n_pages(const struct pg_forward *fw)
{
	return fw->p.n_pages;
}

int pg_forward_page_tokens(const struct pg_forward *fw)
{
	return fw->p.page_tokens;
}

/*
 * Called on the engine's thread while earlier batches may still run on the
 * device threads (pipeline stages).  Neither page is one they use: dst is
 * newly taken, and src, shared, is written by no one (a writer copies it
 * first).  So host memory is copied at once; a device with memory of its
 * own waits for the job it runs, since its backend serves one thread.
 */
void pg_forward_copy_page(struct pg_forward *fw, int32_t src, int32_t dst)
{
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];
		int rc;

		/* replicas: the device of the zone, pages as it numbers them */
		if (dst < d->page0 || dst >= d->page0 + d->n_pages)
			continue;
		if (d->devmem)
			pthread_mutex_lock(&d->be_lock);
		rc = src < d->page0 || src >= d->page0 + d->n_pages ? -EINVAL :
		     pg_kv_store_copy(d->kv, src - d->page0, dst - d->page0,
				      d->err, sizeof(d->err));
		/* a device that failed fails the next batch, which says so */
		if (rc && !d->sticky_rc)
			d->sticky_rc = rc;
		if (d->devmem)
			pthread_mutex_unlock(&d->be_lock);
	}
}

int pg_forward_max_batch(const struct pg_forward *fw)
{
	return fw->p.max_batch_tokens;
}

int pg_forward_n_zones(const struct pg_forward *fw)
{
	return fw->n_rep;
}

int pg_forward_zone_pages(const struct pg_forward *fw)
{
	int least = fw->p.n_pages;

	for (int r = 0; r < fw->n_rep; r++) {
		int n = fw_zone_first(fw->p.n_pages, fw->n_rep, r + 1) -
			fw_zone_first(fw->p.n_pages, fw->n_rep, r);

		least = n < least ? n : least;
	}
	return least;
}

/*
 * A CPU device counts its backend's threads; a GPU counts the one host
 * thread that drives it (its kernels run on the GPU, not on CPU threads).
 */
int pg_forward_threads(const struct pg_forward *fw)
{
	int n = 0;

	for (int i = 0; i < fw->n_dev; i++)
		n += fw->dev[i].be->ops->n_threads ?
		     fw->dev[i].be->ops->n_threads(fw->dev[i].be) : 1;
	return n;
}

const char *pg_forward_isa_name(const struct pg_forward *fw)
{
	const struct pg_backend *be = fw->dev[0].be;

	return be->ops->kernels ? be->ops->kernels(be) : be->ops->name;
}

enum pg_numerics pg_forward_numerics(const struct pg_forward *fw)
{
	return fw->p.numerics;
}

size_t pg_forward_packed_bytes(const struct pg_forward *fw)
{
	size_t b = 0;

	for (int i = 0; i < fw->n_dev; i++)
		b += fw->dev[i].packed_bytes;
	return b;
}

int pg_forward_max_inflight(const struct pg_forward *fw)
{
	return fw->n_slots;
}

const struct pg_plan *pg_forward_plan(const struct pg_forward *fw)
{
	return &fw->plan;
}

/* ---- figures ---- */

int pg_forward_n_devices(const struct pg_forward *fw)
{
	return fw->n_dev;
}

void pg_forward_device_stats(const struct pg_forward *fw, int i,
			     struct pg_forward_dev_stats *st)
{
	const struct device *d = &fw->dev[i];
	const struct pg_comm *cs[3] = { d->world, d->tp, d->cp };

	memset(st, 0, sizeof(*st));
	snprintf(st->name, sizeof(st->name), "%s",
		 d->info ? d->info->name : "cpu:0");
	st->stage = d->stage;
	st->tp_rank = d->t;
	st->cp_rank = d->c;
	st->first_block = d->first_block;
	st->n_blocks = d->n_blocks;
	st->steps = d->steps;
	st->busy_ns = d->busy_ns;
	st->comm_ns = fw_comm_ns(d);
	st->compute_ns = st->busy_ns > st->comm_ns ? st->busy_ns - st->comm_ns : 0;
	st->wall_ns = pg_now_ns() - fw->stats_ns;
	for (int k = 0; k < 3; k++) {
		if (!cs[k])
			continue;
		st->bytes += cs[k]->stats.bytes_out;
		st->n_all_reduce += cs[k]->stats.n_all_reduce;
		st->n_all_gather += cs[k]->stats.n_all_gather;
		st->n_send += cs[k]->stats.n_send;
		st->n_recv += cs[k]->stats.n_recv;
	}
}

int pg_forward_inject_fault(struct pg_forward *fw, int device, int block)
{
	if (device < 0 || device >= fw->n_dev || block < 1 ||
	    block > fw->dev[device].n_blocks)
		return -EINVAL;
	while (fw->n_inflight)
		pg_forward_wait(fw);
	fw->dev[device].fault_after = block;
	return 0;
}
