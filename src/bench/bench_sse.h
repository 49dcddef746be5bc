/* bench_sse.h — an incremental parser of Server-Sent Events (the WHATWG event-stream format)
 * as OpenAI-compatible servers stream them: "data: {...}" lines, a blank line ending each
 * event, ":" comment lines (keep-alives), other fields (event:, id:, retry:), and LF, CRLF or
 * CR line ends. Bytes may arrive split anywhere, even between a CR and its LF; the parser
 * keeps the partial line. Pure: no I/O, no clocks. */
#ifndef DYAD_BENCH_SSE_H
#define DYAD_BENCH_SSE_H

#include "util/buf.h"

#include <stdbool.h>
#include <stddef.h>

/* One event: its data lines joined with '\n' (NUL-terminated; len excludes the NUL) and its
 * event type ("message" unless an event: field said otherwise). */
typedef void (*dyb_sse_cb)(void *user, const char *event, const char *data, size_t len);

typedef struct {
    dy_buf line;         /* the current, unfinished line */
    dy_buf data;         /* data lines of the current event */
    bool has_data;       /* a data field was seen (an empty one counts) */
    char event[32];
    bool after_cr;       /* the last byte was CR: a following LF belongs to the same line end */
    size_t max_bytes;    /* a line or an event longer than this is an error */
} dyb_sse;

void dyb_sse_init(dyb_sse *p, size_t max_bytes);
/* Feeds bytes; calls cb for every complete event. Returns 0, or -1 when a line or an event
 * grows past max_bytes or memory runs out (the stream should be dropped then). */
int dyb_sse_feed(dyb_sse *p, const char *buf, size_t n, dyb_sse_cb cb, void *user);
/* End of stream: a final event not followed by a blank line is still delivered. */
void dyb_sse_finish(dyb_sse *p, dyb_sse_cb cb, void *user);
void dyb_sse_free(dyb_sse *p);

#endif
