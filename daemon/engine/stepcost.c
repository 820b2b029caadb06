/*
 * stepcost.c - the step cost model (stepcost.h): ridge least squares over
 * four terms, refitted at each observation (a 4 x 4 solve), with the
 * terms kept non-negative.  Errors count relative to the time observed
 * (each observation weighs 1 / seconds^2), so that the many short steps
 * the bound is about are fitted as well as the few long prompt chunks;
 * the prior is relative too, and weak.
 * It decides nothing; the engine's scheduler asks it what a batch would
 * cost.
 */
#include <math.h>
#include <string.h>

#include "daemon/engine/stepcost.h"

#define N PG_STEPCOST_TERMS

/* Each term's unit, so that a typical batch's terms are near 1. */
static const double unit[N] = { 1.0, 64.0, 8.0, 65536.0 };

/* The prior decides only what the data leaves open (say, the depth term
   before any long prompt): a guess from the model's sizes at a guessed
   rate may be 100 times off, and a firmer prior would bend the fit. */
#define PRIOR_WEIGHT 1e-8
#define MIN_SECONDS 1e-5	/* observations shorter count as this */
#define FORGET 0.98		/* per observation of the same class */
#define BIG_BATCH 128		/* tokens: above, a batch of the third class */
#define GUESS_MACS 2e10		/* multiply-adds per second, before any data */
#define GUESS_FIXED_S 1e-3
#define EXCESS_MAX 4.0		/* an observation counts as at most this
				   times the prediction, once warm */
#define WARM_OBS 8

/* sh's terms in units (f: (N)). */
static void terms(const struct pg_step_shape *sh, double *f)
{
	f[0] = 1.0;
	f[1] = sh->n_tokens / unit[1];
	f[2] = sh->n_seqs / unit[2];
	f[3] = sh->depth / unit[3];
}

void pg_step_shape_add(struct pg_step_shape *sh, int n_past, int n)
{
	sh->n_tokens += n;
	sh->n_seqs += 1;
	sh->depth += (double)n * ((double)n_past + (n + 1) / 2.0);
}

void pg_step_cost_init(struct pg_step_cost *c, const struct pg_hparams *hp)
{
	double q = (double)hp->n_heads * hp->head_dim;
	double kv = (double)hp->n_kv_heads * hp->head_dim;
	double body = (double)hp->n_blocks *
		      (hp->n_embd * (2 * q + 2 * kv) + 3.0 * hp->n_embd * hp->n_ff);

	memset(c, 0, sizeof(*c));
	c->prior[0] = GUESS_FIXED_S;
	c->prior[1] = body * unit[1] / GUESS_MACS;
	c->prior[2] = (double)hp->n_embd * hp->n_vocab * unit[2] / GUESS_MACS;
	c->prior[3] = 2.0 * hp->n_blocks * q * unit[3] / GUESS_MACS;
	for (int i = 0; i < N; i++)	/* a model of nothing still has a guess */
		if (!(c->prior[i] >= MIN_SECONDS))
			c->prior[i] = MIN_SECONDS;
	memcpy(c->theta, c->prior, sizeof(c->theta));
}

/*
 * Solve a x = b for the terms in `on` (the others are 0) by Gaussian
 * elimination with partial pivoting; a: (N, N), row-major.  Returns -1
 * when the system is singular.
 */
static int solve(const double a_in[N][N], const double *b_in, const int *on,
		 double *x)
{
	double a[N][N + 1];
	int idx[N], n = 0;

	for (int i = 0; i < N; i++)
		if (on[i])
			idx[n++] = i;
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < n; j++)
			a[i][j] = a_in[idx[i]][idx[j]];
		a[i][n] = b_in[idx[i]];
	}
	for (int k = 0; k < n; k++) {
		int p = k;

		for (int i = k + 1; i < n; i++)
			if (fabs(a[i][k]) > fabs(a[p][k]))
				p = i;
		if (fabs(a[p][k]) < 1e-300)
			return -1;
		for (int j = 0; j <= n; j++) {
			double t = a[k][j];

			a[k][j] = a[p][j];
			a[p][j] = t;
		}
		for (int i = k + 1; i < n; i++) {
			double m = a[i][k] / a[k][k];

			for (int j = k; j <= n; j++)
				a[i][j] -= m * a[k][j];
		}
	}
	for (int i = N - 1; i >= 0; i--)
		x[i] = 0;
	for (int k = n - 1; k >= 0; k--) {
		double s = a[k][n];

		for (int j = k + 1; j < n; j++)
			s -= a[k][j] * x[idx[j]];
		x[idx[k]] = s / a[k][k];
	}
	return 0;
}

/*
 * The ridge fit, terms kept >= 0: a term that comes out negative is held
 * at 0 and the rest refitted without it.
 */
static void refit(struct pg_step_cost *c)
{
	double a[N][N], b[N], x[N];
	int on[N] = { 1, 1, 1, 1 };

	for (int i = 0; i < N; i++) {
		b[i] = PRIOR_WEIGHT / c->prior[i];
		for (int j = 0; j < N; j++)
			a[i][j] = i == j ? PRIOR_WEIGHT / (c->prior[i] * c->prior[i]) : 0;
		for (int k = 0; k < PG_STEPCOST_CLASSES; k++) {
			for (int j = 0; j < N; j++)
				a[i][j] += c->ff[k][i][j];
			b[i] += c->fy[k][i];
		}
	}
	for (int round = 0; round < N; round++) {
		int worst = -1;

		if (solve((const double (*)[N])a, b, on, x))
			return;		/* keep the last fit */
		/* drop the most negative term only: the others may recover */
		for (int i = 0; i < N; i++)
			if (on[i] && x[i] < 0 && (worst < 0 || x[i] < x[worst]))
				worst = i;
		if (worst < 0)
			break;
		on[worst] = 0;
	}
	for (int i = 0; i < N; i++)
		c->theta[i] = x[i] > 0 ? x[i] : 0;
}

void pg_step_cost_observe(struct pg_step_cost *c,
			  const struct pg_step_shape *sh, double seconds)
{
	int k = sh->n_tokens <= sh->n_seqs ? 0 :
		sh->n_tokens <= BIG_BATCH ? 1 : 2;
	double f[N], pred = pg_step_cost_predict(c, sh);

	if (!(seconds >= 0) || !isfinite(seconds))
		return;
	if (c->n_obs >= WARM_OBS && seconds > EXCESS_MAX * pred)
		seconds = EXCESS_MAX * pred;
	if (seconds < MIN_SECONDS)
		seconds = MIN_SECONDS;
	terms(sh, f);
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < N; j++)
			c->ff[k][i][j] = FORGET * c->ff[k][i][j] +
					 f[i] * f[j] / (seconds * seconds);
		c->fy[k][i] = FORGET * c->fy[k][i] + f[i] / seconds;
	}
	c->n_obs++;
	refit(c);
}

void pg_step_cost_coef(const struct pg_step_cost *c, double coef[N])
{
	for (int i = 0; i < N; i++)
		coef[i] = c->theta[i] / unit[i];
}

double pg_step_cost_predict(const struct pg_step_cost *c,
			    const struct pg_step_shape *sh)
{
	double f[N], t = 0;

	terms(sh, f);
	for (int i = 0; i < N; i++)
		t += c->theta[i] * f[i];
	return t;
}

double pg_step_cost_chunk_s(const struct pg_step_cost *c, int n_past, int n)
{
	struct pg_step_shape sh = { 0 };

	pg_step_shape_add(&sh, n_past, n);
	return pg_step_cost_predict(c, &sh) - c->theta[0];
}

int pg_step_cost_chunk(const struct pg_step_cost *c, int n_past, int max,
		       double budget_s)
{
	/* cost(n) = qa n^2 + qb n + qc, increasing in n */
	double qa = c->theta[3] / (2.0 * unit[3]);
	double qb = c->theta[1] / unit[1] + c->theta[3] * (n_past + 0.5) / unit[3];
	double qc = c->theta[2] / unit[2], room = budget_s - qc, n;

	if (max <= 0 || room < 0)
		return 0;
	if (qa > 0)
		n = (-qb + sqrt(qb * qb + 4 * qa * room)) / (2 * qa);
	else
		n = qb > 0 ? room / qb : max;
	if (!(n < max))
		return max;
	n = floor(n);
	/* rounding may leave it one off either way */
	if (n + 1 <= max && pg_step_cost_chunk_s(c, n_past, (int)n + 1) <= budget_s)
		n++;
	while (n > 0 && pg_step_cost_chunk_s(c, n_past, (int)n) > budget_s)
		n--;
	return (int)n;
}
