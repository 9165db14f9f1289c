/*
 * test_quant.c - ggml's tensor types decoded bit for bit as llama.cpp decodes
 * them (model/quant.h), against llama.cpp's own libggml-base (the prebuilt
 * library of the npm package @node-llama-cpp/linux-x64, pinned in
 * tests/oracle/, installed by tools/install-oracle.sh) on the same bytes:
 * blocks from ggml's quantizer, from ours, and raw random bytes with sane
 * scales; every half; the block sizes. Without the oracle
 * ($IGNIS_ORACLE_LIB_DIR: tools/install-oracle.sh, which make test runs) the
 * comparisons are skipped and the program exits 77, meson's skip.
 */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/quant.h"

#define ROW 1024u /* elements per row tested: four K super-blocks, 32 small ones */

typedef void (*row_fn)(const void *x, float *y, int64_t k);
typedef void (*qrow_fn)(const float *x, void *y, int64_t k);

static struct {
	void *lib;
	size_t (*type_size)(int type);
	int64_t (*blck_size)(int type);
	float (*f16_to_f32)(uint16_t h);
	uint16_t (*f32_to_f16)(float f);
	row_fn f16_row, bf16_row;
	void (*f32_to_bf16_row)(const float *x, uint16_t *y, int64_t n);
} gg;

struct qcase {
	uint32_t id;
	const char *dq, *q; /* ggml's symbols */
	row_fn dequant;
	qrow_fn quant;
};

static struct qcase blocks[] = {
	{QUANT_Q4_0, "dequantize_row_q4_0", "quantize_row_q4_0_ref", NULL, NULL},
	{QUANT_Q8_0, "dequantize_row_q8_0", "quantize_row_q8_0_ref", NULL, NULL},
	{QUANT_Q4_K, "dequantize_row_q4_K", "quantize_row_q4_K_ref", NULL, NULL},
	{QUANT_Q5_K, "dequantize_row_q5_K", "quantize_row_q5_K_ref", NULL, NULL},
	{QUANT_Q6_K, "dequantize_row_q6_K", "quantize_row_q6_K_ref", NULL, NULL},
};
#define N_BLOCKS (sizeof(blocks) / sizeof(blocks[0]))

static void *sym(const char *name)
{
	void *p = dlsym(gg.lib, name);

	if (!p)
		fail_msg("libggml-base has no %s", name);
	return p;
}

static int load_oracle(void **state)
{
	const char *dir = getenv("IGNIS_ORACLE_LIB_DIR");
	char path[4096];

	(void)state;
	if (!dir || !*dir)
		return 0;
	snprintf(path, sizeof(path), "%s/libggml-base.so", dir);
	/* not installed (no file there): skipped, as llama_oracle.h's llo_open */
	if (access(path, R_OK))
		return 0;
	gg.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!gg.lib) {
		print_error("cannot load the oracle %s: %s\n", path, dlerror());
		return -1;
	}
	*(void **)&gg.type_size = sym("ggml_type_size");
	*(void **)&gg.blck_size = sym("ggml_blck_size");
	*(void **)&gg.f16_to_f32 = sym("ggml_fp16_to_fp32");
	*(void **)&gg.f32_to_f16 = sym("ggml_fp32_to_fp16");
	*(void **)&gg.f16_row = sym("ggml_fp16_to_fp32_row");
	*(void **)&gg.bf16_row = sym("ggml_bf16_to_fp32_row");
	*(void **)&gg.f32_to_bf16_row = sym("ggml_fp32_to_bf16_row_ref");
	for (size_t i = 0; i < N_BLOCKS; i++) {
		*(void **)&blocks[i].dequant = sym(blocks[i].dq);
		*(void **)&blocks[i].quant = sym(blocks[i].q);
	}
	return 0;
}

static void need_oracle(void)
{
	if (!gg.lib) {
		print_message("the oracle is not installed (IGNIS_ORACLE_LIB_DIR; "
		              "tools/install-oracle.sh): skipped\n");
		skip();
	}
}

/* xorshift64*: the same numbers on every machine */
static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}
static float unit(void) /* [-1, 1) */
{
	return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Rows of several kinds: uniform, Gaussian-like, with outliers, tiny,
 * constant, zero, one sign, huge. */
static void fill(float *x, uint32_t n, int kind)
{
	for (uint32_t i = 0; i < n; i++) {
		float u = unit();

		switch (kind) {
		case 0:
			x[i] = u;
			break;
		case 1:
			x[i] = (unit() + unit() + unit() + u) * 0.05f;
			break;
		case 2:
			x[i] = (rnd() % 97 == 0) ? u * 40.0f : u * 0.01f;
			break;
		case 3:
			x[i] = u * 1e-6f;
			break;
		case 4:
			x[i] = 0.375f;
			break;
		case 5:
			x[i] = 0.0f;
			break;
		case 6:
			x[i] = fabsf(u) + 0.5f;
			break;
		default:
			x[i] = u * 3.0e3f;
			break;
		}
	}
}
#define KINDS 8

static void same_bits(const float *a, const float *b, uint32_t n, const char *what)
{
	for (uint32_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
			fail_msg("%s: element %u: ours %a, llama.cpp's %a", what, i, (double)a[i],
			         (double)b[i]);
}

static void test_sizes(void **state)
{
	(void)state;
	need_oracle();
	static const uint32_t ids[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q4_0,
	                               QUANT_Q8_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		const struct quant_type *t = quant_type_of(ids[i]);

		assert_non_null(t);
		assert_int_equal(t->block_bytes, gg.type_size((int)ids[i]));
		assert_int_equal(t->block_elems, gg.blck_size((int)ids[i]));
		assert_int_equal(quant_row_bytes(ids[i], 4096),
		                 4096 / gg.blck_size((int)ids[i]) * gg.type_size((int)ids[i]));
	}
	/* types we do not read, and rows that are not whole blocks */
	assert_null(quant_type_of(3));  /* Q4_1 */
	assert_null(quant_type_of(10)); /* Q2_K */
	assert_null(quant_type_of(11)); /* Q3_K */
	assert_int_equal(quant_row_bytes(QUANT_Q4_K, 128), 0);
	assert_int_equal(quant_row_bytes(QUANT_Q8_0, 33), 0);
	assert_int_equal(quant_row_bytes(3, 32), 0);
}

/* Every half, both ways round (float to half on halves' neighbours too). */
static void test_halves(void **state)
{
	(void)state;
	need_oracle();
	for (uint32_t h = 0; h < 65536; h++) {
		float ours = quant_f16_to_f32((uint16_t)h), theirs = gg.f16_to_f32((uint16_t)h);
		float row;
		uint16_t hh = (uint16_t)h;

		if (memcmp(&ours, &theirs, 4) != 0)
			fail_msg("half %04x: ours %a, llama.cpp's %a", h, (double)ours, (double)theirs);
		gg.f16_row(&hh, &row, 1);
		assert_memory_equal(&ours, &row, 4);
		if (isnan(ours))
			continue;
		/* the half itself, and the floats just beside it and halfway */
		uint32_t bits;
		memcpy(&bits, &ours, 4);
		for (int d = -2; d <= 2; d++) {
			uint32_t b2 = bits + (uint32_t)d;
			float f;

			memcpy(&f, &b2, 4);
			if (quant_f32_to_f16(f) != gg.f32_to_f16(f))
				fail_msg("float %a: ours %04x, llama.cpp's %04x", (double)f,
				         quant_f32_to_f16(f), gg.f32_to_f16(f));
		}
	}
	rng_state = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 1000000; i++) {
		uint32_t b = (uint32_t)rnd();
		float f;

		memcpy(&f, &b, 4);
		if (isnan(f))
			continue;
		if (quant_f32_to_f16(f) != gg.f32_to_f16(f))
			fail_msg("float %a: ours %04x, llama.cpp's %04x", (double)f,
			         quant_f32_to_f16(f), gg.f32_to_f16(f));
	}
}

/* BF16: decode every value; our encoding against ggml's reference. */
static void test_bf16(void **state)
{
	(void)state;
	need_oracle();
	for (uint32_t h = 0; h < 65536; h++) {
		uint8_t b[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
		float ours, theirs;
		uint16_t hh = (uint16_t)h;

		quant_dequantize(QUANT_BF16, b, &ours, 1);
		gg.bf16_row(&hh, &theirs, 1);
		assert_memory_equal(&ours, &theirs, 4);
	}
	rng_state = 7;
	for (int i = 0; i < 200000; i++) {
		uint32_t v = (uint32_t)rnd();
		float f;
		uint16_t theirs;
		uint8_t ours[2];

		memcpy(&f, &v, 4);
		if (isnan(f))
			continue;
		gg.f32_to_bf16_row(&f, &theirs, 1);
		quant_quantize(QUANT_BF16, &f, ours, 1);
		if ((uint16_t)(ours[0] | (ours[1] << 8)) != theirs)
			fail_msg("float %a to bf16: ours %04x, llama.cpp's %04x", (double)f,
			         ours[0] | (ours[1] << 8), theirs);
	}
}

/* The same bytes decode to the same bits; `q` holds one row of `id`. */
static void decode_both(const struct qcase *c, const void *q, const char *whose)
{
	float ours[ROW], theirs[ROW];
	char what[96];

	memset(ours, 0xa5, sizeof(ours));
	memset(theirs, 0x5a, sizeof(theirs));
	quant_dequantize(c->id, q, ours, ROW);
	c->dequant(q, theirs, ROW);
	snprintf(what, sizeof(what), "%s, %s blocks", quant_type_of(c->id)->name, whose);
	same_bits(ours, theirs, ROW, what);
}

/* Blocks from ggml's quantizer and from ours decode alike, rows of every
 * kind; ours stay within a step of the input. */
static void test_blocks(void **state)
{
	(void)state;
	need_oracle();
	for (size_t i = 0; i < N_BLOCKS; i++) {
		const struct qcase *c = &blocks[i];
		const struct quant_type *t = quant_type_of(c->id);
		uint64_t bytes = quant_row_bytes(c->id, ROW);
		uint8_t *q = malloc(bytes);

		assert_non_null(q);
		rng_state = 0x1234567ull + i;
		for (int kind = 0; kind < KINDS; kind++) {
			for (int rep = 0; rep < 8; rep++) {
				float x[ROW], y[ROW];

				fill(x, ROW, kind);
				c->quant(x, q, ROW);
				decode_both(c, q, "ggml's");
				quant_quantize(c->id, x, q, ROW);
				decode_both(c, q, "our");
				/* ours: each element within one step of its block's range,
				 * or of what halves can hold (the scales are halves: a
				 * block of values near 1e-6 has scales below them) */
				quant_dequantize(c->id, q, y, ROW);
				for (uint32_t b = 0; b < ROW; b += t->block_elems) {
					float lo = 0.0f, hi = 0.0f;

					for (uint32_t k = 0; k < t->block_elems; k++) {
						lo = fminf(lo, x[b + k]);
						hi = fmaxf(hi, x[b + k]);
					}
					const float step = (hi - lo) / (t->block_elems == 32 ? 7.0f : 3.0f) +
					                   1e-3f * fmaxf(fabsf(lo), fabsf(hi)) + 0x1p-12f;
					for (uint32_t k = 0; k < t->block_elems; k++)
						if (!(fabsf(y[b + k] - x[b + k]) <= step))
							fail_msg("%s, kind %d: element %u is %g, was %g (step %g)",
							         t->name, kind, b + k, (double)y[b + k],
							         (double)x[b + k], (double)step);
				}
			}
		}
		free(q);
	}
}

/* Raw random bytes, with each block's halves set to sane scales: every bit
 * pattern of the quants, scales and mins decodes alike. */
static void test_raw_bytes(void **state)
{
	(void)state;
	need_oracle();
	for (size_t i = 0; i < N_BLOCKS; i++) {
		const struct qcase *c = &blocks[i];
		const struct quant_type *t = quant_type_of(c->id);
		uint64_t bytes = quant_row_bytes(c->id, ROW);
		uint8_t *q = malloc(bytes);

		assert_non_null(q);
		rng_state = 0xabcdefull + i;
		for (int rep = 0; rep < 200; rep++) {
			for (uint64_t k = 0; k < bytes; k++)
				q[k] = (uint8_t)rnd();
			for (uint64_t b = 0; b < bytes; b += t->block_bytes) {
				/* where the halves are: d (and dmin) first, Q6_K's d last */
				size_t at[2] = {0, 2}, n = c->id == QUANT_Q4_K || c->id == QUANT_Q5_K ? 2 : 1;

				if (c->id == QUANT_Q6_K)
					at[0] = 208;
				for (size_t h = 0; h < n; h++) {
					/* normal halves, and subnormal ones (3e-6) */
					const float span = rep % 3 == 0 ? 2.0f : rep % 3 == 1 ? 1e-3f : 3e-6f;
					uint16_t v = quant_f32_to_f16(unit() * span);

					q[b + at[h]] = (uint8_t)v;
					q[b + at[h] + 1] = (uint8_t)(v >> 8);
				}
			}
			decode_both(c, q, "random");
		}
		free(q);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),  cmocka_unit_test(test_halves),
		cmocka_unit_test(test_bf16),   cmocka_unit_test(test_blocks),
		cmocka_unit_test(test_raw_bytes),
	};
	int failed = cmocka_run_group_tests(tests, load_oracle, NULL);

	/* without the oracle the comparisons were skipped: say so to meson */
	return failed ? failed : gg.lib ? 0 : 77;
}
