/* hold.c — see hold.h. A small array of holds (a worker keeps tens, not thousands), scanned
 * linearly; an ended hold's hashes move to a scratch slot the caller reads before its next
 * call. */
#include "kv/hold.h"

#include <stdlib.h>
#include <string.h>

struct dy_holds {
    dy_holds_config cfg;
    dy_hold *h;
    int n;
    uint64_t *ended_hashes; /* the last ended hold's, owned here */
};

dy_holds *dy_holds_new(const dy_holds_config *c)
{
    if (!c || c->max_sessions < 1 || !(c->ttl_s > 0) || !(c->margin_s >= 0))
        return NULL;
    dy_holds *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->cfg = *c;
    h->h = calloc((size_t)c->max_sessions, sizeof *h->h);
    if (!h->h) {
        free(h);
        return NULL;
    }
    return h;
}

void dy_holds_free(dy_holds *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n; i++)
        free(h->h[i].hashes);
    free(h->ended_hashes);
    free(h->h);
    free(h);
}

int dy_holds_count(const dy_holds *h)
{
    return h->n;
}

static int index_of(const dy_holds *h, uint64_t key)
{
    for (int i = 0; i < h->n; i++)
        if (h->h[i].key == key)
            return i;
    return -1;
}

/* Removes hold i into *out; its hashes become the scratch copy. */
static void take(dy_holds *h, int i, dy_hold *out)
{
    free(h->ended_hashes);
    h->ended_hashes = h->h[i].hashes;
    *out = h->h[i];
    h->h[i] = h->h[--h->n];
}

const dy_hold *dy_holds_begin(dy_holds *h, uint64_t key, const uint64_t *hashes, int n,
                              double now, dy_hold *ended)
{
    *ended = (dy_hold){0};
    uint64_t *copy = malloc(sizeof *copy * (size_t)(n > 0 ? n : 1));
    if (!copy)
        return NULL;
    memcpy(copy, hashes, sizeof *copy * (size_t)n);
    int i = index_of(h, key);
    if (i >= 0) { /* the session's previous hold ends: this one replaces it */
        take(h, i, ended);
    } else if (h->n == h->cfg.max_sessions) { /* room: the oldest hold ends */
        int oldest = 0;
        for (int k = 1; k < h->n; k++)
            if (h->h[k].began < h->h[oldest].began)
                oldest = k;
        take(h, oldest, ended);
    }
    i = h->n++;
    h->h[i] = (dy_hold){.key = key, .hashes = copy, .n = n, .began = now, .return_at = -1};
    return &h->h[i];
}

bool dy_holds_expect(dy_holds *h, uint64_t key, double return_at)
{
    int i = index_of(h, key);
    if (i < 0)
        return false;
    h->h[i].return_at = return_at;
    h->h[i].prefetched = false;
    return true;
}

const dy_hold *dy_holds_find(const dy_holds *h, uint64_t key)
{
    int i = index_of(h, key);
    return i < 0 ? NULL : &h->h[i];
}

int dy_holds_due(dy_holds *h, double now, double s_host, double s_disk, const dy_hold **out,
                 int cap)
{
    int k = 0;
    for (int i = 0; i < h->n && k < cap; i++) {
        dy_hold *x = &h->h[i];
        if (x->prefetched || x->return_at < 0)
            continue;
        double s_per_block = x->parked ? s_disk : s_host;
        if (x->return_at - x->n * s_per_block - h->cfg.margin_s <= now) {
            x->prefetched = true;
            out[k++] = x;
        }
    }
    return k;
}

int dy_holds_long(dy_holds *h, double now, double after_s, const dy_hold **out, int cap)
{
    int k = 0;
    for (int i = 0; i < h->n && k < cap; i++) {
        dy_hold *x = &h->h[i];
        if (x->parked || x->prefetched || x->return_at < 0 || x->return_at - now < after_s)
            continue;
        x->parked = true;
        out[k++] = x;
    }
    return k;
}

bool dy_holds_end(dy_holds *h, uint64_t key, dy_hold *out)
{
    int i = index_of(h, key);
    if (i < 0)
        return false;
    take(h, i, out);
    return true;
}

bool dy_holds_expire(dy_holds *h, double now, dy_hold *out)
{
    for (int i = 0; i < h->n; i++)
        if (now - h->h[i].began >= h->cfg.ttl_s) {
            take(h, i, out);
            return true;
        }
    return false;
}
