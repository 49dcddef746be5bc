/* test_opts.c — the table-driven option reader (util/opts.h): each kind of value is
 * converted, range-checked and defaulted from its entry; --name=VALUE, short names,
 * positionals and "--" work; abbreviations, missing values and extra arguments are errors
 * that name the option; --help prints each default from the table; an argument vector built
 * from the values parses back to the same values. */
#include "testutil.h"
#include "util/opts.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    bool flag, given_int;
    int i, e;
    uint64_t u;
    double d;
    float f;
    const char *s;
    int calls;
} vals;

static bool count_call(void *ctx, const char *v, char *err, size_t errlen)
{
    vals *x = ctx;
    if (!strcmp(v, "bad")) {
        snprintf(err, errlen, "'%s' is bad", v);
        return false;
    }
    x->calls++;
    return true;
}

static const char *const colours[] = {"red", "green", "blue", NULL};
static const int colour_values[] = {10, 20, 30};

#define N_OPTS 9
static void table(vals *x, dy_opt *t)
{
    const dy_opt all[N_OPTS] = {
        {.name = "flag", .kind = DY_OPT_FLAG, .dst = &x->flag, .help = "a flag"},
        {.name = "int", .short_name = 'i', .kind = DY_OPT_INT, .dst = &x->i, .meta = "N",
         .help = "an integer", .min = -5, .max = 100, .def = 7, .given = &x->given_int},
        {.name = "colour", .kind = DY_OPT_ENUM, .dst = &x->e, .meta = "C", .help = "a colour",
         .names = colours, .values = colour_values, .def = 20},
        {.name = "u64", .kind = DY_OPT_U64, .dst = &x->u, .meta = "U", .help = "big", .def = 1},
        {.name = "double", .kind = DY_OPT_DOUBLE, .dst = &x->d, .meta = "X", .help = "a double",
         .min = 0, .max = 1e9, .def = 0.5},
        {.name = "float", .kind = DY_OPT_FLOAT, .dst = &x->f, .meta = "X", .help = "a float",
         .min = -1, .max = 1, .def = 0.25},
        {.name = "str", .kind = DY_OPT_STR, .dst = &x->s, .meta = "S", .help = "a string",
         .def_str = "hello"},
        {.name = "call", .kind = DY_OPT_CALL, .call = count_call, .ctx = x, .meta = "V",
         .help = "repeatable", .shown_default = "none"},
        {.name = "int-two", .kind = DY_OPT_INT, .dst = &x->calls, .meta = "N",
         .help = "shares a prefix with --int", .min = 0, .max = 1, .shown_default = ""},
    };
    memcpy(t, all, sizeof all);
}

/* Parses "cmd" and the arguments up to the NULL. */
static dy_opts_result parse_args(vals *x, dy_opt_positional *pos, char *err, ...)
{
    char *argv[32] = {"cmd"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    while ((argv[argc] = va_arg(ap, char *)))
        argc++;
    va_end(ap);
    dy_opt t[N_OPTS];
    table(x, t);
    return dy_opts_parse(t, N_OPTS, argc, argv, pos, err, 256);
}

/* parse_args with the NULL that ends its list. */
#define PARSE(...) parse_args(__VA_ARGS__, NULL)

static void test_defaults_and_values(void **state)
{
    (void)state;
    vals x;
    char err[256] = "";
    memset(&x, 0xff, sizeof x);
    assert_int_equal(PARSE(&x, NULL, err), DY_OPTS_OK);
    assert_false(x.flag);
    assert_false(x.given_int);
    assert_int_equal(x.i, 7);
    assert_int_equal(x.e, 20);
    assert_int_equal(x.u, 1);
    assert_true(x.d == 0.5);
    assert_true(x.f == 0.25f);
    assert_string_equal(x.s, "hello");
    assert_int_equal(PARSE(&x, NULL, err, "--flag", "-i", "-5", "--colour=blue", "--u64",
                           "18446744073709551615", "--double", "1e9", "--float=-1", "--str",
                           "-", "--call", "a"),
                     DY_OPTS_OK);
    assert_true(x.flag);
    assert_true(x.given_int);
    assert_int_equal(x.i, -5);
    assert_int_equal(x.e, 30);
    assert_true(x.u == UINT64_MAX);
    assert_true(x.d == 1e9);
    assert_true(x.f == -1.0f);
    assert_string_equal(x.s, "-");
    assert_int_equal(x.calls, 1);
}

static void rejects(const char *needle, dy_opts_result got, const char *err)
{
    assert_int_equal(got, DY_OPTS_BAD);
    if (!strstr(err, needle))
        fail_msg("'%s' does not mention '%s'", err, needle);
}

static void test_errors_name_the_option(void **state)
{
    (void)state;
    vals x;
    char err[256];
    rejects("--int: '101' is not an integer in [-5, 100]", PARSE(&x, NULL, err, "--int", "101"), err);
    rejects("--int: '' is not", PARSE(&x, NULL, err, "--int="), err);
    rejects("--colour: 'pink' is not red, green or blue", PARSE(&x, NULL, err, "--colour", "pink"), err);
    rejects("--u64: '-1' is not a non-negative integer", PARSE(&x, NULL, err, "--u64", "-1"), err);
    rejects("--double: 'nan' is not a number in [0, 1e+09]", PARSE(&x, NULL, err, "--double", "nan"), err);
    rejects("--float", PARSE(&x, NULL, err, "--float", "1.5"), err);
    rejects("--call: 'bad' is bad", PARSE(&x, NULL, err, "--call", "bad"), err);
    rejects("--str needs a value", PARSE(&x, NULL, err, "--str"), err);
    rejects("-i needs a value", PARSE(&x, NULL, err, "-i"), err);
    rejects("unknown option '--in'", PARSE(&x, NULL, err, "--in", "3"), err); /* ambiguous */
    rejects("unknown option '--colo'", PARSE(&x, NULL, err, "--colo", "red"), err); /* unique */
    rejects("unknown option '--hel'", PARSE(&x, NULL, err, "--hel"), err);
    rejects("unknown option '-z'", PARSE(&x, NULL, err, "-z"), err);
    rejects("unknown option '--flag=1'", PARSE(&x, NULL, err, "--flag=1"), err);
    rejects("unknown option 'extra'", PARSE(&x, NULL, err, "extra"), err);
    assert_int_equal(PARSE(&x, NULL, err, "--int", "x", "--help"), DY_OPTS_BAD);
    assert_int_equal(PARSE(&x, NULL, err, "--int", "3", "-h"), DY_OPTS_HELP);
}

static void test_positionals(void **state)
{
    (void)state;
    vals x;
    char err[256];
    const char *args[2];
    dy_opt_positional pos = {args, 2, 0};
    assert_int_equal(PARSE(&x, &pos, err, "in", "--int", "3", "--", "--out"), DY_OPTS_OK);
    assert_int_equal(pos.n, 2);
    assert_string_equal(args[0], "in");
    assert_string_equal(args[1], "--out");
    assert_int_equal(x.i, 3);
    rejects("unexpected argument 'c'", PARSE(&x, &pos, err, "a", "b", "c"), err);
}

static void test_help_prints_defaults(void **state)
{
    (void)state;
    vals x;
    dy_opt t[N_OPTS];
    table(&x, t);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dy_opts_help(f, "usage: cmd\n", t, N_OPTS, "the end\n");
    fclose(f);
    assert_non_null(strstr(text, "usage: cmd\n"));
    assert_non_null(strstr(text, "  -i, --int N"));
    assert_non_null(strstr(text, "an integer (default 7)\n"));
    assert_non_null(strstr(text, "a colour (default green)\n"));
    assert_non_null(strstr(text, "a double (default 0.5)\n"));
    assert_non_null(strstr(text, "a string (default hello)\n"));
    assert_non_null(strstr(text, "repeatable (default: none)\n"));
    assert_non_null(strstr(text, "shares a prefix with --int\n"));
    assert_non_null(strstr(text, "a flag\n"));
    assert_non_null(strstr(text, "the end\n"));
    for (char *line = text; *line; line = strchr(line, '\n') + 1)
        assert_true(strchr(line, '\n') - line <= 92);
    free(text);
}

static void test_argv_round_trip(void **state)
{
    (void)state;
    vals x, back;
    char err[256];
    assert_int_equal(PARSE(&x, NULL, err, "--flag", "--int", "99", "--colour", "red",
                           "--u64", "12345678901234", "--double", "0.1", "--float", "0.3",
                           "--str", "two words"),
                     DY_OPTS_OK);
    dy_opt t[N_OPTS];
    table(&x, t);
    char *argv[32] = {"cmd"}, store[256];
    int n = dy_opts_to_argv(t, N_OPTS, argv + 1, 31, store, sizeof store);
    assert_int_equal(n, 13);
    dy_opt tb[N_OPTS];
    table(&back, tb);
    assert_int_equal(dy_opts_parse(tb, N_OPTS, n + 1, argv, NULL, err, sizeof err), DY_OPTS_OK);
    assert_true(back.flag);
    assert_int_equal(back.i, 99);
    assert_int_equal(back.e, 10);
    assert_true(back.u == 12345678901234ull);
    assert_true(back.d == 0.1);
    assert_true(back.f == 0.3f);
    assert_string_equal(back.s, "two words");
    /* Values at their defaults are left out. */
    dy_opts_defaults(t, N_OPTS);
    assert_int_equal(dy_opts_to_argv(t, N_OPTS, argv, 32, store, sizeof store), 0);
    assert_null(argv[0]);
}

/* dy_opts_was_given / needs / conflict read the parse's given flags: a rule fires only for an
 * option that was on the command line. */
static void test_rules_between_options(void **state)
{
    (void)state;
    int a = 0, b = 0;
    bool seen_a, seen_b;
    dy_opt t[] = {
        {.name = "alpha", .kind = DY_OPT_INT, .dst = &a, .min = 0, .max = 9, .given = &seen_a},
        {.name = "beta", .kind = DY_OPT_INT, .dst = &b, .min = 0, .max = 9, .given = &seen_b},
    };
    char *argv[] = {"cmd", "--alpha", "3", NULL};
    char err[256];
    assert_int_equal(dy_opts_parse(t, 2, 3, argv, NULL, err, sizeof err), DY_OPTS_OK);
    dy_opts_given g = {t, 2, "test"};
    assert_true(dy_opts_was_given(g, "--alpha"));
    assert_false(dy_opts_was_given(g, "--beta"));
    assert_false(dy_opts_was_given(g, "--gamma"));
    assert_true(dy_opts_needs(g, "--alpha", true, "--beta"));
    assert_false(dy_opts_needs(g, "--alpha", false, "--beta"));   /* given, and its need unmet */
    assert_true(dy_opts_needs(g, "--beta", false, "--alpha"));    /* not given: no rule */
    assert_false(dy_opts_conflict(g, "--alpha", true, "--beta"));
    assert_true(dy_opts_conflict(g, "--alpha", false, "--beta"));
    assert_true(dy_opts_conflict(g, "--beta", true, "--alpha"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_values),
        cmocka_unit_test(test_errors_name_the_option),
        cmocka_unit_test(test_positionals),
        cmocka_unit_test(test_help_prints_defaults),
        cmocka_unit_test(test_argv_round_trip),
        cmocka_unit_test(test_rules_between_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
