/*
 * oneshot.h - what pagodad's command line (pagodad.c) hands its modes
 * (oneshot.c): the options it gathered, the forward pass they give (for
 * serving too), and the modes that need no running daemon.  Each mode
 * prints its result on standard output and says what went wrong on
 * standard error; each returns pagodad's exit status (0 or 1).
 */
#ifndef PAGODA_DAEMON_ONESHOT_H
#define PAGODA_DAEMON_ONESHOT_H

#include "daemon/config.h"
#include "daemon/settings.h"

struct pg_forward;
struct pg_model;
struct pg_plan;

/* pagodad's command line, once parsed (pagodad.c). */
struct pgd_options {
	struct pgd_cmdline cl;	/* the command line's own settings and the
				   environment's (settings.h) */
	const char *given[PGD_SETTINGS_MAX];	/* per row: its last argument
						   ("" without one), or NULL */
	struct pgd_conf *conf;	/* pagodad.conf's keys, the options over them */
};

/*
 * pgd_make_forward - the forward pass of the options for m in *fw, and
 * its plan in *plan_out (malloc'd: free it after pg_forward_destroy).
 * Returns 0, or 1 after saying why.
 */
int pgd_make_forward(const struct pgd_options *o, const struct pg_model *m,
		     struct pg_forward **fw, struct pg_plan **plan_out);

/* pgd_run_plan - --plan: the facts of the model at path from its
   metadata (no weights loaded), the plan of the options for it, printed. */
int pgd_run_plan(const struct pgd_options *o, const char *path);

/* pgd_run_tokenize - --tokenize TEXT (one line of ids) or --tokenize-file
   FILE|- (one line of ids per line) with m's tokenizer. */
int pgd_run_tokenize(const struct pgd_options *o, const struct pg_model *m);

/*
 * pgd_run_prompt - --prompt or --prompt-file (with --chat: in m's chat
 * template): the completion on standard output as it is generated, then
 * the figures on standard error unless --quiet.  t_start: pg_now_s() when
 * pagodad started, for the load time.
 */
int pgd_run_prompt(const struct pgd_options *o, const struct pg_model *m,
		   double t_start);

#endif
