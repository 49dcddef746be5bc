/* frames.h — the wire frames (serve/wire/wire.h) as cluster mode carries them over NATS: one
 * whole frame per NATS message, checked where it comes in (header, length, the type's own
 * decoder, and whether that type may travel that way), and the request ids that decide where
 * a worker's answer goes. Pure: no NATS here; the fuzz target fuzz/fuzz_cluster.c feeds it. */
#ifndef DYAD_CLUSTER_FRAMES_H
#define DYAD_CLUSTER_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "serve/wire/wire.h"

typedef enum {
    DY_TO_WORKER = 0,   /* REQUEST, CANCEL, PREFILL, KV_READY, KV_RESYNC, PEER_GONE, HOLD,
                         * and SHUTDOWN and ROLE (which a cluster worker refuses: see
                         * dy_cluster_frame_refused) */
    DY_TO_FRONTEND = 1, /* HELLO, TOKEN, DONE, STATS, KV_ALLOC, PREFILL_DONE, KV_EVENTS,
                         * KV_SNAPSHOT */
} dy_frame_dir;

/* Whether data[0..len) is exactly one valid frame of a type that travels in direction dir;
 * its type in *type. false with the reason in err. */
bool dy_cluster_frame_check(const void *data, size_t len, dy_frame_dir dir, dy_msg_type *type,
                            char *err, size_t errlen);

/* The request ids a checked frame names: REQUEST its samples' [id, id + n_samples); CANCEL,
 * PREFILL, KV_READY, TOKEN, DONE, KV_ALLOC, PREFILL_DONE their one id; other types none
 * (*n = 0). */
void dy_cluster_frame_ids(const void *frame, size_t len, uint64_t *first, uint32_t *n);

/* A frame no frontend may send a worker of the cluster: its process and its role belong to
 * the host it runs on (its operator, or the node agent), not to one of several frontends. */
bool dy_cluster_frame_refused(dy_msg_type type);

#endif
