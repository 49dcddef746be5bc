/* chat_template.c — owns the native renderings of the chat template families that
 * chat_template.h lists, and their detection from a GGUF's Jinja template text.
 *
 * Each renderer reproduces what its family's real Jinja template produces for plain text
 * messages (the test vectors in tests/test_chat_template.c come from those templates), with
 * two deliberate differences: a leading BOS is never written (the tokenizer adds it), and
 * where a template would raise an exception (a system message in a template without one,
 * roles that do not alternate, a tool message) we render something sensible instead, because
 * an HTTP client cannot fix a template. Jinja's `trim` / Python's strip() are approximated by
 * stripping ASCII whitespace.
 *
 * Tools: the families whose templates define them (ChatML as Qwen 2.5/3 and Hermes write it,
 * Llama 3.1, Mistral v3/v7) render the tool list, the assistant's calls and the tool results
 * as those templates do; the others get the generic envelope, a rewrite of the messages into
 * plain ones (generic_envelope) that the family then renders as usual. JSON that a template
 * writes with `tojson` is written the way Python's json.dumps writes it (", " and ": "
 * separators, key order kept), which is jansson's non-compact layout. */
#include "serve/front/chat_template.h"
#include "util/buf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ---- appending to the output (util/buf.h remembers a failed allocation) ---- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Appends s[0..n) without leading and trailing whitespace. */
static void put_trimmed(dy_buf *b, const char *s, size_t n)
{
    while (n > 0 && is_space(*s))
        s++, n--;
    while (n > 0 && is_space(s[n - 1]))
        n--;
    dy_buf_append(b, s, n);
}

/* Appends s as a JSON string literal the way Jinja's `tojson` does in HF transformers
 * (json.dumps with ensure_ascii=False): quotes, backslashes and control bytes escaped. */
static void put_json_string(dy_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    dy_buf_append_str(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f" : NULL;
        if (esc) {
            dy_buf_append_str(b, esc);
        } else if (c < 0x20) {
            char u[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
            dy_buf_append_str(b, u);
        } else {
            dy_buf_append(b, s, 1);
        }
    }
    dy_buf_append_str(b, "\"");
}

/* ---- rendering context ---- */

typedef struct {
    dy_buf out;
    const dy_chat_msg *m;
    int n;
    bool gen;
    const char *bos, *eos;
    const dy_chat_tool *tools;
    int n_tools;
    bool tool_turns; /* tools, tool calls or tool_call_ids: the family's tool syntax applies */
} rctx;

/* ---- JSON as the templates' `tojson` writes it ---- */

/* A failure (memory, or JSON text that does not parse) fails the whole rendering. An indent
 * of -1 writes compact JSON. */
static void put_json_value(rctx *c, json_t *v, int indent)
{
    size_t layout = indent < 0 ? JSON_COMPACT : JSON_INDENT(indent);
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | layout | JSON_REAL_PRECISION(15)) : NULL;
    if (!s)
        c->out.oom = true;
    else
        dy_buf_append_str(&c->out, s);
    free(s);
}

static void put_json_text(rctx *c, const char *text, int indent)
{
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    put_json_value(c, v, indent);
    json_decref(v);
}

/* {"name": ..., "description": ..., "parameters": ...} of a tool (absent fields left out);
 * NULL if its parameters do not parse or memory is short. */
static json_t *function_json(const dy_chat_tool *t)
{
    json_t *f = json_object(), *params = NULL;
    if (!f || json_object_set_new(f, "name", json_string(t->name)))
        goto fail;
    if (t->description && json_object_set_new(f, "description", json_string(t->description)))
        goto fail;
    if (t->parameters) {
        if (!(params = json_loads(t->parameters, 0, NULL)) || json_object_set_new(f, "parameters", params))
            goto fail;
    }
    return f;
fail:
    json_decref(f);
    return NULL;
}

/* {"type": "function", "function": {...}}, the tool as the API received it. */
static void put_tool(rctx *c, const dy_chat_tool *t, int indent)
{
    json_t *o = json_object(), *f = function_json(t);
    if (o && f && !json_object_set_new(o, "type", json_string("function")) &&
        !json_object_set(o, "function", f))
        put_json_value(c, o, indent);
    else
        c->out.oom = true;
    json_decref(f);
    json_decref(o);
}

static const char *content_of(const dy_chat_msg *m)
{
    return m->content ? m->content : "";
}

/* Index of the first message the turn loop renders: templates that take a system prompt out
 * of the loop take it only from messages[0]. */
static int first_after_system(const rctx *c, const char **sys)
{
    *sys = NULL;
    if (c->n > 0 && c->m[0].role == DY_ROLE_SYSTEM) {
        *sys = content_of(&c->m[0]);
        return 1;
    }
    return 0;
}

/* ---- the generic envelope, for families whose template has no tools ---- */

/* Short, and the functions as compact JSON ({"name", "description", "parameters"}): small
 * models have small contexts. */
static const char GENERIC_TOOLS_HEAD[] = "Tools:\n";
static const char GENERIC_TOOLS_TAIL[] =
    "\nTo call one: <tool_call>{\"name\": <name>, \"arguments\": <object>}</tool_call>";

/* {"name": N, "<args_key>": {...} — a call as the templates write it, without its closing
 * brace (Mistral's adds the id before it). */
static void put_call_open(rctx *c, const dy_chat_call *k, const char *args_key)
{
    dy_buf_append_str(&c->out, "{\"name\": ");
    put_json_string(&c->out, k->name);
    dy_buf_append_str(&c->out, ", \"");
    dy_buf_append_str(&c->out, args_key);
    dy_buf_append_str(&c->out, "\": ");
    put_json_text(c, k->arguments, 0);
}

/* A call as the generic envelope (and toolcall.c's parser) writes it. */
static void put_generic_call(rctx *c, const dy_chat_call *k)
{
    dy_buf_append_str(&c->out, "<tool_call>");
    put_call_open(c, k, "arguments");
    dy_buf_append_str(&c->out, "}</tool_call>");
}

/* Writes through c->out into a fresh string (c->out is saved around it). */
typedef struct {
    dy_buf saved;
} redirect;

static void redirect_begin(rctx *c, redirect *r)
{
    r->saved = c->out;
    c->out = (dy_buf){0};
}

/* The text written since redirect_begin (malloc'd), or NULL if anything failed. */
static char *redirect_end(rctx *c, redirect *r)
{
    dy_buf got = c->out;
    c->out = r->saved;
    if (!dy_buf_cstr(&got)) {
        dy_buf_free(&got);
        c->out.oom = true;
        return NULL;
    }
    return (char *)got.data;
}

static char *generic_system(rctx *c, const char *sys)
{
    redirect r;
    redirect_begin(c, &r);
    if (sys) {
        dy_buf_append_str(&c->out, sys);
        dy_buf_append_str(&c->out, "\n\n");
    }
    dy_buf_append_str(&c->out, GENERIC_TOOLS_HEAD);
    for (int t = 0; t < c->n_tools; t++) {
        json_t *f = function_json(&c->tools[t]);
        if (t)
            dy_buf_append_str(&c->out, "\n");
        put_json_value(c, f, -1);
        json_decref(f);
    }
    dy_buf_append_str(&c->out, GENERIC_TOOLS_TAIL);
    return redirect_end(c, &r);
}

static char *generic_calls(rctx *c, const dy_chat_msg *m)
{
    redirect r;
    redirect_begin(c, &r);
    if (m->content && *m->content) {
        dy_buf_append_str(&c->out, m->content);
        dy_buf_append_str(&c->out, "\n");
    }
    for (int k = 0; k < m->n_calls; k++) {
        if (k)
            dy_buf_append_str(&c->out, "\n");
        put_generic_call(c, &m->calls[k]);
    }
    return redirect_end(c, &r);
}

/* The messages rewritten into plain ones: the tool list appended to the system message (one
 * is added in front when there is none), calls appended to their assistant message's text.
 * Tool results stay tool messages, which each family renders as before. The strings the
 * rewrite made are listed in owned[] (as many as messages + 1) for the caller to free.
 * NULL if memory is short. */
static dy_chat_msg *generic_envelope(rctx *c, int *n_out, char **owned, int *n_owned)
{
    bool add_sys = c->n_tools > 0 && !(c->n > 0 && c->m[0].role == DY_ROLE_SYSTEM);
    int n = c->n + (add_sys ? 1 : 0), j = 0;
    dy_chat_msg *out = calloc((size_t)(n ? n : 1), sizeof *out);
    *n_owned = 0;
    if (!out)
        return NULL;
    if (add_sys)
        out[j++] = (dy_chat_msg){.role = DY_ROLE_SYSTEM, .content = owned[(*n_owned)++] = generic_system(c, NULL)};
    for (int i = 0; i < c->n; i++, j++) {
        const dy_chat_msg *m = &c->m[i];
        out[j] = (dy_chat_msg){.role = m->role, .content = m->content};
        if (i == 0 && m->role == DY_ROLE_SYSTEM && c->n_tools > 0)
            out[j].content = owned[(*n_owned)++] = generic_system(c, content_of(m));
        else if (m->role == DY_ROLE_ASSISTANT && m->n_calls > 0)
            out[j].content = owned[(*n_owned)++] = generic_calls(c, m);
    }
    *n_out = n;
    return out;
}

/* ---- families ---- */

static void render_plain(rctx *c)
{
    static const char *const label[] = {"System", "User", "Assistant", "Tool"};
    for (int i = 0; i < c->n; i++) {
        dy_buf_append_str(&c->out, "### ");
        dy_buf_append_str(&c->out, label[c->m[i].role]);
        dy_buf_append_str(&c->out, ":\n");
        dy_buf_append_str(&c->out, content_of(&c->m[i]));
        dy_buf_append_str(&c->out, "\n\n");
    }
    if (c->gen)
        dy_buf_append_str(&c->out, "### Assistant:\n");
}

static void chatml_turn(rctx *c, const char *role, const char *content)
{
    dy_buf_append_str(&c->out, "<|im_start|>");
    dy_buf_append_str(&c->out, role);
    dy_buf_append_str(&c->out, "\n");
    dy_buf_append_str(&c->out, content);
    dy_buf_append_str(&c->out, "<|im_end|>\n");
}

/* Qwen 2.5 / Qwen 3 (and Hermes 3, which writes the same tags): the tool list in the system
 * turn, each call in <tool_call> tags after the assistant's text, consecutive tool results
 * in one user turn as <tool_response>s. Qwen's default system prompt is not inserted. */
static void chatml_tools_header(rctx *c, const char *sys)
{
    dy_buf_append_str(&c->out, "<|im_start|>system\n");
    if (sys) {
        dy_buf_append_str(&c->out, sys);
        dy_buf_append_str(&c->out, "\n\n");
    }
    dy_buf_append_str(&c->out, "# Tools\n\nYou may call one or more functions to assist with the user "
                               "query.\n\nYou are provided with function signatures within "
                               "<tools></tools> XML tags:\n<tools>");
    for (int t = 0; t < c->n_tools; t++) {
        dy_buf_append_str(&c->out, "\n");
        put_tool(c, &c->tools[t], 0);
    }
    dy_buf_append_str(&c->out, "\n</tools>\n\nFor each function call, return a json object with "
                               "function name and arguments within <tool_call></tool_call> XML "
                               "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                               "<args-json-object>}\n</tool_call><|im_end|>\n");
}

static void chatml_calls(rctx *c, const dy_chat_msg *m)
{
    dy_buf_append_str(&c->out, "<|im_start|>assistant");
    if (m->content && *m->content) {
        dy_buf_append_str(&c->out, "\n");
        dy_buf_append_str(&c->out, m->content);
    }
    for (int k = 0; k < m->n_calls; k++) {
        dy_buf_append_str(&c->out, "\n<tool_call>\n");
        put_call_open(c, &m->calls[k], "arguments");
        dy_buf_append_str(&c->out, "}\n</tool_call>");
    }
    dy_buf_append_str(&c->out, "<|im_end|>\n");
}

static void chatml_result(rctx *c, int i)
{
    if (i == 0 || c->m[i - 1].role != DY_ROLE_TOOL)
        dy_buf_append_str(&c->out, "<|im_start|>user");
    dy_buf_append_str(&c->out, "\n<tool_response>\n");
    dy_buf_append_str(&c->out, content_of(&c->m[i]));
    dy_buf_append_str(&c->out, "\n</tool_response>");
    if (i == c->n - 1 || c->m[i + 1].role != DY_ROLE_TOOL)
        dy_buf_append_str(&c->out, "<|im_end|>\n");
}

static void render_chatml_tools(rctx *c)
{
    int first = 0;
    if (c->n_tools > 0) {
        const char *sys;
        first = first_after_system(c, &sys);
        chatml_tools_header(c, sys);
    }
    for (int i = first; i < c->n; i++) {
        const dy_chat_msg *m = &c->m[i];
        if (m->role == DY_ROLE_ASSISTANT && m->n_calls > 0)
            chatml_calls(c, m);
        else if (m->role == DY_ROLE_TOOL)
            chatml_result(c, i);
        else
            chatml_turn(c, dy_chat_role_name(m->role), content_of(m));
    }
    if (c->gen)
        dy_buf_append_str(&c->out, "<|im_start|>assistant\n");
}

static void render_chatml(rctx *c)
{
    if (c->tool_turns) {
        render_chatml_tools(c);
        return;
    }
    for (int i = 0; i < c->n; i++)
        chatml_turn(c, dy_chat_role_name(c->m[i].role), content_of(&c->m[i]));
    if (c->gen)
        dy_buf_append_str(&c->out, "<|im_start|>assistant\n");
}

/* meta-llama/Llama-2-7b-chat-hf: the system prompt goes inside the first [INST] in <<SYS>>
 * markers, and strip() applies to that whole combined content. No generation prompt: the
 * open [/INST] already asks for the answer. */
static void render_llama2(rctx *c)
{
    const char *sys;
    int first = first_after_system(c, &sys);
    for (int i = first; i < c->n; i++) {
        dy_buf content = {0};
        if (i == first && sys) {
            dy_buf_append_str(&content, "<<SYS>>\n");
            dy_buf_append_str(&content, sys);
            dy_buf_append_str(&content, "\n<</SYS>>\n\n");
        }
        dy_buf_append_str(&content, content_of(&c->m[i]));
        const char *text = dy_buf_cstr(&content);
        c->out.oom |= content.oom;
        if (!text)
            text = "";
        if (c->m[i].role == DY_ROLE_ASSISTANT) {
            dy_buf_append_str(&c->out, " ");
            put_trimmed(&c->out, text, content.len);
            dy_buf_append_str(&c->out, " ");
            dy_buf_append_str(&c->out, c->eos);
        } else {
            if (c->out.len > 0) /* the template's first bos_token is the tokenizer's BOS */
                dy_buf_append_str(&c->out, c->bos);
            dy_buf_append_str(&c->out, "[INST] ");
            put_trimmed(&c->out, text, content.len);
            dy_buf_append_str(&c->out, " [/INST]");
        }
        dy_buf_free(&content);
    }
}

static void llama3_turn(rctx *c, const char *role, const char *content)
{
    dy_buf_append_str(&c->out, "<|start_header_id|>");
    dy_buf_append_str(&c->out, role);
    dy_buf_append_str(&c->out, "<|end_header_id|>\n\n");
    put_trimmed(&c->out, content, strlen(content));
    dy_buf_append_str(&c->out, "<|eot_id|>");
}

/* meta-llama/Meta-Llama-3-8B-Instruct: every role by name, content trimmed. */
static void render_llama3(rctx *c)
{
    for (int i = 0; i < c->n; i++)
        llama3_turn(c, dy_chat_role_name(c->m[i].role), content_of(&c->m[i]));
    if (c->gen)
        dy_buf_append_str(&c->out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 3.1's custom tools (tools_in_user_message, the template's default): the first turn
 * after the system block becomes a user turn that lists the functions (tojson, indent 4)
 * before the user's text. Where the template raises (no such turn) the list stands alone. */
static int llama31_tools_turn(rctx *c, int first)
{
    const char *text = first < c->n ? content_of(&c->m[first]) : "";
    dy_buf_append_str(&c->out, "<|start_header_id|>user<|end_header_id|>\n\n"
                               "Given the following functions, please respond with a JSON for a "
                               "function call with its proper arguments that best answers the given "
                               "prompt.\n\nRespond in the format {\"name\": function name, "
                               "\"parameters\": dictionary of argument name and its value}.Do not "
                               "use variables.\n\n");
    for (int t = 0; t < c->n_tools; t++) {
        put_tool(c, &c->tools[t], 4);
        dy_buf_append_str(&c->out, "\n\n");
    }
    put_trimmed(&c->out, text, strlen(text));
    dy_buf_append_str(&c->out, "<|eot_id|>");
    return first < c->n ? first + 1 : first;
}

/* An assistant turn of calls, each {"name": ..., "parameters": ...}. The template takes only
 * one call (it raises otherwise); several are written one per line. */
static void llama31_calls(rctx *c, const dy_chat_msg *m)
{
    dy_buf_append_str(&c->out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    for (int k = 0; k < m->n_calls; k++) {
        if (k)
            dy_buf_append_str(&c->out, "\n");
        put_call_open(c, &m->calls[k], "parameters");
        dy_buf_append_str(&c->out, "}");
    }
    dy_buf_append_str(&c->out, "<|eot_id|>");
}

/* meta-llama/Llama-3.1-8B-Instruct (and 3.2, 3.3): a system block is always written, with
 * the template's fixed knowledge cutoff and its default date (the template reads today's
 * date only when the renderer provides strftime_now; we are pure, so we use its fallback).
 * Tool results are "ipython" turns holding the content as a JSON string (Jinja's
 * `is iterable` is true for a string, so the template applies tojson). */
static void render_llama31(rctx *c)
{
    const char *sys;
    int first = first_after_system(c, &sys);
    dy_buf_append_str(&c->out, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (c->n_tools > 0)
        dy_buf_append_str(&c->out, "Environment: ipython\n");
    dy_buf_append_str(&c->out, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    put_trimmed(&c->out, sys ? sys : "", sys ? strlen(sys) : 0);
    dy_buf_append_str(&c->out, "<|eot_id|>");
    if (c->n_tools > 0)
        first = llama31_tools_turn(c, first);
    for (int i = first; i < c->n; i++) {
        if (c->m[i].role == DY_ROLE_TOOL) {
            dy_buf_append_str(&c->out, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            put_json_string(&c->out, content_of(&c->m[i]));
            dy_buf_append_str(&c->out, "<|eot_id|>");
        } else if (c->m[i].role == DY_ROLE_ASSISTANT && c->m[i].n_calls > 0) {
            llama31_calls(c, &c->m[i]);
        } else {
            llama3_turn(c, dy_chat_role_name(c->m[i].role), content_of(&c->m[i]));
        }
    }
    if (c->gen)
        dy_buf_append_str(&c->out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* The Mistral templates differ only in spacing, in trimming the assistant's text, and in
 * where the system prompt goes: merged into the first user turn (v1), into the last user
 * turn (v3), or as its own [SYSTEM_PROMPT] block (v7). The legacy v0.1/v0.2 template has no
 * system prompt; we merge it into the first user turn like v1. */
typedef enum { SYS_FIRST_USER, SYS_LAST_USER, SYS_BLOCK } sys_mode;

typedef struct {
    const char *inst_open, *inst_close, *asst_prefix, *sys_open;
    bool trim_asst;
    sys_mode sys;
    const char *tool_sep; /* after [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]: " ", or ""
                           * for the tekken tokenizers */
} mistral_style;

static const mistral_style *mistral_style_of(dy_chat_family f)
{
    static const mistral_style legacy = {"[INST] ", " [/INST]", "", NULL, false, SYS_FIRST_USER, " "};
    static const mistral_style v1 = {" [INST] ", " [/INST]", " ", NULL, false, SYS_FIRST_USER, " "};
    static const mistral_style v3 = {"[INST] ", "[/INST]", " ", NULL, true, SYS_LAST_USER, " "};
    static const mistral_style v3t = {"[INST]", "[/INST]", "", NULL, false, SYS_LAST_USER, ""};
    static const mistral_style v7 = {"[INST] ", "[/INST]", " ", "[SYSTEM_PROMPT] ", false, SYS_BLOCK, " "};
    static const mistral_style v7t = {"[INST]", "[/INST]", "", "[SYSTEM_PROMPT]", false, SYS_BLOCK, ""};
    switch (f) {
    case DY_CHAT_MISTRAL_LEGACY: return &legacy;
    case DY_CHAT_MISTRAL_V1: return &v1;
    case DY_CHAT_MISTRAL_V3: return &v3;
    case DY_CHAT_MISTRAL_V3_TEKKEN: return &v3t;
    case DY_CHAT_MISTRAL_V7: return &v7;
    default: return &v7t;
    }
}

/* The loop index of the user turn that receives the merged system prompt, or -1. v1 merges
 * only when the first turn is a user turn (`loop.first`), v3 only when the last one is
 * (`loop.last`), as their templates do. */
static int mistral_sys_target(const rctx *c, const mistral_style *st, int first)
{
    if (st->sys == SYS_BLOCK || first >= c->n)
        return -1;
    int i = st->sys == SYS_FIRST_USER ? first : c->n - 1;
    return c->m[i].role == DY_ROLE_ASSISTANT ? -1 : i;
}

/* The last 9 characters of a call id: Mistral's ids are 9 characters long and its templates
 * refuse others (the v7 one takes the last 9); longer ones, like OpenAI's, are cut. */
static void put_mistral_id(rctx *c, const char *id)
{
    size_t n = id ? strlen(id) : 0;
    dy_buf_append_str(&c->out, "\"");
    dy_buf_append_str(&c->out, id ? id + (n > 9 ? n - 9 : 0) : "");
    dy_buf_append_str(&c->out, "\"");
}

/* [AVAILABLE_TOOLS] [{"type": "function", "function": {...}}, ...][/AVAILABLE_TOOLS]: the
 * template writes string fields raw between quotes and the others with tojson. */
static void mistral_tools(rctx *c, const mistral_style *st)
{
    dy_buf_append_str(&c->out, "[AVAILABLE_TOOLS]");
    dy_buf_append_str(&c->out, st->tool_sep);
    dy_buf_append_str(&c->out, "[");
    for (int t = 0; t < c->n_tools; t++) {
        const dy_chat_tool *tool = &c->tools[t];
        dy_buf_append_str(&c->out, t ? ", " : "");
        dy_buf_append_str(&c->out, "{\"type\": \"function\", \"function\": {\"name\": \"");
        dy_buf_append_str(&c->out, tool->name);
        dy_buf_append_str(&c->out, "\"");
        if (tool->description) {
            dy_buf_append_str(&c->out, ", \"description\": \"");
            dy_buf_append_str(&c->out, tool->description);
            dy_buf_append_str(&c->out, "\"");
        }
        if (tool->parameters) {
            dy_buf_append_str(&c->out, ", \"parameters\": ");
            put_json_text(c, tool->parameters, 0);
        }
        dy_buf_append_str(&c->out, "}}");
    }
    dy_buf_append_str(&c->out, "][/AVAILABLE_TOOLS]");
}

/* [TOOL_CALLS] [{"name": ..., "arguments": ..., "id": ...}, ...] and EOS. */
static void mistral_calls(rctx *c, const mistral_style *st, const dy_chat_msg *m)
{
    dy_buf_append_str(&c->out, "[TOOL_CALLS]");
    dy_buf_append_str(&c->out, st->tool_sep);
    dy_buf_append_str(&c->out, "[");
    for (int k = 0; k < m->n_calls; k++) {
        dy_buf_append_str(&c->out, k ? ", " : "");
        put_call_open(c, &m->calls[k], "arguments");
        dy_buf_append_str(&c->out, ", \"id\": ");
        put_mistral_id(c, m->calls[k].id);
        dy_buf_append_str(&c->out, "}");
    }
    dy_buf_append_str(&c->out, "]");
    dy_buf_append_str(&c->out, c->eos);
}

/* [TOOL_RESULTS] {"content": <the text, raw>, "call_id": ...}[/TOOL_RESULTS] */
static void mistral_result(rctx *c, const mistral_style *st, const dy_chat_msg *m)
{
    dy_buf_append_str(&c->out, "[TOOL_RESULTS]");
    dy_buf_append_str(&c->out, st->tool_sep);
    dy_buf_append_str(&c->out, "{\"content\": ");
    dy_buf_append_str(&c->out, content_of(m));
    dy_buf_append_str(&c->out, ", \"call_id\": ");
    put_mistral_id(c, m->tool_call_id);
    dy_buf_append_str(&c->out, "}[/TOOL_RESULTS]");
}

static int last_user(const rctx *c)
{
    for (int i = c->n - 1; i >= 0; i--)
        if (c->m[i].role == DY_ROLE_USER)
            return i;
    return -1;
}

static void render_mistral(rctx *c, dy_chat_family f)
{
    const mistral_style *st = mistral_style_of(f);
    const char *sys = NULL;
    int first = st->sys == SYS_BLOCK ? 0 : first_after_system(c, &sys);
    int target = mistral_sys_target(c, st, first);
    int tools_at = c->n_tools > 0 ? last_user(c) : -1;
    for (int i = first; i < c->n; i++) {
        const char *text = content_of(&c->m[i]);
        if (i == tools_at)
            mistral_tools(c, st);
        if (c->tool_turns && c->m[i].role == DY_ROLE_ASSISTANT && c->m[i].n_calls > 0) {
            mistral_calls(c, st, &c->m[i]);
        } else if (c->tool_turns && c->m[i].role == DY_ROLE_TOOL) {
            mistral_result(c, st, &c->m[i]);
        } else if (c->m[i].role == DY_ROLE_SYSTEM && st->sys == SYS_BLOCK) {
            dy_buf_append_str(&c->out, st->sys_open);
            dy_buf_append_str(&c->out, text);
            dy_buf_append_str(&c->out, "[/SYSTEM_PROMPT]");
        } else if (c->m[i].role == DY_ROLE_ASSISTANT) {
            dy_buf_append_str(&c->out, st->asst_prefix);
            if (st->trim_asst)
                put_trimmed(&c->out, text, strlen(text));
            else
                dy_buf_append_str(&c->out, text);
            dy_buf_append_str(&c->out, c->eos);
        } else {
            dy_buf_append_str(&c->out, st->inst_open);
            if (i == target && sys) {
                dy_buf_append_str(&c->out, sys);
                dy_buf_append_str(&c->out, "\n\n");
            }
            dy_buf_append_str(&c->out, text);
            dy_buf_append_str(&c->out, st->inst_close);
        }
    }
}

/* microsoft/Phi-3-mini-4k-instruct (June 2024 update), Phi-3.5-mini-instruct. Without a
 * generation prompt the template ends the text with EOS. */
static void render_phi3(rctx *c)
{
    for (int i = 0; i < c->n; i++) {
        dy_chat_role r = c->m[i].role == DY_ROLE_TOOL ? DY_ROLE_USER : c->m[i].role;
        if (r == DY_ROLE_SYSTEM && !*content_of(&c->m[i]))
            continue; /* Phi-3.5 writes a system turn only when it has content */
        dy_buf_append_str(&c->out, "<|");
        dy_buf_append_str(&c->out, dy_chat_role_name(r));
        dy_buf_append_str(&c->out, "|>\n");
        dy_buf_append_str(&c->out, content_of(&c->m[i]));
        dy_buf_append_str(&c->out, "<|end|>\n");
    }
    dy_buf_append_str(&c->out, c->gen ? "<|assistant|>\n" : c->eos);
}

/* google/gemma-2b-it, gemma-2, gemma-3: the assistant is "model"; content is trimmed. Gemma 1
 * and 2 reject a system message; Gemma 3 prefixes it (+ "\n\n") to the first turn, which is
 * what we do for all of them. */
static void render_gemma(rctx *c)
{
    const char *sys;
    int first = first_after_system(c, &sys);
    for (int i = first; i < c->n; i++) {
        const char *text = content_of(&c->m[i]);
        dy_buf_append_str(&c->out, "<start_of_turn>");
        dy_buf_append_str(&c->out, c->m[i].role == DY_ROLE_ASSISTANT ? "model" : "user");
        dy_buf_append_str(&c->out, "\n");
        if (i == first && sys) {
            dy_buf_append_str(&c->out, sys);
            dy_buf_append_str(&c->out, "\n\n");
        }
        put_trimmed(&c->out, text, strlen(text));
        dy_buf_append_str(&c->out, "<end_of_turn>\n");
    }
    if (c->gen)
        dy_buf_append_str(&c->out, "<start_of_turn>model\n");
}

/* HuggingFaceH4/zephyr-7b-beta (rendered with trim_blocks, as transformers does). */
static void render_zephyr(rctx *c)
{
    for (int i = 0; i < c->n; i++) {
        dy_chat_role r = c->m[i].role == DY_ROLE_TOOL ? DY_ROLE_USER : c->m[i].role;
        dy_buf_append_str(&c->out, "<|");
        dy_buf_append_str(&c->out, dy_chat_role_name(r));
        dy_buf_append_str(&c->out, "|>\n");
        dy_buf_append_str(&c->out, content_of(&c->m[i]));
        dy_buf_append_str(&c->out, c->eos);
        dy_buf_append_str(&c->out, "\n");
    }
    if (c->gen && c->n > 0) /* the template writes it inside the loop, on the last message */
        dy_buf_append_str(&c->out, "<|assistant|>\n");
}

static void render_family(rctx *c, dy_chat_family f)
{
    switch (f) {
    case DY_CHAT_PLAIN: render_plain(c); break;
    case DY_CHAT_CHATML: render_chatml(c); break;
    case DY_CHAT_LLAMA2: render_llama2(c); break;
    case DY_CHAT_LLAMA3: render_llama3(c); break;
    case DY_CHAT_LLAMA31: render_llama31(c); break;
    case DY_CHAT_PHI3: render_phi3(c); break;
    case DY_CHAT_GEMMA: render_gemma(c); break;
    case DY_CHAT_ZEPHYR: render_zephyr(c); break;
    default: render_mistral(c, f); break;
    }
}

bool dy_chat_family_has_tools(dy_chat_family f)
{
    return f == DY_CHAT_CHATML || f == DY_CHAT_LLAMA31 || f == DY_CHAT_MISTRAL_V3 ||
           f == DY_CHAT_MISTRAL_V3_TEKKEN || f == DY_CHAT_MISTRAL_V7 || f == DY_CHAT_MISTRAL_V7_TEKKEN;
}

static bool uses_tools(const dy_chat_msg *m, int n, int n_tools)
{
    for (int i = 0; i < n; i++)
        if (m[i].n_calls > 0 || m[i].tool_call_id)
            return true;
    return n_tools > 0;
}

/* A family without tools renders the generic envelope's plain messages. */
static void render_generic(rctx *c, dy_chat_family f)
{
    char **owned = calloc((size_t)c->n + 1, sizeof *owned);
    int n = 0, n_owned = 0;
    dy_chat_msg *plain = owned ? generic_envelope(c, &n, owned, &n_owned) : NULL;
    bool ok = plain != NULL;
    for (int i = 0; ok && i < n_owned; i++)
        ok = owned[i] != NULL;
    if (ok) {
        rctx p = *c;
        p.m = plain;
        p.n = n;
        p.n_tools = 0;
        p.tool_turns = false;
        render_family(&p, f);
        c->out = p.out;
    } else {
        c->out.oom = true;
    }
    for (int i = 0; owned && i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(plain);
}

char *dy_chat_render_tools(dy_chat_family f, const dy_chat_msg *msgs, int n,
                           const dy_chat_tool *tools, int n_tools, bool add_generation_prompt,
                           const char *bos, const char *eos)
{
    if ((int)f < 0 || f >= DY_CHAT_N_FAMILIES || n < 0 || (n > 0 && !msgs) || n_tools < 0 ||
        (n_tools > 0 && !tools))
        return NULL;
    for (int i = 0; i < n; i++)
        if ((int)msgs[i].role < DY_ROLE_SYSTEM || msgs[i].role > DY_ROLE_TOOL)
            return NULL;
    rctx c = {.m = msgs, .n = n, .gen = add_generation_prompt,
              .bos = bos ? bos : "<s>", .eos = eos ? eos : "</s>",
              .tools = tools, .n_tools = n_tools, .tool_turns = uses_tools(msgs, n, n_tools)};
    if (c.tool_turns && !dy_chat_family_has_tools(f))
        render_generic(&c, f);
    else
        render_family(&c, f);
    if (!dy_buf_cstr(&c.out)) { /* even with nothing written: an empty string, not NULL */
        dy_buf_free(&c.out);
        return NULL;
    }
    return (char *)c.out.data;
}

char *dy_chat_render(dy_chat_family f, const dy_chat_msg *msgs, int n, bool add_generation_prompt,
                     const char *bos, const char *eos)
{
    return dy_chat_render_tools(f, msgs, n, NULL, 0, add_generation_prompt, bos, eos);
}

/* ---- detection ---- */

static bool has(const char *s, const char *needle)
{
    return strstr(s, needle) != NULL;
}

/* The [INST] families. Llama 2 is the one with <<SYS>>; among Mistral's, the official v1
 * template has a space before [INST], v3-tekken writes "[INST]" as a double-quoted literal,
 * v3 writes "[INST] " (and lists [AVAILABLE_TOOLS]); what is left is the legacy template. */
static dy_chat_family detect_inst(const char *t)
{
    if (has(t, "[SYSTEM_PROMPT]"))
        return has(t, "[SYSTEM_PROMPT] ") ? DY_CHAT_MISTRAL_V7 : DY_CHAT_MISTRAL_V7_TEKKEN;
    if (has(t, "<<SYS>>"))
        return DY_CHAT_LLAMA2;
    if (has(t, " [INST]"))
        return DY_CHAT_MISTRAL_V1;
    if (has(t, "\"[INST]\""))
        return DY_CHAT_MISTRAL_V3_TEKKEN;
    if (has(t, "\"[INST] \"") || has(t, "[AVAILABLE_TOOLS]"))
        return DY_CHAT_MISTRAL_V3;
    return DY_CHAT_MISTRAL_LEGACY;
}

dy_chat_family dy_chat_detect(const char *t)
{
    if (!t || !*t)
        return DY_CHAT_PLAIN;
    if (has(t, "<|im_start|>"))
        /* Phi-4 puts <|im_sep|> after the role: not ChatML, and not a family we render. */
        return has(t, "<|im_sep|>") ? DY_CHAT_PLAIN : DY_CHAT_CHATML;
    if (has(t, "[INST]"))
        return detect_inst(t);
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
        return has(t, "Cutting Knowledge Date") ? DY_CHAT_LLAMA31 : DY_CHAT_LLAMA3;
    if (has(t, "<start_of_turn>"))
        return DY_CHAT_GEMMA;
    if (has(t, "<|user|>") && has(t, "<|end|>"))
        return DY_CHAT_PHI3;
    /* Zephyr ends every message with eos_token; GLM-Edge and others with <|user|> do not. */
    if (has(t, "<|user|>") && has(t, "eos_token"))
        return DY_CHAT_ZEPHYR;
    return DY_CHAT_PLAIN;
}

static const char *const family_names[DY_CHAT_N_FAMILIES] = {
    [DY_CHAT_PLAIN] = "plain",
    [DY_CHAT_CHATML] = "chatml",
    [DY_CHAT_LLAMA2] = "llama2",
    [DY_CHAT_LLAMA3] = "llama3",
    [DY_CHAT_LLAMA31] = "llama3.1",
    [DY_CHAT_MISTRAL_LEGACY] = "mistral-legacy",
    [DY_CHAT_MISTRAL_V1] = "mistral-v1",
    [DY_CHAT_MISTRAL_V3] = "mistral-v3",
    [DY_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [DY_CHAT_MISTRAL_V7] = "mistral-v7",
    [DY_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [DY_CHAT_PHI3] = "phi3",
    [DY_CHAT_GEMMA] = "gemma",
    [DY_CHAT_ZEPHYR] = "zephyr",
};

const char *dy_chat_family_name(dy_chat_family f)
{
    return (int)f >= 0 && f < DY_CHAT_N_FAMILIES ? family_names[f] : "unknown";
}

bool dy_chat_family_from_name(const char *name, dy_chat_family *out)
{
    for (int f = 0; name && f < DY_CHAT_N_FAMILIES; f++) {
        if (strcmp(name, family_names[f]) == 0) {
            *out = (dy_chat_family)f;
            return true;
        }
    }
    return false;
}

const char *dy_chat_role_name(dy_chat_role r)
{
    static const char *const names[] = {"system", "user", "assistant", "tool"};
    return (int)r >= 0 && r <= DY_ROLE_TOOL ? names[r] : "user";
}
