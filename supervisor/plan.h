/*
 * plan.h - the VRAM plan as the supervisor shows it: device facts from the
 * knobs, the readable table, the events (ignis.runtime.vram_plan or
 * flash_next_plan, and its warnings), and `ignis-supervisor plan`.
 */
#ifndef IGNIS_SUPERVISOR_PLAN_H
#define IGNIS_SUPERVISOR_PLAN_H

#include <stdio.h>

#include "config.h"
#include "proto/msg.h"
#include "common/vplan.h"

/* Exit codes of `plan` (and of a refused `start`). */
#define PLAN_EXIT_OK      0
#define PLAN_EXIT_CONFIG  2
#define PLAN_EXIT_REFUSED 3

/* Device facts and the plan. The free memory: on the cpu backend the
 * simulated device's (--device-free-bytes); on cuda the card's, read once
 * through NVML (a start ignores the knob; `plan` takes the knob when named,
 * to plan a card that is not here). `auto` is cuda when this build has CUDA
 * and a device answers, else cpu. IG_E_CONFIG (missing facts),
 * IG_E_PLAN_REFUSED (p->refusal says why) or IG_E_OK. */
int plan_make(const struct knobs *k, bool for_start, struct vplan *p, struct ig_errbuf *eb);
/* The plan event and one event per warning, on the event stream. */
void plan_emit(const struct vplan *p, const struct knobs *k);
/* The plan as the gpu-worker receives it, with the model file to load
 * (`model_path`, NULL or "" for a built-in description), the prefill chunk
 * and the default cap. String views point into static names, `p`'s model
 * and `model_path`: valid while they live. */
void plan_to_msg(const struct vplan *p, const struct knobs *k, const char *model_path,
                 struct msg *m);
/* The readable table. */
void plan_print(FILE *f, const struct vplan *p, const struct knobs *k);

#endif
