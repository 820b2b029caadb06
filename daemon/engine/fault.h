/*
 * fault.h - allocation failure injection, for the tests.
 *
 * As SQLite tests its allocator: a test arms a countdown N, the Nth
 * allocation from then on fails (one failure, then the countdown is spent),
 * and the test checks that the failure became a clear error for the one
 * request or client that met it, with nothing leaked and everyone else
 * served.  "Allocation" means every malloc, calloc, realloc and strdup of
 * pagodad's own code (daemon/fault_wrap.c wraps them at link time; library
 * code such as libc's or liburing's is not counted) and every KV page the
 * engine takes from the pool (kvcache.c).
 *
 * Off, the cost is one relaxed atomic load per allocation.  pagodad lets a
 * test arm it only when started with PAGODA_FAULT_INJECTION=1 in its
 * environment (the admin command FAULT, wire/admin_proto.h); nothing else arms it.
 */
#ifndef PAGODA_ENGINE_FAULT_H
#define PAGODA_ENGINE_FAULT_H

#include <stdbool.h>

/* pg_fault_arm - fail the nth allocation from now (n >= 1); 0 disarms.
   Clears the "fired" flag and the count of allocations seen. */
void pg_fault_arm(long n);

/* pg_fault_hit - count one allocation; true when this one is to fail. */
bool pg_fault_hit(void);

/* pg_fault_fired - whether the armed failure has happened since the last
   pg_fault_arm(); *seen (may be NULL): allocations counted since then. */
bool pg_fault_fired(long *seen);

#endif
