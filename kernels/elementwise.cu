/*
 * elementwise.cu - the small kernels of a layer around its products: the
 * embedding's lookup (kern_embed), RMSNorm with a weight vector as the file
 * holds it (kern_rmsnorm), the residual add (kern_add) and SwiGLU
 * (kern_swiglu). Each is the cpu backend's op of the same name
 * (gpu-worker/backend/cpu/cpu_ops.h) with every floating-point step named
 * (__fadd_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn), so nvcc fuses nothing the
 * cpu rounds twice:
 *
 *   kern_embed   cop_row: bit for bit (quant_blocks.h decodes as quant.c
 *                does; only a NaN weight may come out as another NaN);
 *   kern_add     cop_add: bit for bit;
 *   kern_rmsnorm cop_rmsnorm's formula, r = 1 / sqrt(ss / n + eps) and
 *                y = (x r) w each step rounded, with ss summed in
 *                block_sum.h's order, not the cpu's: the last bits differ;
 *   kern_swiglu  cop_swiglu's formula, g / (1 + exp(-g)) * u, each step
 *                rounded; the device's expf is within 2 ulp, not the libm's,
 *                so a result may differ from the cpu's by a few ulp.
 *
 * Batch invariance (the exactness contract): every output element is a
 * function of its own inputs and the shapes alone. The embedding and the
 * element-wise ops compute each element on its own; the RMSNorm sums a row
 * in one block, in an order fixed by cols (block_sum.h), so a row's result
 * is the same bits whatever `rows`, d_rows or the launch's other rows.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_sum.h"
#include "kernels.h"
#include "quant_blocks.h"

/* The embedding's threads per block at most (a row's units beyond loop). */
#define EMBED_MAX_THREADS 256
/* The element-wise ops: threads per block, and a cap on the grid (the
 * threads stride over the rest). */
#define EW_THREADS    256
#define EW_MAX_BLOCKS 4096

static int aligned(const void *p, uintptr_t to)
{
	return ((uintptr_t)p & (to - 1)) == 0;
}

/* ---- kern_embed ---- */

/*
 * Block t copies row tokens[t] of the matrix, decoded, to out[t]: thread i
 * takes units i, i + blockDim.x, ... of the row (quant_blocks.h's units),
 * decodes each with qb_unit and stores its runs of 4 (as float4s when
 * `ovec`: out 16-byte aligned and n_in a multiple of 4, so every run is).
 * VEC: the plain types' 16-byte loads (qb_row_vec); 1 for the block types.
 */
template <uint32_t TYPE, int VEC>
static __global__ void __launch_bounds__(EMBED_MAX_THREADS)
    embed_kernel(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t n_in,
                 const uint32_t *__restrict__ tokens, float *__restrict__ out, int ovec)
{
	const uint8_t *row = w + (size_t)tokens[blockIdx.x] * row_bytes;
	float *o = out + (size_t)blockIdx.x * n_in;
	const uint32_t units = qb_row_units(TYPE, n_in);

	for (uint32_t u = threadIdx.x; u < units; u += blockDim.x) {
		float wv[QB_UNIT_MAX];
		uint32_t off[QB_RUNS_MAX];
		int n = qb_unit(TYPE, row, u, n_in, VEC, wv, off);

		if (VEC) /* whole units: a constant, so wv[] stays in registers */
			n = qb_unit_elems(TYPE);
#pragma unroll
		for (int r = 0; r < QB_RUNS_MAX; r++) {
			if (4 * r >= n)
				break;
			float *p = o + off[r];

			if (ovec && 4 * r + 4 <= n) {
				*(float4 *)p = make_float4(wv[4 * r], wv[4 * r + 1], wv[4 * r + 2],
				                           wv[4 * r + 3]);
			} else {
#pragma unroll
				for (int k = 0; k < 4; k++)
					if (4 * r + k < n)
						p[k] = wv[4 * r + k];
			}
		}
	}
}

template <uint32_t TYPE, int VEC>
static int embed_launch(const uint8_t *w, uint32_t n_in, const uint32_t *tokens, int n_rows,
                        float *out, cudaStream_t stream)
{
	const size_t row_bytes = (size_t)(n_in / qb_block_elems(TYPE)) * qb_block_bytes(TYPE);
	const uint32_t units = qb_row_units(TYPE, n_in);
	uint32_t threads = (units + QB_LANES - 1) / QB_LANES * QB_LANES;
	const int ovec = n_in % 4 == 0 && aligned(out, 16);

	if (threads > EMBED_MAX_THREADS)
		threads = EMBED_MAX_THREADS;
	embed_kernel<TYPE, VEC>
	    <<<(unsigned)n_rows, threads, 0, stream>>>(w, row_bytes, n_in, tokens, out, ovec);
	return (int)cudaGetLastError();
}

template <uint32_t TYPE>
static int embed_plain(const uint8_t *w, uint32_t n_in, const uint32_t *tokens, int n_rows,
                       float *out, int vec, cudaStream_t stream)
{
	if (vec)
		return embed_launch<TYPE, 1>(w, n_in, tokens, n_rows, out, stream);
	return embed_launch<TYPE, 0>(w, n_in, tokens, n_rows, out, stream);
}

/*
 * Arguments as kern_matvec's: an unknown type, n_in < 1 or not whole
 * blocks, n_rows < 0 or a NULL pointer is cudaErrorInvalidValue; d_w must be
 * 16-byte aligned for Q4_K and Q5_K, 4 for F32 and 2 for the rest (else
 * cudaErrorMisalignedAddress). Every token must name a row of the matrix
 * (the launcher cannot read them: the caller checks them against the
 * vocabulary). d_out must not overlap d_w or d_tokens.
 */
extern "C" int kern_embed(const void *d_w, unsigned type, int n_in, const uint32_t *d_tokens,
                          int n_rows, float *d_out, void *stream)
{
	const uint32_t be = qb_block_elems(type);

	if (be == 0 || n_in < 1 || (uint32_t)n_in % be != 0 || n_rows < 0 || !d_w || !d_tokens ||
	    !d_out)
		return (int)cudaErrorInvalidValue;
	if (n_rows == 0)
		return 0;
	const uintptr_t walign = type == QB_Q4_K || type == QB_Q5_K ? 16 : type == QB_F32 ? 4 : 2;
	if (!aligned(d_w, walign))
		return (int)cudaErrorMisalignedAddress;

	const uint8_t *w = (const uint8_t *)d_w;
	const uint32_t n = (uint32_t)n_in;
	const cudaStream_t s = (cudaStream_t)stream;
	/* a plain row is 16-byte aligned when the matrix is and n_in is a
	 * multiple of 8 (qb_row_vec's condition) */
	const int vec = qb_row_vec(type, n, aligned(d_w, 16));

	switch (type) {
	case QB_F32:
		return embed_plain<QB_F32>(w, n, d_tokens, n_rows, d_out, vec, s);
	case QB_F16:
		return embed_plain<QB_F16>(w, n, d_tokens, n_rows, d_out, vec, s);
	case QB_BF16:
		return embed_plain<QB_BF16>(w, n, d_tokens, n_rows, d_out, vec, s);
	case QB_Q8_0:
		return embed_launch<QB_Q8_0, 1>(w, n, d_tokens, n_rows, d_out, s);
	case QB_Q4_0:
		return embed_launch<QB_Q4_0, 1>(w, n, d_tokens, n_rows, d_out, s);
	case QB_Q4_K:
		return embed_launch<QB_Q4_K, 1>(w, n, d_tokens, n_rows, d_out, s);
	case QB_Q5_K:
		return embed_launch<QB_Q5_K, 1>(w, n, d_tokens, n_rows, d_out, s);
	case QB_Q6_K:
		return embed_launch<QB_Q6_K, 1>(w, n, d_tokens, n_rows, d_out, s);
	}
	return (int)cudaErrorInvalidValue;
}

/* ---- kern_rmsnorm ---- */

/* Element c of a weight vector of type WT (cop_at): F32 as is, F16 and BF16
 * widened exactly (quant_blocks.h). */
template <uint32_t WT> static __device__ __forceinline__ float vec_at(const void *w, int c)
{
	if (WT == QB_F32)
		return ((const float *)w)[c];
	const uint32_t h = ((const uint16_t *)w)[c];

	return WT == QB_F16 ? qb_f16(h) : qb_bf16(h);
}

/*
 * Block r normalises row src = rows ? rows[r] : r of x into row r of y:
 * ss in block_sum.h's order, then cop_rmsnorm's steps each rounded:
 * r = 1 / sqrt(ss / cols + eps), y[c] = (x[c] * r) * w[c]. A thread scales
 * the elements it summed; with y == x (no gather) it reads each before it
 * writes it, and bs_sumsq's barrier keeps every read of the sum before any
 * write. blockDim.x = bs_threads(cols).
 */
template <uint32_t WT>
static __global__ void rmsnorm_kernel(const float *x, const void *__restrict__ w, float *y,
                                      int cols, float eps, const uint32_t *__restrict__ rows)
{
	const size_t src = rows ? (size_t)rows[blockIdx.x] : (size_t)blockIdx.x;
	const float *xr = x + src * (size_t)cols;
	float *yr = y + (size_t)blockIdx.x * (size_t)cols;
	const float ss = bs_sumsq(xr, cols);
	const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)cols), eps)));

	for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x)
		yr[c] = __fmul_rn(__fmul_rn(xr[c], r), vec_at<WT>(w, c));
}

/*
 * Arguments: rows == 0 does nothing; rows < 0, cols < 1, a NULL d_x, d_y or
 * weight, a weight type other than F32, F16 and BF16, or d_y == d_x with
 * d_rows (a gather in place would race) is cudaErrorInvalidValue; a weight
 * not aligned to its element (4 bytes for F32, 2 for the halves) is
 * cudaErrorMisalignedAddress. d_rows[r] must name a row of d_x (the
 * launcher cannot read them).
 */
extern "C" int kern_rmsnorm(const float *d_x, struct kern_vec w, float *d_y, int rows, int cols,
                            float eps, const uint32_t *d_rows, void *stream)
{
	if (rows < 0 || cols < 1 || !d_x || !d_y || !w.d_p || (d_rows && d_y == d_x))
		return (int)cudaErrorInvalidValue;
	if (w.type != QB_F32 && w.type != QB_F16 && w.type != QB_BF16)
		return (int)cudaErrorInvalidValue;
	if (rows == 0)
		return 0;
	if (!aligned(w.d_p, w.type == QB_F32 ? 4 : 2))
		return (int)cudaErrorMisalignedAddress;

	const cudaStream_t s = (cudaStream_t)stream;
	const int threads = bs_threads(cols);

	switch (w.type) {
	case QB_F32:
		rmsnorm_kernel<QB_F32><<<rows, threads, 0, s>>>(d_x, w.d_p, d_y, cols, eps, d_rows);
		break;
	case QB_F16:
		rmsnorm_kernel<QB_F16><<<rows, threads, 0, s>>>(d_x, w.d_p, d_y, cols, eps, d_rows);
		break;
	default:
		rmsnorm_kernel<QB_BF16>
		    <<<rows, threads, 0, s>>>(d_x, w.d_p, d_y, cols, eps, d_rows);
		break;
	}
	return (int)cudaGetLastError();
}

/* ---- kern_add, kern_swiglu ---- */

/* The grid for `work` items (one float or one float4 each), threads
 * striding over what a capped grid leaves. Any grid gives the same bits:
 * every element is computed on its own. */
static unsigned ew_blocks(uint64_t work)
{
	const uint64_t b = (work + EW_THREADS - 1) / EW_THREADS;

	return b == 0 ? 1u : b > EW_MAX_BLOCKS ? (unsigned)EW_MAX_BLOCKS : (unsigned)b;
}

/* cop_add's element: a + b, rounded once. */
static __device__ __forceinline__ float add1(float a, float b)
{
	return __fadd_rn(a, b);
}

/* cop_swiglu's element: g / (1 + expf(-g)) * u, each step rounded. */
static __device__ __forceinline__ float swiglu1(float g, float u)
{
	return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

/*
 * x[i] += y[i] for i < n. VEC: x and y 16-byte aligned, the first n - n % 4
 * elements as float4s (an element is read before it is written by the same
 * thread, so y == x works), the last n % 4 by the first threads.
 */
template <int VEC> static __global__ void add_kernel(float *x, const float *y, uint64_t n)
{
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	const uint64_t i0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t m = 0;

	if (VEC) {
		float4 *x4 = (float4 *)x;
		const float4 *y4 = (const float4 *)y;

		m = n / 4;
		for (uint64_t i = i0; i < m; i += stride) {
			float4 a = x4[i];
			const float4 b = y4[i];

			a.x = add1(a.x, b.x);
			a.y = add1(a.y, b.y);
			a.z = add1(a.z, b.z);
			a.w = add1(a.w, b.w);
			x4[i] = a;
		}
		m *= 4;
	}
	for (uint64_t i = m + i0; i < n; i += stride)
		x[i] = add1(x[i], y[i]);
}

/* out[i] = swiglu1(g[i], u[i]) for i < n; VEC as add_kernel's (out may be
 * g or u). */
template <int VEC>
static __global__ void swiglu_kernel(const float *g, const float *u, float *out, uint64_t n)
{
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	const uint64_t i0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t m = 0;

	if (VEC) {
		const float4 *g4 = (const float4 *)g, *u4 = (const float4 *)u;
		float4 *o4 = (float4 *)out;

		m = n / 4;
		for (uint64_t i = i0; i < m; i += stride) {
			const float4 a = g4[i], b = u4[i];

			o4[i] = make_float4(swiglu1(a.x, b.x), swiglu1(a.y, b.y), swiglu1(a.z, b.z),
			                    swiglu1(a.w, b.w));
		}
		m *= 4;
	}
	for (uint64_t i = m + i0; i < n; i += stride)
		out[i] = swiglu1(g[i], u[i]);
}

/* A NULL pointer is cudaErrorInvalidValue (n is unsigned: never negative);
 * n == 0 does nothing. d_y must be d_x or not overlap it. */
extern "C" int kern_add(float *d_x, const float *d_y, uint64_t n, void *stream)
{
	if (!d_x || !d_y)
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;

	const cudaStream_t s = (cudaStream_t)stream;

	if (aligned(d_x, 16) && aligned(d_y, 16))
		add_kernel<1><<<ew_blocks((n + 3) / 4), EW_THREADS, 0, s>>>(d_x, d_y, n);
	else
		add_kernel<0><<<ew_blocks(n), EW_THREADS, 0, s>>>(d_x, d_y, n);
	return (int)cudaGetLastError();
}

/* As kern_add's; d_out must be one of the inputs or overlap neither. */
extern "C" int kern_swiglu(const float *d_gate, const float *d_up, float *d_out, uint64_t n,
                           void *stream)
{
	if (!d_gate || !d_up || !d_out)
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;

	const cudaStream_t s = (cudaStream_t)stream;

	if (aligned(d_gate, 16) && aligned(d_up, 16) && aligned(d_out, 16))
		swiglu_kernel<1>
		    <<<ew_blocks((n + 3) / 4), EW_THREADS, 0, s>>>(d_gate, d_up, d_out, n);
	else
		swiglu_kernel<0><<<ew_blocks(n), EW_THREADS, 0, s>>>(d_gate, d_up, d_out, n);
	return (int)cudaGetLastError();
}
