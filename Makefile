# Everyday verbs over meson. Build directory: build/.
#   make          build (installs missing Debian packages first)
#   make test     what CI runs: three builds (cuda auto, no cuda, ASan+UBSan) and their tests
#   make run      start the system on the embedded default configuration
#   make fuzz     run the protocol decoder under libFuzzer for FUZZ_SECONDS (clang)
SHELL := /bin/bash
BUILD ?= build
FUZZ_SECONDS ?= 60
# nvcc lives in /usr/local/cuda on our machines; meson finds it on PATH.
export PATH := $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda/bin:)$(PATH)

.PHONY: all build deps test run fuzz format clean

all: build

deps:
	@tools/install-deps.sh

build: deps
	@test -f $(BUILD)/build.ninja || meson setup $(BUILD) -Dwerror=true
	@meson compile -C $(BUILD)

test:
	@tools/test.sh

run: build
	@tools/run.sh $(BUILD)

fuzz:
	@tools/install-deps.sh --fuzz
	@test -f build-fuzz/build.ninja || CC=clang meson setup build-fuzz -Dfuzz=true \
		-Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false
	@meson compile -C build-fuzz
	@tools/fuzz.sh build-fuzz $(FUZZ_SECONDS)

format:
	@clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-nocuda build-asan build-fuzz
