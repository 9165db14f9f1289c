#!/usr/bin/env bash
# Integration: the embedded default chats. `make run` (tools/run.sh, no
# model, no configuration) serves tiny-chat, whose file carries a gpt2
# vocabulary and a ChatML template: the first curl line run.sh prints and
# the README's first curl line are chat requests, and both are answered 200
# with an assistant's message; a greedy chat is the text of its ChatML
# prompt run in-process on the same weights (ignis-mkmodel --preset
# tiny-chat --seed 1).
#   default-chat.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=${1:?usage: default-chat.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: default-chat.sh BUILD_DIR SOURCE_DIR}
work=$(mktemp -d /tmp/ignis-defchat-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND

# chat_ok WHAT: the answer in $work/body (status in $work/status) is a chat
# completion of the embedded default with an assistant's message
chat_ok() {
	[[ $(cat "$work/status") == 200 ]] || fail "$1: status $(cat "$work/status"): $(cat "$work/body")"
	jq -e '.object == "chat.completion" and .model == "tiny-chat" and
		.choices[0].message.role == "assistant" and (.choices[0].message.content | type) == "string" and
		.usage.completion_tokens > 0' "$work/body" >/dev/null || fail "$1: not a chat completion: $(cat "$work/body")"
}
# first_curl FILE: its first line that runs curl, the comment after it cut
first_curl() { grep -m1 -E '^ *curl ' "$1" | sed -E 's/ +#.*$//'; }

step "make run's script on the embedded default (no model, no configuration)"
(
	unset MODEL IGNIS_MODEL IGNIS_CONFIG
	export IGNIS_RUNTIME_DIR=$rt
	exec "$src/tools/run.sh" "$build"
) >"$events" 2>"$work/run.txt" &
sup_pid=$!
wait_for 30 grep -q '"ignis.supervisor.started"' "$events" || fail "no start: $(cat "$work/run.txt")"
grep -q '"ignis.supervisor.builtin_weights".*"model":"tiny-chat"' "$events" ||
	fail "the embedded default is not tiny-chat"
wait_for 10 curl -sf "$http/ready" || fail "/ready never said ready"
[[ $(curl -s "$http/v1/models" | jq -r '.data[0].id') == tiny-chat ]] || fail "/v1/models"

step "the first curl line make run prints is a chat, answered 200"
line=$(first_curl "$work/run.txt")
[[ $line == *"$http/v1/chat/completions"* ]] || fail "run.sh's first curl line is not a chat: $line"
eval "$line -o '$work/body' -w '%{http_code}'" >"$work/status" || fail "run.sh's line: curl failed"
chat_ok "run.sh's first curl line"

step "the README's first curl line is a chat, answered 200"
line=$(first_curl "$src/README.md")
[[ $line == *"127.0.0.1:8000/v1/chat/completions"* ]] || fail "README's first curl line is not a chat: $line"
line=${line//127.0.0.1:8000/$http}
eval "$line -o '$work/body' -w '%{http_code}'" >"$work/status" || fail "README's line: curl failed"
chat_ok "README's first curl line"

step "a greedy chat is its ChatML prompt's text on the same weights"
"$build/tools/ignis-mkmodel" --preset tiny-chat --seed 1 -o "$work/tc.gguf" 2>/dev/null || fail "mkmodel"
prompt='<|im_start|>user
hello<|im_end|>
<|im_start|>assistant
'
want=$("$build/tools/ignis-generate" --model "$work/tc.gguf" --kv-format fp8 --prompt "$prompt" \
	--max-tokens 24) || fail "in-process generate"
curl -s -o "$work/body" -w '%{http_code}' "$http/v1/chat/completions" -H 'Content-Type: application/json' -d \
	'{"model":"tiny-chat","messages":[{"role":"user","content":"hello"}],"max_tokens":24,"temperature":0}' \
	>"$work/status" || fail "chat: curl failed"
chat_ok "the greedy chat"
[[ $(jq -r '.choices[0].message.content' "$work/body") == "$want" ]] ||
	fail "the chat's text differs from its prompt's: $(jq .choices[0].message.content "$work/body") vs '$want'"
# the template's tokens, one a byte (no merges) and one a special:
# <|im_start|> "user\n" (5) "hello" (5) <|im_end|> "\n" <|im_start|> "assistant\n" (10)
jq -e '.usage.prompt_tokens == 1 + 5 + 5 + 1 + 1 + 1 + 10' "$work/body" >/dev/null ||
	fail "the prompt is not the template's 24 tokens: $(jq -c .usage "$work/body")"

kill -TERM "$sup_pid"; wait "$sup_pid"; sup_pid=
echo "default chat: all steps passed"
