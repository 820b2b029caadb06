/*
 * gguf.c - GGUF reader: map a file, validate all of it, then answer lookups.
 *
 * Validation happens once, in parse(): every count is bounded by the bytes
 * left, every string and array lies inside the file, every tensor has a
 * known type, a shape that fits its type's blocks, an aligned offset and
 * bytes that lie inside the data section without overlapping another's.
 * The accessors afterwards trust what parse() accepted.  This file does not
 * interpret metadata (that is the model loader's and tokenizer's job).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"

#define GGUF_MAGIC 0x46554747u	/* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NAME 256	/* llama.cpp writes at most 63 */

struct gguf_kv {
	struct gguf_str key;
	enum gguf_type type;
	enum gguf_type elem_type;	/* arrays only */
	uint64_t n;			/* arrays only: element count */
	const uint8_t *data;		/* scalar value or numeric array */
	struct gguf_str str;		/* GGUF_STRING */
	struct gguf_str *strs;		/* array of strings: n entries */
};

struct gguf_file {
	char *path;
	const uint8_t *base;		/* the file: size bytes */
	size_t size;
	int mapped;
	uint32_t version;
	uint64_t n_kv;
	uint64_t n_tensors;
	struct gguf_kv *kv;		/* n_kv */
	struct gguf_tensor *tensors;	/* n_tensors */
	size_t alignment;
	size_t data_offset;		/* start of the tensor data section */
};

/* A bounds-checked cursor over the file during parsing. */
struct cursor {
	struct gguf_file *f;
	size_t off;
	char *err;
	size_t err_len;
};

static int fail(struct cursor *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct cursor *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!c->err || !c->err_len)
		return -EINVAL;
	n = snprintf(c->err, c->err_len, "%s: ", c->f->path);
	if (n < 0 || (size_t)n >= c->err_len)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->err_len - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static size_t left(const struct cursor *c)
{
	return c->f->size - c->off;
}

static int read_raw(struct cursor *c, void *dst, size_t n, const char *what)
{
	if (n > left(c))
		return fail(c, "%s: file truncated at byte %zu (needs %zu more bytes, %zu left)",
			    what, c->off, n, left(c));
	memcpy(dst, c->f->base + c->off, n);
	c->off += n;
	return 0;
}

static int read_u32(struct cursor *c, uint32_t *v, const char *what)
{
	return read_raw(c, v, sizeof(*v), what);
}

static int read_u64(struct cursor *c, uint64_t *v, const char *what)
{
	return read_raw(c, v, sizeof(*v), what);
}

static int read_str(struct cursor *c, struct gguf_str *s, const char *what)
{
	uint64_t len = 0;
	int rc = read_u64(c, &len, what);

	if (rc)
		return rc;
	if (len > left(c))
		return fail(c, "%s: string length %llu at byte %zu runs past the end of the file (%zu bytes left)",
			    what, (unsigned long long)len, c->off - 8, left(c));
	s->ptr = (const char *)c->f->base + c->off;
	s->len = len;
	c->off += len;
	return 0;
}

/* Size of a scalar metadata value; 0 for strings, arrays and unknown types. */
static size_t scalar_size(enum gguf_type t)
{
	switch (t) {
	case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL:
		return 1;
	case GGUF_UINT16: case GGUF_INT16:
		return 2;
	case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32:
		return 4;
	case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64:
		return 8;
	case GGUF_STRING: case GGUF_ARRAY:
		return 0;
	}
	return 0;
}

static int known_value_type(uint32_t t)
{
	return t <= GGUF_FLOAT64;
}

static int parse_array(struct cursor *c, struct gguf_kv *kv)
{
	uint32_t et;
	uint64_t n;
	size_t es;
	int rc;

	if ((rc = read_u32(c, &et, "array element type")) ||
	    (rc = read_u64(c, &n, "array length")))
		return rc;
	if (!known_value_type(et))
		return fail(c, "key '%.*s': unknown array element type %u (expected 0..12)",
			    (int)kv->key.len, kv->key.ptr, et);
	if (et == GGUF_ARRAY)
		return fail(c, "key '%.*s': arrays of arrays are not supported",
			    (int)kv->key.len, kv->key.ptr);
	kv->elem_type = et;
	kv->n = n;
	if (et != GGUF_STRING) {
		es = scalar_size(et);
		if (n > left(c) / es)
			return fail(c, "key '%.*s': array of %llu elements of %zu bytes runs past the end of the file (%zu bytes left)",
				    (int)kv->key.len, kv->key.ptr,
				    (unsigned long long)n, es, left(c));
		kv->data = c->f->base + c->off;
		c->off += n * es;
		return 0;
	}
	/* every string takes at least its 8-byte length */
	if (n > left(c) / 8)
		return fail(c, "key '%.*s': %llu strings cannot fit in the %zu bytes left",
			    (int)kv->key.len, kv->key.ptr,
			    (unsigned long long)n, left(c));
	kv->strs = malloc((n ? n : 1) * sizeof(*kv->strs));
	if (!kv->strs)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		if ((rc = read_str(c, &kv->strs[i], "array string")))
			return rc;
	return 0;
}

static int parse_kv(struct cursor *c, struct gguf_kv *kv, uint64_t idx)
{
	uint32_t t;
	size_t sz;
	int rc;

	if ((rc = read_str(c, &kv->key, "metadata key")) ||
	    (rc = read_u32(c, &t, "metadata value type")))
		return rc;
	if (!known_value_type(t))
		return fail(c, "key #%llu '%.*s': unknown value type %u (expected 0..12)",
			    (unsigned long long)idx, (int)kv->key.len,
			    kv->key.ptr, t);
	kv->type = t;
	if (t == GGUF_STRING)
		return read_str(c, &kv->str, "string value");
	if (t == GGUF_ARRAY)
		return parse_array(c, kv);
	sz = scalar_size(t);
	if (sz > left(c))
		return fail(c, "key '%.*s': value truncated at byte %zu",
			    (int)kv->key.len, kv->key.ptr, c->off);
	kv->data = c->f->base + c->off;
	c->off += sz;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	const struct gguf_str *x = *(const struct gguf_str *const *)a;
	const struct gguf_str *y = *(const struct gguf_str *const *)b;
	size_t n = x->len < y->len ? x->len : y->len;
	int r = memcmp(x->ptr, y->ptr, n);

	if (r)
		return r;
	return (x->len > y->len) - (x->len < y->len);
}

/*
 * find_duplicate - n names reached through `stride`-byte records starting
 * at first; returns a name that appears twice, or NULL.  *nomem is set when
 * the sort buffer cannot be had.  O(n log n) so that a hostile file with
 * many names cannot stall the reader.
 */
static const struct gguf_str *find_duplicate(const void *first, size_t stride,
					     uint64_t n, int *nomem)
{
	const struct gguf_str **v, *dup = NULL;

	*nomem = 0;
	if (n < 2)
		return NULL;
	v = malloc(n * sizeof(*v));
	if (!v) {
		*nomem = 1;
		return NULL;
	}
	for (uint64_t i = 0; i < n; i++)
		v[i] = (const struct gguf_str *)((const char *)first + i * stride);
	qsort(v, n, sizeof(*v), cmp_str);
	for (uint64_t i = 1; i < n && !dup; i++)
		if (!cmp_str(&v[i - 1], &v[i]))
			dup = v[i];
	free(v);
	return dup;
}

static int check_unique_keys(struct cursor *c)
{
	struct gguf_file *f = c->f;
	const struct gguf_str *dup;
	int nomem;

	dup = find_duplicate(&f->kv[0].key, sizeof(f->kv[0]), f->n_kv, &nomem);
	if (nomem)
		return -ENOMEM;
	if (dup)
		return fail(c, "key '%.*s' appears twice (expected unique keys)",
			    (int)dup->len, dup->ptr);
	return 0;
}

static const char *ggml_type_name(uint32_t t)
{
	static const char *const names[] = {
		[0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1",
		[6] = "Q5_0", [7] = "Q5_1", [8] = "Q8_0", [9] = "Q8_1",
		[10] = "Q2_K", [11] = "Q3_K", [12] = "Q4_K", [13] = "Q5_K",
		[14] = "Q6_K", [15] = "Q8_K", [16] = "IQ2_XXS",
		[17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S",
		[20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S",
		[23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32",
		[27] = "I64", [28] = "F64", [29] = "IQ1_M", [30] = "BF16",
		[34] = "TQ1_0", [35] = "TQ2_0", [39] = "MXFP4",
	};

	if (t < sizeof(names) / sizeof(names[0]) && names[t])
		return names[t];
	return "unknown";
}

static int supported_tensor_type(uint32_t t)
{
	switch (t) {
	case PG_F32: case PG_F16: case PG_BF16:
	case PG_Q4_0: case PG_Q4_1: case PG_Q8_0:
	case PG_Q5_0: case PG_Q5_1:
	case PG_Q2_K: case PG_Q3_K: case PG_Q4_K: case PG_Q5_K: case PG_Q6_K:
		return 1;
	}
	return 0;
}

static int parse_tensor_shape(struct cursor *c, struct gguf_tensor *t,
			      uint64_t idx)
{
	uint64_t n_elems = 1;
	int rc;

	if ((rc = read_u32(c, &t->n_dims, "tensor dimension count")))
		return rc;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return fail(c, "tensor '%.*s': %u dimensions (expected 1..%d)",
			    (int)t->name.len, t->name.ptr, t->n_dims,
			    GGUF_MAX_DIMS);
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		if ((rc = read_u64(c, &t->ne[d], "tensor dimension")))
			return rc;
		if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) ||
		    n_elems > (1ull << 50) / t->ne[d])
			return fail(c, "tensor #%llu '%.*s': dimension %u is %llu (expected 1..2^40, at most 2^50 elements in all)",
				    (unsigned long long)idx,
				    (int)t->name.len, t->name.ptr, d,
				    (unsigned long long)t->ne[d]);
		n_elems *= t->ne[d];
	}
	return 0;
}

static int parse_tensor_info(struct cursor *c, struct gguf_tensor *t,
			     uint64_t idx, uint64_t *rel_off)
{
	uint32_t type;
	size_t row;
	int rc;

	if ((rc = read_str(c, &t->name, "tensor name")))
		return rc;
	if (t->name.len == 0 || t->name.len > GGUF_MAX_NAME)
		return fail(c, "tensor #%llu: name of %llu bytes (expected 1..%d)",
			    (unsigned long long)idx,
			    (unsigned long long)t->name.len, GGUF_MAX_NAME);
	if ((rc = parse_tensor_shape(c, t, idx)) ||
	    (rc = read_u32(c, &type, "tensor type")) ||
	    (rc = read_u64(c, rel_off, "tensor offset")))
		return rc;
	if (!supported_tensor_type(type))
		return fail(c, "tensor '%.*s': type %s (%u) is not supported (expected F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K)",
			    (int)t->name.len, t->name.ptr,
			    ggml_type_name(type), type);
	t->type = type;
	row = pg_dtype_row_bytes(t->type, t->ne[0]);
	if (!row)
		return fail(c, "tensor '%.*s': first dimension %llu is not a multiple of the %s block of %d",
			    (int)t->name.len, t->name.ptr,
			    (unsigned long long)t->ne[0], pg_dtype_name(t->type),
			    pg_dtype_block_size(t->type));
	t->n_bytes = row * (t->ne[1] * t->ne[2] * t->ne[3]);
	return 0;
}

static int check_alignment_key(struct cursor *c)
{
	uint32_t a;
	int rc = gguf_get_u32(c->f, "general.alignment", &a);

	if (rc == -ENOENT) {
		c->f->alignment = GGUF_DEFAULT_ALIGNMENT;
		return 0;
	}
	if (rc || a == 0 || (a & (a - 1)) || a > (1u << 16))
		return fail(c, "general.alignment: expected a power of two up to 65536 of an integer type");
	c->f->alignment = a;
	return 0;
}

static int cmp_tensor_data(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;

	return (x->data > y->data) - (x->data < y->data);
}

/* No two tensors share a name or a byte of data. */
static int check_tensors_disjoint(struct cursor *c)
{
	struct gguf_file *f = c->f;
	const struct gguf_tensor **v;
	const struct gguf_str *dup;
	int nomem, rc = 0;

	if (f->n_tensors < 2)
		return 0;
	v = malloc(f->n_tensors * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint64_t i = 0; i < f->n_tensors; i++)
		v[i] = &f->tensors[i];
	qsort(v, f->n_tensors, sizeof(*v), cmp_tensor_data);
	for (uint64_t i = 1; i < f->n_tensors && !rc; i++)
		if ((const uint8_t *)v[i - 1]->data + v[i - 1]->n_bytes >
		    (const uint8_t *)v[i]->data)
			rc = fail(c, "tensors '%.*s' and '%.*s' overlap in the data section",
				  (int)v[i - 1]->name.len, v[i - 1]->name.ptr,
				  (int)v[i]->name.len, v[i]->name.ptr);
	free(v);
	if (rc)
		return rc;
	dup = find_duplicate(&f->tensors[0].name, sizeof(f->tensors[0]),
			     f->n_tensors, &nomem);
	if (nomem)
		return -ENOMEM;
	if (dup)
		return fail(c, "tensor '%.*s' appears twice (expected unique names)",
			    (int)dup->len, dup->ptr);
	return 0;
}

/* Place every tensor inside the data section, aligned. */
static int place_tensors(struct cursor *c, const uint64_t *rel_off)
{
	struct gguf_file *f = c->f;
	size_t a = f->alignment;
	size_t data_bytes;

	f->data_offset = (c->off + a - 1) / a * a;
	if (f->n_tensors && f->data_offset > f->size)
		return fail(c, "tensor data section starts at byte %zu, past the end of the file (%zu bytes)",
			    f->data_offset, f->size);
	data_bytes = f->n_tensors ? f->size - f->data_offset : 0;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];

		if (rel_off[i] % a)
			return fail(c, "tensor '%.*s': offset %llu is not a multiple of the alignment %zu",
				    (int)t->name.len, t->name.ptr,
				    (unsigned long long)rel_off[i], a);
		if (rel_off[i] > data_bytes ||
		    t->n_bytes > data_bytes - rel_off[i])
			return fail(c, "tensor '%.*s': %zu bytes at data offset %llu run past the end of the file (data section holds %zu bytes; file truncated?)",
				    (int)t->name.len, t->name.ptr, t->n_bytes,
				    (unsigned long long)rel_off[i], data_bytes);
		t->data = f->base + f->data_offset + rel_off[i];
	}
	return check_tensors_disjoint(c);
}

static int parse_header(struct cursor *c)
{
	struct gguf_file *f = c->f;
	uint32_t magic;
	int rc;

	if ((rc = read_u32(c, &magic, "magic")))
		return fail(c, "not a GGUF file: only %zu bytes", f->size);
	if (magic != GGUF_MAGIC)
		return fail(c, "not a GGUF file: magic is 0x%08x (expected 0x%08x, \"GGUF\")",
			    magic, GGUF_MAGIC);
	if ((rc = read_u32(c, &f->version, "version")))
		return rc;
	if (f->version == 0)
		return fail(c, "version: 0 is not a GGUF version (expected 2 or 3; the header is corrupt)");
	if (f->version == 1)
		return fail(c, "version: GGUF v1 is not supported (expected 2 or 3; convert the file with a current llama.cpp)");
	if (f->version & 0xffff0000u)
		return fail(c, "version: 0x%08x looks byte-swapped; big-endian GGUF files are not supported",
			    f->version);
	if (f->version > 3)
		return fail(c, "version: %u is newer than this reader (expected 2 or 3)",
			    f->version);
	if ((rc = read_u64(c, &f->n_tensors, "tensor count")) ||
	    (rc = read_u64(c, &f->n_kv, "metadata key count")))
		return rc;
	/* a tensor info takes at least 8+1+4+8+4+8 bytes, a key 8+1+4+1 */
	if (f->n_tensors > left(c) / 33)
		return fail(c, "tensor count: %llu tensors cannot fit in a file of %zu bytes (truncated or corrupt file)",
			    (unsigned long long)f->n_tensors, f->size);
	if (f->n_kv > left(c) / 14)
		return fail(c, "metadata key count: %llu keys cannot fit in a file of %zu bytes (truncated or corrupt file)",
			    (unsigned long long)f->n_kv, f->size);
	return 0;
}

static int parse(struct cursor *c)
{
	struct gguf_file *f = c->f;
	uint64_t *rel_off;
	int rc;

	if ((rc = parse_header(c)))
		return rc;
	f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof(*f->kv));
	f->tensors = calloc(f->n_tensors ? f->n_tensors : 1,
			    sizeof(*f->tensors));
	if (!f->kv || !f->tensors)
		return -ENOMEM;
	for (uint64_t i = 0; i < f->n_kv; i++)
		if ((rc = parse_kv(c, &f->kv[i], i)))
			return rc;
	if ((rc = check_unique_keys(c)) || (rc = check_alignment_key(c)))
		return rc;
	rel_off = calloc(f->n_tensors ? f->n_tensors : 1, sizeof(*rel_off));
	if (!rel_off)
		return -ENOMEM;
	for (uint64_t i = 0; i < f->n_tensors && !rc; i++)
		rc = parse_tensor_info(c, &f->tensors[i], i, &rel_off[i]);
	if (!rc)
		rc = place_tensors(c, rel_off);
	free(rel_off);
	return rc;
}

static int open_common(struct gguf_file *f, struct gguf_file **out,
		       char *err, size_t err_len)
{
	struct cursor c = { .f = f, .off = 0, .err = err, .err_len = err_len };
	int rc;

	if (err && err_len)
		err[0] = '\0';
	rc = parse(&c);
	if (rc) {
		if (rc == -ENOMEM && err && err_len)
			snprintf(err, err_len, "%s: out of memory while reading the metadata",
				 f->path);
		gguf_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

int gguf_open_mem(const void *buf, size_t len, const char *name,
		  struct gguf_file **out, char *err, size_t err_len)
{
	struct gguf_file *f = calloc(1, sizeof(*f));

	if (f)
		f->path = strdup(name ? name : "(memory)");
	if (!f || !f->path) {
		free(f);
		if (err && err_len)
			snprintf(err, err_len, "%s: out of memory", name ? name : "(memory)");
		return -ENOMEM;
	}
	f->base = buf;
	f->size = len;
	return open_common(f, out, err, err_len);
}

static int map_file(struct gguf_file *f, char *err, size_t err_len)
{
	struct stat st;
	void *p;
	int fd, rc = 0;

	fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "%s: cannot open: %s", f->path,
			 strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		snprintf(err, err_len, "%s: not a regular file", f->path);
		goto out_close;
	}
	f->size = (size_t)st.st_size;
	if (f->size == 0) {
		rc = -EINVAL;
		snprintf(err, err_len, "%s: not a GGUF file: the file is empty", f->path);
		goto out_close;
	}
	p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		snprintf(err, err_len, "%s: cannot map %zu bytes: %s", f->path,
			 f->size, strerror(errno));
		goto out_close;
	}
	f->base = p;
	f->mapped = 1;
out_close:
	close(fd);
	return rc;
}

int gguf_open(const char *path, struct gguf_file **out, char *err,
	      size_t err_len)
{
	char dummy[1];
	struct gguf_file *f;
	int rc;

	if (!err || !err_len) {
		err = dummy;
		err_len = sizeof(dummy);
	}
	f = calloc(1, sizeof(*f));
	if (f)
		f->path = strdup(path);
	if (!f || !f->path) {
		free(f);
		snprintf(err, err_len, "%s: out of memory", path);
		return -ENOMEM;
	}
	rc = map_file(f, err, err_len);
	if (rc) {
		gguf_close(f);
		return rc;
	}
	return open_common(f, out, err, err_len);
}

void gguf_close(struct gguf_file *f)
{
	if (!f)
		return;
	if (f->kv)
		for (uint64_t i = 0; i < f->n_kv; i++)
			free(f->kv[i].strs);
	free(f->kv);
	free(f->tensors);
	if (f->mapped)
		munmap((void *)f->base, f->size);
	free(f->path);
	free(f);
}

const char *gguf_path(const struct gguf_file *f)
{
	return f->path;
}

uint32_t gguf_version(const struct gguf_file *f)
{
	return f->version;
}

uint64_t gguf_n_keys(const struct gguf_file *f)
{
	return f->n_kv;
}

uint64_t gguf_n_tensors(const struct gguf_file *f)
{
	return f->n_tensors;
}

struct gguf_str gguf_key_name(const struct gguf_file *f, uint64_t i)
{
	return f->kv[i].key;
}

enum gguf_type gguf_key_type(const struct gguf_file *f, uint64_t i)
{
	return f->kv[i].type;
}

int gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);

	return s.len == n && !memcmp(s.ptr, c, n);
}

const char *gguf_str_quote(struct gguf_str s, size_t max_in, char *buf,
			   size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i = 0, n = s.len < max_in ? (size_t)s.len : max_in;

	for (; i < n; i++) {
		unsigned char c = (unsigned char)s.ptr[i];
		int plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
		size_t need = plain ? 1 : c == '"' || c == '\\' ? 2 : 4;

		if (o + need + 1 > cap)
			break;
		if (plain) {
			buf[o++] = (char)c;
		} else if (need == 2) {
			buf[o++] = '\\';
			buf[o++] = (char)c;
		} else {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		}
	}
	if (i < s.len && o + 4 <= cap) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
	return buf;
}

int64_t gguf_find_key(const struct gguf_file *f, const char *key)
{
	for (uint64_t i = 0; i < f->n_kv; i++)
		if (gguf_str_eq(f->kv[i].key, key))
			return (int64_t)i;
	return -1;
}

static const struct gguf_kv *find_kv(const struct gguf_file *f,
				     const char *key)
{
	int64_t i = gguf_find_key(f, key);

	return i < 0 ? NULL : &f->kv[i];
}

/* Read a scalar integer of any width: 0 or -EINVAL when not an integer. */
static int kv_int(const struct gguf_kv *kv, int64_t *v, uint64_t *uv,
		  int *is_unsigned)
{
	const uint8_t *p = kv->data;
	union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16;
		uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; } x;

	*is_unsigned = 0;
	switch (kv->type) {
	case GGUF_UINT8: memcpy(&x.u8, p, 1); *v = x.u8; break;
	case GGUF_INT8: memcpy(&x.i8, p, 1); *v = x.i8; break;
	case GGUF_UINT16: memcpy(&x.u16, p, 2); *v = x.u16; break;
	case GGUF_INT16: memcpy(&x.i16, p, 2); *v = x.i16; break;
	case GGUF_UINT32: memcpy(&x.u32, p, 4); *v = x.u32; break;
	case GGUF_INT32: memcpy(&x.i32, p, 4); *v = x.i32; break;
	case GGUF_INT64: memcpy(&x.i64, p, 8); *v = x.i64; break;
	case GGUF_UINT64:
		memcpy(&x.u64, p, 8);
		*uv = x.u64;
		*is_unsigned = 1;
		return 0;
	default:
		return -EINVAL;
	}
	return 0;
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out)
{
	const struct gguf_kv *kv = find_kv(f, key);
	uint64_t uv = 0;
	int64_t v = 0;
	int is_u;

	if (!kv)
		return -ENOENT;
	if (kv_int(kv, &v, &uv, &is_u))
		return -EINVAL;
	if (is_u) {
		if (uv > INT64_MAX)
			return -EINVAL;
		v = (int64_t)uv;
	}
	*out = v;
	return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
	int64_t v;
	int rc = gguf_get_i64(f, key, &v);

	if (rc)
		return rc;
	if (v < 0 || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
	const struct gguf_kv *kv = find_kv(f, key);
	double d;
	float v;

	if (!kv)
		return -ENOENT;
	if (kv->type == GGUF_FLOAT32) {
		memcpy(&v, kv->data, 4);
		*out = v;
		return 0;
	}
	if (kv->type == GGUF_FLOAT64) {
		memcpy(&d, kv->data, 8);
		*out = (float)d;
		return 0;
	}
	return -EINVAL;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, int *out)
{
	const struct gguf_kv *kv = find_kv(f, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_BOOL)
		return -EINVAL;
	*out = kv->data[0] != 0;
	return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key,
		 struct gguf_str *out)
{
	const struct gguf_kv *kv = find_kv(f, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_STRING)
		return -EINVAL;
	*out = kv->str;
	return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key,
		 enum gguf_type *elem_type, uint64_t *n)
{
	const struct gguf_kv *kv = find_kv(f, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_ARRAY)
		return -EINVAL;
	*elem_type = kv->elem_type;
	*n = kv->n;
	return 0;
}

const void *gguf_get_arr_data(const struct gguf_file *f, const char *key)
{
	const struct gguf_kv *kv = find_kv(f, key);

	if (!kv || kv->type != GGUF_ARRAY || kv->elem_type == GGUF_STRING)
		return NULL;
	return kv->data;
}

int gguf_get_arr_str(const struct gguf_file *f, const char *key, uint64_t i,
		     struct gguf_str *out)
{
	const struct gguf_kv *kv = find_kv(f, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
		return -EINVAL;
	if (i >= kv->n)
		return -ERANGE;
	*out = kv->strs[i];
	return 0;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f,
					 uint64_t i)
{
	return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f,
					   const char *name)
{
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if (gguf_str_eq(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}
