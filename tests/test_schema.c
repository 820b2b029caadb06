/*
 * test_schema.c - JSON Schema into GBNF (daemon/schema.h), checked through
 * the grammar engine (daemon/engine/grammar.h): each construct's grammar
 * compiles, valid instances are accepted whole and complete, invalid ones
 * are refused at the byte where they go wrong.
 *
 *   - a table of (schema, instance, where it is refused) for each
 *     construct, matched over a vocabulary of single bytes (0x20..0x7e,
 *     tab, newline) and a few multi-byte UTF-8 characters;
 *   - integer ranges checked exhaustively around their bounds, and
 *     decimal bounds over a grid of values written several ways;
 *   - schemas it must refuse: -EINVAL, the message naming the construct
 *     and its JSON pointer;
 *   - the .json files in tests/data/schemas (the real-world set the
 *     sampling test and the benchmark use), when there are any: each
 *     translates and compiles;
 *   - random and mutated schemas (a fixed seed): never a crash, and
 *     whatever translates compiles.
 *
 * Exits 0 or 1.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/engine/grammar.h"
#include "daemon/schema.h"
#include "tests/check.h"

#ifndef PG_SCHEMA_DIR
#define PG_SCHEMA_DIR "tests/data/schemas"
#endif

/* ---- the vocabulary: one token per byte, a few characters, end ---- */

static const char *const multi[] = { "\xc3\xa9", "\xc3\x9f", "\xe2\x82\xac",
				     "\xf0\x9f\x98\x80", "\xe6\x97\xa5" };
#define N_MULTI ((int)(sizeof(multi) / sizeof(multi[0])))

static struct pg_grammar_vocab *vocab;
static int byte_tok[256];	/* -1: no token */
static int eog_tok;

static void vocab_init(void)
{
	const char *pieces[128 + N_MULTI];
	size_t lens[128 + N_MULTI];
	uint8_t eog[128 + N_MULTI];
	static char bytes[128];
	int n = 0;

	memset(eog, 0, sizeof(eog));
	for (int b = 0; b < 256; b++)
		byte_tok[b] = -1;
	for (int b = 0; b < 128; b++) {
		if ((b < 0x20 || b > 0x7e) && b != '\n' && b != '\t')
			continue;
		bytes[b] = (char)b;
		pieces[n] = &bytes[b];
		lens[n] = 1;
		byte_tok[b] = n++;
	}
	for (int i = 0; i < N_MULTI; i++) {
		pieces[n] = multi[i];
		lens[n++] = strlen(multi[i]);
	}
	pieces[n] = "";
	lens[n] = 0;
	eog[n] = 1;
	eog_tok = n++;
	if (pg_grammar_vocab_from_pieces(pieces, lens, eog, n, &vocab)) {
		fprintf(stderr, "pg_grammar_vocab_from_pieces failed\n");
		exit(1);
	}
}

/* The token at s (n bytes left) and its length; -1 when there is none. */
static int token_at(const char *s, size_t n, size_t *len)
{
	for (int i = 0; i < N_MULTI; i++) {
		size_t l = strlen(multi[i]);

		if (l <= n && !memcmp(s, multi[i], l)) {
			*len = l;
			return byte_tok[0x7f] < 0 ? (int)(byte_tok['~'] + 1 + i) : -1;
		}
	}
	*len = 1;
	return byte_tok[(unsigned char)*s];
}

/* ---- translating and matching ---- */

/* Whether every rule the GBNF text defines but root is named by another. */
static bool all_named(const char *text, const char **unused)
{
	for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
		size_t n = strcspn(line, " ");
		bool named = !strncmp(line, "root ", 5);

		for (const char *p = text; !named && (p = strstr(p, " ")); p++) {
			const char *q = p + 1 + (p[1] == '(');

			named = q != line && !strncmp(q, line, n) &&
				!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-",
					q[n] ? q[n] : 'a') && q[n] != '\0';
		}
		if (!named) {
			*unused = line;
			return false;
		}
		if (!strchr(line, '\n'))
			break;
	}
	return true;
}

/* The schema translated and compiled; NULL after a failure is counted. */
static struct pg_grammar *compile_schema(const char *schema, const char *what)
{
	struct pg_grammar *g = NULL;
	const char *unused = "";
	char err[512];
	char *text;
	int rc = pg_schema_to_gbnf(schema, strlen(schema), &text, err, sizeof(err));

	CHECK(rc == 0, "%s: pg_schema_to_gbnf(%s) = %d: %s", what, schema, rc, err);
	if (rc)
		return NULL;
	CHECK(all_named(text, &unused), "%s: a rule of %s is never named: %.40s", what, schema,
	      unused);
	rc = pg_grammar_compile(text, strlen(text), &g, err, sizeof(err));
	CHECK(rc == 0, "%s: the grammar of %s does not compile (%d): %s\n%s", what, schema, rc,
	      err, text);
	free(text);
	return rc ? NULL : g;
}

/*
 * match - feed s (n bytes) token by token.  Returns -1 when all of it is
 * accepted and the grammar is done (end-of-generation allowed), else the
 * offset of the first byte refused (n: all accepted, not complete).
 */
static long match(struct pg_grammar *g, const char *s, size_t n)
{
	struct pg_grammar_state *st = pg_grammar_state_create(g);
	size_t pos = 0;
	long r;

	if (!st) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	while (pos < n) {
		size_t len;
		int id = token_at(s + pos, n - pos, &len);

		if (id < 0) {
			fprintf(stderr, "no token for byte 0x%02x in the test's instance\n",
				(unsigned char)s[pos]);
			exit(1);
		}
		if (pg_grammar_accept(st, vocab, id))
			break;
		pos += len;
	}
	r = pos < n ? (long)pos : pg_grammar_done(st) ? -1 : (long)n;
	if (r == -1)
		CHECK(pg_grammar_allows(st, vocab, eog_tok) == 1,
		      "done but end-of-generation not allowed after %.*s", (int)n, s);
	else if (r == (long)n)
		CHECK(pg_grammar_allows(st, vocab, eog_tok) == 0,
		      "not done but end-of-generation allowed after %.*s", (int)n, s);
	pg_grammar_state_free(st);
	return r;
}

/* ---- each construct: a table ---- */

/*
 * A case: the schema, the part of the instance that is accepted, and what
 * follows it: NULL when ok is a whole valid instance, "" when ok is
 * accepted but incomplete, else a text whose first byte is refused.
 */
struct mcase {
	const char *schema, *ok, *rest;
};

#define VALID(s, i) { s, i, NULL }
#define BAD(s, ok, rest) { s, ok, rest }
#define PARTIAL(s, ok) { s, ok, "" }

#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}," \
	"\"age\":{\"type\":\"integer\"}},\"required\":[\"name\"],\"additionalProperties\":false}"
#define OPTIONAL "{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}}," \
	"\"additionalProperties\":false}"
#define OPEN "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}"
#define TREE "{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"}," \
	"\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}},\"required\":[\"value\"]," \
	"\"additionalProperties\":false}"
#define LIST "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":" \
	"\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}}," \
	"\"required\":[\"v\",\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}"
#define TAGGED "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"}," \
	"\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"],\"additionalProperties\":false}," \
	"{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}}," \
	"\"required\":[\"kind\",\"y\"],\"additionalProperties\":false}]}"
#define PAT(p) "{\"type\":\"string\",\"pattern\":\"" p "\"}"
#define FMT(f) "{\"type\":\"string\",\"format\":\"" f "\"}"

static const struct mcase cases[] = {
	/* strings */
	VALID("{\"type\":\"string\"}", "\"\""),
	VALID("{\"type\":\"string\"}", "\"abc\""),
	VALID("{\"type\":\"string\"}", "\"a\\\"b\\\\c\\/\""),
	VALID("{\"type\":\"string\"}", "\"\\u00e9\\uD7FF\\n\\t\\b\\f\\r\""),
	VALID("{\"type\":\"string\"}", "\"\xc3\xa9\xf0\x9f\x98\x80\xe2\x82\xac\""),
	BAD("{\"type\":\"string\"}", "", "abc"),
	BAD("{\"type\":\"string\"}", "\"a", "\n\""),
	BAD("{\"type\":\"string\"}", "\"a", "\t\""),
	BAD("{\"type\":\"string\"}", "\"\\", "x\""),
	BAD("{\"type\":\"string\"}", "\"\\ud", "800\""),
	BAD("{\"type\":\"string\"}", "\"\\u00", "g0\""),
	BAD("{\"type\":\"string\"}", "\"a\"", " "),
	PARTIAL("{\"type\":\"string\"}", "\"abc"),
	/* integers */
	VALID("{\"type\":\"integer\"}", "0"),
	VALID("{\"type\":\"integer\"}", "-0"),
	VALID("{\"type\":\"integer\"}", "123"),
	VALID("{\"type\":\"integer\"}", "-45"),
	VALID("{\"type\":\"integer\"}", "999999999999999999"),
	BAD("{\"type\":\"integer\"}", "999999999999999999", "9"),
	BAD("{\"type\":\"integer\"}", "0", "1"),
	BAD("{\"type\":\"integer\"}", "1", ".5"),
	BAD("{\"type\":\"integer\"}", "1", "e5"),
	BAD("{\"type\":\"integer\"}", "", "+1"),
	BAD("{\"type\":\"integer\"}", "-", "-1"),
	PARTIAL("{\"type\":\"integer\"}", "-"),
	/* numbers */
	VALID("{\"type\":\"number\"}", "0"),
	VALID("{\"type\":\"number\"}", "-1.5"),
	VALID("{\"type\":\"number\"}", "1e10"),
	VALID("{\"type\":\"number\"}", "1E+5"),
	VALID("{\"type\":\"number\"}", "2.5e-3"),
	VALID("{\"type\":\"number\"}", "0.000001"),
	BAD("{\"type\":\"number\"}", "1.", "e5"),
	BAD("{\"type\":\"number\"}", "", ".5"),
	BAD("{\"type\":\"number\"}", "0", "1"),
	BAD("{\"type\":\"number\"}", "1e", "e"),
	PARTIAL("{\"type\":\"number\"}", "1."),
	/* booleans, null, unions, anything */
	VALID("{\"type\":\"boolean\"}", "true"),
	VALID("{\"type\":\"boolean\"}", "false"),
	BAD("{\"type\":\"boolean\"}", "tr", "x"),
	BAD("{\"type\":\"boolean\"}", "", "1"),
	VALID("{\"type\":\"null\"}", "null"),
	BAD("{\"type\":\"null\"}", "nul", "!"),
	VALID("{\"type\":[\"string\",\"null\"]}", "null"),
	VALID("{\"type\":[\"string\",\"null\"]}", "\"x\""),
	BAD("{\"type\":[\"string\",\"null\"]}", "", "1"),
	VALID("{\"type\":[\"integer\",\"boolean\"]}", "3"),
	VALID("{\"type\":[\"integer\",\"boolean\"]}", "true"),
	BAD("{\"type\":[\"integer\",\"boolean\"]}", "3", ".5"),
	VALID("{\"type\":[\"integer\",\"number\"]}", "3.5"),
	VALID("{}", "{\"a\":[1,2,{\"b\":null}],\"c\":\"d\"}"),
	VALID("{}", "[]"),
	VALID("{}", "\"s\""),
	VALID("{}", "-1.5e3"),
	BAD("{}", "", " 1"),
	VALID("true", "[true,{}]"),
	VALID("{\"title\":\"x\",\"description\":\"y\",\"$comment\":\"z\",\"examples\":[1],"
	      "\"default\":2,\"deprecated\":true,\"readOnly\":false,\"x-order\":1}", "null"),
	VALID("{\"type\":\"string\",\"minimum\":5,\"items\":false}", "\"x\""),
	/* whitespace: bounded, only between tokens */
	VALID("{\"type\":\"array\"}", "[ 1 , 2 ]"),
	VALID("{\"type\":\"array\"}", "[\n  1,\n\t2\n]"),
	VALID("{\"type\":\"array\"}", "[                    1]"),
	BAD("{\"type\":\"array\"}", "[                    ", " 1]"),
	BAD("{\"type\":\"array\"}", "[1]", " "),
	BAD("{\"type\":\"array\"}", "", " [1]"),
	/* objects */
	VALID(PERSON, "{\"name\":\"Ann\"}"),
	VALID(PERSON, "{\"name\":\"Ann\",\"age\":3}"),
	VALID(PERSON, "{ \"name\" : \"Ann\" , \"age\" : 3 }"),
	BAD(PERSON, "{", "}"),
	BAD(PERSON, "{\"name\":\"A\",\"", "x\":1}"),
	BAD(PERSON, "{\"", "age\":1,\"name\":\"A\"}"),
	BAD(PERSON, "{\"name\":\"A\",\"age\":", "\"3\"}"),
	BAD(PERSON, "{\"name\":\"A\",\"age\":3", ",\"age\":4}"),
	VALID(OPTIONAL, "{}"),
	VALID(OPTIONAL, "{\"a\":1}"),
	VALID(OPTIONAL, "{\"b\":\"x\"}"),
	VALID(OPTIONAL, "{\"a\":1,\"b\":\"x\"}"),
	/* b is the last property: nothing may follow it, not even a comma */
	BAD(OPTIONAL, "{\"b\":\"x\"", ",\"a\":1}"),
	BAD(OPTIONAL, "{\"a\":1,", "}"),
	BAD(OPTIONAL, "", "[]"),
	VALID(OPEN, "{\"a\":1,\"zz\":[true]}"),
	VALID(OPEN, "{\"zz\":1}"),
	VALID(OPEN, "{\"ab\":\"x\",\"a2\":null}"),
	VALID(OPEN, "{\"a\":1,\"a2\":2,\"\":3}"),
	BAD(OPEN, "{\"a\":", "\"x\"}"),
	BAD(OPEN, "{\"a\":1,\"a", "\":\"x\"}"),
	BAD(OPEN, "{\"zz\":1,\"a", "\":2}"),
	BAD(OPEN, "{\"\\u00", "61\":1}"),
	VALID("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
	      "{\"x\":1,\"y\":2}"),
	BAD("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
	    "{\"x\":", "\"s\"}"),
	VALID("{\"type\":\"object\",\"additionalProperties\":false}", "{}"),
	VALID("{\"type\":\"object\",\"additionalProperties\":false}", "{ }"),
	BAD("{\"type\":\"object\",\"additionalProperties\":false}", "{", "\"a\":1}"),
	VALID("{\"type\":\"object\",\"required\":[\"id\"]}", "{\"id\":5}"),
	VALID("{\"type\":\"object\",\"required\":[\"id\"]}", "{\"id\":5,\"x\":[]}"),
	BAD("{\"type\":\"object\",\"required\":[\"id\"]}", "{", "}"),
	VALID("{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\",\"properties\":"
	      "{\"q\":{\"type\":\"boolean\"}},\"required\":[\"q\"],\"additionalProperties\":false}},"
	      "\"required\":[\"p\"],\"additionalProperties\":false}", "{\"p\":{\"q\":true}}"),
	BAD("{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\",\"properties\":"
	    "{\"q\":{\"type\":\"boolean\"}},\"required\":[\"q\"],\"additionalProperties\":false}},"
	    "\"required\":[\"p\"],\"additionalProperties\":false}", "{\"p\":{", "}}"),
	VALID("{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{\"type\":\"null\"}},"
	      "\"additionalProperties\":false}", "{\"b\":null}"),
	BAD("{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{\"type\":\"null\"}},"
	    "\"additionalProperties\":false}", "{\"", "a\":1}"),
	VALID("{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"const\":1},\"\xc3\xa9\":"
	      "{\"const\":2}},\"required\":[\"a\\\"b\",\"\xc3\xa9\"],\"additionalProperties\":false}",
	      "{\"a\\\"b\":1,\"\xc3\xa9\":2}"),
	VALID("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{}}}",
	      "{\"c\":1,\"d\":2,\"e\":3}"),
	/* "b..." may be another property ("bb"), but not "b" itself, after "c" */
	BAD("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{}}}",
	    "{\"c\":1,\"b", "\":2}"),
	VALID("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{}}}",
	      "{\"c\":1,\"bb\":2}"),
	/* arrays */
	VALID("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
	      "[1,2]"),
	VALID("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
	      "[1, 2, 3]"),
	BAD("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
	    "[1", "]"),
	BAD("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
	    "[1,2,3", ",4]"),
	BAD("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
	    "[", "]"),
	BAD("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", "[1,", "\"x\"]"),
	VALID("{\"type\":\"array\",\"maxItems\":0}", "[]"),
	BAD("{\"type\":\"array\",\"maxItems\":0}", "[", "1]"),
	VALID("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	      "\"items\":false}", "[]"),
	VALID("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	      "\"items\":false}", "[\"a\"]"),
	VALID("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	      "\"items\":false}", "[\"a\",1]"),
	BAD("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	    "\"items\":false}", "[", "1]"),
	BAD("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	    "\"items\":false}", "[\"a\",1", ",2]"),
	VALID("{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
	      "[\"x\",true]"),
	VALID("{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
	      "[\"x\",true,false]"),
	BAD("{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
	    "[\"x\"", "]"),
	BAD("{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
	    "[\"x\",", "1]"),
	VALID("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}]}", "[null,1,\"a\"]"),
	VALID("{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":false}",
	      "[null]"),
	BAD("{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":false}",
	    "[null", ",null]"),
	VALID("{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}}",
	      "[[1,2.5],[]]"),
	VALID("{\"type\":\"array\",\"uniqueItems\":false}", "[1,1]"),
	/* enum and const */
	VALID("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}", "\"red\""),
	VALID("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}", "3"),
	VALID("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}", "null"),
	VALID("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}", "{\"a\":[1]}"),
	BAD("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}", "\"", "blue\""),
	BAD("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}", "", "4"),
	VALID("{\"type\":\"string\",\"enum\":[\"a\",1]}", "\"a\""),
	BAD("{\"type\":\"string\",\"enum\":[\"a\",1]}", "", "1"),
	VALID("{\"const\":\"x\\ny\\u0001\"}", "\"x\\ny\\u0001\""),
	VALID("{\"type\":\"integer\",\"enum\":[1,2.0,2.5]}", "2"),
	BAD("{\"type\":\"integer\",\"enum\":[1,2.0,2.5]}", "2", ".5"),
	VALID("{\"const\":true}", "true"),
	BAD("{\"const\":true}", "", "false"),
	VALID("{\"enum\":[1,2],\"const\":2}", "2"),
	BAD("{\"enum\":[1,2],\"const\":2}", "", "1"),
	VALID("{\"const\":0.1}", "0.1"),
	BAD("{\"const\":0.1}", "0.", "2"),
	VALID("{\"const\":1e-7}", "1e-7"),
	VALID("{\"enum\":[1.5e300,2.0,-0.25]}", "2"),
	VALID("{\"enum\":[1.5e300,2.0,-0.25]}", "-0.25"),
	BAD("{\"enum\":[1.5e300,2.0,-0.25]}", "2", ".0"),
	VALID("{\"const\":\"\xc3\xa9\"}", "\"\xc3\xa9\""),
	/* anyOf, oneOf, allOf */
	VALID("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\","
	      "\"minimum\":10}]}", "\"ab\""),
	VALID("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\","
	      "\"minimum\":10}]}", "10"),
	BAD("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\","
	    "\"minimum\":10}]}", "\"ab", "c\""),
	PARTIAL("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\","
		"\"minimum\":10}]}", "9"),
	BAD("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\","
	    "\"minimum\":10}]}", "", "-"),
	VALID("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":"
	      "false,\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", "{\"b\":1}"),
	BAD("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":"
	    "false,\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", "{", "}"),
	VALID("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", "null"),
	VALID("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", "\"a\""),
	VALID("{\"oneOf\":[{\"const\":1},{\"const\":2}]}", "2"),
	VALID("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"enum\":[1.5]}]}", "1.5"),
	VALID(TAGGED, "{\"kind\":\"a\",\"x\":1}"),
	VALID(TAGGED, "{\"kind\":\"b\",\"y\":\"s\"}"),
	BAD(TAGGED, "{\"kind\":\"a\",\"", "y\":\"s\"}"),
	VALID("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
	      "\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":"
	      "[\"b\"]}]}", "{\"a\":1,\"b\":\"x\",\"c\":null}"),
	BAD("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
	    "\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":"
	    "[\"b\"]}]}", "{\"a\":1", "}"),
	VALID("{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":5}]}", "5"),
	BAD("{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":5}]}", "", "6"),
	BAD("{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":5}]}", "", "-1"),
	VALID("{\"allOf\":[{\"type\":[\"string\",\"integer\"]},{\"type\":[\"integer\",\"null\"]}]}",
	      "7"),
	BAD("{\"allOf\":[{\"type\":[\"string\",\"integer\"]},{\"type\":[\"integer\",\"null\"]}]}",
	    "", "null"),
	VALID("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
	      "\"additionalProperties\":false},{\"properties\":{\"a\":{\"minimum\":3}}}]}",
	      "{\"a\":3}"),
	/* "2" may begin "20", which is at least 3: the end of the number is refused */
	BAD("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
	    "\"additionalProperties\":false},{\"properties\":{\"a\":{\"minimum\":3}}}]}",
	    "{\"a\":2", "}"),
	BAD("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
	    "\"additionalProperties\":false},{\"properties\":{\"a\":{\"minimum\":3}}}]}",
	    "{\"a\":", "-3}"),
	/* $ref, $defs, definitions, recursion */
	VALID("{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1}},\"type\":\"array\","
	      "\"items\":{\"$ref\":\"#/$defs/pos\"}}", "[1,2]"),
	BAD("{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1}},\"type\":\"array\","
	    "\"items\":{\"$ref\":\"#/$defs/pos\"}}", "[", "0]"),
	VALID("{\"definitions\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/definitions/s\"}",
	      "\"a\""),
	VALID("{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"$ref\":\"#/properties/a\"}}}",
	      "{\"b\":true}"),
	VALID(TREE, "{\"value\":1,\"children\":[{\"value\":2},{\"value\":3,\"children\":[]}]}"),
	BAD(TREE, "{\"value\":1,\"children\":[{", "}]}"),
	VALID(LIST, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"),
	BAD(LIST, "{\"v\":1,\"next\":{\"v\":2,\"next\":", "1}}"),
	VALID("{\"$defs\":{\"b\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}},"
	      "\"$ref\":\"#/$defs/b\",\"required\":[\"a\"]}", "{\"a\":1}"),
	BAD("{\"$defs\":{\"b\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}},"
	    "\"$ref\":\"#/$defs/b\",\"required\":[\"a\"]}", "{", "}"),
	VALID("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"type\":\"null\"}},"
	      "\"$ref\":\"#/$defs/a\"}", "null"),
	/* the same schema twice at one place is not recursion */
	VALID("{\"$defs\":{\"x\":{\"type\":\"integer\"}},\"allOf\":[{\"$ref\":\"#/$defs/x\"},"
	      "{\"$ref\":\"#/$defs/x\"}]}", "5"),
	VALID("{\"$defs\":{\"e\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"$ref\":\"#/$defs/e\"},"
	      "{\"type\":\"integer\"}]}}},\"$ref\":\"#/$defs/e\"}", "[1,[2,[]],3]"),
	/* string lengths count characters (escapes and UTF-8 count one) */
	VALID("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\""),
	VALID("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\\nb\""),
	VALID("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\xf0\x9f\x98\x80\""),
	BAD("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a", "\""),
	BAD("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abc", "d\""),
	VALID("{\"type\":\"string\",\"maxLength\":0}", "\"\""),
	BAD("{\"type\":\"string\",\"maxLength\":0}", "\"", "a\""),
	/* patterns */
	VALID(PAT("^[a-z]+\\\\d{2,3}$"), "\"ab12\""),
	VALID(PAT("^[a-z]+\\\\d{2,3}$"), "\"x123\""),
	BAD(PAT("^[a-z]+\\\\d{2,3}$"), "\"", "1a\""),
	BAD(PAT("^[a-z]+\\\\d{2,3}$"), "\"ab123", "4\""),
	VALID(PAT("cat"), "\"cat\""),
	VALID(PAT("cat"), "\"concatenate\""),
	VALID(PAT("cat"), "\"x\\\"\\ncat\""),
	BAD(PAT("cat"), "\"dog", "\""),
	/* repetitions of what may match "": over what it matches less "" */
	VALID(PAT("^(a?)*$"), "\"\""),
	VALID(PAT("^(a?)*$"), "\"aaa\""),
	BAD(PAT("^(a?)*$"), "\"a", "b\""),
	VALID(PAT("^(a|b?)+$"), "\"\""),
	VALID(PAT("^(a|b?)+$"), "\"abba\""),
	BAD(PAT("^(a|b?)+$"), "\"ab", "c\""),
	VALID(PAT("^(a?b?){2,3}$"), "\"\""),
	VALID(PAT("^(a?b?){2,3}$"), "\"a\""),
	VALID(PAT("^(a?b?){2,3}$"), "\"ababab\""),
	VALID(PAT("^(a?b?){2,3}$"), "\"bab\""),
	BAD(PAT("^(a?b?){2,3}$"), "\"aaa", "a\""),
	BAD(PAT("^(a?b?){2,3}$"), "\"abbab", "b\""),
	VALID(PAT("^((a?)*|c)+x$"), "\"acaax\""),
	VALID(PAT("^((a?)*|c)+x$"), "\"x\""),
	BAD(PAT("^((a?)*|c)+x$"), "\"ac", "b\""),
	VALID(PAT("^(()|(a?)?){3,}$"), "\"aaaaa\""),
	VALID(PAT("^(a*b*)*c$"), "\"abbac\""),
	BAD(PAT("^(a*b*)*c$"), "\"abba", "x\""),
	/* classes whose ends touch the surrogates, which are no character */
	VALID(PAT("^[^\\\\uD7FF-\\\\uE000]$"), "\"\xc3\xa9\""),
	VALID(PAT("^[^\\\\uD7FF-\\\\uE000]$"), "\"\xf0\x9f\x98\x80\""),
	VALID(PAT("^[\\\\uD7FF-\\\\uE000]?$"), "\"\""),
	BAD(PAT("^[\\\\uD7FF-\\\\uE000]?$"), "\"", "\xc3\xa9\""),
	VALID(PAT("^[^\\\\u0000-\\\\uD7FF\\\\uE000-\\\\uFFFF]$"), "\"\xf0\x9f\x98\x80\""),
	BAD(PAT("^[^\\\\u0000-\\\\uD7FF\\\\uE000-\\\\uFFFF]$"), "\"", "\xc3\xa9\""),
	VALID(PAT("^[^\\\\u0000-\\\\uD7FF\\\\uE000-\\\\uFFFF\\\\uD83D\\\\uDE01-\\\\uDBFF\\\\uDFFF]$"),
	      "\"\xf0\x9f\x98\x80\""),
	BAD(PAT("^[^\\\\u0000-\\\\uD7FF\\\\uE000-\\\\uFFFF\\\\uD83D\\\\uDE00-\\\\uDBFF\\\\uDFFF]$"), "\"",
	    "\xf0\x9f\x98\x80\""),
	VALID(PAT("^[^\\\\u0020-\\\\uD7FF]$"), "\"\\n\""),
	BAD(PAT("^[^\\\\u0020-\\\\uD7FF]$"), "\"", "a\""),
	/* a $ref beside the root's own $id resolves in the document */
	VALID("{\"$id\":\"http://x/r\",\"$ref\":\"#/$defs/b\",\"$defs\":{\"b\":"
	      "{\"type\":\"integer\"}}}", "12"),
	BAD("{\"$id\":\"http://x/r\",\"$ref\":\"#/$defs/b\",\"$defs\":{\"b\":"
	    "{\"type\":\"integer\"}}}", "", "\"a\""),
	PARTIAL(PAT("cat"), "\"ca"),
	VALID(PAT("^ab"), "\"abc\""),
	BAD(PAT("^ab"), "\"", "xab\""),
	VALID(PAT("ab$"), "\"xxab\""),
	BAD(PAT("ab$"), "\"abc", "\""),
	VALID(PAT("^a$|^b$"), "\"a\""),
	VALID(PAT("^a$|^b$"), "\"b\""),
	BAD(PAT("^a$|^b$"), "\"a", "b\""),
	VALID(PAT("^\\\\.\\\\*\\\\$\\\\/$"), "\".*$/\""),
	VALID(PAT("^(ab){2}c?$"), "\"abab\""),
	VALID(PAT("^(ab){2}c?$"), "\"ababc\""),
	BAD(PAT("^(ab){2}c?$"), "\"ab", "\""),
	VALID(PAT("^(?:x|yz)+$"), "\"xyzx\""),
	BAD(PAT("^(?:x|yz)+$"), "\"xy", "x\""),
	VALID(PAT("^[\\\"\\\\\\\\]+$"), "\"\\\"\\\\\""),
	BAD(PAT("^[\\\"\\\\\\\\]+$"), "\"\\\"", "a\""),
	/* each repetition is a whole escape, not a backslash and then quotes */
	VALID(PAT("^[\\\"\\\\\\\\]+$"), "\"\\\"\\\\\\\"\""),
	BAD(PAT("^[\\\"\\\\\\\\]+$"), "\"\\\"\"", "\""),
	VALID(PAT("^[\\\\n\\\\t]{2}$"), "\"\\n\\t\""),
	BAD(PAT("^[\\\\n\\\\t]{2}$"), "\"\\n", "t\""),
	VALID(PAT("^[^a]*$"), "\"bcd\""),
	VALID(PAT("^[^a]*$"), "\"\\\"\\n\\u001f\""),
	BAD(PAT("^[^a]*$"), "\"b", "a\""),
	BAD(PAT("^[^a]*$"), "\"\\u00", "61\""),
	VALID(PAT("^.$"), "\"x\""),
	VALID(PAT("^.$"), "\"\xc3\xa9\""),
	BAD(PAT("^.$"), "\"\\", "n\""),
	VALID(PAT("^\\\\w+\\\\s\\\\d$"), "\"a_1 2\""),
	BAD(PAT("^\\\\w+\\\\s\\\\d$"), "\"a", "\xc3\xa9 2\""),
	VALID(PAT("^\\\\D\\\\W\\\\S$"), "\"a!b\""),
	BAD(PAT("^\\\\D$"), "\"", "\xc3\xa9\""),
	VALID(PAT("^a{2,}$"), "\"aaaa\""),
	BAD(PAT("^a{2,}$"), "\"a", "\""),
	VALID(PAT("^[a-c-]{3}$"), "\"a-c\""),
	VALID(PAT("^\\\\x41\\\\u00e9\\\\t$"), "\"A\xc3\xa9\\t\""),
	VALID(PAT("^[\\\\u0041-\\\\u0043]$"), "\"B\""),
	VALID(PAT("^(a|)b$"), "\"b\""),
	VALID(PAT("^(a|)b$"), "\"ab\""),
	VALID(PAT("^$"), "\"\""),
	BAD(PAT("^$"), "\"", "a\""),
	VALID(PAT(""), "\"anything\""),
	VALID(PAT("^(?<year>[0-9]{4})$"), "\"2024\""),
	VALID(PAT("[}\\\\]]"), "\"]\""),
	/* formats */
	VALID(FMT("date"), "\"2024-02-29\""),
	VALID(FMT("date"), "\"2023-12-31\""),
	VALID(FMT("date"), "\"2000-02-29\""),
	VALID(FMT("date"), "\"0001-01-01\""),
	BAD(FMT("date"), "\"2023-02-2", "9\""),
	BAD(FMT("date"), "\"1900-02-2", "9\""),
	BAD(FMT("date"), "\"2023-04-3", "1\""),
	BAD(FMT("date"), "\"2023-1", "3-01\""),
	BAD(FMT("date"), "\"000", "0-01-01\""),
	VALID(FMT("time"), "\"12:34:56Z\""),
	VALID(FMT("time"), "\"23:59:59.123+05:30\""),
	BAD(FMT("time"), "\"2", "4:00:00Z\""),
	BAD(FMT("time"), "\"12:34:56", "\""),
	VALID(FMT("date-time"), "\"2024-01-15T10:00:00Z\""),
	VALID(FMT("date-time"), "\"2024-01-15T10:00:00.5-08:00\""),
	BAD(FMT("date-time"), "\"2024-01-15", " 10:00:00Z\""),
	VALID(FMT("uuid"), "\"123e4567-e89b-12d3-a456-426614174000\""),
	/* length bounds a format's own lengths lie within: the format alone */
	VALID("{\"type\":\"string\",\"format\":\"uuid\",\"minLength\":1,\"maxLength\":36}",
	      "\"123e4567-e89b-12d3-a456-426614174000\""),
	VALID("{\"type\":\"string\",\"format\":\"ipv4\",\"maxLength\":15}", "\"10.0.0.1\""),
	BAD("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":10}", "\"2023-1", "3-01\""),
	BAD(FMT("uuid"), "\"123e456", "-e89b-12d3-a456-426614174000\""),
	VALID(FMT("email"), "\"a.b+c@example.co.uk\""),
	BAD(FMT("email"), "\"a", " b@example.com\""),
	VALID(FMT("ipv4"), "\"192.168.0.1\""),
	VALID(FMT("ipv4"), "\"0.0.0.0\""),
	BAD(FMT("ipv4"), "\"25", "6.0.0.0\""),
	BAD(FMT("ipv4"), "\"0", "1.0.0.0\""),
	VALID(FMT("uri"), "\"https://example.com:8080/a/b?c=d&e#f\""),
	VALID(FMT("uri"), "\"mailto:a@b.c\""),
	BAD(FMT("uri"), "\"", "1http://x\""),
	VALID("{\"type\":\"integer\",\"format\":\"int64\"}", "5"),
	/* number bounds */
	VALID("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0"),
	VALID("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.5"),
	VALID("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.000"),
	BAD("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.", "1"),
	BAD("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "", "-1"),
	BAD("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "", "2"),
	BAD("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0", "e1"),
	VALID("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.1"),
	VALID("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.0001"),
	VALID("{\"type\":\"number\",\"exclusiveMinimum\":0}", "123456789012345"),
	PARTIAL("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.000"),
	BAD("{\"type\":\"number\",\"exclusiveMinimum\":0}", "", "-0.5"),
	VALID("{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2.25}", "-1.5"),
	VALID("{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2.25}", "2.24999"),
	BAD("{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2.25}", "-1.5", "1"),
	BAD("{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2.25}", "2.2", "5"),
	VALID("{\"type\":\"number\",\"minimum\":5,\"exclusiveMinimum\":true}", "5.5"),
	PARTIAL("{\"type\":\"number\",\"minimum\":5,\"exclusiveMinimum\":true}", "5"),
	VALID("{\"type\":\"number\",\"multipleOf\":1,\"maximum\":3}", "-7"),
	BAD("{\"type\":\"number\",\"multipleOf\":1,\"maximum\":3}", "3", ".0"),
	VALID("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "2"),
	BAD("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "", "1"),
	BAD("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "", "4"),
	VALID("{\"type\":\"integer\",\"minimum\":-1e300}", "-999999999999999999"),
	VALID("{\"type\":\"number\",\"maximum\":1e300}", "123456789012345"),
};

static void test_cases(void)
{
	const char *last = NULL;
	struct pg_grammar *g = NULL;
	int n = (int)(sizeof(cases) / sizeof(cases[0]));

	for (int i = 0; i < n; i++) {
		const struct mcase *m = &cases[i];
		char inst[512];
		size_t ok = strlen(m->ok), len;
		long got, want;

		if (!last || strcmp(last, m->schema)) {
			pg_grammar_free(g);
			g = compile_schema(m->schema, "case");
			last = m->schema;
		}
		if (!g)
			continue;
		snprintf(inst, sizeof(inst), "%s%s", m->ok, m->rest ? m->rest : "");
		len = strlen(inst);
		want = !m->rest ? -1 : (long)ok;
		got = match(g, inst, len);
		CHECK(got == want, "schema %s, instance %s: %s at %ld, want %s at %ld", m->schema,
		      inst, got < 0 ? "accepted" : "refused", got, want < 0 ? "accepted" :
		      !m->rest[0] ? "incomplete" : "refused", want);
	}
	pg_grammar_free(g);
	printf("%d cases\n", n);
}

/* ---- integer ranges, exhaustively around the bounds ---- */

static void check_int_range(const char *schema, long long lo, long long hi, long long from,
			    long long to)
{
	struct pg_grammar *g = compile_schema(schema, "integer range");
	int bad = 0;

	if (!g)
		return;
	for (long long v = from; v <= to && bad < 5; v++) {
		char s[32];
		long got;
		bool in = v >= lo && v <= hi;

		snprintf(s, sizeof(s), "%lld", v);
		got = match(g, s, strlen(s));
		if ((got == -1) != in) {
			bad++;
			CHECK(0, "%s: %lld %s", schema, v, in ? "refused" : "accepted");
		}
	}
	pg_grammar_free(g);
}

static void test_int_ranges(void)
{
	static const struct { long long lo, hi; } r[] = {
		{ 0, 999 }, { -50, 1234 }, { -100, -7 }, { 0, 0 }, { -1, 1 }, { 7, 7 },
		{ 10, 99 }, { 100, 100000 }, { -999, -999 }, { -1000, -1 }, { 19, 1001 },
		{ -3, 0 }, { 0, 1 }, { 99, 101 }, { 1200, 1299 }, { -1299, -1200 },
	};
	char s[160];

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		long long span = r[i].hi - r[i].lo;
		long long pad = span < 200 ? 200 : span / 4;

		snprintf(s, sizeof(s), "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}",
			 r[i].lo, r[i].hi);
		check_int_range(s, r[i].lo, r[i].hi, r[i].lo - pad, r[i].hi + pad);
		snprintf(s, sizeof(s), "{\"type\":\"integer\",\"exclusiveMinimum\":%lld,"
			 "\"exclusiveMaximum\":%lld}", r[i].lo - 1, r[i].hi + 1);
		check_int_range(s, r[i].lo, r[i].hi, r[i].lo - pad, r[i].hi + pad);
	}
	/* one bound only: exhaustive near it, then far values */
	check_int_range("{\"type\":\"integer\",\"minimum\":-37}", -37, INT64_MAX, -2000, 20000);
	check_int_range("{\"type\":\"integer\",\"minimum\":250}", 250, INT64_MAX, -500, 20000);
	check_int_range("{\"type\":\"integer\",\"maximum\":-12}", INT64_MIN, -12, -20000, 500);
	check_int_range("{\"type\":\"integer\",\"maximum\":4321}", INT64_MIN, 4321, -20000, 20000);
	check_int_range("{\"type\":\"integer\",\"exclusiveMinimum\":0}", 1, INT64_MAX, -300, 300);
	check_int_range("{\"type\":\"integer\",\"minimum\":999999999999999990}",
			999999999999999990LL, 999999999999999999LL, 999999999999999000LL,
			999999999999999999LL);
	check_int_range("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":1e30}", -5,
			INT64_MAX, -400, 400);
	{
		struct pg_grammar *g = compile_schema("{\"type\":\"integer\",\"minimum\":250}", "far");

		if (g) {
			CHECK(match(g, "123456789012345678", 18) == -1, "18 digits refused");
			CHECK(match(g, "1234567890123456789", 19) == 18, "19 digits accepted");
			pg_grammar_free(g);
		}
	}
}

/* ---- decimal bounds over a grid of values ---- */

/* v / 1000 written with at least min_frac fraction digits */
static void decimal(char *s, size_t n, long long v, int min_frac)
{
	long long a = v < 0 ? -v : v;
	char frac[8];
	int fl = 3;

	snprintf(frac, sizeof(frac), "%03lld", a % 1000);
	while (fl > min_frac && frac[fl - 1] == '0')
		fl--;
	frac[fl] = '\0';
	snprintf(s, n, "%s%lld%s%s", v < 0 ? "-" : "", a / 1000, fl ? "." : "", frac);
}

static void check_num_range(const char *schema, long long lo, bool lo_x, long long hi,
			    bool hi_x)
{
	struct pg_grammar *g = compile_schema(schema, "number range");
	int bad = 0;

	if (!g)
		return;
	for (long long v = -7000; v <= 7000 && bad < 5; v += 25) {
		bool in = (lo_x ? v > lo : v >= lo) && (hi_x ? v < hi : v <= hi);

		for (int mf = 0; mf <= 3; mf++) {
			char s[48];
			long got;

			decimal(s, sizeof(s), v, mf);
			if (mf == 3)
				strcat(s, "000");
			got = match(g, s, strlen(s));
			if ((got == -1) != in && bad++ < 5)
				CHECK(0, "%s: %s %s", schema, s, in ? "refused" : "accepted");
		}
	}
	pg_grammar_free(g);
}

static void test_num_ranges(void)
{
	/* bounds in thousandths */
	static const struct { long long lo, hi; } r[] = {
		{ 0, 1000 }, { -1500, 2250 }, { -5000, -25 }, { 125, 6000 }, { -3000, 0 },
		{ 0, 0 }, { 975, 1025 }, { -6525, 6525 }, { 50, 75 },
	};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		for (int x = 0; x < 4; x++) {
			char s[200], a[32], b[32];
			bool lx = x & 1, hx = x & 2;

			if (r[i].lo == r[i].hi && x)
				continue;
			decimal(a, sizeof(a), r[i].lo, 0);
			decimal(b, sizeof(b), r[i].hi, 0);
			snprintf(s, sizeof(s), "{\"type\":\"number\",\"%s\":%s,\"%s\":%s}",
				 lx ? "exclusiveMinimum" : "minimum", a,
				 hx ? "exclusiveMaximum" : "maximum", b);
			check_num_range(s, r[i].lo, lx, r[i].hi, hx);
		}
	}
	check_num_range("{\"type\":\"number\",\"minimum\":-2.5}", -2500, false, INT64_MAX, false);
	check_num_range("{\"type\":\"number\",\"exclusiveMaximum\":0.125}", INT64_MIN, false, 125,
			true);
	check_num_range("{\"type\":\"number\",\"exclusiveMinimum\":0}", 0, true, INT64_MAX, false);
}

/* ---- what must be refused ---- */

struct ecase {
	const char *schema, *what, *where;	/* the message holds both */
};

static const struct ecase errors[] = {
	{ "{", "invalid JSON", "line 1" },
	{ "[1,2", "invalid JSON", "column" },
	{ "{\"a\":1,\"a\":2}", "invalid JSON", "duplicate" },
	{ "false", "accepts no value", "#" },
	{ "{\"type\":\"strin\"}", "strin", "#/type" },
	{ "{\"type\":[]}", "type", "#/type" },
	{ "[]", "must be an object", "#" },
	{ PAT("(?=a)"), "lookahead", "#/pattern" },
	{ "{\"properties\":{\"a\":{\"pattern\":\"a(?<=b)\"}}}", "lookbehind",
	  "#/properties/a/pattern" },
	{ PAT("(a)\\\\1"), "backreference", "#/pattern" },
	{ PAT("\\\\k<x>"), "backreference", "#/pattern" },
	{ PAT("a*?"), "lazy", "#/pattern" },
	{ PAT("a+?"), "lazy", "#/pattern" },
	{ PAT("a\\\\bb"), "word boundary", "#/pattern" },
	{ PAT("a^b"), "anchor", "#/pattern" },
	{ PAT("(^a)"), "anchor", "#/pattern" },
	{ PAT("a$b"), "anchor", "#/pattern" },
	{ PAT("\\\\p{L}"), "Unicode property", "#/pattern" },
	{ PAT("(?i)a"), "group modifier", "#/pattern" },
	{ PAT("[z-a]"), "out of order", "#/pattern" },
	{ PAT("(ab"), "unterminated group", "#/pattern" },
	{ PAT("ab)"), "unmatched", "#/pattern" },
	{ PAT("[ab"), "unterminated class", "#/pattern" },
	{ PAT("a{2,1}"), "out of order", "#/pattern" },
	{ PAT("*a"), "nothing to repeat", "#/pattern" },
	{ PAT("a**"), "quantifier after a quantifier", "#/pattern" },
	{ PAT("a{"), "not a quantifier", "#/pattern" },
	{ PAT("a{2"), "not a quantifier", "#/pattern" },
	{ PAT("a{,2}"), "not a quantifier", "#/pattern" },
	{ PAT("\\\\q"), "escape", "#/pattern" },
	{ PAT("[]"), "empty class", "#/pattern" },
	{ PAT("\\\\ud800"), "surrogate", "#/pattern" },
	{ PAT("\\\\"), "backslash", "#/pattern" },
	{ PAT("a{200000}"), "repetition count", "#/pattern" },
	{ "{\"type\":\"string\",\"pattern\":5}", "pattern", "#/pattern" },
	{ "{\"type\":\"integer\",\"multipleOf\":5}", "multipleOf", "#/multipleOf" },
	{ "{\"type\":\"number\",\"multipleOf\":0.01}", "multipleOf", "#/multipleOf" },
	{ "{\"properties\":{\"age\":{\"type\":\"number\",\"minimum\":0.30000000000000004}}}",
	  "significant digits", "#/properties/age/minimum" },
	{ "{\"type\":\"number\",\"minimum\":\"5\"}", "minimum", "#/minimum" },
	{ "{\"type\":\"number\",\"exclusiveMinimum\":true}", "exclusiveMinimum",
	  "#/exclusiveMinimum" },
	{ FMT("hostname"), "hostname", "#/format" },
	{ "{\"type\":\"string\",\"format\":3}", "format", "#/format" },
	{ "{\"not\":{\"type\":\"string\"}}", "'not'", "#/not" },
	{ "{\"if\":{},\"then\":{}}", "'if'", "#/if" },
	{ "{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems", "#/uniqueItems" },
	{ "{\"type\":\"array\",\"contains\":{}}", "contains", "#/contains" },
	{ "{\"type\":[\"string\",\"array\"],\"contains\":{}}", "contains", "#/contains" },
	{ "{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "patternProperties",
	  "#/patternProperties" },
	{ "{\"type\":\"object\",\"propertyNames\":{\"maxLength\":3}}", "propertyNames",
	  "#/propertyNames" },
	{ "{\"type\":\"object\",\"dependentRequired\":{\"a\":[\"b\"]}}", "dependentRequired",
	  "#/dependentRequired" },
	{ "{\"type\":\"object\",\"unevaluatedProperties\":false}", "unevaluatedProperties",
	  "#/unevaluatedProperties" },
	{ "{\"type\":\"object\",\"minProperties\":2}", "minProperties", "#/minProperties" },
	{ "{\"type\":\"object\",\"maxProperties\":2}", "maxProperties", "#/maxProperties" },
	{ "{\"type\":\"object\",\"properties\":5}", "properties", "#/properties" },
	{ "{\"type\":\"object\",\"required\":\"a\"}", "required", "#/required" },
	{ "{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}", "required",
	  "#/required" },
	{ "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"minLength\":3,"
	  "\"maxLength\":2}},\"required\":[\"x\"]}", "minLength", "#/properties/x" },
	{ "{\"foo\":1}", "unknown keyword 'foo'", "#/foo" },
	{ "{\"properties\":{\"a\":{\"typo\":1}}}", "typo", "#/properties/a/typo" },
	{ "{\"$ref\":\"http://example.com/s.json\"}", "not a local reference", "#/$ref" },
	{ "{\"$ref\":\"#foo\"}", "not a local reference", "#/$ref" },
	{ "{\"$ref\":\"#/$defs/missing\"}", "names nothing", "#/$ref" },
	{ "{\"$ref\":5}", "$ref", "#/$ref" },
	{ "{\"$ref\":\"#\"}", "left recursion", "#/$ref" },
	{ "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},"
	  "{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}", "left recursion", "#/$defs/" },
	{ "{\"$defs\":{\"a\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}],\"type\":\"null\"}},"
	  "\"properties\":{\"x\":{\"anyOf\":[{\"$ref\":\"#/$defs/x\"}]}}}", "names nothing",
	  "#/properties/x/anyOf/0/$ref" },
	{ "{\"$defs\":{\"x\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/x\"}]}},"
	  "\"$ref\":\"#/$defs/x\"}", "left recursion", "#/$defs/x" },
	{ "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "oneOf", "#/oneOf" },
	{ "{\"oneOf\":[{\"properties\":{\"a\":{}}},{\"properties\":{\"b\":{}}}]}", "oneOf",
	  "#/oneOf" },
	{ "{\"oneOf\":[{\"minimum\":0},{\"type\":\"string\"}]}", "oneOf", "#/oneOf" },
	{ "{\"properties\":{\"p\":{\"oneOf\":[{\"enum\":[1,2]},{\"enum\":[2.0,3]}]}}}", "oneOf",
	  "#/properties/p/oneOf" },
	{ "{\"type\":\"integer\",\"minimum\":10,\"maximum\":5}", "no integer", "#/minimum" },
	{ "{\"type\":\"number\",\"minimum\":1,\"exclusiveMaximum\":1}", "no number", "#/minimum" },
	{ "{\"enum\":[]}", "enum", "#/enum" },
	{ "{\"enum\":\"a\"}", "'enum' must be an array", "#/enum" },
	{ "{\"type\":\"string\",\"enum\":[1,2]}", "enum", "#/enum" },
	{ "{\"enum\":[\"a\"],\"minLength\":1}", "minLength", "#/minLength" },
	{ "{\"type\":\"string\",\"minLength\":-1}", "minLength", "#/minLength" },
	{ "{\"type\":\"string\",\"minLength\":1.5}", "minLength", "#/minLength" },
	{ "{\"type\":\"string\",\"maxLength\":1000000}", "maxLength", "#/maxLength" },
	{ "{\"nullable\":true,\"type\":\"string\"}", "nullable", "#/nullable" },
	{ "{\"allOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "pattern",
	  "#/allOf/1/pattern" },
	{ "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "type", "#/allOf/0/type" },
	{ "{\"allOf\":[]}", "allOf", "#/allOf" },
	{ "{\"anyOf\":[]}", "anyOf", "#/anyOf" },
	{ "{\"anyOf\":[false,{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}]}", "accepts no value",
	  "#/anyOf/" },
	{ "{\"$defs\":{\"a\":{\"$id\":\"http://x/a\",\"type\":\"object\",\"properties\":{\"b\":"
	  "{\"$ref\":\"#/$defs/c\"}}},\"c\":{}},\"$ref\":\"#/$defs/a\"}", "$id",
	  "#/$defs/a/properties/b/$ref" },
	{ "{\"$defs\":{\"a\":{\"$id\":\"http://x/a\",\"$ref\":\"#/$defs/b\"},\"b\":{}},"
	  "\"$ref\":\"#/$defs/a\"}", "beside or below a nested '$id'", "#/$defs/a/$ref" },
	{ PAT("^[^\\\\u0000-\\\\uD7FF\\\\uE000-\\\\uDBFF\\\\uDFFF]$"), "matches nothing", "#/pattern" },
	{ "{\"items\":[{}],\"prefixItems\":[{}]}", "items", "#/items" },
	{ "{\"type\":\"array\",\"prefixItems\":{}}", "prefixItems", "#/prefixItems" },
	{ "{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems", "#/minItems" },
	{ "{\"type\":\"array\",\"prefixItems\":[{},false],\"minItems\":2}", "minItems",
	  "#/minItems" },
	{ "{\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"ipv4\",\"maxLength\":9}}}",
	  "cut into format \"ipv4\"", "#/properties/a/maxLength" },
	{ "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":40}",
	  "unbounded or varied", "#/maxLength" },
	{ "{\"type\":\"string\",\"format\":\"date\",\"minLength\":11}", "accepts no value",
	  "#/minLength" },
	{ "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "maxLength", "#/maxLength" },
	{ "{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}", "format", "#/format" },
	{ "{\"$dynamicRef\":\"#x\"}", "$dynamicRef", "#/$dynamicRef" },
	{ "{\"properties\":{\"a\":{\"items\":{\"properties\":{\"b\":{\"not\":{}}}}}}}", "not",
	  "#/properties/a/items/properties/b/not" },
	{ "{\"$defs\":{\"t\":{\"properties\":{\"a\":{\"$ref\":\"#/$defs/t\"}},"
	  "\"required\":[\"a\"]}},\"$ref\":\"#/$defs/t\"}", "refers to itself", "#/$defs/t" },
	{ "{\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"},\"minItems\":1}},"
	  "\"$ref\":\"#/$defs/t\"}", "refers to itself", "#/$defs/t" },
	{ "{\"type\":\"string\",\"format\":\"date\",\"enum\":[\"2024-01-01\"]}", "format",
	  "#/format" },
};

static void test_errors(void)
{
	int n = (int)(sizeof(errors) / sizeof(errors[0]));

	for (int i = 0; i < n; i++) {
		char err[512] = "unset", *g = (char *)1;
		int rc = pg_schema_to_gbnf(errors[i].schema, strlen(errors[i].schema), &g, err,
					   sizeof(err));

		CHECK(rc == -EINVAL, "%s: %d, want -EINVAL", errors[i].schema, rc);
		CHECK(!g, "%s: *gbnf not NULL on error", errors[i].schema);
		CHECK(strstr(err, errors[i].what) && strstr(err, errors[i].where),
		      "%s: message \"%s\" lacks \"%s\" or \"%s\"", errors[i].schema, err,
		      errors[i].what, errors[i].where);
		if (!rc)
			free(g);
	}
	/* deep nesting is refused, not a stack overflow */
	{
		char s[8192] = "";
		char err[256];
		char *g;

		for (int i = 0; i < 200; i++)
			strcat(s, "{\"items\":");
		strcat(s, "{}");
		for (int i = 0; i < 200; i++)
			strcat(s, "}");
		CHECK(pg_schema_to_gbnf(s, strlen(s), &g, err, sizeof(err)) == -EINVAL &&
		      strstr(err, "nests"), "200 nested items: %s", err);
	}
	/* a small buffer truncates the message; a zero-sized one is allowed */
	{
		char err[8];
		char *g;

		CHECK(pg_schema_to_gbnf("{\"foo\":1}", 9, &g, err, sizeof(err)) == -EINVAL &&
		      strlen(err) == 7, "truncated message");
		CHECK(pg_schema_to_gbnf("{\"foo\":1}", 9, &g, NULL, 0) == -EINVAL, "no buffer");
	}
	printf("%d refused schemas\n", n);
}

/* ---- the fixed grammars ---- */

static void test_fixed(void)
{
	static const char *const objects[] = { "{}", "{\"a\":[1,{\"b\":null}]}", "{ \"x\" : 1 }" };
	static const char *const others[] = { "[]", "1", "\"s\"", "true", "null" };
	struct pg_grammar *any = NULL, *obj = NULL;
	char err[512];

	CHECK(!pg_grammar_compile(pg_gbnf_any_json(), strlen(pg_gbnf_any_json()), &any, err,
				  sizeof(err)), "pg_gbnf_any_json: %s", err);
	CHECK(!pg_grammar_compile(pg_gbnf_json_object(), strlen(pg_gbnf_json_object()), &obj, err,
				  sizeof(err)), "pg_gbnf_json_object: %s", err);
	if (!any || !obj)
		goto out;
	for (size_t i = 0; i < sizeof(objects) / sizeof(objects[0]); i++) {
		CHECK(match(any, objects[i], strlen(objects[i])) == -1, "any: %s", objects[i]);
		CHECK(match(obj, objects[i], strlen(objects[i])) == -1, "object: %s", objects[i]);
	}
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		CHECK(match(any, others[i], strlen(others[i])) == -1, "any: %s", others[i]);
		CHECK(match(obj, others[i], strlen(others[i])) == 0, "object: %s", others[i]);
	}
out:
	pg_grammar_free(any);
	pg_grammar_free(obj);
}

/* ---- the real-world schemas ---- */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return NULL;
	}
	buf = xmalloc((size_t)n + 1);
	*len = fread(buf, 1, (size_t)n, f);
	buf[*len] = '\0';
	fclose(f);
	return buf;
}

static const char *schema_dir(void)
{
	static char dir[4096];
	const char *top = getenv("top_srcdir");

	if (top)
		snprintf(dir, sizeof(dir), "%s/tests/data/schemas", top);
	else
		snprintf(dir, sizeof(dir), "%s", PG_SCHEMA_DIR);
	return dir;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The files' names, sorted, in *out (the caller frees them and the array;
 * NULL when there are none); their count, or -1 when there is no such
 * directory.
 */
static int list_schemas(char ***out)
{
	DIR *d = opendir(schema_dir());
	struct dirent *e;
	char **names = NULL;
	int n = 0;

	*out = NULL;
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (l < 6 || strcmp(e->d_name + l - 5, ".json"))
			continue;
		names = realloc(names, (size_t)(n + 1) * sizeof(*names));
		if (!names)
			exit(1);
		names[n] = strdup(e->d_name);
		if (!names[n++])
			exit(1);
	}
	closedir(d);
	if (n)
		qsort(names, (size_t)n, sizeof(*names), cmp_name);
	*out = names;
	return n;
}

static void test_files(void)
{
	char **names;
	int n = list_schemas(&names);

	if (n <= 0) {	/* the set is not there (yet): nothing to check */
		printf("%s: %s, skipped\n", schema_dir(), n < 0 ? "no such directory" :
		       "no .json files");
		free(names);
		return;
	}
	printf("%d schema files in %s\n", n, schema_dir());
	for (int i = 0; i < n; i++) {
		char path[4400], err[512], *text, *g;
		struct pg_grammar *gr = NULL;
		size_t len;
		struct timespec t0, t1;
		int rc;

		snprintf(path, sizeof(path), "%s/%s", schema_dir(), names[i]);
		text = read_file(path, &len);
		CHECK(text, "%s: cannot read", path);
		if (!text) {
			free(names[i]);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		rc = pg_schema_to_gbnf(text, len, &g, err, sizeof(err));
		CHECK(rc == 0, "%s: %d %s", names[i], rc, err);
		if (!rc) {
			rc = pg_grammar_compile(g, strlen(g), &gr, err, sizeof(err));
			CHECK(rc == 0, "%s: the grammar does not compile: %s\n%s", names[i], err, g);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			printf("  %-32s %6zu bytes of grammar, %.2f ms\n", names[i], strlen(g),
			       (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
			       (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
			pg_grammar_free(gr);
			free(g);
		}
		free(text);
		free(names[i]);
	}
	free(names);
}

/* ---- random and mutated schemas ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

static void fuzz_one(const char *s, size_t n, int *ok)
{
	char err[512], *g;
	struct pg_grammar *gr = NULL;
	int rc = pg_schema_to_gbnf(s, n, &g, err, sizeof(err));

	CHECK(rc == 0 || rc == -EINVAL, "fuzz: rc %d for %.*s", rc, (int)n, s);
	CHECK(rc || g, "fuzz: 0 without a grammar");
	CHECK(!rc || err[0], "fuzz: an error without a message for %.*s", (int)n, s);
	if (rc)
		return;
	(*ok)++;
	rc = pg_grammar_compile(g, strlen(g), &gr, err, sizeof(err));
	CHECK(rc == 0, "fuzz: %.*s translates, but does not compile: %s\n%s", (int)n, s, err, g);
	pg_grammar_free(gr);
	free(g);
}

static const char *const kw_pool[] = {
	"type", "properties", "required", "additionalProperties", "items", "prefixItems",
	"enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "minimum", "maximum",
	"exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "format",
	"minItems", "maxItems", "multipleOf", "not", "title", "uniqueItems",
};
static const char *const val_pool[] = {
	"\"string\"", "\"integer\"", "\"number\"", "\"object\"", "\"array\"", "\"null\"",
	"\"boolean\"", "[\"string\",\"null\"]", "0", "1", "-3", "2.5", "1e400", "100", "true",
	"false", "null", "\"#\"", "\"#/$defs/a\"", "\"#/$defs/b\"", "\"^a+$\"", "\"[0-9]{2}\"",
	"\"(x|y)*\"", "\"date\"", "\"uuid\"", "[\"a\"]", "[1,2]", "[]", "{}", "\"\"",
	"\"(a?|b)+\"", "\"((x?)*y?){2,3}\"", "\"[^\\\\uD7FF-\\\\uE000]\"",
};

/* A random schema of depth at most d, appended to s. */
static void random_schema(char *s, size_t cap, int d)
{
	int n = (int)rnd(4);

	if (strlen(s) + 200 > cap || d <= 0 || !rnd(6)) {
		strcat(s, rnd(5) ? "{}" : rnd(2) ? "true" : "false");
		return;
	}
	strcat(s, "{");
	for (int i = 0; i < n; i++) {
		const char *k = kw_pool[rnd(sizeof(kw_pool) / sizeof(kw_pool[0]))];

		if (i)
			strcat(s, ",");
		strcat(s, "\"");
		strcat(s, k);
		strcat(s, "\":");
		if (!strcmp(k, "properties") || !strcmp(k, "$defs")) {
			strcat(s, "{\"a\":");
			random_schema(s, cap, d - 1);
			strcat(s, ",\"b\":");
			random_schema(s, cap, d - 1);
			strcat(s, "}");
		} else if (!strcmp(k, "items") || !strcmp(k, "not") ||
			   !strcmp(k, "additionalProperties")) {
			random_schema(s, cap, d - 1);
		} else if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf") ||
			   !strcmp(k, "prefixItems")) {
			strcat(s, "[");
			random_schema(s, cap, d - 1);
			strcat(s, ",");
			random_schema(s, cap, d - 1);
			strcat(s, "]");
		} else if (!strcmp(k, "required")) {
			strcat(s, rnd(2) ? "[\"a\"]" : "[\"b\",\"c\"]");
		} else {
			strcat(s, val_pool[rnd(sizeof(val_pool) / sizeof(val_pool[0]))]);
		}
	}
	strcat(s, "}");
}

static void test_fuzz(void)
{
	static const char mut[] = "{}[]\":,0123456789-.e \\aA$#/^*+?()|";
	int n_ok = 0, n = 0;
	int rounds = getenv("PAGODA_SANITIZERS") ? 1500 : 4000;

	for (int i = 0; i < rounds; i++, n++) {
		char s[8192] = "";

		random_schema(s, sizeof(s), 5);
		fuzz_one(s, strlen(s), &n_ok);
	}
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		for (int k = 0; k < 8; k++, n++) {
			char s[1024];
			size_t len = strlen(cases[c].schema);
			int edits = 1 + (int)rnd(3);

			if (len + 8 > sizeof(s))
				continue;
			memcpy(s, cases[c].schema, len + 1);
			for (int e = 0; e < edits && len; e++) {
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
			fuzz_one(s, len, &n_ok);
		}
	}
	printf("%d random and mutated schemas, %d translated\n", n, n_ok);
}

int main(void)
{
	vocab_init();
	test_fixed();
	test_cases();
	test_int_ranges();
	test_num_ranges();
	test_errors();
	test_files();
	test_fuzz();
	pg_grammar_vocab_free(vocab);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", (int)failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
