/* chat_template.h — turning chat `messages` into the prompt text a model was trained on.
 *
 * A GGUF carries its chat format as a Jinja template (`tokenizer.chat_template`). dyad does not
 * run Jinja: it recognises the common template families by distinctive substrings of the
 * template text and renders them natively. An unknown or missing template gets a documented
 * plain format (see docs/api.md). Pure: no I/O, no global state.
 *
 * BOS convention: the rendered text NEVER begins with the BOS token. The caller tokenizes it
 * with add_bos = dy_tokenizer_add_bos(t) (the model's own `add_bos_token` flag) and
 * parse_special = true, so BOS appears exactly once at the start when the model wants it, and
 * the special-token texts inside the prompt (<|eot_id|>, </s>, [INST], ...) become their ids.
 * BOS/EOS texts that a template places later in the conversation (Llama 2 puts `<s>` before
 * every user turn after the first) are rendered as text. This matches llama.cpp. */
#ifndef DYAD_CHAT_TEMPLATE_H
#define DYAD_CHAT_TEMPLATE_H

#include <stdbool.h>

typedef enum {
    DY_CHAT_PLAIN = 0,          /* fallback: "### User:\n...\n\n### Assistant:\n" */
    DY_CHAT_CHATML,             /* <|im_start|>role\n...<|im_end|>\n (Qwen, OpenHermes, ...) */
    DY_CHAT_LLAMA2,             /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
    DY_CHAT_LLAMA3,             /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    DY_CHAT_LLAMA31,            /* Llama 3.1+: as 3, plus the fixed "Cutting Knowledge" system block */
    DY_CHAT_MISTRAL_LEGACY,     /* Mistral 7B Instruct v0.1/v0.2 as first published */
    DY_CHAT_MISTRAL_V1,         /* Mistral's official "v1" template (" [INST] ... [/INST]") */
    DY_CHAT_MISTRAL_V3,         /* "v3" (v0.3, Large 2407): "[INST] ...[/INST]", system last */
    DY_CHAT_MISTRAL_V3_TEKKEN,  /* "v3-tekken" (Nemo): "[INST]...[/INST]" */
    DY_CHAT_MISTRAL_V7,         /* "v7" (Large 2411): "[SYSTEM_PROMPT] ...[/SYSTEM_PROMPT]" */
    DY_CHAT_MISTRAL_V7_TEKKEN,  /* "v7-tekken" (Small 3.x): "[SYSTEM_PROMPT]...[/SYSTEM_PROMPT]" */
    DY_CHAT_PHI3,               /* <|user|>\n...<|end|>\n */
    DY_CHAT_GEMMA,              /* <start_of_turn>user\n...<end_of_turn>\n, assistant is "model" */
    DY_CHAT_ZEPHYR,             /* <|user|>\n...</s>\n */
    DY_CHAT_N_FAMILIES
} dy_chat_family;

typedef enum { DY_ROLE_SYSTEM = 0, DY_ROLE_USER, DY_ROLE_ASSISTANT, DY_ROLE_TOOL } dy_chat_role;

/* A tool call an assistant message carries: `arguments` is the JSON text of an object. */
typedef struct {
    char *id;
    char *name;
    char *arguments;
} dy_chat_call;

/* One message. `content` is NUL-terminated UTF-8; whoever built the array owns it (and every
 * string below). An assistant message may carry tool calls; a tool message answers the call
 * `tool_call_id` (NULL when the caller has none). */
typedef struct {
    dy_chat_role role;
    char *content;
    dy_chat_call *calls;
    int n_calls;
    char *tool_call_id;
} dy_chat_msg;

/* A function the model may call: `parameters` is the JSON text of its JSON Schema (an object),
 * `description` NULL when there is none. */
typedef struct {
    char *name;
    char *description;
    char *parameters;
} dy_chat_tool;

/* The family of a template text; NULL, empty or unrecognised gives DY_CHAT_PLAIN. */
dy_chat_family dy_chat_detect(const char *tmpl);

/* Short stable names ("chatml", "llama3", "mistral-v3", ..., "plain") for logs and for a
 * command-line override; _from_name returns false for an unknown name. */
const char *dy_chat_family_name(dy_chat_family f);
bool dy_chat_family_from_name(const char *name, dy_chat_family *out);

/* "system", "user", "assistant", "tool". */
const char *dy_chat_role_name(dy_chat_role r);

/* Renders `n` messages in family `f`, ending with the assistant's turn header when
 * add_generation_prompt. `bos`/`eos` are the model's BOS/EOS token texts (NULL: "<s>" and
 * "</s>"); a leading BOS is never emitted (see the top of this file). Roles a family has no
 * turn for (tool; a system message that is not first where only a first one is supported)
 * are rendered as user turns. Returns a malloc'd string, or NULL if out of memory or f is
 * not a family. */
char *dy_chat_render(dy_chat_family f, const dy_chat_msg *msgs, int n, bool add_generation_prompt,
                     const char *bos, const char *eos);

/* The same with the functions the model may call (n_tools may be 0), rendered where the
 * family's template puts them: Llama 3.1 in the first user turn, ChatML (Qwen/Hermes) in the
 * system turn between <tools> tags, Mistral v3/v7 as [AVAILABLE_TOOLS] before the last user
 * turn. Assistant tool calls and tool results are written in the family's syntax; a family
 * whose template has no tools gets the generic envelope (the tool list in the system message,
 * calls as <tool_call>{"name": ..., "arguments": ...}</tool_call>; docs/structured-outputs.md).
 * A conversation with no tools, no tool calls and no tool_call_id renders exactly as
 * dy_chat_render. NULL if out of memory, f is not a family, or a call's or a tool's JSON text
 * does not parse. */
char *dy_chat_render_tools(dy_chat_family f, const dy_chat_msg *msgs, int n,
                           const dy_chat_tool *tools, int n_tools, bool add_generation_prompt,
                           const char *bos, const char *eos);

/* Whether the family's template defines tool calls (else the generic envelope is used). */
bool dy_chat_family_has_tools(dy_chat_family f);

#endif
