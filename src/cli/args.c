/* args.c — see args.h. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool arg_int(const char *cmd, const char *flag, const char *val, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < min || v > max) {
        fprintf(stderr, "dyad %s: %s: '%s' is not an integer in [%ld, %ld]\n", cmd, flag, val,
                min, max);
        return false;
    }
    *out = (int)v;
    return true;
}

bool arg_u64(const char *cmd, const char *flag, const char *val, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno || end == val || *end || val[0] == '-') {
        fprintf(stderr, "dyad %s: %s: '%s' is not a non-negative integer\n", cmd, flag, val);
        return false;
    }
    *out = v;
    return true;
}

bool arg_float(const char *cmd, const char *flag, const char *val, double min, double max,
               float *out)
{
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "dyad %s: %s: '%s' is not a number in [%g, %g]\n", cmd, flag, val, min,
                max);
        return false;
    }
    *out = (float)v;
    return true;
}

bool arg_take(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **val,
              bool *bad)
{
    if (strcmp(argv[*i], flag) != 0)
        return false;
    if (*i + 1 >= argc) {
        fprintf(stderr, "dyad %s: %s needs a value\n", cmd, flag);
        *bad = true;
        return false;
    }
    *val = argv[++*i];
    return true;
}
