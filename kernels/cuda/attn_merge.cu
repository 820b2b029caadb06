/*
 * attn_merge.cu - the attn_merge op on the GPU: combine partial attentions
 * of the same queries over disjoint key sets (CP ranks' shares).
 *
 * One block per (row, head), threads over head_dim.  The arithmetic is
 * attention.c's merge, part by part in order with separately rounded
 * products and sums, so that every device merging the same parts gets the
 * same bits (expf aside: the device's may differ from the host's).
 */
#include "kernels/cuda/common.cuh"

#define MERGE_THREADS 128

/* parts: n_parts x part_floats; out: (rows * n_heads, head_dim) */
static __global__ void __launch_bounds__(MERGE_THREADS)
attn_merge_kernel(const float *parts, uint64_t part_floats, int n_parts,
		  uint64_t n_rh, int head_dim, float *out)
{
	uint64_t rh = blockIdx.x;
	const float *lse = parts + n_rh * (uint64_t)head_dim + rh;
	float *o = out + rh * (uint64_t)head_dim;
	float mx = -INFINITY;

	for (int p = 0; p < n_parts; p++)
		mx = fmaxf(mx, lse[(uint64_t)p * part_floats]);
	for (int d = threadIdx.x; d < head_dim; d += MERGE_THREADS) {
		float acc = 0.0f, sum = 0.0f;

		if (mx == -INFINITY) {
			o[d] = 0.0f;
			continue;
		}
		for (int p = 0; p < n_parts; p++) {
			const float *part = parts + (uint64_t)p * part_floats;
			float l = lse[(uint64_t)p * part_floats], w;

			if (l == -INFINITY)
				continue;
			w = expf(l - mx);
			sum += w;
			acc = __fadd_rn(acc, __fmul_rn(w, part[rh * head_dim + d]));
		}
		o[d] = acc / sum;
	}
}

void pg_cuda_run_attn_merge(struct pg_cuda_backend *cb,
			    const struct pg_cuda_op *op)
{
	const struct pg_cuda_attn_merge *a = &op->a.attn_merge;
	uint64_t n_rh = (uint64_t)a->rows * (uint64_t)a->n_heads;

	attn_merge_kernel<<<(unsigned int)n_rh, MERGE_THREADS, 0,
			    cb->stream>>>(a->parts, a->part_floats, a->n_parts,
					  n_rh, a->head_dim, a->out);
	pg_cuda_launched(cb, "attn_merge");
}
