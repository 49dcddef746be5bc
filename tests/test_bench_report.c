/* test_bench_report.c — the report formats: the Pareto SVG is well-formed XML (tags balanced,
 * one <svg> root, text escaped) with the points, labels, ticks and axis titles in it; the CSV
 * has one row per point with the frontier marked; the JSON objects parse back with the
 * figures; tick steps are 1/2/5 × 10^k. */
#include "testutil.h"
#include "bench/bench_report.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small XML well-formedness check: balanced, properly nested tags, quoted attributes, no
 * bare '<' or '&' in text, a single root element named `root`. */
static void assert_well_formed(const char *s, const char *root)
{
    char stack[64][32];
    int depth = 0, roots = 0;
    const char *p = s;
    if (!strncmp(p, "<?xml", 5))
        p = strstr(p, "?>") + 2;
    while (*p) {
        if (*p == '&') {
            assert_true(!strncmp(p, "&amp;", 5) || !strncmp(p, "&lt;", 4) ||
                        !strncmp(p, "&gt;", 4) || !strncmp(p, "&quot;", 6));
            p++;
            continue;
        }
        if (*p != '<') {
            if (depth == 0)
                assert_true(*p == '\n' || *p == ' ');
            p++;
            continue;
        }
        bool closing = p[1] == '/';
        const char *name = p + 1 + closing;
        size_t n = strcspn(name, " />\n");
        assert_true(n > 0 && n < 32);
        const char *q = name + n;
        while (*q && *q != '>') { /* attributes: quoted values may hold '/' and '>' */
            if (*q == '"') {
                const char *end = strchr(q + 1, '"');
                assert_non_null(end);
                assert_null(memchr(q + 1, '<', (size_t)(end - q - 1)));
                q = end;
            }
            q++;
        }
        assert_int_equal(*q, '>');
        bool self = q[-1] == '/';
        if (closing) {
            assert_true(depth > 0);
            depth--;
            assert_int_equal(strlen(stack[depth]), n);
            assert_memory_equal(stack[depth], name, n);
        } else if (!self) {
            if (depth == 0) {
                roots++;
                assert_int_equal(strlen(root), n);
                assert_memory_equal(root, name, n);
            }
            assert_true(depth < 64);
            memcpy(stack[depth], name, n);
            stack[depth++][n] = 0;
        } else
            assert_true(depth > 0);
        p = q + 1;
    }
    assert_int_equal(depth, 0);
    assert_int_equal(roots, 1);
}

static void make_points(dyb_point *pts)
{
    const double x[4] = {80, 60, 30, 25}, y[4] = {5, 9, 14, 12};
    for (int i = 0; i < 4; i++) {
        pts[i] = (dyb_point){.sweep_param = "concurrency", .sweep_value = 1 << i,
                             .mode = "closed loop", .concurrency = 1 << i};
        snprintf(pts[i].label, sizeof pts[i].label, "concurrency=%d", 1 << i);
        pts[i].sum.tok_per_s_per_user = x[i];
        pts[i].sum.output_tok_per_s_per_core = y[i];
        pts[i].sum.completed = 10;
        pts[i].sum.tpot = (dyb_dist){.n = 10, .mean = 1000 / x[i], .p50 = 1000 / x[i]};
        pts[i].sum.cores = 4;
    }
    dyb_points_mark_pareto(pts, 4);
}

static char *capture_svg(const dyb_run_info *ri, const dyb_point *pts, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(dyb_report_svg(f, ri, pts, n), 0);
    fclose(f);
    return buf;
}

static void test_svg_well_formed(void **st)
{
    (void)st;
    dyb_point pts[4];
    make_points(pts);
    assert_false(pts[0].dominated);
    assert_false(pts[1].dominated);
    assert_false(pts[2].dominated);
    assert_true(pts[3].dominated); /* (25, 12) < (30, 14) */
    dyb_run_info ri = {"http://h/v1/completions", "m<1>&\"x\"", "completions",
                       "fixed isl=512 osl=128", 0};
    char *svg = capture_svg(&ri, pts, 4);
    assert_well_formed(svg, "svg");
    assert_non_null(strstr(svg, "m&lt;1&gt;&amp;&quot;x&quot;"));
    assert_non_null(strstr(svg, "tokens/s per user"));
    assert_non_null(strstr(svg, "output tokens/s per core"));
    assert_non_null(strstr(svg, ">concurrency=8</text>"));
    assert_non_null(strstr(svg, "<polyline"));
    int circles = 0;
    for (const char *p = svg; (p = strstr(p, "<circle")); p++)
        circles++;
    assert_int_equal(circles, 4);
    assert_non_null(strstr(svg, ">80</text>")); /* an x tick at the largest value's step */
    free(svg);
    /* no points (a sweep interrupted at once) is still a valid, empty plot */
    svg = capture_svg(&ri, pts, 0);
    assert_well_formed(svg, "svg");
    free(svg);
}

static void test_csv_rows_and_frontier(void **st)
{
    (void)st;
    dyb_point pts[4];
    make_points(pts);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(dyb_report_csv(f, pts, 4), 0);
    fclose(f);
    int lines = 0, header_cols = 0;
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 5);
    for (char *p = buf; *p != '\n'; p++)
        header_cols += *p == ',';
    char *row4 = buf;
    for (int i = 0; i < 4; i++)
        row4 = strchr(row4, '\n') + 1;
    int row_cols = 0;
    for (char *p = row4; *p != '\n'; p++)
        row_cols += *p == ',';
    assert_int_equal(row_cols, header_cols);
    assert_true(!strncmp(row4, "concurrency,8,closed loop,8,", 28));
    assert_non_null(strstr(row4, ",dominated\n"));
    assert_non_null(strstr(buf, ",frontier\n"));
    free(buf);
}

/* A point whose prompts dyad prefilled remotely reports the transfer in text and JSON. */
static void test_kv_transfer_reported(void **st)
{
    (void)st;
    dyb_point pts[4];
    make_points(pts);
    dyb_summary *s = &pts[0].sum;
    s->placed = 4;
    s->kv_moved = 3;
    s->kv_bytes = 113246208;
    s->kv_ms_mean = 27.5;
    s->kv_gb_per_s = 1.37;
    s->kv_ttft_share = 0.036;
    dyb_run_info ri = {"http://h/v1/completions", "m", "completions", "w", 1};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dyb_report_text(f, &ri, &pts[0]);
    fclose(f);
    assert_non_null(strstr(buf, "KV transfer   3 of 4 prompts prefilled remotely; 113.2 MB moved, "
                                "27.50 ms each, 1.37 GB/s, 3.6% of their TTFT\n"));
    free(buf);
    char *text = dyb_report_json(&ri, &pts[0], false);
    json_t *o = json_loads(text, 0, NULL), *k = json_object_get(o, "kv_transfer");
    assert_int_equal(json_integer_value(json_object_get(k, "remote_prefills")), 3);
    assert_int_equal(json_integer_value(json_object_get(k, "placed")), 4);
    assert_float_equal(json_real_value(json_object_get(k, "bytes")), 113246208, 0);
    assert_float_equal(json_real_value(json_object_get(k, "gb_per_s")), 1.37, 1e-12);
    assert_float_equal(json_real_value(json_object_get(k, "ttft_share")), 0.036, 1e-12);
    json_decref(o);
    free(text);
}

static void test_json_round_trip(void **st)
{
    (void)st;
    dyb_point pts[4];
    make_points(pts);
    dyb_stats s;
    dyb_stats_init(&s);
    dyb_result bad = {.ok = false, .error = "HTTP 404: The model `x` does not exist."};
    dyb_stats_add(&s, &bad);
    dyb_point_take_errors(&pts[1], &s);
    dyb_stats_free(&s);
    pts[1].slo = (dyb_slo){.ttft_ms = 100};
    pts[1].sum.has_slo = true;
    pts[1].sum.good = 7;
    pts[1].sum.goodput = 3.5;
    dyb_run_info ri = {"http://h/v1/completions", "m", "completions", "w", 42};
    char *text = dyb_report_json(&ri, &pts[1], true);
    assert_non_null(text);
    assert_null(strchr(text, '\n'));
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "label")), "concurrency=2");
    assert_int_equal(json_integer_value(json_object_get(o, "seed")), 42);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "load"),
                                                        "concurrency")), 2);
    assert_true(json_is_null(json_object_get(json_object_get(o, "load"), "rate")));
    assert_float_equal(json_real_value(json_object_get(o, "tokens_per_s_per_user")), 60, 1e-9);
    assert_float_equal(json_real_value(json_object_get(json_object_get(o, "tpot_ms"), "p50")),
                       1000.0 / 60, 1e-6);
    assert_true(json_is_null(json_object_get(o, "itl_ms"))); /* no samples */
    json_t *g = json_object_get(o, "goodput");
    assert_int_equal(json_integer_value(json_object_get(g, "met")), 7);
    assert_float_equal(json_real_value(json_object_get(g, "ttft_ms")), 100, 0);
    assert_null(json_object_get(g, "tpot_ms"));
    json_t *e = json_array_get(json_object_get(o, "errors"), 0);
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "HTTP 404: The model `x` does not exist.");
    assert_true(json_is_false(json_object_get(o, "pareto_dominated")));
    assert_true(json_is_null(json_object_get(o, "kv_transfer"))); /* nothing placed */
    assert_string_equal(json_string_value(json_object_get(json_object_get(o, "sweep"), "param")),
                        "concurrency");
    json_decref(o);
    free(text);
    dyb_point_free(&pts[1]);
}

static void test_nice_steps(void **st)
{
    (void)st;
    assert_float_equal(dyb_nice_step(100, 5), 20, 1e-12);
    assert_float_equal(dyb_nice_step(7, 6), 2, 1e-12);
    assert_float_equal(dyb_nice_step(0.9, 6), 0.2, 1e-12);
    assert_float_equal(dyb_nice_step(30000, 6), 5000, 1e-9);
    assert_float_equal(dyb_nice_step(0, 6), 1, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_svg_well_formed),
        cmocka_unit_test(test_csv_rows_and_frontier),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_kv_transfer_reported),
        cmocka_unit_test(test_nice_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
