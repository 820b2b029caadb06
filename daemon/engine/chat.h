/*
 * chat.h - turning chat messages into a prompt with the model's template.
 *
 * GGUF files carry a Jinja template (tokenizer.chat_template); pagoda does
 * not run Jinja but recognises the common formats from it (ChatML as in
 * SmolLM2, Qwen2.5's ChatML with <tool_response>, Qwen3's ChatML with
 * <think> blocks, Llama 3, Llama 2 / Mistral [INST], Gemma's
 * <start_of_turn>, Phi-3's <|user|>) and renders them natively, defaulting
 * to ChatML when the file has no template (and, with a warning, when it
 * has one that is none of these).  It also says how a model of each
 * format writes a tool call (pg_chat_tool_format), for the gateway that
 * parses them; it parses none itself.
 */
#ifndef PAGODA_CHAT_H
#define PAGODA_CHAT_H

#include <stddef.h>
#include <stdint.h>

struct pg_tokenizer;

enum pg_chat_format {
	PG_CHAT_CHATML = 0,
	PG_CHAT_LLAMA3,
	PG_CHAT_LLAMA2,
	PG_CHAT_GEMMA,		/* <start_of_turn>user ... <end_of_turn> */
	PG_CHAT_PHI3,		/* <|user|>\n ... <|end|>\n */
	PG_CHAT_QWEN3,		/* ChatML; <think> blocks in assistant turns */
	PG_CHAT_QWEN2,		/* ChatML; tool results in <tool_response> */
	PG_CHAT_N_FORMATS	/* the count, not a format */
};

/*
 * A message.  Every format takes "system", "user", "assistant" and "tool"
 * (a tool's result, rendered the way the model's template renders one:
 * see pg_chat_render); Llama 3 also takes "ipython", its own name for it.
 */
struct pg_chat_msg {
	const char *role;
	const char *content;
};

/*
 * How a model writes a call of one of the tools it was offered (the
 * gateway's to parse; the daemon only reports which):
 *   PG_TOOLS_JSON    pagoda's own convention, the gateway's: the model is
 *                    told in its prompt to answer with the JSON the
 *                    gateway documents, for models trained on no format;
 *   PG_TOOLS_HERMES  one or more blocks
 *                    <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
 *                    (Hermes, Qwen2.5, Qwen3);
 *   PG_TOOLS_LLAMA3  a bare {"name": ..., "parameters": {...}} object
 *                    (Llama 3.1's JSON tool calling).
 */
enum pg_tool_format {
	PG_TOOLS_JSON = 0,
	PG_TOOLS_HERMES,
	PG_TOOLS_LLAMA3,
};

/*
 * pg_chat_detect - the format a template names; template may be NULL.
 * Returns -1 for a template it does not recognise.
 */
int pg_chat_detect(const char *tmpl, size_t len);

/*
 * pg_chat_choose - the format chat requests use for template tmpl: the one
 * pg_chat_detect() recognises (warn is then ""), or, with a warning in
 * warn for the log, ChatML for a template it does not know (the warning
 * quotes the template's start).  A model without a template (tmpl NULL,
 * often a base model) gets the format whose turn markers its vocabulary
 * tok has as control tokens (Gemma's <start_of_turn>, Llama 3's headers,
 * Phi-3's <|assistant|>, ChatML's <|im_start|>; tok may be NULL), else
 * ChatML, and a warning that names it.  Never fails.
 */
enum pg_chat_format pg_chat_choose(const char *tmpl, size_t len,
				   const struct pg_tokenizer *tok, char *warn,
				   size_t warn_len);

/*
 * pg_chat_default_system - the system message a ChatML template inserts
 * when the conversation has none (SmolLM2's and Qwen's templates carry one
 * as a literal "<|im_start|>system\n...<|im_end|>").  Returns a malloc'd
 * copy, or NULL when the template has none (or on ENOMEM).
 */
char *pg_chat_default_system(const char *tmpl, size_t len);

/*
 * pg_chat_format_name - "chatml", "llama3", "llama2", "gemma", "phi3",
 * "qwen3", "qwen2".
 */
const char *pg_chat_format_name(enum pg_chat_format fmt);

/*
 * pg_chat_format_parse - the format pg_chat_format_name() calls name, or
 * -1 for a name that is none (pagodad --chat-format).
 */
int pg_chat_format_parse(const char *name);

/*
 * pg_chat_tool_format - how a model whose chat requests use format fmt
 * writes tool calls: Hermes blocks for Qwen2.5 and Qwen3 and for a ChatML
 * template that mentions <tool_call>; Llama 3's JSON for Llama 3 when its
 * template mentions "ipython" (3.1's tool role) or when the operator
 * chose the format (forced: the template text says nothing then); else
 * pagoda's own JSON.  tmpl may be NULL.
 */
enum pg_tool_format pg_chat_tool_format(enum pg_chat_format fmt,
					const char *tmpl, size_t len,
					int forced);

/* pg_tool_format_name - "json", "hermes", "llama3". */
const char *pg_tool_format_name(enum pg_tool_format tf);

/*
 * pg_chat_render - render n messages; add_assistant appends the opening of
 * the assistant's turn.  default_system, when not NULL, is inserted as the
 * system message when the first message is not one (SmolLM2's template does
 * so).  A "tool" message is rendered as the model's template renders a
 * tool's result: Qwen2.5 and Qwen3 put a run of them in one user turn,
 * each in "\n<tool_response>\n...\n</tool_response>"; Llama 3 gives it the
 * header "ipython", its content untrimmed (3.1's template); Llama 2, Gemma
 * and Phi-3, which have no tool turn, make it a user turn whose text is
 * "<tool_response>\n" + content + "\n</tool_response>"; ChatML keeps it a
 * turn of role "tool" (SmolLM2's generic template).  Returns a malloc'd NUL-terminated string in *out and 0, or -ENOMEM,
 * or -EINVAL (unknown role for the format).  The text is for showing:
 * tokenizing it with special tokens parsed would honour markers written
 * in the messages too; pg_chat_tokenize() does not.
 */
int pg_chat_render(enum pg_chat_format fmt, const struct pg_chat_msg *msgs,
		   int n, int add_assistant, const char *default_system,
		   char **out);

/*
 * pg_chat_tokenize - render n messages as pg_chat_render() does and
 * tokenize the result: the template's own markers (<|im_start|>, [INST],
 * <s> ...) are read as special tokens, each message's content (and the
 * default system message) as plain text, so that content cannot open a
 * turn of another role; with content_special, control tokens written in
 * content count too (the caller trusts it).  add_bos as pg_tokenize().
 * Returns the number of ids with a malloc'd array of them in *ids (the
 * caller frees it), or -EINVAL (unknown role) / -ENOMEM with *ids NULL.
 */
int64_t pg_chat_tokenize(const struct pg_tokenizer *t, enum pg_chat_format fmt,
			 const struct pg_chat_msg *msgs, int n,
			 int add_assistant, const char *default_system,
			 int add_bos, int content_special, int32_t **ids);

#endif
