#!/usr/bin/env bash
# Integration: every program as an operator first meets it. `--help` (and
# `-h` where the usage offers it) prints the usage on stdout and exits 0,
# for each program and each verb; an unknown option exits 2 naming it;
# counts and sizes take K/M/G/T suffixes as the knobs do; a sampler value is
# refused naming what was sent, and a tiny top_p is a top_p.
#   programs.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: programs.sh BUILD_DIR}
work=$(mktemp -d /tmp/ignis-programs-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }

sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
declare -A path=(
	[ignis-supervisor]=$sup
	[ignis-gpu-worker]=$build/gpu-worker/ignis-gpu-worker
	[ignis-kvstored]=$build/kvstore-daemon/ignis-kvstored
	[ignis-kvstore-ctl]=$build/kvstore-daemon/ignis-kvstore-ctl
	[ignis-client]=$build/client/ignis-client
	[ignis-generate]=$gen
	[ignis-mkmodel]=$build/tools/ignis-mkmodel
	[ignis-bench]=$build/tools/ignis-bench
)

# usage_ok PROGRAM ARGS...: exit 0, stdout begins "usage: PROGRAM", stderr empty
usage_ok() {
	local prog=$1 rc out err
	shift
	out=$(timeout 10 "${path[$prog]}" "$@" 2>"$work/err"); rc=$?
	err=$(cat "$work/err")
	[[ $rc == 0 ]] || fail "'$prog $*' exited $rc, want 0; stderr: $err"
	[[ $(head -1 <<<"$out") == "usage: $prog"* ]] ||
		fail "'$prog $*' does not begin with 'usage: $prog': $(head -3 <<<"$out")"
	[[ -z $err ]] || fail "'$prog $*' wrote to stderr: $err"
}

step "--help: every program and every verb, usage on stdout, exit 0"
for prog in "${!path[@]}"; do
	[[ -x ${path[$prog]} ]] || fail "$prog is not built at ${path[$prog]}"
	usage_ok "$prog" --help
done
for verb in start plan status stop restart reference; do
	usage_ok ignis-supervisor "$verb" --help
done
for verb in generate status cancel; do
	usage_ok ignis-client "$verb" --help
done

step "-h where the usage offers it"
for prog in ignis-supervisor ignis-client ignis-generate ignis-mkmodel ignis-bench; do
	usage_ok "$prog" -h
done

step "an unknown option: exit 2, naming it (the supervisor's after its verb)"
for prog in "${!path[@]}"; do
	args=(--no-such-option)
	[[ $prog == ignis-supervisor ]] && args=(plan --no-such-option)
	out=$(timeout 10 "${path[$prog]}" "${args[@]}" 2>&1 >/dev/null); rc=$?
	[[ $rc == 2 ]] || fail "'$prog ${args[*]}' exited $rc, want 2: $out"
	grep -q -- "--no-such-option" <<<"$out" || fail "$prog does not name the option: $out"
done

step "ignis-generate: counts take K/M suffixes as the knobs do"
"$build/tools/ignis-mkmodel" --preset tiny-dense -o "$work/m.gguf" --seed 3 2>/dev/null ||
	fail "mkmodel"
args=(--model "$work/m.gguf" --prompt "Sizes, please." --max-tokens 12 --seed 5
      --temperature 0.8)
# the model's text is seeded noise: compare it as bytes
a=$("$gen" "${args[@]}" --chunk 1024 | od -An -tx1) || fail "--chunk 1024 failed"
b=$("$gen" "${args[@]}" --chunk 1K | od -An -tx1) || fail "--chunk 1K refused"
[[ -n $a && $a == "$b" ]] || fail "--chunk 1K differs from --chunk 1024"
out=$("$gen" "${args[@]}" --chunk 2M 2>&1) && fail "--chunk 2M (past 1M) accepted"
grep -q -- "--chunk '2M'; accepted" <<<"$out" || fail "unclear --chunk 2M refusal: $out"
out=$("$gen" "${args[@]}" --top-k 1Q 2>&1); rc=$?
[[ $rc == 2 ]] || fail "--top-k 1Q exited $rc, want 2: $out"

step "sampler values: what was sent is named; a tiny top_p is a top_p"
greedy=$("$gen" --model "$work/m.gguf" --prompt "Tiny." --max-tokens 12 --top-k 1 | od -An -tx1) ||
	fail "greedy failed"
tiny=$("$gen" --model "$work/m.gguf" --prompt "Tiny." --max-tokens 12 --temperature 0.8 \
	--top-p 1e-300 2>"$work/err" | od -An -tx1) || fail "--top-p 1e-300 refused: $(cat "$work/err")"
[[ $tiny == "$greedy" ]] || fail "--top-p 1e-300 is not the top-1 pick: '$tiny' vs '$greedy'"
out=$("$gen" --model "$work/m.gguf" --prompt x --top-p 1.0000001 2>&1) && fail "top-p 1.0000001 accepted"
grep -q "top_p 1.0000001 is out of range" <<<"$out" || fail "does not say what was sent: $out"
out=$("$gen" --model "$work/m.gguf" --prompt x --top-p 0 2>&1) && fail "top-p 0 accepted"
grep -q "top_p 0 is out of range" <<<"$out" || fail "unclear top-p 0 refusal: $out"
out=$("$gen" --model "$work/m.gguf" --prompt x --temperature 1e40 2>&1) && fail "temperature 1e40 accepted"
grep -q "temperature 1e+40 is out of range" <<<"$out" || fail "does not say what was sent: $out"
step "runtime-dir refusals: exit 2 (a configuration error), saying what is accepted"
mkdir -m 700 "$work/real"
ln -s "$work/real" "$work/link"
# (a start that is not refused runs: `timeout` ends it, and the test fails)
out=$(timeout 20 "$sup" start --runtime-dir "$work/link" 2>&1 >/dev/null); rc=$?
[[ $rc == 2 ]] || fail "a symlinked runtime dir: exit $rc, want 2: $out"
grep -q "is a symbolic link (to '$work/real'); accepted: a directory itself" <<<"$out" ||
	fail "unclear symlink refusal: $out"
mkdir -m 700 "$work/open" && chmod 0777 "$work/open"
out=$(timeout 20 "$sup" start --runtime-dir "$work/open/rt" 2>&1 >/dev/null); rc=$?
[[ $rc == 2 ]] || fail "a runtime dir under a 0777 parent: exit $rc, want 2: $out"
grep -q "'$work/open' (mode 777) can be written by others and is not sticky" <<<"$out" ||
	fail "unclear parent refusal: $out"
[[ ! -e $work/open/rt ]] || fail "the refused runtime dir was created"
out=$(IGNIS_RUNTIME_DIR=relative/rt "$sup" status 2>&1 >/dev/null); rc=$?
[[ $rc == 2 ]] || fail "status with a relative runtime dir: exit $rc, want 2: $out"
grep -q "is not an absolute path" <<<"$out" || fail "unclear relative refusal: $out"
out=$("$sup" stop --runtime-dir "$work/open/rt" 2>&1 >/dev/null); rc=$?
[[ $rc == 1 ]] || fail "stop with no supervisor there: exit $rc, want 1 (not running): $out"

step "through the worker and the front door: top_p 1e-300 is served, top_p 0 refused as sent"
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
"$sup" start --runtime-dir "$rt" --model "$work/m.gguf" --model-kv-format bf16 \
	--model-max-context 512 >"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.gpu_worker.model_loaded"' "$events" || fail "no model loaded"
got=$("$gen" --worker --runtime-dir "$rt" --prompt "Tiny." --max-tokens 12 --temperature 0.8 \
	--top-p 1e-300 2>"$work/err" | od -An -tx1) || fail "worker: --top-p 1e-300 refused: $(cat "$work/err")"
[[ $got == "$greedy" ]] || fail "worker: --top-p 1e-300 is not the top-1 pick"
"$build/client/ignis-client" --runtime-dir "$rt" generate --prompt "Tiny." --max-tokens 12 \
	--temperature 0.8 --top-p 1e-300 >"$work/door" 2>"$work/err" ||
	fail "front door: --top-p 1e-300 refused: $(cat "$work/err")"
out=$("$build/client/ignis-client" --runtime-dir "$rt" generate --prompt "Tiny." --top-p 0 2>&1) &&
	fail "front door: top-p 0 accepted"
grep -q "top_p 0 is out of range" <<<"$out" || fail "front door: unclear top-p 0 refusal: $out"
"$sup" stop --runtime-dir "$rt" 2>/dev/null || fail "stop failed"
wait "$sup_pid"; sup_pid=
echo "programs integration: all steps passed"
