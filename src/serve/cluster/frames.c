/* frames.c — checking the frames that cross NATS, and the ids that route them (frames.h). */
#include "serve/cluster/frames.h"

#include <stdio.h>
#include <string.h>

static bool travels(dy_msg_type t, dy_frame_dir dir)
{
    switch (t) {
    case DY_MSG_REQUEST: case DY_MSG_CANCEL: case DY_MSG_SHUTDOWN: case DY_MSG_PREFILL:
    case DY_MSG_KV_READY: case DY_MSG_KV_RESYNC: case DY_MSG_ROLE: case DY_MSG_PEER_GONE:
    case DY_MSG_HOLD:
        return dir == DY_TO_WORKER;
    case DY_MSG_HELLO: case DY_MSG_TOKEN: case DY_MSG_DONE: case DY_MSG_STATS:
    case DY_MSG_KV_ALLOC: case DY_MSG_PREFILL_DONE: case DY_MSG_KV_EVENTS:
    case DY_MSG_KV_SNAPSHOT:
        return dir == DY_TO_FRONTEND;
    }
    return false;
}

bool dy_cluster_frame_check(const void *data, size_t len, dy_frame_dir dir, dy_msg_type *type,
                            char *err, size_t errlen)
{
    const uint8_t *p = data;
    uint32_t n;
    if (len < DY_WIRE_HEADER) {
        snprintf(err, errlen, "a message of %zu bytes is shorter than a frame header", len);
        return false;
    }
    if (!dy_wire_header(p, type, &n, err, errlen))
        return false;
    if ((size_t)n != len - DY_WIRE_HEADER) {
        snprintf(err, errlen, "a frame of %u payload bytes in a message of %zu", n, len);
        return false;
    }
    if (!travels(*type, dir)) {
        snprintf(err, errlen, "a frame of type %d does not travel to the %s", (int)*type,
                 dir == DY_TO_WORKER ? "worker" : "frontend");
        return false;
    }
    return dy_wire_check_payload(*type, p + DY_WIRE_HEADER, n, err, errlen);
}

void dy_cluster_frame_ids(const void *frame, size_t len, uint64_t *first, uint32_t *n)
{
    const uint8_t *p = (const uint8_t *)frame + DY_WIRE_HEADER;
    const size_t plen = len >= DY_WIRE_HEADER ? len - DY_WIRE_HEADER : 0;
    dy_msg_type t;
    uint32_t l;
    char err[128];
    *first = 0;
    *n = 0;
    if (len < DY_WIRE_HEADER || !dy_wire_header(frame, &t, &l, err, sizeof err))
        return;
    /* Each type's own decoder, so the wire layout is known in wire.c alone. */
    switch (t) {
    case DY_MSG_REQUEST: {
        dy_msg_request m;
        if (dy_wire_decode_request(p, plen, &m, err, sizeof err)) {
            *first = m.id;
            *n = m.n_samples;
        }
        dy_msg_request_free(&m);
        return;
    }
    case DY_MSG_PREFILL: {
        dy_msg_prefill m;
        if (dy_wire_decode_prefill(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        dy_msg_prefill_free(&m);
        return;
    }
    case DY_MSG_KV_ALLOC: {
        dy_msg_kv_alloc m;
        if (dy_wire_decode_kv_alloc(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        dy_msg_kv_alloc_free(&m);
        return;
    }
    case DY_MSG_CANCEL: {
        dy_msg_cancel m;
        if (dy_wire_decode_cancel(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        return;
    }
    case DY_MSG_KV_READY: {
        dy_msg_kv_ready m;
        if (dy_wire_decode_kv_ready(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        return;
    }
    case DY_MSG_TOKEN: {
        dy_msg_token m;
        if (dy_wire_decode_token(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        return;
    }
    case DY_MSG_DONE: {
        dy_msg_done m;
        if (dy_wire_decode_done(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        return;
    }
    case DY_MSG_PREFILL_DONE: {
        dy_msg_prefill_done m;
        if (dy_wire_decode_prefill_done(p, plen, &m, err, sizeof err))
            *first = m.id, *n = 1;
        return;
    }
    default:
        return;
    }
}

bool dy_cluster_frame_refused(dy_msg_type type)
{
    return type == DY_MSG_SHUTDOWN || type == DY_MSG_ROLE;
}
