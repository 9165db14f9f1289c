# Everyday verbs over meson. Build directory: build/.
#   make          build (installs missing Debian packages first)
#   make test     what CI runs: three builds (cuda auto, no cuda, ASan+UBSan) and their tests
#   make run      start the system on the embedded default configuration
#   make demo     a short scenario against it (or a system of its own): agents, then an
#                 interactive request streaming, then the metrics page
#   make fuzz     run the protocol decoder under libFuzzer for FUZZ_SECONDS (clang)
#   make config   print the VRAM plan for a card (by default the built-in defaults on
#                 the cuda backend: PROFILE=none BACKEND=cuda)
# `make run` and `make config` take the same variables: CONFIG=FILE (-c FILE),
# and a knob's make variable, VAR=value, which they pass as the knob's flag
# (tools/knobs.mk, generated from the knob table by `ignis-supervisor
# makevars`, lists them; docs/reference/knobs.md shows each knob's), e.g.
#   make run MODEL=file.gguf DEVICE_FREE_BYTES=2G CONTEXT=4096
#   make config MODEL=flash-next DEVICE_FREE_BYTES=20G ALLOW_EXPERT_CACHE_BELOW_FLOOR=1
SHELL := /bin/bash
BUILD ?= build
FUZZ_SECONDS ?= 60
include tools/knobs.mk
# What both verbs pass the supervisor: the configuration file, then the knobs.
SUP_ARGS = $(if $(CONFIG),-c '$(subst ','\'',$(CONFIG))') $(KNOB_FLAGS)
# nvcc lives in /usr/local/cuda on our machines; meson finds it on PATH.
export PATH := $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda/bin:)$(PATH)

.PHONY: all build deps test run demo fuzz config format clean

all: build

deps:
	@tools/install-deps.sh

build: deps
	@test -f $(BUILD)/build.ninja || meson setup $(BUILD) -Dwerror=true
	@meson compile -C $(BUILD)

test:
	@tools/test.sh

run: build
	@tools/run.sh $(BUILD) $(SUP_ARGS)

demo: build
	@tools/demo.sh $(BUILD)

# The plan for a card that may not be here: unless named, the built-in
# defaults on the cuda backend.
config: PROFILE ?= none
config: BACKEND ?= cuda
config: build
	@$(BUILD)/supervisor/ignis-supervisor plan $(SUP_ARGS)

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
