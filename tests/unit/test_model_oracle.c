/*
 * test_model_oracle.c - llama.cpp's qwen3 files run by our cpu backend and
 * by llama.cpp (libllama from the oracle), the same file on both sides: the
 * tiny-dense shapes written in the qwen3 layout by ignis-mkmodel's writer
 * (mfile_as_qwen3: every layer full attention, no output gate, the output
 * tied to the embedding, the synthetic gpt2 vocabulary), seeded random
 * weights.
 *
 * The file must open on both sides with the same description (llama.cpp
 * reads it as qwen3, we as MDESC_ARCH_QWEN3). Then a prompt and 24 tokens
 * decoded one at a time, teacher-forced (both sides are fed llama.cpp's
 * greedy pick): at every step the logits agree within a tolerance of the
 * logits' spread, and our greedy pick is llama.cpp's wherever its top two
 * are further apart than that. What may differ is rounding: llama.cpp
 * keeps K and V in f32 here, we keep them in bf16 (our KV format), and the
 * sums run in other orders. Skipped (exit 77) without the oracle.
 */
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

#include "gpu-worker/backend/cpu/model_cpu.h"
#include "model/mfile.h"
#include "llama_oracle.h"

static struct llo ll;
static bool have;
static char dir[] = "/tmp/test-model-oracle.XXXXXX";

static int setup(void **state)
{
	int rc;

	(void)state;
	if (!mkdtemp(dir))
		return -1;
	rc = llo_open(&ll);
	if (rc < 0) {
		print_error("the oracle: %s\n", ll.why);
		return -1;
	}
	have = rc == 1;
	return 0;
}

static int teardown(void **state)
{
	char cmd[256];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#define STEPS 24u
#define CTX   256u

static uint32_t argmax(const float *v, uint32_t n, float *gap)
{
	uint32_t best = 0, second = 1;

	if (v[1] > v[0])
		best = 1, second = 0;
	for (uint32_t i = 2; i < n; i++) {
		if (v[i] > v[best]) {
			second = best;
			best = i;
		} else if (v[i] > v[second])
			second = i;
	}
	*gap = v[best] - v[second];
	return best;
}

/* One file, one prompt: our logits against llama.cpp's, step by step. */
static void compare(enum mfile_dtype dtype, double tol_frac, const char *what)
{
	const struct mdesc *src = mdesc_find("tiny-dense");
	struct mdesc q3;
	struct ig_errbuf eb = {0};
	struct mfile f;
	struct mdl d;
	struct kvpool kv;
	struct be_seq s;
	struct cpool *pool;
	struct llo_model_params mp;
	struct llo_context_params cp;
	void *lm, *lc, *region, *scratch;
	float *ours;
	char path[256];
	int32_t prompt[40];
	uint32_t pages = CTX / 64, agreed = 0, checked = 0;
	int err = 0;
	double worst = 0;

	mfile_as_qwen3(src, &q3);
	snprintf(path, sizeof path, "%s/qwen3-%s.gguf", dir, what);
	if (mfile_write_synthetic(&q3, 11, dtype, path, &eb))
		fail_msg("%s: %s", what, eb.msg);
	if (mfile_open(&f, path, &eb) || mdl_bind(&d, &f, &eb))
		fail_msg("%s: %s", what, eb.msg);
	assert_int_equal(f.desc.arch, MDESC_ARCH_QWEN3);
	assert_true(f.desc.tied_output);
	assert_int_equal(f.desc.full_layers, f.desc.layers);
	assert_int_equal(f.desc.eos_id, MFILE_QWEN3_EOS);
	assert_true(mfile_same_shape(&f.desc, &q3));

	mp = ll.model_defaults();
	mp.n_gpu_layers = 0;
	if (!(lm = ll.load(path, mp)))
		fail_msg("%s: llama.cpp could not load %s", what, path);
	cp = ll.context_defaults();
	cp.n_ctx = CTX;
	cp.n_batch = cp.n_ubatch = 64;
	cp.n_threads = cp.n_threads_batch = 2;
	cp.type_k = cp.type_v = 0; /* f32 */
	cp.flash_attn_type = 0;    /* off: f32 K and V */
	if (!(lc = ll.init_context(lm, cp)))
		fail_msg("%s: llama.cpp could not make a context", what);

	region = calloc(pages, mdesc_page_bytes(&f.desc, MDESC_KV_BF16));
	scratch = aligned_alloc(64, (mdl_scratch_bytes(d.m, 64, CTX) + 63) / 64 * 64);
	ours = malloc(f.desc.vocab * sizeof(float));
	assert_non_null(region);
	assert_non_null(scratch);
	assert_non_null(ours);
	if (kvpool_init(&kv, region, mdesc_page_bytes(&f.desc, MDESC_KV_BF16), pages, &eb) ||
	    mdl_seq_init(&d, &s, &eb) || cpool_create(&pool, 2, &eb))
		fail_msg("%s", eb.msg);
	assert_true(kvpool_try_reserve(&kv, &s.kv, 1, pages, &err));

	for (uint32_t i = 0; i < 40; i++)
		prompt[i] = (int32_t)((i * 37u + 11u) % 256u); /* byte tokens */
	for (uint32_t step = 0; step <= STEPS; step++) {
		const int32_t *feed = step ? &prompt[39] : prompt;
		int32_t n = step ? 1 : 40;
		const float *theirs;
		float lo = INFINITY, hi = -INFINITY, gap, ogap;
		double tol, diff = 0;
		uint32_t pick, opick;

		if (mdl_forward(&d, &s, (const uint32_t *)feed, (uint32_t)n, MDESC_KV_BF16, &kv, CTX,
		                ours, scratch, pool, &eb))
			fail_msg("%s: %s", what, eb.msg);
		if (ll.decode(lc, ll.batch_one((int32_t *)feed, n)))
			fail_msg("%s: llama_decode failed at step %u", what, step);
		theirs = ll.logits_ith(lc, -1);
		assert_non_null(theirs);
		for (uint32_t i = 0; i < f.desc.vocab; i++) {
			lo = theirs[i] < lo ? theirs[i] : lo;
			hi = theirs[i] > hi ? theirs[i] : hi;
			diff = fmax(diff, fabs((double)theirs[i] - ours[i]));
		}
		tol = tol_frac * (hi - lo);
		worst = fmax(worst, diff / (hi - lo));
		if (diff > tol)
			fail_msg("%s: step %u: logits differ by %g, spread %g (tolerance %g)", what,
			         step, diff, (double)(hi - lo), tol);
		pick = argmax(theirs, f.desc.vocab, &gap);
		opick = argmax(ours, f.desc.vocab, &ogap);
		if (gap > 2 * tol) {
			checked++;
			if (pick != opick)
				fail_msg("%s: step %u: we pick %u, llama.cpp %u (its gap %g)", what, step,
				         opick, pick, (double)gap);
			agreed++;
		}
		prompt[39] = (int32_t)pick; /* both sides are fed llama.cpp's pick */
	}
	print_message("# %s: logits within %.2g of their spread over %u steps; greedy agreed "
	              "%u of %u clear picks\n",
	              what, worst, STEPS + 1, agreed, checked);
	assert_true(checked > STEPS / 2);

	cpool_destroy(pool);
	mdl_seq_release(&s);
	kvpool_free(&kv, &s.kv);
	kvpool_release(&kv);
	mdl_release(&d);
	mfile_close(&f);
	ll.free_context(lc);
	ll.free_model(lm);
	free(region);
	free(scratch);
	free(ours);
	unlink(path);
}

/* Free-running greedy in f32: each side feeds back its own pick; the
 * tokens are equal for FREE_STEPS steps. (On a random model a near tie
 * could still part them; the smallest gap met is printed, and the test
 * says where and by how much if they part.) */
#define FREE_STEPS 64u

static void free_run(uint64_t seed)
{
	const struct mdesc *src = mdesc_find("tiny-dense");
	struct mdesc q3;
	struct ig_errbuf eb = {0};
	struct mfile f;
	struct mdl d;
	struct kvpool kv;
	struct be_seq s;
	struct cpool *pool;
	struct llo_model_params mp;
	struct llo_context_params cp;
	void *lm, *lc, *region, *scratch;
	float *ours, least = INFINITY;
	char path[256];
	int32_t tok[16];
	uint32_t pages = CTX / 64;
	int err = 0;

	mfile_as_qwen3(src, &q3);
	snprintf(path, sizeof path, "%s/qwen3-free.gguf", dir);
	if (mfile_write_synthetic(&q3, seed, MFILE_F32, path, &eb) || mfile_open(&f, path, &eb) ||
	    mdl_bind(&d, &f, &eb))
		fail_msg("free run: %s", eb.msg);
	mp = ll.model_defaults();
	mp.n_gpu_layers = 0;
	cp = ll.context_defaults();
	cp.n_ctx = CTX;
	cp.n_batch = cp.n_ubatch = 64;
	cp.n_threads = cp.n_threads_batch = 2;
	cp.type_k = cp.type_v = 0;
	cp.flash_attn_type = 0;
	if (!(lm = ll.load(path, mp)) || !(lc = ll.init_context(lm, cp)))
		fail_msg("free run: llama.cpp could not load %s", path);
	region = calloc(pages, mdesc_page_bytes(&f.desc, MDESC_KV_BF16));
	scratch = aligned_alloc(64, (mdl_scratch_bytes(d.m, 64, CTX) + 63) / 64 * 64);
	ours = malloc(f.desc.vocab * sizeof(float));
	assert_true(region && scratch && ours);
	if (kvpool_init(&kv, region, mdesc_page_bytes(&f.desc, MDESC_KV_BF16), pages, &eb) ||
	    mdl_seq_init(&d, &s, &eb) || cpool_create(&pool, 2, &eb))
		fail_msg("%s", eb.msg);
	assert_true(kvpool_try_reserve(&kv, &s.kv, 1, pages, &err));
	for (uint32_t i = 0; i < 16; i++)
		tok[i] = (int32_t)("The tiny model. "[i]);
	{
		int32_t mine = 0, theirs = 0, *feed = tok, n = 16;

		for (uint32_t step = 0; step < FREE_STEPS; step++) {
			float gap, ogap;
			int32_t mine_fed = mine;

			if (step) {
				feed = &mine_fed;
				n = 1;
			}
			if (mdl_forward(&d, &s, (const uint32_t *)feed, (uint32_t)n, MDESC_KV_BF16, &kv,
			                CTX, ours, scratch, pool, &eb))
				fail_msg("%s", eb.msg);
			if (step)
				feed = &theirs;
			if (ll.decode(lc, ll.batch_one(feed, n)))
				fail_msg("free run: llama_decode failed at step %u", step);
			theirs = (int32_t)argmax(ll.logits_ith(lc, -1), f.desc.vocab, &gap);
			mine = (int32_t)argmax(ours, f.desc.vocab, &ogap);
			least = gap < least ? gap : least;
			if (mine != theirs)
				fail_msg("free run: step %u: we pick %d, llama.cpp %d (its top-two gap "
				         "%g)",
				         step, mine, theirs, (double)gap);
		}
	}
	print_message("# free-running greedy, f32: %u tokens equal (smallest top-two gap %g)\n",
	              FREE_STEPS, (double)least);
	cpool_destroy(pool);
	mdl_seq_release(&s);
	kvpool_free(&kv, &s.kv);
	kvpool_release(&kv);
	mdl_release(&d);
	mfile_close(&f);
	ll.free_context(lc);
	ll.free_model(lm);
	free(region);
	free(scratch);
	free(ours);
	unlink(path);
}

static void test_qwen3_f32(void **state)
{
	(void)state;
	if (!have) {
		print_message("the oracle is not installed (IGNIS_ORACLE_LIB_DIR; "
		              "tools/install-oracle.sh): skipped\n");
		skip();
	}
	compare(MFILE_F32, 1e-2, "f32"); /* measured: 0.0025 of the spread */
	free_run(11);
}

/* Block types: llama.cpp multiplies them against activations it rounds to
 * bf16 or quantizes to Q8 blocks first, we against f32 activations (the
 * same decoded weights: test_quant), so the tolerance is wider. */
static void test_qwen3_blocks(void **state)
{
	(void)state;
	if (!have)
		skip();
	compare(MFILE_BF16, 1e-2, "bf16"); /* measured: 0.0031 of the spread */
	compare(MFILE_F16, 1e-2, "f16");   /* 0.0020 */
	compare(MFILE_Q8_0, 3e-2, "q8_0"); /* 0.011 */
	compare(MFILE_Q4_K, 3e-2, "q4_k"); /* 0.013 */
	compare(MFILE_Q6_K, 3e-2, "q6_k"); /* 0.010 */
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_qwen3_f32),
	                                   cmocka_unit_test(test_qwen3_blocks)};
	int failed = cmocka_run_group_tests(tests, setup, teardown);

	return failed ? failed : have ? 0 : 77;
}
