/*
 * test_model.c - the model loader accepts a generated model and refuses
 * inconsistent ones with a message naming the file, the key or tensor, and
 * what was expected.  Broken models are made by patching a valid file in
 * place (same-length edits, so the GGUF structure stays valid and only the
 * model's meaning breaks).  Vocabularies of nonsensical shapes are built
 * field by field (tests/gguf_build.h) and loaded vocab-only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"
#include "tests/gguf_build.h"

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

/* What a vocabulary case changes in an otherwise valid SentencePiece one. */
struct vocab_spec {
	int n_tokens;		/* written to tokenizer.ggml.tokens */
	int n_types, n_scores;	/* array lengths (-1: n_tokens) */
	int32_t type3;		/* the type of token 3 */
	int64_t bos;		/* tokenizer.ggml.bos_token_id, -1: absent */
	const char *arch;	/* general.architecture, arch_len bytes */
	size_t arch_len;
	int64_t file_type;	/* general.file_type, -1: absent */
};

static struct vocab_spec vocab_valid(void)
{
	return (struct vocab_spec){ .n_tokens = 6, .n_types = -1,
				    .n_scores = -1, .type3 = 1, .bos = 1,
				    .arch = "llama", .arch_len = 5,
				    .file_type = 7 };
}

/* Write a vocabulary-only GGUF file of spec v to path. */
static void write_vocab(const char *path, const struct vocab_spec *v)
{
	static const char *const toks[] = { "<unk>", "<s>", "</s>", "a", "b",
					    "\xe2\x96\x81", "c", "d" };
	int32_t types[8] = { 2, 3, 3, v->type3, 1, 1, 1, 1 };
	float scores[8] = { 0, 0, 0, -1, -2, -3, -4, -5 };
	int n_ty = v->n_types < 0 ? v->n_tokens : v->n_types;
	int n_sc = v->n_scores < 0 ? v->n_tokens : v->n_scores;
	struct gb b = { 0 };
	FILE *f;

	gb_header(&b, 3, 0, 5 + (v->bos >= 0) + (v->file_type >= 0));
	gb_kv_strn(&b, "general.architecture", v->arch, v->arch_len);
	if (v->file_type >= 0)
		gb_kv_u32(&b, "general.file_type", (uint32_t)v->file_type);
	gb_kv_str(&b, "tokenizer.ggml.model", "llama");
	gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, (uint64_t)v->n_tokens);
	gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, (uint64_t)n_ty);
	gb_kv_f32s(&b, "tokenizer.ggml.scores", scores, (uint64_t)n_sc);
	if (v->bos >= 0)
		gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
	gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
	f = fopen(path, "wb");
	CHECK(f && fwrite(b.buf, 1, b.len, f) == b.len, "write %s", path);
	if (f)
		fclose(f);
	gb_free(&b);
}

static void vocab_refused(const char *path, const struct vocab_spec *v,
			  const char *needle, const char *what)
{
	struct pg_model *m = NULL;
	char err[1024];
	int rc;

	write_vocab(path, v);
	rc = pg_model_load(path, 1, &m, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, needle) && strstr(err, path) == err,
	      "%s: rc %d, message '%s' (want '%s')", what, rc, rc ? err : "loaded",
	      needle);
	pg_model_free(m);
}

static void test_vocab_shapes(const char *path)
{
	struct vocab_spec v = vocab_valid();
	struct pg_model *m = NULL;
	char err[1024];

	write_vocab(path, &v);
	CHECK(pg_model_load(path, 1, &m, err, sizeof(err)) == 0, "valid vocabulary: %s", err);
	pg_model_free(m);
	m = NULL;
	v.bos = -1;	/* absent: SentencePiece's default, 1 */
	write_vocab(path, &v);
	CHECK(pg_model_load(path, 1, &m, err, sizeof(err)) == 0 &&
	      pg_tokenizer_bos(m->tok) == 1, "no bos_token_id key: %s", err);
	pg_model_free(m);

#define VCASE(field, value, needle) do { v = vocab_valid(); v.field = value; \
	vocab_refused(path, &v, needle, #field " = " #value); } while (0)
	VCASE(bos, 6, "tokenizer.ggml.bos_token_id: id 6 is outside the vocabulary of 6 tokens");
	VCASE(bos, 4000000000ll, "tokenizer.ggml.bos_token_id: id 4000000000 is outside");
	VCASE(n_tokens, 0, "tokenizer.ggml.tokens: 0 tokens");
	VCASE(n_types, 5, "tokenizer.ggml.token_type: expected 6 int32 values");
	VCASE(n_types, 7, "tokenizer.ggml.token_type: expected 6 int32 values");
	VCASE(n_scores, 8, "tokenizer.ggml.scores: expected 6 float32 values");
	VCASE(type3, 7, "token 3 has type 7");
	VCASE(type3, -1, "token 3 has type -1");
	VCASE(file_type, 0xdeadbeefll, "general.file_type is 3735928559, which is no llama.cpp file type");
#undef VCASE
	/* a NUL inside the architecture is shown, not taken for its end */
	v = vocab_valid();
	v.arch = "llama\0evil";
	v.arch_len = 10;
	write_vocab(path, &v);
	CHECK(pg_model_load(path, 1, &m, err, sizeof(err)) == 0,
	      "vocab-only ignores the architecture: %s", err);
	pg_model_free(m);
	m = NULL;
	{
		struct gguf_str s = { "llama\0evil\"\n", 12 };
		char q[64];

		CHECK(!strcmp(gguf_str_quote(s, 64, q, sizeof(q)),
			      "llama\\x00evil\\\"\\x0a"),
		      "quoted: %s", q);
		CHECK(!strcmp(gguf_str_quote(s, 5, q, sizeof(q)), "llama..."),
		      "cut: %s", q);
		CHECK(!strcmp(gguf_str_quote(s, 64, q, 8), "llama"),
		      "small buffer: %s", q);
	}
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
	write_patched(path, "llama", "mamba", 5, 1);
	expect_refused(path, "\"mamba\", which pagoda does not support", "architecture");
	write_patched(path, "token_embd.weight", "token_embd.wEight", 17, 1);
	expect_refused(path, "token_embd.weight is missing", "no embedding");
	write_patched(path, "llama", "ll\0ma", 5, 1);
	expect_refused(path, "general.architecture is \"ll\\x00ma\"", "NUL in the architecture");
	write_patched_u32(path, "tokenizer.ggml.bos_token_id", 384);
	expect_refused(path, "tokenizer.ggml.bos_token_id: id 384 is outside the vocabulary of 384 tokens",
		       "BOS past the vocabulary");
	write_patched_u32(path, "tokenizer.ggml.eos_token_id", 1000);
	expect_refused(path, "tokenizer.ggml.eos_token_id: id 1000 is outside", "EOS past the vocabulary");
	write_patched_u32(path, "general.file_type", 4096);
	expect_refused(path, "general.file_type is 4096", "file type");
	test_vocab_shapes(path);

	unlink(path);
	free(model_buf);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	else
		printf("test_model: all checks passed\n");
	return failures ? 1 : 0;
}
