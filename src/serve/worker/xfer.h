/* xfer.h — moving KV blocks from a prefill worker's pool into a decode worker's pool. A block
 * (every layer's keys and values for block_size positions) is one contiguous byte range in
 * both pools, so a transfer is a list of (source block, destination block) copies.
 *
 * Three backends:
 *  - shared memory (one host, the default): the decode worker's pool lives in a named POSIX
 *    shared-memory object; the prefill worker maps it and copies each block straight into
 *    its destination — one copy, no socket in the data path.
 *  - TCP (between hosts): the decode worker runs a receiver thread on a port; the prefill
 *    worker streams framed blocks, which the receiver reads directly into the destination
 *    blocks. The receiver only accepts blocks it was told to expect for that sequence, so a
 *    confused or hostile peer cannot overwrite blocks in use.
 *  - UCX (between hosts, xfer_ucx.h): the same frames as active messages over UCX's
 *    transports (tcp and shared memory, RDMA where the hardware has it); the receiver checks
 *    each header by the same rules before UCX moves the block's bytes into place, and a send
 *    returns once its blocks are in the peer's pool or the peer refused them (named in err).
 *    Built only where libucx-dev was found; TCP is the fallback.
 * Every transfer reports its bytes and duration. */
#ifndef DYAD_XFER_H
#define DYAD_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kv/kv_pool.h"
#include "serve/wire/wire.h"

/* ---------------------------------------------------------------- sender (prefill worker) */

typedef struct dy_xfer_peer dy_xfer_peer;

/* Opens (maps or connects to) a decode worker's pool, to send it blocks of type `type` of
 * block_bytes bytes. A shared-memory pool of another type or block size is refused here, with
 * both named in err; a TCP receiver refuses such blocks when they arrive (and says so). */
dy_xfer_peer *dy_xfer_open(dy_xfer_kind kind, const char *peer, dy_kv_type type,
                           size_t block_bytes, char *err, size_t errlen);
void dy_xfer_close(dy_xfer_peer *p);
/* Copies n blocks: src pool block src[i] → the peer's block dst[i]. *bytes gets the bytes
 * moved. -1 with a message on failure (the peer then needs reopening). */
int dy_xfer_send(dy_xfer_peer *p, uint64_t seq_id, const dy_kv_pool *src, const int32_t *src_ids,
                 const int32_t *dst_ids, int n, uint64_t *bytes, char *err, size_t errlen);
const char *dy_xfer_peer_name(const dy_xfer_peer *p);
/* false, with why in err, when this build cannot move KV over kind (UCX without libucx). */
bool dy_xfer_kind_available(dy_xfer_kind kind, char *err, size_t errlen);
/* Bytes of the peer's pool mapped into this process (0 over TCP). */
size_t dy_xfer_peer_mapped_bytes(const dy_xfer_peer *p);

/* ---------------------------------------------------------------- receiver (decode worker) */

typedef struct dy_xfer_rx dy_xfer_rx;

/* Listens on host:port (port 0 picks one) for blocks sent over kind (DY_XFER_TCP or
 * DY_XFER_UCX) and writes them into pool. */
dy_xfer_rx *dy_xfer_rx_start(dy_xfer_kind kind, dy_kv_pool *pool, const char *host, int port,
                             char *err, size_t errlen);
void dy_xfer_rx_stop(dy_xfer_rx *rx);
/* "host:port" as peers should dial it. */
const char *dy_xfer_rx_addr(const dy_xfer_rx *rx);
/* Allows these blocks to be written for seq_id (before the prefill is requested). */
void dy_xfer_rx_expect(dy_xfer_rx *rx, uint64_t seq_id, const int32_t *blocks, int n);
/* Blocks received so far for seq_id (they are in the pool). */
int dy_xfer_rx_received(dy_xfer_rx *rx, uint64_t seq_id);
/* Forgets seq_id (its transfer finished or was abandoned); later blocks for it are refused. */
void dy_xfer_rx_forget(dy_xfer_rx *rx, uint64_t seq_id);

#endif
