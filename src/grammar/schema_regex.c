/* schema_regex.c — a JSON Schema `pattern` (the ECMA-262 subset of schema.h's docs) compiled to
 * grammar text over the JSON text of the string's characters: a pattern character '"' is
 * matched as the two bytes \" the model writes, and so on. Patterns are unanchored, so an end
 * without ^ or $ admits any characters there. Private to grammar/ (schema_impl.h). */
#include "grammar/schema_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A regular expression's parser: the pattern's characters (UTF-8) to grammar text over the
 * JSON text of the string's characters. */
typedef struct {
    dy_schema_regex *rx;
    const char *s;
    size_t i, n;
} regex;

static bool regex_fail(regex *r, size_t at, const char *what)
{
    snprintf(r->rx->why, sizeof r->rx->why, "pattern: %s at offset %zu is not supported", what,
             at);
    return false;
}

/* Decodes one UTF-8 character of the pattern; -1 if the bytes are not UTF-8. */
static long regex_utf8(regex *r)
{
    const unsigned char *p = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    int len = p[0] < 0x80 ? 1 : (p[0] >> 5) == 6 ? 2 : (p[0] >> 4) == 14 ? 3
            : (p[0] >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > left)
        return -1;
    long cp = len == 1 ? p[0] : p[0] & (0x3f >> (len - 1));
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return -1;
        cp = cp << 6 | (p[k] & 0x3f);
    }
    r->i += (size_t)len;
    return cp;
}

/* One character as its JSON text: raw where JSON allows it, else its short escape. */
static void json_char(dy_buf *b, long cp)
{
    static const char short_esc[] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
                                     ['\t'] = 't'};
    char t[8];
    int n;
    if (cp == '"' || cp == '\\')
        n = snprintf(t, sizeof t, "\\%c", (char)cp);
    else if (cp < (long)sizeof short_esc && short_esc[cp])
        n = snprintf(t, sizeof t, "\\%c", short_esc[cp]);
    else if (cp < 0x20)
        n = snprintf(t, sizeof t, "\\u%04lx", cp);
    else if (cp < 0x80)
        t[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        t[0] = (char)(0xc0 | cp >> 6), t[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    else if (cp < 0x10000)
        t[0] = (char)(0xe0 | cp >> 12), t[1] = (char)(0x80 | (cp >> 6 & 0x3f)),
        t[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    else
        t[0] = (char)(0xf0 | cp >> 18), t[1] = (char)(0x80 | (cp >> 12 & 0x3f)),
        t[2] = (char)(0x80 | (cp >> 6 & 0x3f)), t[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
    dy_schema_literal(b, t, (size_t)n);
}

/* A set of characters from a class: ASCII as a bitmap, others listed. */
typedef struct {
    bool ascii[128];
    long other[32];
    int n_other;
    bool negated;
} charset;

static void set_range(charset *cs, long lo, long hi)
{
    for (long c = lo; c <= hi; c++)
        cs->ascii[c] = true;
}

/* \d \w \s as ASCII sets (ECMA-262's \d and \w are ASCII; its \s also holds non-ASCII spaces,
 * so \s is a subset here, and refused inside a negated class). */
static bool class_escape(charset *cs, char e)
{
    switch (e) {
    case 'd': set_range(cs, '0', '9'); return true;
    case 'w': set_range(cs, '0', '9'); set_range(cs, 'a', 'z'); set_range(cs, 'A', 'Z');
              cs->ascii['_'] = true; return true;
    case 's': set_range(cs, '\t', '\r'); cs->ascii[' '] = true; return true;
    default: return false;
    }
}

/* An escape that stands for one character: its code point, or -1 (not such an escape). */
static long char_escape(regex *r)
{
    char e = r->s[r->i];
    static const char syntax[] = "^$\\.*+?()[]{}|/-";
    switch (e) {
    case 'n': r->i++; return '\n';
    case 'r': r->i++; return '\r';
    case 't': r->i++; return '\t';
    case 'f': r->i++; return '\f';
    case 'v': r->i++; return '\v';
    case '0':
        if (r->i + 1 < r->n && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9')
            return -1;
        r->i++;
        return 0;
    case 'x': case 'u': {
        int digits = e == 'x' ? 2 : 4;
        long v = 0;
        if (r->i + (size_t)digits >= r->n)
            return -1;
        for (int k = 1; k <= digits; k++) {
            char h = r->s[r->i + (size_t)k];
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0)
                return -1;
            v = v * 16 + d;
        }
        if (v >= 0xd800 && v <= 0xdfff)
            return -1;
        r->i += (size_t)digits + 1;
        return v;
    }
    default:
        if (e && strchr(syntax, e)) {
            r->i++;
            return (unsigned char)e;
        }
        return -1;
    }
}

/* One member of a class (a character, an escape), its code point in *cp or -2 for a class
 * escape already added. */
static bool class_member(regex *r, charset *cs, long *cp)
{
    size_t at = r->i;
    if (r->s[r->i] != '\\') {
        *cp = regex_utf8(r);
        return *cp >= 0 || regex_fail(r, at, "a byte that is not UTF-8");
    }
    r->i++;
    if (r->i >= r->n)
        return regex_fail(r, at, "a trailing backslash");
    if (class_escape(cs, r->s[r->i])) {
        if (cs->negated)
            return regex_fail(r, at, "\\d, \\w or \\s inside a negated class");
        r->i++;
        *cp = -2;
        return true;
    }
    if (r->s[r->i] == 'b') { /* inside a class \b is the backspace */
        r->i++;
        *cp = '\b';
        return true;
    }
    *cp = char_escape(r);
    return *cp >= 0 || regex_fail(r, at, "this escape");
}

static bool parse_charset(regex *r, charset *cs)
{
    size_t start = r->i++;
    if (r->i < r->n && r->s[r->i] == '^') {
        cs->negated = true;
        r->i++;
    }
    bool any = false;
    while (r->i < r->n && r->s[r->i] != ']') {
        long lo, hi;
        if (!class_member(r, cs, &lo))
            return false;
        hi = lo;
        if (lo != -2 && r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (!class_member(r, cs, &hi))
                return false;
            if (hi == -2 || hi < lo)
                return regex_fail(r, start, "this class range");
        }
        any = true;
        if (lo == -2)
            continue;
        if (hi >= 0x80 && hi != lo)
            return regex_fail(r, start, "a class range outside ASCII");
        if (lo >= 0x80) {
            if (cs->negated)
                return regex_fail(r, start, "a character outside ASCII in a negated class");
            if (cs->n_other == (int)(sizeof cs->other / sizeof cs->other[0]))
                return regex_fail(r, start, "a class with this many characters outside ASCII");
            cs->other[cs->n_other++] = lo;
        } else {
            set_range(cs, lo, hi);
        }
    }
    if (r->i >= r->n)
        return regex_fail(r, start, "an unclosed [");
    r->i++;
    if (!any)
        return regex_fail(r, start, "an empty class");
    return true;
}

/* Appends one byte class of the ASCII characters in `want` that JSON writes raw. */
static bool raw_ascii_class(dy_buf *b, const bool want[128])
{
    dy_buf cls = {0};
    for (int c = 0x20; c < 0x80; c++) {
        bool in = want[c] && c != '"' && c != '\\';
        if (!in)
            continue;
        int hi = c;
        while (hi + 1 < 0x80 && want[hi + 1] && hi + 1 != '"' && hi + 1 != '\\')
            hi++;
        dy_schema_class_range(&cls, (unsigned)c, (unsigned)hi);
        c = hi;
    }
    bool any = cls.len > 0;
    if (any) {
        dy_buf_append_str(b, "[");
        dy_buf_append(b, cls.data, cls.len);
        dy_buf_append_str(b, "]");
    }
    dy_buf_free(&cls);
    return any;
}

/* A class as alternatives over JSON text. Negated: any character JSON writes raw except the
 * listed ones (the grammar's negated class matches whole UTF-8 characters), and the short
 * escapes of those not listed. */
static void emit_charset(dy_buf *b, const charset *cs)
{
    bool first = true;
    dy_buf_append_str(b, "( ");
    if (cs->negated) {
        dy_buf_append_str(b, "[^\\x22\\x5c\\x00-\\x1f");
        for (int c = 0x20; c < 0x80; c++)
            if (cs->ascii[c] && c != '"' && c != '\\')
                dy_schema_class_byte(b, (unsigned)c);
        dy_buf_append_str(b, "]");
        first = false;
        static const char escaped[] = "\"\\\b\f\n\r\t";
        for (const char *e = escaped; *e; e++)
            if (!cs->ascii[(int)*e]) {
                dy_buf_append_str(b, " | ");
                json_char(b, *e);
            }
    } else {
        first = !raw_ascii_class(b, cs->ascii);
        for (int c = 0; c < 0x80; c++)
            if (cs->ascii[c] && (c < 0x20 || c == '"' || c == '\\')) {
                dy_buf_append_str(b, first ? "" : " | ");
                json_char(b, c);
                first = false;
            }
        for (int k = 0; k < cs->n_other; k++) {
            dy_buf_append_str(b, first ? "" : " | ");
            json_char(b, cs->other[k]);
            first = false;
        }
    }
    dy_buf_append_str(b, " )");
}

static bool regex_alternatives(regex *r, dy_buf *b, int depth, bool top);

/* One atom into b (empty text: it matches only the empty string). */
static bool regex_atom(regex *r, dy_buf *b, int depth)
{
    size_t at = r->i;
    char ch = r->s[r->i];
    if (ch == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':')
                r->i += 2;
            else if (r->i + 2 < r->n && r->s[r->i + 1] == '<' && r->s[r->i + 2] != '=' &&
                     r->s[r->i + 2] != '!') {
                while (r->i < r->n && r->s[r->i] != '>')
                    r->i++;
                if (r->i++ >= r->n)
                    return regex_fail(r, at, "an unclosed group name");
            } else {
                return regex_fail(r, at, "a lookaround");
            }
        }
        if (depth > 64)
            return regex_fail(r, at, "groups nested this deep");
        if (!regex_alternatives(r, b, depth + 1, false))
            return false;
        if (r->i >= r->n || r->s[r->i] != ')')
            return regex_fail(r, at, "an unclosed (");
        r->i++;
        return true;
    }
    if (ch == '[') {
        charset cs = {0};
        if (!parse_charset(r, &cs))
            return false;
        emit_charset(b, &cs);
        return true;
    }
    if (ch == '.') {
        r->i++;
        r->rx->used_dot = true;
        dy_buf_printf(b, "%s-dot", r->rx->prefix);
        return true;
    }
    if (ch == '\\') {
        r->i++;
        if (r->i >= r->n)
            return regex_fail(r, at, "a trailing backslash");
        charset cs = {0};
        if (class_escape(&cs, r->s[r->i])) {
            r->i++;
            emit_charset(b, &cs);
            return true;
        }
        long cp = char_escape(r);
        if (cp < 0)
            return regex_fail(r, at, "this escape");
        json_char(b, cp);
        return true;
    }
    if (ch == '*' || ch == '+' || ch == '?' || ch == ')' || ch == ']' || ch == '{' || ch == '}')
        return regex_fail(r, at, "this character unescaped");
    if (ch == '^' || ch == '$')
        return regex_fail(r, at, "an anchor inside the pattern (only at its ends)");
    long cp = regex_utf8(r);
    if (cp < 0)
        return regex_fail(r, at, "a byte that is not UTF-8");
    json_char(b, cp);
    return true;
}

/* Reads a quantifier if one is next: *min, *max, *unbounded; false with *none if none. */
static bool regex_quantifier(regex *r, uint64_t *min, uint64_t *max, bool *unbounded, bool *none)
{
    size_t at = r->i;
    *none = false, *unbounded = false;
    char ch = r->i < r->n ? r->s[r->i] : 0;
    if (ch == '*' || ch == '+' || ch == '?') {
        r->i++;
        *min = ch == '+';
        *max = 1;
        *unbounded = ch != '?';
    } else if (ch == '{') {
        unsigned long m = 0, n = 0;
        int used = 0;
        char close = 0;
        if (sscanf(r->s + r->i, "{%lu%n", &m, &used) < 1 || used < 2)
            return regex_fail(r, at, "a '{' that is not a quantifier");
        r->i += (size_t)used;
        n = m;
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            if (r->i < r->n && r->s[r->i] == '}')
                *unbounded = true;
            else if (sscanf(r->s + r->i, "%lu%n", &n, &used) < 1)
                return regex_fail(r, at, "this quantifier");
            else
                r->i += (size_t)used;
        }
        close = r->i < r->n ? r->s[r->i] : 0;
        if (close != '}' || (!*unbounded && n < m) || m > 10000 || n > 10000)
            return regex_fail(r, at, "this quantifier");
        r->i++;
        *min = m, *max = n;
    } else {
        *none = true;
        return true;
    }
    if (r->i < r->n && r->s[r->i] == '?') /* lazy: the same set of whole matches */
        r->i++;
    return true;
}

/* A sequence of quantified atoms up to '|', ')' or the end. */
static bool regex_sequence(regex *r, dy_buf *b, int depth, bool top)
{
    bool first = true;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (top && r->s[r->i] == '$' &&
            (r->i + 1 == r->n || r->s[r->i + 1] == '|'))
            break;
        dy_buf atom = {0};
        uint64_t min = 1, max = 1;
        bool unbounded = false, none = true;
        bool ok = regex_atom(r, &atom, depth) &&
                  regex_quantifier(r, &min, &max, &unbounded, &none);
        if (ok && atom.len && (unbounded || max > 0)) {
            dy_buf_append_str(b, first ? "" : " ");
            first = false;
            if (none) {
                dy_buf_append(b, atom.data, atom.len);
            } else {
                dy_buf_append_str(b, "( ");
                dy_buf_append(b, atom.data, atom.len);
                dy_buf_append_str(b, " )");
                dy_schema_quantifier(b, min, max, unbounded);
            }
        }
        dy_buf_free(&atom);
        if (!ok)
            return false;
    }
    return true;
}

/* Alternatives; at the top each may start with '^' and end with '$', and an unanchored end
 * lets any characters come before or after (patterns are not anchored). An alternative that
 * matches only the empty string makes the group optional. */
static bool regex_alternatives(regex *r, dy_buf *b, int depth, bool top)
{
    dy_buf alts = {0};
    bool empty = false, ok = true;
    int n = 0;
    for (;;) {
        bool start = false;
        if (top && r->i < r->n && r->s[r->i] == '^')
            start = true, r->i++;
        dy_buf seq = {0};
        ok = regex_sequence(r, &seq, depth, top);
        bool end = false;
        if (ok && top && r->i < r->n && r->s[r->i] == '$')
            end = true, r->i++;
        if (ok && top) {
            dy_buf wrapped = {0};
            if (!start)
                dy_buf_printf(&wrapped, "%s-char*", r->rx->prefix);
            if (seq.len)
                dy_buf_printf(&wrapped, "%s%.*s", wrapped.len ? " " : "", (int)seq.len,
                              (const char *)seq.data);
            if (!end)
                dy_buf_printf(&wrapped, "%s%s-char*", wrapped.len ? " " : "", r->rx->prefix);
            dy_buf_free(&seq);
            seq = wrapped;
        }
        if (ok && seq.len) {
            dy_buf_append_str(&alts, n++ ? " | " : "");
            dy_buf_append(&alts, seq.data, seq.len);
        } else if (ok) {
            empty = true;
        }
        dy_buf_free(&seq);
        if (!ok || r->i >= r->n || r->s[r->i] != '|')
            break;
        r->i++;
    }
    if (ok && top && r->i < r->n)
        ok = regex_fail(r, r->i, "an unmatched )");
    if (ok && n) {
        dy_buf_append_str(b, "( ");
        dy_buf_append(b, alts.data, alts.len);
        dy_buf_append_str(b, empty ? " )?" : " )");
    }
    dy_buf_free(&alts);
    return ok;
}

bool dy_schema_pattern(dy_schema_regex *rx, const char *pattern, size_t n, dy_buf *body)
{
    regex r = {rx, pattern, 0, n};
    dy_buf inner = {0};
    bool ok = regex_alternatives(&r, &inner, 0, true);
    dy_buf_append_str(body, "\"\\\"\" ");
    if (inner.len)
        dy_buf_append(body, inner.data, inner.len);
    dy_buf_append_str(body, inner.len ? " \"\\\"\"" : "\"\\\"\"");
    dy_buf_free(&inner);
    return ok;
}
