/*
 * test_tokenizer.c - the tokenizer against llama.cpp's output on SmolLM2
 * (tests/data/tokenizer-smollm2.txt, made by tests/ref/gen-tokenizer-ref.py),
 * round trips, streaming decode, bad input, threads, speed; and the
 * SentencePiece and other BPE paths on small vocabularies built here as
 * GGUF files in memory.
 *
 * Exits 0 (pass), 1 (fail) or 77 (skip: the SmolLM2 GGUF is absent; the
 * in-memory vocabularies are still tested first).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"
#include "tests/check.h"
#include "tests/vocab_util.h"

/* ---- helpers ---- */

static int32_t *tokenize(const struct pg_tokenizer *t, const char *s,
			 size_t n, int add_bos, int special, int64_t *n_out)
{
	int64_t k = pg_tokenize(t, s, n, add_bos, special, NULL, 0);
	int32_t *ids;

	if (k < 0) {
		*n_out = k;
		return NULL;
	}
	ids = malloc((size_t)(k ? k : 1) * sizeof(*ids));
	if (!ids)
		abort();
	*n_out = pg_tokenize(t, s, n, add_bos, special, ids, k);
	return ids;
}

/* detokenize - concatenated pieces (special ones included), malloc'd. */
static char *detokenize(const struct pg_tokenizer *t, const int32_t *ids,
			int64_t n, size_t *len)
{
	size_t cap = 64, o = 0;
	char *s = malloc(cap);

	for (int64_t i = 0; i < n; i++) {
		int k = pg_token_to_piece(t, ids[i], 1, NULL, 0);

		if (k < 0)
			abort();
		while (o + (size_t)k + 1 > cap)
			s = realloc(s, cap *= 2);
		pg_token_to_piece(t, ids[i], 1, s + o, (size_t)k);
		o += (size_t)k;
	}
	s[o] = 0;
	*len = o;
	return s;
}

static int same_ids(const int32_t *a, int64_t na, const int32_t *b,
		    int64_t nb)
{
	return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof(*a)));
}

static void print_ids(const char *what, const int32_t *ids, int64_t n)
{
	fprintf(stderr, "  %s (%lld):", what, (long long)n);
	for (int64_t i = 0; i < n && i < 40; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* ---- a GGUF file written in memory ---- */

struct gbuf {
	unsigned char *p;
	size_t len, cap;
	uint64_t n_kv;
};

static void gb_put(struct gbuf *b, const void *s, size_t n)
{
	while (b->len + n > b->cap)
		b->p = realloc(b->p, b->cap = b->cap ? 2 * b->cap : 4096);
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void gb_u32(struct gbuf *b, uint32_t v)
{
	gb_put(b, &v, 4);
}

static void gb_u64(struct gbuf *b, uint64_t v)
{
	gb_put(b, &v, 8);
}

static void gb_str(struct gbuf *b, const char *s)
{
	gb_u64(b, strlen(s));
	gb_put(b, s, strlen(s));
}

static void kv_str(struct gbuf *b, const char *k, const char *v)
{
	gb_str(b, k);
	gb_u32(b, GGUF_STRING);
	gb_str(b, v);
	b->n_kv++;
}

static void kv_u32(struct gbuf *b, const char *k, uint32_t v)
{
	gb_str(b, k);
	gb_u32(b, GGUF_UINT32);
	gb_u32(b, v);
	b->n_kv++;
}

static void kv_bool(struct gbuf *b, const char *k, int v)
{
	unsigned char c = (unsigned char)v;

	gb_str(b, k);
	gb_u32(b, GGUF_BOOL);
	gb_put(b, &c, 1);
	b->n_kv++;
}

static void kv_strs(struct gbuf *b, const char *k, const char *const *v,
		    size_t n)
{
	gb_str(b, k);
	gb_u32(b, GGUF_ARRAY);
	gb_u32(b, GGUF_STRING);
	gb_u64(b, n);
	for (size_t i = 0; i < n; i++)
		gb_str(b, v[i]);
	b->n_kv++;
}

static void kv_arr32(struct gbuf *b, const char *k, enum gguf_type type,
		     const void *v, size_t n)
{
	gb_str(b, k);
	gb_u32(b, GGUF_ARRAY);
	gb_u32(b, type);
	gb_u64(b, n);
	gb_put(b, v, 4 * n);
	b->n_kv++;
}

/* gguf_finish - header in front of the key/values written so far. */
static struct gbuf gguf_finish(struct gbuf *kv)
{
	struct gbuf f = { 0 };

	gb_put(&f, "GGUF", 4);
	gb_u32(&f, 3);
	gb_u64(&f, 0);
	gb_u64(&f, kv->n_kv);
	gb_put(&f, kv->p, kv->len);
	while (f.len % 32)
		gb_put(&f, "", 1);
	free(kv->p);
	return f;
}

static struct pg_tokenizer *load_mem(struct gbuf *f, const char *name)
{
	struct gguf_file *g;
	struct pg_tokenizer *t = NULL;
	char err[256];
	int rc = gguf_open_mem(f->p, f->len, name, &g, err, sizeof(err));

	CHECK(rc == 0, "%s: gguf_open_mem: %s", name, err);
	if (rc)
		return NULL;
	rc = pg_tokenizer_load(g, &t, err, sizeof(err));
	CHECK(rc == 0, "%s: load: %s", name, err);
	gguf_close(g);
	return t;
}

/* ---- SentencePiece on a small vocabulary ---- */

#define SPM_N (3 + 256 + 19)

static struct pg_tokenizer *spm_vocab(int space_prefix)
{
	static char bytes[256][8];
	static const char *const words[] = {
		"\xe2\x96\x81", "h", "e", "l", "o", "w", "r", "d",
		"ll", "he", "or", "hell", "hello", "\xe2\x96\x81hello", "wor",
		"ld", "world", "\xe2\x96\x81world", "\xe2\x96\x81h",
	};
	static const float wscore[] = {
		-20, -20, -20, -20, -20, -20, -20, -20,
		-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -30,
	};
	const char *tok[SPM_N];
	float score[SPM_N] = { 0 };
	int32_t type[SPM_N];
	struct gbuf kv = { 0 }, f;
	struct pg_tokenizer *t;

	tok[0] = "<unk>", type[0] = 2;
	tok[1] = "<s>", type[1] = 3;
	tok[2] = "</s>", type[2] = 3;
	for (int i = 0; i < 256; i++) {
		snprintf(bytes[i], sizeof(bytes[i]), "<0x%02X>", i);
		tok[3 + i] = bytes[i];
		type[3 + i] = 6;
	}
	for (int i = 0; i < 19; i++) {
		tok[259 + i] = words[i];
		score[259 + i] = wscore[i];
		type[259 + i] = 1;
	}
	kv_str(&kv, "tokenizer.ggml.model", "llama");
	kv_strs(&kv, "tokenizer.ggml.tokens", tok, SPM_N);
	kv_arr32(&kv, "tokenizer.ggml.scores", GGUF_FLOAT32, score, SPM_N);
	kv_arr32(&kv, "tokenizer.ggml.token_type", GGUF_INT32, type, SPM_N);
	kv_u32(&kv, "tokenizer.ggml.bos_token_id", 1);
	kv_u32(&kv, "tokenizer.ggml.eos_token_id", 2);
	kv_bool(&kv, "tokenizer.ggml.add_space_prefix", space_prefix);
	f = gguf_finish(&kv);
	t = load_mem(&f, "spm-mem");
	free(f.p);
	return t;
}

/* Token id of vocabulary word i of spm_vocab(). */
#define W(i) (259 + (i))
#define B(c) (3 + (c))

static void expect(const struct pg_tokenizer *t, const char *text,
		   int add_bos, int special, const int32_t *want, int64_t n)
{
	int64_t k;
	int32_t *ids = tokenize(t, text, strlen(text), add_bos, special, &k);

	if (!same_ids(ids, k, want, n)) {
		CHECK(0, "tokenize '%s' (bos %d, special %d)", text, add_bos,
		      special);
		print_ids("got", ids, k);
		print_ids("want", want, n);
	}
	free(ids);
}

static void test_spm(void)
{
	struct pg_tokenizer *t = spm_vocab(1), *t2;
	size_t len;
	char *s;

	if (!t)
		return;
	expect(t, "hello world", 1, 0,
	       (int32_t[]){ 1, W(13), W(17) }, 3);
	expect(t, "hello world", 0, 0, (int32_t[]){ W(13), W(17) }, 2);
	/* equal scores: the leftmost pair first */
	expect(t, "lll", 0, 0, (int32_t[]){ W(0), W(8), W(3) }, 3);
	/* byte fallback, a space prefix after a special token */
	expect(t, "hi\xe2\x82\xac", 0, 0,
	       (int32_t[]){ W(18), B('i'), B(0xe2), B(0x82), B(0xac) }, 5);
	expect(t, "<s>hello", 1, 1, (int32_t[]){ 1, 1, W(13) }, 3);
	expect(t, "<s>hello", 1, 0,
	       (int32_t[]){ 1, W(0), B('<'), B('s'), B('>'), W(12) }, 6);
	expect(t, "", 1, 0, (int32_t[]){ 1 }, 1);
	expect(t, "", 0, 0, NULL, 0);
	/* invalid UTF-8 goes byte by byte */
	expect(t, "\xff\xc3", 0, 0, (int32_t[]){ W(0), B(0xff), B(0xc3) }, 3);

	{
		int32_t ids[] = { 1, W(13), W(17), B(0xe2), B(0x82), B(0xac), 2 };

		s = detokenize(t, ids, 7, &len);
		CHECK(!strcmp(s, "<s> hello world\xe2\x82\xac</s>"),
		      "spm detokenize: '%s'", s);
		free(s);
	}
	CHECK(pg_tokenizer_bos(t) == 1 && pg_tokenizer_eos(t) == 2 &&
	      pg_tokenizer_add_bos(t) == 1, "spm special ids");
	CHECK(pg_tokenizer_is_eog(t, 2) && !pg_tokenizer_is_eog(t, 1),
	      "spm eog");
	CHECK(pg_token_to_piece(t, 1, 0, NULL, 0) == 0, "control hidden");
	pg_tokenizer_free(t);

	t2 = spm_vocab(0);
	if (t2)
		expect(t2, "hello world", 0, 0,
		       (int32_t[]){ W(12), W(17) }, 2);
	pg_tokenizer_free(t2);
}

/* ---- byte-level BPE on a small vocabulary, every pre-tokenizer ---- */

/* The GPT-2 symbol of byte b, UTF-8. */
static void gpt2_symbol(int b, char *out)
{
	int n = 0, cp = -1;

	for (int c = 0; c < 256; c++) {
		int printable = (c >= 0x21 && c <= 0x7e) ||
				(c >= 0xa1 && c <= 0xac) || c >= 0xae;
		int v = printable ? c : 256 + n++;

		if (c == b)
			cp = v;
	}
	if (cp < 0x80) {
		out[0] = (char)cp, out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

static struct pg_tokenizer *bpe_vocab(const char *pre)
{
	static char sym[256][4];
	static const char *const extra[] = {
		"<|endoftext|>", "<|user|>", "\xc4\xa0w", "or", "ld",
		"\xc4\xa0wor", "\xc4\xa0world", "12", "123", "ab",
	};
	static const char *const merges[] = {
		"\xc4\xa0 w", "o r", "l d", "\xc4\xa0w or", "\xc4\xa0wor ld",
		"1 2", "12 3", "a b",
	};
	const char *tok[256 + 10];
	int32_t type[256 + 10];
	struct gbuf kv = { 0 }, f;
	struct pg_tokenizer *t;

	for (int b = 0; b < 256; b++) {
		gpt2_symbol(b, sym[b]);
		tok[b] = sym[b];
		type[b] = 1;
	}
	for (int i = 0; i < 10; i++) {
		tok[256 + i] = extra[i];
		type[256 + i] = i == 0 ? 3 : i == 1 ? 4 : 1;
	}
	kv_str(&kv, "tokenizer.ggml.model", "gpt2");
	kv_str(&kv, "tokenizer.ggml.pre", pre);
	kv_strs(&kv, "tokenizer.ggml.tokens", tok, 266);
	kv_arr32(&kv, "tokenizer.ggml.token_type", GGUF_INT32, type, 266);
	kv_strs(&kv, "tokenizer.ggml.merges", merges, 8);
	kv_u32(&kv, "tokenizer.ggml.bos_token_id", 256);
	kv_u32(&kv, "tokenizer.ggml.eos_token_id", 256);
	f = gguf_finish(&kv);
	t = load_mem(&f, pre);
	free(f.p);
	return t;
}

static void roundtrip(const struct pg_tokenizer *t, const char *what,
		      const char *s, size_t n, int special)
{
	int64_t k;
	int32_t *ids = tokenize(t, s, n, 0, special, &k);
	size_t len = 0;
	char *d = ids ? detokenize(t, ids, k, &len) : NULL;

	CHECK(d && len == n && !memcmp(d, s, n),
	      "%s: round trip of %zu bytes gave %zu", what, n, len);
	free(ids);
	free(d);
}

static void test_small_bpe(void)
{
	static const char *const pres[] = {
		"default", "gpt2", "gpt-2", "smollm", "llama-bpe", "llama3",
	};
	const char *text = "Hello world  123 ab\t\n\n  x's <|user|>\xf0\x9f\x98\x80";
	struct gbuf kv = { 0 }, f;
	struct gguf_file *g;
	struct pg_tokenizer *t;
	char err[256];

	for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]); i++) {
		t = bpe_vocab(pres[i]);
		if (!t)
			continue;
		roundtrip(t, pres[i], text, strlen(text), 0);
		expect(t, "<|endoftext|>", 0, 1, (int32_t[]){ 256 }, 1);
		expect(t, " world<|user|>", 0, 0,
		       (int32_t[]){ 262, 257 }, 2);
		pg_tokenizer_free(t);
	}
	t = bpe_vocab("gpt2");
	if (t)
		expect(t, "123 abc", 0, 0,
		       (int32_t[]){ 264, ' ', 265, 'c' }, 4);
	pg_tokenizer_free(t);

	/* an unknown pre-tokenizer is refused with a message */
	kv_str(&kv, "tokenizer.ggml.model", "gpt2");
	kv_str(&kv, "tokenizer.ggml.pre", "no-such-pre");
	kv_strs(&kv, "tokenizer.ggml.tokens", (const char *const[]){ "a" }, 1);
	kv_strs(&kv, "tokenizer.ggml.merges", NULL, 0);
	f = gguf_finish(&kv);
	if (!gguf_open_mem(f.p, f.len, "bad-pre", &g, err, sizeof(err))) {
		int rc = pg_tokenizer_load(g, &t, err, sizeof(err));

		CHECK(rc == -EINVAL && strstr(err, "no-such-pre"),
		      "unknown pre: rc %d '%s'", rc, err);
		gguf_close(g);
	}
	free(f.p);
}

/* ---- SmolLM2 against llama.cpp ---- */

struct ref_case {
	char pre[32];
	int special;
	char *text;
	size_t len;
	int32_t *ids;
	int64_t n_ids;
};

/*
 * load_cases - the reference file: "P <pre-tokenizer>" lines naming the
 * pre-tokenizer of the cases after them, "T <special> <hex text>" lines,
 * each followed by "I <ids>"; '#' starts a comment.
 */
static struct ref_case *load_cases(const char *path, int *n_cases)
{
	static char line[1 << 20];
	struct ref_case *v = NULL;
	int n = 0, cap = 0, bad = 0;
	char pre[32] = "smollm";
	FILE *fp = fopen(path, "r");

	if (!fp)
		return NULL;
	while (fgets(line, sizeof(line), fp)) {
		if (line[0] == 'P') {
			snprintf(pre, sizeof(pre), "%.*s",
				 (int)strcspn(line + 2, "\r\n"), line + 2);
		} else if (line[0] == 'T') {
			if (n == cap)
				v = realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof(*v));
			memset(&v[n], 0, sizeof(v[n]));
			memcpy(v[n].pre, pre, sizeof(pre));
			v[n].special = line[2] == '1';
			bad |= ref_hex_text(line + 4, &v[n].text, &v[n].len);
			n++;
		} else if (line[0] == 'I' && n) {
			ref_id_list(line + 1, &v[n - 1].ids, &v[n - 1].n_ids);
		}
	}
	fclose(fp);
	if (bad) {
		fprintf(stderr, "%s: malformed\n", path);
		*n_cases = 0;
		return v;
	}
	*n_cases = n;
	return v;
}

/*
 * relabel - SmolLM2's vocabulary under another pre-tokenizer, as the
 * reference script builds it for llama.cpp.
 */
static struct pg_tokenizer *relabel(const struct gguf_file *f, const char *pre)
{
	const char *names[] = { "tokenizer.ggml.tokens", "tokenizer.ggml.merges" };
	struct gbuf kv = { 0 }, out;
	struct pg_tokenizer *t;
	enum gguf_type et;
	uint64_t n;
	uint32_t id;
	int flag;

	kv_str(&kv, "tokenizer.ggml.model", "gpt2");
	kv_str(&kv, "tokenizer.ggml.pre", pre);
	for (int k = 0; k < 2; k++) {
		gguf_get_arr(f, names[k], &et, &n);
		gb_str(&kv, names[k]);
		gb_u32(&kv, GGUF_ARRAY);
		gb_u32(&kv, GGUF_STRING);
		gb_u64(&kv, n);
		for (uint64_t i = 0; i < n; i++) {
			struct gguf_str s;

			gguf_get_arr_str(f, names[k], i, &s);
			gb_u64(&kv, s.len);
			gb_put(&kv, s.ptr, s.len);
		}
		kv.n_kv++;
	}
	gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n);
	kv_arr32(&kv, "tokenizer.ggml.token_type", GGUF_INT32,
		 gguf_get_arr_data(f, "tokenizer.ggml.token_type"), n);
	if (!gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &id))
		kv_u32(&kv, "tokenizer.ggml.bos_token_id", id);
	if (!gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &id))
		kv_u32(&kv, "tokenizer.ggml.eos_token_id", id);
	if (!gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &flag))
		kv_bool(&kv, "tokenizer.ggml.add_bos_token", flag);
	out = gguf_finish(&kv);
	t = load_mem(&out, pre);
	free(out.p);
	return t;
}

static void run_case(const struct pg_tokenizer *t, const struct ref_case *c,
		     int i, int *n_same)
{
	int64_t k;
	int32_t *ids = tokenize(t, c->text, c->len, 1, c->special, &k);

	if (same_ids(ids, k, c->ids, c->n_ids)) {
		(*n_same)++;
	} else {
		CHECK(0, "reference case %d (%s, special %d, %zu bytes) differs",
		      i, c->pre, c->special, c->len);
		print_ids("got", ids, k);
		print_ids("llama.cpp", c->ids, c->n_ids);
	}
	if (!memmem(c->text, c->len, "<|", 2) || !c->special)
		roundtrip(t, "reference case", c->text, c->len, c->special);
	free(ids);
}

static void test_reference(const struct pg_tokenizer *smol,
			   const struct gguf_file *f)
{
	const char *srcdir = getenv("top_srcdir");
	char path[4096], pre[32] = "smollm";
	struct ref_case *c;
	struct pg_tokenizer *t = (struct pg_tokenizer *)smol;
	int n = 0, n_same = 0;

	snprintf(path, sizeof(path), "%s/tests/data/tokenizer-smollm2.txt",
		 srcdir ? srcdir : ".");
	c = load_cases(path, &n);
	CHECK(c && n >= 30, "%s: %d reference cases (want >= 30)", path, n);
	for (int i = 0; i < n; i++) {
		if (strcmp(c[i].pre, pre)) {
			if (t != smol)
				pg_tokenizer_free(t);
			memcpy(pre, c[i].pre, sizeof(pre));
			t = relabel(f, pre);
		}
		if (t)
			run_case(t, &c[i], i, &n_same);
		free(c[i].text);
		free(c[i].ids);
	}
	if (t != smol)
		pg_tokenizer_free(t);
	printf("reference: %d of %d cases identical to llama.cpp\n", n_same, n);
	free(c);
}

/* ---- streaming decode ---- */

static size_t stream_all(const struct pg_tokenizer *t, const int32_t *ids,
			 int64_t n, char *out, int *n_held)
{
	struct pg_detok_stream st = { 0 };
	size_t o = 0;

	*n_held = 0;
	for (int64_t i = 0; i < n; i++) {
		int k = pg_detok_push(t, &st, ids[i], 0, out + o, 256);

		CHECK(k >= 0, "detok_push: %d", k);
		if (k < 0)
			return o;
		*n_held += st.n_tail > 0;
		o += (size_t)k;
	}
	o += (size_t)pg_detok_flush(&st, out + o, 16);
	return o;
}

static void test_stream(const struct pg_tokenizer *t)
{
	const char *text = "ok \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd and "
			   "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xe6\xbc\xa2\xe5\xad\x97";
	char out[1024];
	struct pg_detok_stream st = { 0 };
	int64_t n;
	int held, k;
	int32_t *ids = tokenize(t, text, strlen(text), 0, 0, &n);
	size_t o = stream_all(t, ids, n, out, &held);

	CHECK(o == strlen(text) && !memcmp(out, text, o),
	      "streamed text differs (%zu bytes)", o);
	CHECK(held > 0, "no token split a character (%lld tokens)",
	      (long long)n);

	/* the first piece of an emoji alone: held back, then U+FFFD */
	k = pg_detok_push(t, &st, ids[1], 0, out, sizeof(out));
	CHECK(k >= 0 && st.n_tail > 0, "push of a partial emoji: %d", k);
	k = pg_detok_flush(&st, out, sizeof(out));
	CHECK(k == 3 && !memcmp(out, "\xef\xbf\xbd", 3), "flush: %d", k);
	CHECK(pg_detok_push(t, &st, -1, 0, out, sizeof(out)) == -EINVAL,
	      "bad id in push");
	k = pg_detok_push(t, &st, ids[0], 0, out, 0);
	CHECK(k == -ENOSPC && st.n_tail == 0, "ENOSPC: %d", k);
	free(ids);
}

/* ---- special tokens, bad input ---- */

static void test_special(const struct pg_tokenizer *t)
{
	const char *s = "<|im_start|>user\nhi<|im_end|>";
	int64_t n0, n1;
	int32_t *a = tokenize(t, s, strlen(s), 0, 1, &n1);
	int32_t *b = tokenize(t, s, strlen(s), 0, 0, &n0);
	char buf[32];

	CHECK(n1 >= 3 && a[0] == 1 && a[n1 - 1] == 2,
	      "parse_special: <|im_start|> and <|im_end|> are single tokens");
	for (int64_t i = 0; i < n0; i++)
		CHECK(b[i] != 1 && b[i] != 2, "special token without parse_special");
	CHECK(n0 > n1, "plain text takes more tokens");
	CHECK(pg_tokenizer_is_eog(t, 2) && pg_tokenizer_is_eog(t, 0) &&
	      !pg_tokenizer_is_eog(t, 1) && !pg_tokenizer_is_eog(t, 100),
	      "eog set");
	CHECK(pg_token_to_piece(t, 2, 0, buf, sizeof(buf)) == 0 &&
	      pg_token_to_piece(t, 2, 1, buf, sizeof(buf)) == 10,
	      "control piece only with special");
	free(a);
	free(b);
}

static void test_bad_input(const struct pg_tokenizer *t)
{
	/* bad bytes the vocabulary can spell come back as they were */
	const char bad[] = "a\xe2\x82 b\xc3( \xed\xa0\x80 \xf4\x90\x80\x80 z\x80";
	int32_t few[2], all[64];
	char buf[8];
	int64_t n = pg_tokenize(t, "hello world again", 17, 0, 0, all, 64);
	size_t len;
	char *d;

	CHECK(pg_tokenize(t, "hello world again", 17, 0, 0, few, 2) == n &&
	      !memcmp(few, all, sizeof(few)), "short buffer: full count");
	CHECK(pg_tokenize(t, "", 0, 1, 0, all, 64) == 0, "empty text");
	CHECK(pg_tokenize(t, NULL, 0, 1, 1, NULL, 0) == 0, "NULL text");
	CHECK(pg_token_to_piece(t, -1, 1, buf, sizeof(buf)) == -EINVAL &&
	      pg_token_to_piece(t, pg_tokenizer_n_vocab(t), 1, buf, 8) == -EINVAL,
	      "ids out of range");
	CHECK(!pg_tokenizer_is_eog(t, -5) &&
	      !pg_tokenizer_is_eog(t, 1 << 30), "eog out of range");
	roundtrip(t, "invalid UTF-8", bad, sizeof(bad) - 1, 0);
	roundtrip(t, "NUL bytes", "a\0b\0\0 c", 7, 1);

	/* SmolLM2 has no symbol for 0xff: it becomes U+FFFD, as in llama.cpp */
	n = pg_tokenize(t, "a\xff\xfe", 3, 0, 0, all, 64);
	d = detokenize(t, all, n, &len);
	CHECK(!strcmp(d, "a\xef\xbf\xbd\xef\xbf\xbd"), "0xff: '%s'", d);
	free(d);
}

static void test_long_runs(const struct pg_tokenizer *t)
{
	static const char fill[] = { ' ', 'a', '7', '\n', '!', '\t' };
	size_t n = 300000;
	char *s = malloc(n + 2);

	for (size_t i = 0; i < sizeof(fill); i++) {
		memset(s, fill[i], n);
		s[n] = 'x';
		roundtrip(t, "long run", s, n, 0);
		roundtrip(t, "long run + letter", s, n + 1, 0);
	}
	free(s);
}

/* ---- threads ---- */

struct thread_arg {
	const struct pg_tokenizer *t;
	const char *text;
	size_t len;
	int32_t *ids;
	int64_t n;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;

	a->ids = tokenize(a->t, a->text, a->len, 1, 1, &a->n);
	return NULL;
}

static void test_threads(const struct pg_tokenizer *t, const char *text,
			 size_t len, const int32_t *want, int64_t n_want)
{
	struct thread_arg a[4];
	pthread_t th[4];

	for (int i = 0; i < 4; i++) {
		a[i] = (struct thread_arg){ .t = t, .text = text, .len = len };
		pthread_create(&th[i], NULL, thread_main, &a[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(same_ids(a[i].ids, a[i].n, want, n_want),
		      "thread %d got other tokens", i);
		free(a[i].ids);
	}
}

/* ---- speed ---- */

static char *mixed_text(size_t n)
{
	static const char *const parts[] = {
		"The quick brown fox jumps over the lazy dog. ",
		"int main(void) {\n\treturn printf(\"%d\\n\", x[42]);\n}\n",
		"Pi is 3.14159 and e is 2.71828; 1234567 * 89 = ",
		"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe7\xab\xa0\xe3\x80\x82",
		"Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd ",
		"    indented    spaces\n\n\n",
		"She'll say they're fine, isn't it? ",
	};
	char *s = malloc(n + 64);
	size_t o = 0;
	unsigned r = 12345;

	while (o < n) {
		const char *p;

		r = r * 1103515245 + 12345;
		p = parts[(r >> 16) % 7];
		memcpy(s + o, p, strlen(p));
		o += strlen(p);
		o += (size_t)sprintf(s + o, "%u ", (r >> 8) % 100000);
	}
	s[n] = 0;
	return s;
}

static void test_speed(const struct pg_tokenizer *t)
{
	size_t n = 1 << 20;
	char *s = mixed_text(n);
	/* cut at a character boundary */
	size_t len = n;
	double t0, dt;
	int64_t k;
	int32_t *ids;

	while (len && ((unsigned char)s[len] & 0xc0) == 0x80)
		len--;
	t0 = pg_now_s();
	ids = tokenize(t, s, len, 1, 1, &k);
	dt = pg_now_s() - t0;
	printf("speed: %zu bytes -> %lld tokens in %.3f s (%.1f MB/s, two passes)\n",
	       len, (long long)k, dt, (double)len / dt / 1e6);
	CHECK(k > 0 && dt < 2.0, "1 MB took %.3f s (limit 2 s)", dt);
	roundtrip(t, "1 MB", s, len, 1);
	free(ids);
	len = 200000;
	while (len && ((unsigned char)s[len] & 0xc0) == 0x80)
		len--;
	ids = tokenize(t, s, len, 1, 1, &k);
	test_threads(t, s, len, ids, k);
	free(ids);
	free(s);
}

int main(void)
{
	char buf[4096], err[256];
	const char *path = pg_model_default_path(buf, sizeof(buf));
	struct gguf_file *f;
	struct pg_tokenizer *t;
	int rc;

	test_spm();
	test_small_bpe();
	if (access(path, R_OK)) {
		printf("SKIP: %s is absent (set PAGODA_MODEL or run scripts/fetch-model)\n",
		       path);
		return failures ? 1 : 77;
	}
	rc = gguf_open(path, &f, err, sizeof(err));
	CHECK(rc == 0, "gguf_open: %s", err);
	if (rc)
		return 1;
	rc = pg_tokenizer_load(f, &t, err, sizeof(err));
	CHECK(rc == 0, "load: %s", err);
	if (rc)
		return 1;
	test_reference(t, f);
	gguf_close(f);
	test_stream(t);
	test_special(t);
	test_bad_input(t);
	test_long_runs(t);
	test_speed(t);
	pg_tokenizer_free(t);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
