/* bench_request.h — what an OpenAI-compatible request of the bench says, and how a server's
 * error answer is read: the JSON body (streaming, usage requested, max_tokens with
 * ignore_eos), the endpoint URLs, text prompts for servers or endpoints that take text, and
 * the message inside an error body. Pure; JSON through jansson. */
#ifndef DYAD_BENCH_REQUEST_H
#define DYAD_BENCH_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/bench_workload.h"

typedef enum { DYB_EP_COMPLETIONS, DYB_EP_CHAT } dyb_endpoint;

typedef struct {
    const char *model;
    dyb_endpoint endpoint;
    bool text_prompt;      /* completions: send words instead of token ids (chat: always) */
    bool ignore_eos;       /* send "ignore_eos": true so that max_tokens are generated */
    const json_t *response_format; /* sent with every request (chat: "response_format";
                                    * completions: "dyad": {"grammar": ...}), or NULL;
                                    * borrowed */
} dyb_body_config;

/* The JSON body of one request, malloc'd (NULL when out of memory): model, prompt (token ids)
 * or messages (one user message), max_tokens, stream, stream_options.include_usage,
 * temperature 0 and, if asked, ignore_eos and the response format. */
char *dyb_request_body(const dyb_body_config *c, const dyb_request *r);
/* --response-format's file: a JSON object with a string "type" (the server checks the rest:
 * a bad schema is its 400). NULL with a message naming the file otherwise. */
json_t *dyb_response_format_load(const char *path, char *err, size_t errlen);
/* base_url (a trailing "/" or "/v1" is dropped) followed by path, malloc'd. */
char *dyb_endpoint_url(const char *base_url, const char *path);
/* The prompt as text: one common English word per token id, so that equal ids give equal
 * text (prefix sharing survives) and the text is about one token per word in 32k-class
 * vocabularies. malloc'd. */
char *dyb_prompt_text(const int32_t *ids, long n);
/* The server's own message in an error body ({"error": {"message": ...}}, {"error": "..."},
 * {"message": ...}, {"detail": ...}), else the body's text; on one line, shortened. */
void dyb_error_text(const char *body, size_t len, char *out, size_t n);

#endif
