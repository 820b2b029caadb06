/*
 * test_sampler.c - unit tests of the sampler and the stop-string matcher.
 *
 * Every random check runs with a fixed seed, so a bound that holds once
 * holds always: nothing here can flake.  It is not a benchmark; the timing
 * it prints at the end is for information only.  Exits 0 or 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/engine/sampler.h"

static int failures;

#define CHECK(cond)							\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "%s:%d: check failed: %s\n",	\
				__FILE__, __LINE__, #cond);		\
			failures++;					\
		}							\
	} while (0)

/* lcg_logits - n deterministic logits in about [-4, 4). */
static void lcg_logits(float *l, int n, uint32_t seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		l[i] = (float)(seed >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
	}
}

/* sample_once - one draw from a copy of logits. */
static int32_t sample_once(struct pg_sampler *s, const float *logits, int n,
			   float *lp, struct pg_logprob *top)
{
	float *tmp = malloc((size_t)n * sizeof(*tmp));
	int32_t id;

	memcpy(tmp, logits, (size_t)n * sizeof(*tmp));
	id = pg_sampler_sample(s, tmp, lp, top);
	free(tmp);
	return id;
}

static void test_greedy(void)
{
	float l[6] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.9f };
	struct pg_sampling p = pg_sampling_default();
	struct pg_sampler *s = pg_sampler_create(&p, 6);

	CHECK(sample_once(s, l, 6, NULL, NULL) == 1);	/* tie: lowest id */
	pg_sampler_free(s);

	p.temperature = 1.0f;
	p.top_k = 1;
	s = pg_sampler_create(&p, 6);
	for (int i = 0; i < 100; i++)
		CHECK(sample_once(s, l, 6, NULL, NULL) == 1);
	pg_sampler_free(s);
}

static void test_greedy_large(void)
{
	enum { N = 49152 };
	float *l = malloc(N * sizeof(*l));
	struct pg_sampling p = pg_sampling_default();
	struct pg_sampler *s = pg_sampler_create(&p, N), *s1;
	int32_t best = 0;

	lcg_logits(l, N, 7);
	for (int i = 1; i < N; i++)
		if (l[i] > l[best])
			best = i;
	CHECK(sample_once(s, l, N, NULL, NULL) == best);
	p.temperature = 0.7f;
	p.top_k = 1;
	s1 = pg_sampler_create(&p, N);
	CHECK(sample_once(s1, l, N, NULL, NULL) == best);
	pg_sampler_free(s1);
	pg_sampler_free(s);
	free(l);
}

/* run_seq - 200 draws with the given seed into out. */
static void run_seq(const struct pg_sampling *base, uint64_t seed,
		    const float *l, int n, int32_t *out)
{
	struct pg_sampling p = *base;
	struct pg_sampler *s;

	p.seed = seed;
	s = pg_sampler_create(&p, n);
	for (int i = 0; i < 200; i++) {
		out[i] = sample_once(s, l, n, NULL, NULL);
		pg_sampler_accept(s, out[i]);
	}
	pg_sampler_free(s);
}

static void test_determinism(void)
{
	enum { N = 1000 };
	float l[N];
	int32_t a[200], b[200], c[200];
	struct pg_sampling p = pg_sampling_default();

	lcg_logits(l, N, 3);
	p.temperature = 1.5f;
	p.top_p = 0.95f;
	p.repeat_penalty = 1.1f;
	run_seq(&p, 42, l, N, a);
	run_seq(&p, 42, l, N, b);
	run_seq(&p, 43, l, N, c);
	CHECK(!memcmp(a, b, sizeof(a)));
	CHECK(memcmp(a, c, sizeof(a)));
}

/*
 * chi_square - draws from logits l (n values) with p; returns the
 * chi-square statistic against the expected probabilities want[].
 */
static double chi_square(const struct pg_sampling *p, const float *l, int n,
			 const double *want, int draws, int *outside)
{
	struct pg_sampler *s = pg_sampler_create(p, n);
	int hist[64] = { 0 };
	double chi = 0.0;

	*outside = 0;
	for (int i = 0; i < draws; i++)
		hist[sample_once(s, l, n, NULL, NULL)]++;
	for (int i = 0; i < n; i++) {
		double e = want[i] * draws;

		if (e == 0.0)
			*outside += hist[i];
		else
			chi += (hist[i] - e) * (hist[i] - e) / e;
	}
	pg_sampler_free(s);
	return chi;
}

/* softmax_ref - expected probabilities over ids with keep[i] set. */
static void softmax_ref(const float *l, int n, float temp, const int *keep,
			double *want)
{
	double sum = 0.0;

	for (int i = 0; i < n; i++) {
		want[i] = keep[i] ? exp(l[i] / temp) : 0.0;
		sum += want[i];
	}
	for (int i = 0; i < n; i++)
		want[i] /= sum;
}

/*
 * With 8 categories (7 degrees of freedom) a chi-square above 30 has
 * probability below 1e-4; the seed is fixed, so the check is exact.
 */
static void test_distribution(void)
{
	float l[8] = { 0.1f, 1.0f, -0.5f, 2.0f, 0.3f, 1.5f, -1.0f, 0.0f };
	int all[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	int top3[8] = { 0, 1, 0, 1, 0, 1, 0, 0 };
	int nucleus[8] = { 0, 1, 0, 1, 0, 1, 0, 0 };
	double want[8];
	struct pg_sampling p = pg_sampling_default();
	int outside;
	double chi;

	p.seed = 1234;
	p.temperature = 1.0f;
	softmax_ref(l, 8, 1.0f, all, want);
	chi = chi_square(&p, l, 8, want, 100000, &outside);
	CHECK(chi < 30.0);

	p.temperature = 0.5f;
	softmax_ref(l, 8, 0.5f, all, want);
	chi = chi_square(&p, l, 8, want, 100000, &outside);
	CHECK(chi < 30.0);

	p.temperature = 1.0f;
	p.top_k = 3;
	softmax_ref(l, 8, 1.0f, top3, want);
	chi = chi_square(&p, l, 8, want, 100000, &outside);
	CHECK(chi < 30.0 && outside == 0);

	/*
	 * Probabilities at T = 1: 3: .38, 5: .23, 1: .14, 4: .07 ...; the
	 * first three hold .75, so top_p = .7 keeps exactly them.
	 */
	p.top_k = 0;
	p.top_p = 0.7f;
	softmax_ref(l, 8, 1.0f, nucleus, want);
	chi = chi_square(&p, l, 8, want, 100000, &outside);
	CHECK(chi < 30.0 && outside == 0);

	/* min_p = .3: keep p >= .3 * p_max, i.e. logit >= 2 + ln .3 = .796 */
	p.top_p = 1.0f;
	p.min_p = 0.3f;
	chi = chi_square(&p, l, 8, want, 100000, &outside);
	CHECK(chi < 30.0 && outside == 0);
}

/* top-p over a large vocabulary must keep only the smallest prefix. */
static void test_top_p_large(void)
{
	enum { N = 49152 };
	float *l = malloc(N * sizeof(*l));
	float *sorted = malloc(N * sizeof(*sorted));
	struct pg_sampling p = pg_sampling_default();
	struct pg_sampler *s;
	double sum = 0.0, cum = 0.0, cut;
	int ok = 1;

	lcg_logits(l, N, 11);
	for (int i = 0; i < N; i++) {
		l[i] *= 2.0f;
		sum += exp(l[i]);
	}
	memcpy(sorted, l, N * sizeof(*l));
	/* the logit at which the cumulative mass passes 0.5 */
	for (;;) {
		int best = 0;

		for (int i = 1; i < N; i++)
			if (sorted[i] > sorted[best])
				best = i;
		cum += exp(sorted[best]) / sum;
		cut = sorted[best];
		sorted[best] = -INFINITY;
		if (cum >= 0.5)
			break;
	}
	p.temperature = 1.0f;
	p.top_p = 0.5f;
	p.seed = 9;
	s = pg_sampler_create(&p, N);
	for (int i = 0; i < 2000; i++)
		if (l[sample_once(s, l, N, NULL, NULL)] < cut)
			ok = 0;
	CHECK(ok);
	pg_sampler_free(s);
	free(sorted);
	free(l);
}

/* penalised_lp - the log-probabilities after penalties, from top[]. */
static void penalised_lp(const struct pg_sampling *p, const float *l, int n,
			 const int32_t *hist, int n_hist, double *lp)
{
	struct pg_sampling q = *p;
	struct pg_logprob top[PG_MAX_LOGPROBS];
	struct pg_sampler *s;

	q.n_logprobs = n;
	s = pg_sampler_create(&q, n);
	for (int i = 0; i < n_hist; i++)
		pg_sampler_accept(s, hist[i]);
	sample_once(s, l, n, NULL, top);
	for (int i = 0; i < n; i++)
		lp[top[i].id] = top[i].logprob;
	pg_sampler_free(s);
}

/* expect_lp - whether lp[] is the log-softmax of want[]. */
static int expect_lp(const double *lp, const float *want, int n)
{
	double sum = 0.0, lse;

	for (int i = 0; i < n; i++)
		sum += exp(want[i]);
	lse = log(sum);
	for (int i = 0; i < n; i++)
		if (fabs(lp[i] - (want[i] - lse)) > 1e-5)
			return 0;
	return 1;
}

static void test_penalties(void)
{
	float l[6] = { 2.0f, -2.0f, 1.0f, 0.5f, -1.0f, 0.0f };
	int32_t hist[6] = { 0, 1, 3, 3, 3, 4 };
	struct pg_sampling p = pg_sampling_default();
	double lp[6];

	/* repeat penalty over all: 0, 1, 3, 4 penalised once each */
	p.repeat_penalty = 2.0f;
	p.repeat_last_n = -1;
	penalised_lp(&p, l, 6, hist, 6, lp);
	CHECK(expect_lp(lp, (float[]){ 1.0f, -4.0f, 1.0f, 0.25f, -2.0f, 0.0f },
			6));

	/* a window of the last 3 tokens: 3, 3, 4 */
	p.repeat_last_n = 3;
	penalised_lp(&p, l, 6, hist, 6, lp);
	CHECK(expect_lp(lp, (float[]){ 2.0f, -2.0f, 1.0f, 0.25f, -2.0f, 0.0f },
			6));

	/* window off: nothing changes */
	p.repeat_last_n = 0;
	penalised_lp(&p, l, 6, hist, 6, lp);
	CHECK(expect_lp(lp, l, 6));

	/* OpenAI's rule: l -= count * frequency + (count > 0) * presence */
	p = pg_sampling_default();
	p.repeat_last_n = -1;
	p.frequency_penalty = 0.5f;
	p.presence_penalty = 0.25f;
	penalised_lp(&p, l, 6, hist, 6, lp);
	CHECK(expect_lp(lp, (float[]){ 1.25f, -2.75f, 1.0f, -1.25f, -1.75f,
				       0.0f }, 6));

	/* a penalty that makes 3 the argmax when greedy */
	p.frequency_penalty = -1.0f;
	p.presence_penalty = 0.0f;
	{
		struct pg_sampler *s = pg_sampler_create(&p, 6);

		for (int i = 0; i < 6; i++)
			pg_sampler_accept(s, hist[i]);
		CHECK(sample_once(s, l, 6, NULL, NULL) == 3);
		pg_sampler_free(s);
	}
}

static void test_logprobs(void)
{
	enum { N = 1000 };
	float l[N];
	struct pg_logprob top[PG_MAX_LOGPROBS];
	struct pg_sampling p = pg_sampling_default();
	struct pg_sampler *s;
	double sum = 0.0, lse, tot = 0.0;
	float chosen;
	int32_t id;

	lcg_logits(l, N, 5);
	for (int i = 0; i < N; i++)
		sum += exp(l[i]);
	lse = log(sum);
	p.n_logprobs = PG_MAX_LOGPROBS;
	p.temperature = 0.8f;
	p.top_k = 40;
	p.seed = 77;
	s = pg_sampler_create(&p, N);
	id = sample_once(s, l, N, &chosen, top);
	CHECK(fabs(chosen - (l[id] - lse)) < 1e-4);
	for (int i = 0; i < PG_MAX_LOGPROBS; i++) {
		CHECK(fabs(top[i].logprob - (l[top[i].id] - lse)) < 1e-4);
		if (i)
			CHECK(top[i].logprob <= top[i - 1].logprob);
		tot += exp(top[i].logprob);
	}
	CHECK(tot <= 1.0 + 1e-6);
	/* nothing outside the list beats its last entry */
	for (int i = 0; i < N; i++) {
		int in = 0;

		for (int j = 0; j < PG_MAX_LOGPROBS; j++)
			in |= top[j].id == i;
		if (!in)
			CHECK(l[i] - lse <= top[PG_MAX_LOGPROBS - 1].logprob);
	}
	pg_sampler_free(s);
}

static void expect_error(struct pg_sampling p, const char *name)
{
	char err[160] = "";

	CHECK(pg_sampling_check(&p, err, sizeof(err)) < 0);
	if (!strstr(err, name)) {
		fprintf(stderr, "message \"%s\" does not name %s\n", err, name);
		failures++;
	}
}

static void test_check(void)
{
	struct pg_sampling d = pg_sampling_default(), p;
	char err[160];

	CHECK(pg_sampling_check(&d, err, sizeof(err)) == 0);
	p = d; p.temperature = NAN; expect_error(p, "temperature");
	p = d; p.temperature = -1.0f; expect_error(p, "temperature");
	p = d; p.top_k = -3; expect_error(p, "top_k");
	p = d; p.top_p = 1.5f; expect_error(p, "top_p");
	p = d; p.top_p = NAN; expect_error(p, "top_p");
	p = d; p.min_p = -0.1f; expect_error(p, "min_p");
	p = d; p.repeat_penalty = 0.0f; expect_error(p, "repeat_penalty");
	p = d; p.repeat_penalty = NAN; expect_error(p, "repeat_penalty");
	p = d; p.repeat_last_n = -2; expect_error(p, "repeat_last_n");
	p = d; p.presence_penalty = 3.0f; expect_error(p, "presence_penalty");
	p = d; p.frequency_penalty = NAN;
	expect_error(p, "frequency_penalty");
	p = d; p.n_logprobs = 21; expect_error(p, "n_logprobs");
	p = d; p.temperature = 2.0f; p.top_k = 50; p.top_p = 0.9f;
	p.min_p = 0.05f; p.repeat_penalty = 1.3f; p.repeat_last_n = -1;
	p.presence_penalty = -2.0f; p.frequency_penalty = 2.0f;
	p.n_logprobs = 20;
	CHECK(pg_sampling_check(&p, err, sizeof(err)) == 0);
}

/* feed_all - feed the pieces in turn; the emitted text into out. */
static int feed_all(struct pg_stop *st, const char *const *pieces, int n,
		    char *out)
{
	const char *e;
	size_t el;
	int stopped = 0;

	out[0] = 0;
	for (int i = 0; i < n && !stopped; i++) {
		stopped = pg_stop_feed(st, pieces[i], strlen(pieces[i]), &e,
				       &el);
		strncat(out, e, el);
	}
	if (!stopped) {
		pg_stop_flush(st, &e, &el);
		strncat(out, e, el);
	}
	return stopped;
}

static void expect_stop(const char *const *stops, int n_stops,
			const char *const *pieces, int n, int want_stop,
			const char *want)
{
	struct pg_stop *st = pg_stop_create(stops, n_stops);
	char out[256];
	int got = feed_all(st, pieces, n, out);

	if (got != want_stop || strcmp(out, want)) {
		fprintf(stderr, "stop: got %d \"%s\", want %d \"%s\"\n", got,
			out, want_stop, want);
		failures++;
	}
	pg_stop_free(st);
}

static void test_stop(void)
{
	const char *s1[] = { "</s>" };
	const char *s2[] = { "abcd", "bc" };
	const char *s3[] = { "aab" };
	const char *s4[] = { "xyz", "STOP" };

	expect_stop(s1, 1, (const char *[]){ "hello", " wor", "ld" }, 3, 0,
		    "hello world");
	expect_stop(s1, 1, (const char *[]){ "hi <", "/", "s> more" }, 3, 1,
		    "hi ");
	expect_stop(s1, 1, (const char *[]){ "a</s>b</s>" }, 1, 1, "a");
	/* the stop that completes first wins, however the text is cut */
	expect_stop(s2, 2, (const char *[]){ "xabcd" }, 1, 1, "xa");
	expect_stop(s2, 2, (const char *[]){ "x", "a", "b", "c", "d" }, 5, 1,
		    "xa");
	/* self-overlapping: "aaab" holds back "aa", then finds "aab" */
	expect_stop(s3, 1, (const char *[]){ "xa", "a", "ab" }, 3, 1, "xa");
	/* a held-back prefix that turns out not to be a stop is emitted */
	expect_stop(s1, 1, (const char *[]){ "x </", "p>" }, 2, 0, "x </p>");
	expect_stop(s4, 2, (const char *[]){ "go ST", "OP" }, 2, 1, "go ");
	expect_stop(NULL, 0, (const char *[]){ "anything", "</s>" }, 2, 0,
		    "anything</s>");
}

/* holdback, step by step */
static void test_stop_holdback(void)
{
	const char *stops[] = { "<|im_end|>" };
	struct pg_stop *st = pg_stop_create(stops, 1);
	const char *e;
	size_t el;

	CHECK(pg_stop_feed(st, "Hi <|im", 7, &e, &el) == 0);
	CHECK(el == 3 && !memcmp(e, "Hi ", 3));
	CHECK(pg_stop_feed(st, "_e", 2, &e, &el) == 0);
	CHECK(el == 0);
	pg_stop_flush(st, &e, &el);
	CHECK(el == 6 && !memcmp(e, "<|im_e", 6));
	pg_stop_flush(st, &e, &el);
	CHECK(el == 0);
	CHECK(pg_stop_feed(st, "nd|>", 4, &e, &el) == 0);
	CHECK(el == 4);
	CHECK(pg_stop_feed(st, "<|im_end|>x", 11, &e, &el) == 1);
	CHECK(el == 0);
	CHECK(pg_stop_feed(st, "more", 4, &e, &el) == 1);
	CHECK(el == 0);
	pg_stop_free(st);
}

/* For information: time per token over SmolLM2's vocabulary. */
static void time_vocab(void)
{
	enum { N = 49152, T = 200 };
	float *l = malloc(N * sizeof(*l)), *tmp = malloc(N * sizeof(*l));
	struct pg_sampling p = pg_sampling_default();
	const char *names[3] = { "top_k=40 top_p=0.9", "top_p=0.9",
				 "greedy" };
	int ks[3] = { 40, 0, 0 };
	float temps[3] = { 0.8f, 0.8f, 0.0f };

	lcg_logits(l, N, 13);
	for (int i = 0; i < N; i++)
		l[i] *= 3.0f;
	for (int c = 0; c < 3; c++) {
		struct pg_sampler *s;
		struct timespec a, b;

		p.top_k = ks[c];
		p.top_p = c < 2 ? 0.9f : 1.0f;
		p.temperature = temps[c];
		s = pg_sampler_create(&p, N);
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int t = 0; t < T; t++) {
			memcpy(tmp, l, N * sizeof(*l));
			pg_sampler_sample(s, tmp, NULL, NULL);
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("sampler, vocab %d, %s: %.1f us/token\n", N, names[c],
		       ((b.tv_sec - a.tv_sec) * 1e9 +
			(b.tv_nsec - a.tv_nsec)) / 1e3 / T);
		pg_sampler_free(s);
	}
	free(tmp);
	free(l);
}

int main(void)
{
	test_greedy();
	test_greedy_large();
	test_determinism();
	test_distribution();
	test_top_p_large();
	test_penalties();
	test_logprobs();
	test_check();
	test_stop();
	test_stop_holdback();
	time_vocab();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("sampler: all checks passed\n");
	return 0;
}
