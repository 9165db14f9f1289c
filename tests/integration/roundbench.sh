#!/usr/bin/env bash
# Integration: ignis-roundbench, the device benchmarks' tool (tools/
# gpu-bench.sh runs it on a card), on the cpu backend so that it is checked
# where there is no GPU: every figure printed for a dense model and a
# hybrid one (a linear state in the moved image), in bf16 and compact KV;
# the whole-context move out and back restores every byte (the tool exits 1
# when the image gathered again differs from the one moved out); bad
# arguments exit 2; the cuda backend without a device exits 77. No figure's
# value is checked: timings belong to benchmarks, not tests.
#   roundbench.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: roundbench.sh BUILD_DIR}
rb=$build/tools/ignis-roundbench
mk=$build/tools/ignis-mkmodel
work=$(mktemp -d /tmp/ignis-roundbench-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }

keys=(load_s weights_bytes kv_bytes_per_token state_bytes decode_ms_l1 decode_tps_l1
	decode_read_GBps_l1 decode_each_ms_l1 decode_ms_l3 prefill_tps prefill_tflops prefill_fast_tps window_h2d_GBps
	window_d2h_GBps move_image_bytes move_windows move_out_s move_in_s move_rounds_out
	move_rounds_in move_others_ms_base move_others_ms_out move_others_ms_in
	move_others_slowdown move_alone_GBps)

for layout in ignis qwen35; do
	m=$work/$layout.gguf
	"$mk" --preset tiny-dense --layout "$layout" -o "$m" >/dev/null 2>"$work/err" ||
		fail "ignis-mkmodel --layout $layout: $(cat "$work/err")"
	for fmt in bf16 compact; do
		step "$layout, $fmt KV: every figure, the move restored byte for byte"
		out=$("$rb" --model "$m" --backend cpu --label t --lanes 1,3 --prompt 70 \
			--rounds 6 --chunk 96 --context 1024 --kv-format "$fmt" \
			--move-context 2000 --move-window 40000 2>"$work/err")
		rc=$?
		[[ $rc == 0 ]] || fail "exit $rc: $(cat "$work/err")"
		for k in "${keys[@]}"; do
			grep -qE "^t_$k=-?[0-9]+(\.[0-9]+)?$" <<<"$out" || fail "no figure t_$k in: $out"
		done
		# the state is in the image: a hybrid's linear state makes it larger
		# than its pages alone
		img=$(sed -n 's/^t_move_image_bytes=//p' <<<"$out")
		win=$(sed -n 's/^t_move_windows=//p' <<<"$out")
		[[ $win == $(((img + 39999) / 40000)) ]] ||
			fail "$win windows for an image of $img bytes in windows of 40000"
		# every window was moved out in a round of its own, and back
		[[ $(sed -n 's/^t_move_rounds_out=//p' <<<"$out") -ge $win ]] ||
			fail "fewer rounds than windows in the move out: $out"
	done
done

step "bad arguments exit 2"
"$rb" --model "$work/ignis.gguf" --backend cpu --lanes 0 >/dev/null 2>&1
[[ $? == 2 ]] || fail "--lanes 0 did not exit 2"
"$rb" --model "$work/ignis.gguf" --backend cpu --move-window 100 >/dev/null 2>&1
[[ $? == 2 ]] || fail "--move-window 100 did not exit 2"

step "the cuda backend without a device: skipped (77), saying why"
if ! nvidia-smi -L >/dev/null 2>&1; then
	"$rb" --model "$work/ignis.gguf" --backend cuda >/dev/null 2>"$work/err"
	rc=$?
	[[ $rc == 77 ]] || fail "--backend cuda exited $rc without a device: $(cat "$work/err")"
	grep -q "skipped" "$work/err" || fail "no reason given: $(cat "$work/err")"
fi
echo "roundbench: ok"
