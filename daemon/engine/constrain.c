/*
 * constrain.c - the engine's grammars: a cache of compiled grammars by
 * text, and the draw of a token under one (constrain.h says why the lazy
 * draw is exact).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/constrain.h"
#include "daemon/engine/tokenizer.h"

struct pg_cgrammar {
	struct pg_constrain *owner;
	struct pg_cgrammar *prev, *next;	/* most recently used first */
	uint64_t hash;
	char *text;
	size_t len;
	struct pg_grammar *g;
	int refs;
};

struct pg_constrain {
	const struct pg_tokenizer *tok;
	int n_vocab;
	struct pg_grammar_vocab *vocab;	/* made on the first grammar */
	struct pg_cgrammar *head, *tail;
	size_t n, n_unused;
	uint32_t *mask;			/* ((n_vocab + 31) / 32) */
	int32_t *eog;			/* the end-of-generation ids (n_eog) */
	int n_eog;
	struct pg_constrain_stats st;
};

/* text_hash - FNV-1a over len bytes. */
static uint64_t text_hash(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

struct pg_constrain *pg_constrain_create(const struct pg_tokenizer *t,
					 int n_vocab)
{
	struct pg_constrain *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->tok = t;
	c->n_vocab = n_vocab;
	c->mask = malloc(sizeof(uint32_t) * (((size_t)n_vocab + 31) / 32));
	if (!c->mask)
		goto out_free;
	for (int i = 0; i < n_vocab; i++)
		c->n_eog += t && pg_tokenizer_is_eog(t, i);
	c->eog = malloc(sizeof(int32_t) * (size_t)(c->n_eog + 1));
	if (!c->eog)
		goto out_free;
	c->n_eog = 0;
	for (int i = 0; i < n_vocab; i++)
		if (t && pg_tokenizer_is_eog(t, i))
			c->eog[c->n_eog++] = i;
	return c;
out_free:
	free(c->mask);
	free(c);
	return NULL;
}

static void unlink_entry(struct pg_constrain *c, struct pg_cgrammar *g)
{
	if (g->prev)
		g->prev->next = g->next;
	else
		c->head = g->next;
	if (g->next)
		g->next->prev = g->prev;
	else
		c->tail = g->prev;
	g->prev = g->next = NULL;
}

static void push_front(struct pg_constrain *c, struct pg_cgrammar *g)
{
	g->prev = NULL;
	g->next = c->head;
	if (c->head)
		c->head->prev = g;
	else
		c->tail = g;
	c->head = g;
}

static void entry_free(struct pg_cgrammar *g)
{
	pg_grammar_free(g->g);
	free(g->text);
	free(g);
}

/* trim - drop the least recently used unreferenced grammars past the keep */
static void trim(struct pg_constrain *c)
{
	struct pg_cgrammar *g = c->tail, *prev;

	for (; g && c->n_unused > PG_CONSTRAIN_KEEP; g = prev) {
		prev = g->prev;
		if (g->refs)
			continue;
		unlink_entry(c, g);
		c->n--;
		c->n_unused--;
		entry_free(g);
	}
}

void pg_constrain_free(struct pg_constrain *c)
{
	struct pg_cgrammar *g, *next;

	if (!c)
		return;
	for (g = c->head; g; g = next) {
		next = g->next;
		entry_free(g);
	}
	pg_grammar_vocab_free(c->vocab);
	free(c->mask);
	free(c->eog);
	free(c);
}

int pg_constrain_get(struct pg_constrain *c, const char *text, size_t len,
		     struct pg_cgrammar **out, char *err, size_t err_len)
{
	uint64_t h = text_hash(text, len);
	struct pg_cgrammar *g;
	int rc;

	*out = NULL;
	for (g = c->head; g; g = g->next)
		if (g->hash == h && g->len == len && !memcmp(g->text, text, len))
			break;
	if (g) {
		c->st.cache_hits++;
		unlink_entry(c, g);
	} else {
		if (!c->vocab && pg_grammar_vocab_create(c->tok, &c->vocab))
			return -ENOMEM;
		g = calloc(1, sizeof(*g));
		if (!g || !(g->text = malloc(len ? len : 1))) {
			free(g);
			return -ENOMEM;
		}
		rc = pg_grammar_compile(text, len, &g->g, err, err_len);
		if (rc) {
			free(g->text);
			free(g);
			return rc;
		}
		memcpy(g->text, text, len);
		g->len = len;
		g->hash = h;
		g->owner = c;
		c->n++;
		c->n_unused++;	/* counted as taken just below */
		c->st.compiles++;
	}
	push_front(c, g);
	if (!g->refs++)
		c->n_unused--;
	*out = g;
	return 0;
}

void pg_constrain_put(struct pg_cgrammar *g)
{
	if (!g)
		return;
	if (--g->refs == 0) {
		g->owner->n_unused++;
		trim(g->owner);
	}
}

struct pg_grammar_state *pg_constrain_start(struct pg_cgrammar *g)
{
	return pg_grammar_state_create(g->g);
}

int pg_constrain_lazy(const struct pg_sampling *p)
{
	if (p->n_logprobs > 0)
		return 0;
	if (p->temperature <= 0.0f)
		return 1;
	return p->top_k <= 0 && p->top_p >= 1.0f && p->min_p <= 0.0f;
}

/* allowed - bit id of the mask */
static int allowed(const uint32_t *mask, int32_t id)
{
	return (mask[id / 32] >> (id % 32)) & 1u;
}

enum pg_constrain_draw pg_constrain_draw(struct pg_constrain *c,
					 struct pg_grammar_state *gs,
					 struct pg_sampler *smp, int lazy, int no_eog,
					 const float *row, float *scratch,
					 float *lp, struct pg_logprob *top,
					 int32_t *id)
{
	size_t bytes = sizeof(float) * (size_t)c->n_vocab;
	int32_t best = -1;
	int n;

	c->st.draws++;
	if (lazy) {
		memcpy(scratch, row, bytes);
		*id = pg_sampler_sample(smp, scratch, lp, top);
		if (pg_grammar_allows(gs, c->vocab, *id) &&
		    !(no_eog && pg_tokenizer_is_eog(c->tok, *id)))
			return PG_CONSTRAIN_TOKEN;
	}
	c->st.masked++;
	n = pg_grammar_mask(gs, c->vocab, c->mask);
	if (n < 0)
		return PG_CONSTRAIN_NOMEM;
	for (int i = 0; no_eog && i < c->n_eog; i++) {
		int32_t e = c->eog[i];

		if (allowed(c->mask, e)) {
			c->mask[e / 32] &= ~(1u << (e % 32));
			n--;
		}
	}
	if (n == 0) {
		c->st.stuck++;
		return PG_CONSTRAIN_STUCK;
	}
	for (int i = 0; i < c->n_vocab; i++) {
		if (!allowed(c->mask, i)) {
			scratch[i] = -INFINITY;
			continue;
		}
		scratch[i] = row[i];
		if (best < 0 || row[i] > row[best])
			best = i;
	}
	*id = pg_sampler_sample(smp, scratch, lp, top);
	/* a draw that rounding carried onto a masked token: the best allowed */
	if (*id < 0 || *id >= c->n_vocab || !allowed(c->mask, *id))
		*id = best;
	return PG_CONSTRAIN_TOKEN;
}

const struct pg_grammar_vocab *pg_constrain_vocab(const struct pg_constrain *c)
{
	return c->vocab;
}

void pg_constrain_stats(const struct pg_constrain *c,
			struct pg_constrain_stats *st)
{
	*st = c->st;
	st->cached = c->n;
}
