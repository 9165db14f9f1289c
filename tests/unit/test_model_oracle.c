/*
 * test_model_oracle.c - llama.cpp's files of the four architectures we run
 * (qwen3, qwen35, qwen35moe, qwen3next) run by our backends and by
 * llama.cpp (libllama from the oracle), the same file on both sides: the
 * tiny presets' shapes written in each layout by ignis-mkmodel's writer
 * (mfile_as_layout: the output tied to the embedding, the synthetic gpt2
 * vocabulary; qwen3 every layer full attention without an output gate, the
 * hybrids gated attention every fourth layer and the gated delta rule
 * between, with value heads tiled (qwen35*) or grouped (qwen3next)), seeded
 * random weights, in every tensor type we run.
 *
 * The file must open on both sides with the same description. Then a prompt and 24 tokens
 * decoded one at a time, teacher-forced (both sides are fed llama.cpp's
 * greedy pick): at every step the logits agree within a tolerance of the
 * logits' spread, and our greedy pick is llama.cpp's wherever its top two
 * are further apart than that. What may differ is rounding: llama.cpp
 * keeps K and V in f32 here, we keep them in bf16 (our KV format), and the
 * sums run in other orders. Skipped (exit 77) without the oracle.
 *
 * Ours runs through the backend table (tools/bemodel.h: the model bound on
 * a backend by name, rounds of one sequence), so the oracle checks
 * whichever backend runs: `--backend NAME` names one (exit 77 when this
 * build or machine has no such backend: meson counts the skip), and with
 * none every backend a build may have runs in turn, those absent here
 * skipped with a line saying why.
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

#include "model/mfile.h"
#include "tools/bemodel.h"
#include "llama_oracle.h"

static struct llo ll;
static bool have;
/* the backend under test (main walks them) */
static const char *backend = "cpu";
static char dir[] = "/tmp/test-model-oracle.XXXXXX";

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/test-model-oracle.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
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

/* One synthetic file open on both sides: the model bound on our backend
 * with a sequence on a bf16 KV pool, and a llama.cpp context (f32 K and V). */
struct pair {
	char path[256], wide[256];
	struct mfile f;
	struct bem r;
	struct be_seq s;
	void *lm, *lc;
	float *ours;
	const float *theirs;
	uint32_t vocab;
};

/* The layout under test: llama.cpp's architecture and the preset whose
 * shapes it takes. */
static enum mdesc_arch arch = MDESC_ARCH_QWEN3;

static bool arch_moe(enum mdesc_arch a)
{
	return a == MDESC_ARCH_QWEN35MOE || a == MDESC_ARCH_QWEN3NEXT;
}

/* IGNIS_ORACLE_MEASURE set: every row runs to its end and prints its worst
 * step, asserting nothing (to measure the tolerances below again). */
static bool measure;

static void pair_open(struct pair *p, enum mfile_dtype dtype, uint64_t seed, const char *what,
                      bool wide)
{
	struct mfile_wopts wo = {.widen = true};
	struct mdesc q3;
	struct ig_errbuf eb = {0};
	struct llo_model_params mp = ll.model_defaults();
	struct llo_context_params cp = ll.context_defaults();
	uint32_t pages = CTX / 64;

	memset(p, 0, sizeof(*p));
	if (mfile_as_layout(mdesc_find(arch_moe(arch) ? "tiny-moe" : "tiny-dense"), arch, &q3, &eb))
		fail_msg("%s: %s", what, eb.msg);
	/* the MoE hybrids at tiny-dense's depth, 4 layers (1 full), with 8
	 * experts, top-2: eight layers of 32 experts part the two sides'
	 * routing on a near tie (our bf16 K and V against llama.cpp's f32 are
	 * enough) within a 64-token free run, measured */
	if (arch_moe(arch)) {
		q3.layers = 4;
		q3.experts = 8;
	}
	snprintf(p->path, sizeof p->path, "%s/%s-%s.gguf", dir, mdesc_arch_name(arch), what);
	snprintf(p->wide, sizeof p->wide, "%s/%s-%s-wide.gguf", dir, mdesc_arch_name(arch), what);
	if (wide && mfile_write_synthetic_opts(&q3, seed, dtype, p->wide, &wo, &eb))
		fail_msg("%s: %s", what, eb.msg);
	if (mfile_write_synthetic(&q3, seed, dtype, p->path, &eb) ||
	    mfile_open(&p->f, p->path, &eb))
		fail_msg("%s: %s", what, eb.msg);
	/* rounds of the prompt (at most 64 tokens) on two threads */
	if (bem_open(&p->r, &p->f,
	             &(struct bem_opts){.backend = backend,
	                                .max_round_tokens = 64,
	                                .context = CTX,
	                                .threads = 2,
	                                .states = 1,
	                                .pages = pages,
	                                .fmt = MDESC_KV_BF16},
	             &eb))
		fail_msg("%s on the %s backend: %s", what, backend, eb.msg);
	assert_int_equal(p->f.desc.arch, arch);
	assert_true(p->f.desc.tied_output);
	if (arch == MDESC_ARCH_QWEN3)
		assert_int_equal(p->f.desc.full_layers, p->f.desc.layers);
	else
		assert_true(p->f.desc.full_layers < p->f.desc.layers);
	assert_int_equal(p->f.desc.eos_id, MFILE_QWEN3_EOS);
	assert_true(mfile_same_shape(&p->f.desc, &q3));
	p->vocab = p->f.desc.vocab;

	mp.n_gpu_layers = 0;
	if (!(p->lm = ll.load(wide ? p->wide : p->path, mp)))
		fail_msg("%s: llama.cpp could not load %s", what, wide ? p->wide : p->path);
	cp.n_ctx = CTX;
	cp.n_batch = cp.n_ubatch = 64;
	cp.n_threads = cp.n_threads_batch = 1; /* no spinning against the other tests */
	cp.type_k = cp.type_v = 0;             /* f32 */
	cp.flash_attn_type = 0;                /* off: f32 K and V */
	if (!(p->lc = ll.init_context(p->lm, cp)))
		fail_msg("%s: llama.cpp could not make a context", what);

	p->ours = malloc(p->vocab * sizeof(float));
	assert_non_null(p->ours);
	if (bem_seq_open(&p->r, &p->s, 1, pages, &eb))
		fail_msg("%s", eb.msg);
}

/* Feed each side its tokens (the same ones, or each its own pick): the
 * logits of the last in p->ours and p->theirs. */
static void pair_step(struct pair *p, const int32_t *mine, const int32_t *theirs, int32_t n,
                      const char *what, uint32_t step)
{
	struct ig_errbuf eb = {0};
	struct be_step one = {&p->s, (const uint32_t *)mine, (uint32_t)n, true};

	if (bem_round(&p->r, &one, 1, p->ours, &eb))
		fail_msg("%s: %s", what, eb.msg);
	if (ll.decode(p->lc, ll.batch_one((int32_t *)theirs, n)))
		fail_msg("%s: llama_decode failed at step %u", what, step);
	p->theirs = ll.logits_ith(p->lc, -1);
	assert_non_null(p->theirs);
}

static void pair_close(struct pair *p)
{
	bem_seq_close(&p->r, &p->s);
	bem_close(&p->r);
	mfile_close(&p->f);
	ll.free_context(p->lc);
	ll.free_model(p->lm);
	free(p->ours);
	unlink(p->path);
	unlink(p->wide);
}

/* Where a pick is checked: llama.cpp's top two further apart than this
 * fraction of the logits' spread. */
#define PICK_GAP 0.06

/*
 * One file, one prompt: our logits against llama.cpp's, step by step.
 * `wide`: llama.cpp reads the F32 file of the same values (mfile_wopts.widen),
 * so its products are f32 like ours; else the same file as ours. At every
 * step the logits must agree within `tol_frac` of their spread, and our
 * pick must be llama.cpp's wherever its top two are more than PICK_GAP and
 * twice the tolerance of the spread apart (at least 4 such steps when the
 * tolerance is 3% or less). tol_frac 0: measured and printed, nothing
 * asserted but that llama.cpp runs the file.
 */
static void compare(enum mfile_dtype dtype, double tol_frac, const char *what, bool wide)
{
	static struct pair p;
	int32_t prompt[40];
	uint32_t agreed = 0, checked = 0;
	double worst = 0;

	pair_open(&p, dtype, 11, what, wide);
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
		if (tol_frac > 0 && diff > tol && !measure)
			fail_msg("%s: step %u: logits differ by %g, spread %g (tolerance %g)", what,
			         step, diff, (double)(hi - lo), tol);
		pick = argmax(p.theirs, p.vocab, &gap);
		opick = argmax(p.ours, p.vocab, &ogap);
		if (tol_frac > 0 && gap > 2 * tol && gap > PICK_GAP * (hi - lo)) {
			checked++;
			if (pick != opick && !measure)
				fail_msg("%s: step %u: we pick %u, llama.cpp %u (its gap %g)", what,
				         step, opick, pick, (double)gap);
			agreed += pick == opick;
		}
		prompt[39] = (int32_t)pick; /* both sides are fed llama.cpp's pick */
	}
	print_message(
	    "# %s %s %s%s: logits within %.2g of their spread over %u steps; greedy agreed "
	    "%u of %u clear picks\n",
	    backend, mdesc_arch_name(arch), what,
	    wide ? " (llama.cpp on f32 of the same values)" : "", worst, STEPS + 1, agreed,
	    checked);
	if (!measure && tol_frac > 0 && tol_frac <= 3e-2)
		assert_true(checked >= 4);
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

	pair_open(&p, MFILE_F32, seed, "free", false);
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
	print_message(
	    "# %s %s free-running greedy, f32: %u tokens equal (smallest top-two gap %g)\n",
	    backend, mdesc_arch_name(arch), FREE_STEPS, (double)least);
	pair_close(&p);
}

/*
 * The tolerances (fractions of the logits' spread) of the same file on both
 * sides, per layout and type; 0: not asserted. What parts the two sides is
 * llama.cpp's rounding of the activations before each product (to BF16 or
 * F16 against such weights, to Q8 blocks against block types: we multiply
 * f32 activations), carried through the layers; on the hybrids' recurrent
 * state it grows, and on a MoE it moves near-tied routing choices (a whole
 * expert's difference), so there only the clear picks are asserted. The
 * widened rows below carry the exactness claim for every type. Measured
 * (worst step), in the order of `types`:
 *   qwen3      0.0025 0.0031 0.0020 0.011 0.011 0.013 0.012 0.010
 *   qwen35     0.0003 0.019  0.0014 0.099 0.065 0.075 0.073 0.088
 *   qwen35moe  0.0003 0.068  0.0052 0.48  0.15  0.42  0.18  0.34
 *   qwen3next  0.0002 0.38   0.0021 0.37  0.21  0.29  0.17  0.43
 * (IGNIS_ORACLE_MEASURE=1 prints them again.)
 */
static const struct {
	enum mfile_dtype t;
	const char *name;
	double tol[MDESC_ARCH_COUNT]; /* indexed by arch */
} types[] = {
    {MFILE_F32, "f32", {0, 1e-2, 1e-2, 1e-2, 1e-2}}, {MFILE_BF16, "bf16", {0, 1e-2, 4e-2, 0, 0}},
    {MFILE_F16, "f16", {0, 1e-2, 1e-2, 3e-2, 3e-2}}, {MFILE_Q8_0, "q8_0", {0, 3e-2, 0.2, 0, 0}},
    {MFILE_Q4_0, "q4_0", {0, 3e-2, 0.15, 0, 0}},     {MFILE_Q4_K, "q4_k", {0, 3e-2, 0.15, 0, 0}},
    {MFILE_Q5_K, "q5_k", {0, 3e-2, 0.15, 0, 0}},     {MFILE_Q6_K, "q6_k", {0, 3e-2, 0.15, 0, 0}},
};

static bool oracle_here(void)
{
	if (!have)
		print_message("the oracle is not installed (IGNIS_ORACLE_LIB_DIR; "
		              "tools/install-oracle.sh): skipped\n");
	return have;
}

/* f32 weights, then the free run: tokens equal for FREE_STEPS. */
static void f32_rows(enum mdesc_arch a)
{
	if (!oracle_here())
		skip();
	arch = a;
	compare(MFILE_F32, types[0].tol[a], "f32", false);
	free_run(11);
}

/* Every other type, the same file on both sides (tolerances above). */
static void same_file_rows(enum mdesc_arch a)
{
	if (!oracle_here())
		skip();
	arch = a;
	for (size_t i = 1; i < sizeof(types) / sizeof(types[0]); i++)
		compare(types[i].t, types[i].tol[a], types[i].name, false);
}

/* Every type against llama.cpp on the F32 file of the same values: our
 * decoding of the blocks and our products are f32's, so the tolerance is
 * the f32 row's (measured 0.0002 to 0.0025 of the spread). */
static void widened_rows(enum mdesc_arch a)
{
	if (!oracle_here())
		skip();
	arch = a;
	for (size_t i = 1; i < sizeof(types) / sizeof(types[0]); i++)
		compare(types[i].t, 1e-2, types[i].name, true);
}

#define ORACLE_TESTS(X)                                                                            \
	X(qwen3, QWEN3) X(qwen35, QWEN35) X(qwen35moe, QWEN35MOE) X(qwen3next, QWEN3NEXT)
#define ORACLE_FNS(n, A)                                                                           \
	static void test_##n##_f32(void **state)                                                   \
	{                                                                                          \
		(void)state;                                                                       \
		f32_rows(MDESC_ARCH_##A);                                                          \
	}                                                                                          \
	static void test_##n##_same_file(void **state)                                             \
	{                                                                                          \
		(void)state;                                                                       \
		same_file_rows(MDESC_ARCH_##A);                                                    \
	}                                                                                          \
	static void test_##n##_widened(void **state)                                               \
	{                                                                                          \
		(void)state;                                                                       \
		widened_rows(MDESC_ARCH_##A);                                                      \
	}
ORACLE_TESTS(ORACLE_FNS)
#define ORACLE_ROWS(n, A)                                                                          \
	cmocka_unit_test(test_##n##_f32), cmocka_unit_test(test_##n##_same_file),                  \
	    cmocka_unit_test(test_##n##_widened),

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {ORACLE_TESTS(ORACLE_ROWS)};
	static const char *const all[] = BEM_BACKENDS;
	const char *const *names = all;
	size_t n_names = sizeof(all) / sizeof(all[0]);
	int failed = 0, ran = 0, rc;

	if (argc == 3 && !strcmp(argv[1], "--backend")) {
		names = (const char *const *)&argv[2];
		n_names = 1;
	} else if (argc != 1) {
		fprintf(stderr, "usage: test-model-oracle [--backend NAME]\n");
		return 2;
	}
	measure = getenv("IGNIS_ORACLE_MEASURE") != NULL;
	rc = llo_open(&ll);
	if (rc < 0) {
		fprintf(stderr, "the oracle: %s\n", ll.why);
		return 1;
	}
	have = rc == 1;
	for (size_t i = 0; i < n_names; i++) {
		char why[256];

		if (!bem_backend_here(names[i], why, sizeof why)) {
			printf("# the %s backend: skipped: %s\n", names[i], why);
			continue;
		}
		backend = names[i];
		failed += cmocka_run_group_tests_name(backend, tests, setup, teardown);
		ran++;
	}
	return failed ? failed : have && ran ? 0 : 77;
}
