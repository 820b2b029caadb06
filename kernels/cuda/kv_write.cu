/*
 * kv_write.cu - the kv_write op on the GPU: store tokens' K and V rows in
 * their slots of the paged KV store, converting to the page's type.
 *
 * Grid: (token, K or V); threads over the token's n_kv_heads * head_dim
 * values.  Slots come from the op's staged copy; a slot of -1 (another CP
 * rank's token) is skipped.  Rounding to F16/BF16 is to nearest even, as
 * quant.c's.
 */
#include "kernels/cuda/common.cuh"

#define KVW_THREADS 256

/* src: (n, n_kv_heads * head_dim); slots: (n) device */
template <typename T>
static __global__ void __launch_bounds__(KVW_THREADS)
kv_write_kernel(struct pg_cuda_kv kv, int block, const float *k,
		const float *v, const int32_t *slots)
{
	int32_t slot = slots[blockIdx.x];
	int which = blockIdx.y, hd = kv.head_dim;
	int width = kv.n_kv_heads * hd;
	const float *src = (which ? v : k) + (size_t)blockIdx.x * width;
	uint8_t *page;
	size_t off;

	if (slot < 0)
		return;
	page = (uint8_t *)kv.base + (size_t)(slot / kv.page_tokens) *
	       kv.page_bytes;
	off = (size_t)(slot % kv.page_tokens);
	for (int i = threadIdx.x; i < width; i += KVW_THREADS) {
		int h = i / hd, d = i % hd;
		size_t row = (((size_t)block * 2 + which) * kv.n_kv_heads + h) *
			     kv.page_tokens + off;

		pg_elem<T>::store((T *)page + row * hd + d, src[i]);
	}
}

void pg_cuda_run_kv_write(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op)
{
	const struct pg_cuda_kv_write *a = &op->a.kv_write;
	const int32_t *slots = (const int32_t *)pg_cuda_staged_dev(cb, op);
	dim3 grid(a->n, 2);

	switch (a->kv.type) {
	case PG_F32:
		kv_write_kernel<float><<<grid, KVW_THREADS, 0, cb->stream>>>(
			a->kv, a->block, a->k, a->v, slots);
		break;
	case PG_F16:
		kv_write_kernel<__half><<<grid, KVW_THREADS, 0, cb->stream>>>(
			a->kv, a->block, a->k, a->v, slots);
		break;
	default:
		kv_write_kernel<__nv_bfloat16><<<grid, KVW_THREADS, 0,
						 cb->stream>>>(
			a->kv, a->block, a->k, a->v, slots);
		break;
	}
	pg_cuda_launched(cb, "kv_write");
}
