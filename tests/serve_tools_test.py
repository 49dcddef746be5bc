#!/usr/bin/env python3
"""serve_tools_test.py DYAD SOURCE_DIR — tool calls through `dyad serve`'s chat API.

On the bundled model (the plain family: the generic <tool_call> envelope), tool_choice
"required" and a named function give `tool_calls` whose arguments parse and validate
(jsonschema) against the function's parameters, for several seeds and n = 3, with
finish_reason "tool_calls" and seed-determined ids; parallel_tool_calls decides whether one or
more calls may come; streamed forced calls reassemble to the same calls; a call cut by
max_tokens says "length" and has no tool_calls; a round trip (the assistant's tool_calls, the
tool's answer, the next user turn) is accepted and answered, with tool_choice auto and none;
disaggregated, the decode worker samples the forced call too; with --chat-template
mistral-v3 the same holds in Mistral's call syntax. Every bad input is a 400 whose
`param` names the place. Standard library and jsonschema; prints 'N passed, N failed'."""
import json
import os
import sys

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]

# Small: the bundled model has 512 tokens of context, and the tools are part of the prompt.
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                           "days": {"type": "integer", "maximum": 7}},
           "required": ["city"]}
ALARM = {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0}},
         "required": ["hour"]}
TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "alarm", "parameters": ALARM, "strict": True}},
]
SCHEMAS = {"weather": WEATHER, "alarm": ALARM}
QUESTION = [{"role": "user", "content": "Rain in Paris?"}]


def chat(s, messages=QUESTION, **kw):
    body = {"model": MODEL, "messages": messages, **kw}
    st, r, _ = s.request("POST", "/v1/chat/completions", body)
    assert st == 200, (st, r)
    return r


def check_calls(choice, names=SCHEMAS):
    """A choice answered with calls: each names a listed function and its arguments validate."""
    assert choice["finish_reason"] == "tool_calls", choice
    msg = choice["message"]
    assert msg["content"] is None, msg
    assert msg["tool_calls"], msg
    for call in msg["tool_calls"]:
        assert call["type"] == "function"
        assert call["id"].startswith("call_") and len(call["id"]) == 29, call
        fn = call["function"]
        assert fn["name"] in names, call
        args = json.loads(fn["arguments"])
        jsonschema.validate(args, SCHEMAS[fn["name"]])
        assert fn["arguments"] == json.dumps(args, separators=(",", ":")), fn  # compact
    return msg["tool_calls"]


def test_required_validates(agg):
    seen = set()
    for seed in (1, 2, 3):
        r = chat(agg, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                 temperature=1.0, seed=seed, n=3)
        assert len(r["choices"]) == 3
        for c in r["choices"]:
            calls = check_calls(c)
            assert len(calls) == 1  # parallel_tool_calls false: one call
            seen.add(calls[0]["function"]["name"])
            seen.add(calls[0]["id"])
    assert len(seen) > 9, seen  # ids differ between choices and seeds; both functions came


def test_named_function(agg):
    choice = {"type": "function", "function": {"name": "alarm"}}
    for seed in (4, 5, 6):
        r = chat(agg, tools=TOOLS, tool_choice=choice, temperature=1.0, seed=seed, n=3)
        for c in r["choices"]:
            for call in check_calls(c, names={"alarm"}):
                assert call["function"]["name"] == "alarm"


def test_parallel_calls(agg):
    """parallel_tool_calls (the default) lets "required" answer with one or more calls (the
    story model rarely stops after one, so many answers run to the context's end)."""
    counts = []
    for seed in (7, 8, 9):
        r = chat(agg, tools=TOOLS, tool_choice="required", temperature=1.0, seed=seed, n=3)
        for c in r["choices"]:
            if c["finish_reason"] == "length":  # a long run of calls: cut, never "tool_calls"
                assert "tool_calls" not in c["message"], c
                continue
            counts.append(len(check_calls(c)))
    assert all(n >= 1 for n in counts), counts


def test_seeded_reproducible(agg):
    body = dict(tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=1.0,
                seed=21, n=3)
    a, b = chat(agg, **body), chat(agg, **body)
    assert [c["message"] for c in a["choices"]] == [c["message"] for c in b["choices"]]


def streamed_calls(events):
    """Reassembles the streamed deltas: per choice, its content and its calls by index."""
    assert events[-1] == "[DONE]", events[-3:]
    content, calls, finish = {}, {}, {}
    for ev in events[:-1]:
        assert "error" not in ev, ev
        for c in ev["choices"]:
            i, d = c["index"], c["delta"]
            if d.get("content"):
                content[i] = content.get(i, "") + d["content"]
            for piece in d.get("tool_calls") or []:
                call = calls.setdefault(i, {}).setdefault(piece["index"], {
                    "id": None, "type": None, "function": {"name": None, "arguments": ""}})
                for key in ("id", "type"):
                    if piece.get(key):
                        call[key] = piece[key]
                fn = piece.get("function") or {}
                if fn.get("name"):
                    call["function"]["name"] = fn["name"]
                call["function"]["arguments"] += fn.get("arguments") or ""
            if c.get("finish_reason"):
                finish[i] = c["finish_reason"]
    return content, {i: [v[k] for k in sorted(v)] for i, v in calls.items()}, finish


def test_streamed_reassembles(agg):
    body = {"model": MODEL, "messages": QUESTION, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "temperature": 1.0, "seed": 31, "n": 3, "stream": True}
    content, calls, finish = streamed_calls(agg.stream("/v1/chat/completions", body))
    whole = chat(agg, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                 temperature=1.0, seed=31, n=3)
    for c in whole["choices"]:
        i = c["index"]
        if c["finish_reason"] == "length":
            continue
        check_calls(c)
        assert finish[i] == "tool_calls"
        assert i not in content  # no content was streamed before the calls
        assert calls[i] == c["message"]["tool_calls"], (calls[i], c["message"]["tool_calls"])


def test_cut_call_says_length(agg):
    for stream in (False, True):
        body = {"model": MODEL, "messages": QUESTION, "tools": TOOLS, "tool_choice": "required",
                "max_tokens": 6, "seed": 3, "stream": stream}
        if stream:
            content, calls, finish = streamed_calls(agg.stream("/v1/chat/completions", body))
            assert finish[0] == "length" and not calls, (finish, calls)
            assert content[0].startswith("<tool_")  # the partial call, as content
        else:
            c = chat(agg, **{k: v for k, v in body.items() if k not in ("model", "messages")})
            c = c["choices"][0]
            assert c["finish_reason"] == "length"
            assert "tool_calls" not in c["message"]
            assert c["message"]["content"].startswith("<tool_")


ROUND_TRIP = QUESTION + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "Rain."},
    {"role": "user", "content": "Umbrella?"},
]


def test_round_trip(agg):
    for choice in ("auto", "none"):
        r = chat(agg, ROUND_TRIP, tools=TOOLS, tool_choice=choice, max_tokens=40, seed=2)
        c = r["choices"][0]
        assert c["finish_reason"] in ("stop", "length", "tool_calls"), c
        if c["finish_reason"] == "tool_calls":  # auto may call again: then the call is valid
            check_calls(c)
        else:
            assert isinstance(c["message"]["content"], str) and c["message"]["content"], c
        assert r["usage"]["prompt_tokens"] > 60  # the history was rendered
    # and a forced call after the round trip (one tool: the context is small)
    c = chat(agg, ROUND_TRIP, tools=TOOLS[1:], tool_choice="required", parallel_tool_calls=False,
             seed=5)["choices"][0]
    check_calls(c)
    # streamed auto: content arrives as content, the finish reason is there
    body = {"model": MODEL, "messages": ROUND_TRIP, "tools": TOOLS, "max_tokens": 30, "seed": 2,
            "stream": True}
    content, calls, finish = streamed_calls(agg.stream("/v1/chat/completions", body))
    whole = chat(agg, ROUND_TRIP, tools=TOOLS, max_tokens=30, seed=2)["choices"][0]
    assert finish[0] == whole["finish_reason"]
    if not calls:
        assert content.get(0, "") == whole["message"]["content"]


def test_disaggregated(agg, dis):
    for seed in (1, 2):
        r = chat(dis, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "weather"}},
                 temperature=1.0, seed=seed, n=3)
        for c in r["choices"]:
            check_calls(c, names={"weather"})


def test_mistral_family(agg, dis, mistral):
    """A family with its own call syntax, end to end: the server renders the bundled model's
    prompts as Mistral v3 (`--chat-template`), the forced answer is Mistral's array of calls
    ([TOOL_CALLS] itself is a control token no grammar admits) and reads back as calls."""
    for seed in (1, 2):
        r = chat(mistral, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                 temperature=1.0, seed=seed, n=3)
        for c in r["choices"]:
            check_calls(c)
        r = chat(mistral, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "alarm"}},
                 temperature=1.0, seed=seed)
        check_calls(r["choices"][0], names={"alarm"})
    body = {"model": MODEL, "messages": QUESTION, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "seed": 3, "stream": True}
    content, calls, finish = streamed_calls(mistral.stream("/v1/chat/completions", body))
    whole = chat(mistral, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, seed=3)
    assert finish[0] == "tool_calls" and 0 not in content
    assert calls[0] == whole["choices"][0]["message"]["tool_calls"]
    # a round trip in Mistral's syntax ([TOOL_CALLS], [TOOL_RESULTS]; "none": no tool list,
    # which leaves room in the context)
    r = chat(mistral, ROUND_TRIP, tools=TOOLS, tool_choice="none", max_tokens=20, seed=2)
    c = r["choices"][0]
    assert c["finish_reason"] in ("stop", "length") and c["message"]["content"], c


def bad_request(s, param, **kw):
    body = {"model": MODEL, "messages": QUESTION, **kw}
    st, r, _ = s.request("POST", "/v1/chat/completions", body)
    assert st == 400, (st, r, kw)
    assert r["error"]["param"] == param, (r, param)
    return r["error"]


def test_bad_input(agg):
    fn = {"name": "f", "parameters": {"type": "object"}}
    cases = [
        ("tools", {"tools": {"type": "function"}}),
        ("tools[0].type", {"tools": [{"type": "retrieval", "function": fn}]}),
        ("tools[0].function", {"tools": [{"type": "function"}]}),
        ("tools[0].function.name", {"tools": [{"type": "function", "function": {"name": "a b"}}]}),
        ("tools[0].function.name", {"tools": [{"type": "function", "function": {"name": "x" * 65}}]}),
        ("tools[1].function.name", {"tools": [{"type": "function", "function": fn}] * 2}),
        ("tools[0].function.parameters", {"tools": [{"type": "function", "function": {
            "name": "f", "parameters": "none"}}]}),
        ("tools[0].function.parameters.properties.a.multipleOf", {"tools": [{
            "type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}}}}]}),
        ("tools[0].function.strict", {"tools": [{"type": "function", "function": {**fn, "strict": 1}}]}),
        ("tool_choice", {"tool_choice": "required"}),
        ("tool_choice", {"tools": TOOLS, "tool_choice": "sometimes"}),
        ("tool_choice.function.name", {"tools": TOOLS, "tool_choice": {
            "type": "function", "function": {"name": "nope"}}}),
        ("tool_choice", {"tools": TOOLS, "tool_choice": "required",
                         "response_format": {"type": "json_object"}}),
        ("parallel_tool_calls", {"tools": TOOLS, "parallel_tool_calls": "yes"}),
        ("messages[1].tool_call_id", {"messages": QUESTION + [{"role": "tool", "content": "x"}]}),
        ("messages[1].tool_calls[0].function.arguments", {"messages": QUESTION + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}]}),
        ("messages[1].tool_calls[0].id", {"messages": QUESTION + [
            {"role": "assistant", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
        ("messages[0].tool_calls", {"messages": [
            {"role": "user", "content": "x", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
    ]
    for param, kw in cases:
        bad_request(agg, param, **kw)
    # the server still answers
    check_calls(chat(agg, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                     seed=1)["choices"][0])


def main():
    run_tests(globals(), [Server(DYAD, "--workers", "1", "--threads-per-worker", "1"),
                          Server(DYAD, "--prefill-workers", "1", "--decode-workers", "1",
                                 "--disagg-min-tokens", "16"),
                          Server(DYAD, "--workers", "1", "--threads-per-worker", "1",
                                 "--chat-template", "mistral-v3")])


main()
