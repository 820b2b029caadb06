#!/bin/sh
# test-pagodad.sh - pagodad's command line end to end on a generated tiny
# model: one-shot completion, seeded reproducibility, tokenize modes
# (including a vocabulary-only use), and clear errors for bad input.
set -u
bin=./daemon/pagodad
gen=./tests/gen/gguf-gen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check DESCRIPTION COMMAND...
	what=$1; shift
	if "$@"; then :; else echo "FAIL: $what"; fail=1; fi
}

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }
m="--model $tmp/tiny.gguf"

# one-shot completion: text on stdout, figures on stderr, exit 0
$bin $m --prompt "hello there" --max-tokens 12 --seed 42 --ignore-eos >"$tmp/a" 2>"$tmp/a.err"
check "completion exits 0" test $? -eq 0
check "figures printed" grep -q "generated 12 tokens" "$tmp/a.err"
$bin $m --prompt "hello there" --max-tokens 12 --seed 42 --ignore-eos -q >"$tmp/b" 2>"$tmp/b.err"
check "same seed, same text" cmp -s "$tmp/a" "$tmp/b"
check "--quiet prints no figures" test ! -s "$tmp/b.err"
$bin $m --prompt "hello there" --max-tokens 12 --temperature 0 --ignore-eos -q >"$tmp/g1"
$bin $m --prompt "hello there" --max-tokens 12 --temperature 0 --ignore-eos -q --threads 1 --batch 3 >"$tmp/g2"
check "greedy output independent of threads and batch size" cmp -s "$tmp/g1" "$tmp/g2"

# tokenize: argument, file and stdin agree
$bin $m --tokenize "hello world" >"$tmp/t1"
printf 'hello world\nsecond line\n' | $bin $m --tokenize-file - >"$tmp/t2"
check "tokenize prints a list" grep -q '^\[[0-9]' "$tmp/t1"
check "stdin: one line per input line" test "$(wc -l <"$tmp/t2")" -eq 2
check "stdin first line = argument" test "$(head -n1 "$tmp/t2")" = "$(cat "$tmp/t1")"

# a vocabulary-only file tokenizes like the full model but cannot run
$gen --preset tiny --vocab-only --out "$tmp/vocab.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen --vocab-only"; exit 1; }
$bin --model "$tmp/vocab.gguf" --tokenize "hello world" >"$tmp/t3"
check "vocab-only file tokenizes" cmp -s "$tmp/t1" "$tmp/t3"
$bin --model "$tmp/vocab.gguf" --prompt x 2>"$tmp/e"; rc=$?
check "vocab-only file cannot complete" test $rc -eq 1
check "vocab-only refusal says why" grep -q "can only tokenize" "$tmp/e"

# errors: usage (2), missing model (1) with a message that says what to do
$bin $m >/dev/null 2>"$tmp/e"; rc=$?
check "nothing to do is a usage error" test $rc -eq 2
check "nothing to do says what to give" grep -q -- "--prompt" "$tmp/e"
$bin --frobnicate 2>/dev/null; check "unknown option exits 2" test $? -eq 2
$bin $m --prompt x --temperature abc 2>"$tmp/e"; rc=$?
check "bad number exits 2" test $rc -eq 2
check "bad number is named" grep -q -- "--temperature 'abc'" "$tmp/e"
$bin --model "$tmp/none.gguf" --prompt x 2>"$tmp/e"; rc=$?
check "absent model exits 1" test $rc -eq 1
check "absent model names the file" grep -q "none.gguf: cannot open" "$tmp/e"
head -c 100 "$tmp/tiny.gguf" >"$tmp/cut.gguf"
$bin --model "$tmp/cut.gguf" --prompt x 2>"$tmp/e"; rc=$?
check "truncated model exits 1" test $rc -eq 1
check "truncated model says so" grep -q "truncated" "$tmp/e"
$bin $m --prompt "hello" --ctx-size 4 --max-tokens 20 --ignore-eos 2>"$tmp/e" >/dev/null; rc=$?
check "context overflow exits 1" test $rc -eq 1
check "context overflow says what to change" grep -q -- "--ctx-size" "$tmp/e"
$bin $m --prompt "hello" --max-tokens 4 --kv-size 64K --kv-lock --kv-hugetlb -q >/dev/null 2>"$tmp/e"
check "KV cache by size, locked, on huge pages if any" test $? -eq 0
$bin $m --prompt "hello" --kv-size 100 2>"$tmp/e" >/dev/null; rc=$?
check "KV cache too small for a page exits 1" test $rc -eq 1
check "KV cache too small says so" grep -q "leaves no page" "$tmp/e"
$bin $m --prompt "hello" --numa-node 1000 2>"$tmp/e" >/dev/null; rc=$?
check "absent NUMA node exits 1" test $rc -eq 1
check "absent NUMA node is named" grep -q "NUMA node 1000" "$tmp/e"
$bin $m --prompt x --kv-size 12Q 2>"$tmp/e"; rc=$?
check "bad size exits 2" test $rc -eq 2
$bin $m --prompt x --top-p 7 2>"$tmp/e" >/dev/null; rc=$?
check "bad sampling parameter exits 1" test $rc -eq 1
check "bad sampling parameter is named" grep -q "top_p" "$tmp/e"
exit $fail
