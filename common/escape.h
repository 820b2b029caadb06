/*
 * escape.h - how pagodad and pagodactl show a string that someone else
 * chose (a client's command name, a model's name): one character at a
 * time, in the form its destination needs, so that no byte a client put
 * in its name ever reaches a terminal, a log or a parser as itself.
 *
 * Not a general text library: no allocation, no locale; header-only so
 * that pagodactl (wire/, shm/, common/ and libc only) and the daemon share it.
 *
 * What is escaped, in every mode: C0 controls and DEL, C1 controls
 * (U+0080..U+009F, which some terminals obey), bidirectional overrides
 * and isolates (U+202A..U+202E, U+2066..U+2069, which reorder what a
 * reader sees), and bytes that are not valid UTF-8.  Then:
 *
 *   PG_ESCAPE_TEXT  for a terminal or a log: those as \xNN per byte, and
 *                   the backslash as \\, so the result is reversible and
 *                   printable ("\x1b]0;pwn\x07" for ESC ] 0 ; p w n BEL).
 *   PG_ESCAPE_PROM  a Prometheus label value (text exposition format):
 *                   the TEXT form with \ and " escaped once more, so the
 *                   scraped value reads as TEXT shows it.
 *   PG_ESCAPE_JSON  inside a JSON string: \" \\ \n \t, controls as
 *                   \u00XX, C1 and bidi as \uXXXX, invalid bytes as
 *                   \ufffd (a JSON text must be valid UTF-8).
 *
 * PG_ESCAPE_F_KEEP (with TEXT or JSON) leaves backslash, double quote
 * and newline alone: for relaying text that its writer already escaped
 * (the daemon's admin answers), so that only what a terminal would obey
 * is neutralised.
 */
#ifndef PAGODA_COMMON_ESCAPE_H
#define PAGODA_COMMON_ESCAPE_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum pg_escape_mode {
	PG_ESCAPE_TEXT = 0,
	PG_ESCAPE_PROM = 1,
	PG_ESCAPE_JSON = 2,
};

#define PG_ESCAPE_F_KEEP 0x100

/* Room pg_escape_char may need: 4 bytes as \\xNN each, and the NUL. */
#define PG_ESCAPE_MAX 24

/*
 * pg_utf8_len - the bytes of the valid UTF-8 character at s (n bytes
 * left), or 0 when s does not start one (a stray continuation byte, an
 * overlong form, a surrogate, beyond U+10FFFF, cut short).
 */
static inline size_t pg_utf8_len(const unsigned char *s, size_t n)
{
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
		     : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
		     : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;

	if (!len || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return len;
}

/* The code point of the valid len-byte character at s. */
static inline unsigned pg_utf8_code(const unsigned char *s, size_t len)
{
	static const unsigned lead_mask[5] = { 0, 0x7f, 0x1f, 0x0f, 0x07 };
	unsigned cp = s[0] & lead_mask[len];

	for (size_t i = 1; i < len; i++)
		cp = cp << 6 | (s[i] & 0x3f);
	return cp;
}

/* Whether code point cp must not reach a reader as itself. */
static inline int pg_escape_unsafe(unsigned cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp < 0xa0) ||
	       (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/*
 * pg_escape_char - the escaped form of the character at s (n >= 1 bytes
 * left) in mode (enum pg_escape_mode, optionally | PG_ESCAPE_F_KEEP),
 * written NUL-terminated into out (PG_ESCAPE_MAX bytes).  Returns the
 * bytes of s it stands for (at least 1; an invalid byte is one).
 */
static inline size_t pg_escape_char(const char *s, size_t n, int mode,
				    char out[PG_ESCAPE_MAX])
{
	const unsigned char *u = (const unsigned char *)s;
	size_t len = pg_utf8_len(u, n), w = 0, take = len ? len : 1;
	int keep = mode & PG_ESCAPE_F_KEEP, m = mode & 0xff;
	unsigned cp = len ? pg_utf8_code(u, len) : 0xfffd;

	if (keep && (u[0] == '\\' || u[0] == '"' || u[0] == '\n')) {
		out[0] = (char)u[0];
		out[1] = '\0';
		return 1;
	}
	if (m == PG_ESCAPE_JSON) {
		static const char short_esc[] = "\"\"\\\\\nn\tt";

		for (int i = 0; short_esc[i]; i += 2)
			if (u[0] == (unsigned char)short_esc[i]) {
				snprintf(out, PG_ESCAPE_MAX, "\\%c", short_esc[i + 1]);
				return 1;
			}
		if (!len || pg_escape_unsafe(cp))
			snprintf(out, PG_ESCAPE_MAX, "\\u%04x", cp);
		else
			snprintf(out, PG_ESCAPE_MAX, "%.*s", (int)len, s);
		return take;
	}
	if (len && !pg_escape_unsafe(cp) && u[0] != '\\' &&
	    (m != PG_ESCAPE_PROM || u[0] != '"')) {
		snprintf(out, PG_ESCAPE_MAX, "%.*s", (int)len, s);
		return take;
	}
	if (u[0] == '\\' || u[0] == '"') {	/* TEXT: \\; PROM: \\ or \" */
		snprintf(out, PG_ESCAPE_MAX, m == PG_ESCAPE_PROM && u[0] == '\\' ? "\\\\\\\\" : "\\%c",
			 u[0]);
		return 1;
	}
	for (size_t i = 0; i < take; i++)
		w += (size_t)snprintf(out + w, PG_ESCAPE_MAX - w,
				      m == PG_ESCAPE_PROM ? "\\\\x%02x" : "\\x%02x", u[i]);
	return take;
}

/*
 * pg_escape_str - s (n bytes, or up to its NUL when shorter) escaped
 * into out (out_len bytes, NUL-terminated), cut before an escape that
 * would not fit whole.  Returns the length written.
 */
static inline size_t pg_escape_str(char *out, size_t out_len, const char *s, size_t n,
				   int mode)
{
	size_t w = 0, i = 0, end = 0;

	if (!out_len)
		return 0;
	out[0] = '\0';
	while (end < n && s[end])	/* a NUL ends the string */
		end++;
	while (i < end) {
		char one[PG_ESCAPE_MAX];
		size_t k;

		i += pg_escape_char(s + i, end - i, mode, one);
		k = strlen(one);
		if (w + k + 1 > out_len)
			break;
		memcpy(out + w, one, k + 1);
		w += k;
	}
	return w;
}

/*
 * pg_escape_fput - s (n bytes, NULs included: each one escaped) escaped
 * in mode onto f, whole, however long.
 */
static inline void pg_escape_fput(FILE *f, const char *s, size_t n, int mode)
{
	for (size_t i = 0; i < n;) {
		char one[PG_ESCAPE_MAX];

		i += pg_escape_char(s + i, n - i, mode, one);
		fputs(one, f);
	}
}

#endif
