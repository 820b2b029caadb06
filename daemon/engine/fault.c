/*
 * fault.c - allocation failure injection (fault.h).
 */
#include <execinfo.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/fault.h"

/* > 0: allocations left until the failing one; 0: off */
static _Atomic long countdown;
static _Atomic long seen;
static atomic_bool fired;

void pg_fault_arm(long n)
{
	atomic_store(&fired, false);
	atomic_store(&seen, 0);
	atomic_store(&countdown, n > 0 ? n : 0);
}

/*
 * The failing allocation's number and stack go to stderr (the daemon's
 * log), so that a test that fails names the allocation; neither write()
 * nor backtrace_symbols_fd() allocates.
 */
static void say_where(long n)
{
	char line[96] = "pagodad: fault injection: allocation ";
	char digits[24];
	size_t len = strlen(line);
	int k = 0;
	void *frames[24];
	int n_frames;

	do
		digits[k++] = (char)('0' + n % 10);
	while ((n /= 10) && k < (int)sizeof(digits));
	while (k)
		line[len++] = digits[--k];
	memcpy(line + len, " fails, here:\n", 14);
	len += 14;
	if (write(2, line, len) < 0)
		return;
	n_frames = backtrace(frames, 24);
	backtrace_symbols_fd(frames, n_frames, 2);
}

bool pg_fault_hit(void)
{
	long left = atomic_load_explicit(&countdown, memory_order_relaxed);

	if (__builtin_expect(left <= 0, 1))
		return false;
	atomic_fetch_add_explicit(&seen, 1, memory_order_relaxed);
	/* take one step; only the thread that takes it from 1 to 0 fails */
	while (left > 0) {
		if (atomic_compare_exchange_weak(&countdown, &left, left - 1)) {
			if (left == 1) {
				atomic_store(&fired, true);
				say_where(atomic_load(&seen));
				return true;
			}
			return false;
		}
	}
	return false;
}

bool pg_fault_fired(long *n_seen)
{
	if (n_seen)
		*n_seen = atomic_load(&seen);
	return atomic_load(&fired);
}
