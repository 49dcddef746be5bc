/* test_chat_template.c — chat template detection from real template texts, and renderings
 * checked against known outputs.
 *
 * The conversation and most expected strings come from llama.cpp's
 * tests/test-chat-template.cpp (github.com/ggml-org/llama.cpp), which renders each model's
 * real Jinja template: where that file has an `expected_output_jinja` (the real template's
 * output) we use it, otherwise its `expected_output`. Strings marked "by hand" were derived
 * from the model's published template (quoted in the detection tests below). A leading BOS
 * is never part of our rendering (see chat_template.h), so it is absent from every vector. */
#include "testutil.h"
#include "serve/front/chat_template.h"

#include <stdlib.h>
#include <string.h>

/* The conversations below give a message's role and content only; the tool fields after them
 * stay zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static dy_chat_msg conv[] = {
    {DY_ROLE_SYSTEM, "You are a helpful assistant"},
    {DY_ROLE_USER, "Hello"},
    {DY_ROLE_ASSISTANT, "Hi there"},
    {DY_ROLE_USER, "Who are you"},
    {DY_ROLE_ASSISTANT, "   I am an assistant   "},
    {DY_ROLE_USER, "Another question"},
};
#define N_CONV 6

static void expect_render_tools(dy_chat_family f, const dy_chat_msg *m, int n,
                                const dy_chat_tool *tools, int n_tools, bool gen, const char *want)
{
    char *got = dy_chat_render_tools(f, m, n, tools, n_tools, gen, "<s>", "</s>");
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        print_error("family %s\n got: [%s]\nwant: [%s]\n", dy_chat_family_name(f), got, want);
    assert_string_equal(got, want);
    free(got);
}

static void expect_render(dy_chat_family f, const dy_chat_msg *m, int n, bool gen, const char *want)
{
    expect_render_tools(f, m, n, NULL, 0, gen, want);
}

/* ---- renderings ---- */

static void test_chatml(void **st)
{
    (void)st;
    /* teknium/OpenHermes-2.5-Mistral-7B */
    expect_render(DY_CHAT_CHATML, conv, N_CONV, true,
                  "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
                  "<|im_start|>user\nHello<|im_end|>\n"
                  "<|im_start|>assistant\nHi there<|im_end|>\n"
                  "<|im_start|>user\nWho are you<|im_end|>\n"
                  "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
                  "<|im_start|>user\nAnother question<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* without the generation prompt the text ends after the last message */
    expect_render(DY_CHAT_CHATML, conv + 1, 1, false, "<|im_start|>user\nHello<|im_end|>\n");
}

static void test_llama2(void **st)
{
    (void)st;
    /* By hand from meta-llama/Llama-2-7b-chat-hf: <s> before every later [INST], assistant
     * text stripped and wrapped in spaces. */
    expect_render(DY_CHAT_LLAMA2, conv, N_CONV, true,
                  "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]"
                  " Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s>"
                  "<s>[INST] Another question [/INST]");
    /* no system message */
    expect_render(DY_CHAT_LLAMA2, conv + 1, 1, true, "[INST] Hello [/INST]");
    /* the custom BOS/EOS texts are used */
    char *got = dy_chat_render(DY_CHAT_LLAMA2, conv + 1, 3, true, "<B>", "<E>");
    assert_string_equal(got, "[INST] Hello [/INST] Hi there <E><B>[INST] Who are you [/INST]");
    free(got);
}

static void test_llama3(void **st)
{
    (void)st;
    /* meta-llama/Meta-Llama-3-8B-Instruct (llama.cpp "Llama-3") */
    expect_render(DY_CHAT_LLAMA3, conv, N_CONV, true,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_llama31(void **st)
{
    (void)st;
    /* By hand from meta-llama/Llama-3.1-8B-Instruct: the system block is always there. */
    expect_render(DY_CHAT_LLAMA31, conv, 3, true,
                  "<|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                  "You are a helpful assistant<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    dy_chat_msg m[] = {{DY_ROLE_USER, " hi "}, {DY_ROLE_TOOL, "{\"t\": \"72\"}\n"}};
    expect_render(DY_CHAT_LLAMA31, m, 2, false,
                  "<|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                  "<|start_header_id|>ipython<|end_header_id|>\n\n"
                  "\"{\\\"t\\\": \\\"72\\\"}\\n\"<|eot_id|>");
}

static void test_mistral(void **st)
{
    (void)st;
    /* mistralai/Mistral-7B-Instruct-v0.2 as first published (no system role: the template
     * raises; we merge it into the first user turn as the v1 template does). */
    expect_render(DY_CHAT_MISTRAL_LEGACY, conv + 1, N_CONV - 1, true,
                  "[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant"
                  "   </s>[INST] Another question [/INST]");
    expect_render(DY_CHAT_MISTRAL_LEGACY, conv, 2, true,
                  "[INST] You are a helpful assistant\n\nHello [/INST]");
    /* Mistral's official "v1" template */
    expect_render(DY_CHAT_MISTRAL_V1, conv, N_CONV, true,
                  " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are"
                  " you [/INST]    I am an assistant   </s> [INST] Another question [/INST]");
    /* "v3" (Mistral-7B-Instruct-v0.3, Mistral-Large-Instruct-2407): system on the last turn */
    expect_render(DY_CHAT_MISTRAL_V3, conv, N_CONV, true,
                  "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>"
                  "[INST] You are a helpful assistant\n\nAnother question[/INST]");
    /* "v3-tekken" (Mistral-Nemo-Instruct-2407) */
    expect_render(DY_CHAT_MISTRAL_V3_TEKKEN, conv, N_CONV, true,
                  "[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>"
                  "[INST]You are a helpful assistant\n\nAnother question[/INST]");
    /* "v7" (Mistral-Large-Instruct-2411) */
    expect_render(DY_CHAT_MISTRAL_V7, conv, N_CONV, true,
                  "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi"
                  " there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another"
                  " question[/INST]");
    /* "v7-tekken" (Mistral-Small-3.1-24B-Instruct-2503), by hand */
    expect_render(DY_CHAT_MISTRAL_V7_TEKKEN, conv, N_CONV, true,
                  "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi"
                  " there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another"
                  " question[/INST]");
}

static void test_phi3(void **st)
{
    (void)st;
    /* llama.cpp "Phi-3-small" (the template with a system role, as Phi-3.5-mini's) */
    expect_render(DY_CHAT_PHI3, conv, N_CONV, true,
                  "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
                  "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n"
                  "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
                  "<|assistant|>\n");
    /* without a generation prompt the template ends with EOS */
    expect_render(DY_CHAT_PHI3, conv + 1, 1, false, "<|user|>\nHello<|end|>\n</s>");
    /* an empty system message is left out */
    dy_chat_msg m[] = {{DY_ROLE_SYSTEM, ""}, {DY_ROLE_USER, "Hello"}};
    expect_render(DY_CHAT_PHI3, m, 2, true, "<|user|>\nHello<|end|>\n<|assistant|>\n");
}

static void test_gemma(void **st)
{
    (void)st;
    /* google/gemma-7b-it (llama.cpp expected_output; system merged as Gemma 3 does) */
    expect_render(DY_CHAT_GEMMA, conv, N_CONV, true,
                  "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
                  "<start_of_turn>model\nHi there<end_of_turn>\n"
                  "<start_of_turn>user\nWho are you<end_of_turn>\n"
                  "<start_of_turn>model\nI am an assistant<end_of_turn>\n"
                  "<start_of_turn>user\nAnother question<end_of_turn>\n"
                  "<start_of_turn>model\n");
}

static void test_zephyr(void **st)
{
    (void)st;
    /* By hand from HuggingFaceH4/zephyr-7b-beta with trim_blocks */
    expect_render(DY_CHAT_ZEPHYR, conv, N_CONV, true,
                  "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n"
                  "<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n"
                  "<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n"
                  "<|assistant|>\n");
}

static void test_plain_fallback(void **st)
{
    (void)st;
    expect_render(DY_CHAT_PLAIN, conv, 3, true,
                  "### System:\nYou are a helpful assistant\n\n### User:\nHello\n\n"
                  "### Assistant:\nHi there\n\n### Assistant:\n");
    dy_chat_msg m[] = {{DY_ROLE_USER, "q"}, {DY_ROLE_TOOL, "r"}};
    expect_render(DY_CHAT_PLAIN, m, 2, false, "### User:\nq\n\n### Tool:\nr\n\n");
}

static void test_tool_role_and_edge_cases(void **st)
{
    (void)st;
    dy_chat_msg m[] = {{DY_ROLE_USER, "q"}, {DY_ROLE_TOOL, "r"}};
    /* ChatML keeps the role name; families without a tool turn render it as a user turn */
    expect_render(DY_CHAT_CHATML, m, 2, false,
                  "<|im_start|>user\nq<|im_end|>\n<|im_start|>tool\nr<|im_end|>\n");
    expect_render(DY_CHAT_GEMMA, m, 2, false,
                  "<start_of_turn>user\nq<end_of_turn>\n<start_of_turn>user\nr<end_of_turn>\n");
    expect_render(DY_CHAT_ZEPHYR, m, 2, false, "<|user|>\nq</s>\n<|user|>\nr</s>\n");
    /* no messages: an empty string (not NULL), or just the generation prompt */
    expect_render(DY_CHAT_LLAMA2, NULL, 0, true, "");
    expect_render(DY_CHAT_CHATML, NULL, 0, true, "<|im_start|>assistant\n");
    /* a NULL content renders as empty */
    dy_chat_msg e[] = {{DY_ROLE_USER, NULL}};
    expect_render(DY_CHAT_LLAMA3, e, 1, false, "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
    /* bad family or role */
    assert_null(dy_chat_render(DY_CHAT_N_FAMILIES, conv, 1, true, NULL, NULL));
    dy_chat_msg bad[] = {{(dy_chat_role)9, "x"}};
    assert_null(dy_chat_render(DY_CHAT_CHATML, bad, 1, true, NULL, NULL));
}

/* ---- tools ---- */

/* The tool as Python's json.dumps writes it (the templates' tojson). */
#define TOOL_PY "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": " \
                "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": " \
                "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}"

/* The generic envelope's compact function object. */
#define TOOL_COMPACT "{\"name\":\"get_weather\",\"description\":\"Get the weather\",\"parameters\":" \
                     "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}," \
                     "\"required\":[\"city\"]}}"

/* The generic envelope's tool list. */
#define GENERIC_TOOLS "Tools:\n" TOOL_COMPACT "\nTo call one: <tool_call>{\"name\": <name>, " \
                      "\"arguments\": <object>}</tool_call>"

static dy_chat_call tool_call = {"call_abc123xyz", "get_weather", "{\"city\":\"Paris\"}"};
static dy_chat_tool weather = {"get_weather", "Get the weather",
                               "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                               "\"required\":[\"city\"]}"};
/* A round trip: the question, the assistant's call, the tool's answer, the next question. */
static dy_chat_msg tool_conv[] = {
    {DY_ROLE_SYSTEM, "Be brief.", NULL, 0, NULL},
    {DY_ROLE_USER, "Weather in Paris?", NULL, 0, NULL},
    {DY_ROLE_ASSISTANT, "", &tool_call, 1, NULL},
    {DY_ROLE_TOOL, "22 C", NULL, 0, "call_abc123xyz"},
    {DY_ROLE_USER, "Thanks!", NULL, 0, NULL},
};

static void expect_tools(dy_chat_family f, const char *want)
{
    expect_render_tools(f, tool_conv, 5, &weather, 1, true, want);
}

static void test_tools_chatml(void **st)
{
    (void)st;
    /* By hand from Qwen/Qwen2.5-7B-Instruct's template (Qwen 3's writes the same; neither's
     * default system prompt is inserted): tools in the system turn, results in a user turn. */
    expect_tools(DY_CHAT_CHATML,
        "<|im_start|>system\n"
        "Be brief.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        TOOL_PY "\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "22 C\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>user\n"
        "Thanks!<|im_end|>\n"
        "<|im_start|>assistant\n");
}

static void test_tools_llama31(void **st)
{
    (void)st;
    /* By hand from meta-llama/Llama-3.2-3B-Instruct's template (3.1's is the same without
     * builtin tools): the tools (tojson, indent 4) in the first user turn. */
    expect_tools(DY_CHAT_LLAMA31,
        "<|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Environment: ipython\n"
        "Cutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n"
        "\n"
        "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n"
        "\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n"
        "\n"
        "{\n"
        "    \"type\": \"function\",\n"
        "    \"function\": {\n"
        "        \"name\": \"get_weather\",\n"
        "        \"description\": \"Get the weather\",\n"
        "        \"parameters\": {\n"
        "            \"type\": \"object\",\n"
        "            \"properties\": {\n"
        "                \"city\": {\n"
        "                    \"type\": \"string\"\n"
        "                }\n"
        "            },\n"
        "            \"required\": [\n"
        "                \"city\"\n"
        "            ]\n"
        "        }\n"
        "    }\n"
        "}\n"
        "\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
        "\n"
        "\"22 C\"<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n");
}

static void test_tools_mistral(void **st)
{
    (void)st;
    /* By hand from mistralai/Mistral-7B-Instruct-v0.3's template (ids: the last 9 characters;
     * the tool's content raw, as `content|string` writes it). */
    expect_tools(DY_CHAT_MISTRAL_V3,
        "[INST] Weather in Paris?[/INST]"
        "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123xyz\"}]</s>"
        "[TOOL_RESULTS] {\"content\": 22 C, \"call_id\": \"abc123xyz\"}[/TOOL_RESULTS]"
        "[AVAILABLE_TOOLS] [" TOOL_PY "][/AVAILABLE_TOOLS]"
        "[INST] Be brief.\n"
        "\n"
        "Thanks![/INST]");
    /* mistralai/Mistral-Nemo-Instruct-2407: the same without the spaces */
    expect_tools(DY_CHAT_MISTRAL_V3_TEKKEN,
        "[INST]Weather in Paris?[/INST]"
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123xyz\"}]</s>"
        "[TOOL_RESULTS]{\"content\": 22 C, \"call_id\": \"abc123xyz\"}[/TOOL_RESULTS]"
        "[AVAILABLE_TOOLS][" TOOL_PY "][/AVAILABLE_TOOLS]"
        "[INST]Be brief.\n"
        "\n"
        "Thanks![/INST]");
    /* v7: the system prompt in its block */
    expect_tools(DY_CHAT_MISTRAL_V7_TEKKEN,
        "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT]"
        "[INST]Weather in Paris?[/INST]"
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123xyz\"}]</s>"
        "[TOOL_RESULTS]{\"content\": 22 C, \"call_id\": \"abc123xyz\"}[/TOOL_RESULTS]"
        "[AVAILABLE_TOOLS][" TOOL_PY "][/AVAILABLE_TOOLS]"
        "[INST]Thanks![/INST]");
}

static void test_tools_generic(void **st)
{
    (void)st;
    /* no tools in the family's template: the generic envelope */
    expect_tools(DY_CHAT_PLAIN,
        "### System:\n"
        "Be brief.\n"
        "\n"
        GENERIC_TOOLS "\n"
        "\n"
        "### User:\n"
        "Weather in Paris?\n"
        "\n"
        "### Assistant:\n"
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n"
        "\n"
        "### Tool:\n"
        "22 C\n"
        "\n"
        "### User:\n"
        "Thanks!\n"
        "\n"
        "### Assistant:\n");
    expect_tools(DY_CHAT_GEMMA,
        "<start_of_turn>user\n"
        "Be brief.\n"
        "\n"
        GENERIC_TOOLS "\n"
        "\n"
        "Weather in Paris?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call><end_of_turn>\n"
        "<start_of_turn>user\n"
        "22 C<end_of_turn>\n"
        "<start_of_turn>user\n"
        "Thanks!<end_of_turn>\n"
        "<start_of_turn>model\n");
    assert_false(dy_chat_family_has_tools(DY_CHAT_PLAIN));
    assert_true(dy_chat_family_has_tools(DY_CHAT_CHATML));
}

static void test_tools_edge_cases(void **st)
{
    (void)st;
    /* calls and results without tools (tool_choice "none"): no tool list, the calls still in
     * the family's syntax */
    char *got = dy_chat_render_tools(DY_CHAT_CHATML, tool_conv + 1, 3, NULL, 0, false, NULL, NULL);
    assert_string_equal(got, "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
                             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                             "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22 C\n"
                             "</tool_response><|im_end|>\n");
    free(got);
    /* the generic envelope adds a system message when there is none */
    got = dy_chat_render_tools(DY_CHAT_PLAIN, tool_conv + 4, 1, &weather, 1, true, NULL, NULL);
    assert_string_equal(got, "### System:\n" GENERIC_TOOLS "\n\n### User:\nThanks!\n\n### Assistant:\n");
    free(got);
    /* a function without description or parameters */
    dy_chat_tool bare = {"now", NULL, NULL};
    got = dy_chat_render_tools(DY_CHAT_CHATML, tool_conv + 4, 1, &bare, 1, false, NULL, NULL);
    assert_non_null(strstr(got, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"now\"}}\n</tools>"));
    free(got);
    /* arguments that are not JSON fail the rendering */
    dy_chat_call broken = {"c", "f", "{"};
    dy_chat_msg m[] = {{DY_ROLE_ASSISTANT, "", &broken, 1, NULL}};
    assert_null(dy_chat_render_tools(DY_CHAT_LLAMA31, m, 1, NULL, 0, false, NULL, NULL));
    /* a Llama 3.1 conversation whose only message is the system one: the tool turn alone */
    got = dy_chat_render_tools(DY_CHAT_LLAMA31, tool_conv, 1, &bare, 1, false, NULL, NULL);
    assert_non_null(strstr(got, "Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": "
                                "{\n        \"name\": \"now\"\n    }\n}\n\n<|eot_id|>"));
    free(got);
}

/* ---- detection from real template texts ---- */

/* meta-llama/Llama-2-7b-chat-hf */
static const char *T_LLAMA2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] "
    "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != "
    "false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
    "message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% "
    "endfor %}";

/* meta-llama/Meta-Llama-3-8B-Instruct */
static const char *T_LLAMA3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
    "content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/* meta-llama/Llama-3.1-8B-Instruct (the system-block part of the template) */
static const char *T_LLAMA31 =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul "
    "2024\" %}\n{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set "
    "system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- "
    "else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n{{- "
    "\"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge Date: "
    "December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- system_message "
    "}}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n{{- '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n{%- "
    "endfor %}\n{%- if add_generation_prompt %}\n    {{- "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n";

/* mistralai/Mistral-7B-Instruct-v0.2, as first published */
static const char *T_MISTRAL_LEGACY =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] "
    "' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";

/* Mistral's official "v1" template */
static const char *T_MISTRAL_V1 =
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
    "messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- "
    "set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in "
    "loop_messages %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and "
    "system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + "
    "message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + "
    "message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == "
    "'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- endif %}\n{%- "
    "endfor %}\n";

/* mistralai/Mistral-7B-Instruct-v0.3 (excerpt: the user and assistant branches) */
static const char *T_MISTRAL_V3 =
    "{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- "
    "if tools is not none and (message == user_messages[-1]) %}\n            {{- "
    "\"[AVAILABLE_TOOLS] [\" }}\n        {%- endif %}\n        {%- if loop.last and system_message "
    "is defined %}\n            {{- \"[INST] \" + system_message + \"\\n\\n\" + "
    "message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST] \" + "
    "message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- elif message[\"role\"] == "
    "\"assistant\" %}\n        {{- \" \" + message[\"content\"]|trim + eos_token}}\n    {%- endif "
    "%}\n{%- endfor %}\n";

/* mistralai/Mistral-Nemo-Instruct-2407 (excerpt) */
static const char *T_MISTRAL_V3_TEKKEN =
    "{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- "
    "if tools is not none and (message == user_messages[-1]) %}\n            {{- "
    "\"[AVAILABLE_TOOLS][\" }}\n        {%- endif %}\n        {%- if loop.last and system_message "
    "is defined %}\n            {{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] "
    "+ \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST]\" + message[\"content\"] + "
    "\"[/INST]\" }}\n        {%- endif %}\n    {%- elif message[\"role\"] == \"assistant\" %}\n      "
    "  {{- message[\"content\"] + eos_token}}\n    {%- endif %}\n{%- endfor %}\n";

/* mistralai/Mistral-Large-Instruct-2411 */
static const char *T_MISTRAL_V7 =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + "
    "message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
    "message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and "
    "assistant roles are supported!') }}{% endif %}{% endfor %}";

/* mistralai/Mistral-Small-3.1-24B-Instruct-2503 (excerpt) */
static const char *T_MISTRAL_V7_TEKKEN =
    "{{- bos_token }}\n{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}\n{%- for "
    "message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {{- '[INST]' + "
    "message['content'] + '[/INST]' }}\n    {%- elif message['role'] == 'assistant' %}\n        {{- "
    "message['content'] + eos_token }}\n    {%- endif %}\n{%- endfor %}\n";

/* microsoft/Phi-3-mini-4k-instruct (first release) */
static const char *T_PHI3 =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' "
    "+ '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif "
    "(message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% "
    "endfor %}";

/* microsoft/Phi-3.5-mini-instruct */
static const char *T_PHI35 =
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] "
    "%}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' "
    "%}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' "
    "%}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

/* google/gemma-7b-it */
static const char *T_GEMMA =
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
    "endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == "
    "0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') "
    "}}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set "
    "role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | "
    "trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt "
    "%}{{'<start_of_turn>model\n'}}{% endif %}";

/* HuggingFaceH4/zephyr-7b-beta */
static const char *T_ZEPHYR =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

/* teknium/OpenHermes-2.5-Mistral-7B */
static const char *T_CHATML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

/* microsoft/phi-4: <|im_start|> but not ChatML */
static const char *T_PHI4 =
    "{% for message in messages %}{% if (message['role'] == 'system') "
    "%}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif "
    "(message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + "
    "'<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') "
    "%}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}";

/* eachadea/vicuna-13b-1.1: no family of ours */
static const char *T_VICUNA =
    "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + "
    "message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + "
    "message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' "
    "-}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt "
    "-%}{{-'ASSISTANT:'-}}{%- endif -%}";

static void test_detect_real_templates(void **st)
{
    (void)st;
    struct {
        const char *tmpl;
        dy_chat_family want;
    } cases[] = {
        {T_LLAMA2, DY_CHAT_LLAMA2},
        {T_LLAMA3, DY_CHAT_LLAMA3},
        {T_LLAMA31, DY_CHAT_LLAMA31},
        {T_MISTRAL_LEGACY, DY_CHAT_MISTRAL_LEGACY},
        {T_MISTRAL_V1, DY_CHAT_MISTRAL_V1},
        {T_MISTRAL_V3, DY_CHAT_MISTRAL_V3},
        {T_MISTRAL_V3_TEKKEN, DY_CHAT_MISTRAL_V3_TEKKEN},
        {T_MISTRAL_V7, DY_CHAT_MISTRAL_V7},
        {T_MISTRAL_V7_TEKKEN, DY_CHAT_MISTRAL_V7_TEKKEN},
        {T_PHI3, DY_CHAT_PHI3},
        {T_PHI35, DY_CHAT_PHI3},
        {T_GEMMA, DY_CHAT_GEMMA},
        {T_ZEPHYR, DY_CHAT_ZEPHYR},
        {T_CHATML, DY_CHAT_CHATML},
        {T_PHI4, DY_CHAT_PLAIN},
        {T_VICUNA, DY_CHAT_PLAIN},
        {"", DY_CHAT_PLAIN},
        {NULL, DY_CHAT_PLAIN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dy_chat_family got = dy_chat_detect(cases[i].tmpl);
        if (got != cases[i].want)
            print_error("case %zu: got %s want %s\n", i, dy_chat_family_name(got),
                        dy_chat_family_name(cases[i].want));
        assert_int_equal(got, cases[i].want);
    }
}

static void test_family_names_round_trip(void **st)
{
    (void)st;
    for (int f = 0; f < DY_CHAT_N_FAMILIES; f++) {
        dy_chat_family back;
        assert_true(dy_chat_family_from_name(dy_chat_family_name((dy_chat_family)f), &back));
        assert_int_equal(back, f);
    }
    dy_chat_family x;
    assert_false(dy_chat_family_from_name("jinja", &x));
    assert_false(dy_chat_family_from_name(NULL, &x));
    assert_string_equal(dy_chat_role_name(DY_ROLE_TOOL), "tool");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_zephyr),
        cmocka_unit_test(test_plain_fallback),
        cmocka_unit_test(test_tool_role_and_edge_cases),
        cmocka_unit_test(test_tools_chatml),
        cmocka_unit_test(test_tools_llama31),
        cmocka_unit_test(test_tools_mistral),
        cmocka_unit_test(test_tools_generic),
        cmocka_unit_test(test_tools_edge_cases),
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_family_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
