/*
 * cpu.h - the CPU backend: portable C kernels with runtime-dispatched SIMD
 * (AVX2/FMA, AVX-512) and a thread pool of its own.
 *
 * It implements struct pg_backend_ops (kernels/backend.h).  It is not the
 * engine: it knows nothing of models, sequences or files.
 */
#ifndef PAGODA_KERNELS_CPU_H
#define PAGODA_KERNELS_CPU_H

#include "kernels/backend.h"

/*
 * Instruction-set levels, from the portable scalar reference upwards: one
 * table of inner loops each, every level running all the levels below it
 * (a processor that runs a level runs those below).  The AVX-512 table's
 * integer dots are the AVX2 loops; the AVX-512 VNNI table adds batched
 * loops of 16 rows on vpdpbusd (gemm_vnni.c, kq_vnni.c).  AVX-VNNI (the
 * 256-bit VEX form of processors without AVX-512) has no table yet: such
 * processors run the AVX2 one.
 */
enum pg_cpu_isa {
	PG_ISA_SCALAR = 0,
	PG_ISA_AVX2 = 1,	/* AVX2 + FMA + F16C */
	PG_ISA_AVX512 = 2,	/* those + AVX-512 F/BW/VL/DQ */
	PG_ISA_AVX512VNNI = 3,	/* those + AVX512_VNNI */
};

/* The highest level this library has a table for. */
#define PG_ISA_TOP PG_ISA_AVX512VNNI

/*
 * The environment variable that forces one table: "scalar", "avx2",
 * "avx512" or "avx512vnni" (unset or empty: the best the processor
 * runs).  It stands in
 * for the processor's best level everywhere (pg_cpu_isa_best), so that
 * one machine runs the paths of machines with less: pagodad and the tests
 * then use that table, and backends asked for a lower level still get the
 * lower one (the tests' scalar reference).
 */
#define PG_CPU_KERNELS_ENV "PAGODA_CPU_KERNELS"

/*
 * pg_cpu_isa_hw - the highest level this processor (and its OS, which must
 * save the wider registers) runs, whatever PAGODA_CPU_KERNELS says.
 */
enum pg_cpu_isa pg_cpu_isa_hw(void);

/*
 * pg_cpu_isa_best - the highest level to use: the one PAGODA_CPU_KERNELS
 * names when it is set to a level pg_cpu_isa_hw() reaches, else
 * pg_cpu_isa_hw() (a bad value is pg_cpu_isa_forced's to report, and
 * pg_cpu_backend_create refuses it).
 */
enum pg_cpu_isa pg_cpu_isa_best(void);

/*
 * pg_cpu_isa_forced - read PAGODA_CPU_KERNELS.  Returns 0 when it is unset
 * or empty; 1 with *isa (may be NULL) set when it names a level this
 * processor runs; -EINVAL when it names no level, -ENOTSUP when the
 * processor lacks the level, each with a message for the user (what to
 * set instead) in err (err_len bytes; err may be NULL when err_len is 0).
 */
int pg_cpu_isa_forced(enum pg_cpu_isa *isa, char *err, size_t err_len);

/* pg_cpu_isa_name - "scalar", "avx2", "avx512", "avx512vnni". */
const char *pg_cpu_isa_name(enum pg_cpu_isa isa);

/* pg_cpu_isa_parse - the level of such a name, or -1 for any other. */
int pg_cpu_isa_parse(const char *name);

/*
 * pg_cpu_backend_create - a CPU backend running its kernels on n_threads
 * threads (the caller's thread counts as one; n_threads <= 0 means one per
 * online CPU) at instruction-set level isa, clamped to pg_cpu_isa_best()
 * (what the processor has, or PAGODA_CPU_KERNELS's level).  Returns NULL
 * and sets errno on failure: EINVAL or ENOTSUP when PAGODA_CPU_KERNELS is
 * bad (pg_cpu_isa_forced says why), ENOMEM, or the error of
 * pthread_create.  Destroy with be->ops->destroy(be).
 *
 * Ops of one backend must be called from one thread at a time (they share
 * its pool and scratch); separate backends are independent.  Between ops
 * the pool's threads spin for up to 0.2 ms, then sleep.
 */
struct pg_backend *pg_cpu_backend_create(int n_threads, enum pg_cpu_isa isa);

/*
 * pg_cpu_backend_llama_numerics - with on set, the rmsnorm, silu_mul and
 * attention ops compute as llama.cpp's CPU backend (built for AVX2/FMA/F16C,
 * flash attention on) does, bit for bit (kernels/cpu/llamacpp.c), for
 * forward.h's PG_NUMERICS_LLAMA_CPP.  Attention does so on an F16 store
 * with one lane and no CP, and then gives no lse; on any other store it
 * computes as without.  Off by default.
 */
void pg_cpu_backend_llama_numerics(struct pg_backend *be, int on);

/*
 * pg_cpu_backend_pin - pin the backend's pool threads to cpus (thread i to
 * cpus[i % n_cpus]; thread 0 is the caller's, which the caller pins).
 * Returns 0 or -errno.
 */
int pg_cpu_backend_pin(struct pg_backend *be, const int *cpus, int n_cpus);

/*
 * pg_cpu_q4x8_bytes - the bytes matrix m takes repacked for this
 * backend's 8-row Q4 loops (Q4_0, Q4_1, Q5_0: as many as in rows, the
 * same bytes in another order) or, on the avx512vnni table, packed for
 * its 16-row K-quant loops (Q4_K, Q5_K, Q6_K: 148, 180, 212 bytes a row
 * and super-block, against the file's 144, 176, 210); or 0 when it is
 * not to be repacked: another type or not in rows, a row count that is
 * not a multiple of the group (8; 16 for the K-quants), a table without
 * the loops (no AVX2; for the K-quants, no AVX-512 VNNI), or llama.cpp
 * numerics on (their Q4_1 order runs on rows).
 *
 * pg_cpu_q4x8_pack - repack m into dst (pg_cpu_q4x8_bytes(be, m) bytes,
 * 32-byte aligned, not overlapping m) and make m describe dst: layout
 * PG_LAYOUT_Q4X8, the same type and shape, row_bytes the packed row
 * size (pg_cpu_q4x8_bytes / n_rows).  The backend's matmul and matmul_parts give the same bits with
 * it as without, faster (no expanding of nibbles a call, 8 rows' block
 * sums side by side).  Only backends that offered bytes for it take it:
 * any other CPU backend's matmul fills its outputs with NaN.  In dst, group g (rows 8g .. 8g + 7) starts at
 * 8 g row_bytes and holds its blocks in order, each: 4 x 32 bytes of
 * nibbles (gemm_avx2.c says which weight goes where), then the 8 rows'
 * d as F16, then (Q4_1) their m as F16.  The K-quants' groups are of 16
 * rows (group g at 16 g row_bytes), their layout kq_vnni.c's.
 */
#define PG_LAYOUT_Q4X8 PG_LAYOUT_PACKED	/* the CPU's packed layout */
size_t pg_cpu_q4x8_bytes(struct pg_backend *be, const struct pg_matrix *m);
void pg_cpu_q4x8_pack(struct pg_backend *be, struct pg_matrix *m, void *dst);

/* pg_cpu_backend_isa - the level a CPU backend actually runs at. */
enum pg_cpu_isa pg_cpu_backend_isa(const struct pg_backend *be);

/* pg_cpu_backend_threads - the number of threads a CPU backend runs on. */
int pg_cpu_backend_threads(const struct pg_backend *be);

#endif
