# tools/knobs.mk - the knobs' make variables, for the Makefile. Generated
# from the knob table (common/knobs.h, KNOB_MAKE_VARS) by `ignis-supervisor
# makevars`; do not edit by hand (the makevars-fresh test fails when it is
# stale). VAR=value on `make run` or `make config` becomes the knob's flag,
# one argument, quoted for the shell; an empty VAR is not given:
#   PROFILE                          --profile=VALUE
#   MODEL                            --model=VALUE
#   BACKEND                          --backend=VALUE
#   DEVICE_FREE_BYTES                --device-free-bytes=VALUE
#   CONTEXT                          --model-max-context=VALUE
#   KV_FORMAT                        --model-kv-format=VALUE
#   LANES                            --spec-decode-lanes=VALUE
#   ALLOW_EXPERT_CACHE_BELOW_FLOOR   --vram-allow-expert-cache-below-floor=VALUE
#   PINNED_EXPERT_BYTES              --vram-pinned-expert-bytes=VALUE

# $(call knob_flag,VAR,name): '--name=value of VAR', or nothing
knob_flag = $(if $($(1)),'--$(2)=$(subst ','\'',$($(1)))')
KNOB_FLAGS = \
	$(call knob_flag,PROFILE,profile) \
	$(call knob_flag,MODEL,model) \
	$(call knob_flag,BACKEND,backend) \
	$(call knob_flag,DEVICE_FREE_BYTES,device-free-bytes) \
	$(call knob_flag,CONTEXT,model-max-context) \
	$(call knob_flag,KV_FORMAT,model-kv-format) \
	$(call knob_flag,LANES,spec-decode-lanes) \
	$(call knob_flag,ALLOW_EXPERT_CACHE_BELOW_FLOOR,vram-allow-expert-cache-below-floor) \
	$(call knob_flag,PINNED_EXPERT_BYTES,vram-pinned-expert-bytes)
