/* devmem.c - the books of a backend's device memory (see devmem.h). */
#include "devmem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

void devmem_init(struct devmem *d, const char *device)
{
	*d = (struct devmem){.device = device};
}

void devmem_release(struct devmem *d)
{
	free(d->a);
	d->a = NULL;
	d->n = d->cap = 0;
}

int devmem_reserve(struct devmem *d, struct ig_errbuf *eb)
{
	size_t cap;
	struct devmem_alloc *a;

	if (d->n < d->cap)
		return IG_E_OK;
	cap = d->cap ? 2 * d->cap : 16;
	a = realloc(d->a, cap * sizeof(*a));
	if (!a)
		return ig_errf(eb, IG_E_NOMEM, "host memory for the list of allocations");
	d->a = a;
	d->cap = cap;
	return IG_E_OK;
}

void devmem_add(struct devmem *d, void *base, uint64_t bytes)
{
	d->a[d->n++] = (struct devmem_alloc){(uintptr_t)base, bytes};
}

bool devmem_remove(struct devmem *d, void *base)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->a[i].base == (uintptr_t)base) {
			d->a[i] = d->a[--d->n];
			return true;
		}
	return false;
}

static bool devmem__find(const struct devmem *d, const void *p, uint64_t n, bool inside)
{
	uintptr_t a = (uintptr_t)p, end = a + (uintptr_t)n;

	for (size_t i = 0; i < d->n; i++) {
		uintptr_t lo = d->a[i].base, hi = lo + (uintptr_t)d->a[i].bytes;

		if (inside ? (a >= lo && end <= hi) : (a < hi && end > lo))
			return true;
	}
	return false;
}

bool devmem_inside(const struct devmem *d, const void *p, uint64_t n)
{
	return devmem__find(d, p, n, true);
}

bool devmem_touches(const struct devmem *d, const void *p, uint64_t n)
{
	return devmem__find(d, p, n, false);
}

void devmem_describe(char *buf, size_t size, const char *what, uint64_t ticket, bool d2h,
                     const void *dst, const void *src, uint64_t n)
{
	char num[24] = "";

	if (ticket)
		snprintf(num, sizeof(num), " #%" PRIu64, ticket);
	snprintf(buf, size, "%s%s (%s, %" PRIu64 " bytes, %p <- %p)", what, num,
	         d2h ? "d2h" : "h2d", n, dst, src);
}

/* What is wrong with any copy of n bytes from src to dst, before the sides
 * are looked at: NULL when nothing (*empty when there is nothing to copy). */
static const char *devmem__plain(const struct devmem *d, const void *dst, const void *src,
                                 uint64_t n, bool *empty)
{
	*empty = false;
	if (!d)
		return "the backend is not open";
	if (n == 0) {
		*empty = true;
		return NULL;
	}
	if (!dst || !src)
		return "a null pointer";
	if ((uintptr_t)dst > UINTPTR_MAX - n || (uintptr_t)src > UINTPTR_MAX - n)
		return "the range wraps around the address space";
	return NULL;
}

int devmem_check_copy(const struct devmem *d, const char *what, bool d2h, void *dst,
                      const void *src, uint64_t n, bool *empty, struct ig_errbuf *eb)
{
	const void *dev = d2h ? src : dst, *host = d2h ? (const void *)dst : src;
	const char *why = devmem__plain(d, dst, src, n, empty);
	char desc[160], msg[96];

	if (*empty)
		return IG_E_OK;
	if (!why && !devmem_inside(d, dev, n)) {
		snprintf(msg, sizeof(msg), "the device range is not inside one allocation of %s",
		         d->device);
		why = msg;
	} else if (!why && devmem_touches(d, host, n)) {
		why = "the host range is device memory (the other direction?)";
	}
	if (!why)
		return IG_E_OK;
	devmem_describe(desc, sizeof(desc), what, 0, d2h, dst, src, n);
	return ig_errf(eb, IG_E_INVAL, "%s: %s", desc, why);
}

int devmem_check_d2d(const struct devmem *d, void *dst, const void *src, uint64_t n, bool *empty,
                     struct ig_errbuf *eb)
{
	const char *why = devmem__plain(d, dst, src, n, empty);
	char msg[96];

	if (*empty)
		return IG_E_OK;
	if (!why && (!devmem_inside(d, dst, n) || !devmem_inside(d, src, n))) {
		snprintf(msg, sizeof(msg), "a range is not inside one allocation of %s", d->device);
		why = msg;
	} else if (!why && (const char *)dst < (const char *)src + n &&
	           (const char *)src < (const char *)dst + n) {
		why = "the ranges overlap";
	}
	if (why)
		return ig_errf(eb, IG_E_INVAL, "copy d2d of %" PRIu64 " bytes (%p to %p): %s", n,
		               src, dst, why);
	return IG_E_OK;
}

int devmem_check_region(const struct devmem *d, const char *backend, const char *line,
                        const void *base, uint64_t bytes, uint64_t least, struct ig_errbuf *eb)
{
	if (bytes < least)
		return ig_errf(eb, IG_E_NOSPACE,
		               "the plan's %s line gives the %s backend %" PRIu64
		               " bytes; binding the model needs at least %" PRIu64,
		               line, backend, bytes, least);
	if (!devmem_inside(d, base, bytes))
		return ig_errf(eb, IG_E_INVAL,
		               "the %s region (%p, %" PRIu64 " bytes) is not device memory of "
		               "the %s backend",
		               line, base, bytes, backend);
	return IG_E_OK;
}
