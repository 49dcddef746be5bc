/* xfer.c — the sending side of KV transfer (see xfer.h): map a peer's shared-memory pool and
 * copy, stream framed blocks over TCP, or hand them to UCX (xfer_ucx.c). */
#include "serve/worker/xfer.h"
#include "serve/wire/xfer_frame.h"
#include "serve/worker/xfer_ucx.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it (pages then fault in) */
#endif

struct dy_xfer_peer {
    dy_xfer_kind kind;
    char name[DY_WIRE_MAX_PEER + 1];
    dy_kv_type type;
    size_t block_bytes;
    /* shm */
    uint8_t *map;
    size_t map_size;
    pthread_t populator;
    bool populating;   /* the populator thread was started (joined before unmapping) */
    atomic_bool stop;  /* tells the populator to quit early (the peer is being closed) */
    /* tcp */
    int fd;
    /* ucx */
    dy_xfer_ucx_tx *ucx;
};

/* Maps every page of the peer's pool into this process, a chunk at a time, beside the
 * transfers. The decode worker allocated the pages when it made the pool; without this the
 * first copy into each page takes a fault, which costs most of the copy's time, and mapping it
 * all up front (MAP_POPULATE) would land on the first request's clock
 * (docs/disaggregation-results.md, "Transfer cost"). */
static void *populate_map(void *arg)
{
    dy_xfer_peer *p = arg;
    const size_t chunk = (size_t)64 << 20;
    for (size_t off = 0; off < p->map_size && !atomic_load(&p->stop); off += chunk) {
        size_t n = p->map_size - off < chunk ? p->map_size - off : chunk;
        if (madvise(p->map + off, n, MADV_POPULATE_WRITE) != 0)
            break;
    }
    return NULL;
}

static int open_shm(dy_xfer_peer *p, char *err, size_t errlen)
{
    int fd = shm_open(p->name, O_RDWR | O_CLOEXEC, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "shared memory '%s': %s", p->name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    dy_kv_shm_desc d;
    char why[128];
    if (!dy_kv_shm_read_desc(fd, (size_t)st.st_size, &d, why, sizeof why)) {
        snprintf(err, errlen, "shared memory '%s': %s", p->name, why);
        close(fd);
        return -1;
    }
    if (d.type != (uint32_t)p->type || d.block_bytes != p->block_bytes) {
        snprintf(err, errlen, "shared memory '%s' holds %s KV blocks of %llu bytes; this worker's "
                 "are %s blocks of %zu bytes (every worker of a deployment needs the same "
                 "--kv-type and --block-size)", p->name, dy_kv_type_name((dy_kv_type)d.type),
                 (unsigned long long)d.block_bytes, dy_kv_type_name(p->type), p->block_bytes);
        close(fd);
        return -1;
    }
    p->map_size = (size_t)(d.n_blocks * d.block_bytes); /* the blocks, not the descriptor */
    void *m = mmap(NULL, p->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "mapping '%s': %s", p->name, strerror(errno));
        return -1;
    }
    p->map = m;
    p->populating = pthread_create(&p->populator, NULL, populate_map, p) == 0;
    return 0;
}

int dy_xfer_resolve(const char *hostport, int family, struct addrinfo **out, char *err,
                    size_t errlen)
{
    char host[DY_WIRE_MAX_PEER + 1];
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (!colon) {
        snprintf(err, errlen, "peer '%s' is not host:port", hostport);
        return -1;
    }
    *colon = 0;
    struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(host, colon + 1, &hints, out);
    if (rc != 0) {
        snprintf(err, errlen, "peer '%s': %s", hostport, gai_strerror(rc));
        return -1;
    }
    return 0;
}

static int open_tcp(dy_xfer_peer *p, char *err, size_t errlen)
{
    struct addrinfo *ai = NULL;
    if (dy_xfer_resolve(p->name, AF_UNSPEC, &ai, err, errlen) != 0)
        return -1;
    p->fd = -1;
    for (struct addrinfo *a = ai; a && p->fd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            p->fd = fd;
        else if (fd >= 0)
            close(fd);
    }
    freeaddrinfo(ai);
    if (p->fd < 0) {
        snprintf(err, errlen, "cannot connect to KV receiver %s: %s", p->name, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

dy_xfer_peer *dy_xfer_open(dy_xfer_kind kind, const char *peer, dy_kv_type type,
                           size_t block_bytes, char *err, size_t errlen)
{
    dy_xfer_peer *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->kind = kind;
    p->fd = -1;
    atomic_init(&p->stop, false);
    p->type = type;
    p->block_bytes = block_bytes;
    snprintf(p->name, sizeof p->name, "%s", peer);
    int rc = kind == DY_XFER_SHM ? open_shm(p, err, errlen)
             : kind == DY_XFER_UCX ? ((p->ucx = dy_xfer_ucx_connect(peer, err, errlen)) ? 0 : -1)
                                   : open_tcp(p, err, errlen);
    if (rc != 0) {
        free(p);
        return NULL;
    }
    return p;
}

void dy_xfer_close(dy_xfer_peer *p)
{
    if (!p)
        return;
    if (p->populating) {
        atomic_store(&p->stop, true);
        pthread_join(p->populator, NULL);
    }
    if (p->map)
        munmap(p->map, p->map_size);
    if (p->fd >= 0)
        close(p->fd);
    dy_xfer_ucx_disconnect(p->ucx);
    free(p);
}

const char *dy_xfer_peer_name(const dy_xfer_peer *p)
{
    return p->name;
}

size_t dy_xfer_peer_mapped_bytes(const dy_xfer_peer *p)
{
    return p->map ? p->map_size : 0;
}

static bool send_all(int fd, const void *buf, size_t n)
{
    const uint8_t *s = buf;
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        s += k;
        n -= (size_t)k;
    }
    return true;
}

/* Every block's frame and source at once: UCX keeps them all in flight, and returns once they
 * are in the peer's pool. */
static int send_ucx(dy_xfer_peer *p, uint64_t seq_id, const dy_kv_pool *src,
                    const int32_t *src_ids, const int32_t *dst_ids, int n, uint64_t *bytes,
                    char *err, size_t errlen)
{
    dy_xfer_frame *hdrs = malloc(sizeof *hdrs * (size_t)(n ? n : 1));
    const void **from = malloc(sizeof *from * (size_t)(n ? n : 1));
    int rc = -1;
    if (!hdrs || !from) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (int i = 0; i < n && rc == -1; i++)
            if (dst_ids[i] < 0) {
                snprintf(err, errlen, "destination block %d is outside %s", dst_ids[i], p->name);
                rc = -2;
            }
        for (int i = 0; i < n && rc == -1; i++) {
            hdrs[i] = (dy_xfer_frame){DY_XFER_MAGIC, (uint32_t)p->block_bytes, seq_id,
                                      dst_ids[i], (uint32_t)p->type};
            from[i] = dy_kv_block_data(src, src_ids[i]);
        }
        rc = rc == -2 ? -1 : dy_xfer_ucx_send(p->ucx, hdrs, from, n, p->block_bytes, err, errlen);
        if (rc == 0)
            *bytes = (uint64_t)n * p->block_bytes;
    }
    free(hdrs);
    free(from);
    return rc;
}

int dy_xfer_send(dy_xfer_peer *p, uint64_t seq_id, const dy_kv_pool *src, const int32_t *src_ids,
                 const int32_t *dst_ids, int n, uint64_t *bytes, char *err, size_t errlen)
{
    const size_t bb = p->block_bytes;
    *bytes = 0;
    if (bb != dy_kv_block_bytes(src) || p->type != src->type) {
        snprintf(err, errlen, "KV block mismatch: %s blocks of %zu bytes here, %s of %zu opened "
                 "for %s", dy_kv_type_name(src->type), dy_kv_block_bytes(src),
                 dy_kv_type_name(p->type), bb, p->name);
        return -1;
    }
    if (p->kind == DY_XFER_UCX)
        return send_ucx(p, seq_id, src, src_ids, dst_ids, n, bytes, err, errlen);
    for (int i = 0; i < n; i++) {
        const void *from = dy_kv_block_data(src, src_ids[i]);
        if (dst_ids[i] < 0 || (size_t)(dst_ids[i] + 1) * bb > (p->kind == DY_XFER_SHM ? p->map_size : SIZE_MAX)) {
            snprintf(err, errlen, "destination block %d is outside %s", dst_ids[i], p->name);
            return -1;
        }
        if (p->kind == DY_XFER_SHM) {
            memcpy(p->map + (size_t)dst_ids[i] * bb, from, bb);
        } else {
            dy_xfer_frame f = {DY_XFER_MAGIC, (uint32_t)bb, seq_id, dst_ids[i],
                               (uint32_t)p->type};
            if (!send_all(p->fd, &f, sizeof f) || !send_all(p->fd, from, bb)) {
                snprintf(err, errlen, "sending to %s: %s", p->name, strerror(errno));
                return -1;
            }
        }
        *bytes += bb;
    }
    return 0;
}

bool dy_xfer_kind_available(dy_xfer_kind kind, char *err, size_t errlen)
{
    if (kind == DY_XFER_UCX && !dy_xfer_ucx_built()) {
        snprintf(err, errlen, "--kv-transfer ucx: this dyad was built without UCX (libucx-dev "
                 "was not found when it was configured); use --kv-transfer tcp, or install "
                 "libucx-dev and rebuild");
        return false;
    }
    return true;
}
