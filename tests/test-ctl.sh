#!/bin/sh
# test-ctl.sh - pagodactl against a real pagodad serving a generated tiny
# model, its sockets and statistics file in a private directory:
# statistics exactly equal to a scripted load (requests, prompt and
# generated tokens, per client too), the Prometheus exposition's grammar,
# evict (pages reported and gone from the figures), drain (new requests
# refused with the daemon's PG_EBUSY message while a running one finishes
# all its tokens; drain --wait), resume, clients and disconnect, loglevel,
# stats reset, the grammar figures (samples under a grammar, and those it
# left without a token), health's exit statuses, top --once, a daemon that died or
# stopped; a client that named itself with terminal escapes shown escaped
# by clients, stats, top, metrics and --json, never raw; and, when run as
# root, a user outside the admin group refused with a message naming the
# group, both by the socket's mode and by the daemon's SO_PEERCRED check,
# a member (primary or supplementary group) let in, the statistics file
# unwritable by other users, and a non-admin shown the public figures but
# not the per-client table (pid, uid, command), which is a file of its
# own that only the admin group may read.
set -u
pagodad=./daemon/pagodad
pagoda=./client/pagoda
ctl=./client/pagodactl
gen=./tests/gen/gguf-gen

tmp=$(mktemp -d)
chmod 755 "$tmp"
sock=$tmp/p.sock
stats=$tmp/p.stats
admin=$tmp/p-admin.sock
dpid=
named=./tests/ctl_named_client
cleanup() {
	if [ -n "$dpid" ]; then
		kill "$dpid" 2>/dev/null
		wait "$dpid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"
# num FILE SECTION KEY: the number at "KEY" inside the object "SECTION"
num() {
	sed -n "s/.*\"$2\":{[^}]*\"$3\":\([0-9.]*\).*/\1/p" "$1"
}
# ntok TEXT: the prompt's tokens as the daemon counts them (BOS included)
ntok() {
	$pagoda -s "$sock" tokenize "$1" | tr -cd ',[' | wc -c
}

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }

admin_group=
if [ "$(id -u)" = 0 ] && getent group nogroup >/dev/null; then
	admin_group=nogroup	# nobody's primary group: a member to let in
fi
start_daemon() {
	$pagodad --model "$tmp/tiny.gguf" --socket "$sock" --foreground \
		--max-tokens 8000 --stats-interval-ms 50 \
		${admin_group:+--admin-group $admin_group} 2>>"$tmp/daemon.log" &
	dpid=$!
	for i in $(seq 1 100); do
		if [ -S "$sock" ] && $pagoda -s "$sock" ping --count 1 >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	echo "FAIL: pagodad did not come up on $sock"
	cat "$tmp/daemon.log"
	exit 1
}
start_daemon
c="$ctl -s $sock"

# ---- the files: where, and who may write them ----
check "the statistics file beside the socket" test -f "$stats"
check "the admin socket beside the socket" test -S "$admin"
check "the statistics file is writable by its owner only" \
	sh -c "ls -l '$stats' | grep -q '^-rw-r-----\|^-rw-r--r--'"

# ---- statistics exact under a scripted load ----
$c stats --json -i 0 >"$tmp/s0"
check "stats --json exits 0" test $? -eq 0
check "an idle daemon: nothing done yet" test "$(num "$tmp/s0" requests done)" = 0
check "stats --json is one line" test "$(wc -l <"$tmp/s0")" -eq 1

set -- "hello" "hello there" "the quick brown fox jumps over the lazy dog" \
	"one two three four five six seven eight nine ten eleven twelve" "a" "pagoda"
n_req=0; want_prompt=0; want_gen=0; k=3
for p in "$@"; do
	n=$(ntok "$p")
	want_prompt=$((want_prompt + n))
	want_gen=$((want_gen + k))
	n_req=$((n_req + 1))
	$pagoda -s "$sock" generate --temperature 0 --ignore-eos --max-tokens $k "$p" >/dev/null ||
		{ echo "FAIL: generate '$p'"; fail=1; }
	k=$((k + 4))
done
# three at once, from three clients
pids=
for i in 1 2 3; do
	$pagoda -s "$sock" generate --temperature 0 --ignore-eos --max-tokens 20 "concurrent $i" >/dev/null &
	pids="$pids $!"
	want_prompt=$((want_prompt + $(ntok "concurrent $i")))
	want_gen=$((want_gen + 20))
	n_req=$((n_req + 1))
done
# snapshots taken while the daemon writes are whole: the pages add up
torn=0
for i in $(seq 1 10); do
	$c stats --json -i 0 >"$tmp/snap"
	[ $(( $(num "$tmp/snap" kv used) + $(num "$tmp/snap" kv cached) + $(num "$tmp/snap" kv free) )) = \
	  "$(num "$tmp/snap" kv pages)" ] || torn=1
done
check "every snapshot under load adds up (used + cached + free = pages)" test $torn = 0
for p in $pids; do wait "$p" || { echo "FAIL: a concurrent generate"; fail=1; }; done

$c stats --json -i 0 >"$tmp/s1"
check "requests done = $n_req" test "$(num "$tmp/s1" requests done)" = "$n_req"
check "requests submitted = $n_req" test "$(num "$tmp/s1" requests submitted)" = "$n_req"
check "no request failed or was cancelled" \
	test "$(num "$tmp/s1" requests failed)$(num "$tmp/s1" requests cancelled)" = 00
check "prompt tokens = $want_prompt" test "$(num "$tmp/s1" tokens prompt)" = "$want_prompt"
check "generated tokens = $want_gen" test "$(num "$tmp/s1" tokens generated)" = "$want_gen"
check "nothing running or in flight" \
	test "$(num "$tmp/s1" requests running)$(num "$tmp/s1" requests inflight)" = 00
check "one time to first token per request" \
	test "$(num "$tmp/s1" time_to_first_token count)" = "$n_req"
check "inter-token latencies: one per token after the first" \
	test "$(num "$tmp/s1" inter_token_latency count)" = "$((want_gen - n_req))"
check "steps were timed" test "$(num "$tmp/s1" step_time count)" -gt 0
check "the device's compute time is there" grep -Eq '"devices":\[\{"name":"cpu:0","stage":0.*"compute_s":(0\.0*[1-9]|[1-9])' "$tmp/s1"
check "pages were cached" test "$(num "$tmp/s1" kv cached)" -gt 0
$c stats -i 0 >"$tmp/t1"
check "stats: the text names the model" grep -q "^pagodad [0-9]* serving pagoda-random" "$tmp/t1"
check "stats: latency percentiles" grep -q "time to first token *$n_req " "$tmp/t1"
$c stats -i 0.2 --json >"$tmp/r1"
check "stats -i 0.2: rates over two samples" grep -q '"rates":{"interval_s":0\.[12]' "$tmp/r1"

# ---- metrics: the exposition grammar, and the same figures ----
$c metrics >"$tmp/m"
check "metrics exits 0" test $? -eq 0
name='[a-zA-Z_:][a-zA-Z0-9_:]*'
label='[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"'
value='(-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|[-+]Inf|NaN)'
grep -Ev "^# (HELP|TYPE) $name .+\$|^$name(\{$label(,$label)*\})? $value\$" "$tmp/m" >"$tmp/bad"
check "every metrics line fits the exposition format" test ! -s "$tmp/bad"
[ -s "$tmp/bad" ] && head -5 "$tmp/bad"
check "pagoda_tokens_generated_total = $want_gen" grep -qx "pagoda_tokens_generated_total $want_gen" "$tmp/m"
check "pagoda_requests_total{outcome=\"done\"}" grep -qx "pagoda_requests_total{outcome=\"done\"} $n_req" "$tmp/m"
check "a histogram: +Inf bucket = _count" sh -c "grep -qx 'pagoda_time_to_first_token_seconds_bucket{le=\"+Inf\"} $n_req' '$tmp/m' &&
	grep -qx 'pagoda_time_to_first_token_seconds_count $n_req' '$tmp/m'"
for m in pagoda_requests_running pagoda_kv_cache_usage_ratio 'pagoda_kv_pages{state="free"}' \
	pagoda_prefix_cache_hits_total 'pagoda_device_compute_seconds_total{device="cpu:0"' \
	pagoda_device_comm_seconds_total pagoda_device_bytes_sent_total pagoda_allreduce_total; do
	check "metrics has $m" grep -qF "$m" "$tmp/m"
done
check "TYPE before each family's samples" grep -qx "# TYPE pagoda_step_seconds histogram" "$tmp/m"

# ---- evict: pages reported, and gone from the figures ----
cached=$(num "$tmp/s1" kv cached)
$c --json evict all >"$tmp/e"
check "evict all exits 0" test $? -eq 0
check "evict all: the $cached cached pages" grep -q "\"evicted_pages\":$cached," "$tmp/e"
$c stats --json -i 0 >"$tmp/s2"
check "no page cached after evict all" test "$(num "$tmp/s2" kv cached)" = 0
check "the evicted pages are counted" test "$(num "$tmp/s2" prefix_cache admin_evictions)" = "$cached"
long="the prefix of this prompt is long enough to fill more than two pages of sixteen tokens each"
$pagoda -s "$sock" generate --temperature 0 --max-tokens 2 "$long" >/dev/null
$c evict prefix "$long" >"$tmp/e2"
check "evict prefix: pages reported" grep -q "^evicted [1-9][0-9]* pages (.* tokens) by prefix" "$tmp/e2"
$c evict age 3600 >"$tmp/e3"
check "evict age: an answer" grep -q "^evicted 0 pages .* by age" "$tmp/e3"
$c evict pages x 2>/dev/null
check "evict pages x: usage error (2)" test $? -eq 2

# ---- clients, drain, resume, health ----
$c health >"$tmp/h"
check "health: healthy (0)" test $? -eq 0
check "health says healthy" grep -q "^healthy" "$tmp/h"
# a request of about 2.5 s at the speed measured above (sanitizers, load)
n_long=$(num "$tmp/s1" step_time mean_s | awk '{ n = $1 > 0 ? int(2.5 / $1) : 8000
	print (n < 1000 ? 1000 : (n > 8000 ? 8000 : n)) }')
$pagoda -s "$sock" --json generate --temperature 0 --ignore-eos --max-tokens $n_long "long run" >"$tmp/long" &
lpid=$!
running=0
for i in $(seq 1 100); do
	$c stats --json -i 0 >"$tmp/s3"
	if [ "$(num "$tmp/s3" requests running)" = 1 ]; then running=1; break; fi
	sleep 0.05
done
check "the long request runs" test $running = 1
$c clients >"$tmp/cl"
check "clients lists the running client" grep -q "^ *[0-9]* *$lpid *[0-9]* pagoda " "$tmp/cl"
check "stats' client table has it" grep -q "\"pid\":$lpid,.*\"comm\":\"pagoda\"" "$tmp/s3"
$c drain >"$tmp/d"
check "drain exits 0" test $? -eq 0
check "drain reports the running request" grep -q "^draining: .*1 running" "$tmp/d"
$pagoda -s "$sock" generate --max-tokens 2 "refused" >/dev/null 2>"$tmp/busy"
check "a new request is refused while draining (1)" test $? -eq 1
check "... with the daemon's draining message" grep -q "the daemon is draining: retry later" "$tmp/busy"
$c health >"$tmp/h2" 2>&1
check "health while draining: unhealthy (1)" test $? -eq 1
check "health says draining" grep -q "draining" "$tmp/h2"
$c metrics | grep -qx "pagoda_draining 1"
check "metrics: pagoda_draining 1" test $? -eq 0
$c drain --wait --timeout 120 >"$tmp/dw"
check "drain --wait exits 0" test $? -eq 0
check "drain --wait answers once idle" grep -q "^drained: the engine is idle" "$tmp/dw"
wait $lpid
check "the running request finished undisturbed" test $? -eq 0
check "... with all its $n_long tokens" grep -q "\"finish\":\"length\".*\"n_gen\":$n_long," "$tmp/long"
$c stats --json -i 0 >"$tmp/s4"
check "the refusal is counted" test "$(num "$tmp/s4" requests refused)" = 1
$c resume >"$tmp/rs"
check "resume exits 0" test $? -eq 0
check "resume says so" grep -q "^resumed" "$tmp/rs"
$c health >/dev/null
check "healthy again after resume (0)" test $? -eq 0
$pagoda -s "$sock" generate --max-tokens 2 "admitted" >/dev/null
check "requests are admitted after resume" test $? -eq 0

# disconnect a client that waits on a long request
$pagoda -s "$sock" generate --ignore-eos --max-tokens 8000 "to be disconnected" >/dev/null 2>"$tmp/disc" &
vpid=$!
id=
for i in $(seq 1 100); do
	id=$($c clients | awk -v p=$vpid '$2 == p { print $1 }')
	[ -n "$id" ] && break
	sleep 0.05
done
check "the client to disconnect is listed" test -n "$id"
$c clients disconnect "${id:-0}" >"$tmp/dc"
check "clients disconnect exits 0" test $? -eq 0
check "disconnect says what it did" grep -q "^client $id (pid $vpid, .*) disconnected" "$tmp/dc"
wait $vpid
check "the disconnected client fails" test $? -ne 0
$c clients disconnect 63 2>/dev/null
check "disconnecting no client: 1" test $? -eq 1
# the next client takes the freed slot, not the departed client's id
$pagoda -s "$sock" generate --ignore-eos --max-tokens 8000 "after the disconnect" >/dev/null 2>&1 &
npid=$!
nid=
for i in $(seq 1 100); do
	nid=$($c clients | awk -v p=$npid '$2 == p { print $1 }')
	[ -n "$nid" ] && break
	sleep 0.05
done
check "a later client has an id of its own ($nid, not $id)" test -n "$nid" -a "$nid" != "$id"
$c clients disconnect "$id" 2>/dev/null
check "the departed client's id reaches no one: 1" test $? -eq 1
kill "$npid" 2>/dev/null
wait "$npid" 2>/dev/null

# loglevel
$c loglevel debug >"$tmp/ll"
check "loglevel debug" grep -q "^log level debug (was info)" "$tmp/ll"
$c loglevel info >/dev/null
$c loglevel loud 2>/dev/null
check "loglevel loud: refused (1)" test $? -eq 1

# top, one frame
$c top --once >"$tmp/top"
check "top --once exits 0" test $? -eq 0
check "top --once: a frame" grep -q "^Requests: " "$tmp/top"
$c top </dev/null >"$tmp/top2"
check "top without a terminal: one frame" grep -q "^DEVICE" "$tmp/top2"

# stats reset
$c stats reset >"$tmp/sr"
check "stats reset exits 0" test $? -eq 0
$c stats --json -i 0 >"$tmp/s5"
check "reset: done 0" test "$(num "$tmp/s5" requests done)" = 0
check "reset: generated 0" test "$(num "$tmp/s5" tokens generated)" = 0
check "reset: histograms empty" test "$(num "$tmp/s5" time_to_first_token count)" = 0
$pagoda -s "$sock" generate --ignore-eos --max-tokens 5 "after the reset" >/dev/null
$c stats --json -i 0 >"$tmp/s6"
check "counting again after the reset" test "$(num "$tmp/s6" tokens generated)" = 5

# structured output: the samples run under a grammar, and those it left
# without a token (parses that double with every "a": after eleven no
# token may follow); such a sample ends its request as done, not failed
printf 'root ::= "x" e\ne ::= "a" e "b" | "a" e "c"\n' >"$tmp/stuck.gbnf"
printf 'root ::= "yes"\n' >"$tmp/yes.gbnf"
$pagoda -s "$sock" generate --temperature 0 --grammar "$tmp/stuck.gbnf" hi >/dev/null 2>&1
check "a grammar that allows no token: exit 1" test $? -eq 1
$pagoda -s "$sock" generate --n 2 --grammar "$tmp/yes.gbnf" hi >/dev/null
check "a grammar that ends: exit 0" test $? -eq 0
$c stats --json -i 0 >"$tmp/s7"
check "grammar: 3 samples under one" test "$(num "$tmp/s7" grammar samples)" = 3
check "grammar: 1 failure" test "$(num "$tmp/s7" grammar failures)" = 1
check "grammar: the requests done, none failed" \
	test "$(num "$tmp/s7" requests done)/$(num "$tmp/s7" requests failed)" = 3/0
$c stats -i 0 >"$tmp/t7"
check "stats: the grammar figures" grep -q "^grammars  *3 samples constrained, 1 ended with no token allowed" "$tmp/t7"
$c metrics >"$tmp/m7"
check "metrics: pagoda_grammar_samples_total 3" grep -qx "pagoda_grammar_samples_total 3" "$tmp/m7"
check "metrics: pagoda_grammar_failures_total 1" grep -qx "pagoda_grammar_failures_total 1" "$tmp/m7"

# ---- a client's name is shown escaped, never as itself ----
# no_ctl FILE: FILE holds no control byte but newlines (no ESC, no BEL)
no_ctl() {
	test "$(tr -cd '\000-\011\013-\037\177' <"$1" | wc -c)" -eq 0
}
# row FILE PID TEXT: FILE has a table row of PID showing TEXT
row() {
	grep " $2 " "$1" | grep -qF " $3 "
}
shown='\x1b]0;pwn\x07\x1b[2J'
mkfifo "$tmp/hold"
$named "$sock" "$shown" <"$tmp/hold" >"$tmp/named" 2>&1 &
hpid=$!
exec 7>"$tmp/hold"	# the client stays until this closes
listed=0
for i in $(seq 1 100); do
	$c clients >"$tmp/n1"
	if grep -q "^ *[0-9]* *$hpid " "$tmp/n1"; then listed=1; break; fi
	sleep 0.05
done
check "the client named with escapes is listed" test $listed = 1
$c stats -i 0 >"$tmp/n2"
$c top --once >"$tmp/n3"
$c metrics >"$tmp/n4"
$c stats --json -i 0 >"$tmp/n5"
$c --json clients >"$tmp/n6"
for f in n1 n2 n3 n4 n5 n6; do
	check "no control byte of the client's name in the output ($f)" no_ctl "$tmp/$f"
done
check "clients: the name escaped" row "$tmp/n1" "$hpid" "$shown"
check "stats: the name escaped" row "$tmp/n2" "$hpid" "$shown"
check "top: the name escaped" row "$tmp/n3" "$hpid" "$shown"
check "metrics: the label value escaped" \
	grep -qF 'comm="\\x1b]0;pwn\\x07\\x1b[2J"} 0' "$tmp/n4"
grep -Ev "^# (HELP|TYPE) $name .+\$|^$name(\{$label(,$label)*\})? $value\$" "$tmp/n4" >"$tmp/bad"
check "metrics with the hostile name still fit the exposition format" test ! -s "$tmp/bad"
check "stats --json: the name in JSON escapes" \
	grep -q "\"pid\":$hpid,[^}]*\"comm\":\"\\\\u001b]0;pwn\\\\u0007\\\\u001b\\[2J\"" "$tmp/n5"
check "clients --json: the name in JSON escapes" \
	grep -qF '"comm":"\u001b]0;pwn\u0007\u001b[2J"' "$tmp/n6"
check "the daemon's log holds no control byte" no_ctl "$tmp/daemon.log"

# ---- users outside the admin group (root only) ----
if [ "$(id -u)" = 0 ] && setpriv --reuid 65534 --regid 65534 --clear-groups $ctl --version >/dev/null 2>&1; then
	as_nobody="setpriv --reuid 65534 --regid 65533 --clear-groups"
	$as_nobody $c health >/dev/null 2>"$tmp/deny"
	check "a non-admin is refused (4)" test $? -eq 4
	check "... told which group to join" grep -q "permission denied.*group '$admin_group'" "$tmp/deny"
	chmod 0666 "$admin"	# past the socket's mode: the daemon's own check
	$as_nobody $c drain >/dev/null 2>"$tmp/deny2"
	check "the daemon refuses a non-admin (4)" test $? -eq 4
	check "... saying which group" grep -q "permission denied: pagodad's admin commands are for root and the group '$admin_group'" "$tmp/deny2"
	$c health >/dev/null
	check "the refused drain did nothing" test $? -eq 0
	setpriv --reuid 65534 --regid 65534 --clear-groups $c health >/dev/null
	check "a member of the admin group (primary) is let in" test $? -eq 0
	setpriv --reuid 65534 --regid 65533 --groups 65534 $c health >/dev/null
	check "a member of the admin group (supplementary) is let in" test $? -eq 0
	$as_nobody $c stats -i 0 >/dev/null
	check "a non-admin may read the statistics" test $? -eq 0
	$as_nobody sh -c "exec 3>>'$stats'" 2>/dev/null
	check "a non-admin cannot open the statistics for writing" test $? -ne 0
	# the per-client table: a file of its own, for the admin group
	cfile=$tmp/p.clients
	check "the per-client table: mode 0640 in the admin group" \
		sh -c "ls -l '$cfile' | grep -q '^-rw-r----- [0-9]* [^ ]* $admin_group '"
	check "the per-client table holds the client's name" grep -aqF "pwn" "$cfile"
	$as_nobody cat "$stats" >"$tmp/pub"
	check "a non-admin reads the public file" test $? -eq 0 -a -s "$tmp/pub"
	check "... which holds no client's name" sh -c "! grep -aqF pwn '$tmp/pub'"
	$as_nobody cat "$cfile" >/dev/null 2>&1
	check "a non-admin cannot read the per-client table" test $? -ne 0
	note="the per-client table (pid, uid and command of each client) is shown to members of group '$admin_group' only"
	$as_nobody $c stats -i 0 >"$tmp/ns"
	check "a non-admin's stats: exit 0" test $? -eq 0
	check "... the public figures" grep -q "^tokens .* generated" "$tmp/ns"
	check "... the clients' count" grep -q "^clients  *[1-9][0-9]* connected" "$tmp/ns"
	check "... told who may see the table" grep -qF "$note" "$tmp/ns"
	check "... and no client's pid or name" sh -c "! grep -qF -e ' $hpid ' -e 'pwn' '$tmp/ns'"
	$as_nobody $c stats --json -i 0 >"$tmp/nsj"
	check "a non-admin's stats --json: the public figures" grep -q '"tokens":{"prompt":[0-9]' "$tmp/nsj"
	check "... clients null, with the note" grep -qF "\"clients\":null,\"clients_note\":\"$note" "$tmp/nsj"
	check "... and no client's pid" sh -c "! grep -qF '\"pid\":$hpid' '$tmp/nsj'"
	$as_nobody $c top --once >"$tmp/nt"
	check "a non-admin's top: the figures" grep -q "^Requests: " "$tmp/nt"
	check "... the note" grep -qF "$note" "$tmp/nt"
	check "... and no client's pid or name" sh -c "! grep -qF -e ' $hpid ' -e 'pwn' '$tmp/nt'"
	$as_nobody $c metrics >"$tmp/nm"
	check "a non-admin's metrics: exit 0" test $? -eq 0
	check "... the public figures" grep -q "^pagoda_tokens_generated_total [0-9]" "$tmp/nm"
	check "... no per-client family" sh -c "! grep -q '^pagoda_client_\|^# TYPE pagoda_client_' '$tmp/nm'"
	grep -Ev "^# .*\$|^$name(\{$label(,$label)*\})? $value\$" "$tmp/nm" >"$tmp/bad"
	check "... in the exposition format (a comment says why)" test ! -s "$tmp/bad"
	$as_nobody $c clients >/dev/null 2>"$tmp/nc"
	check "a non-admin's clients: refused (4), naming the group" \
		sh -c "test $? -eq 4 && grep -q \"group '$admin_group'\" '$tmp/nc'"
	setpriv --reuid 65534 --regid 65534 --clear-groups $c stats -i 0 >"$tmp/ms"
	check "a member of the admin group sees the table" row "$tmp/ms" "$hpid" "$shown"
else
	echo "SKIP: the non-admin checks need root and setpriv"
fi

exec 7>&-
wait "$hpid"
check "the named client ends when told" test $? -eq 0

# ---- communication per device under a tensor-parallel plan ----
tsock=$tmp/tp.sock
$pagodad --model "$tmp/tiny.gguf" --socket "$tsock" --foreground \
	--devices cpu:0,cpu:1 --tensor-parallel 2 2>>"$tmp/daemon.log" &
tpid=$!
for i in $(seq 1 100); do
	$pagoda -s "$tsock" ping --count 1 >/dev/null 2>&1 && break
	sleep 0.1
done
$pagoda -s "$tsock" generate --ignore-eos --max-tokens 8 "split in two" >/dev/null
$ctl -s "$tsock" stats --json -i 0 >"$tmp/tp"
check "TP 2: two devices" grep -q '"devices":\[{"name":"cpu:0".*},{"name":"cpu:1","stage":0,"tp_rank":1,' "$tmp/tp"
check "TP 2: collectives counted" grep -q '"name":"cpu:1".*"all_gather":[1-9][0-9]*,' "$tmp/tp"
check "TP 2: bytes sent counted" grep -q '"name":"cpu:1".*"bytes_sent":[1-9][0-9]*,' "$tmp/tp"
check "TP 2: communication time" grep -Eq '"name":"cpu:1".*"comm_s":(0\.0*[1-9]|[1-9])' "$tmp/tp"
$ctl -s "$tsock" stats -i 0 | grep -q "^ *cpu:1 *0 *1 *0 .*%"
check "TP 2: the stats table's device line" test $? -eq 0
$ctl -s "$tsock" metrics >"$tmp/tpm"
check "TP 2: pagoda_allgather_total per device" \
	grep -q '^pagoda_allgather_total{device="cpu:1",stage="0",tp_rank="1",cp_rank="0"} [1-9]' "$tmp/tpm"
check "TP 2: pagoda_device_comm_seconds_total" \
	grep -Eq '^pagoda_device_comm_seconds_total\{device="cpu:0",.*\} (0\.0*[1-9]|[1-9])' "$tmp/tpm"
kill "$tpid"
wait "$tpid"
check "the TP daemon exits 0" test $? -eq 0

# ---- a daemon that stopped, and one that died ----
$ctl -s "$tmp/nothing.sock" stats 2>"$tmp/nd"
check "no daemon: 3" test $? -eq 3
check "no daemon: says so" grep -q "pagodad is not running" "$tmp/nd"
$ctl -s "$tmp/nothing.sock" health 2>/dev/null
check "no daemon: health 3" test $? -eq 3
kill -KILL "$dpid"
wait "$dpid" 2>/dev/null
dpid=
$c stats 2>"$tmp/dead"
check "a daemon that died: 3" test $? -eq 3
check "a daemon that died: says so" grep -q "has died" "$tmp/dead"
rm -f "$sock" "$admin"
start_daemon
$c stats -i 0 >/dev/null
check "a new daemon takes over the files" test $? -eq 0
kill "$dpid"
wait "$dpid"
check "pagodad exits 0 after SIGTERM" test $? -eq 0
dpid=
check "a clean stop removes the statistics file" test ! -e "$stats"
check "... and the admin socket" test ! -e "$admin"

check "no sanitizer report in the daemon's log" \
	test -z "$(grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$tmp/daemon.log")"

if [ $fail != 0 ]; then
	echo "--- daemon log"
	cat "$tmp/daemon.log"
fi
exit $fail
