/* cmd_bench_xfer.c — `dyad bench xfer`: what moving KV costs. Copies the same blocks with a
 * plain memcpy (the floor), through the shared-memory backend, and over TCP on loopback, and
 * prints GB/s for each; with --listen / --connect the TCP sender and receiver run in separate
 * processes (on separate hosts or network namespaces). Block size follows a model shape
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
    "       dyad bench xfer --listen HOST:PORT [--shape S] [--mib N]   (receiver)\n"
    "       dyad bench xfer --connect HOST:PORT [--shape S] [--mib N]  (sender)\n"
    "       dyad bench xfer --tiers [--disk-dir DIR] [--shape S] [--mib N] [--reps N]\n"
    "Every form takes --kv-type f32|f16|q8_0 (the blocks' element type; default f32).\n"
    "Moves N MiB of KV blocks of the shape's size: memcpy, shared memory, TCP; with --tiers,\n"
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

/* Fastest one-block send over shared memory and over TCP, in seconds: with the bulk
 * bandwidth, what a cost model's transfer latency is fitted from. */
static void one_block_times(const xopts *o, dy_xfer_peer *shm, dy_xfer_peer *tcp, dy_xfer_rx *rx,
                            const dy_kv_pool *src, double *t_shm, double *t_tcp)
{
    char err[256];
    uint64_t bytes;
    int32_t id = 0;
    *t_shm = *t_tcp = 1e9;
    for (int r = 0; r < o->reps; r++) {
        uint64_t seq = 1000000u + (uint64_t)r;
        double t0 = dy_now();
        dy_xfer_send(shm, seq, src, &id, &id, 1, &bytes, err, sizeof err);
        double t1 = dy_now();
        dy_xfer_rx_expect(rx, seq, &id, 1);
        dy_xfer_send(tcp, seq, src, &id, &id, 1, &bytes, err, sizeof err);
        while (dy_xfer_rx_received(rx, seq) < 1)
            ;
        double t2 = dy_now();
        dy_xfer_rx_forget(rx, seq);
        *t_shm = t1 - t0 < *t_shm ? t1 - t0 : *t_shm;
        *t_tcp = t2 - t1 < *t_tcp ? t2 - t1 : *t_tcp;
    }
}

/* Latency = a one-block send less that block's bytes at the bulk bandwidth (never below 0). */
static double latency_us(double one_block_s, double block_bytes, double gbps)
{
    double l = (one_block_s - block_bytes / (gbps * 1e9)) * 1e6;
    return l > 0 ? l : 0;
}

static void report_json(const xopts *o, size_t bb, double total, double mem, double shm,
                        double tcp, double one_shm, double one_tcp)
{
    double g_shm = total / shm / 1e9, g_tcp = total / tcp / 1e9;
    printf("{\"shape\":\"%s\",\"kv_type\":\"%s\",\"block_bytes\":%zu,\"bytes_per_token\":%zu,\"bytes\":%.0f,"
           "\"reps\":%d,\"backends\":[{\"backend\":\"memcpy\",\"gbps\":%.3f},"
           "{\"backend\":\"shm\",\"gbps\":%.3f,\"latency_us\":%.2f},"
           "{\"backend\":\"tcp\",\"gbps\":%.3f,\"latency_us\":%.2f}]}\n",
           o->sh->name, dy_kv_type_name((dy_kv_type)o->kv_type), bb, bb / 16, total, o->reps, total / mem / 1e9, g_shm,
           latency_us(one_shm, (double)bb, g_shm), g_tcp, latency_us(one_tcp, (double)bb, g_tcp));
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
    double total = (double)bb * o->n, best_mem = 1e9, best_shm = 1e9, best_tcp = 1e9;
    dy_xfer_peer *shm = dy_xfer_open(DY_XFER_SHM, name, src->type, bb, err, sizeof err);
    dy_xfer_rx *rx = dy_xfer_rx_start(dst, "127.0.0.1", 0, err, sizeof err);
    dy_xfer_peer *tcp = rx ? dy_xfer_open(DY_XFER_TCP, dy_xfer_rx_addr(rx), src->type, bb, err,
                                          sizeof err)
                           : NULL;
    if (!shm || !tcp) {
        fprintf(stderr, "dyad bench xfer: %s\n", err);
        return 1;
    }
    uint64_t bytes;
    /* Progress in bytes copied, three copies a rep; drawn between the timed copies. */
    dy_progress *pg = dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad bench xfer",
                                      DY_PROGRESS_BYTES, NULL, 3 * total * o->reps, dy_now());
    /* Alternate the three so machine noise spreads over all of them. */
    for (int r = 0; r < o->reps; r++) {
        double t0 = dy_now();
        for (int i = 0; i < o->n; i++)
            memcpy(dy_kv_block_data(dst, i), dy_kv_block_data(src, i), bb);
        double t1 = dy_now();
        dy_progress_update(pg, total * (3 * r + 1), "memcpy", t1);
        double t1s = dy_now(); /* the line's drawing is timed with nothing */
        dy_xfer_send(shm, 1, src, ids, ids, o->n, &bytes, err, sizeof err);
        double t2 = dy_now();
        dy_progress_update(pg, total * (3 * r + 2), "shared memory", t2);
        double t2s = dy_now();
        dy_xfer_rx_expect(rx, (uint64_t)r + 10, ids, o->n);
        dy_xfer_send(tcp, (uint64_t)r + 10, src, ids, ids, o->n, &bytes, err, sizeof err);
        while (dy_xfer_rx_received(rx, (uint64_t)r + 10) < o->n)
            ;
        double t3 = dy_now();
        dy_xfer_rx_forget(rx, (uint64_t)r + 10);
        dy_progress_update(pg, total * (3 * r + 3), "TCP loopback", dy_now());
        best_mem = t1 - t0 < best_mem ? t1 - t0 : best_mem;
        best_shm = t2 - t1s < best_shm ? t2 - t1s : best_shm;
        best_tcp = t3 - t2s < best_tcp ? t3 - t2s : best_tcp;
    }
    dy_progress_finish(pg);
    if (o->json) {
        double one_shm, one_tcp;
        one_block_times(o, shm, tcp, rx, src, &one_shm, &one_tcp);
        report_json(o, bb, total, best_mem, best_shm, best_tcp, one_shm, one_tcp);
    } else {
        printf("shape %s, %s KV: %zu bytes per block of 16 positions (%zu per token); min of %d "
               "reps\n", o->sh->name, dy_kv_type_name((dy_kv_type)o->kv_type), bb, bb / 16,
               o->reps);
        report("memcpy (floor)", total, best_mem);
        report("shared memory (dyad)", total, best_shm);
        report("TCP loopback (dyad)", total, best_tcp);
    }
    dy_xfer_close(tcp);
    dy_xfer_close(shm);
    dy_xfer_rx_stop(rx);
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
        dy_xfer_rx *rx = dy_xfer_rx_start(pool, host, atoi(colon + 1), err, sizeof err);
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
        report("TCP receive", total, dy_now() - t0);
        dy_xfer_rx_stop(rx);
    } else {
        dy_xfer_peer *p = dy_xfer_open(DY_XFER_TCP, o->connect, pool->type,
                                       dy_kv_block_bytes(pool), err, sizeof err);
        uint64_t bytes;
        double t0 = dy_now();
        if (!p || dy_xfer_send(p, 1, pool, ids, ids, o->n, &bytes, err, sizeof err) != 0) {
            fprintf(stderr, "dyad bench xfer: %s\n", err);
            return 1;
        }
        report("TCP send", total, dy_now() - t0);
        dy_xfer_close(p);
    }
    dy_kv_pool_free(pool);
    free(ids);
    return 0;
}

int cmd_bench_xfer(int argc, char **argv)
{
    xopts o = {0};
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
         .help = "receive over TCP on HOST:PORT (the receiving process)"},
        {.name = "connect", .kind = DY_OPT_STR, .dst = &o.connect, .meta = "HOST:PORT",
         .help = "send over TCP to a receiver on HOST:PORT (the sending process)"},
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
