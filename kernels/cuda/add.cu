/*
 * add.cu - the add op on the GPU: x += y, the residual connection.
 *
 * Four floats a thread a step when both arrays are 16-byte aligned (they
 * are, from alloc()), one otherwise.  Exact: the same single additions as
 * the CPU.
 */
#include "common.cuh"

#define ADD_THREADS 256

/* x, y: (n) floats; n4 of them as float4 when vec. */
template <bool VEC>
static __global__ void __launch_bounds__(ADD_THREADS)
add_kernel(float *x, const float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;

	if constexpr (VEC) {
		float4 *x4 = (float4 *)x;
		const float4 *y4 = (const float4 *)y;

		for (int64_t j = i; j < n / 4; j += step) {
			float4 a = x4[j], b = y4[j];

			a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
			x4[j] = a;
		}
		for (int64_t j = n / 4 * 4 + i; j < n; j += step)
			x[j] += y[j];
	} else {
		for (int64_t j = i; j < n; j += step)
			x[j] += y[j];
	}
}

void pg_cuda_run_add(struct pg_cuda_backend *cb, const struct pg_cuda_op *op)
{
	const struct pg_cuda_eltwise *a = &op->a.elt;
	bool vec = (((uintptr_t)a->x | (uintptr_t)a->y) & 15) == 0;
	unsigned int grid = pg_grid(vec ? (a->n + 3) / 4 : a->n, ADD_THREADS);

	if (vec)
		add_kernel<true><<<grid, ADD_THREADS, 0, cb->stream>>>(a->x, a->y,
								      a->n);
	else
		add_kernel<false><<<grid, ADD_THREADS, 0, cb->stream>>>(a->x,
								       a->y,
								       a->n);
	pg_cuda_launched(cb, "add");
}
