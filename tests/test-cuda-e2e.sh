#!/bin/sh
# test-cuda-e2e.sh - the default model's greedy completions on cuda:0 equal
# those on cpu:0, end to end through pagodad's one-shot mode.
#
# The prompts are the CPU golden test's (tests/data/golden-smollm2.txt):
# each is completed greedily (--temperature 0, up to 64 tokens) with
# `--devices cpu:0` and with `--devices cuda:0`, and the two texts are
# compared byte for byte.  8-bit activation rounding is discontinuous, so
# a last-bit difference between the backends may flip a near-tie and the
# texts part there (test_golden.c explains why llama.cpp does the same
# against itself); at least 80% of the prompts must give identical text,
# and every difference is printed.  This is not the golden test: that one
# checks the CPU against llama.cpp's logits.
#
# Skips (77) when the model is missing, when pagodad was built without
# CUDA or sees no GPU (asked through `pagodad --devices cuda:0 --plan`, the
# same device lookup a run makes).  Exit 1 when a run fails or too few
# texts agree.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
bin=$top_builddir/daemon/pagodad
data=$top_srcdir/tests/data/golden-smollm2.txt
model_dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
model=${PAGODA_MODEL:-$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf}
max_tokens=64
min_pct=80

skip() { echo "test-cuda-e2e: SKIP: $*"; exit 77; }

[ -x "$bin" ] || { echo "test-cuda-e2e: $bin not built"; exit 1; }
[ -r "$data" ] || { echo "test-cuda-e2e: $data missing"; exit 1; }
[ -r "$model" ] || skip "no model at $model (scripts/fetch-model fetches it)"

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! "$bin" --config /dev/null --model "$model" --devices cuda:0 --plan \
	>"$tmp/plan" 2>&1; then
	skip "pagodad cannot use cuda:0: $(tail -n 1 "$tmp/plan")"
fi
grep '^ *[0-9].*cuda:0' "$tmp/plan" | head -n 1

# The prompts, one file each, from the data's hex (no NUL in any).
LC_ALL=C awk '
	function hexval(c) { return index("0123456789abcdef", c) - 1 }
	$1 == "prompt" {
		f = sprintf("%s/prompt.%02d", dir, n++)
		s = ""
		for (i = 1; i < length($2); i += 2) {
			b = hexval(substr($2, i, 1)) * 16 + hexval(substr($2, i + 1, 1))
			s = s sprintf("%c", b)
		}
		printf "%s", s > f
		close(f)
	}' dir="$tmp" "$data"
n=$(ls "$tmp"/prompt.* 2>/dev/null | wc -l)
[ "$n" -gt 0 ] || { echo "test-cuda-e2e: no prompts read from $data"; exit 1; }

cpus=$(nproc 2>/dev/null || echo 2)
threads=$((cpus > 9 ? 8 : (cpus > 1 ? cpus - 1 : 1)))

# run DEVICE PROMPT OUT: one greedy completion; its stderr beside it.
run() {
	"$bin" --config /dev/null --model "$model" --devices "$1" \
		--threads "$threads" --prompt-file "$2" \
		--max-tokens $max_tokens --temperature 0 --seed 1 -q \
		>"$3" 2>"$3.err"
}

# show TEXT-FILE: its first 300 bytes on one line, newlines as \n.
show() {
	head -c 300 "$1" | awk '{ printf "%s\\n", $0 } END { printf "\n" }'
}

same=0 failed=0 i=0
start=$(date +%s)
for p in "$tmp"/prompt.*; do
	i=$((i + 1))
	# both devices at once: the CPU's cores are not the GPU's host thread
	run cpu:0 "$p" "$tmp/cpu" &
	cpu_pid=$!
	run cuda:0 "$p" "$tmp/cuda"
	cuda_rc=$?
	wait $cpu_pid
	cpu_rc=$?
	if [ $cpu_rc -ne 0 ] || [ $cuda_rc -ne 0 ]; then
		[ $cpu_rc -eq 0 ] || echo "prompt $i: cpu:0 run failed: $(tail -n 3 "$tmp/cpu.err")"
		[ $cuda_rc -eq 0 ] || echo "prompt $i: cuda:0 run failed: $(tail -n 3 "$tmp/cuda.err")"
		failed=$((failed + 1))
		continue
	fi
	if cmp -s "$tmp/cpu" "$tmp/cuda"; then
		same=$((same + 1))
		continue
	fi
	# "differ: byte N" or, when one text is the other's beginning, "EOF ... after byte N"
	at=$(cmp "$tmp/cpu" "$tmp/cuda" 2>&1 | sed -n 's/.* byte \([0-9]*\).*/\1/p')
	echo "prompt $i: the texts part at byte ${at:-?}"
	printf '  cpu:  '; show "$tmp/cpu"
	printf '  cuda: '; show "$tmp/cuda"
done
secs=$(( $(date +%s) - start ))
pct=$((100 * same / n))
echo "test-cuda-e2e: $same of $n greedy completions identical on cpu:0 and cuda:0 ($pct%), $failed runs failed, ${secs}s"
[ "$failed" -eq 0 ] || exit 1
[ "$pct" -ge $min_pct ] || { echo "test-cuda-e2e: FAIL: fewer than $min_pct% identical"; exit 1; }
exit 0
