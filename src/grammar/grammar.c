/* grammar.c — the grammar compiler and the recognizer (see grammar.h).
 *
 * A compiled grammar is one array of elements: every alternative of every rule is a run of
 * elements (a byte set, or a reference to a rule) closed by an END. Repetitions, options and
 * groups are rewritten into plain rules while parsing (x* is R ::= x R | ε), so the recognizer
 * only knows sequences, alternatives and references.
 *
 * The recognizer keeps a set of parse stacks, as llama.cpp's grammar sampler does, but each
 * stack is a chain of nodes (position, parent) interned in the matcher's arena: equal stacks
 * are equal node ids, so a state is a sorted array of ids, cheap to compare, hash and cache.
 * A stack's top always points at a byte set; a reference that is the last element of its
 * alternative pushes no return node (a tail call), so x* loops in constant depth. */
#include "grammar/grammar.h"

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
#define DEFAULT_NODES (1u << 20)
#define DEFAULT_MASKS 256

/* ---------------------------------------------------------------- compiled form */

enum { E_END = 0, E_SET, E_RULE };

typedef struct {
    uint32_t kind : 2;
    uint32_t arg : 30; /* E_SET: index into sets; E_RULE: rule id */
} elem;

typedef struct {
    uint32_t w[8];
} byteset;

static bool set_has(const byteset *s, uint8_t c)
{
    return s->w[c >> 5] >> (c & 31) & 1u;
}

static void set_add_range(byteset *s, unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++)
        s->w[c >> 5] |= 1u << (c & 31);
}

typedef struct {
    uint32_t first_alt, n_alts; /* into alt_start */
} rule;

struct dy_grammar {
    elem *el;
    uint32_t n_el;
    uint32_t *alt_start;
    uint32_t n_alts;
    rule *rules;
    uint32_t n_rules;
    byteset *sets;
    uint32_t n_sets;
    uint32_t root;
};

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
    for (size_t k = 0; k < p->n_rules; k++)
        if (p->rules[k].name && strlen(p->rules[k].name) == len &&
            memcmp(p->rules[k].name, name, len) == 0)
            return (uint32_t)k;
    return new_rule(p, name, len, where);
}

static uint32_t add_set(parser *p, const byteset *s)
{
    if (!dy_array_reserve((void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets)) {
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

/* Depth-first search of the "can start with" graph; a back edge is left recursion, which
 * would send the recognizer round a loop that consumes nothing. */
static bool left_dfs(parser *p, const bool *nul, uint8_t *color, uint32_t r)
{
    color[r] = 1;
    for (size_t a = 0; a < p->rules[r].n; a++) {
        const seq *q = &p->rules[r].alts[a];
        for (size_t k = 0; k < q->n && q->e[k].kind == E_RULE; k++) {
            uint32_t s = q->e[k].arg;
            if (color[s] == 1) {
                char b[160];
                return fail_at(p, p->rules[s].where, "%s is left-recursive (it can reach "
                               "itself before reading a byte; a repetition of something that "
                               "can be empty does too)", rule_label(p, s, b, sizeof b));
            }
            if (color[s] == 0 && !left_dfs(p, nul, color, s))
                return false;
            if (!nul[s])
                break;
        }
    }
    color[r] = 2;
    return true;
}

static bool check_left_recursion(parser *p)
{
    bool *nul = nullable_rules(p);
    uint8_t *color = calloc(p->n_rules ? p->n_rules : 1, 1);
    bool ok = nul && color;
    if (!ok)
        oom(p);
    for (size_t r = 0; ok && r < p->n_rules; r++)
        if (color[r] == 0)
            ok = left_dfs(p, nul, color, (uint32_t)r);
    free(nul);
    free(color);
    return ok;
}

/* ---------------------------------------------------------------- flattening */

static dy_grammar *flatten(parser *p, uint32_t root)
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
    memcpy(g->sets, p->sets, sizeof *g->sets * p->n_sets);
    g->n_sets = (uint32_t)p->n_sets;
    for (size_t r = 0; r < p->n_rules; r++) {
        g->rules[r] = (rule){g->n_alts, (uint32_t)p->rules[r].n};
        for (size_t a = 0; a < p->rules[r].n; a++) {
            const seq *q = &p->rules[r].alts[a];
            g->alt_start[g->n_alts++] = g->n_el;
            memcpy(g->el + g->n_el, q->e, sizeof *q->e * q->n);
            g->n_el += (uint32_t)q->n;
            g->el[g->n_el++] = (elem){E_END, 0};
        }
    }
    g->n_rules = (uint32_t)p->n_rules;
    g->root = root;
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
}

dy_grammar *dy_grammar_parse(const char *text, size_t len, char *err, size_t errlen)
{
    char dummy[1];
    parser p = {.s = text, .n = len, .utf8_tail = NIL, .err = err ? err : dummy,
                .errlen = err ? errlen : sizeof dummy};
    uint32_t root;
    dy_grammar *g = NULL;
    if (memchr(text, 0, len))
        fail_at(&p, (size_t)((const char *)memchr(text, 0, len) - text),
                "a NUL byte in the grammar (write \\x00)");
    else if (parse_rules(&p) && check_defined(&p, &root) && check_left_recursion(&p) &&
             !(g = flatten(&p, root)))
        oom(&p);
    parser_free(&p);
    return g;
}

/* ---------------------------------------------------------------- vocabulary trie */

typedef struct {
    uint32_t child_lo, child_hi; /* children: nodes[child_lo .. child_hi) */
    uint32_t tok_lo, tok_hi;     /* tokens whose text ends here: ids[tok_lo .. tok_hi) */
    uint8_t byte;                /* the byte on the edge into this node */
} tnode;

struct dy_vocab_trie {
    int n_vocab;
    tnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *ids;               /* token ids with text, sorted by text */
    char *blob;                  /* every token's text */
    size_t *off;
    uint32_t *len;
};

typedef struct {
    const char *text;
    uint32_t len, id;
} sort_key;

static int by_text(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    int c = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static uint8_t byte_at(const dy_vocab_trie *t, uint32_t k, uint32_t depth)
{
    return (uint8_t)t->blob[t->off[t->ids[k]] + depth];
}

/* Fills node u from the sorted tokens [lo, hi), all sharing their first `depth` bytes. */
static bool build_node(dy_vocab_trie *t, uint32_t u, uint32_t lo, uint32_t hi, uint32_t depth)
{
    uint32_t k = lo;
    while (k < hi && t->len[t->ids[k]] == depth)
        k++;
    t->nodes[u].tok_lo = lo;
    t->nodes[u].tok_hi = k;
    uint32_t n_children = 0;
    for (uint32_t j = k; j < hi; n_children++) {
        uint8_t b = byte_at(t, j, depth);
        while (j < hi && byte_at(t, j, depth) == b)
            j++;
    }
    size_t cap = t->cap_nodes;
    if (!dy_array_reserve((void **)&t->nodes, &cap, t->n_nodes + n_children, sizeof *t->nodes))
        return false;
    t->cap_nodes = (uint32_t)cap;
    uint32_t first = t->n_nodes;
    t->n_nodes += n_children;
    t->nodes[u].child_lo = first;
    t->nodes[u].child_hi = first + n_children;
    uint32_t c = first;
    for (uint32_t j = k; j < hi; c++) {
        uint32_t start = j;
        uint8_t b = byte_at(t, j, depth);
        while (j < hi && byte_at(t, j, depth) == b)
            j++;
        t->nodes[c] = (tnode){.byte = b};
        if (!build_node(t, c, start, j, depth + 1))
            return false;
    }
    return true;
}

void dy_vocab_trie_free(dy_vocab_trie *t)
{
    if (!t)
        return;
    free(t->nodes);
    free(t->ids);
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t);
}

/* Copies the texts and sorts the ids by them. */
static bool sort_tokens(dy_vocab_trie *t, const char *const *pieces, const uint32_t *lens,
                        uint32_t *n_with_text)
{
    size_t total = 0;
    for (int i = 0; i < t->n_vocab; i++)
        total += lens[i];
    sort_key *keys = malloc(sizeof *keys * (size_t)t->n_vocab);
    t->blob = malloc(total + 1);
    if (!keys || !t->blob) {
        free(keys);
        return false;
    }
    uint32_t n = 0;
    size_t at = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        memcpy(t->blob + at, pieces[i], lens[i]);
        t->off[i] = at;
        t->len[i] = lens[i];
        if (lens[i] > 0) /* a token without text is never a grammar's to allow */
            keys[n++] = (sort_key){t->blob + at, lens[i], (uint32_t)i};
        at += lens[i];
    }
    qsort(keys, n, sizeof *keys, by_text);
    for (uint32_t k = 0; k < n; k++)
        t->ids[k] = keys[k].id;
    free(keys);
    *n_with_text = n;
    return true;
}

dy_vocab_trie *dy_vocab_trie_new(int n_vocab, const char *const *pieces, const uint32_t *lens)
{
    if (n_vocab <= 0)
        return NULL;
    dy_vocab_trie *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_vocab = n_vocab;
    t->ids = malloc(sizeof *t->ids * (size_t)n_vocab);
    t->off = malloc(sizeof *t->off * (size_t)n_vocab);
    t->len = malloc(sizeof *t->len * (size_t)n_vocab);
    size_t cap = 0;
    uint32_t n;
    if (!t->ids || !t->off || !t->len || !sort_tokens(t, pieces, lens, &n) ||
        !dy_array_reserve((void **)&t->nodes, &cap, 1024, sizeof *t->nodes)) {
        dy_vocab_trie_free(t);
        return NULL;
    }
    t->cap_nodes = (uint32_t)cap;
    t->n_nodes = 1;
    t->nodes[0] = (tnode){0};
    if (!build_node(t, 0, 0, n, 0)) {
        dy_vocab_trie_free(t);
        return NULL;
    }
    return t;
}

int dy_vocab_trie_size(const dy_vocab_trie *t)
{
    return t->n_vocab;
}

/* ---------------------------------------------------------------- the matcher */

typedef struct {
    uint32_t pos;    /* an element of the grammar */
    uint32_t parent; /* the node below it on the stack, NIL at the bottom */
} gnode;

typedef struct {
    uint64_t hash;
    uint32_t *tops, n;
    uint32_t *bits;
    uint64_t used;   /* the matcher's clock at the last use, for LRU eviction */
} mask_entry;

struct dy_gmatch {
    const dy_grammar *g;
    const dy_vocab_trie *t;
    dy_gmatch_limits lim;
    gnode *nodes;
    size_t n_nodes, cap_nodes;
    dy_hashmap intern;          /* (pos << 32 | parent) -> node id */
    uint32_t *scratch;          /* states of a walk, one segment per depth */
    size_t n_scratch, cap_scratch;
    bool accept, full;          /* of the closure in progress: reached the end / hit a limit */
    mask_entry *masks;
    uint32_t n_masks;
    dy_hashmap mask_index;      /* hash of a state -> index in masks */
    uint64_t clock, hits, misses;
    uint32_t words;             /* of a mask */
};

dy_gmatch *dy_gmatch_new(const dy_grammar *g, const dy_vocab_trie *t, dy_gmatch_limits lim)
{
    dy_gmatch *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = g;
    m->t = t;
    m->lim.max_nodes = lim.max_nodes ? lim.max_nodes : DEFAULT_NODES;
    m->lim.max_masks = lim.max_masks ? lim.max_masks : DEFAULT_MASKS;
    m->words = t ? (uint32_t)(t->n_vocab + 31) / 32 : 0;
    if (t && !(m->masks = calloc(m->lim.max_masks, sizeof *m->masks))) {
        free(m);
        return NULL;
    }
    return m;
}

void dy_gmatch_free(dy_gmatch *m)
{
    if (!m)
        return;
    for (uint32_t k = 0; k < m->n_masks; k++) {
        free(m->masks[k].tops);
        free(m->masks[k].bits);
    }
    free(m->masks);
    dy_hashmap_free(&m->mask_index);
    dy_hashmap_free(&m->intern);
    free(m->nodes);
    free(m->scratch);
    free(m);
}

size_t dy_gmatch_bytes(const dy_gmatch *m)
{
    size_t b = sizeof *m + m->cap_nodes * sizeof *m->nodes + m->cap_scratch * sizeof *m->scratch +
               (m->intern.cap + m->mask_index.cap) * sizeof(dy_hashmap_slot) +
               m->lim.max_masks * sizeof *m->masks * (m->masks != NULL);
    for (uint32_t k = 0; k < m->n_masks; k++)
        b += (m->masks[k].n + m->words) * sizeof(uint32_t);
    return b;
}

void dy_gmatch_mask_counts(const dy_gmatch *m, uint64_t *hits, uint64_t *misses)
{
    *hits = m->hits;
    *misses = m->misses;
}

/* The id of the node (pos, parent), made if new; NIL when the arena is full. */
static uint32_t intern(dy_gmatch *m, uint32_t pos, uint32_t parent)
{
    uint64_t key = (uint64_t)pos << 32 | parent;
    uint64_t v = dy_hashmap_get(&m->intern, key);
    if (v != DY_HASHMAP_NONE)
        return (uint32_t)v;
    if (m->n_nodes >= m->lim.max_nodes ||
        !dy_array_reserve((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes) ||
        !dy_hashmap_put(&m->intern, key, m->n_nodes)) {
        m->full = true;
        return NIL;
    }
    m->nodes[m->n_nodes] = (gnode){pos, parent};
    return (uint32_t)m->n_nodes++;
}

static void push_top(dy_gmatch *m, uint32_t id)
{
    if (!dy_array_reserve((void **)&m->scratch, &m->cap_scratch, m->n_scratch + 1,
                          sizeof *m->scratch)) {
        m->full = true;
        return;
    }
    m->scratch[m->n_scratch++] = id;
}

/* Every stack reached from "at element pos, over stack parent" without reading a byte: tops
 * (at a byte set) go onto the scratch; reaching the end of the root sets m->accept. */
static void closure(dy_gmatch *m, uint32_t pos, uint32_t parent)
{
    const dy_grammar *g = m->g;
    while (g->el[pos].kind == E_END) { /* return to the caller's next element */
        if (parent == NIL) {
            m->accept = true;
            return;
        }
        pos = m->nodes[parent].pos;
        parent = m->nodes[parent].parent;
    }
    if (g->el[pos].kind == E_SET) {
        uint32_t id = intern(m, pos, parent);
        if (id != NIL)
            push_top(m, id);
        return;
    }
    /* a reference: the return point, unless it is the end of the alternative (a tail call) */
    uint32_t ret = pos + 1, below = parent;
    if (g->el[ret].kind != E_END && (below = intern(m, ret, parent)) == NIL)
        return;
    const rule *r = &g->rules[g->el[pos].arg];
    for (uint32_t a = 0; a < r->n_alts && !m->full; a++)
        closure(m, g->alt_start[r->first_alt + a], below);
}

static int by_id(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts the scratch segment [lo, n_scratch) and drops repeats. */
static void normalize(dy_gmatch *m, size_t lo)
{
    uint32_t *s = m->scratch + lo;
    size_t n = m->n_scratch - lo;
    if (n < 2)
        return;
    if (n < 16) { /* the common case: a handful of stacks */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && s[j - 1] > s[j]; j--) {
                uint32_t x = s[j];
                s[j] = s[j - 1];
                s[j - 1] = x;
            }
    } else {
        qsort(s, n, sizeof *s, by_id);
    }
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (s[i] != s[k - 1])
            s[k++] = s[i];
    m->n_scratch = lo + k;
}

/* The state after byte c from the state in scratch [lo, hi): appended as a new, normalized
 * segment (empty if c is not allowed); m->accept says whether it accepts. */
static void advance_byte(dy_gmatch *m, size_t lo, size_t hi, uint8_t c)
{
    size_t out = m->n_scratch;
    m->accept = false;
    for (size_t k = lo; k < hi && !m->full; k++) {
        const gnode *top = &m->nodes[m->scratch[k]];
        if (set_has(&m->g->sets[m->g->el[top->pos].arg], c))
            closure(m, top->pos + 1, top->parent);
    }
    normalize(m, out);
}

static bool state_store(dy_gstate *s, const uint32_t *tops, size_t n, bool accept)
{
    if (n > s->cap) {
        uint32_t *t = realloc(s->tops, sizeof *t * n);
        if (!t)
            return false;
        s->tops = t;
        s->cap = (uint32_t)n;
    }
    if (n)
        memcpy(s->tops, tops, sizeof *tops * n);
    s->n = (uint32_t)n;
    s->accept = accept;
    return true;
}

dy_grammar_status dy_gstate_start(dy_gmatch *m, dy_gstate *s)
{
    *s = (dy_gstate){0};
    const dy_grammar *g = m->g;
    const rule *r = &g->rules[g->root];
    m->n_scratch = 0;
    m->accept = m->full = false;
    for (uint32_t a = 0; a < r->n_alts && !m->full; a++)
        closure(m, g->alt_start[r->first_alt + a], NIL);
    normalize(m, 0);
    if (m->full || !state_store(s, m->scratch, m->n_scratch, m->accept))
        return DY_GRAMMAR_LIMIT;
    return DY_GRAMMAR_OK;
}

bool dy_gstate_copy(dy_gstate *dst, const dy_gstate *src)
{
    *dst = (dy_gstate){0};
    return state_store(dst, src->tops, src->n, src->accept);
}

void dy_gstate_free(dy_gstate *s)
{
    free(s->tops);
    *s = (dy_gstate){0};
}

dy_grammar_status dy_gstate_advance(dy_gmatch *m, dy_gstate *s, const char *bytes, size_t n)
{
    if (n == 0)
        return DY_GRAMMAR_OK;
    m->n_scratch = 0;
    m->full = false;
    for (uint32_t k = 0; k < s->n; k++)
        push_top(m, s->tops[k]);
    size_t lo = 0, hi = m->n_scratch;
    for (size_t i = 0; i < n; i++) {
        if (hi == lo && !m->full)
            return DY_GRAMMAR_REJECT;
        advance_byte(m, lo, hi, (uint8_t)bytes[i]);
        if (m->full)
            return DY_GRAMMAR_LIMIT;
        lo = hi;
        hi = m->n_scratch;
    }
    if (hi == lo && !m->accept)
        return DY_GRAMMAR_REJECT;
    bool accept = m->accept;
    return state_store(s, m->scratch + lo, hi - lo, accept) ? DY_GRAMMAR_OK : DY_GRAMMAR_LIMIT;
}

bool dy_grammar_accepts(const dy_grammar *g, const char *s, size_t n)
{
    dy_gmatch *m = dy_gmatch_new(g, NULL, (dy_gmatch_limits){0});
    dy_gstate st;
    bool ok = m && dy_gstate_start(m, &st) == DY_GRAMMAR_OK &&
              dy_gstate_advance(m, &st, s, n) == DY_GRAMMAR_OK && st.accept;
    if (m)
        dy_gstate_free(&st);
    dy_gmatch_free(m);
    return ok;
}

/* ---------------------------------------------------------------- masks */

static void allow_tokens(const dy_vocab_trie *t, const tnode *u, uint32_t *bits)
{
    for (uint32_t k = u->tok_lo; k < u->tok_hi; k++)
        bits[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
}

/* Walks the trie below node u from the state in scratch [lo, hi), allowing every token whose
 * whole text the grammar can read: a branch dies as soon as its bytes leave the grammar, so a
 * narrow state (inside a literal) visits a handful of nodes. */
static void walk(dy_gmatch *m, const tnode *u, size_t lo, size_t hi, uint32_t *bits)
{
    const dy_vocab_trie *t = m->t;
    for (uint32_t c = u->child_lo; c < u->child_hi && !m->full; c++) {
        const tnode *v = &t->nodes[c];
        size_t out = m->n_scratch;
        advance_byte(m, lo, hi, v->byte);
        if (m->n_scratch > out || m->accept)
            allow_tokens(t, v, bits);
        if (m->n_scratch > out && v->child_lo < v->child_hi)
            walk(m, v, out, m->n_scratch, bits);
        m->n_scratch = out;
    }
}

static uint64_t state_hash(const dy_gstate *s)
{
    return XXH3_64bits(s->tops, sizeof *s->tops * s->n) & ~1ull; /* never DY_HASHMAP_NONE */
}

/* The slot for a new mask: a free one, or the least recently used (forgotten). */
static mask_entry *mask_slot(dy_gmatch *m)
{
    if (m->n_masks < m->lim.max_masks)
        return &m->masks[m->n_masks++];
    mask_entry *old = &m->masks[0];
    for (uint32_t k = 1; k < m->n_masks; k++)
        if (m->masks[k].used < old->used)
            old = &m->masks[k];
    dy_hashmap_remove(&m->mask_index, old->hash);
    return old;
}

static bool compute_mask(dy_gmatch *m, const dy_gstate *s, mask_entry *e)
{
    if (!e->bits && !(e->bits = malloc(sizeof *e->bits * m->words)))
        return false;
    memset(e->bits, 0, sizeof *e->bits * m->words);
    m->n_scratch = 0;
    m->full = false;
    for (uint32_t k = 0; k < s->n; k++)
        push_top(m, s->tops[k]);
    if (!m->full)
        walk(m, &m->t->nodes[0], 0, m->n_scratch, e->bits);
    if (m->full)
        return false;
    uint32_t *tops = realloc(e->tops, sizeof *tops * (s->n ? s->n : 1));
    if (!tops)
        return false;
    e->tops = tops;
    memcpy(e->tops, s->tops, sizeof *tops * s->n);
    e->n = s->n;
    return true;
}

const uint32_t *dy_gstate_mask(dy_gmatch *m, const dy_gstate *s)
{
    if (!m->t)
        return NULL;
    uint64_t h = state_hash(s);
    uint64_t k = dy_hashmap_get(&m->mask_index, h);
    m->clock++;
    if (k != DY_HASHMAP_NONE) {
        mask_entry *e = &m->masks[k];
        if (e->n == s->n && memcmp(e->tops, s->tops, sizeof *s->tops * s->n) == 0) {
            e->used = m->clock;
            m->hits++;
            return e->bits;
        }
        dy_hashmap_remove(&m->mask_index, h); /* a hash collision: the newer state wins */
        e->used = 0;
    }
    m->misses++;
    mask_entry *e = mask_slot(m);
    e->hash = h;
    e->used = m->clock;
    if (!compute_mask(m, s, e) || !dy_hashmap_put(&m->mask_index, h, (uint64_t)(e - m->masks))) {
        e->n = 0;
        e->hash = 0;
        e->used = 0;
        return NULL;
    }
    return e->bits;
}
