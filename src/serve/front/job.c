/* job.c — see job.h. */
#include "serve/front/job.h"
#include "util/clock.h"

#include <stdlib.h>
#include <string.h>

dy_job *dy_job_new(int n_choices)
{
    dy_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->choices = calloc((size_t)n_choices, sizeof *j->choices);
    if (!j->choices) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    if (dy_cond_init(&j->cv) != 0) {
        pthread_mutex_destroy(&j->mu);
        free(j->choices);
        free(j);
        return NULL;
    }
    j->n_choices = n_choices;
    j->refs = 1;
    j->group = 1;
    for (int i = 0; i < n_choices; i++)
        j->choices[i].worker = j->choices[i].prefill_worker = -1;
    return j;
}

bool dy_job_set_request(dy_job *j, int i, const dy_msg_request *tmpl, uint32_t stream)
{
    dy_choice *c = &j->choices[i];
    dy_msg_request_free(&c->req);
    c->req = *tmpl;
    c->req.stream = stream;
    c->req.n_samples = 1;
    c->req.grammar = NULL;
    c->req.grammar_len = 0;
    c->req.prompt = malloc(sizeof(int32_t) * (tmpl->n_prompt ? tmpl->n_prompt : 1));
    if (!c->req.prompt)
        return false;
    memcpy(c->req.prompt, tmpl->prompt, sizeof(int32_t) * tmpl->n_prompt);
    /* Each choice owns its grammar text as it owns its prompt (dy_msg_request_free). */
    if (tmpl->grammar && tmpl->grammar_len) {
        if (!(c->req.grammar = malloc((size_t)tmpl->grammar_len + 1)))
            return false;
        memcpy(c->req.grammar, tmpl->grammar, tmpl->grammar_len);
        c->req.grammar[tmpl->grammar_len] = 0;
        c->req.grammar_len = tmpl->grammar_len;
    }
    return true;
}

static void choice_free(dy_choice *c)
{
    for (int i = 0; i < c->n_toks; i++)
        free(c->toks[i].text);
    free(c->toks);
    free(c->tail);
    dy_msg_request_free(&c->req);
}

void dy_job_unref(dy_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    for (int i = 0; i < j->n_choices; i++)
        choice_free(&j->choices[i]);
    free(j->choices);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

bool dy_job_all_done(const dy_job *j)
{
    for (int i = 0; i < j->n_choices; i++)
        if (!j->choices[i].done)
            return false;
    return true;
}

bool dy_choice_push_token(dy_choice *c, const dy_msg_token *t, double now)
{
    if (c->n_toks == c->cap) {
        int cap = c->cap ? c->cap * 2 : 32;
        dy_tok_event *e = realloc(c->toks, sizeof *e * (size_t)cap);
        if (!e)
            return false;
        c->toks = e;
        c->cap = cap;
    }
    dy_tok_event *e = &c->toks[c->n_toks];
    e->text = malloc(t->text_len + 1);
    if (!e->text)
        return false;
    memcpy(e->text, t->text, t->text_len);
    e->text[t->text_len] = 0;
    e->text_len = t->text_len;
    e->token = t->token;
    e->logprob = t->logprob;
    e->n_top = t->n_top;
    memcpy(e->top_ids, t->top_ids, sizeof e->top_ids);
    memcpy(e->top_logprobs, t->top_logprobs, sizeof e->top_logprobs);
    e->t = now;
    c->n_toks++;
    c->started = true;
    return true;
}

/* False if out of memory (the tail is then NULL). */
static bool set_tail(dy_choice *c, const char *text, uint32_t len)
{
    free(c->tail);
    c->tail = malloc(len + 1);
    if (c->tail) {
        memcpy(c->tail, text, len);
        c->tail[len] = 0;
        c->tail_len = len;
    } else
        c->tail_len = 0;
    return c->tail != NULL;
}

void dy_choice_finish(dy_choice *c, const dy_msg_done *d)
{
    c->done = true;
    c->finish = (dy_end)d->finish;
    c->prompt_tokens = d->prompt_tokens;
    c->cached_tokens = d->cached_tokens;
    c->completion_tokens = d->completion_tokens;
    c->queue_us = d->queue_us;
    c->tier_outcome = d->tier_outcome;
    c->tier_tokens = d->tier_tokens;
    c->tier_load_us = d->tier_load_us;
    c->tier_recompute_us = d->tier_recompute_us;
    c->tier_wait_us = d->tier_wait_us;
    if (!set_tail(c, d->text, d->text_len)) /* its last text lost: an error, not a short answer */
        c->finish = DY_END_ERROR;
}

void dy_choice_fail(dy_choice *c, const char *msg)
{
    c->done = true;
    c->finish = DY_END_ERROR;
    set_tail(c, msg, (uint32_t)strlen(msg));
}
