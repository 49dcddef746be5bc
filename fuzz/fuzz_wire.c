/* fuzz_wire.c — libFuzzer target for the frontend↔worker frame decoders: the input is a byte
 * stream cut into frames exactly as a socket reader would, and every frame goes through the
 * decoder of its type. Decoders must accept or reject, never crash or over-read.
 *   ./build-fuzz/fuzz_wire -max_total_time=600 build-fuzz/corpus-wire fuzz/corpus-wire */
#include "serve/wire/wire.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    size_t pos = 0;
    while (size - pos >= DY_WIRE_HEADER) {
        dy_msg_type t;
        uint32_t len;
        if (!dy_wire_header(data + pos, &t, &len, err, sizeof err) ||
            len > size - pos - DY_WIRE_HEADER)
            return 0;
        const uint8_t *p = data + pos + DY_WIRE_HEADER;
        union {
            dy_msg_hello h;
            dy_msg_request r;
            dy_msg_cancel c;
            dy_msg_token t;
            dy_msg_done d;
            dy_msg_stats s;
            dy_msg_kv_alloc ka;
            dy_msg_prefill pf;
            dy_msg_prefill_done pd;
            dy_msg_kv_ready kr;
            dy_msg_kv_events ke;
            dy_msg_kv_snapshot ks;
            dy_msg_kv_resync rs;
            dy_msg_role ro;
            dy_msg_peer_gone pg;
            dy_msg_hold ho;
        } m;
        memset(&m, 0, sizeof m);
        switch (t) {
        case DY_MSG_HELLO: dy_wire_decode_hello(p, len, &m.h, err, sizeof err); break;
        case DY_MSG_REQUEST:
            dy_wire_decode_request(p, len, &m.r, err, sizeof err);
            dy_msg_request_free(&m.r);
            break;
        case DY_MSG_CANCEL: dy_wire_decode_cancel(p, len, &m.c, err, sizeof err); break;
        case DY_MSG_TOKEN: dy_wire_decode_token(p, len, &m.t, err, sizeof err); break;
        case DY_MSG_DONE: dy_wire_decode_done(p, len, &m.d, err, sizeof err); break;
        case DY_MSG_STATS: dy_wire_decode_stats(p, len, &m.s, err, sizeof err); break;
        case DY_MSG_SHUTDOWN: break;
        case DY_MSG_KV_ALLOC:
            dy_wire_decode_kv_alloc(p, len, &m.ka, err, sizeof err);
            dy_msg_kv_alloc_free(&m.ka);
            break;
        case DY_MSG_PREFILL:
            dy_wire_decode_prefill(p, len, &m.pf, err, sizeof err);
            dy_msg_prefill_free(&m.pf);
            break;
        case DY_MSG_PREFILL_DONE: dy_wire_decode_prefill_done(p, len, &m.pd, err, sizeof err); break;
        case DY_MSG_KV_READY: dy_wire_decode_kv_ready(p, len, &m.kr, err, sizeof err); break;
        case DY_MSG_KV_EVENTS:
            dy_wire_decode_kv_events(p, len, &m.ke, err, sizeof err);
            dy_msg_kv_events_free(&m.ke);
            break;
        case DY_MSG_KV_SNAPSHOT:
            dy_wire_decode_kv_snapshot(p, len, &m.ks, err, sizeof err);
            dy_msg_kv_snapshot_free(&m.ks);
            break;
        case DY_MSG_KV_RESYNC: dy_wire_decode_kv_resync(p, len, &m.rs, err, sizeof err); break;
        case DY_MSG_ROLE: dy_wire_decode_role(p, len, &m.ro, err, sizeof err); break;
        case DY_MSG_PEER_GONE: dy_wire_decode_peer_gone(p, len, &m.pg, err, sizeof err); break;
        case DY_MSG_HOLD: dy_wire_decode_hold(p, len, &m.ho, err, sizeof err); break;
        }
        pos += DY_WIRE_HEADER + len;
    }
    return 0;
}
