#!/usr/bin/env python3
"""serve_structured_test.py DYAD SOURCE_DIR — structured outputs through `dyad serve`.

`response_format` json_object answers parse as objects and json_schema answers validate
(jsonschema), on chat and on completions (`dyad.grammar`), streamed and not, at temperature 0
and 1, with n = 4 (every choice validates, the choices differ), best_of and majority voting,
and disaggregated (the decode worker samples under the grammar). An answer cut by max_tokens
or a stop string reports finish_reason "length", never "stop". Every bad input is a 400 whose
`param` names the place, --max-schema-bytes included. The property test: for 30 random schemas
(nested objects, arrays, enums, integer ranges, strings with length bounds) and 3 seeds each,
every finished answer parses and validates, while the bundled model without response_format,
given the same prompt, produces valid JSON for almost none of them.
Standard library and jsonschema; prints 'N passed, N failed'."""
import json
import os
import random
import sys

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
MAX_SCHEMA_BYTES = 4096  # the servers' --max-schema-bytes

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"type": "string", "enum": ["cat", "dog", "fish"]},
                 "maxItems": 3},
        "alive": {"type": "boolean"},
    },
    "required": ["name", "age", "pets", "alive"],
    "additionalProperties": False,
}
_unique = [0]


def unique_prompt(words=12):
    """A prompt no earlier request shares a block with (so nothing comes from the cache)."""
    _unique[0] += 1
    head = " ".join(f"word{_unique[0]}x{i}" for i in range(words))
    return f"{head}. Once upon a time, there was a little girl named Lily. She loved to play."


def schema_format(schema, name="answer", **kw):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, **kw}}


def chat(s, content="Tell me about a person.", **kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **kw}
    st, r, _ = s.request("POST", "/v1/chat/completions", body)
    assert st == 200, (st, r)
    return r


def complete(s, **kw):
    body = {"model": MODEL, "prompt": unique_prompt(), "max_tokens": 300, **kw}
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def texts(r):
    return [c["message"]["content"] if "message" in c else c["text"] for c in r["choices"]]


def check_valid(text, schema):
    v = json.loads(text)
    jsonschema.validate(v, schema)
    return v


def check_all_stop_and_valid(r, schema):
    for c, t in zip(r["choices"], texts(r)):
        assert c["finish_reason"] == "stop", (c, t)
        check_valid(t, schema)


def valid(text, schema):
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


# ---------------------------------------------------------------- json_object

def test_json_object(agg):
    """Every finished answer is one JSON object; a cut one says "length". The model's strings
    are unbounded here, so not every answer finishes, but most do within the context."""
    finished = 0
    for seed in range(4):
        r = chat(agg, response_format={"type": "json_object"}, temperature=1.0, seed=seed)
        for c, t in zip(r["choices"], texts(r)):
            if c["finish_reason"] == "stop":
                assert isinstance(json.loads(t), dict), t
                finished += 1
            else:
                assert c["finish_reason"] == "length" and not valid(t, {"type": "object"}), (c, t)
    assert finished >= 1
    r = complete(agg, dyad={"grammar": {"type": "json_object"}}, temperature=0, max_tokens=400)
    c = r["choices"][0]
    if c["finish_reason"] == "stop":
        assert isinstance(json.loads(c["text"]), dict), c


# ---------------------------------------------------------------- json_schema

def test_schema_chat_greedy_and_sampled(agg):
    for temperature in (0, 1.0):
        r = chat(agg, response_format=schema_format(PERSON, strict=True), temperature=temperature,
                 seed=5)
        check_all_stop_and_valid(r, PERSON)
    # greedy repeats itself
    a = chat(agg, response_format=schema_format(PERSON), temperature=0)
    b = chat(agg, response_format=schema_format(PERSON), temperature=0)
    assert texts(a) == texts(b)


def test_schema_n4_seeded(agg):
    body = dict(response_format=schema_format(PERSON), temperature=1.0, seed=11, n=4)
    r = chat(agg, **body)
    assert len(r["choices"]) == 4
    check_all_stop_and_valid(r, PERSON)
    assert len(set(texts(r))) > 1, texts(r)
    assert texts(chat(agg, **body)) == texts(r)  # the seed makes it reproducible


def test_schema_completions(agg):
    r = complete(agg, dyad={"grammar": schema_format(PERSON)}, temperature=1.0, seed=2, n=3)
    check_all_stop_and_valid(r, PERSON)
    # best_of and majority voting: the candidates follow the grammar, each on its own
    r = complete(agg, dyad={"grammar": schema_format(PERSON)}, temperature=1.0, seed=3, n=1,
                 best_of=3)
    check_all_stop_and_valid(r, PERSON)
    assert len(r["dyad"]["selection"][0]["samples"]) == 3
    r = complete(agg, temperature=1.0, seed=4, n=5,
                 dyad={"grammar": schema_format(PERSON), "select": "majority",
                       "answer_regex": "\"age\": ?(\\d+)"})
    check_all_stop_and_valid(r, PERSON)
    assert all(smp["finish_reason"] == "stop"
               for smp in r["dyad"]["selection"][0]["samples"]
               if smp["finish_reason"] != "cancelled")


def streamed_text(events, field):
    assert events[-1] == "[DONE]", events[-3:]
    parts, finish = {}, {}
    for ev in events[:-1]:
        assert "error" not in ev, ev
        for c in ev["choices"]:
            piece = c["delta"].get("content") if field == "delta" else c.get("text")
            parts[c["index"]] = parts.get(c["index"], "") + (piece or "")
            if c.get("finish_reason"):
                finish[c["index"]] = c["finish_reason"]
    return parts, finish


def test_schema_streamed(agg):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "A person, please."}],
            "response_format": schema_format(PERSON), "temperature": 1.0, "seed": 9, "n": 2,
            "stream": True}
    parts, finish = streamed_text(agg.stream("/v1/chat/completions", body), "delta")
    whole = chat(agg, content="A person, please.", response_format=schema_format(PERSON),
                 temperature=1.0, seed=9, n=2)
    assert [parts[i] for i in range(2)] == texts(whole)
    for i in range(2):
        assert finish[i] == "stop"
        check_valid(parts[i], PERSON)
    body = {"model": MODEL, "prompt": unique_prompt(), "max_tokens": 300, "stream": True,
            "temperature": 0, "dyad": {"grammar": schema_format(PERSON)}}
    parts, finish = streamed_text(agg.stream("/v1/completions", body), "text")
    assert finish[0] == "stop"
    check_valid(parts[0], PERSON)


def test_cut_answers_say_length(agg):
    """max_tokens or a stop string that cuts the object before it is complete: "length"."""
    for max_tokens in (1, 3, 6):
        r = chat(agg, response_format=schema_format(PERSON), max_tokens=max_tokens,
                 temperature=1.0, seed=1, n=2)
        for c, t in zip(r["choices"], texts(r)):
            assert c["finish_reason"] == "length", (max_tokens, c)
            assert not valid(t, PERSON), t
    # every answer of PERSON has a comma after its first property
    r = chat(agg, response_format=schema_format(PERSON), stop=[","], temperature=0)
    c = r["choices"][0]
    assert c["finish_reason"] == "length" and "," not in c["message"]["content"], c
    r = complete(agg, dyad={"grammar": schema_format(PERSON)}, max_tokens=4, temperature=0)
    assert r["choices"][0]["finish_reason"] == "length", r["choices"][0]


def test_disaggregated(agg, dis):
    """The first token is sampled on the decode worker, under the grammar too."""
    r = chat(dis, content=unique_prompt(24), response_format=schema_format(PERSON),
             temperature=1.0, seed=6, n=2)
    check_all_stop_and_valid(r, PERSON)
    assert all(c["prefill_worker"] == 0 for c in r["dyad"]["choices"]), r["dyad"]
    r = complete(dis, prompt=unique_prompt(24), dyad={"grammar": {"type": "json_object"}},
                 temperature=0, max_tokens=400)
    assert r["dyad"]["choices"][0]["prefill_worker"] == 0, r["dyad"]
    c = r["choices"][0]
    if c["finish_reason"] == "stop":
        assert isinstance(json.loads(c["text"]), dict), c
    body = {"model": MODEL, "messages": [{"role": "user", "content": unique_prompt(24)}],
            "response_format": schema_format(PERSON), "temperature": 0, "stream": True}
    parts, finish = streamed_text(dis.stream("/v1/chat/completions", body), "delta")
    assert finish[0] == "stop"
    check_valid(parts[0], PERSON)


# ---------------------------------------------------------------- bad input

def test_bad_input(agg):
    rf = "response_format"
    cases = [
        ({rf: "json"}, rf),
        ({rf: {}}, rf + ".type"),
        ({rf: {"type": "xml"}}, rf + ".type"),
        ({rf: {"type": "json_schema"}}, rf + ".json_schema"),
        ({rf: {"type": "json_schema", "json_schema": {"schema": PERSON}}}, rf + ".json_schema.name"),
        ({rf: schema_format(PERSON, name="has space")}, rf + ".json_schema.name"),
        ({rf: schema_format(PERSON, name="x" * 65)}, rf + ".json_schema.name"),
        ({rf: {"type": "json_schema", "json_schema": {"name": "p"}}}, rf + ".json_schema.schema"),
        ({rf: schema_format("{}")}, rf + ".json_schema.schema"),
        ({rf: schema_format(PERSON, strict="yes")}, rf + ".json_schema.strict"),
        ({rf: schema_format({"type": "object", "properties": {
            "age": {"type": "integer", "multipleOf": 7}}})},
         rf + ".json_schema.schema.properties.age.multipleOf"),
        ({rf: schema_format({"type": "object", "required": 3})},
         rf + ".json_schema.schema.required"),
        ({rf: schema_format({"type": "array", "items": {"type": "string"}, "minItems": 3,
                             "maxItems": 1})}, rf + ".json_schema.schema.minItems"),
    ]
    for extra, param in cases:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
        st, r, _ = agg.request("POST", "/v1/chat/completions", body)
        assert st == 400 and r["error"]["param"] == param, (extra, st, r)
        assert r["error"]["type"] == "invalid_request_error" and r["error"]["message"], r
    # a schema that recurses without end is refused, naming a place inside the schema
    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    st, r, _ = agg.request("POST", "/v1/chat/completions",
                           {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                            rf: schema_format(loop)})
    assert st == 400 and r["error"]["param"].startswith(rf + ".json_schema.schema"), (st, r)
    # completions: the same object under dyad.grammar
    for extra, param in (({"grammar": {"type": "json_schema"}}, "dyad.grammar.json_schema"),
                         ({"grammar": schema_format({"type": "object", "properties": {
                             "age": {"type": "integer", "multipleOf": 7}}})},
                          "dyad.grammar.json_schema.schema.properties.age.multipleOf"),
                         ({"grammar": 1}, "dyad.grammar")):
        st, r, _ = agg.request("POST", "/v1/completions",
                               {"model": MODEL, "prompt": "Once", "dyad": extra})
        assert st == 400 and r["error"]["param"] == param, (extra, st, r)
    # the limit is the serialized schema's size
    big = {"type": "object", "properties": {"p%d" % i: {"type": "integer"} for i in range(400)}}
    assert len(json.dumps(big, separators=(",", ":"))) > MAX_SCHEMA_BYTES
    st, r, _ = agg.request("POST", "/v1/chat/completions",
                           {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                            rf: schema_format(big)})
    assert st == 400 and r["error"]["param"] == rf + ".json_schema.schema", (st, r)
    assert "--max-schema-bytes" in r["error"]["message"], r


# ---------------------------------------------------------------- the property test

WORDS = ["id", "name", "size", "tags", "kind", "color", "count", "owner", "items", "level"]


def random_schema(rng, depth=0):
    """A schema whose every answer is short: bounded strings, arrays, integers and nesting."""
    kinds = ["string", "integer", "enum", "boolean"] + (["object", "array"] * 2 if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "object":
        names = rng.sample(WORDS, rng.randint(1, 3))
        props = {n: random_schema(rng, depth + 1) for n in names}
        required = [n for n in names if rng.random() < 0.7] or names[:1]
        return {"type": "object", "properties": props, "required": required,
                "additionalProperties": False}
    if kind == "array":
        lo = rng.randint(0, 1)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo,
                "maxItems": lo + rng.randint(0, 2)}
    if kind == "enum":
        pool = ["red", "green", "blue", "small", "big", 0, 1, 42, -7, True, None]
        return {"enum": rng.sample(pool, rng.randint(2, 4))}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 300)}
    if kind == "string":
        lo = rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 6)}
    return {"type": "boolean"}


def test_property_random_schemas(agg):
    rng = random.Random(20)
    schemas = []
    while len(schemas) < 30:  # objects and arrays at the top, as answers usually are
        s = random_schema(rng)
        if s.get("type") in ("object", "array"):
            schemas.append(s)
    finished = constrained = unaided_valid = 0
    for i, schema in enumerate(schemas):
        for seed in (1, 2, 3):
            prompt = f"Write the record number {i} as JSON."
            r = chat(agg, content=prompt, response_format=schema_format(schema, name=f"s{i}"),
                     temperature=1.0, seed=seed)
            c, t = r["choices"][0], texts(r)[0]
            constrained += 1
            if c["finish_reason"] == "stop":
                finished += 1
                assert valid(t, schema), (schema, seed, t)
            else:
                assert c["finish_reason"] == "length", c
            u = chat(agg, content=prompt, temperature=1.0, seed=seed, max_tokens=120)
            unaided_valid += valid(texts(u)[0], schema)
    # Bounded schemas finish within the context nearly always; unaided, the story model
    # writes stories.
    assert finished >= 0.9 * constrained, (finished, constrained)
    assert unaided_valid <= 0.1 * constrained, (unaided_valid, constrained)
    print(f"property test: {finished}/{constrained} constrained answers finished and validated;"
          f" {unaided_valid}/{constrained} unaided answers were valid")


def main():
    limit = ("--max-schema-bytes", str(MAX_SCHEMA_BYTES))
    run_tests(globals(), [Server(DYAD, "--workers", "1", "--threads-per-worker", "1", *limit),
                          Server(DYAD, "--prefill-workers", "1", "--decode-workers", "1",
                                 "--disagg-min-tokens", "16", *limit)])


main()
