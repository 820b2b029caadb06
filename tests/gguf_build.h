/*
 * gguf_build.h - a byte-level GGUF writer for tests: lets a test build a
 * valid file in memory, or a deliberately broken one, field by field.
 *
 * Header-only (static functions) so each test links what it uses.  Not a
 * general writer: tests/gen/ has the model generator.
 */
#ifndef PAGODA_TESTS_GGUF_BUILD_H
#define PAGODA_TESTS_GGUF_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct gb {
	uint8_t *buf;
	size_t len;
	size_t cap;
};

static void gb_bytes(struct gb *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n)
			cap *= 2;
		b->buf = realloc(b->buf, cap);
		if (!b->buf)
			abort();
		b->cap = cap;
	}
	memcpy(b->buf + b->len, p, n);
	b->len += n;
}

static inline void gb_u32(struct gb *b, uint32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_u64(struct gb *b, uint64_t v) { gb_bytes(b, &v, 8); }
static inline void gb_f32(struct gb *b, float v) { gb_bytes(b, &v, 4); }

/* A string of n bytes (it may hold NULs). */
static inline void gb_strn(struct gb *b, const char *s, size_t n)
{
	gb_u64(b, n);
	gb_bytes(b, s, n);
}

static inline void gb_str(struct gb *b, const char *s)
{
	gb_strn(b, s, strlen(s));
}

/* "GGUF", version, tensor count, key count. */
static inline void gb_header(struct gb *b, uint32_t version, uint64_t n_tensors,
			     uint64_t n_kv)
{
	gb_bytes(b, "GGUF", 4);
	gb_u32(b, version);
	gb_u64(b, n_tensors);
	gb_u64(b, n_kv);
}

static inline void gb_kv_u32(struct gb *b, const char *key, uint32_t v)
{
	gb_str(b, key);
	gb_u32(b, 4);
	gb_u32(b, v);
}

static inline void gb_kv_f32(struct gb *b, const char *key, float v)
{
	gb_str(b, key);
	gb_u32(b, 6);
	gb_f32(b, v);
}

static inline void gb_kv_str(struct gb *b, const char *key, const char *v)
{
	gb_str(b, key);
	gb_u32(b, 8);
	gb_str(b, v);
}

/* An array of n strings. */
/* A string value of n bytes (it may hold NULs). */
static inline void gb_kv_strn(struct gb *b, const char *key, const char *v,
			      size_t n)
{
	gb_str(b, key);
	gb_u32(b, 8);
	gb_strn(b, v, n);
}

static inline void gb_kv_strs(struct gb *b, const char *key,
			      const char *const *v, uint64_t n)
{
	gb_str(b, key);
	gb_u32(b, 9);
	gb_u32(b, 8);
	gb_u64(b, n);
	for (uint64_t i = 0; i < n; i++)
		gb_str(b, v[i]);
}

/* An array of n int32 values. */
static inline void gb_kv_i32s(struct gb *b, const char *key, const int32_t *v,
			      uint64_t n)
{
	gb_str(b, key);
	gb_u32(b, 9);
	gb_u32(b, 5);
	gb_u64(b, n);
	gb_bytes(b, v, 4 * n);
}

/* An array of n float32 values. */
static inline void gb_kv_f32s(struct gb *b, const char *key, const float *v,
			      uint64_t n)
{
	gb_str(b, key);
	gb_u32(b, 9);
	gb_u32(b, 6);
	gb_u64(b, n);
	gb_bytes(b, v, 4 * n);
}

/* A tensor info: name, dims, type, offset in the data section. */
static inline void gb_tensor(struct gb *b, const char *name, uint32_t n_dims,
			     const uint64_t *ne, uint32_t type, uint64_t off)
{
	gb_str(b, name);
	gb_u32(b, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		gb_u64(b, ne[i]);
	gb_u32(b, type);
	gb_u64(b, off);
}

/* Pad with zeros to a multiple of align (the start of the data section). */
static inline void gb_align(struct gb *b, size_t align)
{
	static const uint8_t zero[64];

	while (b->len % align)
		gb_bytes(b, zero, 1);
}

static inline void gb_free(struct gb *b)
{
	free(b->buf);
	*b = (struct gb){ 0 };
}

#endif
