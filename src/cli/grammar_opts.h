/* grammar_opts.h — the grammar a command's options ask for (`dyad run`, `dyad bench grammar`):
 * a JSON Schema file, any JSON object, or a file of grammar text, as grammar text. */
#ifndef DYAD_CLI_GRAMMAR_OPTS_H
#define DYAD_CLI_GRAMMAR_OPTS_H

#include "util/buf.h"

#include <stdbool.h>

typedef struct {
    const char *schema;  /* --json-schema FILE */
    const char *grammar; /* --grammar FILE */
    bool json_object;    /* --json-object */
} cli_grammar_opts;

/* How many of the three are given (a command takes at most one). */
int cli_grammar_given(const cli_grammar_opts *g);
/* Appends the grammar text to out; false, with "FILE: why" in err, when a file cannot be read
 * or its schema does not compile. *schema_ms: the schema's compile time. */
bool cli_grammar_text(const cli_grammar_opts *g, dy_buf *out, double *schema_ms, char *err,
                      size_t errlen);

#endif
