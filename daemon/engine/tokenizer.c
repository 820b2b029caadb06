/*
 * tokenizer.c - text to token ids and back, from a GGUF vocabulary.
 *
 * Two models, as llama.cpp (the reference the tests compare with) runs them:
 *  - byte-level BPE ("gpt2"): the text is split on special tokens, then by
 *    the pre-tokenizer's regexes (PCRE2, applied in sequence, each splitting
 *    the pieces of the previous one into matches and gaps), each piece is
 *    mapped byte by byte to GPT-2's printable symbols and merged by rank;
 *  - SentencePiece-style BPE ("llama"): spaces become U+2581, characters
 *    are merged by score, and what no token covers falls back to <0xNN>.
 *
 * It is not a port of Hugging Face tokenizers: no Unigram, WordPiece or
 * normalizers, only the pre-tokenizers listed in pre_table[].
 *
 * Invalid UTF-8 is cut into pieces as if each bad byte were U+FFFD (as
 * llama.cpp does) but the bytes themselves are kept and tokenised one by
 * one, so that decoding gives the input back; only a byte the vocabulary
 * has no symbol for (0xff in SmolLM2's) becomes U+FFFD, as in llama.cpp.
 *
 * A tokenizer is read-only once loaded: the regexes are compiled (and JIT
 * compiled) at load, and each call keeps its match data, merge heap and
 * word cache to itself, so threads may share one.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <ctype.h>
#include <errno.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/tokenizer.h"

/* Token attributes (bit set), from tokenizer.ggml.token_type. */
enum {
	TA_NORMAL = 1 << 0,
	TA_UNKNOWN = 1 << 1,
	TA_CONTROL = 1 << 2,
	TA_USER = 1 << 3,
	TA_UNUSED = 1 << 4,
	TA_BYTE = 1 << 5,
	TA_EOG = 1 << 6,
	TA_RSTRIP = 1 << 7, /* text after it loses its leading white space */
};

enum tok_model { MODEL_BPE, MODEL_SPM };

#define MAX_REGEX 4
#define MAX_TOKENS (1 << 24)

/* Strings back to back: string i is buf[off[i] .. off[i + 1]). */
struct strtab {
	char *buf;
	size_t len, cap;
	size_t *off;		/* (n + 1) */
	int32_t n, cap_n;
};

/* Open-addressing map from a string of the table to its index. */
struct strmap {
	int32_t *slot;		/* (mask + 1), -1 when empty */
	size_t mask;
	size_t n;
};

/* A merge: the pair (left id, right id) gives id at rank. */
struct merge {
	uint64_t key;
	int32_t rank;		/* -1: empty slot */
	int32_t id;
};

struct pg_tokenizer {
	enum tok_model model;
	int32_t n_vocab;	/* ids >= n_vocab are merge results not in it */
	struct strtab str;	/* token texts, then those merge results */
	struct strmap map;
	uint8_t *attr;		/* (n_vocab) TA_* */
	float *score;		/* (n_vocab) SPM merge priority */
	char *piece;		/* decoded pieces back to back */
	size_t *piece_off;	/* (n_vocab + 1) */
	struct merge *merges;	/* (merge_mask + 1) */
	size_t merge_mask;
	int32_t byte_sym[256];	/* BPE: id of the symbol for byte b */
	int32_t byte_tok[256];	/* id of the token that is byte b alone */
	uint8_t enc[256][2];	/* GPT-2 byte -> symbol, UTF-8 */
	uint8_t enc_len[256];
	int32_t *special;	/* ids splitting the text, longest first */
	uint8_t *special_first;	/* (n_special) the first byte of each */
	int32_t n_special;
	int32_t *special_plain;	/* (n_plain) indices into special[] of the
				 * user-defined ones, which split plain text */
	int32_t n_plain;
	int32_t bos, eos, eot, eom, unk;
	int add_bos, add_space_prefix, ignore_merges;
	pcre2_code *re[MAX_REGEX];
	int n_re;
};

/* ---- small helpers ---- */

static void set_err(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !err_len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, n * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t hash_u64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

/* ---- string table and map ---- */

static int strtab_add(struct strtab *t, const char *s, size_t n)
{
	size_t cap_n = t->cap_n;

	if (t->n >= MAX_TOKENS * 4)
		return -EINVAL;
	if (grow((void **)&t->buf, &t->cap, t->len + n, 1) ||
	    grow((void **)&t->off, &cap_n, (size_t)t->n + 2, sizeof(size_t)))
		return -ENOMEM;
	t->cap_n = (int32_t)cap_n;
	if (!t->n)
		t->off[0] = 0;
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->off[++t->n] = t->len;
	return 0;
}

static const char *str_at(const struct strtab *t, int32_t i, size_t *n)
{
	*n = t->off[i + 1] - t->off[i];
	return t->buf + t->off[i];
}

static int32_t map_find(const struct pg_tokenizer *t, const char *s, size_t n)
{
	size_t i = hash_bytes(s, n) & t->map.mask;
	int32_t id;

	while ((id = t->map.slot[i]) >= 0) {
		size_t len;
		const char *p = str_at(&t->str, id, &len);

		if (len == n && !memcmp(p, s, n))
			return id;
		i = (i + 1) & t->map.mask;
	}
	return -1;
}

static void map_put(struct strmap *m, const struct strtab *str, int32_t id)
{
	size_t n;
	const char *s = str_at(str, id, &n);
	size_t i = hash_bytes(s, n) & m->mask;

	while (m->slot[i] >= 0)
		i = (i + 1) & m->mask;
	m->slot[i] = id;
	m->n++;
}

static int map_resize(struct strmap *m, const struct strtab *str, size_t cap)
{
	struct strmap nm = { .mask = cap - 1 };

	nm.slot = malloc(cap * sizeof(*nm.slot));
	if (!nm.slot)
		return -ENOMEM;
	memset(nm.slot, 0xff, cap * sizeof(*nm.slot));
	for (size_t i = 0; m->slot && i <= m->mask; i++)
		if (m->slot[i] >= 0)
			map_put(&nm, str, m->slot[i]);
	free(m->slot);
	*m = nm;
	return 0;
}

/* intern - the id of string s, adding it past the vocabulary if new. */
static int intern(struct pg_tokenizer *t, const char *s, size_t n,
		  int32_t *id)
{
	int rc;

	*id = map_find(t, s, n);
	if (*id >= 0)
		return 0;
	if ((t->map.n + 1) * 2 > t->map.mask + 1 &&
	    (rc = map_resize(&t->map, &t->str, (t->map.mask + 1) * 2)))
		return rc;
	if ((rc = strtab_add(&t->str, s, n)))
		return rc;
	*id = t->str.n - 1;
	map_put(&t->map, &t->str, *id);
	return 0;
}

/* ---- merges: (left id, right id) -> rank, result ---- */

static uint64_t pair_key(int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static const struct merge *merge_find(const struct pg_tokenizer *t,
				      int32_t a, int32_t b)
{
	uint64_t k = pair_key(a, b);
	size_t i = hash_u64(k) & t->merge_mask;

	if (!t->merges)
		return NULL;
	for (; t->merges[i].rank >= 0; i = (i + 1) & t->merge_mask)
		if (t->merges[i].key == k)
			return &t->merges[i];
	return NULL;
}

/* merge_add - first occurrence wins, as in llama.cpp. */
static void merge_add(struct pg_tokenizer *t, int32_t a, int32_t b,
		      int32_t rank, int32_t id)
{
	uint64_t k = pair_key(a, b);
	size_t i = hash_u64(k) & t->merge_mask;

	for (; t->merges[i].rank >= 0; i = (i + 1) & t->merge_mask)
		if (t->merges[i].key == k)
			return;
	t->merges[i] = (struct merge){ .key = k, .rank = rank, .id = id };
}

/* ---- UTF-8 ---- */

/*
 * utf8_check - classify the sequence at p (n > 0 bytes left): returns its
 * length when valid, 0 when the first bytes can never start a valid
 * sequence (*bad = length of that maximal invalid prefix, >= 1), or -1 when
 * it is a valid but incomplete prefix cut by the end of the input.
 */
static int utf8_check(const uint8_t *p, size_t n, int *bad)
{
	uint8_t c = p[0], lo = 0x80, hi = 0xbf;
	int len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		goto invalid1;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	for (int i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return -1;
		if (p[i] < lo || p[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xbf;
	}
	return len;
invalid1:
	*bad = 1;
	return 0;
}

static int utf8_valid(const uint8_t *p, size_t n)
{
	int bad;

	for (size_t i = 0; i < n;) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		int l = utf8_check(p + i, n - i, &bad);

		if (l <= 0)
			return 0;
		i += l;
	}
	return 1;
}

/* ---- loading ---- */

struct pre_def {
	const char *names;	/* NUL-separated, ends with an empty name */
	int ignore_merges, add_bos;
	const char *re[MAX_REGEX];
};

/*
 * llama.cpp's whitespace set, spelled out: PCRE2's \s would also take
 * U+180E.  The regexes are llama.cpp's with \s and \S written with it.
 */
#define WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

#define RE_GPT2 \
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
	"|[" WS "]+(?![^" WS "])"

#define RE_LLAMA3 \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])" \
	"|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
	"| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+" \
	"|[" WS "]+(?![^" WS "])|[" WS "]+"

/* Qwen2: Llama 3's, but digits one at a time. */
#define RE_QWEN2 \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])" \
	"|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
	"| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+" \
	"|[" WS "]+(?![^" WS "])|[" WS "]+"

static const struct pre_def pre_table[] = {
	{ "default\0", 0, 0, { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2,
			       "\\p{N}+", "[0-9][0-9][0-9]" } },
	{ "llama3\0llama-v3\0llama-bpe\0", 1, 1, { RE_LLAMA3 } },
	{ "qwen2\0", 0, 0, { RE_QWEN2 } },
	{ "smollm\0starcoder\0refact\0codeshell\0", 0, 0,
	  { "\\p{N}", RE_GPT2 } },
	{ "gpt2\0gpt-2\0phi-2\0mpt\0olmo\0", 0, 0, { RE_GPT2 } },
};

static const struct pre_def *pre_lookup(struct gguf_str name)
{
	for (size_t i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++)
		for (const char *s = pre_table[i].names; *s; s += strlen(s) + 1)
			if (gguf_str_eq(name, s))
				return &pre_table[i];
	return NULL;
}

static int compile_regexes(struct pg_tokenizer *t, const struct pre_def *d,
			   char *err, size_t err_len)
{
	for (int i = 0; i < MAX_REGEX && d->re[i]; i++) {
		int ec;
		PCRE2_SIZE eo;
		PCRE2_UCHAR msg[128];

		t->re[i] = pcre2_compile((PCRE2_SPTR)d->re[i],
					 PCRE2_ZERO_TERMINATED,
					 PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
		if (!t->re[i]) {
			pcre2_get_error_message(ec, msg, sizeof(msg));
			set_err(err, err_len, "pre-tokenizer regex %d: %s at %zu",
				i, (char *)msg, (size_t)eo);
			return -EINVAL;
		}
		/* JIT is an optimisation: the interpreter serves without it */
		pcre2_jit_compile(t->re[i], PCRE2_JIT_COMPLETE);
		t->n_re = i + 1;
	}
	return 0;
}

/* GPT-2's byte <-> printable symbol table. */
static void build_byte_enc(struct pg_tokenizer *t)
{
	int n = 0;

	for (int b = 0; b < 256; b++) {
		int printable = (b >= 0x21 && b <= 0x7e) ||
				(b >= 0xa1 && b <= 0xac) || b >= 0xae;
		int cp = printable ? b : 256 + n++;

		if (cp < 0x80) {
			t->enc[b][0] = (uint8_t)cp;
			t->enc_len[b] = 1;
		} else {
			t->enc[b][0] = (uint8_t)(0xc0 | cp >> 6);
			t->enc[b][1] = (uint8_t)(0x80 | (cp & 0x3f));
			t->enc_len[b] = 2;
		}
	}
}

/* decode_cp - byte for GPT-2 symbol cp, or -1. */
static int decode_cp(uint32_t cp)
{
	if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) ||
	    (cp >= 0xae && cp <= 0xff))
		return (int)cp;
	if (cp < 256 || cp >= 256 + 68)
		return -1;
	for (int b = 0, n = 0; b < 256; b++) {
		int printable = (b >= 0x21 && b <= 0x7e) ||
				(b >= 0xa1 && b <= 0xac) || b >= 0xae;

		if (!printable && 256 + n++ == (int)cp)
			return b;
	}
	return -1;
}

static int load_tokens(struct pg_tokenizer *t, const struct gguf_file *f,
		       char *err, size_t err_len)
{
	const char *key = "tokenizer.ggml.tokens";
	enum gguf_type et;
	uint64_t n;
	int rc;

	if (gguf_get_arr(f, key, &et, &n) || et != GGUF_STRING) {
		set_err(err, err_len, "%s: missing or not an array of strings",
			key);
		return -EINVAL;
	}
	if (n == 0 || n > MAX_TOKENS) {
		set_err(err, err_len, "%s: %llu tokens (expected 1..%d)", key,
			(unsigned long long)n, MAX_TOKENS);
		return -EINVAL;
	}
	t->n_vocab = (int32_t)n;
	/* at least twice as many slots as tokens */
	if ((rc = map_resize(&t->map, &t->str,
			     (size_t)1 << (33 - __builtin_clz((unsigned)n)))))
		return rc;
	for (int32_t i = 0; i < t->n_vocab; i++) {
		struct gguf_str s;
		char empty[32];

		gguf_get_arr_str(f, key, (uint64_t)i, &s);
		if (!s.len) {
			/* as llama.cpp: an empty text gets a placeholder */
			s.len = (uint64_t)snprintf(empty, sizeof(empty),
						   "[EMPTY_%d]", i);
			s.ptr = empty;
		}
		if (map_find(t, s.ptr, s.len) >= 0) {
			set_err(err, err_len, "%s: token %d '%.*s' is a duplicate",
				key, i, (int)(s.len > 64 ? 64 : s.len), s.ptr);
			return -EINVAL;
		}
		if ((rc = strtab_add(&t->str, s.ptr, s.len)))
			return rc;
		map_put(&t->map, &t->str, i);
	}
	return 0;
}

static int type_to_attr(int32_t type)
{
	switch (type) {
	case 1: return TA_NORMAL;
	case 2: return TA_UNKNOWN;
	case 3: return TA_CONTROL;
	case 4: return TA_USER;
	case 5: return TA_UNUSED;
	case 6: return TA_BYTE;
	default: return 0;
	}
}

static int load_types_scores(struct pg_tokenizer *t,
			     const struct gguf_file *f, char *err,
			     size_t err_len)
{
	const char *tk = "tokenizer.ggml.token_type";
	const char *sk = "tokenizer.ggml.scores";
	const uint8_t *types = NULL, *scores = NULL;
	enum gguf_type et;
	uint64_t n;

	if (gguf_find_key(f, tk) >= 0) {
		if (gguf_get_arr(f, tk, &et, &n) || et != GGUF_INT32 ||
		    n != (uint64_t)t->n_vocab) {
			set_err(err, err_len, "%s: expected %d int32 values, one per token of tokenizer.ggml.tokens (the file's vocabulary arrays disagree: re-convert it)",
				tk, t->n_vocab);
			return -EINVAL;
		}
		types = gguf_get_arr_data(f, tk);
	}
	if (gguf_find_key(f, sk) >= 0) {
		if (gguf_get_arr(f, sk, &et, &n) || et != GGUF_FLOAT32 ||
		    n != (uint64_t)t->n_vocab) {
			set_err(err, err_len, "%s: expected %d float32 values, one per token of tokenizer.ggml.tokens (the file's vocabulary arrays disagree: re-convert it)",
				sk, t->n_vocab);
			return -EINVAL;
		}
		scores = gguf_get_arr_data(f, sk);
	}
	t->attr = calloc((size_t)t->n_vocab, 1);
	t->score = calloc((size_t)t->n_vocab, sizeof(float));
	if (!t->attr || !t->score)
		return -ENOMEM;
	for (int32_t i = 0; i < t->n_vocab; i++) {
		int32_t ty = 1;

		if (types)
			memcpy(&ty, types + 4 * (size_t)i, 4);
		if (ty < 0 || ty > 6) {
			set_err(err, err_len, "%s: token %d has type %d (expected 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused or 6 byte; re-convert the file)",
				tk, i, ty);
			return -EINVAL;
		}
		t->attr[i] = (uint8_t)type_to_attr(ty);
		if (scores)
			memcpy(&t->score[i], scores + 4 * (size_t)i, 4);
	}
	return 0;
}

/* split_merge - "a b" at the first space after the first byte. */
static int split_merge(struct gguf_str s, size_t *at)
{
	for (size_t i = 1; i < s.len; i++)
		if (s.ptr[i] == ' ') {
			*at = i;
			return 1;
		}
	return 0;
}

static int add_one_merge(struct pg_tokenizer *t, struct gguf_str s,
			 int32_t rank, char **scratch, size_t *scratch_cap)
{
	int32_t a, b, ab;
	size_t at;
	int rc;

	if (!split_merge(s, &at))
		return 0;
	if (grow((void **)scratch, scratch_cap, s.len, 1))
		return -ENOMEM;
	memcpy(*scratch, s.ptr, at);
	memcpy(*scratch + at, s.ptr + at + 1, s.len - at - 1);
	if ((rc = intern(t, s.ptr, at, &a)) ||
	    (rc = intern(t, s.ptr + at + 1, s.len - at - 1, &b)) ||
	    (rc = intern(t, *scratch, s.len - 1, &ab)))
		return rc;
	merge_add(t, a, b, rank, ab);
	return 0;
}

static int load_merges(struct pg_tokenizer *t, const struct gguf_file *f,
		       char *err, size_t err_len)
{
	const char *key = "tokenizer.ggml.merges";
	char *scratch = NULL;
	size_t cap = 0, slots = 16;
	enum gguf_type et;
	uint64_t n;
	int rc = 0;

	if (gguf_get_arr(f, key, &et, &n) || et != GGUF_STRING ||
	    n > MAX_TOKENS) {
		set_err(err, err_len, "%s: missing or not an array of strings",
			key);
		return -EINVAL;
	}
	while (slots < 2 * n)
		slots *= 2;
	t->merges = malloc(slots * sizeof(*t->merges));
	if (!t->merges)
		return -ENOMEM;
	t->merge_mask = slots - 1;
	for (size_t i = 0; i < slots; i++)
		t->merges[i].rank = -1;
	for (uint64_t i = 0; i < n && !rc; i++) {
		struct gguf_str s;

		gguf_get_arr_str(f, key, i, &s);
		rc = add_one_merge(t, s, (int32_t)i, &scratch, &cap);
	}
	free(scratch);
	return rc;
}

/*
 * get_id - the special token id at key into *id, or dflt (-1 when it is
 * outside the vocabulary) when the key is absent.  An id that is there but
 * not an integer or not a token is refused: guessing "none" would add no
 * BOS or never stop (llama.cpp warns and falls back; pagoda says which key
 * to fix).
 */
static int get_id(const struct gguf_file *f, const char *key, int32_t dflt,
		  int32_t n_vocab, int32_t *id, char *err, size_t err_len)
{
	int64_t v;

	if (gguf_find_key(f, key) < 0) {
		*id = dflt < n_vocab ? dflt : -1;
		return 0;
	}
	if (gguf_get_i64(f, key, &v)) {
		set_err(err, err_len, "%s: expected an unsigned integer token id; fix or remove the key",
			key);
		return -EINVAL;
	}
	if (v < 0 || v >= n_vocab) {
		set_err(err, err_len, "%s: id %lld is outside the vocabulary of %d tokens; fix or remove the key",
			key, (long long)v, n_vocab);
		return -EINVAL;
	}
	*id = (int32_t)v;
	return 0;
}

static int get_flag(const struct gguf_file *f, const char *key, int dflt)
{
	int v;

	return gguf_get_bool(f, key, &v) ? dflt : v;
}

static int is_eog_text(const char *s, size_t n)
{
	static const char *const names[] = {
		"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
		"<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
		"<|end_of_text|>", "<end_of_utterance>", "</s>", "[EOT]",
		"[EOS]", "<eos>", "<turn|>", "<|tool_response>",
		"<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
		"<｜end▁of▁sentence｜>", /* DeepSeek */
		"[e~[",
		/* FIM pad, repository and file separators, as llama.cpp */
		"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
		"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
		"<reponame>", "<|file_sep|>",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && !memcmp(names[i], s, n))
			return 1;
	return 0;
}

/* The tokens that end generation, found by id and, as llama.cpp, by text. */
static void mark_eog(struct pg_tokenizer *t)
{
	int32_t ids[] = { t->eos, t->eot, t->eom };

	for (int32_t i = 0; i < t->n_vocab; i++) {
		size_t n;
		const char *s = str_at(&t->str, i, &n);

		if (is_eog_text(s, n))
			t->attr[i] |= TA_EOG | TA_CONTROL;
	}
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (ids[i] >= 0)
			t->attr[ids[i]] |= TA_EOG;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
	const struct pg_tokenizer *t = ctx;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	size_t lx, ly;

	str_at(&t->str, x, &lx);
	str_at(&t->str, y, &ly);
	if (lx != ly)
		return lx > ly ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* The control, user-defined and unknown tokens, longest first. */
static int build_special(struct pg_tokenizer *t)
{
	t->special = malloc((size_t)t->n_vocab * sizeof(int32_t));
	if (!t->special)
		return -ENOMEM;
	for (int32_t i = 0; i < t->n_vocab; i++)
		if (t->attr[i] & (TA_CONTROL | TA_USER | TA_UNKNOWN))
			t->special[t->n_special++] = i;
	qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t),
		cmp_special, t);
	/* kept beside the ids so that partition() can pass over the tokens
	 * whose first byte the text lacks without touching their strings
	 * (Gemma has 6,400 of them) */
	t->special_first = calloc(t->n_special > 0 ? (size_t)t->n_special : 1,
				  1);
	if (!t->special_first)
		return -ENOMEM;
	for (int32_t i = 0; i < t->n_special; i++) {
		size_t n;
		const char *s = str_at(&t->str, t->special[i], &n);

		t->special_first[i] = n ? (uint8_t)s[0] : 0;
	}
	t->special_plain = calloc(t->n_special > 0 ? (size_t)t->n_special : 1,
				  sizeof(int32_t));
	if (!t->special_plain)
		return -ENOMEM;
	for (int32_t i = 0; i < t->n_special; i++)
		if (!(t->attr[t->special[i]] & (TA_CONTROL | TA_UNKNOWN)))
			t->special_plain[t->n_plain++] = i;
	return 0;
}

/* name_is_phi3 - general.name, lower-cased, contains "phi-3" or "phi3". */
static int name_is_phi3(const struct gguf_file *f)
{
	struct gguf_str s;
	char low[256];
	size_t n;

	if (gguf_get_str(f, "general.name", &s))
		return 0;
	n = s.len < sizeof(low) - 1 ? s.len : sizeof(low) - 1;
	for (size_t i = 0; i < n; i++)
		low[i] = (char)tolower((unsigned char)s.ptr[i]);
	low[n] = 0;
	return strstr(low, "phi-3") || strstr(low, "phi3");
}

static void set_rstrip(struct pg_tokenizer *t, const char *s, int on)
{
	int32_t id = map_find(t, s, strlen(s));

	if (id < 0)
		return;
	if (on)
		t->attr[id] |= TA_RSTRIP;
	else
		t->attr[id] &= (uint8_t)~TA_RSTRIP;
}

/*
 * mark_rstrip - as llama.cpp, by the model's name: Phi-3's special tokens
 * (and "</s>") eat the white space after them, except <unk>, <s> and
 * <|endoftext|>.
 */
static void mark_rstrip(struct pg_tokenizer *t, const struct gguf_file *f)
{
	if (!name_is_phi3(f))
		return;
	for (int32_t i = 0; i < t->n_special; i++)
		t->attr[t->special[i]] |= TA_RSTRIP;
	set_rstrip(t, "</s>", 1);
	set_rstrip(t, "<unk>", 0);
	set_rstrip(t, "<s>", 0);
	set_rstrip(t, "<|endoftext|>", 0);
}

/* byte_token_text - the value of a "<0xNN>" token, or -1. */
static int byte_token_value(const char *s, size_t n)
{
	unsigned v;
	char tail;

	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	if (sscanf(s + 3, "%2x%c", &v, &tail) != 2 || tail != '>')
		return -1;
	return (int)v;
}

/* bpe_decode - GPT-2 symbols back to bytes; unknown symbols pass as is. */
static size_t bpe_decode(const char *s, size_t n, char *out)
{
	size_t o = 0;
	int bad;

	for (size_t i = 0; i < n;) {
		const uint8_t *p = (const uint8_t *)s + i;
		int l = utf8_check(p, n - i, &bad);
		uint32_t cp;
		int b;

		if (l <= 0) {
			out[o++] = s[i++];
			continue;
		}
		/* every GPT-2 symbol is below U+0800 */
		cp = l == 1 ? p[0] : (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f);
		b = l <= 2 ? decode_cp(cp) : -1;
		if (b >= 0) {
			out[o++] = (char)b;
		} else {
			memcpy(out + o, p, (size_t)l);
			o += (size_t)l;
		}
		i += (size_t)l;
	}
	return o;
}

/* spm_unescape - U+2581 back to a space. */
static size_t spm_unescape(const char *s, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
			out[o++] = ' ';
			i += 3;
		} else {
			out[o++] = s[i++];
		}
	}
	return o;
}

/* piece_of - the bytes token i stands for, with special set. */
static size_t piece_of(const struct pg_tokenizer *t, int32_t i, char *out)
{
	size_t n;
	const char *s = str_at(&t->str, i, &n);
	int v;

	if (t->attr[i] & (TA_CONTROL | TA_USER | TA_UNKNOWN)) {
		memcpy(out, s, n);
		return n;
	}
	if (t->attr[i] & TA_NORMAL)
		return t->model == MODEL_BPE ? bpe_decode(s, n, out) :
					       spm_unescape(s, n, out);
	if ((t->attr[i] & TA_BYTE) && (v = byte_token_value(s, n)) >= 0) {
		out[0] = (char)v;
		return 1;
	}
	return 0;
}

static int build_pieces(struct pg_tokenizer *t)
{
	size_t n_text = t->str.off[t->n_vocab], o = 0;

	/* no piece is longer than its text */
	t->piece = malloc(n_text ? n_text : 1);
	t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(size_t));
	if (!t->piece || !t->piece_off)
		return -ENOMEM;
	for (int32_t i = 0; i < t->n_vocab; i++) {
		t->piece_off[i] = o;
		o += piece_of(t, i, t->piece + o);
	}
	t->piece_off[t->n_vocab] = o;
	return 0;
}

static int32_t real_token(const struct pg_tokenizer *t, const char *s,
			  size_t n)
{
	int32_t id = map_find(t, s, n);

	return id < t->n_vocab ? id : -1;
}

static void build_byte_tables(struct pg_tokenizer *t)
{
	static const char hex[] = "0123456789ABCDEF";

	build_byte_enc(t);
	for (int b = 0; b < 256; b++) {
		char c = (char)b, name[7] = { '<', '0', 'x', hex[b >> 4],
					      hex[b & 15], '>', 0 };

		t->byte_sym[b] = map_find(t, (const char *)t->enc[b],
					  t->enc_len[b]);
		t->byte_tok[b] = real_token(t, &c, 1);
		if (t->model == MODEL_SPM && real_token(t, name, 6) >= 0)
			t->byte_tok[b] = real_token(t, name, 6);
	}
}

static int load_bpe(struct pg_tokenizer *t, const struct gguf_file *f,
		    char *err, size_t err_len)
{
	struct gguf_str pre = { "default", 7 };
	const struct pre_def *d;
	int rc;

	gguf_get_str(f, "tokenizer.ggml.pre", &pre);
	d = pre_lookup(pre);
	if (!d) {
		char q[64 * 4 + 4];

		set_err(err, err_len,
			"tokenizer.ggml.pre: unknown pre-tokenizer \"%s\" (expected default, gpt2, smollm, llama-bpe, ...)",
			gguf_str_quote(pre, 64, q, sizeof(q)));
		return -EINVAL;
	}
	t->ignore_merges = d->ignore_merges;
	t->add_bos = d->add_bos;
	t->bos = t->eos = t->unk = -1;
	if ((rc = compile_regexes(t, d, err, err_len)))
		return rc;
	return load_merges(t, f, err, err_len);
}

static int load_model(struct pg_tokenizer *t, const struct gguf_file *f,
		      char *err, size_t err_len)
{
	struct gguf_str model;
	char q[64 * 4 + 4];

	if (gguf_get_str(f, "tokenizer.ggml.model", &model)) {
		set_err(err, err_len, "tokenizer.ggml.model: missing or not a string");
		return -EINVAL;
	}
	if (gguf_str_eq(model, "gpt2")) {
		t->model = MODEL_BPE;
		return load_bpe(t, f, err, err_len);
	}
	if (gguf_str_eq(model, "llama")) {
		t->model = MODEL_SPM;
		t->add_bos = 1;
		t->add_space_prefix = 1;
		t->bos = 1;
		t->eos = 2;
		t->unk = 0;
		return 0;
	}
	set_err(err, err_len,
		"tokenizer.ggml.model: \"%s\" is not supported (expected gpt2 or llama)",
		gguf_str_quote(model, 64, q, sizeof(q)));
	return -EINVAL;
}

static int load_specials(struct pg_tokenizer *t, const struct gguf_file *f,
			 char *err, size_t err_len)
{
	int32_t n = t->n_vocab;

	int rc;

	if ((rc = get_id(f, "tokenizer.ggml.bos_token_id", t->bos, n, &t->bos, err, err_len)) ||
	    (rc = get_id(f, "tokenizer.ggml.eos_token_id", t->eos, n, &t->eos, err, err_len)) ||
	    (rc = get_id(f, "tokenizer.ggml.eot_token_id", -1, n, &t->eot, err, err_len)) ||
	    (rc = get_id(f, "tokenizer.ggml.eom_token_id", -1, n, &t->eom, err, err_len)) ||
	    (rc = get_id(f, "tokenizer.ggml.unknown_token_id", t->unk, n, &t->unk, err, err_len)))
		return rc;
	t->add_bos = get_flag(f, "tokenizer.ggml.add_bos_token", t->add_bos);
	t->add_space_prefix = get_flag(f, "tokenizer.ggml.add_space_prefix",
				       t->add_space_prefix);
	if (t->add_bos && t->bos < 0) {
		set_err(err, err_len,
			"tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
		return -EINVAL;
	}
	mark_eog(t);
	return 0;
}

int pg_tokenizer_load(const struct gguf_file *f, struct pg_tokenizer **out,
		      char *err, size_t err_len)
{
	struct pg_tokenizer *t;
	int rc;

	set_err(err, err_len, "%s", "");
	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if ((rc = load_tokens(t, f, err, err_len)) ||
	    (rc = load_types_scores(t, f, err, err_len)) ||
	    (rc = load_model(t, f, err, err_len)) ||
	    (rc = load_specials(t, f, err, err_len)) ||
	    (rc = build_special(t)) || (rc = build_pieces(t)))
		goto out_free;
	mark_rstrip(t, f);
	build_byte_tables(t);
	*out = t;
	return 0;
out_free:
	if (rc == -ENOMEM)
		set_err(err, err_len, "out of memory loading the vocabulary");
	pg_tokenizer_free(t);
	return rc;
}

void pg_tokenizer_free(struct pg_tokenizer *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_re; i++)
		pcre2_code_free(t->re[i]);
	free(t->str.buf);
	free(t->str.off);
	free(t->map.slot);
	free(t->attr);
	free(t->score);
	free(t->piece);
	free(t->piece_off);
	free(t->merges);
	free(t->special);
	free(t->special_first);
	free(t->special_plain);
	free(t);
}

int pg_tokenizer_n_vocab(const struct pg_tokenizer *t)
{
	return t->n_vocab;
}

int32_t pg_tokenizer_bos(const struct pg_tokenizer *t)
{
	return t->bos;
}

int32_t pg_tokenizer_eos(const struct pg_tokenizer *t)
{
	return t->eos;
}

int pg_tokenizer_add_bos(const struct pg_tokenizer *t)
{
	return t->add_bos;
}

int pg_tokenizer_is_eog(const struct pg_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && (t->attr[id] & TA_EOG);
}

/* ---- tokenising: per-call state ---- */

struct span {
	size_t a, b;
};

/* A text fragment (id < 0) or a special token. */
struct frag {
	size_t off, len;
	int32_t id;
};

struct sym {
	int32_t id;		/* BPE: symbol id, -1 when none */
	int32_t prev, next;
	size_t start, len;	/* bytes of the word (SPM: of the escaped text) */
};

/* A candidate merge; the highest pri, then the leftmost, goes first. */
struct cand {
	double pri;
	int32_t left, right;
	int32_t a, b, id;	/* BPE: the ids merged, the result */
	size_t size;		/* SPM: bytes covered */
};

#define CACHE_SLOTS 8192
#define CACHE_MAX_WORD 64

struct cache_ent {
	const char *w;
	size_t n;
	size_t ids_off;
	uint32_t n_ids;
};

struct sink {
	int32_t *out;
	int64_t max, n;
};

struct work {
	const struct pg_tokenizer *t;
	struct sink *out;
	struct sym *sym;
	size_t cap_sym;
	struct cand *heap;
	size_t n_heap, cap_heap;
	struct span *sa, *sb;
	size_t cap_sa, cap_sb;
	int32_t *pool;		/* ids of words, cached or in progress */
	size_t n_pool, cap_pool;
	struct cache_ent *cache;
	char *buf;		/* escaped or sanitised text */
	size_t cap_buf;
	char *wbuf;		/* sanitised words */
	size_t cap_wbuf;
	int no_cache;
	size_t *map;		/* sanitised offset -> input offset */
	size_t cap_map;
	pcre2_match_data *md;
};

static void emit(struct sink *s, int32_t id)
{
	if (s->n < s->max)
		s->out[s->n] = id;
	s->n++;
}

static int pool_push(struct work *w, int32_t id)
{
	if (grow((void **)&w->pool, &w->cap_pool, w->n_pool + 1,
		 sizeof(int32_t)))
		return -ENOMEM;
	w->pool[w->n_pool++] = id;
	return 0;
}

static int cand_before(const struct cand *x, const struct cand *y)
{
	return x->pri > y->pri || (x->pri == y->pri && x->left < y->left);
}

static int heap_push(struct work *w, struct cand c)
{
	size_t i;

	if (grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof(c)))
		return -ENOMEM;
	for (i = w->n_heap++; i > 0; i = (i - 1) / 2) {
		struct cand *p = &w->heap[(i - 1) / 2];

		if (!cand_before(&c, p))
			break;
		w->heap[i] = *p;
	}
	w->heap[i] = c;
	return 0;
}

static struct cand heap_pop(struct work *w)
{
	struct cand top = w->heap[0], last = w->heap[--w->n_heap];
	size_t i = 0, n = w->n_heap;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && cand_before(&w->heap[c + 1], &w->heap[c]))
			c++;
		if (!cand_before(&w->heap[c], &last))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n)
		w->heap[i] = last;
	return top;
}

/* Unlink s[r] after merging it into s[l]. */
static void sym_absorb(struct sym *s, int32_t l, int32_t r)
{
	s[l].len += s[r].len;
	s[r].len = 0;
	s[l].next = s[r].next;
	if (s[r].next >= 0)
		s[s[r].next].prev = l;
}

static int syms_init(struct work *w, size_t n)
{
	if (n > INT32_MAX)
		return -ENOMEM;
	if (grow((void **)&w->sym, &w->cap_sym, n, sizeof(struct sym)))
		return -ENOMEM;
	w->n_heap = 0;
	return 0;
}

/* ---- byte-level BPE ---- */

static int bpe_try(struct work *w, int32_t l, int32_t r)
{
	const struct merge *m;
	struct sym *s = w->sym;

	if (l < 0 || r < 0 || s[l].id < 0 || s[r].id < 0)
		return 0;
	m = merge_find(w->t, s[l].id, s[r].id);
	if (!m)
		return 0;
	return heap_push(w, (struct cand){ .pri = -(double)m->rank,
					   .left = l, .right = r,
					   .a = s[l].id, .b = s[r].id,
					   .id = m->id });
}

static int bpe_merge_all(struct work *w)
{
	struct sym *s = w->sym;
	int rc = 0;

	while (w->n_heap && !rc) {
		struct cand c = heap_pop(w);
		int32_t l = c.left, r = c.right;

		if (!s[l].len || !s[r].len || s[l].next != r ||
		    s[l].id != c.a || s[r].id != c.b)
			continue;
		s[l].id = c.id;
		sym_absorb(s, l, r);
		rc = bpe_try(w, s[l].prev, l);
		if (!rc)
			rc = bpe_try(w, l, s[l].next);
	}
	return rc;
}

/*
 * A symbol that is no token: as llama.cpp, look each byte of its GPT-2
 * spelling up as a token of its own, dropping those that are not.
 */
static int bpe_fallback(struct work *w, const uint8_t *p, size_t n)
{
	const struct pg_tokenizer *t = w->t;
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++)
		for (int k = 0; k < t->enc_len[p[i]] && !rc; k++) {
			int32_t id = t->byte_tok[t->enc[p[i]][k]];

			if (id >= 0)
				rc = pool_push(w, id);
		}
	return rc;
}

/* bpe_word_ids - append the ids of one pre-tokenised word to the pool. */
static int bpe_word_ids(struct work *w, const uint8_t *p, size_t n)
{
	const struct pg_tokenizer *t = w->t;
	struct sym *s;
	int rc;

	if ((rc = syms_init(w, n)))
		return rc;
	s = w->sym;
	for (size_t i = 0; i < n; i++)
		s[i] = (struct sym){ .id = t->byte_sym[p[i]],
				     .prev = (int32_t)i - 1,
				     .next = i + 1 < n ? (int32_t)i + 1 : -1,
				     .start = i, .len = 1 };
	for (size_t i = 1; i < n && !rc; i++)
		rc = bpe_try(w, (int32_t)i - 1, (int32_t)i);
	if (!rc)
		rc = bpe_merge_all(w);
	for (int32_t i = 0; i >= 0 && !rc; i = s[i].next) {
		if (s[i].id >= 0 && s[i].id < t->n_vocab)
			rc = pool_push(w, s[i].id);
		else
			rc = bpe_fallback(w, p + s[i].start, s[i].len);
	}
	return rc;
}

/* whole_word - llama3's ignore_merges: a word that is a token stays one. */
static int32_t whole_word(struct work *w, const uint8_t *p, size_t n)
{
	const struct pg_tokenizer *t = w->t;
	size_t o = 0;

	if (grow((void **)&w->buf, &w->cap_buf, 2 * n, 1))
		return -1;
	for (size_t i = 0; i < n; i++) {
		memcpy(w->buf + o, t->enc[p[i]], t->enc_len[p[i]]);
		o += t->enc_len[p[i]];
	}
	return real_token(t, w->buf, o);
}

static struct cache_ent *cache_slot(struct work *w, const char *p, size_t n)
{
	if (n > CACHE_MAX_WORD || w->no_cache)
		return NULL;
	if (!w->cache) {
		w->cache = calloc(CACHE_SLOTS, sizeof(*w->cache));
		if (!w->cache)
			return NULL;
	}
	return &w->cache[hash_bytes(p, n) & (CACHE_SLOTS - 1)];
}

static int bpe_word(struct work *w, const char *p, size_t n)
{
	struct cache_ent *ce = cache_slot(w, p, n);
	size_t mark = w->n_pool;
	int32_t id;
	int rc = 0;

	if (ce && ce->w && ce->n == n && !memcmp(ce->w, p, n)) {
		for (uint32_t i = 0; i < ce->n_ids; i++)
			emit(w->out, w->pool[ce->ids_off + i]);
		return 0;
	}
	if (w->t->ignore_merges && (id = whole_word(w, (const uint8_t *)p, n)) >= 0)
		rc = pool_push(w, id);
	else
		rc = bpe_word_ids(w, (const uint8_t *)p, n);
	if (rc)
		return rc;
	for (size_t i = mark; i < w->n_pool; i++)
		emit(w->out, w->pool[i]);
	if (ce)
		*ce = (struct cache_ent){ .w = p, .n = n, .ids_off = mark,
					  .n_ids = (uint32_t)(w->n_pool - mark) };
	else
		w->n_pool = mark;
	return 0;
}

/* ---- pre-tokenising ---- */

static int span_push(struct span **v, size_t *n, size_t *cap, size_t a,
		     size_t b)
{
	if (grow((void **)v, cap, *n + 1, sizeof(**v)))
		return -ENOMEM;
	(*v)[(*n)++] = (struct span){ a, b };
	return 0;
}

/*
 * regex_split - split each span of in[] into the matches of re and the
 * gaps between them, into w->sb.  Each span is its own subject, so that a
 * lookahead sees its end as the end of the text, as in llama.cpp.
 */
static int regex_split(struct work *w, const pcre2_code *re, const char *s,
		       size_t n_in, size_t *n_out)
{
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
	int rc = 0;

	*n_out = 0;
	for (size_t k = 0; k < n_in && !rc; k++) {
		size_t a = w->sa[k].a, b = w->sa[k].b, pos = a;

		while (pos < b && !rc) {
			int m = pcre2_match(re, (PCRE2_SPTR)(s + a), b - a,
					    pos - a, PCRE2_NO_UTF_CHECK, w->md,
					    NULL);

			if (m == PCRE2_ERROR_NOMATCH || (m >= 0 && ov[1] == ov[0]))
				break;
			if (m < 0)
				return -ENOMEM;
			if (a + ov[0] > pos)
				rc = span_push(&w->sb, n_out, &w->cap_sb, pos,
					       a + ov[0]);
			if (!rc)
				rc = span_push(&w->sb, n_out, &w->cap_sb,
					       a + ov[0], a + ov[1]);
			pos = a + ov[1];
		}
		if (!rc && pos < b)
			rc = span_push(&w->sb, n_out, &w->cap_sb, pos, b);
	}
	return rc;
}

/* pretokenize - the words of s[0..n) in w->sa[0..*n_words). */
static int pretokenize(struct work *w, const char *s, size_t n,
		       size_t *n_words)
{
	size_t n_in = 0;
	int rc;

	if ((rc = span_push(&w->sa, &n_in, &w->cap_sa, 0, n)))
		return rc;
	for (int i = 0; i < w->t->n_re; i++) {
		struct span *tmp;
		size_t cap;

		if ((rc = regex_split(w, w->t->re[i], s, n_in, &n_in)))
			return rc;
		tmp = w->sa, w->sa = w->sb, w->sb = tmp;
		cap = w->cap_sa, w->cap_sa = w->cap_sb, w->cap_sb = cap;
	}
	*n_words = n_in;
	return 0;
}

/*
 * sanitize - for the regexes, s with each byte that is not valid UTF-8
 * replaced by U+FFFD, in w->buf; for the words, s with only the bad bytes
 * that have no symbol in the vocabulary so replaced, in w->wbuf; w->map
 * takes offsets of the first to the second.
 */
static int sanitize(struct work *w, const char *s, size_t n, size_t *out_n)
{
	size_t o = 0, q = 0;
	int bad;

	if (n > (SIZE_MAX - 1) / 3 ||
	    grow((void **)&w->buf, &w->cap_buf, 3 * n, 1) ||
	    grow((void **)&w->wbuf, &w->cap_wbuf, 3 * n, 1) ||
	    grow((void **)&w->map, &w->cap_map, 3 * n + 1, sizeof(size_t)))
		return -ENOMEM;
	for (size_t i = 0; i < n;) {
		int l = utf8_check((const uint8_t *)s + i, n - i, &bad);
		int keep = w->t->byte_sym[(uint8_t)s[i]] >= 0;

		if (l <= 0) {
			memcpy(w->buf + o, "\xef\xbf\xbd", 3);
			for (int k = 0; k < 3; k++)
				w->map[o + k] = keep ? q : q + (size_t)k;
			if (keep)
				w->wbuf[q++] = s[i];
			else
				memcpy(w->wbuf + q, "\xef\xbf\xbd", 3), q += 3;
			o += 3;
			i++;
			continue;
		}
		for (int k = 0; k < l; k++) {
			w->buf[o] = w->wbuf[q] = s[i + (size_t)k];
			w->map[o++] = q++;
		}
		i += (size_t)l;
	}
	w->map[o] = q;
	*out_n = o;
	return 0;
}

/*
 * Invalid UTF-8 is cut as if each bad byte were U+FFFD; the words keep the
 * bad bytes themselves where the vocabulary can spell them.  Such words
 * live in a buffer the next fragment reuses, so they are not cached.
 */
static int bpe_fragment(struct work *w, const char *s, size_t n)
{
	const char *subj = s, *words = s;
	size_t sn = n, n_words;
	int mapped = 0, rc;

	if (!utf8_valid((const uint8_t *)s, n)) {
		if ((rc = sanitize(w, s, n, &sn)))
			return rc;
		subj = w->buf;
		words = w->wbuf;
		mapped = 1;
	}
	if ((rc = pretokenize(w, subj, sn, &n_words)))
		return rc;
	w->no_cache = mapped;
	for (size_t i = 0; i < n_words && !rc; i++) {
		size_t a = w->sa[i].a, b = w->sa[i].b;

		if (mapped) {
			a = w->map[a];
			b = w->map[b];
		}
		rc = bpe_word(w, words + a, b - a);
	}
	w->no_cache = 0;
	return rc;
}

/* ---- SentencePiece BPE ---- */

/* spm_escape - optional leading space, then s, spaces as U+2581. */
static int spm_escape(struct work *w, const char *s, size_t n, int prefix,
		      size_t *out_n)
{
	size_t o = 0;

	if (n > SIZE_MAX / 3 - 3 ||
	    grow((void **)&w->buf, &w->cap_buf, 3 * n + 3, 1))
		return -ENOMEM;
	if (prefix) {
		memcpy(w->buf, "\xe2\x96\x81", 3);
		o = 3;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(w->buf + o, "\xe2\x96\x81", 3);
			o += 3;
		} else {
			w->buf[o++] = s[i];
		}
	}
	*out_n = o;
	return 0;
}

static int spm_try(struct work *w, int32_t l, int32_t r)
{
	struct sym *s = w->sym;
	size_t size;
	int32_t id;

	if (l < 0 || r < 0)
		return 0;
	size = s[l].len + s[r].len;
	id = real_token(w->t, w->buf + s[l].start, size);
	if (id < 0)
		return 0;
	return heap_push(w, (struct cand){ .pri = w->t->score[id],
					   .left = l, .right = r,
					   .size = size });
}

/* Split into characters, as llama.cpp: length from the lead byte. */
static int spm_symbols(struct work *w, size_t n, int32_t *n_sym)
{
	static const uint8_t len_of[16] = { 1, 1, 1, 1, 1, 1, 1, 1,
					    1, 1, 1, 1, 2, 2, 3, 4 };
	int32_t k = 0;
	int rc;

	if ((rc = syms_init(w, n)))
		return rc;
	for (size_t i = 0; i < n; k++) {
		size_t l = len_of[(uint8_t)w->buf[i] >> 4];

		if (l > n - i)
			l = n - i;
		w->sym[k] = (struct sym){ .id = -1, .prev = k - 1,
					  .next = i + l < n ? k + 1 : -1,
					  .start = i, .len = l };
		i += l;
	}
	*n_sym = k;
	return 0;
}

static int spm_emit(struct work *w, const struct sym *s)
{
	const struct pg_tokenizer *t = w->t;
	int32_t id = real_token(t, w->buf + s->start, s->len);

	if (id >= 0) {
		emit(w->out, id);
		return 0;
	}
	for (size_t i = 0; i < s->len; i++) {
		id = t->byte_tok[(uint8_t)w->buf[s->start + i]];
		if (id < 0)
			id = t->unk;
		if (id >= 0)
			emit(w->out, id);
	}
	return 0;
}

static int spm_fragment(struct work *w, const char *text, size_t n,
			int prefix)
{
	struct sym *s;
	size_t len;
	int32_t n_sym;
	int rc;

	if ((rc = spm_escape(w, text, n, prefix, &len)) ||
	    (rc = spm_symbols(w, len, &n_sym)))
		return rc;
	s = w->sym;
	for (int32_t i = 1; i < n_sym && !rc; i++)
		rc = spm_try(w, i - 1, i);
	while (w->n_heap && !rc) {
		struct cand c = heap_pop(w);
		int32_t l = c.left, r = c.right;

		if (!s[l].len || !s[r].len || s[l].len + s[r].len != c.size)
			continue;
		sym_absorb(s, l, r);
		rc = spm_try(w, s[l].prev, l);
		if (!rc)
			rc = spm_try(w, l, s[l].next);
	}
	for (int32_t i = 0; n_sym && i >= 0 && !rc; i = s[i].next)
		rc = spm_emit(w, &s[i]);
	return rc;
}

/* ---- special tokens ---- */

static int frag_push(struct frag **v, size_t *n, size_t *cap,
		     struct frag f)
{
	if (grow((void **)v, cap, *n + 1, sizeof(f)))
		return -ENOMEM;
	(*v)[(*n)++] = f;
	return 0;
}

/* is_space - C's isspace() in the "C" locale, which llama.cpp strips. */
static int is_space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* all_set - whether n bytes of mark are all non-zero. */
static int all_set(const uint8_t *mark, size_t n)
{
	while (n--)
		if (!*mark++)
			return 0;
	return 1;
}

/*
 * split_on - cut every text fragment of in[] at each occurrence of s that
 * lies wholly where ok is set (ok NULL: at each occurrence); with rstrip,
 * the text after an occurrence loses its leading white space.
 */
static int split_on(const char *text, const struct frag *in, size_t n_in,
		    const char *s, size_t sl, int32_t id, int rstrip,
		    const uint8_t *ok, struct frag **out, size_t *n_out,
		    size_t *cap)
{
	int rc = 0;

	*n_out = 0;
	for (size_t k = 0; k < n_in && !rc; k++) {
		size_t off = in[k].off, len = in[k].len, from = 0;
		const char *m;

		while (in[k].id < 0 && !rc &&
		       (m = memmem(text + off + from, len - from, s, sl))) {
			size_t left = (size_t)(m - text) - off;

			if (ok && !all_set(ok + (m - text), sl)) {
				from = left + 1;	/* text here */
				continue;
			}
			if (left)
				rc = frag_push(out, n_out, cap,
					       (struct frag){ off, left, -1 });
			if (!rc)
				rc = frag_push(out, n_out, cap,
					       (struct frag){ 0, 0, id });
			off += left + sl;
			len -= left + sl;
			from = 0;
			while (rstrip && len && is_space(text[off]))
				off++, len--;
		}
		if (!rc && (in[k].id >= 0 || len))
			rc = frag_push(out, n_out, cap, in[k].id >= 0 ? in[k] :
				       (struct frag){ off, len, -1 });
	}
	return rc;
}

/*
 * partition - llama.cpp's tokenizer_st_partition: for each special token,
 * longest first, split the remaining text at its occurrences.  Control and
 * unknown tokens count with parse_special, else only where special_ok
 * marks all their bytes (NULL: nowhere); user-defined ones always.
 */
static int partition(const struct pg_tokenizer *t, const char *text,
		     size_t len, int parse_special, const uint8_t *special_ok,
		     struct frag **out, size_t *n_out)
{
	struct frag *a = NULL, *b = NULL, *tmp;
	size_t n_a = 0, cap_a = 0, n_b, cap_b = 0, cap;
	uint8_t seen[256] = { 0 };
	int rc = 0, plain;
	int32_t n;

	if (len && (rc = frag_push(&a, &n_a, &cap_a,
				   (struct frag){ 0, len, -1 })))
		goto out;
	for (size_t i = 0; i < len; i++)
		seen[(uint8_t)text[i]] = 1;
	/* plain text: only the user-defined tokens can split it */
	plain = !parse_special && !special_ok;
	n = plain ? t->n_plain : t->n_special;
	for (int32_t j = 0; j < n && n_a && !rc; j++) {
		int32_t i = plain ? t->special_plain[j] : j;
		int32_t id = t->special[i];
		size_t sl;
		const char *s;
		const uint8_t *ok = NULL;

		if (!seen[t->special_first[i]])
			continue;	/* cannot occur */
		s = str_at(&t->str, id, &sl);

		if (!parse_special && (t->attr[id] & (TA_CONTROL | TA_UNKNOWN))) {
			if (!special_ok)
				continue;
			ok = special_ok;
		}
		if (!sl || !memmem(text, len, s, sl))
			continue;
		rc = split_on(text, a, n_a, s, sl, id,
			      !!(t->attr[id] & TA_RSTRIP), ok, &b, &n_b, &cap_b);
		tmp = a, a = b, b = tmp;
		cap = cap_a, cap_a = cap_b, cap_b = cap;
		n_a = n_b;
	}
out:
	free(b);
	if (rc) {
		free(a);
		return rc;
	}
	*out = a;
	*n_out = n_a;
	return 0;
}

static void work_free(struct work *w)
{
	free(w->sym);
	free(w->heap);
	free(w->sa);
	free(w->sb);
	free(w->pool);
	free(w->cache);
	free(w->buf);
	free(w->wbuf);
	free(w->map);
	pcre2_match_data_free(w->md);
}

static int run_fragments(struct work *w, const char *text,
			 const struct frag *fr, size_t n_fr)
{
	int prev_special = 1, rc = 0;

	for (size_t i = 0; i < n_fr && !rc; i++) {
		if (fr[i].id >= 0) {
			emit(w->out, fr[i].id);
			prev_special = 1;
			continue;
		}
		if (w->t->model == MODEL_BPE)
			rc = bpe_fragment(w, text + fr[i].off, fr[i].len);
		else
			rc = spm_fragment(w, text + fr[i].off, fr[i].len,
					  w->t->add_space_prefix &&
					  prev_special);
		prev_special = 0;
	}
	return rc;
}

int64_t pg_tokenize_marked(const struct pg_tokenizer *t, const char *text,
			   size_t len, int add_bos, int parse_special,
			   const uint8_t *special_ok, int32_t *out,
			   int64_t max_out)
{
	struct sink sink = { out, out && max_out > 0 ? max_out : 0, 0 };
	struct work w = { .t = t, .out = &sink };
	struct frag *fr = NULL;
	size_t n_fr = 0;
	int rc;

	if (!t || (!text && len))
		return -EINVAL;
	if (add_bos && t->add_bos && t->bos >= 0)
		emit(&sink, t->bos);
	if ((rc = partition(t, text, len, parse_special, special_ok, &fr,
			    &n_fr)))
		return rc;
	w.md = pcre2_match_data_create(1, NULL);
	rc = w.md ? run_fragments(&w, text, fr, n_fr) : -ENOMEM;
	work_free(&w);
	free(fr);
	return rc ? rc : sink.n;
}

int64_t pg_tokenize(const struct pg_tokenizer *t, const char *text,
		    size_t len, int add_bos, int parse_special, int32_t *out,
		    int64_t max_out)
{
	return pg_tokenize_marked(t, text, len, add_bos, parse_special, NULL,
				  out, max_out);
}

/* ---- decoding ---- */

int pg_token_to_piece(const struct pg_tokenizer *t, int32_t id, int special,
		      char *buf, size_t cap)
{
	size_t n;

	if (!t || id < 0 || id >= t->n_vocab)
		return -EINVAL;
	if (!special && (t->attr[id] & (TA_CONTROL | TA_UNKNOWN)))
		return 0;
	n = t->piece_off[id + 1] - t->piece_off[id];
	if (buf && cap)
		memcpy(buf, t->piece + t->piece_off[id], n < cap ? n : cap);
	return (int)n;
}

/*
 * utf8_emit - write the valid UTF-8 of in[0..n) to out (NULL: only count),
 * each maximal invalid part as U+FFFD, stopping before a valid but
 * incomplete tail; returns the output length, *used the bytes consumed.
 */
static size_t utf8_emit(const uint8_t *in, size_t n, char *out, size_t *used)
{
	size_t i = 0, o = 0;
	int bad;

	while (i < n) {
		int l = utf8_check(in + i, n - i, &bad);

		if (l < 0)
			break;
		if (l == 0) {
			if (out)
				memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i += (size_t)bad;
			continue;
		}
		if (out)
			memcpy(out + o, in + i, (size_t)l);
		o += (size_t)l;
		i += (size_t)l;
	}
	*used = i;
	return o;
}

int pg_detok_push(const struct pg_tokenizer *t, struct pg_detok_stream *s,
		  int32_t id, int special, char *buf, size_t cap)
{
	uint8_t stack[512], *in = stack;
	size_t n, need, used;
	int len, rc;

	len = pg_token_to_piece(t, id, special, NULL, 0);
	if (len < 0)
		return len;
	n = (size_t)s->n_tail + (size_t)len;
	if (n > sizeof(stack) && !(in = malloc(n)))
		return -ENOMEM;
	memcpy(in, s->tail, (size_t)s->n_tail);
	pg_token_to_piece(t, id, special, (char *)in + s->n_tail, (size_t)len);
	need = utf8_emit(in, n, NULL, &used);
	if (need > cap || need > INT32_MAX) {
		rc = -ENOSPC;
		goto out;
	}
	utf8_emit(in, n, buf, &used);
	s->n_tail = (int)(n - used);
	memcpy(s->tail, in + used, (size_t)s->n_tail);
	rc = (int)need;
out:
	if (in != stack)
		free(in);
	return rc;
}

int pg_detok_flush(struct pg_detok_stream *s, char *buf, size_t cap)
{
	if (!s->n_tail)
		return 0;
	if (cap < 3)
		return -ENOSPC;
	memcpy(buf, "\xef\xbf\xbd", 3);
	s->n_tail = 0;
	return 3;
}
