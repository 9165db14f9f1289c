/*
 * backend.c - which compute backends this build has, probed at start.
 *
 * The only `#if IGNIS_HAVE_CUDA` of the worker: everything CUDA-specific
 * outside kernels/ is reached through this file.
 */
#include <stdio.h>

#include <string.h>

#include "backend.h"
#include "version.h"

extern const struct be_ops be_cpu_ops;
#if IGNIS_HAVE_CUDA
extern const struct be_ops be_cuda_ops;
#define BACKEND_ACCEPTED "cpu, cuda"
#else
#define BACKEND_ACCEPTED "cpu"
#endif

/* The cuda backend is found wherever the build has CUDA, with a device or
 * without: its open() says when there is none, and a backend without
 * compute yet is refused by name where a model is bound (main.c,
 * tools/bemodel.c). */
const struct be_ops *backend_find(const char *name, struct ig_errbuf *eb)
{
	if (!strcmp(name, "cpu"))
		return &be_cpu_ops;
#if IGNIS_HAVE_CUDA
	if (!strcmp(name, "cuda"))
		return &be_cuda_ops;
#else
	if (!strcmp(name, "cuda")) {
		ig_errf(eb, IG_E_NOTFOUND,
		        "this worker was built without CUDA, so without the cuda backend (meson "
		        "setup -Dcuda=enabled builds it where nvcc is); this worker lays plans out "
		        "on the cpu backend (--backend cpu)");
		return NULL;
	}
#endif
	ig_errf(eb, IG_E_NOTFOUND, "no backend '%s'; accepted: " BACKEND_ACCEPTED, name);
	return NULL;
}

void be_bind_unreserve(struct be *b, struct be_bind_opts *o)
{
	struct be_region *r[] = {&o->workspace, &o->sampling, &o->lane_state};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		if (r[i]->base)
			b->ops->free(b, r[i]->base, r[i]->bytes);
		*r[i] = (struct be_region){0};
	}
}

int be_bind_reserve(struct be *b, const struct mfile *f, struct be_bind_opts *o,
                    struct ig_errbuf *eb)
{
	struct be_needs n;
	int rc;

	*o = (struct be_bind_opts){.max_round_tokens = o->max_round_tokens,
	                           .context = o->context,
	                           .threads = o->threads,
	                           .states = o->states,
	                           .kv_sinks = o->kv_sinks,
	                           .kv_window = o->kv_window};
	rc = b->ops->model_needs(b, f, o, &n, eb);
	if (!rc && n.workspace_one_pass)
		rc = b->ops->alloc(b, n.workspace_one_pass, &o->workspace.base, eb);
	if (!rc)
		o->workspace.bytes = n.workspace_one_pass;
	if (!rc && n.sampling_one_pass)
		rc = b->ops->alloc(b, n.sampling_one_pass, &o->sampling.base, eb);
	if (!rc)
		o->sampling.bytes = n.sampling_one_pass;
	if (!rc && n.lane_state)
		rc = b->ops->alloc(b, n.lane_state, &o->lane_state.base, eb);
	if (!rc)
		o->lane_state.bytes = n.lane_state;
	if (rc)
		be_bind_unreserve(b, o);
	return rc;
}

#if IGNIS_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

/* Each probe stands alone: a failure is reported in the event and the next
 * probe still runs. Only the first error goes into "cuda_error". */
static void cuda_ready_fields(struct ev *e)
{
	const char *err = NULL;
	cudaError_t rc;
	int rt = 0, ndev = 0;
	int major = 0, minor = 0, patch = 0;
	char ver[48];

	rc = cudaRuntimeGetVersion(&rt);
	if (rc == cudaSuccess)
		ev_i64(e, "cuda_runtime_version", rt);
	else
		err = cudaGetErrorString(rc);

	/* cublasGetProperty needs no handle and no device. */
	if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
	    cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
	    cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
		snprintf(ver, sizeof(ver), "%d.%d.%d", major, minor, patch);
		ev_str(e, "cublas_version", ver);
	}

	rc = cudaGetDeviceCount(&ndev);
	if (rc != cudaSuccess) {
		ndev = 0;
		if (!err)
			err = cudaGetErrorString(rc);
	}
	ev_i64(e, "cuda_devices", ndev);
	if (err)
		ev_str(e, "cuda_error", err);
}
#endif

void backend_ready_fields(struct ev *e)
{
#if IGNIS_HAVE_CUDA
	ev_str(e, "backends", "cpu,cuda");
	cuda_ready_fields(e);
#else
	ev_str(e, "backends", "cpu");
#endif
}
