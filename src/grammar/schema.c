/* schema.c — JSON Schema (a subset) and plain JSON compiled to grammar text (see schema.h).
 *
 * One pass over the schema: each subschema becomes a rule (or a reference to one of the shared
 * rules every call emits first: strings, numbers, any value), its body written to a buffer of
 * its own while the rules of its children go straight to the output. A `$ref` target is
 * compiled once, under its own rule name registered before its body, so recursion is a plain
 * reference. Two checks make recursion safe: a reference back into a target still being
 * compiled must sit inside an object or array opened since (else the rule would be
 * left-recursive), and afterwards every target must admit some finite value (a fixpoint; a
 * required property that is its own object again never ends).
 *
 * The principle throughout: every text the grammar accepts validates. Where a keyword cannot
 * be compiled exactly, it is refused with its path rather than approximated. */
#include "grammar/schema_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- grammar text */

void dy_schema_literal(dy_buf *out, const char *s, size_t n)
{
    dy_buf_append(out, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            dy_buf_printf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            dy_buf_printf(out, "\\x%02x", c);
        else
            dy_buf_append(out, &s[i], 1);
    }
    dy_buf_append(out, "\"", 1);
}

/* One byte (or range) inside [...]: letters and digits as themselves, anything else as \xHH so
 * no member can be read as syntax. */
void dy_schema_class_byte(dy_buf *out, unsigned c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        dy_buf_printf(out, "%c", (char)c);
    else
        dy_buf_printf(out, "\\x%02x", c);
}

void dy_schema_class_range(dy_buf *out, unsigned lo, unsigned hi)
{
    dy_schema_class_byte(out, lo);
    if (hi > lo) {
        dy_buf_append_str(out, "-");
        dy_schema_class_byte(out, hi);
    }
}

/* A quantifier for {min,max} (unbounded: max ignored), "" for exactly one. */
void dy_schema_quantifier(dy_buf *out, uint64_t min, uint64_t max, bool unbounded)
{
    if (unbounded && min == 0)
        dy_buf_append_str(out, "*");
    else if (unbounded && min == 1)
        dy_buf_append_str(out, "+");
    else if (unbounded)
        dy_buf_printf(out, "{%llu,}", (unsigned long long)min);
    else if (min == 0 && max == 1)
        dy_buf_append_str(out, "?");
    else if (min == max && min != 1)
        dy_buf_printf(out, "{%llu}", (unsigned long long)min);
    else if (min != max)
        dy_buf_printf(out, "{%llu,%llu}", (unsigned long long)min, (unsigned long long)max);
}

/* The shared rules, '@' standing for the prefix and '~' for max_indent. A JSON string's
 * characters: anything but '"', '\' and control bytes raw (the grammar's negated class only
 * matches whole UTF-8 characters), or an escape; \u escapes exclude \u0000 and lone
 * surrogates (a high one must be followed by a low one), which jansson refuses. */
static const char base_rules[] =
    "@-ws ::= ( \" \" | \"\\n\" \" \"{0,~} )?\n"
    "@-hex ::= [0-9a-fA-F]\n"
    "@-u4 ::= [1-9a-cA-CeEfF] @-hex @-hex @-hex | \"0\" ( [1-9a-fA-F] @-hex @-hex | \"0\" ( "
    "[1-9a-fA-F] @-hex | \"0\" [1-9a-fA-F] ) ) | [dD] ( [0-7] @-hex @-hex | [89abAB] @-hex "
    "@-hex \"\\\\u\" [dD] [c-fC-F] @-hex @-hex )\n"
    "@-char ::= [^\\x22\\x5c\\x00-\\x1f] | \"\\\\\" ( [\\x22\\x5c/bfnrt] | \"u\" @-u4 )\n"
    "@-string ::= \"\\\"\" @-char* \"\\\"\"\n"
    "@-uint ::= \"0\" | [1-9] [0-9]*\n"
    "@-integer ::= \"-\"? @-uint\n"
    "@-number ::= \"-\"? @-uint ( \".\" [0-9]+ )? ( [eE] ( \"+\" | \"-\" )? [0-9]+ )?\n"
    "@-boolean ::= \"true\" | \"false\"\n"
    "@-null ::= \"null\"\n"
    "@-value ::= @-object | @-array | @-string | @-number | @-boolean | @-null\n"
    "@-object ::= \"{\" @-ws ( @-member ( \",\" @-ws @-member )* @-ws )? \"}\"\n"
    "@-member ::= @-string \":\" @-ws @-value\n"
    "@-array ::= \"[\" @-ws ( @-value ( \",\" @-ws @-value )* @-ws )? \"]\"\n";

/* What a pattern's `.` matches, as JSON text: one character other than the line terminators
 * \n, \r, U+2028 and U+2029 (ECMA-262's `.`), written raw (the multi-byte ones as UTF-8 byte
 * classes, so the two terminators can be left out) or as a short escape. */
static const char dot_rules[] =
    "@-u8 ::= [\\xc2-\\xdf] [\\x80-\\xbf] | \"\\xe0\" [\\xa0-\\xbf] [\\x80-\\xbf] | "
    "[\\xe1\\xe3-\\xec\\xee\\xef] [\\x80-\\xbf] [\\x80-\\xbf] | \"\\xe2\" ( [\\x81-\\xbf] "
    "[\\x80-\\xbf] | \"\\x80\" [\\x80-\\xa7\\xaa-\\xbf] ) | \"\\xed\" [\\x80-\\x9f] "
    "[\\x80-\\xbf] | \"\\xf0\" [\\x90-\\xbf] [\\x80-\\xbf] [\\x80-\\xbf] | [\\xf1-\\xf3] "
    "[\\x80-\\xbf] [\\x80-\\xbf] "
    "[\\x80-\\xbf] | \"\\xf4\" [\\x80-\\x8f] [\\x80-\\xbf] [\\x80-\\xbf]\n"
    "@-dot ::= [\\x20\\x21\\x23-\\x5b\\x5d-\\x7f] | @-u8 | \"\\\\\" [\\x22\\x5c/bft]\n";

static void append_template(dy_buf *out, const char *t, const char *prefix, int indent)
{
    for (; *t; t++) {
        if (*t == '@')
            dy_buf_append_str(out, prefix);
        else if (*t == '~')
            dy_buf_printf(out, "%d", indent);
        else
            dy_buf_append(out, t, 1);
    }
}

static dy_schema_opts resolve_opts(const dy_schema_opts *o)
{
    dy_schema_opts r = o ? *o : (dy_schema_opts){0};
    if (r.max_depth <= 0)
        r.max_depth = DY_SCHEMA_DEFAULT_MAX_DEPTH;
    if (r.max_grammar_bytes == 0)
        r.max_grammar_bytes = DY_SCHEMA_DEFAULT_MAX_GRAMMAR_BYTES;
    if (r.max_indent <= 0)
        r.max_indent = DY_SCHEMA_DEFAULT_MAX_INDENT;
    return r;
}

void dy_json_object_rules(const char *prefix, const dy_schema_opts *opts, dy_buf *out)
{
    dy_schema_opts o = resolve_opts(opts);
    append_template(out, base_rules, prefix, o.max_indent);
    dy_buf_printf(out, "%s ::= %s-object\n", prefix, prefix);
}

/* ---------------------------------------------------------------- the compiler's state */

typedef struct {
    const json_t *schema;   /* the $ref's target */
    char rule[64];
    char path[256];         /* where the target is, for its errors */
    int containers;         /* objects/arrays open when its compilation began */
    bool in_progress;
    bool productive;        /* admits a finite value (the fixpoint after compiling) */
} def_entry;

typedef struct {
    const char *prefix;
    dy_schema_opts o;
    const json_t *root;
    dy_buf *out;
    size_t start;           /* out->len before the call */
    int n_rules;
    int depth;
    int containers;         /* objects/arrays open around the subschema being compiled */
    bool used_dot;
    def_entry *defs;
    size_t n_defs, cap_defs;
    char path[256];
    dy_schema_error *e;
    bool failed;
} ctx;

static bool fail(ctx *c, dy_schema_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail(ctx *c, dy_schema_status st, const char *fmt, ...)
{
    if (c->failed)
        return false;
    c->failed = true;
    c->e->status = st;
    snprintf(c->e->param, sizeof c->e->param, "%s", c->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->e->message, sizeof c->e->message, fmt, ap);
    va_end(ap);
    return false;
}

/* Path steps: each returns the old length for path_pop. */
static size_t path_key(ctx *c, const char *key)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "%s%s", old ? "." : "", key);
    return old;
}

static size_t path_index(ctx *c, size_t i)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "[%zu]", i);
    return old;
}

static void path_pop(ctx *c, size_t old)
{
    c->path[old] = '\0';
}

/* A failure at path.key. */
static bool fail_key(ctx *c, const char *key, dy_schema_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail_key(ctx *c, const char *key, dy_schema_status st, const char *fmt, ...)
{
    if (c->failed)
        return false;
    path_key(c, key);
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(c, st, "%s", msg);
}

static void new_rule_name(ctx *c, char name[64])
{
    snprintf(name, 64, "%s-%d", c->prefix, ++c->n_rules);
}

static bool check_size(ctx *c, size_t pending)
{
    if (c->out->oom)
        return fail(c, DY_SCHEMA_NOMEM, "out of memory compiling the schema");
    if (c->out->len - c->start + pending > c->o.max_grammar_bytes)
        return fail(c, DY_SCHEMA_TOO_LARGE,
                    "the schema compiles to a grammar over max_grammar_bytes (%zu bytes)",
                    c->o.max_grammar_bytes);
    return true;
}

/* Appends `name ::= body`; body is freed. */
static bool emit_rule(ctx *c, const char *name, dy_buf *body)
{
    bool ok = !body->oom || fail(c, DY_SCHEMA_NOMEM, "out of memory compiling the schema");
    if (ok && (ok = check_size(c, body->len + strlen(name) + 6))) {
        dy_buf_printf(c->out, "%s ::= ", name);
        dy_buf_append(c->out, body->data, body->len);
        dy_buf_append_str(c->out, "\n");
        ok = check_size(c, 0);
    }
    dy_buf_free(body);
    return ok;
}

/* ---------------------------------------------------------------- keywords */

enum {
    T_STRING = 1, T_INTEGER = 2, T_NUMBER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32,
    T_ARRAY = 64, T_ALL = 127,
};

static const struct {
    const char *name;
    int type;
} type_names[] = {
    {"string", T_STRING}, {"integer", T_INTEGER}, {"number", T_NUMBER}, {"boolean", T_BOOLEAN},
    {"null", T_NULL}, {"object", T_OBJECT}, {"array", T_ARRAY},
};

/* Every keyword compiled, with the types it constrains (0: not type-specific). */
enum { K_ANNOTATION, K_TYPED, K_TYPE, K_COMBINATOR, K_VALUES };

static const struct {
    const char *name;
    int kind;
    int types;
} keywords[] = {
    {"title", K_ANNOTATION, 0}, {"description", K_ANNOTATION, 0}, {"$schema", K_ANNOTATION, 0},
    {"$id", K_ANNOTATION, 0}, {"default", K_ANNOTATION, 0}, {"examples", K_ANNOTATION, 0},
    {"$comment", K_ANNOTATION, 0}, {"deprecated", K_ANNOTATION, 0},
    {"readOnly", K_ANNOTATION, 0}, {"writeOnly", K_ANNOTATION, 0},
    {"$defs", K_ANNOTATION, 0}, {"definitions", K_ANNOTATION, 0},
    {"type", K_TYPE, 0},
    {"properties", K_TYPED, T_OBJECT}, {"required", K_TYPED, T_OBJECT},
    {"additionalProperties", K_TYPED, T_OBJECT},
    {"items", K_TYPED, T_ARRAY}, {"minItems", K_TYPED, T_ARRAY}, {"maxItems", K_TYPED, T_ARRAY},
    {"minLength", K_TYPED, T_STRING}, {"maxLength", K_TYPED, T_STRING},
    {"pattern", K_TYPED, T_STRING}, {"format", K_TYPED, T_STRING},
    {"minimum", K_TYPED, T_NUMBER | T_INTEGER}, {"maximum", K_TYPED, T_NUMBER | T_INTEGER},
    {"exclusiveMinimum", K_TYPED, T_NUMBER | T_INTEGER},
    {"exclusiveMaximum", K_TYPED, T_NUMBER | T_INTEGER},
    {"$ref", K_COMBINATOR, 0}, {"anyOf", K_COMBINATOR, 0}, {"oneOf", K_COMBINATOR, 0},
    {"allOf", K_COMBINATOR, 0}, {"enum", K_VALUES, 0}, {"const", K_VALUES, 0},
};

static int keyword_index(const char *key)
{
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (strcmp(keywords[i].name, key) == 0)
            return (int)i;
    return -1;
}

/* The types a keyword constrains; 0 for one that is not type-specific or not known. */
static int keyword_types(const char *key)
{
    int k = keyword_index(key);
    return k < 0 ? 0 : keywords[k].types;
}

/* Every key of the schema is a keyword compiled here. */
static bool check_keywords(ctx *c, const json_t *s)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (keyword_index(key) < 0)
            return fail_key(c, key, DY_SCHEMA_UNSUPPORTED,
                            "the keyword '%s' is not supported", key);
    }
    return true;
}

/* For $ref, anyOf, oneOf, allOf, enum and const: no sibling but annotations (and `type`
 * where allow_type), since a sibling would intersect with them. */
static bool only_annotations_beside(ctx *c, const json_t *s, const char *self, bool allow_type)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        int k = keywords[keyword_index(key)].kind;
        if (strcmp(key, self) == 0 || k == K_ANNOTATION || (allow_type && k == K_TYPE))
            continue;
        return fail_key(c, key, DY_SCHEMA_UNSUPPORTED,
                        "'%s' beside '%s' is not supported", key, self);
    }
    return true;
}

/* The types a schema allows: its `type`, or else the types its keywords constrain (a schema
 * with `properties` and no `type` is an object), or else every type. */
static bool schema_types(ctx *c, const json_t *s, int *types)
{
    const json_t *t = json_object_get(s, "type");
    *types = 0;
    if (!t) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)s, key, v)
            *types |= keyword_types(key);
        if (*types & T_NUMBER)
            *types &= ~T_INTEGER;
        if (!*types)
            *types = T_ALL;
        return true;
    }
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    if (!json_is_string(t) && (!json_is_array(t) || n == 0))
        return fail_key(c, "type", DY_SCHEMA_INVALID,
                        "'type' must be a type name or a non-empty list of them");
    for (size_t i = 0; i < n; i++) {
        const json_t *name = json_is_array(t) ? json_array_get(t, i) : t;
        int bit = 0;
        for (size_t k = 0; json_is_string(name) && k < sizeof type_names / sizeof type_names[0];
             k++)
            if (strcmp(json_string_value(name), type_names[k].name) == 0)
                bit = type_names[k].type;
        if (!bit)
            return fail_key(c, "type", DY_SCHEMA_INVALID,
                            "'type' names an unknown type (string, number, integer, boolean, "
                            "null, object, array)");
        *types |= bit;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        int applies = keyword_types(key);
        if (applies && !(applies & *types))
            return fail_key(c, key, DY_SCHEMA_INVALID,
                            "'%s' does not apply to the schema's type", key);
    }
    return true;
}

/* A non-negative integer keyword; *present false if absent. */
static bool count_keyword(ctx *c, const json_t *s, const char *key, uint64_t *v, bool *present)
{
    const json_t *x = json_object_get(s, key);
    *present = x != NULL;
    if (!x)
        return true;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return fail_key(c, key, DY_SCHEMA_INVALID, "'%s' must be a non-negative integer", key);
    *v = (uint64_t)json_integer_value(x);
    return true;
}

/* ---------------------------------------------------------------- canonical JSON values */

/* The shortest %g text that reads back as the same double. */
static void append_real(dy_buf *b, double d)
{
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    dy_buf_append_str(b, tmp);
}

static bool append_json_string(dy_buf *b, const char *s, size_t n)
{
    json_t *str = json_stringn(s, n);
    char *text = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    if (!text)
        return false;
    dy_buf_append_str(b, text);
    free(text);
    return true;
}

/* v as compact JSON text, object members in their order. */
static bool append_canonical(dy_buf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        bool first = true, ok = true;
        dy_buf_append_str(b, "{");
        json_object_foreach((json_t *)v, key, x) {
            if (!first)
                dy_buf_append_str(b, ",");
            first = false;
            ok = ok && append_json_string(b, key, strlen(key));
            dy_buf_append_str(b, ":");
            ok = ok && append_canonical(b, x);
        }
        dy_buf_append_str(b, "}");
        return ok;
    }
    case JSON_ARRAY: {
        bool ok = true;
        dy_buf_append_str(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                dy_buf_append_str(b, ",");
            ok = ok && append_canonical(b, json_array_get(v, i));
        }
        dy_buf_append_str(b, "]");
        return ok;
    }
    case JSON_STRING:
        return append_json_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        dy_buf_printf(b, "%lld", (long long)json_integer_value(v));
        return true;
    case JSON_REAL:
        append_real(b, json_real_value(v));
        return true;
    case JSON_TRUE:
        dy_buf_append_str(b, "true");
        return true;
    case JSON_FALSE:
        dy_buf_append_str(b, "false");
        return true;
    default:
        dy_buf_append_str(b, "null");
        return true;
    }
}

static int value_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return T_OBJECT;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_STRING: return T_STRING;
    case JSON_INTEGER: return T_INTEGER | T_NUMBER;
    case JSON_REAL: {
        double d = json_real_value(v);
        return d == floor(d) ? T_INTEGER | T_NUMBER : T_NUMBER;
    }
    case JSON_TRUE: case JSON_FALSE: return T_BOOLEAN;
    default: return T_NULL;
    }
}

/* One value's literal (const) or the alternatives of all (enum). */
static bool compile_values(ctx *c, const json_t *s, dy_buf *body)
{
    const char *key = json_object_get(s, "enum") ? "enum" : "const";
    if (json_object_get(s, "enum") && json_object_get(s, "const"))
        return fail_key(c, "const", DY_SCHEMA_UNSUPPORTED,
                        "'const' beside 'enum' is not supported");
    if (!only_annotations_beside(c, s, key, true))
        return false;
    int types = T_ALL;
    if (json_object_get(s, "type") && !schema_types(c, s, &types))
        return false;
    const json_t *v = json_object_get(s, key);
    bool is_enum = key[0] == 'e';
    if (is_enum && (!json_is_array(v) || json_array_size(v) == 0))
        return fail_key(c, key, DY_SCHEMA_INVALID, "'enum' must be a non-empty array");
    size_t n = is_enum ? json_array_size(v) : 1;
    size_t old = path_key(c, key);
    for (size_t i = 0; i < n; i++) {
        const json_t *x = is_enum ? json_array_get(v, i) : v;
        if (!(value_type(x) & types)) {
            if (is_enum)
                path_index(c, i);
            return fail(c, DY_SCHEMA_INVALID, "this value does not have the schema's type");
        }
        dy_buf text = {0};
        bool ok = append_canonical(&text, x);
        if (i)
            dy_buf_append_str(body, " | ");
        dy_schema_literal(body, (const char *)text.data, text.len);
        dy_buf_free(&text);
        if (!ok)
            return fail(c, DY_SCHEMA_NOMEM, "out of memory compiling the schema");
        if (!check_size(c, body->len))
            return false;
    }
    path_pop(c, old);
    return true;
}

/* ---------------------------------------------------------------- numbers */

#define INT64_LIMIT 9223372036854775807.0 /* 2^63 - 1 rounds to 2^63 as a double */

static bool read_bound(ctx *c, const json_t *s, const char *key, bound *b)
{
    const json_t *v = json_object_get(s, key);
    *b = (bound){0};
    if (!v || json_is_boolean(v))
        return true;
    if (!json_is_number(v))
        return fail_key(c, key, DY_SCHEMA_INVALID, "'%s' must be a number", key);
    b->set = true;
    b->key = key;
    b->d = json_number_value(v);
    if (json_is_integer(v)) {
        b->is_int = true;
        b->i = json_integer_value(v);
    } else if (b->d == floor(b->d) && fabs(b->d) < INT64_LIMIT) {
        b->is_int = true;
        b->i = (int64_t)b->d;
    }
    return true;
}

/* The stricter of an inclusive and an exclusive bound on one side (lower: the larger). */
static bound stricter(bound incl, bound excl, bool lower)
{
    if (!incl.set)
        return excl;
    if (!excl.set)
        return incl;
    if (excl.d == incl.d)
        return excl;
    return (excl.d > incl.d) == lower ? excl : incl;
}

static bool read_bounds(ctx *c, const json_t *s, bound *lo, bound *hi)
{
    bound mn, mx, xmn, xmx;
    if (!read_bound(c, s, "minimum", &mn) || !read_bound(c, s, "maximum", &mx) ||
        !read_bound(c, s, "exclusiveMinimum", &xmn) || !read_bound(c, s, "exclusiveMaximum", &xmx))
        return false;
    if (json_is_true(json_object_get(s, "exclusiveMinimum")))
        mn.excl = true;
    if (json_is_true(json_object_get(s, "exclusiveMaximum")))
        mx.excl = true;
    xmn.excl = xmx.excl = true;
    *lo = stricter(mn, xmn, true);
    *hi = stricter(mx, xmx, false);
    return true;
}

static bool integer_bound(ctx *c, const bound *bd, bool lower, int64_t *out)
{
    double d = bd->d;
    if (bd->is_int && !bd->excl) {
        *out = bd->i;
        return true;
    }
    double r = lower ? (bd->excl ? floor(d) + 1 : ceil(d)) : (bd->excl ? ceil(d) - 1 : floor(d));
    if (bd->is_int && bd->excl) {
        if (lower ? bd->i == INT64_MAX : bd->i == INT64_MIN)
            return fail(c, DY_SCHEMA_INVALID, "no integer lies within the bounds");
        *out = lower ? bd->i + 1 : bd->i - 1;
        return true;
    }
    if (fabs(r) >= INT64_LIMIT)
        return fail_key(c, bd->key, DY_SCHEMA_UNSUPPORTED,
                        "bounds beyond 64-bit integers are not supported");
    *out = (int64_t)r;
    return true;
}

static bool compile_integer(ctx *c, const json_t *s, dy_buf *body)
{
    bound lo, hi;
    if (!read_bounds(c, s, &lo, &hi))
        return false;
    if (!lo.set && !hi.set) {
        dy_buf_printf(body, "%s-integer", c->prefix);
        return true;
    }
    int64_t l = 0, h = 0;
    if ((lo.set && !integer_bound(c, &lo, true, &l)) ||
        (hi.set && !integer_bound(c, &hi, false, &h)))
        return false;
    if (lo.set && hi.set && l > h)
        return fail(c, DY_SCHEMA_INVALID, "no integer lies within the bounds");
    dy_schema_integer_range(body, lo.set, l, hi.set, h);
    return true;
}

static bool compile_number(ctx *c, const json_t *s, dy_buf *body)
{
    bound lo, hi;
    if (!read_bounds(c, s, &lo, &hi))
        return false;
    if (!lo.set && !hi.set) {
        dy_buf_printf(body, "%s-number", c->prefix);
        return true;
    }
    const bound *fractional = lo.set && !lo.is_int ? &lo : hi.set && !hi.is_int ? &hi : NULL;
    if (fractional)
        return fail_key(c, fractional->key, DY_SCHEMA_UNSUPPORTED,
                        "bounds of a 'number' must be integers (or use type 'integer')");
    if (lo.set && hi.set && (lo.i > hi.i || (lo.i == hi.i && (lo.excl || hi.excl))))
        return fail(c, DY_SCHEMA_INVALID, "no number lies within the bounds");
    dy_schema_number_range(body, &lo, &hi);
    return true;
}

/* ---------------------------------------------------------------- strings and patterns */

static const struct {
    const char *name;
    const char *text; /* '@' for the prefix */
} formats[] = {
    {"date", "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] "
             "| \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] "
             "| \"30\" ) "
             "| \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"},
    {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]+ )? "
             "( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
    {"uuid", "@-hex{8} \"-\" @-hex{4} \"-\" @-hex{4} \"-\" @-hex{4} \"-\" @-hex{12}"},
};

static bool append_format(ctx *c, const char *name, dy_buf *body)
{
    if (strcmp(name, "date-time") == 0) {
        append_format(c, "date", body);
        dy_buf_append_str(body, " \"T\" ");
        return append_format(c, "time", body);
    }
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(formats[i].name, name) == 0) {
            append_template(body, formats[i].text, c->prefix, 0);
            return true;
        }
    return fail_key(c, "format", DY_SCHEMA_UNSUPPORTED,
                    "the format '%s' is not supported (date, time, date-time and uuid are)", name);
}

static bool compile_pattern(ctx *c, const char *pattern, size_t n, dy_buf *body)
{
    dy_schema_regex rx = {.prefix = c->prefix};
    bool ok = dy_schema_pattern(&rx, pattern, n, body);
    c->used_dot |= rx.used_dot;
    return ok || fail_key(c, "pattern", DY_SCHEMA_UNSUPPORTED, "%s", rx.why);
}

static bool compile_string(ctx *c, const json_t *s, dy_buf *body)
{
    uint64_t min = 0, max = 0;
    bool has_min, has_max;
    if (!count_keyword(c, s, "minLength", &min, &has_min) ||
        !count_keyword(c, s, "maxLength", &max, &has_max))
        return false;
    if (has_min && has_max && min > max)
        return fail_key(c, "minLength", DY_SCHEMA_INVALID, "'minLength' is over 'maxLength'");
    if (min > 10000 || max > 10000)
        return fail_key(c, min > 10000 ? "minLength" : "maxLength", DY_SCHEMA_UNSUPPORTED,
                        "string lengths over 10000 are not supported");
    const json_t *pattern = json_object_get(s, "pattern"), *format = json_object_get(s, "format");
    if (pattern && !json_is_string(pattern))
        return fail_key(c, "pattern", DY_SCHEMA_INVALID, "'pattern' must be a string");
    if (format && !json_is_string(format))
        return fail_key(c, "format", DY_SCHEMA_INVALID, "'format' must be a string");
    if ((pattern || format) && (has_min || has_max))
        return fail_key(c, has_min ? "minLength" : "maxLength", DY_SCHEMA_UNSUPPORTED,
                        "'%s' beside '%s' is not supported", has_min ? "minLength" : "maxLength",
                        pattern ? "pattern" : "format");
    if (pattern && format)
        return fail_key(c, "format", DY_SCHEMA_UNSUPPORTED,
                        "'format' beside 'pattern' is not supported");
    if (pattern)
        return compile_pattern(c, json_string_value(pattern), json_string_length(pattern), body);
    if (format) {
        dy_buf_append_str(body, "\"\\\"\" ");
        bool ok = append_format(c, json_string_value(format), body);
        dy_buf_append_str(body, " \"\\\"\"");
        return ok;
    }
    if (!has_min && !has_max) {
        dy_buf_printf(body, "%s-string", c->prefix);
        return true;
    }
    if (has_max && max == 0) {
        dy_schema_literal(body, "\"\"", 2);
        return true;
    }
    dy_buf_printf(body, "\"\\\"\" %s-char", c->prefix);
    dy_schema_quantifier(body, min, max, !has_max);
    dy_buf_append_str(body, " \"\\\"\"");
    return true;
}

/* ---------------------------------------------------------------- objects, arrays, unions */

static bool compile(ctx *c, const json_t *s, char name[64]);

/* Compiles the subschema s at path.key (and .index if index >= 0). */
static bool compile_at(ctx *c, const json_t *s, const char *key, long index, char name[64])
{
    size_t old = key ? path_key(c, key) : strlen(c->path);
    if (index >= 0)
        path_index(c, (size_t)index);
    bool ok = compile(c, s, name);
    if (ok)
        path_pop(c, old);
    return ok;
}

/* A map: every member's value matches `values` (additionalProperties as a schema). */
static bool compile_map(ctx *c, const json_t *values, dy_buf *body)
{
    char v[64];
    if (!compile_at(c, values, "additionalProperties", -1, v))
        return false;
    const char *p = c->prefix;
    dy_buf_printf(body, "\"{\" %s-ws ( %s-string \":\" %s-ws %s ( \",\" %s-ws %s-string \":\" "
                        "%s-ws %s )* %s-ws )? \"}\"", p, p, p, v, p, p, p, v, p);
    return true;
}

/* Whether `name` is in the `required` array (already checked to hold strings). */
static bool is_required(const json_t *required, const char *name)
{
    for (size_t i = 0; i < json_array_size(required); i++)
        if (strcmp(json_string_value(json_array_get(required, i)), name) == 0)
            return true;
    return false;
}

static bool check_required(ctx *c, const json_t *required, const json_t *props)
{
    if (!required)
        return true;
    if (!json_is_array(required))
        return fail_key(c, "required", DY_SCHEMA_INVALID, "'required' must be an array of names");
    for (size_t i = 0; i < json_array_size(required); i++) {
        const json_t *x = json_array_get(required, i);
        const char *why = !json_is_string(x) ? "'required' must hold property names"
                        : !json_object_get(props, json_string_value(x))
                              ? "a required property that is not in 'properties'" : NULL;
        if (why) {
            size_t old = path_key(c, "required");
            path_index(c, i);
            fail(c, DY_SCHEMA_INVALID, "%s", why);
            path_pop(c, old);
            return false;
        }
    }
    return true;
}

/* Properties in the schema's order, each optional one skippable. With n properties:
 *   A_i (i >= 1): the members from i on after at least one member: ( "," ws m_i )? A_{i+1}
 *   N_i: the members from i on, none before, at least one: m_i A_{i+1} | N_{i+1} (optional i)
 * and the object is "{" ws N_0 ws "}", or "{" ws ( N_0 ws )? "}" when nothing is required. */
static bool compile_properties(ctx *c, const json_t *props, const json_t *required, dy_buf *body)
{
    size_t n = json_object_size(props);
    const char *p = c->prefix;
    if (n == 0) {
        dy_buf_printf(body, "\"{\" %s-ws \"}\"", p);
        return true;
    }
    char (*member)[64] = calloc(n, sizeof *member);     /* the member's text: key, ':', value */
    char (*after)[64] = calloc(n + 1, sizeof *after);   /* A_i */
    bool *req = calloc(n, sizeof *req);
    bool ok = member && after && req;
    if (!ok)
        fail(c, DY_SCHEMA_NOMEM, "out of memory compiling the schema");
    const char *key;
    json_t *v;
    size_t i = 0;
    size_t old = ok ? path_key(c, "properties") : 0;
    json_object_foreach((json_t *)props, key, v) {
        if (!ok)
            break;
        char value[64];
        dy_buf m = {0};
        ok = compile_at(c, v, key, -1, value);
        dy_buf text = {0};
        if (ok && !append_json_string(&text, key, strlen(key)))
            ok = fail(c, DY_SCHEMA_NOMEM, "out of memory compiling the schema");
        dy_buf_append_str(&text, ":");
        if (ok) {
            dy_schema_literal(&m, (const char *)text.data, text.len);
            dy_buf_printf(&m, " %s-ws %s", p, value);
            new_rule_name(c, member[i]);
            ok = emit_rule(c, member[i], &m);
        }
        dy_buf_free(&m);
        dy_buf_free(&text);
        req[i] = is_required(required, key);
        i++;
    }
    if (ok)
        path_pop(c, old);
    for (size_t k = n - 1; ok && k >= 1; k--) {
        dy_buf a = {0};
        dy_buf_printf(&a, "( \",\" %s-ws %s )%s%s%s", p, member[k], req[k] ? "" : "?",
                      after[k + 1][0] ? " " : "", after[k + 1]);
        new_rule_name(c, after[k]);
        ok = emit_rule(c, after[k], &a);
    }
    /* N_i: a chain of names from the first required property back to 0. */
    char next[64] = "";
    size_t last = 0;
    while (last + 1 < n && !req[last])
        last++;
    for (size_t k = last + 1; ok && k-- > 0;) {
        dy_buf nb = {0};
        char name[64];
        dy_buf_printf(&nb, "%s%s%s", member[k], after[k + 1][0] ? " " : "", after[k + 1]);
        if (!req[k] && next[0])
            dy_buf_printf(&nb, " | %s", next);
        new_rule_name(c, name);
        ok = emit_rule(c, name, &nb);
        memcpy(next, name, sizeof next);
    }
    bool all_optional = true;
    for (size_t k = 0; k < n && req; k++)
        all_optional = all_optional && !req[k];
    if (ok)
        dy_buf_printf(body, all_optional ? "\"{\" %s-ws ( %s %s-ws )? \"}\""
                                         : "\"{\" %s-ws %s %s-ws \"}\"", p, next, p);
    free(member);
    free(after);
    free(req);
    return ok;
}

/* Objects. `additionalProperties` missing counts as false beside `properties` (the strict
 * meaning, which OpenAI's strict mode requires be written out); without `properties`, a
 * missing or true one is any object and a schema one a map. */
static bool compile_object(ctx *c, const json_t *s, dy_buf *body)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *required = json_object_get(s, "required");
    const json_t *extra = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return fail_key(c, "properties", DY_SCHEMA_INVALID, "'properties' must be an object");
    if (extra && !json_is_boolean(extra) && !json_is_object(extra))
        return fail_key(c, "additionalProperties", DY_SCHEMA_INVALID,
                        "'additionalProperties' must be a boolean or a schema");
    if (!check_required(c, required, props))
        return false;
    if (props && extra && !json_is_false(extra))
        return fail_key(c, "additionalProperties", DY_SCHEMA_UNSUPPORTED,
                        "'additionalProperties' other than false beside 'properties' is not "
                        "supported");
    if (props)
        return compile_properties(c, props, required, body);
    if (extra && json_is_false(extra)) {
        dy_buf_printf(body, "\"{\" %s-ws \"}\"", c->prefix);
        return true;
    }
    if (extra && json_is_object(extra))
        return compile_map(c, extra, body);
    dy_buf_printf(body, "%s-object", c->prefix);
    return true;
}

static bool compile_array(ctx *c, const json_t *s, dy_buf *body)
{
    uint64_t min = 0, max = 0;
    bool has_min, has_max;
    if (!count_keyword(c, s, "minItems", &min, &has_min) ||
        !count_keyword(c, s, "maxItems", &max, &has_max))
        return false;
    if (has_min && has_max && min > max)
        return fail_key(c, "minItems", DY_SCHEMA_INVALID, "'minItems' is over 'maxItems'");
    if (min > 10000 || max > 10000)
        return fail_key(c, min > 10000 ? "minItems" : "maxItems", DY_SCHEMA_UNSUPPORTED,
                        "item counts over 10000 are not supported");
    const json_t *items = json_object_get(s, "items");
    if (items && !json_is_object(items) && !json_is_true(items))
        return fail_key(c, "items", DY_SCHEMA_UNSUPPORTED,
                        "'items' must be one schema (a list of schemas is not supported)");
    char item[64];
    if (items) {
        if (!compile_at(c, items, "items", -1, item))
            return false;
    } else {
        snprintf(item, sizeof item, "%s-value", c->prefix);
    }
    const char *p = c->prefix;
    if (has_max && max == 0) {
        dy_buf_printf(body, "\"[\" %s-ws \"]\"", p);
        return true;
    }
    dy_buf_printf(body, "\"[\" %s-ws %s%s", p, min == 0 ? "( " : "", item);
    uint64_t rmin = min ? min - 1 : 0, rmax = max - 1;
    if (!has_max || rmax > 0) {
        dy_buf_printf(body, " ( \",\" %s-ws %s )", p, item);
        dy_schema_quantifier(body, rmin, rmax, !has_max);
    }
    dy_buf_printf(body, " %s-ws%s \"]\"", p, min == 0 ? " )?" : "");
    return true;
}

/* The types each branch may produce (integer and number overlapping), for oneOf. */
static int branch_types(ctx *c, const json_t *s, int depth);

static int ref_target_types(ctx *c, const json_t *s, int depth);

static int branch_types(ctx *c, const json_t *s, int depth)
{
    if (!json_is_object(s) || depth > c->o.max_depth)
        return T_ALL;
    const json_t *v;
    if ((v = json_object_get(s, "const")))
        return value_type(v);
    if ((v = json_object_get(s, "enum"))) {
        int t = 0;
        for (size_t i = 0; i < json_array_size(v); i++)
            t |= value_type(json_array_get(v, i));
        return t;
    }
    if (json_object_get(s, "$ref"))
        return ref_target_types(c, s, depth);
    const char *combos[] = {"anyOf", "oneOf", "allOf"};
    for (size_t k = 0; k < 3; k++)
        if ((v = json_object_get(s, combos[k]))) {
            int t = 0;
            for (size_t i = 0; i < json_array_size(v); i++)
                t |= branch_types(c, json_array_get(v, i), depth + 1);
            return t;
        }
    int t = 0;
    ctx quiet = *c;  /* a copy: any error is reported when the branch is compiled */
    dy_schema_error ignored;
    quiet.e = &ignored;
    if (!schema_types(&quiet, s, &t))
        return T_ALL;
    return t & T_NUMBER ? t | T_INTEGER : t;
}

static const json_t *resolve_pointer(const json_t *root, const char *ref, char *path, size_t len);

static int ref_target_types(ctx *c, const json_t *s, int depth)
{
    const json_t *ref = json_object_get(s, "$ref");
    char path[256];
    const json_t *t = json_is_string(ref) ? resolve_pointer(c->root, json_string_value(ref),
                                                            path, sizeof path) : NULL;
    return t ? branch_types(c, t, depth + 1) : T_ALL;
}

/* A schema with its $refs followed (a few, for a chain of aliases). */
static const json_t *follow_refs(const ctx *c, const json_t *s)
{
    for (int k = 0; k < 8 && json_is_object(s) && json_is_string(json_object_get(s, "$ref")); k++) {
        char path[256];
        const json_t *t = resolve_pointer(c->root, json_string_value(json_object_get(s, "$ref")),
                                          path, sizeof path);
        if (!t)
            break;
        s = t;
    }
    return s;
}

/* How many values a schema is limited to by enum or const (0: not limited), and the i-th.
 * Read only: the schema may be shared between threads, so not even a reference is taken. */
static size_t n_listed(const json_t *s)
{
    return json_object_get(s, "const") ? 1 : json_array_size(json_object_get(s, "enum"));
}

static const json_t *listed(const json_t *s, size_t i)
{
    const json_t *v = json_object_get(s, "const");
    return v ? v : json_array_get(json_object_get(s, "enum"), i);
}

static bool names_required(const json_t *s, const char *name)
{
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *x = json_array_get(req, i);
        if (json_is_string(x) && strcmp(json_string_value(x), name) == 0)
            return true;
    }
    return false;
}

/* Whether two object schemas share a required property whose listed values (enum/const) have
 * none in common: a discriminator, so no value matches both. */
static bool discriminated(const ctx *c, const json_t *a, const json_t *b)
{
    a = follow_refs(c, a);
    b = follow_refs(c, b);
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const char *key;
    json_t *sa;
    json_object_foreach((json_t *)pa, key, sa) {
        const json_t *sb = json_object_get(pb, key);
        if (!sb || !names_required(a, key) || !names_required(b, key))
            continue;
        const json_t *va = follow_refs(c, sa), *vb = follow_refs(c, sb);
        size_t na = n_listed(va), nb = n_listed(vb);
        bool common = na == 0 || nb == 0;
        for (size_t i = 0; !common && i < na; i++)
            for (size_t j = 0; !common && j < nb; j++)
                common = json_equal(listed(va, i), listed(vb, j));
        if (!common)
            return true;
    }
    return false;
}

/* For oneOf: the first branch that may match a value an earlier one matches, or -1. Branches
 * are apart when their types are disjoint or they are objects with a discriminator. */
static long overlapping_branch(ctx *c, const json_t *list)
{
    for (size_t i = 1; i < json_array_size(list); i++)
        for (size_t j = 0; j < i; j++) {
            const json_t *a = json_array_get(list, i), *b = json_array_get(list, j);
            if ((branch_types(c, a, 0) & branch_types(c, b, 0)) && !discriminated(c, a, b))
                return (long)i;
        }
    return -1;
}

/* anyOf, and oneOf where its branches cannot match the same value, which makes "exactly one"
 * the same as "at least one". */
static bool compile_union(ctx *c, const json_t *s, const char *key, dy_buf *body)
{
    if (!only_annotations_beside(c, s, key, false))
        return false;
    const json_t *list = json_object_get(s, key);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return fail_key(c, key, DY_SCHEMA_INVALID, "'%s' must be a non-empty array of schemas",
                        key);
    long overlap = strcmp(key, "oneOf") == 0 ? overlapping_branch(c, list) : -1;
    if (overlap >= 0) {
        path_key(c, key);
        path_index(c, (size_t)overlap);
        return fail(c, DY_SCHEMA_UNSUPPORTED,
                    "oneOf branches that can match the same value are not supported (their "
                    "types overlap and no required property tells them apart by enum or const; "
                    "use anyOf)");
    }
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *branch = json_array_get(list, i);
        char name[64];
        if (!compile_at(c, branch, key, (long)i, name))
            return false;
        dy_buf_printf(body, "%s%s", i ? " | " : "", name);
    }
    return true;
}

static bool compile_all_of(ctx *c, const json_t *s, dy_buf *body)
{
    if (!only_annotations_beside(c, s, "allOf", false))
        return false;
    const json_t *list = json_object_get(s, "allOf");
    if (!json_is_array(list) || json_array_size(list) == 0)
        return fail_key(c, "allOf", DY_SCHEMA_INVALID, "'allOf' must be a non-empty array");
    if (json_array_size(list) > 1)
        return fail_key(c, "allOf", DY_SCHEMA_UNSUPPORTED,
                        "'allOf' with more than one schema is not supported");
    char name[64];
    if (!compile_at(c, json_array_get(list, 0), "allOf", 0, name))
        return false;
    dy_buf_append_str(body, name);
    return true;
}

/* ---------------------------------------------------------------- $ref */

/* A JSON pointer within the document ("#", "#/$defs/a"): its target or NULL, and its place as
 * a param path. */
static const json_t *resolve_pointer(const json_t *root, const char *ref, char *path, size_t len)
{
    path[0] = '\0';
    if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
        return NULL;
    const json_t *at = root;
    const char *p = ref + 1;
    while (*p == '/' && at) {
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1'))
                ch = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof seg)
                seg[n++] = ch;
        }
        seg[n] = '\0';
        size_t used = strlen(path);
        if (json_is_array(at)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            at = *seg && !*end ? json_array_get(at, i) : NULL;
            snprintf(path + used, len - used, "[%s]", seg);
        } else {
            at = json_is_object(at) ? json_object_get(at, seg) : NULL;
            snprintf(path + used, len - used, "%s%s", used ? "." : "", seg);
        }
    }
    return at;
}

static long find_def(const ctx *c, const json_t *target)
{
    for (size_t i = 0; i < c->n_defs; i++)
        if (c->defs[i].schema == target)
            return (long)i;
    return -1;
}

static bool compile_ref(ctx *c, const json_t *s, char name[64])
{
    if (!only_annotations_beside(c, s, "$ref", false))
        return false;
    const json_t *ref = json_object_get(s, "$ref");
    if (!json_is_string(ref))
        return fail_key(c, "$ref", DY_SCHEMA_INVALID, "'$ref' must be a string");
    const char *text = json_string_value(ref);
    char path[256];
    if (text[0] != '#')
        return fail_key(c, "$ref", DY_SCHEMA_UNSUPPORTED,
                        "'$ref' to another document ('%s') is not supported", text);
    const json_t *target = resolve_pointer(c->root, text, path, sizeof path);
    if (!target)
        return fail_key(c, "$ref", DY_SCHEMA_INVALID, "'$ref' '%s' points to nothing", text);
    long d = find_def(c, target);
    if (d >= 0) {
        if (c->defs[d].in_progress && c->defs[d].containers == c->containers)
            return fail_key(c, "$ref", DY_SCHEMA_INVALID,
                            "'$ref' '%s' recurses without bound (a recursion must pass "
                            "through an object or array)", text);
        memcpy(name, c->defs[d].rule, 64);
        return true;
    }
    if (!dy_array_reserve((void **)&c->defs, &c->cap_defs, c->n_defs + 1, sizeof *c->defs))
        return fail(c, DY_SCHEMA_NOMEM, "out of memory compiling the schema");
    d = (long)c->n_defs++;
    def_entry *e = &c->defs[d];
    *e = (def_entry){.schema = target, .containers = c->containers, .in_progress = true};
    new_rule_name(c, e->rule);
    memcpy(e->path, path, sizeof e->path);
    memcpy(name, e->rule, 64);
    char saved[256], inner[64];
    memcpy(saved, c->path, sizeof saved);
    memcpy(c->path, path, sizeof c->path);
    bool ok = compile(c, target, inner);
    if (!ok)
        return false;
    memcpy(c->path, saved, sizeof c->path);
    c->defs[d].in_progress = false;
    dy_buf alias = {0};
    dy_buf_append_str(&alias, inner);
    return emit_rule(c, name, &alias);
}

/* ---------------------------------------------------------------- one subschema */

static bool compile_typed(ctx *c, const json_t *s, dy_buf *body)
{
    int types;
    if (!schema_types(c, s, &types))
        return false;
    if (types == T_ALL) {
        dy_buf_printf(body, "%s-value", c->prefix);
        return true;
    }
    bool ok = true, first = true;
    static const int order[] = {T_STRING, T_NUMBER, T_INTEGER, T_BOOLEAN, T_NULL, T_OBJECT,
                                T_ARRAY};
    for (size_t k = 0; ok && k < sizeof order / sizeof order[0]; k++) {
        int t = order[k];
        if (!(types & t) || (t == T_INTEGER && (types & T_NUMBER)))
            continue; /* an integer is a number already */
        dy_buf_append_str(body, first ? "" : " | ");
        first = false;
        c->containers += t == T_OBJECT || t == T_ARRAY;
        switch (t) {
        case T_STRING: ok = compile_string(c, s, body); break;
        case T_NUMBER: ok = compile_number(c, s, body); break;
        case T_INTEGER: ok = compile_integer(c, s, body); break;
        case T_BOOLEAN: dy_buf_printf(body, "%s-boolean", c->prefix); break;
        case T_NULL: dy_buf_printf(body, "%s-null", c->prefix); break;
        case T_OBJECT: ok = compile_object(c, s, body); break;
        default: ok = compile_array(c, s, body); break;
        }
        c->containers -= t == T_OBJECT || t == T_ARRAY;
    }
    return ok;
}

/* Compiles one subschema into a new rule, its name in `name`. */
static bool compile(ctx *c, const json_t *s, char name[64])
{
    if (json_is_true(s)) {
        snprintf(name, 64, "%s-value", c->prefix);
        return true;
    }
    if (json_is_false(s))
        return fail(c, DY_SCHEMA_INVALID, "the schema false admits no value");
    if (!json_is_object(s))
        return fail(c, DY_SCHEMA_INVALID, "a schema must be an object or a boolean");
    if (c->depth >= c->o.max_depth)
        return fail(c, DY_SCHEMA_TOO_DEEP, "the schema nests deeper than max_depth (%d)",
                    c->o.max_depth);
    if (!check_keywords(c, s))
        return false;
    c->depth++;
    bool ok;
    if (json_object_get(s, "$ref")) {
        ok = compile_ref(c, s, name);
        c->depth--;
        return ok;
    }
    dy_buf body = {0};
    if (json_object_get(s, "enum") || json_object_get(s, "const"))
        ok = compile_values(c, s, &body);
    else if (json_object_get(s, "anyOf"))
        ok = compile_union(c, s, "anyOf", &body);
    else if (json_object_get(s, "oneOf"))
        ok = compile_union(c, s, "oneOf", &body);
    else if (json_object_get(s, "allOf"))
        ok = compile_all_of(c, s, &body);
    else
        ok = compile_typed(c, s, &body);
    c->depth--;
    if (!ok) {
        dy_buf_free(&body);
        return false;
    }
    new_rule_name(c, name);
    return emit_rule(c, name, &body);
}

/* ---------------------------------------------------------------- termination */

static bool productive(const ctx *c, const json_t *s);

static bool any_productive(const ctx *c, const json_t *list)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (productive(c, json_array_get(list, i)))
            return true;
    return false;
}

/* Whether s admits a finite value, given what is known of the $ref targets so far. Only
 * called on compiled (so well-formed) schemas. */
static bool productive(const ctx *c, const json_t *s)
{
    if (!json_is_object(s))
        return true;
    const json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        char path[256];
        long d = find_def(c, resolve_pointer(c->root, json_string_value(v), path, sizeof path));
        return d < 0 || c->defs[d].productive;
    }
    if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "oneOf")) ||
        (v = json_object_get(s, "allOf")))
        return any_productive(c, v);
    if (json_object_get(s, "enum") || json_object_get(s, "const"))
        return true;
    const json_t *t = json_object_get(s, "type");
    bool object_only = json_is_string(t) && strcmp(json_string_value(t), "object") == 0;
    bool array_only = json_is_string(t) && strcmp(json_string_value(t), "array") == 0;
    if (!t && (json_object_get(s, "properties") || json_object_get(s, "required")))
        object_only = true;
    if (object_only) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!productive(c, json_object_get(props, json_string_value(json_array_get(req, i)))))
                return false;
        return true;
    }
    if (array_only) {
        const json_t *min = json_object_get(s, "minItems");
        return !min || json_integer_value(min) == 0 ||
               productive(c, json_object_get(s, "items"));
    }
    return true; /* a list of types, or a scalar type */
}

/* Every $ref target must admit a finite value, else the model could never finish one. */
static bool check_termination(ctx *c)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < c->n_defs; i++)
            if (!c->defs[i].productive && productive(c, c->defs[i].schema))
                c->defs[i].productive = changed = true;
    }
    for (size_t i = 0; i < c->n_defs; i++)
        if (!c->defs[i].productive) {
            memcpy(c->path, c->defs[i].path, sizeof c->path);
            return fail(c, DY_SCHEMA_INVALID,
                        "this schema recurses without bound (every value of it would contain "
                        "another)");
        }
    return true;
}

/* ---------------------------------------------------------------- entry points */

static bool valid_prefix(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 32 || !((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z')))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
              (p[i] >= '0' && p[i] <= '9') || p[i] == '-'))
            return false;
    return true;
}

dy_schema_status dy_schema_rules(const json_t *schema, const char *prefix,
                                 const dy_schema_opts *opts, dy_buf *out, dy_schema_error *e)
{
    *e = (dy_schema_error){0};
    ctx c = {.prefix = prefix, .o = resolve_opts(opts), .root = schema, .out = out,
             .start = out->len, .e = e};
    bool ok = valid_prefix(prefix) ||
              fail(&c, DY_SCHEMA_INVALID, "the rule prefix '%s' is not a name", prefix);
    if (ok) {
        append_template(out, base_rules, prefix, c.o.max_indent);
        ok = check_size(&c, 0);
    }
    char top[64];
    ok = ok && compile(&c, schema, top) && check_termination(&c);
    if (ok && c.used_dot)
        append_template(out, dot_rules, prefix, 0);
    if (ok) {
        dy_buf_printf(out, "%s ::= %s\n", prefix, top);
        ok = check_size(&c, 0);
    }
    free(c.defs);
    if (!ok) {
        out->len = c.start;
        return e->status;
    }
    return DY_SCHEMA_OK;
}

dy_schema_status dy_schema_to_grammar(const json_t *schema, const dy_schema_opts *opts,
                                      dy_buf *out, dy_schema_error *e)
{
    return dy_schema_rules(schema, "root", opts, out, e);
}
