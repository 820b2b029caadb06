/*
 * test_gguf.c - the GGUF reader accepts a well-formed file and refuses each
 * kind of malformed one with a message naming the field; every truncation
 * of a valid file is refused without reading out of bounds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "tests/check.h"
#include "tests/gguf_build.h"

/* What a case may change in the otherwise valid file. */
struct spec {
	uint32_t version;
	uint64_t n_tensors;	/* claimed count */
	uint64_t n_kv;		/* claimed count */
	uint32_t b_type;	/* type of tensor "b" */
	uint32_t b_dims;
	uint64_t b_ne0;
	uint64_t b_off;
	const char *b_name;
	uint32_t alignment;
	uint32_t value_type;	/* type of the "x.count" key */
	int nested_array;
};

static struct spec valid_spec(void)
{
	return (struct spec){
		.version = 3, .n_tensors = 2, .n_kv = 4, .b_type = 8,
		.b_dims = 2, .b_ne0 = 32, .b_off = 128, .b_name = "b",
		.alignment = 32, .value_type = 4,
	};
}

static void build(struct gb *b, const struct spec *s)
{
	static const char *const words[] = { "alpha", "beta", "", "δέλτα" };
	uint64_t ne_a[1] = { 32 }, ne_b[5] = { s->b_ne0, 2, 1, 1, 1 };
	uint8_t data[128 + 68];

	gb_header(b, s->version, s->n_tensors, s->n_kv);
	gb_kv_str(b, "general.architecture", "llama");
	gb_kv_u32(b, "general.alignment", s->alignment);
	gb_kv_strs(b, "x.words", words, 4);
	gb_str(b, "x.count");
	gb_u32(b, s->value_type);
	if (s->nested_array) {
		gb_u32(b, 9);
		gb_u64(b, 0);
	} else {
		gb_u32(b, 7);
	}
	gb_tensor(b, "a", 1, ne_a, 0, 0);
	gb_tensor(b, s->b_name, s->b_dims, ne_b, s->b_type, s->b_off);
	gb_align(b, 32);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	gb_bytes(b, data, sizeof(data));
}

/* Open a built buffer; expect rc, and (on failure) `needle` in the message. */
static void expect(const struct spec *s, int want_rc, const char *needle,
		   const char *what)
{
	struct gguf_file *f = NULL;
	struct gb b = { 0 };
	char err[512];
	int rc;

	build(&b, s);
	rc = gguf_open_mem(b.buf, b.len, "case.gguf", &f, err, sizeof(err));
	CHECK(rc == want_rc, "%s: rc %d, expected %d (%s)", what, rc, want_rc,
	      rc ? err : "ok");
	if (rc && needle) {
		CHECK(strstr(err, needle) != NULL,
		      "%s: message '%s' lacks '%s'", what, err, needle);
		CHECK(strncmp(err, "case.gguf: ", 11) == 0,
		      "%s: message '%s' does not name the file", what, err);
	}
	gguf_close(f);
	gb_free(&b);
}

static void test_valid(void)
{
	struct spec s = valid_spec();
	struct gguf_file *f = NULL;
	const struct gguf_tensor *t;
	struct gguf_str str;
	enum gguf_type et;
	struct gb b = { 0 };
	char err[512];
	uint64_t n;
	uint32_t u;
	int flag;

	build(&b, &s);
	CHECK(gguf_open_mem(b.buf, b.len, "valid", &f, err, sizeof(err)) == 0,
	      "valid file refused: %s", err);
	if (!f)
		return;
	CHECK(gguf_version(f) == 3 && gguf_n_keys(f) == 4 && gguf_n_tensors(f) == 2,
	      "counts");
	CHECK(gguf_get_str(f, "general.architecture", &str) == 0 &&
	      gguf_str_eq(str, "llama"), "architecture");
	CHECK(gguf_get_u32(f, "general.alignment", &u) == 0 && u == 32, "alignment");
	CHECK(gguf_get_u32(f, "general.architecture", &u) == -EINVAL, "type mismatch");
	CHECK(gguf_get_u32(f, "nope", &u) == -ENOENT, "missing key");
	CHECK(gguf_get_bool(f, "x.count", &flag) == -EINVAL, "u32 is not bool");
	CHECK(gguf_get_arr(f, "x.words", &et, &n) == 0 && et == GGUF_STRING && n == 4,
	      "array");
	CHECK(gguf_get_arr_str(f, "x.words", 3, &str) == 0 &&
	      gguf_str_eq(str, "δέλτα"), "array string");
	CHECK(gguf_get_arr_str(f, "x.words", 4, &str) == -ERANGE, "array bound");
	CHECK(gguf_get_arr_data(f, "x.words") == NULL, "no raw data for strings");
	t = gguf_find_tensor(f, "b");
	CHECK(t && t->type == PG_Q8_0 && t->ne[0] == 32 && t->ne[1] == 2 &&
	      t->n_bytes == 68 && ((const uint8_t *)t->data)[0] == (uint8_t)(128 * 7),
	      "tensor b");
	CHECK(gguf_find_tensor(f, "c") == NULL, "absent tensor");
	gguf_close(f);
	gb_free(&b);
}

/* Every proper prefix of a valid file is refused cleanly. */
static void test_truncations(void)
{
	struct spec s = valid_spec();
	struct gb b = { 0 };
	char err[512];

	build(&b, &s);
	for (size_t len = 0; len < b.len; len++) {
		struct gguf_file *f = NULL;
		uint8_t *copy = malloc(len ? len : 1);
		int rc;

		memcpy(copy, b.buf, len);
		rc = gguf_open_mem(copy, len, "cut", &f, err, sizeof(err));
		CHECK(rc == -EINVAL, "prefix of %zu bytes: rc %d", len, rc);
		gguf_close(f);
		free(copy);
	}
	gb_free(&b);
}

static void test_broken(void)
{
	struct spec s;

#define CASE(field, value, rc, needle) do { s = valid_spec(); s.field = value; \
	expect(&s, rc, needle, #field " = " #value); } while (0)
	CASE(version, 0, -EINVAL, "0 is not a GGUF version");
	CASE(version, 2, 0, NULL);
	CASE(version, 1, -EINVAL, "v1 is not supported");
	CASE(version, 0x03000000, -EINVAL, "big-endian");
	CASE(version, 7, -EINVAL, "newer");
	CASE(n_tensors, 1ull << 40, -EINVAL, "tensor count");
	CASE(n_kv, 1ull << 60, -EINVAL, "metadata key count");
	CASE(n_kv, 5, -EINVAL, "");
	CASE(b_type, 16, -EINVAL, "type IQ2_XXS (16) is not supported");
	CASE(b_type, 15, -EINVAL, "type Q8_K (15) is not supported");
	CASE(b_type, 14, -EINVAL, "not a multiple of the Q6_K block of 256");
	CASE(b_type, 6, 0, NULL);		/* Q5_0: 2 rows of 22 bytes */
	CASE(b_type, 99, -EINVAL, "type unknown (99)");
	CASE(b_dims, 5, -EINVAL, "5 dimensions");
	CASE(b_ne0, 0, -EINVAL, "dimension 0 is 0");
	CASE(b_ne0, 48, -EINVAL, "not a multiple of the Q8_0 block of 32");
	CASE(b_ne0, 1ull << 41, -EINVAL, "dimension 0");
	CASE(b_off, 100, -EINVAL, "not a multiple of the alignment");
	CASE(b_off, 0, -EINVAL, "overlap");
	CASE(b_off, 4096, -EINVAL, "run past the end");
	CASE(b_name, "a", -EINVAL, "appears twice");
	CASE(b_name, "", -EINVAL, "name of 0 bytes");
	CASE(alignment, 3, -EINVAL, "general.alignment");
	CASE(value_type, 13, -EINVAL, "unknown value type 13");
	CASE(nested_array, 1, -EINVAL, "");
#undef CASE
	s = valid_spec();
	s.value_type = 9;
	s.nested_array = 1;
	expect(&s, -EINVAL, "arrays of arrays", "nested array");
}

static void test_files(void)
{
	char path[] = "/tmp/pagoda-test-gguf-XXXXXX";
	struct gguf_file *f = NULL;
	char err[512];
	int fd = mkstemp(path);

	CHECK(fd >= 0, "mkstemp");
	if (fd < 0)
		return;
	CHECK(gguf_open(path, &f, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "empty"), "empty file: %s", err);
	CHECK(write(fd, "GGUF\3\0\0\0", 8) == 8, "write");
	CHECK(gguf_open(path, &f, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "truncated"), "short file: %s", err);
	close(fd);
	unlink(path);
	CHECK(gguf_open(path, &f, err, sizeof(err)) == -ENOENT &&
	      strstr(err, "cannot open"), "absent file: %s", err);
	CHECK(gguf_open("/tmp", &f, err, sizeof(err)) < 0, "directory");
}

int main(void)
{
	test_valid();
	test_truncations();
	test_broken();
	test_files();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	else
		printf("test_gguf: all checks passed\n");
	return failures ? 1 : 0;
}
