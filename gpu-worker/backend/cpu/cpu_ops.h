/*
 * cpu_ops.h - the cpu backend's numeric kernels for the decoder: matrix
 * products with weights of any type model/quant.h reads (bf16, fp32, ggml's
 * blocks), RMSNorm, NeoX RoPE, softmax, SwiGLU and a few element-wise
 * helpers.
 *
 * Exactness first. Every kernel is deterministic: a given input gives the
 * same bits on every run, for every thread count, and on every x86-64 CPU
 * (the matrix product may pick an AVX2 or an AVX-512 build of itself at run
 * time; it does the same IEEE operations in the same order as the baseline
 * one, and the library is built with -ffp-contract=off, so no multiply-add
 * is ever fused).
 * Only the transcendental functions (expf, sin, cos, pow) come from libm and
 * are as deterministic as the libm in use.
 *
 * All activations are fp32 and every sum is accumulated in fp32.
 *
 * THE ACCUMULATION ORDER (cop_matmul_*, cop_dot_f32, cop_rmsnorm). A dot
 * product of n terms p[i] = a[i] * b[i] (each product rounded to fp32) is
 *
 *   1. 16 lane sums: with m = n - n % 16, lane l (0..15) starts at +0 and adds
 *      p[l], p[l + 16], p[l + 32], ... (all i < m, i = l mod 16) in increasing
 *      i, each addition rounded;
 *   2. a fixed tree: s[l] += s[l + 8] for l < 8, then s[l] += s[l + 4] for
 *      l < 4, then s[l] += s[l + 2] for l < 2, then s[0] += s[1];
 *   3. the tail: s[0] += p[i] for i = m .. n - 1 in increasing i.
 *
 * The result is s[0]. For n < 16 that is +0 + p[0] + p[1] + ... in order.
 * The order never depends on the thread count, the blocking or the CPU; the
 * lanes map onto SIMD registers, and a lane's running sum may be parked in
 * memory between blocks of i without changing a bit. A test recomputes this
 * order with scalar code and compares bits.
 *
 * Memory: every pointer is the caller's, borrowed for the call only. Inputs
 * and outputs must not overlap unless a function says they may.
 */
#ifndef IGNIS_GPU_WORKER_CPU_OPS_H
#define IGNIS_GPU_WORKER_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_pool.h"
#include "model/quant.h"

/* Lanes of the dot-product order above: part of the numeric contract. */
#define COP_DOT_LANES 16

/*
 * The matrix product's kernels: the baseline (8-float vectors, with an AVX2
 * build picked at load), or AVX-512 (one 16-float register a lane set) when
 * the CPU has it, chosen at load. Every one computes the order above with
 * the same IEEE operations: the same bits. cop_kernels names the set in
 * use ("avx512" or "base"); cop_kernels_force picks COP_KERNELS_BASE, or
 * COP_KERNELS_BEST (what the CPU allows), and returns the previous one
 * (tests and benchmarks compare them; not thread-safe against running
 * products).
 */
#define COP_KERNELS_BASE   0
#define COP_KERNELS_AVX512 1
#define COP_KERNELS_BEST   -1
const char *cop_kernels(void);
int cop_kernels_force(int which);

/*
 * y = x W^T for bf16 weights as GGUF lays out a [n_in, n_out] tensor:
 * dims[0] = n_in varies fastest, so w[o * n_in + i] is weight i of output o.
 * x is [n_tok][n_in], y is [n_tok][n_out] (row-major, fp32):
 *
 *   y[t][o] = dot(w[o][0..n_in), x[t][0..n_in))   in the order above,
 *
 * each bf16 weight widened exactly to fp32. `pool` may be NULL (inline).
 * The work is cut into items of 4 outputs x 16 tokens; each item computes
 * its outputs completely, so no sum is ever split across threads. n_in 0
 * gives +0 everywhere; n_out or n_tok 0 writes nothing.
 */
void cop_matmul_bf16(struct cpool *pool, const uint16_t *w, const float *x, float *y, size_t n_in,
                     size_t n_out, size_t n_tok);

/* The same with fp32 weights, w[o * n_in + i]; the same order and results as
 * cop_matmul_bf16 on weights that are bf16 values widened to fp32. */
void cop_matmul_f32(struct cpool *pool, const float *w, const float *x, float *y, size_t n_in,
                    size_t n_out, size_t n_tok);

/* A weight matrix as a model file holds it: GGUF's [n_in, n_out] layout in
 * one of the types model/quant.h reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K), each row whole blocks of its type. */
struct cop_w {
	const void *p;
	uint32_t type; /* enum quant_type_id */
};

/* bf16 weights as a cop_w */
#define COP_W_BF16(ptr) ((struct cop_w){.p = (ptr), .type = QUANT_BF16})

/*
 * y = x W^T for weights of any of those types. Each row is decoded exactly
 * (model/quant.h: a block type's blocks, bit for bit as ggml decodes them)
 * MM_KB elements at a time into the item's buffer, never as a copy of the
 * matrix, then summed in the order above: the same bits as cop_matmul_f32 on
 * the decoded weights, whatever the type, threads or blocking. n_in must be
 * whole blocks of the type (the model's loader checks it).
 */
void cop_matmul(struct cpool *pool, struct cop_w w, const float *x, float *y, size_t n_in,
                size_t n_out, size_t n_tok);

/* The matrix that starts `rows` rows of n_in elements into `w` (an
 * expert's slice of a [n_in, rows, experts] tensor). */
struct cop_w cop_w_rows(struct cop_w w, size_t n_in, size_t rows);

/* Element i of a vector of weights (norms, the convolution, decay and bias
 * vectors): F32, F16 or BF16, never a block type (the loader checks). */
static inline float cop_at(struct cop_w w, size_t i)
{
	if (w.type == QUANT_BF16) {
		uint32_t u = (uint32_t)((const uint16_t *)w.p)[i] << 16;
		float f;

		memcpy(&f, &u, sizeof(f));
		return f;
	}
	if (w.type == QUANT_F16)
		return quant_f16_to_f32(((const uint16_t *)w.p)[i]);
	return ((const float *)w.p)[i];
}

/* Row `r` of a [n_in, rows] matrix of weights `w`, decoded into out[0..n_in)
 * (an embedding's lookup). */
void cop_row(struct cop_w w, size_t n_in, size_t r, float *out);

/* sum_i a[i] * b[i] in the order above. */
float cop_dot_f32(const float *a, const float *b, size_t n);

/*
 * RMSNorm of one row of n floats (n >= 1):
 *
 *   ss = cop_dot_f32(x, x, n);  r = 1.0f / sqrtf(ss / (float)n + eps);
 *   y[i] = (x[i] * r) * w[i]                     (each step rounded to fp32)
 *
 * `w` is the stored weight as is: families that keep a zero-centred weight
 * (1 + w) have it added when the GGUF file is written. y may equal x.
 */
void cop_rmsnorm(const float *x, const float *w, float *y, size_t n, float eps);

/* cop_rmsnorm over `rows` contiguous rows of n floats, the same `w` for each
 * (the per-head q/k norm is rows = heads, n = head_dim). y may equal x. */
void cop_rmsnorm_rows(const float *x, const float *w, float *y, size_t rows, size_t n, float eps);

/*
 * NeoX (half-split) rotary embedding, in place, of one token's `n_heads`
 * heads of `head_dim` floats each: the first `rot_dims` of each head turn,
 * the rest pass through (partial rotary). With h = rot_dims / 2, for
 * i = 0 .. h - 1:
 *
 *   inv_freq = pow(theta, -2i / rot_dims)     angle = pos * inv_freq
 *   (both in double), c = (float)cos(angle), s = (float)sin(angle), and
 *   q'[i]     = q[i] * c - q[i + h] * s
 *   q'[i + h] = q[i] * s + q[i + h] * c      (fp32, each product rounded)
 *
 * At pos 0 this is the identity for finite inputs (up to the sign of a zero).
 * Returns IG_E_INVAL, touching nothing, when rot_dims is odd, 0 or larger
 * than head_dim, or theta is not > 0; else 0.
 */
int cop_rope_neox(float *q, size_t n_heads, size_t head_dim, size_t rot_dims, int64_t pos,
                  double theta);

/*
 * Softmax of n floats in place, stable: m = max x, e[i] = expf(x[i] - m),
 * sum in increasing i (fp32), x[i] = e[i] / sum. -inf entries give 0.
 * Returns 0, or IG_E_INVAL when the row is not a distribution's logits:
 *  - every entry -inf: all outputs +0 (no uniform guess: a fully masked row
 *    is the caller's bug, and zeros keep it from weighting anything);
 *  - some entry NaN or +inf: all outputs NaN.
 * n 0 does nothing and returns 0.
 */
int cop_softmax(float *x, size_t n);

/* out[i] = silu(gate[i]) * up[i] with silu(g) = g / (1 + expf(-g)) (fp32).
 * out may equal gate or up. */
void cop_swiglu(const float *gate, const float *up, float *out, size_t n);

/* out[i] = a[i] + b[i]; out may equal a or b (the residual add). */
void cop_add(const float *a, const float *b, float *out, size_t n);

/* out[i] = a[i] * b[i]; out may equal a or b (gating). */
void cop_mul(const float *a, const float *b, float *out, size_t n);

/* out[i] = x[i] * s; out may equal x. */
void cop_scale(const float *x, float s, float *out, size_t n);

#endif
