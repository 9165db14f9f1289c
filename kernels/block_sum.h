/*
 * block_sum.h - a row's sum of squares by one thread block, in an order
 * fixed by the row's length alone: the reduction kern_rmsnorm_f32
 * (rmsnorm_f32.cu) and kern_rmsnorm (elementwise.cu) share.
 *
 * Device code: nvcc only (a .cu file includes it; kernels.h is the C face).
 *
 * THE ORDER (bs_sumsq over xr[0..cols), launched with bs_threads(cols)
 * threads, T below):
 *
 *   1. thread t (0..T-1) starts at +0 and takes c = t, t + T, t + 2T, ...
 *      (c < cols) in increasing c: ss = fma(x[c], x[c], ss), one rounding;
 *   2. each warp folds its 32 sums in a butterfly of __shfl_xor_sync over
 *      offsets 16, 8, 4, 2, 1 (s[l] + s[l ^ off]);
 *   3. warp 0 takes the T / 32 warp sums (lane l the sum of warp l, +0 past
 *      the last warp) and folds them in the same butterfly.
 *
 * T depends on cols alone (the row length rounded up to a whole warp, at
 * most 1024), so a row's sum is the same bits whatever the grid, the other
 * rows of the launch or where the row lies in memory: the batch invariance
 * of the exactness contract (gpu-worker/backend/backend.h). It is not the
 * cpu backend's order (cop_dot_f32: 16 lanes, a fixed tree, products
 * rounded before the add), so the two differ in the last bits.
 */
#ifndef IGNIS_KERNELS_BLOCK_SUM_H
#define IGNIS_KERNELS_BLOCK_SUM_H

#ifndef __CUDACC__
#error "block_sum.h is device code: include it from a .cu file"
#endif

#include <cuda_runtime.h>

#define BS_WARP        32
#define BS_MAX_THREADS 1024 /* the hardware's limit: at most 32 warp sums */

/* The threads a block takes for a row of `cols` (>= 1) elements: part of
 * the order above. */
static __host__ __device__ __forceinline__ int bs_threads(int cols)
{
	int t = (cols + BS_WARP - 1) / BS_WARP * BS_WARP;

	return t < BS_MAX_THREADS ? t : BS_MAX_THREADS;
}

/* Step 2's butterfly; every lane ends with the warp's sum (IEEE addition
 * commutes, so s[l] + s[l ^ off] is the same on both lanes of a pair). */
static __device__ __forceinline__ float bs_warp_sum(float v)
{
#pragma unroll
	for (int off = BS_WARP / 2; off > 0; off /= 2)
		v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

/*
 * The sum of squares of xr[0..cols) in the order above; every thread of the
 * block gets it. Called by all the block's threads (blockDim.x =
 * bs_threads(cols)), at most once per kernel (it owns two words of shared
 * memory and ends with a barrier, after which the row may be written).
 */
static __device__ __forceinline__ float bs_sumsq(const float *xr, int cols)
{
	__shared__ float partial[BS_MAX_THREADS / BS_WARP];
	__shared__ float total;
	const int lane = (int)(threadIdx.x % BS_WARP), warp = (int)(threadIdx.x / BS_WARP);
	float ss = 0.0f;

	for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x) {
		const float v = xr[c];

		ss = __fmaf_rn(v, v, ss);
	}
	ss = bs_warp_sum(ss);
	if (lane == 0)
		partial[warp] = ss;
	__syncthreads();
	if (warp == 0) {
		ss = lane < (int)(blockDim.x / BS_WARP) ? partial[lane] : 0.0f;
		ss = bs_warp_sum(ss);
		if (lane == 0)
			total = ss;
	}
	__syncthreads();
	return total;
}

#endif
