/*
 * gguf.h - a validated, read-only view of a GGUF file mapped with mmap.
 *
 * gguf_open() checks every count, string, type, offset and size against the
 * file before anything else may look at it, so that the accessors below
 * never read outside the mapping.  It does not know what a model is: the
 * model loader asks for keys and tensors by name.
 */
#ifndef PAGODA_GGUF_H
#define PAGODA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* Metadata value types, GGUF's numbering. */
enum gguf_type {
	GGUF_UINT8 = 0,
	GGUF_INT8 = 1,
	GGUF_UINT16 = 2,
	GGUF_INT16 = 3,
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
	GGUF_UINT64 = 10,
	GGUF_INT64 = 11,
	GGUF_FLOAT64 = 12,
};

/* A string inside the mapping: not NUL-terminated, may hold any bytes. */
struct gguf_str {
	const char *ptr;
	uint64_t len;
};

#define GGUF_MAX_DIMS 4

/* A tensor's description; data points into the mapping (aligned). */
struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];	/* ne[0] is the contiguous dim; unused = 1 */
	enum pg_dtype type;
	const void *data;
	size_t n_bytes;
};

struct gguf_file;

/*
 * gguf_open - map and validate the GGUF file at path.  On success *out is a
 * handle to close with gguf_close() and 0 is returned.  On failure returns
 * -errno (-ENOENT, -EACCES, -ENOMEM, -EINVAL for a malformed or unsupported
 * file) and writes a message naming the file, the field and what was
 * expected into err (err_len bytes, always NUL-terminated when err_len > 0).
 */
int gguf_open(const char *path, struct gguf_file **out, char *err,
	      size_t err_len);

/*
 * gguf_open_mem - the same over a caller's buffer (not copied; it must
 * outlive the handle).  name is used in messages.  For tests and fuzzing.
 */
int gguf_open_mem(const void *buf, size_t len, const char *name,
		  struct gguf_file **out, char *err, size_t err_len);

/* gguf_close - unmap and free.  NULL is allowed. */
void gguf_close(struct gguf_file *f);

/* gguf_path - the path (or name) the file was opened with. */
const char *gguf_path(const struct gguf_file *f);

/* gguf_version - the file's format version (2 or 3). */
uint32_t gguf_version(const struct gguf_file *f);

/* Number of metadata keys and tensors. */
uint64_t gguf_n_keys(const struct gguf_file *f);
uint64_t gguf_n_tensors(const struct gguf_file *f);

/* gguf_key_name - the name of key i (i < gguf_n_keys). */
struct gguf_str gguf_key_name(const struct gguf_file *f, uint64_t i);

/* gguf_key_type - the type of key i; GGUF_ARRAY for arrays. */
enum gguf_type gguf_key_type(const struct gguf_file *f, uint64_t i);

/* gguf_find_key - index of the key named `key`, or -1. */
int64_t gguf_find_key(const struct gguf_file *f, const char *key);

/*
 * Typed getters by key name.  Each returns 0 and sets *out, -ENOENT when the
 * key is absent, or -EINVAL when its type does not fit (integers of any
 * width are accepted when the value fits in the target; floats accept
 * FLOAT32 and FLOAT64).
 */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, int *out);
int gguf_get_str(const struct gguf_file *f, const char *key,
		 struct gguf_str *out);

/*
 * gguf_get_arr - the element type and length of array `key`: 0, -ENOENT, or
 * -EINVAL when the key is not an array.
 */
int gguf_get_arr(const struct gguf_file *f, const char *key,
		 enum gguf_type *elem_type, uint64_t *n);

/*
 * gguf_get_arr_data - the raw little-endian elements of a numeric array
 * (n elements of the array's element type); NULL when absent, not an array,
 * or an array of strings or arrays.
 */
const void *gguf_get_arr_data(const struct gguf_file *f, const char *key);

/*
 * gguf_get_arr_str - element i of an array of strings: 0, -ENOENT, -EINVAL
 * (not an array of strings), -ERANGE (i out of bounds).
 */
int gguf_get_arr_str(const struct gguf_file *f, const char *key, uint64_t i,
		     struct gguf_str *out);

/* gguf_tensor_at - tensor i (i < gguf_n_tensors). */
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f,
					 uint64_t i);

/* gguf_find_tensor - the tensor named `name`, or NULL. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f,
					   const char *name);

/* gguf_str_eq - whether s equals the NUL-terminated string c. */
int gguf_str_eq(struct gguf_str s, const char *c);

/*
 * gguf_str_quote - s for a message: printable ASCII as itself, '"' and '\\'
 * escaped, every other byte (NUL included) as \xNN, so that a string with
 * an embedded NUL shows all of it.  At most max_in bytes of s are shown,
 * then "..." when it is longer.  Writes a NUL-terminated string of at most
 * cap bytes (cap >= 1) and returns buf.
 */
const char *gguf_str_quote(struct gguf_str s, size_t max_in, char *buf,
			   size_t cap);

#endif
