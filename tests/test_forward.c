/*
 * test_forward.c - the forward pass against a naive dense reference, on
 * generated tiny models (llama, llama with rope_freqs, qwen2, qwen3 with its
 * own head size; F32 and quantised weights):
 *
 *  - prefill logits of every position equal the reference's;
 *  - decoding one token at a time equals prefill (same code path);
 *  - two sequences in one batch equal each run alone (batch invariance),
 *    with an odd page size so that contexts cross pages;
 *  - a second run of a prompt takes its full pages from the prefix cache
 *    and gives the same logits;
 *  - a full KV pool gives -ENOSPC and advances nothing; bad token and
 *    page ids are refused;
 *  - models with what pagoda does not compute (a tensor no forward pass
 *    reads, Q/K norms or RoPE factors on an architecture without them, an
 *    unsupported architecture) are refused by name.
 *
 * The reference is written from the formulas, with dequantised weights,
 * F32 everywhere and a contiguous KV cache: it shares no kernel code.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/forward.h"
#include "daemon/engine/generate.h"
#include "daemon/engine/model.h"
#include "tests/check.h"
#include "tests/gen/ggufgen.h"

/* ---- the reference ---- */

/* v rounded to the nearest F16 (ties to even; |v| well inside its range). */
static double round_f16(double v)
{
	int e, sh;

	if (v == 0)
		return v;
	frexp(v, &e);		/* 2^(e-1) <= |v| < 2^e: 11 bits from there */
	sh = e - 11 < -24 ? -24 : e - 11;	/* subnormals: steps of 2^-24 */
	return ldexp(nearbyint(ldexp(v, -sh)), sh);
}

/*
 * GELU as pagoda (and ggml) define it: 0 at or below -10, z at or above
 * 10, else the tanh form of z in F16, rounded to F16.
 */
static double ref_gelu(double z)
{
	double h;

	if (z <= -10)
		return 0;
	if (z >= 10)
		return z;
	h = round_f16(z);
	return round_f16(0.5 * h * (1.0 + tanh(sqrt(2.0 / M_PI) *
					       (h + 0.044715 * h * h * h))));
}

static float *dequant(const struct pg_matrix *w)
{
	float *out = malloc(sizeof(float) * (size_t)(w->n_rows * w->n_cols));

	for (int64_t r = 0; r < w->n_rows; r++)
		pg_dequantize_row(w->type, (const char *)w->data + r * w->row_bytes,
				  out + r * w->n_cols, w->n_cols);
	return out;
}

/* y (rows) = W (rows, cols) · x (cols) [+ b] */
static void matvec(const struct pg_matrix *w, const float *x, const float *b,
		   float *y)
{
	float *wd = dequant(w);

	for (int64_t r = 0; r < w->n_rows; r++) {
		double s = b ? b[r] : 0;

		for (int64_t c = 0; c < w->n_cols; c++)
			s += (double)wd[r * w->n_cols + c] * x[c];
		y[r] = (float)s;
	}
	free(wd);
}

static void ref_rmsnorm(const float *x, const float *w, int n, float eps,
			float *out)
{
	double ss = 0;

	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	ss = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		out[i] = (float)(x[i] * ss) * w[i];
}

/* RoPE; frequency i divided by rope_freqs[i] where the model has them. */
static void ref_rope(float *v, int n_heads, const struct pg_model *m, int pos,
		     double base)
{
	const struct pg_hparams *hp = &m->hp;
	enum pg_rope_mode mode = m->arch.rope_mode;

	for (int h = 0; h < n_heads; h++) {
		float *x = v + h * hp->head_dim;

		for (int i = 0; i < hp->n_rot / 2; i++) {
			double th = pos * pow(base, -2.0 * i / hp->n_rot) /
				    (m->rope_freqs ? m->rope_freqs[i] : 1.0);
			int a = mode == PG_ROPE_NEOX ? i : 2 * i;
			int b = mode == PG_ROPE_NEOX ? i + hp->n_rot / 2 : 2 * i + 1;
			float x0 = x[a], x1 = x[b];

			x[a] = (float)(x0 * cos(th) - x1 * sin(th));
			x[b] = (float)(x0 * sin(th) + x1 * cos(th));
		}
	}
}

static float ref_cap(float x, float cap)
{
	return cap > 0.0f ? (float)(cap * tanh((double)x / cap)) : x;
}

/* x += y, through the post-norm pn when there is one */
static void ref_residual(float *x, float *y, const float *pn, int n, float eps)
{
	if (pn)
		ref_rmsnorm(y, pn, n, eps, y);
	for (int i = 0; i < n; i++)
		x[i] += y[i];
}

/*
 * Logits (n, n_vocab) of every position of ids: the model's arithmetic as
 * the architecture papers write it, in doubles where it matters.
 */
static float *ref_forward(const struct pg_model *m, const int32_t *ids, int n)
{
	const struct pg_hparams *hp = &m->hp;
	int D = hp->n_embd, hd = hp->head_dim, qd = hp->n_heads * hd;
	int kvd = hp->n_kv_heads * hd, grp = hp->n_heads / hp->n_kv_heads;
	float *x = malloc(sizeof(float) * (size_t)n * D);
	float *xb = malloc(sizeof(float) * D), *tmp = malloc(sizeof(float) * D);
	float *q = malloc(sizeof(float) * qd), *att = malloc(sizeof(float) * qd);
	float *K = malloc(sizeof(float) * (size_t)n * kvd);
	float *V = malloc(sizeof(float) * (size_t)n * kvd);
	float *g = malloc(sizeof(float) * hp->n_ff), *u = malloc(sizeof(float) * hp->n_ff);
	float *sc = malloc(sizeof(float) * n);
	float *logits = malloc(sizeof(float) * (size_t)n * hp->n_vocab);
	float *emb = malloc(sizeof(float) * D);

	for (int t = 0; t < n; t++) {
		pg_dequantize_row(m->tok_embd.type,
				  (const char *)m->tok_embd.data + ids[t] * m->tok_embd.row_bytes,
				  emb, D);
		for (int i = 0; m->arch.emb_scale > 0.0f && i < D; i++)
			emb[i] *= m->arch.emb_scale;
		memcpy(x + (size_t)t * D, emb, sizeof(float) * D);
	}
	for (int l = 0; l < hp->n_blocks; l++) {
		const struct pg_block_weights *w = &m->blocks[l];
		int win = pg_block_windowed(&m->arch, l) ? m->arch.window : 0;
		double base = win && m->arch.rope_base_swa > 0.0f ?
			      m->arch.rope_base_swa : hp->rope_base;

		for (int t = 0; t < n; t++) {
			float *xt = x + (size_t)t * D;

			ref_rmsnorm(xt, w->attn_norm, D, hp->rms_eps, xb);
			matvec(&w->wq, xb, w->bq, q);
			matvec(&w->wk, xb, w->bk, K + (size_t)t * kvd);
			matvec(&w->wv, xb, w->bv, V + (size_t)t * kvd);
			for (int h = 0; w->q_norm && h < hp->n_heads; h++)
				ref_rmsnorm(q + h * hd, w->q_norm, hd, hp->rms_eps,
					    q + h * hd);
			for (int h = 0; w->k_norm && h < hp->n_kv_heads; h++)
				ref_rmsnorm(K + (size_t)t * kvd + h * hd, w->k_norm, hd,
					    hp->rms_eps, K + (size_t)t * kvd + h * hd);
			ref_rope(q, hp->n_heads, m, t, base);
			ref_rope(K + (size_t)t * kvd, hp->n_kv_heads, m, t, base);
			for (int h = 0; h < hp->n_heads; h++) {
				int kh = h / grp, p0 = win && t >= win ? t - win + 1 : 0;
				double mx = -1e300, sum = 0;

				for (int p = p0; p <= t; p++) {
					double s = 0;

					for (int i = 0; i < hd; i++)
						s += (double)q[h * hd + i] * K[(size_t)p * kvd + kh * hd + i];
					sc[p] = ref_cap((float)(s * m->arch.attn_scale),
							m->arch.attn_softcap);
					mx = sc[p] > mx ? sc[p] : mx;
				}
				for (int p = p0; p <= t; p++)
					sum += exp(sc[p] - mx);
				for (int i = 0; i < hd; i++) {
					double o = 0;

					for (int p = p0; p <= t; p++)
						o += exp(sc[p] - mx) / sum * V[(size_t)p * kvd + kh * hd + i];
					att[h * hd + i] = (float)o;
				}
			}
			matvec(&w->wo, att, NULL, tmp);
			ref_residual(xt, tmp, w->attn_post_norm, D, hp->rms_eps);
		}
		for (int t = 0; t < n; t++) {
			float *xt = x + (size_t)t * D;
			float *hbuf = malloc(sizeof(float) * hp->n_ff);

			ref_rmsnorm(xt, w->ffn_norm, D, hp->rms_eps, xb);
			matvec(&w->w_gate, xb, NULL, g);
			matvec(&w->w_up, xb, NULL, u);
			for (int i = 0; i < hp->n_ff; i++)
				hbuf[i] = m->arch.act == PG_ACT_GELU ?
					(float)ref_gelu(g[i]) * u[i] :
					g[i] / (1.0f + expf(-g[i])) * u[i];
			matvec(&w->w_down, hbuf, NULL, tmp);
			ref_residual(xt, tmp, w->ffn_post_norm, D, hp->rms_eps);
			free(hbuf);
		}
	}
	for (int t = 0; t < n; t++) {
		ref_rmsnorm(x + (size_t)t * D, m->output_norm, D, hp->rms_eps, xb);
		matvec(&m->output, xb, NULL, logits + (size_t)t * hp->n_vocab);
		for (int i = 0; i < hp->n_vocab; i++)
			logits[(size_t)t * hp->n_vocab + i] =
				ref_cap(logits[(size_t)t * hp->n_vocab + i],
					m->arch.final_softcap);
	}
	free(x); free(xb); free(tmp); free(q); free(att); free(K); free(V);
	free(g); free(u); free(sc); free(emb);
	return logits;
}

/* ---- comparisons ---- */

/* Largest |a - b| over the largest |b|: a scale-free error. */
static double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 1e-30;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);

		num = d > num ? d : num;
		den = fabs(b[i]) > den ? fabs(b[i]) : den;
	}
	return num / den;
}

/* A forward pass and the page accounting over its KV pages. */
struct rig {
	struct pg_forward *fw;
	struct pg_kvc *kvc;
	const struct pg_model *m;
};

static int make_rig(struct rig *r, const struct pg_model *m,
		    enum pg_cpu_isa isa, int threads, int page_tokens,
		    int n_pages, enum pg_dtype kv_type)
{
	struct pg_forward_params p = pg_forward_params_default();
	char err[512];

	p.isa = isa;
	p.n_threads = threads;
	p.page_tokens = page_tokens;
	p.n_pages = n_pages;
	p.kv_type = kv_type;
	p.max_batch_tokens = 64;
	*r = (struct rig){ .m = m };
	if (pg_forward_create(m, &p, &r->fw, err, sizeof(err))) {
		fprintf(stderr, "pg_forward_create: %s\n", err);
		return -1;
	}
	r->kvc = pg_kvc_for_forward(r->fw, m);
	return r->kvc ? 0 : -1;
}

static void free_rig(struct rig *r)
{
	pg_kvc_destroy(r->kvc);
	pg_forward_destroy(r->fw);
}

static float *engine_prefill(struct rig *r, const int32_t *ids, int n)
{
	float *lg = malloc(sizeof(float) * (size_t)n * r->m->hp.n_vocab);
	struct pg_kvc_seq *s = pg_kvc_seq_new(r->kvc, 0);
	int rc = pg_run_tokens(r->fw, r->kvc, s, ids, n, 1, lg);

	CHECK(rc == 0 && pg_kvc_seq_len(s) == n, "prefill rc %d len %d", rc,
	      pg_kvc_seq_len(s));
	pg_kvc_seq_free(r->kvc, s);
	return lg;
}

static void check_decode_equals_prefill(struct rig *r, const int32_t *ids,
					int n, const float *prefill,
					const char *what)
{
	int V = r->m->hp.n_vocab;
	float *lg = malloc(sizeof(float) * V);
	struct pg_kvc_seq *s = pg_kvc_seq_new(r->kvc, 0);
	double worst = 0;

	for (int t = 0; t < n; t++) {
		double e;

		CHECK(pg_run_tokens(r->fw, r->kvc, s, &ids[t], 1, 0, lg) == 0,
		      "decode step");
		e = rel_err(lg, prefill + (size_t)t * V, V);
		worst = e > worst ? e : worst;
	}
	CHECK(worst < 1e-4, "%s: decode differs from prefill by %.3g", what, worst);
	pg_kvc_seq_free(r->kvc, s);
	free(lg);
}

/* Reserve n more tokens for s and describe them for a batch. */
static struct pg_fw_seq batch_part(struct rig *r, struct pg_kvc_seq *s, int n)
{
	struct pg_kvc_copy copies[4];
	int n_copies = 0;

	CHECK(pg_kvc_seq_reserve(r->kvc, s, pg_kvc_seq_len(s) + n, copies,
				 &n_copies) == 0 && n_copies == 0, "reserve");
	return (struct pg_fw_seq){ .pages = pg_kvc_seq_pages(s),
				   .n_past = pg_kvc_seq_len(s), .n_tokens = n };
}

static void check_batch_invariance(struct rig *r, const int32_t *ids,
				   const char *what)
{
	int V = r->m->hp.n_vocab;
	float *alone = malloc(sizeof(float) * 2 * V), *both = malloc(sizeof(float) * 2 * V);
	struct pg_kvc_seq *a = pg_kvc_seq_new(r->kvc, 0), *b = pg_kvc_seq_new(r->kvc, 0);
	struct pg_fw_seq two[2];
	int32_t batch[14];

	/* alone: A gets 9 tokens, then B gets 5 */
	CHECK(pg_run_tokens(r->fw, r->kvc, a, ids, 9, 0, alone) == 0, "A alone");
	CHECK(pg_run_tokens(r->fw, r->kvc, b, ids + 20, 5, 0, alone + V) == 0, "B alone");
	pg_kvc_seq_free(r->kvc, a);
	pg_kvc_seq_free(r->kvc, b);
	/* together in one batch, on fresh pages (no prefix lookup) */
	a = pg_kvc_seq_new(r->kvc, 0);
	b = pg_kvc_seq_new(r->kvc, 0);
	memcpy(batch, ids, sizeof(int32_t) * 9);
	memcpy(batch + 9, ids + 20, sizeof(int32_t) * 5);
	two[0] = batch_part(r, a, 9);
	two[1] = batch_part(r, b, 5);
	CHECK(pg_forward_batch(r->fw, batch, 14, two, 2, both) == 0, "A+B batch");
	CHECK(rel_err(both, alone, V) < 1e-4 && rel_err(both + V, alone + V, V) < 1e-4,
	      "%s: batching changed logits (%.3g, %.3g)", what,
	      rel_err(both, alone, V), rel_err(both + V, alone + V, V));
	pg_kvc_seq_free(r->kvc, a);
	pg_kvc_seq_free(r->kvc, b);
	free(alone);
	free(both);
}

/* The second run of a prompt takes its full pages from the prefix cache
 * and gives the same logits as computing them. */
static void check_prefix_reuse(struct rig *r, const int32_t *ids,
			       const char *what)
{
	int V = r->m->hp.n_vocab, cached;
	float *first = malloc(sizeof(float) * V), *second = malloc(sizeof(float) * V);
	struct pg_kvc_seq *s = pg_kvc_seq_new(r->kvc, 0);

	CHECK(pg_run_tokens(r->fw, r->kvc, s, ids, 23, 0, first) == 0, "first run");
	pg_kvc_seq_free(r->kvc, s);
	s = pg_kvc_seq_new(r->kvc, 0);
	cached = pg_kvc_seq_match(r->kvc, s, ids, 23);
	CHECK(cached == 21, "%s: %d of 23 tokens cached (want 3 pages of 7)", what,
	      cached);
	CHECK(pg_run_tokens(r->fw, r->kvc, s, ids + cached, 23 - cached, 0,
			    second) == 0, "second run");
	CHECK(rel_err(second, first, V) < 1e-5, "%s: cached prefix changed logits (%.3g)",
	      what, rel_err(second, first, V));
	pg_kvc_seq_free(r->kvc, s);
	free(first);
	free(second);
}

static void check_pool_full(const struct pg_model *m, const int32_t *ids)
{
	struct pg_kvc_stats st;
	struct pg_kvc_seq *s;
	struct rig r;
	float *lg = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	int rc;

	if (make_rig(&r, m, PG_ISA_SCALAR, 1, 4, 3, PG_F32))
		return;
	s = pg_kvc_seq_new(r.kvc, 0);
	CHECK(pg_run_tokens(r.fw, r.kvc, s, ids, 12, 0, lg) == 0,
	      "12 tokens fit 3 pages of 4");
	rc = pg_run_tokens(r.fw, r.kvc, s, ids, 1, 0, lg);
	CHECK(rc == -ENOSPC && pg_kvc_seq_len(s) == 12, "13th token: rc %d len %d",
	      rc, pg_kvc_seq_len(s));
	CHECK(pg_forward_batch(r.fw, (int32_t[]){ -1 }, 1,
			       &(struct pg_fw_seq){ .pages = pg_kvc_seq_pages(s),
						    .n_past = 0, .n_tokens = 1 },
			       1, lg) == -EINVAL, "bad token id refused");
	CHECK(pg_forward_batch(r.fw, ids, 1,
			       &(struct pg_fw_seq){ .pages = (int32_t[]){ 3 },
						    .n_past = 0, .n_tokens = 1 },
			       1, lg) == -EINVAL, "bad page id refused");
	pg_kvc_seq_free(r.kvc, s);
	pg_kvc_get_stats(r.kvc, &st);
	CHECK(st.n_free + st.n_cached == 3 && st.n_used == 0, "pages returned");
	free_rig(&r);
	free(lg);
}

/* Variants of a generated model (run_model's flags). */
enum {
	V_HEAD_DIM = 1,		/* head size 32, not hidden / heads (16) */
	V_ROPE_FREQS = 2,	/* rope_freqs.weight (Llama 3.1+) */
	V_WINDOW = 4,		/* a sliding window of 5 tokens */
	V_ROPE_HALF = 8,	/* partial rotary: half of every head */
};

static const char *arch_str(enum ggufgen_arch arch)
{
	static const char *const names[] = {
		"llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3",
	};

	return names[arch];
}

static void run_model(const char *preset, enum ggufgen_arch arch,
		      enum pg_dtype type, double tol, int flags)
{
	char path[] = "/tmp/pagoda-test-forward-XXXXXX";
	struct ggufgen_opts o;
	struct pg_model *m = NULL;
	char err[512], what[96];
	int32_t ids[32];
	float *ref;
	int fd = mkstemp(path);

	snprintf(what, sizeof(what), "%s/%s%s%s%s/%s", preset, arch_str(arch),
		 flags & V_HEAD_DIM ? "+hd32" : "",
		 flags & V_ROPE_FREQS ? "+rope_freqs" : "",
		 flags & V_WINDOW ? "+window5" :
		 flags & V_ROPE_HALF ? "+rope_half" : "", pg_dtype_name(type));
	ggufgen_preset(&o, preset);
	o.head_dim = flags & V_HEAD_DIM ? 32 : 0;
	o.rope_freqs = !!(flags & V_ROPE_FREQS);
	/*
	 * A window of 5 over 24 tokens in pages of 7: windows start inside
	 * pages and skip whole ones.  Gemma 3 gets 7 blocks so that block 5
	 * is global; Gemma 2 alternates; Mistral (llama) windows every block.
	 */
	if (flags & V_WINDOW)
		o.sliding_window = 5;
	if (flags & V_ROPE_HALF)
		o.rope_dim = (o.head_dim ? o.head_dim : o.hidden / o.n_heads) / 2;
	o.untied = arch == GGUFGEN_PHI3;	/* as Phi-3's files are */
	if (arch == GGUFGEN_GEMMA3)
		o.n_blocks = 7;
	if (arch == GGUFGEN_GEMMA2) {
		o.attn_softcap = 3.0f;	/* scores here are a few units */
		o.final_softcap = 2.5f;
	}
	o.arch = arch;
	o.qkv_bias = arch == GGUFGEN_QWEN2;
	o.type = type;
	o.embd_type = type;
	o.n_kv_heads = 2;
	close(fd);
	if (ggufgen_write(&o, path, err, sizeof(err)) ||
	    pg_model_load(path, 0, &m, err, sizeof(err))) {
		CHECK(0, "%s: %s", what, err);
		unlink(path);
		return;
	}
	for (int i = 0; i < 32; i++)
		ids[i] = (i * 37 + 11) % m->hp.n_vocab;
	ref = ref_forward(m, ids, 24);
	for (int isa = PG_ISA_SCALAR; isa <= (int)pg_cpu_isa_best(); isa++) {
		for (int threads = 1; threads <= 2; threads++) {
			struct rig r;
			float *lg;
			double e;

			if (make_rig(&r, m, isa, threads, 7, 32, PG_F32)) {
				CHECK(0, "cannot set up the engine");
				continue;
			}
			lg = engine_prefill(&r, ids, 24);
			e = rel_err(lg, ref, (size_t)24 * m->hp.n_vocab);
			CHECK(e < tol, "%s %s x%d: prefill vs reference %.3g (tolerance %.3g)",
			      what, pg_cpu_isa_name(isa), threads, e, tol);
			printf("%-24s %-7s threads %d: prefill vs reference %.2e\n",
			       what, pg_cpu_isa_name(isa), threads, e);
			check_decode_equals_prefill(&r, ids, 24, lg, what);
			check_batch_invariance(&r, ids, what);
			check_prefix_reuse(&r, ids, what);
			free(lg);
			free_rig(&r);
		}
	}
	check_pool_full(m, ids);
	free(ref);
	pg_model_free(m);
	unlink(path);
}

/* Replace every `from` in buf by `to` (the same length): a patched header. */
static void patch(char *buf, size_t len, const char *from, const char *to)
{
	size_t n = strlen(from);

	for (size_t i = 0; i + n <= len; i++)
		if (!memcmp(buf + i, from, n))
			memcpy(buf + i, to, n);
}

/*
 * A generated model, patched, must be refused with a message naming what
 * pagoda does not compute.
 */
static void expect_refused(const struct ggufgen_opts *o, const char *from,
			   const char *to, const char *needle)
{
	char path[] = "/tmp/pagoda-test-forward-XXXXXX", err[512] = "";
	struct pg_model *m = NULL;
	void *buf = NULL;
	size_t len = 0;
	int fd = mkstemp(path), rc;

	if (ggufgen_write_mem(o, &buf, &len, err, sizeof(err)) || fd < 0) {
		CHECK(0, "refusal %s: %s", needle, err);
		free(buf);
		return;
	}
	patch(buf, len, from, to);
	CHECK(write(fd, buf, len) == (ssize_t)len, "write %s", path);
	close(fd);
	rc = pg_model_load(path, 0, &m, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, needle),
	      "refused with \"%s\": rc %d, %s", needle, rc, rc ? err : "loaded");
	printf("refused: %s\n", err);
	pg_model_free(m);
	free(buf);
	unlink(path);
}

static void check_refusals(void)
{
	struct ggufgen_opts o;

	ggufgen_preset(&o, "tiny");
	o.qkv_bias = 1;
	/* a tensor no forward pass reads: refused, not skipped */
	expect_refused(&o, "blk.1.attn_q.bias", "blk.1.attn_x.bias",
		       "tensor blk.1.attn_x.bias is not one pagoda's llama forward pass reads");
	/* Q/K norms where the architecture has none */
	o.arch = GGUFGEN_QWEN3;
	expect_refused(&o, "qwen3", "qwen2",
		       "blk.0: attn_q_norm/attn_k_norm tensors, which qwen2 models do not have");
	/* RoPE factors are llama's only */
	o.arch = GGUFGEN_LLAMA;
	o.rope_freqs = 1;
	expect_refused(&o, "llama", "qwen2",
		       "tensor rope_freqs.weight: qwen2 models have no per-dimension RoPE frequency factors");
	o.rope_freqs = 0;
	o.qkv_bias = 0;
}

int main(void)
{
	/*
	 * F32 weights: only summation order differs from the reference, so the
	 * error is ~1e-6 of the largest logit.  Quantised weights: the engine
	 * quantises activations to 8 bits (as llama.cpp), the reference does
	 * not; a few 1e-2 is the expected size of that error.
	 */
	run_model("tiny", GGUFGEN_LLAMA, PG_F32, 1e-4, 0);
	run_model("tiny", GGUFGEN_QWEN2, PG_F32, 1e-4, 0);
	run_model("tiny", GGUFGEN_QWEN3, PG_F32, 1e-4, 0);
	run_model("tiny", GGUFGEN_QWEN3, PG_F32, 1e-4, V_HEAD_DIM);
	run_model("tiny", GGUFGEN_LLAMA, PG_F32, 1e-4, V_ROPE_FREQS);
	run_model("tiny", GGUFGEN_LLAMA, PG_F16, 3e-3, 0);
	run_model("tiny", GGUFGEN_LLAMA, PG_BF16, 3e-3, 0);
	run_model("tiny", GGUFGEN_LLAMA, PG_Q8_0, 3e-2, 0);
	run_model("tiny", GGUFGEN_QWEN3, PG_Q8_0, 3e-2, V_HEAD_DIM);
	run_model("tiny", GGUFGEN_LLAMA, PG_Q4_1, 5e-2, V_ROPE_FREQS);
	run_model("tiny", GGUFGEN_LLAMA, PG_Q4_0, 5e-2, 0);
	/*
	 * Mistral's window; the Gemma family's blocks.  Their GELU has F16
	 * steps (the reference takes the same ones), so a gate value that
	 * another summation order puts across an F16 rounding boundary moves
	 * by 2^-11 of itself: up to a few 1e-4 over the blocks (measured
	 * 2.1e-4), still far below what a wrong formula does.
	 */
	run_model("tiny", GGUFGEN_LLAMA, PG_F32, 1e-4, V_WINDOW);
	run_model("tiny", GGUFGEN_GEMMA, PG_F32, 1e-3, 0);
	run_model("tiny", GGUFGEN_GEMMA2, PG_F32, 1e-3, V_WINDOW);
	run_model("tiny", GGUFGEN_GEMMA3, PG_F32, 1e-3, V_WINDOW | V_HEAD_DIM);
	/* 7 blocks of 8-bit activations: measured 5.3e-2 */
	run_model("tiny", GGUFGEN_GEMMA3, PG_Q8_0, 8e-2, V_WINDOW);
	/* Phi-3: fused Q/K/V and gate|up, partial rotary */
	run_model("tiny", GGUFGEN_PHI3, PG_F32, 1e-4, V_ROPE_HALF);
	run_model("tiny", GGUFGEN_PHI3, PG_Q8_0, 3e-2, V_ROPE_HALF | V_HEAD_DIM);
	check_refusals();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
