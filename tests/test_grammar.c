/*
 * test_grammar.c - the GBNF grammar engine (daemon/engine/grammar.h), each
 * construct on its own:
 *
 *   - literals and their escapes, character classes (ranges, negation,
 *     escapes, '.'), groups, alternatives, every repetition form and its
 *     bounds, nested rules and recursion, comments and continuation lines;
 *   - UTF-8: multi-byte characters, tokens that split one (allowed only
 *     where a completion may come), bytes that are not UTF-8;
 *   - tokens of several characters that cross rule boundaries;
 *   - end-of-generation allowed exactly where the grammar is done,
 *     pg_grammar_dead, clones independent of their originals, the limits
 *     on stacks and depth (-E2BIG, the state unchanged);
 *   - pg_grammar_mask equal to pg_grammar_allows for every token of a
 *     vocabulary of single bytes and multi-character pieces, along random
 *     walks; masks cached for repeated states; tiny cache limits giving
 *     the same answers;
 *   - malformed grammars: -EINVAL and a message naming the line, column
 *     and problem;
 *   - random and mutated grammar texts (a fixed seed): never a crash, a
 *     compile that succeeds or says why;
 *   - timings (printed, not checked): compiling a 500-rule grammar, masks
 *     over a 49,152-token synthetic vocabulary;
 *   - when $PAGODA_MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf is there (else
 *     skipped): pg_grammar_vocab_create from its tokenizer, a JSON text
 *     tokenized and accepted, masks equal to allows there, and timings.
 *
 * Exits 0 or 1.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/engine/grammar.h"
#include "daemon/engine/tokenizer.h"
#include "tests/check.h"
#include "tests/vocab_util.h"

/* ---- the vocabulary: every byte, some pieces, end, a control token ---- */

static const char *const multi[] = {
	"\":", "{\"", " [", "ab", "abc", "\":\"", "},", "],", "\n  ", "true", "null",
	"12", "3.", "\xc3\xa9", "\xa9x", "\xe2\x82\xac", "\x82\xac", "\xf0\x9f\x98\x80",
	"\xe6\x97\xa5\xe6\x9c\xac", " \"", "\"}", "a\xc3\xa9", "((", "))", "()", "aaa",
	"xyz", "\xc3", "\xe2\x82", "\\n", "\\u00", "e9", "\t", "[1,", "2]",
};
#define N_MULTI ((int)(sizeof(multi) / sizeof(multi[0])))
#define T_MULTI 256			/* multi[i] is token T_MULTI + i */
#define T_EOG (T_MULTI + N_MULTI)	/* end of generation */
#define T_CTRL (T_EOG + 1)		/* a control token: no bytes */
#define N_TOK (T_CTRL + 1)
#define WORDS ((N_TOK + 31) / 32)

static struct pg_grammar_vocab *vocab;
static uint64_t rng = 0x2545f4914f6cdd1dull;

/* rnd - a number below n from a fixed-seed xorshift. */
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* now_ms - a monotonic clock in milliseconds. */
static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* tok - the token whose piece is s, of multi[]; exits when there is none. */
static int tok(const char *s)
{
	for (int i = 0; i < N_MULTI; i++)
		if (!strcmp(multi[i], s))
			return T_MULTI + i;
	fprintf(stderr, "no token for '%s'\n", s);
	exit(1);
}

/* vocab_init - the test vocabulary. */
static void vocab_init(void)
{
	const char *pieces[N_TOK];
	size_t lens[N_TOK];
	uint8_t eog[N_TOK];
	static char bytes[256];

	memset(eog, 0, sizeof(eog));
	for (int b = 0; b < 256; b++) {
		bytes[b] = (char)b;
		pieces[b] = &bytes[b];
		lens[b] = 1;
	}
	for (int i = 0; i < N_MULTI; i++) {
		pieces[T_MULTI + i] = multi[i];
		lens[T_MULTI + i] = strlen(multi[i]);
	}
	pieces[T_EOG] = "";
	lens[T_EOG] = 0;
	eog[T_EOG] = 1;
	pieces[T_CTRL] = NULL;
	lens[T_CTRL] = 0;
	if (pg_grammar_vocab_from_pieces(pieces, lens, eog, N_TOK, &vocab)) {
		fprintf(stderr, "pg_grammar_vocab_from_pieces failed\n");
		exit(1);
	}
}

/* ---- helpers ---- */

/* compile - text compiled; NULL after a failure is counted. */
static struct pg_grammar *compile(const char *text)
{
	struct pg_grammar *g = NULL;
	char err[512];
	int rc = pg_grammar_compile(text, strlen(text), &g, err, sizeof(err));

	CHECK(rc == 0 && g, "compile %s: %d %s", text, rc, err);
	return rc ? NULL : g;
}

/* new_state - the start of g; exits on ENOMEM. */
static struct pg_grammar_state *new_state(struct pg_grammar *g)
{
	struct pg_grammar_state *s = pg_grammar_state_create(g);

	if (!s) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return s;
}

/* feed - accept the n bytes of s one by one; the offset of the first one
   refused, or n. */
static size_t feed(struct pg_grammar_state *st, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (pg_grammar_accept(st, vocab, (unsigned char)s[i]))
			return i;
	return n;
}

/*
 * match - s (n bytes) fed byte by byte from the start: -1 when all of it
 * is accepted and the grammar is done, else the offset of the first byte
 * refused (n: all of it accepted, not complete).  End-of-generation is
 * checked to be allowed exactly when done.
 */
static long match(struct pg_grammar *g, const char *s, size_t n)
{
	struct pg_grammar_state *st = new_state(g);
	size_t at = feed(st, s, n);
	long r = at < n ? (long)at : pg_grammar_done(st) ? -1 : (long)n;

	CHECK(pg_grammar_allows(st, vocab, T_EOG) == pg_grammar_done(st),
	      "end-of-generation after %.*s: allowed %d, done %d", (int)n, s,
	      pg_grammar_allows(st, vocab, T_EOG), pg_grammar_done(st));
	pg_grammar_state_free(st);
	return r;
}

/* expect - g on s gives want (see match). */
#define expect(g, s, want) do {						\
	long got_ = match((g), (s), strlen(s));				\
	CHECK(got_ == (want), "'%s': got %ld, want %ld", (s), got_,	\
	      (long)(want));						\
} while (0)

#define OK (-1L)	/* accepted and done */

/* check_mask - s's mask equals pg_grammar_allows token by token, and its
   count its bits; the count. */
static int check_mask(const struct pg_grammar_state *s, const char *what)
{
	uint32_t bits[WORDS];
	int n = pg_grammar_mask(s, vocab, bits), cnt = 0, bad = 0;

	CHECK(n >= 0, "%s: mask %d", what, n);
	for (int id = 0; id < N_TOK; id++) {
		int a = pg_grammar_allows(s, vocab, id);
		int b = (int)((bits[id / 32] >> (id % 32)) & 1u);

		cnt += b;
		if (a != b && bad++ < 3)
			CHECK(0, "%s: token %d: allows %d, mask %d", what, id, a, b);
	}
	CHECK(n == cnt, "%s: mask says %d tokens, has %d", what, n, cnt);
	return cnt;
}

/* expect_error - text refused with -EINVAL, its message starting with
   "line L, column C: " and holding what. */
static void expect_error(const char *text, size_t len, int line, int col,
			 const char *what)
{
	struct pg_grammar *g = (struct pg_grammar *)&g;
	char err[512], where[64];
	int rc = pg_grammar_compile(text, len, &g, err, sizeof(err));

	snprintf(where, sizeof(where), "line %d, column %d: ", line, col);
	CHECK(rc == -EINVAL, "%.60s: rc %d, want -EINVAL", text, rc);
	CHECK(!g, "%.60s: *out not NULL on error", text);
	if (rc != -EINVAL)
		return;
	CHECK(!strncmp(err, where, strlen(where)), "%.60s: message '%s' does not start "
	      "with '%s'", text, err, where);
	CHECK(strstr(err, what), "%.60s: message '%s' lacks '%s'", text, err, what);
}

/* ---- each construct ---- */

/* test_literals - strings and their escapes. */
static void test_literals(void)
{
	struct pg_grammar *g = compile("root ::= \"abc\"");

	if (g) {
		expect(g, "abc", OK);
		expect(g, "ab", 2);
		expect(g, "", 0);
		expect(g, "abd", 2);
		expect(g, "abcd", 3);
		expect(g, "xbc", 0);
		pg_grammar_free(g);
	}
	g = compile("root ::= \"\\n\\t\\r\\\\\\\"\\[\\]\\x41\\u00e9\\U0001F600\"");
	if (g) {
		expect(g, "\n\t\r\\\"[]A\xc3\xa9\xf0\x9f\x98\x80", OK);
		expect(g, "\n\t\r\\\"[]a", 7);
		pg_grammar_free(g);
	}
	/* a literal "a" "b" written as two, and an empty one */
	g = compile("root ::= \"a\" \"\" \"b\"");
	if (g) {
		expect(g, "ab", OK);
		pg_grammar_free(g);
	}
	g = compile("root ::= \"\"");
	if (g) {
		expect(g, "", OK);
		expect(g, "a", 0);
		pg_grammar_free(g);
	}
	/* raw UTF-8 in a literal */
	g = compile("root ::= \"h\xc3\xa9llo \xe2\x82\xac\"");
	if (g) {
		expect(g, "h\xc3\xa9llo \xe2\x82\xac", OK);
		expect(g, "hello", 1);
		pg_grammar_free(g);
	}
}

/* test_classes - ranges, negation, escapes, '.' */
static void test_classes(void)
{
	struct pg_grammar *g = compile("root ::= [a-cx0-9]");
	char s[2] = { 0, 0 };

	if (g) {
		for (int c = 1; c < 128; c++) {
			bool in = (c >= 'a' && c <= 'c') || c == 'x' || (c >= '0' && c <= '9');

			s[0] = (char)c;
			CHECK(match(g, s, 1) == (in ? OK : 0), "[a-cx0-9] on %d", c);
		}
		pg_grammar_free(g);
	}
	g = compile("root ::= [^a-c\\n]");
	if (g) {
		for (int c = 1; c < 128; c++) {
			bool in = !(c >= 'a' && c <= 'c') && c != '\n';

			s[0] = (char)c;
			CHECK(match(g, s, 1) == (in ? OK : 0), "[^a-c\\n] on %d", c);
		}
		expect(g, "\xc3\xa9", OK);
		expect(g, "\xf0\x9f\x98\x80", OK);
		pg_grammar_free(g);
	}
	g = compile("root ::= [\\]\\[\\\\\\x41-\\x43-]");
	if (g) {
		expect(g, "]", OK);
		expect(g, "[", OK);
		expect(g, "\\", OK);
		expect(g, "B", OK);
		expect(g, "-", OK);
		expect(g, "D", 0);
		pg_grammar_free(g);
	}
	g = compile("root ::= [\xce\xb1-\xcf\x89] [^\xc3\xa9]");	/* [α-ω] [^é] */
	if (g) {
		expect(g, "\xce\xbb" "a", OK);
		expect(g, "\xce\xbb\xc3\xa8", OK);
		expect(g, "\xce\xbb\xc3\xa9", 3);
		expect(g, "a", 0);
		pg_grammar_free(g);
	}
	g = compile("root ::= . . \"!\"");
	if (g) {
		expect(g, "a\xe6\x97\xa5!", OK);
		expect(g, "\n\t!", OK);
		expect(g, "ab", 2);
		pg_grammar_free(g);
	}
}

/* test_groups - groups and alternatives, on one line and on several. */
static void test_groups(void)
{
	struct pg_grammar *g = compile("root ::= ( \"ab\" | \"cd\" ) \"e\" | \"f\"");

	if (g) {
		expect(g, "abe", OK);
		expect(g, "cde", OK);
		expect(g, "f", OK);
		expect(g, "ab", 2);
		expect(g, "fe", 1);
		expect(g, "ace", 1);
		pg_grammar_free(g);
	}
	g = compile("# a comment\nroot ::= \"a\" # another\n  | \"b\" ( \"c\"\n  | \"d\" )\n"
		    "\n# the end\n");
	if (g) {
		expect(g, "a", OK);
		expect(g, "bc", OK);
		expect(g, "bd", OK);
		expect(g, "b", 1);
		pg_grammar_free(g);
	}
	g = compile("root ::=\n  \"x\" ((\"y\"))");
	if (g) {
		expect(g, "xy", OK);
		pg_grammar_free(g);
	}
	g = compile("root ::= \"a\" | \"ab\" | \"abc\"");	/* ambiguous prefixes */
	if (g) {
		expect(g, "a", OK);
		expect(g, "ab", OK);
		expect(g, "abc", OK);
		expect(g, "abcd", 3);
		pg_grammar_free(g);
	}
}

/* rep_case - a^k for k from 0 to 9 against the bounds lo .. hi (-1: none). */
static void rep_case(const char *op, int lo, int hi)
{
	char text[64], s[16];
	struct pg_grammar *g;

	snprintf(text, sizeof(text), "root ::= \"a\"%s \"b\"", op);
	g = compile(text);
	if (!g)
		return;
	for (int k = 0; k <= 9; k++) {
		bool in = k >= lo && (hi < 0 || k <= hi);
		long want = in ? OK : (hi >= 0 && k > hi) ? hi : (long)k;

		memset(s, 'a', (size_t)k);
		s[k] = 'b';
		s[k + 1] = '\0';
		CHECK(match(g, s, (size_t)k + 1) == want, "%s on a^%d b: got %ld, want %ld",
		      text, k, match(g, s, (size_t)k + 1), want);
	}
	pg_grammar_free(g);
}

/* test_repetitions - * + ? {m} {m,} {m,n}, of characters, groups and rules. */
static void test_repetitions(void)
{
	struct pg_grammar *g;

	rep_case("*", 0, -1);
	rep_case("+", 1, -1);
	rep_case("?", 0, 1);
	rep_case("{3}", 3, 3);
	rep_case("{0}", 0, 0);
	rep_case("{2,}", 2, -1);
	rep_case("{2,4}", 2, 4);
	rep_case("{0,3}", 0, 3);
	rep_case("{ 1 , 2 }", 1, 2);
	rep_case("{1}{2}", 2, 2);
	g = compile("root ::= ( \"ab\" | \"c\" ){2,3}");
	if (g) {
		expect(g, "abc", OK);
		expect(g, "cab", OK);
		expect(g, "ababc", OK);
		expect(g, "c", 1);
		expect(g, "cccc", 3);
		expect(g, "aba", 3);
		pg_grammar_free(g);
	}
	g = compile("root ::= item+ \".\"\nitem ::= [0-9]{2} \",\"?");
	if (g) {
		expect(g, "12,34.", OK);
		expect(g, "1234.", OK);
		expect(g, "123.", 3);
		expect(g, ".", 0);
		pg_grammar_free(g);
	}
	/* big counts: the state stays small (no stack per round) */
	g = compile("root ::= [a-z]{0,50000} \"!\"");
	if (g) {
		struct pg_grammar_state *s = new_state(g);
		int ok = 1;

		for (int i = 0; i < 3000 && ok; i++)
			ok = pg_grammar_accept(s, vocab, 'a' + i % 26) == 0;
		CHECK(ok, "3000 letters of [a-z]{0,50000}");
		CHECK(pg_grammar_accept(s, vocab, '!') == 0 && pg_grammar_done(s), "then !");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
	/* nested repetitions */
	g = compile("root ::= ( \"a\"{2} \"b\"? )+");
	if (g) {
		expect(g, "aabaa", OK);
		expect(g, "aaaab", OK);
		expect(g, "aaa", 3);
		expect(g, "ab", 1);
		pg_grammar_free(g);
	}
}

/* test_rules - nested rules, recursion, rules used before they are defined. */
static void test_rules(void)
{
	struct pg_grammar *g = compile("root ::= greeting \" \" name\n"
				       "name ::= upper lower*\n"
				       "greeting ::= \"hi\" | \"hello\"\n"
				       "upper ::= [A-Z]\nlower ::= [a-z]\n");

	if (g) {
		expect(g, "hi Bob", OK);
		expect(g, "hello X", OK);
		expect(g, "hi bob", 3);
		expect(g, "hell", 4);
		pg_grammar_free(g);
	}
	/* balanced parentheses, recursion in the middle */
	g = compile("root ::= ( \"(\" root \")\" )*");
	if (g) {
		expect(g, "", OK);
		expect(g, "()", OK);
		expect(g, "(()())()", OK);
		expect(g, "((())", 5);
		expect(g, "())", 2);
		expect(g, ")", 0);
		pg_grammar_free(g);
	}
	/* right recursion: long texts without deep stacks */
	g = compile("root ::= \"a\" root | \"b\"");
	if (g) {
		struct pg_grammar_state *s = new_state(g);
		int ok = 1;

		for (int i = 0; i < 20000 && ok; i++)
			ok = pg_grammar_accept(s, vocab, 'a') == 0;
		CHECK(ok, "right recursion: 20000 a's");
		CHECK(pg_grammar_accept(s, vocab, 'b') == 0 && pg_grammar_done(s), "then b");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
	/* an arithmetic grammar, recursion through several rules */
	g = compile("root ::= expr\nexpr ::= term ( [-+] term )*\n"
		    "term ::= factor ( [*/] factor )*\n"
		    "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n");
	if (g) {
		expect(g, "1+2*3", OK);
		expect(g, "(1+2)*-3/(4)", OK);
		expect(g, "1+", 2);
		expect(g, "1+*", 2);
		expect(g, "((1)", 4);
		pg_grammar_free(g);
	}
}

/* test_utf8 - multi-byte characters, tokens that split them, bad bytes. */
static void test_utf8(void)
{
	struct pg_grammar *g = compile("root ::= \"\xc3\xa9\" [\xce\xb1-\xcf\x89]+ \"\xe2\x82\xac\"");
	struct pg_grammar_state *s;

	if (g) {
		expect(g, "\xc3\xa9\xce\xb1\xcf\x89\xe2\x82\xac", OK);
		expect(g, "\xc3\xa9\xe2\x82\xac", 2);
		expect(g, "\xc3\xa8", 1);
		s = new_state(g);
		/* a token that ends inside é: allowed; one inside another: not */
		CHECK(pg_grammar_allows(s, vocab, 0xc3), "C3 (é begun) refused");
		CHECK(!pg_grammar_allows(s, vocab, 0xc2), "C2 allowed");
		CHECK(!pg_grammar_allows(s, vocab, 0xa9), "a lone continuation allowed");
		CHECK(pg_grammar_allows(s, vocab, tok("\xc3\xa9")), "é refused");
		CHECK(pg_grammar_allows(s, vocab, tok("\xc3")), "the piece C3 refused");
		CHECK(!pg_grammar_done(s), "done at the start");
		CHECK(pg_grammar_accept(s, vocab, 0xc3) == 0, "accept C3");
		CHECK(!pg_grammar_done(s) && !pg_grammar_dead(s), "done inside a character");
		CHECK(!pg_grammar_allows(s, vocab, T_EOG), "end inside a character");
		CHECK(pg_grammar_allows(s, vocab, 0xa9), "A9 (é finished) refused");
		CHECK(!pg_grammar_allows(s, vocab, 0xa8), "A8 (è) allowed");
		CHECK(!pg_grammar_allows(s, vocab, 'x'), "ASCII inside a character allowed");
		CHECK(!pg_grammar_allows(s, vocab, tok("\xa9x")), "é then x allowed");
		check_mask(s, "inside é");
		CHECK(pg_grammar_accept(s, vocab, 0xa9) == 0, "accept A9");
		check_mask(s, "after é");
		CHECK(pg_grammar_accept(s, vocab, 0xce) == 0, "accept CE");
		CHECK(pg_grammar_allows(s, vocab, 0xb1) && pg_grammar_allows(s, vocab, 0xbf),
		      "CE B1, CE BF refused");
		CHECK(!pg_grammar_allows(s, vocab, 0xb0), "CE B0 allowed");
		check_mask(s, "inside a greek letter");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
	/* the euro sign split as E2, 82 AC and as E2 82, AC */
	g = compile("root ::= \"x\"? \"\xe2\x82\xac\"");
	if (g) {
		s = new_state(g);
		CHECK(pg_grammar_accept(s, vocab, 0xe2) == 0 &&
		      pg_grammar_accept(s, vocab, tok("\x82\xac")) == 0 && pg_grammar_done(s),
		      "E2 + 82 AC");
		pg_grammar_state_free(s);
		s = new_state(g);
		CHECK(pg_grammar_accept(s, vocab, tok("\xe2\x82")) == 0 &&
		      pg_grammar_accept(s, vocab, 0xac) == 0 && pg_grammar_done(s),
		      "E2 82 + AC");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
	/* '.' takes any character, but never bytes that are not UTF-8 */
	g = compile("root ::= .*");
	if (g) {
		static const char *const bad[] = {
			"\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
			"\xf5\x80\x80\x80", "\xff", "\x80", "\xc3\x28",
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			CHECK(match(g, bad[i], strlen(bad[i])) >= 0, "bad UTF-8 #%zu accepted", i);
		expect(g, "\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80\x7f", OK);
		s = new_state(g);
		CHECK(!pg_grammar_allows(s, vocab, 0xc0) && !pg_grammar_allows(s, vocab, 0xf5) &&
		      !pg_grammar_allows(s, vocab, 0x80), "bad lead bytes allowed");
		CHECK(pg_grammar_accept(s, vocab, 0xed) == 0, "ED");
		CHECK(!pg_grammar_allows(s, vocab, 0xa0), "a surrogate allowed");
		CHECK(pg_grammar_allows(s, vocab, 0x9f), "ED 9F refused");
		check_mask(s, "after ED");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
	/* a class only one 4-byte character of */
	g = compile("root ::= [\\U0001F600]");
	if (g) {
		s = new_state(g);
		CHECK(pg_grammar_allows(s, vocab, 0xf0) && !pg_grammar_allows(s, vocab, 0xf1),
		      "F0 / F1");
		CHECK(pg_grammar_accept(s, vocab, 0xf0) == 0, "F0");
		CHECK(pg_grammar_allows(s, vocab, 0x9f) && !pg_grammar_allows(s, vocab, 0x90),
		      "F0 9F / F0 90");
		check_mask(s, "after F0");
		pg_grammar_state_free(s);
		expect(g, "\xf0\x9f\x98\x80", OK);
		expect(g, "\xf0\x9f\x98\x81", 3);
		pg_grammar_free(g);
	}
}

/* accept_all - accept the tokens ids[0 .. n); the index of the first
   refused, or n. */
static int accept_all(struct pg_grammar_state *s, const int *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (pg_grammar_accept(s, vocab, ids[i]))
			return i;
	return n;
}

/* test_pieces - tokens of several characters across rule boundaries. */
static void test_pieces(void)
{
	struct pg_grammar *g = compile(
		"root ::= \"{\" ws pair ( \",\" ws pair )* \"}\"\n"
		"pair ::= key \":\" ws value\n"
		"key ::= \"\\\"\" [a-z]+ \"\\\"\"\n"
		"value ::= \"[\" ws ( num ( \",\" num )* )? \"]\" | num | \"true\" | \"null\"\n"
		"num ::= [0-9]+ ( \".\" [0-9]+ )?\n"
		"ws ::= [ \\t\\n]*\n");
	struct pg_grammar_state *s;

	if (!g)
		return;
	{
		int ids[] = { tok("{\""), tok("abc"), tok("\":"), tok(" ["), tok("12"), ',',
			      tok("3."), '5', ']', ',', tok(" \""), tok("ab"), tok("\":"),
			      tok("true"), '}' };
		int n = (int)(sizeof(ids) / sizeof(ids[0]));

		s = new_state(g);
		CHECK(accept_all(s, ids, n) == n, "{\"abc\": [12,3.5], \"ab\":true}");
		CHECK(pg_grammar_done(s) && pg_grammar_dead(s), "done and dead after '}'");
		CHECK(pg_grammar_allows(s, vocab, T_EOG), "end refused when done");
		CHECK(check_mask(s, "after }") == 1, "only end after '}'");
		pg_grammar_state_free(s);
	}
	{
		int ids[] = { '{', tok("\":") };

		s = new_state(g);
		CHECK(accept_all(s, ids, 2) == 1, "{\": refused (no key)");
		pg_grammar_state_free(s);
	}
	s = new_state(g);
	CHECK(pg_grammar_allows(s, vocab, tok("{\"")), "{\" refused at the start");
	CHECK(!pg_grammar_allows(s, vocab, tok("\":")), "\": allowed at the start");
	CHECK(!pg_grammar_allows(s, vocab, tok("ab")), "ab allowed at the start");
	CHECK(pg_grammar_accept(s, vocab, tok("{\"")) == 0, "accept {\"");
	CHECK(pg_grammar_allows(s, vocab, tok("abc")) && pg_grammar_allows(s, vocab, tok("ab")) &&
	      !pg_grammar_allows(s, vocab, tok("\":")) && !pg_grammar_allows(s, vocab, tok("12")),
	      "in a key");
	CHECK(pg_grammar_accept(s, vocab, tok("ab")) == 0, "accept ab");
	CHECK(pg_grammar_allows(s, vocab, tok("\":")) && pg_grammar_allows(s, vocab, tok("\":\"")) == 0,
	      "\": after a key, \":\" not");
	CHECK(pg_grammar_accept(s, vocab, tok("\":")) == 0, "accept \":");
	CHECK(pg_grammar_allows(s, vocab, tok(" [")) && pg_grammar_allows(s, vocab, tok("[1,")) &&
	      pg_grammar_allows(s, vocab, tok("null")) && pg_grammar_allows(s, vocab, tok("\n  ")),
	      "values after \":");
	CHECK(!pg_grammar_allows(s, vocab, tok("2]")), "2] allowed as a value");
	check_mask(s, "after \":");
	pg_grammar_state_free(s);
	pg_grammar_free(g);
}

/* test_eog - end-of-generation only where done; accept leaves the state. */
static void test_eog(void)
{
	struct pg_grammar *g = compile("root ::= \"ab\" \"c\"*");
	struct pg_grammar_state *s;

	if (!g)
		return;
	s = new_state(g);
	CHECK(!pg_grammar_allows(s, vocab, T_EOG), "end at the start");
	CHECK(pg_grammar_accept(s, vocab, T_EOG) == -EINVAL, "end accepted at the start");
	CHECK(pg_grammar_accept(s, vocab, 'a') == 0, "a");
	CHECK(!pg_grammar_allows(s, vocab, T_EOG) && !pg_grammar_done(s), "end after a");
	CHECK(pg_grammar_accept(s, vocab, 'b') == 0, "b");
	CHECK(pg_grammar_allows(s, vocab, T_EOG) && pg_grammar_done(s), "no end after ab");
	CHECK(!pg_grammar_dead(s), "dead after ab (c may follow)");
	CHECK(pg_grammar_accept(s, vocab, T_EOG) == 0 && pg_grammar_done(s),
	      "end accepted, state kept");
	CHECK(pg_grammar_accept(s, vocab, 'c') == 0 && pg_grammar_done(s), "c after the end");
	CHECK(check_mask(s, "after abc") == 2, "after abc: c and end");
	/* out of range, the control token */
	CHECK(!pg_grammar_allows(s, vocab, -1) && !pg_grammar_allows(s, vocab, N_TOK),
	      "out of range allowed");
	CHECK(pg_grammar_accept(s, vocab, -1) == -EINVAL &&
	      pg_grammar_accept(s, vocab, N_TOK) == -EINVAL, "out of range accepted");
	CHECK(!pg_grammar_allows(s, vocab, T_CTRL) &&
	      pg_grammar_accept(s, vocab, T_CTRL) == -EINVAL, "the control token");
	CHECK(pg_grammar_accept(s, vocab, 'x') == -EINVAL && pg_grammar_done(s),
	      "refused x changed the state");
	pg_grammar_state_free(s);
	pg_grammar_free(g);
	/* dead: nothing may follow */
	g = compile("root ::= \"a\" | \"ab\"");
	if (g) {
		s = new_state(g);
		CHECK(!pg_grammar_dead(s), "dead at the start");
		pg_grammar_accept(s, vocab, 'a');
		CHECK(pg_grammar_done(s) && !pg_grammar_dead(s), "after a");
		pg_grammar_accept(s, vocab, 'b');
		CHECK(pg_grammar_done(s) && pg_grammar_dead(s), "after ab");
		CHECK(check_mask(s, "dead") == 1, "dead: only the end");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
}

/* test_clone - a clone goes on apart from its original. */
static void test_clone(void)
{
	struct pg_grammar *g = compile("root ::= \"a\" ( \"b\" \"c\" | \"d\" \"e\" )");
	struct pg_grammar_state *s, *t;

	if (!g)
		return;
	s = new_state(g);
	CHECK(pg_grammar_accept(s, vocab, 'a') == 0, "a");
	t = pg_grammar_state_clone(s);
	CHECK(t, "clone");
	if (t) {
		CHECK(pg_grammar_accept(s, vocab, 'b') == 0, "b in the original");
		CHECK(pg_grammar_accept(t, vocab, 'd') == 0, "d in the clone");
		CHECK(!pg_grammar_allows(s, vocab, 'e') && pg_grammar_allows(s, vocab, 'c'),
		      "the original after b");
		CHECK(!pg_grammar_allows(t, vocab, 'c') && pg_grammar_allows(t, vocab, 'e'),
		      "the clone after d");
		pg_grammar_state_free(s);
		s = NULL;
		CHECK(pg_grammar_accept(t, vocab, 'e') == 0 && pg_grammar_done(t),
		      "the clone after its original is freed");
		pg_grammar_state_free(t);
	}
	pg_grammar_state_free(s);
	pg_grammar_free(g);
}

/* test_limits - past PG_GRAMMAR_MAX_DEPTH or _STACKS: -E2BIG, state kept. */
static void test_limits(void)
{
	struct pg_grammar *g = compile("root ::= \"(\" root \")\" | \"x\"");
	struct pg_grammar_state *s;
	int i, rc = 0;

	if (g) {
		s = new_state(g);
		for (i = 0; i < PG_GRAMMAR_MAX_DEPTH + 10 && !rc; i++)
			rc = pg_grammar_accept(s, vocab, '(');
		CHECK(rc == -E2BIG, "deep nesting: rc %d after %d", rc, i);
		CHECK(!pg_grammar_allows(s, vocab, '(') && pg_grammar_allows(s, vocab, 'x'),
		      "past the depth: ( allowed or x refused");
		CHECK(pg_grammar_accept(s, vocab, 'x') == 0 &&
		      pg_grammar_accept(s, vocab, ')') == 0, "x ) at the depth limit");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
	/* more parses at each a: one per count of b's to come */
	g = compile("root ::= \"a\" root \"b\" | \"a\" root | \"\"");
	if (g) {
		s = new_state(g);
		rc = 0;
		for (i = 0; i < PG_GRAMMAR_MAX_STACKS + 10 && !rc; i++)
			rc = pg_grammar_accept(s, vocab, 'a');
		CHECK(rc == -E2BIG, "ambiguity: rc %d after %d", rc, i);
		CHECK(pg_grammar_allows(s, vocab, 'b') && pg_grammar_done(s),
		      "state changed by -E2BIG");
		pg_grammar_state_free(s);
		pg_grammar_free(g);
	}
}

/* ---- masks ---- */

/* random_walk - from the start, steps random tokens of g's masks, each mask
   checked against pg_grammar_allows; a state freed at the end. */
static void random_walk(struct pg_grammar *g, int steps, const char *what)
{
	struct pg_grammar_state *s = new_state(g);
	uint32_t bits[WORDS];

	for (int k = 0; k < steps; k++) {
		int n = check_mask(s, what), pick;

		if (n <= 0)
			break;
		pg_grammar_mask(s, vocab, bits);
		pick = (int)rnd((uint32_t)n);
		for (int id = 0; id < N_TOK; id++) {
			if (!((bits[id / 32] >> (id % 32)) & 1u) || pick--)
				continue;
			if (id == T_EOG) {
				CHECK(pg_grammar_done(s), "%s: end in the mask, not done", what);
				k = steps;
			} else {
				int rc = pg_grammar_accept(s, vocab, id);

				CHECK(rc == 0 || rc == -E2BIG, "%s: token %d of the mask: %d", what,
				      id, rc);
			}
			break;
		}
	}
	pg_grammar_state_free(s);
}

static const char json_gbnf[] =
	"root ::= value\n"
	"value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
	"object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
	"array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
	"string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
	"number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
	"ws ::= [ \\t\\n]{0,8}\n";

/* test_masks - masks equal allows along random walks of several grammars. */
static void test_masks(void)
{
	static const char *const grammars[] = {
		json_gbnf,
		"root ::= ( [a-c]+ | \"abc\" \"\\xc3\\xa9\"? | \"(\" root \")\" ){1,5}",
		"root ::= [^a]* \"a\" .{2}",
		"root ::= \"x\"{3,6} ( \"y\" | \"\\u20ac\" )*",
		"root ::= ( \"\\\\n\" | \"\\\\u00\" [0-9a-f]{2} | [a-z] )+",
	};

	for (size_t i = 0; i < sizeof(grammars) / sizeof(grammars[0]); i++) {
		struct pg_grammar *g = compile(grammars[i]);
		char what[32];

		if (!g)
			continue;
		snprintf(what, sizeof(what), "grammar %zu", i);
		for (int w = 0; w < 12; w++)
			random_walk(g, 40, what);
		pg_grammar_free(g);
	}
}

/* test_mask_cache - a repeated state's mask is a hit; stats add up. */
static void test_mask_cache(void)
{
	struct pg_grammar *g = compile("root ::= \"<\" [a-z]* \">\"");
	struct pg_grammar_state *s;
	struct pg_grammar_stats st;
	uint32_t bits[WORDS], again[WORDS];
	int n;

	if (!g)
		return;
	s = new_state(g);
	pg_grammar_accept(s, vocab, '<');
	n = pg_grammar_mask(s, vocab, bits);
	pg_grammar_stats(g, &st);
	CHECK(st.mask_misses == 1 && st.mask_hits == 0 && st.cached_masks == 1,
	      "first mask: %llu misses, %llu hits, %zu cached",
	      (unsigned long long)st.mask_misses, (unsigned long long)st.mask_hits,
	      st.cached_masks);
	for (int i = 0; i < 10; i++) {
		pg_grammar_accept(s, vocab, 'a' + i);
		CHECK(pg_grammar_mask(s, vocab, again) == n && !memcmp(bits, again, sizeof(bits)),
		      "the mask after a letter differs");
	}
	pg_grammar_stats(g, &st);
	CHECK(st.mask_misses == 1 && st.mask_hits == 10, "after 10 letters: %llu misses, "
	      "%llu hits", (unsigned long long)st.mask_misses, (unsigned long long)st.mask_hits);
	CHECK(st.cached_states > 0 && st.cache_bytes > 0, "no cached states");
	/* a clone's mask is the same state's */
	{
		struct pg_grammar_state *t = pg_grammar_state_clone(s);

		CHECK(pg_grammar_mask(t, vocab, again) == n, "clone's mask");
		pg_grammar_stats(g, &st);
		CHECK(st.mask_hits == 11, "clone's mask not a hit");
		pg_grammar_state_free(t);
	}
	/* dropped by pg_grammar_set_cache_limit, then a miss again */
	pg_grammar_set_cache_limit(g, 0, 0);
	pg_grammar_stats(g, &st);
	CHECK(st.cached_masks == 0, "masks kept after set_cache_limit");
	CHECK(pg_grammar_mask(s, vocab, again) == n && !memcmp(bits, again, sizeof(bits)),
	      "mask after set_cache_limit");
	pg_grammar_stats(g, &st);
	CHECK(st.mask_misses == 2 && st.cached_masks == 0, "mask limit 0 keeps masks");
	CHECK(st.cached_states > 0, "no states cached after a mask");
	/* another vocabulary: its own masks, then the first's again */
	pg_grammar_set_cache_limit(g, PG_GRAMMAR_STATE_CACHE_BYTES, PG_GRAMMAR_MASK_CACHE_BYTES);
	{
		static char b[128];
		const char *pieces[128];
		size_t lens[128];
		struct pg_grammar_vocab *v2 = NULL;
		uint32_t m2[4];

		for (int i = 0; i < 128; i++) {
			b[i] = (char)i;
			pieces[i] = &b[i];
			lens[i] = 1;
		}
		CHECK(pg_grammar_vocab_from_pieces(pieces, lens, NULL, 128, &v2) == 0, "v2");
		CHECK(pg_grammar_mask(s, vocab, again) == n, "mask before v2");
		if (v2) {
			CHECK(pg_grammar_mask(s, v2, m2) == 27 && m2[3] == 0x07fffffeu &&
			      m2[1] == 1u << ('>' - 32) && !m2[0] && !m2[2],
			      "mask over v2: %x", m2[3]);
			CHECK(pg_grammar_mask(s, vocab, again) == n && !memcmp(bits, again, sizeof(bits)),
			      "mask after v2");
		}
		pg_grammar_vocab_free(v2);
	}
	pg_grammar_state_free(s);
	pg_grammar_free(g);
}

/* walk_digest - a hash of the masks, and of some of allows' answers, along
   text fed byte by byte (rounds times over). */
static uint64_t walk_digest(struct pg_grammar *g, const char *text, int rounds)
{
	struct pg_grammar_state *s = new_state(g);
	uint64_t h = 1469598103934665603ull;
	uint32_t bits[WORDS];

	for (int r = 0; r < rounds; r++) {
		for (size_t i = 0; text[i]; i++) {
			int n = pg_grammar_mask(s, vocab, bits);

			h = (h ^ (uint64_t)n) * 1099511628211ull;
			for (int w = 0; w < WORDS; w++)
				h = (h ^ bits[w]) * 1099511628211ull;
			for (int id = 0; id < N_TOK; id += 7)
				h = (h ^ (uint64_t)pg_grammar_allows(s, vocab, id)) * 1099511628211ull;
			if (pg_grammar_accept(s, vocab, (unsigned char)text[i])) {
				h ^= 0xdead;
				break;
			}
		}
	}
	pg_grammar_state_free(s);
	return h;
}

/* test_cache_limits - tiny caches give the answers big ones do. */
static void test_cache_limits(void)
{
	const char *text = "{\"key\": [1, 2.5e3, \"x\\u00e9y\", {\"a\": null}], \"b\": true}";
	struct pg_grammar *g = compile(json_gbnf), *h = compile(json_gbnf);
	struct pg_grammar *c = compile("root ::= [a-z]{0,4000} \"!\"");
	struct pg_grammar_stats st;
	uint64_t want, got;

	if (g && h) {
		want = walk_digest(g, text, 1);
		pg_grammar_set_cache_limit(h, 1, 1);
		got = walk_digest(h, text, 1);
		CHECK(want == got, "tiny limits change the answers (json)");
		pg_grammar_set_cache_limit(h, 1, 0);
		got = walk_digest(h, text, 1);
		CHECK(want == got, "no mask cache changes the answers (json)");
	}
	if (c) {
		char letters[3001];
		struct pg_grammar *d = compile("root ::= [a-z]{0,4000} \"!\"");

		for (int i = 0; i < 3000; i++)
			letters[i] = (char)('a' + i % 26);
		letters[3000] = '\0';
		pg_grammar_set_cache_limit(c, 0, 4096);
		if (d) {
			want = walk_digest(d, letters, 1);
			got = walk_digest(c, letters, 1);
			CHECK(want == got, "tiny limits change the answers (counts)");
			pg_grammar_stats(c, &st);
			CHECK(st.flushes > 0, "no flush with a 64 KiB state cache");
			CHECK(st.cache_bytes < (256u << 10), "cache %zu bytes over a 64 KiB limit",
			      st.cache_bytes);
			pg_grammar_free(d);
		}
	}
	pg_grammar_free(g);
	pg_grammar_free(h);
	pg_grammar_free(c);
}

/* test_mask_fallback - a mask walk that passes the state cache's bound
   (long tokens, each byte a new set) falls back to token by token and
   still gives the answers of a grammar with the default bounds. */
static void test_mask_fallback(void)
{
	enum { NB = 256, NL = 8, N = NB + NL + 1 };
	static char bytes[NB], longs[NL][401];
	const char *pieces[N];
	size_t lens[N];
	uint8_t eog[N];
	uint32_t a[(N + 31) / 32], b[(N + 31) / 32];
	struct pg_grammar_vocab *v = NULL;
	const char *text = "root ::= [a-z]{0,5000} \"!\"";
	struct pg_grammar *small = compile(text), *big = compile(text);
	struct pg_grammar_state *s, *t;
	struct pg_grammar_stats st;

	memset(eog, 0, sizeof(eog));
	for (int i = 0; i < NB; i++) {
		bytes[i] = (char)i;
		pieces[i] = &bytes[i];
		lens[i] = 1;
	}
	for (int i = 0; i < NL; i++) {
		for (int k = 0; k < 400; k++)
			longs[i][k] = (char)('a' + (k * (i + 1)) % 26);
		longs[i][i == 3 ? 200 : 399] = '!';	/* one with '!' in the middle */
		pieces[NB + i] = longs[i];
		lens[NB + i] = 400;
	}
	pieces[N - 1] = "";
	lens[N - 1] = 0;
	eog[N - 1] = 1;
	CHECK(pg_grammar_vocab_from_pieces(pieces, lens, eog, N, &v) == 0, "long pieces");
	if (!v || !small || !big)
		goto out;
	pg_grammar_set_cache_limit(small, 0, 0);
	s = new_state(small);
	t = new_state(big);
	for (int step = 0; step < 12; step++) {
		int n = pg_grammar_mask(s, v, a), m = pg_grammar_mask(t, v, b), bad = 0;

		CHECK(n == m && !memcmp(a, b, sizeof(a)), "step %d: %d tokens, want %d", step, n, m);
		for (int id = 0; id < N; id++)
			if (pg_grammar_allows(s, v, id) != (int)((a[id / 32] >> (id % 32)) & 1u) &&
			    bad++ < 3)
				CHECK(0, "step %d: token %d: mask and allows differ", step, id);
		CHECK(pg_grammar_accept(s, v, NB + step % NL) == pg_grammar_accept(t, v, NB + step % NL),
		      "step %d: accept differs", step);
	}
	pg_grammar_stats(small, &st);
	CHECK(st.flushes > 0, "no flush: the walk never passed the bound");
	pg_grammar_state_free(s);
	pg_grammar_state_free(t);
out:
	pg_grammar_vocab_free(v);
	pg_grammar_free(small);
	pg_grammar_free(big);
}

/* ---- malformed grammars ---- */

/* test_errors - each malformed grammar refused with where and why. */
static void test_errors(void)
{
	static const struct {
		const char *text;
		int line, col;
		const char *what;
	} e[] = {
		{ "root ::= foo\n", 1, 10, "rule 'foo' is used but never defined" },
		{ "root ::= a\na ::= \"x\" b\n", 2, 11, "rule 'b' is used but never defined" },
		{ "root ::= \"a\"\nroot ::= \"b\"\n", 2, 1, "rule 'root' is defined twice" },
		{ "root = \"a\"\n", 1, 6, "expected '::='" },
		{ "root\n", 1, 5, "expected '::='" },
		{ "root ::= \"abc\n", 1, 10, "unterminated string" },
		{ "root ::= \"abc", 1, 10, "unterminated string" },
		{ "root ::= [abc\n", 1, 10, "unterminated character class" },
		{ "root ::= ( \"a\"\n", 1, 10, "unclosed '('" },
		{ "root ::= \"a\" )\n", 1, 14, "unexpected ')'" },
		{ "root ::= \"\\q\"\n", 1, 11, "bad escape" },
		{ "root ::= \"\\x4\"\n", 1, 11, "bad escape" },
		{ "root ::= [\\uD800]\n", 1, 11, "not a Unicode character" },
		{ "root ::= []\n", 1, 10, "empty character class" },
		{ "root ::= [z-a]\n", 1, 11, "bad range" },
		{ "root ::= * \"a\"\n", 1, 10, "nothing before it to repeat" },
		{ "root ::= \"a\"{3,1}\n", 1, 13, "bad repetition bounds {3,1}" },
		{ "root ::= \"a\"{x}\n", 1, 13, "bad repetition bounds" },
		{ "root ::= \"a\"{2\n", 1, 13, "bad repetition bounds" },
		{ "root ::= \"a\"{100001}\n", 1, 14, "above the limit" },
		{ "root ::= <foo>\n", 1, 10, "not supported" },
		{ "root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n", 2, 1,
		  "left recursion in rule 'expr'" },
		{ "root ::= a\na ::= b \"x\"\nb ::= c | \"z\"\nc ::= a \"y\"\n", 2, 1,
		  "left recursion in rule 'a'" },
		{ "root ::= opt root \"a\" | \"b\"\nopt ::= \"c\"?\n", 1, 1,
		  "left recursion in rule 'root'" },
		{ "root ::= ( root \"a\" )* \"b\"\n", 1, 1, "left recursion in rule 'root'" },
		{ "root ::= ( \"\" )*\n", 1, 16, "may match nothing" },
		{ "root ::= ( \"a\"? )+\n", 1, 18, "may match nothing" },
		{ "ws ::= [ ]*\nroot ::= \"x\" ws{2,5}\n", 2, 16, "may match nothing" },
		{ "foo ::= \"a\"\n", 1, 1, "no rule 'root'" },
		{ "", 1, 1, "no rule 'root'" },
		{ "# only a comment\n\n", 1, 1, "no rule 'root'" },
		{ "root ::= \"\xff\"\n", 1, 11, "not UTF-8" },
		{ "root ::= \"a\"\n | \"b\" ::= \"c\"\n", 2, 8, "'::=' inside a rule" },
		{ "root ::= \"a\" \"b\" ]\n", 1, 18, "unexpected ']'" },
	};
	int n = (int)(sizeof(e) / sizeof(e[0]));

	for (int i = 0; i < n; i++)
		expect_error(e[i].text, strlen(e[i].text), e[i].line, e[i].col, e[i].what);
	/* the text over the limit */
	{
		size_t len = PG_GRAMMAR_MAX_TEXT + 1;
		char *big = xmalloc(len);

		memset(big, '#', len);
		memcpy(big, "root ::= \"a\"\n", 13);
		expect_error(big, len, 2, PG_GRAMMAR_MAX_TEXT - 12, "more than the limit");
		free(big);
	}
	/* too many ways to parse the start */
	{
		size_t cap = 16 * (PG_GRAMMAR_MAX_STACKS + 10) + 32, k;
		char *t = xmalloc(cap);

		k = (size_t)snprintf(t, cap, "root ::= \"s0\"");
		for (int i = 1; i <= PG_GRAMMAR_MAX_STACKS; i++)
			k += (size_t)snprintf(t + k, cap - k, " | \"s%d\"", i);
		expect_error(t, k, 1, 1, "ways to parse");
		free(t);
	}
	/* a rule name too many */
	{
		size_t cap = 24 * (PG_GRAMMAR_MAX_RULES + 2) + 32, k = 0;
		char *t = xmalloc(cap);

		for (int i = 0; i <= PG_GRAMMAR_MAX_RULES; i++)
			k += (size_t)snprintf(t + k, cap - k, "r%d ::= \"x\"\n", i);
		expect_error(t, k, PG_GRAMMAR_MAX_RULES + 1, 1, "rules (the limit)");
		free(t);
	}
	/* a small buffer truncates; no buffer at all is allowed */
	{
		char err[8];
		struct pg_grammar *g;

		CHECK(pg_grammar_compile("x", 1, &g, err, sizeof(err)) == -EINVAL &&
		      strlen(err) == 7, "truncated message");
		CHECK(pg_grammar_compile("x", 1, &g, NULL, 0) == -EINVAL && !g, "no buffer");
	}
	printf("%d malformed grammars\n", n + 4);
}

/* ---- random and mutated grammars ---- */

/* random_item - one item of a random grammar into s. */
static void random_item(char *s, size_t cap, int depth, int n_rules)
{
	static const char *const atoms[] = {
		"\"a\"", "\"bc\"", "[a-c]", "[^a]", ".", "\"\\xc3\\xa9\"", "[\\u00e0-\\u00ff]",
		"\"(\"", "\")\"", "[0-9]", "\" \"", "\"\\\\\"", "\"xy\"", "[^\\n]", "\"z\"",
	};
	static const char *const ops[] = {
		"", "", "", "", "", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}",
	};
	size_t k = strlen(s);
	int r = (int)rnd(10);

	if (k + 64 > cap)
		return;
	if (r < 5 || depth <= 0 || (r < 8 && !n_rules)) {
		snprintf(s + k, cap - k, "%s", atoms[rnd(sizeof(atoms) / sizeof(atoms[0]))]);
	} else if (r < 8) {
		/* now and then a rule that is not there */
		snprintf(s + k, cap - k, "r%u", rnd((uint32_t)n_rules + !rnd(20)));
	} else {
		strcat(s, "( ");
		random_item(s, cap, depth - 1, n_rules);
		if (rnd(2)) {
			strcat(s, " | ");
			random_item(s, cap, depth - 1, n_rules);
		}
		strcat(s, " )");
	}
	strcat(s, ops[rnd(sizeof(ops) / sizeof(ops[0]))]);
	strcat(s, " ");
}

/* random_grammar - a random text: root and rules r0 .. r(n-1). */
static void random_grammar(char *s, size_t cap)
{
	int n = (int)rnd(5);

	s[0] = '\0';
	for (int i = -1; i < n; i++) {
		size_t k = strlen(s);
		int items = 1 + (int)rnd(4);

		if (i < 0)
			snprintf(s + k, cap - k, "root ::= ");
		else
			snprintf(s + k, cap - k, "r%d ::= ", i);
		for (int j = 0; j < items; j++) {
			if (j && !rnd(4))
				strcat(s, rnd(2) ? "| " : "\n  | ");
			random_item(s, cap, 3, n);
		}
		strcat(s, "\n");
	}
}

/* fuzz_one - text compiles or says why; when it compiles, a short walk. */
static void fuzz_one(const char *text, size_t len, int *ok)
{
	struct pg_grammar *g = NULL;
	char err[256];
	int rc = pg_grammar_compile(text, len, &g, err, sizeof(err));

	CHECK(rc == 0 || rc == -EINVAL, "fuzz: rc %d for %.*s", rc, (int)len, text);
	CHECK(!rc == !!g, "fuzz: rc %d, grammar %p", rc, (void *)g);
	CHECK(rc || !err[0], "fuzz: a message on success");
	CHECK(!rc || !strncmp(err, "line ", 5), "fuzz: message '%s' for %.*s", err,
	      (int)len, text);
	if (rc)
		return;
	(*ok)++;
	random_walk(g, 6, "fuzz");
	pg_grammar_free(g);
}

/* test_fuzz - random grammars, and good ones mutated byte by byte. */
static void test_fuzz(void)
{
	static const char mut[] = "\"[]()|*+?{},:=#\\-^.aZ0 \n\t\xc3\xa9\xff";
	static const char *const good[] = {
		json_gbnf,
		"root ::= ( \"(\" root \")\" )*",
		"root ::= [a-z]{2,5} ( \",\" [^,\\n]* )+ \"\\n\"",
		"root ::= a | b\na ::= \"x\" b?\nb ::= [\\x41-\\x5A]+ \"\\u00e9\"",
	};
	int rounds = getenv("PAGODA_SANITIZERS") ? 800 : 2500, ok = 0, n = 0;

	for (int i = 0; i < rounds; i++, n++) {
		char s[4096];

		random_grammar(s, sizeof(s));
		fuzz_one(s, strlen(s), &ok);
	}
	for (int i = 0; i < rounds; i++, n++) {
		char s[2048];
		const char *src = good[rnd(sizeof(good) / sizeof(good[0]))];
		size_t len = strlen(src);
		int edits = 1 + (int)rnd(4);

		memcpy(s, src, len + 1);
		for (int e = 0; e < edits && len && len + 2 < sizeof(s); e++) {
			size_t at = rnd((uint32_t)len);
			int op = (int)rnd(3);

			if (op == 0) {
				s[at] = mut[rnd(sizeof(mut) - 1)];
			} else if (op == 1) {
				memmove(s + at, s + at + 1, len - at);
				len--;
			} else {
				memmove(s + at + 1, s + at, len - at + 1);
				s[at] = mut[rnd(sizeof(mut) - 1)];
				len++;
			}
		}
		fuzz_one(s, len, &ok);
	}
	/* random bytes */
	for (int i = 0; i < rounds / 4; i++, n++) {
		char s[64];
		size_t len = 1 + rnd(sizeof(s));

		for (size_t k = 0; k < len; k++)
			s[k] = (char)rnd(256);
		if (len > 9)
			memcpy(s, "root ::= ", 9);
		fuzz_one(s, len, &ok);
	}
	printf("%d random and mutated grammars, %d compiled\n", n, ok);
}

/* ---- other API ---- */

/* test_api - hashes, vocabulary arguments. */
static void test_api(void)
{
	struct pg_grammar *a = compile("root ::= \"a\""), *b = compile("root ::= \"a\"");
	struct pg_grammar *c = compile("root ::= \"b\"");
	struct pg_grammar_vocab *v = (struct pg_grammar_vocab *)&v;
	const char *p[2] = { "a", NULL };
	size_t l[2] = { 1, 1 };

	if (a && b && c)
		CHECK(pg_grammar_hash(a) == pg_grammar_hash(b) &&
		      pg_grammar_hash(a) != pg_grammar_hash(c), "hashes");
	pg_grammar_free(a);
	pg_grammar_free(b);
	pg_grammar_free(c);
	pg_grammar_free(NULL);
	pg_grammar_state_free(NULL);
	pg_grammar_vocab_free(NULL);
	CHECK(pg_grammar_vocab_from_pieces(p, l, NULL, -1, &v) == -EINVAL && !v, "n < 0");
	CHECK(pg_grammar_vocab_from_pieces(p, l, NULL, 2, &v) == -EINVAL && !v, "NULL piece");
	l[1] = 0;
	CHECK(pg_grammar_vocab_from_pieces(p, l, NULL, 2, &v) == 0 && v, "2 pieces");
	if (v)
		CHECK(pg_grammar_vocab_size(v) == 2, "size %d", pg_grammar_vocab_size(v));
	pg_grammar_vocab_free(v);
	CHECK(pg_grammar_vocab_from_pieces(NULL, NULL, NULL, 0, &v) == 0 && v &&
	      pg_grammar_vocab_size(v) == 0, "an empty vocabulary");
	pg_grammar_vocab_free(v);
	CHECK(pg_grammar_vocab_size(vocab) == N_TOK, "the test vocabulary's size");
}

/* ---- timings ---- */

/* test_compile_time - a generated 500-rule grammar. */
static void test_compile_time(void)
{
	size_t cap = 500 * 160, k = 0;
	char *t = xmalloc(cap);
	struct pg_grammar *g;
	double t0, t1;

	k += (size_t)snprintf(t + k, cap - k, "root ::= r0 ( \",\" r0 )*\n");
	for (int i = 0; i < 499; i++)
		k += (size_t)snprintf(t + k, cap - k, "r%d ::= \"k%d\" ws ( r%d | [a-z]{1,8} "
				      "( \":\" r%d )? | \"[\" ws r%d* \"]\" )\n", i, i, i + 1,
				      (i * 7 + 3) % 500, (i * 13) % 500);
	k += (size_t)snprintf(t + k, cap - k, "r499 ::= [0-9]+\nws ::= [ \\t]*\n");
	t0 = now_ms();
	g = compile(t);
	t1 = now_ms();
	printf("compile of a 500-rule grammar (%zu bytes): %.3f ms\n", k, t1 - t0);
	if (g)
		random_walk(g, 30, "500 rules");
	pg_grammar_free(g);
	free(t);
}

/* synth_piece - a random token text like a BPE vocabulary's into s; its
   length. */
static size_t synth_piece(char *s, int i)
{
	static const char *const punct[] = {
		"\":", "{\"", " [", "\",", "},", "],", "\":\"", " {", "\n", "  ", "\\n", "\\\"",
		"://", ".", ",", ";", "()", "=>", "\"\"", " -", "...",
	};
	static const char *const utf[] = {
		"\xc3\xa9", "\xc3\xbc", "\xe2\x80\x99", "\xe2\x82\xac", "\xe6\x97\xa5", "\xe6\x9c\xac",
		"\xe4\xb8\xad", "\xd0\xb0", "\xd0\xbf", "\xf0\x9f\x98\x80", "\xce\xb1",
	};
	size_t n = 0;
	int kind = (int)rnd(20);

	if (i < 256) {
		s[0] = (char)i;
		return 1;
	}
	if (kind < 2)
		return (size_t)sprintf(s, "%s", punct[rnd(sizeof(punct) / sizeof(punct[0]))]);
	if (kind < 4) {
		for (int k = (int)rnd(3); k >= 0; k--)
			n += (size_t)sprintf(s + n, "%s", utf[rnd(sizeof(utf) / sizeof(utf[0]))]);
		return n;
	}
	if (kind < 5)
		return (size_t)sprintf(s, "%u", rnd(1000));
	if (rnd(2))
		s[n++] = ' ';
	if (!rnd(5))
		s[n++] = (char)('A' + rnd(26));
	for (int k = 1 + (int)rnd(9); k > 0; k--)
		s[n++] = (char)('a' + rnd(26));
	return n;
}

/* time_mask - the cost of masks in the states after prefix, on v. */
static void time_mask(struct pg_grammar *g, const struct pg_grammar_vocab *v, int n,
		      const char *prefix, const char *what)
{
	struct pg_grammar_state *s = new_state(g);
	uint32_t *bits = xmalloc(((size_t)n + 31) / 32 * sizeof(*bits));
	size_t at;
	double t0, t1, t2, t3;
	int allowed, reps = 200;

	pg_grammar_set_cache_limit(g, PG_GRAMMAR_STATE_CACHE_BYTES, PG_GRAMMAR_MASK_CACHE_BYTES);
	/* the prefix, one byte token each (tokens 0 .. 255 are the bytes) */
	for (at = 0; prefix[at]; at++)
		if (pg_grammar_accept(s, v, (unsigned char)prefix[at]))
			break;
	t0 = now_ms();
	allowed = pg_grammar_mask(s, v, bits);		/* cold: transitions too */
	t1 = now_ms();
	pg_grammar_set_cache_limit(g, PG_GRAMMAR_STATE_CACHE_BYTES, 0);
	pg_grammar_mask(s, v, bits);
	t2 = now_ms();
	for (int r = 0; r < reps; r++)
		pg_grammar_mask(s, v, bits);		/* misses, transitions warm */
	t3 = now_ms();
	printf("  %-22s %6d allowed: cold miss %.3f ms, warm miss %.3f ms", what, allowed,
	       t1 - t0, (t3 - t2) / reps);
	pg_grammar_set_cache_limit(g, PG_GRAMMAR_STATE_CACHE_BYTES, PG_GRAMMAR_MASK_CACHE_BYTES);
	pg_grammar_mask(s, v, bits);
	t0 = now_ms();
	for (int r = 0; r < reps * 10; r++)
		pg_grammar_mask(s, v, bits);
	t1 = now_ms();
	printf(", hit %.4f ms", (t1 - t0) / (reps * 10));
	t0 = now_ms();
	for (int r = 0; r < reps * 100; r++)
		pg_grammar_allows(s, v, (int32_t)rnd((uint32_t)n));
	t1 = now_ms();
	printf(", allows %.3f us\n", (t1 - t0) * 1e3 / (reps * 100));
	pg_grammar_state_free(s);
	free(bits);
}

/* test_mask_time - masks over a 49,152-token synthetic vocabulary. */
static void test_mask_time(void)
{
	enum { N = 49152 };
	char *buf = xmalloc((size_t)N * 40);
	const char **pieces = xmalloc(N * sizeof(*pieces));
	size_t *lens = xmalloc(N * sizeof(*lens)), at = 0;
	uint8_t *eog = calloc(N, 1);
	struct pg_grammar_vocab *v = NULL;
	struct pg_grammar *g = compile(json_gbnf);
	double t0, t1;

	if (!eog)
		exit(1);
	for (int i = 0; i < N; i++) {
		pieces[i] = buf + at;
		lens[i] = synth_piece(buf + at, i);
		at += lens[i];
	}
	eog[N - 1] = 1;
	lens[N - 1] = 0;
	t0 = now_ms();
	CHECK(pg_grammar_vocab_from_pieces(pieces, lens, eog, N, &v) == 0, "49k vocabulary");
	t1 = now_ms();
	printf("a vocabulary of %d synthetic tokens: %.2f ms to prepare\n", N, t1 - t0);
	if (g && v) {
		time_mask(g, v, N, "", "start");
		time_mask(g, v, N, "{\"ke", "in a string");
		time_mask(g, v, N, "{\"key\": ", "a value");
		time_mask(g, v, N, "[12", "in a number");
	}
	pg_grammar_free(g);
	pg_grammar_vocab_free(v);
	free(buf);
	free(pieces);
	free(lens);
	free(eog);
}


/* ---- a real vocabulary ---- */

/* check_real_mask - the mask of s over v equals allows for every token;
   the time of the mask. */
static double check_real_mask(const struct pg_grammar_state *s,
			      const struct pg_grammar_vocab *v, uint32_t *bits)
{
	int n = pg_grammar_vocab_size(v), bad = 0, cnt = 0, got;
	double t0 = now_ms(), t1;

	got = pg_grammar_mask(s, v, bits);
	t1 = now_ms();
	for (int id = 0; id < n; id++) {
		int a = pg_grammar_allows(s, v, id), b = (int)((bits[id / 32] >> (id % 32)) & 1u);

		cnt += b;
		if (a != b && bad++ < 3)
			CHECK(0, "real vocabulary: token %d: allows %d, mask %d", id, a, b);
	}
	CHECK(got == cnt, "real vocabulary: mask says %d, has %d", got, cnt);
	return t1 - t0;
}

/* random_walk_real - a random walk of the JSON grammar over v, each mask
   checked (a few hundred steps). */
static void random_walk_real(struct pg_grammar *g, const struct pg_grammar_vocab *v,
			     uint32_t *bits)
{
	struct pg_grammar_state *s = new_state(g);
	int nv = pg_grammar_vocab_size(v), steps = getenv("PAGODA_SANITIZERS") ? 20 : 150;

	for (int k = 0; k < steps; k++) {
		int n, pick;

		check_real_mask(s, v, bits);
		n = pg_grammar_mask(s, v, bits);
		if (n <= 0)
			break;
		pick = (int)rnd((uint32_t)n);
		for (int id = 0; id < nv; id++) {
			if (!((bits[id / 32] >> (id % 32)) & 1u) || pick--)
				continue;
			CHECK(pg_grammar_accept(s, v, id) == 0, "real walk: token %d", id);
			break;
		}
	}
	pg_grammar_state_free(s);
}

/* test_real_vocab - SmolLM2's tokenizer: a JSON text through the grammar. */
static void test_real_vocab(void)
{
	static const char json[] = "{\"name\": \"Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\", "
				   "\"tags\": [\"a\", \"b\\n\"], \"n\": -12.5e3, \"ok\": true}";
	const char *d = getenv("PAGODA_MODEL_DIR"), *home = getenv("HOME");
	char path[4096], err[512];
	struct pg_tokenizer *t = NULL;
	struct pg_grammar_vocab *v = NULL;
	struct pg_grammar *g = NULL;
	struct pg_grammar_state *s = NULL;
	int32_t ids[256];
	uint32_t *bits = NULL;
	double t0, worst = 0, sum = 0;
	int64_t n;
	int rc, nv, i;

	if (d)
		snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", d);
	else
		snprintf(path, sizeof(path), "%s/.cache/pagoda/models/SmolLM2-135M-Instruct.Q4_1.gguf",
			 home ? home : "");
	rc = vocab_only_load(path, &t, err, sizeof(err));
	if (rc == -ENOENT) {
		printf("SKIP: %s is absent: the real vocabulary's checks\n", path);
		return;
	}
	CHECK(!rc, "%s", err);
	if (rc)
		return;
	nv = pg_tokenizer_n_vocab(t);
	t0 = now_ms();
	rc = pg_grammar_vocab_create(t, &v);
	printf("SmolLM2's vocabulary (%d tokens): %.2f ms to prepare\n", nv, now_ms() - t0);
	CHECK(rc == 0 && v && pg_grammar_vocab_size(v) == nv, "pg_grammar_vocab_create: %d", rc);
	g = compile(json_gbnf);
	n = pg_tokenize(t, json, strlen(json), 0, 0, ids, 256);
	CHECK(n > 0 && n <= 256, "tokenize: %lld", (long long)n);
	if (rc || !g || n <= 0 || n > 256)
		goto out;
	bits = xmalloc(((size_t)nv + 31) / 32 * sizeof(*bits));
	s = new_state(g);
	for (i = 0; i < n; i++) {
		double ms = check_real_mask(s, v, bits);

		sum += ms;
		if (ms > worst)
			worst = ms;
		CHECK(pg_grammar_allows(s, v, ids[i]), "token %d (%d) of the text refused", i,
		      ids[i]);
		CHECK(!pg_grammar_allows(s, v, pg_tokenizer_eos(t)), "end before token %d", i);
		if (pg_grammar_accept(s, v, ids[i]))
			break;
	}
	CHECK(i == n && pg_grammar_done(s), "the text not accepted whole (%d of %lld)", i,
	      (long long)n);
	CHECK(pg_grammar_allows(s, v, pg_tokenizer_eos(t)), "end refused after the text");
	check_real_mask(s, v, bits);
	printf("  %lld tokens of JSON, masks checked: %.3f ms a mask on average, %.3f ms "
	       "at most\n", (long long)n, sum / (double)n, worst);
	random_walk_real(g, v, bits);
out:
	free(bits);
	pg_grammar_state_free(s);
	pg_grammar_free(g);
	pg_grammar_vocab_free(v);
	pg_tokenizer_free(t);
}

/* main - every test, then the summary. */
int main(void)
{
	vocab_init();
	test_literals();
	test_classes();
	test_groups();
	test_repetitions();
	test_rules();
	test_utf8();
	test_pieces();
	test_eog();
	test_clone();
	test_limits();
	test_masks();
	test_mask_cache();
	test_cache_limits();
	test_mask_fallback();
	test_errors();
	test_fuzz();
	test_api();
	test_compile_time();
	test_mask_time();
	test_real_vocab();
	pg_grammar_vocab_free(vocab);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", (int)failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
