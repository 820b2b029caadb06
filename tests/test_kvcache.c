/*
 * test_kvcache.c - tests of the KV page accounting and prefix cache
 * (daemon/engine/kvcache.c): unit tests of each rule, then a randomised
 * run against a reference model.
 *
 * The model is deliberately naive and shares nothing with the cache: plain
 * arrays indexed by the cache's page ids, every search a linear scan, and
 * pages identified by their whole token path instead of hashes.  It does
 * not choose page ids; it checks that each id the cache hands out was free
 * (after the eviction the model itself predicts).  Exits 0 or 1.
 *
 * Zones (the pool cut for a forward pass's replicas) are tested apart:
 * unit tests of each rule, then random operations on a cache with zones
 * and colliding hashes, checked by pg_kvc_check (which holds every
 * sequence's pages, the free stacks and the LRU lists to their zones)
 * and by comparing every prefix match with the tokens asked for.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/engine/kvcache.h"

static int failed;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__);				\
		fprintf(stderr, "\n");					\
		failed = 1;						\
		return 1;						\
	}								\
} while (0)

static double g_now;

static double test_now(void *ctx)
{
	(void)ctx;
	return g_now;
}

static struct pg_kvc *mk_zones(int n_pages, int pt, int n_zones)
{
	struct pg_kvc_params p = {
		.n_pages = n_pages, .page_tokens = pt, .salt = 42,
		.now = test_now, .n_zones = n_zones,
	};
	struct pg_kvc *c;

	if (pg_kvc_create(&p, &c)) {
		fprintf(stderr, "pg_kvc_create failed\n");
		exit(1);
	}
	return c;
}

static struct pg_kvc *mk(int n_pages, int pt)
{
	return mk_zones(n_pages, pt, 1);
}

static int ok(const struct pg_kvc *c)
{
	char err[256];

	if (pg_kvc_check(c, err, sizeof(err))) {
		fprintf(stderr, "pg_kvc_check: %s\n", err);
		return 0;
	}
	return 1;
}

static struct pg_kvc_stats stats(const struct pg_kvc *c)
{
	struct pg_kvc_stats st;

	pg_kvc_get_stats(c, &st);
	return st;
}

/* reserve and append tokens[0 .. n) to s; returns reserve's result */
static int put(struct pg_kvc *c, struct pg_kvc_seq *s, const int32_t *tok,
	       int n, struct pg_kvc_copy *cp, int *n_cp)
{
	struct pg_kvc_copy scratch[2];
	int dummy, rc;

	rc = pg_kvc_seq_reserve(c, s, pg_kvc_seq_len(s) + n, cp ? cp : scratch,
				n_cp ? n_cp : &dummy);
	if (rc == 0)
		pg_kvc_seq_append(c, s, tok, n);
	return rc;
}

/* a sequence of client holding tok[0 .. n), prefix cache used */
static struct pg_kvc_seq *seq_with(struct pg_kvc *c, uint64_t client,
				   const int32_t *tok, int n)
{
	struct pg_kvc_seq *s = pg_kvc_seq_new(c, client);
	int got = pg_kvc_seq_match(c, s, tok, n);

	if (got < 0 || put(c, s, tok + got, n - got, NULL, NULL)) {
		fprintf(stderr, "seq_with: no room\n");
		exit(1);
	}
	return s;
}

static const int32_t T[] = {
	10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
};

/* ---- unit tests ---- */

static int test_match_reuse(void)
{
	struct pg_kvc *c = mk(16, 4);
	struct pg_kvc_seq *a, *b;
	struct pg_kvc_stats st;
	const int32_t *pa;

	a = seq_with(c, 1, T, 10);
	CHECK(pg_kvc_seq_len(a) == 10 && pg_kvc_seq_n_pages(a) == 3, "a");
	pa = pg_kvc_seq_pages(a);
	CHECK(ok(c), "check");
	int32_t a0 = pa[0], a1 = pa[1];
	pg_kvc_seq_free(c, a);
	st = stats(c);
	CHECK(st.n_cached == 2 && st.n_free == 14 && st.n_used == 0,
	      "cached %d free %d", st.n_cached, st.n_free);
	b = pg_kvc_seq_new(c, 2);
	CHECK(pg_kvc_seq_match(c, b, T, 10) == 8, "match");
	CHECK(pg_kvc_seq_pages(b)[0] == a0 && pg_kvc_seq_pages(b)[1] == a1,
	      "same pages");
	st = stats(c);
	CHECK(st.queries == 2 && st.query_tokens == 20 && st.hit_pages == 2 &&
	      st.hit_tokens == 8 && st.n_used == 2 && st.n_cached == 0,
	      "stats q %llu h %llu", (unsigned long long)st.queries,
	      (unsigned long long)st.hit_pages);
	CHECK(pg_kvc_seq_match(c, b, T, 10) == -EINVAL, "match on non-empty");
	CHECK(ok(c), "check");
	/* a different second page: only the first is shared */
	int32_t other[10];
	memcpy(other, T, sizeof(other));
	other[5] = 99;
	struct pg_kvc_seq *d = pg_kvc_seq_new(c, 3);
	CHECK(pg_kvc_seq_match(c, d, other, 10) == 4, "partial match");
	CHECK(pg_kvc_page_refs(c, a0) == 2, "refs");
	pg_kvc_reset_counters(c);
	st = stats(c);
	CHECK(st.queries == 0 && st.hit_pages == 0 && st.n_used == 2, "reset");
	pg_kvc_seq_free(c, b);
	pg_kvc_seq_free(c, d);
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

static int test_leave_one(void)
{
	struct pg_kvc *c = mk(8, 4);
	struct pg_kvc_seq *a = seq_with(c, 1, T, 12), *b;

	pg_kvc_seq_free(c, a);
	b = pg_kvc_seq_new(c, 1);
	CHECK(pg_kvc_seq_match(c, b, T, 8) == 4, "8 tokens cover 4");
	pg_kvc_seq_free(c, b);
	b = pg_kvc_seq_new(c, 1);
	CHECK(pg_kvc_seq_match(c, b, T, 9) == 8, "9 tokens cover 8");
	pg_kvc_seq_free(c, b);
	b = pg_kvc_seq_new(c, 1);
	CHECK(pg_kvc_seq_match(c, b, T, 1) == 0, "1 token covers 0");
	CHECK(pg_kvc_seq_match(c, b, T, 0) == 0, "empty");
	pg_kvc_seq_free(c, b);
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

static int test_cow_fork(void)
{
	struct pg_kvc *c = mk(16, 4);
	struct pg_kvc_seq *a = seq_with(c, 1, T, 6), *b;
	struct pg_kvc_copy cp[2];
	int n_cp;
	int32_t x = 77, y = 88, p0, p1;
	const int32_t *tk;

	p0 = pg_kvc_seq_pages(a)[0];
	p1 = pg_kvc_seq_pages(a)[1];
	b = pg_kvc_seq_fork(c, a);
	CHECK(b && pg_kvc_seq_len(b) == 6 && pg_kvc_page_refs(c, p1) == 2, "fork");
	CHECK(ok(c), "check");
	CHECK(put(c, a, &x, 1, cp, &n_cp) == 0 && n_cp == 1 &&
	      cp[0].src == p1 && cp[0].dst != p1 && cp[0].dst != p0,
	      "a copies the shared partial page (n_cp %d)", n_cp);
	CHECK(pg_kvc_seq_pages(a)[1] == cp[0].dst && pg_kvc_seq_pages(a)[0] == p0,
	      "a's table");
	CHECK(put(c, b, &y, 1, cp, &n_cp) == 0 && n_cp == 0 &&
	      pg_kvc_seq_pages(b)[1] == p1, "b writes its own page in place");
	CHECK(pg_kvc_page_tokens(c, pg_kvc_seq_pages(a)[1], &tk) == 3 &&
	      tk[0] == T[4] && tk[1] == T[5] && tk[2] == 77, "a's tokens");
	CHECK(pg_kvc_page_tokens(c, p1, &tk) == 3 && tk[2] == 88, "b's tokens");
	CHECK(stats(c).cow_copies == 1, "one copy");
	CHECK(ok(c), "check");
	pg_kvc_seq_free(c, b);

	/* both sides write: b first this time */
	b = pg_kvc_seq_fork(c, a);
	int32_t p1a = pg_kvc_seq_pages(a)[1];
	CHECK(put(c, b, &y, 1, cp, &n_cp) == 0 && n_cp == 1 && cp[0].src == p1a,
	      "b copies");
	CHECK(put(c, a, &x, 1, cp, &n_cp) == 0 && n_cp == 0, "a then does not");
	/* a full page shared by a fork is never copied */
	int32_t more[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	CHECK(put(c, a, more, 8, cp, &n_cp) == 0 && n_cp == 0, "a grows");
	pg_kvc_seq_free(c, b);
	b = pg_kvc_seq_fork(c, a);	/* a: 16 tokens, page aligned */
	CHECK(pg_kvc_seq_len(a) == 16 && put(c, b, &y, 1, cp, &n_cp) == 0 &&
	      n_cp == 0 && pg_kvc_seq_n_pages(b) == 5, "aligned fork");
	/* pages reserved beyond the length are not shared */
	CHECK(pg_kvc_seq_reserve(c, a, 24, cp, &n_cp) == 0 && n_cp == 0, "reserve");
	pg_kvc_seq_free(c, b);
	b = pg_kvc_seq_fork(c, a);
	CHECK(pg_kvc_seq_n_pages(b) == 4 && pg_kvc_seq_n_pages(a) == 6, "fork data");
	CHECK(ok(c), "check");
	pg_kvc_seq_free(c, a);
	pg_kvc_seq_free(c, b);
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

static int test_enospc(void)
{
	struct pg_kvc *c = mk(4, 4);
	struct pg_kvc_seq *a = seq_with(c, 1, T, 10), *b, *f;
	struct pg_kvc_stats before, after;
	struct pg_kvc_copy cp[2];
	int n_cp = 5;

	b = pg_kvc_seq_new(c, 2);
	before = stats(c);
	CHECK(pg_kvc_pages_needed(c, b, 8) == 2 && pg_kvc_n_available(c) == 1,
	      "needed");
	CHECK(pg_kvc_seq_reserve(c, b, 8, cp, &n_cp) == -ENOSPC && n_cp == 0,
	      "enospc");
	after = stats(c);
	CHECK(!memcmp(&before, &after, sizeof(before)) &&
	      pg_kvc_seq_n_pages(b) == 0, "unchanged");
	/* a copy on write that cannot be had */
	f = pg_kvc_seq_fork(c, a);
	CHECK(pg_kvc_seq_reserve(c, b, 4, cp, &n_cp) == 0, "b takes the last");
	before = stats(c);
	const int32_t *pa = pg_kvc_seq_pages(a);
	int32_t last = pa[2];
	CHECK(pg_kvc_pages_needed(c, a, 11) == 1, "cow needs one");
	CHECK(pg_kvc_seq_reserve(c, a, 11, cp, &n_cp) == -ENOSPC, "cow enospc");
	after = stats(c);
	CHECK(!memcmp(&before, &after, sizeof(before)) &&
	      pg_kvc_seq_pages(a)[2] == last && pg_kvc_page_refs(c, last) == 2,
	      "unchanged");
	CHECK(ok(c), "check");
	pg_kvc_seq_free(c, a);
	pg_kvc_seq_free(c, b);
	pg_kvc_seq_free(c, f);
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

static int test_lru(void)
{
	struct pg_kvc *c = mk(4, 2);
	int32_t pa, pb, pc;
	struct pg_kvc_seq *s;

	s = seq_with(c, 1, T + 0, 2);
	pa = pg_kvc_seq_pages(s)[0];
	g_now = 1;
	pg_kvc_seq_free(c, s);
	s = seq_with(c, 1, T + 2, 2);
	pb = pg_kvc_seq_pages(s)[0];
	g_now = 2;
	pg_kvc_seq_free(c, s);
	s = seq_with(c, 1, T + 4, 2);
	pc = pg_kvc_seq_pages(s)[0];
	g_now = 3;
	pg_kvc_seq_free(c, s);
	CHECK(stats(c).n_cached == 3 && stats(c).n_free == 1, "three cached");
	/* touch a: b becomes the least recently used */
	s = pg_kvc_seq_new(c, 1);
	CHECK(pg_kvc_seq_match(c, s, T + 0, 3) == 2, "hit a");
	pg_kvc_seq_free(c, s);
	s = pg_kvc_seq_new(c, 2);
	CHECK(put(c, s, T + 8, 4, NULL, NULL) == 0, "two pages");
	CHECK(stats(c).evictions == 1 && pg_kvc_page_refs(c, pb) > 0 &&
	      pg_kvc_page_refs(c, pa) == 0 && pg_kvc_page_refs(c, pc) == 0,
	      "b evicted first");
	CHECK(put(c, s, T + 12, 2, NULL, NULL) == 0 &&
	      pg_kvc_page_refs(c, pc) > 0 && pg_kvc_page_refs(c, pa) == 0,
	      "then c");
	CHECK(ok(c), "check");
	pg_kvc_seq_free(c, s);
	/* one sequence's pages are released last first */
	pg_kvc_evict(c, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	s = seq_with(c, 1, T, 8);
	int32_t last = pg_kvc_seq_pages(s)[3];
	pg_kvc_seq_free(c, s);
	CHECK(pg_kvc_evict(c, &(struct pg_kvc_evict){
		.by = PG_KVC_EVICT_PAGES, .n_pages = 1 }) == 1 &&
	      pg_kvc_page_refs(c, last) == -1, "tail page is the oldest");
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

static int test_evict_kinds(void)
{
	struct pg_kvc *c = mk(32, 2);
	struct pg_kvc_evict e = { .by = PG_KVC_EVICT_ALL };
	int32_t x[6] = { 1, 2, 3, 4, 5, 6 }, y[6] = { 1, 2, 3, 4, 7, 8 },
		z[4] = { 9, 9, 9, 9 }, w[4] = { 5, 5, 5, 5 };
	struct pg_kvc_seq *s;

	g_now = 100;
	pg_kvc_seq_free(c, seq_with(c, 1, x, 6));
	pg_kvc_seq_free(c, seq_with(c, 1, y, 6));
	g_now = 110;
	pg_kvc_seq_free(c, seq_with(c, 2, z, 4));
	pg_kvc_seq_free(c, seq_with(c, 7, w, 4));
	CHECK(stats(c).n_cached == 8, "8 cached, not %d", stats(c).n_cached);

	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_PREFIX, .prefix = x,
				   .n_prefix = 3 };
	/* hold {1 2} so the prefix's first page stays; {3 4} and below go */
	s = pg_kvc_seq_new(c, 3);
	CHECK(pg_kvc_seq_match(c, s, x, 3) == 2, "hold");
	CHECK(pg_kvc_evict(c, &e) == 3, "prefix: {3 4}, {5 6}, {7 8}");
	CHECK(stats(c).n_cached == 4 && stats(c).n_used == 1, "left");
	pg_kvc_seq_free(c, s);
	pg_kvc_seq_free(c, seq_with(c, 1, y, 6));
	/* a partial page: only what continues it */
	e.prefix = y;
	e.n_prefix = 5;
	s = pg_kvc_seq_new(c, 3);
	CHECK(pg_kvc_seq_match(c, s, y, 5) == 4, "hold two");
	pg_kvc_seq_free(c, seq_with(c, 1, x, 6));
	CHECK(pg_kvc_evict(c, &e) == 1 && pg_kvc_seq_match(c,
	      pg_kvc_seq_new(c, 9), x, 6) == 4, "{7 8} only");
	CHECK(ok(c), "check");
	pg_kvc_evict(c, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	CHECK(stats(c).n_cached == 0 && stats(c).n_used == 2, "in use stays");
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);	/* frees the two sequences still live */

	c = mk(32, 2);
	g_now = 100;
	pg_kvc_seq_free(c, seq_with(c, 1, x, 6));
	g_now = 110;
	pg_kvc_seq_free(c, seq_with(c, 2, z, 4));
	pg_kvc_seq_free(c, seq_with(c, 7, w, 4));
	g_now = 115;
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_AGE, .age_s = 10 };
	CHECK(pg_kvc_evict(c, &e) == 3, "age");
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_CLIENT, .client = 7 };
	CHECK(pg_kvc_evict(c, &e) == 2 && stats(c).n_cached == 2, "client");
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_PAGES, .n_pages = 1 };
	CHECK(pg_kvc_evict(c, &e) == 1 && stats(c).n_cached == 1, "pages");
	e.n_pages = 0;
	CHECK(pg_kvc_evict(c, &e) == 0, "zero pages");
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL };
	CHECK(pg_kvc_evict(c, &e) == 1 && stats(c).evictions == 7, "all");
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_PREFIX };
	CHECK(pg_kvc_evict(c, &e) == -EINVAL, "no prefix");
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_AGE, .age_s = -1 };
	CHECK(pg_kvc_evict(c, &e) == -EINVAL, "negative age");
	e = (struct pg_kvc_evict){ .by = PG_KVC_EVICT_PAGES, .n_pages = -1 };
	CHECK(pg_kvc_evict(c, &e) == -EINVAL, "negative count");
	e = (struct pg_kvc_evict){ .by = (enum pg_kvc_evict_by)99 };
	CHECK(pg_kvc_evict(c, &e) == -EINVAL, "unknown kind");
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

/* An evicted page takes the cached pages that continue it. */
static int test_cascade(void)
{
	struct pg_kvc *c = mk(8, 2);
	struct pg_kvc_evict by_client = { .by = PG_KVC_EVICT_CLIENT, .client = 1 };
	struct pg_kvc_seq *s;

	/* client 1 made the first page, client 2 the two after it */
	pg_kvc_seq_free(c, seq_with(c, 1, T, 2));
	s = seq_with(c, 2, T, 6);
	CHECK(stats(c).hit_pages == 1, "hit");
	pg_kvc_seq_free(c, s);
	CHECK(stats(c).n_cached == 3, "three cached");
	CHECK(pg_kvc_evict(c, &by_client) == 3 && stats(c).n_cached == 0,
	      "client 1's page and what continues it");
	/* a duplicate of a cached page is freed, not cached */
	pg_kvc_seq_free(c, seq_with(c, 1, T, 6));
	s = seq_with(c, 2, T, 2);
	pg_kvc_seq_free(c, s);
	CHECK(stats(c).n_cached == 3, "duplicate freed");
	CHECK(pg_kvc_evict(c, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_PREFIX,
		.prefix = T, .n_prefix = 2 }) == 3, "subtree");
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

/* Index keys cut to 2 bits: collisions everywhere, lookups still right. */
static int test_collisions(void)
{
	struct pg_kvc *c = mk(64, 2);
	int32_t a[9], b[9] = { 0 };
	struct pg_kvc_seq *s;
	int i, k, got;
	const int32_t *tk;

	pg_kvc_test_hash_bits(c, 2);
	srand(7);
	for (k = 0; k < 3000; k++) {
		for (i = 0; i < 9; i++)
			a[i] = rand() % 3;
		s = pg_kvc_seq_new(c, (uint64_t)(k % 3));
		got = pg_kvc_seq_match(c, s, a, 9);
		CHECK(got >= 0 && got % 2 == 0, "match %d", got);
		for (i = 0; i < got / 2; i++)
			CHECK(pg_kvc_page_tokens(c, pg_kvc_seq_pages(s)[i], &tk) == 2 &&
			      tk[0] == a[2 * i] && tk[1] == a[2 * i + 1],
			      "wrong page attached");
		if (put(c, s, a + got, 9 - got, NULL, NULL) == 0 && rand() % 2) {
			memcpy(b, a, sizeof(b));
			pg_kvc_seq_free(c, pg_kvc_seq_fork(c, s));
		}
		pg_kvc_seq_free(c, s);
		if (k % 97 == 0)
			pg_kvc_evict(c, &(struct pg_kvc_evict){
				.by = PG_KVC_EVICT_PREFIX, .prefix = b, .n_prefix = 3 });
		if (!ok(c))
			return failed = 1;
	}
	pg_kvc_destroy(c);
	return 0;
}

/* ---- the reference model ---- */

#define MAX_LEN 64
#define MAX_PT 4
#define MAX_PAGES 64
#define MAX_SEQS 10
#define N_BASES 4

enum { M_FREE, M_USED, M_CACHED };

struct mpage {
	int state, ref, pub, ntok, depth;
	int32_t tok[MAX_PT];
	int32_t path[MAX_LEN];	/* the tokens from the start, when full */
	uint64_t client;
	double t;		/* when cached */
	long order;		/* LRU rank: larger is newer */
};

struct mseq {
	struct pg_kvc_seq *s;
	uint64_t client;
	int len, np;
	int32_t tok[MAX_LEN];
	int32_t pages[MAX_LEN];
	int32_t todo[MAX_LEN];	/* prompt tokens still to append */
	int n_todo;
};

struct model {
	struct pg_kvc *c;
	int n, pt;
	struct mpage pg[MAX_PAGES];
	struct mseq seq[MAX_SEQS];
	int n_seqs;
	long order;
	uint64_t evictions, cow;
	long n_enospc, n_evict_ops[5];	/* coverage, printed at the end */
	long n_cascade, n_late_pub;
	int32_t base[N_BASES][MAX_LEN];
};

static uint64_t rng = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

static int m_count(const struct model *m, int state)
{
	int i, k = 0;

	for (i = 0; i < m->n; i++)
		k += m->pg[i].state == state;
	return k;
}

static int path_len(const struct model *m, int p)
{
	return (m->pg[p].depth + 1) * m->pt;
}

/* the published page whose path is tok[0 .. n), or -1 */
static int m_find_pub(const struct model *m, const int32_t *tok, int n)
{
	int i;

	for (i = 0; i < m->n; i++) {
		const struct mpage *q = &m->pg[i];

		if (q->state != M_FREE && q->pub && q->ntok == m->pt &&
		    path_len(m, i) == n &&
		    !memcmp(q->path, tok, (size_t)n * sizeof(*tok)))
			return i;
	}
	return -1;
}

static void m_set_free(struct model *m, int p)
{
	memset(&m->pg[p], 0, sizeof(m->pg[p]));
	m->pg[p].state = M_FREE;
}

static int m_evict(struct model *m, int p)
{
	int32_t path[MAX_LEN];
	int i, n = 1, plen = path_len(m, p);

	memcpy(path, m->pg[p].path, sizeof(path));
	m_set_free(m, p);
	m->evictions++;
	for (i = 0; i < m->n; i++)
		if (m->pg[i].state == M_CACHED &&
		    path_len(m, i) == plen + m->pt &&
		    !memcmp(m->pg[i].path, path, (size_t)plen * sizeof(*path))) {
			m->n_cascade++;
			n += m_evict(m, i);
		}
	return n;
}

static int m_lru_min(const struct model *m)
{
	int i, best = -1;

	for (i = 0; i < m->n; i++)
		if (m->pg[i].state == M_CACHED &&
		    (best < 0 || m->pg[i].order < m->pg[best].order))
			best = i;
	return best;
}

static void m_release(struct model *m, int p)
{
	struct mpage *q = &m->pg[p];

	if (--q->ref > 0)
		return;
	if (q->ntok == m->pt &&
	    (q->pub || m_find_pub(m, q->path, path_len(m, p)) < 0)) {
		m->n_late_pub += !q->pub;
		q->pub = 1;
		q->state = M_CACHED;
		q->t = g_now;
		q->order = ++m->order;
		return;
	}
	m_set_free(m, p);
}

/* the cache handed out page p: the model agrees it could */
static int m_take_new(struct model *m, int p, uint64_t client, int depth)
{
	if (m_count(m, M_FREE) == 0)
		m_evict(m, m_lru_min(m));
	CHECK(p >= 0 && p < m->n && m->pg[p].state == M_FREE,
	      "page %d handed out but not free", p);
	m->pg[p].state = M_USED;
	m->pg[p].ref = 1;
	m->pg[p].client = client;
	m->pg[p].depth = depth;
	return 0;
}

/* ---- model operations, each run on the cache and the model ---- */

static int op_new(struct model *m)
{
	struct mseq *q = &m->seq[m->n_seqs];
	int32_t prompt[MAX_LEN];
	int n = 1 + (int)rnd(MAX_LEN - 8), keep = (int)rnd((uint32_t)n + 1);
	int i, got, want = 0, b = (int)rnd(N_BASES);

	for (i = 0; i < n; i++)
		prompt[i] = i < keep ? m->base[b][i] : (int32_t)rnd(3);
	memset(q, 0, sizeof(*q));
	q->client = rnd(3);
	q->s = pg_kvc_seq_new(m->c, q->client);
	CHECK(q->s, "seq_new");
	m->n_seqs++;
	got = pg_kvc_seq_match(m->c, q->s, prompt, n);
	while ((want + 1) * m->pt <= n - 1) {
		int p = m_find_pub(m, prompt, (want + 1) * m->pt);

		if (p < 0)
			break;
		if (m->pg[p].state == M_CACHED)
			m->pg[p].state = M_USED;
		m->pg[p].ref++;
		q->pages[want++] = p;
	}
	CHECK(got == want * m->pt, "match %d, model %d", got, want * m->pt);
	for (i = 0; i < want; i++)
		CHECK(pg_kvc_seq_pages(q->s)[i] == q->pages[i], "match page %d", i);
	q->np = want;
	q->len = got;
	memcpy(q->tok, prompt, (size_t)got * sizeof(*prompt));
	q->n_todo = n - got;
	memcpy(q->todo, prompt + got, (size_t)q->n_todo * sizeof(*prompt));
	return 0;
}

static int m_reserve_ok(struct model *m, struct mseq *q, int target,
			const struct pg_kvc_copy *cp, int n_cp)
{
	const int32_t *pages = pg_kvc_seq_pages(q->s);
	int idx = q->len / m->pt, total = (target + m->pt - 1) / m->pt;
	int cow = idx < q->np && (m->pg[q->pages[idx]].ref > 1 ||
				  m->pg[q->pages[idx]].pub);

	CHECK(n_cp == cow, "copies %d, model %d", n_cp, cow);
	if (cow) {
		int src = q->pages[idx], dst = cp[0].dst;

		CHECK(cp[0].src == src && pages[idx] == dst, "copy");
		if (m_take_new(m, dst, q->client, idx))
			return 1;
		m->pg[dst].ntok = q->len - idx * m->pt;
		memcpy(m->pg[dst].tok, m->pg[src].tok, sizeof(m->pg[dst].tok));
		q->pages[idx] = dst;
		m_release(m, src);
		m->cow++;
	}
	for (; q->np < total; q->np++) {
		if (m_take_new(m, pages[q->np], q->client, q->np))
			return 1;
		q->pages[q->np] = pages[q->np];
	}
	return 0;
}

static void m_append(struct model *m, struct mseq *q, const int32_t *tok, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		int idx = q->len / m->pt, off = q->len % m->pt;
		struct mpage *pg = &m->pg[q->pages[idx]];

		pg->tok[off] = tok[i];
		pg->ntok = off + 1;
		q->tok[q->len++] = tok[i];
		if (pg->ntok == m->pt) {
			memcpy(pg->path, q->tok, (size_t)q->len * sizeof(*tok));
			pg->pub = m_find_pub(m, q->tok, q->len) < 0;
		}
	}
}

static int op_extend(struct model *m, struct mseq *q)
{
	struct pg_kvc_copy cp[2];
	int32_t tok[MAX_LEN];
	int k = 1 + (int)rnd(12), target, need, rc, n_cp, n, i;
	int32_t before[MAX_LEN];
	int np_before = pg_kvc_seq_n_pages(q->s);

	target = q->len + k > MAX_LEN ? MAX_LEN : q->len + k;
	if (target == q->len)
		return 0;
	if (np_before)
		memcpy(before, pg_kvc_seq_pages(q->s),
		       (size_t)np_before * sizeof(int32_t));
	need = pg_kvc_pages_needed(m->c, q->s, target);
	rc = pg_kvc_seq_reserve(m->c, q->s, target, cp, &n_cp);
	if (need > m_count(m, M_FREE) + m_count(m, M_CACHED)) {
		CHECK(rc == -ENOSPC && n_cp == 0, "want ENOSPC, got %d", rc);
		CHECK(pg_kvc_seq_n_pages(q->s) == np_before &&
		      (!np_before || !memcmp(before, pg_kvc_seq_pages(q->s),
			      (size_t)np_before * sizeof(int32_t))), "changed");
		m->n_enospc++;
		return 0;
	}
	CHECK(rc == 0, "reserve %d", rc);
	if (m_reserve_ok(m, q, target, cp, n_cp))
		return 1;
	n = rnd(4) ? target - q->len : (int)rnd((uint32_t)(target - q->len + 1));
	for (i = 0; i < n; i++) {
		if (q->n_todo) {
			tok[i] = q->todo[0];
			memmove(q->todo, q->todo + 1, (size_t)--q->n_todo * sizeof(int32_t));
		} else {
			tok[i] = (int32_t)rnd(3);
		}
	}
	pg_kvc_seq_append(m->c, q->s, tok, n);
	m_append(m, q, tok, n);
	return 0;
}

static int op_fork(struct model *m, struct mseq *q)
{
	struct mseq *f = &m->seq[m->n_seqs];
	int i;

	*f = *q;
	f->s = pg_kvc_seq_fork(m->c, q->s);
	CHECK(f->s, "fork");
	m->n_seqs++;
	f->np = (q->len + m->pt - 1) / m->pt;
	for (i = 0; i < f->np; i++)
		m->pg[f->pages[i]].ref++;
	return 0;
}

static void op_free(struct model *m, int k)
{
	struct mseq *q = &m->seq[k];
	int i;

	pg_kvc_seq_free(m->c, q->s);
	for (i = q->np - 1; i >= 0; i--)
		m_release(m, q->pages[i]);
	m->seq[k] = m->seq[--m->n_seqs];
}

/* the model's pages to evict, before any is evicted (order is moot) */
static int m_evict_kind(struct model *m, const struct pg_kvc_evict *e)
{
	int cand[MAX_PAGES], n_cand = 0, i, n = 0, p;

	if (e->by == PG_KVC_EVICT_PAGES) {
		while (n < e->n_pages && (p = m_lru_min(m)) >= 0)
			n += m_evict(m, p);
		return n;
	}
	for (i = 0; i < m->n; i++) {
		const struct mpage *q = &m->pg[i];
		int len;

		if (q->state != M_CACHED)
			continue;
		len = path_len(m, i) < e->n_prefix ? path_len(m, i) : e->n_prefix;
		if (e->by == PG_KVC_EVICT_ALL ||
		    (e->by == PG_KVC_EVICT_AGE && g_now - q->t >= e->age_s) ||
		    (e->by == PG_KVC_EVICT_CLIENT && q->client == e->client) ||
		    (e->by == PG_KVC_EVICT_PREFIX &&
		     !memcmp(q->path, e->prefix, (size_t)len * sizeof(int32_t))))
			cand[n_cand++] = i;
	}
	for (i = 0; i < n_cand; i++)
		if (m->pg[cand[i]].state == M_CACHED)
			n += m_evict(m, cand[i]);
	return n;
}

static int op_evict(struct model *m)
{
	struct pg_kvc_evict e = { .by = (enum pg_kvc_evict_by)rnd(5) };
	int32_t prefix[MAX_LEN];
	int got, want, i;

	e.age_s = rnd(40) * 0.25;
	e.n_pages = (int)rnd(6);
	e.client = rnd(3);
	e.n_prefix = 1 + (int)rnd(24);
	if (m->n_seqs && rnd(2)) {
		struct mseq *q = &m->seq[rnd((uint32_t)m->n_seqs)];

		e.n_prefix = q->len ? 1 + (int)rnd((uint32_t)q->len) : 1;
		memcpy(prefix, q->tok, (size_t)q->len * sizeof(int32_t));
		if (!q->len)
			prefix[0] = 0;
	} else {
		for (i = 0; i < e.n_prefix; i++)
			prefix[i] = m->base[rnd(N_BASES)][i];
	}
	e.prefix = prefix;
	got = pg_kvc_evict(m->c, &e);
	want = m_evict_kind(m, &e);
	CHECK(got == want, "evict kind %d: %d, model %d", e.by, got, want);
	if (got > 0)
		m->n_evict_ops[e.by]++;
	return 0;
}

/* the cache and the model agree, page by page and sequence by sequence */
static int m_compare(struct model *m)
{
	struct pg_kvc_stats st = stats(m->c);
	const int32_t *tk;
	int i, j, n;

	CHECK(ok(m->c), "pg_kvc_check");
	CHECK(st.n_free == m_count(m, M_FREE) && st.n_cached == m_count(m, M_CACHED) &&
	      st.n_used == m_count(m, M_USED), "counts %d/%d/%d, model %d/%d/%d",
	      st.n_free, st.n_cached, st.n_used, m_count(m, M_FREE),
	      m_count(m, M_CACHED), m_count(m, M_USED));
	CHECK(st.evictions == m->evictions && st.cow_copies == m->cow,
	      "evictions %llu/%llu", (unsigned long long)st.evictions,
	      (unsigned long long)m->evictions);
	for (i = 0; i < m->n; i++) {
		const struct mpage *q = &m->pg[i];
		int want = q->state == M_FREE ? -1 : q->state == M_CACHED ? 0 : q->ref;

		CHECK(pg_kvc_page_refs(m->c, i) == want, "page %d refs %d, model %d",
		      i, pg_kvc_page_refs(m->c, i), want);
		if (q->state == M_FREE)
			continue;
		n = pg_kvc_page_tokens(m->c, i, &tk);
		CHECK(n == q->ntok && !memcmp(tk, q->tok, (size_t)n * sizeof(*tk)),
		      "page %d contents", i);
	}
	for (i = 0; i < m->n_seqs; i++) {
		const struct mseq *q = &m->seq[i];
		const int32_t *pages = pg_kvc_seq_pages(q->s);

		CHECK(pg_kvc_seq_len(q->s) == q->len && pg_kvc_seq_n_pages(q->s) == q->np,
		      "seq %d shape", i);
		for (j = 0; j < q->np; j++) {
			int off = j * m->pt, k = q->len - off;

			k = k < 0 ? 0 : k > m->pt ? m->pt : k;
			CHECK(pages[j] == q->pages[j], "seq %d page %d", i, j);
			n = pg_kvc_page_tokens(m->c, pages[j], &tk);
			CHECK(n == k && !memcmp(tk, q->tok + off, (size_t)k * sizeof(*tk)),
			      "seq %d page %d holds the wrong tokens", i, j);
		}
	}
	return 0;
}

static int m_step(struct model *m)
{
	uint32_t r = rnd(100);

	g_now += rnd(4) * 0.5;
	if (r < 12 && m->n_seqs < MAX_SEQS)
		return op_new(m);
	if (r < 70 && m->n_seqs) {
		struct mseq *q = &m->seq[rnd((uint32_t)m->n_seqs)];

		if (q->len == MAX_LEN)
			return op_free(m, (int)(q - m->seq)), 0;
		return op_extend(m, q);
	}
	if (r < 78 && m->n_seqs && m->n_seqs < MAX_SEQS)
		return op_fork(m, &m->seq[rnd((uint32_t)m->n_seqs)]);
	if (r < 97 && m->n_seqs) {
		op_free(m, (int)rnd((uint32_t)m->n_seqs));
		return 0;
	}
	if (r >= 97)
		return op_evict(m);
	return 0;
}

static int test_model(int n_pages, int pt, long n_ops)
{
	static struct model m;
	struct pg_kvc_stats st;
	long k;
	int i, j;

	memset(&m, 0, sizeof(m));
	m.n = n_pages;
	m.pt = pt;
	m.c = mk(n_pages, pt);
	g_now = 0;
	for (i = 0; i < N_BASES; i++)
		for (j = 0; j < MAX_LEN; j++)
			m.base[i][j] = j < 8 ? 100 + j : (int32_t)(100 * (i + 2) + j);
	for (k = 0; k < n_ops; k++)
		if (m_step(&m) || m_compare(&m)) {
			fprintf(stderr, "model test (%d pages of %d) failed at op %ld\n",
				n_pages, pt, k);
			return failed = 1;
		}
	while (m.n_seqs)
		op_free(&m, 0);
	CHECK(m_compare(&m) == 0, "final");
	CHECK(stats(m.c).n_used == 0, "all released");
	st = stats(m.c);
	printf("model %d pages of %d, %ld ops: %llu hit pages, %llu copies, "
	       "%llu evictions (%ld cascaded), %ld published late, %ld ENOSPC, "
	       "evicting ops by kind %ld %ld %ld %ld %ld\n",
	       n_pages, pt, n_ops, (unsigned long long)st.hit_pages,
	       (unsigned long long)st.cow_copies, (unsigned long long)st.evictions,
	       m.n_cascade, m.n_late_pub, m.n_enospc, m.n_evict_ops[0], m.n_evict_ops[1], m.n_evict_ops[2],
	       m.n_evict_ops[3], m.n_evict_ops[4]);
	CHECK(st.hit_pages && (st.cow_copies || pt == 1) && m.n_enospc &&
	      m.n_cascade && m.n_evict_ops[0] &&
	      m.n_evict_ops[1] && m.n_evict_ops[2] && m.n_evict_ops[3] &&
	      m.n_evict_ops[4], "the run missed a case");
	pg_kvc_destroy(m.c);
	return 0;
}

/* ---- zones ---- */

/* Every page of s lies in zone z of c's 12 pages in 3 zones (4 each). */
static int in_zone(const struct pg_kvc_seq *s, int z)
{
	for (int i = 0; i < pg_kvc_seq_n_pages(s); i++)
		if (pg_kvc_seq_pages(s)[i] / 4 != z)
			return 0;
	return pg_kvc_seq_zone(s) == z;
}

/* New sequences spread over the zones; a full zone is full for its own. */
static int test_zone_spread(void)
{
	struct pg_kvc *c = mk_zones(12, 4, 3);
	struct pg_kvc_seq *s[3];
	struct pg_kvc_params bad = { .n_pages = 2, .page_tokens = 4,
				     .n_zones = 3 };
	struct pg_kvc *d;
	int32_t more = 5;

	CHECK(pg_kvc_create(&bad, &d) == -EINVAL, "more zones than pages");
	CHECK(pg_kvc_n_zones(c) == 3, "zones");
	for (int i = 0; i < 3; i++) {
		s[i] = pg_kvc_seq_new(c, 1);
		CHECK(pg_kvc_seq_zone(s[i]) == -1, "no zone before a page");
		CHECK(put(c, s[i], T + i, 5, NULL, NULL) == 0, "put %d", i);
	}
	for (int i = 0; i < 3; i++)
		CHECK(in_zone(s[i], i), "sequence %d in zone %d", i,
		      pg_kvc_seq_zone(s[i]));
	CHECK(ok(c), "check");
	/* s[0] fills zone 0; more is refused though zones 1, 2 have room */
	CHECK(put(c, s[0], T, 11, NULL, NULL) == 0 && in_zone(s[0], 0),
	      "zone 0 filled");
	CHECK(pg_kvc_seq_n_available(c, s[0]) == 0 &&
	      pg_kvc_n_available(c) == 4, "available: zone 0 %d, all %d",
	      pg_kvc_seq_n_available(c, s[0]), pg_kvc_n_available(c));
	CHECK(put(c, s[0], &more, 1, NULL, NULL) == -ENOSPC, "zone 0 is full");
	CHECK(ok(c), "check");
	for (int i = 0; i < 3; i++)
		pg_kvc_seq_free(c, s[i]);
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

/*
 * A prefix is matched in one zone only; it draws a sequence to its zone
 * unless that zone has two sequences more than the least loaded.
 */
static int test_zone_prefix(void)
{
	struct pg_kvc *c = mk_zones(12, 4, 3);
	struct pg_kvc_seq *a, *b, *q, *x0, *x1;
	int32_t p0, p1;

	a = seq_with(c, 1, T, 9);		/* zone 0, 2 full pages */
	p0 = pg_kvc_seq_pages(a)[0];
	p1 = pg_kvc_seq_pages(a)[1];
	CHECK(in_zone(a, 0), "a in zone 0");
	pg_kvc_seq_free(c, a);			/* its full pages cached */
	/* no sequence anywhere, equal room: the lowest zone */
	b = seq_with(c, 2, T + 3, 5);
	CHECK(in_zone(b, 0), "b in zone %d", pg_kvc_seq_zone(b));
	/* zone 0 holds the prefix and one sequence, one more than the rest */
	q = pg_kvc_seq_new(c, 3);
	CHECK(pg_kvc_seq_match(c, q, T, 12) == 8 && in_zone(q, 0) &&
	      pg_kvc_seq_pages(q)[0] == p0 && pg_kvc_seq_pages(q)[1] == p1,
	      "q matched 2 pages in zone 0 (zone %d)", pg_kvc_seq_zone(q));
	CHECK(ok(c), "check");
	/* zone 0 now has two sequences more than zones 1 and 2 */
	x0 = seq_with(c, 4, T + 1, 3);
	CHECK(in_zone(x0, 1), "x0 in zone %d", pg_kvc_seq_zone(x0));
	x1 = pg_kvc_seq_new(c, 5);
	CHECK(pg_kvc_seq_match(c, x1, T, 12) == 0 && pg_kvc_seq_zone(x1) == 2,
	      "x1: zone %d, %d tokens matched (zone 0 is too far ahead)",
	      pg_kvc_seq_zone(x1), pg_kvc_seq_len(x1));
	CHECK(put(c, x1, T, 12, NULL, NULL) == 0 && in_zone(x1, 2),
	      "x1 computes the prefix in zone 2");
	CHECK(ok(c), "check");
	pg_kvc_seq_free(c, x0);
	pg_kvc_seq_free(c, x1);
	pg_kvc_seq_free(c, q);
	pg_kvc_seq_free(c, b);
	CHECK(ok(c), "check");
	/* the prefix is cached in zones 0 and 2: evicting it evicts both */
	CHECK(pg_kvc_evict(c, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_PREFIX,
		.prefix = T, .n_prefix = 4 }) == 5,
	      "prefix evicted in every zone (2 pages in zone 0, 3 in zone 2)");
	CHECK(ok(c), "check");
	pg_kvc_destroy(c);
	return 0;
}

/* Forks and their copies stay in the zone; eviction evicts in the zone. */
static int test_zone_fork_evict(void)
{
	struct pg_kvc *c = mk_zones(12, 4, 3);
	struct pg_kvc_seq *a, *b, *z1, *d;
	struct pg_kvc_copy cp[2];
	int32_t y = 8, cached1;
	int n_cp;

	a = seq_with(c, 1, T, 6);			/* zone 0 */
	b = pg_kvc_seq_fork(c, a);
	CHECK(in_zone(a, 0) && b && in_zone(b, 0), "the fork is in a's zone");
	CHECK(put(c, b, &y, 1, cp, &n_cp) == 0 && n_cp == 1 &&
	      cp[0].src / 4 == 0 && cp[0].dst / 4 == 0 && in_zone(b, 0),
	      "copy on write within zone 0 (%d -> %d)", cp[0].src, cp[0].dst);
	pg_kvc_seq_free(c, b);
	pg_kvc_seq_free(c, a);
	pg_kvc_evict(c, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	CHECK(ok(c), "check");

	a = seq_with(c, 1, T, 8);			/* zone 0 */
	z1 = seq_with(c, 2, T + 8, 8);			/* zone 1 */
	CHECK(in_zone(a, 0) && in_zone(z1, 1), "zones %d %d",
	      pg_kvc_seq_zone(a), pg_kvc_seq_zone(z1));
	cached1 = pg_kvc_seq_pages(z1)[0];
	pg_kvc_seq_free(c, z1);				/* cached in zone 1 */
	CHECK(put(c, a, T, 8, NULL, NULL) == 0 && in_zone(a, 0),
	      "a fills zone 0");
	CHECK(put(c, a, &y, 1, NULL, NULL) == -ENOSPC &&
	      pg_kvc_page_refs(c, cached1) == 0,
	      "zone 0 full: no page of zone 1 is taken, its cache stays");
	pg_kvc_seq_free(c, a);				/* 4 cached in zone 0 */
	/* equal room everywhere: zone 0, whose least recent pages go */
	d = seq_with(c, 3, T + 3, 8);
	CHECK(in_zone(d, 0) && stats(c).evictions >= 2 &&
	      pg_kvc_page_refs(c, cached1) == 0,
	      "d in zone %d evicted in its zone (%llu evictions)",
	      pg_kvc_seq_zone(d), (unsigned long long)stats(c).evictions);
	CHECK(ok(c), "check");
	pg_kvc_seq_free(c, d);
	pg_kvc_destroy(c);
	return 0;
}

/*
 * Random operations on a pool of zones with colliding hashes: every
 * invariant holds after each (pg_kvc_check), and every match attaches
 * pages holding the tokens asked for.
 */
static int test_zone_random(int n_zones, long n_ops)
{
	enum { N = 24, PT = 2, MAXS = 10, LEN = 20 };
	struct pg_kvc *c = mk_zones(N, PT, n_zones);
	struct pg_kvc_seq *s[MAXS] = { 0 };
	int32_t prompt[LEN];
	uint64_t x = 12345;
	long n_match = 0;

	pg_kvc_test_hash_bits(c, 3);
	for (long k = 0; k < n_ops; k++) {
		int i = (int)(x % MAXS), op = (int)(x / MAXS % 6), n;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		g_now += 1;
		for (int t = 0; t < LEN; t++)	/* few distinct prompts */
			prompt[t] = (int32_t)((x >> 33) % 3 + (t > 4 ? t : 0));
		n = 1 + (int)((x >> 40) % LEN);
		if (!s[i] && op < 4) {
			s[i] = pg_kvc_seq_new(c, (uint64_t)(x >> 50) % 3);
			CHECK(s[i], "new");
			int got = pg_kvc_seq_match(c, s[i], prompt, n);

			for (int p = 0; p < got / PT; p++) {
				const int32_t *tk;

				CHECK(pg_kvc_page_tokens(c, pg_kvc_seq_pages(s[i])[p], &tk) == PT &&
				      !memcmp(tk, prompt + p * PT, PT * sizeof(*tk)),
				      "op %ld: a match attached other tokens", k);
			}
			n_match += got > 0;
			put(c, s[i], prompt + got, n - got, NULL, NULL);
		} else if (s[i] && op < 3) {
			put(c, s[i], prompt, 1 + (int)(x >> 60), NULL, NULL);
		} else if (s[i] && op == 3) {
			int j = (i + 1) % MAXS;

			if (!s[j])
				s[j] = pg_kvc_seq_fork(c, s[i]);
		} else if (s[i] && op == 4) {
			pg_kvc_seq_free(c, s[i]);
			s[i] = NULL;
		} else if (op == 5) {
			struct pg_kvc_evict e = { .by = (enum pg_kvc_evict_by)(x >> 61) % 5,
				.age_s = 3, .n_pages = 2, .prefix = prompt,
				.n_prefix = 3, .client = 1 };

			CHECK(pg_kvc_evict(c, &e) >= 0, "evict");
		}
		for (int j = 0; j < MAXS; j++)
			CHECK(!s[j] || pg_kvc_seq_zone(s[j]) >= 0 ||
			      !pg_kvc_seq_n_pages(s[j]), "op %ld: pages without a zone", k);
		if (!ok(c)) {
			fprintf(stderr, "zones: op %ld broke the cache\n", k);
			return failed = 1;
		}
	}
	for (int j = 0; j < MAXS; j++)
		pg_kvc_seq_free(c, s[j]);
	CHECK(ok(c) && stats(c).n_used == 0 && n_match > 0, "end (%ld matches)",
	      n_match);
	printf("zones: %d zones, %ld random ops: %ld matches, %llu evictions\n",
	       n_zones, n_ops, n_match, (unsigned long long)stats(c).evictions);
	pg_kvc_destroy(c);
	return 0;
}

int main(void)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	test_match_reuse();
	test_leave_one();
	test_cow_fork();
	test_enospc();
	test_lru();
	test_evict_kinds();
	test_cascade();
	test_collisions();
	test_zone_spread();
	test_zone_prefix();
	test_zone_fork_evict();
	if (!failed)
		test_zone_random(3, 40000);
	if (!failed)
		test_zone_random(2, 20000);
	if (!failed)
		test_model(40, 4, 120000);
	if (!failed)
		test_model(29, 3, 60000);
	if (!failed)
		test_model(12, 1, 40000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("test_kvcache: %s (%.2f s)\n", failed ? "FAIL" : "ok",
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
	return failed;
}
