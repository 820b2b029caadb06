/*
 * silu_mul.cu - the element-wise activation ops on the GPU: silu_mul
 * (gate = silu(gate) * up, the SwiGLU of the feed-forward block), and
 * Gemma's gelu_mul (GeGLU), scale and softcap.
 *
 * silu(g) = g / (1 + expf(-g)) as the CPU's reference loop writes it; the
 * device expf is within 2 ulp of the host's, so results may differ from
 * the CPU's in the last bits.  gelu_mul and softcap are gelu.c's float
 * expressions in its order of operations, each product and sum rounded
 * alone (no FMA), with the device tanhf (within 2 ulp of the host's);
 * gelu_mul computes what gelu.c's table holds: 0 at or below -10, x at or
 * above 10, else GELU of x rounded to F16, rounded to F16 (the device's
 * tanhf can move that last rounding by one F16 step, rarely).  scale is
 * one rounded product, the CPU's bits.
 */
#include "kernels/cuda/common.cuh"

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

#define GELU_SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_COEF_A 0.044715f

enum { ELT_GELU_MUL, ELT_SCALE, ELT_SOFTCAP };

/* x, y: (n); s: scale's factor or softcap's cap. */
template <int OP>
static __global__ void __launch_bounds__(SILU_THREADS)
elt_kernel(float *x, const float *y, float s, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;

	for (; i < n; i += step) {
		float v = x[i];

		if constexpr (OP == ELT_GELU_MUL) {
			/* 0.5 v (1 + tanh(c v (1 + a v v))), gelu.c's order,
			 * of v in F16, rounded to F16 */
			float h = __half2float(__float2half_rn(v));
			float in = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(
				GELU_COEF_A, h), h));
			float t = tanhf(__fmul_rn(__fmul_rn(GELU_SQRT_2_OVER_PI,
							    h), in));
			float g = __half2float(__float2half_rn(__fmul_rn(
				__fmul_rn(0.5f, h), __fadd_rn(1.0f, t))));

			g = v <= -10.0f ? 0.0f : v >= 10.0f ? v : g;
			x[i] = __fmul_rn(g, y[i]);
		} else if constexpr (OP == ELT_SCALE) {
			x[i] = __fmul_rn(v, s);
		} else {
			x[i] = __fmul_rn(s, tanhf(__fdiv_rn(v, s)));
		}
	}
}

template <int OP>
static void elt_run(struct pg_cuda_backend *cb, const struct pg_cuda_op *op,
		    const char *name)
{
	const struct pg_cuda_eltwise *a = &op->a.elt;

	elt_kernel<OP><<<pg_grid(a->n, SILU_THREADS), SILU_THREADS, 0,
			 cb->stream>>>(a->x, a->y, a->s, a->n);
	pg_cuda_launched(cb, name);
}

void pg_cuda_run_gelu_mul(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op)
{
	elt_run<ELT_GELU_MUL>(cb, op, "gelu_mul");
}

void pg_cuda_run_scale(struct pg_cuda_backend *cb, const struct pg_cuda_op *op)
{
	elt_run<ELT_SCALE>(cb, op, "scale");
}

void pg_cuda_run_softcap(struct pg_cuda_backend *cb,
			 const struct pg_cuda_op *op)
{
	elt_run<ELT_SOFTCAP>(cb, op, "softcap");
}
