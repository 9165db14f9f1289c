#!/usr/bin/env bash
# The HTTP API's door under load (issue 26; docs/benchmarks.md): starts Ignis
# on the embedded default (tiny-chat) with its HTTP API on a free loopback
# port, then with ignis-httpload:
#   1. 10,000 idle connections, then 10,000 slowloris ones (a header byte
#      every 5 s), each beside 300 innocent requests: their p50/p99;
#   2. 1,000 and 2,000 streams at once: every stream's text against the same
#      request run alone (ignis-generate --worker), and how long they took;
#   3. the idle supervisor's CPU over 10 s after them;
#   4. 20,000 submits from 10 nng connections, never read, beside an
#      innocent HTTP request a second for 30 s;
#   5. how long `ignis-supervisor stop` takes after all that.
# The header timeout is raised for the run (what is measured is what the
# door holds, not how soon it cuts a slow client).
#   tools/bench-http.sh [BUILD]
set -euo pipefail
build=${1:-build}
sup=$build/supervisor/ignis-supervisor
load=$build/tools/ignis-httpload
gen=$build/tools/ignis-generate
tmp=$(mktemp -d /tmp/ignis-bench-http-XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=127.0.0.1:$(port)
pid=
finish() {
	if [[ -n $pid ]]; then
		kill -9 "$pid" 2>/dev/null || true
		pkill -9 -f -- "--runtime-dir $tmp/rt" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap finish EXIT
ulimit -n "$(ulimit -Hn)"
"$sup" start --runtime-dir "$tmp/rt" --server-metrics-bind "127.0.0.1:$(port)" \
	--server-http-bind "$http" --server-http-header-timeout 600 >"$tmp/events.jsonl" 2>&1 &
pid=$!
for _ in $(seq 600); do
	curl -sf "http://$http/ready" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/events.jsonl" >&2; exit 1; }
	sleep 0.1
done
echo "$(nproc) cpus; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); descriptors $(ulimit -n)"
curl -s "http://$http/metrics" | grep '^ignis_http_connections_limit'

echo "== 1. held connections beside innocent requests"
"$load" hold "$http" --conns 10000 --sources 20 --innocent 300
sleep 2
"$load" hold "$http" --conns 10000 --sources 20 --innocent 300 --slowloris 5
sleep 2

echo "== 2. streams at once, each against its request run alone"
for n in 1000 2000; do
	"$load" streams "$http" --streams "$n" --tokens 16 --seeds 5 >"$tmp/streams" ||
		{ cat "$tmp/streams"; exit 1; }
	head -1 "$tmp/streams"
	for s in 1 2 3 4 5; do
		want=$("$gen" --worker --runtime-dir "$tmp/rt" --prompt "load test" --max-tokens 16 \
			--temperature 0.9 --seed "$s")
		got=$(awk -v s="$s" '$1 == "seed" && $2 == s { $1 = ""; $2 = ""; print substr($0, 3) }' \
			"$tmp/streams" | jq -r .)
		[[ $got == "$want" ]] || { echo "seed $s: the streams gave '$got', alone '$want'"; exit 1; }
	done
	echo "   every stream's text equals its request run alone (5 seeds); $(tail -1 "$tmp/streams")"
done

echo "== 3. the idle supervisor's CPU"
sleep 2
t() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
a=$(t)
sleep 10
b=$(t)
echo "   $((b - a)) clock ticks of CPU in 10 s ($(getconf CLK_TCK) a second): $(awk -v d=$((b - a)) -v h="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", d / h / 10 }') of a core"

echo "== 4. 20,000 unread nng submits beside an innocent request a second"
"$load" hog "ipc://$tmp/rt/client.sock" "$http" --sockets 10 --each 2000 --tokens 64 --seconds 30

echo "== 5. stop"
t0=$(date +%s.%N)
timeout 120 "$sup" stop --runtime-dir "$tmp/rt" >/dev/null
wait "$pid" 2>/dev/null || true
pid=
echo "   ignis-supervisor stop took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
