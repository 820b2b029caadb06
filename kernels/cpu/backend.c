/*
 * backend.c - the CPU backend's handle: processor detection, the choice of
 * the ISA table at creation (or the one PAGODA_CPU_KERNELS names), the
 * thread pool and the table of ops.
 *
 * The ops themselves live one per file; this file only wires them up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_impl.h"

/* Quantised activations' first allocation; matmul grows it on demand. */
#define PG_CPU_SCRATCH_BYTES (1u << 20)

enum pg_cpu_isa pg_cpu_isa_hw(void)
{
	int avx2, avx512, vnni;

	/* __builtin_cpu_supports also asks whether the OS saves the registers */
	__builtin_cpu_init();
	avx2 = __builtin_cpu_supports("avx2") &&
	       __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
	/* the AVX-512 table also runs AVX2 loops */
	avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
		 __builtin_cpu_supports("avx512bw") &&
		 __builtin_cpu_supports("avx512vl") &&
		 __builtin_cpu_supports("avx512dq");
	vnni = avx512 && __builtin_cpu_supports("avx512vnni");
	return vnni ? PG_ISA_AVX512VNNI : avx512 ? PG_ISA_AVX512 :
	       avx2 ? PG_ISA_AVX2 : PG_ISA_SCALAR;
}

const char *pg_cpu_isa_name(enum pg_cpu_isa isa)
{
	switch (isa) {
	case PG_ISA_SCALAR: return "scalar";
	case PG_ISA_AVX2: return "avx2";
	case PG_ISA_AVX512: return "avx512";
	case PG_ISA_AVX512VNNI: return "avx512vnni";
	}
	return "unknown";
}

int pg_cpu_isa_parse(const char *name)
{
	for (int isa = PG_ISA_SCALAR; isa <= PG_ISA_TOP; isa++)
		if (!strcmp(name, pg_cpu_isa_name((enum pg_cpu_isa)isa)))
			return isa;
	return -1;
}

/* What a level needs of the processor, for messages. */
static const char *isa_needs(enum pg_cpu_isa isa)
{
	return isa == PG_ISA_AVX512VNNI ?
	       "AVX2, FMA, F16C and AVX-512 F, BW, VL, DQ and VNNI" :
	       isa == PG_ISA_AVX512 ?
	       "AVX2, FMA, F16C and AVX-512 F, BW, VL and DQ" :
	       "AVX2, FMA and F16C";
}

int pg_cpu_isa_forced(enum pg_cpu_isa *isa, char *err, size_t err_len)
{
	const char *v = getenv(PG_CPU_KERNELS_ENV);
	enum pg_cpu_isa hw;
	int want;

	if (!v || !*v)
		return 0;
	want = pg_cpu_isa_parse(v);
	if (want < 0) {
		snprintf(err, err_len, "%s=%s: no such table of CPU kernels; use scalar, avx2, avx512 or avx512vnni, or unset it for the best this processor runs",
			 PG_CPU_KERNELS_ENV, v);
		return -EINVAL;
	}
	hw = pg_cpu_isa_hw();
	if (want > (int)hw) {
		snprintf(err, err_len, "%s=%s: this processor cannot run the %s kernels (they need %s); set it to %s (the best it runs) or lower, or unset it",
			 PG_CPU_KERNELS_ENV, v, v, isa_needs((enum pg_cpu_isa)want),
			 pg_cpu_isa_name(hw));
		return -ENOTSUP;
	}
	if (isa)
		*isa = (enum pg_cpu_isa)want;
	return 1;
}

enum pg_cpu_isa pg_cpu_isa_best(void)
{
	enum pg_cpu_isa isa;

	return pg_cpu_isa_forced(&isa, NULL, 0) == 1 ? isa :
	       pg_cpu_isa_hw();
}

pg_dot_fn pg_cpu_dot_for(const struct pg_cpu_kernels *k, enum pg_dtype t,
			 enum pg_dtype *vec_type)
{
	*vec_type = PG_F32;
	switch (t) {
	case PG_F32: return k->dot_f32;
	case PG_F16: return k->dot_f16;
	case PG_BF16: return k->dot_bf16;
	case PG_Q8_0: *vec_type = PG_Q8_0; return k->dot_q8_0;
	case PG_Q4_0: *vec_type = PG_Q8_0; return k->dot_q4_0;
	case PG_Q4_1: *vec_type = PG_Q8_1; return k->dot_q4_1;
	case PG_Q5_0: *vec_type = PG_Q8_0; return k->dot_q5_0;
	case PG_Q5_1: *vec_type = PG_Q8_1; return k->dot_q5_1;
	case PG_Q2_K: *vec_type = PG_Q8_K; return k->dot_q2_k;
	case PG_Q3_K: *vec_type = PG_Q8_K; return k->dot_q3_k;
	case PG_Q4_K: *vec_type = PG_Q8_K; return k->dot_q4_k;
	case PG_Q5_K: *vec_type = PG_Q8_K; return k->dot_q5_k;
	case PG_Q6_K: *vec_type = PG_Q8_K; return k->dot_q6_k;
	default: return NULL;
	}
}

pg_dot4_fn pg_cpu_dot4_for(const struct pg_cpu_kernels *k, enum pg_dtype t)
{
	switch (t) {
	case PG_Q8_0: return k->dot4_q8_0;
	case PG_Q4_0: return k->dot4_q4_0;
	case PG_Q4_1: return k->dot4_q4_1;
	default: return NULL;
	}
}

pg_dot4x2_fn pg_cpu_dot4x2_for(const struct pg_cpu_kernels *k,
			       enum pg_dtype t)
{
	switch (t) {
	case PG_Q8_0: return k->dot4x2_q8_0;
	case PG_Q4_0: return k->dot4x2_q4_0;
	case PG_Q4_1: return k->dot4x2_q4_1;
	default: return NULL;
	}
}

static void cpu_destroy(struct pg_backend *be)
{
	struct pg_cpu_backend *cpu = pg_cpu(be);

	if (!cpu)
		return;
	pg_pool_destroy(cpu->pool);
	free(cpu->scratch);
	free(cpu);
}

/* Memory of the CPU backend is host memory. */
static void *cpu_alloc(struct pg_backend *be, size_t bytes)
{
	(void)be;
	return aligned_alloc(256, (bytes + 255) / 256 * 256);
}

static void cpu_free(struct pg_backend *be, void *p)
{
	(void)be;
	free(p);
}

static int cpu_copy(struct pg_backend *be, void *dst, const void *src,
		    size_t bytes, char *err, size_t err_len)
{
	(void)be;
	(void)err;
	(void)err_len;
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

/* Ops run synchronously on the caller's thread: nothing is ever queued. */
static int cpu_sync(struct pg_backend *be, char *err, size_t err_len)
{
	(void)be;
	(void)err;
	(void)err_len;
	return 0;
}

static const char *cpu_kernels_name(const struct pg_backend *be)
{
	return pg_cpu_isa_name(pg_cpu_backend_isa(be));
}

static const struct pg_backend_ops cpu_ops = {
	.name = "cpu",
	.host_memory = 1,
	.exact_parallel = 1,
	.destroy = cpu_destroy,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.sync = cpu_sync,
	.get_rows = pg_cpu_get_rows,
	.rmsnorm = pg_cpu_rmsnorm,
	.matmul = pg_cpu_matmul,
	.matmul_parts = pg_cpu_matmul_parts,
	.rope = pg_cpu_rope,
	.rope_factors = pg_cpu_rope_factors,
	.kv_write = pg_cpu_kv_write,
	.attention = pg_cpu_attention,
	.attn_merge = pg_cpu_attn_merge,
	.silu_mul = pg_cpu_silu_mul,
	.add = pg_cpu_add,
	.add_parts = pg_cpu_add_parts,
	.sum_parts = pg_cpu_sum_parts,
	.gelu_mul = pg_cpu_gelu_mul,
	.scale = pg_cpu_scale,
	.softcap = pg_cpu_softcap,
	.attn_window = 1,
	.attn_softcap = 1,
	.n_threads = pg_cpu_backend_threads,
	.kernels = cpu_kernels_name,
	.pack_bytes = pg_cpu_q4x8_bytes,
	.pack = pg_cpu_q4x8_pack,
};

static const struct pg_cpu_kernels *kernels_for(enum pg_cpu_isa isa)
{
	switch (isa) {
	case PG_ISA_AVX512VNNI: return pg_cpu_kernels_avx512vnni();
	case PG_ISA_AVX512: return pg_cpu_kernels_avx512();
	case PG_ISA_AVX2: return &pg_cpu_kernels_avx2;
	default: return &pg_cpu_kernels_scalar;
	}
}

struct pg_backend *pg_cpu_backend_create(int n_threads, enum pg_cpu_isa isa)
{
	struct pg_cpu_backend *cpu;
	enum pg_cpu_isa best = pg_cpu_isa_hw();
	int err;

	/* a bad PAGODA_CPU_KERNELS stops everything, not just the best table */
	err = pg_cpu_isa_forced(&best, NULL, 0);
	if (err < 0) {
		errno = -err;
		return NULL;
	}
	if (n_threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		n_threads = n > 0 ? (int)n : 1;
	}
	cpu = calloc(1, sizeof(*cpu));
	if (!cpu)
		goto out_nomem;
	cpu->be.ops = &cpu_ops;
	cpu->k = kernels_for(isa < best ? isa : best);
	cpu->n_threads = n_threads;
	cpu->scratch_bytes = PG_CPU_SCRATCH_BYTES;
	cpu->scratch = malloc(cpu->scratch_bytes);
	if (!cpu->scratch)
		goto out_free_cpu;
	err = pg_pool_create(n_threads, &cpu->pool);
	if (err) {
		free(cpu->scratch);
		free(cpu);
		errno = -err;
		return NULL;
	}
	return &cpu->be;

out_free_cpu:
	free(cpu);
out_nomem:
	errno = ENOMEM;
	return NULL;
}

void pg_cpu_backend_llama_numerics(struct pg_backend *be, int on)
{
	pg_cpu(be)->llama = !!on;
}

enum pg_cpu_isa pg_cpu_backend_isa(const struct pg_backend *be)
{
	return ((const struct pg_cpu_backend *)be)->k->isa;
}

int pg_cpu_backend_threads(const struct pg_backend *be)
{
	return ((const struct pg_cpu_backend *)be)->n_threads;
}

int pg_cpu_backend_pin(struct pg_backend *be, const int *cpus, int n_cpus)
{
	return pg_pool_pin(pg_cpu(be)->pool, cpus, n_cpus);
}
