#!/usr/bin/env bash
# Installs, from Debian 12's archive, what building and testing Ignis needs and
# is not installed yet. Quiet and quick when everything is there.
#   tools/install-deps.sh          build + tests
#   tools/install-deps.sh --fuzz   also clang and its sanitizer runtimes
set -euo pipefail

pkgs=(gcc libc6-dev make pkg-config meson ninja-build cmake
      libnng-dev libmsgpack-dev liblmdb-dev libcyaml-dev libxxhash-dev libcmocka-dev
      jq procps)
if [[ "${1:-}" == "--fuzz" ]]; then
	pkgs+=(clang libclang-rt-dev)
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
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
	"${missing[@]}" >/dev/null
