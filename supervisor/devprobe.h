/*
 * devprobe.h - the device memory free at start, read once before any CUDA
 * context exists (docs/design.md, section 2), through NVML from the NVIDIA
 * driver.
 *
 * NVML is loaded with dlopen("libnvidia-ml.so.1") at run time: the
 * supervisor links nothing of CUDA, starts on machines without a driver, and
 * never creates a context of its own (cudaMemGetInfo would, and the context
 * would count against the very memory it measures).
 */
#ifndef IGNIS_SUPERVISOR_DEVPROBE_H
#define IGNIS_SUPERVISOR_DEVPROBE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Free bytes of the device CUDA will use (the first of CUDA_VISIBLE_DEVICES,
 * else `index` in PCI order) into *free_bytes and its name.
 * IG_E_NOTFOUND when there is no driver or no such device. */
int devprobe_free_bytes(unsigned index, uint64_t *free_bytes, char *name, size_t cap,
                        struct ig_errbuf *eb);

#endif
