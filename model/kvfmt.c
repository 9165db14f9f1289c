/* kvfmt.c - KV vector formats (see kvfmt.h). */
#include "kvfmt.h"

#include <math.h>
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

	if (f == MDESC_KV_COMPACT)
		b += (uint64_t)m->full_layers * MDESC_PAGE_TOKENS * m->indexer_key_bytes;
	return b;
}

/* The code of `v` against `inv` = 1 / scale: the nearest of the levels
 * {-1.5, -0.5, 0.5, 1.5}, whose boundaries are -1, 0 and 1. */
static int kvfmt__code(float v, float inv)
{
	float t = v * inv + 2.0f;

	if (v != v)
		return 2; /* NaN stores as the smallest positive level */
	return t < 1.0f ? 0 : t < 2.0f ? 1 : t < 3.0f ? 2 : 3;
}

static void kvfmt__encode_group(const float *x, unsigned char *out)
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

static void kvfmt__decode_group(const unsigned char *in, float *x)
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

void kvfmt_encode(enum mdesc_kv_format f, const float *x, uint32_t head_dim, void *out)
{
	unsigned char *o = out;

	if (f == MDESC_KV_BF16) {
		for (uint32_t i = 0; i < head_dim; i++) {
			uint16_t h = gguf_f32_to_bf16(x[i]);

			memcpy(o + 2 * i, &h, 2);
		}
		return;
	}
	for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++)
		kvfmt__encode_group(x + g * MDESC_KV_GROUP, o + g * MDESC_KV_GROUP_BYTES);
}

void kvfmt_decode(enum mdesc_kv_format f, const void *in, uint32_t head_dim, float *x)
{
	const unsigned char *p = in;

	if (f == MDESC_KV_BF16) {
		for (uint32_t i = 0; i < head_dim; i++) {
			uint16_t h;

			memcpy(&h, p + 2 * i, 2);
			x[i] = gguf_bf16_to_f32(h);
		}
		return;
	}
	for (uint32_t g = 0; g < head_dim / MDESC_KV_GROUP; g++)
		kvfmt__decode_group(p + g * MDESC_KV_GROUP_BYTES, x + g * MDESC_KV_GROUP);
}
