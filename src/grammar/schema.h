/* schema.h — JSON Schema (a subset) and plain JSON compiled to grammar text in the notation of
 * grammar.h, for `response_format` and forced tool calls.
 *
 * The grammar constrains the JSON *text* a model writes. Every text it accepts is valid JSON
 * that validates against the schema; it does not accept every such text: properties come in
 * the schema's order, whitespace is bounded (between tokens at most one space, or a newline
 * and up to `max_indent` spaces; none before or after the value), enum/const values and
 * numbers in some forms are written one canonical way. docs/structured-outputs.md ("JSON
 * Schema support") lists the keywords compiled and the errors.
 *
 * Every rule a call appends is named `prefix` (the value's own rule) or `prefix-...`, so the
 * caller can put several compiled schemas into one grammar (one per tool), each with its own
 * prefix, and write `root` around them itself:
 *
 *     dy_schema_rules(params, "args", NULL, &g, &err);      // args ::= ..., args-1 ::= ...
 *     dy_buf_append_str(&g, "root ::= ");
 *     const char *head = "{\"name\": \"get_weather\", \"arguments\": ";
 *     dy_schema_literal(&g, head, strlen(head));
 *     dy_buf_append_str(&g, " args ");
 *     dy_schema_literal(&g, "}", 1);
 *     dy_buf_append_str(&g, "\n");
 *
 * A prefix is a letter followed by letters, digits and '-'. Nothing here keeps state between
 * calls; all functions are thread-safe. */
#ifndef DYAD_GRAMMAR_SCHEMA_H
#define DYAD_GRAMMAR_SCHEMA_H

#include "util/buf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    DY_SCHEMA_OK = 0,
    DY_SCHEMA_UNSUPPORTED,   /* a keyword (or a form of one) that is not compiled */
    DY_SCHEMA_INVALID,       /* a keyword's value has the wrong type or is impossible
                              * (e.g. "required": 3, an empty enum, minItems > maxItems, a
                              * $ref to nothing, a recursion that never ends) */
    DY_SCHEMA_TOO_DEEP,      /* nesting deeper than max_depth */
    DY_SCHEMA_TOO_LARGE,     /* the grammar would be longer than max_grammar_bytes */
    DY_SCHEMA_NOMEM,         /* memory ran out (a 500, not the client's fault) */
} dy_schema_status;

/* Why a schema was refused. `param` is where, as a path from the schema's root usable as the
 * OpenAI error's `param` once the caller prefixes it ("response_format.json_schema.schema."):
 * object keys joined by '.', array indices as "[i]", e.g. "properties.tags.items.minLength",
 * "anyOf[1].type", "$defs.node.properties.next"; "" for the schema itself. `message` is one
 * sentence for the error's `message` that names the keyword (and the limit, for TOO_DEEP and
 * TOO_LARGE). */
typedef struct {
    dy_schema_status status;
    char param[256];
    char message[256];
} dy_schema_error;

#define DY_SCHEMA_DEFAULT_MAX_DEPTH 32
#define DY_SCHEMA_DEFAULT_MAX_GRAMMAR_BYTES (1u << 20)
#define DY_SCHEMA_DEFAULT_MAX_INDENT 16

/* Limits and layout; a zero field (or a NULL pointer to the struct) takes the default. */
typedef struct {
    int max_depth;              /* subschemas nested inside each other (a $ref counts as one
                                 * level); past it: DY_SCHEMA_TOO_DEEP */
    size_t max_grammar_bytes;   /* bytes appended by one call; past it: DY_SCHEMA_TOO_LARGE */
    int max_indent;             /* spaces allowed after a newline between tokens */
} dy_schema_opts;

/* Appends the rules of values matching `schema` (a JSON object or a boolean `true`): the
 * value's rule is named `prefix`, its helpers `prefix-...`. No `root` unless prefix is "root".
 * `$ref`s resolve against `schema` as the document root. On failure fills *e, returns its
 * status and leaves `out` as it was before the call. */
dy_schema_status dy_schema_rules(const json_t *schema, const char *prefix,
                                 const dy_schema_opts *opts, dy_buf *out, dy_schema_error *e);

/* A whole grammar (its start rule `root`) for `response_format: {"type": "json_schema"}`:
 * dy_schema_rules with the prefix "root". */
dy_schema_status dy_schema_to_grammar(const json_t *schema, const dy_schema_opts *opts,
                                      dy_buf *out, dy_schema_error *e);

/* Appends the rules of any JSON object (`prefix`) with values of every JSON type, for
 * `response_format: {"type": "json_object"}` (prefix "root") or as a part of a larger grammar.
 * Strings are valid UTF-8 with RFC 8259 escapes (no \u0000 and no lone surrogate escape: the
 * frontend's own parser, jansson, refuses both). opts: only max_indent is read (NULL: the
 * default). Fails only when memory does (out->oom). */
void dy_json_object_rules(const char *prefix, const dy_schema_opts *opts, dy_buf *out);

/* Appends bytes s[0..n) as one grammar literal ("..." with the escapes grammar.h reads), for
 * callers that write rules around compiled ones (a tool call's fixed envelope). */
void dy_schema_literal(dy_buf *out, const char *s, size_t n);

#endif
