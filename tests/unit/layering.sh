#!/usr/bin/env bash
# The engine sees only the backend table: neither it nor anything it
# includes, transitively, includes a particular backend's headers (the cpu
# backend's kernels, thread pool, layers and decoder; the cuda kernels) or the
# kvstore daemon's private code (its arena, KV-disk, copy routines). The
# daemon's wire contract (proto/) and the model facts (common/) are shared
# and allowed. Fails naming the include chain.
#   layering.sh SOURCE_ROOT
set -uo pipefail
root=${1:?usage: layering.sh SOURCE_ROOT}
cd "$root" || exit 1

dirs=(gpu-worker common proto kvstore-daemon kernels)
# a particular backend's headers (gpu-worker/, by name) and private trees
backend_private='^(cpu_ops|cpu_pool|model_cpu|layer_ffn|layer_full|layer_linear|kvfmt|copier)\.h$'

resolve() { # NAME -> the path of the project header it names, or nothing
	local d
	for d in "${dirs[@]}"; do
		[[ -f $d/$1 ]] && { echo "$d/$1"; return; }
	done
}

bad=0
declare -A seen
walk() { # FILE CHAIN
	local f=$1 chain=$2 inc path
	while read -r inc; do
		path=$(resolve "$inc")
		[[ -n $path ]] || continue # a system header
		if [[ $path == kvstore-daemon/* || $path == kernels/* ]]; then
			echo "FAIL: $chain -> $path: the engine reaches the kvstore daemon's or a kernel's private code" >&2
			bad=1
		elif [[ $path == gpu-worker/* && $inc =~ $backend_private ]]; then
			echo "FAIL: $chain -> $path: the engine reaches a backend's own header" >&2
			bad=1
		fi
		[[ -n ${seen[$path]:-} ]] && continue
		seen[$path]=1
		walk "$path" "$chain -> $path"
	done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
}

for f in gpu-worker/engine.c gpu-worker/engine.h gpu-worker/moves.c gpu-worker/roundplan.c; do
	walk "$f" "$f"
done
((bad)) && exit 1
echo "the engine includes no backend's own header and no kvstore daemon private code (${#seen[@]} headers walked)"
