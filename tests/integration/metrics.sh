#!/usr/bin/env bash
# Integration: the supervisor's metrics page (docs/adr/0014-metrics.md) with
# the real three processes on the tiny dense model. The page passes
# `promtool check metrics`; its figures are the system's (the plan's lines
# equal `ignis-supervisor plan --json`; requests, prompt and generated tokens
# equal what the clients sent and received; the pool is free again after);
# a real Prometheus server on loopback scrapes it (its HTTP API says `up` 1
# and holds our figures); a hung, then killed, kvstore daemon shows as down
# while the page keeps answering at once, then as restarted; an address in
# use refuses a start, naming the knob. Skipped (77) only without promtool or
# prometheus (Debian's `prometheus` package; tools/install-deps.sh).
#   metrics.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: metrics.sh BUILD_DIR}
for tool in promtool prometheus; do
	command -v "$tool" >/dev/null || {
		echo "SKIP: $tool is not installed (tools/install-deps.sh installs Debian's prometheus)"
		exit 77
	}
done
command -v curl >/dev/null || { echo "FAIL: curl is not installed (tools/install-deps.sh)" >&2; exit 1; }
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
work=$(mktemp -d /tmp/ignis-metrics-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
prom_pid=
stop_prometheus() {
	[[ -n $prom_pid ]] || return 0
	kill "$prom_pid" 2>/dev/null
	wait_for 10 bash -c "! kill -0 $prom_pid" || kill -9 "$prom_pid" 2>/dev/null
	wait "$prom_pid" 2>/dev/null
	prom_pid=
}
cleanup() {
	stop_prometheus
	it_cleanup
}
trap cleanup EXIT

port=$(free_port) || fail "no free port"
page() { curl -s --max-time 2 "http://127.0.0.1:$port/metrics"; }
# metric 'NAME{LABELS}': its value on the page now (empty when absent)
metric() { page | awk -v k="$1" '$1 == k { print $2 }'; }
metric_is() { [[ $(metric "$1") == "$2" ]]; }
model=$work/tiny-dense.gguf
flags=(--model "$model" --model-max-context 512)
"$build/tools/ignis-mkmodel" --preset tiny-dense -o "$model" --seed 7 2>/dev/null || fail "mkmodel"

step "promtool tells a bad page from a good one (the checks below can fail)"
printf 'ignis_x 1\n' | promtool check metrics >/dev/null 2>&1 && fail "promtool passed a metric without HELP and TYPE"

step "the supervisor serves /metrics at --server-metrics-bind; promtool passes the page"
"$sup" start --runtime-dir "$rt" "${flags[@]}" --server-metrics-bind "127.0.0.1:$port" >"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
grep '"ignis.supervisor.starting"' "$events" | jq -e --arg a "127.0.0.1:$port" '.metrics == $a' >/dev/null ||
	fail "the starting event does not name the metrics address"
wait_for 5 metric_is 'ignis_stats_up{source="gpu-worker"}' 1 || fail "no worker figures: $(page | grep stats_up)"
page >"$work/page0" || fail "curl failed"
promtool check metrics <"$work/page0" >"$work/lint" 2>&1 || fail "promtool: $(cat "$work/lint")"
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics") == 200 ]] || fail "not 200"
curl -s -D - -o /dev/null "http://127.0.0.1:$port/metrics" | grep -qi '^content-type: text/plain; version=0.0.4' ||
	fail "wrong content type"
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/") == 404 ]] || fail "/ is not 404"
for role in supervisor kvstore gpu-worker; do
	grep -qx "ignis_process_up{role=\"$role\"} 1" "$work/page0" || fail "$role not up on the page"
done

step "the plan's lines on the page equal ignis-supervisor plan --json"
plan=$("$sup" plan "${flags[@]}" --json | grep '"ignis.runtime.vram_plan"')
[[ -n $plan ]] || fail "plan --json printed no plan event"
lines=$(grep -c '^ignis_vram_reserved_bytes{' "$work/page0")
((lines == 16)) || fail "$lines plan lines on the page; expected 12 fixed + 4"
for line in weights cuda_context workspace media_embedding sampling decode_graph verify_round \
	drafter_round lane_state retained_slots hq_residual_window residual kv_pool; do
	want=$(jq -r ".${line}_bytes" <<<"$plan")
	got=$(awk -v k="ignis_vram_reserved_bytes{line=\"$line\"}" '$1 == k { print $2 }' "$work/page0")
	[[ $got == "$want" ]] || fail "line $line: page $got, plan $want"
done
total=$(awk '/^ignis_vram_reserved_bytes\{/ { s += $2 } END { printf "%d", s }' "$work/page0")
[[ $total == $(jq -r .total_bytes <<<"$plan") ]] || fail "the lines add up to $total, not the plan's total"
for pair in budget_bytes:ignis_vram_budget_bytes kv_pool_pages:ignis_kv_pool_pages \
	kv_page_bytes:ignis_kv_page_bytes; do
	got=$(awk -v k="${pair#*:}" '$1 == k { print $2 }' "$work/page0")
	[[ $got == $(jq -r ".${pair%%:*}" <<<"$plan") ]] || fail "${pair#*:} $got differs from the plan's ${pair%%:*}"
done

step "requests: accepted, completed, prompt and generated tokens equal what the clients saw"
prompts=("Exactly the same, please." "a" "The quick brown fox jumps over the lazy dog.")
pids=()
for i in "${!prompts[@]}"; do
	"$gen" --worker --runtime-dir "$rt" --prompt "${prompts[$i]}" --max-tokens $((30 + 11 * i)) \
		--seed $((i + 1)) --ids >"$work/ids.$i" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a client failed"; done
received=$(cat "$work"/ids.* | wc -l)
((received > 0)) || fail "the clients received no token"
prompt_tokens=$(grep '"ignis.request.submitted"' "$events" | jq -s 'map(.prompt_tokens) | add')
done_tokens=$(grep '"ignis.request.done"' "$events" | jq -s 'map(.generated_tokens) | add')
[[ $done_tokens == "$received" ]] || fail "done events say $done_tokens tokens; clients got $received"
wait_for 5 metric_is ignis_generated_tokens_total "$received" ||
	fail "ignis_generated_tokens_total $(metric ignis_generated_tokens_total); the clients received $received"
page >"$work/page1"
val() { awk -v k="$1" '$1 == k { print $2 }' "$work/page1"; }
[[ $(val ignis_requests_accepted_total) == 3 ]] || fail "accepted $(val ignis_requests_accepted_total)"
completed=$(awk '/^ignis_requests_completed_total\{/ { s += $2 } END { print s }' "$work/page1")
[[ $completed == 3 ]] || fail "completed $completed of 3"
[[ $(val ignis_prompt_tokens_total) == "$prompt_tokens" ]] ||
	fail "prompt tokens $(val ignis_prompt_tokens_total); submitted events say $prompt_tokens"
[[ $(val ignis_request_ttft_seconds_count) == 3 ]] || fail "ttft count $(val ignis_request_ttft_seconds_count)"
[[ $(val 'ignis_request_ttft_seconds_bucket{le="+Inf"}') == 3 ]] || fail "ttft +Inf bucket"
awk '$1 == "ignis_request_ttft_seconds_sum" { exit !($2 > 0) }' "$work/page1" || fail "ttft sum is 0"
# every request ended: what pages are used, only retained prompt checkpoints
# hold (the default host slots: docs/adr/0038), and they hold some
[[ $(val ignis_kv_pool_used_pages) == "$(val ignis_kv_pool_retained_pages)" ]] ||
	fail "pages still used after every request ended: $(val ignis_kv_pool_used_pages), of them $(val ignis_kv_pool_retained_pages) retained"
[[ $(val ignis_kv_pool_retained_pages) -gt 0 ]] || fail "no page retained with host slots on"
(($(val ignis_kv_pool_free_pages) + $(val ignis_kv_pool_used_pages) == $(val ignis_kv_pool_pages))) ||
	fail "free $(val ignis_kv_pool_free_pages) + used $(val ignis_kv_pool_used_pages) pages != the pool"
for st in waiting prefill ready decode; do
	[[ $(val "ignis_scheduler_requests{state=\"$st\"}") == 0 ]] || fail "requests still $st"
done
promtool check metrics <"$work/page1" >"$work/lint" 2>&1 || fail "promtool: $(cat "$work/lint")"

step "a real Prometheus server scrapes the page (its API: up 1, our figures)"
pport=$(free_port) || fail "no free port"
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ignis
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
promtool check config "$work/prometheus.yml" >/dev/null || fail "promtool rejects our prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
	--web.listen-address="127.0.0.1:$pport" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
query() { curl -s --max-time 2 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1"; }
# query_is EXPR VALUE: the first result's value
query_is() { [[ $(query "$1" | jq -r '.data.result[0].value[1] // empty') == "$2" ]]; }
wait_for 30 query_is 'up{job="ignis"}' 1 ||
	fail "Prometheus did not scrape the page: $(query up) $(tail -5 "$work/prometheus.log")"
query_is 'ignis_generated_tokens_total{job="ignis"}' "$received" ||
	fail "Prometheus holds $(query ignis_generated_tokens_total)"
query_is 'ignis_vram_reserved_bytes{line="weights"}' "$(jq -r .weights_bytes <<<"$plan")" ||
	fail "Prometheus holds $(query 'ignis_vram_reserved_bytes{line="weights"}')"
query_is 'scrape_samples_scraped{job="ignis"}' "$(grep -cv '^#' "$work/page1")" ||
	fail "Prometheus scraped $(query scrape_samples_scraped) samples; the page holds $(grep -cv '^#' "$work/page1")"

step "a hung kvstore daemon: down on the page at once, the page still answers within 1 s"
kv=$(grep '"ignis.supervisor.child_started"' "$events" | jq -r 'select(.role == "kvstore") | .child_pid' | tail -1)
[[ -n $kv ]] || fail "no kvstore pid"
kill -STOP "$kv"
wait_for 4 metric_is 'ignis_stats_up{source="kvstore"}' 0 || fail "a stopped kvstore still shows up"
for _ in 1 2 3; do
	t0=$(date +%s%N)
	page >"$work/page2" || fail "the page did not answer while the kvstore hangs"
	ms=$((($(date +%s%N) - t0) / 1000000))
	((ms < 1000)) || fail "a scrape took $ms ms while the kvstore hangs"
	sleep 0.3
done
grep -q '^ignis_kv_ram_arena_bytes' "$work/page2" && fail "a hung kvstore's figures are still on the page"
grep -qx 'ignis_stats_up{source="gpu-worker"} 1' "$work/page2" || fail "the worker's figures went with the kvstore's"
grep -q '^ignis_stats_age_seconds{source="kvstore"} ' "$work/page2" || fail "no age of the kvstore's last figures"
promtool check metrics <"$work/page2" >"$work/lint" 2>&1 || fail "promtool (kvstore down): $(cat "$work/lint")"
grep -q '"ignis.supervisor.metrics_source_down".*"source":"kvstore"' "$events" || fail "no metrics_source_down event"

step "then killed: restarted, counted, its figures back; Prometheus saw it down"
kill -9 "$kv"
kill -CONT "$kv" 2>/dev/null
wait_for 15 metric_is 'ignis_process_restarts_total{role="kvstore"}' 1 ||
	fail "restarts $(metric 'ignis_process_restarts_total{role="kvstore"}')"
wait_for 20 metric_is 'ignis_stats_up{source="kvstore"}' 1 || fail "the restarted kvstore's figures are not back"
# (the process table and the daemon's figures are gathered apart: the figures
# may come back a gathering before the supervisor marks the process up)
wait_for 5 metric_is 'ignis_process_up{role="kvstore"}' 1 || fail "the restarted kvstore is not up"
[[ -n $(metric 'ignis_kv_ram_arena_bytes{state="free"}') ]] || fail "no KV-RAM figures after the restart"
wait_for 10 query_is 'min_over_time(ignis_stats_up{source="kvstore"}[5m])' 0 ||
	fail "Prometheus never saw the kvstore down: $(query 'ignis_stats_up')"
query_is 'up{job="ignis"}' 1 || fail "Prometheus's scrape failed while the kvstore was down"

step "an address in use refuses a second start, naming the knob; nothing is spawned"
out=$("$sup" start --runtime-dir "$work/rt2" "${flags[@]}" --server-metrics-bind "127.0.0.1:$port" 2>&1 >/dev/null) &&
	fail "a second supervisor started on a port in use"
grep -q -- "--server-metrics-bind '127.0.0.1:$port' (from --server-metrics-bind): the address is in use" <<<"$out" ||
	fail "unclear refusal: $out"
[[ ! -e $work/rt2 ]] || fail "the refused start left $work/rt2 behind: $(ls "$work/rt2")"
out=$(IGNIS_SERVER_METRICS_BIND="127.0.0.1:$pport" "$sup" start --runtime-dir "$work/rt2" "${flags[@]}" 2>&1 >/dev/null) &&
	fail "a start on Prometheus's port succeeded"
grep -q "(from IGNIS_SERVER_METRICS_BIND): the address is in use" <<<"$out" || fail "unclear refusal: $out"
out=$("$sup" start --runtime-dir "$work/rt2" "${flags[@]}" --server-metrics-bind 127.0.0.1 2>&1 >/dev/null)
rc=$?
[[ $rc == 2 ]] || fail "a bind without a port: exit $rc, expected 2 (a configuration error)"
grep -q -- "--server-metrics-bind: '127.0.0.1' (from --server-metrics-bind) is not HOST:PORT; accepted: HOST:PORT" <<<"$out" ||
	fail "unclear refusal: $out"
page >/dev/null || fail "the first supervisor's page stopped answering"

step "an orderly stop closes the page"
stop_prometheus
"$sup" stop --runtime-dir "$rt" >/dev/null 2>&1 || fail "stop"
wait "$sup_pid"
sup_pid=
curl -s --max-time 2 "http://127.0.0.1:$port/metrics" >/dev/null && fail "the page still answers after the stop"
echo "metrics integration: all steps passed"
