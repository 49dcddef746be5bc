/* openai.c — owns the OpenAI-compatible request validation and response building declared in
 * openai.h: error objects, the request parser (one small handler per parameter, then the
 * checks that involve several parameters), the context-length check after tokenization, and
 * the response, chunk and model-list builders.
 *
 * Parsing is strict where it protects the server (duplicate keys, nesting depth, types and
 * ranges of known fields, parameters we cannot honour) and lenient where clients differ
 * (unknown fields are ignored, null means "default", an integral number like 16.0 is an
 * integer). Error messages follow OpenAI's wording so that client libraries show them as
 * users expect. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "serve/front/openai.h"
#include "serve/front/json.h"
#include "serve/wire/wire.h"

#include "grammar/schema.h"

#include "engine/stop.h"

#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_DEPTH = 64,             /* JSON nesting accepted in a request body */
    MAX_MODEL_LEN = 256,        /* bytes in "model" */
    MAX_REGEX_LEN = 1024,       /* bytes in dyad.answer_regex */
    MAX_SESSION_LEN = 256,      /* bytes in dyad.session */
    MAX_HOLD_MS = 86400000,     /* dyad.hold.expected_ms: a day (wire.h's DY_WIRE_MAX_HOLD_MS) */
    MAX_CMPL_LOGPROBS = 5,      /* completions' "logprobs", as OpenAI */
    MAX_TOP_LOGPROBS = 20,      /* chat's "top_logprobs", as OpenAI */
    MAX_FORMAT_NAME = 64,       /* bytes in response_format.json_schema.name and in a
                                 * function's name, as OpenAI */
    MAX_PARAM = 256,            /* bytes of a parameter path (dy_api_error.param) */
    MAX_TOOLS = 128,            /* tools in a request, and calls in a message, as OpenAI */
};

/* ==== errors ==== */

static void error_vset(dy_api_error *e, int status, const char *type, const char *code,
                       const char *param, const char *fmt, va_list ap)
{
    memset(e, 0, sizeof *e);
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void dy_api_error_set(dy_api_error *e, int status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, status, type, code, param, fmt, ap);
    va_end(ap);
}

void dy_api_error_unauthorized(dy_api_error *e)
{
    dy_api_error_set(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                     "Incorrect API key provided.");
}

void dy_api_error_model_not_found(dy_api_error *e, const char *model)
{
    dy_api_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%s' does not exist.", model ? model : "");
}

void dy_api_error_route_not_found(dy_api_error *e, const char *method, const char *path)
{
    dy_api_error_set(e, 404, "invalid_request_error", NULL, NULL, "Invalid URL (%s %s)",
                     method ? method : "", path ? path : "");
}

void dy_api_error_method_not_allowed(dy_api_error *e, const char *method, const char *path)
{
    dy_api_error_set(e, 405, "invalid_request_error", "method_not_allowed", NULL,
                     "Method %s is not allowed on %s.", method ? method : "", path ? path : "");
}

void dy_api_error_too_large(dy_api_error *e, size_t limit)
{
    dy_api_error_set(e, 413, "invalid_request_error", "request_too_large", NULL,
                     "Request body too large: the limit is %zu bytes.", limit);
}

void dy_api_error_queue_full(dy_api_error *e)
{
    dy_api_error_set(e, 429, "requests", "rate_limit_exceeded", NULL,
                     "The server is at capacity: its request queue is full. Retry shortly.");
}

void dy_api_error_unavailable(dy_api_error *e, const char *why)
{
    dy_api_error_set(e, 503, "server_error", "service_unavailable", NULL,
                     "The server cannot take requests now: %s", why ? why : "no worker is ready.");
}

void dy_api_error_internal(dy_api_error *e, const char *what)
{
    dy_api_error_set(e, 500, "server_error", NULL, NULL, "Internal error: %s",
                     what ? what : "unknown");
}

/* ==== UTF-8 ==== */

/* True if s[0..n) (n < the sequence's length) can still become a well-formed sequence. */
static bool utf8_prefix_ok(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return false;
    if (n >= 2 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) ||
                   (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F)))
        return false;
    return true;
}

size_t dy_utf8_sendable(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned c = u[len - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: its lead is further back */
        size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                    : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        if (need > back && utf8_prefix_ok(u + len - back, back))
            return len - back;
        return len;
    }
    return len;
}

/* ==== JSON building (json.h): a failure anywhere makes the whole result NULL ==== */

/* Non-finite values are not JSON; a token the model cannot produce gets OpenAI's -9999. */
static json_t *jreal(double x)
{
    return json_real(isfinite(x) ? x : -9999.0);
}

/* The text of a whole response, chunk or error object (NULL if anything in it failed). */
static char *jdone(dy_jb *b, json_t *root)
{
    return dy_jb_dump(b, root, JSON_COMPACT | JSON_REAL_PRECISION(9));
}

char *dy_api_error_json(const dy_api_error *e)
{
    dy_jb b = {0};
    json_t *root = json_object(), *in = json_object();
    dy_jb_set(&b, in, "message", dy_json_str(e->message));
    dy_jb_set(&b, in, "type", dy_json_str(e->type[0] ? e->type : "invalid_request_error"));
    dy_jb_set(&b, in, "param", e->param[0] ? dy_json_str(e->param) : json_null());
    dy_jb_set(&b, in, "code", e->code[0] ? dy_json_str(e->code) : json_null());
    dy_jb_set(&b, root, "error", in);
    return jdone(&b, root);
}

/* ==== request parsing: context and typed getters ==== */

typedef struct {
    json_t *root;
    dy_api_kind kind;
    const dy_api_limits *lim;
    dy_api_request *r;
    dy_api_error *err;
    bool has_stream_options, has_top_logprobs, has_best_of;
    bool has_tool_choice;
    const char *forced_name; /* tool_choice's function name (in root), until check_tools */
} pctx;

static int bad(pctx *c, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A 400 invalid_request_error naming `param`; returns -1 so handlers can `return bad(...)`. */
static int bad(pctx *c, const char *param, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(c->err, 400, "invalid_request_error", code, param, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(pctx *c)
{
    dy_api_error_internal(c->err, "out of memory");
    return -1;
}

static char *dup_or_fail(pctx *c, const char *s)
{
    char *d = strdup(s);
    if (!d)
        oom(c);
    return d;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int bad_type(pctx *c, const char *param, const char *want, const json_t *v)
{
    return bad(c, param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.",
               param, want, type_name(v));
}

static int missing(pctx *c, const char *param)
{
    return bad(c, param, "missing_required_parameter", "Missing required parameter: '%s'.", param);
}

static int get_double(pctx *c, const char *p, const json_t *v, double lo, bool lo_open, double hi,
                      double *out)
{
    if (!json_is_number(v))
        return bad_type(c, p, "a number", v);
    double x = json_number_value(v);
    if (lo_open ? !(x > lo) : !(x >= lo))
        return bad(c, p, "decimal_below_min_value", "Invalid '%s': decimal below minimum value. "
                   "Expected a value %s %g, but got %g instead.", p, lo_open ? ">" : ">=", lo, x);
    if (!(x <= hi))
        return bad(c, p, "decimal_above_max_value", "Invalid '%s': decimal above maximum value. "
                   "Expected a value <= %g, but got %g instead.", p, hi, x);
    *out = x;
    return 0;
}

/* An integer, or a number with an integral value (some clients send 16.0). */
static int get_int(pctx *c, const char *p, const json_t *v, long long lo, long long hi,
                   long long *out)
{
    long long x = 0;
    double d = json_is_real(v) ? json_real_value(v) : 0;
    if (json_is_integer(v))
        x = json_integer_value(v);
    else if (json_is_real(v) && d == floor(d) && fabs(d) <= 9e15)
        x = (long long)d;
    else
        return bad_type(c, p, "an integer", v);
    if (x < lo)
        return bad(c, p, "integer_below_min_value", "Invalid '%s': integer below minimum value. "
                   "Expected a value >= %lld, but got %lld instead.", p, lo, x);
    if (x > hi)
        return bad(c, p, "integer_above_max_value", "Invalid '%s': integer above maximum value. "
                   "Expected a value <= %lld, but got %lld instead.", p, hi, x);
    *out = x;
    return 0;
}

static int get_bool(pctx *c, const char *p, const json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return bad_type(c, p, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int get_string(pctx *c, const char *p, const json_t *v, const char **out)
{
    if (!json_is_string(v))
        return bad_type(c, p, "a string", v);
    *out = json_string_value(v);
    return 0;
}

/* A parameter path such as "messages[3].content[1].type", truncated to fit (a vsnprintf
 * wrapper, so the compiler does not warn about paths that could in theory be long). */
static void pfmt(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pfmt(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

static int too_long_string(pctx *c, const char *p, size_t max, size_t got)
{
    return bad(c, p, "string_above_max_length", "Invalid '%s': string too long. Expected a "
               "string with maximum length %zu, but got a string with length %zu instead.",
               p, max, got);
}

static int too_long_array(pctx *c, const char *p, size_t max, size_t got)
{
    return bad(c, p, "array_above_max_length", "Invalid '%s': array too long. Expected an array "
               "with maximum length %zu, but got an array with length %zu instead.", p, max, got);
}

/* ==== request parsing: prompts ==== */

/* A token-id list: non-empty, at most a context long, every id a valid token. */
static int parse_ids(pctx *c, json_t *arr, const char *param, dy_api_prompt *p)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return bad(c, param, "invalid_value", "Invalid '%s': a token list must not be empty.", param);
    if (n > (size_t)c->lim->max_context)
        return too_long_array(c, param, (size_t)c->lim->max_context, n);
    if (!(p->ids = malloc(n * sizeof *p->ids)))
        return oom(c);
    for (size_t j = 0; j < n; j++) {
        char q[64];
        pfmt(q, sizeof q, "%s[%zu]", param, j);
        long long hi = c->lim->vocab_size > 0 ? c->lim->vocab_size - 1 : INT32_MAX, id = 0;
        json_t *v = json_array_get(arr, j);
        if (!json_is_integer(v))
            return bad_type(c, q, "an integer token id", v);
        if (get_int(c, q, v, 0, hi, &id))
            return -1;
        p->ids[j] = (int32_t)id;
    }
    p->n_ids = (int)n;
    return 0;
}

static int alloc_prompts(pctx *c, size_t n)
{
    if (n > (size_t)c->lim->max_prompts)
        return too_long_array(c, "prompt", (size_t)c->lim->max_prompts, n);
    if (!(c->r->prompts = calloc(n, sizeof *c->r->prompts)))
        return oom(c);
    return 0;
}

/* A list whose elements all have the first one's kind: strings, or token-id lists. */
static int parse_prompt_list(pctx *c, json_t *v)
{
    size_t n = json_array_size(v);
    bool text = json_is_string(json_array_get(v, 0));
    if (alloc_prompts(c, n))
        return -1;
    for (size_t i = 0; i < n; i++) {
        char q[64];
        pfmt(q, sizeof q, "prompt[%zu]", i);
        json_t *e = json_array_get(v, i);
        dy_api_prompt *p = &c->r->prompts[i];
        c->r->n_prompts = (int)i + 1; /* so that dy_api_request_free sees what was made */
        if (text && !json_is_string(e))
            return bad_type(c, q, "a string", e);
        if (!text && !json_is_array(e))
            return bad_type(c, q, "an array of token ids", e);
        if (text ? !(p->text = dup_or_fail(c, json_string_value(e))) : parse_ids(c, e, q, p))
            return -1;
    }
    return 0;
}

static int f_prompt(pctx *c, const char *name, json_t *v)
{
    (void)name;
    if (json_is_string(v)) {
        if (alloc_prompts(c, 1))
            return -1;
        c->r->n_prompts = 1;
        return (c->r->prompts[0].text = dup_or_fail(c, json_string_value(v))) ? 0 : -1;
    }
    if (!json_is_array(v))
        return bad_type(c, "prompt", "a string or an array", v);
    if (json_array_size(v) == 0)
        return bad(c, "prompt", "invalid_value", "Invalid 'prompt': must not be empty.");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) { /* one prompt given as token ids */
        if (alloc_prompts(c, 1))
            return -1;
        c->r->n_prompts = 1;
        return parse_ids(c, v, "prompt", &c->r->prompts[0]);
    }
    if (json_is_string(first) || json_is_array(first))
        return parse_prompt_list(c, v);
    return bad_type(c, "prompt[0]", "a string, a token id or an array of token ids", first);
}

/* ==== request parsing: chat messages ==== */

static int parse_role(pctx *c, json_t *m, const char *p, dy_chat_role *out)
{
    char q[64];
    pfmt(q, sizeof q, "%s.role", p);
    json_t *v = json_object_get(m, "role");
    const char *s = NULL;
    if (!v || json_is_null(v))
        return bad(c, q, "missing_required_parameter", "Missing required parameter: '%s'.", q);
    if (get_string(c, q, v, &s))
        return -1;
    /* "developer" is OpenAI's newer name for the system role. */
    static const struct { const char *name; dy_chat_role role; } roles[] = {
        {"system", DY_ROLE_SYSTEM}, {"developer", DY_ROLE_SYSTEM}, {"user", DY_ROLE_USER},
        {"assistant", DY_ROLE_ASSISTANT}, {"tool", DY_ROLE_TOOL},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        if (strcmp(s, roles[i].name) == 0) {
            *out = roles[i].role;
            return 0;
        }
    }
    return bad(c, q, "invalid_value", "Invalid value: '%.64s'. Supported values are: 'system', "
               "'developer', 'user', 'assistant' and 'tool'.", s);
}

/* An array of content parts: only text parts, joined with "\n" (as vLLM does). */
static int join_parts(pctx *c, json_t *arr, const char *p, char **out)
{
    size_t n = json_array_size(arr), total = 1;
    for (size_t j = 0; j < n; j++) {
        char q[64];
        json_t *part = json_array_get(arr, j), *type, *text;
        const char *t = NULL;
        pfmt(q, sizeof q, "%s[%zu]", p, j);
        if (!json_is_object(part))
            return bad_type(c, q, "an object", part);
        pfmt(q, sizeof q, "%s[%zu].type", p, j);
        if (!(type = json_object_get(part, "type")))
            return bad(c, q, "missing_required_parameter", "Missing required parameter: '%s'.", q);
        if (get_string(c, q, type, &t))
            return -1;
        if (strcmp(t, "text") != 0)
            return bad(c, q, "unsupported_value", "Unsupported value: content parts of type "
                       "'%.32s' are not supported; only 'text' is.", t);
        pfmt(q, sizeof q, "%s[%zu].text", p, j);
        if (!(text = json_object_get(part, "text")) || !json_is_string(text))
            return text ? bad_type(c, q, "a string", text)
                        : bad(c, q, "missing_required_parameter", "Missing required parameter: '%s'.", q);
        total += json_string_length(text) + 1;
    }
    if (!(*out = malloc(total)))
        return oom(c);
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        json_t *text = json_object_get(json_array_get(arr, j), "text");
        if (j > 0)
            (*out)[k++] = '\n';
        memcpy(*out + k, json_string_value(text), json_string_length(text));
        k += json_string_length(text);
    }
    (*out)[k] = 0;
    return 0;
}

static int parse_content(pctx *c, json_t *m, const char *p, dy_chat_msg *msg)
{
    char q[64];
    pfmt(q, sizeof q, "%s.content", p);
    json_t *v = json_object_get(m, "content");
    if (!v || json_is_null(v)) {
        /* an assistant turn that only called tools has no content */
        if (msg->role != DY_ROLE_ASSISTANT)
            return bad(c, q, "missing_required_parameter", "Missing required parameter: '%s'.", q);
        return (msg->content = dup_or_fail(c, "")) ? 0 : -1;
    }
    if (json_is_string(v))
        return (msg->content = dup_or_fail(c, json_string_value(v))) ? 0 : -1;
    if (json_is_array(v))
        return join_parts(c, v, q, &msg->content);
    return bad_type(c, q, "a string or an array of content parts", v);
}

/* A string field of a message's part at `param` (required: absent or null is a 400). */
static int required_string(pctx *c, const char *param, json_t *v, const char **out)
{
    if (!v || json_is_null(v))
        return bad(c, param, "missing_required_parameter", "Missing required parameter: '%s'.", param);
    return get_string(c, param, v, out);
}

/* One of an assistant message's tool calls: {"id", "type": "function", "function": {"name",
 * "arguments"}}, `arguments` a string holding a JSON object (the template writes it as JSON). */
static int parse_call(pctx *c, json_t *v, const char *p, dy_chat_call *call)
{
    char q[MAX_PARAM];
    const char *s = NULL;
    if (!json_is_object(v))
        return bad_type(c, p, "an object", v);
    pfmt(q, sizeof q, "%s.id", p);
    if (required_string(c, q, json_object_get(v, "id"), &s) || !(call->id = dup_or_fail(c, s)))
        return -1;
    pfmt(q, sizeof q, "%s.type", p);
    json_t *type = json_object_get(v, "type");
    if (type && !json_is_null(type) && (get_string(c, q, type, &s) || strcmp(s, "function") != 0))
        return json_is_string(type) ? bad(c, q, "invalid_value", "Invalid value: '%.64s'. "
                                          "Supported values are: 'function'.", s) : -1;
    pfmt(q, sizeof q, "%s.function", p);
    json_t *fn = json_object_get(v, "function");
    if (!fn || json_is_null(fn))
        return missing(c, q);
    if (!json_is_object(fn))
        return bad_type(c, q, "an object", fn);
    pfmt(q, sizeof q, "%s.function.name", p);
    if (required_string(c, q, json_object_get(fn, "name"), &s) || !(call->name = dup_or_fail(c, s)))
        return -1;
    pfmt(q, sizeof q, "%s.function.arguments", p);
    if (required_string(c, q, json_object_get(fn, "arguments"), &s))
        return -1;
    json_t *args = json_loads(s, 0, NULL);
    bool is_object = json_is_object(args);
    json_decref(args);
    if (!is_object)
        return bad(c, q, "invalid_value", "Invalid '%s': expected a string holding a JSON object.", q);
    return (call->arguments = dup_or_fail(c, s)) ? 0 : -1;
}

static int parse_calls(pctx *c, json_t *calls, const char *p, dy_chat_msg *msg)
{
    char q[MAX_PARAM];
    pfmt(q, sizeof q, "%s.tool_calls", p);
    if (!calls || json_is_null(calls))
        return 0;
    if (!json_is_array(calls))
        return bad_type(c, q, "an array", calls);
    size_t n = json_array_size(calls);
    if (n == 0)
        return 0;
    if (msg->role != DY_ROLE_ASSISTANT)
        return bad(c, q, "invalid_value", "Invalid '%s': only assistant messages carry tool calls.", q);
    if (n > MAX_TOOLS)
        return too_long_array(c, q, MAX_TOOLS, n);
    if (!(msg->calls = calloc(n, sizeof *msg->calls)))
        return oom(c);
    for (size_t k = 0; k < n; k++) {
        char e[MAX_PARAM];
        pfmt(e, sizeof e, "%s[%zu]", q, k);
        msg->n_calls = (int)k + 1; /* so that dy_api_request_free sees what was made */
        if (parse_call(c, json_array_get(calls, k), e, &msg->calls[k]))
            return -1;
    }
    return 0;
}

/* A tool message answers one call: its tool_call_id is required. */
static int parse_tool_call_id(pctx *c, json_t *m, const char *p, dy_chat_msg *msg)
{
    char q[MAX_PARAM];
    const char *s = NULL;
    pfmt(q, sizeof q, "%s.tool_call_id", p);
    if (msg->role != DY_ROLE_TOOL)
        return 0;
    if (required_string(c, q, json_object_get(m, "tool_call_id"), &s))
        return -1;
    return (msg->tool_call_id = dup_or_fail(c, s)) ? 0 : -1;
}

static int parse_message(pctx *c, json_t *m, size_t i, dy_chat_msg *msg)
{
    char p[48];
    pfmt(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m))
        return bad_type(c, p, "an object", m);
    if (parse_role(c, m, p, &msg->role) || parse_calls(c, json_object_get(m, "tool_calls"), p, msg) ||
        parse_tool_call_id(c, m, p, msg))
        return -1;
    return parse_content(c, m, p, msg);
}

static int f_messages(pctx *c, const char *name, json_t *v)
{
    (void)name;
    if (!json_is_array(v))
        return bad_type(c, "messages", "an array", v);
    size_t n = json_array_size(v);
    if (n == 0)
        return bad(c, "messages", "empty_array", "Invalid 'messages': empty array. Expected an "
                   "array with minimum length 1, but got an empty array instead.");
    if (n > (size_t)c->lim->max_messages)
        return too_long_array(c, "messages", (size_t)c->lim->max_messages, n);
    if (!(c->r->messages = calloc(n, sizeof *c->r->messages)))
        return oom(c);
    for (size_t i = 0; i < n; i++) {
        c->r->n_messages = (int)i + 1;
        if (parse_message(c, json_array_get(v, i), i, &c->r->messages[i]))
            return -1;
    }
    return 0;
}

/* ==== request parsing: one handler per parameter ==== */

static int f_model(pctx *c, const char *name, json_t *v)
{
    const char *s = NULL;
    if (get_string(c, name, v, &s))
        return -1;
    if (!*s)
        return bad(c, name, "invalid_value", "Invalid 'model': must not be empty.");
    if (strlen(s) > MAX_MODEL_LEN)
        return too_long_string(c, name, MAX_MODEL_LEN, strlen(s));
    return (c->r->model = dup_or_fail(c, s)) ? 0 : -1;
}

/* max_tokens and (chat) max_completion_tokens; the table lists the latter second, so it wins.
 * Completions may ask for 0 tokens (echo with logprobs scores a text). */
static int f_max_tokens(pctx *c, const char *name, json_t *v)
{
    long long x = 0;
    if (get_int(c, name, v, c->kind == DY_API_COMPLETIONS ? 0 : 1, c->lim->max_context, &x))
        return -1;
    c->r->max_tokens = (int)x;
    c->r->max_tokens_auto = false;
    return 0;
}

static int f_temperature(pctx *c, const char *name, json_t *v)
{
    double x = 0;
    if (get_double(c, name, v, 0, false, 2, &x))
        return -1;
    c->r->sampling.temperature = (float)x;
    return 0;
}

static int f_top_p(pctx *c, const char *name, json_t *v)
{
    double x = 0;
    if (get_double(c, name, v, 0, true, 1, &x))
        return -1;
    c->r->sampling.top_p = (float)x;
    return 0;
}

/* -1 means "off" in vLLM; 0 means "off" here. */
static int f_top_k(pctx *c, const char *name, json_t *v)
{
    long long x = 0;
    if (get_int(c, name, v, -1, INT32_MAX, &x))
        return -1;
    c->r->sampling.top_k = x < 0 ? 0 : (int)x;
    return 0;
}

static int f_min_p(pctx *c, const char *name, json_t *v)
{
    double x = 0;
    if (get_double(c, name, v, 0, false, 1, &x))
        return -1;
    c->r->sampling.min_p = (float)x;
    return 0;
}

static int f_seed(pctx *c, const char *name, json_t *v)
{
    long long x = 0;
    if (get_int(c, name, v, INT64_MIN, INT64_MAX, &x))
        return -1;
    c->r->sampling.seed = (uint64_t)x;
    c->r->has_seed = true;
    return 0;
}

static int add_stop(pctx *c, const char *param, json_t *s)
{
    const char *t = NULL;
    if (get_string(c, param, s, &t))
        return -1;
    size_t len = json_string_length(s);
    if (len > (size_t)c->lim->max_stop_len)
        return too_long_string(c, param, (size_t)c->lim->max_stop_len, len);
    return (c->r->stop[c->r->n_stop++] = dup_or_fail(c, t)) ? 0 : -1;
}

/* A string or an array of strings. The limit never exceeds what engine/stop.h can hold. */
static int f_stop(pctx *c, const char *name, json_t *v)
{
    int max = c->lim->max_stop < DY_MAX_STOPS ? c->lim->max_stop : DY_MAX_STOPS;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return bad_type(c, name, "a string or an array of strings", v);
    if (n > (size_t)max)
        return too_long_array(c, name, (size_t)max, n);
    if (n == 0)
        return 0;
    if (!(c->r->stop = calloc(n, sizeof *c->r->stop)))
        return oom(c);
    if (json_is_string(v))
        return add_stop(c, name, v);
    for (size_t i = 0; i < n; i++) {
        char q[64];
        pfmt(q, sizeof q, "stop[%zu]", i);
        if (add_stop(c, q, json_array_get(v, i)))
            return -1;
    }
    return 0;
}

static int f_stream(pctx *c, const char *name, json_t *v)
{
    return get_bool(c, name, v, &c->r->stream);
}

static int f_stream_options(pctx *c, const char *name, json_t *v)
{
    if (!json_is_object(v))
        return bad_type(c, name, "an object", v);
    c->has_stream_options = true;
    json_t *u = json_object_get(v, "include_usage");
    if (!u || json_is_null(u))
        return 0;
    return get_bool(c, "stream_options.include_usage", u, &c->r->include_usage);
}

static int f_n(pctx *c, const char *name, json_t *v)
{
    long long x = 0;
    if (get_int(c, name, v, 1, c->lim->max_n, &x))
        return -1;
    c->r->n = (int)x;
    return 0;
}

static int f_best_of(pctx *c, const char *name, json_t *v)
{
    long long x = 0;
    if (get_int(c, name, v, 1, c->lim->max_n, &x))
        return -1;
    c->r->best_of = (int)x;
    c->has_best_of = true;
    return 0;
}

/* Completions: an integer, the number of alternatives per token. Chat: a boolean. */
static int f_logprobs(pctx *c, const char *name, json_t *v)
{
    if (c->kind == DY_API_CHAT)
        return get_bool(c, name, v, &c->r->logprobs);
    long long x = 0;
    if (get_int(c, name, v, 0, MAX_CMPL_LOGPROBS, &x))
        return -1;
    c->r->logprobs = true;
    c->r->top_logprobs = (int)x;
    return 0;
}

static int f_top_logprobs(pctx *c, const char *name, json_t *v)
{
    long long x = 0;
    if (get_int(c, name, v, 0, MAX_TOP_LOGPROBS, &x))
        return -1;
    c->r->top_logprobs = (int)x;
    c->has_top_logprobs = true;
    return 0;
}

static int f_echo(pctx *c, const char *name, json_t *v)
{
    return get_bool(c, name, v, &c->r->echo);
}

static int f_ignore_eos(pctx *c, const char *name, json_t *v)
{
    return get_bool(c, name, v, &c->r->ignore_eos);
}

static int f_user(pctx *c, const char *name, json_t *v)
{
    const char *s = NULL;
    if (get_string(c, name, v, &s))
        return -1;
    return (c->r->user = dup_or_fail(c, s)) ? 0 : -1;
}

/* Penalties we do not implement: accepted at their neutral value, otherwise a clear 400
 * rather than a silently different sampling. */
static int f_penalty(pctx *c, const char *name, json_t *v)
{
    bool rep = strcmp(name, "repetition_penalty") == 0; /* vLLM's, multiplicative */
    double x = 0, neutral = rep ? 1 : 0;
    if (get_double(c, name, v, rep ? 0 : -2, rep, rep ? 2e9 : 2, &x))
        return -1;
    if (x != neutral)
        return bad(c, name, "unsupported_value", "Unsupported value: '%s' does not support %g "
                   "with this server. Only the default (%g) value is supported.", name, x, neutral);
    return 0;
}

/* A field that only makes sense with features we lack (the deprecated functions, logit bias,
 * suffix):
 * its empty or neutral values are accepted, anything else is a 400. */
static bool is_neutral(const char *name, json_t *v)
{
    if (json_is_array(v) || json_is_object(v))
        return json_is_array(v) ? json_array_size(v) == 0 : json_object_size(v) == 0;
    if (!json_is_string(v))
        return json_is_false(v);
    const char *s = json_string_value(v);
    if (strcmp(name, "suffix") == 0)
        return !*s;
    return strcmp(s, "none") == 0 || strcmp(s, "auto") == 0;
}

static int f_unsupported(pctx *c, const char *name, json_t *v)
{
    if (is_neutral(name, v))
        return 0;
    return bad(c, name, "unsupported_parameter", "Unsupported parameter: '%s' is not supported "
               "by this server.", name);
}

/* ==== structured output: response_format (chat) and dyad.grammar (completions) ==== */

/* OpenAI's rule for json_schema.name: ^[a-zA-Z0-9_-]{1,64}$. */
static bool format_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > MAX_FORMAT_NAME)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

/* A required name at `param` that follows format_name_ok (schemas' and functions' names). */
static int get_name(pctx *c, const char *param, json_t *name, const char **out)
{
    if (!name || json_is_null(name))
        return missing(c, param);
    if (get_string(c, param, name, out))
        return -1;
    if (!format_name_ok(*out, json_string_length(name)))
        return bad(c, param, "invalid_value", "Invalid '%s': '%.64s' is not a valid name: it must "
                   "be 1 to %d letters, digits, '_' or '-'.", param, *out, MAX_FORMAT_NAME);
    return 0;
}

/* The grammar text in g becomes the request's (g is left empty). */
static int take_grammar(pctx *c, dy_buf *g)
{
    if (!dy_buf_cstr(g)) {
        dy_buf_free(g);
        return oom(c);
    }
    c->r->grammar = (char *)g->data;
    c->r->grammar_len = g->len;
    *g = (dy_buf){0};
    return 0;
}

/* Appends the rules of `schema` (already known to be an object) named `prefix`; an error
 * names the keyword's path under `param`. */
static int schema_rules(pctx *c, const char *param, json_t *schema, const char *prefix, dy_buf *g)
{
    size_t bytes = json_dumpb(schema, NULL, 0, JSON_COMPACT);
    if (bytes > c->lim->max_schema_bytes)
        return bad(c, param, "invalid_value", "Invalid '%s': the schema is %zu bytes as compact "
                   "JSON; this server's limit is %zu (--max-schema-bytes).", param, bytes,
                   c->lim->max_schema_bytes);
    /* The grammar must fit a REQUEST frame. */
    dy_schema_opts opts = {.max_grammar_bytes = DY_WIRE_MAX_GRAMMAR};
    dy_schema_error e;
    dy_schema_status st = dy_schema_rules(schema, prefix, &opts, g, &e);
    if (st == DY_SCHEMA_OK)
        return 0;
    if (st == DY_SCHEMA_NOMEM)
        return oom(c);
    char q[MAX_PARAM];
    pfmt(q, sizeof q, "%s%s%s", param, e.param[0] ? "." : "", e.param);
    return bad(c, q, st == DY_SCHEMA_UNSUPPORTED ? "unsupported_parameter" : "invalid_value",
               "Invalid '%s': %s", q, e.message);
}

/* The schema compiled to the request's grammar text. */
static int compile_schema(pctx *c, const char *param, json_t *schema)
{
    dy_buf g = {0};
    if (schema_rules(c, param, schema, "root", &g)) {
        dy_buf_free(&g);
        return -1;
    }
    return take_grammar(c, &g);
}

static int json_object_grammar(pctx *c)
{
    dy_buf g = {0};
    dy_json_object_rules("root", NULL, &g);
    return take_grammar(c, &g);
}

static int parse_json_schema(pctx *c, const char *base, json_t *js)
{
    char p[MAX_PARAM], q[MAX_PARAM];
    const char *s = NULL;
    bool strict = false;
    pfmt(p, sizeof p, "%s.json_schema", base);
    if (!js || json_is_null(js))
        return missing(c, p);
    if (!json_is_object(js))
        return bad_type(c, p, "an object", js);
    json_t *name = json_object_get(js, "name"), *desc = json_object_get(js, "description"),
           *st = json_object_get(js, "strict"), *schema = json_object_get(js, "schema");
    pfmt(q, sizeof q, "%s.name", p);
    if (get_name(c, q, name, &s))
        return -1;
    pfmt(q, sizeof q, "%s.description", p);
    if (desc && !json_is_null(desc) && get_string(c, q, desc, &s))
        return -1;
    /* The schema is enforced either way: strict only says whether the client asked for it. */
    pfmt(q, sizeof q, "%s.strict", p);
    if (st && !json_is_null(st) && get_bool(c, q, st, &strict))
        return -1;
    pfmt(q, sizeof q, "%s.schema", p);
    if (!schema || json_is_null(schema))
        return missing(c, q);
    if (!json_is_object(schema))
        return bad_type(c, q, "an object", schema);
    return compile_schema(c, q, schema);
}

/* {"type": "text" | "json_object" | "json_schema", "json_schema": {...}} at `base`. */
static int parse_format(pctx *c, const char *base, json_t *v)
{
    char q[MAX_PARAM];
    const char *t = NULL;
    if (!json_is_object(v))
        return bad_type(c, base, "an object", v);
    pfmt(q, sizeof q, "%s.type", base);
    json_t *type = json_object_get(v, "type");
    if (!type || json_is_null(type))
        return missing(c, q);
    if (get_string(c, q, type, &t))
        return -1;
    if (strcmp(t, "text") == 0) {
        c->r->format = DY_FORMAT_TEXT;
        return 0;
    }
    if (strcmp(t, "json_object") == 0) {
        c->r->format = DY_FORMAT_JSON_OBJECT;
        return json_object_grammar(c);
    }
    if (strcmp(t, "json_schema") == 0) {
        c->r->format = DY_FORMAT_JSON_SCHEMA;
        return parse_json_schema(c, base, json_object_get(v, "json_schema"));
    }
    return bad(c, q, "invalid_value", "Invalid value: '%.64s'. Supported values are: 'text', "
               "'json_object' and 'json_schema'.", t);
}

static int f_response_format(pctx *c, const char *name, json_t *v)
{
    return parse_format(c, name, v);
}

/* ==== tools ==== */

/* A function without `parameters` takes none (OpenAI's rule): its arguments are {}. */
static const char NO_PARAMETERS[] = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

/* Function parameters are an object's schema: a "type" other than "object" is refused. */
static int check_parameters_type(pctx *c, const char *param, json_t *schema)
{
    char q[MAX_PARAM];
    json_t *t = json_object_get(schema, "type");
    pfmt(q, sizeof q, "%s.type", param);
    if (t && !(json_is_string(t) && strcmp(json_string_value(t), "object") == 0))
        return bad(c, q, "invalid_value", "Invalid '%s': function parameters must be a JSON Schema "
                   "of type 'object'.", q);
    return 0;
}

/* tools[i].function.parameters: checked, compiled to the tool's argument rules, and kept as
 * compact JSON text for the chat template. */
static int tool_parameters(pctx *c, const char *p, json_t *params, int i)
{
    char q[MAX_PARAM], prefix[32];
    pfmt(q, sizeof q, "%s.parameters", p);
    pfmt(prefix, sizeof prefix, "tool%d", i);
    json_t *schema = params && !json_is_null(params) ? json_incref(params)
                                                     : json_loads(NO_PARAMETERS, 0, NULL);
    dy_buf g = {0};
    int rc = -1;
    if (!schema)
        rc = oom(c);
    else if (!json_is_object(schema))
        rc = bad_type(c, q, "an object", schema);
    else if (!check_parameters_type(c, q, schema) && !schema_rules(c, q, schema, prefix, &g)) {
        if (!dy_buf_cstr(&g))
            rc = oom(c);
        else {
            c->r->tool_rules[i] = (char *)g.data;
            g = (dy_buf){0};
            rc = 0;
        }
    }
    if (rc == 0 && params && !json_is_null(params) &&
        !(c->r->tools[i].parameters = json_dumps(params, JSON_COMPACT)))
        rc = oom(c);
    dy_buf_free(&g);
    json_decref(schema);
    return rc;
}

static int tool_name(pctx *c, const char *p, json_t *fn, int i)
{
    char q[MAX_PARAM];
    const char *s = NULL;
    pfmt(q, sizeof q, "%s.name", p);
    if (get_name(c, q, json_object_get(fn, "name"), &s))
        return -1;
    for (int k = 0; k < i; k++)
        if (strcmp(c->r->tools[k].name, s) == 0)
            return bad(c, q, "invalid_value", "Invalid '%s': the function '%s' is defined twice.", q, s);
    return (c->r->tools[i].name = dup_or_fail(c, s)) ? 0 : -1;
}

/* {"type": "function", "function": {"name", "description", "parameters", "strict"}} */
static int parse_tool(pctx *c, json_t *v, int i)
{
    char p[MAX_PARAM], q[MAX_PARAM];
    const char *s = NULL;
    bool strict = false;
    pfmt(p, sizeof p, "tools[%d]", i);
    if (!json_is_object(v))
        return bad_type(c, p, "an object", v);
    pfmt(q, sizeof q, "%s.type", p);
    json_t *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
    if (!type || json_is_null(type))
        return missing(c, q);
    if (get_string(c, q, type, &s))
        return -1;
    if (strcmp(s, "function") != 0)
        return bad(c, q, "invalid_value", "Invalid value: '%.64s'. Supported values are: "
                   "'function'.", s);
    pfmt(p, sizeof p, "tools[%d].function", i);
    if (!fn || json_is_null(fn))
        return missing(c, p);
    if (!json_is_object(fn))
        return bad_type(c, p, "an object", fn);
    if (tool_name(c, p, fn, i))
        return -1;
    json_t *desc = json_object_get(fn, "description"), *st = json_object_get(fn, "strict");
    pfmt(q, sizeof q, "%s.description", p);
    if (desc && !json_is_null(desc) &&
        (get_string(c, q, desc, &s) || !(c->r->tools[i].description = dup_or_fail(c, s))))
        return -1;
    /* The arguments follow the schema under a forced tool_choice either way. */
    pfmt(q, sizeof q, "%s.strict", p);
    if (st && !json_is_null(st) && get_bool(c, q, st, &strict))
        return -1;
    return tool_parameters(c, p, json_object_get(fn, "parameters"), i);
}

static int f_tools(pctx *c, const char *name, json_t *v)
{
    if (!json_is_array(v))
        return bad_type(c, name, "an array", v);
    size_t n = json_array_size(v);
    if (n > MAX_TOOLS)
        return too_long_array(c, name, MAX_TOOLS, n);
    if (n == 0)
        return 0;
    if (!(c->r->tools = calloc(n, sizeof *c->r->tools)) ||
        !(c->r->tool_rules = calloc(n, sizeof *c->r->tool_rules)))
        return oom(c);
    for (size_t i = 0; i < n; i++) {
        c->r->n_tools = (int)i + 1;
        if (parse_tool(c, json_array_get(v, i), (int)i))
            return -1;
    }
    return 0;
}

/* {"type": "function", "function": {"name": ...}}: the name is looked up in check_tools. */
static int named_choice(pctx *c, json_t *v)
{
    const char *s = NULL;
    json_t *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
    if (!type || json_is_null(type))
        return missing(c, "tool_choice.type");
    if (get_string(c, "tool_choice.type", type, &s))
        return -1;
    if (strcmp(s, "function") != 0)
        return bad(c, "tool_choice.type", "invalid_value", "Invalid value: '%.64s'. Supported "
                   "values are: 'function'.", s);
    if (!fn || json_is_null(fn))
        return missing(c, "tool_choice.function");
    if (!json_is_object(fn))
        return bad_type(c, "tool_choice.function", "an object", fn);
    if (required_string(c, "tool_choice.function.name", json_object_get(fn, "name"), &c->forced_name))
        return -1;
    c->r->tool_choice = DY_TOOLS_FUNCTION;
    return 0;
}

static int f_tool_choice(pctx *c, const char *name, json_t *v)
{
    static const struct { const char *name; dy_api_tool_choice choice; } modes[] = {
        {"none", DY_TOOLS_NONE}, {"auto", DY_TOOLS_AUTO}, {"required", DY_TOOLS_REQUIRED},
    };
    c->has_tool_choice = true;
    if (json_is_object(v))
        return named_choice(c, v);
    if (!json_is_string(v))
        return bad_type(c, name, "a string or an object", v);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(json_string_value(v), modes[i].name) == 0) {
            c->r->tool_choice = modes[i].choice;
            return 0;
        }
    }
    return bad(c, name, "invalid_value", "Invalid value: '%.64s'. Supported values are: 'none', "
               "'auto', 'required' and an object naming a function.", json_string_value(v));
}

static int f_parallel_tool_calls(pctx *c, const char *name, json_t *v)
{
    return get_bool(c, name, v, &c->r->parallel_tool_calls);
}

/* tool_choice against the tools: the default, the named function, what cannot be forced. */
static int check_tools(pctx *c)
{
    dy_api_request *r = c->r;
    if (!c->has_tool_choice)
        r->tool_choice = r->n_tools > 0 ? DY_TOOLS_AUTO : DY_TOOLS_NONE;
    if (r->tool_choice == DY_TOOLS_REQUIRED && r->n_tools == 0)
        return bad(c, "tool_choice", "invalid_value", "Invalid value for 'tool_choice': 'required' "
                   "is only allowed when 'tools' are specified.");
    if (r->tool_choice == DY_TOOLS_FUNCTION) {
        r->tool_forced = -1;
        for (int i = 0; i < r->n_tools; i++)
            if (strcmp(r->tools[i].name, c->forced_name) == 0)
                r->tool_forced = i;
        if (r->tool_forced < 0)
            return bad(c, "tool_choice.function.name", "invalid_value", "Invalid value for "
                       "'tool_choice': no function named '%.64s' was specified in 'tools'.",
                       c->forced_name);
    }
    if (r->tool_choice == DY_TOOLS_AUTO && r->n_tools == 0)
        r->tool_choice = DY_TOOLS_NONE;
    bool forced = r->tool_choice == DY_TOOLS_REQUIRED || r->tool_choice == DY_TOOLS_FUNCTION;
    if (forced && r->format != DY_FORMAT_TEXT)
        return bad(c, "tool_choice", "invalid_value", "Invalid value for 'tool_choice': a forced "
                   "tool call cannot be combined with a JSON 'response_format'.");
    return 0;
}

/* ==== the "dyad" extension object ==== */

/* The regex must compile (UTF mode), so a typo is a 400 now rather than a failure after
 * generation. */
static int check_regex(pctx *c, const char *re, size_t len)
{
    int ec;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, len, PCRE2_UTF, &ec, &off, NULL);
    if (code) {
        pcre2_code_free(code);
        return 0;
    }
    PCRE2_UCHAR msg[160];
    if (pcre2_get_error_message(ec, msg, sizeof msg) < 0)
        snprintf((char *)msg, sizeof msg, "error %d", ec);
    return bad(c, "dyad.answer_regex", "invalid_value",
               "Invalid 'dyad.answer_regex': %s at offset %zu.", (char *)msg, (size_t)off);
}

static int dyad_select(pctx *c, json_t *v)
{
    const char *s = NULL;
    if (get_string(c, "dyad.select", v, &s))
        return -1;
    if (strcmp(s, "majority") == 0)
        c->r->select = DY_SELECT_MAJORITY;
    else if (strcmp(s, "logprob") == 0)
        c->r->select = DY_SELECT_LOGPROB;
    else
        return bad(c, "dyad.select", "invalid_value", "Invalid value: '%.64s'. Supported values "
                   "are: 'majority' and 'logprob'.", s);
    return 0;
}

static int dyad_regex(pctx *c, json_t *v)
{
    const char *s = NULL;
    if (get_string(c, "dyad.answer_regex", v, &s))
        return -1;
    size_t len = json_string_length(v);
    if (len > MAX_REGEX_LEN)
        return too_long_string(c, "dyad.answer_regex", MAX_REGEX_LEN, len);
    if (check_regex(c, s, len))
        return -1;
    return (c->r->answer_regex = dup_or_fail(c, s)) ? 0 : -1;
}

/* Completions' response_format. Chat has the real one, so one request cannot carry two. */
static int dyad_grammar(pctx *c, json_t *v)
{
    if (c->kind == DY_API_CHAT)
        return bad(c, "dyad.grammar", "invalid_value", "Invalid 'dyad.grammar': chat requests "
                   "give it as 'response_format'.");
    return parse_format(c, "dyad.grammar", v);
}

static int dyad_session(pctx *c, json_t *v)
{
    const char *s = NULL;
    if (get_string(c, "dyad.session", v, &s))
        return -1;
    size_t len = json_string_length(v);
    if (len == 0)
        return bad(c, "dyad.session", "invalid_value", "Invalid 'dyad.session': empty.");
    if (len > MAX_SESSION_LEN)
        return too_long_string(c, "dyad.session", MAX_SESSION_LEN, len);
    return (c->r->session = dup_or_fail(c, s)) ? 0 : -1;
}

/* {"expected_ms": N}: when the client expects to send the session's next turn. */
static int dyad_hold(pctx *c, json_t *v)
{
    if (!json_is_object(v))
        return bad_type(c, "dyad.hold", "an object", v);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (strcmp(key, "expected_ms") != 0) {
            char q[80];
            pfmt(q, sizeof q, "dyad.hold.%.40s", key);
            return bad(c, q, "unknown_parameter", "Unrecognized request argument supplied: '%s'.",
                       q);
        }
        double ms;
        if (get_double(c, "dyad.hold.expected_ms", val, 0, false, MAX_HOLD_MS, &ms))
            return -1;
        c->r->hold_ms = (long long)ms;
    }
    if (c->r->hold_ms < 0)
        return missing(c, "dyad.hold.expected_ms");
    return 0;
}

/* Our own object, so unknown keys are errors here: a misspelt option must not be ignored. */
static int f_dyad(pctx *c, const char *name, json_t *v)
{
    const char *key;
    json_t *val;
    if (!json_is_object(v))
        return bad_type(c, name, "an object", v);
    json_object_foreach(v, key, val) {
        char q[64];
        pfmt(q, sizeof q, "dyad.%.40s", key);
        int rc = json_is_null(val) ? 0
               : strcmp(key, "select") == 0 ? dyad_select(c, val)
               : strcmp(key, "answer_regex") == 0 ? dyad_regex(c, val)
               : strcmp(key, "grammar") == 0 ? dyad_grammar(c, val)
               : strcmp(key, "session") == 0 ? dyad_session(c, val)
               : strcmp(key, "hold") == 0 ? dyad_hold(c, val)
               : bad(c, q, "unknown_parameter", "Unrecognized request argument supplied: '%s'.", q);
        if (rc)
            return -1;
    }
    return 0;
}

/* ==== request parsing: the driver ==== */

enum { K_CMPL = 1, K_CHAT = 2, K_BOTH = 3 };

typedef struct {
    const char *name;
    int kinds;
    int (*fn)(pctx *, const char *, json_t *);
} field;

/* Order matters only where two fields set the same thing (max_completion_tokens wins). */
static const field fields[] = {
    {"model", K_BOTH, f_model},
    {"prompt", K_CMPL, f_prompt},
    {"messages", K_CHAT, f_messages},
    {"max_tokens", K_BOTH, f_max_tokens},
    {"max_completion_tokens", K_CHAT, f_max_tokens},
    {"temperature", K_BOTH, f_temperature},
    {"top_p", K_BOTH, f_top_p},
    {"top_k", K_BOTH, f_top_k},
    {"min_p", K_BOTH, f_min_p},
    {"seed", K_BOTH, f_seed},
    {"stop", K_BOTH, f_stop},
    {"stream", K_BOTH, f_stream},
    {"stream_options", K_BOTH, f_stream_options},
    {"n", K_BOTH, f_n},
    {"best_of", K_CMPL, f_best_of},
    {"logprobs", K_BOTH, f_logprobs},
    {"top_logprobs", K_CHAT, f_top_logprobs},
    {"echo", K_CMPL, f_echo},
    {"user", K_BOTH, f_user},
    {"ignore_eos", K_BOTH, f_ignore_eos},
    {"presence_penalty", K_BOTH, f_penalty},
    {"frequency_penalty", K_BOTH, f_penalty},
    {"repetition_penalty", K_BOTH, f_penalty},
    {"logit_bias", K_BOTH, f_unsupported},
    {"response_format", K_CHAT, f_response_format},
    {"tools", K_CHAT, f_tools},
    {"tool_choice", K_CHAT, f_tool_choice},
    {"parallel_tool_calls", K_CHAT, f_parallel_tool_calls},
    {"functions", K_CHAT, f_unsupported},
    {"function_call", K_CHAT, f_unsupported},
    {"suffix", K_CMPL, f_unsupported},
    {"dyad", K_BOTH, f_dyad},
};

static bool depth_ok(json_t *v, int depth)
{
    const char *key;
    json_t *e;
    size_t i;
    if (depth > MAX_DEPTH)
        return false;
    if (json_is_object(v)) {
        json_object_foreach(v, key, e)
            if (!depth_ok(e, depth + 1))
                return false;
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, e)
            if (!depth_ok(e, depth + 1))
                return false;
    }
    return true;
}

static int check_shape(pctx *c)
{
    if (!json_is_object(c->root))
        return bad(c, NULL, NULL, "The request body must be a JSON object, not %s.",
                   type_name(c->root));
    if (!depth_ok(c->root, 1))
        return bad(c, NULL, NULL, "The request body nests deeper than %d levels.", MAX_DEPTH);
    const char *need[] = {"model", c->kind == DY_API_CHAT ? "messages" : "prompt"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(c->root, need[i]);
        if (!v || json_is_null(v))
            return bad(c, need[i], "missing_required_parameter",
                       "Missing required parameter: '%s'.", need[i]);
    }
    return 0;
}

static int parse_fields(pctx *c)
{
    int kind = c->kind == DY_API_CHAT ? K_CHAT : K_CMPL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!(fields[i].kinds & kind))
            continue; /* not a parameter of this endpoint: ignored like any unknown field */
        json_t *v = json_object_get(c->root, fields[i].name);
        if (v && !json_is_null(v) && fields[i].fn(c, fields[i].name, v))
            return -1;
    }
    return 0;
}

/* The sampling settings as the worker receives them (single precision), through the check
 * the worker applies (engine/sampler.c: dy_sampling_check): a value inside this layer's
 * ranges can still round out of the sampler's (top_p 1e-300 is 0 as a float), and such a
 * request must be refused here, before a stream has begun, rather than by the worker. */
static int check_sampling(pctx *c)
{
    const dy_sampling *s = &c->r->sampling;
    const char *field = dy_sampling_check(s);
    if (!field)
        return 0;
    double got = !strcmp(field, "temperature") ? s->temperature
               : !strcmp(field, "top_p") ? s->top_p
               : !strcmp(field, "min_p") ? s->min_p : s->top_k;
    return bad(c, field, "invalid_value", "Invalid '%s': %g, in the single precision the sampler "
               "works in, is outside the range it accepts (docs/api.md).", field, got);
}

/* The sequences one request starts are capped (lim->max_sequences, never above --max-queue):
 * a request that could never be admitted is a 400 naming what makes it large, not a 429
 * that clients would retry forever. */
static int check_sequences(pctx *c)
{
    dy_api_request *r = c->r;
    long long seqs = (long long)(r->kind == DY_API_CHAT ? 1 : r->n_prompts) * r->best_of;
    if (seqs <= c->lim->max_sequences)
        return 0;
    const char *p = r->best_of > r->n ? "best_of" : "n";
    return bad(c, p, "invalid_value", "Invalid '%s': the request asks for %lld sequences "
               "(prompts x max(n, best_of)); the limit is %d.", p, seqs, c->lim->max_sequences);
}

/* The checks that involve more than one parameter. */
static int check_cross(pctx *c)
{
    dy_api_request *r = c->r;
    if (!c->has_best_of)
        r->best_of = r->n;
    if (r->kind == DY_API_CHAT)
        r->best_of = r->n;
    if (r->best_of < r->n)
        return bad(c, "best_of", "invalid_value", "Invalid 'best_of': must be at least n (%d), "
                   "but got %d.", r->n, r->best_of);
    if (r->stream && r->best_of > r->n)
        return bad(c, "best_of", "invalid_value", "Invalid 'best_of': a request with best_of > n "
                   "cannot be streamed.");
    if (c->has_stream_options && !r->stream)
        return bad(c, "stream_options", "invalid_value", "The 'stream_options' parameter is only "
                   "allowed when 'stream' is enabled.");
    if (c->has_top_logprobs && r->top_logprobs > 0 && !r->logprobs) /* 0 asks for nothing */
        return bad(c, "top_logprobs", "invalid_value", "Invalid 'top_logprobs': 'logprobs' must be "
                   "set to true when 'top_logprobs' is used.");
    if (check_sequences(c) || check_sampling(c))
        return -1;
    if (r->answer_regex && r->select != DY_SELECT_MAJORITY)
        return bad(c, "dyad.answer_regex", "invalid_value", "Invalid 'dyad.answer_regex': it is "
                   "only used with dyad.select = \"majority\".");
    if (r->hold_ms >= 0 && !r->session)
        return bad(c, "dyad.hold", "invalid_value", "Invalid 'dyad.hold': it holds a "
                   "conversation's KV for its next turn, and needs 'dyad.session' to name it.");
    if (r->session && (r->best_of > 1 || (r->kind == DY_API_COMPLETIONS && r->n_prompts > 1)))
        return bad(c, "dyad.session", "invalid_value", "Invalid 'dyad.session': a turn of a "
                   "conversation is one prompt and one sample (n and best_of 1).");
    return r->kind == DY_API_CHAT ? check_tools(c) : 0;
}

static void set_defaults(pctx *c)
{
    dy_api_request *r = c->r;
    r->kind = c->kind;
    r->sampling = dy_sampling_default();
    r->n = 1;
    /* OpenAI's default for completions is 16 tokens; for chat, whatever context is left. */
    r->max_tokens_auto = c->kind == DY_API_CHAT;
    r->max_tokens = r->max_tokens_auto ? c->lim->max_context : 16;
    r->parallel_tool_calls = true;
    r->hold_ms = -1;
}

static int bad_json(pctx *c, const json_error_t *je)
{
    if (json_error_code(je) == json_error_out_of_memory)
        return oom(c);
    return bad(c, NULL, NULL, "We could not parse the JSON body of your request: %s (line %d, "
               "column %d).", je->text, je->line, je->column);
}

int dy_api_parse(const char *body, size_t len, dy_api_kind kind, const dy_api_limits *lim,
                 dy_api_request *out, dy_api_error *err)
{
    pctx c = {.kind = kind, .lim = lim, .r = out, .err = err};
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    if (kind != DY_API_COMPLETIONS && kind != DY_API_CHAT) {
        dy_api_error_internal(err, "unknown endpoint kind");
        return -1;
    }
    if (lim->max_body_bytes > 0 && len > lim->max_body_bytes) {
        dy_api_error_too_large(err, lim->max_body_bytes);
        return -1;
    }
    json_error_t je;
    c.root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!c.root)
        return bad_json(&c, &je);
    set_defaults(&c);
    int rc = check_shape(&c) || parse_fields(&c) || check_cross(&c) ? -1 : 0;
    json_decref(c.root);
    if (rc)
        dy_api_request_free(out);
    return rc;
}

void dy_api_request_free(dy_api_request *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    for (int i = 0; i < r->n_messages; i++) {
        dy_chat_msg *m = &r->messages[i];
        for (int k = 0; k < m->n_calls; k++) {
            free(m->calls[k].id);
            free(m->calls[k].name);
            free(m->calls[k].arguments);
        }
        free(m->calls);
        free(m->tool_call_id);
        free(m->content);
    }
    for (int i = 0; i < r->n_tools; i++) {
        free(r->tools[i].name);
        free(r->tools[i].description);
        free(r->tools[i].parameters);
        free(r->tool_rules[i]);
    }
    free(r->tools);
    free(r->tool_rules);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->prompts);
    free(r->messages);
    free(r->stop);
    free(r->model);
    free(r->user);
    free(r->answer_regex);
    free(r->session);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}

dy_api_limits dy_api_limits_default(int context)
{
    return (dy_api_limits){
        .max_body_bytes = 4u << 20,
        .max_prompts = 64,
        .max_n = 64,
        .max_sequences = 64,
        .max_stop = 4,
        .max_stop_len = 256,
        .max_context = context > 0 ? context : 2048,
        .max_messages = 512,
        .vocab_size = 0,
        .max_schema_bytes = 64u << 10,
        .max_response_bytes = 16u << 20,
        .max_token_bytes = 0,
    };
}

int dy_api_max_new_tokens(const dy_api_request *r, int prompt_tokens, const dy_api_limits *lim,
                          dy_api_error *err)
{
    const char *what = r->kind == DY_API_CHAT ? "messages" : "prompt";
    int left = lim->max_context - prompt_tokens;
    if (prompt_tokens < 1) {
        dy_api_error_set(err, 400, "invalid_request_error", "invalid_value", what,
                         "Invalid '%s': the prompt is empty.", what);
        return -1;
    }
    if (r->max_tokens_auto && left >= 1)
        return left;
    if (!r->max_tokens_auto && r->max_tokens < DY_API_MIN_NEW_TOKENS) {
        dy_api_error_set(err, 400, "invalid_request_error", "integer_below_min_value",
                         "max_tokens", "Invalid 'max_tokens': integer below minimum value. "
                         "Expected a value >= %d, but got %d instead (0, echo-only scoring, "
                         "needs echo with logprobs, which this server does not serve yet).",
                         DY_API_MIN_NEW_TOKENS, r->max_tokens);
        return -1;
    }
    if (!r->max_tokens_auto && r->max_tokens <= left)
        return r->max_tokens;
    if (r->max_tokens_auto)
        dy_api_error_set(err, 400, "invalid_request_error", "context_length_exceeded", what,
                         "This model's maximum context length is %d tokens. However, your %s "
                         "resulted in %d tokens, which leaves no room for the completion.",
                         lim->max_context, what, prompt_tokens);
    else
        dy_api_error_set(err, 400, "invalid_request_error", "context_length_exceeded", what,
                         "This model's maximum context length is %d tokens. However, you "
                         "requested %lld tokens (%d in the %s, %d for the completion). Please "
                         "reduce the length of the %s or completion.", lim->max_context,
                         (long long)prompt_tokens + r->max_tokens, prompt_tokens, what,
                         r->max_tokens, what);
    return -1;
}

/* Bytes of JSON per character of a token's text at worst (a control character is \u00XX),
 * per byte of chat logprobs' "bytes" arrays ("255,"), around one logprob entry (its keys,
 * the number, the punctuation), and around a whole answer and each of its choices. */
#define JSON_BYTES_PER_CHAR 6
#define JSON_BYTES_PER_BYTE 4
#define JSON_LOGPROB_ENTRY 64
#define JSON_ANSWER_BYTES 1024
#define JSON_CHOICE_BYTES 512

size_t dy_api_response_bound(const dy_api_request *r, int64_t out_tokens, const dy_api_limits *lim)
{
    double L = lim->max_token_bytes > 0 ? lim->max_token_bytes : 16;
    double per_token = JSON_BYTES_PER_CHAR * L; /* the text */
    if (r->logprobs) { /* the token and each alternative: text, bytes, logprob */
        double entry = JSON_LOGPROB_ENTRY + (JSON_BYTES_PER_CHAR + JSON_BYTES_PER_BYTE) * L;
        per_token += entry * (1 + (r->top_logprobs > 0 ? r->top_logprobs : 0));
    }
    int prompts = r->kind == DY_API_CHAT ? 1 : r->n_prompts;
    double choices = (double)prompts * (r->select != DY_SELECT_NONE ? 1 : r->n);
    double bytes = JSON_ANSWER_BYTES + JSON_CHOICE_BYTES * choices + per_token * (double)out_tokens;
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

int dy_api_check_response_size(const dy_api_request *r, int64_t out_tokens,
                               const dy_api_limits *lim, dy_api_error *err)
{
    if (r->stream || lim->max_response_bytes == 0)
        return 0;
    size_t bound = dy_api_response_bound(r, out_tokens, lim);
    if (bound <= lim->max_response_bytes)
        return 0;
    const char *param = r->logprobs && r->top_logprobs > 0
                            ? (r->kind == DY_API_CHAT ? "top_logprobs" : "logprobs")
                        : r->n > 1 ? "n" : "max_tokens";
    dy_api_error_set(err, 400, "invalid_request_error", "response_too_large", param,
                     "This request's answer could take up to %zu bytes (%lld tokens over its "
                     "choices%s), more than this server's limit of %zu (--max-response-bytes). "
                     "Lower max_tokens, n or the logprobs asked for, or stream the answer.",
                     bound, (long long)out_tokens, r->logprobs ? ", with logprobs" : "",
                     lim->max_response_bytes);
    return -1;
}

/* ==== responses ==== */

static json_t *head(dy_jb *b, const dy_api_meta *m, const char *object)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "id", dy_json_str(m->id));
    dy_jb_set(b, o, "object", json_string(object));
    dy_jb_set(b, o, "created", json_integer(m->created));
    dy_jb_set(b, o, "model", dy_json_str(m->model));
    if (m->system_fingerprint)
        dy_jb_set(b, o, "system_fingerprint", dy_json_str(m->system_fingerprint));
    return o;
}

/* OpenAI's finish_reason: null until the choice ends, then "length" or "stop" — the API has
 * no word for a cancelled or failed choice, so one that still reaches a client reads "stop". */
static json_t *finish_json(dy_end f)
{
    if (f == DY_END_NONE)
        return json_null();
    return json_string(dy_end_name(f == DY_END_LENGTH ? DY_END_LENGTH : DY_END_STOP));
}

static json_t *usage_json(dy_jb *b, const dy_api_usage *u)
{
    json_t *o = json_object(), *details = json_object();
    dy_jb_set(b, o, "prompt_tokens", json_integer(u->prompt_tokens));
    dy_jb_set(b, o, "completion_tokens", json_integer(u->completion_tokens));
    dy_jb_set(b, o, "total_tokens", json_integer((json_int_t)u->prompt_tokens + u->completion_tokens));
    dy_jb_set(b, details, "cached_tokens", json_integer(u->cached_tokens));
    dy_jb_set(b, o, "prompt_tokens_details", details);
    return o;
}

/* Completions' top_logprobs entry: {token: logprob, ...}. Alternatives whose texts collide
 * keep the first (most likely) one. */
static json_t *top_dict(dy_jb *b, const dy_api_token_lp *t)
{
    json_t *d = json_object();
    for (int k = 0; k < t->n_top; k++)
        dy_jb_set_first(b, d, t->top[k].token, t->top[k].len, jreal(t->top[k].logprob));
    return d;
}

/* {"tokens","token_logprobs","top_logprobs","text_offset"} */
static json_t *cmpl_logprobs(dy_jb *b, const dy_api_choice *ch)
{
    if (!ch->has_logprobs)
        return json_null();
    json_t *o = json_object(), *toks = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    for (int i = 0; i < ch->n_logprobs; i++) {
        const dy_api_token_lp *t = &ch->logprobs[i];
        dy_jb_append(b, toks, dy_json_strn(t->token, t->len));
        dy_jb_append(b, lps, t->no_logprob ? json_null() : jreal(t->logprob));
        dy_jb_append(b, tops, t->no_logprob ? json_null() : top_dict(b, t));
        dy_jb_append(b, offs, json_integer(t->text_offset));
    }
    dy_jb_set(b, o, "tokens", toks);
    dy_jb_set(b, o, "token_logprobs", lps);
    dy_jb_set(b, o, "top_logprobs", tops);
    dy_jb_set(b, o, "text_offset", offs);
    return o;
}

static json_t *bytes_json(dy_jb *b, const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        dy_jb_append(b, a, json_integer((unsigned char)s[i]));
    return a;
}

static json_t *chat_lp_entry(dy_jb *b, const char *tok, size_t len, float lp)
{
    json_t *e = json_object();
    dy_jb_set(b, e, "token", dy_json_strn(tok, len));
    dy_jb_set(b, e, "logprob", jreal(lp));
    dy_jb_set(b, e, "bytes", bytes_json(b, tok, len));
    return e;
}

/* {"content":[{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}]} */
static json_t *chat_logprobs(dy_jb *b, const dy_api_choice *ch)
{
    if (!ch->has_logprobs)
        return json_null();
    json_t *o = json_object(), *content = json_array();
    for (int i = 0; i < ch->n_logprobs; i++) {
        const dy_api_token_lp *t = &ch->logprobs[i];
        json_t *e = chat_lp_entry(b, t->token, t->len, t->logprob), *top = json_array();
        for (int k = 0; k < t->n_top; k++)
            dy_jb_append(b, top, chat_lp_entry(b, t->top[k].token, t->top[k].len, t->top[k].logprob));
        dy_jb_set(b, e, "top_logprobs", top);
        dy_jb_append(b, content, e);
    }
    dy_jb_set(b, o, "content", content);
    return o;
}

static json_t *cmpl_choice(dy_jb *b, const dy_api_choice *ch)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "index", json_integer(ch->index));
    dy_jb_set(b, o, "text", dy_json_strn(ch->text, ch->text ? ch->len : 0));
    dy_jb_set(b, o, "logprobs", cmpl_logprobs(b, ch));
    dy_jb_set(b, o, "finish_reason", finish_json(ch->finish));
    return o;
}

/* A choice's finish_reason: "tool_calls" when its answer was calls. */
static json_t *choice_finish_json(const dy_api_choice *ch)
{
    return ch->finish_tool_calls ? json_string("tool_calls") : finish_json(ch->finish);
}

/* {"id", "type": "function", "function": {"name", "arguments"}}; a streamed piece after the
 * call's first carries only its index and arguments. */
static json_t *tool_call_json(dy_jb *b, const dy_api_tool_call *t, bool delta)
{
    json_t *o = json_object(), *fn = json_object();
    if (delta)
        dy_jb_set(b, o, "index", json_integer(t->index));
    if (t->id) {
        dy_jb_set(b, o, "id", dy_json_str(t->id));
        dy_jb_set(b, o, "type", json_string("function"));
    }
    if (t->name)
        dy_jb_set(b, fn, "name", dy_json_str(t->name));
    dy_jb_set(b, fn, "arguments", dy_json_str(t->arguments ? t->arguments : ""));
    dy_jb_set(b, o, "function", fn);
    return o;
}

static json_t *tool_calls_json(dy_jb *b, const dy_api_choice *ch, bool delta)
{
    json_t *a = json_array();
    for (int k = 0; k < ch->n_tool_calls; k++)
        dy_jb_append(b, a, tool_call_json(b, &ch->tool_calls[k], delta));
    return a;
}

static json_t *chat_choice(dy_jb *b, const dy_api_choice *ch)
{
    json_t *o = json_object(), *msg = json_object();
    bool calls = ch->n_tool_calls > 0;
    dy_jb_set(b, msg, "role", json_string("assistant"));
    dy_jb_set(b, msg, "content", calls && !ch->text ? json_null()
                                 : dy_json_strn(ch->text, ch->text ? ch->len : 0));
    if (calls)
        dy_jb_set(b, msg, "tool_calls", tool_calls_json(b, ch, false));
    dy_jb_set(b, o, "index", json_integer(ch->index));
    dy_jb_set(b, o, "message", msg);
    dy_jb_set(b, o, "logprobs", chat_logprobs(b, ch));
    dy_jb_set(b, o, "finish_reason", choice_finish_json(ch));
    return o;
}

char *dy_api_response_json(const dy_api_meta *m, const dy_api_choice *ch, int n,
                           const dy_api_usage *u, json_t *dyad)
{
    dy_jb b = {0};
    bool chat = m->kind == DY_API_CHAT;
    json_t *o = head(&b, m, chat ? "chat.completion" : "text_completion"), *arr = json_array();
    for (int i = 0; i < n; i++)
        dy_jb_append(&b, arr, chat ? chat_choice(&b, &ch[i]) : cmpl_choice(&b, &ch[i]));
    dy_jb_set(&b, o, "choices", arr);
    if (u)
        dy_jb_set(&b, o, "usage", usage_json(&b, u));
    if (dyad)
        dy_jb_set(&b, o, "dyad", json_incref(dyad));
    return jdone(&b, o);
}

/* A chat delta: the role (and "" content) on a choice's first chunk, then the content, and
 * {} on the chunk that carries only the finish reason. */
static json_t *chat_delta(dy_jb *b, const dy_api_choice *ch)
{
    json_t *d = json_object();
    if (ch->first)
        dy_jb_set(b, d, "role", json_string("assistant"));
    if (ch->first || ch->text)
        dy_jb_set(b, d, "content", dy_json_strn(ch->text, ch->text ? ch->len : 0));
    if (ch->n_tool_calls > 0)
        dy_jb_set(b, d, "tool_calls", tool_calls_json(b, ch, true));
    return d;
}

static json_t *chunk_choice(dy_jb *b, const dy_api_choice *ch, bool chat)
{
    if (!chat)
        return cmpl_choice(b, ch);
    json_t *o = json_object();
    dy_jb_set(b, o, "index", json_integer(ch->index));
    dy_jb_set(b, o, "delta", chat_delta(b, ch));
    dy_jb_set(b, o, "logprobs", chat_logprobs(b, ch));
    dy_jb_set(b, o, "finish_reason", choice_finish_json(ch));
    return o;
}

static const char *chunk_object(const dy_api_meta *m)
{
    return m->kind == DY_API_CHAT ? "chat.completion.chunk" : "text_completion";
}

char *dy_api_chunk_json(const dy_api_meta *m, const dy_api_choice *ch, int n, bool usage_null)
{
    return dy_api_chunk_json_dyad(m, ch, n, usage_null, NULL);
}

char *dy_api_chunk_json_dyad(const dy_api_meta *m, const dy_api_choice *ch, int n,
                             bool usage_null, json_t *dyad)
{
    dy_jb b = {0};
    json_t *o = head(&b, m, chunk_object(m)), *arr = json_array();
    for (int i = 0; i < n; i++)
        dy_jb_append(&b, arr, chunk_choice(&b, &ch[i], m->kind == DY_API_CHAT));
    dy_jb_set(&b, o, "choices", arr);
    if (usage_null)
        dy_jb_set(&b, o, "usage", json_null());
    if (dyad)
        dy_jb_set(&b, o, "dyad", json_incref(dyad));
    return jdone(&b, o);
}

char *dy_api_usage_chunk_json(const dy_api_meta *m, const dy_api_usage *u)
{
    dy_jb b = {0};
    json_t *o = head(&b, m, chunk_object(m));
    dy_jb_set(&b, o, "choices", json_array());
    dy_jb_set(&b, o, "usage", usage_json(&b, u));
    return jdone(&b, o);
}

char *dy_sse_frame(const char *json)
{
    if (!json)
        return NULL;
    size_t n = strlen(json);
    char *f = malloc(n + 9);
    if (!f)
        return NULL;
    memcpy(f, "data: ", 6);
    memcpy(f + 6, json, n);
    memcpy(f + 6 + n, "\n\n", 3);
    return f;
}

static json_t *model_json(dy_jb *b, const dy_api_model *m)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "id", dy_json_str(m->id));
    dy_jb_set(b, o, "object", json_string("model"));
    dy_jb_set(b, o, "created", json_integer(m->created));
    dy_jb_set(b, o, "owned_by", dy_json_str(m->owned_by ? m->owned_by : "dyad"));
    return o;
}

char *dy_api_models_json(const dy_api_model *m, int n)
{
    dy_jb b = {0};
    json_t *o = json_object(), *data = json_array();
    dy_jb_set(&b, o, "object", json_string("list"));
    for (int i = 0; i < n; i++)
        dy_jb_append(&b, data, model_json(&b, &m[i]));
    dy_jb_set(&b, o, "data", data);
    return jdone(&b, o);
}

char *dy_api_model_json(const dy_api_model *m)
{
    dy_jb b = {0};
    return jdone(&b, model_json(&b, m));
}
