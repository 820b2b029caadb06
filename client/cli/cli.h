/*
 * cli.h - what the files of the `pagoda` command share: its exit
 * statuses, its options, and the output helpers (cli_out.c) that print
 * text for people or JSON lines for programs.
 *
 * The command is a user of libpagoda like any other: it includes only the
 * public header.
 */
#ifndef PAGODA_CLIENT_CLI_CLI_H
#define PAGODA_CLIENT_CLI_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "include/pagoda.h"

/* Exit statuses (man pagoda(1), EXIT STATUS). */
enum {
	CLI_OK = 0,
	CLI_FAIL = 1,		/* the daemon refused or failed the request */
	CLI_USAGE = 2,		/* bad command line */
	CLI_CONNECT = 3,	/* could not connect (no daemon, permission, version) */
	CLI_GONE = 4,		/* the daemon stopped during the command */
	CLI_INTERRUPTED = 130,	/* SIGINT: the request was cancelled */
};

struct cli {
	const char *socket;	/* NULL: $PAGODA_SOCKET or the default */
	int json;		/* JSON lines on stdout */
	int verbose;		/* figures on stderr */
	int spin_us;		/* < 0: the library's default */
};

/* A growing byte buffer (NUL-terminated). */
struct cli_buf {
	char *s;
	size_t len, cap;
};

/* cli_buf_add - append n bytes; exits on ENOMEM (a command may). */
void cli_buf_add(struct cli_buf *b, const char *s, size_t n);

/* cli_json_string - s (n bytes) as a JSON string, escaped as
   common/escape.h does (PG_ESCAPE_JSON: controls, C1, bidi; invalid UTF-8
   as U+FFFD). */
void cli_json_string(FILE *f, const char *s, size_t n);

/* cli_json_event - one event as a JSON line; for DONE, text is the
   sample's whole text. */
void cli_json_event(const struct pagoda_event *ev, const struct cli_buf *text);

/* cli_figures - a DONE's figures for people, on stderr; hint (may be
   NULL) is said too when the sample ended at its first token. */
void cli_figures(const struct pagoda_event *ev, const char *hint);

/* cli_logprobs - a LOGPROBS event for people, on stderr: the token's text
   (len bytes), its log-probability and the top ones. */
void cli_logprobs(const struct pagoda_event *ev, const char *text, size_t len);

/* cli_error - "pagoda: MESSAGE" on stderr, and the exit status for code. */
int cli_error(int code, const char *msg);

#endif
