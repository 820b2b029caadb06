# tests/golden-run.sh - what the golden tests of other models share;
# sourced, not run (tests/test-golden-gemma3.sh, tests/test-golden-requant.sh):
#
#   . "$(dirname "$0")/golden-run.sh"
#   golden_run MODEL DATA FETCH FIX
#
# Runs tests/test_golden MODEL DATA (pagoda's numerics against llama.cpp's
# reference answers in DATA) once MODEL's SHA-256 is the one DATA's header
# names ("# model: FILE (sha256 HEX)"). Returns 77 when MODEL is absent
# (FETCH says what makes it), 1 when its digest differs (FIX says what to
# do) or the comparison fails, 0 when it passes.
#
# In a sanitizer build (make check exports PAGODA_SANITIZERS=1 there) sourcing
# this file exits 77 at once: these numerics checks take ~15 minutes under
# ASan and the plain build runs them; PAGODA_GOLDEN_SAN=1 runs them anyway.
if [ "${PAGODA_SANITIZERS:-}" = 1 ] && [ -z "${PAGODA_GOLDEN_SAN:-}" ]; then
	echo "golden: skipped in the sanitizer build (~15 minutes under ASan): the plain build's make check runs it; set PAGODA_GOLDEN_SAN=1 to force it here"
	exit 77
fi

golden_run() {
	gr_model=$1 gr_data=$2 gr_fetch=$3 gr_fix=$4
	if [ ! -f "$gr_model" ]; then
		echo "golden: skipped: no $gr_model (run $gr_fetch)"
		return 77
	fi
	if [ ! -f "$gr_data" ]; then
		echo "FAIL: golden: no reference data $gr_data"
		return 1
	fi
	gr_want=$(sed -n 's/^# model: [^ ]* (sha256 \([0-9a-f]\{64\}\))$/\1/p' "$gr_data" | head -n 1)
	if [ -z "$gr_want" ]; then
		echo "FAIL: golden: $gr_data has no '# model: FILE (sha256 HEX)' line; regenerate it with tests/ref/gen-model-ref.py"
		return 1
	fi
	gr_have=$(sha256sum "$gr_model" | cut -d' ' -f1)
	if [ "$gr_have" != "$gr_want" ]; then
		echo "FAIL: golden: $gr_model has SHA-256 $gr_have, but $gr_data was made from one with $gr_want: $gr_fix"
		return 1
	fi
	./tests/test_golden "$gr_model" "$gr_data"
}
