/*
 * test_model.c - the model loader accepts a generated model and refuses
 * inconsistent ones with a message naming the file, the key or tensor, and
 * what was expected.  Broken models are made by patching a valid file in
 * place (same-length edits, so the GGUF structure stays valid and only the
 * model's meaning breaks).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/model.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"

static void *model_buf;
static size_t model_len;

/* Write the valid model with `from` replaced by `to` (same length) at its
 * n-th occurrence (1-based), or after the key `from` when as_value. */
static int write_patched(const char *path, const char *from, const void *to,
			 size_t to_len, int nth)
{
	size_t n = strlen(from);
	unsigned char *b = malloc(model_len);
	FILE *f;
	int seen = 0, rc = -1;

	memcpy(b, model_buf, model_len);
	for (size_t i = 0; from[0] && i + n <= model_len; i++) {
		if (memcmp(b + i, from, n) || ++seen != nth)
			continue;
		memcpy(b + i, to, to_len);
		rc = 0;
		break;
	}
	f = fopen(path, "wb");
	if (!f || fwrite(b, 1, model_len, f) != model_len)
		rc = -1;
	if (f)
		fclose(f);
	free(b);
	return rc;
}

/* Patch the u32 value that follows key `key` (its 8-byte length, the
 * name, then the 4-byte type). */
static int write_patched_u32(const char *path, const char *key, uint32_t v)
{
	size_t n = strlen(key);
	unsigned char *b = model_buf;

	for (size_t i = 0; i + n + 8 <= model_len; i++)
		if (!memcmp(b + i, key, n) && b[i + n] == 4 /* UINT32 */) {
			unsigned char *copy = malloc(model_len);
			FILE *f = fopen(path, "wb");
			int ok;

			memcpy(copy, b, model_len);
			memcpy(copy + i + n + 4, &v, 4);
			ok = f && fwrite(copy, 1, model_len, f) == model_len;
			if (f)
				fclose(f);
			free(copy);
			return ok ? 0 : -1;
		}
	return -1;
}

static void expect_refused(const char *path, const char *needle,
			   const char *what)
{
	struct pg_model *m = NULL;
	char err[1024];
	int rc = pg_model_load(path, 0, &m, err, sizeof(err));

	CHECK(rc == -EINVAL, "%s: rc %d (%s)", what, rc, rc ? err : "loaded");
	if (rc) {
		CHECK(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'",
		      what, err, needle);
		CHECK(strstr(err, path) == err, "%s: message '%s' does not start with the file",
		      what, err);
	}
	pg_model_free(m);
}

static void test_valid(const char *path)
{
	struct pg_model *m = NULL;
	char err[1024];

	CHECK(pg_model_load(path, 0, &m, err, sizeof(err)) == 0, "valid: %s", err);
	if (!m)
		return;
	CHECK(m->hp.n_blocks == 2 && m->hp.n_embd == 64 && m->hp.n_heads == 4 &&
	      m->hp.n_kv_heads == 2 && m->hp.head_dim == 16 && m->hp.n_ff == 128 &&
	      m->hp.n_vocab == 384 && m->tied_output && m->blocks[1].bq == NULL,
	      "hyper-parameters");
	CHECK(m->blocks[0].wq.type == PG_Q8_0 && m->blocks[0].wq.n_rows == 64 &&
	      m->blocks[0].w_down.n_cols == 128, "matrices");
	pg_model_free(m);
	m = NULL;
	CHECK(pg_model_load(path, 1, &m, err, sizeof(err)) == 0 && m && !m->blocks,
	      "vocab-only load");
	pg_model_free(m);
}

int main(void)
{
	char path[] = "/tmp/pagoda-test-model-XXXXXX";
	struct ggufgen_opts o;
	char err[512];
	int fd = mkstemp(path);

	close(fd);
	ggufgen_preset(&o, "tiny");
	o.type = PG_Q8_0;
	o.embd_type = PG_Q8_0;
	if (ggufgen_write_mem(&o, &model_buf, &model_len, err, sizeof(err))) {
		fprintf(stderr, "ggufgen: %s\n", err);
		return 1;
	}
	write_patched(path, "", "", 0, 1);
	test_valid(path);

	write_patched(path, "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight", 19, 1);
	expect_refused(path, "tensor blk.1.ffn_up.weight is missing", "missing tensor");
	write_patched_u32(path, "llama.feed_forward_length", 96);
	expect_refused(path, "blk.0.ffn_gate.weight has shape [64, 128, 1, 1] (expected [64, 96])",
		       "shape disagrees");
	write_patched_u32(path, "llama.attention.head_count_kv", 3);
	expect_refused(path, "head_count 4 is not a multiple of head_count_kv 3",
		       "bad head counts");
	write_patched_u32(path, "llama.attention.head_count", 5);
	expect_refused(path, "is not a multiple of llama.attention.head_count 5", "heads do not divide hidden");
	write_patched_u32(path, "llama.block_count", 0);
	expect_refused(path, "llama.block_count: expected an integer in 1..4096",
		       "zero blocks");
	write_patched(path, "llama", "gemma", 5, 1);
	expect_refused(path, "\"gemma\", which pagoda does not support", "architecture");
	write_patched(path, "token_embd.weight", "token_embd.wEight", 17, 1);
	expect_refused(path, "token_embd.weight is missing", "no embedding");

	unlink(path);
	free(model_buf);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	else
		printf("test_model: all checks passed\n");
	return failures ? 1 : 0;
}
