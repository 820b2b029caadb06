/*
 * get_rows.cu - the get_rows op on the GPU: rows of a matrix (the token
 * embedding), by id, as floats.
 *
 * One block per id, threads over the columns; each value is dequantised
 * alone, with quant.c's arithmetic (d * q, then + m for Q4_1), so the rows
 * are the CPU's bits.  The ids come from the op's staged copy.
 */
#include "common.cuh"

#define ROWS_THREADS 256

/* The value at column j of a row of type t starting at r. */
static __device__ __forceinline__ float row_value(const uint8_t *r, int t,
						  int64_t j)
{
	int64_t b = j / PG_QK;
	int k = (int)(j % PG_QK);
	const uint8_t *blk;
	int q;

	switch (t) {
	case PG_F32:
		return ((const float *)r)[j];
	case PG_F16:
		return pg_h2f(((const uint16_t *)r)[j]);
	case PG_BF16:
		return pg_b2f(((const uint16_t *)r)[j]);
	case PG_Q8_0:
		blk = r + b * sizeof(struct pg_block_q8_0);
		return __fmul_rn(pg_h2f(*(const uint16_t *)blk),
				 (float)(int8_t)blk[2 + k]);
	case PG_Q4_0:
		blk = r + b * sizeof(struct pg_block_q4_0);
		q = k < 16 ? blk[2 + k] & 0x0f : blk[2 + k - 16] >> 4;
		return __fadd_rn(__fmul_rn(pg_h2f(*(const uint16_t *)blk),
					   (float)(q - 8)), 0.0f);
	case PG_Q4_1:
		blk = r + b * sizeof(struct pg_block_q4_1);
		q = k < 16 ? blk[4 + k] & 0x0f : blk[4 + k - 16] >> 4;
		return __fadd_rn(__fmul_rn(pg_h2f(*(const uint16_t *)blk),
					   (float)q),
				 pg_h2f(*(const uint16_t *)(blk + 2)));
	}
	return 0.0f;
}

/* ids: (n) device; out: (n, n_cols).  Block i: id i. */
static __global__ void __launch_bounds__(ROWS_THREADS)
get_rows_kernel(const uint8_t *data, uint64_t row_bytes, int64_t n_cols,
		int type, const int32_t *ids, float *out)
{
	const uint8_t *r = data + (uint64_t)ids[blockIdx.x] * row_bytes;
	float *o = out + (size_t)blockIdx.x * (size_t)n_cols;

	for (int64_t j = threadIdx.x; j < n_cols; j += ROWS_THREADS)
		o[j] = row_value(r, type, j);
}

void pg_cuda_run_get_rows(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op)
{
	const struct pg_cuda_get_rows *a = &op->a.get_rows;

	get_rows_kernel<<<a->n, ROWS_THREADS, 0, cb->stream>>>(
		(const uint8_t *)a->m.data, a->m.row_bytes, a->m.n_cols,
		a->m.type, (const int32_t *)pg_cuda_staged_dev(cb, op),
		a->out);
	pg_cuda_launched(cb, "get_rows");
}
