/* metrics.c — see metrics.h. Histogram buckets are fixed per metric (seconds), chosen to
 * cover a CPU server's range from sub-millisecond token gaps to minute-long requests. */
#include "serve/front/metrics.h"
#include "util/buf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 20

typedef struct {
    const char *name, *help;
    const double *bounds;
    int n;
    uint64_t counts[MAX_BUCKETS]; /* per bucket (not cumulative) */
    uint64_t count;
    double sum;
} hist;

static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                        1, 2.5, 5, 10, 30, 60, 120};
static const double token_bounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                      0.1, 0.25, 0.5, 1, 2.5};

struct dy_metrics {
    pthread_mutex_t mu;
    char *model_id; /* the id clients use, as the dyad_model_info label */
    hist ttft, itl, tpot, e2e, queue;
    hist tier_load_est, tier_recompute_est, tier_wait; /* prompts with a lower-tier prefix */
    uint64_t outcomes[DY_END_N];  /* requests by outcome, indexed by dy_end */
};

static void hist_init(hist *h, const char *name, const char *help, const double *b, int n)
{
    memset(h, 0, sizeof *h);
    h->name = name;
    h->help = help;
    h->bounds = b;
    h->n = n;
}

dy_metrics *dy_metrics_new(const char *model_id)
{
    dy_metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->model_id = strdup(model_id ? model_id : ""))) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    int nl = (int)(sizeof latency_bounds / sizeof *latency_bounds);
    int nt = (int)(sizeof token_bounds / sizeof *token_bounds);
    hist_init(&m->ttft, "dyad_time_to_first_token_seconds",
              "Time from request arrival to its first generated token.", latency_bounds, nl);
    hist_init(&m->itl, "dyad_inter_token_latency_seconds",
              "Time between successive tokens of a sequence.", token_bounds, nt);
    hist_init(&m->tpot, "dyad_time_per_output_token_seconds",
              "A sequence's mean time between its output tokens (first to last).", token_bounds,
              nt);
    hist_init(&m->e2e, "dyad_e2e_request_latency_seconds",
              "Time from request arrival to its last token.", latency_bounds, nl);
    hist_init(&m->queue, "dyad_request_queue_time_seconds",
              "Time a sequence waited at its worker before its first step.", latency_bounds, nl);
    hist_init(&m->tier_load_est, "dyad_kv_tier_load_estimate_seconds",
              "A prompt's lower-tier prefix: the worker's estimate of loading it (once its "
              "rates were measured).", token_bounds, nt);
    hist_init(&m->tier_recompute_est, "dyad_kv_tier_recompute_estimate_seconds",
              "The same prefix: the worker's estimate of computing it again.", token_bounds, nt);
    hist_init(&m->tier_wait, "dyad_kv_tier_load_seconds",
              "Measured: how long a prompt waited for its lower-tier blocks.", token_bounds, nt);
    return m;
}

void dy_metrics_free(dy_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->model_id);
    free(m);
}

static void observe(dy_metrics *m, hist *h, double v)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    if (i < h->n)
        h->counts[i]++;
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void dy_metrics_ttft(dy_metrics *m, double s) { observe(m, &m->ttft, s); }
void dy_metrics_itl(dy_metrics *m, double s) { observe(m, &m->itl, s); }
void dy_metrics_tpot(dy_metrics *m, double s) { observe(m, &m->tpot, s); }
void dy_metrics_e2e(dy_metrics *m, double s) { observe(m, &m->e2e, s); }
void dy_metrics_queue(dy_metrics *m, double s) { observe(m, &m->queue, s); }

void dy_metrics_kv_tier(dy_metrics *m, double load_est, double recompute_est, double wait)
{
    if (load_est >= 0)
        observe(m, &m->tier_load_est, load_est);
    if (recompute_est >= 0)
        observe(m, &m->tier_recompute_est, recompute_est);
    if (wait >= 0)
        observe(m, &m->tier_wait, wait);
}

void dy_metrics_request(dy_metrics *m, dy_end outcome)
{
    if (outcome <= DY_END_NONE || outcome >= DY_END_N)
        return;
    pthread_mutex_lock(&m->mu);
    m->outcomes[outcome]++;
    pthread_mutex_unlock(&m->mu);
}

/* ---------------------------------------------------------------- rendering */

static void render_hist(dy_buf *t, const hist *h)
{
    dy_buf_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        dy_buf_printf(t, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i],
                      (unsigned long long)cum);
    }
    dy_buf_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h->name,
        (unsigned long long)h->count, h->name, h->sum, h->name, (unsigned long long)h->count);
}

void dy_metrics_header(dy_buf *t, const char *name, const char *type, const char *help)
{
    dy_buf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value escaped as the text format wants (backslash, quote, newline). */
static void label_value(dy_buf *t, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            dy_buf_printf(t, "\\%c", *v);
        else if (*v == '\n')
            dy_buf_append_str(t, "\\n");
        else
            dy_buf_append(t, v, 1);
    }
}

/* A gauge of 1 whose one label carries a value from outside (escaped). */
static void info_metric(dy_buf *t, const char *name, const char *help, const char *label,
                        const char *value)
{
    dy_metrics_header(t, name, "gauge", help);
    dy_buf_printf(t, "%s{%s=\"", name, label);
    label_value(t, value);
    dy_buf_append_str(t, "\"} 1\n");
}

/* One counter or gauge summed over workers, from a field picked by `get`. */
static void worker_sum(dy_buf *t, const char *name, const char *type, const char *help,
                       const dy_worker_info *w, int n, double (*get)(const dy_worker_info *))
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += get(&w[i]);
    dy_metrics_header(t, name, type, help);
    dy_buf_printf(t, "%s %.17g\n", name, s);
}

static void worker_each(dy_buf *t, const char *name, const char *type, const char *help,
                        const dy_worker_info *w, int n, double (*get)(const dy_worker_info *))
{
    dy_metrics_header(t, name, type, help);
    for (int i = 0; i < n; i++)
        dy_buf_printf(t, "%s{worker=\"%d\"} %.17g\n", name, i, get(&w[i]));
}

static double prompt_tokens(const dy_worker_info *w) { return (double)w->stats.prompt_tokens; }
static double gen_tokens(const dy_worker_info *w) { return (double)w->stats.generated_tokens; }
static double cache_q(const dy_worker_info *w) { return (double)w->stats.cache_lookup_blocks; }
static double cache_h(const dy_worker_info *w) { return (double)w->stats.cache_hit_blocks; }
static double preempt(const dy_worker_info *w) { return (double)w->stats.preemptions; }
static double running(const dy_worker_info *w) { return w->stats.running; }
static double waiting(const dy_worker_info *w) { return w->stats.waiting; }
static double queued(const dy_worker_info *w) { return (double)w->stats.queued_prefill_tokens; }
static double steps(const dy_worker_info *w) { return (double)w->stats.steps; }
static double step_s(const dy_worker_info *w) { return w->stats.step_seconds; }
static double alive(const dy_worker_info *w) { return w->alive; }
static double restarts(const dy_worker_info *w) { return (double)w->restarts; }
static double hangs(const dy_worker_info *w) { return (double)w->hangs; }
static double shm_bytes(const dy_worker_info *w) { return (double)w->stats.shm_bytes; }

static double kv_use(const dy_worker_info *w)
{
    return w->stats.kv_blocks_total ? (double)w->stats.kv_blocks_used / w->stats.kv_blocks_total : 0;
}

static void xfer_metrics(dy_buf *t, const dy_xfer_totals *x)
{
    dy_metrics_header(t, "dyad_kv_transfers_total", "counter", "Prompts whose KV moved from a prefill worker.");
    dy_buf_printf(t, "dyad_kv_transfers_total %llu\n", (unsigned long long)x->transfers);
    dy_metrics_header(t, "dyad_kv_transfer_failures_total", "counter",
           "Remote prefills that failed or were abandoned (prefilled locally instead).");
    dy_buf_printf(t, "dyad_kv_transfer_failures_total %llu\n",
                  (unsigned long long)(x->failed + x->timeouts));
    dy_metrics_header(t, "dyad_kv_transfer_timeouts_total", "counter", "Remote prefills past --xfer-timeout.");
    dy_buf_printf(t, "dyad_kv_transfer_timeouts_total %llu\n", (unsigned long long)x->timeouts);
    dy_metrics_header(t, "dyad_kv_transfer_bytes_total", "counter", "KV bytes moved between workers.");
    dy_buf_printf(t, "dyad_kv_transfer_bytes_total %llu\n", (unsigned long long)x->bytes);
    dy_metrics_header(t, "dyad_kv_transfer_seconds_total", "counter",
           "Time spent moving KV (bytes_total / seconds_total is the transfer rate).");
    dy_buf_printf(t, "dyad_kv_transfer_seconds_total %.9g\n", x->seconds);
    dy_metrics_header(t, "dyad_prefill_total", "counter", "Prompts by where they were prefilled.");
    dy_buf_printf(t, "dyad_prefill_total{where=\"remote\"} %llu\n"
                  "dyad_prefill_total{where=\"local\"} %llu\n",
                  (unsigned long long)x->remote, (unsigned long long)x->local);
}

/* ---- the lower KV tiers (serve/worker/kv_tiers.h), per worker and tier */

static const char *const tier_names[2] = {"host", "disk"};

typedef double (*tier_field)(const dy_msg_tier_stats *);
static double t_on(const dy_msg_tier_stats *s) { return s->on; }
static double t_used(const dy_msg_tier_stats *s) { return s->used; }
static double t_slots(const dy_msg_tier_stats *s) { return s->slots; }
static double t_blocks_in(const dy_msg_tier_stats *s) { return (double)s->blocks_in; }
static double t_blocks_out(const dy_msg_tier_stats *s) { return (double)s->blocks_out; }
static double t_bytes_in(const dy_msg_tier_stats *s) { return (double)s->bytes_in; }
static double t_bytes_out(const dy_msg_tier_stats *s) { return (double)s->bytes_out; }
static double t_sec_in(const dy_msg_tier_stats *s) { return s->seconds_in; }
static double t_sec_out(const dy_msg_tier_stats *s) { return s->seconds_out; }
static double t_evicted(const dy_msg_tier_stats *s) { return (double)s->evicted; }
static double t_bad(const dy_msg_tier_stats *s) { return (double)s->bad; }
static double t_errors(const dy_msg_tier_stats *s) { return (double)s->errors; }

/* One series per worker and tier; with `in` and `out`, a direction label as well. */
static void tier_each(dy_buf *t, const char *name, const char *type, const char *help,
                      const dy_worker_info *w, int n, tier_field in, tier_field out)
{
    dy_metrics_header(t, name, type, help);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            const dy_msg_tier_stats *s = &w[i].stats.tiers[k];
            if (!out) {
                dy_buf_printf(t, "%s{worker=\"%d\",tier=\"%s\"} %.17g\n", name, i,
                              tier_names[k], in(s));
                continue;
            }
            dy_buf_printf(t, "%s{worker=\"%d\",tier=\"%s\",direction=\"in\"} %.17g\n", name, i,
                          tier_names[k], in(s));
            dy_buf_printf(t, "%s{worker=\"%d\",tier=\"%s\",direction=\"out\"} %.17g\n", name,
                          i, tier_names[k], out(s));
        }
}

static void tier_metrics(dy_buf *t, const dy_worker_info *w, int n)
{
    tier_each(t, "dyad_kv_tier_up", "gauge",
              "1 while the lower KV tier is on (0: not configured, or switched off by an error).",
              w, n, t_on, NULL);
    tier_each(t, "dyad_kv_tier_blocks", "gauge", "KV blocks held in the tier (or being written).",
              w, n, t_used, NULL);
    tier_each(t, "dyad_kv_tier_capacity_blocks", "gauge", "KV blocks the tier can hold.", w, n,
              t_slots, NULL);
    tier_each(t, "dyad_kv_tier_copies_total", "counter",
              "Blocks copied into the tier (in) and out of it (up to the KV cache, or down).", w,
              n, t_blocks_in, t_blocks_out);
    tier_each(t, "dyad_kv_tier_bytes_total", "counter", "Bytes copied into and out of the tier.",
              w, n, t_bytes_in, t_bytes_out);
    tier_each(t, "dyad_kv_tier_seconds_total", "counter",
              "Time the copies took (bytes_total / seconds_total is the tier's rate).", w, n,
              t_sec_in, t_sec_out);
    tier_each(t, "dyad_kv_tier_evictions_total", "counter",
              "Blocks the tier dropped to make room.", w, n, t_evicted, NULL);
    tier_each(t, "dyad_kv_tier_bad_blocks_total", "counter",
              "Blocks that failed their checksum when read back (recomputed, never used).", w, n,
              t_bad, NULL);
    tier_each(t, "dyad_kv_tier_errors_total", "counter",
              "I/O errors (the disk tier switches off at the first).", w, n, t_errors, NULL);
    dy_metrics_header(t, "dyad_kv_tier_prompts_total", "counter",
                      "Prompts whose cached prefix continued in a lower tier, by what the worker "
                      "did: loaded it, computed it (estimated cheaper), or computed it after a "
                      "failed load.");
    for (int i = 0; i < n; i++) {
        const dy_msg_stats *s = &w[i].stats;
        dy_buf_printf(t, "dyad_kv_tier_prompts_total{worker=\"%d\",outcome=\"loaded\"} %llu\n"
                      "dyad_kv_tier_prompts_total{worker=\"%d\",outcome=\"recomputed\"} %llu\n"
                      "dyad_kv_tier_prompts_total{worker=\"%d\",outcome=\"load_failed\"} %llu\n",
                      i, (unsigned long long)s->tier_loads, i,
                      (unsigned long long)s->tier_recomputes, i,
                      (unsigned long long)s->tier_load_failures);
    }
}

static double hold_n(const dy_worker_info *w) { return w->stats.hold_sessions; }
static double hold_pin(const dy_worker_info *w) { return w->stats.hold_pinned; }
static double hold_pf(const dy_worker_info *w) { return (double)w->stats.hold_prefetched_blocks; }
static double hold_exp(const dy_worker_info *w) { return (double)w->stats.hold_expired; }
static double hold_park(const dy_worker_info *w) { return (double)w->stats.hold_parked_blocks; }

static void hold_metrics(dy_buf *t, const dy_worker_info *w, int n)
{
    worker_each(t, "dyad_kv_hold_sessions", "gauge",
                "Conversations (dyad.session) whose KV the worker holds for their next turn.", w,
                n, hold_n);
    worker_each(t, "dyad_kv_hold_pinned", "gauge",
                "Host-tier slots (--kv-hold prefetch) or KV-cache blocks (pin) pinned for them.",
                w, n, hold_pin);
    worker_each(t, "dyad_kv_hold_prefetched_blocks_total", "counter",
                "Blocks brought up into the KV cache ahead of a held conversation's next turn.",
                w, n, hold_pf);
    worker_each(t, "dyad_kv_hold_expired_total", "counter",
                "Holds let go at --kv-hold-ttl, the next turn never having come.", w, n, hold_exp);
    worker_each(t, "dyad_kv_hold_parked_blocks_total", "counter",
                "Held blocks sent to disk for a long wait (--kv-hold-disk-after).", w, n,
                hold_park);
}

static double routed(const dy_worker_info *w) { return (double)w->routed; }
static double indexed(const dy_worker_info *w) { return (double)w->indexed_blocks; }

static void router_metrics(dy_buf *t, const dy_router_totals *r, const dy_worker_info *w, int n)
{
    info_metric(t, "dyad_router_info", "The routing policy (--router), as a label.", "policy",
                r->policy ? r->policy : "?");
    dy_metrics_header(t, "dyad_router_decisions_total", "counter",
           "Routing decisions (a prompt's samples count once).");
    dy_buf_printf(t, "dyad_router_decisions_total %llu\n", (unsigned long long)r->decisions);
    worker_each(t, "dyad_router_worker_decisions_total", "counter",
                "Routing decisions that chose the worker.", w, n, routed);
    dy_metrics_header(t, "dyad_router_predicted_overlap_blocks_total", "counter",
           "Leading prompt blocks the chosen worker held by the global index, summed over "
           "decisions (divide by decisions for the mean).");
    dy_buf_printf(t, "dyad_router_predicted_overlap_blocks_total %llu\n",
                  (unsigned long long)r->overlap_blocks);
    dy_metrics_header(t, "dyad_router_overlap_tier_blocks_total", "counter",
           "Of dyad_router_predicted_overlap_blocks_total, the blocks by the fastest tier the "
           "chosen worker held them in (host and disk blocks are credited at their load cost, "
           "--router-tier-cost).");
    for (int k = 0; k < DY_KV_N_TIERS; k++)
        dy_buf_printf(t, "dyad_router_overlap_tier_blocks_total{tier=\"%s\"} %llu\n",
                      dy_kv_index_tier_name(k), (unsigned long long)r->tier_blocks[k]);
    dy_metrics_header(t, "dyad_router_cached_tokens_total", "counter",
           "Prompt tokens the workers that prefilled found in their prefix caches (the prefill "
           "worker when the KV moved).");
    dy_buf_printf(t, "dyad_router_cached_tokens_total %llu\n",
                  (unsigned long long)r->cached_tokens);
    dy_metrics_header(t, "dyad_router_resyncs_total", "counter",
           "Full KV snapshots asked of workers (event gaps, errors).");
    dy_buf_printf(t, "dyad_router_resyncs_total %llu\n", (unsigned long long)r->resyncs);
    dy_metrics_header(t, "dyad_router_index_blocks", "gauge", "Distinct KV block hashes in the global index.");
    dy_buf_printf(t, "dyad_router_index_blocks %llu\n", (unsigned long long)r->index_blocks);
    worker_each(t, "dyad_router_worker_indexed_blocks", "gauge",
                "Blocks the global index says the worker holds (reported or predicted).", w, n, indexed);
}

char *dy_metrics_render(dy_metrics *m, const dy_worker_info *w, int n, const dy_xfer_totals *x,
                        const dy_router_totals *rt)
{
    dy_buf t = {0};
    info_metric(&t, "dyad_model_info", "The model's id (--model-name), as a label.", "model",
                m->model_id);
    pthread_mutex_lock(&m->mu);
    render_hist(&t, &m->ttft);
    render_hist(&t, &m->itl);
    render_hist(&t, &m->tpot);
    render_hist(&t, &m->e2e);
    render_hist(&t, &m->queue);
    render_hist(&t, &m->tier_load_est);
    render_hist(&t, &m->tier_recompute_est);
    render_hist(&t, &m->tier_wait);
    dy_metrics_header(&t, "dyad_requests_total", "counter", "Requests by outcome.");
    for (dy_end o = DY_END_STOP; o < DY_END_N; o++)
        dy_buf_printf(&t, "dyad_requests_total{outcome=\"%s\"} %llu\n", dy_end_name(o),
            (unsigned long long)m->outcomes[o]);
    pthread_mutex_unlock(&m->mu);
    worker_sum(&t, "dyad_prompt_tokens_total", "counter",
               "Prompt tokens computed by the workers (prefix-cache hits excluded).", w, n, prompt_tokens);
    worker_sum(&t, "dyad_generation_tokens_total", "counter", "Tokens generated.", w, n, gen_tokens);
    worker_sum(&t, "dyad_prefix_cache_queries_total", "counter",
               "Full prompt KV blocks looked up in the prefix cache.", w, n, cache_q);
    worker_sum(&t, "dyad_prefix_cache_hits_total", "counter",
               "Full prompt KV blocks found in the prefix cache.", w, n, cache_h);
    worker_sum(&t, "dyad_preemptions_total", "counter",
               "Sequences preempted (KV cache full) to be recomputed later.", w, n, preempt);
    worker_sum(&t, "dyad_requests_running", "gauge", "Sequences in the workers' running batches.",
               w, n, running);
    worker_sum(&t, "dyad_requests_waiting", "gauge", "Sequences waiting to be scheduled.", w, n, waiting);
    worker_each(&t, "dyad_kv_cache_usage_ratio", "gauge",
                "Share of the worker's KV blocks in use.", w, n, kv_use);
    worker_each(&t, "dyad_worker_queued_prefill_tokens", "gauge",
                "Prompt tokens waiting to be computed on the worker.", w, n, queued);
    worker_each(&t, "dyad_worker_steps_total", "counter", "Engine steps run.", w, n, steps);
    worker_each(&t, "dyad_worker_step_seconds_total", "counter",
                "Time spent in engine steps (divide by steps for the mean step time).", w, n, step_s);
    worker_each(&t, "dyad_worker_up", "gauge",
                "1 while the worker process is alive and not silent past --worker-timeout.", w, n,
                alive);
    worker_each(&t, "dyad_worker_restarts_total", "counter", "Times the worker was restarted.",
                w, n, restarts);
    worker_each(&t, "dyad_worker_hangs_total", "counter",
                "Times the worker sent nothing for --worker-timeout and was killed.", w, n, hangs);
    worker_each(&t, "dyad_worker_shm_bytes", "gauge",
                "Shared memory the worker has mapped: its own KV pool if shared, plus the decode "
                "pools it writes into.", w, n, shm_bytes);
    tier_metrics(&t, w, n);
    hold_metrics(&t, w, n);
    xfer_metrics(&t, x);
    router_metrics(&t, rt, w, n);
    if (!dy_buf_cstr(&t)) {
        dy_buf_free(&t);
        return NULL;
    }
    return (char *)t.data;
}
