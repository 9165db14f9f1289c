#!/usr/bin/env bash
# The knob reference page is generated from the knob table; fail when the
# committed page is stale. Regenerate: build/supervisor/ignis-supervisor reference > docs/reference/knobs.md
set -uo pipefail
sup=$1 page=$2
if ! diff -u "$page" <("$sup" reference); then
	echo "FAIL: $page is stale; regenerate it with: $sup reference > $page" >&2
	exit 1
fi
echo "reference page matches the knob table"
