/*
 * chat.c - chat messages to a prompt in ChatML, Llama 3 or Llama 2 form.
 *
 * The format is recognised from markers in the model's Jinja template and
 * rendered natively, the way the reference templates (and llama.cpp's
 * built-in renderers) do.  It is not a Jinja engine: templates that are none
 * of these three formats are not recognised.  BOS is left to the tokenizer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

/* A growing NUL-terminated string. */
struct sbuf {
	char *p;
	size_t len, cap;
	int err;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	size_t cap = b->cap ? b->cap : 256;
	char *q;

	if (b->err)
		return;
	while (cap < b->len + n + 1)
		cap *= 2;
	if (cap != b->cap) {
		q = realloc(b->p, cap);
		if (!q) {
			b->err = -ENOMEM;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void sb_puts(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

/* sb_trimmed - s without leading and trailing whitespace (Jinja's trim). */
static void sb_trimmed(struct sbuf *b, const char *s)
{
	size_t n = strlen(s);

	while (n && is_space(*s))
		s++, n--;
	while (n && is_space(s[n - 1]))
		n--;
	sb_add(b, s, n);
}

static int role_in(const char *role, const char *const *roles)
{
	for (; *roles; roles++)
		if (!strcmp(role, *roles))
			return 1;
	return 0;
}

static int check_roles(const struct pg_chat_msg *msgs, int n,
		       const char *const *roles)
{
	for (int i = 0; i < n; i++)
		if (!msgs[i].role || !msgs[i].content ||
		    !role_in(msgs[i].role, roles))
			return -EINVAL;
	return 0;
}

static int has_str(const char *s, size_t n, const char *needle)
{
	return memmem(s, n, needle, strlen(needle)) != NULL;
}

int pg_chat_detect(const char *tmpl, size_t len)
{
	if (!tmpl || !len)
		return PG_CHAT_CHATML;
	if (has_str(tmpl, len, "<|im_start|>"))
		return PG_CHAT_CHATML;
	if (has_str(tmpl, len, "<|start_header_id|>") &&
	    has_str(tmpl, len, "<|end_header_id|>"))
		return PG_CHAT_LLAMA3;
	if (has_str(tmpl, len, "[INST]"))
		return PG_CHAT_LLAMA2;
	return -1;
}

char *pg_chat_default_system(const char *tmpl, size_t len)
{
	static const char open[] = "<|im_start|>system\n";
	const char *p, *end, *start;

	if (!tmpl)
		return NULL;
	p = memmem(tmpl, len, open, sizeof(open) - 1);
	if (!p)
		return NULL;
	start = p + sizeof(open) - 1;
	end = memmem(start, len - (size_t)(start - tmpl), "<|im_end|>", 10);
	/* a literal only: an expression or a quote means the text is computed */
	if (!end || end == start || memchr(start, '{', (size_t)(end - start)) ||
	    memchr(start, '\'', (size_t)(end - start)))
		return NULL;
	return strndup(start, (size_t)(end - start));
}

const char *pg_chat_format_name(enum pg_chat_format fmt)
{
	switch (fmt) {
	case PG_CHAT_CHATML: return "chatml";
	case PG_CHAT_LLAMA3: return "llama3";
	case PG_CHAT_LLAMA2: return "llama2";
	}
	return "unknown";
}

/* <|im_start|>role\ncontent<|im_end|>\n per message. */
static void chatml_turn(struct sbuf *b, const char *role, const char *content)
{
	sb_puts(b, "<|im_start|>");
	sb_puts(b, role);
	sb_puts(b, "\n");
	sb_puts(b, content);
	sb_puts(b, "<|im_end|>\n");
}

static int render_chatml(struct sbuf *b, const struct pg_chat_msg *m, int n,
			 int add_assistant, const char *dflt)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     "tool", NULL };

	if (check_roles(m, n, roles))
		return -EINVAL;
	if (dflt && (n == 0 || strcmp(m[0].role, "system")))
		chatml_turn(b, "system", dflt);
	for (int i = 0; i < n; i++)
		chatml_turn(b, m[i].role, m[i].content);
	if (add_assistant)
		sb_puts(b, "<|im_start|>assistant\n");
	return 0;
}

/* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, trimmed. */
static void llama3_turn(struct sbuf *b, const char *role, const char *content)
{
	sb_puts(b, "<|start_header_id|>");
	sb_puts(b, role);
	sb_puts(b, "<|end_header_id|>\n\n");
	sb_trimmed(b, content);
	sb_puts(b, "<|eot_id|>");
}

static int render_llama3(struct sbuf *b, const struct pg_chat_msg *m, int n,
			 int add_assistant, const char *dflt)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     "ipython", "tool", NULL };

	if (check_roles(m, n, roles))
		return -EINVAL;
	if (dflt && (n == 0 || strcmp(m[0].role, "system")))
		llama3_turn(b, "system", dflt);
	for (int i = 0; i < n; i++)
		llama3_turn(b, m[i].role, m[i].content);
	if (add_assistant)
		sb_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return 0;
}

/*
 * llama2_user - "[INST] " + the stripped content, with the system message
 * in front of it when given (the reference strips the two together).
 */
static void llama2_user(struct sbuf *b, const char *sys, const char *content,
			int first)
{
	struct sbuf c = { 0 };

	if (sys) {
		sb_puts(&c, "<<SYS>>\n");
		sb_puts(&c, sys);
		sb_puts(&c, "\n<</SYS>>\n\n");
	}
	sb_puts(&c, content);
	if (c.err)
		b->err = c.err;
	sb_puts(b, first ? "[INST] " : "<s>[INST] ");
	sb_trimmed(b, c.p);
	sb_puts(b, " [/INST]");
	free(c.p);
}

/*
 * Llama 2, as its reference template: the system message is folded into
 * the first user turn; every turn after the first opens with "<s>" (the
 * first BOS comes from the tokenizer).  A system message may only come
 * first.  The prompt ends with "[/INST]" whether or not add_assistant.
 */
static int render_llama2(struct sbuf *b, const struct pg_chat_msg *m, int n,
			 const char *dflt)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     NULL };
	const char *sys = dflt;
	int first = 1;

	if (check_roles(m, n, roles))
		return -EINVAL;
	if (n && !strcmp(m[0].role, "system")) {
		sys = m[0].content;
		m++, n--;
	}
	for (int i = 0; i < n; i++) {
		if (!strcmp(m[i].role, "system"))
			return -EINVAL;
		if (!strcmp(m[i].role, "assistant")) {
			sb_puts(b, " ");
			sb_trimmed(b, m[i].content);
			sb_puts(b, " </s>");
			continue;
		}
		llama2_user(b, first ? sys : NULL, m[i].content, first);
		first = 0;
	}
	return 0;
}

int pg_chat_render(enum pg_chat_format fmt, const struct pg_chat_msg *msgs,
		   int n, int add_assistant, const char *default_system,
		   char **out)
{
	struct sbuf b = { 0 };
	int rc;

	*out = NULL;
	if (n < 0 || (n && !msgs))
		return -EINVAL;
	sb_puts(&b, "");
	switch (fmt) {
	case PG_CHAT_CHATML:
		rc = render_chatml(&b, msgs, n, add_assistant, default_system);
		break;
	case PG_CHAT_LLAMA3:
		rc = render_llama3(&b, msgs, n, add_assistant, default_system);
		break;
	case PG_CHAT_LLAMA2:
		rc = render_llama2(&b, msgs, n, default_system);
		break;
	default:
		rc = -EINVAL;
	}
	if (!rc)
		rc = b.err;
	if (rc) {
		free(b.p);
		return rc;
	}
	*out = b.p;
	return 0;
}
