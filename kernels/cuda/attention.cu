/*
 * attention.cu - the attention op on the GPU: causal, grouped-query
 * attention over the paged KV store, in two kernels.
 *
 * Keys are numbered locally: the positions this store holds (all of them,
 * or a CP rank's page runs), in position order, so that local key k lives
 * in page-table entry k / page_tokens at slot k % page_tokens, and a row
 * that sees n positions sees local keys 0 .. pg_cuda_n_held(n) - 1.
 *
 * Decode (few rows per sequence): split-KV "flash decoding".  A block
 * takes one sequence x one KV head x one split of its keys and every query
 * (row x query head) of that KV head, so each K and V row is read once for
 * the whole group.  Its 4 warps deal the split's keys round-robin; each
 * warp keeps an online softmax per query in registers (lanes over
 * head_dim), the warps are combined in shared memory, and with several
 * splits a second kernel merges the splits' (out, lse) by log-sum-exp.
 *
 * Prefill (more rows): a tiled kernel.  A block takes 32 queries of one
 * sequence and KV head, walks 32-key tiles of K and V through the page
 * table into shared memory (as floats), and keeps a flash-attention online
 * softmax per query, 4 threads per query.
 *
 * Both size their grids from the record (bucket, max_rows, rows) and read
 * n_ctx, first_row, n_rows and the page tables from the staged copy, with
 * early exits, so a captured graph serves any step of the same shape.
 * Scores are q . k * scale in float, then (softcap > 0) cap * tanhf(s /
 * cap) as attention.c caps them; exp and log are the device's expf and
 * logf.  A row without keys gets out = 0 and lse = -inf.
 *
 * Sliding windows (window > 0): a row at position p sees positions
 * p - window + 1 .. p, i.e. local keys pg_cuda_n_held(lo) ..; no kernel
 * loads a key before the first one any of its queries sees (the decode
 * kernel's splits start at the sequence's first row's window, the tiled
 * kernel's tiles at its first query's), so pages before the window are
 * never read.
 */
#include "kernels/cuda/common.cuh"

#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_BQ 32			/* prefill: queries per block */
#define ATT_BK 32			/* prefill: keys per tile */

/* Everything a kernel needs; built on the host from the record. */
struct attn_params {
	struct pg_cuda_kv kv;
	const float *q;			/* (rows, n_heads * hd) */
	float *out;			/* (rows, n_heads * hd) */
	float *lse;			/* (rows, n_heads) or NULL */
	float *part_o;			/* (splits, rows, n_heads, hd) */
	float *part_lse;		/* (splits, rows, n_heads) */
	const struct pg_cuda_attn_seq *seqs;	/* (n_seqs) device */
	const int32_t *pages;		/* (n_seqs, p_cap) device */
	int block, n_heads, head0, group, kv_head0, g_first, p_cap;
	int rows, splits, split_len;
	int window;			/* 0: none */
	float scale;
	float softcap;			/* 0: none */
};

/* How a call is cut; a pure function of the record. */
struct attn_plan {
	int e;				/* decode: values per lane: 2, 4, 8 */
	int decode;
	int g_first, n_kvg, nh_max;
	int splits, split_len;
};

/* Query heads of store KV head g: [*lo, *hi) of the call's heads. */
static __host__ __device__ __forceinline__ void
heads_of(int g, int n_heads, int head0, int group, int kv_head0, int *lo,
	 int *hi)
{
	int mh = g + kv_head0;
	int a = mh * group - head0, b = (mh + 1) * group - head0;

	*lo = a > 0 ? a : 0;
	*hi = b < n_heads ? b : n_heads;
}

static void plan_of(const struct pg_cuda_backend *cb,
		    const struct pg_cuda_attention *a, struct attn_plan *p)
{
	int hd = a->kv.head_dim, nq, held, target, want, max_splits;
	int g_last = (a->head0 + a->n_heads - 1) / a->group - a->kv_head0;

	p->e = hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
	nq = 32 / p->e;		/* queries a decode block holds */
	p->g_first = a->head0 / a->group - a->kv_head0;
	p->n_kvg = g_last - p->g_first + 1;
	p->nh_max = 0;
	for (int g = p->g_first; g <= g_last; g++) {
		int lo, hi;

		heads_of(g, a->n_heads, a->head0, a->group, a->kv_head0, &lo,
			 &hi);
		p->nh_max = hi - lo > p->nh_max ? hi - lo : p->nh_max;
	}
	p->decode = a->max_rows * p->nh_max <= nq;
	held = pg_cuda_n_held(a->bucket, a->kv.page_tokens, a->kv.cp_size,
			      a->kv.cp_rank);
	/* a window: a sequence's rows see at most window + rows - 1 positions */
	if (a->window > 0 && a->window + a->max_rows < held)
		held = a->window + a->max_rows;
	target = 4 * (cb->n_sm > 0 ? cb->n_sm : 1);
	want = (target + p->n_kvg * a->n_seqs - 1) / (p->n_kvg * a->n_seqs);
	max_splits = (held + 63) / 64;
	p->splits = want < max_splits ? want : max_splits;
	p->splits = p->splits > 1 ? p->splits : 1;
	p->split_len = (held + p->splits - 1) / p->splits;
	p->split_len = (p->split_len + 31) / 32 * 32;
	p->split_len = p->split_len > 32 ? p->split_len : 32;
	p->splits = (held + p->split_len - 1) / p->split_len;
	p->splits = p->splits > 1 ? p->splits : 1;
	if (!p->decode)
		p->splits = 1;
}

size_t pg_cuda_attention_ws(const struct pg_cuda_backend *cb,
			    const struct pg_cuda_attention *a)
{
	struct attn_plan p;
	size_t n;

	plan_of(cb, a, &p);
	if (p.splits <= 1)
		return 0;
	n = (size_t)p.splits * (size_t)a->rows * (size_t)a->n_heads;
	return n * (size_t)a->kv.head_dim * sizeof(float) + 256 +
	       n * sizeof(float);
}

/*
 * v rounded to the KV element type T and back: q is scored in the keys'
 * precision, as the CPU backend does (attention.c).
 */
template <typename T>
static __device__ __forceinline__ float q_round(float v)
{
	T t;

	pg_elem<T>::store(&t, v);
	return pg_elem<T>::load(&t);
}

/*
 * The first local key a row that sees positions 0 .. n_keys - 1 attends
 * to: that of position n_keys - window with a window shorter than that,
 * else 0.
 */
static __device__ __forceinline__ int first_key(const struct attn_params &p,
						int n_keys)
{
	if (p.window <= 0 || n_keys <= p.window)
		return 0;
	return pg_cuda_n_held(n_keys - p.window, p.kv.page_tokens,
			      p.kv.cp_size, p.kv.cp_rank);
}

/* A raw score q . k as the softmax takes it: scaled, then capped. */
static __device__ __forceinline__ float score(const struct attn_params &p,
					      float s)
{
	s = __fmul_rn(s, p.scale);
	if (p.softcap > 0.0f)
		s = __fmul_rn(p.softcap, tanhf(__fdiv_rn(s, p.softcap)));
	return s;
}

/* Local key k's K (which 0) or V (1) row of store KV head g. */
template <typename T>
static __device__ __forceinline__ const T *
key_row(const struct attn_params &p, const int32_t *pages, int g, int which,
	int k)
{
	int pt = p.kv.page_tokens;
	size_t page = (size_t)pages[k / pt];
	size_t row = (((size_t)p.block * 2 + which) * p.kv.n_kv_heads + g) *
		     pt + (size_t)(k % pt);

	return (const T *)((const uint8_t *)p.kv.base + page *
			   p.kv.page_bytes) + row * p.kv.head_dim;
}

/* E consecutive values at p (aligned to E elements) as floats. */
template <typename T, int E>
static __device__ __forceinline__ void load_e(const T *p, float *out)
{
	if constexpr (E == 8) {
		pg_load8<T>(p, out);
	} else if constexpr (sizeof(T) == 4) {
		if constexpr (E == 4) {
			float4 v = *(const float4 *)p;

			out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
		} else {
			float2 v = *(const float2 *)p;

			out[0] = v.x; out[1] = v.y;
		}
	} else {
		/* two 16-bit values per 32-bit word */
		uint32_t w[E / 2];

		if constexpr (E == 4) {
			uint2 v = *(const uint2 *)p;

			w[0] = v.x; w[1] = v.y;
		} else {
			w[0] = *(const uint32_t *)p;
		}
#pragma unroll
		for (int i = 0; i < E / 2; i++) {
			out[2 * i] = pg_elem<T>::bits(w[i] & 0xffff);
			out[2 * i + 1] = pg_elem<T>::bits(w[i] >> 16);
		}
	}
}

/* ---- decode ---- */

/*
 * Block (split, KV head g_first + y, sequence z).  Lane l holds values
 * l * E .. l * E + E - 1 of each vector (none when l * E >= head_dim).
 * NQ: queries a block can hold (>= n_rows x heads of the group).
 */
template <typename T, int E, int NQ>
static __global__ void __launch_bounds__(ATT_THREADS)
attn_decode_kernel(const struct attn_params p)
{
	__shared__ float sm_acc[ATT_WARPS][NQ][32 * E];
	__shared__ float sm_m[ATT_WARPS][NQ], sm_l[ATT_WARPS][NQ];
	const struct pg_cuda_attn_seq sq = p.seqs[blockIdx.z];
	const int32_t *pages = p.pages + (size_t)blockIdx.z * p.p_cap;
	const int hd = p.kv.head_dim, g = p.g_first + blockIdx.y;
	const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
	const bool mine = lane * E < hd;
	int lo, hi, nh, n_q, held_all, kbase, k0, k1;
	float q[NQ][E], acc[NQ][E], m[NQ], l[NQ];
	int held[NQ], klo[NQ];

	heads_of(g, p.n_heads, p.head0, p.group, p.kv_head0, &lo, &hi);
	nh = hi - lo;
	n_q = nh > 0 ? sq.n_rows * nh : 0;
	n_q = n_q < NQ ? n_q : NQ;	/* the host chose NQ >= n_q */
	held_all = pg_cuda_n_held(sq.n_ctx, p.kv.page_tokens, p.kv.cp_size,
				  p.kv.cp_rank);
	/* the splits start at the first row's window (rows only add keys) */
	kbase = first_key(p, sq.n_ctx - sq.n_rows + 1);
	k0 = kbase + blockIdx.x * p.split_len;
	k1 = k0 + p.split_len < held_all ? k0 + p.split_len : held_all;
#pragma unroll
	for (int i = 0; i < NQ; i++) {
		int r = i < n_q ? i / nh : 0;
		const float *qv = p.q + ((size_t)(sq.first_row + r) *
					 p.n_heads + lo + (i < n_q ? i % nh : 0)) *
					hd + lane * E;

		held[i] = i < n_q ? pg_cuda_n_held(sq.n_ctx - sq.n_rows + r + 1,
						   p.kv.page_tokens,
						   p.kv.cp_size,
						   p.kv.cp_rank) : 0;
		klo[i] = i < n_q ? first_key(p, sq.n_ctx - sq.n_rows + r + 1) : 0;
		m[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int e = 0; e < E; e++) {
			q[i][e] = i < n_q && mine ? q_round<T>(qv[e]) : 0.0f;
			acc[i][e] = 0.0f;
		}
	}
	for (int k = k0 + warp; k < k1; k += ATT_WARPS) {
		float kf[E], vf[E];

		if (mine) {
			load_e<T, E>(key_row<T>(p, pages, g, 0, k) + lane * E,
				     kf);
			load_e<T, E>(key_row<T>(p, pages, g, 1, k) + lane * E,
				     vf);
		} else {
#pragma unroll
			for (int e = 0; e < E; e++)
				kf[e] = vf[e] = 0.0f;
		}
#pragma unroll
		for (int i = 0; i < NQ; i++) {
			float s = 0.0f, pr;

			if (i >= n_q)
				break;
			if (k >= held[i] || k < klo[i])	/* warp-uniform */
				continue;
#pragma unroll
			for (int e = 0; e < E; e++)
				s = fmaf(q[i][e], kf[e], s);
			s = score(p, pg_warp_sum(s));
			if (s > m[i]) {
				float r = expf(m[i] - s);	/* 0 at first */

				l[i] *= r;
#pragma unroll
				for (int e = 0; e < E; e++)
					acc[i][e] *= r;
				m[i] = s;
			}
			pr = expf(s - m[i]);
			l[i] += pr;
#pragma unroll
			for (int e = 0; e < E; e++)
				acc[i][e] = fmaf(pr, vf[e], acc[i][e]);
		}
	}
#pragma unroll
	for (int i = 0; i < NQ; i++) {
#pragma unroll
		for (int e = 0; e < E; e++)
			sm_acc[warp][i][lane * E + e] = acc[i][e];
		if (lane == 0) {
			sm_m[warp][i] = m[i];
			sm_l[warp][i] = l[i];
		}
	}
	__syncthreads();
	for (int idx = threadIdx.x; idx < n_q * hd; idx += ATT_THREADS) {
		int i = idx / hd, d = idx % hd;
		int r = i / nh, h = lo + i % nh;
		size_t rh = (size_t)(sq.first_row + r) * p.n_heads + h;
		float mx = -INFINITY, sum = 0.0f, o = 0.0f, ls = -INFINITY;

		for (int w = 0; w < ATT_WARPS; w++)
			mx = fmaxf(mx, sm_m[w][i]);
		if (mx != -INFINITY) {
			for (int w = 0; w < ATT_WARPS; w++) {
				float c = expf(sm_m[w][i] - mx);

				sum = fmaf(sm_l[w][i], c, sum);
				o = fmaf(sm_acc[w][i][d], c, o);
			}
			o /= sum;
			ls = mx + logf(sum);
		}
		if (p.splits == 1) {
			p.out[rh * hd + d] = o;
			if (p.lse && d == 0)
				p.lse[rh] = ls;
		} else {
			size_t sp = (size_t)blockIdx.x * p.rows * p.n_heads + rh;

			p.part_o[sp * hd + d] = o;
			if (d == 0)
				p.part_lse[sp] = ls;
		}
	}
}

/*
 * Merge the splits of the decode kernel: block (head h, row i of sequence
 * z); out = sum_s exp(lse_s - L) o_s / sum_s exp(lse_s - L).
 */
static __global__ void __launch_bounds__(ATT_THREADS)
attn_splits_kernel(const struct attn_params p)
{
	const struct pg_cuda_attn_seq sq = p.seqs[blockIdx.z];
	const int hd = p.kv.head_dim, h = blockIdx.x, i = blockIdx.y;
	size_t rh, stride = (size_t)p.rows * p.n_heads;
	float mx = -INFINITY, sum = 0.0f;

	if (i >= sq.n_rows)
		return;
	rh = (size_t)(sq.first_row + i) * p.n_heads + h;
	for (int s = 0; s < p.splits; s++)
		mx = fmaxf(mx, p.part_lse[s * stride + rh]);
	if (mx != -INFINITY)
		for (int s = 0; s < p.splits; s++)
			sum += expf(p.part_lse[s * stride + rh] - mx);
	for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
		float o = 0.0f;

		if (mx != -INFINITY) {
			for (int s = 0; s < p.splits; s++)
				o = fmaf(expf(p.part_lse[s * stride + rh] - mx),
					 p.part_o[(s * stride + rh) * hd + d], o);
			o /= sum;
		}
		p.out[rh * hd + d] = o;
	}
	if (p.lse && threadIdx.x == 0)
		p.lse[rh] = mx != -INFINITY ? mx + logf(sum) : -INFINITY;
}

/* ---- prefill ---- */

/* Shared memory of the tiled kernel for head_dim up to DMAX, in bytes. */
static constexpr size_t prefill_smem(int dmax)
{
	return sizeof(float) * ((size_t)ATT_BQ * (dmax + 4) +
				(size_t)ATT_BK * (dmax + 4) +
				(size_t)ATT_BK * dmax +
				(size_t)ATT_BQ * (ATT_BK + 1));
}

/*
 * Block (query tile x, KV head g_first + y, sequence z).  Queries of the
 * sequence and KV head are numbered row-major (row i, head lo + j) and cut
 * in tiles of ATT_BQ.  Thread t serves query t / 4 with 3 others: scores
 * of keys t % 4 + 4c, and the output values (t % 4) * 4 + 16c .. + 3.
 */
template <typename T, int DMAX>
static __global__ void __launch_bounds__(ATT_THREADS, 2)
attn_prefill_kernel(const struct attn_params p)
{
	extern __shared__ float4 smem4[];
	float *Qs = (float *)smem4;			/* [BQ][DMAX + 4] */
	float *Ks = Qs + ATT_BQ * (DMAX + 4);		/* [BK][DMAX + 4] */
	float *Vs = Ks + ATT_BK * (DMAX + 4);		/* [BK][DMAX] */
	float *Ps = Vs + ATT_BK * DMAX;			/* [BQ][BK + 1] */
	const struct pg_cuda_attn_seq sq = p.seqs[blockIdx.z];
	const int32_t *pages = p.pages + (size_t)blockIdx.z * p.p_cap;
	const int hd = p.kv.head_dim, g = p.g_first + blockIdx.y;
	const int qi = threadIdx.x / 4, kq = threadIdx.x % 4;
	constexpr int epc = 16 / (int)sizeof(T);	/* values per 16 bytes */
	const int chunks = hd / epc;
	int lo, hi, nh, n_q, q0, held_me, held_tile, last, klo_me, klo_tile;
	float acc[DMAX / 4], m = -INFINITY, l = 0.0f;

	heads_of(g, p.n_heads, p.head0, p.group, p.kv_head0, &lo, &hi);
	nh = hi - lo;
	n_q = nh > 0 ? sq.n_rows * nh : 0;
	q0 = blockIdx.x * ATT_BQ;
	if (q0 >= n_q)
		return;			/* block-uniform, before any barrier */
	last = (q0 + ATT_BQ < n_q ? q0 + ATT_BQ : n_q) - 1;
	held_tile = pg_cuda_n_held(sq.n_ctx - sq.n_rows + last / nh + 1,
				   p.kv.page_tokens, p.kv.cp_size,
				   p.kv.cp_rank);
	held_me = q0 + qi < n_q ?
		  pg_cuda_n_held(sq.n_ctx - sq.n_rows + (q0 + qi) / nh + 1,
				 p.kv.page_tokens, p.kv.cp_size,
				 p.kv.cp_rank) : 0;
	/* windows: the tile's first query (smallest row) sees the first key */
	klo_tile = first_key(p, sq.n_ctx - sq.n_rows + q0 / nh + 1);
	klo_me = q0 + qi < n_q ?
		 first_key(p, sq.n_ctx - sq.n_rows + (q0 + qi) / nh + 1) : 0;
	for (int idx = threadIdx.x; idx < ATT_BQ * hd; idx += ATT_THREADS) {
		int j = idx / hd, d = idx % hd, qv = q0 + j;

		Qs[j * (DMAX + 4) + d] = qv < n_q ? q_round<T>(
			p.q[((size_t)(sq.first_row + qv / nh) * p.n_heads +
			     lo + qv % nh) * hd + d]) : 0.0f;
	}
#pragma unroll
	for (int c = 0; c < DMAX / 4; c++)
		acc[c] = 0.0f;

	for (int k0 = klo_tile; k0 < held_tile; k0 += ATT_BK) {
		float s[ATT_BK / 4], mx = -INFINITY, sc, ps;

		__syncthreads();	/* Q loaded; last tile's K, V, P used */
		for (int idx = threadIdx.x; idx < ATT_BK * chunks;
		     idx += ATT_THREADS) {
			int j = idx / chunks, c = idx % chunks, k = k0 + j;
			float kf[8], vf[8];

#pragma unroll
			for (int e = 0; e < 8; e++)
				kf[e] = vf[e] = 0.0f;
			if (k < held_tile) {
				const T *kr = key_row<T>(p, pages, g, 0, k);
				const T *vr = key_row<T>(p, pages, g, 1, k);

				load_e<T, 16 / sizeof(T)>(kr + c * epc, kf);
				load_e<T, 16 / sizeof(T)>(vr + c * epc, vf);
			}
#pragma unroll
			for (int e = 0; e < epc; e++) {
				Ks[j * (DMAX + 4) + c * epc + e] = kf[e];
				Vs[j * DMAX + c * epc + e] = vf[e];
			}
		}
		__syncthreads();
#pragma unroll
		for (int c = 0; c < ATT_BK / 4; c++)
			s[c] = 0.0f;
		for (int d = 0; d < hd; d += 4) {
			float4 qv = *(const float4 *)&Qs[qi * (DMAX + 4) + d];

#pragma unroll
			for (int c = 0; c < ATT_BK / 4; c++) {
				float4 kv = *(const float4 *)
					&Ks[(kq + 4 * c) * (DMAX + 4) + d];

				s[c] = fmaf(qv.x, kv.x, s[c]);
				s[c] = fmaf(qv.y, kv.y, s[c]);
				s[c] = fmaf(qv.z, kv.z, s[c]);
				s[c] = fmaf(qv.w, kv.w, s[c]);
			}
		}
#pragma unroll
		for (int c = 0; c < ATT_BK / 4; c++) {
			int kk = k0 + kq + 4 * c;

			s[c] = kk < held_me && kk >= klo_me ? score(p, s[c]) :
			       -INFINITY;
			mx = fmaxf(mx, s[c]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(PG_FULL_MASK, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(PG_FULL_MASK, mx, 2));
		mx = fmaxf(mx, m);
		sc = mx == -INFINITY ? 1.0f : expf(m - mx);	/* 0 at first */
		ps = 0.0f;
#pragma unroll
		for (int c = 0; c < ATT_BK / 4; c++) {
			float e = mx == -INFINITY ? 0.0f : expf(s[c] - mx);

			Ps[qi * (ATT_BK + 1) + kq + 4 * c] = e;
			ps += e;
		}
		ps += __shfl_xor_sync(PG_FULL_MASK, ps, 1);
		ps += __shfl_xor_sync(PG_FULL_MASK, ps, 2);
		l = l * sc + ps;
		m = mx;
#pragma unroll
		for (int c = 0; c < DMAX / 4; c++)
			acc[c] *= sc;
		__syncthreads();	/* P of the 4 threads of each query */
		for (int j = 0; j < ATT_BK; j++) {
			float pj = Ps[qi * (ATT_BK + 1) + j];

#pragma unroll
			for (int c = 0; c < DMAX / 16; c++) {
				int d = kq * 4 + 16 * c;

				if (d < hd) {
					float4 v = *(const float4 *)
						&Vs[j * DMAX + d];

					acc[4 * c] = fmaf(pj, v.x, acc[4 * c]);
					acc[4 * c + 1] = fmaf(pj, v.y,
							      acc[4 * c + 1]);
					acc[4 * c + 2] = fmaf(pj, v.z,
							      acc[4 * c + 2]);
					acc[4 * c + 3] = fmaf(pj, v.w,
							      acc[4 * c + 3]);
				}
			}
		}
	}
	if (q0 + qi >= n_q)
		return;
	size_t rh = (size_t)(sq.first_row + (q0 + qi) / nh) * p.n_heads + lo +
		    (q0 + qi) % nh;

#pragma unroll
	for (int c = 0; c < DMAX / 16; c++) {
		int d = kq * 4 + 16 * c;

		if (d < hd)
			for (int e = 0; e < 4; e++)
				p.out[rh * hd + d + e] = l > 0.0f ?
					acc[4 * c + e] / l : 0.0f;
	}
	if (p.lse && kq == 0)
		p.lse[rh] = l > 0.0f ? m + logf(l) : -INFINITY;
}

/* ---- launchers ---- */

/*
 * A variant whose tiles exceed the device's opt-in limit (DMAX 256 on
 * sm_86/sm_89: 101 KiB of 99) is left alone, not an error: asking for it
 * would fail the whole backend's creation; pg_cuda_run_attention refuses
 * such a call instead.
 */
template <typename T, int DMAX>
static cudaError_t prefill_init(int optin)
{
	if (prefill_smem(DMAX) > (size_t)optin)
		return cudaSuccess;
	return cudaFuncSetAttribute(attn_prefill_kernel<T, DMAX>,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)prefill_smem(DMAX));
}

int pg_cuda_attention_init(struct pg_cuda_backend *cb)
{
	cudaError_t e;
	int o;

	e = cudaDeviceGetAttribute(&cb->smem_optin,
				   cudaDevAttrMaxSharedMemoryPerBlockOptin,
				   cb->device);
	if (e != cudaSuccess)
		return pg_cuda_fail(cb, e, "cudaDeviceGetAttribute(smem)");
	o = cb->smem_optin;
	if ((e = prefill_init<float, 64>(o)) != cudaSuccess ||
	    (e = prefill_init<float, 128>(o)) != cudaSuccess ||
	    (e = prefill_init<float, 256>(o)) != cudaSuccess ||
	    (e = prefill_init<__half, 64>(o)) != cudaSuccess ||
	    (e = prefill_init<__half, 128>(o)) != cudaSuccess ||
	    (e = prefill_init<__half, 256>(o)) != cudaSuccess ||
	    (e = prefill_init<__nv_bfloat16, 64>(o)) != cudaSuccess ||
	    (e = prefill_init<__nv_bfloat16, 128>(o)) != cudaSuccess ||
	    (e = prefill_init<__nv_bfloat16, 256>(o)) != cudaSuccess)
		return pg_cuda_fail(cb, e,
				    "cudaFuncSetAttribute(attention smem)");
	return 0;
}

template <typename T, int E>
static void launch_decode(struct pg_cuda_backend *cb,
			  const struct attn_params &p,
			  const struct attn_plan &pl, int n_seqs)
{
	dim3 grid(pl.splits, pl.n_kvg, n_seqs);

	attn_decode_kernel<T, E, 32 / E><<<grid, ATT_THREADS, 0, cb->stream>>>(
		p);
}

template <typename T, int DMAX>
static void launch_prefill(struct pg_cuda_backend *cb,
			   const struct attn_params &p,
			   const struct attn_plan &pl, int n_seqs,
			   int max_rows)
{
	int n_q = max_rows * pl.nh_max;
	dim3 grid((n_q + ATT_BQ - 1) / ATT_BQ, pl.n_kvg, n_seqs);

	attn_prefill_kernel<T, DMAX><<<grid, ATT_THREADS, prefill_smem(DMAX),
				       cb->stream>>>(p);
}

template <typename T>
static void launch(struct pg_cuda_backend *cb, const struct attn_params &p,
		   const struct attn_plan &pl, int n_seqs, int max_rows)
{
	int hd = p.kv.head_dim;

	if (pl.decode) {
		if (pl.e == 2)
			launch_decode<T, 2>(cb, p, pl, n_seqs);
		else if (pl.e == 4)
			launch_decode<T, 4>(cb, p, pl, n_seqs);
		else
			launch_decode<T, 8>(cb, p, pl, n_seqs);
	} else if (hd <= 64) {
		launch_prefill<T, 64>(cb, p, pl, n_seqs, max_rows);
	} else if (hd <= 128) {
		launch_prefill<T, 128>(cb, p, pl, n_seqs, max_rows);
	} else {
		launch_prefill<T, 256>(cb, p, pl, n_seqs, max_rows);
	}
}

void pg_cuda_run_attention(struct pg_cuda_backend *cb,
			   const struct pg_cuda_op *op)
{
	const struct pg_cuda_attention *a = &op->a.attention;
	const uint8_t *blob = (const uint8_t *)pg_cuda_staged_dev(cb, op);
	struct attn_plan pl;
	struct attn_params p;
	size_t n_parts;

	plan_of(cb, a, &pl);
	if (!pl.decode && a->kv.head_dim > 128 &&
	    prefill_smem(256) > (size_t)cb->smem_optin) {
		pg_cuda_fail_msg(cb, "attention: head_dim over 128 with more "
				 "rows than the decode kernel takes needs 101 "
				 "KiB of shared memory per block; this device "
				 "allows less");
		return;
	}
	memset(&p, 0, sizeof(p));
	p.kv = a->kv;
	p.q = a->q;
	p.out = a->out;
	p.lse = a->lse;
	p.seqs = (const struct pg_cuda_attn_seq *)blob;
	p.pages = (const int32_t *)(blob + (size_t)a->n_seqs *
				    sizeof(struct pg_cuda_attn_seq));
	p.block = a->block;
	p.n_heads = a->n_heads;
	p.head0 = a->head0;
	p.group = a->group;
	p.kv_head0 = a->kv_head0;
	p.g_first = pl.g_first;
	p.p_cap = a->p_cap;
	p.rows = a->rows;
	p.splits = pl.splits;
	p.split_len = pl.split_len;
	p.scale = a->scale;
	p.window = a->window;
	p.softcap = a->softcap;
	if (pl.splits > 1) {
		n_parts = (size_t)pl.splits * a->rows * a->n_heads;
		p.part_o = (float *)cb->ws;
		p.part_lse = (float *)((uint8_t *)cb->ws +
				       ((n_parts * a->kv.head_dim *
					 sizeof(float) + 255) & ~(size_t)255));
	}
	switch (a->kv.type) {
	case PG_F32: launch<float>(cb, p, pl, a->n_seqs, a->max_rows); break;
	case PG_F16: launch<__half>(cb, p, pl, a->n_seqs, a->max_rows); break;
	default:
		launch<__nv_bfloat16>(cb, p, pl, a->n_seqs, a->max_rows);
		break;
	}
	if (pg_cuda_launched(cb, pl.decode ? "attention_decode" :
			     "attention_prefill") || pl.splits <= 1)
		return;
	attn_splits_kernel<<<dim3(a->n_heads, a->max_rows, a->n_seqs),
			     ATT_THREADS, 0, cb->stream>>>(p);
	pg_cuda_launched(cb, "attention_splits");
}
