"""The Python binding (python/pagoda) against a real pagodad serving the
default model (SmolLM2-135M-Instruct); tests/test-python.sh runs it."""
import asyncio
import contextlib
import ctypes
import gc
import os
import shutil
import subprocess
import sys
import time

import pytest

import pagoda
from pagoda import _lib

GREEDY = dict(temperature=0, max_tokens=12, ignore_eos=True)
PROMPT = "The capital of France is"
HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "..", "include", "pagoda.h")


def wait_idle(c, timeout=10.0):
    """Wait until the daemon runs no sequence; returns whether it did."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if c.info().n_active == 0:
            return True
        time.sleep(0.02)
    return False


# ---- the ctypes mirror against the C header ----

STRUCTS = {
    "pagoda_message": _lib.Message, "pagoda_request": _lib.Request,
    "pagoda_figures": _lib.Figures, "pagoda_logprob": _lib.Logprob,
    "pagoda_sample": _lib.Sample, "pagoda_completion": _lib.Completion,
    "pagoda_event": _lib.Event, "pagoda_model_info": _lib.ModelInfo,
    "pagoda_chat_info": _lib.ChatInfo,
}


def test_layout_matches_header(tmp_path):
    """Every struct's size and every field's offset equal the C compiler's."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not cc or not os.path.exists(HEADER):
        pytest.skip("no C compiler or no include/pagoda.h")
    lines = ['#include <stdio.h>', '#include <stddef.h>',
             f'#include "{os.path.abspath(HEADER)}"', 'int main(void) {']
    for cname, py in STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof(struct {cname}));')
        for f, _t in py._fields_:
            lines.append(f'printf("{cname}.{f} %zu\\n", '
                         f'offsetof(struct {cname}, {f}));')
    lines.append('return 0; }')
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-o", str(tmp_path / "layout"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "layout")], check=True,
                         capture_output=True, text=True).stdout
    want = {}
    for cname, py in STRUCTS.items():
        want[cname] = ctypes.sizeof(py)
        for f, _t in py._fields_:
            want[f"{cname}.{f}"] = getattr(py, f).offset
    got = {k: int(v) for k, v in (l.split() for l in out.splitlines())}
    assert got == want


def test_defines_match_header():
    text = open(HEADER).read()
    assert f'#define PAGODA_DEFAULT_SOCKET "{pagoda.DEFAULT_SOCKET}"' in text
    for name, code in pagoda.ERROR_CODES.items():
        assert f"PAGODA_{name} = {code}," in text
    # every settable field of struct pagoda_request is a parameter
    body = text[text.index("struct pagoda_request {"):]
    body = body[:body.index("};")]
    for p in pagoda.PARAMETERS:
        assert f" {p};" in body or f"*{p};" in body, p


def test_library_not_found_says_what_to_set():
    env = dict(os.environ, PAGODA_LIBRARY="/nonexistent/libpagoda.so")
    r = subprocess.run([sys.executable, "-c", "import pagoda; pagoda.Client()"],
                       env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr and "PAGODA_LIBRARY" in r.stderr


# ---- info, tokenize ----

def test_info(client):
    i = client.info()
    assert i.arch == "llama"
    assert i.n_vocab == 49152 and i.n_blocks == 30 and i.n_embd == 576
    assert i.bos >= 0 and i.eos >= 0
    assert i.n_clients >= 1 and i.max_tokens > 0 and i.max_prompt > 0
    assert (i.pp, i.tp, i.cp) == (1, 1, 1)
    assert i.model
    assert client.ping() > 0


def test_chat_info(client):
    # SmolLM2's template is ChatML without tool calls of its own
    ci = client.chat_info()
    assert (ci.format, ci.tools) == ("chatml", "json")


def test_defines_match_roles():
    text = open(HEADER).read()
    for name in ("SYSTEM", "USER", "ASSISTANT", "TOOL"):
        assert f"PAGODA_ROLE_{name} = {getattr(_lib, 'ROLE_' + name)}," in text


def test_tokenize_round_trip(client):
    text = "Hello world, how are you?"
    ids = client.tokenize(text, add_bos=False)
    assert ids and all(isinstance(t, int) for t in ids)
    assert client.detokenize(ids) == text
    # the BOS only if the model uses one (SmolLM2 does not)
    with_bos = client.tokenize(text)
    assert with_bos in (ids, [client.info().bos] + ids)
    special = client.tokenize("<|im_start|>", add_bos=False, special=True)
    assert len(special) == 1
    assert len(client.tokenize("<|im_start|>", add_bos=False)) > 1


# ---- generate, stream, chat ----

def test_generate_greedy_deterministic(client):
    a = client.generate(PROMPT, **GREEDY)
    b = client.generate(PROMPT, **GREEDY)
    assert a.text and a.text == b.text and a.ids == b.ids
    assert str(a) == a.text
    assert a.finish == "length" and len(a.ids) == 12
    assert a.figures.n_gen == 12 and a.figures.n_prompt > 0
    assert "Paris" in a.text


def test_generate_from_tokens(client):
    ids = client.tokenize(PROMPT, special=True)
    assert client.generate(ids, **GREEDY).text == client.generate(PROMPT, **GREEDY).text


def test_stream_equals_generate(client):
    want = client.generate(PROMPT, **GREEDY)
    pieces = list(client.stream(PROMPT, **GREEDY))
    assert len(pieces) > 1
    assert "".join(pieces) == want.text
    rid = client.submit(PROMPT, **GREEDY)
    evs = list(client.events(rid))
    assert [t for e in evs if e.type == "tokens" for t in e.ids] == want.ids
    assert evs[-1].type == "done" and evs[-1].last and evs[-1].finish == "length"


def test_stream_break_cancels(client):
    t = time.monotonic()
    for i, _piece in enumerate(client.stream("Tell me a long story.",
                                             max_tokens=4000, ignore_eos=True)):
        if i == 2:
            break
    # the request is cancelled: the daemon goes idle and serves another
    r = client.generate(PROMPT, **GREEDY)
    assert r.finish == "length" and r.text
    assert wait_idle(client, 5)
    assert time.monotonic() - t < 10
    # an unstarted stream that is dropped is cancelled too
    s = client.stream("Tell me a long story.", max_tokens=4000, ignore_eos=True)
    del s
    gc.collect()
    assert wait_idle(client, 5)


def test_events_cancel_explicitly(client):
    rid = client.submit("Tell me a long story.", max_tokens=4000, ignore_eos=True)
    finish = None
    for ev in client.events(rid):
        if ev.type == "tokens":
            client.cancel(rid)
        if ev.type == "done":
            finish = ev.finish
    assert finish == "cancelled"


def test_chat_system_user(client):
    msgs = [{"role": "system", "content": "You are a helpful assistant. Be brief."},
            {"role": "user", "content": "What is the capital of France?"}]
    a = client.chat(msgs, temperature=0, max_tokens=16)
    assert a.text.strip() and "Paris" in a.text
    assert client.chat([(m["role"], m["content"]) for m in msgs],
                       temperature=0, max_tokens=16).text == a.text
    assert "".join(client.stream_chat(msgs, temperature=0, max_tokens=16)) == a.text
    # a raw prompt to this instruct model ends at once; as a chat it does not
    assert a.figures.n_prompt > len(client.tokenize(msgs[1]["content"]))


def test_chat_tool_result(client):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "get_weather(city='Paris')"},
            {"role": "tool", "content": "21C, sunny"}]
    r = client.chat(msgs, temperature=0, max_tokens=8)
    assert r.finish in ("stop", "length")
    # ChatML renders it as a turn of its own: "<|im_start|>tool\n21C, sunny<|im_end|>\n"
    without = client.chat(msgs[:2], temperature=0, max_tokens=8)
    turn = len(client.tokenize("tool\n" + msgs[2]["content"], add_bos=False)) + 3
    assert r.figures.n_prompt == without.figures.n_prompt + turn
    assert client.chat([("tool", "r")], temperature=0, max_tokens=2).figures.n_prompt > 0
    with pytest.raises(ValueError, match="'tool'"):
        client.chat([{"role": "function", "content": "x"}])


def test_stop_strings(client):
    full = client.generate(PROMPT, **GREEDY).text
    stop = "population"
    assert stop in full, full
    r = client.generate(PROMPT, stop=stop, **GREEDY)
    assert r.text == full[:full.index(stop)]
    assert r.finish == "stop"
    r2 = client.generate(PROMPT, stop=["zzzz", stop], **GREEDY)
    assert r2.text == r.text
    assert "".join(client.stream(PROMPT, stop=[stop], **GREEDY)) == r.text


def test_seed_determinism(client):
    p = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=16,
             ignore_eos=True)
    a = client.generate("Once upon a time", seed=1234, **p)
    b = client.generate("Once upon a time", seed=1234, **p)
    assert a.text == b.text and a.figures.seed == 1234
    others = {client.generate("Once upon a time", seed=s, **p).text
              for s in (1, 2, 3)}
    assert len(others | {a.text}) > 1
    # a drawn seed, given back, reproduces the text
    c = client.generate("Once upon a time", **p)
    assert client.generate("Once upon a time", seed=c.figures.seed, **p).text == c.text


def test_n_samples_and_logprobs(client):
    r = client.generate(PROMPT, n=2, seed=7, n_logprobs=3, max_tokens=4,
                        ignore_eos=True)
    assert len(r.samples) == 2
    for s in r.samples:
        assert len(s.ids) == 4 and len(s.logprobs) == 4
        assert all(len(lp) == 3 for lp in s.logprobs)
        assert len(s.token_logprobs) == 4 and all(v <= 0 for v in s.token_logprobs)
    g = client.generate(PROMPT, n_logprobs=2, **GREEDY).samples[0]
    assert [lp[0][0] for lp in g.logprobs] == g.ids


# ---- errors ----

def test_unknown_kwarg_is_type_error(client):
    with pytest.raises(TypeError, match="temprature"):
        client.generate(PROMPT, temprature=0)
    with pytest.raises(TypeError, match="frobnicate"):
        client.stream(PROMPT, frobnicate=1)
    with pytest.raises(TypeError):
        client.generate(PROMPT, temperature="hot")
    with pytest.raises(ValueError, match="NUL"):
        client.generate("a\0b")


def test_bad_value_is_daemon_error(client):
    # temperature <= 0 is greedy (pagoda.h), so -1 is valid; 500 is not
    assert client.generate(PROMPT, temperature=-1, max_tokens=4,
                           ignore_eos=True).text == \
        client.generate(PROMPT, temperature=0, max_tokens=4, ignore_eos=True).text
    with pytest.raises(pagoda.Error) as e:
        client.generate(PROMPT, temperature=500)
    assert e.value.code == pagoda.ERROR_CODES["EINVAL"] and e.value.name == "EINVAL"
    assert "temperature must be in [0, 100]" in str(e.value)
    # (top_p over 1 is "off", clamped, not refused)
    with pytest.raises(pagoda.Error, match="frequency_penalty must be in"):
        list(client.stream(PROMPT, frequency_penalty=5))
    with pytest.raises(pagoda.Error, match="repeat_penalty"):
        client.generate(PROMPT, repeat_penalty=0)
    with pytest.raises(pagoda.Error, match="limit"):
        client.generate(PROMPT, max_tokens=100000000)
    with pytest.raises(pagoda.Error):
        client.chat([])
    # the client still works
    assert client.generate(PROMPT, **GREEDY).text


def test_missing_socket(tmp_path):
    with pytest.raises(pagoda.Error) as e:
        pagoda.Client(str(tmp_path / "none.sock"))
    assert e.value.name == "ECONNECT" and "pagodad" in e.value.message


def test_socket_from_environment(socket_path, monkeypatch):
    monkeypatch.setenv("PAGODA_SOCKET", socket_path)
    with pagoda.Client() as c:
        assert c.ping() > 0
    with pytest.raises(pagoda.Error, match="closed"):
        c.info()


# ---- asyncio ----

def test_asyncio(socket_path, client):
    want = client.generate(PROMPT, **GREEDY).text

    async def main():
        async with pagoda.AsyncClient(socket_path) as a:
            r = await a.generate(PROMPT, **GREEDY)
            assert r.text == want and r.finish == "length"
            pieces = [p async for p in a.stream(PROMPT, **GREEDY)]
            assert "".join(pieces) == want
            # several at once on one handle, one event loop
            rs = await asyncio.gather(*[a.generate(PROMPT, **GREEDY) for _ in range(3)],
                                      asyncio.sleep(0))
            assert [x.text for x in rs[:3]] == [want] * 3
            chat = await a.chat([{"role": "user", "content": "Hi!"}],
                                temperature=0, max_tokens=8)
            assert chat.text
            # leaving a stream early cancels it
            async with contextlib.aclosing(a.stream("Tell me a long story.",
                                                    max_tokens=4000,
                                                    ignore_eos=True)) as s:
                async for _p in s:
                    break
            assert (await a.generate(PROMPT, **GREEDY)).text == want
            with pytest.raises(pagoda.Error, match="temperature"):
                await a.generate(PROMPT, temperature=500)
            assert await a.tokenize("hi", add_bos=False)
            assert (await a.info()).n_vocab == 49152
            assert (await a.chat_info()).format == "chatml"

    asyncio.run(asyncio.wait_for(main(), 30))
    assert wait_idle(client, 5)


# ---- the daemon's death (a daemon of the test's own) ----

@pytest.fixture
def own_daemon(tmp_path):
    """A pagodad of this test's own (needs $PAGODAD), to be killed."""
    daemon = os.environ.get("PAGODAD")
    from conftest import _default_model
    model = _default_model()
    if not daemon or not os.path.exists(model):
        pytest.skip("set PAGODAD (a pagodad binary) and have the default model")
    sock = str(tmp_path / "own.sock")
    proc = subprocess.Popen([daemon, "--model", model, "--socket", sock,
                             "--foreground"], stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                pagoda.Client(sock).close()
                break
            except pagoda.Error:
                time.sleep(0.1)
        yield proc, sock
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_daemon_death(own_daemon):
    proc, sock = own_daemon
    c = pagoda.Client(sock)
    a = pagoda.AsyncClient(sock)
    s = c.stream("Tell me a long story.", max_tokens=4000, ignore_eos=True)
    next(s)

    async def consume():
        async for _p in a.stream("Tell me a long story.", max_tokens=4000,
                                 ignore_eos=True):
            if proc.poll() is None:
                proc.kill()

    with pytest.raises(pagoda.Error) as e:
        asyncio.run(asyncio.wait_for(consume(), 20))
    assert e.value.name == "ESHUTDOWN"
    with pytest.raises(pagoda.Error) as e:
        for _p in s:
            pass
    assert e.value.name == "ESHUTDOWN" and e.value.message
    with pytest.raises(pagoda.Error, match="."):
        c.info()
    c.close()
    a.close()
