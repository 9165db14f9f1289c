#!/usr/bin/env bash
# `make demo`: a short scenario against Ignis. Uses the system `make run`
# started (the default runtime directory) when one answers; otherwise starts
# one of its own on the embedded default (cpu backend, the tiny-chat model)
# in a private runtime directory and stops it at the end.
#   1. three agent requests, submitted together, run in the background;
#   2. then an interactive one, whose tokens stream to the terminal as they
#      come (the model has seeded random weights: expect noise); on the
#      demo's own system the KV pool is sized so that it does not fit: the
#      later long agent moves to KV-RAM a window a round while the other
#      keeps decoding, and comes back once there is room (its tokens are
#      the same as if it had never moved);
#   3. what each request got, the moves, the front door's status, and an
#      excerpt of the metrics page (requests, tokens, the KV pool, moves).
set -euo pipefail
build=${1:-build}
sup=$build/supervisor/ignis-supervisor
cli=$build/client/ignis-client
tmp=$(mktemp -d /tmp/ignis-demo-XXXXXX)
rt=() own_pid=
metrics=${IGNIS_SERVER_METRICS_BIND:-127.0.0.1:9464}
# the demo speaks to the nng door: its system needs no HTTP port (a `make
# run` beside it holds 8000)
export IGNIS_SERVER_HTTP_BIND=${IGNIS_SERVER_HTTP_BIND:-off}

finish() {
	if [[ -n $own_pid ]]; then
		"$sup" stop "${rt[@]}" >/dev/null 2>&1 || kill "$own_pid" 2>/dev/null || true
		wait "$own_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap finish EXIT

if "$sup" status >/dev/null 2>&1; then
	echo "== using the running system ($("$sup" status | head -1 | tr -s ' '))"
else
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	metrics=127.0.0.1:$port
	rt=(--runtime-dir "$tmp/rt")
	echo "== starting Ignis on the embedded default (events in $tmp/events.jsonl)"
	# a pool of 16 pages (the agents take 7 + 7 + 2): the interactive
	# request's 3 pages make room by moving an agent
	"$sup" start "${rt[@]}" --server-metrics-bind "$metrics" \
		--model-max-context 512 --vram-kv-pool-bytes 1024tok --reuse-retained-host 0 \
		--reuse-move-out-window-bytes 64K --reuse-move-in-window-bytes 64K \
		>"$tmp/events.jsonl" 2>&1 &
	own_pid=$!
	for _ in $(seq 200); do
		grep -q '"ignis.supervisor.started"' "$tmp/events.jsonl" 2>/dev/null && break
		kill -0 "$own_pid" 2>/dev/null || { cat "$tmp/events.jsonl" >&2; exit 1; }
		sleep 0.1
	done
fi

echo "== 1. three agent requests, together, in the background"
# (greedy: on the embedded default, tasks 3 and 5 meet no end of sequence
# and run to their 400-token cap, so they still hold their pages when the
# interactive request comes, and it makes room by moving agents out)
agents=()
for i in 3 5 1; do
	max=400
	[[ $i == 1 ]] && max=64
	"$cli" "${rt[@]}" generate --class agent --prompt "agent task $i: summarise the log" \
		--max-tokens "$max" --json >"$tmp/agent.$i.jsonl" &
	agents+=($!)
	sleep 0.05
done
# the interactive request comes once every agent decodes (holds its pages)
for _ in $(seq 200); do
	n=0
	for i in 3 5 1; do
		jq -s -e 'any(.[]; .event == "tokens")' "$tmp/agent.$i.jsonl" >/dev/null 2>&1 && n=$((n + 1))
	done
	((n == 3)) && break
	sleep 0.05
done
echo "== 2. an interactive request, streamed as it comes"
"$cli" "${rt[@]}" generate --prompt "hello, who are you?" --max-tokens 150
wait "${agents[@]}"
echo "== 3. what each agent request got"
for i in 3 5 1; do
	jq -r 'select(.event == "done") |
		"   agent \(.id): \(.generated) tokens, finish \(.finish), \(.tokens_per_s) tokens/s"' \
		"$tmp/agent.$i.jsonl"
done
if [[ -n $own_pid ]]; then
	echo "== the moves (events)"
	grep -E '"event":"ignis\.(request\.(evicted|restored)|kv\.move)"' "$tmp/events.jsonl" |
		jq -r 'if .event == "ignis.kv.move" then
			"   request \(.id) moved \(.direction): \(.bytes) bytes in \(.windows) windows, \(.duration_us / 1000 | floor) ms"
		elif .event == "ignis.request.evicted" then
			"   request \(.id) (\(.class)) makes room for request \(.for)"
		else "   request \(.id) restored: it goes on where it stopped" end' || echo "   none this time"
	for i in 3 5 1; do
		jq -r 'select(.event == "state") | .state' "$tmp/agent.$i.jsonl" | tr '\n' ' ' |
			grep -q moving_out && echo "   agent task $i's stream showed: $(jq -r 'select(.event == "state") | .state' "$tmp/agent.$i.jsonl" | tr '\n' ' ')"
	done
fi
echo "== the front door's status"
"$cli" "${rt[@]}" status
sleep 1.2 # the metrics page gathers the daemons' figures once a second
echo "== the metrics page, http://$metrics/metrics (excerpt)"
curl -s "http://$metrics/metrics" |
	grep -E '^ignis_(requests_accepted_total|requests_completed_total|generated_tokens_total|request_ttft_seconds_(count|sum)|kv_pool_(pages|used_pages)|kv_cache_evictions_total|scheduler_requests) ' || true
curl -s "http://$metrics/metrics" |
	grep -E '^ignis_(requests_completed_total|kv_moves_total|kv_move_bytes_total)\{' | head -8 || true
