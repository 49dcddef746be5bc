/* chat_template.c — owns the native renderings of the chat template families that
 * chat_template.h lists, and their detection from a GGUF's Jinja template text.
 *
 * Each renderer reproduces what its family's real Jinja template produces for plain text
 * messages (the test vectors in tests/test_chat_template.c come from those templates), with
 * two deliberate differences: a leading BOS is never written (the tokenizer adds it), and
 * where a template would raise an exception (a system message in a template without one,
 * roles that do not alternate, a tool message) we render something sensible instead, because
 * an HTTP client cannot fix a template. Jinja's `trim` / Python's strip() are approximated by
 * stripping ASCII whitespace. */
#include "serve/front/chat_template.h"
#include "util/buf.h"

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
} rctx;

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

static void render_chatml(rctx *c)
{
    for (int i = 0; i < c->n; i++) {
        dy_buf_append_str(&c->out, "<|im_start|>");
        dy_buf_append_str(&c->out, dy_chat_role_name(c->m[i].role));
        dy_buf_append_str(&c->out, "\n");
        dy_buf_append_str(&c->out, content_of(&c->m[i]));
        dy_buf_append_str(&c->out, "<|im_end|>\n");
    }
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

/* meta-llama/Llama-3.1-8B-Instruct (and 3.2, 3.3): a system block is always written, with
 * the template's fixed knowledge cutoff and its default date (the template reads today's
 * date only when the renderer provides strftime_now; we are pure, so we use its fallback).
 * Tool results are "ipython" turns holding the content as a JSON string (Jinja's
 * `is iterable` is true for a string, so the template applies tojson). */
static void render_llama31(rctx *c)
{
    const char *sys;
    int first = first_after_system(c, &sys);
    dy_buf_append_str(&c->out, "<|start_header_id|>system<|end_header_id|>\n\n"
                               "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    put_trimmed(&c->out, sys ? sys : "", sys ? strlen(sys) : 0);
    dy_buf_append_str(&c->out, "<|eot_id|>");
    for (int i = first; i < c->n; i++) {
        if (c->m[i].role == DY_ROLE_TOOL) {
            dy_buf_append_str(&c->out, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            put_json_string(&c->out, content_of(&c->m[i]));
            dy_buf_append_str(&c->out, "<|eot_id|>");
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
} mistral_style;

static const mistral_style *mistral_style_of(dy_chat_family f)
{
    static const mistral_style legacy = {"[INST] ", " [/INST]", "", NULL, false, SYS_FIRST_USER};
    static const mistral_style v1 = {" [INST] ", " [/INST]", " ", NULL, false, SYS_FIRST_USER};
    static const mistral_style v3 = {"[INST] ", "[/INST]", " ", NULL, true, SYS_LAST_USER};
    static const mistral_style v3t = {"[INST]", "[/INST]", "", NULL, false, SYS_LAST_USER};
    static const mistral_style v7 = {"[INST] ", "[/INST]", " ", "[SYSTEM_PROMPT] ", false, SYS_BLOCK};
    static const mistral_style v7t = {"[INST]", "[/INST]", "", "[SYSTEM_PROMPT]", false, SYS_BLOCK};
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

static void render_mistral(rctx *c, dy_chat_family f)
{
    const mistral_style *st = mistral_style_of(f);
    const char *sys = NULL;
    int first = st->sys == SYS_BLOCK ? 0 : first_after_system(c, &sys);
    int target = mistral_sys_target(c, st, first);
    for (int i = first; i < c->n; i++) {
        const char *text = content_of(&c->m[i]);
        if (c->m[i].role == DY_ROLE_SYSTEM && st->sys == SYS_BLOCK) {
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

char *dy_chat_render(dy_chat_family f, const dy_chat_msg *msgs, int n, bool add_generation_prompt,
                     const char *bos, const char *eos)
{
    if ((int)f < 0 || f >= DY_CHAT_N_FAMILIES || n < 0 || (n > 0 && !msgs))
        return NULL;
    for (int i = 0; i < n; i++)
        if ((int)msgs[i].role < DY_ROLE_SYSTEM || msgs[i].role > DY_ROLE_TOOL)
            return NULL;
    rctx c = {.m = msgs, .n = n, .gen = add_generation_prompt,
              .bos = bos ? bos : "<s>", .eos = eos ? eos : "</s>"};
    switch (f) {
    case DY_CHAT_PLAIN: render_plain(&c); break;
    case DY_CHAT_CHATML: render_chatml(&c); break;
    case DY_CHAT_LLAMA2: render_llama2(&c); break;
    case DY_CHAT_LLAMA3: render_llama3(&c); break;
    case DY_CHAT_LLAMA31: render_llama31(&c); break;
    case DY_CHAT_PHI3: render_phi3(&c); break;
    case DY_CHAT_GEMMA: render_gemma(&c); break;
    case DY_CHAT_ZEPHYR: render_zephyr(&c); break;
    default: render_mistral(&c, f); break;
    }
    if (!dy_buf_cstr(&c.out)) { /* even with nothing written: an empty string, not NULL */
        dy_buf_free(&c.out);
        return NULL;
    }
    return (char *)c.out.data;
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
