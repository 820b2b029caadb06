#!/bin/sh
# test-faults.sh - allocation failure injection (tests/test_faults.c): a
# pagodad started with PAGODA_FAULT_INJECTION=1 fails the Nth allocation
# of a victim's whole request path, for every N in turn, beside a
# bystander that must stay served.  Then the daemon is stopped: it must
# exit 0, and its log must hold no sanitizer report (in the sanitizer
# build LeakSanitizer runs at its exit, so every leak fails the test).
# Also checks that a daemon started without the variable refuses FAULT.
set -u
bin=./daemon/pagodad
gen=./tests/gen/gguf-gen
tmp=$(mktemp -d)
dpid=
cleanup() {
	[ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"

$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }

start() { # start NAME [ENV...]: a daemon on $tmp/NAME.sock, pid in $dpid
	name=$1; shift
	env "$@" $bin --model "$tmp/tiny.gguf" --socket "$tmp/$name.sock" \
		--admin-socket "$tmp/$name-admin.sock" --foreground --log-level info \
		--kv-size 4M >"$tmp/$name.log" 2>&1 &
	dpid=$!
	n=0
	while [ $n -lt 300 ] && ! grep -q "listening on .*; pid $dpid$" "$tmp/$name.log"; do
		kill -0 $dpid 2>/dev/null || break
		sleep 0.1; n=$((n + 1))
	done
	grep -q "listening on .*; pid $dpid$" "$tmp/$name.log" ||
		{ echo "FAIL: pagodad $name did not start"; cat "$tmp/$name.log"; exit 1; }
}

# without the variable, FAULT is refused and names it
start plain
./tests/test_faults "$tmp/plain.sock" "$tmp/plain-admin.sock" >"$tmp/plain.out" 2>&1
check "without PAGODA_FAULT_INJECTION the FAULT command is refused" test $? -ne 0
check "... saying how to enable it" grep -q "PAGODA_FAULT_INJECTION" "$tmp/plain.out"
kill -TERM $dpid; wait $dpid; dpid=

start faults PAGODA_FAULT_INJECTION=1
./tests/test_faults "$tmp/faults.sock" "$tmp/faults-admin.sock"
check "every allocation of the request path failed in turn: clear errors, bystander served" test $? -eq 0
kill -TERM $dpid; wait $dpid; status=$?; dpid=
check "pagodad exits 0 after the faults (status $status)" test $status -eq 0
if grep -Eq "AddressSanitizer|LeakSanitizer|runtime error|Segmentation|Aborted" "$tmp/faults.log"; then
	echo "FAIL: a sanitizer report in the daemon's log:"
	grep -E -A30 "AddressSanitizer|LeakSanitizer|runtime error" "$tmp/faults.log" | head -80
	fail=1
fi
grep -c "out of memory" "$tmp/faults.log" | sed 's/^/test-faults: log lines naming out of memory: /'
exit $fail
