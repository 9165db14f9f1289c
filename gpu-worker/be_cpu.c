/*
 * be_cpu.c - the cpu backend's device memory: a simulated device of the
 * plan's free memory, in host memory. Allocations are counted against it as
 * a GPU counts them (4 KiB granules), so every plan rule and every refusal
 * runs on a machine without a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define BE_CPU_GRANULE 4096u

static uint64_t be_cpu__round(uint64_t n)
{
	return (n + BE_CPU_GRANULE - 1) / BE_CPU_GRANULE * BE_CPU_GRANULE;
}

static int be_cpu_open(struct be *b, uint64_t sim_bytes, struct ig_errbuf *eb)
{
	(void)eb;
	b->capacity = sim_bytes;
	b->used = 0;
	b->priv = NULL;
	return IG_E_OK;
}

static void be_cpu_close(struct be *b)
{
	b->capacity = b->used = 0;
}

static void be_cpu_mem_info(struct be *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
	*free_bytes = b->capacity - b->used;
	*total_bytes = b->capacity;
}

static int be_cpu_alloc(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb)
{
	uint64_t n = be_cpu__round(bytes ? bytes : 1);

	if (n > b->capacity - b->used)
		return ig_errf(eb, IG_E_NOMEM,
		               "the simulated device has %llu bytes free of %llu; asked for %llu",
		               (unsigned long long)(b->capacity - b->used),
		               (unsigned long long)b->capacity, (unsigned long long)n);
	*ptr = aligned_alloc(BE_CPU_GRANULE, (size_t)n);
	if (!*ptr)
		return ig_errf(eb, IG_E_NOMEM, "host memory for %llu simulated device bytes",
		               (unsigned long long)n);
	b->used += n;
	return IG_E_OK;
}

static void be_cpu_free(struct be *b, void *ptr, uint64_t bytes)
{
	if (!ptr)
		return;
	free(ptr);
	b->used -= be_cpu__round(bytes ? bytes : 1);
}

static int be_cpu_copy(struct be *b, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb)
{
	(void)b;
	(void)eb;
	memcpy(dst, src, (size_t)n);
	return IG_E_OK;
}

const struct be_ops be_cpu_ops = {
    .abi = BE_ABI_VERSION,
    .name = "cpu",
    .granule = BE_CPU_GRANULE,
    .open = be_cpu_open,
    .close = be_cpu_close,
    .mem_info = be_cpu_mem_info,
    .alloc = be_cpu_alloc,
    .free = be_cpu_free,
    .copy_h2d = be_cpu_copy,
    .copy_d2h = be_cpu_copy,
};
