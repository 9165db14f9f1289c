#!/usr/bin/env bash
# `make run` and `make config` take the same variables: every knob's make
# variable (the knob table's KNOB_MAKE_VARS, as `ignis-supervisor --help`
# names them) and CONFIG reach the supervisor from both, each knob as its
# flag with the value given (one argument, however the value is quoted), and
# nothing else does; without them, `make run` passes nothing (the embedded
# default) and `make config` the built-in defaults on cuda. The two targets
# run for real, against a stand-in supervisor in a build directory of the
# test's own (BUILD=) that writes down its arguments; `-o build` keeps make
# from building or installing anything.
#   make-vars.sh SUPERVISOR SOURCE_ROOT
set -uo pipefail
sup=${1:?usage: make-vars.sh SUPERVISOR SOURCE_ROOT}
src=${2:?usage: make-vars.sh SUPERVISOR SOURCE_ROOT}
work=$(mktemp -d /tmp/ignis-makevars-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v make >/dev/null || { echo "no make here: skipped"; exit 77; }

# "VAR --flag" a line, from the help's "  --flag <type> doc [IGNIS_X; make VAR; ...]"
pairs=$("$sup" --help | sed -nE 's/^  (--[a-z0-9-]+) .*\[IGNIS_[A-Z0-9_]+; make ([A-Z0-9_]+);.*/\2 \1/p')
# the spec's two and the six the Makefile took before the table named them
for v in ALLOW_EXPERT_CACHE_BELOW_FLOOR PINNED_EXPERT_BYTES MODEL LANES CONTEXT DEVICE_FREE_BYTES \
	PROFILE BACKEND; do
	grep -q "^$v " <<<"$pairs" || fail "no knob has the make variable $v; --help names: $pairs"
done
nvars=$(wc -l <<<"$pairs")

# the stand-in: its arguments, one a line
mkdir -p "$work/build/supervisor"
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >"$MAKE_VARS_ARGS"\n' >"$work/build/supervisor/ignis-supervisor"
chmod +x "$work/build/supervisor/ignis-supervisor"
# nothing from the caller's environment: no variable of ours, no outer make's flags
unset CONFIG IGNIS_CONFIG MAKEFLAGS MFLAGS MAKELEVEL $(cut -d' ' -f1 <<<"$pairs")

# mk TARGET VAR=VALUE...: make TARGET; what the supervisor got in $work/TARGET.args
mk() {
	local target=$1
	shift
	rm -f "$work/$target.args"
	MAKE_VARS_ARGS=$work/$target.args make -s -C "$src" -o build BUILD="$work/build" "$@" "$target" \
		>/dev/null 2>"$work/$target.err" || fail "make $target $*: $(cat "$work/$target.err")"
	[[ -s $work/$target.args ]] || fail "make $target did not run the supervisor"
}
# want TARGET ARG...: the supervisor got exactly these arguments, in any order
want() {
	local target=$1
	shift
	diff <(printf '%s\n' "$@" | sort) <(sort "$work/$target.args") >"$work/diff" ||
		fail "make $target: the supervisor's arguments differ (< wanted, > got):
$(cat "$work/diff")"
}

# every variable given, each value with a quote and a space
given=("CONFIG=/tmp/it's a.yaml") flags=()
while read -r var flag; do
	given+=("$var=it's $var")
	flags+=("$flag=it's $var")
done <<<"$pairs"
for target in run config; do
	mk "$target" "${given[@]}"
	cmd=start
	[[ $target == config ]] && cmd=plan
	[[ $(head -1 "$work/$target.args") == "$cmd" ]] ||
		fail "make $target ran the supervisor's $(head -1 "$work/$target.args"), not $cmd"
	want "$target" "$cmd" -c "/tmp/it's a.yaml" "${flags[@]}"
done
echo "make run and make config: CONFIG and the $nvars knob variables reach the supervisor"

# none given: the embedded default; a card's plan on the built-in defaults
mk run
want run start
mk config
want config plan --profile=none --backend=cuda
echo "none given: make run passes nothing, make config --profile=none --backend=cuda"
