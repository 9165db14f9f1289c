#!/usr/bin/env bash
# `make fuzz`: run the msgpack decoder under libFuzzer for a bounded time,
# seeded with the golden messages. A crash leaves its input in build-fuzz/.
set -euo pipefail
build=$1 seconds=$2
corpus=$build/fuzz-corpus
mkdir -p "$corpus"
for f in tests/golden/*.hex; do
	printf "$(tr -d '\n' <"$f" | sed 's/../\\x&/g')" >"$corpus/$(basename "$f" .hex)"
done
exec "$build/tests/fuzz/fuzz-msg" -max_total_time="$seconds" -max_len=70000 \
	-artifact_prefix="$build/" "$corpus"
