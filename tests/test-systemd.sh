#!/bin/sh
# test-systemd.sh - the units, sysusers.d and tmpfiles.d files as make
# builds them: `systemd-analyze verify` passes on the units (pagodad's;
# pagoda-http's where it is built) (its ExecStart
# pointed at this build's pagodad, its Documentation= pages taken from
# man/); the unit keeps its hardening; systemd-sysusers and
# systemd-tmpfiles take the entries (into a scratch root).  Where systemd
# runs as PID 1 and this is root, a copy of the unit (a test name, a low
# WatchdogSec) runs this build's pagodad on a generated model: it must
# reach READY with its STATUS, be restarted by the watchdog once stopped
# with SIGSTOP, and stop cleanly.  Skips (77) without systemd-analyze.
# The daemon's side of the protocol, without systemd: test-notify.sh.
set -u
srcdir=${top_srcdir:-.}
unit=./systemd/pagodad.service
tmp=$(mktemp -d)
live=
cleanup() {
	if [ -n "$live" ]; then
		systemctl stop "$live" 2>/dev/null
		rm -f "/run/systemd/system/$live"
		systemctl daemon-reload 2>/dev/null
		systemctl reset-failed "$live" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"
has() { grep -qxF -- "$1" "$unit"; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: no systemd-analyze"
	exit 77
fi
[ -f "$unit" ] || { echo "FAIL: $unit was not built (make builds it)"; exit 1; }

# ---- the unit as built ----
check "ExecStart is the installed pagodad, in the foreground" \
	grep -q '^ExecStart=/[^@]*/pagodad --foreground' "$unit"
check "no @variable@ left" test -z "$(grep '@[a-z_]*@' "$unit")"
for line in Type=notify NotifyAccess=main 'ExecReload=/bin/kill -HUP $MAINPID' \
	User=pagoda Group=pagoda RuntimeDirectory=pagoda RuntimeDirectoryMode=0755 \
	StateDirectory=pagoda LimitMEMLOCK=infinity Restart=on-failure \
	NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
	DevicePolicy=closed 'DeviceAllow=char-nvidia* rw' \
	RestrictAddressFamilies=AF_UNIX ProtectKernelTunables=yes \
	ProtectKernelModules=yes ProtectKernelLogs=yes ProtectControlGroups=yes \
	RestrictNamespaces=yes LockPersonality=yes RestrictRealtime=yes \
	SystemCallArchitectures=native MemoryDenyWriteExecute=yes \
	CapabilityBoundingSet= AmbientCapabilities= SyslogLevel=err; do
	check "the unit says $line" has "$line"
done
check "a watchdog" grep -q '^WatchdogSec=[1-9]' "$unit"

# ---- systemd-analyze verify ----
# The command must exist and be executable, and every man: page must be
# found: this build's pagodad and the pages of man/ stand in for the
# installed ones.
bin=$(cd daemon && pwd)/pagodad
mkdir -p "$tmp/verify" "$tmp/man"
sed "s|^ExecStart=[^ ]*|ExecStart=$bin|" "$unit" >"$tmp/verify/pagodad.service"
for page in "$srcdir"/man/*.[1-8]; do
	sec=${page##*.}
	mkdir -p "$tmp/man/man$sec"
	cp "$page" "$tmp/man/man$sec/"
done
for doc in $(sed -n 's/^Documentation=//p' "$unit"); do
	page=${doc#man:}
	name=${page%(*}
	sec=${page#*(}; sec=${sec%)}
	check "Documentation=$doc exists in man/" test -f "$srcdir/man/$name.$sec"
done
MANPATH=$tmp/man systemd-analyze verify "$tmp/verify/pagodad.service" >"$tmp/verify.out" 2>&1
rc=$?
cat "$tmp/verify.out"
check "systemd-analyze verify exits 0" test $rc -eq 0
check "systemd-analyze verify says nothing of pagodad.service" \
	test -z "$(grep 'pagodad\.service' "$tmp/verify.out")"
[ $rc -eq 0 ] && [ ! -s "$tmp/verify.out" ] && echo "systemd-analyze verify: no complaint"

# ---- pagoda-http's unit ----
hunit=./systemd/pagoda-http.service
hhas() { grep -qxF -- "$1" "$hunit"; }
check "pagoda-http.service was built" test -f "$hunit"
check "pagoda-http: ExecStart is the installed pagoda-http with its options" \
	grep -q '^ExecStart=/[^@]*/pagoda-http \$PAGODA_HTTP_OPTIONS$' "$hunit"
check "pagoda-http: no @variable@ left" test -z "$(grep '@[a-z_]*@' "$hunit")"
for line in Type=exec 'EnvironmentFile=-/etc/pagoda/pagoda-http.env' \
	User=pagoda-http Group=pagoda-http SupplementaryGroups=pagoda \
	Wants=pagodad.service 'After=pagodad.service network.target' \
	Restart=on-failure NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
	PrivateTmp=yes PrivateDevices=yes 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' \
	CapabilityBoundingSet= AmbientCapabilities= MemoryDenyWriteExecute=yes \
	SystemCallFilter=@system-service SystemCallArchitectures=native; do
	check "pagoda-http's unit says $line" hhas "$line"
done
for doc in $(sed -n 's/^Documentation=//p' "$hunit"); do
	page=${doc#man:}
	name=${page%(*}
	sec=${page#*(}; sec=${sec%)}
	check "pagoda-http: Documentation=$doc exists in man/" test -f "$srcdir/man/$name.$sec"
done
if [ -x ./http/pagoda-http ]; then
	hbin=$(cd http && pwd)/pagoda-http
	sed "s|^ExecStart=[^ ]*|ExecStart=$hbin|" "$hunit" >"$tmp/verify/pagoda-http.service"
	MANPATH=$tmp/man systemd-analyze verify "$tmp/verify/pagoda-http.service" >"$tmp/verify-http.out" 2>&1
	rc=$?
	cat "$tmp/verify-http.out"
	check "systemd-analyze verify exits 0 on pagoda-http.service" test $rc -eq 0
	check "systemd-analyze verify says nothing of pagoda-http.service" \
		test -z "$(grep 'pagoda-http\.service' "$tmp/verify-http.out")"
else
	echo "SKIP: systemd-analyze verify of pagoda-http.service: pagoda-http is not built"
fi

# ---- sysusers.d and tmpfiles.d ----
if command -v systemd-sysusers >/dev/null 2>&1 && command -v systemd-tmpfiles >/dev/null 2>&1 &&
   [ "$(id -u)" -eq 0 ]; then
	root=$tmp/root
	mkdir -p "$root/etc"
	systemd-sysusers --root="$root" "$(pwd)/systemd/sysusers.d/pagoda.conf" >/dev/null 2>&1
	check "systemd-sysusers takes sysusers.d/pagoda.conf" test $? -eq 0
	check "sysusers: the pagoda user" grep -q '^pagoda:x:[0-9]*:[0-9]*:.*:/var/lib/pagoda:' "$root/etc/passwd"
	check "sysusers: the pagoda group" grep -q '^pagoda:x:' "$root/etc/group"
	check "sysusers: the pagoda-admin group" grep -q '^pagoda-admin:x:' "$root/etc/group"
	check "sysusers: the pagoda-http user" grep -q '^pagoda-http:x:' "$root/etc/passwd"
	check "sysusers: pagoda-http is in the pagoda group" \
		grep -q '^pagoda:x:[0-9]*:\(.*,\)\{0,1\}pagoda-http\(,.*\)\{0,1\}$' "$root/etc/group"
	systemd-tmpfiles --root="$root" --create "$(pwd)/systemd/tmpfiles.d/pagoda.conf"
	check "systemd-tmpfiles takes tmpfiles.d/pagoda.conf" test $? -eq 0
	uid=$(grep '^pagoda:' "$root/etc/passwd" | cut -d: -f3)
	check "tmpfiles: /var/lib/pagoda/models, the pagoda user's" \
		test "$(stat -c %u "$root/var/lib/pagoda/models" 2>/dev/null)" = "$uid"
elif command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers --dry-run --root="$tmp/root" "$(pwd)/systemd/sysusers.d/pagoda.conf" >/dev/null 2>&1
	check "systemd-sysusers --dry-run takes sysusers.d/pagoda.conf" test $? -eq 0
	echo "SKIP: tmpfiles.d: needs root and systemd-tmpfiles"
else
	echo "SKIP: sysusers.d and tmpfiles.d: no systemd-sysusers"
fi

# ---- under systemd itself ----
if [ "$(cat /proc/1/comm 2>/dev/null)" != systemd ] || [ "$(id -u)" -ne 0 ] ||
   [ ! -d /run/systemd/system ]; then
	echo "SKIP: the unit under systemd: not root, or systemd is not PID 1"
	exit $fail
fi
gen=./tests/gen/gguf-gen
live=pagodad-test-$$.service
$gen --preset tiny --type q4_1 --embd-type q8_0 --seed 5 --out "$tmp/tiny.gguf" >/dev/null ||
	{ echo "FAIL: gguf-gen"; exit 1; }
chmod 755 "$tmp"
# The test copy: its own name, runtime directory and socket; this build's
# binary, which may live under /tmp or /home (hence PrivateTmp=no and
# ProtectHome=read-only); the pagoda user only where it exists; a 2 s
# watchdog (SIGABRT, then SIGKILL 5 s later; no core dump).
user_lines='/^User=/d; /^Group=/d; /^SupplementaryGroups=/d'
getent passwd pagoda >/dev/null && getent group pagoda-admin >/dev/null && user_lines=
sed -e "s|^ExecStart=.*|ExecStart=$bin --foreground --model $tmp/tiny.gguf --socket /run/pagoda-test-$$/pagodad.sock|" \
	-e "s|^RuntimeDirectory=.*|RuntimeDirectory=pagoda-test-$$|" \
	-e "/^StateDirectory=/d; /^Documentation=/d; /^Environment=/d; $user_lines" \
	-e "s|^PrivateTmp=.*|PrivateTmp=no|; s|^ProtectHome=.*|ProtectHome=read-only|" \
	-e "s|^WatchdogSec=.*|WatchdogSec=2s\nTimeoutAbortSec=5s\nLimitCORE=0|; s|^RestartSec=.*|RestartSec=1s|" \
	"$unit" >"/run/systemd/system/$live"
systemctl daemon-reload
show() { systemctl show -p "$1" --value "$live"; }
until_shown() { # until_shown PROPERTY VALUE: wait up to 10 s for it
	n=0
	while [ $n -lt 100 ] && [ "$(show "$1")" != "$2" ]; do sleep 0.1; n=$((n + 1)); done
	[ "$(show "$1")" = "$2" ]
}

timeout 120 systemctl start "$live"
check "systemctl start returns once READY=1 came" test $? -eq 0
check "the unit is active" test "$(show ActiveState)" = active
check "its status: serving 0 clients" until_shown StatusText "serving 0 clients"
check "its socket exists" test -S "/run/pagoda-test-$$/pagodad.sock"
pid=$(show MainPID)
check "the main pid is pagodad" test "$(cat /proc/"$pid"/comm 2>/dev/null)" = pagodad

systemctl reload "$live"
check "systemctl reload (SIGHUP) returns" test $? -eq 0
check "after a reload, the same process" test "$(show MainPID)" = "$pid"

# a hung daemon: no pings for WatchdogSec, killed (SIGABRT) and restarted
kill -STOP "$pid"
n=0
while [ $n -lt 200 ] && [ "$(show MainPID)" = "$pid" ]; do sleep 0.1; n=$((n + 1)); done
check "restarted: active again" until_shown ActiveState active
new=$(show MainPID)
check "the watchdog restarted the hung daemon (a new main pid)" test "$new" != "$pid" -a "$new" != 0
check "restarted: NRestarts >= 1" test "$(show NRestarts)" -ge 1
journalctl -u "$live" -o cat --no-pager 2>/dev/null | grep -i watchdog | head -3

systemctl stop "$live"
check "systemctl stop: inactive" test "$(show ActiveState)" = inactive
check "stop: the socket is gone" test ! -e "/run/pagoda-test-$$/pagodad.sock"
exit $fail
