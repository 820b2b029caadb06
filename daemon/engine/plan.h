/*
 * plan.h - devices and the parallel plan: which device runs which blocks,
 * which attention heads and FFN columns, and which tokens of the KV cache.
 *
 * A device is `cpu:N` (a group of cores, optionally one NUMA node whose
 * memory it binds) or `cuda:N` (a GPU).  A plan is PP pipeline stages, each
 * a group of TP × CP devices: TP ranks divide the heads and FFN columns of
 * the stage's blocks, CP ranks divide the tokens of its KV pages.  The
 * device of (stage s, TP rank t, CP rank c) is dev[(s * tp + t) * cp + c].
 *
 * This file decides; it runs nothing and loads no weights.  The planner
 * (parallel = auto) follows DESIGN.md idea 7 with figures from
 * bench/README's cost model.
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
	uint64_t mem_bytes;		/* memory it may use (node's or GPU's) */
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
};

struct pg_plan {
	int pp, tp, cp;
	int n_devices;			/* pp * tp * cp */
	struct pg_device dev[PG_PLAN_MAX_DEVICES];
	int first_block[PG_PLAN_MAX_DEVICES + 1];	/* stage s runs blocks
					   first_block[s] .. first_block[s+1]-1 */
	int kv_replicated;		/* TP ranks hold shared KV heads twice */
	char reason[512];		/* why this plan (auto) or "as configured" */
};

/*
 * pg_devices_parse - resolve a list like "cpu:0,cpu:1" or "cuda:0" against
 * this host: CPU devices split the online cores into equal contiguous
 * groups (one NUMA node each when the host has at least as many nodes as
 * CPU devices); CUDA devices must exist.  Returns the count, or -EINVAL with
 * a message that names the bad entry.
 */
int pg_devices_parse(const char *spec, int n_threads, struct pg_device *out,
		     int max, char *err, size_t err_len);

/*
 * pg_plan_make - the plan for model f on the request's devices: checks
 * that pp * tp * cp equals the number of devices (or chooses them, for
 * autoplan), that pp <= n_blocks, that the TP split is possible (every
 * rank gets at least one head and one quantisation block of FFN columns),
 * and cuts the blocks into pp contiguous ranges balanced by cost (the last
 * stage also pays for the output head).  Returns 0, or -EINVAL with a
 * message that says what to change.
 */
int pg_plan_make(const struct pg_plan_request *req,
		 const struct pg_model_facts *f, struct pg_plan *out,
		 char *err, size_t err_len);

/* pg_plan_single - the one-device plan (cpu:0 with n_threads threads). */
void pg_plan_single(const struct pg_model_facts *f, int n_threads,
		    struct pg_plan *out);

/* pg_plan_device - the device of (stage, TP rank, CP rank). */
const struct pg_device *pg_plan_device(const struct pg_plan *p, int stage,
				       int tp_rank, int cp_rank);

/*
 * The TP split of one block, the same function for every user: query heads
 * [*h0, *h1) of rank t, the KV heads they read [*k0, *k1) (a KV head read by
 * two ranks is held by both: replicated), and FFN columns [*f0, *f1) in
 * whole quantisation blocks.
 */
void pg_plan_tp_heads(int n_heads, int n_kv_heads, int tp, int t,
		      int *h0, int *h1, int *k0, int *k1);
void pg_plan_tp_ffn(int n_ff, int qblock, int tp, int t, int *f0, int *f1);

/*
 * pg_plan_print - the plan as pagodad --plan shows it: devices, stages and
 * their blocks, memory per device (weights and KV), the communication per
 * token (bytes and count of all-reduces and stage hand-offs), and the
 * reason.
 */
void pg_plan_print(FILE *out, const struct pg_plan *p,
		   const struct pg_model_facts *f,
		   const struct pg_plan_request *req);

#endif
