/* cmd_plan_quality.c — `dyad plan quality`: the quality objective of the one point. Reads a
 * quality bench's measurements (bench/quality.py --out: a JSON object whose "points" list
 * holds, per model × task × method × k, the accuracy and the cost of one problem as served),
 * checks every field, and prints the cheapest configuration — model size and weight type,
 * method (greedy, k samples voted, best of k by log-probability, pass@k with a checker) and k
 * — that reaches the accuracy, with the frontier of accuracy against cost. The choice itself
 * is plan/quality.c's. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "plan/quality.h"
#include "util/json_err.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char quality_usage[] =
    "usage: dyad plan quality --file FILE --accuracy A [--task T] [options]\n"
    "The cheapest way to answer a problem at accuracy A, from a quality bench's measurements\n"
    "(bench/quality.py --out; docs/quality.md): which model size and weight type, which method\n"
    "and how many samples k, by worker core-seconds per problem as served; then the frontier\n"
    "of accuracy against cost.\n";

static const char quality_epilog[] =
    "Methods: greedy (k = 1, temperature 0); majority and majority_server (the most common of\n"
    "k sampled answers, counted by the client or voted by the server's dyad.select); logprob\n"
    "(the sample of highest total log-probability); pass (pass@k: right if any of k is, which\n"
    "needs a checker to pick the answer: only with --verifier). With --task all a configuration\n"
    "must reach A on every task the file measured; its cost is the mean over the tasks.\n";

/* At most this many points are read from a file. */
#define MAX_POINTS 100000

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} reader;

static int fail(const reader *r, size_t i, const char *field, const char *problem)
{
    snprintf(r->err, r->errlen, "%s: points[%zu].%s: %s", r->path, i, field, problem);
    return -1;
}

static int read_name(const reader *r, json_t *o, size_t i, const char *field, char *out)
{
    const char *s = json_string_value(json_object_get(o, field));
    if (!s)
        return fail(r, i, field, "missing or not a string");
    if (!*s || strlen(s) >= DY_QUALITY_NAME)
        return fail(r, i, field, "empty, or longer than 31 bytes");
    strcpy(out, s);
    return 0;
}

static int read_number(const reader *r, json_t *o, size_t i, const char *field, double lo,
                       double hi, double *out)
{
    json_t *v = json_object_get(o, field);
    if (!json_is_number(v))
        return fail(r, i, field, "missing or not a number");
    *out = json_number_value(v);
    if (!isfinite(*out) || *out < lo || *out > hi) {
        char msg[96];
        snprintf(msg, sizeof msg, "%g is outside [%g, %g]", *out, lo, hi);
        return fail(r, i, field, msg);
    }
    return 0;
}

static int read_point(const reader *r, json_t *o, size_t i, dy_quality_point *p)
{
    if (!json_is_object(o))
        return fail(r, i, "", "not an object");
    double k, problems;
    json_t *one = json_object_get(o, "one_request");
    if (read_name(r, o, i, "model", p->model) || read_name(r, o, i, "size", p->size) ||
        read_name(r, o, i, "type", p->type) || read_name(r, o, i, "task", p->task) ||
        read_name(r, o, i, "method", p->method) ||
        read_number(r, o, i, "params", 1, 1e15, &p->params) ||
        read_number(r, o, i, "k", 1, 1 << 20, &k) ||
        read_number(r, o, i, "problems", 1, 1e9, &problems) ||
        read_number(r, o, i, "accuracy", 0, 1, &p->accuracy) ||
        read_number(r, o, i, "core_seconds", 0, 1e9, &p->core_seconds) ||
        read_number(r, o, i, "latency_ms_p90", 0, 1e12, &p->latency_ms_p90) ||
        read_number(r, o, i, "prompt_tokens", 0, 1e12, &p->prompt_tokens) ||
        read_number(r, o, i, "completion_tokens", 0, 1e12, &p->completion_tokens))
        return -1;
    if (!json_object_get(o, "kv_type")) /* files from before the bench took --kv-type */
        strcpy(p->kv_type, "f32");
    else if (read_name(r, o, i, "kv_type", p->kv_type))
        return -1;
    if (!json_is_boolean(one))
        return fail(r, i, "one_request", "missing or not true/false");
    if (k != floor(k) || problems != floor(problems))
        return fail(r, i, k != floor(k) ? "k" : "problems", "not a whole number");
    p->k = (int)k;
    p->problems = (int)problems;
    p->one_request = json_is_true(one);
    return 0;
}

/* The points of the file at path (*n of them; free() them), or NULL with err set. */
static dy_quality_point *load_points(const char *path, int *n, char *err, size_t errlen)
{
    reader r = {path, err, errlen};
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        dy_json_load_error(err, errlen, path, je.line, je.text);
        return NULL;
    }
    json_t *list = json_object_get(root, "points");
    dy_quality_point *pts = NULL;
    size_t count = json_array_size(list);
    if (!json_is_array(list) || count == 0 || count > MAX_POINTS) {
        snprintf(err, errlen, "%s: points: must be a list of 1 to %d measured points", path,
                 MAX_POINTS);
        goto out;
    }
    pts = calloc(count, sizeof *pts);
    if (!pts) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < count; i++)
        if (read_point(&r, json_array_get(list, i), i, &pts[i]) != 0) {
            free(pts);
            pts = NULL;
            goto out;
        }
    *n = (int)count;
out:
    json_decref(root);
    return pts;
}

/* Whether some point measured task. */
static bool has_task(const dy_quality_point *pts, int n, const char *task)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(pts[i].task, task))
            return true;
    return false;
}

static void config_text(const dy_quality_point *p, char *out, size_t cap)
{
    if (!strcmp(p->method, "greedy"))
        snprintf(out, cap, "greedy");
    else
        snprintf(out, cap, "%s@%d%s", p->method, p->k, p->one_request ? "" : " (k requests)");
}

/* The weight type, and the KV cache's where it is not f32. */
static void type_text(const dy_quality_point *p, char *out, size_t cap)
{
    if (!strcmp(p->kv_type, "f32"))
        snprintf(out, cap, "%s", p->type);
    else
        snprintf(out, cap, "%s, KV %s", p->type, p->kv_type);
}

static void print_row(const dy_quality_point *pts, const dy_quality_candidate *c, bool chosen)
{
    const dy_quality_point *p = &pts[c->first];
    char how[64], type[80];
    config_text(p, how, sizeof how);
    type_text(p, type, sizeof type);
    printf("| %s | %s | %.3g | %s | %.3f | %.4g | %.1f |%s\n", p->size, type, p->params, how,
           c->accuracy, c->core_seconds * 1e3, c->latency_ms_p90, chosen ? " ← chosen" : "");
}

int cmd_plan_quality(int argc, char **argv)
{
    const char *file = NULL, *task = "all";
    double accuracy = -1, max_latency = 0;
    bool verifier = false, all_rows = false;
    const dy_opt t[] = {
        {.name = "file", .kind = DY_OPT_STR, .dst = &file, .meta = "FILE",
         .help = "the quality bench's JSON (bench/quality.py --out) (required)"},
        {.name = "accuracy", .kind = DY_OPT_DOUBLE, .dst = &accuracy, .meta = "A",
         .help = "the accuracy to reach, from 0 to 1 (required)", .min = 0, .max = 1, .def = -1,
         .shown_default = ""},
        {.name = "task", .kind = DY_OPT_STR, .dst = &task, .meta = "T",
         .help = "the task to answer, or all: every task of the file at once", .def_str = "all"},
        {.name = "max-latency-ms", .kind = DY_OPT_DOUBLE, .dst = &max_latency, .meta = "MS",
         .help = "also keep the p90 latency of one problem within MS (0: no limit)", .min = 0,
         .max = 1e9},
        {.name = "verifier", .kind = DY_OPT_FLAG, .dst = &verifier,
         .help = "a checker can pick the right answer of k: pass@k may be chosen"},
        {.name = "all", .kind = DY_OPT_FLAG, .dst = &all_rows,
         .help = "print every configuration, not only the frontier"},
    };
    int rc = cli_parse("plan quality", quality_usage, quality_epilog, t,
                       (int)(sizeof t / sizeof t[0]), argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    if (!file || accuracy < 0) {
        fprintf(stderr, "dyad plan quality: %s: required (see dyad plan quality --help)\n",
                !file ? "--file" : "--accuracy");
        return 2;
    }
    char err[1024];
    int n = 0;
    dy_quality_point *pts = load_points(file, &n, err, sizeof err);
    if (!pts) {
        fprintf(stderr, "dyad plan quality: %s\n", err);
        return 1;
    }
    const bool every_task = !strcmp(task, "all");
    if (!every_task && !has_task(pts, n, task)) {
        fprintf(stderr, "dyad plan quality: --task: %s has no points for '%s'\n", file, task);
        free(pts);
        return 2;
    }
    const dy_quality_goal goal = {.min_accuracy = accuracy, .task = every_task ? NULL : task,
                                  .max_latency_ms = max_latency, .allow_verifier = verifier};
    dy_quality_candidate *cands = calloc((size_t)n, sizeof *cands);
    bool *front = calloc((size_t)n, sizeof *front);
    if (!cands || !front) {
        fprintf(stderr, "dyad plan quality: out of memory\n");
        free(pts);
        free(cands);
        free(front);
        return 1;
    }
    const int nc = dy_quality_candidates(pts, n, &goal, cands, n);
    const int best = dy_quality_choose(cands, nc);
    dy_quality_frontier(cands, nc, &goal, front);
    printf("%s: %d configurations for task %s; target accuracy %.3f", file, nc, task, accuracy);
    if (max_latency > 0)
        printf(", p90 latency ≤ %g ms", max_latency);
    printf("%s\n\n", verifier ? ", a checker may select (pass@k)" : "");
    if (best >= 0) {
        const dy_quality_point *p = &pts[cands[best].first];
        char how[64], type[80];
        config_text(p, how, sizeof how);
        type_text(p, type, sizeof type);
        printf("choice: %s (%s, %.3g parameters), %s: accuracy %.3f at %.4g core-ms and "
               "%.1f ms p90 per problem\n\n",
               p->model, type, p->params, how, cands[best].accuracy,
               cands[best].core_seconds * 1e3, cands[best].latency_ms_p90);
    } else {
        printf("choice: none of the measured configurations reaches it\n\n");
    }
    printf("%s\n\n| size | type | params | method@k | accuracy | core-ms/problem | p90 ms |\n"
           "|---|---|---|---|---|---|---|\n",
           all_rows ? "every configuration, cheapest first" : "frontier (nothing cheaper is "
                                                              "as accurate), cheapest first");
    for (int i = 0; i < nc; i++)
        if (all_rows || front[i] || i == best)
            print_row(pts, &cands[i], i == best);
    free(pts);
    free(cands);
    free(front);
    return best >= 0 ? 0 : 1;
}
