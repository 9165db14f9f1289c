/*
 * test_kvfmt.c - KV vector formats: the compact format's size matches the
 * reference (72 B per head and role at head dim 256), exact codes on hand
 * cases, the rotated basis agrees with plain decoding, and each format's
 * error against bf16 on seeded Gaussian vectors, with and without outlier
 * channels, stays within the figures docs/adr/0046 states (the full
 * measurement is `ignis-bench kvformat`).
 */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
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
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_COMPACT1, 256), 72);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_BF16, 256), 512);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_FP8, 256), 260);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_FP8, 128), 132);
	assert_int_equal(mdesc_kv_head_bytes(MDESC_KV_COMPACT, 100), 0);
	assert_int_equal(mdesc_kv_head_bytes((enum mdesc_kv_format)9, 256), 0);
	/* and the model's per-token figure agrees: the 27B's 9,216 B */
	assert_int_equal(16ull * 4 * 2 * mdesc_kv_head_bytes(MDESC_KV_COMPACT, 256),
	                 mdesc_kv_bytes_per_token(mdesc_find("27b"), MDESC_KV_COMPACT));
	assert_int_equal(mdesc_kv_bytes_per_token(mdesc_find("27b"), MDESC_KV_FP8),
	                 16ull * 4 * 2 * 260);
	/* names both ways */
	for (int f = MDESC_KV_BF16; f <= MDESC_KV_FORMAT_LAST; f++)
		assert_int_equal(mdesc_kv_format_parse(mdesc_kv_format_name((enum mdesc_kv_format)f)),
		                 f);
	assert_int_equal(mdesc_kv_format_parse("fp16"), 0);
	assert_null(mdesc_kv_format_name((enum mdesc_kv_format)0));
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

		for (int f = MDESC_KV_BF16; f <= MDESC_KV_FORMAT_LAST; f++) {
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
			if (mdesc_kv_compact((enum mdesc_kv_format)f))
				for (uint32_t l = 0; l < m->full_layers; l++)
					for (uint32_t s = 0; s < MDESC_PAGE_TOKENS; s++)
						cover(map, page,
						      kvfmt_page_indexer_offset(
						          m, (enum mdesc_kv_format)f, l, s),
						      m->indexer_key_bytes, "an indexer key");
			for (uint64_t b = 0; b < page; b++)
				if (!map[b])
					fail_msg("%s %s: byte %llu of the page is in no region",
					         m->name, mdesc_kv_format_name((enum mdesc_kv_format)f),
					         (unsigned long long)b);
			free(map);
		}
	}
}

static void test_hand_cases(void **state)
{
	float x[64], y[64];
	unsigned char buf[128]; /* the largest format at 64 values: bf16 */

	(void)state;
	/* compact1: levels exactly: -1.5, -0.5, 0.5, 1.5 of scale 1 */
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i % 4) - 1.5f;
	kvfmt_encode(MDESC_KV_COMPACT1, x, 64, buf);
	kvfmt_decode(MDESC_KV_COMPACT1, buf, 64, y);
	assert_memory_equal(x, y, sizeof(x));
	assert_int_equal(buf[2], 0xe4); /* codes 0,1,2,3 lowest bits first */
	/* all zero: zero back, in every format */
	for (int f = MDESC_KV_BF16; f <= MDESC_KV_FORMAT_LAST; f++) {
		memset(x, 0, sizeof(x));
		kvfmt_encode((enum mdesc_kv_format)f, x, 64, buf);
		kvfmt_decode((enum mdesc_kv_format)f, buf, 64, y);
		for (int i = 0; i < 64; i++)
			if (y[i] != 0.0f)
				fail_msg("%s: zero read back as %g at %d",
				         mdesc_kv_format_name((enum mdesc_kv_format)f), y[i], i);
	}
	/* bf16 keeps bf16 values exactly */
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i - 32) * 0.25f;
	{
		unsigned char b[128];

		kvfmt_encode(MDESC_KV_BF16, x, 64, b);
		kvfmt_decode(MDESC_KV_BF16, b, 64, y);
		assert_memory_equal(x, y, sizeof(x));
	}
	/* fp8 keeps e4m3 values exactly when the largest is 448 (scale 1): the
	 * largest normal, the smallest normal 2^-6, a subnormal 2^-9, signs */
	{
		static const float e4m3[] = {448.0f, -448.0f, 1.0f, -0.5f, 0x1p-6f, 0x1p-9f,
		                             -0x1.cp-7f, 240.0f, 1.125f, 0.0f, -3.75f, 18.0f};
		unsigned n = sizeof(e4m3) / sizeof(e4m3[0]);

		memset(x, 0, sizeof(x));
		memcpy(x, e4m3, sizeof(e4m3));
		kvfmt_encode(MDESC_KV_FP8, x, 64, buf);
		kvfmt_decode(MDESC_KV_FP8, buf, 64, y);
		for (unsigned i = 0; i < n; i++)
			if (y[i] != e4m3[i])
				fail_msg("fp8: %g read back as %g", e4m3[i], y[i]);
		assert_int_equal(buf[4], 0x7e);  /* 448: exponent 15, mantissa 6 */
		assert_int_equal(buf[5], 0xfe);  /* its sign */
		assert_int_equal(buf[4 + 5], 1); /* 2^-9: the smallest subnormal */
		/* ties go to even: 1.0625 lies between 1 (mantissa 0) and 1.125 */
		x[2] = 1.0625f;
		x[3] = 1.1875f; /* between 1.125 (1) and 1.25 (2): to 1.25 */
		kvfmt_encode(MDESC_KV_FP8, x, 64, buf);
		kvfmt_decode(MDESC_KV_FP8, buf, 64, y);
		assert_true(y[2] == 1.0f);
		assert_true(y[3] == 1.25f);
	}
	/* a NaN reads back as NaN, never as a plausible value */
	for (int f = MDESC_KV_FP8; f <= MDESC_KV_FORMAT_LAST; f += MDESC_KV_COMPACT - MDESC_KV_FP8) {
		for (int i = 0; i < 64; i++)
			x[i] = (float)i;
		x[7] = NAN;
		kvfmt_encode((enum mdesc_kv_format)f, x, 64, buf);
		kvfmt_decode((enum mdesc_kv_format)f, buf, 64, y);
		assert_true(isnan(y[7]));
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

/* Reading in the rotated basis is plain decoding seen through R: the dot
 * product with a rotated query is the plain one, and unrotating the read
 * gives kvfmt_decode's values. R is orthogonal: rotating and unrotating
 * gives the vector back, its norm kept. */
static void test_rotated_basis(void **state)
{
	uint64_t s = 7;
	float x[256], q[256], rq[256], y[256], ry[256];
	unsigned char c[512];

	(void)state;
	assert_true(kvfmt_rotated(MDESC_KV_COMPACT));
	assert_false(kvfmt_rotated(MDESC_KV_COMPACT1));
	for (int f = MDESC_KV_BF16; f <= MDESC_KV_FORMAT_LAST; f++) {
		enum mdesc_kv_format fm = (enum mdesc_kv_format)f;

		for (int v = 0; v < 50; v++) {
			double plain = 0, rot = 0, n0 = 0, n1 = 0, back = 0;

			for (int i = 0; i < 256; i++) {
				x[i] = (float)gauss(&s);
				q[i] = rq[i] = (float)gauss(&s);
			}
			kvfmt_encode(fm, x, 256, c);
			kvfmt_decode(fm, c, 256, y);
			kvfmt_decode_rotated(fm, c, 256, ry);
			kvfmt_rotate(fm, rq, 256);
			for (int i = 0; i < 256; i++) {
				plain += (double)q[i] * y[i];
				rot += (double)rq[i] * ry[i];
				n0 += (double)q[i] * q[i];
				n1 += (double)rq[i] * rq[i];
			}
			assert_true(fabs(plain - rot) < 1e-4 * sqrt(n0) * 16);
			assert_true(fabs(n0 - n1) < 1e-5 * n0);
			kvfmt_unrotate(fm, rq, 256);
			kvfmt_unrotate(fm, ry, 256);
			for (int i = 0; i < 256; i++) {
				back = fmax(back, fabs((double)rq[i] - q[i]));
				back = fmax(back, fabs((double)ry[i] - y[i]));
			}
			assert_true(back < 1e-5);
			/* a rotating format really rotates: R x is not x */
			if (kvfmt_rotated(fm)) {
				float rx[256];
				double d = 0;

				memcpy(rx, x, sizeof(rx));
				kvfmt_rotate(fm, rx, 256);
				for (int i = 0; i < 256; i++)
					d = fmax(d, fabs((double)rx[i] - x[i]));
				assert_true(d > 0.1);
			}
		}
	}
}

/* The relative RMS error and cosine of format `f` against bf16 (the oracle:
 * the vector as bf16 stores it) over 2,000 seeded vectors of 256, N(0,1),
 * with `outliers` channels (the same four in every vector, as real keys
 * have them) `gain` times the rest when outliers is set. */
static void measure(enum mdesc_kv_format f, bool outliers, double gain, double *rel, double *cosine)
{
	static const int chan[] = {3, 77, 130, 201};
	uint64_t s = 20261129u;
	double err = 0, ref = 0, cos_num = 0, cos_a = 0, cos_b = 0;
	float x[256], y[256], z[256];
	unsigned char c[512], b[512];

	for (int v = 0; v < 2000; v++) {
		for (int i = 0; i < 256; i++)
			x[i] = (float)gauss(&s);
		if (outliers)
			for (int i = 0; i < 4; i++)
				x[chan[i]] *= (float)gain;
		kvfmt_encode(MDESC_KV_BF16, x, 256, b);
		kvfmt_decode(MDESC_KV_BF16, b, 256, z);
		kvfmt_encode(f, z, 256, c);
		kvfmt_decode(f, c, 256, y);
		for (int i = 0; i < 256; i++) {
			err += (double)(y[i] - z[i]) * (y[i] - z[i]);
			ref += (double)z[i] * z[i];
			cos_num += (double)y[i] * z[i];
			cos_a += (double)y[i] * y[i];
			cos_b += (double)z[i] * z[i];
		}
	}
	*rel = sqrt(err / ref);
	*cosine = cos_num / sqrt(cos_a * cos_b);
}

static void test_error_against_bf16(void **state)
{
	/* the most relative RMS error each format may show, Gaussian and with
	 * outlier channels 20x the rest (ADR 0046's figures, with a margin) */
	static const struct {
		enum mdesc_kv_format f;
		double gauss, outl;
	} lim[] = {
	    {MDESC_KV_FP8, 0.04, 0.04},
	    {MDESC_KV_COMPACT, 0.32, 0.32},
	    {MDESC_KV_COMPACT1, 0.35, 0.90}, /* ruined by outliers: why it went */
	};

	(void)state;
	for (unsigned i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
		double rg, cg, ro, co;

		measure(lim[i].f, false, 0, &rg, &cg);
		measure(lim[i].f, true, 20.0, &ro, &co);
		printf("# %-8s vs bf16, 2000 x 256 (seed 20261129): N(0,1) relative RMS %.4f cosine "
		       "%.4f; 4 channels 20x: %.4f, %.4f\n",
		       mdesc_kv_format_name(lim[i].f), rg, cg, ro, co);
		assert_true(rg < lim[i].gauss);
		assert_true(ro < lim[i].outl);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_page_layout),
	    cmocka_unit_test(test_hand_cases),
	    cmocka_unit_test(test_rotated_basis),
	    cmocka_unit_test(test_error_against_bf16),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
