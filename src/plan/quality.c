/* quality.c — see quality.h. */
#include "plan/quality.h"

#include <stdlib.h>
#include <string.h>

bool dy_quality_needs_verifier(const char *method)
{
    return strcmp(method, "pass") == 0;
}

/* Whether points a and b are the same configuration (on any task). */
static bool same_config(const dy_quality_point *a, const dy_quality_point *b)
{
    return !strcmp(a->model, b->model) && !strcmp(a->kv_type, b->kv_type) &&
           !strcmp(a->method, b->method) && a->k == b->k &&
           a->one_request == b->one_request;
}

/* Whether point i is the first of its configuration (for task, or on any task if NULL). */
static bool first_of_config(const dy_quality_point *pts, int i, const char *task)
{
    for (int j = 0; j < i; j++)
        if (same_config(&pts[j], &pts[i]) && (!task || !strcmp(pts[j].task, task)))
            return false;
    return true;
}

/* Whether task names a task some point before index i already has. */
static bool task_seen_before(const dy_quality_point *pts, int i)
{
    for (int j = 0; j < i; j++)
        if (!strcmp(pts[j].task, pts[i].task))
            return true;
    return false;
}

/* The point of configuration c on task, or -1. */
static int point_on_task(const dy_quality_point *pts, int n, const dy_quality_point *c,
                         const char *task)
{
    for (int j = 0; j < n; j++)
        if (same_config(&pts[j], c) && !strcmp(pts[j].task, task))
            return j;
    return -1;
}

/* Judges configuration pts[i] for goal g over every task of the file; false if it lacks one. */
static bool judge_all_tasks(const dy_quality_point *pts, int n, int i, dy_quality_candidate *c)
{
    int tasks = 0;
    c->accuracy = 1.0;
    c->core_seconds = 0;
    c->latency_ms_p90 = 0;
    for (int t = 0; t < n; t++) {
        if (task_seen_before(pts, t))
            continue;
        const int j = point_on_task(pts, n, &pts[i], pts[t].task);
        if (j < 0)
            return false;
        tasks++;
        if (pts[j].accuracy < c->accuracy)
            c->accuracy = pts[j].accuracy;
        c->core_seconds += pts[j].core_seconds;
        if (pts[j].latency_ms_p90 > c->latency_ms_p90)
            c->latency_ms_p90 = pts[j].latency_ms_p90;
    }
    c->core_seconds /= tasks;
    return true;
}

static bool within_latency(const dy_quality_goal *g, double latency_ms)
{
    return g->max_latency_ms <= 0 || latency_ms <= g->max_latency_ms;
}

static int by_cost(const void *pa, const void *pb)
{
    const dy_quality_candidate *a = pa, *b = pb;
    if (a->core_seconds != b->core_seconds)
        return a->core_seconds < b->core_seconds ? -1 : 1;
    if (a->accuracy != b->accuracy)
        return a->accuracy > b->accuracy ? -1 : 1;
    return a->first - b->first;
}

int dy_quality_candidates(const dy_quality_point *pts, int n, const dy_quality_goal *g,
                          dy_quality_candidate *out, int cap)
{
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (g->task && strcmp(pts[i].task, g->task))
            continue;
        if (!g->allow_verifier && dy_quality_needs_verifier(pts[i].method))
            continue;
        if (!first_of_config(pts, i, g->task))
            continue;
        dy_quality_candidate c = {.first = i};
        if (g->task) {
            c.accuracy = pts[i].accuracy;
            c.core_seconds = pts[i].core_seconds;
            c.latency_ms_p90 = pts[i].latency_ms_p90;
        } else if (!judge_all_tasks(pts, n, i, &c)) {
            continue;
        }
        c.meets = c.accuracy >= g->min_accuracy && within_latency(g, c.latency_ms_p90);
        if (count < cap)
            out[count] = c;
        count++;
    }
    qsort(out, (size_t)(count < cap ? count : cap), sizeof *out, by_cost);
    return count;
}

int dy_quality_choose(const dy_quality_candidate *cands, int n)
{
    for (int i = 0; i < n; i++) /* in order of cost: the first that meets is the cheapest */
        if (cands[i].meets)
            return i;
    return -1;
}

int dy_quality_frontier(const dy_quality_candidate *cands, int n, const dy_quality_goal *g,
                        bool *on_frontier)
{
    int marked = 0;
    double best = -1.0; /* the highest accuracy of the cheaper candidates */
    for (int i = 0; i < n; i++) {
        on_frontier[i] = within_latency(g, cands[i].latency_ms_p90) && cands[i].accuracy > best;
        if (on_frontier[i]) {
            best = cands[i].accuracy;
            marked++;
        }
    }
    return marked;
}
