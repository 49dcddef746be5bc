/* cmd_bench_agentic.c — `dyad bench agentic`: agent sessions with tool calls against a server,
 * beside background traffic (src/bench/bench_agentic.h), and the report: continuation TTFT,
 * the background's TPOT and throughput, the KV cache's occupancy, what the tiers moved. The
 * Ctrl-C flag is the one piece of global state, because a signal handler reaches nothing
 * else. A benchmark: it asserts nothing. */
#include "bench/bench_agentic.h"
#include "cli/commands.h"
#include "cli/parse.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop; /* set by the SIGINT handler only */

static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1;
}

static const char agentic_usage[] =
    "usage: dyad bench agentic --url URL [--sessions N] [--turns N] [--tool-ms MS] ...\n"
    "Agent sessions against an OpenAI-compatible server (dyad's dyad.session and dyad.hold):\n"
    "each session alternates model turns and tool calls, its prompt growing by the tool's\n"
    "result each turn, beside open-loop background traffic. Reports the continuation turns'\n"
    "TTFT, the background's TPOT and throughput, and what the server's KV tiers moved.\n"
    "On a terminal, stderr shows a progress line.\n";

static const char *const dist_names[] = {"fixed", "lognormal", "pareto", NULL};
static const char *const hint_names[] = {"none", "predicted", "oracle", NULL};

static void print_dist(const char *what, const dyb_dist *d)
{
    if (d->n == 0) {
        printf("  %-26s none\n", what);
        return;
    }
    printf("  %-26s p50 %8.1f ms  p90 %8.1f ms  mean %8.1f ms  (%zu)\n", what, d->p50, d->p90,
           d->mean, d->n);
}

static void print_report(const dyb_agentic_config *c, const dyb_agentic_report *r)
{
    printf("agentic: %d sessions x %d turns, prompt %ld + %ld per turn, answers %ld tokens; "
           "tools %s mean %.0f ms (drawn: %.0f ms), hint %s, error %+.0f%%; background %.2f "
           "req/s\n", c->sessions, c->turns, c->isl, c->turn_tokens, c->osl,
           dist_names[c->tool_dist], c->tool_ms, r->tool_mean_ms, hint_names[c->hint],
           c->tool_error * 100, c->background_rate);
    printf("  %.1f s; turns %ld done, %ld failed; background %ld done, %ld failed\n",
           r->duration_s, r->turns_done, r->turns_failed, r->background_done,
           r->background_failed);
    print_dist("first turn TTFT", &r->first_ttft);
    print_dist("continuation TTFT", &r->next_ttft);
    print_dist("background TTFT", &r->bg_ttft);
    print_dist("background TPOT", &r->bg_tpot);
    printf("  %-26s %.1f tokens/s\n", "background throughput", r->bg_tokens_per_s);
    if (r->occupancy_samples > 0)
        printf("  %-26s mean %.2f  max %.2f  (%ld samples)\n", "KV cache occupancy",
               r->occupancy_mean, r->occupancy_max, r->occupancy_samples);
    if (r->metrics) {
        const dyb_tier_moves *m = &r->moved;
        double h = m->host_in + m->host_out, d = m->disk_in + m->disk_out;
        printf("  %-26s host in %.1f MB out %.1f MB (%.2f GB/s), disk in %.1f MB out %.1f MB"
               " (%.2f GB/s)\n", "tiers moved", m->host_in / 1e6, m->host_out / 1e6,
               m->host_seconds > 0 ? h / m->host_seconds / 1e9 : 0, m->disk_in / 1e6,
               m->disk_out / 1e6, m->disk_seconds > 0 ? d / m->disk_seconds / 1e9 : 0);
        printf("  %-26s %.0f blocks prefetched; prompts loaded %.0f, recomputed %.0f, "
               "load failed %.0f\n", "holds and loads", m->prefetched_blocks, m->loaded_prompts,
               m->recomputed_prompts, m->failed_loads);
        if (r->load_share >= 0)
            printf("  %-26s %.2f ms per loading prompt, %.1f%% of the mean continuation TTFT\n",
                   "waiting for loads", m->load_seconds * 1e3 / m->loads, r->load_share * 100);
    }
    if (r->first_error[0])
        printf("  first error: %s\n", r->first_error);
}

static void json_dist(const char *name, const dyb_dist *d, bool comma)
{
    printf("\"%s\":{\"n\":%zu,\"p50\":%.3f,\"p90\":%.3f,\"mean\":%.3f}%s", name, d->n, d->p50,
           d->p90, d->mean, comma ? "," : "");
}

static void print_json(const dyb_agentic_config *c, const dyb_agentic_report *r)
{
    const dyb_tier_moves *m = &r->moved;
    printf("{\"sessions\":%d,\"turns\":%d,\"tool_dist\":\"%s\",\"tool_ms\":%.3f,"
           "\"hint\":\"%s\",\"tool_error\":%.3f,\"background_rate\":%.3f,\"duration_s\":%.3f,"
           "\"turns_done\":%ld,\"turns_failed\":%ld,\"background_done\":%ld,"
           "\"background_failed\":%ld,", c->sessions, c->turns, dist_names[c->tool_dist],
           c->tool_ms, hint_names[c->hint], c->tool_error, c->background_rate, r->duration_s,
           r->turns_done, r->turns_failed, r->background_done, r->background_failed);
    json_dist("first_ttft_ms", &r->first_ttft, true);
    json_dist("continuation_ttft_ms", &r->next_ttft, true);
    json_dist("background_ttft_ms", &r->bg_ttft, true);
    json_dist("background_tpot_ms", &r->bg_tpot, true);
    printf("\"background_tokens_per_s\":%.3f,\"occupancy_mean\":%.4f,\"occupancy_max\":%.4f,"
           "\"load_share\":%.4f,"
           "\"moved\":{\"host_in\":%.0f,\"host_out\":%.0f,\"disk_in\":%.0f,\"disk_out\":%.0f,"
           "\"host_seconds\":%.6f,\"disk_seconds\":%.6f,\"prefetched_blocks\":%.0f,"
           "\"loaded_prompts\":%.0f,\"recomputed_prompts\":%.0f,\"failed_loads\":%.0f}}\n",
           r->bg_tokens_per_s, r->occupancy_mean, r->occupancy_max, r->load_share, m->host_in,
           m->host_out,
           m->disk_in, m->disk_out, m->host_seconds, m->disk_seconds, m->prefetched_blocks,
           m->loaded_prompts, m->recomputed_prompts, m->failed_loads);
}

int cmd_bench_agentic(int argc, char **argv)
{
    dyb_agentic_config c = {0};
    const char *model = NULL;
    int dist = 0, hint = 0;
    bool json = false;
    long vocab = 0;
    const dy_opt t[] = {
        {.name = "url", .kind = DY_OPT_STR, .dst = &c.url, .meta = "URL",
         .help = "the server (http://host:port)", .def_str = "http://127.0.0.1:8000"},
        {.name = "model", .kind = DY_OPT_STR, .dst = &model, .meta = "NAME",
         .help = "the model name sent (default: the server's first)"},
        {.name = "api-key", .kind = DY_OPT_STR, .dst = &c.api_key, .meta = "KEY",
         .help = "sent as Authorization: Bearer KEY"},
        {.name = "sessions", .kind = DY_OPT_INT, .dst = &c.sessions, .meta = "N",
         .help = "agent sessions running at once", .min = 1, .max = 100000, .def = 8},
        {.name = "turns", .kind = DY_OPT_INT, .dst = &c.turns, .meta = "N",
         .help = "model turns per session (a tool call between two)", .min = 1, .max = 999,
         .def = 4},
        {.name = "isl", .kind = DY_OPT_LONG, .dst = &c.isl, .meta = "N",
         .help = "tokens of a session's first prompt", .min = 1, .max = 1 << 20, .def = 256},
        {.name = "turn-tokens", .kind = DY_OPT_LONG, .dst = &c.turn_tokens, .meta = "N",
         .help = "tokens each tool result adds to the prompt", .min = 0, .max = 1 << 20,
         .def = 64},
        {.name = "osl", .kind = DY_OPT_LONG, .dst = &c.osl, .meta = "N",
         .help = "tokens of each answer", .min = 1, .max = 1 << 20, .def = 16},
        {.name = "tool-ms", .kind = DY_OPT_DOUBLE, .dst = &c.tool_ms, .meta = "MS",
         .help = "the tools' mean running time", .min = 0, .max = 3600000, .def = 1000},
        {.name = "tool-dist", .kind = DY_OPT_ENUM, .dst = &dist, .meta = "D",
         .help = "fixed, lognormal or pareto (heavy-tailed)", .names = dist_names, .def = 1},
        {.name = "tool-shape", .kind = DY_OPT_DOUBLE, .dst = &c.tool_sigma, .meta = "X",
         .help = "lognormal: the log's sigma; pareto: the shape alpha (> 1)", .min = 0,
         .max = 100, .def = 0.5},
        {.name = "hint", .kind = DY_OPT_ENUM, .dst = &hint, .meta = "H",
         .help = "what a turn says of the next one's time (dyad.hold): none, predicted (the "
                 "true time off by --tool-error) or oracle (the true time)",
         .names = hint_names, .def = 1},
        {.name = "tool-error", .kind = DY_OPT_DOUBLE, .dst = &c.tool_error, .meta = "F",
         .help = "predicted = true x (1 + F): below 0 too early, above 0 too late", .min = -0.99,
         .max = 100, .def = 0},
        {.name = "background-rate", .kind = DY_OPT_DOUBLE, .dst = &c.background_rate,
         .meta = "R", .help = "requests/s of unrelated traffic (Poisson) while sessions run",
         .min = 0, .max = 1e6, .def = 0},
        {.name = "background-isl", .kind = DY_OPT_LONG, .dst = &c.background_isl, .meta = "N",
         .help = "its prompt tokens", .min = 1, .max = 1 << 20, .def = 256},
        {.name = "background-osl", .kind = DY_OPT_LONG, .dst = &c.background_osl, .meta = "N",
         .help = "its answer tokens", .min = 1, .max = 1 << 20, .def = 64},
        {.name = "vocab-size", .kind = DY_OPT_LONG, .dst = &vocab, .meta = "N",
         .help = "token ids are drawn from [3, N)", .min = 4, .max = 1 << 24, .def = 32000},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &c.seed, .meta = "S",
         .help = "every random draw's seed", .def = 1},
        {.name = "timeout", .kind = DY_OPT_DOUBLE, .dst = &c.timeout_s, .meta = "S",
         .help = "per request (0: none)", .min = 0, .max = 86400, .def = 600},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &json,
         .help = "one JSON object on stdout instead of the report"},
    };
    int rc = cli_parse("bench agentic", agentic_usage, NULL, t, (int)(sizeof t / sizeof t[0]),
                       argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    c.tool_dist = (dyb_tool_dist)dist;
    c.hint = (dyb_hint)hint;
    c.vocab_size = (int)vocab;
    if (c.tool_dist == DYB_TOOL_PARETO && c.tool_sigma == 0.5)
        c.tool_sigma = 1.5; /* --tool-shape's default is lognormal's */
    char err[1024];
    if (!dyb_agentic_check(&c, err, sizeof err)) {
        fprintf(stderr, "dyad bench agentic: %s\n", err);
        return 2;
    }
    if (dyb_http_init() != 0) {
        fprintf(stderr, "dyad bench agentic: cannot set up libcurl\n");
        return 1;
    }
    char *first = NULL;
    if (!model && dyb_fetch_models(c.url, c.api_key, 10, &first, err, sizeof err) != 0) {
        fprintf(stderr, "dyad bench agentic: %s\n", err);
        dyb_http_cleanup();
        return 1;
    }
    c.body = (dyb_body_config){.model = model ? model : first, .endpoint = DYB_EP_COMPLETIONS,
                               .ignore_eos = true};
    c.stop = &g_stop;
    c.progress = isatty(STDERR_FILENO) == 1;
    signal(SIGINT, on_sigint);
    dyb_agentic_report r;
    rc = c.body.model ? dyb_agentic_run(&c, &r, err, sizeof err) : -1;
    if (!c.body.model)
        snprintf(err, sizeof err, "the server lists no models; name one with --model");
    if (rc != 0)
        fprintf(stderr, "dyad bench agentic: %s\n", err);
    else if (json)
        print_json(&c, &r);
    else
        print_report(&c, &r);
    free(first);
    dyb_http_cleanup();
    return rc != 0 ? 1 : g_stop ? 130 : r.turns_failed > 0 ? 1 : 0;
}
