/*
 * fault_wrap.c - pagodad's allocation functions, wrapped at link time
 * (-Wl,--wrap=malloc and friends, daemon/local.mk) so that a test can make the
 * Nth of them fail (daemon/engine/fault.h).  Every call of malloc, calloc,
 * realloc, strdup and strndup from an object linked into pagodad comes
 * here; the real function is __real_NAME.
 */
#include <errno.h>
#include <stddef.h>

#include "daemon/engine/fault.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static void *failed(void)
{
	errno = ENOMEM;
	return NULL;
}

#define FAIL_OR(call) return pg_fault_hit() ? failed() : (call)

void *__wrap_malloc(size_t size)
{
	FAIL_OR(__real_malloc(size));
}

void *__wrap_calloc(size_t n, size_t size)
{
	FAIL_OR(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t size)
{
	FAIL_OR(__real_realloc(p, size));
}

char *__wrap_strdup(const char *s)
{
	FAIL_OR(__real_strdup(s));
}

char *__wrap_strndup(const char *s, size_t n)
{
	FAIL_OR(__real_strndup(s, n));
}
