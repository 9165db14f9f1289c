#!/usr/bin/env bash
# `make run`: start Ignis in the foreground on the embedded default
# configuration (cpu backend, simulated device, the tiny dense model, whose
# seeded weights the supervisor writes into its runtime directory at each
# start), or on IGNIS_CONFIG's configuration, or on MODEL=file.gguf (`make
# run MODEL=...`). Ctrl-C stops everything in order.
set -euo pipefail
build=${1:-build}
sup=$build/supervisor/ignis-supervisor
args=()
[[ -n ${MODEL:-} ]] && args=(--model "$MODEL")
http=${IGNIS_SERVER_HTTP_BIND:-127.0.0.1:8000}
cat >&2 <<TXT
Starting Ignis (events as JSON lines below; Ctrl-C stops everything).
In another terminal:
  $build/client/ignis-client generate --prompt hello          # tokens stream back
  # OpenAI's API, streamed (the model's name from /v1/models):
  curl -sN $http/v1/completions -d "{\"model\": \"\$(curl -s $http/v1/models | jq -r '.data[0].id')\", \"prompt\": \"hello\", \"max_tokens\": 32, \"stream\": true}"
  make demo                                                 # agents, then an interactive request
  curl -s 127.0.0.1:9464/metrics | promtool check metrics   # the metrics page
  $sup status
  $sup stop
TXT
exec "$sup" start ${IGNIS_CONFIG:+-c "$IGNIS_CONFIG"} "${args[@]}"
