/*
 * dtype.h - element types of weights, activations and KV pages.
 *
 * The numeric values are GGUF's (ggml's) type ids so that a tensor's type
 * read from a file is its dtype without translation.  This header is part of
 * the kernels' interface: it knows nothing of files or of the engine.
 */
#ifndef PAGODA_KERNELS_DTYPE_H
#define PAGODA_KERNELS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum pg_dtype {
	PG_F32 = 0,
	PG_F16 = 1,
	PG_Q4_0 = 2,
	PG_Q4_1 = 3,
	PG_Q8_0 = 8,
	PG_Q8_1 = 9,	/* activations only: Q8_0 plus the block's scaled sum */
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

#define PG_QK 32		/* values per quantisation block */

/*
 * pg_dtype_block_size - number of values stored together (1 for plain
 * floats, 32 for the quantised types); 0 for an unknown type.
 */
static inline int pg_dtype_block_size(enum pg_dtype t)
{
	switch (t) {
	case PG_F32: case PG_F16: case PG_BF16:
		return 1;
	case PG_Q4_0: case PG_Q4_1: case PG_Q8_0: case PG_Q8_1:
		return PG_QK;
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

#endif
