/*
 * plan_print.c - a plan as pagodad --plan and the start-up log print it:
 * the devices and their links, the stages, each device's share of the
 * weights and the KV cache, the communication per token, and the
 * warnings.  The planning itself is plan.c's.
 */
#include <numa.h>
#include <stdio.h>
#include <string.h>

#include "daemon/engine/plan.h"
#include "daemon/engine/plan_impl.h"

/* "0-7,16-23" into buf; "-" when not pinned. */
static const char *fmt_cpus(char *buf, size_t len, const struct pg_device *d)
{
	size_t n = 0;

	if (!d->n_cpus)
		return "-";
	buf[0] = '\0';
	for (int i = 0; i < d->n_cpus && n < len; i++) {
		int j = i;

		while (j + 1 < d->n_cpus && d->cpus[j + 1] == d->cpus[j] + 1)
			j++;
		n += (size_t)snprintf(buf + n, len - n, j > i ? "%s%d-%d" : "%s%d",
				      i ? "," : "", d->cpus[i], d->cpus[j]);
		i = j;
	}
	return buf;
}

/*
 * The links between CPU devices on different NUMA nodes: the kernel's
 * node distances (10 = local; a remote socket is typically 20-32), which
 * say how much a stage hand-off or an all-reduce across them costs.
 */
static void print_links(FILE *out, const struct pg_plan *p)
{
	int any = 0;

	if (numa_available() < 0)
		return;
	for (int i = 0; i < p->n_devices; i++)
		for (int j = i + 1; j < p->n_devices; j++) {
			const struct pg_device *a = &p->dev[i], *b = &p->dev[j];

			if (a->kind != PG_DEV_CPU || b->kind != PG_DEV_CPU ||
			    a->numa_node < 0 || b->numa_node < 0 ||
			    a->numa_node == b->numa_node)
				continue;
			if (!any++)
				fprintf(out, "\nlinks (NUMA distance; 10 = local memory)\n");
			fprintf(out, "  %s - %s: %d\n", a->name, b->name,
				numa_distance(a->numa_node, b->numa_node));
		}
}

static void print_devices(FILE *out, const struct pg_plan *p)
{
	char cpus[64], mem[32], node[16];

	fprintf(out, "\ndevices\n  %-8s %7s  %-16s %4s  %s\n", "device",
		"threads", "cpus", "numa", "memory");
	for (int i = 0; i < p->n_devices; i++) {
		const struct pg_device *d = &p->dev[i];

		snprintf(node, sizeof(node), "%d", d->numa_node);
		fprintf(out, "  %-8s %7d  %-16s %4s  %s\n", d->name, d->n_threads,
			fmt_cpus(cpus, sizeof(cpus), d),
			d->numa_node >= 0 ? node : "-",
			d->mem_bytes ? plan_fmt_bytes(mem, sizeof(mem), d->mem_bytes) : "unknown");
	}
	print_links(out, p);
}

static void print_stages(FILE *out, const struct pg_plan *p)
{
	fprintf(out, "\nstages\n  %-5s  %-14s %-23s %s\n", "stage", "blocks",
		"also", "devices");
	for (int s = 0; s < p->pp; s++) {
		int b0 = p->first_block[s], b1 = p->first_block[s + 1];
		int per = p->tp * p->cp, group = p->pp * per;
		char blocks[32];

		snprintf(blocks, sizeof(blocks), "%d-%d (%d)", b0, b1 - 1, b1 - b0);
		fprintf(out, "  %-5d  %-14s %-23s", s, blocks,
			p->pp == 1 ? "embedding, output head" :
			s == 0 ? "embedding" : s == p->pp - 1 ? "output head" : "-");
		/* replicas: each replica's devices of the stage, " | " apart */
		for (int r = 0; r < pg_plan_n_replicas(p); r++)
			for (int i = 0; i < per; i++)
				fprintf(out, "%s%s", i ? "," : r ? " | " : " ",
					p->dev[r * group + s * per + i].name);
		fputc('\n', out);
	}
}

static void print_shares(FILE *out, const struct pg_plan *p,
			 const struct pg_model_facts *f, const struct sizing *z)
{
	char w[32], kv[32], tot[32], heads[16], kvh[16], ffn[24];
	int per = p->pp * p->tp * p->cp, reps = pg_plan_n_replicas(p) > 1;
	struct share sh;

	fprintf(out, "\nper device (KV for %d x %d tokens%s, %d bytes an element)\n",
		z->batch_seqs, z->ctx_tokens, reps ? " a replica" : "",
		z->kv_elem);
	fprintf(out, "  %-8s %s%2s %2s %2s  %-9s %-9s %-12s %10s %10s %10s\n",
		"device", reps ? " r " : "", "s", "t", "c", "heads", "kv heads",
		"ffn cols", "weights", "kv", "total");
	for (int i = 0; i < p->n_devices; i++) {
		int li = i % per;
		char r[16] = "";

		plan_share_of(p, f, z, i, &sh);
		if (reps)
			snprintf(r, sizeof(r), "%2d ", i / per);
		snprintf(heads, sizeof(heads), "%d-%d", sh.h0, sh.h1 - 1);
		snprintf(kvh, sizeof(kvh), "%d-%d", sh.k0, sh.k1 - 1);
		snprintf(ffn, sizeof(ffn), "%d-%d", sh.f0, sh.f1 - 1);
		if (sh.weights_of >= 0)	/* replicas on one memory share them */
			snprintf(w, sizeof(w), "%s's", p->dev[sh.weights_of].name);
		else
			plan_fmt_bytes(w, sizeof(w), sh.weights);
		fprintf(out, "  %-8s %s%2d %2d %2d  %-9s %-9s %-12s %10s %10s %10s\n",
			p->dev[i].name, r, li / (p->tp * p->cp),
			li / p->cp % p->tp, li % p->cp, heads, kvh, ffn, w,
			plan_fmt_bytes(kv, sizeof(kv), sh.kv),
			plan_fmt_bytes(tot, sizeof(tot), sh.weights + sh.kv));
	}
}

/* The most heads one TP rank holds. */
static int max_heads_held(const struct pg_plan *p,
			  const struct pg_model_facts *f)
{
	int h0, h1, k0, k1, most = 0;

	for (int t = 0; t < p->tp; t++) {
		pg_plan_tp_heads(f->n_heads, f->n_kv_heads, p->tp, t, &h0, &h1, &k0, &k1);
		if (h1 - h0 > most)
			most = h1 - h0;
	}
	return most;
}

/*
 * The most canonical parts (pg_plan_tp_parts) one TP rank holds of Wo
 * (heads) and of Wdown (FFN blocks), together: what a CPU TP rank sends
 * per token and block.
 */
static int max_parts_held(const struct pg_plan *p,
			  const struct pg_model_facts *f)
{
	int64_t cols[PG_PLAN_EXACT_SPLITS + 2];
	int qb = f->qblock > 0 ? f->qblock : 1, most[2] = { 0, 0 };

	for (int t = 0; t < p->tp; t++)
		for (int w = 0; w < 2; w++) {
			int n = pg_plan_tp_rank_parts(f->n_heads, f->n_kv_heads,
						      f->head_dim, f->n_ff, w,
						      qb, p->tp, t, cols);

			most[w] = n > most[w] ? n : most[w];
		}
	return most[0] + most[1];
}

static void print_comm(FILE *out, const struct pg_plan *p,
		       const struct pg_model_facts *f)
{
	uint64_t vec = 4ull * (uint64_t)f->n_embd;
	uint64_t n_ar = p->tp > 1 ? 2ull * (uint64_t)f->n_blocks : 0;
	uint64_t n_ag = p->cp > 1 ? (uint64_t)f->n_blocks : 0;
	int hh = max_heads_held(p, f);
	uint64_t part = 4ull * (uint64_t)(hh * f->head_dim + hh) * (uint64_t)p->cp;
	/* CPU devices gather partial sums (exact), GPUs all-reduce; bytes
	 * are what one rank sends */
	int exact = p->n_devices > 0 && p->dev[0].kind == PG_DEV_CPU;
	uint64_t tp_bytes = exact && n_ar ?
		(uint64_t)f->n_blocks * (uint64_t)max_parts_held(p, f) * vec :
		n_ar * vec;
	uint64_t total = tp_bytes + (uint64_t)(p->pp - 1) * vec + n_ag * part;
	char b1[32], b2[32];

	fprintf(out, "\ncommunication per token\n");
	if (n_ar && exact)
		fprintf(out, "  TP: %llu all-gathers (2 per block) of partial sums of %s (%d floats) each, up to %d a rank and block, summed in one order (one device's bits): %s a rank\n",
			(unsigned long long)n_ar, plan_fmt_bytes(b1, sizeof(b1), vec),
			f->n_embd, max_parts_held(p, f), plan_fmt_bytes(b2, sizeof(b2), tp_bytes));
	else if (n_ar)
		fprintf(out, "  TP: %llu all-reduces (2 per block) of %s (%d floats): %s\n",
			(unsigned long long)n_ar, plan_fmt_bytes(b1, sizeof(b1), vec),
			f->n_embd, plan_fmt_bytes(b2, sizeof(b2), n_ar * vec));
	if (p->pp > 1)
		fprintf(out, "  PP: %d stage hand-off%s of %s (%d floats): %s\n",
			p->pp - 1, p->pp > 2 ? "s" : "",
			plan_fmt_bytes(b1, sizeof(b1), vec), f->n_embd,
			plan_fmt_bytes(b2, sizeof(b2), (uint64_t)(p->pp - 1) * vec));
	if (n_ag)
		fprintf(out, "  CP: %llu all-gathers (1 per block) of attention partials, %s each (%d ranks x %d heads x (%d + 1) floats): %s\n",
			(unsigned long long)n_ag, plan_fmt_bytes(b1, sizeof(b1), part),
			p->cp, hh, f->head_dim, plan_fmt_bytes(b2, sizeof(b2), n_ag * part));
	fprintf(out, "  total: %s%s\n", plan_fmt_bytes(b1, sizeof(b1), total),
		total ? "" : pg_plan_n_replicas(p) > 1 ?
		" (replicas: each device serves its own sequences)" :
		" (one device)");
}

/* "KV head 1 is held by ranks 0 and 1" for each shared KV head. */
static void warn_replicated(FILE *out, const struct pg_plan *p,
			    const struct pg_model_facts *f)
{
	fprintf(out, "warning: KV heads do not divide among %d TP ranks:", p->tp);
	for (int kv = 0, n = 0; kv < f->n_kv_heads; kv++) {
		int h0, h1, k0, k1, first = -1, last = -1;

		for (int t = 0; t < p->tp; t++) {
			pg_plan_tp_heads(f->n_heads, f->n_kv_heads, p->tp, t,
					 &h0, &h1, &k0, &k1);
			if (kv >= k0 && kv < k1) {
				first = first < 0 ? t : first;
				last = t;
			}
		}
		if (last > first)
			fprintf(out, "%s KV head %d is held by ranks %d %s %d",
				n++ ? ";" : "", kv, first,
				last == first + 1 ? "and" : "to", last);
	}
	fprintf(out, " (its cache is kept twice)\n");
}

static void print_warnings(FILE *out, const struct pg_plan *p,
			   const struct pg_model_facts *f, const struct sizing *z)
{
	int cpus[PG_DEVICE_MAX_CPUS];
	int n_cpus = plan_host_cpus(cpus, PG_DEVICE_MAX_CPUS), threads = 0;
	char b1[32], b2[32];
	struct fit fit;

	for (int i = 0; i < p->n_devices; i++)
		if (p->dev[i].kind == PG_DEV_CPU)
			threads += p->dev[i].n_threads;
	if (threads > n_cpus)
		fprintf(out, "warning: oversubscribed: %d threads on %d CPUs\n",
			threads, n_cpus);
	if (p->kv_replicated)
		warn_replicated(out, p, f);
	plan_fit(p, f, z, &fit);
	if (!fit.fits)
		fprintf(out, "warning: does not fit: %s%s needs %s of %s usable\n",
			p->dev[fit.dev].name,
			p->dev[fit.dev].kind == PG_DEV_CPU ? " (and the devices sharing its memory)" : "",
			plan_fmt_bytes(b1, sizeof(b1), fit.need),
			plan_fmt_bytes(b2, sizeof(b2), fit.have));
}

void pg_plan_print(FILE *out, const struct pg_plan *p,
		   const struct pg_model_facts *f,
		   const struct pg_plan_request *req)
{
	struct sizing z = plan_sizing_of(req, f);
	uint64_t weights = (uint64_t)f->n_blocks * f->block_bytes + f->embd_bytes +
			   (f->tied_output ? 0 : f->output_bytes);
	char b1[32], b2[32];

	if (pg_plan_n_replicas(p) > 1)
		fprintf(out, "plan: %d replicas (data parallel) of pipeline %d x tensor %d x context %d = %d devices\n",
			p->replicas, p->pp, p->tp, p->cp, p->n_devices);
	else
		fprintf(out, "plan: pipeline %d x tensor %d x context %d = %d device%s\n",
			p->pp, p->tp, p->cp, p->n_devices,
			p->n_devices == 1 ? "" : "s");
	fprintf(out, "model: %d blocks of %s, embedding %d, %d heads (%d KV) of %d, FFN %d (blocks of %d), vocabulary %d; weights %s%s\n",
		f->n_blocks, plan_fmt_bytes(b1, sizeof(b1), f->block_bytes), f->n_embd,
		f->n_heads, f->n_kv_heads, f->head_dim, f->n_ff, f->qblock,
		f->n_vocab, plan_fmt_bytes(b2, sizeof(b2), weights),
		f->tied_output ? " (output head tied to the embedding)" : "");
	print_devices(out, p);
	print_stages(out, p);
	print_shares(out, p, f, &z);
	print_comm(out, p, f);
	fprintf(out, "\nreason: %s\n", p->reason);
	print_warnings(out, p, f, &z);
}
