#!/bin/sh
# test-notify.sh - what pagodad tells systemd, checked without systemd, on
# a generated tiny model: the sd_notify messages through a stand-in
# notification socket (tests/notify_sink; a path and an @abstract name):
# load progress in STATUS=, READY=1 once listening, "serving N clients",
# WATCHDOG=1 at half of $WATCHDOG_USEC and none while the daemon is
# stopped or when $WATCHDOG_PID names another process, RELOADING=1 and
# READY=1 on SIGHUP, STOPPING=1 on SIGTERM, every message from the main
# pid (NotifyAccess=main).  Then the log's sd-daemon priority prefixes
# when standard error is the journal ($JOURNAL_STREAM), plain lines when
# not; the tokenizer under the kernel's W^X (MemoryDenyWriteExecute=yes:
# PCRE2's JIT refused, the interpreter gives the same ids); and, with
# strace, that every system call pagodad makes is in the unit's
# SystemCallFilter=@system-service.
set -u
bin=./daemon/pagodad
client=./tests/daemon_client
sink=./tests/notify_sink
gen=./tests/gen/gguf-gen
tmp=$(mktemp -d)
# make check may itself run under systemd: none of its settings here
unset NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID JOURNAL_STREAM
pids=
cleanup() {
	for p in $pids; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"
wait_for() { # wait_for FILE PATTERN [TENTHS]: until a line matches
	n=0
	while [ $n -lt "${3:-300}" ] && ! grep -q "$2" "$1"; do
		sleep 0.1; n=$((n + 1))
	done
	grep -q "$2" "$1"
}
count() { grep -c "$2" "$1"; }

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }

start_sink() { # start_sink NAME SOCKET: lines in $tmp/NAME.nt, pid in $spid
	$sink "$2" 60 >"$tmp/$1.nt" &
	spid=$!
	pids="$pids $spid"
	wait_for "$tmp/$1.nt" '^ready$' || { echo "FAIL: notify_sink $1 did not start"; exit 1; }
}
start_daemon() { # start_daemon NAME ARGS...: pid in $dpid, log in $tmp/NAME.log
	name=$1; shift
	$bin --model "$tmp/tiny.gguf" --socket "$tmp/$name.sock" --foreground "$@" \
		2>>"$tmp/$name.log" &
	dpid=$!
	pids="$pids $dpid"
}
stop_daemon() { # stop_daemon PID: SIGTERM, its exit status in $status
	kill -TERM "$1"
	wait "$1"; status=$?
}

# ---- a path: the whole life of a daemon ----
N="$tmp/notify"
start_sink path "$N"
: >"$tmp/path.log"
NOTIFY_SOCKET=$N WATCHDOG_USEC=200000 \
	JOURNAL_STREAM=$(stat -c %d:%i "$tmp/path.log") start_daemon path
check "READY=1 arrives" wait_for "$tmp/path.nt" ' READY=1$'
NT=$tmp/path.nt
check "STATUS: loading the model, first" \
	test "$(grep -m1 STATUS= "$NT" | cut -d' ' -f3-)" = "STATUS=loading model $tmp/tiny.gguf"
check "STATUS: placing it" grep -q ' STATUS=placing .* on its devices' "$NT"
check "STATUS: serving 0 clients once ready" wait_for "$NT" ' STATUS=serving 0 clients$' 20
check "READY=1 once listening: the socket exists" test -S "$tmp/path.sock"
check "READY=1 comes once" test "$(count "$NT" ' READY=1$')" -eq 1
ready_ms=$(grep -m1 ' READY=1$' "$NT" | cut -d' ' -f1)

sleep 1.2
n=$(count "$NT" ' WATCHDOG=1$')
# every 100 ms: about 12; a busy host (sanitizers, parallel tests) may
# delay some, never double them
check "WATCHDOG=1 about every 100 ms (WATCHDOG_USEC=200000): $n in 1.2 s" \
	test "$n" -ge 4 -a "$n" -le 16
first=$(grep -m1 ' WATCHDOG=1$' "$NT" | cut -d' ' -f1)
check "the first WATCHDOG=1 within 600 ms of READY=1" test $((first - ready_ms)) -le 600

$client "$tmp/path.sock" info >/dev/null
check "a client: serving 1 client" wait_for "$NT" ' STATUS=serving 1 client$' 20
sleep 0.3
check "it leaves: serving 0 clients again" \
	test "$(grep ' STATUS=serving' "$NT" | tail -1 | cut -d' ' -f3-)" = "STATUS=serving 0 clients"

# a stopped daemon does not ping; it pings again once it runs
kill -STOP "$dpid"
sleep 0.3
before=$(count "$NT" ' WATCHDOG=1$')
sleep 0.8
check "no WATCHDOG=1 while the daemon is stopped" test "$(count "$NT" ' WATCHDOG=1$')" -le $((before + 1))
kill -CONT "$dpid"
n=0
while [ $n -lt 30 ] && [ "$(count "$NT" ' WATCHDOG=1$')" -lt $((before + 3)) ]; do
	sleep 0.1; n=$((n + 1))
done
check "WATCHDOG=1 again once it runs" test "$(count "$NT" ' WATCHDOG=1$')" -ge $((before + 3))

kill -HUP "$dpid"
check "SIGHUP: RELOADING=1" wait_for "$NT" ' RELOADING=1$' 20
check "RELOADING=1 carries MONOTONIC_USEC" grep -q ' MONOTONIC_USEC=[0-9][0-9]*$' "$NT"
check "then READY=1 again" wait_for "$NT" ' READY=1$' 1
check "READY=1 after RELOADING=1" \
	test "$(grep -n ' READY=1$' "$NT" | tail -1 | cut -d: -f1)" -gt "$(grep -n ' RELOADING=1$' "$NT" | cut -d: -f1)"

stop_daemon "$dpid"
check "SIGTERM: exit status 0" test "$status" -eq 0
wait "$spid"
check "SIGTERM: STOPPING=1 (notify_sink saw it)" test $? -eq 0
check "STOPPING=1 with a STATUS" grep -q ' STATUS=stopping (SIGTERM)$' "$NT"
check "every message from the daemon's own pid (NotifyAccess=main)" \
	test -z "$(grep -v '^ready$' "$NT" | awk -v p="$dpid" '$2 != p')"

# ---- the journal's priority prefixes ----
check "journal: info lines start with <6>" grep -q '^<6>listening on ' "$tmp/path.log"
check "journal: no plain prefix" test "$(grep -c '^pagodad: ' "$tmp/path.log")" -eq 0
check "journal: every line has a priority" test -z "$(grep -v '^<[3467]>' "$tmp/path.log")"

# ---- an abstract name; $WATCHDOG_PID of another process ----
A="@pagoda-test-notify-$$"
start_sink abstract "$A"
: >"$tmp/abstract.log"
NOTIFY_SOCKET=$A WATCHDOG_USEC=200000 WATCHDOG_PID=1 JOURNAL_STREAM=1:2 \
	start_daemon abstract --log-level debug
check "abstract socket: READY=1" wait_for "$tmp/abstract.nt" ' READY=1$'
$client "$tmp/abstract.sock" info >/dev/null
sleep 0.5
stop_daemon "$dpid"
wait "$spid"
check "abstract socket: STOPPING=1" test $? -eq 0
check "WATCHDOG_PID of another process: no WATCHDOG=1" \
	test "$(count "$tmp/abstract.nt" ' WATCHDOG=1$')" -eq 0
check "not the journal: plain lines" grep -q '^pagodad: info: listening on ' "$tmp/abstract.log"
check "not the journal: no priority prefix" test "$(grep -c '^<' "$tmp/abstract.log")" -eq 0
check "debug lines too" grep -q '^pagodad: debug: after a client left' "$tmp/abstract.log"

# ---- no NOTIFY_SOCKET: nothing changes; a dead one: logged once ----
: >"$tmp/none.log"
start_daemon none
check "without NOTIFY_SOCKET: it serves" wait_for "$tmp/none.log" "listening on .*; pid $dpid\$"
stop_daemon "$dpid"
check "without NOTIFY_SOCKET: exit 0" test "$status" -eq 0
: >"$tmp/dead.log"
NOTIFY_SOCKET=$tmp/nobody WATCHDOG_USEC=100000 start_daemon dead
check "a dead NOTIFY_SOCKET: it serves" wait_for "$tmp/dead.log" "listening on .*; pid $dpid\$"
sleep 0.5
stop_daemon "$dpid"
check "a dead NOTIFY_SOCKET: exit 0" test "$status" -eq 0
check "a dead NOTIFY_SOCKET: one warning" \
	test "$(grep -c 'cannot notify the service manager' "$tmp/dead.log")" -eq 1

# ---- MemoryDenyWriteExecute=yes: the tokenizer without PCRE2's JIT ----
./tests/mdwe_exec true 2>/dev/null; rc=$?
if [ $rc -eq 77 ]; then
	echo "SKIP: W^X: this kernel has no PR_SET_MDWE (Linux 6.3)"
else
	text="Hello, world! It's 2024: tokenizers    split\ton   spaces."
	$bin --model "$tmp/tiny.gguf" --tokenize "$text" >"$tmp/t.jit"
	./tests/mdwe_exec $bin --model "$tmp/tiny.gguf" --tokenize "$text" >"$tmp/t.mdwe"
	check "W^X: pagodad tokenizes" test $? -eq 0
	check "W^X: the same ids as with the JIT" cmp -s "$tmp/t.jit" "$tmp/t.mdwe"
fi

# ---- SystemCallFilter=@system-service: every call pagodad makes ----
expand() { # expand @GROUP: its system calls, groups expanded
	systemd-analyze syscall-filter "$1" 2>/dev/null | tail -n +2 |
	sed -e 's/^ *//' -e '/^#/d' -e '/^$/d' | while read -r s; do
		case $s in @*) expand "$s" ;; *) echo "$s" ;; esac
	done
}
if ! command -v strace >/dev/null 2>&1 || ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: system calls: needs strace and systemd-analyze"
elif ! strace -f -qq -o /dev/null true 2>/dev/null; then
	echo "SKIP: system calls: strace cannot trace here"
else
	expand @system-service | sort -u >"$tmp/allowed"
	: >"$tmp/strace.log"
	strace -f -qq -o "$tmp/strace.out" $bin --model "$tmp/tiny.gguf" \
		--socket "$tmp/st.sock" --foreground 2>>"$tmp/strace.log" &
	spid=$!
	pids="$pids $spid"
	wait_for "$tmp/strace.log" "listening on .*; pid [0-9]*$" 600
	dpid=$(sed -n 's/.*listening on .*; pid \([0-9]*\)$/\1/p' "$tmp/strace.log")
	[ -n "$dpid" ] || { echo "FAIL: pagodad did not start under strace"; cat "$tmp/strace.log"; exit 1; }
	pids="$pids $dpid"
	$client "$tmp/st.sock" generate --prompt "hi" --max-tokens 4 >/dev/null
	kill -TERM "$dpid"	# pagodad, not strace
	wait "$spid"
	sed -n 's/^[0-9]*  *\([a-z_0-9]*\)(.*/\1/p' "$tmp/strace.out" | sort -u >"$tmp/used"
	check "strace saw pagodad's calls" grep -q '^io_uring_enter$' "$tmp/used"
	outside=$(comm -23 "$tmp/used" "$tmp/allowed" | grep -v '^execve$' | tr '\n' ' ')
	check "every system call is in @system-service (outside: $outside)" test -z "$outside"
fi

exit $fail
