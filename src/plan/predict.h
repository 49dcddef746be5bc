/* predict.h — load predictors for the planner (issue 13): each interval the planner observes
 * one series per quantity (the interval's request rate, mean prompt length, mean output
 * length) and asks for the next interval's value. Four methods, each a few numbers of state
 * (no allocation): the last value; the mean of the last W intervals; Holt's linear trend
 * (double exponential smoothing); and a local-level Kalman filter (a random walk seen through
 * noise: the gain adapts as the filter learns how noisy the series is). Pure: values in,
 * forecasts out. `dyad plan predict` measures each on a trace. */
#ifndef DYAD_PLAN_PREDICT_H
#define DYAD_PLAN_PREDICT_H

#include <stdbool.h>
#include <stddef.h>

#define DY_PREDICT_MAX_WINDOW 64

typedef enum { DY_PREDICT_LAST, DY_PREDICT_MEAN, DY_PREDICT_HOLT, DY_PREDICT_KALMAN } dy_predict_kind;

typedef struct {
    dy_predict_kind kind;
    int window;         /* MEAN: intervals averaged, 1..DY_PREDICT_MAX_WINDOW */
    double alpha, beta; /* HOLT: level and trend smoothing, each in (0, 1] */
    double q, r;        /* KALMAN: process and observation noise variances, each > 0 */
} dy_predict_config;

typedef struct {
    dy_predict_config cfg;
    long n;                                  /* observations so far */
    double ring[DY_PREDICT_MAX_WINDOW];      /* MEAN: the last window values */
    double level, trend;                     /* HOLT (level also LAST and KALMAN's estimate) */
    double var;                              /* KALMAN: the estimate's variance */
} dy_predictor;

/* 0, or -1 with the field named in err ("predict.window: must be 1..64"). */
int dy_predict_check(const dy_predict_config *c, char *err, size_t errlen);
/* A predictor of a checked configuration, with no observation yet. */
void dy_predict_init(dy_predictor *p, const dy_predict_config *c);
/* The quantity in the interval that just ended (finite, >= 0). */
void dy_predict_observe(dy_predictor *p, double value);
/* The forecast for the next interval, never below 0; 0 before any observation. */
double dy_predict_next(const dy_predictor *p);
/* The forecast `steps` intervals ahead (≥ 1): Holt's extrapolates its trend that far, the
 * others forecast a level, the same at every horizon. Never below 0. */
double dy_predict_ahead(const dy_predictor *p, int steps);
/* "last", "mean", "holt", "kalman". */
const char *dy_predict_name(dy_predict_kind k);

/* A predictor as a command line spells it: "last", "mean[:W]", "holt[:ALPHA,BETA]" or
 * "kalman[:Q,R]"; the settings left out are `dyad plan predict`'s first candidate of the kind
 * (mean 10, holt 0.5,0.1, kalman 0.01,1). 0, or -1 with the problem in err. */
int dy_predict_parse(const char *spec, dy_predict_config *out, char *err, size_t errlen);
/* The spelling dy_predict_parse reads back ("kalman:0.01,1"). */
void dy_predict_format(const dy_predict_config *c, char *out, size_t cap);

#endif
