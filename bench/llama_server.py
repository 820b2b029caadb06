"""bench/llama_server.py - llama.cpp's llama-server as the benchmarks' baseline.

bench/serve and bench/http compare pagoda with llama-server over loopback
HTTP.  This module builds llama-server once from llama-cpp-python's sdist
(the llama.cpp it vendors; pip downloads the sdist when none is cached),
caches the binary in $PAGODA_BENCH_DIR (default ~/.cache/pagoda/bench), and
runs it for the length of a with-block.

Anything that stops the baseline from running raises Skip, whose message
says why; the benchmarks print it and report nan for the ratios.

Python's standard library only; it talks to 127.0.0.1 only.
"""

import glob
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time

SDIST_VERSION = "0.3.36"
CMAKE_OPTS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF", "-DBUILD_SHARED_LIBS=OFF",
    # offline: no web UI from npm or a Hugging Face bucket, no TLS library
    # fetched, no curl
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
]


class Skip(Exception):
    """The llama-server side cannot run; the message says why."""


def bench_dir():
    """The folder where the sdist, the build and the binary are cached."""
    return os.environ.get("PAGODA_BENCH_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "pagoda", "bench")


# ---- building llama-server ----

def find_sdist(arg, d, prog):
    """The sdist to build from: ARG, $PAGODA_LLAMA_SDIST, a cached one, or
    one pip downloads into D."""
    if arg:
        return arg
    cands = [os.environ.get("PAGODA_LLAMA_SDIST", "")]
    cands += sorted(glob.glob(os.path.join(d, "llama_cpp_python-*.tar.gz")))
    cands += [f"/tmp/sd/llama_cpp_python-{SDIST_VERSION}.tar.gz"]
    for c in cands:
        if c and os.path.isfile(c):
            return c
    print(f"{prog}: downloading the llama-cpp-python {SDIST_VERSION} sdist "
          "with pip", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--no-binary", ":all:", "-d", d,
                        f"llama-cpp-python=={SDIST_VERSION}"], check=True,
                       timeout=600, stdout=subprocess.DEVNULL)
    except (subprocess.SubprocessError, OSError) as e:
        raise Skip(f"no llama-cpp-python sdist and pip download failed ({e}); "
                   "give one with --sdist")
    got = glob.glob(os.path.join(d, f"llama_cpp_python-{SDIST_VERSION}.tar.gz"))
    if not got:
        raise Skip("pip download gave no sdist")
    return got[0]


def extract_llama(sdist, src):
    """Unpack the sdist's vendor/llama.cpp into SRC."""
    with tarfile.open(sdist) as tf:
        members = []
        for m in tf.getmembers():
            parts = m.name.split("/", 3)
            if len(parts) == 4 and parts[1:3] == ["vendor", "llama.cpp"]:
                m.name = parts[3]
                members.append(m)
        if not members:
            raise Skip(f"{sdist} has no vendor/llama.cpp")
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tf.extractall(src, members=members, **kw)


def build_llama_server(sdist, prog):
    """The path of a llama-server binary, built once (10-20 minutes on two
    cores) and cached; PROG names the benchmark in what it prints."""
    d = bench_dir()
    binary = os.path.join(d, "llama-server")
    if os.access(binary, os.X_OK):
        return binary
    for tool in ("cmake", "c++"):
        if not shutil.which(tool):
            raise Skip(f"{tool} is not installed (Debian: apt-get install "
                       "cmake g++); cannot build llama-server")
    os.makedirs(d, exist_ok=True)
    sdist = find_sdist(sdist, d, prog)
    src, bld = os.path.join(d, "llama-src"), os.path.join(d, "llama-build")
    log = os.path.join(d, "llama-server-build.log")
    print(f"{prog}: building llama-server once from {sdist} into {d} "
          f"(cmake, Release, -j2; takes 10-20 minutes on 2 cores; log: {log})",
          flush=True)
    t0 = time.time()
    if not os.path.isfile(os.path.join(src, "CMakeLists.txt")):
        extract_llama(sdist, src)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = [["cmake", "-S", src, "-B", bld] + gen + CMAKE_OPTS,
             ["cmake", "--build", bld, "--target", "llama-server", "-j2"]]
    with open(log, "w") as lf:
        for cmd in steps:
            try:
                r = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, timeout=3600)
            except subprocess.TimeoutExpired:
                raise Skip(f"building llama-server took over an hour (log: {log})")
            if r.returncode != 0:
                raise Skip(f"building llama-server failed: {' '.join(cmd[:3])} "
                           f"exited {r.returncode} (log: {log})")
    built = os.path.join(bld, "bin", "llama-server")
    if not os.access(built, os.X_OK):
        raise Skip(f"the build gave no {built} (log: {log})")
    shutil.copy2(built, binary)
    print(f"{prog}: llama-server built in {time.time() - t0:.0f} s", flush=True)
    return binary


# ---- talking HTTP ----

def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=10):
    """One request to 127.0.0.1:PORT with a JSON BODY; (status, bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_health(proc, port, what, limit=120):
    """Wait until GET /health on PORT answers 200 while PROC lives."""
    t_end = time.time() + limit
    while time.time() < t_end:
        if proc.poll() is not None:
            raise Skip(f"{what} exited ({proc.returncode}) before it was ready")
        try:
            if request(port, "GET", "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise Skip(f"{what} was not healthy within {limit} s")


def stop(proc):
    """SIGTERM PROC, SIGKILL after 10 s, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- running llama-server ----

class LlamaServer:
    """llama-server on MODEL for the length of a with-block, which gets its
    port: NP slots with continuous batching, THREADS threads, CTX tokens of
    context in all (split among the slots), CPU only.  Its log goes to
    bench_dir()/llama-server.log."""

    def __init__(self, binary, model, threads, ctx, np):
        self.port = free_port()
        self.cmd = [binary, "-m", model, "--host", "127.0.0.1",
                    "--port", str(self.port), "-np", str(np), "-cb",
                    "-t", str(threads), "-tb", str(threads), "-c", str(ctx),
                    "--no-webui", "-ngl", "0"]
        self.proc = None
        self.log = None

    def __enter__(self):
        print("llama-server:", " ".join(self.cmd), flush=True)
        os.makedirs(bench_dir(), exist_ok=True)
        self.log = open(os.path.join(bench_dir(), "llama-server.log"), "w")
        try:
            self.proc = subprocess.Popen(self.cmd, stdout=self.log,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
            wait_health(self.proc, self.port, "llama-server")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.port

    def __exit__(self, *exc):
        if self.proc is not None:
            stop(self.proc)
        if self.log is not None:
            self.log.close()
        return False
