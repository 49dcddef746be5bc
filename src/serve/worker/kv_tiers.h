/* kv_tiers.h — a worker's lower KV tiers and what moves blocks between them: a host tier (a
 * pool of plain memory, --kv-host-mem) and a disk tier (one file, --kv-disk-dir and
 * --kv-disk-mem), the mover thread (kv_mover.h), and the policies:
 *
 *   down   write-through: every block the prefix cache publishes is copied to the host tier;
 *          write-back: the blocks eviction would take next are copied just before it does.
 *          Host slots asked for at least --kv-disk-min-uses times go on to disk before the
 *          host tier evicts them (the frequency filter: a block seen once rarely comes back).
 *          Tiers are not inclusive: a block may be on disk and no longer in host memory.
 *   up     a prompt whose cached prefix continues in a lower tier loads those blocks into the
 *          primary pool if that is cheaper than computing them (tier_choice.h, from measured
 *          rates); the sequence waits (DY_SEQ_REMOTE) while the copies run.
 *
 * The step loop calls dy_kv_tiers_tick once per iteration; no call blocks on a copy. Disk
 * errors switch the disk tier off (a line on stderr, a metric) and serving goes on; a block
 * that fails its checksum is dropped and its prompt recomputed. */
#ifndef DYAD_KV_TIERS_H
#define DYAD_KV_TIERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kv/kv_cache.h"
#include "kv/kv_tier.h"
#include "kv/tier_choice.h"
#include "sched/sched.h"
#include "serve/wire/wire.h"

typedef enum { DY_OFFLOAD_WRITE_THROUGH = 0, DY_OFFLOAD_WRITE_BACK = 1 } dy_offload_policy;

/* What a worker does with a conversation's KV between its turns (dyad.session). */
typedef enum {
    DY_HOLD_PREFETCH = 0, /* kept in the tiers (host slots pinned, within a share), brought up
                           * into the KV cache at return − load time − margin */
    DY_HOLD_PIN = 1,      /* its blocks pinned in the KV cache until the next turn or the TTL
                           * (within a share of the pool) */
    DY_HOLD_OFF = 2,      /* nothing special: LRU and the tiers as for any prompt */
} dy_hold_policy;

typedef struct {
    int host_mib;            /* 0: no host tier (and then no disk tier either) */
    const char *disk_dir;    /* NULL: no disk tier */
    double disk_gib;
    int offload;             /* dy_offload_policy */
    int disk_min_uses;
    int worker_id;           /* for log lines and the file name */
    int hold;                /* dy_hold_policy */
    double hold_ttl_s;       /* a held conversation is let go this long after its turn */
    double hold_margin_s;    /* the prefetch is due this much before the expected return */
    double hold_share;       /* of the host tier (prefetch) or the pool (pin) that holds may pin */
    double hold_disk_after_s; /* prefetch: a hold expected back at least this late waits on
                               * disk, its host copies unpinned (0: never) */
} dy_kv_tiers_config;

/* A request's dealings with the lower tiers, as its DONE reports them. */
typedef struct {
    uint8_t outcome;         /* dy_tier_outcome (wire.h) */
    uint32_t tokens;         /* prompt tokens loaded */
    uint32_t load_us, recompute_us; /* the estimates it was chosen on (UINT32_MAX: unknown) */
    uint32_t wait_us;        /* measured: from the first copy queued to the last one done */
} dy_tier_result;

typedef struct dy_kv_tiers dy_kv_tiers;

/* NULL with a message in err when the host tier cannot be had (memory); a disk tier that
 * cannot be set up is only switched off (a line on stderr). Returns NULL without an error
 * (err[0] == 0) when cfg->host_mib is 0: no tiers. */
dy_kv_tiers *dy_kv_tiers_new(const dy_kv_tiers_config *cfg, dy_kv_cache *kv, dy_sched *sched,
                             char *err, size_t errlen);
/* Waits for the copies in flight. */
void dy_kv_tiers_free(dy_kv_tiers *t);

/* The lower tiers, for the event publisher (NULL where there is none). */
dy_kv_tier *dy_kv_tiers_host(dy_kv_tiers *t);
dy_kv_tier *dy_kv_tiers_disk(dy_kv_tiers *t);

/* Copies in flight or finished and not yet handled: the loop should not sleep long. */
bool dy_kv_tiers_busy(const dy_kv_tiers *t);

/* Once per loop iteration, after the step: handles finished copies (sequences whose blocks
 * have all arrived join the queue) and starts new ones down the tiers. */
void dy_kv_tiers_tick(dy_kv_tiers *t);
/* The prefill rate, measured by the loop: `seconds` for a step that computed `tokens` prompt
 * tokens (and some decode tokens: the rate is an estimate). */
void dy_kv_tiers_observe_prefill(dy_kv_tiers *t, int tokens, double seconds);

/* What a new prompt would load: how many of its blocks after the primary prefix are in lower
 * tiers (0: none), the block to load up to, and the estimates. Counts the prompt's use of
 * every lower-tier block it names (the frequency filter, and LRU order). */
typedef struct {
    int blocks;              /* lower-tier blocks after the primary prefix */
    int upto;                /* load blocks [primary prefix, upto) */
    dy_kv_choice choice;
} dy_tier_plan;
dy_tier_plan dy_kv_tiers_plan(dy_kv_tiers *t, const int32_t *prompt, int n_prompt);
/* Starts the copies into seq's blocks [seq->n_published, upto) (seq is DY_SEQ_REMOTE, from
 * dy_sched_add_loading). When they have all ended, dy_sched_remote_ready(seq, ok) is called
 * and *res (the caller's, alive until then or until dy_kv_tiers_forget) gets the outcome
 * (DY_TIER_LOADED or DY_TIER_LOAD_FAILED), the tokens loaded and the wait. false (and
 * nothing started) if the blocks are no longer there or the mover is full: the caller
 * readies the sequence itself. */
bool dy_kv_tiers_load(dy_kv_tiers *t, dy_seq *seq, int upto, dy_tier_result *res);
/* seq is ending: its copies run on (their blocks stay held until they end) but nobody is
 * told. */
void dy_kv_tiers_forget(dy_kv_tiers *t, const dy_seq *seq);

/* ---- the tool-call hold (kv/hold.h): NULL-safe, and no-ops with --kv-hold off. */
/* A turn of session `key` ended; its KV is blocks hashes[0..n) (the full blocks of prompt and
 * answer). hold_ms: when the next turn is expected (DY_WIRE_NO_HOLD: not known yet). */
void dy_kv_tiers_hold_begin(dy_kv_tiers *t, uint64_t key, const uint64_t *hashes, int n,
                            uint32_t hold_ms);
/* The frontend's word on a held session (a HOLD frame). */
void dy_kv_tiers_hold_frame(dy_kv_tiers *t, const dy_msg_hold *m);
/* The session's next turn arrived: what was pinned for it is let go. */
void dy_kv_tiers_hold_end(dy_kv_tiers *t, uint64_t key);

/* The tiers' counters into STATS (zeros when t is NULL). */
void dy_kv_tiers_stats(const dy_kv_tiers *t, dy_msg_stats *m);

#endif
