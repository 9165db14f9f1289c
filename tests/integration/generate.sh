#!/usr/bin/env bash
# Integration: ignis-mkmodel then ignis-generate, the developer's path to
# generate. The same arguments give the same text whatever --threads and
# --chunk say, and bad input is refused clearly.
#   generate.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: generate.sh BUILD_DIR}
work=$(mktemp -d /tmp/ignis-gen-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
gen="$build/tools/ignis-generate"

for preset in tiny-dense tiny-moe; do
	"$build/tools/ignis-mkmodel" --preset "$preset" -o "$work/$preset.gguf" --seed 3 2>/dev/null ||
		fail "mkmodel $preset"
	args=(--model "$work/$preset.gguf" --prompt "Exactly the same, please." --max-tokens 24
	      --temperature 0.7 --top-p 0.9 --seed 9)
	a=$("$gen" "${args[@]}" --threads 1 --chunk 64) || fail "$preset: generate failed"
	b=$("$gen" "${args[@]}" --threads 2 --chunk 5) || fail "$preset: generate failed"
	c=$("$gen" "${args[@]}" --threads 2 --chunk 1 --kv-format bf16) || fail "$preset: generate failed"
	[[ -n $a && $a == "$b" && $a == "$c" ]] || fail "$preset: outputs differ by threads or chunk"
	echo "-- $preset: $(printf '%s' "$a" | wc -c) bytes, identical at 1 and 2 threads, chunks 64, 5, 1"
done
out=$("$gen" --model "$work/nope.gguf" --prompt x 2>&1) && fail "a missing model was accepted"
grep -q "nope.gguf" <<<"$out" || fail "unclear error: $out"
out=$("$gen" --model "$work/tiny-dense.gguf" --prompt x --top-p 2 2>&1) && fail "top-p 2 accepted"
grep -qi "top_p" <<<"$out" || fail "unclear error: $out"
out=$("$gen" --model "$work/tiny-dense.gguf" --prompt x --threads abc 2>&1) && fail "--threads abc accepted"
grep -q -- "--threads 'abc'; accepted: a whole number" <<<"$out" || fail "unclear error: $out"
echo "generate integration: all steps passed"
