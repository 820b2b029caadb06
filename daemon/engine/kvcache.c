/*
 * kvcache.c - page accounting of the paged KV cache: the page pool, the
 * sequences' page tables, copy-on-write and the prefix cache.
 *
 * This file decides which page id holds which tokens; it holds no K or V
 * and copies none (it tells the caller which copies to make).  Every page
 * is in one of three states: free (on the free stack), used (refcount > 0)
 * or cached (refcount 0, full and published, on the LRU list).
 *
 * Two hash tables, both open addressing with linear probing and
 * backward-shift deletion, sized at twice n_pages so that they never fill:
 *   index:    page hash -> the one published page with that hash (the
 *             prefix cache that lookups walk);
 *   children: parent hash -> every full page that is not free (a
 *             multimap: the tree of prefixes, walked by eviction).
 * A cached page is never an orphan: evicting a page also evicts the cached
 * pages below it (no lookup could reach them), and a full page that is
 * released while nothing publishes its hash is published and cached
 * instead of freed.  So a prefix's whole subtree is found from its root.
 *
 * Zones (replicas, kvcache.h): zone z is pages [z*n/Z, (z+1)*n/Z), with a
 * free stack (its slice of free_stack) and an LRU list of its own.  A
 * sequence's pages, copies and prefix matches all stay in its zone, so a
 * page's children are in its zone too; the index key of a page of zone
 * z > 0 is its hash mixed with z (zkey), because one prefix may be cached
 * once in every zone.  With one zone nothing differs from before.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/engine/fault.h"
#include "daemon/engine/kvcache.h"

#define PAGE_FREE	1u	/* on the free stack */
#define PAGE_PUB	2u	/* in the index */

/* Open-addressing table of (64-bit key, page id); val < 0 marks empty. */
struct htab {
	uint64_t *key;		/* (mask + 1) */
	int32_t *val;		/* (mask + 1) page id, -1 empty */
	uint32_t mask;
	int n;
};

struct pg_kvc_seq {
	struct pg_kvc_seq *prev, *next;	/* the cache's live sequences */
	uint64_t client;
	int zone;		/* its pages' zone; -1 before its first page */
	int32_t *pages;		/* (cap) page ids; n_pages used */
	int n_pages;
	int cap;
	int len;		/* tokens held */
};

/* One zone: pages [lo, hi), its free stack free_stack[lo .. lo + n_free). */
struct zone {
	int lo, hi;
	int n_free;
	int32_t lru_head, lru_tail;	/* head: least recently used */
	int n_cached;
	int n_seqs;		/* live sequences in the zone */
};

struct pg_kvc {
	struct pg_kvc_params p;
	uint64_t hash_mask;	/* ~0; narrower only in tests */
	int n;			/* pages */
	int pt;			/* tokens per page */
	int n_zones;
	struct zone *zones;	/* (n_zones) */
	uint8_t *pzone;		/* (n) each page's zone */

	/* per page, (n) each */
	int32_t *refs;
	uint8_t *flags;		/* PAGE_* */
	int32_t *n_tok;		/* tokens written in the page */
	int32_t *depth;		/* page index within its sequence */
	uint64_t *hash;		/* valid when full: the index key */
	uint64_t *path;		/* valid when full: a second, independent
				   hash of the whole path, checked by lookups */
	uint64_t *parent;	/* hash of the page before; 0 for depth 0 */
	uint64_t *client;	/* the client whose sequence allocated it */
	double *last_use;	/* when it was cached, seconds */
	int32_t *lru_prev, *lru_next;	/* -1 ends */
	int32_t *tokens;	/* (n, pt) token ids */

	int32_t *free_stack;	/* (n) the zones' stacks, zone by zone */
	int n_free;		/* all zones */
	int n_cached;		/* all zones */

	struct htab index;
	struct htab children;

	int32_t *scratch;	/* (n) work list for eviction */
	uint8_t *mark;		/* (n) visited marks for eviction */

	struct pg_kvc_seq *seqs;	/* live sequences */
	struct pg_kvc_stats st;
};

/* ---- hashing ---- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* Hash of (parent hash, page tokens, salt) from a seed; never 0. */
static uint64_t hash_tokens(const struct pg_kvc *c, uint64_t seed,
			    uint64_t parent, const int32_t *tok)
{
	uint64_t h = mix64(c->p.salt ^ seed);
	int i;

	h = mix64(h ^ parent);
	for (i = 0; i < c->pt; i++) {
		h ^= (uint64_t)(uint32_t)tok[i] * 0x9e3779b97f4a7c15ull;
		h = rotl64(h, 29) * 0xc2b2ae3d27d4eb4full + 0x165667b19e3779f9ull;
	}
	return mix64(h ^ (uint64_t)c->pt);
}

/* The index key of a full page; 0 is the parent of depth 0. */
static uint64_t page_hash(const struct pg_kvc *c, uint64_t parent,
			  const int32_t *tok)
{
	uint64_t h = hash_tokens(c, 0x243f6a8885a308d3ull, parent, tok);

	h &= c->hash_mask;
	return h ? h : 1;
}

/* The path identity: the same chain with another seed, never narrowed. */
static uint64_t path_hash(const struct pg_kvc *c, uint64_t parent,
			  const int32_t *tok)
{
	return hash_tokens(c, 0x13198a2e03707344ull, parent, tok);
}

/* The index key of a page of zone z with hash h: h itself in zone 0. */
static uint64_t zkey(uint64_t h, int z)
{
	return z ? mix64(h ^ (0x9e3779b97f4a7c15ull * (uint64_t)z)) : h;
}

/* ---- hash tables ---- */

static int htab_init(struct htab *t, int n)
{
	uint32_t cap = 16;

	while (cap < 2u * (uint32_t)n)
		cap <<= 1;
	t->key = calloc(cap, sizeof(*t->key));
	t->val = malloc(cap * sizeof(*t->val));
	if (!t->key || !t->val)
		return -ENOMEM;
	memset(t->val, 0xff, cap * sizeof(*t->val));
	t->mask = cap - 1;
	t->n = 0;
	return 0;
}

static void htab_fini(struct htab *t)
{
	free(t->key);
	free(t->val);
}

static uint32_t htab_home(const struct htab *t, uint64_t key)
{
	return (uint32_t)mix64(key) & t->mask;
}

static void htab_insert(struct htab *t, uint64_t key, int32_t val)
{
	uint32_t i = htab_home(t, key);

	while (t->val[i] >= 0)
		i = (i + 1) & t->mask;
	t->key[i] = key;
	t->val[i] = val;
	t->n++;
}

/* The first page stored under key, or -1. */
static int32_t htab_find(const struct htab *t, uint64_t key)
{
	uint32_t i;

	for (i = htab_home(t, key); t->val[i] >= 0; i = (i + 1) & t->mask)
		if (t->key[i] == key)
			return t->val[i];
	return -1;
}

/* Whether slot k's home lies cyclically in (hole, j]: then it must stay. */
static int htab_stays(uint32_t home, uint32_t hole, uint32_t j)
{
	if (hole <= j)
		return home > hole && home <= j;
	return home > hole || home <= j;
}

static void htab_remove(struct htab *t, uint64_t key, int32_t val)
{
	uint32_t i = htab_home(t, key), j;

	while (t->val[i] >= 0 && !(t->key[i] == key && t->val[i] == val))
		i = (i + 1) & t->mask;
	if (t->val[i] < 0)
		return;
	for (j = (i + 1) & t->mask; t->val[j] >= 0; j = (j + 1) & t->mask) {
		if (htab_stays(htab_home(t, t->key[j]), i, j))
			continue;
		t->key[i] = t->key[j];
		t->val[i] = t->val[j];
		i = j;
	}
	t->val[i] = -1;
	t->n--;
}

/* ---- page states ---- */

static double kvc_now(const struct pg_kvc *c)
{
	if (c->p.now)
		return c->p.now(c->p.now_ctx);
	return pg_now_s();
}

static int page_full(const struct pg_kvc *c, int32_t p)
{
	return c->n_tok[p] == c->pt;
}

static int page_cached(const struct pg_kvc *c, int32_t p)
{
	return !(c->flags[p] & PAGE_FREE) && c->refs[p] == 0;
}

/* Page p's index key. */
static uint64_t page_key(const struct pg_kvc *c, int32_t p)
{
	return zkey(c->hash[p], c->pzone[p]);
}

static void lru_push_tail(struct pg_kvc *c, int32_t p)
{
	struct zone *z = &c->zones[c->pzone[p]];

	c->lru_prev[p] = z->lru_tail;
	c->lru_next[p] = -1;
	if (z->lru_tail >= 0)
		c->lru_next[z->lru_tail] = p;
	else
		z->lru_head = p;
	z->lru_tail = p;
	z->n_cached++;
	c->n_cached++;
}

static void lru_remove(struct pg_kvc *c, int32_t p)
{
	struct zone *z = &c->zones[c->pzone[p]];

	if (c->lru_prev[p] >= 0)
		c->lru_next[c->lru_prev[p]] = c->lru_next[p];
	else
		z->lru_head = c->lru_next[p];
	if (c->lru_next[p] >= 0)
		c->lru_prev[c->lru_next[p]] = c->lru_prev[p];
	else
		z->lru_tail = c->lru_prev[p];
	c->lru_prev[p] = c->lru_next[p] = -1;
	z->n_cached--;
	c->n_cached--;
}

/*
 * The least recently used cached page of all zones (the oldest of the
 * zones' LRU heads; ties: the lowest zone), or -1.
 */
static int32_t lru_oldest(const struct pg_kvc *c)
{
	int32_t best = -1;

	for (int z = 0; z < c->n_zones; z++) {
		int32_t p = c->zones[z].lru_head;

		if (p >= 0 && (best < 0 || c->last_use[p] < c->last_use[best]))
			best = p;
	}
	return best;
}

/* Put an unreferenced page back on its zone's free stack, out of both
 * tables. */
static void page_free(struct pg_kvc *c, int32_t p)
{
	struct zone *z = &c->zones[c->pzone[p]];

	if (c->flags[p] & PAGE_PUB)
		htab_remove(&c->index, page_key(c, p), p);
	if (page_full(c, p))
		htab_remove(&c->children, c->parent[p], p);
	c->flags[p] = PAGE_FREE;
	c->n_tok[p] = 0;
	c->free_stack[z->lo + z->n_free++] = p;
	c->n_free++;
}

/* Publish a full page unless another page has its key; 1 if published. */
static int page_publish(struct pg_kvc *c, int32_t p)
{
	if (htab_find(&c->index, page_key(c, p)) >= 0)
		return 0;
	htab_insert(&c->index, page_key(c, p), p);
	c->flags[p] |= PAGE_PUB;
	return 1;
}

static void page_ref(struct pg_kvc *c, int32_t p)
{
	if (c->refs[p]++ == 0)
		lru_remove(c, p);
}

static void page_unref(struct pg_kvc *c, int32_t p)
{
	if (--c->refs[p] > 0)
		return;
	if (page_full(c, p) &&
	    ((c->flags[p] & PAGE_PUB) || page_publish(c, p))) {
		c->last_use[p] = kvc_now(c);
		lru_push_tail(c, p);
		return;
	}
	page_free(c, p);
}

/*
 * Evict cached page p and, with it, the cached pages below it in the
 * prefix tree.  Returns the number of pages evicted.
 */
static int evict_tree(struct pg_kvc *c, int32_t p)
{
	int n_stack = 0, n_evicted = 0;
	uint32_t i;

	c->scratch[n_stack++] = p;
	while (n_stack > 0) {
		int32_t q = c->scratch[--n_stack];
		uint64_t h = c->hash[q];

		if (!page_cached(c, q))
			continue;	/* only after a forced hash collision */
		lru_remove(c, q);
		page_free(c, q);
		n_evicted++;
		for (i = htab_home(&c->children, h); c->children.val[i] >= 0;
		     i = (i + 1) & c->children.mask) {
			int32_t ch = c->children.val[i];

			if (c->children.key[i] == h && page_cached(c, ch) &&
			    c->pzone[ch] == c->pzone[q])
				c->scratch[n_stack++] = ch;
		}
	}
	c->st.evictions += (uint64_t)n_evicted;
	return n_evicted;
}

/*
 * A private, empty page of zone z for client: free, or evicted from the
 * head of the zone's LRU list.
 */
static int32_t page_alloc(struct pg_kvc *c, int z, uint64_t client, int depth)
{
	struct zone *zn = &c->zones[z];
	int32_t p;

	if (zn->n_free == 0)
		evict_tree(c, zn->lru_head);
	p = c->free_stack[zn->lo + --zn->n_free];
	c->n_free--;
	c->flags[p] = 0;
	c->refs[p] = 1;
	c->n_tok[p] = 0;
	c->depth[p] = depth;
	c->client[p] = client;
	return p;
}

/* ---- create and destroy ---- */

static int kvc_alloc_arrays(struct pg_kvc *c)
{
	size_t n = (size_t)c->n;

	c->refs = calloc(n, sizeof(*c->refs));
	c->flags = calloc(n, sizeof(*c->flags));
	c->n_tok = calloc(n, sizeof(*c->n_tok));
	c->depth = calloc(n, sizeof(*c->depth));
	c->hash = calloc(n, sizeof(*c->hash));
	c->path = calloc(n, sizeof(*c->path));
	c->parent = calloc(n, sizeof(*c->parent));
	c->client = calloc(n, sizeof(*c->client));
	c->last_use = calloc(n, sizeof(*c->last_use));
	c->lru_prev = calloc(n, sizeof(*c->lru_prev));
	c->lru_next = calloc(n, sizeof(*c->lru_next));
	c->tokens = calloc(n * (size_t)c->pt, sizeof(*c->tokens));
	c->free_stack = calloc(n, sizeof(*c->free_stack));
	c->scratch = calloc(n, sizeof(*c->scratch));
	c->mark = calloc(n, sizeof(*c->mark));
	c->pzone = calloc(n, sizeof(*c->pzone));
	c->zones = calloc((size_t)c->n_zones, sizeof(*c->zones));
	if (!c->refs || !c->flags || !c->n_tok || !c->depth || !c->hash || !c->path ||
	    !c->parent || !c->client || !c->last_use || !c->lru_prev ||
	    !c->lru_next || !c->tokens || !c->free_stack || !c->scratch ||
	    !c->mark || !c->pzone || !c->zones)
		return -ENOMEM;
	if (htab_init(&c->index, c->n) || htab_init(&c->children, c->n))
		return -ENOMEM;
	return 0;
}

/* Zone z's pages, every one free; its stack pops its first page first. */
static void zone_init(struct pg_kvc *c, int z)
{
	struct zone *zn = &c->zones[z];

	zn->lo = (int)((int64_t)z * c->n / c->n_zones);
	zn->hi = (int)((int64_t)(z + 1) * c->n / c->n_zones);
	zn->n_free = zn->hi - zn->lo;
	zn->lru_head = zn->lru_tail = -1;
	for (int i = zn->lo; i < zn->hi; i++) {
		c->free_stack[i] = zn->hi - 1 - (i - zn->lo);
		c->flags[i] = PAGE_FREE;
		c->pzone[i] = (uint8_t)z;
		c->lru_prev[i] = c->lru_next[i] = -1;
	}
}

int pg_kvc_create(const struct pg_kvc_params *p, struct pg_kvc **out)
{
	struct pg_kvc *c;
	int n_zones = p && p->n_zones > 1 ? p->n_zones : 1;

	*out = NULL;
	if (!p || p->n_pages < 1 || p->page_tokens < 1 ||
	    p->n_pages > (1 << 28) || p->page_tokens > (1 << 20) ||
	    p->n_zones < 0 || n_zones > PG_KVC_MAX_ZONES ||
	    n_zones > p->n_pages)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->p = *p;
	c->hash_mask = ~0ull;
	c->n = p->n_pages;
	c->pt = p->page_tokens;
	c->n_zones = n_zones;
	if (kvc_alloc_arrays(c)) {
		pg_kvc_destroy(c);
		return -ENOMEM;
	}
	for (int z = 0; z < c->n_zones; z++)
		zone_init(c, z);
	c->n_free = c->n;
	*out = c;
	return 0;
}

void pg_kvc_destroy(struct pg_kvc *c)
{
	if (!c)
		return;
	while (c->seqs)
		pg_kvc_seq_free(c, c->seqs);
	htab_fini(&c->index);
	htab_fini(&c->children);
	free(c->refs);
	free(c->flags);
	free(c->n_tok);
	free(c->depth);
	free(c->hash);
	free(c->path);
	free(c->parent);
	free(c->client);
	free(c->last_use);
	free(c->lru_prev);
	free(c->lru_next);
	free(c->tokens);
	free(c->free_stack);
	free(c->scratch);
	free(c->mark);
	free(c->pzone);
	free(c->zones);
	free(c);
}

/* ---- sequences ---- */

static struct pg_kvc_seq *seq_alloc(struct pg_kvc *c, uint64_t client)
{
	struct pg_kvc_seq *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->client = client;
	s->zone = -1;
	s->next = c->seqs;
	if (c->seqs)
		c->seqs->prev = s;
	c->seqs = s;
	return s;
}

/* Room for n page ids in s's table, growing by doubling; 0 or -ENOMEM. */
static int seq_grow(struct pg_kvc_seq *s, int n)
{
	int32_t *pages;
	int cap = s->cap ? s->cap : 4;

	if (n <= s->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	pages = realloc(s->pages, (size_t)cap * sizeof(*pages));
	if (!pages)
		return -ENOMEM;
	s->pages = pages;
	s->cap = cap;
	return 0;
}

/* s (zone-less) goes to zone z (or stays without one, z < 0). */
static void seq_set_zone(struct pg_kvc *c, struct pg_kvc_seq *s, int z)
{
	s->zone = z;
	if (z >= 0)
		c->zones[z].n_seqs++;
}

/* Free pages plus evictable cached pages of zone z. */
static int zone_available(const struct pg_kvc *c, int z)
{
	return c->zones[z].n_free + c->zones[z].n_cached;
}

/*
 * The zone for a new sequence that needs[z] more pages in zone z and has
 * matched[z] of its pages cached there (NULL: none anywhere).  Zones
 * that can hold it come first; among those, the ones with at most one
 * live sequence more than the least loaded; among those, the longest
 * cached prefix, then the fewest sequences, the most pages available,
 * the lowest zone.  So streams spread evenly over the replicas (what
 * throughput needs), and a cached prefix still draws a sequence (a
 * conversation's next turn) to its zone unless that zone is ahead; a
 * prefix is computed at most once more in a second zone and cached there
 * too.  -1 when no zone can hold it.
 */
static int zone_choose(const struct pg_kvc *c, const int *needs,
		       const int *matched)
{
	int least = -1, best = -1;

	for (int z = 0; z < c->n_zones; z++)
		if (needs[z] <= zone_available(c, z) &&
		    (least < 0 || c->zones[z].n_seqs < least))
			least = c->zones[z].n_seqs;
	for (int z = 0; z < c->n_zones; z++) {
		const struct zone *a = &c->zones[z];
		int m = matched ? matched[z] : 0, mb;

		if (needs[z] > zone_available(c, z) || a->n_seqs > least + 1)
			continue;
		if (best < 0) {
			best = z;
			continue;
		}
		mb = matched ? matched[best] : 0;
		if (m != mb ? m > mb :
		    a->n_seqs != c->zones[best].n_seqs ?
		    a->n_seqs < c->zones[best].n_seqs :
		    zone_available(c, z) > zone_available(c, best))
			best = z;
	}
	return best;
}

struct pg_kvc_seq *pg_kvc_seq_new(struct pg_kvc *c, uint64_t client)
{
	return seq_alloc(c, client);
}

struct pg_kvc_seq *pg_kvc_seq_fork(struct pg_kvc *c, const struct pg_kvc_seq *s)
{
	int n_data = (s->len + c->pt - 1) / c->pt;
	struct pg_kvc_seq *f = seq_alloc(c, s->client);
	int i;

	if (!f)
		return NULL;
	seq_set_zone(c, f, s->zone);
	if (seq_grow(f, n_data)) {
		pg_kvc_seq_free(c, f);
		return NULL;
	}
	for (i = 0; i < n_data; i++) {
		f->pages[i] = s->pages[i];
		page_ref(c, s->pages[i]);
	}
	f->n_pages = n_data;
	f->len = s->len;
	return f;
}

void pg_kvc_seq_free(struct pg_kvc *c, struct pg_kvc_seq *s)
{
	int i;

	if (!s)
		return;
	/* last page first, so that a prefix's tail is older in the LRU */
	for (i = s->n_pages - 1; i >= 0; i--)
		page_unref(c, s->pages[i]);
	if (s->zone >= 0)
		c->zones[s->zone].n_seqs--;
	if (s->prev)
		s->prev->next = s->next;
	else
		c->seqs = s->next;
	if (s->next)
		s->next->prev = s->prev;
	free(s->pages);
	free(s);
}

/*
 * The published page that continues a prefix (index key *h, path hash
 * *h2; both updated), or -1.  A key collision cannot attach the wrong
 * page: its tokens and its whole path's second hash must match too.
 */
static int32_t match_page(const struct pg_kvc *c, int zone, int depth,
			  const int32_t *tok, uint64_t *h, uint64_t *h2)
{
	int32_t p;

	*h = page_hash(c, *h, tok);
	*h2 = path_hash(c, *h2, tok);
	p = htab_find(&c->index, zkey(*h, zone));
	if (p < 0 || c->pzone[p] != zone || c->path[p] != *h2 ||
	    c->depth[p] != depth ||
	    memcmp(c->tokens + (size_t)p * c->pt, tok,
		   (size_t)c->pt * sizeof(*tok)))
		return -1;
	return p;
}

/* How many of the first max_pages pages of tokens zone z has cached. */
static int match_count(const struct pg_kvc *c, int z, const int32_t *tokens,
		       int max_pages)
{
	uint64_t h = 0, h2 = 0;
	int j;

	for (j = 0; j < max_pages; j++)
		if (match_page(c, z, j, tokens + (size_t)j * c->pt, &h, &h2) < 0)
			break;
	return j;
}

/*
 * A new sequence of n tokens: the zone it goes to (zone_choose with what
 * each zone has cached of them), or the least loaded one when none can
 * hold it (it will not be admitted, and may try again).
 */
static int match_zone(const struct pg_kvc *c, const int32_t *tokens, int n,
		      int max_pages)
{
	int needs[PG_KVC_MAX_ZONES] = { 0 }, matched[PG_KVC_MAX_ZONES] = { 0 };
	int total = (n + c->pt - 1) / c->pt, z;

	for (z = 0; z < c->n_zones; z++) {
		matched[z] = match_count(c, z, tokens, max_pages);
		needs[z] = total - matched[z];
	}
	z = zone_choose(c, needs, matched);
	if (z >= 0)
		return z;
	for (z = 0; z < c->n_zones; z++)
		needs[z] = 0;
	return zone_choose(c, needs, NULL);
}

int pg_kvc_seq_match(struct pg_kvc *c, struct pg_kvc_seq *s,
		     const int32_t *tokens, int n)
{
	uint64_t h = 0, h2 = 0;
	int max_pages, j;

	if (s->len || s->n_pages || n < 0 || (n && !tokens))
		return -EINVAL;
	max_pages = n > 0 ? (n - 1) / c->pt : 0;
	if (seq_grow(s, max_pages))
		return -ENOMEM;
	c->st.queries++;
	c->st.query_tokens += (uint64_t)n;
	if (s->zone < 0)
		seq_set_zone(c, s, c->n_zones == 1 ? 0 :
			     match_zone(c, tokens, n, max_pages));
	for (j = 0; j < max_pages; j++) {
		int32_t p = match_page(c, s->zone, j,
				       tokens + (size_t)j * c->pt, &h, &h2);

		if (p < 0)
			break;
		page_ref(c, p);
		s->pages[j] = p;
	}
	s->n_pages = j;
	s->len = j * c->pt;
	c->st.hit_pages += (uint64_t)j;
	c->st.hit_tokens += (uint64_t)j * (uint64_t)c->pt;
	return s->len;
}

/* Whether the page holding position len must be copied before a write. */
static int seq_needs_cow(const struct pg_kvc *c, const struct pg_kvc_seq *s)
{
	int idx = s->len / c->pt;
	int32_t p;

	if (idx >= s->n_pages)
		return 0;
	p = s->pages[idx];
	return c->refs[p] > 1 || (c->flags[p] & PAGE_PUB);
}

int pg_kvc_pages_needed(const struct pg_kvc *c, const struct pg_kvc_seq *s,
			int n_tokens)
{
	int total = (n_tokens + c->pt - 1) / c->pt;
	int add = total > s->n_pages ? total - s->n_pages : 0;

	if (n_tokens <= s->len)
		return 0;
	return add + seq_needs_cow(c, s);
}

int pg_kvc_n_available(const struct pg_kvc *c)
{
	return c->n_free + c->n_cached;
}

int pg_kvc_seq_n_available(const struct pg_kvc *c, const struct pg_kvc_seq *s)
{
	int most = 0;

	if (s->zone >= 0)
		return zone_available(c, s->zone);
	for (int z = 0; z < c->n_zones; z++)
		most = zone_available(c, z) > most ? zone_available(c, z) : most;
	return most;
}

int pg_kvc_n_zones(const struct pg_kvc *c)
{
	return c->n_zones;
}

int pg_kvc_seq_zone(const struct pg_kvc_seq *s)
{
	return s->zone;
}

/* Replace the page at position len by a private copy. */
static void seq_cow(struct pg_kvc *c, struct pg_kvc_seq *s,
		    struct pg_kvc_copy *copy)
{
	int idx = s->len / c->pt;
	int32_t src = s->pages[idx];
	int32_t dst = page_alloc(c, s->zone, s->client, idx);

	c->n_tok[dst] = s->len - idx * c->pt;
	memcpy(c->tokens + (size_t)dst * c->pt, c->tokens + (size_t)src * c->pt,
	       (size_t)c->n_tok[dst] * sizeof(*c->tokens));
	s->pages[idx] = dst;
	page_unref(c, src);
	copy->src = src;
	copy->dst = dst;
	c->st.cow_copies++;
}

int pg_kvc_seq_reserve(struct pg_kvc *c, struct pg_kvc_seq *s, int n_tokens,
		       struct pg_kvc_copy *copies, int *n_copies)
{
	int total = (n_tokens + c->pt - 1) / c->pt;

	int needs[PG_KVC_MAX_ZONES] = { 0 };

	*n_copies = 0;
	if (n_tokens <= s->len)
		return 0;
	if (seq_grow(s, total))
		return -ENOMEM;
	if (s->zone < 0) {	/* no page yet (and no lookup): a zone */
		int z;

		for (z = 0; z < c->n_zones; z++)
			needs[z] = pg_kvc_pages_needed(c, s, n_tokens);
		if ((z = zone_choose(c, needs, NULL)) < 0)
			return -ENOSPC;
		seq_set_zone(c, s, z);
	}
	/* an injected failure (fault.h) is a pool that is short just now */
	if (pg_kvc_pages_needed(c, s, n_tokens) > zone_available(c, s->zone) ||
	    pg_fault_hit())
		return -ENOSPC;
	if (seq_needs_cow(c, s))
		seq_cow(c, s, &copies[(*n_copies)++]);
	while (s->n_pages < total) {
		s->pages[s->n_pages] = page_alloc(c, s->zone, s->client,
						  s->n_pages);
		s->n_pages++;
	}
	return 0;
}

/* Page idx of s just became full: hash it, link it, publish it. */
static void seq_page_full(struct pg_kvc *c, struct pg_kvc_seq *s, int idx)
{
	int32_t p = s->pages[idx];
	uint64_t parent = idx ? c->hash[s->pages[idx - 1]] : 0;
	uint64_t parent2 = idx ? c->path[s->pages[idx - 1]] : 0;
	const int32_t *tok = c->tokens + (size_t)p * c->pt;

	c->parent[p] = parent;
	c->hash[p] = page_hash(c, parent, tok);
	c->path[p] = path_hash(c, parent2, tok);
	htab_insert(&c->children, parent, p);
	page_publish(c, p);
}

void pg_kvc_seq_append(struct pg_kvc *c, struct pg_kvc_seq *s,
		       const int32_t *tokens, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		int idx = s->len / c->pt, off = s->len % c->pt;
		int32_t p;

		if (idx >= s->n_pages)
			return;	/* not reserved: the caller's bug */
		p = s->pages[idx];
		c->tokens[(size_t)p * c->pt + off] = tokens[i];
		c->n_tok[p] = off + 1;
		s->len++;
		if (off + 1 == c->pt)
			seq_page_full(c, s, idx);
	}
}

const int32_t *pg_kvc_seq_pages(const struct pg_kvc_seq *s)
{
	return s->pages;
}

int pg_kvc_seq_n_pages(const struct pg_kvc_seq *s)
{
	return s->n_pages;
}

int pg_kvc_seq_len(const struct pg_kvc_seq *s)
{
	return s->len;
}

int pg_kvc_page_refs(const struct pg_kvc *c, int page)
{
	if (page < 0 || page >= c->n || (c->flags[page] & PAGE_FREE))
		return -1;
	return c->refs[page];
}

int pg_kvc_page_tokens(const struct pg_kvc *c, int page,
		       const int32_t **tokens)
{
	if (page < 0 || page >= c->n)
		return -EINVAL;
	*tokens = c->tokens + (size_t)page * c->pt;
	return c->n_tok[page];
}

void pg_kvc_test_hash_bits(struct pg_kvc *c, int bits)
{
	c->hash_mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

/* ---- eviction ---- */

/* Evict each page of scratch[0 .. n) that is still cached. */
static int evict_listed(struct pg_kvc *c, int32_t *list, int n)
{
	int i, n_evicted = 0;

	for (i = 0; i < n; i++)
		if (page_cached(c, list[i]))
			n_evicted += evict_tree(c, list[i]);
	return n_evicted;
}

/* Cached pages that pass keep(), collected into list; returns how many. */
static int collect_cached(const struct pg_kvc *c, const struct pg_kvc_evict *e,
			  double now, int32_t *list)
{
	int32_t p;
	int n = 0;

	for (int z = 0; z < c->n_zones; z++)
		for (p = c->zones[z].lru_head; p >= 0; p = c->lru_next[p]) {
			if (e->by == PG_KVC_EVICT_AGE &&
			    now - c->last_use[p] < e->age_s)
				continue;
			if (e->by == PG_KVC_EVICT_CLIENT &&
			    c->client[p] != e->client)
				continue;
			list[n++] = p;
		}
	return n;
}

/*
 * The children of the pages in from[0 .. n_from) (in their zones), or the
 * depth-0 pages of every zone if root, that begin with tok[0 .. n_tok)
 * and are not marked: marked and appended to to[]; returns the new length
 * of to.
 */
static int tree_children(struct pg_kvc *c, const int32_t *from, int n_from,
			 int root, const int32_t *tok, int n_tok,
			 int32_t *to, int n_to)
{
	const struct htab *t = &c->children;
	int k;

	for (k = 0; k < (root ? 1 : n_from); k++) {
		uint64_t key = root ? 0 : c->hash[from[k]];
		uint32_t i;

		for (i = htab_home(t, key); t->val[i] >= 0; i = (i + 1) & t->mask) {
			int32_t q = t->val[i];

			if (t->key[i] != key || c->mark[q] ||
			    (!root && c->pzone[q] != c->pzone[from[k]]))
				continue;
			if (n_tok && memcmp(c->tokens + (size_t)q * c->pt, tok,
					    (size_t)n_tok * sizeof(*tok)))
				continue;
			c->mark[q] = 1;
			to[n_to++] = q;
		}
	}
	return n_to;
}

/*
 * The full pages (used or cached) on the prefix's path and below it, into
 * scratch; returns how many.  Walks the prefix tree from its roots.
 */
static int collect_prefix(struct pg_kvc *c, const int32_t *prefix, int n)
{
	int32_t *list = c->scratch;
	int k = n / c->pt, r = n % c->pt;
	int lo = 0, hi = 0, d, n_list;

	memset(c->mark, 0, (size_t)c->n);
	for (d = 0; d < k; d++) {
		int n_new = tree_children(c, list + lo, hi - lo, d == 0,
					  prefix + (size_t)d * c->pt, c->pt,
					  list, hi);

		if (n_new == hi)
			return hi;
		lo = hi;
		hi = n_new;
	}
	n_list = tree_children(c, list + lo, hi - lo, k == 0,
			       prefix + (size_t)k * c->pt, r, list, hi);
	for (lo = hi; lo < n_list; lo++)
		n_list = tree_children(c, list + lo, 1, 0, NULL, 0, list, n_list);
	return n_list;
}

static int evict_prefix(struct pg_kvc *c, const struct pg_kvc_evict *e)
{
	int32_t *list;
	int n, i, m = 0;

	if (!e->prefix || e->n_prefix < 1)
		return -EINVAL;
	n = collect_prefix(c, e->prefix, e->n_prefix);
	/* evict_tree reuses scratch: keep only the cached ones, then copy */
	list = malloc((size_t)(n ? n : 1) * sizeof(*list));
	if (!list)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		if (page_cached(c, c->scratch[i]))
			list[m++] = c->scratch[i];
	n = evict_listed(c, list, m);
	free(list);
	return n;
}

int pg_kvc_evict(struct pg_kvc *c, const struct pg_kvc_evict *e)
{
	int32_t *list;
	int n = 0;

	switch (e->by) {
	case PG_KVC_EVICT_ALL:
		while (lru_oldest(c) >= 0)
			n += evict_tree(c, lru_oldest(c));
		return n;
	case PG_KVC_EVICT_PAGES:
		if (e->n_pages < 0)
			return -EINVAL;
		while (n < e->n_pages && lru_oldest(c) >= 0)
			n += evict_tree(c, lru_oldest(c));
		return n;
	case PG_KVC_EVICT_PREFIX:
		return evict_prefix(c, e);
	case PG_KVC_EVICT_AGE:
		if (!(e->age_s >= 0))
			return -EINVAL;
		break;
	case PG_KVC_EVICT_CLIENT:
		break;
	default:
		return -EINVAL;
	}
	list = malloc((size_t)(c->n_cached ? c->n_cached : 1) * sizeof(*list));
	if (!list)
		return -ENOMEM;
	n = collect_cached(c, e, kvc_now(c), list);
	n = evict_listed(c, list, n);
	free(list);
	return n;
}

/* ---- statistics ---- */

void pg_kvc_get_stats(const struct pg_kvc *c, struct pg_kvc_stats *st)
{
	*st = c->st;
	st->n_pages = c->n;
	st->n_free = c->n_free;
	st->n_cached = c->n_cached;
	st->n_used = c->n - c->n_free - c->n_cached;
}

void pg_kvc_reset_counters(struct pg_kvc *c)
{
	memset(&c->st, 0, sizeof(c->st));
}

/* ---- invariants ---- */

#define FAIL(...) do { snprintf(err, err_len, __VA_ARGS__); return -EFAULT; } while (0)

static int check_free(const struct pg_kvc *c, char *err, size_t err_len)
{
	int i, n_flagged = 0, n_stacked = 0;

	for (int z = 0; z < c->n_zones; z++) {
		const struct zone *zn = &c->zones[z];

		n_stacked += zn->n_free;
		for (i = zn->lo; i < zn->lo + zn->n_free; i++) {
			int32_t p = c->free_stack[i];

			if (p < zn->lo || p >= zn->hi || !(c->flags[p] & PAGE_FREE))
				FAIL("zone %d's free stack slot %d holds page %d, not a free page of the zone",
				     z, i, p);
			if (c->refs[p] || c->n_tok[p])
				FAIL("free page %d has refs %d, %d tokens", p,
				     c->refs[p], c->n_tok[p]);
		}
	}
	for (i = 0; i < c->n; i++)
		n_flagged += !!(c->flags[i] & PAGE_FREE);
	if (n_flagged != c->n_free || n_stacked != c->n_free)
		FAIL("%d pages flagged free, %d on the stacks, count %d",
		     n_flagged, n_stacked, c->n_free);
	return 0;
}

/* Zone z's LRU list: its cached pages, linked both ways; adds to *n. */
static int check_zone_lru(const struct pg_kvc *c, int z, int *n, char *err,
			  size_t err_len)
{
	const struct zone *zn = &c->zones[z];
	int32_t p, prev = -1;
	int k = 0;

	for (p = zn->lru_head; p >= 0; prev = p, p = c->lru_next[p]) {
		if (++k > c->n || c->lru_prev[p] != prev)
			FAIL("LRU list broken at page %d", p);
		if (!page_cached(c, p) || !(c->flags[p] & PAGE_PUB) ||
		    !page_full(c, p))
			FAIL("LRU page %d is not cached, full and published", p);
		if (c->pzone[p] != z)
			FAIL("page %d of zone %d is on zone %d's LRU", p,
			     c->pzone[p], z);
	}
	if (prev != zn->lru_tail || k != zn->n_cached)
		FAIL("zone %d's LRU holds %d pages, count says %d", z, k,
		     zn->n_cached);
	*n += k;
	return 0;
}

static int check_lru(const struct pg_kvc *c, char *err, size_t err_len)
{
	int n = 0, i, n_zero = 0, rc;

	for (int z = 0; z < c->n_zones; z++)
		if ((rc = check_zone_lru(c, z, &n, err, err_len)))
			return rc;
	if (n != c->n_cached)
		FAIL("LRU holds %d pages, count says %d", n, c->n_cached);
	for (i = 0; i < c->n; i++)
		n_zero += page_cached(c, i);
	if (n_zero != n)
		FAIL("%d unreferenced pages, %d on the LRU", n_zero, n);
	return 0;
}

/* Every page's refcount equals the references from live sequences. */
static int check_refs(const struct pg_kvc *c, char *err, size_t err_len)
{
	const struct pg_kvc_seq *s;
	int32_t *cnt = calloc((size_t)c->n, sizeof(*cnt));
	int i, rc = 0;

	if (!cnt)
		FAIL("out of memory");
	for (s = c->seqs; s && !rc; s = s->next) {
		for (i = 0; i < s->n_pages; i++) {
			int32_t p = s->pages[i];
			int want = s->len - i * c->pt;

			want = want < 0 ? 0 : want > c->pt ? c->pt : want;
			if (p < 0 || p >= c->n || (c->flags[p] & PAGE_FREE) ||
			    c->n_tok[p] != want || c->depth[p] != i ||
			    c->pzone[p] != s->zone) {
				snprintf(err, err_len, "sequence page %d (%d) holds %d tokens, want %d (zone %d, the sequence's %d)",
					 i, p, p >= 0 && p < c->n ? c->n_tok[p] : -1, want,
					 p >= 0 && p < c->n ? c->pzone[p] : -1, s->zone);
				rc = -EFAULT;
				break;
			}
			cnt[p]++;
		}
	}
	for (i = 0; i < c->n && !rc; i++)
		if (cnt[i] != c->refs[i]) {
			snprintf(err, err_len, "page %d has refcount %d, %d references",
				 i, c->refs[i], cnt[i]);
			rc = -EFAULT;
		}
	free(cnt);
	return rc;
}

/* Each zone's count of live sequences is right. */
static int check_zone_seqs(const struct pg_kvc *c, char *err, size_t err_len)
{
	int cnt[PG_KVC_MAX_ZONES] = { 0 };

	for (const struct pg_kvc_seq *s = c->seqs; s; s = s->next) {
		if (s->zone < -1 || s->zone >= c->n_zones ||
		    (s->zone < 0 && s->n_pages))
			FAIL("a sequence of %d pages is in zone %d", s->n_pages,
			     s->zone);
		if (s->zone >= 0)
			cnt[s->zone]++;
	}
	for (int z = 0; z < c->n_zones; z++)
		if (cnt[z] != c->zones[z].n_seqs)
			FAIL("zone %d counts %d sequences, has %d", z,
			     c->zones[z].n_seqs, cnt[z]);
	return 0;
}

/* Both tables against the pages, and every hash recomputed. */
static int check_tables(const struct pg_kvc *c, char *err, size_t err_len)
{
	int i, n_pub = 0, n_full = 0;

	for (i = 0; i < c->n; i++) {
		if (c->flags[i] & PAGE_FREE)
			continue;
		if (c->flags[i] & PAGE_PUB) {
			n_pub++;
			if (htab_find(&c->index, page_key(c, i)) != i)
				FAIL("published page %d is not in the index", i);
		}
		if (!page_full(c, i))
			continue;
		n_full++;
		if (c->hash[i] != page_hash(c, c->parent[i],
					    c->tokens + (size_t)i * c->pt))
			FAIL("page %d: stale hash", i);
	}
	if (n_pub != c->index.n || n_full != c->children.n)
		FAIL("index %d/%d, children %d/%d", c->index.n, n_pub,
		     c->children.n, n_full);
	for (i = 0; i <= (int)c->children.mask; i++) {
		int32_t p = c->children.val[i];

		if (p >= 0 && (c->children.key[i] != c->parent[p] ||
			       (c->flags[p] & PAGE_FREE) || !page_full(c, p)))
			FAIL("children entry %d: page %d misfiled", i, p);
	}
	return 0;
}

/* A cached page below the root has its parent's hash held by a page. */
static int check_orphans(const struct pg_kvc *c, char *err, size_t err_len)
{
	struct htab held;
	int i, rc = 0;

	if (htab_init(&held, c->n)) {
		htab_fini(&held);
		FAIL("out of memory");
	}
	for (i = 0; i < c->n; i++)
		if (!(c->flags[i] & PAGE_FREE) && page_full(c, i))
			htab_insert(&held, page_key(c, i), i);
	for (i = 0; i < c->n && !rc; i++)
		if (page_cached(c, i) && c->depth[i] > 0 &&
		    htab_find(&held, zkey(c->parent[i], c->pzone[i])) < 0) {
			snprintf(err, err_len, "cached page %d is an orphan", i);
			rc = -EFAULT;
		}
	htab_fini(&held);
	return rc;
}

int pg_kvc_check(const struct pg_kvc *c, char *err, size_t err_len)
{
	int rc;

	if ((rc = check_free(c, err, err_len)) ||
	    (rc = check_lru(c, err, err_len)) ||
	    (rc = check_refs(c, err, err_len)) ||
	    (rc = check_zone_seqs(c, err, err_len)) ||
	    (rc = check_tables(c, err, err_len)) ||
	    (rc = check_orphans(c, err, err_len)))
		return rc;
	return 0;
}
