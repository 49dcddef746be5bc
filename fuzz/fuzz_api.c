/* fuzz_api.c — libFuzzer target for the OpenAI request path of `dyad serve`: an HTTP body goes
 * through dy_api_parse, every chat template family renders the parsed messages, and
 * dy_gen_new builds the job the frontend would submit (tools' forced-call grammar, the chat
 * prompt rendered and tokenized, the wire requests), with the limits `dyad serve` sets for the
 * bundled model. The first input byte picks the endpoint (bit 0: chat) and the family
 * dy_gen_new renders with (the other bits); the rest is the body.
 *
 * Beyond "no crash, no leak": a refused body is an error whose JSON parses back to it; a parsed
 * request has every field in the range docs/api.md gives; every family renders a parsed
 * conversation; a request that parsed is never refused later with a 5xx; and each wire request
 * it would send decodes as the worker decodes it, passes the worker's own checks and carries
 * a grammar that compiles (a request the API accepts and the worker refuses is a bug).
 *   ./build-fuzz/fuzz_api -max_total_time=600 build-fuzz/corpus-api fuzz/corpus-api */
#include "grammar/grammar.h"
#include "harness.h"
#include "serve/front/gen.h"
#include "serve/front/json.h"
#include "serve/front/openai.h"
#include "serve/wire/wire.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bundled model (stories260K with tok512.bin), as `dyad serve` limits requests to it. */
enum { CONTEXT = 512, VOCAB = 512, MAX_QUEUE = 256 };

static const dy_tokenizer *tokenizer(void)
{
    static dy_tokenizer *tok; /* loaded once: the same read-only vocabulary for every input */
    if (!tok) {
        char err[512];
        tok = dy_tokenizer_from_llama2c(DYAD_SOURCE_DIR "/models/tok512.bin", VOCAB, err, sizeof err);
        fz_check(tok != NULL, "loading the tokenizer: %s", err);
    }
    return tok;
}

static dy_api_limits serve_limits(void)
{
    dy_api_limits lim = dy_api_limits_default(CONTEXT);
    lim.vocab_size = VOCAB;
    if (lim.max_sequences > MAX_QUEUE)
        lim.max_sequences = MAX_QUEUE;
    return lim;
}

/* ---------------------------------------------------------------- refusals */

static void check_error(const dy_api_error *e)
{
    fz_check(e->status >= 400 && e->status < 600, "error status %d", e->status);
    fz_check(e->message[0] != 0, "an error without a message (status %d)", e->status);
    char *text = dy_api_error_json(e);
    fz_check(text != NULL, "the error object could not be built");
    json_t *root = json_loads(text, 0, NULL);
    json_t *o = json_object_get(root, "error");
    const char *msg = json_string_value(json_object_get(o, "message"));
    json_t *param = json_object_get(o, "param");
    /* Bytes that are not UTF-8 (a client's, quoted in a message) are sent as U+FFFD. */
    json_t *want_msg = dy_json_str(e->message), *want_param = dy_json_str(e->param);
    fz_check(msg && !strcmp(msg, json_string_value(want_msg)),
             "the error JSON does not carry its message: %s", text);
    fz_check(e->param[0] ? json_equal(param, want_param) : json_is_null(param),
             "the error JSON does not carry its param: %s", text);
    json_decref(want_msg);
    json_decref(want_param);
    json_decref(root);
    free(text);
}

/* ---------------------------------------------------------------- a parsed request */

static void check_json_object(const char *text, const char *what)
{
    json_t *v = text ? json_loads(text, 0, NULL) : NULL;
    fz_check(json_is_object(v), "%s is not a JSON object: %s", what, text ? text : "(null)");
    json_decref(v);
}

static void check_grammar(const char *text, size_t len, const char *what)
{
    char err[256];
    fz_check(len <= DY_WIRE_MAX_GRAMMAR, "%s: %zu bytes of grammar exceed the wire's limit", what, len);
    dy_grammar *g = dy_grammar_parse(text, len, err, sizeof err);
    fz_check(g != NULL, "%s: the grammar does not compile (%s):\n%.*s", what, err, (int)len, text);
    dy_grammar_free(g);
}

static void check_prompts(const dy_api_request *r, const dy_api_limits *lim)
{
    fz_check(r->n_prompts >= 1 && r->n_prompts <= lim->max_prompts, "%d prompts", r->n_prompts);
    for (int i = 0; i < r->n_prompts; i++) {
        const dy_api_prompt *p = &r->prompts[i];
        fz_check(!p->text != !p->ids, "prompt %d: text and ids both or neither", i);
        for (int k = 0; p->ids && k < p->n_ids; k++)
            fz_check(p->ids[k] >= 0 && p->ids[k] < lim->vocab_size, "prompt %d: token %d", i, p->ids[k]);
    }
}

static void check_messages(const dy_api_request *r, const dy_api_limits *lim)
{
    fz_check(r->n_messages >= 1 && r->n_messages <= lim->max_messages, "%d messages", r->n_messages);
    for (int i = 0; i < r->n_messages; i++) {
        const dy_chat_msg *m = &r->messages[i];
        fz_check(m->content != NULL && m->role <= DY_ROLE_TOOL, "message %d", i);
        for (int k = 0; k < m->n_calls; k++) {
            fz_check(m->calls[k].name && m->calls[k].name[0], "message %d: call %d has no name", i, k);
            check_json_object(m->calls[k].arguments, "a tool call's arguments");
        }
    }
    for (int i = 0; i < r->n_tools; i++) {
        fz_check(r->tools[i].name && r->tools[i].name[0] && r->tool_rules[i], "tool %d", i);
        if (r->tools[i].parameters) /* NULL: the function takes none */
            check_json_object(r->tools[i].parameters, "a tool's parameters");
    }
    bool forced = r->tool_choice == DY_TOOLS_REQUIRED || r->tool_choice == DY_TOOLS_FUNCTION;
    fz_check(!forced || r->n_tools >= 1, "a forced tool call without tools");
    fz_check(r->tool_choice != DY_TOOLS_FUNCTION || (r->tool_forced >= 0 && r->tool_forced < r->n_tools),
             "forced tool %d of %d", r->tool_forced, r->n_tools);
}

static void check_request(const dy_api_request *r, dy_api_kind kind, const dy_api_limits *lim)
{
    fz_check(r->kind == kind && r->model && r->model[0], "kind or model");
    if (kind == DY_API_COMPLETIONS)
        check_prompts(r, lim);
    else
        check_messages(r, lim);
    fz_check(r->n >= 1 && r->n <= r->best_of && r->best_of <= lim->max_n, "n %d, best_of %d", r->n,
             r->best_of);
    fz_check(kind == DY_API_COMPLETIONS || r->best_of == r->n, "chat with best_of %d", r->best_of);
    fz_check((kind == DY_API_CHAT ? 1 : r->n_prompts) * r->best_of <= lim->max_sequences,
             "more sequences than the limit");
    fz_check(r->max_tokens >= (kind == DY_API_CHAT ? 1 : 0) && r->max_tokens <= lim->max_context,
             "max_tokens %d", r->max_tokens);
    fz_check(dy_sampling_check(&r->sampling) == NULL, "sampling out of the sampler's range: %s",
             dy_sampling_check(&r->sampling));
    fz_check(r->top_logprobs >= 0 && r->top_logprobs <= DY_WIRE_MAX_TOP, "top_logprobs %d",
             r->top_logprobs);
    fz_check(r->n_stop >= 0 && r->n_stop <= lim->max_stop && r->n_stop <= DY_WIRE_MAX_STOPS,
             "%d stops", r->n_stop);
    for (int i = 0; i < r->n_stop; i++)
        fz_check(strlen(r->stop[i]) <= (size_t)lim->max_stop_len, "stop %d is too long", i);
    fz_check(!r->answer_regex || r->select == DY_SELECT_MAJORITY, "answer_regex without a vote");
    fz_check((r->format == DY_FORMAT_TEXT) == !r->grammar, "format %d with grammar %p", r->format,
             (void *)r->grammar);
    if (r->grammar)
        check_grammar(r->grammar, r->grammar_len, "response_format / dyad.grammar");
}

/* Every family dyad knows renders a conversation that parsed, with its tools as gen.c shows
 * them (none for tool_choice "none"). */
static void render_every_family(const dy_api_request *r)
{
    int n_tools = r->tool_choice == DY_TOOLS_NONE ? 0 : r->n_tools;
    for (int f = 0; f < DY_CHAT_N_FAMILIES; f++) {
        char *text = dy_chat_render_tools((dy_chat_family)f, r->messages, r->n_messages, r->tools,
                                          n_tools, true, NULL, NULL);
        fz_check(text != NULL, "family %s did not render the conversation",
                 dy_chat_family_name((dy_chat_family)f));
        free(text);
    }
}

/* ---------------------------------------------------------------- the job it becomes */

/* A wire request of the job, sent as fleet_flights.c sends a prompt's samples and decoded as
 * the worker decodes it, then held to the worker's checks (worker.c, check_request) and to
 * what the client asked (r). */
static void check_wire(const dy_job *job, int first, const dy_api_request *r)
{
    dy_msg_request m = job->choices[first].req;
    m.n_samples = (uint32_t)job->group;
    dy_buf b = {0};
    fz_check(dy_wire_request(&b, &m), "choice %d does not encode as a wire request", first);
    char err[256] = "";
    dy_msg_type type;
    uint32_t len;
    dy_msg_request got;
    fz_check(dy_wire_header(b.data, &type, &len, err, sizeof err) && type == DY_MSG_REQUEST &&
                 dy_wire_decode_request(b.data + DY_WIRE_HEADER, len, &got, err, sizeof err),
             "choice %d: the worker refuses the frame: %s", first, err);
    dy_sampling s = {got.temperature, got.top_k, got.top_p, got.min_p, got.seed};
    fz_check(dy_sampling_check(&s) == NULL, "the worker refuses the sampling: %s", dy_sampling_check(&s));
    fz_check(got.max_tokens >= DY_API_MIN_NEW_TOKENS, "the worker refuses max_tokens 0");
    fz_check(got.n_prompt < CONTEXT && got.n_prompt + got.max_tokens <= CONTEXT,
             "a prompt of %u tokens and %u new ones do not fit the context", got.n_prompt,
             got.max_tokens);
    for (uint32_t i = 0; i < got.n_prompt; i++)
        fz_check(got.prompt[i] >= 0 && got.prompt[i] < VOCAB, "prompt token %d", got.prompt[i]);
    fz_check(got.n_samples == (uint32_t)job->group && got.n_stops == r->n_stop,
             "%u samples and %u stops on the wire", got.n_samples, got.n_stops);
    fz_check(!got.session == !r->session, "dyad.session %s, wire session %llu",
             r->session ? r->session : "(none)", (unsigned long long)got.session);
    for (int i = 0; i < got.n_stops; i++)
        fz_check(!strcmp(got.stops[i], r->stop[i]), "stop %d changed on its way to the worker", i);
    if (got.grammar_len)
        check_grammar(got.grammar, got.grammar_len, "the wire request's grammar");
    dy_msg_request_free(&got);
    dy_buf_free(&b);
}

static void build_job(const char *body, size_t len, dy_chat_family family, const dy_api_limits *lim,
                      const dy_api_request *r)
{
    dy_gen_env env = {.tok = tokenizer(), .chat = family, .limits = lim, .model_id = r->model};
    dy_api_error e;
    dy_gen *g = dy_gen_new(&env, body, len, r->kind, 1, &e);
    if (!g) {
        check_error(&e);
        fz_check(e.status == 400, "a request that parsed was refused with %d: %s", e.status,
                 e.message);
        return;
    }
    const dy_job *job = dy_gen_job(g);
    for (int first = 0; first < job->n_choices; first += job->group)
        check_wire(job, first, r);
    dy_gen_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    dy_api_kind kind = data[0] & 1 ? DY_API_CHAT : DY_API_COMPLETIONS;
    dy_chat_family family = (dy_chat_family)((data[0] >> 1) % DY_CHAT_N_FAMILIES);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    dy_api_limits lim = serve_limits();
    dy_api_request r;
    dy_api_error e;
    if (dy_api_parse(body, len, kind, &lim, &r, &e) != 0) {
        check_error(&e);
        return 0;
    }
    check_request(&r, kind, &lim);
    if (kind == DY_API_CHAT)
        render_every_family(&r);
    build_job(body, len, family, &lim, &r);
    dy_api_request_free(&r);
    return 0;
}
