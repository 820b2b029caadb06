/*
 * silu_mul.cu - the silu_mul op on the GPU: gate = silu(gate) * up, the
 * SwiGLU of the feed-forward block.
 *
 * silu(g) = g / (1 + expf(-g)) as the CPU's reference loop writes it; the
 * device expf is within 2 ulp of the host's, so results may differ from
 * the CPU's in the last bits.
 */
#include "common.cuh"

#define SILU_THREADS 256

/* gate, up: (n) */
static __global__ void __launch_bounds__(SILU_THREADS)
silu_mul_kernel(float *gate, const float *up, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;

	for (; i < n; i += step) {
		float g = gate[i];

		gate[i] = __fmul_rn(g / (1.0f + expf(-g)), up[i]);
	}
}

void pg_cuda_run_silu_mul(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op)
{
	const struct pg_cuda_eltwise *a = &op->a.elt;

	silu_mul_kernel<<<pg_grid(a->n, SILU_THREADS), SILU_THREADS, 0,
			  cb->stream>>>(a->x, a->y, a->n);
	pg_cuda_launched(cb, "silu_mul");
}
