/* grammar_compile.c — grammar text compiled (see grammar.h for the notation).
 *
 * A compiled grammar is one array of elements: every alternative of every rule is a run of
 * elements (a byte set, or a reference to a rule) closed by an END. Repetitions, options and
 * groups are rewritten into plain rules while parsing (x* is R ::= x R | ε), so the recognizer
 * (grammar_match.c) only knows sequences, alternatives and references. Left recursion is
 * refused here, so the recognizer never loops without reading a byte. */
#include "grammar/grammar_impl.h"
#include "util/buf.h"
#include "util/hashmap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NIL UINT32_MAX
#define MAX_ELEMS (1u << 22)      /* elements of a compiled grammar */
#define MAX_REPEAT 10000          /* the largest m or n in x{m,n} */

void dy_grammar_free(dy_grammar *g)
{
    if (!g)
        return;
    free(g->el);
    free(g->alt_start);
    free(g->rules);
    free(g->sets);
    free(g);
}

/* ---------------------------------------------------------------- parsing */

typedef struct {
    elem *e;
    size_t n, cap;
} seq;

typedef struct {
    seq *alts;
    size_t n, cap;
    char *name;      /* NULL for a rule made by a group or a repetition */
    size_t where;    /* offset of its first use or definition, for messages */
    bool defined;
} prule;

typedef struct {
    const char *s;
    size_t n, i;
    prule *rules;
    size_t n_rules, cap_rules;
    byteset *sets;
    size_t n_sets, cap_sets;
    dy_hashmap names;     /* hash of a rule's name -> its id (a collision: the older name) */
    dy_hashmap set_ids;   /* hash of a byte set -> its index (a collision: a second copy) */
    size_t total;         /* elements so far, against MAX_ELEMS */
    uint32_t utf8_tail;   /* the rule matching a multi-byte UTF-8 character, NIL until needed */
    char *err;
    size_t errlen;
    bool failed;
} parser;

static bool fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fail_at(parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed)
        return false;
    p->failed = true;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    int k = snprintf(p->err, p->errlen, "line %zu, column %zu: ", line, col);
    if (k >= 0 && (size_t)k < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool oom(parser *p)
{
    return fail_at(p, p->i, "out of memory");
}

static bool seq_push(parser *p, seq *q, elem e)
{
    if (++p->total > MAX_ELEMS)
        return fail_at(p, p->i, "the grammar is too large (over %u elements)", MAX_ELEMS);
    if (!dy_array_reserve((void **)&q->e, &q->cap, q->n + 1, sizeof *q->e))
        return oom(p);
    q->e[q->n++] = e;
    return true;
}

static bool seq_append(parser *p, seq *q, const seq *x)
{
    for (size_t k = 0; k < x->n; k++)
        if (!seq_push(p, q, x->e[k]))
            return false;
    return true;
}

static uint32_t new_rule(parser *p, const char *name, size_t namelen, size_t where)
{
    if (p->n_rules >= (1u << 30) - 1 ||
        !dy_array_reserve((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) {
        oom(p);
        return NIL;
    }
    prule *r = &p->rules[p->n_rules];
    *r = (prule){.where = where};
    if (name) {
        if (!(r->name = strndup(name, namelen))) {
            oom(p);
            return NIL;
        }
    }
    return (uint32_t)p->n_rules++;
}

/* Appends an alternative to rule r, taking over q's memory. */
static bool add_alt(parser *p, uint32_t r, seq *q)
{
    prule *x = &p->rules[r];
    if (!dy_array_reserve((void **)&x->alts, &x->cap, x->n + 1, sizeof *x->alts)) {
        free(q->e);
        *q = (seq){0};
        return oom(p);
    }
    x->alts[x->n++] = *q;
    *q = (seq){0};
    return true;
}

static uint32_t rule_named(parser *p, const char *name, size_t len, size_t where)
{
    uint64_t h = XXH3_64bits(name, len);
    uint64_t k = dy_hashmap_get(&p->names, h);
    if (k != DY_HASHMAP_NONE && strlen(p->rules[k].name) == len &&
        memcmp(p->rules[k].name, name, len) == 0)
        return (uint32_t)k;
    for (size_t r = 0; k != DY_HASHMAP_NONE && r < p->n_rules; r++) /* a hash collision */
        if (p->rules[r].name && strlen(p->rules[r].name) == len &&
            memcmp(p->rules[r].name, name, len) == 0)
            return (uint32_t)r;
    uint32_t r = new_rule(p, name, len, where);
    if (r != NIL && k == DY_HASHMAP_NONE && !dy_hashmap_put(&p->names, h, r)) {
        oom(p);
        return NIL;
    }
    return r;
}

/* The id of a byte set, one per distinct set (a literal's bytes repeat a lot). */
static uint32_t add_set(parser *p, const byteset *s)
{
    uint64_t h = XXH3_64bits(s, sizeof *s);
    uint64_t k = dy_hashmap_get(&p->set_ids, h);
    if (k != DY_HASHMAP_NONE && memcmp(&p->sets[k], s, sizeof *s) == 0)
        return (uint32_t)k;
    if (!dy_array_reserve((void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets) ||
        (k == DY_HASHMAP_NONE && !dy_hashmap_put(&p->set_ids, h, p->n_sets))) {
        oom(p);
        return NIL;
    }
    p->sets[p->n_sets] = *s;
    return (uint32_t)p->n_sets++;
}

static bool push_set(parser *p, seq *q, const byteset *s)
{
    uint32_t id = add_set(p, s);
    return id != NIL && seq_push(p, q, (elem){E_SET, id});
}

static bool push_range(parser *p, seq *q, unsigned lo, unsigned hi)
{
    byteset s = {{0}};
    set_add_range(&s, lo, hi);
    return push_set(p, q, &s);
}

/* One alternative of ranges: each pair (lo, hi) is one byte. */
static bool add_utf8_alt(parser *p, uint32_t r, int n, const unsigned *ranges)
{
    seq q = {0};
    for (int k = 0; k < n; k++)
        if (!push_range(p, &q, ranges[2 * k], ranges[2 * k + 1])) {
            free(q.e);
            return false;
        }
    return add_alt(p, r, &q);
}

/* The rule for one multi-byte UTF-8 character: the well-formed sequences of RFC 3629 (no
 * overlong forms, no surrogates, nothing past U+10FFFF). */
static uint32_t utf8_tail_rule(parser *p)
{
    if (p->utf8_tail != NIL)
        return p->utf8_tail;
    static const unsigned forms[][9] = {
        {2, 0xC2, 0xDF, 0x80, 0xBF},
        {3, 0xE0, 0xE0, 0xA0, 0xBF, 0x80, 0xBF},
        {3, 0xE1, 0xEC, 0x80, 0xBF, 0x80, 0xBF},
        {3, 0xED, 0xED, 0x80, 0x9F, 0x80, 0xBF},
        {3, 0xEE, 0xEF, 0x80, 0xBF, 0x80, 0xBF},
        {4, 0xF0, 0xF0, 0x90, 0xBF, 0x80, 0xBF, 0x80},  /* last byte below */
        {4, 0xF1, 0xF3, 0x80, 0xBF, 0x80, 0xBF, 0x80},
        {4, 0xF4, 0xF4, 0x80, 0x8F, 0x80, 0xBF, 0x80},
    };
    uint32_t r = new_rule(p, NULL, 0, p->i);
    if (r == NIL)
        return NIL;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        unsigned ranges[8];
        int n = (int)forms[f][0];
        for (int k = 0; k < 2 * n - 1; k++)
            ranges[k] = forms[f][1 + k];
        ranges[2 * n - 1] = 0xBF; /* every form ends in a continuation byte */
        if (!add_utf8_alt(p, r, n, ranges))
            return NIL;
    }
    p->utf8_tail = r;
    return r;
}

/* One UTF-8 character whose ASCII form is in `ascii` (bytes 0x80+ of it are ignored) or that
 * is any multi-byte character: what `.` and a negated class match. */
static bool push_char_rule(parser *p, seq *q, const byteset *ascii)
{
    byteset a = *ascii;
    for (int w = 4; w < 8; w++)
        a.w[w] = 0;
    uint32_t tail = utf8_tail_rule(p);
    uint32_t r = tail == NIL ? NIL : new_rule(p, NULL, 0, p->i);
    if (r == NIL)
        return false;
    seq one = {0}, multi = {0};
    if (!push_set(p, &one, &a) || !add_alt(p, r, &one) ||
        !seq_push(p, &multi, (elem){E_RULE, tail}) || !add_alt(p, r, &multi)) {
        free(one.e);
        free(multi.e);
        return false;
    }
    return seq_push(p, q, (elem){E_RULE, r});
}

static bool at_end(const parser *p)
{
    return p->i >= p->n;
}

static char peek(const parser *p)
{
    return at_end(p) ? 0 : p->s[p->i];
}

/* Skips blanks, newlines and comments. */
static void skip_space(parser *p)
{
    while (!at_end(p)) {
        char c = p->s[p->i];
        if (c == '#') {
            while (!at_end(p) && p->s[p->i] != '\n')
                p->i++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

static size_t name_len(const parser *p, size_t at)
{
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k]))
        k++;
    return k - at;
}

/* Whether a rule definition (`name ::=`) starts here: it ends the body before it. */
static bool at_definition(const parser *p)
{
    size_t k = p->i + name_len(p, p->i);
    if (k == p->i)
        return false;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t'))
        k++;
    return k + 3 <= p->n && memcmp(p->s + k, "::=", 3) == 0;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool read_hex(parser *p, int digits, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < digits; k++) {
        int h = at_end(p) ? -1 : hex_value(p->s[p->i]);
        if (h < 0)
            return fail_at(p, p->i, "expected %d hexadecimal digits", digits);
        v = v * 16 + (unsigned)h;
        p->i++;
    }
    *out = v;
    return true;
}

/* One character of a literal or class, escapes decoded, as UTF-8 bytes into out (1-4); the
 * count, or 0 on an error. */
static int read_char(parser *p, uint8_t out[4])
{
    if (at_end(p)) {
        fail_at(p, p->i, "unterminated literal or class");
        return 0;
    }
    uint8_t c = (uint8_t)p->s[p->i++];
    if (c != '\\') {
        out[0] = c;
        return 1;
    }
    if (at_end(p)) {
        fail_at(p, p->i, "unterminated escape");
        return 0;
    }
    char e = p->s[p->i++];
    unsigned v = 0;
    switch (e) {
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^':
        out[0] = (uint8_t)e;
        return 1;
    case 'x':
        if (!read_hex(p, 2, &v))
            return 0;
        out[0] = (uint8_t)v;
        return 1;
    case 'u':
        if (!read_hex(p, 4, &v))
            return 0;
        if (v >= 0xD800 && v <= 0xDFFF) {
            fail_at(p, p->i - 6, "\\u%04X is a surrogate, not a character", v);
            return 0;
        }
        if (v < 0x80) {
            out[0] = (uint8_t)v;
            return 1;
        }
        if (v < 0x800) {
            out[0] = (uint8_t)(0xC0 | v >> 6);
            out[1] = (uint8_t)(0x80 | (v & 0x3F));
            return 2;
        }
        out[0] = (uint8_t)(0xE0 | v >> 12);
        out[1] = (uint8_t)(0x80 | (v >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (v & 0x3F));
        return 3;
    default:
        fail_at(p, p->i - 2, "unknown escape \\%c", e);
        return 0;
    }
}

static bool parse_literal(parser *p, seq *q)
{
    size_t start = p->i++;
    if (peek(p) == '"')
        return fail_at(p, start, "an empty literal (write nothing, or use ( ... )?)");
    while (peek(p) != '"') {
        uint8_t b[4];
        int k = read_char(p, b);
        if (!k)
            return false;
        for (int j = 0; j < k; j++)
            if (!push_range(p, q, b[j], b[j]))
                return false;
    }
    p->i++;
    return true;
}

/* One byte of a class: a character that encodes as more than one byte cannot be a class
 * member (a class matches one byte; a negated class one character). */
static bool class_byte(parser *p, uint8_t *out)
{
    size_t at = p->i;
    uint8_t b[4];
    int k = read_char(p, b);
    if (!k)
        return false;
    if (k > 1 || (b[0] >= 0x80 && p->s[at] != '\\'))
        return fail_at(p, at, "a class holds single bytes: write a character outside ASCII as "
                              "a literal or an alternative");
    *out = b[0];
    return true;
}

static bool parse_class(parser *p, seq *q)
{
    size_t start = p->i++;
    bool negated = peek(p) == '^';
    if (negated)
        p->i++;
    byteset s = {{0}};
    bool any = false;
    while (peek(p) != ']') {
        uint8_t lo, hi;
        if (!class_byte(p, &lo))
            return false;
        hi = lo;
        if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            if (!class_byte(p, &hi))
                return false;
            if (hi < lo)
                return fail_at(p, start, "a class range runs backwards");
        }
        set_add_range(&s, lo, hi);
        any = true;
    }
    p->i++;
    if (!any)
        return fail_at(p, start, "an empty class");
    if (!negated)
        return push_set(p, q, &s);
    for (int w = 4; w < 8; w++)
        if (s.w[w])
            return fail_at(p, start, "a negated class may hold only ASCII bytes");
    byteset c = {{0}};
    for (int w = 0; w < 4; w++)
        c.w[w] = ~s.w[w];
    return push_char_rule(p, q, &c);
}

static bool parse_alternatives(parser *p, uint32_t r, int depth);

/* <[N]>: token N itself, for tokens that write no text (a template's control tokens). */
static bool parse_token(parser *p, seq *q)
{
    size_t at = p->i;
    if (p->i + 2 > p->n || p->s[p->i + 1] != '[')
        return fail_at(p, at, "expected <[token id]>");
    p->i += 2;
    unsigned long id = 0;
    size_t digits = 0;
    while (peek(p) >= '0' && peek(p) <= '9' && id < (1ul << 30)) {
        id = id * 10 + (unsigned long)(p->s[p->i++] - '0');
        digits++;
    }
    if (!digits || id >= (1ul << 30) || peek(p) != ']' || p->i + 1 >= p->n ||
        p->s[p->i + 1] != '>')
        return fail_at(p, at, "expected <[token id]> with an id below 2^30");
    p->i += 2;
    return seq_push(p, q, (elem){E_TOKEN, (uint32_t)id});
}

static bool parse_group(parser *p, seq *q, int depth)
{
    size_t start = p->i++;
    if (depth > 100)
        return fail_at(p, start, "groups nested too deeply");
    uint32_t r = new_rule(p, NULL, 0, start);
    if (r == NIL || !parse_alternatives(p, r, depth + 1))
        return false;
    if (peek(p) != ')')
        return fail_at(p, start, "unclosed (");
    p->i++;
    return seq_push(p, q, (elem){E_RULE, r});
}

static bool read_count(parser *p, unsigned *out)
{
    size_t at = p->i;
    unsigned long v = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (unsigned long)(p->s[p->i++] - '0');
        if (v > MAX_REPEAT)
            return fail_at(p, at, "a repetition count over %u", MAX_REPEAT);
    }
    if (p->i == at)
        return fail_at(p, at, "expected a repetition count");
    *out = (unsigned)v;
    return true;
}

/* A rule `R ::= x R | ε` (x*), or `R ::= x next | ε` (one optional x before `next`, NIL for
 * none): the building blocks of every repetition. */
static uint32_t optional_rule(parser *p, const seq *x, uint32_t next, bool loop)
{
    uint32_t r = new_rule(p, NULL, 0, p->i);
    if (r == NIL)
        return NIL;
    seq a = {0}, empty = {0};
    uint32_t after = loop ? r : next;
    if (!seq_append(p, &a, x) || (after != NIL && !seq_push(p, &a, (elem){E_RULE, after})) ||
        !add_alt(p, r, &a) || !add_alt(p, r, &empty)) {
        free(a.e);
        return NIL;
    }
    return r;
}

/* Rewrites the item x (its elements) under a quantifier, appending the result to q. */
static bool apply_quantifier(parser *p, seq *q, const seq *x)
{
    size_t at = p->i;
    unsigned min = 1, max = 1;
    bool unbounded = false;
    char c = p->s[p->i++];
    if (c == '*') {
        min = 0;
        unbounded = true;
    } else if (c == '+') {
        unbounded = true;
    } else if (c == '?') {
        min = 0;
    } else { /* { m } { m , } { m , n } */
        skip_space(p);
        if (!read_count(p, &min))
            return false;
        skip_space(p);
        max = min;
        if (peek(p) == ',') {
            p->i++;
            skip_space(p);
            if (peek(p) == '}')
                unbounded = true;
            else if (!read_count(p, &max))
                return false;
            skip_space(p);
        }
        if (peek(p) != '}')
            return fail_at(p, at, "expected } to close the repetition");
        p->i++;
        if (!unbounded && max < min)
            return fail_at(p, at, "a repetition {%u,%u} with its maximum below its minimum",
                           min, max);
    }
    for (unsigned k = 0; k < min; k++)
        if (!seq_append(p, q, x))
            return false;
    uint32_t tail = NIL;
    if (unbounded) {
        tail = optional_rule(p, x, NIL, true);
    } else {
        for (unsigned k = min; k < max; k++)
            if ((tail = optional_rule(p, x, tail, false)) == NIL)
                return false;
    }
    if (p->failed)
        return false;
    return tail == NIL || seq_push(p, q, (elem){E_RULE, tail});
}

static bool parse_item(parser *p, seq *q, int depth)
{
    seq x = {0};
    size_t at = p->i;
    char c = peek(p);
    bool ok;
    if (c == '"') {
        ok = parse_literal(p, &x);
    } else if (c == '[') {
        ok = parse_class(p, &x);
    } else if (c == '(') {
        ok = parse_group(p, &x, depth);
    } else if (c == '<') {
        ok = parse_token(p, &x);
    } else if (c == '.') {
        p->i++;
        byteset all = {{0}};
        set_add_range(&all, 0, 0x7F);
        ok = push_char_rule(p, &x, &all);
    } else if (is_name_char(c)) {
        size_t len = name_len(p, p->i);
        uint32_t r = rule_named(p, p->s + p->i, len, p->i);
        p->i += len;
        ok = r != NIL && seq_push(p, &x, (elem){E_RULE, r});
    } else {
        ok = fail_at(p, at, "unexpected '%c'", c);
    }
    if (ok) {
        c = peek(p);
        if (c == '*' || c == '+' || c == '?' || c == '{')
            ok = apply_quantifier(p, q, &x);
        else
            ok = seq_append(p, q, &x);
    }
    free(x.e);
    return ok;
}

/* seq ( "|" seq )* into rule r, up to a ')' , the next definition or the end. */
static bool parse_alternatives(parser *p, uint32_t r, int depth)
{
    for (;;) {
        seq q = {0};
        for (;;) {
            skip_space(p);
            char c = peek(p);
            if (at_end(p) || c == '|' || c == ')' || at_definition(p))
                break;
            if (!parse_item(p, &q, depth)) {
                free(q.e);
                return false;
            }
        }
        if (!add_alt(p, r, &q))
            return false;
        if (peek(p) != '|')
            return true;
        p->i++;
    }
}

static bool parse_rules(parser *p)
{
    for (;;) {
        skip_space(p);
        if (at_end(p))
            return true;
        size_t at = p->i, len = name_len(p, p->i);
        if (!len)
            return fail_at(p, at, "expected a rule name");
        uint32_t r = rule_named(p, p->s + at, len, at);
        if (r == NIL)
            return false;
        if (p->rules[r].defined)
            return fail_at(p, at, "rule '%.*s' is defined twice", (int)len, p->s + at);
        p->rules[r].defined = true;
        p->rules[r].where = at;
        p->i += len;
        skip_space(p);
        if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0)
            return fail_at(p, p->i, "expected ::= after '%.*s'", (int)len, p->s + at);
        p->i += 3;
        if (!parse_alternatives(p, r, 0))
            return false;
        if (peek(p) == ')')
            return fail_at(p, p->i, "unmatched )");
    }
}

/* ---------------------------------------------------------------- checks */

static const char *rule_label(const parser *p, uint32_t r, char *buf, size_t len)
{
    if (p->rules[r].name)
        snprintf(buf, len, "rule '%s'", p->rules[r].name);
    else
        snprintf(buf, len, "a group or repetition");
    return buf;
}

static bool check_defined(parser *p, uint32_t *root)
{
    *root = NIL;
    for (size_t r = 0; r < p->n_rules; r++) {
        const prule *x = &p->rules[r];
        if (x->name && !x->defined)
            return fail_at(p, x->where, "rule '%s' is used but never defined", x->name);
        if (x->name && strcmp(x->name, "root") == 0)
            *root = (uint32_t)r;
    }
    if (*root == NIL)
        return fail_at(p, 0, "no rule named 'root'");
    return true;
}

static bool *nullable_rules(const parser *p)
{
    bool *nul = calloc(p->n_rules ? p->n_rules : 1, sizeof *nul);
    if (!nul)
        return NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < p->n_rules; r++) {
            if (nul[r])
                continue;
            for (size_t a = 0; a < p->rules[r].n && !nul[r]; a++) {
                const seq *q = &p->rules[r].alts[a];
                size_t k = 0;
                while (k < q->n && q->e[k].kind == E_RULE && nul[q->e[k].arg])
                    k++;
                if (k == q->n)
                    nul[r] = changed = true;
            }
        }
    }
    return nul;
}

/* The "can start with" graph: rule r has an edge to s when an alternative of r reaches a
 * reference to s past nothing but rules that can be empty. A cycle of such edges reads nothing
 * on its way round. If one of its edges is a reference with more of its alternative after it,
 * each round pushes a return node and the recognizer would never stop: left recursion,
 * refused. A cycle of tail references only (`( "a"? )*`: R ::= A R | ε with A empty-able)
 * pushes nothing; the recognizer stops it by remembering where it has been. Tarjan's strongly
 * connected components find both: every edge inside a component lies on a cycle. */
typedef struct {
    parser *p;
    const bool *nul;
    uint32_t *index, *low, *comp, *stack;
    bool *on;
    size_t sp;
    uint32_t next, n_comp;
} tarjan;

static void strong_connect(tarjan *t, uint32_t r)
{
    t->index[r] = t->low[r] = t->next++;
    t->stack[t->sp++] = r;
    t->on[r] = true;
    const prule *x = &t->p->rules[r];
    for (size_t a = 0; a < x->n; a++) {
        const seq *q = &x->alts[a];
        for (size_t k = 0; k < q->n && q->e[k].kind == E_RULE; k++) {
            uint32_t s = q->e[k].arg;
            if (t->index[s] == NIL) {
                strong_connect(t, s);
                t->low[r] = t->low[s] < t->low[r] ? t->low[s] : t->low[r];
            } else if (t->on[s] && t->index[s] < t->low[r]) {
                t->low[r] = t->index[s];
            }
            if (!t->nul[s])
                break;
        }
    }
    if (t->low[r] != t->index[r])
        return;
    uint32_t y;
    do {
        y = t->stack[--t->sp];
        t->on[y] = false;
        t->comp[y] = t->n_comp;
    } while (y != r);
    t->n_comp++;
}

/* Refuses left recursion; notes a cycle of tail references in *tail_cycles. */
static bool judge_cycles(parser *p, const tarjan *t, bool *tail_cycles)
{
    for (size_t r = 0; r < p->n_rules; r++)
        for (size_t a = 0; a < p->rules[r].n; a++) {
            const seq *q = &p->rules[r].alts[a];
            for (size_t k = 0; k < q->n && q->e[k].kind == E_RULE; k++) {
                uint32_t s = q->e[k].arg;
                if (t->comp[s] == t->comp[r]) {
                    if (k + 1 < q->n) {
                        char b[160];
                        return fail_at(p, p->rules[s].where, "%s is left-recursive (it can "
                                       "reach itself before reading a byte)",
                                       rule_label(p, s, b, sizeof b));
                    }
                    *tail_cycles = true;
                }
                if (!t->nul[s])
                    break;
            }
        }
    return true;
}

static bool check_left_recursion(parser *p, bool *tail_cycles)
{
    size_t n = p->n_rules ? p->n_rules : 1;
    tarjan t = {.p = p, .nul = nullable_rules(p), .index = malloc(n * sizeof *t.index),
                .low = malloc(n * sizeof *t.low), .comp = malloc(n * sizeof *t.comp),
                .stack = malloc(n * sizeof *t.stack), .on = calloc(n, sizeof *t.on)};
    bool ok = t.nul && t.index && t.low && t.comp && t.stack && t.on;
    if (!ok) {
        oom(p);
    } else {
        memset(t.index, 0xff, n * sizeof *t.index); /* NIL: not visited */
        for (size_t r = 0; r < p->n_rules; r++)
            if (t.index[r] == NIL)
                strong_connect(&t, (uint32_t)r);
        ok = judge_cycles(p, &t, tail_cycles);
    }
    free((void *)t.nul);
    free(t.index);
    free(t.low);
    free(t.comp);
    free(t.stack);
    free(t.on);
    return ok;
}

/* ---------------------------------------------------------------- flattening */

static dy_grammar *flatten(parser *p, uint32_t root, bool tail_cycles)
{
    dy_grammar *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    size_t n_alts = 0, n_el = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        n_alts += p->rules[r].n;
        for (size_t a = 0; a < p->rules[r].n; a++)
            n_el += p->rules[r].alts[a].n + 1;
    }
    g->el = malloc(sizeof *g->el * (n_el + 1));
    g->alt_start = malloc(sizeof *g->alt_start * (n_alts + 1));
    g->rules = malloc(sizeof *g->rules * (p->n_rules + 1));
    g->sets = malloc(sizeof *g->sets * (p->n_sets + 1));
    if (!g->el || !g->alt_start || !g->rules || !g->sets) {
        dy_grammar_free(g);
        return NULL;
    }
    if (p->n_sets)
        memcpy(g->sets, p->sets, sizeof *g->sets * p->n_sets);
    g->n_sets = (uint32_t)p->n_sets;
    for (size_t r = 0; r < p->n_rules; r++) {
        g->rules[r] = (rule){g->n_alts, (uint32_t)p->rules[r].n};
        for (size_t a = 0; a < p->rules[r].n; a++) {
            const seq *q = &p->rules[r].alts[a];
            g->alt_start[g->n_alts++] = g->n_el;
            if (q->n) /* an empty alternative has no elements (and no array) */
                memcpy(g->el + g->n_el, q->e, sizeof *q->e * q->n);
            g->n_el += (uint32_t)q->n;
            g->el[g->n_el++] = (elem){E_END, 0};
        }
    }
    g->n_rules = (uint32_t)p->n_rules;
    g->root = root;
    g->tail_cycles = tail_cycles;
    return g;
}

static void parser_free(parser *p)
{
    for (size_t r = 0; r < p->n_rules; r++) {
        for (size_t a = 0; a < p->rules[r].n; a++)
            free(p->rules[r].alts[a].e);
        free(p->rules[r].alts);
        free(p->rules[r].name);
    }
    free(p->rules);
    free(p->sets);
    dy_hashmap_free(&p->names);
    dy_hashmap_free(&p->set_ids);
}

dy_grammar *dy_grammar_parse(const char *text, size_t len, char *err, size_t errlen)
{
    char dummy[1];
    parser p = {.s = text, .n = len, .utf8_tail = NIL, .err = err ? err : dummy,
                .errlen = err ? errlen : sizeof dummy};
    uint32_t root;
    bool tail_cycles = false;
    dy_grammar *g = NULL;
    if (memchr(text, 0, len))
        fail_at(&p, (size_t)((const char *)memchr(text, 0, len) - text),
                "a NUL byte in the grammar (write \\x00)");
    else if (parse_rules(&p) && check_defined(&p, &root) && check_left_recursion(&p, &tail_cycles) &&
             !(g = flatten(&p, root, tail_cycles)))
        oom(&p);
    parser_free(&p);
    return g;
}

