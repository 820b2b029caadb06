/*
 * plan.c - devices and the parallel plan (plan.h): device lists resolved
 * against this host, a model's facts read without its weights, the TP split
 * of heads and FFN columns, the cut of the blocks into balanced stages and
 * the planner of parallel = auto; plan_print.c prints what it decided.
 *
 * It decides; it runs nothing, and calls
 * neither CUDA nor the kernels (a CUDA device is refused here until the
 * CUDA backend exists).
 */
#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"
#include "daemon/engine/plan_impl.h"
#include "kernels/registry.h"

/*
 * What a device may fill with weights and KV: a CPU device this share of
 * its memory, a GPU its memory less a reserve for the CUDA context,
 * activations and NCCL buffers (bench/README's cost model).  The rest is
 * for scratch buffers, the runtime and the rest of the system.
 */
#define USABLE_PCT 90
#define GPU_RESERVE_BYTES 6000000000ull

static int fail(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* "81.3 MiB" into buf. */
const char *plan_fmt_bytes(char *buf, size_t len, uint64_t b)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)b;
	int u = -1;

	if (b < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)b);
		return buf;
	}
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

uint64_t pg_mem_available(void)
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
	return (uint64_t)kb * 1024;
}

/* The CPUs this process may run on, ascending; at least one. */
int plan_host_cpus(int *cpus, int max)
{
	cpu_set_t set;
	long n_onln;
	int n = 0;

	if (!sched_getaffinity(0, sizeof(set), &set)) {
		for (int c = 0; c < CPU_SETSIZE && n < max; c++)
			if (CPU_ISSET(c, &set))
				cpus[n++] = c;
		if (n)
			return n;
	}
	n_onln = sysconf(_SC_NPROCESSORS_ONLN);
	for (long c = 0; c < n_onln && n < max; c++)
		cpus[n++] = (int)c;
	if (!n)
		cpus[n++] = 0;
	return n;
}

/* ---- device lists ---- */

/* One entry of a device list, before it is resolved. */
struct dev_name {
	enum pg_device_kind kind;
	int index;
};

static int parse_entry(const char *s, size_t len, struct dev_name *d,
		       char *err, size_t err_len)
{
	const char *p = s, *end = s + len;
	size_t plen;
	long v = 0;

	while (p < end && *p == ' ')
		p++;
	while (end > p && end[-1] == ' ')
		end--;
	if (end - p > 5 && !strncmp(p, "cuda:", 5)) {
		d->kind = PG_DEV_CUDA;
		plen = 5;
	} else if (end - p > 4 && !strncmp(p, "cpu:", 4)) {
		d->kind = PG_DEV_CPU;
		plen = 4;
	} else {
		goto bad;
	}
	for (const char *q = p + plen; q < end; q++) {
		if (*q < '0' || *q > '9' || v > 1023)
			goto bad;
		v = v * 10 + (*q - '0');
	}
	if (v > 1023)
		goto bad;
	d->index = (int)v;
	return 0;
bad:
	return fail(err, err_len, "device '%.*s': expected cpu:N or cuda:N with N in 0..1023 (for example --devices cpu:0,cpu:1)",
		    (int)(len > 64 ? 64 : len), s);
}

static int name_seen(const struct dev_name *names, int n,
		     const struct dev_name *d)
{
	for (int i = 0; i < n; i++)
		if (names[i].kind == d->kind && names[i].index == d->index)
			return 1;
	return 0;
}

/* Split spec at commas into names[]; returns the count or -EINVAL. */
static int parse_names(const char *spec, struct dev_name *names, int max,
		       char *err, size_t err_len)
{
	const char *p = spec;
	int n = 0, rc;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		struct dev_name d;

		if (n == max)
			return fail(err, err_len, "devices '%s': more than %d devices",
				    spec, max);
		if ((rc = parse_entry(p, len, &d, err, err_len)))
			return rc;
		if (name_seen(names, n, &d))
			return fail(err, err_len, "devices '%s': %s:%d is named twice",
				    spec, d.kind == PG_DEV_CPU ? "cpu" : "cuda", d.index);
		names[n++] = d;
		if (!comma)
			return n;
		p = comma + 1;
	}
}

/*
 * The kinds of devices named: mixed lists and CUDA are refused for now, so
 * that a list that passes is cpu:0 .. cpu:n-1 in some order.
 */
static int check_kinds(const char *spec, const struct dev_name *names, int n,
		       char *err, size_t err_len)
{
	int cuda = -1, cpu = -1;

	for (int i = 0; i < n; i++) {
		if (names[i].kind == PG_DEV_CUDA && cuda < 0)
			cuda = i;
		if (names[i].kind == PG_DEV_CPU && cpu < 0)
			cpu = i;
	}
	if (cuda >= 0 && cpu >= 0)
		return fail(err, err_len, "devices '%s': cpu:%d and cuda:%d in one plan: CPU and CUDA devices cannot be mixed; name only cpu:N or only cuda:N devices",
			    spec, names[cpu].index, names[cuda].index);
	if (cuda >= 0 && pg_backend_built(PG_BACKEND_CUDA))
		return 0;
	if (cuda >= 0)
		return fail(err, err_len, "cuda:%d: this pagodad was built without CUDA; rebuild with ./configure --with-cuda",
			    names[cuda].index);
	for (int i = 0; i < n; i++)
		if (names[i].index >= n)
			return n == 1 ?
				fail(err, err_len, "cpu:%d: with one CPU device, name it cpu:0 (cpu:N is the N-th group of this host's CPUs)",
				     names[i].index) :
				fail(err, err_len, "cpu:%d: with %d CPU devices, name them cpu:0 .. cpu:%d (cpu:N is the N-th group of this host's CPUs)",
				     names[i].index, n, n - 1);
	return 0;
}

/*
 * The NUMA nodes that hold some of the process's CPUs, ascending, at most
 * max; 0 when libnuma says there is no NUMA.
 */
static int numa_nodes_with_cpus(const int *cpus, int n_cpus, int *nodes,
				int max)
{
	int n = 0;

	if (numa_available() < 0)
		return 0;
	for (int node = 0; node <= numa_max_node() && n < max; node++) {
		if (!numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node))
			continue;
		for (int i = 0; i < n_cpus; i++)
			if (numa_node_of_cpu(cpus[i]) == node) {
				nodes[n++] = node;
				break;
			}
	}
	return n;
}

/* CPU group g of k: NUMA node nodes[g]'s CPUs. */
static void cpu_group_numa(struct pg_device *d, int node, const int *cpus,
			   int n_cpus)
{
	long long free_bytes = 0;

	d->numa_node = node;
	d->n_cpus = 0;
	for (int i = 0; i < n_cpus; i++)
		if (numa_node_of_cpu(cpus[i]) == node)
			d->cpus[d->n_cpus++] = cpus[i];
	if (numa_node_size64(node, &free_bytes) >= 0 && free_bytes > 0)
		d->mem_bytes = (uint64_t)free_bytes;
}

/* CPU group g of k: the g-th equal contiguous slice, or one shared CPU. */
static void cpu_group_even(struct pg_device *d, int g, int k,
			   const int *cpus, int n_cpus, uint64_t mem)
{
	d->numa_node = -1;
	d->mem_bytes = mem;
	if (k > n_cpus) {
		d->cpus[0] = cpus[g % n_cpus];
		d->n_cpus = 1;
		return;
	}
	d->n_cpus = 0;
	for (int i = g * n_cpus / k; i < (g + 1) * n_cpus / k; i++)
		d->cpus[d->n_cpus++] = cpus[i];
}

/*
 * CPU device g of k takes CPU group g.  One CPU device is the whole host
 * (every CPU, memory not bound): NUMA groups start at two devices.
 */
static void resolve_cpus(const struct dev_name *names, int k, int n_threads,
			 struct pg_device *out)
{
	int cpus[PG_DEVICE_MAX_CPUS], nodes[PG_PLAN_MAX_DEVICES];
	int n_cpus = plan_host_cpus(cpus, PG_DEVICE_MAX_CPUS);
	int numa = k > 1 && numa_nodes_with_cpus(cpus, n_cpus, nodes, k) == k;
	uint64_t mem = numa ? 0 : pg_mem_available();

	for (int i = 0; i < k; i++) {
		struct pg_device *d = &out[i];

		memset(d, 0, sizeof(*d));
		d->kind = PG_DEV_CPU;
		d->index = names[i].index;
		snprintf(d->name, sizeof(d->name), "cpu:%d", d->index);
		if (numa)
			cpu_group_numa(d, nodes[d->index], cpus, n_cpus);
		else
			cpu_group_even(d, d->index, k, cpus, n_cpus, mem);
		d->n_threads = n_threads > 0 ? n_threads : d->n_cpus;
	}
}

/*
 * cuda:N devices (parse_names has refused repeats): each a visible GPU,
 * with the memory it has free now (the planner's budget).  Peer links are
 * not probed (fast_links 0).
 */
static int resolve_cuda(const struct dev_name *names, int k,
			struct pg_device *out, char *err, size_t err_len)
{
	int count = pg_gpu_count();

	for (int i = 0; i < k; i++) {
		struct pg_gpu_info info;
		struct pg_device *d = &out[i];
		char why[256];

		if (count == 0)
			return fail(err, err_len, "cuda:%d: no CUDA device is visible (no NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES hides them; see nvidia-smi); use cpu:N devices",
				    names[i].index);
		if (names[i].index >= count)
			return fail(err, err_len, "cuda:%d: this host has %d CUDA device%s (cuda:0 .. cuda:%d)",
				    names[i].index, count, count == 1 ? "" : "s",
				    count - 1);
		if (pg_gpu_info(names[i].index, &info, why, sizeof(why)))
			return fail(err, err_len, "cuda:%d: %s", names[i].index,
				    why);
		memset(d, 0, sizeof(*d));
		d->kind = PG_DEV_CUDA;
		d->index = names[i].index;
		/* parse_names keeps N in 0 .. 1023 */
		snprintf(d->name, sizeof(d->name), "cuda:%u",
			 (unsigned int)d->index & 1023u);
		d->numa_node = -1;
		d->mem_bytes = info.free_bytes;
	}
	return k;
}

int pg_devices_parse(const char *spec, int n_threads, struct pg_device *out,
		     int max, char *err, size_t err_len)
{
	struct dev_name names[PG_PLAN_MAX_DEVICES];
	int n, rc;

	if (!spec || !*spec)
		spec = "cpu:0";
	if (max > PG_PLAN_MAX_DEVICES)
		max = PG_PLAN_MAX_DEVICES;
	n = parse_names(spec, names, max, err, err_len);
	if (n < 0)
		return n;
	if ((rc = check_kinds(spec, names, n, err, err_len)))
		return rc;
	if (names[0].kind == PG_DEV_CUDA)
		return resolve_cuda(names, n, out, err, err_len);
	resolve_cpus(names, n, n_threads, out);
	return n;
}

/* ---- model facts ---- */

struct facts_reader {
	struct gguf_file *g;
	char *err;
	size_t err_len;
};

/* The hyper-parameters, as the model loader reads and checks them. */
static int fr_hparams(struct facts_reader *r, struct pg_model_facts *f)
{
	struct pg_hparams hp;
	struct pg_arch arch;
	int rc = pg_hparams_read(r->g, &hp, &arch, r->err, r->err_len);

	if (rc)
		return rc;
	f->n_blocks = hp.n_blocks;
	f->n_embd = hp.n_embd;
	f->n_ff = hp.n_ff;
	f->n_heads = hp.n_heads;
	f->n_kv_heads = hp.n_kv_heads;
	f->n_ctx_train = hp.n_ctx_train;
	f->head_dim = hp.head_dim;
	return 0;
}

/* Embedding, output head, and the bytes and quantisation of blk.0. */
static int fr_tensors(struct facts_reader *r, struct pg_model_facts *f)
{
	const struct gguf_tensor *embd = gguf_find_tensor(r->g, "token_embd.weight");
	const struct gguf_tensor *out = gguf_find_tensor(r->g, "output.weight");

	if (!embd)
		return fail(r->err, r->err_len, "%s: tensor token_embd.weight is missing (a vocabulary-only file cannot be planned)",
			    gguf_path(r->g));
	f->n_vocab = (int)(embd->ne[1] > (1u << 24) ? 1u << 24 : embd->ne[1]);
	f->embd_bytes = embd->n_bytes;
	f->tied_output = !out;
	f->output_bytes = out ? out->n_bytes : embd->n_bytes;
	f->qblock = 1;
	for (uint64_t i = 0; i < gguf_n_tensors(r->g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(r->g, i);
		int bs = pg_dtype_block_size(t->type);

		if (t->name.len < 6 || memcmp(t->name.ptr, "blk.0.", 6))
			continue;
		f->block_bytes += t->n_bytes;
		if (t->n_dims >= 2 && bs > f->qblock)
			f->qblock = bs;
	}
	if (!f->block_bytes)
		return fail(r->err, r->err_len, "%s: no blk.0.* tensors", gguf_path(r->g));
	return 0;
}

int pg_model_facts_read(const char *path, struct pg_model_facts *f,
			char *err, size_t err_len)
{
	struct facts_reader r = { .err = err, .err_len = err_len };
	int rc;

	memset(f, 0, sizeof(*f));
	rc = gguf_open(path, &r.g, err, err_len);
	if (rc)
		return rc;
	rc = fr_hparams(&r, f);
	if (!rc)
		rc = fr_tensors(&r, f);
	gguf_close(r.g);
	return rc;
}

static uint64_t matrix_bytes(const struct pg_matrix *m)
{
	return (uint64_t)m->row_bytes * (uint64_t)m->n_rows;
}

/* Norms and biases count as F32: the loader keeps them so. */
void pg_model_facts_of(const struct pg_model *m, struct pg_model_facts *f)
{
	const struct pg_hparams *hp = &m->hp;
	const struct pg_block_weights *b = &m->blocks[0];
	const struct pg_matrix *mat[] = {
		&b->wq, &b->wk, &b->wv, &b->wo, &b->w_gate, &b->w_up, &b->w_down,
	};
	uint64_t q_dim = (uint64_t)hp->n_heads * hp->head_dim;
	uint64_t kv_dim = (uint64_t)hp->n_kv_heads * hp->head_dim;

	memset(f, 0, sizeof(*f));
	f->n_blocks = hp->n_blocks;
	f->n_embd = hp->n_embd;
	f->n_heads = hp->n_heads;
	f->n_kv_heads = hp->n_kv_heads;
	f->head_dim = hp->head_dim;
	f->n_ff = hp->n_ff;
	f->n_vocab = hp->n_vocab;
	f->n_ctx_train = hp->n_ctx_train;
	f->qblock = 1;
	f->block_bytes = 2 * 4 * (uint64_t)hp->n_embd;
	if (b->bq)
		f->block_bytes += 4 * (q_dim + 2 * kv_dim);
	if (b->q_norm)		/* Qwen3, Gemma 3: per-head Q and K norms */
		f->block_bytes += 2 * 4 * (uint64_t)hp->head_dim;
	if (b->attn_post_norm)	/* Gemma 2, 3 */
		f->block_bytes += 2 * 4 * (uint64_t)hp->n_embd;
	for (size_t i = 0; i < sizeof(mat) / sizeof(mat[0]); i++) {
		int bs = pg_dtype_block_size(mat[i]->type);

		f->block_bytes += matrix_bytes(mat[i]);
		if (bs > f->qblock)
			f->qblock = bs;
	}
	f->embd_bytes = matrix_bytes(&m->tok_embd);
	f->output_bytes = matrix_bytes(&m->output);
	f->tied_output = m->tied_output;
}

/* ---- the TP split and the stage cut ---- */

void pg_plan_tp_heads(int n_heads, int n_kv_heads, int tp, int t,
		      int *h0, int *h1, int *k0, int *k1)
{
	int group = n_heads / n_kv_heads;

	*h0 = t * n_heads / tp;
	*h1 = (t + 1) * n_heads / tp;
	*k0 = *h0 / group;
	*k1 = (*h1 - 1) / group + 1;
}

void pg_plan_tp_ffn(int n_ff, int qblock, int tp, int t, int *f0, int *f1)
{
	int nb = n_ff / qblock;

	*f0 = (t * nb / tp) * qblock;
	*f1 = ((t + 1) * nb / tp) * qblock;
}

int pg_plan_tp_parts(int n, int unit, int qblock, int lo, int hi,
		     int64_t *cols)
{
	int k = 0;

	cols[0] = 0;
	for (int s = 1; s < PG_PLAN_EXACT_SPLITS; s++) {
		int b = s * n / PG_PLAN_EXACT_SPLITS;
		int64_t c = (int64_t)(b - lo) * unit;

		if (b > lo && b < hi && c > cols[k] &&
		    ((int64_t)b * unit) % qblock == 0)
			cols[++k] = c;
	}
	cols[++k] = (int64_t)(hi - lo) * unit;
	return k;
}

int pg_plan_tp_rank_parts(int n_heads, int n_kv_heads, int head_dim,
			  int n_ff, int wdown, int qblock, int tp, int t,
			  int64_t *cols)
{
	int h0, h1, k0, k1, f0, f1;

	if (!wdown) {
		pg_plan_tp_heads(n_heads, n_kv_heads, tp, t, &h0, &h1, &k0, &k1);
		return pg_plan_tp_parts(n_heads, head_dim, qblock, h0, h1, cols);
	}
	pg_plan_tp_ffn(n_ff, qblock, tp, t, &f0, &f1);
	return pg_plan_tp_parts(n_ff / qblock, qblock, qblock, f0 / qblock,
				f1 / qblock, cols);
}

/*
 * Fill stages from the last backwards, each with as many blocks as bound
 * allows (the last stage starts at last_extra).  start[k] = the first block
 * covered by the last k stages (0 once everything is covered).  This is
 * the least start from which k stages within bound can cover the rest, so
 * the bound is feasible iff start[pp] == 0.
 */
static void cut_backwards(const uint64_t *cost, int n, uint64_t last_extra,
			  int pp, uint64_t bound, int *start)
{
	int pos = n;

	start[0] = n;
	for (int k = 1; k <= pp; k++) {
		uint64_t used = k == 1 ? last_extra : 0;

		while (pos > 0 && used + cost[pos - 1] <= bound)
			used += cost[--pos];
		start[k] = pos;
	}
}

/* The least bound on the largest stage cost that pp stages can meet. */
static uint64_t cut_bound(const uint64_t *cost, int n, uint64_t last_extra,
			  int pp, int *start)
{
	uint64_t lo = cost[n - 1] + last_extra, hi = last_extra;

	for (int i = 0; i < n; i++) {
		hi += cost[i];
		if (cost[i] > lo)
			lo = cost[i];
	}
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		cut_backwards(cost, n, last_extra, pp, mid, start);
		if (start[pp] == 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

int pg_plan_cut(const uint64_t *cost, int n_blocks, uint64_t last_extra,
		int pp, int *first_block)
{
	int start[PG_PLAN_MAX_DEVICES + 1];
	uint64_t bound, total = last_extra, before = 0;

	if (pp < 1 || pp > n_blocks || pp > PG_PLAN_MAX_DEVICES)
		return -EINVAL;
	bound = cut_bound(cost, n_blocks, last_extra, pp, start);
	cut_backwards(cost, n_blocks, last_extra, pp, bound, start);
	for (int i = 0; i < n_blocks; i++)
		total += cost[i];
	/*
	 * Any boundary between the least feasible one (start[]) and the
	 * furthest the stage's bound reaches keeps the rest feasible; take
	 * the one whose cost so far is nearest s / pp of the total.
	 */
	first_block[0] = 0;
	for (int s = 1; s < pp; s++) {
		uint64_t target = total / (uint64_t)pp * (uint64_t)s +
				  total % (uint64_t)pp * (uint64_t)s / (uint64_t)pp;
		uint64_t stage = 0, best_d = UINT64_MAX, best_sum = before;
		int lo = start[pp - s], b = first_block[s - 1], best = b + 1;

		for (int pos = b + 1; pos <= n_blocks - (pp - s); pos++) {
			stage += cost[pos - 1];
			if (stage > bound)
				break;
			if (pos >= lo && dist(before + stage, target) < best_d) {
				best_d = dist(before + stage, target);
				best = pos;
				best_sum = before + stage;
			}
		}
		first_block[s] = best;
		before = best_sum;
	}
	first_block[pp] = n_blocks;
	return 0;
}

/* ---- sizes ---- */

struct sizing plan_sizing_of(const struct pg_plan_request *req,
			       const struct pg_model_facts *f)
{
	struct sizing z = {
		.ctx_tokens = req && req->ctx_tokens > 0 ? req->ctx_tokens : f->n_ctx_train,
		.batch_seqs = req && req->batch_seqs > 0 ? req->batch_seqs : 4,
		.kv_elem = req && req->kv_bytes_per_elem > 0 ? req->kv_bytes_per_elem : 2,
		.page_tokens = req && req->page_tokens > 0 ? req->page_tokens : 16,
	};

	return z;
}

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

static int same_memory(const struct pg_device *a, const struct pg_device *b);

/*
 * Device i of plan p: its place in its replica's group, and whether it
 * reads the weights of replica 0's device there (CPU devices on one
 * memory: forward.c shares them), then that device, else -1.
 */
static int replica_weights_of(const struct pg_plan *p, int i, int *li)
{
	int per = p->pp * p->tp * p->cp;

	*li = i % per;
	if (i < per || p->dev[i].kind != PG_DEV_CPU ||
	    p->dev[*li].kind != PG_DEV_CPU ||
	    !same_memory(&p->dev[i], &p->dev[*li]))
		return -1;
	return *li;
}

void plan_share_of(const struct pg_plan *p, const struct pg_model_facts *f,
		     const struct sizing *z, int i, struct share *sh)
{
	int li, of = replica_weights_of(p, i, &li);
	int s = li / (p->tp * p->cp), t = li / p->cp % p->tp;
	uint64_t per_token;

	pg_plan_tp_heads(f->n_heads, f->n_kv_heads, p->tp, t, &sh->h0, &sh->h1,
			 &sh->k0, &sh->k1);
	pg_plan_tp_ffn(f->n_ff, f->qblock, p->tp, t, &sh->f0, &sh->f1);
	sh->n_blocks = p->first_block[s + 1] - p->first_block[s];
	sh->weights = (uint64_t)sh->n_blocks * f->block_bytes / (uint64_t)p->tp;
	if (s == 0)
		sh->weights += f->embd_bytes;
	if (s == p->pp - 1 && !(f->tied_output && s == 0))
		sh->weights += f->output_bytes;
	sh->weights_of = of;
	if (of >= 0)
		sh->weights = 0;
	per_token = 2ull * (uint64_t)(sh->k1 - sh->k0) * (uint64_t)f->head_dim *
		    (uint64_t)z->kv_elem * (uint64_t)sh->n_blocks;
	sh->kv_seq = div_up((uint64_t)z->ctx_tokens, (uint64_t)p->cp) * per_token;
	sh->kv = sh->kv_seq * (uint64_t)z->batch_seqs;
}

static uint64_t usable(const struct pg_device *d)
{
	if (d->kind == PG_DEV_CUDA)
		return d->mem_bytes > GPU_RESERVE_BYTES ?
		       d->mem_bytes - GPU_RESERVE_BYTES : 0;
	return d->mem_bytes / 100 * USABLE_PCT;
}

/* "57.6 GiB usable (90% of 64.0 GiB)" into buf. */
static const char *fmt_usable(char *buf, size_t len, const struct pg_device *d)
{
	char b1[32], b2[32];

	if (!d->mem_bytes)
		snprintf(buf, len, "unknown memory (assumed enough)");
	else if (d->kind == PG_DEV_CUDA)
		snprintf(buf, len, "%s usable (%s less 6 GB)",
			 plan_fmt_bytes(b1, sizeof(b1), usable(d)),
			 plan_fmt_bytes(b2, sizeof(b2), d->mem_bytes));
	else
		snprintf(buf, len, "%s usable (%d%% of %s)",
			 plan_fmt_bytes(b1, sizeof(b1), usable(d)), USABLE_PCT,
			 plan_fmt_bytes(b2, sizeof(b2), d->mem_bytes));
	return buf;
}

/*
 * Devices that draw on one memory: CPU devices on the same NUMA node, or
 * on none (MemAvailable).  A CUDA device has its own.
 */
static int same_memory(const struct pg_device *a, const struct pg_device *b)
{
	return a == b || (a->kind == PG_DEV_CPU && b->kind == PG_DEV_CPU &&
			  a->numa_node == b->numa_node);
}

/* Whether device i is the first of the plan's devices on its memory. */
static int first_on_memory(const struct pg_plan *p, int i)
{
	for (int j = 0; j < i; j++)
		if (same_memory(&p->dev[i], &p->dev[j]))
			return 0;
	return 1;
}

void plan_fit(const struct pg_plan *p, const struct pg_model_facts *f,
		     const struct sizing *z, struct fit *fit)
{
	double worst = -1;
	struct share sh;

	memset(fit, 0, sizeof(*fit));
	fit->fits = 1;
	for (int i = 0; i < p->n_devices; i++) {
		uint64_t need = 0, have = usable(&p->dev[i]);

		if (!have || !first_on_memory(p, i))
			continue;
		for (int j = i; j < p->n_devices; j++)
			if (same_memory(&p->dev[i], &p->dev[j])) {
				plan_share_of(p, f, z, j, &sh);
				need += sh.weights + sh.kv;
			}
		if (need > have)
			fit->fits = 0;
		if ((double)need / (double)have > worst) {
			worst = (double)need / (double)have;
			fit->dev = i;
			fit->need = need;
			fit->have = have;
		}
	}
}

/* ---- making a plan ---- */

static int check_facts(const struct pg_model_facts *f, char *err,
		       size_t err_len)
{
	if (f->n_blocks < 1 || f->n_heads < 1 || f->n_kv_heads < 1 ||
	    f->n_heads % f->n_kv_heads || f->head_dim < 1 || f->n_embd < 1 ||
	    f->qblock < 1 || f->n_ff < f->qblock || f->n_ff % f->qblock)
		return fail(err, err_len, "the model's facts are inconsistent (%d blocks, %d heads, %d KV heads, FFN %d in blocks of %d)",
			    f->n_blocks, f->n_heads, f->n_kv_heads, f->n_ff, f->qblock);
	return 0;
}

/* Whether pp, tp, cp can split model f at all; the message says why not. */
static int check_counts(int pp, int tp, int cp, const struct pg_model_facts *f,
			const struct sizing *z, char *err, size_t err_len)
{
	int nb = f->n_ff / f->qblock;
	int max_tp = f->n_heads < nb ? f->n_heads : nb;

	if (pp < 1 || tp < 1 || cp < 1)
		return fail(err, err_len, "--pipeline-parallel %d, --tensor-parallel %d, --context-parallel %d: each must be at least 1",
			    pp, tp, cp);
	if (pp > f->n_blocks)
		return fail(err, err_len, "--pipeline-parallel %d: the model has %d blocks and every stage needs at least one; use at most %d stages",
			    pp, f->n_blocks, f->n_blocks);
	if (tp > f->n_heads)
		return fail(err, err_len, "--tensor-parallel %d: the model has %d attention heads and every TP rank needs at least one; use at most %d",
			    tp, f->n_heads, max_tp);
	if (tp > nb)
		return fail(err, err_len, "--tensor-parallel %d: the FFN's %d columns make %d quantisation blocks of %d and every TP rank needs at least one; use at most %d",
			    tp, f->n_ff, nb, f->qblock, max_tp);
	if (cp > z->page_tokens || z->page_tokens % cp)
		return fail(err, err_len, "--context-parallel %d: each KV page (page_tokens = %d tokens) is divided among the CP ranks by token, so the count must divide %d",
			    cp, z->page_tokens, z->page_tokens);
	if ((long)pp * tp * cp > PG_PLAN_MAX_DEVICES)
		return fail(err, err_len, "%d x %d x %d devices: at most %d",
			    pp, tp, cp, PG_PLAN_MAX_DEVICES);
	return 0;
}

static int kv_replicated(const struct pg_model_facts *f, int tp)
{
	int h0, h1, k0, k1, prev_k1 = 0;

	for (int t = 0; t < tp; t++) {
		pg_plan_tp_heads(f->n_heads, f->n_kv_heads, tp, t, &h0, &h1, &k0, &k1);
		if (t && k0 < prev_k1)
			return 1;
		prev_k1 = k1;
	}
	return 0;
}

/*
 * Multiply-adds per token of one block and of the output head: what a
 * stage of one-thread-per-core CPU devices spends its time on (8-bit dot
 * products are compute-bound there), where a GPU's decode step is bound
 * by the bytes it reads.
 */
static uint64_t block_macs(const struct pg_model_facts *f)
{
	uint64_t d = (uint64_t)f->n_embd;
	uint64_t q = (uint64_t)f->n_heads * (uint64_t)f->head_dim;
	uint64_t kv = (uint64_t)f->n_kv_heads * (uint64_t)f->head_dim;

	return d * (q + 2 * kv) + q * d + 3 * d * (uint64_t)f->n_ff;
}

/*
 * Fill p with pp x tp x cp of dev[] and the cut.  Blocks all cost the
 * same; the last stage also pays for the output head.  The cost is
 * multiply-adds for CPU devices and bytes for GPUs (decode reads each
 * weight once per step): on SmolLM2 a Q8_0 output head weighs 14 Q4_1
 * blocks in bytes but 8 in multiply-adds.
 */
static int plan_build(struct pg_plan *p, const struct pg_device *dev, int pp,
		      int tp, int cp, const struct pg_model_facts *f,
		      const struct sizing *z, char *err, size_t err_len)
{
	uint64_t *cost;
	int cpu, rc = check_counts(pp, tp, cp, f, z, err, err_len);

	if (rc)
		return rc;
	cost = malloc(sizeof(*cost) * (size_t)f->n_blocks);
	if (!cost)
		return -ENOMEM;
	cpu = dev[0].kind == PG_DEV_CPU;
	for (int i = 0; i < f->n_blocks; i++)
		cost[i] = cpu ? block_macs(f) : f->block_bytes;
	rc = pg_plan_cut(cost, f->n_blocks,
			 cpu ? (uint64_t)f->n_vocab * (uint64_t)f->n_embd :
			       f->output_bytes, pp, p->first_block);
	free(cost);
	if (rc)
		return fail(err, err_len, "cannot cut %d blocks into %d stages", f->n_blocks, pp);
	p->pp = pp;
	p->tp = tp;
	p->cp = cp;
	p->replicas = 1;
	p->n_devices = pp * tp * cp;
	memcpy(p->dev, dev, sizeof(*dev) * (size_t)p->n_devices);
	p->kv_replicated = kv_replicated(f, tp);
	snprintf(p->reason, sizeof(p->reason), "as configured");
	return 0;
}

/*
 * The counts of a manual plan: tp and cp default to 1, pp to the devices
 * left over.
 */
static int manual_counts(const struct pg_plan_request *req, int n_dev,
			 int n_blocks, int *pp, int *tp, int *cp, char *err,
			 size_t err_len)
{
	*tp = req->tensor_parallel ? req->tensor_parallel : 1;
	*cp = req->context_parallel ? req->context_parallel : 1;
	*pp = req->pipeline_parallel;
	if (*tp < 1 || *cp < 1 || *pp < 0)
		return fail(err, err_len, "--pipeline-parallel %d, --tensor-parallel %d, --context-parallel %d: each must be at least 1",
			    *pp, *tp, *cp);
	if (!*pp && n_dev % (*tp * *cp))
		return fail(err, err_len, "%d devices do not make whole groups of --tensor-parallel %d x --context-parallel %d; name a multiple of %d devices",
			    n_dev, *tp, *cp, *tp * *cp);
	if (!*pp && n_dev / (*tp * *cp) > n_blocks)
		return fail(err, err_len, "%d devices make %d pipeline stages, but the model has %d blocks and every stage needs at least one; name fewer devices or give --tensor-parallel or --context-parallel",
			    n_dev, n_dev / (*tp * *cp), n_blocks);
	if (!*pp)
		*pp = n_dev / (*tp * *cp);
	if ((long)*pp * *tp * *cp != n_dev)
		return fail(err, err_len, "--pipeline-parallel %d x --tensor-parallel %d x --context-parallel %d = %ld devices, but %d %s named; name %ld devices with --devices (e.g. cpu:0,cpu:1) or change the counts",
			    *pp, *tp, *cp, (long)*pp * *tp * *cp, n_dev,
			    n_dev == 1 ? "device is" : "devices are",
			    (long)*pp * *tp * *cp);
	return 0;
}

/* Devices of the request: given, parsed, or cpu:0 .. cpu:n-1 for counts. */
static int request_devices(const struct pg_plan_request *req,
			   struct pg_device *dev, char *err, size_t err_len)
{
	char spec[PG_PLAN_MAX_DEVICES * 8];
	long n = 1;
	size_t len = 0;

	if (req->n_devs > 0) {
		if (req->n_devs > PG_PLAN_MAX_DEVICES)
			return fail(err, err_len, "%d devices: at most %d",
				    req->n_devs, PG_PLAN_MAX_DEVICES);
		memcpy(dev, req->devs, sizeof(*dev) * (size_t)req->n_devs);
		return req->n_devs;
	}
	if (req->devices || req->autoplan)
		return pg_devices_parse(req->devices, req->n_threads, dev,
					PG_PLAN_MAX_DEVICES, err, err_len);
	n = (long)(req->pipeline_parallel > 0 ? req->pipeline_parallel : 1) *
	    (req->tensor_parallel > 0 ? req->tensor_parallel : 1) *
	    (req->context_parallel > 0 ? req->context_parallel : 1);
	if (n > PG_PLAN_MAX_DEVICES)
		return fail(err, err_len, "%ld devices: at most %d", n, PG_PLAN_MAX_DEVICES);
	spec[0] = '\0';
	for (long i = 0; i < n; i++)
		len += (size_t)snprintf(spec + len, sizeof(spec) - len, "%scpu:%ld",
					i ? "," : "", i);
	return pg_devices_parse(spec, req->n_threads, dev, PG_PLAN_MAX_DEVICES,
				err, err_len);
}

/* ---- parallel = auto ---- */

/* What the planner works from. */
struct autoplan {
	const struct pg_device *dev;
	int n_dev;
	const struct pg_model_facts *f;
	struct sizing z;
	int tp_kind;		/* split by TP (fast links), else by PP */
	int x_max;		/* the most ranks or stages the split allows */
	struct pg_plan *p;
};

/* Build (x-way split, cp) into a->p; 0 when it is possible. */
static int ap_build(struct autoplan *a, int x, int cp)
{
	char err[256];

	return plan_build(a->p, a->dev, a->tp_kind ? 1 : x, a->tp_kind ? x : 1,
			  cp, a->f, &a->z, err, sizeof(err));
}

static int fast_linked(const struct pg_device *dev, int n)
{
	for (int i = 0; i < n; i++)
		if (dev[i].kind != PG_DEV_CUDA || !dev[i].fast_links)
			return 0;
	return n > 1;
}

/* The largest split ap_build accepts, at most n_dev. */
static int ap_x_max(struct autoplan *a)
{
	for (int x = a->n_dev; x > 1; x--)
		if (!ap_build(a, x, 1))
			return x;
	return 1;
}

static int one_memory(const struct pg_device *dev, int n)
{
	for (int i = 1; i < n; i++)
		if (!same_memory(&dev[0], &dev[i]))
			return 0;
	return n > 1;
}

/*
 * "; 2 other devices unused (...)" or "": a model split over several
 * devices is not replicated yet; one device's copies stop where memory
 * does.
 */
static void unused_note(const struct autoplan *a, char *buf, size_t len)
{
	int n = a->n_dev - a->p->n_devices;
	int split = a->p->pp * a->p->tp * a->p->cp > 1;

	buf[0] = '\0';
	if (n > 0)
		snprintf(buf, len, "; %d other device%s unused (%s)",
			 n, n == 1 ? "" : "s", split ?
			 "replicas of a split model are not built yet" :
			 "one more copy of the model does not fit their memory");
}

static void ap_reason(struct autoplan *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void ap_reason(struct autoplan *a, const char *fmt, ...)
{
	char note[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(a->p->reason, sizeof(a->p->reason), fmt, ap);
	va_end(ap);
	unused_note(a, note, sizeof(note));
	if (n >= 0 && (size_t)n < sizeof(a->p->reason))
		snprintf(a->p->reason + n, sizeof(a->p->reason) - (size_t)n, "%s", note);
}

/* Which split, and why: fast links make TP worth its all-reduces. */
static const char *ap_split_why(const struct autoplan *a)
{
	if (a->tp_kind)
		return "the CUDA devices have fast peer links, so tensor parallelism: TP ranks";
	if (a->dev[0].kind == PG_DEV_CUDA)
		return "links between the CUDA devices cannot be probed yet (treated as slow), so a pipeline: stages";
	return "CPU devices (NUMA nodes) are joined by slow links, so a pipeline: stages";
}

/* The device with the least memory, of those whose memory is known. */
static int smallest_device(const struct pg_device *dev, int n)
{
	int small = 0;

	for (int i = 1; i < n; i++)
		if (dev[i].mem_bytes && (!dev[small].mem_bytes ||
					 dev[i].mem_bytes < dev[small].mem_bytes))
			small = i;
	return small;
}

/*
 * Whether the whole model fits the smallest device; the figures in head,
 * for the reason.
 */
static int ap_fits_one(struct autoplan *a, char *head, size_t head_len)
{
	const struct pg_device *small = &a->dev[smallest_device(a->dev, a->n_dev)];
	char b1[32], b2[32], b3[32], b4[80];
	struct share sh;

	ap_build(a, 1, 1);
	plan_share_of(a->p, a->f, &a->z, 0, &sh);
	snprintf(head, head_len, "weights %s + KV %s for %d x %d tokens = %s; the smallest device, %s, has %s",
		 plan_fmt_bytes(b1, sizeof(b1), sh.weights), plan_fmt_bytes(b2, sizeof(b2), sh.kv),
		 a->z.batch_seqs, a->z.ctx_tokens,
		 plan_fmt_bytes(b3, sizeof(b3), sh.weights + sh.kv), small->name,
		 fmt_usable(b4, sizeof(b4), small));
	return !small->mem_bytes || sh.weights + sh.kv <= usable(small);
}

/*
 * The model fits one device: as many replicas as fit, one a device (the
 * first r), each a whole copy serving its own sequences.  Replicas on one
 * memory share their weights but not their KV.
 */
static void ap_replicas(struct autoplan *a, const char *head)
{
	char b1[32], b2[32];
	struct fit fit;
	int r;

	for (r = a->n_dev; r > 1; r--) {
		ap_build(a, 1, 1);
		a->p->replicas = r;
		a->p->n_devices = r;
		memcpy(a->p->dev, a->dev, sizeof(*a->dev) * (size_t)r);
		plan_fit(a->p, a->f, &a->z, &fit);
		if (fit.fits)
			break;
	}
	if (r == 1) {
		ap_build(a, 1, 1);
		ap_reason(a, "fits one device: %s", head);
		return;
	}
	ap_reason(a, "fits one device: %s; so %d replicas, one a device, each a whole copy of the model serving its own share of the sequences (data parallel, no communication; fullest memory: %s needs %s of %s)",
		  head, r, a->p->dev[fit.dev].name,
		  plan_fmt_bytes(b1, sizeof(b1), fit.need),
		  fit.have ? plan_fmt_bytes(b2, sizeof(b2), fit.have) : "unknown");
}

/* The fewest stages (or TP ranks) that fit, without CP. */
static int ap_split(struct autoplan *a, const char *head)
{
	char b1[32], b2[32];
	struct fit fit;

	for (int x = 2; x <= a->x_max; x++) {
		if (ap_build(a, x, 1))
			continue;
		plan_fit(a->p, a->f, &a->z, &fit);
		if (!fit.fits)
			continue;
		ap_reason(a, "%s; %s %d, the fewest that fit (fullest: %s needs %s of %s usable)",
			  head, ap_split_why(a), x, a->p->dev[fit.dev].name,
			  plan_fmt_bytes(b1, sizeof(b1), fit.need),
			  plan_fmt_bytes(b2, sizeof(b2), fit.have));
		return 1;
	}
	return 0;
}

/*
 * Whether one sequence of the context alone overflows a device of the
 * widest split: its weights fit, but its KV share exceeds what is left
 * (CP cannot help weights: every CP rank holds its stage's).  Builds the
 * widest split into a->p.
 */
static int ap_long_context(struct autoplan *a, int *dev_out)
{
	struct share sh;

	ap_build(a, a->x_max, 1);
	for (int i = 0; i < a->p->n_devices; i++) {
		uint64_t have = usable(&a->p->dev[i]);

		plan_share_of(a->p, a->f, &a->z, i, &sh);
		if (have > sh.weights && sh.kv_seq > have - sh.weights) {
			*dev_out = i;
			return 1;
		}
	}
	return 0;
}

/*
 * The split with CP ranks that fits on the fewest devices (fewer CP ranks
 * first: splitting by blocks or heads costs less communication than an
 * all-gather per block).
 */
static int ap_context(struct autoplan *a, const char *head, int long_dev)
{
	char b1[32], b2[32];
	struct fit fit;
	struct share sh;

	plan_share_of(a->p, a->f, &a->z, long_dev, &sh);
	plan_fmt_bytes(b1, sizeof(b1), sh.kv_seq);
	for (int d = 2; d <= a->n_dev; d++)
		for (int cp = 2; cp <= d && cp <= a->z.page_tokens; cp *= 2) {
			if (d % cp || ap_build(a, d / cp, cp))
				continue;
			plan_fit(a->p, a->f, &a->z, &fit);
			if (!fit.fits)
				continue;
			ap_reason(a, "%s; split %d ways (the most it allows), one sequence of %d tokens still needs %s of KV on %s, more than is left there after its weights; so the KV is also divided by token range: %s %d x CP %d (fullest: %s needs %s)",
				  head, a->x_max, a->z.ctx_tokens, b1,
				  a->dev[long_dev].name, a->tp_kind ? "TP" : "PP",
				  d / cp, cp, a->p->dev[fit.dev].name,
				  plan_fmt_bytes(b2, sizeof(b2), fit.need));
			return 1;
		}
	return 0;
}

/* Nothing fits: the widest split, and a reason that says what to change. */
static void ap_too_big(struct autoplan *a, const char *head)
{
	char b1[32], b2[32];
	struct fit fit;

	ap_build(a, a->x_max, 1);
	plan_fit(a->p, a->f, &a->z, &fit);
	if (a->x_max == 1) {
		ap_reason(a, "%s; there is no split to make (%d device%s): add devices (--devices) or plan for fewer tokens (--ctx-size)",
			  head, a->n_dev, a->n_dev == 1 ? "" : "s");
		return;
	}
	ap_reason(a, "%s; %s %d, the most the model allows, and still it does not fit (%s needs %s of %s usable)%s: add devices or plan for fewer tokens (--ctx-size)",
		  head, ap_split_why(a), a->x_max, a->p->dev[fit.dev].name,
		  plan_fmt_bytes(b1, sizeof(b1), fit.need),
		  plan_fmt_bytes(b2, sizeof(b2), fit.have),
		  one_memory(a->dev, a->n_dev) ?
		  "; the devices share one memory, so splitting adds none" : "");
}

static int plan_auto(const struct pg_device *dev, int n_dev,
		     const struct pg_model_facts *f, const struct sizing *z,
		     struct pg_plan *p, char *err, size_t err_len)
{
	struct autoplan a = {
		.dev = dev, .n_dev = n_dev, .f = f, .z = *z, .p = p,
	};
	char head[256], fig[224];
	int rc, long_dev;

	if ((rc = plan_build(p, dev, 1, 1, 1, f, z, err, err_len)))
		return rc;
	if (ap_fits_one(&a, fig, sizeof(fig))) {
		ap_replicas(&a, fig);
		return 0;
	}
	snprintf(head, sizeof(head), "does not fit one device: %s", fig);
	a.tp_kind = fast_linked(dev, n_dev);
	a.x_max = ap_x_max(&a);
	if (ap_split(&a, head))
		return 0;
	if (ap_long_context(&a, &long_dev) && ap_context(&a, head, long_dev))
		return 0;
	ap_too_big(&a, head);
	return 0;
}

int pg_plan_make(const struct pg_plan_request *req,
		 const struct pg_model_facts *f, struct pg_plan *out,
		 char *err, size_t err_len)
{
	struct sizing z = plan_sizing_of(req, f);
	struct pg_device *dev;
	int n, pp, tp, cp, rc;

	if ((rc = check_facts(f, err, err_len)))
		return rc;
	if (req->autoplan && (req->pipeline_parallel || req->tensor_parallel ||
			      req->context_parallel))
		return fail(err, err_len, "--parallel auto chooses the pipeline, tensor and context parallel counts itself; drop them or use --parallel manual");
	dev = malloc(sizeof(*dev) * PG_PLAN_MAX_DEVICES);
	if (!dev) {
		snprintf(err, err_len, "out of memory for the device list");
		return -ENOMEM;
	}
	n = request_devices(req, dev, err, err_len);
	rc = n < 0 ? n : 0;
	if (!rc && req->autoplan)
		rc = plan_auto(dev, n, f, &z, out, err, err_len);
	else if (!rc && !(rc = manual_counts(req, n, f->n_blocks, &pp, &tp, &cp,
						 err, err_len)))
		rc = plan_build(out, dev, pp, tp, cp, f, &z, err, err_len);
	free(dev);
	return rc;
}

int pg_plan_n_replicas(const struct pg_plan *p)
{
	return p->replicas > 1 ? p->replicas : 1;
}

const struct pg_device *pg_plan_device(const struct pg_plan *p, int stage,
				       int tp_rank, int cp_rank)
{
	return &p->dev[(stage * p->tp + tp_rank) * p->cp + cp_rank];
}
