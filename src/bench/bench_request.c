/* bench_request.c — see bench_request.h. Owns the OpenAI request fields and the word list of
 * text prompts. */
#include "bench/bench_request.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Common words that llama-family and GPT tokenizers each encode as one token after a space. */
static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "with", "as", "at", "be",
    "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all",
    "were", "when", "we", "there", "can", "an", "your", "which", "their", "said", "if", "do",
    "will", "each", "about", "how", "up", "out", "them", "then", "she", "many", "some", "so",
    "these", "would", "other", "into", "has", "more", "her", "two", "like", "him", "see",
    "time", "could", "no", "make", "than", "first", "been", "its", "who", "now", "people",
    "my", "made", "over", "did", "down", "only", "way", "find", "use", "may", "water", "long",
    "little", "very", "after", "words", "called", "just", "where", "most", "know", "get",
    "through", "back", "much", "go", "good", "new", "write", "our", "me", "man", "too", "any",
    "day", "same", "right", "look", "think", "also", "around", "another", "came", "come",
    "work", "three", "must", "because", "does", "part",
};

char *dyb_prompt_text(const int32_t *ids, long n)
{
    size_t nw = sizeof words / sizeof words[0], cap = 1;
    for (long i = 0; i < n; i++)
        cap += strlen(words[(uint32_t)ids[i] % nw]) + 1;
    char *s = malloc(cap), *p = s;
    if (!s)
        return NULL;
    for (long i = 0; i < n; i++) {
        const char *w = words[(uint32_t)ids[i] % nw];
        if (i)
            *p++ = ' ';
        size_t k = strlen(w);
        memcpy(p, w, k);
        p += k;
    }
    *p = 0;
    return s;
}

static json_t *prompt_json(const dyb_body_config *c, const dyb_request *r)
{
    if (c->endpoint == DYB_EP_CHAT || c->text_prompt) {
        char *text = dyb_prompt_text(r->tokens, r->isl);
        json_t *s = text ? json_string(text) : NULL;
        free(text);
        if (c->endpoint != DYB_EP_CHAT || !s)
            return s;
        return json_pack("[{s:s, s:o}]", "role", "user", "content", s);
    }
    json_t *a = json_array();
    for (long i = 0; a && i < r->isl; i++)
        if (json_array_append_new(a, json_integer(r->tokens[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Each body gets its own copy: the configuration's object is only borrowed. */
/* The body's "dyad" object, made on first use. */
static json_t *dyad_of(json_t *o)
{
    json_t *d = json_object_get(o, "dyad");
    if (!d && json_object_set_new(o, "dyad", json_object()) == 0)
        d = json_object_get(o, "dyad");
    return d;
}

static int set_response_format(json_t *o, const dyb_body_config *c)
{
    json_t *rf = json_deep_copy(c->response_format);
    if (!rf)
        return -1;
    if (c->endpoint == DYB_EP_CHAT)
        return json_object_set_new(o, "response_format", rf);
    json_t *dyad = dyad_of(o);
    return dyad ? json_object_set_new(dyad, "grammar", rf) : (json_decref(rf), -1);
}

/* A turn of a conversation (dyad.session), with when its next turn comes (dyad.hold). */
static int set_session(json_t *o, const dyb_request *r)
{
    json_t *dyad = dyad_of(o);
    if (!dyad || json_object_set_new(dyad, "session", json_string(r->session)) != 0)
        return -1;
    if (!r->hold)
        return 0;
    json_t *h = json_pack("{s:I}", "expected_ms", (json_int_t)r->hold_ms);
    return h ? json_object_set_new(dyad, "hold", h) : -1;
}

json_t *dyb_response_format_load(const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *t = json_object_get(o, "type");
    if (!o)
        snprintf(err, errlen, "%s: not JSON: %s (line %d, column %d)", path, je.text, je.line,
                 je.column);
    else if (!json_is_object(o))
        snprintf(err, errlen, "%s: not a JSON object (a response_format such as "
                 "{\"type\": \"json_object\"})", path);
    else if (!json_is_string(t))
        snprintf(err, errlen, "%s: no string \"type\" (json_object, json_schema or text)", path);
    else
        return o;
    json_decref(o);
    return NULL;
}

char *dyb_request_body(const dyb_body_config *c, const dyb_request *r)
{
    json_t *prompt = prompt_json(c, r);
    if (!prompt)
        return NULL;
    /* temperature 0: greedy is the cheapest sampler everywhere and keeps runs comparable. */
    json_t *o = json_pack("{s:s, s:o, s:I, s:b, s:{s:b}, s:f}", "model", c->model,
                          c->endpoint == DYB_EP_CHAT ? "messages" : "prompt", prompt,
                          "max_tokens", (json_int_t)r->osl, "stream", 1, "stream_options",
                          "include_usage", 1, "temperature", 0.0);
    if (o && c->ignore_eos)
        json_object_set_new(o, "ignore_eos", json_true());
    if (o && ((c->response_format && set_response_format(o, c) != 0) ||
              (r->session && set_session(o, r) != 0))) {
        json_decref(o);
        o = NULL;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *dyb_endpoint_url(const char *base_url, const char *path)
{
    size_t n = strlen(base_url);
    while (n && base_url[n - 1] == '/')
        n--;
    if (n >= 3 && !strncmp(base_url + n - 3, "/v1", 3))
        n -= 3;
    size_t len = n + strlen(path) + 1;
    char *u = malloc(len);
    if (u)
        snprintf(u, len, "%.*s%s", (int)n, base_url, path);
    return u;
}

void dyb_error_text(const char *body, size_t len, char *out, size_t n)
{
    json_t *o = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(o, "error"), *m = NULL;
    if (json_is_object(e))
        m = json_object_get(e, "message");
    else if (json_is_string(e))
        m = e;
    else if (!(m = json_object_get(o, "message")) || !json_is_string(m))
        m = json_object_get(o, "detail");
    if (json_is_string(m))
        snprintf(out, n, "%s", json_string_value(m));
    else if (body && len)
        snprintf(out, n, "%.*s", (int)(len < 300 ? len : 300), body);
    else
        snprintf(out, n, "(empty body)");
    json_decref(o);
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    for (size_t k = strlen(out); k && out[k - 1] == ' ';)
        out[--k] = 0;
}
