/* end.c — the names of dy_end (see end.h). */
#include "serve/wire/end.h"

const char *dy_end_name(dy_end e)
{
    static const char *const names[DY_END_N] = {
        [DY_END_NONE] = "none",           [DY_END_STOP] = "stop",
        [DY_END_LENGTH] = "length",       [DY_END_CANCELLED] = "cancelled",
        [DY_END_ERROR] = "error",         [DY_END_REJECTED] = "rejected",
    };
    return (unsigned)e < DY_END_N ? names[e] : "none";
}
