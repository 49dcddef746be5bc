/* test_guide.c — a worker's grammars over the bundled tokenizer: a text compiled once and
 * shared by every sequence on it, each with its own state; logits the grammar forbids become
 * -inf, the end tokens stay only when the text is whole (and the request allows the end); a
 * grammar with nothing left to allow is an error, not a hang; a bad text is refused. */
#include "testutil.h"
#include "serve/worker/guide.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 512

typedef struct {
    dy_tokenizer *tok;
    int32_t eog[V];
    int n_eog;
    dy_guides gs;
    float logits[V];
} fixture;

static int setup(void **st)
{
    fixture *f = calloc(1, sizeof *f);
    char err[256];
    f->tok = dy_tokenizer_from_llama2c(tu_path("models/tok512.bin"), V, err, sizeof err);
    assert_non_null(f->tok);
    for (int i = 0; i < V; i++)
        if (dy_tokenizer_is_eog(f->tok, i))
            f->eog[f->n_eog++] = i;
    assert_true(f->n_eog > 0);
    assert_true(dy_guides_init(&f->gs, f->tok, V, f->eog, f->n_eog));
    *st = f;
    return 0;
}

static int teardown(void **st)
{
    fixture *f = *st;
    dy_guides_free(&f->gs);
    dy_tokenizer_free(f->tok);
    free(f);
    return 0;
}

static void flat_logits(fixture *f)
{
    for (int i = 0; i < V; i++)
        f->logits[i] = 1.0f;
}

/* The token ids left finite, and whether an end token is among them. */
static int allowed(const fixture *f, bool *end)
{
    int n = 0;
    *end = false;
    for (int i = 0; i < V; i++)
        if (isfinite(f->logits[i])) {
            n++;
            *end |= dy_tokenizer_is_eog(f->tok, i);
        }
    return n;
}

static void start(fixture *f, dy_guide *g, const char *text)
{
    char err[256];
    if (!dy_guide_start(&f->gs, g, text, strlen(text), err, sizeof err))
        fail_msg("%s: %s", text, err);
}

static void test_masks_follow_the_text(void **st)
{
    fixture *f = *st;
    dy_guide g;
    start(f, &g, "root ::= \"Once\" ( \" upon\" )?");
    char err[256];
    bool end;
    flat_logits(f);
    assert_true(dy_guide_mask(&f->gs, &g, f->logits, true, err, sizeof err));
    int n = allowed(f, &end);
    assert_true(n >= 1);
    assert_false(end); /* nothing whole yet */
    for (int i = 0; i < V; i++) { /* every allowed token's text is a prefix of "Once" */
        char piece[64];
        int k = dy_token_to_piece(f->tok, -1, i, piece, sizeof piece);
        if (isfinite(f->logits[i]))
            assert_memory_equal(piece, "Once", (size_t)k);
    }
    assert_true(dy_guide_advance(&g, -1, "Once", 4, err, sizeof err));
    assert_true(dy_guide_complete(&g));
    flat_logits(f);
    assert_true(dy_guide_mask(&f->gs, &g, f->logits, true, err, sizeof err));
    n = allowed(f, &end);
    assert_true(end); /* whole: the end may come, or " upon" */
    assert_true(n > f->n_eog);
    flat_logits(f);
    assert_true(dy_guide_mask(&f->gs, &g, f->logits, false, err, sizeof err));
    allowed(f, &end);
    assert_false(end); /* ignore_eos: the end is never allowed */
    assert_false(dy_guide_advance(&g, -1, " down", 5, err, sizeof err));
    assert_non_null(strstr(err, "refuses"));
    dy_guide_end(&f->gs, &g);
}

static void test_a_dead_end_is_an_error(void **st)
{
    fixture *f = *st;
    dy_guide g;
    start(f, &g, "root ::= \"Once\"");
    char err[256];
    assert_true(dy_guide_advance(&g, -1, "Once", 4, err, sizeof err));
    flat_logits(f);
    /* complete, nothing may follow, and the request ignores the end token */
    assert_false(dy_guide_mask(&f->gs, &g, f->logits, false, err, sizeof err));
    assert_non_null(strstr(err, "ignores the end token"));
    dy_guide_end(&f->gs, &g);
}

static void test_one_compile_per_text(void **st)
{
    fixture *f = *st;
    dy_guide a, b, c;
    uint64_t before = f->gs.compiled;
    start(f, &a, "root ::= [a-z]+");
    start(f, &b, "root ::= [a-z]+");
    assert_int_equal(f->gs.compiled, before + 1); /* the second sequence shares it */
    char err[256];
    assert_true(dy_guide_advance(&a, -1, "once", 4, err, sizeof err));
    assert_false(dy_guide_complete(&b)); /* each its own state */
    assert_true(dy_guide_complete(&a));
    dy_guide_end(&f->gs, &a);
    dy_guide_end(&f->gs, &b);
    start(f, &c, "root ::= [a-z]+"); /* kept while idle: no new compile */
    assert_int_equal(f->gs.compiled, before + 1);
    dy_guide_end(&f->gs, &c);
}

static void test_idle_grammars_are_bounded(void **st)
{
    fixture *f = *st;
    uint64_t before = f->gs.compiled;
    for (int i = 0; i < 3 * f->gs.max_idle; i++) {
        char text[64];
        snprintf(text, sizeof text, "root ::= \"%d\"", i);
        dy_guide g;
        start(f, &g, text);
        dy_guide_end(&f->gs, &g);
        assert_true(f->gs.n_idle <= f->gs.max_idle);
    }
    assert_int_equal(f->gs.n_idle, f->gs.max_idle);
    assert_int_equal(f->gs.compiled, before + 3 * (uint64_t)f->gs.max_idle);
    dy_guide g; /* the oldest was dropped: compiled again */
    start(f, &g, "root ::= \"0\"");
    assert_int_equal(f->gs.compiled, before + 3 * (uint64_t)f->gs.max_idle + 1);
    dy_guide_end(&f->gs, &g);
}

static void test_bad_text_is_refused(void **st)
{
    fixture *f = *st;
    dy_guide g;
    char err[256];
    assert_false(dy_guide_start(&f->gs, &g, "root ::= nothing", 16, err, sizeof err));
    assert_non_null(strstr(err, "does not compile"));
    assert_non_null(strstr(err, "never defined"));
    assert_null(g.e);
    dy_guide_end(&f->gs, &g); /* harmless on a guide that never started */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_follow_the_text),
        cmocka_unit_test(test_a_dead_end_is_an_error),
        cmocka_unit_test(test_one_compile_per_text),
        cmocka_unit_test(test_idle_grammars_are_bounded),
        cmocka_unit_test(test_bad_text_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
