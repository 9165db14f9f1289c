#!/usr/bin/env bash
# Integration: prompt reuse through the three processes (docs/adr/0037). A
# supervisor with device retained slots (--reuse-retained-device 4): a
# request's prompt is retained at its end (ignis.reuse.captured); the same
# prompt again, and a longer one that begins with it, start from it
# (ignis.reuse.claimed, with the tokens not prefilled); every text equals
# the same request run alone in this process (ignis-generate --model),
# greedy and sampled. With --reuse-prompt off and slots named (device and
# host) the slots load and hold shared prefixes only: prompts that part
# after a system prompt share it, no prompt's end is retained (ADR 0037,
# "Reuse off with slots named"); with none named nothing is captured.
# Host slots (docs/adr/0038): the default tier, the kvstore daemon's; a
# checkpoint held there survives a kill -9 of the daemon and is claimed
# after it, the text unchanged; an interactive checkpoint idle past
# --reuse-retained-interactive-ttl is given up before an agent's.
#   reuse.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: reuse.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
cli=$build/client/ignis-client
work=$(mktemp -d /tmp/ignis-reuse-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
m=$work/m.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense -o "$m" --seed 11 2>/dev/null || fail "mkmodel"

start() {
	rm -rf "$rt"
	# a file of its own each start: a daemon of the last one that writes its
	# last event after this start would write at its old offset into a
	# truncated file, and the hole of NULs before it makes grep stop there
	nstart=$((${nstart:-0} + 1))
	events=$work/events.$nstart.jsonl
	"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 512 "$@" >"$events" 2>&1 &
	sup_pid=$!
	wait_for 20 grep -q '"ignis.gpu_worker.model_loaded"' "$events" || fail "no start"
}
stop() {
	kill -TERM "$sup_pid"
	wait "$sup_pid"
	sup_pid=
}

base="A system prompt that every request of this test begins with, long enough to span a page of sixty-four tokens."
more="$base Then a question that only the second request asks."

step "the same prompt twice, then a longer one: each equals itself alone"
start --reuse-retained-device 4
grep '"event":"ignis.gpu_worker.model_loaded"' "$events" |
	jq -e '.reuse_prompt == true and .retained_device_slots == 4' >/dev/null ||
	fail "the load event does not say reuse is on with 4 slots"
i=0
for args in "--prompt|$base|--max-tokens|24" "--prompt|$base|--max-tokens|24|--temperature|0.8|--seed|5" \
	"--prompt|$more|--max-tokens|20"; do
	IFS='|' read -ra a <<<"${args#|}"
	"$gen" --model "$m" --kv-format fp8 "${a[@]}" >"$work/want.$i" || fail "in-process $i"
	"$cli" --runtime-dir "$rt" generate "${a[@]}" >"$work/got.$i" || fail "client $i"
	cmp -s "$work/want.$i" "$work/got.$i" || fail "request $i differs from itself alone"
	i=$((i + 1))
done
# the client says it too: the done event's cached tokens
"$cli" --runtime-dir "$rt" generate --prompt "$base" --max-tokens 4 --json >"$work/json" ||
	fail "client --json"
n=$(printf '%s' "$base" | wc -c) # the byte-level tokenizer: a token a byte
jq -e --argjson n "$n" 'select(.event == "done") | .cached == $n' "$work/json" >/dev/null ||
	fail "the done event does not say the $n cached tokens: $(tail -1 "$work/json")"
claims=$(($(grep -c '"event":"ignis.reuse.claimed"' "$events") - 1))
((claims == 2)) || fail "$claims claims, want 2: $(grep ignis.reuse "$events")"
grep '"event":"ignis.reuse.claimed"' "$events" | jq -e --argjson n "$n" '.tokens == $n' >/dev/null ||
	fail "a claim that is not the whole first prompt ($n tokens): $(grep reuse.claimed "$events")"
(($(grep -c '"event":"ignis.reuse.captured"' "$events") == 2)) ||
	fail "captures: $(grep ignis.reuse "$events")"

step "OpenAI's usage says how many prompt tokens came from a checkpoint"
http=$IGNIS_SERVER_HTTP_BIND
wait_for 10 curl -sf "$http/ready" || fail "/ready"
body=$(jq -cn --arg p "$base" '{model: "tiny-dense", prompt: $p, max_tokens: 4, temperature: 0}')
u=$(curl -s -H "Content-Type: application/json" "$http/v1/completions" -d "$body" | jq -c .usage)
jq -e --argjson n "$n" '.prompt_tokens == $n and .prompt_tokens_details.cached_tokens == $n' \
	<<<"$u" >/dev/null || fail "usage of the same prompt again: $u"
body=$(jq -cn --arg p "x$base" '{model: "tiny-dense", prompt: $p, max_tokens: 4, temperature: 0}')
u=$(curl -s -H "Content-Type: application/json" "$http/v1/completions" -d "$body" | jq -c .usage)
jq -e '.prompt_tokens_details.cached_tokens == 0' <<<"$u" >/dev/null ||
	fail "usage of a prompt no checkpoint begins: $u"
stop

step "host slots (the default tier): a checkpoint survives kill -9 of the kvstore daemon"
start --reuse-retained-host 2
grep '"event":"ignis.gpu_worker.model_loaded"' "$events" |
	jq -e '.retained_device_slots == 0 and .retained_host_slots == 2' >/dev/null ||
	fail "the load event does not say 2 host slots and no device one"
"$cli" --runtime-dir "$rt" generate --prompt "$base" --max-tokens 24 >"$work/host.0" || fail "client"
cmp -s "$work/host.0" "$work/want.0" || fail "the first request differs from itself alone"
wait_for 10 grep -q '"event":"ignis.reuse.captured".*"tier":"host"' "$events" ||
	fail "no host capture: $(grep ignis.reuse "$events")"
kv_pid=$(grep '"event":"ignis.kvstore.tiers"' "$events" | tail -1 | jq -r .pid)
kill -9 "$kv_pid"
wait_for 20 eval '(($(grep -c "\"event\":\"ignis.kvstore.tiers\"" "$events") >= 2))' ||
	fail "the kvstore daemon did not come back"
"$cli" --runtime-dir "$rt" generate --prompt "$more" --max-tokens 20 >"$work/host.2" || fail "client"
cmp -s "$work/host.2" "$work/want.2" || fail "the longer prompt differs from itself alone"
grep '"event":"ignis.reuse.claimed"' "$events" |
	jq -e --argjson n "$n" 'select(.tier == "host") | .tokens == $n' >/dev/null ||
	fail "no claim of the host checkpoint after the restart: $(grep ignis.reuse "$events")"
host_reused() {
	curl -s "$IGNIS_SERVER_METRICS_BIND/metrics" |
		grep -q "^ignis_retained_reused_tokens_total{tier=\"host\",kind=\"checkpoint\"} $n\$"
}
wait_for 10 host_reused ||
	fail "metrics: $(curl -s "$IGNIS_SERVER_METRICS_BIND/metrics" | grep 'reused_tokens_total{')"
stop

# Two host slots: an interactive checkpoint (A, 40 bytes), an agent's (G, 50),
# then an interactive capture (C, 60) gives one up: G within the TTL, A once
# idle past it (it ranks as an agent's then, and is the least recently used).
ttl_case() { # TTL IDLE_S WANT_TOKENS
	start --reuse-retained-host 2 --reuse-retained-interactive-ttl "$1"
	"$cli" --runtime-dir "$rt" generate --prompt "$(printf 'a%.0s' {1..40})" --max-tokens 2 >/dev/null ||
		fail "client"
	# A's capture lands a few exchanges with the daemon after its request
	# ends; one that comes while it is in flight is skipped (host_busy, as
	# the spec says: never waited for), so G comes after it
	wait_for 30 grep -q '"event":"ignis.reuse.captured"' "$events" ||
		fail "A's capture: $(grep '"event":"ignis.reuse' "$events")"
	"$cli" --runtime-dir "$rt" generate --class agent --prompt "$(printf 'g%.0s' {1..50})" \
		--max-tokens 2 >/dev/null || fail "client"
	wait_for 30 eval '(($(grep -c "\"event\":\"ignis.reuse.captured\"" "$events") == 2))' ||
		fail "captures: $(grep '"event":"ignis.reuse' "$events"); the last events: $(tail -40 "$events")"
	sleep "$2"
	"$cli" --runtime-dir "$rt" generate --prompt "$(printf 'c%.0s' {1..60})" --max-tokens 2 >/dev/null ||
		fail "client"
	wait_for 10 grep -q '"event":"ignis.reuse.given_up"' "$events" || fail "nothing given up"
	grep '"event":"ignis.reuse.given_up"' "$events" |
		jq -e --argjson t "$3" '.tokens == $t and .tier == "host" and .reason == "slot"' >/dev/null ||
		fail "TTL $1, idle $2 s: gave up $(grep ignis.reuse.given_up "$events"); want the $3-token one"
	stop
}
step "host slots: the agent's checkpoint goes first within the TTL"
ttl_case 300 0 50
step "host slots: an interactive checkpoint idle past the TTL goes as an agent's would"
ttl_case 1 2.5 40

# off_prompts TAG [SHARED]: three prompts that part after the system prompt
# and a space ($n + 1 tokens), the third twice, each the same text as alone;
# with SHARED, the third waits for the prefix the second retained (a host
# slot's capture lands a few exchanges with the daemon later)
off_prompts() {
	local i=0 q
	for q in One Two Six Six; do
		if ((i == 2)) && [[ -n ${2:-} ]]; then
			wait_for 10 grep -q '"event":"ignis.reuse.captured"' "$events" ||
				fail "no capture where the second prompt parted: $(grep ignis.reuse "$events")"
		fi
		a=(--prompt "$base $q." --max-tokens 16)
		"$gen" --model "$m" --kv-format fp8 "${a[@]}" >"$work/$1w.$i" || fail "in-process $q"
		"$cli" --runtime-dir "$rt" generate "${a[@]}" >"$work/$1g.$i" || fail "client $q"
		cmp -s "$work/$1w.$i" "$work/$1g.$i" ||
			fail "\"$base $q.\" differs from itself alone ($1)"
		i=$((i + 1))
	done
}
# off_shared TIER: the second prompt retained the prefix where it parted
# from the first, and nothing else; the third and its repeat claimed it
off_shared() {
	local p=$((n + 1))
	(($(count ignis.reuse.captured) == 1)) || fail "captures: $(grep ignis.reuse "$events")"
	grep '"event":"ignis.reuse.captured"' "$events" |
		jq -e --argjson p "$p" --arg t "$1" '.kind == "prefix" and .tier == $t and .tokens == $p' \
			>/dev/null || fail "a capture that is not the $p-token prefix: $(grep ignis.reuse "$events")"
	(($(count ignis.reuse.claimed) == 2)) || fail "claims: $(grep ignis.reuse "$events")"
	grep '"event":"ignis.reuse.claimed"' "$events" |
		jq -e --argjson p "$p" --arg t "$1" '.kind == "prefix" and .tier == $t and .tokens == $p' \
			>/dev/null || fail "a claim that is not the $p-token prefix: $(grep ignis.reuse "$events")"
}

step "--reuse-prompt off with device and host slots named: they load, prefixes are shared"
start --reuse-prompt off --reuse-retained-device 2 --reuse-retained-host 2
grep '"event":"ignis.gpu_worker.model_loaded"' "$events" |
	jq -e '.reuse_prompt == false and .retained_device_slots == 2 and .retained_host_slots == 2' \
		>/dev/null || fail "the load event does not say reuse off with 2 device and 2 host slots"
off_prompts dev shared
off_shared device
# the client and the metrics say it too; no prompt's end was reused
"$cli" --runtime-dir "$rt" generate --prompt "$base Six." --max-tokens 4 --json >"$work/json" ||
	fail "client --json"
jq -e --argjson p $((n + 1)) 'select(.event == "done") | .cached == $p' "$work/json" >/dev/null ||
	fail "the done event does not say the $((n + 1)) tokens of the prefix: $(tail -1 "$work/json")"
prefix_reused() {
	local page
	page=$(curl -s "$IGNIS_SERVER_METRICS_BIND/metrics")
	grep -q "^ignis_retained_reused_tokens_total{tier=\"device\",kind=\"prefix\"} $((3 * (n + 1)))\$" \
		<<<"$page" &&
		grep -q '^ignis_retained_reused_tokens_total{tier="device",kind="checkpoint"} 0$' <<<"$page"
}
wait_for 10 prefix_reused ||
	fail "metrics: $(curl -s "$IGNIS_SERVER_METRICS_BIND/metrics" | grep 'reused_tokens_total{')"
stop

step "--reuse-prompt off with host slots only: the prefix in the kvstore daemon's"
start --reuse-prompt off --reuse-retained-host 2
grep '"event":"ignis.gpu_worker.model_loaded"' "$events" |
	jq -e '.reuse_prompt == false and .retained_device_slots == 0 and .retained_host_slots == 2' \
		>/dev/null || fail "the load event does not say reuse off with 2 host slots"
off_prompts host shared
off_shared host
stop

step "--reuse-prompt off, no slots named: nothing captured or claimed, the same text"
start --reuse-prompt off
grep '"event":"ignis.gpu_worker.model_loaded"' "$events" |
	jq -e '.reuse_prompt == false and .retained_device_slots == 0 and .retained_host_slots == 0' \
		>/dev/null || fail "the load event does not say reuse is off with no slots"
off_prompts none
"$cli" --runtime-dir "$rt" generate --prompt "$base" --max-tokens 24 >"$work/off.1" || fail "client"
cmp -s "$work/off.1" "$work/want.0" || fail "different text with reuse off"
grep -q '"event":"ignis.reuse' "$events" && fail "reuse events with --reuse-prompt off"
stop

step "defaults, a model with no fixed-size state (llama.cpp's qwen3: all attention): reused"
# the default slots are host slots, which hold a state; this model has none,
# and its checkpoints (pages and logits) used to find no slot at all
m3=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m3" \
	--name qwen3-tiny 2>/dev/null || fail "mkmodel --layout qwen3"
m_ours=$m
m=$m3
start
# its host slots work as device ones: the load event says what it has
grep '"event":"ignis.gpu_worker.model_loaded"' "$events" |
	jq -e '.retained_host_slots == 0 and .retained_device_slots > 0' >/dev/null ||
	fail "qwen3: the load event's slots: $(grep ignis.gpu_worker.model_loaded "$events")"
"$gen" --model "$m3" --kv-format fp8 --prompt "$base" --max-tokens 12 >"$work/q3.want" ||
	fail "in-process qwen3"
body=$(jq -cn --arg p "$base" '{model: "qwen3-tiny", prompt: $p, max_tokens: 12, temperature: 0}')
for i in 0 1; do
	got=$(curl -s -H "Content-Type: application/json" "$http/v1/completions" -d "$body")
	[[ $(jq -r '.choices[0].text' <<<"$got") == "$(cat "$work/q3.want")" ]] ||
		fail "qwen3 request $i differs from itself alone: $got"
	p3=$(jq .usage.prompt_tokens <<<"$got")
	jq -e --argjson n $((i ? p3 : 0)) '.usage.prompt_tokens_details.cached_tokens == $n' \
		<<<"$got" >/dev/null || fail "qwen3 request $i: cached tokens $(jq -c .usage <<<"$got")"
done
(($(grep -c '"event":"ignis.reuse.captured"' "$events") >= 1)) ||
	fail "qwen3: no capture: $(grep ignis.reuse "$events")"
grep '"event":"ignis.reuse.claimed"' "$events" | jq -e --argjson n "$p3" '.tokens == $n' >/dev/null ||
	fail "qwen3: no claim of the whole prompt: $(grep ignis.reuse "$events")"
stop
m=$m_ours
echo "reuse integration: all steps passed"
