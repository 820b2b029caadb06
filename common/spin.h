/*
 * spin.h - the pause a busy-wait loop takes between two looks at a word
 * another thread or process writes.
 *
 * The x86 PAUSE (and the arm64 YIELD) tells the core that this is a spin
 * loop: it saves power, gives a sibling hyper-thread the pipeline, and
 * avoids the memory-order mis-speculation that a tight loop pays when the
 * word finally changes.  Elsewhere it is nothing.  Header-only, so that
 * kernels/, daemon/ and client/ may all include it.
 */
#ifndef PAGODA_COMMON_SPIN_H
#define PAGODA_COMMON_SPIN_H

/* pg_cpu_relax - one pause of a spin loop. */
static inline void pg_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
