/* parse.h — how every `dyad` command reads its options: its table (util/opts.h), parsed,
 * with --help printed to stdout and a bad option reported as "dyad CMD: --flag: problem". */
#ifndef DYAD_CLI_PARSE_H
#define DYAD_CLI_PARSE_H

#include "util/opts.h"

#define CLI_GO (-1) /* parsed: the command runs */

/* CLI_GO, or the exit status: 0 after --help, 2 after a usage error (already reported). */
int cli_parse(const char *cmd, const char *usage, const char *epilog, const dy_opt *opts, int n,
              int argc, char **argv, dy_opt_positional *pos);

/* Copies n_part entries onto the end of a table of n; returns the new length (the caller sizes
 * the table). */
int cli_opts_append(dy_opt *t, int n, const dy_opt *part, size_t n_part);
/* Points every entry's `given` at its own cleared flag in seen (n of them), for
 * dy_opts_was_given and the other checks of util/opts.h. */
void cli_opts_track(dy_opt *t, int n, bool *seen);

/* DY_OPT_CALL readers of values several commands take (ctx is where the value goes):
 * --slo "ttft_ms=X,itl_ms=Y" into a dyb_slo (bench/bench_stats.h), and a load predictor
 * "kalman[:Q,R]", ... into a dy_predict_config (plan/predict.h). */
bool cli_opt_slo(void *ctx, const char *value, char *err, size_t errlen);
bool cli_opt_predictor(void *ctx, const char *value, char *err, size_t errlen);

#endif
