/*
 * cpu_ops.c - the cpu backend's numeric kernels (cpu_ops.h).
 *
 * The matrix product. Work is cut into items of MM_RB outputs x MM_TB tokens;
 * the pool hands each thread a contiguous range of items, and each item
 * computes its outputs from start to finish, so which thread runs an item
 * never changes a bit. Inside an item, i runs in blocks of MM_KB: the block
 * of MM_RB weight rows is widened from bf16 to fp32 once into `wbuf` and then
 * serves all the item's tokens; every (output, token) pair keeps its 16 lane
 * sums in `acc` between blocks. The micro-kernel streams one block of 4 rows
 * against one token, holding the 4 pairs' lanes in registers (two 8-float
 * vectors a pair) and loading each x vector once for the 4 rows; the edge
 * kernel does one row. Both do exactly `lane += w * x` per lane in
 * increasing i, so the edges of the matrix give the same bits as the middle.
 *
 * Why these sizes (measured on the 2-core AMD EPYC build machine, AVX2, no
 * FMA in use): MM_KB = 256 floats keeps a block's 4 weight rows (4 KiB) and
 * 16 tokens' x (16 KiB) inside a 32 KiB L1 beside the lanes (4 KiB); larger
 * blocks ran no faster. MM_RB = 4 rows x 16 lanes = 8 of the 16 AVX2
 * registers, plus x and temporaries: 1.25 loads per vector multiply-add, where
 * a 2 rows x 2 tokens tile made the compiler reload both operands (2 loads)
 * and ran ~30% slower. MM_TB = 16 tokens amortises a block's widening over 16
 * uses and still leaves items for every thread in a prefill.
 *
 * Vectors are GCC/clang vector extensions (element-wise IEEE arithmetic, no
 * reassociation, no contraction with -ffp-contract=off); on x86-64 the
 * kernels are also cloned for AVX2 and AVX-512 and picked at load time; the
 * 4-row kernels have AVX-512 builds of their own (16 lanes, one register),
 * picked at load (cop_kernels), which widen bf16 rows in registers and
 * decode Q8_0 and Q4_K rows in registers for one token; the rest goes
 * through `wbuf`.
 */
#include <math.h>
#include <stdbool.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdint.h>
#include <string.h>

#include "cpu_ops.h"
#include "common/err.h"
#include "model/quant.h"

#define MM_RB 4
#define MM_TB 16
#define MM_KB 256
#define LANES COP_DOT_LANES

_Static_assert(LANES == 16, "the micro-kernels carry a lane set as two 8-float vectors");
_Static_assert(MM_KB % LANES == 0, "blocks of i hold whole lane sets");

typedef float v8f __attribute__((vector_size(32)));

/* Loads and stores through memcpy: no alignment assumed, no vector passed by
 * value across a call (that ABI differs with and without AVX). */
#define LD8(v, p) memcpy(&(v), (p), sizeof(v8f))
#define ST8(p, v) memcpy((p), &(v), sizeof(v8f))

/*
 * A kernel is a function of its own: inlined into its caller, register
 * allocation there spilled the running sums. On x86-64 it is also cloned for
 * AVX2 and AVX-512 (a clone is called through its resolver, so it is never inlined;
 * clang refuses `noinline` beside `target_clones`).
 */
/* ThreadSanitizer instruments the clones' resolver, which the dynamic loader
 * runs before the sanitizer's runtime is up: a TSan build takes no clones. */
#if defined(__SANITIZE_THREAD__)
#define COP_NO_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COP_NO_CLONES
#endif
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(COP_NO_CLONES)
#if __has_attribute(target_clones)
#define KERNEL static __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef KERNEL
#define KERNEL static __attribute__((noinline))
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Step 2 of the order: the fixed tree over 16 lane sums. */
static float lanes_fold(const float *lane)
{
	float s[LANES];

	memcpy(s, lane, sizeof(s));
	for (int h = LANES / 2; h >= 1; h /= 2)
		for (int l = 0; l < h; l++)
			s[l] += s[l + h];
	return s[0];
}

/* ---- matrix product ------------------------------------------------------ */

struct mm_job {
	const uint16_t *w16; /* one of w16, w32 and wq */
	const float *w32;
	const uint8_t *wq; /* a block type's rows of `row_bytes`, `blk` elements in `blk_bytes` */
	uint32_t qtype, blk, blk_bytes;
	size_t row_bytes;
	const float *x;
	float *y;
	size_t n_in, n_out, n_tok;
	size_t n_tc; /* token chunks of MM_TB */
};

/*
 * The micro-kernels: stream i = 0 .. len-1 (a multiple of 16) of 4 weight
 * rows wr[0..4) (or one row w0) against one token's x, adding into the lane
 * sums of pair (r, token) at ACC(r, 0). Each pair's 16 lanes are two named
 * 8-float vectors (named, not arrays, so the compiler keeps them in
 * registers), and every lane does `lane += w * x` whatever the kernel.
 */
#define ACC(r, t)      (acc + ((size_t)(r)*MM_TB + (size_t)(t)) * LANES)
#define DECL16(v)      v8f v##_0, v##_1
#define LOAD16(v, p)   (LD8(v##_0, (p)), LD8(v##_1, (p) + 8))
#define STORE16(p, v)  (ST8((p), v##_0), ST8((p) + 8, v##_1))
#define MAC16(a, w, x) (a##_0 += w##_0 * x##_0, a##_1 += w##_1 * x##_1)

KERNEL void mk_4x1(const float *const *wr, const float *x, float *acc, size_t len)
{
	const float *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
	DECL16(a0);
	DECL16(a1);
	DECL16(a2);
	DECL16(a3);

	LOAD16(a0, ACC(0, 0));
	LOAD16(a1, ACC(1, 0));
	LOAD16(a2, ACC(2, 0));
	LOAD16(a3, ACC(3, 0));
	for (size_t i = 0; i < len; i += LANES) {
		DECL16(xv);
		DECL16(wv);

		LOAD16(xv, x + i);
		LOAD16(wv, w0 + i);
		MAC16(a0, wv, xv);
		LOAD16(wv, w1 + i);
		MAC16(a1, wv, xv);
		LOAD16(wv, w2 + i);
		MAC16(a2, wv, xv);
		LOAD16(wv, w3 + i);
		MAC16(a3, wv, xv);
	}
	STORE16(ACC(0, 0), a0);
	STORE16(ACC(1, 0), a1);
	STORE16(ACC(2, 0), a2);
	STORE16(ACC(3, 0), a3);
}

KERNEL void mk_1x1(const float *w0, const float *x0, float *acc, size_t len)
{
	DECL16(a);

	LOAD16(a, ACC(0, 0));
	for (size_t i = 0; i < len; i += LANES) {
		DECL16(xv);
		DECL16(wv);

		LOAD16(wv, w0 + i);
		LOAD16(xv, x0 + i);
		MAC16(a, wv, xv);
	}
	STORE16(ACC(0, 0), a);
}

/*
 * AVX-512 (x86-64, chosen at load when the CPU has it): a pair's 16 lanes
 * are one 16-float register instead of two 8-float ones. Lane l still adds
 * p[l], p[l + 16], ... in increasing i with a rounded multiply then a
 * rounded add (no fused multiply-add), so the bits are the other kernels'.
 */
#if defined(__x86_64__) && !defined(COP_NO_CLONES) && defined(__has_attribute)
#if __has_attribute(target)
#define COP_X512 1
#endif
#endif

#ifdef COP_X512
#define X512 static __attribute__((target("avx512f"), noinline))

X512 void mk512_4x1(const float *const *wr, const float *x, float *acc, size_t len)
{
	const float *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
	__m512 a0 = _mm512_loadu_ps(ACC(0, 0)), a1 = _mm512_loadu_ps(ACC(1, 0));
	__m512 a2 = _mm512_loadu_ps(ACC(2, 0)), a3 = _mm512_loadu_ps(ACC(3, 0));

	for (size_t i = 0; i < len; i += LANES) {
		__m512 xv = _mm512_loadu_ps(x + i);

		a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_loadu_ps(w0 + i), xv));
		a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_loadu_ps(w1 + i), xv));
		a2 = _mm512_add_ps(a2, _mm512_mul_ps(_mm512_loadu_ps(w2 + i), xv));
		a3 = _mm512_add_ps(a3, _mm512_mul_ps(_mm512_loadu_ps(w3 + i), xv));
	}
	_mm512_storeu_ps(ACC(0, 0), a0);
	_mm512_storeu_ps(ACC(1, 0), a1);
	_mm512_storeu_ps(ACC(2, 0), a2);
	_mm512_storeu_ps(ACC(3, 0), a3);
}

/* 16 bf16 at p widened exactly: zero-extend to 32 bits, shift into place. */
#define WIDEN512(p)                                                                                \
	_mm512_castsi512_ps(_mm512_slli_epi32(                                                     \
	    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))

X512 void mk512_4x1_bf16(const uint16_t *const *wr, const float *x, float *acc, size_t len)
{
	const uint16_t *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
	__m512 a0 = _mm512_loadu_ps(ACC(0, 0)), a1 = _mm512_loadu_ps(ACC(1, 0));
	__m512 a2 = _mm512_loadu_ps(ACC(2, 0)), a3 = _mm512_loadu_ps(ACC(3, 0));

	for (size_t i = 0; i < len; i += LANES) {
		__m512 xv = _mm512_loadu_ps(x + i);

		a0 = _mm512_add_ps(a0, _mm512_mul_ps(WIDEN512(w0 + i), xv));
		a1 = _mm512_add_ps(a1, _mm512_mul_ps(WIDEN512(w1 + i), xv));
		a2 = _mm512_add_ps(a2, _mm512_mul_ps(WIDEN512(w2 + i), xv));
		a3 = _mm512_add_ps(a3, _mm512_mul_ps(WIDEN512(w3 + i), xv));
	}
	_mm512_storeu_ps(ACC(0, 0), a0);
	_mm512_storeu_ps(ACC(1, 0), a1);
	_mm512_storeu_ps(ACC(2, 0), a2);
	_mm512_storeu_ps(ACC(3, 0), a3);
}

/*
 * Block types decoded in registers, one row against one token (decode):
 * each weight is ggml's value computed as quant.c computes it (Q8_0
 * (float)q * d; Q4_K d1 * (float)q - m1 with d1 = d * (float)sc and
 * m1 = dmin * (float)m per sub-block of 32), then `lane += w * x` as
 * everywhere: the same bits as decoding into `wbuf` first. `row` is the
 * row's first block of the stretch, `len` elements (whole blocks).
 */
/* The half at p as a float, exactly (quant.h's conversion; normal halves
 * inline, the rest through it). */
static inline float cop__half(const uint8_t *p)
{
	uint32_t h = (uint32_t)(p[0] | (p[1] << 8)), e = (h >> 10) & 0x1fu, u;
	float f;

	if (e == 0 || e == 31)
		return quant_f16_to_f32((uint16_t)h);
	u = ((h & 0x8000u) << 16) | ((e + 112u) << 23) | ((h & 0x3ffu) << 13);
	memcpy(&f, &u, sizeof(f));
	return f;
}

X512 void mk512_q8_0(const uint8_t *row, const float *x, float *acc, size_t len)
{
	__m512 a = _mm512_loadu_ps(acc);

	for (size_t i = 0; i < len; i += 32, row += 34) {
		__m512 d = _mm512_set1_ps(cop__half(row));
		__m512 w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
		                              _mm_loadu_si128((const __m128i *)(row + 2)))),
		                          d);
		__m512 w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
		                              _mm_loadu_si128((const __m128i *)(row + 18)))),
		                          d);

		a = _mm512_add_ps(a, _mm512_mul_ps(w0, _mm512_loadu_ps(x + i)));
		a = _mm512_add_ps(a, _mm512_mul_ps(w1, _mm512_loadu_ps(x + i + 16)));
	}
	_mm512_storeu_ps(acc, a);
}

X512 void mk512_q4_k(const uint8_t *row, const float *x, float *acc, size_t len)
{
	__m512 a = _mm512_loadu_ps(acc);
	const __m512i lo4 = _mm512_set1_epi32(0x0f);

	for (size_t i = 0; i < len; i += QUANT_QK_K, row += 144) {
		const float d = cop__half(row), dmin = cop__half(row + 2);
		const uint8_t *sc = row + 4, *ql = row + 16;

		for (int j = 0; j < 4; j++, ql += 32) { /* 64 elements: 32 low nibbles, 32 high */
			for (int h = 0; h < 2; h++) {
				int is = 2 * j + h;
				uint8_t s6, m6;

				if (is < 4) {
					s6 = sc[is] & 63;
					m6 = sc[is + 4] & 63;
				} else {
					s6 = (uint8_t)((sc[is + 4] & 0x0f) |
					               ((sc[is - 4] >> 6) << 4));
					m6 = (uint8_t)((sc[is + 4] >> 4) | ((sc[is] >> 6) << 4));
				}
				__m512 dv = _mm512_set1_ps(d * (float)s6),
				       mv = _mm512_set1_ps(dmin * (float)m6);
				const float *xs = x + i + 64 * j + 32 * h;

				for (int k = 0; k < 2; k++) {
					__m512i q = _mm512_cvtepu8_epi32(
					    _mm_loadu_si128((const __m128i *)(ql + 16 * k)));
					__m512 w;

					q = h ? _mm512_srli_epi32(q, 4) : _mm512_and_si512(q, lo4);
					w = _mm512_sub_ps(_mm512_mul_ps(dv, _mm512_cvtepi32_ps(q)),
					                  mv);
					a = _mm512_add_ps(
					    a, _mm512_mul_ps(w, _mm512_loadu_ps(xs + 16 * k)));
				}
			}
		}
	}
	_mm512_storeu_ps(acc, a);
}
#endif

/* The kernels in use: COP_KERNELS_* (cop_kernels_force). */
static int cop__kernels;

__attribute__((constructor)) static void cop__detect(void)
{
	cop__kernels = COP_KERNELS_BASE;
#ifdef COP_X512
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		cop__kernels = COP_KERNELS_AVX512;
#endif
}

const char *cop_kernels(void)
{
	return cop__kernels == COP_KERNELS_AVX512 ? "avx512" : "base";
}

int cop_kernels_force(int which)
{
	int was = cop__kernels;

	if (which == COP_KERNELS_BASE)
		cop__kernels = which;
	else if (which == COP_KERNELS_BEST)
		cop__detect();
	return was;
}

/* The 4-row kernel over one token: f32 rows, or (AVX-512 only: the
 * baseline's widening in registers measured slower than through `wbuf`)
 * bf16 rows in place. */
static ALWAYS_INLINE void mk4(const float *const *wr, const uint16_t *const *wr16, const float *x,
                              float *acc, size_t len)
{
#ifdef COP_X512
	if (cop__kernels == COP_KERNELS_AVX512) {
		if (wr16)
			mk512_4x1_bf16(wr16, x, acc, len);
		else
			mk512_4x1(wr, x, acc, len);
		return;
	}
#endif
	(void)wr16;
	mk_4x1(wr, x, acc, len);
}

static float weight_at(const struct mm_job *j, size_t o, size_t i)
{
	size_t k = o * j->n_in + i;

	if (j->wq) { /* its block, decoded */
		float b[QUANT_BLOCK_MAX];

		quant_dequantize(j->qtype, j->wq + o * j->row_bytes + i / j->blk * j->blk_bytes, b,
		                 j->blk);
		return b[i % j->blk];
	}
	return j->w16 ? bf16_f32(j->w16[k]) : j->w32[k];
}

KERNEL void widen_bf16(const uint16_t *src, float *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_f32(src[i]);
}

static void mm_item(const struct mm_job *j, size_t rb, size_t tc)
{
	float acc[MM_RB * MM_TB * LANES] __attribute__((aligned(64)));
	float wbuf[MM_RB][MM_KB] __attribute__((aligned(64)));
	const float *wr[MM_RB];
	const uint16_t *wr16[MM_RB];
	size_t o0 = rb * MM_RB, t0 = tc * MM_TB;
	size_t nr = j->n_out - o0 < MM_RB ? j->n_out - o0 : MM_RB;
	size_t nt = j->n_tok - t0 < MM_TB ? j->n_tok - t0 : MM_TB;
	size_t n_in = j->n_in, m = n_in - n_in % LANES;

	memset(acc, 0, sizeof(acc));
	for (size_t k0 = 0; k0 < m; k0 += MM_KB) {
		size_t len = m - k0 < MM_KB ? m - k0 : MM_KB;
		size_t t, r;

#ifdef COP_X512
		/* one token of a Q8_0 or Q4_K matrix: decoded in registers */
		if (j->wq && nt == 1 && cop__kernels == COP_KERNELS_AVX512 &&
		    (j->qtype == QUANT_Q8_0 || j->qtype == QUANT_Q4_K)) {
			const float *xt = j->x + t0 * n_in + k0;

			for (r = 0; r < nr; r++) {
				const uint8_t *row =
				    j->wq + (o0 + r) * j->row_bytes + k0 / j->blk * j->blk_bytes;

				if (j->qtype == QUANT_Q8_0)
					mk512_q8_0(row, xt, ACC(r, 0), len);
				else
					mk512_q4_k(row, xt, ACC(r, 0), len);
			}
			continue;
		}
#endif
		for (r = 0; r < nr; r++) {
			if (j->w16 && nr == MM_RB && cop__kernels == COP_KERNELS_AVX512) {
				/* read in place by the AVX-512 4-row kernel */
				wr16[r] = j->w16 + (o0 + r) * n_in + k0;
			} else if (j->w16) {
				widen_bf16(j->w16 + (o0 + r) * n_in + k0, wbuf[r], len);
				wr[r] = wbuf[r];
			} else if (j->wq) { /* k0 and len are whole blocks: MM_KB is */
				quant_dequantize(j->qtype,
				                 j->wq + (o0 + r) * j->row_bytes +
				                     k0 / j->blk * j->blk_bytes,
				                 wbuf[r], len);
				wr[r] = wbuf[r];
			} else {
				wr[r] = j->w32 + (o0 + r) * n_in + k0;
			}
		}
		for (t = 0; t < nt; t++) {
			const float *xt = j->x + (t0 + t) * n_in + k0;

			if (nr == MM_RB) {
				mk4(wr, j->w16 && cop__kernels == COP_KERNELS_AVX512 ? wr16 : NULL,
				    xt, ACC(0, t), len);
			} else {
				for (r = 0; r < nr; r++)
					mk_1x1(wr[r], xt, ACC(r, t), len);
			}
		}
	}

	for (size_t r = 0; r < nr; r++)
		for (size_t t = 0; t < nt; t++) {
			const float *xr = j->x + (t0 + t) * n_in;
			float s = lanes_fold(ACC(r, t));

			for (size_t i = m; i < n_in; i++)
				s += weight_at(j, o0 + r, i) * xr[i];
			j->y[(t0 + t) * j->n_out + o0 + r] = s;
		}
}

static void mm_range(void *ctx, size_t begin, size_t end)
{
	const struct mm_job *j = ctx;

	for (size_t it = begin; it < end; it++)
		mm_item(j, it / j->n_tc, it % j->n_tc);
}

static void mm_run(struct cpool *pool, struct mm_job *j)
{
	size_t n_rb = (j->n_out + MM_RB - 1) / MM_RB;

	if (j->n_out == 0 || j->n_tok == 0)
		return;
	j->n_tc = (j->n_tok + MM_TB - 1) / MM_TB;
	/* items in row-block-major order: a thread's consecutive items share
	 * weight rows, which stay warm in its cache for the next token chunk */
	cpool_run_sized(pool, n_rb * j->n_tc, (size_t)MM_RB * MM_TB * j->n_in, mm_range, j);
}

void cop_matmul_bf16(struct cpool *pool, const uint16_t *w, const float *x, float *y, size_t n_in,
                     size_t n_out, size_t n_tok)
{
	struct mm_job j = {.w16 = w, .x = x, .y = y, .n_in = n_in, .n_out = n_out, .n_tok = n_tok};

	mm_run(pool, &j);
}

void cop_matmul_f32(struct cpool *pool, const float *w, const float *x, float *y, size_t n_in,
                    size_t n_out, size_t n_tok)
{
	struct mm_job j = {.w32 = w, .x = x, .y = y, .n_in = n_in, .n_out = n_out, .n_tok = n_tok};

	mm_run(pool, &j);
}

_Static_assert(MM_KB % QUANT_BLOCK_MAX == 0, "a block of i is whole blocks of every type");

void cop_matmul(struct cpool *pool, struct cop_w w, const float *x, float *y, size_t n_in,
                size_t n_out, size_t n_tok)
{
	const struct quant_type *t = quant_type_of(w.type);
	struct mm_job j = {.x = x, .y = y, .n_in = n_in, .n_out = n_out, .n_tok = n_tok};

	if (w.type == QUANT_BF16) {
		j.w16 = w.p;
	} else if (w.type == QUANT_F32) {
		j.w32 = w.p;
	} else {
		j.wq = w.p;
		j.qtype = w.type;
		j.blk = t->block_elems;
		j.blk_bytes = t->block_bytes;
		j.row_bytes = (size_t)quant_row_bytes(w.type, n_in);
	}
	mm_run(pool, &j);
}

struct cop_w cop_w_rows(struct cop_w w, size_t n_in, size_t rows)
{
	w.p = (const uint8_t *)w.p + rows * quant_row_bytes(w.type, n_in);
	return w;
}

void cop_row(struct cop_w w, size_t n_in, size_t r, float *out)
{
	quant_dequantize(w.type, (const uint8_t *)w.p + r * quant_row_bytes(w.type, n_in), out,
	                 n_in);
}

float cop_dot_f32(const float *a, const float *b, size_t n)
{
	float lane[LANES] = {0};
	size_t m = n - n % LANES;
	v8f s0, s1;
	float s;

	LD8(s0, lane);
	LD8(s1, lane + 8);
	for (size_t i = 0; i < m; i += LANES) {
		v8f a0, a1, b0, b1;

		LD8(a0, a + i);
		LD8(a1, a + i + 8);
		LD8(b0, b + i);
		LD8(b1, b + i + 8);
		s0 += a0 * b0;
		s1 += a1 * b1;
	}
	ST8(lane, s0);
	ST8(lane + 8, s1);
	s = lanes_fold(lane);
	for (size_t i = m; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* ---- normalisation, rotation, activations -------------------------------- */

void cop_rmsnorm(const float *x, const float *w, float *y, size_t n, float eps)
{
	float ss = cop_dot_f32(x, x, n);
	float r = 1.0f / sqrtf(ss / (float)n + eps);

	for (size_t i = 0; i < n; i++)
		y[i] = (x[i] * r) * w[i];
}

void cop_rmsnorm_rows(const float *x, const float *w, float *y, size_t rows, size_t n, float eps)
{
	for (size_t r = 0; r < rows; r++)
		cop_rmsnorm(x + r * n, w, y + r * n, n, eps);
}

int cop_rope_neox(float *q, size_t n_heads, size_t head_dim, size_t rot_dims, int64_t pos,
                  double theta)
{
	size_t h = rot_dims / 2;

	if (rot_dims == 0 || rot_dims % 2 || rot_dims > head_dim || !(theta > 0))
		return IG_E_INVAL;
	for (size_t i = 0; i < h; i++) {
		double inv_freq = pow(theta, -(double)(2 * i) / (double)rot_dims);
		double angle = (double)pos * inv_freq;
		float c = (float)cos(angle), s = (float)sin(angle);

		for (size_t hd = 0; hd < n_heads; hd++) {
			float *v = q + hd * head_dim;
			float x0 = v[i], x1 = v[i + h];

			v[i] = x0 * c - x1 * s;
			v[i + h] = x0 * s + x1 * c;
		}
	}
	return 0;
}

int cop_softmax(float *x, size_t n)
{
	float m = -INFINITY, sum = 0.0f;
	bool bad = false;

	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i]) || x[i] == INFINITY)
			bad = true;
		else if (x[i] > m)
			m = x[i];
	}
	if (bad) {
		for (size_t i = 0; i < n; i++)
			x[i] = NAN;
		return IG_E_INVAL;
	}
	if (m == -INFINITY) {
		for (size_t i = 0; i < n; i++)
			x[i] = 0.0f;
		return IG_E_INVAL;
	}
	for (size_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - m); /* -inf - m = -inf, expf(-inf) = +0 */
		sum += x[i];
	}
	/* sum >= 1: the max entry contributes expf(0) = 1 */
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] / sum;
	return 0;
}

void cop_swiglu(const float *gate, const float *up, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float g = gate[i];

		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

void cop_add(const float *a, const float *b, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

void cop_mul(const float *a, const float *b, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] * b[i];
}

void cop_scale(const float *x, float s, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = x[i] * s;
}
