#!/bin/sh
# fuzz-gguf.sh - make check's bounded fuzz run of the GGUF reader: replay the
# corpus with fixed-seed mutations, then (when clang's libFuzzer was found)
# a libFuzzer run of 15 seconds over a scratch copy of the corpus.
set -eu
corpus="${top_srcdir:-.}/tests/fuzz/corpus"
./tests/fuzz_gguf "$corpus" 2000
if [ -x ./tests/fuzz/fuzz-gguf-libfuzzer ]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cp "$corpus"/* "$work"/
	./tests/fuzz/fuzz-gguf-libfuzzer -max_total_time=15 -max_len=65536 \
		-rss_limit_mb=2048 -print_final_stats=1 "$work" 2>&1 | tail -n 12
fi
