#!/usr/bin/env bash
# tools/demo.sh (`make demo`) runs through on this build: every request
# finishes, the interactive one streams, the moves are listed, the status and
# the metrics page show the four requests.
#   demo-check.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=${1:?usage: demo-check.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: demo-check.sh BUILD_DIR SOURCE_DIR}
fail() { echo "FAIL: $*"; echo "---- demo ----"; cat "$out"; exit 1; }
out=$(mktemp /tmp/ignis-democheck-XXXXXX)
# a private default runtime directory: never a developer's running system
export XDG_RUNTIME_DIR
XDG_RUNTIME_DIR=$(mktemp -d /tmp/ignis-demo-xdg-XXXXXX)
trap 'rm -f "$out"; rm -rf "$XDG_RUNTIME_DIR"' EXIT
timeout 100 "$src/tools/demo.sh" "$build" >"$out" 2>&1 || fail "demo.sh exited $?"
[[ $(grep -c '^   agent [0-9]*: [0-9]* tokens, finish \(length\|eos\)' "$out") == 3 ]] || fail "three agents"
grep -q '^== 2. an interactive request' "$out" || fail "no interactive request"
grep -q 'totals    4 admitted, 4 finished, 0 failed' "$out" || fail "status"
grep -q '^ignis_requests_accepted_total 4$' "$out" || fail "metrics: accepted"
grep -q '^ignis_request_ttft_seconds_count 4$' "$out" || fail "metrics: ttft"
grep -q '^== the moves (events)' "$out" || fail "no moves section"
# the demo's own system is sized so that the interactive request moves an
# agent out and back
grep -q '^   request [0-9]* moved out: ' "$out" || fail "the demo showed no move out"
grep -q '^   request [0-9]* moved in: ' "$out" || fail "the demo showed no move back in"
grep -q '^   request [0-9]* restored: it goes on where it stopped' "$out" || fail "the demo showed no resume"
pgrep -f -- "--runtime-dir /tmp/ignis-demo-" >/dev/null && fail "the demo left its system running"
echo "demo: ran through"
