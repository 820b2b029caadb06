#!/bin/sh
# test-client.sh - the pagoda command (and so libpagoda) against a real
# pagodad serving a generated tiny model on a private socket: greedy and
# seeded output equal to pagodad's one-shot mode, prompts from standard
# input, stop strings, n samples, --json, info, tokenize and detokenize,
# ping, chat from a pipe, SIGINT, clear errors and exit statuses, and the
# daemon's death under a waiting client; seeds the daemon draws, the
# sampled token's log-probability, generate --chat, NUL bytes refused,
# and a chat that outgrows a small KV pool; a grammar that allows no token
# (generate, --json and pagodad's one-shot: the text it had, a message,
# exit 1; the daemon's log).  With SmolLM2-135M-Instruct in
# $PAGODA_MODEL_DIR, also an instruct model with and without --chat.
# Skips (77) while pagodad cannot serve (no --foreground).
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
xpid=
cleanup() {
	for pid in $dpid $xpid; do
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }
m="--model $tmp/tiny.gguf"

# wait_up SOCKET LOG: wait for a daemon to answer on SOCKET, or fail
wait_up() {
	for i in $(seq 1 300); do
		if [ -S "$1" ] && $pagoda -s "$1" ping --count 1 >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	echo "FAIL: pagodad did not come up on $1"
	cat "$2"
	exit 1
}

$pagodad $m --socket "$sock" --foreground 2>"$tmp/daemon.log" &
dpid=$!
wait_up "$sock" "$tmp/daemon.log"
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
# lp_own FILE: "OWN TOP" for each logprobs event: the sampled token's own
# log-probability, and the top entry of the same id's (or "-" when the
# token is not among the top)
lp_own() {
	grep '"event":"logprobs"' "$1" | awk '{
		tok = $0; sub(/.*"token":/, "", tok); sub(/,.*/, "", tok)
		own = $0; sub(/.*"token":[0-9]*,"logprob":/, "", own); sub(/,.*/, "", own)
		top = "-"; rest = $0; sub(/.*"logprobs":\[/, "", rest)
		n = split(rest, e, /\},?\{?/)
		for (i = 1; i <= n; i++) {
			id = e[i]; sub(/.*"id":/, "", id); sub(/,.*/, "", id)
			v = e[i]; sub(/.*"logprob":/, "", v)
			if (id == tok && v != "" && v != "]") top = v
		}
		print own, top
	}'
}
lp_own "$tmp/lp" >"$tmp/lp.own"
check "--logprobs: each event carries the token's own log-probability" test "$(grep -c -- '^-*[0-9.e-]* ' "$tmp/lp.own")" -eq 6
check "--logprobs: greedy: the token's own is the top entry's" awk '$1 != $2 { bad = 1 } END { exit bad || NR != 6 }' "$tmp/lp.own"
$c --json generate --temperature 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 11 --max-tokens 24 --ignore-eos --logprobs 2 "hello there" >"$tmp/lps"
lp_own "$tmp/lps" >"$tmp/lps.own"
check "--logprobs: sampled: 24 tokens, each with its own" test "$(awk '$1 ~ /^-?[0-9]/' "$tmp/lps.own" | wc -l)" -eq 24
check "--logprobs: sampled: the own value equals the top entry when the token is among the top" awk '$2 != "-" && $1 != $2 { bad = 1 } END { exit bad }' "$tmp/lps.own"
$c generate --temperature 0 --max-tokens 3 --ignore-eos --logprobs 2 "hello there" >/dev/null 2>"$tmp/lpt"
check "--logprobs without --json: a line per token on standard error" test "$(grep -c '^pagoda: sample 0: token [0-9]* ".*" logprob -*[0-9.]*; top [0-9]* ' "$tmp/lpt")" -eq 3

# seeds: without --seed the daemon draws a fresh one for each request and
# reports it; giving it back reproduces the text
$c --json generate --max-tokens 8 --ignore-eos "hello there" >"$tmp/r1"
$c --json generate --max-tokens 8 --ignore-eos "hello there" >"$tmp/r2"
s1=$(sed -n 's/.*"event":"done".*"seed":\([0-9]*\).*/\1/p' "$tmp/r1")
s2=$(sed -n 's/.*"event":"done".*"seed":\([0-9]*\).*/\1/p' "$tmp/r2")
check "two requests without a seed: two seeds reported ($s1, $s2)" test -n "$s1" -a -n "$s2" -a "$s1" != "$s2"
$c --json generate --max-tokens 8 --ignore-eos --seed "$s1" "hello there" >"$tmp/r3"
check "the reported seed reproduces the text" sh -c "grep '\"event\":\"tokens\"' '$tmp/r1' >'$tmp/r1.t'; grep '\"event\":\"tokens\"' '$tmp/r3' >'$tmp/r3.t'; test -s '$tmp/r1.t' && cmp -s '$tmp/r1.t' '$tmp/r3.t'"
$c -v generate --max-tokens 2 --seed 5 hello 2>&1 >/dev/null | grep -q "seed 5$"
check "-v: the seed given is reported" test $? -eq 0

# generate --chat: the prompt as one user message, as chat sends it
$c generate --chat --temperature 0 --max-tokens 6 --ignore-eos hello >"$tmp/gc"
check "generate --chat exits 0" test $? -eq 0
printf 'hello\n' | $c chat --temperature 0 --max-tokens 6 --ignore-eos | tr -d '\n' >"$tmp/gc0"
check "generate --chat: the reply chat gives" sh -c "tr -d '\n' <'$tmp/gc' | cmp -s - '$tmp/gc0' && test -s '$tmp/gc0'"
$c generate --chat --system "be brief" --temperature 0 --max-tokens 6 --ignore-eos hello >"$tmp/gcs"
check "generate --chat --system exits 0" test $? -eq 0
$c generate --system "be brief" hello >/dev/null 2>"$tmp/e"; rc=$?
check "generate --system without --chat exits 2" test $rc -eq 2
check "generate --system without --chat: says to add --chat" grep -q -- "--chat" "$tmp/e"
$c --json generate --max-tokens 2 hello | grep -q '"event":"done".*"ended_at_first_token":false'
check "--json: done says whether the sample ended at its first token" test $? -eq 0

# a NUL byte in standard input is refused, with its offset, not cut at
printf 'hello\000there' | $c generate --max-tokens 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
check "generate: a NUL byte in the prompt exits 2 (got $rc)" test $rc -eq 2
check "generate: a NUL byte: says where" grep -q "standard input holds a NUL byte at offset 5" "$tmp/e"
check "generate: a NUL byte: nothing generated" test ! -s "$tmp/o"
printf 'hello\nthe\000re\n' | $c chat --temperature 0 --max-tokens 2 >/dev/null 2>"$tmp/e"; rc=$?
check "chat: a NUL byte exits 2 (got $rc)" test $rc -eq 2
check "chat: a NUL byte: its offset in the input" grep -q "NUL byte at offset 9" "$tmp/e"
printf 'hello\nx\000\n' | $c tokenize >"$tmp/o" 2>"$tmp/e"; rc=$?
check "tokenize: a NUL byte exits 2 (got $rc)" test $rc -eq 2
check "tokenize: a NUL byte: its offset" grep -q "NUL byte at offset 7" "$tmp/e"
check "tokenize: the lines before it were done" test "$(wc -l <"$tmp/o")" -eq 1

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
check "info: the chat and tool-call formats" grep -q "^chat: *chatml template, tool calls in the json format" "$tmp/info"
check "info --json: the chat and tool-call formats" grep -q '"chat_format":"chatml","tool_format":"json"}' "$tmp/info.json"
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

# a daemon with a KV pool of 96 tokens: a chat that outgrows it drops its
# oldest turns (the system message stays) and says so; a prompt too big
# for it alone is refused with a message that names the pool
xsock=$tmp/small.sock
$pagodad $m --ctx-size 96 --socket "$xsock" --foreground 2>"$tmp/small.log" &
xpid=$!
wait_up "$xsock" "$tmp/small.log"
x="$pagoda -s $xsock"
printf 'a\nb\nc\nthis line is long enough to need the room of two turns or so\n' |
	$x --json chat --system "be brief" --temperature 0 --max-tokens 4 --ignore-eos >"$tmp/sc" 2>"$tmp/se"
rc=$?
check "chat past the KV pool exits 0 (got $rc)" test $rc -eq 0
check "chat past the KV pool: a reply to every turn" test "$(grep -c '"event":"done"' "$tmp/sc")" -eq 4
check "chat past the KV pool: says it dropped turns" grep -q "^pagoda: dropped the \(oldest turn\|[0-9]* oldest turns\) to fit the context of 96 tokens$" "$tmp/se"
check "chat past the KV pool: nothing else on standard error" test "$(grep -vc '^pagoda: dropped the' "$tmp/se")" -eq 0
printf 'a\nb\nc\nthis line is long enough to need the room of two turns or so\n' |
	$x chat --temperature 0 --max-tokens 4 --ignore-eos >/dev/null 2>"$tmp/se2"
check "chat past the KV pool: two turns dropped at once" grep -q "^pagoda: dropped the 2 oldest turns to fit the context of 96 tokens$" "$tmp/se2"
$x generate --max-tokens 4 "$(seq 1 100)" >/dev/null 2>"$tmp/e"; rc=$?
check "a prompt over the KV pool exits 1" test $rc -eq 1
check "a prompt over the KV pool: names the pool and how to grow it" grep -q "more than the KV pool holds (6 pages of 16 tokens = 96).*--ctx-size" "$tmp/e"
check "a prompt over the KV pool: not --max-prompt, which is not set" sh -c "! grep -q -- --max-prompt '$tmp/e'"
printf '%s\n' "$(seq 1 100)" | tr '\n' ' ' | sed 's/$/\n/' | $x chat --max-tokens 4 >/dev/null 2>"$tmp/e"; rc=$?
check "chat: a turn too big alone exits 1" test $rc -eq 1
check "chat: a turn too big alone: the daemon's message" grep -q "KV pool" "$tmp/e"
kill "$xpid"
wait "$xpid" 2>/dev/null
xpid=

# an instruct model ends at once on a raw prompt: -v and --json say so and
# point at --chat, with which it answers
model_dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
smol=$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -r "$smol" ]; then
	rm -f "$xsock"
	$pagodad --model "$smol" --socket "$xsock" --foreground 2>"$tmp/smol.log" &
	xpid=$!
	wait_up "$xsock" "$tmp/smol.log"
	q="What is the capital of France?"
	$x -v generate --temperature 0 --max-tokens 16 "$q" >"$tmp/i0" 2>"$tmp/i0e"
	check "instruct model, raw prompt: exits 0" test $? -eq 0
	check "instruct model, raw prompt: nothing comes" test ! -s "$tmp/i0"
	check "-v: the model ended at once, try --chat" grep -q "; generated 0 tokens; .*; the model ended at once: it produced no token; for an instruct model try --chat$" "$tmp/i0e"
	$x --json generate --temperature 0 --max-tokens 16 "$q" >"$tmp/i0j"
	check "--json: ended_at_first_token" grep -q '"event":"done".*"n_gen":0,.*"ended_at_first_token":true' "$tmp/i0j"
	$x -v generate --chat --temperature 0 --max-tokens 16 "$q" >"$tmp/i1" 2>"$tmp/i1e"
	check "instruct model, --chat: exits 0" test $? -eq 0
	check "instruct model, --chat: a reply" test -s "$tmp/i1"
	check "instruct model, --chat: no note" sh -c "! grep -q 'ended at once' '$tmp/i1e'"
	kill "$xpid"
	wait "$xpid" 2>/dev/null
	xpid=
else
	echo "SKIP (in part): no $smol: an instruct model with and without --chat"
fi

# a grammar that allows no token: the text it had, a message that says so,
# exit 1; the daemon logs it with the request.  Every character is a token
# of the byte-level vocabulary, so: parses that double with every "a"
# (after eleven any token would pass the limit of parses), and the empty
# grammar under --ignore-eos (only end-of-generation would fit)
printf 'root ::= "x" e\ne ::= "a" e "b" | "a" e "c"\n' >"$tmp/stuck.gbnf"
printf 'root ::= ""\n' >"$tmp/empty.gbnf"
$c generate --temperature 0 --grammar "$tmp/stuck.gbnf" hello >"$tmp/o" 2>"$tmp/e"; rc=$?
check "grammar without a token: exit 1 (got $rc)" test $rc -eq 1
check "grammar without a token: the text it had" test "$(cat "$tmp/o")" = xaaaaaaaaaaa
check "grammar without a token: says so" grep -q "the grammar allowed no token after [0-9]* tokens: no token of the model's vocabulary continues the text.*see pagoda-grammar(7)" "$tmp/e"
$c --json generate --temperature 0 --grammar "$tmp/stuck.gbnf" hello >"$tmp/j" 2>/dev/null; rc=$?
check "grammar without a token, --json: exit 1 and finish grammar" sh -c "test $rc -eq 1 && tail -n 1 '$tmp/j' | grep -q '\"finish\":\"grammar\",\"text\":\"xaaaaaaaaaaa\"'"
$c generate --ignore-eos --grammar "$tmp/empty.gbnf" hello >"$tmp/o" 2>"$tmp/e"; rc=$?
check "the empty grammar under --ignore-eos: exit 1, no text (got $rc)" sh -c "test $rc -eq 1 && ! test -s '$tmp/o'"
check "the empty grammar under --ignore-eos: after 0 tokens" grep -q "allowed no token after 0 tokens" "$tmp/e"
check "the daemon logs it with the request" grep -q "request [0-9]*, sample 0: its grammar allowed no token after [0-9]* generated tokens (finish grammar)" "$tmp/daemon.log"
$pagodad $m --prompt hello --temperature 0 --grammar "$tmp/stuck.gbnf" -q >"$tmp/o" 2>"$tmp/e"; rc=$?
check "pagodad --prompt --grammar without a token: exit 1, the text it had" sh -c "test $rc -eq 1 && test \"\$(cat '$tmp/o')\" = xaaaaaaaaaaa"
check "pagodad --prompt --grammar without a token: says so" grep -q "pagodad: the grammar allowed no token after [0-9]* generated tokens" "$tmp/e"

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
$c generate --max-tokens 4000 --ignore-eos hello >"$tmp/o" 2>/dev/null &
gpid=$!
for i in $(seq 1 600); do	# until it streams, so that the request is running
	[ -s "$tmp/o" ] && break
	kill -0 $gpid 2>/dev/null || break
	sleep 0.05
done
kill -INT $gpid 2>/dev/null
wait $gpid; rc=$?
check "SIGINT cancels (exit 130; got $rc)" test $rc -eq 130

# the daemon dies under a waiting client: exit 4, and the message says so
$c generate --max-tokens 4000 --ignore-eos hello >"$tmp/o" 2>"$tmp/e" &
gpid=$!
for i in $(seq 1 600); do	# until it streams (a loaded machine may be slow)
	[ -s "$tmp/o" ] && break
	kill -0 $gpid 2>/dev/null || break
	sleep 0.1
done
streamed=$([ -s "$tmp/o" ] && echo yes || echo no)
kill -9 "$dpid"
wait "$dpid" 2>/dev/null
dpid=
wait $gpid; rc=$?
check "the daemon's death: the client streamed before it (streamed: $streamed)" test "$streamed" = yes
check "the daemon's death: exit 4 (got $rc)" test $rc -eq 4
check "the daemon's death: says to reconnect" grep -q "stopped or restarted" "$tmp/e"
if [ $rc -ne 4 ] || [ "$streamed" != yes ]; then
	echo "the client's stderr:"; cat "$tmp/e"
	echo "the daemon's log (last lines):"; tail -n 20 "$tmp/daemon.log"
fi

# a user the access rules refuse is refused at accept, before its hello:
# the library still reads the refusal and shows the daemon's reason
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
	chmod 755 "$tmp"
	$pagodad $m --socket "$tmp/rules.sock" --socket-mode 0666 --allow-users 4242 \
		--foreground 2>"$tmp/rules.log" &
	dpid=$!
	wait_up "$tmp/rules.sock" "$tmp/rules.log"
	setpriv --reuid 65534 --regid 65534 --clear-groups \
		$pagoda -s "$tmp/rules.sock" ping --count 1 >/dev/null 2>"$tmp/e"; rc=$?
	check "a refused user: a non-zero exit (got $rc)" test $rc -ne 0
	check "a refused user: the daemon's reason, not a hang-up" grep -q "refused the connection" "$tmp/e"
	check "... that names the access rules" grep -qi "allow" "$tmp/e"
	kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=
else
	echo "SKIP: the refused-user check needs root and setpriv"
fi

exit $fail
