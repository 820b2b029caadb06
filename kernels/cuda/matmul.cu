/*
 * matmul.cu - the matmul op on the GPU: y = W x (+ bias) for a batch of
 * token rows, W in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 or a
 * K-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
 *
 * Decode (n <= PG_CUDA_GEMV_MAX_N tokens): GEMV kernels, one warp per
 * weight row, every token of the batch against the row while it is in
 * registers.  Quantised weights take the activations quantised first as
 * the CPU quantises them (quantize_kernel: Q8_0, or Q8_1 for Q4_1 and
 * Q5_1; quantize_k_kernel: Q8_K for the K-quants, with quant.c's
 * rounding) and dot them block by block in integers with __dp4a, each
 * block's sum scaled as dot.c does (fma(dw dx, (float)acc, sum), and
 * fma(mw, sx, .) for Q4_1/Q5_1), so the results are the CPU's up to the
 * order of the float sum over blocks.  The K-quants' GEMV gives a
 * super-block to 8 lanes, 32 values each; their integer sums (sub-block
 * sums times integer scales, mins times the activations' sums) are added
 * across the 8 lanes exactly, and the super-block is then scaled once as
 * dot.c does: fma(d dx, sumi, .) and fma(-(dmin dx), summ, .).
 * Dense weights dot float activations (fused multiply-adds).
 *
 * Prefill (more tokens): cuBLAS with FP32 accumulation.  F32 weights:
 * cublasSgemm.  F16/BF16 weights: the activations converted to the same
 * type, then cublasGemmEx.  Quantised weights: rows dequantised to F16
 * (quant.c's values, rounded to F16) into the workspace, a tile at a time,
 * and the activations converted to F16 (saturated at +-65504), then
 * cublasGemmEx.  F16 rather than BF16 keeps 11 mantissa bits of the
 * activations, nearer the CPU's 8-bit quantised activations times exact
 * block scales than BF16's 8 bits would be.
 *
 * Row-major y (n, N) = x (n, K) W^T is, column-major, Y (N x n) =
 * W^T-view (K x N, lda = row stride)^T times X (K x n): cuBLAS's
 * (OP_T, OP_N) with m = N, n = tokens, k = K.
 */
#include "kernels/cuda/common.cuh"

#define MM_WARPS 4			/* rows (warps) per GEMV block */
#define MM_QUANT_WARPS 8		/* activation blocks per block */
#define MM_X_CAP ((size_t)64 << 20)	/* converted activations, bytes */
#define MM_W_CAP ((size_t)64 << 20)	/* a dequantised weight tile */

static size_t align256(size_t b)
{
	return (b + 255) & ~(size_t)255;
}

static bool is_quant(int t)
{
	return t == PG_Q8_0 || t == PG_Q4_0 || t == PG_Q4_1 ||
	       t == PG_Q5_0 || t == PG_Q5_1 || t == PG_Q2_K || t == PG_Q3_K ||
	       t == PG_Q4_K || t == PG_Q5_K || t == PG_Q6_K;
}

/* Tokens per converted-activation chunk and rows per weight tile. */
static void mm_chunks(const struct pg_cuda_matmul *a, int64_t *tc,
		      int64_t *rc)
{
	int64_t k2 = a->w.n_cols * 2;

	*tc = (int64_t)(MM_X_CAP / (size_t)k2);
	*tc = *tc < 1 ? 1 : (*tc > a->n ? a->n : *tc);
	*rc = (int64_t)(MM_W_CAP / (size_t)k2);
	*rc = *rc < 1 ? 1 : (*rc > a->w.n_rows ? a->w.n_rows : *rc);
}

size_t pg_cuda_matmul_ws(const struct pg_cuda_matmul *a)
{
	int64_t k = a->w.n_cols, tc, rc;

	if (a->n <= PG_CUDA_GEMV_MAX_N) {
		if (!is_quant(a->w.type))
			return 0;
		/* Q8_K's scales (k / 256 a token) fit Q8_0's room */
		return align256((size_t)a->n * k) +
		       2 * align256((size_t)a->n * (k / PG_QK) * 4);
	}
	if (a->w.type == PG_F32)
		return 0;
	mm_chunks(a, &tc, &rc);
	return align256((size_t)tc * k * 2) +
	       (is_quant(a->w.type) ? align256((size_t)rc * k * 2) : 0);
}

/* ---- activations quantised to 8 bits (decode) ---- */

/*
 * x: (n, K) floats; xq: (n, K) int8; xd, xs: (n, K / 32) floats, the
 * block's F16 scale and (Q8_1) F16 d * sum(q), as floats.  One warp per
 * block of 32 values, lane j its value j: quant.c's quant_block_act.
 */
static __global__ void __launch_bounds__(MM_QUANT_WARPS * 32)
quantize_kernel(const float *x, int64_t n_blocks, int8_t *xq, float *xd,
		float *xs)
{
	int64_t b = (int64_t)blockIdx.x * MM_QUANT_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x & 31;
	float v, amax, d, id;
	int q, sum;

	if (b >= n_blocks)
		return;		/* the whole warp: b is warp-uniform */
	v = x[b * PG_QK + lane];
	amax = pg_warp_max(fabsf(v));
	d = amax / 127.0f;
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
	q = __float2int_rn(__fmul_rn(v, id));	/* nearbyintf: ties to even */
	xq[b * PG_QK + lane] = (int8_t)q;
	sum = __reduce_add_sync(PG_FULL_MASK, q);
	if (lane == 0) {
		xd[b] = __half2float(__float2half_rn(d));
		if (xs)
			xs[b] = __half2float(__float2half_rn(
				__fmul_rn((float)sum, d)));
	}
}

/*
 * Q8_K (against the K-quants): one warp per 256 values, lane j values 8j
 * .. 8j + 7: quant.c's pg_quant_q8_k_ref, d = amax / 127 kept as a float
 * (not F16), q = rint(x * (127 / amax)), ties to even.  The sums of 16 q
 * (bsums) are not stored: the GEMV takes them from q with __dp4a, the same
 * integers.  xq: (n, K) int8; xd: (n, K / 256) floats.
 */
static __global__ void __launch_bounds__(MM_QUANT_WARPS * 32)
quantize_k_kernel(const float *x, int64_t n_blocks, int8_t *xq, float *xd)
{
	int64_t b = (int64_t)blockIdx.x * MM_QUANT_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x & 31;
	float v[8], amax = 0.0f, id;

	if (b >= n_blocks)
		return;		/* warp-uniform */
#pragma unroll
	for (int e = 0; e < 8; e++) {	/* x may be any float's address */
		v[e] = x[b * PG_QK_K + lane * 8 + e];
		amax = fmaxf(amax, fabsf(v[e]));
	}
	amax = pg_warp_max(amax);
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
#pragma unroll
	for (int e = 0; e < 8; e++)
		xq[b * PG_QK_K + lane * 8 + e] =
			(int8_t)__float2int_rn(__fmul_rn(v[e], id));
	if (lane == 0)
		xd[b] = amax / 127.0f;
}

/* ---- quantised GEMV ---- */

/*
 * The end of a GEMV warp: each token's partial sums over the warp, plus
 * the bias, into y[t][r] for the first n of the NT tokens.
 */
template <int NT>
static __device__ __forceinline__ void
store_row(const float (&sum)[NT], int n, int lane, int64_t r,
	  int64_t n_rows, const float *bias, float *y)
{
#pragma unroll
	for (int t = 0; t < NT; t++) {
		if (t >= n)
			break;
		float s = pg_warp_sum(sum[t]);

		if (lane == 0)
			y[t * n_rows + r] = bias ? s + bias[r] : s;
	}
}

/*
 * y (n, N) = W xq: one warp per row of W, lane j taking blocks j, j + 32,
 * ..., for the NT (>= n) tokens at once.  xq, xd, xs as quantize_kernel
 * wrote them; bias (N) or NULL.
 */
template <int WT, int NT>
static __global__ void __launch_bounds__(MM_WARPS * 32)
gemv_q_kernel(const uint8_t *wd, uint64_t row_bytes, int64_t n_rows,
	      int64_t k, int n, const int8_t *xq, const float *xd,
	      const float *xs, const float *bias, float *y)
{
	int64_t r = (int64_t)blockIdx.x * MM_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x & 31;
	int64_t nb = k / PG_QK;
	float sum[NT];

	if (r >= n_rows)
		return;		/* warp-uniform */
#pragma unroll
	for (int t = 0; t < NT; t++)
		sum[t] = 0.0f;
	const uint8_t *row = wd + (uint64_t)r * row_bytes;

	for (int64_t b = lane; b < nb; b += 32) {
		const uint8_t *w = row + b * pg_qt<WT>::bytes;
		float dw, mw;
		int wq[8];

		pg_q32_load<WT>(w, wq, &dw, &mw);

#pragma unroll
		for (int t = 0; t < NT; t++) {
			if (t >= n)
				break;
			const int4 *xp = (const int4 *)(xq + t * k + b * PG_QK);
			int4 x0 = xp[0], x1 = xp[1];
			const int xa[8] = { x0.x, x0.y, x0.z, x0.w,
					    x1.x, x1.y, x1.z, x1.w };
			int acc = 0;

#pragma unroll
			for (int i = 0; i < 8; i++)	/* dot.c's integer sum */
				acc = __dp4a(wq[i], xa[i], acc);
			float dx = xd[t * nb + b];

			sum[t] = __fmaf_rn(__fmul_rn(dw, dx), (float)acc, sum[t]);
			if (WT == PG_Q4_1 || WT == PG_Q5_1)
				sum[t] = __fmaf_rn(mw, xs[t * nb + b], sum[t]);
		}
	}
	store_row<NT>(sum, n, lane, r, n_rows, bias, y);
}

/* Sum of v over each aligned group of 8 lanes (exact: integers). */
static __device__ __forceinline__ int sum8(int v)
{
	v += __shfl_xor_sync(PG_FULL_MASK, v, 4);
	v += __shfl_xor_sync(PG_FULL_MASK, v, 2);
	v += __shfl_xor_sync(PG_FULL_MASK, v, 1);
	return v;
}

/*
 * y (n, N) = W xq for the K-quants: one warp per row of W; lanes 8g ..
 * 8g + 7 take super-blocks g, g + 4, ..., lane 8g + c its values 32c ..
 * 32c + 31.  Each lane's integer share of dot.c's sumi (sub-block sums
 * times their scales) and summ (mins times the activations' sums of 16),
 * added over the 8 lanes, then scaled once by lane 8g.  xq, xd as
 * quantize_k_kernel wrote them; bias (N) or NULL.
 */
template <int WT, int NT>
static __global__ void __launch_bounds__(MM_WARPS * 32)
gemv_k_kernel(const uint8_t *wd, uint64_t row_bytes, int64_t n_rows,
	      int64_t k, int n, const int8_t *xq, const float *xd,
	      const float *bias, float *y)
{
	int64_t r = (int64_t)blockIdx.x * MM_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x & 31, g = lane / 8, c = lane % 8;
	int64_t nb = k / PG_QK_K;
	float sum[NT];

	if (r >= n_rows)
		return;		/* warp-uniform */
#pragma unroll
	for (int t = 0; t < NT; t++)
		sum[t] = 0.0f;
	const uint8_t *row = wd + (uint64_t)r * row_bytes;

	/* every lane runs every step: the sums shuffle across the warp */
	for (int64_t b0 = 0; b0 < nb; b0 += 4) {
		int64_t b = b0 + g;
		bool on = b < nb;
		int wq[8], sc[2], m[2];
		float dw = 0.0f, dmin = 0.0f;

		if (on) {
			pg_kq_load<WT>(row + b * pg_qt<WT>::bytes, c, wq, sc, m,
				       &dw, &dmin);
		} else {
#pragma unroll
			for (int i = 0; i < 8; i++)
				wq[i] = 0;
			sc[0] = sc[1] = m[0] = m[1] = 0;
		}
#pragma unroll
		for (int t = 0; t < NT; t++) {
			if (t >= n)
				break;	/* warp-uniform */
			int xa[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

			if (on) {
				const int4 *xp = (const int4 *)(xq + t * k +
								b * PG_QK_K +
								32 * c);
				int4 x0 = xp[0], x1 = xp[1];

				xa[0] = x0.x; xa[1] = x0.y; xa[2] = x0.z;
				xa[3] = x0.w; xa[4] = x1.x; xa[5] = x1.y;
				xa[6] = x1.z; xa[7] = x1.w;
			}
			int s0 = 0, s1 = 0, sumi, summ = 0;

#pragma unroll
			for (int i = 0; i < 4; i++) {
				s0 = __dp4a(wq[i], xa[i], s0);
				s1 = __dp4a(wq[4 + i], xa[4 + i], s1);
			}
			sumi = sum8(sc[0] * s0 + sc[1] * s1);
			if constexpr (pg_kq_has_min(WT)) {
				int x0 = 0, x1 = 0;

#pragma unroll
				for (int i = 0; i < 4; i++) {
					x0 = __dp4a(xa[i], 0x01010101, x0);
					x1 = __dp4a(xa[4 + i], 0x01010101, x1);
				}
				summ = sum8(m[0] * x0 + m[1] * x1);
			}
			if (on && c == 0) {
				float dx = xd[t * nb + b];

				sum[t] = __fmaf_rn(__fmul_rn(dw, dx), (float)sumi,
						   sum[t]);
				if constexpr (pg_kq_has_min(WT))
					sum[t] = __fmaf_rn(-__fmul_rn(dmin, dx),
							   (float)summ, sum[t]);
			}
		}
	}
	store_row<NT>(sum, n, lane, r, n_rows, bias, y);
}

/* ---- dense GEMV ---- */

/*
 * y (n, N) = W x for F32/F16/BF16 W: one warp per row; VEC: lane takes 8
 * consecutive values a step (16-byte aligned rows and x), else 1.
 */
template <typename T, int NT, bool VEC>
static __global__ void __launch_bounds__(MM_WARPS * 32)
gemv_f_kernel(const uint8_t *wd, uint64_t row_bytes, int64_t n_rows,
	      int64_t k, int n, const float *x, const float *bias, float *y)
{
	int64_t r = (int64_t)blockIdx.x * MM_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x & 31;
	float sum[NT];

	if (r >= n_rows)
		return;		/* warp-uniform */
#pragma unroll
	for (int t = 0; t < NT; t++)
		sum[t] = 0.0f;
	const T *row = (const T *)(wd + (uint64_t)r * row_bytes);

	if constexpr (VEC) {
		for (int64_t j = (int64_t)lane * 8; j < k; j += 32 * 8) {
			float w[8];

			pg_load8<T>(row + j, w);
#pragma unroll
			for (int t = 0; t < NT; t++) {
				if (t >= n)
					break;
				float xv[8];

				pg_load8<float>(x + t * k + j, xv);
#pragma unroll
				for (int e = 0; e < 8; e++)
					sum[t] = fmaf(w[e], xv[e], sum[t]);
			}
		}
	} else {
		for (int64_t j = lane; j < k; j += 32) {
			float w = pg_elem<T>::load(row + j);

#pragma unroll
			for (int t = 0; t < NT; t++) {
				if (t >= n)
					break;
				sum[t] = fmaf(w, x[t * k + j], sum[t]);
			}
		}
	}
	store_row<NT>(sum, n, lane, r, n_rows, bias, y);
}

/* ---- conversions and bias for the cuBLAS path ---- */

/* out (n) = x (n) as T; SAT: clamped to F16's +-65504 first. */
template <typename T, bool SAT>
static __global__ void __launch_bounds__(256)
convert_kernel(const float *x, int64_t n, T *out)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;

	for (; i < n; i += step) {
		float v = x[i];

		if constexpr (SAT)
			v = fminf(fmaxf(v, -65504.0f), 65504.0f);
		pg_elem<T>::store(out + i, v);
	}
}

/*
 * out (rows, k) F16 = rows r0 .. of quantised W, as quant.c's floats
 * rounded to F16.  One thread per 32 values (a block, or an eighth of a
 * K-quant super-block): read once, write 32 halves.
 */
template <int WT>
static __global__ void __launch_bounds__(256)
dequant_kernel(const uint8_t *wd, uint64_t row_bytes, int64_t k,
	       int64_t n, __half *out)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;
	constexpr int per = pg_qt<WT>::qk / 32;	/* chunks per block */

	for (; i < n / 32; i += step) {
		int64_t r = i / (k / 32), ch = i % (k / 32);
		const uint8_t *w = wd + (uint64_t)r * row_bytes +
				   (ch / per) * pg_qt<WT>::bytes;
		__half *o = out + r * k + ch * 32;
		float v[32];

		pg_dequant32<WT>(w, (int)(ch % per), v);
#pragma unroll
		for (int j = 0; j < 32; j++)
			o[j] = __float2half_rn(v[j]);
	}
}

/* y (n, N) += bias (N) */
static __global__ void __launch_bounds__(256)
bias_kernel(float *y, const float *bias, int64_t n_rows, int64_t total)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t step = (int64_t)gridDim.x * blockDim.x;

	for (; i < total; i += step)
		y[i] += bias[i % n_rows];
}

/* ---- launchers ---- */

template <int WT, int NT>
static void gemv_q(struct pg_cuda_backend *cb, const struct pg_cuda_matmul *a,
		   const int8_t *xq, const float *xd, const float *xs)
{
	unsigned int grid = (unsigned int)((a->w.n_rows + MM_WARPS - 1) /
					   MM_WARPS);

	gemv_q_kernel<WT, NT><<<grid, MM_WARPS * 32, 0, cb->stream>>>(
		(const uint8_t *)a->w.data, a->w.row_bytes, a->w.n_rows,
		a->w.n_cols, a->n, xq, xd, xs, a->bias, a->y);
}

template <int WT>
static void mm_decode_q(struct pg_cuda_backend *cb,
			const struct pg_cuda_matmul *a)
{
	int64_t k = a->w.n_cols, nb = (int64_t)a->n * (k / PG_QK);
	int8_t *xq = (int8_t *)cb->ws;
	float *xd = (float *)((uint8_t *)cb->ws +
			      align256((size_t)a->n * k));
	float *xs = (float *)((uint8_t *)xd + align256((size_t)nb * 4));

	quantize_kernel<<<(unsigned int)((nb + MM_QUANT_WARPS - 1) /
					 MM_QUANT_WARPS),
			  MM_QUANT_WARPS * 32, 0, cb->stream>>>(
		a->x, nb, xq, xd, WT == PG_Q4_1 || WT == PG_Q5_1 ? xs : NULL);
	if (pg_cuda_launched(cb, "quantize"))
		return;
	if (a->n == 1)
		gemv_q<WT, 1>(cb, a, xq, xd, xs);
	else if (a->n == 2)
		gemv_q<WT, 2>(cb, a, xq, xd, xs);
	else if (a->n <= 4)
		gemv_q<WT, 4>(cb, a, xq, xd, xs);
	else
		gemv_q<WT, 8>(cb, a, xq, xd, xs);
	pg_cuda_launched(cb, "gemv_q");
}

template <int WT, int NT>
static void gemv_k(struct pg_cuda_backend *cb, const struct pg_cuda_matmul *a,
		   const int8_t *xq, const float *xd)
{
	unsigned int grid = (unsigned int)((a->w.n_rows + MM_WARPS - 1) /
					   MM_WARPS);

	gemv_k_kernel<WT, NT><<<grid, MM_WARPS * 32, 0, cb->stream>>>(
		(const uint8_t *)a->w.data, a->w.row_bytes, a->w.n_rows,
		a->w.n_cols, a->n, xq, xd, a->bias, a->y);
}

/* The K-quants: Q8_K activations, then the super-block GEMV. */
template <int WT>
static void mm_decode_k(struct pg_cuda_backend *cb,
			const struct pg_cuda_matmul *a)
{
	int64_t k = a->w.n_cols, nb = (int64_t)a->n * (k / PG_QK_K);
	int8_t *xq = (int8_t *)cb->ws;
	float *xd = (float *)((uint8_t *)cb->ws +
			      align256((size_t)a->n * k));

	quantize_k_kernel<<<(unsigned int)((nb + MM_QUANT_WARPS - 1) /
					   MM_QUANT_WARPS),
			    MM_QUANT_WARPS * 32, 0, cb->stream>>>(a->x, nb, xq,
								  xd);
	if (pg_cuda_launched(cb, "quantize_k"))
		return;
	if (a->n == 1)
		gemv_k<WT, 1>(cb, a, xq, xd);
	else if (a->n == 2)
		gemv_k<WT, 2>(cb, a, xq, xd);
	else if (a->n <= 4)
		gemv_k<WT, 4>(cb, a, xq, xd);
	else
		gemv_k<WT, 8>(cb, a, xq, xd);
	pg_cuda_launched(cb, "gemv_k");
}

template <typename T, int NT>
static void gemv_f(struct pg_cuda_backend *cb, const struct pg_cuda_matmul *a)
{
	unsigned int grid = (unsigned int)((a->w.n_rows + MM_WARPS - 1) /
					   MM_WARPS);
	const uint8_t *wd = (const uint8_t *)a->w.data;
	bool vec = a->w.n_cols % 8 == 0 && a->w.row_bytes % 16 == 0 &&
		   (((uintptr_t)wd | (uintptr_t)a->x) & 15) == 0;

	if (vec)
		gemv_f_kernel<T, NT, true><<<grid, MM_WARPS * 32, 0,
					     cb->stream>>>(
			wd, a->w.row_bytes, a->w.n_rows, a->w.n_cols, a->n,
			a->x, a->bias, a->y);
	else
		gemv_f_kernel<T, NT, false><<<grid, MM_WARPS * 32, 0,
					      cb->stream>>>(
			wd, a->w.row_bytes, a->w.n_rows, a->w.n_cols, a->n,
			a->x, a->bias, a->y);
}

template <typename T>
static void mm_decode_f(struct pg_cuda_backend *cb,
			const struct pg_cuda_matmul *a)
{
	if (a->n == 1)
		gemv_f<T, 1>(cb, a);
	else if (a->n == 2)
		gemv_f<T, 2>(cb, a);
	else if (a->n <= 4)
		gemv_f<T, 4>(cb, a);
	else
		gemv_f<T, 8>(cb, a);
	pg_cuda_launched(cb, "gemv_f");
}

/* C (m x n, ldc) = A^T B with A (k x m, lda) of type at, B (k x n, ldb). */
static int gemm_ex(struct pg_cuda_backend *cb, int64_t m, int64_t n,
		   int64_t k, const void *A, cudaDataType_t at, int64_t lda,
		   const void *B, int64_t ldb, float *C, int64_t ldc)
{
	const float one = 1.0f, zero = 0.0f;
	cublasStatus_t s;

	s = cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n,
			 (int)k, &one, A, at, (int)lda, B, at, (int)ldb, &zero,
			 C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
			 CUBLAS_GEMM_DEFAULT);
	return s == CUBLAS_STATUS_SUCCESS ? 0 :
	       pg_cuda_fail_blas(cb, s, "cublasGemmEx");
}

/* The activations of tokens t0 .. t0 + tc - 1 as T into the workspace. */
template <typename T, bool SAT>
static int mm_convert(struct pg_cuda_backend *cb,
		      const struct pg_cuda_matmul *a, int64_t t0, int64_t tc)
{
	int64_t n = tc * a->w.n_cols;

	convert_kernel<T, SAT><<<pg_grid(n, 256), 256, 0, cb->stream>>>(
		a->x + t0 * a->w.n_cols, n, (T *)cb->ws);
	return pg_cuda_launched(cb, "convert");
}

/* F16/BF16 weights: convert the activations, one GEMM per chunk. */
template <typename T, bool SAT>
static void mm_prefill_f(struct pg_cuda_backend *cb,
			 const struct pg_cuda_matmul *a, cudaDataType_t ct)
{
	int64_t k = a->w.n_cols, nr = a->w.n_rows, tc, rc;

	mm_chunks(a, &tc, &rc);
	for (int64_t t0 = 0; t0 < a->n; t0 += tc) {
		int64_t c = a->n - t0 < tc ? a->n - t0 : tc;

		if (mm_convert<T, SAT>(cb, a, t0, c) ||
		    gemm_ex(cb, nr, c, k, a->w.data, ct,
			    (int64_t)(a->w.row_bytes / 2), cb->ws, k,
			    a->y + t0 * nr, nr))
			return;
	}
}

/* Quantised weights: F16 activations and F16 weight tiles. */
template <int WT>
static void mm_prefill_q(struct pg_cuda_backend *cb,
			 const struct pg_cuda_matmul *a)
{
	int64_t k = a->w.n_cols, nr = a->w.n_rows, tc, rc;
	__half *wt;

	mm_chunks(a, &tc, &rc);
	wt = (__half *)((uint8_t *)cb->ws + align256((size_t)tc * k * 2));
	for (int64_t t0 = 0; t0 < a->n; t0 += tc) {
		int64_t c = a->n - t0 < tc ? a->n - t0 : tc;

		if (mm_convert<__half, true>(cb, a, t0, c))
			return;
		for (int64_t r0 = 0; r0 < nr; r0 += rc) {
			int64_t rr = nr - r0 < rc ? nr - r0 : rc;

			dequant_kernel<WT><<<pg_grid(rr * k / 32, 256), 256,
					     0, cb->stream>>>(
				(const uint8_t *)a->w.data +
				(uint64_t)r0 * a->w.row_bytes, a->w.row_bytes,
				k, rr * k, wt);
			if (pg_cuda_launched(cb, "dequant") ||
			    gemm_ex(cb, rr, c, k, wt, CUDA_R_16F, k, cb->ws, k,
				    a->y + t0 * nr + r0, nr))
				return;
		}
	}
}

static void mm_prefill_f32(struct pg_cuda_backend *cb,
			   const struct pg_cuda_matmul *a)
{
	const float one = 1.0f, zero = 0.0f;
	int64_t k = a->w.n_cols, nr = a->w.n_rows;
	cublasStatus_t s;

	s = cublasSgemm(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, a->n,
			(int)k, &one, (const float *)a->w.data,
			(int)(a->w.row_bytes / 4), a->x, (int)k, &zero, a->y,
			(int)nr);
	if (s != CUBLAS_STATUS_SUCCESS)
		pg_cuda_fail_blas(cb, s, "cublasSgemm");
}

void pg_cuda_run_matmul(struct pg_cuda_backend *cb,
			const struct pg_cuda_op *op)
{
	const struct pg_cuda_matmul *a = &op->a.matmul;
	int64_t total = (int64_t)a->n * a->w.n_rows;

	if (a->n <= PG_CUDA_GEMV_MAX_N) {
		switch (a->w.type) {
		case PG_F32: mm_decode_f<float>(cb, a); break;
		case PG_F16: mm_decode_f<__half>(cb, a); break;
		case PG_BF16: mm_decode_f<__nv_bfloat16>(cb, a); break;
		case PG_Q8_0: mm_decode_q<PG_Q8_0>(cb, a); break;
		case PG_Q4_0: mm_decode_q<PG_Q4_0>(cb, a); break;
		case PG_Q4_1: mm_decode_q<PG_Q4_1>(cb, a); break;
		case PG_Q5_0: mm_decode_q<PG_Q5_0>(cb, a); break;
		case PG_Q5_1: mm_decode_q<PG_Q5_1>(cb, a); break;
		case PG_Q2_K: mm_decode_k<PG_Q2_K>(cb, a); break;
		case PG_Q3_K: mm_decode_k<PG_Q3_K>(cb, a); break;
		case PG_Q4_K: mm_decode_k<PG_Q4_K>(cb, a); break;
		case PG_Q5_K: mm_decode_k<PG_Q5_K>(cb, a); break;
		case PG_Q6_K: mm_decode_k<PG_Q6_K>(cb, a); break;
		}
		return;		/* the GEMV kernels add the bias */
	}
	switch (a->w.type) {
	case PG_F32: mm_prefill_f32(cb, a); break;
	case PG_F16: mm_prefill_f<__half, true>(cb, a, CUDA_R_16F); break;
	case PG_BF16:
		mm_prefill_f<__nv_bfloat16, false>(cb, a, CUDA_R_16BF);
		break;
	case PG_Q8_0: mm_prefill_q<PG_Q8_0>(cb, a); break;
	case PG_Q4_0: mm_prefill_q<PG_Q4_0>(cb, a); break;
	case PG_Q4_1: mm_prefill_q<PG_Q4_1>(cb, a); break;
	case PG_Q5_0: mm_prefill_q<PG_Q5_0>(cb, a); break;
	case PG_Q5_1: mm_prefill_q<PG_Q5_1>(cb, a); break;
	case PG_Q2_K: mm_prefill_q<PG_Q2_K>(cb, a); break;
	case PG_Q3_K: mm_prefill_q<PG_Q3_K>(cb, a); break;
	case PG_Q4_K: mm_prefill_q<PG_Q4_K>(cb, a); break;
	case PG_Q5_K: mm_prefill_q<PG_Q5_K>(cb, a); break;
	case PG_Q6_K: mm_prefill_q<PG_Q6_K>(cb, a); break;
	}
	if (a->bias && !cb->failed) {
		bias_kernel<<<pg_grid(total, 256), 256, 0, cb->stream>>>(
			a->y, a->bias, a->w.n_rows, total);
		pg_cuda_launched(cb, "bias");
	}
}
