#!/bin/sh
# test-man.sh - the man pages against what they document:
#   - every public function of include/pagoda.h has its page,
#     man/FUNCTION.3, with NAME, SYNOPSIS, DESCRIPTION, RETURN VALUE,
#     ERRORS, EXAMPLE and SEE ALSO, the header's prototype in its SYNOPSIS,
#     a place in dist_man_MANS and in libpagoda(3)'s SEE ALSO;
#   - every option (and command) that `pagodad --help`, `pagoda --help`,
#     `pagodactl --help` and `pagoda-http --help` (once they are built) print appears in their pages;
#   - every configuration key (`pagodad --print-config`, and
#     systemd/pagodad.conf.example) appears in pagoda.conf(5), once pagodad
#     has a configuration file;
#   - every page renders without a warning (man --warnings, groff -ww).
# The documentation checks need no tools; without man and groff the pages
# are not rendered and the test then skips (77) if nothing else failed.
set -u
srcdir=${top_srcdir:-.}
man=$srcdir/man
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/lib.sh"

# A page's roff source as plain words: escapes and font changes gone, so
# that "\fB\-\-socket\fR" reads "--socket".
plain() {
	sed -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\f\[[A-Z]*\]//g' \
	    -e 's/\\[&%c]//g' -e 's/\\(en/-/g' -e 's/\\-/-/g' -e 's/\\e/\\/g' \
	    -e 's/^\.[A-Z][A-Z]* //' -e 's/"//g' "$1"
}
# mentions FILE WORD: WORD appears in FILE, not as part of a longer word
mentions() { grep -Eq -- "(^|[^a-zA-Z0-9_-])$2([^a-zA-Z0-9_-]|\$)" "$1"; }

# ---- libpagoda: a page per public function ----
header=$srcdir/include/pagoda.h
# the declarations, one per line: from a line starting with a type to ';'
awk '/^[a-z].*[ *]pagoda_[a-z_0-9]*\(/ { decl = "" ; on = 1 }
     on { decl = decl " " $0 }
     on && /;/ { print decl; on = 0 }' "$header" |
	sed -e 's/[[:space:]]\{1,\}/ /g' -e 's/^ //' >"$tmp/decls"
sed -n 's/^.*[ *]\(pagoda_[a-z_0-9]*\)(.*/\1/p' "$tmp/decls" >"$tmp/funcs"
check "include/pagoda.h declares functions" test -s "$tmp/funcs"
plain "$man/libpagoda.3" >"$tmp/libpagoda"
for f in $(cat "$tmp/funcs"); do
	page=$man/$f.3
	if [ ! -f "$page" ]; then
		echo "FAIL: $f has no page man/$f.3"
		fail=1
		continue
	fi
	for sec in NAME SYNOPSIS DESCRIPTION 'RETURN VALUE' ERRORS EXAMPLE 'SEE ALSO'; do
		grep -q "^\.SH \"\{0,1\}$sec\"\{0,1\}\$" "$page" ||
			{ echo "FAIL: man/$f.3 has no $sec section"; fail=1; }
	done
	sed -n '/^\.SH NAME/,/^\.SH/p' "$page" | grep -q "^$f\b" ||
		{ echo "FAIL: man/$f.3: NAME does not begin with $f"; fail=1; }
	# the prototype: the header's, spaces aside, in the SYNOPSIS
	proto=$(grep "[ *]$f(" "$tmp/decls" | sed -e 's/__attribute__.*;/;/' | tr -d ' ')
	sed -n '/^\.SH SYNOPSIS/,/^\.SH/p' "$page" | grep '^\.B' |
		sed -e 's/^\.BI* //' -e 's/"//g' -e 's/\\-/-/g' | tr -d ' \n' >"$tmp/synopsis"
	grep -qF -- "$proto" "$tmp/synopsis" ||
		{ echo "FAIL: man/$f.3: the SYNOPSIS lacks the header's prototype $proto"; fail=1; }
	grep -q "man/$f\.3" "$srcdir/man/local.mk" ||
		{ echo "FAIL: man/$f.3 is not in man/local.mk's dist_man_MANS"; fail=1; }
	sed -n '/^SEE ALSO/,$p' "$tmp/libpagoda" | grep -q "$f (3)" ||
		{ echo "FAIL: libpagoda(3) does not list $f(3) under SEE ALSO"; fail=1; }
done
echo "include/pagoda.h: $(wc -l <"$tmp/funcs") public functions"
for page in "$man"/pagoda_*.3; do
	f=$(basename "$page" .3)
	grep -qx "$f" "$tmp/funcs" ||
		{ echo "FAIL: man/$f.3 documents no function of include/pagoda.h"; fail=1; }
done

# ---- options and commands of each program's --help ----
# the words of a --help text: long options, and the commands: the first
# word of a line indented by two spaces under a heading ("Commands:",
# "Admin commands (...):"); option lines begin with a dash instead
help_words() {
	{
		grep -o -- '--[a-z][a-z0-9-]*' "$1"
		awk '/^[A-Z].*:$/ { on = 1; next }
		     /^$/ { on = 0 }
		     on && /^  [a-z]/ { print $1 }' "$1"
	} | sort -u
}
options() { # options PROGRAM PAGE
	prog=$1; page=$2
	if [ ! -x "$prog" ]; then
		echo "($prog is not built: its options are not checked)"
		return 0
	fi
	check "$prog --help exits 0" "$prog" --help >"$tmp/help"
	check "man/$page exists for $prog" test -f "$man/$page"
	[ -f "$man/$page" ] || return 0
	plain "$man/$page" >"$tmp/page"
	echo "$prog --help: $(help_words "$tmp/help" | wc -l) options and commands, checked in man/$page"
	for w in $(help_words "$tmp/help"); do
		mentions "$tmp/page" "$w" ||
			{ echo "FAIL: $prog --help has $w, man/$page does not"; fail=1; }
	done
}
options ./daemon/pagodad pagodad.8
options ./client/pagoda pagoda.1
options ./client/pagodactl pagodactl.8
options ./http/pagoda-http pagoda-http.8

# ---- configuration keys ----
keys() { # keys FILE: KEY of "KEY = VALUE" lines, commented out or not
	sed -n 's/^[#;[:space:]]*\([a-z][a-z0-9_.-]*\)[[:space:]]*=.*/\1/p' "$1" | sort -u
}
: >"$tmp/keys"
if ./daemon/pagodad --help 2>/dev/null | grep -q -- '--print-config'; then
	./daemon/pagodad --print-config >"$tmp/print" 2>"$tmp/print.err" </dev/null
	check "pagodad --print-config exits 0" test $? -eq 0
	keys "$tmp/print" >>"$tmp/keys"
	check "pagodad --print-config prints keys" test -s "$tmp/keys"
fi
[ -f "$srcdir/systemd/pagodad.conf.example" ] &&
	keys "$srcdir/systemd/pagodad.conf.example" >>"$tmp/keys"
if [ -s "$tmp/keys" ]; then
	if [ -f "$man/pagoda.conf.5" ]; then
		plain "$man/pagoda.conf.5" >"$tmp/conf"
		echo "configuration: $(sort -u "$tmp/keys" | wc -l) keys, checked in man/pagoda.conf.5"
		for k in $(sort -u "$tmp/keys"); do
			mentions "$tmp/conf" "$k" ||
				{ echo "FAIL: configuration key $k is not in pagoda.conf(5)"; fail=1; }
		done
	else
		echo "FAIL: pagodad has configuration keys but there is no man/pagoda.conf.5"
		fail=1
	fi
else
	echo "(no configuration keys yet: pagoda.conf(5) is not checked)"
fi

# ---- every page renders without a warning ----
rendered=0
for page in "$man"/*.[1-8]; do
	name=$(basename "$page")
	if command -v groff >/dev/null 2>&1; then
		groff -ww -z -t -man -Tutf8 "$page" >"$tmp/warn" 2>&1
		check "groff -ww $name: no warning" test ! -s "$tmp/warn"
		[ -s "$tmp/warn" ] && cat "$tmp/warn"
		rendered=1
	fi
	if command -v man >/dev/null 2>&1; then
		LC_ALL=C MANWIDTH=80 man --warnings=all -E UTF-8 -l "$page" 2>"$tmp/warn" >/dev/null
		check "man --warnings $name: renders" test $? -eq 0
		check "man --warnings $name: no warning" test ! -s "$tmp/warn"
		[ -s "$tmp/warn" ] && cat "$tmp/warn"
		rendered=1
	fi
done
if [ $rendered -eq 0 ]; then
	echo "SKIP: neither man nor groff: the pages were not rendered"
	[ $fail -eq 0 ] && exit 77
fi
exit $fail
