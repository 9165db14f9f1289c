/*
 * deltanet.cu - the gated delta rule layer's token mixer (struct kern_lin,
 * layer_args.h): the causal depthwise convolution over q, k and v, then the
 * recurrence per value head, as the cpu backend's layer_linear.c computes
 * them (gpu-worker/backend/cpu/layer_linear.h: steps 3 to 6).
 *
 * THE SAME IEEE OPERATIONS AS THE CPU. Every sum, product and quotient is a
 * named, correctly rounded operation (qb_add, qb_mul of quant_blocks.h,
 * __fdiv_rn, __fsqrt_rn): nvcc fuses nothing into a multiply-add here, as
 * the cpu backend (built with -ffp-contract=off) fuses nothing. Each sum
 * runs in the cpu's own order: the conv from +0 over taps 0 .. K-1, S's
 * column sums from +0 in increasing i, the L2 and RMS norms in
 * cop_dot_f32's order (16 lane sums, the fixed tree 8, 4, 2, 1, the tail;
 * cpu_ops.h). So a token's results are the cpu's bits wherever expf and
 * log1pf (the device's against libm's: a few ulp apart) give the same
 * bits, and within a small tolerance everywhere.
 *
 * kern_lin_conv: one thread per (segment, channel c), blocks of LIN_CONV_
 * THREADS channels, grid (channel blocks, segments). The thread keeps the
 * channel's K taps and its window of the K-1 previous inputs in registers
 * (read from the segment's conv state, written back at the end), walks the
 * segment's tokens in increasing order and replaces u with silu(conv) in
 * d_qkv. Consecutive threads touch consecutive channels: coalesced.
 *
 * kern_lin_recur: one block per (value head h, segment), grid (lv,
 * segments), dv rounded up to a warp threads (at most 256). Thread j owns
 * column j of S_h (S[i][j] for every i): in registers for dk <= 128
 * (loaded once a segment, stored back at its end), else read and written
 * in place in the state. For each token in increasing order:
 *   1. all threads load the key head's q and k into shared memory; warp 0
 *      sums their squares (lanes 0-15 q, lanes 16-31 k, cop_dot_f32's
 *      order each) and sets the two inverse norms; all threads scale q and
 *      k in place (q by r and then 1/sqrtf(dk), k by r);
 *   2. thread j: decay its column and kv = sum_i S[i][j] k[i] (one pass,
 *      increasing i), delta = (v[j] - kv) * beta, the rank-one update and
 *      o = sum_i S[i][j] q[i] (a second pass, increasing i), o into shared;
 *   3. warp 0 sums o's squares in cop_dot_f32's order: the inverse RMS;
 *   4. thread j: o = (o * r) * norm[j], then silu(z[j]) * o (cop_swiglu(z,
 *      o, o)) into d_o.
 * __syncthreads() separates the steps; beta and alpha are computed by every
 * thread from the same inputs (the same bits).
 *
 * WHY BATCH- AND CHUNK-INVARIANT. Every output element and every state
 * element is computed by one thread (or warp 0, for a norm) in an order
 * that depends on dk, dv and K alone: no atomics, no sum split by the
 * launch's shape, no value read from another segment. A segment's tokens
 * are walked in increasing order, each updating the state exactly as a
 * launch of that token alone would (the registers hold the same floats the
 * state would), so 67 tokens at once, 37 + 30, or 67 single-token launches
 * leave the same bits in d_qkv, d_o and the state; a segment's results do
 * not depend on which other segments share the launch. Where S lives
 * (registers or the state) changes no operation and no order.
 *
 * Limits: dk, dv 1 .. 256 (LIN_MAX_D), K 1 .. 16 (LIN_CONV_MAX), at most
 * 65535 segments; the launchers refuse other shapes, a state layout that
 * does not hold S and conv, unknown vector types or misaligned vectors
 * with cudaErrorInvalidValue. A segment whose rows overrun the launch's
 * n_tok rows traps (an error at the caller's next synchronisation) rather
 * than write out of bounds. d_o must not overlap d_qkv, d_z, d_b or d_a.
 *
 * A chunked prefill form (the 64-token WY/UT form) would replace the token
 * loop of lin_recur_kernel (lin_token) and, being another order, another
 * contract: not done here.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"
#include "quant_blocks.h"

#define WARP                   32
#define FULL_WARP              0xffffffffu
#define LIN_CONV_THREADS       128
#define LIN_CONV_MAX           16  /* taps: the window stays in registers */
#define LIN_MAX_D              256 /* dk, dv: shared q, k, o; threads per block */
#define LIN_REG_DK_MAX         128 /* columns of S in registers up to this dk */
#define LIN_SOFTPLUS_THRESHOLD 20.0f
#define LIN_DOT_LANES          16 /* cop_dot_f32's lanes (COP_DOT_LANES) */

/* Element i of a vector of weights as the file holds it (cop_at). */
static __device__ __forceinline__ float lin_at(const void *p, uint32_t type, uint64_t i)
{
	if (type == QB_F32)
		return ((const float *)p)[i];
	const uint32_t h = ((const uint16_t *)p)[i];

	return type == QB_F16 ? qb_f16(h) : qb_bf16(h);
}

static __device__ __forceinline__ float lin_silu(float y)
{
	return __fdiv_rn(y, qb_add(1.0f, expf(-y)));
}

/* ---- the convolution ---------------------------------------------------- */

/* One thread per (segment, channel): layer_linear.c's llin_conv_items. */
static __global__ void __launch_bounds__(LIN_CONV_THREADS)
    lin_conv_kernel(const struct kern_seg *__restrict__ segs, float *qkv_rows, uint32_t qkv,
                    uint32_t n_rows, const void *__restrict__ taps_p, uint32_t taps_type,
                    uint32_t K, uint64_t conv_off)
{
	const uint32_t c = blockIdx.x * LIN_CONV_THREADS + threadIdx.x;
	const struct kern_seg seg = segs[blockIdx.y];
	const uint32_t keep = K - 1;
	float w[LIN_CONV_MAX], win[LIN_CONV_MAX - 1];

	if (c >= qkv || seg.n_tok == 0)
		return;
	if (seg.row0 > n_rows || seg.n_tok > n_rows - seg.row0)
		__trap(); /* the caller's segments overrun the launch's rows */
	float *st = (float *)seg.d_state + conv_off + (uint64_t)c * keep;

#pragma unroll
	for (uint32_t i = 0; i < LIN_CONV_MAX; i++)
		w[i] = i < K ? lin_at(taps_p, taps_type, (uint64_t)c * K + i) : 0.0f;
#pragma unroll
	for (uint32_t i = 0; i < LIN_CONV_MAX - 1; i++)
		win[i] = i < keep ? st[i] : 0.0f;

	float *u = qkv_rows + (uint64_t)seg.row0 * qkv + c;
	for (uint32_t t = 0; t < seg.n_tok; t++, u += qkv) {
		const float x = *u;
		float y = 0.0f;

		/* +0, then taps 0 .. K-2 over the window (oldest first), then
		 * tap K-1 over the input: the cpu's order */
#pragma unroll
		for (uint32_t i = 0; i < LIN_CONV_MAX - 1; i++)
			if (i < keep)
				y = qb_add(y, qb_mul(w[i], win[i]));
#pragma unroll
		for (uint32_t i = 0; i < LIN_CONV_MAX; i++) {
			if (i == keep)
				y = qb_add(y, qb_mul(w[i], x));
		}
		/* slide: every index constant after unrolling (registers) */
#pragma unroll
		for (uint32_t i = 0; i < LIN_CONV_MAX - 1; i++) {
			if (i + 1 < keep)
				win[i] = win[i + 1];
			else if (i + 1 == keep)
				win[i] = x;
		}
		*u = lin_silu(y);
	}
#pragma unroll
	for (uint32_t i = 0; i < LIN_CONV_MAX - 1; i++)
		if (i < keep)
			st[i] = win[i];
}

/* ---- the recurrence ----------------------------------------------------- */

/*
 * cop_dot_f32(x, x, n) in its order, by the 16 lanes of one half of a warp
 * (l = lane % 16; the whole warp calls it, each half with its own x):
 * lane l sums x[l]^2, x[l + 16]^2, ... below n - n % 16 from +0, the tree
 * s[l] += s[l + h] for h = 8, 4, 2, 1, then the half's first lane adds the
 * tail in increasing i. The sum is valid on the half's first lane.
 */
static __device__ __forceinline__ float lin_sumsq(const float *x, uint32_t n, uint32_t l)
{
	const uint32_t m = n - n % LIN_DOT_LANES;
	float s = 0.0f;

	for (uint32_t i = l; i < m; i += LIN_DOT_LANES)
		s = qb_add(s, qb_mul(x[i], x[i]));
	/* lane L takes lane L + h: within its half for l < h, the lanes the
	 * tree keeps (the others' sums are never read again) */
	for (uint32_t h = LIN_DOT_LANES / 2; h >= 1; h /= 2)
		s = qb_add(s, __shfl_down_sync(FULL_WARP, s, h));
	if (l == 0)
		for (uint32_t i = m; i < n; i++)
			s = qb_add(s, qb_mul(x[i], x[i]));
	return s;
}

/* What the recurrence of one (segment, value head) reads: the launch's
 * constants, copied by value into the kernel's parameters. */
struct lin_recur_args {
	uint32_t lk, lv, dk, dv, qkv, n_rows;
	uint32_t grouped, tiled, a_neg;
	float eps;
	struct kern_vec a_log, dt_bias, norm;
	uint64_t s_off; /* floats from d_state to this layer's S */
	const struct kern_seg *segs;
	const float *qkv_rows, *z, *b, *a;
	float *o;
	uint32_t ba_stride;
};

/* The block's shared memory: the token's normalised q and k, o, and the
 * inverse norms warp 0 computes. */
struct lin_shared {
	float q[LIN_MAX_D], k[LIN_MAX_D], o[LIN_MAX_D];
	float rq, rk, ro;
};

/*
 * One token of one value head (layer_linear.c's llin_head_token): `col`
 * holds column j of S_h in registers (DKR > 0, DKR >= dk) or is unused and
 * the column is read and written in place at Sg[i * dv] (DKR == 0).
 */
template <int DKR>
static __device__ __forceinline__ void lin_token(const struct lin_recur_args &p, uint32_t h,
                                                 uint64_t row, float *col, float *Sg,
                                                 struct lin_shared &sh)
{
	const uint32_t dk = p.dk, dv = p.dv, r = p.lv / p.lk;
	const uint32_t kh = p.tiled ? h % p.lk : h / r;
	const uint32_t j = threadIdx.x, lane = threadIdx.x % WARP;
	const float *qkv = p.qkv_rows + row * p.qkv;

	/* 1. q and k of the key head, L2-normalised (llin_l2norm) */
	for (uint32_t i = threadIdx.x; i < dk; i += blockDim.x) {
		sh.q[i] = qkv[(uint64_t)kh * dk + i];
		sh.k[i] = qkv[(uint64_t)(p.lk + kh) * dk + i];
	}
	__syncthreads();
	if (threadIdx.x < WARP) {
		const float ss =
		    lin_sumsq(lane < LIN_DOT_LANES ? sh.q : sh.k, dk, lane % LIN_DOT_LANES);

		if (lane % LIN_DOT_LANES == 0) {
			const float rr = __fdiv_rn(1.0f, __fsqrt_rn(qb_add(ss, p.eps)));

			if (lane == 0)
				sh.rq = rr;
			else
				sh.rk = rr;
		}
	}
	__syncthreads();
	{
		const float rq = sh.rq, rk = sh.rk;
		const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)dk));

		for (uint32_t i = threadIdx.x; i < dk; i += blockDim.x) {
			sh.q[i] = qb_mul(qb_mul(sh.q[i], rq), scale);
			sh.k[i] = qb_mul(sh.k[i], rk);
		}
	}
	__syncthreads();

	/* 2. the decay, kv, delta, the rank-one update and o, column j */
	float o = 0.0f;
	if (j < dv) {
		const uint64_t at = p.grouped ? (uint64_t)(h / r) * 2 * r + h % r : h;
		const float b = p.b[row * p.ba_stride + at], a = p.a[row * p.ba_stride + at];
		const float beta = __fdiv_rn(1.0f, qb_add(1.0f, expf(-b)));
		const float s_in = qb_add(a, lin_at(p.dt_bias.d_p, p.dt_bias.type, h));
		const float sp = s_in > LIN_SOFTPLUS_THRESHOLD ? s_in : log1pf(expf(s_in));
		const float al = lin_at(p.a_log.d_p, p.a_log.type, h);
		/* -(e * sp) and sp * (-e): the same bits (layer_linear.c) */
		const float alpha = p.a_neg ? expf(qb_mul(sp, al)) : expf(-qb_mul(expf(al), sp));
		const float v = qkv[2ull * p.lk * dk + (uint64_t)h * dv + j];
		float kv = 0.0f;

#pragma unroll
		for (uint32_t i = 0; i < (DKR > 0 ? (uint32_t)DKR : dk); i++) {
			if (DKR > 0 && i >= dk)
				break;
			float s;
			if constexpr (DKR > 0)
				s = col[i];
			else
				s = Sg[(uint64_t)i * dv];
			s = qb_mul(s, alpha);
			if constexpr (DKR > 0)
				col[i] = s;
			else
				Sg[(uint64_t)i * dv] = s;
			kv = qb_add(kv, qb_mul(s, sh.k[i]));
		}
		const float delta = qb_mul(qb_sub(v, kv), beta);
#pragma unroll
		for (uint32_t i = 0; i < (DKR > 0 ? (uint32_t)DKR : dk); i++) {
			if (DKR > 0 && i >= dk)
				break;
			float s;
			if constexpr (DKR > 0)
				s = col[i];
			else
				s = Sg[(uint64_t)i * dv];
			s = qb_add(s, qb_mul(sh.k[i], delta));
			if constexpr (DKR > 0)
				col[i] = s;
			else
				Sg[(uint64_t)i * dv] = s;
			o = qb_add(o, qb_mul(s, sh.q[i]));
		}
		sh.o[j] = o;
	}
	__syncthreads();

	/* 3. o's inverse RMS (cop_rmsnorm); both halves of warp 0 sum o, the
	 * first half's is kept */
	if (threadIdx.x < WARP) {
		const float ss = lin_sumsq(sh.o, dv, lane % LIN_DOT_LANES);

		if (lane == 0)
			sh.ro =
			    __fdiv_rn(1.0f, __fsqrt_rn(qb_add(__fdiv_rn(ss, (float)dv), p.eps)));
	}
	__syncthreads();

	/* 4. o = rmsnorm(o) * silu(z): cop_rmsnorm, then cop_swiglu(z, o, o) */
	if (j < dv) {
		const uint64_t at = row * (uint64_t)p.lv * dv + (uint64_t)h * dv + j;
		const float y = qb_mul(qb_mul(o, sh.ro), lin_at(p.norm.d_p, p.norm.type, j));
		const float g = p.z[at];

		p.o[at] = qb_mul(__fdiv_rn(g, qb_add(1.0f, expf(-g))), y);
	}
	/* The next token's first writes to shared memory (q, k) come after
	 * every thread has left step 2 (the barrier above); its rq, rk, ro
	 * and o writes after the barriers that follow them. */
}

/* One block per (value head blockIdx.x, segment blockIdx.y); DKR: the
 * register column's size (0: S stays in the state). */
template <int DKR>
static __global__ void __launch_bounds__(LIN_MAX_D) lin_recur_kernel(const struct lin_recur_args p)
{
	__shared__ struct lin_shared sh;
	const uint32_t h = blockIdx.x, j = threadIdx.x;
	const struct kern_seg seg = p.segs[blockIdx.y];
	float col[DKR > 0 ? DKR : 1];

	if (seg.n_tok == 0) /* the whole block leaves */
		return;
	if (seg.row0 > p.n_rows || seg.n_tok > p.n_rows - seg.row0)
		__trap(); /* the caller's segments overrun the launch's rows */
	float *S = (float *)seg.d_state + p.s_off + (uint64_t)h * p.dk * p.dv;
	float *Sg = S + (j < p.dv ? j : 0); /* column j: S[i][j] at Sg[i * dv] */

	if constexpr (DKR > 0) {
		if (j < p.dv) {
#pragma unroll
			for (uint32_t i = 0; i < (uint32_t)DKR; i++)
				if (i < p.dk)
					col[i] = Sg[(uint64_t)i * p.dv];
		}
	}
	for (uint32_t t = 0; t < seg.n_tok; t++)
		lin_token<DKR>(p, h, (uint64_t)seg.row0 + t, col, Sg, sh);
	if constexpr (DKR > 0) {
		if (j < p.dv) {
#pragma unroll
			for (uint32_t i = 0; i < (uint32_t)DKR; i++)
				if (i < p.dk)
					Sg[(uint64_t)i * p.dv] = col[i];
		}
	}
}

/* ---- the launchers -------------------------------------------------------- */

static int lin_vec_ok(struct kern_vec v)
{
	const uintptr_t align = v.type == QB_F32 ? 4 : 2;

	return v.d_p && (v.type == QB_F32 || v.type == QB_F16 || v.type == QB_BF16) &&
	       ((uintptr_t)v.d_p & (align - 1)) == 0;
}

/* The shapes and the state layout both kernels rely on. */
static int lin_shapes_ok(const struct kern_lin *l)
{
	if (!l || !l->lk || !l->lv || !l->dk || !l->dv || !l->conv_kernel || l->lv % l->lk)
		return 0;
	if (l->dk > LIN_MAX_D || l->dv > LIN_MAX_D || l->conv_kernel > LIN_CONV_MAX)
		return 0;
	const uint64_t qkv = 2ull * l->lk * l->dk + (uint64_t)l->lv * l->dv;
	const uint64_t s_floats = (uint64_t)l->lv * l->dk * l->dv;

	return qkv == l->qkv && l->s_floats >= s_floats &&
	       l->layer_floats >= l->s_floats + qkv * (l->conv_kernel - 1) && l->d_qkv &&
	       l->n_segs <= 65535 && (l->n_segs == 0 || l->d_segs);
}

extern "C" int kern_lin_conv(const struct kern_lin *l, void *stream)
{
	if (!lin_shapes_ok(l) || !lin_vec_ok(l->conv))
		return (int)cudaErrorInvalidValue;
	if (l->n_segs == 0 || l->n_tok == 0)
		return 0;

	const dim3 grid((l->qkv + LIN_CONV_THREADS - 1) / LIN_CONV_THREADS, l->n_segs);
	const uint64_t conv_off = (uint64_t)l->lin_index * l->layer_floats + l->s_floats;

	lin_conv_kernel<<<grid, LIN_CONV_THREADS, 0, (cudaStream_t)stream>>>(
	    l->d_segs, l->d_qkv, l->qkv, l->n_tok, l->conv.d_p, l->conv.type, l->conv_kernel,
	    conv_off);
	return (int)cudaGetLastError();
}

extern "C" int kern_lin_recur(const struct kern_lin *l, void *stream)
{
	if (!lin_shapes_ok(l) || !lin_vec_ok(l->a_log) || !lin_vec_ok(l->dt_bias) ||
	    !lin_vec_ok(l->norm) || !l->d_z || !l->d_o || !l->d_b || !l->d_a)
		return (int)cudaErrorInvalidValue;
	/* b and a of the last value head within a row's stride */
	const uint32_t r = l->lv / l->lk, h = l->lv - 1;
	const uint64_t at_max = l->grouped ? (uint64_t)(h / r) * 2 * r + h % r : h;
	if (l->ba_stride <= at_max)
		return (int)cudaErrorInvalidValue;
	if (l->n_segs == 0 || l->n_tok == 0)
		return 0;

	const struct lin_recur_args p = {
	    .lk = l->lk,
	    .lv = l->lv,
	    .dk = l->dk,
	    .dv = l->dv,
	    .qkv = l->qkv,
	    .n_rows = l->n_tok,
	    .grouped = l->grouped ? 1u : 0u,
	    .tiled = l->tiled ? 1u : 0u,
	    .a_neg = l->a_neg ? 1u : 0u,
	    .eps = l->eps,
	    .a_log = l->a_log,
	    .dt_bias = l->dt_bias,
	    .norm = l->norm,
	    .s_off = (uint64_t)l->lin_index * l->layer_floats,
	    .segs = l->d_segs,
	    .qkv_rows = l->d_qkv,
	    .z = l->d_z,
	    .b = l->d_b,
	    .a = l->d_a,
	    .o = l->d_o,
	    .ba_stride = l->ba_stride,
	};
	const dim3 grid(l->lv, l->n_segs);
	const unsigned threads = (l->dv + WARP - 1) / WARP * WARP;
	const cudaStream_t s = (cudaStream_t)stream;

	/* Where S's column lives depends on dk alone, and changes no bit. */
	if (l->dk <= 32)
		lin_recur_kernel<32><<<grid, threads, 0, s>>>(p);
	else if (l->dk <= 64)
		lin_recur_kernel<64><<<grid, threads, 0, s>>>(p);
	else if (l->dk <= LIN_REG_DK_MAX)
		lin_recur_kernel<LIN_REG_DK_MAX><<<grid, threads, 0, s>>>(p);
	else
		lin_recur_kernel<0><<<grid, threads, 0, s>>>(p);
	return (int)cudaGetLastError();
}
