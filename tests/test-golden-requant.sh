#!/bin/sh
# test-golden-requant.sh - pagoda against llama.cpp on scripts/requantize's
# copies of the default model (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, requantised from
# Q4_1 by llama.cpp's llama-quantize), each against its
# tests/data/golden-smollm2-TYPE.txt: the checks of test-golden-gemma3.sh.
# A copy that is absent is skipped; when all are, the test is (77): run
# scripts/requantize.
#
# Not in TESTS, and not passing: on these copies llama.cpp disagrees with
# itself (its batched against its one-token logits) by more than these
# bars allow. tests/ref/llama-self-check.py --exact measures it: llama.cpp's
# own batched evaluation misses the near-tie bar on Q5_K_M (a disagreement at
# gap 0.74) and Q3_K_M (1.04), and an exact float64 forward pass of the
# Q5_K_M copy agrees with the stored argmax at only 96.43%, under the 97%
# bar; against that exact pass pagoda is as close as llama.cpp on every copy
# (mean |diff| Q4_K_M 0.209 vs llama.cpp's 0.211/0.213, Q5_K_M 0.211 vs
# 0.213/0.216, Q6_K 0.197 vs 0.198/0.198, Q3_K_M 0.204 vs 0.203/0.205).
set -u
. "$(dirname "$0")/golden-run.sh"
dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
fail=0 ran=0
for t in q4_k_m q5_k_m q6_k q3_k_m; do
	T=$(printf '%s' "$t" | tr '[:lower:]' '[:upper:]')
	echo "==== golden: SmolLM2-135M-Instruct.$T.gguf"
	golden_run "$dir/SmolLM2-135M-Instruct.$T.gguf" \
		"${top_srcdir:-.}/tests/data/golden-smollm2-$t.txt" \
		"scripts/requantize" \
		"delete it and run scripts/requantize; if the new copy differs too, this machine's llama-quantize computes otherwise than the one the data were made with (see the data's header; tests/ref/gen-model-ref.py regenerates them)"
	rc=$?
	case $rc in
	0) ran=$((ran + 1)) ;;
	77) ;;
	*) echo "FAIL: golden: SmolLM2-135M-Instruct.$T.gguf (exit $rc)"; fail=1; ran=$((ran + 1)) ;;
	esac
done
[ $fail -eq 0 ] || exit 1
[ $ran -gt 0 ] || exit 77
exit 0
