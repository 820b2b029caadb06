"""Fixtures for the Python binding's tests: a real pagodad.

tests/test-python.sh starts the daemon and sets $PAGODA_SOCKET (and
$PAGODA_LIBRARY, and PYTHONPATH to python/).  Run by hand, set those, or
set $PAGODAD to a pagodad binary (and $PAGODA_MODEL to a GGUF file, else
the default model in $PAGODA_MODEL_DIR) and the fixture starts one.
"""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import pagoda


def _default_model():
    d = os.environ.get("PAGODA_MODEL_DIR",
                       os.path.expanduser("~/.cache/pagoda/models"))
    return os.environ.get("PAGODA_MODEL",
                          os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="session")
def socket_path():
    """The socket of a serving pagodad."""
    sock = os.environ.get("PAGODA_SOCKET")
    if sock:
        yield sock
        return
    daemon = os.environ.get("PAGODAD")
    model = _default_model()
    if not daemon or not os.path.exists(model):
        pytest.skip("set PAGODA_SOCKET to a running pagodad's socket, or "
                    "PAGODAD to a pagodad binary (with the default model)")
    tmp = tempfile.mkdtemp()
    sock = os.path.join(tmp, "pagodad.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w")
    proc = subprocess.Popen([daemon, "--model", model, "--socket", sock,
                             "--foreground"], stderr=log)
    try:
        for _ in range(300):
            try:
                pagoda.Client(sock).close()
                break
            except pagoda.Error:
                time.sleep(0.1)
        else:
            pytest.fail("pagodad did not come up on " + sock)
        os.environ["PAGODA_SOCKET"] = sock
        yield sock
    finally:
        proc.terminate()
        proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def client(socket_path):
    """A Client connected to the test daemon."""
    with pagoda.Client(socket_path) as c:
        yield c
