/* cmd_bench_xfer.c — `dyad bench xfer`: what moving KV costs. Copies the same blocks with a
 * plain memcpy (the floor), through the shared-memory backend, over TCP on loopback and (where
 * the build has it) over UCX on loopback, and prints GB/s for each; with --listen / --connect
 * the TCP or UCX sender and receiver run in separate processes (on separate hosts or network
 * namespaces). Block size follows a model shape
 * (16 positions × layers × 2 × KV width × the --kv-type's bytes per value). With --tiers it measures the lower KV tiers
 * instead (docs/kv-tiers.md): the worker's mover thread copying blocks primary → host → disk and
 * back, per block size. A benchmark: prints, asserts nothing. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "serve/worker/kv_mover.h"
#include "serve/worker/xfer.h"
#include "util/clock.h"
#include "util/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char xfer_usage[] =
    "usage: dyad bench xfer [--shape 15m|110m|1b] [--mib N] [--reps N]\n"
    "       dyad bench xfer --listen HOST:PORT [--kv-transfer tcp|ucx] [--shape S] [--mib N]\n"
    "                                                                  (receiver)\n"
    "       dyad bench xfer --connect HOST:PORT [--kv-transfer tcp|ucx] [--shape S] [--mib N]\n"
    "                                                                  (sender)\n"
    "       dyad bench xfer --tiers [--disk-dir DIR] [--shape S] [--mib N] [--reps N]\n"
    "Every form takes --kv-type f32|f16|q8_0 (the blocks' element type; default f32).\n"
    "Moves N MiB of KV blocks of the shape's size: memcpy, shared memory, TCP, UCX (its\n"
    "transports from UCX_TLS); with --tiers,\n"
    "between the KV cache, the host tier and the disk tier, for blocks of 16, 32 and 64\n"
    "positions. On a terminal, stderr shows a progress line.\n";

typedef struct {
    const char *name;
    int layers, kv_dim, head_dim;
} shape;

#define N_SHAPES 3
static const shape shapes[N_SHAPES] = {
    {"15m", 6, 288, 48}, {"110m", 12, 768, 64}, {"1b", 22, 256, 64}};

typedef struct {
    const shape *sh;
    int mib, reps, n;
    const char *listen, *connect;
    bool tiers;
    const char *disk_dir;
    int shape_index;
    int kv_type; /* dy_kv_type */
    int remote_kind; /* --listen/--connect: DY_XFER_TCP or DY_XFER_UCX */
    const char *shape_names[N_SHAPES + 1];
    bool json;
} xopts;

/* The KV shape of blocks of `positions` positions of the chosen model shape and type. */
static dy_kv_shape kv_shape(const xopts *o, int positions)
{
    return (dy_kv_shape){positions, o->sh->layers, o->sh->kv_dim, o->sh->head_dim,
                         (dy_kv_type)o->kv_type};
}

static dy_kv_pool *make_pool(const xopts *o, const char *shm)
{
    const dy_kv_shape s = kv_shape(o, 16);
    dy_kv_pool *p = dy_kv_pool_make(o->n, &s, shm);
    if (p)
        memset(p->data, 1, p->data_bytes); /* touch every page before timing */
    return p;
}

static void report(const char *what, double bytes, double s)
{
    printf("%-28s %8.1f MiB in %8.3f ms: %6.2f GB/s\n", what, bytes / (1 << 20), s * 1e3,
           bytes / s / 1e9);
}

/* Sends n blocks (ids → ids) as sequence seq and waits until the receiver holds them: over
 * shared memory (rx NULL) the copy is done when the send returns. */
static void send_wait(dy_xfer_peer *p, dy_xfer_rx *rx, uint64_t seq, const dy_kv_pool *src,
                      const int32_t *ids, int n)
{
    char err[256];
    uint64_t bytes;
    if (rx)
        dy_xfer_rx_expect(rx, seq, ids, n);
    if (dy_xfer_send(p, seq, src, ids, ids, n, &bytes, err, sizeof err) != 0)
        fprintf(stderr, "dyad bench xfer: %s\n", err);
    else if (rx)
        while (dy_xfer_rx_received(rx, seq) < n)
            ;
    if (rx)
        dy_xfer_rx_forget(rx, seq);
}

/* Fastest one-block send through p, in seconds: with the bulk bandwidth, what a cost model's
 * transfer latency is fitted from. */
static double one_block_time(const xopts *o, dy_xfer_peer *p, dy_xfer_rx *rx,
                             const dy_kv_pool *src)
{
    int32_t id = 0;
    double best = 1e9;
    for (int r = 0; r < o->reps; r++) {
        double t0 = dy_now();
        send_wait(p, rx, 1000000u + (uint64_t)r, src, &id, 1);
        double t = dy_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* Latency = a one-block send less that block's bytes at the bulk bandwidth (never below 0). */
static double latency_us(double one_block_s, double block_bytes, double gbps)
{
    double l = (one_block_s - block_bytes / (gbps * 1e9)) * 1e6;
    return l > 0 ? l : 0;
}

/* The backends a local run measures: memcpy (no peer), then each transfer backend. */
#define N_BACKENDS 4
typedef struct {
    const char *key, *label;
    dy_xfer_peer *peer;
    dy_xfer_rx *rx;   /* TCP, UCX: the receiver on dst */
    double best;      /* fastest bulk copy, s */
} backend;

static void report_json(const xopts *o, size_t bb, double total, const backend *b, int nb,
                        const dy_kv_pool *src)
{
    printf("{\"shape\":\"%s\",\"kv_type\":\"%s\",\"block_bytes\":%zu,\"bytes_per_token\":%zu,"
           "\"bytes\":%.0f,\"reps\":%d,\"backends\":[", o->sh->name,
           dy_kv_type_name((dy_kv_type)o->kv_type), bb, bb / 16, total, o->reps);
    for (int i = 0; i < nb; i++) {
        double g = total / b[i].best / 1e9;
        printf("%s{\"backend\":\"%s\",\"gbps\":%.3f", i ? "," : "", b[i].key, g);
        if (b[i].peer)
            printf(",\"latency_us\":%.2f",
                   latency_us(one_block_time(o, b[i].peer, b[i].rx, src), (double)bb, g));
        printf("}");
    }
    printf("]}\n");
}

/* Opens the transfer backends into dst (shared-memory name shm); UCX only where it is built. */
static int open_backends(backend *b, dy_kv_pool *dst, const char *shm, const dy_kv_pool *src,
                         char *err, size_t errlen)
{
    const size_t bb = dy_kv_block_bytes(src);
    int n = 0;
    b[n++] = (backend){"memcpy", "memcpy (floor)", NULL, NULL, 1e9};
    b[n] = (backend){"shm", "shared memory (dyad)", NULL, NULL, 1e9};
    if (!(b[n++].peer = dy_xfer_open(DY_XFER_SHM, shm, src->type, bb, err, errlen)))
        return -1;
    const dy_xfer_kind net[2] = {DY_XFER_TCP, DY_XFER_UCX};
    const char *keys[2] = {"tcp", "ucx"}, *labels[2] = {"TCP loopback (dyad)",
                                                         "UCX loopback (dyad)"};
    for (int k = 0; k < 2; k++) {
        if (!dy_xfer_kind_available(net[k], err, errlen))
            continue;
        b[n] = (backend){keys[k], labels[k], NULL, NULL, 1e9};
        b[n].rx = dy_xfer_rx_start(net[k], dst, "127.0.0.1", 0, err, errlen);
        b[n].peer = b[n].rx ? dy_xfer_open(net[k], dy_xfer_rx_addr(b[n].rx), src->type, bb, err,
                                           errlen)
                            : NULL;
        if (!b[n++].peer)
            return -1;
    }
    return n;
}

static int run_local(const xopts *o)
{
    char name[64], err[256];
    snprintf(name, sizeof name, "/dyad-bench-xfer-%d", (int)getpid());
    dy_kv_pool *src = make_pool(o, NULL), *dst = make_pool(o, name);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->n);
    if (!src || !dst || !ids) {
        fprintf(stderr, "dyad bench xfer: out of memory for %d blocks\n", o->n);
        return 1;
    }
    for (int i = 0; i < o->n; i++)
        ids[i] = i;
    const size_t bb = dy_kv_block_bytes(src);
    const double total = (double)bb * o->n;
    backend b[N_BACKENDS] = {{0}};
    int nb = open_backends(b, dst, name, src, err, sizeof err);
    if (nb < 0) {
        fprintf(stderr, "dyad bench xfer: %s\n", err);
        return 1;
    }
    /* Progress in bytes copied, nb copies a rep; drawn between the timed copies. */
    dy_progress *pg = dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad bench xfer",
                                      DY_PROGRESS_BYTES, NULL, nb * total * o->reps, dy_now());
    /* Alternate the backends so machine noise spreads over all of them. */
    for (int r = 0; r < o->reps; r++)
        for (int k = 0; k < nb; k++) {
            double t0 = dy_now(); /* the progress line's drawing is timed with nothing */
            if (!b[k].peer)
                for (int i = 0; i < o->n; i++)
                    memcpy(dy_kv_block_data(dst, i), dy_kv_block_data(src, i), bb);
            else
                send_wait(b[k].peer, b[k].rx, (uint64_t)(r * N_BACKENDS + k) + 10, src, ids,
                          o->n);
            double t = dy_now() - t0;
            b[k].best = t < b[k].best ? t : b[k].best;
            dy_progress_update(pg, total * (nb * r + k + 1), b[k].label, dy_now());
        }
    dy_progress_finish(pg);
    if (o->json) {
        report_json(o, bb, total, b, nb, src);
    } else {
        printf("shape %s, %s KV: %zu bytes per block of 16 positions (%zu per token); min of %d "
               "reps\n", o->sh->name, dy_kv_type_name((dy_kv_type)o->kv_type), bb, bb / 16,
               o->reps);
        for (int k = 0; k < nb; k++)
            report(b[k].label, total, b[k].best);
        for (int k = 1; k < nb; k++) {
            char what[64];
            snprintf(what, sizeof what, "one block, %s", b[k].key);
            printf("%-28s %8.1f us (fastest)\n", what,
                   one_block_time(o, b[k].peer, b[k].rx, src) * 1e6);
        }
    }
    for (int k = 0; k < nb; k++) {
        dy_xfer_close(b[k].peer);
        dy_xfer_rx_stop(b[k].rx);
    }
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
    free(ids);
    return 0;
}

/* ---------------------------------------------------------------- --tiers */

/* Runs jobs[0..n) through the mover (at most its capacity outstanding); the wall time, or -1
 * if a job failed. */
static double run_jobs(dy_kv_mover *m, dy_kv_move *jobs, int n, int cap)
{
    dy_kv_move done[64];
    int sent = 0, got = 0;
    bool ok = true;
    double t0 = dy_now();
    while (got < n) {
        while (sent < n && sent - got < cap && dy_kv_mover_submit(m, &jobs[sent]))
            sent++;
        int k = dy_kv_mover_take(m, done, 64);
        for (int i = 0; i < k; i++)
            ok &= done[i].ok;
        got += k;
    }
    return ok ? dy_now() - t0 : -1;
}

typedef enum { TO_HOST, FROM_HOST, TO_DISK, FROM_DISK_COLD, FROM_DISK_WARM, N_MOVES } tier_move;
static const char *const move_names[N_MOVES] = {
    "KV cache -> host", "host -> KV cache", "host -> disk (+fdatasync)",
    "disk (cold) -> KV cache", "disk (page cache) -> KV cache"};

/* The jobs of one kind of copy over n blocks of bb bytes. */
static void tier_jobs(tier_move k, dy_kv_move *jobs, int n, size_t bb, char *pool, char *host,
                      int fd, const uint64_t *sums)
{
    for (int i = 0; i < n; i++) {
        char *p = pool + (size_t)i * bb, *h = host + (size_t)i * bb;
        off_t off = (off_t)i * (off_t)bb;
        switch (k) {
        case TO_HOST: jobs[i] = (dy_kv_move){.kind = DY_MOVE_MEM, .src = p, .dst = h}; break;
        case FROM_HOST: jobs[i] = (dy_kv_move){.kind = DY_MOVE_MEM, .src = h, .dst = p}; break;
        case TO_DISK:
            jobs[i] = (dy_kv_move){.kind = DY_MOVE_TO_FILE, .src = h, .fd = fd, .off = off};
            break;
        default:
            jobs[i] = (dy_kv_move){.kind = DY_MOVE_FROM_FILE, .dst = p, .fd = fd, .off = off,
                                   .checksum = sums[i]};
        }
        jobs[i].bytes = bb;
    }
}

/* One block size: every kind of copy, the fastest of o->reps each. */
/* --tiers' progress line: copies made of all it will make. */
typedef struct {
    dy_progress *line;
    int done;
} tier_progress;

static int tier_rates(const xopts *o, int positions, int fd, dy_kv_mover *m, tier_progress *tp)
{
    const dy_kv_shape ks = kv_shape(o, positions);
    size_t bb = dy_kv_shape_block_bytes(&ks);
    int n = (int)(((size_t)o->mib << 20) / bb);
    n = n < 1 ? 1 : n;
    size_t bytes = (size_t)n * bb;
    char *pool = malloc(bytes), *host = malloc(bytes);
    dy_kv_move *jobs = malloc(sizeof *jobs * (size_t)n);
    uint64_t *sums = malloc(sizeof *sums * (size_t)n);
    if (!pool || !host || !jobs || !sums) {
        fprintf(stderr, "dyad bench xfer: out of memory for %d blocks\n", n);
        free(pool), free(host), free(jobs), free(sums);
        return 1;
    }
    memset(pool, 5, bytes); /* every page touched before timing; one content everywhere, */
    memset(host, 5, bytes); /* so the blocks read back match the checksums below */
    for (int i = 0; i < n; i++)
        sums[i] = dy_kv_block_checksum(host + (size_t)i * bb, bb);
    double best[N_MOVES];
    for (int k = 0; k < N_MOVES; k++)
        best[k] = 1e30;
    for (int r = 0; r < o->reps; r++)
        for (int k = 0; k < N_MOVES && (k < TO_DISK || fd >= 0); k++) {
            tier_jobs((tier_move)k, jobs, n, bb, pool, host, fd, sums);
            if (k == FROM_DISK_COLD) /* drop the file's pages: the next reads go to the disk */
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            double t0 = dy_now();
            double s = run_jobs(m, jobs, n, 1024);
            if (k == TO_DISK && s >= 0 && fdatasync(fd) != 0)
                s = -1;
            s = s < 0 ? -1 : dy_now() - t0;
            if (s < 0) {
                dy_progress_clear(tp->line);
                fprintf(stderr, "dyad bench xfer: %s failed: %s\n", move_names[k], strerror(errno));
                free(pool), free(host), free(jobs), free(sums);
                return 1;
            }
            best[k] = s < best[k] ? s : best[k];
            dy_progress_update(tp->line, ++tp->done, move_names[k], dy_now());
        }
    dy_progress_clear(tp->line); /* the figures go to the same terminal */
    printf("blocks of %d positions: %zu bytes, %d blocks\n", positions, bb, n);
    for (int k = 0; k < N_MOVES && (k < TO_DISK || fd >= 0); k++)
        printf("  %-30s %8.2f GB/s %9.2f us/block\n", move_names[k], (double)bytes / best[k] / 1e9,
               best[k] / n * 1e6);
    free(pool), free(host), free(jobs), free(sums);
    return 0;
}

static int run_tiers(const xopts *o)
{
    int fd = -1;
    char path[4096] = "";
    if (o->disk_dir) {
        snprintf(path, sizeof path, "%s/dyad-bench-tier-%d.bin", o->disk_dir, (int)getpid());
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            fprintf(stderr, "dyad bench xfer: cannot create %s: %s\n", path, strerror(errno));
            return 1;
        }
        unlink(path);
    }
    dy_kv_mover *m = dy_kv_mover_new(1024);
    if (!m) {
        fprintf(stderr, "dyad bench xfer: cannot start the mover thread\n");
        return 1;
    }
    printf("shape %s, %s KV: the KV tiers' mover thread, %d MiB per copy, fastest of %d reps%s%s\n",
           o->sh->name, dy_kv_type_name((dy_kv_type)o->kv_type), o->mib, o->reps, fd >= 0 ? "; disk in " : " (no --disk-dir: no disk)",
           fd >= 0 ? o->disk_dir : "");
    int rc = 0;
    const int sizes[] = {16, 32, 64};
    tier_progress tp = {dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad bench xfer",
                                        DY_PROGRESS_COUNT, "copies",
                                        3.0 * o->reps * (fd >= 0 ? N_MOVES : TO_DISK), dy_now()),
                        0};
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = tier_rates(o, sizes[i], fd, m, &tp);
    dy_progress_finish(tp.line);
    dy_kv_mover_free(m);
    if (fd >= 0)
        close(fd);
    return rc;
}

static int run_remote(const xopts *o)
{
    char err[256];
    dy_kv_pool *pool = make_pool(o, NULL);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->n);
    if (!pool || !ids)
        return 1;
    for (int i = 0; i < o->n; i++)
        ids[i] = i;
    double total = (double)dy_kv_block_bytes(pool) * o->n;
    if (o->listen) {
        char host[128];
        snprintf(host, sizeof host, "%s", o->listen);
        char *colon = strrchr(host, ':');
        if (!colon) {
            fprintf(stderr, "dyad bench xfer: --listen needs HOST:PORT\n");
            return 2;
        }
        *colon = 0;
        dy_xfer_rx *rx = dy_xfer_rx_start((dy_xfer_kind)o->remote_kind, pool, host,
                                          atoi(colon + 1), err, sizeof err);
        if (!rx) {
            fprintf(stderr, "dyad bench xfer: %s\n", err);
            return 1;
        }
        dy_xfer_rx_expect(rx, 1, ids, o->n);
        printf("listening on %s\n", dy_xfer_rx_addr(rx));
        fflush(stdout);
        double t0 = 0;
        while (dy_xfer_rx_received(rx, 1) < o->n) {
            if (t0 == 0 && dy_xfer_rx_received(rx, 1) > 0)
                t0 = dy_now();
            usleep(100);
        }
        /* UCX has every block in flight at once, so they land together: no receive time */
        if (o->remote_kind == DY_XFER_UCX)
            printf("UCX receive %25.1f MiB (the sender's line has the time)\n",
                   total / (1 << 20));
        else
            report("TCP receive", total, dy_now() - t0);
        dy_xfer_rx_stop(rx);
    } else {
        dy_xfer_peer *p = dy_xfer_open((dy_xfer_kind)o->remote_kind, o->connect, pool->type,
                                       dy_kv_block_bytes(pool), err, sizeof err);
        uint64_t bytes;
        double t0 = dy_now();
        if (!p || dy_xfer_send(p, 1, pool, ids, ids, o->n, &bytes, err, sizeof err) != 0) {
            fprintf(stderr, "dyad bench xfer: %s\n", err);
            return 1;
        }
        report(o->remote_kind == DY_XFER_UCX ? "UCX send" : "TCP send", total, dy_now() - t0);
        dy_xfer_close(p);
    }
    dy_kv_pool_free(pool);
    free(ids);
    return 0;
}

int cmd_bench_xfer(int argc, char **argv)
{
    xopts o = {0};
    static const char *const remote_names[] = {"tcp", "ucx", NULL};
    static const int remote_values[] = {DY_XFER_TCP, DY_XFER_UCX};
    for (int i = 0; i < N_SHAPES; i++)
        o.shape_names[i] = shapes[i].name;
    const dy_opt t[] = {
        {.name = "shape", .kind = DY_OPT_ENUM, .dst = &o.shape_index, .meta = "15m|110m|1b",
         .help = "the model shape whose KV blocks move", .names = o.shape_names,
         .def = 1 /* 110m */},
        {.name = "kv-type", .kind = DY_OPT_ENUM, .dst = &o.kv_type, .meta = "T",
         .help = "element type of the blocks: f32, f16 or q8_0 (as the workers' --kv-type)",
         .names = dy_kv_type_names(), .def = DY_KV_F32},
        {.name = "mib", .kind = DY_OPT_INT, .dst = &o.mib, .meta = "N",
         .help = "MiB of KV blocks to move", .min = 1, .max = 65536, .def = 256},
        {.name = "reps", .kind = DY_OPT_INT, .dst = &o.reps, .meta = "N",
         .help = "repetitions; the fastest is reported", .min = 1, .max = 1000, .def = 5},
        {.name = "listen", .kind = DY_OPT_STR, .dst = &o.listen, .meta = "HOST:PORT",
         .help = "receive on HOST:PORT (the receiving process)"},
        {.name = "connect", .kind = DY_OPT_STR, .dst = &o.connect, .meta = "HOST:PORT",
         .help = "send to a receiver on HOST:PORT (the sending process)"},
        {.name = "kv-transfer", .kind = DY_OPT_ENUM, .dst = &o.remote_kind, .meta = "tcp|ucx",
         .help = "--listen, --connect: over TCP or UCX", .names = remote_names,
         .values = remote_values, .def = DY_XFER_TCP},
        {.name = "tiers", .kind = DY_OPT_FLAG, .dst = &o.tiers,
         .help = "measure the lower KV tiers instead: KV cache <-> host memory <-> disk, through "
                 "the worker's mover thread, for blocks of 16, 32 and 64 positions"},
        {.name = "disk-dir", .kind = DY_OPT_STR, .dst = &o.disk_dir, .meta = "DIR",
         .help = "--tiers: where the disk tier's file goes (removed at once; without it, no "
                 "disk)"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o.json,
         .help = "one JSON object (GB/s and one-block latency per backend) instead of the "
                 "report; local runs only"},
    };
    int rc = cli_parse("bench xfer", xfer_usage, NULL, t, (int)(sizeof t / sizeof t[0]), argc,
                       argv, NULL);
    if (rc != CLI_GO)
        return rc;
    o.sh = &shapes[o.shape_index];
    const dy_kv_shape ks = kv_shape(&o, 16);
    size_t bb = dy_kv_shape_block_bytes(&ks);
    o.n = (int)(((size_t)o.mib << 20) / bb);
    if (o.n < 1)
        o.n = 1;
    if (o.tiers)
        return run_tiers(&o);
    return o.listen || o.connect ? run_remote(&o) : run_local(&o);
}
