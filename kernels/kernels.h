/*
 * kernels.h - the CUDA kernels' launchers: what the cuda backend calls.
 *
 * kernels/ is a leaf of the tree (tests/unit/layering.sh): it includes
 * nothing of ours but common/, knows no backend table and no model, and
 * computes on device pointers it is handed. The cuda backend links it and
 * decides what runs when (the worker's table library links it today; the
 * backend's own entries go to gpu-worker/backend/cuda/, which may include
 * this header and the table's).
 *
 * One operation per .cu file (rmsnorm_f32.cu, ...), each exporting one host
 * launcher with plain C types, so C code calls it without CUDA headers. The
 * reference a launcher is checked against is the cpu backend's op of the same
 * name (gpu-worker/backend/cpu/cpu_ops.h), at a tolerance each test states:
 * there is no separate host copy of a kernel here.
 *
 * Launchers: device pointers are prefixed `d_` and stay owned by the caller;
 * `stream` is a cudaStream_t (NULL: the legacy default stream). A launcher
 * only enqueues work: it returns 0 or the cudaError_t value of a rejected
 * argument or a failed launch; errors of the kernel itself surface at the
 * caller's next synchronisation. This library, and so these launchers, is
 * built only when the build has CUDA (IGNIS_HAVE_CUDA in version.h).
 */
#ifndef IGNIS_KERNELS_H
#define IGNIS_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * RMSNorm over each of `rows` rows of `cols` contiguous floats (cop_rmsnorm's
 * formula, summed in another order):
 *
 *   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * w[c]
 *
 * `d_x` and `d_y` hold rows * cols floats (they may be the same buffer: the
 * kernel reads a row fully before it writes it), `d_w` holds cols floats.
 * rows == 0 does nothing; rows < 0 or cols < 1 is cudaErrorInvalidValue.
 */
int kern_rmsnorm_f32(const float *d_x, const float *d_w, float *d_y, int rows, int cols, float eps,
                     void *stream);

#ifdef __cplusplus
}
#endif

#endif
