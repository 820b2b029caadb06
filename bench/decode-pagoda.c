/*
 * decode-pagoda.c - pagoda's side of bench/decode: prompt processing and
 * generation tokens/s on one sequence, measured like llama-bench does.
 *
 * pp: PP tokens in batches of up to 512 into an empty sequence.
 * tg: TG single-token forward passes after a one-token prompt (no sampling,
 * as llama-bench).  Both after a warm-up, best of --reps runs.  Last line:
 * "decode-pagoda: pp512_tps=X tg128_tps=Y".  Not a test.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/readbw.h"
#include "common/clock.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"

struct bench_opts {
	const char *model;
	int threads;
	int pp;
	int tg;
	int reps;
};

static void die(const char *msg, const char *detail)
{
	fprintf(stderr, "decode-pagoda: %s%s%s\n", msg, detail ? ": " : "",
		detail ? detail : "");
	exit(1);
}

/* Run n ids into a fresh sequence, returning seconds taken. */
static double run_pp(struct pg_forward *fw, struct pg_kvc *kvc,
		     const int32_t *ids, int n, float *logits)
{
	struct pg_kvc_seq *s = pg_kvc_seq_new(kvc, 0);
	double t0 = pg_now_s();

	if (!s || pg_run_tokens(fw, kvc, s, ids, n, 0, logits))
		die("forward pass failed (KV pages too few?)", NULL);
	t0 = pg_now_s() - t0;
	pg_kvc_seq_free(kvc, s);
	/* timing runs must not find their own tokens cached */
	pg_kvc_evict(kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return t0;
}

static double run_tg(struct pg_forward *fw, struct pg_kvc *kvc,
		     const int32_t *ids, int n, float *logits)
{
	struct pg_kvc_seq *s = pg_kvc_seq_new(kvc, 0);
	double t0;

	if (!s || pg_run_tokens(fw, kvc, s, ids, 1, 0, logits))
		die("forward pass failed", NULL);
	t0 = pg_now_s();
	for (int i = 1; i <= n; i++)
		if (pg_run_tokens(fw, kvc, s, &ids[i], 1, 0, logits))
			die("forward pass failed", NULL);
	t0 = pg_now_s() - t0;
	pg_kvc_seq_free(kvc, s);
	pg_kvc_evict(kvc, &(struct pg_kvc_evict){ .by = PG_KVC_EVICT_ALL });
	return t0;
}

static void parse(int argc, char **argv, struct bench_opts *o)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "pp", required_argument, NULL, 'p' },
		{ "tg", required_argument, NULL, 'g' },
		{ "reps", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct bench_opts){ .threads = 2, .pp = 512, .tg = 128, .reps = 3 };
	while ((c = getopt_long(argc, argv, "m:t:", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 't': o->threads = atoi(optarg); break;
		case 'p': o->pp = atoi(optarg); break;
		case 'g': o->tg = atoi(optarg); break;
		case 'r': o->reps = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: decode-pagoda --model FILE [--threads N] [--pp N] [--tg N] [--reps N]\n");
			exit(2);
		}
	}
	if (!o->model || o->pp < 1 || o->tg < 1 || o->reps < 1)
		die("--model FILE is required; --pp, --tg and --reps must be >= 1", NULL);
}

/*
 * The weight bytes one decode step reads: every tensor once, the token
 * embeddings only where they are the output head too (tied; otherwise a
 * row of them per token).
 */
static double weight_bytes_per_token(const struct pg_model *m)
{
	double b = 0;

	for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(m->file, i);

		if (m->tied_output || !gguf_str_eq(t->name, "token_embd.weight"))
			b += (double)t->n_bytes;
	}
	return b;
}

int main(int argc, char **argv)
{
	struct pg_forward_params fp = pg_forward_params_default();
	struct bench_opts o;
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	struct pg_model *m;
	char err[1024];
	double best_pp = 1e30, best_tg = 1e30;
	int32_t *ids;
	float *logits;
	int n_ids;

	parse(argc, argv, &o);
	if (pg_model_load(o.model, 0, &m, err, sizeof(err)))
		die(err, NULL);
	fp.n_threads = o.threads;
	fp.n_pages = (o.pp + o.tg + 64) / fp.page_tokens + 2;
	if (pg_forward_create(m, &fp, &fw, err, sizeof(err)))
		die(err, NULL);
	kvc = pg_kvc_for_forward(fw, m);
	n_ids = (o.pp > o.tg ? o.pp : o.tg) + 1;
	ids = malloc(sizeof(*ids) * (size_t)n_ids);
	logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	if (!ids || !logits || !kvc)
		die("out of memory", NULL);
	srand(1);
	for (int i = 0; i < n_ids; i++)
		ids[i] = rand() % m->hp.n_vocab;
	run_pp(fw, kvc, ids, o.pp < 64 ? o.pp : 64, logits);	/* warm-up */
	for (int r = 0; r < o.reps; r++) {
		double pp = run_pp(fw, kvc, ids, o.pp, logits);
		double tg = run_tg(fw, kvc, ids, o.tg, logits);

		best_pp = pp < best_pp ? pp : best_pp;
		best_tg = tg < best_tg ? tg : best_tg;
		printf("rep %d: pp%d %.1f tokens/s, tg%d %.1f tokens/s\n", r,
		       o.pp, o.pp / pp, o.tg, o.tg / tg);
	}
	printf("model %s, %d threads (%s)\n", m->name, pg_forward_threads(fw),
	       pg_forward_isa_name(fw));
	printf("decode-pagoda: pp%d_tps=%.2f tg%d_tps=%.2f weight_mb_per_token=%.1f read_gbps=%.2f\n",
	       o.pp, o.pp / best_pp, o.tg, o.tg / best_tg,
	       weight_bytes_per_token(m) / 1e6, readbw_gbps(o.threads));
	free(ids);
	free(logits);
	pg_kvc_destroy(kvc);
	pg_forward_destroy(fw);
	pg_model_free(m);
	return 0;
}
