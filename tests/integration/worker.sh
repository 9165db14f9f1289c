#!/usr/bin/env bash
# Integration: a prompt generates tokens through the gpu-worker, on both tiny
# presets. The supervisor starts the two daemons on a model file; requests go
# to the worker's control socket (ignis-generate --worker: submit, then poll);
# every output equals the same request run in this process, alone, while
# several requests share the worker's rounds; a refused request says why and
# the worker keeps serving; after a kill -9 the supervisor restarts the
# worker, which loads the model again and gives the same tokens.
#   worker.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: worker.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
work=$(mktemp -d /tmp/ignis-worker-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
loaded_twice() { [[ $(count ignis.gpu_worker.model_loaded) -ge 2 ]]; }

prompts=("Exactly the same, please." "a" "The quick brown fox jumps over the lazy dog, twice over."
	"0123456789 0123456789 0123456789 0123456789 0123456789 0123456789 0123456789")
for preset in tiny-dense tiny-moe; do
	if [[ $preset == tiny-dense ]]; then fmt=bf16; else fmt=compact; fi
	"$build/tools/ignis-mkmodel" --preset "$preset" -o "$work/$preset.gguf" --seed 7 2>/dev/null ||
		fail "mkmodel $preset"

	step "$preset: the worker loads the model file into the plan's weights line"
	rm -rf "$rt"
	: >"$events"
	"$sup" start --runtime-dir "$rt" --model "$work/$preset.gguf" --model-kv-format "$fmt" \
		--model-max-context 512 >"$events" 2>&1 &
	sup_pid=$!
	wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "$preset: no start"
	loaded=$(grep '"ignis.gpu_worker.model_loaded"' "$events" | head -1)
	[[ -n $loaded ]] || fail "$preset: no model_loaded event"
	placed=$(jq -r .weights_placed_bytes <<<"$loaded")
	line=$(jq -r .weights_line_bytes <<<"$loaded")
	((placed > 0 && placed <= line)) || fail "$preset: placed $placed bytes in a line of $line"

	step "$preset: concurrent requests each equal the same request run alone in this process"
	pids=()
	for i in "${!prompts[@]}"; do
		args=(--prompt "${prompts[$i]}" --max-tokens $((20 + 7 * i)) --seed $((i + 1)))
		((i % 2)) && args+=(--temperature 0.8 --top-p 0.9 --top-k 50)
		cls=interactive; ((i == 2)) && cls=agent
		"$gen" --model "$work/$preset.gguf" --kv-format "$fmt" "${args[@]}" >"$work/want.$i" ||
			fail "$preset: in-process generate $i"
		"$gen" --worker --runtime-dir "$rt" --class "$cls" "${args[@]}" >"$work/got.$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "$preset: worker generate $i failed"
		cmp -s "$work/want.$i" "$work/got.$i" ||
			fail "$preset: request $i differs: $(od -c "$work/got.$i" | head -3) vs $(od -c "$work/want.$i" | head -3)"
	done
	[[ $(count ignis.request.done) -ge ${#prompts[@]} ]] || fail "$preset: missing done events"
	[[ -s $work/got.0 ]] || fail "$preset: empty output"

	step "$preset: token ids come back as ids, the same as the text"
	"$gen" --worker --runtime-dir "$rt" --prompt "${prompts[0]}" --max-tokens 20 --seed 1 --ids \
		>"$work/ids" || fail "$preset: --ids"
	[[ $(wc -l <"$work/ids") -ge 1 && $(wc -l <"$work/ids") -le 20 ]] || fail "$preset: $(wc -l <"$work/ids") ids"

	step "$preset: a prompt past the context is refused by name; the worker keeps serving"
	long=$(head -c 600 /dev/zero | tr '\0' 'x')
	out=$("$gen" --worker --runtime-dir "$rt" --prompt "$long" --max-tokens 4 2>&1) &&
		fail "$preset: a 600-token prompt in a 512 context was accepted"
	grep -q "context is 512" <<<"$out" || fail "$preset: unclear refusal: $out"
	"$gen" --worker --runtime-dir "$rt" --prompt "${prompts[0]}" --max-tokens 20 --seed 1 >"$work/again" ||
		fail "$preset: the worker stopped serving after a refusal"
	cmp -s "$work/again" "$work/want.0" || fail "$preset: different tokens after a refusal"

	step "$preset: after a kill -9 the worker is restarted, loads the model again, same tokens"
	wpid=$(grep '"ignis.gpu_worker.model_loaded"' "$events" | tail -1 | jq -r .pid)
	kill -9 "$wpid"
	wait_for 20 loaded_twice ||
		fail "$preset: the worker did not come back with its model"
	"$gen" --worker --runtime-dir "$rt" --prompt "${prompts[1]}" --max-tokens 27 --seed 2 \
		--temperature 0.8 --top-p 0.9 --top-k 50 >"$work/after" || fail "$preset: generate after restart"
	cmp -s "$work/after" "$work/want.1" || fail "$preset: different tokens after the restart"

	"$sup" stop --runtime-dir "$rt" >/dev/null 2>&1 || fail "$preset: stop"
	wait "$sup_pid"
	sup_pid=
done
echo "worker integration: all steps passed"
