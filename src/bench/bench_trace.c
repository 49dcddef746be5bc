/* bench_trace.c — see bench_trace.h. Owns line reading, CSV splitting, the Mooncake line
 * schema, timestamp parsing and row storage; a dyb_trace owns its rows and hash ids. */
#include "bench/bench_trace.h"
#include "util/buf.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_FIELDS 64

/* Where a reader is, for messages and the skip-or-fail decision on a bad line. */
typedef struct {
    const char *name;
    size_t line;
    bool skip_bad;
    dyb_trace *t;
    char *err;
    size_t errlen;
} reader;

/* A bad line: counted and skipped (returns 0) or the reader's error (returns -1). */
static int bad_line(reader *r, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!r->skip_bad) {
        snprintf(r->err, r->errlen, "%s:%zu: %s", r->name, r->line, msg);
        return -1;
    }
    if (r->t->skipped++ == 0)
        snprintf(r->t->first_bad, sizeof r->t->first_bad, "%s:%zu: %s", r->name, r->line, msg);
    return 0;
}

static int oom(reader *r)
{
    snprintf(r->err, r->errlen, "%s:%zu: out of memory", r->name, r->line);
    return -1;
}

static int add_row(reader *r, double t_ms, long in_len, long out_len, const uint64_t *hashes,
                   size_t n_hash)
{
    dyb_trace *t = r->t;
    if (!dy_array_reserve((void **)&t->rows, &t->cap, t->n + 1, sizeof *t->rows) ||
        !dy_array_reserve((void **)&t->hashes, &t->hashes_cap, t->n_hashes + n_hash,
                          sizeof *t->hashes))
        return oom(r);
    if (n_hash)
        memcpy(t->hashes + t->n_hashes, hashes, n_hash * sizeof *hashes);
    t->rows[t->n++] = (dyb_trace_row){t_ms, in_len, out_len, t->n_hashes, n_hash, r->line};
    t->n_hashes += n_hash;
    return 0;
}

/* Strips the line end (LF or CRLF); true if nothing but blanks is left. */
static bool chomp_blank(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
    for (const char *p = s; *p; p++)
        if (!isspace((unsigned char)*p))
            return false;
    return true;
}

/* Calls fn on every non-blank line; stops at the first -1. */
static int for_lines(FILE *f, reader *r, int (*fn)(reader *, char *, void *), void *ctx)
{
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    errno = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        r->line++;
        if (!chomp_blank(line))
            rc = fn(r, line, ctx);
    }
    if (rc == 0 && ferror(f)) {
        snprintf(r->err, r->errlen, "%s:%zu: read error: %s", r->name, r->line, strerror(errno));
        rc = -1;
    }
    free(line);
    return rc;
}

static int cmp_rows(const void *a, const void *b)
{
    const dyb_trace_row *x = a, *y = b;
    if (x->t_ms != y->t_ms)
        return x->t_ms < y->t_ms ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Sorts a timed trace by arrival (ties keep file order) and starts it at 0. */
static void normalise_times(dyb_trace *t)
{
    t->has_time = true;
    if (t->n == 0)
        return;
    qsort(t->rows, t->n, sizeof *t->rows, cmp_rows);
    double t0 = t->rows[0].t_ms;
    for (size_t i = 0; i < t->n; i++)
        t->rows[i].t_ms -= t0;
}

/* ---- Mooncake JSONL ---------------------------------------------------------------------- */

static bool json_length(json_t *o, const char *key, long *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000000)
        return false;
    *out = (long)json_integer_value(v);
    return true;
}

static int mooncake_line(reader *r, char *line, void *ctx)
{
    (void)ctx;
    json_error_t je;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &je);
    int rc;
    long in_len, out_len;
    json_t *ts = o ? json_object_get(o, "timestamp") : NULL, *h;
    if (!o)
        rc = bad_line(r, "bad JSON: %s", je.text);
    else if (!json_is_object(o))
        rc = bad_line(r, "not a JSON object");
    else if (!json_is_number(ts) || !(json_number_value(ts) >= 0) ||
             !isfinite(json_number_value(ts)))
        rc = bad_line(r, "\"timestamp\" must be a number >= 0 (ms)");
    else if (!json_length(o, "input_length", &in_len))
        rc = bad_line(r, "\"input_length\" must be an integer >= 0");
    else if (!json_length(o, "output_length", &out_len))
        rc = bad_line(r, "\"output_length\" must be an integer >= 0");
    else if ((h = json_object_get(o, "hash_ids")) && !json_is_array(h))
        rc = bad_line(r, "\"hash_ids\" must be an array");
    else {
        size_t n = json_array_size(h);
        uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) {
            json_decref(o);
            return oom(r);
        }
        size_t i;
        for (i = 0; i < n; i++) {
            json_t *v = json_array_get(h, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                break;
            ids[i] = (uint64_t)json_integer_value(v);
        }
        rc = i < n ? bad_line(r, "\"hash_ids\"[%zu] must be an integer >= 0", i)
                   : add_row(r, json_number_value(ts), in_len, out_len, ids, n);
        free(ids);
    }
    json_decref(o);
    return rc;
}

int dyb_trace_read_mooncake(FILE *f, const char *name, bool skip_bad, dyb_trace *t, char *err,
                            size_t errlen)
{
    reader r = {name, 0, skip_bad, t, err, errlen};
    t->format = "mooncake";
    if (for_lines(f, &r, mooncake_line, NULL) != 0)
        return -1;
    normalise_times(t);
    return 0;
}

/* ---- CSV ----------------------------------------------------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

/* Splits a CSV line in place (double-quoted fields may hold commas and "" escapes).
 * Returns the number of fields, or -1 if there are too many or a quote is unclosed. */
static int split_csv(char *line, char **fields)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == MAX_FIELDS)
            return -1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '"') {
            char *w = ++p;
            fields[n++] = w;
            for (;; p++) {
                if (!*p)
                    return -1;
                if (*p == '"' && p[1] == '"')
                    *w++ = *p++;
                else if (*p == '"')
                    break;
                else
                    *w++ = *p;
            }
            *w = 0;
            p++;
            while (*p && *p != ',')
                if (!isspace((unsigned char)*p++))
                    return -1;
        } else {
            fields[n++] = p;
            while (*p && *p != ',')
                p++;
        }
        if (!*p)
            break;
        *p++ = 0;
    }
    for (int i = 0; i < n; i++)
        fields[i] = trim(fields[i]);
    return n;
}

static bool parse_count(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 100000000)
        return false;
    *out = v;
    return true;
}

/* What a CSV reader looks for, and where it found it. */
typedef struct {
    const char *ts_name, *in_name, *out_name; /* ts_name NULL: no time column */
    int ts, in, out, n_fields;
    bool header_done;
    char header[512]; /* the header's names, for messages */
} csv_spec;

static int find_col(char **f, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcasecmp(f[i], name))
            return i;
    return -1;
}

/* Known input/output column pairs of length tables, tried in order when none is named. */
static const char *const known_cols[][2] = {
    {"num_prefill_tokens", "num_decode_tokens"}, {"input_length", "output_length"},
    {"ContextTokens", "GeneratedTokens"},        {"input_tokens", "output_tokens"},
    {"prompt_tokens", "completion_tokens"},      {"prompt_len", "output_len"},
    {"input_len", "output_len"},
};

static int csv_header(reader *r, csv_spec *s, char **f, int n)
{
    size_t k = 0;
    for (int i = 0; i < n && k + 2 < sizeof s->header; i++)
        k += (size_t)snprintf(s->header + k, sizeof s->header - k, "%s%s", i ? ", " : "", f[i]);
    if (!s->in_name || !s->out_name)
        for (size_t i = 0; i < sizeof known_cols / sizeof known_cols[0]; i++)
            if (find_col(f, n, known_cols[i][0]) >= 0 && find_col(f, n, known_cols[i][1]) >= 0) {
                s->in_name = s->in_name ? s->in_name : known_cols[i][0];
                s->out_name = s->out_name ? s->out_name : known_cols[i][1];
                break;
            }
    if (!s->in_name || !s->out_name) {
        snprintf(r->err, r->errlen,
                 "%s:%zu: no known input/output length columns in the header (%s); name them "
                 "with --input-col and --output-col", r->name, r->line, s->header);
        return -1;
    }
    const char *names[3] = {s->ts_name, s->in_name, s->out_name};
    int *cols[3] = {&s->ts, &s->in, &s->out};
    for (int i = 0; i < 3; i++)
        if (names[i] && (*cols[i] = find_col(f, n, names[i])) < 0) {
            snprintf(r->err, r->errlen, "%s:%zu: no column '%s' in the header (%s)", r->name,
                     r->line, names[i], s->header);
            return -1;
        }
    s->n_fields = n;
    s->header_done = true;
    return 0;
}

static int csv_line(reader *r, char *line, void *ctx)
{
    csv_spec *s = ctx;
    char *f[MAX_FIELDS];
    int n = split_csv(line, f);
    if (!s->header_done) {
        if (n < 0) {
            snprintf(r->err, r->errlen, "%s:%zu: unreadable CSV header", r->name, r->line);
            return -1;
        }
        return csv_header(r, s, f, n);
    }
    long in_len, out_len;
    double t_ms = 0;
    if (n != s->n_fields)
        return bad_line(r, "%d fields where the header has %d", n, s->n_fields);
    if (s->ts_name && dyb_parse_datetime_ms(f[s->ts], &t_ms) != 0)
        return bad_line(r, "%s: '%.40s' is not a time (YYYY-MM-DD HH:MM:SS[.f])", s->ts_name,
                        f[s->ts]);
    if (!parse_count(f[s->in], &in_len))
        return bad_line(r, "%s: '%.40s' is not a token count", s->in_name, f[s->in]);
    if (!parse_count(f[s->out], &out_len))
        return bad_line(r, "%s: '%.40s' is not a token count", s->out_name, f[s->out]);
    return add_row(r, t_ms, in_len, out_len, NULL, 0);
}

static int read_csv(FILE *f, reader *r, csv_spec *s)
{
    if (for_lines(f, r, csv_line, s) != 0)
        return -1;
    if (!s->header_done) {
        snprintf(r->err, r->errlen, "%s: empty file (no CSV header)", r->name);
        return -1;
    }
    return 0;
}

int dyb_trace_read_azure(FILE *f, const char *name, bool skip_bad, dyb_trace *t, char *err,
                         size_t errlen)
{
    reader r = {name, 0, skip_bad, t, err, errlen};
    csv_spec s = {.ts_name = "TIMESTAMP", .in_name = "ContextTokens",
                  .out_name = "GeneratedTokens"};
    t->format = "azure";
    if (read_csv(f, &r, &s) != 0)
        return -1;
    normalise_times(t);
    return 0;
}

int dyb_trace_read_lengths(FILE *f, const char *name, const char *in_col, const char *out_col,
                           bool skip_bad, dyb_trace *t, char *err, size_t errlen)
{
    reader r = {name, 0, skip_bad, t, err, errlen};
    csv_spec s = {.in_name = in_col, .out_name = out_col};
    t->format = "lengths";
    return read_csv(f, &r, &s);
}

/* ---- files ----------------------------------------------------------------------------------- */

static FILE *open_or_err(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return f;
}

/* The first non-blank byte of the file (the stream is rewound), or EOF. */
static int first_byte(FILE *f)
{
    int c;
    while ((c = fgetc(f)) != EOF && isspace(c))
        ;
    rewind(f);
    return c;
}

static int check_nonempty(const dyb_trace *t, const char *path, char *err, size_t errlen)
{
    if (t->n > 0)
        return 0;
    snprintf(err, errlen, "%s: no usable rows%s%s", path, t->skipped ? " (first bad line: " : "",
             t->skipped ? t->first_bad : "");
    if (t->skipped && strlen(err) + 2 < errlen)
        strcat(err, ")");
    return -1;
}

int dyb_trace_load(const char *path, bool skip_bad, dyb_trace *t, char *err, size_t errlen)
{
    FILE *f = open_or_err(path, err, errlen);
    if (!f)
        return -1;
    int rc = first_byte(f) == '{' ? dyb_trace_read_mooncake(f, path, skip_bad, t, err, errlen)
                                  : dyb_trace_read_azure(f, path, skip_bad, t, err, errlen);
    fclose(f);
    return rc ? rc : check_nonempty(t, path, err, errlen);
}

int dyb_lengths_load(const char *path, const char *in_col, const char *out_col, bool skip_bad,
                     dyb_trace *t, char *err, size_t errlen)
{
    FILE *f = open_or_err(path, err, errlen);
    if (!f)
        return -1;
    int rc = dyb_trace_read_lengths(f, path, in_col, out_col, skip_bad, t, err, errlen);
    fclose(f);
    return rc ? rc : check_nonempty(t, path, err, errlen);
}

void dyb_trace_free(dyb_trace *t)
{
    free(t->rows);
    free(t->hashes);
    *t = (dyb_trace){0};
}

/* ---- time ------------------------------------------------------------------------------------ */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm); pure, so
 * the result does not depend on the TZ of the machine replaying the trace. */
static long days_from_civil(long y, int m, int d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Reads exactly `n` digits at *p. */
static bool digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (!isdigit((unsigned char)**p))
            return false;
        v = v * 10 + (**p - '0');
    }
    *out = v;
    return true;
}

static bool expect(const char **p, char c)
{
    return **p == c ? ((*p)++, true) : false;
}

int dyb_parse_datetime_ms(const char *s, double *ms)
{
    int y, mo, d, h, mi, sec;
    const char *p = s;
    if (!digits(&p, 4, &y) || !expect(&p, '-') || !digits(&p, 2, &mo) || !expect(&p, '-') ||
        !digits(&p, 2, &d) || !(expect(&p, ' ') || expect(&p, 'T')) || !digits(&p, 2, &h) ||
        !expect(&p, ':') || !digits(&p, 2, &mi) || !expect(&p, ':') || !digits(&p, 2, &sec))
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    double frac = 0, scale = 0.1;
    if (expect(&p, '.')) {
        if (!isdigit((unsigned char)*p))
            return -1;
        for (; isdigit((unsigned char)*p); p++, scale /= 10)
            frac += (*p - '0') * scale;
    }
    expect(&p, 'Z');
    if (*p)
        return -1;
    double days = (double)days_from_civil(y, mo, d);
    *ms = ((days * 86400.0 + h * 3600.0 + mi * 60.0 + sec) + frac) * 1000.0;
    return 0;
}
