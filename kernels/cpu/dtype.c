/*
 * dtype.c - names of element types and the scalar fp16/bf16 conversions.
 *
 * Bit-exact IEEE conversions that need no F16C; the SIMD files convert
 * whole vectors with their own instructions.  Quantisation is in quant.c.
 */

#include "kernels/cpu/cpu_impl.h"

const char *pg_dtype_name(enum pg_dtype t)
{
	switch (t) {
	case PG_F32: return "F32";
	case PG_F16: return "F16";
	case PG_BF16: return "BF16";
	case PG_Q4_0: return "Q4_0";
	case PG_Q4_1: return "Q4_1";
	case PG_Q8_0: return "Q8_0";
	case PG_Q8_1: return "Q8_1";
	case PG_Q5_0: return "Q5_0";
	case PG_Q5_1: return "Q5_1";
	case PG_Q2_K: return "Q2_K";
	case PG_Q3_K: return "Q3_K";
	case PG_Q4_K: return "Q4_K";
	case PG_Q5_K: return "Q5_K";
	case PG_Q6_K: return "Q6_K";
	case PG_Q8_K: return "Q8_K";
	}
	return "unknown";
}

float pg_fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0x1f)		/* inf, nan: keep the payload */
		return pg_bits_f32(sign | 0x7f800000 | (man << 13));
	if (exp == 0) {			/* zero, subnormal: man * 2^-24 */
		float v = (float)man * pg_bits_f32(0x33800000);

		return sign ? -v : v;
	}
	return pg_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round the finite, non-negative bits u (a float) to half precision. */
static uint16_t fp16_round(uint32_t u)
{
	int32_t exp = (int32_t)(u >> 23) - 127 + 15;
	uint32_t man = (u & 0x7fffff) | 0x800000;	/* 24 bits with one */
	uint32_t shift, out, rest, half;

	if (exp >= 0x1f)
		return 0x7c00;			/* overflow to inf */
	if (exp <= 0) {				/* subnormal result */
		if (exp < -10)
			return 0;
		shift = (uint32_t)(14 - exp);	/* 13 + (1 - exp) */
	} else {
		shift = 13;
		man &= 0x7fffff;
	}
	out = man >> shift;
	rest = man & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (exp > 0)
		out |= (uint32_t)exp << 10;
	if (rest > half || (rest == half && (out & 1)))
		out++;				/* may carry into the exponent */
	return (uint16_t)out;
}

uint16_t pg_fp32_to_fp16(float f)
{
	uint32_t u = pg_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);

	u &= 0x7fffffff;
	if (u > 0x7f800000)			/* nan: quiet, keep top payload */
		return sign | 0x7e00 | (uint16_t)((u >> 13) & 0x3ff);
	if (u == 0x7f800000)
		return sign | 0x7c00;
	return sign | fp16_round(u);
}

float pg_bf16_to_fp32(uint16_t h)
{
	return pg_bits_f32((uint32_t)h << 16);
}

uint16_t pg_fp32_to_bf16(float f)
{
	uint32_t u = pg_f32_bits(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
