/*
 * test_escape.c - common/escape.h, the one way pagodad and pagodactl show a
 * string someone else chose: each mode's form of controls, DEL, C1 and
 * bidi controls, invalid UTF-8, backslash and quotes; valid UTF-8 kept;
 * cuts only at whole escapes; the stream form (pg_escape_fput) whole,
 * NULs included; and, over every byte value in every position, no output
 * byte a terminal would obey.
 */
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "tests/check.h"

static void expect(const char *in, size_t n, int mode, const char *want)
{
	char out[512];

	pg_escape_str(out, sizeof(out), in, n, mode);
	CHECK(!strcmp(out, want), "mode %#x: got '%s', want '%s'", mode, out, want);
}

static void test_forms(void)
{
	static const char pwn[] = "\x1b]0;pwn\x07\x1b[2J";

	expect(pwn, sizeof(pwn), PG_ESCAPE_TEXT, "\\x1b]0;pwn\\x07\\x1b[2J");
	expect(pwn, sizeof(pwn), PG_ESCAPE_PROM, "\\\\x1b]0;pwn\\\\x07\\\\x1b[2J");
	expect(pwn, sizeof(pwn), PG_ESCAPE_JSON, "\\u001b]0;pwn\\u0007\\u001b[2J");
	expect("a\\b\"c\nd", 7, PG_ESCAPE_TEXT, "a\\\\b\"c\\x0ad");
	expect("a\\b\"c\nd", 7, PG_ESCAPE_PROM, "a\\\\\\\\b\\\"c\\\\x0ad");
	expect("a\\b\"c\nd\t", 8, PG_ESCAPE_JSON, "a\\\\b\\\"c\\nd\\t");
	expect("del\x7f", 4, PG_ESCAPE_TEXT, "del\\x7f");
	expect("del\x7f", 4, PG_ESCAPE_JSON, "del\\u007f");
	/* C1 CSI (U+009B) and a right-to-left override (U+202E) */
	expect("\xc2\x9b" "1m", 4, PG_ESCAPE_TEXT, "\\xc2\\x9b1m");
	expect("\xc2\x9b" "1m", 4, PG_ESCAPE_JSON, "\\u009b1m");
	expect("x\xe2\x80\xaey", 5, PG_ESCAPE_TEXT, "x\\xe2\\x80\\xaey");
	expect("x\xe2\x80\xaey", 5, PG_ESCAPE_PROM, "x\\\\xe2\\\\x80\\\\xaey");
	expect("x\xe2\x80\xaey", 5, PG_ESCAPE_JSON, "x\\u202ey");
	/* invalid UTF-8: a stray continuation, an overlong, a cut sequence */
	expect("\x80" "a\xc0\xaf" "b\xe4\xb8", 7, PG_ESCAPE_TEXT, "\\x80a\\xc0\\xafb\\xe4\\xb8");
	expect("\x80" "a\xc0\xaf", 4, PG_ESCAPE_JSON, "\\ufffda\\ufffd\\ufffd");
	/* valid UTF-8 passes */
	expect("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x90\x8d", 14, PG_ESCAPE_TEXT,
	       "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x90\x8d");
	expect("caf\xc3\xa9", 5, PG_ESCAPE_JSON, "caf\xc3\xa9");
	/* a NUL ends the string, and max bounds it */
	expect("ab\0cd", 5, PG_ESCAPE_TEXT, "ab");
	expect("abcd", 2, PG_ESCAPE_TEXT, "ab");
	/* KEEP: text already escaped by its writer keeps \ " and newlines */
	expect("a\\x1b \"q\"\n\x1b", 11, PG_ESCAPE_TEXT | PG_ESCAPE_F_KEEP,
	       "a\\x1b \"q\"\n\\x1b");
	expect("{\"s\":\"\\u001b\x1b\"}\n", 16, PG_ESCAPE_JSON | PG_ESCAPE_F_KEEP,
	       "{\"s\":\"\\u001b\\u001b\"}\n");
}

static void test_cut(void)
{
	char out[8];
	size_t n = pg_escape_str(out, sizeof(out), "ab\x1b\x1b", 4, PG_ESCAPE_TEXT);

	CHECK(n == 6 && !strcmp(out, "ab\\x1b"), "cut at a whole escape: '%s' (%zu)", out, n);
	n = pg_escape_str(out, 1, "abc", 3, PG_ESCAPE_TEXT);
	CHECK(n == 0 && !out[0], "no room: empty");
}

/* pg_escape_fput: NULs are bytes like any other, and nothing is cut. */
static void test_fput(void)
{
	static char big[10000];
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	CHECK(f != NULL, "open_memstream");
	if (!f)
		return;
	pg_escape_fput(f, "a\0b\x1b\xc2\x9b\"", 7, PG_ESCAPE_JSON);
	fflush(f);
	CHECK(!strcmp(out, "a\\u0000b\\u001b\\u009b\\\""), "JSON: got '%s'", out);
	memset(big, 0x1b, sizeof(big));
	rewind(f);
	pg_escape_fput(f, big, sizeof(big), PG_ESCAPE_TEXT);
	fflush(f);
	CHECK(len == 4 * sizeof(big) && !strncmp(out + len - 8, "\\x1b\\x1b", 8),
	      "TEXT, %zu bytes: %zu bytes out", sizeof(big), len);
	fclose(f);
	free(out);
}

/* Whether out holds a byte a terminal obeys, or invalid UTF-8. */
static int unsafe(const char *out)
{
	const unsigned char *u = (const unsigned char *)out;
	size_t n = strlen(out);

	for (size_t i = 0; i < n;) {
		size_t len = pg_utf8_len(u + i, n - i);

		if (!len || pg_escape_unsafe(pg_utf8_code(u + i, len)))
			return 1;
		i += len;
	}
	return 0;
}

static void test_every_byte(void)
{
	static const int modes[] = { PG_ESCAPE_TEXT, PG_ESCAPE_PROM, PG_ESCAPE_JSON,
				     PG_ESCAPE_TEXT | PG_ESCAPE_F_KEEP };
	int bad = 0;

	for (int m = 0; m < 4; m++)
		for (int a = 1; a < 256; a++)
			for (int b = 1; b < 256; b++) {
				char in[4] = { (char)a, (char)b, (char)0xa0, 0 }, out[64];

				pg_escape_str(out, sizeof(out), in, 3, modes[m]);
				if (modes[m] & PG_ESCAPE_F_KEEP)
					for (char *p = out; *p; p++)
						*p = *p == '\n' ? ' ' : *p;
				bad += unsafe(out);
			}
	CHECK(!bad, "%d escaped pairs of bytes still hold a control or invalid UTF-8", bad);
}

int main(void)
{
	test_forms();
	test_cut();
	test_fput();
	test_every_byte();
	if (failures)
		fprintf(stderr, "test_escape: %d checks failed\n", (int)failures);
	return failures ? 1 : 0;
}
