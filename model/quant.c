/*
 * quant.c - ggml's tensor types, block by block (quant.h). Built with
 * -ffp-contract=off: each decode is the same float operations, in the same
 * order, as ggml's, so the bits agree.
 */
#include "quant.h"

#include <math.h>
#include <string.h>

static const struct quant_type types[] = {
	{QUANT_F32, "F32", 1, 4},       {QUANT_F16, "F16", 1, 2},
	{QUANT_BF16, "BF16", 1, 2},     {QUANT_Q8_0, "Q8_0", 32, 34},
	{QUANT_Q4_0, "Q4_0", 32, 18},   {QUANT_Q4_K, "Q4_K", QUANT_QK_K, 144},
	{QUANT_Q5_K, "Q5_K", QUANT_QK_K, 176}, {QUANT_Q6_K, "Q6_K", QUANT_QK_K, 210},
};

const struct quant_type *quant_type_of(uint32_t id)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].id == id)
			return &types[i];
	return NULL;
}

const char *quant_accepted(void)
{
	return "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K";
}

uint64_t quant_row_bytes(uint32_t id, uint64_t n)
{
	const struct quant_type *t = quant_type_of(id);

	if (!t || n % t->block_elems)
		return 0;
	return n / t->block_elems * t->block_bytes;
}

/* ---- halves ---- */

static float f32_of(uint32_t bits)
{
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

static uint32_t bits_of(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof(b));
	return b;
}

float quant_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

	if (exp == 0) {
		uint32_t s = 0;

		if (man == 0)
			return f32_of(sign);
		while (!(man & 0x400u)) { /* a subnormal half is a normal float */
			man <<= 1;
			s++;
		}
		return f32_of(sign | ((113u - s) << 23) | ((man & 0x3ffu) << 13));
	}
	if (exp == 31) /* infinity, or a NaN made quiet (as ggml's scaling does) */
		return f32_of(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
	return f32_of(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t quant_f32_to_f16(float f)
{
	uint32_t x = bits_of(f), a = x & 0x7fffffffu, h, rest;
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);

	if (a >= 0x7f800000u) /* infinity, NaN (quiet) */
		return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
	if (a >= 0x477ff000u) /* 65520 and above round to infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) /* below 2^-14: a subnormal half (or 1024: the least normal) */
		return (uint16_t)(sign | (uint32_t)lrintf(f32_of(a) * 0x1p24f));
	h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
	rest = a & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
		h++;
	return (uint16_t)(sign | h);
}

static inline float half_at(const uint8_t *p)
{
	uint32_t h = (uint32_t)(p[0] | (p[1] << 8)), exp = (h >> 10) & 0x1fu;

	if (exp != 0 && exp != 31) /* a normal half: the common case, no branch further */
		return f32_of(((h & 0x8000u) << 16) | ((exp + 112u) << 23) | ((h & 0x3ffu) << 13));
	return quant_f16_to_f32((uint16_t)h);
}

static void half_put(uint8_t *p, float f)
{
	uint16_t h = quant_f32_to_f16(f);

	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

/* ---- blocks: decode, one block into y ---- */

/* GCC/clang vector extensions: element-wise, the same IEEE operations as the
 * scalar code (no contraction under -ffp-contract=off). */
typedef uint8_t v8u8 __attribute__((vector_size(8)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void dq_q4_0(const uint8_t *restrict b, float *restrict y)
{
	const float d = half_at(b);
	const uint8_t *qs = b + 2;

	/* ggml's (float)((q & 15) - 8) * d and (float)((q >> 4) - 8) * d, eight
	 * elements a vector (the compiler's own vectorisation of this block
	 * was poor inside the clones) */
	for (int k = 0; k < 16; k += 8) {
		v8u8 raw;
		v8f lo, hi;

		memcpy(&raw, qs + k, sizeof(raw));
		lo = __builtin_convertvector(__builtin_convertvector(raw & 0x0f, v8i) - 8, v8f) * d;
		hi = __builtin_convertvector(__builtin_convertvector(raw >> 4, v8i) - 8, v8f) * d;
		memcpy(y + k, &lo, sizeof(lo));
		memcpy(y + 16 + k, &hi, sizeof(hi));
	}
}

static inline __attribute__((always_inline)) void dq_q8_0(const uint8_t *restrict b, float *restrict y)
{
	const float d = half_at(b);
	const int8_t *qs = (const int8_t *)(b + 2);

	for (int j = 0; j < 32; j++)
		y[j] = (float)qs[j] * d;
}

/* The j-th 6-bit scale and min of a Q4_K/Q5_K block's 12 bytes. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/* Q4_K and Q5_K (`five`: the fifth bits in qh, 32 bytes before the low
 * nibbles): eight sub-blocks of 32, x = d * sc * q - dmin * m, with q's fifth
 * bit adding 16 (0 for Q4_K: the same value, so the same operations). */
static inline __attribute__((always_inline)) void dq_k45(const uint8_t *restrict b,
                                                        float *restrict y, int five)
{
	const float d = half_at(b), min = half_at(b + 2);
	const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + (five ? 48 : 16);
	uint8_t sc, m, u1 = 1, u2 = 2;

	for (int j = 0, is = 0; j < (int)QUANT_QK_K; j += 64, is += 2, ql += 32) {
		scale_min_k4(is, scales, &sc, &m);
		const float d1 = d * (float)sc, m1 = min * (float)m;
		scale_min_k4(is + 1, scales, &sc, &m);
		const float d2 = d * (float)sc, m2 = min * (float)m;

		for (int l = 0; l < 32; l++)
			*y++ = d1 * (float)((ql[l] & 0x0f) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
		for (int l = 0; l < 32; l++)
			*y++ = d2 * (float)((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
		u1 = (uint8_t)(u1 << 2);
		u2 = (uint8_t)(u2 << 2);
	}
}

static inline __attribute__((always_inline)) void dq_q4_k(const uint8_t *restrict b,
                                                         float *restrict y)
{
	dq_k45(b, y, 0);
}

static inline __attribute__((always_inline)) void dq_q5_k(const uint8_t *restrict b,
                                                         float *restrict y)
{
	dq_k45(b, y, 1);
}

/* Q6_K: ggml's `d * sc * q`, left to right, so (d * sc) once per
 * sub-block of 16 and then times q is the same operations. Written a
 * sub-block at a time so that the loops vectorise. */
static inline __attribute__((always_inline)) void dq_q6_k(const uint8_t *restrict b, float *restrict y)
{
	const float d = half_at(b + 208);
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);

	for (int n = 0; n < (int)QUANT_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
		for (int half = 0; half < 2; half++) { /* l in [16 half, 16 half + 16) */
			const int o = 16 * half;
			const float d1 = d * (float)sc[half + 0], d2 = d * (float)sc[half + 2];
			const float d3 = d * (float)sc[half + 4], d4 = d * (float)sc[half + 6];

			for (int l = o; l < o + 16; l++) {
				const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
				const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
				const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;

				y[l + 0] = d1 * (float)q1;
				y[l + 32] = d2 * (float)q2;
				y[l + 64] = d3 * (float)q3;
				y[l + 96] = d4 * (float)q4;
			}
		}
	}
}

/* The decoders are cloned for AVX2 and AVX-512 on x86-64 and picked at load
 * time: the same IEEE operations in the same order (no contraction), so the
 * same bits
 * (as cpu_ops.c does; not under ThreadSanitizer, whose runtime is not up
 * when the loader runs a clone's resolver). */
#if defined(__SANITIZE_THREAD__)
#define QUANT_NO_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QUANT_NO_CLONES
#endif
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(QUANT_NO_CLONES)
#if __has_attribute(target_clones)
#define QUANT_CLONED __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef QUANT_CLONED
#define QUANT_CLONED
#endif

/* One type's blocks, the type resolved once per call. */
#define DQ_RUN(fn, elems, bytes)                                                                   \
	for (uint64_t i = 0; i + (elems) <= n; i += (elems), b += (bytes))                        \
		fn(b, dst + i)

QUANT_CLONED void quant_dequantize(uint32_t id, const void *src, float *dst, uint64_t n)
{
	const uint8_t *b = src;

	switch (id) {
	case QUANT_Q8_0:
		DQ_RUN(dq_q8_0, 32, 34);
		break;
	case QUANT_Q4_0:
		DQ_RUN(dq_q4_0, 32, 18);
		break;
	case QUANT_Q4_K:
		DQ_RUN(dq_q4_k, QUANT_QK_K, 144);
		break;
	case QUANT_Q5_K:
		DQ_RUN(dq_q5_k, QUANT_QK_K, 176);
		break;
	case QUANT_Q6_K:
		DQ_RUN(dq_q6_k, QUANT_QK_K, 210);
		break;
	case QUANT_BF16:
		for (uint64_t i = 0; i < n; i++, b += 2)
			dst[i] = f32_of((uint32_t)(b[0] | (b[1] << 8)) << 16);
		break;
	case QUANT_F16:
		for (uint64_t i = 0; i < n; i++, b += 2)
			dst[i] = half_at(b);
		break;
	case QUANT_F32:
		memcpy(dst, src, n * sizeof(float));
		break;
	}
}

/* ---- blocks: encode (ours) ---- */

static int clampi(long v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : (int)v;
}

static void q_q8_0(const float *x, uint8_t *b)
{
	float amax = 0.0f;

	for (int j = 0; j < 32; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;

	half_put(b, d);
	for (int j = 0; j < 32; j++)
		b[2 + j] = (uint8_t)(int8_t)clampi(lrintf(x[j] * id), -127, 127);
}

static void q_q4_0(const float *x, uint8_t *b)
{
	float amax = 0.0f, max = 0.0f;

	for (int j = 0; j < 32; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;

	half_put(b, d);
	for (int j = 0; j < 16; j++) {
		int lo = clampi(lrintf(x[j] * id) + 8, 0, 15);
		int hi = clampi(lrintf(x[j + 16] * id) + 8, 0, 15);

		b[2 + j] = (uint8_t)(lo | (hi << 4));
	}
}

/* Q4_K and Q5_K: eight sub-blocks of 32, each an affine map of `levels`
 * steps from its minimum (at most 0), the scales and minimums in 6 bits of
 * the block's d and dmin. q[i] gets each element's level. */
static void q_k_affine(const float *x, int levels, uint8_t *b, uint8_t q[QUANT_QK_K])
{
	float sc[8], mn[8], msc = 0.0f, mmn = 0.0f;
	uint8_t ls[8], lm[8], *scales = b + 4;

	for (int j = 0; j < 8; j++) {
		float lo = 0.0f, hi = -INFINITY;

		for (int l = 0; l < 32; l++) {
			lo = fminf(lo, x[j * 32 + l]);
			hi = fmaxf(hi, x[j * 32 + l]);
		}
		sc[j] = (hi - lo) / (float)levels;
		mn[j] = -lo;
		msc = fmaxf(msc, sc[j]);
		mmn = fmaxf(mmn, mn[j]);
	}
	half_put(b, msc / 63.0f);
	half_put(b + 2, mmn / 63.0f);
	const float d = half_at(b), dmin = half_at(b + 2);
	for (int j = 0; j < 8; j++) {
		ls[j] = (uint8_t)(d > 0.0f ? clampi(lrintf(sc[j] / d), 0, 63) : 0);
		lm[j] = (uint8_t)(dmin > 0.0f ? clampi(lrintf(mn[j] / dmin), 0, 63) : 0);
	}
	for (int j = 0; j < 4; j++) { /* scale_min_k4's packing, inverted */
		scales[j] = (uint8_t)(ls[j] | ((ls[j + 4] >> 4) << 6));
		scales[j + 4] = (uint8_t)(lm[j] | ((lm[j + 4] >> 4) << 6));
		scales[j + 8] = (uint8_t)((ls[j + 4] & 0x0f) | ((lm[j + 4] & 0x0f) << 4));
	}
	for (int j = 0; j < 8; j++) {
		const float ds = d * (float)ls[j], dm = dmin * (float)lm[j];

		for (int l = 0; l < 32; l++)
			q[j * 32 + l] = (uint8_t)(ds > 0.0f
			                              ? clampi(lrintf((x[j * 32 + l] + dm) / ds), 0, levels)
			                              : 0);
	}
}

static void q_q4_k(const float *x, uint8_t *b)
{
	uint8_t q[QUANT_QK_K], *qs = b + 16;

	q_k_affine(x, 15, b, q);
	for (int p = 0; p < 4; p++)
		for (int l = 0; l < 32; l++)
			qs[p * 32 + l] = (uint8_t)(q[p * 64 + l] | (q[p * 64 + 32 + l] << 4));
}

static void q_q5_k(const float *x, uint8_t *b)
{
	uint8_t q[QUANT_QK_K], *qh = b + 16, *qs = b + 48;

	q_k_affine(x, 31, b, q);
	memset(qh, 0, 32);
	for (int p = 0; p < 4; p++)
		for (int l = 0; l < 32; l++) {
			const uint8_t a = q[p * 64 + l], c = q[p * 64 + 32 + l];

			qs[p * 32 + l] = (uint8_t)((a & 0x0f) | ((c & 0x0f) << 4));
			qh[l] |= (uint8_t)(((a >> 4) << (2 * p)) | ((c >> 4) << (2 * p + 1)));
		}
}

static void q_q6_k(const float *x, uint8_t *b)
{
	float sc[16], msc = 0.0f;
	uint8_t q[QUANT_QK_K], *ql = b, *qh = b + 128;
	int8_t *ls = (int8_t *)(b + 192);

	for (int k = 0; k < 16; k++) {
		float amax = 0.0f;

		for (int l = 0; l < 16; l++)
			amax = fmaxf(amax, fabsf(x[k * 16 + l]));
		sc[k] = amax / 31.0f;
		msc = fmaxf(msc, sc[k]);
	}
	half_put(b + 208, msc / 127.0f);
	const float d = half_at(b + 208);
	for (int k = 0; k < 16; k++) {
		ls[k] = (int8_t)(d > 0.0f ? clampi(lrintf(sc[k] / d), 0, 127) : 0);
		const float ds = d * (float)ls[k];

		for (int l = 0; l < 16; l++)
			q[k * 16 + l] = (uint8_t)(
			    (ds > 0.0f ? clampi(lrintf(x[k * 16 + l] / ds), -32, 31) : 0) + 32);
	}
	for (int h = 0; h < 2; h++, ql += 64, qh += 32)
		for (int l = 0; l < 32; l++) {
			const uint8_t *Q = q + h * 128;
			const uint8_t q1 = Q[l], q2 = Q[l + 32], q3 = Q[l + 64], q4 = Q[l + 96];

			ql[l] = (uint8_t)((q1 & 0x0f) | ((q3 & 0x0f) << 4));
			ql[l + 32] = (uint8_t)((q2 & 0x0f) | ((q4 & 0x0f) << 4));
			qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
		}
}

void quant_quantize(uint32_t id, const float *src, void *dst, uint64_t n)
{
	const struct quant_type *t = quant_type_of(id);
	uint8_t *b = dst;

	if (!t)
		return;
	for (uint64_t i = 0; i + t->block_elems <= n; i += t->block_elems, b += t->block_bytes) {
		const float *x = src + i;

		switch (t->id) {
		case QUANT_F32:
			memcpy(b, x, 4);
			break;
		case QUANT_F16:
			half_put(b, x[0]);
			break;
		case QUANT_BF16: { /* round to nearest even; a NaN stays a (quiet) NaN */
			uint32_t v = bits_of(x[0]);
			uint16_t h = (v & 0x7fffffffu) > 0x7f800000u
			                 ? (uint16_t)((v >> 16) | 0x40u)
			                 : (uint16_t)((v + 0x7fffu + ((v >> 16) & 1u)) >> 16);

			b[0] = (uint8_t)h;
			b[1] = (uint8_t)(h >> 8);
			break;
		}
		case QUANT_Q4_0:
			q_q4_0(x, b);
			break;
		case QUANT_Q8_0:
			q_q8_0(x, b);
			break;
		case QUANT_Q4_K:
			q_q4_k(x, b);
			break;
		case QUANT_Q5_K:
			q_q5_k(x, b);
			break;
		case QUANT_Q6_K:
			q_q6_k(x, b);
			break;
		}
	}
}
