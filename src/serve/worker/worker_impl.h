/* worker_impl.h — the worker process's state, shared by worker.c (the step loop and
 * aggregated generation) and worker_disagg.c (disaggregated prefill: the prefill role, and
 * the decode role's side of receiving KV). Private to those two files. */
#ifndef DYAD_WORKER_IMPL_H
#define DYAD_WORKER_IMPL_H

#include <pthread.h>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "sched/sched.h"
#include "serve/worker/guide.h"
#include "serve/worker/kv_publish.h"
#include "serve/worker/kv_tiers.h"
#include "serve/wire/wire_io.h"
#include "serve/worker/worker.h"
#include "serve/worker/xfer.h"

#define STATS_EVERY_S 0.1

/* One sequence's generation state. */
typedef struct wreq {
    uint64_t id;
    dy_sampling sampling;
    dy_rng rng;
    uint32_t max_tokens, generated;
    bool ignore_eos;
    uint8_t want_logprobs, n_logprobs;
    dy_stop stop;
    dy_guide guide;             /* the grammar its answer follows (guide.e NULL: none) */
    char hold[8]; /* an incomplete UTF-8 character waiting for its next bytes */
    int n_hold;
    dy_seq *seq;
    double arrived, scheduled; /* monotonic seconds; scheduled is 0 until the first step */
    /* disaggregated prefill */
    bool prefill_only;          /* prefill role: compute the prompt, ship its KV, stop */
    uint8_t xfer;               /* prefill role: dy_xfer_kind */
    char peer[DY_WIRE_MAX_PEER + 1];
    uint32_t first_block, n_xfer_blocks;
    int32_t *dest;              /* prefill role: the decode worker's block ids */
    bool awaiting_kv;           /* decode role: KV_READY(ok) came, TCP blocks still arriving */
    dy_tier_result tier;        /* its prompt's prefix in a lower KV tier */
    uint64_t session;           /* the conversation it is a turn of (0: none), and the hint */
    uint32_t hold_ms;
    struct wreq *next;
} wreq;

/* The heartbeat while a step runs (worker.c): the loop sends STATS between steps, and a step
 * may last longer than the frontend's --worker-timeout (a long prompt chunk on a big model),
 * so a thread sends STATS meanwhile, and takes in what the frontend sends (into conn, for
 * the loop to handle after the step): a worker that neither speaks nor reads for that long
 * is hung, one in a long step is not. */
typedef struct {
    pthread_mutex_t mu;     /* serialises writes to the frontend's socket */
    pthread_cond_t wake;    /* dy_cond_init */
    pthread_t thread;
    bool started, stop, in_step;
    dy_msg_stats last;      /* the load as the running step began */
    dy_buf frame;           /* the thread's own encoding buffer */
} heartbeat;

/* What sampling produced for one plan item, sent after the commit. */
typedef struct {
    wreq *req;
    int32_t token;
    bool dead;                  /* the grammar left no token: the answer ends in an error */
    float logprob;
    int n_top;
    int32_t top_ids[DY_WIRE_MAX_TOP];
    float top_lps[DY_WIRE_MAX_TOP];
} sample_out;

typedef struct {
    dy_worker_config cfg;
    dy_model *model;
    dy_kv_pool *pool;
    dy_kv_cache *kv;
    dy_sched *sched;
    dy_kv_publisher kvpub;      /* KV events for the frontend's global prefix index */
    dy_kv_tiers *tiers;         /* host and disk tiers; NULL without --kv-host-mem */
    dy_engine *engine;
    dy_sampler **samplers;      /* one per engine thread: a batch's draws split across them */
    dy_guides guides;           /* the grammars of structured outputs */
    float *logits;
    dy_span *spans;
    int32_t *sampled;
    sample_out *outs;
    int32_t *eog_ids;
    int n_eog;
    dy_conn conn;
    dy_buf tx;
    wreq *reqs;
    dy_xfer_rx *rx;             /* decode role with a TCP receiver */
    dy_xfer_peer *peers[16];    /* prefill role: open decode-worker pools */
    int n_peers;
    int n_awaiting;             /* decode role: sequences waiting for TCP blocks */
    uint64_t xfer_bytes;
    bool draining, broken;
    int next_role;              /* -1, or the role a ROLE frame asked for: taken when idle */
    uint64_t prompt_tokens, generated_tokens, steps;
    double step_seconds, last_stats;
    bool stats_due;             /* a DONE went out since the last STATS */
    heartbeat hb;
} worker;

void dy_worker_send_error(worker *w, uint64_t id, const char *msg);
/* Why the scheduler refused a prompt of n tokens with room for max_len: it does not fit the
 * KV cache (the request's fault), or memory ran out (the server's; the frontend answers 500). */
const char *dy_worker_refusal(const worker *w, int n, int max_len);
wreq **dy_worker_find_req(worker *w, uint64_t id);
void dy_worker_drop_req(worker *w, wreq *r);
/* Sets up the generation state of a request; NULL (and an error sent) on failure. */
wreq *dy_worker_new_req(worker *w, const dy_msg_request *m);

/* worker_disagg.c */
void dy_disagg_on_prefill(worker *w, const dy_msg_prefill *m);
void dy_disagg_on_remote_request(worker *w, wreq *r, const dy_msg_request *m);
void dy_disagg_on_kv_ready(worker *w, const dy_msg_kv_ready *m);
/* Sequences whose TCP blocks have all arrived join the queue. */
void dy_disagg_poll(worker *w);
/* A prefill-only sequence finished its prompt: ship its KV and end it. */
void dy_disagg_ship(worker *w, wreq *r);
void dy_disagg_free(worker *w);
/* The frontend says a decode worker's pool is gone: close it if it is open here. */
void dy_disagg_on_peer_gone(worker *w, const dy_msg_peer_gone *m);
/* Bytes of the decode workers' pools mapped here. */
uint64_t dy_disagg_mapped_bytes(const worker *w);

#endif
