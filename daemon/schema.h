/*
 * schema.h - JSON Schema into a grammar: the text of a JSON Schema
 * translated into pagoda's GBNF (daemon/engine/grammar.h), so that a
 * sample drawn under the grammar is a JSON document valid under the
 * schema (structured output).
 *
 * What is supported, and what is refused, is documented in
 * pagoda-json-schema(7); in short:
 *
 *   - The grammar never accepts an instance the schema would reject.  It
 *     may accept less than the schema does (no whitespace beyond 20
 *     characters between two tokens, none before or after the document,
 *     properties in the schema's order, numbers of bounded length,
 *     canonical string escapes where a pattern or a key exclusion needs
 *     them): the translation narrows, never loosens.
 *   - A keyword that would change what is valid and that the translation
 *     cannot honour is an error that names it and says where it is, as a
 *     JSON pointer ("#/properties/age/multipleOf: ...").  Annotations
 *     (title, description, default, examples, ...) are ignored.
 *
 * Not a validator, and no network: only local references ("#",
 * "#/$defs/name", "#/definitions/name", any "#/json/pointer") resolve.
 * Thread-safe: no state outside a call.
 */
#ifndef PAGODA_DAEMON_SCHEMA_H
#define PAGODA_DAEMON_SCHEMA_H

#include <stddef.h>

/* The most grammar text a translation produces (the grammar engine's
   limit on its input, PG_GRAMMAR_MAX_TEXT). */
#define PG_SCHEMA_MAX_GBNF (1u << 20)

/* The most rules a translation produces, below the engine's 4096 so that
   its own rules (for repetitions and groups) fit beside them. */
#define PG_SCHEMA_MAX_RULES 2048

/* Nesting deeper than this (subschemas inside subschemas) is refused. */
#define PG_SCHEMA_MAX_DEPTH 64

/* The most whitespace characters (space, tab, newline) between tokens. */
#define PG_SCHEMA_MAX_WS 20

/*
 * pg_schema_to_gbnf - translate the JSON Schema in json (len bytes, UTF-8;
 * need not be NUL-terminated) into GBNF whose start rule is `root`.
 *
 * Returns 0 with *gbnf set to the grammar text (malloc'd, NUL-terminated;
 * the caller frees it); -EINVAL with a message in err (err_len bytes,
 * truncated to fit, always NUL-terminated when err_len > 0) when the text
 * is not JSON (jansson's line and column), is not a schema, or uses a
 * construct the translation cannot honour (the message names the
 * construct and its JSON pointer); -ENOMEM.  *gbnf is NULL on error.
 */
int pg_schema_to_gbnf(const char *json, size_t len, char **gbnf, char *err,
		      size_t err_len);

/*
 * pg_gbnf_any_json - GBNF text whose root is any JSON value, with the same
 * rules (whitespace, numbers, strings) as the translation's.  Static.
 */
const char *pg_gbnf_any_json(void);

/*
 * pg_gbnf_json_object - GBNF text whose root is any JSON object (what
 * OpenAI's response_format {"type": "json_object"} asks for).  Static.
 */
const char *pg_gbnf_json_object(void);

#endif
