#!/usr/bin/env bash
# Integration: the real ignis-supervisor with its two real daemons in a private
# runtime directory. Each step says what it checks; the first failure stops the
# test and prints the supervisor's events.
#   supervisor.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: supervisor.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
probe=$build/tests/integration/wire-probe
work=$(mktemp -d /tmp/ignis-it-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
# the protocol version as the envelope's hex byte (proto/msg.h)
vh=$(printf '%02x' "$(sed -n 's/^#define MSG_PROTO_VERSION \([0-9]*\)u$/\1/p' \
	"$(dirname "$0")/../../proto/msg.h")")
status_json() { "$sup" status --runtime-dir "$rt" --json; }
field() { status_json | jq -r --arg r "$1" ".procs[] | select(.role == \$r) | .$2"; }
all_running() { [[ $(status_json | jq '[.procs[] | select(.state == "running")] | length') == 3 ]]; }
children() { pgrep -f -- "--runtime-dir $rt" || true; }
no_children() { [[ -z $(children) ]]; }

start_sup() {
	: >"$events"
	"$sup" start --runtime-dir "$rt" "$@" >>"$events" 2>>"$work/stderr" &
	sup_pid=$!
	wait_for 30 grep -q '"event":"ignis.supervisor.started"' "$events" ||
		fail "the supervisor did not report started within 30 s"
}

step "status with no supervisor: exit 1 and a clear message"
out=$("$sup" status --runtime-dir "$rt" 2>&1) && fail "status succeeded with nothing running"
grep -qF "$rt does not exist: no ignis-supervisor runs there" <<<"$out" || fail "unclear message: $out"

step "start: three processes running, sockets 0600 in a 0700 directory"
start_sup
wait_for 10 all_running || fail "not all running: $(status_json)"
[[ $(stat -c %a "$rt") == 700 ]] || fail "runtime dir mode $(stat -c %a "$rt")"
for s in supervisor kvstore gpu-worker; do
	[[ -S $rt/$s.sock ]] || fail "no socket $rt/$s.sock"
	[[ $(stat -c %a "$rt/$s.sock") == 600 ]] || fail "$s.sock mode $(stat -c %a "$rt/$s.sock")"
done
[[ $(field supervisor pid) == "$sup_pid" ]] || fail "status names supervisor pid $(field supervisor pid), not $sup_pid"
"$sup" status --runtime-dir "$rt" | grep -qE '^gpu-worker +[0-9]+ +running' ||
	fail "human status lacks the gpu-worker line"

step "every stdout line is one JSON event with ts, level, event"
jq -e -s 'all(.[]; (.ts | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$")) and .level and (.event | startswith("ignis.")))' \
	"$events" >/dev/null || fail "stdout holds something other than events"

step "a second supervisor on the same directory is refused"
out=$("$sup" start --runtime-dir "$rt" 2>&1 >/dev/null) && fail "second start succeeded"
grep -q "held by a running process (pid $sup_pid)" <<<"$out" || fail "unclear refusal: $out"

for role in kvstore gpu-worker; do
	step "kill -9 $role: restarted and answering within 5 s"
	old=$(field "$role" pid)
	restarts=$(field "$role" restarts)
	kill -9 "$old"
	restarted() {
		local pid state n
		pid=$(field "$role" pid) state=$(field "$role" state) n=$(field "$role" restarts)
		[[ $pid != "$old" && $pid != 0 && $state == running && $n == $((restarts + 1)) ]]
	}
	wait_for 5 restarted || fail "$role not back within 5 s: $(status_json)"
	grep "\"event\":\"ignis.supervisor.child_restarting\"" "$events" | grep -q "\"role\":\"$role\"" ||
		fail "no child_restarting event for $role"
	# "answering": the new process answers a ping on its own socket.
	"$probe" "$rt/$role.sock" hex 83a17402a176${vh}a373657101 | grep -q "type=pong" ||
		fail "$role does not answer a ping after its restart"
done

step "the gpu-worker took the VRAM plan at each of its starts"
[[ $(grep -c '"event":"ignis.gpu_worker.plan_received"' "$events") -ge 2 ]] ||
	fail "the restarted gpu-worker was not handed the plan"
grep -q '"event":"ignis.runtime.vram_plan"' "$events" || fail "start printed no plan event"
budget=$(grep '"event":"ignis.runtime.vram_plan"' "$events" | head -1 | jq .budget_bytes)
loaded=$(grep '"event":"ignis.runtime.vram_loaded"' "$events" | head -1)
[[ -n $loaded ]] || fail "the worker did not lay the plan out (no ignis.runtime.vram_loaded)"
jq -e --argjson b "$budget" '.allocated_bytes > 0 and .allocated_bytes <= $b' <<<"$loaded" >/dev/null ||
	fail "the layout holds more than the budget $budget: $loaded"

step "malformed messages get typed error replies; everyone keeps serving"
for s in supervisor kvstore gpu-worker; do
	"$probe" "$rt/$s.sock" hex c1 | grep -q "code=IG_E_PROTO_MALFORMED" || fail "$s: no MALFORMED reply"
	"$probe" "$rt/$s.sock" hex 83a17463a176${vh}a373657100 | grep -q "code=IG_E_PROTO_UNKNOWN_TYPE" ||
		fail "$s: no UNKNOWN_TYPE reply"
	"$probe" "$rt/$s.sock" hex 83a17402a1767fa373657100 | grep -q "code=IG_E_PROTO_VERSION" ||
		fail "$s: no VERSION reply"
done
grep -q '"event":"ignis.proto.rejected"' "$events" || fail "no ignis.proto.rejected event"
all_running || fail "not all running after malformed input: $(status_json)"

step "an oversize message is dropped; the supervisor keeps serving"
out=$("$probe" "$rt/supervisor.sock" size 300000)
grep -q "no-reply" <<<"$out" || fail "oversize got a reply: $out"
wait_for 15 all_running || fail "supervisor stopped answering after an oversize message"

step "clients that vanish mid-connect cannot take the front door down"
"$probe" "$rt/supervisor.sock" vanish 5 >/dev/null || fail "could not connect"
wait_for 20 all_running || fail "supervisor stopped answering after vanished clients"

step "SIGTERM: both daemons stop in order, no process and no socket left"
kill -TERM "$sup_pid"
wait "$sup_pid"
rc=$?
sup_pid=
[[ $rc == 0 ]] || fail "supervisor exited $rc on SIGTERM"
wait_for 5 no_children || fail "left running: $(children)"
[[ ! -e $rt ]] || [[ -z $(ls -A "$rt") ]] || fail "left in $rt: $(ls -A "$rt")"
grep '"event":"ignis.daemon.stopping"' "$events" | head -1 | grep -q '"proc":"gpu-worker"' ||
	fail "the gpu-worker was not stopped first"

step "stop command: the supervisor and its daemons go"
start_sup
"$sup" stop --runtime-dir "$rt" 2>/dev/null || fail "stop failed"
wait "$sup_pid"; sup_pid=
wait_for 5 no_children || fail "left running after stop: $(children)"

step "kill -9 of the supervisor takes its daemons with it"
start_sup
kill -9 "$sup_pid"; wait "$sup_pid" 2>/dev/null; sup_pid=
wait_for 5 no_children || fail "daemons outlived the supervisor: $(children)"
out=$("$sup" status --runtime-dir "$rt" 2>&1) && fail "status succeeded after kill -9"
grep -q "no ignis-supervisor runs at $rt/supervisor.sock" <<<"$out" || fail "unclear status after kill -9: $out"

step "a fresh start over the leftovers of kill -9 works"
start_sup
wait_for 10 all_running || fail "restart over leftovers: $(status_json)"
"$sup" stop --runtime-dir "$rt" 2>/dev/null || fail "stop failed"
wait "$sup_pid"; sup_pid=

step "bad configuration is refused with what was wrong"
echo "runtime_dir: [1, 2" >"$work/bad.yaml"
out=$("$sup" start -c "$work/bad.yaml" --runtime-dir "$rt" 2>&1 >/dev/null) && fail "bad YAML accepted"
grep -q "bad.yaml" <<<"$out" || fail "message does not name the file: $out"
echo "no_such_knob: 3" >"$work/unknown.yaml"
out=$("$sup" start -c "$work/unknown.yaml" --runtime-dir "$rt" 2>&1 >/dev/null) && fail "unknown key accepted"
grep -q "no_such_knob" <<<"$out" || fail "message does not name the key: $out"
out=$("$sup" start -c "$work/missing.yaml" --runtime-dir "$rt" 2>&1 >/dev/null) && fail "missing file accepted"
grep -q "missing.yaml" <<<"$out" || fail "message does not name the missing file: $out"
echo "runtime_dir: $rt" >"$work/good.yaml"
start_sup -c "$work/good.yaml"
"$sup" status -c "$work/good.yaml" >/dev/null || fail "status -c does not find the supervisor"
"$sup" stop -c "$work/good.yaml" 2>/dev/null || fail "stop -c failed"
wait "$sup_pid"; sup_pid=

step "IGNIS_RUNTIME_DIR outranks the file's runtime_dir"
: >"$events"
IGNIS_RUNTIME_DIR=$rt "$sup" start -c "$work/unused.yaml" >/dev/null 2>&1 &&
	fail "a missing config file was accepted"
echo "runtime_dir: $work/other" >"$work/other.yaml"
IGNIS_RUNTIME_DIR=$rt "$sup" start -c "$work/other.yaml" >>"$events" 2>>"$work/stderr" &
sup_pid=$!
wait_for 30 grep -q '"event":"ignis.supervisor.started"' "$events" || fail "no start"
grep '"event":"ignis.supervisor.started"' "$events" | grep -q "\"runtime_dir\":\"$rt\"" ||
	fail "the file's runtime_dir beat IGNIS_RUNTIME_DIR"
IGNIS_RUNTIME_DIR=$rt "$sup" stop 2>/dev/null || fail "stop failed"
wait "$sup_pid"; sup_pid=

step "a daemon started by hand on the directory keeps its files when a start is refused"
mkdir -p -m 700 "$rt"
"$build/kvstore-daemon/ignis-kvstored" --runtime-dir "$rt" >/dev/null &
hand=$!
wait_for 5 test -S "$rt/kvstore.sock" || fail "hand-started kvstore did not listen"
out=$("$sup" start --runtime-dir "$rt" 2>&1 >/dev/null) && fail "start over a live kvstore succeeded"
grep -q "held by a running process (pid $hand)" <<<"$out" || fail "unclear refusal: $out"
[[ -S $rt/kvstore.sock && -f $rt/kvstore.lock ]] || fail "the live kvstore's files were removed"
"$probe" "$rt/kvstore.sock" hex 83a17402a176${vh}a373657101 | grep -q "type=pong" ||
	fail "the hand-started kvstore stopped answering"
kill -TERM "$hand"; wait "$hand"
[[ ! -e $rt/kvstore.sock ]] || fail "the kvstore left its socket on SIGTERM"

step "a daemon of another protocol version or role is refused with a clear message"
mkdir -p "$work/bin"
fake_bin() { # program, socket name, role it claims, version it speaks
	printf '#!/bin/sh\nexec "%s" fake-daemon %s %s %s "$2"\n' "$(realpath "$probe")" "$2" "$3" "$4" \
		>"$work/bin/$1"
	chmod +x "$work/bin/$1"
}
proto_v=$(sed -n 's/^#define MSG_PROTO_VERSION \([0-9]*\)u$/\1/p' "$(dirname "$0")/../../proto/msg.h")
[[ -n $proto_v ]] || fail "no MSG_PROTO_VERSION in proto/msg.h"
fake_bin ignis-kvstored kvstore kvstore 1
cp "$build/gpu-worker/ignis-gpu-worker" "$work/bin/"
out=$(timeout 20 "$sup" start --runtime-dir "$rt" --bin-dir "$work/bin" 2>&1 >/dev/null) &&
	fail "a version-1 kvstore was accepted"
grep -q "refused the handshake: peer speaks protocol version 1, we speak $proto_v" <<<"$out" ||
	fail "unclear version refusal: $out"
wait_for 5 no_children || fail "left running after a refused handshake: $(children)"
fake_bin ignis-kvstored kvstore gpu-worker "$proto_v"
out=$(timeout 20 "$sup" start --runtime-dir "$rt" --bin-dir "$work/bin" 2>&1 >/dev/null) &&
	fail "a kvstore claiming to be the gpu-worker was accepted"
grep -q "says it is 'gpu-worker'" <<<"$out" || fail "unclear role refusal: $out"
wait_for 5 no_children || fail "left running after a refused handshake: $(children)"

step "the shipped example configuration (etc/ignis.yaml) serves its built-in model"
src=$(cd "$(dirname "$0")/../.." && pwd)
start_sup -c "$src/etc/ignis.yaml"
grep -q '"ignis.frontdoor.listening".*"serving":true' "$events" || fail "the door does not serve"
grep -q '"ignis.supervisor.builtin_weights".*"model":"tiny-chat"' "$events" || fail "no weights written"
"$build/client/ignis-client" --runtime-dir "$rt" generate --prompt hello --max-tokens 12 \
	>"$work/example.got" || fail "generate on the example configuration"
"$build/tools/ignis-mkmodel" --preset tiny-chat --seed 1 -o "$work/td.gguf" 2>/dev/null || fail "mkmodel"
"$build/tools/ignis-generate" --model "$work/td.gguf" --prompt hello --max-tokens 12 \
	--kv-format fp8 >"$work/example.want" || fail "in-process generate"
cmp -s "$work/example.got" "$work/example.want" ||
	fail "the example's tokens differ from ignis-mkmodel --preset tiny-chat --seed 1's"
kill -TERM "$sup_pid"; wait "$sup_pid"; sup_pid=
[[ ! -e $rt ]] || [[ -z $(ls -A "$rt") ]] || fail "left in $rt: $(ls -A "$rt")"

echo "supervisor integration: all steps passed"
