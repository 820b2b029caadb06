/*
 * backend_cuda.h - the CUDA backend: struct pg_backend_ops on one NVIDIA
 * GPU, plus device queries and sampling helpers on device logits.
 *
 * It declares no CUDA type, so that its callers need not include CUDA's
 * headers.  It is not the NCCL communicator (comm_nccl.h), which runs on
 * the stream pg_cuda_backend_stream() gives.
 *
 * Threads: the ops of one backend must be called from one thread at a
 * time (any thread; each call makes the backend's device current on the
 * calling thread).  Two backends, e.g. one per device, may be driven from
 * two threads at once.
 *
 * Memory: alloc() is cudaMalloc; weights, the KV store and float arrays
 * are device memory of this backend's device.  The index arrays of the ops
 * (backend.h) are host memory: they are copied into a pinned ring and from
 * there to the device on the backend's stream, so the caller may reuse
 * them as soon as the op returns.
 *
 * Errors: every CUDA and cuBLAS call is checked.  The first failure is
 * kept, e.g. "cudaMalloc(4096 MiB): out of memory
 * (cudaErrorMemoryAllocation=2)", later ops are skipped, and download(),
 * sync() and step_end() return -EIO with that message from then on: a
 * failed backend stays failed; destroy it.  alloc() is the exception: it
 * returns NULL with errno ENOMEM and leaves the backend usable.
 *
 * Graphs: with PAGODA_CUDA_GRAPHS=1 in the environment at creation,
 * step_begin()/step_end() record a step's ops and replay them as a CUDA
 * graph when the same ops, shapes and pointers come again (up to 64 graphs
 * per backend, least recently used dropped).  Without it they only bracket
 * the step (step_end() is sync()).
 */
#ifndef PAGODA_KERNELS_CUDA_BACKEND_CUDA_H
#define PAGODA_KERNELS_CUDA_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* What pg_cuda_device_info() tells of a device. */
struct pg_cuda_device_info {
	char name[256];
	size_t total_bytes;		/* device memory */
	size_t free_bytes;		/* free now (cudaMemGetInfo) */
	int sm_count;			/* multiprocessors */
	int cc_major, cc_minor;		/* compute capability */
	int mem_bus_bits;		/* memory bus width, 0 if unknown */
	int mem_clock_khz;		/* memory clock, 0 if unknown */
	double peak_bandwidth_gbs;	/* 2 x clock x bus / 8, 0 if unknown */
};

/*
 * pg_cuda_device_count - the number of CUDA devices; 0 when there is no
 * driver, no device, or any error (it never fails loudly).
 */
int pg_cuda_device_count(void);

/*
 * pg_cuda_device_info - fill *out for device `device`.  0, or -ENODEV
 * (no such device) or -EIO with a message in err.
 */
int pg_cuda_device_info(int device, struct pg_cuda_device_info *out,
			char *err, size_t err_len);

/*
 * pg_cuda_backend_create - a backend on CUDA device `device`: its stream,
 * cuBLAS handle and pinned staging buffers.  Destroy with be->ops->destroy,
 * which waits for the stream and frees everything the backend holds,
 * alloc()'s memory not yet freed included.  NULL with a message in err on
 * failure, e.g. "no CUDA device 0: ...".
 */
struct pg_backend *pg_cuda_backend_create(int device, char *err,
					  size_t err_len);

/*
 * pg_cuda_backend_stream - the backend's cudaStream_t (as void *), on
 * which every op runs; NCCL calls enqueued there are ordered with the ops.
 */
void *pg_cuda_backend_stream(struct pg_backend *be);

/*
 * pg_cuda_argmax - for each of n_rows rows of device logits
 * (n_rows, n_vocab), the lowest id holding the largest value (NaN ignored;
 * 0 when a row is all NaN), as the CPU sampler's greedy choice; written to
 * host ids (n_rows).  Waits for the result.  0, or -EIO with a message.
 */
int pg_cuda_argmax(struct pg_backend *be, const float *logits, int n_rows,
		   int n_vocab, int32_t *ids, char *err, size_t err_len);

/*
 * pg_cuda_topk - the k largest logits of each row, largest first (equal
 * values: lower id first; NaN ignored, missing entries -inf with id -1),
 * to host vals and ids (n_rows, k).  k in 1 .. 1024.  Waits for the
 * result.  0, -EINVAL (bad k), or -EIO with a message.  It is k passes
 * over the row: meant for the small k of top-k sampling.
 */
int pg_cuda_topk(struct pg_backend *be, const float *logits, int n_rows,
		 int n_vocab, int k, float *vals, int32_t *ids, char *err,
		 size_t err_len);

#endif
