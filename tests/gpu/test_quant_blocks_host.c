/*
 * test_quant_blocks_host.c - kernels/quant_blocks.h compiled for the host:
 * the very source kern_matvec runs on the device, checked where no device
 * is needed (suite 'unit': it runs on every machine).
 *
 *  1. Decoding: for every type, random bytes (every bit pattern, NaN and
 *     subnormal scales included) decoded unit by unit through qb_unit give
 *     quant_dequantize's floats bit for bit (model/quant.c, the reference,
 *     itself checked against llama.cpp by tests/unit/test_quant.c); every
 *     half through qb_f16 gives quant_f16_to_f32's bits; plain rows of any
 *     length decode the same on the vector and the element path.
 *  2. The order: qb_row_dot (the device's order replayed) gives the bits of
 *     an independent re-statement of the order written in quant_blocks.h's
 *     comment (its table of units, 32 lanes, the butterfly), on weights
 *     decoded by quant.c.
 *  3. Against the cpu backend: qb_row_dot against cop_matmul (16 lanes over
 *     elements, products rounded: cpu_ops.h) on valid blocks of every type.
 *     The two sum the same decoded products (the device's unrounded in its
 *     fused multiply-adds) in different orders. Tolerance, every type alike
 *     since both start from the same decoded weights (no type adds error of
 *     its own):
 *
 *       |dev - cpu| <= 4 * sqrt(m) * 2^-24 * sum_k |w_k x_k|,
 *       m = n_in/16 + n_in/32 + 16
 *
 *     m is the roundings a term meets on its way through both orders (the
 *     cpu's lane of n_in/16 additions, a tree of 4 and a tail under 16; the
 *     device's lane of n_in/32 + 16 fused multiply-adds and a tree of 5);
 *     rounding errors of either sign add up as sqrt(m), and 4 is the margin.
 *     (Higham's worst-case gamma_m, linear in m, would be up to 1e-4 at
 *     n_in = 17408, wider than a dropped term.) It catches a dropped or
 *     doubled term: about 1/n_in of the scale, over 5 times the tolerance at
 *     the widest row here and far more below. The worst observed ratio is
 *     printed: under 2e-7 (F16, F32, BF16; over 20 seeds), the block types
 *     2e-8 to 5e-8.
 *
 * Inputs are pseudo-random from a printed seed (IGNIS_TEST_SEED overrides).
 * Built with -ffp-contract=off, as quant.c and cpu_ops.c are: the header's
 * host side relies on it (no fused multiply-add but its explicit fmaf).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/backend/cpu/cpu_ops.h"
#include "kernels/quant_blocks.h"
#include "model/quant.h"

#define DEFAULT_SEED UINT64_C(20261205)

static const uint32_t types[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                 QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
#define N_TYPES (sizeof(types) / sizeof(types[0]))

_Static_assert(QB_F32 == QUANT_F32 && QB_F16 == QUANT_F16 && QB_BF16 == QUANT_BF16 &&
                   QB_Q8_0 == QUANT_Q8_0 && QB_Q4_0 == QUANT_Q4_0 && QB_Q4_K == QUANT_Q4_K &&
                   QB_Q5_K == QUANT_Q5_K && QB_Q6_K == QUANT_Q6_K,
               "quant_blocks.h's type numbers are ggml's, as quant.h's");

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

static uint32_t bits_of(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof(b));
	return b;
}

/* 16-byte aligned, as cudaMalloc's are (the header's loads assume it). */
static void *alloc16(size_t n)
{
	return aligned_alloc(16, (n + 15) / 16 * 16);
}

/* A row of n elements decoded through qb_unit (vector path `vec`). */
static void decode_units(uint32_t type, const uint8_t *row, uint32_t n_in, int vec, float *out)
{
	float w[QB_UNIT_MAX];
	uint32_t off[QB_RUNS_MAX];

	for (uint32_t u = 0; u < qb_row_units(type, n_in); u++) {
		int n = qb_unit(type, row, u, n_in, vec, w, off);

		for (int k = 0; k < n; k++)
			out[off[k / 4] + (uint32_t)(k % 4)] = w[k];
	}
}

/* Rows of n elements of random bytes, decoded both ways; the mismatches. */
static int decode_len(const struct quant_type *qt, uint32_t n, uint64_t *seed)
{
	const size_t bytes = (size_t)quant_row_bytes(qt->id, n);
	uint8_t *row = alloc16(bytes);
	float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
	int bad = 0;

	if (!row || !ref || !got) {
		printf("  out of memory\n");
		bad = 1;
		goto out;
	}
	for (int rep = 0; rep < 50; rep++) {
		for (size_t i = 0; i < bytes; i++)
			row[i] = (uint8_t)next_u64(seed);
		quant_dequantize(qt->id, row, ref, n);
		for (int vec = 0; vec <= qb_row_vec(qt->id, n, 1); vec++) {
			memset(got, 0xa5, n * sizeof(float)); /* a missed element shows */
			decode_units(qt->id, row, n, vec, got);
			for (uint32_t i = 0; i < n; i++) {
				if (bits_of(got[i]) == bits_of(ref[i]))
					continue;
				if (bad++ < 5)
					printf(
					    "  %s n %u vec %d element %u: 0x%08x, quant.c 0x%08x\n",
					    qt->name, n, vec, i, bits_of(got[i]), bits_of(ref[i]));
			}
		}
	}
out:
	free(got);
	free(ref);
	free(row);
	return bad;
}

/* 1. Decoding, bit for bit. */
static int check_decode(uint64_t *seed)
{
	int bad = 0;

	for (uint32_t h = 0; h < 65536; h++)
		if (bits_of(qb_f16(h)) != bits_of(quant_f16_to_f32((uint16_t)h))) {
			if (bad++ < 5)
				printf("  half 0x%04x: 0x%08x, quant.c 0x%08x\n", h,
				       bits_of(qb_f16(h)), bits_of(quant_f16_to_f32((uint16_t)h)));
		}
	printf("%s qb_f16 on all 65536 halves\n", bad ? "not ok" : "ok");

	for (size_t t = 0; t < N_TYPES; t++) {
		const struct quant_type *qt = quant_type_of(types[t]);
		/* whole blocks, and for the plain types rows with a short last unit */
		const uint32_t be = qt->block_elems;
		const uint32_t lens[] = {be * 8, be * 40, be == 1 ? 13 : be, be == 1 ? 1 : be * 3};
		int tbad = 0;

		for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
			tbad += decode_len(qt, lens[li], seed);
		printf("%s %s: qb_unit decodes as quant.c, bit for bit\n", tbad ? "not ok" : "ok",
		       qt->name);
		bad |= tbad;
	}
	return bad != 0;
}

/* The unit table of quant_blocks.h's comment, re-stated: the row offset of
 * element k (0 .. 15) of unit u, or -1 past the unit's end. */
static long unit_elem(uint32_t type, uint32_t u, int k, uint32_t n_in)
{
	const struct quant_type *qt = quant_type_of(type);

	if (qt->block_elems == 1) {
		long e = 8L * u + k;
		return k < 8 && e < (long)n_in ? e : -1;
	}
	if (qt->block_elems == 32) { /* 4 units a block */
		long base = 32L * (u / 4), i = u % 4;
		if (k >= 8)
			return -1;
		if (type == QUANT_Q8_0)
			return base + 8 * i + k;
		return base + (k < 4 ? 4 * i + k : 16 + 4 * i + (k - 4)); /* Q4_0 */
	}
	long base = 256L * (u / 16), i = u % 16;
	if (type == QUANT_Q6_K)
		return base + 128 * (i / 8) + 4 * (i % 8) + 32 * (k / 4) + k % 4;
	return base + 64 * (i / 4) + 8 * (i % 4) + (k < 8 ? k : 32 + (k - 8)); /* Q4_K, Q5_K */
}

/* The order of quant_blocks.h's comment, on decoded weights. */
static float order_ref(uint32_t type, const float *w, const float *x, uint32_t n_in)
{
	const struct quant_type *qt = quant_type_of(type);
	uint32_t units = qt->block_elems == 1
	                     ? (n_in + 7) / 8
	                     : n_in / qt->block_elems * (qt->block_elems == 32 ? 4 : 16);
	float s[32], t[32];

	for (uint32_t l = 0; l < 32; l++) {
		float acc = 0.0f;

		for (uint32_t u = l; u < units; u += 32)
			for (int k = 0; k < 16; k++) {
				long e = unit_elem(type, u, k, n_in);
				if (e >= 0)
					acc = fmaf(w[e], x[e], acc);
			}
		s[l] = acc;
	}
	for (uint32_t o = 16; o >= 1; o /= 2) {
		for (uint32_t l = 0; l < 32; l++)
			t[l] = s[l] + s[l ^ o];
		memcpy(s, t, sizeof(s));
	}
	return s[0];
}

struct shape {
	uint32_t n_in, n_out;
};

/* Row lengths as the models have them (Qwen3's 1024 .. 17408) and a few
 * others; the plain types also take lengths that are not whole units. */
static const struct shape shapes[] = {
    {256, 16}, {1024, 8}, {2048, 8}, {4096, 4}, {5120, 4}, {17408, 2},
};
static const struct shape plain_shapes[] = {{13, 8}, {100, 8}, {1001, 4}, {4100, 4}};

/* 2 and 3 on one shape of one type; *worst gets the largest error ratio. */
static int check_rows(uint32_t type, struct shape sh, uint64_t *seed, double *worst)
{
	const struct quant_type *qt = quant_type_of(type);
	const size_t row_bytes = (size_t)quant_row_bytes(type, sh.n_in);
	float *src = malloc((size_t)sh.n_in * sh.n_out * sizeof(float));
	float *wdec = malloc((size_t)sh.n_in * sh.n_out * sizeof(float));
	float *x = alloc16((size_t)sh.n_in * sizeof(float)),
	      *cpu = malloc(sh.n_out * sizeof(float));
	uint8_t *wq = alloc16(row_bytes * sh.n_out);
	const double tol = 4.0 * sqrt((double)sh.n_in / 16 + (double)sh.n_in / 32 + 16) * 0x1p-24;
	int bad = 0;

	if (!src || !wdec || !x || !cpu || !wq) {
		printf("not ok out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < (size_t)sh.n_in * sh.n_out; i++)
		src[i] = next_unit(seed);
	for (uint32_t i = 0; i < sh.n_in; i++)
		x[i] = next_unit(seed);
	for (uint32_t r = 0; r < sh.n_out; r++)
		quant_quantize(type, src + (size_t)r * sh.n_in, wq + r * row_bytes, sh.n_in);
	quant_dequantize(type, wq, wdec, (uint64_t)sh.n_in * sh.n_out);
	cop_matmul(NULL, (struct cop_w){.p = wq, .type = type}, x, cpu, sh.n_in, sh.n_out, 1);

	for (uint32_t r = 0; r < sh.n_out; r++) {
		const uint8_t *row = wq + r * row_bytes;
		const float *wr = wdec + (size_t)r * sh.n_in;
		const float dev = qb_row_dot(type, row, x, sh.n_in, qb_row_vec(type, sh.n_in, 1));
		const float dev_el = qb_row_dot(type, row, x, sh.n_in, 0);
		const float ref = order_ref(type, wr, x, sh.n_in);
		double scale = 0.0;

		for (uint32_t k = 0; k < sh.n_in; k++)
			scale += fabs((double)wr[k] * (double)x[k]);
		if (bits_of(dev) != bits_of(ref) || bits_of(dev_el) != bits_of(dev)) {
			if (bad++ < 5)
				printf("  %s %u x %u row %u: qb_row_dot %.9g (element path %.9g), "
				       "the stated order %.9g\n",
				       qt->name, sh.n_out, sh.n_in, r, (double)dev, (double)dev_el,
				       (double)ref);
		}
		const double err = fabs((double)dev - (double)cpu[r]);
		const double ratio = scale > 0 ? err / scale : err;
		if (ratio > *worst)
			*worst = ratio;
		if (!(err <= tol * scale)) { /* NaN fails too */
			if (bad++ < 5)
				printf("  %s %u x %u row %u: device order %.9g, cpu %.9g, "
				       "scale %.6g\n",
				       qt->name, sh.n_out, sh.n_in, r, (double)dev, (double)cpu[r],
				       scale);
		}
	}
	free(wq);
	free(cpu);
	free(x);
	free(wdec);
	free(src);
	return bad;
}

static int check_orders(uint64_t *seed)
{
	int bad = 0;

	for (size_t t = 0; t < N_TYPES; t++) {
		const struct quant_type *qt = quant_type_of(types[t]);
		double worst = 0.0;
		int tbad = 0;

		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			tbad |= check_rows(types[t], shapes[s], seed, &worst);
		if (qt->block_elems == 1)
			for (size_t s = 0; s < sizeof(plain_shapes) / sizeof(plain_shapes[0]); s++)
				tbad |= check_rows(types[t], plain_shapes[s], seed, &worst);
		printf("%s %s: qb_row_dot is the stated order bit for bit; against cop_matmul "
		       "worst |dev - cpu| / sum|w x| %.3g\n",
		       tbad ? "not ok" : "ok", qt->name, worst);
		bad |= tbad;
	}
	return bad;
}

int main(void)
{
	uint64_t seed = DEFAULT_SEED;
	const char *env = getenv("IGNIS_TEST_SEED");

	if (env && *env)
		seed = strtoull(env, NULL, 0);
	printf("seed %" PRIu64 " (IGNIS_TEST_SEED=%" PRIu64 " repeats this run)\n", seed, seed);

	uint64_t s = seed;
	int failed = check_decode(&s);
	failed |= check_orders(&s);
	return failed ? 1 : 0;
}
