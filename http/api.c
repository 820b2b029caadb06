/*
 * http/api.c - pagoda-http's endpoints: /v1/chat/completions and
 * /v1/completions (a JSON body read into a struct pagoda_request, its
 * events turned into an OpenAI response or a stream of server-sent
 * events), /v1/models and /health.
 *
 * A request's life: parse() checks every parameter (one pagoda does not
 * implement is a 400 naming it); start() borrows a connection and submits;
 * pump() waits on both the connection's fd and the client's socket, so
 * that a client that hangs up (POLLRDHUP) is seen at once and its request
 * cancelled; on_event() builds the answer.  A stream is served by
 * MHD_create_response_from_callback: the reader pumps events into SSE
 * chunks, and the response's free callback (the stream ended, or the
 * client went away) cancels what is left and gives the connection back.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "daemon/schema.h"
#include "http/http.h"

/* ---- small helpers ---- */

/* utf8_seq - the length of the valid UTF-8 sequence at s (n bytes left):
   1..4, 0 if invalid, -1 if valid so far but cut short by n */
static int utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	int len;
	unsigned min;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2; min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3; min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4; min = 0x10000;
	} else {
		return 0;
	}
	unsigned cp = c & (0x3f >> (len - 1));
	for (int i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return -1;
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
		/* reject overlong, surrogate and too-large forms early */
		if (i == 1 && ((len == 3 && c == 0xe0 && s[1] < 0xa0) ||
			       (len == 3 && c == 0xed && s[1] > 0x9f) ||
			       (len == 4 && c == 0xf0 && s[1] < 0x90) ||
			       (len == 4 && c == 0xf4 && s[1] > 0x8f)))
			return 0;
	}
	return cp >= min ? len : 0;
}

/* utf8_complete - how much of s[0..n) ends on a character boundary: an
   incomplete last character (the next event completes it) is left out */
static size_t utf8_complete(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		int k = utf8_seq((const unsigned char *)s + i, n - i);

		if (k < 0)
			return i;
		i += k ? (size_t)k : 1;
	}
	return n;
}

/* jtext - a JSON string of n bytes, invalid UTF-8 replaced by U+FFFD */
static json_t *jtext(const char *s, size_t n)
{
	struct buf b = { 0 };
	json_t *j;
	size_t i = 0;

	while (i < n) {
		int k = utf8_seq((const unsigned char *)s + i, n - i);

		if (k > 0) {
			if (buf_add(&b, s + i, (size_t)k) < 0)
				goto oom;
			i += (size_t)k;
		} else {
			if (buf_add(&b, "\xef\xbf\xbd", 3) < 0)
				goto oom;
			i++;
		}
	}
	j = json_stringn_nocheck(b.s ? b.s : "", b.len);
	free(b.s);
	return j;
oom:
	free(b.s);
	return NULL;
}

static double finite_lp(float x)
{
	return isfinite(x) ? (double)x : -9999.0;
}

unsigned api_status(int code)
{
	switch (code) {
	case PAGODA_EINVAL:
	case PAGODA_ETOOBIG:
	case PAGODA_EDUPLICATE:
		return 400;
	case PAGODA_ELIMIT:
		return 429;
	case PAGODA_ENOMEM:
	case PAGODA_EBUSY:
	case PAGODA_ECLIENTS:
	case PAGODA_ESHUTDOWN:
	case PAGODA_ECONNECT:
	case PAGODA_EACCESS:
	case PAGODA_EVERSION:
		return 503;
	default:
		return 500;
	}
}

/* send_pagoda_error - an error of libpagoda or the daemon, its message
   passed through */
static enum MHD_Result send_pagoda_error(struct MHD_Connection *c, int code,
					 const char *msg)
{
	char text[640];
	unsigned status = api_status(code);

	if (status == 503 && code != PAGODA_EBUSY && code != PAGODA_ENOMEM)
		snprintf(text, sizeof text, "pagodad is not available: %s (is pagodad "
			 "running? pagoda-http --socket names its socket)",
			 msg && *msg ? msg : pagoda_strerror(code));
	else
		snprintf(text, sizeof text, "%s", msg && *msg ? msg : pagoda_strerror(code));
	return gw_send_error(c, status, text, NULL, pagoda_strerror(code));
}

/* ---- a request and its answer ---- */

/* One sample's answer as it grows. */
struct sample {
	struct buf text;	/* whole text; a stream: what is not sent yet */
	size_t total;		/* bytes of text so far */
	size_t text_seen;	/* bytes of text before the last TOKENS event */
	json_t *lp;		/* logprobs (all; a stream: not sent yet) */
	enum pagoda_finish finish;
	int done;
	unsigned n_prompt, n_gen;
	struct pagoda_figures fig;	/* DONE: pagodad's figures */
	struct tparse tp;	/* tools: the text read as content or calls */
};

/* One generation request, from parsing to its last event. */
struct job {
	int chat;		/* chat.completion(s), else text_completion */
	int stream, include_usage;
	int logprobs, top_logprobs;
	int n;
	json_t *root;		/* the body: the request's strings point in it */
	struct pagoda_request rq;
	struct pagoda_message *msgs;
	char **texts;		/* joined message contents (n_msgs) */
	size_t n_msgs;
	const char **stops;
	int32_t *tokens;
	char *schema;		/* response_format's JSON Schema, as text */
	struct tools tools;	/* the functions the answer may call */
	int has_calls;		/* an assistant message has tool_calls */
	char *text_gbnf;	/* tools "auto": response_format's grammar */
	char *tool_gbnf;	/* the grammar sent: calls (and text) */
	char *tool_sys;		/* the system message with the tools */
	json_t **calls;		/* (n_msgs) an assistant's earlier tool_calls */

	pagoda_t *p;
	uint64_t id;
	int fd;			/* the client's socket */
	int submitted, over, broken, gone;
	unsigned n_events;
	int error;		/* an ERROR event or a failure: its code */
	char errmsg[512];
	char cid[48];
	long created;
	char model[128];
	struct sample *s;
	struct buf out;		/* a stream: SSE bytes to send */
	size_t out_off;
};

static void job_free(struct job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n_msgs; i++)
		free(j->texts[i]);
	free(j->texts);
	free(j->msgs);
	free(j->stops);
	free(j->tokens);
	free(j->schema);
	free(j->text_gbnf);
	free(j->tool_gbnf);
	free(j->tool_sys);
	free(j->calls);
	tools_free(&j->tools);
	if (j->s) {
		for (int i = 0; i < j->n; i++) {
			free(j->s[i].text.s);
			json_decref(j->s[i].lp);
			tparse_free(&j->s[i].tp);
		}
		free(j->s);
	}
	free(j->out.s);
	json_decref(j->root);
	free(j);
}

/* Parameters of both endpoints, those of one, and those pagoda does not
   implement (a 400 naming them rather than silently ignored). */
static const char *const common_keys[] = {
	"model", "max_tokens", "temperature", "top_p", "seed", "stop", "n",
	"presence_penalty", "frequency_penalty", "logprobs", "stream",
	"stream_options", "user", "top_k", "min_p", "repeat_penalty",
	"repeat_last_n", "ignore_eos", "priority", "response_format", "grammar",
	NULL,
};
static const char *const chat_keys[] = {
	"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
	"parallel_tool_calls", NULL,
};
static const char *const completion_keys[] = { "prompt", "echo", "suffix", "best_of", NULL };
static const char *const unsupported[] = {
	"functions", "function_call", "logit_bias", "audio",
	"modalities", "prediction", "reasoning_effort", "service_tier",
	"store", "metadata", "web_search_options", "verbosity", NULL,
};

static int in(const char *const *list, const char *k)
{
	for (; *list; list++)
		if (!strcmp(*list, k))
			return 1;
	return 0;
}

static int get_num(json_t *o, const char *k, float *out, struct perr *e)
{
	json_t *v = json_object_get(o, k);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return api_fail(e, k, "'%s' must be a number", k);
	*out = (float)json_number_value(v);
	return 0;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi,
		   long long *out, struct perr *e)
{
	json_t *v = json_object_get(o, k);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return api_fail(e, k, "'%s' must be an integer", k);
	if (json_integer_value(v) < lo || json_integer_value(v) > hi)
		return api_fail(e, k, "'%s' must be from %lld to %lld", k, lo, hi);
	*out = json_integer_value(v);
	return 1;
}

static int get_bool(json_t *o, const char *k, int *out, struct perr *e)
{
	json_t *v = json_object_get(o, k);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return api_fail(e, k, "'%s' must be true or false", k);
	*out = json_is_true(v);
	return 0;
}

/* content - a message's content, a string or an array of text parts
   (joined with newlines), into *out (the caller's to free) */
static int content(json_t *v, size_t i, char **out, struct perr *e)
{
	char param[64];
	struct buf b = { 0 };
	size_t k;
	json_t *part;

	snprintf(param, sizeof param, "messages[%zu].content", i);
	if (json_is_string(v)) {
		if (!(*out = strndup(json_string_value(v), json_string_length(v))))
			return api_fail(e, param, "out of memory");
		return 0;
	}
	if (!json_is_array(v))
		return api_fail(e, param, "'%s' must be a string or an array of text parts", param);
	json_array_foreach(v, k, part) {
		json_t *type = json_object_get(part, "type");
		json_t *text = json_object_get(part, "text");

		snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, k);
		if (!json_is_object(part) || !json_is_string(type))
			goto bad;
		if (strcmp(json_string_value(type), "text")) {
			free(b.s);
			e->code = "unsupported_parameter";
			return api_fail(e, param, "'%s' is a part of type '%s': pagoda takes text "
				    "parts only", param, json_string_value(type));
		}
		if (!json_is_string(text) || json_object_size(part) != 2)
			goto bad;
		if ((k && buf_add(&b, "\n", 1) < 0) ||
		    buf_add(&b, json_string_value(text), json_string_length(text)) < 0) {
			free(b.s);
			return api_fail(e, param, "out of memory");
		}
	}
	*out = b.s ? b.s : strdup("");
	return *out ? 0 : api_fail(e, param, "out of memory");
bad:
	free(b.s);
	return api_fail(e, param, "'%s' must be {\"type\": \"text\", \"text\": STRING}", param);
}

static int parse_messages(struct job *j, json_t *v, struct perr *e)
{
	size_t i;
	json_t *m;

	if (!json_is_array(v) || !json_array_size(v))
		return api_fail(e, "messages", "'messages' must be a non-empty array of "
			    "{\"role\", \"content\"} objects");
	j->n_msgs = json_array_size(v);
	/* one more: the system message that describes tools */
	j->msgs = calloc(j->n_msgs + 1, sizeof *j->msgs);
	j->texts = calloc(j->n_msgs + 1, sizeof *j->texts);
	j->calls = calloc(j->n_msgs, sizeof *j->calls);
	if (!j->msgs || !j->texts || !j->calls)
		return api_fail(e, "messages", "out of memory");
	json_array_foreach(v, i, m) {
		const char *key, *role;
		json_t *val;
		char param[64];

		snprintf(param, sizeof param, "messages[%zu]", i);
		if (!json_is_object(m))
			return api_fail(e, param, "'%s' must be an object", param);
		json_object_foreach(m, key, val) {
			if (!strcmp(key, "role") || !strcmp(key, "content") || json_is_null(val))
				continue;
			/* ids pair calls with results; the templates show neither */
			if (!strcmp(key, "tool_calls") || !strcmp(key, "tool_call_id"))
				continue;
			/* a tool result's function name (older clients send it) */
			if (!strcmp(key, "name") && json_is_string(val) &&
			    json_is_string(json_object_get(m, "role")) &&
			    !strcmp(json_string_value(json_object_get(m, "role")), "tool"))
				continue;
			snprintf(param, sizeof param, "messages[%zu].%s", i, key);
			e->code = "unsupported_parameter";
			return api_fail(e, param, "'%s' is not supported by pagoda (a message has "
				    "a role, a content, and tool_calls or a tool_call_id)", param);
		}
		snprintf(param, sizeof param, "messages[%zu].role", i);
		if (!json_is_string(json_object_get(m, "role")))
			return api_fail(e, param, "'%s' must be a string", param);
		role = json_string_value(json_object_get(m, "role"));
		if (!strcmp(role, "system") || !strcmp(role, "developer"))
			j->msgs[i].role = PAGODA_ROLE_SYSTEM;
		else if (!strcmp(role, "user"))
			j->msgs[i].role = PAGODA_ROLE_USER;
		else if (!strcmp(role, "assistant"))
			j->msgs[i].role = PAGODA_ROLE_ASSISTANT;
		else if (!strcmp(role, "tool"))
			j->msgs[i].role = PAGODA_ROLE_TOOL;
		else {
			e->code = "unsupported_parameter";
			return api_fail(e, param, "role '%s' is not supported: pagoda takes system, "
				    "user, assistant and tool messages", role);
		}
		val = json_object_get(m, "tool_calls");
		if (val && !json_is_null(val)) {
			snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
			if (j->msgs[i].role != PAGODA_ROLE_ASSISTANT)
				return api_fail(e, param, "'%s': only an assistant message calls "
					    "tools", param);
			if (!json_is_array(val) || !json_array_size(val))
				return api_fail(e, param, "'%s' must be a non-empty array of calls",
					    param);
			j->calls[i] = val;	/* rendered once the format is known */
			j->has_calls = 1;
		}
		val = json_object_get(m, "content");
		if ((!val || json_is_null(val)) && j->calls[i]) {
			j->texts[i] = strdup("");
			if (!j->texts[i])
				return api_fail(e, param, "out of memory");
			j->msgs[i].content = j->texts[i];
			continue;
		}
		if (!val || json_is_null(val)) {
			snprintf(param, sizeof param, "messages[%zu].content", i);
			return api_fail(e, param, "'%s' is missing", param);
		}
		if (content(val, i, &j->texts[i], e) < 0)
			return -1;
		j->msgs[i].content = j->texts[i];
	}
	j->rq.messages = j->msgs;
	j->rq.n_messages = j->n_msgs;
	return 0;
}

static int parse_prompt(struct job *j, json_t *v, struct perr *e)
{
	size_t i;
	json_t *t;

	if (!v || json_is_null(v))
		return api_fail(e, "prompt", "'prompt' is missing");
	if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
		v = json_array_get(v, 0);
	if (json_is_string(v)) {
		j->rq.prompt = json_string_value(v);
		if (strlen(j->rq.prompt) != json_string_length(v))
			return api_fail(e, "prompt", "'prompt' holds a NUL character");
		return 0;
	}
	if (!json_is_array(v) || !json_array_size(v))
		return api_fail(e, "prompt", "'prompt' must be a string or an array of token ids");
	j->tokens = calloc(json_array_size(v), sizeof *j->tokens);
	if (!j->tokens)
		return api_fail(e, "prompt", "out of memory");
	json_array_foreach(v, i, t) {
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > INT32_MAX) {
			e->code = "unsupported_parameter";
			return api_fail(e, "prompt", "'prompt' must be one string or one array of "
				    "token ids: pagoda takes one prompt per request");
		}
		j->tokens[i] = (int32_t)json_integer_value(t);
	}
	j->rq.tokens = j->tokens;
	j->rq.n_tokens = json_array_size(v);
	return 0;
}

static int parse_stop(struct job *j, json_t *v, struct perr *e)
{
	size_t i;
	json_t *s;

	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		j->stops = calloc(1, sizeof *j->stops);
		if (!j->stops)
			return api_fail(e, "stop", "out of memory");
		j->stops[0] = json_string_value(v);
		j->rq.n_stop = 1;
	} else if (json_is_array(v)) {
		j->stops = calloc(json_array_size(v) + 1, sizeof *j->stops);
		if (!j->stops)
			return api_fail(e, "stop", "out of memory");
		json_array_foreach(v, i, s) {
			if (!json_is_string(s))
				return api_fail(e, "stop", "'stop' must be a string or an array of strings");
			j->stops[i] = json_string_value(s);
		}
		j->rq.n_stop = json_array_size(v);
	} else {
		return api_fail(e, "stop", "'stop' must be a string or an array of strings");
	}
	j->rq.stop = j->stops;
	return 0;
}

/*
 * parse_format - response_format ({"type": "text"}, {"type":
 * "json_object"}: any JSON object, {"type": "json_schema", "json_schema":
 * {"name": ..., "schema": {...}, "strict": ...}}) and pagoda's own
 * "grammar" (GBNF text) into j's request; -1 with *e.  The daemon
 * translates and compiles them and refuses, naming the construct, what it
 * cannot honour.
 */
static int parse_format(struct job *j, json_t *o, struct perr *e)
{
	json_t *rf = json_object_get(o, "response_format");
	json_t *g = json_object_get(o, "grammar"), *js, *schema, *t;
	const char *type;

	if (g && !json_is_null(g)) {
		if (!json_is_string(g) || !json_string_length(g))
			return api_fail(e, "grammar", "'grammar' must be a non-empty string of GBNF (pagoda-grammar(7))");
		j->rq.grammar = json_string_value(g);
	}
	if (!rf || json_is_null(rf))
		return 0;
	t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
	if (!json_is_string(t))
		return api_fail(e, "response_format", "'response_format' must be an object with a \"type\": \"text\", \"json_object\" or \"json_schema\"");
	type = json_string_value(t);
	if (!strcmp(type, "text"))
		return 0;
	if (j->rq.grammar)
		return api_fail(e, "response_format", "give 'grammar' or a JSON 'response_format', not both");
	if (!strcmp(type, "json_object")) {
		j->rq.json_schema = "{\"type\": \"object\"}";
		return 0;
	}
	if (strcmp(type, "json_schema"))
		return api_fail(e, "response_format", "response_format type '%s' is not \"text\", \"json_object\" or \"json_schema\"", type);
	js = json_object_get(rf, "json_schema");
	schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
	if (!json_is_object(js) || !(json_is_object(schema) || json_is_boolean(schema)))
		return api_fail(e, "response_format", "response_format json_schema needs \"json_schema\": {\"name\": ..., \"schema\": {...}}");
	j->schema = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!j->schema)
		return api_fail(e, "response_format", "out of memory");
	j->rq.json_schema = j->schema;
	return 0;
}

/*
 * text_grammar - with tools, the grammar goes whole to the daemon as GBNF
 * (tools_grammar), so response_format's or "grammar"'s constraint on the
 * text of an "auto" answer is translated here; with "required" or a named
 * function the answer has no text, and it does not apply.
 */
static int text_grammar(struct job *j, struct perr *e)
{
	char err[400];
	int rc;

	if (j->tools.choice == TC_AUTO && j->rq.grammar) {
		if (!(j->text_gbnf = strdup(j->rq.grammar)))
			return api_fail(e, "grammar", "out of memory");
	} else if (j->tools.choice == TC_AUTO && j->rq.json_schema) {
		rc = pg_schema_to_gbnf(j->rq.json_schema, strlen(j->rq.json_schema),
				       &j->text_gbnf, err, sizeof err);
		if (rc < 0) {
			e->code = "unsupported_parameter";
			return api_fail(e, "response_format", "response_format's schema: %s "
				    "(pagoda-json-schema(7))", rc == -EINVAL ? err : "out of memory");
		}
	}
	j->rq.grammar = j->rq.json_schema = NULL;
	return 0;
}

/* parse - the body into j (j->chat says which endpoint); -1 with *e */
static int parse(struct job *j, const char *body, size_t len, struct perr *e)
{
	json_error_t jerr;
	const char *key;
	json_t *o, *v;
	long long x = 0;
	int r;

	j->root = o = json_loadb(body, len, 0, &jerr);
	if (!o) {
		e->code = "invalid_json";
		return api_fail(e, NULL, "the body is not valid JSON: %s (line %d, column %d)",
			    jerr.text, jerr.line, jerr.column);
	}
	if (!json_is_object(o)) {
		e->code = "invalid_json";
		return api_fail(e, NULL, "the body must be a JSON object");
	}
	json_object_foreach(o, key, v) {
		if (json_is_null(v) || in(common_keys, key) ||
		    in(j->chat ? chat_keys : completion_keys, key))
			continue;
		if (!strcmp(key, "logit_bias") && json_is_object(v) && !json_object_size(v))
			continue;
		e->code = "unsupported_parameter";
		if (!j->chat && in(chat_keys, key))
			return api_fail(e, key, "'%s' is a parameter of /v1/chat/completions, not "
				    "of /v1/completions", key);
		if (in(unsupported, key))
			return api_fail(e, key, "'%s' is not supported by pagoda-http", key);
		return api_fail(e, key, "unknown parameter '%s'", key);
	}

	pagoda_request_init(&j->rq);
	j->rq.max_tokens = 0;	/* OpenAI's: as many as the daemon allows */
	if ((v = json_object_get(o, "model")) && !json_is_null(v) && !json_is_string(v))
		return api_fail(e, "model", "'model' must be a string");
	if (j->chat) {
		if (parse_messages(j, json_object_get(o, "messages"), e) < 0)
			return -1;
	} else if (parse_prompt(j, json_object_get(o, "prompt"), e) < 0) {
		return -1;
	}
	if (get_num(o, "temperature", &j->rq.temperature, e) < 0 ||
	    get_num(o, "top_p", &j->rq.top_p, e) < 0 ||
	    get_num(o, "min_p", &j->rq.min_p, e) < 0 ||
	    get_num(o, "repeat_penalty", &j->rq.repeat_penalty, e) < 0 ||
	    get_num(o, "presence_penalty", &j->rq.presence_penalty, e) < 0 ||
	    get_num(o, "frequency_penalty", &j->rq.frequency_penalty, e) < 0 ||
	    get_bool(o, "ignore_eos", &j->rq.ignore_eos, e) < 0 ||
	    get_bool(o, "stream", &j->stream, e) < 0 ||
	    parse_stop(j, json_object_get(o, "stop"), e) < 0 ||
	    parse_format(j, o, e) < 0 ||
	    (j->chat && tools_parse(&j->tools, o, e) < 0) ||
	    (j->tools.n && text_grammar(j, e) < 0))
		return -1;
	if ((r = get_int(o, "max_tokens", 1, INT32_MAX, &x, e)) < 0)
		return -1;
	if (r)
		j->rq.max_tokens = (int)x;
	if (j->chat && (r = get_int(o, "max_completion_tokens", 1, INT32_MAX, &x, e)) != 0) {
		if (r < 0)
			return -1;
		j->rq.max_tokens = (int)x;
	}
	x = 1;
	if (get_int(o, "n", 1, 16, &x, e) < 0)
		return -1;
	j->rq.n = j->n = (int)x;
	if ((r = get_int(o, "top_k", 0, INT32_MAX, &x, e)) < 0)
		return -1;
	if (r)
		j->rq.top_k = (int)x;
	if ((r = get_int(o, "repeat_last_n", -1, INT32_MAX, &x, e)) < 0)
		return -1;
	if (r)
		j->rq.repeat_last_n = (int)x;
	if ((r = get_int(o, "priority", INT32_MIN, INT32_MAX, &x, e)) < 0)
		return -1;
	if (r)
		j->rq.priority = (int)x;
	if ((r = get_int(o, "seed", 0, INT64_MAX, &x, e)) < 0)
		return -1;
	if (r)
		j->rq.seed = (uint64_t)x;

	v = json_object_get(o, "logprobs");
	if (j->chat) {
		if (get_bool(o, "logprobs", &j->logprobs, e) < 0)
			return -1;
		x = 0;
		if (get_int(o, "top_logprobs", 0, 20, &x, e) < 0)
			return -1;
		if (x && !j->logprobs)
			return api_fail(e, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
		j->top_logprobs = (int)x;
	} else if (v && !json_is_null(v)) {
		if (get_int(o, "logprobs", 0, 20, &x, e) < 0)
			return -1;
		j->logprobs = 1;
		j->top_logprobs = (int)x;
	}
	/* the daemon sends a token's own log-probability with the top ones */
	if (j->logprobs)
		j->rq.n_logprobs = j->top_logprobs ? j->top_logprobs : 1;

	if (!j->chat) {
		int echo = 0;

		if (get_bool(o, "echo", &echo, e) < 0)
			return -1;
		if (echo) {
			e->code = "unsupported_parameter";
			return api_fail(e, "echo", "'echo': true is not supported by pagoda-http");
		}
		v = json_object_get(o, "suffix");
		if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v))) {
			e->code = "unsupported_parameter";
			return api_fail(e, "suffix", "'suffix' is not supported by pagoda-http");
		}
		v = json_object_get(o, "best_of");
		if (v && !json_is_null(v) &&
		    !(json_is_integer(v) && json_integer_value(v) == j->n)) {
			e->code = "unsupported_parameter";
			return api_fail(e, "best_of", "'best_of' other than n is not supported by "
				    "pagoda-http");
		}
	}

	v = json_object_get(o, "stream_options");
	if (v && !json_is_null(v)) {
		json_t *u;

		if (!j->stream)
			return api_fail(e, "stream_options", "'stream_options' needs \"stream\": true");
		if (!json_is_object(v))
			return api_fail(e, "stream_options", "'stream_options' must be an object");
		json_object_foreach(v, key, u) {
			if (strcmp(key, "include_usage")) {
				e->code = "unsupported_parameter";
				return api_fail(e, "stream_options", "'stream_options.%s' is not "
					    "supported by pagoda-http", key);
			}
		}
		if (get_bool(v, "include_usage", &j->include_usage, e) < 0)
			return -1;
	}
	j->s = calloc((size_t)j->n, sizeof *j->s);
	if (!j->s)
		return api_fail(e, NULL, "out of memory");
	for (int i = 0; i < j->n; i++)
		if (!(j->s[i].lp = j->chat ? json_array() :
		      json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
				"top_logprobs", "text_offset")))
			return api_fail(e, NULL, "out of memory");
	return 0;
}

/* ---- events ---- */

static json_t *token_json(struct job *j, int32_t id, float lp, int with_bytes,
			  char **raw, size_t *raw_len)
{
	char *text = NULL;
	size_t len = 0;
	json_t *o, *bytes;

	if (pagoda_detokenize(j->p, &id, 1, &text, &len) < 0) {
		text = NULL;
		len = 0;
	}
	o = json_object();
	json_object_set_new(o, "token", jtext(text ? text : "", len));
	json_object_set_new(o, "logprob", json_real(finite_lp(lp)));
	if (with_bytes) {
		bytes = json_array();
		for (size_t i = 0; i < len; i++)
			json_array_append_new(bytes, json_integer((unsigned char)text[i]));
		json_object_set_new(o, "bytes", bytes);
	}
	if (raw) {
		*raw = text;
		*raw_len = len;
	} else {
		free(text);
	}
	return o;
}

static void on_logprobs(struct job *j, struct sample *s, const struct pagoda_event *ev)
{
	size_t n_top = ev->n_logprobs < (size_t)j->top_logprobs ? ev->n_logprobs
								 : (size_t)j->top_logprobs;

	if (!ev->n_ids)
		return;
	if (j->chat) {
		json_t *e = token_json(j, ev->ids[0], ev->logprob, 1, NULL, NULL);
		json_t *top = json_array();

		for (size_t i = 0; i < n_top; i++)
			json_array_append_new(top, token_json(j, ev->logprobs[i].id,
							      ev->logprobs[i].logprob, 1,
							      NULL, NULL));
		json_object_set_new(e, "top_logprobs", top);
		json_array_append_new(s->lp, e);
		return;
	}
	/* completions: parallel arrays, and the top ones as {token: logprob} */
	json_t *e = token_json(j, ev->ids[0], ev->logprob, 0, NULL, NULL);
	json_t *top = json_object();

	json_array_append(json_object_get(s->lp, "tokens"), json_object_get(e, "token"));
	json_array_append(json_object_get(s->lp, "token_logprobs"), json_object_get(e, "logprob"));
	json_decref(e);
	for (size_t i = 0; i < n_top; i++) {
		json_t *t = token_json(j, ev->logprobs[i].id, ev->logprobs[i].logprob, 0,
				       NULL, NULL);

		json_object_set(top, json_string_value(json_object_get(t, "token")),
				json_object_get(t, "logprob"));
		json_decref(t);
	}
	json_array_append_new(json_object_get(s->lp, "top_logprobs"), top);
	json_array_append_new(json_object_get(s->lp, "text_offset"),
			      json_integer((json_int_t)s->text_seen));
}

static int lp_empty(const struct job *j, const struct sample *s)
{
	return j->chat ? !json_array_size(s->lp)
		       : !json_array_size(json_object_get(s->lp, "tokens"));
}

static json_t *lp_take(struct job *j, struct sample *s)
{
	json_t *lp = s->lp;

	s->lp = j->chat ? json_array() :
		json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
			  "top_logprobs", "text_offset");
	return j->chat ? json_pack("{s:o}", "content", lp) : lp;
}

static const char *finish_name(const struct sample *s)
{
	if (s->finish == PAGODA_FINISH_LENGTH)
		return "length";
	return s->tp.n_calls ? "tool_calls" : "stop";
}

/* chunk_head - a stream chunk's envelope, without its choices */
static json_t *chunk_head(struct job *j)
{
	json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", j->cid, "object",
			      j->chat ? "chat.completion.chunk" : "text_completion",
			      "created", (json_int_t)j->created, "model", j->model);

	if (j->include_usage)
		json_object_set_new(o, "usage", json_null());
	return o;
}

static void sse(struct job *j, json_t *o)
{
	char *text = json_dumps(o, JSON_COMPACT);

	json_decref(o);
	if (!text) {
		j->broken = 1;
		return;
	}
	if (buf_add(&j->out, "data: ", 6) < 0 || buf_add(&j->out, text, strlen(text)) < 0 ||
	    buf_add(&j->out, "\n\n", 2) < 0)
		j->broken = 1;
	free(text);
}

/*
 * timings - pagodad's own figures of a sample (not OpenAI's; clients
 * ignore it, as llama-server's "timings"): its queue time, its time to
 * first token and mean time between tokens as the daemon measured them
 * (from the request's arrival there), in milliseconds, and the prompt
 * tokens the prefix cache supplied.  A gateway's own cost is the client's
 * time to first token less ttft_ms (bench/http).
 */
static json_t *timings(const struct sample *s)
{
	return json_pack("{s:f, s:f, s:f, s:I, s:I, s:I}",
			 "queue_ms", s->fig.queue_s * 1e3, "ttft_ms", s->fig.ttft_s * 1e3,
			 "itl_ms", s->fig.itl_s * 1e3,
			 "prompt_tokens", (json_int_t)s->fig.n_prompt,
			 "cached_tokens", (json_int_t)s->fig.n_cached,
			 "preemptions", (json_int_t)s->fig.n_preempt);
}

/* call_delta - a stream chunk's delta of call k: its id and name the
   first time, then what is new of its arguments */
static json_t *call_delta(struct tcall *c, size_t k, int last)
{
	size_t n;
	json_t *d;

	if (c->named && !c->announced) {
		c->announced = 1;
		d = json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "index", (json_int_t)k, "id", c->id,
			      "type", "function", "function", "name", c->name, "arguments", "");
	} else {
		n = c->args.len - c->args_sent;
		if (!last)
			n = utf8_complete(c->args.s + c->args_sent, n);
		if (!n)
			return NULL;
		d = json_pack("{s:I, s:{s:o}}", "index", (json_int_t)k, "function", "arguments",
			      jtext(c->args.s + c->args_sent, n));
		c->args_sent += n;
	}
	return d;
}

/* flush_calls - a stream: the calls' news, one chunk each */
static void flush_calls(struct job *j, unsigned i, int last)
{
	struct sample *s = &j->s[i];

	for (size_t k = 0; k < s->tp.n_calls; k++) {
		struct tcall *c = &s->tp.calls[k];
		json_t *d, *o;

		while ((d = call_delta(c, k, last))) {
			o = chunk_head(j);
			json_object_set_new(o, "choices", json_pack(
				"[{s:I, s:{s:[o]}, s:n, s:n}]", "index", (json_int_t)i, "delta",
				"tool_calls", d, "logprobs", "finish_reason"));
			sse(j, o);
		}
	}
}

/* flush - a stream: the sample's text and log-probabilities not sent yet
   as a chunk (with `last`, also an incomplete character, and then the
   chunk that carries the finish reason) */
static void flush(struct job *j, unsigned i, int last)
{
	struct sample *s = &j->s[i];
	size_t n = last ? s->text.len : utf8_complete(s->text.s, s->text.len);
	json_t *o, *choice;

	if (n || !lp_empty(j, s)) {
		json_t *text = jtext(s->text.s ? s->text.s : "", n);
		json_t *lp = j->logprobs && !lp_empty(j, s) ? lp_take(j, s) : json_null();

		choice = j->chat ? json_pack("{s:I, s:{s:o}, s:o, s:n}", "index", (json_int_t)i,
					     "delta", "content", text, "logprobs", lp,
					     "finish_reason")
				 : json_pack("{s:o, s:I, s:o, s:n}", "text", text, "index",
					     (json_int_t)i, "logprobs", lp, "finish_reason");
		o = chunk_head(j);
		json_object_set_new(o, "choices", json_pack("[o]", choice));
		sse(j, o);
		memmove(s->text.s, s->text.s + n, s->text.len - n);
		s->text.len -= n;
	}
	if (s->tp.n_calls)
		flush_calls(j, i, last);
	if (!last)
		return;
	choice = j->chat ? json_pack("{s:I, s:{}, s:n, s:s}", "index", (json_int_t)i, "delta",
				     "logprobs", "finish_reason", finish_name(s))
			 : json_pack("{s:s, s:I, s:n, s:s}", "text", "", "index", (json_int_t)i,
				     "logprobs", "finish_reason", finish_name(s));
	o = chunk_head(j);
	json_object_set_new(o, "choices", json_pack("[o]", choice));
	json_object_set_new(o, "timings", timings(s));
	sse(j, o);
}

static json_t *usage(struct job *j)
{
	unsigned gen = 0;

	for (int i = 0; i < j->n; i++)
		gen += j->s[i].n_gen;
	return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)j->s[0].n_prompt,
			 "completion_tokens", (json_int_t)gen,
			 "total_tokens", (json_int_t)(j->s[0].n_prompt + gen));
}

static void stream_error(struct job *j)
{
	json_t *o = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", j->errmsg,
			      "type", "server_error", "param", "code",
			      pagoda_strerror(j->error));

	sse(j, o);
}

static void on_event(struct job *j, const struct pagoda_event *ev)
{
	struct sample *s;

	j->n_events++;
	if (ev->type == PAGODA_EVENT_ERROR) {
		j->error = ev->error ? ev->error : PAGODA_EENGINE;
		snprintf(j->errmsg, sizeof j->errmsg, "%s",
			 ev->text && *ev->text ? ev->text : pagoda_strerror(j->error));
		j->over = 1;
		if (j->stream)
			stream_error(j);
		return;
	}
	if (ev->sample >= (unsigned)j->n)
		return;
	s = &j->s[ev->sample];
	switch (ev->type) {
	case PAGODA_EVENT_TOKENS:
		if (j->stream && j->logprobs && (s->text.len || !lp_empty(j, s)))
			flush(j, ev->sample, 0);
		s->text_seen = s->total;
		s->total += ev->text_len;
		if ((j->tools.n ? tparse_feed(&s->tp, ev->text, ev->text_len, &s->text)
				: buf_add(&s->text, ev->text, ev->text_len)) < 0)
			j->broken = 1;
		if (j->stream && !j->logprobs)
			flush(j, ev->sample, 0);
		break;
	case PAGODA_EVENT_LOGPROBS:
		if (j->logprobs)
			on_logprobs(j, s, ev);
		if (j->stream)
			flush(j, ev->sample, 0);
		break;
	case PAGODA_EVENT_DONE:
		s->done = 1;
		s->finish = ev->finish;
		s->n_prompt = ev->figures.n_prompt;
		s->n_gen = ev->figures.n_gen;
		s->fig = ev->figures;
		if (j->tools.n && tparse_end(&s->tp, &s->text) < 0)
			j->broken = 1;
		if (ev->finish == PAGODA_FINISH_ERROR && !j->error) {
			j->error = PAGODA_EENGINE;
			snprintf(j->errmsg, sizeof j->errmsg, "the daemon's forward pass failed "
				 "(pagodad's log says why)");
		}
		if (ev->finish == PAGODA_FINISH_GRAMMAR && !j->error) {
			/* the request's grammar, not the server: a 400 */
			j->error = PAGODA_EINVAL;
			snprintf(j->errmsg, sizeof j->errmsg, "sample %u: the grammar allowed no "
				 "token after %u generated tokens: no token of the model's "
				 "vocabulary continues it (see pagoda-grammar(7))", ev->sample,
				 ev->figures.n_gen);
			if (j->stream) {
				flush(j, ev->sample, 0);
				stream_error(j);
			}
		} else if (j->stream) {
			flush(j, ev->sample, 1);
		}
		if (ev->last) {
			j->over = 1;
			if (j->stream && j->include_usage) {
				json_t *o = chunk_head(j);

				json_object_set_new(o, "choices", json_array());
				json_object_set_new(o, "usage", usage(j));
				sse(j, o);
			}
		}
		break;
	default:
		break;
	}
	if (j->stream && j->over && !j->error)
		buf_add(&j->out, "data: [DONE]\n\n", 14);
}

/*
 * pump - handle the events that have come, else wait up to timeout_ms
 * for some or for the client to hang up.  Returns 1 (events handled), 0
 * (none in time), -1 (the client went away, or pagoda-http is stopping),
 * -2 (the connection failed: j->error says how, j->over is set).  With
 * fd < 0 the client is not watched.
 */
static int pump(struct job *j, int fd, int timeout_ms)
{
	struct pagoda_event ev;
	struct pollfd pf[2];
	int rc, got = 0;

	for (int round = 0; round < 2; round++) {
		while ((rc = pagoda_next_event(j->p, &ev, 0)) == 1) {
			on_event(j, &ev);
			got = 1;
			if (j->over)
				return 1;
		}
		if (rc < 0) {
			j->error = rc;
			snprintf(j->errmsg, sizeof j->errmsg, "%s", pagoda_last_error(j->p));
			j->over = j->broken = 1;
			if (j->stream)
				stream_error(j);
			return -2;
		}
		if (got || round)
			return got;
		pf[0].fd = pagoda_fd(j->p);
		pf[0].events = POLLIN;
		pf[1].fd = fd;
		pf[1].events = POLLRDHUP;
		pf[1].revents = 0;
		if (poll(pf, fd >= 0 ? 2 : 1, timeout_ms) < 0)
			return 0;
		if (fd >= 0 && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return -1;
		if (fd >= 0 && __atomic_load_n(&gw.stopping, __ATOMIC_ACQUIRE))
			return -1;
	}
	return got;
}

/* finish - the request's end: cancel it if it is not over (the client
   went away), wait a while for its last event, give the connection back
   and count it */
static void finish(struct job *j)
{
	if (!j->p)
		return;
	if (j->submitted && !j->over) {
		struct timespec t0, t;

		__atomic_add_fetch(&gw.disconnects, 1, __ATOMIC_RELAXED);
		if (pagoda_cancel(j->p, j->id) < 0)
			j->broken = 1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (!j->over && !j->broken) {
			pump(j, -1, 100);
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 5)
				j->broken = 1;	/* close it: the daemon cancels */
		}
	}
	if (j->submitted) {
		unsigned gen = 0;

		for (int i = 0; i < j->n; i++)
			gen += j->s[i].n_gen;
		__atomic_add_fetch(&gw.prompt_tokens, j->s[0].n_prompt, __ATOMIC_RELAXED);
		__atomic_add_fetch(&gw.completion_tokens, gen, __ATOMIC_RELAXED);
	}
	gw_give(j->p, !j->broken && (!j->error || api_status(j->error) != 503));
	j->p = NULL;
}

/*
 * prepare_tools - what the tool-call format of the model's template (the
 * daemon's, asked on the request's connection) decides: the tools
 * described at the end of the system message (a system message of their
 * own when the conversation has none), the assistant's earlier calls
 * written as the model writes them, and the grammar of the answer.
 */
static int prepare_tools(struct job *j, struct perr *e)
{
	struct pagoda_chat_info ci;
	char *desc;

	memset(&ci, 0, sizeof ci);
	if (pagoda_chat_info(j->p, &ci) < 0)
		ci.tools[0] = '\0';	/* pagoda's own JSON calls */
	j->tools.d = tools_dialect(ci.tools);
	for (size_t i = 0; i < j->n_msgs; i++) {
		char *t;

		if (!j->calls[i])
			continue;
		if (!(t = tools_history(j->tools.d, j->calls[i], j->texts[i], i, e)))
			return -1;
		free(j->texts[i]);
		j->texts[i] = t;
		j->msgs[i].content = t;
	}
	if (!j->tools.n)
		return 0;
	if (!(desc = tools_prompt(&j->tools)))
		return api_fail(e, "tools", "out of memory");
	if (j->msgs[0].role == PAGODA_ROLE_SYSTEM) {
		size_t a = strlen(j->msgs[0].content), b = strlen(desc);

		j->tool_sys = malloc(a + b + 3);
		if (j->tool_sys) {
			memcpy(j->tool_sys, j->msgs[0].content, a);
			memcpy(j->tool_sys + a, "\n\n", 2);
			memcpy(j->tool_sys + a + 2, desc, b + 1);
		}
		free(desc);
	} else {
		memmove(j->msgs + 1, j->msgs, j->n_msgs * sizeof *j->msgs);
		j->msgs[0].role = PAGODA_ROLE_SYSTEM;
		j->tool_sys = desc;
		j->rq.n_messages = j->n_msgs + 1;
	}
	if (!j->tool_sys)
		return api_fail(e, "tools", "out of memory");
	j->msgs[0].content = j->tool_sys;
	if (!(j->tool_gbnf = tools_grammar(&j->tools, j->text_gbnf, e)))
		return -1;
	for (int i = 0; i < j->n; i++)
		tparse_init(&j->s[i].tp, &j->tools);
	j->rq.grammar = j->tool_gbnf;
	return 0;
}

/* start - a connection, the model's name and the submission; on failure
   the HTTP answer is queued and MHD_NO/MHD_YES goes to *ret */
static int start(struct MHD_Connection *c, struct job *j, enum MHD_Result *ret)
{
	struct pagoda_model_info mi;
	const char *msg = "";
	unsigned char rnd[12];
	int rc;

	for (int attempt = 0; attempt < 2; attempt++) {
		rc = gw_take(&j->p, &msg);
		if (rc < 0) {
			*ret = send_pagoda_error(c, rc, msg);
			return -1;
		}
		rc = pagoda_model_info(j->p, &mi);
		if (rc == 0)
			break;
		/* a pooled connection of a daemon that restarted: once more */
		msg = pagoda_last_error(j->p);
		gw_give(j->p, 0);
		j->p = NULL;
		if (rc != PAGODA_ESHUTDOWN) {
			*ret = send_pagoda_error(c, rc, msg);
			return -1;
		}
	}
	if (!j->p) {
		*ret = send_pagoda_error(c, PAGODA_ESHUTDOWN, msg);
		return -1;
	}
	snprintf(j->model, sizeof j->model, "%s", mi.model);
	j->created = (long)time(NULL);
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		memset(rnd, 0, sizeof rnd);
	int k = snprintf(j->cid, sizeof j->cid, "%s", j->chat ? "chatcmpl-" : "cmpl-");
	for (size_t i = 0; i < sizeof rnd; i++)
		k += snprintf(j->cid + k, sizeof j->cid - (size_t)k, "%02x", rnd[i]);

	if (j->has_calls || j->tools.n) {
		struct perr e = { 0 };

		if (prepare_tools(j, &e) < 0) {
			*ret = gw_send_error(c, e.status, e.msg, e.param[0] ? e.param : NULL,
					     e.code);
			gw_give(j->p, 1);
			j->p = NULL;
			return -1;
		}
	}
	rc = pagoda_submit(j->p, &j->rq, &j->id);
	if (rc < 0) {
		*ret = send_pagoda_error(c, rc, pagoda_last_error(j->p));
		gw_give(j->p, rc != PAGODA_ESHUTDOWN);
		j->p = NULL;
		return -1;
	}
	j->submitted = 1;
	return 0;
}

static json_t *completion_json(struct job *j)
{
	json_t *choices = json_array();

	for (int i = 0; i < j->n; i++) {
		struct sample *s = &j->s[i];
		json_t *text = jtext(s->text.s ? s->text.s : "", s->text.len);
		json_t *lp = j->logprobs ? lp_take(j, s) : json_null();

		if (j->chat) {
			json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
						text);

			if (s->tp.n_calls) {
				json_t *calls = json_array();

				if (!s->text.len)
					json_object_set_new(msg, "content", json_null());
				for (size_t k = 0; k < s->tp.n_calls; k++) {
					struct tcall *c = &s->tp.calls[k];

					json_array_append_new(calls, json_pack(
						"{s:s, s:s, s:{s:s, s:o}}", "id", c->id, "type",
						"function", "function", "name", c->name,
						"arguments", jtext(c->args.s ? c->args.s : "",
								   c->args.len)));
				}
				json_object_set_new(msg, "tool_calls", calls);
			}
			json_array_append_new(choices, json_pack(
				"{s:I, s:o, s:o, s:s}", "index", (json_int_t)i,
				"message", msg, "logprobs", lp, "finish_reason",
				finish_name(s)));
		} else {
			json_array_append_new(choices, json_pack(
				"{s:o, s:I, s:o, s:s}", "text", text, "index", (json_int_t)i,
				"logprobs", lp, "finish_reason", finish_name(s)));
		}
	}
	return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o}", "id", j->cid, "object",
			 j->chat ? "chat.completion" : "text_completion", "created",
			 (json_int_t)j->created, "model", j->model, "choices", choices,
			 "usage", usage(j), "timings", timings(&j->s[0]));
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct job *j = cls;

	for (;;) {
		if (j->out_off < j->out.len) {
			size_t n = j->out.len - j->out_off;

			if (n > max)
				n = max;
			memcpy(buf, j->out.s + j->out_off, n);
			j->out_off += n;
			return (ssize_t)n;
		}
		j->out.len = j->out_off = 0;
		if (j->over || j->broken)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (pump(j, j->fd, 1000) == -1) {
			j->gone = 1;
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
}

static void stream_free(void *cls)
{
	struct job *j = cls;

	finish(j);
	__atomic_sub_fetch(&gw.in_flight, 1, __ATOMIC_ACQ_REL);
	job_free(j);
}

/* generate - both endpoints, after the check of in flight (server.c) */
static enum MHD_Result generate(struct MHD_Connection *c, int chat,
				const char *body, size_t len)
{
	struct job *j = calloc(1, sizeof *j);
	struct perr e = { 0 };
	const union MHD_ConnectionInfo *ci;
	enum MHD_Result ret;

	if (!j) {
		__atomic_sub_fetch(&gw.in_flight, 1, __ATOMIC_ACQ_REL);
		return MHD_NO;
	}
	j->chat = chat;
	j->fd = -1;
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci)
		j->fd = ci->connect_fd;
	if (parse(j, body, len, &e) < 0) {
		ret = gw_send_error(c, e.status, e.msg, e.param[0] ? e.param : NULL, e.code);
		goto out;
	}
	if (start(c, j, &ret) < 0)
		goto out;

	if (j->stream && j->chat)
		for (int i = 0; i < j->n; i++) {
			json_t *o = chunk_head(j);

			json_object_set_new(o, "choices", json_pack(
				"[{s:I, s:{s:s, s:s}, s:n, s:n}]", "index", (json_int_t)i, "delta",
				"role", "assistant", "content", "", "logprobs", "finish_reason"));
			sse(j, o);
		}
	/* a stream waits for its first event, so that a request the daemon
	   refuses gets its HTTP status; the rest waits for the end */
	while (!j->over && !(j->stream && j->n_events)) {
		if (pump(j, j->fd, 1000) == -1) {
			j->gone = 1;
			finish(j);
			ret = MHD_NO;
			goto out;
		}
	}
	if (j->error && (!j->stream || j->n_events <= 1)) {
		ret = send_pagoda_error(c, j->error, j->errmsg);
		finish(j);
		goto out;
	}
	if (!j->stream) {
		finish(j);
		ret = gw_send_json(c, 200, completion_json(j));
		goto out;
	}

	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
								  reader, j, stream_free);
	if (!r) {
		finish(j);
		ret = MHD_NO;
		goto out;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);	/* stream_free runs when MHD is done */
	gw_count(200);
	return ret;
out:
	__atomic_sub_fetch(&gw.in_flight, 1, __ATOMIC_ACQ_REL);
	job_free(j);
	return ret;
}

enum MHD_Result api_chat(struct MHD_Connection *c, const char *body, size_t len)
{
	return generate(c, 1, body, len);
}

enum MHD_Result api_completions(struct MHD_Connection *c, const char *body, size_t len)
{
	return generate(c, 0, body, len);
}

/* ---- /v1/models, /health ---- */

/* info - the daemon's model info through a pooled connection */
static int info(struct pagoda_model_info *mi, const char **msg)
{
	pagoda_t *p;
	int rc;

	for (int attempt = 0; attempt < 2; attempt++) {
		if ((rc = gw_take(&p, msg)) < 0)
			return rc;
		rc = pagoda_model_info(p, mi);
		if (rc == 0) {
			gw_give(p, 1);
			return 0;
		}
		*msg = pagoda_last_error(p);
		gw_give(p, 0);
		if (rc != PAGODA_ESHUTDOWN)
			break;
	}
	return rc;
}

enum MHD_Result api_models(struct MHD_Connection *c, const char *id)
{
	struct pagoda_model_info mi;
	const char *msg = "";
	json_t *m;
	int rc = info(&mi, &msg);

	if (rc < 0)
		return send_pagoda_error(c, rc, msg);
	m = json_pack("{s:s, s:s, s:I, s:s}", "id", mi.model, "object", "model",
		      "created", (json_int_t)gw.created, "owned_by", "pagoda");
	if (!id)
		return gw_send_json(c, 200, json_pack("{s:s, s:[o]}", "object", "list",
						      "data", m));
	if (strcmp(id, mi.model)) {
		char text[300];

		json_decref(m);
		snprintf(text, sizeof text, "no model '%.120s': pagodad serves '%s'", id, mi.model);
		return gw_send_error(c, 404, text, "model", "model_not_found");
	}
	return gw_send_json(c, 200, m);
}

enum MHD_Result api_health(struct MHD_Connection *c)
{
	struct pagoda_model_info mi;
	const char *msg = "";
	int rc = info(&mi, &msg);

	if (rc < 0)
		return send_pagoda_error(c, rc, msg);
	return gw_send_json(c, 200, json_pack("{s:s, s:s, s:I, s:I, s:I}", "status", "ok",
					      "model", mi.model, "clients",
					      (json_int_t)mi.n_clients, "active",
					      (json_int_t)mi.n_active, "in_flight",
					      (json_int_t)__atomic_load_n(&gw.in_flight,
									 __ATOMIC_RELAXED)));
}
