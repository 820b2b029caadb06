/*
 * kq_blocks.h - the repacked super-blocks of 8 rows of Q4_K and Q6_K
 * weights that kq_avx2.c's batched loops sweep (how they are laid out and
 * why: above kq_avx2.c's gemm8 loops), and the repacks that make them,
 * exported for the AVX-512 VNNI loops (kq_vnni.c), which join two of
 * them into 16 rows.
 *
 * Included only by files compiled with -mavx2 -mfma -mf16c (or more).
 */
#ifndef PAGODA_KERNELS_CPU_KQ_BLOCKS_H
#define PAGODA_KERNELS_CPU_KQ_BLOCKS_H

#include <immintrin.h>

#include "kernels/cpu/cpu_impl.h"

struct kg8_block {
	__m256i q[64];		/* chunk c: values 4c .. 4c + 3, row r in lane r */
	__m256i sc[8];		/* sub-block j's scales: int16 2r, 2r + 1 = row r's */
	__m256i mn[8];		/* its mins, the same way */
	__m256 d, dmin;		/* the rows' */
};

/* Q6_K's: 16 sub-blocks of 16; the -32 offsets against the bsums' pairs */
struct kg6_block {
	__m256i q[64];		/* as kg8_block's, u in [0, 63] */
	__m256i sc[16];		/* sub-block j's scales, both lanes of a row */
	__m256i off[8];		/* lanes 2r, 2r + 1: row r's sc[2j], sc[2j + 1] */
	__m256 d;
};

_Static_assert(sizeof(struct kg8_block) <= PG_GEMM8_KWORK &&
	       sizeof(struct kg6_block) <= PG_GEMM8_KWORK,
	       "PG_GEMM8_KWORK holds a repacked Q4_K or Q6_K block");

/* Super-block i of the 8 rows at w (ws bytes apart) into *b. */
void pg_kq_repack_q4_k_avx2(const uint8_t *w, size_t ws, int64_t i,
			    struct kg8_block *b);
void pg_kq_repack_q6_k_avx2(const uint8_t *w, size_t ws, int64_t i,
			    struct kg6_block *b);

#endif
