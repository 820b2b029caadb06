/*
 * log.h - the daemon's log: one line per event on standard error, with a
 * level, so that systemd's journal (or a terminal) keeps it.  Not a
 * per-token trace: at info level the serving loop logs start, stop,
 * client connections and errors only.
 */
#ifndef PAGODA_DAEMON_LOG_H
#define PAGODA_DAEMON_LOG_H

enum pgd_log_level {
	PGD_LOG_ERROR = 0,
	PGD_LOG_WARN,
	PGD_LOG_INFO,
	PGD_LOG_DEBUG,
};

/* pgd_log_parse - "error", "warn", "info", "debug" to a level, or -1. */
int pgd_log_parse(const char *name);

/* pgd_log_set_level - log lines of this level and more severe ones. */
void pgd_log_set_level(enum pgd_log_level level);

/* pgd_log_enabled - whether a line of this level would be written. */
int pgd_log_enabled(enum pgd_log_level level);

/*
 * pgd_log - write "pagodad: LEVEL: message" to standard error, or
 * "<PRIORITY>message" when standard error is systemd's journal.
 */
void pgd_log(enum pgd_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
