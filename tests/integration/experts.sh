#!/usr/bin/env bash
# Integration: the expert cache at run time through the three processes
# (docs/adr/0039). A MoE model of 64 experts a layer and top-8 routing
# (tiny-moe's shapes otherwise), started on a simulated device of 40 MiB (the
# plan offloads it: a cache of 119 slots a class in front of the 512 experts
# in the worker's host memory), then of 96 MiB (every expert resident). Every
# text, greedy and sampled, equals the same request run in this process with
# the experts read in place from the file; the load event says where the
# experts are; the metrics page shows the cache's classes and figures, which
# add up.
#   experts.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: experts.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
cli=$build/client/ignis-client
work=$(mktemp -d /tmp/ignis-experts-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
m=$work/m64.gguf
"$build/tools/ignis-mkmodel" --preset tiny-moe --set experts=64,top_k=8 -o "$m" --seed 5 2>/dev/null ||
	fail "mkmodel"

start() {
	rm -rf "$rt"
	# a file of its own each start: a daemon of the last one that writes its
	# last event after this start would write at its old offset into a
	# truncated file, and the hole of NULs before it makes grep stop there
	nstart=$((${nstart:-0} + 1))
	events=$work/events.$nstart.jsonl
	# the cache's figures below are those of the compact KV format's pool
	"$sup" start --runtime-dir "$rt" --model "$m" --model-kv-format compact "$@" >"$events" 2>&1 &
	sup_pid=$!
	wait_for 20 grep -q '"ignis.gpu_worker.model_loaded"' "$events" ||
		fail "no start: $(tail -3 "$events")"
}
stop() {
	kill -TERM "$sup_pid"
	wait "$sup_pid"
	sup_pid=
}
loaded() { grep '"event":"ignis.gpu_worker.model_loaded"' "$events" | tail -1; }
page() { curl -s "$IGNIS_SERVER_METRICS_BIND/metrics"; }
val() { awk -v k="$1" '$1 == k { print $2 }' "$work/page"; }

reqs=("--prompt|A mixture of experts routes every token to eight of sixty-four experts in each layer.|--max-tokens|40"
	"--prompt|Offloaded experts stream through a cache on the device.|--max-tokens|32|--temperature|0.8|--seed|11")
i=0
for r in "${reqs[@]}"; do
	IFS='|' read -ra a <<<"$r"
	"$gen" --model "$m" --kv-format compact "${a[@]}" >"$work/want.$i" || fail "in-process $i"
	i=$((i + 1))
done
same_texts() { # WHAT
	local i=0 r a
	for r in "${reqs[@]}"; do
		IFS='|' read -ra a <<<"$r"
		"$cli" --runtime-dir "$rt" generate "${a[@]}" >"$work/got.$i" || fail "$1: client $i"
		cmp -s "$work/want.$i" "$work/got.$i" || fail "$1: request $i differs from the experts read in place"
		i=$((i + 1))
	done
}

# 119 slots: 129 before compact's residual window, whose hq_residual_window
# line, 2 lanes x (32 + 512) x 1,024 B (2 layers x 2 KV heads x 2 x 64 x 2 B
# a token in bf16) = 1,114,112 B where the old line was 2 x 64 x 1,024 =
# 131,072, takes 983,040 B more of the lines: exactly 10 slot sets of
# 98,304 B (a 64 KiB gate_up and a 32 KiB down slot)
step "offloaded (40 MiB device): a cache of 119 slots a class, the same texts"
start --device-free-bytes 40M
loaded | jq -e '.experts == "offloaded" and .expert_classes == 2 and .expert_slots_per_class == 119
	and .expert_host_bytes == 50331648 and .expert_pinned_bytes == 0' >/dev/null ||
	fail "the load event: $(loaded)"
same_texts offloaded
misses_seen() { page >"$work/page"; (($(val 'ignis_expert_cache_misses_total{class="gate_up:bf16"}') > 0)); }
wait_for 10 misses_seen || fail "no misses on the page: $(grep expert_cache "$work/page")"
[[ $(val 'ignis_expert_cache_slots{class="gate_up:bf16"}') == 119 &&
	$(val 'ignis_expert_cache_slots{class="down:bf16"}') == 119 ]] ||
	fail "slots: $(grep expert_cache_slots "$work/page")"
for c in gate_up:bf16 down:bf16; do
	rec=65536
	[[ $c == down:bf16 ]] && rec=32768
	miss=$(val "ignis_expert_cache_misses_total{class=\"$c\"}")
	pre=$(val "ignis_expert_cache_prefetches_total{class=\"$c\"}")
	bytes=$(val "ignis_expert_cache_streamed_bytes_total{class=\"$c\"}")
	ev=$(val "ignis_expert_cache_evictions_total{class=\"$c\"}")
	fills=$((miss + pre))
	((bytes == fills * rec)) || fail "$c: $bytes bytes streamed for $miss misses and $pre prefetches of $rec"
	((ev == (fills > 119 ? fills - 119 : 0))) || fail "$c: $ev evictions for $fills fills of 119 slots"
done
stop

step "pinned experts: refused without the calibration's counts, then pinned by them"
out=$("$sup" start --runtime-dir "$rt" --model "$m" --device-free-bytes 40M \
	--vram-pinned-expert-bytes 4M 2>&1) && fail "a pin without counts started"
grep -q "ignis-calibrate" <<<"$out" || fail "the refusal does not name ignis-calibrate: $out"
head -c 6000 /dev/urandom | base64 >"$work/cal.txt"
"$build/tools/ignis-calibrate" --model "$m" --text "$work/cal.txt" >/dev/null || fail "calibrate"
[[ -s $m.experts ]] || fail "no counts beside the model"
start --device-free-bytes 40M --vram-pinned-expert-bytes 4M
# 4 MiB holds 42 experts of 96 KiB (gate_up 64 KiB + down 32 KiB); the plan
# counts the host memory behind the cache as every expert less the pin (at
# most), the worker the exact bytes
loaded | jq -e '.expert_pinned_bytes == 4128768 and .expert_host_bytes == 50331648 - 4128768' \
	>/dev/null || fail "the load event: $(loaded)"
grep '"event":"ignis.runtime.flash_next_plan"' "$events" |
	jq -e '.pinned_expert_bytes == 4194304 and .expert_host_bytes == 50331648 - 4194304' \
	>/dev/null || fail "the plan event: $(grep flash_next_plan "$events")"
same_texts pinned
stop

step "resident (96 MiB device): every expert on the device, no cache, the same texts"
start --device-free-bytes 96M
loaded | jq -e '.experts == "resident" and .expert_host_bytes == 0 and .expert_cache_bytes == 50331648' \
	>/dev/null || fail "the load event: $(loaded)"
same_texts resident
page >"$work/page"
grep -q '^ignis_expert_cache_slots{' "$work/page" && fail "cache slots on a resident load"
stop
echo "experts integration: all steps passed"
