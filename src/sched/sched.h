/* sched.h — continuous batching for one worker (pure policy: no I/O, no clocks, no threads).
 * Each step's plan gives every running sequence that has finished its prompt one decode
 * token, then fills the rest of the token budget with prompt chunks: first the running
 * sequences still mid-prompt, then waiting sequences in arrival order (first come, first
 * served; the head of the queue is never skipped, so nothing starves). Admission looks the
 * prompt up in the prefix cache, so cached leading blocks are not recomputed. When the KV
 * pool runs out, the youngest running sequence is preempted: its blocks are released and it
 * goes back to the front of the queue, to be recomputed later (its published blocks may still
 * be found in the cache then).
 *
 * The caller (the worker) runs the plan through the engine, samples a token for every item
 * that wants logits, and reports them with dy_sched_commit; it ends sequences with
 * dy_sched_finish (stop conditions are the caller's: EOS, stop strings, max tokens). */
#ifndef DYAD_SCHED_H
#define DYAD_SCHED_H

#include <stdbool.h>
#include <stdint.h>
#include "kv/kv_cache.h"

typedef enum {
    DY_SEQ_WAITING,
    DY_SEQ_RUNNING,
    DY_SEQ_REMOTE, /* blocks set aside; its prompt is being computed by a prefill worker */
    DY_SEQ_FORK,   /* a sample waiting for its leader's prompt (dy_sched_fork) */
} dy_seq_state;

typedef struct dy_seq {
    uint64_t id;
    void *user;            /* the caller's per-request state */
    dy_seq_state state;
    int32_t *tokens;       /* prompt, then generated tokens */
    int n_tokens, cap;
    int n_prompt;
    int max_len;           /* n_tokens never exceeds this (context length) */
    int n_computed;        /* leading tokens whose KV is in this sequence's blocks */
    int n_cached;          /* prompt tokens found in the prefix cache at first admission */
    bool admitted_once;
    int n_preemptions;
    int32_t *blocks;       /* block table */
    int n_blocks, blocks_cap;
    int n_published;       /* leading blocks already published to the prefix index */
    int remote_len;        /* DY_SEQ_REMOTE: positions [0, remote_len) come from outside */
    uint64_t *hashes;      /* chained hashes of full blocks */
    int n_hashed;          /* leading hashes computed so far */
    uint64_t order;        /* arrival order: smaller is older */
    struct dy_seq *prev, *next; /* in its list (waiting or running) */
    /* repeated sampling: a leader's samples waiting to fork its prompt blocks */
    struct dy_seq *forks, *fork_next, *leader;
} dy_seq;

typedef struct {
    dy_seq *seq;
    int start;     /* first position computed in this step */
    int n;         /* tokens computed */
    bool logits;   /* true when the step reaches the end of the sequence: sample after it */
} dy_plan_item;

typedef struct {
    int max_batch_tokens; /* token budget of one step */
    int max_running;      /* sequences in the running batch at most */
    bool no_prefix_cache; /* never look prompts up nor publish blocks (for measurements) */
} dy_sched_config;

typedef struct dy_sched dy_sched;

/* A block to copy before the step runs: a forked sample's own copy of the partly filled
 * last prompt block it is about to write into. */
typedef struct {
    int32_t src, dst;
} dy_block_copy;

typedef struct {
    dy_plan_item *items;
    int n_items;
    dy_block_copy *copies; /* done by the caller before running the items */
    int n_copies;
    int n_tokens;
    int n_decode;     /* items that are single decode tokens */
    int n_preempted;  /* sequences preempted while planning this step */
} dy_plan;

dy_sched *dy_sched_new(const dy_sched_config *cfg, dy_kv_cache *kv);
void dy_sched_free(dy_sched *s); /* frees every sequence still held */

/* Whether a prompt can be queued at all: not empty, shorter than max_len, and its blocks
 * (with room for the first generated token) no more than the whole pool. */
bool dy_sched_fits(const dy_sched *s, int n_prompt, int max_len);
/* Queues a request. The tokens are copied. NULL if out of memory or if the prompt does not
 * fit (dy_sched_fits). */
dy_seq *dy_sched_add(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt, int max_len,
                     void *user);
/* Disaggregated prefill, on the decode worker. Like dy_sched_add, but the prompt's KV will
 * arrive from a prefill worker: the cached prefix is looked up and blocks for the rest of
 * positions [0, n_prompt - 1) are set aside now (the last prompt token is computed here, in a
 * decode step, and its logits give the first generated token). The sequence is then
 * DY_SEQ_REMOTE and is not scheduled until dy_sched_remote_ready. If the pool cannot hold the
 * blocks, or the whole prompt is cached anyway, it is queued for local prefill instead
 * (state DY_SEQ_WAITING). NULL as dy_sched_add. */
dy_seq *dy_sched_add_remote(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt,
                            int max_len, void *user);
/* A lower tier (kv_tier.h) holds the prompt's blocks after its cached prefix, up to block
 * upto_blocks (exclusive; at most the full blocks before the last prompt token): as
 * dy_sched_add_remote, but only those blocks will be written from outside; the rest of the
 * prompt is computed here once the sequence is ready. The blocks to fill are
 * seq->blocks[seq->n_published .. upto_blocks), under seq->hashes[...]. If the prefix cache
 * already covers them, or the pool cannot hold them, the sequence is WAITING instead. */
dy_seq *dy_sched_add_loading(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt,
                             int max_len, int upto_blocks, void *user);
/* The KV has been written into the blocks set aside (ok), or that failed (!ok: the rest of
 * the prompt after the cached prefix is computed here). Either way the sequence joins the
 * front of the queue; on success its full blocks are published to the prefix cache. */
void dy_sched_remote_ready(dy_sched *s, dy_seq *seq, bool ok);

/* Repeated sampling: another sample of `leader`'s prompt (same tokens and max_len). The
 * prompt is computed once: the leader computes positions [0, n_prompt - 1) alone, then each
 * sample forks its block table — the full blocks are shared by reference count, the partly
 * filled last one is copied (dy_plan.copies) because every sample writes its own tokens
 * into it — and every sample computes the last prompt token itself, in a decode step, so
 * each draws its first token from its own random stream. A sample that finds no block for
 * its copy is queued as an ordinary sequence (the leader's published blocks are still found
 * in the prefix cache). If the leader ends first, the next sample takes over as leader.
 * NULL if out of memory or if the leader has already passed the fork point. */
dy_seq *dy_sched_fork(dy_sched *s, dy_seq *leader, uint64_t id, void *user);

/* Ends a sequence (finished or cancelled): its blocks are released at once (published ones
 * stay cached) and the sequence is freed. */
void dy_sched_finish(dy_sched *s, dy_seq *seq);

/* Plans the next step. The plan (and its items) stay valid until the next call. Returns the
 * number of items (0: nothing to do, or nothing fits). */
int dy_sched_plan(dy_sched *s, const dy_plan **plan);
/* After the engine ran the plan: `sampled[i]` is the token sampled for the i-th item that
 * wanted logits (in plan order). Appends them, advances n_computed and publishes the blocks
 * that became full. */
void dy_sched_commit(dy_sched *s, const int32_t *sampled);

int dy_sched_n_waiting(const dy_sched *s);
int dy_sched_n_running(const dy_sched *s);
/* Blocks in the running sequences' tables, shared prefixes counted per sequence: what one
 * decode step reads (the router's decode load). */
int dy_sched_running_blocks(const dy_sched *s);
/* Prompt tokens still to compute over waiting and running sequences (load reporting). A
 * waiting prompt counts without the prefix its admission will find in the prefix cache, as
 * the router counts it when it routes (a report taken before admission would otherwise
 * overstate the load by the cached part until the next one). */
int64_t dy_sched_queued_prefill_tokens(dy_sched *s);
uint64_t dy_sched_total_preemptions(const dy_sched *s);

#endif
