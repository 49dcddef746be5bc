/* kv_tiers.c — see kv_tiers.h. Every copy is a kv_mover job whose `purpose` says what to do
 * when it ends; the blocks and slots a copy reads or writes are pinned until then, so nothing
 * can evict or reuse them under it. */
#include "serve/worker/kv_tiers.h"
#include "kv/hold.h"
#include "serve/worker/kv_mover.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
    JOB_DOWN_HOST,   /* primary block a → host slot b */
    JOB_DOWN_DISK,   /* host slot a → disk slot b */
    JOB_UP,          /* tier slot a → primary block b, for load `id` */
    JOB_PREFETCH,    /* tier slot a → primary block b, published under hash `id` once there */
    JOB_PARK,        /* host slot a → disk slot b, for held session `id` (a long wait) */
};
#define T_HOST 0     /* index into st[] */
#define T_DISK 1

#define MOVER_CAP 1024
/* Copies down may fill half the mover's queue; the rest is kept for loads, which someone is
 * waiting on. */
#define DOWN_CAP (MOVER_CAP / 2)
/* Conversations held at once; past that the oldest hold ends. */
#define HOLDS_MAX 256

/* What a held session has pinned, per block of the hold (ids[i] for its hashes[i]; -1: not
 * pinned): host slots (prefetch; disk slots where on_disk[i], once a long wait parked them)
 * or primary blocks (pin). A block whose host copy was still being written when the hold
 * began is pinned once it is there (pin_missing). */
typedef struct {
    uint64_t key;
    int32_t *ids;
    bool *on_disk;
    int n, n_pinned;
    uint64_t tried_at; /* host_fills when pin_missing last ran for it */
} hold_pins;

typedef struct {
    uint64_t id;
    const dy_seq *seq;       /* NULL once forgotten */
    dy_tier_result *res;
    double started;
    int remaining, blocks;
    bool failed;
} load;

struct dy_kv_tiers {
    dy_kv_tiers_config cfg;
    dy_kv_cache *kv;
    dy_kv_pool *pool;
    dy_sched *sched;
    size_t block_bytes;
    dy_kv_tier *host;
    char *host_mem;
    size_t host_bytes;
    dy_kv_tier *disk;        /* NULL: none, or switched off (then disk_off) */
    int disk_fd;
    bool disk_off;
    dy_kv_mover *mover;
    int down_in_flight;
    dy_kv_rate up[DY_KV_N_TIERS], down[DY_KV_N_TIERS], prefill;
    load *loads;
    int n_loads, loads_cap;
    uint64_t next_load;
    /* scratch */
    uint64_t *hashes;
    int hashes_cap;
    dy_kv_published *published;
    int32_t *oldest;
    int window;              /* how far ahead of eviction the cleaners look */
    dy_kv_move done[64];
    dy_msg_tier_stats st[2];
    uint64_t n_loaded, n_recomputed, n_failed;
    /* the hold */
    dy_holds *holds;
    hold_pins *pins;         /* one per held session, in no order */
    int n_pins, pins_cap, pinned; /* pinned: ids over all of them */
    uint64_t prefetched_blocks, holds_expired, parked_blocks;
    uint64_t host_fills;     /* copies into the host tier ended: new slots holds may pin */
};

/* ---------------------------------------------------------------- setup */

/* The disk tier's file: created in dir and unlinked at once, so it goes with the process
 * however that ends. false (a line on stderr) when it cannot be had. */
static bool open_disk(dy_kv_tiers *t, int n_slots)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/dyad-kv-%d-w%d.bin", t->cfg.disk_dir, (int)getpid(),
                     t->cfg.worker_id);
    if (n < 0 || (size_t)n >= sizeof path) {
        fprintf(stderr, "dyad worker %d: disk tier off: --kv-disk-dir is too long\n",
                t->cfg.worker_id);
        return false;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "dyad worker %d: disk tier off: cannot create %s: %s\n",
                t->cfg.worker_id, path, strerror(errno));
        return false;
    }
    unlink(path);
    if (ftruncate(fd, (off_t)n_slots * (off_t)t->block_bytes) != 0) {
        fprintf(stderr, "dyad worker %d: disk tier off: cannot size %s: %s\n",
                t->cfg.worker_id, path, strerror(errno));
        close(fd);
        return false;
    }
    t->disk_fd = fd;
    return true;
}

dy_kv_tiers *dy_kv_tiers_new(const dy_kv_tiers_config *cfg, dy_kv_cache *kv, dy_sched *sched,
                             char *err, size_t errlen)
{
    err[0] = 0;
    if (cfg->host_mib <= 0)
        return NULL;
    dy_kv_tiers *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    t->kv = kv;
    t->pool = dy_kv_cache_pool(kv);
    t->sched = sched;
    t->block_bytes = dy_kv_block_bytes(t->pool);
    t->disk_fd = -1;
    int host_slots = (int)(((size_t)cfg->host_mib << 20) / t->block_bytes);
    if (host_slots < 1) {
        snprintf(err, errlen, "--kv-host-mem %d MiB holds no KV block of %zu bytes",
                 cfg->host_mib, t->block_bytes);
        free(t);
        return NULL;
    }
    t->host_bytes = (size_t)host_slots * t->block_bytes;
    t->host_mem = mmap(NULL, t->host_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    if (t->host_mem == MAP_FAILED) {
        t->host_mem = NULL;
        snprintf(err, errlen, "cannot map --kv-host-mem %d MiB: %s", cfg->host_mib,
                 strerror(errno));
        dy_kv_tiers_free(t);
        return NULL;
    }
    t->host = dy_kv_tier_new(host_slots, DY_KV_TIER_HOST);
    /* A share of the pool, so the copies in flight never pin much of it. */
    t->window = t->pool->n_blocks / 8 > 1 ? t->pool->n_blocks / 8 : 1;
    if (t->window > 256)
        t->window = 256;
    t->published = malloc(sizeof *t->published * (size_t)t->pool->n_blocks);
    t->oldest = malloc(sizeof *t->oldest * (size_t)t->window);
    t->mover = dy_kv_mover_new(MOVER_CAP);
    bool tracked = dy_kv_cache_track_published(kv, cfg->offload == DY_OFFLOAD_WRITE_THROUGH);
    if (!t->host || !t->published || !t->oldest || !t->mover || !tracked) {
        snprintf(err, errlen, "out of memory setting up the KV tiers");
        dy_kv_tiers_free(t);
        return NULL;
    }
    if (cfg->disk_dir) {
        int disk_slots = (int)fmin(cfg->disk_gib * (double)(1u << 30) / (double)t->block_bytes,
                                   (double)(1 << 30));
        if (disk_slots < 1)
            fprintf(stderr, "dyad worker %d: disk tier off: --kv-disk-mem holds no block\n",
                    cfg->worker_id);
        else if (open_disk(t, disk_slots) && !(t->disk = dy_kv_tier_new(disk_slots, DY_KV_TIER_DISK))) {
            snprintf(err, errlen, "out of memory setting up the disk tier");
            dy_kv_tiers_free(t);
            return NULL;
        }
        t->disk_off = !t->disk;
    }
    dy_holds_config hc = {.ttl_s = cfg->hold_ttl_s, .margin_s = cfg->hold_margin_s,
                          .max_sessions = HOLDS_MAX};
    if (cfg->hold != DY_HOLD_OFF && !(t->holds = dy_holds_new(&hc))) {
        snprintf(err, errlen, "out of memory (or bad settings) for the tool-call hold");
        dy_kv_tiers_free(t);
        return NULL;
    }
    return t;
}

void dy_kv_tiers_free(dy_kv_tiers *t)
{
    if (!t)
        return;
    dy_kv_mover_free(t->mover); /* first: no copy may run on what is freed next */
    if (t->kv)
        dy_kv_cache_track_published(t->kv, false);
    if (t->host_mem)
        munmap(t->host_mem, t->host_bytes);
    if (t->disk_fd >= 0)
        close(t->disk_fd);
    dy_kv_tier_free(t->host);
    dy_kv_tier_free(t->disk);
    for (int i = 0; i < t->n_pins; i++) {
        free(t->pins[i].ids);
        free(t->pins[i].on_disk);
    }
    free(t->pins);
    dy_holds_free(t->holds);
    free(t->loads);
    free(t->hashes);
    free(t->published);
    free(t->oldest);
    free(t);
}

dy_kv_tier *dy_kv_tiers_host(dy_kv_tiers *t)
{
    return t ? t->host : NULL;
}

dy_kv_tier *dy_kv_tiers_disk(dy_kv_tiers *t)
{
    return t ? t->disk : NULL;
}

bool dy_kv_tiers_busy(const dy_kv_tiers *t)
{
    return t && dy_kv_mover_outstanding(t->mover) > 0;
}

/* ---------------------------------------------------------------- where bytes live */

static char *host_slot(const dy_kv_tiers *t, int32_t slot)
{
    return t->host_mem + (size_t)slot * t->block_bytes;
}

static char *primary_block(const dy_kv_tiers *t, int32_t block)
{
    return (char *)dy_kv_block_data(t->pool, block);
}

static bool disk_usable(const dy_kv_tiers *t)
{
    return t->disk && !t->disk_off;
}

/* A disk error: the tier is switched off for good, its blocks leave the index; copies in
 * flight end on their own (the file stays open until the mover has stopped). */
static void disk_failed(dy_kv_tiers *t, int err)
{
    t->st[T_DISK].errors++;
    if (t->disk_off)
        return;
    fprintf(stderr, "dyad worker %d: disk tier off: %s\n", t->cfg.worker_id, strerror(err));
    t->disk_off = true;
    dy_kv_tier_clear(t->disk);
}

static bool submit(dy_kv_tiers *t, const dy_kv_move *j)
{
    return dy_kv_mover_submit(t->mover, j);
}

/* ---------------------------------------------------------------- copies down */

/* Primary block b (published under hash, parent) to a new host slot. */
static void copy_to_host(dy_kv_tiers *t, int32_t b, uint64_t hash, uint64_t parent, bool back)
{
    if (t->down_in_flight >= DOWN_CAP || dy_kv_tier_has(t->host, hash))
        return;
    int32_t s = dy_kv_tier_reserve(t->host, hash, parent, 1); /* the prompt that made it */
    if (s < 0)
        return;
    dy_kv_move j = {.kind = DY_MOVE_MEM, .src = primary_block(t, b), .dst = host_slot(t, s),
                    .bytes = t->block_bytes, .purpose = JOB_DOWN_HOST, .a = b, .b = s,
                    .id = back};
    dy_kv_cache_pin(t->kv, b);
    if (!submit(t, &j)) {
        dy_kv_tier_filled(t->host, s, false, 0);
        if (back)
            dy_kv_cache_unpin_oldest(t->kv, b);
        else
            dy_kv_cache_release(t->kv, b);
        return;
    }
    t->down_in_flight++;
}

/* Write-through: what was published since the last tick. */
static void write_through(dy_kv_tiers *t)
{
    int n = dy_kv_cache_take_published(t->kv, t->published, t->pool->n_blocks);
    for (int i = 0; i < n; i++) {
        uint64_t hash, parent;
        if (dy_kv_cache_block_hash(t->kv, t->published[i].block, &hash, &parent))
            copy_to_host(t, t->published[i].block, hash, parent, false);
    }
}

/* Write-back: the blocks eviction takes next, before it takes them. */
static void write_back(dy_kv_tiers *t)
{
    int n = dy_kv_cache_oldest_evictable(t->kv, t->oldest, t->window);
    for (int i = 0; i < n; i++) {
        uint64_t hash, parent;
        if (dy_kv_cache_block_hash(t->kv, t->oldest[i], &hash, &parent))
            copy_to_host(t, t->oldest[i], hash, parent, true);
    }
}

/* Host slots eviction takes next that were asked for often enough go to disk first. */
static void demote_to_disk(dy_kv_tiers *t)
{
    if (!disk_usable(t))
        return;
    int n = dy_kv_tier_oldest(t->host, t->oldest, t->window);
    for (int i = 0; i < n && t->down_in_flight < DOWN_CAP; i++) {
        int32_t hs = t->oldest[i];
        uint64_t hash = dy_kv_tier_hash(t->host, hs);
        uint32_t uses = dy_kv_tier_uses(t->host, hs);
        if (uses < (uint32_t)t->cfg.disk_min_uses || dy_kv_tier_has(t->disk, hash))
            continue;
        int32_t ds = dy_kv_tier_reserve(t->disk, hash, dy_kv_tier_parent(t->host, hs), uses);
        if (ds < 0)
            return;
        dy_kv_move j = {.kind = DY_MOVE_TO_FILE, .src = host_slot(t, hs), .fd = t->disk_fd,
                        .off = (off_t)ds * (off_t)t->block_bytes, .bytes = t->block_bytes,
                        .purpose = JOB_DOWN_DISK, .a = hs, .b = ds};
        dy_kv_tier_pin(t->host, hs);
        if (!submit(t, &j)) {
            dy_kv_tier_unpin(t->host, hs);
            dy_kv_tier_filled(t->disk, ds, false, 0);
            return;
        }
        t->down_in_flight++;
    }
}

/* ---------------------------------------------------------------- copies up */

static load *find_load(dy_kv_tiers *t, uint64_t id)
{
    for (int i = 0; i < t->n_loads; i++)
        if (t->loads[i].id == id)
            return &t->loads[i];
    return NULL;
}

/* The last copy of a load has ended: its sequence may go on. */
static void end_load(dy_kv_tiers *t, load *l)
{
    if (l->seq) {
        l->res->outcome = l->failed ? DY_TIER_LOAD_FAILED : DY_TIER_LOADED;
        l->res->tokens = l->failed ? 0 : (uint32_t)(l->blocks * t->pool->block_size);
        l->res->wait_us = (uint32_t)fmin((dy_now() - l->started) * 1e6, (double)UINT32_MAX);
        dy_sched_remote_ready(t->sched, (dy_seq *)l->seq, !l->failed);
    }
    if (l->failed)
        t->n_failed++;
    else
        t->n_loaded++;
    *l = t->loads[--t->n_loads];
}

static bool grow_loads(dy_kv_tiers *t)
{
    if (t->n_loads < t->loads_cap)
        return true;
    int cap = t->loads_cap ? 2 * t->loads_cap : 16;
    load *p = realloc(t->loads, sizeof *p * (size_t)cap);
    if (!p)
        return false;
    t->loads = p;
    t->loads_cap = cap;
    return true;
}

/* Where block hash can be loaded from: the host tier first (faster), then disk. */
static dy_kv_tier *holder(const dy_kv_tiers *t, uint64_t hash, int32_t *slot)
{
    if ((*slot = dy_kv_tier_find(t->host, hash)) >= 0)
        return t->host;
    if (disk_usable(t) && (*slot = dy_kv_tier_find(t->disk, hash)) >= 0)
        return t->disk;
    return NULL;
}

/* A copy from slot s of tier `from` into primary block b (the slot pinned until it ends); the
 * tier rides in the purpose's high bits. */
static dy_kv_move up_job(dy_kv_tiers *t, dy_kv_tier *from, int32_t s, int32_t b, int purpose,
                         uint64_t id)
{
    dy_kv_move j = {.purpose = purpose | (dy_kv_tier_id(from) << 4), .a = s, .b = b, .id = id,
                    .dst = primary_block(t, b), .bytes = t->block_bytes};
    if (from == t->host) {
        j.kind = DY_MOVE_MEM;
        j.src = host_slot(t, s);
    } else {
        j.kind = DY_MOVE_FROM_FILE;
        j.fd = t->disk_fd;
        j.off = (off_t)s * (off_t)t->block_bytes;
        j.checksum = dy_kv_tier_checksum(t->disk, s);
    }
    dy_kv_tier_pin(from, s);
    return j;
}

static bool ensure_hashes(dy_kv_tiers *t, int n)
{
    if (n <= t->hashes_cap)
        return true;
    uint64_t *p = realloc(t->hashes, sizeof *p * (size_t)n);
    if (!p)
        return false;
    t->hashes = p;
    t->hashes_cap = n;
    return true;
}

/* A tier's time per block: as measured loading, else as measured copying down (the same
 * memory for the host tier), else unknown. */
static dy_kv_rate rate_up(const dy_kv_tiers *t, int tier)
{
    return t->up[tier].n > 0 ? t->up[tier] : t->down[tier];
}

dy_tier_plan dy_kv_tiers_plan(dy_kv_tiers *t, const int32_t *prompt, int n_prompt)
{
    dy_tier_plan p = {0};
    const int bs = t->pool->block_size;
    int n = (n_prompt - 1) / bs;
    if (n <= 0 || !ensure_hashes(t, n))
        return p;
    dy_kv_cache_hash_blocks(t->kv, prompt, n, t->hashes);
    int primary = dy_kv_cache_peek(t->kv, t->hashes, n);
    int blocks[DY_KV_N_TIERS] = {0};
    bool run = true;
    for (int i = 0; i < n; i++) {
        /* every use counts, also of blocks served from the primary pool */
        bool in_host = dy_kv_tier_touch(t->host, t->hashes[i]) >= 0;
        bool in_disk = disk_usable(t) && dy_kv_tier_touch(t->disk, t->hashes[i]) >= 0;
        if (i < primary || !run)
            continue;
        if (in_host)
            blocks[DY_KV_TIER_HOST]++;
        else if (in_disk)
            blocks[DY_KV_TIER_DISK]++;
        else
            run = false;
    }
    p.blocks = blocks[DY_KV_TIER_HOST] + blocks[DY_KV_TIER_DISK];
    if (p.blocks == 0)
        return p;
    p.upto = primary + p.blocks;
    dy_kv_rate up[DY_KV_N_TIERS] = {{0}, rate_up(t, DY_KV_TIER_HOST), rate_up(t, DY_KV_TIER_DISK)};
    double queued = (double)dy_kv_mover_queued_bytes(t->mover) / (double)t->block_bytes *
                    (up[DY_KV_TIER_HOST].n ? up[DY_KV_TIER_HOST].mean : 0);
    p.choice = dy_kv_choose(up, blocks, queued, p.blocks * bs, &t->prefill);
    if (!p.choice.load)
        t->n_recomputed++;
    return p;
}

bool dy_kv_tiers_load(dy_kv_tiers *t, dy_seq *seq, int upto, dy_tier_result *res)
{
    int first = seq->n_published, n = upto - first;
    if (n <= 0 || seq->n_blocks < upto || !grow_loads(t) ||
        dy_kv_mover_outstanding(t->mover) + n > MOVER_CAP)
        return false;
    for (int i = first; i < upto; i++) { /* every block still there, or nothing starts */
        int32_t s;
        if (!holder(t, seq->hashes[i], &s))
            return false;
    }
    load *l = &t->loads[t->n_loads++];
    *l = (load){.id = ++t->next_load, .seq = seq, .res = res, .started = dy_now(),
                .remaining = n, .blocks = n};
    for (int i = first; i < upto; i++) {
        int32_t s, b = seq->blocks[i];
        dy_kv_tier *from = holder(t, seq->hashes[i], &s);
        dy_kv_move j = up_job(t, from, s, b, JOB_UP, l->id);
        dy_kv_ref(t->pool, b); /* the copy's own hold: the sequence may end before it does */
        submit(t, &j);         /* room was checked above */
    }
    return true;
}

void dy_kv_tiers_forget(dy_kv_tiers *t, const dy_seq *seq)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_loads; i++)
        if (t->loads[i].seq == seq)
            t->loads[i].seq = NULL;
}

/* ---------------------------------------------------------------- finished copies */

static void account(dy_msg_tier_stats *in, dy_msg_tier_stats *out, const dy_kv_move *j)
{
    if (in) {
        in->blocks_in++;
        in->bytes_in += j->bytes;
        in->seconds_in += j->seconds;
    }
    if (out) {
        out->blocks_out++;
        out->bytes_out += j->bytes;
        out->seconds_out += j->seconds;
    }
}

static void down_host_done(dy_kv_tiers *t, const dy_kv_move *j)
{
    t->down_in_flight--;
    t->host_fills++;
    dy_kv_tier_filled(t->host, j->b, j->ok, 0);
    if (j->id)
        dy_kv_cache_unpin_oldest(t->kv, j->a);
    else
        dy_kv_cache_release(t->kv, j->a);
    account(&t->st[T_HOST], NULL, j);
    dy_kv_rate_observe(&t->down[DY_KV_TIER_HOST], j->seconds, 1);
}

static void down_disk_done(dy_kv_tiers *t, const dy_kv_move *j)
{
    t->down_in_flight--;
    dy_kv_tier_unpin(t->host, j->a);
    dy_kv_tier_filled(t->disk, j->b, j->ok, j->checksum);
    if (!j->ok) {
        disk_failed(t, j->err ? j->err : EIO);
        return;
    }
    account(&t->st[T_DISK], &t->st[T_HOST], j);
    dy_kv_rate_observe(&t->down[DY_KV_TIER_DISK], j->seconds, 1);
}

/* A copy up (up_job) ended: counted and timed, or its slot dropped (bad bytes) or its tier
 * switched off (an I/O error); the slot unpinned. The tier it came from. */
static dy_kv_tier *up_ended(dy_kv_tiers *t, const dy_kv_move *j)
{
    int tier = j->purpose >> 4;
    dy_kv_tier *from = tier == DY_KV_TIER_HOST ? t->host : t->disk;
    if (j->ok) {
        account(NULL, &t->st[tier == DY_KV_TIER_HOST ? T_HOST : T_DISK], j);
        dy_kv_rate_observe(&t->up[tier], j->seconds, 1);
    } else if (j->err == 0) {
        dy_kv_tier_drop_bad(from, j->a); /* read whole, but not what was written */
    } else {
        disk_failed(t, j->err);
    }
    dy_kv_tier_unpin(from, j->a);
    return from;
}

static void up_done(dy_kv_tiers *t, const dy_kv_move *j)
{
    up_ended(t, j);
    dy_kv_cache_release(t->kv, j->b);
    load *l = find_load(t, j->id);
    if (!l)
        return;
    l->failed |= !j->ok;
    if (--l->remaining == 0)
        end_load(t, l);
}

void dy_kv_tiers_observe_prefill(dy_kv_tiers *t, int tokens, double seconds)
{
    if (t && tokens >= t->pool->block_size)
        dy_kv_rate_observe(&t->prefill, seconds, tokens);
}

/* ---------------------------------------------------------------- the hold */

static hold_pins *pins_of(dy_kv_tiers *t, uint64_t key)
{
    for (int i = 0; i < t->n_pins; i++)
        if (t->pins[i].key == key)
            return &t->pins[i];
    return NULL;
}

/* Lets go of what was pinned for session key. */
static void unpin_session(dy_kv_tiers *t, uint64_t key)
{
    hold_pins *p = pins_of(t, key);
    if (!p)
        return;
    for (int i = 0; i < p->n; i++) {
        if (p->ids[i] < 0)
            continue;
        if (t->cfg.hold == DY_HOLD_PIN)
            dy_kv_cache_release(t->kv, p->ids[i]);
        else if (!p->on_disk[i])
            dy_kv_tier_unpin(t->host, p->ids[i]);
        else if (disk_usable(t)) /* a disk switched off has dropped its slots and pins */
            dy_kv_tier_unpin(t->disk, p->ids[i]);
    }
    t->pinned -= p->n_pinned;
    free(p->ids);
    free(p->on_disk);
    *p = t->pins[--t->n_pins];
}

/* Pins the blocks of p not pinned yet that are there to pin, within the holds' share. */
static void pin_missing(dy_kv_tiers *t, hold_pins *p, const uint64_t *hashes)
{
    const bool primary = t->cfg.hold == DY_HOLD_PIN;
    int room = (int)(t->cfg.hold_share * (primary ? t->pool->n_blocks : dy_kv_tier_slots(t->host)));
    p->tried_at = t->host_fills;
    for (int i = 0; i < p->n && t->pinned < room; i++) {
        if (p->ids[i] >= 0)
            continue;
        int32_t id = primary ? dy_kv_cache_find(t->kv, hashes[i]) : dy_kv_tier_find(t->host, hashes[i]);
        if (id < 0)
            continue;
        if (primary)
            dy_kv_cache_pin(t->kv, id);
        else
            dy_kv_tier_pin(t->host, id);
        p->ids[i] = id;
        p->n_pinned++;
        t->pinned++;
    }
}

static void park(dy_kv_tiers *t, const dy_hold *h);

/* Once copies into the host tier have ended: the held sessions' blocks that were not there
 * when their hold began are pinned now (and sent on to disk if their hold is parked). */
static void pin_arrivals(dy_kv_tiers *t)
{
    for (int k = 0; k < t->n_pins; k++) {
        hold_pins *p = &t->pins[k];
        const dy_hold *h;
        if (p->n_pinned == p->n || p->tried_at == t->host_fills ||
            !(h = dy_holds_find(t->holds, p->key)))
            continue;
        int before = p->n_pinned;
        pin_missing(t, p, h->hashes);
        if (h->parked && p->n_pinned > before)
            park(t, h);
    }
}

/* Pins what the policy keeps of a held session, within its share: the blocks still in the KV
 * cache (pin), or their host-tier copies (prefetch). */
static void pin_session(dy_kv_tiers *t, uint64_t key, const uint64_t *hashes, int n)
{
    if (t->n_pins == t->pins_cap) {
        int cap = t->pins_cap ? 2 * t->pins_cap : 16;
        hold_pins *p = realloc(t->pins, sizeof *p * (size_t)cap);
        if (!p)
            return;
        t->pins = p;
        t->pins_cap = cap;
    }
    hold_pins *p = &t->pins[t->n_pins];
    *p = (hold_pins){.key = key, .ids = malloc(sizeof *p->ids * (size_t)(n > 0 ? n : 1)),
                     .on_disk = calloc((size_t)(n > 0 ? n : 1), sizeof *p->on_disk), .n = n};
    if (!p->ids || !p->on_disk) {
        free(p->ids);
        free(p->on_disk);
        return;
    }
    for (int i = 0; i < n; i++)
        p->ids[i] = -1;
    t->n_pins++;
    pin_missing(t, p, hashes);
}

void dy_kv_tiers_hold_begin(dy_kv_tiers *t, uint64_t key, const uint64_t *hashes, int n,
                            uint32_t hold_ms)
{
    if (!t || !t->holds || n <= 0)
        return;
    double now = dy_now();
    dy_hold ended;
    if (!dy_holds_begin(t->holds, key, hashes, n, now, &ended))
        return;
    if (ended.key)
        unpin_session(t, ended.key);
    pin_session(t, key, hashes, n);
    if (hold_ms != DY_WIRE_NO_HOLD)
        dy_holds_expect(t->holds, key, now + hold_ms / 1e3);
}

void dy_kv_tiers_hold_end(dy_kv_tiers *t, uint64_t key)
{
    dy_hold out;
    if (t && t->holds && dy_holds_end(t->holds, key, &out))
        unpin_session(t, key);
}

void dy_kv_tiers_hold_frame(dy_kv_tiers *t, const dy_msg_hold *m)
{
    if (!t || !t->holds)
        return;
    if (m->release)
        dy_kv_tiers_hold_end(t, m->session);
    else if (m->expected_ms != DY_WIRE_NO_HOLD)
        dy_holds_expect(t->holds, m->session, dy_now() + m->expected_ms / 1e3);
}

/* A long wait: the held session's host-tier copies go to disk, where they wait pinned, and
 * their host slots are let go, free for traffic that needs them sooner. A block already on
 * disk only moves its pin. */
static void park(dy_kv_tiers *t, const dy_hold *h)
{
    hold_pins *p = pins_of(t, h->key);
    for (int i = 0; p && i < p->n && disk_usable(t); i++) {
        if (p->ids[i] < 0 || p->on_disk[i])
            continue;
        int32_t hs = p->ids[i];
        uint64_t hash = dy_kv_tier_hash(t->host, hs);
        int32_t ds = dy_kv_tier_find(t->disk, hash);
        if (ds >= 0) {
            dy_kv_tier_pin(t->disk, ds);
            dy_kv_tier_unpin(t->host, hs);
            p->ids[i] = ds;
            p->on_disk[i] = true;
            continue;
        }
        if (t->down_in_flight >= DOWN_CAP)
            return;
        ds = dy_kv_tier_reserve(t->disk, hash, dy_kv_tier_parent(t->host, hs),
                                dy_kv_tier_uses(t->host, hs));
        if (ds < 0)
            return;
        dy_kv_move j = {.kind = DY_MOVE_TO_FILE, .src = host_slot(t, hs), .fd = t->disk_fd,
                        .off = (off_t)ds * (off_t)t->block_bytes, .bytes = t->block_bytes,
                        .purpose = JOB_PARK, .a = hs, .b = ds, .id = h->key};
        dy_kv_tier_pin(t->host, hs); /* for the copy, beside the session's own pin */
        if (!submit(t, &j)) {
            dy_kv_tier_unpin(t->host, hs);
            dy_kv_tier_filled(t->disk, ds, false, 0);
            return;
        }
        t->down_in_flight++;
    }
}

/* A parked block is on disk: if its session still holds the host slot, the pin moves down. */
static void park_done(dy_kv_tiers *t, const dy_kv_move *j)
{
    down_disk_done(t, j);
    hold_pins *p = pins_of(t, j->id);
    if (!j->ok || !p || !disk_usable(t))
        return;
    for (int i = 0; i < p->n; i++)
        if (p->ids[i] == j->a && !p->on_disk[i]) {
            dy_kv_tier_pin(t->disk, j->b);
            dy_kv_tier_unpin(t->host, j->a);
            p->ids[i] = j->b;
            p->on_disk[i] = true;
            t->parked_blocks++;
            return;
        }
}

/* Brings a held session's blocks up into the KV cache ahead of its next turn, as far as its
 * chain is held in the tiers: each lands as a cached block (evictable, so it never holds the
 * pool against new work), published when its copy ends. At most its share of the pool. */
static void prefetch(dy_kv_tiers *t, const dy_hold *h)
{
    int budget = (int)(t->cfg.hold_share * t->pool->n_blocks);
    for (int i = 0; i < h->n && budget > 0; i++) {
        if (dy_kv_cache_find(t->kv, h->hashes[i]) >= 0)
            continue;
        int32_t s;
        dy_kv_tier *from = holder(t, h->hashes[i], &s);
        if (!from || dy_kv_mover_outstanding(t->mover) >= MOVER_CAP - 1)
            return; /* the chain stops here: later blocks could not be used anyway */
        int32_t b = dy_kv_cache_alloc(t->kv);
        if (b < 0)
            return;
        dy_kv_move j = up_job(t, from, s, b, JOB_PREFETCH, h->hashes[i]);
        submit(t, &j);
        budget--;
    }
}

static void prefetch_done(dy_kv_tiers *t, const dy_kv_move *j)
{
    /* the slot's parent is read before up_ended unpins it (and it may be reused) */
    dy_kv_tier *from = (j->purpose >> 4) == DY_KV_TIER_HOST ? t->host : t->disk;
    uint64_t parent = dy_kv_tier_parent(from, j->a);
    up_ended(t, j);
    if (j->ok) {
        /* a block computed meanwhile under the same hash wins; this one is then just freed */
        dy_kv_cache_publish_chained(t->kv, j->b, (uint64_t)j->id, parent);
        t->prefetched_blocks++;
    }
    dy_kv_cache_release(t->kv, j->b);
}

/* Once per tick: holds past their TTL end; those whose prefetch is due start it. */
static void tend_holds(dy_kv_tiers *t)
{
    if (!t->holds)
        return;
    double now = dy_now();
    dy_hold out;
    while (dy_holds_expire(t->holds, now, &out)) {
        unpin_session(t, out.key);
        t->holds_expired++;
    }
    if (t->cfg.hold != DY_HOLD_PREFETCH)
        return;
    pin_arrivals(t);
    const dy_hold *due[16];
    int n;
    if (disk_usable(t) && t->cfg.hold_disk_after_s > 0) {
        n = dy_holds_long(t->holds, now, t->cfg.hold_disk_after_s, due, 16);
        for (int i = 0; i < n; i++)
            park(t, due[i]);
    }
    dy_kv_rate up = rate_up(t, DY_KV_TIER_HOST), disk = rate_up(t, DY_KV_TIER_DISK);
    /* no disk load timed yet: a parked hold is assumed to come up at the host's rate */
    double s_host = up.n ? up.mean : 0, s_disk = disk.n ? disk.mean : s_host;
    n = dy_holds_due(t->holds, now, s_host, s_disk, due, 16);
    for (int i = 0; i < n; i++)
        prefetch(t, due[i]);
}

/* ---------------------------------------------------------------- the loop's tick */

void dy_kv_tiers_tick(dy_kv_tiers *t)
{
    int n;
    while ((n = dy_kv_mover_take(t->mover, t->done, (int)(sizeof t->done / sizeof t->done[0]))) > 0)
        for (int i = 0; i < n; i++) {
            const dy_kv_move *j = &t->done[i];
            switch (j->purpose & 15) {
            case JOB_DOWN_HOST: down_host_done(t, j); break;
            case JOB_DOWN_DISK: down_disk_done(t, j); break;
            case JOB_UP: up_done(t, j); break;
            case JOB_PREFETCH: prefetch_done(t, j); break;
            case JOB_PARK: park_done(t, j); break;
            }
        }
    tend_holds(t);
    if (t->cfg.offload == DY_OFFLOAD_WRITE_THROUGH)
        write_through(t);
    else
        write_back(t);
    demote_to_disk(t);
}

/* ---------------------------------------------------------------- counters */

static void tier_stats(const dy_kv_tier *x, bool on, dy_msg_tier_stats *out)
{
    if (!x)
        return;
    dy_kv_tier_stats s = dy_kv_tier_get_stats(x);
    out->on = on;
    out->slots = (uint32_t)dy_kv_tier_slots(x);
    out->used = (uint32_t)dy_kv_tier_used(x);
    out->evicted = s.evicted;
    out->bad = s.bad;
}

void dy_kv_tiers_stats(const dy_kv_tiers *t, dy_msg_stats *m)
{
    memset(m->tiers, 0, sizeof m->tiers);
    m->tier_loads = m->tier_recomputes = m->tier_load_failures = 0;
    m->hold_sessions = m->hold_pinned = 0;
    m->hold_prefetched_blocks = m->hold_expired = m->hold_parked_blocks = 0;
    if (!t)
        return;
    m->tiers[T_HOST] = t->st[T_HOST];
    m->tiers[T_DISK] = t->st[T_DISK];
    tier_stats(t->host, true, &m->tiers[T_HOST]);
    tier_stats(t->disk, disk_usable(t), &m->tiers[T_DISK]);
    m->tier_loads = t->n_loaded;
    m->tier_recomputes = t->n_recomputed;
    m->tier_load_failures = t->n_failed;
    m->hold_sessions = t->holds ? (uint32_t)dy_holds_count(t->holds) : 0;
    m->hold_pinned = (uint32_t)t->pinned;
    m->hold_prefetched_blocks = t->prefetched_blocks;
    m->hold_parked_blocks = t->parked_blocks;
    m->hold_expired = t->holds_expired;
}
