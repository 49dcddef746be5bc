/* stats.h — order statistics of a sample, one definition for every part that reports a
 * percentile (dyad bench's reports, the planner's observed latencies), so a p90 means the same
 * everywhere: linear interpolation between order statistics, as numpy's percentile. */
#ifndef DYAD_UTIL_STATS_H
#define DYAD_UTIL_STATS_H

#include <stddef.h>

/* Sorts v ascending in place. */
void dy_sort_doubles(double *v, size_t n);
/* The p-th percentile (0..100) of n sorted values; 0 when n == 0. */
double dy_percentile(const double *sorted, size_t n, double p);

#endif
