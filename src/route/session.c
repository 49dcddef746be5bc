/* session.c — see session.h. Sessions and tools are slots found through the one hash map
 * (util/hashmap.h); sessions are kept in LRU order of their last turn's end (kv/lru.h), tool
 * durations as the running means of kv/tier_choice.h. */
#include "route/session.h"
#include "kv/lru.h"
#include "kv/tier_choice.h"
#include "util/hashmap.h"

#include <stdlib.h>

typedef struct {
    uint64_t key;
    int worker;          /* -1: none */
    uint64_t tool;       /* the tool its last answer called; 0: none */
    double ended;        /* when its last turn ended; < 0 while a turn runs */
} session;

typedef struct {
    uint64_t key;
    dy_kv_rate mean;     /* seconds per call */
} tool;

struct dy_sessions {
    session *s;
    int cap, n;
    dy_hashmap by_key;   /* session key → slot */
    dy_lru order;        /* slots, least recently ended first */
    tool *t;
    int tool_cap, n_tools;
    dy_hashmap by_tool;  /* tool key → slot */
};

dy_sessions *dy_sessions_new(int max_sessions, int max_tools)
{
    if (max_sessions < 1 || max_tools < 1)
        return NULL;
    dy_sessions *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cap = max_sessions;
    s->tool_cap = max_tools;
    s->s = calloc((size_t)max_sessions, sizeof *s->s);
    s->t = calloc((size_t)max_tools, sizeof *s->t);
    bool ok = s->s && s->t && dy_lru_init(&s->order, max_sessions) &&
              dy_hashmap_init(&s->by_key, (size_t)max_sessions) &&
              dy_hashmap_init(&s->by_tool, (size_t)max_tools);
    if (!ok) {
        dy_sessions_free(s);
        return NULL;
    }
    return s;
}

void dy_sessions_free(dy_sessions *s)
{
    if (!s)
        return;
    free(s->s);
    free(s->t);
    dy_lru_free(&s->order);
    dy_hashmap_free(&s->by_key);
    dy_hashmap_free(&s->by_tool);
    free(s);
}

int dy_sessions_count(const dy_sessions *s)
{
    return s->n;
}

static int find(const dy_hashmap *m, uint64_t key)
{
    uint64_t v = dy_hashmap_get(m, key);
    return v == DY_HASHMAP_NONE ? -1 : (int)v;
}

static tool *tool_of(dy_sessions *s, uint64_t key, bool add)
{
    int i = find(&s->by_tool, key);
    if (i < 0 && add && s->n_tools < s->tool_cap) {
        i = s->n_tools++;
        s->t[i] = (tool){.key = key};
        dy_hashmap_put(&s->by_tool, key, (uint64_t)i); /* sized for every tool: cannot fail */
    }
    return i < 0 ? NULL : &s->t[i];
}

int dy_sessions_arrive(dy_sessions *s, uint64_t key, double now)
{
    int i = find(&s->by_key, key);
    if (i < 0)
        return -1;
    session *x = &s->s[i];
    if (x->tool && x->ended >= 0 && now >= x->ended) {
        tool *t = tool_of(s, x->tool, true);
        if (t)
            dy_kv_rate_observe(&t->mean, now - x->ended, 1);
    }
    x->tool = 0;
    x->ended = -1;
    return x->worker;
}

int dy_sessions_worker(const dy_sessions *s, uint64_t key)
{
    int i = find(&s->by_key, key);
    return i < 0 ? -1 : s->s[i].worker;
}

/* The slot for key: its own, a free one, or the least recently ended one's. */
static session *slot_for(dy_sessions *s, uint64_t key)
{
    int i = find(&s->by_key, key);
    if (i >= 0) {
        dy_lru_unlink(&s->order, i);
    } else if (s->n < s->cap) {
        i = s->n++;
        dy_hashmap_put(&s->by_key, key, (uint64_t)i);
    } else {
        i = dy_lru_oldest(&s->order);
        dy_lru_unlink(&s->order, i);
        dy_hashmap_remove(&s->by_key, s->s[i].key);
        dy_hashmap_put(&s->by_key, key, (uint64_t)i);
    }
    dy_lru_push_newest(&s->order, i);
    s->s[i].key = key;
    return &s->s[i];
}

double dy_sessions_end(dy_sessions *s, uint64_t key, int worker, uint64_t tool_key, double now)
{
    session *x = slot_for(s, key);
    x->worker = worker;
    x->tool = tool_key;
    x->ended = now;
    const tool *t = tool_key ? tool_of(s, tool_key, false) : NULL;
    return t && t->mean.n > 0 ? t->mean.mean : -1;
}

void dy_sessions_forget_worker(dy_sessions *s, int worker)
{
    for (int i = 0; i < s->n; i++)
        if (s->s[i].worker == worker)
            s->s[i].worker = -1;
}

double dy_sessions_tool_mean(const dy_sessions *s, uint64_t key, int *timed)
{
    int i = find(&s->by_tool, key);
    *timed = i < 0 ? 0 : (int)s->t[i].mean.n;
    return i < 0 || s->t[i].mean.n == 0 ? -1 : s->t[i].mean.mean;
}
