/*
 * grammar.h - constrained decoding: a context-free grammar, written in
 * pagoda's GBNF (the text form llama.cpp uses; pagoda-grammar(7) documents
 * it), compiled once, then matched against the tokens a sequence draws.
 *
 *   root   ::= "{" ws pair ("," ws pair)* "}"
 *   pair   ::= string ":" ws value
 *   string ::= "\"" [^"\\]* "\""
 *   ws     ::= [ \t\n]*
 *
 * The grammar is matched on Unicode code points (the tokens' bytes are
 * decoded as UTF-8; a token may end inside a character, which the next
 * token completes).  A sequence's position is a set of stacks (a
 * pushdown automaton, one stack per way the text so far can be parsed);
 * the text is accepted when one stack is empty.
 *
 * Three objects:
 *   - struct pg_grammar: compiled from text; immutable but for its mask
 *     cache.  One thread at a time (the engine's) may use a grammar and
 *     the states made from it.
 *   - struct pg_grammar_vocab: the vocabulary's token bytes, prepared
 *     once per model (a trie), shared by every grammar.
 *   - struct pg_grammar_state: one sequence's position.
 *
 * Masks.  pg_grammar_mask() gives the tokens that may come next as a bit
 * set; a state's mask depends only on its set of stacks and any pending
 * partial UTF-8 character, so masks are cached in the grammar by a hash of
 * those, and a step whose state was seen before costs one lookup and a
 * copy.  pg_grammar_allows() checks one token without a mask, for the
 * common case where the sampler's choice is allowed.
 *
 * Inside, the stack sets are interned and their transitions cached (a DFA
 * built lazily over bytes), so that a mask is one walk of the
 * vocabulary's byte trie and a token already seen from a state costs a
 * table lookup a byte.  Those caches and the masks are bounded
 * (pg_grammar_set_cache_limit); past the bound they are dropped and
 * rebuilt, which changes no answer.
 */
#ifndef PAGODA_GRAMMAR_H
#define PAGODA_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

struct pg_tokenizer;
struct pg_grammar;
struct pg_grammar_vocab;
struct pg_grammar_state;

/*
 * Limits: a grammar's text (bytes), its named rules (the rules the engine
 * makes for groups and repetitions do not count), a state's stacks (ways
 * to parse the text so far), one stack's depth (nested rules), and the
 * counts of a repetition x{m,n}.
 */
#define PG_GRAMMAR_MAX_TEXT (1u << 20)
#define PG_GRAMMAR_MAX_RULES 4096
#define PG_GRAMMAR_MAX_STACKS 4096
#define PG_GRAMMAR_MAX_DEPTH 4096
#define PG_GRAMMAR_MAX_REPEAT 100000

/* The caches' default bounds, per grammar (pg_grammar_set_cache_limit). */
#define PG_GRAMMAR_STATE_CACHE_BYTES (32u << 20)
#define PG_GRAMMAR_MASK_CACHE_BYTES (32u << 20)

/*
 * pg_grammar_compile - parse len bytes of GBNF text; the start rule is
 * `root`.  Returns 0 with *out set, -EINVAL with a message in err that
 * names the line and column and what is wrong ("line 3, column 7: rule
 * 'value' is used but never defined"; "left recursion in rule 'expr'"),
 * or -ENOMEM.  Every text is safe to give (untrusted input): malformed
 * text is refused, never crashes or loops, and so is a grammar that a
 * pushdown matcher could not run (left recursion, a repetition of
 * something that may match nothing, more than PG_GRAMMAR_MAX_STACKS
 * parses at the start).  err may be NULL when err_len is 0; *out is NULL
 * on error.
 */
int pg_grammar_compile(const char *text, size_t len, struct pg_grammar **out,
		       char *err, size_t err_len);

/* pg_grammar_free - free; NULL is allowed.  Its states must be freed first. */
void pg_grammar_free(struct pg_grammar *g);

/* pg_grammar_hash - a 64-bit hash of the grammar's text (cache keys). */
uint64_t pg_grammar_hash(const struct pg_grammar *g);

/*
 * pg_grammar_set_cache_limit - bound g's caches: about state_bytes for its
 * interned stack sets and their transitions (at least 64 KiB; a mask
 * computation may pass it by as much again before it falls back to
 * testing each token uncached), and mask_bytes for its masks (least
 * recently used dropped first; 0: no mask is kept).  Drops what is cached.
 */
void pg_grammar_set_cache_limit(struct pg_grammar *g, size_t state_bytes,
				size_t mask_bytes);

/*
 * pg_grammar_vocab_create - the tokenizer's vocabulary prepared for
 * matching: each token's bytes as pg_token_to_piece() gives them without
 * special text; control tokens match nothing, and the end-of-generation
 * tokens (pg_tokenizer_is_eog) are allowed exactly where the grammar has
 * accepted.  Returns 0 or -ENOMEM.
 */
int pg_grammar_vocab_create(const struct pg_tokenizer *t,
			    struct pg_grammar_vocab **out);

/*
 * pg_grammar_vocab_from_pieces - the same from n token strings (pieces[i],
 * lens[i] bytes; lens[i] 0: a token that matches nothing) and their
 * end-of-generation flags (eog may be NULL: none), for tests and tools.
 * Returns 0, -EINVAL (n < 0, a NULL piece of non-zero length) or -ENOMEM.
 */
int pg_grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens,
				 const uint8_t *eog, int n,
				 struct pg_grammar_vocab **out);

/* pg_grammar_vocab_free - free; NULL is allowed. */
void pg_grammar_vocab_free(struct pg_grammar_vocab *v);

/* pg_grammar_vocab_size - the number of tokens. */
int pg_grammar_vocab_size(const struct pg_grammar_vocab *v);

/*
 * pg_grammar_state_create - the start (nothing matched yet); NULL on
 * ENOMEM.  A state keeps its own copy of its stacks, so that the
 * grammar's caches may be dropped under it.
 */
struct pg_grammar_state *pg_grammar_state_create(struct pg_grammar *g);

/* pg_grammar_state_clone - a copy (a forked sample); NULL on ENOMEM. */
struct pg_grammar_state *pg_grammar_state_clone(const struct pg_grammar_state *s);

/* pg_grammar_state_free - free; NULL is allowed. */
void pg_grammar_state_free(struct pg_grammar_state *s);

/*
 * pg_grammar_allows - 1 when token id may come next (an end-of-generation
 * token: when the grammar has accepted), else 0: a token out of range,
 * one with no bytes, one whose acceptance would pass
 * PG_GRAMMAR_MAX_STACKS or PG_GRAMMAR_MAX_DEPTH, and any token when memory
 * runs out (pg_grammar_mask then says -ENOMEM).  A token that ends inside
 * a character is allowed when some completion of that character may come
 * next.  Changes nothing but g's caches: a few table lookups for a token
 * whose bytes were seen from this state before.
 */
int pg_grammar_allows(const struct pg_grammar_state *s,
		      const struct pg_grammar_vocab *v, int32_t id);

/*
 * pg_grammar_accept - advance s past token id.  Returns 0, or -EINVAL when
 * id is not allowed (s unchanged), -ENOMEM (s unchanged), -E2BIG when the
 * stacks would pass PG_GRAMMAR_MAX_STACKS (an ambiguous grammar) or one
 * would pass PG_GRAMMAR_MAX_DEPTH (s unchanged).  An end-of-generation
 * token is accepted where pg_grammar_done() and leaves s as it is.
 */
int pg_grammar_accept(struct pg_grammar_state *s,
		      const struct pg_grammar_vocab *v, int32_t id);

/* pg_grammar_done - 1 when the text so far is a complete sentence of the
   grammar (end-of-generation is allowed), else 0; 0 while a character is
   incomplete. */
int pg_grammar_done(const struct pg_grammar_state *s);

/* pg_grammar_dead - 1 when no continuation is possible at all: the text is
   complete and nothing may follow (the engine then ends the sample). */
int pg_grammar_dead(const struct pg_grammar_state *s);

/*
 * pg_grammar_mask - the tokens that may come next: bit (id % 32) of
 * bits[id / 32] set when allowed (bits holds (n_vocab + 31) / 32 words).
 * Returns the number of tokens allowed (0: none, not even
 * end-of-generation), or -ENOMEM.  Cached in the grammar by state; equal,
 * token by token, to pg_grammar_allows().  One walk of v's byte trie on a
 * miss, a copy of the words on a hit.
 */
int pg_grammar_mask(const struct pg_grammar_state *s,
		    const struct pg_grammar_vocab *v, uint32_t *bits);

/* Cache figures of a grammar, for tests and statistics. */
struct pg_grammar_stats {
	uint64_t mask_hits, mask_misses;
	size_t cached_masks;
	size_t cached_states;		/* interned stack sets */
	size_t cache_bytes;		/* both caches, about */
	uint64_t flushes;		/* times the state cache was dropped */
};

/* pg_grammar_stats - g's figures into st. */
void pg_grammar_stats(const struct pg_grammar *g, struct pg_grammar_stats *st);

#endif
