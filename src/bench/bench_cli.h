/* bench_cli.h — the options of `dyad bench` (serving benchmark): parsing with range checks,
 * the rules that tie options together, and the --help text. Prints its own messages
 * ("dyad bench: --flag: problem") to stderr. */
#ifndef DYAD_BENCH_CLI_H
#define DYAD_BENCH_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "bench/bench_client.h"
#include "bench/bench_report.h"
#include "bench/bench_stats.h"
#include "bench/bench_workload.h"
#include "util/opts.h"

#define DYB_MAX_SWEEP 64

typedef enum { DYB_SWEEP_NONE, DYB_SWEEP_CONCURRENCY, DYB_SWEEP_RATE } dyb_sweep_kind;

typedef struct {
    /* target */
    const char *url, *model, *api_key;
    dyb_endpoint endpoint;
    bool text_prompt, ignore_eos;
    const char *response_format; /* --response-format FILE, or NULL */
    double timeout_s;
    /* load */
    long concurrency;       /* 0: not given */
    double rate;            /* 0: not given (closed loop or trace times) */
    double burstiness;
    long requests;          /* -1: no count bound */
    double duration_s;      /* 0: no time bound */
    long warmup;
    /* workload (also holds --seed) */
    dyb_workload_config wl;
    /* metrics */
    dyb_slo slo;
    long cores;
    /* sweep */
    dyb_sweep_kind sweep;
    double sweep_values[DYB_MAX_SWEEP];
    int n_sweep;
    /* output */
    const char *csv, *plot;
    bool json;
} dyb_opts;

/* The load of sweep point i (a sweep value replaces the option it sweeps) into p's mode,
 * concurrency, rate, burstiness, sweep fields and label. A timed trace is replayed at its
 * times unless a rate is given, and a concurrency then only caps the requests in flight; with
 * neither a rate nor trace times it is a closed loop of at least one client. Returns whether
 * the trace's times drive it. */
bool dyb_point_load(dyb_point *p, const dyb_workload *wl, long concurrency, double rate,
                    double burstiness, dyb_sweep_kind sweep, const double *sweep_values, int i);

/* --sweep's value, "concurrency=1,2,4" or "rate=0.5,1,2": its kind and up to DYB_MAX_SWEEP
 * values. false with a message in err on anything else. */
bool dyb_sweep_parse(const char *text, dyb_sweep_kind *kind, double *values, int *n, char *err,
                     size_t errlen);

/* Returns 0 (run), 1 (--help was printed: exit 0) or 2 (usage error, already reported). */
int dyb_opts_parse(int argc, char **argv, dyb_opts *o);

/* The workload's options (--isl ... --skip-bad-lines), storing into w, written to out (room for
 * DYB_WORKLOAD_OPTS; the first opens the "Workload" section): every command that generates
 * bench's workload (dyad bench, dyad sim run) takes them from here. Returns how many. */
#define DYB_WORKLOAD_OPTS 14
int dyb_workload_opts(dyb_workload_config *w, dy_opt *out);

/* bench's rules between its workload and load options (a table and a trace exclude fixed
 * lengths, prefix groups need a length, ...), for every command that takes them (dyad bench,
 * dyad sim run). rate: an open loop (--rate or a rate sweep) was asked for. */
bool dyb_check_workload_opts(dy_opts_given g, const dyb_workload_config *w, bool rate,
                             dyb_sweep_kind sweep);

#endif
