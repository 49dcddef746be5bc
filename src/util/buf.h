/* buf.h — the one growable byte buffer. Appends never fail loudly: a failed allocation sets
 * the sticky `oom` flag and later appends do nothing, so a writer appends everything and
 * checks once at the end. */
#ifndef DYAD_UTIL_BUF_H
#define DYAD_UTIL_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t len, cap;
    bool oom;       /* an allocation failed: the contents are incomplete */
} dy_buf;

/* Makes room for n more bytes; false (and oom set) if memory is short. */
bool dy_buf_reserve(dy_buf *b, size_t n);
void dy_buf_append(dy_buf *b, const void *p, size_t n);
void dy_buf_append_str(dy_buf *b, const char *s);
/* printf-style append. */
void dy_buf_printf(dy_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contents as a NUL-terminated string (the NUL is not counted in len); NULL if oom. */
const char *dy_buf_cstr(dy_buf *b);
/* Appends the whole of a file; false (errno set) if it cannot be read, or memory is short. */
bool dy_buf_append_file(dy_buf *b, const char *path);
/* Empties the buffer, keeping its memory and clearing oom. */
void dy_buf_clear(dy_buf *b);
/* Frees the memory and leaves an empty buffer. */
void dy_buf_free(dy_buf *b);

/* The same doubling growth for a typed array *a of *cap elements of elem bytes: makes room for
 * `need` elements. False if memory is short (the array is left as it was). */
bool dy_array_reserve(void **a, size_t *cap, size_t need, size_t elem);

#endif
