/* buf.c — see buf.h. */
#include "util/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool dy_buf_reserve(dy_buf *b, size_t n)
{
    if (b->oom)
        return false;
    if (n <= b->cap - b->len)
        return true;
    if (n > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d) {
        b->oom = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void dy_buf_append(dy_buf *b, const void *p, size_t n)
{
    if (n == 0 || !dy_buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void dy_buf_append_str(dy_buf *b, const char *s)
{
    dy_buf_append(b, s, strlen(s));
}

/* Formats into the free space first, so text that fits is formatted once; the rare longer
 * text is formatted again after the buffer grows. A format error counts as a failed append. */
void dy_buf_printf(dy_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    size_t room = b->cap - b->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? (char *)b->data + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n >= room) {
        if (!dy_buf_reserve(b, (size_t)n + 1))
            return;
        va_start(ap, fmt);
        vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

const char *dy_buf_cstr(dy_buf *b)
{
    if (!dy_buf_reserve(b, 1))
        return NULL;
    b->data[b->len] = 0;
    return (const char *)b->data;
}

void dy_buf_clear(dy_buf *b)
{
    b->len = 0;
    b->oom = false;
}

void dy_buf_free(dy_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

bool dy_array_reserve(void **a, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 256;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return false;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem)
        return false;
    void *q = realloc(*a, c * elem);
    if (!q)
        return false;
    *a = q;
    *cap = c;
    return true;
}

bool dy_buf_append_file(dy_buf *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        dy_buf_append(b, chunk, n);
    bool ok = !ferror(f) && !b->oom;
    fclose(f);
    return ok;
}
