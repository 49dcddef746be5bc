/* grammar_opts.c — see grammar_opts.h. */
#include "cli/grammar_opts.h"
#include "grammar/schema.h"
#include "util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int cli_grammar_given(const cli_grammar_opts *g)
{
    return (g->schema != NULL) + (g->grammar != NULL) + g->json_object;
}

bool cli_grammar_text(const char *cmd, const cli_grammar_opts *g, dy_buf *out,
                      double *schema_ms)
{
    *schema_ms = 0;
    if (g->json_object) {
        dy_json_object_rules("root", NULL, out);
        return !out->oom;
    }
    if (g->grammar) {
        if (!dy_buf_append_file(out, g->grammar)) {
            fprintf(stderr, "dyad %s: cannot read %s: %s\n", cmd, g->grammar, strerror(errno));
            return false;
        }
        return true;
    }
    json_error_t je;
    json_t *schema = json_load_file(g->schema, JSON_REJECT_DUPLICATES, &je);
    if (!schema) {
        fprintf(stderr, "dyad %s: %s: line %d, column %d: %s\n", cmd, g->schema, je.line,
                je.column, je.text);
        return false;
    }
    dy_schema_error e;
    double t0 = dy_now();
    dy_schema_status st = dy_schema_to_grammar(schema, NULL, out, &e);
    *schema_ms = (dy_now() - t0) * 1e3;
    json_decref(schema);
    if (st != DY_SCHEMA_OK) {
        fprintf(stderr, "dyad %s: %s: %s%s%s%s\n", cmd, g->schema, e.message,
                e.param[0] ? " (at " : "", e.param, e.param[0] ? ")" : "");
        return false;
    }
    return true;
}
