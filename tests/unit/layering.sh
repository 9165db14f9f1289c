#!/usr/bin/env bash
# The layout shows the architecture (docs/adr/0026): every project include
# names its component, and each component includes only the components
# below it. In particular the engine sees only the backend table: it
# reaches no backend's own code (gpu-worker/backend/cpu/, .../cuda/), no
# kernel (kernels/) and nothing of the kvstore daemon's (kvstore-daemon/),
# even through another header, since no component it may include may include
# those; the neutral half of the backends (gpu-worker/backend/, docs/adr/0045)
# reaches no backend's own code either; the CUDA kernels (kernels/) are a leaf over common/, reached by the
# cuda backend alone; the model library includes nothing of gpu-worker/; the
# KV-RAM object's byte layout (kvram/kvram_layout.h) is read by kvram/ and the
# daemon's index alone; the grammar engine (grammar/) is a leaf over common/
# that the engine (constrained sampling), the worker and the supervisor (a
# schema checked before it is sent) use. Fails naming the file, the line
# and the rule.
#   layering.sh SOURCE_ROOT       check the tree
#   layering.sh --self-test       check that each rule fails on a tree that
#                                 breaks it (a copy with one bad include), and
#                                 that the includes the table allows pass
set -uo pipefail

# component -> the components its files may include (itself always)
declare -A may=(
	[common]=''
	[proto]='common'
	[kvram]='common'
	[kernels]='common'
	[grammar]='common'
	[model]='common kvram'
	[gpu-worker/backend]='common proto model'
	[gpu-worker/backend/cpu]='common model gpu-worker/backend'
	[gpu-worker/backend/cuda]='common model gpu-worker/backend kernels'
	[gpu-worker/engine]='common proto kvram model grammar gpu-worker/backend'
	[gpu-worker]='common proto kvram model grammar gpu-worker/backend gpu-worker/engine'
	[kvstore-daemon]='common proto kvram'
	[supervisor]='common proto model grammar client'
	[client]='common proto'
)
# tests and tools may include any component (they test and measure them)
open_dirs='^(tests|tools)(/|$)'

sources() { # the tree's C, header and CUDA files, from the source root
	find common proto kvram kernels grammar model gpu-worker kvstore-daemon supervisor client tools tests \
		-type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null | sort
}

# "FILE:LINE:PATH" for each #include "PATH" of the FILEs: one awk over them
# all, so that the check forks a handful of processes, not two per file.
includes() {
	awk 'match($0, /^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"/) {
		s = substr($0, RSTART, RLENGTH)
		sub(/^[^"]*"/, "", s)
		sub(/"$/, "", s)
		print FILENAME ":" FNR ":" s
	}' "$@"
}

check() { # ROOT [FILE...] -> 0 when every rule holds in FILEs (default: all)
	local root=$1 bad=0 f d inc n comp allowed line rest
	local -a files
	shift
	cd "$root" || return 1
	if (($#)); then files=("$@"); else mapfile -t files < <(sources); fi
	while IFS= read -r line; do
		f=${line%%:*}
		rest=${line#*:}
		n=${rest%%:*}
		inc=${rest#*:}
		d=${f%/*}
		if [[ $inc != */* ]]; then
			[[ -f $d/$inc || $inc == version.h ]] && continue
			echo "FAIL: $f:$n: \"$inc\" is not in $d/: name its component (\"component/$inc\")" >&2
			bad=1
			continue
		fi
		if [[ ! -f $inc ]]; then
			echo "FAIL: $f:$n: \"$inc\" is no file of the tree (paths start at the source root)" >&2
			bad=1
			continue
		fi
		comp=${inc%/*}
		if [[ $inc == kvram/kvram_layout.h && $d != kvram && $f != kvstore-daemon/arena.c ]]; then
			echo "FAIL: $f:$n: the KV-RAM object's bytes are kvram/'s and the daemon's index's alone" >&2
			bad=1
		fi
		[[ $d =~ $open_dirs || $comp == "$d" ]] && continue
		if [[ -z ${may[$d]+set} ]]; then
			echo "FAIL: $f:$n: $d/ is no component of the layout table (tests/unit/layering.sh)" >&2
			bad=1
			continue
		fi
		allowed=" ${may[$d]} "
		if [[ $allowed != *" $comp "* ]]; then
			echo "FAIL: $f:$n: $d/ includes $inc: $d/ may include only ${may[$d]:-itself}" >&2
			bad=1
		fi
	done < <(includes "${files[@]}")
	return $bad
}

add_line() { # ROOT FILE LINE: a copy of the tree at ROOT gets LINE in FILE
	mkdir -p "$(dirname "$1/$2")" && printf '%s\n' "$3" >>"$1/$2"
}

# Each case checks only the file it changed: the rest of the copy is the
# tree, checked in full at the end.
self_test() { # each rule, broken once in a copy of the tree, fails the check
	local src=$1 tmp fails=0 case file line
	local cases=(
		'gpu-worker/engine/engine.h|#include "gpu-worker/backend/cpu/model_cpu.h"'
		'gpu-worker/engine/moves.c|#include "kvstore-daemon/arena.h"'
		'gpu-worker/engine/engine.c|#include "kernels/kernels.h"'
		'gpu-worker/backend/backend.h|#include "kernels/kernels.h"'
		'gpu-worker/backend/cpu/cpu_ops.c|#include "kernels/kernels.h"'
		'gpu-worker/backend/cuda/be_cuda.c|#include "gpu-worker/engine/engine.h"'
		'kernels/kernels.h|#include "gpu-worker/backend/backend.h"'
		'kernels/rmsnorm_f32.cu|#include "model/quant.h"'
		'gpu-worker/backend/decoder.c|#include "gpu-worker/backend/cpu/cpu_ops.h"'
		'model/seqimg.h|#include "gpu-worker/backend/kvpool.h"'
		'gpu-worker/engine/kvclient.c|#include "kvram/kvram_layout.h"'
		'gpu-worker/engine/engine.c|#include "err.h"'
		'supervisor/plan.c|#include "kvstore-daemon/kvdisk.h"'
		'grammar/matcher.c|#include "model/bpe.h"'
		'grammar/grammar.h|#include "gpu-worker/engine/engine.h"'
	)
	# includes the table allows: the cuda backend over the table and the
	# kernels, the kernels over common/
	local allowed=(
		'gpu-worker/backend/cuda/be_cuda.c|#include "gpu-worker/backend/backend.h"'
		'gpu-worker/backend/cuda/be_cuda.c|#include "kernels/kernels.h"'
		'kernels/rmsnorm_f32.cu|#include "common/err.h"'
		'grammar/matcher.c|#include "common/err.h"'
	)
	local copy=(common proto kvram kernels grammar model gpu-worker kvstore-daemon supervisor client)
	tmp=$(mktemp -d) || return 1
	trap 'rm -rf "$tmp"' RETURN
	for case in "${cases[@]}"; do
		file=${case%%|*}
		line=${case#*|}
		rm -rf "${tmp:?}"/*
		(cd "$src" && cp -r --parents "${copy[@]}" "$tmp"/)
		add_line "$tmp" "$file" "$line"
		if (check "$tmp" "$file") 2>/dev/null; then
			echo "FAIL: self-test: $file with $line passed the check" >&2
			fails=1
		fi
	done
	for case in "${allowed[@]}"; do
		file=${case%%|*}
		line=${case#*|}
		rm -rf "${tmp:?}"/*
		(cd "$src" && cp -r --parents "${copy[@]}" "$tmp"/)
		add_line "$tmp" "$file" "$line"
		if ! (check "$tmp" "$file") >/dev/null; then
			echo "FAIL: self-test: $file with $line, which the table allows, failed the check" >&2
			fails=1
		fi
	done
	(check "$src") || fails=1
	return $fails
}

if [[ ${1:-} == --self-test ]]; then
	src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
	self_test "$src" || exit 1
	echo "layering: every rule fails on a tree that breaks it"
	exit 0
fi
root=${1:?usage: layering.sh SOURCE_ROOT | --self-test [SOURCE_ROOT]}
(check "$root") || exit 1
echo "layering: every include names its component; each component includes only those below it"
