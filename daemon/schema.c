/*
 * schema.c - JSON Schema into GBNF (schema.h; pagoda-json-schema(7) is the
 * user's account of what is supported).
 *
 * The schema is read with jansson and walked once.  A subschema is seen
 * as a conjunction: the schema objects that all apply at one place (an
 * object, the targets of its $ref and allOf, the anyOf branch taken), each
 * with its JSON pointer, so that a keyword found in any of them is
 * reported where it is written.  Each conjunction becomes one rule, memoised
 * by the pointers it holds: a $ref to a schema being translated reuses its
 * rule, which is how recursion becomes a right-recursive grammar.  Which
 * rules start with which others (nothing consumed in between) is recorded,
 * and a cycle there, left recursion, is refused at the end.
 *
 * The translation narrows, never loosens: whatever the grammar accepts is
 * valid under the schema (and under Python's jsonschema, which the sampling
 * tests use as the judge), and what cannot be honoured exactly is an error.
 *
 * Not a validator: values are never checked against a schema here; enum
 * and const values are emitted as literals, filtered by type only.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/escape.h"
#include "daemon/schema.h"

#define ERR (-1)		/* a translation failed; the message is set */
#define NEVER (-2)		/* a schema no value satisfies */

#define MAX_CONJ 24		/* schema objects in one conjunction */
#define CSET_MAX 96		/* ranges in one character set */
#define MAX_REPEAT 100000	/* the largest count of a repetition */
#define INT_DIGITS 18		/* integers: at most this many digits */
#define NUM_DIGITS 18		/* numbers: digits before and after the point */
#define BOUNDED_DIGITS 15	/* numbers with bounds: digits in all */
#define INT_LIMIT 999999999999999999LL	/* 10^18 - 1 */

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- the fixed rules: any JSON value, and the formats ---- */

#define G_VALUE "object | array | string | number | boolean | null"
#define G_OBJECT "\"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\""
#define G_MEMBER "string ws \":\" ws value"
#define G_ARRAY "\"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\""
#define G_STRING "\"\\\"\" char* \"\\\"\""
#define G_CHAR "[^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" " \
	"( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )"
#define G_NUMBER "\"-\"? ( \"0\" | [1-9] [0-9]{0," STR(17) "} ) " \
	"( \".\" [0-9]{1," STR(NUM_DIGITS) "} )? ( [eE] ( \"+\" | \"-\" )? [0-9]{1,3} )?"
#define G_INTEGER "\"-\"? ( \"0\" | [1-9] [0-9]{0," STR(17) "} )"
#define G_BOOLEAN "\"true\" | \"false\""
#define G_NULL "\"null\""
#define G_WS "[ \\t\\n]{0," STR(PG_SCHEMA_MAX_WS) "}"

#define G_YEAR "( [1-9] [0-9]{3} | \"0\" ( [1-9] [0-9]{2} | \"0\" ( [1-9] [0-9] | \"0\" [1-9] ) ) )"
#define G_MONTHDAY "( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )" \
	" | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" )" \
	" | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"
#define G_LEAP4 "( \"0\" [48] | [2468] [048] | [13579] [26] )"
#define G_DATE G_YEAR " \"-\" " G_MONTHDAY " | ( [0-9]{2} " G_LEAP4 " | " G_LEAP4 \
	" \"00\" ) \"-02-29\""
#define G_HOUR "( [01] [0-9] | \"2\" [0-3] )"
#define G_TIME G_HOUR " \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? " \
	"( \"Z\" | ( \"+\" | \"-\" ) " G_HOUR " \":\" [0-5] [0-9] )"
#define G_HEX "[0-9a-fA-F]"
#define G_UUID G_HEX "{8} \"-\" " G_HEX "{4} \"-\" " G_HEX "{4} \"-\" " G_HEX "{4} \"-\" " \
	G_HEX "{12}"
#define G_ATOM "[a-zA-Z0-9_%+\\x2D]{1,32}"
#define G_LABEL "[a-zA-Z0-9]{1,32} ( \"-\" [a-zA-Z0-9]{1,32} ){0,3}"
#define G_EMAIL G_ATOM " ( \".\" " G_ATOM " ){0,4} \"@\" ( " G_LABEL " \".\" ){1,4} [a-zA-Z]{2,12}"
#define G_OCTET "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9]{2} | [1-9] [0-9] | [0-9]"
#define G_IPV4 "fmt-octet \".\" fmt-octet \".\" fmt-octet \".\" fmt-octet"
#define G_PCHAR "[a-zA-Z0-9._~!$&'()*+,;=:@\\x2D]"
#define G_URI "[a-zA-Z] [a-zA-Z0-9+.\\x2D]{0,31} \":\" ( \"//\" " \
	"[a-zA-Z0-9._~!$&'()*+,;=\\x2D]{1,253} ( \":\" [0-9]{1,5} )? ( \"/\" fmt-pchar* )*" \
	" | fmt-pchar+ ( \"/\" fmt-pchar* )* ) ( \"?\" ( fmt-pchar | [/?] )* )?" \
	" ( \"#\" ( fmt-pchar | [/?] )* )?"

enum prim {
	PR_VALUE, PR_OBJECT, PR_MEMBER, PR_ARRAY, PR_STRING, PR_CHAR, PR_NUMBER,
	PR_INTEGER, PR_BOOLEAN, PR_NULL, PR_WS, PR_DATE, PR_TIME, PR_DATETIME,
	PR_UUID, PR_EMAIL, PR_OCTET, PR_IPV4, PR_PCHAR, PR_URI, N_PRIM
};

#define B(p) (1u << (p))

/* A fixed rule: its name, its body, the fixed rules its body names. */
static const struct prim_rule {
	const char *name, *body;
	unsigned deps;
} prims[N_PRIM] = {
	[PR_VALUE] = { "value", G_VALUE, B(PR_OBJECT) | B(PR_ARRAY) | B(PR_STRING) |
		       B(PR_NUMBER) | B(PR_BOOLEAN) | B(PR_NULL) },
	[PR_OBJECT] = { "object", G_OBJECT, B(PR_MEMBER) | B(PR_WS) },
	[PR_MEMBER] = { "member", G_MEMBER, B(PR_STRING) | B(PR_VALUE) | B(PR_WS) },
	[PR_ARRAY] = { "array", G_ARRAY, B(PR_VALUE) | B(PR_WS) },
	[PR_STRING] = { "string", G_STRING, B(PR_CHAR) },
	[PR_CHAR] = { "char", G_CHAR, 0 },
	[PR_NUMBER] = { "number", G_NUMBER, 0 },
	[PR_INTEGER] = { "integer", G_INTEGER, 0 },
	[PR_BOOLEAN] = { "boolean", G_BOOLEAN, 0 },
	[PR_NULL] = { "null", G_NULL, 0 },
	[PR_WS] = { "ws", G_WS, 0 },
	[PR_DATE] = { "fmt-date", G_DATE, 0 },
	[PR_TIME] = { "fmt-time", G_TIME, 0 },
	[PR_DATETIME] = { "fmt-date-time", "fmt-date \"T\" fmt-time", B(PR_DATE) | B(PR_TIME) },
	[PR_UUID] = { "fmt-uuid", G_UUID, 0 },
	[PR_EMAIL] = { "fmt-email", G_EMAIL, 0 },
	[PR_OCTET] = { "fmt-octet", G_OCTET, 0 },
	[PR_IPV4] = { "fmt-ipv4", G_IPV4, B(PR_OCTET) },
	[PR_PCHAR] = { "fmt-pchar", G_PCHAR, 0 },
	[PR_URI] = { "fmt-uri", G_URI, B(PR_PCHAR) },
};

#define ANY_JSON_RULES \
	"value ::= " G_VALUE "\n" \
	"object ::= " G_OBJECT "\n" \
	"member ::= " G_MEMBER "\n" \
	"array ::= " G_ARRAY "\n" \
	"string ::= " G_STRING "\n" \
	"char ::= " G_CHAR "\n" \
	"number ::= " G_NUMBER "\n" \
	"boolean ::= " G_BOOLEAN "\n" \
	"null ::= " G_NULL "\n" \
	"ws ::= " G_WS "\n"

const char *pg_gbnf_any_json(void)
{
	return "root ::= value\n" ANY_JSON_RULES;
}

const char *pg_gbnf_json_object(void)
{
	return "root ::= object\n" ANY_JSON_RULES;
}

/* ---- a growing string ---- */

struct sb {
	char *p;		/* len bytes and a NUL, or NULL while empty */
	size_t len, cap;
	bool oom;		/* an append failed: the text is incomplete */
};

static void sb_put(struct sb *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_puts(struct sb *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_printf(struct sb *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true;
	} else if ((size_t)n < sizeof(buf)) {
		sb_put(b, buf, (size_t)n);
	} else {
		char *big = malloc((size_t)n + 1);

		if (!big) {
			b->oom = true;
			return;
		}
		va_start(ap, fmt);
		vsnprintf(big, (size_t)n + 1, fmt, ap);
		va_end(ap);
		sb_put(b, big, (size_t)n);
		free(big);
	}
}

/* The text so far ("" while empty); valid until the next append. */
static const char *sb_str(const struct sb *b)
{
	return b->p ? b->p : "";
}

static void sb_free(struct sb *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* ---- a map from strings to ints (open addressing) ---- */

struct smap {
	char **keys;		/* cap slots, NULL where free */
	int *vals;
	size_t cap, n;
};

static uint64_t hash_str(const char *s)
{
	uint64_t h = 14695981039346656037ull;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

static size_t smap_slot(const struct smap *m, const char *k)
{
	size_t i = hash_str(k) & (m->cap - 1);

	while (m->keys[i] && strcmp(m->keys[i], k))
		i = (i + 1) & (m->cap - 1);
	return i;
}

/* The value of k, or def when absent. */
static int smap_get(const struct smap *m, const char *k, int def)
{
	size_t i;

	if (!m->cap)
		return def;
	i = smap_slot(m, k);
	return m->keys[i] ? m->vals[i] : def;
}

static int smap_grow(struct smap *m)
{
	struct smap g = { .cap = m->cap ? m->cap * 2 : 64 };

	g.keys = calloc(g.cap, sizeof(*g.keys));
	g.vals = calloc(g.cap, sizeof(*g.vals));
	if (!g.keys || !g.vals) {
		free(g.keys);
		free(g.vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (m->keys[i]) {
			size_t j = smap_slot(&g, m->keys[i]);

			g.keys[j] = m->keys[i];
			g.vals[j] = m->vals[i];
		}
	}
	g.n = m->n;
	free(m->keys);
	free(m->vals);
	*m = g;
	return 0;
}

/* Set k to v (k copied).  0 or -ENOMEM. */
static int smap_put(struct smap *m, const char *k, int v)
{
	size_t i;

	if ((m->n + 1) * 2 > m->cap && smap_grow(m))
		return -ENOMEM;
	i = smap_slot(m, k);
	if (!m->keys[i]) {
		m->keys[i] = strdup(k);
		if (!m->keys[i])
			return -ENOMEM;
		m->n++;
	}
	m->vals[i] = v;
	return 0;
}

static void smap_free(struct smap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->keys[i]);
	free(m->keys);
	free(m->vals);
}

/* ---- the translation's state ---- */

struct rule {
	char *name;
	char *body;		/* NULL while being translated */
	char *where;		/* the JSON pointer it stands for, or NULL */
	int alias;		/* >= 0: not emitted, stands for that rule */
	bool never;		/* no value satisfies it: not emitted */
	bool used_early;	/* named while being translated (recursion) */
	bool reached;		/* named, through others, from root's body */
};

struct edge {
	int from, to;		/* rule from's body begins with rule to */
};

struct ctx {
	json_t *doc;		/* the schema document */
	struct rule *rules;	/* [0] is root */
	int n_rules, cap_rules;
	struct smap names;	/* rule name -> index (-1: reserved fixed) */
	struct smap memo;	/* conjunction key -> rule index, or NEVER */
	struct smap bodies;	/* finished body -> rule index */
	struct edge *edges;
	int n_edges, cap_edges;
	int lead;		/* the rule whose body is being written with
				   nothing consumed yet, or -1 */
	int depth;
	size_t bytes;		/* the bodies' text so far */
	int rc;			/* 0, or the first error */
	char *err;
	size_t err_len;
	char never[480];	/* why the last NEVER */
};

/* A JSON pointer as it may be shown: control characters escaped. */
static void show_ptr(char *out, size_t out_len, const char *ptr)
{
	size_t w = 0, n = strlen(ptr);

	for (size_t i = 0; i < n && w + 1 < out_len;) {
		char e[PG_ESCAPE_MAX];
		size_t take = pg_escape_char(ptr + i, n - i, PG_ESCAPE_TEXT | PG_ESCAPE_F_KEEP, e);
		size_t el = strlen(e);

		if (w + el + 1 > out_len)
			break;
		memcpy(out + w, e, el);
		w += el;
		i += take;
	}
	out[w] = '\0';
}

/*
 * brief_ptr - ptr as a message shows it: show_ptr's, with the middle of a
 * pointer longer than PTR_SHOWN bytes left out ("#/items/items/.../items"),
 * whole segments kept at either end, so that what follows fits.
 */
#define PTR_SHOWN 120
static void brief_ptr(char *out, size_t out_len, const char *ptr)
{
	size_t n = strlen(ptr), head = PTR_SHOWN / 3, tail = PTR_SHOWN - head;
	char buf[PTR_SHOWN + 8];

	if (n <= PTR_SHOWN) {
		show_ptr(out, out_len, ptr);
		return;
	}
	while (head > 1 && ptr[head] != '/')
		head--;
	tail = n - tail;
	while (tail < n && ptr[tail] != '/')
		tail++;
	if (head < 2 || tail >= n) {	/* no segments to keep: cut it short */
		head = PTR_SHOWN / 3;
		tail = n - (PTR_SHOWN - head);
	}
	snprintf(buf, sizeof(buf), "%.*s/...%s", (int)head, ptr, ptr + tail);
	show_ptr(out, out_len, buf);
}

/*
 * fail - the first error: "PTR[/KW]: message" into the caller's buffer.
 * Returns ERR.
 */
static int fail(struct ctx *c, const char *ptr, const char *kw, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(struct ctx *c, const char *ptr, const char *kw, const char *fmt, ...)
{
	char where[256], msg[320];
	va_list ap;

	if (c->rc)
		return ERR;
	c->rc = -EINVAL;
	brief_ptr(where, sizeof(where), ptr);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->err_len)
		snprintf(c->err, c->err_len, "%s%s%s: %s", where, kw ? "/" : "",
			 kw ? kw : "", msg);
	return ERR;
}

static int oom(struct ctx *c)
{
	if (!c->rc) {
		c->rc = -ENOMEM;
		if (c->err_len)
			snprintf(c->err, c->err_len, "out of memory");
	}
	return ERR;
}

/* never - a NEVER result, and why (kept for the context that needs a value). */
static int never(struct ctx *c, const char *ptr, const char *kw, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int never(struct ctx *c, const char *ptr, const char *kw, const char *fmt, ...)
{
	char where[200], msg[200];
	va_list ap;

	brief_ptr(where, sizeof(where), ptr);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(c->never, sizeof(c->never), "%s%s%.40s: %s", where, kw ? "/" : "",
		 kw ? kw : "", msg);
	return NEVER;
}

/* The JSON pointer of ptr's child key (a property name or keyword). */
static char *ptr_child(struct ctx *c, const char *ptr, const char *key)
{
	struct sb b = { 0 };

	sb_puts(&b, ptr);
	sb_puts(&b, "/");
	for (const char *k = key; *k; k++) {
		if (*k == '~')
			sb_puts(&b, "~0");
		else if (*k == '/')
			sb_puts(&b, "~1");
		else
			sb_put(&b, k, 1);
	}
	if (b.oom || !b.p) {
		sb_free(&b);
		oom(c);
		return NULL;
	}
	return b.p;
}

static char *ptr_index(struct ctx *c, const char *ptr, const char *kw, size_t i)
{
	char idx[24];
	char *p = ptr_child(c, ptr, kw), *q;

	if (!p)
		return NULL;
	snprintf(idx, sizeof(idx), "%zu", i);
	q = ptr_child(c, p, idx);
	free(p);
	return q;
}

/* ---- rules ---- */

/*
 * A rule name made of hint: [a-zA-Z0-9-] kept, the rest '-', cut to 40
 * bytes, numbered when taken.
 */
static int name_new(struct ctx *c, const char *hint, char **out)
{
	char base[48], name[64];
	size_t n = 0;

	for (const char *h = hint; *h && n < 40; h++) {
		char ch = *h;
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9');

		if (!ok && (!n || base[n - 1] == '-'))
			continue;
		base[n++] = ok ? ch : '-';
	}
	while (n && base[n - 1] == '-')
		n--;
	if (!n)
		memcpy(base, "rule", (n = 4));
	base[n] = '\0';
	snprintf(name, sizeof(name), "%s", base);
	for (int i = 2; smap_get(&c->names, name, -3) != -3; i++)
		snprintf(name, sizeof(name), "%s-%d", base, i);
	*out = strdup(name);
	return *out ? 0 : oom(c);
}

/* Append a rule called name (taken over); its index or ERR. */
static int rule_alloc(struct ctx *c, char *name)
{
	struct rule *r;

	if (c->n_rules >= PG_SCHEMA_MAX_RULES) {
		free(name);
		return fail(c, "#", NULL, "the schema needs more than %d grammar rules",
			    PG_SCHEMA_MAX_RULES);
	}
	if (c->n_rules == c->cap_rules) {
		int cap = c->cap_rules ? c->cap_rules * 2 : 64;
		struct rule *p = realloc(c->rules, (size_t)cap * sizeof(*p));

		if (!p) {
			free(name);
			return oom(c);
		}
		c->rules = p;
		c->cap_rules = cap;
	}
	if (smap_put(&c->names, name, c->n_rules)) {
		free(name);
		return oom(c);
	}
	r = &c->rules[c->n_rules];
	memset(r, 0, sizeof(*r));
	r->name = name;
	r->alias = -1;
	return c->n_rules++;
}

/* A new rule named after hint, its body to come; its index or ERR. */
static int rule_new(struct ctx *c, const char *hint)
{
	char *name;

	if (name_new(c, hint, &name))
		return ERR;
	return rule_alloc(c, name);
}

/* Follow aliases to the rule that is emitted. */
static int rule_final(const struct ctx *c, int r)
{
	while (r >= 0 && c->rules[r].alias >= 0)
		r = c->rules[r].alias;
	return r;
}

static int rule_body(struct ctx *c, int r, const char *body)
{
	c->bytes += strlen(c->rules[r].name) + strlen(body) + 6;
	if (c->bytes > PG_SCHEMA_MAX_GBNF)
		return fail(c, "#", NULL, "the grammar would be more than %u bytes",
			    PG_SCHEMA_MAX_GBNF);
	c->rules[r].body = strdup(body);
	return c->rules[r].body ? 0 : oom(c);
}

/*
 * prim - the fixed rule p (and those it names), added the first time; its
 * index or ERR.  Their names are reserved (-1 in c->names) from the start.
 */
static int prim(struct ctx *c, enum prim p)
{
	int r = smap_get(&c->names, prims[p].name, -1);
	char *name;

	if (r >= 0)
		return r;
	name = strdup(prims[p].name);
	if (!name)
		return oom(c);
	r = rule_alloc(c, name);
	if (r < 0 || rule_body(c, r, prims[p].body))
		return ERR;
	for (int d = 0; d < N_PRIM; d++)
		if ((prims[p].deps & B(d)) && prim(c, (enum prim)d) < 0)
			return ERR;
	return r;
}

static const char *rname(const struct ctx *c, int r)
{
	return c->rules[rule_final(c, r)].name;
}

/* Record that the rule being started (c->lead) begins with rule to. */
static int edge_add(struct ctx *c, int to)
{
	if (c->lead < 0)
		return 0;
	if (c->n_edges == c->cap_edges) {
		int cap = c->cap_edges ? c->cap_edges * 2 : 64;
		struct edge *e = realloc(c->edges, (size_t)cap * sizeof(*e));

		if (!e)
			return oom(c);
		c->edges = e;
		c->cap_edges = cap;
	}
	c->edges[c->n_edges++] = (struct edge){ c->lead, to };
	return 0;
}

/* ---- GBNF text ---- */

/* A GBNF string literal of n bytes of s (UTF-8 kept as it is). */
static void lit(struct sb *b, const char *s, size_t n)
{
	sb_puts(b, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\') {
			char e[2] = { '\\', (char)ch };

			sb_put(b, e, 2);
		} else if (ch < 0x20 || ch == 0x7f) {
			sb_printf(b, "\\x%02X", ch);
		} else {
			sb_put(b, (const char *)&ch, 1);
		}
	}
	sb_puts(b, "\"");
}

static void put_utf8(struct sb *b, uint32_t cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	sb_put(b, u, n);
}

/*
 * The JSON text of code point cp inside a string, in its one canonical
 * form: itself, or \" \\ \b \f \n \r \t, or \u00xx for other controls.
 */
static void json_char(struct sb *b, uint32_t cp)
{
	static const char short_esc[] = "\"\"\\\\\bb\ff\nn\rr\tt";

	for (int i = 0; short_esc[i]; i += 2) {
		if (cp == (unsigned char)short_esc[i]) {
			char e[2] = { '\\', short_esc[i + 1] };

			sb_put(b, e, 2);
			return;
		}
	}
	if (cp < 0x20)
		sb_printf(b, "\\u%04x", cp);
	else
		put_utf8(b, cp);
}

/* The canonical JSON text of a UTF-8 string's content (n bytes). */
static void json_str(struct sb *b, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		size_t l = pg_utf8_len(u + i, n - i);

		if (!l) {	/* jansson gives valid UTF-8; be safe anyway */
			put_utf8(b, 0xfffd);
			i++;
			continue;
		}
		json_char(b, pg_utf8_code(u + i, l));
		i += l;
	}
}

/* ---- sets of code points ---- */

struct cset {
	int n;			/* ranges, sorted, disjoint; -1: too many */
	uint32_t lo[CSET_MAX], hi[CSET_MAX];
};

#define CP_MAX 0x10ffffu

static void cset_add(struct cset *s, uint32_t lo, uint32_t hi)
{
	if (s->n < 0)
		return;
	if (s->n == CSET_MAX) {
		s->n = -1;
		return;
	}
	s->lo[s->n] = lo;
	s->hi[s->n] = hi;
	s->n++;
}

/* Sort and merge the ranges. */
static void cset_norm(struct cset *s)
{
	int w = 0;

	if (s->n <= 0)
		return;
	for (int i = 1; i < s->n; i++) {	/* insertion sort: few ranges */
		uint32_t lo = s->lo[i], hi = s->hi[i];
		int j = i - 1;

		for (; j >= 0 && s->lo[j] > lo; j--) {
			s->lo[j + 1] = s->lo[j];
			s->hi[j + 1] = s->hi[j];
		}
		s->lo[j + 1] = lo;
		s->hi[j + 1] = hi;
	}
	for (int i = 1; i < s->n; i++) {
		if (s->lo[i] <= s->hi[w] + 1) {
			if (s->hi[i] > s->hi[w])
				s->hi[w] = s->hi[i];
		} else {
			w++;
			s->lo[w] = s->lo[i];
			s->hi[w] = s->hi[i];
		}
	}
	s->n = w + 1;
}

static void cset_invert(struct cset *s)
{
	struct cset o = { 0 };
	uint32_t next = 0;

	if (s->n < 0)
		return;
	for (int i = 0; i < s->n; i++) {
		if (s->lo[i] > next)
			cset_add(&o, next, s->lo[i] - 1);
		next = s->hi[i] + 1;
	}
	if (next <= CP_MAX)
		cset_add(&o, next, CP_MAX);
	*s = o;
}

static void cset_union(struct cset *a, const struct cset *b)
{
	if (b->n < 0)
		a->n = -1;
	for (int i = 0; i < b->n; i++)
		cset_add(a, b->lo[i], b->hi[i]);
	cset_norm(a);
}

/* a &= b */
static void cset_and(struct cset *a, const struct cset *b)
{
	struct cset nb = *b;

	cset_invert(a);
	cset_invert(&nb);
	cset_union(a, &nb);
	cset_invert(a);
}

static bool cset_has(const struct cset *s, uint32_t cp)
{
	for (int i = 0; i < s->n; i++)
		if (cp >= s->lo[i] && cp <= s->hi[i])
			return true;
	return false;
}

/* One code point in a GBNF class: escaped where the class syntax needs it. */
static void class_char(struct sb *b, uint32_t cp)
{
	if (cp < 0x20 || cp == 0x7f || cp == '\\' || cp == ']' || cp == '[' || cp == '-' ||
	    cp == '^')
		sb_printf(b, "\\x%02X", cp);
	else if (cp < 0x80)
		put_utf8(b, cp);
	else if (cp < 0x10000)
		sb_printf(b, "\\u%04X", cp);
	else
		put_utf8(b, cp);
}

/*
 * cset_trim - s with the surrogates (U+D800..U+DFFF, never a character of
 * UTF-8 text, and refused in a GBNF class) cut off its ranges' ends and
 * its ranges inside them dropped: what it matches in text is the same,
 * it has no more ranges, and none begins or ends on a surrogate.
 */
static void cset_trim(struct cset *s)
{
	int w = 0;

	for (int i = 0; i < s->n; i++) {
		uint32_t lo = s->lo[i], hi = s->hi[i];

		if (lo >= 0xd800 && lo <= 0xdfff)
			lo = 0xe000;
		if (hi >= 0xd800 && hi <= 0xdfff)
			hi = 0xd7ff;
		if (lo > hi)
			continue;
		s->lo[w] = lo;
		s->hi[w++] = hi;
	}
	if (s->n > 0)
		s->n = w;
}

/*
 * s (not empty, not everything, trimmed) as a GBNF class, negated when
 * shorter and when what it leaves out is more than surrogates.
 */
static void class_expr(struct sb *b, const struct cset *s)
{
	struct cset t = *s;
	bool neg = s->n > 0 && s->hi[s->n - 1] == CP_MAX;

	if (neg) {
		cset_invert(&t);
		cset_trim(&t);
		if (!t.n) {
			t = *s;
			neg = false;
		}
	}
	sb_puts(b, neg ? "[^" : "[");
	for (int i = 0; i < t.n; i++) {
		class_char(b, t.lo[i]);
		if (t.hi[i] > t.lo[i]) {
			if (t.hi[i] > t.lo[i] + 1)
				sb_puts(b, "-");
			class_char(b, t.hi[i]);
		}
	}
	sb_puts(b, "]");
}

/*
 * unit_expr - one character of a JSON string whose decoded value is in s,
 * written in its canonical form only (json_char), so that what it decodes
 * to is what the grammar shows.  0, or NEVER when s is empty.
 */
static int unit_expr(struct sb *b, const struct cset *given)
{
	static const struct { uint32_t cp; char letter; } short_esc[] = {
		{ '"', '"' }, { '\\', '\\' }, { 8, 'b' }, { 12, 'f' },
		{ 10, 'n' }, { 13, 'r' }, { 9, 't' },
	};
	struct cset raw = { 0 };
	char letters[8], hex0[17], hex1[17];
	int nl = 0, n0 = 0, n1 = 0, parts = 0;
	struct sb alt[4] = { 0 };
	struct cset trimmed = *given;
	const struct cset *s = &trimmed;
	bool group;

	cset_trim(&trimmed);
	if (s->n == 0)
		return NEVER;
	if (s->n == 1 && s->lo[0] == s->hi[0]) {
		struct sb t = { 0 };

		json_char(&t, s->lo[0]);
		lit(b, sb_str(&t), t.len);
		b->oom |= t.oom;
		sb_free(&t);
		return 0;
	}
	cset_add(&raw, 0, 0x1f);
	cset_add(&raw, '"', '"');
	cset_add(&raw, '\\', '\\');
	cset_invert(&raw);
	cset_and(&raw, s);
	for (size_t i = 0; i < sizeof(short_esc) / sizeof(short_esc[0]); i++)
		if (cset_has(s, short_esc[i].cp))
			letters[nl++] = short_esc[i].letter;
	for (uint32_t cp = 0; cp < 0x20; cp++) {
		bool is_short = cp == 8 || cp == 9 || cp == 10 || cp == 12 || cp == 13;

		if (is_short || !cset_has(s, cp))
			continue;
		if (cp < 0x10)
			hex0[n0++] = "0123456789abcdef"[cp];
		else
			hex1[n1++] = "0123456789abcdef"[cp - 0x10];
	}
	if (raw.n > 0)
		class_expr(&alt[parts++], &raw);
	if (nl == 1) {
		char e[2] = { '\\', letters[0] };

		lit(&alt[parts++], e, 2);
	} else if (nl) {
		sb_puts(&alt[parts], "\"\\\\\" [");
		for (int i = 0; i < nl; i++)
			class_char(&alt[parts], (unsigned char)letters[i]);
		sb_puts(&alt[parts++], "]");
	}
	for (int h = 0; h < 2; h++) {
		const char *digits = h ? hex1 : hex0;
		int nd = h ? n1 : n0;
		struct cset ds = { 0 };

		if (!nd)
			continue;
		for (int i = 0; i < nd; i++)
			cset_add(&ds, (unsigned char)digits[i], (unsigned char)digits[i]);
		cset_norm(&ds);
		sb_printf(&alt[parts], "\"\\\\u00%d\" ", h);
		if (nd == 1)
			sb_printf(&alt[parts++], "\"%c\"", digits[0]);
		else
			class_expr(&alt[parts++], &ds);
	}
	/* one term, so that a quantifier after it applies to all of it: a
	   lone escape part ("\\" [nt]) is two terms, grouped like several */
	group = parts > 1 || raw.n <= 0;
	if (group)
		sb_puts(b, "( ");
	for (int i = 0; i < parts; i++) {
		if (i)
			sb_puts(b, " | ");
		sb_puts(b, sb_str(&alt[i]));
		b->oom |= alt[i].oom;
		sb_free(&alt[i]);
	}
	if (group)
		sb_puts(b, " )");
	return 0;
}

/*
 * rep - term (a name, literal, class or parenthesised group) repeated min
 * to max times (max -1: no limit; max 0 is the caller's to avoid).
 */
static void rep(struct sb *b, const char *term, long min, long max)
{
	sb_puts(b, term);
	if (min == 1 && max == 1)
		return;
	if (min == 0 && max == 1)
		sb_puts(b, "?");
	else if (min == 0 && max < 0)
		sb_puts(b, "*");
	else if (min == 1 && max < 0)
		sb_puts(b, "+");
	else if (max < 0)
		sb_printf(b, "{%ld,}", min);
	else if (min == max)
		sb_printf(b, "{%ld}", min);
	else
		sb_printf(b, "{%ld,%ld}", min, max);
}

/* ---- JSON pointers and references ---- */

/* The value at JSON pointer ptr ("#", "#/a/b") in the document, or NULL. */
static json_t *ptr_resolve(json_t *doc, const char *ptr, bool *nested_id)
{
	json_t *cur = doc;
	const char *p = ptr + 1;

	*nested_id = false;
	while (*p == '/') {
		char seg[256];
		size_t n = 0;

		for (p++; *p && *p != '/'; p++) {
			char ch = *p;

			if (ch == '~' && (p[1] == '0' || p[1] == '1')) {
				ch = p[1] == '0' ? '~' : '/';
				p++;
			} else if (ch == '%' && p[1] && p[2]) {
				char hx[3] = { p[1], p[2], 0 }, *end;
				long v = strtol(hx, &end, 16);

				if (*end || v <= 0)
					return NULL;
				ch = (char)v;
				p += 2;
			}
			if (n + 1 >= sizeof(seg))
				return NULL;
			seg[n++] = ch;
		}
		seg[n] = '\0';
		if (json_is_object(cur)) {
			cur = json_object_get(cur, seg);
		} else if (json_is_array(cur)) {
			char *end;
			unsigned long i = strtoul(seg, &end, 10);

			if (!n || *end || (seg[0] == '0' && n > 1))
				return NULL;
			cur = json_array_get(cur, i);
		} else {
			return NULL;
		}
		if (!cur)
			return NULL;
		if (json_is_object(cur) && *p && json_object_get(cur, "$id"))
			*nested_id = true;
	}
	return *p ? NULL : cur;
}

/*
 * Whether a schema at ptr has, or lies below, a $id other than the
 * root's: its own $id is the base its $ref resolves against, too.
 */
static bool below_nested_id(json_t *doc, const char *ptr)
{
	bool nested;
	char *copy = strdup(ptr);

	if (!copy)
		return false;
	for (char *s = copy + strlen(copy); s > copy; s--) {
		if (*s && *s != '/')
			continue;
		*s = '\0';
		if (strlen(copy) > 1) {
			json_t *v = ptr_resolve(doc, copy, &nested);

			if (json_is_object(v) && json_object_get(v, "$id")) {
				free(copy);
				return true;
			}
		}
	}
	free(copy);
	return false;
}

/*
 * ref_target - the schema a $ref (in the schema at path) names, and its
 * pointer (malloc'd); ERR with the message when it is not a local one.
 */
static int ref_target(struct ctx *c, json_t *ref, const char *path, json_t **out,
		      char **out_ptr)
{
	const char *r;
	bool nested;
	json_t *t;

	if (!json_is_string(ref))
		return fail(c, path, "$ref", "'$ref' must be a string");
	r = json_string_value(ref);
	if (r[0] != '#' || (r[1] && r[1] != '/'))
		return fail(c, path, "$ref", "'$ref' \"%.80s\" is not a local reference "
			    "(\"#\", \"#/$defs/name\" or another \"#/json/pointer\"): "
			    "remote references and anchors are not supported", r);
	if (below_nested_id(c->doc, path))
		return fail(c, path, "$ref", "'$ref' beside or below a nested '$id' (a new base URI) "
			    "is not supported: references resolve against the document");
	t = ptr_resolve(c->doc, r, &nested);
	if (!t)
		return fail(c, path, "$ref", "'$ref' \"%.80s\" names nothing in the document", r);
	if (!json_is_object(t) && !json_is_boolean(t))
		return fail(c, path, "$ref", "'$ref' \"%.80s\" names a %s, not a schema", r,
			    json_is_array(t) ? "array" : "value");
	*out = t;
	*out_ptr = strdup(r);
	return *out_ptr ? 0 : oom(c);
}

/* ---- conjunctions: the schema objects that apply at one place ---- */

enum { D_REF = 1, D_ALLOF = 2, D_ANYOF = 4, D_ONEOF = 8 };

struct conj {
	int n;
	bool never;		/* a false schema is among them */
	json_t *s[MAX_CONJ];	/* schema objects (borrowed from the document) */
	char *path[MAX_CONJ];	/* each one's JSON pointer (owned) */
	unsigned done[MAX_CONJ];	/* D_*: keywords already taken apart */
	int up[MAX_CONJ];	/* the one whose $ref, allOf, anyOf or oneOf
				   brought it in, or -1 */
};

static void conj_free(struct conj *cj)
{
	for (int i = 0; i < cj->n; i++)
		free(cj->path[i]);
	cj->n = 0;
}

/*
 * conj_insert - add schema s (at path, which the conjunction takes over)
 * at position at, brought in by schema up (-1: none).  A schema already
 * there is not added twice; true makes no difference; false makes the
 * whole NEVER.  0 or ERR.
 */
static int conj_insert(struct ctx *c, struct conj *cj, int at, json_t *s, char *path, int up)
{
	if (!path)
		return ERR;
	if (json_is_boolean(s)) {
		if (json_is_false(s) && !cj->never) {
			cj->never = true;
			never(c, path, NULL, "the schema is false");
		}
		free(path);
		return 0;
	}
	if (!json_is_object(s)) {
		fail(c, path, NULL, "a schema must be an object or a boolean, not %s",
		     json_is_array(s) ? "an array" : json_is_string(s) ? "a string" :
		     json_is_null(s) ? "null" : "a number");
		free(path);
		return ERR;
	}
	for (int i = 0; i < cj->n; i++) {
		if (cj->s[i] == s && !strcmp(cj->path[i], path)) {
			free(path);
			return 0;
		}
	}
	if (cj->n == MAX_CONJ) {
		fail(c, path, NULL, "more than %d schemas apply here at once (allOf, $ref)",
		     MAX_CONJ);
		free(path);
		return ERR;
	}
	memmove(&cj->s[at + 1], &cj->s[at], (size_t)(cj->n - at) * sizeof(cj->s[0]));
	memmove(&cj->path[at + 1], &cj->path[at], (size_t)(cj->n - at) * sizeof(cj->path[0]));
	memmove(&cj->done[at + 1], &cj->done[at], (size_t)(cj->n - at) * sizeof(cj->done[0]));
	memmove(&cj->up[at + 1], &cj->up[at], (size_t)(cj->n - at) * sizeof(cj->up[0]));
	cj->s[at] = s;
	cj->path[at] = path;
	cj->done[at] = 0;
	cj->up[at] = up;
	cj->n++;
	for (int i = 0; i < cj->n; i++)
		if (i != at && cj->up[i] >= at)
			cj->up[i]++;
	return 0;
}

/* Add schema s (at path, taken over) at the end, brought in by nothing. */
static int conj_add(struct ctx *c, struct conj *cj, json_t *s, char *path)
{
	return conj_insert(c, cj, cj->n, s, path, -1);
}

/* Copy a conjunction (its pointers duplicated).  0 or ERR. */
static int conj_copy(struct ctx *c, struct conj *dst, const struct conj *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->never = src->never;
	for (int i = 0; i < src->n; i++) {
		dst->s[i] = src->s[i];
		dst->done[i] = src->done[i];
		dst->up[i] = src->up[i];
		dst->path[i] = strdup(src->path[i]);
		dst->n = i + 1;
		if (!dst->path[i]) {
			dst->n = i;
			conj_free(dst);
			return oom(c);
		}
	}
	return 0;
}

/* ---- keywords ---- */

enum {
	T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32,
	T_NUM = 64 | 32,	/* a number may be an integer */
	T_ALL = 127,
};

enum kwkind {
	K_ANNOT,		/* changes nothing that is valid: ignored */
	K_CORE,			/* taken apart before the types: $ref, allOf, ... */
	K_GENERAL,		/* type, enum, const */
	K_TYPED,		/* supported, for its type */
	K_UNSUP,		/* refused where its type applies */
};

static const struct kwinfo {
	const char *name;
	enum kwkind kind;
	unsigned type;		/* the types it applies to (K_TYPED, K_UNSUP) */
} kwinfos[] = {
	{ "$anchor", K_ANNOT, 0 }, { "$comment", K_ANNOT, 0 },
	{ "$defs", K_ANNOT, 0 }, { "$dynamicAnchor", K_ANNOT, 0 },
	{ "$id", K_ANNOT, 0 }, { "$recursiveAnchor", K_ANNOT, 0 },
	{ "$schema", K_ANNOT, 0 }, { "$vocabulary", K_ANNOT, 0 },
	{ "contentEncoding", K_ANNOT, 0 }, { "contentMediaType", K_ANNOT, 0 },
	{ "contentSchema", K_ANNOT, 0 }, { "default", K_ANNOT, 0 },
	{ "definitions", K_ANNOT, 0 }, { "deprecated", K_ANNOT, 0 },
	{ "description", K_ANNOT, 0 }, { "discriminator", K_ANNOT, 0 },
	{ "example", K_ANNOT, 0 }, { "examples", K_ANNOT, 0 },
	{ "readOnly", K_ANNOT, 0 }, { "title", K_ANNOT, 0 },
	{ "writeOnly", K_ANNOT, 0 },
	{ "$ref", K_CORE, 0 }, { "allOf", K_CORE, 0 }, { "anyOf", K_CORE, 0 },
	{ "oneOf", K_CORE, 0 }, { "nullable", K_CORE, 0 },
	{ "type", K_GENERAL, 0 }, { "enum", K_GENERAL, 0 }, { "const", K_GENERAL, 0 },
	{ "not", K_UNSUP, T_ALL }, { "if", K_UNSUP, T_ALL }, { "then", K_UNSUP, T_ALL },
	{ "else", K_UNSUP, T_ALL }, { "$dynamicRef", K_UNSUP, T_ALL },
	{ "$recursiveRef", K_UNSUP, T_ALL },
	{ "minLength", K_TYPED, T_STR }, { "maxLength", K_TYPED, T_STR },
	{ "pattern", K_TYPED, T_STR }, { "format", K_TYPED, T_STR },
	{ "minimum", K_TYPED, T_NUM }, { "maximum", K_TYPED, T_NUM },
	{ "exclusiveMinimum", K_TYPED, T_NUM }, { "exclusiveMaximum", K_TYPED, T_NUM },
	{ "multipleOf", K_TYPED, T_NUM },
	{ "properties", K_TYPED, T_OBJ }, { "required", K_TYPED, T_OBJ },
	{ "additionalProperties", K_TYPED, T_OBJ }, { "minProperties", K_TYPED, T_OBJ },
	{ "maxProperties", K_TYPED, T_OBJ }, { "patternProperties", K_TYPED, T_OBJ },
	{ "dependentRequired", K_TYPED, T_OBJ }, { "dependentSchemas", K_TYPED, T_OBJ },
	{ "dependencies", K_TYPED, T_OBJ }, { "propertyNames", K_TYPED, T_OBJ },
	{ "unevaluatedProperties", K_UNSUP, T_OBJ },
	{ "items", K_TYPED, T_ARR }, { "prefixItems", K_TYPED, T_ARR },
	{ "additionalItems", K_TYPED, T_ARR }, { "minItems", K_TYPED, T_ARR },
	{ "maxItems", K_TYPED, T_ARR }, { "uniqueItems", K_TYPED, T_ARR },
	{ "contains", K_UNSUP, T_ARR }, { "minContains", K_UNSUP, T_ARR },
	{ "maxContains", K_UNSUP, T_ARR }, { "unevaluatedItems", K_UNSUP, T_ARR },
};

static const struct kwinfo *kw_info(const char *name)
{
	static const struct kwinfo ext = { "x-", K_ANNOT, 0 };

	if (!strncmp(name, "x-", 2))
		return &ext;	/* extensions (OpenAPI's convention) */
	for (size_t i = 0; i < sizeof(kwinfos) / sizeof(kwinfos[0]); i++)
		if (!strcmp(kwinfos[i].name, name))
			return &kwinfos[i];
	return NULL;
}

/* Whether an object schema holds only annotations (and $defs). */
static bool only_annotations(json_t *s, const char *except)
{
	const char *k;
	json_t *v;

	json_object_foreach(s, k, v) {
		const struct kwinfo *ki = kw_info(k);

		if (except && !strcmp(k, except))
			continue;
		if (!ki || ki->kind != K_ANNOT)
			return false;
	}
	return true;
}

/*
 * kw_one - keyword kw's value where the conjunction holds it, with the
 * index of the schema; NULL when absent.  Two schemas holding it with
 * different values is an error (*err set).
 */
static json_t *kw_one(struct ctx *c, const struct conj *cj, const char *kw, int *at,
		      bool *err)
{
	json_t *found = NULL;

	*err = false;
	for (int i = 0; i < cj->n; i++) {
		json_t *v = json_object_get(cj->s[i], kw);

		if (!v)
			continue;
		if (found && !json_equal(found, v)) {
			fail(c, cj->path[i], kw, "'%s' here and in %s differ: combining them "
			     "(allOf, $ref) is not supported", kw, cj->path[*at]);
			*err = true;
			return NULL;
		}
		if (!found) {
			found = v;
			*at = i;
		}
	}
	return found;
}

/* The type bits of a "type" value; ERR on a bad one. */
static int type_bits(struct ctx *c, json_t *t, const char *path)
{
	static const struct { const char *name; unsigned bits; } names[] = {
		{ "null", T_NULL }, { "boolean", T_BOOL }, { "object", T_OBJ },
		{ "array", T_ARR }, { "string", T_STR }, { "integer", T_INT },
		{ "number", T_NUM },
	};
	unsigned bits = 0;
	size_t n = json_is_array(t) ? json_array_size(t) : 1;

	if (!json_is_string(t) && !json_is_array(t))
		return fail(c, path, "type", "'type' must be a string or an array of strings");
	if (json_is_array(t) && !n)
		return fail(c, path, "type", "'type' is an empty array");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
		const char *name = json_string_value(e);
		size_t j;

		if (!name)
			return fail(c, path, "type", "'type' must be a string or an array of strings");
		for (j = 0; j < sizeof(names) / sizeof(names[0]); j++)
			if (!strcmp(names[j].name, name))
				break;
		if (j == sizeof(names) / sizeof(names[0]))
			return fail(c, path, "type", "unknown type \"%.40s\" (use null, boolean, "
				    "object, array, string, integer or number)", name);
		bits |= names[j].bits;
	}
	return (int)bits;
}

/* The type bits of a JSON value (an integral number is an integer). */
static unsigned value_bits(json_t *v)
{
	if (json_is_null(v))
		return T_NULL;
	if (json_is_boolean(v))
		return T_BOOL;
	if (json_is_object(v))
		return T_OBJ;
	if (json_is_array(v))
		return T_ARR;
	if (json_is_string(v))
		return T_STR;
	if (json_is_integer(v))
		return T_INT;
	{
		double d = json_real_value(v);

		return d > -1e18 && d < 1e18 && (double)(long long)d == d ? T_INT : 64;
	}
}

/* JSON Schema's equality: numbers by value (1 and 1.0 are equal). */
static bool jeq(json_t *a, json_t *b)
{
	if (json_is_number(a) && json_is_number(b)) {
		if (json_is_integer(a) && json_is_integer(b))
			return json_integer_value(a) == json_integer_value(b);
		if (json_is_real(a) && json_is_real(b))
			return json_real_value(a) == json_real_value(b);
		if (json_is_real(a)) {
			json_t *t = a;

			a = b;
			b = t;
		}
		{
			double d = json_real_value(b);
			long long i = json_integer_value(a);

			return d > -9.2e18 && d < 9.2e18 && (double)i == d && (long long)d == i;
		}
	}
	if (json_is_array(a) && json_is_array(b)) {
		if (json_array_size(a) != json_array_size(b))
			return false;
		for (size_t i = 0; i < json_array_size(a); i++)
			if (!jeq(json_array_get(a, i), json_array_get(b, i)))
				return false;
		return true;
	}
	if (json_is_object(a) && json_is_object(b)) {
		const char *k;
		json_t *v;

		if (json_object_size(a) != json_object_size(b))
			return false;
		json_object_foreach(a, k, v) {
			json_t *w = json_object_get(b, k);

			if (!w || !jeq(v, w))
				return false;
		}
		return true;
	}
	return json_equal(a, b);
}

/* ---- JSON values as literals (enum, const) ---- */

/* The shortest decimal form that reads back as d, with %e's layout. */
static void shortest_e(double d, char *buf, size_t n)
{
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, n, "%.*e", p - 1, d);
		if (strtod(buf, NULL) == d)
			return;
	}
}

/*
 * real_text - the JSON text of a finite double: its shortest digits that
 * read back as d, written out plainly where the point falls within 21
 * digits ("0.1", "1500", "0.000001"), else with an exponent ("1e+21",
 * "1.5e-7"), as ECMAScript's Number#toString writes it.  Zero is "0".
 */
static void real_text(struct sb *b, double d)
{
	char buf[40], digits[24];
	int nd = 0, e;

	if (d == 0) {
		sb_puts(b, "0");
		return;
	}
	if (d < 0) {
		sb_puts(b, "-");
		d = -d;
	}
	shortest_e(d, buf, sizeof(buf));
	for (char *p = buf; *p && *p != 'e' && nd < (int)sizeof(digits) - 1; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	e = atoi(strchr(buf, 'e') + 1);	/* d = digits[0].digits[1..] * 10^e */
	if (e >= 21 || e < -6) {
		sb_put(b, digits, 1);
		if (nd > 1)
			sb_printf(b, ".%s", digits + 1);
		sb_printf(b, "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	} else if (e < 0) {
		sb_puts(b, "0.");
		for (int i = e + 1; i < 0; i++)
			sb_puts(b, "0");
		sb_puts(b, digits);
	} else if (nd <= e + 1) {
		sb_puts(b, digits);
		for (int i = nd; i < e + 1; i++)
			sb_puts(b, "0");
	} else {
		sb_printf(b, "%.*s.%s", e + 1, digits, digits + e + 1);
	}
}

/* v as compact JSON text (strings canonical). */
static void json_text(struct sb *b, json_t *v)
{
	if (json_is_null(v)) {
		sb_puts(b, "null");
	} else if (json_is_true(v)) {
		sb_puts(b, "true");
	} else if (json_is_false(v)) {
		sb_puts(b, "false");
	} else if (json_is_integer(v)) {
		sb_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	} else if (json_is_real(v)) {
		real_text(b, json_real_value(v));
	} else if (json_is_string(v)) {
		sb_puts(b, "\"");
		json_str(b, json_string_value(v), json_string_length(v));
		sb_puts(b, "\"");
	} else if (json_is_array(v)) {
		sb_puts(b, "[");
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i)
				sb_puts(b, ",");
			json_text(b, json_array_get(v, i));
		}
		sb_puts(b, "]");
	} else {
		const char *k;
		json_t *e;
		bool first = true;

		sb_puts(b, "{");
		json_object_foreach(v, k, e) {
			if (!first)
				sb_puts(b, ",");
			first = false;
			sb_puts(b, "\"");
			json_str(b, k, strlen(k));
			sb_puts(b, "\":");
			json_text(b, e);
		}
		sb_puts(b, "}");
	}
}

/* v as a GBNF literal. */
static void json_lit(struct sb *b, json_t *v)
{
	struct sb t = { 0 };

	json_text(&t, v);
	lit(b, sb_str(&t), t.len);
	b->oom |= t.oom;
	sb_free(&t);
}

static int tr_conj(struct ctx *c, struct conj *cj, const char *hint);

/* A child's rule-name hint: "hint-part". */
static void hint_join(char *out, size_t n, const char *hint, const char *part)
{
	snprintf(out, n, "%s-%s", hint, part);
}

/*
 * rule_make - a finished rule with body b, named after hint; an existing
 * rule with the same body is shared.  Its index or ERR.
 */
static int rule_make(struct ctx *c, const char *hint, struct sb *b)
{
	int r;

	if (b->oom)
		return oom(c);
	r = smap_get(&c->bodies, sb_str(b), -1);
	if (r >= 0)
		return r;
	r = rule_new(c, hint);
	if (r < 0 || rule_body(c, r, sb_str(b)) || smap_put(&c->bodies, sb_str(b), r))
		return r < 0 ? ERR : oom(c);
	return r;
}

/*
 * count_kw - a non-negative integer keyword (minLength, maxItems, ...):
 * 0 with *out set, ERR when it is not one or is above MAX_REPEAT.
 */
static int count_kw(struct ctx *c, json_t *v, const char *path, const char *kw, long *out)
{
	double d = json_number_value(v);

	if (!json_is_number(v) || value_bits(v) != T_INT || d < 0)
		return fail(c, path, kw, "'%s' must be a non-negative integer", kw);
	if (d > MAX_REPEAT)
		return fail(c, path, kw, "'%s' %.0f is more than %d, the largest count "
			    "supported", kw, d, MAX_REPEAT);
	*out = (long)d;
	return 0;
}

/* ---- string patterns: a subset of ECMA-262 regular expressions ---- */

/*
 * The classes are the narrowest of ECMA-262's and Python's (whose \d, \w
 * and \s are Unicode-aware): narrow is what a positive use may match,
 * wide what a negated use must exclude, so that a string the grammar
 * gives matches under either engine.
 */
struct rxclass {
	struct cset narrow, wide;
};

struct rx {
	struct ctx *c;
	const char *path;	/* the schema's pointer; the keyword is "pattern" */
	const unsigned char *s;	/* the pattern, n bytes of UTF-8 */
	size_t n, i;
	int depth;
};

static int rx_fail(struct rx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rx_fail(struct rx *x, const char *fmt, ...)
{
	char msg[240];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return fail(x->c, x->path, "pattern", "'pattern': %s (at offset %zu)", msg, x->i);
}

static bool rx_end(const struct rx *x)
{
	return x->i >= x->n;
}

static uint32_t rx_peek(const struct rx *x)
{
	return rx_end(x) ? 0 : x->s[x->i];
}

/* The code point at x->i, moved past. */
static uint32_t rx_next(struct rx *x)
{
	size_t l = pg_utf8_len(x->s + x->i, x->n - x->i);
	uint32_t cp;

	if (!l) {
		x->i++;
		return 0xfffd;
	}
	cp = pg_utf8_code(x->s + x->i, l);
	x->i += l;
	return cp;
}

static void space_sets(struct cset *ecma_and_py, struct cset *ecma_or_py)
{
	static const uint32_t both[][2] = {
		{ 9, 13 }, { 0x20, 0x20 }, { 0xa0, 0xa0 }, { 0x1680, 0x1680 },
		{ 0x2000, 0x200a }, { 0x2028, 0x2029 }, { 0x202f, 0x202f },
		{ 0x205f, 0x205f }, { 0x3000, 0x3000 },
	};

	memset(ecma_and_py, 0, sizeof(*ecma_and_py));
	for (size_t i = 0; i < sizeof(both) / sizeof(both[0]); i++)
		cset_add(ecma_and_py, both[i][0], both[i][1]);
	*ecma_or_py = *ecma_and_py;
	cset_add(ecma_or_py, 0x1c, 0x1f);	/* Python's str.isspace() */
	cset_add(ecma_or_py, 0x85, 0x85);
	cset_add(ecma_or_py, 0xfeff, 0xfeff);	/* ECMA-262's \s */
	cset_norm(ecma_and_py);
	cset_norm(ecma_or_py);
}

/* \d \D \w \W \s \S */
static void class_escape(uint32_t e, struct rxclass *k)
{
	struct cset ascii = { 0 };

	memset(k, 0, sizeof(*k));
	cset_add(&ascii, 0, 0x7f);
	switch (e | 0x20) {
	case 'd':
		cset_add(&k->narrow, '0', '9');
		k->wide = k->narrow;
		cset_add(&k->wide, 0x80, CP_MAX);	/* Python's Unicode digits */
		break;
	case 'w':
		cset_add(&k->narrow, '0', '9');
		cset_add(&k->narrow, 'A', 'Z');
		cset_add(&k->narrow, '_', '_');
		cset_add(&k->narrow, 'a', 'z');
		k->wide = k->narrow;
		cset_add(&k->wide, 0x80, CP_MAX);	/* Python's Unicode letters */
		break;
	default:
		space_sets(&k->narrow, &k->wide);
		break;
	}
	cset_norm(&k->narrow);
	cset_norm(&k->wide);
	if (e >= 'A' && e <= 'Z') {	/* the complement: of wide, of narrow */
		struct cset n = k->wide, w = k->narrow;

		cset_invert(&n);
		cset_invert(&w);
		k->narrow = n;
		k->wide = w;
	}
	(void)ascii;
}

static int rx_hex(struct rx *x, int digits, uint32_t *out)
{
	uint32_t v = 0;

	for (int i = 0; i < digits; i++) {
		uint32_t ch = rx_peek(x);
		int d = ch >= '0' && ch <= '9' ? (int)ch - '0' : (ch | 0x20) >= 'a' &&
			(ch | 0x20) <= 'f' ? (int)(ch | 0x20) - 'a' + 10 : -1;

		if (d < 0)
			return rx_fail(x, "'\\%c' needs %d hexadecimal digits", digits == 2 ? 'x' : 'u',
				       digits);
		v = v * 16 + (uint32_t)d;
		x->i++;
	}
	*out = v;
	return 0;
}

/* \u: a code point, a surrogate pair joined; ERR on a lone surrogate. */
static int rx_unicode(struct rx *x, uint32_t *out)
{
	uint32_t lo = 0;

	if (rx_peek(x) == '{')
		return rx_fail(x, "'\\u{...}' needs the u flag: write \\uXXXX");
	if (rx_hex(x, 4, out))
		return ERR;
	if (*out >= 0xdc00 && *out <= 0xdfff)
		return rx_fail(x, "a lone surrogate \\u%04X is not supported", *out);
	if (*out < 0xd800 || *out > 0xdbff)
		return 0;
	if (x->i + 1 >= x->n || x->s[x->i] != '\\' || x->s[x->i + 1] != 'u')
		return rx_fail(x, "a lone surrogate \\u%04X is not supported", *out);
	x->i += 2;
	if (rx_hex(x, 4, &lo))
		return ERR;
	if (lo < 0xdc00 || lo > 0xdfff)
		return rx_fail(x, "a lone surrogate \\u%04X is not supported", *out);
	*out = 0x10000 + ((*out - 0xd800) << 10) + (lo - 0xdc00);
	return 0;
}

/*
 * rx_escape - after a backslash: a class (*is_class, into k) or one code
 * point (*cp).  in_class: inside [...], where \b is a backspace.
 */
static int rx_escape(struct rx *x, bool in_class, bool *is_class, struct rxclass *k,
		     uint32_t *cp)
{
	uint32_t e;

	*is_class = false;
	if (rx_end(x))
		return rx_fail(x, "the pattern ends in a backslash");
	e = rx_next(x);
	switch (e) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		*is_class = true;
		class_escape(e, k);
		return 0;
	case 't': *cp = 9; return 0;
	case 'n': *cp = 10; return 0;
	case 'v': *cp = 11; return 0;
	case 'f': *cp = 12; return 0;
	case 'r': *cp = 13; return 0;
	case '0':
		if (rx_peek(x) >= '0' && rx_peek(x) <= '9')
			return rx_fail(x, "octal escapes are not supported");
		*cp = 0;
		return 0;
	case 'x':
		return rx_hex(x, 2, cp);
	case 'u':
		return rx_unicode(x, cp);
	case 'c':
		if (((rx_peek(x) | 0x20) < 'a') || ((rx_peek(x) | 0x20) > 'z'))
			return rx_fail(x, "'\\c' needs a letter");
		*cp = rx_next(x) & 31;
		return 0;
	case 'b':
		if (in_class) {
			*cp = 8;
			return 0;
		}
		return rx_fail(x, "the word boundary '\\b' is not supported");
	case 'B':
		return rx_fail(x, "the non-word-boundary '\\B' is not supported");
	case 'p': case 'P':
		return rx_fail(x, "Unicode property escapes ('\\%c{...}') are not supported",
			       (char)e);
	case 'k':
		return rx_fail(x, "named backreferences ('\\k<name>') are not supported");
	default:
		break;
	}
	if (e >= '1' && e <= '9')
		return rx_fail(x, "backreferences ('\\%c') are not supported", (char)e);
	if (strchr("^$\\.*+?()[]{}|/-", (int)e) && e) {
		*cp = e;
		return 0;
	}
	if (e < 0x80 && ((e | 0x20) >= 'a' && (e | 0x20) <= 'z'))
		return rx_fail(x, "the escape '\\%c' is not supported", (char)e);
	*cp = e;	/* an identity escape of punctuation or beyond ASCII */
	return 0;
}

/* One item of a class: a code point, or a class escape. */
static int rx_class_atom(struct rx *x, bool *is_class, struct rxclass *k, uint32_t *cp)
{
	*is_class = false;
	if (rx_peek(x) == '\\') {
		x->i++;
		return rx_escape(x, true, is_class, k, cp);
	}
	*cp = rx_next(x);
	return 0;
}

static void rxclass_add(struct rxclass *k, uint32_t lo, uint32_t hi)
{
	cset_add(&k->narrow, lo, hi);
	cset_add(&k->wide, lo, hi);
}

/* [...] or [^...] into the set it matches. */
static int rx_class(struct rx *x, struct cset *out)
{
	struct rxclass acc = { 0 };
	bool neg;

	x->i++;
	neg = rx_peek(x) == '^';
	if (neg)
		x->i++;
	if (rx_peek(x) == ']' && !rx_end(x)) {
		x->i++;
		if (!neg)
			return rx_fail(x, "the empty class '[]' matches nothing");
		memset(out, 0, sizeof(*out));
		cset_add(out, 0, CP_MAX);
		return 0;
	}
	while (rx_peek(x) != ']' || rx_end(x)) {
		struct rxclass k;
		bool is_class;
		uint32_t lo, hi;

		if (rx_end(x))
			return rx_fail(x, "an unterminated class '['");
		if (rx_class_atom(x, &is_class, &k, &lo))
			return ERR;
		if (is_class) {
			cset_union(&acc.narrow, &k.narrow);
			cset_union(&acc.wide, &k.wide);
			continue;
		}
		if (rx_peek(x) != '-' || x->i + 1 >= x->n || x->s[x->i + 1] == ']') {
			rxclass_add(&acc, lo, lo);
			continue;
		}
		x->i++;
		if (rx_class_atom(x, &is_class, &k, &hi))
			return ERR;
		if (is_class)
			return rx_fail(x, "a range in a class ends in a class escape");
		if (hi < lo)
			return rx_fail(x, "the class range is out of order");
		rxclass_add(&acc, lo, hi);
	}
	x->i++;
	cset_norm(&acc.narrow);
	cset_norm(&acc.wide);
	if (acc.narrow.n < 0 || acc.wide.n < 0)
		return rx_fail(x, "the class has too many ranges");
	if (neg) {
		*out = acc.wide;
		cset_invert(out);
	} else {
		*out = acc.narrow;
	}
	return 0;
}

/*
 * What a group or a sequence matches besides its text: whether the empty
 * string, and then (ne) the text of what it matches less the empty
 * string.  The grammar compiler refuses to repeat what may match nothing
 * (it would loop), and X{m,n} with X nullable is (X less "")*{0,n}, so
 * a repetition is written over ne instead.
 */
struct rxnull {
	bool nullable;
	struct sb ne;		/* empty while not nullable, or only "" */
};

static int rx_alt(struct rx *x, struct sb *out, bool *empty, struct rxnull *nl);

/*
 * An atom: a character set (*is_set, into set) or a group's text (into
 * g, *empty when it matches only the empty string, nl as rx_alt's).
 */
static int rx_atom(struct rx *x, bool *is_set, struct cset *set, struct sb *g, bool *empty,
		   struct rxnull *nl)
{
	uint32_t ch = rx_peek(x);

	*is_set = true;
	memset(set, 0, sizeof(*set));
	if (ch == '(') {
		*is_set = false;
		x->i++;
		if (rx_peek(x) == '?') {
			const char *q = (const char *)x->s + x->i;
			size_t left = x->n - x->i;

			if (left >= 2 && q[1] == ':') {
				x->i += 2;
			} else if (left >= 2 && (q[1] == '=' || q[1] == '!')) {
				return rx_fail(x, "lookahead '(?%c' is not supported", q[1]);
			} else if (left >= 3 && q[1] == '<' && (q[2] == '=' || q[2] == '!')) {
				return rx_fail(x, "lookbehind '(?<%c' is not supported", q[2]);
			} else if (left >= 2 && q[1] == '<') {
				x->i += 2;	/* a named group: the name is dropped */
				while (!rx_end(x) && rx_peek(x) != '>')
					x->i++;
				if (rx_end(x))
					return rx_fail(x, "an unterminated group name '(?<'");
				x->i++;
			} else {
				return rx_fail(x, "the group modifier '(?%.1s' is not supported",
					       left >= 2 ? q + 1 : "");
			}
		}
		if (++x->depth > 64)
			return rx_fail(x, "groups nested more than 64 deep");
		if (rx_alt(x, g, empty, nl))
			return ERR;
		x->depth--;
		if (rx_peek(x) != ')' || rx_end(x))
			return rx_fail(x, "an unterminated group '('");
		x->i++;
		return 0;
	}
	if (ch == '[')
		return rx_class(x, set);
	if (ch == '.') {
		x->i++;
		cset_add(set, 0, 9);
		cset_add(set, 11, 12);
		cset_add(set, 14, 0x2027);
		cset_add(set, 0x202a, CP_MAX);
		return 0;
	}
	if (ch == '\\') {
		struct rxclass k;
		bool is_class;
		uint32_t cp;

		x->i++;
		if (rx_escape(x, false, &is_class, &k, &cp))
			return ERR;
		if (is_class)
			*set = k.narrow;
		else
			cset_add(set, cp, cp);
		return 0;
	}
	if (ch == '*' || ch == '+' || ch == '?')
		return rx_fail(x, "nothing to repeat before '%c'", (char)ch);
	if (ch == '{')
		return rx_fail(x, "a '{' that is not a quantifier: write '\\{'");
	{
		uint32_t cp = rx_next(x);

		cset_add(set, cp, cp);
	}
	return 0;
}

/*
 * rx_number - a repetition count at x->i: 0 with *out set, 1 when no
 * digit is there (nothing read), ERR when it is above MAX_REPEAT.
 */
static int rx_number(struct rx *x, long *out)
{
	long v = 0;

	if (rx_end(x) || rx_peek(x) < '0' || rx_peek(x) > '9')
		return 1;
	while (rx_peek(x) >= '0' && rx_peek(x) <= '9' && !rx_end(x)) {
		v = v * 10 + (long)(rx_peek(x) - '0');
		if (v > MAX_REPEAT)
			return rx_fail(x, "a repetition count above %d", MAX_REPEAT);
		x->i++;
	}
	*out = v;
	return 0;
}

/* A quantifier after an atom: *has, and its bounds (max -1: none). */
static int rx_quant(struct rx *x, bool *has, long *min, long *max)
{
	uint32_t ch = rx_peek(x);

	*has = !rx_end(x) && (ch == '*' || ch == '+' || ch == '?' || ch == '{');
	if (!*has)
		return 0;
	x->i++;
	*min = ch == '+';
	*max = ch == '?' ? 1 : -1;
	if (ch == '{') {
		int r = rx_number(x, min);

		if (r == ERR)
			return ERR;
		if (r > 0)
			return rx_fail(x, "a '{' that is not a quantifier: write '\\{'");
		*max = *min;
		if (rx_peek(x) == ',' && !rx_end(x)) {
			x->i++;
			r = rx_number(x, max);
			if (r == ERR)
				return ERR;
			if (r > 0)
				*max = -1;	/* {n,}: no upper bound */
		}
		if (rx_peek(x) != '}' || rx_end(x))
			return rx_fail(x, "a '{' that is not a quantifier: write '\\{'");
		x->i++;
		if (*max >= 0 && *max < *min)
			return rx_fail(x, "the quantifier's bounds are out of order");
	}
	if (rx_peek(x) == '?' && !rx_end(x))
		return rx_fail(x, "lazy quantifiers ('%c?') are not supported", (char)ch);
	ch = rx_peek(x);
	if (!rx_end(x) && (ch == '*' || ch == '+' || ch == '{'))
		return rx_fail(x, "a quantifier after a quantifier");
	return 0;
}

/* Flush the literal characters gathered (JSON text) into out. */
static void rx_flush(struct sb *out, struct sb *pend)
{
	if (!pend->len)
		return;
	if (out->len)
		sb_puts(out, " ");
	lit(out, pend->p, pend->len);
	out->oom |= pend->oom;
	pend->len = 0;
}

/*
 * rx_piece - a term repeated min to max times (max > 0) after out, and
 * after nl (the sequence so far): S e less "" is (S less "") e | (e less "").
 * t: the term; tnl: what it matches besides (nullable, ne), for a group.
 */
static void rx_piece(struct sb *out, struct rxnull *nl, const char *t, const struct rxnull *tnl,
		     long min, long max)
{
	struct sb e = { 0 }, ene = { 0 }, ne = { 0 };
	bool null = min == 0;

	if (tnl && tnl->nullable) {
		struct sb body = { 0 };

		sb_printf(&body, "( %s )", sb_str(&tnl->ne));
		if (max == 1)
			sb_puts(&e, t);
		else
			rep(&e, sb_str(&body), 0, max);
		rep(&ene, sb_str(&body), 1, max);
		e.oom |= body.oom;
		sb_free(&body);
		null = true;
	} else {
		rep(&e, t, min, max);
		if (null)
			rep(&ene, t, 1, max);
	}
	if (nl->nullable && null) {
		if (nl->ne.len)
			sb_printf(&ne, "( %s ) %s | ", sb_str(&nl->ne), sb_str(&e));
		sb_puts(&ne, sb_str(&ene));
		ne.oom |= ene.oom | nl->ne.oom;
		sb_free(&nl->ne);
		nl->ne = ne;
	} else {
		nl->nullable = false;
		sb_free(&nl->ne);
	}
	if (out->len)
		sb_puts(out, " ");
	sb_puts(out, sb_str(&e));
	out->oom |= e.oom;
	sb_free(&e);
	sb_free(&ene);
}

/*
 * rx_seq - a sequence up to '|', ')' or the end.  top: of the whole
 * pattern, where '^' may open it and '$' close it (*anchored).  nl:
 * whether it may match "" and what else it matches (nl->ne).
 */
static int rx_seq(struct rx *x, struct sb *out, bool top, bool anchored[2], struct rxnull *nl)
{
	struct sb pend = { 0 };
	int rc = 0;

	nl->nullable = true;

	if (top && rx_peek(x) == '^' && !rx_end(x)) {
		anchored[0] = true;
		x->i++;
	}
	while (!rx_end(x) && !rc) {
		uint32_t ch = rx_peek(x);
		struct sb g = { 0 }, t = { 0 };
		struct rxnull gnl = { 0 };
		struct cset set;
		bool is_set, empty = false, has;
		long min = 1, max = 1;

		if (ch == '|' || (ch == ')' && !top))
			break;
		if (ch == ')') {
			rc = rx_fail(x, "an unmatched ')'");
			break;
		}
		if (ch == '$' && top && (x->i + 1 == x->n || x->s[x->i + 1] == '|')) {
			anchored[1] = true;
			x->i++;
			break;
		}
		if (ch == '$' || ch == '^') {
			rc = rx_fail(x, "the anchor '%c' is only supported at the %s of the pattern "
				     "(or of a top-level alternative)", (char)ch,
				     ch == '$' ? "end" : "start");
			break;
		}
		if (rx_atom(x, &is_set, &set, &g, &empty, &gnl) || rx_quant(x, &has, &min, &max)) {
			sb_free(&g);
			sb_free(&gnl.ne);
			rc = ERR;
			break;
		}
		if (is_set && set.n == 1 && set.lo[0] == set.hi[0] && !has) {
			json_char(&pend, set.lo[0]);
			nl->nullable = false;
			sb_free(&nl->ne);
			continue;
		}
		if (is_set && (set.n < 0 || unit_expr(&t, &set) == NEVER)) {
			sb_free(&g);
			rc = rx_fail(x, set.n < 0 ? "a class with too many ranges" :
				     "a class that matches nothing");
			break;
		}
		rx_flush(out, &pend);
		if (!is_set && !empty) {
			sb_puts(&t, "( ");
			sb_puts(&t, sb_str(&g));
			sb_puts(&t, " )");
		}
		if (t.len && max != 0)
			rx_piece(out, nl, sb_str(&t), is_set ? NULL : &gnl, min, max);
		out->oom |= t.oom | g.oom;
		sb_free(&t);
		sb_free(&g);
		sb_free(&gnl.ne);
		if (out->len + nl->ne.len > PG_SCHEMA_MAX_GBNF)
			rc = rx_fail(x, "the pattern's grammar would be more than %u bytes",
				     PG_SCHEMA_MAX_GBNF);
	}
	rx_flush(out, &pend);
	sb_free(&pend);
	return rc;
}

/*
 * Alternatives inside a group: "( a | b )", "?" when one may be empty;
 * nl: whether one may match "", and what they match less "".
 */
static int rx_alt(struct rx *x, struct sb *out, bool *empty, struct rxnull *nl)
{
	struct sb alts = { 0 };
	int n = 0;
	bool any_empty = false;

	nl->nullable = false;
	for (;;) {
		struct sb one = { 0 };
		struct rxnull onl = { 0 };
		bool anch[2] = { false, false };

		if (rx_seq(x, &one, false, anch, &onl)) {
			sb_free(&one);
			sb_free(&onl.ne);
			sb_free(&alts);
			return ERR;
		}
		if (one.len) {
			if (n++)
				sb_puts(&alts, " | ");
			sb_puts(&alts, sb_str(&one));
			if (nl->ne.len)
				sb_puts(&nl->ne, " | ");
			sb_puts(&nl->ne, sb_str(onl.nullable ? &onl.ne : &one));
			nl->nullable |= onl.nullable;
		} else {
			any_empty = true;
		}
		alts.oom |= one.oom;
		nl->ne.oom |= onl.ne.oom;
		sb_free(&one);
		sb_free(&onl.ne);
		if (rx_peek(x) != '|' || rx_end(x))
			break;
		x->i++;
	}
	*empty = !n;
	nl->nullable |= any_empty;
	if (!nl->nullable)
		sb_free(&nl->ne);
	if (n == 1 && !any_empty)
		sb_puts(out, sb_str(&alts));
	else if (n)
		sb_printf(out, "( %s )%s", sb_str(&alts), any_empty ? "?" : "");
	out->oom |= alts.oom;
	sb_free(&alts);
	return 0;
}

/*
 * tr_pattern - a string matching pattern (JSON Schema patterns search:
 * unanchored ends match anything) as a GBNF sequence, quotes included.
 */
static int tr_pattern(struct ctx *c, json_t *pat, const char *path, struct sb *body)
{
	struct rx x = { .c = c, .path = path };
	struct sb alts = { 0 };
	int n = 0, ch = prim(c, PR_CHAR);
	bool any_empty = false;

	if (ch < 0)
		return ERR;
	if (!json_is_string(pat))
		return fail(c, path, "pattern", "'pattern' must be a string");
	x.s = (const unsigned char *)json_string_value(pat);
	x.n = json_string_length(pat);
	for (;;) {
		struct sb one = { 0 }, full = { 0 };
		struct rxnull nl = { 0 };
		bool anch[2] = { false, false };
		int rc = rx_seq(&x, &one, true, anch, &nl);

		sb_free(&nl.ne);
		if (rc) {
			sb_free(&one);
			sb_free(&alts);
			return ERR;
		}
		if (!anch[0])
			sb_puts(&full, "char*");
		if (one.len)
			sb_printf(&full, "%s%s", full.len ? " " : "", sb_str(&one));
		if (!anch[1] && (one.len || anch[0]))
			sb_puts(&full, full.len ? " char*" : "char*");
		if (full.len) {
			if (n++)
				sb_puts(&alts, " | ");
			sb_puts(&alts, sb_str(&full));
		} else {
			any_empty = true;
		}
		alts.oom |= one.oom | full.oom;
		sb_free(&one);
		sb_free(&full);
		if (rx_end(&x))
			break;
		x.i++;	/* the '|' */
	}
	sb_puts(body, "\"\\\"\"");
	if (n == 1 && !any_empty)
		sb_printf(body, " %s", sb_str(&alts));
	else if (n)
		sb_printf(body, " ( %s )%s", sb_str(&alts), any_empty ? "?" : "");
	sb_puts(body, " \"\\\"\"");
	body->oom |= alts.oom;
	sb_free(&alts);
	return 0;
}

/* ---- integers: exact ranges, digit by digit ---- */

static bool all_digit(const char *s, size_t n, char d)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != d)
			return false;
	return true;
}

static void digit_class(struct sb *b, char lo, char hi)
{
	if (lo == hi)
		sb_printf(b, "\"%c\"", lo);
	else if (lo == '0' && hi == '9')
		sb_puts(b, "[0-9]");
	else
		sb_printf(b, "[%c-%c]", lo, hi);
}

/*
 * digits_range - the n-digit strings from lo to hi (lo <= hi, both n
 * digits), unambiguously: a shared prefix, then the first digit that
 * differs split into its low edge, a free middle and its high edge.
 */
static void digits_range(struct sb *b, const char *lo, const char *hi, size_t n)
{
	char zeros[32], nines[32];
	size_t i = 0, r;
	bool lz, h9;
	char s, e;
	int k = 0;

	while (i < n && lo[i] == hi[i])
		i++;
	if (i)
		lit(b, lo, i);
	if (i == n)
		return;
	if (i)
		sb_puts(b, " ");
	r = n - i - 1;
	lz = all_digit(lo + i + 1, r, '0');
	h9 = all_digit(hi + i + 1, r, '9');
	if (lz && h9) {
		digit_class(b, lo[i], hi[i]);
		if (r) {
			sb_puts(b, " ");
			rep(b, "[0-9]", (long)r, (long)r);
		}
		return;
	}
	memset(zeros, '0', r);
	memset(nines, '9', r);
	s = lo[i];
	e = hi[i];
	sb_puts(b, "( ");
	if (!lz) {
		digit_class(b, s, s);
		sb_puts(b, " ");
		digits_range(b, lo + i + 1, nines, r);
		s++;
		k++;
	}
	if (!h9)
		e--;
	if (s <= e) {
		sb_puts(b, k++ ? " | " : "");
		digit_class(b, s, e);
		sb_puts(b, " ");
		rep(b, "[0-9]", (long)r, (long)r);
	}
	if (!h9) {
		sb_puts(b, k++ ? " | " : "");
		digit_class(b, hi[i], hi[i]);
		sb_puts(b, " ");
		digits_range(b, zeros, hi + i + 1, r);
	}
	sb_puts(b, " )");
}

static int ndigits(unsigned long long v)
{
	int n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

static unsigned long long pow10u(int n)
{
	unsigned long long p = 1;

	while (n-- > 0)
		p *= 10;
	return p;
}

/* The magnitudes a..b (0 <= a <= b), without leading zeros; alternatives. */
static int mag_int(struct sb *b, unsigned long long a, unsigned long long z)
{
	int la = ndigits(a), lz = ndigits(z), n = 0;

	for (int len = la; len <= lz; len++) {
		unsigned long long lo = len == la ? a : pow10u(len - 1);
		unsigned long long hi = len == lz ? z : pow10u(len) - 1;
		char ls[32], hs[32];

		if (len > 1 && lo == pow10u(len - 1) && hi == pow10u(len) - 1) {
			int end = len;	/* a run of whole lengths */

			while (end + 1 <= lz && (end + 1 < lz || z == pow10u(end + 1) - 1))
				end++;
			sb_puts(b, n++ ? " | " : "");
			sb_puts(b, "[1-9] ");
			rep(b, "[0-9]", len - 1, end - 1);
			len = end;
			continue;
		}
		snprintf(ls, sizeof(ls), "%llu", lo);
		snprintf(hs, sizeof(hs), "%llu", hi);
		sb_puts(b, n++ ? " | " : "");
		digits_range(b, ls, hs, (size_t)len);
	}
	return n;
}

/* The integers lo..hi (lo <= hi, within +-INT_LIMIT) as alternatives. */
static void int_range(struct sb *b, long long lo, long long hi)
{
	bool alt = false;

	if (lo < 0) {
		unsigned long long mlo = hi < 0 ? (unsigned long long)-hi : 1;

		sb_puts(b, "\"-\" ( ");
		mag_int(b, mlo, (unsigned long long)-lo);
		sb_puts(b, " )");
		alt = true;
	}
	if (hi >= 0) {
		if (alt)
			sb_puts(b, " | ");
		mag_int(b, lo > 0 ? (unsigned long long)lo : 0, (unsigned long long)hi);
	}
}

/*
 * A lower bound v (exclusive when excl) as the least integer that meets
 * it, in *out; false when none of at most INT_DIGITS digits does.
 */
static bool int_lower(json_t *v, bool excl, long long *out)
{
	long long t;

	if (json_is_integer(v)) {
		t = json_integer_value(v);
		if (t > INT_LIMIT || (excl && t == INT_LIMIT))
			return false;
		t += excl;
	} else {
		double d = json_real_value(v);

		if (d >= 1e18)
			return false;
		if (d <= -1e18) {
			*out = -INT_LIMIT;
			return true;
		}
		t = (long long)d;
		if (excl)
			t = (d < (double)t ? t - 1 : t) + 1;
		else
			t = d > (double)t ? t + 1 : t;
		if (t > INT_LIMIT)
			return false;
	}
	*out = t < -INT_LIMIT ? -INT_LIMIT : t;
	return true;
}

/* The greatest integer under upper bound v; false when none. */
static bool int_upper(json_t *v, bool excl, long long *out)
{
	long long t;

	if (json_is_integer(v)) {
		t = json_integer_value(v);
		if (t < -INT_LIMIT || (excl && t == -INT_LIMIT))
			return false;
		t -= excl;
	} else {
		double d = json_real_value(v);

		if (d <= -1e18)
			return false;
		if (d >= 1e18) {
			*out = INT_LIMIT;
			return true;
		}
		t = (long long)d;
		if (excl)
			t = (d > (double)t ? t + 1 : t) - 1;
		else
			t = d < (double)t ? t - 1 : t;
		if (t < -INT_LIMIT)
			return false;
	}
	*out = t > INT_LIMIT ? INT_LIMIT : t;
	return true;
}

/* ---- numbers: decimal bounds ---- */

/* A bound's magnitude as decimal digits. */
struct dec {
	char ip[24];		/* the integer part ("0" for none, no leading zero) */
	char fp[360];		/* the fraction (no trailing zero; "" for none) */
	bool huge;		/* more than 20 integer digits (ip unset) */
	int sig;		/* significant digits */
};

/* A number bound: a signed decimal, inclusive or not. */
struct nbound {
	bool set, neg, excl;
	struct dec d;
	const char *path, *kw;	/* where it was written */
};

static void strip_zeros(char *s)
{
	size_t n = strlen(s);

	while (n && s[n - 1] == '0')
		s[--n] = '\0';
}

/* v's magnitude into d and its sign into *neg (zero is not negative). */
static void to_dec(json_t *v, bool *neg, struct dec *d)
{
	char digits[40], buf[48];
	int point, nd = 0;

	memset(d, 0, sizeof(*d));
	if (json_is_integer(v)) {
		long long i = json_integer_value(v);
		unsigned long long m = i < 0 ? 0ull - (unsigned long long)i : (unsigned long long)i;

		*neg = i < 0;
		snprintf(d->ip, sizeof(d->ip), "%llu", m);
		snprintf(digits, sizeof(digits), "%s", d->ip);
		strip_zeros(digits);
		d->sig = (int)strlen(digits);
		return;
	}
	{
		double x = json_real_value(v);

		*neg = x < 0;
		if (x < 0)
			x = -x;
		if (x == 0) {
			strcpy(d->ip, "0");
			*neg = false;
			return;
		}
		shortest_e(x, buf, sizeof(buf));
	}
	for (char *p = buf; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	digits[nd] = '\0';
	strip_zeros(digits);
	nd = (int)strlen(digits);
	d->sig = nd;
	point = atoi(strchr(buf, 'e') + 1) + 1;	/* digits before the point */
	if (point > 20) {
		d->huge = true;
		return;
	}
	if (point <= 0) {
		strcpy(d->ip, "0");
		memset(d->fp, '0', (size_t)-point);
		memcpy(d->fp - point, digits, (size_t)nd + 1);
		return;
	}
	for (int i = 0; i < point; i++)
		d->ip[i] = i < nd ? digits[i] : '0';
	d->ip[point] = '\0';
	if (nd > point)
		memcpy(d->fp, digits + point, (size_t)(nd - point) + 1);
}

static bool dec_zero(const struct dec *d)
{
	return !d->huge && !strcmp(d->ip, "0") && !d->fp[0];
}

/* Compare magnitudes (huge is above all else). */
static int dec_cmp(const struct dec *a, const struct dec *b)
{
	size_t la = strlen(a->ip), lb = strlen(b->ip);
	int r;

	if (a->huge || b->huge)
		return a->huge - b->huge;
	if (la != lb)
		return la < lb ? -1 : 1;
	r = strcmp(a->ip, b->ip);
	if (!r)
		r = strcmp(a->fp, b->fp);
	return r < 0 ? -1 : r > 0;
}

/* Compare two signed bounds' values. */
static int nb_cmp(const struct nbound *a, const struct nbound *b)
{
	bool na = a->neg && !dec_zero(&a->d), nb = b->neg && !dec_zero(&b->d);
	int r;

	if (na != nb)
		return na ? -1 : 1;
	r = dec_cmp(&a->d, &b->d);
	return na ? -r : r;
}

/* Keep the stricter of *b and the bound v (lower: the greater). */
static int nb_tighten(struct ctx *c, struct nbound *b, json_t *v, bool excl, bool lower,
		      const char *path, const char *kw)
{
	struct nbound n = { .set = true, .excl = excl, .path = path, .kw = kw };
	int r;

	if (!json_is_number(v))
		return fail(c, path, kw, "'%s' must be a number", kw);
	to_dec(v, &n.neg, &n.d);
	/* an integer is exact (its digits compare as they are); a real is a
	   double, which more digits than these would not tell apart */
	if (json_is_real(v) && n.d.sig > BOUNDED_DIGITS && !n.d.huge)
		return fail(c, path, kw, "'%s' %.17g has more than %d significant digits: "
			    "it cannot be compared exactly", kw, json_number_value(v),
			    BOUNDED_DIGITS);
	if (!b->set) {
		*b = n;
		return 0;
	}
	r = nb_cmp(&n, b);
	if ((lower ? r > 0 : r < 0) || (r == 0 && excl))
		*b = n;
	return 0;
}

enum { F_NEVER, F_EMPTY, F_EXPR };

/* The bounds a fraction's digits are compared with. */
struct fbounds {
	const char *lo, *hi;	/* digits, or NULL: no bound on that side */
	size_t nlo, nhi;
	bool lo_excl, hi_excl;
};

/* Digits a..z at one position, and whether they keep each bound tight. */
struct dgroup {
	char a, z;
	bool tl, th;
};

/*
 * frac_digits - the digits after the point from position pos on, at most
 * rem of them (need: at least one), while equal so far to the low bound's
 * (tl) and the high bound's (th).  F_NEVER, F_EMPTY or F_EXPR (into b).
 */
static int frac_digits(const struct fbounds *f, struct sb *b, size_t pos, bool tl, bool th,
		       int rem, bool need)
{
	struct dgroup g[3];
	struct sb alts = { 0 };
	int n = 0, ng = 0;
	char ld, hd, lo = '0', hi = '9';
	bool end_ok;

	if (tl && pos >= f->nlo && !f->lo_excl)
		tl = false;	/* the low bound is met whatever follows */
	end_ok = !need && !tl && (!th || pos < f->nhi || !f->hi_excl);
	if (!tl && !th) {
		if (!rem)
			return need ? F_NEVER : F_EMPTY;
		rep(b, "[0-9]", need, rem);
		return F_EXPR;
	}
	if (!rem)
		return end_ok ? F_EMPTY : F_NEVER;
	ld = tl && pos < f->nlo ? f->lo[pos] : '0';
	hd = th ? (pos < f->nhi ? f->hi[pos] : '0') : '9';
	if (tl && th && ld == hd) {
		g[ng++] = (struct dgroup){ ld, ld, true, true };
	} else {
		if (tl) {
			g[ng++] = (struct dgroup){ ld, ld, true, false };
			lo = (char)(ld + 1);
		}
		if (th)
			hi = (char)(hd - 1);
		if (lo <= hi)
			g[ng++] = (struct dgroup){ lo, hi, false, false };
		if (th && (!tl || hd > ld))
			g[ng++] = (struct dgroup){ hd, hd, false, true };
	}
	for (int i = 0; i < ng; i++) {
		struct sb t = { 0 };
		int k = frac_digits(f, &t, pos + 1, g[i].tl, g[i].th, rem - 1, false);

		if (k != F_NEVER) {
			sb_puts(&alts, n++ ? " | " : "");
			digit_class(&alts, g[i].a, g[i].z);
			if (k == F_EXPR)
				sb_printf(&alts, " %s", sb_str(&t));
		}
		alts.oom |= t.oom;
		sb_free(&t);
	}
	if (!n) {
		sb_free(&alts);
		return end_ok ? F_EMPTY : F_NEVER;
	}
	if (n == 1 && !end_ok)
		sb_puts(b, sb_str(&alts));
	else
		sb_printf(b, "( %s )%s", sb_str(&alts), end_ok ? "?" : "");
	b->oom |= alts.oom;
	sb_free(&alts);
	return F_EXPR;
}

/*
 * frac - the optional fraction ("." digits, at most budget digits) of a
 * number whose integer part equals the bounds' where they are given.
 */
static int frac(struct sb *b, const char *lo, bool lo_excl, const char *hi, bool hi_excl,
		int budget)
{
	struct fbounds f = { lo, hi, lo ? strlen(lo) : 0, hi ? strlen(hi) : 0, lo_excl, hi_excl };
	bool absent_ok = (!lo || (!lo[0] && !lo_excl)) && (!hi || hi[0] || !hi_excl);
	struct sb t = { 0 };
	int k;

	if (!budget)
		return absent_ok ? F_EMPTY : F_NEVER;
	k = frac_digits(&f, &t, 0, lo != NULL, hi != NULL, budget, true);
	if (k == F_NEVER) {
		sb_free(&t);
		return absent_ok ? F_EMPTY : F_NEVER;
	}
	sb_printf(b, absent_ok ? "( \".\" %s )?" : "\".\" %s", sb_str(&t));
	b->oom |= t.oom;
	sb_free(&t);
	return F_EXPR;
}

/* Add one to / take one from a digit string; false when its length would change. */
static bool digits_step(char *s, int by)
{
	size_t n = strlen(s);

	for (size_t i = n; i-- > 0;) {
		if (by > 0 && s[i] < '9') {
			s[i]++;
			return true;
		}
		if (by < 0 && s[i] > '0') {
			s[i]--;
			return !(s[0] == '0' && n > 1);
		}
		s[i] = by > 0 ? '0' : '9';
	}
	return false;
}

/* One alternative of a number range: integer part (text) and its fraction. */
static int mag_alt(struct sb *b, int *n, const char *ilo, const char *ihi, int fk, struct sb *fr)
{
	if (fk == F_NEVER)
		return 0;
	sb_puts(b, (*n)++ ? " | " : "");
	digits_range(b, ilo, ihi, strlen(ilo));
	if (fk == F_EXPR)
		sb_printf(b, " %s", sb_str(fr));
	b->oom |= fr->oom;
	return 0;
}

/*
 * mag_dec - the magnitudes from lo to hi (hi NULL: no upper bound) with at
 * most BOUNDED_DIGITS digits in all, as alternatives; their count.
 */
static int mag_dec(struct sb *b, const struct dec *lo, bool lo_excl, const struct dec *hi,
		   bool hi_excl)
{
	size_t llen = strlen(lo->ip), hlen;
	int n = 0;

	if (lo->huge || llen > BOUNDED_DIGITS)
		return 0;
	if (hi && (hi->huge || strlen(hi->ip) > BOUNDED_DIGITS))
		hi = NULL;
	hlen = hi ? strlen(hi->ip) : BOUNDED_DIGITS;
	for (size_t k = llen; k <= hlen; k++) {
		char ilo[24], ihi[24], mlo[24], mhi[24];
		int fb = BOUNDED_DIGITS - (int)k;
		bool lo_edge = k == llen && (lo->fp[0] || lo_excl), hi_edge = hi && k == hlen;
		struct sb fr = { 0 };
		int fk;

		if (k == llen)
			snprintf(ilo, sizeof(ilo), "%s", lo->ip);
		else
			snprintf(ilo, sizeof(ilo), "1%0*d", (int)k - 1, 0);
		if (hi_edge) {
			snprintf(ihi, sizeof(ihi), "%s", hi->ip);
		} else {
			memset(ihi, '9', k);
			ihi[k] = '\0';
		}
		if (strcmp(ilo, ihi) > 0)
			continue;
		if (lo_edge && hi_edge && !strcmp(ilo, ihi)) {
			fk = frac(&fr, lo->fp, lo_excl, hi->fp, hi_excl, fb);
			mag_alt(b, &n, ilo, ilo, fk, &fr);
			sb_free(&fr);
			continue;
		}
		strcpy(mlo, ilo);
		strcpy(mhi, ihi);
		if (lo_edge) {
			fk = frac(&fr, lo->fp, lo_excl, NULL, false, fb);
			mag_alt(b, &n, ilo, ilo, fk, &fr);
			sb_free(&fr);
		}
		if ((!lo_edge || digits_step(mlo, 1)) && (!hi_edge || digits_step(mhi, -1)) &&
		    strcmp(mlo, mhi) <= 0) {
			fk = frac(&fr, NULL, false, NULL, false, fb);
			mag_alt(b, &n, mlo, mhi, fk, &fr);
			sb_free(&fr);
		}
		if (hi_edge) {
			fk = frac(&fr, NULL, false, hi->fp, hi_excl, fb);
			mag_alt(b, &n, ihi, ihi, fk, &fr);
			sb_free(&fr);
		}
	}
	return n;
}

/* The numbers between two bounds (either may be unset), exactly. */
static int num_range(struct ctx *c, const struct nbound *lo, const struct nbound *hi,
		     struct sb *b)
{
	static const struct dec zero = { .ip = "0" };
	bool lo_neg = lo->set && lo->neg && !dec_zero(&lo->d);
	bool hi_neg = hi->set && hi->neg && !dec_zero(&hi->d);
	int n = 0;

	if (lo->set && hi->set) {
		int r = nb_cmp(lo, hi);

		if (r > 0 || (r == 0 && (lo->excl || hi->excl)))
			return never(c, lo->path, lo->kw, "no number is between '%s' and %s/%s",
				     lo->kw, hi->path, hi->kw);
	}
	if (!lo->set || lo_neg) {	/* the negative numbers: "-" magnitude */
		struct sb m = { 0 };
		const struct dec *mlo = hi_neg ? &hi->d : &zero;
		int k = mag_dec(&m, mlo, hi_neg ? hi->excl : true, lo->set ? &lo->d : NULL,
				lo->set && lo->excl);

		if (k) {
			sb_printf(b, "\"-\" ( %s )", sb_str(&m));
			n++;
		}
		b->oom |= m.oom;
		sb_free(&m);
	}
	if (!hi->set || (!hi_neg && !(dec_zero(&hi->d) && hi->excl))) {
		struct sb m = { 0 };
		bool from_lo = lo->set && !lo_neg;
		int k = mag_dec(&m, from_lo ? &lo->d : &zero, from_lo && lo->excl,
				hi->set ? &hi->d : NULL, hi->set && hi->excl);

		if (k) {
			sb_printf(b, "%s%s", n ? " | " : "", sb_str(&m));
			n++;
		}
		b->oom |= m.oom;
		sb_free(&m);
	}
	if (!n)
		return never(c, lo->set ? lo->path : hi->path, lo->set ? lo->kw : hi->kw,
			     "no number of at most %d digits is in the range", BOUNDED_DIGITS);
	return 0;
}

/* ---- the types ---- */

/* number / integer: bounds, and multipleOf 1 (an integer) */
static int tr_number(struct ctx *c, const struct conj *cj, bool integer, struct sb *b)
{
	static const char *const kws[4] = { "minimum", "exclusiveMinimum", "maximum",
					     "exclusiveMaximum" };
	struct nbound lo = { 0 }, hi = { 0 };
	long long ilo = -INT_LIMIT, ihi = INT_LIMIT;
	bool bounded = false;

	for (int i = 0; i < cj->n; i++) {
		json_t *m = json_object_get(cj->s[i], "multipleOf");

		if (m && (!json_is_number(m) || json_number_value(m) <= 0))
			return fail(c, cj->path[i], "multipleOf", "'multipleOf' must be a number "
				    "above 0");
		if (m && json_number_value(m) != 1)
			return fail(c, cj->path[i], "multipleOf", "'multipleOf' %g is not supported "
				    "(only 1, which means an integer)", json_number_value(m));
		if (m)
			integer = true;
	}
	for (int i = 0; i < cj->n; i++) {
		for (int k = 0; k < 4; k++) {
			json_t *v = json_object_get(cj->s[i], kws[k]);
			bool lower = k < 2, excl = k & 1;

			if (!v)
				continue;
			if (json_is_boolean(v)) {	/* draft 4: it qualifies minimum */
				if (!excl)
					return fail(c, cj->path[i], kws[k], "'%s' must be a number",
						    kws[k]);
				if (json_is_true(v) && !json_object_get(cj->s[i], kws[k - 1]))
					return fail(c, cj->path[i], kws[k], "'%s' true without '%s'",
						    kws[k], kws[k - 1]);
				continue;
			}
			if (!excl) {
				json_t *e = json_object_get(cj->s[i], kws[k + 1]);

				excl = json_is_true(e);
			}
			if (nb_tighten(c, lower ? &lo : &hi, v, excl, lower, cj->path[i], kws[k]))
				return ERR;
			bounded = true;
			if (!integer)
				continue;
			if (lower) {
				long long t;

				if (!int_lower(v, excl, &t))
					return never(c, cj->path[i], kws[k], "no integer of at most %d "
						     "digits is at or above it", INT_DIGITS);
				if (t > ilo)
					ilo = t;
			} else {
				long long t;

				if (!int_upper(v, excl, &t))
					return never(c, cj->path[i], kws[k], "no integer of at most %d "
						     "digits is at or below it", INT_DIGITS);
				if (t < ihi)
					ihi = t;
			}
		}
	}
	if (integer) {
		if (!bounded) {
			int r = prim(c, PR_INTEGER);

			if (r < 0)
				return ERR;
			sb_puts(b, rname(c, r));
			return 0;
		}
		if (ilo > ihi)
			return never(c, lo.set ? lo.path : hi.path, lo.set ? lo.kw : hi.kw,
				     "no integer is in the range");
		int_range(b, ilo, ihi);
		return 0;
	}
	if (!bounded) {
		int r = prim(c, PR_NUMBER);

		if (r < 0)
			return ERR;
		sb_puts(b, rname(c, r));
		return 0;
	}
	return num_range(c, &lo, &hi, b);
}

/* format: the formats with an exact grammar. */
static int tr_format(struct ctx *c, json_t *f, const char *path, struct sb *b)
{
	static const struct { const char *name; enum prim p; } fmts[] = {
		{ "date", PR_DATE }, { "time", PR_TIME }, { "date-time", PR_DATETIME },
		{ "uuid", PR_UUID }, { "email", PR_EMAIL }, { "ipv4", PR_IPV4 },
		{ "uri", PR_URI },
	};
	const char *name = json_string_value(f);

	if (!name)
		return fail(c, path, "format", "'format' must be a string");
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		if (!strcmp(fmts[i].name, name)) {
			int r = prim(c, fmts[i].p);

			if (r < 0)
				return ERR;
			sb_printf(b, "\"\\\"\" %s \"\\\"\"", rname(c, r));
			return 0;
		}
	}
	return fail(c, path, "format", "format \"%.40s\" is not supported (supported: date, "
		    "time, date-time, uuid, email, ipv4, uri)", name);
}

/*
 * format_length - the lengths in characters of what a format's grammar
 * accepts, for the formats whose lengths are few (date 10, time 9 to 24,
 * date-time 20 to 35, uuid 36, ipv4 7 to 15); 0 for the others (email,
 * uri), whose length bounds would need the grammar itself cut.
 */
static int format_length(const char *name, long *min, long *max)
{
	static const struct { const char *name; long min, max; } lens[] = {
		{ "date", 10, 10 }, { "time", 9, 24 }, { "date-time", 20, 35 },
		{ "uuid", 36, 36 }, { "ipv4", 7, 15 },
	};

	for (size_t i = 0; name && i < sizeof(lens) / sizeof(lens[0]); i++)
		if (!strcmp(lens[i].name, name)) {
			*min = lens[i].min;
			*max = lens[i].max;
			return 1;
		}
	return 0;
}

/* string: minLength, maxLength, pattern, format */
static int tr_string(struct ctx *c, const struct conj *cj, struct sb *b)
{
	long min = 0, max = -1;
	json_t *pat, *fmt;
	int pat_at = 0, fmt_at = 0, len_at = -1, r;
	bool err;

	for (int i = 0; i < cj->n; i++) {
		json_t *v = json_object_get(cj->s[i], "minLength");
		long n;

		if (v) {
			if (count_kw(c, v, cj->path[i], "minLength", &n))
				return ERR;
			if (n > min)
				min = n;
			len_at = i;
		}
		v = json_object_get(cj->s[i], "maxLength");
		if (v) {
			if (count_kw(c, v, cj->path[i], "maxLength", &n))
				return ERR;
			if (max < 0 || n < max)
				max = n;
			len_at = i;
		}
	}
	pat = kw_one(c, cj, "pattern", &pat_at, &err);
	if (err)
		return ERR;
	fmt = kw_one(c, cj, "format", &fmt_at, &err);
	if (err)
		return ERR;
	if (pat && fmt)
		return fail(c, cj->path[fmt_at], "format", "'format' together with 'pattern' "
			    "is not supported");
	if (max >= 0 && min > max)
		return never(c, cj->path[len_at], "minLength", "'minLength' %ld is above "
			     "'maxLength' %ld", min, max);
	if (fmt && len_at >= 0) {
		long fmin, fmax;
		const char *kw = json_object_get(cj->s[len_at], "minLength") ? "minLength"
									     : "maxLength";

		if (!format_length(json_string_value(fmt), &fmin, &fmax))
			return fail(c, cj->path[len_at], kw, "'minLength' or 'maxLength' "
				    "together with format \"%.40s\" (of unbounded or varied "
				    "length) is not supported", json_string_value(fmt));
		if ((max >= 0 && max < fmin) || min > fmax)
			return never(c, cj->path[len_at], kw, "the lengths allowed (%ld to %ld) "
				     "miss format \"%s\"'s (%ld to %ld characters)", min, max,
				     json_string_value(fmt), fmin, fmax);
		if (min > fmin || (max >= 0 && max < fmax))
			return fail(c, cj->path[len_at], kw, "'minLength' %ld / 'maxLength' "
				    "%ld cut into format \"%s\"'s lengths (%ld to %ld "
				    "characters): not supported", min, max,
				    json_string_value(fmt), fmin, fmax);
		len_at = -1;	/* the format's own lengths are within the bounds */
	}
	if (pat && len_at >= 0)
		return fail(c, cj->path[len_at], json_object_get(cj->s[len_at], "minLength") ?
			    "minLength" : "maxLength", "'minLength' or 'maxLength' together "
			    "with 'pattern' is not supported");
	if (pat)
		return tr_pattern(c, pat, cj->path[pat_at], b);
	if (fmt)
		return tr_format(c, fmt, cj->path[fmt_at], b);
	r = prim(c, min == 0 && max < 0 ? PR_STRING : PR_CHAR);
	if (r < 0)
		return ERR;
	if (min == 0 && max < 0) {
		sb_puts(b, rname(c, r));
		return 0;
	}
	sb_puts(b, "\"\\\"\" ");
	if (max != 0) {
		rep(b, rname(c, r), min, max);
		sb_puts(b, " ");
	}
	sb_puts(b, "\"\\\"\"");
	return 0;
}

static bool in_list(json_t *list, json_t *x)
{
	for (size_t k = 0; k < json_array_size(list); k++)
		if (jeq(json_array_get(list, k), x))
			return true;
	return false;
}

/*
 * tr_enum - enum and const: the values every schema allows, of the types
 * allowed, as literals.  With other keywords that apply, an error.
 */
static int tr_enum(struct ctx *c, const struct conj *cj, unsigned types, struct sb *b)
{
	json_t *vals = NULL;
	int n = 0, first = -1;

	for (int i = 0; i < cj->n; i++) {
		const char *k;
		json_t *v;

		json_object_foreach(cj->s[i], k, v) {
			const struct kwinfo *ki = kw_info(k);

			if (ki && ki->kind == K_TYPED && (ki->type & types))
				return fail(c, cj->path[i], k, "'%s' together with 'enum' or 'const' "
					    "is not supported", k);
		}
	}
	for (int i = 0; i < cj->n; i++) {
		for (int e = 0; e < 2; e++) {
			json_t *v = json_object_get(cj->s[i], e ? "enum" : "const"), *keep;

			if (!v)
				continue;
			if (e && !json_is_array(v)) {
				json_decref(vals);
				return fail(c, cj->path[i], "enum", "'enum' must be an array");
			}
			if (first < 0)
				first = i;
			keep = json_array();
			if (!keep) {
				json_decref(vals);
				return oom(c);
			}
			for (size_t j = 0; j < (e ? json_array_size(v) : 1); j++) {
				json_t *x = e ? json_array_get(v, j) : v;

				if (!(value_bits(x) & types) || (vals && !in_list(vals, x)) ||
				    in_list(keep, x))
					continue;
				if (json_array_append(keep, x)) {
					json_decref(keep);
					json_decref(vals);
					return oom(c);
				}
			}
			json_decref(vals);
			vals = keep;
		}
	}
	for (size_t j = 0; j < json_array_size(vals); j++) {
		sb_puts(b, n++ ? " | " : "");
		json_lit(b, json_array_get(vals, j));
	}
	json_decref(vals);
	if (!n)
		return never(c, cj->path[first], json_object_get(cj->s[first], "enum") ? "enum" :
			     "const", "no value of 'enum' or 'const' is allowed by the rest of "
			     "the schema");
	return 0;
}

/* ---- objects ---- */

#define MAX_KEY_BYTES 1024	/* a property name's length, for the key trie */

struct prop {
	const char *name;	/* borrowed from the document */
	struct conj cj;		/* the schemas its value must meet */
	bool required;
	const char *req_path;	/* the schema whose "required" names it */
	int rule;		/* its value's rule, or NEVER */
};

struct props {
	struct prop *p;
	int n, cap;
};

static struct prop *prop_get(struct ctx *c, struct props *ps, const char *name, bool add)
{
	for (int i = 0; i < ps->n; i++)
		if (!strcmp(ps->p[i].name, name))
			return &ps->p[i];
	if (!add)
		return NULL;
	if (ps->n == ps->cap) {
		int cap = ps->cap ? ps->cap * 2 : 16;
		struct prop *q = realloc(ps->p, (size_t)cap * sizeof(*q));

		if (!q) {
			oom(c);
			return NULL;
		}
		ps->p = q;
		ps->cap = cap;
	}
	memset(&ps->p[ps->n], 0, sizeof(ps->p[0]));
	ps->p[ps->n].name = name;
	ps->p[ps->n].rule = NEVER;
	return &ps->p[ps->n++];
}

static void props_free(struct props *ps)
{
	for (int i = 0; i < ps->n; i++)
		conj_free(&ps->p[i].cj);
	free(ps->p);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * key_trie - a key (its content and closing quote) that differs from every
 * name in names[0..n) (sorted, sharing their first off bytes): at each
 * point a canonical character no name continues with, then anything, or
 * one of the names' next characters, and on.
 */
static int key_trie(struct ctx *c, const char *const *names, int n, size_t off, struct sb *b)
{
	struct cset next = { 0 };
	int alts = 0;

	sb_puts(b, "( ");
	if (strlen(names[0]) != off) {
		sb_puts(b, "\"\\\"\"");
		alts++;
	}
	for (int i = 0; i < n;) {
		const unsigned char *u = (const unsigned char *)names[i] + off;
		size_t l = strlen((const char *)u), cl = pg_utf8_len(u, l);
		uint32_t cp = cl ? pg_utf8_code(u, cl) : 0;
		int j = i;

		if (!l) {
			i++;
			continue;
		}
		if (!cl)
			return fail(c, "#", NULL, "a property name is not valid UTF-8");
		while (j < n && !strncmp(names[j] + off, (const char *)u, cl))
			j++;
		cset_add(&next, cp, cp);
		sb_puts(b, alts++ ? " | " : "");
		{
			struct sb t = { 0 };

			json_char(&t, cp);
			lit(b, sb_str(&t), t.len);
			b->oom |= t.oom;
			sb_free(&t);
		}
		sb_puts(b, " ");
		if (key_trie(c, names + i, j - i, off + cl, b))
			return ERR;
		i = j;
	}
	sb_puts(b, alts++ ? " | " : "");
	if (!next.n) {
		sb_puts(b, "char+ \"\\\"\" )");
		return 0;
	}
	cset_norm(&next);
	cset_invert(&next);
	if (next.n < 0)
		return fail(c, "#", NULL, "too many property names begin alike");
	{
		struct sb u = { 0 };
		char h[64];
		int r;

		unit_expr(&u, &next);
		snprintf(h, sizeof(h), "key-char");
		r = rule_make(c, h, &u);
		sb_free(&u);
		if (r < 0)
			return ERR;
		sb_printf(b, "%s char* \"\\\"\" )", rname(c, r));
	}
	return 0;
}

/* The rule of a key that is none of the properties' names. */
static int other_key(struct ctx *c, const struct props *ps, const char *hint)
{
	const char **names;
	struct sb b = { 0 };
	char h[96];
	int r;

	if (!ps->n)
		return prim(c, PR_STRING);
	if (prim(c, PR_CHAR) < 0)
		return ERR;
	names = malloc((size_t)ps->n * sizeof(*names));
	if (!names)
		return oom(c);
	for (int i = 0; i < ps->n; i++) {
		names[i] = ps->p[i].name;
		if (strlen(names[i]) > MAX_KEY_BYTES) {
			free(names);
			return fail(c, ps->p[i].cj.n ? ps->p[i].cj.path[0] : "#", NULL,
				    "a property name longer than %d bytes, with other properties "
				    "allowed, is not supported", MAX_KEY_BYTES);
		}
	}
	qsort(names, (size_t)ps->n, sizeof(*names), cmp_str);
	sb_puts(&b, "\"\\\"\" ");
	r = key_trie(c, names, ps->n, 0, &b);
	free(names);
	hint_join(h, sizeof(h), hint, "other-key");
	if (!r)
		r = rule_make(c, h, &b);
	sb_free(&b);
	return r;
}

/* One member "name": value. */
static void member(struct ctx *c, struct sb *b, const char *name, int value)
{
	struct sb t = { 0 };

	sb_puts(&t, "\"");
	json_str(&t, name, strlen(name));
	sb_puts(&t, "\"");
	lit(b, sb_str(&t), t.len);
	sb_printf(b, " ws \":\" ws %s", rname(c, value));
	b->oom |= t.oom;
	sb_free(&t);
}

/*
 * The members after a first one, when none is required: each optional in
 * order, then the other properties.  A rule per position keeps it linear.
 */
static int object_tail(struct ctx *c, const struct props *ps, const int *emit, int n_emit,
		       int from, int extra, const char *hint, struct sb *b)
{
	struct sb t = { 0 };
	char h[96];
	int r;

	if (from == n_emit) {
		if (extra >= 0)
			sb_printf(b, "( ws \",\" ws %s )*", rname(c, extra));
		return 0;
	}
	sb_puts(&t, "( ws \",\" ws ");
	member(c, &t, ps->p[emit[from]].name, ps->p[emit[from]].rule);
	sb_puts(&t, " )?");
	if (from + 1 < n_emit || extra >= 0) {
		sb_puts(&t, " ");
		if (object_tail(c, ps, emit, n_emit, from + 1, extra, hint, &t)) {
			sb_free(&t);
			return ERR;
		}
	}
	if (n_emit - from <= 2) {
		sb_puts(b, sb_str(&t));
		b->oom |= t.oom;
		sb_free(&t);
		return 0;
	}
	hint_join(h, sizeof(h), hint, "tail");
	r = rule_make(c, h, &t);
	sb_free(&t);
	if (r < 0)
		return ERR;
	sb_puts(b, rname(c, r));
	return 0;
}

/* The body of an object with its members chosen (emit: indices in order). */
static int object_body(struct ctx *c, const struct props *ps, const int *emit, int n_emit,
		       int extra, const char *hint, struct sb *b)
{
	int first_req = -1;

	for (int i = 0; i < n_emit && first_req < 0; i++)
		if (ps->p[emit[i]].required)
			first_req = i;
	sb_puts(b, "\"{\" ws ");
	if (first_req >= 0) {
		for (int i = 0; i < n_emit; i++) {
			const struct prop *p = &ps->p[emit[i]];

			if (i < first_req) {
				sb_puts(b, "( ");
				member(c, b, p->name, p->rule);
				sb_puts(b, " ws \",\" ws )? ");
			} else if (i == first_req) {
				member(c, b, p->name, p->rule);
				sb_puts(b, " ");
			} else {
				sb_puts(b, p->required ? "ws \",\" ws " : "( ws \",\" ws ");
				member(c, b, p->name, p->rule);
				sb_puts(b, p->required ? " " : " )? ");
			}
		}
		if (extra >= 0)
			sb_printf(b, "( ws \",\" ws %s )* ", rname(c, extra));
		sb_puts(b, "ws \"}\"");
		return 0;
	}
	if (!n_emit && extra < 0) {
		sb_puts(b, "\"}\"");
		return 0;
	}
	sb_puts(b, "( ( ");
	for (int i = 0; i < n_emit; i++) {
		if (i)
			sb_puts(b, " | ");
		member(c, b, ps->p[emit[i]].name, ps->p[emit[i]].rule);
		if (i + 1 < n_emit || extra >= 0) {
			sb_puts(b, " ");
			if (object_tail(c, ps, emit, n_emit, i + 1, extra, hint, b))
				return ERR;
		}
	}
	if (extra >= 0)
		sb_printf(b, "%s%s ( ws \",\" ws %s )*", n_emit ? " | " : "", rname(c, extra),
			  rname(c, extra));
	sb_puts(b, " ) ws )? \"}\"");
	return 0;
}

/* Gather properties, additionalProperties and the keywords refused. */
static int object_gather(struct ctx *c, const struct conj *cj, struct props *ps,
			 struct conj *extra, long *minp, long *maxp)
{
	static const char *const empty_ok[] = { "patternProperties", "dependentRequired",
						"dependentSchemas", "dependencies" };

	for (int i = 0; i < cj->n; i++) {
		json_t *s = cj->s[i], *pr = json_object_get(s, "properties"), *v;
		const char *k;

		for (size_t e = 0; e < sizeof(empty_ok) / sizeof(empty_ok[0]); e++) {
			v = json_object_get(s, empty_ok[e]);
			if (v && (!json_is_object(v) || json_object_size(v)))
				return fail(c, cj->path[i], empty_ok[e], "'%s' is not supported",
					    empty_ok[e]);
		}
		v = json_object_get(s, "propertyNames");
		if (v && !json_is_true(v) && !(json_is_object(v) && only_annotations(v, NULL)))
			return fail(c, cj->path[i], "propertyNames", "'propertyNames' is not "
				    "supported");
		if (pr && !json_is_object(pr))
			return fail(c, cj->path[i], "properties", "'properties' must be an object");
		json_object_foreach(pr, k, v) {
			struct prop *p = prop_get(c, ps, k, true);
			char *pp = ptr_child(c, cj->path[i], "properties");

			if (!p || !pp || conj_add(c, &p->cj, v, ptr_child(c, pp, k))) {
				free(pp);
				return ERR;
			}
			free(pp);
		}
		v = json_object_get(s, "additionalProperties");
		if (v && conj_add(c, extra, v, ptr_child(c, cj->path[i], "additionalProperties")))
			return ERR;
		for (int m = 0; m < 2; m++) {
			const char *kw = m ? "maxProperties" : "minProperties";
			long n;

			v = json_object_get(s, kw);
			if (v && count_kw(c, v, cj->path[i], kw, &n))
				return ERR;
			if (v && !m && n > *minp)
				*minp = n;
			if (v && m && (*maxp < 0 || n < *maxp))
				*maxp = n;
		}
	}
	return 0;
}

/* Each schema's additionalProperties applies to the names it does not declare. */
static int object_cross(struct ctx *c, const struct conj *cj, struct props *ps)
{
	for (int i = 0; i < cj->n; i++) {
		json_t *ap = json_object_get(cj->s[i], "additionalProperties");
		json_t *pr = json_object_get(cj->s[i], "properties");

		if (!ap)
			continue;
		for (int j = 0; j < ps->n; j++) {
			if (pr && json_object_get(pr, ps->p[j].name))
				continue;
			if (conj_add(c, &ps->p[j].cj, ap, ptr_child(c, cj->path[i],
								     "additionalProperties")))
				return ERR;
		}
	}
	return 0;
}

/* required: its names, undeclared ones as properties of the extra schema. */
static int object_required(struct ctx *c, const struct conj *cj, struct props *ps,
			   const struct conj *extra)
{
	for (int i = 0; i < cj->n; i++) {
		json_t *req = json_object_get(cj->s[i], "required");

		if (!req)
			continue;
		if (!json_is_array(req))
			return fail(c, cj->path[i], "required", "'required' must be an array of "
				    "strings");
		for (size_t j = 0; j < json_array_size(req); j++) {
			const char *name = json_string_value(json_array_get(req, j));
			struct prop *p;

			if (!name)
				return fail(c, cj->path[i], "required", "'required' must be an "
					    "array of strings");
			p = prop_get(c, ps, name, false);
			if (!p) {
				p = prop_get(c, ps, name, true);
				if (!p || conj_copy(c, &p->cj, extra))
					return ERR;
			}
			p->required = true;
			p->req_path = cj->path[i];
		}
	}
	return 0;
}

/* object: properties (in order), required, additionalProperties */
static int tr_object(struct ctx *c, const struct conj *cj, const char *hint, struct sb *b)
{
	struct props ps = { 0 };
	struct conj extra = { 0 };
	long minp = 0, maxp = -1;
	int *emit = NULL, n_emit = 0, n_req = 0, xval = NEVER, xmember = -1, rc = ERR;
	int lead = c->lead;
	char h[96];

	c->lead = -1;	/* what follows is after "{" */
	if (object_gather(c, cj, &ps, &extra, &minp, &maxp) || object_cross(c, cj, &ps) ||
	    object_required(c, cj, &ps, &extra))
		goto out;
	emit = malloc(((size_t)ps.n + 1) * sizeof(*emit));
	if (!emit) {
		oom(c);
		goto out;
	}
	for (int i = 0; i < ps.n; i++) {
		struct prop *p = &ps.p[i];

		hint_join(h, sizeof(h), hint, p->name);
		p->rule = p->cj.never ? NEVER : tr_conj(c, &p->cj, h);
		if (p->rule == ERR)
			goto out;
		if (p->rule == NEVER && p->required) {
			fail(c, p->req_path, "required", "property \"%.60s\" is required, but no "
			     "value is valid for it (%s)", p->name, c->never);
			goto out;
		}
		if (p->rule != NEVER) {
			emit[n_emit++] = i;
			n_req += p->required;
		}
	}
	if (!extra.never) {
		hint_join(h, sizeof(h), hint, "other");
		xval = extra.n ? tr_conj(c, &extra, h) : prim(c, PR_VALUE);
		if (xval == ERR)
			goto out;
	}
	if (minp > n_req) {
		fail(c, cj->path[0], "minProperties", "'minProperties' %ld is not supported "
		     "(only up to the number of required properties, %d)", minp, n_req);
		goto out;
	}
	if (maxp >= 0 && (xval != NEVER || n_emit > maxp)) {
		fail(c, cj->path[0], "maxProperties", "'maxProperties' %ld is not supported "
		     "(only where no more properties than that are possible)", maxp);
		goto out;
	}
	if (xval != NEVER) {
		struct sb m = { 0 };
		int key = other_key(c, &ps, hint);

		if (key < 0)
			goto out;
		sb_printf(&m, "%s ws \":\" ws %s", rname(c, key), rname(c, xval));
		hint_join(h, sizeof(h), hint, "other-member");
		xmember = rule_make(c, h, &m);
		sb_free(&m);
		if (xmember < 0)
			goto out;
	}
	if (!ps.n && xval != NEVER && !extra.n) {
		int r = prim(c, PR_OBJECT);

		if (r >= 0)
			sb_puts(b, rname(c, r));
		rc = r < 0 ? ERR : 0;
		goto out;
	}
	if (prim(c, PR_WS) < 0)
		goto out;
	rc = object_body(c, &ps, emit, n_emit, xmember, hint, b);
out:
	c->lead = lead;
	free(emit);
	props_free(&ps);
	conj_free(&extra);
	return rc;
}

/* ---- arrays ---- */

/* Gather minItems, maxItems, the positional schemas' count; refuse the rest. */
static int array_gather(struct ctx *c, const struct conj *cj, long *min, long *max, int *npre)
{
	for (int i = 0; i < cj->n; i++) {
		json_t *s = cj->s[i], *items = json_object_get(s, "items");
		json_t *pre = json_object_get(s, "prefixItems"), *v;

		if (pre && !json_is_array(pre))
			return fail(c, cj->path[i], "prefixItems", "'prefixItems' must be an array");
		if (items && !json_is_object(items) && !json_is_boolean(items) &&
		    !json_is_array(items))
			return fail(c, cj->path[i], "items", "'items' must be a schema");
		if (pre && json_is_array(items))
			return fail(c, cj->path[i], "items", "'items' as an array together with "
				    "'prefixItems' is not supported");
		if (!pre && json_is_array(items))
			pre = items;
		if (pre && (int)json_array_size(pre) > *npre) {
			if (json_array_size(pre) > MAX_REPEAT)
				return fail(c, cj->path[i], "prefixItems", "too many positions");
			*npre = (int)json_array_size(pre);
		}
		v = json_object_get(s, "uniqueItems");
		if (v && !json_is_boolean(v))
			return fail(c, cj->path[i], "uniqueItems", "'uniqueItems' must be a boolean");
		if (json_is_true(v))
			return fail(c, cj->path[i], "uniqueItems", "'uniqueItems' true is not "
				    "supported");
		for (int m = 0; m < 2; m++) {
			const char *kw = m ? "maxItems" : "minItems";
			long n;

			v = json_object_get(s, kw);
			if (v && count_kw(c, v, cj->path[i], kw, &n))
				return ERR;
			if (v && !m && n > *min)
				*min = n;
			if (v && m && (*max < 0 || n < *max))
				*max = n;
		}
	}
	return 0;
}

/*
 * The schemas of position j (j < npre) or, j < 0, of the positions after
 * all prefixes: each schema's prefixItems[j] (or items[j]) where it has
 * one, else its items (or additionalItems after an items array).
 */
static int array_position(struct ctx *c, const struct conj *cj, int j, struct conj *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < cj->n; i++) {
		json_t *s = cj->s[i], *items = json_object_get(s, "items");
		json_t *pre = json_object_get(s, "prefixItems"), *rest = items;
		const char *pre_kw = "prefixItems", *rest_kw = "items";

		if (!pre && json_is_array(items)) {
			pre = items;
			pre_kw = "items";
			rest = json_object_get(s, "additionalItems");
			rest_kw = "additionalItems";
		}
		if (j >= 0 && pre && (size_t)j < json_array_size(pre)) {
			if (conj_add(c, out, json_array_get(pre, (size_t)j),
				     ptr_index(c, cj->path[i], pre_kw, (size_t)j)))
				return ERR;
		} else if (rest && conj_add(c, out, rest, ptr_child(c, cj->path[i], rest_kw))) {
			return ERR;
		}
	}
	return 0;
}

/* The separators and elements after the first, from position j on. */
static void array_after(struct ctx *c, struct sb *b, const int *pos, int npre, int tail,
			long min, long max)
{
	struct sb t = { 0 };
	long end = max < 0 ? -1 : max;

	/* the positions after all prefixes: ( ws "," ws item ){a,b} */
	if (tail >= 0 && npre >= 1 && (end < 0 || end > npre)) {
		struct sb term = { 0 };

		sb_printf(&term, "( ws \",\" ws %s )", rname(c, tail));
		rep(&t, sb_str(&term), min > npre ? min - npre : 0, end < 0 ? -1 : end - npre);
		t.oom |= term.oom;
		sb_free(&term);
	}
	for (int j = npre - 1; j >= 1; j--) {
		struct sb u = { 0 };

		if (end >= 0 && j >= end)
			continue;
		sb_printf(&u, "ws \",\" ws %s%s%s", rname(c, pos[j]), t.len ? " " : "", sb_str(&t));
		sb_free(&t);
		if (j < min)
			t = u;
		else {
			memset(&t, 0, sizeof(t));
			sb_printf(&t, "( %s )?", sb_str(&u));
			t.oom |= u.oom;
			sb_free(&u);
		}
	}
	if (t.len)
		sb_printf(b, " %s", sb_str(&t));
	b->oom |= t.oom;
	sb_free(&t);
}

/* array: items, prefixItems (or items as an array), minItems, maxItems */
static int tr_array(struct ctx *c, const struct conj *cj, const char *hint, struct sb *b)
{
	long min = 0, max = -1;
	int npre = 0, tail = NEVER, *pos = NULL, rc = ERR, lead = c->lead;
	struct conj t = { 0 };
	char h[96];

	c->lead = -1;	/* what follows is after "[" */
	if (array_gather(c, cj, &min, &max, &npre))
		goto out;
	pos = malloc(((size_t)npre + 1) * sizeof(*pos));
	if (!pos) {
		oom(c);
		goto out;
	}
	for (int j = 0; j < npre && (max < 0 || j < max); j++) {
		char idx[24];

		snprintf(idx, sizeof(idx), "%d", j);
		hint_join(h, sizeof(h), hint, idx);
		if (array_position(c, cj, j, &t))
			goto out;
		pos[j] = t.never ? NEVER : tr_conj(c, &t, h);
		conj_free(&t);
		if (pos[j] == ERR)
			goto out;
		if (pos[j] == NEVER) {
			max = j;
			break;
		}
	}
	if (max < 0 || max > npre) {
		hint_join(h, sizeof(h), hint, "item");
		if (array_position(c, cj, -1, &t))
			goto out;
		tail = t.never ? NEVER : t.n ? tr_conj(c, &t, h) : prim(c, PR_VALUE);
		conj_free(&t);
		if (tail == ERR)
			goto out;
		if (tail == NEVER && (max < 0 || max > npre))
			max = npre;
	}
	if (max >= 0 && min > max) {
		rc = never(c, cj->path[0], "minItems", "'minItems' %ld, but at most %ld items "
			   "can be valid", min, max);
		goto out;
	}
	if (!npre && tail >= 0 && !min && max < 0 &&
	    rule_final(c, tail) == smap_get(&c->names, "value", -1)) {
		sb_puts(b, rname(c, prim(c, PR_ARRAY)));
		rc = 0;
		goto out;
	}
	if (prim(c, PR_WS) < 0)
		goto out;
	if (max == 0) {
		sb_puts(b, "\"[\" ws \"]\"");
		rc = 0;
		goto out;
	}
	sb_puts(b, min ? "\"[\" ws " : "\"[\" ws ( ");
	sb_puts(b, rname(c, npre ? pos[0] : tail));
	if (npre)
		array_after(c, b, pos, npre, tail, min, max);
	else
		array_after(c, b, pos, 1, tail, min, max);
	sb_puts(b, min ? " ws \"]\"" : " ws )? \"]\"");
	rc = 0;
out:
	c->lead = lead;
	free(pos);
	return rc;
}

/* ---- one place: its keywords, its types ---- */

/*
 * check_keywords - every keyword known; the types the schemas allow
 * (*types), whether enum or const is given, the types their other
 * keywords are about (*kw_types).  When the types have nothing in
 * common, clash[0] is the first schema with a "type" and clash[1] the one
 * that left none.
 */
static int check_keywords(struct ctx *c, const struct conj *cj, unsigned *types,
			  bool *typed, bool *has_enum, unsigned *kw_types, int clash[2])
{
	*types = T_ALL;
	*typed = *has_enum = false;
	*kw_types = 0;
	clash[0] = clash[1] = 0;
	for (int i = 0; i < cj->n; i++) {
		const char *k;
		json_t *v;

		json_object_foreach(cj->s[i], k, v) {
			const struct kwinfo *ki = kw_info(k);
			int bits;

			if (!ki)
				return fail(c, cj->path[i], k, "unknown keyword '%.60s': not "
					    "supported", k);
			if (!strcmp(k, "nullable") && !json_is_false(v))
				return fail(c, cj->path[i], k, "'nullable' is OpenAPI's, not JSON "
					    "Schema's: use \"type\": [..., \"null\"]");
			if (ki->kind == K_TYPED || ki->kind == K_UNSUP)
				*kw_types |= ki->type;
			if (strcmp(k, "type")) {
				*has_enum |= !strcmp(k, "enum") || !strcmp(k, "const");
				continue;
			}
			bits = type_bits(c, v, cj->path[i]);
			if (bits < 0)
				return ERR;
			if (!*typed)
				clash[0] = i;
			if (*types && !(*types & (unsigned)bits))
				clash[1] = i;
			*types &= (unsigned)bits;
			*typed = true;
		}
	}
	return 0;
}

/* Keywords refused wherever their type is allowed. */
static int check_unsupported(struct ctx *c, const struct conj *cj, unsigned types)
{
	for (int i = 0; i < cj->n; i++) {
		const char *k;
		json_t *v;

		json_object_foreach(cj->s[i], k, v) {
			const struct kwinfo *ki = kw_info(k);

			if (ki->kind == K_UNSUP && (ki->type & types))
				return fail(c, cj->path[i], k, "'%s' is not supported", k);
		}
	}
	return 0;
}

/* The branches of the types allowed, each with the keywords of its type. */
static int tr_value(struct ctx *c, struct conj *cj, const char *hint, struct sb *b)
{
	unsigned types, kw_types;
	bool typed, has_enum;
	int n = 0, clash[2];

	if (check_keywords(c, cj, &types, &typed, &has_enum, &kw_types, clash))
		return ERR;
	if (typed && !types)
		return never(c, cj->path[clash[0]], "type", "no type is both this one and that "
			     "of %.100s/type", cj->path[clash[1]]);
	if (!typed && !has_enum && kw_types)
		types = kw_types & T_ALL;	/* no type: what the keywords are about */
	if (check_unsupported(c, cj, types))
		return ERR;
	if (has_enum)
		return tr_enum(c, cj, types, b);
	if (types == T_ALL && !(kw_types & T_ALL)) {
		int r = prim(c, PR_VALUE);

		if (r >= 0)
			sb_puts(b, rname(c, r));
		return r < 0 ? ERR : 0;
	}
	for (unsigned t = 1; t <= 64; t <<= 1) {
		struct sb one = { 0 };
		int r = 0;

		if (!(types & t) || (t == T_INT && (types & 64)))
			continue;
		switch (t) {
		case T_NULL: sb_puts(&one, "null"); r = prim(c, PR_NULL); break;
		case T_BOOL: sb_puts(&one, "boolean"); r = prim(c, PR_BOOLEAN); break;
		case T_OBJ: r = tr_object(c, cj, hint, &one); break;
		case T_ARR: r = tr_array(c, cj, hint, &one); break;
		case T_STR: r = tr_string(c, cj, &one); break;
		case T_INT: r = tr_number(c, cj, true, &one); break;
		default: r = tr_number(c, cj, false, &one); break;
		}
		if (r == ERR || one.oom) {
			sb_free(&one);
			return r == ERR ? ERR : oom(c);
		}
		if (r != NEVER) {
			sb_printf(b, "%s%s", n++ ? " | " : "", sb_str(&one));
		}
		sb_free(&one);
	}
	return n ? 0 : NEVER;
}

/* $ref and allOf: their schemas join the conjunction, after the one naming them. */
static int flatten(struct ctx *c, struct conj *cj)
{
	for (int i = 0; i < cj->n && !cj->never; i++) {
		json_t *s = cj->s[i], *ref = json_object_get(s, "$ref");
		json_t *all = json_object_get(s, "allOf");
		int at = i + 1;

		if (ref && !(cj->done[i] & D_REF)) {
			json_t *t;
			char *tp;
			int before = cj->n;

			cj->done[i] |= D_REF;
			if (ref_target(c, ref, cj->path[i], &t, &tp))
				return ERR;
			for (int k = i; k >= 0; k = cj->up[k]) {
				if (cj->s[k] != t)
					continue;
				fail(c, cj->path[i], "$ref", "left recursion: '$ref' \"%.80s\" names "
				     "a schema that already applies here (%s), before any input "
				     "is consumed: it would refer to itself forever", tp,
				     cj->path[k]);
				free(tp);
				return ERR;
			}
			if (conj_insert(c, cj, at, t, tp, i))
				return ERR;
			at += cj->n > before;
		}
		if (all && !(cj->done[i] & D_ALLOF)) {
			cj->done[i] |= D_ALLOF;
			if (!json_is_array(all) || !json_array_size(all))
				return fail(c, cj->path[i], "allOf", "'allOf' must be a non-empty "
					    "array of schemas");
			for (size_t j = 0; j < json_array_size(all); j++) {
				int before = cj->n;

				if (conj_insert(c, cj, at, json_array_get(all, j),
						ptr_index(c, cj->path[i], "allOf", j), i))
					return ERR;
				at += cj->n > before;
			}
		}
	}
	return 0;
}

/* ---- oneOf: accepted where its branches cannot both match ---- */

/* What a branch may match, over-approximated: its types, its values. */
struct shape {
	unsigned types;		/* from "type" only: all when absent */
	json_t *vals;		/* enum/const values (an array, owned), or NULL */
	struct conj cj;		/* the branch, flattened */
};

static int shape_of(struct ctx *c, json_t *s, char *path, struct shape *sh)
{
	memset(sh, 0, sizeof(*sh));
	sh->types = T_ALL;
	if (conj_add(c, &sh->cj, s, path) || flatten(c, &sh->cj))
		return ERR;
	for (int i = 0; i < sh->cj.n; i++) {
		json_t *o = sh->cj.s[i], *t = json_object_get(o, "type");

		if (t) {
			int bits = type_bits(c, t, sh->cj.path[i]);

			if (bits < 0)
				return ERR;
			sh->types &= (unsigned)bits;
		}
		for (int e = 0; e < 2; e++) {
			json_t *v = json_object_get(o, e ? "enum" : "const"), *keep;

			if (!v || (e && !json_is_array(v)))
				continue;
			keep = json_array();
			if (!keep)
				return oom(c);
			for (size_t j = 0; j < (e ? json_array_size(v) : 1); j++) {
				json_t *x = e ? json_array_get(v, j) : v;

				if ((!sh->vals || in_list(sh->vals, x)) && json_array_append(keep, x)) {
					json_decref(keep);
					return oom(c);
				}
			}
			json_decref(sh->vals);
			sh->vals = keep;
		}
	}
	if (sh->vals) {	/* the values' own types */
		unsigned vt = 0;

		for (size_t j = 0; j < json_array_size(sh->vals); j++)
			vt |= value_bits(json_array_get(sh->vals, j));
		sh->types &= vt | (vt & 64 ? T_INT : 0);
	}
	return 0;
}

static void shape_free(struct shape *sh)
{
	json_decref(sh->vals);
	conj_free(&sh->cj);
}

/* A required property's enum/const values in a branch, or NULL. */
static json_t *shape_tag(const struct shape *sh, const char *name, bool *required)
{
	json_t *vals = NULL;

	*required = false;
	for (int i = 0; i < sh->cj.n; i++) {
		json_t *req = json_object_get(sh->cj.s[i], "required");
		json_t *p = json_object_get(json_object_get(sh->cj.s[i], "properties"), name);

		for (size_t j = 0; j < json_array_size(req); j++) {
			const char *r = json_string_value(json_array_get(req, j));

			if (r && !strcmp(r, name))
				*required = true;
		}
		if (!vals && json_is_object(p)) {
			json_t *k = json_object_get(p, "const"), *e = json_object_get(p, "enum");

			if (k)
				vals = json_pack("[O]", k);
			else if (json_is_array(e))
				vals = json_incref(e);
		}
	}
	return vals;
}

static bool lists_disjoint(json_t *a, json_t *b)
{
	for (size_t i = 0; i < json_array_size(a); i++)
		if (in_list(b, json_array_get(a, i)))
			return false;
	return true;
}

/* Whether no object can match both branches: a required property tells them apart. */
static bool tagged_apart(const struct shape *a, const struct shape *b)
{
	if ((a->types & ~T_OBJ) || (b->types & ~T_OBJ))
		return false;
	for (int i = 0; i < a->cj.n; i++) {
		json_t *req = json_object_get(a->cj.s[i], "required");

		for (size_t j = 0; j < json_array_size(req); j++) {
			const char *name = json_string_value(json_array_get(req, j));
			bool ra, rb;
			json_t *va, *vb;
			bool apart;

			if (!name)
				continue;
			va = shape_tag(a, name, &ra);
			vb = shape_tag(b, name, &rb);
			apart = ra && rb && va && vb && lists_disjoint(va, vb);
			json_decref(va);
			json_decref(vb);
			if (apart)
				return true;
		}
	}
	return false;
}

static bool shapes_apart(const struct shape *a, const struct shape *b)
{
	if (!(a->types & b->types))
		return true;
	if (a->vals && b->vals && lists_disjoint(a->vals, b->vals))
		return true;
	if (a->vals && !b->vals) {
		for (size_t i = 0; i < json_array_size(a->vals); i++)
			if (value_bits(json_array_get(a->vals, i)) & b->types)
				return false;
		return true;
	}
	if (b->vals && !a->vals)
		return shapes_apart(b, a);
	return tagged_apart(a, b);
}

/* oneOf (at path): ERR unless its branches are pairwise exclusive. */
static int oneof_exclusive(struct ctx *c, json_t *alts, const char *path)
{
	size_t n = json_array_size(alts);
	struct shape *sh = calloc(n, sizeof(*sh));
	int rc = 0;

	if (!sh)
		return oom(c);
	for (size_t i = 0; i < n && !rc; i++)
		rc = shape_of(c, json_array_get(alts, i), ptr_index(c, path, "oneOf", i), &sh[i]);
	for (size_t i = 0; i < n && !rc; i++) {
		for (size_t j = i + 1; j < n && !rc; j++) {
			if (sh[i].cj.never || sh[j].cj.never || shapes_apart(&sh[i], &sh[j]))
				continue;
			rc = fail(c, path, "oneOf", "'oneOf' branches %zu and %zu may both match "
				  "(they are not told apart by type, const/enum, or a required "
				  "property's const/enum), and exactly one must: use anyOf if either "
				  "may", i, j);
		}
	}
	for (size_t i = 0; i < n; i++)
		shape_free(&sh[i]);
	free(sh);
	return rc;
}

/* ---- a conjunction's rule ---- */

/* anyOf / oneOf of the first schema that has one: one rule per branch. */
static int distribute(struct ctx *c, struct conj *cj, int i, unsigned d, const char *hint,
		      struct sb *b)
{
	const char *kw = d == D_ANYOF ? "anyOf" : "oneOf";
	json_t *alts = json_object_get(cj->s[i], kw);
	char reason[sizeof(c->never)] = "";
	int n = 0;

	if (!json_is_array(alts) || !json_array_size(alts))
		return fail(c, cj->path[i], kw, "'%s' must be a non-empty array of schemas", kw);
	if (d == D_ONEOF && oneof_exclusive(c, alts, cj->path[i]))
		return ERR;
	for (size_t j = 0; j < json_array_size(alts); j++) {
		struct conj nc;
		char h[96], idx[24];
		int r;

		if (conj_copy(c, &nc, cj))
			return ERR;
		nc.done[i] |= d;
		if (conj_insert(c, &nc, nc.n, json_array_get(alts, j),
				ptr_index(c, cj->path[i], kw, j), i)) {
			conj_free(&nc);
			return ERR;
		}
		snprintf(idx, sizeof(idx), "%zu", j);
		hint_join(h, sizeof(h), hint, idx);
		r = nc.never ? NEVER : tr_conj(c, &nc, h);
		conj_free(&nc);
		if (r == ERR)
			return ERR;
		if (r == NEVER) {
			if (!reason[0])
				memcpy(reason, c->never, sizeof(reason));
			continue;
		}
		sb_printf(b, "%s%s", n++ ? " | " : "", rname(c, r));
	}
	if (!n) {
		memcpy(c->never, reason, sizeof(reason));
		return NEVER;
	}
	return 0;
}

static int tr_body(struct ctx *c, struct conj *cj, const char *hint, struct sb *b)
{
	if (flatten(c, cj))
		return ERR;
	if (cj->never)
		return NEVER;
	for (int i = 0; i < cj->n; i++) {
		if (json_object_get(cj->s[i], "anyOf") && !(cj->done[i] & D_ANYOF))
			return distribute(c, cj, i, D_ANYOF, hint, b);
		if (json_object_get(cj->s[i], "oneOf") && !(cj->done[i] & D_ONEOF))
			return distribute(c, cj, i, D_ONEOF, hint, b);
	}
	return tr_value(c, cj, hint, b);
}

/* The memo key of a conjunction: its schemas' pointers and what is done. */
static char *conj_key(struct ctx *c, const struct conj *cj)
{
	struct sb k = { 0 };

	for (int i = 0; i < cj->n; i++)
		sb_printf(&k, "%s\x01%u\x02", cj->path[i], cj->done[i]);
	if (k.oom) {
		sb_free(&k);
		oom(c);
		return NULL;
	}
	if (!k.p)
		sb_puts(&k, "\x03");	/* the empty conjunction: any value */
	return k.p;
}

/* A lone "$ref" (beside annotations only) is its target: follow the chain. */
static int follow_refs(struct ctx *c, struct conj *cj, const char **hint)
{
	for (int hops = 0; cj->n == 1 && !cj->done[0]; hops++) {
		json_t *ref = json_object_get(cj->s[0], "$ref"), *t;
		const char *slash;
		char *tp;

		if (!ref || !only_annotations(cj->s[0], "$ref"))
			return 0;
		if (hops == 64)
			return fail(c, cj->path[0], "$ref", "a chain of more than 64 '$ref's");
		if (ref_target(c, ref, cj->path[0], &t, &tp))
			return ERR;
		if (t == cj->s[0]) {
			free(tp);
			return fail(c, cj->path[0], "$ref", "'$ref' names the schema it is in: "
				    "left recursion, it consumes no input");
		}
		conj_free(cj);
		if (conj_add(c, cj, t, tp))
			return ERR;
		slash = strrchr(cj->n ? cj->path[0] : "", '/');
		if (slash && slash[1])
			*hint = slash + 1;
	}
	return 0;
}

/* Whether a body is one rule's name. */
static int body_name(const struct ctx *c, const char *body)
{
	for (const char *p = body; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-'))
			return -1;
	return *body ? smap_get(&c->names, body, -1) : -1;
}

/* A finished body for rule r: shared with an equal rule where it may be. */
static int rule_finish(struct ctx *c, int r, const char *key, struct sb *body)
{
	int x;

	if (body->oom)
		return oom(c);
	if (r && !c->rules[r].used_early) {
		x = body_name(c, sb_str(body));
		if (x < 0)
			x = smap_get(&c->bodies, sb_str(body), -1);
		if (x >= 0 && x != r) {
			c->rules[r].alias = x;
			return smap_put(&c->memo, key, x) ? oom(c) : rule_final(c, x);
		}
	}
	if (rule_body(c, r, sb_str(body)) || smap_put(&c->bodies, sb_str(body), r))
		return c->rc ? ERR : oom(c);
	return r;
}

/*
 * tr_conj - the rule for a conjunction (memoised: a conjunction being
 * translated is named, not expanded again); its index, NEVER or ERR.
 */
static int tr_conj(struct ctx *c, struct conj *cj, const char *hint)
{
	struct sb body = { 0 };
	char *key;
	int r, res, lead = c->lead;

	if (follow_refs(c, cj, &hint))
		return ERR;
	if (cj->never)
		return NEVER;
	key = conj_key(c, cj);
	if (!key)
		return ERR;
	r = smap_get(&c->memo, key, ERR);
	if (r != ERR) {
		free(key);
		if (r == NEVER)
			return NEVER;
		if (!c->rules[r].body)
			c->rules[r].used_early = true;
		return edge_add(c, r) ? ERR : rule_final(c, r);
	}
	if (c->depth >= PG_SCHEMA_MAX_DEPTH) {
		free(key);
		return fail(c, cj->n ? cj->path[0] : "#", NULL, "the schema nests more than %d deep",
			    PG_SCHEMA_MAX_DEPTH);
	}
	r = rule_new(c, hint);
	if (r >= 0 && cj->n)
		c->rules[r].where = strdup(cj->path[0]);
	if (r < 0 || (cj->n && !c->rules[r].where) || smap_put(&c->memo, key, r) ||
	    edge_add(c, r)) {
		free(key);
		return r < 0 ? ERR : c->rc ? ERR : oom(c);
	}
	c->lead = r;
	c->depth++;
	res = tr_body(c, cj, hint, &body);
	c->depth--;
	c->lead = lead;
	if (res == NEVER) {
		c->rules[r].never = true;
		if (c->rules[r].used_early)
			res = fail(c, cj->path[0], NULL, "a schema that refers to itself accepts no "
				   "value (%s)", c->never);
		else if (smap_put(&c->memo, key, NEVER))
			res = oom(c);
	} else if (res == 0) {
		res = rule_finish(c, r, key, &body);
	}
	free(key);
	sb_free(&body);
	return res;
}

/* ---- the whole ---- */

static const char *rule_where(const struct ctx *c, int r)
{
	return c->rules[r].where ? c->rules[r].where : r ? c->rules[r].name : "#";
}

/* DFS over "begins with" edges: a cycle is left recursion. */
static int lr_visit(struct ctx *c, int r, char *color, int *stack, int depth,
		    const int *first, const int *next)
{
	color[r] = 1;
	stack[depth] = r;
	for (int e = first[r]; e >= 0; e = next[e]) {
		int to = c->edges[e].to;

		if (color[to] == 1) {
			struct sb path = { 0 };
			int k = depth;

			while (k > 0 && stack[k] != to)
				k--;
			for (int i = k; i <= depth; i++)
				sb_printf(&path, "%s -> ", rule_where(c, stack[i]));
			sb_puts(&path, rule_where(c, to));
			fail(c, rule_where(c, to), NULL, "left recursion: %s refers to itself before "
			     "consuming any input (through $ref, anyOf, oneOf or allOf): %s",
			     rule_where(c, to), sb_str(&path));
			sb_free(&path);
			return ERR;
		}
		if (!color[to] && lr_visit(c, to, color, stack, depth + 1, first, next))
			return ERR;
	}
	color[r] = 2;
	return 0;
}

static int left_recursion(struct ctx *c)
{
	char *color = calloc((size_t)c->n_rules, 1);
	int *stack = calloc((size_t)c->n_rules + 1, sizeof(int));
	int *first = malloc((size_t)c->n_rules * sizeof(int));
	int *next = malloc(((size_t)c->n_edges + 1) * sizeof(int));
	int rc = 0;

	if (!color || !stack || !first || !next) {
		rc = oom(c);
		goto out;
	}
	for (int i = 0; i < c->n_rules; i++)
		first[i] = -1;
	for (int e = c->n_edges - 1; e >= 0; e--) {
		next[e] = first[c->edges[e].from];
		first[c->edges[e].from] = e;
	}
	for (int i = 0; i < c->n_rules && !rc; i++)
		if (!color[i])
			rc = lr_visit(c, i, color, stack, 0, first, next);
out:
	free(color);
	free(stack);
	free(first);
	free(next);
	return rc;
}

/* ---- rules that can end: every instance finite ---- */

static bool gx_alt(const struct ctx *c, const char **p, const char *prod);

/* Past the spaces at *p. */
static void gx_space(const char **p)
{
	while (**p == ' ')
		(*p)++;
}

/* Past the literal or class at *p, which ends with close (escapes skipped). */
static void gx_skip(const char **p, char close)
{
	for ((*p)++; **p && **p != close; (*p)++)
		if (**p == '\\' && (*p)[1])
			(*p)++;
	if (**p)
		(*p)++;
}

/* The rule whose name starts at *p (moved past it), or -1. */
static int gx_name(const struct ctx *c, const char **p)
{
	char name[80];
	size_t n = 0;

	while (((**p >= 'a' && **p <= 'z') || (**p >= 'A' && **p <= 'Z') ||
		(**p >= '0' && **p <= '9') || **p == '-') && n + 1 < sizeof(name))
		name[n++] = *(*p)++;
	name[n] = '\0';
	return n ? rule_final(c, smap_get(&c->names, name, -1)) : -1;
}

/* One term and its quantifier: whether it can match a finite text. */
static bool gx_term(const struct ctx *c, const char **p, const char *prod)
{
	bool ok = true;
	long min = 1;

	if (**p == '"') {
		gx_skip(p, '"');
	} else if (**p == '[') {
		gx_skip(p, ']');
	} else if (**p == '(') {
		(*p)++;
		ok = gx_alt(c, p, prod);
		if (**p == ')')
			(*p)++;
	} else {
		const char *start = *p;
		int r = gx_name(c, p);

		if (*p == start) {	/* not the translation's text: let the compiler judge */
			(*p)++;
			return true;
		}
		ok = r < 0 || prod[r];
	}
	if (**p == '?' || **p == '*') {
		min = 0;
		(*p)++;
	} else if (**p == '+') {
		(*p)++;
	} else if (**p == '{') {
		min = strtol(*p + 1, NULL, 10);
		gx_skip(p, '}');
	}
	return ok || !min;
}

/* Alternatives up to ')' or the end: whether one can match a finite text. */
static bool gx_alt(const struct ctx *c, const char **p, const char *prod)
{
	bool any = false, all = true;

	for (;;) {
		gx_space(p);
		if (!**p || **p == ')')
			return any || all;
		if (**p == '|') {
			any |= all;
			all = true;
			(*p)++;
			continue;
		}
		all &= gx_term(c, p, prod);
	}
}

/*
 * productive - every rule emitted can match a finite text.  One that
 * cannot is a schema whose every instance would nest forever ($ref to
 * itself with no way out): a sample under it would never end, so it is
 * refused, naming a recursive one where it may.
 */
static int productive(struct ctx *c)
{
	char *prod = calloc((size_t)c->n_rules, 1);
	bool changed = true;
	int bad = -1;

	if (!prod)
		return oom(c);
	while (changed) {
		changed = false;
		for (int i = c->n_rules - 1; i >= 0; i--) {
			const struct rule *r = &c->rules[i];
			const char *p = r->body;

			if (prod[i] || r->alias >= 0 || r->never || !r->body || !r->reached)
				continue;
			if (gx_alt(c, &p, prod)) {
				prod[i] = 1;
				changed = true;
			}
		}
	}
	for (int i = 0; i < c->n_rules; i++) {
		const struct rule *r = &c->rules[i];

		if (prod[i] || r->alias >= 0 || r->never || !r->body || !r->reached)
			continue;
		if (bad < 0 || (r->used_early && !c->rules[bad].used_early))
			bad = i;
	}
	free(prod);
	if (bad < 0)
		return 0;
	return fail(c, rule_where(c, bad), NULL, "a schema that refers to itself accepts no "
		    "value: every instance would nest in itself forever (no way out of the "
		    "recursion through an optional property, an empty array or another "
		    "branch)");
}

/* ---- rules named from root: the others are left out ---- */

/*
 * reach - mark the rules root's body names, and those theirs name: a
 * rule made for a branch that was then written another way (an object's
 * other members when the fixed "object" rule serves) is never named.
 */
static int reach(struct ctx *c)
{
	int *stack = malloc((size_t)c->n_rules * sizeof(*stack)), n = 0;

	if (!stack)
		return oom(c);
	c->rules[0].reached = true;
	stack[n++] = 0;
	while (n) {
		const char *p = c->rules[stack[--n]].body;

		while (p && *p) {
			const char *start;
			int r;

			if (*p == '"' || *p == '[' || *p == '{') {
				gx_skip(&p, *p == '"' ? '"' : *p == '[' ? ']' : '}');
				continue;
			}
			start = p;
			r = gx_name(c, &p);
			if (p == start)
				p++;	/* a space, '|', '(', ')' or a quantifier */
			if (r >= 0 && !c->rules[r].reached) {
				c->rules[r].reached = true;
				stack[n++] = r;
			}
		}
	}
	free(stack);
	return 0;
}

/* The grammar text: root first, then every rule emitted, in order. */
static char *assemble(struct ctx *c)
{
	struct sb out = { 0 };

	for (int i = 0; i < c->n_rules; i++) {
		const struct rule *r = &c->rules[i];

		if (r->alias >= 0 || r->never || !r->body || !r->reached)
			continue;
		sb_printf(&out, "%s ::= %s\n", r->name, r->body);
	}
	if (out.oom || !out.p) {
		sb_free(&out);
		oom(c);
		return NULL;
	}
	if (out.len > PG_SCHEMA_MAX_GBNF) {
		sb_free(&out);
		fail(c, "#", NULL, "the grammar would be more than %u bytes", PG_SCHEMA_MAX_GBNF);
		return NULL;
	}
	return out.p;
}

/* The root: its body is the document's, and "#" names it. */
static int translate_root(struct ctx *c)
{
	struct conj cj = { 0 };
	struct sb body = { 0 };
	char *root = strdup("root"), *key;
	int r, res;

	for (int p = 0; p < N_PRIM; p++)
		if (smap_put(&c->names, prims[p].name, -1))
			return oom(c);
	if (!root || (r = rule_alloc(c, root)) < 0)
		return root ? ERR : oom(c);
	if (conj_add(c, &cj, c->doc, strdup("#")))
		return ERR;
	key = conj_key(c, &cj);
	if (!key || smap_put(&c->memo, key, r)) {
		free(key);
		conj_free(&cj);
		return c->rc ? ERR : oom(c);
	}
	c->lead = r;
	c->depth = 1;
	res = cj.never ? NEVER : tr_body(c, &cj, "root", &body);
	if (res == NEVER)
		res = fail(c, "#", NULL, "the schema accepts no value (%s)", c->never);
	else if (res == 0)
		res = rule_body(c, r, sb_str(&body));
	if (!res && body.oom)
		res = oom(c);
	free(key);
	sb_free(&body);
	conj_free(&cj);
	return res;
}

static void ctx_free(struct ctx *c)
{
	for (int i = 0; i < c->n_rules; i++) {
		free(c->rules[i].name);
		free(c->rules[i].body);
		free(c->rules[i].where);
	}
	free(c->rules);
	free(c->edges);
	smap_free(&c->names);
	smap_free(&c->memo);
	smap_free(&c->bodies);
	json_decref(c->doc);
}

int pg_schema_to_gbnf(const char *json, size_t len, char **gbnf, char *err, size_t err_len)
{
	struct ctx c = { .err = err, .err_len = err_len, .lead = -1 };
	json_error_t je;
	int rc;

	*gbnf = NULL;
	if (err_len)
		err[0] = '\0';
	c.doc = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	if (!c.doc) {
		if (json_error_code(&je) == json_error_out_of_memory)
			return -ENOMEM;
		if (err_len)
			snprintf(err, err_len, "invalid JSON at line %d, column %d: %s", je.line,
				 je.column, je.text);
		return -EINVAL;
	}
	if (!translate_root(&c) && !left_recursion(&c) && !reach(&c) && !productive(&c))
		*gbnf = assemble(&c);
	rc = *gbnf ? 0 : c.rc ? c.rc : -ENOMEM;
	ctx_free(&c);
	return rc;
}
