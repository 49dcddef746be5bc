/* toolcall.c — owns the tool-call syntaxes of toolcall.h: per family, the envelope of a forced
 * call's grammar, the parser that finds calls in a finished answer, the streaming rule that
 * holds back what may become a call, and the call ids.
 *
 * Three syntaxes cover the families: tags (ChatML and the generic envelope, which differ only
 * in the newlines inside the tags), Llama 3.1's bare JSON object, and Mistral's array. JSON is
 * read with jansson (JSON_DISABLE_EOF_CHECK reads one value and says where it ended). */
#include "serve/front/toolcall.h"
#include "grammar/schema.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SYNTAX_TAGS, SYNTAX_LLAMA, SYNTAX_MISTRAL } syntax;

static const char TAG_OPEN[] = "<tool_call>", TAG_CLOSE[] = "</tool_call>";
static const char MISTRAL_MARK[] = "[TOOL_CALLS]", PYTHON_TAG[] = "<|python_tag|>";

static syntax syntax_of(dy_chat_family f)
{
    if (f == DY_CHAT_LLAMA31)
        return SYNTAX_LLAMA;
    if (f == DY_CHAT_MISTRAL_V3 || f == DY_CHAT_MISTRAL_V3_TEKKEN || f == DY_CHAT_MISTRAL_V7 ||
        f == DY_CHAT_MISTRAL_V7_TEKKEN)
        return SYNTAX_MISTRAL;
    return SYNTAX_TAGS;
}

/* ChatML writes a newline after <tool_call> and before </tool_call>; the generic envelope
 * does not. */
static const char *tag_pad(dy_chat_family f)
{
    return f == DY_CHAT_CHATML ? "\n" : "";
}

/* ---- the grammar ---- */

static void literal(dy_buf *out, const char *s)
{
    dy_schema_literal(out, s, strlen(s));
}

/* call<i> ::= {"name": "N", "arguments": tool<i>} (Llama: "parameters") */
static void call_rule(dy_buf *out, int i, const char *name, const char *args_key)
{
    char head[160];
    snprintf(head, sizeof head, "{\"name\": \"%s\", \"%s\": ", name, args_key);
    char rule[32];
    snprintf(rule, sizeof rule, "call%d ::= ", i);
    dy_buf_append_str(out, rule);
    literal(out, head);
    snprintf(rule, sizeof rule, " tool%d ", i);
    dy_buf_append_str(out, rule);
    literal(out, "}");
    dy_buf_append_str(out, "\n");
}

/* The envelope of one call, then of the others when parallel: `first ... sep ...`. */
static void envelope(dy_buf *out, const char *open, const char *close, const char *sep,
                     bool parallel)
{
    dy_buf_append_str(out, "root ::= ");
    literal(out, open);
    dy_buf_append_str(out, " call ");
    if (parallel) {
        dy_buf_append_str(out, "( ");
        literal(out, sep);
        dy_buf_append_str(out, " call )* ");
    }
    literal(out, close);
    dy_buf_append_str(out, "\n");
}

void dy_toolcall_grammar(dy_chat_family f, const char *const *names, const char *const *rules,
                         int n, int forced, bool parallel, int32_t call_token, dy_buf *out)
{
    syntax sx = syntax_of(f);
    dy_buf_append_str(out, "call ::= ");
    for (int i = 0, alt = 0; i < n; i++) {
        if (forced >= 0 && i != forced)
            continue;
        char ref[32];
        snprintf(ref, sizeof ref, "%scall%d", alt++ ? " | " : "", i);
        dy_buf_append_str(out, ref);
    }
    dy_buf_append_str(out, "\n");
    for (int i = 0; i < n; i++) {
        if (forced >= 0 && i != forced)
            continue;
        call_rule(out, i, names[i], sx == SYNTAX_LLAMA ? "parameters" : "arguments");
        dy_buf_append_str(out, rules[i]);
        dy_buf_append_str(out, "\n");
    }
    if (sx == SYNTAX_LLAMA) {
        dy_buf_append_str(out, "root ::= call\n");
    } else if (sx == SYNTAX_MISTRAL) {
        /* [TOOL_CALLS] is a control token: named by its id where the vocabulary has it, then
         * the array, with the space the template writes before it (v3, v7) allowed. */
        dy_buf_append_str(out, "root ::= ");
        if (call_token >= 0)
            dy_buf_printf(out, "<[%d]> ", (int)call_token);
        dy_buf_append_str(out, "\" \"? ");
        dy_buf_append_str(out, "mistral-calls\nmistral-calls ::= ");
        literal(out, "[");
        dy_buf_append_str(out, " call ");
        if (parallel) {
            dy_buf_append_str(out, "( ");
            literal(out, ", ");
            dy_buf_append_str(out, " call )* ");
        }
        literal(out, "]");
        dy_buf_append_str(out, "\n");
    } else {
        char open[32], close[32], sep[72];
        const char *pad = tag_pad(f);
        snprintf(open, sizeof open, "%s%s", TAG_OPEN, pad);
        snprintf(close, sizeof close, "%s%s", pad, TAG_CLOSE);
        snprintf(sep, sizeof sep, "%s\n%s", close, open);
        envelope(out, open, close, sep, parallel);
    }
}

/* ---- parsing ---- */

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static size_t skip_ws(const char *s, size_t len, size_t p)
{
    while (p < len && is_ws(s[p]))
        p++;
    return p;
}

static size_t trim_end(const char *s, size_t n)
{
    while (n > 0 && is_ws(s[n - 1]))
        n--;
    return n;
}

static bool starts(const char *s, size_t len, size_t p, const char *lit)
{
    size_t n = strlen(lit);
    return p <= len && len - p >= n && memcmp(s + p, lit, n) == 0;
}

/* Where `lit` first occurs in s[0..len), or len. */
static size_t find(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    for (size_t p = 0; p + n <= len; p++)
        if (memcmp(s + p, lit, n) == 0)
            return p;
    return len;
}

/* One JSON value at s[*p..len); *p moves past it. NULL if there is none. */
static json_t *read_json(const char *s, size_t len, size_t *p)
{
    json_error_t e;
    json_t *v = json_loadb(s + *p, len - *p, JSON_DISABLE_EOF_CHECK, &e);
    if (v)
        *p += (size_t)e.position;
    return v;
}

static bool known(const char *name, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

/* Appends the call in object v ({"name", "arguments"}; Llama's "parameters" too) to r.
 * 1 added, 0 not a call, -1 out of memory. */
static int add_call(json_t *v, const char *const *names, int n, dy_toolcall_found *r)
{
    json_t *name = json_object_get(v, "name"), *args = json_object_get(v, "arguments");
    if (!args)
        args = json_object_get(v, "parameters");
    if (!json_is_object(v) || !json_is_string(name) || !json_is_object(args) ||
        !known(json_string_value(name), names, n))
        return 0;
    dy_toolcall *grown = realloc(r->calls, sizeof *grown * (size_t)(r->n_calls + 1));
    if (!grown)
        return -1;
    r->calls = grown;
    dy_toolcall *c = &r->calls[r->n_calls];
    c->name = strdup(json_string_value(name));
    c->arguments = json_dumps(args, JSON_COMPACT | JSON_REAL_PRECISION(17));
    r->n_calls++;
    return c->name && c->arguments ? 1 : -1;
}

/* Reads one call object at *p and adds it: 1, 0 (not a call), -1 (memory). */
static int read_call(const char *s, size_t len, size_t *p, const char *const *names, int n,
                     dy_toolcall_found *r)
{
    json_t *v = read_json(s, len, p);
    int rc = v ? add_call(v, names, n, r) : 0;
    json_decref(v);
    return rc;
}

/* <tool_call> {...} </tool_call>, repeated, whitespace between and after. */
static int parse_tags(const char *s, size_t len, const char *const *names, int n, dy_toolcall_found *r)
{
    size_t p = find(s, len, TAG_OPEN);
    if (p == len)
        return 0;
    r->content_len = trim_end(s, p);
    while ((p = skip_ws(s, len, p)) < len) {
        if (!starts(s, len, p, TAG_OPEN))
            return 0;
        p = skip_ws(s, len, p + strlen(TAG_OPEN));
        int rc = read_call(s, len, &p, names, n, r);
        if (rc <= 0)
            return rc;
        p = skip_ws(s, len, p);
        if (!starts(s, len, p, TAG_CLOSE))
            return 0;
        p += strlen(TAG_CLOSE);
    }
    return r->n_calls;
}

/* The whole answer: {...}, or several separated by whitespace or ';'. */
static int parse_llama(const char *s, size_t len, const char *const *names, int n, dy_toolcall_found *r)
{
    size_t p = skip_ws(s, len, 0);
    if (starts(s, len, p, PYTHON_TAG))
        p += strlen(PYTHON_TAG);
    while ((p = skip_ws(s, len, p)) < len) {
        if (s[p] == ';' && r->n_calls > 0) {
            p++;
            continue;
        }
        if (s[p] != '{')
            return 0;
        int rc = read_call(s, len, &p, names, n, r);
        if (rc <= 0)
            return rc;
    }
    return r->n_calls;
}

/* [TOOL_CALLS] [{...}, ...], or a bare array that opens the answer; nothing after it. */
static int parse_mistral(const char *s, size_t len, const char *const *names, int n,
                         dy_toolcall_found *r)
{
    size_t p = find(s, len, MISTRAL_MARK);
    if (p < len) {
        r->content_len = trim_end(s, p);
        p += strlen(MISTRAL_MARK);
    } else {
        p = 0;
    }
    p = skip_ws(s, len, p);
    if (p >= len || s[p] != '[')
        return 0;
    json_t *arr = read_json(s, len, &p);
    size_t i;
    json_t *v;
    int rc = json_is_array(arr) && json_array_size(arr) > 0 ? 1 : 0;
    json_array_foreach(arr, i, v) {
        if (rc <= 0)
            break;
        rc = add_call(v, names, n, r);
    }
    json_decref(arr);
    if (rc <= 0)
        return rc;
    return skip_ws(s, len, p) == len ? r->n_calls : 0;
}

void dy_toolcall_found_free(dy_toolcall_found *r)
{
    for (int i = 0; r && i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    if (r) {
        free(r->calls);
        memset(r, 0, sizeof *r);
    }
}

int dy_toolcall_parse(dy_chat_family f, const char *text, size_t len, const char *const *names,
                      int n_names, dy_toolcall_found *out)
{
    memset(out, 0, sizeof *out);
    int rc;
    switch (syntax_of(f)) {
    case SYNTAX_LLAMA: rc = parse_llama(text, len, names, n_names, out); break;
    case SYNTAX_MISTRAL: rc = parse_mistral(text, len, names, n_names, out); break;
    default: rc = parse_tags(text, len, names, n_names, out); break;
    }
    if (rc <= 0) /* not calls after all (or memory ran out): nothing is kept */
        dy_toolcall_found_free(out);
    return rc;
}

/* ---- streaming ---- */

/* The length of the longest suffix of s[0..len) that is a proper prefix of lit. */
static size_t partial_suffix(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    for (size_t k = n - 1 < len ? n - 1 : len; k > 0; k--)
        if (memcmp(s + len - k, lit, k) == 0)
            return k;
    return 0;
}

/* Text before `mark` (or before what may become it). */
static size_t before_mark(const char *s, size_t len, const char *mark)
{
    size_t p = find(s, len, mark);
    if (p == len)
        p = len - partial_suffix(s, len, mark);
    return trim_end(s, p);
}

size_t dy_toolcall_content_prefix(dy_chat_family f, const char *text, size_t len)
{
    size_t first = skip_ws(text, len, 0);
    switch (syntax_of(f)) {
    case SYNTAX_LLAMA: /* a call is the whole answer: it opens with '{' or the python tag */
        return first == len || text[first] == '{' || text[first] == '<' ? 0 : trim_end(text, len);
    case SYNTAX_MISTRAL:
        if (first == len || text[first] == '[')
            return 0;
        return before_mark(text, len, MISTRAL_MARK);
    default:
        return before_mark(text, len, TAG_OPEN);
    }
}

/* ---- ids ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void dy_toolcall_id(uint64_t seed, int choice, int call, char out[32])
{
    uint64_t x = seed ^ ((uint64_t)(uint32_t)choice << 32) ^ (uint32_t)call;
    uint64_t a = splitmix64(&x), b = splitmix64(&x);
    snprintf(out, 32, "call_%016llx%08llx", (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffu));
}
