#!/bin/sh
# test-http.sh - pagoda-http, the OpenAI-compatible gateway (http/), under
# pytest (tests/http/) with the official `openai` package: a real pagodad
# serving the default model (SmolLM2-135M-Instruct in $PAGODA_MODEL_DIR) on
# a private socket, and pagoda-http in front of it on a free port of
# 127.0.0.1.  Skips (77) when pagoda-http was not built (configure found no
# libmicrohttpd or jansson), without python3 or without the model.  Fails,
# saying what to pip install, when python3 has no pytest or openai.  Runs
# in sanitizer builds too: pagoda-http is a C program, python only speaks
# HTTP to it.
set -u
srcdir=${top_srcdir:-.}
pagodad=./daemon/pagodad
http=./http/pagoda-http

skip() { echo "SKIP: $*"; exit 77; }

[ -x "$http" ] || skip "pagoda-http is not built: install libmicrohttpd-dev and libjansson-dev (scripts/install-deps), then re-run configure"
command -v python3 >/dev/null 2>&1 || skip "no python3"
model_dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
model=$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf
[ -r "$model" ] || skip "no $model (scripts/fetch-model)"
for mod in pytest openai; do
	python3 -c "import $mod" 2>/dev/null || {
		echo "FAIL: python3 has no $mod: python3 -m pip install $mod"
		exit 1
	}
done

tmp=$(mktemp -d)
sock=$tmp/pagodad.sock
dpid=
hpid=
cleanup() {
	for pid in $hpid $dpid; do
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
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

# free_port: a port of 127.0.0.1 that nobody listens on now
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# health PORT: /health answers 200
health() {
	python3 -c 'import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).read()' "$1" 2>/dev/null
}

# pagoda-http on a free port; another one when the port was taken meanwhile
up=0
for attempt in 1 2 3 4 5; do
	port=$(free_port)
	$http --socket "$sock" --listen "127.0.0.1:$port" --max-body 65536 \
		2>"$tmp/http.log" &
	hpid=$!
	for i in $(seq 1 50); do
		kill -0 "$hpid" 2>/dev/null || break
		if health "$port"; then
			up=1
			break
		fi
		sleep 0.1
	done
	[ $up -eq 1 ] && break
	wait "$hpid" 2>/dev/null
	hpid=
	grep -q 'cannot listen' "$tmp/http.log" || break
done
if [ $up -ne 1 ]; then
	echo "FAIL: pagoda-http did not come up; its log:"
	cat "$tmp/http.log"
	exit 1
fi

abs_src=$(cd "$srcdir" && pwd)
PAGODA_HTTP_URL=http://127.0.0.1:$port
# for the tests that start a pagoda-http of their own (API keys)
PAGODA_HTTP=$(pwd)/http/pagoda-http
PAGODA_SOCKET=$sock
# for the tests that start a pagodad of their own (--chat-format)
PAGODA_DAEMON=$(pwd)/daemon/pagodad
PAGODA_CLI=$(pwd)/client/pagoda
PAGODA_TEST_MODEL=$model
export PAGODA_HTTP_URL PAGODA_HTTP PAGODA_SOCKET PAGODA_DAEMON PAGODA_CLI PAGODA_TEST_MODEL
python3 -B -m pytest -q -p no:cacheprovider "$abs_src/tests/http"
rc=$?
if [ $rc -ne 0 ]; then
	echo "FAIL: pytest exited $rc; pagoda-http's log:"
	tail -n 20 "$tmp/http.log"
	echo "the daemon's log:"
	tail -n 20 "$tmp/daemon.log"
	exit 1
fi
if ! kill -0 "$hpid" 2>/dev/null; then
	echo "FAIL: pagoda-http died during the tests; its log:"
	cat "$tmp/http.log"
	exit 1
fi
# SIGTERM: a clean exit 0 (in a sanitizer build, with no leak reported)
kill -TERM "$hpid"
wait "$hpid"
rc=$?
hpid=
if [ $rc -ne 0 ] || grep -q 'Sanitizer' "$tmp/http.log"; then
	echo "FAIL: pagoda-http exited $rc on SIGTERM; its log:"
	tail -n 40 "$tmp/http.log"
	exit 1
fi
exit 0
