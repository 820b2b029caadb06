/*
 * http/tools.c - OpenAI's function calling for pagoda-http: `tools`,
 * `tool_choice` and `parallel_tool_calls` in, `tool_calls` out.
 *
 * The model is told about the tools in its system message and answers in
 * the tool-call format its template was trained on (the daemon names it,
 * pagoda_chat_info): Qwen's and Hermes' "<tool_call>" blocks, Llama 3.1's
 * bare {"name", "parameters"} object, or, for models without one, pagoda's
 * own {"tool_calls": [...]} object.  What it may write is not left to the
 * model: the request carries a grammar (pagoda-grammar(7)) whose calls are
 * the offered functions, each with its JSON Schema's arguments (translated
 * here, by daemon/schema.c, so that a schema pagoda cannot honour is a 400
 * naming it), as many as tool_choice and parallel_tool_calls allow; with
 * "auto" the alternative is text that does not open a call (or the
 * response_format's grammar).  Reading the answer back is then a matcher
 * of the format's fixed literals around names and JSON objects.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "daemon/schema.h"
#include "http/http.h"

/* A dialect's text around calls: open, then calls (call_open NAME mid
   ARGUMENTS call_close) separated by sep (NULL: one call only), then
   close; and how the system message presents the tools (head, one
   tool's JSON a line, tail). */
struct dialect {
	const char *open, *call_open, *mid, *call_close, *sep, *close;
	const char *head, *tail;
};

static const struct dialect dialects[] = {
	[TD_JSON] = { "{\"tool_calls\": [", "{\"name\": \"", "\", \"arguments\": ", "}",
		      ", ", "]}",
		      "You can call these functions, given as JSON with a JSON Schema of "
		      "their arguments:\n",
		      "\n\nTo call functions, answer with only a JSON object {\"tool_calls\": "
		      "[{\"name\": <function name>, \"arguments\": <arguments object>}, ...]}; "
		      "otherwise answer in text. A function's result comes back within "
		      "<tool_response></tool_response> tags." },
	[TD_HERMES] = { "", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ",
			"}\n</tool_call>", "\n", "",
			"# Tools\n\nYou may call functions to help with the user's request. "
			"Their signatures are given within <tools></tools> XML tags:\n<tools>",
			"\n</tools>\n\nTo call a function, write a JSON object with its name and "
			"arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
			"{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
			"</tool_call>" },
	[TD_LLAMA3] = { "", "{\"name\": \"", "\", \"parameters\": ", "}", NULL, "",
			"You have these functions available:\n",
			"\n\nTo call one, answer with only a JSON object of the form {\"name\": "
			"function name, \"parameters\": dictionary of argument name and its "
			"value}. Do not use variables." },
};

enum tool_dialect tools_dialect(const char *name)
{
	if (name && !strcmp(name, "hermes"))
		return TD_HERMES;
	if (name && !strcmp(name, "llama3"))
		return TD_LLAMA3;
	return TD_JSON;
}

static int buf_str(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

/* ---- the request's tools ---- */

static int good_name(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

/* params_gbnf - tool i's arguments' grammar, rules prefixed "tI-" */
static int params_gbnf(struct tool *tl, size_t i, json_t *params, struct perr *e)
{
	char param[96], err[400], prefix[24], *text, *gbnf;
	json_t *s;
	int rc;

	snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
	snprintf(prefix, sizeof prefix, "t%zu-", i);
	if (!params || json_is_null(params)) {
		/* no parameters: the arguments are {} */
		snprintf(err, sizeof err, "%sroot ::= \"{}\"\n", prefix);
		tl->gbnf = strdup(err);
		return tl->gbnf ? 0 : api_fail(e, param, "out of memory");
	} else {
		json_t *type = json_object_get(params, "type");

		if (!json_is_object(params) ||
		    (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object"))))
			return api_fail(e, param, "'%s' must be the JSON Schema of an object "
					"(\"type\": \"object\")", param);
		s = json_deep_copy(params);
		if (s && !type)
			json_object_set_new(s, "type", json_string("object"));
	}
	text = s ? json_dumps(s, JSON_COMPACT) : NULL;
	json_decref(s);
	if (!text)
		return api_fail(e, param, "out of memory");
	rc = pg_schema_to_gbnf(text, strlen(text), &gbnf, err, sizeof err);
	free(text);
	if (rc < 0) {
		e->code = "unsupported_parameter";
		return api_fail(e, param, "%s: %s (pagoda-json-schema(7))", param,
				rc == -EINVAL ? err : "out of memory");
	}
	tl->gbnf = gbnf_prefixed(gbnf, prefix);
	free(gbnf);
	return tl->gbnf ? 0 : api_fail(e, param, "out of memory");
}

static int parse_choice(struct tools *t, json_t *v, struct perr *e)
{
	const char *want = NULL;
	json_t *fn;

	t->choice = TC_AUTO;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		const char *s = json_string_value(v);

		if (!strcmp(s, "none"))
			t->choice = TC_NONE;
		else if (!strcmp(s, "auto"))
			t->choice = TC_AUTO;
		else if (!strcmp(s, "required"))
			t->choice = TC_REQUIRED;
		else
			return api_fail(e, "tool_choice", "'tool_choice' \"%s\" is not \"none\", "
					"\"auto\", \"required\" or {\"type\": \"function\", "
					"\"function\": {\"name\": NAME}}", s);
		return 0;
	}
	fn = json_object_get(v, "function");
	if (json_is_object(v) && json_is_object(fn) &&
	    json_is_string(json_object_get(fn, "name")))
		want = json_string_value(json_object_get(fn, "name"));
	if (!want || !json_is_string(json_object_get(v, "type")) ||
	    strcmp(json_string_value(json_object_get(v, "type")), "function"))
		return api_fail(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", "
				"\"required\" or {\"type\": \"function\", \"function\": "
				"{\"name\": NAME}}");
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->t[i].name, want)) {
			t->choice = TC_NAMED;
			t->named = i;
			return 0;
		}
	return api_fail(e, "tool_choice", "'tool_choice' names function '%.64s', which "
			"'tools' does not offer", want);
}

int tools_parse(struct tools *t, json_t *o, struct perr *e)
{
	json_t *list = json_object_get(o, "tools"), *choice = json_object_get(o, "tool_choice");
	json_t *v, *fn;
	size_t i;

	memset(t, 0, sizeof *t);
	t->parallel = 1;
	v = json_object_get(o, "parallel_tool_calls");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return api_fail(e, "parallel_tool_calls", "'parallel_tool_calls' must be "
					"true or false");
		t->parallel = json_is_true(v);
	}
	if (!list || json_is_null(list) || (json_is_array(list) && !json_array_size(list))) {
		if (choice && !json_is_null(choice) &&
		    !(json_is_string(choice) && !strcmp(json_string_value(choice), "none")))
			return api_fail(e, "tool_choice", "'tool_choice' needs 'tools'");
		return 0;
	}
	if (!json_is_array(list))
		return api_fail(e, "tools", "'tools' must be an array of {\"type\": "
				"\"function\", \"function\": {\"name\", \"description\", "
				"\"parameters\"}}");
	if (json_array_size(list) > TOOLS_MAX)
		return api_fail(e, "tools", "'tools' offers %zu functions; pagoda-http takes "
				"at most %d", json_array_size(list), TOOLS_MAX);
	t->t = calloc(json_array_size(list), sizeof *t->t);
	if (!t->t)
		return api_fail(e, "tools", "out of memory");
	json_array_foreach(list, i, v) {
		char param[64];
		const char *key;
		json_t *x;

		t->n = i + 1;
		snprintf(param, sizeof param, "tools[%zu]", i);
		if (!json_is_object(v))
			return api_fail(e, param, "'%s' must be an object", param);
		x = json_object_get(v, "type");
		if (!json_is_string(x) || strcmp(json_string_value(x), "function")) {
			e->code = "unsupported_parameter";
			return api_fail(e, param, "'%s' must have \"type\": \"function\" (the only "
					"kind of tool pagoda-http runs)", param);
		}
		fn = json_object_get(v, "function");
		snprintf(param, sizeof param, "tools[%zu].function", i);
		if (!json_is_object(fn))
			return api_fail(e, param, "'%s' must be an object", param);
		json_object_foreach(fn, key, x) {
			if (!strcmp(key, "name") || !strcmp(key, "description") ||
			    !strcmp(key, "parameters") || !strcmp(key, "strict"))
				continue;
			e->code = "unsupported_parameter";
			return api_fail(e, param, "'%s.%s' is not a field of a function", param, key);
		}
		x = json_object_get(fn, "name");
		snprintf(param, sizeof param, "tools[%zu].function.name", i);
		if (!json_is_string(x) || !good_name(json_string_value(x)))
			return api_fail(e, param, "'%s' must be 1 to 64 letters, digits, '_' or '-'",
					param);
		t->t[i].name = json_string_value(x);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(t->t[k].name, t->t[i].name))
				return api_fail(e, param, "'%s': a second function named '%s'",
						param, t->t[i].name);
		x = json_object_get(fn, "description");
		if (x && !json_is_null(x) && !json_is_string(x))
			return api_fail(e, param, "'tools[%zu].function.description' must be a "
					"string", i);
		t->t[i].def = v;
		if (params_gbnf(&t->t[i], i, json_object_get(fn, "parameters"), e) < 0)
			return -1;
	}
	if (parse_choice(t, choice, e) < 0)
		return -1;
	if (t->choice == TC_NONE) {	/* offered but not to be used: as if none */
		tools_free(t);
		t->choice = TC_NONE;
	}
	return 0;
}

void tools_free(struct tools *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->t[i].gbnf);
	free(t->t);
	t->t = NULL;
	t->n = 0;
}

/* ---- what the model reads ---- */

/* tool_json - a tool's definition as the prompt shows it */
static int tool_json(struct buf *b, const struct tool *tl)
{
	char *s = json_dumps(tl->def, JSON_INDENT(0) | JSON_PRESERVE_ORDER);
	int rc;

	if (!s)
		return -1;
	/* JSON_INDENT(0) still breaks lines: one line per tool */
	for (char *r = s, *w = s;; r++) {
		if (*r != '\n')
			*w++ = *r;
		if (!*r)
			break;
	}
	rc = buf_str(b, s);
	free(s);
	return rc;
}

char *tools_prompt(const struct tools *t)
{
	const struct dialect *dl = &dialects[t->d];
	struct buf b = { 0 };
	int bad = buf_str(&b, dl->head);

	for (size_t i = 0; i < t->n; i++)
		bad |= buf_str(&b, "\n") | tool_json(&b, &t->t[i]);
	bad |= buf_str(&b, dl->tail);
	if (t->choice == TC_REQUIRED)
		bad |= buf_str(&b, "\nCall at least one function now.");
	else if (t->choice == TC_NAMED)
		bad |= buf_str(&b, "\nCall the function ") |
		       buf_str(&b, t->t[t->named].name) | buf_str(&b, " now.");
	if (bad) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

char *tools_history(enum tool_dialect d, json_t *calls, const char *content,
		    size_t i, struct perr *e)
{
	const struct dialect *dl = &dialects[d];
	struct buf b = { 0 };
	char param[96];
	size_t k;
	json_t *c;
	int bad = 0;

	snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
	if (!json_is_array(calls))
		return api_fail(e, param, "'%s' must be an array of {\"id\", \"type\": "
				"\"function\", \"function\": {\"name\", \"arguments\"}}", param),
		       NULL;
	if (content && *content)
		bad |= buf_str(&b, content) | buf_str(&b, "\n");
	bad |= buf_str(&b, dl->open);
	json_array_foreach(calls, k, c) {
		json_t *fn = json_object_get(c, "function"), *args;
		json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
		json_t *a = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
		json_error_t je;
		char *text;

		snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, k);
		if (!json_is_object(c) || !json_is_string(name) || !json_is_string(a)) {
			free(b.s);
			return api_fail(e, param, "'%s' must be {\"id\", \"type\": \"function\", "
					"\"function\": {\"name\": STRING, \"arguments\": JSON "
					"TEXT}}", param), NULL;
		}
		args = json_loadb(json_string_value(a), json_string_length(a),
				  JSON_DECODE_ANY, &je);
		if (!args) {
			free(b.s);
			return api_fail(e, param, "'%s.function.arguments' is not JSON: %s",
					param, je.text), NULL;
		}
		text = json_dumps(args, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
		json_decref(args);
		if (k && dl->sep)
			bad |= buf_str(&b, dl->sep);
		else if (k)
			bad |= buf_str(&b, "\n");
		bad |= buf_str(&b, dl->call_open) | buf_str(&b, json_string_value(name)) |
		       buf_str(&b, dl->mid) | (text ? buf_str(&b, text) : -1) |
		       buf_str(&b, dl->call_close);
		free(text);
	}
	bad |= buf_str(&b, dl->close);
	if (bad) {
		free(b.s);
		return api_fail(e, param, "out of memory"), NULL;
	}
	return b.s;
}

/* ---- the grammar ---- */

/* lit - s as a GBNF literal */
static int lit(struct buf *b, const char *s)
{
	int bad = buf_str(b, "\"");

	for (; *s; s++) {
		char x[8];

		if (*s == '"' || *s == '\\')
			snprintf(x, sizeof x, "\\%c", *s);
		else if (*s == '\n')
			snprintf(x, sizeof x, "\\n");
		else if ((unsigned char)*s < 0x20)
			snprintf(x, sizeof x, "\\x%02x", (unsigned char)*s);
		else
			snprintf(x, sizeof x, "%c", *s);
		bad |= buf_str(b, x);
	}
	return bad | buf_str(b, "\"");
}

char *gbnf_prefixed(const char *g, const char *prefix)
{
	struct buf b = { 0 };
	int bad = 0;

	while (*g) {
		const char *s = g;

		if (*g == '"' || *g == '[') {	/* a literal or a class, as it is */
			char end = *g == '"' ? '"' : ']';

			for (g++; *g && *g != end; g++)
				if (*g == '\\' && g[1])
					g++;
			if (*g)
				g++;
		} else if (*g == '{') {		/* a repetition's bounds */
			while (*g && *g != '}')
				g++;
			if (*g)
				g++;
		} else if (*g == '#') {		/* a comment */
			while (*g && *g != '\n')
				g++;
		} else if ((*g >= 'a' && *g <= 'z') || (*g >= 'A' && *g <= 'Z') ||
			   (*g >= '0' && *g <= '9') || *g == '_' || *g == '-') {
			while ((*g >= 'a' && *g <= 'z') || (*g >= 'A' && *g <= 'Z') ||
			       (*g >= '0' && *g <= '9') || *g == '_' || *g == '-')
				g++;
			bad |= buf_str(&b, prefix);
		} else {
			g++;
		}
		bad |= buf_add(&b, s, (size_t)(g - s));
	}
	if (bad || !b.s) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

/* call_rule - "tc-call-I ::= CALL_OPEN name MID tI-root CALL_CLOSE" */
static int call_rule(struct buf *b, const struct dialect *dl, const struct tools *t,
		     size_t i)
{
	char open[160], head[32], args[32];

	snprintf(open, sizeof open, "%s%s%s", dl->call_open, t->t[i].name, dl->mid);
	snprintf(head, sizeof head, "tc-call-%zu ::= ", i);
	snprintf(args, sizeof args, " t%zu-root ", i);
	return buf_str(b, head) | lit(b, open) | buf_str(b, args) | lit(b, dl->call_close) |
	       buf_str(b, "\n") | buf_str(b, t->t[i].gbnf);
}

/*
 * not_opening - "tc-text": any text that does not begin with `opener`:
 * at each depth k (opener[0..k) matched) the text may end, go on with
 * another character than opener[k] and then anything, or match opener[k].
 */
static int not_opening(struct buf *b, const char *opener)
{
	size_t m = strlen(opener);
	int bad = 0;

	for (size_t k = 0; k < m; k++) {
		char head[48], cls[24], one[2] = { opener[k], 0 };

		snprintf(head, sizeof head, k ? "tc-text-%zu ::= \"\" | " : "tc-text ::= \"\" | ", k);
		snprintf(cls, sizeof cls, "[^\\x%02x] .*", (unsigned char)opener[k]);
		bad |= buf_str(b, head) | buf_str(b, cls);
		if (k + 1 < m) {
			char next[32];

			snprintf(next, sizeof next, " tc-text-%zu", k + 1);
			bad |= buf_str(b, " | ") | lit(b, one) | buf_str(b, next);
		}
		bad |= buf_str(b, "\n");
	}
	return bad;
}

char *tools_grammar(const struct tools *t, const char *text_gbnf, struct perr *e)
{
	const struct dialect *dl = &dialects[t->d];
	struct buf b = { 0 };
	char reps[48];
	int bad = 0;

	if (t->choice == TC_NAMED) {
		bad |= buf_str(&b, "root ::= ") | lit(&b, dl->open) | buf_str(&b, " tc-call-");
		snprintf(reps, sizeof reps, "%zu ", t->named);
		bad |= buf_str(&b, reps) | lit(&b, dl->close) | buf_str(&b, "\n") |
		       call_rule(&b, dl, t, t->named);
		goto out;
	}
	bad |= buf_str(&b, t->choice == TC_AUTO ? "root ::= tc-calls | tc-text\n"
						: "root ::= tc-calls\n");
	bad |= buf_str(&b, "tc-calls ::= ") | lit(&b, dl->open) | buf_str(&b, " tc-call");
	if (t->parallel && dl->sep) {
		snprintf(reps, sizeof reps, " tc-call){0,%d} ", TOOLS_MAX_CALLS - 1);
		bad |= buf_str(&b, " (") | lit(&b, dl->sep) | buf_str(&b, reps);
	} else {
		bad |= buf_str(&b, " ");
	}
	bad |= lit(&b, dl->close) | buf_str(&b, "\ntc-call ::= ");
	for (size_t i = 0; i < t->n; i++) {
		snprintf(reps, sizeof reps, "%stc-call-%zu", i ? " | " : "", i);
		bad |= buf_str(&b, reps);
	}
	bad |= buf_str(&b, "\n");
	for (size_t i = 0; i < t->n; i++)
		bad |= call_rule(&b, dl, t, i);
	if (t->choice == TC_AUTO) {
		if (text_gbnf) {
			char *x = gbnf_prefixed(text_gbnf, "x-");

			bad |= buf_str(&b, "tc-text ::= x-root\n") | (x ? buf_str(&b, x) : -1);
			free(x);
		} else {
			char opener[96];

			snprintf(opener, sizeof opener, "%s%s", dl->open, dl->call_open);
			bad |= not_opening(&b, opener);
		}
	}
out:
	if (bad) {
		free(b.s);
		api_fail(e, "tools", "out of memory");
		return NULL;
	}
	return b.s;
}

/* ---- reading the answer ---- */

enum {
	ST_OPEN,	/* matching open + call_open (auto: or text) */
	ST_NAME,	/* a call's name, to its '"' */
	ST_MID,		/* the literal between name and arguments */
	ST_ARGS,	/* the arguments' JSON object */
	ST_CLOSE,	/* call_close */
	ST_NEXT,	/* sep + call_open, or close */
	ST_DONE,	/* after close: the answer is over */
	ST_TEXT,	/* content */
};

void tparse_init(struct tparse *p, const struct tools *t)
{
	const struct dialect *dl = &dialects[t->d];

	memset(p, 0, sizeof *p);
	p->t = t;
	p->state = ST_OPEN;
	snprintf(p->opener, sizeof p->opener, "%s%s", dl->open, dl->call_open);
	snprintf(p->next, sizeof p->next, "%s%s", dl->sep ? dl->sep : "", dl->call_open);
}

void tparse_free(struct tparse *p)
{
	for (size_t i = 0; i < p->n_calls; i++)
		free(p->calls[i].args.s);
	free(p->pend.s);
	p->n_calls = 0;
	p->pend.s = NULL;
}

static int new_call(struct tparse *p)
{
	unsigned char rnd[12];
	struct tcall *c;
	int k;

	if (p->n_calls == TOOLS_MAX_CALLS)
		return -1;
	c = &p->calls[p->n_calls++];
	memset(c, 0, sizeof *c);
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		memset(rnd, (int)p->n_calls, sizeof rnd);
	k = snprintf(c->id, sizeof c->id, "call_");
	for (size_t i = 0; i < sizeof rnd; i++)
		k += snprintf(c->id + k, sizeof c->id - (size_t)k, "%02x", rnd[i]);
	p->state = ST_NAME;
	return 0;
}

/* broken - text the format does not explain: it and the rest are content */
static int broken(struct tparse *p, const char *s, size_t n, struct buf *content)
{
	int bad = buf_add(content, p->pend.s ? p->pend.s : "", p->pend.len) |
		  buf_add(content, s, n);

	p->pend.len = 0;
	p->broken = 1;
	p->state = ST_TEXT;
	return bad;
}

/* match - c against literal l after p->pend: 1 matched in full, 0 still a
   prefix, -1 not */
static int match(const struct tparse *p, const char *l, char c)
{
	size_t n = strlen(l);

	if (p->pend.len >= n || l[p->pend.len] != c)
		return -1;
	return p->pend.len + 1 == n;
}

int tparse_feed(struct tparse *p, const char *s, size_t n, struct buf *content)
{
	const struct dialect *dl = &dialects[p->t->d];
	int bad = 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		struct tcall *call = p->n_calls ? &p->calls[p->n_calls - 1] : NULL;
		int m;

		switch (p->state) {
		case ST_TEXT:
			return bad | buf_add(content, s + i, n - i);
		case ST_OPEN:
			m = match(p, p->opener, c);
			if (m < 0) {
				/* auto: text, which may begin like a call's opening */
				bad |= broken(p, s + i, n - i, content);
				if (p->t->choice == TC_AUTO)
					p->broken = 0;
				return bad;
			}
			bad |= buf_add(&p->pend, &c, 1);
			if (m == 1) {
				p->pend.len = 0;
				if (new_call(p) < 0)
					return bad | broken(p, s + i + 1, n - i - 1, content);
			}
			break;
		case ST_NAME:
			if (c == '"') {
				call->named = 1;
				p->state = ST_MID;
				p->pend.len = 0;
			} else if (strlen(call->name) + 1 < sizeof call->name) {
				call->name[strlen(call->name)] = c;
			} else {
				return bad | broken(p, s + i, n - i, content);
			}
			break;
		case ST_MID:
			/* mid begins with the name's closing '"', already taken */
			m = match(p, dl->mid + 1, c);
			if (m < 0)
				return bad | broken(p, s + i, n - i, content);
			bad |= buf_add(&p->pend, &c, 1);
			if (m == 1) {
				p->pend.len = 0;
				p->state = ST_ARGS;
				p->depth = p->in_str = p->esc = 0;
			}
			break;
		case ST_ARGS:
			bad |= buf_add(&call->args, &c, 1);
			if (p->in_str) {
				if (p->esc)
					p->esc = 0;
				else if (c == '\\')
					p->esc = 1;
				else if (c == '"')
					p->in_str = 0;
			} else if (c == '"') {
				p->in_str = 1;
			} else if (c == '{' || c == '[') {
				p->depth++;
			} else if ((c == '}' || c == ']') && --p->depth == 0) {
				p->state = ST_CLOSE;
				p->pend.len = 0;
			}
			break;
		case ST_CLOSE:
			m = match(p, dl->call_close, c);
			if (m < 0)
				return bad | broken(p, s + i, n - i, content);
			bad |= buf_add(&p->pend, &c, 1);
			if (m == 1) {
				p->pend.len = 0;
				p->state = *dl->close || dl->sep ? ST_NEXT : ST_DONE;
			}
			break;
		case ST_NEXT: {
			int a = dl->sep ? match(p, p->next, c) : -1;
			int z = match(p, dl->close, c);

			if (a < 0 && z < 0)
				return bad | broken(p, s + i, n - i, content);
			bad |= buf_add(&p->pend, &c, 1);
			if (a == 1) {
				p->pend.len = 0;
				if (new_call(p) < 0)
					return bad | broken(p, s + i + 1, n - i - 1, content);
			} else if (z == 1 && a < 0) {
				p->pend.len = 0;
				p->state = ST_DONE;
			}
			break;
		}
		case ST_DONE:
			return bad | broken(p, s + i, n - i, content);
		}
	}
	return bad;
}

int tparse_end(struct tparse *p, struct buf *content)
{
	int bad = 0;

	/* auto: a text that was only the start of a call's opening */
	if (p->state == ST_OPEN && p->pend.len) {
		bad = broken(p, "", 0, content);
		p->broken = p->t->choice != TC_AUTO;
	}
	/* a call cut short (max_tokens) without its name: not a call */
	if (p->n_calls && !p->calls[p->n_calls - 1].named) {
		p->n_calls--;
		free(p->calls[p->n_calls].args.s);
	}
	return bad;
}
