/*
 * kvfmt_dev.h - the KV vector formats of model/kvfmt.h (bf16, fp8, compact)
 * in one source that nvcc compiles for the device (kernels/attention.cu) and
 * a C compiler for the host (tests/gpu/test_kvfmt_dev_host.c), as
 * quant_blocks.h is: everything a static inline function, __host__
 * __device__ under nvcc, floating point through named operations (qb_mul,
 * qb_add, kvd_dadd, ...) that are the _rn intrinsics on the device and plain
 * C on the host, which must be compiled with -ffp-contract=off.
 *
 * WHY A COPY. Pages move between backends inside sequence images: a vector
 * the cuda backend encodes must be the very bytes kvfmt_encode writes, and a
 * page either backend wrote must decode to the same floats on both. kernels/
 * is a leaf (it may not include model/), so the formats are restated here,
 * operation for operation in kvfmt.c's order, and the host test pins them
 * to kvfmt.c bit for bit: encode bytes, decode_rotated, rotate, unrotate,
 * and the conversions (gguf.c's f32<->f16, f32->bf16), on every served
 * format and head dims 64, 128 and 256.
 *
 * What the device cannot take from kvfmt.c literally, and how it agrees:
 *   - sqrt (the compact scale) and the double divisions are correctly
 *     rounded in IEEE, so __dsqrt_rn / __ddiv_rn give glibc's bits;
 *   - the float divisions (fp8's amax / 448 and 1 / scale) are __fdiv_rn,
 *     correctly rounded as C's '/' is;
 *   - rintf (fp8 subnormals) rounds to nearest even on both;
 *   - products of two floats summed in double (the compact scale's sums)
 *     are exact in double, so a fused multiply-add could not change them;
 *     they are named operations anyway.
 * No libm function whose last bit may differ (expf, pow, sin) is used here.
 * One assumption outside this file: model/kvfmt.c itself is built without
 * fused multiply-adds (x86-64's baseline has none; model/meson.build does
 * not pass -ffp-contract=off, so on a target with FMA the compiler could
 * fuse kvfmt.c's e8 search, and its bytes would move away from these).
 *
 * compact1 (not served) is not restated: the kernels refuse it.
 *
 * THE COMPACT CODEBOOK. kvfmt.c builds its 256 entries at run time
 * (kvfmt__e8_build); kvd_e8_build is the same code. The host fills a
 * struct kvd_e8 with it; the device keeps one in __constant__ memory that
 * kern_kvfmt_init copies from a host-built table, and the kernels copy it
 * into shared memory. Every function that reads the codebook takes it as a
 * pointer.
 *
 * Encoding a compact group is four steps, so that a device may run the
 * expensive one (the code search, per 8 values) on several threads:
 *   1. kvd_rotate_group       y = H D x / 8 (in place)
 *   2. kvd_c2_ss, kvd_c2_half the group's sum of squares (double, in
 *                             order), the first fp16 scale
 *   3. kvd_e8_code            per 8 values: the nearest point's 16 bits
 *   4. kvd_c2_final_half      the unbiased scale, from the chosen points
 * kvd_encode runs them in order; the result does not depend on who runs
 * step 3 for which block.
 */
#ifndef IGNIS_KERNELS_KVFMT_DEV_H
#define IGNIS_KERNELS_KVFMT_DEV_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant_blocks.h"

#ifdef __CUDACC__
#define KVD_FN static __host__ __device__ __forceinline__
#else
#define KVD_FN static inline
#endif

/* enum mdesc_kv_format's values (common/model.h: never renumber; the host
 * test asserts they agree). */
#define KVD_BF16     1u
#define KVD_COMPACT1 2u
#define KVD_FP8      3u
#define KVD_COMPACT  4u

#define KVD_GROUP       64u /* MDESC_KV_GROUP: values a compact group holds */
#define KVD_GROUP_BYTES 18u /* MDESC_KV_GROUP_BYTES: fp16 scale + 8 codes */
#define KVD_FP8_SCALE_BYTES 4u
#define KVD_PAGE_TOKENS 64u /* MDESC_PAGE_TOKENS */

#define KVD_E4M3_MAX   448.0f
#define KVD_ROT_SEED   0x9e3779b97f4a7c15ull
#define KVD_E8_SCALE   0.95f
#define KVD_E8_ENTRIES 256u

/* kvfmt.c's codebook: the entries of A, their squared norms, their parity. */
struct kvd_e8 {
	float a[KVD_E8_ENTRIES][8];
	float norm2[KVD_E8_ENTRIES];
	unsigned char odd[KVD_E8_ENTRIES];
};

/* ---- named operations ---- */

KVD_FN uint32_t kvd_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

KVD_FN float kvd_fdiv(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fdiv_rn(a, b);
#else
	return a / b;
#endif
}

KVD_FN double kvd_dadd(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dadd_rn(a, b);
#else
	return a + b;
#endif
}

KVD_FN double kvd_dmul(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dmul_rn(a, b);
#else
	return a * b;
#endif
}

KVD_FN double kvd_ddiv(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __ddiv_rn(a, b);
#else
	return a / b;
#endif
}

KVD_FN double kvd_dsqrt(double a)
{
#ifdef __CUDA_ARCH__
	return __dsqrt_rn(a);
#else
	return sqrt(a);
#endif
}

KVD_FN float kvd_d2f(double a)
{
#ifdef __CUDA_ARCH__
	return __double2float_rn(a);
#else
	return (float)a;
#endif
}

KVD_FN float kvd_fabs(float f)
{
	return qb_f32_of(kvd_bits(f) & 0x7fffffffu);
}

KVD_FN int kvd_isfinite(float f)
{
	return (kvd_bits(f) & 0x7f800000u) != 0x7f800000u;
}

KVD_FN unsigned kvd_popcount(unsigned v)
{
#ifdef __CUDA_ARCH__
	return (unsigned)__popc(v);
#else
	return (unsigned)__builtin_popcount(v);
#endif
}

/* Little-endian 16 bits at any address (pages are only 2-byte aligned for
 * compact and bf16, and nothing here relies even on that). */
KVD_FN uint32_t kvd_ld16(const unsigned char *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

KVD_FN void kvd_st16(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

/* ---- the conversions of model/gguf.c, restated ---- */

/* gguf_bf16_to_f32 */
KVD_FN float kvd_bf16_f32(uint32_t h)
{
	return qb_f32_of((h & 0xffffu) << 16);
}

/* gguf_f32_to_bf16: ties to even, a NaN kept quiet with its top payload. */
KVD_FN uint32_t kvd_f32_bf16(float f)
{
	uint32_t u = kvd_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return ((u >> 16) | 0x0040u) & 0xffffu;
	u += 0x7fffu + ((u >> 16) & 1u);
	return (u >> 16) & 0xffffu;
}

/* gguf_f16_to_f32 (a NaN's payload kept, not made quiet: gguf.c's bits,
 * which the hardware conversion would not give). */
KVD_FN float kvd_f16_f32(uint32_t h)
{
	uint32_t sign = (h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0x1f)
		return qb_f32_of(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		if (mant == 0)
			return qb_f32_of(sign);
		exp = 113;
		while (!(mant & 0x400u)) {
			mant <<= 1;
			exp--;
		}
		mant &= 0x3ffu;
		return qb_f32_of(sign | (exp << 23) | (mant << 13));
	}
	return qb_f32_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* gguf_f32_to_f16: ties to even. */
KVD_FN uint32_t kvd_f32_f16(float f)
{
	uint32_t u = kvd_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t exp = (u >> 23) & 0xffu;
	uint32_t mant = u & 0x7fffffu;
	int32_t e = (int32_t)exp - 127 + 15;
	uint32_t h, rem;

	if (exp == 0xff)
		return sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0);
	if (e >= 31)
		return sign | 0x7c00u;
	if (e <= 0) {
		uint32_t shift, half;

		if (e < -10)
			return sign;
		mant |= 0x800000u;
		shift = (uint32_t)(14 - e);
		h = mant >> shift;
		rem = mant & ((1u << shift) - 1);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1u)))
			h++;
		return sign | h;
	}
	h = ((uint32_t)e << 10) | (mant >> 13);
	rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
		h++;
	return (sign | h) & 0xffffu;
}

/* ---- shapes ---- */

/* mdesc_kv_head_bytes for the formats served here (0: not one, or a head
 * dim the format cannot hold). */
KVD_FN uint64_t kvd_head_bytes(uint32_t fmt, uint32_t head_dim)
{
	if (fmt == KVD_BF16)
		return 2ull * head_dim;
	if (fmt == KVD_FP8)
		return head_dim ? (uint64_t)head_dim + KVD_FP8_SCALE_BYTES : 0;
	if (fmt == KVD_COMPACT && head_dim % KVD_GROUP == 0)
		return (uint64_t)head_dim / KVD_GROUP * KVD_GROUP_BYTES;
	return 0;
}

/* ---- fp8 ---- */

/* kvfmt__e4m3_mag: |v| to e4m3's magnitude bits, nearest, ties to even. */
KVD_FN unsigned kvd_e4m3_mag(float v)
{
	uint32_t u;

	if (!(v < KVD_E4M3_MAX))
		return 0x7e;
	if (v < 0x1p-6f)
		return (unsigned)rintf(qb_mul(v, 512.0f));
	u = kvd_bits(v);
	u += 0x7ffffu + ((u >> 20) & 1u);
	{
		unsigned e = (u >> 23) - 127u + 7u, m = (u >> 20) & 7u;

		if (e > 15u || (e == 15u && m == 7u))
			return 0x7e;
		return e << 3 | m;
	}
}

KVD_FN float kvd_e4m3_f32(unsigned b)
{
	unsigned e = (b >> 3) & 15u, m = b & 7u;
	float v;

	if (e == 0)
		v = qb_mul((float)m, 0x1p-9f);
	else
		v = qb_f32_of((e - 7u + 127u) << 23 | m << 20);
	return b & 0x80u ? -v : v;
}

/* The vector's scale (kvfmt__fp8_encode's first loop, in order: a NaN
 * anywhere makes the scale the first NaN's magnitude). */
KVD_FN float kvd_fp8_scale(const float *x, uint32_t n)
{
	float amax = 0.0f;

	for (uint32_t i = 0; i < n; i++)
		if (!(kvd_fabs(x[i]) <= amax) && amax == amax)
			amax = kvd_fabs(x[i]);
	return kvd_fdiv(amax, KVD_E4M3_MAX);
}

KVD_FN float kvd_fp8_inv(float scale)
{
	return scale > 0.0f ? kvd_fdiv(1.0f, scale) : 0.0f;
}

/* Value i's byte against `inv` (1 / scale, or 0). */
KVD_FN unsigned kvd_fp8_byte(float x, float inv)
{
	float v = qb_mul(x, inv);

	return kvd_e4m3_mag(kvd_fabs(v)) | ((kvd_bits(v) >> 31) ? 0x80u : 0u);
}

/* ---- compact: the rotation ---- */

/* kvfmt__rot_signs: the 64 signs of D for group g (set: -1). */
KVD_FN uint64_t kvd_rot_signs(uint32_t g)
{
	uint64_t z = KVD_ROT_SEED + (uint64_t)(g + 1u) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* kvfmt__wht64: x = H x / 8 in place, the same butterflies in the same
 * order (each output is the same sequence of additions whatever the order
 * the butterflies of one stage run in). */
KVD_FN void kvd_wht64(float *x)
{
	for (unsigned h = 1; h < KVD_GROUP; h <<= 1)
		for (unsigned i = 0; i < KVD_GROUP; i += h << 1)
			for (unsigned j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];

				x[j] = qb_add(a, b);
				x[j + h] = qb_sub(a, b);
			}
	for (unsigned i = 0; i < KVD_GROUP; i++)
		x[i] = qb_mul(x[i], 0.125f);
}

KVD_FN void kvd_signs(float *x, uint64_t signs)
{
	for (unsigned i = 0; i < KVD_GROUP; i++)
		if (signs >> i & 1u)
			x[i] = -x[i];
}

/* Group g of a vector: R x, and R^-1 x, in place (64 values). */
KVD_FN void kvd_rotate_group(float *x, uint32_t g)
{
	kvd_signs(x, kvd_rot_signs(g));
	kvd_wht64(x);
}

KVD_FN void kvd_unrotate_group(float *x, uint32_t g)
{
	kvd_wht64(x);
	kvd_signs(x, kvd_rot_signs(g));
}

/* kvfmt_rotate / kvfmt_unrotate: the identity for a format that does not
 * rotate. */
KVD_FN void kvd_rotate(uint32_t fmt, float *x, uint32_t head_dim)
{
	if (fmt != KVD_COMPACT)
		return;
	for (uint32_t g = 0; g < head_dim / KVD_GROUP; g++)
		kvd_rotate_group(x + g * KVD_GROUP, g);
}

KVD_FN void kvd_unrotate(uint32_t fmt, float *x, uint32_t head_dim)
{
	if (fmt != KVD_COMPACT)
		return;
	for (uint32_t g = 0; g < head_dim / KVD_GROUP; g++)
		kvd_unrotate_group(x + g * KVD_GROUP, g);
}

/* ---- compact: the E8 code ---- */

/* kvfmt__e8_build, into *t. */
KVD_FN void kvd_e8_build(struct kvd_e8 *t)
{
	unsigned n = 0;

	for (int pass = 0; pass < 2; pass++) {
		for (unsigned c = 0; c < 6561u && n < KVD_E8_ENTRIES; c++) {
			unsigned r = c, threes = 0, fives = 0, twice_sum = 0;
			float a[8], n2 = 0.0f;

			for (int i = 0; i < 8; i++, r /= 3u) {
				a[i] = (float)(r % 3u) + 0.5f;
				threes += r % 3u == 1u;
				fives += r % 3u == 2u;
				twice_sum += 2u * (r % 3u) + 1u;
				n2 = qb_add(n2, qb_mul(a[i], a[i]));
			}
			if (pass == 0 ? n2 > 10.0f : !(threes == 5 && fives == 0))
				continue;
			for (int i = 0; i < 8; i++)
				t->a[n][i] = a[i];
			t->norm2[n] = n2;
			t->odd[n] = (unsigned char)((twice_sum / 2u) & 1u);
			n++;
		}
	}
}

/* kvfmt__e8_code on y[0..8) * inv: the nearest point's 16 bits. */
KVD_FN uint32_t kvd_e8_code(const struct kvd_e8 *t, const float *y, float inv)
{
	float best = INFINITY;
	uint32_t code = 0;

	for (unsigned sh = 0; sh < 2; sh++) {
		float d = sh ? -0.25f : 0.25f, u[8], uu = 0.0f;
		unsigned neg = 0, negbits = 0;

		for (int i = 0; i < 8; i++) {
			float z = qb_sub(qb_mul(y[i], inv), d);

			u[i] = kvd_fabs(z);
			uu = qb_add(uu, qb_mul(u[i], u[i]));
			if (z < 0.0f) {
				neg++;
				negbits |= 1u << i;
			}
		}
		for (unsigned k = 0; k < KVD_E8_ENTRIES; k++) {
			const float *a = t->a[k];
			float dot = 0.0f, least = INFINITY, cost;
			int at = 0;

			for (int i = 0; i < 8; i++) {
				float p = qb_mul(a[i], u[i]);

				dot = qb_add(dot, p);
				if (p < least) {
					least = p;
					at = i;
				}
			}
			cost = qb_sub(qb_add(uu, t->norm2[k]), qb_mul(2.0f, dot));
			if ((neg & 1u) != t->odd[k])
				cost = qb_add(cost, qb_mul(4.0f, least));
			else
				at = -1;
			if (cost < best) {
				unsigned s = at < 0 ? negbits : negbits ^ (1u << at);

				best = cost;
				code = (k | (s & 0x7fu) << 8 | sh << 15) & 0xffffu;
			}
		}
	}
	return code;
}

/* Value i (0..7) of code's point times scale (kvfmt__e8_point). */
KVD_FN float kvd_e8_value(const struct kvd_e8 *t, uint32_t code, float scale, unsigned i)
{
	unsigned k = code & 0xffu, s = code >> 8 & 0x7fu;
	float d = code >> 15 & 1u ? -0.25f : 0.25f, a = t->a[k][i];

	if ((kvd_popcount(s) & 1u) != t->odd[k])
		s |= 0x80u;
	return qb_mul((s >> i & 1u) ? qb_add(-a, d) : qb_add(a, d), scale);
}

/* The sum of squares of a rotated group, in double, in order. */
KVD_FN double kvd_c2_ss(const float *y)
{
	double ss = 0.0;

	for (unsigned i = 0; i < KVD_GROUP; i++)
		ss = kvd_dadd(ss, kvd_dmul((double)y[i], (double)y[i]));
	return ss;
}

/* The first scale's fp16 bits: 0.95 times the group's RMS. */
KVD_FN uint32_t kvd_c2_half(double ss)
{
	return kvd_f32_f16(qb_mul(KVD_E8_SCALE, kvd_d2f(kvd_dsqrt(kvd_ddiv(ss, (double)KVD_GROUP)))));
}

/* 1 / the stored scale, or 0 (a zero, NaN or infinite scale). */
KVD_FN float kvd_c2_inv(uint32_t h)
{
	float scale = kvd_f16_f32(h);

	return scale > 0.0f && kvd_isfinite(scale) ? kvd_fdiv(1.0f, scale) : 0.0f;
}

/* The scale stored: the one that keeps the group's dot product with itself
 * (kvfmt__c2_encode_group's last step), from its 8 codes. */
KVD_FN uint32_t kvd_c2_final_half(const struct kvd_e8 *t, const float *y, const uint16_t *codes,
                                  double ss, uint32_t h)
{
	double py = 0.0;

	for (unsigned b = 0; b < KVD_GROUP / 8; b++)
		for (unsigned i = 0; i < 8; i++)
			py = kvd_dadd(py, kvd_dmul((double)kvd_e8_value(t, codes[b], 1.0f, i),
			                           (double)y[b * 8 + i]));
	if (py > 0.0 && kvd_isfinite(kvd_f16_f32(h)))
		h = kvd_f32_f16(kvd_d2f(kvd_ddiv(ss, py)));
	return h;
}

/* ---- the entry points (one thread, kvfmt.c's order) ---- */

/* kvfmt_encode for bf16, fp8 and compact: x (head_dim values; compact
 * rotates a copy) into out (kvd_head_bytes bytes). */
KVD_FN void kvd_encode(const struct kvd_e8 *t, uint32_t fmt, const float *x, uint32_t head_dim,
                       unsigned char *out)
{
	if (fmt == KVD_BF16) {
		for (uint32_t i = 0; i < head_dim; i++)
			kvd_st16(out + 2 * i, kvd_f32_bf16(x[i]));
	} else if (fmt == KVD_FP8) {
		float scale = kvd_fp8_scale(x, head_dim), inv = kvd_fp8_inv(scale);
		uint32_t sb = kvd_bits(scale);

		for (int i = 0; i < 4; i++)
			out[i] = (unsigned char)(sb >> (8 * i));
		for (uint32_t i = 0; i < head_dim; i++)
			out[4 + i] = (unsigned char)kvd_fp8_byte(x[i], inv);
	} else if (fmt == KVD_COMPACT) {
		for (uint32_t g = 0; g < head_dim / KVD_GROUP; g++) {
			unsigned char *o = out + g * KVD_GROUP_BYTES;
			float y[KVD_GROUP];
			uint16_t codes[KVD_GROUP / 8];
			double ss;
			uint32_t h;
			float inv;

			for (unsigned i = 0; i < KVD_GROUP; i++)
				y[i] = x[g * KVD_GROUP + i];
			kvd_rotate_group(y, g);
			ss = kvd_c2_ss(y);
			h = kvd_c2_half(ss);
			inv = kvd_c2_inv(h);
			for (unsigned b = 0; b < KVD_GROUP / 8; b++) {
				codes[b] = (uint16_t)kvd_e8_code(t, y + 8 * b, inv);
				kvd_st16(o + 2 + 2 * b, codes[b]);
			}
			kvd_st16(o, kvd_c2_final_half(t, y, codes, ss, h));
		}
	}
}

/* Value d of a stored vector, in the rotated basis (kvfmt_decode_rotated's
 * x[d]). */
KVD_FN float kvd_decode_elem(const struct kvd_e8 *t, uint32_t fmt, const unsigned char *in,
                             uint32_t d)
{
	if (fmt == KVD_BF16)
		return kvd_bf16_f32(kvd_ld16(in + 2 * d));
	if (fmt == KVD_FP8) {
		uint32_t sb = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 |
		              (uint32_t)in[3] << 24;

		return qb_mul(kvd_e4m3_f32(in[4 + d]), qb_f32_of(sb));
	}
	if (fmt == KVD_COMPACT) {
		const unsigned char *gp = in + d / KVD_GROUP * KVD_GROUP_BYTES;
		uint32_t r = d % KVD_GROUP;

		return kvd_e8_value(t, kvd_ld16(gp + 2 + 2 * (r / 8)), kvd_f16_f32(kvd_ld16(gp)),
		                    r % 8);
	}
	return 0.0f;
}

/* kvfmt_decode_rotated: the whole vector. */
KVD_FN void kvd_decode_rotated(const struct kvd_e8 *t, uint32_t fmt, const unsigned char *in,
                               uint32_t head_dim, float *x)
{
	for (uint32_t d = 0; d < head_dim; d++)
		x[d] = kvd_decode_elem(t, fmt, in, d);
}

#endif
