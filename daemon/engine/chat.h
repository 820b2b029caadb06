/*
 * chat.h - turning chat messages into a prompt with the model's template.
 *
 * GGUF files carry a Jinja template (tokenizer.chat_template); pagoda does
 * not run Jinja but recognises the common formats from it (ChatML as in
 * SmolLM2 and Qwen, Llama 3, Llama 2 / Mistral [INST]) and renders them
 * natively, defaulting to ChatML when the file has no template.
 */
#ifndef PAGODA_CHAT_H
#define PAGODA_CHAT_H

#include <stddef.h>

enum pg_chat_format {
	PG_CHAT_CHATML = 0,
	PG_CHAT_LLAMA3,
	PG_CHAT_LLAMA2,
};

struct pg_chat_msg {
	const char *role;	/* "system", "user", "assistant" */
	const char *content;
};

/*
 * pg_chat_detect - the format a template names; template may be NULL.
 * Returns -1 for a template it does not recognise.
 */
int pg_chat_detect(const char *tmpl, size_t len);

/*
 * pg_chat_default_system - the system message a ChatML template inserts
 * when the conversation has none (SmolLM2's and Qwen's templates carry one
 * as a literal "<|im_start|>system\n...<|im_end|>").  Returns a malloc'd
 * copy, or NULL when the template has none (or on ENOMEM).
 */
char *pg_chat_default_system(const char *tmpl, size_t len);

/* pg_chat_format_name - "chatml", "llama3", "llama2". */
const char *pg_chat_format_name(enum pg_chat_format fmt);

/*
 * pg_chat_render - render n messages; add_assistant appends the opening of
 * the assistant's turn.  default_system, when not NULL, is inserted as the
 * system message when the first message is not one (SmolLM2's template does
 * so).  Returns a malloc'd NUL-terminated string in *out and 0, or -ENOMEM,
 * or -EINVAL (unknown role for the format).
 */
int pg_chat_render(enum pg_chat_format fmt, const struct pg_chat_msg *msgs,
		   int n, int add_assistant, const char *default_system,
		   char **out);

#endif
