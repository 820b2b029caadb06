#!/bin/sh
# test-golden-gemma3.sh - pagoda against llama.cpp on Gemma 3 270M Q4_K_M
# (tests/data/golden-gemma3.txt, written by tests/ref/gen-model-ref.py):
# tokenisation identical, teacher-forced argmax agreement >= 97% with every
# disagreement at a near-tie, and greedy 64-token completions that diverge
# only at near-ties (tests/test_golden MODEL DATA). Skips (77) when the model
# has not been fetched: scripts/fetch-model gemma3-270m.
set -u
. "$(dirname "$0")/golden-run.sh"
dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
golden_run "$dir/gemma-3-270m-q4_k_m.gguf" "${top_srcdir:-.}/tests/data/golden-gemma3.txt" \
	"scripts/fetch-model gemma3-270m" \
	"run scripts/fetch-model gemma3-270m (it fetches the file again when its hash is wrong)"
