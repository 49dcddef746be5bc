/* cmd_sim.c — `dyad sim`: the simulator's tools (`dyad sim run` is cmd_sim_run.c, `dyad sim
 * bench` cmd_sim_bench.c). `dyad sim
 * fit` writes a measured cost model of this machine (sim/cost.h, docs/sim-costs.md): it runs
 * this binary's `dyad bench engine --json` and `dyad bench xfer --json` (or reads their output
 * from files given), fits the step time by least squares and saves the model as JSON. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "sim/cost.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char sim_usage[] = "usage: dyad sim run|fit|bench [options]\n";
static const char fit_usage[] =
    "usage: dyad sim fit -o OUT.json [--model PATH] [--threads N] [--kv-mem MiB] [options]\n"
    "Measures this machine (dyad bench engine --json, dyad bench xfer --json) and writes the\n"
    "measured cost model the simulator prices steps with (docs/sim-costs.md).\n";

typedef struct {
    const char *out, *model, *engine_json, *xfer_json, *serve_json, *name;
    int threads, kv_mem_mib, reps, backend;
    bool quick;
} fit_opts;

static const char *const backends[] = {"shm", "tcp", "ucx", NULL};

/* Runs `dyad ARGS...` (this binary) with its stdout in the file `path`; its stderr stays ours.
 * 0 when it exited 0. */
static int run_self(char *const args[], const char *path, char *err, size_t errlen)
{
    char exe[PATH_MAX];
    if (!dyad_self_exe(exe, sizeof exe)) {
        snprintf(err, errlen, "cannot find its own executable");
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, STDOUT_FILENO);
        execv(exe, args);
        _exit(127);
    }
    close(fd);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "`dyad %s %s` failed (see its message above)", args[1], args[2]);
        return -1;
    }
    return 0;
}

/* A temporary file's name in $TMPDIR (or /tmp), created empty. */
static bool temp_path(char *out, size_t cap, const char *what)
{
    const char *dir = getenv("TMPDIR");
    snprintf(out, cap, "%s/dyad-sim-fit-%s-XXXXXX", dir && *dir ? dir : "/tmp", what);
    int fd = mkstemp(out);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

static int measure_engine(const fit_opts *o, const char *path, char *err, size_t errlen)
{
    char threads[16], reps[16];
    snprintf(threads, sizeof threads, "%d", o->threads);
    snprintf(reps, sizeof reps, "%d", o->reps);
    char *args[12] = {"dyad", "bench", "engine", "--json", "--threads", threads, "--reps", reps};
    int a = 8;
    if (o->model) {
        args[a++] = "--model";
        args[a++] = (char *)o->model;
    }
    if (o->quick)
        args[a++] = "--quick";
    args[a] = NULL;
    return run_self(args, path, err, errlen);
}

static int measure_xfer(const fit_opts *o, const char *path, char *err, size_t errlen)
{
    char reps[16];
    snprintf(reps, sizeof reps, "%d", o->reps);
    char *args[] = {"dyad", "bench", "xfer", "--json", "--reps", reps,
                    "--mib", o->quick ? "16" : "256", NULL};
    return run_self(args, path, err, errlen);
}

/* Where the fitted figures come from, as the cost model's "source" records it. */
static void describe_source(const fit_opts *o, char *out, size_t cap)
{
    char when[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%MZ", &tm);
    if (o->engine_json)
        snprintf(out, cap, "fitted by `dyad sim fit` from %s (%s)", o->engine_json, when);
    else
        snprintf(out, cap, "fitted by `dyad sim fit` from `dyad bench engine --json --threads %d "
                 "--reps %d%s%s%s` on this machine (%s)", o->threads, o->reps,
                 o->model ? " --model " : "", o->model ? o->model : "", o->quick ? " --quick" : "",
                 when);
    size_t len = strlen(out);
    if (o->serve_json && len < cap)
        snprintf(out + len, cap - len, "; token_overhead_ms from the real run in %s",
                 o->serve_json);
}

static int fit(int argc, char **argv)
{
    fit_opts o = {0};
    const dy_opt t[] = {
        {.name = "out", .short_name = 'o', .kind = DY_OPT_STR, .dst = &o.out, .meta = "FILE",
         .help = "where the cost model goes (required)"},
        {.name = "model", .kind = DY_OPT_STR, .dst = &o.model, .meta = "PATH",
         .help = "the model to measure", .shown_default = "the bundled stories260K"},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o.threads, .meta = "N",
         .help = "engine threads per worker (as `dyad serve --threads-per-worker`)", .min = 1,
         .max = 256, .def = 1},
        {.name = "kv-mem", .kind = DY_OPT_INT, .dst = &o.kv_mem_mib, .meta = "MiB",
         .help = "KV memory per worker (as `dyad serve --kv-mem`): the modelled KV capacity",
         .min = 1, .max = 1 << 20, .def = 256},
        {.name = "backend", .kind = DY_OPT_ENUM, .dst = &o.backend, .meta = "shm|tcp|ucx",
         .help = "the KV transfer backend whose rate the model uses", .names = backends},
        {.name = "reps", .kind = DY_OPT_INT, .dst = &o.reps, .meta = "N",
         .help = "repetitions per benchmark figure (the minimum is kept)", .min = 1, .max = 1000,
         .def = 3},
        {.name = "quick", .kind = DY_OPT_FLAG, .dst = &o.quick,
         .help = "fewer benchmark points and a small transfer (smoke tests)"},
        {.name = "engine-json", .kind = DY_OPT_STR, .dst = &o.engine_json, .meta = "FILE",
         .help = "fit from this `dyad bench engine --json` output instead of measuring"},
        {.name = "xfer-json", .kind = DY_OPT_STR, .dst = &o.xfer_json, .meta = "FILE",
         .help = "take the link from this `dyad bench xfer --json` output instead of measuring"},
        {.name = "serve-json", .kind = DY_OPT_STR, .dst = &o.serve_json, .meta = "FILE",
         .help = "also price what a token costs outside the engine step, from this `dyad bench "
                 "--json` report of `dyad serve --workers 1` on the model at --concurrency 1 "
                 "with fixed --isl/--osl (engine.token_overhead_ms)"},
        {.name = "name", .kind = DY_OPT_STR, .dst = &o.name, .meta = "NAME",
         .help = "the cost model's name", .shown_default = "MODEL-Nt"},
    };
    int rc = cli_parse("sim fit", fit_usage, NULL, t, (int)(sizeof t / sizeof t[0]), argc, argv,
                       NULL);
    if (rc != CLI_GO)
        return rc;
    if (!o.out) {
        fprintf(stderr, "dyad sim fit: -o/--out: required (see dyad sim fit --help)\n");
        return 2;
    }
    char err[1024] = "", engine_tmp[PATH_MAX] = "", xfer_tmp[PATH_MAX] = "";
    const char *engine = o.engine_json, *xfer = o.xfer_json;
    rc = 1;
    if (!engine && (!temp_path(engine_tmp, sizeof engine_tmp, "engine") ||
                    measure_engine(&o, engine = engine_tmp, err, sizeof err) != 0))
        goto out;
    if (!xfer && (!temp_path(xfer_tmp, sizeof xfer_tmp, "xfer") ||
                  measure_xfer(&o, xfer = xfer_tmp, err, sizeof err) != 0))
        goto out;
    char source[1024];
    describe_source(&o, source, sizeof source);
    dy_cost_fit_opts fo = {.name = o.name, .source = source,
                           .kv_mem_bytes = (int64_t)o.kv_mem_mib << 20,
                           .xfer_backend = backends[o.backend]};
    if (dy_cost_read_xfer(xfer, fo.xfer_backend, &fo.xfer_gbps, &fo.xfer_latency_us, err,
                          sizeof err) != 0)
        goto out;
    dy_cost_model *m = dy_cost_fit(engine, &fo, err, sizeof err);
    if (m && o.serve_json && dy_cost_set_token_overhead(m, o.serve_json, err, sizeof err) < 0) {
        dy_cost_free(m);
        m = NULL;
    }
    if (m && dy_cost_save(m, o.out, err, sizeof err) == 0)
        rc = 0;
    dy_cost_free(m);
out:
    if (rc != 0)
        fprintf(stderr, "dyad sim fit: %s\n", err[0] ? err : "cannot create a temporary file");
    if (engine_tmp[0])
        unlink(engine_tmp);
    if (xfer_tmp[0])
        unlink(xfer_tmp);
    return rc;
}

int cmd_sim(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "fit"))
        return fit(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "run"))
        return cmd_sim_run(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "bench"))
        return cmd_sim_bench(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(sim_usage, stdout);
        fputs("  run    simulate a deployment under a workload (dyad sim run --help)\n", stdout);
        fputs("  fit    write a measured cost model of this machine (dyad sim fit --help)\n",
              stdout);
        fputs("  bench  the simulator's speed on a trace replay (dyad sim bench --help)\n",
              stdout);
        return 0;
    }
    fprintf(stderr, "%sdyad sim: %s\n", sim_usage,
            argc < 2 ? "which tool? (run, fit, bench)" : "unknown tool (run, fit, bench)");
    return 2;
}
