/*
 * jobs.c - the course of a batch: the caller's tokens checked and laid
 * out once (a job), handed in order to every device's thread through a
 * ring, each device running its stage's blocks (block.c), the output
 * head and the plan's sends and gathers, and the caller woken when every
 * device is done; a device's failure aborts the batch and resets the
 * devices before the next.  Up to pp jobs are in flight, so that stages
 * overlap.  With replicas, a job is split into one part a replica (the
 * sequences of its zone), which the replicas run at the same time.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/comm.h"
#include "common/clock.h"
#include "daemon/engine/forward_impl.h"
#include "daemon/engine/kv.h"

/* ---- one batch ---- */

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

/* ---- replicas: a batch split by zone ---- */

/*
 * The zone of sequence sq's pages, or -1 when they are not all in one
 * (kvcache.h keeps a sequence in its zone; a caller that does not has
 * made a batch no replica can run).
 */
static int seq_zone(const struct pg_forward *fw, const struct pg_fw_seq *sq)
{
	int pt = fw->p.page_tokens, n = (sq->n_past + sq->n_tokens + pt - 1) / pt;
	int z = (int)((int64_t)sq->pages[0] * fw->n_rep / fw->p.n_pages);
	int32_t lo, hi;

	/* an estimate, then the zone that holds the first page */
	while (z > 0 && sq->pages[0] < fw_zone_first(fw->p.n_pages, fw->n_rep, z))
		z--;
	while (sq->pages[0] >= fw_zone_first(fw->p.n_pages, fw->n_rep, z + 1))
		z++;
	lo = fw_zone_first(fw->p.n_pages, fw->n_rep, z);
	hi = fw_zone_first(fw->p.n_pages, fw->n_rep, z + 1);
	for (int i = 1; i < n; i++)
		if (sq->pages[i] < lo || sq->pages[i] >= hi)
			return -1;
	return z;
}

/*
 * Each part's sequences, and room for their page tables; 0, -EINVAL (a
 * sequence's pages span zones) or -ENOMEM.
 */
static int count_parts(struct pg_forward *fw, struct job *j)
{
	size_t need[PG_PLAN_MAX_DEVICES] = { 0 };
	int pt = fw->p.page_tokens;

	for (int i = 0; i < j->n_seqs; i++) {
		const struct pg_fw_seq *sq = &j->seqs[i];

		if ((j->seq_zone[i] = seq_zone(fw, sq)) < 0)
			return -EINVAL;
		need[j->seq_zone[i]] += (size_t)((sq->n_past + sq->n_tokens +
						  pt - 1) / pt);
	}
	for (int r = 0; r < fw->n_rep; r++) {
		struct job *pj = &j->part[r];
		int32_t *pages;

		pj->n_tokens = pj->n_seqs = pj->n_out = 0;
		if (need[r] <= pj->pages_cap)
			continue;
		pages = realloc(pj->pages, need[r] * sizeof(*pages));
		if (!pages)
			return -ENOMEM;
		pj->pages = pages;
		pj->pages_cap = need[r];
	}
	return 0;
}

/*
 * Sequence i of job j (its first row, its first output row) into its
 * part: tokens, positions, output rows, and its page table as the
 * replica's KV store numbers the pages.
 */
static void add_to_part(struct pg_forward *fw, struct job *j, int i, int row,
			int out, size_t *pages_used)
{
	const struct pg_fw_seq *sq = &j->seqs[i];
	int r = j->seq_zone[i], pt = fw->p.page_tokens;
	int n_pages = (sq->n_past + sq->n_tokens + pt - 1) / pt;
	int32_t page0 = fw_zone_first(fw->p.n_pages, fw->n_rep, r);
	struct job *pj = &j->part[r];
	int32_t *pages = pj->pages + pages_used[r];

	for (int k = 0; k < n_pages; k++)
		pages[k] = sq->pages[k] - page0;
	pages_used[r] += (size_t)n_pages;
	pj->seqs[pj->n_seqs] = *sq;
	pj->seqs[pj->n_seqs].pages = pages;
	pj->aseqs[pj->n_seqs] = j->aseqs[i];
	pj->aseqs[pj->n_seqs].pages = pages;
	pj->aseqs[pj->n_seqs].first_row = pj->n_tokens;
	pj->n_seqs++;
	memcpy(pj->tokens + pj->n_tokens, j->tokens + row,
	       (size_t)sq->n_tokens * sizeof(*j->tokens));
	memcpy(pj->pos + pj->n_tokens, j->pos + row,
	       (size_t)sq->n_tokens * sizeof(*j->pos));
	for (int k = 0; k < (sq->logits_all ? sq->n_tokens : 1); k++) {
		pj->out_rows[pj->n_out] = pj->n_tokens +
					  (sq->logits_all ? k : sq->n_tokens - 1);
		pj->dst_row[pj->n_out++] = out + k;
	}
	pj->n_tokens += sq->n_tokens;
}

/*
 * Where part pj's logits go: straight into the batch's when its rows are
 * one run of them, else into its own rows, which its device copies into
 * place (n_vocab floats each) when it is done.  0 or -ENOMEM.
 */
static int part_logits(struct pg_forward *fw, struct job *pj, float *logits)
{
	size_t V = (size_t)fw->m->hp.n_vocab;
	int run = 1;
	float *own;

	for (int k = 1; k < pj->n_out && run; k++)
		run = pj->dst_row[k] == pj->dst_row[0] + k;
	pj->dst = NULL;
	if (run && pj->n_out) {
		pj->logits = logits + (size_t)pj->dst_row[0] * V;
		return 0;
	}
	if ((size_t)pj->n_out > pj->own_rows) {
		own = realloc(pj->own, (size_t)pj->n_out * V * sizeof(*own));
		if (!own)
			return -ENOMEM;
		pj->own = own;
		pj->own_rows = (size_t)pj->n_out;
	}
	pj->logits = pj->own;
	pj->dst = logits;
	return 0;
}

/* Job j (prepared) cut into its replicas' parts. */
static int split_job(struct pg_forward *fw, struct job *j)
{
	size_t used[PG_PLAN_MAX_DEVICES] = { 0 };
	int rc = count_parts(fw, j), row = 0, out = 0;

	if (rc)
		return rc;
	for (int i = 0; i < j->n_seqs; i++) {
		add_to_part(fw, j, i, row, out, used);
		row += j->seqs[i].n_tokens;
		out += j->seqs[i].logits_all ? j->seqs[i].n_tokens : 1;
	}
	for (int r = 0; r < fw->n_rep; r++)
		if (j->part[r].n_seqs &&
		    (rc = part_logits(fw, &j->part[r], j->logits)))
			return rc;
	return 0;
}

/* Part pj's logits rows into the batch's rows (when it had its own). */
static void scatter_logits(const struct pg_forward *fw, const struct job *pj)
{
	size_t V = (size_t)fw->m->hp.n_vocab;

	if (!pj->dst)
		return;
	for (int k = 0; k < pj->n_out; k++)
		memcpy(pj->dst + (size_t)pj->dst_row[k] * V,
		       pj->own + (size_t)k * V, V * sizeof(float));
}

/* ---- one batch ---- */

/* Check the batch and lay out positions and attention spans in job j. */
static int prepare(struct pg_forward *fw, struct job *j,
		   const int32_t *tokens, int n_tokens,
		   const struct pg_fw_seq *seqs, int n_seqs, float *logits)
{
	int row = 0;

	if (n_tokens > fw->p.max_batch_tokens)
		return -E2BIG;
	if (n_tokens < 1 || n_seqs < 1 || n_seqs > n_tokens || !logits)
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
	memcpy(j->tokens, tokens, (size_t)n_tokens * sizeof(*tokens));
	memcpy(j->seqs, seqs, (size_t)n_seqs * sizeof(*seqs));
	j->n_tokens = n_tokens;
	j->n_seqs = n_seqs;
	j->logits = logits;
	j->n_out = 0;
	row = 0;
	for (int i = 0; i < n_seqs; i++) {
		const struct pg_fw_seq *sq = &seqs[i];

		j->aseqs[i] = (struct pg_attn_seq){
			.pages = sq->pages,
			.n_ctx = sq->n_past + sq->n_tokens,
			.first_row = row,
			.n_rows = sq->n_tokens,
		};
		for (int k = 0; k < sq->n_tokens; k++, row++) {
			j->pos[row] = sq->n_past + k;
			if (sq->logits_all || k == sq->n_tokens - 1)
				j->out_rows[j->n_out++] = row;
		}
	}
	return fw->n_rep > 1 ? split_job(fw, j) : 0;
}

/* This device's KV slot of every row (-1: another CP rank holds it). */
static void device_slots(const struct device *d, const struct job *j)
{
	int pt = d->fw->p.page_tokens, cp = d->fw->plan.cp, ptl = pt / cp;

	for (int i = 0, row = 0; i < j->n_seqs; i++)
		for (int k = 0; k < j->seqs[i].n_tokens; k++, row++) {
			int pos = j->pos[row], o = pos % pt;

			d->s.slots[row] = o / ptl == d->c ?
				j->seqs[i].pages[pos / pt] * ptl + o % ptl : -1;
		}
}

uint64_t fw_comm_ns(const struct device *d)
{
	uint64_t ns = d->world ? d->world->stats.wait_ns : 0;

	if (d->tp)
		ns += d->tp->stats.wait_ns;
	if (d->cp)
		ns += d->cp->stats.wait_ns;
	return ns;
}

/* Room for rows logits rows of the local and gathered vocabulary slices. */
static int grow_logits(struct device *d, size_t rows)
{
	size_t tp = (size_t)fw_head_size(&d->fw->plan), vp = (size_t)d->vpad;
	struct pg_backend *be = d->be;
	float *a, *b;

	if (rows <= d->s.lg_rows)
		return 0;
	if (d->devmem) {
		/* the device's logits, and the host's copy of them */
		be->ops->free(be, d->s.lg);
		be->ops->free(be, d->s.lg_all);
		free(d->s.lg_host);
		d->s.lg_rows = 0;
		d->s.lg = be->ops->alloc(be, rows * vp * sizeof(float));
		d->s.lg_all = tp > 1 ? be->ops->alloc(be, tp * rows * vp *
						      sizeof(float)) : NULL;
		d->s.lg_host = malloc(tp * rows * vp * sizeof(float));
		if (!d->s.lg || (tp > 1 && !d->s.lg_all) || !d->s.lg_host)
			return -ENOMEM;
		d->s.lg_rows = rows;
		return 0;
	}
	a = realloc(d->s.lg, rows * vp * sizeof(float));
	if (a)
		d->s.lg = a;
	b = realloc(d->s.lg_all, tp * rows * vp * sizeof(float));
	if (b)
		d->s.lg_all = b;
	if (!a || !b)
		return -ENOMEM;
	d->s.lg_rows = rows;
	return 0;
}

/*
 * End a step that step_begin opened (before the device's memory is read
 * or a communicator called): 0, or the device's error.
 */
static int close_step(struct device *d, int *open)
{
	if (!*open)
		return 0;
	*open = 0;
	return d->be->ops->step_end(d->be, d->err, sizeof(d->err));
}

/* Copy n bytes of the device's memory at src to the host, at dst. */
static int fetch(struct device *d, void *dst, const void *src, size_t n)
{
	return d->be->ops->download(d->be, dst, src, n, d->err,
				    sizeof(d->err));
}

/* Final norm and output projection of the rows whose logits are wanted. */
static int head(struct device *d, const struct job *j, int *open)
{
	int dm = d->fw->m->hp.n_embd, nv = d->fw->m->hp.n_vocab;
	int n_out = j->n_out, rc;
	float cap = d->fw->m->arch.final_softcap;
	struct scratch *s = &d->s;
	struct pg_backend *be = d->be;
	struct pg_comm *hc = d->tp ? d->tp : d->cp;
	const float *in = s->x;
	const float *lg;

	for (int i = 0; i < n_out; i++)
		if (j->out_rows[i] != i) {
			/* gather the wanted rows, as a lookup in x */
			struct pg_matrix xm = {
				.type = PG_F32, .n_rows = j->n_tokens,
				.n_cols = dm, .row_bytes = (size_t)dm * 4,
				.data = s->x,
			};

			be->ops->get_rows(be, &xm, j->out_rows, n_out, s->xb);
			in = s->xb;
			break;
		}
	be->ops->rmsnorm(be, in, d->output_norm, n_out, dm,
			 d->fw->m->hp.rms_eps, s->xb);
	if (!hc && !d->devmem) {
		be->ops->matmul(be, &d->out_w, s->xb, n_out, NULL, j->logits);
		if (cap > 0.0f)
			be->ops->softcap(be, j->logits, cap, (int64_t)n_out * nv);
		return 0;
	}
	if ((rc = grow_logits(d, (size_t)n_out))) {
		close_step(d, open);
		return rc;
	}
	/* rows of vpad floats: this rank's slice, zero-padded (tanh(0) = 0) */
	be->ops->matmul(be, &d->out_w, s->xb, n_out, NULL, s->lg);
	if (cap > 0.0f)
		be->ops->softcap(be, s->lg, cap, (int64_t)n_out * d->vpad);
	if ((rc = close_step(d, open)))
		return rc;
	if (!hc)	/* a device's memory, one rank: vpad == n_vocab */
		return fetch(d, j->logits, s->lg,
			     (size_t)n_out * nv * sizeof(float));
	if (d->nv < d->vpad && !d->devmem)	/* a device's slice is padded */
		for (int i = n_out - 1; i >= 0; i--) {
			memmove(s->lg + (size_t)i * d->vpad,
				s->lg + (size_t)i * d->nv,
				sizeof(float) * (size_t)d->nv);
			memset(s->lg + (size_t)i * d->vpad + d->nv, 0,
			       sizeof(float) * (size_t)(d->vpad - d->nv));
		}
	rc = hc->ops->all_gather(hc, s->lg,
				    (size_t)n_out * d->vpad * sizeof(float),
				    s->lg_all);
	if (rc || d->c != 0 || d->t != 0)
		return rc;
	lg = s->lg_all;
	if (d->devmem) {
		rc = fetch(d, s->lg_host, s->lg_all, (size_t)fw_head_size(&d->fw->plan) *
			   n_out * d->vpad * sizeof(float));
		if (rc)
			return rc;
		lg = s->lg_host;
	}
	for (int r = 0; r < fw_head_size(&d->fw->plan); r++) {
		int v0 = r * d->vpad;
		int cnt = nv - v0 < d->vpad ? nv - v0 : d->vpad;

		for (int i = 0; i < n_out; i++)
			memcpy(j->logits + (size_t)i * nv + v0,
			       lg + ((size_t)r * n_out + i) * d->vpad,
			       sizeof(float) * (size_t)cnt);
	}
	return 0;
}

/* Everything device d does for one batch. */
static int run_job(struct device *d, const struct job *j)
{
	const struct pg_plan *pl = &d->fw->plan;
	size_t x_bytes = (size_t)j->n_tokens * d->fw->m->hp.n_embd *
			 sizeof(float);
	int rc, open = 0;

	if (d->sticky_rc)
		return d->sticky_rc;
	if (d->stage > 0) {
		rc = d->world->ops->recv(d->world, d->index - pl->tp * pl->cp,
					 d->s.x, x_bytes);
		if (rc)
			return rc;
	}
	if (d->graphs) {
		d->be->ops->step_begin(d->be);
		open = 1;
	}
	if (d->stage == 0) {
		float es = d->fw->m->arch.emb_scale;

		d->be->ops->get_rows(d->be, &d->tok_embd, j->tokens,
				     j->n_tokens, d->s.x);
		if (es > 0.0f)
			d->be->ops->scale(d->be, d->s.x, es, (int64_t)j->n_tokens *
					  d->fw->m->hp.n_embd);
	}
	device_slots(d, j);
	for (int lb = 0; lb < d->n_blocks; lb++) {
		if (d->fault_after > 0 && lb + 1 == d->fault_after) {
			d->fault_after = 0;
			close_step(d, &open);
			return -EIO;
		}
		if ((rc = pg_block_run(d, j, lb))) {
			close_step(d, &open);
			return rc;
		}
	}
	if (d->stage < pl->pp - 1) {
		if ((rc = close_step(d, &open)))
			return rc;
		return d->world->ops->send(d->world, d->index + pl->tp * pl->cp,
					   d->s.x, x_bytes);
	}
	return head(d, j, &open);
}

/* Clear an abort on every group of device d. */
static void reset_device(struct device *d)
{
	if (d->world)
		d->world->ops->reset(d->world);
	if (d->tp)
		d->tp->ops->reset(d->tp);
	if (d->cp)
		d->cp->ops->reset(d->cp);
}

void fw_abort_device(struct device *d)
{
	if (d->world)
		d->world->ops->abort(d->world);
	if (d->tp)
		d->tp->ops->abort(d->tp);
	if (d->cp)
		d->cp->ops->abort(d->cp);
}

/*
 * Device d has finished job j with rc.  The batch's error is the cause,
 * not the -ECANCELED of the devices that the failing one's abort stopped.
 */
static void job_done(struct pg_forward *fw, struct job *j, int rc)
{
	int cur = atomic_load(&j->rc);

	while (rc && (cur == 0 || (cur == -ECANCELED && rc != -ECANCELED)) &&
	       !atomic_compare_exchange_weak(&j->rc, &cur, rc))
		;
	if (atomic_fetch_sub(&j->pending, 1) == 1) {
		pthread_mutex_lock(&fw->lock);
		j->done = 1;
		pthread_cond_broadcast(&fw->cond);
		pthread_mutex_unlock(&fw->lock);
	}
}

/*
 * A device with memory of its own failed (a device fault, which stays):
 * say what failed once, on stderr, which pagodad sends to its log.
 */
static void report_fault(struct device *d, int rc)
{
	if (!rc || !d->devmem || !d->err[0])
		return;
	fprintf(stderr, "pagoda: device %s failed: %s\n",
		d->info ? d->info->name : "cpu:0", d->err);
	d->err[0] = 0;
	if (!d->sticky_rc)
		d->sticky_rc = rc;
}

void *fw_device_main(void *arg)
{
	struct device *d = arg;
	struct pg_forward *fw = d->fw;
	uint64_t next = 0;

	if (d->info && d->info->n_cpus > 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(d->info->cpus[0], &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	if (fw->gpus) {
		char why[320] = "", msg[384];
		int rc = fw_join_nccl(d, why, sizeof(why));

		snprintf(msg, sizeof(msg), "device %s: cannot join %s",
			 d->info->name, why);
		pthread_mutex_lock(&fw->lock);
		fw_setup_failed(fw, rc, msg);
		fw->setup_pending--;
		pthread_cond_broadcast(&fw->cond);
		pthread_mutex_unlock(&fw->lock);
	}
	for (;;) {
		struct job *j;
		uint64_t t0;
		int rc;

		pthread_mutex_lock(&fw->lock);
		while (!fw->stop && fw->queued == next)
			pthread_cond_wait(&fw->cond, &fw->lock);
		if (fw->stop && fw->queued == next) {
			pthread_mutex_unlock(&fw->lock);
			return NULL;
		}
		j = fw->queue[next % (PG_FW_MAX_INFLIGHT + 1)];
		next++;
		pthread_mutex_unlock(&fw->lock);
		if (d->devmem)
			pthread_mutex_lock(&d->be_lock);
		if (j->kind == JOB_RESET) {
			reset_device(d);
			if (d->devmem)
				pthread_mutex_unlock(&d->be_lock);
			job_done(fw, j, 0);
			continue;
		}
		if (j->part && !j->part[d->replica].n_seqs) {
			/* replicas: none of this batch's sequences is ours */
			if (d->devmem)
				pthread_mutex_unlock(&d->be_lock);
			job_done(fw, j, 0);
			continue;
		}
		t0 = pg_now_ns();
		rc = run_job(d, j->part ? &j->part[d->replica] : j);
		if (rc) {
			report_fault(d, rc);
			fw_abort_device(d);
		} else if (j->part) {
			scatter_logits(fw, &j->part[d->replica]);
		}
		if (d->devmem)
			pthread_mutex_unlock(&d->be_lock);
		d->busy_ns += pg_now_ns() - t0;
		d->steps++;
		job_done(fw, j, rc);
	}
}

/* Hand job j to every device (threaded) or run it here. */
static void start_job(struct pg_forward *fw, struct job *j)
{
	atomic_store(&j->pending, fw->n_dev);
	atomic_store(&j->rc, 0);
	j->done = 0;
	if (!fw->threaded) {
		uint64_t t0 = pg_now_ns();
		int rc = run_job(&fw->dev[0], j);

		report_fault(&fw->dev[0], rc);
		fw->dev[0].busy_ns += pg_now_ns() - t0;
		fw->dev[0].steps++;
		atomic_store(&j->rc, rc);
		atomic_store(&j->pending, 0);
		j->done = 1;
		return;
	}
	pthread_mutex_lock(&fw->lock);
	fw->queue[fw->queued % (PG_FW_MAX_INFLIGHT + 1)] = j;
	fw->queued++;
	pthread_cond_broadcast(&fw->cond);
	pthread_mutex_unlock(&fw->lock);
}

static int wait_job(struct pg_forward *fw, struct job *j)
{
	if (fw->threaded) {
		pthread_mutex_lock(&fw->lock);
		while (!j->done)
			pthread_cond_wait(&fw->cond, &fw->lock);
		pthread_mutex_unlock(&fw->lock);
	}
	return atomic_load(&j->rc);
}

/* After a failed batch and once nothing is in flight: clear the aborts. */
static void reset_if_needed(struct pg_forward *fw)
{
	if (!fw->need_reset || fw->n_inflight)
		return;
	fw->reset_job.kind = JOB_RESET;
	start_job(fw, &fw->reset_job);
	wait_job(fw, &fw->reset_job);
	fw->need_reset = 0;
}

int pg_forward_submit(struct pg_forward *fw, const int32_t *tokens,
		      int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		      float *logits)
{
	struct job *j;
	int rc;

	if (fw->n_inflight >= fw->n_slots)
		return -EBUSY;
	if (fw->need_reset) {
		while (fw->n_inflight)
			pg_forward_wait(fw);
		reset_if_needed(fw);
	}
	j = &fw->jobs[(fw->head + fw->n_inflight) % fw->n_slots];
	rc = prepare(fw, j, tokens, n_tokens, seqs, n_seqs, logits);
	if (rc)
		return rc;
	j->kind = JOB_RUN;
	fw->n_inflight++;
	start_job(fw, j);
	return 0;
}

int pg_forward_wait(struct pg_forward *fw)
{
	struct job *j;
	int rc;

	if (!fw->n_inflight)
		return -ENOENT;
	j = &fw->jobs[fw->head];
	rc = wait_job(fw, j);
	fw->head = (fw->head + 1) % fw->n_slots;
	fw->n_inflight--;
	if (rc && fw->threaded)
		fw->need_reset = 1;
	reset_if_needed(fw);
	return rc;
}

int pg_forward_batch(struct pg_forward *fw, const int32_t *tokens,
		     int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		     float *logits)
{
	int rc;

	while (fw->n_inflight)
		pg_forward_wait(fw);
	rc = pg_forward_submit(fw, tokens, n_tokens, seqs, n_seqs, logits);
	if (rc)
		return rc;
	return pg_forward_wait(fw);
}
