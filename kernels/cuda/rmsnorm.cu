/*
 * rmsnorm.cu - the rmsnorm op on the GPU: each row divided by its root
 * mean square, then multiplied by the weight vector.
 *
 * One block per row: a block-wide sum of squares (float, tree order, so
 * the last bits may differ from the CPU's sequential sum), then
 * out = (x * s) * w with s = 1 / sqrtf(ms + eps) as rmsnorm.c computes it.
 * In place is fine: each element is read by the thread that writes it.
 */
#include "kernels/cuda/common.cuh"

#define RMS_THREADS 256

/* x, out: (n, dim); w: (dim).  Block i: row i. */
static __global__ void __launch_bounds__(RMS_THREADS)
rmsnorm_kernel(const float *x, const float *w, int dim, float eps,
	       float *out)
{
	__shared__ float part[RMS_THREADS / 32];
	const float *xr = x + (size_t)blockIdx.x * dim;
	float *o = out + (size_t)blockIdx.x * dim;
	float ss = 0.0f, s;

	for (int i = threadIdx.x; i < dim; i += RMS_THREADS)
		ss = fmaf(xr[i], xr[i], ss);
	ss = pg_warp_sum(ss);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = ss;
	__syncthreads();
	ss = 0.0f;
#pragma unroll
	for (int i = 0; i < RMS_THREADS / 32; i++)
		ss += part[i];
	s = 1.0f / sqrtf(ss / (float)dim + eps);
	for (int i = threadIdx.x; i < dim; i += RMS_THREADS)
		o[i] = __fmul_rn(__fmul_rn(xr[i], s), w[i]);
}

void pg_cuda_run_rmsnorm(struct pg_cuda_backend *cb,
			 const struct pg_cuda_op *op)
{
	const struct pg_cuda_rmsnorm *a = &op->a.rmsnorm;

	rmsnorm_kernel<<<a->n, RMS_THREADS, 0, cb->stream>>>(a->x, a->w,
							     a->dim, a->eps,
							     a->out);
	pg_cuda_launched(cb, "rmsnorm");
}
