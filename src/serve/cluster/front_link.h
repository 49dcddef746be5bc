/* front_link.h — `dyad serve --cluster nats://HOST:PORT`: a frontend whose workers are the
 * ones registered on NATS (docs/cluster.md). A watcher thread follows the registry
 * (registry.h). For each worker that registers with this frontend's model, block size and KV
 * type, it asks the worker's HELLO, makes a socket pair, gives one end to the fleet
 * (dy_fleet_attach, serve/front/fleet.h) and carries the other over NATS: what the fleet
 * writes goes to dyad.w.<key>.in with this frontend's inbox for that worker as the reply
 * subject; what comes on that inbox and on dyad.w.<key>.out is written back. Every frame is
 * checked where it comes in (frames.h). A worker is let go — its slot sees the end of its
 * stream, as a death, and the fleet runs its sequences elsewhere or ends them — when its entry
 * is deleted, when it has not been renewed for its lease, when it registers again as a new
 * incarnation (a new process, or one that reconnected to NATS), when NATS answers a frame
 * sent to it "no responders", and when this frontend's own connection to NATS broke and came
 * back: core NATS delivers at most once, so frames may have been lost either way; a worker
 * let go for these last two is attached again at its next renewal. A worker that differs
 * from the frontend's model is refused with one log line per process. */
#ifndef DYAD_CLUSTER_FRONT_LINK_H
#define DYAD_CLUSTER_FRONT_LINK_H

#include <stddef.h>
#include <stdint.h>
#include "serve/front/fleet.h"

typedef struct {
    const char *url;          /* --cluster */
    double timeout_s;         /* connecting: give up after this long */
    uint32_t frontend_id;     /* names this frontend's inboxes (dyad.f.<id>.<worker key>) */
    /* What every worker must have to be used: */
    uint64_t fingerprint;     /* the model's */
    uint32_t block_size;
    int kv_type;              /* dy_kv_type */
    int xfer;                 /* dy_xfer_kind that decode workers must receive KV over */
} dy_front_link_opts;

typedef struct dy_front_link dy_front_link;

/* Connects and starts watching; workers already registered are attached within a moment.
 * NULL with the reason in err. */
dy_front_link *dy_front_link_start(const dy_front_link_opts *o, dy_fleet *fleet, char *err,
                                   size_t errlen);
/* Stops watching, lets every worker go and closes the connection. Call after dy_fleet_stop. */
void dy_front_link_stop(dy_front_link *l);

#endif
