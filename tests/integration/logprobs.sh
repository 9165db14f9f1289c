#!/usr/bin/env bash
# Integration: log-probabilities of generated tokens through the real
# processes (docs/adr/0053), on a model file in llama.cpp's qwen3 layout:
# chat and completions, whole and streamed, with curl, and chat with
# OpenAI's own client (logprobs-client.cjs). Checked: every logprob <= 0,
# top lists sorted descending with exp summing to at most 1, the sampled
# token's logprob equal to its entry in the top list when it is there, the
# greedy token the top one, streamed and whole answers giving the same
# logprobs bit for bit, and the refusals naming the field. Then completions'
# echo (docs/adr/0063): the text the prompt's then the completion's, whole
# and streamed (the prompt in the first chunk), with and without logprobs,
# max_tokens 0 and 1, a string and a token-id prompt; with logprobs one
# entry a prompt token then a generated one, the first null, text_offset
# the characters before each token; and the exactness check: a greedy
# request's generated logprobs equal, bit for bit, the prompt logprobs of
# the same tokens sent back as a prompt with echo. `submit.echo` and
# `fd_submit.echo` without logprobs are refused by the worker and the door.
#   logprobs.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: logprobs.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
probe=$build/tests/integration/wire-probe
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
refused /v1/chat/completions "{\"model\":\"qwen3-tiny\",$u,\"echo\":true}" echo "unknown field 'echo'"
refused /v1/completions '{"model":"qwen3-tiny","prompt":"a","echo":"yes"}' echo "true or false"
refused /v1/completions '{"model":"qwen3-tiny","prompt":"a","max_tokens":0}' max_tokens "or 0 with echo"
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

# ---- completions' echo (docs/adr/0063) ------------------------------------
c='"model":"qwen3-tiny","temperature":0'
prompt='Once upon a time'
# the prompt's ids: the byte-level tokenizer's (this model's), one a byte
ids=$(jq -cn --arg p "$prompt" '$p | explode')
np=$(jq length <<<"$ids")

step "echo without logprobs: the prompt's text, then the completion's"
plain=$(post /v1/completions "{$c,\"prompt\":\"$prompt\",\"max_tokens\":8}")
[[ $(status) == 200 ]] || fail "completion: $(status) $plain"
want=$(jq -r --arg p "$prompt" '$p + .choices[0].text' <<<"$plain")
for p in "\"$prompt\"" "$ids"; do
	got=$(post /v1/completions "{$c,\"prompt\":$p,\"max_tokens\":8,\"echo\":true}")
	[[ $(status) == 200 ]] || fail "echo, prompt $p: $(status) $got"
	[[ $(jq -r '.choices[0].text' <<<"$got") == "$want" ]] ||
		fail "echo, prompt $p: the text is not the prompt's then the completion's: $got"
	jq -e '.choices[0].logprobs == null and .usage.completion_tokens == 8' <<<"$got" >/dev/null ||
		fail "echo without logprobs, prompt $p: $got"
	# streamed: the prompt's text first, alone, then the rest
	chunks=$(stream /v1/completions "{$c,\"prompt\":$p,\"max_tokens\":8,\"echo\":true,\"stream\":true}")
	[[ $(jq -rs '.[0].choices[0].text' <<<"$chunks") == "$prompt" ]] ||
		fail "a stream's first chunk is not the prompt, prompt $p: $chunks"
	[[ $(jq -rsj '.[].choices[0].text // ""' <<<"$chunks") == "$want" ]] ||
		fail "a stream's text is not the whole answer's, prompt $p: $chunks"
	got=$(post /v1/completions "{$c,\"prompt\":$p,\"max_tokens\":0,\"echo\":true}")
	jq -e --arg p "$prompt" '.choices[0].text == $p and .choices[0].finish_reason == "length"
		and .usage.completion_tokens == 0' <<<"$got" >/dev/null ||
		fail "echo, max_tokens 0, prompt $p: not the prompt alone: $got"
done

# What every echo with logprobs N holds: one entry a prompt token then a
# generated one, the first's logprob and top list null, the others' <= 0,
# top lists of at most N; text_offset ascending from 0 and, the text being
# ASCII here (or U+FFFD), each token's text found at its offset.
echo_ok='
	.choices[0] as $ch | $ch.logprobs as $l
	| ($l.tokens | length) == $np + $gen
	and ($l.token_logprobs | length) == ($l.tokens | length)
	and ($l.top_logprobs | length) == ($l.tokens | length)
	and ($l.text_offset | length) == ($l.tokens | length)
	and $l.token_logprobs[0] == null and $l.top_logprobs[0] == null
	and all($l.token_logprobs[1:][]; type == "number" and . <= 0)
	and all($l.top_logprobs[1:][]; type == "object" and length <= $n)
	and $l.text_offset[0] == 0
	and ([range(1; $l.text_offset | length)] | all(. as $i | $l.text_offset[$i] >= $l.text_offset[$i - 1]))
	and ([range(0; $l.tokens | length)] | all(. as $i | ($l.tokens[$i] | explode) as $t
		| any($t[]; . == 65533)
		  or ($ch.text | explode)[$l.text_offset[$i]:$l.text_offset[$i] + ($t | length)] == $t))
	and $l.text_offset[$np - 1] < ($ch.text | length)'

for p in "\"$prompt\"" "$ids"; do
	for mt in 0 1 4; do
		step "echo, logprobs 3, max_tokens $mt, prompt $p"
		body="{$c,\"prompt\":$p,\"max_tokens\":$mt,\"echo\":true,\"logprobs\":3}"
		got=$(post /v1/completions "$body")
		[[ $(status) == 200 ]] || fail "echo logprobs: $(status) $got"
		jq -e --argjson np "$np" --argjson gen "$mt" --argjson n 3 --arg p "$prompt" "$echo_ok
			and (.choices[0].text | startswith(\$p))
			and ([.choices[0].logprobs.tokens[:\$np][]] | add) == \$p
			and .usage.completion_tokens == $mt and .usage.prompt_tokens == \$np" \
			<<<"$got" >/dev/null || fail "echo logprobs do not hold: $got"
		[[ $mt != 0 ]] || jq -e '.choices[0].finish_reason == "length"' <<<"$got" >/dev/null ||
			fail "max_tokens 0: finish_reason $got"
		# streamed: the prompt and its entries in the first chunk, then the
		# rest; the chunks' entries the whole answer's, bit for bit
		chunks=$(stream /v1/completions "${body%\}},\"stream\":true}")
		jq -se --arg p "$prompt" --argjson np "$np" '.[0].choices[0] | .text == $p
			and (.logprobs.tokens | length) == $np and .logprobs.token_logprobs[0] == null' \
			<<<"$chunks" >/dev/null || fail "a stream's first chunk is not the prompt's: $chunks"
		whole=$(jq -c '.choices[0].logprobs | [.tokens, .token_logprobs, .top_logprobs, .text_offset]' <<<"$got")
		streamed=$(jq -sc '[.[].choices[0].logprobs | select(. != null)]
			| [[.[].tokens[]], [.[].token_logprobs[]], [.[].top_logprobs[]], [.[].text_offset[]]]' <<<"$chunks")
		[[ $whole == "$streamed" ]] || fail "streamed echo logprobs differ from the whole answer's:
$whole
$streamed"
	done
done

step "n 2 with echo: each choice echoes the prompt"
got=$(post /v1/completions "{\"model\":\"qwen3-tiny\",\"prompt\":\"$prompt\",\"max_tokens\":4,\"temperature\":1,\"seed\":3,\"n\":2,\"echo\":true,\"logprobs\":1}")
[[ $(status) == 200 ]] || fail "n 2 echo: $(status) $got"
jq -e --arg p "$prompt" --argjson np "$np" '(.choices | length) == 2 and all(.choices[];
	(.text | startswith($p)) and (.logprobs.tokens | length) == $np + 4 and .logprobs.token_logprobs[0] == null)
	and .choices[0].logprobs.token_logprobs[:$np] == .choices[1].logprobs.token_logprobs[:$np]' \
	<<<"$got" >/dev/null || fail "n 2 echo: $got"

step "exactness: a greedy request's logprobs are the echoed prompt's for the same tokens"
gen=$(post /v1/completions "{$c,\"prompt\":$ids,\"max_tokens\":9,\"logprobs\":5}")
[[ $(status) == 200 ]] || fail "greedy: $(status) $gen"
# the generated ids: this model's tokens are bytes; the leading ones that
# are one ASCII byte each (at most 8, the next one kept to compare)
gids=$(jq -c '[.choices[0].logprobs.tokens[:-1][] | explode] | until(all(length == 1 and .[0] < 128); .[:-1]) | map(.[0]) | .[:8]' <<<"$gen")
K=$(jq length <<<"$gids")
((K >= 2)) || fail "the greedy request's tokens are not ASCII bytes to send back: $gen"
all=$(jq -c --argjson g "$gids" '. + $g' <<<"$ids")
for mt in 0 1; do
	got=$(post /v1/completions "{$c,\"prompt\":$all,\"max_tokens\":$mt,\"echo\":true,\"logprobs\":5}")
	[[ $(status) == 200 ]] || fail "echo of prompt + generated: $(status) $got"
	echoed=$(jq -c --argjson np "$np" --argjson k $K '.choices[0].logprobs
		| [.tokens[$np:$np + $k], .token_logprobs[$np:$np + $k], .top_logprobs[$np:$np + $k]]' <<<"$got")
	generated=$(jq -c --argjson k $K '.choices[0].logprobs
		| [.tokens[:$k], .token_logprobs[:$k], .top_logprobs[:$k]]' <<<"$gen")
	[[ $echoed == "$generated" ]] || fail "max_tokens $mt: the echoed prompt's logprobs are not the generated ones:
echoed    $echoed
generated $generated"
	if [[ $mt == 1 ]]; then # and the next token is the greedy request's next one
		jq -e --argjson g "$gen" --argjson k $K '.choices[0].logprobs as $l
			| $l.tokens[-1] == $g.choices[0].logprobs.tokens[$k]
			and $l.token_logprobs[-1] == $g.choices[0].logprobs.token_logprobs[$k]' \
			<<<"$got" >/dev/null || fail "the token after prompt + generated is not the greedy next: $got"
	fi
	# its prompt is prefilled whole, never claimed from the checkpoint the
	# run before left (docs/adr/0063)
	jq -e '(.usage.prompt_tokens_details.cached_tokens // 0) == 0' <<<"$got" >/dev/null ||
		fail "max_tokens $mt: an echo request took its prompt from a checkpoint: $(jq -c .usage <<<"$got")"
done
# ... and leaves its prompt's checkpoint for a plain request after it
got=$(post /v1/completions "{$c,\"prompt\":$all,\"max_tokens\":1}")
jq -e '.usage.prompt_tokens_details.cached_tokens == .usage.prompt_tokens' <<<"$got" >/dev/null ||
	fail "a plain request after the echo ones did not claim their prompt: $(jq -c .usage <<<"$got")"

step "submit.echo and fd_submit.echo without logprobs: refused by name (code 27)"
vh=$(printf '%02x' "$(sed -n 's/^#define MSG_PROTO_VERSION \([0-9]*\)u$/\1/p' \
	"$(dirname "$0")/../../proto/msg.h")")
# a greedy submit of "hi" (docs/protocol.md's example, no stop) with echo true
fields="a474657874a26869a670726f6d707490a5706c61696e90aa6d61785f746f6b656e7308"
fields+="a5636c617373ab696e746572616374697665"
fields+="ab74656d7065726174757265cb0000000000000000a5746f705f70cb3ff0000000000000"
fields+="a5746f705f6b00a47365656400a473746f7090a46563686fc3"
for t in "gpu-worker 0a submit" "client 28 fd_submit"; do
	set -- $t
	out=$("$probe" "$rt/$1.sock" hex "8da174$2a176$vh$fields")
	grep -q "code=IG_E_PROTO_FIELD_RANGE message=$3.echo: true without logprobs" <<<"$out" ||
		fail "$1: $3 with echo without logprobs: $out"
done

mod=${IGNIS_OPENAI_MODULE:-}
if [[ -n $mod && -d $mod ]] && command -v node >/dev/null; then
	step "OpenAI's client: chat logprobs whole and streamed, completions' echo"
	node "$(dirname "$0")/logprobs-client.cjs" "$mod" "$http" qwen3-tiny ||
		fail "the openai client's logprobs checks"
else
	echo "-- skipped: OpenAI's npm client (IGNIS_OPENAI_MODULE) or node is not there"
fi

"$sup" stop --runtime-dir "$rt" >/dev/null 2>&1
wait "$sup_pid" 2>/dev/null
sup_pid=
echo "logprobs: ok"
