/*
 * config.h - pagodad's configuration: the file pagodad.conf (INI, read
 * with libinih; every key in pagoda.conf(5)) and the command-line options
 * that override it, as one struct pgd_conf; its checks, its printing in
 * the file's own format, and what a reload (SIGHUP) may change.
 *
 * Each key's option, type, range and default are its row in the table of
 * settings (settings.h).  Not the one-shot modes' options (prompt,
 * sampling, tokenizing: rows of that table too, their values pagodad.c's),
 * and not the serving loop: server.c takes the struct pgd_config inside a
 * struct pgd_conf.  Nothing here prints: every error
 * goes to the caller's report function, one call per error, and loading
 * goes on after an error so that the caller hears of all of them.
 *
 * Its name shadows autoconf's config.h for files in daemon/: they include
 * that one as <config.h>.
 */
#ifndef PAGODA_DAEMON_CONFIG_H
#define PAGODA_DAEMON_CONFIG_H

#include <stddef.h>

#include <stdio.h>

#include "daemon/engine/kv.h"
#include "daemon/server.h"
#include "kernels/dtype.h"

#define PGD_DEFAULT_CONFIG "/etc/pagoda/pagodad.conf"

/* One error (a whole sentence, without "pagodad: "); ctx is the caller's. */
typedef void (*pgd_conf_report_fn)(void *ctx, const char *msg);

struct pgd_conf_src;

/*
 * Everything pagodad.conf and the options say.  Strings are the struct's
 * own (malloc'd), daemon's included.  A key that was left unset holds its
 * default; the comments say which unset keys mean "choose".
 */
struct pgd_conf {
	/* [model] */
	char *model;			/* NULL: $PAGODA_MODEL, else the default */
	/* [devices] */
	char *devices;			/* NULL: one CPU device, not pinned */
	int autoplan;			/* parallel = auto */
	int numerics;			/* enum pg_numerics: numerics = pagoda | llama.cpp */
	int pp, tp, cp;			/* 0: not given */
	int threads;			/* -1: not given (2 without a plan,
					   else one per CPU of each device) */
	/* [kv]: the pool is ctx_size tokens, kv_size bytes or kv_fraction of
	   the memory available, whichever one is given */
	int ctx_size;
	size_t kv_bytes;		/* 0: not given */
	double kv_fraction;		/* 0: not given */
	int page_tokens;
	enum pg_dtype kv_type;
	struct pg_kv_mem kv_mem;	/* kv_lock, kv_hugetlb, numa_node */
	/* [batch] */
	int max_batch_tokens;
	int max_batch_seqs;
	/* [log] */
	int log_level;			/* enum pgd_log_level */
	/* [daemon], [limits], [access], [stats]: the serving loop's part;
	   daemon.conf points back here */
	struct pgd_config daemon;
	/* where the values came from (config.c's) */
	struct pgd_conf_src *src;
};

/* pgd_conf_create - the defaults, no file yet.  NULL when out of memory. */
struct pgd_conf *pgd_conf_create(void);

/* pgd_conf_free - free c and its strings; NULL is allowed. */
void pgd_conf_free(struct pgd_conf *c);

/*
 * pgd_conf_set_option - the value of a command-line option (its long
 * name without "--", e.g. "max-inflight"; "true" for an option without an
 * argument) that stands for a key: checked and set now, and set again
 * after every load of the file, so that options always override it.
 * Returns 0, 1 when the option names no key, or -1 with the reason in
 * err ("--max-inflight 'x': expected ...").
 */
int pgd_conf_set_option(struct pgd_conf *c, const char *option,
			const char *value, char *err, size_t err_len);

/*
 * pgd_conf_load - the defaults, then the file at path, then the options
 * given so far, then the checks between keys.  A missing file is an error
 * only when required (a --config path); the default file may be absent.
 * Every error is reported, with "PATH:LINE: " or the option it came from.
 * Returns the number of errors (0: c holds the configuration), or -1
 * when out of memory.  After errors c holds no meaningful values.
 */
int pgd_conf_load(struct pgd_conf *c, const char *path, int required,
		  pgd_conf_report_fn report, void *ctx);

/*
 * pgd_conf_check_host - the checks that ask this host: the model's
 * metadata can be read, the plan can be made on these devices, users and
 * groups exist.  For --check-config; pgd_conf_load does not run them.
 * Returns the number of errors, each reported.
 */
int pgd_conf_check_host(const struct pgd_conf *c, pgd_conf_report_fn report,
			void *ctx);

/*
 * pgd_conf_reread - a new configuration from the file and the options c
 * was loaded from (c itself is untouched).  Returns it, or NULL after
 * reporting every error (*n_errors of them; -1: out of memory).
 */
struct pgd_conf *pgd_conf_reread(const struct pgd_conf *c,
				 pgd_conf_report_fn report, void *ctx,
				 int *n_errors);

/*
 * A key whose value differs between a running configuration and a fresh
 * one: its name, both values as the file writes them, and whether it
 * changes at run time (then pgd_conf_apply has applied it).
 */
typedef void (*pgd_conf_change_fn)(void *ctx, const char *key,
				   const char *was, const char *now,
				   int applied);

/*
 * pgd_conf_apply - copy into running the keys of fresh that can change at
 * run time (limits, access rules, log level, spin time) and whose values
 * differ; calls changed() for every key that differs, applied or not.
 * Returns the number of keys applied, or -1 when out of memory (running
 * is then unchanged).
 */
int pgd_conf_apply(struct pgd_conf *running, const struct pgd_conf *fresh,
		   pgd_conf_change_fn changed, void *ctx);

/*
 * pgd_conf_print - the configuration in pagodad.conf's format: every key,
 * with its effective value (the default model's path resolved); a key
 * that is not set and has no single default is a comment that says what
 * happens.  The output reads back to the same configuration.
 */
void pgd_conf_print(const struct pgd_conf *c, FILE *out);

/* pgd_conf_path - the file c was loaded from. */
const char *pgd_conf_path(const struct pgd_conf *c);

/* pgd_conf_parallel_given - whether any devices or parallel keys are set. */
int pgd_conf_parallel_given(const struct pgd_conf *c);

/*
 * pgd_conf_model_path - the model file: [model] path, else the default
 * model's (model.h), written into buf when it is built.
 */
const char *pgd_conf_model_path(const struct pgd_conf *c, char *buf,
				size_t len);

struct pg_model_facts;
struct pg_plan_request;
/*
 * pgd_conf_plan_request - the plan that c asks for, for a model of facts
 * f: devices and counts; threads (given, else 2 for the plain one-device
 * run, else one per CPU of each device); KV for one sequence of ctx_size
 * tokens or as many tokens as kv_size holds.  req->devices points into c.
 */
void pgd_conf_plan_request(const struct pgd_conf *c,
			   const struct pg_model_facts *f,
			   struct pg_plan_request *req);

#endif
