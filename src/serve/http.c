/* http.c — see http.h. Read in order: connection context and body collection, the small
 * routes (health, models, metrics), then generation: request → prompts → job → either one
 * JSON answer or an SSE stream produced by a content-reader callback. */
#include "serve/http.h"
#include "serve/select.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dy_http {
    dy_http_config cfg;
    struct MHD_Daemon *d;
    uint64_t next_id; /* response ids; guarded by mu */
    pthread_mutex_t mu;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- responses */

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type,
                                 char *body)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, char *json)
{
    return send_text(c, status, "application/json", json);
}

static enum MHD_Result send_error(dy_http *h, struct MHD_Connection *c, const dy_api_error *e)
{
    dy_metrics_request(h->cfg.metrics, DY_OUTCOME_REJECTED);
    return send_json(c, e->status, dy_api_error_json(e));
}

/* ---------------------------------------------------------------- connection context */

typedef struct gen gen;

typedef struct {
    char *body;
    size_t len, cap;
    bool too_large;
} conn_ctx;

static bool body_append(conn_ctx *x, const char *data, size_t n, size_t limit)
{
    if (x->too_large || x->len + n > limit) {
        x->too_large = true;
        return true;
    }
    if (x->len + n + 1 > x->cap) {
        size_t cap = (x->len + n + 1) * 2;
        if (cap > limit + 1)
            cap = limit + 1;
        char *b = realloc(x->body, cap);
        if (!b)
            return false;
        x->body = b;
        x->cap = cap;
    }
    memcpy(x->body + x->len, data, n);
    x->len += n;
    x->body[x->len] = 0;
    return true;
}

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    conn_ctx *x = *con_cls;
    if (x) {
        free(x->body);
        free(x);
        *con_cls = NULL;
    }
}

/* ---------------------------------------------------------------- small routes */

static bool authorized(const dy_http *h, struct MHD_Connection *c)
{
    if (!h->cfg.api_key)
        return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return a && !strncmp(a, "Bearer ", 7) && !strcmp(a + 7, h->cfg.api_key);
}

static enum MHD_Result route_health(dy_http *h, struct MHD_Connection *c)
{
    dy_worker_info w[64];
    int n = dy_workers_info(h->cfg.workers, w, 64), alive = 0;
    size_t cap = 96 + 64 * (size_t)n, len = 0;
    char *body = malloc(cap);
    if (!body)
        return MHD_NO;
    for (int i = 0; i < n; i++)
        alive += w[i].alive;
    len += (size_t)snprintf(body, cap, "{\"status\":\"%s\",\"workers\":[",
                            alive ? "ok" : "unavailable");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(body + len, cap - len, "%s{\"id\":%d,\"pid\":%d,\"up\":%s,"
                                "\"restarts\":%llu}", i ? "," : "", i, (int)w[i].pid,
                                w[i].alive ? "true" : "false", (unsigned long long)w[i].restarts);
    snprintf(body + len, cap - len, "]}");
    return send_json(c, alive ? 200 : 503, body);
}

static enum MHD_Result route_models(dy_http *h, struct MHD_Connection *c, const char *url)
{
    dy_api_model m = {h->cfg.model_id, h->cfg.started, "dyad"};
    if (!strcmp(url, "/v1/models"))
        return send_json(c, 200, dy_api_models_json(&m, 1));
    if (!strcmp(url + strlen("/v1/models/"), h->cfg.model_id))
        return send_json(c, 200, dy_api_model_json(&m));
    dy_api_error e;
    dy_api_error_model_not_found(&e, url + strlen("/v1/models/"));
    return send_error(h, c, &e);
}

static enum MHD_Result route_metrics(dy_http *h, struct MHD_Connection *c)
{
    dy_worker_info w[64];
    int n = dy_workers_info(h->cfg.workers, w, 64);
    dy_xfer_totals x = dy_workers_xfer_totals(h->cfg.workers);
    dy_router_totals rt = dy_workers_router_totals(h->cfg.workers);
    return send_text(c, 200, "text/plain; version=0.0.4; charset=utf-8",
                     dy_metrics_render(h->cfg.metrics, w, n, &x, &rt));
}

/* ---------------------------------------------------------------- generation */

struct gen {
    dy_http *h;
    dy_api_request req;
    dy_job *job;
    int n_prompts, per_prompt; /* per_prompt: samples generated per prompt (n or best_of) */
    int out_per_prompt;     /* choices returned per prompt: n, or 1 with dyad.select */
    int *chosen;            /* returned choice → job choice (identity unless selecting) */
    dy_vote **votes;        /* per prompt, with dyad.select = "majority" */
    bool *counted;          /* per job choice: its end was seen by the selection */
    bool *dropped;          /* per job choice: cancelled because the vote was settled */
    bool selected;          /* chosen[] is final */
    int *prompt_tokens;     /* per prompt */
    char **echo;            /* per prompt: the prompt text, when echo is on */
    char id[64];
    int64_t created;
    double t_arrival;
    /* streaming */
    int *next_tok;          /* per choice: next token event to send */
    bool *first_sent, *end_sent;
    char *pend;
    size_t pend_len, pend_pos;
    bool stream_over, recorded;
    int client_fd;          /* to notice a client that left while we wait for tokens */
};

static void gen_free(gen *g)
{
    if (g->job)
        dy_job_unref(g->job);
    for (int i = 0; g->votes && i < g->n_prompts; i++)
        dy_vote_free(g->votes[i]);
    free(g->votes);
    free(g->chosen);
    free(g->counted);
    free(g->dropped);
    dy_api_request_free(&g->req);
    if (g->echo)
        for (int i = 0; i < g->n_prompts; i++)
            free(g->echo[i]);
    free(g->echo);
    free(g->prompt_tokens);
    free(g->next_tok);
    free(g->first_sent);
    free(g->end_sent);
    free(g->pend);
    free(g);
}

/* Token ids of one prompt: given ids, or the text tokenized (chat templates carry special
 * tokens as text, so they are parsed as such there). */
static int32_t *tokenize(const dy_http *h, const char *text, bool special, int *n)
{
    const dy_tokenizer *t = h->cfg.tok;
    bool bos = dy_tokenizer_add_bos(t);
    int k = dy_tokenize(t, text, strlen(text), bos, special, NULL, 0);
    int32_t *ids = k > 0 ? malloc(sizeof(int32_t) * (size_t)k) : NULL;
    if (!ids || dy_tokenize(t, text, strlen(text), bos, special, ids, k) != k) {
        free(ids);
        return NULL;
    }
    *n = k;
    return ids;
}

static char *render_chat(const dy_http *h, const dy_api_request *r)
{
    const dy_tokenizer *t = h->cfg.tok;
    const char *bos = dy_tokenizer_bos(t) >= 0 ? dy_tokenizer_token_text(t, dy_tokenizer_bos(t)) : NULL;
    const char *eos = dy_tokenizer_eos(t) >= 0 ? dy_tokenizer_token_text(t, dy_tokenizer_eos(t)) : NULL;
    return dy_chat_render(h->cfg.chat, r->messages, r->n_messages, true, bos, eos);
}

/* The wire request for one prompt (everything but its random stream). */
static dy_msg_request wire_request(const gen *g, int32_t *ids, int n, int max_new)
{
    const dy_api_request *r = &g->req;
    dy_msg_request m = {0};
    m.max_tokens = (uint32_t)max_new;
    m.temperature = r->sampling.temperature;
    m.top_p = r->sampling.top_p;
    m.min_p = r->sampling.min_p;
    m.top_k = r->sampling.top_k;
    m.seed = r->has_seed ? r->sampling.seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)g;
    m.ignore_eos = r->ignore_eos;
    /* Ranking samples needs every token's log-probability, asked for or not. */
    m.want_logprobs = r->logprobs || r->select == DY_SELECT_LOGPROB || r->best_of > r->n;
    m.n_logprobs = (uint8_t)r->top_logprobs;
    m.n_stops = (uint8_t)r->n_stop;
    for (int i = 0; i < r->n_stop; i++)
        snprintf(m.stops[i], sizeof m.stops[i], "%s", r->stop[i]);
    m.n_prompt = (uint32_t)n;
    m.prompt = ids;
    return m;
}

/* Fills prompt i's choices of the job. -1 with err set on a bad prompt. */
static int setup_prompt(gen *g, int i, dy_api_error *err)
{
    dy_http *h = g->h;
    const dy_api_request *r = &g->req;
    int n = 0;
    int32_t *ids = NULL;
    const char *text = NULL;
    char *chat = NULL;
    if (r->kind == DY_API_CHAT) {
        if (!(chat = render_chat(h, r))) {
            dy_api_error_internal(err, "rendering the chat template");
            return -1;
        }
        text = chat;
    } else if (r->prompts[i].text)
        text = r->prompts[i].text;
    if (text)
        ids = tokenize(h, text, r->kind == DY_API_CHAT, &n);
    else {
        n = r->prompts[i].n_ids;
        ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (ids)
            memcpy(ids, r->prompts[i].ids, sizeof(int32_t) * (size_t)n);
    }
    free(chat);
    if (!ids) {
        dy_api_error_set(err, 400, "invalid_request_error", NULL,
                         r->kind == DY_API_CHAT ? "messages" : "prompt",
                         "the prompt is empty or could not be tokenized");
        return -1;
    }
    int max_new = dy_api_max_new_tokens(r, n, &h->cfg.limits, err);
    if (max_new < 0) {
        free(ids);
        return -1;
    }
    g->prompt_tokens[i] = n;
    if (r->echo && r->kind == DY_API_COMPLETIONS) {
        g->echo[i] = text ? strdup(text) : NULL;
        if (!g->echo[i]) { /* token-id prompt: echo its detokenized text */
            size_t cap = 16 * (size_t)n + 1, len = 0;
            g->echo[i] = calloc(cap, 1);
            for (int k = 0; g->echo[i] && k < n; k++) {
                char piece[256];
                int pl = dy_token_to_piece(h->cfg.tok, k ? ids[k - 1] : -1, ids[k], piece, sizeof piece);
                if (pl > 0 && len + (size_t)pl < cap && pl < (int)sizeof piece) {
                    memcpy(g->echo[i] + len, piece, (size_t)pl);
                    len += (size_t)pl;
                }
            }
        }
    }
    dy_msg_request m = wire_request(g, ids, n, max_new);
    bool ok = true;
    for (int k = 0; k < g->per_prompt; k++)
        ok = ok && dy_job_set_request(g->job, i * g->per_prompt + k, &m, (uint32_t)k);
    free(ids);
    if (!ok)
        dy_api_error_internal(err, "out of memory");
    return ok ? 0 : -1;
}

static const char *unsupported(const dy_api_request *r)
{
    if (r->echo && r->logprobs)
        return "echo";
    return NULL;
}

static gen *gen_new(dy_http *h, const char *body, size_t len, dy_api_kind kind, dy_api_error *err)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) {
        dy_api_error_internal(err, "out of memory");
        return NULL;
    }
    g->h = h;
    g->t_arrival = now_s();
    if (dy_api_parse(body, len, kind, &h->cfg.limits, &g->req, err) != 0)
        goto fail;
    if (strcmp(g->req.model, h->cfg.model_id) != 0) {
        dy_api_error_model_not_found(err, g->req.model);
        goto fail;
    }
    const char *u = unsupported(&g->req);
    if (u) {
        dy_api_error_set(err, 400, "invalid_request_error", "unsupported", u,
                         "'%s' is not supported by this server yet (see docs/api.md)", u);
        goto fail;
    }
    g->n_prompts = kind == DY_API_CHAT ? 1 : g->req.n_prompts;
    g->per_prompt = g->req.best_of > g->req.n ? g->req.best_of : g->req.n;
    g->out_per_prompt = g->req.select != DY_SELECT_NONE ? 1 : g->req.n;
    int nc = g->n_prompts * g->per_prompt, n_out = g->n_prompts * g->out_per_prompt;
    g->job = dy_job_new(nc);
    g->chosen = calloc((size_t)n_out, sizeof *g->chosen);
    g->counted = calloc((size_t)nc, sizeof *g->counted);
    g->dropped = calloc((size_t)nc, sizeof *g->dropped);
    if (g->req.select == DY_SELECT_MAJORITY) {
        char verr[256];
        g->votes = calloc((size_t)g->n_prompts, sizeof *g->votes);
        for (int i = 0; g->votes && i < g->n_prompts; i++)
            if (!(g->votes[i] = dy_vote_new(g->req.answer_regex, g->per_prompt, verr, sizeof verr))) {
                dy_api_error_set(err, 400, "invalid_request_error", NULL, "dyad.answer_regex", "%s", verr);
                goto fail;
            }
        if (!g->votes) {
            dy_api_error_internal(err, "out of memory");
            goto fail;
        }
    }
    if (!g->job || !g->chosen || !g->counted || !g->dropped) {
        dy_api_error_internal(err, "out of memory");
        goto fail;
    }
    g->job->group = g->per_prompt;
    for (int i = 0; i < n_out; i++) /* until a selection says otherwise */
        g->chosen[i] = (i / g->out_per_prompt) * g->per_prompt + i % g->out_per_prompt;
    g->prompt_tokens = calloc((size_t)g->n_prompts, sizeof *g->prompt_tokens);
    g->echo = calloc((size_t)g->n_prompts, sizeof *g->echo);
    g->next_tok = calloc((size_t)nc, sizeof *g->next_tok);
    g->first_sent = calloc((size_t)nc, sizeof *g->first_sent);
    g->end_sent = calloc((size_t)nc, sizeof *g->end_sent);
    if (!g->job || !g->prompt_tokens || !g->echo || !g->next_tok || !g->first_sent || !g->end_sent) {
        dy_api_error_internal(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < g->n_prompts; i++)
        if (setup_prompt(g, i, err) != 0)
            goto fail;
    pthread_mutex_lock(&h->mu);
    uint64_t id = h->next_id++;
    pthread_mutex_unlock(&h->mu);
    snprintf(g->id, sizeof g->id, "%s-%llx%06llx", kind == DY_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)id);
    g->created = (int64_t)time(NULL);
    return g;
fail:
    gen_free(g);
    return NULL;
}

/* ---------------------------------------------------------------- building answers */

static dy_api_finish api_finish(uint8_t f)
{
    return f == DY_END_LENGTH ? DY_FINISH_LENGTH : DY_FINISH_STOP;
}

static dy_api_meta meta(const gen *g)
{
    return (dy_api_meta){g->req.kind, g->id, g->created, g->h->cfg.model_id, NULL};
}

static dy_api_usage usage(const gen *g)
{
    dy_api_usage u = {0};
    for (int i = 0; i < g->n_prompts; i++) {
        u.prompt_tokens += g->prompt_tokens[i];
        u.cached_tokens += (int)g->job->choices[i * g->per_prompt].cached_tokens;
    }
    for (int i = 0; i < g->job->n_choices; i++)
        u.completion_tokens += (int)g->job->choices[i].completion_tokens;
    return u;
}

/* Token texts and alternatives for logprobs, over events [from, to) of a choice. */
typedef struct {
    dy_api_token_lp *lp;
    dy_api_alt *alts;
    char *texts; /* 64 bytes per piece */
    int n;
} lp_build;

static void lp_free(lp_build *b)
{
    free(b->lp);
    free(b->alts);
    free(b->texts);
}

static const char *piece_into(const gen *g, int32_t id, char *slot, size_t *len)
{
    int n = dy_token_to_piece(g->h->cfg.tok, -1, id, slot, 64);
    *len = n < 0 ? 0 : n > 63 ? 63 : (size_t)n;
    return slot;
}

static bool lp_make(const gen *g, const dy_choice *c, int from, int to, int base_offset,
                    lp_build *b)
{
    int n = to - from, per = 1 + DY_WIRE_MAX_TOP;
    memset(b, 0, sizeof *b);
    b->lp = calloc((size_t)(n ? n : 1), sizeof *b->lp);
    b->alts = calloc((size_t)(n ? n : 1) * DY_WIRE_MAX_TOP, sizeof *b->alts);
    b->texts = malloc((size_t)(n ? n : 1) * per * 64);
    if (!b->lp || !b->alts || !b->texts)
        return false;
    int offset = base_offset;
    for (int i = 0; i < n; i++) {
        const dy_tok_event *e = &c->toks[from + i];
        char *slots = b->texts + (size_t)i * per * 64;
        dy_api_token_lp *t = &b->lp[i];
        t->token = piece_into(g, e->token, slots, &t->len);
        t->logprob = e->logprob;
        t->text_offset = offset;
        offset += (int)e->text_len;
        t->top = b->alts + (size_t)i * DY_WIRE_MAX_TOP;
        t->n_top = e->n_top;
        for (int k = 0; k < e->n_top; k++) {
            dy_api_alt *a = b->alts + (size_t)i * DY_WIRE_MAX_TOP + k;
            a->token = piece_into(g, e->top_ids[k], slots + 64 * (k + 1), &a->len);
            a->logprob = e->top_logprobs[k];
        }
    }
    b->n = n;
    return true;
}

/* The whole text of a choice: echo, every token's released text, the tail. */
static char *choice_text(const gen *g, int ci, size_t *len)
{
    const dy_choice *c = &g->job->choices[ci];
    const char *echo = g->echo[ci / g->per_prompt];
    size_t n = (echo ? strlen(echo) : 0) + c->tail_len + 1;
    for (int i = 0; i < c->n_toks; i++)
        n += c->toks[i].text_len;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    if (echo)
        p = stpcpy(p, echo);
    for (int i = 0; i < c->n_toks; i++) {
        memcpy(p, c->toks[i].text, c->toks[i].text_len);
        p += c->toks[i].text_len;
    }
    memcpy(p, c->tail ? c->tail : "", c->tail_len);
    p += c->tail_len;
    *p = 0;
    *len = (size_t)(p - s);
    return s;
}

/* ---------------------------------------------------------------- selection */

static bool selecting(const gen *g)
{
    return g->req.select != DY_SELECT_NONE || g->per_prompt > g->req.n;
}

static double choice_mean_logprob(const dy_choice *c)
{
    float lp[256];
    double sum = 0;
    for (int i = 0; i < c->n_toks; i += 256) {
        int n = c->n_toks - i < 256 ? c->n_toks - i : 256;
        for (int k = 0; k < n; k++)
            lp[k] = c->toks[i + k].logprob;
        sum += dy_mean_logprob(lp, n) * n;
    }
    return c->n_toks ? sum / c->n_toks : dy_mean_logprob(lp, 0);
}

/* Counts the votes of samples that ended since the last call. When a prompt's vote is
 * settled, its samples still running are listed in cancel[] (the caller cancels them
 * without the job's lock: the pool's lock comes first). Call with the job's mu held. */
static int vote_progress(gen *g, int *cancel)
{
    int n_cancel = 0;
    if (!g->votes)
        return 0;
    for (int p = 0; p < g->n_prompts; p++) {
        bool was = dy_vote_settled(g->votes[p]);
        for (int k = 0; k < g->per_prompt; k++) {
            int ci = p * g->per_prompt + k;
            const dy_choice *c = &g->job->choices[ci];
            if (!c->done || g->counted[ci])
                continue;
            g->counted[ci] = true;
            size_t len = 0;
            char *text = c->finish == DY_END_STOP || c->finish == DY_END_LENGTH
                         ? choice_text(g, ci, &len) : NULL;
            if (text)
                dy_vote_add(g->votes[p], k, text, len);
            else
                dy_vote_abstain(g->votes[p], k);
            free(text);
        }
        if (!was && dy_vote_settled(g->votes[p]))
            for (int k = 0; k < g->per_prompt; k++) {
                int ci = p * g->per_prompt + k;
                if (!g->job->choices[ci].done) {
                    g->dropped[ci] = true;
                    cancel[n_cancel++] = ci;
                }
            }
    }
    return n_cancel;
}

/* Lets the votes settle early: cancels the samples no longer needed. Call without locks. */
static void settle_votes(gen *g)
{
    if (!g->votes)
        return;
    int *cancel = malloc(sizeof(int) * (size_t)g->job->n_choices);
    if (!cancel)
        return;
    pthread_mutex_lock(&g->job->mu);
    int n = vote_progress(g, cancel);
    pthread_mutex_unlock(&g->job->mu);
    for (int i = 0; i < n; i++)
        dy_workers_cancel_choice(g->h->cfg.workers, g->job, cancel[i]);
    free(cancel);
}

/* Once every sample has ended: which samples are returned. Call with the job's mu held. */
static void select_choices(gen *g)
{
    if (g->selected || !selecting(g))
        return;
    g->selected = true;
    int *cancel = malloc(sizeof(int) * (size_t)g->job->n_choices);
    if (cancel)
        vote_progress(g, cancel); /* everything has ended: nothing left to cancel */
    free(cancel);
    double *score = malloc(sizeof(double) * (size_t)g->per_prompt);
    for (int p = 0; score && p < g->n_prompts; p++) {
        int base = p * g->per_prompt, *out = g->chosen + p * g->out_per_prompt;
        if (g->votes) {
            out[0] = base + dy_vote_chosen(g->votes[p]);
            continue;
        }
        for (int k = 0; k < g->per_prompt; k++)
            score[k] = choice_mean_logprob(&g->job->choices[base + k]);
        dy_select_best(score, g->per_prompt, g->out_per_prompt, out);
        for (int k = 0; k < g->out_per_prompt; k++)
            out[k] += base;
    }
    free(score);
}

static const char *finish_name(uint8_t f)
{
    return f == DY_END_LENGTH ? "length" : f == DY_END_STOP ? "stop"
         : f == DY_END_CANCELLED ? "cancelled" : "error";
}

/* dyad.selection: per prompt, how the returned choices were picked from the samples. */
static json_t *selection_json(const gen *g)
{
    json_t *arr = json_array();
    const char *mode = g->req.select == DY_SELECT_MAJORITY ? "majority"
                     : g->req.select == DY_SELECT_LOGPROB ? "logprob" : "best_of";
    for (int p = 0; arr && p < g->n_prompts; p++) {
        json_t *samples = json_array(), *chosen = json_array();
        for (int k = 0; k < g->per_prompt; k++) {
            const dy_choice *c = &g->job->choices[p * g->per_prompt + k];
            double m = choice_mean_logprob(c);
            json_t *o = json_pack("{s:i, s:s, s:i, s:o}", "index", k, "finish_reason",
                                  finish_name(c->finish), "completion_tokens",
                                  (int)c->completion_tokens, "mean_logprob",
                                  c->n_toks && (g->req.logprobs || !g->votes) ? json_real(m) : json_null());
            if (g->votes) {
                const char *a = dy_vote_answer(g->votes[p], k);
                json_object_set_new(o, "answer", a ? json_string(a) : json_null());
            }
            json_array_append_new(samples, o);
        }
        for (int k = 0; k < g->out_per_prompt; k++)
            json_array_append_new(chosen, json_integer(g->chosen[p * g->out_per_prompt + k] -
                                                       p * g->per_prompt));
        json_t *e = json_pack("{s:s, s:o, s:o}", "mode", mode, "chosen", chosen, "samples", samples);
        if (e && g->votes)
            json_object_set_new(e, "vote", dy_vote_json(g->votes[p]));
        json_array_append_new(arr, e);
    }
    return arr;
}

/* The documented `dyad` extension object: where each choice ran and what its KV transfer
 * cost (docs/api.md). */
static json_t *choice_dyad(const dy_choice *c, int i)
{
    json_t *o = json_pack("{s:i, s:i, s:i}", "index", i, "worker", c->worker,
                          "predicted_overlap_blocks", c->overlap_blocks);
    if (!o)
        return NULL;
    if (c->prefill_worker >= 0) {
        json_object_set_new(o, "prefill_worker", json_integer(c->prefill_worker));
        json_object_set_new(o, "kv_transfer",
                            json_pack("{s:I, s:f, s:f}", "bytes", (json_int_t)c->xfer_bytes,
                                      "seconds", c->xfer_seconds, "prefill_seconds",
                                      c->prefill_seconds));
    } else
        json_object_set_new(o, "prefill_worker", json_null());
    return o;
}

static json_t *dyad_object(const gen *g)
{
    json_t *arr = json_array();
    int n_out = g->n_prompts * g->out_per_prompt;
    for (int i = 0; arr && i < n_out; i++)
        json_array_append_new(arr, choice_dyad(&g->job->choices[g->chosen[i]], i));
    json_t *o = arr ? json_pack("{s:o}", "choices", arr) : NULL;
    if (o && selecting(g))
        json_object_set_new(o, "selection", selection_json(g));
    return o;
}

static char *whole_response(const gen *g)
{
    int nc = g->n_prompts * g->out_per_prompt;
    dy_api_choice *ch = calloc((size_t)nc, sizeof *ch);
    char **texts = calloc((size_t)nc, sizeof *texts);
    lp_build *lps = calloc((size_t)nc, sizeof *lps);
    char *json = NULL;
    if (!ch || !texts || !lps)
        goto out;
    for (int i = 0; i < nc; i++) {
        const dy_choice *c = &g->job->choices[g->chosen[i]];
        size_t len = 0;
        if (!(texts[i] = choice_text(g, g->chosen[i], &len)))
            goto out;
        ch[i] = (dy_api_choice){.index = i, .text = texts[i], .len = len,
                                .finish = api_finish(c->finish)};
        if (g->req.logprobs) {
            const char *echo = g->echo[g->chosen[i] / g->per_prompt];
            if (!lp_make(g, c, 0, c->n_toks, echo ? (int)strlen(echo) : 0, &lps[i]))
                goto out;
            ch[i].has_logprobs = true;
            ch[i].logprobs = lps[i].lp;
            ch[i].n_logprobs = lps[i].n;
        }
    }
    dy_api_meta m = meta(g);
    dy_api_usage u = usage(g);
    json_t *dyad = dyad_object(g);
    json = dy_api_response_json(&m, ch, nc, &u, dyad);
    json_decref(dyad);
out:
    for (int i = 0; ch && texts && lps && i < nc; i++) {
        free(texts[i]);
        lp_free(&lps[i]);
    }
    free(ch);
    free(texts);
    free(lps);
    return json;
}

/* ---------------------------------------------------------------- metrics per request */

static void record(gen *g)
{
    if (g->recorded)
        return;
    g->recorded = true;
    dy_metrics *m = g->h->cfg.metrics;
    double last = g->t_arrival;
    dy_outcome worst = DY_OUTCOME_STOP;
    for (int i = 0; i < g->job->n_choices; i++) {
        const dy_choice *c = &g->job->choices[i];
        if (c->n_toks > 0) {
            dy_metrics_ttft(m, c->toks[0].t - g->t_arrival);
            for (int k = 1; k < c->n_toks; k++)
                dy_metrics_itl(m, c->toks[k].t - c->toks[k - 1].t);
            if (c->toks[c->n_toks - 1].t > last)
                last = c->toks[c->n_toks - 1].t;
        }
        if (c->finish != DY_END_ERROR)
            dy_metrics_queue(m, c->queue_us / 1e6);
        if (g->dropped[i]) /* cancelled by a settled vote, not by the client */
            continue;
        dy_outcome o = c->finish == DY_END_LENGTH ? DY_OUTCOME_LENGTH
                     : c->finish == DY_END_CANCELLED ? DY_OUTCOME_CANCELLED
                     : c->finish == DY_END_ERROR ? DY_OUTCOME_ERROR : DY_OUTCOME_STOP;
        if (o > worst)
            worst = o;
    }
    (void)last;
    dy_metrics_e2e(m, now_s() - g->t_arrival);
    dy_metrics_request(m, worst);
}

/* A choice ended in error: the message, and whether the server (not the request) is at fault. */
static const dy_choice *failed_choice(const dy_job *j)
{
    for (int i = 0; i < j->n_choices; i++)
        if (j->choices[i].done && j->choices[i].finish == DY_END_ERROR)
            return &j->choices[i];
    return NULL;
}

static void error_for(const dy_choice *c, dy_api_error *e)
{
    const char *msg = c->tail ? c->tail : "generation failed";
    if (!strncmp(msg, "the worker", 10) || !strncmp(msg, "could not reach", 15))
        dy_api_error_unavailable(e, msg);
    else
        dy_api_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
}

/* ---------------------------------------------------------------- non-streaming */

static int connection_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* True if the client has closed its side (checked while it waits for tokens). */
static bool fd_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd pf = {fd, POLLRDHUP, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static bool client_gone(struct MHD_Connection *c)
{
    return fd_gone(connection_fd(c));
}

/* Waits on the job's condition for at most ms milliseconds (mu held). */
static void wait_job(dy_job *j, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000 * 1000;
    while (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static enum MHD_Result answer_whole(gen *g, struct MHD_Connection *c)
{
    dy_job *j = g->job;
    bool cancelled = false;
    pthread_mutex_lock(&j->mu);
    while (!dy_job_all_done(j)) {
        wait_job(j, 200);
        if (!cancelled && !dy_job_all_done(j)) {
            pthread_mutex_unlock(&j->mu);
            settle_votes(g);
            if (client_gone(c)) {
                dy_workers_cancel(g->h->cfg.workers, j);
                cancelled = true;
            }
            pthread_mutex_lock(&j->mu);
        }
    }
    select_choices(g);
    pthread_mutex_unlock(&j->mu);
    record(g);
    const dy_choice *bad = failed_choice(j);
    enum MHD_Result r;
    if (cancelled)
        r = MHD_NO; /* nobody to answer */
    else if (bad) {
        dy_api_error e;
        error_for(bad, &e);
        r = send_json(c, e.status, dy_api_error_json(&e));
    } else
        r = send_json(c, 200, whole_response(g));
    gen_free(g);
    return r;
}

/* ---------------------------------------------------------------- streaming */

static bool pend_add(gen *g, char *frame)
{
    if (!frame)
        return false;
    size_t n = strlen(frame);
    char *p = realloc(g->pend, g->pend_len + n + 1);
    if (!p) {
        free(frame);
        return false;
    }
    memcpy(p + g->pend_len, frame, n + 1);
    g->pend = p;
    g->pend_len += n;
    free(frame);
    return true;
}

static void chunk(gen *g, const dy_api_choice *ch)
{
    dy_api_meta m = meta(g);
    json_t *dyad = NULL;
    if (ch->finish != DY_FINISH_NONE) { /* a choice's last chunk says where it ran */
        json_t *one = choice_dyad(&g->job->choices[g->chosen[ch->index]], ch->index);
        dyad = one ? json_pack("{s:[o]}", "choices", one) : NULL;
        if (dyad && selecting(g))
            json_object_set_new(dyad, "selection", selection_json(g));
    }
    char *json = dyad ? dy_api_chunk_json_dyad(&m, ch, 1, g->req.include_usage, dyad)
                      : dy_api_chunk_json(&m, ch, 1, g->req.include_usage);
    json_decref(dyad);
    pend_add(g, json ? dy_sse_frame(json) : NULL);
    free(json);
}

/* Selection modes stream nothing until every sample has ended (or was dropped by a settled
 * vote); then each returned choice comes as one chunk of text and its finishing chunk. */
static void stream_selected(gen *g)
{
    select_choices(g);
    for (int r = 0; r < g->n_prompts * g->out_per_prompt; r++) {
        const dy_choice *c = &g->job->choices[g->chosen[r]];
        if (c->finish == DY_END_ERROR)
            continue;
        if (g->req.kind == DY_API_CHAT) {
            dy_api_choice first = {.index = r, .text = "", .len = 0, .first = true};
            chunk(g, &first);
        }
        size_t len = 0;
        char *text = choice_text(g, g->chosen[r], &len);
        dy_api_choice body = {.index = r, .text = text ? text : "", .len = text ? len : 0};
        chunk(g, &body);
        free(text);
        dy_api_choice end = {.index = r, .finish = api_finish(c->finish)};
        chunk(g, &end);
    }
}

/* Queues SSE frames for the tokens of every choice that arrived since the last call. */
static void stream_tokens(gen *g)
{
    dy_job *j = g->job;
    for (int i = 0; i < j->n_choices; i++) {
        const dy_choice *c = &j->choices[i];
        if (!g->first_sent[i] && (c->n_toks > 0 || c->done) && c->finish != DY_END_ERROR) {
            g->first_sent[i] = true;
            const char *echo = g->echo[i / g->per_prompt];
            if (g->req.kind == DY_API_CHAT || echo) {
                dy_api_choice ch = {.index = i, .text = echo ? echo : "", .len = echo ? strlen(echo) : 0,
                                    .first = true};
                chunk(g, &ch);
            }
        }
        for (; g->next_tok[i] < c->n_toks; g->next_tok[i]++) {
            const dy_tok_event *e = &c->toks[g->next_tok[i]];
            dy_api_choice ch = {.index = i, .text = e->text, .len = e->text_len};
            lp_build lb = {0};
            if (g->req.logprobs && lp_make(g, c, g->next_tok[i], g->next_tok[i] + 1, 0, &lb)) {
                ch.has_logprobs = true;
                ch.logprobs = lb.lp;
                ch.n_logprobs = lb.n;
            }
            chunk(g, &ch);
            lp_free(&lb);
        }
        if (c->done && !g->end_sent[i] && c->finish != DY_END_ERROR) {
            g->end_sent[i] = true;
            dy_api_choice ch = {.index = i, .text = c->tail_len ? c->tail : NULL,
                                .len = c->tail_len, .finish = api_finish(c->finish)};
            chunk(g, &ch);
        }
    }
}

/* Queues SSE frames for everything that arrived since the last call. Call with job mu held. */
static void stream_collect(gen *g)
{
    dy_job *j = g->job;
    if (!selecting(g))
        stream_tokens(g);
    else if (!g->stream_over && dy_job_all_done(j) && !failed_choice(j))
        stream_selected(g);
    if (!g->stream_over && dy_job_all_done(j)) {
        g->stream_over = true;
        const dy_choice *bad = failed_choice(j);
        if (bad) {
            dy_api_error e;
            error_for(bad, &e);
            char *json = dy_api_error_json(&e);
            pend_add(g, json ? dy_sse_frame(json) : NULL);
            free(json);
        } else if (g->req.include_usage) {
            dy_api_meta m = meta(g);
            dy_api_usage u = usage(g);
            char *json = dy_api_usage_chunk_json(&m, &u);
            pend_add(g, json ? dy_sse_frame(json) : NULL);
            free(json);
        }
        pend_add(g, strdup(DY_SSE_DONE));
    }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    gen *g = cls;
    dy_job *j = g->job;
    pthread_mutex_lock(&j->mu);
    while (g->pend_pos == g->pend_len) {
        free(g->pend);
        g->pend = NULL;
        g->pend_len = g->pend_pos = 0;
        if (g->stream_over) {
            pthread_mutex_unlock(&j->mu);
            record(g);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (g->votes) { /* cancelling samples takes the pool's lock, which comes first */
            pthread_mutex_unlock(&j->mu);
            settle_votes(g);
            pthread_mutex_lock(&j->mu);
        }
        stream_collect(g);
        if (g->pend_len == 0) {
            wait_job(j, 200);
            if (fd_gone(g->client_fd)) {
                pthread_mutex_unlock(&j->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free cancels */
            }
        }
    }
    size_t n = g->pend_len - g->pend_pos;
    if (n > max)
        n = max;
    memcpy(buf, g->pend + g->pend_pos, n);
    g->pend_pos += n;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

/* Called when the stream ends or the client goes away; cancels what still runs. */
static void stream_free(void *cls)
{
    gen *g = cls;
    pthread_mutex_lock(&g->job->mu);
    bool unfinished = !dy_job_all_done(g->job);
    pthread_mutex_unlock(&g->job->mu);
    if (unfinished) {
        dy_workers_cancel(g->h->cfg.workers, g->job);
        /* The workers answer a cancel within a step; wait (bounded) so the outcome counts. */
        pthread_mutex_lock(&g->job->mu);
        for (int i = 0; i < 25 && !dy_job_all_done(g->job); i++)
            wait_job(g->job, 200);
        pthread_mutex_unlock(&g->job->mu);
    }
    record(g);
    gen_free(g);
}

static enum MHD_Result answer_stream(gen *g, struct MHD_Connection *c)
{
    g->client_fd = connection_fd(c);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                               stream_reader, g, stream_free);
    if (!r) {
        dy_workers_cancel(g->h->cfg.workers, g->job);
        gen_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result route_generate(dy_http *h, struct MHD_Connection *c, dy_api_kind kind,
                                      const conn_ctx *x)
{
    dy_api_error e;
    gen *g = gen_new(h, x->body ? x->body : "", x->len, kind, &e);
    if (!g)
        return send_error(h, c, &e);
    char msg[256];
    int rc = dy_workers_submit(h->cfg.workers, g->job, msg, sizeof msg);
    if (rc != 0) {
        if (rc == -1)
            dy_api_error_queue_full(&e);
        else
            dy_api_error_unavailable(&e, msg);
        gen_free(g);
        return send_error(h, c, &e);
    }
    return g->req.stream ? answer_stream(g, c) : answer_whole(g, c);
}

/* ---------------------------------------------------------------- dispatch */

static enum MHD_Result route(dy_http *h, struct MHD_Connection *c, const char *url,
                             const char *method, const conn_ctx *x)
{
    dy_api_error e;
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    bool gen_route = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");
    bool get_route = !strcmp(url, "/health") || !strcmp(url, "/metrics") ||
                     !strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11);
    if (!gen_route && !get_route) {
        dy_api_error_route_not_found(&e, method, url);
        return send_error(h, c, &e);
    }
    if ((gen_route && !post) || (get_route && !get)) {
        dy_api_error_method_not_allowed(&e, method, url);
        return send_error(h, c, &e);
    }
    if (!strcmp(url, "/health"))
        return route_health(h, c);
    if (!authorized(h, c)) {
        dy_api_error_unauthorized(&e);
        return send_error(h, c, &e);
    }
    if (!strcmp(url, "/metrics"))
        return route_metrics(h, c);
    if (get_route)
        return route_models(h, c, url);
    if (x->too_large) {
        dy_api_error_too_large(&e, h->cfg.limits.max_body_bytes);
        return send_error(h, c, &e);
    }
    return route_generate(h, c, !strcmp(url, "/v1/completions") ? DY_API_COMPLETIONS : DY_API_CHAT, x);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    (void)version;
    dy_http *h = cls;
    conn_ctx *x = *con_cls;
    if (!x) {
        if (!(x = calloc(1, sizeof *x)))
            return MHD_NO;
        *con_cls = x;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > h->cfg.limits.max_body_bytes)
            x->too_large = true; /* refuse before reading it */
        return MHD_YES;
    }
    if (*data_size > 0) {
        if (!body_append(x, data, *data_size, h->cfg.limits.max_body_bytes))
            return MHD_NO;
        *data_size = 0;
        return MHD_YES;
    }
    return route(h, c, url, method, x);
}

dy_http *dy_http_start(const dy_http_config *cfg, char *err, size_t errlen)
{
    dy_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->cfg = *cfg;
    h->next_id = 1;
    pthread_mutex_init(&h->mu, NULL);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "--host '%s' is not an IPv4 address", cfg->host);
        free(h);
        return NULL;
    }
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            (uint16_t)cfg->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, request_completed, h,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use?)", cfg->host, cfg->port);
        free(h);
        return NULL;
    }
    return h;
}

void dy_http_quiesce(dy_http *h)
{
    MHD_quiesce_daemon(h->d);
}

void dy_http_stop(dy_http *h)
{
    MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int dy_http_port(const dy_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}
