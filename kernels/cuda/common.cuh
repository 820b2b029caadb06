/*
 * common.cuh - device helpers shared by the CUDA op files: element
 * conversions, warp reductions, and the launch-size arithmetic.
 *
 * Device code only (included by .cu files); the backend's host structs are
 * in cuda_impl.h.  Conversions round as kernels/cpu/dtype.c does (to
 * nearest, ties to even), so that stored KV and dequantised weights are
 * the CPU's bits.
 */
#ifndef PAGODA_KERNELS_CUDA_COMMON_CUH
#define PAGODA_KERNELS_CUDA_COMMON_CUH

#include <cuda_fp16.h>		/* __half and its conversions */
#include <cuda_bf16.h>		/* __nv_bfloat16 */
#include <stdint.h>

#include "kernels/cuda/cuda_impl.h"

#define PG_FULL_MASK 0xffffffffu

/* F16 bits to float, exactly. */
static __device__ __forceinline__ float pg_h2f(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

/* BF16 bits to float, exactly. */
static __device__ __forceinline__ float pg_b2f(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

/* Element types of the KV pages and dense weights: load and store, and
 * (16-bit types) a value from its bits. */
template <typename T> struct pg_elem;

template <> struct pg_elem<float> {
	static __device__ __forceinline__ float load(const float *p)
	{
		return *p;
	}
	static __device__ __forceinline__ void store(float *p, float v)
	{
		*p = v;
	}
};

template <> struct pg_elem<__half> {
	static __device__ __forceinline__ float load(const __half *p)
	{
		return __half2float(*p);
	}
	static __device__ __forceinline__ float bits(uint32_t h)
	{
		return pg_h2f((uint16_t)h);
	}
	static __device__ __forceinline__ void store(__half *p, float v)
	{
		*p = __float2half_rn(v);
	}
};

template <> struct pg_elem<__nv_bfloat16> {
	static __device__ __forceinline__ float load(const __nv_bfloat16 *p)
	{
		return __bfloat162float(*p);
	}
	static __device__ __forceinline__ float bits(uint32_t h)
	{
		return pg_b2f((uint16_t)h);
	}
	static __device__ __forceinline__ void store(__nv_bfloat16 *p, float v)
	{
		*p = __float2bfloat16_rn(v);
	}
};

/*
 * Eight consecutive elements from a 16-byte aligned address, as floats
 * (two 16-byte loads for float).
 */
template <typename T>
static __device__ __forceinline__ void pg_load8(const T *p, float *out);

template <>
__device__ __forceinline__ void pg_load8<float>(const float *p, float *out)
{
	float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);

	out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
	out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}

template <>
__device__ __forceinline__ void pg_load8<__half>(const __half *p, float *out)
{
	uint4 u = *(const uint4 *)p;
	const uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
	for (int i = 0; i < 4; i++) {
		out[2 * i] = pg_h2f((uint16_t)(w[i] & 0xffff));
		out[2 * i + 1] = pg_h2f((uint16_t)(w[i] >> 16));
	}
}

template <>
__device__ __forceinline__ void pg_load8<__nv_bfloat16>(const __nv_bfloat16 *p,
							 float *out)
{
	uint4 u = *(const uint4 *)p;
	const uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
	for (int i = 0; i < 4; i++) {
		out[2 * i] = __uint_as_float(w[i] << 16);
		out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
	}
}

/* Sum over the 32 lanes of a warp; every lane gets it. */
static __device__ __forceinline__ float pg_warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(PG_FULL_MASK, v, o);
	return v;
}

/* Maximum over the 32 lanes of a warp; every lane gets it. */
static __device__ __forceinline__ float pg_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(PG_FULL_MASK, v, o));
	return v;
}

/* ---- quantised weight blocks (kernels/dtype.h's layouts) ---- */

/* Two bytes at p (2-byte aligned) as the low half of an int. */
static __device__ __forceinline__ uint32_t pg_ld16(const uint8_t *p)
{
	return *(const uint16_t *)p;
}

/* Four bytes at p, p only 2-byte aligned (blocks of 18, 22, 110 bytes). */
static __device__ __forceinline__ uint32_t pg_ld32(const uint8_t *p)
{
	return pg_ld16(p) | (pg_ld16(p + 2) << 16);
}

/* Bits 0..3 of h as bit 4 of the four bytes of an int (Q5's fifth bits). */
static __device__ __forceinline__ uint32_t pg_spread4(uint32_t h)
{
	return (h & 1u) << 4 | (h & 2u) << 11 | (h & 4u) << 18 |
	       (h & 8u) << 25;
}

/* Bytes of one block and values in it, per weight type. */
template <int WT> struct pg_qt;
template <> struct pg_qt<PG_Q8_0> { enum { bytes = 34, qk = 32 }; };
template <> struct pg_qt<PG_Q4_0> { enum { bytes = 18, qk = 32 }; };
template <> struct pg_qt<PG_Q4_1> { enum { bytes = 20, qk = 32 }; };
template <> struct pg_qt<PG_Q5_0> { enum { bytes = 22, qk = 32 }; };
template <> struct pg_qt<PG_Q5_1> { enum { bytes = 24, qk = 32 }; };
template <> struct pg_qt<PG_Q2_K> { enum { bytes = 84, qk = 256 }; };
template <> struct pg_qt<PG_Q3_K> { enum { bytes = 110, qk = 256 }; };
template <> struct pg_qt<PG_Q4_K> { enum { bytes = 144, qk = 256 }; };
template <> struct pg_qt<PG_Q5_K> { enum { bytes = 176, qk = 256 }; };
template <> struct pg_qt<PG_Q6_K> { enum { bytes = 210, qk = 256 }; };

/* The K-quants that subtract dmin * m (the others have no mins). */
static __host__ __device__ constexpr bool pg_kq_has_min(int wt)
{
	return wt == PG_Q2_K || wt == PG_Q4_K || wt == PG_Q5_K;
}

/*
 * A 32-value block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) as 8 ints of signed
 * bytes in value order (int i: values 4i .. 4i + 3): the integers dot.c
 * multiplies (Q4_0 less 8, Q5_0 less 16), and *d, *m its F16 scale and
 * (Q4_1, Q5_1) minimum as floats (else 0).
 */
template <int WT>
static __device__ __forceinline__ void pg_q32_load(const uint8_t *w, int *wq,
						   float *d, float *m)
{
	*d = pg_h2f((uint16_t)pg_ld16(w));
	*m = WT == PG_Q4_1 || WT == PG_Q5_1 ? pg_h2f((uint16_t)pg_ld16(w + 2)) :
	     0.0f;
	if constexpr (WT == PG_Q8_0) {
#pragma unroll
		for (int i = 0; i < 8; i++)
			wq[i] = (int)pg_ld32(w + 2 + 4 * i);
	} else {
		constexpr int qoff = WT == PG_Q4_0 ? 2 : WT == PG_Q4_1 ? 4 :
				     WT == PG_Q5_0 ? 6 : 8;
		constexpr bool five = WT == PG_Q5_0 || WT == PG_Q5_1;
		uint32_t qh = five ? pg_ld32(w + qoff - 4) : 0u;

#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = pg_ld32(w + qoff + 4 * i);
			uint32_t lo = v & 0x0f0f0f0fu;
			uint32_t hi = (v >> 4) & 0x0f0f0f0fu;

			if constexpr (five) {
				lo |= pg_spread4(qh >> (4 * i));
				hi |= pg_spread4(qh >> (16 + 4 * i));
			}
			if constexpr (WT == PG_Q4_0) {
				lo = __vsub4(lo, 0x08080808u);
				hi = __vsub4(hi, 0x08080808u);
			} else if constexpr (WT == PG_Q5_0) {
				lo = __vsub4(lo, 0x10101010u);
				hi = __vsub4(hi, 0x10101010u);
			}
			wq[i] = (int)lo;
			wq[4 + i] = (int)hi;
		}
	}
}

/* Q3_K sub-block i's 6-bit scale less 32 (pg_scale_q3_k). */
static __device__ __forceinline__ int pg_q3k_scale(int i, const uint8_t *s)
{
	int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;

	return (lo | hi << 4) - 32;
}

/* Q4_K/Q5_K sub-block j's 6-bit scale and min (pg_scale_min_k4). */
static __device__ __forceinline__ void pg_k4_scale_min(int j, const uint8_t *q,
						       int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/*
 * Values 32c .. 32c + 31 (c < 8) of a K-quant super-block w: wq, 8 ints of
 * signed bytes in value order, the integers dot.c multiplies (Q3_K with
 * its -4, Q6_K less 32); sc[h], m[h] the integer scale and min of values
 * 32c + 16h .. + 15 (m 0 where the type has none); *d, *dmin the F16
 * super-block scales as floats (*dmin 0 where none).
 */
template <int WT>
static __device__ __forceinline__ void pg_kq_load(const uint8_t *w, int c,
						  int *wq, int *sc, int *m,
						  float *d, float *dmin)
{
	const int h = c / 4, s = c % 4;

	if constexpr (WT == PG_Q2_K) {
		const uint8_t *qs = w + 16 + 32 * h;

#pragma unroll
		for (int i = 0; i < 8; i++)
			wq[i] = (int)((pg_ld32(qs + 4 * i) >> (2 * s)) &
				      0x03030303u);
#pragma unroll
		for (int k = 0; k < 2; k++) {
			sc[k] = w[2 * c + k] & 15;
			m[k] = w[2 * c + k] >> 4;
		}
		*d = pg_h2f((uint16_t)pg_ld16(w + 80));
		*dmin = pg_h2f((uint16_t)pg_ld16(w + 82));
	} else if constexpr (WT == PG_Q3_K) {
		const uint8_t *qs = w + 32 + 32 * h;

#pragma unroll
		for (int i = 0; i < 8; i++) {
			uint32_t lo = (pg_ld32(qs + 4 * i) >> (2 * s)) &
				      0x03030303u;
			uint32_t hb = (pg_ld32(w + 4 * i) >> c) & 0x01010101u;

			wq[i] = (int)__vsub4(lo | hb << 2, 0x04040404u);
		}
#pragma unroll
		for (int k = 0; k < 2; k++) {
			sc[k] = pg_q3k_scale(2 * c + k, w + 96);
			m[k] = 0;
		}
		*d = pg_h2f((uint16_t)pg_ld16(w + 108));
		*dmin = 0.0f;
	} else if constexpr (WT == PG_Q4_K || WT == PG_Q5_K) {
		const uint8_t *qs = w + (WT == PG_Q4_K ? 16 : 48) + 32 * (c / 2);
		int scv, mv;

#pragma unroll
		for (int i = 0; i < 8; i++) {
			uint32_t v = (pg_ld32(qs + 4 * i) >> (4 * (c & 1))) &
				     0x0f0f0f0fu;

			if constexpr (WT == PG_Q5_K)
				v |= ((pg_ld32(w + 16 + 4 * i) >> c) &
				      0x01010101u) << 4;
			wq[i] = (int)v;
		}
		pg_k4_scale_min(c, w + 4, &scv, &mv);
		sc[0] = sc[1] = scv;
		m[0] = m[1] = mv;
		*d = pg_h2f((uint16_t)pg_ld16(w));
		*dmin = pg_h2f((uint16_t)pg_ld16(w + 2));
	} else {	/* Q6_K */
		const uint8_t *ql = w + 64 * h + 32 * (s & 1);
		const uint8_t *qh = w + 128 + 32 * h;

#pragma unroll
		for (int i = 0; i < 8; i++) {
			uint32_t lo = (pg_ld32(ql + 4 * i) >> (4 * (s >> 1))) &
				      0x0f0f0f0fu;
			uint32_t hi = (pg_ld32(qh + 4 * i) >> (2 * s)) &
				      0x03030303u;

			wq[i] = (int)__vsub4(lo | hi << 4, 0x20202020u);
		}
#pragma unroll
		for (int k = 0; k < 2; k++) {
			sc[k] = (int8_t)w[192 + 2 * c + k];
			m[k] = 0;
		}
		*d = pg_h2f((uint16_t)pg_ld16(w + 208));
		*dmin = 0.0f;
	}
}

/* Signed byte e (0..3) of the int v. */
static __device__ __forceinline__ float pg_sbyte(int v, int e)
{
	return (float)(int8_t)(v >> (8 * e));
}

/*
 * Values 32c .. 32c + 31 of block w (c = 0 for the 32-value types) as
 * floats, rounded as quant.c dequantises them (no fused multiply-add):
 * d q (Q8_0), d q + m (Q4/Q5; m = 0 for _0), (d sc) q - (dmin m) for the
 * K-quants, (d sc) q for Q3_K and Q6_K (less 0: the same bits).
 */
template <int WT>
static __device__ __forceinline__ void pg_dequant32(const uint8_t *w, int c,
						    float *y)
{
	int wq[8];

	if constexpr (pg_qt<WT>::qk == 32) {
		float d, m;

		pg_q32_load<WT>(w, wq, &d, &m);
#pragma unroll
		for (int j = 0; j < 32; j++) {
			float v = __fmul_rn(d, pg_sbyte(wq[j / 4], j % 4));

			y[j] = WT == PG_Q8_0 ? v : __fadd_rn(v, m);
		}
	} else {
		int sc[2], m[2];
		float d, dmin;

		pg_kq_load<WT>(w, c, wq, sc, m, &d, &dmin);
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			float dl = __fmul_rn(d, (float)sc[hh]);
			float ml = __fmul_rn(dmin, (float)m[hh]);

#pragma unroll
			for (int j = 16 * hh; j < 16 * hh + 16; j++)
				y[j] = __fsub_rn(__fmul_rn(dl, pg_sbyte(wq[j / 4],
									j % 4)),
						 ml);
		}
	}
}

/* Blocks of `per` items each to cover n, capped for a grid-stride loop. */
static inline unsigned int pg_grid(int64_t n, int per)
{
	int64_t b = (n + per - 1) / per;

	return (unsigned int)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

#endif
