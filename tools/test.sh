#!/usr/bin/env bash
# `make test`: what CI runs (.ci/run). Three builds, each with warnings as errors:
#   build/         CUDA where nvcc is found (auto): every suite (unit, integration, gpu)
#   build-nocuda/  -Dcuda=disabled: every suite but gpu
#   build-asan/    -Dcuda=disabled, ASan + UBSan: the unit and integration suites,
#                  every process a test starts reporting into the test's own folder
#                  (tools/sanitized.sh): a report from any of them fails the test
# The oracle first (tools/install-oracle.sh, into .deps/oracle).
# Ends with one line "N passed, N failed, N skipped" over all three.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh || exit 1
# The oracle (llama.cpp's prebuilt libraries, from the npm registry): the
# tests that compare with it say they are skipped when it could not be
# installed, and the summary counts them.
tools/install-oracle.sh >/dev/null || echo "test: the oracle is not installed: its tests are skipped" >&2
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

status=0
run() { # dir, setup options..., then -- and meson test options
	local dir=$1; shift
	local setup=()
	while [[ $1 != -- ]]; do setup+=("$1"); shift; done
	shift
	echo "== $dir: meson setup ${setup[*]}" >&2
	if [[ ! -f $dir/build.ninja ]]; then
		meson setup "$dir" -Dwerror=true "${setup[@]}" >"$dir.setup.log" 2>&1 ||
			{ cat "$dir.setup.log" >&2; status=1; return; }
		rm -f "$dir.setup.log"
	fi
	meson compile -C "$dir" >&2 || { status=1; return; }
	meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" >&2 || status=1
}

run build -- --no-suite fuzz
run build-nocuda -Dcuda=disabled -- --no-suite gpu --no-suite fuzz
run build-asan -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false -- \
	--suite unit --suite integration --wrapper "$PWD/tools/sanitized.sh" --timeout-multiplier 3

# meson names a run's log after its wrapper: the ASan build's is
# testlog-sanitized.sh.json
logof() { [[ $1 == build-asan ]] && echo "$1/meson-logs/testlog-sanitized.sh.json" ||
	echo "$1/meson-logs/testlog.json"; }
pass=0 fail=0 skip=0
for d in build build-nocuda build-asan; do
	log=$(logof "$d")
	[[ -f $log ]] || continue
	read -r p f s < <(jq -rs '[.[] | .result] |
		"\(map(select(. == "OK" or . == "EXPECTEDFAIL")) | length)
		 \(map(select(. == "FAIL" or . == "TIMEOUT" or . == "ERROR" or . == "UNEXPECTEDPASS")) | length)
		 \(map(select(. == "SKIP")) | length)"' "$log" | tr '\n' ' ')
	pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
done
# A failed test's name and the last lines it printed go just above the
# summary, with the lines of its stderr that say why (a FAIL line, a
# sanitizer's), so that a log's tail says which test failed and how.
for d in build build-nocuda build-asan; do
	log=$(logof "$d")
	[[ -f $log ]] || continue
	jq -rs --arg d "$d" '.[] | select(.result == "FAIL" or .result == "TIMEOUT" or
		.result == "ERROR" or .result == "UNEXPECTEDPASS") |
		"FAILED \($d): \(.name) (\(.result), \(.duration | floor) s); its last lines:",
		((.stdout // "") | split("\n") | map(select(length > 0)) | .[-8:][] | "  | " + .[0:200]),
		((.stderr // "") | split("\n") |
			map(select(test("^FAIL|ERROR: |SUMMARY: |runtime error|^sanitized: "))) | .[0:6][] |
			"  ! " + .[0:300])' \
		"$log" >&2
done
[[ $fail -gt 0 ]] && status=1
echo "$pass passed, $fail failed, $skip skipped"
exit $status
