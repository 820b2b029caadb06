/*
 * forward.c - the forward pass: embedding, the block stack stage by stage,
 * final norm and output head, all through backend operations.
 *
 * Per block: x += Wo · attn(rope(Wq·n), rope(Wk·n), Wv·n) with n =
 * rmsnorm(x); then x += Wdown · (silu(Wgate·n) * (Wup·n)) with n =
 * rmsnorm(x).  K and V go into the sequences' KV pages before attention
 * reads them back through the page tables, which the caller owns
 * (kvcache.h): this file never decides which page a token goes to.  No
 * intrinsics here.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "kv.h"

/* One device and the contiguous range of blocks it runs. */
struct pg_stage {
	struct pg_backend *be;
	int first_block;
	int n_blocks;
	struct pg_kv_store *kv;
};

/* Activations of one call, max_batch_tokens rows each. */
struct scratch {
	float *x;		/* (B, n_embd) residual stream */
	float *xb;		/* (B, n_embd) normalised input of a sub-layer */
	float *xb2;		/* (B, n_embd) sub-layer output */
	float *q;		/* (B, n_heads * head_dim) */
	float *k;		/* (B, n_kv_heads * head_dim) */
	float *v;		/* (B, n_kv_heads * head_dim) */
	float *att;		/* (B, n_heads * head_dim) */
	float *hb;		/* (B, n_ff) gate, then silu(gate) * up */
	float *hb2;		/* (B, n_ff) up */
	int32_t *pos;		/* (B) positions */
	int32_t *slots;		/* (B) physical KV slots */
	int32_t *out_rows;	/* (B) rows whose logits are wanted */
	struct pg_attn_seq *aseqs;	/* (B) at most one sequence per row */
};

struct pg_forward {
	const struct pg_model *m;
	struct pg_forward_params p;
	int n_stages;
	struct pg_stage stage[1];
	struct scratch s;
	void *arena;
};

struct pg_forward_params pg_forward_params_default(void)
{
	return (struct pg_forward_params){
		.n_threads = 2,
		.isa = PG_ISA_AVX512,
		.max_batch_tokens = 512,
		.n_pages = 0,
		.page_tokens = 16,
		.kv_type = PG_F16,
		.kv_mem = { .numa_node = -1 },
	};
}

static int alloc_scratch(struct pg_forward *fw)
{
	const struct pg_hparams *hp = &fw->m->hp;
	size_t B = (size_t)fw->p.max_batch_tokens;
	size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
	size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
	size_t floats = B * (3 * (size_t)hp->n_embd + 2 * q_dim + 2 * kv_dim +
			     2 * (size_t)hp->n_ff);
	size_t bytes = floats * sizeof(float) + 3 * B * sizeof(int32_t) +
		       B * sizeof(struct pg_attn_seq);
	struct scratch *s = &fw->s;
	char *a;

	fw->arena = aligned_alloc(64, (bytes + 64 * 16 + 63) / 64 * 64);
	if (!fw->arena)
		return -ENOMEM;
	a = fw->arena;
#define TAKE(ptr, n) do { (ptr) = (void *)a; a += ((n) * sizeof(*(ptr)) + 63) / 64 * 64; } while (0)
	TAKE(s->x, B * hp->n_embd);
	TAKE(s->xb, B * hp->n_embd);
	TAKE(s->xb2, B * hp->n_embd);
	TAKE(s->q, B * q_dim);
	TAKE(s->k, B * kv_dim);
	TAKE(s->v, B * kv_dim);
	TAKE(s->att, B * q_dim);
	TAKE(s->hb, B * hp->n_ff);
	TAKE(s->hb2, B * hp->n_ff);
	TAKE(s->pos, B);
	TAKE(s->slots, B);
	TAKE(s->out_rows, B);
	TAKE(s->aseqs, B);
#undef TAKE
	return 0;
}

/* MemAvailable from /proc/meminfo, in bytes; 0 when unknown. */
static size_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long long kb = 0;
	char line[128];

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (size_t)kb * 1024;
}

/*
 * How many pages the parameters ask for: n_pages, else kv_bytes, else
 * kv_fraction of the memory available, else room for 4 sequences of the
 * training context (at most 8192 tokens each).  0 when that is no page.
 */
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
		bytes = (size_t)((double)mem_available() * p->kv_fraction);
	else
		return 4 * ((ctx + p->page_tokens - 1) / p->page_tokens);
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

int pg_forward_create(const struct pg_model *m,
		      const struct pg_forward_params *p,
		      struct pg_forward **out, char *err, size_t err_len)
{
	const struct pg_hparams *hp = &m->hp;
	struct pg_forward *fw;
	struct pg_stage *st;
	size_t page_bytes;
	int rc;

	if (p->max_batch_tokens < 1 || p->page_tokens < 1 || p->n_pages < 0 ||
	    !(p->kv_fraction >= 0 && p->kv_fraction <= 1)) {
		snprintf(err, err_len, "forward: max_batch_tokens and page_tokens must be >= 1, n_pages >= 0, kv_fraction in 0..1");
		return -EINVAL;
	}
	page_bytes = pg_kv_page_bytes_for(p->page_tokens, hp->n_blocks,
					  hp->n_kv_heads, hp->head_dim,
					  p->kv_type);
	fw = calloc(1, sizeof(*fw));
	if (!fw)
		return -ENOMEM;
	fw->m = m;
	fw->p = *p;
	fw->p.n_pages = pages_wanted(m, p, page_bytes);
	if (fw->p.n_pages < 1) {
		snprintf(err, err_len, "the KV cache size leaves no page of %zu bytes (%d tokens); give it more memory",
			 page_bytes, p->page_tokens);
		free(fw);
		return -EINVAL;
	}
	fw->n_stages = 1;
	st = &fw->stage[0];
	st->first_block = 0;
	st->n_blocks = hp->n_blocks;
	st->be = pg_cpu_backend_create(p->n_threads, p->isa);
	if (!st->be) {
		rc = -errno;
		snprintf(err, err_len, "cannot start the CPU backend with %d threads: %s",
			 p->n_threads, strerror(errno));
		goto out_free;
	}
	rc = pg_kv_store_create(fw->p.n_pages, p->page_tokens, st->n_blocks,
				hp->n_kv_heads, hp->head_dim, p->kv_type,
				&p->kv_mem, &st->kv);
	if (rc) {
		kv_error(err, err_len, rc, fw->p.n_pages, page_bytes, &p->kv_mem);
		goto out_free;
	}
	rc = alloc_scratch(fw);
	if (rc) {
		snprintf(err, err_len, "cannot allocate the activations of a %d-token batch: %s",
			 p->max_batch_tokens, strerror(-rc));
		goto out_free;
	}
	*out = fw;
	return 0;
out_free:
	pg_forward_destroy(fw);
	return rc;
}

void pg_forward_destroy(struct pg_forward *fw)
{
	if (!fw)
		return;
	for (int i = 0; i < fw->n_stages; i++) {
		pg_kv_store_destroy(fw->stage[i].kv);
		if (fw->stage[i].be)
			fw->stage[i].be->ops->destroy(fw->stage[i].be);
	}
	free(fw->arena);
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

void pg_forward_copy_page(struct pg_forward *fw, int32_t src, int32_t dst)
{
	for (int i = 0; i < fw->n_stages; i++)
		pg_kv_store_copy(fw->stage[i].kv, src, dst);
}

int pg_forward_max_batch(const struct pg_forward *fw)
{
	return fw->p.max_batch_tokens;
}

int pg_forward_threads(const struct pg_forward *fw)
{
	return pg_cpu_backend_threads(fw->stage[0].be);
}

const char *pg_forward_isa_name(const struct pg_forward *fw)
{
	return pg_cpu_isa_name(pg_cpu_backend_isa(fw->stage[0].be));
}

/* A sequence's page table covers its positions with ids in range. */
static int pages_ok(const struct pg_forward *fw, const struct pg_fw_seq *sq)
{
	int pt = fw->p.page_tokens;
	int n_pages = (sq->n_past + sq->n_tokens + pt - 1) / pt;

	if (!sq->pages || sq->n_past < 0 || sq->n_tokens < 1)
		return 0;
	for (int i = 0; i < n_pages; i++)
		if (sq->pages[i] < 0 || sq->pages[i] >= fw->p.n_pages)
			return 0;
	return 1;
}

/* Check the batch and lay out positions, slots and attention spans. */
static int prepare(struct pg_forward *fw, const int32_t *tokens, int n_tokens,
		   const struct pg_fw_seq *seqs, int n_seqs, int *n_out)
{
	int pt = fw->p.page_tokens, row = 0;

	if (n_tokens > fw->p.max_batch_tokens)
		return -E2BIG;
	if (n_tokens < 1 || n_seqs < 1 || n_seqs > n_tokens)
		return -EINVAL;
	for (int i = 0; i < n_tokens; i++)
		if (tokens[i] < 0 || tokens[i] >= fw->m->hp.n_vocab)
			return -EINVAL;
	for (int i = 0; i < n_seqs; i++) {
		if (!pages_ok(fw, &seqs[i]))
			return -EINVAL;
		row += seqs[i].n_tokens;
	}
	if (row != n_tokens)
		return -EINVAL;
	*n_out = 0;
	row = 0;
	for (int i = 0; i < n_seqs; i++) {
		const struct pg_fw_seq *sq = &seqs[i];

		fw->s.aseqs[i] = (struct pg_attn_seq){
			.pages = sq->pages,
			.n_ctx = sq->n_past + sq->n_tokens,
			.first_row = row,
			.n_rows = sq->n_tokens,
		};
		for (int j = 0; j < sq->n_tokens; j++, row++) {
			int pos = sq->n_past + j;

			fw->s.pos[row] = pos;
			fw->s.slots[row] = sq->pages[pos / pt] * pt + pos % pt;
			if (sq->logits_all || j == sq->n_tokens - 1)
				fw->s.out_rows[(*n_out)++] = row;
		}
	}
	return 0;
}

static void attention_layer(struct pg_forward *fw, struct pg_stage *st,
			    const struct pg_block_weights *w, int lb, int n,
			    int n_seqs)
{
	const struct pg_hparams *hp = &fw->m->hp;
	const struct pg_backend_ops *ops = st->be->ops;
	struct pg_backend *be = st->be;
	struct scratch *s = &fw->s;

	ops->rmsnorm(be, s->x, w->attn_norm, n, hp->n_embd, hp->rms_eps, s->xb);
	ops->matmul(be, &w->wq, s->xb, n, w->bq, s->q);
	ops->matmul(be, &w->wk, s->xb, n, w->bk, s->k);
	ops->matmul(be, &w->wv, s->xb, n, w->bv, s->v);
	ops->rope(be, s->q, n, hp->n_heads, hp->head_dim, hp->n_rot, s->pos,
		  hp->rope_base, hp->rope_mode);
	ops->rope(be, s->k, n, hp->n_kv_heads, hp->head_dim, hp->n_rot, s->pos,
		  hp->rope_base, hp->rope_mode);
	ops->kv_write(be, pg_kv_store_layout(st->kv), lb, s->k, s->v, n, s->slots);
	ops->attention(be, pg_kv_store_layout(st->kv), lb, s->q, hp->n_heads,
		       s->aseqs, n_seqs, 1.0f / sqrtf((float)hp->head_dim),
		       s->att);
	ops->matmul(be, &w->wo, s->att, n, NULL, s->xb2);
	ops->add(be, s->x, s->xb2, (int64_t)n * hp->n_embd);
}

static void ffn_layer(struct pg_forward *fw, struct pg_stage *st,
		      const struct pg_block_weights *w, int n)
{
	const struct pg_hparams *hp = &fw->m->hp;
	const struct pg_backend_ops *ops = st->be->ops;
	struct pg_backend *be = st->be;
	struct scratch *s = &fw->s;

	ops->rmsnorm(be, s->x, w->ffn_norm, n, hp->n_embd, hp->rms_eps, s->xb);
	ops->matmul(be, &w->w_gate, s->xb, n, NULL, s->hb);
	ops->matmul(be, &w->w_up, s->xb, n, NULL, s->hb2);
	ops->silu_mul(be, s->hb, s->hb2, (int64_t)n * hp->n_ff);
	ops->matmul(be, &w->w_down, s->hb, n, NULL, s->xb2);
	ops->add(be, s->x, s->xb2, (int64_t)n * hp->n_embd);
}

/* Final norm and output projection of the rows whose logits are wanted. */
static void head(struct pg_forward *fw, struct pg_stage *st, int n_out,
		 float *logits)
{
	const struct pg_model *m = fw->m;
	int d = m->hp.n_embd;
	struct scratch *s = &fw->s;

	for (int i = 0; i < n_out; i++)
		if (s->out_rows[i] != i)
			memcpy(s->x + (size_t)i * d,
			       s->x + (size_t)s->out_rows[i] * d,
			       sizeof(float) * (size_t)d);
	st->be->ops->rmsnorm(st->be, s->x, m->output_norm, n_out, d,
			     m->hp.rms_eps, s->xb);
	st->be->ops->matmul(st->be, &m->output, s->xb, n_out, NULL, logits);
}

int pg_forward_batch(struct pg_forward *fw, const int32_t *tokens,
		     int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		     float *logits)
{
	const struct pg_model *m = fw->m;
	int n_out, rc;

	rc = prepare(fw, tokens, n_tokens, seqs, n_seqs, &n_out);
	if (rc)
		return rc;
	for (int si = 0; si < fw->n_stages; si++) {
		struct pg_stage *st = &fw->stage[si];

		if (si == 0)
			st->be->ops->get_rows(st->be, &m->tok_embd, tokens,
					      n_tokens, fw->s.x);
		for (int lb = 0; lb < st->n_blocks; lb++) {
			const struct pg_block_weights *w =
				&m->blocks[st->first_block + lb];

			attention_layer(fw, st, w, lb, n_tokens, n_seqs);
			ffn_layer(fw, st, w, n_tokens);
		}
		if (si == fw->n_stages - 1)
			head(fw, st, n_out, logits);
	}
	return 0;
}
