/*
 * add.cu - the add ops on the GPU: x += y, the residual connection, and
 * sum_parts, out = ((p_0 + p_1) + p_2) + .. in part order.
 *
 * add: four floats a thread a step when both arrays are 16-byte aligned
 * (they are, from alloc()), one otherwise.  Exact: the same single
 * additions as the CPU.  sum_parts: one value a thread a step, the parts'
 * pointers read from the op's staged copy; the same additions in the same
 * order as add.c's, so the CPU's bits.
 */
#include "kernels/cuda/common.cuh"

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

/* out (n) = ((parts[0] + parts[1]) + ..) (n_parts >= 1) */
static __global__ void __launch_bounds__(ADD_THREADS)
sum_parts_kernel(float *out, const float *const *parts, int n_parts,
		 int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;

	for (; i < n; i += step) {
		float t = parts[0][i];

		for (int p = 1; p < n_parts; p++)
			t = __fadd_rn(t, parts[p][i]);
		out[i] = t;
	}
}

void pg_cuda_run_sum_parts(struct pg_cuda_backend *cb,
			   const struct pg_cuda_op *op)
{
	const struct pg_cuda_sum_parts *a = &op->a.sum_parts;

	sum_parts_kernel<<<pg_grid(a->n, ADD_THREADS), ADD_THREADS, 0,
			   cb->stream>>>(
		a->out, (const float *const *)pg_cuda_staged_dev(cb, op),
		a->n_parts, a->n);
	pg_cuda_launched(cb, "sum_parts");
}
