#!/bin/sh
# test-config.sh - pagodad.conf end to end on a generated tiny model: a
# good file with every section, the shipped example (valid, every key at
# its default), each kind of error reported with its line
# (all of them in one run), options over the file, --print-config read
# back by --check-config, the host's checks, and SIGHUP on a running
# daemon: limits and log level change (seen through `pagoda info` and the
# log), a restart-only change is reported, options keep overriding the
# file, and a file with errors changes nothing.
set -u
bin=./daemon/pagodad
pagoda=./client/pagoda
gen=./tests/gen/gguf-gen
tmp=$(mktemp -d)
dpid=
cleanup() {
	[ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"
has() { # has FILE TEXT: FILE has a line with TEXT (fixed string)
	grep -qF -- "$2" "$1"
}

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }

# ---- a good file: every section, comments, spacing, suffixes ----
cat >"$tmp/good.conf" <<EOF
# pagodad.conf for the test
; a comment of the other kind

[model]
path = $tmp/tiny.gguf

[devices]
parallel = manual
threads = 1
numerics = llama.cpp

[kv]
  kv_size = 256K   ; indented, with an inline comment
page_tokens = 8
kv_type = bf16
kv_lock = no

[batch]
max_batch_tokens = 64
max_batch_seqs = 16

[daemon]
socket = $tmp/good.sock
socket_mode = 0600
spin_us = 10
sq_arena = 512K

[limits]
max_clients = 8
max_inflight = 16
max_prompt = 1000
max_tokens = 200
max_payload = 64K
drain_timeout = 2.5

[access]
allow_users = root

[log]
log_level = warn

[stats]
stats_interval_ms = 250
EOF
$bin --config "$tmp/good.conf" --check-config >"$tmp/o" 2>"$tmp/e"; rc=$?
check "a good file: --check-config exits 0" test $rc -eq 0
check "a good file: says it is valid" has "$tmp/o" "the configuration is valid"
check "a good file: nothing on standard error" test ! -s "$tmp/e"

# --print-config: every key, the file's values, and it reads back the same
$bin --config "$tmp/good.conf" --print-config >"$tmp/p1" 2>"$tmp/e"; rc=$?
check "--print-config exits 0" test $rc -eq 0
for kv in "kv_size = 256K" "page_tokens = 8" "kv_type = bf16" "socket_mode = 0600" \
	"max_payload = 64K" "drain_timeout = 2.5" "log_level = warn" \
	"allow_users = root" "stats_interval_ms = 250" "threads = 1" \
	"numerics = llama.cpp" \
	"path = $tmp/tiny.gguf" "# ctx_size is not used: kv_size gives the pool's size"; do
	check "--print-config shows '$kv'" has "$tmp/p1" "$kv"
done
n_keys=$(grep -c '^\(# \)\{0,1\}[a-z_]* \(=\|is not\)' "$tmp/p1")
check "--print-config names all 41 keys ($n_keys)" test "$n_keys" -eq 41
$bin --config "$tmp/p1" --check-config >/dev/null 2>"$tmp/e"; rc=$?
check "--print-config's output passes --check-config" test $rc -eq 0
$bin --config "$tmp/p1" --print-config >"$tmp/p2"
tail -n +2 "$tmp/p1" >"$tmp/p1.body"
tail -n +2 "$tmp/p2" >"$tmp/p2.body"
check "--print-config round trip: the same configuration" cmp -s "$tmp/p1.body" "$tmp/p2.body"

# the shipped example: valid, every key in it, each at its default
ex=${top_srcdir:-.}/systemd/pagodad.conf.example
$bin --config "$ex" --model "$tmp/tiny.gguf" --check-config >/dev/null 2>"$tmp/e"; rc=$?
check "the example passes --check-config" test $rc -eq 0
$bin --config "$ex" --model "$tmp/tiny.gguf" --print-config | tail -n +2 >"$tmp/ex.p"
$bin --config /dev/null --model "$tmp/tiny.gguf" --print-config | tail -n +2 >"$tmp/def.p"
check "the example sets every key to its default" cmp -s "$tmp/ex.p" "$tmp/def.p"
for k in $(sed -n 's/^\(# \)\{0,1\}\([a-z_]*\) \(=\|is not\).*/\2/p' "$tmp/def.p"); do
	check "the example has key $k" grep -q "^#\{0,1\}$k = " "$ex"
done

# ---- every kind of error, each with its line, all in one run ----
cat >"$tmp/bad.conf" <<EOF
max_inflight = 4
[limits]
max_inflight = lots
max_clients = 0
max_payload = 12Q
drain_timeout = -1
bogus = 1
max_tokens = 5
max_tokens = 6
[daemon]
socket_mode = 0999
sq_slots = 100
max_clients = 4
[kv]
kv_type = f8
kv_lock = maybe
kv_size = 1G
kv_fraction = 0.5
[devices]
parallel = sideways
pipeline_parallel = 65
[log]
log_level =
this is not a key line
socket: /tmp/x
[stats] trailing words
[nowhere]
anything = 1
[model
[access]
allow_users = $(printf '%0250d' 0)
EOF
$bin --config "$tmp/bad.conf" --check-config >"$tmp/o" 2>"$tmp/e"; rc=$?
check "errors: --check-config exits 1" test $rc -eq 1
bad=$tmp/bad.conf
for want in \
	"$bad:1: max_inflight is outside any section: put it under [limits]" \
	"$bad:3: max_inflight 'lots': expected an integer in 1..65536" \
	"$bad:4: max_clients '0': expected an integer in 1..4096" \
	"$bad:5: max_payload '12Q': expected a size in bytes" \
	"$bad:6: drain_timeout '-1': expected a positive number of seconds" \
	"$bad:7: unknown key 'bogus' in [limits]: its keys are max_clients, max_inflight" \
	"$bad:9: max_tokens is given twice (first at line 8)" \
	"$bad:11: socket_mode '0999': expected an octal mode" \
	"$bad:12: sq_slots '100': expected a power of two from 8 to 65536" \
	"$bad:13: max_clients belongs in [limits], not [daemon]" \
	"$bad:15: kv_type 'f8': expected f16, bf16 or f32" \
	"$bad:16: kv_lock 'maybe': expected yes or no" \
	"$bad:18: kv_fraction: the KV pool's size is already given by kv_size at line 17" \
	"$bad:20: parallel 'sideways': expected auto or manual" \
	"$bad:21: pipeline_parallel '65': expected an integer in 1..64" \
	"$bad:23: log_level has no value" \
	"$bad:24: 'this is not a key line' is not a line of pagodad.conf" \
	"$bad:25: 'socket: /tmp/x' is not a line of pagodad.conf" \
	"$bad:26: unexpected 'trailing words' after [stats]" \
	"$bad:27: unknown section [nowhere]: the sections are [model], [devices]" \
	"$bad:29: '[model' has no ']'" \
	"$bad:31: the line is longer than"; do
	check "reported: $want" has "$tmp/e" "$want"
done
check "a key under an unknown section is not reported again" test "$(grep -c "$bad:28:" "$tmp/e")" -eq 0
check "the error count: 22 errors" has "$tmp/e" "22 errors in the configuration"
check "errors: nothing on standard output" test ! -s "$tmp/o"
$bin --model "$tmp/tiny.gguf" --numerics exact --check-config >/dev/null 2>"$tmp/e"; rc=$?
check "a bad --numerics: exit 2 (usage)" test $rc -eq 2
check "a bad --numerics: says what it takes" has "$tmp/e" "--numerics 'exact': expected pagoda or llama.cpp"
$bin --config "$tmp/bad.conf" --print-config >"$tmp/o" 2>/dev/null; rc=$?
check "errors: --print-config exits 1 and prints nothing" test $rc -eq 1 -a ! -s "$tmp/o"
printf '[limits]\nmax_inflight = 4\0junk\n' >"$tmp/nul.conf"
$bin --config "$tmp/nul.conf" --check-config 2>"$tmp/e" >/dev/null; rc=$?
check "a NUL byte is an error, not the end of the line" has "$tmp/e" "$tmp/nul.conf:2: the line holds a NUL byte"
$bin --config "$tmp/none.conf" --check-config 2>"$tmp/e"; rc=$?
check "a missing --config file exits 1" test $rc -eq 1
check "a missing --config file is named" has "$tmp/e" "cannot open $tmp/none.conf"
$bin --config "$tmp/bad.conf" --model "$tmp/tiny.gguf" --prompt hi 2>/dev/null >/dev/null; rc=$?
check "the one-shot modes read the file too: errors exit 1" test $rc -eq 1
if [ ! -e /etc/pagoda/pagodad.conf ]; then
	$bin --print-config >"$tmp/o" 2>&1; rc=$?
	check "the default file may be absent" test $rc -eq 0
	check "... and --print-config says so" has "$tmp/o" "/etc/pagoda/pagodad.conf (absent)"
fi

# ---- options override the file ----
printf '[limits]\nmax_inflight = 8\nmax_tokens = 50\n[kv]\nkv_fraction = 0.5\n[log]\nlog_level = warn\n' >"$tmp/o.conf"
$bin --config "$tmp/o.conf" --max-inflight 5 --ctx-size 64 --print-config >"$tmp/o" 2>&1
check "an option overrides the file's key" has "$tmp/o" "max_inflight = 5"
check "keys without an option keep the file's value" has "$tmp/o" "log_level = warn"
check "an option's KV pool size replaces the file's" has "$tmp/o" "ctx_size = 64"
check "... kv_fraction is then unset" has "$tmp/o" "# kv_fraction is not set"
$bin --config "$tmp/o.conf" --max-tokens 9 --print-config >"$tmp/o" 2>&1
check "--max-tokens is the daemon's max_tokens when serving" has "$tmp/o" "max_tokens = 9"
$bin --config "$tmp/o.conf" --max-inflight many --print-config >/dev/null 2>"$tmp/e"; rc=$?
check "a bad option value is a usage error (2)" test $rc -eq 2
check "... named as the option" has "$tmp/e" "--max-inflight 'many': expected an integer in 1..65536"
$bin --config "$tmp/o.conf" --socket '' --print-config >/dev/null 2>"$tmp/e"; rc=$?
check "an empty option value is a usage error (2)" test $rc -eq 2
check "... that says so" has "$tmp/e" "--socket: expected a value"

# ---- the host's checks: model, plan, users, groups ----
cat >"$tmp/host.conf" <<EOF
[model]
path = $tmp/tiny.gguf
[devices]
pipeline_parallel = 3
[daemon]
socket_group = no-such-group-pagoda
[access]
allow_users = no-such-user-pagoda
EOF
$bin --config "$tmp/host.conf" --check-config >/dev/null 2>"$tmp/e"; rc=$?
check "host checks: exit 1" test $rc -eq 1
check "host: the plan's error at its line" has "$tmp/e" "$tmp/host.conf:4: "
check "host: ... says why" has "$tmp/e" "the model has 2 blocks"
check "host: an unknown user at its line" has "$tmp/e" "$tmp/host.conf:8: allow_users: no user named 'no-such-user-pagoda'"
check "host: an unknown group at its line" has "$tmp/e" "$tmp/host.conf:6: socket_group: no group named 'no-such-group-pagoda'"
$bin --config "$tmp/host.conf" --model "$tmp/none.gguf" --check-config >/dev/null 2>"$tmp/e"
check "host: a missing model, named with the option that gave it" has "$tmp/e" "--model: $tmp/none.gguf"

# ---- SIGHUP on a running daemon ----
sock=$tmp/live.sock
write_live() { # write_live MAX_INFLIGHT LOG_LEVEL MAX_CLIENTS [EXTRA LINE]
	cat >"$tmp/live.conf" <<EOF
[model]
path = $tmp/tiny.gguf
[daemon]
socket = $sock
[limits]
max_inflight = $1
max_clients = $3
max_tokens = 50
${4:-}
[log]
log_level = $2
EOF
}
wait_log() { # wait_log TEXT: up to 10 s for the daemon's log to show TEXT
	n=0
	while [ $n -lt 100 ] && ! has "$tmp/live.log" "$1"; do
		kill -0 "$dpid" 2>/dev/null || break
		sleep 0.1; n=$((n + 1))
	done
	has "$tmp/live.log" "$1"
}
write_live 8 info 4
$bin --config "$tmp/live.conf" --max-tokens 77 --foreground >"$tmp/live.log" 2>&1 &
dpid=$!
if ! wait_log "listening on $sock"; then
	echo "FAIL: pagodad did not start"; cat "$tmp/live.log"; exit 1
fi
$pagoda -s "$sock" info >"$tmp/i1" 2>&1
check "before SIGHUP: max_inflight 8 from the file" has "$tmp/i1" "limits:       8 requests in flight"
check "before SIGHUP: --max-tokens over the file's" has "$tmp/i1" "77 tokens generated"
check "at info level: no debug lines" test "$(grep -c 'debug:' "$tmp/live.log")" -eq 0

write_live 3 debug 5 "drain_timeout = 4"
kill -HUP "$dpid"
check "SIGHUP: the reload is logged" wait_log "read again: 3 changes applied, 1 to apply at the next start"
check "SIGHUP: max_inflight's change logged" has "$tmp/live.log" "max_inflight changed: 8 -> 3"
check "SIGHUP: log_level's change logged" has "$tmp/live.log" "log_level changed: info -> debug"
check "SIGHUP: drain_timeout's change logged" has "$tmp/live.log" "drain_timeout changed: 10 -> 4"
check "SIGHUP: a restart-only key is reported" has "$tmp/live.log" "max_clients changed: restart pagodad to apply it"
check "SIGHUP: the option's value did not change" test "$(grep -c 'max_tokens changed' "$tmp/live.log")" -eq 0
$pagoda -s "$sock" info >"$tmp/i2" 2>&1
check "after SIGHUP: pagoda info shows max_inflight 3" has "$tmp/i2" "limits:       3 requests in flight"
check "after SIGHUP: --max-tokens still overrides the file" has "$tmp/i2" "77 tokens generated"
check "after SIGHUP: debug lines are logged" wait_log "debug: after a client left"

# a file with errors changes nothing, and says every error
write_live 2 warn 4 "max_prompt = lots"
echo "bogus_key = 1" >>"$tmp/live.conf"
kill -HUP "$dpid"
check "a bad reload says nothing changed" wait_log "2 errors in $tmp/live.conf: nothing changed"
check "a bad reload names the bad value's line" has "$tmp/live.log" "$tmp/live.conf:9: max_prompt 'lots'"
check "a bad reload names the unknown key's line" has "$tmp/live.log" "$tmp/live.conf:12: unknown key 'bogus_key' in [log]"
$pagoda -s "$sock" info >"$tmp/i3" 2>&1
check "after a bad reload: max_inflight still 3" has "$tmp/i3" "limits:       3 requests in flight"
check "after a bad reload: still at debug level" test "$(grep -c 'log_level changed: debug' "$tmp/live.log")" -eq 0

# a missing file at reload is an error too (it was given with --config)
mv "$tmp/live.conf" "$tmp/live.conf.away"
kill -HUP "$dpid"
check "a vanished --config file: nothing changed" wait_log "1 error in $tmp/live.conf: nothing changed"
kill -TERM "$dpid"
wait "$dpid"; rc=$?
dpid=
check "the daemon stops cleanly after reloads" test $rc -eq 0
[ $fail = 0 ] || { echo "--- daemon log"; cat "$tmp/live.log"; }
exit $fail
