/*
 * test_tools - pagoda-http's tool calls (http/tools.c) without a model:
 * for each tool-call format and tool_choice, the grammar compiles in the
 * daemon's grammar engine, accepts the calls the format writes (and the
 * history renderer's text for them), refuses what it must (an unknown
 * function, arguments outside the schema, a second call where one is
 * allowed, text where calls are required), and the reader gives back the
 * calls and text fed to it in pieces of every size.  Also the rule renamer
 * and the refusals of bad tools.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/grammar.h"
#include "http/http.h"
#include "tests/check.h"

static struct pg_grammar_vocab *bytes_vocab(void)
{
	static char piece[256][2];
	const char *pieces[257];
	size_t lens[257];
	uint8_t eog[257] = { 0 };
	struct pg_grammar_vocab *v = NULL;

	for (int i = 0; i < 256; i++) {
		piece[i][0] = (char)i;
		pieces[i] = piece[i];
		lens[i] = 1;
	}
	pieces[256] = "";
	lens[256] = 0;
	eog[256] = 1;
	CHECK(pg_grammar_vocab_from_pieces(pieces, lens, eog, 257, &v) == 0, "check: %s", "pg_grammar_vocab_from_pieces(pieces, lens, eog, 257, &v) == 0");
	return v;
}

/* matches - the whole text is a sentence of the grammar */
static int matches(struct pg_grammar *g, const struct pg_grammar_vocab *v,
		   const char *text)
{
	struct pg_grammar_state *s = pg_grammar_state_create(g);
	int ok = 1;

	CHECK(s, "check: %s", "s");
	for (const char *p = text; *p && ok; p++)
		ok = pg_grammar_accept(s, v, (unsigned char)*p) == 0;
	ok = ok && pg_grammar_done(s);
	pg_grammar_state_free(s);
	return ok;
}

static const char *const tools_json =
	"{\"tools\": ["
	"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
	" \"description\": \"weather\", \"parameters\": {\"type\": \"object\","
	" \"additionalProperties\": false, \"required\": [\"city\"],"
	" \"properties\": {\"city\": {\"enum\": [\"Paris\", \"Oslo\"]}}}}},"
	"{\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]";

static json_t *body(const char *extra)
{
	char text[2048];
	json_error_t je;
	json_t *o;

	snprintf(text, sizeof text, "%s%s}", tools_json, extra);
	o = json_loads(text, 0, &je);
	CHECK(o, "%s", je.text);
	return o;
}

/* The calls each format writes: one of get_weather, then ping after it. */
struct fmt_case {
	enum tool_dialect d;
	const char *one, *two, *bad_args, *bad_name;
};

static const struct fmt_case formats[] = {
	{ TD_JSON,
	  "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]}",
	  "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
	  "{\"name\": \"ping\", \"arguments\": {}}]}",
	  "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]}",
	  "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {}}]}" },
	{ TD_HERMES,
	  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
	  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
	  "</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
	  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}\n</tool_call>",
	  "<tool_call>\n{\"name\": \"pong\", \"arguments\": {}}\n</tool_call>" },
	{ TD_LLAMA3,
	  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
	  NULL,
	  "{\"name\": \"get_weather\", \"parameters\": {}}",
	  "{\"name\": \"get_weather2\", \"parameters\": {}}" },
};

/* read - feed text to a reader in pieces of `step` bytes */
static void read_all(const struct tools *t, const char *text, size_t step,
		     struct tparse *p, struct buf *content)
{
	size_t n = strlen(text);

	tparse_init(p, t);
	memset(content, 0, sizeof *content);
	for (size_t i = 0; i < n; i += step)
		CHECK(tparse_feed(p, text + i, i + step > n ? n - i : step, content) == 0, "check: %s", "tparse_feed(p, text + i, i + step > n ? n - i : step, content) == 0");
	CHECK(tparse_end(p, content) == 0, "check: %s", "tparse_end(p, content) == 0");
}

static void check_read(const struct tools *t, const char *text, size_t n_calls,
		       const char *first_args)
{
	for (size_t step = 1; step <= 9; step++) {
		struct tparse p;
		struct buf content;

		read_all(t, text, step, &p, &content);
		CHECK(!p.broken && p.n_calls == n_calls && content.len == 0,
			  "format %d step %zu: %zu calls, broken %d, content '%s'", t->d,
			  step, p.n_calls, p.broken, content.s ? content.s : "");
		CHECK(!strcmp(p.calls[0].name, "get_weather"), "check: %s", "!strcmp(p.calls[0].name, \"get_weather\")");
		CHECK(!strcmp(p.calls[0].args.s, first_args), "args '%s'", p.calls[0].args.s);
		CHECK(!strncmp(p.calls[0].id, "call_", 5) && strlen(p.calls[0].id) == 29, "check: %s", "!strncmp(p.calls[0].id, \"call_\", 5) && strlen(p.calls[0].id) == 29");
		if (n_calls > 1) {
			CHECK(!strcmp(p.calls[1].name, "ping"), "check: %s", "!strcmp(p.calls[1].name, \"ping\")");
			CHECK(!strcmp(p.calls[1].args.s, "{}"), "check: %s", "!strcmp(p.calls[1].args.s, \"{}\")");
			CHECK(strcmp(p.calls[0].id, p.calls[1].id), "check: %s", "strcmp(p.calls[0].id, p.calls[1].id)");
		}
		tparse_free(&p);
		free(content.s);
	}
}

static void test_format(const struct fmt_case *fc, struct pg_grammar_vocab *v)
{
	static const char *const choices[] = {
		", \"tool_choice\": \"required\"", ", \"tool_choice\": \"auto\"",
		", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}",
		", \"tool_choice\": \"required\", \"parallel_tool_calls\": false",
	};

	for (size_t c = 0; c < sizeof choices / sizeof *choices; c++) {
		json_t *o = body(choices[c]);
		struct tools t;
		struct perr e = { 0 };
		struct pg_grammar *g = NULL;
		char err[256], *gbnf;
		int parallel = c == 0 || c == 1;

		CHECK(tools_parse(&t, o, &e) == 0, "%s", e.msg);
		t.d = fc->d;
		gbnf = tools_grammar(&t, NULL, &e);
		CHECK(gbnf, "check: %s", "gbnf");
		CHECK(pg_grammar_compile(gbnf, strlen(gbnf), &g, err, sizeof err) == 0,
			  "format %d choice %zu: %s\n%s", fc->d, c, err, gbnf);
		CHECK(matches(g, v, fc->one), "format %d choice %zu refuses one call", fc->d, c);
		CHECK(!matches(g, v, fc->bad_args), "check: %s", "!matches(g, v, fc->bad_args)");
		CHECK(!matches(g, v, fc->bad_name), "check: %s", "!matches(g, v, fc->bad_name)");
		if (fc->two)
			CHECK(matches(g, v, fc->two) == parallel,
				  "format %d choice %zu: two calls", fc->d, c);
		/* text: only with auto, and never one that opens a call */
		CHECK(matches(g, v, "It is sunny.") == (c == 1), "check: %s", "matches(g, v, \"It is sunny.\") == (c == 1)");
		CHECK(matches(g, v, "") == (c == 1), "check: %s", "matches(g, v, \"\") == (c == 1)");
		if (c == 1) {
			CHECK(matches(g, v, fc->d == TD_HERMES ? "<b>bold</b>" : "{not a call"), "check: %s", "matches(g, v, fc->d == TD_HERMES ? \"<b>bold</b>\" : \"{not a call\")");
			/* the whole opening, then no offered name: neither branch */
			CHECK(!matches(g, v, fc->d == TD_HERMES ? "<tool_call>\n{\"name\": \"x" :
					     fc->d == TD_JSON ? "{\"tool_calls\": [{\"name\": \"x"
							      : "{\"name\": \"x"), "check: %s", "!matches(g, v, fc->d == TD_HERMES ? \"<tool_call>\\n{\\\"name\\\": \\\"x\" :           fc->d == TD_JSON ? \"{\\\"tool_calls\\\": [{\\\"name\\\": \\\"x\"              : \"{\\\"name\\\": \\\"x\")");
			/* a text may begin like the opening, and go elsewhere */
			CHECK(matches(g, v, fc->d == TD_HERMES ? "<tool_call>\nhi" : "{\"nam"), "check: %s", "matches(g, v, fc->d == TD_HERMES ? \"<tool_call>\\nhi\" : \"{\\\"nam\")");
		}
		/* a call as the history writes it is one the grammar accepts */
		{
			json_t *calls = json_loads("[{\"id\": \"call_1\", \"type\": \"function\", "
						   "\"function\": {\"name\": \"get_weather\", "
						   "\"arguments\": \"{\\\"city\\\":\\\"Oslo\\\"}\"}}]",
						   0, NULL);
			char *h = tools_history(fc->d, calls, NULL, 1, &e);

			CHECK(h && !strcmp(h, fc->one), "check: %s", "h && !strcmp(h, fc->one)");
			free(h);
			h = tools_history(fc->d, calls, "Let me look.", 1, &e);
			CHECK(h && !strncmp(h, "Let me look.\n", 13) && !strcmp(h + 13, fc->one), "check: %s", "h && !strncmp(h, \"Let me look.\\n\", 13) && !strcmp(h + 13, fc->one)");
			free(h);
			json_decref(calls);
		}
		pg_grammar_free(g);
		free(gbnf);

		/* the reader */
		check_read(&t, fc->one, 1, "{\"city\": \"Oslo\"}");
		if (fc->two && parallel)
			check_read(&t, fc->two, 2, "{\"city\": \"Paris\"}");
		if (c == 1) {
			struct tparse p;
			struct buf content;
			const char *texts[] = { "It is sunny.", "<b>x</b>", "{x", "<tool", "" };

			for (size_t k = 0; k < sizeof texts / sizeof *texts; k++)
				for (size_t step = 1; step <= 4; step++) {
					read_all(&t, texts[k], step, &p, &content);
					CHECK(!p.broken && !p.n_calls && content.len == strlen(texts[k]) &&
						  (!content.len || !strcmp(content.s, texts[k])),
						  "auto text '%s' read as '%s'", texts[k],
						  content.s ? content.s : "");
					tparse_free(&p);
					free(content.s);
				}
		}
		/* cut short inside the name: no call; inside the arguments: kept */
		{
			struct tparse p;
			struct buf content;
			char cut[256];
			const char *args = strstr(fc->one, "{\"city");

			snprintf(cut, sizeof cut, "%.*s", (int)(strstr(fc->one, "weather") - fc->one),
				 fc->one);
			read_all(&t, cut, 3, &p, &content);
			CHECK(p.n_calls == 0, "check: %s", "p.n_calls == 0");
			tparse_free(&p);
			free(content.s);
			snprintf(cut, sizeof cut, "%.*s", (int)(args - fc->one + 4), fc->one);
			read_all(&t, cut, 2, &p, &content);
			CHECK(p.n_calls == 1 && !strcmp(p.calls[0].args.s, "{\"ci"), "check: %s", "p.n_calls == 1 && !strcmp(p.calls[0].args.s, \"{\\\"ci\")");
			tparse_free(&p);
			free(content.s);
		}
		tools_free(&t);
		json_decref(o);
	}
}

/* auto with response_format's grammar: calls, or text of that grammar */
static void test_text_grammar(struct pg_grammar_vocab *v)
{
	json_t *o = body("");
	struct tools t;
	struct perr e = { 0 };
	struct pg_grammar *g = NULL;
	char err[256], *gbnf;

	CHECK(tools_parse(&t, o, &e) == 0 && t.choice == TC_AUTO && t.parallel, "check: %s", "tools_parse(&t, o, &e) == 0 && t.choice == TC_AUTO && t.parallel");
	t.d = TD_HERMES;
	gbnf = tools_grammar(&t, "root ::= (\"yes\" | \"no\") tail\ntail ::= \".\"\n", &e);
	CHECK(gbnf && pg_grammar_compile(gbnf, strlen(gbnf), &g, err, sizeof err) == 0, "check: %s", "gbnf && pg_grammar_compile(gbnf, strlen(gbnf), &g, err, sizeof err) == 0");
	CHECK(matches(g, v, "yes.") && matches(g, v, "no."), "check: %s", "matches(g, v, \"yes.\") && matches(g, v, \"no.\")");
	CHECK(!matches(g, v, "maybe."), "check: %s", "!matches(g, v, \"maybe.\")");
	CHECK(matches(g, v, formats[1].one), "check: %s", "matches(g, v, formats[1].one)");
	pg_grammar_free(g);
	free(gbnf);
	tools_free(&t);
	json_decref(o);
}

static void test_prefixed(void)
{
	char *p = gbnf_prefixed("root ::= a-b \"root x\" [a-z_] # root\n"
				"a-b ::= item_2{1,3} \"\\\"q\" [\\]a]\n", "t0-");

	CHECK(p && !strcmp(p, "t0-root ::= t0-a-b \"root x\" [a-z_] # root\n"
			       "t0-a-b ::= t0-item_2{1,3} \"\\\"q\" [\\]a]\n"), "%s", p);
	free(p);
}

static void test_refusals(void)
{
	static const struct {
		const char *body, *param, *words;
	} cases[] = {
		{ "{\"tools\": 3}", "tools", "must be an array" },
		{ "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
		  "tools[0].function.name", "letters" },
		{ "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}},"
		  " {\"type\": \"function\", \"function\": {\"name\": \"a\"}}]}",
		  "tools[1].function.name", "a second function" },
		{ "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\","
		  " \"parameters\": {\"type\": \"object\", \"properties\": {\"x\":"
		  " {\"type\": \"number\", \"multipleOf\": 3}}}}}]}",
		  "tools[0].function.parameters", "multipleOf" },
		{ "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\","
		  " \"parameters\": [] }}]}", "tools[0].function.parameters", "of an object" },
		{ "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\","
		  " \"strict\": true, \"extra\": 1}}]}", "tools[0].function", "extra" },
		{ "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}],"
		  " \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"b\"}}}",
		  "tool_choice", "does not offer" },
		{ "{\"tool_choice\": \"auto\"}", "tool_choice", "needs 'tools'" },
		{ "{\"tools\": [], \"parallel_tool_calls\": 1}", "parallel_tool_calls", "true or false" },
	};

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		json_t *o = json_loads(cases[i].body, 0, NULL);
		struct tools t;
		struct perr e = { 0 };

		CHECK(o, "check: %s", "o");
		CHECK(tools_parse(&t, o, &e) < 0, "accepted %s", cases[i].body);
		CHECK(e.status == 400 && !strcmp(e.param, cases[i].param) &&
			  strstr(e.msg, cases[i].words), "%s: %s (%s)", cases[i].body, e.msg, e.param);
		tools_free(&t);
		json_decref(o);
	}
	/* "none" with tools: as if none */
	{
		json_t *o = body(", \"tool_choice\": \"none\"");
		struct tools t;
		struct perr e = { 0 };

		CHECK(tools_parse(&t, o, &e) == 0 && t.n == 0, "check: %s", "tools_parse(&t, o, &e) == 0 && t.n == 0");
		json_decref(o);
	}
}

int main(void)
{
	struct pg_grammar_vocab *v = bytes_vocab();

	for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
		test_format(&formats[i], v);
	test_text_grammar(v);
	test_prefixed();
	test_refusals();
	pg_grammar_vocab_free(v);
	if (failures)
		return 1;
	printf("test_tools: ok\n");
	return 0;
}
