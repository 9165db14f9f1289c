#!/usr/bin/env bash
# `make demo`: a short scenario against Ignis. Uses the system `make run`
# started (the default runtime directory) when one answers; otherwise starts
# one of its own on the embedded default (cpu backend, the tiny dense model)
# in a private runtime directory and stops it at the end.
#   1. four agent requests, submitted together, run in the background;
#   2. then an interactive one, whose tokens stream to the terminal as they
#      come (the model has seeded random weights: expect noise);
#   3. what each request got, the front door's status, and an excerpt of the
#      metrics page (requests, tokens, time to first token, the KV pool).
set -euo pipefail
build=${1:-build}
sup=$build/supervisor/ignis-supervisor
cli=$build/client/ignis-client
model=$build/models/tiny-dense.gguf
tmp=$(mktemp -d /tmp/ignis-demo-XXXXXX)
rt=() own_pid=
metrics=${IGNIS_SERVER_METRICS_BIND:-127.0.0.1:9464}

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
	if [[ ! -f $model ]]; then
		mkdir -p "$(dirname "$model")"
		"$build/tools/ignis-mkmodel" --preset tiny-dense -o "$model" --seed 1 >/dev/null
	fi
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	metrics=127.0.0.1:$port
	rt=(--runtime-dir "$tmp/rt")
	echo "== starting Ignis on the embedded default (events in $tmp/events.jsonl)"
	"$sup" start "${rt[@]}" --model "$model" --server-metrics-bind "$metrics" \
		>"$tmp/events.jsonl" 2>&1 &
	own_pid=$!
	for _ in $(seq 200); do
		grep -q '"ignis.supervisor.started"' "$tmp/events.jsonl" 2>/dev/null && break
		kill -0 "$own_pid" 2>/dev/null || { cat "$tmp/events.jsonl" >&2; exit 1; }
		sleep 0.1
	done
fi

echo "== 1. four agent requests, together, in the background"
agents=()
for i in 1 2 3 4; do
	"$cli" "${rt[@]}" generate --class agent --prompt "agent task $i: summarise the log" \
		--max-tokens 192 --temperature 0.8 --seed "$i" --json >"$tmp/agent.$i.jsonl" &
	agents+=($!)
done
sleep 0.3
echo "== 2. an interactive request, streamed as it comes"
"$cli" "${rt[@]}" generate --prompt "hello, who are you?" --max-tokens 64
wait "${agents[@]}"
echo "== 3. what each agent request got"
for i in 1 2 3 4; do
	jq -r 'select(.event == "done") |
		"   agent \(.id): \(.generated) tokens, finish \(.finish), \(.tokens_per_s) tokens/s"' \
		"$tmp/agent.$i.jsonl"
done
echo "== the front door's status"
"$cli" "${rt[@]}" status
sleep 1.2 # the metrics page gathers the daemons' figures once a second
echo "== the metrics page, http://$metrics/metrics (excerpt)"
curl -s "http://$metrics/metrics" |
	grep -E '^ignis_(requests_accepted_total|requests_completed_total|generated_tokens_total|request_ttft_seconds_(count|sum)|kv_pool_(pages|used_pages)|scheduler_requests) ' || true
curl -s "http://$metrics/metrics" |
	grep -E '^ignis_(requests_completed_total|scheduler_requests)\{' | head -8 || true
