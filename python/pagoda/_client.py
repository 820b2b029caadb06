"""The Client and AsyncClient classes over libpagoda."""
from __future__ import annotations

import asyncio
import codecs
import collections
import ctypes
import json
import os
import weakref
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Deque, Dict, Iterable, Iterator, List,
                    Mapping, Optional, Sequence, Set, Tuple, Union)

from . import _lib
from ._lib import (EVENT_DONE, EVENT_ERROR, EVENT_LOGPROBS, EVENT_TOKENS,
                   SEED_RANDOM)

__all__ = [
    "Error", "Client", "AsyncClient", "Completion", "Sample", "Figures",
    "ModelInfo", "ChatInfo", "Event", "PARAMETERS",
]

# ---- errors ----

#: libpagoda's error codes (enum pagoda_error), by name.
ERROR_CODES = {
    "EINVAL": -1, "ETOOBIG": -2, "ELIMIT": -3, "ENOMEM": -4, "EBUSY": -5,
    "EENGINE": -6, "ENOENT": -7, "EVERSION": -8, "EACCESS": -9,
    "EPROTO": -10, "ECLIENTS": -11, "ESHUTDOWN": -12, "ECONNECT": -13,
    "ECANCELLED": -14, "EDUPLICATE": -15,
}
_CODE_NAMES = {v: k for k, v in ERROR_CODES.items()}


class Error(Exception):
    """A libpagoda or daemon error.

    ``code`` is the negative ``enum pagoda_error`` value (e.g. -1 for
    PAGODA_EINVAL), ``name`` its short name ("EINVAL"), ``message`` the
    library's or the daemon's explanation (pagoda_last_error(), or the text
    of an ERROR event), which is also ``str(error)``.
    """

    def __init__(self, code: int, message: str = "") -> None:
        self.code = int(code)
        self.name = _CODE_NAMES.get(self.code, str(self.code))
        if not message:
            message = _strerror(self.code)
        self.message = message
        super().__init__(message)

    def __repr__(self) -> str:
        return f"pagoda.Error({self.code} {self.name}: {self.message!r})"


def _strerror(code: int) -> str:
    s = _lib.load().pagoda_strerror(code)
    return s.decode("utf-8", "replace") if s else f"error {code}"


def _finish_name(f: int) -> str:
    s = _lib.load().pagoda_finish_name(f)
    return s.decode() if s else str(f)


# ---- results ----

@dataclass(frozen=True)
class Figures:
    """The daemon's figures for one sample (struct pagoda_figures).

    Times are in seconds; ``seed`` is the seed the sample drew with (the
    one given, or the one the daemon drew): passing it back reproduces the
    text.
    """
    queue_s: float
    ttft_s: float
    itl_s: float
    n_prompt: int
    n_cached: int
    n_gen: int
    n_preempt: int
    seed: int

    @classmethod
    def _from_c(cls, f: _lib.Figures) -> "Figures":
        return cls(f.queue_s, f.ttft_s, f.itl_s, f.n_prompt, f.n_cached,
                   f.n_gen, f.n_preempt, f.seed)


@dataclass(frozen=True)
class Sample:
    """One sample of a completion (struct pagoda_sample).

    ``text`` is the generated text (a stop string cut), ``ids`` the tokens,
    ``finish`` one of "stop", "length", "cancelled", "error", "grammar"
    (the grammar or JSON Schema allowed no token: the text follows it
    but may be incomplete; pagoda-grammar(7)).  With
    ``n_logprobs``, ``logprobs[i]`` is token i's top (id, log-probability)
    pairs, best first, and ``token_logprobs[i]`` its own; else both are
    None.
    """
    text: str
    ids: List[int]
    finish: str
    figures: Figures
    logprobs: Optional[List[List[Tuple[int, float]]]] = None
    token_logprobs: Optional[List[float]] = None


@dataclass(frozen=True)
class Completion:
    """What :meth:`Client.generate` and :meth:`Client.chat` return.

    ``samples`` holds the request's n samples; ``text``, ``ids``,
    ``finish`` and ``figures`` are the first sample's, and ``str()`` of a
    completion is its text.
    """
    id: int
    samples: List[Sample]

    @property
    def text(self) -> str:
        """The first sample's text."""
        return self.samples[0].text

    @property
    def ids(self) -> List[int]:
        """The first sample's token ids."""
        return self.samples[0].ids

    @property
    def finish(self) -> str:
        """The first sample's finish reason."""
        return self.samples[0].finish

    @property
    def figures(self) -> Figures:
        """The first sample's figures."""
        return self.samples[0].figures

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ModelInfo:
    """The daemon's model, plan and this connection's limits
    (struct pagoda_model_info)."""
    model: str
    arch: str
    n_vocab: int
    n_ctx_train: int
    n_blocks: int
    n_embd: int
    kv_pages: int
    page_tokens: int
    bos: int
    eos: int
    generation: int
    pp: int
    tp: int
    cp: int
    n_clients: int
    n_active: int
    client_id: int
    max_inflight: int
    max_prompt: int
    max_tokens: int
    max_payload: int


@dataclass(frozen=True)
class ChatInfo:
    """How the daemon renders chats (struct pagoda_chat_info).

    ``format`` is the chat template's format ("chatml", "qwen2", "qwen3",
    "llama3", "llama2", "gemma", "phi3"); ``tools`` how its model writes
    tool calls: "hermes" (``<tool_call>`` blocks of ``{"name": ...,
    "arguments": ...}``), "llama3" (``{"name": ..., "parameters": ...}``)
    or "json" (pagoda-http's own convention).  Both are "" when the daemon
    is too old to say.
    """
    format: str
    tools: str


@dataclass
class Event:
    """One event of a streamed request, copied out of struct pagoda_event.

    ``type`` is "tokens", "logprobs", "done" or "error".  ``text`` holds the
    raw bytes of a TOKENS event (they may end inside a UTF-8 character) or
    the daemon's message of an ERROR; ``finish`` and ``figures`` are set
    on DONE, ``error`` (a negative code) on ERROR.  ``last`` marks the
    request's last event.
    """
    type: str
    id: int
    sample: int
    last: bool
    ids: List[int] = field(default_factory=list)
    text: bytes = b""
    logprobs: List[Tuple[int, float]] = field(default_factory=list)
    logprob: float = 0.0
    finish: Optional[str] = None
    figures: Optional[Figures] = None
    error: int = 0
    emitted_ns: int = 0


_EVENT_NAMES = {EVENT_TOKENS: "tokens", EVENT_LOGPROBS: "logprobs",
                EVENT_DONE: "done", EVENT_ERROR: "error"}


def _copy_event(ev: _lib.Event) -> Event:
    out = Event(_EVENT_NAMES.get(ev.type, str(ev.type)), ev.id, ev.sample,
                bool(ev.last), emitted_ns=ev.emitted_ns)
    if ev.n_ids:
        out.ids = ev.ids[:ev.n_ids]
    if ev.type in (EVENT_TOKENS, EVENT_ERROR) and ev.text:
        out.text = ctypes.string_at(ev.text, ev.text_len)
    if ev.type == EVENT_LOGPROBS:
        out.logprobs = [(ev.logprobs[i].id, ev.logprobs[i].logprob)
                        for i in range(ev.n_logprobs)]
        out.logprob = ev.logprob
    elif ev.type == EVENT_DONE:
        out.finish = _finish_name(ev.finish)
        out.figures = Figures._from_c(ev.figures)
    elif ev.type == EVENT_ERROR:
        out.error = ev.error
    return out


def _event_error(ev: Event) -> Error:
    return Error(ev.error or ERROR_CODES["EPROTO"],
                 ev.text.decode("utf-8", "replace"))


# ---- request parameters ----

# name: (kind, C field); every field of struct pagoda_request a caller sets
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)
PARAMETERS: Dict[str, str] = {
    "temperature": "float", "top_k": "int", "top_p": "float",
    "min_p": "float", "repeat_penalty": "float", "repeat_last_n": "int",
    "presence_penalty": "float", "frequency_penalty": "float",
    "seed": "seed", "n_logprobs": "int", "max_tokens": "int",
    "stop": "stop", "ignore_eos": "bool", "priority": "int", "n": "int",
    "id": "u64", "content_special": "bool",
    "grammar": "grammar", "json_schema": "schema",
}
"""The keyword parameters of a request: struct pagoda_request's fields."""

_ROLES = {"system": _lib.ROLE_SYSTEM, "user": _lib.ROLE_USER,
          "assistant": _lib.ROLE_ASSISTANT, "tool": _lib.ROLE_TOOL}

Messages = Iterable[Union[Mapping[str, str], Tuple[str, str]]]
Prompt = Union[str, Sequence[int]]


def _cstr(s: Any, what: str) -> bytes:
    if not isinstance(s, str):
        raise TypeError(f"{what} must be a str, not {type(s).__name__}")
    b = s.encode("utf-8")
    if b"\0" in b:
        raise ValueError(f"{what} holds a NUL byte at offset {b.index(0)}")
    return b


class _Built:
    """A struct pagoda_request and the buffers it points into."""

    def __init__(self, lib, prompt: Optional[Prompt], messages: Optional[Messages],
                 params: Dict[str, Any]) -> None:
        unknown = sorted(set(params) - set(PARAMETERS))
        if unknown:
            raise TypeError("unknown request parameter%s: %s (known: %s)" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown),
                ", ".join(sorted(PARAMETERS))))
        req = _lib.Request()
        lib.pagoda_request_init(ctypes.byref(req))
        self.req = req
        self._keep: List[Any] = []
        if messages is not None:
            self._set_messages(messages)
        elif isinstance(prompt, str):
            req.prompt = _cstr(prompt, "the prompt")
            self._keep.append(req.prompt)
        elif prompt is not None:
            ids = list(prompt)
            for t in ids:
                if not isinstance(t, int) or isinstance(t, bool) or not \
                        -(1 << 31) <= t < (1 << 31):
                    raise TypeError("a prompt of tokens holds int32 ids only, "
                                    f"not {t!r}")
            arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
            self._keep.append(arr)
            req.tokens = arr
            req.n_tokens = len(ids)
        else:
            raise TypeError("no prompt given")
        for name, value in params.items():
            self._set(name, value)

    def _set_messages(self, messages: Messages) -> None:
        msgs = list(messages)
        arr = (_lib.Message * max(len(msgs), 1))()
        for i, m in enumerate(msgs):
            if isinstance(m, Mapping):
                extra = set(m) - {"role", "content"}
                if extra:
                    raise TypeError(f"message {i}: unknown keys {sorted(extra)}")
                try:
                    role, content = m["role"], m["content"]
                except KeyError as e:
                    raise TypeError(f"message {i} has no {e.args[0]!r}") from None
            else:
                role, content = m
            if role not in _ROLES:
                raise ValueError(f"message {i}: role {role!r} is not one of "
                                 "'system', 'user', 'assistant', 'tool'")
            b = _cstr(content, f"message {i}'s content")
            self._keep.append(b)
            arr[i].role = _ROLES[role]
            arr[i].content = b
        self._keep.append(arr)
        self.req.messages = arr
        self.req.n_messages = len(msgs)

    def _set(self, name: str, value: Any) -> None:
        kind = PARAMETERS[name]
        req = self.req
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number, not {value!r}")
            setattr(req, name, float(value))
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {value!r}")
            if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
                raise ValueError(f"{name}={value} does not fit a C int")
            setattr(req, name, value)
        elif kind == "bool":
            setattr(req, name, 1 if value else 0)
        elif kind in ("seed", "u64"):
            if value is None and kind == "seed":
                value = SEED_RANDOM
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {value!r}")
            if not 0 <= value < (1 << 64):
                raise ValueError(f"{name}={value} is not in 0 .. 2^64 - 1")
            setattr(req, name, value)
        elif kind == "stop":
            if value is None:
                value = []
            elif isinstance(value, str):
                value = [value]
            bs = [_cstr(s, "a stop string") for s in value]
            arr = (ctypes.c_char_p * max(len(bs), 1))(*bs)
            self._keep += [bs, arr]
            req.stop = arr
            req.n_stop = len(bs)
        elif kind == "grammar":
            if value is not None:
                b = _cstr(value, "grammar")
                self._keep.append(b)
                req.grammar = b
        elif kind == "schema":
            if value is None:
                return
            if not isinstance(value, str):
                try:
                    value = json.dumps(value)
                except (TypeError, ValueError) as e:
                    raise TypeError("json_schema must be a str of JSON or a "
                                    f"JSON-serialisable value: {e}") from None
            b = _cstr(value, "json_schema")
            self._keep.append(b)
            req.json_schema = b


# ---- the synchronous client ----

class Client:
    """A connection to pagodad (one libpagoda handle).

    ``socket`` is the daemon's socket path; None means ``$PAGODA_SOCKET``,
    else ``/run/pagoda/pagodad.sock``, as libpagoda does.  Connecting
    failures raise :class:`Error` with the library's message (ECONNECT
    when nobody listens there).

    Requests take the keyword parameters of ``struct pagoda_request``
    (see :data:`PARAMETERS`): ``temperature``, ``top_k``, ``top_p``,
    ``min_p``, ``repeat_penalty``, ``repeat_last_n``, ``presence_penalty``,
    ``frequency_penalty``, ``seed`` (None: a fresh one), ``n_logprobs``,
    ``max_tokens``, ``stop`` (a str or a list of them), ``ignore_eos``,
    ``priority``, ``n``, ``id``, ``content_special``, ``grammar`` (GBNF
    text, pagoda-grammar(7)) and ``json_schema`` (a JSON Schema as a str
    or a dict, pagoda-json-schema(7)); the defaults are
    libpagoda's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, 128
    tokens).  An unknown name raises TypeError; a bad value is refused by
    the daemon, raising :class:`Error` with its message.

    A Client is meant for one thread at a time (use one per thread): the
    library locks the handle, but the message of a failure belongs to the
    handle and a streamed request's events are read by whoever asks.  It
    is a context manager; :meth:`close` disconnects.
    """

    def __init__(self, socket: Optional[Union[str, os.PathLike]] = None) -> None:
        self._lib = _lib.load()
        self._h = ctypes.c_void_p()
        self._queues: Dict[int, Deque[Event]] = {}
        self._abandoned: Set[int] = set()
        path = None if socket is None else os.fsencode(socket)
        rc = self._lib.pagoda_connect(path, ctypes.byref(self._h))
        if rc:
            msg = self._lib.pagoda_last_error(None)
            raise Error(rc, msg.decode("utf-8", "replace") if msg else "")

    # -- plumbing --

    @property
    def _handle(self) -> ctypes.c_void_p:
        if not self._h:
            raise Error(ERROR_CODES["EINVAL"], "this pagoda.Client is closed")
        return self._h

    def _error(self, rc: int) -> Error:
        msg = self._lib.pagoda_last_error(self._h)
        return Error(rc, msg.decode("utf-8", "replace") if msg else "")

    def _check(self, rc: int) -> int:
        if rc < 0:
            raise self._error(rc)
        return rc

    def close(self) -> None:
        """Disconnect: the daemon cancels whatever is in flight.  Safe to
        call twice."""
        if getattr(self, "_h", None):
            self._lib.pagoda_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def fileno(self) -> int:
        """pagoda_fd(): readable when an event may be waiting (for event
        loops; see :class:`AsyncClient`)."""
        return self._check(self._lib.pagoda_fd(self._handle))

    def set_spin_us(self, us: int) -> None:
        """How long a waiting call spins before it sleeps
        (pagoda_set_spin_us; default 20 µs)."""
        self._lib.pagoda_set_spin_us(self._handle, int(us))

    # -- blocking round trips --

    def ping(self) -> float:
        """One round trip with no engine work; returns its time in
        seconds."""
        rtt = ctypes.c_uint64()
        self._check(self._lib.pagoda_ping(self._handle, ctypes.byref(rtt)))
        return rtt.value / 1e9

    def tokenize(self, text: str, *, add_bos: bool = True,
                 special: bool = False) -> List[int]:
        """The model's token ids of ``text``; ``add_bos``: the model's BOS
        first (if it uses one); ``special``: recognise special tokens such
        as <|im_start|>.  (The defaults are the pagoda command's.)"""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        b = text.encode("utf-8")
        flags = (_lib.TOKENIZE_ADD_BOS if add_bos else 0) | \
            (_lib.TOKENIZE_SPECIAL if special else 0)
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        self._check(self._lib.pagoda_tokenize(self._handle, b, len(b), flags,
                                              ctypes.byref(ids), ctypes.byref(n)))
        try:
            return ids[:n.value]
        finally:
            _lib.free(ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of the token ids ``ids`` (bytes that are not UTF-8,
        such as half a character, become U+FFFD)."""
        ids = list(ids)
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        text = ctypes.POINTER(ctypes.c_char)()
        n = ctypes.c_size_t()
        self._check(self._lib.pagoda_detokenize(self._handle, arr, len(ids),
                                                ctypes.byref(text), ctypes.byref(n)))
        try:
            return ctypes.string_at(text, n.value).decode("utf-8", "replace")
        finally:
            _lib.free(text)

    def info(self) -> ModelInfo:
        """The daemon's model, parallel plan, load and this connection's
        limits (pagoda_model_info)."""
        size = ctypes.sizeof(_lib.ModelInfo)
        buf = (ctypes.c_ubyte * (size + 16))(*([0x5A] * (size + 16)))
        self._check(self._lib.pagoda_model_info(
            self._handle, ctypes.cast(buf, ctypes.POINTER(_lib.ModelInfo))))
        if bytes(buf[size:]) != b"\x5a" * 16:
            raise Error(ERROR_CODES["EPROTO"], "libpagoda wrote past this "
                        "binding's struct pagoda_model_info: another version")
        mi = _lib.ModelInfo.from_buffer_copy(bytes(buf[:size]))
        vals = {}
        for name, _t in _lib.ModelInfo._fields_:
            v = getattr(mi, name)
            vals[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        return ModelInfo(**vals)

    def chat_info(self) -> ChatInfo:
        """The format the daemon renders chats in and the one its model
        writes tool calls in (pagoda_chat_info); both "" from a daemon
        too old to say."""
        ci = _lib.ChatInfo()
        self._check(self._lib.pagoda_chat_info(self._handle, ctypes.byref(ci)))
        return ChatInfo(ci.format.decode("utf-8", "replace"),
                        ci.tools.decode("utf-8", "replace"))

    # -- generation --

    def _completion(self, built: _Built) -> Completion:
        self._drain_abandoned()
        c = _lib.Completion()
        self._check(self._lib.pagoda_generate(self._handle, ctypes.byref(built.req),
                                              ctypes.byref(c)))
        try:
            samples = []
            for i in range(c.n_samples):
                s = c.samples[i]
                lps = tlps = None
                if s.logprobs_at:
                    at = s.logprobs_at[:s.n_ids + 1]
                    lps = [[(s.logprobs[j].id, s.logprobs[j].logprob)
                            for j in range(at[k], at[k + 1])]
                           for k in range(s.n_ids)]
                if s.token_logprobs:
                    tlps = s.token_logprobs[:s.n_ids]
                samples.append(Sample(
                    ctypes.string_at(s.text, s.text_len).decode("utf-8", "replace"),
                    s.ids[:s.n_ids] if s.n_ids else [], _finish_name(s.finish),
                    Figures._from_c(s.figures), lps, tlps))
            return Completion(c.id, samples)
        finally:
            self._lib.pagoda_completion_free(ctypes.byref(c))

    def generate(self, prompt: Prompt, **params: Any) -> Completion:
        """Run a request to its end and return the :class:`Completion`.

        ``prompt`` is text (special tokens recognised, the model's BOS
        added) or a sequence of token ids taken as they are.  Keyword
        parameters: see :class:`Client`.  A cancelled or failed sample,
        or one its grammar left without a token, says so in its
        ``finish``; a refused request raises
        :class:`Error`.
        """
        return self._completion(_Built(self._lib, prompt, None, params))

    def chat(self, messages: Messages, **params: Any) -> Completion:
        """The assistant's reply to a chat, rendered by the daemon with the
        model's chat template.

        ``messages`` is a list of ``{"role": ..., "content": ...}`` dicts
        (or ``(role, content)`` pairs); role is "system", "user",
        "assistant" or "tool" (a tool's result, rendered as the model's
        template renders one: see :meth:`chat_info`).  Keyword
        parameters: see :class:`Client`.
        """
        return self._completion(_Built(self._lib, None, messages, params))

    # -- streaming --

    def submit(self, prompt: Optional[Prompt] = None, *,
               messages: Optional[Messages] = None, **params: Any) -> int:
        """Send a request without waiting and return its id; read its
        events with :meth:`events`.  Give ``prompt`` or ``messages``."""
        built = _Built(self._lib, prompt, messages, params)
        self._drain_abandoned()
        rid = ctypes.c_uint64()
        self._check(self._lib.pagoda_submit(self._handle, ctypes.byref(built.req),
                                            ctypes.byref(rid)))
        self._queues[rid.value] = collections.deque()
        return rid.value

    def cancel(self, request_id: int) -> None:
        """Ask the daemon to end request ``request_id``; its running
        samples then finish "cancelled".  A request already over is not
        an error."""
        rc = self._lib.pagoda_cancel(self._handle, request_id)
        if rc < 0 and rc != ERROR_CODES["ENOENT"]:
            raise self._error(rc)

    def _dispatch(self, ev: Event) -> None:
        if ev.id in self._abandoned:
            if ev.last:
                self._abandoned.discard(ev.id)
            return
        q = self._queues.get(ev.id)
        if q is not None:
            q.append(ev)

    def _read_event(self, timeout_ms: int) -> Optional[Event]:
        ev = _lib.Event()
        rc = self._check(self._lib.pagoda_next_event(self._handle, ctypes.byref(ev),
                                                     timeout_ms))
        return _copy_event(ev) if rc else None

    def _pump(self, timeout_ms: int = 0) -> int:
        """Read what events there are (waiting up to timeout_ms for the
        first) into the queues; returns how many came."""
        n = 0
        while True:
            ev = self._read_event(timeout_ms if n == 0 else 0)
            if ev is None:
                return n
            self._dispatch(ev)
            n += 1

    def _drain_abandoned(self) -> None:
        if self._abandoned:
            self._pump(0)

    def _abandon(self, rid: int) -> None:
        q = self._queues.pop(rid, None)
        if q is not None and not any(e.last for e in q):
            self._abandoned.add(rid)
            if self._h:
                try:
                    self.cancel(rid)
                except Error:
                    pass

    def events(self, request_id: int) -> Iterator[Event]:
        """The events of a submitted request, as they come, up to its last
        (an ERROR event raises :class:`Error` instead).  Leaving the loop
        early cancels the request."""
        q = self._queues.get(request_id)
        if q is None:
            raise Error(ERROR_CODES["ENOENT"], f"no request {request_id} "
                        "submitted on this client")
        try:
            while True:
                while not q:
                    self._pump(-1)
                ev = q.popleft()
                if ev.type == "error":
                    self._queues.pop(request_id, None)
                    raise _event_error(ev)
                yield ev
                if ev.last:
                    self._queues.pop(request_id, None)
                    return
        finally:
            self._abandon(request_id)

    def stream(self, prompt: Prompt, **params: Any) -> Iterator[str]:
        """Generate and yield the text as it comes, piece by piece.

        Joined, the pieces are :meth:`generate`'s text (of sample 0; with
        ``n`` > 1 the samples' pieces interleave: use :meth:`events`).
        Leaving the loop early (break, an exception, the generator closed
        or collected) cancels the request.
        """
        rid = self.submit(prompt, **params)
        return self._watch(self._text(rid), rid)

    def stream_chat(self, messages: Messages, **params: Any) -> Iterator[str]:
        """:meth:`chat`, streamed as :meth:`stream` streams."""
        rid = self.submit(messages=messages, **params)
        return self._watch(self._text(rid), rid)

    def _watch(self, gen: Any, rid: int) -> Any:
        # a generator never started runs no finally: cancel when collected
        weakref.finalize(gen, self._abandon, rid)
        return gen

    def _text(self, rid: int) -> Iterator[str]:
        decoders: Dict[int, Any] = {}
        for ev in self.events(rid):
            if ev.type == "tokens":
                d = decoders.setdefault(
                    ev.sample, codecs.getincrementaldecoder("utf-8")("replace"))
                piece = d.decode(ev.text)
            elif ev.type == "done":
                d = decoders.pop(ev.sample, None)
                piece = d.decode(b"", final=True) if d else ""
            else:
                continue
            if piece:
                yield piece


# ---- asyncio ----

class AsyncClient:
    """A :class:`Client` for asyncio: requests are submitted at once and
    their events read when the handle's descriptor (pagoda_fd) polls
    readable, through ``loop.add_reader`` -- no thread per request.

    ``await client.generate(...)``, ``await client.chat(...)`` and ``async
    for piece in client.stream(...)`` take the same arguments as the
    Client's.  :meth:`tokenize`, :meth:`detokenize`, :meth:`info`,
    :meth:`chat_info` and :meth:`ping` are single round trips of no engine
    work, done in place.
    Use it from one event loop; ``async with AsyncClient() as c`` or
    :meth:`close` ends it.
    """

    def __init__(self, socket: Optional[Union[str, os.PathLike]] = None) -> None:
        self.client = Client(socket)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._fd = self.client.fileno()
        self._waiters: Dict[int, asyncio.Event] = {}
        self._broken = False

    def _ensure_reader(self) -> None:
        loop = asyncio.get_running_loop()
        if self._broken:
            return
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._fd, self._on_readable)
        elif self._loop is not loop:
            raise RuntimeError("an AsyncClient belongs to one event loop")

    def _on_readable(self) -> None:
        # read until pagoda_next_event() says 0, which arms the fd again
        try:
            self.client._pump(0)
        except Error:
            # the daemon is gone (or broke the protocol): the descriptor
            # stays readable, so stop watching it; every waiter wakes and
            # its next look raises the error
            self._broken = True
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            for w in self._waiters.values():
                w.set()
            return
        for rid, w in list(self._waiters.items()):
            if self.client._queues.get(rid) or rid not in self.client._queues:
                w.set()

    async def _next(self, rid: int) -> Event:
        q = self.client._queues[rid]
        while not q:
            self.client._pump(0)  # also (re)arms the descriptor
            if q:
                break
            w = self._waiters.setdefault(rid, asyncio.Event())
            w.clear()
            try:
                await w.wait()
            finally:
                self._waiters.pop(rid, None)
        return q.popleft()

    async def events(self, request_id: int) -> AsyncIterator[Event]:
        """The events of a request sent with :meth:`submit`, as
        :meth:`Client.events` gives them; leaving early cancels it."""
        self._ensure_reader()
        c = self.client
        if request_id not in c._queues:
            raise Error(ERROR_CODES["ENOENT"], f"no request {request_id} "
                        "submitted on this client")
        try:
            while True:
                ev = await self._next(request_id)
                if ev.type == "error":
                    c._queues.pop(request_id, None)
                    raise _event_error(ev)
                yield ev
                if ev.last:
                    c._queues.pop(request_id, None)
                    return
        finally:
            c._abandon(request_id)

    def submit(self, prompt: Optional[Prompt] = None, *,
               messages: Optional[Messages] = None, **params: Any) -> int:
        """:meth:`Client.submit` (it does not wait)."""
        return self.client.submit(prompt, messages=messages, **params)

    def cancel(self, request_id: int) -> None:
        """:meth:`Client.cancel`."""
        self.client.cancel(request_id)

    async def _gather(self, rid: int) -> Completion:
        texts: Dict[int, bytearray] = {}
        ids: Dict[int, List[int]] = {}
        lps: Dict[int, List[List[Tuple[int, float]]]] = {}
        tlps: Dict[int, List[float]] = {}
        done: Dict[int, Event] = {}
        async for ev in self.events(rid):
            s = ev.sample
            if ev.type == "tokens":
                texts.setdefault(s, bytearray()).extend(ev.text)
                ids.setdefault(s, []).extend(ev.ids)
            elif ev.type == "logprobs":
                lps.setdefault(s, []).append(ev.logprobs)
                tlps.setdefault(s, []).append(ev.logprob)
            elif ev.type == "done":
                done[s] = ev
        samples = []
        for s in sorted(done):
            ev = done[s]
            samples.append(Sample(bytes(texts.get(s, b"")).decode("utf-8", "replace"),
                                  ids.get(s, []), ev.finish or "", ev.figures,
                                  lps.get(s), tlps.get(s)))
        return Completion(rid, samples)

    async def generate(self, prompt: Prompt, **params: Any) -> Completion:
        """:meth:`Client.generate`, awaited."""
        return await self._gather(self.submit(prompt, **params))

    async def chat(self, messages: Messages, **params: Any) -> Completion:
        """:meth:`Client.chat`, awaited."""
        return await self._gather(self.submit(messages=messages, **params))

    async def _text(self, rid: int) -> AsyncIterator[str]:
        decoders: Dict[int, Any] = {}
        async for ev in self.events(rid):
            if ev.type == "tokens":
                d = decoders.setdefault(
                    ev.sample, codecs.getincrementaldecoder("utf-8")("replace"))
                piece = d.decode(ev.text)
            elif ev.type == "done":
                d = decoders.pop(ev.sample, None)
                piece = d.decode(b"", final=True) if d else ""
            else:
                continue
            if piece:
                yield piece

    def stream(self, prompt: Prompt, **params: Any) -> AsyncIterator[str]:
        """:meth:`Client.stream` as an async iterator (``async for``).
        Leaving the loop cancels the request once the generator is closed:
        wrap it in ``contextlib.aclosing()`` to close it at once."""
        rid = self.submit(prompt, **params)
        return self.client._watch(self._text(rid), rid)

    def stream_chat(self, messages: Messages, **params: Any) -> AsyncIterator[str]:
        """:meth:`Client.stream_chat` as an async iterator."""
        rid = self.submit(messages=messages, **params)
        return self.client._watch(self._text(rid), rid)

    async def tokenize(self, text: str, *, add_bos: bool = True,
                       special: bool = False) -> List[int]:
        """:meth:`Client.tokenize`."""
        return self.client.tokenize(text, add_bos=add_bos, special=special)

    async def detokenize(self, ids: Sequence[int]) -> str:
        """:meth:`Client.detokenize`."""
        return self.client.detokenize(ids)

    async def info(self) -> ModelInfo:
        """:meth:`Client.info`."""
        return self.client.info()

    async def chat_info(self) -> ChatInfo:
        """:meth:`Client.chat_info`."""
        return self.client.chat_info()

    async def ping(self) -> float:
        """:meth:`Client.ping`."""
        return self.client.ping()

    def close(self) -> None:
        """Stop watching the descriptor and disconnect."""
        if self._loop is not None and not self._broken:
            try:
                self._loop.remove_reader(self._fd)
            except Exception:
                pass
            self._loop = None
        self.client.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
