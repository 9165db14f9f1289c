/*
 * test_kvpool.c - the paged KV pool as scripts of operations: all-or-nothing
 * reservations that never grow, pages back on free, and the invariant checker
 * after every step; the admission arithmetic as a table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu-worker/backend/kvpool.h"

static void test_pages_for(void **state)
{
	static const struct {
		uint64_t prompt, cap, context;
		uint32_t pages;
	} rows[] = {
	    {0, 1, 131072, 1},
	    {1, 0, 131072, 1},
	    {64, 0, 131072, 1},
	    {65, 0, 131072, 2},
	    {100, 38912, 131072, 610},
	    {100000, 38912, 131072, 2048},
	    {131072, 1, 131072, 2048},
	    {5, 59, 64, 1},
	    {5, 60, 64, 1},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (kvpool_pages_for(rows[i].prompt, rows[i].cap, rows[i].context) != rows[i].pages)
			fail_msg("row %zu: prompt %llu cap %llu context %llu: %u pages, want %u", i,
			         (unsigned long long)rows[i].prompt,
			         (unsigned long long)rows[i].cap,
			         (unsigned long long)rows[i].context,
			         kvpool_pages_for(rows[i].prompt, rows[i].cap, rows[i].context),
			         rows[i].pages);
}

static void check(const struct kvpool *p, struct kvseq *seqs, const bool *live, uint32_t n)
{
	const struct kvseq *list[64];
	struct ig_errbuf eb;
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		if (live[i])
			list[k++] = &seqs[i];
	if (!kvpool_check(p, list, k, &eb))
		fail_msg("invariant broken: %s", eb.msg);
}

static void test_all_or_nothing(void **state)
{
	static unsigned char region[10 * 128];
	struct kvseq a = {0}, b = {0}, c = {0};
	struct kvpool p;
	struct ig_errbuf eb;
	int err;

	(void)state;
	assert_int_equal(kvpool_init(&p, region, 128, 10, &eb), IG_E_OK);
	assert_true(kvpool_try_reserve(&p, &a, 1, 6, &err));
	assert_int_equal(p.n_free, 4);
	/* 5 do not fit in 4: nothing taken */
	assert_false(kvpool_try_reserve(&p, &b, 2, 5, &err));
	assert_int_equal(err, IG_E_OK);
	assert_int_equal(p.n_free, 4);
	assert_null(b.table);
	assert_true(kvpool_try_reserve(&p, &b, 2, 4, &err));
	assert_int_equal(p.n_free, 0);
	assert_false(kvpool_try_reserve(&p, &c, 3, 1, &err));
	/* the pages are distinct and inside the region */
	for (uint32_t i = 0; i < 6; i++)
		assert_ptr_equal(kvpool_page(&p, a.table[i]), region + 128 * a.table[i]);
	kvpool_free(&p, &a);
	kvpool_free(&p, &a); /* idempotent */
	assert_int_equal(p.n_free, 6);
	assert_true(kvpool_try_reserve(&p, &c, 3, 6, &err));
	{
		const struct kvseq *live[] = {&b, &c};

		assert_true(kvpool_check(&p, live, 2, &eb));
		/* the checker catches a table that lies */
		c.table[0] = b.table[0];
		assert_false(kvpool_check(&p, live, 2, &eb));
		assert_non_null(strstr(eb.msg, "sequence"));
	}
	kvpool_release(&p);
	free(b.table);
	free(c.table);
}

/* A checkpoint's pages shared by a claimant: counted, freed by the last
 * table that lets them go, and the checker catches a count that lies. */
static void test_shared_pages(void **state)
{
	static unsigned char region[128 * 6];
	struct kvpool p;
	struct kvseq ck = {0}, a = {0}, b = {0};
	struct ig_errbuf eb;
	int err;

	(void)state;
	assert_int_equal(kvpool_init(&p, region, 128, 6, &eb), IG_E_OK);
	assert_true(kvpool_try_reserve(&p, &ck, 100, 3, &err));
	/* a claimant shares the first two, takes three fresh */
	assert_true(kvpool_try_reserve_after(&p, &a, 1, ck.table, 2, 5, &err));
	assert_int_equal(p.n_free, 0);
	assert_int_equal(a.table[0], ck.table[0]);
	assert_int_equal(a.table[1], ck.table[1]);
	assert_int_equal(kvpool_private(&p, &a), 3);
	assert_int_equal(kvpool_private(&p, &ck), 1);
	/* a second claimant cannot: its fresh pages do not fit, and nothing moved */
	assert_false(kvpool_try_reserve_after(&p, &b, 2, ck.table, 2, 3, &err));
	assert_int_equal(err, IG_E_OK);
	assert_int_equal(p.refs[ck.table[0]], 2);
	{
		const struct kvseq *live[] = {&ck, &a};

		assert_true(kvpool_check(&p, live, 2, &eb));
		/* a table left out: its pages are counted once more than listed */
		assert_false(kvpool_check(&p, live, 1, &eb));
		assert_non_null(strstr(eb.msg, "counted"));
	}
	/* the checkpoint goes: only its own page is free; the shared ones stay */
	kvpool_free(&p, &ck);
	assert_int_equal(p.n_free, 1);
	assert_int_equal(kvpool_private(&p, &a), 5);
	{
		const struct kvseq *live[] = {&a};

		assert_true(kvpool_check(&p, live, 1, &eb));
		/* a page listed twice by one table */
		uint32_t keep = a.table[1];

		a.table[1] = a.table[0];
		assert_false(kvpool_check(&p, live, 1, &eb));
		a.table[1] = keep;
	}
	kvpool_free(&p, &a);
	assert_int_equal(p.n_free, 6);
	assert_true(kvpool_check(&p, NULL, 0, &eb));
	kvpool_release(&p);
}

static void test_random_scripts(void **state)
{
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 20261129u, s;
	enum { N = 48, PAGES = 300 };
	static unsigned char region[PAGES * 64];

	(void)state;
	printf("# kvpool scripts seed %llu (IGNIS_TEST_SEED repeats another)\n",
	       (unsigned long long)seed);
	s = seed;
	for (int script = 0; script < 50; script++) {
		struct kvseq seqs[N] = {{0}};
		bool live[N] = {false};
		struct kvpool p;
		struct ig_errbuf eb;

		assert_int_equal(kvpool_init(&p, region, 64, PAGES, &eb), IG_E_OK);
		for (int step = 0; step < 400; step++) {
			uint32_t i, want;
			int err;

			s = s * 6364136223846793005ull + 1442695040888963407ull;
			i = (uint32_t)(s >> 33) % N;
			want = 1 + (uint32_t)(s >> 13) % 40;
			if (live[i]) {
				kvpool_free(&p, &seqs[i]);
				live[i] = false;
			} else {
				uint32_t before = p.n_free;
				bool got = kvpool_try_reserve(&p, &seqs[i], i, want, &err);

				assert_int_equal(got, want <= before);
				assert_int_equal(p.n_free, got ? before - want : before);
				live[i] = got;
			}
			check(&p, seqs, live, N);
		}
		for (uint32_t i = 0; i < N; i++)
			kvpool_free(&p, &seqs[i]);
		assert_int_equal(p.n_free, PAGES);
		kvpool_release(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pages_for),
	    cmocka_unit_test(test_all_or_nothing),
	    cmocka_unit_test(test_shared_pages),
	    cmocka_unit_test(test_random_scripts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
