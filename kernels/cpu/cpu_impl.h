/*
 * cpu_impl.h - the CPU backend's insides: its handle, the per-ISA table of
 * inner loops, and the reference (scalar) loops every table falls back on.
 *
 * Shared by the files of kernels/cpu/ only; the model never includes it.
 * The op files (matmul.c, attention.c, ...) hold the threading and tiling
 * once; what differs per instruction set is only the inner loops here.
 */
#ifndef PAGODA_KERNELS_CPU_IMPL_H
#define PAGODA_KERNELS_CPU_IMPL_H

#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/threadpool.h"

/*
 * Dot of one weight row with one activation row of n values (n a multiple
 * of the weight type's block size: 32, 256 for the K-quants).  For F32/F16/BF16 weights x is floats; for
 * quantised weights x is the activation row quantised to vec_dot_type.
 */
typedef float (*pg_dot_fn)(int64_t n, const void *w, const void *x);

/*
 * Where the multi-row loops below close a part of the columns
 * (matmul_parts): n parts, part p being blocks end[p - 1] .. end[p] - 1
 * (end[-1] taken as 0; end[n - 1] = all the blocks), its outputs `stride`
 * floats after part p - 1's.  The loops restart their accumulators at
 * each part and sum it up as they sum a whole row, so part p is bit for
 * bit what a matrix of just its columns gives; they still stream and
 * prefetch whole rows.  With sum set, every part goes to part 0's
 * outputs, added in order (((p0 + p1) + p2) ..), and stride is unused.
 * NULL: one part.
 */
struct pg_cuts {
	int n;
	const int64_t *end;
	size_t stride;
	int sum;
};

/* Where part p's outputs go: out, or stride floats a part further. */
static inline float *pg_cuts_out(const struct pg_cuts *cuts, int p,
				 float *out)
{
	return cuts && !cuts->sum ? out + (size_t)p * cuts->stride : out;
}

/*
 * Whether the parts go summed into part 0's outputs (cuts->sum); the loops
 * keep that running sum in a register and store it once every part is in.
 */
static inline int pg_cuts_summed(const struct pg_cuts *cuts)
{
	return cuts && cuts->sum;
}

/*
 * The same for 4 weight rows at once (rows w, w + w_stride, ...; stride in
 * bytes) into out[0..3] (and out[p * stride + 0..3] for part p of cuts):
 * the activation block is loaded once for all four.
 */
typedef void (*pg_dot4_fn)(int64_t n, const void *w, size_t w_stride,
			   const void *x, float *out,
			   const struct pg_cuts *cuts);

/*
 * A tile of 4 weight rows x 2 tokens: out[t * out_stride + r] = row r . x_t,
 * rows w_stride bytes apart, tokens x_stride bytes apart; parts as dot4.
 */
typedef void (*pg_dot4x2_fn)(int64_t n, const void *w, size_t w_stride,
			     const void *x, size_t x_stride, float *out,
			     size_t out_stride, const struct pg_cuts *cuts);

/*
 * 8 weight rows (w_stride bytes apart) x n_tok tokens: out[t * out_stride
 * + r] = row r . x_t for r < 8, t < n_tok, bit for bit what dot4 gives
 * each half of the rows; the weights repacked once for all tokens into
 * work (n / 32 * PG_GEMM8_WORK bytes, 32-byte aligned).  xp: the tokens'
 * quantised rows as pg_gemm_prep lays them out, PG_GEMM_XP_BYTES(vec
 * type) bytes a block, n / 32 blocks a token, tokens one after another;
 * parts as dot4.
 */
typedef void (*pg_gemm8_fn)(int64_t n, const void *w, size_t w_stride,
			    const void *xp, int n_tok, float *out,
			    size_t out_stride, void *work,
			    const struct pg_cuts *cuts);
#define PG_GEMM8_WORK 320
#define PG_GEMM_XP_BYTES(vt) 40	/* for either activation type */
#define PG_GEMM8_KWORK 2848	/* the K-quants': per 256 columns */

/*
 * The same contract for 16 weight rows (w, w + w_stride, .. 15 of them):
 * out[t * out_stride + r] for r < 16, bit for bit what gemm8 of the same
 * numerics gives rows 0-7 and rows 8-15; work twice gemm8's (64-byte
 * aligned) or NULL.  Packed: w at the first of two consecutive groups.
 * The AVX-512 VNNI table's, which multiply 16 rows in one zmm register.
 */
#define PG_GEMM16_WORK (2 * PG_GEMM8_WORK)
#define PG_GEMM16_KWORK (2 * PG_GEMM8_KWORK)
/* And for 32 rows (the avx512vnni table's packed Q4 loops, cpu_impl.h
 * gemm32_q4x8_*): four groups of 8 expanded side by side. */
#define PG_GEMM32_WORK (2 * PG_GEMM16_WORK)

/* The bytes of one packed 16-row super-block of type t (kq_vnni.c), 0
 * for a type never packed so: Q4_K 16 x 148, Q5_K 16 x 180, Q6_K 16 x
 * 212 (the file's: 144, 176, 210 a row). */
#define PG_KX16_BYTES(t) ((t) == PG_Q4_K ? 2368 : (t) == PG_Q5_K ? 2880 : \
			  (t) == PG_Q6_K ? 3392 : 0)

/* Quantise n floats (a multiple of 32) to the activation type at dst. */
typedef void (*pg_quant_fn)(const float *x, void *dst, int64_t n);

/* acc[i] += a * v[i] for n values; v of the KV type (F32, F16, BF16). */
typedef void (*pg_axpy_fn)(int n, float a, const void *v, float *acc);

/*
 * The running state of one attention row's softmax (attention.c's online
 * softmax): the maximum score m so far, the sum l of exp(score - m), and
 * acc (head_dim floats), the V rows weighted by those exponentials.
 */
struct pg_attn_state {
	float m, l;
	float *acc;
};

/* The inner loops of one instruction-set level. */
struct pg_cpu_kernels {
	enum pg_cpu_isa isa;
	pg_dot_fn dot_f32;		/* F32 weights . floats */
	pg_dot_fn dot_f16;		/* F16 weights . floats */
	pg_dot_fn dot_bf16;		/* BF16 weights . floats */
	pg_dot_fn dot_q8_0;		/* Q8_0 . Q8_0 */
	pg_dot_fn dot_q4_0;		/* Q4_0 . Q8_0 */
	pg_dot_fn dot_q4_1;		/* Q4_1 . Q8_1 */
	pg_dot_fn dot_q5_0;		/* Q5_0 . Q8_0 */
	pg_dot_fn dot_q5_1;		/* Q5_1 . Q8_1 */
	pg_dot_fn dot_q2_k;		/* Q2_K . Q8_K */
	pg_dot_fn dot_q3_k;		/* Q3_K . Q8_K */
	pg_dot_fn dot_q4_k;		/* Q4_K . Q8_K */
	pg_dot_fn dot_q5_k;		/* Q5_K . Q8_K */
	pg_dot_fn dot_q6_k;		/* Q6_K . Q8_K */
	pg_dot4_fn dot4_q8_0;		/* optional (NULL): 4 rows at once */
	pg_dot4_fn dot4_q4_0;		/* optional */
	pg_dot4_fn dot4_q4_1;		/* optional */
	pg_dot4x2_fn dot4x2_q8_0;	/* optional: 4 rows x 2 tokens */
	pg_dot4x2_fn dot4x2_q4_0;	/* optional */
	pg_dot4x2_fn dot4x2_q4_1;	/* optional */
	pg_gemm8_fn gemm8_q4_0;		/* optional: 8 rows x many tokens */
	pg_gemm8_fn gemm8_q4_1;		/* optional */
	/* optional, as above, for Q5_0, Q5_1 and the K-quants (their cuts'
	 * ends still count 32-value blocks); pg_cpu_mm_loops finds them */
	pg_dot4_fn dot4_q5_0, dot4_q5_1, dot4_q2_k, dot4_q3_k, dot4_q4_k,
		   dot4_q5_k, dot4_q6_k;
	pg_dot4x2_fn dot4x2_q5_0, dot4x2_q5_1, dot4x2_q2_k, dot4x2_q3_k,
		     dot4x2_q4_k, dot4x2_q5_k, dot4x2_q6_k;
	pg_gemm8_fn gemm8_q5_0;		/* Q5_0 . Q8_0 (pg_gemm_prep's) */
	/* K-quants . Q8_K: xp the tokens' Q8_K rows as quantised (no
	 * pg_gemm_prep); work n / 256 * PG_GEMM8_KWORK bytes (32-byte
	 * aligned), or NULL (each loop then runs without) */
	pg_gemm8_fn gemm8_q2_k, gemm8_q3_k, gemm8_q4_k, gemm8_q5_k, gemm8_q6_k;
	/* Q4_1 in llama.cpp's order (llama.cpp numerics); the dot is
	 * required, the others optional as above */
	pg_dot_fn dot_q4_1_llama;
	pg_dot4_fn dot4_q4_1_llama;
	pg_dot4x2_fn dot4x2_q4_1_llama;
	pg_gemm8_fn gemm8_q4_1_llama;
	/* optional: groups of 8 rows packed by pg_cpu_q4x8_pack, w at a
	 * group, w_stride unused; work as gemm8's, or NULL: each block is
	 * then expanded as it is used (what pays for a few tokens) */
	pg_gemm8_fn gemm8_q4x8_q4_0;
	pg_gemm8_fn gemm8_q4x8_q4_1;
	pg_gemm8_fn gemm8_q4x8_q5_0;
	/* optional: Q8_0 . Q8_0, 8 rows x n_tok tokens as they are (w_stride
	 * apart; work unused), the bits of dot4_q8_0; xp: for each group of
	 * 8 tokens (the last: the rest, nt), for each block, the nt tokens' d
	 * as floats then their nt x 32 quants (matmul.c lays it out) */
	pg_gemm8_fn gemm8_q8_0;
	/* optional: 16 rows x many tokens (PG_GEMM16_WORK above), used from
	 * gemm8's token counts on where a matmul has 16 rows to give it */
	pg_gemm8_fn gemm16_q4_0, gemm16_q4_1, gemm16_q5_0;
	pg_gemm8_fn gemm16_q4x8_q4_0, gemm16_q4x8_q4_1, gemm16_q4x8_q5_0;
	/* optional: 32 rows (four consecutive packed groups) x many tokens,
	 * work PG_GEMM32_WORK a block; the bits of gemm16's */
	pg_gemm8_fn gemm32_q4x8_q4_0, gemm32_q4x8_q4_1, gemm32_q4x8_q5_0;
	pg_gemm8_fn gemm16_q2_k, gemm16_q3_k, gemm16_q4_k, gemm16_q5_k,
		    gemm16_q6_k;
	pg_gemm8_fn gemm16_q8_0;	/* on gemm8_q8_0's token layout */
	/* optional: Q4_K, Q5_K, Q6_K packed at load time in groups of 16
	 * rows (pg_cpu_q4x8_pack, PG_KX16_BYTES a super-block of the group):
	 * kx16_pack packs one group (16 rows of n columns at w, w_stride
	 * apart) at dst; the loops take it for every token count, w at the
	 * group, xp the tokens' Q8_K rows, w_stride and work unused; the
	 * bits of gemm16's */
	void (*kx16_pack)(enum pg_dtype t, const void *w, size_t w_stride,
			  int64_t n, void *dst);
	pg_gemm8_fn gemm16_kx16_q4_k, gemm16_kx16_q5_k, gemm16_kx16_q6_k;
	/* optional: the same for two consecutive packed groups (32 rows),
	 * used from 4 tokens on; the bits of the 16-row loops */
	pg_gemm8_fn gemm32_kx16_q4_k, gemm32_kx16_q5_k, gemm32_kx16_q6_k;
	pg_quant_fn quant_q8_0;		/* activations for Q8_0, Q4_0 */
	pg_quant_fn quant_q8_1;		/* activations for Q4_1, Q5_1 */
	pg_quant_fn quant_q8_k;		/* activations for the K-quants */
	pg_axpy_fn axpy_f32;
	pg_axpy_fn axpy_f16;
	pg_axpy_fn axpy_bf16;
	/* x[i] *= s for n values */
	void (*scale)(int64_t n, float s, float *x);
	/* sum of x[i]^2 for n values */
	float (*sumsq)(int64_t n, const float *x);
	/* out[i] = x[i] * s * w[i] for n values */
	void (*scale_mul)(int64_t n, const float *x, float s, const float *w,
			  float *out);
	/* s[j] = k_j . q for n keys of hd values of KV type t, rows hd apart */
	void (*attn_scores)(enum pg_dtype t, int n, int hd, const void *k,
			    const float *q, float *s);
	/* acc += sum of p[j] v_j over n rows of hd values of KV type t */
	void (*attn_values)(enum pg_dtype t, int n, int hd, const float *p,
			    const void *v, float *acc);
	/*
	 * optional (NULL: attn_scores row by row): attn_scores for nr
	 * queries q[r] into s[r], the keys loaded once for all; each row's
	 * bits those attn_scores gives it alone
	 */
	void (*attn_scores_rows)(enum pg_dtype t, int nr, int n, int hd,
				 const void *k, const float *const *q,
				 float *const *s);
	/*
	 * optional (NULL: attn_values row by row): attn_values for nr rows
	 * of weights p[r] into acc[r], the values loaded once for all; each
	 * row's bits those attn_values gives it alone
	 */
	void (*attn_values_rows)(enum pg_dtype t, int nr, int n, int hd,
				 const float *const *p, const void *v,
				 float *const *acc);
	/* s[j] = exp(s[j] - max) for n values; returns their sum */
	float (*exp_sum)(int n, float *s, float max);
	/*
	 * optional (NULL: attention.c's row-by-row steps): fold one run of
	 * n raw scores s[r] into each of nr rows' softmax states st[r] (no
	 * soft-cap): scores times scale, the running maximum raised to the
	 * run's (acc, hd values, and l rescaled by expf(old - new) through
	 * this table's scale), s[r][j] = exp(s - m) through this table's
	 * exp_sum, their sum added to l: the bits of those steps, with
	 * their constants and calls taken once for all the rows
	 */
	void (*attn_softmax_rows)(int nr, int n, int hd, float scale,
				  float *const *s,
				  struct pg_attn_state *const *st);
	/* out[i] = x[i] rounded to KV type t (F16 or BF16) and back, n values */
	void (*round_kv)(enum pg_dtype t, int n, const float *x, float *out);
	/*
	 * llama.cpp's flash attention loop (llamacpp.c) for one query q16 (F16)
	 * over n F16 keys and values (rows hd apart), in position order:
	 * folds them into the running maximum *m, sum *l and weighted V acc
	 * (F16, hd values).  Start with *m = -inf, *l = 0, acc = 0.
	 */
	void (*fa16_run)(int n, int hd, const uint16_t *k, const uint16_t *v,
			 const uint16_t *q16, float scale, float *m, float *l,
			 uint16_t *acc);
	/*
	 * optional (NULL: fa16_run row by row): fa16_run for nr queries
	 * q16[r] with states *m[r], *l[r], acc[r] over the same keys, each
	 * key and value loaded once for all; each row's bits fa16_run's
	 */
	void (*fa16_rows)(int nr, int n, int hd, const uint16_t *k,
			  const uint16_t *v, const uint16_t *const *q16,
			  float scale, float *const *m, float *const *l,
			  uint16_t *const *acc);
	/* gate[i] = silu(gate[i]) * up[i] */
	void (*silu_mul)(int64_t n, float *gate, const float *up);
	/* the same as llama.cpp's AVX2 build computes it (llamacpp.c) */
	void (*silu_mul_llama)(int64_t n, float *gate, const float *up);
	/* x[i] += y[i] */
	void (*add)(int64_t n, float *x, const float *y);
	/*
	 * gate[i] = GELU(gate[i]) * up[i], GELU as gelu.c defines it: 0 at
	 * or below -10, x at or above 10, else tab[F16 bits of x] (tab is
	 * gelu.c's table); every table gives the reference's bits.
	 */
	void (*gelu_mul)(int64_t n, float *gate, const float *up,
			 const float *tab);
};

extern const struct pg_cpu_kernels pg_cpu_kernels_scalar;
extern const struct pg_cpu_kernels pg_cpu_kernels_avx2;
/* pg_cpu_kernels_avx512 - the AVX-512 table: the AVX2 table with the
 * entries vec_avx512.c widens, made on the first call (thread-safe). */
const struct pg_cpu_kernels *pg_cpu_kernels_avx512(void);
/* pg_cpu_kernels_avx512vnni - the AVX-512 VNNI table: the AVX-512 one
 * with the 16-row loops of gemm_vnni.c and kq_vnni.c, made on the first
 * call (thread-safe). */
const struct pg_cpu_kernels *pg_cpu_kernels_avx512vnni(void);

/* A float's bits, and the float of some bits (no aliasing games). */
static inline uint32_t pg_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float pg_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* The backend's handle: the public one first, so that casts work. */
struct pg_cpu_backend {
	struct pg_backend be;
	const struct pg_cpu_kernels *k;
	int llama;			/* pg_cpu_backend_llama_numerics */
	struct pg_pool *pool;
	int n_threads;
	void *scratch;			/* quantised activations */
	size_t scratch_bytes;
};

static inline struct pg_cpu_backend *pg_cpu(struct pg_backend *be)
{
	return (struct pg_cpu_backend *)be;
}

/* Dot and activation type for weights of type t; NULL when unsupported. */
pg_dot_fn pg_cpu_dot_for(const struct pg_cpu_kernels *k, enum pg_dtype t,
			 enum pg_dtype *vec_type);

/* The 4-row dot for weights of type t, or NULL when the table has none. */
pg_dot4_fn pg_cpu_dot4_for(const struct pg_cpu_kernels *k, enum pg_dtype t);

/* The 4x2 tile for weights of type t, or NULL when the table has none. */
pg_dot4x2_fn pg_cpu_dot4x2_for(const struct pg_cpu_kernels *k,
			       enum pg_dtype t);

/*
 * The multi-row loops matmul runs for weights of type t in pagoda's
 * numerics (llama.cpp's Q4_1 order aside): pg_cpu_dot4_for and
 * pg_cpu_dot4x2_for's, and the Q5 and K-quant ones; *gemm8 the 8-row
 * loop (only with a dot4), *gemm16 the 16-row one.  NULL where the table has none.
 */
struct pg_mm_loops {
	pg_dot4_fn dot4;
	pg_dot4x2_fn dot4x2;
	pg_gemm8_fn gemm8;
	pg_gemm8_fn gemm16;	/* the 16-row one (only with a gemm8) */
};

void pg_cpu_mm_loops(const struct pg_cpu_kernels *k, enum pg_dtype t,
		     struct pg_mm_loops *l);

/*
 * n_blocks activation blocks of type vt (Q8_0 or Q8_1) at xq, one after
 * another, laid out for the gemm8 loops at xp (PG_GEMM_XP_BYTES(vt) bytes
 * a block): the 32 quants reordered, 16-bit pairs of the block's two
 * halves interleaved (pair j of the first half, then pair j of the
 * second, for j < 8); then d as a float; then for Q8_1 s as a float, for
 * Q8_0 the int32 -8 x (the sum of the 32 quants) (Q4_0's offset).
 */
void pg_gemm_prep(enum pg_dtype vt, const void *xq, int64_t n_blocks,
		  void *xp);

/* The scalar loops, also used by the SIMD tables for their tails. */
float pg_dot_f32_ref(int64_t n, const void *w, const void *x);
float pg_dot_f16_ref(int64_t n, const void *w, const void *x);
float pg_dot_bf16_ref(int64_t n, const void *w, const void *x);
float pg_dot_q8_0_ref(int64_t n, const void *w, const void *x);
float pg_dot_q4_0_ref(int64_t n, const void *w, const void *x);
float pg_dot_q4_1_ref(int64_t n, const void *w, const void *x);
float pg_dot_q4_1_llama_ref(int64_t n, const void *w, const void *x);
float pg_dot_q5_0_ref(int64_t n, const void *w, const void *x);
float pg_dot_q5_1_ref(int64_t n, const void *w, const void *x);
float pg_dot_q2_k_ref(int64_t n, const void *w, const void *x);
float pg_dot_q3_k_ref(int64_t n, const void *w, const void *x);
float pg_dot_q4_k_ref(int64_t n, const void *w, const void *x);
float pg_dot_q5_k_ref(int64_t n, const void *w, const void *x);
float pg_dot_q6_k_ref(int64_t n, const void *w, const void *x);
void pg_quant_q8_0_ref(const float *x, void *dst, int64_t n);
void pg_quant_q8_1_ref(const float *x, void *dst, int64_t n);
void pg_quant_q8_k_ref(const float *x, void *dst, int64_t n);
void pg_axpy_f32_ref(int n, float a, const void *v, float *acc);
void pg_axpy_f16_ref(int n, float a, const void *v, float *acc);
void pg_axpy_bf16_ref(int n, float a, const void *v, float *acc);
void pg_scale_ref(int64_t n, float s, float *x);
float pg_sumsq_ref(int64_t n, const float *x);
void pg_scale_mul_ref(int64_t n, const float *x, float s, const float *w,
		      float *out);
void pg_silu_mul_ref(int64_t n, float *gate, const float *up);
void pg_attn_scores_ref(enum pg_dtype t, int n, int hd, const void *k,
			const float *q, float *s);
void pg_attn_values_ref(enum pg_dtype t, int n, int hd, const float *p,
			const void *v, float *acc);
float pg_exp_sum_ref(int n, float *s, float max);
void pg_round_kv_ref(enum pg_dtype t, int n, const float *x, float *out);
void pg_silu_mul_llama_ref(int64_t n, float *gate, const float *up);
float pg_expf_llama(float x);
double pg_sumsq_llama(int64_t n, const float *x);
void pg_fa16_run_ref(int n, int hd, const uint16_t *k, const uint16_t *v,
		     const uint16_t *q16, float scale, float *m, float *l,
		     uint16_t *acc);
void pg_add_ref(int64_t n, float *x, const float *y);
void pg_gelu_mul_ref(int64_t n, float *gate, const float *up,
		     const float *tab);

/* The AVX2 loops the AVX-512 table reuses where 512 bits give nothing. */
float pg_dot_f32_avx2(int64_t n, const void *w, const void *x);
float pg_dot_f16_avx2(int64_t n, const void *w, const void *x);
float pg_dot_bf16_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q8_0_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q4_0_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q4_1_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q5_0_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q5_1_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q2_k_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q3_k_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q4_k_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q5_k_avx2(int64_t n, const void *w, const void *x);
float pg_dot_q6_k_avx2(int64_t n, const void *w, const void *x);
void pg_dot4_q8_0_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4_q4_0_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4_q4_1_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q8_0_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4x2_q4_0_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4x2_q4_1_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_gemm8_q4_0_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q4_1_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_dot4_q5_0_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q5_0_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4_q5_1_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q5_1_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4_q2_k_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q2_k_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4_q3_k_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q3_k_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4_q4_k_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q4_k_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4_q5_k_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q5_k_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_dot4_q6_k_avx2(int64_t n, const void *w, size_t w_stride,
		       const void *x, float *out, const struct pg_cuts *cuts);
void pg_dot4x2_q6_k_avx2(int64_t n, const void *w, size_t w_stride,
			 const void *x, size_t x_stride, float *out,
			 size_t out_stride, const struct pg_cuts *cuts);
void pg_gemm8_q5_0_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q2_k_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q3_k_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q4_k_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q5_k_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q6_k_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_quant_q8_k_avx2(const float *x, void *dst, int64_t n);
void pg_gemm8_q8_0_avx2(int64_t n, const void *w, size_t w_stride,
			const void *xp, int n_tok, float *out,
			size_t out_stride, void *work,
			const struct pg_cuts *cuts);
void pg_gemm8_q4x8_q4_0_avx2(int64_t n, const void *w, size_t w_stride,
			     const void *xp, int n_tok, float *out,
			     size_t out_stride, void *work,
			     const struct pg_cuts *cuts);
void pg_gemm8_q4x8_q4_1_avx2(int64_t n, const void *w, size_t w_stride,
			     const void *xp, int n_tok, float *out,
			     size_t out_stride, void *work,
			     const struct pg_cuts *cuts);
void pg_gemm8_q4x8_q5_0_avx2(int64_t n, const void *w, size_t w_stride,
			     const void *xp, int n_tok, float *out,
			     size_t out_stride, void *work,
			     const struct pg_cuts *cuts);

/* The AVX-512 VNNI 16-row loops (gemm_vnni.c, kq_vnni.c, q8_vnni.c). */
#define PG_GEMM16_DECL(name)						\
void pg_gemm16_##name##_vnni(int64_t n, const void *w, size_t w_stride,	\
			     const void *xp, int n_tok, float *out,	\
			     size_t out_stride, void *work,		\
			     const struct pg_cuts *cuts)
PG_GEMM16_DECL(q4_0);
PG_GEMM16_DECL(q4_1);
PG_GEMM16_DECL(q5_0);
PG_GEMM16_DECL(q4x8_q4_0);
PG_GEMM16_DECL(q4x8_q4_1);
PG_GEMM16_DECL(q4x8_q5_0);
PG_GEMM16_DECL(q2_k);
PG_GEMM16_DECL(q3_k);
PG_GEMM16_DECL(q4_k);
PG_GEMM16_DECL(q5_k);
PG_GEMM16_DECL(q6_k);
PG_GEMM16_DECL(q8_0);
PG_GEMM16_DECL(kx16_q4_k);
PG_GEMM16_DECL(kx16_q5_k);
PG_GEMM16_DECL(kx16_q6_k);
/* The 32-row packed loops: Q4 (gemm_vnni.c), cpu_impl.h gemm32_q4x8_*;
 * K-quants (kq_vnni.c), gemm32_kx16_*. */
#define PG_GEMM32_DECL(name)						\
void pg_gemm32_##name##_vnni(int64_t n, const void *w, size_t w_stride,	\
			     const void *xp, int n_tok, float *out,	\
			     size_t out_stride, void *work,		\
			     const struct pg_cuts *cuts)
PG_GEMM32_DECL(q4x8_q4_0);
PG_GEMM32_DECL(q4x8_q4_1);
PG_GEMM32_DECL(q4x8_q5_0);
PG_GEMM32_DECL(kx16_q4_k);
PG_GEMM32_DECL(kx16_q5_k);
PG_GEMM32_DECL(kx16_q6_k);
void pg_kx16_pack_vnni(enum pg_dtype t, const void *w, size_t w_stride,
		       int64_t n, void *dst);

float pg_dot_q4_1_llama_avx2(int64_t n, const void *w, const void *x);
void pg_dot4_q4_1_llama_avx2(int64_t n, const void *w, size_t w_stride,
			     const void *x, float *out,
			     const struct pg_cuts *cuts);
void pg_dot4x2_q4_1_llama_avx2(int64_t n, const void *w, size_t w_stride,
			       const void *x, size_t x_stride, float *out,
			       size_t out_stride, const struct pg_cuts *cuts);
void pg_gemm8_q4_1_llama_avx2(int64_t n, const void *w, size_t w_stride,
			      const void *xp, int n_tok, float *out,
			      size_t out_stride, void *work,
			      const struct pg_cuts *cuts);
void pg_quant_q8_0_avx2(const float *x, void *dst, int64_t n);
void pg_quant_q8_1_avx2(const float *x, void *dst, int64_t n);
void pg_axpy_f32_avx2(int n, float a, const void *v, float *acc);
void pg_axpy_f16_avx2(int n, float a, const void *v, float *acc);
void pg_axpy_bf16_avx2(int n, float a, const void *v, float *acc);
void pg_scale_avx2(int64_t n, float s, float *x);
float pg_sumsq_avx2(int64_t n, const float *x);
void pg_scale_mul_avx2(int64_t n, const float *x, float s, const float *w,
		       float *out);
void pg_silu_mul_avx2(int64_t n, float *gate, const float *up);
void pg_add_avx2(int64_t n, float *x, const float *y);
void pg_gelu_mul_avx2(int64_t n, float *gate, const float *up,
		      const float *tab);
void pg_attn_scores_avx2(enum pg_dtype t, int n, int hd, const void *k,
			 const float *q, float *s);
void pg_attn_values_avx2(enum pg_dtype t, int n, int hd, const float *p,
			 const void *v, float *acc);
void pg_attn_scores_rows_avx2(enum pg_dtype t, int nr, int n, int hd,
			      const void *k, const float *const *q,
			      float *const *s);
void pg_attn_values_rows_avx2(enum pg_dtype t, int nr, int n, int hd,
			      const float *const *p, const void *v,
			      float *const *acc);
void pg_fa16_rows_avx2(int nr, int n, int hd, const uint16_t *k,
		       const uint16_t *v, const uint16_t *const *q16,
		       float scale, float *const *m, float *const *l,
		       uint16_t *const *acc);
float pg_exp_sum_avx2(int n, float *s, float max);
void pg_attn_softmax_rows_avx2(int nr, int n, int hd, float scale,
				float *const *s, struct pg_attn_state *const *st);
void pg_round_kv_avx2(enum pg_dtype t, int n, const float *x, float *out);
void pg_silu_mul_llama_avx2(int64_t n, float *gate, const float *up);
void pg_fa16_run_avx2(int n, int hd, const uint16_t *k, const uint16_t *v,
		      const uint16_t *q16, float scale, float *m, float *l,
		      uint16_t *acc);

/* The ops, one per file. */
void pg_cpu_get_rows(struct pg_backend *be, const struct pg_matrix *m,
		     const int32_t *ids, int n, float *out);
void pg_cpu_rmsnorm(struct pg_backend *be, const float *x, const float *w,
		    int n, int dim, float eps, float *out);
void pg_cpu_matmul(struct pg_backend *be, const struct pg_matrix *w,
		   const float *x, int n, const float *bias, float *y);
void pg_cpu_matmul_parts(struct pg_backend *be, const struct pg_matrix *w,
			 const float *x, int n, int n_parts,
			 const int64_t *cols, int sum, float *out);
void pg_cpu_rope(struct pg_backend *be, float *x, int n, int n_heads,
		 int head_dim, int n_rot, const int32_t *pos,
		 float freq_base, enum pg_rope_mode mode);
void pg_cpu_rope_factors(struct pg_backend *be, float *x, int n, int n_heads,
			 int head_dim, int n_rot, const int32_t *pos,
			 float freq_base, enum pg_rope_mode mode,
			 const float *factors);
void pg_cpu_kv_write(struct pg_backend *be, const struct pg_kv_layout *kv,
		     int block, const float *k, const float *v, int n,
		     const int32_t *slots);
void pg_cpu_attention(struct pg_backend *be, const struct pg_kv_layout *kv,
		      int block, const float *q,
		      const struct pg_attn_heads *heads,
		      const struct pg_attn_seq *seqs, int n_seqs,
		      float scale, float *out, float *lse);
void pg_cpu_attn_merge(struct pg_backend *be, const float *parts,
		       size_t part_floats, int n_parts, int rows, int n_heads,
		       int head_dim, float *out);
void pg_cpu_silu_mul(struct pg_backend *be, float *gate, const float *up,
		     int64_t n);
void pg_cpu_add(struct pg_backend *be, float *x, const float *y, int64_t n);
void pg_cpu_add_parts(struct pg_backend *be, float *x,
		      const float *const *parts, int n_parts, int64_t n);
void pg_cpu_sum_parts(struct pg_backend *be, float *out,
		      const float *const *parts, int n_parts, int64_t n);
void pg_cpu_gelu_mul(struct pg_backend *be, float *gate, const float *up,
		     int64_t n);
void pg_cpu_scale(struct pg_backend *be, float *x, float s, int64_t n);
void pg_cpu_softcap(struct pg_backend *be, float *x, float cap, int64_t n);

/*
 * Address of (block, K=0 / V=1, kv head, physical slot) in paged KV storage;
 * the slots of one page follow each other head_dim elements apart.
 */
static inline void *pg_kv_row(const struct pg_kv_layout *kv, int block,
			      int which, int head, int32_t slot)
{
	size_t elem = pg_dtype_block_bytes(kv->type);
	size_t page = (size_t)(slot / kv->page_tokens);
	size_t off = (size_t)(slot % kv->page_tokens);
	size_t tile = (((size_t)block * 2 + (size_t)which) *
		       (size_t)kv->n_kv_heads + (size_t)head) *
		      (size_t)kv->page_tokens + off;

	return (uint8_t *)kv->base + page * kv->page_bytes +
	       tile * (size_t)kv->head_dim * elem;
}

/* Split n items among nth threads: thread ith gets [*lo, *hi). */
static inline void pg_split(int64_t n, int ith, int nth, int64_t *lo,
			    int64_t *hi)
{
	int64_t per = (n + nth - 1) / nth;

	*lo = per * ith < n ? per * ith : n;
	*hi = *lo + per < n ? *lo + per : n;
}

/*
 * pg_split of n values on multiples of 16 (so that SIMD loops keep their
 * pace): thread ith gets [*lo, *hi); returns whether that is not empty.
 */
static inline int pg_split16(int64_t n, int ith, int nth, int64_t *lo,
			     int64_t *hi)
{
	pg_split((n + 15) / 16, ith, nth, lo, hi);
	*lo *= 16;
	*hi = *hi * 16 < n ? *hi * 16 : n;
	return *hi > *lo;
}

#endif
