/* progress.h — the one progress line of a long command (gen-model, convert, bench, sim): how
 * far it is, how fast it goes and how long is left, redrawn in place on a terminal a few times
 * a second and erased when the command is done, so that its real output stays clean.
 *
 * Whether to draw is decided once, by whoever creates the reporter (the CLI passes
 * isatty(2)): a reporter that is not to draw is NULL, and every call takes NULL and does
 * nothing, so a log or a pipe gets not a byte and library code passes the pointer along
 * without asking. The time is always passed in (dy_now() seconds), as everywhere in dyad: the
 * reporter never reads a clock, and its throttle and figures are testable. One thread. */
#ifndef DYAD_UTIL_PROGRESS_H
#define DYAD_UTIL_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* At most this many redraws a second. */
#define DY_PROGRESS_INTERVAL_S 0.25
/* The line is cut to this many columns so that it never wraps on a standard terminal (a
 * wrapped line could not be redrawn in place). */
#define DY_PROGRESS_WIDTH 79

typedef enum {
    DY_PROGRESS_COUNT,   /* things (tensors, requests, points), named by unit_name */
    DY_PROGRESS_BYTES,   /* shown in B, KiB, MiB or GiB, the rate per second */
    DY_PROGRESS_SECONDS, /* seconds of something (simulated time), the rate as s/s */
} dy_progress_unit;

/* What one line shows. */
typedef struct {
    const char *label;     /* the command, e.g. "dyad convert" */
    dy_progress_unit unit;
    const char *unit_name; /* DY_PROGRESS_COUNT: "tensors", "requests" ...; else unused */
    double done;
    double total;          /* <= 0: not known (no percentage, no time left: time so far) */
    double elapsed_s;      /* since the reporter started */
    const char *note;      /* NULL or a short text after the figures ("tensor 12/201") */
} dy_progress_figures;

/* The line for these figures, without control characters, cut to DY_PROGRESS_WIDTH columns,
 * into out (cap bytes, NUL-terminated); returns its length. Pure. */
size_t dy_progress_format(char *out, size_t cap, const dy_progress_figures *f);
/* Whether a redraw is due at `now` after the last one at `last` (none yet: !drawn). Pure. */
bool dy_progress_due(bool drawn, double last, double now);

typedef struct dy_progress dy_progress;

/* A reporter drawing on `out` when `on` (else NULL, as when memory is short: progress is
 * never worth failing a command for), started at `now`. label and unit_name are copied. */
dy_progress *dy_progress_new(FILE *out, bool on, const char *label, dy_progress_unit unit,
                             const char *unit_name, double total, double now);
/* Sets the total once it is known (<= 0: not known). */
void dy_progress_set_total(dy_progress *p, double total);
/* Whether an update at `now` would redraw: lets a caller skip making a note it would not show. */
bool dy_progress_wants(const dy_progress *p, double now);
/* `done` so far (in the reporter's unit) and an optional note; redraws when due. True when it
 * drew. */
bool dy_progress_update(dy_progress *p, double done, const char *note, double now);
/* Erases the line (if one is drawn), e.g. before printing something else on the terminal; the
 * next update draws it again at once. */
void dy_progress_clear(dy_progress *p);
/* Erases the line and frees the reporter. */
void dy_progress_finish(dy_progress *p);

#endif
