/*
 * rmsnorm_f32.cu - RMSNorm over rows of fp32, one block per row.
 *
 * Each thread sums the squares of a strided slice of its row, the warp
 * reduces with shuffles, warp 0 reduces the per-warp partials (at most 32:
 * a block has at most 1024 threads), and every thread then scales its slice.
 * Sums are fp32, in another order than the cpu backend's cop_rmsnorm (its
 * 16 lanes and fixed tree), so the two differ in the last bits: under 5e-7
 * relative (tests/gpu/test_rmsnorm_gpu.c allows 1e-5).
 */
#include <cuda_runtime.h>

#include "kernels.h"

/* Threads per block: the row length rounded up to a whole warp, at most
 * 1024 (the hardware limit); longer rows loop. */
#define RMSNORM_MAX_THREADS 1024
#define WARP                32

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int off = WARP / 2; off > 0; off /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

/* blockDim.x is a multiple of WARP, so every warp is full for the shuffles. */
static __global__ void rmsnorm_f32_kernel(const float *x, const float *__restrict__ w, float *y,
                                          int cols, float eps)
{
	__shared__ float partial[RMSNORM_MAX_THREADS / WARP];
	__shared__ float inv_rms;
	const size_t base = (size_t)blockIdx.x * (size_t)cols;
	const float *xr = x + base;
	float *yr = y + base;
	const int lane = threadIdx.x % WARP;
	const int warp = threadIdx.x / WARP;
	float ss = 0.0f;

	for (int c = threadIdx.x; c < cols; c += blockDim.x) {
		const float v = xr[c];
		ss += v * v;
	}
	ss = warp_sum(ss);
	if (lane == 0)
		partial[warp] = ss;
	__syncthreads();

	if (warp == 0) {
		ss = lane < (int)(blockDim.x / WARP) ? partial[lane] : 0.0f;
		ss = warp_sum(ss);
		if (lane == 0)
			inv_rms = rsqrtf(ss / (float)cols + eps);
	}
	__syncthreads();

	const float inv = inv_rms;
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

	int threads = (cols + WARP - 1) / WARP * WARP;
	if (threads > RMSNORM_MAX_THREADS)
		threads = RMSNORM_MAX_THREADS;
	rmsnorm_f32_kernel<<<rows, threads, 0, (cudaStream_t)stream>>>(d_x, d_w, d_y, cols, eps);
	return (int)cudaGetLastError();
}
