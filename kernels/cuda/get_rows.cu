/*
 * get_rows.cu - the get_rows op on the GPU: rows of a matrix (the token
 * embedding), by id, as floats.
 *
 * One block per id, threads over the row: a value each for the plain
 * float types, 32 values each (a block, or an eighth of a K-quant
 * super-block) for the quantised ones, dequantised with quant.c's
 * arithmetic (pg_dequant32, common.cuh), so the rows are the CPU's bits.
 * The ids come from the op's staged copy.
 */
#include "kernels/cuda/common.cuh"

#define ROWS_THREADS 256

/* F32, F16, BF16: ids (n) device; out (n, n_cols).  Block i: id i. */
template <int WT>
static __global__ void __launch_bounds__(ROWS_THREADS)
get_rows_f_kernel(const uint8_t *data, uint64_t row_bytes, int64_t n_cols,
		  const int32_t *ids, float *out)
{
	const uint8_t *r = data + (uint64_t)ids[blockIdx.x] * row_bytes;
	float *o = out + (size_t)blockIdx.x * (size_t)n_cols;

	for (int64_t j = threadIdx.x; j < n_cols; j += ROWS_THREADS) {
		if constexpr (WT == PG_F32)
			o[j] = ((const float *)r)[j];
		else if constexpr (WT == PG_F16)
			o[j] = pg_h2f(((const uint16_t *)r)[j]);
		else
			o[j] = pg_b2f(((const uint16_t *)r)[j]);
	}
}

/* The quantised types: thread per 32 values of the row. */
template <int WT>
static __global__ void __launch_bounds__(ROWS_THREADS)
get_rows_q_kernel(const uint8_t *data, uint64_t row_bytes, int64_t n_cols,
		  const int32_t *ids, float *out)
{
	const uint8_t *r = data + (uint64_t)ids[blockIdx.x] * row_bytes;
	float *o = out + (size_t)blockIdx.x * (size_t)n_cols;
	constexpr int per = pg_qt<WT>::qk / 32;

	for (int64_t ch = threadIdx.x; ch < n_cols / 32; ch += ROWS_THREADS) {
		float v[32];

		pg_dequant32<WT>(r + (ch / per) * pg_qt<WT>::bytes,
				 (int)(ch % per), v);
#pragma unroll
		for (int j = 0; j < 32; j++)
			o[ch * 32 + j] = v[j];
	}
}

template <int WT>
static void launch_q(struct pg_cuda_backend *cb, const struct pg_cuda_get_rows *a,
		     const int32_t *ids)
{
	get_rows_q_kernel<WT><<<a->n, ROWS_THREADS, 0, cb->stream>>>(
		(const uint8_t *)a->m.data, a->m.row_bytes, a->m.n_cols, ids,
		a->out);
}

template <int WT>
static void launch_f(struct pg_cuda_backend *cb, const struct pg_cuda_get_rows *a,
		     const int32_t *ids)
{
	get_rows_f_kernel<WT><<<a->n, ROWS_THREADS, 0, cb->stream>>>(
		(const uint8_t *)a->m.data, a->m.row_bytes, a->m.n_cols, ids,
		a->out);
}

void pg_cuda_run_get_rows(struct pg_cuda_backend *cb,
			  const struct pg_cuda_op *op)
{
	const struct pg_cuda_get_rows *a = &op->a.get_rows;
	const int32_t *ids = (const int32_t *)pg_cuda_staged_dev(cb, op);

	switch (a->m.type) {
	case PG_F32: launch_f<PG_F32>(cb, a, ids); break;
	case PG_F16: launch_f<PG_F16>(cb, a, ids); break;
	case PG_BF16: launch_f<PG_BF16>(cb, a, ids); break;
	case PG_Q8_0: launch_q<PG_Q8_0>(cb, a, ids); break;
	case PG_Q4_0: launch_q<PG_Q4_0>(cb, a, ids); break;
	case PG_Q4_1: launch_q<PG_Q4_1>(cb, a, ids); break;
	case PG_Q5_0: launch_q<PG_Q5_0>(cb, a, ids); break;
	case PG_Q5_1: launch_q<PG_Q5_1>(cb, a, ids); break;
	case PG_Q2_K: launch_q<PG_Q2_K>(cb, a, ids); break;
	case PG_Q3_K: launch_q<PG_Q3_K>(cb, a, ids); break;
	case PG_Q4_K: launch_q<PG_Q4_K>(cb, a, ids); break;
	case PG_Q5_K: launch_q<PG_Q5_K>(cb, a, ids); break;
	case PG_Q6_K: launch_q<PG_Q6_K>(cb, a, ids); break;
	default:
		pg_cuda_fail_msg(cb, "get_rows: weight type not supported");
		return;
	}
	pg_cuda_launched(cb, "get_rows");
}
