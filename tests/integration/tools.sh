#!/usr/bin/env bash
# Integration: tools and reasoning through OpenAI's chat API (docs/adr/0054)
# on a tiny model that carries Qwen3's real chat template (ignis-mkmodel
# --chat-template, from the oracle's tokenizer_config.json). The prompt
# with tools, calls and tool answers is the template's own text: its token
# count is that of the same conversation rendered by Hugging Face's Jinja
# engine (tests/unit/jinja-render.cjs) and tokenized by the file's
# vocabulary. Whole and streamed answers agree; bad tools, a tool answer to
# no call and a tool_choice naming no tool get a 400 naming the field; OpenAI's
# own client sends tools and a tool round trip, whole and streamed (its
# stream helper assembling the chunks). A model whose template has no tool
# calls refuses tools. With synthetic weights the model calls no tool by
# itself: the parse of calls is test_outparse's, the forced calls
# constrained.sh's.
#   tools.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: tools.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
voc=$build/tools/ignis-vocab
work=$(mktemp -d /tmp/ignis-tools-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
cfg=${IGNIS_QWEN3_TOKENIZER_CONFIG:-}
jinja=${IGNIS_JINJA_MODULE:-}
oai=${IGNIS_OPENAI_MODULE:-}
render=$(dirname "$0")/../unit/jinja-render.cjs
if [[ ! -f $cfg || ! -f $jinja ]] || ! command -v node >/dev/null; then
	echo "skipped: the oracle is not installed (tools/install-oracle.sh)"
	exit 77
fi

m=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	--name qwen3-tools --chat-template "$cfg" 2>/dev/null || fail "mkmodel --chat-template"

step "the supervisor serves the API on $http"
# prefill chunks of 64 tokens: the prompts here are 1,000 byte tokens, and
# short rounds keep the test quick on a loaded machine
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
	# (a null content is "", as we and the peers take it: the template
	# itself cannot test a null for "</think>")
	jq -c '[{messages: (.messages | map(.content //= "")), tools: .tools,
		add_generation_prompt: true}]' <<<"$1" \
		>"$work/case.json"
	node "$render" "$jinja" "$cfg" "$work/case.json" 2>"$work/node.err" | jq -j '.[0]' >"$work/rendered.txt" ||
		fail "the Jinja engine: $(cat "$work/node.err")"
	"$voc" encode "$m" --parse-special <"$work/rendered.txt" | wc -w
}

tools='[{"type":"function","function":{"name":"get_weather","description":"The weather of a city, now.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"its name"},"days":{"type":"integer","default":1}},"required":["city"]}}},{"type":"function","function":{"name":"ls","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]'
plain='{"model":"qwen3-tools","max_tokens":16,"temperature":0,"seed":3,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather in Paris?"}]}'
with=$(jq -c --argjson t "$tools" '. + {tools: $t}' <<<"$plain")
trip=$(jq -c --argjson t "$tools" '. + {tools: $t, messages: (.messages + [
	{role: "assistant", content: null, tool_calls: [{id: "call_1", type: "function",
	 function: {name: "get_weather", arguments: "{\"city\": \"Paris\"}"}},
	 {id: "call_2", type: "function", function: {name: "ls", arguments: "{}"}}]},
	{role: "tool", tool_call_id: "call_1", content: "21C, sunny"},
	{role: "tool", tool_call_id: "call_2", content: "a.txt"}])}' <<<"$plain")

step "the tools are announced by the template: the Jinja engine's prompt, token for token"
got=$(post /v1/chat/completions "$plain")
[[ $(status) == 200 ]] || fail "plain chat: $(status) $got"
n0=$(jq .usage.prompt_tokens <<<"$got")
[[ $n0 == $(jinja_tokens "$plain") ]] || fail "plain prompt: $n0 tokens, the template's $(jinja_tokens "$plain")"
for body in "$with" "$trip"; do
	got=$(post /v1/chat/completions "$body")
	[[ $(status) == 200 ]] || fail "chat with tools: $(status) $got"
	n=$(jq .usage.prompt_tokens <<<"$got")
	want=$(jinja_tokens "$body")
	[[ $n == "$want" ]] || fail "prompt with tools: $n tokens, the template's $want:
$(cat "$work/rendered.txt")"
	((n > n0)) || fail "the tools added nothing to the prompt ($n, $n0)"
	jq -e '.choices[0].message.role == "assistant" and
		(.choices[0].finish_reason | IN("stop", "length", "tool_calls")) and
		((.choices[0].message.tool_calls // []) | length) == 0 or
		.choices[0].finish_reason == "tool_calls"' <<<"$got" >/dev/null ||
		fail "answer shape: $got"
done

step "streamed and whole alike: the same content, reasoning and finish"
whole=$(post /v1/chat/completions "$trip")
chunks=$(stream /v1/chat/completions "${trip%\}},\"stream\":true}")
jq -se 'all(.[]; .object == "chat.completion.chunk")' <<<"$chunks" >/dev/null ||
	fail "a chunk is not a chat.completion.chunk: $chunks"
c_stream=$(jq -sj '[.[].choices[0].delta.content // empty] | join("")' <<<"$chunks")
r_stream=$(jq -sj '[.[].choices[0].delta.reasoning_content // empty] | join("")' <<<"$chunks")
[[ $c_stream == "$(jq -j '.choices[0].message.content // ""' <<<"$whole")" ]] ||
	fail "streamed content differs: '$c_stream' vs $whole"
[[ $r_stream == "$(jq -j '.choices[0].message.reasoning_content // ""' <<<"$whole")" ]] ||
	fail "streamed reasoning differs: '$r_stream' vs $whole"
[[ $(jq -s -r '[.[].choices[0].finish_reason // empty] | last' <<<"$chunks") == \
	"$(jq -r '.choices[0].finish_reason' <<<"$whole")" ]] || fail "finish differs"

step "n 2 with a named tool_choice: a grammar a choice, each choice the request with seed + i"
# (docs/adr/0059) each choice's call parsed apart, its arguments an object
# of the schema's; whole and streamed alike, the deltas by choice index
# (strings bounded, so that a call ends well within max_tokens)
short='[{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}}}]'
forced=$(jq -c --argjson t "$short" '. + {tools: $t, max_tokens: 200, temperature: 1,
	parallel_tool_calls: false, tool_choice: {type: "function", function: {name: "get_weather"}}}' <<<"$plain")
calls='[.tool_calls[] | [.function.name, (.function.arguments | fromjson | keys)]]'
nwhole=$(post /v1/chat/completions "$(jq -c '. + {seed: 9, n: 2}' <<<"$forced")")
[[ $(status) == 200 ]] || fail "n 2 forced: $(status) $nwhole"
for i in 0 1; do
	one=$(post /v1/chat/completions "$(jq -c --argjson s $((9 + i)) '. + {seed: $s}' <<<"$forced")")
	[[ $(jq -c ".choices[$i].message.tool_calls | map(.function)" <<<"$nwhole") == \
		"$(jq -c '.choices[0].message.tool_calls | map(.function)' <<<"$one")" ]] ||
		fail "n 2: choice $i's calls differ from seed $((9 + i)) alone: $nwhole vs $one"
	[[ $(jq -c ".choices[$i].message | $calls" <<<"$nwhole") == '[["get_weather",["city"]]]' ]] ||
		fail "n 2: choice $i's call is not get_weather with its schema's arguments: $nwhole"
	[[ $(jq -r ".choices[$i].finish_reason" <<<"$nwhole") == tool_calls ]] ||
		fail "n 2: choice $i's finish is not tool_calls: $nwhole"
done
[[ $(jq -r '[.choices[].message.tool_calls[].id] | unique | length' <<<"$nwhole") == 2 ]] ||
	fail "n 2: the calls' ids are not apart: $nwhole"
nchunks=$(stream /v1/chat/completions "$(jq -c '. + {seed: 9, n: 2, stream: true}' <<<"$forced")")
for i in 0 1; do
	[[ $(jq -sj --argjson i $i '[.[].choices[] | select(.index == $i) | .delta.tool_calls[]?.function.arguments // empty] | join("")' <<<"$nchunks") == \
		"$(jq -j ".choices[$i].message.tool_calls[0].function.arguments" <<<"$nwhole")" ]] ||
		fail "n 2 streamed: choice $i's arguments differ from the whole answer's"
done

step "bad tools, an answer to no call, a choice that cannot be: 400 naming the field"
refuse() { # BODY PARAM WORDS
	local got
	got=$(post /v1/chat/completions "$1")
	[[ $(status) == 400 ]] || fail "not refused ($(status)): $1 -> $got"
	jq -e --arg p "$2" '.error.param == $p' <<<"$got" >/dev/null || fail "param: $got"
	grep -qF -- "$3" <<<"$got" || fail "no '$3' in: $got"
}
refuse "$(jq -c '. + {tool_choice: {type: "function", function: {name: "rm"}}}' <<<"$with")" \
	tool_choice "which 'tools' does not hold"
refuse "$(jq -c '. + {tool_choice: "required", response_format: {type: "json_object"}}' <<<"$with")" \
	response_format "cannot be both"
refuse "$(jq -c '.tools[0].function.name = "no spaces allowed"' <<<"$with")" tools "1 to 64"
refuse "$(jq -c '.messages += [{role: "tool", tool_call_id: "call_9", content: "x"}]' <<<"$with")" \
	messages.tool_call_id "which no earlier assistant message made"

step "OpenAI's own client: tools and a round trip, whole and streamed"
if [[ -n $oai && -f $oai/package.json ]]; then
	node - "$oai" "$http" "$trip" <<'JS' || fail "the openai client"
const [mod, base, body] = process.argv.slice(2);
const OpenAI = require(mod).default ?? require(mod);
const url = /^https?:/.test(base) ? base : "http://" + base;
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none" });
(async () => {
  const req = JSON.parse(body);
  const whole = await client.chat.completions.create(req);
  const msg = whole.choices[0].message;
  if (msg.role !== "assistant" || typeof whole.usage.prompt_tokens !== "number")
    throw new Error("whole: " + JSON.stringify(whole));
  const s = client.chat.completions.stream({ ...req, stream: true });
  const done = await s.finalChatCompletion();
  const m2 = done.choices[0].message;
  if ((m2.content ?? "") !== (msg.content ?? ""))
    throw new Error("streamed content differs: " + JSON.stringify([m2, msg]));
  if ((m2.tool_calls ?? []).length !== (msg.tool_calls ?? []).length)
    throw new Error("streamed calls differ");
})().catch((e) => { console.error(String(e)); process.exit(1); });
JS
else
	echo "   skipped: the openai package is not installed (tools/install-oracle.sh)"
fi

step "a template without tool calls refuses tools, by name"
kill "$sup_pid"; wait "$sup_pid" 2>/dev/null; sup_pid=
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 \
	-o "$work/plain.gguf" --name qwen3-tools 2>/dev/null || fail "mkmodel"
: >"$events"
"$sup" start --runtime-dir "$rt" --model "$work/plain.gguf" --model-max-context 1024 >"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no second start"
wait_for 10 curl -sf "$http/ready" || fail "/ready never said ready"
refuse "$with" tools "has no tool calls"
echo "tools: ok"
