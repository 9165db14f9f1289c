/*
 * devmem.h - the books of a backend's device memory, the same on every
 * backend (docs/adr/0045): the list of live allocations, and the checks a
 * copy passes before it runs or is enqueued (backend.h: a device range
 * inside one allocation, a host range outside every one), so that a copy
 * that would fault, or silently misbehave, on a real device is refused the
 * same way on each.
 *
 * A backend gets and frees the memory itself (cpu: host memory standing for
 * the device; cuda: cudaMalloc) and records it here. The books are the
 * caller's thread's only (a backend is driven from one thread: backend.h).
 */
#ifndef IGNIS_GPU_WORKER_DEVMEM_H
#define IGNIS_GPU_WORKER_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct devmem_alloc {
	uintptr_t base;
	uint64_t bytes; /* what the device holds (rounded to its granule) */
};

struct devmem {
	struct devmem_alloc *a;
	size_t n, cap;
	const char *device; /* "the simulated device", "the GPU": in messages */
};

/* Empty books; `device` names the device in messages (a static string). */
void devmem_init(struct devmem *d, const char *device);
void devmem_release(struct devmem *d);

/* Make room for one more allocation first (IG_E_NOMEM, host memory), so
 * that recording it after the device gave it cannot fail. */
int devmem_reserve(struct devmem *d, struct ig_errbuf *eb);
/* Record an allocation (devmem_reserve first). */
void devmem_add(struct devmem *d, void *base, uint64_t bytes);
/* Forget the allocation at `base`; false when there is none. */
bool devmem_remove(struct devmem *d, void *base);

/* Does [p, p + n) lie inside one allocation? */
bool devmem_inside(const struct devmem *d, const void *p, uint64_t n);
/* Does [p, p + n) touch any allocation? */
bool devmem_touches(const struct devmem *d, const void *p, uint64_t n);

/* "async copy #7 (h2d, 4096 bytes, 0x... <- 0x...)"; ticket 0: no number. */
void devmem_describe(char *buf, size_t size, const char *what, uint64_t ticket, bool d2h,
                     const void *dst, const void *src, uint64_t n);

/* A copy of `n` bytes between host and device (`what`: "copy", "async
 * copy"), checked: IG_E_OK (nothing to do when n is 0: *empty), or
 * IG_E_INVAL naming the copy and what is wrong. `d` NULL: the backend is
 * not open. */
int devmem_check_copy(const struct devmem *d, const char *what, bool d2h, void *dst,
                      const void *src, uint64_t n, bool *empty, struct ig_errbuf *eb);
/* A copy inside the device: both ranges inside allocations, not
 * overlapping. */
int devmem_check_d2d(const struct devmem *d, void *dst, const void *src, uint64_t n, bool *empty,
                     struct ig_errbuf *eb);
/* A region of the caller's (a plan line, backend.h's be_region) holds at
 * least `least` bytes of device memory of this backend (`backend` names it
 * in messages). */
int devmem_check_region(const struct devmem *d, const char *backend, const char *line,
                        const void *base, uint64_t bytes, uint64_t least, struct ig_errbuf *eb);

#endif
