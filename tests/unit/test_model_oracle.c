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

/* One synthetic qwen3 file open on both sides: our decoder with a
 * sequence on a bf16 KV pool, and a llama.cpp context (f32 K and V). */
struct pair {
	char path[256];
	struct mfile f;
	struct mdl d;
	struct kvpool kv;
	struct be_seq s;
	struct cpool *pool;
	void *lm, *lc, *region, *scratch;
	float *ours;
	const float *theirs;
	uint32_t vocab;
};

static void pair_open(struct pair *p, enum mfile_dtype dtype, uint64_t seed, const char *what)
{
	struct mdesc q3;
	struct ig_errbuf eb = {0};
	struct llo_model_params mp = ll.model_defaults();
	struct llo_context_params cp = ll.context_defaults();
	uint32_t pages = CTX / 64;
	int err = 0;

	memset(p, 0, sizeof(*p));
	mfile_as_qwen3(mdesc_find("tiny-dense"), &q3);
	snprintf(p->path, sizeof p->path, "%s/qwen3-%s.gguf", dir, what);
	if (mfile_write_synthetic(&q3, seed, dtype, p->path, &eb) ||
	    mfile_open(&p->f, p->path, &eb) || mdl_bind(&p->d, &p->f, &eb))
		fail_msg("%s: %s", what, eb.msg);
	assert_int_equal(p->f.desc.arch, MDESC_ARCH_QWEN3);
	assert_true(p->f.desc.tied_output);
	assert_int_equal(p->f.desc.full_layers, p->f.desc.layers);
	assert_int_equal(p->f.desc.eos_id, MFILE_QWEN3_EOS);
	assert_true(mfile_same_shape(&p->f.desc, &q3));
	p->vocab = p->f.desc.vocab;

	mp.n_gpu_layers = 0;
	if (!(p->lm = ll.load(p->path, mp)))
		fail_msg("%s: llama.cpp could not load %s", what, p->path);
	cp.n_ctx = CTX;
	cp.n_batch = cp.n_ubatch = 64;
	cp.n_threads = cp.n_threads_batch = 2;
	cp.type_k = cp.type_v = 0; /* f32 */
	cp.flash_attn_type = 0;    /* off: f32 K and V */
	if (!(p->lc = ll.init_context(p->lm, cp)))
		fail_msg("%s: llama.cpp could not make a context", what);

	p->region = calloc(pages, mdesc_page_bytes(&p->f.desc, MDESC_KV_BF16));
	p->scratch = aligned_alloc(64, (mdl_scratch_bytes(p->d.m, 64, CTX) + 63) / 64 * 64);
	p->ours = malloc(p->vocab * sizeof(float));
	assert_true(p->region && p->scratch && p->ours);
	if (kvpool_init(&p->kv, p->region, mdesc_page_bytes(&p->f.desc, MDESC_KV_BF16), pages,
	                &eb) ||
	    mdl_seq_init(&p->d, &p->s, &eb) || cpool_create(&p->pool, 2, &eb))
		fail_msg("%s", eb.msg);
	assert_true(kvpool_try_reserve(&p->kv, &p->s.kv, 1, pages, &err));
}

/* Feed each side its tokens (the same ones, or each its own pick): the
 * logits of the last in p->ours and p->theirs. */
static void pair_step(struct pair *p, const int32_t *mine, const int32_t *theirs, int32_t n,
                      const char *what, uint32_t step)
{
	struct ig_errbuf eb = {0};

	if (mdl_forward(&p->d, &p->s, (const uint32_t *)mine, (uint32_t)n, MDESC_KV_BF16, &p->kv,
	                CTX, p->ours, p->scratch, p->pool, &eb))
		fail_msg("%s: %s", what, eb.msg);
	if (ll.decode(p->lc, ll.batch_one((int32_t *)theirs, n)))
		fail_msg("%s: llama_decode failed at step %u", what, step);
	p->theirs = ll.logits_ith(p->lc, -1);
	assert_non_null(p->theirs);
}

static void pair_close(struct pair *p)
{
	cpool_destroy(p->pool);
	mdl_seq_release(&p->s);
	kvpool_free(&p->kv, &p->s.kv);
	kvpool_release(&p->kv);
	mdl_release(&p->d);
	mfile_close(&p->f);
	ll.free_context(p->lc);
	ll.free_model(p->lm);
	free(p->region);
	free(p->scratch);
	free(p->ours);
	unlink(p->path);
}

/* One file, one prompt: our logits against llama.cpp's, step by step. */
static void compare(enum mfile_dtype dtype, double tol_frac, const char *what)
{
	static struct pair p;
	int32_t prompt[40];
	uint32_t agreed = 0, checked = 0;
	double worst = 0;

	pair_open(&p, dtype, 11, what);
	for (uint32_t i = 0; i < 40; i++)
		prompt[i] = (int32_t)((i * 37u + 11u) % 256u); /* byte tokens */
	for (uint32_t step = 0; step <= STEPS; step++) {
		const int32_t *feed = step ? &prompt[39] : prompt;
		float lo = INFINITY, hi = -INFINITY, gap, ogap;
		double tol, diff = 0;
		uint32_t pick, opick;

		pair_step(&p, feed, feed, step ? 1 : 40, what, step);
		for (uint32_t i = 0; i < p.vocab; i++) {
			lo = p.theirs[i] < lo ? p.theirs[i] : lo;
			hi = p.theirs[i] > hi ? p.theirs[i] : hi;
			diff = fmax(diff, fabs((double)p.theirs[i] - p.ours[i]));
		}
		tol = tol_frac * (hi - lo);
		worst = fmax(worst, diff / (hi - lo));
		if (diff > tol)
			fail_msg("%s: step %u: logits differ by %g, spread %g (tolerance %g)", what,
			         step, diff, (double)(hi - lo), tol);
		pick = argmax(p.theirs, p.vocab, &gap);
		opick = argmax(p.ours, p.vocab, &ogap);
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
	pair_close(&p);
}

/* Free-running greedy in f32: each side feeds back its own pick; the
 * tokens are equal for FREE_STEPS steps. (On a random model a near tie
 * could still part them; the smallest gap met is printed, and the test
 * says where and by how much if they part.) */
#define FREE_STEPS 64u

static void free_run(uint64_t seed)
{
	static struct pair p;
	int32_t prompt[16], mine = 0, theirs = 0;
	float least = INFINITY;

	pair_open(&p, MFILE_F32, seed, "free");
	for (uint32_t i = 0; i < 16; i++)
		prompt[i] = (int32_t)("The tiny model. "[i]);
	for (uint32_t step = 0; step < FREE_STEPS; step++) {
		float gap, ogap;

		if (step)
			pair_step(&p, &mine, &theirs, 1, "free run", step);
		else
			pair_step(&p, prompt, prompt, 16, "free run", step);
		theirs = (int32_t)argmax(p.theirs, p.vocab, &gap);
		mine = (int32_t)argmax(p.ours, p.vocab, &ogap);
		least = gap < least ? gap : least;
		if (mine != theirs)
			fail_msg("free run: step %u: we pick %d, llama.cpp %d (its top-two gap %g)",
			         step, mine, theirs, (double)gap);
	}
	print_message("# free-running greedy, f32: %u tokens equal (smallest top-two gap %g)\n",
	              FREE_STEPS, (double)least);
	pair_close(&p);
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
