#!/usr/bin/env bash
# A file generated from the knob table is committed: fail when it is stale.
#   reference-fresh.sh SUPERVISOR FILE [COMMAND]
# COMMAND is the supervisor's command that writes FILE: `reference` (the
# default) for docs/reference/knobs.md, `makevars` for tools/knobs.mk.
# Regenerate: build/supervisor/ignis-supervisor COMMAND > FILE
set -uo pipefail
sup=$1 page=$2 cmd=${3:-reference}
if ! diff -u "$page" <("$sup" "$cmd"); then
	echo "FAIL: $page is stale; regenerate it with: $sup $cmd > $page" >&2
	exit 1
fi
echo "$page matches the knob table"
