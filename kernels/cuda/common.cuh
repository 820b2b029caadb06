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

#include "cuda_impl.h"

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

/* Blocks of `per` items each to cover n, capped for a grid-stride loop. */
static inline unsigned int pg_grid(int64_t n, int per)
{
	int64_t b = (n + per - 1) / per;

	return (unsigned int)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

#endif
