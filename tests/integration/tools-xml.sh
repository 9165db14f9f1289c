#!/usr/bin/env bash
# Integration: tools in the XML form (docs/adr/0060) through OpenAI's chat
# API on a tiny model that carries Qwen3.5's real chat template (from
# llama.cpp's source at the release we pin: tools/install-oracle.sh). The
# prompt with tools, calls in the XML form and tool answers is the
# template's own text: its token count is that of the same conversation
# rendered by Hugging Face's Jinja engine (tests/unit/jinja-render.cjs,
# the calls' arguments as objects, as llama.cpp's and vLLM's servers pass
# them) and tokenized by the file's vocabulary. What the form cannot
# constrain is a 400 naming the parameter. Forced calls in this form, for
# this template and Qwen3-Coder's, are tool-conformance.sh's.
#   tools-xml.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: tools-xml.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
voc=$build/tools/ignis-vocab
work=$(mktemp -d /tmp/ignis-tools-xml-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
tmpl=${IGNIS_LLAMA_TEMPLATES:-}/Qwen3.5-4B.jinja
jinja=${IGNIS_JINJA_MODULE:-}
render=$(dirname "$0")/../unit/jinja-render.cjs
if [[ ! -f $tmpl || ! -f $jinja ]] || ! command -v node >/dev/null; then
	echo "skipped: the oracle is not installed (tools/install-oracle.sh)"
	exit 77
fi

m=$work/q35.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	--name qwen35-tools --chat-template "$tmpl" 2>/dev/null || fail "mkmodel --chat-template"

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
stream() {
	curl -sN "$http$1" -H 'Content-Type: application/json' -d "$2" |
		sed -n 's/^data: //p' | grep -v '^\[DONE\]$'
}
# the token count of BODY's conversation as the template's Jinja text
# renders it (the generation prompt on), in the file's vocabulary
jinja_tokens() {
	jq -c '[{messages: (.messages | map(.content //= "")), tools: .tools,
		add_generation_prompt: true, object_arguments: true}
		+ (if .chat_template_kwargs.enable_thinking == false then {enable_thinking: false} else {} end)]' \
		<<<"$1" >"$work/case.json"
	node "$render" "$jinja" "$tmpl" "$work/case.json" 2>"$work/node.err" | jq -j '.[0]' >"$work/rendered.txt" ||
		fail "the Jinja engine: $(cat "$work/node.err")"
	"$voc" encode "$m" --parse-special <"$work/rendered.txt" | wc -w
}

tools='[{"type":"function","function":{"name":"get_weather","description":"The weather of a city, now.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"its name"},"days":{"type":"integer"},"unit":{"enum":["C","F"]}},"required":["city"]}}},{"type":"function","function":{"name":"ls","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]'
plain='{"model":"qwen35-tools","max_tokens":16,"temperature":0,"seed":3,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather in Paris?"}]}'
with=$(jq -c --argjson t "$tools" '. + {tools: $t}' <<<"$plain")
trip=$(jq -c --argjson t "$tools" '. + {tools: $t, messages: (.messages + [
	{role: "assistant", content: null, tool_calls: [{id: "call_1", type: "function",
	 function: {name: "get_weather", arguments: "{\"city\": \"Paris\\nFrance\", \"days\": 2, \"unit\": \"C\"}"}},
	 {id: "call_2", type: "function", function: {name: "ls", arguments: "{}"}}]},
	{role: "tool", tool_call_id: "call_1", content: "21C, sunny"},
	{role: "tool", tool_call_id: "call_2", content: "a.txt"}])}' <<<"$plain")
off=$(jq -c '. + {chat_template_kwargs: {enable_thinking: false}}' <<<"$trip")

step "the tools and XML calls are the template's: the Jinja engine's prompt, token for token"
for body in "$plain" "$with" "$trip" "$off"; do
	got=$(post /v1/chat/completions "$body")
	[[ $(status) == 200 ]] || fail "chat: $(status) $got"
	n=$(jq .usage.prompt_tokens <<<"$got")
	want=$(jinja_tokens "$body")
	[[ $n == "$want" ]] || fail "prompt: $n tokens, the template's $want:
$(cat "$work/rendered.txt")"
done

# forced calls (validated by ajv, whole and streamed, and sent back) are
# tool-conformance.sh's, for this template and Qwen3-Coder's alike
schema='{"type":"object","properties":{"unit":{"enum":["C","F"]}},"required":["unit"]}'
forced=$(jq -c --argjson s "$schema" '. + {chat_template_kwargs: {enable_thinking: false},
	tools: [{type: "function", function: {name: "pick", parameters: $s}}],
	tool_choice: {type: "function", function: {name: "pick"}}}' <<<"$plain")

step "what the XML form cannot constrain: 400 naming the parameter"
# (docs/adr/0062) a raw text bounded by a pattern cannot hold '<'
bad=$(jq -c '.tools[0].function.parameters.properties.unit = {type: "string", pattern: "^<[a-z]+>$"}' <<<"$forced")
got=$(post /v1/chat/completions "$bad")
[[ $(status) == 400 ]] || fail "a pattern that needs '<' constrained: $(status) $got"
jq -e '.error.param == "tools"' <<<"$got" >/dev/null || fail "param: $got"
grep -qF "parameter 'unit'" <<<"$got" || fail "no parameter named: $got"
echo "tools-xml: ok"
