/*
 * rope.cu - the rope op on the GPU: rotary position embedding in place,
 * NORM (adjacent pairs) or NEOX (halves) layout.
 *
 * One block per token.  The angles are rope.c's: theta_0 = pos, theta_i =
 * theta_{i-1} * theta_scale in float, one product after the other (thread
 * 0 walks them into shared memory), and theta_scale is powf()'d on the
 * host.  Sine and cosine are taken in double and rounded to float, which
 * is the correctly rounded value the host's sinf/cosf give (the device's
 * float versions are 2 ulp off).  The rotation is rounded as on the CPU
 * (rope.c): x0 cos - x1 sin as one fused multiply-add less a rounded
 * product, x0 sin + x1 cos likewise.
 */
#include "kernels/cuda/common.cuh"

#define ROPE_THREADS 128
#define ROPE_MAX_PAIRS 512		/* n_rot <= 1024 */

/* x: (n, n_heads * head_dim); pos: (n) device.  Block t: token t. */
static __global__ void __launch_bounds__(ROPE_THREADS)
rope_kernel(float *x, const int32_t *pos, int n_heads, int head_dim,
	    int n_rot, float theta_scale, int neox)
{
	__shared__ float cs[ROPE_MAX_PAIRS], sn[ROPE_MAX_PAIRS];
	int half = n_rot / 2;
	float *xt = x + (size_t)blockIdx.x * (size_t)n_heads * head_dim;

	if (threadIdx.x == 0) {
		float theta = (float)pos[blockIdx.x];

		for (int i = 0; i < half; i++) {
			cs[i] = theta;
			theta = __fmul_rn(theta, theta_scale);
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < half; i += ROPE_THREADS) {
		double s, c;

		sincos((double)cs[i], &s, &c);
		cs[i] = (float)c;
		sn[i] = (float)s;
	}
	__syncthreads();
	for (int k = threadIdx.x; k < n_heads * half; k += ROPE_THREADS) {
		int h = k / half, i = k % half;
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		float *xh = xt + (size_t)h * head_dim;
		float x0 = xh[a], x1 = xh[b];

		xh[a] = __fmaf_rn(x0, cs[i], -__fmul_rn(x1, sn[i]));
		xh[b] = __fmaf_rn(x0, sn[i], __fmul_rn(x1, cs[i]));
	}
}

void pg_cuda_run_rope(struct pg_cuda_backend *cb, const struct pg_cuda_op *op)
{
	const struct pg_cuda_rope *a = &op->a.rope;

	rope_kernel<<<a->n, ROPE_THREADS, 0, cb->stream>>>(
		a->x, (const int32_t *)pg_cuda_staged_dev(cb, op), a->n_heads,
		a->head_dim, a->n_rot, a->theta_scale,
		a->mode == PG_ROPE_NEOX);
	pg_cuda_launched(cb, "rope");
}
