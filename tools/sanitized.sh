#!/usr/bin/env bash
# The wrapper of every test of the ASan + UBSan build (tools/test.sh: meson
# test --wrapper): each process the test starts, the daemons it spawns
# included, writes its sanitizer reports into a folder of this test's own
# instead of a stderr nobody reads (a supervisor's daemons' stderr goes to
# its event stream; a daemon that aborts on a report is restarted, and the
# test could still pass). A report from any of them fails the test, printed
# whole; without one the test's own result stands.
#   sanitized.sh COMMAND [ARGS...]
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/ignis-sanitizer-XXXXXX)
# Later options win: the test's own (meson's env, the caller's) come first.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1:detect_leaks=1:log_path=$dir/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1:log_path=$dir/ubsan"
# nng 1.5.2's leak of a listener a client wedged (tests/lsan.supp says why)
[[ ${LSAN_OPTIONS:-} == *suppressions=* ]] ||
	export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$top/tests/lsan.supp"
"$@"
rc=$?
# A file that only lists the suppressions used (printed at every exit that
# had some) is not a report.
shopt -s nullglob
reports=()
for f in "$dir"/*; do
	grep -qE 'ERROR: |runtime error|SUMMARY: ' "$f" && reports+=("$f")
done
if ((${#reports[@]})); then
	for f in "${reports[@]}"; do
		echo "==== sanitizer report $(basename "$f") ====" >&2
		cat "$f" >&2
	done
	echo "sanitized: ${#reports[@]} sanitizer report(s) from the processes of '$*'" >&2
	rc=1
fi
rm -rf "$dir"
exit "$rc"
