/*
 * rmsnorm_f32.cu - RMSNorm over rows of fp32, one block per row.
 *
 * The block sums the squares of its row in block_sum.h's fixed order (a
 * strided slice per thread with fused multiply-adds, a warp butterfly, then
 * warp 0 over the per-warp partials), and every thread then scales its
 * slice. Sums are fp32, in another order than the cpu backend's cop_rmsnorm
 * (its 16 lanes and fixed tree), so the two differ in the last bits: under
 * 5e-7 relative (tests/gpu/test_rmsnorm_gpu.c allows 1e-5).
 */
#include <cuda_runtime.h>

#include "block_sum.h"
#include "kernels.h"

/* blockDim.x = bs_threads(cols): a multiple of 32, so every warp is full for
 * the shuffles. */
static __global__ void rmsnorm_f32_kernel(const float *x, const float *__restrict__ w, float *y,
                                          int cols, float eps)
{
	const size_t base = (size_t)blockIdx.x * (size_t)cols;
	const float *xr = x + base;
	float *yr = y + base;
	const float inv = rsqrtf(bs_sumsq(xr, cols) / (float)cols + eps);

	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		yr[c] = xr[c] * inv * w[c];
}

extern "C" int kern_rmsnorm_f32(const float *d_x, const float *d_w, float *d_y, int rows, int cols,
                                float eps, void *stream)
{
	if (rows < 0 || cols < 1 || !d_x || !d_w || !d_y)
		return (int)cudaErrorInvalidValue;
	if (rows == 0)
		return 0;

	rmsnorm_f32_kernel<<<rows, bs_threads(cols), 0, (cudaStream_t)stream>>>(d_x, d_w, d_y, cols,
	                                                                        eps);
	return (int)cudaGetLastError();
}
