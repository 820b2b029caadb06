/*
 * dtype.h - element types of weights, activations and KV pages.
 *
 * The numeric values are GGUF's (ggml's) type ids so that a tensor's type
 * read from a file is its dtype without translation.  This header is part of
 * the kernels' interface: it knows nothing of files or of the engine.
 */
#ifndef PAGODA_KERNELS_DTYPE_H
#define PAGODA_KERNELS_DTYPE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

enum pg_dtype {
	PG_F32 = 0,
	PG_F16 = 1,
	PG_Q4_0 = 2,
	PG_Q4_1 = 3,
	PG_Q5_0 = 6,
	PG_Q5_1 = 7,
	PG_Q8_0 = 8,
	PG_Q8_1 = 9,	/* activations only: Q8_0 plus the block's scaled sum */
	PG_Q2_K = 10,
	PG_Q3_K = 11,
	PG_Q4_K = 12,
	PG_Q5_K = 13,
	PG_Q6_K = 14,
	PG_Q8_K = 15,	/* activations only: against the K-quants */
	PG_BF16 = 30,
};

/* Quantisation block of 32 values: d * q, q in [-8, 7]. 18 bytes. */
struct pg_block_q4_0 {
	uint16_t d;		/* F16 scale */
	uint8_t qs[16];		/* low nibbles: values 0..15, high: 16..31 */
};

/* 32 values: d * q + m, q in [0, 15]. 20 bytes. */
struct pg_block_q4_1 {
	uint16_t d;		/* F16 scale */
	uint16_t m;		/* F16 minimum */
	uint8_t qs[16];		/* low nibbles: values 0..15, high: 16..31 */
};

/* 32 values: d * q, q in [-127, 127]. 34 bytes. */
struct pg_block_q8_0 {
	uint16_t d;		/* F16 scale */
	int8_t qs[32];
};

/* Q8_0 plus s = d * sum(q), used against Q4_1 weights. 36 bytes. */
struct pg_block_q8_1 {
	uint16_t d;		/* F16 scale */
	uint16_t s;		/* F16 d * sum(qs) */
	int8_t qs[32];
};

/* 32 values: d * (q - 16), q in [0, 31]; bit j of qh (little-endian
 * uint32) is value j's fifth bit.  22 bytes. */
struct pg_block_q5_0 {
	uint16_t d;		/* F16 scale */
	uint8_t qh[4];		/* fifth bits of values 0..31 */
	uint8_t qs[16];		/* low nibbles: values 0..15, high: 16..31 */
};

/* 32 values: d * q + m, q in [0, 31], bits as Q5_0.  24 bytes. */
struct pg_block_q5_1 {
	uint16_t d;		/* F16 scale */
	uint16_t m;		/* F16 minimum */
	uint8_t qh[4];
	uint8_t qs[16];
};

#define PG_QK 32		/* values per quantisation block */
#define PG_QK_K 256		/* values per K-quant super-block */

/*
 * The K-quants (llama.cpp's layouts): super-blocks of 256 values in
 * sub-blocks with integer scales (and mins) relative to the F16 d (dmin).
 *
 * Q2_K: 16 sub-blocks of 16, y = d * (sc & 15) * q - dmin * (sc >> 4),
 * q in [0, 3]; in each half of 128 values, value 32 s + l (s < 4, l < 32)
 * is bits 2s..2s+1 of qs[32 half + l], sub-block 8 half + 2s + l / 16.
 * 84 bytes.
 */
struct pg_block_q2_k {
	uint8_t scales[16];	/* low nibble scale, high nibble min */
	uint8_t qs[64];
	uint16_t d;
	uint16_t dmin;
};

/*
 * Q3_K: 16 sub-blocks of 16, y = d * (sc - 32) * (q - 4 * !hbit), q the
 * 2 low bits laid out as Q2_K's, hbit bit (value / 32) of hmask[value % 32];
 * the 6-bit scales: low 4 bits scales[i] & 15 (i < 8) or scales[i - 8] >> 4,
 * high 2 bits of scales[8 + i % 4] at bit 2 (i / 4).  110 bytes.
 */
struct pg_block_q3_k {
	uint8_t hmask[32];
	uint8_t qs[64];
	uint8_t scales[12];
	uint16_t d;
};

/*
 * Q4_K: 8 sub-blocks of 32, y = d * sc * q - dmin * m, q in [0, 15]; in
 * each 64 values, the low nibbles of qs[32 k .. 32 k + 31] are sub-block
 * 2k, the high nibbles 2k + 1; 6-bit sc and m packed in scales
 * (pg_scale_min_k4).  144 bytes.
 */
struct pg_block_q4_k {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[12];
	uint8_t qs[128];
};

/* Q5_K: Q4_K plus a fifth bit, bit 2k (sub-block 2k) or 2k + 1 of
 * qh[l] for value l of the sub-block; q in [0, 31].  176 bytes. */
struct pg_block_q5_k {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[12];
	uint8_t qh[32];
	uint8_t qs[128];
};

/*
 * Q6_K: 16 sub-blocks of 16, y = d * scales[i] * (q - 32), q in [0, 63];
 * in each half h of 128 values, value 32 k + l (k < 4, l < 32) has its low
 * nibble in ql[64 h + l + 32 (k & 1)] (low for k < 2, high after) and its
 * top 2 bits at bit 2k of qh[32 h + l].  210 bytes.
 */
struct pg_block_q6_k {
	uint8_t ql[128];
	uint8_t qh[64];
	int8_t scales[16];
	uint16_t d;
};

/* Activations against the K-quants: d * q, with the sums of each 16 q
 * (for the mins and offsets).  292 bytes. */
struct pg_block_q8_k {
	float d;
	int8_t qs[256];
	int16_t bsums[16];
};

static_assert(sizeof(struct pg_block_q4_0) == 18, "Q4_0 block");
static_assert(sizeof(struct pg_block_q4_1) == 20, "Q4_1 block");
static_assert(sizeof(struct pg_block_q5_0) == 22, "Q5_0 block");
static_assert(sizeof(struct pg_block_q5_1) == 24, "Q5_1 block");
static_assert(sizeof(struct pg_block_q8_0) == 34, "Q8_0 block");
static_assert(sizeof(struct pg_block_q8_1) == 36, "Q8_1 block");
static_assert(sizeof(struct pg_block_q2_k) == 84, "Q2_K block");
static_assert(sizeof(struct pg_block_q3_k) == 110, "Q3_K block");
static_assert(sizeof(struct pg_block_q4_k) == 144, "Q4_K block");
static_assert(sizeof(struct pg_block_q5_k) == 176, "Q5_K block");
static_assert(sizeof(struct pg_block_q6_k) == 210, "Q6_K block");
static_assert(sizeof(struct pg_block_q8_k) == 292, "Q8_K block");

/*
 * pg_scale_min_k4 - Q4_K/Q5_K sub-block j's (j < 8) 6-bit scale *sc and
 * min *m from the 12 packed bytes q: j < 4 the low 6 bits of q[j] and
 * q[j + 4]; else nibbles of q[j + 4] with the top 2 bits of q[j - 4], q[j].
 */
static inline void pg_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* pg_scale_q3_k - Q3_K sub-block i's (i < 16) scale, in [-32, 31]. */
static inline int pg_scale_q3_k(int i, const uint8_t *s)
{
	int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;

	return (lo | hi << 4) - 32;
}

/*
 * pg_dtype_block_size - number of values stored together (1 for plain
 * floats, 32 for the quantised types, 256 for the K-quants and Q8_K); 0
 * for an unknown type.
 */
static inline int pg_dtype_block_size(enum pg_dtype t)
{
	switch (t) {
	case PG_F32: case PG_F16: case PG_BF16:
		return 1;
	case PG_Q4_0: case PG_Q4_1: case PG_Q5_0: case PG_Q5_1:
	case PG_Q8_0: case PG_Q8_1:
		return PG_QK;
	case PG_Q2_K: case PG_Q3_K: case PG_Q4_K: case PG_Q5_K:
	case PG_Q6_K: case PG_Q8_K:
		return PG_QK_K;
	}
	return 0;
}

/* pg_dtype_block_bytes - bytes of one block; 0 for an unknown type. */
static inline size_t pg_dtype_block_bytes(enum pg_dtype t)
{
	switch (t) {
	case PG_F32: return 4;
	case PG_F16: return 2;
	case PG_BF16: return 2;
	case PG_Q4_0: return sizeof(struct pg_block_q4_0);
	case PG_Q4_1: return sizeof(struct pg_block_q4_1);
	case PG_Q8_0: return sizeof(struct pg_block_q8_0);
	case PG_Q8_1: return sizeof(struct pg_block_q8_1);
	case PG_Q5_0: return sizeof(struct pg_block_q5_0);
	case PG_Q5_1: return sizeof(struct pg_block_q5_1);
	case PG_Q2_K: return sizeof(struct pg_block_q2_k);
	case PG_Q3_K: return sizeof(struct pg_block_q3_k);
	case PG_Q4_K: return sizeof(struct pg_block_q4_k);
	case PG_Q5_K: return sizeof(struct pg_block_q5_k);
	case PG_Q6_K: return sizeof(struct pg_block_q6_k);
	case PG_Q8_K: return sizeof(struct pg_block_q8_k);
	}
	return 0;
}

/* pg_dtype_name - "F32", "Q4_1", ...; "unknown" for anything else. */
const char *pg_dtype_name(enum pg_dtype t);

/*
 * pg_dtype_row_bytes - bytes of a row of n values, or 0 when the type is
 * unknown or n is not a multiple of its block size.
 */
static inline size_t pg_dtype_row_bytes(enum pg_dtype t, uint64_t n)
{
	int bs = pg_dtype_block_size(t);

	if (bs == 0 || n % (uint64_t)bs)
		return 0;
	return (size_t)(n / (uint64_t)bs) * pg_dtype_block_bytes(t);
}

/*
 * Conversions between the types and floats, on the host: for the backends,
 * the engine (reading norms and embeddings out of a file), the tests and
 * the benchmarks.  Scalar reference code, built into every pagoda with
 * pg_dtype_name (kernels/cpu/dtype.c, quant.c).  fp16 conversions are
 * IEEE round-to-nearest-even; bf16 from float rounds to nearest even, NaN
 * kept quiet.
 */
float pg_fp16_to_fp32(uint16_t h);
uint16_t pg_fp32_to_fp16(float f);
float pg_bf16_to_fp32(uint16_t h);
uint16_t pg_fp32_to_bf16(float f);

/*
 * pg_quantize_row - quantise n floats (a multiple of the type's block size:
 * 32, 256 for the K-quants and Q8_K) into `type` at dst, with the reference
 * (scalar) rounding of llama.cpp for Q4_0, Q4_1, Q8_0 and the activation
 * types, and simple min/max or absmax scales for Q5_0, Q5_1 and the
 * K-quants (valid blocks, not llama.cpp's searched ones; quant.c).
 * Returns the bytes written, or 0 when type is not a storable type.
 */
size_t pg_quantize_row(enum pg_dtype type, const float *src, void *dst,
		       int64_t n);

/* pg_dequantize_row - the inverse: n values of `type` at src into floats. */
void pg_dequantize_row(enum pg_dtype type, const void *src, float *dst,
		       int64_t n);

#endif
