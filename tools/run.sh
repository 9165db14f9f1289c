#!/usr/bin/env bash
# `make run`: start Ignis in the foreground on the embedded default
# configuration (cpu backend, simulated device, the tiny dense model). The
# model file is written on the first run (build/models/tiny-dense.gguf,
# seeded random weights) unless IGNIS_CONFIG names a configuration of its
# own. Ctrl-C stops everything in order.
set -euo pipefail
build=${1:-build}
sup=$build/supervisor/ignis-supervisor
model=$build/models/tiny-dense.gguf
args=()
if [[ -z ${IGNIS_CONFIG:-} && -z ${IGNIS_MODEL:-} ]]; then
	if [[ ! -f $model ]]; then
		mkdir -p "$(dirname "$model")"
		"$build/tools/ignis-mkmodel" --preset tiny-dense -o "$model" --seed 1
	fi
	args=(--model "$model")
fi
cat >&2 <<TXT
Starting Ignis (events as JSON lines below; Ctrl-C stops everything).
In another terminal:
  $build/client/ignis-client generate --prompt hello          # tokens stream back
  make demo                                                 # agents, then an interactive request
  curl -s 127.0.0.1:9464/metrics | promtool check metrics   # the metrics page
  $sup status
  $sup stop
TXT
exec "$sup" start ${IGNIS_CONFIG:+-c "$IGNIS_CONFIG"} "${args[@]}"
