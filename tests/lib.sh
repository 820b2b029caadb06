# tests/lib.sh - what the shell tests share; sourced, not run:
#
#   . "$(dirname "$0")/lib.sh"
#
# check DESCRIPTION COMMAND...: run COMMAND; when it fails, print
# "FAIL: DESCRIPTION" and set fail=1, which the test turns into its exit
# status at the end.  The test goes on either way, so that one run shows
# every failure.
fail=0
check() {
	what=$1; shift
	if "$@"; then :; else echo "FAIL: $what"; fail=1; fi
}
