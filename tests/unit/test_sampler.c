/*
 * test_sampler.c - the per-sequence sampler.
 *
 *   - params checks as rows (field named, range given); params as sent
 *     (doubles, from the wire or a command line) as rows: refusals name
 *     the value sent, and a positive value a float cannot hold picks as
 *     that value does;
 *   - greedy rows (ties, NaN, infinities); top_k 1 is greedy;
 *   - the RNG: a golden first 8 tokens, 1000 picks the same for the same
 *     seed, different for another, exactly one draw per pick;
 *   - the serialised state: golden bytes, refusals, and a save/load in the
 *     middle continuing exactly as the uninterrupted run;
 *   - frequencies of 20,000 picks within 2% of the expected;
 *   - top_p cut rows (probabilities, p -> the kept set, in order), NaN and
 *     infinity rows, both read from smp_pick_at over a grid of draws;
 *   - seeded random logits and params (IGNIS_TEST_SEED repeats another run)
 *     against a plain sort-everything reference, over one scratch reused
 *     from 1 to 50,000 ids.
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

#define GAMMA UINT64_C(0x9E3779B97F4A7C15)

/* The largest double below 1: the last draw smp_next_u can give. */
#define U_LAST (1.0 - 0x1.0p-53)

static struct smp_scratch *scratch_for(uint32_t vocab)
{
	struct smp_scratch *s = malloc(smp_scratch_bytes(vocab));

	assert_non_null(s);
	return s;
}

/* ---- params -------------------------------------------------------------------- */

struct check_row {
	const char *name;
	struct smp_params p;
	uint32_t vocab;
	int rc;
	const char *say;
};

static const struct check_row check_rows[] = {
    {"greedy", {0.0f, 0, 1.0f, 1}, 260, IG_E_OK, NULL},
    {"the widest accepted", {100.0f, 260, 1.0f, 1}, 260, IG_E_OK, NULL},
    {"a tiny top_p", {1.0f, 0, 1e-6f, 1}, 260, IG_E_OK, NULL},
    {"negative temperature",
     {-0.5f, 0, 1.0f, 1},
     260,
     IG_E_INVAL,
     "sampler temperature -0.5 is out of range: accepted 0 (greedy) to 100"},
    {"temperature above 100",
     {100.5f, 0, 1.0f, 1},
     260,
     IG_E_INVAL,
     "sampler temperature 100.5 is out of range"},
    {"NaN temperature", {NAN, 0, 1.0f, 1}, 260, IG_E_INVAL, "sampler temperature nan"},
    {"top_p 0",
     {1.0f, 0, 0.0f, 1},
     260,
     IG_E_INVAL,
     "sampler top_p 0 is out of range: accepted above 0 up to 1 (1 keeps all)"},
    {"top_p above 1", {1.0f, 0, 1.5f, 1}, 260, IG_E_INVAL, "sampler top_p 1.5 is out of range"},
    {"NaN top_p", {1.0f, 0, NAN, 1}, 260, IG_E_INVAL, "sampler top_p nan"},
    {"top_k above the vocabulary",
     {1.0f, 261, 1.0f, 1},
     260,
     IG_E_INVAL,
     "sampler top_k 261 is larger than the vocabulary of 260 ids: accepted 0 (all) to 260"},
    {"an empty vocabulary", {1.0f, 0, 1.0f, 1}, 0, IG_E_INVAL, "a vocabulary of 0 ids"},
};

static void test_params_check(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(check_rows) / sizeof(check_rows[0]); r++) {
		const struct check_row *row = &check_rows[r];
		struct ig_errbuf eb = {0};
		int rc = smp_params_check(&row->p, row->vocab, &eb);

		print_message("row: %s\n", row->name);
		if (rc != row->rc)
			fail_msg("%s: rc %d, want %d (%s)", row->name, rc, row->rc, eb.msg);
		if (row->say && !strstr(eb.msg, row->say))
			fail_msg("%s: message '%s' lacks '%s'", row->name, eb.msg, row->say);
	}
}

/* Params as sent: doubles, as the wire's f64 fields and the command lines
 * carry them. */
struct set_row {
	const char *name;
	double temperature, top_p;
	int rc;
	const char *say;      /* in the message */
	float want_t, want_p; /* the params set, when accepted */
};

static const struct set_row set_rows[] = {
    {"greedy", 0.0, 1.0, IG_E_OK, NULL, 0.0f, 1.0f},
    {"0.9 as a float", 0.7, 0.9, IG_E_OK, NULL, 0.7f, 0.9f},
    /* 1e-300 is above 0, but no float is: the smallest float keeps the
     * first candidate, as 1e-300 does (rule 5). */
    {"top_p 1e-300", 1.0, 1e-300, IG_E_OK, NULL, 1.0f, 0x1p-149f},
    {"temperature 1e-300", 1e-300, 1.0, IG_E_OK, NULL, 0x1p-149f, 1.0f},
    {"top_p 0", 1.0, 0.0, IG_E_INVAL,
     "sampler top_p 0 is out of range: accepted above 0 up to 1 (1 keeps all)", 0, 0},
    {"top_p -0", 1.0, -0.0, IG_E_INVAL, "sampler top_p -0 is out of range", 0, 0},
    {"top_p just above 1", 1.0, 1.0000001, IG_E_INVAL, "sampler top_p 1.0000001 is out of range", 0,
     0},
    {"top_p the double after 1", 1.0, 0x1.0000000000001p0, IG_E_INVAL,
     "sampler top_p 1.0000000000000002 is out of range", 0, 0},
    {"top_p NaN", 1.0, NAN, IG_E_INVAL, "sampler top_p nan is out of range", 0, 0},
    {"temperature 1e40", 1e40, 1.0, IG_E_INVAL,
     "sampler temperature 1e+40 is out of range: accepted 0 (greedy) to 100", 0, 0},
    {"temperature just above 100", 100.000001, 1.0, IG_E_INVAL,
     "sampler temperature 100.000001 is out of range", 0, 0},
    {"temperature -1e-300", -1e-300, 1.0, IG_E_INVAL, "sampler temperature -1e-300", 0, 0},
    {"temperature infinity", INFINITY, 1.0, IG_E_INVAL, "sampler temperature inf", 0, 0},
};

static void test_params_set(void **state)
{
	struct smp_scratch *scr = scratch_for(8);
	/* Two ids tie at the top: a tiny top_p keeps the first (id 1), as
	 * greedy picks it. */
	static const float logits[4] = {0.5f, 2.0f, 2.0f, -1.0f};

	(void)state;
	for (size_t r = 0; r < sizeof(set_rows) / sizeof(set_rows[0]); r++) {
		const struct set_row *row = &set_rows[r];
		struct ig_errbuf eb = {0};
		struct smp_params p = {0};
		int rc = smp_params_set(&p, row->temperature, 3, row->top_p, 77, &eb);

		print_message("row: %s\n", row->name);
		if (rc != row->rc)
			fail_msg("%s: rc %d, want %d (%s)", row->name, rc, row->rc, eb.msg);
		if (rc) {
			if (!strstr(eb.msg, row->say))
				fail_msg("%s: message '%s' lacks '%s'", row->name, eb.msg,
				         row->say);
			continue;
		}
		if (p.temperature != row->want_t || p.top_p != row->want_p || p.top_k != 3 ||
		    p.seed != 77)
			fail_msg("%s: set T %a top_p %a top_k %u seed %llu", row->name,
			         (double)p.temperature, (double)p.top_p, p.top_k,
			         (unsigned long long)p.seed);
		if (smp_params_check(&p, 4, &eb))
			fail_msg("%s: set params do not check: %s", row->name, eb.msg);
		if (row->top_p < 1e-6)
			for (double u = 0.0; u < 1.0; u += 0.125)
				assert_int_equal(smp_pick_at(&p, u, logits, 4, scr), 1);
	}
	free(scr);
}

/* ---- greedy -------------------------------------------------------------------- */

struct greedy_row {
	const char *name;
	float logits[6];
	uint32_t vocab;
	uint32_t want;
};

static const struct greedy_row greedy_rows[] = {
    {"the largest", {0.1f, 2.0f, -1.0f, 1.9f}, 4, 1},
    {"ties to the lowest id", {1.0f, 3.0f, 3.0f, 3.0f}, 4, 1},
    {"all equal: id 0", {5.0f, 5.0f, 5.0f}, 3, 0},
    {"all negative", {-3.0f, -2.0f, -7.0f}, 3, 1},
    {"one id", {-1e30f}, 1, 0},
    {"NaN is never picked", {NAN, 1.0f, NAN, 0.5f}, 4, 1},
    {"NaN first and last", {NAN, -5.0f, -4.0f, NAN}, 4, 2},
    {"all NaN: id 0", {NAN, NAN, NAN}, 3, 0},
    {"+inf wins", {1e30f, INFINITY, 3.0f}, 3, 1},
    {"two +inf: the lower id", {0.0f, INFINITY, NAN, INFINITY}, 4, 1},
    {"-inf loses", {-INFINITY, -1e30f, -INFINITY}, 3, 1},
    {"all -inf: id 0", {-INFINITY, -INFINITY}, 2, 0},
    {"NaN and -inf: the lowest non-NaN", {NAN, -INFINITY, -INFINITY}, 3, 1},
};

static void test_greedy_rows(void **state)
{
	struct smp_scratch *scr = scratch_for(8);

	(void)state;
	for (size_t r = 0; r < sizeof(greedy_rows) / sizeof(greedy_rows[0]); r++) {
		const struct greedy_row *row = &greedy_rows[r];
		/* temperature 0 whatever top_p; top_k 1 at any temperature. */
		const struct smp_params ps[] = {
		    {0.0f, 0, 1.0f, 7},
		    {0.0f, 0, 0.3f, 7},
		    {0.7f, 1, 1.0f, 7},
		    {100.0f, 1, 0.5f, 7},
		};

		print_message("row: %s\n", row->name);
		for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
			struct smp_state st;

			smp_init(&st, &ps[i]);
			for (int k = 0; k < 5; k++) {
				uint32_t got = smp_pick(&ps[i], &st, row->logits, row->vocab, scr);

				if (got != row->want)
					fail_msg("%s, params %zu: picked %u, want %u", row->name, i,
					         got, row->want);
			}
			/* Greedy picks draw too: the stream stays aligned. */
			assert_int_equal(st.step, 5);
			assert_int_equal(st.rng, 7 + 5 * GAMMA);
		}
	}
	free(scr);
}

/* ---- the RNG --------------------------------------------------------------------- */

/* The fixed case of the golden and the sequence tests: 8 ids. */
static const float case_logits[8] = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f, 2.5f, 0.0f, 1.5f};
static const struct smp_params case_params = {0.8f, 6, 0.95f, 42};

static void run_case(const struct smp_params *p, uint32_t *out, int n)
{
	struct smp_scratch *scr = scratch_for(8);
	struct smp_state st;

	smp_init(&st, p);
	for (int i = 0; i < n; i++)
		out[i] = smp_pick(p, &st, case_logits, 8, scr);
	assert_int_equal(st.step, (uint64_t)n);
	free(scr);
}

static void test_golden_first_tokens(void **state)
{
	/* Worked out independently: of ids sorted 3 5 1 7 0 2 by logit, top_k
	 * 6 keeps all but 4 and 6, and top_p 0.95 cuts id 2 (0.979 of the mass
	 * is reached at id 0); draws 0.7416, ... walk the rest. */
	static const uint32_t golden[8] = {5, 3, 3, 3, 3, 1, 3, 1};
	uint32_t got[8];
	struct smp_state st;

	(void)state;
	run_case(&case_params, got, 8);
	printf("# golden: T 0.8, top_k 6, top_p 0.95, seed 42:");
	for (int i = 0; i < 8; i++)
		printf(" %u", got[i]);
	printf("\n");
	assert_memory_equal(got, golden, sizeof(golden));
	/* The draws themselves: splitmix64's first output from seed 0 is
	 * 0xE220A8397B1DCDAF (the published reference), from 42 as below. */
	smp_init(&st, &(struct smp_params){1.0f, 0, 1.0f, 0});
	assert_true(smp_next_u(&st) == (double)(UINT64_C(0xE220A8397B1DCDAF) >> 11) * 0x1.0p-53);
	smp_init(&st, &case_params);
	assert_true(smp_next_u(&st) == 0x1.7bae644c5fd6dp-1);
}

static void test_same_seed_same_sequence(void **state)
{
	uint32_t a[1000], b[1000], c[1000];
	struct smp_params other = case_params;
	int differ = 0;

	(void)state;
	run_case(&case_params, a, 1000);
	run_case(&case_params, b, 1000);
	assert_memory_equal(a, b, sizeof(a));
	other.seed = 43;
	run_case(&other, c, 1000);
	for (int i = 0; i < 1000; i++)
		differ += a[i] != c[i];
	/* Most picks differ (about 0.7 of them for this distribution). */
	assert_true(differ > 400);
}

static void test_one_draw_per_pick(void **state)
{
	struct smp_state st;
	struct smp_params p = case_params;

	(void)state;
	p.seed = UINT64_MAX;
	smp_init(&st, &p);
	for (int i = 0; i < 3; i++)
		smp_next_u(&st);
	assert_int_equal(st.step, 3);
	assert_int_equal(st.rng, UINT64_MAX + 3 * GAMMA);
	/* u stays in [0, 1) over many draws. */
	for (int i = 0; i < 100000; i++) {
		double u = smp_next_u(&st);

		assert_true(u >= 0.0 && u < 1.0);
	}
}

/* ---- the serialised state -------------------------------------------------------- */

static void test_state_bytes(void **state)
{
	static const uint8_t golden[SMP_STATE_BYTES] = {
	    1,    0,    0,    0,    0,    0,    0,    0,    /* version, reserved */
	    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* rng */
	    0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01, /* step */
	};
	const struct smp_state st = {UINT64_C(0x0102030405060708), UINT64_C(0x0123456789ABCDEF)};
	struct smp_state back = {0, 0}, keep;
	struct ig_errbuf eb = {0};
	uint8_t b[SMP_STATE_BYTES];

	(void)state;
	smp_state_save(&st, b);
	assert_memory_equal(b, golden, sizeof(golden));
	assert_int_equal(smp_state_load(&back, b, &eb), IG_E_OK);
	assert_memory_equal(&back, &st, sizeof(st));

	keep = back;
	b[0] = 2;
	assert_int_equal(smp_state_load(&back, b, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "sampler state version 2 is not supported: accepted "
	                               "version 1"));
	assert_memory_equal(&back, &keep, sizeof(keep));
	b[0] = 0;
	assert_int_equal(smp_state_load(&back, b, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "version 0"));
	b[0] = 1;
	b[5] = 0x80;
	assert_int_equal(smp_state_load(&back, b, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "reserved byte 5 is 0x80"));
	assert_memory_equal(&back, &keep, sizeof(keep));
}

/* Save at every cut point of a run and resume in a fresh state: the same
 * tokens as the uninterrupted run, and the same final state. */
static void test_resume_is_exact(void **state)
{
	enum { N = 1000 };
	static const uint32_t cuts[] = {0, 1, 2, 377, 998, 999, 1000};
	static uint32_t whole[N], part[N];
	struct smp_scratch *scr = scratch_for(8);
	const struct smp_params *p = &case_params;
	struct smp_state st, end;

	(void)state;
	smp_init(&st, p);
	for (int i = 0; i < N; i++)
		whole[i] = smp_pick(p, &st, case_logits, 8, scr);
	end = st;
	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
		struct ig_errbuf eb = {0};
		uint8_t img[SMP_STATE_BYTES];
		struct smp_state resumed;

		smp_init(&st, p);
		for (uint32_t i = 0; i < cuts[c]; i++)
			part[i] = smp_pick(p, &st, case_logits, 8, scr);
		smp_state_save(&st, img);
		memset(&st, 0xA5, sizeof(st)); /* the old state is gone */
		memset(&resumed, 0x5A, sizeof(resumed));
		assert_int_equal(smp_state_load(&resumed, img, &eb), IG_E_OK);
		for (uint32_t i = cuts[c]; i < N; i++)
			part[i] = smp_pick(p, &resumed, case_logits, 8, scr);
		if (memcmp(part, whole, sizeof(whole)))
			fail_msg("resumed at %u: the tokens differ", cuts[c]);
		assert_memory_equal(&resumed, &end, sizeof(end));
	}
	free(scr);
}

/* ---- distributions --------------------------------------------------------------- */

struct dist_row {
	const char *name;
	double prob[4]; /* logits are their natural logarithms */
	float temperature;
	uint32_t top_k;
	float top_p;
	double want[4]; /* expected frequencies */
};

static const struct dist_row dist_rows[] = {
    {"plain softmax", {0.1, 0.2, 0.3, 0.4}, 1.0f, 0, 1.0f, {0.1, 0.2, 0.3, 0.4}},
    {"temperature 2 flattens: sqrt(p)",
     {0.1, 0.2, 0.3, 0.4},
     2.0f,
     0,
     1.0f,
     {0.1627, 0.2301, 0.2818, 0.3254}},
    {"temperature 0.5 sharpens: p^2",
     {0.1, 0.2, 0.3, 0.4},
     0.5f,
     0,
     1.0f,
     {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0}},
    {"top_k 2 renormalises", {0.1, 0.2, 0.3, 0.4}, 1.0f, 2, 1.0f, {0, 0, 3 / 7.0, 4 / 7.0}},
    {"top_p 0.7 keeps 0.4 and 0.3", {0.1, 0.2, 0.3, 0.4}, 1.0f, 0, 0.7f, {0, 0, 3 / 7.0, 4 / 7.0}},
    {"top_p 0.75 keeps three",
     {0.1, 0.2, 0.3, 0.4},
     1.0f,
     0,
     0.75f,
     {0, 2 / 9.0, 3 / 9.0, 4 / 9.0}},
};

static void test_distributions(void **state)
{
	struct smp_scratch *scr = scratch_for(4);

	(void)state;
	for (size_t r = 0; r < sizeof(dist_rows) / sizeof(dist_rows[0]); r++) {
		const struct dist_row *row = &dist_rows[r];
		struct smp_params p = {row->temperature, row->top_k, row->top_p, 2024};
		struct smp_state st;
		float logits[4];
		unsigned count[4] = {0};

		print_message("row: %s\n", row->name);
		assert_int_equal(smp_params_check(&p, 4, NULL), IG_E_OK);
		for (int i = 0; i < 4; i++)
			logits[i] = (float)log(row->prob[i]);
		smp_init(&st, &p);
		for (int i = 0; i < 20000; i++)
			count[smp_pick(&p, &st, logits, 4, scr)]++;
		for (int i = 0; i < 4; i++) {
			double f = count[i] / 20000.0;

			if (fabs(f - row->want[i]) > 0.02)
				fail_msg("%s: id %d at %.4f, want %.4f", row->name, i, f,
				         row->want[i]);
			if (row->want[i] == 0.0 && count[i])
				fail_msg("%s: id %d was cut but picked", row->name, i);
		}
	}
	free(scr);
}

/* ---- top_p cuts, NaN and infinities, through a grid of draws --------------------- */

#define NAN_P  (-1.0) /* a NaN logit */
#define NINF_P (0.0)  /* a -inf logit */
#define PINF_P (2.0)  /* a +inf logit */

struct cut_row {
	const char *name;
	double prob[6]; /* logit log(p), or the markers above */
	uint32_t vocab;
	float temperature;
	uint32_t top_k;
	float top_p;
	uint32_t kept[6]; /* in the order the walk visits them */
	uint32_t nkept;
};

static const struct cut_row cut_rows[] = {
    {"0.5+0.3 reaches 0.8 exactly", {0.5, 0.3, 0.2}, 3, 1.0f, 0, 0.8f, {0, 1}, 2},
    {"0.81 needs the third", {0.5, 0.3, 0.2}, 3, 1.0f, 0, 0.81f, {0, 1, 2}, 3},
    {"0.5 is reached by the first alone", {0.5, 0.3, 0.2}, 3, 1.0f, 0, 0.5f, {0}, 1},
    {"0.49: the first", {0.5, 0.3, 0.2}, 3, 1.0f, 0, 0.49f, {0}, 1},
    {"0.51: two", {0.5, 0.3, 0.2}, 3, 1.0f, 0, 0.51f, {0, 1}, 2},
    {"1 keeps all", {0.5, 0.3, 0.2}, 3, 1.0f, 0, 1.0f, {0, 1, 2}, 3},
    {"a tiny p keeps the best", {0.2, 0.3, 0.5}, 3, 1.0f, 0, 1e-6f, {2}, 1},
    {"sorted by probability, not id", {0.1, 0.6, 0.3}, 3, 1.0f, 0, 0.7f, {1, 2}, 2},
    {"ties go to the lower id", {0.25, 0.25, 0.25, 0.25}, 4, 1.0f, 0, 0.5f, {0, 1}, 2},
    {"ties: all four at 1", {0.25, 0.25, 0.25, 0.25}, 4, 1.0f, 0, 1.0f, {0, 1, 2, 3}, 4},
    {"top_p over the top_k set: 0.8 of (0.4 0.3 0.2)",
     {0.4, 0.3, 0.2, 0.1},
     4,
     1.0f,
     3,
     0.8f,
     {0, 1, 2},
     3},
    {"top_k 2 then 0.5", {0.4, 0.3, 0.2, 0.1}, 4, 1.0f, 2, 0.5f, {0}, 1},
    {"top_k 2 then 0.6", {0.4, 0.3, 0.2, 0.1}, 4, 1.0f, 2, 0.6f, {0, 1}, 2},
    {"top_k 3 by logit, ties to the lower id",
     {0.1, 0.3, 0.3, 0.3, 0.1},
     5,
     1.0f,
     3,
     1.0f,
     {1, 2, 3},
     3},
    {"temperature reshapes before the cut (T 1 would keep two)",
     {0.5, 0.3, 0.2},
     3,
     0.5f,
     0,
     0.65f,
     {0},
     1},
    {"-inf is masked", {0.5, NINF_P, 0.5}, 3, 1.0f, 0, 1.0f, {0, 2}, 2},
    {"NaN is masked", {NAN_P, 0.7, 0.3}, 3, 1.0f, 0, 1.0f, {1, 2}, 2},
    {"NaN and -inf around one", {NAN_P, NINF_P, 0.01, NAN_P}, 4, 1.0f, 0, 1.0f, {2}, 1},
    {"all NaN: id 0", {NAN_P, NAN_P, NAN_P}, 3, 1.0f, 0, 1.0f, {0}, 1},
    {"all -inf: id 0", {NINF_P, NINF_P}, 2, 1.0f, 0, 0.5f, {0}, 1},
    {"NaN then all -inf: the lowest non-NaN", {NAN_P, NINF_P, NINF_P}, 3, 1.0f, 0, 1.0f, {1}, 1},
    {"+inf logits share all the mass", {PINF_P, 0.9, PINF_P}, 3, 1.0f, 0, 1.0f, {0, 2}, 2},
    {"+inf with top_k 2", {0.9, PINF_P, PINF_P}, 3, 1.0f, 2, 1.0f, {1, 2}, 2},
    {"an underflowed weight is never picked", {0.5, 1e-300, 0.5}, 3, 0.01f, 0, 1.0f, {0, 2}, 2},
};

static float logit_of(double p)
{
	if (p == NAN_P)
		return NAN;
	if (p == NINF_P)
		return -INFINITY;
	if (p == PINF_P)
		return INFINITY;
	if (p < 1e-37)
		return -1000.0f; /* exp underflows at any temperature below ~1 */
	return (float)log(p);
}

static void test_cut_rows(void **state)
{
	enum { GRID = 20000 };
	struct smp_scratch *scr = scratch_for(6);

	(void)state;
	for (size_t r = 0; r < sizeof(cut_rows) / sizeof(cut_rows[0]); r++) {
		const struct cut_row *row = &cut_rows[r];
		const struct smp_params p = {row->temperature, row->top_k, row->top_p, 0};
		float logits[6];
		uint32_t seen = 0;

		print_message("row: %s\n", row->name);
		assert_int_equal(smp_params_check(&p, row->vocab, NULL), IG_E_OK);
		for (uint32_t i = 0; i < row->vocab; i++)
			logits[i] = logit_of(row->prob[i]);
		assert_int_equal(smp_pick_at(&p, 0.0, logits, row->vocab, scr), row->kept[0]);
		assert_int_equal(smp_pick_at(&p, U_LAST, logits, row->vocab, scr),
		                 row->kept[row->nkept - 1]);
		/* Rising draws visit the kept ids in order, each of them, and
		 * nothing else. */
		for (int g = 0; g < GRID; g++) {
			double u = (g + 0.5) / GRID;
			uint32_t id = smp_pick_at(&p, u, logits, row->vocab, scr);

			if (id == row->kept[seen])
				continue;
			if (seen + 1 < row->nkept && id == row->kept[seen + 1]) {
				seen++;
				continue;
			}
			fail_msg("%s: u %.5f picked %u after kept[%u] = %u", row->name, u, id, seen,
			         row->kept[seen]);
		}
		if (seen + 1 != row->nkept)
			fail_msg("%s: the grid reached only kept[%u]", row->name, seen);
	}
	free(scr);
}

/* ---- against a reference, over random logits and one reused scratch ------------- */

struct ref_cand {
	float x;
	uint32_t id;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_cand *x = a, *y = b;

	if (x->x != y->x)
		return x->x > y->x ? -1 : 1;
	return x->id < y->id ? -1 : 1;
}

/* The rules of sampler.h, written plainly: sort everything, cut, walk. */
static uint32_t ref_pick(const struct smp_params *p, double u, const float *l, uint32_t vocab,
                         struct ref_cand *c)
{
	uint32_t n = 0, k, kept, best = 0, found = 0;
	double z = 0, cum = 0, t;

	for (uint32_t i = 0; i < vocab; i++)
		if (!isnan(l[i]) && (!found || l[i] > l[best])) {
			best = i;
			found = 1;
		}
	if (p->temperature == 0.0f || p->top_k == 1)
		return best;
	for (uint32_t i = 0; i < vocab; i++)
		if (!isnan(l[i]) && l[i] != -INFINITY)
			c[n++] = (struct ref_cand){l[i], i};
	if (!n)
		return best;
	qsort(c, n, sizeof(*c), ref_cmp);
	k = p->top_k && p->top_k < n ? p->top_k : n;
	for (uint32_t i = 0; i < k; i++)
		z += c[i].x == c[0].x ? 1.0 : exp(((double)c[i].x - c[0].x) / p->temperature);
	kept = k;
	if (p->top_p < 1.0f) {
		for (kept = 0; kept < k;) {
			cum += c[kept].x == c[0].x
			           ? 1.0
			           : exp(((double)c[kept].x - c[0].x) / p->temperature);
			kept++;
			if (cum >= ((double)p->top_p - 1e-6) * z)
				break;
		}
		z = cum;
	}
	t = u * z;
	cum = 0;
	best = c[0].id;
	for (uint32_t i = 0; i < kept; i++) {
		double wi =
		    c[i].x == c[0].x ? 1.0 : exp(((double)c[i].x - c[0].x) / p->temperature);

		if (wi > 0) {
			best = c[i].id;
			cum += wi;
			if (t < cum)
				return best;
		}
	}
	return best;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += GAMMA);

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

static void test_random_against_reference(void **state)
{
	enum { VMAX = 50000 };
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : UINT64_C(0x5A3B);
	uint64_t s = seed;
	/* One scratch for the largest vocabulary, reused for every size. */
	struct smp_scratch *scr = scratch_for(VMAX);
	float *l = malloc(VMAX * sizeof(*l));
	struct ref_cand *c = malloc(VMAX * sizeof(*c));

	(void)state;
	printf("# sampler seed %llu (set IGNIS_TEST_SEED to repeat another)\n",
	       (unsigned long long)seed);
	assert_non_null(l);
	assert_non_null(c);
	for (int it = 0; it < 400; it++) {
		uint32_t vocab = it % 40 == 0 ? VMAX - (uint32_t)(rng_next(&s) % 1000)
		                              : 1 + (uint32_t)(rng_next(&s) % 300);
		struct smp_params p;
		unsigned shape = (unsigned)(rng_next(&s) % 4);

		for (uint32_t i = 0; i < vocab; i++) {
			uint64_t v = rng_next(&s);

			/* Coarse values make ties; a few NaN and infinities. */
			l[i] = shape == 0 ? (float)(v % 8)
			                  : (float)((double)(v >> 11) * 0x1.0p-53 * 20.0 - 10.0);
			if (v % 97 == 0)
				l[i] = NAN;
			else if (v % 89 == 0)
				l[i] = -INFINITY;
			else if (shape == 3 && v % 1009 == 0)
				l[i] = INFINITY;
		}
		p.temperature = (float)((rng_next(&s) % 300) / 100.0);
		p.top_k =
		    rng_next(&s) % 3 ? (uint32_t)(rng_next(&s) % (vocab < 64 ? vocab + 1 : 64)) : 0;
		p.top_p = rng_next(&s) % 2 ? 1.0f : (float)(1 + rng_next(&s) % 1000) / 1000.0f;
		if (p.top_k == 0 && p.top_p < 1.0f && vocab > 64)
			p.top_k = 64; /* the reference's cut holds 64 */
		p.seed = rng_next(&s);
		assert_int_equal(smp_params_check(&p, vocab, NULL), IG_E_OK);
		for (int d = 0; d < 20; d++) {
			double u = (double)(rng_next(&s) >> 11) * 0x1.0p-53;
			uint32_t got = smp_pick_at(&p, u, l, vocab, scr);
			uint32_t want = ref_pick(&p, u, l, vocab, c);

			if (got != want)
				fail_msg(
				    "seed %llu iteration %d draw %d (vocab %u, T %g, top_k %u, "
				    "top_p %g, u %.17g): picked %u, the reference %u",
				    (unsigned long long)seed, it, d, vocab, (double)p.temperature,
				    p.top_k, (double)p.top_p, u, got, want);
		}
	}
	free(c);
	free(l);
	free(scr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_params_check),
	    cmocka_unit_test(test_params_set),
	    cmocka_unit_test(test_greedy_rows),
	    cmocka_unit_test(test_golden_first_tokens),
	    cmocka_unit_test(test_same_seed_same_sequence),
	    cmocka_unit_test(test_one_draw_per_pick),
	    cmocka_unit_test(test_state_bytes),
	    cmocka_unit_test(test_resume_is_exact),
	    cmocka_unit_test(test_distributions),
	    cmocka_unit_test(test_cut_rows),
	    cmocka_unit_test(test_random_against_reference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
