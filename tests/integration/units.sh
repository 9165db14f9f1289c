#!/usr/bin/env bash
# The systemd units of etc/systemd, as meson configured them, checked with
# systemd-analyze verify against this build's programs: every key known,
# every command there and executable. Skips (77) where systemd-analyze is
# absent.
#   units.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=${1:?usage: units.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: units.sh BUILD_DIR SOURCE_DIR}
command -v systemd-analyze >/dev/null || { echo "systemd-analyze is not installed: skipped"; exit 77; }
work=$(mktemp -d /tmp/ignis-units-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for u in ignis.service ignis-restart@.service; do
	[[ -f $build/etc/$u ]] || fail "meson did not configure $u"
	grep -q '@[A-Z]*@' "$build/etc/$u" && fail "$u keeps a placeholder: $(grep '@[A-Z]*@' "$build/etc/$u")"
	# the installed paths, pointed at this build's programs
	sed "s|^\(Exec[A-Za-z]*=\)[^ ]*/ignis-supervisor|\1$(realpath "$build")/supervisor/ignis-supervisor|" \
		"$build/etc/$u" >"$work/$u"
done
cp "$work/ignis-restart@.service" "$work/ignis-restart@kvstore.service"
out=$(cd "$work" && systemd-analyze verify ./ignis.service ./ignis-restart@kvstore.service 2>&1)
rc=$?
# only complaints about the service user, which this machine need not have
out=$(grep -v "User=ignis\|Group=ignis\|ignis.*user\|Failed to resolve" <<<"$out" | grep -v '^$')
[[ $rc -eq 0 && -z $out ]] || fail "systemd-analyze verify: rc=$rc: $out"
# the units say what an operator needs
grep -q '^ExecStart=.*ignis-supervisor start -c /etc/ignis/ignis.yaml' "$work/ignis.service" || fail "ExecStart"
grep -q '^ExecStop=.*ignis-supervisor stop' "$work/ignis.service" || fail "ExecStop"
grep -q '^KillMode=mixed' "$work/ignis.service" || fail "KillMode"
grep -q '^RuntimeDirectoryMode=0700' "$work/ignis.service" || fail "runtime dir mode"
grep -q '^ExecStart=.*ignis-supervisor restart %i' "$work/ignis-restart@.service" || fail "restart unit"
# the commands the units run parse their arguments
"$build/supervisor/ignis-supervisor" restart nosuch --runtime-dir "$work/rt" >/dev/null 2>&1
[[ $? -ne 127 ]] || fail "restart verb missing"
echo "units: verified"
