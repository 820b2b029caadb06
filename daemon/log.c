/*
 * log.c - the daemon's leveled log lines on standard error (log.h).
 * Each line is formatted into one buffer and written with one write(2),
 * so lines from the device threads' error paths never interleave.
 *
 * When standard error is systemd's journal ($JOURNAL_STREAM names its
 * device and inode) a line starts with its sd-daemon(3) priority, "<3>"
 * to "<7>", and the journal keeps the level; the journal adds the
 * program's name itself.  Anywhere else (a terminal, a file, a pipe that
 * merely inherited $JOURNAL_STREAM) lines read "pagodad: LEVEL: ...".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/log.h"

static enum pgd_log_level log_level = PGD_LOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

/* syslog's LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
static const char *const level_prefixes[] = { "<3>", "<4>", "<6>", "<7>" };

/* -1: not looked yet; 0: plain text; 1: the journal */
static int to_journal = -1;

/* Whether standard error is the stream $JOURNAL_STREAM ("DEV:INO") names. */
static int stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int end = 0;

	if (!js || sscanf(js, "%llu:%llu%n", &dev, &ino, &end) != 2 ||
	    js[end] || fstat(STDERR_FILENO, &st))
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

int pgd_log_parse(const char *name)
{
	for (int i = 0; i <= PGD_LOG_DEBUG; i++)
		if (!strcmp(name, level_names[i]))
			return i;
	return -1;
}

void pgd_log_set_level(enum pgd_log_level level)
{
	log_level = level;
}

int pgd_log_enabled(enum pgd_log_level level)
{
	return level <= log_level;
}

void pgd_log(enum pgd_log_level level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n, journal;

	if (!pgd_log_enabled(level))
		return;
	journal = __atomic_load_n(&to_journal, __ATOMIC_RELAXED);
	if (journal < 0) {	/* device threads may race here: same answer */
		journal = stderr_is_journal();
		__atomic_store_n(&to_journal, journal, __ATOMIC_RELAXED);
	}
	if (journal)
		n = snprintf(line, sizeof(line), "%s", level_prefixes[level]);
	else
		n = snprintf(line, sizeof(line), "pagodad: %s: ", level_names[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;		/* nowhere left to say it */
}
