/*
 * check.h - what the C test programs share: the failure count, CHECK and
 * an allocation that does not return NULL.
 *
 * Header-only (a static counter, a macro, static inline functions): each
 * test includes it once and ends with its own report of `failures` and its
 * own exit status.  No random numbers here: the tests' generators differ
 * in seed and shape, and their expected values depend on those.
 */
#ifndef PAGODA_TESTS_CHECK_H
#define PAGODA_TESTS_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * The checks that failed so far.  Atomic because some tests check from
 * several threads (test_comm's ranks); it reads and counts like an int.
 */
static atomic_int failures;

/*
 * CHECK - when cond is false, count a failure and say where and why on
 * stderr: "FAIL file:line: ", then the printf-style message, then a newline.
 * The test goes on, so one run reports every failed check.
 */
#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		failures++;						\
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);	\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
	}								\
} while (0)

/*
 * xmalloc - malloc for tests: out of memory ends the test with exit 1 (a
 * failure, not a crash on NULL), and 0 bytes asks for 1, so every call
 * gives a pointer to free.
 */
static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

#endif
