#!/usr/bin/env bash
# The serving path's share of the time to first token, and a burst's
# admission (docs/benchmarks.md): starts Ignis on the embedded default (cpu
# backend, the tiny-chat model) or on MODEL=file.gguf in a private runtime
# directory, with its HTTP API on a free loopback port, runs ignis-ttft
# against it and stops it.
#   tools/bench-ttft.sh [BUILD] [ignis-ttft options: --reps N --burst N]
set -euo pipefail
build=${1:-build}
shift || true
sup=$build/supervisor/ignis-supervisor
tmp=$(mktemp -d /tmp/ignis-bench-ttft-XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=127.0.0.1:$(port)
pid=
finish() {
	if [[ -n $pid ]]; then
		"$sup" stop --runtime-dir "$tmp/rt" >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap finish EXIT
args=()
[[ -n ${MODEL:-} ]] && args=(--model "$MODEL")
"$sup" start --runtime-dir "$tmp/rt" --server-metrics-bind "127.0.0.1:$(port)" \
	--server-http-bind "$http" "${args[@]}" >"$tmp/events.jsonl" 2>&1 &
pid=$!
for _ in $(seq 600); do
	curl -sf "http://$http/ready" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/events.jsonl" >&2; exit 1; }
	sleep 0.1
done
curl -sf "http://$http/ready" >/dev/null || { echo "not ready after 60 s" >&2; exit 1; }
echo "$(nproc) cpus; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$build/tools/ignis-ttft" --runtime-dir "$tmp/rt" --http "$http" "$@"
