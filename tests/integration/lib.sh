# lib.sh - what the integration scripts that start the whole system share.
# The script sets `work` (its temporary folder), `rt` (the runtime
# directory) and `events` (where the supervisor's events go) before sourcing
# this, and keeps the supervisor's pid in `sup_pid` while one runs; `arena`,
# when set, names a KV-RAM arena under /dev/shm to remove at the end.
sup_pid=
# The HTTP API takes as many connections as the descriptor limit allows
# (less a reserve): the supervisor and the load clients run with the hard
# limit, as an operator's service would.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# A TCP port nobody listens on (IPv4 or IPv6).
# A port nothing listens on or talks from, below the kernel's range of
# ephemeral ports: a port from inside that range can be taken, between this
# pick and our listen, by any outgoing connection on the machine (another
# test's curl), which is how a test once failed with "in use".
free_port() {
	local p hex lo
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
	((lo > 11024)) || lo=32768
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (lo - 10000)))
		hex=$(printf ':%04X ' "$p")
		grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null || { echo "$p"; return; }
	done
	return 1
}
# Every supervisor a script starts serves its metrics page on a port of its
# own, never the default 9464 (a developer's `make run`, another test): a
# script that means another address says so with the flag.
[[ -n ${IGNIS_SERVER_METRICS_BIND:-} ]] || export IGNIS_SERVER_METRICS_BIND="127.0.0.1:$(free_port)"
# ... and its HTTP API (--server-http-bind; default 127.0.0.1:8000)
[[ -n ${IGNIS_SERVER_HTTP_BIND:-} ]] || export IGNIS_SERVER_HTTP_BIND="127.0.0.1:$(free_port)"

it_cleanup() {
	[[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null
	pkill -9 -f -- "--runtime-dir $rt" 2>/dev/null
	[[ -n ${arena:-} ]] && rm -f "/dev/shm/$arena"
	rm -rf "$work"
}
trap it_cleanup EXIT

# Stop the test, with the events so far (pings left out).
fail() {
	echo "FAIL: $*" >&2
	echo "---- events ----" >&2
	grep -v '"ping"' "$events" >&2 2>/dev/null
	exit 1
}
step() { echo "-- $*"; }

# dump_stacks PID: where each thread of PID and of its children is (gdb's
# backtraces where gdb is installed, else each thread's kernel wait), for a
# process that hangs
dump_stacks() {
	local p t
	for p in "$1" $(pgrep -P "$1"); do
		echo "---- stacks of $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-120) (pid $p) ----" >&2
		if command -v gdb >/dev/null; then
			timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt' 2>&1 | grep -v '^\[New LWP' >&2
		else
			for t in /proc/"$p"/task/*; do
				echo "$(cat "$t/comm" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)" >&2
			done
		fi
	done
}

# wait_for SECONDS COMMAND...: poll every 50 ms until COMMAND succeeds
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS >= deadline)) && return 1
		sleep 0.05
	done
}

# count EVENT: how many such events so far
count() { grep -c "\"event\":\"$1\"" "$events"; }
