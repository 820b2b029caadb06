/*
 * sample.cu - greedy and top-k choices on device logits: not backend ops,
 * the helpers pg_cuda_argmax() and pg_cuda_topk() of backend_cuda.h, so
 * that a sampler need not download a whole vocabulary.
 *
 * One block per row.  Order: larger value first, equal values lower id
 * first, NaN never chosen; this is the CPU sampler's greedy rule.  Top-k
 * takes k passes, each the largest entry after the previous one in that
 * order: simple and exact, meant for small k.
 */
#include <limits.h>

#include "kernels/cuda/common.cuh"

#define SAMPLE_THREADS 256

/* Does (v, i) come before (bv, bi): larger, or equal and lower id. */
static __device__ __forceinline__ bool before(float v, int i, float bv, int bi)
{
	return v > bv || (v == bv && i < bi);
}

/* The first of (v, i) over the block; every thread gets it. */
static __device__ void block_best(float *v, int *i)
{
	__shared__ float sv[SAMPLE_THREADS / 32];
	__shared__ int si[SAMPLE_THREADS / 32];
	int lane = threadIdx.x & 31, w = threadIdx.x / 32;

	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(PG_FULL_MASK, *v, o);
		int oi = __shfl_xor_sync(PG_FULL_MASK, *i, o);

		if (before(ov, oi, *v, *i)) {
			*v = ov;
			*i = oi;
		}
	}
	__syncthreads();	/* sv, si of a previous call are read */
	if (lane == 0) {
		sv[w] = *v;
		si[w] = *i;
	}
	__syncthreads();
	*v = sv[0];
	*i = si[0];
	for (int k = 1; k < SAMPLE_THREADS / 32; k++)
		if (before(sv[k], si[k], *v, *i)) {
			*v = sv[k];
			*i = si[k];
		}
}

/* logits: (rows, n_vocab); ids: (rows).  Block r: row r. */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
argmax_kernel(const float *logits, int n_vocab, int32_t *ids)
{
	const float *x = logits + (size_t)blockIdx.x * n_vocab;
	float bv = -INFINITY;
	int bi = INT_MAX;

	for (int j = threadIdx.x; j < n_vocab; j += SAMPLE_THREADS) {
		float v = x[j];

		if (v == v && before(v, j, bv, bi)) {
			bv = v;
			bi = j;
		}
	}
	block_best(&bv, &bi);
	if (threadIdx.x == 0)
		ids[blockIdx.x] = bi == INT_MAX ? 0 : bi;
}

/* vals, ids: (rows, k).  Block r: row r, k passes. */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
topk_kernel(const float *logits, int n_vocab, int k, float *vals,
	    int32_t *ids)
{
	const float *x = logits + (size_t)blockIdx.x * n_vocab;
	float pv = INFINITY;
	int pi = -1;

	for (int r = 0; r < k; r++) {
		float bv = -INFINITY;
		int bi = INT_MAX;

		for (int j = threadIdx.x; j < n_vocab; j += SAMPLE_THREADS) {
			float v = x[j];

			/* after (pv, pi) in the order, and the best such */
			if (v == v && before(pv, pi, v, j) &&
			    before(v, j, bv, bi)) {
				bv = v;
				bi = j;
			}
		}
		block_best(&bv, &bi);
		if (threadIdx.x == 0) {
			vals[(size_t)blockIdx.x * k + r] = bi == INT_MAX ?
							   -INFINITY : bv;
			ids[(size_t)blockIdx.x * k + r] = bi == INT_MAX ? -1 :
							  bi;
		}
		pv = bv;
		pi = bi;
	}
}

void pg_cuda_argmax_launch(struct pg_cuda_backend *cb, const float *logits,
			   int n_rows, int n_vocab, int32_t *ids)
{
	argmax_kernel<<<n_rows, SAMPLE_THREADS, 0, cb->stream>>>(logits,
								 n_vocab, ids);
	pg_cuda_launched(cb, "argmax");
}

void pg_cuda_topk_launch(struct pg_cuda_backend *cb, const float *logits,
			 int n_rows, int n_vocab, int k, float *vals,
			 int32_t *ids)
{
	topk_kernel<<<n_rows, SAMPLE_THREADS, 0, cb->stream>>>(logits, n_vocab,
							       k, vals, ids);
	pg_cuda_launched(cb, "topk");
}
