/*
 * attention.cu - a full-attention layer's token mixer between its
 * projections (struct kern_attn, layer_args.h): the q/k norms, RoPE and the
 * KV store (kern_attn_prep), attention over each token's positions
 * (kern_attn), and the compact formats' residual window (kern_attn_window_
 * store). The cpu backend's gpu-worker/backend/cpu/layer_full.c (prep_fn,
 * attn_fn, kv_read, win_round, win_store) is the specification, in fp32;
 * the KV formats are kernels/kvfmt_dev.h, model/kvfmt.c's bytes exactly.
 *
 * kern_attn_prep: one block of 8 warps per row (token). The row's RoPE
 * angles (cos, sin of pos * theta^(-2i/rope_dims), in double as
 * cop_rope_neox takes them) go to shared memory first; then each warp takes
 * heads: q heads 0 .. q_heads - 1, then the kv heads. A head is normed
 * (lane l sums the squares of elements l, l + 32, ... with fused
 * multiply-adds, a butterfly over offsets 16 .. 1; then cop_rmsnorm's
 * r = 1 / sqrtf(ss / n + eps), y = (x r) w, correctly rounded), roped
 * (cop_rope_neox's products and sums, rounded one by one), and for q rotated
 * into the format's basis. A kv head's K (normed, roped) and V (as
 * projected) are encoded into the page slot of the row's position by
 * kvfmt_dev.h's functions; compact's code search runs on a lane per 8
 * values. With a window, d_k and d_v then hold the rotated, bf16-rounded
 * copies (layer_full.c's win_round).
 *
 * kern_attn: one block of 4 warps per (row, q head). The token at position
 * p attends positions 0 .. p in tiles of 64 (a page), tiles in increasing
 * position, with an online softmax restarted at every 1024 positions (a
 * split) and the splits folded in increasing order:
 *
 *   per tile: scores s_j = (q . k_j) * scale, one warp per key j (warp w
 *     takes keys w, w + 4, ...; lane l sums elements l, l + 32, ... by
 *     fused multiply-adds, then the butterfly); the tile's max, the split's
 *     new max mn = max(m, tile max), e_j = expf(s_j - mn), the tile's sum of
 *     e_j in increasing j, l = l * expf(m - mn) + sum; thread t keeps o[d]
 *     for d = t, t + 128, ... : o[d] = o[d] * expf(m - mn), then
 *     o[d] = fma(e_j, v_j[d], o[d]) for j in increasing order;
 *   per split (positions [1024 s, 1024 s + 1024)): M' = max(M, m),
 *     L = L expf(M - M') + l expf(m - M'), O likewise;
 *   then o = O / L, unrotated (kvfmt_unrotate), gated: o *= 1 / (1 +
 *     expf(-gate)).
 *
 * WHY IT IS BATCH-INVARIANT. Every reduction above is over positions or
 * elements whose boundaries are absolute (tiles at multiples of 64, splits
 * at multiples of 1024, elements by their index), walked in a fixed order
 * by a fixed thread mapping; each (row, head) is one block from start to
 * end, with no atomics and no partial sums shared with another block. Its
 * inputs are its q, its position p and the keys and values of positions
 * 0 .. p, which read the same bits from wherever they come: a page decodes
 * the same whoever wrote it (the bytes are kvfmt.c's), and with a window a
 * position of the same chunk is read from d_k/d_v exactly as the window
 * holds it (rounded to bf16 by prep). So a token's output does not depend
 * on n_tok, the segments, the other rows of the launch or how its prompt
 * was chunked. The splits are there so that a later kernel may run them in
 * parallel blocks (partials in scratch) and fold them in the same order,
 * for the same bits.
 *
 * Not the cpu's order (cop_softmax's two passes, cop_dot_f32's 16 lanes,
 * expf of libm): results agree within the conformance tolerances, not in
 * bits. A NaN or +inf score makes the output NaN (the cpu: all NaN too).
 *
 * Limits: head_dim even and at most ATT_MAX_HD (512); compact needs a
 * multiple of 64. Launchers check the arguments they can see (the struct),
 * not the device arrays (segments, tables), which the backend built.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"
#include "kvfmt_dev.h"

#define WARP         32
#define FULL_WARP    0xffffffffu
#define ATT_MAX_HD   512u /* the largest head_dim the kernels hold in shared memory */
#define PREP_WARPS   8    /* heads a prep block works on at once */
#define ATT_THREADS  128  /* 4 warps: scores 4 keys at a time, values 128 elements */
#define ATT_WARPS    (ATT_THREADS / WARP)
#define ATT_PER_THR  (ATT_MAX_HD / ATT_THREADS) /* output elements a thread keeps */
#define ATT_TILE     64u   /* positions per tile: one page's */
#define ATT_SPLIT    1024u /* positions per split: part of the order, never the batch's */

/* Where a key or value is read from (layer_full.c's kv_read). */
#define SRC_PAGE 0 /* a page slot, in the format */
#define SRC_WIN  1 /* the sequence's window slot, bf16 */
#define SRC_ROW  2 /* the chunk's own d_k / d_v row, fp32 (already bf16-rounded) */

/* The compact codebook (kern_kvfmt_init fills it; the kernels copy it to
 * shared memory, where each lane reads the entry its own code names). */
static __constant__ struct kvd_e8 c_e8;

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int off = WARP / 2; off > 0; off /= 2)
		v = __fadd_rn(v, __shfl_xor_sync(FULL_WARP, v, off));
	return v;
}

/* A norm weight, widened as cop_row does (exact for all three types). */
static __device__ __forceinline__ float vec_at(struct kern_vec v, uint32_t i)
{
	if (v.type == QB_F32)
		return ((const float *)v.d_p)[i];
	if (v.type == QB_F16)
		return kvd_f16_f32(((const uint16_t *)v.d_p)[i]);
	return kvd_bf16_f32(((const uint16_t *)v.d_p)[i]);
}

/* Every thread of the block copies its share of the codebook; the caller
 * synchronises. */
static __device__ void e8_to_shared(struct kvd_e8 *t)
{
	const uint32_t *src = (const uint32_t *)&c_e8;
	uint32_t *dst = (uint32_t *)t;

	for (uint32_t i = threadIdx.x; i < sizeof(struct kvd_e8) / 4u; i += blockDim.x)
		dst[i] = src[i];
}

static __device__ __forceinline__ bool win_on(const struct kern_attn &a, const struct kern_seg &s)
{
	return a.window > 0 && a.fmt == KVD_COMPACT && s.d_state != NULL;
}

/* Page slot of position pos (model/kvfmt.h's layout). */
static __device__ __forceinline__ unsigned char *slot_addr(const struct kern_attn &a,
                                                           const struct kern_seg &s, uint64_t pos,
                                                           uint32_t role, uint32_t kh)
{
	uint64_t page = s.d_table[pos / KVD_PAGE_TOKENS];
	uint64_t i = ((uint64_t)a.full_index * 2u + role) * a.kv_heads + kh;

	return a.d_pool + page * a.page_bytes + (i * KVD_PAGE_TOKENS + pos % KVD_PAGE_TOKENS) *
	                                            a.head_bytes;
}

/* Window slot of position pos (common/model.h's layout; layer_full.c's
 * win_slot). */
static __device__ __forceinline__ uint16_t *win_slot(const struct kern_attn &a,
                                                     const struct kern_seg &s, uint64_t pos,
                                                     uint32_t role, uint32_t kh)
{
	uint64_t slots = (uint64_t)a.sinks + a.window;
	uint64_t slot = pos < a.sinks ? pos : a.sinks + pos % a.window;
	uint16_t *win = (uint16_t *)(s.d_state + a.win_offset);

	return win + ((((uint64_t)a.full_index * 2u + role) * a.kv_heads + kh) * slots + slot) *
	                 a.head_dim;
}

/* ---- kern_attn_prep ---- */

/* Head `src` into x (shared), normed with w and roped with the row's
 * angles; the whole warp calls it. */
static __device__ void norm_rope(const struct kern_attn &a, const float *src, float *x,
                                 struct kern_vec w, const float *cs, const float *sn,
                                 uint32_t lane)
{
	const uint32_t hd = a.head_dim, half = a.rope_dims / 2u;
	float ss = 0.0f, r;

	for (uint32_t d = lane; d < hd; d += WARP) {
		float v = src[d];

		x[d] = v;
		ss = __fmaf_rn(v, v, ss);
	}
	ss = warp_sum(ss);
	r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), a.eps)));
	for (uint32_t d = lane; d < hd; d += WARP)
		x[d] = __fmul_rn(__fmul_rn(x[d], r), vec_at(w, d));
	__syncwarp();
	for (uint32_t i = lane; i < half; i += WARP) {
		float x0 = x[i], x1 = x[i + half], c = cs[i], s = sn[i];

		x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
		x[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
	}
	__syncwarp();
}

/* Per warp: the compact encoder's group state. */
struct enc_scratch {
	uint16_t codes[ATT_MAX_HD / 8];
	uint32_t half[ATT_MAX_HD / KVD_GROUP];
	double ss[ATT_MAX_HD / KVD_GROUP];
};

/* x (shared, head_dim values) into `out` in the format: kvd_encode's steps,
 * the code search a lane per 8 values. Compact leaves x rotated (R x), as
 * the window's copy wants it. The whole warp calls it. */
static __device__ void encode_warp(const struct kern_attn &a, const struct kvd_e8 *t, float *x,
                                   unsigned char *out, struct enc_scratch *e, uint32_t lane)
{
	const uint32_t hd = a.head_dim;

	if (a.fmt == KVD_BF16) {
		for (uint32_t d = lane; d < hd; d += WARP)
			kvd_st16(out + 2u * d, kvd_f32_bf16(x[d]));
	} else if (a.fmt == KVD_FP8) {
		/* every lane walks the vector in kvfmt.c's order: the same scale */
		float scale = kvd_fp8_scale(x, hd), inv = kvd_fp8_inv(scale);

		if (lane < 4u)
			out[lane] = (unsigned char)(__float_as_uint(scale) >> (8u * lane));
		for (uint32_t d = lane; d < hd; d += WARP)
			out[4u + d] = (unsigned char)kvd_fp8_byte(x[d], inv);
	} else {
		const uint32_t groups = hd / KVD_GROUP;

		for (uint32_t g = lane; g < groups; g += WARP) {
			kvd_rotate_group(x + g * KVD_GROUP, g);
			e->ss[g] = kvd_c2_ss(x + g * KVD_GROUP);
			e->half[g] = kvd_c2_half(e->ss[g]);
		}
		__syncwarp();
		for (uint32_t b = lane; b < hd / 8u; b += WARP)
			e->codes[b] = (uint16_t)kvd_e8_code(t, x + 8u * b,
			                                    kvd_c2_inv(e->half[b / 8u]));
		__syncwarp();
		for (uint32_t g = lane; g < groups; g += WARP) {
			unsigned char *o = out + g * KVD_GROUP_BYTES;

			kvd_st16(o, kvd_c2_final_half(t, x + g * KVD_GROUP, e->codes + 8u * g,
			                              e->ss[g], e->half[g]));
			for (uint32_t b = 0; b < 8u; b++)
				kvd_st16(o + 2u + 2u * b, e->codes[8u * g + b]);
		}
	}
	__syncwarp();
}

static __global__ void __launch_bounds__(PREP_WARPS *WARP) attn_prep_kernel(struct kern_attn a)
{
	__shared__ float buf[PREP_WARPS][ATT_MAX_HD];
	__shared__ struct enc_scratch enc[PREP_WARPS];
	__shared__ float cs[ATT_MAX_HD / 2], sn[ATT_MAX_HD / 2];
	__shared__ struct kvd_e8 tab;
	const uint32_t row = blockIdx.x, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
	const struct kern_seg seg = a.d_segs[a.d_row_seg[row]];
	const uint64_t pos = seg.pos0 + (row - seg.row0);
	const uint32_t hd = a.head_dim, qs = a.gated ? 2u * hd : hd;
	const bool win = win_on(a, seg);
	float *x = buf[warp];

	if (a.fmt == KVD_COMPACT)
		e8_to_shared(&tab);
	/* cop_rope_neox's angles, in double as it takes them */
	for (uint32_t i = threadIdx.x; i < a.rope_dims / 2u; i += blockDim.x) {
		double inv_freq = pow((double)a.rope_theta, -(double)(2u * i) / (double)a.rope_dims);
		double angle = (double)(int64_t)pos * inv_freq;

		cs[i] = (float)cos(angle);
		sn[i] = (float)sin(angle);
	}
	__syncthreads();

	for (uint32_t item = warp; item < a.q_heads + a.kv_heads; item += PREP_WARPS) {
		if (item < a.q_heads) {
			float *q = a.d_qg + ((uint64_t)row * a.q_heads + item) * qs;

			norm_rope(a, q, x, a.q_norm, cs, sn, lane);
			/* into the basis the format stores keys in (kvfmt.h) */
			if (a.fmt == KVD_COMPACT)
				for (uint32_t g = lane; g < hd / KVD_GROUP; g += WARP)
					kvd_rotate_group(x + g * KVD_GROUP, g);
			__syncwarp();
			for (uint32_t d = lane; d < hd; d += WARP)
				q[d] = x[d];
		} else {
			const uint32_t kh = item - a.q_heads;
			float *k = a.d_k + ((uint64_t)row * a.kv_heads + kh) * hd;
			float *v = a.d_v + ((uint64_t)row * a.kv_heads + kh) * hd;

			norm_rope(a, k, x, a.k_norm, cs, sn, lane);
			for (uint32_t d = lane; d < hd; d += WARP)
				k[d] = x[d];
			encode_warp(a, &tab, x, slot_addr(a, seg, pos, 0, kh), &enc[warp], lane);
			if (win) /* x is R k now: the window's copy, rounded */
				for (uint32_t d = lane; d < hd; d += WARP)
					k[d] = kvd_bf16_f32(kvd_f32_bf16(x[d]));
			__syncwarp();
			for (uint32_t d = lane; d < hd; d += WARP)
				x[d] = v[d];
			__syncwarp();
			encode_warp(a, &tab, x, slot_addr(a, seg, pos, 1, kh), &enc[warp], lane);
			if (win)
				for (uint32_t d = lane; d < hd; d += WARP)
					v[d] = kvd_bf16_f32(kvd_f32_bf16(x[d]));
		}
		__syncwarp();
	}
}

/* ---- kern_attn ---- */

/* Position j's key (role 0) or value (1) of kv head kh as the token at p
 * reads it (layer_full.c's kv_read): its address and kind. */
static __device__ const unsigned char *kv_locate(const struct kern_attn &a,
                                                 const struct kern_seg &s, uint64_t p, uint64_t j,
                                                 uint32_t role, uint32_t kh, unsigned char *kind)
{
	if (win_on(a, s) && (j < a.sinks || j + a.window > p)) {
		if (j >= s.pos0) {
			const float *rows = role ? a.d_v : a.d_k;

			*kind = SRC_ROW;
			return (const unsigned char *)(rows + ((s.row0 + (j - s.pos0)) * a.kv_heads +
			                                       kh) * (uint64_t)a.head_dim);
		}
		*kind = SRC_WIN;
		return (const unsigned char *)win_slot(a, s, j, role, kh);
	}
	*kind = SRC_PAGE;
	return slot_addr(a, s, j, role, kh);
}

/* Value d of a located vector, in the rotated basis. */
static __device__ __forceinline__ float kv_elem(const struct kvd_e8 *t, uint32_t fmt,
                                                unsigned char kind, const unsigned char *p,
                                                uint32_t d)
{
	if (kind == SRC_ROW)
		return ((const float *)p)[d];
	if (kind == SRC_WIN)
		return kvd_bf16_f32(((const uint16_t *)p)[d]);
	return kvd_decode_elem(t, fmt, p, d);
}

static __global__ void __launch_bounds__(ATT_THREADS) attn_kernel(struct kern_attn a)
{
	__shared__ struct kvd_e8 tab;
	__shared__ float qv[ATT_MAX_HD];
	__shared__ float sc[ATT_TILE];
	__shared__ const unsigned char *ksrc[ATT_TILE], *vsrc[ATT_TILE];
	__shared__ unsigned char kkind[ATT_TILE], vkind[ATT_TILE];
	const uint32_t row = blockIdx.x / a.q_heads, h = blockIdx.x % a.q_heads;
	const uint32_t tid = threadIdx.x, warp = tid / WARP, lane = tid % WARP;
	const struct kern_seg seg = a.d_segs[a.d_row_seg[row]];
	const uint64_t p = seg.pos0 + (row - seg.row0), n = p + 1u;
	const uint32_t hd = a.head_dim, qs = a.gated ? 2u * hd : hd;
	const uint32_t kh = h / (a.q_heads / a.kv_heads);
	const float *q = a.d_qg + ((uint64_t)row * a.q_heads + h) * qs;
	float big_m = -INFINITY, big_l = 0.0f, big_o[ATT_PER_THR];

	if (a.fmt == KVD_COMPACT)
		e8_to_shared(&tab);
	for (uint32_t d = tid; d < hd; d += ATT_THREADS)
		qv[d] = q[d];
#pragma unroll
	for (int k = 0; k < ATT_PER_THR; k++)
		big_o[k] = 0.0f;
	__syncthreads();

	for (uint64_t s0 = 0; s0 < n; s0 += ATT_SPLIT) {
		const uint64_t s_end = n - s0 < ATT_SPLIT ? n : s0 + ATT_SPLIT;
		float m = -INFINITY, l = 0.0f, o[ATT_PER_THR];

#pragma unroll
		for (int k = 0; k < ATT_PER_THR; k++)
			o[k] = 0.0f;
		for (uint64_t t0 = s0; t0 < s_end; t0 += ATT_TILE) {
			const uint32_t nt = (uint32_t)(s_end - t0 < ATT_TILE ? s_end - t0 : ATT_TILE);
			float mt = -INFINITY, mn, corr, ts = 0.0f;

			if (tid < nt) {
				ksrc[tid] = kv_locate(a, seg, p, t0 + tid, 0, kh, &kkind[tid]);
				vsrc[tid] = kv_locate(a, seg, p, t0 + tid, 1, kh, &vkind[tid]);
			}
			__syncthreads();
			for (uint32_t jj = warp; jj < nt; jj += ATT_WARPS) {
				float acc = 0.0f;

				for (uint32_t d = lane; d < hd; d += WARP)
					acc = __fmaf_rn(qv[d], kv_elem(&tab, a.fmt, kkind[jj], ksrc[jj], d),
					                acc);
				acc = warp_sum(acc);
				if (lane == 0)
					sc[jj] = __fmul_rn(acc, a.scale);
			}
			__syncthreads();
			for (uint32_t jj = 0; jj < nt; jj++)
				mt = sc[jj] > mt ? sc[jj] : mt;
			mn = mt > m ? mt : m;
			corr = expf(m - mn); /* the first tile: expf(-inf) = 0 */
			__syncthreads(); /* every thread has read the scores */
			if (tid < nt)
				sc[tid] = expf(sc[tid] - mn);
			__syncthreads();
			for (uint32_t jj = 0; jj < nt; jj++)
				ts = __fadd_rn(ts, sc[jj]);
			l = __fadd_rn(__fmul_rn(l, corr), ts);
#pragma unroll
			for (int k = 0; k < ATT_PER_THR; k++) {
				const uint32_t d = tid + (uint32_t)k * ATT_THREADS;

				if (d < hd) {
					float acc = __fmul_rn(o[k], corr);

					for (uint32_t jj = 0; jj < nt; jj++)
						acc = __fmaf_rn(sc[jj],
						                kv_elem(&tab, a.fmt, vkind[jj], vsrc[jj], d),
						                acc);
					o[k] = acc;
				}
			}
			m = mn;
			__syncthreads(); /* before the next tile's sources and scores */
		}
		/* fold the split into the running one, splits in increasing order */
		{
			const float mx = m > big_m ? m : big_m;
			const float fa = expf(big_m - mx), fb = expf(m - mx);

			big_l = __fadd_rn(__fmul_rn(big_l, fa), __fmul_rn(l, fb));
#pragma unroll
			for (int k = 0; k < ATT_PER_THR; k++)
				big_o[k] = __fadd_rn(__fmul_rn(big_o[k], fa), __fmul_rn(o[k], fb));
			big_m = mx;
		}
	}

	/* o = O / L into shared memory (q is no longer read), unrotated, gated */
#pragma unroll
	for (int k = 0; k < ATT_PER_THR; k++) {
		const uint32_t d = tid + (uint32_t)k * ATT_THREADS;

		if (d < hd)
			qv[d] = __fdiv_rn(big_o[k], big_l);
	}
	__syncthreads();
	if (a.fmt == KVD_COMPACT)
		for (uint32_t g = tid; g < hd / KVD_GROUP; g += ATT_THREADS)
			kvd_unrotate_group(qv + g * KVD_GROUP, g);
	__syncthreads();
	{
		float *out = a.d_o + ((uint64_t)row * a.q_heads + h) * hd;

		for (uint32_t d = tid; d < hd; d += ATT_THREADS) {
			float v = qv[d];

			if (a.gated)
				v = __fmul_rn(v, __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-q[hd + d]))));
			out[d] = v;
		}
	}
}

/* ---- kern_attn_window_store ---- */

/* One block per row: a sink or one of its segment's newest `window`
 * positions stores its rows (prep's bf16-rounded R k, R v) in its slot.
 * Ring slots of the stored positions are distinct (at most `window`
 * consecutive positions past the sinks), so blocks never write the same
 * slot. */
static __global__ void attn_window_store_kernel(struct kern_attn a)
{
	const uint32_t row = blockIdx.x;
	const struct kern_seg seg = a.d_segs[a.d_row_seg[row]];
	const uint64_t p = seg.pos0 + (row - seg.row0), end = seg.pos0 + seg.n_tok;
	const uint32_t hd = a.head_dim;

	if (!win_on(a, seg) || (p >= a.sinks && p + a.window < end))
		return;
	for (uint32_t e = threadIdx.x; e < a.kv_heads * 2u * hd; e += blockDim.x) {
		const uint32_t kh = e / (2u * hd), role = e / hd % 2u, d = e % hd;
		const float *rows = role ? a.d_v : a.d_k;

		win_slot(a, seg, p, role, kh)[d] =
		    (uint16_t)kvd_f32_bf16(rows[((uint64_t)row * a.kv_heads + kh) * hd + d]);
	}
}

/* ---- launchers ---- */

static bool vec_ok(struct kern_vec v)
{
	return v.d_p != NULL && (v.type == QB_F32 || v.type == QB_F16 || v.type == QB_BF16);
}

/* The struct's own arguments, common to the three steps. */
static bool attn_args_ok(const struct kern_attn *a)
{
	if (a == NULL || a->d_segs == NULL || a->d_row_seg == NULL || a->d_k == NULL ||
	    a->d_v == NULL || a->d_qg == NULL)
		return false;
	if (a->fmt != KVD_BF16 && a->fmt != KVD_FP8 && a->fmt != KVD_COMPACT)
		return false;
	if (a->head_dim < 2 || a->head_dim > ATT_MAX_HD || a->head_dim % 2u != 0 ||
	    a->head_bytes == 0 || a->head_bytes != kvd_head_bytes(a->fmt, a->head_dim))
		return false;
	if (a->q_heads == 0 || a->kv_heads == 0 || a->q_heads % a->kv_heads != 0)
		return false;
	if (a->rope_dims == 0 || a->rope_dims % 2u != 0 || a->rope_dims > a->head_dim ||
	    !(a->rope_theta > 0.0f))
		return false;
	/* the grid: one block per row, or per (row, q head) */
	if ((uint64_t)a->n_tok * a->q_heads > 0x7fffffffu)
		return false;
	return true;
}

/* The layer's K and V fit in a page. */
static bool pool_ok(const struct kern_attn *a)
{
	uint64_t need = ((uint64_t)a->full_index + 1u) * 2u * a->kv_heads * KVD_PAGE_TOKENS *
	                a->head_bytes;

	return a->d_pool != NULL && a->page_bytes >= need;
}

extern "C" uint64_t kern_attn_scratch_bytes(uint32_t head_dim, uint32_t q_heads, uint32_t n_tok,
                                            uint64_t max_pos)
{
	/* Each (row, head) keeps its softmax state in registers and shared
	 * memory: no device scratch. */
	(void)head_dim;
	(void)q_heads;
	(void)n_tok;
	(void)max_pos;
	return 0;
}

extern "C" int kern_kvfmt_init(void)
{
	struct kvd_e8 t; /* rebuilt identically at every call: idempotent */

	kvd_e8_build(&t);
	return (int)cudaMemcpyToSymbol(c_e8, &t, sizeof(t));
}

extern "C" int kern_attn_prep(const struct kern_attn *a, void *stream)
{
	if (!attn_args_ok(a) || !pool_ok(a) || !vec_ok(a->q_norm) || !vec_ok(a->k_norm))
		return (int)cudaErrorInvalidValue;
	if (a->n_tok == 0)
		return 0;
	attn_prep_kernel<<<a->n_tok, PREP_WARPS * WARP, 0, (cudaStream_t)stream>>>(*a);
	return (int)cudaGetLastError();
}

extern "C" int kern_attn(const struct kern_attn *a, void *stream)
{
	if (!attn_args_ok(a) || !pool_ok(a) || a->d_o == NULL || !(a->scale == a->scale))
		return (int)cudaErrorInvalidValue;
	if (a->n_tok == 0)
		return 0;
	attn_kernel<<<a->n_tok * a->q_heads, ATT_THREADS, 0, (cudaStream_t)stream>>>(*a);
	return (int)cudaGetLastError();
}

extern "C" int kern_attn_window_store(const struct kern_attn *a, void *stream)
{
	if (!attn_args_ok(a))
		return (int)cudaErrorInvalidValue;
	if (a->n_tok == 0 || a->window == 0 || a->fmt != KVD_COMPACT)
		return 0; /* no window: nothing to store (as layer_full.c) */
	attn_window_store_kernel<<<a->n_tok, 128, 0, (cudaStream_t)stream>>>(*a);
	return (int)cudaGetLastError();
}
