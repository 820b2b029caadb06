/*
 * get_rows.c - the get_rows op: look up rows of a matrix (the token
 * embedding) and return them as floats.
 *
 * Dequantisation is the reference one from quant.c: a few rows per batch
 * do not need SIMD or threads.
 */
#include "kernels/cpu/cpu_impl.h"

/* m: (n_rows, n_cols) of m->type; ids: (n); out: (n, n_cols) floats */
void pg_cpu_get_rows(struct pg_backend *be, const struct pg_matrix *m,
		     const int32_t *ids, int n, float *out)
{
	const uint8_t *data = m->data;

	for (int i = 0; i < n; i++)
		pg_dequantize_row(m->type, data + (size_t)ids[i] * m->row_bytes,
				  out + (size_t)i * (size_t)m->n_cols,
				  m->n_cols);
}
