#!/usr/bin/env bash
# Every IGNIS_* variable the tree reads (getenv in C; $VAR, ${VAR} or VAR= in
# scripts, Makefiles, meson files and units) is a knob's or one the knob
# table's KNOB_OTHER_VARS names, so that `ignis-supervisor` never warns about
# a variable Ignis itself uses. A new variable that is not a knob goes into
# KNOB_OTHER_VARS (common/knobs.h) with who reads it.
#   env-names.sh SUPERVISOR SOURCE_ROOT
set -uo pipefail
sup=${1:?usage: env-names.sh SUPERVISOR SOURCE_ROOT}
src=${2:?usage: env-names.sh SUPERVISOR SOURCE_ROOT}
fail() { echo "FAIL: $*" >&2; exit 1; }

# warned NAME: what `plan` says on stderr about NAME=1
warned() { env "$1=1" "$sup" plan --json 2>&1 >/dev/null | grep -F -- " $1 is set"; }

knobs=$("$sup" --help | grep -oE '\[IGNIS_[A-Z0-9_]+;' | tr -d '[;' | sort -u)
[[ $(wc -l <<<"$knobs") -ge 20 ]] || fail "found only these knob variables in --help: $knobs"
# (grep: the --include options first, or a file no option names is read too)
excl=(--exclude=env-names.sh --exclude-dir='build*' --exclude-dir=.git --exclude-dir=subprojects)
names=$( {
	grep -rhoE --include='*.c' --include='*.h' "${excl[@]}" 'getenv\("IGNIS_[A-Z0-9_]+"' "$src" |
		grep -oE 'IGNIS_[A-Z0-9_]+'
	grep -rhoE --include='*.sh' --include=Makefile --include=meson.build --include='*.service' \
		--include='*.in' "${excl[@]}" '(\$\{?IGNIS_[A-Z0-9_]+|\bIGNIS_[A-Z0-9_]+=)' "$src" |
		grep -oE 'IGNIS_[A-Z0-9_]+'
} | sort -u)
grep -qx IGNIS_KVSTORED <<<"$names" || fail "the scan found no IGNIS_KVSTORED; found: $names"

checked=0
for n in $names; do
	grep -qx -- "$n" <<<"$knobs" && continue
	out=$(warned "$n") && fail "$n is read in the tree but ignis-supervisor warns about it: $out
(add it to KNOB_OTHER_VARS in common/knobs.h, saying who reads it)"
	checked=$((checked + 1))
done
# The check can fail: a variable nobody reads is warned about.
warned IGNIS_NO_SUCH_KNOB >/dev/null || fail "IGNIS_NO_SUCH_KNOB=1 was not warned about"
echo "$checked IGNIS_* variables read in the tree besides the knobs'; none is warned about"
