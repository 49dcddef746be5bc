/* reqlog.h — the request log of `dyad serve --request-log PATH`: one JSON object a line for
 * every request the server answered (or refused), with where it ran and what its KV transfer
 * cost, for offline analysis (docs/serving.md "Request log"). Owns the file; lines from many
 * HTTP threads never interleave. */
#ifndef DYAD_REQLOG_H
#define DYAD_REQLOG_H

#include <jansson.h>
#include <stddef.h>

typedef struct dy_reqlog dy_reqlog;

/* Opens PATH for appending ("-": standard error). NULL and a message naming the path on
 * failure. */
dy_reqlog *dy_reqlog_open(const char *path, char *err, size_t errlen);
/* Closes the file (standard error is left open). NULL is fine. */
void dy_reqlog_close(dy_reqlog *l);
/* Writes the entry as one line, a "time" field (UTC, ms) put first, and takes the entry's
 * reference. A NULL log or entry writes nothing (a caller passes the NULL of an entry it
 * could not build whole), and so does a line that runs out of memory. */
void dy_reqlog_write(dy_reqlog *l, json_t *entry);

#endif
