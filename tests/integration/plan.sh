#!/usr/bin/env bash
# Integration: `ignis-supervisor plan` and a start refused by the plan, as an
# operator meets them: exit codes (0 starts, 2 configuration error, 3
# refused), every field of the plan event that the reference names,
# warnings, and messages that name the knob, its source and what is accepted.
#   plan.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: plan.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-plan-XXXXXX)
# the starts below (item 13) use lib.sh's cleanup, metrics port and wait_for
rt=$work/rt-start
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }
card32="--profile none --backend cuda --device-free-bytes 33140203520"
# The reference's figures are those of its KV format, compact; the default
# is fp8 (docs/adr/0046), checked at the end with this unset.
export IGNIS_MODEL_KV_FORMAT=compact

# run EXPECTED_RC ARGS...: output in $out, stderr in $err
run() {
	local want=$1; shift
	out=$("$sup" "$@" 2>"$work/err"); rc=$?
	err=$(cat "$work/err")
	[[ $rc == "$want" ]] || fail "'$*' exited $rc, want $want; stderr: $err"
}
has() { grep -qF -- "$2" <<<"$1" || fail "missing '$2' in: $1"; }

step "the embedded default plans: a table, then the event as one JSON line"
run 0 plan
has "$out" "VRAM plan: tiny-chat"
tail -1 <<<"$out" | jq -e '.event == "ignis.runtime.vram_plan"' >/dev/null || fail "last line is not the event"

step "--json: only JSON lines, every field of reference-facts section 4"
run 0 plan --json --model 27b $card32
jq -e -s 'length == 1' <<<"$out" >/dev/null || fail "more than the plan event: $out"
for f in mode free_at_start_bytes headroom_bytes budget_bytes weights_bytes cuda_context_bytes \
	workspace_bytes media_embedding_bytes sampling_bytes decode_graph_bytes verify_round_bytes \
	drafter_round_bytes lane_state_bytes retained_slots_bytes hq_residual_window_bytes \
	residual_bytes kv_pool_bytes kv_page_count total_bytes oversubscribed retained_device_slots \
	retained_host_slots retained_host_bytes kv_pool_policy kv_pool_pages kv_pool_tokens; do
	jq -e --arg f "$f" 'has($f)' <<<"$out" >/dev/null || fail "vram_plan lacks $f"
done
jq -e '.kv_pool_tokens == .kv_pool_pages * 64 and .kv_pool_policy == "resident"' <<<"$out" \
	>/dev/null || fail "pool fields inconsistent: $out"

step "Flash-Next: flash_next_plan with its own fields; the reference budget"
run 0 plan --json --model flash-next $card32
jq -e '.event == "ignis.runtime.flash_next_plan" and .budget_bytes == 31529590784' <<<"$out" \
	>/dev/null || fail "not the Flash-Next plan: $out"
for f in program_bytes residency_fixed_bytes prefill_staging_bytes expert_cache_bytes lanes \
	verify_round_bytes speculation kv_pool_policy kv_pool_pages kv_pool_tokens; do
	jq -e --arg f "$f" 'has($f)' <<<"$out" >/dev/null || fail "flash_next_plan lacks $f"
done

step "a 96 GB card: resident, no staging ring"
run 0 plan --json --model flash-next --profile none --backend cuda --device-free-bytes 96000000000
jq -e '.kv_pool_policy == "resident" and .prefill_staging_bytes == 0' <<<"$out" >/dev/null ||
	fail "not resident: $out"

step "an explicit budget: mode explicit, allow_oversubscription instead of headroom"
run 0 plan --json --model 27b $card32 --vram-budget-bytes 30G
jq -e '.mode == "explicit" and (has("headroom_bytes") | not) and .allow_oversubscription == false' \
	<<<"$out" >/dev/null || fail "explicit budget fields: $out"

step "oversubscription: one warning event"
run 0 plan --json --model 27b $card32 --vram-budget-bytes 40G --vram-allow-oversubscription
[[ $(jq -s '[.[] | select(.event == "ignis.runtime.vram_oversubscribed")] | length' <<<"$out") == 1 ]] ||
	fail "not one oversubscription warning: $out"

step "the expert cache below its floor: refused (3) naming the knobs; allowed with a warning"
run 3 plan --model flash-next --profile none --backend cuda --device-free-bytes 20G
has "$err" "--vram-kv-pool-bytes"; has "$err" "--vram-allow-expert-cache-below-floor"
run 0 plan --json --model flash-next --profile none --backend cuda --device-free-bytes 20G \
	--vram-allow-expert-cache-below-floor
jq -e -s '.[1].event == "ignis.runtime.expert_cache_below_floor" and (.[1] | has("expert_cache_bytes")
	and has("floor_bytes") and has("knobs"))' <<<"$out" >/dev/null || fail "no below-floor warning: $out"

step "below the minimum: exit 3, the shortfall in bytes and the knobs, on stderr"
run 3 plan --model 27b --profile none --backend cuda --device-free-bytes 20G
has "$err" "short by"; has "$err" "--model-max-context"
[[ -z $out ]] || fail "a refusal printed a plan: $out"

step "oversubscription does not waive the expert cache's floor (issue 13, item 7)"
run 3 plan --model flash-next $card32 --vram-budget-bytes 8G --vram-allow-oversubscription
has "$err" "would get 556228608 bytes"; has "$err" "below its floor"
has "$err" "--vram-allow-expert-cache-below-floor starts anyway"
run 0 plan --json --model flash-next $card32 --vram-budget-bytes 8G --vram-allow-oversubscription \
	--vram-allow-expert-cache-below-floor
jq -e -s 'length == 3 and .[0].expert_cache_bytes == 556228608 and .[0].total_bytes == 9402875904 and
	.[1].event == "ignis.runtime.vram_oversubscribed" and .[1].minimum_bytes == 9402875904 and
	.[2].event == "ignis.runtime.expert_cache_below_floor" and .[2].expert_cache_bytes == 556228608 and
	.[2].floor_bytes == 12884901888' <<<"$out" >/dev/null || fail "not both warnings: $out"

step "the floor refusal with an explicit budget asks for a larger one (issue 13, item 9)"
run 3 plan --model flash-next --profile none --backend cuda --device-free-bytes 64G --vram-budget-bytes 20G
has "$err" "a larger --vram-budget-bytes"
grep -qF -- "smaller --vram-budget-bytes" <<<"$err" && fail "asks for a smaller budget: $err"

step "the pin holds per class (issue 13, item 11)"
run 3 plan --model flash-next $card32 --vram-pinned-expert-bytes 5G
has "$err" "3025 slots of every class"; has "$err" "the most it can pin is 3669557248 bytes"
run 0 plan --json --model flash-next $card32 --vram-pinned-expert-bytes 3669557248
jq -e '.pinned_expert_bytes == 3669557248' <<<"$out" >/dev/null || fail "the most did not pin: $out"

step "the 27B below its fixed lines: the bytes really short; oversubscribed, that minimum (issue 13, item 8)"
run 3 plan --model 27b $card32 --vram-budget-bytes 18G
has "$err" "needs at least 21057044480 bytes"; has "$err" "short by 1729691648 bytes"
run 0 plan --json --model 27b $card32 --vram-budget-bytes 18G --vram-allow-oversubscription
jq -e -s '.[0].total_bytes == 21057044480 and .[0].max_context_tokens == 38976 and
	([.[] | select(.event == "ignis.runtime.vram_oversubscribed")] | length == 1 and
	.[0].reason == "budget below the plan'"'"'s minimum" and .[0].minimum_bytes == 21057044480)' \
	<<<"$out" >/dev/null || fail "the oversubscribed minimum is not the refusal's: $out"

step "Flash-Next's minimum refusal is whole (issue 13, item 10)"
run 3 plan --model flash-next --profile none --backend cuda --device-free-bytes 10G
has "$err" "whatever --vram-allow-expert-cache-below-floor says: 556228608 bytes) needs at least 9402875904 bytes"
has "$err" "short by 276070400 bytes"
[[ $err == *"--model-kv-format, --model-kv-window, --model-kv-sinks" ]] ||
	fail "the refusal does not end with its last knob: $err"

step "a device figure beyond what a pool counts: plan and start refuse the same way (issue 13, item 12)"
# the embedded default (tiny-chat): (2^64 - 1 - 8 MiB of headroom - 12,529,664 B
# of lines) / 18,432 B a page = 1,000,799,917,192,308 pages; the lines hold
# the residual window, 4 lanes x (32 + 512) x 2,048 B (4 layers x 2 KV heads
# x 2 x 64 x 2 B a token in bf16) = 4,456,448 B
IGNIS_DEVICE_FREE_BYTES=18446744073709551615 "$sup" plan >"$work/out" 2>"$work/err"
[[ $? == 3 ]] || fail "plan with 2^64-1 bytes free did not refuse: $(cat "$work/out" "$work/err")"
plan_err=$(cat "$work/err")
has "$plan_err" "a KV pool of 1000799917192308 pages"; has "$plan_err" "(from IGNIS_DEVICE_FREE_BYTES)"
has "$plan_err" "more than the 4294967295 pages a pool counts"; has "$plan_err" "Turn: a smaller --device-free-bytes"
IGNIS_DEVICE_FREE_BYTES=18446744073709551615 "$sup" start --runtime-dir "$work/rt12" >/dev/null 2>"$work/err"
[[ $? == 3 ]] || fail "start with 2^64-1 bytes free did not refuse: $(cat "$work/err")"
[[ $(cat "$work/err") == "$plan_err" ]] || fail "start refused otherwise than plan: $(cat "$work/err")"
[[ ! -e $work/rt12 ]] || fail "a refused start created its runtime directory"

step "configuration errors: exit 2, naming the key, its source and what is accepted"
run 2 plan --vram-headroom-bytes 12X
has "$err" "--vram-headroom-bytes: '12X' (from --vram-headroom-bytes)"; has "$err" "accepted"
out=$(IGNIS_MODEL=gpt-9 "$sup" plan 2>&1); [[ $? == 2 ]] || fail "bad IGNIS_MODEL not exit 2"
has "$out" "(from IGNIS_MODEL)"; has "$out" "qwen3.8-flash-next"
printf 'model: tiny-moe\nspec_decode_lanes: 9\n' >"$work/c.yaml"
run 2 plan -c "$work/c.yaml"
has "$err" "(from $work/c.yaml:2)"; has "$err" "1..8"
run 2 plan --retained-slots 4
has "$err" "--reuse-retained-device"; has "$err" "--reuse-retained-host"
run 2 plan --model 27b $card32 --spec-decode-lanes 2
has "$err" "qwen3.8-27b does not take this knob"
run 2 plan --model flash-next $card32 --vram-adapt-spare-tokens 0
has "$err" "qwen3.8-flash-next does not take this knob"
IGNIS_VRAM_BUDGET_BYTES=20G "$sup" plan --vram-headroom-bytes 1G 2>"$work/err" >/dev/null
[[ $? == 2 ]] || fail "headroom and budget together not refused"
has "$(cat "$work/err")" "(from --vram-headroom-bytes) and --vram-budget-bytes (from IGNIS_VRAM_BUDGET_BYTES)"

step "precedence: flag over variable over file over profile"
printf 'vram_headroom_bytes: 12M\n' >"$work/h.yaml"
run 0 plan --json -c "$work/h.yaml"
jq -e '.headroom_bytes == 12582912' <<<"$out" >/dev/null || fail "file did not beat the profile"
out=$(IGNIS_VRAM_HEADROOM_BYTES=10M "$sup" plan --json -c "$work/h.yaml")
jq -e '.headroom_bytes == 10485760' <<<"$out" >/dev/null || fail "variable did not beat the file"
out=$(IGNIS_VRAM_HEADROOM_BYTES=10M "$sup" plan --json -c "$work/h.yaml" --vram-headroom-bytes 9M)
jq -e '.headroom_bytes == 9437184' <<<"$out" >/dev/null || fail "flag did not beat the variable"

step "a start the plan refuses creates nothing"
run 3 start --runtime-dir "$work/rt" --device-free-bytes 9M
has "$err" "refuses the start"
[[ ! -e $work/rt ]] || fail "a refused start created its runtime directory"

step "the cuda backend reads the card through NVML; without a driver it says so"
if [[ ! -e /dev/nvidia0 ]]; then
	run 2 start --backend cuda --runtime-dir "$work/rt"
	has "$err" "libnvidia-ml.so.1"; has "$err" "--backend cpu"
	[[ ! -e $work/rt ]] || fail "a refused start created its runtime directory"
	run 0 plan --json --backend auto
	jq -e '.cuda_context_bytes == 0 and .free_at_start_source == "profile cpu"' <<<"$out" \
		>/dev/null || fail "auto without a device is not the cpu backend: $out"
fi
run 0 plan --json --model 27b $card32
jq -e '.free_at_start_source == "--device-free-bytes"' <<<"$out" >/dev/null ||
	fail "plan did not take the named figure: $out"

step "--model FILE: the plan takes the description from a model file"
"$build/tools/ignis-mkmodel" --preset tiny-moe -o "$work/tm.gguf" 2>/dev/null || fail "mkmodel failed"
run 0 plan --json --model "$work/tm.gguf"
from_file=$(jq -c '[.weights_bytes, .expert_cache_bytes, .kv_pool_pages]' <<<"$out")
run 0 plan --json --model tiny-moe
[[ $(jq -c '[.weights_bytes, .expert_cache_bytes, .kv_pool_pages]' <<<"$out") == "$from_file" ]] ||
	fail "the file's plan $from_file differs from the built-in's: $out"
echo "not a model" >"$work/bad.gguf"
run 2 plan --model "$work/bad.gguf"
has "$err" "bad.gguf"; has "$err" "not a GGUF file"

step "counts past their bounds: refused naming the key, before any walk (issue 26, item 8)"
# tiny-moe with ignis.block_count 2^24 (was a walk of 16M layers, 11-17 s)
python3 - "$work/tm.gguf" "$work/deep.gguf" <<'PY' || fail "could not write deep.gguf"
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
k = b'ignis.block_count'
i = d.index(struct.pack('<Q', len(k)) + k) + 8 + len(k)
assert struct.unpack_from('<I', d, i)[0] == 4  # UINT32
struct.pack_into('<I', d, i + 4, 1 << 24)
open(sys.argv[2], 'wb').write(d)
PY
run 2 plan --model "$work/deep.gguf"
has "$err" "deep.gguf"; has "$err" "ignis.block_count (layers) is 16777216; accepted: 1 to 4096"
plan_err=$err
run 2 start --model "$work/deep.gguf" --runtime-dir "$work/rt26"
[[ $err == "$plan_err" ]] || fail "start refused otherwise than plan: $err"
[[ ! -e $work/rt26 ]] || fail "a refused start created its runtime directory"
gen_err=$("$build/tools/ignis-generate" --model "$work/deep.gguf" --prompt hi 2>&1 >/dev/null)
[[ $? == 1 ]] || fail "ignis-generate did not refuse deep.gguf: $gen_err"
has "$gen_err" "ignis.block_count (layers) is 16777216; accepted: 1 to 4096"
# a vocabulary of 2^22 + 1 tokens in a file that holds them (33 MB): refused
# by the container's bound, the same for every reader (was 1.27 GB and 8.7 s
# for ignis-vocab info at 2^24)
python3 - "$work/vocab.gguf" <<'PY' || fail "could not write vocab.gguf"
import struct, sys
def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b
n = (1 << 22) + 1
kv = s('general.architecture') + struct.pack('<I', 8) + s('qwen3')
kv += s('tokenizer.ggml.model') + struct.pack('<I', 8) + s('gpt2')
kv += s('tokenizer.ggml.tokens') + struct.pack('<IIQ', 9, 8, n) + bytes(8 * n)
open(sys.argv[1], 'wb').write(b'GGUF' + struct.pack('<IQQ', 3, 0, 3) + kv)
PY
voc_err=$("$build/tools/ignis-vocab" info "$work/vocab.gguf" 2>&1 >/dev/null)
[[ $? == 1 ]] || fail "ignis-vocab info did not refuse vocab.gguf: $voc_err"
has "$voc_err" "'tokenizer.ggml.tokens': an array of 4194305 elements; accepted: up to 4194304"
run 2 plan --model "$work/vocab.gguf"
has "$err" "'tokenizer.ggml.tokens': an array of 4194305 elements; accepted: up to 4194304"
rm -f "$work/vocab.gguf" "$work/deep.gguf"

step "the cpu backend's simulated device takes an oversubscribed plan, as the plan said (issue 13, item 13)"
# Above free memory (200M on the cpu profile's 128M device), and below the
# plan's minimum (7M, under the embedded default's 12,529,664 B of lines): the plan warns, and the
# worker lays out all it planned on a device that pages, as the spec's Windows.
for budget in 200M 7M; do
	: >"$events"
	"$sup" start --runtime-dir "$rt" --vram-budget-bytes $budget --vram-allow-oversubscription \
		>>"$events" 2>"$work/start-err" &
	sup_pid=$!
	wait_for 30 grep -qE '"event":"ignis.supervisor.(started|failed)"' "$events" ||
		fail "$budget: neither started nor failed within 30 s: $(cat "$events" "$work/start-err")"
	grep -q '"event":"ignis.supervisor.started"' "$events" ||
		fail "$budget: the oversubscribed start failed: $(cat "$work/start-err")"
	jq -e -s '([.[] | select(.event == "ignis.runtime.vram_oversubscribed")] | length == 1) and
		([.[] | select(.event == "ignis.runtime.vram_plan")][0].total_bytes as $t |
		[.[] | select(.event == "ignis.runtime.vram_loaded")][0] |
		.allocated_bytes > 0 and .allocated_bytes <= $t)' "$events" >/dev/null ||
		fail "$budget: not one warning and a layout within the plan: $(cat "$events")"
	kill -TERM "$sup_pid"; wait "$sup_pid"; sup_pid=
done

step "--help lists the knobs with their variables"
run 0 --help
has "$out" "--vram-kv-pool-bytes"; has "$out" "IGNIS_VRAM_KV_POOL_BYTES"

step "compact's residual window: a line for each lane and device slot, beside each host slot; none in fp8"
# the 27B: 16 layers x 4 KV heads x 2 roles x 256 x 2 B = 65,536 B a token in
# bf16, (32 sinks + 512) x 65,536 = 35,651,584 B a sequence; 8 lanes + 2
# device slots: 356,515,840 B; 16 host slots x (232,532,224 + 35,651,584) =
# 4,290,940,928 B of host memory
run 0 plan --json --model 27b $card32 --reuse-retained-device 2
jq -e '.kv_sinks == 32 and .kv_window == 512 and .kv_window_bytes_per_sequence == 35651584 and
	.hq_residual_window_bytes == 356515840 and .retained_host_bytes == 4290940928' <<<"$out" \
	>/dev/null || fail "the window: $(jq -c '{kv_window_bytes_per_sequence, hq_residual_window_bytes, retained_host_bytes}' <<<"$out")"
run 0 plan --model 27b $card32 --reuse-retained-device 2
has "$out" "32 sinks + 512 newest tokens in bf16 per sequence, 8 lanes + 2 retained"
# fp8 keeps no window, nor does a compact plan with --model-kv-window 0: the
# host slots hold the state image alone, 16 x 232,532,224 = 3,720,515,584 B
for off in "--model-kv-format fp8" "--model-kv-window 0"; do
	run 0 plan --json --model 27b $card32 $off
	jq -e '.hq_residual_window_bytes == 0 and (has("kv_window") | not) and
		(has("kv_window_bytes_per_sequence") | not) and .retained_host_bytes == 3720515584' \
		<<<"$out" >/dev/null || fail "$off kept a window: $out"
done

step "the README's three worked examples, figure for figure"
run 0 plan --json --model 27b $card32
jq -e '.budget_bytes == 31529590784 and .kv_pool_policy == "resident" and
	.kv_pool_pages == 19404 and .kv_pool_tokens == 1241856' <<<"$out" >/dev/null ||
	fail "the 27B on a 32 GB card: $(jq -c '{budget_bytes, kv_pool_pages}' <<<"$out")"
run 0 plan --json --model flash-next $card32
jq -e '.kv_pool_policy == "offloaded" and .kv_pool_pages == 6144 and
	.kv_pool_tokens == 393216 and .expert_cache_bytes == 21571686400' <<<"$out" >/dev/null ||
	fail "Flash-Next offloaded: $(jq -c '{kv_pool_pages, expert_cache_bytes}' <<<"$out")"
run 0 plan --json --model flash-next --profile none --backend cuda --device-free-bytes 96000000000
jq -e '.kv_pool_policy == "resident" and .kv_pool_pages == 184503 and
	.kv_pool_tokens == 11808192 and .prefill_staging_bytes == 0' <<<"$out" >/dev/null ||
	fail "Flash-Next resident: $(jq -c '{kv_pool_pages, prefill_staging_bytes}' <<<"$out")"

step "the default KV format is fp8 (the 27B's pool on a 32 GB card: 5,507 pages); rtx5090's is compact"
out=$(env -u IGNIS_MODEL_KV_FORMAT "$sup" plan --json --model 27b $card32 2>/dev/null | tail -1) ||
	fail "the default plan"
jq -e '.kv_format == "fp8" and .kv_bytes_per_token == 33280 and .kv_pool_pages == 5507' \
	<<<"$out" >/dev/null || fail "the default format: $(jq -c '{kv_format, kv_pool_pages}' <<<"$out")"
out=$(env -u IGNIS_MODEL_KV_FORMAT "$sup" plan --json --model 27b --profile rtx5090 \
	--device-free-bytes 33140203520 2>/dev/null | tail -1) || fail "the rtx5090 plan"
jq -e '.kv_format == "compact" and .max_context_tokens == 786432' <<<"$out" >/dev/null ||
	fail "rtx5090's format: $(jq -c '{kv_format, max_context_tokens}' <<<"$out")"

echo "plan integration: all steps passed"
