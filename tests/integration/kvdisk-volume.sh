#!/usr/bin/env bash
# Integration: KV-disk on a filesystem without fallocate (a loop-mounted ext2
# image), the volume filled by another process after the daemon started
# (issue 26, item 7). Writes through LMDB's map to pages the volume cannot
# back were a SIGBUS that killed the daemon; here a full volume must be an
# error the tier reports ("tier full", naming the path and what it could not
# back), the daemon alive, every sequence acknowledged before it served
# byte for byte, and puts taken again once room is freed. Blocks the tier
# reserved before the volume filled stay its own: puts into them succeed
# with the volume at 0 bytes free.
#
# Needs root, mkfs.ext2 and a loop device; without them it exits 77
# (skipped), saying why.
#   kvdisk-volume.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: kvdisk-volume.sh BUILD_DIR}
sup=$build/supervisor/ignis-supervisor
ctl=$build/kvstore-daemon/ignis-kvstore-ctl
skip() {
	echo "SKIP: $*"
	exit 77
}
[[ $(id -u) == 0 ]] || skip "not root: cannot mount a loop device"
for t in mkfs.ext2 mount umount mountpoint fallocate jq; do
	command -v "$t" >/dev/null || skip "no $t"
done
work=$(mktemp -d /tmp/ignis-kvvol-XXXXXX)
rt=$work/rt
events=$work/events.jsonl
mnt=$work/mnt
. "$(dirname "$0")/lib.sh"

# The daemons go first (they hold files on the volume), then the mount (its
# loop device is freed with it: mount -o loop sets autoclear), then the rest;
# on every exit, failures included.
vol_cleanup() {
	[[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null
	pkill -9 -f -- "--runtime-dir $rt" 2>/dev/null
	if mountpoint -q "$mnt" 2>/dev/null; then
		for _ in $(seq 50); do
			umount "$mnt" 2>/dev/null && break
			sleep 0.1
		done
		mountpoint -q "$mnt" && umount -l "$mnt"
	fi
	it_cleanup
}
trap vol_cleanup EXIT

k() { timeout 60 "$ctl" --runtime-dir "$rt" "$@"; }
kv_pid() { grep '"event":"ignis.kvstore.tiers"' "$events" | tail -1 | jq -r .pid; }
stat_of() { k stats --json | jq -r ".$1"; }
avail_kib() { df -k --output=avail "$mnt" | tail -1 | tr -d ' '; }
# sequence SEQ's image: 8 MiB, its own (its number first, so every window
# differs from every other sequence's). 8 MiB: each read back takes a
# staging window (the daemon has 16), so fewer than 16 go to disk.
img() {
	[[ -e $work/s.$1 ]] || { printf '%08d' "$1"; head -c $((8 * 1024 * 1024 - 8)) "$work/eight"; } >"$work/s.$1"
	echo "$work/s.$1"
}
# put SEQ to KV-RAM, then move it to KV-disk (kvdisk_put); the ctl's output
# in $out
put_demote() {
	out=$(k put "$1" "$(img "$1")" --window 262144 2>&1) || return 2
	out=$(k demote "$1" 2>&1)
}
# the daemon has not died since it first started (no restart, no signal)
still_alive() {
	local why=$1
	kill -0 "$pid0" 2>/dev/null || fail "$why: the kvstore daemon $pid0 died: $(grep child_exited "$events")"
	[[ $(kv_pid) == "$pid0" ]] || fail "$why: the kvstore daemon was restarted"
	grep -q '"event":"ignis.supervisor.child_exited"' "$events" && fail "$why: a child exited: $(grep child_exited "$events")"
	return 0
}

step "a 128 MiB ext2 volume, loop-mounted; it has no fallocate"
mkdir -p "$mnt"
truncate -s 128M "$work/img" || skip "cannot make the image"
# -m 0: no blocks reserved for root, who runs this and would take them
mkfs.ext2 -q -F -m 0 -b 4096 "$work/img" >/dev/null 2>&1 || skip "mkfs.ext2 failed"
mount -o loop -t ext2 "$work/img" "$mnt" 2>"$work/mount.err" ||
	skip "cannot mount a loop device: $(cat "$work/mount.err")"
if fallocate -l 4096 "$mnt/probe" 2>/dev/null; then
	skip "this kernel's ext2 has fallocate: the case cannot be made here"
fi
rm -f "$mnt/probe"

step "the daemon opens KV-disk there, a 100 MiB ceiling"
export IGNIS_TEST_KVDISK_IGNORE_VOLUME=1 # a small volume: no 10 GiB reserve
head -c $((8 * 1024 * 1024)) /dev/urandom >"$work/eight"
"$sup" start --runtime-dir "$rt" --model tiny-dense --reuse-kv-ram-bytes 16M \
	--reuse-kv-disk-bytes 100M --reuse-kv-disk-path "$mnt/kv" >"$events" 2>&1 &
sup_pid=$!
wait_for 20 grep -q '"ignis.supervisor.started"' "$events" || fail "no start"
arena=$(stat_of arena)
[[ $(stat_of disk_on) == true ]] || fail "KV-disk is off"
pid0=$(kv_pid)
refusals0=$(stat_of refusals_full)
echo "   data.mdb holds $(du -k "$mnt/kv/data.mdb" | cut -f1) KiB of blocks; $(avail_kib) KiB free"

step "another process fills the volume: 0 bytes free"
dd if=/dev/zero of="$mnt/filler" bs=1M status=none 2>/dev/null
sync -f "$mnt"
[[ $(avail_kib) -lt 1024 ]] || fail "the volume is not full: $(avail_kib) KiB free"

step "puts into blocks the tier reserved before the volume filled still succeed"
for s in 1 2; do
	put_demote $s || fail "seq $s with the volume full: $out"
done
still_alive "after puts on a full volume"

step "10 MiB freed, then puts until the volume cannot back one: refused tier full, the daemon alive"
truncate -s -10M "$mnt/filler"
sync -f "$mnt"
refused=
for s in $(seq 3 20); do
	if ! put_demote $s; then
		refused=$s
		break
	fi
done
[[ -n $refused ]] || fail "20 sequences of 8 MiB fit a 128 MiB volume"
echo "   seq $refused refused: $out"
grep -q "tier full" <<<"$out" || fail "the refusal does not say tier full: $out"
grep -q "$mnt/kv" <<<"$out" || fail "the refusal does not name the path: $out"
grep -q "cannot back" <<<"$out" || fail "the refusal does not say what it could not back: $out"
((refused > 3)) || fail "the freed room took no sequence: refused at seq $refused"
still_alive "after the refusal"
[[ $(stat_of disk_on) == true ]] || fail "KV-disk turned off"
[[ $(stat_of refusals_full) == $((refusals0 + 1)) ]] ||
	fail "refusals_full $(stat_of refusals_full), was $refusals0: one refusal"
k list | grep -q "^$refused .*ram .* yes" || fail "the refused seq $refused left KV-RAM: $(k list)"

step "every sequence acknowledged before the refusal reads back byte for byte"
for s in $(seq 1 $((refused - 1))); do
	k list | grep -q "^$s .*disk" || fail "seq $s not on disk: $(k list)"
	out=$(k get $s "$work/r.$s" 2>&1) && cmp -s "$(img $s)" "$work/r.$s" || fail "seq $s differs: $out"
	rm -f "$work/r.$s"
done
out=$(k get $refused "$work/r.x" 2>&1) && cmp -s "$(img $refused)" "$work/r.x" || fail "seq $refused (in RAM) differs: $out"
still_alive "after the reads"

step "kill -9 with the volume full: the daemon comes back with KV-disk on and serves everything"
n=$(grep -c '"event":"ignis.kvstore.tiers"' "$events")
kill -9 "$pid0"
wait_for 30 bash -c "[[ \$(grep -c '\"event\":\"ignis.kvstore.tiers\"' '$events') -gt $n ]]" ||
	fail "the daemon did not come back"
[[ $(stat_of disk_on) == true ]] || fail "KV-disk off after the restart: $(grep disk_off "$events")"
for s in $(seq 1 $((refused - 1))); do
	out=$(k get $s "$work/r.$s" 2>&1) && cmp -s "$(img $s)" "$work/r.$s" || fail "seq $s after the restart: $out"
	rm -f "$work/r.$s"
done
pid0=$(kv_pid)
out=$(k demote $refused 2>&1) && fail "the full volume took seq $refused after the restart"
grep -q "tier full" <<<"$out" || fail "after the restart: $out"
kill -0 "$pid0" || fail "the restarted daemon died on the full volume"

step "room freed: the refused sequence and new ones go to disk again"
rm -f "$mnt/filler"
sync -f "$mnt"
out=$(k demote $refused 2>&1) || fail "demote $refused with room again: $out"
for s in $((refused + 1)) $((refused + 2)); do
	put_demote $s || fail "seq $s with room again: $out"
done
for s in $refused $((refused + 1)) $((refused + 2)); do
	out=$(k get $s "$work/r.$s" 2>&1) && cmp -s "$(img $s)" "$work/r.$s" || fail "seq $s differs: $out"
done
kill -0 "$pid0" || fail "the daemon died"

"$sup" stop --runtime-dir "$rt" >/dev/null 2>&1 || fail "stop"
wait "$sup_pid"
sup_pid=
echo "kvdisk volume integration: all steps passed"
