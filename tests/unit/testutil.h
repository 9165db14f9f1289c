/*
 * testutil.h - helpers the numeric unit tests share: a seeded splitmix64,
 * the seed taken from IGNIS_TEST_SEED and printed, checked allocation, and a
 * thread pool of n threads. Include after <cmocka.h>; a test defines
 * DEFAULT_SEED before using test_seed().
 */
#ifndef IGNIS_TESTS_TESTUTIL_H
#define IGNIS_TESTS_TESTUTIL_H

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu-worker/backend/cpu/cpu_pool.h"
#include "common/err.h"

struct rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct rng *r)
{
	/* splitmix64 */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float rng_unif(struct rng *r, float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(rng_next(r) >> 11) * 0x1p-53);
}

static inline uint64_t test_seed_or(const char *what, uint64_t dflt)
{
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : dflt;

	print_message("# %s: seed %" PRIu64 " (set IGNIS_TEST_SEED to try another)\n", what, seed);
	return seed;
}
#define test_seed(what) test_seed_or((what), DEFAULT_SEED)

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	assert_non_null(p);
	return p;
}

static inline struct cpool *pool_of(int n)
{
	struct ig_errbuf eb = {0};
	struct cpool *p = NULL;

	if (cpool_create(&p, n, &eb))
		fail_msg("cpool_create(%d): %s", n, eb.msg);
	return p;
}

#endif
