/* stop.h — stop strings over streamed text. Generated pieces go in; what comes out is the
 * text that is safe to show: everything except a tail that might still grow into a stop
 * string. When a stop string appears, the text before it is released and the rest dropped. */
#ifndef DYAD_STOP_H
#define DYAD_STOP_H

#include <stdbool.h>
#include <stddef.h>

#define DY_MAX_STOPS 8

typedef struct {
    char *stops[DY_MAX_STOPS];
    int n_stops;
    char *held;   /* text not yet released */
    size_t len, cap;
    char *out;    /* what the last call released */
    size_t out_cap;
    bool stopped;
    bool failed;  /* memory ran out: a piece was lost, so the text is not whole (callers end
                   * the generation with an error) */
} dy_stop;

/* Copies the stop strings (empty strings are ignored). false if out of memory or more
 * than DY_MAX_STOPS. */
bool dy_stop_init(dy_stop *s, const char *const *stops, int n);
void dy_stop_free(dy_stop *s);
/* Adds a piece. *out points at the releasable text (valid until the next call) and *out_len
 * is its length. Returns true once a stop string has been seen (later pieces are ignored).
 * Out of memory, the piece is lost: nothing is released and s->failed is set. */
bool dy_stop_feed(dy_stop *s, const char *piece, size_t len, const char **out, size_t *out_len);
/* Releases whatever is held (at the end of generation); sets s->failed if it cannot. */
void dy_stop_flush(dy_stop *s, const char **out, size_t *out_len);

#endif
