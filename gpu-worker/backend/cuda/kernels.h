/*
 * kernels.h - the compute kernels of the cuda backend, with their CPU
 * references.
 *
 * Each op is one .cu file (rmsnorm_f32.cu, ...) exporting one host launcher
 * with plain C types, so C code calls it without CUDA headers; each has a
 * `_ref` twin in plain C (kernels_ref.c), always built, that the tests in
 * tests/gpu/ compare the device against and that the cpu backend can use.
 *
 * Launchers: device pointers are prefixed `d_` and stay owned by the caller;
 * `stream` is a cudaStream_t (NULL: the legacy default stream). A launcher
 * only enqueues work: it returns 0 or the cudaError_t value of a rejected
 * argument or a failed launch; errors of the kernel itself surface at the
 * caller's next synchronisation. The launchers exist only when the build has
 * CUDA (IGNIS_HAVE_CUDA in version.h).
 */
#ifndef IGNIS_KERNELS_H
#define IGNIS_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * RMSNorm over each of `rows` rows of `cols` contiguous floats:
 *
 *   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * w[c]
 *
 * `d_x` and `d_y` hold rows * cols floats (they may be the same buffer: the
 * kernel reads a row fully before it writes it), `d_w` holds cols floats.
 * rows == 0 does nothing; rows < 0 or cols < 1 is cudaErrorInvalidValue.
 */
int kern_rmsnorm_f32(const float *d_x, const float *d_w, float *d_y, int rows, int cols, float eps,
                     void *stream);

/* The same on host memory, accumulating in double; `x` and `y` may alias. */
void kern_rmsnorm_f32_ref(const float *x, const float *w, float *y, int rows, int cols, float eps);

#ifdef __cplusplus
}
#endif

#endif
