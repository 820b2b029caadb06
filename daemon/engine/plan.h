/*
 * plan.h - devices and the parallel plan: which device runs which blocks,
 * which attention heads and FFN columns, and which tokens of the KV cache.
 *
 * A device is `cpu:N` (a group of cores, optionally one NUMA node whose
 * memory it binds) or `cuda:N` (a GPU).  A plan is PP pipeline stages, each
 * a group of TP × CP devices: TP ranks divide the heads and FFN columns of
 * the stage's blocks, CP ranks divide the tokens of its KV pages.  The
 * device of (stage s, TP rank t, CP rank c) is dev[(s * tp + t) * cp + c].
 * A plan may hold R replicas of that group (data parallel): replica r is
 * dev[r * pp*tp*cp ..], a whole copy of the model serving the sequences
 * whose KV pages lie in zone r of the pool (kvcache.h); today the planner
 * makes replicas of one device only (pp = tp = cp = 1).
 *
 * This file decides; it runs nothing and loads no weights.  The planner
 * (parallel = auto) follows DESIGN.md idea 7 and bench/README's cost model:
 * its figures are bytes (weights and KV against each device's memory;
 * decode reads every weight once per step, so weight bytes are also the
 * cost that balances the stages).
 */
#ifndef PAGODA_PLAN_H
#define PAGODA_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PG_PLAN_MAX_DEVICES 64
#define PG_DEVICE_MAX_CPUS 1024

enum pg_device_kind {
	PG_DEV_CPU = 0,
	PG_DEV_CUDA = 1,
};

/* One device, resolved against this host. */
struct pg_device {
	enum pg_device_kind kind;
	int index;			/* N of cpu:N or cuda:N */
	char name[16];			/* "cpu:0", "cuda:1" */
	int n_threads;			/* CPU: threads to run (its cores) */
	int numa_node;			/* CPU: node its memory binds to; -1 none */
	int n_cpus;			/* CPU: the cores it is pinned to ... */
	int cpus[PG_DEVICE_MAX_CPUS];	/* ... (0 = not pinned) */
	uint64_t mem_bytes;		/* memory it may use (node's or GPU's);
					   CPU devices without a node share
					   the host's MemAvailable; 0 unknown */
	int fast_links;			/* CUDA: fast peer links (NVLink) to
					   the other devices; 0 unknown, as
					   pg_devices_parse leaves it */
};

/*
 * The shape of a model as far as planning goes, read from GGUF metadata
 * and tensor infos without loading weights.
 */
struct pg_model_facts {
	int n_blocks, n_embd, n_heads, n_kv_heads, head_dim, n_ff, n_vocab;
	int n_ctx_train;
	uint64_t block_bytes;		/* weight bytes of one block */
	uint64_t embd_bytes;		/* token embedding */
	uint64_t output_bytes;		/* output head (= embd_bytes when tied) */
	int qblock;			/* elements per quantisation block (32, or 1) */
	int tied_output;		/* output head is the token embedding */
};

/* What the operator asked for; 0 means "not given" for each count. */
struct pg_plan_request {
	const char *devices;		/* "cpu:0,cpu:1", or NULL: cpu:0 */
	int pipeline_parallel;
	int tensor_parallel;
	int context_parallel;
	int autoplan;			/* parallel = auto */
	int n_threads;			/* threads per CPU device; 0: its cores */
	int ctx_tokens;			/* context to plan KV for (0: training) */
	int batch_seqs;			/* sequences to plan KV for (0: 4) */
	int kv_bytes_per_elem;		/* 2 for F16 KV (0: 2) */
	int page_tokens;		/* tokens per KV page (0: 16) */
	const struct pg_device *devs;	/* resolved devices instead of
					   `devices` (tests, or a caller that
					   probed them itself) ... */
	int n_devs;			/* ... and their count; 0: parse */
};

struct pg_plan {
	int pp, tp, cp;
	int replicas;			/* copies of the pp x tp x cp group, each
					   serving its own sequences; 1 none
					   (0, in a plan made by hand: 1) */
	int n_devices;			/* replicas * pp * tp * cp */
	struct pg_device dev[PG_PLAN_MAX_DEVICES];
	int first_block[PG_PLAN_MAX_DEVICES + 1];	/* stage s runs blocks
					   first_block[s] .. first_block[s+1]-1 */
	int kv_replicated;		/* TP ranks hold shared KV heads twice */
	char reason[512];		/* why this plan (auto) or "as configured" */
};

/*
 * pg_devices_parse - resolve a list like "cpu:0,cpu:1" or "cuda:0" against
 * this host (NULL or "": cpu:0).  The k CPU devices must be cpu:0 ..
 * cpu:k-1, each once.  They split the process's CPUs (sched_getaffinity):
 * when k >= 2 and the host has at least k NUMA nodes with CPUs, cpu:i takes
 * node i's CPUs and binds to it (mem_bytes: the node's free memory);
 * otherwise the CPUs are cut into k equal contiguous groups (k = 1: all of
 * them), numa_node = -1 and mem_bytes is MemAvailable, shared.  With more devices than CPUs the groups share
 * CPUs round-robin, one each.  n_threads > 0 sets every CPU device's
 * threads, else each gets one per CPU.  cuda:N must be a visible GPU,
 * named once; its mem_bytes is its free memory now (without CUDA built,
 * cuda:N is refused with how to build it).  A list mixing CPU and CUDA
 * devices is refused.  Returns the count, or -EINVAL with a message that
 * names the bad entry.
 */
int pg_devices_parse(const char *spec, int n_threads, struct pg_device *out,
		     int max, char *err, size_t err_len);

/*
 * pg_model_facts_read - the facts of the GGUF model at path, from its
 * metadata (llama, mistral and qwen2 keys, as the loader reads them) and
 * tensor infos; no weight is read.  block_bytes is the size of blk.0's
 * tensors.  Returns 0, or -errno with a message naming the file and key.
 */
int pg_model_facts_read(const char *path, struct pg_model_facts *f,
			char *err, size_t err_len);

struct pg_model;
/* pg_model_facts_of - the same facts from a loaded model (model.h). */
void pg_model_facts_of(const struct pg_model *m, struct pg_model_facts *f);

/*
 * pg_plan_make - the plan for model f on the request's devices: checks
 * that pp * tp * cp equals the number of devices (or chooses them, for
 * autoplan), that pp <= n_blocks, that the TP split is possible (every
 * rank gets at least one head and one quantisation block of FFN columns),
 * that cp divides page_tokens, and cuts the blocks into pp contiguous
 * ranges balanced by cost (the last stage also pays for the output head).
 *
 * Counts not given: tp and cp default to 1 and pp to the devices left,
 * n_devices / (tp * cp); so a bare device list is a pipeline, the choice
 * that needs no fast links.  No devices but counts: cpu:0 .. cpu:pp*tp*cp-1.
 * Autoplan takes no counts (it chooses them) and may leave devices unused:
 * a CPU device may fill 90% of its mem_bytes with weights and KV for
 * batch_seqs x ctx_tokens, a GPU its mem_bytes less 6 GB (0: unknown,
 * enough), counted once per memory (CPU devices on one node, or on none,
 * share theirs; replicas on one memory share their weights).  The model
 * fits the smallest device: one replica per device (pp = tp = cp = 1),
 * as many as fit their memory, each serving its own share of the
 * sequences (data parallel: no communication at all).  Else the fewest TP ranks that fit
 * when every device is CUDA with fast_links, otherwise the fewest stages.
 * When even the widest split does not fit and one sequence's KV exceeds
 * what some device has left after its weights, CP ranks are added (fewest
 * devices, then fewest CP ranks).  When nothing fits: the widest split.
 * reason gives the figures.  Returns 0, or -EINVAL (-ENOMEM) with a message
 * that says what to change.
 */
int pg_plan_make(const struct pg_plan_request *req,
		 const struct pg_model_facts *f, struct pg_plan *out,
		 char *err, size_t err_len);

/* pg_mem_available - MemAvailable of /proc/meminfo in bytes; 0 unknown. */
uint64_t pg_mem_available(void);

/*
 * pg_plan_cut - cut n_blocks blocks of costs cost[] into pp contiguous
 * non-empty stages, the last also costing last_extra, so that the largest
 * stage cost is the least possible (ties: cuts nearest the even split).
 * Writes first_block[0 .. pp] (first_block[pp] = n_blocks).  Returns 0,
 * or -EINVAL when pp < 1 or pp > n_blocks.
 */
int pg_plan_cut(const uint64_t *cost, int n_blocks, uint64_t last_extra,
		int pp, int *first_block);

/* pg_plan_n_replicas - p's replicas: its replicas field, at least 1. */
int pg_plan_n_replicas(const struct pg_plan *p);

/* pg_plan_device - replica 0's device of (stage, TP rank, CP rank). */
const struct pg_device *pg_plan_device(const struct pg_plan *p, int stage,
				       int tp_rank, int cp_rank);

/*
 * The TP split of one block, the same function for every user: query heads
 * [*h0, *h1) of rank t, the KV heads they read [*k0, *k1) (a KV head read by
 * two ranks is held by both: replicated), and FFN columns [*f0, *f1) in
 * whole quantisation blocks.  Exactly:
 *   h0 = t * n_heads / tp, h1 = (t + 1) * n_heads / tp,
 *   k0 = h0 / g, k1 = (h1 - 1) / g + 1 with g = n_heads / n_kv_heads,
 *   f0 = (t * nb / tp) * qblock, f1 = ((t + 1) * nb / tp) * qblock with
 *   nb = n_ff / qblock (pg_plan_make requires n_ff % qblock == 0).
 */
void pg_plan_tp_heads(int n_heads, int n_kv_heads, int tp, int t,
		      int *h0, int *h1, int *k0, int *k1);
void pg_plan_tp_ffn(int n_ff, int qblock, int tp, int t, int *f0, int *f1);

/*
 * The canonical parts of a row-split product (forward.c's exact parallel
 * sums): n units of `unit` input columns each (Wo: heads of head_dim;
 * Wdown: quantisation blocks) are cut at s * n / PG_PLAN_EXACT_SPLITS,
 * s = 1 .. PG_PLAN_EXACT_SPLITS - 1, keeping the cuts that fall on whole
 * quantisation blocks of qblock columns.  pg_plan_tp_parts gives the parts
 * within units [lo, hi) (a TP rank's share; 0, n for one device) as
 * column bounds counted from lo, cols[0] = 0 < .. < cols[k] = (hi - lo) *
 * unit, and returns k (at most PG_PLAN_EXACT_SPLITS + 1).  A TP size that
 * divides PG_PLAN_EXACT_SPLITS cuts only at these bounds, so its ranks'
 * parts are exactly one device's.
 */
#define PG_PLAN_EXACT_SPLITS 12
int pg_plan_tp_parts(int n, int unit, int qblock, int lo, int hi,
		     int64_t *cols);

/*
 * pg_plan_tp_rank_parts - TP rank t's canonical parts of Wo (wdown 0:
 * n_heads heads of head_dim columns, the rank's heads as pg_plan_tp_heads
 * gives them) or of Wdown (wdown 1: n_ff columns, the rank's as
 * pg_plan_tp_ffn gives them), cut on qblock-column blocks: cols and the
 * count as pg_plan_tp_parts gives them.
 */
int pg_plan_tp_rank_parts(int n_heads, int n_kv_heads, int head_dim,
			  int n_ff, int wdown, int qblock, int tp, int t,
			  int64_t *cols);

/*
 * pg_plan_print - the plan as pagodad --plan shows it: replicas, devices, stages and
 * their blocks, memory per device (weights and KV for req's context; req
 * may be NULL for the defaults), the communication per token (bytes and
 * count of all-reduces, all-gathers and stage hand-offs), the reason, and
 * warnings (threads oversubscribing the CPUs, replicated KV heads, a
 * device whose share does not fit its memory).
 */
void pg_plan_print(FILE *out, const struct pg_plan *p,
		   const struct pg_model_facts *f,
		   const struct pg_plan_request *req);

#endif
