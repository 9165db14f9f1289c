#!/usr/bin/env bash
# The device check (issue 29): on a machine with an NVIDIA GPU, from the
# repository root, builds Ignis with CUDA for the card present, measures the
# card's limits (ignis-devlimits), runs the 'gpu' test suite and the device
# benchmarks, and writes OUTDIR/summary.md: the card, driver and CUDA
# version, each phase and each test with its result and time, every figure.
# DEVELOPERS.md says how to run it through the device tool.
#
#   tools/gpu-check.sh OUTDIR
#
# The machine needs a C compiler, nvcc, Python 3, and meson and ninja (on
# PATH, beside python3, or as Python modules); our Debian libraries come as
# the .debs tools/device-deps.sh fetches (.device/debs), unpacked into the
# build folder: nothing is installed. Every phase runs and says how it went,
# whatever failed before it, except that nothing runs on the device when
# the build could not be configured.
#
# Files in OUTDIR (at most 6, for the device tool's limit of 8):
#   summary.md      everything above, the table of tests, the figures
#   setup.log build.log devlimits.txt tests.log bench.log
# Exit status: 0 all ran and passed (a skip is counted as a skip, never a
# pass), 1 something failed, 2 usage, 3 no device (after configuring and
# building, which proves both).
#
# Environment:
#   IGNIS_GPU_BUILD    build folder (build-gpu)
#   IGNIS_GPU_DEBS  the .debs (.device/debs); none there: the libraries
#                      must be installed already
#   IGNIS_GPU_ARCH     -Dgpu_arch (from the card: sm_90 on an H100/H200;
#                      with no card, sm_90)
#   IGNIS_GPU_BUDGET   seconds the whole script may take (450); the tests
#                      and benchmarks get what the build left
#   IGNIS_GPU_COMMIT       the commit under test, for the summary, where the
#                      tree has no .git
# Benchmarks: tools/gpu-bench.sh BUILD OUTDIR, where it exists, run with
# the time left; its key=value lines on stdout are figures.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [[ $# -ne 1 ]]; then
	echo "usage: tools/gpu-check.sh OUTDIR" >&2
	exit 2
fi
mkdir -p "$1" && out=$(cd "$1" && pwd) || exit 2
root=$PWD
B=${IGNIS_GPU_BUILD:-build-gpu}
[[ $B == /* ]] || B=$root/$B
debs=${IGNIS_GPU_DEBS:-.device/debs}
[[ $debs == /* ]] || debs=$root/$debs
budget=${IGNIS_GPU_BUDGET:-450}
t0=$(date +%s.%N)

# ---- the summary's parts, written out at exit whatever happened -----------
phases=() # "name|result|seconds|note"
figures=() # "key|value"
tests_md=""
card="" driver="" cuda_drv="" nvcc_ver="" cc="" arch="" devname=""
have_dev=false
failed=false
no_device=false

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v a="$t0" -v b="$(date +%s.%N)" -v t="$budget" 'BEGIN { printf "%d", t - (b - a) }'; }
phase_start() { ts=$(date +%s.%N); echo "== gpu-check: $1" >&2; }
phase() { # name result note: closes the phase phase_start opened
	phases+=("$1|$2|$(elapsed "$ts")|${3:-}")
	[[ $2 == fail ]] && failed=true
	echo "== gpu-check: $1: $2${3:+ ($3)}" >&2
}
fold_figures() { # a file of key=value lines
	local k v
	while IFS='=' read -r k v; do
		[[ $k =~ ^[A-Za-z0-9_]+$ ]] && figures+=("$k|$v")
	done <"$1"
}

write_summary() {
	local s=$out/summary.md commit
	commit=${IGNIS_GPU_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
	{
		echo "# gpu-check summary"
		echo
		if $no_device; then
			echo "**no device**: nothing ran on a GPU (configure and build only)."
			echo
		fi
		echo "| | |"
		echo "| --- | --- |"
		echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
		echo "| commit | $commit$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (tree differs from it, or no .git)') |"
		echo "| card | ${card:-none} |"
		echo "| compute capability | ${cc:--} |"
		echo "| driver | ${driver:--} (CUDA ${cuda_drv:--}) |"
		echo "| nvcc | ${nvcc_ver:--} |"
		echo "| built for | -Dgpu_arch=${arch:--} |"
		echo "| host | $(nproc) cores, $(uname -r), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}'), meson ${meson_ver:--} |"
		echo "| total | $(elapsed "$t0") s of a $budget s budget |"
		echo
		echo "## Phases"
		echo
		echo "| phase | result | seconds | note |"
		echo "| --- | --- | ---: | --- |"
		local p n r t note
		for p in "${phases[@]}"; do
			IFS='|' read -r n r t note <<<"$p"
			echo "| $n | $r | $t | $note |"
		done
		echo
		echo "## Tests (meson test --suite gpu)"
		echo
		if [[ -n $tests_md ]]; then
			echo "$tests_md"
		else
			echo "none ran"
		fi
		echo
		echo "## Figures"
		echo
		if [[ ${#figures[@]} -gt 0 ]]; then
			echo "| figure | value |"
			echo "| --- | --- |"
			for p in "${figures[@]}"; do
				echo "| ${p%%|*} | ${p#*|} |"
			done
		else
			echo "none measured"
		fi
		echo
		echo "Logs beside this file: setup.log, build.log, devlimits.txt, tests.log (meson test's output: each failure's log), bench.log."
	} >"$s"
	cat "$s"
}
trap write_summary EXIT

# ---- deps: our Debian libraries, unpacked into a prefix of the build folder
P=$B/device-prefix
ml=$P/usr/lib/x86_64-linux-gnu
phase_start deps
if compgen -G "$debs/*.deb" >/dev/null; then
	rm -rf "$P" && mkdir -p "$P/ld" "$P/bin"
	bad=()
	for f in "$debs"/*.deb; do
		if command -v dpkg-deb >/dev/null; then
			dpkg-deb -x "$f" "$P" || bad+=("${f##*/}")
		else # no dpkg: a .deb is an ar archive holding data.tar.*
			tmp=$(mktemp -d) &&
				(cd "$tmp" && ar x "$f" && tar -xf data.tar.* -C "$P") ||
				bad+=("${f##*/}")
			rm -rf "$tmp"
		fi
	done
	# The .pc files say prefix=/usr: point them at the prefix. Their
	# Requires.private (libmicrohttpd's gnutls) matter to static links only,
	# and pkg-config would look for their .pc files: dropped.
	for pc in "$ml"/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc "$P"/usr/lib/pkgconfig/*.pc; do
		[[ -f $pc ]] || continue
		sed -i -e "s|^prefix=/usr\$|prefix=$P/usr|" -e "s|=/usr/|=$P/usr/|" \
			-e '/^Requires.private:/d' "$pc"
	done
	# On the library path: the libraries whose headers we build with,
	# always; of what those load, only the sonames the machine lacks (its
	# own libffi, gnutls... stay the ones its programs, python3, load).
	ldc=$( (command -v ldconfig || echo /sbin/ldconfig) | head -1)
	known=$("$ldc" -p 2>/dev/null | awk '{print $1}')
	for so in "$ml"/lib*.so.*; do
		[[ -f $so && ! -L $so ]] || continue
		n=$(objdump -p "$so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
		[[ -n $n ]] || n=${so##*/}
		case $n in
		libnng.* | libmsgpackc.* | liblmdb.* | libcyaml.* | libyaml-0.* | libxxhash.* | \
			libutf8proc.* | libjansson.* | libmicrohttpd.* | libcmocka.* | libpkgconf.*)
			ln -sf "$so" "$P/ld/$n" ;;
		*) grep -qxF "$n" <<<"$known" || ln -sf "$so" "$P/ld/$n" ;;
		esac
	done
	export PKG_CONFIG_PATH=$ml/pkgconfig:$P/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
	export CPATH=$P/usr/include${CPATH:+:$CPATH}
	export LIBRARY_PATH=$ml${LIBRARY_PATH:+:$LIBRARY_PATH}
	export LD_LIBRARY_PATH=$P/ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export CMAKE_PREFIX_PATH=$P/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
	if ! pkg-config --version >/dev/null 2>&1 && [[ -x $P/usr/bin/pkgconf ]]; then
		ln -sf "$P/usr/bin/pkgconf" "$P/bin/pkg-config"
		export PATH=$P/bin:$PATH
	fi
	if [[ ${#bad[@]} -gt 0 ]]; then
		phase deps fail "could not unpack: ${bad[*]}"
	else
		phase deps ok "$(ls "$debs"/*.deb | wc -l) packages from $debs; on the library path: $(ls "$P/ld" | sed 's/\.so\..*//' | sort -u | tr '\n' ' ')"
	fi
else
	phase deps skip "no .debs in $debs (tools/device-deps.sh): the libraries must be installed"
fi

# ---- tools: meson, ninja, nvcc, the card -----------------------------------
phase_start tools
pybin=$(dirname "$(command -v python3 || echo /usr/bin/python3)")
[[ -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null && export PATH=$PATH:/usr/local/cuda/bin
meson=() ninja=""
if command -v meson >/dev/null; then
	meson=(meson)
elif [[ -x $pybin/meson ]]; then
	meson=("$pybin/meson")
elif python3 -c 'import mesonbuild' 2>/dev/null; then
	meson=(python3 -m mesonbuild.mesonmain)
fi
if command -v ninja >/dev/null; then
	ninja=$(command -v ninja)
elif [[ -x $pybin/ninja ]]; then
	ninja=$pybin/ninja
else
	ninja=$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2>/dev/null)
	[[ -x $ninja ]] || ninja=""
fi
[[ -n $ninja ]] && export NINJA=$ninja
meson_ver=$([[ ${#meson[@]} -gt 0 ]] && "${meson[@]}" --version 2>/dev/null)
nvcc_ver=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([^,]*\),.*/\1/p')
# the toolkit's own cudart and cuBLAS, which the programs link, where the
# loader's cache may not list them
cudalib=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/lib64
[[ -d $cudalib ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cudalib
if command -v nvidia-smi >/dev/null &&
	q=$(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total \
		--format=csv,noheader 2>/dev/null) && [[ -n $q ]]; then
	have_dev=true
	q=$(head -1 <<<"$q")
	IFS=',' read -r devname driver cc mem <<<"$q"
	devname=$(echo $devname) driver=$(echo $driver) cc=$(echo $cc) mem=$(echo $mem)
	card="$devname, $mem"
	cuda_drv=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
	arch=sm_${cc/./}
fi
arch=${IGNIS_GPU_ARCH:-${arch:-sm_90}}
miss=()
[[ ${#meson[@]} -eq 0 ]] && miss+=(meson)
[[ -z $ninja ]] && miss+=(ninja)
[[ -z $nvcc_ver ]] && miss+=(nvcc)
command -v cc >/dev/null || miss+=(cc)
if [[ ${#miss[@]} -gt 0 ]]; then
	phase tools fail "missing: ${miss[*]} (meson and ninja: pip wheels, see DEVELOPERS.md)"
else
	phase tools ok "meson $meson_ver, $ninja, nvcc $nvcc_ver; $($have_dev && echo "$card" || echo 'no device')"
fi

# ---- configure ---------------------------------------------------------------
phase_start configure
opts=(-Dcuda=enabled -Dtests=enabled "-Dgpu_arch=$arch" -Dbuildtype=debugoptimized)
configured=false
if [[ ${#meson[@]} -gt 0 ]]; then
	if [[ -f $B/build.ninja ]]; then
		"${meson[@]}" setup --reconfigure "$B" "${opts[@]}" >"$out/setup.log" 2>&1
	else
		"${meson[@]}" setup "$B" "${opts[@]}" >"$out/setup.log" 2>&1
	fi
	if [[ $? -eq 0 ]]; then
		configured=true
		phase configure ok "${opts[*]}"
	else
		phase configure fail "$(grep -m1 'ERROR' "$out/setup.log" | cut -c1-200)"
	fi
else
	phase configure fail "no meson"
fi
$configured || exit 1

# ---- build: everything that builds (-k 0), so one broken target stops
# nothing else; a test whose program did not build fails below ------------
phase_start build
"$ninja" -C "$B" -k 0 >"$out/build.log" 2>&1
rc=$?
nfail=$(grep -c '^FAILED: ' "$out/build.log")
if [[ $rc -eq 0 ]]; then
	phase build ok "$(grep -c '^\[' "$out/build.log") steps"
else
	phase build fail "$nfail targets failed: $(grep '^FAILED: ' "$out/build.log" | head -3 | cut -c9-80 | tr '\n' ' ')"
fi

if ! $have_dev; then
	no_device=true
	phase_start device
	phase device skip "no device: nvidia-smi found no GPU; nothing runs"
	exit 3
fi

# ---- the card's limits --------------------------------------------------------
phase_start devlimits
if [[ -x $B/tools/ignis-devlimits ]]; then
	timeout -k 5 120 "$B/tools/ignis-devlimits" >"$out/devlimits.txt" 2>&1
	rc=$?
	fold_figures "$out/devlimits.txt"
	case $rc in
	0) phase devlimits ok ;;
	77) phase devlimits fail "nvidia-smi sees a card, the CUDA runtime none: $(grep -m1 'devlimits:' "$out/devlimits.txt" | cut -c1-200)" ;;
	124 | 137) phase devlimits fail "timed out at 120 s" ;;
	*) phase devlimits fail "exit $rc: $(grep -m1 'devlimits:' "$out/devlimits.txt" | cut -c1-200)" ;;
	esac
else
	phase devlimits fail "tools/ignis-devlimits did not build"
fi

# ---- the gpu suite, within the time left (less 150 s for the benchmarks) ------
phase_start tests
t=$(($(left) - 150))
[[ -x tools/gpu-bench.sh ]] || t=$(($(left) - 15))
if [[ $t -lt 30 ]]; then
	phase tests fail "no time left ($t s)"
else
	log=$B/meson-logs/testlog.json
	rm -f "$log"
	timeout -k 10 "$t" "${meson[@]}" test -C "$B" --no-rebuild --suite gpu \
		--num-processes 4 --print-errorlogs >"$out/tests.log" 2>&1
	rc=$?
	# one row per test of the suite: its result in testlog.json, or
	# "not run" (the time ran out first); meson names a suite
	# "project:suite" and a result "project:suites / name"
	tests_md=$("${meson[@]}" introspect "$B" --tests 2>/dev/null | python3 -c '
import json, sys
tests = [t["name"] for t in json.load(sys.stdin)
         if "gpu" in (s.split(":")[-1] for s in t["suite"])]
res = {}
try:
    for line in open(sys.argv[1]):
        if line.strip():
            r = json.loads(line)
            res[r["name"].split(" / ")[-1]] = (r["result"], r["duration"])
except OSError:
    pass
print("| test | result | seconds |")
print("| --- | --- | ---: |")
n = {}
for name in tests:
    r, d = res.get(name, ("NOT RUN", None))
    n[r] = n.get(r, 0) + 1
    print("| %s | %s | %s |" % (name, r, "-" if d is None else "%.1f" % d))
for name in ("backend-cuda",):
    if name not in tests:
        print("| %s | ABSENT (no such row in the suite yet) | - |" % name)
print()
print(", ".join("%d %s" % (v, k) for k, v in sorted(n.items())) or "no tests in the suite")
' "$log")
	if [[ $rc -eq 124 || $rc -eq 137 ]]; then
		phase tests fail "stopped at the budget's $t s"
	elif [[ $rc -ne 0 ]]; then
		phase tests fail "meson test exit $rc: $(tail -1 <<<"$tests_md")"
	elif grep -q 'NOT RUN' <<<"$tests_md"; then
		phase tests fail "some tests did not run: $(tail -1 <<<"$tests_md")"
	else
		phase tests ok "$(tail -1 <<<"$tests_md")"
	fi
fi

# ---- benchmarks ---------------------------------------------------------------
phase_start bench
if [[ -x tools/gpu-bench.sh ]]; then
	t=$(($(left) - 10))
	if [[ $t -lt 20 ]]; then
		phase bench fail "no time left ($t s)"
	else
		timeout -k 10 "$t" tools/gpu-bench.sh "$B" "$out" >"$out/bench.log" 2>&1
		rc=$?
		fold_figures "$out/bench.log"
		[[ $rc -eq 0 ]] && phase bench ok || phase bench fail "exit $rc"
	fi
else
	phase bench skip "no tools/gpu-bench.sh yet"
fi
$failed && exit 1
exit 0
