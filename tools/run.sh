#!/usr/bin/env bash
# `make run`: start Ignis in the foreground on the embedded default
# configuration (cpu backend, simulated device, tiny-chat: a tiny model with a
# chat template, whose seeded weights the supervisor writes into its runtime
# directory at each start), or on IGNIS_CONFIG's configuration, with the
# arguments after BUILD added to `ignis-supervisor start` (what `make run`
# passes: -c CONFIG and the knobs' make variables as flags, tools/knobs.mk).
# The first line it prints is a chat request (tests/integration/
# default-chat.sh runs it). Ctrl-C stops everything in order.
#   tools/run.sh [BUILD [ignis-supervisor start arguments...]]
set -euo pipefail
build=${1:-build}
(($#)) && shift
sup=$build/supervisor/ignis-supervisor
http=${IGNIS_SERVER_HTTP_BIND:-127.0.0.1:8000}
# the lines' model name, asked of the API when they run: \"$(curl ... | jq ...)\"
model="\\\"\$(curl -s $http/v1/models | jq -r '.data[0].id')\\\""
cat >&2 <<TXT
Starting Ignis (events as JSON lines below; Ctrl-C stops everything).
In another terminal, OpenAI's API (the model's name from /v1/models), a chat:
  curl -s $http/v1/chat/completions -H 'Content-Type: application/json' -d "{\"model\": $model, \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}], \"max_tokens\": 32}"
  # a completion, streamed (also for a model file without a chat template):
  curl -sN $http/v1/completions -H 'Content-Type: application/json' -d "{\"model\": $model, \"prompt\": \"hello\", \"max_tokens\": 32, \"stream\": true}"
  $build/client/ignis-client generate --prompt hello          # the nng door: tokens stream back
  make demo                                                 # agents, then an interactive request
  curl -s 127.0.0.1:9464/metrics | promtool check metrics   # the metrics page
  $sup status
  $sup stop
TXT
exec "$sup" start ${IGNIS_CONFIG:+-c "$IGNIS_CONFIG"} "$@"
