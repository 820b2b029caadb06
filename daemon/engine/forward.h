/*
 * forward.h - the Llama forward pass over a batch of tokens from one or
 * more sequences, run as a list of stages.
 *
 * Without a plan, one CPU device runs every block on the caller's thread.
 * With a plan (plan.h), each device of the plan runs on a thread of its
 * own with its own backend, KV store and weight slices: pipeline stages
 * hand the residual stream on, TP ranks split heads and FFN columns and
 * all-reduce, CP ranks split the KV pages' token slots and merge their
 * partial attentions (forward.c says how).  Up to pp batches may be in
 * flight (pg_forward_submit / pg_forward_wait) so that stages overlap.
 * A plan of R replicas (one device each) cuts the KV page ids into R
 * zones, as kvcache.h's zones: zone z is pages [z * n / R, (z + 1) * n /
 * R) of n, stored by replica z, which computes the sequences whose pages
 * lie there; the replicas of a batch run at the same time.
 * Prefill (many tokens of a sequence) and decode (one token) are the same
 * code.  This file knows nothing of requests, sampling or scheduling.
 */
#ifndef PAGODA_FORWARD_H
#define PAGODA_FORWARD_H

#include <stdint.h>

#include "kernels/registry.h"
#include "daemon/engine/kv.h"
#include "daemon/engine/model.h"
#include "daemon/engine/plan.h"

/*
 * How the forward pass rounds.  PG_NUMERICS_PAGODA: every parallel plan
 * gives one device's bits (forward.c's exact sums), attention accumulates
 * in float.  PG_NUMERICS_LLAMA_CPP: one CPU device only (no plan), F16
 * KV, Q4_1 and Q8_0 weight matrices (llama.cpp runs kernels of its own for
 * the others), a CPU with AVX2 (whose kernels are used even where AVX-512
 * is present), computing as llama.cpp's CPU backend built for AVX2 does with
 * flash attention on: Wo and Wdown in one accumulator each, and
 * attention, SwiGLU and RMSNorm's sum as kernels/cpu/llamacpp.c says, so
 * that the logits are llama.cpp's bit for bit (tests/test_golden.c checks
 * it on the default model, tests/test_numerics.c on generated Qwen2 and
 * Llama shapes), for comparing with llama.cpp or reproducing
 * its output; slower (attention goes key by key with its sum in F16) and
 * no more accurate.
 */
enum pg_numerics {
	PG_NUMERICS_PAGODA = 0,
	PG_NUMERICS_LLAMA_CPP,
};

struct pg_forward_params {
	int n_threads;		/* CPU threads; <= 0: all online CPUs */
	enum pg_cpu_isa isa;	/* clamped to what the CPU has */
	int max_batch_tokens;	/* rows one call may carry */
	int n_pages;		/* KV pages in each stage's storage, or 0: */
	size_t kv_bytes;	/* ... as many as fit in this many bytes, or 0: */
	double kv_fraction;	/* ... in this fraction of the memory available
				   now, or 0: room for 4 sequences of the
				   training context (at most 8192 tokens) */
	int page_tokens;	/* tokens per KV page */
	enum pg_dtype kv_type;	/* F16 (default), F32 or BF16 */
	struct pg_kv_mem kv_mem;/* NUMA node, mlock, explicit huge pages */
	const struct pg_plan *plan;	/* devices and parallel plan (plan.h),
					   or NULL: one CPU device of n_threads;
					   the plan must outlive the result */
	int device_path;		/* tests: run CPU devices as a GPU is
					   run (weights uploaded, KV and
					   activations in the backend's
					   alloc(), logits downloaded) */
	enum pg_numerics numerics;	/* PG_NUMERICS_PAGODA (default) or
					   PG_NUMERICS_LLAMA_CPP */
	int nccl_timeout_s;		/* seconds the NCCL groups of a plan
					   of several CUDA devices have to
					   form; <= 0: PG_FW_NCCL_TIMEOUT_S */
};

/* The default of nccl_timeout_s (pagodad's PAGODA_NCCL_TIMEOUT). */
#define PG_FW_NCCL_TIMEOUT_S 60

/* pg_forward_params_default - 2 threads, best ISA, 512 tokens, F16 KV. */
struct pg_forward_params pg_forward_params_default(void);

/*
 * One sequence's share of a batch; its tokens are contiguous in the batch.
 * Pages are the caller's (kvcache.h decides which page holds what): the
 * page table must already cover positions 0 .. n_past + n_tokens - 1.
 */
struct pg_fw_seq {
	const int32_t *pages;	/* page ids, one per page_tokens positions */
	int n_past;		/* positions already in the KV pages */
	int n_tokens;		/* tokens of this sequence in the batch */
	int logits_all;		/* logits for every token, else the last only */
};

struct pg_forward;

/*
 * pg_forward_create - place model m on its stage(s) and allocate the KV
 * pool and scratch.  The model must outlive the result.  Returns 0, or
 * -errno with a message in err.
 */
int pg_forward_create(const struct pg_model *m,
		      const struct pg_forward_params *p,
		      struct pg_forward **out, char *err, size_t err_len);

/* pg_forward_destroy - free; NULL is allowed. */
void pg_forward_destroy(struct pg_forward *fw);

/* Pages of the KV storage (ids 0 .. n - 1) and tokens per page. */
int pg_forward_n_pages(const struct pg_forward *fw);
int pg_forward_page_tokens(const struct pg_forward *fw);

/*
 * pg_forward_copy_page - copy page src's K and V to page dst in every
 * stage (the copy-on-write that kvcache.h asks for).  With replicas both
 * pages must be in one zone (kvcache.h keeps them so); otherwise the
 * zone's next batch fails with -EINVAL.
 */
void pg_forward_copy_page(struct pg_forward *fw, int32_t src, int32_t dst);

/* pg_forward_max_batch - max_batch_tokens of the parameters. */
int pg_forward_max_batch(const struct pg_forward *fw);

/*
 * pg_forward_n_zones - the zones its KV pages are cut into: the plan's
 * replicas, 1 without.  A page cache for it must have as many
 * (pg_kvc_params.n_zones).
 */
int pg_forward_n_zones(const struct pg_forward *fw);

/*
 * pg_forward_zone_pages - the pages of its smallest zone: the most one
 * sequence can hold (pg_forward_n_pages without replicas).
 */
int pg_forward_zone_pages(const struct pg_forward *fw);

/*
 * pg_forward_threads - the host threads the devices run on: a CPU device's
 * backend threads, plus one driving thread per GPU.
 */
int pg_forward_threads(const struct pg_forward *fw);

/* pg_forward_isa_name - the instruction set the kernels run with. */
const char *pg_forward_isa_name(const struct pg_forward *fw);

/* pg_forward_numerics - how it rounds (the parameters' numerics). */
enum pg_numerics pg_forward_numerics(const struct pg_forward *fw);

/*
 * pg_forward_packed_bytes - the memory the CPU devices took for their
 * weights repacked for the backend's 8-row loops (its pack op) or copied
 * onto huge pages, all devices together; 0 when none was.
 */
size_t pg_forward_packed_bytes(const struct pg_forward *fw);

/*
 * pg_forward_batch - run tokens (n_tokens in all, at most max_batch_tokens)
 * of n_seqs distinct sequences (each at most once per call).  Sequence i's
 * tokens take positions n_past .. n_past + n_tokens - 1; their K and V are
 * written into its pages and attention reads positions 0 .. through the
 * page table.  logits receives, sequence by sequence, n_tokens rows (when
 * logits_all) or one row of n_vocab floats.  With replicas, each
 * sequence's pages must lie in one zone, and each replica runs its own
 * sequences (the batch's sequences of no zone: that replica waits).
 * Returns 0, -E2BIG (batch too large), -EINVAL (token id or page id out
 * of range, a sequence's pages in two zones, bad counts), -ENOMEM.
 */
int pg_forward_batch(struct pg_forward *fw, const int32_t *tokens,
		     int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		     float *logits);

/*
 * pg_forward_submit - start a batch (as pg_forward_batch) without waiting
 * for it.  Up to pg_forward_max_inflight() batches may be in flight; the
 * page tables and logits must stay untouched until the batch is waited
 * for, and no sequence may be in two batches in flight.  Returns 0, -EBUSY
 * (too many in flight), or pg_forward_batch's errors (nothing started).
 */
int pg_forward_submit(struct pg_forward *fw, const int32_t *tokens,
		      int n_tokens, const struct pg_fw_seq *seqs, int n_seqs,
		      float *logits);

/*
 * pg_forward_wait - wait for the oldest batch in flight.  Returns 0, the
 * error of a device that failed (-EIO, -ENOMEM ...; the batch's logits are
 * then undefined and its KV slots must be treated as unwritten; the
 * devices recover by themselves), or -ENOENT when nothing is in flight.
 */
int pg_forward_wait(struct pg_forward *fw);

/* pg_forward_max_inflight - batches that may be in flight: pp, or 1. */
int pg_forward_max_inflight(const struct pg_forward *fw);

/* pg_forward_plan - the plan it runs (a one-device plan without one). */
const struct pg_plan *pg_forward_plan(const struct pg_forward *fw);

/* pg_forward_n_devices - devices of the plan (1 without one). */
int pg_forward_n_devices(const struct pg_forward *fw);

/* What one device has done since the forward pass was created. */
struct pg_forward_dev_stats {
	char name[16];			/* "cpu:0" */
	int stage, tp_rank, cp_rank;
	int first_block, n_blocks;
	uint64_t steps;			/* batches run */
	uint64_t wall_ns;		/* time since the figures started */
	uint64_t busy_ns;		/* running batches (compute + comm) */
	uint64_t compute_ns;		/* busy minus communication */
	uint64_t comm_ns;		/* in communicator operations, waiting
					   for peers included (for a later
					   stage: the pipeline bubble) */
	uint64_t bytes;			/* bytes sent to other devices */
	uint64_t n_all_reduce, n_all_gather, n_send, n_recv;
};

/* pg_forward_device_stats - device i's figures (i < n_devices). */
void pg_forward_device_stats(const struct pg_forward *fw, int i,
			     struct pg_forward_dev_stats *st);

/*
 * pg_forward_inject_fault - for tests: device `device` fails (-EIO) the
 * next batch it runs, before its block `block` (1-based, in its stage).
 * Returns 0 or -EINVAL.
 */
int pg_forward_inject_fault(struct pg_forward *fw, int device, int block);

#endif
