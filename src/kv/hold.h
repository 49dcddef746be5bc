/* hold.h — the tool-call hold's clock (docs/kv-tiers.md): which conversations' KV a worker is
 * keeping for their next turn, when each is expected back, and when to start bringing its
 * blocks up so they are in the KV cache by then. Pure: times are the caller's (seconds), and
 * what to copy, pin or drop is the caller's too.
 *
 * A session is a conversation the client names (`dyad.session`). When one of its turns ends,
 * its KV — the full blocks of the prompt and the answer, by chained hash — is held. Its
 * expected return is set by the request's hint (`dyad.hold.expected_ms`) or, once the answer
 * turned out to be a tool call, by the frontend's estimate for that tool. The prefetch is due
 * at return − (blocks × seconds per block) − margin. A hold whose return is far off is parked:
 * its blocks go to disk to wait there. The next turn's arrival ends the hold, and so does the
 * TTL. */
#ifndef DYAD_KV_HOLD_H
#define DYAD_KV_HOLD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    double ttl_s;     /* a hold ends this long after its turn ended, whatever happens */
    double margin_s;  /* the prefetch starts this much before it is needed */
    int max_sessions; /* more: the oldest hold is ended to make room */
} dy_holds_config;

typedef struct {
    uint64_t key;
    uint64_t *hashes; /* the held blocks, in prompt order */
    int n;
    double began, return_at; /* return_at < 0: not expected at any time yet */
    bool prefetched;
    bool parked;      /* a long wait: its blocks were sent to disk (dy_holds_long) */
} dy_hold;

typedef struct dy_holds dy_holds;

dy_holds *dy_holds_new(const dy_holds_config *c);
void dy_holds_free(dy_holds *h);
int dy_holds_count(const dy_holds *h);

/* A turn of session `key` ended at `now` with KV blocks hashes[0..n): a new hold. *ended
 * receives a hold that ended because of it — the session's previous one, or the oldest when
 * max_sessions are held — for the caller to release what it pinned for it (ended->key 0 if
 * none; its hashes stay valid until the next call). NULL if out of memory. */
const dy_hold *dy_holds_begin(dy_holds *h, uint64_t key, const uint64_t *hashes, int n,
                              double now, dy_hold *ended);
/* The session is expected back at return_at. false if it is not held. */
bool dy_holds_expect(dy_holds *h, uint64_t key, double return_at);
const dy_hold *dy_holds_find(const dy_holds *h, uint64_t key);

/* The holds whose prefetch is due at `now` (return_at − n × s_per_block − margin ≤ now) and
 * not yet started; each is marked started. s_per_block is s_host, or s_disk for a parked
 * hold (its blocks come up from disk). Up to cap into out; returns how many. */
int dy_holds_due(dy_holds *h, double now, double s_host, double s_disk, const dy_hold **out,
                 int cap);
/* The holds whose wait is long: expected back at least after_s from `now`, not parked and
 * not prefetched yet; each is marked parked (the caller sends its blocks to disk, where
 * they wait without holding host memory). Up to cap into out; returns how many. A later
 * return (dy_holds_expect) does not park a hold twice. */
int dy_holds_long(dy_holds *h, double now, double after_s, const dy_hold **out, int cap);
/* The next hold to end: the session's next turn arrived, or `now` is past some hold's TTL.
 * Ends one hold per call, copying it into *out (its hashes stay valid until the next call);
 * false when there is none. */
bool dy_holds_end(dy_holds *h, uint64_t key, dy_hold *out);
bool dy_holds_expire(dy_holds *h, double now, dy_hold *out);

#endif
