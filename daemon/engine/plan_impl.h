/*
 * plan_impl.h - what plan.c (planning) and plan_print.c (the printout)
 * share inside the engine: the sizes of a request and of a device's share,
 * and how a plan sits in memory.  Not an interface of the engine.
 */
#ifndef PAGODA_PLAN_IMPL_H
#define PAGODA_PLAN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/plan.h"

/* The request's figures with defaults filled in. */
struct sizing {
	int ctx_tokens;
	int batch_seqs;
	int kv_elem;
	int page_tokens;
};

/* One device's share of a plan. */
struct share {
	int h0, h1, k0, k1;	/* heads and KV heads held */
	int f0, f1;		/* FFN columns */
	int n_blocks;		/* blocks of its stage */
	uint64_t weights;	/* bytes; 0 when shared (weights_of >= 0) */
	int weights_of;		/* a replica whose weights are another
				   device's (same memory): that device */
	uint64_t kv;		/* bytes, for every planned sequence */
	uint64_t kv_seq;	/* bytes, for one sequence of the context */
};

/* How a plan sits in memory: the memory filled most, relative to its size. */
struct fit {
	int fits;		/* every memory holds its devices' shares */
	int dev;		/* the first device of the fullest memory */
	uint64_t need;		/* bytes its devices need */
	uint64_t have;		/* usable bytes; 0: unknown (assumed enough) */
};

/* "81.3 MiB" into buf (returned). */
const char *plan_fmt_bytes(char *buf, size_t len, uint64_t b);

/* The CPUs this process may run on, ascending, at most max; at least one. */
int plan_host_cpus(int *cpus, int max);

/* The request's figures (req may be NULL) with defaults filled in. */
struct sizing plan_sizing_of(const struct pg_plan_request *req,
			     const struct pg_model_facts *f);

/* Device i's share of plan p under sizing z. */
void plan_share_of(const struct pg_plan *p, const struct pg_model_facts *f,
		   const struct sizing *z, int i, struct share *sh);

/* How plan p sits in memory under sizing z. */
void plan_fit(const struct pg_plan *p, const struct pg_model_facts *f,
	      const struct sizing *z, struct fit *fit);

#endif
