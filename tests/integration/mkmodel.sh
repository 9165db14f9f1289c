#!/usr/bin/env bash
# Integration: ignis-mkmodel as a developer meets it. The reference presets'
# dry runs (exact sizes, nothing written); a custom shape whose dry-run size
# is the written file's size, written twice to the same bytes and planned by
# the supervisor; bad --set and --name values refused with exit 2 naming the
# key and what is accepted; a file larger than its volume refused before
# anything is written (exit 1); an interrupted write leaves nothing; on a
# 1 MiB tmpfs (root only) the free-space refusal names both figures.
#   mkmodel.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: mkmodel.sh BUILD_DIR}
mk=$build/tools/ignis-mkmodel
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-mkmodel-XXXXXX)
mnt=$work/tmpfs
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }

# run EXPECTED_RC ARGS...: stdout in $out, stderr in $err
run() {
	local want=$1; shift
	out=$("$mk" "$@" 2>"$work/err"); rc=$?
	err=$(cat "$work/err")
	[[ $rc == "$want" ]] || fail "'ignis-mkmodel $*' exited $rc, want $want; stderr: $err"
}
has() { grep -qF -- "$2" <<<"$1" || fail "missing '$2' in: $1"; }
field() { awk -v k="$1" '$1 == k { print $2 }' <<<"$out"; }
# no file but the ones named is in $work (no partial or temporary file)
only() {
	local left
	left=$(cd "$work" && ls -A | grep -vxF -e err -e tmpfs "${@/#/-e}" || true)
	[[ -z $left ]] || fail "left in $work: $left"
}

step "usage: --help lists every --set key; missing arguments exit 2"
run 0 --help
has "$out" "layers"; has "$out" "ignis.expert_count"; has "$out" "--dry-run"
run 2
has "$err" "--preset is required"
run 2 --preset tiny-dense
has "$err" "-o FILE (or --dry-run) is required"
run 2 --preset nope --dry-run
has "$err" "unknown preset 'nope'"; has "$err" "qwen3.8-flash-next"

step "the reference presets: dry runs with their exact sizes, nothing written"
run 0 --preset 27b --dry-run
[[ $(field name) == qwen3.8-27b && $(field tensors) == 803 && $(field file_bytes) == 51818100768 ]] ||
	fail "27b dry run: $out"
has "$out" "the built-in qwen3.8-27b carries"
run 0 --preset qwen3.8-flash-next --dry-run -o "$work/fn.gguf"
[[ $(field tensors) == 843 && $(field file_bytes) == 247975677696 && $(field experts) == 512 ]] ||
	fail "flash-next dry run: $out"
[[ -n $(field volume_free_bytes) && -n $(field fits) ]] || fail "no free space figures: $out"
only

step "a custom shape: the dry-run size is the written size; the same bytes twice; it plans"
args=(--preset tiny-moe --set layers=4,hidden=128,experts=8 --set top_k=2,vocab=300 --seed 7
	--tokenizer none)
run 0 "${args[@]}" --dry-run
[[ $(field name) == tiny-moe-custom && $(field layers) == 4 && $(field experts) == 8 ]] ||
	fail "custom dry run: $out"
[[ $(field tokenizer) == none ]] || fail "custom dry run: tokenizer $(field tokenizer)"
size=$(field file_bytes)
run 0 "${args[@]}" -o "$work/a.gguf"
has "$err" "wrote $work/a.gguf (tiny-moe-custom, bf16, seed 7, $size bytes)"
[[ $(stat -c %s "$work/a.gguf") == "$size" ]] || fail "written $(stat -c %s "$work/a.gguf"), dry run $size"
run 0 "${args[@]}" --name my-moe -o "$work/b.gguf"
run 0 "${args[@]}" --name my-moe -o "$work/c.gguf"
cmp -s "$work/b.gguf" "$work/c.gguf" || fail "the same arguments gave other bytes"
if [[ -x $sup ]]; then
	p=$("$sup" plan --json --model "$work/b.gguf" 2>&1) ||
		fail "the written file does not plan: $p"
	has "$p" '"my-moe"'
fi
run 0 --preset 27b --set layers=8 --dry-run
[[ $(field name) == qwen3.8-27b-custom ]] || fail "an overridden 27b keeps the name: $out"
run 0 --preset 27b --name 27b --dry-run
[[ $(field name) == 27b ]] || fail "27b's own shape under its alias: $out"
[[ $(field tokenizer) == none ]] || fail "the 27b's tokenizer (a description holds no vocabulary): $out"
run 0 --preset tiny-dense --dry-run
[[ $(field tokenizer) == bytes ]] || fail "tiny-dense's tokenizer: $out"
run 0 --preset tiny-dense --tokenizer none --dry-run
[[ $(field name) == tiny-dense-custom && $(field tokenizer) == none ]] ||
	fail "another tokenizer is another model: $out"
only a.gguf b.gguf c.gguf

step "bad values: exit 2 naming the key and what is accepted; nothing written"
while IFS='|' read -r words args; do
	read -ra a <<<"$args"
	run 2 "${a[@]}" -o "$work/bad.gguf"
	has "$err" "$words"
done <<'EOF'
layers (ignis.block_count) takes a whole number from 1 to 4096|--preset tiny-dense --set layers=abc
layers (ignis.block_count) takes a whole number from 1 to 4096|--preset tiny-dense --set layers=0
max_lanes (ignis.max_decode_lanes) takes a whole number from 1 to 64|--preset tiny-dense --set max_lanes=65
unknown key 'foo'; accepted: layers, full_interval|--preset tiny-dense --set foo=1
expected KEY=VALUE|--preset tiny-dense --set layers
experts (ignis.expert_count) applies to moe models; preset 'tiny-dense' is dense|--preset tiny-dense --set experts=8
rms_eps (ignis.attention.layer_norm_rms_epsilon) takes a finite number above 0|--preset tiny-dense --set rms_eps=-1
(q_heads) 4 is not a multiple of ignis.attention.head_count_kv (kv_heads) 3|--preset tiny-dense --set kv_heads=3
(rope_dims) 80 is odd or larger than ignis.attention.key_length (head_dim) 64|--preset tiny-dense --set rope_dims=80
(head_dim) 96 is not a multiple of 64|--preset tiny-dense --set head_dim=96
no full-attention layer|--preset tiny-dense --set full_interval=8
(top_k) 9 exceeds ignis.expert_count (experts) 8|--preset tiny-moe --set experts=8,top_k=9
the byte-level tokenizer of 260 ids; ignis.vocab_size (vocab) is 100|--preset tiny-dense --set vocab=100
--tokenizer 'gpt2'; accepted: bytes, none|--preset tiny-dense --tokenizer gpt2
whose tokenizer is bytes (none here)|--preset tiny-dense --tokenizer none --name tiny-dense
is the built-in model qwen3.8-27b, whose shape this file does not have (layers is 4 here, 64 there)|--preset tiny-dense --name qwen3.8-27b
is the built-in model qwen3.8-flash-next, a moe model|--preset tiny-dense --name flash-next
is the built-in model qwen3.8-27b, whose shape|--preset 27b --set layers=8 --name 27b
--name '': accepted: 1 to 63 bytes|--preset tiny-dense --name=
--dtype 'f8'; accepted: bf16, f16, f32|--preset tiny-dense --dtype f8
--seed '-1'; accepted: a whole number|--preset tiny-dense --seed -1
EOF
only a.gguf b.gguf c.gguf

step "larger than its volume: refused before writing, both figures named (exit 1)"
run 1 --preset tiny-dense --set hidden=16M,vocab=16M --tokenizer none -o "$work/huge.gguf"
has "$err" "'$work/huge.gguf' needs"; has "$err" "the volume of '$work' has"
only a.gguf b.gguf c.gguf

step "an interrupted write leaves nothing behind"
"$mk" --preset tiny-dense --set layers=8,hidden=2048,ffn_inter=8192,vocab=4096 --tokenizer none \
	-o "$work/int.gguf" 2>"$work/err" &
pid=$!
sleep 0.5
kill -INT "$pid" 2>/dev/null
wait "$pid"; rc=$?
err=$(cat "$work/err")
if grep -qF "needs" <<<"$err"; then
	echo "   (skipped: the volume has no room for the 1.1 GB write)"
else
	[[ $rc == 1 ]] || fail "interrupted write exited $rc: $err"
	has "$err" "interrupted at tensor"
fi
only a.gguf b.gguf c.gguf

step "a real small volume (root only): a 1 MiB tmpfs"
# In a mount namespace of its own: the mount goes with the shell however it ends.
mkdir "$mnt"
small=$(unshare --mount --propagation private bash -c '
	mount -t tmpfs -o size=1m tmpfs "$2" 2>/dev/null || exit 77
	"$1" --preset tiny-dense -o "$2/t.gguf" 2>&1; echo "rc=$?"; ls -A "$2"' _ "$mk" "$mnt" 2>/dev/null)
case $? in
0)
	has "$small" "'$mnt/t.gguf' needs 5543296 bytes"
	has "$small" "the volume of '$mnt' has 1048576 free"
	[[ $(tail -1 <<<"$small") == rc=1 ]] || fail "not refused with exit 1 (or left files): $small"
	;;
*) echo "   (skipped: not root, or no mount namespace or tmpfs here)" ;;
esac
rmdir "$mnt"
echo "mkmodel integration: all steps passed"
