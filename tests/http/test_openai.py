"""tests/http/test_openai.py - pagoda-http against the official openai client.

Run by tests/test-http.sh, which starts pagodad (the default model) and
pagoda-http (--max-body 65536) and sets PAGODA_HTTP_URL; PAGODA_HTTP and
PAGODA_SOCKET let the tests start a pagoda-http of their own (API keys).
Every generation is greedy (temperature 0) or seeded, and short.
"""

import http.client
import json
import os
import socket
import stat
import subprocess
import threading
import time
import urllib.parse

import openai
import pytest

URL = os.environ["PAGODA_HTTP_URL"]
HOST = urllib.parse.urlsplit(URL).hostname
PORT = urllib.parse.urlsplit(URL).port
MSG = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def client():
    # generous: a sanitizer build on a loaded 2-core machine takes minutes
    # for n=4 answers of 1200 tokens; every request is bounded by max_tokens
    return openai.OpenAI(base_url=URL + "/v1", api_key="unused", max_retries=0,
                         timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def raw(method, path, body=None, headers=None, port=PORT):
    """(status, headers, body bytes) of one plain HTTP request."""
    c = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def error_of(body):
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"}
    return e


def metric(name):
    _, _, body = raw("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


# ---- chat ----

def test_chat_greedy_twice(client, model):
    a = client.chat.completions.create(model=model, messages=MSG, max_tokens=12,
                                       temperature=0)
    b = client.chat.completions.create(model=model, messages=MSG, max_tokens=12,
                                       temperature=0)
    assert a.id.startswith("chatcmpl-") and a.id != b.id
    assert a.object == "chat.completion" and a.model == model
    assert a.choices[0].message.role == "assistant"
    assert a.choices[0].message.content
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].finish_reason in ("stop", "length")
    u = a.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_chat_content_parts_and_system(client, model):
    parts = [{"role": "system", "content": "You are terse."},
             {"role": "user", "content": [{"type": "text", "text": "Name three"},
                                          {"type": "text", "text": "colours."}]},
             {"role": "assistant", "content": "Red."},
             {"role": "user", "content": "More."}]
    r = client.chat.completions.create(model=model, messages=parts, max_tokens=4,
                                       temperature=0)
    assert r.choices[0].message.content is not None


def test_stream_equals_non_stream(client, model):
    ref = client.chat.completions.create(model=model, messages=MSG, max_tokens=12,
                                         temperature=0)
    chunks = list(client.chat.completions.create(
        model=model, messages=MSG, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref.choices[0].message.content
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks
                if c.choices and c.choices[0].finish_reason]
    assert finishes == [ref.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == ref.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == ref.usage.prompt_tokens


def test_stream_raw_done():
    body = json.dumps({"messages": MSG, "max_tokens": 4, "temperature": 0,
                       "stream": True})
    status, headers, data = raw("POST", "/v1/chat/completions", body,
                                {"Content-Type": "application/json"})
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = [e for e in data.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert "usage" not in first  # only with stream_options.include_usage


def test_n_samples(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=6,
                                       temperature=0.9, seed=7, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.message.content is not None for c in r.choices)
    again = client.chat.completions.create(model=model, messages=MSG, max_tokens=6,
                                           temperature=0.9, seed=7, n=2)
    assert [c.message.content for c in again.choices] == \
        [c.message.content for c in r.choices]
    chunks = list(client.chat.completions.create(
        model=model, messages=MSG, max_tokens=6, temperature=0.9, seed=7, n=2,
        stream=True))
    for i in (0, 1):
        text = "".join(c.choices[0].delta.content or "" for c in chunks
                       if c.choices and c.choices[0].index == i)
        assert text == r.choices[i].message.content


def test_stop_strings(client, model):
    ref = client.chat.completions.create(model=model, messages=MSG, max_tokens=16,
                                         temperature=0, extra_body={"ignore_eos": True})
    text = ref.choices[0].message.content
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[2]
    want = text[:text.index(stop)]
    for s in (stop, [stop, "zzzqqq"]):
        r = client.chat.completions.create(model=model, messages=MSG, max_tokens=16,
                                           temperature=0, stop=s)
        assert r.choices[0].message.content == want
        assert r.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(
        model=model, messages=MSG, max_tokens=16, temperature=0, stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


def test_logprobs(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=5,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token  # greedy: the best one
        assert t.bytes == list(t.token.encode())
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
    assert "".join(t.token for t in content) == r.choices[0].message.content
    plain = client.chat.completions.create(model=model, messages=MSG, max_tokens=5,
                                           temperature=0)
    assert plain.choices[0].logprobs is None
    chunks = list(client.chat.completions.create(
        model=model, messages=MSG, max_tokens=5, temperature=0, logprobs=True,
        top_logprobs=2, stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]


def test_max_tokens_length(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=3,
                                       temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    r = client.chat.completions.create(model=model, messages=MSG,
                                       max_completion_tokens=2, temperature=0,
                                       extra_body={"ignore_eos": True, "top_k": 5,
                                                   "min_p": 0.1, "repeat_penalty": 1.1,
                                                   "priority": 1},
                                       presence_penalty=0.5, frequency_penalty=0.5,
                                       top_p=0.9)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2


# ---- completions, models ----

def test_completions(client, model):
    r = client.completions.create(model=model, prompt="The capital of France is",
                                  max_tokens=5, temperature=0, logprobs=2)
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    c = r.choices[0]
    assert c.text and c.index == 0 and c.finish_reason in ("stop", "length")
    assert len(c.logprobs.tokens) == r.usage.completion_tokens
    assert "".join(c.logprobs.tokens) == c.text
    assert all(len(t) <= 2 for t in c.logprobs.top_logprobs)
    chunks = list(client.completions.create(model=model, prompt="The capital of France is",
                                            max_tokens=5, temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == c.text


def test_models(client, model):
    ms = client.models.list().data
    assert len(ms) == 1 and ms[0].object == "model" and ms[0].owned_by == "pagoda"
    assert client.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_health_and_metrics(client, model):
    status, _, body = raw("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    assert metric("pagoda_http_requests_total") > 0
    # pagodad's own figures, as pagodactl metrics gives them
    assert metric("pagoda_up") == 1
    _, headers, body = raw("GET", "/metrics")
    assert headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    assert 'pagoda_kv_pages{state="used"}' in text
    assert "# TYPE pagoda_time_to_first_token_seconds histogram" in text
    assert "pagoda_info{model=" in text
    before = metric("pagoda_requests_submitted_total")
    client.chat.completions.create(model=model, messages=MSG, max_tokens=2,
                                   temperature=0)
    end = time.time() + 5  # the daemon publishes its figures every step
    while metric("pagoda_requests_submitted_total") < before + 1 and time.time() < end:
        time.sleep(0.05)
    assert metric("pagoda_requests_submitted_total") >= before + 1


def test_metrics_without_the_daemons_figures(tmp_path):
    p, port = start_gateway(tmp_path, "--stats", str(tmp_path / "none.stats"))
    try:
        status, _, body = raw("GET", "/metrics", port=port)
        text = body.decode()
        assert status == 200
        assert "\npagoda_up 0\n" in text and "pagoda-http --stats" in text
        assert "pagoda_http_requests_total" in text
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0


def test_timings(client, model):
    """pagodad's own figures ride along (not OpenAI's; clients ignore them)."""
    body = json.dumps({"messages": MSG, "max_tokens": 3, "temperature": 0})
    status, _, data = raw("POST", "/v1/chat/completions", body)
    t = json.loads(data)["timings"]
    assert status == 200 and t["ttft_ms"] > 0 and t["prompt_tokens"] > 0
    assert t["queue_ms"] <= t["ttft_ms"]
    body = json.dumps({"messages": MSG, "max_tokens": 3, "temperature": 0,
                       "stream": True})
    status, _, data = raw("POST", "/v1/chat/completions", body)
    chunks = [json.loads(e[6:]) for e in data.decode().split("\n\n")
              if e.startswith("data: {")]
    timed = [c for c in chunks if "timings" in c]
    assert len(timed) == 1 and timed[0]["choices"][0]["finish_reason"]
    assert timed[0]["timings"]["ttft_ms"] > 0


# ---- errors ----

def test_unsupported_parameters(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, function_call="auto")
    assert e.value.status_code == 400 and "function_call" in str(e.value)
    assert e.value.body["param"] == "function_call"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, response_format={
            "type": "xml"})
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG,
                                       extra_body={"frobnicate": 1})
    assert "frobnicate" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])
    assert "image_url" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "function",
                                                               "content": "x"}])
    assert "function" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, temperature="hot")
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="x", echo=True)


# ---- structured output ----

PERSON = {"type": "object", "additionalProperties": False,
          "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 24},
                         "age": {"type": "integer", "minimum": 0,
                                 "maximum": 120}}}


def valid_person(text):
    doc = json.loads(text)
    assert set(doc) == {"name", "age"}, doc
    assert isinstance(doc["name"], str) and len(doc["name"]) <= 24
    assert isinstance(doc["age"], int) and 0 <= doc["age"] <= 120
    return doc


def test_response_format_json_schema(client, model):
    fmt = {"type": "json_schema",
           "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Describe a person."}],
        response_format=fmt, temperature=1, seed=5, n=2, max_tokens=80)
    for ch in r.choices:
        assert ch.finish_reason == "stop"
        valid_person(ch.message.content)
    # streamed: the same text, piece by piece
    pieces = [c.choices[0].delta.content or "" for c in
              client.chat.completions.create(
                  model=model, messages=[{"role": "user", "content": "A person"}],
                  response_format=fmt, temperature=0, max_tokens=80, stream=True)
              if c.choices]
    whole = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "A person"}],
        response_format=fmt, temperature=0, max_tokens=80)
    assert "".join(pieces) == whole.choices[0].message.content
    valid_person(whole.choices[0].message.content)


def test_response_format_json_object_and_grammar(client, model):
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give me JSON."}],
        response_format={"type": "json_object"}, temperature=0.7, seed=3,
        max_tokens=120)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.lstrip().startswith("{")
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Is water wet?"}],
        extra_body={"grammar": 'root ::= ("yes" | "no") "."'}, temperature=1)
    assert r.choices[0].message.content in ("yes.", "no.")
    assert r.choices[0].finish_reason == "stop"


def test_structured_output_errors(client, model):
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "(?<=a)b"}}}},
         "lookbehind"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
         "schema"),
        ({"extra_body": {"grammar": "root ::= undefined"}}, "never defined"),
        ({"extra_body": {"grammar": "root ::= \"a"}}, "line 1"),
        ({"extra_body": {"grammar": 'root ::= "a"'},
          "response_format": {"type": "json_object"}}, "not both"),
    ]
    for kw, words in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model, messages=MSG, **kw)
        assert words in str(e.value), (kw, str(e.value))


def test_grammar_without_a_token(client, model):
    """A grammar no token can continue (only end-of-generation fits, and
    ignore_eos forbids it): a 400 that says so, streamed as an error."""
    kw = dict(model=model, messages=MSG, max_tokens=8,
              extra_body={"grammar": 'root ::= ""', "ignore_eos": True})
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**kw)
    assert "grammar allowed no token" in str(e.value)
    status, _, body = raw("POST", "/v1/chat/completions", json.dumps(
        {"messages": MSG, "max_tokens": 8, "grammar": 'root ::= ""',
         "ignore_eos": True, "stream": True}),
        {"Content-Type": "application/json"})
    assert status in (200, 400), status
    assert b"grammar allowed no token" in body and b"[DONE]" not in body


def test_daemon_error_passed_through(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, max_tokens=4,
                                       temperature=1000)
    assert "temperature" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, max_tokens=10**8)
    assert "max_tokens" in e.value.body["message"]


def test_malformed_oversized_wrong_path():
    status, _, body = raw("POST", "/v1/chat/completions", b"{\"messages\": [",
                          {"Content-Type": "application/json"})
    assert status == 400 and error_of(body)["type"] == "invalid_request_error"
    status, _, body = raw("POST", "/v1/chat/completions", b"[1, 2]")
    assert status == 400
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 100000}]})
    status, _, body = raw("POST", "/v1/chat/completions", big)
    assert status == 413 and "max-body" in error_of(body)["message"]
    status, _, body = raw("GET", "/v1/nothing")
    assert status == 404 and error_of(body)["code"] == "not_found"
    status, headers, body = raw("GET", "/v1/chat/completions")
    assert status == 405 and headers["Allow"] == "POST"
    status, _, body = raw("GET", "/health", headers={"X-Big": "y" * 20000})
    assert status == 431 and error_of(body)
    # and the gateway still serves
    assert raw("GET", "/health")[0] == 200


def test_bad_requests_do_not_disturb_a_stream(client, model):
    """Malformed, oversized, half-sent and non-HTTP requests, while a stream
    runs: each gets its own answer (or the connection is closed), and the
    stream's tokens are exactly those it has alone."""
    kw = dict(model=model, messages=MSG, max_tokens=48, temperature=0, logprobs=True,
              extra_body={"ignore_eos": True})
    ref = [t.token for t in client.chat.completions.create(**kw).choices[0].logprobs.content]
    got, errors = [], []

    def streamer():
        try:
            for c in client.chat.completions.create(stream=True, **kw):
                if c.choices and c.choices[0].logprobs:
                    got.extend(t.token for t in c.choices[0].logprobs.content)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t = threading.Thread(target=streamer)
    t.start()
    half = socket.create_connection((HOST, PORT), timeout=30)
    half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    # not HTTP: a request line of garbage is closed at once; a TLS hello
    # (https:// to a plain port) is held until --timeout, in its own thread
    junk = socket.create_connection((HOST, PORT), timeout=30)
    junk.sendall(b"GARBAGE\r\n\r\n")
    assert junk.recv(4096) == b""
    junk.close()
    tls = socket.create_connection((HOST, PORT), timeout=30)
    tls.sendall(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32))
    for body in (b"{\"messages\": [", b"[]", json.dumps({"messages": 5}).encode(),
                 json.dumps({"messages": MSG, "n": 1000}).encode(),
                 b"\xff\xfe not json", json.dumps({"messages": MSG, "x" * 70000: 1}).encode()):
        status, _, data = raw("POST", "/v1/chat/completions", body)
        assert status in (400, 413), (status, data)
        assert error_of(data)["message"]
    assert raw("GET", "/health")[0] == 200
    half.close()
    tls.close()
    t.join(120)
    assert not errors, errors
    assert got == ref


# ---- API keys ----

def start_gateway(tmp_path, *args):
    """A pagoda-http of its own on a free port: (process, port)."""
    for _ in range(5):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        p = subprocess.Popen([os.environ["PAGODA_HTTP"], "--socket",
                              os.environ["PAGODA_SOCKET"], "--listen",
                              "127.0.0.1:%d" % port, *args],
                             stderr=subprocess.PIPE, text=True)
        for _ in range(50):
            if p.poll() is not None:
                break
            try:
                if raw("GET", "/health", port=port)[0] == 200:
                    return p, port
            except OSError:
                pass
            time.sleep(0.1)
        err = p.communicate(timeout=5)[1] if p.poll() is not None else ""
        if p.poll() is None:
            p.kill()
            p.wait()
        if "cannot listen" not in err:
            raise AssertionError("pagoda-http did not start: " + err)
    raise AssertionError("no free port")


def test_api_keys(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# the keys\nsecret-one\n  secret-two  \n")
    keys.chmod(0o600)
    p, port = start_gateway(tmp_path, "--api-keys", str(keys))
    try:
        body = json.dumps({"messages": MSG, "max_tokens": 2, "temperature": 0})
        status, headers, data = raw("POST", "/v1/chat/completions", body, port=port)
        assert status == 401 and error_of(data)["type"] == "authentication_error"
        assert headers.get("WWW-Authenticate") == "Bearer"
        status, _, _ = raw("POST", "/v1/chat/completions", body,
                           {"Authorization": "Bearer wrong"}, port=port)
        assert status == 401
        status, _, data = raw("POST", "/v1/chat/completions", body,
                              {"Authorization": "Bearer secret-two"}, port=port)
        assert status == 200 and json.loads(data)["choices"]
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port,
                          api_key="secret-one", max_retries=0)
        assert c.models.list().data
        bad = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port,
                            api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0


def test_api_keys_file_open_to_others(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("secret\n")
    keys.chmod(0o644)
    r = subprocess.run([os.environ["PAGODA_HTTP"], "--listen", "127.0.0.1:1",
                        "--api-keys", str(keys)], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode != 0
    assert "owner only" in r.stderr and "chmod 600" in r.stderr
    assert stat.S_IMODE(keys.stat().st_mode) == 0o644


# ---- a client that goes away ----

def wait_idle(timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        _, _, body = raw("GET", "/health")
        h = json.loads(body)
        if h["active"] == 0 and h["in_flight"] == 0:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_cancels(client, model, stream):
    before = metric("pagoda_http_disconnects_total")
    body = json.dumps({"messages": MSG, "max_tokens": 4000, "temperature": 0,
                       "ignore_eos": True, "stream": stream}).encode()
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    if stream:
        got = b""
        while got.count(b"data: ") < 3:  # the role chunk and two tokens
            d = s.recv(4096)
            assert d, got
            got += d
    else:
        time.sleep(0.5)
        _, _, h = raw("GET", "/health")
        assert json.loads(h)["in_flight"] == 1
    t0 = time.time()
    s.close()
    assert wait_idle(), "the request was not cancelled"
    assert time.time() - t0 < 5
    assert metric("pagoda_http_disconnects_total") == before + 1
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=3,
                                       temperature=0)
    assert r.choices[0].message.content is not None


def kv_used():
    return metric('pagoda_kv_pages{state="used"}')


def wait_for(cond, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


KILLED_CLIENT = r"""
import socket, sys
body = sys.argv[3].encode()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
          % len(body) + body)
got = b""
while got.count(b"data: ") < 4:
    d = s.recv(4096)
    if not d:
        sys.exit("the stream ended early: %r" % got)
    got += d
print("streaming", flush=True)
sys.stdin.read()
"""


def test_kill9_mid_stream_frees_request_and_pages(client, model):
    """A client process killed with SIGKILL mid-stream: its request ends in
    the daemon and its KV pages go back, and the gateway serves on."""
    assert wait_idle()
    assert wait_for(lambda: kv_used() == 0), "pages in use before the test"
    before = metric("pagoda_http_disconnects_total")
    body = json.dumps({"messages": MSG, "max_tokens": 4000, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    p = subprocess.Popen(["python3", "-c", KILLED_CLIENT, HOST, str(PORT), body],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "streaming\n"
        assert wait_for(lambda: kv_used() > 0), "the stream holds no pages"
        p.kill()
        p.wait(timeout=10)
        t0 = time.time()
        assert wait_idle(), "the request was not cancelled"
        assert wait_for(lambda: kv_used() == 0), "its pages were not freed"
        assert time.time() - t0 < 5
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert metric("pagoda_http_disconnects_total") == before + 1
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=3,
                                       temperature=0)
    assert r.choices[0].message.content is not None


# ---- several clients at once ----

LOAD_PROMPTS = ["Name three colours.", "Count to five.", "What is a cat?",
                "Say hello in French."]


def test_load_32_clients_8_requests(client, model):
    """32 clients x 8 requests at once, streaming and not: every request is
    answered, each with exactly its greedy tokens (none lost, none twice)."""
    def ask(prompt, stream):
        kw = dict(model=model, messages=[{"role": "user", "content": prompt}],
                  max_tokens=8, temperature=0, logprobs=True,
                  extra_body={"ignore_eos": True})
        if not stream:
            r = client.chat.completions.create(**kw)
            return ([t.token for t in r.choices[0].logprobs.content],
                    r.choices[0].message.content, r.usage.completion_tokens)
        chunks = list(client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kw))
        toks = [t.token for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return toks, text, chunks[-1].usage.completion_tokens

    ref = {p: ask(p, False) for p in LOAD_PROMPTS}
    assert all(len(r[0]) == 8 and r[2] == 8 for r in ref.values())
    got, errors = [], []
    lock = threading.Lock()

    def worker(k):
        for i in range(8):
            prompt = LOAD_PROMPTS[(k + i) % len(LOAD_PROMPTS)]
            try:
                r = ask(prompt, (k + i) % 2 == 1)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                got.append((prompt, r))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert len(got) == 32 * 8
    for prompt, r in got:
        assert r == ref[prompt], (prompt, r, ref[prompt])
    assert wait_idle()
    assert wait_for(lambda: kv_used() == 0)


def test_concurrent(client, model):
    ref = client.chat.completions.create(model=model, messages=MSG, max_tokens=6,
                                         temperature=0, extra_body={"ignore_eos": True})
    results, errors = [], []

    def worker(k):
        try:
            for i in range(2):
                if (k + i) % 2:
                    chunks = list(client.chat.completions.create(
                        model=model, messages=MSG, max_tokens=6, temperature=0,
                        stream=True, stream_options={"include_usage": True},
                        extra_body={"ignore_eos": True}))
                    results.append(chunks[-1].usage.completion_tokens)
                else:
                    r = client.chat.completions.create(
                        model=model, messages=MSG, max_tokens=6, temperature=0,
                        extra_body={"ignore_eos": True})
                    results.append(r.usage.completion_tokens)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert results == [ref.usage.completion_tokens] * 16
    assert wait_idle()
