/* cmd_bench_xfer.c — `dyad bench xfer`: what moving KV costs. Copies the same blocks with a
 * plain memcpy (the floor), through the shared-memory backend, and over TCP on loopback, and
 * prints GB/s for each; with --listen / --connect the TCP sender and receiver run in separate
 * processes (on separate hosts or network namespaces). Block size follows a model shape
 * (16 positions × layers × 2 × KV width × 4 bytes). A benchmark: prints, asserts nothing. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "serve/worker/xfer.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char xfer_usage[] =
    "usage: dyad bench xfer [--shape 15m|110m|1b] [--mib N] [--reps N]\n"
    "       dyad bench xfer --listen HOST:PORT [--shape S] [--mib N]   (receiver)\n"
    "       dyad bench xfer --connect HOST:PORT [--shape S] [--mib N]  (sender)\n"
    "Moves N MiB of KV blocks of the shape's size: memcpy, shared memory, TCP.\n";

typedef struct {
    const char *name;
    int layers, kv_dim;
} shape;

#define N_SHAPES 3
static const shape shapes[N_SHAPES] = {{"15m", 6, 288}, {"110m", 12, 768}, {"1b", 22, 256}};

typedef struct {
    const shape *sh;
    int mib, reps, n;
    const char *listen, *connect;
    int shape_index;
    const char *shape_names[N_SHAPES + 1];
    bool json;
} xopts;

static dy_kv_pool *make_pool(const xopts *o, const char *shm)
{
    dy_kv_pool *p = shm ? dy_kv_pool_new_shared(o->n, 16, o->sh->layers, o->sh->kv_dim, shm)
                        : dy_kv_pool_new(o->n, 16, o->sh->layers, o->sh->kv_dim);
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
    printf("{\"shape\":\"%s\",\"block_bytes\":%zu,\"bytes_per_token\":%zu,\"bytes\":%.0f,"
           "\"reps\":%d,\"backends\":[{\"backend\":\"memcpy\",\"gbps\":%.3f},"
           "{\"backend\":\"shm\",\"gbps\":%.3f,\"latency_us\":%.2f},"
           "{\"backend\":\"tcp\",\"gbps\":%.3f,\"latency_us\":%.2f}]}\n",
           o->sh->name, bb, bb / 16, total, o->reps, total / mem / 1e9, g_shm,
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
    dy_xfer_peer *shm = dy_xfer_open(DY_XFER_SHM, name, bb, err, sizeof err);
    dy_xfer_rx *rx = dy_xfer_rx_start(dst, "127.0.0.1", 0, err, sizeof err);
    dy_xfer_peer *tcp = rx ? dy_xfer_open(DY_XFER_TCP, dy_xfer_rx_addr(rx), bb, err, sizeof err) : NULL;
    if (!shm || !tcp) {
        fprintf(stderr, "dyad bench xfer: %s\n", err);
        return 1;
    }
    uint64_t bytes;
    /* Alternate the three so machine noise spreads over all of them. */
    for (int r = 0; r < o->reps; r++) {
        double t0 = dy_now();
        for (int i = 0; i < o->n; i++)
            memcpy(dy_kv_keys(dst, i, 0), dy_kv_keys(src, i, 0), bb);
        double t1 = dy_now();
        dy_xfer_send(shm, 1, src, ids, ids, o->n, &bytes, err, sizeof err);
        double t2 = dy_now();
        dy_xfer_rx_expect(rx, (uint64_t)r + 10, ids, o->n);
        dy_xfer_send(tcp, (uint64_t)r + 10, src, ids, ids, o->n, &bytes, err, sizeof err);
        while (dy_xfer_rx_received(rx, (uint64_t)r + 10) < o->n)
            ;
        double t3 = dy_now();
        dy_xfer_rx_forget(rx, (uint64_t)r + 10);
        best_mem = t1 - t0 < best_mem ? t1 - t0 : best_mem;
        best_shm = t2 - t1 < best_shm ? t2 - t1 : best_shm;
        best_tcp = t3 - t2 < best_tcp ? t3 - t2 : best_tcp;
    }
    if (o->json) {
        double one_shm, one_tcp;
        one_block_times(o, shm, tcp, rx, src, &one_shm, &one_tcp);
        report_json(o, bb, total, best_mem, best_shm, best_tcp, one_shm, one_tcp);
    } else {
        printf("shape %s: %zu bytes per block of 16 positions (%zu per token); min of %d reps\n",
               o->sh->name, bb, bb / 16, o->reps);
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
        dy_xfer_peer *p = dy_xfer_open(DY_XFER_TCP, o->connect, dy_kv_block_bytes(pool), err, sizeof err);
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
        {.name = "mib", .kind = DY_OPT_INT, .dst = &o.mib, .meta = "N",
         .help = "MiB of KV blocks to move", .min = 1, .max = 65536, .def = 256},
        {.name = "reps", .kind = DY_OPT_INT, .dst = &o.reps, .meta = "N",
         .help = "repetitions; the fastest is reported", .min = 1, .max = 1000, .def = 5},
        {.name = "listen", .kind = DY_OPT_STR, .dst = &o.listen, .meta = "HOST:PORT",
         .help = "receive over TCP on HOST:PORT (the receiving process)"},
        {.name = "connect", .kind = DY_OPT_STR, .dst = &o.connect, .meta = "HOST:PORT",
         .help = "send over TCP to a receiver on HOST:PORT (the sending process)"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o.json,
         .help = "one JSON object (GB/s and one-block latency per backend) instead of the "
                 "report; local runs only"},
    };
    int rc = cli_parse("bench xfer", xfer_usage, NULL, t, (int)(sizeof t / sizeof t[0]), argc,
                       argv, NULL);
    if (rc != CLI_GO)
        return rc;
    o.sh = &shapes[o.shape_index];
    size_t bb = dy_kv_bytes_per_block(16, o.sh->layers, o.sh->kv_dim);
    o.n = (int)(((size_t)o.mib << 20) / bb);
    if (o.n < 1)
        o.n = 1;
    return o.listen || o.connect ? run_remote(&o) : run_local(&o);
}
