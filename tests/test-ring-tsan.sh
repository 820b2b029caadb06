#!/bin/sh
# test-ring-tsan.sh - run test_ring's ThreadSanitizer build (tests/test_ring_tsan).
#
# A data race, a TSan report of any kind, or a failure of the test itself
# fails.  When ThreadSanitizer cannot start on this kernel (its shadow
# memory clashes with the address-space layout: "unexpected memory
# mapping"), it tries again with address randomisation off (setarch -R),
# and skips (77) if that is not allowed either: never a pass.
prog=${top_builddir:-.}/tests/test_ring_tsan
log=${TMPDIR:-/tmp}/test-ring-tsan.$$
trap 'rm -f "$log"' EXIT
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS}"
export TSAN_OPTIONS

cannot_start() {
	grep -q -e 'unexpected memory mapping' -e 'failed to allocate' \
		-e 'ThreadSanitizer: .*not supported' "$log"
}

"$prog" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ] && cannot_start; then
	echo "test-ring-tsan: ThreadSanitizer cannot start; retrying under setarch -R"
	if setarch "$(uname -m)" -R true 2>/dev/null; then
		setarch "$(uname -m)" -R "$prog" >"$log" 2>&1
		rc=$?
	fi
	if [ $rc -ne 0 ] && cannot_start; then
		cat "$log"
		echo "test-ring-tsan: SKIP: ThreadSanitizer cannot run on this kernel"
		exit 77
	fi
fi
cat "$log"
if grep -q 'WARNING: ThreadSanitizer' "$log" && [ $rc -eq 0 ]; then
	echo "test-ring-tsan: FAIL: ThreadSanitizer reported, yet the exit status was 0"
	exit 1
fi
exit $rc
