/* opts.h — command-line options read from one table per command. Each entry names an option,
 * says what its value is (an integer in a range, a number, a string, one of a list of names,
 * a flag), where it is stored, its default and its help line; from the same table come the
 * parse (getopt_long underneath), the --help text and, for a process that starts another, the
 * argument vector that parses back to the same values. It lives in util/ because both the
 * commands (cli/) and the frontend that starts workers (serve/) read one table. */
#ifndef DYAD_UTIL_OPTS_H
#define DYAD_UTIL_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    DY_OPT_FLAG,   /* no value; sets a bool to the opposite of its default (true, mostly) */
    DY_OPT_INT,    /* int in [min, max] */
    DY_OPT_LONG,   /* long in [min, max] */
    DY_OPT_U64,    /* uint64_t, any non-negative integer */
    DY_OPT_DOUBLE, /* double in [min, max] */
    DY_OPT_FLOAT,  /* float in [min, max] */
    DY_OPT_STR,    /* const char *, the argument itself (not copied) */
    DY_OPT_ENUM,   /* int: the position of the value in names (or values[position]) */
    DY_OPT_CALL,   /* call(ctx, value): anything else (repeatable options, parsed types) */
} dy_opt_kind;

typedef struct {
    const char *name;   /* "max-tokens" for --max-tokens */
    char short_name;    /* 'o' for -o as well; 0 for none */
    dy_opt_kind kind;
    void *dst;          /* bool *, int *, long *, uint64_t *, double *, float *, const char **,
                         * int * (ENUM) */
    const char *meta;   /* the value in --help: "PATH", "N" */
    const char *help;   /* one paragraph; --help wraps it */
    double min, max;    /* INT, LONG, DOUBLE, FLOAT (a max of INFINITY admits "inf") */
    double def;         /* the default of a number, an ENUM's position or value; written to dst
                         * before parsing, so 0 unless given */
    const char *def_str;       /* STR: the default (NULL: none) */
    const char *shown_default; /* --help says "(default: this)" instead of def ("(default 1)"
                                * for a number); "" says nothing */
    const char *const *names;  /* ENUM: the accepted values, NULL-terminated */
    const int *values;         /* ENUM: what each name stores (NULL: its position) */
    /* CALL: false, with the problem in err, when the value is bad. */
    bool (*call)(void *ctx, const char *value, char *err, size_t errlen);
    void *ctx;
    bool *given;        /* optional: set to true when the option is on the command line */
    const char *section; /* optional: --help starts a section with this title before it */
} dy_opt;

/* A limit's macro as a string literal, for help texts that quote it: DY_OPTS_QUOTE(DY_MAX_STOPS). */
#define DY_OPTS_QUOTE(x) DY_OPTS_QUOTE_(x)
#define DY_OPTS_QUOTE_(x) #x

/* Arguments that are not options (`dyad convert IN OUT`). With max == 0, one is an error. */
typedef struct {
    const char **args;
    int max, n;
} dy_opt_positional;

typedef enum { DY_OPTS_OK, DY_OPTS_HELP, DY_OPTS_BAD } dy_opts_result;

/* Writes every default, then reads argv[1..argc) (argv[0] is the command's name). --help or
 * -h: DY_OPTS_HELP. A bad value, an unknown or abbreviated option, a missing value or an
 * extra argument: DY_OPTS_BAD with one line in err naming the option ("--port: 'x' is not an
 * integer in [0, 65535]"). Options may come as --name VALUE or --name=VALUE. Not
 * thread-safe (getopt's state is global): commands parse once, at start-up. */
dy_opts_result dy_opts_parse(const dy_opt *opts, int n, int argc, char **argv,
                             dy_opt_positional *pos, char *err, size_t errlen);

/* Writes every entry's default to its destination (dy_opts_parse starts with this). */
void dy_opts_defaults(const dy_opt *opts, int n);

/* --help: usage (verbatim), one wrapped paragraph per option with its default, epilog. */
void dy_opts_help(FILE *f, const char *usage, const dy_opt *opts, int n, const char *epilog);

/* The entry for --name, or NULL. */
dy_opt *dy_opts_find(dy_opt *opts, int n, const char *name);

/* Rules between options, checked after a parse: a parsed table (whose entries' `given` point
 * at flags) and the command's name for messages. */
typedef struct {
    const dy_opt *opts;
    int n;
    const char *cmd;    /* "bench" in "dyad bench: ..." */
} dy_opts_given;

/* Whether "--name" was on the command line (false for an entry without a `given` flag). */
bool dy_opts_was_given(dy_opts_given g, const char *flag);
/* "dyad CMD: A needs B" (false) when A was given and ok is false. */
bool dy_opts_needs(dy_opts_given g, const char *a, bool ok, const char *b);
/* "dyad CMD: A cannot be used with B" (false) when A was given and other is true. */
bool dy_opts_conflict(dy_opts_given g, const char *a, bool other, const char *b);

/* The arguments that give every entry whose value differs from its default ("--name",
 * "VALUE" pairs, in table order), into argv[0..) with a NULL after them. Numbers are printed
 * into store; strings point at the values themselves. Returns how many were written, or -1
 * when argv (cap entries) or store (storecap bytes) is too small. Parsing the result with
 * the same table gives the same values back. */
int dy_opts_to_argv(const dy_opt *opts, int n, char **argv, int cap, char *store,
                    size_t storecap);

#endif
