/* requests.c — see requests.h. */
#include "sim/requests.h"

#include "bench/bench_run.h"
#include "kv/block_hash.h"
#include "util/hashmap.h"

#include <stdio.h>
#include <stdlib.h>

void dy_sim_requests_free(dy_sim_requests *l)
{
    for (long i = 0; i < l->n; i++)
        dyb_request_free(&l->src[i]);
    free(l->src);
    free(l->r);
    *l = (dy_sim_requests){0};
}

static bool requests_grow(dy_sim_requests *l)
{
    if (l->n < l->cap)
        return true;
    long cap = l->cap ? 2 * l->cap : 256;
    dy_sim_request *r = realloc(l->r, sizeof *r * (size_t)cap);
    if (r)
        l->r = r;
    dyb_request *src = r ? realloc(l->src, sizeof *src * (size_t)cap) : NULL;
    if (src)
        l->src = src;
    if (!r || !src)
        return false;
    l->cap = cap;
    return true;
}

/* How many requests the run sends at most (-1: no bound): the load's, and a trace's rows. */
static long send_bound(const dy_sim_load *load, const dyb_workload *wl)
{
    long rows = dyb_workload_rows(wl);
    if (rows < 0)
        return load->requests;
    return load->requests < 0 || rows < load->requests ? rows : load->requests;
}

int dy_sim_requests_make(const dyb_workload *wl, const dy_sim_load *load, dy_sim_requests *l,
                         char *err, size_t errlen)
{
    dyb_arrivals a;
    dyb_arrivals_init(&a, wl, !load->closed && load->timed, load->closed ? 0 : load->rate,
                      load->burstiness, load->seed, false);
    long bound = send_bound(load, wl);
    double stop_ms = load->duration_s * 1000;
    for (; bound < 0 || l->n < bound; dyb_arrivals_advance(&a)) {
        double at_ms = load->closed ? 0 : a.next_ms;
        if (stop_ms > 0 && at_ms >= stop_ms)
            break;
        if (l->n >= INT32_MAX / 2 || !requests_grow(l) ||
            dyb_workload_make(wl, l->n, false, &l->src[l->n]) != 0) {
            snprintf(err, errlen, "out of memory making request %ld", l->n);
            return -1;
        }
        const dyb_request *q = &l->src[l->n];
        l->r[l->n++] = (dy_sim_request){.arrival = at_ms / 1000, .prompt = q->tokens,
                                        .n_prompt = (int)q->isl, .max_tokens = (int)q->osl,
                                        .n_samples = 1};
    }
    return 0;
}

int dy_sim_requests_traffic(const dy_sim_requests *l, int block_size, uint64_t fingerprint,
                            double *isl, double *osl, double *prefix_hit)
{
    dy_hashmap seen;
    if (!dy_hashmap_init(&seen, 1024))
        return -1;
    double in = 0, out = 0, hit = 0;
    uint64_t *h = NULL;
    size_t h_cap = 0;
    int rc = 0;
    for (long i = 0; i < l->n && rc == 0; i++) {
        const dy_sim_request *r = &l->r[i];
        in += r->n_prompt;
        out += r->max_tokens;
        size_t nb = (size_t)(r->n_prompt / block_size);
        if (nb > h_cap) {
            uint64_t *g = realloc(h, sizeof *h * nb);
            if (!g) {
                rc = -1;
                break;
            }
            h = g;
            h_cap = nb;
        }
        dy_block_hashes(fingerprint, r->prompt, r->n_prompt, block_size, h);
        /* A chain is found block by block from its start, as a prefix cache finds it. */
        size_t k = 0;
        while (k < nb && dy_hashmap_get(&seen, h[k]) != DY_HASHMAP_NONE)
            k++;
        hit += (double)k * block_size;
        for (size_t j = k; j < nb && rc == 0; j++)
            if (!dy_hashmap_put(&seen, h[j], 1))
                rc = -1;
    }
    free(h);
    dy_hashmap_free(&seen);
    if (rc != 0)
        return -1;
    *isl = l->n ? in / (double)l->n : 0;
    *osl = l->n ? out / (double)l->n : 0;
    *prefix_hit = in > 0 ? hit / in : 0;
    return 0;
}
