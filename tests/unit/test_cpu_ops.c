/*
 * test_cpu_ops.c - the cpu backend's kernels (gpu-worker/backend/cpu/cpu_ops.h) and
 * their thread pool (gpu-worker/backend/cpu/cpu_pool.h).
 *
 * Three kinds of checks:
 *  - exact: tiny hand-computed cases whose every bit is known (a 2x3 matrix
 *    product, the lane order on sums that expose it, RoPE at position 0, the
 *    RMSNorm of a constant row, softmax edge cases);
 *  - the contract: the matrix product and the dot product equal, bit for bit,
 *    a scalar re-implementation of the order cpu_ops.h documents, and give
 *    the same bits with 1, 2 and 3 threads;
 *  - accuracy: every kernel against a plain double-precision reference on
 *    seeded random rows, within the tolerance stated at each check.
 * Random inputs come from IGNIS_TEST_SEED (default below; the seed in use is
 * printed). The matrix-product speed is printed for information only.
 *
 * Built with -ffp-contract=off like the library, so the scalar order below
 * rounds every product and every sum just as the documentation says.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include "gpu-worker/backend/cpu/cpu_ops.h"
#include "model/quant.h"
#include "gpu-worker/backend/cpu/cpu_pool.h"
#include "model/gguf.h"

#define DEFAULT_SEED 0x1c9a5eedu

/* A sanitized build measures the sanitizer: time fewer repetitions. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* ---- helpers --------------------------------------------------------------- */

#include "testutil.h"

static int same_bits(float a, float b)
{
	return !memcmp(&a, &b, sizeof(a));
}

/* The documented order (cpu_ops.h), scalar, one step at a time. */
static float spec_dot(const float *a, const float *b, size_t n)
{
	float lane[COP_DOT_LANES] = {0};
	size_t m = n - n % COP_DOT_LANES;
	float s;

	for (size_t i = 0; i < m; i++) {
		float p = a[i] * b[i];

		lane[i % COP_DOT_LANES] = lane[i % COP_DOT_LANES] + p;
	}
	for (int h = COP_DOT_LANES / 2; h >= 1; h /= 2)
		for (int l = 0; l < h; l++)
			lane[l] = lane[l] + lane[l + h];
	s = lane[0];
	for (size_t i = m; i < n; i++) {
		float p = a[i] * b[i];

		s = s + p;
	}
	return s;
}

/* ---- the pool ---------------------------------------------------------------- */

struct part_rec {
	pthread_mutex_t mu;
	int calls;
	int bad; /* an empty range or too many calls */
	size_t begin[8], end[8];
	unsigned char *hits; /* per item */
};

static void part_fn(void *ctx, size_t begin, size_t end)
{
	struct part_rec *pr = ctx;

	/* no cmocka assertion here: it may run on a worker thread */
	for (size_t i = begin; i < end; i++)
		pr->hits[i]++; /* items are disjoint: no lock needed */
	pthread_mutex_lock(&pr->mu);
	if (pr->calls < 8 && begin < end) {
		pr->begin[pr->calls] = begin;
		pr->end[pr->calls] = end;
	} else {
		pr->bad = 1;
	}
	pr->calls++;
	pthread_mutex_unlock(&pr->mu);
}

static void test_pool_create_refused(void **state)
{
	static const struct {
		int n;
		int rc;
	} rows[] = {
	    {0, IG_E_INVAL},
	    {-1, IG_E_INVAL},
	    {CPOOL_MAX_THREADS + 1, IG_E_INVAL},
	    {1, IG_E_OK},
	};
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct ig_errbuf eb = {0};
		struct cpool *p = (struct cpool *)&eb; /* must be overwritten */
		int rc = cpool_create(&p, rows[r].n, &eb);

		assert_int_equal(rc, rows[r].rc);
		if (rc) {
			assert_null(p);
			assert_non_null(strstr(eb.msg, "threads"));
		}
		cpool_destroy(p);
	}
	cpool_destroy(NULL);
	assert_int_equal(cpool_threads(NULL), 1);
}

/* Every item once, and the ranges are exactly the documented partition. */
static void test_pool_partition(void **state)
{
	static const size_t items[] = {0, 1, 2, 3, 4, 5, 7, 64, 1000, 1001};
	(void)state;

	for (int n = 1; n <= 5; n++) {
		struct cpool *p = pool_of(n);

		for (size_t r = 0; r < sizeof(items) / sizeof(items[0]); r++) {
			size_t ni = items[r], q = ni / (size_t)n, rem = ni % (size_t)n;
			struct part_rec pr = {.calls = 0};
			int expect_calls = 0;

			pthread_mutex_init(&pr.mu, NULL);
			pr.hits = calloc(ni + 1, 1);
			assert_non_null(pr.hits);
			cpool_run(p, ni, part_fn, &pr);
			assert_false(pr.bad);
			for (size_t i = 0; i < ni; i++)
				if (pr.hits[i] != 1)
					fail_msg("%d threads, %zu items: item %zu run %d times", n,
					         ni, i, pr.hits[i]);
			for (int k = 0; k < n; k++) {
				size_t uk = (size_t)k;
				size_t b = uk * q + (uk < rem ? uk : rem);
				size_t e = (uk + 1) * q + (uk + 1 < rem ? uk + 1 : rem);
				int found = 0;

				if (b == e)
					continue;
				expect_calls++;
				for (int c = 0; c < pr.calls; c++)
					found += pr.begin[c] == b && pr.end[c] == e;
				if (found != 1)
					fail_msg(
					    "%d threads, %zu items: share %d [%zu, %zu) seen %d "
					    "times",
					    n, ni, k, b, e, found);
			}
			assert_int_equal(pr.calls, expect_calls);
			free(pr.hits);
			pthread_mutex_destroy(&pr.mu);
		}
		cpool_destroy(p);
	}
	/* a NULL pool runs inline */
	{
		struct part_rec pr = {.calls = 0};

		pthread_mutex_init(&pr.mu, NULL);
		pr.hits = calloc(10, 1);
		assert_non_null(pr.hits);
		cpool_run(NULL, 10, part_fn, &pr);
		assert_int_equal(pr.calls, 1);
		assert_true(pr.begin[0] == 0 && pr.end[0] == 10);
		free(pr.hits);
		pthread_mutex_destroy(&pr.mu);
	}
}

static void add_fn(void *ctx, size_t begin, size_t end)
{
	uint64_t *v = ctx;

	for (size_t i = begin; i < end; i++)
		v[i] += i + 1;
}

/* Many back-to-back jobs, short and long gaps: the wake-up and the
 * completion never lose a job or return early. */
static void test_pool_many_runs(void **state)
{
	(void)state;
	for (int n = 2; n <= 3; n++) {
		struct cpool *p = pool_of(n);
		uint64_t v[37] = {0};
		const int runs = 3000;

		for (int r = 0; r < runs; r++) {
			cpool_run(p, 37, add_fn, v);
			if (r % 1000 == 999) {
				struct timespec ts = {0, 2 * 1000 * 1000}; /* let workers sleep */

				nanosleep(&ts, NULL);
			}
		}
		for (size_t i = 0; i < 37; i++)
			assert_true(v[i] == (uint64_t)runs * (i + 1));
		cpool_destroy(p);
	}
}

/* ---- the dot-product order ------------------------------------------------- */

/* Sums that tell orders apart: a sequential sum would lose every +1 against
 * 2^24 (16777216, where the fp32 spacing is 2); the lanes keep them. */
static void test_dot_order_exact(void **state)
{
	static const struct {
		const char *name;
		size_t n;
		float expect;
	} rows[] = {
	    /* lanes: s0 = 2^24, s1..15 = 1. Tree: s0 + s8 = 2^24 + 1 -> 2^24 (tie
	     * to even); s1..7 = 2; then s0 + s4 = 2^24 + 2; s1..3 = 4; then
	     * s0 + s2 = 2^24 + 6, s1 = 8; then 2^24 + 14 = 16777230. */
	    {"16 terms", 16, 16777230.0f},
	    /* tail: 16777230 + 1 = 16777231, a tie, to even: 16777232 */
	    {"17 terms", 17, 16777232.0f},
	    /* n < 16: all tail, sequential: 2^24 + 1 + 1 ... stays 2^24 */
	    {"15 terms", 15, 16777216.0f},
	};
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		float a[17], b[17];

		for (size_t i = 0; i < 17; i++) {
			a[i] = 1.0f;
			b[i] = 1.0f;
		}
		a[0] = 16777216.0f;
		if (!same_bits(cop_dot_f32(a, b, rows[r].n), rows[r].expect))
			fail_msg("%s: got %.1f, expected %.1f", rows[r].name,
			         (double)cop_dot_f32(a, b, rows[r].n), (double)rows[r].expect);
		assert_true(same_bits(spec_dot(a, b, rows[r].n), rows[r].expect));
	}
	assert_true(same_bits(cop_dot_f32(NULL, NULL, 0), 0.0f));
}

static void test_dot_random(void **state)
{
	static const size_t ns[] = {1, 7, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 1000, 4099};
	struct rng rg = {test_seed("dot")};
	(void)state;

	for (size_t r = 0; r < sizeof(ns) / sizeof(ns[0]); r++) {
		size_t n = ns[r];
		float *a = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
		double ref = 0, mag = 0;
		float got;

		for (size_t i = 0; i < n; i++) {
			a[i] = rng_unif(&rg, -2, 2);
			b[i] = rng_unif(&rg, -2, 2);
			ref += (double)a[i] * b[i];
			mag += fabs((double)a[i] * b[i]);
		}
		got = cop_dot_f32(a, b, n);
		if (!same_bits(got, spec_dot(a, b, n)))
			fail_msg("n %zu: %a is not the documented order's %a", n, (double)got,
			         (double)spec_dot(a, b, n));
		/* tolerance: 1e-5 of the sum of |terms| (the order's worst-case
		 * bound at n = 4099, (256 + 4 + 3 + 1) * 2^-24 = 1.6e-5, is never
		 * approached by random signs: seen ~1e-7) */
		if (fabs(got - ref) > 1e-5 * mag)
			fail_msg("n %zu: %g vs %g", n, (double)got, ref);
		free(a);
		free(b);
	}
}

/* ---- matrix products --------------------------------------------------------- */

static void test_matmul_2x3(void **state)
{
	/* W is [n_in 3, n_out 2]: output 0 = (1, 2, 3), output 1 = (4, 5, 6) */
	const float wf[6] = {1, 2, 3, 4, 5, 6};
	const float x[6] = {1, 0.5f, -2, /* token 1 */ 0.25f, -1, 8};
	const float expect[4] = {1 + 1 - 6, 4 + 2.5f - 12, 0.25f - 2 + 24, 1 - 5 + 48};
	uint16_t w[6];
	float y[4];
	(void)state;

	for (int i = 0; i < 6; i++)
		w[i] = gguf_f32_to_bf16(wf[i]);
	for (int th = 1; th <= 3; th++) {
		struct cpool *p = pool_of(th);

		memset(y, 0xff, sizeof(y));
		cop_matmul_bf16(p, w, x, y, 3, 2, 2);
		for (int i = 0; i < 4; i++)
			assert_true(same_bits(y[i], expect[i]));
		memset(y, 0xff, sizeof(y));
		cop_matmul_f32(p, wf, x, y, 3, 2, 2);
		for (int i = 0; i < 4; i++)
			assert_true(same_bits(y[i], expect[i]));
		memset(y, 0xff, sizeof(y));
		cop_matmul_bf16(p, w, x, y, 3, 2, 1); /* one token writes 2 outputs */
		assert_true(same_bits(y[0], expect[0]) && same_bits(y[1], expect[1]));
		assert_true(isnan(y[2]) && isnan(y[3]));
		cpool_destroy(p);
	}
}

/* Degenerate shapes: n_in 0 gives +0; an empty output writes nothing. */
static void test_matmul_empty(void **state)
{
	float y[6], x[2] = {1, 2};
	uint16_t w[2] = {0x3f80, 0x3f80};
	(void)state;

	memset(y, 0xff, sizeof(y));
	cop_matmul_bf16(NULL, w, x, y, 0, 3, 2);
	for (int i = 0; i < 6; i++)
		assert_true(same_bits(y[i], 0.0f));
	memset(y, 0xff, sizeof(y));
	cop_matmul_bf16(NULL, w, x, y, 2, 0, 2);
	cop_matmul_bf16(NULL, w, x, y, 2, 3, 0);
	cop_matmul_f32(NULL, x, x, y, 2, 0, 2);
	for (int i = 0; i < 6; i++)
		assert_true(isnan(y[i]));
}

struct mm_shape {
	size_t n_in, n_out, n_tok;
};

/*
 * Each shape: bf16 weights in [-1, 1), x in [-2, 2). Checks
 *  - bits equal to the documented order (spec_dot), every element;
 *  - |y - double reference| <= 1e-5 * sum_i |w x|;
 *  - the same bits with 1, 2 and 3 threads, and from cop_matmul_f32 on the
 *    widened weights; nothing written past y.
 */
static void test_matmul_random(void **state)
{
	static const struct mm_shape shapes[] = {
	    {1, 1, 1},    {3, 2, 1},     {15, 1, 1},    {16, 1, 1},    {17, 3, 2},
	    {31, 5, 3},   {33, 4, 16},   {100, 7, 17},  {256, 9, 5},   {257, 4, 1},
	    {300, 1, 40}, {512, 13, 33}, {1000, 64, 2}, {2048, 33, 1}, {527, 130, 16},
	    {4, 1000, 3}, {64, 1, 1},    {1, 64, 64},   {2000, 3, 7},  {1024, 128, 20},
	};
	struct rng rg = {test_seed("matmul")};
	struct cpool *pools[3] = {pool_of(1), pool_of(2), pool_of(3)};
	(void)state;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		size_t n_in = shapes[s].n_in, n_out = shapes[s].n_out, n_tok = shapes[s].n_tok;
		size_t ny = n_out * n_tok, guard = 8;
		uint16_t *w = xmalloc(n_in * n_out * sizeof(uint16_t));
		float *wf = xmalloc(n_in * n_out * sizeof(float));
		float *x = xmalloc(n_in * n_tok * sizeof(float));
		float *y[4], *row = xmalloc(n_in * sizeof(float));
		double worst = 0;

		for (size_t i = 0; i < n_in * n_out; i++) {
			w[i] = gguf_f32_to_bf16(rng_unif(&rg, -1, 1));
			wf[i] = gguf_bf16_to_f32(w[i]);
		}
		for (size_t i = 0; i < n_in * n_tok; i++)
			x[i] = rng_unif(&rg, -2, 2);
		for (int k = 0; k < 4; k++) {
			y[k] = xmalloc((ny + guard) * sizeof(float));
			memset(y[k], 0xa5, (ny + guard) * sizeof(float));
		}
		for (int k = 0; k < 3; k++)
			cop_matmul_bf16(pools[k], w, x, y[k], n_in, n_out, n_tok);
		cop_matmul_f32(pools[1], wf, x, y[3], n_in, n_out, n_tok);

		for (int k = 1; k < 4; k++)
			if (memcmp(y[0], y[k], (ny + guard) * sizeof(float)))
				fail_msg("%zux%zu, %zu tokens: %s differs from 1 thread", n_in,
				         n_out, n_tok,
				         k < 3 ? (k == 1 ? "2 threads" : "3 threads") : "f32");
		for (size_t i = 0; i < guard; i++) {
			uint32_t u;

			memcpy(&u, &y[0][ny + i], sizeof(u));
			assert_int_equal(u, 0xa5a5a5a5u);
		}
		for (size_t t = 0; t < n_tok; t++)
			for (size_t o = 0; o < n_out; o++) {
				const float *xr = x + t * n_in;
				float got = y[0][t * n_out + o], spec;
				double ref = 0, mag = 0;

				for (size_t i = 0; i < n_in; i++) {
					row[i] = wf[o * n_in + i];
					ref += (double)row[i] * xr[i];
					mag += fabs((double)row[i] * xr[i]);
				}
				spec = spec_dot(row, xr, n_in);
				if (!same_bits(got, spec))
					fail_msg(
					    "%zux%zu, %zu tokens: y[%zu][%zu] = %a, the documented "
					    "order gives %a",
					    n_in, n_out, n_tok, t, o, (double)got, (double)spec);
				if (fabs(got - ref) > 1e-5 * mag)
					fail_msg(
					    "%zux%zu, %zu tokens: y[%zu][%zu] = %.9g, reference "
					    "%.9g",
					    n_in, n_out, n_tok, t, o, (double)got, ref);
				if (mag > 0 && fabs(got - ref) / mag > worst)
					worst = fabs(got - ref) / mag;
			}
		print_message("#   %4zu in x %4zu out x %2zu tokens: worst |err| / sum|wx| %.2e\n",
		              n_in, n_out, n_tok, worst);
		for (int k = 0; k < 4; k++)
			free(y[k]);
		free(row);
		free(x);
		free(wf);
		free(w);
	}
	for (int k = 0; k < 3; k++)
		cpool_destroy(pools[k]);
}

/*
 * Weights of every type model/quant.h reads: cop_matmul gives the bits of
 * cop_matmul_f32 on the decoded weights (hence the documented order), with
 * 1, 2 and 3 threads, rows and tokens off the item edges; an embedding row
 * decodes as the whole matrix does.
 */
static void test_matmul_types(void **state)
{
	static const uint32_t types[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0,
	                                 QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
	static const struct mm_shape shapes[] = {{256, 5, 3}, {512, 9, 17}, {768, 4, 1},
	                                         {1280, 13, 33}, {512, 7, 1}, {2048, 3, 1}};
	struct rng rg = {test_seed("matmul types")};
	struct cpool *pools[3] = {pool_of(1), pool_of(2), pool_of(3)};
	(void)state;

	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			size_t n_in = shapes[s].n_in, n_out = shapes[s].n_out, n_tok = shapes[s].n_tok;
			size_t ny = n_out * n_tok, row_bytes = quant_row_bytes(types[ti], n_in);
			float *src = xmalloc(n_in * n_out * sizeof(float));
			float *wf = xmalloc(n_in * n_out * sizeof(float));
			float *x = xmalloc(n_in * n_tok * sizeof(float));
			float *row = xmalloc(n_in * sizeof(float));
			uint8_t *wq = xmalloc(row_bytes * n_out);
			float *y[4];

			assert_int_not_equal(row_bytes, 0);
			for (size_t i = 0; i < n_in * n_out; i++)
				src[i] = rng_unif(&rg, -1, 1);
			for (size_t i = 0; i < n_in * n_tok; i++)
				x[i] = rng_unif(&rg, -2, 2);
			quant_quantize(types[ti], src, wq, n_in * n_out);
			quant_dequantize(types[ti], wq, wf, n_in * n_out);
			for (int k = 0; k < 4; k++) {
				y[k] = xmalloc((ny + 8) * sizeof(float));
				memset(y[k], 0xa5, (ny + 8) * sizeof(float));
			}
			for (int k = 0; k < 3; k++)
				cop_matmul(pools[k], (struct cop_w){.p = wq, .type = types[ti]}, x, y[k],
				           n_in, n_out, n_tok);
			cop_matmul_f32(pools[1], wf, x, y[3], n_in, n_out, n_tok);
			for (int k = 0; k < 3; k++)
				if (memcmp(y[k], y[3], (ny + 8) * sizeof(float)))
					fail_msg("%s %zux%zu, %zu tokens, %d threads: not the bits of "
					         "the decoded weights",
					         quant_type_of(types[ti])->name, n_in, n_out, n_tok, k + 1);
			for (size_t o = 0; o < n_out; o++) {
				cop_row((struct cop_w){.p = wq, .type = types[ti]}, n_in, o, row);
				assert_memory_equal(row, wf + o * n_in, n_in * sizeof(float));
			}
			for (int k = 0; k < 4; k++)
				free(y[k]);
			free(wq);
			free(row);
			free(x);
			free(wf);
			free(src);
		}
	for (int k = 0; k < 3; k++)
		cpool_destroy(pools[k]);
}

/* Non-finite and extreme values go through the same order on every path. */
static void test_matmul_special_values(void **state)
{
	static const float specials[] = {0.0f, -0.0f, 1e30f, -1e30f, 1e-30f, INFINITY, 3.0f};
	const size_t n_in = 37, n_out = 9, n_tok = 5;
	struct rng rg = {test_seed("matmul special values")};
	uint16_t w[37 * 9];
	float x[37 * 5], y1[9 * 5], y3[9 * 5];
	struct cpool *p3 = pool_of(3);
	(void)state;

	for (size_t i = 0; i < n_in * n_out; i++)
		w[i] = gguf_f32_to_bf16(specials[rng_next(&rg) % 7] * rng_unif(&rg, 0.5f, 1));
	for (size_t i = 0; i < n_in * n_tok; i++)
		x[i] = specials[rng_next(&rg) % 7];
	cop_matmul_bf16(NULL, w, x, y1, n_in, n_out, n_tok);
	cop_matmul_bf16(p3, w, x, y3, n_in, n_out, n_tok);
	assert_memory_equal(y1, y3, sizeof(y1));
	for (size_t t = 0; t < n_tok; t++)
		for (size_t o = 0; o < n_out; o++) {
			float row[37], spec;

			for (size_t i = 0; i < n_in; i++)
				row[i] = gguf_bf16_to_f32(w[o * n_in + i]);
			spec = spec_dot(row, x + t * n_in, n_in);
			assert_true(same_bits(y1[t * n_out + o], spec) ||
			            (isnan(spec) && isnan(y1[t * n_out + o])));
		}
	cpool_destroy(p3);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Information only: the speed of one 4096 x 4096 bf16 product. */
static void test_matmul_speed(void **state)
{
	const size_t n = 4096, max_tok = 16;
	static const struct {
		size_t n_tok;
		int threads, reps;
	} rows[] = {{1, 1, 20}, {1, 2, 20}, {16, 1, 5}, {16, 2, 5}};
	struct rng rg = {7};
	uint16_t *w = xmalloc(n * n * sizeof(uint16_t));
	float *x = xmalloc(n * max_tok * sizeof(float));
	float *y = xmalloc(n * max_tok * sizeof(float));
	(void)state;

	for (size_t i = 0; i < n * n; i++)
		w[i] = (uint16_t)(0x3c00u + (rng_next(&rg) & 0x7ffu) + (i & 1u) * 0x8000u);
	for (size_t i = 0; i < n * max_tok; i++)
		x[i] = rng_unif(&rg, -1, 1);
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct cpool *p = pool_of(rows[r].threads);
		int reps = SANITIZED ? 1 : rows[r].reps;
		double best = 1e30;

		cop_matmul_bf16(p, w, x, y, n, n, rows[r].n_tok); /* warm */
		for (int k = 0; k < reps; k++) {
			double t0 = now_s(), dt;

			cop_matmul_bf16(p, w, x, y, n, n, rows[r].n_tok);
			dt = now_s() - t0;
			if (dt < best)
				best = dt;
		}
		print_message("# matmul bf16 4096x4096 (%s), %2zu token(s), %d thread(s): best of %2d: "
		              "%7.2f ms, %6.2f GFLOP/s (information, not a check%s)\n",
		              cop_kernels(), rows[r].n_tok, rows[r].threads, reps, best * 1e3,
		              2.0 * (double)n * (double)n * (double)rows[r].n_tok / best * 1e-9,
		              SANITIZED ? "; sanitized build" : "");
		cpool_destroy(p);
	}
	free(y);
	free(x);
	free(w);
}

/* The baseline kernels where the CPU picked others (AVX-512): the same
 * documented bits, checked the same way. */
static void test_matmul_base_kernels(void **state)
{
	int was = cop_kernels_force(COP_KERNELS_BASE);

	print_message("# the CPU's kernels: %s; now the baseline's\n",
	              was == COP_KERNELS_AVX512 ? "avx512" : "base");
	test_matmul_random(state);
	test_matmul_types(state);
	cop_kernels_force(COP_KERNELS_BEST);
	assert_int_equal(cop_kernels_force(COP_KERNELS_BEST), was);
}

/* ---- RMSNorm ------------------------------------------------------------------- */

static void test_rmsnorm_exact(void **state)
{
	/* a constant row of -2: ss = 4n, mean 4, r = 1 / 2 exactly: y = -w */
	float x[19], w[19], y[19];
	(void)state;

	for (int i = 0; i < 19; i++) {
		x[i] = -2.0f;
		w[i] = (float)(i - 9) * 0.125f;
	}
	cop_rmsnorm(x, w, y, 19, 0.0f);
	for (int i = 0; i < 19; i++)
		assert_true(same_bits(y[i], -w[i]) || (w[i] == 0 && y[i] == 0));
	/* zeros with eps 1: r = 1, y = +-0 */
	for (int i = 0; i < 19; i++)
		x[i] = 0.0f;
	cop_rmsnorm(x, w, y, 19, 1.0f);
	for (int i = 0; i < 19; i++)
		assert_true(y[i] == 0.0f);
	/* one element 3, eps 0: r = 1/3 rounded, 3 * r rounds back to 1: y = w */
	x[0] = 3.0f;
	w[0] = 0.75f;
	cop_rmsnorm(x, w, y, 1, 0.0f);
	assert_true(same_bits(y[0], 0.75f));
}

static void test_rmsnorm_random(void **state)
{
	static const size_t ns[] = {1, 5, 16, 17, 128, 256, 1000, 2048};
	struct rng rg = {test_seed("rmsnorm")};
	const float eps = 1e-6f;
	(void)state;

	for (size_t r = 0; r < sizeof(ns) / sizeof(ns[0]); r++) {
		size_t n = ns[r], rows = 3;
		float *x = xmalloc(rows * n * sizeof(float)), *w = xmalloc(n * sizeof(float));
		float *y = xmalloc(rows * n * sizeof(float)),
		      *z = xmalloc(rows * n * sizeof(float));

		for (size_t i = 0; i < rows * n; i++)
			x[i] = rng_unif(&rg, -3, 3) * (i % 7 == 0 ? 100.0f : 1.0f);
		for (size_t i = 0; i < n; i++)
			w[i] = rng_unif(&rg, 0.5f, 1.5f);
		cop_rmsnorm_rows(x, w, y, rows, n, eps);
		for (size_t k = 0; k < rows; k++) {
			const float *xr = x + k * n;
			double ss = 0, inv;

			for (size_t i = 0; i < n; i++)
				ss += (double)xr[i] * xr[i];
			inv = 1.0 / sqrt(ss / (double)n + eps);
			for (size_t i = 0; i < n; i++) {
				double ref = (double)xr[i] * inv * w[i];

				/* tolerance: 1e-5 relative to the element */
				if (fabs(y[k * n + i] - ref) > 1e-5 * fabs(ref))
					fail_msg("n %zu row %zu [%zu]: %.9g vs %.9g", n, k, i,
					         (double)y[k * n + i], ref);
			}
			/* rows = one call per row; in place = out of place */
			cop_rmsnorm(xr, w, z, n, eps);
			assert_memory_equal(z, y + k * n, n * sizeof(float));
		}
		memcpy(z, x, rows * n * sizeof(float));
		cop_rmsnorm_rows(z, w, z, rows, n, eps);
		assert_memory_equal(z, y, rows * n * sizeof(float));
		free(z);
		free(y);
		free(w);
		free(x);
	}
}

/* ---- RoPE ------------------------------------------------------------------------ */

static void test_rope_refused(void **state)
{
	static const struct {
		size_t head_dim, rot;
		double theta;
	} rows[] = {
	    {8, 0, 1e4}, {8, 3, 1e4}, {8, 10, 1e4}, {8, 8, 0}, {8, 8, -1}, {8, 8, NAN},
	};
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, q0[8];

		memcpy(q0, q, sizeof(q));
		assert_int_equal(
		    cop_rope_neox(q, 1, rows[r].head_dim, rows[r].rot, 5, rows[r].theta),
		    IG_E_INVAL);
		assert_memory_equal(q, q0, sizeof(q));
	}
}

static void test_rope_exact(void **state)
{
	struct rng rg = {test_seed("rope exact")};
	float q[4 * 64], q0[4 * 64];
	(void)state;

	/* position 0: the identity, bit for bit (non-zero finite inputs) */
	for (size_t i = 0; i < 4 * 64; i++)
		q[i] = rng_unif(&rg, 0.1f, 4) * (i % 3 ? 1.0f : -1.0f);
	memcpy(q0, q, sizeof(q));
	assert_int_equal(cop_rope_neox(q, 4, 64, 64, 0, 1e7), 0);
	assert_memory_equal(q, q0, sizeof(q));
	assert_int_equal(cop_rope_neox(q, 4, 64, 16, 0, 1e4), 0);
	assert_memory_equal(q, q0, sizeof(q));

	/* head_dim 8, rot 4, pos 1, theta 1e4: pair (0, 2) turns by 1 rad, pair
	 * (1, 3) by 0.01 rad; 4..7 pass through untouched. Two heads, same. */
	{
		float h[16] = {1, 0, 0, 0, 5, 6, 7, 8, 0, 2, 0, 0, -5, -6, -7, -8};
		float c1 = (float)cos(1.0), s1 = (float)sin(1.0);
		float c2 = (float)cos(0.01), s2 = (float)sin(0.01);
		const float expect[16] = {c1, 0,      s1, 0,      5,  6,  7,  8,
		                          0,  2 * c2, 0,  2 * s2, -5, -6, -7, -8};

		assert_int_equal(cop_rope_neox(h, 2, 8, 4, 1, 1e4), 0);
		for (int i = 0; i < 16; i++)
			if (!same_bits(h[i], expect[i]) && !(h[i] == 0 && expect[i] == 0))
				fail_msg("[%d] = %a, expected %a", i, (double)h[i],
				         (double)expect[i]);
	}
}

static void test_rope_random(void **state)
{
	static const struct {
		size_t heads, head_dim, rot;
		int64_t pos;
		double theta;
	} rows[] = {
	    {1, 2, 2, 1, 1e4},        {4, 64, 64, 7, 1e4},       {2, 256, 64, 3, 1e7},
	    {16, 256, 64, 4095, 1e7}, {8, 128, 128, 65535, 1e6}, {2, 256, 64, 262143, 1e7},
	    {3, 10, 6, 100000, 5e5},
	};
	struct rng rg = {test_seed("rope")};
	(void)state;

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		size_t n = rows[r].heads * rows[r].head_dim, h = rows[r].rot / 2;
		float *q = xmalloc(n * sizeof(float)), *q0 = xmalloc(n * sizeof(float));

		for (size_t i = 0; i < n; i++)
			q[i] = rng_unif(&rg, -4, 4);
		memcpy(q0, q, n * sizeof(float));
		assert_int_equal(cop_rope_neox(q, rows[r].heads, rows[r].head_dim, rows[r].rot,
		                               rows[r].pos, rows[r].theta),
		                 0);
		for (size_t hd = 0; hd < rows[r].heads; hd++) {
			const float *a = q0 + hd * rows[r].head_dim;
			const float *b = q + hd * rows[r].head_dim;

			for (size_t i = 0; i < h; i++) {
				double f =
				    pow(rows[r].theta, -2.0 * (double)i / (double)rows[r].rot);
				double ang = (double)rows[r].pos * f;
				double r0 = a[i] * cos(ang) - a[i + h] * sin(ang);
				double r1 = a[i] * sin(ang) + a[i + h] * cos(ang);
				/* tolerance: 1e-5 of the pair's size (the fp32 cos and
				 * sin and two rounded products: a few 1e-7) */
				double tol = 1e-5 * (fabs(a[i]) + fabs(a[i + h]));

				if (fabs(b[i] - r0) > tol || fabs(b[i + h] - r1) > tol)
					fail_msg("row %zu head %zu pair %zu: (%g, %g) vs (%g, %g)",
					         r, hd, i, (double)b[i], (double)b[i + h], r0, r1);
			}
			assert_memory_equal(a + rows[r].rot, b + rows[r].rot,
			                    (rows[r].head_dim - rows[r].rot) * sizeof(float));
		}
		free(q0);
		free(q);
	}
}

/* ---- softmax --------------------------------------------------------------------- */

static void test_softmax_cases(void **state)
{
	static const struct {
		const char *name;
		size_t n;
		float in[5];
		int rc;
		float out[5]; /* NAN: every output must be NaN */
	} rows[] = {
	    {"two equal", 2, {0, 0}, 0, {0.5f, 0.5f}},
	    {"one", 1, {5}, 0, {1}},
	    {"masked one", 2, {0, -INFINITY}, 0, {1, 0}},
	    {"large equal", 4, {1000, 1000, 1000, 1000}, 0, {0.25f, 0.25f, 0.25f, 0.25f}},
	    {"tiny equal", 2, {-1000, -1000}, 0, {0.5f, 0.5f}},
	    {"thirds",
	     5,
	     {88, 88, -INFINITY, 88, -INFINITY},
	     0,
	     {1.0f / 3, 1.0f / 3, 0, 1.0f / 3, 0}},
	    {"far apart", 2, {0, -200}, 0, {1, 0}}, /* expf(-200) underflows to 0 */
	    {"all masked", 3, {-INFINITY, -INFINITY, -INFINITY}, IG_E_INVAL, {0, 0, 0}},
	    {"nan", 3, {1, NAN, 2}, IG_E_INVAL, {NAN, NAN, NAN}},
	    {"plus inf", 2, {INFINITY, 0}, IG_E_INVAL, {NAN, NAN}},
	};
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		float x[5];

		memcpy(x, rows[r].in, sizeof(x));
		assert_int_equal(cop_softmax(x, rows[r].n), rows[r].rc);
		for (size_t i = 0; i < rows[r].n; i++) {
			int ok =
			    isnan(rows[r].out[i]) ? isnan(x[i]) : same_bits(x[i], rows[r].out[i]);

			if (!ok)
				fail_msg("%s: [%zu] = %a, expected %a", rows[r].name, i,
				         (double)x[i], (double)rows[r].out[i]);
		}
		for (size_t i = rows[r].n; i < 5; i++) /* nothing past n */
			assert_true(same_bits(x[i], rows[r].in[i]));
	}
	assert_int_equal(cop_softmax(NULL, 0), 0);
}

static void test_softmax_random(void **state)
{
	static const size_t ns[] = {1, 2, 7, 100, 1000, 4097};
	struct rng rg = {test_seed("softmax")};
	(void)state;

	for (size_t r = 0; r < sizeof(ns) / sizeof(ns[0]); r++) {
		size_t n = ns[r];
		float *x = xmalloc(n * sizeof(float)), *x0 = xmalloc(n * sizeof(float));
		double m = -INFINITY, sum = 0, total = 0;

		for (size_t i = 0; i < n; i++) {
			x[i] = rng_unif(&rg, -10, 10);
			if (i % 5 == 4)
				x[i] = -INFINITY;
			x0[i] = x[i];
			if (x[i] > m)
				m = x[i];
		}
		for (size_t i = 0; i < n; i++)
			sum += exp((double)x0[i] - m);
		assert_int_equal(cop_softmax(x, n), 0);
		for (size_t i = 0; i < n; i++) {
			double ref = exp((double)x0[i] - m) / sum;

			/* tolerance: 1e-5 relative to the element (expf, the fp32
			 * sum and one division) */
			if (fabs(x[i] - ref) > 1e-5 * ref)
				fail_msg("n %zu [%zu]: %.9g vs %.9g", n, i, (double)x[i], ref);
			if (x0[i] == -INFINITY)
				assert_true(same_bits(x[i], 0.0f));
			total += x[i];
		}
		assert_true(fabs(total - 1.0) < 1e-5);
		free(x0);
		free(x);
	}
}

/* ---- SwiGLU and the element-wise helpers ------------------------------------ */

static void test_swiglu(void **state)
{
	static const size_t ns[] = {1, 9, 1000};
	struct rng rg = {test_seed("swiglu")};
	/* exact: silu(0) = 0; silu(100) = 100 (1 + expf(-100) rounds to 1);
	 * silu(-200) = -200 / inf = -0 */
	const float g[3] = {0, 100, -200}, u[3] = {3, -1.5f, 2};
	float o[3];
	(void)state;

	cop_swiglu(g, u, o, 3);
	assert_true(same_bits(o[0], 0.0f));
	assert_true(same_bits(o[1], -150.0f));
	assert_true(o[2] == 0.0f);

	for (size_t r = 0; r < sizeof(ns) / sizeof(ns[0]); r++) {
		size_t n = ns[r];
		float *gate = xmalloc(n * sizeof(float)), *up = xmalloc(n * sizeof(float));
		float *out = xmalloc(n * sizeof(float));

		for (size_t i = 0; i < n; i++) {
			gate[i] = rng_unif(&rg, -12, 12);
			up[i] = rng_unif(&rg, -3, 3);
		}
		cop_swiglu(gate, up, out, n);
		for (size_t i = 0; i < n; i++) {
			double ref = (double)gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];

			/* tolerance: 1e-5 relative to the element */
			if (fabs(out[i] - ref) > 1e-5 * fabs(ref))
				fail_msg("n %zu [%zu]: silu(%g) * %g = %.9g vs %.9g", n, i,
				         (double)gate[i], (double)up[i], (double)out[i], ref);
		}
		/* in place over gate */
		cop_swiglu(gate, up, gate, n);
		assert_memory_equal(gate, out, n * sizeof(float));
		free(out);
		free(up);
		free(gate);
	}
}

static void test_elementwise(void **state)
{
	const float a[5] = {1, -2.5f, 1e30f, 0.1f, -0.0f};
	const float b[5] = {2, 0.5f, 1e30f, 0.2f, 0.0f};
	float o[5], c[5];
	(void)state;

	cop_add(a, b, o, 5);
	for (int i = 0; i < 5; i++)
		assert_true(same_bits(o[i], a[i] + b[i]));
	cop_mul(a, b, o, 5);
	for (int i = 0; i < 5; i++)
		assert_true(same_bits(o[i], a[i] * b[i]));
	cop_scale(a, -0.5f, o, 5);
	for (int i = 0; i < 5; i++)
		assert_true(same_bits(o[i], a[i] * -0.5f));
	/* in place */
	memcpy(c, a, sizeof(c));
	cop_add(c, b, c, 5);
	cop_add(a, b, o, 5);
	assert_memory_equal(c, o, sizeof(c));
	memcpy(c, a, sizeof(c));
	cop_scale(c, 3.0f, c, 5);
	cop_scale(a, 3.0f, o, 5);
	assert_memory_equal(c, o, sizeof(c));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pool_create_refused),
	    cmocka_unit_test(test_pool_partition),
	    cmocka_unit_test(test_pool_many_runs),
	    cmocka_unit_test(test_dot_order_exact),
	    cmocka_unit_test(test_dot_random),
	    cmocka_unit_test(test_matmul_2x3),
	    cmocka_unit_test(test_matmul_empty),
	    cmocka_unit_test(test_matmul_random),
	    cmocka_unit_test(test_matmul_types),
	    cmocka_unit_test(test_matmul_special_values),
	    cmocka_unit_test(test_matmul_base_kernels),
	    cmocka_unit_test(test_matmul_speed),
	    cmocka_unit_test(test_rmsnorm_exact),
	    cmocka_unit_test(test_rmsnorm_random),
	    cmocka_unit_test(test_rope_refused),
	    cmocka_unit_test(test_rope_exact),
	    cmocka_unit_test(test_rope_random),
	    cmocka_unit_test(test_softmax_cases),
	    cmocka_unit_test(test_softmax_random),
	    cmocka_unit_test(test_swiglu),
	    cmocka_unit_test(test_elementwise),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
