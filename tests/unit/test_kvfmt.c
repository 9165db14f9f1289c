/*
 * test_kvfmt.c - KV vector formats: the compact format's size matches the
 * reference (72 B per head and role at head dim 256), exact codes on hand
 * cases, and its error against bf16 measured on seeded Gaussian vectors (the
 * figure docs/adr/0008-compact-kv.md states).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/kvfmt.h"

static void test_sizes(void **state)
{
	(void)state;
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_COMPACT, 256), 72);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_COMPACT, 64), 18);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_BF16, 256), 512);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_COMPACT, 100), 0);
	/* and the model's per-token figure agrees: the 27B's 9,216 B */
	assert_int_equal(16ull * 4 * 2 * mdesc_kv_head_bytes(MDESC_KV_COMPACT, 256),
	                 mdesc_kv_bytes_per_token(mdesc_find("27b"), MDESC_KV_COMPACT));
}

/* Mark [off, off + n) of a page's map, each byte once. */
static void cover(unsigned char *map, uint64_t page, uint64_t off, uint64_t n, const char *what)
{
	if (off + n > page)
		fail_msg("%s at %llu + %llu passes the page of %llu", what, (unsigned long long)off,
		         (unsigned long long)n, (unsigned long long)page);
	for (uint64_t i = off; i < off + n; i++) {
		if (map[i])
			fail_msg("%s at %llu overlaps another vector at byte %llu", what,
			         (unsigned long long)off, (unsigned long long)i);
		map[i] = 1;
	}
}

/* The page layout's end is the plan's page (mdesc_page_bytes) and its
 * regions (every K and V vector, every indexer key) tile the page: no byte
 * twice, none left over. The built-in models and two shapes of our own
 * (several heads, an indexer key that is not a multiple of anything). */
static void test_page_layout(void **state)
{
	struct mdesc shapes[16];
	unsigned n = 0;

	(void)state;
	assert_true(mdesc_nbuiltin + 2 <= sizeof(shapes) / sizeof(shapes[0]));
	for (unsigned i = 0; i < mdesc_nbuiltin; i++)
		shapes[n++] = mdesc_builtin[i];
	shapes[n] = mdesc_builtin[3];
	shapes[n].full_layers = 3;
	shapes[n].kv_heads = 5;
	shapes[n].head_dim = 128;
	shapes[n++].indexer_key_bytes = 24;
	shapes[n] = shapes[n - 1];
	shapes[n].indexer_key_bytes = 0;
	shapes[n++].head_dim = 192;
	for (unsigned i = 0; i < n; i++) {
		const struct mdesc *m = &shapes[i];

		for (int f = MDESC_KV_BF16; f <= MDESC_KV_COMPACT; f++) {
			uint64_t page = mdesc_page_bytes(m, (enum mdesc_kv_format)f);
			uint64_t hb = mdesc_kv_head_bytes((enum mdesc_kv_format)f, m->head_dim);
			unsigned char *map = calloc(page, 1);

			assert_non_null(map);
			assert_int_equal(kvfmt_page_bytes(m, (enum mdesc_kv_format)f), page);
			for (uint32_t l = 0; l < m->full_layers; l++)
				for (uint32_t r = 0; r < 2; r++)
					for (uint32_t kh = 0; kh < m->kv_heads; kh++)
						for (uint32_t s = 0; s < MDESC_PAGE_TOKENS; s++)
							cover(map, page,
							      kvfmt_page_offset(
							          m, (enum mdesc_kv_format)f, l, r,
							          kh, s),
							      hb, "a KV vector");
			if (f == MDESC_KV_COMPACT)
				for (uint32_t l = 0; l < m->full_layers; l++)
					for (uint32_t s = 0; s < MDESC_PAGE_TOKENS; s++)
						cover(map, page,
						      kvfmt_page_indexer_offset(
						          m, (enum mdesc_kv_format)f, l, s),
						      m->indexer_key_bytes, "an indexer key");
			for (uint64_t b = 0; b < page; b++)
				if (!map[b])
					fail_msg("%s %s: byte %llu of the page is in no region",
					         m->name, f == MDESC_KV_BF16 ? "bf16" : "compact",
					         (unsigned long long)b);
			free(map);
		}
	}
}

static void test_hand_cases(void **state)
{
	float x[64], y[64];
	unsigned char buf[18];

	(void)state;
	/* levels exactly: -1.5, -0.5, 0.5, 1.5 of scale 1 */
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i % 4) - 1.5f;
	kvfmt_encode(MDESC_KV_COMPACT, x, 64, buf);
	kvfmt_decode(MDESC_KV_COMPACT, buf, 64, y);
	assert_memory_equal(x, y, sizeof(x));
	assert_int_equal(buf[2], 0xe4); /* codes 0,1,2,3 lowest bits first */
	/* all zero: zero back */
	memset(x, 0, sizeof(x));
	kvfmt_encode(MDESC_KV_COMPACT, x, 64, buf);
	kvfmt_decode(MDESC_KV_COMPACT, buf, 64, y);
	for (int i = 0; i < 64; i++)
		assert_true(y[i] == 0.0f);
	/* bf16 keeps bf16 values exactly */
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i - 32) * 0.25f;
	{
		unsigned char b[128];

		kvfmt_encode(MDESC_KV_BF16, x, 64, b);
		kvfmt_decode(MDESC_KV_BF16, b, 64, y);
		assert_memory_equal(x, y, sizeof(x));
	}
}

static double gauss(uint64_t *s)
{
	double u1, u2;

	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	u1 = ((double)(*s >> 11) + 1.0) / 9007199254740993.0;
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	u2 = (double)(*s >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void test_error_against_bf16(void **state)
{
	uint64_t s = 20261129u;
	double err = 0, ref = 0, cos_num = 0, cos_a = 0, cos_b = 0;
	float x[256], y[256], z[256];
	unsigned char c[72], b[512];

	(void)state;
	for (int v = 0; v < 4000; v++) {
		for (int i = 0; i < 256; i++)
			x[i] = (float)gauss(&s);
		kvfmt_encode(MDESC_KV_BF16, x, 256, b);
		kvfmt_decode(MDESC_KV_BF16, b, 256, z); /* the oracle */
		kvfmt_encode(MDESC_KV_COMPACT, z, 256, c);
		kvfmt_decode(MDESC_KV_COMPACT, c, 256, y);
		for (int i = 0; i < 256; i++) {
			err += (double)(y[i] - z[i]) * (y[i] - z[i]);
			ref += (double)z[i] * z[i];
			cos_num += (double)y[i] * z[i];
			cos_a += (double)y[i] * y[i];
			cos_b += (double)z[i] * z[i];
		}
	}
	printf("# compact vs bf16 on N(0,1) vectors (seed 20261129, 4000 x 256): relative RMS "
	       "error %.4f, cosine %.4f\n",
	       sqrt(err / ref), cos_num / sqrt(cos_a * cos_b));
	/* the figures ADR 0008 states, with a margin */
	assert_true(sqrt(err / ref) < 0.40);
	assert_true(cos_num / sqrt(cos_a * cos_b) > 0.92);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_page_layout),
	    cmocka_unit_test(test_hand_cases),
	    cmocka_unit_test(test_error_against_bf16),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
