#!/usr/bin/env bash
# Integration: OpenAI's Responses API without server-side state (POST
# /v1/responses, docs/adr/0056) on the chat path, on a tiny model carrying
# Qwen3's real chat template. The input items are rendered as the chat
# conversation they stand for: the answer's input_tokens equal the chat
# API's prompt_tokens for the same turns, tool round trip and reasoning
# item included. Streamed events come numbered and in order, the closing
# one carrying the whole answer; refusals name the field (stored state
# above all). OpenAI's own client sends responses whole and streamed (the
# raw events and its stream helper), and assembles the pinned stream of a
# function-calling answer (tests/unit/resp-tool.sse).
#   responses.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: responses.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-responses-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
cfg=${IGNIS_QWEN3_TOKENIZER_CONFIG:-}
oai=${IGNIS_OPENAI_MODULE:-}
if [[ ! -f $cfg ]] || ! command -v node >/dev/null; then
	echo "skipped: the oracle is not installed (tools/install-oracle.sh)"
	exit 77
fi

m=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	--name qwen3-resp --chat-template "$cfg" 2>/dev/null || fail "mkmodel --chat-template"

step "the supervisor serves the API on $http"
"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 2048 --model-prefill-chunk 64 \
	>"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
wait_for 10 curl -sf "$http/ready" || fail "/ready never said ready"

post() {
	curl -s -o "$work/body" -w '%{http_code}' "$http$1" -H 'Content-Type: application/json' \
		-d "$2" >"$work/status"
	cat "$work/body"
}
status() { cat "$work/status"; }

tools='[{"type":"function","name":"get_weather","description":"The weather of a city, now.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":false}]'
oai_tools='[{"type":"function","function":{"name":"get_weather","description":"The weather of a city, now.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
plain='{"model":"qwen3-resp","max_output_tokens":16,"temperature":0,"instructions":"be brief","input":"weather in Paris?"}'
trip=$(jq -c --argjson t "$tools" '. + {tools: $t, input: [
	{role: "user", content: [{type: "input_text", text: "weather in Paris?"}]},
	{type: "reasoning", id: "rs_1", summary: [{type: "summary_text", text: "Look it up."}]},
	{type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}"},
	{type: "function_call_output", call_id: "call_1", output: "21C, sunny"},
	{role: "user", content: "thanks"}]}' <<<"$plain")
oai_plain='{"model":"qwen3-resp","max_tokens":16,"temperature":0,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather in Paris?"}]}'
oai_trip=$(jq -c --argjson t "$oai_tools" '. + {tools: $t, messages: (.messages + [
	{role: "assistant", content: "", reasoning_content: "Look it up.", tool_calls: [{id: "call_1",
	  type: "function", function: {name: "get_weather", arguments: "{\"city\":\"Paris\"}"}}]},
	{role: "tool", tool_call_id: "call_1", content: "21C, sunny"},
	{role: "user", content: "thanks"}])}' <<<"$oai_plain")

# the turn in progress: the tool's output last, so the template keeps the
# reasoning item (it drops reasoning before the last user text)
open=$(jq -c '.input |= .[:-1]' <<<"$trip")
oai_open=$(jq -c '.messages |= .[:-1]' <<<"$oai_trip")

step "one request model: the prompt is the chat API's, token for token"
for pair in plain trip open; do
	a=${!pair}
	o=oai_$pair
	o=${!o}
	want=$(post /v1/chat/completions "$o" | jq .usage.prompt_tokens)
	[[ $(status) == 200 && $want -gt 0 ]] || fail "chat: $(status) $(cat "$work/body")"
	got=$(post /v1/responses "$a")
	[[ $(status) == 200 ]] || fail "responses ($pair): $(status) $got"
	jq -e '.object == "response" and (.id | startswith("resp_")) and .model == "qwen3-resp" and
		(.status | IN("completed", "incomplete")) and .store == false and
		(.output | length) >= 1 and all(.output[]; .type | IN("message", "reasoning")) and
		.usage.output_tokens >= 1 and .usage.output_tokens <= 16 and
		.usage.total_tokens == .usage.input_tokens + .usage.output_tokens' <<<"$got" >/dev/null ||
		fail "response shape ($pair): $got"
	[[ $(jq .usage.input_tokens <<<"$got") == "$want" ]] ||
		fail "responses ($pair): $(jq .usage.input_tokens <<<"$got") input tokens, the chat API's $want"
done

step "the reasoning item is rendered: without it the prompt is shorter"
with=$(post /v1/responses "$(jq -c '.max_output_tokens = 1' <<<"$open")" | jq .usage.input_tokens)
without=$(post /v1/responses "$(jq -c '.max_output_tokens = 1 | del(.input[1])' <<<"$open")" | jq .usage.input_tokens)
((with > without)) || fail "the reasoning item added nothing ($with, $without)"

step "streamed: numbered events in order, the closing one the whole answer"
whole=$(post /v1/responses "$trip")
curl -sN "$http/v1/responses" -H 'Content-Type: application/json' \
	-d "$(jq -c '. + {stream: true}' <<<"$trip")" >"$work/sse"
grep '^event: ' "$work/sse" | sed 's/^event: //' >"$work/names"
sed -n 's/^data: //p' "$work/sse" >"$work/datas"
paste -d' ' "$work/names" <(jq -r .type "$work/datas") | awk '$1 != $2 {exit 1}' ||
	fail "event names and types differ: $(cat "$work/sse")"
jq -se '[.[].sequence_number] == [range(length)]' "$work/datas" >/dev/null || fail "sequence numbers"
[[ $(head -2 "$work/names" | tr '\n' ' ') == "response.created response.in_progress " ]] ||
	fail "the opening events: $(tr '\n' ' ' <"$work/names")"
closing=$(tail -1 "$work/datas")
[[ $(jq -r .type <<<"$closing") == response.$(jq -r 'if .status == "completed" then "completed" else "incomplete" end' <<<"$whole") ]] ||
	fail "the closing event: $closing"
[[ $(jq -c '.response.output | map(del(.id))' <<<"$closing") == "$(jq -c '.output | map(del(.id))' <<<"$whole")" ]] ||
	fail "streamed output differs: $closing vs $whole"
s_text=$(jq -sj '[.[] | select(.type == "response.output_text.delta") | .delta] | join("")' "$work/datas")
[[ $s_text == "$(jq -j '[.output[] | select(.type == "message") | .content[].text] | join("")' <<<"$whole")" ]] ||
	fail "the deltas differ from the whole text"

step "refusals name the field, in OpenAI's shape"
refuse() { # STATUS BODY PARAM WORDS
	local got
	got=$(post /v1/responses "$2")
	[[ $(status) == "$1" ]] || fail "not refused $1 ($(status)): $2 -> $got"
	jq -e --arg p "$3" '.error.param == $p and (.error.message | type) == "string"' <<<"$got" >/dev/null ||
		fail "param: $got"
	grep -qF -- "$4" <<<"$got" || fail "no '$4' in: $got"
}
refuse 400 "$(jq -c '. + {previous_response_id: "resp_1"}' <<<"$plain")" previous_response_id "keeps no responses"
refuse 400 "$(jq -c '. + {tool_choice: {type: "function", name: "rm"}}' <<<"$trip")" tool_choice "'tools' does not hold"
refuse 400 "$(jq -c '.input[3].call_id = "call_9"' <<<"$trip")" "input[3]" "answers no earlier function_call"
refuse 400 "$(jq -c '.tools = [{type: "web_search"}]' <<<"$plain")" tools "web_search"
refuse 400 "$(jq -c '. + {frequency_penalty: 1}' <<<"$plain")" frequency_penalty "not one of"
refuse 404 "$(jq -c '.model = "gpt-5"' <<<"$plain")" model "gpt-5"
refuse 413 "$(jq -c --arg s "$(printf 'word %.0s' {1..3000})" '.input = $s' <<<"$plain")" input context
got=$(post /v1/responses "$(jq -c '. + {store: true}' <<<"$plain")")
[[ $(status) == 200 && $(jq .store <<<"$got") == false ]] || fail "store true: $(status) $got"

step "forced calls (required and named): a function_call item, its arguments the schema's"
bounded='[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer"}},"required":["city","days"],"additionalProperties":false}},{"type":"function","name":"ls","parameters":{"type":"object","properties":{"path":{"enum":["/","/tmp"]}},"required":["path"],"additionalProperties":false}}]'
for choice in '"required"' '{"type":"function","name":"ls"}'; do
	got=$(post /v1/responses "$(jq -c --argjson t "$bounded" --argjson c "$choice" '. + {tools: $t,
		tool_choice: $c, parallel_tool_calls: false, max_output_tokens: 300, temperature: 0.8,
		reasoning: {effort: "none"},
		ignis: {seed: 4}} | .input = [{role: "system", content: "x"}, {role: "user", content: "go"}]' \
		<<<"$plain")")
	[[ $(status) == 200 ]] || fail "forced $choice: $got"
	jq -e --argjson c "$choice" '[.output[] | select(.type == "function_call")] as $f |
		($f | length) == 1 and ($c == "required" or $f[0].name == $c.name) and
		($f[0].arguments | fromjson) as $a |
		(if $f[0].name == "ls" then ($a.path | IN("/", "/tmp")) and ($a | keys) == ["path"]
		 else ($a.city | length) <= 8 and ($a.days | type) == "number" end)' \
		<<<"$got" >/dev/null || fail "forced $choice: $got"
done

step "structured output (text.format json_schema): the answer is the schema's"
got=$(post /v1/responses "$(jq -c '. + {text: {format: {type: "json_schema", name: "w", strict: true,
	schema: {type: "object", properties: {unit: {enum: ["C", "F"]}, t: {type: "integer"}},
	required: ["unit", "t"], additionalProperties: false}}}, max_output_tokens: 200,
	temperature: 0.8, reasoning: {effort: "none"}, ignis: {seed: 2}}' <<<"$plain")")
[[ $(status) == 200 ]] || fail "text.format: $got"
jq -e '[.output[] | select(.type == "message") | .content[] | select(.type == "output_text") | .text]
	| join("") | fromjson | (.unit | IN("C", "F")) and (.t | type) == "number" and (keys | length) == 2' \
	<<<"$got" >/dev/null || fail "text.format: $got"

step "OpenAI's own client"
if [[ -n $oai && -f $oai/package.json ]]; then
	node "$(dirname "$0")/responses-client.cjs" "$oai" "$http" qwen3-resp \
		"$(dirname "$0")/../unit/resp-tool.sse" || fail "the openai client"
else
	echo "   skipped: the openai package is not installed (tools/install-oracle.sh)"
fi
echo "responses: ok"
