/* cmd_serve.c — `dyad serve`: the embedded deployment. Starts N worker processes on this
 * host, then the OpenAI-compatible HTTP frontend; SIGINT or SIGTERM stops accepting
 * connections, lets in-flight requests finish (up to --drain-timeout), and reaps the workers. */
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/model.h"
#include "serve/front/http.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char serve_usage[] =
    "usage: dyad serve [options]\n"
    "  --model PATH              GGUF file or llama2.c checkpoint (default: bundled stories260K)\n"
    "  --tokenizer PATH          llama2.c tokenizer.bin for checkpoints\n"
    "  --model-name NAME         the id clients use (default: the file name without extension)\n"
    "  --host ADDR               IPv4 address to listen on (default 127.0.0.1)\n"
    "  --port N                  (default 8000; 0 picks a free port)\n"
    "  --workers N               aggregated worker processes (default 1; same as\n"
    "                            --prefill-workers 0 --decode-workers N)\n"
    "  --prefill-workers P       prefill workers (default 1); 0 = aggregated serving\n"
    "  --decode-workers D        decode workers (default 1)\n"
    "  --disagg-min-tokens N     prompts with fewer tokens prefill on their decode worker\n"
    "                            (default 32)\n"
    "  --prefill-busy-tokens N   prefill backlog above which prompts stay local (default 1024)\n"
    "  --kv-transfer shm|tcp     how KV moves from prefill to decode workers (default shm)\n"
    "  --kv-host ADDR            TCP: the address decode workers receive KV on (127.0.0.1)\n"
    "  --xfer-timeout S          a prefill not done by then is redone locally (default 30)\n"
    "  --prefill-launcher CMD    run prefill workers as `CMD dyad worker ...` (e.g.\n"
    "                            'ip netns exec hostA' for another network namespace)\n"
    "  --decode-launcher CMD     the same for decode workers\n"
    "  --threads-per-worker T    engine threads per worker (default 2)\n"
    "  --kv-mem MiB              KV cache per worker (default 256)\n"
    "  --kv-blocks N             KV cache per worker in blocks (overrides --kv-mem)\n"
    "  --block-size N            positions per KV block (default 16)\n"
    "  --max-batch-tokens N      token budget of one engine step (default 512)\n"
    "  --max-running N           sequences in one worker's running batch (default 64)\n"
    "  --no-prefix-cache         workers compute every prompt in full (for measurements)\n"
    "  --router POLICY           which worker of a pool: kv-aware (default: cached prefix\n"
    "                            against load), least-loaded, round-robin or random\n"
    "  --router-overlap-weight W kv-aware: weight of prefill blocks against decode blocks\n"
    "                            (default 1)\n"
    "  --router-temperature T    kv-aware: 0 picks the cheapest worker (default); > 0 samples\n"
    "                            from a softmax over normalised costs\n"
    "  --no-kv-events            workers publish no KV events; the router predicts their\n"
    "                            caches from its own decisions (approximate mode)\n"
    "  --router-ttl S            approximate mode: how long a prediction holds (default 120)\n"
    "  --max-queue N             sequences waiting for a first token before new requests get\n"
    "                            429 (default 256)\n"
    "  --api-key KEY             require 'Authorization: Bearer KEY' (default: none)\n"
    "  --chat-template NAME      override the detected family: chatml, llama2, llama3,\n"
    "                            llama3.1, mistral-legacy, mistral-v1, mistral-v3,\n"
    "                            mistral-v3-tekken, mistral-v7, mistral-v7-tekken, phi3, gemma,\n"
    "                            zephyr, plain\n"
    "  --max-body BYTES          request body limit (default 4194304)\n"
    "  --max-connections N       concurrent HTTP connections (default 256)\n"
    "  --timeout S               idle connection timeout in seconds (default 60)\n"
    "  --drain-timeout S         on shutdown, how long in-flight requests may finish (default 30)\n"
    "  --request-log PATH        append one JSON line per request (where it ran, its KV\n"
    "                            transfer, latencies) to PATH; '-' for standard error\n"
    "See docs/api.md for the API and docs/metrics.md for /metrics.\n";

typedef struct {
    const char *model, *tokenizer, *model_name, *host, *api_key, *chat, *request_log;
    int port, max_body, max_connections, timeout, drain;
    dy_fleet_config w;
} serve_opts;

static int parse(int argc, char **argv, serve_opts *o)
{
    *o = (serve_opts){.host = "127.0.0.1", .port = 8000, .max_body = 4 << 20,
                      .max_connections = 256, .timeout = 60, .drain = 30};
    o->w = (dy_fleet_config){.n_workers = 2, .n_prefill = 1, .threads_per_worker = 1,
                               .kv_mem_mib = 256, .block_size = 16, .max_batch_tokens = 512,
                               .max_running = 64, .max_queue = 256, .startup_timeout_s = 120,
                               .xfer = DY_XFER_SHM, .xfer_timeout_s = 30,
                               .route = dy_route_config_default(),
                               .router = dy_router_config_default()};
    o->w.router.policy = DY_ROUTER_KV_AWARE;
    int agg = -1, pre = -1, dec = -1;
    float xto = 30;
    const char *v;
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(serve_usage, stdout);
            return 0;
        }
#define INT(flag, field, lo, hi) \
    else if (arg_take("serve", argc, argv, &i, flag, &v, &bad)) bad = !arg_int("serve", flag, v, lo, hi, &(field))
        else if (arg_take("serve", argc, argv, &i, "--model", &v, &bad)) o->model = v;
        else if (arg_take("serve", argc, argv, &i, "--tokenizer", &v, &bad)) o->tokenizer = v;
        else if (arg_take("serve", argc, argv, &i, "--model-name", &v, &bad)) o->model_name = v;
        else if (arg_take("serve", argc, argv, &i, "--host", &v, &bad)) o->host = v;
        else if (arg_take("serve", argc, argv, &i, "--api-key", &v, &bad)) o->api_key = v;
        else if (arg_take("serve", argc, argv, &i, "--chat-template", &v, &bad)) o->chat = v;
        else if (arg_take("serve", argc, argv, &i, "--request-log", &v, &bad)) o->request_log = v;
        INT("--port", o->port, 0, 65535);
        INT("--workers", agg, 1, 64);
        INT("--prefill-workers", pre, 0, 63);
        INT("--decode-workers", dec, 1, 64);
        INT("--disagg-min-tokens", o->w.route.disagg_min_tokens, 0, 1 << 24);
        else if (arg_take("serve", argc, argv, &i, "--prefill-busy-tokens", &v, &bad)) {
            int t = 0;
            bad = !arg_int("serve", "--prefill-busy-tokens", v, 0, 1 << 30, &t);
            o->w.route.prefill_busy_tokens = t;
        } else if (arg_take("serve", argc, argv, &i, "--kv-transfer", &v, &bad)) {
            if (!strcmp(v, "shm")) o->w.xfer = DY_XFER_SHM;
            else if (!strcmp(v, "tcp")) o->w.xfer = DY_XFER_TCP;
            else {
                fprintf(stderr, "dyad serve: --kv-transfer: '%s' is not shm or tcp\n", v);
                bad = true;
            }
        } else if (arg_take("serve", argc, argv, &i, "--kv-host", &v, &bad)) o->w.kv_host = v;
        else if (!strcmp(argv[i], "--no-prefix-cache"))
            o->w.no_prefix_cache = true;
        else if (!strcmp(argv[i], "--no-kv-events"))
            o->w.no_kv_events = true;
        else if (arg_take("serve", argc, argv, &i, "--router", &v, &bad)) {
            if (!dy_router_policy_parse(v, &o->w.router.policy)) {
                fprintf(stderr, "dyad serve: --router: '%s' is not round-robin, random, "
                        "least-loaded or kv-aware\n", v);
                bad = true;
            }
        } else if (arg_take("serve", argc, argv, &i, "--router-overlap-weight", &v, &bad)) {
            float f = 1;
            bad = !arg_float("serve", "--router-overlap-weight", v, 0, 1e6, &f);
            o->w.router.overlap_weight = f;
        } else if (arg_take("serve", argc, argv, &i, "--router-temperature", &v, &bad)) {
            float f = 0;
            bad = !arg_float("serve", "--router-temperature", v, 0, 1e6, &f);
            o->w.router.temperature = f;
        } else if (arg_take("serve", argc, argv, &i, "--router-ttl", &v, &bad)) {
            float f = 120;
            bad = !arg_float("serve", "--router-ttl", v, 0.001, 1e7, &f);
            o->w.router.approx_ttl_s = f;
        }
        else if (arg_take("serve", argc, argv, &i, "--prefill-launcher", &v, &bad))
            o->w.prefill_launcher = v;
        else if (arg_take("serve", argc, argv, &i, "--decode-launcher", &v, &bad))
            o->w.decode_launcher = v;
        else if (arg_take("serve", argc, argv, &i, "--xfer-timeout", &v, &bad)) {
            bad = !arg_float("serve", "--xfer-timeout", v, 0.01, 86400, &xto);
            o->w.xfer_timeout_s = xto;
        }
        INT("--threads-per-worker", o->w.threads_per_worker, 1, 256);
        INT("--kv-mem", o->w.kv_mem_mib, 1, 1 << 20);
        INT("--kv-blocks", o->w.kv_blocks, 2, 1 << 24);
        INT("--block-size", o->w.block_size, 1, 256);
        INT("--max-batch-tokens", o->w.max_batch_tokens, 1, 65536);
        INT("--max-running", o->w.max_running, 1, 4096);
        INT("--max-queue", o->w.max_queue, 1, 1 << 20);
        INT("--max-body", o->max_body, 1024, 1 << 30);
        INT("--max-connections", o->max_connections, 1, 65536);
        INT("--timeout", o->timeout, 1, 86400);
        INT("--drain-timeout", o->drain, 0, 86400);
#undef INT
        else if (!bad) {
            fprintf(stderr, "dyad serve: unknown option '%s' (see dyad serve --help)\n", argv[i]);
            bad = true;
        }
    }
    if (!bad && agg > 0 && (pre > 0 || dec > 0)) {
        fprintf(stderr, "dyad serve: --workers (aggregated) cannot be combined with "
                "--prefill-workers/--decode-workers\n");
        bad = true;
    }
    if (agg > 0) { /* aggregated: N workers that prefill and decode */
        o->w.n_prefill = 0;
        o->w.n_workers = agg;
    } else {
        o->w.n_prefill = pre >= 0 ? pre : 1;
        o->w.n_workers = o->w.n_prefill + (dec > 0 ? dec : 1);
    }
    if (!bad && o->w.n_workers > 64) {
        fprintf(stderr, "dyad serve: at most 64 workers in all\n");
        bad = true;
    }
    return bad ? 2 : -1;
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
    if (!o.model) {
        snprintf(model_buf, sizeof model_buf, "%s/stories260K.bin", dyad_model_dir());
        snprintf(tok_buf, sizeof tok_buf, "%s/tok512.bin", dyad_model_dir());
        o.model = model_buf;
        if (!o.tokenizer)
            o.tokenizer = tok_buf;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "dyad serve: cannot find its own executable\n");
        return 1;
    }
    exe[n] = 0;
    /* The frontend tokenizes, so it loads the model too (weights are mapped, not read). */
    dy_model *m = dy_model_load(o.model, o.tokenizer, err, sizeof err);
    if (!m || !m->tok) {
        fprintf(stderr, "dyad serve: %s\n", m ? "the model has no tokenizer (--tokenizer)" : err);
        dy_model_free(m);
        return 1;
    }
    dy_chat_family chat = dy_chat_detect(dy_tokenizer_chat_template(m->tok));
    if (o.chat && !dy_chat_family_from_name(o.chat, &chat)) {
        fprintf(stderr, "dyad serve: --chat-template: unknown family '%s'\n", o.chat);
        dy_model_free(m);
        return 2;
    }
    default_name(o.model, name, sizeof name);

    /* Signals are taken by sigwait below; every thread started from here inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    o.w.exe = exe;
    o.w.model = o.model;
    o.w.tokenizer = o.tokenizer;
    dy_reqlog *reqlog = o.request_log ? dy_reqlog_open(o.request_log, err, sizeof err) : NULL;
    if (o.request_log && !reqlog) {
        fprintf(stderr, "dyad serve: %s\n", err);
        dy_model_free(m);
        return 2;
    }
    dy_fleet *workers = dy_fleet_start(&o.w, err, sizeof err);
    dy_metrics *metrics = workers ? dy_metrics_new() : NULL;
    dy_http *http = NULL;
    if (workers && metrics) {
        dy_http_config hc = {
            .host = o.host, .port = o.port, .api_key = o.api_key,
            .model_id = o.model_name ? o.model_name : name, .tok = m->tok, .chat = chat,
            .limits = dy_api_limits_default(m->hp.ctx_len), .max_connections = o.max_connections,
            .connection_timeout_s = o.timeout, .workers = workers, .metrics = metrics,
            .reqlog = reqlog, .started = (int64_t)time(NULL)};
        hc.limits.max_body_bytes = (size_t)o.max_body;
        hc.limits.vocab_size = m->hp.vocab_size;
        http = dy_http_start(&hc, err, sizeof err);
    }
    if (!http) {
        fprintf(stderr, "dyad serve: %s\n", err[0] ? err : "out of memory");
        if (workers) {
            dy_fleet_stop(workers, 0);
            dy_fleet_free(workers);
        }
        dy_metrics_free(metrics);
        dy_reqlog_close(reqlog);
        dy_model_free(m);
        return 1;
    }
    if (o.w.n_prefill > 0)
        fprintf(stderr, "dyad serve: %s on http://%s:%d with %d prefill + %d decode workers × %d "
                "threads, KV over %s, router %s (chat template: %s)\n",
                o.model_name ? o.model_name : name, o.host, dy_http_port(http), o.w.n_prefill,
                o.w.n_workers - o.w.n_prefill, o.w.threads_per_worker,
                o.w.xfer == DY_XFER_TCP ? "tcp" : "shared memory",
                dy_router_policy_name(o.w.router.policy), dy_chat_family_name(chat));
    else
        fprintf(stderr, "dyad serve: %s on http://%s:%d with %d aggregated worker%s × %d threads, "
                "router %s (chat template: %s)\n", o.model_name ? o.model_name : name, o.host,
                dy_http_port(http), o.w.n_workers, o.w.n_workers == 1 ? "" : "s",
                o.w.threads_per_worker, dy_router_policy_name(o.w.router.policy),
                dy_chat_family_name(chat));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "dyad serve: %s: finishing in-flight requests (up to %d s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", o.drain);
    dy_http_quiesce(http);
    dy_fleet_stop(workers, o.drain);
    dy_http_stop(http);
    dy_fleet_free(workers);
    dy_metrics_free(metrics);
    dy_reqlog_close(reqlog);
    dy_model_free(m);
    return 0;
}
