#!/usr/bin/env bash
# Fetches, from Debian 12's archive, the .deb files of every library the
# build needs (headers, .so links, pkg-config and CMake files, the runtime
# libraries and theirs) into one folder, by default .device/debs (ignored by
# git), for a machine that has a compiler and CUDA but none of our Debian
# libraries and no network: the device machine, where tools/gpu-check.sh
# unpacks them into its build folder (nothing is installed there). Run it
# here, before a device run, and carry the folder with the run
# (DEVELOPERS.md). About 5 MiB.
#   tools/device-deps.sh [DIR]
# Quiet and quick when DIR already holds every package of the list below.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.device/debs}

# Each library the root meson.build asks for, its -dev package and its
# runtime package; then what those runtime libraries load that a plain
# machine may lack (nng: mbedtls; libcyaml: libyaml; libmicrohttpd: gnutls
# and its own); gpu-check.sh puts on the library path only the sonames the
# machine does not have already. libyaml-dev: libcyaml.pc links -lyaml.
# pkgconf: meson reads the .pc files through it, and the device machine may
# have none. Not listed: libmbedtls-dev (libnng-dev depends on it, but nng's
# headers and CMake files use none of it) and libgnutls28-dev
# (libmicrohttpd.pc's Requires.private, which gpu-check.sh drops: the build
# links shared libraries).
pkgs=(
	libnng-dev libnng1 libmbedtls14 libmbedx509-1 libmbedcrypto7
	libmsgpack-dev libmsgpackc2
	liblmdb-dev liblmdb0
	libcyaml-dev libcyaml1 libyaml-dev libyaml-0-2
	libxxhash-dev libxxhash0
	libutf8proc-dev libutf8proc2
	libjansson-dev libjansson4
	libmicrohttpd-dev libmicrohttpd12
	libgnutls30 libp11-kit0 libidn2-0 libunistring2 libtasn1-6 libnettle8 libhogweed6 libgmp10
	libffi8
	libcmocka-dev libcmocka0
	pkgconf-bin libpkgconf3
)

mkdir -p "$dir"
missing=()
for p in "${pkgs[@]}"; do
	compgen -G "$dir/${p}_*_amd64.deb" >/dev/null || compgen -G "$dir/${p}_*_all.deb" >/dev/null ||
		missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

# The device machine is x86-64: ask for amd64 whatever this machine is.
# As root, apt fetches as its own user, who cannot write here: fetch as root.
arch=(-o APT::Architecture=amd64)
[[ $(id -u) -eq 0 ]] && arch+=(-o APT::Sandbox::User=root)
echo "device-deps: downloading ${missing[*]}" >&2
if ! (cd "$dir" && apt-get "${arch[@]}" download "${missing[@]}" >/dev/null); then
	# stale package lists: refresh them once (as root), then again
	if [[ $(id -u) -eq 0 ]]; then
		apt-get update -qq
		(cd "$dir" && apt-get "${arch[@]}" download "${missing[@]}" >/dev/null)
	else
		echo "device-deps: apt-get download failed; as root: apt-get update, then again" >&2
		exit 1
	fi
fi
# one version of each package: an older file left from an earlier run goes
for p in "${pkgs[@]}"; do
	mapfile -t v < <(ls -t "$dir/${p}"_*.deb 2>/dev/null)
	for old in "${v[@]:1}"; do rm -f "$old"; done
done
echo "device-deps: $(ls "$dir"/*.deb | wc -l) packages, $(du -sh "$dir" | cut -f1), in $dir" >&2
