/*
 * test_logprobs.c - log-probabilities of a pick (sampler.h, smp_logprobs;
 * docs/adr/0053), as rows: known logits and the exact values they give
 * (log_softmax in double, summed in id order), the top list's order and
 * its ties to the lower id, NaN, -inf and +inf logits, k 0 and k past
 * SMP_TOP_LOGPROBS_MAX; and seeded random logits (IGNIS_TEST_SEED repeats
 * another run) against a plain reference: every lp <= 0, their exps
 * summing to 1, the list the reference's sort, the same bits on a second
 * call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include <cmocka.h>

#include "gpu-worker/engine/sampler.h"
#include "testutil.h"

#define DEFAULT_SEED 53u

struct row {
	const char *name;
	float logits[8];
	uint32_t vocab, tok, k;
	double tok_lp;   /* NAN: computed below as the reference's */
	uint32_t n;      /* the top list's length */
	uint32_t ids[8]; /* its ids in order */
};

/* log(1 + e^-1 + e^-2) and friends, written out: the rows' exact values
 * are the formula's, in the documented order. */
static double lse3(void)
{
	return log(exp(0.0) + exp(-1.0) + exp(-2.0));
}

static const struct row rows[] = {
    {"three, descending", {2.0f, 1.0f, 0.0f}, 3, 0, 3, NAN, 3, {0, 1, 2}},
    {"three, ascending", {0.0f, 1.0f, 2.0f}, 3, 0, 3, NAN, 3, {2, 1, 0}},
    {"ties to the lower id", {1.0f, 3.0f, 1.0f, 3.0f, 1.0f}, 5, 4, 4, NAN, 4, {1, 3, 0, 2}},
    {"k 0: no list", {1.0f, 2.0f}, 2, 1, 0, NAN, 0, {0}},
    {"k past the vocabulary", {1.0f, 2.0f}, 2, 0, 20, NAN, 2, {1, 0}},
    {"NaN: no probability, never listed", {NAN, 1.0f, 1.0f}, 3, 0, 20, -INFINITY, 2, {1, 2}},
    {"-inf: no probability, never listed", {-INFINITY, 0.5f, 0.0f}, 3, 0, 20, -INFINITY, 2, {1, 2}},
    {"+inf shares the mass",
     {INFINITY, 1.0f, INFINITY, 5.0f},
     4,
     2,
     20,
     -0.69314718055994529,
     2,
     {0, 2}},
    {"+inf: the rest have none", {INFINITY, 1.0f}, 2, 1, 20, -INFINITY, 1, {0}},
    {"all NaN or -inf", {NAN, -INFINITY}, 2, 1, 20, -INFINITY, 0, {0}},
    {"one id", {-3.0f}, 1, 0, 20, 0.0, 1, {0}},
};

/* The plain reference: m the largest non-NaN, s the sum in id order. */
static double ref_lp(const float *x, uint32_t vocab, uint32_t id)
{
	double m = -INFINITY, s = 0.0;

	for (uint32_t i = 0; i < vocab; i++)
		if (!isnan(x[i]) && (double)x[i] > m)
			m = (double)x[i];
	for (uint32_t i = 0; i < vocab; i++)
		if (!isnan(x[i]))
			s += exp((double)x[i] - m);
	return isnan(x[id]) ? -INFINITY : ((double)x[id] - m) - log(s);
}

static void test_rows(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		const struct row *w = &rows[r];
		struct smp_logprob top[SMP_TOP_LOGPROBS_MAX];
		double lp,
		    want = isnan(w->tok_lp) ? ref_lp(w->logits, w->vocab, w->tok) : w->tok_lp;
		uint32_t n = 99, k = w->k;

		smp_logprobs(w->logits, w->vocab, w->tok, k, &lp, top, &n);
		if (!(lp == want))
			fail_msg("%s: lp %.17g, want %.17g", w->name, lp, want);
		if (n != w->n)
			fail_msg("%s: %u in the list, want %u", w->name, n, w->n);
		for (uint32_t j = 0; j < n; j++) {
			if (top[j].id != w->ids[j])
				fail_msg("%s: list[%u] is id %u, want %u", w->name, j, top[j].id,
				         w->ids[j]);
			if (top[j].id == w->tok && !(top[j].lp == lp))
				fail_msg("%s: the sampled token's entry differs", w->name);
		}
	}
	/* the first row written out: 2, 1, 0 give -log(1 + e^-1 + e^-2) and on */
	{
		const float x[3] = {2.0f, 1.0f, 0.0f};
		struct smp_logprob top[3];
		uint32_t n;
		double lp;

		smp_logprobs(x, 3, 1, 3, &lp, top, &n);
		assert_true(lp == -1.0 - lse3());
		assert_true(top[0].lp == 0.0 - lse3() && top[2].lp == -2.0 - lse3());
		assert_true(lp == top[1].lp);
	}
}

static void test_random(void **state)
{
	enum { VOCAB = 5000 };
	uint64_t seed = test_seed("logprobs");
	struct rng g = {seed};
	float *x = malloc(VOCAB * sizeof(float));

	(void)state;
	assert_non_null(x);
	for (int t = 0; t < 50; t++) {
		uint32_t vocab = 1 + (uint32_t)(rng_next(&g) % VOCAB), k = (uint32_t)(t % 21);
		uint32_t tok = (uint32_t)(rng_next(&g) % vocab), n, n2;
		struct smp_logprob top[SMP_TOP_LOGPROBS_MAX], top2[SMP_TOP_LOGPROBS_MAX];
		double lp, lp2, mass = 0.0;

		for (uint32_t i = 0; i < vocab; i++) /* coarse values: many ties */
			x[i] = (float)((int)(rng_next(&g) % 64) - 32) * (t % 2 ? 0.25f : 3.0f);
		smp_logprobs(x, vocab, tok, k, &lp, top, &n);
		assert_true(lp == ref_lp(x, vocab, tok));
		assert_int_equal(n, k < vocab ? k : vocab);
		for (uint32_t j = 0; j < n; j++) {
			/* the reference's order: logit descending, ties to the lower id */
			uint32_t better = 0;

			for (uint32_t i = 0; i < vocab; i++)
				better +=
				    x[i] > x[top[j].id] || (x[i] == x[top[j].id] && i < top[j].id);
			if (better != j)
				fail_msg("seed %llu case %d: list[%u] (id %u) has %u ahead of it",
				         (unsigned long long)seed, t, j, top[j].id, better);
			assert_true(top[j].lp == ref_lp(x, vocab, top[j].id));
			assert_true(top[j].lp <= 0.0);
		}
		for (uint32_t i = 0; i < vocab; i++)
			mass += exp(ref_lp(x, vocab, i));
		assert_true(fabs(mass - 1.0) < 1e-9);
		/* the same bits again */
		smp_logprobs(x, vocab, tok, k, &lp2, top2, &n2);
		assert_int_equal(n2, n);
		assert_memory_equal(&lp, &lp2, sizeof(lp));
		for (uint32_t j = 0; j < n; j++) {
			assert_int_equal(top[j].id, top2[j].id);
			assert_memory_equal(&top[j].lp, &top2[j].lp, sizeof(double));
		}
	}
	free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rows),
	    cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
