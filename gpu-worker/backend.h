/*
 * backend.h - the compute backends behind one versioned table of functions
 * (style guide rule 8). backend.c is the registry and the one file with
 * `#if IGNIS_HAVE_CUDA`.
 *
 * So far the table covers device memory: facts, allocation and copies. Only
 * the layout (layout.h) allocates, once per plan line at load; the runtime
 * then takes places inside those reservations and never asks the backend
 * for more. Kernels join the table with the model runtime.
 */
#ifndef IGNIS_GPU_WORKER_BACKEND_H
#define IGNIS_GPU_WORKER_BACKEND_H

#include <stdint.h>

#include "err.h"
#include "event.h"

#define BE_ABI_VERSION 1u

struct be;

struct be_ops {
	uint32_t abi; /* BE_ABI_VERSION */
	const char *name;
	uint64_t granule; /* allocations are whole multiples of this */
	/* Open the device. The cpu backend simulates one of `sim_bytes` (the
	 * plan's free memory at start); a real device ignores it. */
	int (*open)(struct be *b, uint64_t sim_bytes, struct ig_errbuf *eb);
	void (*close)(struct be *b);
	/* What the device reports now. */
	void (*mem_info)(struct be *b, uint64_t *free_bytes, uint64_t *total_bytes);
	/* One device allocation of `bytes` (the layout's only way to memory).
	 * IG_E_NOMEM with the device's own figures when it does not fit. */
	int (*alloc)(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb);
	void (*free)(struct be *b, void *ptr, uint64_t bytes);
	/* Synchronous copies between host and device memory. */
	int (*copy_h2d)(struct be *b, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb);
	int (*copy_d2h)(struct be *b, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb);
};

/* An open backend. The caller embeds it; `priv` belongs to the backend. */
struct be {
	const struct be_ops *ops;
	uint64_t capacity, used; /* the cpu backend's simulated device */
	void *priv;
};

/* The backend of that name in this build, or NULL (its message in `eb`). */
const struct be_ops *backend_find(const char *name, struct ig_errbuf *eb);

/*
 * Add the backend facts to the worker's ready event:
 *
 *   "backends"              "cpu" or "cpu,cuda" (what this build has)
 *   "cuda_runtime_version"  cudaRuntimeGetVersion(), e.g. 13000      } only when
 *   "cublas_version"        "MAJOR.MINOR.PATCH" of the linked cuBLAS } built with
 *   "cuda_devices"          cudaGetDeviceCount(), 0 on error         } CUDA
 *   "cuda_error"            cudaGetErrorString() of a failed probe
 *
 * A probe that fails is reported, never fatal.
 */
void backend_ready_fields(struct ev *e);

#endif
