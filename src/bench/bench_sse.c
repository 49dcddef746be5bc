/* bench_sse.c — see bench_sse.h. Owns the partial line and the event being assembled. */
#include "bench/bench_sse.h"

#include <stdlib.h>
#include <string.h>

void dyb_sse_init(dyb_sse *p, size_t max_bytes)
{
    *p = (dyb_sse){.max_bytes = max_bytes};
    strcpy(p->event, "message");
}

void dyb_sse_free(dyb_sse *p)
{
    free(p->line);
    free(p->data);
    p->line = p->data = NULL;
}

/* Appends n bytes (and keeps a NUL after them); -1 past max_bytes or without memory. */
static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, size_t max)
{
    if (*len + n > max)
        return -1;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *q = realloc(*buf, c);
        if (!q)
            return -1;
        *buf = q;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static void dispatch(dyb_sse *p, dyb_sse_cb cb, void *user)
{
    if (p->has_data) {
        if (p->data_len && p->data[p->data_len - 1] == '\n') /* the last data line's '\n' */
            p->data[--p->data_len] = 0;
        cb(user, p->event, p->data ? p->data : "", p->data_len);
    }
    p->data_len = 0;
    p->has_data = false;
    strcpy(p->event, "message");
}

/* One complete line (without its end). */
static int line_done(dyb_sse *p, const char *s, size_t n, dyb_sse_cb cb, void *user)
{
    if (n == 0) {
        dispatch(p, cb, user);
        return 0;
    }
    if (s[0] == ':') /* comment */
        return 0;
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    const char *val = colon ? colon + 1 : s + n;
    if (colon && val < s + n && *val == ' ')
        val++;
    size_t val_len = (size_t)(s + n - val);
    if (name_len == 4 && !memcmp(s, "data", 4)) {
        p->has_data = true;
        if (append(&p->data, &p->data_len, &p->data_cap, val, val_len, p->max_bytes) ||
            append(&p->data, &p->data_len, &p->data_cap, "\n", 1, p->max_bytes))
            return -1;
    } else if (name_len == 5 && !memcmp(s, "event", 5)) {
        size_t k = val_len < sizeof p->event - 1 ? val_len : sizeof p->event - 1;
        memcpy(p->event, val, k);
        p->event[k] = 0;
    } /* id:, retry: and unknown fields do not matter here */
    return 0;
}

int dyb_sse_feed(dyb_sse *p, const char *buf, size_t n, dyb_sse_cb cb, void *user)
{
    size_t i = 0;
    if (n && p->after_cr && buf[0] == '\n')
        i = 1; /* the LF of a CRLF split across reads */
    p->after_cr = false;
    while (i < n) {
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r')
            j++;
        if (j == n) /* no line end yet: keep the piece */
            return append(&p->line, &p->line_len, &p->line_cap, buf + i, n - i, p->max_bytes);
        int rc;
        if (p->line_len) { /* finish the kept piece */
            if (append(&p->line, &p->line_len, &p->line_cap, buf + i, j - i, p->max_bytes))
                return -1;
            rc = line_done(p, p->line, p->line_len, cb, user);
            p->line_len = 0;
        } else
            rc = line_done(p, buf + i, j - i, cb, user);
        if (rc)
            return -1;
        if (buf[j] == '\r') {
            if (j + 1 == n)
                p->after_cr = true;
            else if (buf[j + 1] == '\n')
                j++;
        }
        i = j + 1;
    }
    return 0;
}

void dyb_sse_finish(dyb_sse *p, dyb_sse_cb cb, void *user)
{
    if (p->line_len) {
        line_done(p, p->line, p->line_len, cb, user);
        p->line_len = 0;
    }
    dispatch(p, cb, user);
}
