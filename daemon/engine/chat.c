/*
 * chat.c - chat messages to a prompt in ChatML, Llama 3, Llama 2, Gemma,
 * Phi-3, Qwen2.5 or Qwen3 form, and which tool-call format goes with it.
 *
 * The format is recognised from markers in the model's Jinja template and
 * rendered natively, the way the reference templates (and llama.cpp's
 * built-in renderers) do.  It is not a Jinja engine: templates that are none
 * of these formats are not recognised.  BOS is left to the tokenizer.
 * The renderer remembers which bytes the template wrote, so that a
 * message's content is tokenized as text: a "<|im_start|>" typed by a user
 * stays text, and only the template's own markers are control tokens.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/chat.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/tokenizer.h"

/*
 * A growing NUL-terminated string, and beside it one byte per character:
 * 1 where the template wrote it (its markers and role names), 0 where a
 * message's content did, so that only the template's own markers may be
 * read as special tokens (pg_chat_tokenize).
 */
struct sbuf {
	char *p;		/* (cap) the text */
	uint8_t *mark;		/* (cap) 1: the template's, 0: content */
	size_t len, cap;
	int err;
};

static void sb_add(struct sbuf *b, const char *s, size_t n, int tmpl)
{
	size_t cap = b->cap ? b->cap : 256;
	char *q;
	uint8_t *mq;

	if (b->err)
		return;
	while (cap < b->len + n + 1)
		cap *= 2;
	if (cap != b->cap) {
		q = realloc(b->p, cap);
		if (q)
			b->p = q;
		mq = q ? realloc(b->mark, cap) : NULL;
		if (!mq) {
			b->err = -ENOMEM;
			return;
		}
		b->mark = mq;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	memset(b->mark + b->len, tmpl ? 1 : 0, n);
	b->len += n;
	b->p[b->len] = 0;
}

/* sb_puts - the template's own text (markers, role names). */
static void sb_puts(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s), 1);
}

/* sb_content - a message's text. */
static void sb_content(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s), 0);
}

static void sb_free(struct sbuf *b)
{
	free(b->p);
	free(b->mark);
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

/*
 * sb_trimmed - n bytes of s (marks m, or NULL: all content) without
 * leading and trailing whitespace (Jinja's trim), marks kept.
 */
static void sb_trimmed_marked(struct sbuf *b, const char *s, const uint8_t *m,
			      size_t n)
{
	size_t i = 0;

	while (n && is_space(*s))
		s++, n--, i++;
	while (n && is_space(s[n - 1]))
		n--;
	for (size_t k = 0; k < n;) {
		size_t e = k + 1;
		int t = m ? m[i + k] : 0;

		while (e < n && (m ? m[i + e] : 0) == t)
			e++;
		sb_add(b, s + k, e - k, t);
		k = e;
	}
}

static void sb_trimmed(struct sbuf *b, const char *s)
{
	sb_trimmed_marked(b, s, NULL, strlen(s));
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
	/* Qwen3: ChatML whose assistant turns carry <think> blocks */
	if (has_str(tmpl, len, "<|im_start|>") && has_str(tmpl, len, "<think>"))
		return PG_CHAT_QWEN3;
	/* Qwen2.5: ChatML whose tool results go in <tool_response> */
	if (has_str(tmpl, len, "<|im_start|>") &&
	    has_str(tmpl, len, "<tool_response>"))
		return PG_CHAT_QWEN2;
	if (has_str(tmpl, len, "<|im_start|>"))
		return PG_CHAT_CHATML;
	if (has_str(tmpl, len, "<start_of_turn>"))
		return PG_CHAT_GEMMA;
	if (has_str(tmpl, len, "<|assistant|>") && has_str(tmpl, len, "<|end|>"))
		return PG_CHAT_PHI3;
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
	case PG_CHAT_GEMMA: return "gemma";
	case PG_CHAT_PHI3: return "phi3";
	case PG_CHAT_QWEN3: return "qwen3";
	case PG_CHAT_QWEN2: return "qwen2";
	case PG_CHAT_N_FORMATS: break;
	}
	return "unknown";
}

int pg_chat_format_parse(const char *name)
{
	for (int f = 0; f < PG_CHAT_N_FORMATS; f++)
		if (!strcmp(name, pg_chat_format_name((enum pg_chat_format)f)))
			return f;
	return -1;
}

enum pg_tool_format pg_chat_tool_format(enum pg_chat_format fmt,
					const char *tmpl, size_t len,
					int forced)
{
	if (!tmpl)
		len = 0;
	switch (fmt) {
	case PG_CHAT_QWEN2:
	case PG_CHAT_QWEN3:
		return PG_TOOLS_HERMES;
	case PG_CHAT_CHATML:
		/* Hermes-style fine-tunes of ChatML models */
		return len && has_str(tmpl, len, "<tool_call>") ? PG_TOOLS_HERMES :
								 PG_TOOLS_JSON;
	case PG_CHAT_LLAMA3:
		/* 3.0 was not trained on tool calls; 3.1's template has ipython */
		return forced || (len && has_str(tmpl, len, "ipython")) ?
		       PG_TOOLS_LLAMA3 : PG_TOOLS_JSON;
	default:
		return PG_TOOLS_JSON;
	}
}

const char *pg_tool_format_name(enum pg_tool_format tf)
{
	switch (tf) {
	case PG_TOOLS_JSON: return "json";
	case PG_TOOLS_HERMES: return "hermes";
	case PG_TOOLS_LLAMA3: return "llama3";
	}
	return "unknown";
}

/* <|im_start|>role\ncontent<|im_end|>\n per message. */
static void chatml_turn(struct sbuf *b, const char *role, const char *content)
{
	sb_puts(b, "<|im_start|>");
	sb_puts(b, role);
	sb_puts(b, "\n");
	sb_content(b, content);
	sb_puts(b, "<|im_end|>\n");
}

/*
 * Tool message i of n as Qwen2.5's and Qwen3's templates write it: a run
 * of tool results is one user turn, each result in <tool_response>.
 */
static void qwen_tool(struct sbuf *b, const struct pg_chat_msg *m, int n,
		      int i)
{
	if (i == 0 || strcmp(m[i - 1].role, "tool"))
		sb_puts(b, "<|im_start|>user");
	sb_puts(b, "\n<tool_response>\n");
	sb_content(b, m[i].content);
	sb_puts(b, "\n</tool_response>");
	if (i == n - 1 || strcmp(m[i + 1].role, "tool"))
		sb_puts(b, "<|im_end|>\n");
}

/* ChatML; qwen: tool results as Qwen2.5 writes them (qwen_tool), else a
   "tool" turn as generic ChatML templates (SmolLM2's) do. */
static int render_chatml(struct sbuf *b, const struct pg_chat_msg *m, int n,
			 int add_assistant, const char *dflt, int qwen)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     "tool", NULL };

	if (check_roles(m, n, roles))
		return -EINVAL;
	if (dflt && (n == 0 || strcmp(m[0].role, "system")))
		chatml_turn(b, "system", dflt);
	for (int i = 0; i < n; i++) {
		if (qwen && !strcmp(m[i].role, "tool"))
			qwen_tool(b, m, n, i);
		else
			chatml_turn(b, m[i].role, m[i].content);
	}
	if (add_assistant)
		sb_puts(b, "<|im_start|>assistant\n");
	return 0;
}

/*
 * <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, the
 * content trimmed but a tool's: Llama 3.1's template writes "tool" and
 * "ipython" messages as they are, under the header "ipython".
 */
static void llama3_turn(struct sbuf *b, const char *role, const char *content)
{
	int tool = !strcmp(role, "tool") || !strcmp(role, "ipython");

	sb_puts(b, "<|start_header_id|>");
	sb_puts(b, tool ? "ipython" : role);
	sb_puts(b, "<|end_header_id|>\n\n");
	if (tool)
		sb_content(b, content);
	else
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
		sb_content(&c, sys);
		sb_puts(&c, "\n<</SYS>>\n\n");
	}
	sb_content(&c, content);
	if (c.err && !b->err)
		b->err = c.err;
	sb_puts(b, first ? "[INST] " : "<s>[INST] ");
	if (!c.err)
		sb_trimmed_marked(b, c.p, c.mark, c.len);
	sb_puts(b, " [/INST]");
	sb_free(&c);
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

/*
 * Gemma, as llama.cpp renders it: "<start_of_turn>user\n" + trimmed content
 * + "<end_of_turn>\n" per turn, the assistant being "model"; Gemma has no
 * system turn, so system messages (each trimmed, joined) open the next user turn
 * followed by a blank line.  A system message that no user turn follows
 * gets a user turn of its own rather than being dropped.
 */
static void gemma_turn(struct sbuf *b, const char *role, const char *sys,
		       const char *content)
{
	sb_puts(b, "<start_of_turn>");
	sb_puts(b, role);
	sb_puts(b, "\n");
	if (sys) {
		sb_content(b, sys);
		sb_puts(b, "\n\n");
	}
	sb_trimmed(b, content);
	sb_puts(b, "<end_of_turn>\n");
}

static int render_gemma(struct sbuf *b, const struct pg_chat_msg *m, int n,
			int add_assistant, const char *dflt)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     NULL };
	struct sbuf sys = { 0 };
	int rc;

	if (check_roles(m, n, roles))
		return -EINVAL;
	if (dflt && (n == 0 || strcmp(m[0].role, "system")))
		sb_trimmed(&sys, dflt);
	for (int i = 0; i < n; i++) {
		if (!strcmp(m[i].role, "system")) {
			sb_trimmed(&sys, m[i].content);
			continue;
		}
		if (!strcmp(m[i].role, "assistant")) {
			gemma_turn(b, "model", NULL, m[i].content);
			continue;
		}
		gemma_turn(b, "user", sys.len ? sys.p : NULL, m[i].content);
		sys.len = 0;
	}
	if (sys.len)
		gemma_turn(b, "user", NULL, sys.p);
	if (add_assistant)
		sb_puts(b, "<start_of_turn>model\n");
	rc = sys.err;
	sb_free(&sys);
	return rc;
}

/* Phi-3: "<|role|>\n" + content + "<|end|>\n" per message. */
static int render_phi3(struct sbuf *b, const struct pg_chat_msg *m, int n,
		       int add_assistant, const char *dflt)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     NULL };

	if (check_roles(m, n, roles))
		return -EINVAL;
	for (int i = -1; i < n; i++) {
		const char *role = i < 0 ? "system" : m[i].role;
		const char *content = i < 0 ? dflt : m[i].content;

		if (i < 0 && (!dflt || (n && !strcmp(m[0].role, "system"))))
			continue;
		sb_puts(b, "<|");
		sb_puts(b, role);
		sb_puts(b, "|>\n");
		sb_content(b, content);
		sb_puts(b, "<|end|>\n");
	}
	if (add_assistant)
		sb_puts(b, "<|assistant|>\n");
	return 0;
}

/* nl_strip - drop s[0..n)'s leading (lead) and trailing (trail) newlines. */
static void nl_strip(const char **s, size_t *n, int lead, int trail)
{
	while (lead && *n && **s == '\n')
		(*s)++, (*n)--;
	while (trail && *n && (*s)[*n - 1] == '\n')
		(*n)--;
}

static const char *last_str(const char *s, size_t n, const char *needle)
{
	const char *p, *last = NULL;
	size_t k = strlen(needle);

	while ((p = memmem(s, n, needle, k))) {
		last = p;
		n -= (size_t)(p - s) + k;
		s = p + k;
	}
	return last;
}

/*
 * One Qwen3 assistant turn, as its template renders it: an answer that
 * carries "<think>...</think>" is split into the reasoning and the answer
 * after the last "</think>" (leading newlines dropped).  Turns up to the
 * last user message keep the answer only; later ones (the continued turn)
 * keep the reasoning in a <think> block, and the last message always has
 * one, empty when it reasoned nothing.
 */
static void qwen3_assistant(struct sbuf *b, const char *content, int late,
			    int last)
{
	size_t n = strlen(content), an = n, rn = 0;
	const char *ans = content, *rsn = "";
	const char *end = memmem(content, n, "</think>", 8);

	if (end) {
		const char *lend = last_str(content, n, "</think>");
		const char *open;

		ans = lend + 8;
		an = n - (size_t)(ans - content);
		nl_strip(&ans, &an, 1, 0);
		/* before the first </think>, after its last <think> */
		rsn = content;
		rn = (size_t)(end - content);
		nl_strip(&rsn, &rn, 0, 1);
		open = last_str(rsn, rn, "<think>");
		if (open) {
			rn -= (size_t)(open + 7 - rsn);
			rsn = open + 7;
		}
		nl_strip(&rsn, &rn, 1, 0);
	}
	sb_puts(b, "<|im_start|>assistant\n");
	if (late && (last || rn)) {
		nl_strip(&rsn, &rn, 1, 1);
		nl_strip(&ans, &an, 1, 0);
		sb_puts(b, "<think>\n");
		sb_add(b, rsn, rn, 0);
		sb_puts(b, "\n</think>\n\n");
	}
	sb_add(b, ans, an, 0);
	sb_puts(b, "<|im_end|>\n");
}

/*
 * Qwen3: ChatML, with the assistant's reasoning handled as qwen3_assistant
 * says and tool results as qwen_tool writes them.
 * The generation prompt is "<|im_start|>assistant\n" alone: the template's
 * default, thinking enabled (the empty "<think>\n\n</think>" block is only
 * for enable_thinking=false, which requests cannot set).
 */
static int render_qwen3(struct sbuf *b, const struct pg_chat_msg *m, int n,
			int add_assistant, const char *dflt)
{
	static const char *const roles[] = { "system", "user", "assistant",
					     "tool", NULL };
	int last_user = -1;

	if (check_roles(m, n, roles))
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (!strcmp(m[i].role, "user"))
			last_user = i;
	if (dflt && (n == 0 || strcmp(m[0].role, "system")))
		chatml_turn(b, "system", dflt);
	for (int i = 0; i < n; i++) {
		if (!strcmp(m[i].role, "assistant")) {
			qwen3_assistant(b, m[i].content, i > last_user,
					i == n - 1);
		} else if (!strcmp(m[i].role, "tool")) {
			qwen_tool(b, m, n, i);
		} else {
			chatml_turn(b, m[i].role, m[i].content);
		}
	}
	if (add_assistant)
		sb_puts(b, "<|im_start|>assistant\n");
	return 0;
}

static int is_tool(const struct pg_chat_msg *m)
{
	return m->role && m->content && !strcmp(m->role, "tool");
}

/*
 * For the formats without a tool turn (Llama 2, Gemma, Phi-3): the n
 * messages with each tool result made a user message whose content is
 * "<tool_response>\n" + its content + "\n</tool_response>", all of it
 * text, the way the Hermes convention shows results to a model.  *copy
 * gets a malloc'd array (its texts in the same block) when there is one
 * to rewrite, else NULL and msgs itself is returned.  NULL on ENOMEM.
 */
static const struct pg_chat_msg *tools_as_user(const struct pg_chat_msg *msgs,
					       int n, struct pg_chat_msg **copy)
{
	static const char open[] = "<tool_response>\n";
	static const char close[] = "\n</tool_response>";
	size_t bytes = sizeof(*msgs) * (size_t)n;
	int n_tools = 0;
	char *text;

	*copy = NULL;
	for (int i = 0; i < n; i++) {
		if (!is_tool(&msgs[i]))
			continue;
		bytes += sizeof(open) + sizeof(close) + strlen(msgs[i].content);
		n_tools++;
	}
	if (!n_tools)
		return msgs;
	*copy = malloc(bytes);
	if (!*copy)
		return NULL;
	memcpy(*copy, msgs, sizeof(*msgs) * (size_t)n);
	text = (char *)(*copy + n);
	for (int i = 0; i < n; i++) {
		if (!is_tool(&msgs[i]))
			continue;
		(*copy)[i].role = "user";
		(*copy)[i].content = text;
		text += sprintf(text, "%s%s%s", open, msgs[i].content, close) + 1;
	}
	return *copy;
}

/* render - the messages into b (text and marks); 0 or -errno, b freed. */
static int render(struct sbuf *b, enum pg_chat_format fmt,
		  const struct pg_chat_msg *msgs, int n, int add_assistant,
		  const char *default_system)
{
	struct pg_chat_msg *copy = NULL;
	int rc;

	if (n < 0 || (n && !msgs))
		return -EINVAL;
	if (fmt == PG_CHAT_LLAMA2 || fmt == PG_CHAT_GEMMA || fmt == PG_CHAT_PHI3) {
		msgs = tools_as_user(msgs, n, &copy);
		if (!msgs)
			return -ENOMEM;
	}
	sb_puts(b, "");
	switch (fmt) {
	case PG_CHAT_CHATML:
		rc = render_chatml(b, msgs, n, add_assistant, default_system, 0);
		break;
	case PG_CHAT_LLAMA3:
		rc = render_llama3(b, msgs, n, add_assistant, default_system);
		break;
	case PG_CHAT_LLAMA2:
		rc = render_llama2(b, msgs, n, default_system);
		break;
	case PG_CHAT_GEMMA:
		rc = render_gemma(b, msgs, n, add_assistant, default_system);
		break;
	case PG_CHAT_PHI3:
		rc = render_phi3(b, msgs, n, add_assistant, default_system);
		break;
	case PG_CHAT_QWEN3:
		rc = render_qwen3(b, msgs, n, add_assistant, default_system);
		break;
	case PG_CHAT_QWEN2:
		rc = render_chatml(b, msgs, n, add_assistant, default_system, 1);
		break;
	default:
		rc = -EINVAL;
	}
	free(copy);
	if (!rc)
		rc = b->err;
	if (rc)
		sb_free(b);
	return rc;
}

int pg_chat_render(enum pg_chat_format fmt, const struct pg_chat_msg *msgs,
		   int n, int add_assistant, const char *default_system,
		   char **out)
{
	struct sbuf b = { 0 };
	int rc;

	*out = NULL;
	rc = render(&b, fmt, msgs, n, add_assistant, default_system);
	if (rc)
		return rc;
	free(b.mark);
	*out = b.p;
	return 0;
}

int64_t pg_chat_tokenize(const struct pg_tokenizer *t, enum pg_chat_format fmt,
			 const struct pg_chat_msg *msgs, int n,
			 int add_assistant, const char *default_system,
			 int add_bos, int content_special, int32_t **ids)
{
	struct sbuf b = { 0 };
	int64_t cap, got;
	int rc;

	*ids = NULL;
	rc = render(&b, fmt, msgs, n, add_assistant, default_system);
	if (rc)
		return rc;
	cap = (int64_t)b.len + 1;	/* a token takes a byte at least; BOS */
	*ids = malloc(sizeof(**ids) * (size_t)cap);
	got = *ids ? pg_tokenize_marked(t, b.p, b.len, add_bos,
					content_special, b.mark, *ids, cap)
		   : -ENOMEM;
	sb_free(&b);
	if (got < 0 || got > cap) {
		free(*ids);
		*ids = NULL;
		return got < 0 ? got : -ENOMEM;
	}
	return got;
}

/*
 * Whether the vocabulary has marker as a token of its own (control or
 * user-defined): one token where special tokens are parsed, several where
 * the text is spelled.
 */
static int has_marker(const struct pg_tokenizer *tok, const char *marker)
{
	int32_t ids[64];
	size_t n = strlen(marker);

	return tok && pg_tokenize(tok, marker, n, 0, 1, ids, 64) == 1 &&
	       pg_tokenize(tok, marker, n, 0, 0, ids, 64) > 1;
}

/* No template: the format whose turn markers the vocabulary has. */
static enum pg_chat_format vocab_format(const struct pg_tokenizer *tok)
{
	static const struct { const char *marker; enum pg_chat_format fmt; } m[] = {
		{ "<start_of_turn>", PG_CHAT_GEMMA },
		{ "<|start_header_id|>", PG_CHAT_LLAMA3 },
		{ "<|assistant|>", PG_CHAT_PHI3 },
		{ "<|im_start|>", PG_CHAT_CHATML },
	};

	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
		if (has_marker(tok, m[i].marker))
			return m[i].fmt;
	return PG_CHAT_CHATML;
}

enum pg_chat_format pg_chat_choose(const char *tmpl, size_t len,
				   const struct pg_tokenizer *tok, char *warn,
				   size_t warn_len)
{
	int fmt = pg_chat_detect(tmpl, len);
	struct gguf_str s = { tmpl, len };
	char excerpt[176];

	if (warn_len)
		warn[0] = '\0';
	if (!tmpl || !len) {
		enum pg_chat_format v = vocab_format(tok);

		snprintf(warn, warn_len,
			 "the model has no chat template (tokenizer.chat_template; a base model?): chat requests are rendered in the %s format, %s; a model not trained for chat may not follow it: send text prompts instead",
			 pg_chat_format_name(v),
			 v == PG_CHAT_CHATML && !has_marker(tok, "<|im_start|>") ?
			 "the default, as its vocabulary has no turn markers" :
			 "whose turn markers its vocabulary has");
		return v;
	}
	if (fmt >= 0)
		return (enum pg_chat_format)fmt;
	snprintf(warn, warn_len,
		 "the model's chat template (tokenizer.chat_template, %zu bytes: \"%s\") is not one pagoda knows (ChatML, Qwen2.5, Qwen3, Llama 3, Llama 2 / Mistral [INST], Gemma, Phi-3); chat requests are rendered as ChatML instead, which this model may not follow: send text prompts in the model's own format instead",
		 len, gguf_str_quote(s, 40, excerpt, sizeof(excerpt)));
	return PG_CHAT_CHATML;
}
