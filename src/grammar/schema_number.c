/* schema_number.c — integer and number bounds as grammar text: every decimal string between
 * the bounds, digit by digit (no exponent; "-0" never written), so a bounded value needs no
 * check after it is generated. Private to grammar/ (schema_impl.h). */
#include "grammar/schema_impl.h"

#include <stdio.h>
#include <string.h>

static const char nines[] = "9999999999999999999999";
static const char zeros[] = "0000000000000000000000";

static void digit_range(dy_buf *b, char lo, char hi)
{
    if (lo == hi)
        dy_buf_printf(b, "\"%c\"", lo);
    else
        dy_buf_printf(b, "[%c-%c]", lo, hi);
}

/* The decimal strings of n digits from x to y (x <= y, same length), digit by digit. */
static void same_length_range(dy_buf *b, const char *x, const char *y, size_t n)
{
    size_t k = 0;
    while (k < n && x[k] == y[k])
        k++;
    if (k)
        dy_schema_literal(b, x, k);
    if (k == n)
        return;
    if (k)
        dy_buf_append_str(b, " ");
    x += k, y += k, n -= k;
    if (n == 1) {
        digit_range(b, x[0], y[0]);
        return;
    }
    bool x_zeros = strncmp(x + 1, zeros, n - 1) == 0;
    bool y_nines = strncmp(y + 1, nines, n - 1) == 0;
    char mid_lo = x_zeros ? x[0] : (char)(x[0] + 1);
    char mid_hi = y_nines ? y[0] : (char)(y[0] - 1);
    bool first = true;
    dy_buf_append_str(b, "( ");
    if (!x_zeros) {
        dy_buf_printf(b, "\"%c\" ", x[0]);
        same_length_range(b, x + 1, nines, n - 1);
        first = false;
    }
    if (mid_lo <= mid_hi) {
        dy_buf_append_str(b, first ? "" : " | ");
        digit_range(b, mid_lo, mid_hi);
        dy_buf_append_str(b, " [0-9]");
        dy_schema_quantifier(b, n - 1, n - 1, false);
        first = false;
    }
    if (!y_nines) {
        dy_buf_append_str(b, first ? "" : " | ");
        dy_buf_printf(b, "\"%c\" ", y[0]);
        same_length_range(b, zeros, y + 1, n - 1);
    }
    dy_buf_append_str(b, " )");
}

/* The canonical decimal strings (no leading zero) of lo..hi, or lo.. with no upper end. */
static void digits_range(dy_buf *b, uint64_t lo, uint64_t hi, bool unbounded)
{
    char x[24], y[24];
    int nx = snprintf(x, sizeof x, "%llu", (unsigned long long)lo);
    int ny = unbounded ? nx : snprintf(y, sizeof y, "%llu", (unsigned long long)hi);
    dy_buf_append_str(b, "( ");
    for (int len = nx; len <= ny; len++) {
        char from[24], to[24];
        if (len == nx)
            memcpy(from, x, (size_t)nx + 1);
        else
            snprintf(from, sizeof from, "1%.*s", len - 1, zeros);
        if (len == ny && !unbounded)
            memcpy(to, y, (size_t)ny + 1);
        else
            snprintf(to, sizeof to, "%.*s", len, nines);
        if (len > nx)
            dy_buf_append_str(b, " | ");
        same_length_range(b, from, to, (size_t)len);
    }
    if (unbounded)
        dy_buf_printf(b, " | [1-9] [0-9]{%d,}", nx);
    dy_buf_append_str(b, " )");
}

/* |v| of an int64 without overflow. */
static uint64_t magnitude(int64_t v)
{
    return v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
}

/* Integers lo..hi (each end optional): a '-' and magnitudes for the negative ones, then the
 * non-negative ones; "-0" is never written. */
void dy_schema_integer_range(dy_buf *b, bool has_lo, int64_t lo, bool has_hi, int64_t hi)
{
    bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
    dy_buf_append_str(b, "( ");
    if (neg) {
        uint64_t from = has_hi && hi < 0 ? magnitude(hi) : 1;
        dy_buf_append_str(b, "\"-\" ");
        digits_range(b, from, has_lo ? magnitude(lo) : 0, !has_lo);
    }
    if (neg && pos)
        dy_buf_append_str(b, " | ");
    if (pos)
        digits_range(b, has_lo && lo > 0 ? (uint64_t)lo : 0, has_hi ? (uint64_t)hi : 0, !has_hi);
    dy_buf_append_str(b, " )");
}

#define FRAC_ANY "( \".\" [0-9]+ )?"
#define FRAC_ZERO "( \".\" \"0\"+ )?"
#define FRAC_NONZERO "\".\" \"0\"* [1-9] [0-9]*"

/* Decimal numbers (an integer part and an optional fraction, no exponent) whose value m lies
 * between the integers a and b (b absent: no upper end), each end inclusive or not: by the
 * integer part, a fraction is free strictly inside, must be non-zero at an exclusive a and
 * zero at an inclusive b. Requires a non-empty interval. */
static void magnitude_range(dy_buf *b, uint64_t a, bool a_excl, uint64_t hi, bool hi_excl,
                            bool unbounded)
{
    char t[24];
    dy_buf_append_str(b, "( ");
    if (!unbounded && a == hi) {
        snprintf(t, sizeof t, "%llu", (unsigned long long)a);
        dy_schema_literal(b, t, strlen(t));
        dy_buf_append_str(b, " " FRAC_ZERO " )");
        return;
    }
    snprintf(t, sizeof t, "%llu", (unsigned long long)a);
    dy_schema_literal(b, t, strlen(t));
    dy_buf_append_str(b, a_excl ? " " FRAC_NONZERO : " " FRAC_ANY);
    if (unbounded || a + 1 < hi) {
        dy_buf_append_str(b, " | ");
        digits_range(b, a + 1, unbounded ? 0 : hi - 1, unbounded);
        dy_buf_append_str(b, " " FRAC_ANY);
    }
    if (!unbounded && !hi_excl) {
        snprintf(t, sizeof t, "%llu", (unsigned long long)hi);
        dy_buf_append_str(b, " | ");
        dy_schema_literal(b, t, strlen(t));
        dy_buf_append_str(b, " " FRAC_ZERO);
    }
    dy_buf_append_str(b, " )");
}

/* Numbers between integer-valued bounds: non-negative values by magnitude_range, negative ones
 * as '-' and the magnitude range mirrored (0 excluded there: it belongs to the other side). */
void dy_schema_number_range(dy_buf *b, const bound *lo, const bound *hi)
{
    bool pos = !hi->set || hi->i > 0 || (hi->i == 0 && !hi->excl);
    bool neg = !lo->set || lo->i < 0;
    dy_buf_append_str(b, "( ");
    if (pos) {
        bool from_zero = !lo->set || lo->i < 0;
        magnitude_range(b, from_zero ? 0 : (uint64_t)lo->i, from_zero ? false : lo->excl,
                        hi->set ? (uint64_t)hi->i : 0, hi->excl, !hi->set);
    }
    if (pos && neg)
        dy_buf_append_str(b, " | ");
    if (neg) {
        bool to_zero = !hi->set || hi->i >= 0;
        dy_buf_append_str(b, "\"-\" ");
        magnitude_range(b, to_zero ? 0 : magnitude(hi->i), to_zero ? true : hi->excl,
                        lo->set ? magnitude(lo->i) : 0, lo->excl, !lo->set);
    }
    dy_buf_append_str(b, " )");
}

/* An integer bound as an inclusive int64: a fractional bound rounds inwards. */
