/*
 * test_tokenizer_gemma.c - the SentencePiece tokenizer on Gemma 3's
 * 262,144-token vocabulary (byte fallback, no space prefix) against
 * llama.cpp's output (tests/data/tokenizer-gemma3.txt, made by
 * tests/ref/gen-tokenizer-gemma-ref.py), its special tokens, and round
 * trips of the reference texts (but those with U+2581, SentencePiece's
 * space) and of every token.
 *
 * Only the file's vocabulary is read (a private copy of its mapping with
 * the tensor count zeroed), so it does not depend on the engine loading
 * Gemma's weights.  The file is $PAGODA_MODEL_DIR/gemma-3-270m-q4_k_m.gguf
 * (default ~/.cache/pagoda/models; scripts/fetch-model gemma3-270m).
 *
 * Exits 0 (pass), 1 (fail) or 77 (skip: the file is absent).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/tokenizer.h"
#include "tests/check.h"
#include "tests/vocab_util.h"

#define GEMMA_FILE "gemma-3-270m-q4_k_m.gguf"

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
	ids = xmalloc((size_t)k * sizeof(*ids));
	*n_out = pg_tokenize(t, s, n, add_bos, special, ids, k);
	return ids;
}

/* detokenize - the concatenated pieces (control ones when special), malloc'd. */
static char *detokenize(const struct pg_tokenizer *t, const int32_t *ids,
			int64_t n, int special, size_t *len)
{
	size_t cap = 64, o = 0;
	char *s = xmalloc(cap);

	for (int64_t i = 0; i < n; i++) {
		int k = pg_token_to_piece(t, ids[i], special, NULL, 0);

		if (k < 0) {
			CHECK(0, "token_to_piece(%d): %d", ids[i], k);
			break;
		}
		while (o + (size_t)k + 1 > cap) {
			s = realloc(s, cap *= 2);
			if (!s)
				abort();
		}
		pg_token_to_piece(t, ids[i], special, s + o, (size_t)k);
		o += (size_t)k;
	}
	s[o] = 0;
	*len = o;
	return s;
}

static void print_ids(const char *what, const int32_t *ids, int64_t n)
{
	fprintf(stderr, "  %s (%lld):", what, (long long)n);
	for (int64_t i = 0; i < n && i < 40; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static int same_ids(const int32_t *a, int64_t na, const int32_t *b,
		    int64_t nb)
{
	return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof(*a)));
}

/* ---- the vocabulary ---- */

/* load_vocab - the vocabulary's tokenizer; NULL (a failure counted) when
   it cannot be read. */
static struct pg_tokenizer *load_vocab(const char *path)
{
	struct pg_tokenizer *t;
	char err[512];

	CHECK(!vocab_only_load(path, &t, err, sizeof(err)), "%s", err);
	return t;
}

/* ---- the reference ---- */

struct ref_case {
	int special;
	char *text;
	size_t len;
	int32_t *ids;
	int64_t n_ids;
};

/*
 * load_cases - "T <special> <hex text>" lines, each followed by an
 * "I <ids>" line; '#' starts a comment.  NULL with *n_cases 0 when the
 * file is unreadable or malformed.
 */
static struct ref_case *load_cases(const char *path, int *n_cases)
{
	static char line[1 << 16];
	struct ref_case *v = NULL;
	int n = 0, cap = 0, bad = 0;
	FILE *fp = fopen(path, "r");

	*n_cases = 0;
	if (!fp)
		return NULL;
	while (fgets(line, sizeof(line), fp)) {
		if (line[0] == 'T' && strlen(line) > 4) {
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				v = realloc(v, (size_t)cap * sizeof(*v));
				if (!v)
					abort();
			}
			memset(&v[n], 0, sizeof(v[n]));
			v[n].special = line[2] == '1';
			bad |= ref_hex_text(line + 4, &v[n].text, &v[n].len);
			n++;
		} else if (line[0] == 'I' && n) {
			free(v[n - 1].ids);
			ref_id_list(line + 1, &v[n - 1].ids, &v[n - 1].n_ids);
		}
	}
	fclose(fp);
	for (int i = 0; i < n; i++)
		bad |= !v[i].ids;
	if (bad) {
		fprintf(stderr, "%s: malformed\n", path);
		n = 0;
	}
	*n_cases = n;
	return v;
}

static void roundtrip(const struct pg_tokenizer *t, const char *what,
		      const char *s, size_t n)
{
	int64_t k;
	int32_t *ids = tokenize(t, s, n, 0, 0, &k);
	size_t len = 0;
	char *d = ids ? detokenize(t, ids, k, 0, &len) : NULL;

	char q[256];

	CHECK(d && len == n && !memcmp(d, s, n),
	      "%s: round trip of %zu bytes gave %zu: \"%s\"", what, n, len,
	      gguf_str_quote((struct gguf_str){ s, n }, 48, q, sizeof(q)));
	free(ids);
	free(d);
}

static void test_reference(const struct pg_tokenizer *t)
{
	const char *srcdir = getenv("top_srcdir");
	char path[4096];
	struct ref_case *c;
	int n = 0, n_same = 0;

	snprintf(path, sizeof(path), "%s/tests/data/tokenizer-gemma3.txt",
		 srcdir ? srcdir : ".");
	c = load_cases(path, &n);
	CHECK(n >= 100, "%s: %d reference cases (want >= 100)", path, n);
	for (int i = 0; i < n; i++) {
		int64_t k;
		int32_t *ids = tokenize(t, c[i].text, c[i].len, 1,
					c[i].special, &k);

		if (same_ids(ids, k, c[i].ids, c[i].n_ids)) {
			n_same++;
		} else {
			CHECK(0, "reference case %d (special %d, %zu bytes) differs",
			      i, c[i].special, c[i].len);
			print_ids("got", ids, k);
			print_ids("llama.cpp", c[i].ids, c[i].n_ids);
		}
		/* "\xe2\x96\x81" (U+2581) is SentencePiece's space: it
		 * decodes to " ", in llama.cpp too */
		if (!c[i].special &&
		    !memmem(c[i].text, c[i].len, "\xe2\x96\x81", 3))
			roundtrip(t, "reference case", c[i].text, c[i].len);
		free(ids);
	}
	printf("reference: %d of %d cases identical to llama.cpp\n", n_same, n);
	for (int i = 0; i < n; i++) {
		free(c[i].text);
		free(c[i].ids);
	}
	free(c);
}

/* ---- the vocabulary's own facts ---- */

static int32_t one_token(const struct pg_tokenizer *t, const char *s,
			 int special)
{
	int32_t id[2];

	return pg_tokenize(t, s, strlen(s), 0, special, id, 2) == 1 ? id[0] : -1;
}

static void test_specials(const struct pg_tokenizer *t)
{
	int64_t n;
	int32_t *ids;
	char buf[64];

	CHECK(pg_tokenizer_n_vocab(t) == 262144, "n_vocab %d",
	      pg_tokenizer_n_vocab(t));
	CHECK(pg_tokenizer_bos(t) == 2 && pg_tokenizer_eos(t) == 1 &&
	      pg_tokenizer_add_bos(t), "<bos> 2, <eos> 1, BOS added: %d %d %d",
	      pg_tokenizer_bos(t), pg_tokenizer_eos(t), pg_tokenizer_add_bos(t));
	CHECK(one_token(t, "<start_of_turn>", 1) == 105 &&
	      one_token(t, "<end_of_turn>", 1) == 106 &&
	      one_token(t, "<bos>", 1) == 2 && one_token(t, "<eos>", 1) == 1,
	      "control tokens with parse_special");
	ids = tokenize(t, "<start_of_turn>", 15, 0, 0, &n);
	CHECK(n > 1 && ids && ids[0] != 105,
	      "<start_of_turn> is text without parse_special (%lld)",
	      (long long)n);
	free(ids);
	CHECK(pg_tokenizer_is_eog(t, 1) && pg_tokenizer_is_eog(t, 106) &&
	      !pg_tokenizer_is_eog(t, 105) && !pg_tokenizer_is_eog(t, 2),
	      "<eos> and <end_of_turn> end generation, <start_of_turn> does not");
	CHECK(pg_token_to_piece(t, 106, 0, buf, sizeof(buf)) == 0 &&
	      pg_token_to_piece(t, 106, 1, buf, sizeof(buf)) == 13 &&
	      !memcmp(buf, "<end_of_turn>", 13),
	      "control piece only with special");
	/* no space prefix: "Hello" and " Hello" differ */
	CHECK(one_token(t, "Hello", 0) >= 0 && one_token(t, " Hello", 0) >= 0 &&
	      one_token(t, "Hello", 0) != one_token(t, " Hello", 0),
	      "no space prefix: Hello %d, \" Hello\" %d",
	      one_token(t, "Hello", 0), one_token(t, " Hello", 0));
	CHECK(pg_token_to_piece(t, one_token(t, " Hello", 0), 0, buf,
				sizeof(buf)) == 6 && !memcmp(buf, " Hello", 6),
	      "\"\xe2\x96\x81\" decodes to a space");
}

/* Every token's piece tokenizes back to text that decodes to it. */
static void test_every_token(const struct pg_tokenizer *t)
{
	int bad = 0;

	for (int32_t i = 0; i < pg_tokenizer_n_vocab(t) && bad < 5; i++) {
		char piece[512];
		int k = pg_token_to_piece(t, i, 0, piece, sizeof(piece));
		int64_t n;
		int32_t *ids;
		size_t len;
		char *d;

		if (k <= 0 || k > (int)sizeof(piece))
			continue;	/* control, or longer than any should be */
		ids = tokenize(t, piece, (size_t)k, 0, 0, &n);
		d = ids ? detokenize(t, ids, n, 0, &len) : NULL;
		if (!d || len != (size_t)k || memcmp(d, piece, len)) {
			CHECK(0, "token %d (%d bytes) does not round-trip", i, k);
			bad++;
		}
		free(ids);
		free(d);
	}
}

int main(void)
{
	const char *dir = getenv("PAGODA_MODEL_DIR"), *home = getenv("HOME");
	char path[4096];
	struct pg_tokenizer *t;

	if (dir && *dir)
		snprintf(path, sizeof(path), "%s/" GEMMA_FILE, dir);
	else
		snprintf(path, sizeof(path), "%s/.cache/pagoda/models/" GEMMA_FILE,
			 home ? home : "");
	if (access(path, R_OK)) {
		printf("SKIP: %s is absent (run scripts/fetch-model gemma3-270m, or set PAGODA_MODEL_DIR)\n",
		       path);
		return 77;
	}
	t = load_vocab(path);
	if (!t)
		return 1;
	test_specials(t);
	test_reference(t);
	test_every_token(t);
	pg_tokenizer_free(t);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
