/* gen.c — see gen.h. Read in order: the request (prompts → the job's choices), building
 * answers (texts, log-probabilities, usage, the `dyad` object), selection among samples,
 * metrics per request, the whole answer, and SSE frames. */
#include "serve/front/gen.h"
#include "serve/front/json.h"
#include "serve/front/select.h"
#include "serve/front/toolcall.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <time.h>

typedef struct dy_gen gen;

/* ---------------------------------------------------------------- the request */

struct dy_gen {
    dy_gen_env env;
    dy_api_request req;
    dy_job *job;
    int n_prompts, per_prompt; /* per_prompt: samples generated per prompt (n or best_of) */
    int out_per_prompt;     /* choices returned per prompt: n, or 1 with dyad.select */
    int *chosen;            /* returned choice → job choice (identity unless selecting) */
    dy_vote **votes;        /* per prompt, with dyad.select = "majority" */
    bool *counted;          /* per job choice: its end was seen by the selection */
    bool *dropped;          /* per job choice: cancelled because the vote was settled */
    bool selected;          /* chosen[] is final */
    bool vote_failed;       /* a sample's answer could not be extracted: vote_err answers */
    dy_api_error vote_err;
    int *prompt_tokens;     /* per prompt */
    char **echo;            /* per prompt: the prompt text, when echo is on */
    char id[64];
    int64_t created;
    double t_arrival;
    int64_t max_new_total; /* the output its choices may ask for, summed (for the planner) */
    int64_t max_new_out;   /* the same over the choices the answer returns (its size bound) */
    int status;             /* the HTTP status the client got (a stream is 200, whatever
                             * happens in it) */
    /* streaming */
    int *next_tok;          /* per choice: next token event to send */
    bool *first_sent, *end_sent;
    size_t *tool_sent;      /* per choice, with tools: the content bytes streamed so far */
    const char **tool_names; /* the request's function names, for the parser */
    char *pend;
    size_t pend_len, pend_pos;
    const char *last;       /* static frames sent after pend (a failed stream's end when no
                             * memory was left to queue it); NULL: none */
    size_t last_pos;
    bool stream_over;       /* nothing more will be queued: [DONE], or the end of a failed stream */
    bool recorded;
    char *first_tool;       /* the first tool the answer called (dyad.session turns learn it) */
};

static void gen_free(gen *g)
{
    free(g->first_tool);
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
    free(g->tool_sent);
    free(g->tool_names);
    free(g->pend);
    free(g);
}

/* Token ids of one prompt: given ids, or the text tokenized (chat templates carry special
 * tokens as text, so they are parsed as such there). */
/* The text's token ids (malloc'd) and their count in *n; NULL with *n = 0 for a text of no
 * tokens, NULL with *n = -1 when tokenizing failed (out of memory: the tokenizer's input is
 * valid UTF-8 by then). */
static int32_t *tokenize(const dy_gen_env *h, const char *text, bool special, int *n)
{
    const dy_tokenizer *t = h->tok;
    bool bos = dy_tokenizer_add_bos(t);
    int k = dy_tokenize(t, text, strlen(text), bos, special, NULL, 0);
    int32_t *ids = k > 0 ? malloc(sizeof(int32_t) * (size_t)k) : NULL;
    if (!ids || dy_tokenize(t, text, strlen(text), bos, special, ids, k) != k) {
        free(ids);
        *n = k == 0 ? 0 : -1;
        return NULL;
    }
    *n = k;
    return ids;
}

static char *render_chat(const dy_gen_env *h, const dy_api_request *r)
{
    const dy_tokenizer *t = h->tok;
    const char *bos = dy_tokenizer_bos(t) >= 0 ? dy_tokenizer_token_text(t, dy_tokenizer_bos(t)) : NULL;
    const char *eos = dy_tokenizer_eos(t) >= 0 ? dy_tokenizer_token_text(t, dy_tokenizer_eos(t)) : NULL;
    /* tool_choice "none": the tools are not shown to the model */
    int n_tools = r->tool_choice == DY_TOOLS_NONE ? 0 : r->n_tools;
    return dy_chat_render_tools(h->chat, r->messages, r->n_messages, r->tools, n_tools, true, bos, eos);
}

/* ---------------------------------------------------------------- tool calls */

static bool parses_tools(const gen *g)
{
    return g->req.kind == DY_API_CHAT && g->req.tool_choice != DY_TOOLS_NONE;
}

/* The id of a control token written as `text` (one token that writes no text), or -1. */
static int32_t control_token(const dy_tokenizer *t, const char *text)
{
    int32_t ids[2];
    int n = dy_tokenize(t, text, strlen(text), false, true, ids, 2);
    char piece[8];
    return n == 1 && dy_token_to_piece(t, -1, ids[0], piece, sizeof piece) == 0 ? ids[0] : -1;
}

/* tool_choice "required" or a named function: the answer's grammar is the family's envelope
 * around calls (toolcall.h), sent like response_format's. A named function is called once
 * (as OpenAI does); "required" with parallel_tool_calls may call one or more. -1 with err
 * set on failure. */
static int setup_tools(gen *g, dy_api_error *err)
{
    dy_api_request *r = &g->req;
    if (!parses_tools(g))
        return 0;
    if (!(g->tool_names = calloc((size_t)r->n_tools, sizeof *g->tool_names))) {
        dy_api_error_internal(err, "out of memory");
        return -1;
    }
    for (int i = 0; i < r->n_tools; i++)
        g->tool_names[i] = r->tools[i].name;
    if (r->tool_choice != DY_TOOLS_REQUIRED && r->tool_choice != DY_TOOLS_FUNCTION)
        return 0;
    dy_buf gr = {0};
    dy_toolcall_grammar(g->env.chat, g->tool_names, (const char *const *)r->tool_rules, r->n_tools,
                        r->tool_choice == DY_TOOLS_FUNCTION ? r->tool_forced : -1,
                        r->parallel_tool_calls && r->tool_choice == DY_TOOLS_REQUIRED,
                        control_token(g->env.tok, "[TOOL_CALLS]"), &gr);
    if (!dy_buf_cstr(&gr)) {
        dy_buf_free(&gr);
        dy_api_error_internal(err, "out of memory");
        return -1;
    }
    if (gr.len > DY_WIRE_MAX_GRAMMAR) {
        dy_buf_free(&gr);
        dy_api_error_set(err, 400, "invalid_request_error", "invalid_value", "tool_choice",
                         "Invalid 'tool_choice': the grammar of the forced call is larger than "
                         "%u bytes; send fewer or smaller tools.", (unsigned)DY_WIRE_MAX_GRAMMAR);
        return -1;
    }
    r->grammar = (char *)gr.data;
    r->grammar_len = gr.len;
    return 0;
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
    /* Every sample gets the same text; the worker gives each its own place in it. */
    m.grammar = r->grammar;
    m.grammar_len = (uint32_t)r->grammar_len;
    /* A conversation's turn: its worker holds the KV for the next one (docs/kv-tiers.md). */
    if (r->session)
        m.session = XXH3_64bits(r->session, strlen(r->session)) | 1; /* never 0: none */
    m.hold_ms = r->hold_ms >= 0 ? (uint32_t)r->hold_ms : DY_WIRE_NO_HOLD;
    m.n_prompt = (uint32_t)n;
    m.prompt = ids;
    return m;
}

/* Fills prompt i's choices of the job. -1 with err set on a bad prompt. */
static int setup_prompt(gen *g, int i, dy_api_error *err)
{
    const dy_gen_env *h = &g->env;
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
        else
            n = -1;
    }
    free(chat);
    if (!ids && n < 0) {
        dy_api_error_internal(err, "out of memory");
        return -1;
    }
    if (!ids) {
        dy_api_error_set(err, 400, "invalid_request_error", NULL,
                         r->kind == DY_API_CHAT ? "messages" : "prompt",
                         "the prompt is empty or could not be tokenized");
        return -1;
    }
    int max_new = dy_api_max_new_tokens(r, n, h->limits, err);
    if (max_new < 0) {
        free(ids);
        return -1;
    }
    g->prompt_tokens[i] = n;
    g->max_new_total += (int64_t)max_new * g->per_prompt;
    g->max_new_out += (int64_t)max_new * g->out_per_prompt;
    if (r->echo && r->kind == DY_API_COMPLETIONS) {
        g->echo[i] = text ? strdup(text) : NULL;
        if (!g->echo[i]) { /* token-id prompt: echo its detokenized text */
            size_t cap = 16 * (size_t)n + 1, len = 0;
            g->echo[i] = calloc(cap, 1);
            for (int k = 0; g->echo[i] && k < n; k++) {
                char piece[256];
                int pl = dy_token_to_piece(h->tok, k ? ids[k - 1] : -1, ids[k], piece, sizeof piece);
                if (pl > 0 && len + (size_t)pl < cap && pl < (int)sizeof piece) {
                    memcpy(g->echo[i] + len, piece, (size_t)pl);
                    len += (size_t)pl;
                }
            }
        }
        if (!g->echo[i]) {
            free(ids);
            dy_api_error_internal(err, "out of memory");
            return -1;
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

dy_gen *dy_gen_new(const dy_gen_env *env, const char *body, size_t len, dy_api_kind kind,
                   uint64_t serial, dy_api_error *err)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) {
        dy_api_error_internal(err, "out of memory");
        return NULL;
    }
    g->env = *env;
    g->t_arrival = dy_now();
    g->status = 200;
    if (dy_api_parse(body, len, kind, env->limits, &g->req, err) != 0)
        goto fail;
    if (strcmp(g->req.model, env->model_id) != 0) {
        dy_api_error_model_not_found(err, g->req.model);
        goto fail;
    }
    const char *u = unsupported(&g->req);
    if (u) {
        dy_api_error_set(err, 400, "invalid_request_error", "unsupported", u,
                         "'%s' is not supported by this server yet (see docs/api.md)", u);
        goto fail;
    }
    if (setup_tools(g, err))
        goto fail;
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
    g->tool_sent = calloc((size_t)nc, sizeof *g->tool_sent);
    if (!g->job || !g->prompt_tokens || !g->echo || !g->next_tok || !g->first_sent || !g->end_sent ||
        !g->tool_sent) {
        dy_api_error_internal(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < g->n_prompts; i++)
        if (setup_prompt(g, i, err) != 0)
            goto fail;
    if (dy_api_check_response_size(&g->req, g->max_new_out, env->limits, err) != 0)
        goto fail;
    snprintf(g->id, sizeof g->id, "%s-%llx%06llx", kind == DY_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)serial);
    g->created = (int64_t)time(NULL);
    if (env->loadwin) {
        int64_t prompt = 0;
        for (int i = 0; i < g->n_prompts; i++)
            prompt += g->prompt_tokens[i];
        dy_loadwin_arrival(env->loadwin, prompt, g->max_new_total);
    }
    return g;
fail:
    gen_free(g);
    return NULL;
}

/* ---------------------------------------------------------------- building answers */

static dy_api_meta meta(const gen *g)
{
    return (dy_api_meta){g->req.kind, g->id, g->created, g->env.model_id, NULL};
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
    int n = dy_token_to_piece(g->env.tok, -1, id, slot, 64);
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

/* A choice's answer as calls: the parser's finds and the API's view of them. */
typedef struct {
    dy_toolcall_found found;
    dy_api_tool_call *calls;
    char (*ids)[32];
} calls_out;

static void calls_free(calls_out *co)
{
    dy_toolcall_found_free(&co->found);
    free(co->calls);
    free(co->ids);
}

/* When choice ci's finished answer (text) is calls: they go into ch, its content becomes the
 * text before them (none: null) and its finish reason "tool_calls". A cut answer ("length")
 * is never read as calls. false if memory ran out. */
static bool set_calls(gen *g, int ci, const char *text, size_t len, dy_api_choice *ch,
                      calls_out *co)
{
    const dy_choice *c = &g->job->choices[ci];
    memset(co, 0, sizeof *co);
    if (!parses_tools(g) || c->finish != DY_END_STOP)
        return true;
    int n = dy_toolcall_parse(g->env.chat, text, len, g->tool_names, g->req.n_tools, &co->found);
    if (n <= 0)
        return n == 0;
    co->calls = calloc((size_t)n, sizeof *co->calls);
    co->ids = calloc((size_t)n, sizeof *co->ids);
    if (!co->calls || !co->ids)
        return false;
    for (int k = 0; k < n; k++) {
        dy_toolcall_id(c->req.seed, ci, k, co->ids[k]);
        co->calls[k] = (dy_api_tool_call){.index = k, .id = co->ids[k],
                                          .name = co->found.calls[k].name,
                                          .arguments = co->found.calls[k].arguments};
    }
    ch->text = co->found.content_len ? text : NULL;
    ch->len = co->found.content_len;
    ch->tool_calls = co->calls;
    ch->n_tool_calls = n;
    ch->finish_tool_calls = true;
    if (!g->first_tool && !(g->first_tool = strdup(co->found.calls[0].name)))
        return false; /* the conversation's next turn times this tool */
    return true;
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

/* A sample that ended since the votes were last counted, its text copied out of the job
 * (NULL: it gave none), so that the regex runs without the job's lock: a reader thread takes
 * that lock with the fleet's held, and every other request waits on the fleet's. */
typedef struct {
    int prompt, sample;
    char *text;
    size_t len;
} ended_sample;

/* With the job's mu held: the samples that ended since the last call, into out[] (each one
 * once); returns how many. */
static int take_ended(gen *g, ended_sample *out)
{
    int n = 0;
    for (int ci = 0; ci < g->job->n_choices; ci++) {
        const dy_choice *c = &g->job->choices[ci];
        if (!c->done || g->counted[ci])
            continue;
        g->counted[ci] = true;
        size_t len = 0;
        char *text = c->finish == DY_END_STOP || c->finish == DY_END_LENGTH
                     ? choice_text(g, ci, &len) : NULL;
        out[n++] = (ended_sample){ci / g->per_prompt, ci % g->per_prompt, text, len};
    }
    return n;
}

/* Without locks: counts the votes of the samples taken (freeing their texts). Once a match
 * ran past its limits the request fails (vote_err), and later samples abstain unread.
 * Returns true when this call is the one that failed it. */
static bool count_ended(gen *g, ended_sample *e, int n)
{
    bool was_failed = g->vote_failed;
    for (int i = 0; i < n; i++) {
        dy_vote *v = g->votes[e[i].prompt];
        if (e[i].text && !g->vote_failed)
            dy_vote_add(v, e[i].sample, e[i].text, e[i].len);
        else
            dy_vote_abstain(v, e[i].sample);
        free(e[i].text);
        if (!g->vote_failed && dy_vote_error(v)) {
            g->vote_failed = true;
            dy_api_error_set(&g->vote_err, 400, "invalid_request_error", "invalid_value",
                             "dyad.answer_regex", "Invalid 'dyad.answer_regex': %s.",
                             dy_vote_error(v));
        }
    }
    return g->vote_failed && !was_failed;
}

/* With the job's mu held: the samples still running of the prompts whose vote settled since
 * was[] was taken, into cancel[] (marked dropped); returns how many. */
static int newly_unneeded(gen *g, const bool *was, int *cancel)
{
    int n = 0;
    for (int p = 0; p < g->n_prompts; p++) {
        if (was[p] || !dy_vote_settled(g->votes[p]))
            continue;
        for (int k = 0; k < g->per_prompt; k++) {
            int ci = p * g->per_prompt + k;
            if (!g->job->choices[ci].done) {
                g->dropped[ci] = true;
                cancel[n++] = ci;
            }
        }
    }
    return n;
}

/* Counts the votes of samples that ended since the last call, and cancels what no longer
 * matters: the samples a settled vote does not need, or every sample once the vote failed.
 * Call without locks: the job's is taken only to copy texts out and to see what still runs,
 * never while a regex runs. */
static void settle_votes(gen *g)
{
    if (!g->votes)
        return;
    int nc = g->job->n_choices;
    ended_sample *e = malloc(sizeof *e * (size_t)nc);
    int *cancel = malloc(sizeof(int) * (size_t)nc);
    bool *was = malloc(sizeof(bool) * (size_t)g->n_prompts);
    if (!e || !cancel || !was)
        goto out;
    for (int p = 0; p < g->n_prompts; p++)
        was[p] = dy_vote_settled(g->votes[p]);
    pthread_mutex_lock(&g->job->mu);
    int n = take_ended(g, e);
    pthread_mutex_unlock(&g->job->mu);
    if (count_ended(g, e, n)) {
        dy_fleet_cancel(g->env.workers, g->job);
        goto out;
    }
    pthread_mutex_lock(&g->job->mu);
    int n_cancel = newly_unneeded(g, was, cancel);
    pthread_mutex_unlock(&g->job->mu);
    for (int i = 0; i < n_cancel; i++)
        dy_fleet_cancel_choice(g->env.workers, g->job, cancel[i]);
out:
    free(e);
    free(cancel);
    free(was);
}

/* With the job's mu held: a sample has ended whose vote settle_votes has not counted yet. */
static bool votes_pending(const gen *g)
{
    for (int ci = 0; g->votes && ci < g->job->n_choices; ci++)
        if (g->job->choices[ci].done && !g->counted[ci])
            return true;
    return false;
}

/* Once every sample has ended and its vote is counted (settle_votes): which samples are
 * returned. Call with the job's mu held. */
static void select_choices(gen *g)
{
    if (g->selected || !selecting(g))
        return;
    g->selected = true;
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

/* dyad.selection, one sample of prompt p: how it ended, and what the selection saw of it. */
static json_t *sample_json(dy_jb *b, const gen *g, int p, int k)
{
    const dy_choice *c = &g->job->choices[p * g->per_prompt + k];
    double mean = choice_mean_logprob(c);
    bool has_mean = c->n_toks && (g->req.logprobs || !g->votes) && isfinite(mean);
    json_t *o = json_object();
    dy_jb_set(b, o, "index", json_integer(k));
    dy_jb_set(b, o, "finish_reason", json_string(dy_end_name(c->finish)));
    dy_jb_set(b, o, "completion_tokens", json_integer(c->completion_tokens));
    dy_jb_set(b, o, "mean_logprob", has_mean ? json_real(mean) : json_null());
    if (g->votes) {
        const char *a = dy_vote_answer(g->votes[p], k);
        dy_jb_set(b, o, "answer", a ? dy_json_str(a) : json_null());
    }
    return o;
}

/* dyad.selection, prompt p: the mode, the samples returned, every sample, and the vote. */
static json_t *prompt_selection(dy_jb *b, const gen *g, int p)
{
    const char *mode = g->req.select == DY_SELECT_MAJORITY ? "majority"
                     : g->req.select == DY_SELECT_LOGPROB ? "logprob" : "best_of";
    json_t *o = json_object(), *chosen = json_array(), *samples = json_array();
    for (int k = 0; k < g->out_per_prompt; k++)
        dy_jb_append(b, chosen, json_integer(g->chosen[p * g->out_per_prompt + k] -
                                             p * g->per_prompt));
    for (int k = 0; k < g->per_prompt; k++)
        dy_jb_append(b, samples, sample_json(b, g, p, k));
    dy_jb_set(b, o, "mode", json_string(mode));
    dy_jb_set(b, o, "chosen", chosen);
    dy_jb_set(b, o, "samples", samples);
    if (g->votes)
        dy_jb_set(b, o, "vote", dy_vote_json(g->votes[p]));
    return o;
}

/* An estimate in milliseconds, or null while the worker had not measured the rate. */
static json_t *estimate_ms(uint32_t us)
{
    return us == UINT32_MAX ? json_null() : json_real(us / 1e3);
}

/* "kv_tier" of the `dyad` object and the request log, when the prompt's cached prefix
 * continued in a lower KV tier: what the worker did and the estimates it chose on. */
static void set_kv_tier(dy_jb *b, json_t *o, const dy_choice *c)
{
    static const char *const outcomes[] = {"none", "loaded", "recomputed", "load_failed"};
    if (c->tier_outcome == DY_TIER_NONE || c->tier_outcome > DY_WIRE_MAX_TIER_OUTCOME)
        return;
    json_t *x = json_object();
    dy_jb_set(b, x, "outcome", json_string(outcomes[c->tier_outcome]));
    dy_jb_set(b, x, "loaded_tokens", json_integer(c->tier_tokens));
    dy_jb_set(b, x, "load_ms_estimate", estimate_ms(c->tier_load_us));
    dy_jb_set(b, x, "recompute_ms_estimate", estimate_ms(c->tier_recompute_us));
    if (c->tier_outcome != DY_TIER_RECOMPUTED) /* a load was made: how long it waited */
        dy_jb_set(b, x, "load_ms", json_real(c->tier_wait_us / 1e3));
    dy_jb_set(b, o, "kv_tier", x);
}

/* The documented `dyad` extension object (docs/api.md), choice i: where it ran and what its
 * KV transfer cost. */
static json_t *choice_dyad(dy_jb *b, const dy_choice *c, int i)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "index", json_integer(i));
    dy_jb_set(b, o, "worker", json_integer(c->worker));
    dy_jb_set(b, o, "predicted_overlap_blocks", json_integer(c->overlap_blocks));
    set_kv_tier(b, o, c);
    if (c->prefill_worker < 0) {
        dy_jb_set(b, o, "prefill_worker", json_null());
        return o;
    }
    json_t *x = json_object();
    dy_jb_set(b, x, "bytes", json_integer((json_int_t)c->xfer_bytes));
    dy_jb_set(b, x, "seconds", json_real(c->xfer_seconds));
    dy_jb_set(b, x, "prefill_seconds", json_real(c->prefill_seconds));
    dy_jb_set(b, o, "prefill_worker", json_integer(c->prefill_worker));
    dy_jb_set(b, o, "kv_transfer", x);
    return o;
}

/* The `dyad` object for returned choices [from, to): all of them on a whole response, one on
 * a choice's last chunk; with the selection when samples were selected. NULL if it cannot be
 * built whole. */
static json_t *dyad_object(const gen *g, int from, int to)
{
    dy_jb b = {0};
    json_t *o = json_object(), *choices = json_array();
    for (int i = from; i < to; i++)
        dy_jb_append(&b, choices, choice_dyad(&b, &g->job->choices[g->chosen[i]], i));
    dy_jb_set(&b, o, "choices", choices);
    if (selecting(g)) {
        json_t *sel = json_array();
        for (int p = 0; p < g->n_prompts; p++)
            dy_jb_append(&b, sel, prompt_selection(&b, g, p));
        dy_jb_set(&b, o, "selection", sel);
    }
    return dy_jb_tree(&b, o);
}

/* The whole response, or NULL if any part of it could not be built. */
static char *whole_response(gen *g)
{
    int nc = g->n_prompts * g->out_per_prompt;
    dy_api_choice *ch = calloc((size_t)nc, sizeof *ch);
    char **texts = calloc((size_t)nc, sizeof *texts);
    lp_build *lps = calloc((size_t)nc, sizeof *lps);
    calls_out *calls = calloc((size_t)nc, sizeof *calls);
    char *json = NULL;
    if (!ch || !texts || !lps || !calls)
        goto out;
    for (int i = 0; i < nc; i++) {
        const dy_choice *c = &g->job->choices[g->chosen[i]];
        size_t len = 0;
        if (!(texts[i] = choice_text(g, g->chosen[i], &len)))
            goto out;
        ch[i] = (dy_api_choice){.index = i, .text = texts[i], .len = len, .finish = c->finish};
        if (!set_calls(g, g->chosen[i], texts[i], len, &ch[i], &calls[i]))
            goto out;
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
    json_t *dyad = dyad_object(g, 0, nc);
    json = dyad ? dy_api_response_json(&m, ch, nc, &u, dyad) : NULL;
    json_decref(dyad);
out:
    for (int i = 0; ch && texts && lps && calls && i < nc; i++) {
        free(texts[i]);
        lp_free(&lps[i]);
        calls_free(&calls[i]);
    }
    free(ch);
    free(texts);
    free(lps);
    free(calls);
    return json;
}

/* ---------------------------------------------------------------- metrics per request */

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
    const char *msg = c->tail ? c->tail : "out of memory"; /* no message: it could not be kept */
    if (!strncmp(msg, "the worker", 10) || !strncmp(msg, "the server is shutting down", 27))
        dy_api_error_unavailable(e, msg);
    else if (!strncmp(msg, "out of memory", 13) || !strncmp(msg, "the engine step failed", 22))
        dy_api_error_internal(e, msg);
    else
        dy_api_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
}

/* One choice in the request log: where it ran, its queue time, and what moving its KV cost. */
static json_t *choice_log(dy_jb *b, const dy_choice *c, int i, double t_arrival)
{
    /* A choice its worker never ended (http.c's bounded wait after a cancel ran out) reads
     * as an error. */
    dy_end end = c->done ? c->finish : DY_END_ERROR;
    json_t *o = json_object();
    dy_jb_set(b, o, "index", json_integer(i));
    dy_jb_set(b, o, "worker", json_integer(c->worker));
    dy_jb_set(b, o, "finish", json_string(dy_end_name(end)));
    dy_jb_set(b, o, "completion_tokens", json_integer(c->completion_tokens));
    dy_jb_set(b, o, "queue_ms", json_real(c->queue_us / 1e3));
    dy_jb_set(b, o, "ttft_ms", json_real(c->n_toks ? (c->toks[0].t - t_arrival) * 1e3 : -1.0));
    set_kv_tier(b, o, c);
    if (c->prefill_worker < 0) {
        dy_jb_set(b, o, "prefill_worker", json_null());
        return o;
    }
    double gbps = c->xfer_seconds > 0 ? (double)c->xfer_bytes / c->xfer_seconds / 1e9 : 0.0;
    json_t *x = json_object();
    dy_jb_set(b, x, "bytes", json_integer((json_int_t)c->xfer_bytes));
    dy_jb_set(b, x, "ms", json_real(c->xfer_seconds * 1e3));
    dy_jb_set(b, x, "gb_per_s", json_real(gbps));
    dy_jb_set(b, x, "prefill_ms", json_real(c->prefill_seconds * 1e3));
    dy_jb_set(b, o, "prefill_worker", json_integer(c->prefill_worker));
    dy_jb_set(b, o, "kv_transfer", x);
    return o;
}

/* The earliest first token of the request's samples, after its arrival; -1 if none came. */
static double first_token_seconds(const gen *g)
{
    double ttft = -1;
    for (int i = 0; i < g->job->n_choices; i++) {
        const dy_choice *c = &g->job->choices[i];
        if (c->n_toks && (ttft < 0 || c->toks[0].t - g->t_arrival < ttft))
            ttft = c->toks[0].t - g->t_arrival;
    }
    return ttft;
}

/* The request log's line for this request (docs/serving.md): the HTTP status the client got,
 * the outcome the metrics counted, tokens, latencies, and every generated sample. NULL if it
 * cannot be built whole. */
static json_t *log_entry(const gen *g, dy_end outcome, double e2e)
{
    dy_jb b = {0};
    const dy_choice *bad = failed_choice(g->job);
    dy_api_usage u = usage(g);
    double ttft = first_token_seconds(g);
    json_t *o = json_object(), *samples = json_array();
    for (int i = 0; i < g->job->n_choices; i++)
        dy_jb_append(&b, samples, choice_log(&b, &g->job->choices[i], i, g->t_arrival));
    dy_jb_set(&b, o, "id", json_string(g->id));
    dy_jb_set(&b, o, "endpoint", json_string(g->req.kind == DY_API_CHAT ? "chat" : "completions"));
    dy_jb_set(&b, o, "status", json_integer(g->status));
    dy_jb_set(&b, o, "outcome", json_string(dy_end_name(outcome)));
    dy_jb_set(&b, o, "stream", json_boolean(g->req.stream));
    dy_jb_set(&b, o, "prompts", json_integer(g->n_prompts));
    dy_jb_set(&b, o, "prompt_tokens", json_integer(u.prompt_tokens));
    dy_jb_set(&b, o, "cached_tokens", json_integer(u.cached_tokens));
    dy_jb_set(&b, o, "completion_tokens", json_integer(u.completion_tokens));
    dy_jb_set(&b, o, "ttft_ms", json_real(ttft >= 0 ? ttft * 1e3 : -1.0));
    dy_jb_set(&b, o, "e2e_ms", json_real(e2e * 1e3));
    dy_jb_set(&b, o, "samples", samples);
    if (g->vote_failed)
        dy_jb_set(&b, o, "error", dy_json_str(g->vote_err.message));
    else if (bad)
        dy_jb_set(&b, o, "error", dy_json_str(bad->tail ? bad->tail : "generation failed"));
    return dy_jb_tree(&b, o);
}

/* The ended request, for the planner: its lengths, its first token after the earliest
 * choice's, and the mean gap between tokens over its choices. */
static void observe_load(const gen *g)
{
    dy_api_usage u = usage(g);
    double ttft = -1, gaps = 0;
    long n_gaps = 0;
    for (int i = 0; i < g->job->n_choices; i++) {
        const dy_choice *c = &g->job->choices[i];
        if (c->n_toks == 0)
            continue;
        double t = c->toks[0].t - g->t_arrival;
        ttft = ttft < 0 || t < ttft ? t : ttft;
        gaps += c->toks[c->n_toks - 1].t - c->toks[0].t;
        n_gaps += c->n_toks - 1;
    }
    if (ttft >= 0)
        dy_loadwin_ended(g->env.loadwin, u.prompt_tokens, u.cached_tokens, u.completion_tokens,
                         ttft, n_gaps ? gaps / (double)n_gaps : -1);
}

/* The ended request for the rolling view (recent.h): its first token after the earliest
 * choice's, the mean gap between tokens over its choices (TPOT), each gap, and where its
 * prompts' KV came from. */
static void observe_recent(const gen *g, double now, dy_end outcome)
{
    dy_api_usage u = usage(g);
    dy_recent_request q = {.failed = outcome == DY_END_ERROR, .ttft_s = -1, .tpot_s = -1,
                           .prompt_tokens = u.prompt_tokens, .cached_tokens = u.cached_tokens,
                           .output_tokens = u.completion_tokens};
    double gaps = 0;
    long n_gaps = 0;
    for (int i = 0; i < g->job->n_choices; i++) {
        const dy_choice *c = &g->job->choices[i];
        if (i % g->per_prompt == 0) { /* a prompt's samples share its prefill */
            q.predicted_blocks += c->overlap_blocks > 0 ? c->overlap_blocks : 0;
            if (c->prefill_worker >= 0 && c->xfer_bytes > 0) {
                q.transfers++;
                q.xfer_bytes += c->xfer_bytes;
                q.xfer_s += c->xfer_seconds;
            }
        }
        if (c->n_toks == 0)
            continue;
        double t = c->toks[0].t - g->t_arrival;
        q.ttft_s = q.ttft_s < 0 || t < q.ttft_s ? t : q.ttft_s;
        for (int k = 1; k < c->n_toks; k++)
            dy_recent_itl(g->env.recent, now, c->toks[k].t - c->toks[k - 1].t);
        gaps += c->toks[c->n_toks - 1].t - c->toks[0].t;
        n_gaps += c->n_toks - 1;
    }
    if (n_gaps)
        q.tpot_s = gaps / (double)n_gaps;
    dy_recent_ended(g->env.recent, now, &q);
}

/* Observes the request in the metrics and the request log, as of `now` (its end). */
static void record(gen *g, double now)
{
    if (g->recorded)
        return;
    g->recorded = true;
    dy_metrics *m = g->env.metrics;
    dy_end outcome = DY_END_STOP; /* the most severe end; a choice never ended counts as stop */
    for (int i = 0; i < g->job->n_choices; i++) {
        const dy_choice *c = &g->job->choices[i];
        if (c->n_toks > 0) {
            dy_metrics_ttft(m, c->toks[0].t - g->t_arrival);
            for (int k = 1; k < c->n_toks; k++)
                dy_metrics_itl(m, c->toks[k].t - c->toks[k - 1].t);
            if (c->n_toks > 1)
                dy_metrics_tpot(m, (c->toks[c->n_toks - 1].t - c->toks[0].t) / (c->n_toks - 1));
        }
        if (c->finish != DY_END_ERROR)
            dy_metrics_queue(m, c->queue_us / 1e6);
        if (c->tier_outcome)
            dy_metrics_kv_tier(m, c->tier_load_us == UINT32_MAX ? -1 : c->tier_load_us / 1e6,
                               c->tier_recompute_us == UINT32_MAX ? -1 : c->tier_recompute_us / 1e6,
                               c->tier_outcome == DY_TIER_RECOMPUTED ? -1
                                                                            : c->tier_wait_us / 1e6);
        if (g->dropped[i]) /* cancelled by a settled vote, not by the client */
            continue;
        if (c->finish > outcome)
            outcome = c->finish;
    }
    if (g->req.session && g->job->n_choices > 0 && g->job->choices[0].finish != DY_END_ERROR)
        dy_fleet_turn_ended(g->env.workers, &g->job->choices[0], g->first_tool,
                            g->req.hold_ms >= 0);
    if (g->vote_failed) /* its samples were cancelled because of it */
        outcome = DY_END_ERROR;
    double e2e = now - g->t_arrival;
    if (g->env.loadwin)
        observe_load(g);
    if (g->env.recent)
        observe_recent(g, now, outcome);
    dy_metrics_e2e(m, e2e);
    dy_metrics_request(m, outcome);
    if (g->env.reqlog)
        dy_reqlog_write(g->env.reqlog, log_entry(g, outcome, e2e));
}

/* ---------------------------------------------------------------- SSE frames */

/* Queues a frame (taking it); false if it is NULL (it could not be built) or does not fit. */
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

/* Queues a JSON object as one SSE frame (taking it). */
static bool pend_json(gen *g, char *json)
{
    char *frame = json ? dy_sse_frame(json) : NULL;
    free(json);
    return pend_add(g, frame);
}

/* Ends the stream with an error event and [DONE]: a choice failed, or a frame could not be
 * built (the stream never goes on with a hole in it; http.c cancels what still runs). If
 * even they cannot be queued, a static out-of-memory error and [DONE] end it. */
/* A failed stream's end when memory ran out queueing its own: static, so always there. */
static const char oom_end[] =
    "data: {\"error\":{\"message\":\"Internal error: out of memory\",\"type\":\"server_error\","
    "\"param\":null,\"code\":null}}\n\n" DY_SSE_DONE;

static void fail_stream(gen *g, const dy_api_error *e)
{
    g->stream_over = true;
    if (!pend_json(g, dy_api_error_json(e)))
        g->last = oom_end;
    else if (!pend_add(g, strdup(DY_SSE_DONE)))
        g->last = DY_SSE_DONE;
}

static void fail_stream_oom(gen *g)
{
    dy_api_error e;
    dy_api_error_internal(&e, "out of memory");
    fail_stream(g, &e);
}

static void chunk(gen *g, const dy_api_choice *ch)
{
    if (g->stream_over)
        return;
    dy_api_meta m = meta(g);
    json_t *dyad = NULL;
    if (ch->finish != DY_END_NONE && /* a choice's last chunk says where it ran */
        !(dyad = dyad_object(g, ch->index, ch->index + 1))) {
        fail_stream_oom(g);
        return;
    }
    char *json = dyad ? dy_api_chunk_json_dyad(&m, ch, 1, g->req.include_usage, dyad)
                      : dy_api_chunk_json(&m, ch, 1, g->req.include_usage);
    json_decref(dyad);
    if (!pend_json(g, json))
        fail_stream_oom(g);
}

/* Queues an answer given as calls: its content from byte `from` on (what was not streamed
 * yet), then each call as two deltas, its id and name, then its arguments. */
static void call_chunks(gen *g, int index, const char *text, size_t from, const dy_api_choice *ans)
{
    if (ans->text && ans->len > from) {
        dy_api_choice body = {.index = index, .text = text + from, .len = ans->len - from};
        chunk(g, &body);
    }
    for (int k = 0; k < ans->n_tool_calls; k++) {
        const dy_api_tool_call *t = &ans->tool_calls[k];
        dy_api_tool_call head = {.index = k, .id = t->id, .name = t->name, .arguments = ""};
        dy_api_tool_call args = {.index = k, .arguments = t->arguments};
        dy_api_choice a = {.index = index, .tool_calls = &head, .n_tool_calls = 1};
        dy_api_choice b = {.index = index, .tool_calls = &args, .n_tool_calls = 1};
        chunk(g, &a);
        chunk(g, &b);
    }
}

/* The rest of a finished answer from byte `from` (as calls, or as content), then its
 * finishing chunk. */
static void finish_chunks(gen *g, int index, int ci, const char *text, size_t len, size_t from)
{
    const dy_choice *c = &g->job->choices[ci];
    dy_api_choice ans = {.index = index, .text = text, .len = len, .finish = c->finish};
    calls_out co;
    if (!set_calls(g, ci, text, len, &ans, &co)) {
        calls_free(&co);
        fail_stream_oom(g);
        return;
    }
    if (ans.n_tool_calls > 0) {
        call_chunks(g, index, text, from, &ans);
    } else if (len > from) {
        dy_api_choice body = {.index = index, .text = text + from, .len = len - from};
        chunk(g, &body);
    }
    dy_api_choice end = {.index = index, .finish = c->finish, .finish_tool_calls = ans.finish_tool_calls};
    chunk(g, &end);
    calls_free(&co);
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
        if (!text) {
            fail_stream_oom(g);
            return;
        }
        finish_chunks(g, r, g->chosen[r], text, len, 0);
        free(text);
    }
}

/* With tools, choice i's text is streamed as content only as far as it cannot be part of a
 * call (toolcall.h); the rest waits for the end, when it is sent as calls or as content.
 * Log-probabilities are not streamed here. */
static void stream_tool_text(gen *g, int i)
{
    const dy_choice *c = &g->job->choices[i];
    if (g->end_sent[i] || c->finish == DY_END_ERROR || (!c->done && g->next_tok[i] == c->n_toks))
        return;
    g->next_tok[i] = c->n_toks;
    size_t len = 0;
    char *text = choice_text(g, i, &len);
    if (!text) {
        fail_stream_oom(g);
        return;
    }
    if (c->done) {
        g->end_sent[i] = true;
        finish_chunks(g, i, i, text, len, g->tool_sent[i]);
    } else {
        size_t safe = dy_utf8_sendable(text, dy_toolcall_content_prefix(g->env.chat, text, len));
        if (safe > g->tool_sent[i]) {
            dy_api_choice body = {.index = i, .text = text + g->tool_sent[i],
                                  .len = safe - g->tool_sent[i]};
            chunk(g, &body);
            g->tool_sent[i] = safe;
        }
    }
    free(text);
}

/* Queues the chunk of one token event of choice i. */
static void token_chunk(gen *g, int i, int k)
{
    const dy_choice *c = &g->job->choices[i];
    const dy_tok_event *e = &c->toks[k];
    dy_api_choice ch = {.index = i, .text = e->text, .len = e->text_len};
    lp_build lb = {0};
    if (g->req.logprobs) {
        if (!lp_make(g, c, k, k + 1, 0, &lb)) {
            lp_free(&lb);
            fail_stream_oom(g);
            return;
        }
        ch.has_logprobs = true;
        ch.logprobs = lb.lp;
        ch.n_logprobs = lb.n;
    }
    chunk(g, &ch);
    lp_free(&lb);
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
        if (parses_tools(g)) {
            stream_tool_text(g, i);
            continue;
        }
        for (; g->next_tok[i] < c->n_toks; g->next_tok[i]++)
            token_chunk(g, i, g->next_tok[i]);
        if (c->done && !g->end_sent[i] && c->finish != DY_END_ERROR) {
            g->end_sent[i] = true;
            dy_api_choice ch = {.index = i, .text = c->tail_len ? c->tail : NULL,
                                .len = c->tail_len, .finish = c->finish};
            chunk(g, &ch);
        }
    }
}

/* Once every choice has ended: the error of a choice that failed, or the usage chunk when
 * asked for; then [DONE]. */
static void stream_end(gen *g)
{
    const dy_choice *bad = failed_choice(g->job);
    if (bad) {
        dy_api_error e;
        error_for(bad, &e);
        fail_stream(g, &e);
        return;
    }
    if (g->req.include_usage) {
        dy_api_meta m = meta(g);
        dy_api_usage u = usage(g);
        if (!pend_json(g, dy_api_usage_chunk_json(&m, &u))) {
            fail_stream_oom(g);
            return;
        }
    }
    g->stream_over = true;
    if (!pend_add(g, strdup(DY_SSE_DONE)))
        g->last = DY_SSE_DONE; /* a stream always ends with it */
}

/* Queues SSE frames for everything that arrived since the last call. Call with job mu held. */
static void stream_collect(gen *g)
{
    dy_job *j = g->job;
    if (g->stream_over)
        return;
    if (g->vote_failed) {
        fail_stream(g, &g->vote_err);
        return;
    }
    if (votes_pending(g)) /* stream_reader counts them first, without this lock */
        return;
    if (!selecting(g))
        stream_tokens(g);
    else if (dy_job_all_done(j) && !failed_choice(j))
        stream_selected(g);
    if (!g->stream_over && dy_job_all_done(j))
        stream_end(g);
}

/* ---------------------------------------------------------------- the API */

void dy_gen_free(dy_gen *g)
{
    gen_free(g);
}

dy_job *dy_gen_job(const dy_gen *g)
{
    return g->job;
}

bool dy_gen_streams(const dy_gen *g)
{
    return g->req.stream;
}

bool dy_gen_votes(const dy_gen *g)
{
    return g->votes != NULL;
}

void dy_gen_progress(dy_gen *g)
{
    settle_votes(g);
}

bool dy_gen_votes_pending(const dy_gen *g)
{
    return votes_pending(g);
}

/* The body of an answer that is not streamed, and its status in g->status: the error of a
 * choice that failed, the whole response, or a 500 when the response could not be built. */
static char *answer_body(gen *g)
{
    dy_api_error e;
    const dy_choice *bad = failed_choice(g->job);
    if (g->vote_failed)
        e = g->vote_err;
    else if (!bad) {
        char *json = whole_response(g);
        if (json) {
            g->status = 200;
            return json;
        }
        dy_api_error_internal(&e, "out of memory");
    } else
        error_for(bad, &e);
    g->status = e.status;
    return dy_api_error_json(&e);
}

char *dy_gen_answer(dy_gen *g, int *status)
{
    settle_votes(g); /* the votes of the samples that ended last */
    pthread_mutex_lock(&g->job->mu);
    select_choices(g);
    pthread_mutex_unlock(&g->job->mu);
    double end = dy_now();
    char *body = answer_body(g);
    record(g, end); /* after the answer is built: the log names the status it got */
    *status = g->status;
    return body;
}

void dy_gen_collect(dy_gen *g)
{
    if (g->pend_pos == g->pend_len) {
        free(g->pend);
        g->pend = NULL;
        g->pend_len = g->pend_pos = 0;
    }
    stream_collect(g);
}

/* The static frames after pend, once pend is sent. */
static size_t take_last(gen *g, char *buf, size_t max)
{
    size_t n = g->last ? strlen(g->last) - g->last_pos : 0;
    if (n > max)
        n = max;
    if (n > 0)
        memcpy(buf, g->last + g->last_pos, n);
    g->last_pos += n;
    return n;
}

size_t dy_gen_take(dy_gen *g, char *buf, size_t max)
{
    size_t n = g->pend_len - g->pend_pos;
    if (n > max)
        n = max;
    if (n == 0) /* nothing queued: pend may be NULL */
        return take_last(g, buf, max);
    memcpy(buf, g->pend + g->pend_pos, n);
    g->pend_pos += n;
    return n;
}

bool dy_gen_stream_over(const dy_gen *g)
{
    return g->stream_over && g->pend_pos == g->pend_len &&
           (!g->last || g->last_pos == strlen(g->last));
}

void dy_gen_record(dy_gen *g)
{
    record(g, dy_now());
}
