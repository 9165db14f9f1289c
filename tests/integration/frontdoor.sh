#!/usr/bin/env bash
# Integration: the supervisor's front door and ignis-client, on the tiny
# dense model, over ipc (the default socket) and tcp.
#   - ignis-client generate streams the same text as the request run in this
#     process (greedy and sampled); --ids equals the same prompt as text;
#     --json is one JSON object per event; stop strings cut the stream; the
#     door forwards the worker's text (token by token, the same as the
#     worker's own replies) and decodes nothing
#   - refusals are typed and name the field; hostile messages (malformed,
#     oversize, unknown or wrong types, a shutdown) get errors or are
#     dropped, and the door keeps serving; clients that vanish mid-connect
#     or mid-header do not take it down
#   - clients killed -9 mid-stream leave the others' streams intact
#   - 64 ignis-client processes and 200 client threads at once: every stream
#     complete and equal to the same request run alone; 300 threads fill the
#     worker's 128 slots (--server-max-requests 128; the default is 1024):
#     the rest wait (none refused) and get their streams
#   - a worker killed -9 ends the streams it ran with a clear error, no hang
#   - the lock beside the socket refuses a second door on the same path
#   frontdoor.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: frontdoor.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
gen=$build/tools/ignis-generate
cli=$build/client/ignis-client
probe=$build/tests/integration/fd-probe
load=$build/tests/integration/fd-load
tprobe=$build/tests/integration/text-probe
work=$(mktemp -d /tmp/ignis-frontdoor-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
. "$(dirname "$0")/lib.sh"
# a sanitized build: nng 1.5.2 leaks each wedged listener the guard closes
# (tests/lsan.supp says what and why); no effect on other builds
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")/.." && pwd)/lsan.supp"

model=$work/tiny.gguf
start_sup() {
	rm -rf "$rt"
	: >"$events"
	"$sup" start --runtime-dir "$rt" --model "$model" --model-kv-format bf16 --model-max-context 512 \
		--server-max-requests 128 --server-metrics-bind "127.0.0.1:$(free_port)" "$@" >"$events" 2>&1 &
	sup_pid=$!
	wait_for 30 grep -q '"ignis.supervisor.started"' "$events" || fail "no start: $(tail -3 "$events")"
}
stop_sup() {
	kill -TERM "$sup_pid"
	# a supervisor that does not stop: its threads' stacks, not a timeout
	wait_for 60 eval '! kill -0 "$sup_pid"' || { dump_stacks "$sup_pid"; fail "SIGTERM: still running after 60 s"; }
	wait "$sup_pid"
	local rc=$?
	sup_pid=
	[[ $rc == 0 ]] || fail "supervisor exited $rc"
}
serving() { "$cli" --server "$url" status >/dev/null 2>&1; }
# probe_is HEX WANT: the door answers HEX with a reply matching WANT
probe_is() {
	local out
	out=$("$probe" "$url" hex "$1")
	grep -q -- "$2" <<<"$out" || fail "$1: expected $2, got: $out"
}

"$build/tools/ignis-mkmodel" --preset tiny-dense -o "$model" --seed 7 2>/dev/null || fail "mkmodel"
prompts=("Exactly the same, please." "a" "The quick brown fox jumps over the lazy dog."
	"0123456789 0123456789 0123456789" "hello" "zz top" "ignis front door" "x y z")
# spec I: the arguments of request I (half greedy, half sampled)
spec() {
	local i=$1
	args=(--prompt "${prompts[$i]}" --max-tokens $((16 + 3 * i)) --seed $((i + 1)))
	((i % 2)) && args+=(--temperature 0.8 --top-p 0.9 --top-k 50)
	return 0
}
for i in "${!prompts[@]}"; do
	spec "$i"
	"$gen" --model "$model" "${args[@]}" >"$work/want.$i" || fail "in-process generate $i"
done
"$gen" --model "$model" --prompt "a long one" --max-tokens 300 --seed 9 >"$work/want.long" ||
	fail "in-process long generate"

step "ipc: the default socket and its lock, private to us"
start_sup
url="ipc://$rt/client.sock"
[[ -S $rt/client.sock ]] || fail "no $rt/client.sock"
[[ $(stat -c %a "$rt/client.sock") == 600 ]] || fail "socket mode $(stat -c %a "$rt/client.sock")"
[[ $(cat "$rt/client.lock") == "$sup_pid" ]] || fail "lock does not hold the supervisor's pid"
grep -q "\"ignis.frontdoor.listening\".*\"url\":\"$url\"" "$events" || fail "no listening event"

step "ipc: generate equals the request run alone in this process, greedy and sampled"
for i in 0 1 2 3; do
	spec "$i"
	"$cli" --runtime-dir "$rt" generate "${args[@]}" >"$work/got.$i" || fail "generate $i"
	cmp -s "$work/want.$i" "$work/got.$i" ||
		fail "request $i differs: $(od -c "$work/got.$i" | head -2) vs $(od -c "$work/want.$i" | head -2)"
done
[[ -s $work/got.0 ]] || fail "empty output"

step "--ids gives the same tokens as the text; --json is one object per event"
"$cli" --runtime-dir "$rt" generate --prompt "abc" --max-tokens 24 --json >"$work/text.json" || fail "json"
"$cli" --runtime-dir "$rt" generate --ids 97,98,99 --max-tokens 24 --json >"$work/ids.json" || fail "ids"
jq -e . "$work/text.json" >/dev/null || fail "--json is not JSON lines: $(head -3 "$work/text.json")"
[[ $(head -1 "$work/text.json" | jq -r .event) == submitted ]] || fail "first event not submitted"
[[ $(tail -1 "$work/text.json" | jq -r .event) == done ]] || fail "last event not done"
[[ $(tail -1 "$work/text.json" | jq -r .finish) == length ]] || fail "finish not length"
want_ids=$(jq -c 'select(.event=="tokens") | .ids[]' "$work/text.json" | tr '\n' ,)
got_ids=$(jq -c 'select(.event=="tokens") | .ids[]' "$work/ids.json" | tr '\n' ,)
[[ $(tr -cd , <<<"$want_ids" | wc -c) == 24 ]] || fail "24 tokens expected: $want_ids"
[[ $want_ids == "$got_ids" ]] || fail "--ids differs from the text: $got_ids vs $want_ids"
froms=$(jq -r 'select(.event=="tokens") | "\(.from) \(.ids|length)"' "$work/text.json" |
	awk 'BEGIN{n=0} {if ($1 != n) bad=1; n += $2} END{print bad ? "gap" : n}')
[[ $froms == 24 ]] || fail "token events overlap or leave gaps: $froms"

step "a stop string ends the stream before it, and is left out"
mapfile -t ids < <(jq -c 'select(.event=="tokens") | .ids[]' "$work/text.json")
k=-1
for ((j = 3; j + 1 < ${#ids[@]}; j++)); do
	a=${ids[$j]} b=${ids[$((j + 1))]}
	if ((a >= 33 && a < 127 && b >= 33 && b < 127)); then
		stop=$(printf "\\x$(printf %02x "$a")\\x$(printf %02x "$b")")
		prefix=$(printf '%s,' "${ids[@]:0:$j}")
		# the first occurrence of the pair must be at j
		[[ ",$prefix" != *",$a,$b,"* ]] && { k=$j; break; }
	fi
done
if ((k >= 0)); then
	"$cli" --runtime-dir "$rt" generate --prompt "abc" --max-tokens 24 --stop "$stop" --json \
		>"$work/stop.json" || fail "stop generate"
	got=$(jq -c 'select(.event=="tokens") | .ids[]' "$work/stop.json" | tr '\n' ,)
	[[ $got == "$(printf '%s,' "${ids[@]:0:$k}")" ]] ||
		fail "stop '$stop' at $k: got $got from $want_ids"
	[[ $(tail -1 "$work/stop.json" | jq -r .finish) == stop ]] || fail "finish not stop"
else
	echo "   (no printable pair in this model's output: stop strings not checked)"
fi

step "the door forwards the worker's text: token by token, the worker's own replies"
# one token a poll on both sockets: the same ids and, reply for reply, the
# same text (the door splits what it got with the worker's text ends)
targs=(--prompt hello --max-tokens 120 --temperature 1 --seed 4)
"$tprobe" worker "$rt" "${targs[@]}" >"$work/tw.jsonl" || fail "text-probe worker"
"$tprobe" door "$url" "${targs[@]}" >"$work/td.jsonl" || fail "text-probe door"
cmp -s <(jq -c '[.from, .ids, .text]' "$work/tw.jsonl") <(jq -c '[.from, .ids, .text]' "$work/td.jsonl") ||
	fail "the door's text differs from the worker's: $(diff <(jq -c '[.from, .ids, .text]' "$work/tw.jsonl") <(jq -c '[.from, .ids, .text]' "$work/td.jsonl") | head -4)"
"$tprobe" door "$url" "${targs[@]}" --poll-max 7 >"$work/td7.jsonl" || fail "text-probe door, 7 a poll"
[[ $(jq -r .text "$work/td7.jsonl" | tr -d '\n') == $(jq -r .text "$work/tw.jsonl" | tr -d '\n') ]] ||
	fail "the door's text, 7 tokens a poll, is not the worker's"

step "refusals are typed and name the field; the door keeps serving"
out=$("$cli" --runtime-dir "$rt" generate --ids 1,2,999 --max-tokens 3 2>&1) && fail "token 999 accepted"
grep -q "prompt\[2\]: token 999 is outside the vocabulary" <<<"$out" || fail "unclear: $out"
long=$(head -c 600 /dev/zero | tr '\0' 'x')
out=$("$cli" --runtime-dir "$rt" generate --prompt "$long" 2>&1) && fail "600 tokens accepted in 512"
grep -q "context is 512" <<<"$out" || fail "unclear context refusal: $out"
out=$("$cli" --runtime-dir "$rt" generate --prompt hi --top-p 0 --json 2>/dev/null) && fail "top_p 0 accepted"
[[ $(jq -r .name <<<"$out") == IG_E_INVAL && $(jq -r .message <<<"$out") == *top_p* ]] ||
	fail "top_p refusal: $out"
"$cli" --runtime-dir "$rt" generate --prompt hi --class batch 2>/dev/null
[[ $? == 2 ]] || fail "--class batch: not a usage error"
out=$("$cli" --runtime-dir "$rt" cancel 424242 2>&1) && fail "cancel of an unknown id succeeded"
grep -q "no request 424242" <<<"$out" || fail "unclear cancel refusal: $out"
"$cli" --runtime-dir "$rt" generate --prompt "${prompts[0]}" --max-tokens 16 --seed 1 >"$work/again" ||
	fail "no generate after refusals"
cmp -s "$work/again" "$work/want.0" || fail "different tokens after refusals"

step "hostile messages: errors or dropped, never a crash"
vh=$(printf '%02x' "$("$probe" version)")
probe_is c1 "code=IG_E_PROTO_MALFORMED"
probe_is "83a17463a176${vh}a373657100" "code=IG_E_PROTO_UNKNOWN_TYPE"
probe_is "83a17402a1767fa373657100" "code=IG_E_PROTO_VERSION"
probe_is "83a17407a176${vh}a373657100" "code=IG_E_PROTO_UNEXPECTED"
probe_is "83a17404a176${vh}a6726561736f6ea0" "code=IG_E_PROTO_UNEXPECTED" # shutdown: not here
probe_is "83a1742aa176${vh}a2696401" "code=IG_E_PROTO_MISSING_FIELD"     # fd_poll, id only
probe_is "83a1742ca176${vh}a26964a178" "code=IG_E_PROTO_FIELD_TYPE"       # fd_cancel id "x"
probe_is "83a17402a176${vh}a373657101" "type=pong"
out=$("$probe" "$url" size 270000)
grep -q "no-reply" <<<"$out" || fail "a 270000-byte message got a reply: $out"
wait_for 15 serving || fail "the door stopped serving after hostile messages"
grep -q '"ignis.proto.rejected".*client.sock' "$events" || fail "no rejected event"
kill -0 "$sup_pid" || fail "the supervisor died"

step "a flood of malformed messages: each answered and counted, a few logged"
before=$(grep -c '"ignis.proto.rejected".*client.sock' "$events")
out=$("$probe" "$url" flood 2000 c1) || fail "flood: $out"
[[ $out == "2000 sent, 2000 answered with an error" ]] || fail "flood: $out"
after=$(grep -c '"ignis.proto.rejected".*client.sock' "$events")
(( after - before <= 5 )) || fail "the flood wrote $((after - before)) rejected events (5 a period at most)"
mport=$(grep -o '"ignis.supervisor.starting".*' "$events" | grep -o '"metrics":"[^"]*"' | cut -d'"' -f4)
flood_counted() {
	curl -s "http://$mport/metrics" |
		awk '/^ignis_proto_rejected_total\{socket="client"\}/ { found = 1; ok = $2 >= 2000 }
		     END { exit !(found && ok) }'
}
wait_for 5 flood_counted ||
	fail "ignis_proto_rejected_total{socket=client} does not count the flood: $(curl -s "http://$mport/metrics" | grep proto_rejected)"
# the daemons count theirs too, and the page shows them (gathered each second)
for s in gpu-worker kvstore; do
	out=$("$probe" "ipc://$rt/$s.sock" flood 50 c1) || fail "$s flood: $out"
	daemon_counted() {
		curl -s "http://$mport/metrics" |
			awk -v s="$1" '$1 == "ignis_proto_rejected_total{socket=\"" s "\"}" { found = 1; ok = $2 >= 50 }
			     END { exit !(found && ok) }'
	}
	wait_for 5 daemon_counted "$s" ||
		fail "ignis_proto_rejected_total{socket=$s} does not count 50: $(curl -s "http://$mport/metrics" | grep proto_rejected)"
done
# (the page captured first: with pipefail, `curl | grep -q` fails when grep's
# early exit leaves curl writing to a closed pipe)
page=$(curl -s "http://$mport/metrics")
grep -q '^ignis_kv_moves_stopped_total 0$' <<<"$page" ||
	fail "no ignis_kv_moves_stopped_total on the page"
wait_for 15 grep -q '"ignis.proto.rejected_summary".*client.sock.*"code":"IG_E_PROTO_MALFORMED"' "$events" ||
	fail "no summary of the rejections left out"
grep '"ignis.proto.rejected_summary".*client.sock' "$events" | tail -1 | jq -e '.count >= 1995' >/dev/null ||
	fail "the summary does not count what was left out: $(grep rejected_summary "$events" | tail -1)"

step "clients that vanish mid-connect or mid-header cannot take the door down"
"$probe" "$url" vanish 5 >/dev/null || fail "could not connect"
"$probe" "$url" half 5 >/dev/null || fail "could not connect"
wait_for 20 serving || fail "the door stopped serving after vanished clients"
"$cli" --runtime-dir "$rt" generate --prompt "${prompts[1]}" --max-tokens 19 --seed 2 \
	--temperature 0.8 --top-p 0.9 --top-k 50 >"$work/after-vanish" || fail "generate after vanish"
cmp -s "$work/after-vanish" "$work/want.1" || fail "different tokens after vanished clients"

step "a wedge again and again: each cured in a fraction of a second, other streams whole"
wedges_from=$(($(wc -l <"$events") + 1)) # the log's lines from here on
pids=()
for i in 0 1 2 3; do
	"$cli" --runtime-dir "$rt" generate --prompt "a long one" --max-tokens 300 --seed 9 \
		>"$work/under-wedge.$i" &
	pids+=($!)
done
wait_for 20 test -s "$work/under-wedge.0" || fail "no stream began"
out=$("$probe" "$url" wedge 30) || fail "client.sock: $out"
echo "   client.sock: $out"
out=$("$probe" "ipc://$rt/supervisor.sock" wedge 10) || fail "supervisor.sock: $out"
echo "   supervisor.sock: $out"
for i in 0 1 2 3; do
	wait "${pids[$i]}" || fail "stream $i failed under the wedges"
	cmp -s "$work/under-wedge.$i" "$work/want.long" || fail "stream $i differs under the wedges"
done
# Each cured, and the log bounded: 5 events in full a period, then a summary
# (EV_LIMIT_BURST, EV_LIMIT_PERIOD_MS). The vanished clients above wedged it
# too, and a slow (sanitized) run gets here after their period is over and
# this one's 5 come on top of theirs, so the bound is checked a period at a
# time: the events are replayed through the limiter. A period starts with an
# event written in full and lasts 10 s; the first written after it starts the
# next. (The limiter reads the monotonic clock and the events carry the wall
# clock to the ms: 20 ms spared at the boundary.) Without the limit, the 30
# wedges write 20 and more within a second or two.
recreated() { # client.sock's re-creations and their summaries, in order, as JSON
	grep -E '"ignis.proto.listener_recreated(_summary)?".*client.sock' "$events" |
		jq -c 'select(.error == null) | .ms = ((.ts | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) * 1000 +
			(.ts | capture("\\.(?<f>[0-9]+)Z$").f | tonumber))'
}
per_period=$(recreated | jq -s '[.[] | select(.event == "ignis.proto.listener_recreated") | .ms] |
	reduce .[] as $t ({n: 0, max: 0};
		if .start == null or $t - .start >= 10000 - 20 then .start = $t | .n = 1 else .n += 1 end |
		.max = ([.max, .n] | max)) | .max')
((per_period >= 1 && per_period <= 5)) ||
	fail "$per_period listener_recreated events for client.sock in one period (1 to 5)"
left_out() { tail -n "+$wedges_from" "$events" | grep -q '"ignis.proto.listener_recreated_summary".*client.sock'; }
wait_for 15 left_out || fail "no summary of the re-creations left out of the log"
# the cures the log accounts for: the last summary's total, and those written
# in full since (the ones held back since come in the next summary)
cures() { recreated | jq -s 'reduce .[] as $e (0;
	if $e.event == "ignis.proto.listener_recreated_summary" then $e.total else . + 1 end)'; }
cured_20() { (($(cures) >= 20)); }
wait_for 15 cured_20 || fail "fewer than 20 re-creations for 30 wedges: $(cures) in the log"
"$sup" status --runtime-dir "$rt" >/dev/null || fail "ignis-supervisor status after the wedges"

step "clients killed -9 mid-stream: the others' streams are whole"
pids=()
for i in 0 1 2 3; do
	"$cli" --runtime-dir "$rt" generate --prompt "a long one" --max-tokens 300 --seed 9 \
		>"$work/steady.$i" &
	pids+=($!)
done
victims=()
for i in 0 1 2 3; do
	"$cli" --runtime-dir "$rt" generate --prompt "victim $i" --max-tokens 300 >"$work/victim.$i" &
	victims+=($!)
done
for i in 0 1 2 3; do
	wait_for 20 test -s "$work/victim.$i" || fail "victim $i streamed nothing"
done
kill -9 "${victims[@]}"
for i in 0 1 2 3; do
	wait "${pids[$i]}" || fail "steady client $i failed"
	cmp -s "$work/steady.$i" "$work/want.long" || fail "steady client $i differs after the kills"
done
serving || fail "the door stopped serving after clients were killed"

step "64 ignis-client processes at once: each equals its request run alone"
pids=()
for n in $(seq 0 63); do
	i=$((n % 8))
	spec "$i"
	cls=interactive; ((n % 3 == 0)) && cls=agent
	"$cli" --runtime-dir "$rt" generate --class "$cls" "${args[@]}" >"$work/many.$n" 2>"$work/many.$n.err" &
	pids+=($!)
done
for n in $(seq 0 63); do
	wait "${pids[$n]}" || fail "client $n failed: $(cat "$work/many.$n.err")"
	cmp -s "$work/many.$n" "$work/want.$((n % 8))" || fail "client $n differs from request $((n % 8)) alone"
done

step "200 client threads at once, then 300 over the worker's 128 slots (the rest wait)"
refused0=$("$cli" --runtime-dir "$rt" status --json | jq .frontdoor.refused)
"$load" "$url" 200 16 || fail "200 concurrent clients"
# 400 tokens each: the first 128 are still running when the last clients
# come on a loaded machine (64 each: one CI emulation saw them finish
# faster than 300 threads connected, so nobody waited)
"$load" "$url" 300 400 fill || fail "300 clients over 128 slots"
st=$("$cli" --runtime-dir "$rt" status --json) || fail "status --json"
(($(jq .frontdoor.slot_waits <<<"$st") > 0)) || fail "no submit waited for a slot: $st"
(($(jq .frontdoor.refused <<<"$st") == refused0)) || fail "requests were refused: $st"
[[ $(jq -r .model.name <<<"$st") == tiny-dense && $(jq -r .model.tokenizer <<<"$st") == bytes ]] ||
	fail "model description: $st"

step "a worker killed -9 mid-stream: the stream ends with a clear error, no hang"
"$cli" --runtime-dir "$rt" generate --prompt "a long one" --max-tokens 480 --seed 9 \
	>"$work/cut" 2>"$work/cut.err" &
cut_pid=$!
wait_for 20 test -s "$work/cut" || fail "nothing streamed before the kill"
wpid=$(grep '"ignis.gpu_worker.model_loaded"' "$events" | tail -1 | jq -r .pid)
kill -9 "$wpid"
start=$SECONDS
wait "$cut_pid"
rc=$?
((rc == 1)) || fail "the client exited $rc after its worker died"
((SECONDS - start < 15)) || fail "the client took $((SECONDS - start)) s to learn its worker died"
grep -q "gpu-worker (pid $wpid).*lost after" "$work/cut.err" || fail "unclear: $(cat "$work/cut.err")"
loaded_twice() { [[ $(count ignis.gpu_worker.model_loaded) -ge 2 ]]; }
wait_for 30 loaded_twice || fail "the worker did not come back"
"$cli" --runtime-dir "$rt" generate --prompt "${prompts[0]}" --max-tokens 16 --seed 1 >"$work/after-kill" ||
	fail "generate after the worker restart"
cmp -s "$work/after-kill" "$work/want.0" || fail "different tokens after the worker restart"
st=$("$cli" --runtime-dir "$rt" status --json)
(($(jq .frontdoor.worker_restarts <<<"$st") >= 1 && $(jq .frontdoor.failed <<<"$st") >= 1)) ||
	fail "restart not counted: $st"

step "meson install: header, library and pkg-config file; a program built on them alone streams"
meson install -C "$build" --no-rebuild --destdir "$work/inst" >"$work/install.log" 2>&1 ||
	fail "meson install: $(tail -3 "$work/install.log")"
pc=$(find "$work/inst" -name ignis-client.pc | head -1)
[[ -n $pc ]] || fail "no ignis-client.pc installed"
cat >"$work/example.c" <<'C'
#include <stdio.h>
#include <ignis_client.h>
int main(int argc, char **argv)
{
	struct igc_client *c;
	struct igc_error err;
	struct igc_params p;
	struct igc_submitted sub;
	struct igc_stream *s;
	struct igc_chunk ch;

	if (argc != 2 || igc_connect(&c, argv[1], NULL, &err))
		return 1;
	igc_params_init(&p);
	p.text = "Exactly the same, please.";
	p.max_tokens = 16;
	p.seed = 1;
	if (igc_submit(c, &p, &sub, &err) || igc_stream_open(c, sub.id, &s, &err))
		return fprintf(stderr, "%s\n", err.message), 1;
	do {
		if (igc_stream_next(s, 1000, &ch, &err))
			return fprintf(stderr, "%s\n", err.message), 1;
		fwrite(ch.text, 1, ch.text_len, stdout);
	} while (!ch.done);
	putchar('\n');
	igc_stream_close(s);
	igc_close(c);
	return 0;
}
C
export PKG_CONFIG_SYSROOT_DIR=$work/inst PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(dirname "$(dirname "$pc")")
# a sanitized build's library needs the same runtime in the program
san=$(meson introspect "$build" --buildoptions | jq -r '.[] | select(.name == "b_sanitize") | .value')
[[ $san == none || -z $san ]] && san= || san=-fsanitize=$san
cc $san -o "$work/example" "$work/example.c" $(pkg-config --cflags --libs ignis-client) ||
	fail "cannot build a program with pkg-config ignis-client"
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH
LD_LIBRARY_PATH=$libdir "$work/example" "$url" >"$work/example.out" 2>&1 ||
	fail "the installed example failed: $(cat "$work/example.out")"
# (captured first: with pipefail, `ldd | grep -q` fails when grep's early
# exit makes ldd die of SIGPIPE)
linked=$(LD_LIBRARY_PATH=$libdir ldd "$work/example")
grep -q "=> $libdir/libignis-client.so.0" <<<"$linked" ||
	fail "not linked to the installed library: $linked"
cmp -s "$work/example.out" "$work/want.0" || fail "the installed example streamed other tokens"

step "the lock beside the socket refuses a second door on the same path"
out=$("$sup" start --runtime-dir "$work/rt2" --model "$model" --server-bind "$url" \
	--server-metrics-bind "127.0.0.1:$(free_port)" 2>&1) && fail "a second door started on $url"
grep -q "held by a running process (pid $sup_pid)" <<<"$out" || fail "unclear refusal: $out"
serving || fail "the first door stopped serving"

step "SIGTERM: the socket and its lock are gone"
stop_sup
[[ ! -e $rt/client.sock && ! -e $rt/client.lock ]] || fail "left: $(ls "$rt")"

step "tcp: the same over tcp://127.0.0.1"
port=$(free_port)
url="tcp://127.0.0.1:$port"
start_sup --server-bind "$url"
[[ ! -e $rt/client.sock ]] || fail "an ipc socket beside a tcp door"
for i in 0 1; do
	spec "$i"
	"$cli" --server "$url" generate "${args[@]}" >"$work/tcp.$i" || fail "tcp generate $i"
	cmp -s "$work/tcp.$i" "$work/want.$i" || fail "tcp request $i differs"
done
IGNIS_SERVER_BIND=$url "$cli" generate --prompt "${prompts[0]}" --max-tokens 16 --seed 1 >"$work/tcp.env" ||
	fail "IGNIS_SERVER_BIND"
cmp -s "$work/tcp.env" "$work/want.0" || fail "IGNIS_SERVER_BIND: different tokens"
probe_is c1 "code=IG_E_PROTO_MALFORMED"
"$probe" "$url" vanish 5 >/dev/null || fail "could not connect over tcp"
"$probe" "$url" half 5 >/dev/null || fail "could not connect over tcp"
wait_for 20 serving || fail "the tcp door stopped serving after vanished clients"
out=$("$probe" "$url" wedge 10) || fail "tcp: $out"
echo "   tcp: $out"
"$load" "$url" 64 16 || fail "64 concurrent tcp clients"
stop_sup

step "tcp: a non-loopback address is refused unless --server-allow-remote says so"
for bind in "tcp://0.0.0.0:$port" "tcp://*:$port" "tcp://[::]:$port"; do
	out=$("$sup" start --runtime-dir "$work/rt3" --model "$model" --server-bind "$bind" \
		--server-metrics-bind "127.0.0.1:$(free_port)" 2>&1)
	rc=$?
	[[ $rc == 2 ]] || fail "$bind: exit $rc, expected 2 (a configuration error): $out"
	grep -qF -- "--server-bind '$bind' is not a loopback address" <<<"$out" &&
		grep -qF -- "or give --server-allow-remote" <<<"$out" || fail "$bind: unclear refusal: $out"
	[[ ! -e $work/rt3 ]] || fail "$bind: the refused start created its runtime directory"
done
start_sup --server-bind "tcp://localhost:$port"
serving() { "$cli" --server "tcp://127.0.0.1:$port" status >/dev/null 2>&1; }
wait_for 20 serving || fail "tcp://localhost: not serving"
stop_sup
start_sup --server-bind "tcp://0.0.0.0:$port" --server-allow-remote
wait_for 20 serving || fail "--server-allow-remote: not serving on 0.0.0.0"
stop_sup
echo "frontdoor integration: all steps passed"
