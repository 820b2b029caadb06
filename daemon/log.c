/*
 * log.c - the daemon's leveled log lines on standard error (log.h).
 * Each line is formatted into one buffer and written with one write(2),
 * so lines from the device threads' error paths never interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static enum pgd_log_level log_level = PGD_LOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

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
	int n;

	if (!pgd_log_enabled(level))
		return;
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
