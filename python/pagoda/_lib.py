"""ctypes mirror of include/pagoda.h and the loading of libpagoda.

Every structure here follows the C header field for field (order, types,
array sizes).  :func:`load` finds the library, declares every function's
prototype and checks the layout of ``struct pagoda_request`` and
``struct pagoda_model_info`` against the library itself.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_size_t, c_uint, c_uint64, c_void_p)
from typing import Optional

#: The socket used when neither the caller nor ``$PAGODA_SOCKET`` names one.
DEFAULT_SOCKET = "/run/pagoda/pagodad.sock"

#: ``pagoda_request.seed``: no seed, the daemon draws one per request.
SEED_RANDOM = (1 << 64) - 1

TOKENIZE_ADD_BOS = 1
TOKENIZE_SPECIAL = 2

ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL = 0, 1, 2, 3

FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED, FINISH_ERROR = 0, 1, 2, 3
#: the grammar allowed no token (pagoda-grammar(7))
FINISH_GRAMMAR = 4

EVENT_TOKENS, EVENT_LOGPROBS, EVENT_DONE, EVENT_ERROR = 1, 2, 3, 4

# enum types are int-sized in the C ABI this library is built for
c_enum = c_int


class Message(Structure):
    """struct pagoda_message"""
    _fields_ = [
        ("role", c_enum),
        ("content", c_char_p),
    ]


class Request(Structure):
    """struct pagoda_request"""
    _fields_ = [
        ("prompt", c_char_p),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_size_t),
        ("messages", POINTER(Message)),
        ("n_messages", c_size_t),
        ("temperature", c_float),
        ("top_k", c_int),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("repeat_last_n", c_int),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("seed", c_uint64),
        ("n_logprobs", c_int),
        ("max_tokens", c_int),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_size_t),
        ("ignore_eos", c_int),
        ("priority", c_int),
        ("n", c_int),
        ("id", c_uint64),
        ("content_special", c_int),
        ("reserved_int", c_int),
        ("grammar", c_char_p),
        ("json_schema", c_char_p),
        ("reserved", c_uint64 * 1),
    ]


class Figures(Structure):
    """struct pagoda_figures"""
    _fields_ = [
        ("queue_s", c_double),
        ("ttft_s", c_double),
        ("itl_s", c_double),
        ("n_prompt", c_uint),
        ("n_cached", c_uint),
        ("n_gen", c_uint),
        ("n_preempt", c_uint),
        ("seed", c_uint64),
    ]


class Logprob(Structure):
    """struct pagoda_logprob"""
    _fields_ = [
        ("id", c_int32),
        ("logprob", c_float),
    ]


class Sample(Structure):
    """struct pagoda_sample"""
    _fields_ = [
        ("text", POINTER(c_char)),
        ("text_len", c_size_t),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_size_t),
        ("logprobs", POINTER(Logprob)),
        ("logprobs_at", POINTER(c_size_t)),
        ("finish", c_enum),
        ("figures", Figures),
        ("token_logprobs", POINTER(c_float)),
    ]


class Completion(Structure):
    """struct pagoda_completion"""
    _fields_ = [
        ("id", c_uint64),
        ("n_samples", c_size_t),
        ("samples", POINTER(Sample)),
    ]


class Event(Structure):
    """struct pagoda_event"""
    _fields_ = [
        ("type", c_enum),
        ("id", c_uint64),
        ("sample", c_uint),
        ("last", c_int),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_size_t),
        ("text", POINTER(c_char)),
        ("text_len", c_size_t),
        ("logprobs", POINTER(Logprob)),
        ("n_logprobs", c_size_t),
        ("finish", c_enum),
        ("figures", Figures),
        ("error", c_int),
        ("emitted_ns", c_uint64),
        ("logprob", c_float),
    ]


class ModelInfo(Structure):
    """struct pagoda_model_info"""
    _fields_ = [
        ("model", c_char * 128),
        ("arch", c_char * 16),
        ("n_vocab", c_uint),
        ("n_ctx_train", c_uint),
        ("n_blocks", c_uint),
        ("n_embd", c_uint),
        ("kv_pages", c_uint),
        ("page_tokens", c_uint),
        ("bos", c_int32),
        ("eos", c_int32),
        ("generation", c_uint64),
        ("pp", c_uint),
        ("tp", c_uint),
        ("cp", c_uint),
        ("n_clients", c_uint),
        ("n_active", c_uint),
        ("client_id", c_uint),
        ("max_inflight", c_uint),
        ("max_prompt", c_uint),
        ("max_tokens", c_uint),
        ("max_payload", c_uint),
    ]


class ChatInfo(Structure):
    """struct pagoda_chat_info"""
    _fields_ = [
        ("format", c_char * 16),
        ("tools", c_char * 16),
    ]


# name: (restype, argtypes)
_PROTOTYPES = {
    "pagoda_strerror": (c_char_p, [c_int]),
    "pagoda_connect": (c_int, [c_char_p, POINTER(c_void_p)]),
    "pagoda_close": (None, [c_void_p]),
    "pagoda_last_error": (c_char_p, [c_void_p]),
    "pagoda_set_spin_us": (None, [c_void_p, c_uint]),
    "pagoda_request_init": (None, [POINTER(Request)]),
    "pagoda_finish_name": (c_char_p, [c_enum]),
    "pagoda_completion_free": (None, [POINTER(Completion)]),
    "pagoda_generate": (c_int, [c_void_p, POINTER(Request), POINTER(Completion)]),
    "pagoda_submit": (c_int, [c_void_p, POINTER(Request), POINTER(c_uint64)]),
    "pagoda_next_event": (c_int, [c_void_p, POINTER(Event), c_int]),
    "pagoda_fd": (c_int, [c_void_p]),
    "pagoda_cancel": (c_int, [c_void_p, c_uint64]),
    "pagoda_ping": (c_int, [c_void_p, POINTER(c_uint64)]),
    "pagoda_tokenize": (c_int, [c_void_p, c_char_p, c_size_t, c_uint,
                                POINTER(POINTER(c_int32)), POINTER(c_size_t)]),
    "pagoda_detokenize": (c_int, [c_void_p, POINTER(c_int32), c_size_t,
                                  POINTER(POINTER(c_char)), POINTER(c_size_t)]),
    "pagoda_model_info": (c_int, [c_void_p, POINTER(ModelInfo)]),
    "pagoda_chat_info": (c_int, [c_void_p, POINTER(ChatInfo)]),
}

_lib: Optional[ctypes.CDLL] = None
_libc: Optional[ctypes.CDLL] = None


class LibraryNotFound(OSError):
    """libpagoda.so could not be found or loaded."""


def _candidates():
    env = os.environ.get("PAGODA_LIBRARY")
    if env:
        # an explicit choice: only it
        return [env], True
    names = []
    found = ctypes.util.find_library("pagoda")
    if found:
        names.append(found)
    names += ["libpagoda.so.1", "libpagoda.so"]
    return names, False


def _check_layout(lib: ctypes.CDLL) -> None:
    """Compare ctypes' struct pagoda_request with the library's.

    pagoda_request_init() zeroes the whole C structure and sets the
    documented defaults: run it over a buffer longer than ours, filled
    with a pattern, and check that it wrote exactly sizeof(Request) bytes
    and that each default sits in the field ctypes expects.
    """
    size = ctypes.sizeof(Request)
    pad = 64
    buf = (ctypes.c_ubyte * (size + pad))(*([0xA5] * (size + pad)))
    lib.pagoda_request_init(ctypes.cast(buf, POINTER(Request)))
    raw = bytes(buf)
    req = Request.from_buffer_copy(raw[:size])
    ok = (raw[size:] == b"\xa5" * pad
          and bytes(req.reserved) == b"\0" * ctypes.sizeof(req.reserved)
          and req.reserved_int == 0
          and not req.grammar and not req.json_schema
          and abs(req.temperature - 0.8) < 1e-6 and req.top_k == 40
          and abs(req.top_p - 0.95) < 1e-6 and abs(req.min_p - 0.05) < 1e-6
          and req.repeat_penalty == 1.0 and req.repeat_last_n == 64
          and req.seed == SEED_RANDOM and req.max_tokens == 128
          and req.n == 1 and req.id == 0 and not req.prompt)
    if not ok:
        raise ImportError(
            "libpagoda's struct pagoda_request does not match this binding "
            f"({size} bytes here): the library at {lib._name!r} is of "
            "another version; install the binding of the same pagoda release")


def load() -> ctypes.CDLL:
    """Load libpagoda once and return it, with every prototype declared.

    Looks at ``$PAGODA_LIBRARY`` (a path) first, then
    ``ctypes.util.find_library("pagoda")``, then ``libpagoda.so.1``.
    Raises :class:`LibraryNotFound` saying what to set when none loads.
    """
    global _lib, _libc
    if _lib is not None:
        return _lib
    names, explicit = _candidates()
    errors = []
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append(f"{name}: {e}")
    if lib is None:
        if explicit:
            raise LibraryNotFound(
                f"cannot load $PAGODA_LIBRARY={names[0]!r}: {errors[0]}; "
                "set PAGODA_LIBRARY to the path of libpagoda.so")
        raise LibraryNotFound(
            "cannot find libpagoda (tried " + "; ".join(errors) + "): install "
            "pagoda (make install, then ldconfig) or set PAGODA_LIBRARY to the "
            "path of libpagoda.so, e.g. build/client/.libs/libpagoda.so")
    for fname, (res, args) in _PROTOTYPES.items():
        try:
            f = getattr(lib, fname)
        except AttributeError:
            raise ImportError(f"{lib._name} has no {fname}: not a libpagoda "
                              "this binding knows") from None
        f.restype = res
        f.argtypes = args
    _check_layout(lib)
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.free.restype = None
    libc.free.argtypes = [c_void_p]
    _lib, _libc = lib, libc
    return lib


def free(ptr) -> None:
    """free() memory the library handed over (tokenize, detokenize)."""
    if ptr:
        _libc.free(ctypes.cast(ptr, c_void_p))
