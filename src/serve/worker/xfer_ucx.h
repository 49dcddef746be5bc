/* xfer_ucx.h — the UCX backend of KV transfer (xfer_ucx.c), private to xfer.c and xfer_rx.c.
 * The sender and the receiver each own a UCP context and worker; the receiver listens on
 * host:port (a ucp_listener), so the address decode workers give in HELLO stays "host:port".
 * Each block is one active message whose header is the TCP path's dy_xfer_frame; the receiver
 * checks it (dy_xfer_rx_admit) before the block's bytes are received straight into their
 * destination block. Blocks go by rendezvous, so a sent block is complete only once it is in
 * the receiver's pool, and a refusal comes back to the sender as the message's status. */
#ifndef DYAD_XFER_UCX_H
#define DYAD_XFER_UCX_H

#include <stdbool.h>
#include <stddef.h>

struct addrinfo;

/* Resolves a peer's "host:port" for stream sockets of `family` (AF_UNSPEC: any) into *out,
 * which the caller frees with freeaddrinfo; -1 with the reason in err. Both the TCP and the
 * UCX sender dial peers through it (defined in xfer.c). */
int dy_xfer_resolve(const char *hostport, int family, struct addrinfo **out, char *err,
                    size_t errlen);
#include <stdint.h>
#include "kv/kv_pool.h"
#include "serve/wire/xfer_frame.h"
#include "serve/worker/xfer.h"

/* Whether this build has the UCX backend (libucx-dev was found at configure time). */
bool dy_xfer_ucx_built(void);

/* ---------------------------------------------------------------- sender */

typedef struct dy_xfer_ucx_tx dy_xfer_ucx_tx;

/* Connects to a UCX KV receiver at "host:port"; fails within a bounded time when it cannot
 * be reached. */
dy_xfer_ucx_tx *dy_xfer_ucx_connect(const char *peer, char *err, size_t errlen);
void dy_xfer_ucx_disconnect(dy_xfer_ucx_tx *t);
/* Sends blocks[i] (bb bytes each) under hdrs[i]; returns once every block is in the
 * receiver's pool (0), or -1 with the first refusal or failure in err. */
int dy_xfer_ucx_send(dy_xfer_ucx_tx *t, const dy_xfer_frame *hdrs, const void *const *blocks,
                     int n, size_t bb, char *err, size_t errlen);

/* ---------------------------------------------------------------- receiver */

typedef struct dy_xfer_ucx_rx dy_xfer_ucx_rx;

/* Listens on host:port (0: any) with a thread of its own; blocks are admitted by
 * dy_xfer_rx_admit and reported by dy_xfer_rx_done. addr gets "host:port". */
dy_xfer_ucx_rx *dy_xfer_ucx_listen(dy_xfer_rx *rx, const char *host, int port, char *addr,
                                   size_t addrlen, char *err, size_t errlen);
void dy_xfer_ucx_stop(dy_xfer_ucx_rx *u);

/* ---------------------------------------------------------------- receiver rules (xfer_rx.c) */

typedef enum {
    DY_XFER_ADMIT_OK,
    DY_XFER_ADMIT_BAD_MAGIC,   /* not a KV frame */
    DY_XFER_ADMIT_MISMATCH,    /* another KV type or block size than this pool's */
    DY_XFER_ADMIT_UNEXPECTED,  /* a block its sequence does not expect (or already has) */
} dy_xfer_admit;

/* Checks a frame header against the receiver's pool and expectations; logs why it refuses.
 * On OK, *dst is where the block's bytes go. */
dy_xfer_admit dy_xfer_rx_admit(dy_xfer_rx *rx, const dy_xfer_frame *h, uint8_t **dst);
/* The block of h is in the pool: counts it for its sequence. */
void dy_xfer_rx_done(dy_xfer_rx *rx, const dy_xfer_frame *h);

#endif
