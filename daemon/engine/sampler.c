/*
 * sampler.c - the per-request sampler and the stop-string matcher.
 *
 * The chain is: penalties -> (greedy when temperature <= 0) -> top-k ->
 * temperature -> softmax -> min-p -> top-p -> draw.  Nothing here sorts the
 * whole vocabulary per token: top-k is a bounded heap (or a quickselect for
 * large k) and top-p sorts the best candidates in growing chunks until the
 * mass it needs is covered.  This file is not the model and not the
 * tokenizer: it sees logits and token ids, and text only for stop strings.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/sampler.h"

/* A candidate token. */
struct cand {
	int32_t id;
	float logit;
	float p;		/* unnormalised probability, after softmax */
};

/* Token counts over the penalty window, with the list of tokens seen. */
struct window {
	int32_t *ring;		/* (repeat_last_n) last ids; NULL: all */
	int n_ring;		/* ring capacity */
	int n_in_ring;
	int ring_head;		/* next slot to write */
	int32_t *count;		/* (n_vocab) occurrences in the window */
	int32_t *where;		/* (n_vocab) index in seen[] while count > 0 */
	int32_t *seen;		/* (n_vocab) ids with count > 0 */
	int n_seen;
};

struct pg_sampler {
	struct pg_sampling p;
	int n_vocab;
	uint64_t rng[4];	/* xoshiro256** state */
	int penalties;		/* whether any penalty is active */
	struct window win;
	struct cand *cand;	/* (n_vocab) scratch */
};

/* ---- parameters ---- */

struct pg_sampling pg_sampling_default(void)
{
	struct pg_sampling p = {
		.temperature = 0.0f,
		.top_k = 0,
		.top_p = 1.0f,
		.min_p = 0.0f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.presence_penalty = 0.0f,
		.frequency_penalty = 0.0f,
		.seed = 0,
		.n_logprobs = 0,
	};
	return p;
}

/* range_bad - whether v is NaN or outside [lo, hi] (lo excluded if open). */
static int range_bad(float v, float lo, int lo_open, float hi)
{
	if (isnan(v) || v > hi)
		return 1;
	return lo_open ? v <= lo : v < lo;
}

static int check_fail(char *err, size_t err_len, const char *msg)
{
	if (err && err_len)
		snprintf(err, err_len, "%s", msg);
	return -EINVAL;
}

int pg_sampling_check(const struct pg_sampling *p, char *err, size_t err_len)
{
	if (range_bad(p->temperature, 0.0f, 0, 100.0f))
		return check_fail(err, err_len,
				  "temperature must be in [0, 100] (0: greedy)");
	if (p->top_k < 0)
		return check_fail(err, err_len,
				  "top_k must be >= 0 (0: off)");
	if (range_bad(p->top_p, 0.0f, 0, 1.0f))
		return check_fail(err, err_len,
				  "top_p must be in [0, 1] (1: off)");
	if (range_bad(p->min_p, 0.0f, 0, 1.0f))
		return check_fail(err, err_len,
				  "min_p must be in [0, 1] (0: off)");
	if (range_bad(p->repeat_penalty, 0.0f, 1, 10.0f))
		return check_fail(err, err_len,
				  "repeat_penalty must be in (0, 10] (1: off)");
	if (p->repeat_last_n < -1)
		return check_fail(err, err_len,
				  "repeat_last_n must be >= -1 (-1: all, 0: off)");
	if (range_bad(p->presence_penalty, -2.0f, 0, 2.0f))
		return check_fail(err, err_len,
				  "presence_penalty must be in [-2, 2] (0: off)");
	if (range_bad(p->frequency_penalty, -2.0f, 0, 2.0f))
		return check_fail(err, err_len,
				  "frequency_penalty must be in [-2, 2] (0: off)");
	if (p->n_logprobs < 0 || p->n_logprobs > PG_MAX_LOGPROBS)
		return check_fail(err, err_len,
				  "n_logprobs must be in [0, 20]");
	return 0;
}

/* ---- random numbers: xoshiro256**, seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* rng_uniform - a double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4])
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static void rng_seed(uint64_t s[4], uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		s[i] = splitmix64(&seed);
}

/* ---- the penalty window ---- */

static int window_init(struct window *w, int n_vocab, int last_n)
{
	memset(w, 0, sizeof(*w));
	w->count = calloc((size_t)n_vocab, sizeof(*w->count));
	w->where = malloc((size_t)n_vocab * sizeof(*w->where));
	w->seen = malloc((size_t)n_vocab * sizeof(*w->seen));
	if (last_n > 0) {
		w->n_ring = last_n;
		w->ring = malloc((size_t)last_n * sizeof(*w->ring));
	}
	if (!w->count || !w->where || !w->seen || (last_n > 0 && !w->ring))
		return -ENOMEM;
	return 0;
}

static void window_free(struct window *w)
{
	free(w->count);
	free(w->where);
	free(w->seen);
	free(w->ring);
}

static void window_add(struct window *w, int32_t id)
{
	if (w->count[id]++ == 0) {
		w->where[id] = w->n_seen;
		w->seen[w->n_seen++] = id;
	}
}

static void window_drop(struct window *w, int32_t id)
{
	if (--w->count[id] == 0) {
		int32_t last = w->seen[--w->n_seen];

		w->seen[w->where[id]] = last;
		w->where[last] = w->where[id];
	}
}

static void window_push(struct window *w, int32_t id)
{
	if (w->ring) {
		if (w->n_in_ring == w->n_ring)
			window_drop(w, w->ring[w->ring_head]);
		else
			w->n_in_ring++;
		w->ring[w->ring_head] = id;
		w->ring_head = (w->ring_head + 1) % w->n_ring;
	}
	window_add(w, id);
}

/* ---- life ---- */

struct pg_sampler *pg_sampler_create(const struct pg_sampling *p,
				     int n_vocab)
{
	struct pg_sampler *s;

	if (n_vocab <= 0) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->p = *p;
	s->n_vocab = n_vocab;
	rng_seed(s->rng, p->seed);
	s->penalties = p->repeat_last_n != 0 &&
		       (p->repeat_penalty != 1.0f ||
			p->presence_penalty != 0.0f ||
			p->frequency_penalty != 0.0f);
	s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
	if (!s->cand)
		goto out_free;
	if (s->penalties && window_init(&s->win, n_vocab, p->repeat_last_n))
		goto out_free;
	return s;

out_free:
	pg_sampler_free(s);
	errno = ENOMEM;
	return NULL;
}

void pg_sampler_free(struct pg_sampler *s)
{
	if (!s)
		return;
	if (s->penalties)
		window_free(&s->win);
	free(s->cand);
	free(s);
}

void pg_sampler_accept(struct pg_sampler *s, int32_t id)
{
	if (!s->penalties || id < 0 || id >= s->n_vocab)
		return;
	window_push(&s->win, id);
}

/* ---- candidate ordering and selection ---- */

/* better - a ranks before b: higher logit, then lower id. */
static inline int better(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static void cand_swap(struct cand *a, struct cand *b)
{
	struct cand t = *a;

	*a = *b;
	*b = t;
}

/* heap_sift - restore a min-heap (root = worst) of n below node i. */
static void heap_sift(struct cand *h, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, w = i;

		if (l < n && better(&h[w], &h[l]))
			w = l;
		if (r < n && better(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		cand_swap(&h[i], &h[w]);
		i = w;
	}
}

/*
 * heap_top - the best k of n logits into out[0..k), sorted best first.
 * O(n log k), and O(n) compares when few values beat the k-th.
 */
static void heap_top(const float *logits, int n, int k, struct cand *out)
{
	for (int i = 0; i < k; i++)
		out[i] = (struct cand){ .id = i, .logit = logits[i] };
	for (int i = k / 2 - 1; i >= 0; i--)
		heap_sift(out, k, i);
	for (int i = k; i < n; i++) {
		struct cand c = { .id = i, .logit = logits[i] };

		if (better(&c, &out[0])) {
			out[0] = c;
			heap_sift(out, k, 0);
		}
	}
	for (int m = k - 1; m > 0; m--) {
		cand_swap(&out[0], &out[m]);
		heap_sift(out, m, 0);
	}
}

/* partition - Lomuto around a median-of-three pivot; returns its index. */
static int partition(struct cand *c, int lo, int hi)
{
	int mid = lo + (hi - lo) / 2, st = lo;

	if (better(&c[mid], &c[lo]))
		cand_swap(&c[mid], &c[lo]);
	if (better(&c[hi], &c[lo]))
		cand_swap(&c[hi], &c[lo]);
	if (better(&c[hi], &c[mid]))
		cand_swap(&c[hi], &c[mid]);
	cand_swap(&c[mid], &c[hi]);	/* the median is the pivot, at hi */
	for (int i = lo; i < hi; i++)
		if (better(&c[i], &c[hi]))
			cand_swap(&c[i], &c[st++]);
	cand_swap(&c[st], &c[hi]);
	return st;
}

/* select_best - reorder c[0..n) so that c[0..k) are its best k (unsorted). */
static void select_best(struct cand *c, int n, int k)
{
	int lo = 0, hi = n - 1;

	if (k <= 0 || k >= n)
		return;
	while (lo < hi) {
		int p = partition(c, lo, hi);

		if (p == k || p == k - 1)
			return;
		if (p > k)
			hi = p - 1;
		else
			lo = p + 1;
	}
}

/* ---- the chain ---- */

static void apply_penalties(struct pg_sampler *s, float *logits)
{
	const struct window *w = &s->win;
	float rp = s->p.repeat_penalty;

	for (int i = 0; i < w->n_seen; i++) {
		int32_t id = w->seen[i];
		int32_t n = w->count[id];
		float l = logits[id];

		if (rp != 1.0f)
			l = l > 0.0f ? l / rp : l * rp;
		l -= (float)n * s->p.frequency_penalty + s->p.presence_penalty;
		logits[id] = l;
	}
}

/*
 * max_of - the largest of n values.  Eight independent maxima so that the
 * loop is not one long chain of dependent compares (it vectorises).
 */
static float max_of(const float *x, int n)
{
	float m[8];
	int i = 0;

	for (int j = 0; j < 8; j++)
		m[j] = -INFINITY;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
	for (; i < n; i++)
		m[0] = x[i] > m[0] ? x[i] : m[0];
	for (int j = 1; j < 8; j++)
		m[0] = m[j] > m[0] ? m[j] : m[0];
	return m[0];
}

/* argmax - the lowest id holding the largest logit (0 when all are NaN). */
static int32_t argmax(const float *logits, int n)
{
	float mx = max_of(logits, n);

	for (int i = 0; i < n; i++)
		if (logits[i] == mx)
			return i;
	return 0;
}

/* log_sum_exp - log(sum(exp(logits))) over n values, stable. */
static double log_sum_exp(const float *logits, int n)
{
	float mx = max_of(logits, n);
	double sum = 0.0;

	if (isinf(mx))
		return mx;
	for (int i = 0; i < n; i++)
		sum += expf(logits[i] - mx);
	return mx + log(sum);
}

/* fill_top_logprobs - the best n_top of the penalised logits, best first. */
static void fill_top_logprobs(struct pg_sampler *s, const float *logits,
			      double lse, struct pg_logprob *top)
{
	int k = s->p.n_logprobs < s->n_vocab ? s->p.n_logprobs : s->n_vocab;

	heap_top(logits, s->n_vocab, k, s->cand);
	for (int i = 0; i < k; i++) {
		top[i].id = s->cand[i].id;
		top[i].logprob = (float)(s->cand[i].logit - lse);
	}
}

/*
 * gather - the candidates after top-k into s->cand; returns their count and
 * sets *n_sorted to how many at the front are already sorted best first.
 */
static int gather(struct pg_sampler *s, const float *logits, int *n_sorted)
{
	int n = s->n_vocab, k = s->p.top_k;

	*n_sorted = 0;
	if (k > 0 && k <= 256 && k < n) {
		heap_top(logits, n, k, s->cand);
		*n_sorted = k;
		return k;
	}
	for (int i = 0; i < n; i++)
		s->cand[i] = (struct cand){ .id = i, .logit = logits[i] };
	if (k > 0 && k < n) {
		select_best(s->cand, n, k);
		return k;
	}
	return n;
}

/*
 * softmax - unnormalised p = exp((l - max) / T), so the best has p = 1;
 * returns the sum.  Dividing the difference keeps a tiny T from making
 * inf - inf.  The logits stay unscaled: the order is the same.
 */
static double softmax(struct cand *c, int n, float temp)
{
	float mx = c[0].logit;
	double sum = 0.0;

	for (int i = 1; i < n; i++)
		if (c[i].logit > mx)
			mx = c[i].logit;
	for (int i = 0; i < n; i++) {
		c[i].p = expf((c[i].logit - mx) / temp);
		sum += c[i].p;
	}
	return sum;
}

/*
 * min_p_cut - keep candidates with p >= min_p * p_max (p_max is 1 after
 * softmax()); order is kept so that a sorted prefix stays sorted.  Returns
 * the new count; *sum and *n_sorted are updated.
 */
static int min_p_cut(struct cand *c, int n, float min_p, double *sum,
		     int *n_sorted)
{
	int m = 0, sorted = 0;

	*sum = 0.0;
	for (int i = 0; i < n; i++) {
		if (c[i].p < min_p)
			continue;
		if (i < *n_sorted)	/* the kept part of a sorted prefix */
			sorted++;
		*sum += c[i].p;
		c[m++] = c[i];
	}
	*n_sorted = sorted;
	return m;		/* >= 1: the best has p = 1 >= min_p */
}

/*
 * walk_prefix - from c[i] on (sorted best first, mass cum before it), the
 * end of the shortest prefix whose mass reaches want; *sum becomes its mass.
 */
static int walk_prefix(const struct cand *c, int i, int n, double cum,
		       double want, double *sum)
{
	for (; i < n; i++) {
		cum += c[i].p;
		if (cum >= want)
			break;
	}
	*sum = cum;
	return i < n ? i + 1 : n;
}

/*
 * Buckets of probability by the float's exponent and three mantissa bits:
 * monotone in p, each spanning a ratio of 2^(1/8), with no log to compute.
 * Bucket 0 holds p = 1 (the best); the last holds everything below 2^-127.
 */
#define P_BUCKETS 1024

static inline int p_bucket(float p)
{
	uint32_t bits;
	int b;

	memcpy(&bits, &p, sizeof(bits));
	b = (int)(0x3f800000u >> 20) - (int)(bits >> 20);
	return b < 0 ? 0 : b >= P_BUCKETS ? P_BUCKETS - 1 : b;
}

/*
 * bucket_split - move the candidates of buckets below `edge` to the front
 * and those of bucket `edge` after them; returns their ends in *above and
 * *in_edge.
 */
static void bucket_split(struct cand *c, int n, int edge, int *above,
			 int *in_edge)
{
	int a = 0, e;

	for (int i = 0; i < n; i++)
		if (p_bucket(c[i].p) < edge)
			cand_swap(&c[i], &c[a++]);
	e = a;
	for (int i = a; i < n; i++)
		if (p_bucket(c[i].p) == edge)
			cand_swap(&c[i], &c[e++]);
	*above = a;
	*in_edge = e;
}

/*
 * top_p_cut - the smallest best-first set whose mass reaches top_p of *sum
 * (in c[0..return), not sorted).  Unless the candidates are already sorted,
 * one pass sums the mass per probability bucket, finds the bucket where the
 * cumulative mass crosses, and sorts that bucket alone: everything above it
 * is kept whatever its order, everything below it dropped.
 */
static int top_p_cut(struct cand *c, int n, int n_sorted, float top_p,
		     double *sum)
{
	double want = (double)top_p * *sum, cum = 0.0;
	double mass[P_BUCKETS] = { 0.0 };
	int edge, above, in_edge;

	if (n_sorted == n)
		return walk_prefix(c, 0, n, 0.0, want, sum);
	for (int i = 0; i < n; i++)
		mass[p_bucket(c[i].p)] += c[i].p;
	for (edge = 0; edge < P_BUCKETS - 1; edge++) {
		if (cum + mass[edge] >= want)
			break;
		cum += mass[edge];
	}
	bucket_split(c, n, edge, &above, &in_edge);
	qsort(c + above, (size_t)(in_edge - above), sizeof(*c), cand_cmp);
	return walk_prefix(c, above, in_edge, cum, want, sum);
}

static int32_t draw(struct pg_sampler *s, const struct cand *c, int n,
		    double sum)
{
	double r = rng_uniform(s->rng) * sum, cum = 0.0;
	int last = 0;

	for (int i = 0; i < n; i++) {
		if (c[i].p <= 0.0f)
			continue;
		cum += c[i].p;
		last = i;
		if (r < cum)
			return c[i].id;
	}
	return c[last].id;	/* r fell past the rounded sum */
}

static int32_t sample_stochastic(struct pg_sampler *s, const float *logits)
{
	int n_sorted, n = gather(s, logits, &n_sorted);
	double sum = softmax(s->cand, n, s->p.temperature);

	if (!isfinite(sum) || sum <= 0.0)
		return argmax(logits, s->n_vocab);
	if (s->p.min_p > 0.0f)
		n = min_p_cut(s->cand, n, s->p.min_p, &sum, &n_sorted);
	if (s->p.top_p < 1.0f)
		n = top_p_cut(s->cand, n, n_sorted, s->p.top_p, &sum);
	return draw(s, s->cand, n, sum);
}

/*
 * The log-probabilities are those of the penalised logits at temperature 1
 * (what the model says, not what truncation left).  The chosen token's is
 * computed whenever chosen_lp is given, so a caller may ask for it alone;
 * one log-sum-exp pass over the vocabulary is its whole cost.  The
 * penalised logits are left in logits[].
 */
int32_t pg_sampler_sample(struct pg_sampler *s, float *logits,
			  float *chosen_lp, struct pg_logprob *top)
{
	int32_t id;
	double lse = 0.0;

	if (s->penalties)
		apply_penalties(s, logits);
	if (chosen_lp || (top && s->p.n_logprobs > 0))
		lse = log_sum_exp(logits, s->n_vocab);
	if (top && s->p.n_logprobs > 0)
		fill_top_logprobs(s, logits, lse, top);
	if (s->p.temperature <= 0.0f || s->p.top_k == 1)
		id = argmax(logits, s->n_vocab);
	else
		id = sample_stochastic(s, logits);
	if (chosen_lp)
		*chosen_lp = (float)(logits[id] - lse);
	return id;
}

/*
 * ---- stop strings ----
 *
 * The text fed is copied behind the held-back tail so that what is emitted
 * is one contiguous run.  pg_stop_feed() returns -ENOMEM (and takes none of
 * the text) when that copy cannot grow, besides the 0 / 1 of sampler.h.
 */

struct pg_stop {
	char **strs;
	size_t *lens;
	int n;
	char *buf;		/* (cap) bytes: [emitted | held back] */
	size_t cap;
	size_t len;		/* bytes in buf */
	size_t held;		/* offset of the held-back tail in buf */
	int stopped;
};

struct pg_stop *pg_stop_create(const char *const *strs, int n)
{
	struct pg_stop *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->strs = calloc((size_t)(n > 0 ? n : 1), sizeof(*st->strs));
	st->lens = calloc((size_t)(n > 0 ? n : 1), sizeof(*st->lens));
	st->cap = 256;
	st->buf = malloc(st->cap);
	if (!st->strs || !st->lens || !st->buf)
		goto out_free;
	for (int i = 0; i < n; i++) {
		if (!strs[i] || !strs[i][0])
			continue;	/* an empty stop string stops nothing */
		st->lens[st->n] = strlen(strs[i]);
		st->strs[st->n] = strdup(strs[i]);
		if (!st->strs[st->n])
			goto out_free;
		st->n++;
	}
	return st;

out_free:
	pg_stop_free(st);
	errno = ENOMEM;
	return NULL;
}

void pg_stop_free(struct pg_stop *st)
{
	if (!st)
		return;
	for (int i = 0; i < st->n; i++)
		free(st->strs[i]);
	free(st->strs);
	free(st->lens);
	free(st->buf);
	free(st);
}

/* stop_append - drop what was emitted, then append the new text. */
static int stop_append(struct pg_stop *st, const char *text, size_t len)
{
	size_t keep = st->len - st->held;

	memmove(st->buf, st->buf + st->held, keep);
	st->len = keep;
	st->held = 0;
	if (keep + len > st->cap) {
		size_t cap = 2 * (keep + len) + 64;
		char *nb = realloc(st->buf, cap);

		if (!nb)
			return -ENOMEM;
		st->buf = nb;
		st->cap = cap;
	}
	if (len)
		memcpy(st->buf + st->len, text, len);
	st->len += len;
	return 0;
}

/*
 * stop_find - the stop string that completes first in buf (then the one
 * that starts first): its start, or -1.  Choosing by end makes the result
 * independent of how the text was cut into feeds.
 */
static long stop_find(const struct pg_stop *st)
{
	long best = -1;
	size_t best_end = 0;

	for (int i = 0; i < st->n; i++) {
		const char *at = memmem(st->buf, st->len, st->strs[i],
					st->lens[i]);
		size_t pos, end;

		if (!at)
			continue;
		pos = (size_t)(at - st->buf);
		end = pos + st->lens[i];
		if (best < 0 || end < best_end ||
		    (end == best_end && (long)pos < best)) {
			best = (long)pos;
			best_end = end;
		}
	}
	return best;
}

/* stop_holdback - the longest suffix of buf that begins a stop string. */
static size_t stop_holdback(const struct pg_stop *st)
{
	size_t best = 0;

	for (int i = 0; i < st->n; i++) {
		size_t h = st->lens[i] - 1;

		if (h > st->len)
			h = st->len;
		for (; h > best; h--)
			if (!memcmp(st->buf + st->len - h, st->strs[i], h)) {
				best = h;
				break;
			}
	}
	return best;
}

int pg_stop_feed(struct pg_stop *st, const char *text, size_t len,
		 const char **emit, size_t *emit_len)
{
	long pos;

	*emit = st->buf;
	*emit_len = 0;
	if (st->stopped)
		return 1;
	if (stop_append(st, text, len))
		return -ENOMEM;	/* nothing taken; the caller may feed again */
	*emit = st->buf;
	pos = stop_find(st);
	if (pos >= 0) {
		st->stopped = 1;
		*emit_len = (size_t)pos;
		st->held = st->len;
		return 1;
	}
	st->held = st->len - stop_holdback(st);
	*emit_len = st->held;
	return 0;
}

void pg_stop_flush(struct pg_stop *st, const char **emit, size_t *emit_len)
{
	*emit = st->buf + st->held;
	*emit_len = st->stopped ? 0 : st->len - st->held;
	st->held = st->len;
}
