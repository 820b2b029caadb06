/*
 * test_vocabs.c - the tokenizer against llama.cpp's own tokenizer test data
 * (models/ggml-vocab-NAME.gguf{,.inp,.out}) on real vocabularies: Llama 2
 * (SentencePiece), Llama 3, Qwen2, GPT-2 and phi-3.  scripts/fetch-vocabs
 * puts them in ${PAGODA_VOCAB_DIR:-$HOME/.cache/pagoda/vocab}.
 *
 * Each case is tokenised as llama.cpp's tests/test-tokenizer-0 does: the
 * .inp is split on "\n__ggml_vocab_test__\n" (so no case keeps the newline
 * before a separator), each case is tokenised with add_special and
 * parse_special off, and compared with the ids on the matching .out line
 * (trimmed, split on spaces).  For llama-spm it also runs the round trips of
 * tests/test-tokenizer-1-spm: every token, and every code point.
 *
 * It is not a test of the model files' other keys, nor of speed.  Exits 0
 * (pass), 1 (fail) or 77 (skip: no vocabulary directory).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"
#define N_SHOW 5 /* mismatches printed per vocabulary */

struct vocab {
	const char *name;
	int required; /* must load and match fully */
	int round_trip; /* llama.cpp runs test-tokenizer-1-spm on it */
};

static const struct vocab vocabs[] = {
	{ "llama-spm", 1, 1 },
	{ "llama-bpe", 1, 0 },
	{ "qwen2", 1, 0 },
	{ "gpt-2", 1, 0 },
	{ "phi-3", 0, 0 },
};

/* One .inp case and its expected ids. */
struct tcase {
	const char *text;
	size_t len;
	int32_t *ids; /* (n_ids) */
	int64_t n_ids;
};

struct cases {
	char *inp; /* the whole .inp, cases point into it */
	char *out; /* the whole .out */
	struct tcase *c; /* (n) */
	size_t n;
};

/* ---- files ---- */

static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!fp)
		return NULL;
	if (fseek(fp, 0, SEEK_END) || (n = ftell(fp)) < 0 ||
	    fseek(fp, 0, SEEK_SET))
		goto out_close;
	buf = malloc((size_t)n + 1);
	if (!buf)
		goto out_close;
	if (fread(buf, 1, (size_t)n, fp) != (size_t)n) {
		free(buf);
		buf = NULL;
		goto out_close;
	}
	buf[n] = 0;
	*len = (size_t)n;
out_close:
	fclose(fp);
	return buf;
}

static const char *vocab_dir(void)
{
	static char buf[4096];
	const char *d = getenv("PAGODA_VOCAB_DIR");
	const char *home = getenv("HOME");

	if (d && *d)
		return d;
	if (!home || !*home)
		return NULL;
	snprintf(buf, sizeof(buf), "%s/.cache/pagoda/vocab", home);
	return buf;
}

static int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* ---- the .inp / .out pair ---- */

static int case_push(struct cases *cs, const char *s, size_t n)
{
	struct tcase *c = realloc(cs->c, (cs->n + 1) * sizeof(*c));

	if (!c)
		return -ENOMEM;
	cs->c = c;
	c[cs->n++] = (struct tcase){ .text = s, .len = n };
	return 0;
}

/* split_inp - as test-tokenizer-0: cut at each separator; the rest after the
 * last one is a case only when it is not empty. */
static int split_inp(struct cases *cs, const char *s, size_t n)
{
	size_t pos = 0, sep = strlen(SEP);

	while (pos < n) {
		const char *next = memmem(s + pos, n - pos, SEP, sep);
		size_t end = next ? (size_t)(next - s) : n;

		if (case_push(cs, s + pos, end - pos))
			return -ENOMEM;
		if (!next)
			break;
		pos = end + sep;
	}
	return 0;
}

/* parse_ids - one .out line: ids separated by single spaces, ends trimmed. */
static int parse_ids(struct tcase *c, char *line)
{
	char *p = line, *end;

	c->ids = malloc((strlen(line) / 2 + 1) * sizeof(*c->ids));
	if (!c->ids)
		return -ENOMEM;
	for (;;) {
		long v;

		while (*p == ' ' || *p == '\t' || *p == '\r')
			p++;
		if (!*p)
			return 0;
		v = strtol(p, &end, 10);
		if (end == p)
			return -EINVAL;
		c->ids[c->n_ids++] = (int32_t)v;
		p = end;
	}
}

static int parse_out(struct cases *cs, char *s)
{
	size_t i = 0;
	char *line = s;

	while (*line) {
		char *nl = strchr(line, '\n');

		if (nl)
			*nl = 0;
		if (i >= cs->n || parse_ids(&cs->c[i], line))
			return -EINVAL;
		i++;
		if (!nl)
			break;
		line = nl + 1;
	}
	return i == cs->n ? 0 : -EINVAL;
}

static void cases_free(struct cases *cs)
{
	for (size_t i = 0; i < cs->n; i++)
		free(cs->c[i].ids);
	free(cs->c);
	free(cs->inp);
	free(cs->out);
}

static int cases_load(struct cases *cs, const char *gguf)
{
	char path[4200];
	size_t n_inp, n_out;

	memset(cs, 0, sizeof(*cs));
	snprintf(path, sizeof(path), "%s.inp", gguf);
	if (!(cs->inp = slurp(path, &n_inp)))
		return -errno;
	snprintf(path, sizeof(path), "%s.out", gguf);
	if (!(cs->out = slurp(path, &n_out)))
		return -errno;
	if (split_inp(cs, cs->inp, n_inp))
		return -ENOMEM;
	return parse_out(cs, cs->out);
}

/* ---- tokenising ---- */

static int32_t *tokenize(const struct pg_tokenizer *t, const char *s,
			 size_t n, int special, int64_t *n_out)
{
	int64_t k = pg_tokenize(t, s, n, 0, special, NULL, 0);
	int32_t *ids;

	if (k < 0)
		abort();
	ids = malloc((size_t)(k ? k : 1) * sizeof(*ids));
	if (!ids)
		abort();
	*n_out = pg_tokenize(t, s, n, 0, special, ids, k);
	return ids;
}

/* detokenize - concatenated pieces into buf (malloc'd, grown as needed). */
static size_t detokenize(const struct pg_tokenizer *t, const int32_t *ids,
			 int64_t n, int special, char **buf, size_t *cap)
{
	size_t o = 0;

	for (int64_t i = 0; i < n; i++) {
		int k = pg_token_to_piece(t, ids[i], special, NULL, 0);

		if (k < 0)
			abort();
		while (o + (size_t)k + 1 > *cap) {
			*cap = *cap ? *cap * 2 : 64;
			if (!(*buf = realloc(*buf, *cap)))
				abort();
		}
		pg_token_to_piece(t, ids[i], special, *buf + o, (size_t)k);
		o += (size_t)k;
	}
	return o;
}

static void print_hex(const char *what, const char *s, size_t n)
{
	fprintf(stderr, "  %s (%zu bytes):", what, n);
	for (size_t i = 0; i < n && i < 96; i++)
		fprintf(stderr, " %02x", (unsigned char)s[i]);
	fprintf(stderr, "%s\n", n > 96 ? " ..." : "");
}

static void print_ids(const char *what, const int32_t *ids, int64_t n)
{
	fprintf(stderr, "  %s (%lld):", what, (long long)n);
	for (int64_t i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fputc('\n', stderr);
}

/* run_cases - returns how many cases matched. */
static size_t run_cases(const char *name, const struct pg_tokenizer *t,
			const struct cases *cs)
{
	size_t same = 0, shown = 0;

	for (size_t i = 0; i < cs->n; i++) {
		const struct tcase *c = &cs->c[i];
		int64_t n;
		int32_t *got = tokenize(t, c->text, c->len, 0, &n);

		if (n == c->n_ids &&
		    (!n || !memcmp(got, c->ids, (size_t)n * sizeof(*got)))) {
			same++;
		} else if (shown++ < N_SHOW) {
			fprintf(stderr, "%s: case %zu differs\n", name, i);
			print_hex("input", c->text, c->len);
			print_ids("expected", c->ids, c->n_ids);
			print_ids("got", got, n);
		}
		free(got);
	}
	return same;
}

/* ---- round trips (test-tokenizer-1-spm) ---- */

/*
 * decode - as llama.cpp's common_detokenize for a SentencePiece vocabulary
 * that adds a space prefix: the pieces, less one leading space of the first.
 */
static size_t decode(const struct pg_tokenizer *t, const int32_t *ids,
		     int64_t n, char **buf, size_t *cap)
{
	size_t k = detokenize(t, ids, n, 1, buf, cap);

	if (n && pg_token_to_piece(t, ids[0], 1, NULL, 0) > 0 &&
	    (*buf)[0] == ' ') {
		memmove(*buf, *buf + 1, k - 1);
		k--;
	}
	return k;
}

/* round_trip - decode(tokenize(s)) == s for s of n bytes; 0 when it holds. */
static int round_trip(const struct pg_tokenizer *t, const char *s, size_t n,
		      char **buf, size_t *cap)
{
	int64_t k;
	int32_t *ids = tokenize(t, s, n, 1, &k);
	size_t m = decode(t, ids, k, buf, cap);
	int bad = m != n || memcmp(*buf, s, n);

	free(ids);
	return bad;
}

static int round_trip_tokens(const char *name, const struct pg_tokenizer *t)
{
	char *piece = NULL, *buf = NULL;
	size_t pcap = 0, cap = 0;
	int bad = 0;

	for (int32_t i = 0; i < pg_tokenizer_n_vocab(t) && !bad; i++) {
		size_t n = decode(t, &i, 1, &piece, &pcap);

		if (round_trip(t, piece, n, &buf, &cap)) {
			fprintf(stderr, "%s: token %d does not round-trip\n",
				name, i);
			print_hex("piece", piece, n);
			bad = 1;
		}
	}
	free(piece);
	free(buf);
	return bad;
}

static size_t utf8_put(uint32_t cp, char *s)
{
	if (cp < 0x80) {
		s[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		s[0] = (char)(0xc0 | cp >> 6);
		s[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		s[0] = (char)(0xe0 | cp >> 12);
		s[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		s[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	s[0] = (char)(0xf0 | cp >> 18);
	s[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	s[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	s[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* round_trip_cps - every code point but surrogates, the unassigned planes
 * 4..14 and U+2581 ("▁", which decodes to a space), as llama.cpp skips. */
static int round_trip_cps(const char *name, const struct pg_tokenizer *t)
{
	char *buf = NULL, s[4];
	size_t cap = 0;
	int bad = 0;

	for (uint32_t cp = 0; cp < 0x110000 && !bad; cp++) {
		size_t n;

		if ((cp >= 0xd800 && cp <= 0xdfff) ||
		    (cp >= 0x40000 && cp <= 0xe0000) || cp == 0x2581)
			continue;
		n = utf8_put(cp, s);
		if (round_trip(t, s, n, &buf, &cap)) {
			fprintf(stderr, "%s: U+%04X does not round-trip\n",
				name, cp);
			bad = 1;
		}
	}
	free(buf);
	return bad;
}

/* ---- one vocabulary ---- */

/* load - 0, or -1 when the vocabulary cannot be loaded (message printed). */
static int load(const char *path, const char *name,
		struct pg_tokenizer **t)
{
	struct gguf_file *f;
	char err[512];
	int rc = gguf_open(path, &f, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "%s: cannot open %s: %s\n", name, path, err);
		return -1;
	}
	rc = pg_tokenizer_load(f, t, err, sizeof(err));
	gguf_close(f);
	if (rc) {
		fprintf(stderr, "%s: pagoda cannot load this vocabulary: %s\n",
			name, err);
		return -1;
	}
	return 0;
}

/* test_vocab - 0 pass, 1 fail, 77 skipped. */
static int test_vocab(const char *dir, const struct vocab *v)
{
	char path[4096];
	struct pg_tokenizer *t;
	struct cases cs;
	size_t same;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", dir, v->name);
	if (!exists(path)) {
		printf("%s: SKIP (%s is absent)\n", v->name, path);
		return 77;
	}
	if (load(path, v->name, &t)) {
		printf("%s: %s (not loaded)\n", v->name,
		       v->required ? "FAIL" : "SKIP");
		return v->required ? 1 : 77;
	}
	if (cases_load(&cs, path)) {
		printf("%s: FAIL (cannot read or parse %s.inp/.out)\n",
		       v->name, path);
		rc = 1;
		goto out_free;
	}
	same = run_cases(v->name, t, &cs);
	printf("%s: %zu of %zu identical\n", v->name, same, cs.n);
	if (same != cs.n)
		rc = 1;
	if (v->round_trip) {
		int bad = round_trip_tokens(v->name, t) ||
			  round_trip_cps(v->name, t);

		printf("%s: round trip of every token and code point: %s\n",
		       v->name, bad ? "FAIL" : "ok");
		rc |= bad;
	}
	cases_free(&cs);
out_free:
	pg_tokenizer_free(t);
	return rc;
}

int main(void)
{
	const char *dir = vocab_dir();
	int n_run = 0, fail = 0;

	if (!dir || !exists(dir)) {
		printf("SKIP: no vocabulary directory (%s): run scripts/fetch-vocabs\n",
		       dir ? dir : "set PAGODA_VOCAB_DIR");
		return 77;
	}
	for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
		int rc = test_vocab(dir, &vocabs[i]);

		if (rc != 77)
			n_run++;
		if (rc == 1)
			fail = 1;
	}
	if (!n_run && !fail) {
		printf("SKIP: no vocabulary in %s: run scripts/fetch-vocabs\n",
		       dir);
		return 77;
	}
	return fail;
}
