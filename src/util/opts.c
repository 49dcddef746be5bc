/* opts.c — see opts.h. getopt_long finds the options; this file converts and checks their
 * values, writes defaults, prints help and builds argument vectors, all from the table. */
#include "util/opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTS 128
#define FIRST_LONG_VAL 256 /* getopt_long's return value for entries without a short name */

/* ---------------------------------------------------------------- values */

/* The stored value of an ENUM's i-th name. */
static int enum_value(const dy_opt *o, int i)
{
    return o->values ? o->values[i] : i;
}

/* "a, b or c": an ENUM's accepted names, for its error message. */
static void enum_list(const dy_opt *o, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; o->names[i] && len < cap; i++) {
        const char *sep = i == 0 ? "" : o->names[i + 1] ? ", " : " or ";
        len += (size_t)snprintf(out + len, cap - len, "%s%s", sep, o->names[i]);
    }
}

static bool set_enum(const dy_opt *o, const char *v, char *err, size_t errlen)
{
    for (int i = 0; o->names[i]; i++)
        if (!strcmp(o->names[i], v)) {
            *(int *)o->dst = enum_value(o, i);
            return true;
        }
    char list[512];
    enum_list(o, list, sizeof list);
    snprintf(err, errlen, "--%s: '%s' is not %s", o->name, v, list);
    return false;
}

static bool set_integer(const dy_opt *o, const char *v, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < o->min || x > o->max) {
        snprintf(err, errlen, "--%s: '%s' is not an integer in [%.0f, %.0f]", o->name, v, o->min,
                 o->max);
        return false;
    }
    if (o->kind == DY_OPT_LONG)
        *(long *)o->dst = x;
    else
        *(int *)o->dst = (int)x;
    return true;
}

static bool set_u64(const dy_opt *o, const char *v, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') {
        snprintf(err, errlen, "--%s: '%s' is not a non-negative integer", o->name, v);
        return false;
    }
    *(uint64_t *)o->dst = x;
    return true;
}

static bool set_number(const dy_opt *o, const char *v, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || isnan(x) || x < o->min || x > o->max) {
        snprintf(err, errlen, "--%s: '%s' is not a number in [%g, %g]", o->name, v, o->min,
                 o->max);
        return false;
    }
    if (o->kind == DY_OPT_FLOAT)
        *(float *)o->dst = (float)x;
    else
        *(double *)o->dst = x;
    return true;
}

static bool set_value(const dy_opt *o, const char *v, char *err, size_t errlen)
{
    switch (o->kind) {
    case DY_OPT_FLAG: *(bool *)o->dst = o->def == 0; return true;
    case DY_OPT_INT:
    case DY_OPT_LONG: return set_integer(o, v, err, errlen);
    case DY_OPT_U64: return set_u64(o, v, err, errlen);
    case DY_OPT_DOUBLE:
    case DY_OPT_FLOAT: return set_number(o, v, err, errlen);
    case DY_OPT_STR: *(const char **)o->dst = v; return true;
    case DY_OPT_ENUM: return set_enum(o, v, err, errlen);
    case DY_OPT_CALL: break;
    }
    char why[256] = "bad value";
    if (o->call(o->ctx, v, why, sizeof why))
        return true;
    snprintf(err, errlen, "--%s: %s", o->name, why);
    return false;
}

void dy_opts_defaults(const dy_opt *opts, int n)
{
    for (int i = 0; i < n; i++) {
        const dy_opt *o = &opts[i];
        if (o->given)
            *o->given = false;
        switch (o->kind) {
        case DY_OPT_FLAG: *(bool *)o->dst = o->def != 0; break;
        case DY_OPT_INT:
        case DY_OPT_ENUM: *(int *)o->dst = (int)o->def; break;
        case DY_OPT_LONG: *(long *)o->dst = (long)o->def; break;
        case DY_OPT_U64: *(uint64_t *)o->dst = (uint64_t)o->def; break;
        case DY_OPT_DOUBLE: *(double *)o->dst = o->def; break;
        case DY_OPT_FLOAT: *(float *)o->dst = (float)o->def; break;
        case DY_OPT_STR: *(const char **)o->dst = o->def_str; break;
        case DY_OPT_CALL: break;
        }
    }
}

/* ---------------------------------------------------------------- parsing */

static int getopt_val(const dy_opt *opts, int i)
{
    return opts[i].short_name ? opts[i].short_name : FIRST_LONG_VAL + i;
}

static int entry_of(const dy_opt *opts, int n, int val)
{
    for (int i = 0; i < n; i++)
        if (getopt_val(opts, i) == val)
            return i;
    return -1;
}

/* getopt_long's tables: "-:" + short names ('-' returns arguments in order, ':' reports a
 * missing value apart from an unknown option), and one struct option per entry plus --help. */
static void getopt_tables(const dy_opt *opts, int n, char *shorts, struct option *longs)
{
    int s = 0;
    shorts[s++] = '-';
    shorts[s++] = ':';
    shorts[s++] = 'h';
    for (int i = 0; i < n; i++) {
        bool arg = opts[i].kind != DY_OPT_FLAG;
        longs[i] = (struct option){opts[i].name, arg ? required_argument : no_argument, NULL,
                                   getopt_val(opts, i)};
        if (opts[i].short_name) {
            shorts[s++] = opts[i].short_name;
            if (arg)
                shorts[s++] = ':';
        }
    }
    shorts[s] = 0;
    longs[n] = (struct option){"help", no_argument, NULL, 'h'};
    longs[n + 1] = (struct option){0, 0, 0, 0};
}

/* getopt_long also takes unique prefixes ("--mod" for "--model"); commands have never
 * accepted those, so the word on the command line must be the whole name. */
static bool whole_name(const char *word, const char *name)
{
    if (word[0] != '-' || word[1] != '-')
        return true; /* a short option */
    size_t len = strcspn(word + 2, "=");
    return strlen(name) == len && !strncmp(word + 2, name, len);
}

static bool take_positional(dy_opt_positional *pos, const char *arg, char *err, size_t errlen)
{
    if (!pos || pos->max == 0) {
        snprintf(err, errlen, "unknown option '%s'", arg);
        return false;
    }
    if (pos->n == pos->max) {
        snprintf(err, errlen, "unexpected argument '%s'", arg);
        return false;
    }
    pos->args[pos->n++] = arg;
    return true;
}

dy_opts_result dy_opts_parse(const dy_opt *opts, int n, int argc, char **argv,
                             dy_opt_positional *pos, char *err, size_t errlen)
{
    char shorts[3 + 2 * MAX_OPTS + 1];
    struct option longs[MAX_OPTS + 2];
    if (n > MAX_OPTS) {
        snprintf(err, errlen, "too many options in one table");
        return DY_OPTS_BAD;
    }
    getopt_tables(opts, n, shorts, longs);
    dy_opts_defaults(opts, n);
    if (pos)
        pos->n = 0;
    optind = 0; /* glibc: start afresh, as for a new argv */
    opterr = 0;
    for (;;) {
        int word = optind ? optind : 1, li = -1;
        int c = getopt_long(argc, argv, shorts, longs, &li);
        if (c == -1)
            break;
        const char *name = li < 0 ? NULL : li == n ? "help" : opts[li].name;
        if (c == 1) {
            if (!take_positional(pos, optarg, err, errlen))
                return DY_OPTS_BAD;
            continue;
        }
        if (c == '?' || (name && !whole_name(argv[word], name))) {
            if (optopt && optopt < FIRST_LONG_VAL && c == '?')
                snprintf(err, errlen, "unknown option '-%c'", optopt);
            else
                snprintf(err, errlen, "unknown option '%s'", argv[word]);
            return DY_OPTS_BAD;
        }
        if (c == ':') {
            snprintf(err, errlen, "%s needs a value", argv[word]);
            return DY_OPTS_BAD;
        }
        if (c == 'h' && (li < 0 || li == n))
            return DY_OPTS_HELP;
        int e = entry_of(opts, n, c);
        if (e < 0) { /* cannot happen: getopt returns only the values it was given */
            snprintf(err, errlen, "unknown option '%s'", argv[word]);
            return DY_OPTS_BAD;
        }
        if (!set_value(&opts[e], optarg, err, errlen))
            return DY_OPTS_BAD;
        if (opts[e].given)
            *opts[e].given = true;
    }
    for (; optind < argc; optind++) /* after "--" */
        if (!take_positional(pos, argv[optind], err, errlen))
            return DY_OPTS_BAD;
    return DY_OPTS_OK;
}

dy_opt *dy_opts_find(dy_opt *opts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(opts[i].name, name))
            return &opts[i];
    return NULL;
}

bool dy_opts_was_given(dy_opts_given g, const char *flag)
{
    const char *name = strncmp(flag, "--", 2) == 0 ? flag + 2 : flag;
    for (int i = 0; i < g.n; i++)
        if (!strcmp(g.opts[i].name, name))
            return g.opts[i].given && *g.opts[i].given;
    return false;
}

bool dy_opts_needs(dy_opts_given g, const char *a, bool ok, const char *b)
{
    if (dy_opts_was_given(g, a) && !ok) {
        fprintf(stderr, "dyad %s: %s needs %s\n", g.cmd, a, b);
        return false;
    }
    return true;
}

bool dy_opts_conflict(dy_opts_given g, const char *a, bool other, const char *b)
{
    if (dy_opts_was_given(g, a) && other) {
        fprintf(stderr, "dyad %s: %s cannot be used with %s\n", g.cmd, a, b);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- help */

#define HELP_WIDTH 92
#define HELP_MAX_COLUMN 30 /* where help paragraphs start at the latest */

/* "(default 16)", from the table; empty when there is none to say. */
static void default_text(const dy_opt *o, char *out, size_t cap)
{
    out[0] = 0;
    if (o->shown_default) {
        bool number = *o->shown_default >= '0' && *o->shown_default <= '9';
        if (*o->shown_default)
            snprintf(out, cap, number ? "(default %s)" : "(default: %s)", o->shown_default);
        return;
    }
    switch (o->kind) {
    case DY_OPT_INT:
    case DY_OPT_LONG:
    case DY_OPT_U64: snprintf(out, cap, "(default %.0f)", o->def); break;
    case DY_OPT_DOUBLE:
    case DY_OPT_FLOAT: snprintf(out, cap, "(default %g)", o->def); break;
    case DY_OPT_STR:
        if (o->def_str)
            snprintf(out, cap, "(default %s)", o->def_str);
        break;
    case DY_OPT_ENUM:
        for (int i = 0; o->names[i]; i++)
            if (enum_value(o, i) == (int)o->def)
                snprintf(out, cap, "(default %s)", o->names[i]);
        break;
    case DY_OPT_FLAG:
    case DY_OPT_CALL: break;
    }
}

/* "-o, --output FILE" */
static int option_words(const dy_opt *o, char *out, size_t cap)
{
    char shortpart[8] = "";
    if (o->short_name)
        snprintf(shortpart, sizeof shortpart, "-%c, ", o->short_name);
    return snprintf(out, cap, "  %s--%s%s%s", shortpart, o->name, o->meta ? " " : "",
                    o->meta ? o->meta : "");
}

/* Words of text, wrapped to HELP_WIDTH with every line after the first indented to col. */
static void wrap(FILE *f, const char *text, int col, int at)
{
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        int len = (int)strcspn(p, " ");
        if (!len)
            break;
        if (at > col && at + 1 + len > HELP_WIDTH) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        } else if (at > col) {
            fputc(' ', f);
            at++;
        }
        fwrite(p, 1, (size_t)len, f);
        at += len;
        p += len;
    }
    fputc('\n', f);
}

void dy_opts_help(FILE *f, const char *usage, const dy_opt *opts, int n, const char *epilog)
{
    char words[128], def[256], para[1024];
    int col = 0;
    for (int i = 0; i < n; i++) {
        int w = option_words(&opts[i], words, sizeof words) + 2;
        if (w > col)
            col = w;
    }
    col = col > HELP_MAX_COLUMN ? HELP_MAX_COLUMN : col;
    fputs(usage, f);
    for (int i = 0; i < n; i++) {
        if (opts[i].section)
            fprintf(f, "\n%s\n", opts[i].section);
        int w = option_words(&opts[i], words, sizeof words);
        default_text(&opts[i], def, sizeof def);
        snprintf(para, sizeof para, "%s%s%s", opts[i].help, *def ? " " : "", def);
        if (w + 2 > col)
            fprintf(f, "%s\n%*s", words, col, "");
        else
            fprintf(f, "%-*s", col, words);
        wrap(f, para, col, col);
    }
    if (epilog)
        fputs(epilog, f);
}

/* ---------------------------------------------------------------- argument vectors */

/* The value of o as an argument, in store; NULL when it is the default (nothing to pass). */
static const char *value_text(const dy_opt *o, char *store, size_t cap)
{
    switch (o->kind) {
    case DY_OPT_FLAG: return *(bool *)o->dst != (o->def != 0) ? "" : NULL;
    case DY_OPT_STR: {
        const char *s = *(const char **)o->dst;
        bool same = s == o->def_str || (s && o->def_str && !strcmp(s, o->def_str));
        return same ? NULL : s;
    }
    case DY_OPT_ENUM:
        for (int i = 0; o->names[i]; i++)
            if (enum_value(o, i) == *(int *)o->dst)
                return *(int *)o->dst == (int)o->def ? NULL : o->names[i];
        return NULL;
    case DY_OPT_INT:
        if (*(int *)o->dst == (int)o->def)
            return NULL;
        snprintf(store, cap, "%d", *(int *)o->dst);
        return store;
    case DY_OPT_LONG:
        if (*(long *)o->dst == (long)o->def)
            return NULL;
        snprintf(store, cap, "%ld", *(long *)o->dst);
        return store;
    case DY_OPT_U64:
        if (*(uint64_t *)o->dst == (uint64_t)o->def)
            return NULL;
        snprintf(store, cap, "%llu", (unsigned long long)*(uint64_t *)o->dst);
        return store;
    case DY_OPT_DOUBLE:
        if (*(double *)o->dst == o->def)
            return NULL;
        snprintf(store, cap, "%.17g", *(double *)o->dst);
        return store;
    case DY_OPT_FLOAT:
        if (*(float *)o->dst == (float)o->def)
            return NULL;
        snprintf(store, cap, "%.9g", (double)*(float *)o->dst);
        return store;
    case DY_OPT_CALL: return NULL; /* what it did cannot be read back */
    }
    return NULL;
}

int dy_opts_to_argv(const dy_opt *opts, int n, char **argv, int cap, char *store,
                    size_t storecap)
{
    int a = 0;
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        char num[32];
        const char *v = value_text(&opts[i], num, sizeof num);
        if (!v)
            continue;
        size_t need = strlen(opts[i].name) + 3 + (v == num ? strlen(num) + 1 : 0);
        if (a + 2 >= cap || used + need > storecap)
            return -1;
        argv[a++] = store + used;
        used += (size_t)sprintf(store + used, "--%s", opts[i].name) + 1;
        if (opts[i].kind == DY_OPT_FLAG)
            continue;
        if (v == num) {
            argv[a++] = strcpy(store + used, num);
            used += strlen(num) + 1;
        } else
            argv[a++] = (char *)v;
    }
    if (a >= cap)
        return -1;
    argv[a] = NULL;
    return a;
}
