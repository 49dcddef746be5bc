/* toolcall.h — tool calls in a chat answer, in each chat-template family's syntax: the grammar
 * that forces a call (tool_choice "required" or a named function), the calls parsed back out
 * of the generated text, how much of a text being streamed is surely not part of a call, and
 * the calls' ids. Pure: no I/O, clocks or global state.
 *
 * The syntaxes (what the family's template writes for an assistant's calls):
 *   ChatML (Qwen, Hermes)  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one per call
 *   Llama 3.1              {"name": N, "parameters": {...}}, the whole answer
 *   Mistral v3/v7          [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...] — [TOOL_CALLS] is a
 *                          control token that detokenizes to nothing, so a bare array that
 *                          opens the answer is read as calls too
 *   every other family     the generic envelope: <tool_call>{"name": N, "arguments": {...}}</tool_call>
 * A call names one of the request's functions and its arguments are a JSON object; anything
 * else (malformed JSON, an unknown name, text after the calls) leaves the whole answer as
 * content. */
#ifndef DYAD_TOOLCALL_H
#define DYAD_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/front/chat_template.h"
#include "util/buf.h"

typedef struct {
    char *name;
    char *arguments; /* the arguments object as compact JSON */
} dy_toolcall;

typedef struct {
    size_t content_len; /* the text before the calls that is content (trailing whitespace
                         * dropped; 0: the answer has no content) */
    dy_toolcall *calls;
    int n_calls;
} dy_toolcall_found;

/* Appends the grammar of a forced answer: the family's envelope around one call (or, with
 * `parallel`, one or more; Llama 3.1's template takes one only) of tool `forced`, or of any of
 * the n tools when forced is -1. rules[i] are tool i's argument rules, named "tool<i>"
 * (schema.h's dy_schema_rules with that prefix); names[i] its name. call_token: Mistral's
 * [TOOL_CALLS] control token in the model's vocabulary, which the answer then starts with, or
 * -1 (a vocabulary without it: the answer starts at the array). Fails only when memory does
 * (out->oom). */
void dy_toolcall_grammar(dy_chat_family f, const char *const *names, const char *const *rules,
                         int n, int forced, bool parallel, int32_t call_token, dy_buf *out);

/* The calls in text[0..len) (a finished answer) to functions among names[0..n_names). Returns
 * the number of calls (0: the answer is all content, *out empty) or -1 if memory ran out. */
int dy_toolcall_parse(dy_chat_family f, const char *text, size_t len, const char *const *names,
                      int n_names, dy_toolcall_found *out);
void dy_toolcall_found_free(dy_toolcall_found *r);

/* Streaming: how many leading bytes of text[0..len) (an answer so far) are content whatever
 * follows — the text before anything that may be the start of a call, without trailing
 * whitespace. Never more than dy_toolcall_parse's content_len once the answer is finished. */
size_t dy_toolcall_content_prefix(dy_chat_family f, const char *text, size_t len);

/* "call_" and 24 hex digits, a function of the request's seed, the choice and the call. */
void dy_toolcall_id(uint64_t seed, int choice, int call, char out[32]);

#endif
