#!/bin/sh
# test-python.sh - the Python binding (python/pagoda) under pytest
# (tests/python/) against a real pagodad serving the default model
# (SmolLM2-135M-Instruct in $PAGODA_MODEL_DIR) on a private socket,
# through this build's libpagoda.so.  Skips (77) without python3, without
# the model, or when libpagoda.so was built
# with a sanitizer (ctypes cannot load an ASan library into a python that
# is not instrumented).  Fails, saying to `pip install pytest`, when
# python3 has no pytest.
set -u
srcdir=${top_srcdir:-.}
pagodad=./daemon/pagodad
lib=./client/.libs/libpagoda.so

skip() { echo "SKIP: $*"; exit 77; }

command -v python3 >/dev/null 2>&1 || skip "no python3"
[ -e "$lib" ] || { echo "FAIL: $lib is not built"; exit 1; }
if command -v ldd >/dev/null 2>&1 && ldd "$lib" 2>/dev/null | grep -Eq 'lib(asan|ubsan|tsan)'; then
	skip "$lib is built with a sanitizer: ctypes cannot load it into python3"
fi
model_dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
model=$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf
[ -r "$model" ] || skip "no $model (scripts/fetch-model)"
python3 -c 'import pytest' 2>/dev/null || {
	echo "FAIL: python3 has no pytest: pip install pytest (python3 -m pip install pytest)"
	exit 1
}

tmp=$(mktemp -d)
sock=$tmp/pagodad.sock
dpid=
cleanup() {
	if [ -n "$dpid" ]; then
		kill "$dpid" 2>/dev/null
		wait "$dpid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

$pagodad --model "$model" --socket "$sock" --foreground 2>"$tmp/daemon.log" &
dpid=$!
up=0
for i in $(seq 1 300); do
	if [ -S "$sock" ] && ./client/pagoda -s "$sock" ping --count 1 >/dev/null 2>&1; then
		up=1
		break
	fi
	kill -0 "$dpid" 2>/dev/null || break
	sleep 0.1
done
if [ $up -ne 1 ]; then
	echo "FAIL: pagodad did not come up on $sock"
	cat "$tmp/daemon.log"
	exit 1
fi

abs_lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
abs_src=$(cd "$srcdir" && pwd)
PYTHONPATH=$abs_src/python${PYTHONPATH:+:$PYTHONPATH}
PAGODA_LIBRARY=$abs_lib
PAGODA_SOCKET=$sock
# for the tests that start (and kill) a daemon of their own
PAGODAD=$(pwd)/daemon/pagodad
PAGODA_MODEL_DIR=$model_dir
export PYTHONPATH PAGODA_LIBRARY PAGODA_SOCKET PAGODAD PAGODA_MODEL_DIR
# no cache files in the source tree (make distcheck's is read-only)
python3 -B -m pytest -q -p no:cacheprovider "$abs_src/tests/python"
rc=$?
if [ $rc -ne 0 ]; then
	echo "FAIL: pytest exited $rc; the daemon's log:"
	tail -n 20 "$tmp/daemon.log"
	exit 1
fi
exit 0
