#!/usr/bin/env bash
# Integration: constrained decoding (docs/adr/0057) through the real
# supervisor, worker and kvstore daemon, on a tiny model that carries
# Qwen3's real chat template and vocabulary. OpenAI's own client sends
# json_schema answers (a corpus, each valid against its schema by ajv),
# json_object, its zod helper's structured answer and strict function,
# forced calls (required and named) valid against their tools' parameters
# and sent back as history, a forced call streamed and assembled by its
# stream helper (constrained-client.cjs). The nng door takes a grammar and
# a schema too (ignis-client), and refuses one it cannot compile naming
# the line and column. With synthetic weights the model chooses nothing by
# itself: every shape checked is the grammar's.
#   constrained.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: constrained.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
cli=$build/client/ignis-client
work=$(mktemp -d /tmp/ignis-constrained-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
http=$IGNIS_SERVER_HTTP_BIND
cfg=${IGNIS_QWEN3_TOKENIZER_CONFIG:-}
oai=${IGNIS_OPENAI_MODULE:-}
if [[ ! -f $cfg || ! -f $oai/package.json ]] || ! command -v node >/dev/null; then
	echo "skipped: the oracle is not installed (tools/install-oracle.sh)"
	exit 77
fi
mods=$(dirname "$oai")

m=$work/q3.gguf
"$build/tools/ignis-mkmodel" --preset tiny-dense --layout qwen3 --dtype q8_0 --seed 5 -o "$m" \
	--name qwen3-tools --chat-template "$cfg" 2>/dev/null || fail "mkmodel --chat-template"

step "the supervisor serves the API on $http"
"$sup" start --runtime-dir "$rt" --model "$m" --model-max-context 2048 --model-prefill-chunk 64 \
	>"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
wait_for 10 curl -sf "$http/ready" || fail "/ready never said ready"

step "OpenAI's client: schemas, json_object, zod, forced calls, a stream, refusals"
node "$(dirname "$0")/constrained-client.cjs" "$oai" "$http" qwen3-tools >"$work/node.out" 2>&1 ||
	fail "the client: $(cat "$work/node.out")"
cat "$work/node.out"
grep -q '"ignis.request.submitted".*"grammar":"grammar"' "$events" ||
	fail "no submit carried a grammar to the worker"

step "the nng door: a schema, a grammar, a trigger; the answers are theirs"
cat >"$work/s.json" <<'EOF'
{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string","maxLength":5},
 "e":{"enum":["x","y"]}},"required":["n","s","e"],"additionalProperties":false}
EOF
"$cli" --runtime-dir "$rt" generate --prompt "hi" --max-tokens 200 --seed 3 --temperature 0.7 \
	--json-schema "$work/s.json" >"$work/out.json" 2>"$work/err" || fail "schema: $(cat "$work/err")"
node -e '
const Ajv = require(process.argv[1] + "/ajv").default;
const fs = require("fs");
const check = new Ajv().compile(JSON.parse(fs.readFileSync(process.argv[2], "utf8")));
const v = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
if (!check(v)) { console.error(JSON.stringify(v), JSON.stringify(check.errors)); process.exit(1); }
' "$mods" "$work/s.json" "$work/out.json" || fail "the nng door's answer fails its schema: $(cat "$work/out.json")"
printf 'root ::= ( "yes" | "no" ) ( ", " ( "yes" | "no" ) ){0,3} "."\n' >"$work/g.txt"
for seed in 1 2 3; do
	got=$("$cli" --runtime-dir "$rt" generate --prompt "well?" --max-tokens 40 --seed $seed \
		--temperature 1 --grammar "$work/g.txt" 2>"$work/err") || fail "grammar: $(cat "$work/err")"
	[[ $got =~ ^(yes|no)(,\ (yes|no)){0,3}\.$ ]] || fail "seed $seed: '$got' is not the grammar's"
done
# free until the trigger, the grammar's after it
printf 'root ::= " " [0-9]{2}\n' >"$work/t.txt"
free=$("$cli" --runtime-dir "$rt" generate --prompt "go" --max-tokens 40 --json 2>/dev/null |
	jq -r 'select(.event == "tokens") | .text' | tr -d '\n')
# the trigger: the first ASCII letter or digit the model writes by itself
trig=$(LC_ALL=C grep -o '[A-Za-z0-9]' <<<"$free" | head -1)
[[ -n $trig ]] || fail "no letter or digit in the free text '$free'"
got=$("$cli" --runtime-dir "$rt" generate --prompt "go" --max-tokens 44 --grammar "$work/t.txt" \
	--grammar-trigger "$trig" 2>"$work/err") || fail "trigger: $(cat "$work/err")"
before=${got%%"$trig"*}
[[ $before != "$got" && ${got#"$before$trig"} =~ ^\ [0-9]{2}$ ]] ||
	fail "trigger '$trig': '$got' (free: '$free')"

step "the nng door refuses what it cannot compile, naming where"
printf 'root ::= "a" item\n' >"$work/bad.txt"
"$cli" --runtime-dir "$rt" generate --prompt "hi" --max-tokens 4 --grammar "$work/bad.txt" \
	>/dev/null 2>"$work/err" && fail "an undefined rule was taken"
grep -q "submit.grammar: grammar line 1 column 14: rule 'item' is used but never defined" \
	"$work/err" || fail "refusal: $(cat "$work/err")"
echo '{"type":"string","format":"uri"}' >"$work/bad.json"
"$cli" --runtime-dir "$rt" generate --prompt "hi" --max-tokens 4 --json-schema "$work/bad.json" \
	>/dev/null 2>"$work/err" && fail "a schema with format was taken"
grep -q "submit.json_schema: schema at /: 'format' is not supported" "$work/err" ||
	fail "refusal: $(cat "$work/err")"

kill -TERM "$sup_pid"
wait "$sup_pid"
sup_pid=
echo "PASS"
