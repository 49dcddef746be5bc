/* openai.h — the OpenAI-compatible API layer of `dyad serve`, without sockets, threads or
 * clocks: an HTTP request body becomes a validated dy_api_request, and generated text becomes
 * the response JSON (whole, or as SSE chunks). The HTTP frontend owns everything else.
 *
 * JSON is parsed and built with jansson. Every function here is pure: the response id and the
 * `created` time are passed in by the caller. docs/api.md documents the endpoints, parameters,
 * limits, extensions and error statuses that this file implements. */
#ifndef DYAD_OPENAI_H
#define DYAD_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"
#include "serve/front/chat_template.h"
#include "serve/wire/end.h"

typedef enum { DY_API_COMPLETIONS = 1, DY_API_CHAT = 2 } dy_api_kind;

/* ---- errors ---- */

/* An error response: its HTTP status and the fields of OpenAI's error object. An empty
 * param or code is written as null. */
typedef struct {
    int status;
    char message[256];
    char param[256]; /* a path into a schema can be long */
    char type[48];
    char code[48];
} dy_api_error;

/* Sets every field; fmt is printf-style (the message is truncated to fit). */
void dy_api_error_set(dy_api_error *e, int status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The statuses the server uses besides the 400s dy_api_parse produces (see docs/api.md). */
void dy_api_error_unauthorized(dy_api_error *e);                                   /* 401 */
void dy_api_error_model_not_found(dy_api_error *e, const char *model);            /* 404 */
void dy_api_error_route_not_found(dy_api_error *e, const char *method, const char *path); /* 404 */
void dy_api_error_method_not_allowed(dy_api_error *e, const char *method, const char *path); /* 405 */
void dy_api_error_too_large(dy_api_error *e, size_t limit);                       /* 413 */
void dy_api_error_queue_full(dy_api_error *e);                                    /* 429 */
void dy_api_error_unavailable(dy_api_error *e, const char *why);                  /* 503 */
void dy_api_error_internal(dy_api_error *e, const char *what);                    /* 500 */
/* {"error":{"message":...,"type":...,"param":...,"code":...}}, malloc'd; NULL if out of memory. */
char *dy_api_error_json(const dy_api_error *e);

/* ---- requests ---- */

typedef struct {
    size_t max_body_bytes; /* larger bodies are 413 (the HTTP layer checks Content-Length first) */
    int max_prompts;       /* prompts in one completions request */
    int max_n;             /* n and best_of */
    int max_sequences;     /* sequences one request may start: prompts x max(n, best_of)
                            * (dyad serve caps it at --max-queue) */
    int max_stop;          /* stop strings */
    int max_stop_len;      /* bytes per stop string */
    int max_context;       /* the model's context length, in tokens */
    int max_messages;      /* chat messages */
    int vocab_size;        /* token-id prompts must be below it; 0 = not checked */
    size_t max_schema_bytes; /* a response_format's JSON Schema, serialized compactly */
    size_t max_response_bytes; /* a whole (not streamed) answer, as dy_api_response_bound
                                * counts it; 0: no bound */
    int max_token_bytes;   /* the longest token's text in the vocabulary (0: assume 16) */
} dy_api_limits;

/* The defaults docs/api.md lists, for a model with `context` tokens of context. */
dy_api_limits dy_api_limits_default(int context);

/* One completions prompt: text, or token ids (exactly one of the two is non-NULL). */
typedef struct {
    char *text; /* NUL-terminated UTF-8 without NUL bytes inside */
    int32_t *ids;
    int n_ids;
} dy_api_prompt;

typedef enum { DY_SELECT_NONE = 0, DY_SELECT_MAJORITY, DY_SELECT_LOGPROB } dy_api_select;

/* response_format's type (chat), or dyad.grammar's (completions). */
typedef enum { DY_FORMAT_TEXT = 0, DY_FORMAT_JSON_OBJECT, DY_FORMAT_JSON_SCHEMA } dy_api_format;

/* tool_choice: NONE renders no tools and parses no calls; AUTO renders them and parses calls
 * from the answer; REQUIRED and FUNCTION constrain the answer to calls (docs/api.md). */
typedef enum {
    DY_TOOLS_NONE = 0,
    DY_TOOLS_AUTO,
    DY_TOOLS_REQUIRED,
    DY_TOOLS_FUNCTION,
} dy_api_tool_choice;

/* A validated request. It owns every pointer in it; free with dy_api_request_free. */
typedef struct {
    dy_api_kind kind;
    char *model;
    /* completions: each prompt gets its own choices, like OpenAI (prompt i, sample j is choice
     * i * n + j) */
    dy_api_prompt *prompts;
    int n_prompts;
    bool echo;
    /* chat */
    dy_chat_msg *messages;
    int n_messages;
    /* generation */
    int max_tokens;       /* completion tokens per choice (see dy_api_max_new_tokens) */
    bool max_tokens_auto; /* chat without max_tokens: whatever context the prompt leaves */
    dy_sampling sampling; /* temperature, top_k, top_p, min_p; seed when has_seed */
    bool has_seed;
    char **stop;
    int n_stop;
    bool ignore_eos;
    int n;       /* choices returned per prompt */
    int best_of; /* completions: candidates generated per prompt (>= n); chat: n */
    /* output */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool logprobs;      /* chat: logprobs; completions: "logprobs" present */
    int top_logprobs;   /* alternatives per token (completions: the "logprobs" integer) */
    char *user;         /* NULL if not given */
    /* the "dyad" extension object */
    dy_api_select select;
    char *answer_regex; /* NULL if not given */
    char *session;      /* dyad.session: the conversation this is a turn of; NULL if none */
    long long hold_ms;  /* dyad.hold.expected_ms; -1 if not given */
    /* structured output: response_format (chat) or dyad.grammar (completions) */
    dy_api_format format;
    char *grammar;      /* the grammar every sample follows (grammar/grammar.h's notation),
                         * compiled from the schema; NULL for text */
    size_t grammar_len;
    /* tools (chat) */
    dy_chat_tool *tools;
    int n_tools;
    char **tool_rules;  /* per tool: its arguments' grammar rules, named "tool<i>" (schema.h's
                         * dy_schema_rules), for toolcall.h's forced-call grammar */
    dy_api_tool_choice tool_choice; /* AUTO when tools are given without it, else NONE */
    int tool_forced;    /* FUNCTION: the index of the named tool */
    bool parallel_tool_calls; /* default true */
} dy_api_request;

/* Parses and validates a request body for /v1/completions or /v1/chat/completions. Unknown
 * top-level fields are ignored (clients send extra ones); a known field with a wrong type or
 * value is a 400 naming it in `param`. Returns 0, or -1 with *err filled (and *out zeroed). */
int dy_api_parse(const char *body, size_t len, dy_api_kind kind, const dy_api_limits *lim,
                 dy_api_request *out, dy_api_error *err);
void dy_api_request_free(dy_api_request *r);

/* The fewest completion tokens a worker generates (it refuses a request for none). */
#define DY_API_MIN_NEW_TOKENS 1

/* Once a prompt is tokenized: the completion tokens it may generate. The prompt must not be
 * empty, max_tokens must be at least DY_API_MIN_NEW_TOKENS (completions parse 0, OpenAI's
 * echo-only scoring, which is not served) and prompt + max_tokens must fit in
 * lim->max_context; with max_tokens_auto the answer is the context left. Returns the count,
 * or -1 with a 400 in *err. */
int dy_api_max_new_tokens(const dy_api_request *r, int prompt_tokens, const dy_api_limits *lim,
                          dy_api_error *err);

/* The most bytes a whole (not streamed) answer to r can take when its returned choices
 * generate out_tokens tokens in all, each of at most lim->max_token_bytes bytes, every byte
 * escaped as JSON's worst case, with the logprobs asked for. An answer is built in memory
 * before it is sent, so a small request could otherwise make the frontend spend gigabytes
 * (#18 item 4). */
size_t dy_api_response_bound(const dy_api_request *r, int64_t out_tokens, const dy_api_limits *lim);
/* 0 if that bound is within lim->max_response_bytes (or r streams, or there is no bound);
 * else -1 with a 400 in *err naming the parameter that multiplies it most. */
int dy_api_check_response_size(const dy_api_request *r, int64_t out_tokens,
                               const dy_api_limits *lim, dy_api_error *err);

/* ---- responses ---- */

/* A token as bytes (not necessarily valid UTF-8: a byte-fallback token may hold part of a
 * character; JSON strings get U+FFFD for such bytes, chat's "bytes" arrays keep them). */
typedef struct {
    const char *token;
    size_t len;
    float logprob;
} dy_api_alt;

typedef struct {
    const char *token;
    size_t len;
    float logprob;
    bool no_logprob;   /* completions with echo: the first prompt token has none (null) */
    int text_offset;   /* completions: byte offset of the token in the choice's text */
    const dy_api_alt *top; /* most likely first */
    int n_top;
} dy_api_token_lp;

/* A tool call in an answer: `arguments` is compact JSON text. In a streamed delta, a NULL id
 * or name is left out (the pieces after a call's first). */
typedef struct {
    int index;           /* streaming: the call's place in the choice's tool_calls */
    const char *id;
    const char *name;
    const char *arguments;
} dy_api_tool_call;

/* One choice of a response, or one choice's part of a streamed chunk. */
typedef struct {
    int index;
    const char *text; /* NULL: none (a chat delta without content) */
    size_t len;
    dy_end finish;                /* NONE: null; "length", or else "stop" */
    bool has_logprobs;            /* false: "logprobs": null */
    const dy_api_token_lp *logprobs;
    int n_logprobs;
    bool first;                   /* streaming chat: this choice's first chunk (role in delta) */
    const dy_api_tool_call *tool_calls; /* chat: message.tool_calls (or the delta's); with
                                         * them a NULL text is "content": null */
    int n_tool_calls;
    bool finish_tool_calls;       /* finish_reason "tool_calls" (finish is STOP) */
} dy_api_choice;

typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens;
} dy_api_usage;

/* What every response and chunk of one request shares. The caller makes the id ("cmpl-..."
 * or "chatcmpl-...") and reads the clock for `created`. */
typedef struct {
    dy_api_kind kind;
    const char *id;
    int64_t created;
    const char *model;
    const char *system_fingerprint; /* NULL: left out */
} dy_api_meta;

/* The whole response. `dyad` (may be NULL) is attached as a top-level "dyad" object: what
 * the server wants to report (worker, cache overlap, vote table...); borrowed, not stolen.
 * All builders return compact malloc'd JSON, or NULL if out of memory. */
char *dy_api_response_json(const dy_api_meta *m, const dy_api_choice *ch, int n,
                           const dy_api_usage *u, json_t *dyad);

/* A streamed chunk with n choices' deltas. With stream_options.include_usage set, pass
 * usage_null = true: OpenAI then sends "usage": null on every chunk but the usage chunk. */
char *dy_api_chunk_json(const dy_api_meta *m, const dy_api_choice *ch, int n, bool usage_null);
/* The same with a "dyad" object attached (may be NULL, borrowed), e.g. on the last chunk. */
char *dy_api_chunk_json_dyad(const dy_api_meta *m, const dy_api_choice *ch, int n,
                             bool usage_null, json_t *dyad);
/* The last chunk before [DONE] when include_usage is set: "choices": [] and the usage. */
char *dy_api_usage_chunk_json(const dy_api_meta *m, const dy_api_usage *u);

/* "data: <json>\n\n", malloc'd (the caller still frees `json`). An error after the stream
 * started is sent the same way, framing dy_api_error_json's object. The stream ends with
 * DY_SSE_DONE. */
char *dy_sse_frame(const char *json);
#define DY_SSE_DONE "data: [DONE]\n\n"

/* How much of s[0..len) can be sent now: all of it but a trailing UTF-8 sequence that is
 * incomplete so far (the next token may finish the character). */
size_t dy_utf8_sendable(const char *s, size_t len);

typedef struct {
    const char *id;
    int64_t created;
    const char *owned_by; /* NULL: "dyad" */
} dy_api_model;

/* GET /v1/models: {"object":"list","data":[...]}; GET /v1/models/{id}: one model object. */
char *dy_api_models_json(const dy_api_model *m, int n);
char *dy_api_model_json(const dy_api_model *m);

#endif
