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
    dy_buf_free(&p->line);
    dy_buf_free(&p->data);
}

/* Appends n bytes and keeps a NUL after them (so the event's data is a string when it is
 * dispatched); -1 past max bytes or without memory. */
static int append(dy_buf *b, const char *s, size_t n, size_t max)
{
    if (b->len + n > max)
        return -1;
    dy_buf_append(b, s, n);
    return dy_buf_cstr(b) ? 0 : -1;
}

static void dispatch(dyb_sse *p, dyb_sse_cb cb, void *user)
{
    if (p->has_data) {
        dy_buf *d = &p->data;
        if (d->len && d->data[d->len - 1] == '\n') /* the last data line's '\n' */
            d->len--;
        const char *text = dy_buf_cstr(d); /* cannot fail: append kept room for the NUL */
        cb(user, p->event, text ? text : "", d->len);
    }
    dy_buf_clear(&p->data);
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
        if (append(&p->data, val, val_len, p->max_bytes) ||
            append(&p->data, "\n", 1, p->max_bytes))
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
            return append(&p->line, buf + i, n - i, p->max_bytes);
        int rc;
        if (p->line.len) { /* finish the kept piece */
            if (append(&p->line, buf + i, j - i, p->max_bytes))
                return -1;
            rc = line_done(p, (const char *)p->line.data, p->line.len, cb, user);
            dy_buf_clear(&p->line);
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
    if (p->line.len) {
        line_done(p, (const char *)p->line.data, p->line.len, cb, user);
        dy_buf_clear(&p->line);
    }
    dispatch(p, cb, user);
}
