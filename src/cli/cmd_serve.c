/* cmd_serve.c — `dyad serve`: the embedded deployment. Starts N worker processes on this
 * host, then the OpenAI-compatible HTTP frontend; SIGINT or SIGTERM starts a drain: new
 * requests get 503, in-flight ones may finish (up to --drain-timeout; those still running then
 * end with a 503 or a stream's error event), then the workers are reaped. With --cluster it
 * starts no worker: it serves with the workers registered on NATS (docs/cluster.md). */
#include "cli/commands.h"
#include "cli/parse.h"
#include "cli/serve_plan.h"
#include "engine/model.h"
#include "serve/cluster/front_link.h"
#include "serve/cluster/nats_conn.h"
#include "serve/front/http.h"
#include "serve/wire/worker_args.h"
#include "serve/worker/xfer.h"
#include "util/clock.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char serve_usage[] = "usage: dyad serve [options]\n";
static const char serve_epilog[] =
    "See docs/api.md for the API, docs/metrics.md for /metrics, docs/observability.md for\n"
    "Prometheus and Grafana, and docs/dashboard.md for the live page at /dashboard (its data:\n"
    "GET /v1/dyad/status).\n";

typedef struct {
    const char *model_name, *host, *api_key, *request_log;
    int port, max_body, max_schema, max_connections, timeout, drain;
    long max_response;
    double header_timeout, body_timeout;
    int chat;                 /* a dy_chat_family, or -1: detect it from the model */
    int agg, pre, dec;        /* --workers, --prefill-workers, --decode-workers; -1: not given */
    int prefill_busy_tokens;
    dy_fleet_config w;        /* w.worker: what every worker is started with */
    serve_plan_opts plan;     /* --cores, --planner and the planner's settings */
    /* --router's and --chat-template's names, as their owners spell them */
    const char *policies[5], *families[DY_CHAT_N_FAMILIES + 1];
    int family_values[DY_CHAT_N_FAMILIES];
    char chat_help[512];
    char tier_cost_default[64]; /* --router-tier-cost's default, as it is written */
    /* cluster mode */
    const char *cluster;
    int cluster_max;
    double cluster_timeout;
    bool xfer_given;
} serve_opts;

#define FRONTEND_MAX_OPTS 40
#define MAX_SERVE_OPTS (DY_WORKER_MAX_OPTS + FRONTEND_MAX_OPTS + SERVE_PLAN_OPTS)

/* --chat-template's names and help, plain (the fallback) last. */
static void chat_families(serve_opts *o)
{
    size_t len = (size_t)snprintf(o->chat_help, sizeof o->chat_help,
                                  "override the family detected from the model's template:");
    for (int f = 0; f < DY_CHAT_N_FAMILIES; f++) {
        o->family_values[f] = (f + 1) % DY_CHAT_N_FAMILIES;
        o->families[f] = dy_chat_family_name(o->family_values[f]);
        const char *sep = f == 0 ? " " : f + 1 < DY_CHAT_N_FAMILIES ? ", " : " or ";
        if (len < sizeof o->chat_help)
            len += (size_t)snprintf(o->chat_help + len, sizeof o->chat_help - len, "%s%s", sep,
                                    o->families[f]);
    }
}

/* --router-tier-cost: ctx is the router config's tier_cost. */
static bool set_tier_cost(void *ctx, const char *value, char *err, size_t errlen)
{
    return dy_router_tier_cost_parse(value, ctx, err, errlen);
}

/* The frontend's own options; the workers' come from worker_args.h. */
static int frontend_opts(serve_opts *o, dy_opt *t)
{
    static const char *const transfers[] = {"shm", "tcp", "ucx", NULL};
    static const int transfer_values[] = {DY_XFER_SHM, DY_XFER_TCP, DY_XFER_UCX};
    static const int policy_values[] = {DY_ROUTER_ROUND_ROBIN, DY_ROUTER_RANDOM,
                                        DY_ROUTER_LEAST_LOADED, DY_ROUTER_KV_AWARE};
    for (int i = 0; i < 4; i++)
        o->policies[i] = dy_router_policy_name(policy_values[i]);
    chat_families(o);
    _Static_assert(sizeof(dy_xfer_kind) == sizeof(int) &&
                   sizeof(dy_router_policy) == sizeof(int), "ENUM options store an int");
    const dy_route_config route = dy_route_config_default();
    const dy_router_config router = dy_router_config_default();
    snprintf(o->tier_cost_default, sizeof o->tier_cost_default, "host=%g,disk=%g",
             router.tier_cost[DY_KV_TIER_HOST], router.tier_cost[DY_KV_TIER_DISK]);
    const dy_opt own[] = {
        {.section = "Frontend: HTTP, disaggregation, routing", .name = "model-name",
         .kind = DY_OPT_STR, .dst = &o->model_name, .meta = "NAME",
         .help = "the id clients use", .shown_default = "the file name without extension"},
        {.name = "host", .kind = DY_OPT_STR, .dst = &o->host, .meta = "ADDR",
         .help = "IPv4 address to listen on", .def_str = "127.0.0.1"},
        {.name = "port", .kind = DY_OPT_INT, .dst = &o->port, .meta = "N",
         .help = "port to listen on; 0 picks a free port", .min = 0, .max = 65535,
         .def = 8000},
        {.name = "workers", .kind = DY_OPT_INT, .dst = &o->agg, .meta = "N",
         .help = "aggregated worker processes (the same as --prefill-workers 0 "
                 "--decode-workers N)", .min = 1, .max = 64, .def = -1, .shown_default = ""},
        {.name = "prefill-workers", .kind = DY_OPT_INT, .dst = &o->pre, .meta = "P",
         .help = "prefill workers; 0 = aggregated serving", .min = 0, .max = 63, .def = -1,
         .shown_default = "1"},
        {.name = "decode-workers", .kind = DY_OPT_INT, .dst = &o->dec, .meta = "D",
         .help = "decode workers", .min = 1, .max = 64, .def = -1, .shown_default = "1"},
        {.name = "disagg-min-tokens", .kind = DY_OPT_INT, .dst = &o->w.route.disagg_min_tokens,
         .meta = "N", .help = "prompts with fewer tokens prefill on their decode worker",
         .min = 0, .max = 1 << 24, .def = route.disagg_min_tokens},
        {.name = "prefill-busy-tokens", .kind = DY_OPT_INT, .dst = &o->prefill_busy_tokens,
         .meta = "N", .help = "prefill backlog above which prompts stay local", .min = 0,
         .max = 1 << 30, .def = (double)route.prefill_busy_tokens},
        {.name = "kv-transfer", .kind = DY_OPT_ENUM, .dst = (int *)&o->w.xfer,
         .meta = "shm|tcp|ucx", .help = "how KV moves from prefill to decode workers: shared "
                                          "memory (one host), TCP, or UCX (its transports: "
                                          "UCX_TLS; docs/disaggregation.md)",
         .names = transfers, .values = transfer_values, .def = DY_XFER_SHM,
         .given = &o->xfer_given},
        {.name = "kv-host", .kind = DY_OPT_STR, .dst = &o->w.kv_host, .meta = "ADDR",
         .help = "TCP, UCX: the address decode workers receive KV on", .def_str = "127.0.0.1"},
        {.name = "xfer-timeout", .kind = DY_OPT_DOUBLE, .dst = &o->w.xfer_timeout_s,
         .meta = "S", .help = "a prefill not done by then is redone locally", .min = 0.01,
         .max = 86400, .def = 30},
        {.name = "worker-timeout", .kind = DY_OPT_DOUBLE, .dst = &o->w.worker_timeout_s,
         .meta = "S", .help = "a worker that sends nothing for S seconds (they report every "
                              "0.1 s) is reported down, killed and replaced; 0 = never",
         .min = 0, .max = 86400, .def = 10},
        {.name = "startup-timeout", .kind = DY_OPT_DOUBLE, .dst = &o->w.startup_timeout_s,
         .meta = "S", .help = "a worker must have loaded its model within S seconds of its "
                              "start: at the server's start it fails to start; a worker "
                              "started later is killed and started again, with a growing "
                              "pause; 0 = never",
         .min = 0, .max = 86400, .def = 120},
        {.name = "prefill-launcher", .kind = DY_OPT_STR, .dst = &o->w.prefill_launcher,
         .meta = "CMD", .help = "run prefill workers as `CMD dyad worker ...` (e.g. 'ip netns "
                                "exec hostA' for another network namespace)"},
        {.name = "decode-launcher", .kind = DY_OPT_STR, .dst = &o->w.decode_launcher,
         .meta = "CMD", .help = "the same for decode workers"},
        {.name = "router", .kind = DY_OPT_ENUM, .dst = (int *)&o->w.router.policy,
         .meta = "POLICY", .help = "which worker of a pool: kv-aware (cached prefix against "
                                   "load), least-loaded, round-robin or random",
         .names = o->policies, .values = policy_values, .def = router.policy},
        {.name = "router-overlap-weight", .kind = DY_OPT_DOUBLE,
         .dst = &o->w.router.overlap_weight, .meta = "W",
         .help = "kv-aware: weight of prefill blocks against decode blocks", .min = 0,
         .max = 1e6, .def = router.overlap_weight},
        {.name = "router-temperature", .kind = DY_OPT_DOUBLE, .dst = &o->w.router.temperature,
         .meta = "T", .help = "kv-aware: 0 picks the cheapest worker; > 0 samples from a "
                              "softmax over normalised costs",
         .min = 0, .max = 1e6, .def = router.temperature},
        {.name = "router-ttl", .kind = DY_OPT_DOUBLE, .dst = &o->w.router.approx_ttl_s,
         .meta = "S", .help = "approximate mode (--no-kv-events): how long a prediction holds",
         .min = 0.001, .max = 1e7, .def = router.approx_ttl_s},
        {.name = "router-tier-cost", .kind = DY_OPT_CALL, .call = set_tier_cost,
         .ctx = o->w.router.tier_cost, .meta = "host=F,disk=F",
         .help = "kv-aware: what bringing one cached block up from host memory or from disk "
                 "costs, as a share of computing it again (0: as good as a primary hit, 1: "
                 "no better than a miss); either or both, each in [0, 1]",
         .shown_default = o->tier_cost_default},
        {.name = "max-queue", .kind = DY_OPT_INT, .dst = &o->w.max_queue, .meta = "N",
         .help = "sequences waiting for a first token before new requests get 429", .min = 1,
         .max = 1 << 20, .def = 256},
        {.name = "api-key", .kind = DY_OPT_STR, .dst = &o->api_key, .meta = "KEY",
         .help = "require 'Authorization: Bearer KEY'", .shown_default = "none"},
        {.name = "chat-template", .kind = DY_OPT_ENUM, .dst = &o->chat, .meta = "NAME",
         .help = o->chat_help, .names = o->families, .values = o->family_values, .def = -1},
        {.name = "max-body", .kind = DY_OPT_INT, .dst = &o->max_body, .meta = "BYTES",
         .help = "request body limit", .min = 1024, .max = 1 << 30,
         .def = (double)dy_api_limits_default(0).max_body_bytes},
        {.name = "max-schema-bytes", .kind = DY_OPT_INT, .dst = &o->max_schema, .meta = "N",
         .help = "largest response_format JSON Schema, in bytes as compact JSON (docs/api.md)",
         .min = 2, .max = 1 << 30, .def = (double)dy_api_limits_default(0).max_schema_bytes},
        {.name = "max-response-bytes", .kind = DY_OPT_LONG, .dst = &o->max_response,
         .meta = "BYTES", .help = "largest answer a request that does not stream may ask for "
                                  "(n x max_tokens x logprobs at the longest token; over it: "
                                  "400); 0 = no limit",
         .min = 0, .max = 1L << 40, .def = (double)dy_api_limits_default(0).max_response_bytes},
        {.name = "max-connections", .kind = DY_OPT_INT, .dst = &o->max_connections,
         .meta = "N", .help = "concurrent HTTP connections; clients past them get 503 with "
                              "Retry-After", .min = 1, .max = 65536, .def = 256},
        {.name = "timeout", .kind = DY_OPT_INT, .dst = &o->timeout, .meta = "S",
         .help = "idle connection timeout in seconds", .min = 1, .max = 86400, .def = 60},
        {.name = "header-timeout", .kind = DY_OPT_DOUBLE, .dst = &o->header_timeout,
         .meta = "S", .help = "a request's line and headers must arrive within S seconds of "
                              "the connection opening (kept alive: of --timeout after the last "
                              "answer), or it gets 408 and is closed; 0 = no limit",
         .min = 0, .max = 86400, .def = 30},
        {.name = "body-timeout", .kind = DY_OPT_DOUBLE, .dst = &o->body_timeout, .meta = "S",
         .help = "the same for the body, from the end of the headers", .min = 0,
         .max = 86400, .def = 60},
        {.name = "drain-timeout", .kind = DY_OPT_INT, .dst = &o->drain, .meta = "S",
         .help = "on shutdown, how long in-flight requests may finish (new ones get 503; "
                 "those still running then end with 503 or a stream's error event)", .min = 0,
         .max = 86400, .def = 30},
        {.name = "request-log", .kind = DY_OPT_STR, .dst = &o->request_log, .meta = "PATH",
         .help = "append one JSON line per request (where it ran, its KV transfer, latencies) "
                 "to PATH; '-' for standard error"},
        {.section = "Cluster mode (docs/cluster.md)", .name = "cluster", .kind = DY_OPT_STR,
         .dst = &o->cluster, .meta = "URL",
         .help = "start no worker: serve with the workers registered on the NATS server at URL "
                 "(nats://HOST:PORT; they join with `dyad worker --cluster URL`); KV moves over "
                 "tcp unless --kv-transfer ucx"},
        {.name = "cluster-max-workers", .kind = DY_OPT_INT, .dst = &o->cluster_max, .meta = "N",
         .help = "the most cluster workers this frontend uses at once", .min = 1, .max = 256,
         .def = 64},
        {.name = "cluster-timeout", .kind = DY_OPT_DOUBLE, .dst = &o->cluster_timeout,
         .meta = "S", .help = "give up when NATS cannot be reached within S seconds of the "
                              "start (retrying with a growing pause); 0 = one try",
         .min = 0, .max = 86400, .def = 60},
    };
    _Static_assert(sizeof own / sizeof own[0] <= FRONTEND_MAX_OPTS, "FRONTEND_MAX_OPTS");
    int n = (int)(sizeof own / sizeof own[0]);
    for (int i = 0; i < n; i++)
        t[i] = own[i];
    return n;
}

/* Every option of `dyad serve`: the workers' shared settings first, then the frontend's. */
static int serve_table(serve_opts *o, dy_opt *t)
{
    int n = dy_worker_args_opts(&o->w.worker, DY_WORKER_OPTS_SHARED, t);
    t[0].section = "Model and workers (passed on to each `dyad worker`)";
    dy_opts_find(t, n, "model")->shown_default = "the bundled stories260K";
    n += frontend_opts(o, t + n);
    n += serve_plan_table(&o->plan, t + n);
    return n;
}

/* How many workers of which kind, from --workers or --prefill-workers/--decode-workers. */
static bool count_workers(serve_opts *o)
{
    if (o->agg > 0 && (o->pre > 0 || o->dec > 0)) {
        fprintf(stderr, "dyad serve: --workers (aggregated) cannot be combined with "
                "--prefill-workers/--decode-workers\n");
        return false;
    }
    if (o->agg > 0) { /* aggregated: N workers that prefill and decode */
        o->w.n_prefill = 0;
        o->w.n_workers = o->agg;
    } else {
        o->w.n_prefill = o->pre >= 0 ? o->pre : 1;
        o->w.n_workers = o->w.n_prefill + (o->dec > 0 ? o->dec : 1);
    }
    if (o->w.n_workers > 64) {
        fprintf(stderr, "dyad serve: at most 64 workers in all\n");
        return false;
    }
    return true;
}

/* --cluster: the workers are the cluster's, so none of the options that start or resize them
 * applies; KV crosses hosts, so not through shared memory. */
static bool check_cluster(serve_opts *o)
{
    char err[256];
    const char *bad = NULL;
    if (!dy_nats_url_check(o->cluster, err, sizeof err))
        bad = err;
    else if (o->agg > 0 || o->pre >= 0 || o->dec > 0)
        bad = "--cluster starts no worker: --workers, --prefill-workers and --decode-workers "
              "do not apply (workers join with `dyad worker --cluster URL --role R`)";
    else if (o->w.prefill_launcher || o->w.decode_launcher)
        bad = "--cluster starts no worker: --prefill-launcher/--decode-launcher do not apply";
    else if (o->plan.cores)
        bad = "--cluster cannot resize pools yet: --cores and --planner do not apply";
    else if (o->xfer_given && o->w.xfer == DY_XFER_SHM)
        bad = "--cluster moves KV between hosts: --kv-transfer tcp or ucx, not shm";
    if (bad) {
        fprintf(stderr, "dyad serve: %s\n", bad);
        return false;
    }
    if (o->w.xfer == DY_XFER_SHM)
        o->w.xfer = DY_XFER_TCP;
    o->w.cluster = true;
    o->w.n_workers = o->cluster_max;
    o->w.n_prefill = 0;
    return true;
}

/* 0 after --help, 2 on a usage error, CLI_GO to go on and serve. */
static int parse(int argc, char **argv, serve_opts *o)
{
    *o = (serve_opts){.w = {.startup_timeout_s = 120, .route = dy_route_config_default(),
                            .router = dy_router_config_default()}};
    dy_opt t[MAX_SERVE_OPTS];
    int n = serve_table(o, t);
    int rc = cli_parse("serve", serve_usage, serve_epilog, t, n, argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    o->w.route.prefill_busy_tokens = o->prefill_busy_tokens;
    char err[256];
    if (!dy_worker_args_check(&o->w.worker, err, sizeof err) ||
        !dy_xfer_kind_available(o->w.xfer, err, sizeof err)) {
        fprintf(stderr, "dyad serve: %s\n", err);
        return 2;
    }
    if (o->cluster)
        return check_cluster(o) && serve_plan_check(&o->plan, &o->w) ? CLI_GO : 2;
    return count_workers(o) && serve_plan_check(&o->plan, &o->w) ? CLI_GO : 2;
}

/* "dir/stories260K.bin" → "stories260K" */
static void default_name(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    snprintf(out, cap, "%s", b ? b + 1 : path);
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = 0;
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    char model_buf[4096], tok_buf[4096], exe[PATH_MAX], name[256], err[1024] = "";
    if (!o.w.worker.model) {
        snprintf(model_buf, sizeof model_buf, "%s/stories260K.bin", dyad_model_dir());
        snprintf(tok_buf, sizeof tok_buf, "%s/tok512.bin", dyad_model_dir());
        o.w.worker.model = model_buf;
        if (!o.w.worker.tokenizer)
            o.w.worker.tokenizer = tok_buf;
    }
    if (!dyad_self_exe(exe, sizeof exe)) {
        fprintf(stderr, "dyad serve: cannot find its own executable\n");
        return 1;
    }
    /* The frontend tokenizes, so it loads the model too (weights are mapped, not read). */
    dy_model *m = dy_model_load(o.w.worker.model, o.w.worker.tokenizer, err, sizeof err);
    if (!m || !m->tok) {
        fprintf(stderr, "dyad serve: %s\n", m ? "the model has no tokenizer (--tokenizer)" : err);
        dy_model_free(m);
        return 1;
    }
    dy_chat_family chat = o.chat >= 0 ? (dy_chat_family)o.chat
                                      : dy_chat_detect(dy_tokenizer_chat_template(m->tok));
    default_name(o.w.worker.model, name, sizeof name);

    /* Signals are taken by sigwait below; every thread started from here inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    o.w.exe = exe;
    dy_reqlog *reqlog = o.request_log ? dy_reqlog_open(o.request_log, err, sizeof err) : NULL;
    if (o.request_log && !reqlog) {
        fprintf(stderr, "dyad serve: %s\n", err);
        dy_model_free(m);
        return 2;
    }
    double t_start = dy_now();
    /* Cluster mode: this frontend's id names its inboxes and starts its request ids, so that
     * frontends sharing workers never mix their sequences. */
    uint32_t frontend_id = 0;
    if (o.cluster) {
        if (getrandom(&frontend_id, sizeof frontend_id, 0) != (ssize_t)sizeof frontend_id)
            frontend_id = (uint32_t)getpid() ^ (uint32_t)(dy_now() * 1e6);
        o.w.id_base = ((uint64_t)(frontend_id & 0xffffff) << 40) | 1;
    }
    dy_fleet *workers = dy_fleet_start(&o.w, err, sizeof err);
    dy_front_link *link = NULL;
    if (workers && o.cluster) {
        dy_front_link_opts lo = {.url = o.cluster, .timeout_s = o.cluster_timeout,
                                 .frontend_id = frontend_id, .fingerprint = m->fingerprint,
                                 .block_size = (uint32_t)o.w.worker.block_size,
                                 .kv_type = o.w.worker.kv_type, .xfer = o.w.xfer};
        if (!(link = dy_front_link_start(&lo, workers, err, sizeof err))) {
            dy_fleet_stop(workers, 0);
            dy_fleet_free(workers);
            workers = NULL;
        }
    }
    dy_metrics *metrics = workers ? dy_metrics_new(o.model_name ? o.model_name : name) : NULL;
    dy_loadwin *loadwin = workers && o.plan.cores ? dy_loadwin_new() : NULL;
    serve_planner planner = {0};
    dy_http *http = NULL;
    bool ready = workers && (!o.plan.cores || loadwin);
    if (ready && serve_plan_start(&o.plan, &o.w, workers, loadwin, dy_now() - t_start,
                                    &planner) != 0) {
        ready = false;
        snprintf(err, sizeof err, "the planner did not start");
    }
    if (workers && metrics && ready) {
        dy_http_config hc = {
            .host = o.host, .port = o.port, .api_key = o.api_key,
            .model_id = o.model_name ? o.model_name : name, .tok = m->tok, .chat = chat,
            .limits = dy_api_limits_default(m->hp.ctx_len), .max_connections = o.max_connections,
            .connection_timeout_s = o.timeout, .header_timeout_s = o.header_timeout,
            .body_timeout_s = o.body_timeout, .workers = workers, .metrics = metrics,
            .reqlog = reqlog, .loadwin = loadwin, .autoscale = planner.autoscale,
            .started = (int64_t)time(NULL), .slo_ttft_s = o.plan.slo.ttft_ms / 1e3,
            .slo_tpot_s = o.plan.slo.tpot_ms / 1e3};
        hc.limits.max_body_bytes = (size_t)o.max_body;
        hc.limits.max_schema_bytes = (size_t)o.max_schema;
        hc.limits.vocab_size = m->hp.vocab_size;
        hc.limits.max_response_bytes = (size_t)o.max_response;
        hc.limits.max_token_bytes = dy_tokenizer_max_token_bytes(m->tok);
        if (hc.limits.max_sequences > o.w.max_queue) /* more could never be admitted: a 400 */
            hc.limits.max_sequences = o.w.max_queue;
        http = dy_http_start(&hc, err, sizeof err);
    }
    if (!http) {
        fprintf(stderr, "dyad serve: %s\n", err[0] ? err : "out of memory");
        serve_plan_stop(&planner);
        dy_loadwin_free(loadwin);
        if (workers) {
            dy_fleet_stop(workers, 0);
            dy_front_link_stop(link);
            dy_fleet_free(workers);
        }
        dy_metrics_free(metrics);
        dy_reqlog_close(reqlog);
        dy_model_free(m);
        return 1;
    }
    const int n_started = o.w.n_start > 0 ? o.w.n_start : o.w.n_workers;
    if (o.cluster)
        fprintf(stderr, "dyad serve: %s on http://%s:%d, cluster mode: the workers registered "
                "on %s (up to %d), KV over %s, router %s (chat template: %s)\n",
                o.model_name ? o.model_name : name, o.host, dy_http_port(http), o.cluster,
                o.cluster_max, o.w.xfer == DY_XFER_UCX ? "ucx" : "tcp",
                dy_router_policy_name(o.w.router.policy), dy_chat_family_name(chat));
    else if (o.w.n_prefill > 0)
        fprintf(stderr, "dyad serve: %s on http://%s:%d with %d prefill + %d decode workers × %d "
                "threads, KV over %s, router %s (chat template: %s)\n",
                o.model_name ? o.model_name : name, o.host, dy_http_port(http), o.w.n_prefill,
                n_started - o.w.n_prefill, o.w.worker.threads,
                o.w.xfer == DY_XFER_TCP   ? "tcp"
                : o.w.xfer == DY_XFER_UCX ? "ucx"
                                          : "shared memory",
                dy_router_policy_name(o.w.router.policy), dy_chat_family_name(chat));
    else
        fprintf(stderr, "dyad serve: %s on http://%s:%d with %d aggregated worker%s × %d threads, "
                "router %s (chat template: %s)\n", o.model_name ? o.model_name : name, o.host,
                dy_http_port(http), n_started, n_started == 1 ? "" : "s",
                o.w.worker.threads, dy_router_policy_name(o.w.router.policy),
                dy_chat_family_name(chat));
    if (o.plan.cores)
        fprintf(stderr, "dyad serve: pools resizable within %d cores (%d slots), planner %s\n",
                o.plan.cores, o.w.n_workers, dy_autoscale_mode_name(o.plan.mode));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "dyad serve: %s: finishing in-flight requests (up to %d s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", o.drain);
    dy_http_drain(http); /* new requests get 503 from now on */
    serve_plan_stop(&planner); /* no moves while the fleet drains */
    dy_fleet_stop(workers, o.drain);
    dy_front_link_stop(link);
    dy_http_stop(http);
    dy_fleet_free(workers);
    dy_metrics_free(metrics);
    dy_loadwin_free(loadwin);
    dy_reqlog_close(reqlog);
    dy_model_free(m);
    return 0;
}
