#!/bin/sh
# test-kernels-tables.sh - the choice of CPU kernel table end to end
# (PAGODA_CPU_KERNELS, kernels/cpu/cpu.h): test_kernels run again forced
# to each table this processor runs, so that one machine also runs the
# paths of machines with less (test_kernels alone runs every table up to
# the best); names of no table and tables beyond the processor refused
# with a message; and pagodad running the table it is told, or refusing,
# and on a Q4_K_M-mixed model giving every table the same text.
set -u
tk=./tests/test_kernels
bin=./daemon/pagodad
gen=./tests/gen/gguf-gen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
unset PAGODA_CPU_KERNELS

tables=$($tk --tables) || { echo "FAIL: test_kernels --tables"; exit 1; }
echo "tables this processor runs: $tables"

# forced to each table: passes, and runs the scalar reference up to it
run=
for t in $tables; do
	run="${run:+$run }$t"
	PAGODA_CPU_KERNELS=$t $tk >"$tmp/$t.log" 2>&1
	rc=$?
	check "test_kernels, PAGODA_CPU_KERNELS=$t: passes" test $rc -eq 0
	check "test_kernels, PAGODA_CPU_KERNELS=$t: runs the tables $run" \
		grep -qx "test_kernels: tables run: $run" "$tmp/$t.log"
	[ $rc -eq 0 ] || tail -n 30 "$tmp/$t.log"
	grep "^test_kernels: tables" "$tmp/$t.log"
done

# refused: tables the processor lacks, and names of none
for t in scalar avx2 avx512 avx512vnni; do
	case " $tables " in *" $t "*) continue ;; esac
	PAGODA_CPU_KERNELS=$t $tk >/dev/null 2>"$tmp/e"
	check "PAGODA_CPU_KERNELS=$t (beyond this processor): refused" test $? -eq 1
	check "PAGODA_CPU_KERNELS=$t: says why" grep -q "this processor cannot run the $t kernels" "$tmp/e"
done
PAGODA_CPU_KERNELS=avx512bf16 $tk >/dev/null 2>"$tmp/e"
check "PAGODA_CPU_KERNELS=avx512bf16 (no such table): refused" test $? -eq 1
check "PAGODA_CPU_KERNELS=avx512bf16: says what to use" grep -q "no such table of CPU kernels; use scalar, avx2, avx512 or avx512vnni" "$tmp/e"

# pagodad: its figures name the table it ran; a bad value stops it
$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }
for t in $tables; do
	PAGODA_CPU_KERNELS=$t $bin --model "$tmp/tiny.gguf" --prompt hi --max-tokens 2 >/dev/null 2>"$tmp/p.err"
	check "pagodad, PAGODA_CPU_KERNELS=$t: exits 0" test $? -eq 0
	check "pagodad, PAGODA_CPU_KERNELS=$t: runs $t" grep -q "($t)" "$tmp/p.err"
done

# a model mixing types as llama.cpp's Q4_K_M does (Q4_K, Q6_K, Q5_0 where
# rows are not whole 256-blocks, a Q8_0 embedding): loads, and every table
# gives the same text at temperature 0 (their dots are bit-identical)
$gen --preset tiny --type q4_k_m --embd-type q8_0 --hidden 320 --heads 4 \
	--head-dim 64 --kv-heads 2 --ffn 512 --untied --seed 5 \
	--out "$tmp/mix.gguf" >/dev/null || { echo "FAIL: gguf-gen q4_k_m"; exit 1; }
for t in $tables; do
	PAGODA_CPU_KERNELS=$t $bin --model "$tmp/mix.gguf" --prompt hi \
		--temperature 0 --max-tokens 24 >"$tmp/mix.$t" 2>"$tmp/p.err"
	check "pagodad, Q4_K_M mix, PAGODA_CPU_KERNELS=$t: exits 0" test $? -eq 0
	check "pagodad, Q4_K_M mix, $t: the scalar table's text" \
		cmp -s "$tmp/mix.scalar" "$tmp/mix.$t"
done
check "pagodad, Q4_K_M mix: writes text" test -s "$tmp/mix.scalar"

PAGODA_CPU_KERNELS=avx512bf16 $bin --model "$tmp/tiny.gguf" --prompt hi --max-tokens 2 >/dev/null 2>"$tmp/p.err"
check "pagodad, PAGODA_CPU_KERNELS=avx512bf16: refused" test $? -ne 0
check "pagodad, PAGODA_CPU_KERNELS=avx512bf16: says why" grep -q "PAGODA_CPU_KERNELS=avx512bf16: no such table of CPU kernels" "$tmp/p.err"
[ $fail -eq 0 ] || cat "$tmp/p.err"
exit $fail
