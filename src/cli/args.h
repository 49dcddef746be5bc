/* args.h — checked conversion of command-line values. Each returns false after printing
 * "dyad CMD: --flag: problem" to stderr, so a bad flag is a clear message and exit 2. */
#ifndef DYAD_ARGS_H
#define DYAD_ARGS_H

#include <stdbool.h>
#include <stdint.h>

bool arg_int(const char *cmd, const char *flag, const char *val, long min, long max, int *out);
bool arg_u64(const char *cmd, const char *flag, const char *val, uint64_t *out);
bool arg_float(const char *cmd, const char *flag, const char *val, double min, double max,
               float *out);
/* For "--flag VALUE": true and *val set when argv[*i] is `flag` and a value follows (then
 * *i is advanced); prints an error and sets *bad when the value is missing. */
bool arg_take(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **val,
              bool *bad);

#endif
