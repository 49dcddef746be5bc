/* guide.c — see guide.h. */
#include "serve/worker/guide.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_IDLE 16 /* compiled grammars kept after their last sequence ends */

struct dy_grammar_entry {
    uint64_t hash;
    char *text;
    size_t len;
    dy_grammar *g;
    dy_gmatch *m;
    int users;
    dy_grammar_entry *next;
};

bool dy_guides_init(dy_guides *gs, const dy_tokenizer *tok, int n_vocab, const int32_t *eog,
                    int n_eog)
{
    *gs = (dy_guides){.tok = tok, .n_vocab = n_vocab, .eog = eog, .n_eog = n_eog,
                      .max_idle = MAX_IDLE};
    gs->eog_logits = malloc(sizeof *gs->eog_logits * (size_t)(n_eog > 0 ? n_eog : 1));
    return gs->eog_logits != NULL;
}

static void entry_free(dy_grammar_entry *e)
{
    dy_gmatch_free(e->m);
    dy_grammar_free(e->g);
    free(e->text);
    free(e);
}

void dy_guides_free(dy_guides *gs)
{
    for (dy_grammar_entry *e = gs->entries, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    dy_vocab_trie_free(gs->trie);
    free(gs->eog_logits);
    *gs = (dy_guides){0};
}

dy_vocab_trie *dy_tokenizer_trie(const dy_tokenizer *tok, int n_vocab)
{
    char **pieces = calloc((size_t)n_vocab, sizeof *pieces);
    uint32_t *lens = calloc((size_t)n_vocab, sizeof *lens);
    dy_vocab_trie *t = NULL;
    bool ok = pieces && lens;
    for (int i = 0; ok && i < n_vocab; i++) {
        char buf[256];
        int n = dy_token_to_piece(tok, -1, i, buf, sizeof buf);
        ok = (pieces[i] = malloc((size_t)n + 1)) != NULL;
        if (ok && n > (int)sizeof buf)
            dy_token_to_piece(tok, -1, i, pieces[i], n + 1);
        else if (ok)
            memcpy(pieces[i], buf, (size_t)n);
        lens[i] = (uint32_t)n;
    }
    if (ok)
        t = dy_vocab_trie_new(n_vocab, (const char *const *)pieces, lens);
    for (int i = 0; pieces && i < n_vocab; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    return t;
}

static dy_grammar_entry *find_entry(dy_guides *gs, uint64_t h, const char *text, size_t len)
{
    for (dy_grammar_entry **p = &gs->entries; *p; p = &(*p)->next) {
        dy_grammar_entry *e = *p;
        if (e->hash == h && e->len == len && memcmp(e->text, text, len) == 0) {
            if (e->users == 0)
                gs->n_idle--;
            *p = e->next; /* to the front: the idle list is kept most recent first */
            e->next = gs->entries;
            gs->entries = e;
            return e;
        }
    }
    return NULL;
}

static dy_grammar_entry *new_entry(dy_guides *gs, uint64_t h, const char *text, size_t len,
                                   char *err, size_t errlen)
{
    if (!gs->trie && !(gs->trie = dy_tokenizer_trie(gs->tok, gs->n_vocab))) {
        snprintf(err, errlen, "out of memory building the vocabulary's prefix tree");
        return NULL;
    }
    dy_grammar_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->text = malloc(len + 1))) {
        free(e);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(e->text, text, len);
    e->text[len] = 0;
    e->len = len;
    e->hash = h;
    char why[200];
    if (!(e->g = dy_grammar_parse(text, len, why, sizeof why))) {
        snprintf(err, errlen, "the grammar does not compile: %s", why);
        entry_free(e);
        return NULL;
    }
    if (!(e->m = dy_gmatch_new(e->g, gs->trie, (dy_gmatch_limits){0}))) {
        snprintf(err, errlen, "out of memory");
        entry_free(e);
        return NULL;
    }
    gs->compiled++;
    e->next = gs->entries;
    gs->entries = e;
    return e;
}

bool dy_guide_start(dy_guides *gs, dy_guide *g, const char *text, size_t len, char *err,
                    size_t errlen)
{
    *g = (dy_guide){0};
    uint64_t h = XXH3_64bits(text, len);
    dy_grammar_entry *e = find_entry(gs, h, text, len);
    if (!e && !(e = new_entry(gs, h, text, len, err, errlen)))
        return false;
    if (dy_gstate_start(e->m, &g->st) != DY_GRAMMAR_OK) {
        snprintf(err, errlen, "out of memory starting the grammar");
        if (e->users == 0)
            gs->n_idle++;
        return false;
    }
    e->users++;
    g->e = e;
    return true;
}

/* Frees the idle entries past the newest max_idle. */
static void trim_idle(dy_guides *gs)
{
    int kept = 0;
    for (dy_grammar_entry **p = &gs->entries; *p;) {
        dy_grammar_entry *e = *p;
        if (e->users == 0 && ++kept > gs->max_idle) {
            *p = e->next;
            entry_free(e);
            gs->n_idle--;
        } else {
            p = &e->next;
        }
    }
}

void dy_guide_end(dy_guides *gs, dy_guide *g)
{
    if (!g->e)
        return;
    dy_gstate_free(&g->st);
    if (--g->e->users == 0) {
        gs->n_idle++;
        if (gs->n_idle > gs->max_idle)
            trim_idle(gs);
    }
    *g = (dy_guide){0};
}

bool dy_guide_mask(dy_guides *gs, dy_guide *g, float *logits, bool allow_end, char *err,
                   size_t errlen)
{
    const uint32_t *bits = dy_gstate_mask(g->e->m, &g->st);
    if (!bits) {
        snprintf(err, errlen, "the grammar's state grew past its limit");
        return false;
    }
    bool end = allow_end && g->st.accept && gs->n_eog > 0;
    for (int k = 0; end && k < gs->n_eog; k++)
        gs->eog_logits[k] = logits[gs->eog[k]];
    bool any = end;
    for (int w = 0; w < (gs->n_vocab + 31) / 32; w++) {
        uint32_t word = bits[w];
        any |= word != 0;
        if (word == UINT32_MAX)
            continue;
        int last = w * 32 + 32 < gs->n_vocab ? w * 32 + 32 : gs->n_vocab;
        for (int i = w * 32; i < last; i++)
            if (!(word >> (i & 31) & 1u))
                logits[i] = -INFINITY;
    }
    /* end tokens have no text, so the mask left them out: put them back when the text is whole */
    for (int k = 0; end && k < gs->n_eog; k++)
        logits[gs->eog[k]] = gs->eog_logits[k];
    if (!any) {
        snprintf(err, errlen, g->st.accept ? "the grammar is complete and the request ignores "
                                             "the end token" : "the grammar admits no token here");
        return false;
    }
    return true;
}

bool dy_guide_advance(dy_guide *g, int32_t token, const char *piece, size_t n, char *err,
                      size_t errlen)
{
    dy_grammar_status r = n ? dy_gstate_advance(g->e->m, &g->st, piece, n)
                            : dy_gstate_advance_token(g->e->m, &g->st, token);
    if (r == DY_GRAMMAR_OK)
        return true;
    snprintf(err, errlen, r == DY_GRAMMAR_REJECT ? "the grammar refuses the sampled token's text"
                                                 : "the grammar's state grew past its limit");
    return false;
}
