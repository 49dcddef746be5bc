/* registry_nats.c — the worker registry over NATS (see registry.h): the JetStream key-value
 * bucket bound or created, entries written and deleted, and watches of it, every value read
 * through dy_reg_decode. Compiled only with libnats (DYAD_HAVE_NATS); registry.c holds the
 * pure half. */
#ifdef DYAD_HAVE_NATS
#include "serve/cluster/registry.h"

#include "serve/cluster/nats_conn.h"
#include "util/buf.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "what: the client's reason" into err; false. */
static bool nats_fail(natsStatus s, const char *what, char *err, size_t errlen)
{
    char why[256];
    dy_nats_reason(s, why, sizeof why);
    snprintf(err, errlen, "%s: %s", what, why);
    return false;
}

static int64_t ms_of(double s)
{
    return s <= 0 ? 1 : (int64_t)ceil(s * 1e3);
}

kvStore *dy_kv_bind(natsConnection *nc, const char *bucket, bool *missing, char *err,
                    size_t errlen)
{
    jsCtx *js = NULL;
    kvStore *kv = NULL;
    *missing = false;
    natsStatus s = natsConnection_JetStream(&js, nc, NULL);
    if (s != NATS_OK) {
        nats_fail(s, "JetStream", err, errlen);
        return NULL;
    }
    s = js_KeyValue(&kv, js, bucket);
    if (s == NATS_NOT_FOUND)
        *missing = true;
    if (s == NATS_NOT_FOUND)
        snprintf(err, errlen, "the bucket %s does not exist yet", bucket);
    else if (s != NATS_OK) {
        char why[256];
        dy_nats_reason(s, why, sizeof why);
        /* A server without JetStream has nobody answering its API subjects. */
        snprintf(err, errlen, "the bucket %s: %s%s", bucket, why,
                 s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT
                     ? " (is JetStream on? nats-server -js)" : "");
    }
    jsCtx_Destroy(js); /* the store holds its own reference to the context */
    return s == NATS_OK ? kv : NULL;
}

kvStore *dy_reg_bind(natsConnection *nc, bool *missing, char *err, size_t errlen)
{
    return dy_kv_bind(nc, DY_REG_BUCKET, missing, err, errlen);
}

static natsStatus create_bucket(natsConnection *nc, const dy_kv_bucket *b, double max_age_s,
                                kvStore **kv)
{
    jsCtx *js = NULL;
    natsStatus s = natsConnection_JetStream(&js, nc, NULL);
    if (s != NATS_OK)
        return s;
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = b->name;
    cfg.Description = b->description;
    cfg.History = 1;
    cfg.TTL = (int64_t)(max_age_s * 1e9); /* nanoseconds */
    cfg.MaxValueSize = b->max_value;
    cfg.StorageType = js_FileStorage;
    s = js_CreateKeyValue(kv, js, &cfg);
    jsCtx_Destroy(js);
    return s;
}

kvStore *dy_kv_open(natsConnection *nc, const dy_kv_bucket *b, double max_age_s, char *err,
                    size_t errlen)
{
    bool missing;
    kvStore *kv = dy_kv_bind(nc, b->name, &missing, err, errlen);
    if (kv || !missing)
        return kv;
    if (!(max_age_s > 0)) {
        snprintf(err, errlen, "the bucket's max age must be > 0 s");
        return NULL;
    }
    natsStatus s = create_bucket(nc, b, max_age_s, &kv);
    if (s == NATS_OK)
        return kv;
    /* Another process may have created it since: bind to that one. */
    kv = dy_kv_bind(nc, b->name, &missing, err, errlen);
    if (!kv) {
        char what[128];
        snprintf(what, sizeof what, "creating the bucket %s", b->name);
        nats_fail(s, what, err, errlen);
    }
    return kv;
}

kvStore *dy_reg_open(natsConnection *nc, double max_age_s, char *err, size_t errlen)
{
    static const dy_kv_bucket workers = {DY_REG_BUCKET, "dyad workers (docs/cluster.md)",
                                         DY_REG_MAX_VALUE};
    return dy_kv_open(nc, &workers, max_age_s, err, errlen);
}

bool dy_reg_put(kvStore *kv, const dy_reg_entry *e, char *err, size_t errlen)
{
    char value[DY_REG_MAX_VALUE + 1], key[DY_REG_KEY_LEN + 1];
    int len = dy_reg_encode(e, value, sizeof value);
    if (len < 0) {
        snprintf(err, errlen, "the entry of worker %08x cannot be encoded (a name out of range, "
                 "or more than %d bytes)", (unsigned)e->id, DY_REG_MAX_VALUE);
        return false;
    }
    dy_reg_key(e->id, key);
    uint64_t rev = 0;
    natsStatus s = kvStore_Put(&rev, kv, key, value, len);
    return s == NATS_OK || nats_fail(s, key, err, errlen);
}

bool dy_reg_delete(kvStore *kv, uint32_t id, char *err, size_t errlen)
{
    char key[DY_REG_KEY_LEN + 1];
    dy_reg_key(id, key);
    natsStatus s = kvStore_Delete(kv, key);
    return s == NATS_OK || nats_fail(s, key, err, errlen);
}

/* ---- watches ------------------------------------------------------------------------------ */

struct dy_reg_watch {
    kvWatcher *w;
    bool synced;       /* the end of the initial values has been seen */
    double last_age_s; /* of the last change returned */
};

static dy_reg_watch *watch_start(kvStore *kv, bool ignore_deletes, char *err, size_t errlen)
{
    dy_reg_watch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    kvWatchOptions o;
    kvWatchOptions_Init(&o);
    o.IgnoreDeletes = ignore_deletes;
    natsStatus s = kvStore_WatchAll(&w->w, kv, &o);
    if (s != NATS_OK) {
        nats_fail(s, "watching " DY_REG_BUCKET, err, errlen);
        free(w);
        return NULL;
    }
    return w;
}

dy_reg_watch *dy_reg_watch_start(kvStore *kv, char *err, size_t errlen)
{
    return watch_start(kv, false, err, errlen);
}

/* Seconds since the server stored e, on this host's clock (0 when the clocks disagree the
 * other way). */
static double age_of(kvEntry *e)
{
    double age = dy_wall_now() - (double)kvEntry_Created(e) / 1e9;
    return age > 0 ? age : 0;
}

/* One value of the bucket (put, or deleted / purged): 1 with the change filled in, or -1
 * naming its key. */
static int take_value(const char *key, bool put, const void *value, size_t len,
                      dy_reg_change *kind, uint32_t *id, dy_reg_entry *e, char *err,
                      size_t errlen)
{
    char why[256];
    if (!dy_reg_parse_key(key, id)) {
        snprintf(err, errlen, "%s: not a worker's key (w and 8 hex digits)", key);
        return -1;
    }
    if (!put) {
        *kind = DY_REG_GONE;
        return 1;
    }
    if (!dy_reg_decode(value, len, e, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", key, why);
        return -1;
    }
    if (e->id != *id) {
        snprintf(err, errlen, "%s: id: %08x is not the key's", key, (unsigned)e->id);
        return -1;
    }
    *kind = DY_REG_PUT;
    return 1;
}

/* One entry the watch delivered: 1 with the change filled in, or -1 naming its key. */
static int take_entry(dy_reg_watch *w, kvEntry *ke, dy_reg_change *kind, uint32_t *id,
                      dy_reg_entry *e, char *err, size_t errlen)
{
    w->last_age_s = age_of(ke);
    return take_value(kvEntry_Key(ke), kvEntry_Operation(ke) == kvOp_Put, kvEntry_Value(ke),
                      (size_t)kvEntry_ValueLen(ke), kind, id, e, err, errlen);
}

int dy_reg_watch_next(dy_reg_watch *w, double timeout_s, dy_reg_change *kind, uint32_t *id,
                      dy_reg_entry *e, char *err, size_t errlen)
{
    double deadline = dy_now() + timeout_s;
    for (;;) {
        kvEntry *ke = NULL;
        natsStatus s = kvWatcher_Next(&ke, w->w, ms_of(deadline - dy_now()));
        if (s == NATS_TIMEOUT)
            return 0;
        if (s != NATS_OK) {
            nats_fail(s, "watching " DY_REG_BUCKET, err, errlen);
            return -1;
        }
        if (!ke) { /* the end of the initial values: not a change */
            w->synced = true;
            if (dy_now() >= deadline)
                return 0;
            continue;
        }
        /* Among the initial values a delete marker is an entry that is no longer there: the
         * watch starts from the entries that are. */
        bool stale = !w->synced && kvEntry_Operation(ke) != kvOp_Put;
        int rc = stale ? 0 : take_entry(w, ke, kind, id, e, err, errlen);
        kvEntry_Destroy(ke);
        if (!stale)
            return rc;
    }
}

bool dy_reg_watch_synced(const dy_reg_watch *w)
{
    return w->synced;
}

double dy_reg_watch_age(const dy_reg_watch *w)
{
    return w->last_age_s;
}

void dy_reg_watch_stop(dy_reg_watch *w)
{
    if (!w)
        return;
    kvWatcher_Stop(w->w);
    kvWatcher_Destroy(w->w);
    free(w);
}

/* ---- listing ------------------------------------------------------------------------------ */

bool dy_kv_each(kvStore *kv, double timeout_s, dy_kv_each_fn fn, void *ctx, char *err,
                size_t errlen)
{
    dy_reg_watch *w = watch_start(kv, true, err, errlen);
    if (!w)
        return false;
    double deadline = dy_now() + timeout_s;
    bool ok = true;
    for (;;) {
        kvEntry *ke = NULL;
        natsStatus s = kvWatcher_Next(&ke, w->w, ms_of(deadline - dy_now()));
        if (s != NATS_OK) {
            ok = nats_fail(s, "listing the bucket", err, errlen);
            break;
        }
        if (!ke) /* the end of the current values */
            break;
        ok = fn(ctx, kvEntry_Key(ke), kvEntry_Value(ke), (size_t)kvEntry_ValueLen(ke),
                age_of(ke));
        kvEntry_Destroy(ke);
        if (!ok) {
            snprintf(err, errlen, "out of memory");
            break;
        }
    }
    dy_reg_watch_stop(w);
    return ok;
}

typedef struct {
    dy_reg_item *items;
    int n;
    size_t cap;
} item_list;

/* One entry as an item: decoded, or with why it was not. */
static bool push_item(void *ctx, const char *key, const void *value, size_t len, double age_s)
{
    item_list *l = ctx;
    if (!dy_array_reserve((void **)&l->items, &l->cap, (size_t)l->n + 1, sizeof *l->items))
        return false;
    dy_reg_item *it = &l->items[l->n++];
    dy_reg_change kind;
    memset(it, 0, sizeof *it);
    snprintf(it->key, sizeof it->key, "%s", key);
    it->ok = take_value(key, true, value, len, &kind, &it->id, &it->e, it->why,
                        sizeof it->why) == 1;
    it->age_s = age_s;
    return true;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const dy_reg_item *)a)->key, ((const dy_reg_item *)b)->key);
}

dy_reg_item *dy_reg_list(kvStore *kv, double timeout_s, int *n, char *err, size_t errlen)
{
    item_list l = {0};
    *n = 0;
    if (!dy_kv_each(kv, timeout_s, push_item, &l, err, errlen)) {
        free(l.items);
        return NULL;
    }
    if (l.n > 1)
        qsort(l.items, (size_t)l.n, sizeof *l.items, by_key);
    *n = l.n;
    return l.items ? l.items : calloc(1, sizeof *l.items); /* an empty list is not a failure */
}
#endif
