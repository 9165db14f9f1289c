#!/usr/bin/env bash
# Installs, from Debian 12's archive, what building and testing Ignis needs and
# is not installed yet. Quiet and quick when everything is there.
#   tools/install-deps.sh          build + tests
#   tools/install-deps.sh --fuzz   also clang and its sanitizer runtimes
#
# `prometheus` brings promtool and the server the metrics tests run on
# loopback (tests/integration/metrics.sh). Its Debian package would start and
# enable a system-wide Prometheus on port 9090: it is installed with a
# policy-rc.d that forbids starting services (unless the machine has one of
# its own already) and its unit is disabled after; nothing here depends on
# that service. `systemd` brings systemd-analyze, which checks our units
# (tests/integration/units.sh); nothing here starts or needs it as init.
# `git` reads llama.cpp's source out of node-llama-cpp's bundle
# (tools/install-oracle.sh: the Qwen3.5 and Qwen3-Coder templates).
set -euo pipefail

pkgs=(gcc libc6-dev make pkg-config meson ninja-build cmake
      libnng-dev libmsgpack-dev liblmdb-dev libcyaml-dev libxxhash-dev libcmocka-dev
      libutf8proc-dev libjansson-dev libmicrohttpd-dev
      jq procps curl prometheus systemd git)
if [[ "${1:-}" == "--fuzz" ]]; then
	pkgs+=(clang libclang-rt-dev)
fi
# npm installs the tests' oracle, llama.cpp's prebuilt libraries
# (tools/install-oracle.sh); a Node.js that is already here (with its own
# npm) is used as it is.
if ! command -v npm >/dev/null; then
	pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	if command -v sudo >/dev/null; then
		sudo=(sudo)
	else
		echo "install-deps: missing packages: ${missing[*]}" >&2
		echo "install-deps: run as root: apt-get install ${missing[*]}" >&2
		exit 1
	fi
fi
echo "install-deps: installing ${missing[*]}" >&2
policy=/usr/sbin/policy-rc.d
our_policy=false
if [[ " ${missing[*]} " == *" prometheus "* || " ${missing[*]} " == *" systemd "* ]] &&
	[[ ! -e $policy ]]; then
	# exit 101: "action forbidden" to invoke-rc.d and deb-systemd-invoke
	printf '#!/bin/sh\n# tools/install-deps.sh: start no service while installing\nexit 101\n' |
		"${sudo[@]}" tee "$policy" >/dev/null
	"${sudo[@]}" chmod 755 "$policy"
	our_policy=true
fi
remove_policy() { if $our_policy; then "${sudo[@]}" rm -f "$policy"; fi; }
trap remove_policy EXIT
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
	"${missing[@]}" >/dev/null
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
	if command -v deb-systemd-helper >/dev/null; then
		"${sudo[@]}" deb-systemd-helper disable prometheus.service >/dev/null 2>&1 || true
	elif command -v systemctl >/dev/null; then
		"${sudo[@]}" systemctl disable prometheus.service >/dev/null 2>&1 || true
	fi
fi
