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

bool cli_grammar_text(const cli_grammar_opts *g, dy_buf *out, double *schema_ms, char *err,
                      size_t errlen)
{
    *schema_ms = 0;
    if (g->json_object) {
        dy_json_object_rules("root", NULL, out);
        if (out->oom)
            snprintf(err, errlen, "out of memory");
        return !out->oom;
    }
    if (g->grammar) {
        if (!dy_buf_append_file(out, g->grammar)) {
            snprintf(err, errlen, "cannot read %s: %s", g->grammar, strerror(errno));
            return false;
        }
        return true;
    }
    json_error_t je;
    json_t *schema = json_load_file(g->schema, JSON_REJECT_DUPLICATES, &je);
    if (!schema) {
        if (je.line < 0) /* not opened or not read: jansson's text names the file and errno */
            snprintf(err, errlen, "%s", je.text);
        else
            snprintf(err, errlen, "%s: line %d, column %d: %s", g->schema, je.line, je.column,
                     je.text);
        return false;
    }
    dy_schema_error e;
    double t0 = dy_now();
    dy_schema_status st = dy_schema_to_grammar(schema, NULL, out, &e);
    *schema_ms = (dy_now() - t0) * 1e3;
    json_decref(schema);
    if (st != DY_SCHEMA_OK) {
        snprintf(err, errlen, "%s: %s%s%s%s", g->schema, e.message, e.param[0] ? " (at " : "",
                 e.param, e.param[0] ? ")" : "");
        return false;
    }
    return true;
}
