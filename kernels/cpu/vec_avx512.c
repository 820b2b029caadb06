/*
 * vec_avx512.c - the avx512 table of inner loops.  PLACEHOLDER
 */
#include "cpu_impl.h"

const struct pg_cpu_kernels pg_cpu_kernels_avx512 = {
	.isa = PG_ISA_AVX512,
	.dot_f32 = pg_dot_f32_ref,
	.dot_f16 = pg_dot_f16_ref,
	.dot_bf16 = pg_dot_bf16_ref,
	.dot_q8_0 = pg_dot_q8_0_ref,
	.dot_q4_0 = pg_dot_q4_0_ref,
	.dot_q4_1 = pg_dot_q4_1_ref,
	.quant_q8_0 = pg_quant_q8_0_ref,
	.quant_q8_1 = pg_quant_q8_1_ref,
	.axpy_f32 = pg_axpy_f32_ref,
	.axpy_f16 = pg_axpy_f16_ref,
	.axpy_bf16 = pg_axpy_bf16_ref,
	.scale = pg_scale_ref,
	.sumsq = pg_sumsq_ref,
	.scale_mul = pg_scale_mul_ref,
	.silu_mul = pg_silu_mul_ref,
	.add = pg_add_ref,
};
