/*
 * tokenizer.h - text to token ids and back, from the vocabulary a GGUF file
 * carries: byte-level BPE (GPT-2 style, with the pre-tokenizer the file
 * names, e.g. "smollm", "llama-bpe") and SentencePiece-style BPE ("llama").
 *
 * A tokenizer is immutable after pg_tokenizer_load() and may be shared by
 * threads.  It holds no pointer into the GGUF mapping, so the file may be
 * closed after loading.
 */
#ifndef PAGODA_TOKENIZER_H
#define PAGODA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct pg_tokenizer;

/*
 * pg_tokenizer_load - build the tokenizer from the tokenizer.ggml.* keys of
 * f.  Returns 0, or -EINVAL (missing or inconsistent keys, unknown model or
 * pre-tokenizer) / -ENOMEM with a message in err naming the key and what
 * was expected.
 */
int pg_tokenizer_load(const struct gguf_file *f, struct pg_tokenizer **out,
		      char *err, size_t err_len);

/* pg_tokenizer_free - free; NULL is allowed. */
void pg_tokenizer_free(struct pg_tokenizer *t);

/* pg_tokenizer_n_vocab - number of tokens. */
int pg_tokenizer_n_vocab(const struct pg_tokenizer *t);

/* Special ids; -1 when the vocabulary has none. */
int32_t pg_tokenizer_bos(const struct pg_tokenizer *t);
int32_t pg_tokenizer_eos(const struct pg_tokenizer *t);

/* pg_tokenizer_add_bos - whether prompts start with BOS (the file's flag). */
int pg_tokenizer_add_bos(const struct pg_tokenizer *t);

/*
 * pg_tokenizer_is_eog - whether id ends generation (EOS, EOT, <|im_end|>,
 * <|eot_id|> and the like).
 */
int pg_tokenizer_is_eog(const struct pg_tokenizer *t, int32_t id);

/*
 * pg_tokenize - tokenise len bytes of text (need not be NUL-terminated).
 * add_bos: prepend BOS when the model wants it.  parse_special: recognise
 * control and user-defined tokens written in the text (e.g. "<|im_start|>")
 * as single tokens; otherwise they are plain text.  Writes at most max_out
 * ids to out and returns the total number of tokens (which may exceed
 * max_out: call again with a larger buffer), or -ENOMEM.  Bytes that are
 * not valid UTF-8 are kept as themselves where the vocabulary can spell
 * them, so that detokenising gives the input back (llama.cpp replaces each
 * with U+FFFD first; on valid UTF-8 the two agree).
 */
int64_t pg_tokenize(const struct pg_tokenizer *t, const char *text,
		    size_t len, int add_bos, int parse_special, int32_t *out,
		    int64_t max_out);

/*
 * pg_tokenize_marked - pg_tokenize(), except that where parse_special is 0
 * a control token is still recognised where special_ok (len bytes, or
 * NULL: nowhere) is non-zero on every byte of it: the markers a chat
 * template wrote, while the messages' content stays text (chat.c).
 */
int64_t pg_tokenize_marked(const struct pg_tokenizer *t, const char *text,
			   size_t len, int add_bos, int parse_special,
			   const uint8_t *special_ok, int32_t *out,
			   int64_t max_out);

/*
 * pg_token_to_piece - the bytes token id stands for (byte-level symbols
 * mapped back to bytes, "▁" to space for SentencePiece).  Control tokens
 * give their text only when special is set, else nothing.  Writes at most
 * cap bytes (no NUL) and returns the full length, or -EINVAL for an id out
 * of range.
 */
int pg_token_to_piece(const struct pg_tokenizer *t, int32_t id, int special,
		      char *buf, size_t cap);

/*
 * Streaming decode: pieces may split a UTF-8 character across tokens; the
 * stream holds back an incomplete tail until it is completed.
 */
struct pg_detok_stream {
	char tail[8];
	int n_tail;
};

/*
 * pg_detok_push - append token id to the stream and write the newly
 * complete text (valid UTF-8; a sequence that can never complete is replaced
 * by U+FFFD) to buf.  Returns the bytes written, or -ENOSPC when cap is too
 * small (nothing consumed; 64 bytes more than the longest piece always
 * suffices), -EINVAL for a bad id.
 */
int pg_detok_push(const struct pg_tokenizer *t, struct pg_detok_stream *s,
		  int32_t id, int special, char *buf, size_t cap);

/* pg_detok_flush - write what the stream still holds (as U+FFFD). */
int pg_detok_flush(struct pg_detok_stream *s, char *buf, size_t cap);

#endif
