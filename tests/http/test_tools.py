"""tests/http/test_tools.py - function calling through pagoda-http.

`tools`, `tool_choice` and `parallel_tool_calls` against the official
openai client: the default model (SmolLM2, a ChatML template without a
tool format: pagoda's JSON calls), and the same model served by pagodads
of their own with --chat-format qwen2 (Qwen's <tool_call> blocks) and
llama3 (Llama 3.1's {"name", "parameters"} object), so that each format's
grammar and reader run.  The grammar makes every call well formed whatever
the model, so the checks are strict: each call names an offered function,
its arguments parse and satisfy the function's schema, streamed deltas add
up to the non-streamed answer.
"""

import json
import os
import subprocess
import time

import openai
import pytest

from test_openai import client, model, raw, start_gateway  # noqa: F401 (fixtures)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["city", "unit"],
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time now in a time zone.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["zone"],
            "properties": {"zone": {"type": "string", "maxLength": 20},
                           "seconds": {"type": "boolean"}},
        },
    },
}
NOARGS = {"type": "function", "function": {"name": "ping"}}
TOOLS = [WEATHER, TIME, NOARGS]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_call(call):
    """A call of one of TOOLS with valid arguments: (name, arguments)."""
    assert call.type == "function"
    assert call.id.startswith("call_") and len(call.id) > 8
    args = json.loads(call.function.arguments)
    name = call.function.name
    if name == "get_weather":
        assert set(args) == {"city", "unit"}, args
        assert args["city"] in ("Paris", "Oslo", "Lima")
        assert args["unit"] in ("celsius", "fahrenheit")
    elif name == "get_time":
        assert "zone" in args and set(args) <= {"zone", "seconds"}, args
        assert isinstance(args["zone"], str) and len(args["zone"]) <= 20
        assert isinstance(args.get("seconds", True), bool)
    else:
        assert name == "ping" and args == {}, (name, args)
    return name, args


def check_calls(choice, at_most=16):
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert 1 <= len(calls) <= at_most
    assert len({c.id for c in calls}) == len(calls)
    return [check_call(c) for c in calls]


def streamed(client, **kw):
    """(content, [(id, name, arguments)], finish_reason) of a stream."""
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for d in ch.delta.tool_calls or []:
            if d.id:
                assert d.index not in calls, "a call announced twice"
                assert d.function.name and d.type == "function"
                calls[d.index] = [d.id, d.function.name, d.function.arguments or ""]
            else:
                assert d.index in calls, "arguments before the call's id"
                assert d.function.name is None
                calls[d.index][2] += d.function.arguments
        finish = ch.finish_reason or finish
    return content, [tuple(calls[i]) for i in sorted(calls)], finish


def suite(client, model):
    """The checks every format must pass."""
    # required, sampled: every answer is calls of offered functions
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                       tool_choice="required", temperature=1,
                                       seed=11, n=4, max_tokens=1200)
    for ch in r.choices:
        check_calls(ch)
    # a named function
    r = client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, temperature=1, seed=2, max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [n for n, _ in check_calls(r.choices[0], at_most=1)] == ["get_time"]
    # a function without parameters takes {}
    r = client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0,
        tool_choice={"type": "function", "function": {"name": "ping"}})
    assert check_calls(r.choices[0]) == [("ping", {})]
    # one call only
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                       tool_choice="required", temperature=1, seed=4,
                                       n=3, max_tokens=300, parallel_tool_calls=False)
    for ch in r.choices:
        check_calls(ch, at_most=1)
    # streamed == not streamed
    kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
              temperature=0, max_tokens=600)
    whole = client.chat.completions.create(**kw).choices[0]
    check_calls(whole)
    content, calls, finish = streamed(client, **kw)
    assert content == "" and finish == "tool_calls"
    assert [(n, a) for _, n, a in calls] == [
        (c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    # auto: text or calls, each well formed, streamed the same
    for seed in (1, 2, 3):
        kw = dict(model=model, messages=ASK, tools=TOOLS, temperature=1, seed=seed,
                  max_tokens=600)
        ch = client.chat.completions.create(**kw).choices[0]
        if ch.message.tool_calls:
            check_calls(ch)
        else:
            assert isinstance(ch.message.content, str)
            assert ch.finish_reason in ("stop", "length")
        content, calls, finish = streamed(client, **kw)
        assert finish == ch.finish_reason
        assert content == (ch.message.content or "")
        assert [(n, a) for _, n, a in calls] == [
            (c.function.name, c.function.arguments)
            for c in ch.message.tool_calls or []]
    # the conversation goes on: the call and its result in the history
    call = whole.message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {
                "name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'},
    ]
    r = client.chat.completions.create(model=model, messages=history, tools=TOOLS,
                                       max_tokens=24, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    r = client.chat.completions.create(model=model, messages=history, tools=TOOLS,
                                       tool_choice="none", max_tokens=16, temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")
    # cut short by max_tokens: finish_reason length, what came as far as it went
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                       tool_choice="required", max_tokens=3,
                                       temperature=0)
    assert r.choices[0].finish_reason == "length"


def test_tools_json_format(client, model):
    suite(client, model)


def test_tools_auto_with_response_format(client, model):
    """auto with a json_schema: the text branch follows the schema."""
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "required": ["answer"], "additionalProperties": False,
        "properties": {"answer": {"type": "string", "maxLength": 30}}}}}
    for seed in range(4):
        ch = client.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, response_format=fmt,
            temperature=1, seed=seed, max_tokens=600).choices[0]
        if ch.message.tool_calls:
            check_calls(ch)
        elif ch.finish_reason == "stop":
            doc = json.loads(ch.message.content)
            assert set(doc) == {"answer"} and len(doc["answer"]) <= 30


def test_tool_errors(client, model):
    def refused(param, words, **kw):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model, messages=kw.pop("messages", ASK),
                                           **kw)
        assert e.value.body["param"] == param, (param, e.value.body)
        assert words in e.value.body["message"], (words, e.value.body)

    refused("tools", "must be an array", tools={"type": "function"})
    refused("tools[0].function.name", "letters, digits",
            tools=[{"type": "function", "function": {"name": "no spaces"}}])
    refused("tools[1].function.name", "a second function",
            tools=[WEATHER, WEATHER])
    refused("tools[0]", "\"type\": \"function\"",
            tools=[{"type": "retrieval", "function": {"name": "x"}}])
    refused("tools[0].function.parameters", "lookbehind",
            tools=[{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {
                    "s": {"type": "string", "pattern": "(?<=a)b"}}}}}])
    refused("tools[0].function.parameters", "JSON Schema of an object",
            tools=[{"type": "function", "function": {"name": "f",
                                                     "parameters": {"type": "string"}}}])
    refused("tool_choice", "does not offer", tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}})
    refused("tool_choice", "\"none\", \"auto\"", tools=TOOLS, tool_choice="always")
    refused("tool_choice", "needs 'tools'", tool_choice="required")
    refused("parallel_tool_calls", "true or false", tools=TOOLS,
            parallel_tool_calls="yes")
    refused("messages[1].tool_calls[0]", "not JSON", messages=ASK + [
        {"role": "assistant", "tool_calls": [{"id": "x", "type": "function",
                                              "function": {"name": "get_weather",
                                                           "arguments": "{oops"}}]}])
    refused("messages[0].tool_calls", "only an assistant", messages=[
        {"role": "user", "content": "x", "tool_calls": []}])
    refused("messages[0].name", "not supported", messages=[
        {"role": "user", "content": "x", "name": "bob"}])
    refused("functions", "not supported", functions=[WEATHER["function"]])
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="x", extra_body={"tools": TOOLS})
    assert "/v1/chat/completions" in e.value.body["message"]
    # and the gateway still answers
    assert raw("GET", "/health")[0] == 200


def formatted_gateway(tmp_path, fmt):
    """pagodad serving the default model with --chat-format fmt, and a
    pagoda-http in front of it: (daemon, gateway, port)."""
    sock = str(tmp_path / "pagodad.sock")
    log = open(tmp_path / "daemon.log", "w")
    d = subprocess.Popen([os.environ["PAGODA_DAEMON"], "--model",
                          os.environ["PAGODA_TEST_MODEL"], "--socket", sock,
                          "--foreground", "--chat-format", fmt],
                         stderr=log, stdout=log)
    for _ in range(600):
        if os.path.exists(sock) or d.poll() is not None:
            break
        time.sleep(0.05)
    time.sleep(0.2)
    if d.poll() is not None:
        raise AssertionError("pagodad --chat-format %s did not start: %s" %
                             (fmt, (tmp_path / "daemon.log").read_text()))
    old = os.environ["PAGODA_SOCKET"]
    os.environ["PAGODA_SOCKET"] = sock
    try:
        g, port = start_gateway(tmp_path)
    finally:
        os.environ["PAGODA_SOCKET"] = old
    return d, g, port


@pytest.mark.parametrize("fmt,tools", [("qwen2", "hermes"), ("llama3", "llama3")])
def test_tools_model_formats(tmp_path, fmt, tools):
    if "PAGODA_DAEMON" not in os.environ:
        pytest.skip("PAGODA_DAEMON is not set (tests/test-http.sh sets it)")
    d, g, port = formatted_gateway(tmp_path, fmt)
    try:
        out = subprocess.run([os.environ["PAGODA_CLI"], "-s", str(tmp_path / "pagodad.sock"),
                              "info"], capture_output=True, text=True, timeout=30)
        assert tools in out.stdout, out.stdout
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="unused",
                          max_retries=0, timeout=300)
        suite(c, c.models.list().data[0].id)
    finally:
        for p in (g, d):
            p.terminate()
            p.wait(timeout=30)
