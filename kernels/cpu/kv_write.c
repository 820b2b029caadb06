/*
 * kv_write.c - the kv_write op: store tokens' K and V rows into their
 * slots of the paged KV storage, converting to the page's element type.
 *
 * The page layout is backend.h's [block][K,V][kv_head][slot][head_dim].
 * It does not allocate pages: slots come from the caller's page tables.
 */
#include "kernels/cpu/cpu_impl.h"

/* src: (n_kv_heads * head_dim) floats of one token. */
static void store_token(const struct pg_kv_layout *kv, int block, int which,
			const float *src, int32_t slot)
{
	for (int h = 0; h < kv->n_kv_heads; h++)
		pg_quantize_row(kv->type, src + (size_t)h * kv->head_dim,
				pg_kv_row(kv, block, which, h, slot),
				kv->head_dim);
}

/* k, v: (n, n_kv_heads * head_dim); slots: (n), -1 = not held here */
void pg_cpu_kv_write(struct pg_backend *be, const struct pg_kv_layout *kv,
		     int block, const float *k, const float *v, int n,
		     const int32_t *slots)
{
	size_t stride = (size_t)kv->n_kv_heads * (size_t)kv->head_dim;

	for (int t = 0; t < n; t++) {
		if (slots[t] < 0)	/* another CP rank's token */
			continue;
		store_token(kv, block, 0, k + t * stride, slots[t]);
		store_token(kv, block, 1, v + t * stride, slots[t]);
	}
}
