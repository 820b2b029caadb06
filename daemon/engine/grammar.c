/*
 * grammar.c - constrained decoding: GBNF text compiled into flat element
 * arrays, matched by a pushdown automaton over code points.
 *
 * A position of the automaton is a stack of frames (an element's index and,
 * for a repetition, the count of its iterations so far); a state is the
 * set of stacks the text so far leaves.  Stacks are hash-consed into nodes
 * (a frame and the node below it), so that a stack is one 32-bit id, and
 * the sets of stacks are interned too.  Every interned set cuts the code
 * points into intervals that the same of its stacks take, with a
 * transition per interval and a row of them for ASCII, filled as they are
 * asked for.  That is a DFA built lazily, so that a token mask is one walk
 * of the vocabulary's byte trie with mostly table lookups, and the masks
 * themselves are cached by the contents of the set (a 64-bit hash of its
 * stacks' frames, the same in every generation of the cache, with the
 * number of stacks and the character begun).  All of it is a
 * cache: dropped when it passes its bound, rebuilt from the stacks each
 * state keeps a copy of.
 *
 * A frame says where a stack goes on: at element pos of an alternative;
 * a repetition's frame also counts its rounds.  A rule's alternatives are
 * pushed atop the frame after the reference to it (none when the
 * reference ends its alternative, so that right recursion does not deepen
 * the stack); a repetition without a most count stops counting at its
 * least, so that x* is one stack whatever its rounds.  Compiling refuses
 * what would make the expansion of a stack loop: left recursion, and a
 * repetition (past one round) of something that may match nothing.
 *
 * Not a parser that builds trees, nor a regular-expression engine: it
 * answers "may the text go on with these bytes", and nothing else.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/grammar.h"
#include "daemon/engine/tokenizer.h"

#define MAX_NEST 256		/* groups inside groups */
#define MAX_CP 0x10ffffu
#define REP_INF UINT32_MAX	/* a repetition without a most count */
#define MAX_VISITS (16u * PG_GRAMMAR_MAX_STACKS)	/* stacks one step may visit */
#define MIN_STATE_BYTES (64u << 10)
#define NONE UINT32_MAX

/* What a transition gives besides a set: set ids are below T_NOMEM. */
#define T_UNKNOWN 0xffffffffu	/* not computed yet */
#define T_DEAD 0xfffffffeu	/* no stack takes it */
#define T_OVER 0xfffffffdu	/* past PG_GRAMMAR_MAX_STACKS or _DEPTH */
#define T_NOMEM 0xfffffffcu	/* out of memory (never cached) */
#define NODE_BAD UINT32_MAX

#define FRAME(pos, cnt) ((uint64_t)(cnt) << 32 | (pos))
#define F_POS(f) ((uint32_t)(f))
#define F_CNT(f) ((uint32_t)((f) >> 32))

#define EMPTY_HASH 0x2545f4914f6cdd1dull	/* the empty stack's hash */

/* ---- growing arrays ---- */

/* reserve - make *pp (an array of sz-byte items, *cap of them) hold need. */
static int reserve(void *pp, size_t *cap, size_t need, size_t sz)
{
	size_t c = *cap ? *cap : 16;
	void *p, *q;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > SIZE_MAX / 4 / sz)
			return -ENOMEM;
		c *= 2;
	}
	memcpy(&p, pp, sizeof(p));
	q = realloc(p, c * sz);
	if (!q)
		return -ENOMEM;
	memcpy(pp, &q, sizeof(q));
	*cap = c;
	return 0;
}

#define RESERVE(a, cap, need) \
	((need) <= (cap) ? 0 : reserve(&(a), &(cap), (need), sizeof(*(a))))

/* mix64 - a 64-bit finaliser (MurmurHash3's): every bit of x moves all. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* cmp_u32 - qsort's order of 32-bit unsigned numbers. */
static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* cmp_u64 - qsort's order of 64-bit unsigned numbers. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* A set of ids, emptied in O(1) by a new stamp. */
struct idset {
	uint32_t *key, *stamp;	/* (cap) */
	size_t cap, n;
	uint32_t cur;
};

/* idset_clear - empty s. */
static void idset_clear(struct idset *s)
{
	s->n = 0;
	if (++s->cur == 0) {
		if (s->stamp)
			memset(s->stamp, 0, s->cap * sizeof(*s->stamp));
		s->cur = 1;
	}
}

/* idset_grow - double s's table, keeping what it holds. */
static int idset_grow(struct idset *s)
{
	size_t cap = s->cap ? 2 * s->cap : 1024;
	uint32_t *key = malloc(cap * sizeof(*key));
	uint32_t *stamp = calloc(cap, sizeof(*stamp));

	if (!key || !stamp) {
		free(key);
		free(stamp);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->cap; i++) {
		size_t j;

		if (s->stamp[i] != s->cur)
			continue;
		j = mix64(s->key[i]) & (cap - 1);
		while (stamp[j] == s->cur)
			j = (j + 1) & (cap - 1);
		key[j] = s->key[i];
		stamp[j] = s->cur;
	}
	free(s->key);
	free(s->stamp);
	s->key = key;
	s->stamp = stamp;
	s->cap = cap;
	return 0;
}

/* idset_add - 1 when id is new, 0 when it was there, -ENOMEM. */
static int idset_add(struct idset *s, uint32_t id)
{
	size_t j;

	if ((s->n + 1) * 2 > s->cap && idset_grow(s))
		return -ENOMEM;
	j = mix64(id) & (s->cap - 1);
	while (s->stamp[j] == s->cur) {
		if (s->key[j] == id)
			return 0;
		j = (j + 1) & (s->cap - 1);
	}
	s->key[j] = id;
	s->stamp[j] = s->cur;
	s->n++;
	return 1;
}

/* idset_free - free s's table. */
static void idset_free(struct idset *s)
{
	free(s->key);
	free(s->stamp);
	memset(s, 0, sizeof(*s));
}

/* ---- the compiled grammar ---- */

enum elem_type { E_END, E_CHARS, E_RULE, E_REP };

/* One element of an alternative; an alternative ends with E_END. */
struct elem {
	uint8_t type;
	uint32_t a;		/* CHARS: first range in ranges[]; RULE, REP: rule */
	uint32_t b;		/* CHARS: number of ranges; REP: least count */
	uint32_t c;		/* REP: most count, REP_INF for none */
	uint32_t src;		/* byte offset in the text, for errors */
};

struct rule {
	uint32_t alt, n_alt;	/* alts[alt .. alt + n_alt): first elements */
	uint32_t owner;		/* the named rule it is part of (itself if named) */
	uint32_t name, name_len;	/* its name in the text (named rules) */
	uint32_t def;		/* where it is defined */
	uint32_t use;		/* where first used, NONE if never */
	bool named, defined, nullable;
};

/* A character begun and not finished: its bits so far, the bytes it still
   needs, and the range the next byte must be in (all 0 when none). */
struct part {
	uint32_t cp;
	uint8_t need, lo, hi;
};

struct node {
	uint64_t frame;		/* FRAME(element, count) */
	uint64_t hash;		/* the whole stack's: the same in every cache */
	uint32_t parent;	/* the stack below; 0: the empty stack */
	uint32_t depth;		/* frames in this stack */
};

/* Code points from lo to the next interval's lo (or U+10FFFF) are taken by
   the same stacks of a set; to is where they lead. */
struct ival {
	uint32_t lo;
	uint32_t to;		/* a set, T_DEAD (none takes them), T_OVER, T_UNKNOWN */
};

/* An interned set of stacks. */
struct sset {
	uint64_t hash;		/* of its stacks' contents, not of their ids */
	uint32_t ids, n;	/* ss_ids[ids .. ids + n): its stacks, sorted */
	uint32_t iv, n_iv;	/* iv[iv .. iv + n_iv): its intervals */
	bool done;		/* it holds the empty stack */
	bool any;		/* some stack takes some character */
};

/* A node's number in a state's copy, valid where stamp is the current. */
struct loc {
	uint32_t stamp, idx;
};

/* Interned stacks and sets, and their transitions: a cache. */
struct cache {
	uint64_t gen;		/* changes when the cache is dropped */
	uint64_t flushes;
	size_t limit;		/* bytes before it is dropped */
	struct node *nodes;
	size_t n_nodes, cap_nodes;
	uint32_t *ntab;		/* node id + 1, 0: free (ntab_cap) */
	size_t ntab_cap;
	struct sset *sets;
	size_t n_sets, cap_sets;
	uint32_t *ss_ids;
	size_t n_ids, cap_ids;
	struct ival *iv;
	size_t n_iv, cap_iv;
	uint32_t *stab;		/* set id + 1, 0: free (stab_cap) */
	size_t stab_cap;
	uint32_t *rows;		/* (n_sets, 128): transitions on ASCII */
	size_t cap_rows;
	struct loc *loc;	/* (cap_loc) by node, storing a state */
	size_t cap_loc;
	uint32_t loc_cur;
	/* one step's scratch */
	uint32_t *work;
	size_t n_work, cap_work;
	uint32_t *out;
	size_t n_out, cap_out;
	uint64_t *tmp;
	size_t cap_tmp;
	uint32_t *bnd;
	size_t cap_bnd;
	uint32_t *lst;
	size_t cap_lst;
	uint32_t *chain;
	size_t cap_chain;
	struct idset seen;
	uint32_t visits;
	bool over, nomem;
};

struct mentry {
	uint64_t key, key2;	/* the set's hash, the packed part */
	uint32_t n;		/* the set's stacks */
	int count;
	uint32_t *bits;		/* (words) */
	uint32_t prev, next;	/* least recently used list, NONE at ends */
	uint32_t chain;		/* the bucket's next, or the free list's */
};

/* Masks by state, least recently used dropped first. */
struct mcache {
	uint64_t vocab;		/* the serial of the vocabulary they are of */
	size_t words, limit, bytes, live;
	struct mentry *e;
	size_t n_e, cap_e;
	uint32_t *bucket;	/* (n_bucket) first entry, NONE */
	size_t n_bucket;
	uint32_t free, head, tail;
	uint64_t hits, misses;
};

/* A mask walk's position at one depth of the trie. */
struct wstep {
	uint32_t ss;
	struct part pt;
};

struct pg_grammar {
	uint64_t hash;
	struct elem *elems;
	size_t n_elems, cap_elems;
	uint32_t *alts;
	size_t n_alts, cap_alts;
	struct rule *rules;
	size_t n_rules, cap_rules;
	uint32_t *ranges;	/* (lo, hi) pairs, sorted and merged per class */
	size_t n_ranges, cap_ranges;
	uint32_t root;
	struct pg_grammar_state *start;
	struct cache c;
	struct mcache m;
	struct wstep *w;
	size_t cap_w;
};

/*
 * A state keeps its stacks as a forest of its own: nodes 1 .. n_loc with
 * their frames and the node below (0: the empty stack), parents before
 * children, and the node atop each stack.  mem holds frames[n_loc + 1],
 * then parents[n_loc + 1] and tops[n_stacks].
 */
struct pg_grammar_state {
	struct pg_grammar *g;
	uint64_t gen;		/* g's cache generation ss is of, 0: none */
	uint32_t ss;		/* the set in g's cache */
	struct part part;
	bool set_done, set_any;	/* the set's done and any */
	uint64_t hash;		/* the set's */
	uint32_t n_stacks, n_loc;
	uint64_t *mem;
};

/* One node of the byte trie, in depth-first order. */
struct tnode {
	uint32_t end;		/* the index past its subtree */
	uint32_t tok, n_tok;	/* order[tok ..): the tokens that end here */
	uint32_t depth;		/* 1 for a first byte */
	uint8_t byte;
};

struct pg_grammar_vocab {
	int n;
	uint64_t serial;
	uint8_t *eog;		/* (n) */
	size_t *off;		/* (n + 1) token i is bytes[off[i] .. off[i + 1]) */
	uint8_t *bytes;
	uint32_t *order;	/* the trie's tokens, by bytes */
	uint32_t n_order;
	uint32_t *eog_ids;
	uint32_t n_eog;
	struct tnode *nodes;
	size_t n_nodes;
	uint32_t max_depth;
};

static atomic_uint_fast64_t vocab_serial;

/* ---- the parser ---- */

/* One rule's alternatives while they are parsed. */
struct build {
	struct elem *e;
	size_t n, cap;
	uint32_t *alt;		/* where each alternative starts in e */
	size_t n_alt, cap_alt;
};

struct parser {
	const char *s;
	size_t len, pos;
	char *err;
	size_t err_len;
	int rc;			/* the first error */
	struct pg_grammar *g;
	uint32_t *ntab;		/* named rule id + 1, 0: free (ntab_cap) */
	size_t ntab_cap, n_named;
	uint32_t cur;		/* the named rule being defined */
	uint64_t *cls;		/* a class's ranges while parsed */
	size_t cap_cls;
	struct build b[MAX_NEST + 1];
};

/* where - the line and column (in characters) of byte offset at. */
static void where(const struct parser *p, size_t at, size_t *line, size_t *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < at && i < p->len; i++) {
		unsigned char c = (unsigned char)p->s[i];

		if (c == '\n') {
			(*line)++;
			*col = 1;
		} else if ((c & 0xc0) != 0x80) {
			(*col)++;
		}
	}
}

/* perr - the first error: "line L, column C: " and the message. */
__attribute__((format(printf, 3, 4)))
static int perr(struct parser *p, size_t at, const char *fmt, ...)
{
	size_t line, col;
	int k;
	va_list ap;

	if (p->rc)
		return p->rc;
	p->rc = -EINVAL;
	if (!p->err_len)
		return p->rc;
	where(p, at, &line, &col);
	k = snprintf(p->err, p->err_len, "line %zu, column %zu: ", line, col);
	if (k >= 0 && (size_t)k < p->err_len) {
		va_start(ap, fmt);
		vsnprintf(p->err + k, p->err_len - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return p->rc;
}

/* oom - the first error: out of memory. */
static int oom(struct parser *p)
{
	if (!p->rc) {
		p->rc = -ENOMEM;
		if (p->err_len)
			snprintf(p->err, p->err_len, "out of memory compiling the grammar");
	}
	return p->rc;
}

/* utf8_next - the code point at s[*i] (advanced past it), or -1 when the
   bytes there are not UTF-8 (overlong, surrogate, above U+10FFFF, cut). */
static int32_t utf8_next(const char *s, size_t len, size_t *i)
{
	const unsigned char *u = (const unsigned char *)s + *i;
	size_t left = len - *i, n;
	uint32_t cp, min;

	if (u[0] < 0x80) {
		(*i)++;
		return u[0];
	}
	if (u[0] >= 0xc2 && u[0] <= 0xdf) {
		n = 2, cp = u[0] & 0x1f, min = 0x80;
	} else if (u[0] >= 0xe0 && u[0] <= 0xef) {
		n = 3, cp = u[0] & 0x0f, min = 0x800;
	} else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
		n = 4, cp = u[0] & 0x07, min = 0x10000;
	} else {
		return -1;
	}
	if (left < n)
		return -1;
	for (size_t k = 1; k < n; k++) {
		if ((u[k] & 0xc0) != 0x80)
			return -1;
		cp = cp << 6 | (u[k] & 0x3f);
	}
	if (cp < min || cp > MAX_CP || (cp >= 0xd800 && cp <= 0xdfff))
		return -1;
	*i += n;
	return (int32_t)cp;
}

/* peek - the byte at the parser's position, -1 at the end. */
static int peek(const struct parser *p)
{
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

/* is_name_char - whether c may be in a rule's name. */
static bool is_name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* skip_ws - past spaces, tabs, carriage returns, comments and, where
   newline_ok, newlines, from i. */
static size_t skip_ws(const struct parser *p, size_t i, bool newline_ok)
{
	while (i < p->len) {
		char c = p->s[i];

		if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newline_ok)) {
			i++;
		} else if (c == '#') {
			while (i < p->len && p->s[i] != '\n')
				i++;
		} else {
			break;
		}
	}
	return i;
}

/* skip_space - the parser past spaces and comments (skip_ws). */
static void skip_space(struct parser *p, bool newline_ok)
{
	p->pos = skip_ws(p, p->pos, newline_ok);
}

/* at_rule_start - whether a definition ("name ::=") starts at i. */
static bool at_rule_start(const struct parser *p, size_t i)
{
	size_t j = i;

	while (j < p->len && is_name_char((unsigned char)p->s[j]))
		j++;
	if (j == i)
		return false;
	j = skip_ws(p, j, false);
	return p->len - j >= 3 && !memcmp(p->s + j, "::=", 3);
}

/* describe - a character for a message: 'c', or U+XXXX. */
static const char *describe(const struct parser *p, size_t at, char buf[16])
{
	size_t i = at;
	int32_t cp;

	if (at >= p->len)
		return "the end of the text";
	cp = utf8_next(p->s, p->len, &i);
	if (cp > 0x20 && cp < 0x7f)
		snprintf(buf, 16, "'%c'", (char)cp);
	else
		snprintf(buf, 16, "U+%04X", (unsigned)(cp < 0 ? 0xfffd : cp));
	return buf;
}

/* name_hash - FNV-1a of n bytes at s. */
static uint64_t name_hash(const char *s, size_t n)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* same_name - whether rule r is named text[at .. at + n). */
static bool same_name(const struct parser *p, const struct rule *r,
		      size_t at, size_t n)
{
	return r->name_len == n && !memcmp(p->s + r->name, p->s + at, n);
}

/* new_rule - a rule with no alternatives yet; its id, or NONE (ENOMEM). */
static uint32_t new_rule(struct parser *p, bool named, uint32_t def)
{
	struct pg_grammar *g = p->g;
	struct rule *r;

	if (RESERVE(g->rules, g->cap_rules, g->n_rules + 1)) {
		oom(p);
		return NONE;
	}
	r = &g->rules[g->n_rules];
	memset(r, 0, sizeof(*r));
	r->owner = named ? (uint32_t)g->n_rules : p->cur;
	r->named = named;
	r->def = def;
	r->use = NONE;
	return (uint32_t)g->n_rules++;
}

/* ntab_grow - double the table of named rules. */
static int ntab_grow(struct parser *p)
{
	size_t cap = p->ntab_cap ? 2 * p->ntab_cap : 256;
	uint32_t *t = calloc(cap, sizeof(*t));

	if (!t)
		return oom(p);
	for (size_t i = 0; i < p->ntab_cap; i++) {
		const struct rule *r;
		size_t j;

		if (!p->ntab[i])
			continue;
		r = &p->g->rules[p->ntab[i] - 1];
		j = name_hash(p->s + r->name, r->name_len) & (cap - 1);
		while (t[j])
			j = (j + 1) & (cap - 1);
		t[j] = p->ntab[i];
	}
	free(p->ntab);
	p->ntab = t;
	p->ntab_cap = cap;
	return 0;
}

/* find_rule - the named rule text[at .. at + n), or NONE. */
static uint32_t find_rule(const struct parser *p, size_t at, size_t n)
{
	size_t j;

	if (!p->ntab_cap)
		return NONE;
	j = name_hash(p->s + at, n) & (p->ntab_cap - 1);
	for (; p->ntab[j]; j = (j + 1) & (p->ntab_cap - 1))
		if (same_name(p, &p->g->rules[p->ntab[j] - 1], at, n))
			return p->ntab[j] - 1;
	return NONE;
}

/* named_rule - the named rule text[at .. at + n), made when new; NONE on
   error. */
static uint32_t named_rule(struct parser *p, size_t at, size_t n)
{
	uint32_t id = find_rule(p, at, n);
	size_t j;

	if (id != NONE)
		return id;
	if (p->n_named >= PG_GRAMMAR_MAX_RULES) {
		perr(p, at, "more than %u rules (the limit)", PG_GRAMMAR_MAX_RULES);
		return NONE;
	}
	if ((p->n_named + 1) * 2 > p->ntab_cap && ntab_grow(p))
		return NONE;
	id = new_rule(p, true, (uint32_t)at);
	if (id == NONE)
		return NONE;
	p->g->rules[id].name = (uint32_t)at;
	p->g->rules[id].name_len = (uint32_t)n;
	j = name_hash(p->s + at, n) & (p->ntab_cap - 1);
	while (p->ntab[j])
		j = (j + 1) & (p->ntab_cap - 1);
	p->ntab[j] = id + 1;
	p->n_named++;
	return id;
}

/* b_begin - b emptied, with its first alternative begun. */
static int b_begin(struct parser *p, struct build *b)
{
	b->n = 0;
	b->n_alt = 0;
	if (RESERVE(b->alt, b->cap_alt, 1))
		return oom(p);
	b->alt[b->n_alt++] = 0;
	return 0;
}

/* b_push - an element at the end of b's current alternative. */
static int b_push(struct parser *p, struct build *b, uint8_t type,
		  uint32_t a, uint32_t bb, uint32_t c, size_t src)
{
	if (RESERVE(b->e, b->cap, b->n + 1))
		return oom(p);
	b->e[b->n++] = (struct elem){ type, a, bb, c, (uint32_t)src };
	return 0;
}

/* b_new_alt - end b's alternative and begin another. */
static int b_new_alt(struct parser *p, struct build *b)
{
	if (b_push(p, b, E_END, 0, 0, 0, p->pos) ||
	    RESERVE(b->alt, b->cap_alt, b->n_alt + 1))
		return oom(p);
	b->alt[b->n_alt++] = (uint32_t)b->n;
	return 0;
}

/* add_rule_body - elements e[0 .. n) (alternatives, each ending with
   E_END, starting at alt[]) as rule r's. */
static int add_rule_body(struct parser *p, uint32_t r, const struct elem *e,
			 size_t n, const uint32_t *alt, size_t n_alt)
{
	struct pg_grammar *g = p->g;

	if (RESERVE(g->elems, g->cap_elems, g->n_elems + n) ||
	    RESERVE(g->alts, g->cap_alts, g->n_alts + n_alt))
		return oom(p);
	g->rules[r].alt = (uint32_t)g->n_alts;
	g->rules[r].n_alt = (uint32_t)n_alt;
	for (size_t i = 0; i < n_alt; i++)
		g->alts[g->n_alts++] = (uint32_t)g->n_elems + alt[i];
	memcpy(g->elems + g->n_elems, e, n * sizeof(*e));
	g->n_elems += n;
	return 0;
}

/* b_finish - end b's last alternative and make b rule r's body. */
static int b_finish(struct parser *p, struct build *b, uint32_t r)
{
	if (b_push(p, b, E_END, 0, 0, 0, p->pos))
		return p->rc;
	return add_rule_body(p, r, b->e, b->n, b->alt, b->n_alt);
}

/* add_chars - an element taking the ranges (lo << 32 | hi, sorted by lo)
   r[0 .. n), merged, or their complement when neg. */
static int add_chars(struct parser *p, struct build *b, const uint64_t *r,
		     size_t n, bool neg, size_t src)
{
	struct pg_grammar *g = p->g;
	size_t first = g->n_ranges;
	uint32_t next = 0;	/* complement: the first code point not yet out */

	for (size_t i = 0; i < n; i++) {
		uint32_t lo = (uint32_t)(r[i] >> 32), hi = (uint32_t)r[i];
		size_t k = g->n_ranges;

		if (neg) {
			if (lo > next && RESERVE(g->ranges, g->cap_ranges, k + 2))
				return oom(p);
			if (lo > next) {
				g->ranges[k] = next;
				g->ranges[k + 1] = lo - 1;
				g->n_ranges += 2;
			}
			if (hi + 1 > next)
				next = hi + 1;
		} else if (k > first && lo <= g->ranges[k - 1] + 1) {
			if (hi > g->ranges[k - 1])
				g->ranges[k - 1] = hi;
		} else {
			if (RESERVE(g->ranges, g->cap_ranges, k + 2))
				return oom(p);
			g->ranges[k] = lo;
			g->ranges[k + 1] = hi;
			g->n_ranges += 2;
		}
	}
	if (neg && next <= MAX_CP) {
		if (RESERVE(g->ranges, g->cap_ranges, g->n_ranges + 2))
			return oom(p);
		g->ranges[g->n_ranges++] = next;
		g->ranges[g->n_ranges++] = MAX_CP;
	}
	return b_push(p, b, E_CHARS, (uint32_t)first / 2,
		      (uint32_t)(g->n_ranges - first) / 2, 0, src);
}

/* hexval - the value of hex digit c, -1 when it is none. */
static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* parse_hex - n hex digits after "\x" ("\u", "\U") at the escape at. */
static int parse_hex(struct parser *p, size_t at, int n, uint32_t *cp)
{
	uint32_t v = 0;

	for (int i = 0; i < n; i++) {
		int h = p->pos < p->len ? hexval((unsigned char)p->s[p->pos]) : -1;

		if (h < 0)
			return perr(p, at, "bad escape '\\%c': it takes %d hex digits",
				    p->s[at + 1], n);
		v = v << 4 | (uint32_t)h;
		p->pos++;
	}
	if (v > MAX_CP || (v >= 0xd800 && v <= 0xdfff))
		return perr(p, at, "bad escape '%.*s': not a Unicode character",
			    n + 2, p->s + at);
	*cp = v;
	return 0;
}

/* parse_escape - the escape at p->pos (a backslash) as a code point. */
static int parse_escape(struct parser *p, uint32_t *cp)
{
	size_t at = p->pos++;
	char buf[16];
	int c = peek(p);

	switch (c) {
	case 'n': *cp = '\n'; break;
	case 'r': *cp = '\r'; break;
	case 't': *cp = '\t'; break;
	case '\\': case '"': case '[': case ']': *cp = (uint32_t)c; break;
	case 'x': p->pos++; return parse_hex(p, at, 2, cp);
	case 'u': p->pos++; return parse_hex(p, at, 4, cp);
	case 'U': p->pos++; return parse_hex(p, at, 8, cp);
	default:
		return perr(p, at, "bad escape '\\' before %s (known: \\n \\r \\t "
			    "\\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)",
			    describe(p, p->pos, buf));
	}
	p->pos++;
	return 0;
}

/* parse_char - one character of a string or class: an escape or the text's
   own code point (the text is valid UTF-8). */
static int parse_char(struct parser *p, uint32_t *cp)
{
	if (p->s[p->pos] == '\\')
		return parse_escape(p, cp);
	*cp = (uint32_t)utf8_next(p->s, p->len, &p->pos);
	return 0;
}

/* parse_string - a "literal": one element per character. */
static int parse_string(struct parser *p, struct build *b)
{
	size_t open = p->pos++;
	uint32_t cp;

	for (;;) {
		size_t at = p->pos;
		uint64_t r;

		if (p->pos >= p->len || p->s[p->pos] == '\n')
			return perr(p, open, "unterminated string (a string ends on "
				    "its own line; write \\n for a newline)");
		if (p->s[p->pos] == '"') {
			p->pos++;
			return 0;
		}
		if (parse_char(p, &cp))
			return p->rc;
		r = (uint64_t)cp << 32 | cp;
		if (add_chars(p, b, &r, 1, false, at))
			return p->rc;
	}
}

/* class_end - an error when the class opened at open has run off its line. */
static int class_end(struct parser *p, size_t open)
{
	if (p->pos >= p->len || p->s[p->pos] == '\n')
		return perr(p, open, "unterminated character class (no ']' on its line)");
	return 0;
}

/* parse_class - a [character class], negated by a leading '^'. */
static int parse_class(struct parser *p, struct build *b)
{
	size_t open = p->pos++, n = 0;
	bool neg = peek(p) == '^';

	if (neg)
		p->pos++;
	for (;;) {
		size_t at = p->pos;
		uint32_t lo, hi;

		if (class_end(p, open))
			return p->rc;
		if (p->s[p->pos] == ']')
			break;
		if (parse_char(p, &lo))
			return p->rc;
		hi = lo;
		if (p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
			p->pos++;
			if (class_end(p, open) || parse_char(p, &hi))
				return p->rc;
			if (hi < lo)
				return perr(p, at, "bad range '%.*s' in a character class: "
					    "its end is below its start",
					    (int)(p->pos - at), p->s + at);
		}
		if (RESERVE(p->cls, p->cap_cls, n + 1))
			return oom(p);
		p->cls[n++] = (uint64_t)lo << 32 | hi;
	}
	p->pos++;
	if (!n && !neg)
		return perr(p, open, "empty character class '[]' matches nothing");
	qsort(p->cls, n, sizeof(*p->cls), cmp_u64);
	return add_chars(p, b, p->cls, n, neg, open);
}

/* parse_count - a repetition count at p->pos. */
static int parse_count(struct parser *p, size_t op, uint32_t *v)
{
	size_t at = p->pos;
	uint64_t x = 0;

	if (peek(p) < '0' || peek(p) > '9')
		return perr(p, op, "bad repetition bounds: expected a number after "
			    "'{' or ','");
	while (peek(p) >= '0' && peek(p) <= '9') {
		if (x <= PG_GRAMMAR_MAX_REPEAT)
			x = x * 10 + (uint64_t)(p->s[p->pos] - '0');
		p->pos++;
	}
	if (x > PG_GRAMMAR_MAX_REPEAT)
		return perr(p, at, "bad repetition bounds: the count %.*s is above "
			    "the limit of %u", (int)(p->pos - at < 20 ? p->pos - at : 20),
			    p->s + at, PG_GRAMMAR_MAX_REPEAT);
	*v = (uint32_t)x;
	return 0;
}

/* parse_bounds - "{m}", "{m,}", "{m,n}" at p->pos into *m, *n. */
static int parse_bounds(struct parser *p, bool nested, uint32_t *m, uint32_t *n)
{
	size_t op = p->pos++;

	skip_space(p, nested);
	if (parse_count(p, op, m))
		return p->rc;
	skip_space(p, nested);
	*n = *m;
	if (peek(p) == ',') {
		p->pos++;
		skip_space(p, nested);
		*n = REP_INF;
		if (peek(p) >= '0' && peek(p) <= '9' && parse_count(p, op, n))
			return p->rc;
		skip_space(p, nested);
	}
	if (peek(p) != '}')
		return perr(p, op, "bad repetition bounds: no '}' after '{'");
	p->pos++;
	if (*m > *n)
		return perr(p, op, "bad repetition bounds {%u,%u}: the least count "
			    "is above the most", *m, *n);
	return 0;
}

/* parse_postfix - the repetition operator at p->pos, applied to the item
   that b's elements from start make. */
static int parse_postfix(struct parser *p, int depth, size_t start)
{
	struct build *b = &p->b[depth];
	size_t op = p->pos;
	uint32_t m = 0, n = REP_INF, body;
	uint32_t alt0 = 0;

	switch (p->s[p->pos]) {
	case '*': p->pos++; break;
	case '+': p->pos++; m = 1; break;
	case '?': p->pos++; n = 1; break;
	default:
		if (parse_bounds(p, depth > 0, &m, &n))
			return p->rc;
	}
	if (b->n - start == 1 && b->e[start].type == E_RULE) {
		body = b->e[start].a;
	} else {
		body = new_rule(p, false, (uint32_t)op);
		if (body == NONE || b_push(p, b, E_END, 0, 0, 0, op) ||
		    add_rule_body(p, body, b->e + start, b->n - start, &alt0, 1))
			return p->rc;
	}
	b->n = start;
	return b_push(p, b, E_REP, body, m, n, op);
}

static int parse_alternatives(struct parser *p, int depth);

/* parse_group - a ( group ): a rule of its own, referred to. */
static int parse_group(struct parser *p, int depth)
{
	size_t open = p->pos++;
	uint32_t r;

	if (depth >= MAX_NEST)
		return perr(p, open, "groups nested deeper than %d", MAX_NEST);
	r = new_rule(p, false, (uint32_t)open);
	if (r == NONE || b_begin(p, &p->b[depth + 1]) ||
	    parse_alternatives(p, depth + 1))
		return p->rc;
	if (peek(p) != ')')
		return perr(p, open, "unclosed '(': no ')' before the end of the text");
	p->pos++;
	if (b_finish(p, &p->b[depth + 1], r))
		return p->rc;
	return b_push(p, &p->b[depth], E_RULE, r, 0, 0, open);
}

/* parse_ref - a reference to a named rule (made when first seen). */
static int parse_ref(struct parser *p, struct build *b)
{
	size_t at = p->pos;
	uint32_t r;

	while (p->pos < p->len && is_name_char((unsigned char)p->s[p->pos]))
		p->pos++;
	r = named_rule(p, at, p->pos - at);
	if (r == NONE)
		return p->rc;
	if (p->g->rules[r].use == NONE)
		p->g->rules[r].use = (uint32_t)at;
	return b_push(p, b, E_RULE, r, 0, 0, at);
}

/* parse_item - one item of a sequence, without its repetition. */
static int parse_item(struct parser *p, int depth)
{
	struct build *b = &p->b[depth];
	uint64_t any = MAX_CP;
	char buf[16];
	int c = peek(p);

	if (c == '"')
		return parse_string(p, b);
	if (c == '[')
		return parse_class(p, b);
	if (c == '(')
		return parse_group(p, depth);
	if (is_name_char(c))
		return parse_ref(p, b);
	if (c == '.') {
		p->pos++;
		return add_chars(p, b, &any, 1, false, p->pos - 1);
	}
	if (c == '<')
		return perr(p, p->pos, "token references ('<...>') are not supported");
	if (p->len - p->pos >= 3 && !memcmp(p->s + p->pos, "::=", 3))
		return perr(p, p->pos, "'::=' inside a rule: each rule starts on a "
			    "line of its own");
	if (c == '*' || c == '+' || c == '?' || c == '{')
		return perr(p, p->pos, "'%c' with nothing before it to repeat", c);
	return perr(p, p->pos, "unexpected %s", describe(p, p->pos, buf));
}

/* is_op - whether c begins a repetition operator. */
static bool is_op(int c)
{
	return c == '*' || c == '+' || c == '?' || c == '{';
}

/* parse_sequence - items and their repetitions, up to '|', ')' or the
   line's end (at the top). */
static int parse_sequence(struct parser *p, int depth)
{
	for (;;) {
		size_t start = p->b[depth].n;
		int c;

		skip_space(p, depth > 0);
		c = peek(p);
		if (c < 0 || c == '|' || c == ')' || c == '\n')
			return 0;
		if (parse_item(p, depth))
			return p->rc;
		skip_space(p, depth > 0);
		while (is_op(peek(p))) {
			if (parse_postfix(p, depth, start))
				return p->rc;
			skip_space(p, depth > 0);
		}
	}
}

/*
 * parse_alternatives - sequences separated by '|' into p->b[depth].  At the
 * top, a rule ends with its line, unless the next line that is not blank
 * starts with '|' (it goes on with another alternative).
 */
static int parse_alternatives(struct parser *p, int depth)
{
	if (parse_sequence(p, depth))
		return p->rc;
	for (;;) {
		if (peek(p) == '\n' && depth == 0) {
			size_t q = skip_ws(p, p->pos, true);

			if (q >= p->len || p->s[q] != '|')
				return 0;
			p->pos = q;
		}
		if (peek(p) != '|')
			return 0;
		p->pos++;
		skip_space(p, true);
		if (b_new_alt(p, &p->b[depth]) || parse_sequence(p, depth))
			return p->rc;
	}
}

/* parse_rule - one "name ::= alternatives" definition. */
static int parse_rule(struct parser *p)
{
	size_t at = p->pos, end, line, col, q;
	struct rule *r;
	char buf[16];
	uint32_t id;

	while (p->pos < p->len && is_name_char((unsigned char)p->s[p->pos]))
		p->pos++;
	end = p->pos;
	if (end == at)
		return perr(p, at, "expected a rule name, found %s", describe(p, at, buf));
	id = find_rule(p, at, end - at);
	if (id != NONE && p->g->rules[id].defined) {
		where(p, p->g->rules[id].def, &line, &col);
		return perr(p, at, "rule '%.*s' is defined twice (first at line %zu, "
			    "column %zu)", (int)(end - at > 64 ? 64 : end - at),
			    p->s + at, line, col);
	}
	skip_space(p, false);
	if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3))
		return perr(p, p->pos, "expected '::=' after the rule name '%.*s', "
			    "found %s", (int)(end - at > 64 ? 64 : end - at),
			    p->s + at, describe(p, p->pos, buf));
	id = named_rule(p, at, end - at);
	if (id == NONE)
		return p->rc;
	r = &p->g->rules[id];
	r->defined = true;
	r->def = (uint32_t)at;
	p->cur = id;
	p->pos += 3;
	skip_space(p, false);
	q = skip_ws(p, p->pos, true);
	if (peek(p) == '\n' && q < p->len && !at_rule_start(p, q))
		p->pos = q;	/* the body starts on a later line */
	if (b_begin(p, &p->b[0]) || parse_alternatives(p, 0))
		return p->rc;
	if (peek(p) == ')')
		return perr(p, p->pos, "unexpected ')': no '(' is open");
	if (peek(p) >= 0 && peek(p) != '\n')
		return perr(p, p->pos, "unexpected %s", describe(p, p->pos, buf));
	return b_finish(p, &p->b[0], id);
}

/* ---- the checks after parsing ---- */

/* rule_name - rule r's named owner's name, for messages: its length in
   *n (at most 64 bytes shown). */
static const char *rule_name(const struct parser *p, uint32_t r, int *n)
{
	const struct rule *o = &p->g->rules[p->g->rules[r].owner];

	*n = (int)(o->name_len > 64 ? 64 : o->name_len);
	return p->s + o->name;
}

/* check_text - the text is at most PG_GRAMMAR_MAX_TEXT bytes of UTF-8. */
static int check_text(struct parser *p)
{
	size_t i = 0;

	if (p->len > PG_GRAMMAR_MAX_TEXT)
		return perr(p, PG_GRAMMAR_MAX_TEXT, "the grammar is %zu bytes, more than "
			    "the limit of %u", p->len, PG_GRAMMAR_MAX_TEXT);
	while (i < p->len) {
		size_t at = i;

		if (utf8_next(p->s, p->len, &i) < 0)
			return perr(p, at, "the text is not UTF-8 (byte 0x%02x)",
				    (unsigned char)p->s[at]);
	}
	return 0;
}

/* parse_all - every rule of the text. */
static int parse_all(struct parser *p)
{
	for (;;) {
		skip_space(p, true);
		if (p->pos >= p->len)
			return 0;
		if (parse_rule(p))
			return p->rc;
	}
}

/* check_defined - every rule used is defined (the first use in the text
   of one that is not is named), and root is. */
static int check_defined(struct parser *p)
{
	struct pg_grammar *g = p->g;
	uint32_t bad = NONE, root;
	int n;

	for (uint32_t r = 0; r < g->n_rules; r++) {
		const struct rule *x = &g->rules[r];

		if (x->named && !x->defined && (bad == NONE || x->use < g->rules[bad].use))
			bad = r;
	}
	if (bad != NONE) {
		const char *name = rule_name(p, bad, &n);

		return perr(p, g->rules[bad].use, "rule '%.*s' is used but never defined",
			    n, name);
	}
	root = NONE;
	for (uint32_t r = 0; r < g->n_rules && root == NONE; r++)
		if (g->rules[r].named && g->rules[r].name_len == 4 &&
		    !memcmp(p->s + g->rules[r].name, "root", 4))
			root = r;
	if (root == NONE)
		return perr(p, 0, "no rule 'root': the grammar starts with the rule "
			    "named root");
	g->root = root;
	return 0;
}

/* alt_first - the first element of alternative a (they go on to E_END). */
static const struct elem *alt_first(const struct pg_grammar *g, size_t a)
{
	return &g->elems[g->alts[a]];
}

/*
 * compute_nullable - which rules may match nothing: a worklist over the
 * alternatives, each waiting on the rules among its elements that are
 * not known to match nothing yet (an alternative with characters never
 * does).
 */
static int compute_nullable(struct parser *p)
{
	struct pg_grammar *g = p->g;
	size_t nr = g->n_rules, na = g->n_alts, nq = 0, total = 0;
	uint32_t *cnt = calloc(na + 1, sizeof(*cnt));
	uint32_t *owner = malloc((na + 1) * sizeof(*owner));
	uint32_t *deg = calloc(nr + 1, sizeof(*deg));
	uint32_t *queue = malloc((nr + 1) * sizeof(*queue));
	uint8_t *chars = calloc(na + 1, 1);
	uint32_t *dep = NULL;

	if (!cnt || !owner || !deg || !queue || !chars)
		goto nomem;
	for (size_t r = 0; r < nr; r++)
		for (uint32_t k = 0; k < g->rules[r].n_alt; k++)
			owner[g->rules[r].alt + k] = (uint32_t)r;
	for (size_t a = 0; a < na; a++) {
		for (const struct elem *e = alt_first(g, a); e->type != E_END; e++) {
			if (e->type == E_CHARS) {
				chars[a] = 1;
			} else if (e->type == E_RULE || e->b > 0) {
				cnt[a]++;
				deg[e->a]++;
				total++;
			}
		}
	}
	dep = malloc((total + 1) * sizeof(*dep));
	if (!dep)
		goto nomem;
	for (size_t r = 0, at = 0; r <= nr; r++) {
		uint32_t d = deg[r];

		deg[r] = (uint32_t)at;	/* where rule r's dependants start */
		at += d;
	}
	for (size_t a = 0; a < na; a++)
		for (const struct elem *e = alt_first(g, a); e->type != E_END; e++)
			if (e->type == E_RULE || (e->type == E_REP && e->b > 0))
				dep[deg[e->a]++] = (uint32_t)a;
	/* deg[r] is now where r's dependants end; they start at deg[r - 1] */
	for (size_t a = 0; a < na; a++) {
		struct rule *o = &g->rules[owner[a]];

		if (!chars[a] && !cnt[a] && !o->nullable) {
			o->nullable = true;
			queue[nq++] = owner[a];
		}
	}
	while (nq) {
		uint32_t r = queue[--nq];

		for (uint32_t k = r ? deg[r - 1] : 0; k < deg[r]; k++) {
			uint32_t a = dep[k];
			struct rule *o = &g->rules[owner[a]];

			if (--cnt[a] == 0 && !chars[a] && !o->nullable) {
				o->nullable = true;
				queue[nq++] = owner[a];
			}
		}
	}
	free(cnt);
	free(owner);
	free(deg);
	free(queue);
	free(chars);
	free(dep);
	return 0;
nomem:
	free(cnt);
	free(owner);
	free(deg);
	free(queue);
	free(chars);
	free(dep);
	return oom(p);
}

/* elem_rule - the rule whose alternatives hold element i (a rule's
   elements are together, its alternatives in order). */
static uint32_t elem_rule(const struct pg_grammar *g, size_t i)
{
	for (uint32_t r = 0; r < g->n_rules; r++) {
		const struct rule *x = &g->rules[r];
		size_t lo, hi;

		if (!x->n_alt)
			continue;
		lo = g->alts[x->alt];
		hi = g->alts[x->alt + x->n_alt - 1];
		while (g->elems[hi].type != E_END)
			hi++;
		if (i >= lo && i <= hi)
			return r;
	}
	return g->root;
}

/* check_reps - no repetition that may go round more than once is of
   something that may match nothing (it could repeat without reading). */
static int check_reps(struct parser *p)
{
	const struct pg_grammar *g = p->g;
	size_t bad = NONE;
	const char *name;
	int n;

	for (size_t i = 0; i < g->n_elems; i++) {
		const struct elem *e = &g->elems[i];

		if (e->type == E_REP && e->c > 1 && g->rules[e->a].nullable &&
		    (bad == NONE || e->src < g->elems[bad].src))
			bad = i;
	}
	if (bad == NONE)
		return 0;
	name = rule_name(p, elem_rule(g, bad), &n);
	return perr(p, g->elems[bad].src, "repetition of something that may match "
		    "nothing (in rule '%.*s'): it could repeat forever without "
		    "reading a character", n, name);
}

/* Left corners: the rules a rule may begin with, without reading. */
struct corners {
	uint32_t *start;	/* (n_rules + 1) */
	uint32_t *to;
};

/* corners_of - the number of left corners of rule r, written to to[]
   unless to is NULL (a rule may be listed more than once). */
static size_t corners_of(const struct pg_grammar *g, uint32_t r, uint32_t *to)
{
	size_t n = 0;

	for (uint32_t k = 0; k < g->rules[r].n_alt; k++) {
		for (const struct elem *e = alt_first(g, g->rules[r].alt + k);
		     e->type != E_END; e++) {
			if (e->type == E_CHARS)
				break;
			if (e->type == E_REP && e->c == 0)
				continue;	/* x{0}: nothing */
			if (to)
				to[n] = e->a;
			n++;
			if (!g->rules[e->a].nullable && (e->type == E_RULE || e->b > 0))
				break;
		}
	}
	return n;
}

/* corners_build - every rule's left corners. */
static int corners_build(const struct pg_grammar *g, struct corners *c)
{
	size_t total = 0, nr = g->n_rules;

	c->to = NULL;
	c->start = malloc((nr + 1) * sizeof(*c->start));
	if (!c->start)
		return -ENOMEM;
	for (size_t r = 0; r < nr; r++) {
		c->start[r] = (uint32_t)total;
		total += corners_of(g, (uint32_t)r, NULL);
	}
	c->start[nr] = (uint32_t)total;
	c->to = malloc((total + 1) * sizeof(*c->to));
	if (!c->to)
		return -ENOMEM;
	for (size_t r = 0; r < nr; r++)
		corners_of(g, (uint32_t)r, c->to + c->start[r]);
	return 0;
}

/* left_rec_msg - the error for the cycle stk[from .. n) of rules, which
   leads back to stk[from]. */
static int left_rec_msg(struct parser *p, const uint32_t *stk, size_t from,
			size_t n)
{
	char path[256];
	size_t k = 0;
	uint32_t last = NONE, head = p->g->rules[stk[from]].owner;
	int nl;
	const char *name;

	path[0] = '\0';
	for (size_t i = from; i <= n && k + 72 < sizeof(path); i++) {
		uint32_t r = i < n ? stk[i] : stk[from];
		uint32_t o = p->g->rules[r].owner;
		int w;

		if (o == last && i < n)
			continue;
		last = o;
		name = rule_name(p, r, &nl);
		w = snprintf(path + k, sizeof(path) - k, "%s%.*s", k ? " -> " : "", nl, name);
		if (w < 0)
			break;
		k += (size_t)w;
	}
	name = rule_name(p, head, &nl);
	return perr(p, p->g->rules[head].def, "left recursion in rule '%.*s' (%s): "
		    "a rule must read a character before it comes back to itself",
		    nl, name, path);
}

/* check_left_rec - no rule reaches itself through left corners (a depth
   first search of the corners, without recursion). */
static int check_left_rec(struct parser *p)
{
	const struct pg_grammar *g = p->g;
	size_t nr = g->n_rules;
	struct corners c = { NULL, NULL };
	uint8_t *color = calloc(nr + 1, 1);	/* 0 new, 1 on the path, 2 done */
	uint32_t *stk = malloc((nr + 1) * sizeof(*stk));
	uint32_t *next = malloc((nr + 1) * sizeof(*next));
	int rc = 0;

	if (!color || !stk || !next || corners_build(g, &c)) {
		rc = oom(p);
		goto out;
	}
	for (uint32_t r0 = 0; r0 < nr && !rc; r0++) {
		size_t sp = 0;

		if (color[r0])
			continue;
		stk[sp] = r0;
		next[sp++] = c.start[r0];
		color[r0] = 1;
		while (sp && !rc) {
			uint32_t r = stk[sp - 1], t;

			if (next[sp - 1] == c.start[r + 1]) {
				color[r] = 2;
				sp--;
				continue;
			}
			t = c.to[next[sp - 1]++];
			if (color[t] == 1) {
				size_t from = 0;

				while (stk[from] != t)
					from++;
				rc = left_rec_msg(p, stk, from, sp);
			} else if (!color[t]) {
				color[t] = 1;
				stk[sp] = t;
				next[sp++] = c.start[t];
			}
		}
	}
out:
	free(c.start);
	free(c.to);
	free(color);
	free(stk);
	free(next);
	return rc;
}


/* ---- the cache of stacks and sets ---- */

/* node_hash - the hash of the stack with frame atop the stack of hash below. */
static uint64_t node_hash(uint64_t frame, uint64_t below)
{
	return mix64(below * 0x9e3779b97f4a7c15ull ^ mix64(frame + 0x632be59bd9b4e019ull));
}

/* cache_bytes - about what c holds (its arrays' sizes). */
static size_t cache_bytes(const struct cache *c)
{
	return c->cap_nodes * sizeof(*c->nodes) + c->ntab_cap * sizeof(*c->ntab) +
	       c->cap_sets * sizeof(*c->sets) + c->cap_ids * sizeof(*c->ss_ids) +
	       c->cap_iv * sizeof(*c->iv) + c->stab_cap * sizeof(*c->stab) +
	       c->cap_rows * sizeof(*c->rows) + c->cap_loc * sizeof(*c->loc);
}

/* cache_drop - forget every node and set; states re-intern their copies. */
static void cache_drop(struct cache *c)
{
	if (c->n_nodes > 1 || c->n_sets)
		c->flushes++;
	free(c->nodes);
	free(c->ntab);
	free(c->sets);
	free(c->ss_ids);
	free(c->iv);
	free(c->stab);
	free(c->rows);
	free(c->loc);
	c->nodes = NULL;
	c->ntab = c->stab = c->ss_ids = c->rows = NULL;
	c->sets = NULL;
	c->iv = NULL;
	c->loc = NULL;
	c->n_nodes = c->cap_nodes = c->ntab_cap = c->n_sets = c->cap_sets = 0;
	c->n_ids = c->cap_ids = c->n_iv = c->cap_iv = c->stab_cap = 0;
	c->cap_rows = c->cap_loc = 0;
	c->gen++;
}

/* cache_free - free c, scratch too. */
static void cache_free(struct cache *c)
{
	cache_drop(c);
	free(c->work);
	free(c->out);
	free(c->tmp);
	free(c->bnd);
	free(c->lst);
	free(c->chain);
	idset_free(&c->seen);
}

/* cache_base - make sure node 0 (the empty stack) is there. */
static int cache_base(struct cache *c)
{
	if (c->n_nodes)
		return 0;
	if (RESERVE(c->nodes, c->cap_nodes, 1))
		return -ENOMEM;
	c->nodes[0] = (struct node){ UINT64_MAX, EMPTY_HASH, 0, 0 };
	c->n_nodes = 1;
	return 0;
}

/* maybe_flush - drop g's cache when it is past its bound. */
static void maybe_flush(struct pg_grammar *g)
{
	if (cache_bytes(&g->c) > g->c.limit)
		cache_drop(&g->c);
}

/*
 * table_resize - double an open-addressed table of ids + 1 (*tab, *cap of
 * them; min: its first size) and put back items first .. n - 1, whose
 * 64-bit hashes stand stride bytes apart from hash0.
 */
static int table_resize(uint32_t **tab, size_t *cap, size_t min, const void *hash0,
			size_t stride, size_t first, size_t n)
{
	size_t c = *cap ? 2 * *cap : min;
	uint32_t *t = calloc(c, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = first; i < n; i++) {
		uint64_t h;
		size_t j;

		memcpy(&h, (const char *)hash0 + i * stride, sizeof(h));
		for (j = h & (c - 1); t[j]; j = (j + 1) & (c - 1))
			;
		t[j] = (uint32_t)i + 1;
	}
	free(*tab);
	*tab = t;
	*cap = c;
	return 0;
}

/* ntab_resize - double the table of nodes (node 0, the empty stack, is
   not in it). */
static int ntab_resize(struct cache *c)
{
	return table_resize(&c->ntab, &c->ntab_cap, 1024, c->nodes ? &c->nodes[0].hash : NULL,
			    sizeof(c->nodes[0]), 1, c->n_nodes);
}

/*
 * mknode - the stack with frame atop stack parent, made when new.
 * NODE_BAD when parent is, when it would be deeper than
 * PG_GRAMMAR_MAX_DEPTH (c->over) or out of memory (c->nomem).
 */
static uint32_t mknode(struct cache *c, uint64_t frame, uint32_t parent)
{
	uint64_t h;
	uint32_t depth, id;
	size_t j;

	if (parent == NODE_BAD)
		return NODE_BAD;
	depth = c->nodes[parent].depth + 1;
	if (depth > PG_GRAMMAR_MAX_DEPTH) {
		c->over = true;
		return NODE_BAD;
	}
	h = node_hash(frame, c->nodes[parent].hash);
	if (c->ntab_cap) {
		for (j = h & (c->ntab_cap - 1); c->ntab[j]; j = (j + 1) & (c->ntab_cap - 1)) {
			const struct node *n = &c->nodes[c->ntab[j] - 1];

			if (n->frame == frame && n->parent == parent)
				return c->ntab[j] - 1;
		}
	}
	if (c->n_nodes >= T_NOMEM || ((c->n_nodes + 1) * 2 > c->ntab_cap && ntab_resize(c)) ||
	    RESERVE(c->nodes, c->cap_nodes, c->n_nodes + 1)) {
		c->nomem = true;
		return NODE_BAD;
	}
	id = (uint32_t)c->n_nodes++;
	c->nodes[id] = (struct node){ frame, h, parent, depth };
	for (j = h & (c->ntab_cap - 1); c->ntab[j]; j = (j + 1) & (c->ntab_cap - 1))
		;
	c->ntab[j] = id + 1;
	return id;
}

/* set_hash - the hash of the stacks ids[0 .. n), from their contents. */
static uint64_t set_hash(const struct cache *c, const uint32_t *ids, size_t n)
{
	uint64_t h = n;

	for (size_t i = 0; i < n; i++)
		h += mix64(c->nodes[ids[i]].hash ^ 0x5851f42d4c957f2dull);
	return mix64(h);
}

/* stab_resize - double the table of sets. */
static int stab_resize(struct cache *c)
{
	return table_resize(&c->stab, &c->stab_cap, 256, c->sets ? &c->sets[0].hash : NULL,
			    sizeof(c->sets[0]), 0, c->n_sets);
}

/* chars_has - whether class e takes code point cp (a binary search). */
static bool chars_has(const struct pg_grammar *g, const struct elem *e, uint32_t cp)
{
	const uint32_t *r = g->ranges + 2 * (size_t)e->a;
	size_t lo = 0, hi = e->b;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cp < r[2 * mid])
			hi = mid;
		else if (cp > r[2 * mid + 1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* unique_u32 - sorted a[0 .. n) without repeats; the new n. */
static size_t unique_u32(uint32_t *a, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!k || a[k - 1] != a[i])
			a[k++] = a[i];
	return k;
}

/* tops_ranges - the ranges of the classes atop stacks ids[0 .. n), each
   class once, into c->tmp (lo << 32 | hi) and their edges into c->bnd;
   the numbers of each in *nr and *nb. */
static int tops_ranges(struct pg_grammar *g, const uint32_t *ids, size_t n,
		       size_t *nr, size_t *nb)
{
	struct cache *c = &g->c;
	size_t np = 0, total = 0;

	if (RESERVE(c->work, c->cap_work, n + 1))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (ids[i])
			c->work[np++] = F_POS(c->nodes[ids[i]].frame);
	qsort(c->work, np, sizeof(*c->work), cmp_u32);
	np = unique_u32(c->work, np);
	for (size_t i = 0; i < np; i++)
		total += g->elems[c->work[i]].b;
	if (RESERVE(c->tmp, c->cap_tmp, total + 1) ||
	    RESERVE(c->bnd, c->cap_bnd, 2 * total + 1))
		return -ENOMEM;
	*nr = 0;
	*nb = 0;
	c->bnd[(*nb)++] = 0;
	for (size_t i = 0; i < np; i++) {
		const struct elem *e = &g->elems[c->work[i]];

		for (uint32_t k = 0; k < e->b; k++) {
			uint32_t lo = g->ranges[2 * ((size_t)e->a + k)];
			uint32_t hi = g->ranges[2 * ((size_t)e->a + k) + 1];

			c->tmp[(*nr)++] = (uint64_t)lo << 32 | hi;
			c->bnd[(*nb)++] = lo;
			if (hi < MAX_CP)
				c->bnd[(*nb)++] = hi + 1;
		}
	}
	return 0;
}

/*
 * build_iv - set s's intervals: the code points cut at every edge of the
 * classes atop its stacks, each interval taken by some stack or by none.
 */
static int build_iv(struct pg_grammar *g, const uint32_t *ids, size_t n,
		    struct sset *s)
{
	struct cache *c = &g->c;
	size_t nr, nb, nu = 0, u = 0;

	if (tops_ranges(g, ids, n, &nr, &nb))
		return -ENOMEM;
	qsort(c->tmp, nr, sizeof(*c->tmp), cmp_u64);
	qsort(c->bnd, nb, sizeof(*c->bnd), cmp_u32);
	nb = unique_u32(c->bnd, nb);
	for (size_t i = 0; i < nr; i++) {	/* merge the ranges */
		uint32_t lo = (uint32_t)(c->tmp[i] >> 32), hi = (uint32_t)c->tmp[i];

		if (nu && lo <= (uint32_t)c->tmp[nu - 1] + 1) {
			if (hi > (uint32_t)c->tmp[nu - 1])
				c->tmp[nu - 1] = (c->tmp[nu - 1] & ~0xffffffffull) | hi;
		} else {
			c->tmp[nu++] = c->tmp[i];
		}
	}
	if (RESERVE(c->iv, c->cap_iv, c->n_iv + nb))
		return -ENOMEM;
	s->iv = (uint32_t)c->n_iv;
	s->n_iv = (uint32_t)nb;
	s->any = false;
	for (size_t k = 0; k < nb; k++) {
		uint32_t lo = c->bnd[k];
		bool cov;

		while (u < nu && (uint32_t)c->tmp[u] < lo)
			u++;
		cov = u < nu && (uint32_t)(c->tmp[u] >> 32) <= lo;
		c->iv[c->n_iv++] = (struct ival){ lo, cov ? T_UNKNOWN : T_DEAD };
		s->any |= cov;
	}
	return 0;
}

/* intern_set - the set of the stacks ids[0 .. n) (sorted, no repeats),
   made when new; T_NOMEM. */
static uint32_t intern_set(struct pg_grammar *g, const uint32_t *ids, size_t n)
{
	struct cache *c = &g->c;
	uint64_t h = set_hash(c, ids, n);
	struct sset *s;
	uint32_t id;
	size_t j;

	if (c->stab_cap) {
		for (j = h & (c->stab_cap - 1); c->stab[j]; j = (j + 1) & (c->stab_cap - 1)) {
			s = &c->sets[c->stab[j] - 1];
			if (s->hash == h && s->n == n &&
			    !memcmp(c->ss_ids + s->ids, ids, n * sizeof(*ids)))
				return c->stab[j] - 1;
		}
	}
	if (c->n_sets + 1 >= T_NOMEM || c->n_ids + n >= UINT32_MAX ||
	    ((c->n_sets + 1) * 2 > c->stab_cap && stab_resize(c)) ||
	    RESERVE(c->sets, c->cap_sets, c->n_sets + 1) ||
	    RESERVE(c->ss_ids, c->cap_ids, c->n_ids + n) ||
	    RESERVE(c->rows, c->cap_rows, (c->n_sets + 1) * 128))
		return T_NOMEM;
	id = (uint32_t)c->n_sets;
	s = &c->sets[id];
	s->hash = h;
	s->ids = (uint32_t)c->n_ids;
	s->n = (uint32_t)n;
	s->done = n && ids[0] == 0;
	if (build_iv(g, ids, n, s))
		return T_NOMEM;
	memcpy(c->ss_ids + c->n_ids, ids, n * sizeof(*ids));
	c->n_ids += n;
	memset(c->rows + (size_t)id * 128, 0xff, 128 * sizeof(*c->rows));
	c->n_sets++;
	for (j = h & (c->stab_cap - 1); c->stab[j]; j = (j + 1) & (c->stab_cap - 1))
		;
	c->stab[j] = id + 1;
	return id;
}

/* ---- one step: expanding stacks ---- */

/* step_begin - a new step: nothing seen, nothing out. */
static void step_begin(struct cache *c)
{
	idset_clear(&c->seen);
	c->n_work = 0;
	c->n_out = 0;
	c->visits = 0;
	c->over = false;
	c->nomem = false;
}

/* push - stack id to expand, once a step. */
static void push(struct cache *c, uint32_t id)
{
	int r;

	if (id == NODE_BAD || c->over || c->nomem)
		return;
	r = idset_add(&c->seen, id);
	if (r < 0) {
		c->nomem = true;
		return;
	}
	if (!r)
		return;
	if (++c->visits > MAX_VISITS) {
		c->over = true;
		return;
	}
	if (RESERVE(c->work, c->cap_work, c->n_work + 1)) {
		c->nomem = true;
		return;
	}
	c->work[c->n_work++] = id;
}

/* emit - stack id is one of the step's results. */
static void emit(struct cache *c, uint32_t id)
{
	if (RESERVE(c->out, c->cap_out, c->n_out + 1)) {
		c->nomem = true;
		return;
	}
	c->out[c->n_out++] = id;
}

/* next_node - the stack that goes on after element pos atop parent: the
   next element's frame, or parent itself after an alternative's last. */
static uint32_t next_node(struct pg_grammar *g, uint32_t pos, uint32_t parent)
{
	if (g->elems[pos + 1].type == E_END)
		return parent;
	return mknode(&g->c, FRAME(pos + 1, 0), parent);
}

/* push_alts - rule r's alternatives, each begun atop stack cont. */
static void push_alts(struct pg_grammar *g, uint32_t r, uint32_t cont)
{
	const struct rule *x = &g->rules[r];

	if (cont == NODE_BAD)
		return;
	for (uint32_t k = 0; k < x->n_alt; k++) {
		uint32_t at = g->alts[x->alt + k];

		push(&g->c, g->elems[at].type == E_END ? cont :
		     mknode(&g->c, FRAME(at, 0), cont));
	}
}

/*
 * expand_rep - a repetition's frame, cnt rounds done: it may end (when cnt
 * is at least its least count) and may go round again (below its most;
 * past the least of one without a most, the count stays, so that the
 * stack does not change).
 */
static void expand_rep(struct pg_grammar *g, uint32_t pos, uint32_t cnt,
		       uint32_t parent)
{
	const struct elem *e = &g->elems[pos];
	uint32_t nc = cnt + 1, cont;

	if (cnt >= e->b)
		push(&g->c, next_node(g, pos, parent));
	if (cnt >= e->c)
		return;
	if (e->c == REP_INF && nc > e->b)
		nc = e->b;
	if (nc == e->c)
		cont = next_node(g, pos, parent);
	else
		cont = mknode(&g->c, FRAME(pos, nc), parent);
	push_alts(g, e->a, cont);
}

/* expand_one - stack id into those with a class atop (or the empty one). */
static void expand_one(struct pg_grammar *g, uint32_t id)
{
	struct node nd;
	const struct elem *e;

	if (!id) {
		emit(&g->c, 0);
		return;
	}
	nd = g->c.nodes[id];
	e = &g->elems[F_POS(nd.frame)];
	switch (e->type) {
	case E_CHARS:
		emit(&g->c, id);
		break;
	case E_END:
		push(&g->c, nd.parent);
		break;
	case E_RULE:
		push_alts(g, e->a, next_node(g, F_POS(nd.frame), nd.parent));
		break;
	default:
		expand_rep(g, F_POS(nd.frame), F_CNT(nd.frame), nd.parent);
	}
}

/* step_end - expand what was pushed; the set of the results, T_DEAD (none),
   T_OVER or T_NOMEM. */
static uint32_t step_end(struct pg_grammar *g)
{
	struct cache *c = &g->c;

	while (c->n_work && !c->over && !c->nomem)
		expand_one(g, c->work[--c->n_work]);
	if (c->nomem)
		return T_NOMEM;
	if (c->over || c->n_out > PG_GRAMMAR_MAX_STACKS)
		return T_OVER;
	if (!c->n_out)
		return T_DEAD;
	qsort(c->out, c->n_out, sizeof(*c->out), cmp_u32);
	return intern_set(g, c->out, c->n_out);
}

/* compute - where set ss goes on the code points of its interval k (an
   index in c->iv): each stack whose class takes them, past it. */
static uint32_t compute(struct pg_grammar *g, uint32_t ss, size_t k)
{
	struct cache *c = &g->c;
	uint32_t cp = c->iv[k].lo, n = c->sets[ss].n, first = c->sets[ss].ids;

	step_begin(c);
	for (uint32_t i = 0; i < n && !c->over && !c->nomem; i++) {
		uint32_t id = c->ss_ids[first + i];
		struct node nd;

		if (!id)
			continue;
		nd = c->nodes[id];
		if (chars_has(g, &g->elems[F_POS(nd.frame)], cp))
			push(c, next_node(g, F_POS(nd.frame), nd.parent));
	}
	return step_end(g);
}

/* find_iv - the index in c->iv of set ss's interval holding cp. */
static size_t find_iv(const struct cache *c, uint32_t ss, uint32_t cp)
{
	const struct sset *s = &c->sets[ss];
	size_t lo = s->iv, hi = (size_t)s->iv + s->n_iv;	/* iv[lo].lo <= cp */

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (c->iv[mid].lo <= cp)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* trans - where set ss goes on code point cp (computed once). */
static uint32_t trans(struct pg_grammar *g, uint32_t ss, uint32_t cp)
{
	struct cache *c = &g->c;
	uint32_t t;
	size_t k;

	if (cp < 128 && (t = c->rows[(size_t)ss * 128 + cp]) != T_UNKNOWN)
		return t;
	k = find_iv(c, ss, cp);
	t = c->iv[k].to;
	if (t == T_UNKNOWN) {
		t = compute(g, ss, k);
		if (t == T_NOMEM)
			return t;
		c->iv[k].to = t;
	}
	if (cp < 128)
		c->rows[(size_t)ss * 128 + cp] = t;
	return t;
}

/* any_taken - whether some stack of set ss takes a code point in lo .. hi. */
static bool any_taken(const struct cache *c, uint32_t ss, uint32_t lo, uint32_t hi)
{
	const struct sset *s = &c->sets[ss];
	size_t end = (size_t)s->iv + s->n_iv;

	for (size_t k = find_iv(c, ss, lo); k < end && c->iv[k].lo <= hi; k++)
		if (c->iv[k].to != T_DEAD)
			return true;
	return false;
}

/* ---- bytes ---- */

/* utf8_lead - *p begun by lead byte b; false when b begins no character. */
static bool utf8_lead(uint8_t b, struct part *p)
{
	if (b >= 0xc2 && b <= 0xdf)
		*p = (struct part){ b & 0x1fu, 1, 0x80, 0xbf };
	else if (b == 0xe0)
		*p = (struct part){ 0, 2, 0xa0, 0xbf };
	else if (b == 0xed)
		*p = (struct part){ 0xd, 2, 0x80, 0x9f };
	else if (b >= 0xe1 && b <= 0xef)
		*p = (struct part){ b & 0x0fu, 2, 0x80, 0xbf };
	else if (b == 0xf0)
		*p = (struct part){ 0, 3, 0x90, 0xbf };
	else if (b >= 0xf1 && b <= 0xf3)
		*p = (struct part){ b & 0x07u, 3, 0x80, 0xbf };
	else if (b == 0xf4)
		*p = (struct part){ 4, 3, 0x80, 0x8f };
	else
		return false;
	return true;
}

/* part_span - the code points that may complete p. */
static void part_span(const struct part *p, uint32_t *lo, uint32_t *hi)
{
	unsigned sh = 6u * (p->need - 1u);
	uint32_t base = p->cp << (6u * p->need);

	*lo = base | (uint32_t)(p->lo & 0x3f) << sh;
	*hi = base | (uint32_t)(p->hi & 0x3f) << sh | ((1u << sh) - 1);
}

/*
 * step_byte - where set ss with the character *pt begun goes on byte b
 * (*pt updated): a set, or T_DEAD (b cannot come: not UTF-8, or no stack
 * takes the character or any completion of it), T_OVER, T_NOMEM.
 */
static uint32_t step_byte(struct pg_grammar *g, uint32_t ss, struct part *pt,
			  uint8_t b)
{
	uint32_t lo, hi;

	if (!pt->need) {
		if (b < 0x80)
			return trans(g, ss, b);
		if (!utf8_lead(b, pt))
			return T_DEAD;
	} else {
		if (b < pt->lo || b > pt->hi)
			return T_DEAD;
		pt->cp = pt->cp << 6 | (b & 0x3fu);
		pt->lo = 0x80;
		pt->hi = 0xbf;
		if (!--pt->need) {
			uint32_t cp = pt->cp;

			*pt = (struct part){ 0, 0, 0, 0 };
			return trans(g, ss, cp);
		}
	}
	part_span(pt, &lo, &hi);
	return any_taken(&g->c, ss, lo, hi) ? ss : T_DEAD;
}


/* ---- states ---- */

/* state_frames - the frames of s's nodes (s->mem). */
static uint64_t *state_frames(const struct pg_grammar_state *s)
{
	return s->mem;
}

/* state_parents - the node below each of s's nodes. */
static uint32_t *state_parents(const struct pg_grammar_state *s)
{
	return (uint32_t *)(s->mem + s->n_loc + 1);
}

/* state_tops - the node atop each of s's stacks. */
static uint32_t *state_tops(const struct pg_grammar_state *s)
{
	return state_parents(s) + s->n_loc + 1;
}

/* state_mem_bytes - the size of a state's mem. */
static size_t state_mem_bytes(size_t n_loc, size_t n_stacks)
{
	return (n_loc + 1) * (sizeof(uint64_t) + sizeof(uint32_t)) +
	       n_stacks * sizeof(uint32_t);
}

/* loc_reserve - the numbering of nodes for a state's copy, emptied. */
static int loc_reserve(struct cache *c)
{
	size_t old = c->cap_loc;

	if (RESERVE(c->loc, c->cap_loc, c->n_nodes))
		return -ENOMEM;
	if (c->cap_loc > old)
		memset(c->loc + old, 0, (c->cap_loc - old) * sizeof(*c->loc));
	if (++c->loc_cur == 0) {
		memset(c->loc, 0, c->cap_loc * sizeof(*c->loc));
		c->loc_cur = 1;
	}
	return 0;
}

/* number_stack - number the nodes of stack x that have no number yet,
   from the bottom up, after *nl (c->lst[k] is the node numbered k). */
static int number_stack(struct cache *c, uint32_t x, uint32_t *nl)
{
	size_t len = 0;

	while (x && c->loc[x].stamp != c->loc_cur) {
		if (RESERVE(c->chain, c->cap_chain, len + 1))
			return -ENOMEM;
		c->chain[len++] = x;
		x = c->nodes[x].parent;
	}
	if (RESERVE(c->lst, c->cap_lst, *nl + len + 2))
		return -ENOMEM;
	while (len) {
		x = c->chain[--len];
		c->loc[x] = (struct loc){ c->loc_cur, ++*nl };
		c->lst[*nl] = x;
	}
	return 0;
}

/* store - make s a copy of set ss (its part aside); -ENOMEM, s unchanged. */
static int store(struct pg_grammar *g, struct pg_grammar_state *s, uint32_t ss)
{
	struct cache *c = &g->c;
	uint32_t n = c->sets[ss].n, first = c->sets[ss].ids, nl = 0;
	struct pg_grammar_state t;

	if (loc_reserve(c))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		if (number_stack(c, c->ss_ids[first + i], &nl))
			return -ENOMEM;
	t = *s;
	t.n_loc = nl;
	t.n_stacks = n;
	t.mem = malloc(state_mem_bytes(nl, n));
	if (!t.mem)
		return -ENOMEM;
	state_frames(&t)[0] = UINT64_MAX;
	state_parents(&t)[0] = 0;
	for (uint32_t k = 1; k <= nl; k++) {
		const struct node *nd = &c->nodes[c->lst[k]];

		state_frames(&t)[k] = nd->frame;
		state_parents(&t)[k] = nd->parent ? c->loc[nd->parent].idx : 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = c->ss_ids[first + i];

		state_tops(&t)[i] = id ? c->loc[id].idx : 0;
	}
	t.gen = c->gen;
	t.ss = ss;
	t.hash = c->sets[ss].hash;
	t.set_done = c->sets[ss].done;
	t.set_any = c->sets[ss].any;
	free(s->mem);
	*s = t;
	return 0;
}

/* ensure - s's set in g's cache, interned again from s's copy when the
   cache was dropped since; T_NOMEM. */
static uint32_t ensure(struct pg_grammar *g, struct pg_grammar_state *s)
{
	struct cache *c = &g->c;
	const uint64_t *fr = state_frames(s);
	const uint32_t *par = state_parents(s), *tops = state_tops(s);
	uint32_t id;

	if (s->gen == c->gen)
		return s->ss;
	if (cache_base(c) || RESERVE(c->lst, c->cap_lst, (size_t)s->n_loc + 1) ||
	    RESERVE(c->out, c->cap_out, (size_t)s->n_stacks + 1))
		return T_NOMEM;
	c->over = false;
	c->nomem = false;
	c->lst[0] = 0;
	for (uint32_t k = 1; k <= s->n_loc; k++) {
		c->lst[k] = mknode(c, fr[k], c->lst[par[k]]);
		if (c->lst[k] == NODE_BAD)
			return T_NOMEM;
	}
	for (uint32_t i = 0; i < s->n_stacks; i++)
		c->out[i] = c->lst[tops[i]];
	qsort(c->out, s->n_stacks, sizeof(*c->out), cmp_u32);
	id = intern_set(g, c->out, s->n_stacks);
	if (id != T_NOMEM) {
		s->gen = c->gen;
		s->ss = id;
	}
	return id;
}

/* pg_grammar_state_clone - a copy of s and of its stacks. */
struct pg_grammar_state *pg_grammar_state_clone(const struct pg_grammar_state *s)
{
	struct pg_grammar_state *t = malloc(sizeof(*t));
	size_t n = state_mem_bytes(s->n_loc, s->n_stacks);

	if (!t)
		return NULL;
	*t = *s;
	t->mem = malloc(n);
	if (!t->mem) {
		free(t);
		return NULL;
	}
	memcpy(t->mem, s->mem, n);
	return t;
}

/* pg_grammar_state_create - a copy of g's start. */
struct pg_grammar_state *pg_grammar_state_create(struct pg_grammar *g)
{
	return pg_grammar_state_clone(g->start);
}

/* pg_grammar_state_free - free s and its stacks. */
void pg_grammar_state_free(struct pg_grammar_state *s)
{
	if (!s)
		return;
	free(s->mem);
	free(s);
}

/* pg_grammar_done - the set holds the empty stack, no character begun. */
int pg_grammar_done(const struct pg_grammar_state *s)
{
	return s->set_done && !s->part.need;
}

/* pg_grammar_dead - no stack takes any character, none begun. */
int pg_grammar_dead(const struct pg_grammar_state *s)
{
	return !s->set_any && !s->part.need;
}

/* tok_bytes - token id's bytes and their number. */
static const uint8_t *tok_bytes(const struct pg_grammar_vocab *v, int32_t id,
				size_t *len)
{
	*len = v->off[id + 1] - v->off[id];
	return v->bytes + v->off[id];
}

/* walk_token - where s goes on token id's bytes (*pt: the character left
   begun): a set, T_DEAD, T_OVER or T_NOMEM.  id has bytes. */
static uint32_t walk_token(struct pg_grammar *g, struct pg_grammar_state *s,
			   const struct pg_grammar_vocab *v, int32_t id,
			   struct part *pt)
{
	size_t len;
	const uint8_t *b = tok_bytes(v, id, &len);
	uint32_t ss;

	maybe_flush(g);
	ss = ensure(g, s);
	*pt = s->part;
	for (size_t i = 0; i < len && ss < T_NOMEM; i++)
		ss = step_byte(g, ss, pt, b[i]);
	return ss;
}

/* allows - 1 when token id may come next, 0 when not, -ENOMEM. */
static int allows(const struct pg_grammar_state *cs, const struct pg_grammar_vocab *v,
		  int32_t id)
{
	struct pg_grammar_state *s = (struct pg_grammar_state *)cs;	/* its cache */
	struct part pt;
	size_t len;
	uint32_t to;

	if (id < 0 || id >= v->n)
		return 0;
	if (v->eog[id])
		return pg_grammar_done(s);
	tok_bytes(v, id, &len);
	if (!len)
		return 0;
	to = walk_token(s->g, s, v, id, &pt);
	if (to == T_NOMEM)
		return -ENOMEM;
	return to < T_NOMEM;
}

/* pg_grammar_allows - allows(), out of memory as a refusal. */
int pg_grammar_allows(const struct pg_grammar_state *s,
		      const struct pg_grammar_vocab *v, int32_t id)
{
	return allows(s, v, id) > 0;
}

/* pg_grammar_accept - s moved to where token id leads, when it may. */
int pg_grammar_accept(struct pg_grammar_state *s,
		      const struct pg_grammar_vocab *v, int32_t id)
{
	struct part pt;
	size_t len;
	uint32_t to;

	if (id < 0 || id >= v->n)
		return -EINVAL;
	if (v->eog[id])
		return pg_grammar_done(s) ? 0 : -EINVAL;
	tok_bytes(v, id, &len);
	if (!len)
		return -EINVAL;
	to = walk_token(s->g, s, v, id, &pt);
	if (to == T_NOMEM)
		return -ENOMEM;
	if (to == T_OVER)
		return -E2BIG;
	if (to >= T_NOMEM)
		return -EINVAL;
	if (to != s->ss && store(s->g, s, to))
		return -ENOMEM;
	s->part = pt;
	return 0;
}

/* ---- masks ---- */

/* mc_bucket - the bucket of a key. */
static size_t mc_bucket(const struct mcache *m, uint64_t key, uint64_t key2, uint32_t n)
{
	return mix64(key ^ mix64(key2 + n)) & (m->n_bucket - 1);
}

/* mc_entry_bytes - what one mask of m costs. */
static size_t mc_entry_bytes(const struct mcache *m)
{
	return m->words * sizeof(uint32_t) + sizeof(struct mentry) + 2 * sizeof(uint32_t);
}

/* mc_clear - drop every mask (their counts stay). */
static void mc_clear(struct mcache *m)
{
	for (uint32_t i = m->head; i != NONE; i = m->e[i].next)
		free(m->e[i].bits);
	free(m->e);
	free(m->bucket);
	m->e = NULL;
	m->bucket = NULL;
	m->n_e = m->cap_e = m->n_bucket = m->bytes = m->live = 0;
	m->free = m->head = m->tail = NONE;
}

/* mc_unlink - take entry i off the list of use. */
static void mc_unlink(struct mcache *m, uint32_t i)
{
	struct mentry *e = &m->e[i];

	if (e->prev != NONE)
		m->e[e->prev].next = e->next;
	else
		m->head = e->next;
	if (e->next != NONE)
		m->e[e->next].prev = e->prev;
	else
		m->tail = e->prev;
}

/* mc_front - put entry i first on the list of use. */
static void mc_front(struct mcache *m, uint32_t i)
{
	m->e[i].prev = NONE;
	m->e[i].next = m->head;
	if (m->head != NONE)
		m->e[m->head].prev = i;
	m->head = i;
	if (m->tail == NONE)
		m->tail = i;
}

/* mc_find - the entry of state s, or NONE. */
static uint32_t mc_find(const struct mcache *m, const struct pg_grammar_state *s,
			uint64_t key2)
{
	if (!m->n_bucket)
		return NONE;
	for (uint32_t i = m->bucket[mc_bucket(m, s->hash, key2, s->n_stacks)]; i != NONE;
	     i = m->e[i].chain)
		if (m->e[i].key == s->hash && m->e[i].key2 == key2 && m->e[i].n == s->n_stacks)
			return i;
	return NONE;
}

/* mc_evict - drop the least recently used mask. */
static void mc_evict(struct mcache *m)
{
	uint32_t i = m->tail, *pp;
	struct mentry *e = &m->e[i];

	mc_unlink(m, i);
	pp = &m->bucket[mc_bucket(m, e->key, e->key2, e->n)];
	while (*pp != i)
		pp = &m->e[*pp].chain;
	*pp = e->chain;
	free(e->bits);
	e->bits = NULL;
	e->chain = m->free;
	m->free = i;
	m->bytes -= mc_entry_bytes(m);
	m->live--;
}

/* mc_rehash - double the buckets. */
static int mc_rehash(struct mcache *m)
{
	size_t nb = m->n_bucket ? 2 * m->n_bucket : 64;
	uint32_t *b = malloc(nb * sizeof(*b));

	if (!b)
		return -ENOMEM;
	memset(b, 0xff, nb * sizeof(*b));
	free(m->bucket);
	m->bucket = b;
	m->n_bucket = nb;
	for (uint32_t i = m->head; i != NONE; i = m->e[i].next) {
		size_t j = mc_bucket(m, m->e[i].key, m->e[i].key2, m->e[i].n);

		m->e[i].chain = b[j];
		b[j] = i;
	}
	return 0;
}

/* mc_insert - keep bits (count tokens) as s's mask, when it fits. */
static void mc_insert(struct mcache *m, const struct pg_grammar_state *s,
		      uint64_t key2, const uint32_t *bits, int count)
{
	size_t eb = mc_entry_bytes(m), j;
	uint32_t i;

	if (eb > m->limit)
		return;
	while (m->live && m->bytes + eb > m->limit)
		mc_evict(m);
	if (m->live + 1 > m->n_bucket && mc_rehash(m))
		return;
	if (m->free != NONE) {
		i = m->free;
		m->free = m->e[i].chain;
	} else {
		if (m->n_e >= NONE - 1 || RESERVE(m->e, m->cap_e, m->n_e + 1))
			return;
		i = (uint32_t)m->n_e++;
	}
	m->e[i].bits = malloc(m->words * sizeof(uint32_t));
	if (!m->e[i].bits) {
		m->e[i].chain = m->free;
		m->free = i;
		return;
	}
	memcpy(m->e[i].bits, bits, m->words * sizeof(uint32_t));
	m->e[i].key = s->hash;
	m->e[i].key2 = key2;
	m->e[i].n = s->n_stacks;
	m->e[i].count = count;
	j = mc_bucket(m, s->hash, key2, s->n_stacks);
	m->e[i].chain = m->bucket[j];
	m->bucket[j] = i;
	mc_front(m, i);
	m->bytes += eb;
	m->live++;
}

/* part_key - a state's begun character as a number (0: none). */
static uint64_t part_key(const struct part *p)
{
	return (uint64_t)p->cp | (uint64_t)p->need << 32 | (uint64_t)p->lo << 40 |
	       (uint64_t)p->hi << 48;
}

/* set_bit - token id allowed. */
static void set_bit(uint32_t *bits, uint32_t id)
{
	bits[id / 32] |= 1u << (id % 32);
}

/* add_eog - the end-of-generation tokens, where s is done; their number. */
static int add_eog(const struct pg_grammar_state *s, const struct pg_grammar_vocab *v,
		   uint32_t *bits)
{
	if (!pg_grammar_done(s))
		return 0;
	for (uint32_t k = 0; k < v->n_eog; k++)
		set_bit(bits, v->eog_ids[k]);
	return (int)v->n_eog;
}

/* mask_slow - the mask token by token, end-of-generation included (the
   cache grew too big during a walk). */
static int mask_slow(struct pg_grammar_state *s, const struct pg_grammar_vocab *v,
		     uint32_t *bits)
{
	int count = 0;

	memset(bits, 0, ((size_t)v->n + 31) / 32 * sizeof(*bits));
	cache_drop(&s->g->c);
	for (int32_t id = 0; id < v->n; id++) {
		int r = allows(s, v, id);

		if (r < 0)
			return r;
		if (r) {
			set_bit(bits, (uint32_t)id);
			count++;
		}
	}
	return count;
}

/* mask_walk - the mask by one walk of v's trie: a subtree whose first
   bytes cannot come is skipped whole. */
static int mask_walk(struct pg_grammar_state *s, const struct pg_grammar_vocab *v,
		     uint32_t *bits)
{
	struct pg_grammar *g = s->g;
	size_t i = 0;
	int count = 0;

	memset(bits, 0, ((size_t)v->n + 31) / 32 * sizeof(*bits));
	maybe_flush(g);
	if (RESERVE(g->w, g->cap_w, (size_t)v->max_depth + 1))
		return -ENOMEM;
	g->w[0].ss = ensure(g, s);
	g->w[0].pt = s->part;
	if (g->w[0].ss == T_NOMEM)
		return -ENOMEM;
	while (i < v->n_nodes) {
		const struct tnode *t = &v->nodes[i];
		struct part pt = g->w[t->depth - 1].pt;
		uint32_t to = step_byte(g, g->w[t->depth - 1].ss, &pt, t->byte);

		if (to == T_NOMEM)
			return -ENOMEM;
		if (to > T_NOMEM) {
			i = t->end;
			continue;
		}
		g->w[t->depth] = (struct wstep){ to, pt };
		for (uint32_t k = 0; k < t->n_tok; k++)
			set_bit(bits, v->order[t->tok + k]);
		count += (int)t->n_tok;
		if (!(++i & 255) && cache_bytes(&g->c) > 2 * g->c.limit)
			return mask_slow(s, v, bits);
	}
	return count + add_eog(s, v, bits);
}

/* pg_grammar_mask - the cached mask of s's set and part, else a walk. */
int pg_grammar_mask(const struct pg_grammar_state *cs,
		    const struct pg_grammar_vocab *v, uint32_t *bits)
{
	struct pg_grammar_state *s = (struct pg_grammar_state *)cs;	/* its cache */
	struct mcache *m = &s->g->m;
	uint64_t key2 = part_key(&s->part);
	uint32_t i;
	int n;

	if (m->vocab != v->serial) {
		mc_clear(m);
		m->vocab = v->serial;
		m->words = ((size_t)v->n + 31) / 32;
	}
	i = mc_find(m, s, key2);
	if (i != NONE) {
		m->hits++;
		mc_unlink(m, i);
		mc_front(m, i);
		memcpy(bits, m->e[i].bits, m->words * sizeof(*bits));
		return m->e[i].count;
	}
	m->misses++;
	n = mask_walk(s, v, bits);
	if (n >= 0)
		mc_insert(m, s, key2, bits, n);
	return n;
}


/* ---- the vocabulary ---- */

/* tok_cmp - the order of tokens a and b by their bytes (then by id). */
static int tok_cmp(const struct pg_grammar_vocab *v, uint32_t a, uint32_t b)
{
	size_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b];
	int r = memcmp(v->bytes + v->off[a], v->bytes + v->off[b], la < lb ? la : lb);

	if (r)
		return r;
	if (la != lb)
		return la < lb ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* sort_tokens - ids[0 .. n) by tok_cmp (a merge sort, tmp as big). */
static void sort_tokens(const struct pg_grammar_vocab *v, uint32_t *ids,
			uint32_t *tmp, size_t n)
{
	uint32_t *src = ids, *dst = tmp, *x;

	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n;
			size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;

			while (i < mid && j < hi)
				dst[k++] = tok_cmp(v, src[i], src[j]) <= 0 ? src[i++] : src[j++];
			while (i < mid)
				dst[k++] = src[i++];
			while (j < hi)
				dst[k++] = src[j++];
		}
		x = src;
		src = dst;
		dst = x;
	}
	if (src != ids)
		memcpy(ids, src, n * sizeof(*ids));
}

/* trie_add - the nodes of token k of the order (its bytes b, len of them)
   below those it shares with the one before (lcp bytes); open[d] is the
   node at depth d of the path so far, *cur its depth. */
static void trie_add(struct pg_grammar_vocab *v, uint32_t *open, uint32_t *cur,
		     uint32_t k, const uint8_t *b, uint32_t len, uint32_t lcp)
{
	struct tnode *t;

	for (; *cur > lcp; (*cur)--)
		v->nodes[open[*cur]].end = (uint32_t)v->n_nodes;
	for (uint32_t d = lcp + 1; d <= len; d++) {
		open[d] = (uint32_t)v->n_nodes;
		v->nodes[v->n_nodes++] = (struct tnode){ 0, 0, 0, d, b[d - 1] };
	}
	*cur = len;
	t = &v->nodes[open[len]];
	if (!t->n_tok)
		t->tok = k;
	t->n_tok++;
}

/* build_trie - the byte trie of v's tokens that have bytes and do not end
   generation, in depth-first order. */
static int build_trie(struct pg_grammar_vocab *v)
{
	size_t total = 0;
	uint32_t *tmp, *open, cur = 0, n = 0;

	for (int i = 0; i < v->n; i++) {
		size_t len = v->off[i + 1] - v->off[i];

		if (!len || v->eog[i])
			continue;
		if (len > UINT32_MAX - 2)
			return -ENOMEM;
		total += len;
		if (len > v->max_depth)
			v->max_depth = (uint32_t)len;
		n++;
	}
	v->order = malloc(((size_t)n + 1) * sizeof(*v->order));
	tmp = malloc(((size_t)n + 1) * sizeof(*tmp));
	open = malloc(((size_t)v->max_depth + 1) * sizeof(*open));
	v->nodes = malloc((total + 1) * sizeof(*v->nodes));
	if (!v->order || !tmp || !open || !v->nodes || total >= UINT32_MAX) {
		free(tmp);
		free(open);
		return -ENOMEM;
	}
	for (int i = 0; i < v->n; i++)
		if (v->off[i + 1] > v->off[i] && !v->eog[i])
			v->order[v->n_order++] = (uint32_t)i;
	sort_tokens(v, v->order, tmp, n);
	for (uint32_t k = 0; k < n; k++) {
		size_t len;
		const uint8_t *b = tok_bytes(v, (int32_t)v->order[k], &len);
		uint32_t lcp = 0;

		if (k) {
			size_t pl;
			const uint8_t *pb = tok_bytes(v, (int32_t)v->order[k - 1], &pl);

			while (lcp < len && lcp < pl && b[lcp] == pb[lcp])
				lcp++;
		}
		trie_add(v, open, &cur, k, b, (uint32_t)len, lcp);
	}
	for (; cur > 0; cur--)
		v->nodes[open[cur]].end = (uint32_t)v->n_nodes;
	free(tmp);
	free(open);
	return 0;
}

/* vocab_finish - v's end-of-generation list, its trie and serial. */
static int vocab_finish(struct pg_grammar_vocab *v, struct pg_grammar_vocab **out)
{
	v->eog_ids = malloc(((size_t)v->n + 1) * sizeof(*v->eog_ids));
	if (!v->eog_ids || build_trie(v)) {
		pg_grammar_vocab_free(v);
		return -ENOMEM;
	}
	for (int i = 0; i < v->n; i++)
		if (v->eog[i])
			v->eog_ids[v->n_eog++] = (uint32_t)i;
	v->serial = atomic_fetch_add(&vocab_serial, 1) + 1;
	*out = v;
	return 0;
}

/* vocab_alloc - a vocabulary of n tokens with room for bytes bytes. */
static struct pg_grammar_vocab *vocab_alloc(int n, size_t bytes)
{
	struct pg_grammar_vocab *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	v->n = n;
	v->eog = calloc((size_t)n + 1, 1);
	v->off = calloc((size_t)n + 1, sizeof(*v->off));
	v->bytes = malloc(bytes + 1);
	if (!v->eog || !v->off || !v->bytes) {
		pg_grammar_vocab_free(v);
		return NULL;
	}
	return v;
}

/* pg_grammar_vocab_from_pieces - the pieces copied, then the trie. */
int pg_grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens,
				 const uint8_t *eog, int n,
				 struct pg_grammar_vocab **out)
{
	struct pg_grammar_vocab *v;
	size_t total = 0;

	*out = NULL;
	if (n < 0 || (n > 0 && (!pieces || !lens)))
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (lens[i] && !pieces[i])
			return -EINVAL;
		if (lens[i] > SIZE_MAX / 2 - total)
			return -ENOMEM;
		total += lens[i];
	}
	v = vocab_alloc(n, total);
	if (!v)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		if (lens[i])
			memcpy(v->bytes + v->off[i], pieces[i], lens[i]);
		v->off[i + 1] = v->off[i] + lens[i];
		v->eog[i] = eog && eog[i];
	}
	return vocab_finish(v, out);
}

/* pg_grammar_vocab_create - each token's piece (without special text),
   then the trie. */
int pg_grammar_vocab_create(const struct pg_tokenizer *t,
			    struct pg_grammar_vocab **out)
{
	int n = pg_tokenizer_n_vocab(t);
	struct pg_grammar_vocab *v;
	size_t cap = (size_t)(n > 0 ? n : 0) * 8 + 64;

	*out = NULL;
	v = vocab_alloc(n > 0 ? n : 0, cap);
	if (!v)
		return -ENOMEM;
	for (int i = 0; i < v->n; i++) {
		size_t at = v->off[i];
		int r = pg_token_to_piece(t, i, 0, (char *)v->bytes + at, cap - at);

		if (r > 0 && (size_t)r > cap - at) {
			if (RESERVE(v->bytes, cap, at + (size_t)r + 1)) {
				pg_grammar_vocab_free(v);
				return -ENOMEM;
			}
			r = pg_token_to_piece(t, i, 0, (char *)v->bytes + at, cap - at);
		}
		v->off[i + 1] = at + (r > 0 && (size_t)r <= cap - at ? (size_t)r : 0);
		v->eog[i] = pg_tokenizer_is_eog(t, i) != 0;
	}
	return vocab_finish(v, out);
}

/* pg_grammar_vocab_free - free v. */
void pg_grammar_vocab_free(struct pg_grammar_vocab *v)
{
	if (!v)
		return;
	free(v->eog);
	free(v->off);
	free(v->bytes);
	free(v->order);
	free(v->eog_ids);
	free(v->nodes);
	free(v);
}

/* pg_grammar_vocab_size - v's tokens. */
int pg_grammar_vocab_size(const struct pg_grammar_vocab *v)
{
	return v->n;
}

/* ---- compiling ---- */

/* make_start - the state before any text: root's alternatives, expanded. */
static int make_start(struct parser *p)
{
	struct pg_grammar *g = p->g;
	struct cache *c = &g->c;
	uint32_t ss;

	if (cache_base(c))
		return oom(p);
	step_begin(c);
	push_alts(g, g->root, 0);
	ss = step_end(g);
	if (ss == T_NOMEM)
		return oom(p);
	if (ss == T_OVER)
		return perr(p, g->rules[g->root].def, "the start has more than %u ways to "
			    "parse it (PG_GRAMMAR_MAX_STACKS) or nests rules deeper "
			    "than %u", PG_GRAMMAR_MAX_STACKS, PG_GRAMMAR_MAX_DEPTH);
	if (ss == T_DEAD)
		return perr(p, g->rules[g->root].def, "rule 'root' matches nothing");
	g->start = calloc(1, sizeof(*g->start));
	if (!g->start)
		return oom(p);
	g->start->g = g;
	if (store(g, g->start, ss))
		return oom(p);
	return 0;
}

/* parser_free - the parser's own memory. */
static void parser_free(struct parser *p)
{
	free(p->ntab);
	free(p->cls);
	for (int i = 0; i <= MAX_NEST; i++) {
		free(p->b[i].e);
		free(p->b[i].alt);
	}
}

/* grammar_new - an empty grammar with the default bounds. */
static struct pg_grammar *grammar_new(void)
{
	struct pg_grammar *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->c.gen = 1;
	g->c.limit = PG_GRAMMAR_STATE_CACHE_BYTES;
	g->m.limit = PG_GRAMMAR_MASK_CACHE_BYTES;
	g->m.free = g->m.head = g->m.tail = NONE;
	return g;
}

/* pg_grammar_compile - check the text, parse it, check the rules, then
   the start state. */
int pg_grammar_compile(const char *text, size_t len, struct pg_grammar **out,
		       char *err, size_t err_len)
{
	struct parser *p;
	int rc;

	*out = NULL;
	if (err_len)
		err[0] = '\0';
	p = calloc(1, sizeof(*p));
	if (!p) {
		if (err_len)
			snprintf(err, err_len, "out of memory compiling the grammar");
		return -ENOMEM;
	}
	p->s = text ? text : "";
	p->len = text ? len : 0;
	p->err = err;
	p->err_len = err_len;
	p->g = grammar_new();
	if (!p->g)
		oom(p);
	else if (!check_text(p) && !parse_all(p) && !check_defined(p) &&
		 !compute_nullable(p) && !check_reps(p) && !check_left_rec(p))
		make_start(p);
	rc = p->rc;
	if (!rc) {
		p->g->hash = mix64(name_hash(p->s, p->len) ^ p->len);
		*out = p->g;
	} else {
		pg_grammar_free(p->g);
	}
	parser_free(p);
	free(p);
	return rc;
}

/* pg_grammar_free - free g, its caches and its start. */
void pg_grammar_free(struct pg_grammar *g)
{
	if (!g)
		return;
	free(g->elems);
	free(g->alts);
	free(g->rules);
	free(g->ranges);
	pg_grammar_state_free(g->start);
	cache_free(&g->c);
	mc_clear(&g->m);
	free(g->w);
	free(g);
}

/* pg_grammar_hash - the text's hash, made when compiled. */
uint64_t pg_grammar_hash(const struct pg_grammar *g)
{
	return g->hash;
}

/* pg_grammar_set_cache_limit - new bounds; both caches dropped. */
void pg_grammar_set_cache_limit(struct pg_grammar *g, size_t state_bytes,
				size_t mask_bytes)
{
	g->c.limit = state_bytes < MIN_STATE_BYTES ? MIN_STATE_BYTES : state_bytes;
	g->m.limit = mask_bytes;
	cache_drop(&g->c);
	mc_clear(&g->m);
}

/* pg_grammar_stats - g's counters and sizes. */
void pg_grammar_stats(const struct pg_grammar *g, struct pg_grammar_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->mask_hits = g->m.hits;
	st->mask_misses = g->m.misses;
	st->cached_masks = g->m.live;
	st->cached_states = g->c.n_sets;
	st->cache_bytes = cache_bytes(&g->c) + g->m.bytes + g->m.n_bucket * sizeof(uint32_t);
	st->flushes = g->c.flushes;
}
