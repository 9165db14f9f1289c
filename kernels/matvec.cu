/*
 * matvec.cu - y = W x for a weight matrix in any type a model file holds
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), read in place: blocks are
 * decoded in registers, never into a copy of the matrix. x and y are fp32.
 *
 * One warp per output row, four rows a block of 128 threads. The warp walks
 * its row in units (kernels/quant_blocks.h: up to 16 elements, a piece of a
 * block); lane l takes units l, l + 32, ..., decodes each with the shared
 * qb_unit (the host's very source) and folds it into one running sum per
 * vector with fused multiply-adds in the unit's fixed element order
 * (qb_unit_dot); the 32 lane sums then meet in a fixed butterfly of
 * __shfl_xor_sync over offsets 16, 8, 4, 2, 1. That is qb_row_dot's order,
 * which the host replays bit for bit (tests/gpu/test_quant_blocks_host.c on
 * the host, tests/gpu/test_matvec_gpu.c against the device).
 *
 * WHY THE ORDER IS BATCH-INVARIANT. Every (row, vector) output is one sum
 * kept by one warp from start to end: no atomics, no split of a row across
 * warps or blocks, no shared partial sums. The terms each lane adds, and the
 * order it adds them in, are a function of (type, n_in, lane) alone; the
 * butterfly is fixed. The number of vectors only decides how many running
 * sums a lane carries at once (VT, a register tile of 1, 2, 4 or 8 vectors)
 * and how often a row is walked (n_vec / VT passes): neither touches a
 * single sum's terms or order. So a vector's outputs are the same bits
 * whether launched alone (n_vec = 1) or among any others, in any position,
 * and on any grid.
 *
 * Loads: consecutive lanes take consecutive units, so a warp reads a run of
 * whole blocks (32 units: 2 K-quant blocks, 8 Q8_0/Q4_0 blocks, 256 plain
 * elements) in one sweep, each lane with 16- or 8-byte vector loads where
 * the block's alignment allows them (Q4_K, Q5_K, the aligned plain rows) and
 * 16-bit loads where it does not (Q8_0's 34-byte, Q4_0's 18-byte and Q6_K's
 * 210-byte blocks are only 2-byte aligned in a row). x is read as float4s
 * (it stays in L1/L2: every warp reads the same vectors).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"
#include "quant_blocks.h"

#define MV_ROWS   4 /* warps, hence rows, per block */
#define MV_VT_MAX 8 /* vectors a lane carries at once */
#define FULL_WARP 0xffffffffu

template <uint32_t TYPE, int VEC, int VT>
static __global__ void __launch_bounds__(QB_LANES *MV_ROWS)
    matvec_kernel(const uint8_t *__restrict__ w, size_t row_bytes, const float *__restrict__ x,
                  float *__restrict__ y, uint32_t n_in, int n_out, int n_vec)
{
	const int row = (int)blockIdx.x * MV_ROWS + (int)threadIdx.y;
	const uint32_t lane = threadIdx.x;

	if (row >= n_out) /* the whole warp leaves: the shuffles below see full warps */
		return;
	const uint8_t *wr = w + (size_t)row * row_bytes;
	const uint32_t units = qb_row_units(TYPE, n_in);

	for (int v0 = 0; v0 < n_vec; v0 += VT) {
		const int nv = n_vec - v0 < VT ? n_vec - v0 : VT;
		const float *xv = x + (size_t)v0 * n_in;
		float acc[VT];

#pragma unroll
		for (int t = 0; t < VT; t++)
			acc[t] = 0.0f;
		for (uint32_t u = lane; u < units; u += QB_LANES) {
			float wv[QB_UNIT_MAX];
			uint32_t off[QB_RUNS_MAX];
			int n = qb_unit(TYPE, wr, u, n_in, VEC, wv, off);

			if (VEC) /* whole units: a constant, so wv[] stays in registers */
				n = qb_unit_elems(TYPE);
#pragma unroll
			for (int t = 0; t < VT; t++)
				if (t < nv)
					acc[t] = qb_unit_dot(wv, off, n, xv + (size_t)t * n_in, VEC,
					                     acc[t]);
		}
#pragma unroll
		for (int t = 0; t < VT; t++)
#pragma unroll
			for (int o = QB_LANES / 2; o >= 1; o /= 2)
				acc[t] = qb_add(acc[t], __shfl_xor_sync(FULL_WARP, acc[t], o));
		if (lane == 0) {
#pragma unroll
			for (int t = 0; t < VT; t++)
				if (t < nv)
					y[(size_t)(v0 + t) * (size_t)n_out + (size_t)row] = acc[t];
		}
	}
}

template <uint32_t TYPE, int VEC>
static int matvec_launch(const uint8_t *w, const float *x, float *y, uint32_t n_in, int n_out,
                         int n_vec, cudaStream_t stream)
{
	const size_t row_bytes = (size_t)(n_in / qb_block_elems(TYPE)) * qb_block_bytes(TYPE);
	const dim3 block(QB_LANES, MV_ROWS);
	const dim3 grid((unsigned)((n_out + MV_ROWS - 1) / MV_ROWS));

	/* The tile only bounds how many sums a lane carries: any choice gives
	 * the same bits (see the top). The smallest that covers n_vec in one
	 * pass, up to MV_VT_MAX. */
	if (n_vec <= 1)
		matvec_kernel<TYPE, VEC, 1>
		    <<<grid, block, 0, stream>>>(w, row_bytes, x, y, n_in, n_out, n_vec);
	else if (n_vec <= 2)
		matvec_kernel<TYPE, VEC, 2>
		    <<<grid, block, 0, stream>>>(w, row_bytes, x, y, n_in, n_out, n_vec);
	else if (n_vec <= 4)
		matvec_kernel<TYPE, VEC, 4>
		    <<<grid, block, 0, stream>>>(w, row_bytes, x, y, n_in, n_out, n_vec);
	else
		matvec_kernel<TYPE, VEC, MV_VT_MAX>
		    <<<grid, block, 0, stream>>>(w, row_bytes, x, y, n_in, n_out, n_vec);
	return (int)cudaGetLastError();
}

template <uint32_t TYPE>
static int matvec_plain(const uint8_t *w, const float *x, float *y, uint32_t n_in, int n_out,
                        int n_vec, int vec, cudaStream_t stream)
{
	if (vec)
		return matvec_launch<TYPE, 1>(w, x, y, n_in, n_out, n_vec, stream);
	return matvec_launch<TYPE, 0>(w, x, y, n_in, n_out, n_vec, stream);
}

static int aligned(const void *p, uintptr_t to)
{
	return ((uintptr_t)p & (to - 1)) == 0;
}

extern "C" int kern_matvec(const void *d_w, unsigned type, const float *d_x, float *d_y, int n_in,
                           int n_out, int n_vec, void *stream)
{
	const uint32_t be = qb_block_elems(type);

	if (be == 0 || n_in < 1 || (uint32_t)n_in % be != 0 || n_out < 0 || n_vec < 0 || !d_w ||
	    !d_x || !d_y)
		return (int)cudaErrorInvalidValue;
	if (n_out == 0 || n_vec == 0)
		return 0;
	/* The loads' alignment (quant_blocks.h): x as float4s for the block
	 * types (their n_in is a multiple of 32, so every vector stays aligned). */
	const uintptr_t walign = type == QB_Q4_K || type == QB_Q5_K ? 16 : type == QB_F32 ? 4 : 2;
	if (!aligned(d_w, walign) || !aligned(d_x, qb_is_plain(type) ? 4 : 16))
		return (int)cudaErrorMisalignedAddress;

	const uint8_t *w = (const uint8_t *)d_w;
	const uint32_t n = (uint32_t)n_in;
	const cudaStream_t s = (cudaStream_t)stream;
	const int vec = qb_row_vec(type, n, aligned(d_w, 16) && aligned(d_x, 16));

	switch (type) {
	case QB_F32:
		return matvec_plain<QB_F32>(w, d_x, d_y, n, n_out, n_vec, vec, s);
	case QB_F16:
		return matvec_plain<QB_F16>(w, d_x, d_y, n, n_out, n_vec, vec, s);
	case QB_BF16:
		return matvec_plain<QB_BF16>(w, d_x, d_y, n, n_out, n_vec, vec, s);
	case QB_Q8_0:
		return matvec_launch<QB_Q8_0, 1>(w, d_x, d_y, n, n_out, n_vec, s);
	case QB_Q4_0:
		return matvec_launch<QB_Q4_0, 1>(w, d_x, d_y, n, n_out, n_vec, s);
	case QB_Q4_K:
		return matvec_launch<QB_Q4_K, 1>(w, d_x, d_y, n, n_out, n_vec, s);
	case QB_Q5_K:
		return matvec_launch<QB_Q5_K, 1>(w, d_x, d_y, n, n_out, n_vec, s);
	case QB_Q6_K:
		return matvec_launch<QB_Q6_K, 1>(w, d_x, d_y, n, n_out, n_vec, s);
	}
	return (int)cudaErrorInvalidValue;
}
