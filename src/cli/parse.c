/* parse.c — see parse.h. */
#include "cli/parse.h"
#include "bench/bench_stats.h"
#include "plan/predict.h"

int cli_parse(const char *cmd, const char *usage, const char *epilog, const dy_opt *opts, int n,
              int argc, char **argv, dy_opt_positional *pos)
{
    char err[512];
    switch (dy_opts_parse(opts, n, argc, argv, pos, err, sizeof err)) {
    case DY_OPTS_OK: return CLI_GO;
    case DY_OPTS_HELP: dy_opts_help(stdout, usage, opts, n, epilog); return 0;
    case DY_OPTS_BAD: break;
    }
    fprintf(stderr, "dyad %s: %s (see dyad %s --help)\n", cmd, err, cmd);
    return 2;
}

int cli_opts_append(dy_opt *t, int n, const dy_opt *part, size_t n_part)
{
    for (size_t i = 0; i < n_part; i++)
        t[n++] = part[i];
    return n;
}

void cli_opts_track(dy_opt *t, int n, bool *seen)
{
    for (int i = 0; i < n; i++) {
        seen[i] = false;
        t[i].given = &seen[i];
    }
}

bool cli_opt_slo(void *ctx, const char *value, char *err, size_t errlen)
{
    return dyb_slo_parse(value, ctx, err, errlen) == 0;
}

bool cli_opt_predictor(void *ctx, const char *value, char *err, size_t errlen)
{
    return dy_predict_parse(value, ctx, err, errlen) == 0;
}
