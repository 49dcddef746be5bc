/* json_err.c — see json_err.h. */
#include "util/json_err.h"

#include <stdio.h>

void dy_json_load_error(char *err, size_t errlen, const char *path, int line, const char *text)
{
    if (line > 0)
        snprintf(err, errlen, "%s: line %d: %s", path, line, text);
    else
        snprintf(err, errlen, "%s: %s", path, text);
}
