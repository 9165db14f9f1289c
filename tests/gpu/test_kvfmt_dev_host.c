/*
 * test_kvfmt_dev_host.c - kernels/kvfmt_dev.h compiled for the host: the
 * very source the cuda backend's attention kernels encode and decode KV
 * vectors with, checked bit for bit against model/kvfmt.c (the formats'
 * definition) where no device is needed (suite 'unit': every machine).
 *
 * For each served format (bf16, fp8, compact) and head dim 64, 128, 256,
 * over the kinds of vectors in `kinds` (random, zeros, signed zeros, huge,
 * subnormal, one outlier channel, rounding ties of bf16, of e4m3 and of the
 * E8 search, infinities and NaNs, random bit patterns):
 *
 *   1. kvd_encode's bytes == kvfmt_encode's bytes;
 *   2. kvd_decode_rotated (and kvd_decode_elem value by value) ==
 *      kvfmt_decode_rotated, as bits, on those bytes and on random bytes;
 *   3. kvd_rotate / kvd_unrotate == kvfmt_rotate / kvfmt_unrotate, as bits.
 *
 * And the conversions it restates from model/gguf.c: every half through
 * kvd_f16_f32, and random and edge floats through kvd_f32_f16 and
 * kvd_f32_bf16; the format numbers and head bytes against common/model.h.
 *
 * Since the device runs the same functions with the same named operations
 * (quant_blocks.h's convention: _rn intrinsics there, plain C here under
 * -ffp-contract=off), this pins what the device's bytes must be; the device
 * test of kern_attn_prep compares the device's pages with kvfmt_encode's.
 *
 * Inputs are pseudo-random from a printed seed (IGNIS_TEST_SEED overrides).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kvfmt_dev.h"
#include "model/gguf.h"
#include "model/kvfmt.h"

#define DEFAULT_SEED UINT64_C(20260417)
#define MAX_HD       256u
#define REPS         24

_Static_assert(KVD_BF16 == MDESC_KV_BF16 && KVD_FP8 == MDESC_KV_FP8 &&
                   KVD_COMPACT == MDESC_KV_COMPACT && KVD_COMPACT1 == MDESC_KV_COMPACT1,
               "kvfmt_dev.h's format numbers are common/model.h's");
_Static_assert(KVD_GROUP == MDESC_KV_GROUP && KVD_GROUP_BYTES == MDESC_KV_GROUP_BYTES &&
                   KVD_FP8_SCALE_BYTES == MDESC_KV_FP8_SCALE_BYTES &&
                   KVD_PAGE_TOKENS == MDESC_PAGE_TOKENS,
               "kvfmt_dev.h's shapes are common/model.h's");

static const uint32_t fmts[] = {KVD_BF16, KVD_FP8, KVD_COMPACT};
static const uint32_t dims[] = {64, 128, 256};

/* splitmix64: small, seedable, the same sequence everywhere. */
static uint64_t next_u64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float next_unit(uint64_t *s)
{
	return (float)((double)(next_u64(s) >> 11) * 0x1.0p-52 - 1.0);
}

static float f32_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* About N(0, 1): the sum of four uniforms, scaled. */
static float next_gauss(uint64_t *s)
{
	return (next_unit(s) + next_unit(s) + next_unit(s) + next_unit(s)) * 0.866f;
}

/* ---- the kinds of vectors ---- */

static void kind_gauss(float *x, uint32_t n, uint64_t *s)
{
	float mag = ldexpf(1.0f, (int)(next_u64(s) % 20) - 10);

	for (uint32_t i = 0; i < n; i++)
		x[i] = next_gauss(s) * mag;
}

static void kind_zeros(float *x, uint32_t n, uint64_t *s)
{
	(void)s;
	for (uint32_t i = 0; i < n; i++)
		x[i] = 0.0f;
}

static void kind_signed_zeros(float *x, uint32_t n, uint64_t *s)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = next_u64(s) & 1u ? -0.0f : 0.0f;
}

static void kind_huge(float *x, uint32_t n, uint64_t *s)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = next_unit(s) * 3.0e38f;
}

static void kind_tiny(float *x, uint32_t n, uint64_t *s)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = next_unit(s) * 1.0e-39f; /* subnormal */
}

static void kind_outlier(float *x, uint32_t n, uint64_t *s)
{
	kind_gauss(x, n, s);
	x[next_u64(s) % n] *= 1000.0f;
}

/* Low 16 bits exactly half a bf16 ulp: bf16's ties. */
static void kind_bf16_ties(float *x, uint32_t n, uint64_t *s)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t u = bits_of(next_gauss(s)) & 0xffff0000u;

		x[i] = f32_of(u | 0x8000u);
	}
}

/* A vector whose scale is 1 (max 448) and whose values lie halfway between
 * neighbouring e4m3 values, subnormals included: e4m3's ties. */
static void kind_e4m3_ties(float *x, uint32_t n, uint64_t *s)
{
	for (uint32_t i = 0; i < n; i++) {
		unsigned b = (unsigned)(next_u64(s) % 0x7du); /* 0 .. 0x7c: b + 1 <= 0x7d */
		float lo = kvd_e4m3_f32(b), hi = kvd_e4m3_f32(b + 1u);

		x[i] = (lo + hi) * 0.5f * (next_u64(s) & 1u ? -1.0f : 1.0f);
	}
	x[next_u64(s) % n] = 448.0f;
}

/* Small multiples of 1/4 and 1/2: points on the E8 search's boundaries, so
 * that costs tie and the first of equals must win. */
static void kind_e8_ties(float *x, uint32_t n, uint64_t *s)
{
	static const float v[] = {-2.0f, -1.0f, -0.75f, -0.5f, -0.25f, 0.0f,
	                          0.25f, 0.5f,  0.75f,  1.0f,  1.5f,   2.0f};

	for (uint32_t i = 0; i < n; i++)
		x[i] = v[next_u64(s) % (sizeof(v) / sizeof(v[0]))];
}

static void kind_nonfinite(float *x, uint32_t n, uint64_t *s)
{
	kind_gauss(x, n, s);
	x[next_u64(s) % n] = next_u64(s) & 1u ? INFINITY : -INFINITY;
	if (next_u64(s) & 1u)
		x[next_u64(s) % n] = f32_of(0x7fc00000u | (uint32_t)(next_u64(s) & 0x3fffffu));
}

static void kind_bits(float *x, uint32_t n, uint64_t *s)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = f32_of((uint32_t)next_u64(s));
}

static const struct kind {
	const char *name;
	void (*fill)(float *x, uint32_t n, uint64_t *s);
} kinds[] = {
    {"gauss", kind_gauss},         {"zeros", kind_zeros},         {"signed zeros", kind_signed_zeros},
    {"huge", kind_huge},           {"subnormal", kind_tiny},      {"outlier", kind_outlier},
    {"bf16 ties", kind_bf16_ties}, {"e4m3 ties", kind_e4m3_ties}, {"e8 ties", kind_e8_ties},
    {"inf and nan", kind_nonfinite}, {"random bits", kind_bits},
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

/* ---- the checks ---- */

static int same_floats(const float *a, const float *b, uint32_t n, uint32_t *at)
{
	for (uint32_t i = 0; i < n; i++)
		if (bits_of(a[i]) != bits_of(b[i])) {
			*at = i;
			return 0;
		}
	return 1;
}

/* Decode `bytes` both ways (whole and value by value); 0 when equal. */
static int check_decode(const struct kvd_e8 *t, uint32_t fmt, uint32_t hd,
                        const unsigned char *bytes, const char *what)
{
	float want[MAX_HD], got[MAX_HD];
	uint32_t at = 0;

	kvfmt_decode_rotated((enum mdesc_kv_format)fmt, bytes, hd, want);
	kvd_decode_rotated(t, fmt, bytes, hd, got);
	if (!same_floats(want, got, hd, &at)) {
		printf("FAIL decode %s fmt %u hd %u: value %u %08x != kvfmt's %08x\n", what, fmt,
		       hd, at, bits_of(got[at]), bits_of(want[at]));
		return 1;
	}
	for (uint32_t d = 0; d < hd; d++)
		got[d] = kvd_decode_elem(t, fmt, bytes, d);
	if (!same_floats(want, got, hd, &at)) {
		printf("FAIL decode_elem %s fmt %u hd %u: value %u\n", what, fmt, hd, at);
		return 1;
	}
	return 0;
}

static int check_formats(const struct kvd_e8 *t, uint64_t *s)
{
	int failed = 0;
	unsigned long vectors = 0;

	for (size_t fi = 0; fi < sizeof(fmts) / sizeof(fmts[0]); fi++)
		for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
			for (size_t ki = 0; ki < N_KINDS; ki++)
				for (int r = 0; r < REPS; r++) {
					uint32_t fmt = fmts[fi], hd = dims[di], at = 0;
					enum mdesc_kv_format mf = (enum mdesc_kv_format)fmt;
					uint64_t hb = kvd_head_bytes(fmt, hd);
					unsigned char want[MAX_HD * 2], got[MAX_HD * 2];
					float x[MAX_HD], a[MAX_HD], b[MAX_HD];

					if (hb != mdesc_kv_head_bytes(mf, hd) || hb > sizeof(want)) {
						printf("FAIL head bytes fmt %u hd %u: %" PRIu64 "\n",
						       fmt, hd, hb);
						return 1;
					}
					kinds[ki].fill(x, hd, s);
					memset(want, 0xa5, sizeof(want));
					memset(got, 0xa5, sizeof(got));
					kvfmt_encode(mf, x, hd, want);
					kvd_encode(t, fmt, x, hd, got);
					vectors++;
					if (memcmp(want, got, sizeof(want)) != 0) {
						uint64_t i = 0;

						while (want[i] == got[i])
							i++;
						printf("FAIL encode %s fmt %u hd %u rep %d: byte %" PRIu64
						       " %02x != kvfmt's %02x\n",
						       kinds[ki].name, fmt, hd, r, i, got[i], want[i]);
						failed = 1;
						continue;
					}
					failed |= check_decode(t, fmt, hd, want, kinds[ki].name);

					/* random bytes: every scale and code pattern */
					for (uint64_t i = 0; i < hb; i++)
						want[i] = (unsigned char)next_u64(s);
					failed |= check_decode(t, fmt, hd, want, "random bytes");

					memcpy(a, x, sizeof(float) * hd);
					memcpy(b, x, sizeof(float) * hd);
					kvfmt_rotate(mf, a, hd);
					kvd_rotate(fmt, b, hd);
					if (!same_floats(a, b, hd, &at)) {
						printf("FAIL rotate %s fmt %u hd %u: value %u\n",
						       kinds[ki].name, fmt, hd, at);
						failed = 1;
					}
					kvfmt_unrotate(mf, a, hd);
					kvd_unrotate(fmt, b, hd);
					if (!same_floats(a, b, hd, &at)) {
						printf("FAIL unrotate %s fmt %u hd %u: value %u\n",
						       kinds[ki].name, fmt, hd, at);
						failed = 1;
					}
				}
	printf("%s: %lu vectors encoded, decoded and rotated as kvfmt.c does\n",
	       failed ? "FAIL" : "ok", vectors);
	return failed;
}

static int check_one_conversion(float f)
{
	if (kvd_f32_f16(f) != gguf_f32_to_f16(f)) {
		printf("FAIL f32->f16 %08x: %04x != gguf's %04x\n", bits_of(f), kvd_f32_f16(f),
		       gguf_f32_to_f16(f));
		return 1;
	}
	if (kvd_f32_bf16(f) != gguf_f32_to_bf16(f)) {
		printf("FAIL f32->bf16 %08x: %04x != gguf's %04x\n", bits_of(f), kvd_f32_bf16(f),
		       gguf_f32_to_bf16(f));
		return 1;
	}
	return 0;
}

static int check_conversions(uint64_t *s)
{
	static const uint32_t edges[] = {
	    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
	    0xffbfffffu, 0x00000001u, 0x007fffffu, 0x00800000u, 0x477fe000u, 0x477ff000u,
	    0x477fefffu, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x387fc000u, 0x38800000u,
	    0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x7f7f8000u};
	int failed = 0;

	for (uint32_t h = 0; h < 0x10000u; h++) {
		float want = gguf_f16_to_f32((uint16_t)h), got = kvd_f16_f32(h);

		if (bits_of(want) != bits_of(got)) {
			printf("FAIL f16->f32 %04x: %08x != gguf's %08x\n", h, bits_of(got),
			       bits_of(want));
			failed = 1;
			break;
		}
		/* every half's value, and the midpoints beside it */
		failed |= check_one_conversion(want);
		failed |= check_one_conversion(f32_of(bits_of(want) + 0x1000u));
		if (failed)
			break;
	}
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]) && !failed; i++)
		failed |= check_one_conversion(f32_of(edges[i]));
	for (int i = 0; i < 1000000 && !failed; i++)
		failed |= check_one_conversion(f32_of((uint32_t)next_u64(s)));
	printf("%s: f16 and bf16 conversions as gguf.c's\n", failed ? "FAIL" : "ok");
	return failed;
}

int main(void)
{
	uint64_t seed = DEFAULT_SEED;
	const char *env = getenv("IGNIS_TEST_SEED");
	static struct kvd_e8 table;
	int failed;

	if (env && *env)
		seed = strtoull(env, NULL, 0);
	printf("seed %" PRIu64 " (IGNIS_TEST_SEED=%" PRIu64 " repeats this run)\n", seed, seed);
	kvd_e8_build(&table);

	uint64_t s = seed;
	failed = check_conversions(&s);
	failed |= check_formats(&table, &s);
	return failed ? 1 : 0;
}
