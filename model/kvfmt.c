/* kvfmt.c - KV vector formats (see kvfmt.h). */
#include "kvfmt.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "gguf.h"

uint64_t kvfmt_page_offset(const struct mdesc *m, enum mdesc_kv_format f, uint32_t full_index,
                           uint32_t role, uint32_t kh, uint32_t slot)
{
	uint64_t i = ((uint64_t)full_index * 2u + role) * m->kv_heads + kh;

	return (i * MDESC_PAGE_TOKENS + slot) * mdesc_kv_head_bytes(f, m->head_dim);
}

uint64_t kvfmt_page_kv_bytes(const struct mdesc *m, enum mdesc_kv_format f)
{
	return (uint64_t)m->full_layers * 2u * m->kv_heads * MDESC_PAGE_TOKENS *
	       mdesc_kv_head_bytes(f, m->head_dim);
}

uint64_t kvfmt_page_indexer_offset(const struct mdesc *m, enum mdesc_kv_format f,
                                   uint32_t full_index, uint32_t slot)
{
	return kvfmt_page_kv_bytes(m, f) +
	       ((uint64_t)full_index * MDESC_PAGE_TOKENS + slot) * m->indexer_key_bytes;
}

uint64_t kvfmt_page_bytes(const struct mdesc *m, enum mdesc_kv_format f)
{
	uint64_t b = kvfmt_page_kv_bytes(m, f);

	if (mdesc_kv_compact(f))
		b += (uint64_t)m->full_layers * MDESC_PAGE_TOKENS * m->indexer_key_bytes;
	return b;
}

/* ---- compact1: the first compact code (docs/adr/0008) ------------------- */

/* The code of `v` against `inv` = 1 / scale: the nearest of the levels
 * {-1.5, -0.5, 0.5, 1.5}, whose boundaries are -1, 0 and 1. */
static int kvfmt__code(float v, float inv)
{
	float t = v * inv + 2.0f;

	if (v != v)
		return 2; /* NaN stores as the smallest positive level */
	return t < 1.0f ? 0 : t < 2.0f ? 1 : t < 3.0f ? 2 : 3;
}

static void kvfmt__c1_encode_group(const float *x, unsigned char *out)
{
	/* Candidate scales, as multiples of the group's RMS, and max|x| / 1.5:
	 * the one with the least squared error wins (a Gaussian group's best
	 * 4-level step is about its RMS). Ties go to the earlier candidate. */
	static const float mult[] = {0.8f, 0.9f, 1.0f, 1.1f, 1.25f};
	float amax = 0.0f, best_err = INFINITY;
	double ss = 0.0;
	uint16_t best = 0;

	for (unsigned i = 0; i < MDESC_KV_GROUP; i++) {
		if (fabsf(x[i]) > amax)
			amax = fabsf(x[i]);
		ss += (double)x[i] * x[i];
	}
	for (unsigned k = 0; k <= sizeof(mult) / sizeof(mult[0]); k++) {
		float want = k < sizeof(mult) / sizeof(mult[0])
		                 ? mult[k] * (float)sqrt(ss / MDESC_KV_GROUP)
		                 : amax / 1.5f;
		/* the stored (fp16) scale is the one decoding uses: code against it */
		uint16_t h = gguf_f32_to_f16(want);
		float scale = gguf_f16_to_f32(h), inv = scale > 0.0f ? 1.0f / scale : 0.0f,
		      err = 0.0f;

		for (unsigned i = 0; i < MDESC_KV_GROUP; i++) {
			float d = ((float)kvfmt__code(x[i], inv) - 1.5f) * scale - x[i];

			err += d * d;
		}
		if (err < best_err) {
			best_err = err;
			best = h;
		}
	}
	memcpy(out, &best, 2);
	memset(out + 2, 0, MDESC_KV_GROUP / 4);
	{
		float scale = gguf_f16_to_f32(best), inv = scale > 0.0f ? 1.0f / scale : 0.0f;

		for (unsigned i = 0; i < MDESC_KV_GROUP; i++)
			out[2 + i / 4] |= (unsigned char)(kvfmt__code(x[i], inv) << (2 * (i % 4)));
	}
}

static void kvfmt__c1_decode_group(const unsigned char *in, float *x)
{
	uint16_t h;
	float scale;

	memcpy(&h, in, 2);
	scale = gguf_f16_to_f32(h);
	for (unsigned i = 0; i < MDESC_KV_GROUP; i++) {
		int c = (in[2 + i / 4] >> (2 * (i % 4))) & 3;

		x[i] = ((float)c - 1.5f) * scale;
	}
}

/* ---- fp8: e4m3 (no infinities; 448 the largest) and a scale ------------ */

#define KVFMT_E4M3_MAX 448.0f

/* |v| (finite, at most about 448) to e4m3's magnitude bits, the nearest
 * value with ties to even; the sign is the caller's. */
static unsigned kvfmt__e4m3_mag(float v)
{
	uint32_t u;

	if (!(v < KVFMT_E4M3_MAX))
		return 0x7e; /* 448; NaN too (a scale of NaN keeps it NaN) */
	if (v < 0x1p-6f) /* subnormal: m x 2^-9; 8 rounds up to 2^-6, 0x08 */
		return (unsigned)rintf(v * 512.0f);
	memcpy(&u, &v, 4);
	u += 0x7ffffu + ((u >> 20) & 1u); /* to nearest of 3 mantissa bits, ties even */
	{
		unsigned e = (u >> 23) - 127u + 7u, m = (u >> 20) & 7u;

		if (e > 15u || (e == 15u && m == 7u))
			return 0x7e;
		return e << 3 | m;
	}
}

static float kvfmt__e4m3_f32(unsigned char b)
{
	unsigned e = (b >> 3) & 15u, m = b & 7u;
	float v;

	if (e == 0) {
		v = (float)m * 0x1p-9f;
	} else {
		uint32_t u = (e - 7u + 127u) << 23 | m << 20;

		memcpy(&v, &u, 4);
	}
	return b & 0x80 ? -v : v;
}

static void kvfmt__fp8_encode(const float *x, uint32_t n, unsigned char *out)
{
	float amax = 0.0f, scale, inv;

	for (uint32_t i = 0; i < n; i++)
		if (!(fabsf(x[i]) <= amax) && amax == amax)
			amax = fabsf(x[i]); /* a NaN stays: the vector reads back as NaN */
	scale = amax / KVFMT_E4M3_MAX;
	inv = scale > 0.0f ? 1.0f / scale : 0.0f;
	memcpy(out, &scale, 4);
	for (uint32_t i = 0; i < n; i++) {
		float v = x[i] * inv;

		out[4 + i] = (unsigned char)(kvfmt__e4m3_mag(fabsf(v)) | (signbit(v) ? 0x80u : 0u));
	}
}

static void kvfmt__fp8_decode(const unsigned char *in, uint32_t n, float *x)
{
	float scale;

	memcpy(&scale, in, 4);
	for (uint32_t i = 0; i < n; i++)
		x[i] = kvfmt__e4m3_f32(in[4 + i]) * scale;
}

/* ---- compact: a rotation, then an E8 lattice code (docs/adr/0046) ------ */

/*
 * Each group of 64 values is rotated by R = H D / 8 (H the 64-point
 * Walsh-Hadamard matrix, D a diagonal of signs drawn from KVFMT_ROT_SEED and
 * the group's index), which spreads a channel many times larger than the
 * rest over all 64 values, and makes them close to Gaussian. The rotated
 * group, divided by its scale, is coded 8 values at a time, 16 bits each,
 * as the nearest point of
 *
 *     { s * a + d : a in A, s in {-1,1}^8 of the parity a asks, d = +-1/4 }
 *
 * where A is 256 vectors of half-integers (entries 1/2, 3/2, 5/2): the 227
 * with squared norm at most 10 and, to make 256, the first 29 of squared
 * norm 12 with five 3/2's (counting in base 3). With the parity, s * a is a
 * point of E8's half-integer coset; the +-1/4 shift (QuIP#'s E8P) spends
 * the 16th bit. Mean squared error at 2 bits a value on N(0,1): 0.091,
 * against 0.117 for the best 4-level scalar code (Lloyd-Max). The scale
 * stored is then the one that keeps a vector's dot product with itself
 * (below): 0.096, unbiased.
 *
 * The 16 bits: 0-7 the index in A, 8-14 the signs of values 0-6 (set:
 * negative), 15 the shift (set: -1/4). Value 7's sign is the one that makes
 * the number of negative signs even when the entries of a sum to an even
 * number, odd when odd. A group's 18 bytes: its fp16 scale, then its eight
 * codes, little-endian.
 *
 * The seed is part of the format: another one would be another format
 * number, so a sequence image's format names its rotation.
 */
#define KVFMT_ROT_SEED     0x9e3779b97f4a7c15ull
#define KVFMT_E8_SCALE     0.95f /* the step against the group's RMS; least error on N(0,1) */
#define KVFMT_E8_ENTRIES   256u

static struct {
	float a[KVFMT_E8_ENTRIES][8]; /* the entries of A */
	float norm2[KVFMT_E8_ENTRIES];
	unsigned char odd[KVFMT_E8_ENTRIES]; /* its entries sum to an odd number */
} kvfmt__e8;
static pthread_once_t kvfmt__e8_once = PTHREAD_ONCE_INIT;

static void kvfmt__e8_build(void)
{
	unsigned n = 0;

	/* First every vector of squared norm <= 10, then those of 12 with five
	 * 3/2's and three 1/2's, in base-3 counting order (digit i: entry i is
	 * 1/2, 3/2 or 5/2). */
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned c = 0; c < 6561u && n < KVFMT_E8_ENTRIES; c++) {
			unsigned t = c, threes = 0, fives = 0, twice_sum = 0;
			float a[8], n2 = 0.0f;

			for (int i = 0; i < 8; i++, t /= 3u) {
				a[i] = (float)(t % 3u) + 0.5f;
				threes += t % 3u == 1u;
				fives += t % 3u == 2u;
				twice_sum += 2u * (t % 3u) + 1u;
				n2 += a[i] * a[i];
			}
			if (pass == 0 ? n2 > 10.0f : !(threes == 5 && fives == 0))
				continue;
			memcpy(kvfmt__e8.a[n], a, sizeof a);
			kvfmt__e8.norm2[n] = n2;
			kvfmt__e8.odd[n] = (unsigned char)((twice_sum / 2u) & 1u);
			n++;
		}
	}
}

/* The 64 signs of D for group `g` of a head, one bit each (set: -1). */
static uint64_t kvfmt__rot_signs(uint32_t g)
{
	uint64_t z = KVFMT_ROT_SEED + (uint64_t)(g + 1u) * 0x9e3779b97f4a7c15ull;

	/* splitmix64's finalizer: fixed bits for every group, no state */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* x = H x / 8, in place (H symmetric, H H = 64 I: its own inverse then). */
static void kvfmt__wht64(float *x)
{
	for (unsigned h = 1; h < MDESC_KV_GROUP; h <<= 1)
		for (unsigned i = 0; i < MDESC_KV_GROUP; i += h << 1)
			for (unsigned j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];

				x[j] = a + b;
				x[j + h] = a - b;
			}
	for (unsigned i = 0; i < MDESC_KV_GROUP; i++)
		x[i] *= 0.125f;
}

static void kvfmt__signs(float *x, uint64_t signs)
{
	for (unsigned i = 0; i < MDESC_KV_GROUP; i++)
		if (signs >> i & 1u)
			x[i] = -x[i];
}

/* The nearest point's 16 bits for `y` (8 values, divided by the scale). */
static uint16_t kvfmt__e8_code(const float *y)
{
	float best = INFINITY;
	uint16_t code = 0;

	for (unsigned sh = 0; sh < 2; sh++) {
		float d = sh ? -0.25f : 0.25f, z[8], u[8], uu = 0.0f;
		unsigned neg = 0, negbits = 0;

		for (int i = 0; i < 8; i++) {
			z[i] = y[i] - d;
			u[i] = fabsf(z[i]);
			uu += u[i] * u[i];
			if (z[i] < 0.0f) {
				neg++;
				negbits |= 1u << i;
			}
		}
		for (unsigned k = 0; k < KVFMT_E8_ENTRIES; k++) {
			const float *a = kvfmt__e8.a[k];
			float dot = 0.0f, least = INFINITY, cost;
			int at = 0;

			for (int i = 0; i < 8; i++) {
				float p = a[i] * u[i];

				dot += p;
				if (p < least) {
					least = p;
					at = i;
				}
			}
			/* |z - s a|^2 with s the signs of z; when their parity is
			 * not a's, the cheapest flip costs 4 a_i |z_i|. */
			cost = uu + kvfmt__e8.norm2[k] - 2.0f * dot;
			if ((neg & 1u) != kvfmt__e8.odd[k])
				cost += 4.0f * least;
			else
				at = -1;
			if (cost < best) {
				unsigned s = at < 0 ? negbits : negbits ^ (1u << at);

				best = cost;
				code = (uint16_t)(k | (s & 0x7fu) << 8 | sh << 15);
			}
		}
	}
	return code;
}

static void kvfmt__e8_point(uint16_t code, float scale, float *y)
{
	const float *a = kvfmt__e8.a[code & 0xffu];
	unsigned s = code >> 8 & 0x7fu;
	float d = code >> 15 ? -0.25f : 0.25f;
	unsigned neg = (unsigned)__builtin_popcount(s);

	/* value 7's sign completes the parity the entry asks for */
	if ((neg & 1u) != kvfmt__e8.odd[code & 0xffu])
		s |= 0x80u;
	for (int i = 0; i < 8; i++)
		y[i] = ((s >> i & 1u) ? -a[i] + d : a[i] + d) * scale;
}

static void kvfmt__c2_encode_group(const float *x, uint32_t g, unsigned char *out)
{
	float y[MDESC_KV_GROUP], scale, inv;
	double ss = 0.0;
	uint16_t h;

	memcpy(y, x, sizeof y);
	kvfmt__signs(y, kvfmt__rot_signs(g));
	kvfmt__wht64(y);
	for (unsigned i = 0; i < MDESC_KV_GROUP; i++)
		ss += (double)y[i] * y[i];
	/* coded against the stored (fp16) scale, the one decoding uses; a
	 * group with a NaN or an infinity stores a NaN scale and reads as NaN */
	h = gguf_f32_to_f16(KVFMT_E8_SCALE * (float)sqrt(ss / MDESC_KV_GROUP));
	scale = gguf_f16_to_f32(h);
	inv = scale > 0.0f && isfinite(scale) ? 1.0f / scale : 0.0f;
	{
		double py = 0.0;

		for (unsigned b = 0; b < MDESC_KV_GROUP / 8; b++) {
			float v[8], pt[8];
			uint16_t c;

			for (int i = 0; i < 8; i++)
				v[i] = y[b * 8 + i] * inv;
			c = kvfmt__e8_code(v);
			memcpy(out + 2 + 2 * b, &c, 2);
			kvfmt__e8_point(c, 1.0f, pt);
			for (int i = 0; i < 8; i++)
				py += (double)pt[i] * y[i + b * 8];
		}
		/* The nearest points shrink a vector (its error is mostly
		 * orthogonal to what is kept): x' . x = (1 - D) |x|^2. Attention
		 * adds up dot products, and coded keys beside exact ones (the
		 * window) would lose weight by that factor in their logits. The
		 * scale stored is the one that makes x' . x = |x|^2. */
		if (py > 0.0 && isfinite(scale))
			h = gguf_f32_to_f16((float)(ss / py));
	}
	memcpy(out, &h, 2);
}

/* The group read back in the rotated basis (R x, not x). */
static void kvfmt__c2_decode_group(const unsigned char *in, float *y)
{
	uint16_t h;
	float scale;

	memcpy(&h, in, 2);
	scale = gguf_f16_to_f32(h);
	for (unsigned b = 0; b < MDESC_KV_GROUP / 8; b++) {
		uint16_t c;

		memcpy(&c, in + 2 + 2 * b, 2);
		kvfmt__e8_point(c, scale, y + b * 8);
	}
}

/* ---- the entry points -------------------------------------------------- */

bool kvfmt_rotated(enum mdesc_kv_format f)
{
	return f == MDESC_KV_COMPACT;
}

void kvfmt_rotate(enum mdesc_kv_format f, float *x, uint32_t head_dim)
{
	if (!kvfmt_rotated(f))
		return;
	for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++) {
		kvfmt__signs(x + g * MDESC_KV_GROUP, kvfmt__rot_signs(g));
		kvfmt__wht64(x + g * MDESC_KV_GROUP);
	}
}

void kvfmt_unrotate(enum mdesc_kv_format f, float *x, uint32_t head_dim)
{
	if (!kvfmt_rotated(f))
		return;
	for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++) {
		kvfmt__wht64(x + g * MDESC_KV_GROUP);
		kvfmt__signs(x + g * MDESC_KV_GROUP, kvfmt__rot_signs(g));
	}
}

void kvfmt_encode(enum mdesc_kv_format f, const float *x, uint32_t head_dim, void *out)
{
	unsigned char *o = out;

	switch (f) {
	case MDESC_KV_BF16:
		for (uint32_t i = 0; i < head_dim; i++) {
			uint16_t h = gguf_f32_to_bf16(x[i]);

			memcpy(o + 2 * i, &h, 2);
		}
		return;
	case MDESC_KV_FP8:
		kvfmt__fp8_encode(x, head_dim, o);
		return;
	case MDESC_KV_COMPACT1:
		for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++)
			kvfmt__c1_encode_group(x + g * MDESC_KV_GROUP, o + g * MDESC_KV_GROUP_BYTES);
		return;
	case MDESC_KV_COMPACT:
		pthread_once(&kvfmt__e8_once, kvfmt__e8_build);
		for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++)
			kvfmt__c2_encode_group(x + g * MDESC_KV_GROUP, g, o + g * MDESC_KV_GROUP_BYTES);
		return;
	}
}

void kvfmt_decode_rotated(enum mdesc_kv_format f, const void *in, uint32_t head_dim, float *x)
{
	const unsigned char *p = in;

	switch (f) {
	case MDESC_KV_BF16:
		for (uint32_t i = 0; i < head_dim; i++) {
			uint16_t h;

			memcpy(&h, p + 2 * i, 2);
			x[i] = gguf_bf16_to_f32(h);
		}
		return;
	case MDESC_KV_FP8:
		kvfmt__fp8_decode(p, head_dim, x);
		return;
	case MDESC_KV_COMPACT1:
		for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++)
			kvfmt__c1_decode_group(p + g * MDESC_KV_GROUP_BYTES, x + g * MDESC_KV_GROUP);
		return;
	case MDESC_KV_COMPACT:
		pthread_once(&kvfmt__e8_once, kvfmt__e8_build);
		for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++)
			kvfmt__c2_decode_group(p + g * MDESC_KV_GROUP_BYTES, x + g * MDESC_KV_GROUP);
		return;
	}
}

void kvfmt_decode(enum mdesc_kv_format f, const void *in, uint32_t head_dim, float *x)
{
	kvfmt_decode_rotated(f, in, head_dim, x);
	kvfmt_unrotate(f, x, head_dim);
}
