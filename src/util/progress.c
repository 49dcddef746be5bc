/* progress.c — see progress.h. Owns the line's wording and its redraw on the terminal. */
#include "util/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Below this much time the rate (and so the time left) means nothing yet. */
#define MIN_RATE_ELAPSED_S 0.5
#define MAX_LABEL 64
#define MAX_UNIT 32

struct dy_progress {
    FILE *out;
    char label[MAX_LABEL], unit_name[MAX_UNIT];
    dy_progress_unit unit;
    double total, t0;
    bool drawn;        /* a line is on the terminal now */
    double last;       /* when it was drawn */
};

/* ---------------------------------------------------------------- the line */

/* Appends printf text at *at in out (cap bytes), never past the end. */
static void put(char *out, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t cap, size_t *at, const char *fmt, ...)
{
    if (*at >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at = *at + (size_t)n < cap ? *at + (size_t)n : cap - 1;
}

/* The binary prefix that shows `bytes` best: its divisor and name. */
static double byte_scale(double bytes, const char **name)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    double d = 1;
    while (k < 4 && fabs(bytes) >= 1024 * d) {
        d *= 1024;
        k++;
    }
    *name = names[k];
    return d;
}

/* H:MM:SS, or M:SS under an hour; "--:--" for no time at all. */
static void put_duration(char *out, size_t cap, size_t *at, double s)
{
    if (!(s >= 0) || s > 1e8) { /* also NaN */
        put(out, cap, at, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        put(out, cap, at, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        put(out, cap, at, "%ld:%02ld", t / 60, t % 60);
}

static void put_amounts(char *out, size_t cap, size_t *at, const dy_progress_figures *f)
{
    const bool total = f->total > 0;
    switch (f->unit) {
    case DY_PROGRESS_BYTES: {
        const char *name;
        double d = byte_scale(total ? f->total : f->done, &name);
        if (total)
            put(out, cap, at, "  %.1f/%.1f %s", f->done / d, f->total / d, name);
        else
            put(out, cap, at, "  %.1f %s", f->done / d, name);
        break;
    }
    case DY_PROGRESS_SECONDS:
        if (total)
            put(out, cap, at, "  %.1f/%.1f s", f->done, f->total);
        else
            put(out, cap, at, "  %.1f s", f->done);
        break;
    case DY_PROGRESS_COUNT:
        if (total)
            put(out, cap, at, "  %.0f/%.0f", f->done, f->total);
        else
            put(out, cap, at, "  %.0f", f->done);
        if (f->unit_name && *f->unit_name)
            put(out, cap, at, " %s", f->unit_name);
        break;
    }
}

static void put_rate(char *out, size_t cap, size_t *at, dy_progress_unit unit, double rate)
{
    if (unit == DY_PROGRESS_BYTES) {
        const char *name;
        double d = byte_scale(rate, &name);
        put(out, cap, at, "  %.1f %s/s", rate / d, name);
    } else {
        put(out, cap, at, rate >= 100 ? "  %.0f%s" : "  %.1f%s", rate,
            unit == DY_PROGRESS_SECONDS ? " s/s" : "/s");
    }
}

size_t dy_progress_format(char *out, size_t cap, const dy_progress_figures *f)
{
    char line[256];
    size_t at = 0;
    const bool total = f->total > 0;
    put(line, sizeof line, &at, "%s", f->label ? f->label : "");
    if (total) {
        double pct = 100 * f->done / f->total;
        put(line, sizeof line, &at, "  %3.0f%%", pct < 0 ? 0 : pct > 100 ? 100 : pct);
    }
    put_amounts(line, sizeof line, &at, f);
    const bool timed = f->elapsed_s >= MIN_RATE_ELAPSED_S && f->done > 0;
    const double rate = timed ? f->done / f->elapsed_s : 0;
    if (timed)
        put_rate(line, sizeof line, &at, f->unit, rate);
    if (total) {
        put(line, sizeof line, &at, "  ETA ");
        put_duration(line, sizeof line, &at,
                     !timed ? -1 : f->done >= f->total ? 0 : (f->total - f->done) / rate);
    } else {
        put(line, sizeof line, &at, "  ");
        put_duration(line, sizeof line, &at, f->elapsed_s);
        put(line, sizeof line, &at, " elapsed");
    }
    if (f->note && *f->note)
        put(line, sizeof line, &at, "  %s", f->note);
    size_t n = at < DY_PROGRESS_WIDTH ? at : DY_PROGRESS_WIDTH;
    if (cap == 0)
        return 0;
    n = n < cap - 1 ? n : cap - 1;
    memcpy(out, line, n);
    out[n] = 0;
    return n;
}

bool dy_progress_due(bool drawn, double last, double now)
{
    return !drawn || now - last >= DY_PROGRESS_INTERVAL_S;
}

/* ---------------------------------------------------------------- the reporter */

dy_progress *dy_progress_new(FILE *out, bool on, const char *label, dy_progress_unit unit,
                             const char *unit_name, double total, double now)
{
    if (!on || !out)
        return NULL;
    dy_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->out = out;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit_name, sizeof p->unit_name, "%s", unit_name ? unit_name : "");
    p->unit = unit;
    p->total = total;
    p->t0 = now;
    return p;
}

void dy_progress_set_total(dy_progress *p, double total)
{
    if (p)
        p->total = total;
}

bool dy_progress_wants(const dy_progress *p, double now)
{
    return p && dy_progress_due(p->drawn, p->last, now);
}

bool dy_progress_update(dy_progress *p, double done, const char *note, double now)
{
    if (!dy_progress_wants(p, now))
        return false;
    dy_progress_figures f = {p->label, p->unit, p->unit_name, done, p->total, now - p->t0, note};
    char line[DY_PROGRESS_WIDTH + 1];
    dy_progress_format(line, sizeof line, &f);
    /* Back to the line's start, the new text, then erase what a longer old line left. */
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->drawn = true;
    p->last = now;
    return true;
}

void dy_progress_clear(dy_progress *p)
{
    if (!p || !p->drawn)
        return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->drawn = false;
}

void dy_progress_finish(dy_progress *p)
{
    dy_progress_clear(p);
    free(p);
}
