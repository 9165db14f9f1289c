#!/usr/bin/env bash
# Integration: log-probabilities of generated tokens through the real
# processes (docs/adr/0053), on a model file in llama.cpp's qwen3 layout:
# chat and completions, whole and streamed, with curl, and chat with
# OpenAI's own client (logprobs-client.cjs). Checked: every logprob <= 0,
# top lists sorted descending with exp summing to at most 1, the sampled
# token's logprob equal to its entry in the top list when it is there, the
# greedy token the top one, streamed and whole answers giving the same
# logprobs bit for bit, and the refusals naming the field.
#   logprobs.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: logprobs.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-logprobs-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND

m=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	--name qwen3-tiny 2>/dev/null || fail "mkmodel"

step "the supervisor serves the API on $http"
"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 1024 >"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
wait_for 10 curl -sf "$http/ready" || fail "/ready never said ready"

post() {
	curl -s -o "$work/body" -w '%{http_code}' "$http$1" -H 'Content-Type: application/json' \
		-d "$2" >"$work/status"
	cat "$work/body"
}
status() { cat "$work/status"; }
# the chunks of a stream, one JSON a line (no [DONE], no comments)
stream() {
	curl -sN "$http$1" -H 'Content-Type: application/json' -d "$2" |
		sed -n 's/^data: //p' | grep -v '^\[DONE\]$'
}

# The checks every chat logprobs list passes: `content` items of
# {token, logprob, bytes, top_logprobs}, as many as completion_tokens.
chat_ok='
	def sorted_desc: . as $a | [range(1; length)] | all($a[.-1] >= $a[.]);
	.choices[0].logprobs.content as $c
	| ($c | length) == .usage.completion_tokens
	and all($c[]; .logprob <= 0 and (.bytes | type) == "array" and (.token | type) == "string"
		and ([.top_logprobs[].logprob] | sorted_desc)
		and all(.top_logprobs[]; .logprob <= 0)
		and ([.top_logprobs[].logprob | exp] | add // 0) <= 1.000000001
		and (.logprob as $lp | .bytes as $b
			| all(.top_logprobs[]; .bytes != $b or .logprob == $lp)))'

for t in "0 5" "0.9 20" "1.3 0"; do
	set -- $t
	temp=$1 top=$2
	step "chat: temperature $temp, top_logprobs $top, whole and streamed alike"
	body="{\"model\":\"qwen3-tiny\",\"max_tokens\":24,\"temperature\":$temp,\"seed\":11,\"logprobs\":true,\"top_logprobs\":$top,\"messages\":[{\"role\":\"user\",\"content\":\"tell me a story\"}]}"
	got=$(post /v1/chat/completions "$body")
	[[ $(status) == 200 ]] || fail "chat logprobs: $(status) $got"
	jq -e "$chat_ok" <<<"$got" >/dev/null || fail "chat logprobs do not hold: $got"
	jq -e --argjson k "$top" 'all(.choices[0].logprobs.content[]; (.top_logprobs | length) == $k)' \
		<<<"$got" >/dev/null || fail "a top list is not $top long: $got"
	# the text is the tokens' bytes (a tiny model's bytes may not be whole
	# characters: compared as bytes where the text is valid)
	if [[ $temp == 0 ]]; then
		jq -e 'all(.choices[0].logprobs.content[]; .bytes == .top_logprobs[0].bytes
			and .logprob == .top_logprobs[0].logprob)' <<<"$got" >/dev/null ||
			fail "greedy did not pick the likeliest token: $got"
	fi
	whole=$(jq -c '[.choices[0].logprobs.content[] | [.logprob, .bytes, [.top_logprobs[] | [.logprob, .bytes]]]]' <<<"$got")
	streamed=$(stream /v1/chat/completions "${body%\}},\"stream\":true}" |
		jq -sc '[.[].choices[0] | select(.logprobs != null) | .logprobs.content[]
			| [.logprob, .bytes, [.top_logprobs[] | [.logprob, .bytes]]]]')
	[[ $whole == "$streamed" ]] || fail "streamed logprobs differ from the whole answer's:
$whole
$streamed"
	# each chunk's logprobs are those of the tokens whose text it carries
	# (not checkable where bytes are not whole characters: a lone lead byte
	# is held, then written as U+FFFD with the next token's text)
	stream /v1/chat/completions "${body%\}},\"stream\":true}" |
		jq -se '[.[].choices[0] | select(.logprobs != null)]
			| all([.logprobs.content[].bytes[]] as $bs
				| any($bs[]; . >= 128 or . == 0)
				  or ((.delta.content // "") | explode | any(. == 65533))
				  or ($bs | implode) == (.delta.content // ""))' \
			>/dev/null ||
		fail "a chunk's logprobs are not its text's tokens"
done

step "completions: logprobs N, whole and streamed alike"
body='{"model":"qwen3-tiny","prompt":"Once upon","max_tokens":16,"temperature":0,"logprobs":3}'
got=$(post /v1/completions "$body")
[[ $(status) == 200 ]] || fail "completions logprobs: $(status) $got"
jq -e '.choices[0].logprobs as $l
	| ($l.tokens | length) == .usage.completion_tokens
	and ($l.token_logprobs | length) == ($l.tokens | length)
	and ($l.text_offset | length) == ($l.tokens | length)
	and all($l.token_logprobs[]; . <= 0)
	and all($l.top_logprobs[]; length <= 3 and ([.[] | exp] | add) <= 1.000000001)
	and ([range(0; $l.tokens | length)] | all(. as $i | $l.token_logprobs[$i] == ([$l.top_logprobs[$i][]] | max)))
	and $l.text_offset[0] == 0 and ([range(1; $l.text_offset | length)] | all(. as $i | $l.text_offset[$i] >= $l.text_offset[$i - 1]))' \
	<<<"$got" >/dev/null || fail "completions logprobs do not hold: $got"
whole=$(jq -c '.choices[0].logprobs.token_logprobs' <<<"$got")
streamed=$(stream /v1/completions "${body%\}},\"stream\":true}" |
	jq -sc '[.[].choices[0] | select(.logprobs != null) | .logprobs.token_logprobs[]]')
[[ $whole == "$streamed" ]] || fail "streamed completion logprobs differ: $whole vs $streamed"

step "without logprobs: null, as before"
got=$(post /v1/chat/completions '{"model":"qwen3-tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}')
jq -e '.choices[0].logprobs == null' <<<"$got" >/dev/null || fail "logprobs not null: $got"

step "refusals name the field and what is accepted"
refused() { # PATH BODY PARAM WORDS
	got=$(post "$1" "$2")
	[[ $(status) == 400 ]] || fail "$2: status $(status): $got"
	jq -e --arg p "$3" --arg w "$4" '.error.param == $p and (.error.message | contains($w))' \
		<<<"$got" >/dev/null || fail "$2: $got"
}
u='"messages":[{"role":"user","content":"hi"}]'
refused /v1/chat/completions "{\"model\":\"qwen3-tiny\",$u,\"logprobs\":true,\"top_logprobs\":21}" \
	top_logprobs "from 0 to 20"
refused /v1/chat/completions "{\"model\":\"qwen3-tiny\",$u,\"top_logprobs\":3}" \
	top_logprobs '"logprobs": true'
refused /v1/completions '{"model":"qwen3-tiny","prompt":"a","logprobs":21}' logprobs "from 0 to 20"
refused /v1/completions '{"model":"qwen3-tiny","prompt":"a","echo":true}' echo "log-probabilities"
refused /v1/chat/completions "{\"model\":\"qwen3-tiny\",$u,\"logprobs\":true,\"n\":17}" n "an integer 1 to 16"

step "n 2: each choice's logprobs those of the request with n 1 and seed + i, whole and streamed"
for path in /v1/chat/completions /v1/completions; do
	if [[ $path == /v1/completions ]]; then
		b='"prompt":"tell me","logprobs":3' sel='[.logprobs.tokens, .logprobs.token_logprobs]'
	else
		b="$u,\"logprobs\":true,\"top_logprobs\":3" sel='[.logprobs.content[] | [.logprob, .bytes, [.top_logprobs[].logprob]]]'
	fi
	nb="{\"model\":\"qwen3-tiny\",$b,\"max_tokens\":12,\"temperature\":1.1"
	got=$(post $path "$nb,\"seed\":21,\"n\":2}")
	[[ $(status) == 200 ]] || fail "$path n 2 logprobs: $(status) $got"
	for i in 0 1; do
		one=$(post $path "$nb,\"seed\":$((21 + i))}")
		[[ $(jq -c ".choices[$i] | $sel" <<<"$got") == "$(jq -c ".choices[0] | $sel" <<<"$one")" ]] ||
			fail "$path n 2: choice $i's logprobs differ from seed $((21 + i)) alone"
		[[ $(jq -c ".choices[$i] | $sel" <<<"$got") != '[[],[]]' && $(jq -c ".choices[$i] | $sel" <<<"$got") != '[]' ]] ||
			fail "$path n 2: choice $i has no logprobs"
	done
done

mod=${IGNIS_OPENAI_MODULE:-}
if [[ -n $mod && -d $mod ]] && command -v node >/dev/null; then
	step "OpenAI's client: chat logprobs whole and streamed"
	node "$(dirname "$0")/logprobs-client.cjs" "$mod" "$http" qwen3-tiny ||
		fail "the openai client's logprobs checks"
else
	echo "-- skipped: OpenAI's npm client (IGNIS_OPENAI_MODULE) or node is not there"
fi

"$sup" stop --runtime-dir "$rt" >/dev/null 2>&1
wait "$sup_pid" 2>/dev/null
sup_pid=
echo "logprobs: ok"
