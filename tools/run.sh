#!/usr/bin/env bash
# `make run`: start Ignis in the foreground on the embedded default
# configuration (cpu backend, simulated device). Ctrl-C stops it in order.
set -euo pipefail
build=${1:-build}
sup=$build/supervisor/ignis-supervisor
cat >&2 <<TXT
Starting Ignis (events as JSON lines below; Ctrl-C stops everything).
In another terminal:
  $sup status
  $sup stop
TXT
exec "$sup" start ${IGNIS_CONFIG:+-c "$IGNIS_CONFIG"}
