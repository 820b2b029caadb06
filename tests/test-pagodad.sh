#!/bin/sh
# test-pagodad.sh - pagodad's command line end to end on a generated tiny
# model: one-shot completion, seeded reproducibility, llama.cpp numerics,
# tokenize modes
# (including a vocabulary-only use), parallel plans (--plan), and clear
# errors for bad input.
set -u
bin=./daemon/pagodad
gen=./tests/gen/gguf-gen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

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

# llama.cpp numerics: runs, is batch-independent too, and refuses what it
# cannot reproduce (test_golden checks its bits against llama.cpp's)
if grep -q avx2 /proc/cpuinfo; then
	$bin $m --prompt "hello there" --max-tokens 12 --temperature 0 --ignore-eos -q --numerics llama.cpp >"$tmp/l1"
	check "--numerics llama.cpp: exits 0" test $? -eq 0
	$bin $m --prompt "hello there" --max-tokens 4 --numerics llama.cpp >/dev/null 2>"$tmp/l.err"
	check "--numerics llama.cpp: the figures say so" grep -q "(avx2); llama.cpp numerics" "$tmp/l.err"
	$bin $m --prompt "hello there" --max-tokens 12 --temperature 0 --ignore-eos -q --numerics llama.cpp --threads 1 --batch 3 >"$tmp/l2"
	check "--numerics llama.cpp: greedy output independent of threads and batch size" cmp -s "$tmp/l1" "$tmp/l2"
fi
$bin $m --prompt x --numerics llama.cpp --kv-type f32 2>"$tmp/e"; rc=$?
check "--numerics llama.cpp with an F32 KV cache: refused" test $rc -ne 0
check "--numerics llama.cpp with an F32 KV cache: says why" grep -q "llama.cpp numerics run on one CPU device with an F16 KV cache only" "$tmp/e"
$gen --preset tiny --type q4_0 --seed 5 --out "$tmp/q40.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen q4_0"; exit 1; }
$bin --model "$tmp/q40.gguf" --prompt x --numerics llama.cpp 2>"$tmp/e"; rc=$?
check "--numerics llama.cpp on Q4_0 weights: refused" test $rc -ne 0
check "--numerics llama.cpp on Q4_0 weights: names the matrix" grep -q "block 0's attn_q is Q4_0: use --numerics pagoda" "$tmp/e"

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

# --plan: the plan from the file's metadata, printed; bad plans say why
plan() { # plan OUT-NAME ARGS...: run --plan, keep stdout and stderr
	out=$1; shift
	$bin $m --plan "$@" >"$tmp/$out" 2>"$tmp/$out.err"
}
plan p1; rc=$?
check "--plan exits 0" test $rc -eq 0
check "--plan prints one stage" grep -q "plan: pipeline 1 x tensor 1 x context 1 = 1 device" "$tmp/p1"
check "--plan names the reason" grep -q "^reason: as configured" "$tmp/p1"
plan p2 --devices cpu:0,cpu:1; rc=$?
check "two devices: a pipeline by default" test $rc -eq 0
check "two devices: two stages" grep -q "plan: pipeline 2 x tensor 1 x context 1" "$tmp/p2"
check "first stage has the embedding" grep -q "^  0  *0-0 (1) *embedding *cpu:0" "$tmp/p2"
check "last stage has the output head" grep -q "^  1  *1-1 (1) *output head *cpu:1" "$tmp/p2"
check "one hand-off per token" grep -q "PP: 1 stage hand-off" "$tmp/p2"
plan p3 --tensor-parallel 2 --context-parallel 2 --pipeline-parallel 2; rc=$?
check "PP x TP x CP plan" test $rc -eq 0
check "TP all-gathers of partial sums counted" grep -q "TP: 4 all-gathers (2 per block) of partial sums" "$tmp/p3"
check "CP all-gathers counted" grep -q "CP: 2 all-gathers" "$tmp/p3"
plan p4 --devices cpu:0,cpu:1,cpu:2 --tensor-parallel 3 --threads 2
check "more threads than CPUs warned about" grep -q "oversubscribed" "$tmp/p4"
plan p5 --parallel auto --devices cpu:0,cpu:1; rc=$?
check "auto plan exits 0" test $rc -eq 0
check "auto: a tiny model fits one device" grep -q "^reason: fits one device.*so 2 replicas" "$tmp/p5"
check "auto: a replica on each device" grep -q "plan: 2 replicas (data parallel) of pipeline 1 x tensor 1 x context 1 = 2 devices" "$tmp/p5"
plan_fails() { # plan_fails EXIT-STATUS MESSAGE ARGS...
	want=$1; msg=$2; shift 2
	plan e "$@"; rc=$?
	check "--plan $*: exits $want" test $rc -eq "$want"
	check "--plan $*: says '$msg'" grep -q -e "$msg" "$tmp/e.err"
}
plan_fails 1 "the model has 2 blocks" --pipeline-parallel 3
plan_fails 1 "3 devices make 3 pipeline stages, but the model has 2 blocks" --devices cpu:0,cpu:1,cpu:2
plan_fails 1 "the model has 4 attention heads" --tensor-parallel 5
plan_fails 1 "must divide 16" --context-parallel 3
plan_fails 1 "name them cpu:0 .. cpu:1" --devices cpu:0,cpu:2
plan_fails 1 "expected cpu:N or cuda:N" --devices gpu:0
# cuda:0 where there is no GPU (a GPU host plans it: tests/test-cuda-e2e.sh)
if ! nvidia-smi -L >/dev/null 2>&1; then
	plan_fails 1 "cuda:0: \(this pagodad was built without CUDA\|no CUDA device is visible\)" --devices cuda:0
fi
plan_fails 1 "cannot be mixed" --devices cpu:0,cuda:0
plan_fails 1 "3 devices, but 2 devices are named" --devices cpu:0,cpu:1 --pipeline-parallel 3
plan_fails 1 "chooses the pipeline, tensor and context parallel counts itself" --parallel auto --tensor-parallel 2
plan_fails 2 "expected auto or manual" --parallel sideways
plan_fails 2 "expected an integer in 1..64" --tensor-parallel 0
$bin --model "$tmp/vocab.gguf" --plan 2>"$tmp/e" >/dev/null; rc=$?
check "--plan on a vocabulary-only file exits 1" test $rc -eq 1
check "--plan on a vocabulary-only file says why" grep -q "vocabulary-only" "$tmp/e"
$bin $m --prompt hello --pipeline-parallel 3 2>"$tmp/e" >/dev/null; rc=$?
check "one-shot with a bad plan exits 1" test $rc -eq 1
check "one-shot with a bad plan says what to change" grep -q "use at most 2 stages" "$tmp/e"
$bin $m --prompt "hello there" --max-tokens 12 --temperature 0 --ignore-eos -q --devices cpu:0 >"$tmp/g3"
check "a one-device plan gives the same tokens" cmp -s "$tmp/g1" "$tmp/g3"

# errors: usage (2), missing model (1) with a message that says what to do
# without a mode pagodad serves (tests/test-daemon.sh); here only a socket
# it cannot bind, so that it exits at once instead of serving
$bin $m --socket "$tmp/no/such/dir/s.sock" >/dev/null 2>"$tmp/e"; rc=$?
check "serving on a socket that cannot be bound exits 1" test $rc -eq 1
check "... saying which socket" grep -q -- "cannot bind $tmp/no/such/dir/s.sock" "$tmp/e"
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
