/* stop.c — see stop.h. */
#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

bool dy_stop_init(dy_stop *s, const char *const *stops, int n)
{
    memset(s, 0, sizeof *s);
    if (n > DY_MAX_STOPS)
        return false;
    for (int i = 0; i < n; i++) {
        if (!stops[i][0])
            continue;
        if (!(s->stops[s->n_stops] = strdup(stops[i]))) {
            dy_stop_free(s);
            return false;
        }
        s->n_stops++;
    }
    return true;
}

void dy_stop_free(dy_stop *s)
{
    for (int i = 0; i < s->n_stops; i++)
        free(s->stops[i]);
    free(s->held);
    free(s->out);
    memset(s, 0, sizeof *s);
}

/* Length of the longest tail of held text that is a proper prefix of some stop string. */
static size_t partial_tail(const dy_stop *s)
{
    size_t best = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t sl = strlen(s->stops[i]);
        for (size_t k = sl - 1; k > best; k--)
            if (k <= s->len && memcmp(s->held + s->len - k, s->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* The earliest occurrence of any stop string in the held text, or -1. */
static long first_stop(const dy_stop *s)
{
    long best = -1;
    for (int i = 0; i < s->n_stops; i++) {
        const char *p = memmem(s->held, s->len, s->stops[i], strlen(s->stops[i]));
        if (p && (best < 0 || p - s->held < best))
            best = p - s->held;
    }
    return best;
}

static bool grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = need * 2;
    char *b = realloc(*buf, c);
    if (!b)
        return false;
    *buf = b;
    *cap = c;
    return true;
}

/* Copies the first n held bytes out and keeps the rest (from `from` on) held. */
static void release(dy_stop *s, size_t n, size_t from, const char **out, size_t *out_len)
{
    memcpy(s->out, s->held, n);
    memmove(s->held, s->held + from, s->len - from);
    s->len -= from;
    *out = s->out;
    *out_len = n;
}

bool dy_stop_feed(dy_stop *s, const char *piece, size_t len, const char **out, size_t *out_len)
{
    *out = "";
    *out_len = 0;
    if (s->stopped)
        return true;
    if (!grow(&s->held, &s->cap, s->len + len + 1) || !grow(&s->out, &s->out_cap, s->len + len + 1)) {
        s->failed = true;
        return false;
    }
    memcpy(s->held + s->len, piece, len);
    s->len += len;
    long at = first_stop(s);
    if (at >= 0) {
        s->stopped = true;
        release(s, (size_t)at, s->len, out, out_len);
        return true;
    }
    size_t n = s->len - partial_tail(s);
    release(s, n, n, out, out_len);
    return false;
}

void dy_stop_flush(dy_stop *s, const char **out, size_t *out_len)
{
    *out = "";
    *out_len = 0;
    if (s->len == 0)
        return;
    if (!grow(&s->out, &s->out_cap, s->len)) {
        s->failed = true;
        return;
    }
    release(s, s->len, s->len, out, out_len);
}
