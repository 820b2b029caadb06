/*
 * http/buf.c - what api.c and tools.c share: a growing string, and the
 * 400 of a request refused before it reaches the daemon.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"

int buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *t;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(t = realloc(b->s, cap)))
			return -1;
		b->s = t;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
	return 0;
}

int api_fail(struct perr *e, const char *param, const char *fmt, ...)
{
	va_list ap;

	e->status = 400;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	if (!e->code)
		e->code = "invalid_value";
	return -1;
}
