/* sched.c — see sched.h. Intrusive lists (waiting, running, remote) ordered oldest first; a
 * plan is rebuilt from them every step. The samples of one prompt that wait for their leader
 * hang off it (forks) rather than sit in a list, so they are never planned before the fork. */
#include "sched/sched.h"
#include "kv/block_hash.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    dy_seq *head, *tail;
    int n;
} seq_list;

struct dy_sched {
    dy_sched_config cfg;
    dy_kv_cache *kv;
    int bs;
    seq_list waiting, running, remote;
    uint64_t next_order;
    uint64_t preemptions;
    dy_plan plan;
    int copies_cap;
};

/* ---------------------------------------------------------------- lists */

static void list_remove(seq_list *l, dy_seq *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        l->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        l->tail = s->prev;
    s->prev = s->next = NULL;
    l->n--;
}

static void list_push_back(seq_list *l, dy_seq *s)
{
    s->prev = l->tail;
    s->next = NULL;
    if (l->tail)
        l->tail->next = s;
    else
        l->head = s;
    l->tail = s;
    l->n++;
}

static void list_insert_after(seq_list *l, dy_seq *at, dy_seq *s)
{
    s->prev = at;
    s->next = at->next;
    if (at->next)
        at->next->prev = s;
    else
        l->tail = s;
    at->next = s;
    l->n++;
}

static void list_push_front(seq_list *l, dy_seq *s)
{
    s->next = l->head;
    s->prev = NULL;
    if (l->head)
        l->head->prev = s;
    else
        l->tail = s;
    l->head = s;
    l->n++;
}

/* ---------------------------------------------------------------- sequences */

static void seq_free(dy_seq *s)
{
    free(s->tokens);
    free(s->blocks);
    free(s->hashes);
    free(s);
}

static void release_blocks(dy_sched *s, dy_seq *q)
{
    for (int i = 0; i < q->n_blocks; i++)
        dy_kv_cache_release(s->kv, q->blocks[i]);
    q->n_blocks = 0;
    q->n_computed = 0;
    q->n_published = 0;
}

/* Chained hashes for the first nb full blocks (the tokens must exist). A block's hash depends
 * only on the tokens up to its end, which never change once written, so the hashes already
 * computed are kept: a waiting prompt is looked at on every load report. */
static void ensure_hashes(dy_sched *s, dy_seq *q, int nb)
{
    const int have = q->n_hashed;
    if (nb <= have)
        return;
    uint64_t parent = have ? q->hashes[have - 1] : dy_kv_cache_fingerprint(s->kv);
    dy_block_hashes(parent, q->tokens + (size_t)have * s->bs, (nb - have) * s->bs, s->bs,
                    q->hashes + have);
    q->n_hashed = nb;
}

/* Grows the block table to cover positions [0, len). False if the pool is out of blocks
 * (the blocks taken so far stay with the sequence). */
static bool ensure_blocks(dy_sched *s, dy_seq *q, int len)
{
    int need = (len + s->bs - 1) / s->bs;
    while (q->n_blocks < need) {
        int32_t b = dy_kv_cache_alloc(s->kv);
        if (b < 0)
            return false;
        q->blocks[q->n_blocks++] = b;
    }
    return true;
}

/* Publishes the blocks that became full and computed. */
static void publish_full_blocks(dy_sched *s, dy_seq *q)
{
    int full = q->n_computed / s->bs;
    if (full <= q->n_published || s->cfg.no_prefix_cache)
        return;
    ensure_hashes(s, q, full);
    for (int b = q->n_published; b < full; b++)
        dy_kv_cache_publish_chained(s->kv, q->blocks[b], q->hashes[b],
                                    b ? q->hashes[b - 1] : dy_kv_cache_fingerprint(s->kv));
    q->n_published = full;
}

/* A sequence in no list yet. */
bool dy_sched_fits(const dy_sched *s, int n_prompt, int max_len)
{
    int pool_blocks = dy_kv_cache_pool(s->kv)->n_blocks;
    return n_prompt > 0 && n_prompt < max_len && (n_prompt + s->bs) / s->bs <= pool_blocks;
}

static dy_seq *seq_new(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt, int max_len,
                       void *user)
{
    if (!dy_sched_fits(s, n_prompt, max_len))
        return NULL;
    dy_seq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->blocks_cap = (max_len + s->bs - 1) / s->bs;
    q->tokens = malloc(sizeof(int32_t) * (size_t)max_len);
    q->blocks = malloc(sizeof(int32_t) * (size_t)q->blocks_cap);
    q->hashes = malloc(sizeof(uint64_t) * (size_t)q->blocks_cap);
    if (!q->tokens || !q->blocks || !q->hashes) {
        seq_free(q);
        return NULL;
    }
    memcpy(q->tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    q->id = id;
    q->user = user;
    q->n_tokens = q->n_prompt = n_prompt;
    q->cap = q->max_len = max_len;
    q->order = s->next_order++;
    q->state = DY_SEQ_WAITING;
    return q;
}

dy_seq *dy_sched_add(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt, int max_len,
                     void *user)
{
    dy_seq *q = seq_new(s, id, prompt, n_prompt, max_len, user);
    if (q)
        list_push_back(&s->waiting, q);
    return q;
}

/* ---------------------------------------------------------------- repeated sampling */

dy_seq *dy_sched_fork(dy_sched *s, dy_seq *leader, uint64_t id, void *user)
{
    if (!leader || leader->state == DY_SEQ_FORK || leader->n_computed >= leader->n_prompt)
        return NULL;
    if (leader->n_prompt == 1) /* nothing to share: an ordinary sequence */
        return dy_sched_add(s, id, leader->tokens, 1, leader->max_len, user);
    dy_seq *q = seq_new(s, id, leader->tokens, leader->n_prompt, leader->max_len, user);
    if (!q)
        return NULL;
    q->order = leader->order;
    q->state = DY_SEQ_FORK;
    q->leader = leader;
    dy_seq **tail = &leader->forks;
    while (*tail)
        tail = &(*tail)->fork_next;
    *tail = q;
    return q;
}

static bool push_copy(dy_sched *s, int32_t src, int32_t dst)
{
    dy_plan *p = &s->plan;
    if (p->n_copies == s->copies_cap) {
        int cap = s->copies_cap ? 2 * s->copies_cap : 16;
        dy_block_copy *c = realloc(p->copies, sizeof *c * (size_t)cap);
        if (!c)
            return false;
        p->copies = c;
        s->copies_cap = cap;
    }
    p->copies[p->n_copies++] = (dy_block_copy){src, dst};
    return true;
}

/* Gives one sample the leader's prompt blocks: the full ones shared, the partly filled last
 * one copied. False when no block (or memory) is left for the copy. */
static bool share_prompt_blocks(dy_sched *s, const dy_seq *leader, dy_seq *q)
{
    const int fork_at = leader->n_prompt - 1;
    const int full = fork_at / s->bs;
    if (fork_at % s->bs) {
        int32_t copy = dy_kv_cache_alloc(s->kv);
        if (copy < 0)
            return false;
        if (!push_copy(s, leader->blocks[full], copy)) {
            dy_kv_cache_release(s->kv, copy);
            return false;
        }
        q->blocks[full] = copy;
    }
    dy_kv_pool *pool = dy_kv_cache_pool(s->kv);
    for (int i = 0; i < full; i++) {
        dy_kv_ref(pool, leader->blocks[i]);
        q->blocks[i] = leader->blocks[i];
        q->hashes[i] = leader->hashes[i];
    }
    q->n_hashed = full;
    q->n_blocks = full + (fork_at % s->bs != 0);
    q->n_published = full;
    q->n_computed = fork_at;
    return true;
}

/* The leader has computed its prompt up to the last token: its waiting samples fork its
 * blocks and queue right behind it (at the front of the queue when it is already running),
 * in sample order. */
static void fork_samples(dy_sched *s, dy_seq *leader)
{
    publish_full_blocks(s, leader); /* a remote prefill's blocks are not published yet */
    dy_seq *at = leader->state == DY_SEQ_WAITING ? leader : NULL;
    dy_seq *q = leader->forks;
    leader->forks = NULL;
    while (q) {
        dy_seq *next = q->fork_next;
        q->fork_next = q->leader = NULL;
        q->state = DY_SEQ_WAITING;
        q->admitted_once = true;
        q->n_cached = leader->n_cached;
        if (!share_prompt_blocks(s, leader, q))
            q->n_blocks = q->n_published = q->n_computed = 0; /* later, via the prefix cache */
        if (at)
            list_insert_after(&s->waiting, at, q);
        else
            list_push_front(&s->waiting, q);
        at = q;
        q = next;
    }
}

static bool ready_to_fork(const dy_seq *q)
{
    return q->forks && q->n_computed >= q->n_prompt - 1;
}

/* Positions a sequence may compute now: a leader stops before its last prompt token until
 * its samples have forked. */
static int target_len(const dy_seq *q)
{
    return q->forks ? q->n_prompt - 1 : q->n_tokens;
}

static void unlink_fork(dy_seq *q)
{
    dy_seq **p = &q->leader->forks;
    while (*p != q)
        p = &(*p)->fork_next;
    *p = q->fork_next;
}

/* The leader ends before its samples forked: the next sample leads the rest. */
static void promote_first_fork(dy_sched *s, dy_seq *leader)
{
    dy_seq *q = leader->forks;
    leader->forks = NULL;
    q->forks = q->fork_next;
    q->fork_next = q->leader = NULL;
    for (dy_seq *f = q->forks; f; f = f->fork_next)
        f->leader = q;
    q->state = DY_SEQ_WAITING;
    list_push_front(&s->waiting, q);
}

/* ---------------------------------------------------------------- ending */

void dy_sched_finish(dy_sched *s, dy_seq *q)
{
    if (q->state == DY_SEQ_FORK) {
        unlink_fork(q);
        seq_free(q);
        return;
    }
    if (q->forks)
        promote_first_fork(s, q);
    release_blocks(s, q);
    list_remove(q->state == DY_SEQ_RUNNING ? &s->running
                : q->state == DY_SEQ_REMOTE ? &s->remote : &s->waiting, q);
    /* A finished sequence may still sit in the current plan; commit must skip it. */
    for (int i = 0; i < s->plan.n_items; i++)
        if (s->plan.items[i].seq == q)
            s->plan.items[i].seq = NULL;
    seq_free(q);
}

/* ---------------------------------------------------------------- planning */

static void preempt(dy_sched *s, dy_seq *q)
{
    release_blocks(s, q);
    list_remove(&s->running, q);
    q->state = DY_SEQ_WAITING;
    q->n_preemptions++;
    s->preemptions++;
    s->plan.n_preempted++;
    list_push_front(&s->waiting, q);
}

static void add_item(dy_sched *s, dy_seq *q, int n)
{
    dy_plan_item *it = &s->plan.items[s->plan.n_items++];
    it->seq = q;
    it->start = q->n_computed;
    it->n = n;
    it->logits = q->n_computed + n == q->n_tokens;
    s->plan.n_tokens += n;
    s->plan.n_decode += n == 1 && it->logits && q->n_computed >= q->n_prompt;
}

/* Running sequences first (oldest first). When blocks run out, the youngest running
 * sequence is preempted, until the current one fits or is itself the youngest. */
static int plan_running(dy_sched *s, int budget)
{
    for (dy_seq *q = s->running.head; q && budget > 0;) {
        int n = target_len(q) - q->n_computed;
        if (n <= 0) {
            q = q->next;
            continue;
        }
        if (n > budget)
            n = budget;
        while (q->state == DY_SEQ_RUNNING && !ensure_blocks(s, q, q->n_computed + n))
            preempt(s, s->running.tail);
        if (q->state != DY_SEQ_RUNNING)
            break; /* q was the youngest: every older sequence is planned */
        add_item(s, q, n);
        budget -= n;
        q = q->next;
    }
    return budget;
}

/* Looks the sequence's prompt up in the prefix cache. The block holding the last token is
 * never matched, so at least one token is computed (its logits are needed) and no step ever
 * writes into a block that other sequences share. */
static void attach_cached_prefix(dy_sched *s, dy_seq *q)
{
    int n_lookup = s->cfg.no_prefix_cache ? 0 : (q->n_tokens - 1) / s->bs;
    ensure_hashes(s, q, n_lookup);
    int found = dy_kv_cache_lookup(s->kv, q->hashes, n_lookup, q->blocks);
    q->n_blocks = q->n_published = found;
    q->n_computed = found * s->bs;
    if (!q->admitted_once)
        q->n_cached = q->n_computed;
    q->admitted_once = true;
}

/* Waiting sequences in arrival order while budget, batch slots and blocks last. */
static void plan_waiting(dy_sched *s, int budget)
{
    while (s->waiting.head && budget > 0 && s->running.n < s->cfg.max_running) {
        dy_seq *q = s->waiting.head;
        if (q->n_blocks == 0) /* not already holding blocks (a remote prefill's, a fork's) */
            attach_cached_prefix(s, q);
        if (ready_to_fork(q))
            fork_samples(s, q);
        int n = target_len(q) - q->n_computed;
        if (n > budget)
            n = budget;
        if (!ensure_blocks(s, q, q->n_computed + n)) {
            release_blocks(s, q); /* not now: the head waits, nothing overtakes it */
            return;
        }
        list_remove(&s->waiting, q);
        q->state = DY_SEQ_RUNNING;
        list_push_back(&s->running, q);
        add_item(s, q, n);
        budget -= n;
    }
}

int dy_sched_plan(dy_sched *s, const dy_plan **plan)
{
    s->plan.n_items = s->plan.n_tokens = s->plan.n_decode = s->plan.n_preempted = 0;
    s->plan.n_copies = 0;
    for (dy_seq *q = s->running.head; q; q = q->next)
        if (ready_to_fork(q))
            fork_samples(s, q);
    int budget = plan_running(s, s->cfg.max_batch_tokens);
    plan_waiting(s, budget);
    *plan = &s->plan;
    return s->plan.n_items;
}

void dy_sched_commit(dy_sched *s, const int32_t *sampled)
{
    int k = 0;
    for (int i = 0; i < s->plan.n_items; i++) {
        dy_plan_item *it = &s->plan.items[i];
        dy_seq *q = it->seq;
        if (!q) { /* finished meanwhile; its sample (if any) is dropped */
            k += it->logits;
            continue;
        }
        q->n_computed += it->n;
        publish_full_blocks(s, q);
        if (it->logits) {
            int32_t t = sampled[k++];
            if (q->n_tokens < q->max_len)
                q->tokens[q->n_tokens++] = t;
        }
    }
}

/* ---------------------------------------------------------------- remote prefill */

/* The sequence's KV for positions [0, remote_len) is written from outside (a prefill worker,
 * a lower tier): the cached prefix is attached and blocks are set aside for the rest. */
static dy_seq *add_remote(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt,
                          int max_len, int remote_len, void *user)
{
    dy_seq *q = dy_sched_add(s, id, prompt, n_prompt, max_len, user);
    if (!q)
        return NULL;
    attach_cached_prefix(s, q);
    if (q->n_computed >= remote_len || !ensure_blocks(s, q, remote_len)) {
        release_blocks(s, q); /* prefill here: plan_waiting looks the prefix up again */
        return q;
    }
    list_remove(&s->waiting, q);
    q->state = DY_SEQ_REMOTE;
    q->remote_len = remote_len;
    list_push_back(&s->remote, q);
    return q;
}

dy_seq *dy_sched_add_remote(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt,
                            int max_len, void *user)
{
    return add_remote(s, id, prompt, n_prompt, max_len, n_prompt - 1, user);
}

dy_seq *dy_sched_add_loading(dy_sched *s, uint64_t id, const int32_t *prompt, int n_prompt,
                             int max_len, int upto_blocks, void *user)
{
    int remote_len = upto_blocks * s->bs;
    if (n_prompt > 0 && remote_len > n_prompt - 1)
        remote_len = (n_prompt - 1) / s->bs * s->bs; /* whole blocks, the last token computed */
    return add_remote(s, id, prompt, n_prompt, max_len, remote_len, user);
}

void dy_sched_remote_ready(dy_sched *s, dy_seq *q, bool ok)
{
    if (q->state != DY_SEQ_REMOTE)
        return;
    /* On failure the blocks set aside stay with the sequence until it ends (a prefill worker
     * that was given up on may still write into them; nobody else will ever read them) and
     * the prompt after the cached prefix is computed here, into those same blocks. */
    q->n_computed = ok ? q->remote_len : q->n_published * s->bs;
    if (ok)
        publish_full_blocks(s, q); /* others may share them at once */
    list_remove(&s->remote, q);
    q->state = DY_SEQ_WAITING;
    list_push_front(&s->waiting, q);
}

/* ---------------------------------------------------------------- lifetime and load */

dy_sched *dy_sched_new(const dy_sched_config *cfg, dy_kv_cache *kv)
{
    if (cfg->max_batch_tokens < 1 || cfg->max_running < 1)
        return NULL;
    dy_sched *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    s->kv = kv;
    s->bs = dy_kv_cache_pool(kv)->block_size;
    s->plan.items = malloc(sizeof *s->plan.items * (size_t)(cfg->max_running + 1));
    if (!s->plan.items) {
        free(s);
        return NULL;
    }
    return s;
}

void dy_sched_free(dy_sched *s)
{
    if (!s)
        return;
    /* Ending a leader moves its next sample to the queue: go round until all are empty. */
    while (s->running.head || s->waiting.head || s->remote.head) {
        seq_list *l = s->running.head ? &s->running : s->waiting.head ? &s->waiting : &s->remote;
        dy_sched_finish(s, l->head);
    }
    free(s->plan.items);
    free(s->plan.copies);
    free(s);
}

int dy_sched_n_waiting(const dy_sched *s) { return s->waiting.n; }

int dy_sched_running_blocks(const dy_sched *s)
{
    int n = 0;
    for (const dy_seq *q = s->running.head; q; q = q->next)
        n += q->n_blocks;
    return n;
}
int dy_sched_n_running(const dy_sched *s) { return s->running.n; }
uint64_t dy_sched_total_preemptions(const dy_sched *s) { return s->preemptions; }

/* Prompt tokens a waiting sequence still has to compute; for one not yet holding blocks, the
 * prefix cache is looked at (not taken) as attach_cached_prefix will. */
static int64_t waiting_prefill_tokens(dy_sched *s, dy_seq *q)
{
    if (q->n_blocks > 0 || s->cfg.no_prefix_cache)
        return q->n_tokens - q->n_computed;
    int n_lookup = (q->n_tokens - 1) / s->bs;
    ensure_hashes(s, q, n_lookup);
    return q->n_tokens - (int64_t)dy_kv_cache_peek(s->kv, q->hashes, n_lookup) * s->bs;
}

int64_t dy_sched_queued_prefill_tokens(dy_sched *s)
{
    int64_t n = 0;
    for (dy_seq *q = s->waiting.head; q; q = q->next)
        n += waiting_prefill_tokens(s, q);
    for (const dy_seq *q = s->running.head; q; q = q->next)
        if (q->n_tokens - q->n_computed > 1)
            n += q->n_tokens - q->n_computed;
    return n;
}
