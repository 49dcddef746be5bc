/* select.c — see select.h. Answers are few (one per sample, at most DY_WIRE_MAX_SAMPLES),
 * so the tally is a plain array scanned linearly. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "serve/front/select.h"
#include "serve/front/json.h"

#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ANSWER 256
#define DEFAULT_NUMBER "-?[0-9][0-9,]*(?:\\.[0-9]+)?"

/* The bounds on one pcre2_match call. Far above what a pattern that does not backtrack
 * exponentially needs over the longest answer, far below what such a pattern can spend:
 * PCRE2's own defaults (ten million backtracking points, gigabytes of heap) let one request
 * keep a core busy for seconds. */
#define MATCH_LIMIT 2000000u     /* backtracking points (interpreter and JIT) */
#define DEPTH_LIMIT 200000u      /* nested backtracking (interpreter) */
#define HEAP_LIMIT_KIB 32768u    /* the interpreter's backtracking frames */
#define JIT_STACK_MAX (1u << 20) /* the JIT's stack, in bytes */

enum { PENDING = 0, VOTED, ABSTAINED };

struct dy_vote {
    pcre2_code *re;
    pcre2_match_context *mctx; /* the limits, and the JIT stack when JIT compiled */
    pcre2_jit_stack *jit;
    char error[224];   /* empty, or why a sample's answer could not be extracted */
    bool last_number;  /* the default: the last number in the text, commas dropped */
    int n;
    unsigned char *state;
    char **answer;     /* per sample; NULL: none */
    int outstanding;   /* samples neither voted nor abstained */
    bool settled_early;
};

/* The match context every match of this vote runs under; JIT when PCRE2 has it for this
 * pattern (the interpreter otherwise: its depth and heap limits apply there). */
static bool set_limits(dy_vote *v)
{
    if (!(v->mctx = pcre2_match_context_create(NULL)))
        return false;
    pcre2_set_match_limit(v->mctx, MATCH_LIMIT);
    pcre2_set_depth_limit(v->mctx, DEPTH_LIMIT);
    pcre2_set_heap_limit(v->mctx, HEAP_LIMIT_KIB);
    if (pcre2_jit_compile(v->re, PCRE2_JIT_COMPLETE) != 0)
        return true;
    if (!(v->jit = pcre2_jit_stack_create(32 * 1024, JIT_STACK_MAX, NULL)))
        return false;
    pcre2_jit_stack_assign(v->mctx, NULL, v->jit);
    return true;
}

dy_vote *dy_vote_new(const char *answer_regex, int n_samples, char *err, size_t errlen)
{
    dy_vote *v = calloc(1, sizeof *v);
    if (!v || n_samples < 1)
        goto oom;
    v->n = v->outstanding = n_samples;
    v->state = calloc((size_t)n_samples, 1);
    v->answer = calloc((size_t)n_samples, sizeof *v->answer);
    if (!v->state || !v->answer)
        goto oom;
    v->last_number = answer_regex == NULL;
    const char *re = answer_regex ? answer_regex : DEFAULT_NUMBER;
    int ec;
    PCRE2_SIZE off;
    v->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &off, NULL);
    if (!v->re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "answer_regex: %s at offset %zu", (char *)msg, (size_t)off);
        dy_vote_free(v);
        return NULL;
    }
    if (!set_limits(v))
        goto oom;
    return v;
oom:
    snprintf(err, errlen, "out of memory");
    dy_vote_free(v);
    return NULL;
}

void dy_vote_free(dy_vote *v)
{
    if (!v)
        return;
    for (int i = 0; v->answer && i < v->n; i++)
        free(v->answer[i]);
    free(v->answer);
    free(v->state);
    pcre2_jit_stack_free(v->jit);
    pcre2_match_context_free(v->mctx);
    pcre2_code_free(v->re);
    free(v);
}

/* Copies s[0..len) without surrounding white space (and, for numbers, without commas). */
static char *clean_answer(const char *s, size_t len, bool drop_commas)
{
    while (len && strchr(" \t\r\n", *s)) {
        s++;
        len--;
    }
    while (len && strchr(" \t\r\n", s[len - 1]))
        len--;
    if (len > MAX_ANSWER)
        len = MAX_ANSWER;
    char *out = malloc(len + 1), *p = out;
    for (size_t i = 0; out && i < len; i++)
        if (!(drop_commas && s[i] == ','))
            *p++ = s[i];
    if (out)
        *p = 0;
    return out;
}

/* A match that ended without an answer the vote may ignore: no (further) match, or a text
 * that is not valid UTF-8 (a byte-fallback token cut a character). */
static bool no_answer(int rc)
{
    return rc == PCRE2_ERROR_NOMATCH || (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21);
}

/* Records why sample i's answer is unknown (the first such sample only). */
static void set_error(dy_vote *v, int sample, int rc)
{
    if (v->error[0])
        return;
    PCRE2_UCHAR msg[64];
    if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
        snprintf((char *)msg, sizeof msg, "error %d", rc);
    snprintf(v->error, sizeof v->error, "matching sample %d's answer stopped: %s (the pattern "
             "backtracks too much; avoid nested quantifiers such as (a+)+)",
             sample, (char *)msg);
}

/* The answer in a text, or NULL: the first match's first capture group (the whole match when
 * the regex has no group or it did not take part), or the last number by default. *failed:
 * the match ran past its limits (or out of memory), so the answer is unknown. */
static char *extract(const dy_vote *v, const char *text, size_t len, int *failed)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(v->re, NULL);
    *failed = 0;
    if (!md) {
        *failed = PCRE2_ERROR_NOMEMORY;
        return NULL;
    }
    char *ans = NULL;
    PCRE2_SIZE start = 0, from = 0, to = 0;
    bool found = false;
    int rc;
    while ((rc = pcre2_match(v->re, (PCRE2_SPTR)text, len, start, 0, md, v->mctx)) > 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int g = rc > 1 && ov[2] != PCRE2_UNSET ? 1 : 0;
        from = ov[2 * g];
        to = ov[2 * g + 1];
        found = true;
        if (!v->last_number)
            break;
        start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
        if (start > len)
            break;
    }
    if (rc < 0 && !no_answer(rc))
        *failed = rc;
    else if (found)
        ans = clean_answer(text + from, to - from, v->last_number);
    pcre2_match_data_free(md);
    return ans;
}

/* Votes for each distinct answer, and the lowest sample index that gave it. */
typedef struct {
    const char *answer;
    int count, first;
} tally;

static int count_votes(const dy_vote *v, tally *t)
{
    int n = 0;
    for (int i = 0; i < v->n; i++) {
        if (v->state[i] != VOTED || !v->answer[i])
            continue;
        int k = 0;
        while (k < n && strcmp(t[k].answer, v->answer[i]) != 0)
            k++;
        if (k == n)
            t[n++] = (tally){v->answer[i], 0, i};
        t[k].count++;
    }
    return n;
}

/* Index of the winner in t (most votes; ties: lowest first sample), -1 if none. */
static int leader(const tally *t, int n)
{
    int best = -1;
    for (int k = 0; k < n; k++)
        if (best < 0 || t[k].count > t[best].count ||
            (t[k].count == t[best].count && t[k].first < t[best].first))
            best = k;
    return best;
}

static bool decided(const dy_vote *v)
{
    if (v->outstanding == 0)
        return true;
    tally *t = malloc(sizeof *t * (size_t)v->n);
    if (!t)
        return false;
    int n = count_votes(v, t), best = leader(t, n), second = 0;
    for (int k = 0; k < n; k++)
        if (k != best && t[k].count > second)
            second = t[k].count;
    bool ok = best >= 0 && t[best].count > second + v->outstanding;
    free(t);
    return ok;
}

static void mark(dy_vote *v, int sample, unsigned char state, char *answer)
{
    if (!v || sample < 0 || sample >= v->n || v->state[sample] != PENDING) {
        free(answer);
        return;
    }
    bool was_settled = dy_vote_settled(v);
    v->state[sample] = state;
    v->answer[sample] = answer;
    v->outstanding--;
    if (!was_settled && v->outstanding > 0 && decided(v))
        v->settled_early = true;
}

void dy_vote_add(dy_vote *v, int sample, const char *text, size_t len)
{
    if (!v || sample < 0 || sample >= v->n || v->state[sample] != PENDING)
        return;
    int failed;
    char *answer = extract(v, text, len, &failed);
    if (failed) {
        set_error(v, sample, failed);
        mark(v, sample, ABSTAINED, NULL);
        return;
    }
    mark(v, sample, VOTED, answer);
}

const char *dy_vote_error(const dy_vote *v)
{
    return v->error[0] ? v->error : NULL;
}

void dy_vote_abstain(dy_vote *v, int sample)
{
    mark(v, sample, ABSTAINED, NULL);
}

bool dy_vote_settled(const dy_vote *v)
{
    return v->outstanding == 0 || v->settled_early;
}

int dy_vote_chosen(const dy_vote *v)
{
    tally *t = malloc(sizeof *t * (size_t)v->n);
    if (!t)
        return 0;
    int best = leader(t, count_votes(v, t));
    int chosen = best >= 0 ? t[best].first : 0;
    free(t);
    return chosen;
}

const char *dy_vote_winner(const dy_vote *v)
{
    int i = dy_vote_chosen(v);
    return v->state[i] == VOTED ? v->answer[i] : NULL;
}

const char *dy_vote_answer(const dy_vote *v, int sample)
{
    return sample >= 0 && sample < v->n ? v->answer[sample] : NULL;
}

/* {"count": 3, "samples": [0, 2, 3]} for one answer. */
static json_t *answer_json(dy_jb *b, const dy_vote *v, const tally *t)
{
    json_t *o = json_object(), *samples = json_array();
    for (int i = 0; i < v->n; i++)
        if (v->state[i] == VOTED && v->answer[i] && !strcmp(v->answer[i], t->answer))
            dy_jb_append(b, samples, json_integer(i));
    dy_jb_set(b, o, "count", json_integer(t->count));
    dy_jb_set(b, o, "samples", samples);
    return o;
}

json_t *dy_vote_json(const dy_vote *v)
{
    dy_jb b = {0};
    tally *t = malloc(sizeof *t * (size_t)v->n);
    json_t *o = json_object(), *votes = json_object();
    int n = t ? count_votes(v, t) : 0; /* answers in the order first given */
    if (!t)
        b.failed = true;
    for (int k = 0; k < n; k++)
        dy_jb_set_first(&b, votes, t[k].answer, strlen(t[k].answer), answer_json(&b, v, &t[k]));
    free(t);
    const char *w = dy_vote_winner(v);
    dy_jb_set(&b, o, "winner", w ? dy_json_str(w) : json_null());
    dy_jb_set(&b, o, "settled_early", json_boolean(v->settled_early));
    dy_jb_set(&b, o, "votes", votes);
    return dy_jb_tree(&b, o);
}

double dy_mean_logprob(const float *logprobs, int n)
{
    if (n <= 0)
        return -INFINITY;
    double s = 0;
    for (int i = 0; i < n; i++)
        s += logprobs[i];
    return s / n;
}

/* Orders by score, best first; NaN counts as the worst; ties keep the lower index first. */
static bool better(const double *score, int a, int b)
{
    double x = isnan(score[a]) ? -INFINITY : score[a], y = isnan(score[b]) ? -INFINITY : score[b];
    return x > y || (x == y && a < b);
}

void dy_select_best(const double *score, int n, int k, int *out)
{
    /* Insertion into the k best so far: n is at most a few hundred. */
    int have = 0;
    for (int i = 0; i < n; i++) {
        int at = have < k ? have : k;
        while (at > 0 && better(score, i, out[at - 1]))
            at--;
        if (at >= k)
            continue;
        int last = have < k ? have : k - 1;
        for (int j = last; j > at; j--)
            out[j] = out[j - 1];
        out[at] = i;
        if (have < k)
            have++;
    }
}
