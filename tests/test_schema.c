/* test_schema.c — the JSON Schema compiler (grammar/schema.h): each schema compiled, parsed by
 * the recognizer (grammar/grammar.h) and run over texts that validate (accepted, and each one
 * also parses as JSON) and texts that do not (rejected); every refusal with its status and the
 * param path it names. Schemas and texts are written with ' for " to stay readable. */
#include "testutil.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXTS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})

/* s with every ' turned into ", in a static buffer that the next call overwrites. */
static const char *dq(const char *s)
{
    static char buf[4][8192];
    static int k;
    char *b = buf[k++ & 3];
    size_t n = strlen(s);
    assert_true(n < sizeof buf[0]);
    for (size_t i = 0; i <= n; i++)
        b[i] = s[i] == '\'' ? '"' : s[i];
    return b;
}

static json_t *load(const char *schema)
{
    json_error_t je;
    json_t *s = json_loads(dq(schema), JSON_DECODE_ANY, &je);
    if (!s)
        fail_msg("test schema is not JSON: %s (%s)", je.text, schema);
    return s;
}

static dy_grammar *parse_grammar(dy_buf *b)
{
    char err[256];
    dy_grammar *g = dy_grammar_parse((const char *)b->data, b->len, err, sizeof err);
    if (!g)
        fail_msg("grammar does not parse: %s\n%s", err, dy_buf_cstr(b));
    return g;
}

static dy_grammar *compile_with(const char *schema, const dy_schema_opts *o)
{
    json_t *s = load(schema);
    dy_buf b = {0};
    dy_schema_error e;
    dy_schema_status st = dy_schema_to_grammar(s, o, &b, &e);
    if (st != DY_SCHEMA_OK)
        fail_msg("schema refused: %s at '%s' (%s)", e.message, e.param, schema);
    dy_grammar *g = parse_grammar(&b);
    dy_buf_free(&b);
    json_decref(s);
    return g;
}

static void check_texts(const dy_grammar *g, const char *what, const char *const *yes,
                        const char *const *no)
{
    for (; *yes; yes++) {
        const char *t = dq(*yes);
        if (!dy_grammar_accepts(g, t, strlen(t)))
            fail_msg("%s: rejected %s", what, t);
        json_error_t je;
        json_t *v = json_loads(t, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
        if (!v)
            fail_msg("%s: accepted %s, which is not JSON (%s)", what, t, je.text);
        json_decref(v);
    }
    for (; *no; no++) {
        const char *t = dq(*no);
        if (dy_grammar_accepts(g, t, strlen(t)))
            fail_msg("%s: accepted %s", what, t);
    }
}

static void expect(const char *schema, const char *const *yes, const char *const *no)
{
    dy_grammar *g = compile_with(schema, NULL);
    check_texts(g, schema, yes, no);
    dy_grammar_free(g);
}

static void expect_error_with(const char *schema, const dy_schema_opts *o, dy_schema_status st,
                              const char *param, const char *in_message)
{
    json_t *s = load(schema);
    dy_buf b = {0};
    dy_buf_append_str(&b, "kept ::= \"x\"\n");
    size_t before = b.len;
    dy_schema_error e;
    dy_schema_status got = dy_schema_to_grammar(s, o, &b, &e);
    if (got != st || strcmp(e.param, param) != 0 || !strstr(e.message, in_message))
        fail_msg("%s: got status %d param '%s' message '%s'; want %d '%s' '%s'", schema, got,
                 e.param, e.message, st, param, in_message);
    assert_int_equal(e.status, st);
    assert_int_equal(b.len, before); /* a refusal leaves the output as it was */
    dy_buf_free(&b);
    json_decref(s);
}

static void expect_error(const char *schema, dy_schema_status st, const char *param,
                         const char *in_message)
{
    expect_error_with(schema, NULL, st, param, in_message);
}

typedef struct {
    const char *schema;
    dy_schema_status st;
    const char *param, *in_message;
} error_case;

static void expect_errors(const error_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_error(cases[i].schema, cases[i].st, cases[i].param, cases[i].in_message);
}

#define EXPECT_ERRORS(...)                                                                    \
    do {                                                                                      \
        static const error_case cases_[] = {__VA_ARGS__};                                     \
        expect_errors(cases_, sizeof cases_ / sizeof cases_[0]);                              \
    } while (0)

/* ---------------------------------------------------------------- json_object */

static void test_json_object(void **state)
{
    (void)state;
    dy_buf b = {0};
    dy_json_object_rules("root", NULL, &b);
    dy_grammar *g = parse_grammar(&b);
    check_texts(g, "json_object",
                TEXTS("{}", "{ }", "{'a':1}", "{'a': 1, 'b': [1, -2.5e-3, {'c': null}], 'd': true}",
                      "{\n  'a': {\n    'b': [\n      false\n    ]\n  }\n}",
                      "{'s':'\\'\\\\\\/\\b\\f\\n\\r\\t'}", "{'e':'\\u00e9\\u00E9'}",
                      "{'p':'\\ud83d\\ude00'}", "{'u':'é日本😀'}", "{'':0}", "{'x':[]}",
                      "{'n':0.5E+10}", "{'del':'\x7f'}"),
                TEXTS("[]", "'x'", "1", " {}", "{} ", "{}\n", "{'a':01}", "{'a':1.}",
                      "{'a':.5}", "{'a':+1}", "{'a':'\x01'}", "{'a':'\n'}", "{'a':'\xff'}",
                      "{'a':'\xc3'}", "{'a':'\xed\xa0\x80'}", "{'a':'\\ud800'}",
                      "{'a':'\\udc00'}", "{'a':'\\ud800\\u0041'}", "{'a':'\\u0000'}",
                      "{'a':'\\x41'}", "{'a':'\\u12'}", "{'a':tru}", "{'a':1,}", "{,}",
                      "{'a'  :1}", "{'a':  1}", "{'a':1\n\n}",
                      "{\n                 'a':1}")); /* 17 spaces: over max_indent */
    dy_grammar_free(g);

    /* As a part: another prefix, a smaller indent. */
    dy_buf_clear(&b);
    dy_json_object_rules("obj", &(dy_schema_opts){.max_indent = 2}, &b);
    dy_buf_append_str(&b, "root ::= \"<\" obj \">\"\n");
    g = parse_grammar(&b);
    check_texts(g, "prefix obj", NONE, TEXTS("{}", "<{\n   'a':1}>"));
    assert_true(dy_grammar_accepts(g, "<{\n  \"a\":1}>", 12));
    dy_grammar_free(g);
    dy_buf_free(&b);
}

/* ---------------------------------------------------------------- types */

static void test_types(void **state)
{
    (void)state;
    expect("{'type':'string'}", TEXTS("''", "'abc'", "'é\\n'"), TEXTS("1", "abc", "'a'b'"));
    expect("{'type':'integer'}", TEXTS("0", "-7", "123456789012345678901"),
           TEXTS("1.5", "01", "-0x", "1e3", "'1'"));
    expect("{'type':'number'}", TEXTS("0", "-1.5e10", "3.25", "1E-2"), TEXTS("1.", "'1'", "-"));
    expect("{'type':'boolean'}", TEXTS("true", "false"), TEXTS("1", "null", "True"));
    expect("{'type':'null'}", TEXTS("null"), TEXTS("0", "'null'"));
    expect("{'type':['string','null']}", TEXTS("'x'", "null"), TEXTS("1", "{}"));
    expect("{'type':['integer','number']}", TEXTS("1", "1.5"), TEXTS("'x'"));
    expect("{}", TEXTS("1", "'x'", "null", "[1,{'a':[]}]", "{'a':'b'}"), TEXTS("", "x"));
    expect("true", TEXTS("1", "[]"), TEXTS("nul"));
    expect("{'type':'object'}", TEXTS("{}", "{'any': [1, 'two']}"), TEXTS("[]"));
    expect("{'type':'array'}", TEXTS("[]", "[1, 'a', null, [{}]]"), TEXTS("{}"));
    /* annotations are ignored */
    expect("{'type':'integer','title':'t','description':'d','$schema':'s','$id':'i',"
           "'default':3,'examples':[1],'$comment':'c'}", TEXTS("3"), TEXTS("'3'"));
    /* type inferred from the keywords when absent */
    expect("{'minLength':2}", TEXTS("'ab'"), TEXTS("'a'", "12"));
    expect("{'properties':{'a':{'type':'null'}}}", TEXTS("{}", "{'a':null}"), TEXTS("null"));
}

/* ---------------------------------------------------------------- objects */

static void test_properties(void **state)
{
    (void)state;
    const char *abc = "{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'string'},"
                      "'c':{'type':'boolean'}},'required':['a','c'],'additionalProperties':false}";
    expect(abc,
           TEXTS("{'a':1,'c':true}", "{'a':1,'b':'x','c':false}", "{ 'a': 1, 'c': true }",
                 "{\n  'a': 1,\n  'b': 'x',\n  'c': true\n}"),
           TEXTS("{'c':true,'a':1}", "{'a':1}", "{'c':true}", "{'a':1,'c':true,'d':1}",
                 "{'a':'1','c':true}", "{'a':1,,'c':true}", "{'a':1 ,'c':true}", "{}"));
    /* all optional: any subset, in order */
    expect("{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'integer'},"
           "'c':{'type':'integer'}}}",
           TEXTS("{}", "{'a':1}", "{'b':2}", "{'c':3}", "{'a':1,'c':3}", "{'b':2,'c':3}",
                 "{'a':1,'b':2,'c':3}"),
           TEXTS("{'b':2,'a':1}", "{,'a':1}", "{'a':1,}", "{'d':1}", "{'a':1,'a':1}"));
    /* only the last is required */
    expect("{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'integer'}},"
           "'required':['b']}", TEXTS("{'b':2}", "{'a':1,'b':2}"), TEXTS("{'a':1}", "{}"));
    /* keys that need escapes, nested objects */
    expect("{'type':'object','properties':{'q\\'k':{'type':'object','properties':{'é':"
           "{'const':1}},'required':['é']}},'required':['q\\'k']}",
           TEXTS("{'q\\'k':{'é':1}}"), TEXTS("{'q\\'k':{}}", "{'qk':{'é':1}}"));
    expect("{'type':'object','properties':{}}", TEXTS("{}", "{ }"), TEXTS("{'a':1}"));
    expect("{'type':'object','additionalProperties':false}", TEXTS("{}"), TEXTS("{'a':1}"));
    expect("{'type':'object','additionalProperties':{'type':'integer'}}",
           TEXTS("{}", "{'a':1}", "{'a':1, 'b':2}"), TEXTS("{'a':'x'}", "[]"));
    expect("{'type':'object','additionalProperties':true}", TEXTS("{'a':[1]}"), TEXTS("[]"));
}

/* ---------------------------------------------------------------- enum and const */

static void test_enum_const(void **state)
{
    (void)state;
    expect("{'enum':['red',1,null,true,{'a':[1,2],'b':{'c':'d'}},[true,'x'],1.5,-0.25,'é\\n']}",
           TEXTS("'red'", "1", "null", "true", "{'a':[1,2],'b':{'c':'d'}}", "[true,'x']", "1.5",
                 "-0.25", "'é\\n'"),
           TEXTS("'blue'", "2", "false", "{'a':[1, 2],'b':{'c':'d'}}", "{'b':{'c':'d'},'a':[1,2]}",
                 "'red' ", "1.50", "'é\n'"));
    expect("{'const':'say \\'hi\\''}", TEXTS("'say \\'hi\\''"), TEXTS("'say hi'"));
    expect("{'const':{'k':[null]}}", TEXTS("{'k':[null]}"), TEXTS("{'k':[]}"));
    expect("{'type':'string','enum':['a','b']}", TEXTS("'a'", "'b'"), TEXTS("'c'"));
    expect("{'type':'integer','enum':[1,2.0]}", TEXTS("1", "2"), TEXTS("2.0", "3"));
    expect("{'const':0.1}", TEXTS("0.1"), TEXTS("0.10000000000000001", "0.2"));
}

/* ---------------------------------------------------------------- arrays */

static void test_arrays(void **state)
{
    (void)state;
    expect("{'type':'array','items':{'type':'integer'},'minItems':1,'maxItems':3}",
           TEXTS("[1]", "[1,2]", "[1, 2, 3]", "[\n  1,\n  2\n]", "[ 1 ]"),
           TEXTS("[]", "[1,2,3,4]", "['a']", "[1,]", "[,1]", "[1 , 2]"));
    expect("{'type':'array','items':{'type':'string'},'minItems':2}",
           TEXTS("['a','b']", "['a','b','c','d','e']"), TEXTS("['a']", "[]"));
    expect("{'type':'array','maxItems':2}", TEXTS("[]", "[1]", "[{}, 'x']"), TEXTS("[1,2,3]"));
    expect("{'type':'array','maxItems':0}", TEXTS("[]", "[ ]"), TEXTS("[1]"));
    expect("{'type':'array','minItems':3,'maxItems':3,'items':{'type':'boolean'}}",
           TEXTS("[true,false,true]"), TEXTS("[true,false]", "[true,true,true,true]"));
    expect("{'type':'array','items':{'type':'array','items':{'enum':[1,2]},'maxItems':1}}",
           TEXTS("[]", "[[]]", "[[1],[2],[]]"), TEXTS("[[1,2]]", "[[3]]"));
}

/* ---------------------------------------------------------------- anyOf, oneOf, allOf */

static void test_unions(void **state)
{
    (void)state;
    expect("{'anyOf':[{'type':'string','maxLength':1},{'type':'integer','minimum':0}],"
           "'description':'d'}", TEXTS("'a'", "''", "0", "42"), TEXTS("'ab'", "-1", "null"));
    expect("{'oneOf':[{'type':'string'},{'type':'integer'},{'type':'null'}]}",
           TEXTS("'a'", "1", "null"), TEXTS("1.5", "true"));
    expect("{'oneOf':[{'const':'a'},{'type':'object','properties':{'x':{'type':'integer'}}}]}",
           TEXTS("'a'", "{'x':1}"), TEXTS("'b'"));
    /* objects told apart by a required property's const (a discriminator), through $refs */
    expect("{'$defs':{'cat':{'type':'object','properties':{'kind':{'const':'cat'},"
           "'lives':{'type':'integer'}},'required':['kind','lives']},'dog':{'type':'object',"
           "'properties':{'kind':{'enum':['dog','puppy']},'good':{'type':'boolean'}},"
           "'required':['kind']}},'oneOf':[{'$ref':'#/$defs/cat'},{'$ref':'#/$defs/dog'}]}",
           TEXTS("{'kind':'cat','lives':9}", "{'kind':'puppy'}", "{'kind':'dog','good':true}"),
           TEXTS("{'kind':'cat'}", "{'kind':'dog','lives':9}"));
    EXPECT_ERRORS(
        {"{'oneOf':[{'type':'object','properties':{'k':{'const':'a'}},'required':['k']},"
         "{'type':'object','properties':{'k':{'enum':['b','a']}},'required':['k']}]}",
         DY_SCHEMA_UNSUPPORTED, "oneOf[1]", "can match the same value"},
        {"{'oneOf':[{'type':'object','properties':{'k':{'const':'a'}},'required':['k']},"
         "{'type':'object','properties':{'k':{'const':'b'}}}]}",
         DY_SCHEMA_UNSUPPORTED, "oneOf[1]", "can match the same value"}
    );
    expect("{'allOf':[{'type':'integer','maximum':3}]}", TEXTS("3"), TEXTS("4"));
    /* pydantic's Optional[int] */
    expect("{'anyOf':[{'type':'integer'},{'type':'null'}],'default':null,'title':'X'}",
           TEXTS("1", "null"), TEXTS("'1'"));
}

/* ---------------------------------------------------------------- $ref */

static void test_refs(void **state)
{
    (void)state;
    /* a tree: recursion through an array */
    const char *tree = "{'$defs':{'node':{'type':'object','properties':{'v':{'type':'integer'},"
                       "'kids':{'type':'array','items':{'$ref':'#/$defs/node'}}},"
                       "'required':['v','kids'],'additionalProperties':false}},"
                       "'$ref':'#/$defs/node'}";
    expect(tree, TEXTS("{'v':1,'kids':[]}", "{'v':1,'kids':[{'v':2,'kids':[{'v':3,'kids':[]}]}]}"),
           TEXTS("{'v':1}", "{'v':1,'kids':[{'v':2}]}"));
    /* a list through the root itself, optional next */
    expect("{'type':'object','properties':{'v':{'type':'string'},'next':{'$ref':'#'}},"
           "'required':['v']}", TEXTS("{'v':'a'}", "{'v':'a','next':{'v':'b','next':{'v':'c'}}}"),
           TEXTS("{'v':'a','next':{}}"));
    /* definitions, a pointer escape, a shared target referenced twice */
    expect("{'definitions':{'a/b':{'enum':['x']}},'type':'object','properties':{"
           "'p':{'$ref':'#/definitions/a~1b'},'q':{'$ref':'#/definitions/a~1b'}},"
           "'required':['p','q']}", TEXTS("{'p':'x','q':'x'}"), TEXTS("{'p':'y','q':'x'}"));
    /* a $ref with annotations beside it */
    expect("{'$defs':{'i':{'type':'integer'}},'properties':{'a':{'$ref':'#/$defs/i',"
           "'description':'d'}}}", TEXTS("{'a':1}"), TEXTS("{'a':'1'}"));
    /* recursion through anyOf alone would be left-recursive */
    EXPECT_ERRORS(
        {"{'$defs':{'a':{'anyOf':[{'$ref':'#/$defs/a'},{'type':'string'}]}},"
         "'$ref':'#/$defs/a'}", DY_SCHEMA_INVALID, "$defs.a.anyOf[0].$ref",
         "recurses without bound"},
        {"{'$ref':'#'}", DY_SCHEMA_INVALID, "$ref", "recurses without bound"},
        /* every value would hold another */
        {"{'type':'object','properties':{'next':{'$ref':'#'}},'required':['next']}",
         DY_SCHEMA_INVALID, "", "recurses without bound"},
        {"{'$defs':{'a':{'type':'array','minItems':1,'items':{'$ref':'#/$defs/a'}}},"
         "'properties':{'x':{'$ref':'#/$defs/a'}}}", DY_SCHEMA_INVALID, "$defs.a",
         "recurses without bound"},
        {"{'$ref':'#/$defs/missing'}", DY_SCHEMA_INVALID, "$ref", "points to nothing"},
        {"{'$ref':'other.json#/a'}", DY_SCHEMA_UNSUPPORTED, "$ref", "another document"},
        {"{'$ref':3}", DY_SCHEMA_INVALID, "$ref", "must be a string"},
        {"{'$ref':'#','type':'object'}", DY_SCHEMA_UNSUPPORTED, "type", "beside '$ref'"},
        /* an error inside a target names the target's place */
        {"{'$defs':{'t':{'type':'string','multipleOf':2}},'$ref':'#/$defs/t'}",
         DY_SCHEMA_UNSUPPORTED, "$defs.t.multipleOf", "'multipleOf'"}
    );
}

/* ---------------------------------------------------------------- strings */

static void test_string_lengths(void **state)
{
    (void)state;
    expect("{'type':'string','minLength':2,'maxLength':3}",
           TEXTS("'ab'", "'abc'", "'日本語'", "'\\u00e9x'", "'\\ud83d\\ude00😀'", "'\\n\\t'"),
           TEXTS("'a'", "'abcd'", "'日本語x'", "'\\u00e9'"));
    expect("{'type':'string','maxLength':0}", TEXTS("''"), TEXTS("'a'"));
    expect("{'type':'string','minLength':1}", TEXTS("'a'", "'abcdefgh'"), TEXTS("''"));
    expect("{'type':'string','maxLength':1}", TEXTS("''", "'é'"), TEXTS("'ab'"));
}

static void test_patterns(void **state)
{
    (void)state;
    expect("{'type':'string','pattern':'^[a-z]+$'}", TEXTS("'abc'"), TEXTS("'abC'", "''", "'a1'"));
    expect("{'type':'string','pattern':'^\\\\d{3}-\\\\d{4}$'}", TEXTS("'555-1234'"),
           TEXTS("'555-123'", "'5555-1234'", "'a55-1234'"));
    /* unanchored sides admit anything */
    expect("{'type':'string','pattern':'ab'}", TEXTS("'ab'", "'xxabyy'", "'é ab \\n'"),
           TEXTS("'a b'", "''"));
    expect("{'type':'string','pattern':'^ab'}", TEXTS("'ab'", "'abc'"), TEXTS("'xab'"));
    expect("{'type':'string','pattern':'ab$'}", TEXTS("'ab'", "'xab'"), TEXTS("'abx'"));
    expect("{'type':'string','pattern':''}", TEXTS("''", "'anything'"), NONE);
    expect("{'type':'string','pattern':'^$'}", TEXTS("''"), TEXTS("'a'"));
    /* the alternation binds loosest: (^a)|(b$) */
    expect("{'type':'string','pattern':'^a|b$'}", TEXTS("'a'", "'ax'", "'xb'"),
           TEXTS("'xa'", "'bx'"));
    /* characters JSON escapes: the pattern's " and \ are \" and \\ in the JSON text */
    expect("{'type':'string','pattern':'^say \\'hi\\'$'}", TEXTS("'say \\'hi\\''"),
           TEXTS("'say hi'", "'say \\\\'hi\\\\''"));
    expect("{'type':'string','pattern':'^a\\\\\\\\b$'}", TEXTS("'a\\\\b'"),
           TEXTS("'ab'", "'a\\b'"));
    expect("{'type':'string','pattern':'^\\\\n\\\\t$'}", TEXTS("'\\n\\t'"), TEXTS("'nt'"));
    /* groups, quantifiers, lazy ones */
    expect("{'type':'string','pattern':'^(ab)*c?$'}", TEXTS("''", "'ab'", "'ababc'", "'c'"),
           TEXTS("'aba'", "'cc'"));
    expect("{'type':'string','pattern':'^x{2,3}$'}", TEXTS("'xx'", "'xxx'"),
           TEXTS("'x'", "'xxxx'"));
    expect("{'type':'string','pattern':'^x{2}y{1,}z{0}$'}", TEXTS("'xxy'", "'xxyyy'"),
           TEXTS("'xy'", "'xxyz'"));
    expect("{'type':'string','pattern':'^(?:a|b)+?$'}", TEXTS("'abba'"), TEXTS("''", "'abc'"));
    expect("{'type':'string','pattern':'^(?<year>\\\\d{4})$'}", TEXTS("'2024'"), TEXTS("'24'"));
    expect("{'type':'string','pattern':'^(a|)b$'}", TEXTS("'ab'", "'b'"), TEXTS("'aab'"));
    /* classes */
    expect("{'type':'string','pattern':'^[\\\\w.-]+@[a-z]+\\\\.(com|org)$'}",
           TEXTS("'john.doe-1@example.com'", "'x_y@z.org'"), TEXTS("'a@b.net'", "'a b@c.com'"));
    expect("{'type':'string','pattern':'^[^a-c]$'}",
           TEXTS("'d'", "'é'", "'\\n'", "'\\''", "'\\\\'"),
           TEXTS("'a'", "'c'", "''", "'dd'"));
    expect("{'type':'string','pattern':'^[^\\'\\\\\\\\]+$'}", TEXTS("'abc'"),
           TEXTS("'a\\'b'", "'a\\\\b'"));
    expect("{'type':'string','pattern':'^[\\\\s]$'}", TEXTS("' '", "'\\t'", "'\\n'"),
           TEXTS("'a'", "'  '"));
    expect("{'type':'string','pattern':'^[éa\\'-]$'}", TEXTS("'é'", "'a'", "'\\''", "'-'"),
           TEXTS("'b'", "'e'"));
    expect("{'type':'string','pattern':'^\\\\u00e9\\\\x41\\\\.\\\\/$'}", TEXTS("'éA./'"),
           TEXTS("'éAx/'"));
    /* `.`: one character, not a line terminator */
    expect("{'type':'string','pattern':'^.$'}", TEXTS("'a'", "'é'", "'日'", "'😀'", "'\\''",
                                                      "'\\t'", "'\\\\'"),
           TEXTS("''", "'ab'", "'\\n'", "'\n'", "'\\r'", "'\xe2\x80\xa8'", "'\xe2\x80\xa9'"));
    expect("{'type':'string','pattern':'^é+日$'}", TEXTS("'éé日'"), TEXTS("'日'", "'e日'"));
    /* refused forms name the pattern */
    const char *bad[] = {"(?=a)", "(?!a)", "(?<=a)", "a\\\\1", "\\\\bword", "a^b", "a$b",
                         "\\\\p{L}", "[à-ÿ]", "[^é]", "[^\\\\s]", "\\\\D", "\\\\W", "\\\\S",
                         "(ab", "ab)", "[ab", "*a", "a{2", "a{3,2}", "\\\\u{41}", "\\\\cA",
                         "\\\\q", "[z-a]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char schema[200];
        snprintf(schema, sizeof schema, "{'properties':{'s':{'type':'string','pattern':'%s'}}}",
                 bad[i]);
        expect_error(schema, DY_SCHEMA_UNSUPPORTED, "properties.s.pattern", "pattern: ");
    }
    EXPECT_ERRORS(
        {"{'type':'string','pattern':'a','maxLength':3}", DY_SCHEMA_UNSUPPORTED,
         "maxLength", "beside 'pattern'"},
        {"{'type':'string','pattern':3}", DY_SCHEMA_INVALID, "pattern", "a string"}
    );
}

static void test_formats(void **state)
{
    (void)state;
    expect("{'type':'string','format':'date'}",
           TEXTS("'2024-02-28'", "'1999-12-31'", "'2024-04-30'", "'0001-01-01'"),
           TEXTS("'2024-02-30'", "'2024-04-31'", "'2024-13-01'", "'2024-00-10'", "'24-01-01'",
                 "'2024-1-01'"));
    expect("{'type':'string','format':'time'}",
           TEXTS("'12:30:00Z'", "'23:59:59.5+05:30'", "'00:00:00-12:00'"),
           TEXTS("'24:00:00Z'", "'12:60:00Z'", "'12:30:00'", "'12:30Z'"));
    expect("{'type':'string','format':'date-time'}", TEXTS("'2024-05-06T07:08:09.123Z'"),
           TEXTS("'2024-05-06 07:08:09Z'", "'2024-05-06'"));
    expect("{'type':'string','format':'uuid'}", TEXTS("'123e4567-e89b-12d3-a456-426614174000'"),
           TEXTS("'123e4567e89b12d3a456426614174000'", "'123e4567-e89b-12d3-a456-42661417400g'"));
    expect_error("{'type':'string','format':'email'}", DY_SCHEMA_UNSUPPORTED, "format",
                 "the format 'email' is not supported");
}

/* ---------------------------------------------------------------- numbers */

/* Every integer in lo-margin..hi+margin against the inclusive range [want_lo, want_hi]. */
static void sweep_integers(const char *schema, long long want_lo, long long want_hi,
                           long long from, long long to)
{
    dy_grammar *g = compile_with(schema, NULL);
    for (long long v = from; v <= to; v++) {
        char t[32];
        int n = snprintf(t, sizeof t, "%lld", v);
        bool want = v >= want_lo && v <= want_hi;
        if (dy_grammar_accepts(g, t, (size_t)n) != want)
            fail_msg("%s: %s %s", schema, want ? "rejected" : "accepted", t);
    }
    dy_grammar_free(g);
}

static void test_integer_ranges(void **state)
{
    (void)state;
    static const struct {
        const char *bounds;
        long long lo, hi;
    } cases[] = {
        {"'minimum':0,'maximum':100", 0, 100},
        {"'minimum':7,'maximum':7", 7, 7},
        {"'minimum':-37,'maximum':-5", -37, -5},
        {"'minimum':-123,'maximum':45", -123, 45},
        {"'minimum':13,'maximum':987", 13, 987},
        {"'minimum':100,'maximum':199", 100, 199},
        {"'minimum':99,'maximum':1000", 99, 1000},
        {"'exclusiveMinimum':-10,'exclusiveMaximum':10", -9, 9},
        {"'exclusiveMinimum':0", 1, 1LL << 62},
        {"'maximum':-3", -(1LL << 62), -3},
        {"'minimum':250", 250, 1LL << 62},
        {"'minimum':1.5,'maximum':4.5", 2, 4},
        {"'exclusiveMinimum':1.5,'exclusiveMaximum':4.0", 2, 3},
        {"'minimum':5,'exclusiveMinimum':5", 6, 1LL << 62},
        {"'minimum':5,'exclusiveMinimum':3", 5, 1LL << 62},
        {"'minimum':0,'exclusiveMinimum':true,'maximum':9,'exclusiveMaximum':true", 1, 8},
        {"'minimum':-1000,'maximum':-1000", -1000, -1000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char schema[200];
        snprintf(schema, sizeof schema, "{'type':'integer',%s}", cases[i].bounds);
        sweep_integers(schema, cases[i].lo, cases[i].hi, -1200, 1200);
    }
    /* large bounds: around every power of ten and the ends */
    dy_grammar *g = compile_with("{'type':'integer','minimum':0,'maximum':1000000}", NULL);
    check_texts(g, "0..1000000", TEXTS("0", "9", "10", "99999", "100000", "999999", "1000000",
                                       "123456", "500000"),
                TEXTS("-1", "1000001", "1999999", "9999999", "10000000", "01", "-0"));
    dy_grammar_free(g);
    g = compile_with("{'type':'integer','minimum':-9223372036854775808,"
         "'maximum':9223372036854775807}", NULL);
    check_texts(g, "int64", TEXTS("-9223372036854775808", "9223372036854775807", "0", "-1"),
                TEXTS("-9223372036854775809", "9223372036854775808", "10000000000000000000"));
    dy_grammar_free(g);
    g = compile_with("{'type':'integer','minimum':1234567}", NULL);
    check_texts(g, ">=1234567", TEXTS("1234567", "1234568", "9999999", "10000000",
                                      "123456789012345678901234"),
                TEXTS("1234566", "999999", "0", "-1234567"));
    dy_grammar_free(g);
    EXPECT_ERRORS(
        {"{'type':'integer','minimum':5,'maximum':4}", DY_SCHEMA_INVALID, "",
         "no integer lies within"},
        {"{'type':'integer','exclusiveMinimum':4,'exclusiveMaximum':5}",
         DY_SCHEMA_INVALID, "", "no integer lies within"},
        {"{'type':'integer','minimum':1e30}", DY_SCHEMA_UNSUPPORTED, "minimum", "64-bit"},
        {"{'type':'integer','exclusiveMaximum':-1e19}", DY_SCHEMA_UNSUPPORTED,
         "exclusiveMaximum", "64-bit"},
        {"{'type':'integer','minimum':'3'}", DY_SCHEMA_INVALID, "minimum",
         "must be a number"}
    );
}

/* Decimal texts k/8 for k in -8*span..8*span, each accepted iff lo <= value <= hi (with
 * exclusive ends as given). */
static void sweep_numbers(const char *schema, double lo, bool lo_excl, double hi, bool hi_excl,
                          int span)
{
    dy_grammar *g = compile_with(schema, NULL);
    for (int k = -8 * span; k <= 8 * span; k++) {
        double v = k / 8.0;
        char t[40];
        const char *forms[] = {"%.0f", "%.1f", "%.3f", "%.5f"};
        for (size_t f = 0; f < 4; f++) {
            int n = snprintf(t, sizeof t, forms[f], v);
            double read = strtod(t, NULL);
            if (strcmp(t, "-0") == 0 || strncmp(t, "-0.0", 4) == 0 || read != read)
                continue; /* "-0..." forms are not written */
            bool want = (lo_excl ? read > lo : read >= lo) && (hi_excl ? read < hi : read <= hi);
            if (dy_grammar_accepts(g, t, (size_t)n) != want)
                fail_msg("%s: %s %s", schema, want ? "rejected" : "accepted", t);
        }
    }
    dy_grammar_free(g);
}

static void test_number_ranges(void **state)
{
    (void)state;
    sweep_numbers("{'type':'number','minimum':0,'maximum':10}", 0, false, 10, false, 14);
    sweep_numbers("{'type':'number','exclusiveMinimum':0,'exclusiveMaximum':10}", 0, true, 10,
                  true, 14);
    sweep_numbers("{'type':'number','minimum':-3,'maximum':-1}", -3, false, -1, false, 6);
    sweep_numbers("{'type':'number','exclusiveMinimum':-3,'exclusiveMaximum':-1}", -3, true, -1,
                  true, 6);
    sweep_numbers("{'type':'number','minimum':-2,'maximum':3}", -2, false, 3, false, 6);
    sweep_numbers("{'type':'number','exclusiveMinimum':-2,'exclusiveMaximum':0}", -2, true, 0,
                  true, 6);
    sweep_numbers("{'type':'number','minimum':-1,'maximum':0}", -1, false, 0, false, 4);
    sweep_numbers("{'type':'number','minimum':0,'maximum':0}", 0, false, 0, false, 2);
    sweep_numbers("{'type':'number','minimum':4,'maximum':4}", 4, false, 4, false, 6);
    sweep_numbers("{'type':'number','minimum':5}", 5, false, 1e300, false, 12);
    sweep_numbers("{'type':'number','exclusiveMaximum':-2}", -1e300, false, -2, true, 12);
    sweep_numbers("{'type':'number','minimum':2.0,'exclusiveMaximum':7}", 2, false, 7, true, 9);
    dy_grammar *g = compile_with("{'type':'number','minimum':0,'maximum':1}", NULL);
    check_texts(g, "0..1", TEXTS("0", "0.5", "1", "1.0", "1.000", "0.999999999"),
                TEXTS("1.0000001", "-0.5", "1e0", "0.5e-1", "-0", "01"));
    dy_grammar_free(g);
    g = compile_with("{'type':'number','exclusiveMinimum':0}", NULL);
    check_texts(g, ">0", TEXTS("0.001", "0.0000000001", "1", "12345678901234567890.5"),
                TEXTS("0", "0.0", "0.000", "-0.001"));
    dy_grammar_free(g);
    EXPECT_ERRORS(
        {"{'type':'number','minimum':0.5}", DY_SCHEMA_UNSUPPORTED, "minimum",
         "must be integers"},
        {"{'type':'number','minimum':0,'exclusiveMaximum':2.5}", DY_SCHEMA_UNSUPPORTED,
         "exclusiveMaximum", "must be integers"},
        {"{'type':'number','minimum':3,'exclusiveMaximum':3}", DY_SCHEMA_INVALID, "",
         "no number lies within"}
    );
}

/* ---------------------------------------------------------------- refusals */

static void test_unsupported_keywords(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *param, *keyword;
    } cases[] = {
        {"{'properties':{'age':{'type':'integer','multipleOf':2}}}", "properties.age.multipleOf",
         "multipleOf"},
        {"{'type':'object','patternProperties':{'^x':{}}}", "patternProperties",
         "patternProperties"},
        {"{'if':{},'then':{}}", "if", "if"},
        {"{'type':'array','items':{'not':{'type':'string'}}}", "items.not", "not"},
        {"{'type':'array','uniqueItems':true}", "uniqueItems", "uniqueItems"},
        {"{'type':'object','minProperties':1}", "minProperties", "minProperties"},
        {"{'anyOf':[{'type':'string'},{'type':'array','prefixItems':[]}]}", "anyOf[1].prefixItems",
         "prefixItems"},
        {"{'type':'string','nullable':true}", "nullable", "nullable"},
        {"{'type':'object','dependentRequired':{}}", "dependentRequired", "dependentRequired"},
        {"{'contains':{}}", "contains", "contains"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[100];
        snprintf(msg, sizeof msg, "the keyword '%s' is not supported", cases[i].keyword);
        expect_error(cases[i].schema, DY_SCHEMA_UNSUPPORTED, cases[i].param, msg);
    }
    EXPECT_ERRORS(
        {"{'allOf':[{'type':'string'},{'maxLength':2}]}", DY_SCHEMA_UNSUPPORTED, "allOf",
         "more than one"},
        {"{'oneOf':[{'type':'integer'},{'type':'number'}]}", DY_SCHEMA_UNSUPPORTED,
         "oneOf[1]", "can match the same value"},
        {"{'oneOf':[{'type':'string'},{'enum':['a',1]}]}", DY_SCHEMA_UNSUPPORTED,
         "oneOf[1]", "can match the same value"},
        {"{'type':'object','properties':{'a':{}},'additionalProperties':true}",
         DY_SCHEMA_UNSUPPORTED, "additionalProperties", "other than false"},
        {"{'type':'array','items':[{'type':'string'}]}", DY_SCHEMA_UNSUPPORTED, "items",
         "a list of schemas"},
        {"{'anyOf':[{'type':'string'}],'type':'string'}", DY_SCHEMA_UNSUPPORTED, "type",
         "beside 'anyOf'"},
        {"{'enum':['a'],'minLength':1}", DY_SCHEMA_UNSUPPORTED, "minLength",
         "beside 'enum'"},
        {"{'enum':['a'],'const':'a'}", DY_SCHEMA_UNSUPPORTED, "const", "beside 'enum'"}
    );
}

static void test_invalid_values(void **state)
{
    (void)state;
    EXPECT_ERRORS(
        {"{'type':'object','properties':{'a':{}},'required':3}", DY_SCHEMA_INVALID,
         "required", "must be an array"},
        {"{'type':'object','properties':{'a':{}},'required':['a',3]}", DY_SCHEMA_INVALID,
         "required[1]", "property names"},
        {"{'type':'object','properties':{'a':{}},'required':['b']}", DY_SCHEMA_INVALID,
         "required[0]", "not in 'properties'"},
        {"{'type':'object','required':['b']}", DY_SCHEMA_INVALID, "required[0]",
         "not in 'properties'"},
        {"{'enum':[]}", DY_SCHEMA_INVALID, "enum", "non-empty"},
        {"{'enum':'a'}", DY_SCHEMA_INVALID, "enum", "non-empty"},
        {"{'type':'string','enum':['a',1]}", DY_SCHEMA_INVALID, "enum[1]", "type"},
        {"{'type':'integer','const':1.5}", DY_SCHEMA_INVALID, "const", "type"},
        {"{'type':'array','minItems':3,'maxItems':2}", DY_SCHEMA_INVALID, "minItems",
         "over 'maxItems'"},
        {"{'type':'array','minItems':-1}", DY_SCHEMA_INVALID, "minItems", "non-negative"},
        {"{'type':'string','minLength':'2'}", DY_SCHEMA_INVALID, "minLength",
         "non-negative"},
        {"{'type':'string','minLength':5,'maxLength':4}", DY_SCHEMA_INVALID, "minLength",
         "over 'maxLength'"},
        {"{'type':'strin'}", DY_SCHEMA_INVALID, "type", "unknown type"},
        {"{'type':[]}", DY_SCHEMA_INVALID, "type", "non-empty list"},
        {"{'type':'integer','minLength':1}", DY_SCHEMA_INVALID, "minLength",
         "does not apply"},
        {"{'type':'object','properties':3}", DY_SCHEMA_INVALID, "properties",
         "must be an object"},
        {"{'type':'object','additionalProperties':3}", DY_SCHEMA_INVALID,
         "additionalProperties", "boolean or a schema"},
        {"{'properties':{'a':3}}", DY_SCHEMA_INVALID, "properties.a",
         "an object or a boolean"},
        {"{'properties':{'a':false}}", DY_SCHEMA_INVALID, "properties.a", "false"},
        {"3", DY_SCHEMA_INVALID, "", "an object or a boolean"},
        {"{'anyOf':[]}", DY_SCHEMA_INVALID, "anyOf", "non-empty"},
        {"{'anyOf':[{'type':'string'},{'type':'integer','minimum':'x'}]}",
         DY_SCHEMA_INVALID, "anyOf[1].minimum", "must be a number"}
    );
}

static void test_limits(void **state)
{
    (void)state;
    const char *deep = "{'type':'array','items':{'type':'array','items':{'type':'array',"
                       "'items':{'type':'integer'}}}}";
    expect_error_with(deep, &(dy_schema_opts){.max_depth = 3}, DY_SCHEMA_TOO_DEEP,
                      "items.items.items", "max_depth (3)");
    dy_grammar *g = compile_with(deep, &(dy_schema_opts){.max_depth = 4});
    check_texts(g, "depth 4", TEXTS("[[[1]]]"), TEXTS("[[1]]"));
    dy_grammar_free(g);

    /* a big enum over a small grammar limit */
    char schema[8192] = "{'enum':[";
    for (int i = 0; i < 300; i++)
        snprintf(schema + strlen(schema), sizeof schema - strlen(schema), "%s'value-%d'",
                 i ? "," : "", i);
    strcat(schema, "]}");
    expect_error_with(schema, &(dy_schema_opts){.max_grammar_bytes = 3000}, DY_SCHEMA_TOO_LARGE,
                      "enum", "max_grammar_bytes (3000 bytes)");
    g = compile_with(schema, NULL);
    check_texts(g, "enum of 300", TEXTS("'value-0'", "'value-299'"), TEXTS("'value-300'"));
    dy_grammar_free(g);

    /* a 50-property object compiles and parses */
    char wide[8192] = "{'type':'object','properties':{";
    for (int i = 0; i < 50; i++)
        snprintf(wide + strlen(wide), sizeof wide - strlen(wide), "%s'p%d':{'type':'integer'}",
                 i ? "," : "", i);
    strcat(wide, "}}");
    g = compile_with(wide, NULL);
    check_texts(g, "50 properties", TEXTS("{}", "{'p0':0,'p49':49}", "{'p7':1,'p8':2,'p30':3}"),
                TEXTS("{'p8':2,'p7':1}", "{'p50':1}"));
    dy_grammar_free(g);
}

/* ---------------------------------------------------------------- composition */

static void test_rules_with_prefixes(void **state)
{
    (void)state;
    json_t *a = load("{'type':'object','properties':{'city':{'type':'string'}},"
         "'required':['city']}");
    json_t *b = load("{'type':'object','properties':{'n':{'type':'integer','minimum':1}},"
         "'required':['n']}");
    dy_buf g = {0};
    dy_schema_error e;
    assert_int_equal(dy_schema_rules(a, "args-a", NULL, &g, &e), DY_SCHEMA_OK);
    assert_int_equal(dy_schema_rules(b, "args-b", NULL, &g, &e), DY_SCHEMA_OK);
    dy_buf_append_str(&g, "root ::= ");
    const char *head_a = "{\"name\": \"weather\", \"arguments\": ";
    const char *head_b = "{\"name\": \"count\", \"arguments\": ";
    dy_schema_literal(&g, head_a, strlen(head_a));
    dy_buf_append_str(&g, " args-a ");
    dy_schema_literal(&g, "}", 1);
    dy_buf_append_str(&g, " | ");
    dy_schema_literal(&g, head_b, strlen(head_b));
    dy_buf_append_str(&g, " args-b \"}\"\n");
    dy_grammar *gr = parse_grammar(&g);
    check_texts(gr, "tools",
                TEXTS("{'name': 'weather', 'arguments': {'city':'Paris'}}",
                      "{'name': 'count', 'arguments': {'n':3}}"),
                TEXTS("{'name': 'weather', 'arguments': {'n':3}}",
                      "{'name': 'count', 'arguments': {'n':0}}"));
    dy_grammar_free(gr);
    size_t len = g.len;
    assert_int_equal(dy_schema_rules(a, "1bad", NULL, &g, &e), DY_SCHEMA_INVALID);
    assert_non_null(strstr(e.message, "prefix"));
    assert_int_equal(g.len, len);
    dy_buf_free(&g);
    json_decref(a);
    json_decref(b);

    /* the literal helper: every byte round-trips through a grammar literal */
    char all[255];
    for (int i = 0; i < 255; i++)
        all[i] = (char)(i + 1);
    dy_buf lit = {0};
    dy_buf_append_str(&lit, "root ::= ");
    dy_schema_literal(&lit, all, sizeof all);
    gr = parse_grammar(&lit);
    assert_true(dy_grammar_accepts(gr, all, sizeof all));
    assert_false(dy_grammar_accepts(gr, all, sizeof all - 1));
    dy_grammar_free(gr);
    dy_buf_free(&lit);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_unions),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_string_lengths),
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_integer_ranges),
        cmocka_unit_test(test_number_ranges),
        cmocka_unit_test(test_unsupported_keywords),
        cmocka_unit_test(test_invalid_values),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_rules_with_prefixes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
