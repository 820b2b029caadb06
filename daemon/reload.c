/*
 * reload.c - SIGHUP: read pagodad.conf again (with the same command-line
 * options over it) and apply what can change while the daemon runs: the
 * client limits, the access rules, the log level and the spin time.  Each
 * change is logged; a key that changed but needs a restart (the model,
 * devices, plan, KV pool, sockets, ...) is logged as such and left as it
 * runs.  A file with errors changes nothing: every error is logged.
 *
 * Runs on the loop thread between two iterations, like everything that
 * touches struct pgd.  Which keys reload is config.c's table.  This file
 * alone writes the rules as enforced (d->lim, d->access): resolved here
 * at start (server.c) and on SIGHUP; request.c, session.c and server.c
 * read them.  It calls into config.c, request.c (the prompt scratch) and
 * session.c (the segment headers), never back into server.c.
 */
#include <stdio.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/log.h"

static void log_error(void *ctx, const char *msg)
{
	(void)ctx;
	pgd_log(PGD_LOG_ERROR, "%s", msg);
}

/* What a reload did, for its last log line. */
struct outcome {
	int n_applied;
	int n_restart;
	int level_changed;
};

static void log_change(void *ctx, const char *key, const char *was,
		       const char *now, int applied)
{
	struct outcome *o = ctx;

	if (applied) {
		o->n_applied++;
		o->level_changed |= !strcmp(key, "log_level");
		pgd_log(PGD_LOG_INFO, "%s changed: %s -> %s", key,
			*was ? was : "(not set)", *now ? now : "(not set)");
	} else {
		o->n_restart++;
		pgd_log(PGD_LOG_WARN, "%s changed: restart pagodad to apply it", key);
	}
}

/* The level lines are logged at now (pagodactl loglevel may have set it). */
static enum pgd_log_level current_level(void)
{
	int l = PGD_LOG_DEBUG;

	while (l > PGD_LOG_ERROR && !pgd_log_enabled((enum pgd_log_level)l))
		l--;
	return (enum pgd_log_level)l;
}

void pgd_limits_resolve(struct pgd *d)
{
	const struct pgd_config *cfg = d->cfg;
	struct pgd_limits *lim = &d->lim;
	int pool = pg_forward_n_pages(d->fw) * pg_forward_page_tokens(d->fw);

	lim->max_prompt = cfg->max_prompt > 0 ? cfg->max_prompt : pool;
	lim->max_tokens = cfg->max_tokens;
	lim->max_payload = cfg->max_payload ? cfg->max_payload : cfg->sq_arena;
	if (lim->max_payload > cfg->sq_arena) {
		pgd_log(PGD_LOG_WARN, "--max-payload %u is more than the submission arena holds: %u bytes",
			lim->max_payload, cfg->sq_arena);
		lim->max_payload = cfg->sq_arena;
	}
}

int pgd_limits_init(struct pgd *d, char *err, size_t err_len)
{
	const struct pgd_config *cfg = d->cfg;

	if (pg_seg_layout(&d->lim.layout, cfg->sq_slots, cfg->cq_slots,
			  cfg->sq_arena, cfg->cq_arena)) {
		snprintf(err, err_len, "bad segment geometry: ring slots must be powers of two from %u to %u, arenas from %u bytes to %u MiB",
			 PG_SEG_MIN_SLOTS, PG_SEG_MAX_SLOTS, PG_SEG_MIN_ARENA,
			 PG_SEG_MAX_ARENA >> 20);
		return -1;
	}
	pgd_limits_resolve(d);
	d->lim.n_vocab = d->m->hp.n_vocab;
	return 0;
}

void pgd_access_set(struct pgd *d, struct pgd_access *fresh)
{
	pgd_access_free(&d->access);
	if (fresh)
		d->access = *fresh;
}

/* The prompt scratch must hold max_prompt ids; keep the old limit if not. */
static void fit_prompt(struct pgd *d)
{
	int cap = pgd_requests_fit_prompt(d, d->lim.max_prompt);

	if (cap >= d->lim.max_prompt)
		return;
	pgd_log(PGD_LOG_ERROR, "SIGHUP: out of memory for prompts of %d tokens: max_prompt stays %d",
		d->lim.max_prompt, cap);
	d->lim.max_prompt = cap;
}

/*
 * Apply fresh (checked, its access rules resolved) to the running daemon.
 * The log level changes only when the file's does: a level set at run
 * time (pagodactl loglevel) survives a reload that leaves it alone.
 */
static void apply(struct pgd *d, struct pgd_conf *fresh,
		  struct pgd_access *access)
{
	struct pgd_conf *conf = d->cfg->conf;
	struct outcome o = { 0 };
	enum pgd_log_level level = current_level();

	/* the changes are logged at the more verbose of both levels */
	if ((int)level < fresh->log_level)
		pgd_log_set_level((enum pgd_log_level)fresh->log_level);
	if (pgd_conf_apply(conf, fresh, log_change, &o) < 0) {
		pgd_log_set_level(level);
		pgd_log(PGD_LOG_ERROR, "SIGHUP: out of memory applying %s: nothing changed",
			pgd_conf_path(conf));
		pgd_access_free(access);
		return;
	}
	pgd_log_set_level(o.level_changed ? (enum pgd_log_level)conf->log_level : level);
	pgd_access_set(d, access);
	pgd_limits_resolve(d);
	fit_prompt(d);
	/* connected clients read their limits from their segment's header
	   (libpagoda checks a request against them before sending it) */
	for (int i = 0; i < d->n_live; i++)
		pgd_session_set_limits(d, d->live[i]);
	pgd_log(PGD_LOG_INFO, "SIGHUP: %s read again: %d change%s applied, %d to apply at the next start",
		pgd_conf_path(conf), o.n_applied, o.n_applied == 1 ? "" : "s",
		o.n_restart);
}

void pgd_reload(struct pgd *d)
{
	struct pgd_conf *conf = d->cfg->conf, *fresh;
	struct pgd_access access;
	char err[512];
	int n_errors;

	if (!conf) {
		pgd_log(PGD_LOG_INFO, "SIGHUP: this pagodad has no configuration to read again");
		return;
	}
	fresh = pgd_conf_reread(conf, log_error, NULL, &n_errors);
	if (!fresh) {
		if (n_errors < 0)
			pgd_log(PGD_LOG_ERROR, "SIGHUP: out of memory reading %s: nothing changed",
				pgd_conf_path(conf));
		else
			pgd_log(PGD_LOG_ERROR, "SIGHUP: %d error%s in %s: nothing changed; correct it (pagodad --check-config) and send SIGHUP again",
				n_errors, n_errors == 1 ? "" : "s", pgd_conf_path(conf));
		return;
	}
	if (pgd_access_init(&access, fresh->daemon.allow_users,
			    fresh->daemon.allow_groups, err, sizeof(err)))
		pgd_log(PGD_LOG_ERROR, "SIGHUP: %s: nothing changed", err);
	else
		apply(d, fresh, &access);
	pgd_conf_free(fresh);
}
