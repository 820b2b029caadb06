/*
 * kvcache.h - page accounting of the paged KV cache: refcounted pages,
 * per-sequence page tables, copy-on-write, and the prefix cache.
 *
 * Pages are named by ids 0 .. n_pages - 1; an id names the same page in
 * every stage's KV storage (which lives with the stage's backend, see
 * forward.h), so this module holds no KV data and knows nothing of models
 * or devices.  It only decides which page holds what.
 *
 * Prefix cache: a full page is identified by a 64-bit hash of (the hash of
 * the page before it, its page_tokens token ids, and the sequence's salt:
 * the model and, later, an adapter id).  When a sequence ends, its full,
 * hashed pages stay cached with refcount 0 on an LRU list; a new sequence
 * whose prompt starts with the same tokens takes them instead of computing
 * them.  Cached pages are evicted (LRU first) only when a page is needed
 * and none is free, or when asked; a page a live sequence uses is never
 * evicted.  Evicting a page also evicts the cached pages that continue it
 * (no lookup could reach them any more), so a cached page's prefix is
 * always known to the cache.
 *
 * Zones: a pool may be cut into n_zones zones, zone z holding page ids
 * [z * n_pages / n_zones, (z + 1) * n_pages / n_zones) (integer division),
 * for a forward pass with that many replicas (forward.h: replica z keeps
 * the KV of zone z's pages).  A sequence lives in one zone: it gets one
 * with its first page or prefix lookup (pg_kvc_seq_match says which), and
 * its pages, copies, forks and prefix matches all stay there; each zone
 * has its own free pages and LRU list, so evicting for a sequence evicts
 * in its zone.  With one zone (the default) there is no difference.
 *
 * Not thread-safe: one engine thread owns a cache.
 */
#ifndef PAGODA_KVCACHE_H
#define PAGODA_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

/* The most zones a pool may have (one per replica of a plan). */
#define PG_KVC_MAX_ZONES 64

struct pg_kvc;
struct pg_kvc_seq;

struct pg_kvc_params {
	int n_pages;		/* pages in the pool, >= 1 */
	int page_tokens;	/* tokens per page, >= 1 */
	uint64_t salt;		/* mixed into every hash: the model's identity */
	int n_zones;		/* zones, 1 .. min(PG_KVC_MAX_ZONES, n_pages);
				   0: 1 */
	/* monotonic seconds for LRU ages; NULL: CLOCK_MONOTONIC (tests inject) */
	double (*now)(void *ctx);
	void *now_ctx;
};

/* Counters and gauges; counters only grow (until pg_kvc_reset_counters). */
struct pg_kvc_stats {
	int n_pages;		/* in all */
	int n_free;		/* on the free list */
	int n_cached;		/* refcount 0, kept for the prefix cache */
	int n_used;		/* refcount > 0 */
	uint64_t queries;	/* prefix lookups */
	uint64_t hit_pages;	/* pages reused by lookups */
	uint64_t hit_tokens;	/* tokens those pages held */
	uint64_t query_tokens;	/* tokens looked up */
	uint64_t evictions;	/* cached pages dropped */
	uint64_t cow_copies;	/* pages copied on write */
};

/* One page copy the caller must perform on the KV storage of every stage. */
struct pg_kvc_copy {
	int32_t src;
	int32_t dst;
};

/*
 * pg_kvc_create - an empty cache with every page free.  Returns 0, -EINVAL
 * (bad params), -ENOMEM.
 */
int pg_kvc_create(const struct pg_kvc_params *p, struct pg_kvc **out);

/*
 * pg_kvc_destroy - free the cache, and any sequence of it still live (its
 * pointers are invalid after).
 */
void pg_kvc_destroy(struct pg_kvc *c);

/*
 * pg_kvc_seq_new - a new, empty sequence of `client` (for eviction by
 * client and statistics).  NULL on ENOMEM.
 */
struct pg_kvc_seq *pg_kvc_seq_new(struct pg_kvc *c, uint64_t client);

/*
 * pg_kvc_seq_fork - a new sequence of the same client and zone sharing the pages
 * that hold s's tokens (refcounts raised; pages s reserved beyond its
 * length stay s's own), for n > 1 completions of one prompt.  The first
 * write to a shared page copies it (see pg_kvc_seq_reserve).  NULL on
 * ENOMEM.
 */
struct pg_kvc_seq *pg_kvc_seq_fork(struct pg_kvc *c, const struct pg_kvc_seq *s);

/*
 * pg_kvc_seq_free - end a sequence: each of its pages loses a reference;
 * a page left unreferenced is cached if it is full and hashed, else freed.
 * NULL is allowed.
 */
void pg_kvc_seq_free(struct pg_kvc *c, struct pg_kvc_seq *s);

/*
 * pg_kvc_seq_match - on an empty sequence, attach the longest run of
 * cached full pages whose tokens equal the start of tokens[0 .. n), but
 * leave at least one token uncovered (its logits must be computed).
 * With several zones, a sequence without one first goes to a zone: of
 * those with room for all n tokens, the ones at most one live sequence
 * above the least loaded, and of those the one with the longest cached
 * prefix (then the fewest sequences, the most pages available); so load
 * stays even and a cached prefix still draws its continuations.  The
 * match is made in that zone only.
 * Returns the number of tokens covered (a multiple of page_tokens); the
 * sequence's length is that number.  Counts a query.  -EINVAL when s is
 * not empty or n < 0, -ENOMEM.
 */
int pg_kvc_seq_match(struct pg_kvc *c, struct pg_kvc_seq *s,
		     const int32_t *tokens, int n);

/*
 * pg_kvc_seq_reserve - make s's page table cover positions
 * 0 .. n_tokens - 1 for writing positions len .. n_tokens - 1 (len =
 * pg_kvc_seq_len).  A page that will be written and is shared or cached is
 * replaced by a private copy: the copies to make are returned in
 * copies[0 .. *n_copies) (room for 2 is always enough).  New pages come
 * from the free list, then by evicting the least recently used cached
 * pages, all in s's zone (a sequence without one gets one here, as
 * pg_kvc_seq_match gives it).  Returns 0, or -ENOSPC when not enough
 * pages can be had (then nothing changed but, perhaps, s's zone), -ENOMEM.
 */
int pg_kvc_seq_reserve(struct pg_kvc *c, struct pg_kvc_seq *s, int n_tokens,
		       struct pg_kvc_copy *copies, int *n_copies);

/*
 * pg_kvc_seq_append - record that tokens[0 .. n) now sit in positions
 * len .. len + n - 1 (reserved before); the length grows by n, and every
 * page that becomes full is hashed and published to the prefix cache (a
 * page with the same hash already cached stays the one found by lookups).
 */
void pg_kvc_seq_append(struct pg_kvc *c, struct pg_kvc_seq *s,
		       const int32_t *tokens, int n);

/* The sequence's page table (one id per page_tokens positions) and length. */
const int32_t *pg_kvc_seq_pages(const struct pg_kvc_seq *s);
int pg_kvc_seq_n_pages(const struct pg_kvc_seq *s);
int pg_kvc_seq_len(const struct pg_kvc_seq *s);

/*
 * pg_kvc_page_refs - a page's state: its refcount (> 0: used), 0 (cached)
 * or -1 (free, or no such page).  For tests and statistics.
 */
int pg_kvc_page_refs(const struct pg_kvc *c, int page);

/*
 * pg_kvc_page_tokens - the token ids a page holds: *tokens points at them
 * (valid until the next call that changes the cache); returns how many,
 * or -EINVAL for no such page.
 */
int pg_kvc_page_tokens(const struct pg_kvc *c, int page,
		       const int32_t **tokens);

/* pg_kvc_pages_needed - free-or-evictable pages s needs to reach n_tokens. */
int pg_kvc_pages_needed(const struct pg_kvc *c, const struct pg_kvc_seq *s,
			int n_tokens);

/* pg_kvc_n_available - free pages plus evictable cached pages. */
int pg_kvc_n_available(const struct pg_kvc *c);

/*
 * pg_kvc_seq_n_available - what s can be given: free plus evictable
 * cached pages of its zone, or of the zone that has most when s has none
 * yet.  With one zone, pg_kvc_n_available.
 */
int pg_kvc_seq_n_available(const struct pg_kvc *c, const struct pg_kvc_seq *s);

/* pg_kvc_n_zones - the pool's zones (1 unless n_zones asked for more). */
int pg_kvc_n_zones(const struct pg_kvc *c);

/* pg_kvc_seq_zone - s's zone, or -1 before it has one. */
int pg_kvc_seq_zone(const struct pg_kvc_seq *s);

enum pg_kvc_evict_by {
	PG_KVC_EVICT_ALL = 0,	/* every cached page */
	PG_KVC_EVICT_AGE,	/* cached pages unused for at least age_s */
	PG_KVC_EVICT_PAGES,	/* n_pages or more, least recently used first */
	PG_KVC_EVICT_PREFIX,	/* the cached pages of a token prefix and
				   everything cached that extends it */
	PG_KVC_EVICT_CLIENT,	/* the cached pages client created */
};

struct pg_kvc_evict {
	enum pg_kvc_evict_by by;
	double age_s;
	int n_pages;
	const int32_t *prefix;
	int n_prefix;
	uint64_t client;
};

/*
 * pg_kvc_evict - drop cached pages (never one a sequence uses), each with
 * the cached pages that continue it.  PAGES stops once n_pages are gone
 * (or none is cached).  Returns the number of pages evicted, or -EINVAL
 * for a bad request, -ENOMEM.
 */
int pg_kvc_evict(struct pg_kvc *c, const struct pg_kvc_evict *e);

/*
 * pg_kvc_test_hash_bits - for tests only: cut the index hash to its low
 * bits (1 .. 64) so that keys collide; call it on a cache with no full
 * page.  Lookups stay correct, since they also compare the page's tokens
 * and a second hash of its whole path.
 */
void pg_kvc_test_hash_bits(struct pg_kvc *c, int bits);

/* pg_kvc_stats - the counters and gauges now. */
void pg_kvc_get_stats(const struct pg_kvc *c, struct pg_kvc_stats *st);

/* pg_kvc_reset_counters - zero the counters (not the gauges). */
void pg_kvc_reset_counters(struct pg_kvc *c);

/*
 * pg_kvc_check - verify every internal invariant (refcounts equal the
 * references from live sequences, free + cached + used = n_pages, the LRU
 * list and hash index agree with the pages).  Returns 0, or -EFAULT with a
 * description in err.  For tests; O(n_pages + total page-table length).
 */
int pg_kvc_check(const struct pg_kvc *c, char *err, size_t err_len);

#endif
