#!/usr/bin/env bash
# Integration: the Kubernetes manifests (etc/k8s/ignis.yaml). Their objects
# against the published schemas of Kubernetes and the Gateway API (npm:
# kubernetes-models, @kubernetes-models/gateway-api, pinned in tests/oracle),
# the InferencePool against the fields its API requires, the parts against
# each other (k8s-check.mjs); then the container's flags through the
# supervisor's own parser (`ignis-supervisor plan` with them, the model a
# file of the same kind, on a card the size of an H100's free memory), and
# the probes' paths answered by a running supervisor.
#   k8s.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=${1:?usage: k8s.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: k8s.sh BUILD_DIR SOURCE_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-k8s-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
mods=$src/.deps/oracle/node_modules

if ! command -v node >/dev/null || [[ ! -d $mods/kubernetes-models ]]; then
	echo "skipped: node or the pinned schema packages are missing (tools/install-oracle.sh)"
	exit 77
fi
step "the manifests against the published schemas, and against each other"
node "$(dirname "$0")/k8s-check.mjs" "$mods" "$src/etc/k8s/ignis.yaml" >"$work/check" ||
	fail "$(cat "$work/check")"
grep '^ok' "$work/check" | sed 's/^/   /'
read -ra args <<<"$(sed -n 's/^args //p' "$work/check")"

step "the container's flags, through the supervisor's parser"
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 -o "$work/model.gguf" \
	2>/dev/null || fail "mkmodel"
mapped=()
for a in "${args[@]}"; do
	case $a in
	--model=*) mapped+=("--model=$work/model.gguf") ;;
	--runtime-dir=*) mapped+=("--runtime-dir=$rt") ;;
	*) mapped+=("$a") ;;
	esac
done
"$sup" plan --json --device-free-bytes 80G "${mapped[@]}" >"$work/plan" 2>&1 ||
	fail "ignis-supervisor plan refused the container's flags: $(cat "$work/plan")"
jq -e 'select(.event == "ignis.runtime.vram_plan") | .cuda_context_bytes > 0' "$work/plan" \
	>/dev/null || fail "no plan for the cuda backend: $(cat "$work/plan")"

step "the probes' paths on a running supervisor: /health at once, /ready once the worker runs"
port=$(free_port)
"$sup" start --runtime-dir "$rt" --model "$work/model.gguf" --server-http-bind "127.0.0.1:$port" \
	>"$events" 2>&1 &
sup_pid=$!
wait_for 20 curl -sf "127.0.0.1:$port/health" || fail "/health never answered"
wait_for 30 curl -sf "127.0.0.1:$port/ready" || fail "/ready never said ready"
# the worker's figures are gathered every second: the gateway's names follow
gw() { curl -sf "127.0.0.1:$port/metrics" | grep -q '^vllm:kv_cache_usage_perc'; }
wait_for 10 gw || fail "/metrics on the API's port lacks the gateway's names"
echo "k8s: all steps passed"
