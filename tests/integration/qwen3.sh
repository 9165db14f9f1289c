#!/usr/bin/env bash
# Integration: a model file in llama.cpp's qwen3 layout (ignis-mkmodel
# --layout qwen3: every layer full attention, no output gate, the output tied
# to the embedding, a gpt2 vocabulary) served by the whole system. The
# worker reads the file's vocabulary, encodes text prompts with it (the text
# of its special tokens becomes them, as llama.cpp's server does), decodes
# the stream with it and ends a request at its end-of-generation tokens;
# every output equals the same request run in this process
# (ignis-generate), greedy and sampled, while several share the rounds, in
# every KV format. ignis-vocab shows the same vocabulary. Then a qwen3next
# file (the MoE hybrid) the same way.
#   qwen3.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: qwen3.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
voc=$build/tools/ignis-vocab
work=$(mktemp -d /tmp/ignis-qwen3-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"

m=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	2>/dev/null || fail "mkmodel --layout qwen3"

step "ignis-vocab reads the file's vocabulary: its size, its end-of-generation tokens"
info=$("$voc" info "$m") || fail "ignis-vocab info"
grep -qx "tokens 260" <<<"$info" || fail "vocabulary: $info"
grep -qx "end of generation 256:<|endoftext|> 258:<|im_end|>" <<<"$info" || fail "eog: $info"
ids=$(printf '<|im_start|>user\nhi' | "$voc" encode "$m" --parse-special) || fail "encode"
[[ $ids == "257 117 115 101 114 10 104 105" ]] || fail "encode with specials: $ids"
ids=$(printf '<|im_start|>' | "$voc" encode "$m") || fail "encode"
[[ $(wc -w <<<"$ids") == 12 ]] || fail "control tokens' text without --parse-special: $ids"

step "a bad file is refused before anything starts, naming what is wrong"
head -c $(($(stat -c %s "$m") * 3 / 4)) "$m" >"$work/cut.gguf"
out=$(timeout 20 "$sup" start --runtime-dir "$rt" --model "$work/cut.gguf" 2>&1) &&
	fail "a truncated file started"
grep -q "cut.gguf': truncated: tensor '.*' needs file bytes" <<<"$out" || fail "unclear refusal: $out"
grep -q '"ignis.supervisor.child_started"' <<<"$out" && fail "a daemon was started for a bad file"

prompts=("<|im_start|>user
hello<|im_end|>
<|im_start|>assistant
" "plain text, é ü 中文 and 🙂" "x")
# compact-window: compact with a residual window of 4 sinks and 8 newest
# tokens, which every request here crosses (the default's 32 + 512 holds
# them whole)
for spec in bf16 fp8 compact compact-window; do
	fmt=${spec%-window}
	win=()
	[[ $spec == compact-window ]] && win=(--kv-window 8 --kv-sinks 4)
	step "$spec: the worker loads the qwen3 file"
	rm -rf "$rt"
	: >"$events"
	"$sup" start --runtime-dir "$rt" --model "$m" --model-kv-format "$fmt" "${win[@]/#--/--model-}" \
		--model-max-context 512 >"$events" 2>&1 &
	sup_pid=$!
	wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "$spec: no start"
	grep -q '"ignis.gpu_worker.model_loaded"' "$events" || fail "$spec: no model_loaded event"
	got=$(grep '"ignis.gpu_worker.model_loaded"' "$events" | tail -1 | jq -r .kv_format)
	[[ $got == "$fmt" ]] || fail "$spec: model_loaded says the KV format is '$got'"
	grep '"ignis.runtime.vram_plan"' "$events" | tail -1 | jq -e --arg f "$fmt" \
		'.kv_format == $f and .kv_bytes_per_token > 0' >/dev/null ||
		fail "$spec: the vram_plan event does not name the format and its bytes per token"
	want_window=0
	[[ $fmt == compact ]] && want_window=512
	[[ $spec == compact-window ]] && want_window=8
	got=$(grep '"ignis.runtime.vram_plan"' "$events" | tail -1 | jq '.kv_window // 0')
	((got == want_window)) || fail "$spec: the vram_plan event's kv_window is $got, not $want_window"

	step "$spec: concurrent text requests each equal the same request run alone in this process"
	pids=()
	for i in "${!prompts[@]}"; do
		args=(--prompt "${prompts[$i]}" --max-tokens $((24 + 9 * i)) --seed $((i + 3)))
		((i % 2)) && args+=(--temperature 0.9 --top-p 0.95 --top-k 40)
		"$gen" --model "$m" --kv-format "$fmt" "${win[@]}" "${args[@]}" >"$work/want.$i" ||
			fail "$spec: in-process generate $i"
		"$gen" --worker --runtime-dir "$rt" "${args[@]}" >"$work/got.$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "$spec: worker generate $i failed"
		cmp -s "$work/want.$i" "$work/got.$i" ||
			fail "$spec: request $i differs: $(od -c "$work/got.$i" | head -3) vs $(od -c "$work/want.$i" | head -3)"
	done
	[[ -s $work/got.0 ]] || fail "$spec: empty output"
	n=$(grep -c '"ignis.request.submitted"' "$events")
	((n >= ${#prompts[@]})) || fail "$spec: $n submitted"
	# the chat prompt as the worker counted it: its special tokens' text
	# became them (ignis-vocab's count, which the bytes alone would pass)
	want=$(printf '%s' "${prompts[0]}" | "$voc" encode "$m" --parse-special --add-special | wc -w)
	bytes=$(printf '%s' "${prompts[0]}" | wc -c)
	((want < bytes)) || fail "$spec: the chat prompt's specials were not parsed ($want ids)"
	grep '"ignis.request.submitted"' "$events" | jq -s -e --argjson w "$want" \
		'any(.[]; .prompt_tokens == $w)' >/dev/null ||
		fail "$spec: no request of $want prompt tokens"
	kill -TERM "$sup_pid"
	wait "$sup_pid"
	sup_pid=
done
step "a qwen3next file (a MoE hybrid, llama.cpp's Q4_K_M mix) served: the same text as in process"
mn=$work/q3n.gguf
"$build/tools/ignis-mkmodel" --preset tiny-moe --layout qwen3next --dtype q4_k_m --seed 7 -o "$mn" \
	2>/dev/null || fail "mkmodel --layout qwen3next"
rm -rf "$rt"
: >"$events"
"$sup" start --runtime-dir "$rt" --model "$mn" --model-max-context 512 >"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "qwen3next: no start"
grep '"ignis.gpu_worker.model_loaded"' "$events" | jq -e '.architecture == "qwen3next" and
	.mtp_layers_skipped == 0' >/dev/null || fail "qwen3next: model_loaded: $(grep model_loaded "$events")"
pids=()
for i in 0 1; do
	args=(--prompt "${prompts[$i]}" --max-tokens $((20 + 7 * i)) --seed $((i + 5)))
	((i % 2)) && args+=(--temperature 0.8 --top-k 30)
	"$gen" --model "$mn" --kv-format fp8 "${args[@]}" >"$work/want.$i" ||
		fail "qwen3next: in-process generate $i"
	"$gen" --worker --runtime-dir "$rt" "${args[@]}" >"$work/got.$i" &
	pids+=($!)
done
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || fail "qwen3next: worker generate $i failed"
	cmp -s "$work/want.$i" "$work/got.$i" || fail "qwen3next: request $i differs"
done
[[ -s $work/got.0 ]] || fail "qwen3next: empty output"
kill -TERM "$sup_pid"
wait "$sup_pid"
sup_pid=
echo "qwen3 integration: all steps passed"
