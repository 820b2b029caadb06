#!/bin/sh
# test-client.sh - the pagoda command (and so libpagoda) against a real
# pagodad serving a generated tiny model on a private socket: greedy and
# seeded output equal to pagodad's one-shot mode, prompts from standard
# input, stop strings, n samples, --json, info, tokenize and detokenize,
# ping, chat from a pipe, SIGINT, clear errors and exit statuses, and the
# daemon's death under a waiting client.  Skips (77) while pagodad cannot
# serve (no --foreground).
set -u
pagodad=./daemon/pagodad
pagoda=./client/pagoda
gen=./tests/gen/gguf-gen

if ! $pagodad --help 2>/dev/null | grep -q -- --foreground; then
	echo "SKIP: this pagodad does not serve yet (no --foreground)"
	exit 77
fi

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
. "$(dirname "$0")/lib.sh"

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }
m="--model $tmp/tiny.gguf"

$pagodad $m --socket "$sock" --foreground 2>"$tmp/daemon.log" &
dpid=$!
up=0
for i in $(seq 1 100); do
	if [ -S "$sock" ] && $pagoda -s "$sock" ping --count 1 >/dev/null 2>&1; then
		up=1
		break
	fi
	sleep 0.1
done
if [ $up != 1 ]; then
	echo "FAIL: pagodad did not come up on $sock"
	cat "$tmp/daemon.log"
	exit 1
fi
c="$pagoda -s $sock"

# generate: greedy and seeded output equal pagodad's one-shot output
$c generate --temperature 0 --max-tokens 12 --ignore-eos "hello there" >"$tmp/g1"
check "generate exits 0" test $? -eq 0
$pagodad $m --prompt "hello there" --max-tokens 12 --temperature 0 --ignore-eos -q >"$tmp/g0"
check "greedy: the same text as pagodad --prompt" cmp -s "$tmp/g0" "$tmp/g1"
check "some text came" test -s "$tmp/g1"
printf 'hello there' | $c generate --temperature 0 --max-tokens 12 --ignore-eos >"$tmp/g2"
check "the prompt from standard input" cmp -s "$tmp/g1" "$tmp/g2"
$c generate --max-tokens 12 --seed 42 "hello there" >"$tmp/s1"
$pagodad $m --prompt "hello there" --max-tokens 12 --seed 42 -q >"$tmp/s0"
check "seeded sampling with the defaults: pagodad --prompt's text" cmp -s "$tmp/s0" "$tmp/s1"

# a stop string cut from the greedy text: the text before it, finish stop
stop=$(LC_ALL=C grep -o '[a-z][a-z]' "$tmp/g1" | head -n 1)
if [ -n "$stop" ]; then
	LC_ALL=C sed "s/$stop.*//" "$tmp/g1" | tr -d '\n' >"$tmp/want"
	$c generate --temperature 0 --max-tokens 12 --ignore-eos --stop "$stop" "hello there" >"$tmp/st"
	check "--stop '$stop': the text before it" cmp -s "$tmp/want" "$tmp/st"
	$c --json generate --temperature 0 --max-tokens 12 --ignore-eos --stop "$stop" "hello there" >"$tmp/st.json"
	check "--stop: finish stop" grep -q '"finish":"stop"' "$tmp/st.json"
fi

# --json: tokens events, then one done object with the figures
$c --json generate --temperature 0 --max-tokens 12 --ignore-eos "hello there" >"$tmp/j"
check "--json exits 0" test $? -eq 0
check "--json: tokens events" grep -q '^{"event":"tokens","id":[0-9]*,"sample":0,"ids":\[[0-9]' "$tmp/j"
check "--json: the last line is the done object" sh -c "tail -n 1 '$tmp/j' | grep -q '^{\"event\":\"done\".*\"last\":true,\"finish\":\"length\"'"
check "--json: 12 tokens generated" grep -q '"n_gen":12,' "$tmp/j"
check "--json: figures" grep -q '"ttft_s":[0-9.]*,"itl_s":[0-9.]*' "$tmp/j"

# --logprobs: one logprobs event per token, 3 entries each, the greedy
# token first with a log-probability <= 0
$c --json generate --temperature 0 --max-tokens 6 --ignore-eos --logprobs 3 "hello there" >"$tmp/lp"
check "--logprobs exits 0" test $? -eq 0
check "--logprobs: one logprobs event per token" test "$(grep -c '"event":"logprobs"' "$tmp/lp")" -eq 6
check "--logprobs: three per token, the chosen (greedy) token first" sh -c "
	grep '\"event\":\"tokens\"' '$tmp/lp' | sed 's/.*\"ids\":\[\([0-9]*\)\].*/\1/' >'$tmp/lp.ids'
	grep '\"event\":\"logprobs\"' '$tmp/lp' | sed 's/.*\"logprobs\":\[{\"id\":\([0-9]*\),\"logprob\":-\{0,1\}[0-9.e-]*}\(,{[^}]*}\)\{2\}\]}/\1/' >'$tmp/lp.top'
	cmp -s '$tmp/lp.ids' '$tmp/lp.top'"
check "--json: one event a line" test "$(grep -c '^{"event":' "$tmp/j")" -eq "$(wc -l <"$tmp/j")"

# n samples
$c generate --n 2 --max-tokens 6 --seed 3 hello >"$tmp/n"
check "--n 2: two samples" test "$(grep -c '^--- sample [01] ---$' "$tmp/n")" -eq 2
$c --json generate --n 3 --max-tokens 4 --seed 3 hello >"$tmp/n.json"
check "--n 3 --json: three done events" test "$(grep -c '"event":"done"' "$tmp/n.json")" -eq 3

# info, tokenize, detokenize
$c info >"$tmp/info"
check "info exits 0" test $? -eq 0
check "info names the model" grep -q "^model: *pagoda-random (llama)" "$tmp/info"
$c --json info >"$tmp/info.json"
check "info --json" grep -q '"n_vocab":384,' "$tmp/info.json"
check "info --json: this client, idle daemon" grep -q '"n_clients":1,"n_active":0,' "$tmp/info.json"
$c tokenize "hello world" >"$tmp/t1"
$pagodad $m --tokenize "hello world" >"$tmp/t0"
check "tokenize: pagodad --tokenize's ids" cmp -s "$tmp/t0" "$tmp/t1"
printf 'hello world\nsecond line\n' | $c tokenize >"$tmp/t2"
printf 'hello world\nsecond line\n' | $pagodad $m --tokenize-file - >"$tmp/t3"
check "tokenize from standard input: one line each" cmp -s "$tmp/t3" "$tmp/t2"
ids=$($c tokenize --no-bos "hello world" | tr -d '[],')
$c detokenize $ids >"$tmp/d"
check "detokenize gives the text back" test "$(cat "$tmp/d")" = "hello world"

# ping
$c ping --count 200 >"$tmp/p"
check "ping exits 0" test $? -eq 0
check "ping prints its summary" grep -q "^200 pings: min .* median .* p99 " "$tmp/p"

# chat from a pipe: /reset forgets, so the same turn gets the same reply
printf 'hello\n/reset\nhello\n/quit\nnever read\n' |
	$c chat --temperature 0 --max-tokens 8 --ignore-eos >"$tmp/chat"
check "chat exits 0" test $? -eq 0
check "chat: two replies" test "$(wc -l <"$tmp/chat")" -eq 2
check "chat: /reset forgets the history" test "$(sed -n 1p "$tmp/chat")" = "$(sed -n 2p "$tmp/chat")"
printf 'hello\nand then?\n' | $c --json chat --temperature 0 --max-tokens 4 >"$tmp/chat.json"
check "chat --json: a done object per turn" test "$(grep -c '"event":"done"' "$tmp/chat.json")" -eq 2

# the example program of libpagoda(3)
if [ -x ./client/example ]; then
	PAGODA_SOCKET=$sock ./client/example "hello" >"$tmp/ex"
	check "client/example runs" test $? -eq 0
fi

# errors: what went wrong, and the documented exit status
$c generate --temperature 500 hello >/dev/null 2>"$tmp/e"; rc=$?
check "a bad sampling value exits 1" test $rc -eq 1
check "a bad sampling value is named" grep -q "temperature" "$tmp/e"
$c generate --max-tokens 100000000 hello >/dev/null 2>"$tmp/e"; rc=$?
check "max-tokens over the limit exits 1" test $rc -eq 1
check "max-tokens over the limit says the limit" grep -q "limit" "$tmp/e"
$c generate --temperature abc hello 2>"$tmp/e"; rc=$?
check "a bad number exits 2" test $rc -eq 2
check "a bad number is named" grep -q -- "--temperature 'abc'" "$tmp/e"
$c frobnicate 2>/dev/null; check "an unknown command exits 2" test $? -eq 2
$pagoda -s "$tmp/none.sock" info 2>"$tmp/e"; rc=$?
check "no daemon exits 3" test $rc -eq 3
check "no daemon: says how to start it" grep -q "is pagodad running" "$tmp/e"

# SIGINT cancels the request: exit 130
$c generate --max-tokens 4000 --ignore-eos hello >/dev/null 2>&1 &
gpid=$!
sleep 0.2
kill -INT $gpid 2>/dev/null
wait $gpid; rc=$?
check "SIGINT cancels (exit 130; got $rc)" test $rc -eq 130

# the daemon dies under a waiting client: exit 4, and the message says so
$c generate --max-tokens 4000 --ignore-eos hello >/dev/null 2>"$tmp/e" &
gpid=$!
sleep 0.2
kill -9 "$dpid"
wait "$dpid" 2>/dev/null
dpid=
wait $gpid; rc=$?
check "the daemon's death: exit 4 (got $rc)" test $rc -eq 4
check "the daemon's death: says to reconnect" grep -q "stopped or restarted" "$tmp/e"

exit $fail
