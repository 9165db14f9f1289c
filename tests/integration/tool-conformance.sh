#!/usr/bin/env bash
# Integration: a tool-call conformance table, in the spirit of llama.cpp's
# tools/server/tests (issue 30, item 6): for each template family we serve,
# a tiny model carrying that family's real chat template runs the same
# cases through OpenAI's own client (tool-conformance.cjs): a required
# call, a named call, two parallel calls, nested object and array
# arguments, union-typed arguments (docs/adr/0062), a streamed call
# assembled by the client's stream helper, and a tool result sent back
# whose next turn is the template's own text (the Jinja engine's prompt,
# token for token). Every call validates against its tool's schema (ajv).
# One row per family and case; any mismatch fails the test.
#   Qwen3 (Hermes JSON)  the oracle's tokenizer_config.json
#   Qwen3.5 (XML)        llama.cpp's Qwen3.5-4B.jinja
#   Qwen3-Coder (XML)    llama.cpp's Qwen3-Coder.jinja
# Qwen3-Next writes Qwen3's Hermes form and is not in the oracle apart.
# With synthetic weights the model chooses nothing by itself: the calls
# are forced (tool_choice required or named) and every shape is the
# grammar's; strings are bounded so that a call ends within max_tokens.
#   tool-conformance.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: tool-conformance.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
work=$(mktemp -d /tmp/ignis-tool-conformance-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
cfg=${IGNIS_QWEN3_TOKENIZER_CONFIG:-}
tdir=${IGNIS_LLAMA_TEMPLATES:-}
jinja=${IGNIS_JINJA_MODULE:-}
oai=${IGNIS_OPENAI_MODULE:-}
if [[ ! -f $cfg || ! -f $tdir/Qwen3.5-4B.jinja || ! -f $tdir/Qwen3-Coder.jinja || ! -f $jinja ||
	! -f $oai/package.json || ! -f $(dirname "$oai")/ajv/package.json ]] || ! command -v node >/dev/null; then
	echo "skipped: the oracle is not installed (tools/install-oracle.sh)"
	exit 77
fi

rc=0
for fam in "qwen3 $cfg" "qwen3.5 $tdir/Qwen3.5-4B.jinja" "qwen3-coder $tdir/Qwen3-Coder.jinja"; do
	name=${fam%% *} tmpl=${fam#* }
	m=$work/$name.gguf
	"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
		--name "$name" --chat-template "$tmpl" 2>/dev/null || fail "mkmodel --chat-template $tmpl"
	step "$name: the supervisor serves its template on $http"
	: >"$events"
	"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 2048 --model-prefill-chunk 256 \
		>"$events" 2>&1 &
	sup_pid=$!
	wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "$name: no start"
	wait_for 10 curl -sf "$http/ready" || fail "$name: /ready never said ready"
	node "$(dirname "$0")/tool-conformance.cjs" "$oai" "$http" "$name" "$jinja" "$tmpl" \
		"$(dirname "$0")/../unit/jinja-render.cjs" "$build/tools/ignis-vocab" "$m" || rc=1
	kill -TERM "$sup_pid"
	wait "$sup_pid"
	sup_pid=
done
echo "qwen3-next: its template writes Qwen3's Hermes form (the qwen3 rows); not in the oracle apart"
((rc == 0)) || fail "a case does not conform (the rows above)"
echo "tool-conformance: ok"
