/*
 * backend.h - the compute backends this build of the gpu-worker has.
 *
 * backend.c is the one file with `#if IGNIS_HAVE_CUDA` (style guide rule 8).
 * For now it only reports what the build and the machine offer; the table of
 * backend functions (memory info, allocation within the plan, copies,
 * kernels) comes later and will live behind this header too.
 */
#ifndef IGNIS_GPU_WORKER_BACKEND_H
#define IGNIS_GPU_WORKER_BACKEND_H

#include "event.h"

/*
 * Add the backend facts to the worker's ready event:
 *
 *   "backends"              "cpu" or "cpu,cuda" (what this build has)
 *   "cuda_runtime_version"  cudaRuntimeGetVersion(), e.g. 13000      } only when
 *   "cublas_version"        "MAJOR.MINOR.PATCH" of the linked cuBLAS } built with
 *   "cuda_devices"          cudaGetDeviceCount(), 0 on error         } CUDA
 *   "cuda_error"            cudaGetErrorString() of a failed probe, e.g.
 *                           "no CUDA-capable device is detected"
 *
 * A probe that fails is reported, never fatal: a worker without a GPU still
 * runs the cpu backend.
 */
void backend_ready_fields(struct ev *e);

#endif
