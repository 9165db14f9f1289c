#!/usr/bin/env bash
# Integration: the HTTP API against clients it must not serve, or not keep
# (issue 26): a Host that is not loopback (DNS rebinding) or none; bodies
# that are not application/json (what a web page may send cross-origin
# without a preflight); an API key, from its file, asked of every route but
# the probes; origins served only when named, with CORS headers and
# preflights; a path holding %00; headers or a body dribbled past their
# timeouts, cut while an innocent request is served; a per-address limit
# that leaves other addresses served; remote binds refused without a key
# unless the risk is named, and a warning when served.
#   http-guard.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: http-guard.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-httpguard-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
port=${http##*:}
raw=$(dirname "$0")/http-raw.py
J=(-H 'Content-Type: application/json')
key="sk-test-$RANDOM$RANDOM$RANDOM"
printf '%s\n' "$key" >"$work/key"
K=(-H "Authorization: Bearer $key")

m=$work/chat.gguf
"$build/tools/ignis-mkmodel" --preset tiny-chat --seed 5 -o "$m" 2>/dev/null || fail "mkmodel"

# code ARGS...: curl's status code for the request
code() { curl -s -o "$work/body" -w '%{http_code}' "$@"; }
start() {
	rm -rf "$rt"
	: >"$events"
	"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 1024 "$@" >"$events" 2>&1 &
	sup_pid=$!
	wait_for 30 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
}
stop() {
	kill -TERM "$sup_pid"
	wait "$sup_pid"
	sup_pid=
}
chat='{"model":"tiny-chat","max_tokens":4,"temperature":0,"messages":[{"role":"user","content":"hi"}]}'

step "the API with a key from its file, one origin named, 2 s timeouts, 6 connections an address"
start --server-api-key-file "$work/key" --server-cors-origins "https://app.example" \
	--server-http-header-timeout 2 --server-http-body-timeout 2 \
	--server-http-max-connections-per-address 6
wait_for 20 curl -sf "$http/ready" || fail "/ready never said ready (probes need no key)"
[[ $(code "$http/health") == 200 ]] || fail "/health without the key: $(cat "$work/body")"
grep -q "$key" "$events" && fail "the key shows in the events"

step "the key: every route but the probes asks for it"
[[ $(code "$http/v1/models") == 401 ]] || fail "/v1/models without the key: $(cat "$work/body")"
jq -e '.error.code == "invalid_api_key" and (.error.message | contains("missing"))' "$work/body" \
	>/dev/null || fail "no key: $(cat "$work/body")"
curl -s -D "$work/h" -o /dev/null "$http/v1/models"
grep -qi '^WWW-Authenticate: Bearer' "$work/h" || fail "401 without WWW-Authenticate"
[[ $(code -H "Authorization: Bearer ${key}x" "$http/v1/models") == 401 ]] || fail "a wrong key"
[[ $(code -H "Authorization: Bearer ${key:0:10}" "$http/v1/models") == 401 ]] || fail "a prefix"
jq -e '.error.message | contains("not the server")' "$work/body" >/dev/null ||
	fail "a wrong key's message: $(cat "$work/body")"
[[ $(code "${K[@]}" "$http/v1/models") == 200 ]] || fail "Bearer: $(cat "$work/body")"
[[ $(code -H "X-Api-Key: $key" "$http/v1/models") == 200 ]] || fail "X-Api-Key"
[[ $(code "$http/metrics") == 401 ]] || fail "/metrics without the key"
[[ $(code "${K[@]}" "$http/metrics") == 200 ]] || fail "/metrics with the key"
[[ $(code "${J[@]}" -d "$chat" "$http/v1/chat/completions") == 401 ]] || fail "a chat without the key"
[[ $(code "${K[@]}" "${J[@]}" -d "$chat" "$http/v1/chat/completions") == 200 ]] ||
	fail "a chat with the key: $(cat "$work/body")"

step "bodies that are not application/json are refused: 415"
for ct in "text/plain" "application/x-www-form-urlencoded" "multipart/form-data; boundary=x" ""; do
	[[ $(code "${K[@]}" -H "Content-Type: $ct" --data-binary "$chat" "$http/v1/chat/completions") == 415 ]] ||
		fail "Content-Type '$ct' was served: $(cat "$work/body")"
	jq -e '.error.code == "unsupported_media_type" and (.error.message | contains("application/json"))' \
		"$work/body" >/dev/null || fail "415's answer: $(cat "$work/body")"
done
[[ $(code "${K[@]}" -H 'Content-Type: application/json; charset=utf-8' -d "$chat" \
	"$http/v1/chat/completions") == 200 ]] || fail "a charset parameter was refused"

step "Host: loopback names and addresses only (DNS rebinding), and one is needed"
[[ $(code "${K[@]}" -H "Host: evil.example:$port" "$http/v1/models") == 403 ]] ||
	fail "Host evil.example was served: $(cat "$work/body")"
jq -e '.error.code == "host_not_allowed" and (.error.message | contains("evil.example"))' \
	"$work/body" >/dev/null || fail "the Host refusal: $(cat "$work/body")"
[[ $(code "${K[@]}" -H "Host: 127.0.0.1.nip.io:$port" "$http/v1/models") == 403 ]] ||
	fail "a name that resolves to loopback was served"
[[ $(code "${K[@]}" -H 'Host:' "$http/v1/models") == 400 ]] || fail "no Host (HTTP/1.1) was served"
[[ $(code -0 "${K[@]}" -H 'Host:' "$http/v1/models") == 400 ]] || fail "no Host (HTTP/1.0) was served"
for h in "localhost:$port" "LocalHost" "127.0.0.9:$port" "[::1]:$port" "ignis.localhost:$port"; do
	[[ $(code "${K[@]}" -H "Host: $h" "$http/v1/models") == 200 ]] || fail "Host $h was refused"
done
[[ $(code -H "Host: evil.example" "$http/health") == 403 ]] || fail "a probe with Host evil.example"

step "origins: the one named is served with CORS headers and preflights, others refused"
curl -s -D "$work/h" -o "$work/body" "${K[@]}" -H 'Origin: https://app.example' "$http/v1/models"
grep -qi '^Access-Control-Allow-Origin: https://app.example' "$work/h" || fail "no CORS header: $(cat "$work/h")"
grep -qi '^Vary: Origin' "$work/h" || fail "no Vary: Origin"
curl -s -D "$work/h" -o /dev/null -X OPTIONS -H 'Origin: https://app.example' \
	-H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization' \
	"$http/v1/chat/completions"
head -1 "$work/h" | grep -q ' 204' || fail "the preflight: $(head -1 "$work/h")"
grep -qi '^Access-Control-Allow-Headers:.*Authorization' "$work/h" || fail "preflight headers"
[[ $(code "${K[@]}" -H 'Origin: https://evil.example' "$http/v1/models") == 403 ]] ||
	fail "another origin was served"
jq -e '.error.code == "origin_not_allowed"' "$work/body" >/dev/null || fail "$(cat "$work/body")"
[[ $(code -X OPTIONS -H 'Origin: https://evil.example' "$http/v1/chat/completions") == 403 ]] ||
	fail "another origin's preflight"

step "a path holding %00 matches no route"
[[ $(code --path-as-is "${K[@]}" "${J[@]}" -d "$chat" "$http/v1/chat/completions%00") == 404 ]] ||
	fail "/v1/chat/completions%00 was served: $(cat "$work/body")"
[[ $(code --path-as-is "${K[@]}" "$http/v1/models%00x") == 404 ]] || fail "/v1/models%00x"

step "headers or a body dribbled past their 2 s are cut; an innocent request is served meanwhile"
"$raw" slow "$http" head 0.5 30 >"$work/slow-head" &
sh=$!
HTTP_RAW_HEADER="Authorization: Bearer $key" "$raw" slow "$http" body 0.5 30 >"$work/slow-body" &
sb=$!
sleep 0.5
[[ $(code "${K[@]}" "${J[@]}" -d "$chat" "$http/v1/chat/completions") == 200 ]] ||
	fail "the innocent request beside the slow ones: $(cat "$work/body")"
wait "$sh" || fail "slow headers were never cut: $(cat "$work/slow-head")"
wait "$sb" || fail "a slow body was never cut: $(cat "$work/slow-body")"
grep -q '^cut' "$work/slow-head" && grep -q '^cut' "$work/slow-body" ||
	fail "answered rather than cut: $(cat "$work/slow-head" "$work/slow-body")"
echo "   headers: $(cat "$work/slow-head"); body: $(cat "$work/slow-body")"
counted() {
	curl -s "${K[@]}" "$http/metrics" >"$work/page" &&
		grep -qE '^ignis_http_timeouts_total [2-9]' "$work/page" &&
		grep -qE '^ignis_http_refused_total\{reason="host"\} [1-9]' "$work/page" &&
		grep -qE '^ignis_http_refused_total\{reason="content_type"\} [4-9]' "$work/page" &&
		grep -qE '^ignis_http_refused_total\{reason="api_key"\} [1-9]' "$work/page" &&
		grep -qE '^ignis_http_refused_total\{reason="origin"\} [1-9]' "$work/page"
}
wait_for 5 counted || fail "the refusals and cuts not counted: $(grep ignis_http_ "$work/page")"

step "6 connections an address: a 7th from 127.0.0.1 is refused, 127.0.0.2 still served"
coproc HOLD { "$raw" hold "$http" 9 127.0.0.1; }
read -r taken <&"${HOLD[0]}"
[[ $taken == 6 ]] || fail "127.0.0.1 held $taken connections; want 6"
[[ $(code --interface 127.0.0.2 "${K[@]}" "$http/v1/models") == 200 ]] ||
	fail "127.0.0.2 was refused while 127.0.0.1 held its 6"
eval "exec ${HOLD[1]}>&-"
wait "$HOLD_PID" 2>/dev/null
stop

step "past loopback: refused without --server-allow-remote, then without a key"
rport=$(free_port)
out=$("$sup" start --runtime-dir "$rt" --model "$m" --server-http-bind "0.0.0.0:$rport" 2>&1) &&
	fail "0.0.0.0 started without --server-allow-remote"
grep -q -- "--server-allow-remote" <<<"$out" || fail "unclear refusal: $out"
out=$("$sup" start --runtime-dir "$rt" --model "$m" --server-http-bind "0.0.0.0:$rport" \
	--server-allow-remote 2>&1) && fail "0.0.0.0 started without a key"
grep -q -- "--server-api-key" <<<"$out" && grep -q -- "--server-allow-remote-without-api-key" <<<"$out" ||
	fail "the refusal names neither the key nor the knob: $out"
out=$("$sup" start --runtime-dir "$rt" --model "$m" --server-api-key-file "$work/none" 2>&1) &&
	fail "a missing key file was taken"
grep -q "$work/none" <<<"$out" || fail "the missing key file is not named: $out"
printf 'two words\n' >"$work/badkey"
out=$("$sup" start --runtime-dir "$rt" --model "$m" --server-api-key-file "$work/badkey" 2>&1) &&
	fail "a key with a space was taken"
grep -q "$work/badkey" <<<"$out" && ! grep -q "two words" <<<"$out" ||
	fail "the bad key file: $out"
out=$("$sup" start --runtime-dir "$rt" --model "$m" --server-cors-origins app.example 2>&1) &&
	fail "an origin without a scheme was taken"
grep -q -- "--server-cors-origins" <<<"$out" || fail "the bad origin: $out"

step "past loopback with a key: served, with a warning; without one only when the risk is named"
http_remote="127.0.0.1:$rport"
start --server-http-bind "0.0.0.0:$rport" --server-allow-remote --server-api-key-file "$work/key"
grep '"ignis.http.remote"' "$events" | jq -e '.api_key == true' >/dev/null ||
	fail "no warning of the remote bind: $(grep http.remote "$events")"
wait_for 20 curl -sf "$http_remote/ready" || fail "/ready on the remote bind"
[[ $(code "$http_remote/v1/models") == 401 ]] || fail "remote without the key"
[[ $(code "${K[@]}" -H "Host: evil.example" "$http_remote/v1/models") == 200 ]] ||
	fail "a remote bind checks no Host (names are the operator's): $(cat "$work/body")"
stop
start --server-http-bind "0.0.0.0:$rport" --server-allow-remote --server-allow-remote-without-api-key
grep '"ignis.http.remote"' "$events" | jq -e '.api_key == false and (.risk | contains("no API key"))' \
	>/dev/null || fail "no warning of the keyless remote bind: $(grep http.remote "$events")"
wait_for 20 curl -sf "$http_remote/ready" || fail "/ready on the keyless remote bind"
[[ $(code "$http_remote/v1/models") == 200 ]] || fail "keyless remote: $(cat "$work/body")"
stop
step "one nng client's 3,000 unread submits cannot keep an HTTP request out of the door"
# 4 worker slots, a queue of 1,024: the flood (10 connections, 1,000 tokens
# a request) fills both; the HTTP request
# takes the place of the flood's newest waiting submit and the next free
# slot, while most of the flood still waits
start --server-max-requests 4 --server-max-queued 1024
wait_for 20 curl -sf "$http/ready" || fail "/ready"
coproc HOG { "$build/tests/integration/fd-probe" "ipc://$rt/client.sock" hog 10 300 1000; }
read -r sent <&"${HOG[0]}"
[[ $sent == "sent 3000" ]] || fail "the flood: $sent"
waiting() { curl -s "$http/metrics" | awk '/^vllm:num_requests_waiting/ { print $NF }'; }
full() { (($(waiting) >= 800)); }
wait_for 20 full || fail "the flood does not fill the queue: $(waiting) waiting"
# the request waits for the next free slot: a running request's 1,000 tokens,
# a minute or more in the sanitized build on two loaded cores (the flood's
# 3,000 would take hours, and `left` below tells the two apart)
[[ $(code --max-time 240 "${J[@]}" -d "$chat" "$http/v1/chat/completions") == 200 ]] ||
	fail "the HTTP request was kept out by the flood: $(cat "$work/body")"
left=$(waiting)
((left >= 500)) || fail "the HTTP request was served only once the flood drained ($left waiting)"
# 3,000 overflow the queue of 1,024: the flood's clients displace each
# other's newest, the one holding the most giving way (counted once the
# door has taken the whole flood in, which may come after the answer)
displaced() { curl -s "$http/metrics" | grep -qE '^ignis_frontdoor_displaced_total [1-9]'; }
wait_for 30 displaced || fail "no displaced submit counted"
echo "   served with $left of the flood's submits still waiting"
eval "exec ${HOG[1]}>&-"
wait "$HOG_PID" 2>/dev/null
stop
echo "http-guard: all steps passed"
