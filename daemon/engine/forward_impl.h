/*
 * forward_impl.h - the forward pass's internals, shared by forward.c
 * (making and ending it: devices and their threads), weights.c (where a
 * device's weights live), comms.c (the plan's communicator groups),
 * jobs.c (the course of a batch) and block.c (the model math of one
 * transformer block).  Nothing outside these files includes it.
 */
#ifndef PAGODA_FORWARD_IMPL_H
#define PAGODA_FORWARD_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/comm.h"
#include "kernels/registry.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/kv.h"

#define PG_FW_MAX_INFLIGHT 16
#define PG_FW_LANES 2		/* attention lanes without CP */

/* Activations of one device, max_batch_tokens rows each. */
struct scratch {
	float *x;		/* (B, n_embd) residual stream */
	float *xb;		/* (B, n_embd) normalised input of a sub-layer */
	float *xb2;		/* (B, n_embd) sub-layer output */
	float *q;		/* (B, nq * head_dim) */
	float *k;		/* (B, nkv * head_dim) */
	float *v;		/* (B, nkv * head_dim) */
	float *att;		/* (B, nq * head_dim + nq): output, then lse */
	float *parts;		/* (cp, B, nq * head_dim + nq) gathered */
	float *wparts;		/* exact TP: (most parts, B, n_embd) */
	float *wgath;		/* exact TP: (tp, most parts, B, n_embd) */
	float *hb;		/* (B, nff) gate, then silu(gate) * up */
	float *hb2;		/* (B, nff) up */
	int32_t *slots;		/* (B) this device's KV slots, -1 elsewhere
				   (host memory, like every index array) */
	float *lg;		/* (B, vpad) local logits, grown on demand */
	float *lg_all;		/* (tp, B, vpad) gathered logits */
	size_t lg_rows;		/* rows lg and lg_all have room for */
	float *lg_host;		/* device memory: lg_all (or the unsplit
				   head's logits) downloaded, (tp, B, vpad) */
};

/* One batch: what the caller gave, checked and laid out once. */
struct job {
	int kind;		/* JOB_RUN or JOB_RESET */
	int n_tokens, n_seqs, n_out;
	int32_t *tokens;	/* (B) */
	int32_t *pos;		/* (B) */
	int32_t *out_rows;	/* (B) rows whose logits are wanted */
	struct pg_fw_seq *seqs;	/* (B) */
	struct pg_attn_seq *aseqs;	/* (B) */
	float *logits;		/* the caller's */
	atomic_int pending;	/* devices still working on it */
	atomic_int rc;		/* first error of a device, else 0 */
	int done;		/* under fw->lock */
	/*
	 * Replicas: part[r] is replica r's share, the batch's sequences whose
	 * pages lie in zone r, laid out as a job of its own (its pages as
	 * the replica's KV store numbers them); NULL without replicas.
	 */
	struct job *part;	/* (n_rep) */
	int32_t *seq_zone;	/* (B) each sequence's zone */
	/* in a part: */
	int32_t *pages;		/* (pages_cap) its sequences' page tables */
	size_t pages_cap;
	int32_t *dst_row;	/* (B) row of the batch's logits of each of
				   its output rows */
	float *own;		/* (own_rows, n_vocab) its logits, when its
				   rows are not one run of the batch's */
	size_t own_rows;
	float *dst;		/* the batch's logits, when own is used */
};

enum { JOB_RUN = 0, JOB_RESET = 1 };

/* One device of the plan: (replica, stage, TP rank t, CP rank c). */
struct device {
	struct pg_forward *fw;
	int index, stage, t, c;
	int replica;			/* 0 without replicas */
	int32_t page0;			/* its zone's first page id ... */
	int n_pages;			/* ... and its pages: its KV store */
	const struct pg_device *info;	/* NULL: one device, no plan */
	struct pg_backend *be;
	struct pg_kv_store *kv;
	int first_block, n_blocks;
	struct pg_block_weights *w;	/* (n_blocks) this device's slices */
	struct pg_matrix out_w;		/* last stage: vocabulary [v0, v1) */
	void *local;			/* slices copied to the device's node */
	size_t local_bytes;
	void *packed;			/* fw_pack_weights' allocation (NULL
					   when it reads another replica's) */
	size_t packed_bytes;
	int packed_numa;		/* from numa_alloc_onnode, else mmap */
	int devmem;			/* the backend has memory of its own */
	void *wmem;			/* devmem: the uploaded weights */
	struct pg_matrix tok_embd;	/* stage 0: the token embedding */
	const float *rope_freqs;	/* the model's RoPE factors, or NULL */
	const float *output_norm;	/* last stage: the final norm */
	int graphs;			/* bracket steps with step_begin/end */
	int sticky_rc;			/* a failed page copy: fail next batch */
	char err[256];			/* devmem: the device's last error */
	/*
	 * devmem: held by the device thread while it runs a job, and by the
	 * engine's thread around a page copy, since a backend serves one
	 * thread at a time (host memory needs none: see copy_page).
	 */
	pthread_mutex_t be_lock;
	int h0, nq, k0, nkv, f0, nff, v0, nv, vpad;
	/*
	 * Exact parallel sums (see the top of the file): whether the backend
	 * has them, the attention lanes (PG_FW_LANES, or 1), and for Wo (0)
	 * and Wdown (1) this rank's parts as bounds in its own columns, the
	 * part count of every TP rank, and the most any rank has.
	 */
	int exact, lanes;
	int64_t part_cols[2][PG_PLAN_EXACT_SPLITS + 2];
	int rank_parts[2][PG_PLAN_MAX_DEVICES];
	int max_parts[2];
	const float *part_ptr[PG_PLAN_EXACT_SPLITS + PG_PLAN_MAX_DEVICES];
	struct pg_comm *world, *tp, *cp;
	struct scratch s;
	void *arena;
	/* the worker: jobs come in order through a ring */
	pthread_t thread;
	int started;
	/* figures */
	uint64_t busy_ns, steps;
	int fault_after;		/* test hook: fail after this many blocks */
};

struct pg_forward {
	const struct pg_model *m;
	struct pg_forward_params p;
	struct pg_plan plan;
	int n_dev;
	int n_rep;			/* replicas (1: none) ... */
	int group;			/* ... of this many devices each */
	struct device *dev;
	struct pg_host_group *g_world, **g_tp, **g_cp;
	int n_g_tp, n_g_cp;
	int threaded;			/* devices run on their own threads */
	/* in-flight jobs, FIFO: jobs[(head + i) % n_slots] */
	int n_slots, head, n_inflight;
	struct job jobs[PG_FW_MAX_INFLIGHT];
	struct job reset_job;
	int need_reset;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* devices: new job or stop; caller: done */
	uint64_t queued;		/* jobs handed to devices so far */
	int stop;
	struct job *queue[PG_FW_MAX_INFLIGHT + 1];	/* by queued % size */
	uint64_t stats_ns;		/* pg_now_ns() at creation */
	/* GPUs: NCCL groups, which the device threads create together */
	int gpus;			/* the plan's devices are CUDA devices */
	uint8_t *nccl_ids;		/* world, then TP groups, then CP
					   groups: PG_COMM_NCCL_ID_BYTES each */
	int setup_pending;		/* device threads still creating them */
	int setup_rc;			/* the first one's failure */
	char setup_err[384];
	atomic_int nccl_cancel;		/* set on any failure of the setup, so
					   that no rank waits for one that will
					   never join */
	int64_t nccl_deadline_ns;	/* pg_now_ns(): every rank gives up then */
	int nccl_timeout_s;
};

/*
 * pg_block_run - block lb of device d's stage on job j's tokens: the
 * residual stream d->s.x (n_tokens x n_embd) goes through attention and
 * the feed-forward network as the model's struct pg_arch says (block.c).
 * 0, or the communicator's error.
 */
int pg_block_run(struct device *d, const struct job *j, int lb);

/* ---- weights.c: where a device's weights live ---- */

/* fw_rows_of - a view of output rows r0 .. r0 + n - 1 of m. */
struct pg_matrix fw_rows_of(const struct pg_matrix *m, int64_t r0, int64_t n);

/* fw_slice_block - o = device d's slices of block weights w (views). */
void fw_slice_block(const struct pg_hparams *hp, const struct device *d,
		    const struct pg_block_weights *w,
		    struct pg_block_weights *o);

/* fw_matrix_bytes - the bytes of m's rows laid end to end, unpadded. */
size_t fw_matrix_bytes(const struct pg_matrix *m);

/*
 * fw_localize_weights - a device bound to NUMA node node: its slices
 * copied onto that node (the token embedding stays in the mapping).
 * Returns 0, -EINVAL (no such node) or -ENOMEM.
 */
int fw_localize_weights(struct device *d, int node);

/*
 * fw_pack_weights - a CPU device's matrices in one allocation (on node
 * when >= 0): repacked for its backend's 8-row loops where it takes them,
 * and, on a device bound to no node, the others copied onto huge pages.
 * Returns 0 or -ENOMEM with a message in err.
 */
int fw_pack_weights(struct device *d, int node, char *err, size_t err_len);

/*
 * fw_upload_weights - device d's weights uploaded into its backend's own
 * memory in one allocation (head_split: the output head is padded to
 * d->vpad rows).  Returns 0 or -errno with a message in err.
 */
int fw_upload_weights(struct device *d, int head_split, char *err,
		      size_t err_len);

/* ---- comms.c: the plan's communicator groups ---- */

/*
 * fw_setup_comms - the groups over shared memory of a plan of CPU
 * devices: one world, a TP group per (stage, c), a CP group per (stage,
 * t); for GPUs, the NCCL ids their threads join with.  Returns 0 or
 * -errno with a message in err.
 */
int fw_setup_comms(struct pg_forward *fw, char *err, size_t err_len);

/*
 * fw_join_nccl - in device d's thread: its NCCL handles, world then TP
 * then CP, created together with the other devices' (giving up when one
 * has failed or the deadline has passed).  Returns 0 or -errno with a
 * message in err.
 */
int fw_join_nccl(struct device *d, char *err, size_t err_len);

/* ---- forward.c, for the device threads ---- */

/* fw_setup_failed - a device's setup failed with rc (under fw->lock):
 * keep the first cause (msg) for pg_forward_create. */
void fw_setup_failed(struct pg_forward *fw, int rc, const char *msg);

/* fw_head_size - the ranks that share the output head by vocabulary:
 * TP's, else CP's. */
int fw_head_size(const struct pg_plan *pl);

/* fw_zone_first - the first page of zone z of n_pages among n_rep
 * (kvcache.h's zones: z * n_pages / n_rep). */
int32_t fw_zone_first(int n_pages, int n_rep, int z);

/* ---- jobs.c: the course of a batch ---- */

/* fw_device_main - a device's thread (arg: its struct device): its NCCL
 * handles if any, then the jobs of the ring in order until fw->stop. */
void *fw_device_main(void *arg);

/* fw_abort_device - device d's communicators aborted, so that no peer
 * waits on it (a failed batch or setup). */
void fw_abort_device(struct device *d);

/* fw_comm_ns - the time device d's communicators have spent, in ns. */
uint64_t fw_comm_ns(const struct device *d);

#endif
