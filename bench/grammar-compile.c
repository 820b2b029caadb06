/*
 * grammar-compile.c - bench/grammar's compile timer: for each JSON Schema
 * file given, the time to translate it into GBNF (daemon/schema.c) and
 * compile the grammar (daemon/engine/grammar.c), as a request with a new
 * schema pays it, the median of --reps runs; then the p50 and p99 over
 * the files.
 *
 *   grammar-compile [--reps N] FILE...
 *
 * The last line is "grammar-compile: n=N p50_ms=X p99_ms=Y max_ms=Z".
 * A schema that does not translate or compile is an error (exit 1).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/engine/grammar.h"
#include "daemon/schema.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* pct - the p-th percentile (nearest rank) of n sorted values */
static double pct(const double *v, int n, double p)
{
	int k = (int)(p / 100.0 * n + 0.999999) - 1;

	return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = '\0';
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

/* one - translate and compile text once; its seconds, or -1 */
static double one(const char *path, const char *text, size_t len)
{
	struct pg_grammar *g;
	char err[512], *gbnf;
	double t0 = pg_now_s(), t;

	if (pg_schema_to_gbnf(text, len, &gbnf, err, sizeof(err))) {
		fprintf(stderr, "grammar-compile: %s: %s\n", path, err);
		return -1;
	}
	if (pg_grammar_compile(gbnf, strlen(gbnf), &g, err, sizeof(err))) {
		fprintf(stderr, "grammar-compile: %s: its grammar does not compile: %s\n", path, err);
		free(gbnf);
		return -1;
	}
	t = pg_now_s() - t0;
	pg_grammar_free(g);
	free(gbnf);
	return t;
}

int main(int argc, char **argv)
{
	int reps = 21, first = 1, n = 0;
	double *med, *runs;

	if (argc > 2 && !strcmp(argv[1], "--reps")) {
		reps = atoi(argv[2]);
		first = 3;
	}
	if (reps < 1 || first >= argc) {
		fprintf(stderr, "usage: grammar-compile [--reps N] SCHEMA.json...\n");
		return 2;
	}
	med = calloc((size_t)argc, sizeof(*med));
	runs = calloc((size_t)reps, sizeof(*runs));
	if (!med || !runs)
		return 1;
	for (int i = first; i < argc; i++) {
		size_t len = 0;
		char *text = slurp(argv[i], &len);

		if (!text) {
			fprintf(stderr, "grammar-compile: cannot read %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		for (int r = 0; r < reps; r++)
			if ((runs[r] = one(argv[i], text, len)) < 0)
				return 1;
		qsort(runs, (size_t)reps, sizeof(*runs), cmp_double);
		med[n] = runs[reps / 2] * 1e3;
		printf("  %-40s %8.3f ms\n", argv[i], med[n]);
		n++;
		free(text);
	}
	qsort(med, (size_t)n, sizeof(*med), cmp_double);
	printf("grammar-compile: n=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n", n,
	       pct(med, n, 50), pct(med, n, 99), med[n - 1]);
	free(med);
	free(runs);
	return 0;
}
