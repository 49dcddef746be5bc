/* metrics.h — the frontend's Prometheus metrics: latency histograms observed per request,
 * request outcome counters, and the workers' own reports (tokens, prefix-cache queries and
 * hits, preemptions, step time, load), rendered in the text exposition format. Thread-safe.
 * docs/metrics.md lists every metric. */
#ifndef DYAD_METRICS_H
#define DYAD_METRICS_H

#include <stdint.h>
#include "serve/front/fleet.h"
#include "serve/wire/end.h"
#include "util/buf.h"

typedef struct dy_metrics dy_metrics;

/* model_id: the id clients use, shown as dyad_model_info's label (copied). */
dy_metrics *dy_metrics_new(const char *model_id);
void dy_metrics_free(dy_metrics *m);
void dy_metrics_ttft(dy_metrics *m, double seconds);
void dy_metrics_itl(dy_metrics *m, double seconds);
/* A sequence's mean gap between output tokens: (last - first token) / (tokens - 1). */
void dy_metrics_tpot(dy_metrics *m, double seconds);
void dy_metrics_e2e(dy_metrics *m, double seconds);
void dy_metrics_queue(dy_metrics *m, double seconds);
/* A prompt whose cached prefix continued in a lower KV tier: the worker's two estimates and
 * the measured wait for the load (each < 0: not known, not observed). */
void dy_metrics_kv_tier(dy_metrics *m, double load_est, double recompute_est, double wait);
/* Counts a request by its outcome (DY_END_STOP … DY_END_REJECTED). */
void dy_metrics_request(dy_metrics *m, dy_end outcome);
/* A metric's # HELP and # TYPE lines (for the other parts that render metrics). */
void dy_metrics_header(dy_buf *t, const char *name, const char *type, const char *help);
/* The whole exposition, with the workers' figures and the KV transfer totals; malloc'd. */
char *dy_metrics_render(dy_metrics *m, const dy_worker_info *w, int n_workers,
                        const dy_xfer_totals *x, const dy_router_totals *rt);

#endif
