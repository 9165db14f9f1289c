#!/usr/bin/env bash
# Integration: Anthropic's Messages API (POST /v1/messages and
# /v1/messages/count_tokens, docs/adr/0056) on the chat path, on a tiny
# model carrying Qwen3's real chat template. The Anthropic conversation is
# rendered as the OpenAI one it stands for: count_tokens and the answer's
# input equal the chat API's prompt_tokens for the same turns, tool round
# trip included. Refusals come in Anthropic's error shape with its types
# and statuses. Anthropic's own client sends messages whole and streamed
# (its stream helper's final message equal to the whole answer of the same
# seed), a tool round trip, count_tokens, and gets its errors. With
# synthetic weights the model calls no tool by itself: the tool_use blocks
# of an answer, whole and streamed, are test_anthropic's, and the client
# assembles the stream test_anthropic pins (tests/unit/anth-tool.sse).
#   anthropic.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: anthropic.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-anthropic-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
cfg=${IGNIS_QWEN3_TOKENIZER_CONFIG:-}
sdk=${IGNIS_ANTHROPIC_MODULE:-}
if [[ ! -f $cfg ]] || ! command -v node >/dev/null; then
	echo "skipped: the oracle is not installed (tools/install-oracle.sh)"
	exit 77
fi

m=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	--name qwen3-anth --chat-template "$cfg" 2>/dev/null || fail "mkmodel --chat-template"

step "the supervisor serves the API on $http"
"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 2048 --model-prefill-chunk 64 \
	>"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
wait_for 10 curl -sf "$http/ready" || fail "/ready never said ready"

post() { # PATH BODY [CURL ARGS...]
	local path=$1 body=$2
	shift 2
	curl -s -o "$work/body" -w '%{http_code}' "$http$path" -H 'Content-Type: application/json' \
		-H 'anthropic-version: 2023-06-01' -H 'x-api-key: none' "$@" -d "$body" >"$work/status"
	cat "$work/body"
}
status() { cat "$work/status"; }

tools='[{"name":"get_weather","description":"The weather of a city, now.","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]'
oai_tools='[{"type":"function","function":{"name":"get_weather","description":"The weather of a city, now.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
plain='{"model":"qwen3-anth","max_tokens":16,"temperature":0,"system":"be brief","messages":[{"role":"user","content":"weather in Paris?"}]}'
trip=$(jq -c --argjson t "$tools" '. + {tools: $t, messages: (.messages + [
	{role: "assistant", content: [{type: "thinking", thinking: "Look it up.", signature: "x"},
	  {type: "tool_use", id: "toolu_1", name: "get_weather", input: {city: "Paris"}}]},
	{role: "user", content: [{type: "tool_result", tool_use_id: "toolu_1",
	  content: "21C, sunny"}, {type: "text", text: "thanks"}]}])}' <<<"$plain")
# the same turns as OpenAI's chat API takes them
oai_plain='{"model":"qwen3-anth","max_tokens":16,"temperature":0,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather in Paris?"}]}'
oai_trip=$(jq -c --argjson t "$oai_tools" '. + {tools: $t, messages: (.messages + [
	{role: "assistant", content: "", reasoning_content: "Look it up.", tool_calls: [{id: "toolu_1",
	  type: "function", function: {name: "get_weather", arguments: "{\"city\":\"Paris\"}"}}]},
	{role: "tool", tool_call_id: "toolu_1", content: "21C, sunny"},
	{role: "user", content: "thanks"}])}' <<<"$oai_plain")

# the turn in progress: the tool's answer last, so the template keeps the
# assistant's reasoning (it drops reasoning before the last user text)
open=$(jq -c '.messages[2].content |= [.[0]]' <<<"$trip")
oai_open=$(jq -c '.messages |= .[:-1]' <<<"$oai_trip")

step "one request model: the prompt is the chat API's, token for token"
for pair in plain trip open; do
	a=${!pair}
	o=oai_$pair
	o=${!o}
	want=$(post /v1/chat/completions "$o" | jq .usage.prompt_tokens)
	[[ $(status) == 200 && $want -gt 0 ]] || fail "chat: $(status) $(cat "$work/body")"
	got=$(post /v1/messages "$a")
	[[ $(status) == 200 ]] || fail "messages ($pair): $(status) $got"
	jq -e '.type == "message" and .role == "assistant" and (.id | startswith("msg_")) and
		.model == "qwen3-anth" and (.stop_reason | IN("end_turn", "max_tokens")) and
		.stop_sequence == null and (.content | length) >= 1 and
		all(.content[]; .type | IN("text", "thinking")) and
		.usage.output_tokens >= 1 and .usage.output_tokens <= 16' <<<"$got" >/dev/null ||
		fail "message shape ($pair): $got"
	n=$(jq '.usage.input_tokens + .usage.cache_read_input_tokens' <<<"$got")
	[[ $n == "$want" ]] || fail "messages ($pair): $n input tokens, the chat API's $want"
	got=$(post /v1/messages/count_tokens "$(jq -c 'del(.max_tokens, .temperature)' <<<"$a")")
	[[ $(status) == 200 ]] || fail "count_tokens ($pair): $(status) $got"
	[[ $(jq -c . <<<"$got") == "{\"input_tokens\":$want}" ]] ||
		fail "count_tokens ($pair): $got, the chat API's $want"
done

step "the thinking sent back is rendered: without it the prompt is shorter"
with=$(post /v1/messages/count_tokens "$(jq -c 'del(.max_tokens)' <<<"$open")" | jq .input_tokens)
without=$(post /v1/messages/count_tokens "$(jq -c 'del(.max_tokens) | .messages[1].content |= [.[1]]' <<<"$open")" | jq .input_tokens)
((with > without)) || fail "the thinking block added nothing ($with, $without)"

step "streamed: Anthropic's events in order, the same text as the whole answer"
whole=$(post /v1/messages "$trip")
curl -sN "$http/v1/messages" -H 'Content-Type: application/json' \
	-d "$(jq -c '. + {stream: true}' <<<"$trip")" >"$work/sse"
grep '^event: ' "$work/sse" | sed 's/^event: //' >"$work/names"
sed -n 's/^data: //p' "$work/sse" >"$work/datas"
[[ $(wc -l <"$work/names") == $(wc -l <"$work/datas") ]] || fail "an event without data: $(cat "$work/sse")"
# each event's name is its data's type
paste -d' ' "$work/names" <(jq -r .type "$work/datas") | awk '$1 != $2 {exit 1}' ||
	fail "event names and types differ: $(cat "$work/sse")"
[[ $(head -1 "$work/names") == message_start && $(tail -2 "$work/names" | tr '\n' ' ') == "message_delta message_stop " ]] ||
	fail "event order: $(tr '\n' ' ' <"$work/names")"
s_text=$(jq -sj '[.[] | select(.type == "content_block_delta") | .delta.text // empty] | join("")' "$work/datas")
s_think=$(jq -sj '[.[] | select(.type == "content_block_delta") | .delta.thinking // empty] | join("")' "$work/datas")
[[ $s_text == "$(jq -j '[.content[] | select(.type == "text") | .text] | join("")' <<<"$whole")" ]] ||
	fail "streamed text differs: '$s_text' vs $whole"
[[ $s_think == "$(jq -j '[.content[] | select(.type == "thinking") | .thinking] | join("")' <<<"$whole")" ]] ||
	fail "streamed thinking differs: '$s_think' vs $whole"
[[ $(jq -s -r '[.[] | select(.type == "message_delta")][0].delta.stop_reason' "$work/datas") == \
	"$(jq -r .stop_reason <<<"$whole")" ]] || fail "stop_reason differs"

step "refusals in Anthropic's shape, naming the field"
refuse() { # STATUS PATH BODY ERROR_TYPE WORDS
	local got
	got=$(post "$2" "$3")
	[[ $(status) == "$1" ]] || fail "not refused $1 ($(status)): $3 -> $got"
	jq -e --arg t "$4" '.type == "error" and .error.type == $t and (.error.message | type) == "string"' \
		<<<"$got" >/dev/null || fail "shape: $got"
	grep -qF -- "$5" <<<"$got" || fail "no '$5' in: $got"
}
refuse 400 /v1/messages "$(jq -c 'del(.max_tokens)' <<<"$plain")" invalid_request_error max_tokens
refuse 400 /v1/messages "$(jq -c '. + {frequency_penalty: 1}' <<<"$plain")" invalid_request_error frequency_penalty
refuse 400 /v1/messages "$(jq -c '. + {temperature: 1.5}' <<<"$plain")" invalid_request_error temperature
refuse 400 /v1/messages "$(jq -c '. + {tool_choice: {type: "tool", name: "rm"}}' <<<"$trip")" invalid_request_error "'tools' does not hold"
refuse 400 /v1/messages "$(jq -c '.messages[2].content[0].tool_use_id = "toolu_9"' <<<"$trip")" invalid_request_error "answers no tool_use block"
refuse 400 /v1/messages "$(jq -c '.messages[0].role = "system"' <<<"$plain")" invalid_request_error "messages[0].role"
refuse 400 /v1/messages "$(jq -c '.messages[0].content = [{type: "image", source: {}}]' <<<"$plain")" invalid_request_error "'image' block"
refuse 400 /v1/messages "$(jq -c '.tools = [{type: "web_search_20250305", name: "web_search"}]' <<<"$plain")" invalid_request_error "web_search"
refuse 400 /v1/messages "$(jq -c '.thinking = {type: "sometimes"}' <<<"$plain")" invalid_request_error thinking
refuse 400 /v1/messages '{"model": ' invalid_request_error "not a JSON object"
refuse 404 /v1/messages "$(jq -c '.model = "claude-sonnet-4"' <<<"$plain")" not_found_error claude-sonnet-4
refuse 400 /v1/messages/count_tokens "$(jq -c 'del(.messages)' <<<"$plain")" invalid_request_error messages
got=$(curl -s -o /dev/null -w '%{http_code}' "$http/v1/messages")
[[ $got == 405 ]] || fail "GET /v1/messages: $got"

step "thinking disabled: the template's enable_thinking off, as the chat API's"
want=$(post /v1/chat/completions "$(jq -c '. + {chat_template_kwargs: {enable_thinking: false}}' <<<"$oai_plain")" | jq .usage.prompt_tokens)
got=$(post /v1/messages/count_tokens "$(jq -c '. + {thinking: {type: "disabled"}}' <<<"$plain")" | jq .input_tokens)
[[ $got == "$want" && $want -gt 0 ]] || fail "thinking disabled: $got tokens, the chat API's $want"

step "forced calls (tool_choice any and tool): a tool_use block, its input the schema's"
bounded='[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer"}},"required":["city","days"],"additionalProperties":false}},{"name":"ls","input_schema":{"type":"object","properties":{"path":{"enum":["/","/tmp"]}},"required":["path"],"additionalProperties":false}}]'
for choice in '{"type":"any","disable_parallel_tool_use":true}' \
	'{"type":"tool","name":"ls","disable_parallel_tool_use":true}'; do
	got=$(post /v1/messages "$(jq -c --argjson t "$bounded" --argjson c "$choice" '. + {tools: $t,
		tool_choice: $c, thinking: {type: "disabled"}, max_tokens: 300, temperature: 0.8,
		ignis: {seed: 4}}' <<<"$plain")")
	[[ $(status) == 200 ]] || fail "forced $choice: $got"
	jq -e --argjson c "$choice" '.stop_reason == "tool_use" and
		([.content[] | select(.type == "tool_use")] | length) == 1 and
		([.content[] | select(.type == "tool_use")][0] as $u |
		 ($c.type == "any" or $u.name == $c.name) and
		 (if $u.name == "ls" then ($u.input.path | IN("/", "/tmp")) and ($u.input | keys) == ["path"]
		  else ($u.input.city | type) == "string" and ($u.input.city | length) <= 8 and
		   ($u.input.days | type) == "number" and ($u.input | keys) == ["city", "days"] end))' \
		<<<"$got" >/dev/null || fail "forced $choice: $got"
done

step "Anthropic's own client"
if [[ -n $sdk && -f $sdk/package.json ]]; then
	node "$(dirname "$0")/anthropic-client.cjs" "$sdk" "$http" qwen3-anth "$tools" \
		"$(dirname "$0")/../unit/anth-tool.sse" ||
		fail "the @anthropic-ai/sdk client"
else
	echo "   skipped: @anthropic-ai/sdk is not installed (tools/install-oracle.sh)"
fi
echo "anthropic: ok"
