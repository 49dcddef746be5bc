/* predict.c — see predict.h. */
#include "plan/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dy_predict_name(dy_predict_kind k)
{
    static const char *const names[] = {"last", "mean", "holt", "kalman"};
    return k >= DY_PREDICT_LAST && k <= DY_PREDICT_KALMAN ? names[k] : "?";
}

static bool unit_interval(double x)
{
    return x > 0 && x <= 1;
}

int dy_predict_check(const dy_predict_config *c, char *err, size_t errlen)
{
    const char *bad = NULL;
    switch (c->kind) {
    case DY_PREDICT_LAST: break;
    case DY_PREDICT_MEAN:
        if (c->window < 1 || c->window > DY_PREDICT_MAX_WINDOW)
            bad = "predict.window: must be 1..64";
        break;
    case DY_PREDICT_HOLT:
        bad = !unit_interval(c->alpha) ? "predict.alpha: must be in (0, 1]"
            : !unit_interval(c->beta)  ? "predict.beta: must be in (0, 1]" : NULL;
        break;
    case DY_PREDICT_KALMAN:
        bad = !(isfinite(c->q) && c->q > 0) ? "predict.q: must be a number > 0"
            : !(isfinite(c->r) && c->r > 0) ? "predict.r: must be a number > 0" : NULL;
        break;
    default: bad = "predict.kind: unknown";
    }
    if (bad)
        snprintf(err, errlen, "%s", bad);
    return bad ? -1 : 0;
}

void dy_predict_init(dy_predictor *p, const dy_predict_config *c)
{
    *p = (dy_predictor){.cfg = *c};
}

/* Holt's linear trend: the level follows the value, the trend the level's steps. */
static void holt_observe(dy_predictor *p, double x)
{
    if (p->n == 0) {
        p->level = x;
        return;
    }
    const double a = p->cfg.alpha, b = p->cfg.beta, before = p->level;
    p->level = a * x + (1 - a) * (p->level + p->trend);
    p->trend = b * (p->level - before) + (1 - b) * p->trend;
}

/* A local-level Kalman filter: the estimate's variance grows by q each interval and shrinks
 * with each observation of variance r. */
static void kalman_observe(dy_predictor *p, double x)
{
    if (p->n == 0) {
        p->level = x;
        p->var = p->cfg.r;
        return;
    }
    const double prior = p->var + p->cfg.q, gain = prior / (prior + p->cfg.r);
    p->level += gain * (x - p->level);
    p->var = (1 - gain) * prior;
}

void dy_predict_observe(dy_predictor *p, double x)
{
    switch (p->cfg.kind) {
    case DY_PREDICT_LAST: p->level = x; break;
    case DY_PREDICT_MEAN: p->ring[p->n % p->cfg.window] = x; break;
    case DY_PREDICT_HOLT: holt_observe(p, x); break;
    case DY_PREDICT_KALMAN: kalman_observe(p, x); break;
    }
    p->n++;
}

double dy_predict_next(const dy_predictor *p)
{
    if (p->n == 0)
        return 0;
    double f = p->level;
    if (p->cfg.kind == DY_PREDICT_MEAN) {
        const long k = p->n < p->cfg.window ? p->n : p->cfg.window;
        double sum = 0;
        for (long i = 0; i < k; i++)
            sum += p->ring[i];
        f = sum / (double)k;
    }
    else if (p->cfg.kind == DY_PREDICT_HOLT)
        f = p->level + p->trend;
    return f > 0 ? f : 0;
}

double dy_predict_ahead(const dy_predictor *p, int steps)
{
    if (p->cfg.kind != DY_PREDICT_HOLT || p->n == 0 || steps <= 1)
        return dy_predict_next(p);
    const double f = p->level + steps * p->trend;
    return f > 0 ? f : 0;
}

/* The numbers after "name:", n_want of them separated by commas; false when malformed. */
static bool parse_numbers(const char *p, double *v, int n_want)
{
    for (int i = 0; i < n_want; i++) {
        char *end;
        v[i] = strtod(p, &end);
        if (end == p || !isfinite(v[i]) || *end != (i + 1 < n_want ? ',' : '\0'))
            return false;
        p = end + 1;
    }
    return true;
}

int dy_predict_parse(const char *spec, dy_predict_config *out, char *err, size_t errlen)
{
    static const dy_predict_config defaults[] = {
        {.kind = DY_PREDICT_LAST},
        {.kind = DY_PREDICT_MEAN, .window = 10},
        {.kind = DY_PREDICT_HOLT, .alpha = 0.5, .beta = 0.1},
        {.kind = DY_PREDICT_KALMAN, .q = 0.01, .r = 1},
    };
    static const int n_settings[] = {0, 1, 2, 2};
    const char *colon = strchr(spec, ':');
    const size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (int k = DY_PREDICT_LAST; k <= DY_PREDICT_KALMAN; k++) {
        const char *name = dy_predict_name((dy_predict_kind)k);
        if (strlen(name) != len || strncmp(spec, name, len) != 0)
            continue;
        dy_predict_config c = defaults[k];
        double v[2];
        if (colon && (n_settings[k] == 0 || !parse_numbers(colon + 1, v, n_settings[k]))) {
            snprintf(err, errlen, "'%s': %s takes %s", spec, name,
                     k == DY_PREDICT_LAST ? "no settings" : k == DY_PREDICT_MEAN ? ":W"
                     : k == DY_PREDICT_HOLT ? ":ALPHA,BETA" : ":Q,R");
            return -1;
        }
        if (colon && k == DY_PREDICT_MEAN)
            c.window = v[0] == floor(v[0]) && fabs(v[0]) < 1e6 ? (int)v[0] : -1;
        else if (colon && k == DY_PREDICT_HOLT)
            c.alpha = v[0], c.beta = v[1];
        else if (colon && k == DY_PREDICT_KALMAN)
            c.q = v[0], c.r = v[1];
        if (dy_predict_check(&c, err, errlen) != 0)
            return -1;
        *out = c;
        return 0;
    }
    snprintf(err, errlen, "'%s' is not last, mean[:W], holt[:ALPHA,BETA] or kalman[:Q,R]", spec);
    return -1;
}

void dy_predict_format(const dy_predict_config *c, char *out, size_t cap)
{
    switch (c->kind) {
    case DY_PREDICT_MEAN: snprintf(out, cap, "mean:%d", c->window); break;
    case DY_PREDICT_HOLT: snprintf(out, cap, "holt:%g,%g", c->alpha, c->beta); break;
    case DY_PREDICT_KALMAN: snprintf(out, cap, "kalman:%g,%g", c->q, c->r); break;
    default: snprintf(out, cap, "%s", dy_predict_name(c->kind));
    }
}
