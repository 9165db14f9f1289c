#!/usr/bin/env bash
# Integration: a prompt generates tokens through the gpu-worker, on both tiny
# presets. The supervisor starts the two daemons on a model file; requests go
# to the worker's control socket (ignis-generate --worker: submit, then poll);
# every output equals the same request run in this process, alone, while
# several requests share the worker's rounds; the text comes from the
# worker with the tokens (a character split over two tokens comes whole,
# once, with the one that completes it) and the worker ends a request at a
# stop string (finish stop, the tokens cut before it); a refused request
# says why and the worker keeps serving; after a kill -9 the supervisor
# restarts the worker, which loads the model again and gives the same
# tokens.
#   worker.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: worker.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
probe=$build/tests/integration/text-probe
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
	# the round scratch, logits and states in their lines: a pass holds a
	# token at least, a state slot per lane (the worker checked that the
	# device holds nothing beside the plan's reservations)
	jq -e '.round_pass_tokens >= 1 and .logit_rows >= 1 and .state_slots == .lanes and
		.round_scratch_bytes <= .workspace_line_bytes' <<<"$loaded" >/dev/null ||
		fail "$preset: the rounds' memory is not in the plan's lines: $loaded"

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

	step "$preset: the text is the worker's, token by token: a split character comes whole, once"
	# a sampled output long enough to split a two-byte character over two
	# tokens (a lead byte C2..DF, then a continuation 80..BF): the first
	# seed that does; every reply's text (one token a poll) concatenated
	# is the in-process output, byte for byte
	split=
	for seed in $(seq 1 30); do
		"$probe" worker "$rt" --prompt hello --max-tokens 120 --temperature 1 --seed "$seed" \
			>"$work/text.jsonl" || fail "$preset: text-probe seed $seed"
		mapfile -t rows < <(jq -r '"\(.ids | if length == 0 then -1 else .[0] end) \(.text)"' \
			"$work/text.jsonl")
		for ((k = 1; k < ${#rows[@]}; k++)); do
			read -r lead ltext <<<"${rows[$((k - 1))]}"
			read -r cont ctext <<<"${rows[$k]}"
			if ((lead >= 0xC2 && lead <= 0xDF && cont >= 0x80 && cont <= 0xBF)); then
				pair=$(printf '%02x%02x' "$lead" "$cont")
				[[ ${ctext:-} == *"$pair" ]] ||
					fail "$preset seed $seed: token $k completes $pair, its text is '${ctext:-}'"
				[[ ${ltext:-} != *"$(printf '%02x' "$lead")" ]] ||
					fail "$preset seed $seed: the lead byte came alone with token $((k - 1)): '${ltext:-}'"
				split=$seed
				break
			fi
		done
		[[ -n $split ]] && break
	done
	[[ -n $split ]] || fail "$preset: no two-byte character split over tokens in 30 seeds"
	"$gen" --model "$work/$preset.gguf" --kv-format "$fmt" --prompt hello --max-tokens 120 \
		--temperature 1 --seed "$split" >"$work/want.text" || fail "$preset: in-process text"
	want_hex=$(head -c -1 "$work/want.text" | od -An -tx1 -v | tr -d ' \n')
	got_hex=$(jq -r .text "$work/text.jsonl" | tr -d '\n')
	[[ $got_hex == "$want_hex" ]] || fail "$preset seed $split: the worker's text is not the output's"
	echo "   (seed $split: a character split over two tokens came whole, once)"

	step "$preset: a stop string ends the request at the worker, the tokens cut before it"
	mapfile -t ids < <(jq -r '.ids[]' "$work/text.jsonl")
	k=-1
	for ((j = 2; j + 1 < ${#ids[@]}; j++)); do
		a=${ids[$j]} b=${ids[$((j + 1))]}
		if ((a >= 33 && a < 127 && b >= 33 && b < 127)); then
			prefix=$(printf '%s,' "${ids[@]:0:$j}")
			[[ ",$prefix" != *",$a,$b,"* ]] && { k=$j; break; }
		fi
	done
	((k >= 0)) || fail "$preset seed $split: no printable pair to stop at"
	stop=$(printf "\\x$(printf %02x "$a")\\x$(printf %02x "$b")")
	"$probe" worker "$rt" --prompt hello --max-tokens 120 --temperature 1 --seed "$split" \
		--stop "$stop" --poll-max 64 >"$work/stop.jsonl" || fail "$preset: the stop request"
	got=$(jq -r '.ids[]' "$work/stop.jsonl" | tr '\n' ,)
	[[ $got == "$(printf '%s,' "${ids[@]:0:$k}")" ]] ||
		fail "$preset: stop '$stop' at $k: got $got"
	last=$(tail -1 "$work/stop.jsonl")
	[[ $(jq -r .finish <<<"$last") == stop && $(jq -r .generated <<<"$last") == "$k" ]] ||
		fail "$preset: stop '$stop': the last reply is $last"

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
