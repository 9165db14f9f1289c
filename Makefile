# Everyday verbs over meson. Build directory: build/.
#   make          build (installs missing Debian packages first)
#   make test     what CI runs: three builds (cuda auto, no cuda, ASan+UBSan) and their tests
#   make run      start the system on the embedded default configuration
#                 (MODEL=file.gguf: on that model file)
#   make demo     a short scenario against it (or a system of its own): agents, then an
#                 interactive request streaming, then the metrics page
#   make fuzz     run the protocol decoder under libFuzzer for FUZZ_SECONDS (clang)
#   make config   print the VRAM plan for a card (MODEL=, LANES=, CONTEXT=,
#                 DEVICE_FREE_BYTES=, PINNED_EXPERT_BYTES=, ALLOW_EXPERT_CACHE_BELOW_FLOOR=1,
#                 PROFILE= (default none), BACKEND= (default cuda), CONFIG=FILE)
SHELL := /bin/bash
BUILD ?= build
FUZZ_SECONDS ?= 60
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
	@$(if $(MODEL),MODEL=$(MODEL)) tools/run.sh $(BUILD)

demo: build
	@tools/demo.sh $(BUILD)

# The plan for a card that may not be here: built-in defaults, cuda backend.
PROFILE ?= none
BACKEND ?= cuda
config: build
	@$(BUILD)/supervisor/ignis-supervisor plan $(if $(CONFIG),-c $(CONFIG)) \
		--profile $(PROFILE) --backend $(BACKEND) \
		$(if $(MODEL),--model $(MODEL)) \
		$(if $(LANES),--spec-decode-lanes $(LANES)) \
		$(if $(CONTEXT),--model-max-context $(CONTEXT)) \
		$(if $(DEVICE_FREE_BYTES),--device-free-bytes $(DEVICE_FREE_BYTES)) \
		$(if $(PINNED_EXPERT_BYTES),--vram-pinned-expert-bytes $(PINNED_EXPERT_BYTES)) \
		$(if $(filter 1,$(ALLOW_EXPERT_CACHE_BELOW_FLOOR)),--vram-allow-expert-cache-below-floor)

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
