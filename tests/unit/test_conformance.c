/*
 * test_conformance.c - every backend of the build checked through the
 * backend table alone, ggml's test-backend-ops in our terms: against the cpu
 * backend (the reference) at a tolerance stated per tensor type, and against
 * itself bit for bit where the contract promises it (backend.h's exactness
 * contract: a token's bits depend neither on the tokens beside it in a
 * round, nor on how its prompt was chunked, nor on the passes a small
 * workspace cuts a round into, nor on the thread count).
 *
 * A case is a model and an operation. The models: each architecture we run
 * (ours, dense and MoE, from the tiny presets; llama.cpp's qwen3, qwen35,
 * qwen35moe and qwen3next in their layouts, the MoE ones at 4 layers of 8
 * experts as the oracle test has them) in each tensor type (F32, F16,
 * BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) on the bf16 KV format, and in BF16 on
 * each other KV format served (cf_kvs[]: compact, fp8). The operations
 * (cf_ops[]): a whole round against the cpu backend, the five exactness
 * checks (the fifth, launches, the backend's graphs against its kernels
 * launched one by one), the rows check (a prompt step asking the logits of
 * every position, bit for bit each position's as a prompt's end), and each
 * layer operation (the residual rows after the embedding
 * and after each layer's token mixer and feed-forward, through the table's
 * trace, against the cpu backend's: which operation of which layer parts
 * first). The round and the exactness checks
 * run a script of three sequences (prompts of 37, 5 and 67 tokens, then 4
 * decode steps each, the tokens fixed by the seed, not picked) and compare
 * the logits of every step. Another check is one more row of cf_ops[]: a
 * function that runs it on the backend under test and on the cpu backend
 * and compares with cf_near (the type's tolerance) or cf_bits (bit for
 * bit), and the models it applies to.
 *
 *   test-conformance [--backend NAME] [--perf] [--filter TEXT] [--seed N]
 *
 * --backend names the backend under test (exit 77, meson's skip, when this
 * build or machine does not run it); without it every backend a build may
 * have runs in turn, those absent skipped with a line saying why. --perf
 * prints each case's time (its rounds, not its binds). --filter runs the
 * cases whose name ("cpu/qwen35moe/q4_k/lanes") holds TEXT, or any of the
 * comma-separated TEXTs. --self-test
 * checks the checks instead: each operation's must fail on a wrapper of the
 * cpu backend that breaks what it checks.
 */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/mfile.h"
#include "tools/bemodel.h"

/* ---- the models ---------------------------------------------------------- */

static const struct cf_arch {
	const char *name;
	const char *preset; /* the shapes */
	enum mdesc_arch arch;
} cf_archs[] = {
    {"ignis-dense", "tiny-dense", MDESC_ARCH_IGNIS},
    {"ignis-moe", "tiny-moe", MDESC_ARCH_IGNIS},
    {"qwen3", "tiny-dense", MDESC_ARCH_QWEN3},
    {"qwen35", "tiny-dense", MDESC_ARCH_QWEN35},
    {"qwen35moe", "tiny-moe", MDESC_ARCH_QWEN35MOE},
    {"qwen3next", "tiny-moe", MDESC_ARCH_QWEN3NEXT},
};

/*
 * The tensor types, and how far a backend's logits may stand from the cpu
 * backend's, as a fraction of the reference's spread (max - min) at that
 * step. Every backend decodes the blocks to the same floats (ADR 0029), so
 * what may differ is arithmetic: summation orders (f32: the oracle measured
 * 0.0002-0.0025 of the spread between llama.cpp and us on the same f32
 * values, our bf16 K and V included) and, on a device, the rounding of the
 * activations its products take against half-precision weights (tensor
 * cores: 2e-3) or block types (integer dot products on activations rounded
 * to 8 bits, as llama.cpp's: 1.0-1.3% on qwen3, ADR 0031). On the cpu
 * backend against itself every figure is 0. Where the reference's top two
 * are further apart than twice the tolerance, the greedy pick must agree.
 */
static const struct cf_type {
	enum mfile_dtype t;
	const char *name;
	double tol;
} cf_types[] = {
    {MFILE_F32, "f32", 3e-3},   {MFILE_F16, "f16", 5e-3},   {MFILE_BF16, "bf16", 5e-3},
    {MFILE_Q8_0, "q8_0", 1e-2}, {MFILE_Q4_0, "q4_0", 2e-2}, {MFILE_Q4_K, "q4_k", 2e-2},
    {MFILE_Q5_K, "q5_k", 2e-2}, {MFILE_Q6_K, "q6_k", 2e-2},
};

/*
 * The other KV formats, each with BF16 weights, and how far a backend's
 * logits may stand from the cpu backend's in it. The K and V a backend
 * codes differ from the cpu's by the arithmetic above; where one lies that
 * close to a boundary of the code it lands on the next value, a step far
 * larger than bf16's (2^-8 of the value). compact keeps bf16's figure, as
 * before this table. fp8 (e4m3: 3 bits of mantissa, a step of 1/16 to 1/8
 * of the value, after the same fp32 scale a vector) is given q8_0's 1e-2:
 * the same order as the activations a block type's integer dot products
 * round to 8 bits. On the cpu backend against itself every figure is 0.
 */
static const struct cf_kv {
	enum mdesc_kv_format fmt;
	const char *suffix; /* of the model's name */
	double tol;
} cf_kvs[] = {
    {MDESC_KV_COMPACT, "+compact", 5e-3},
    {MDESC_KV_FP8, "+fp8", 1e-2},
};

#define N_ARCHS (sizeof(cf_archs) / sizeof(cf_archs[0]))
#define N_TYPES (sizeof(cf_types) / sizeof(cf_types[0]))
#define N_KVS   (sizeof(cf_kvs) / sizeof(cf_kvs[0]))
/* every type on bf16 KV, then bf16 weights on each other format */
#define N_MODELS (N_ARCHS * (N_TYPES + N_KVS))

struct cf_model {
	const struct cf_arch *a;
	const struct cf_type *t;
	enum mdesc_kv_format fmt;
	double tol;    /* the type's, or on another KV format that format's */
	char name[64]; /* "qwen35moe/q4_k", "qwen3/bf16+compact" */
};

/* ---- the script: three sequences, their prompts and decode steps --------- */

#define CF_SEQS    3u
#define CF_DECODE  4u
#define CF_STEPS   (1u + CF_DECODE) /* rows of logits a sequence gives */
#define CF_CONTEXT 128u             /* the longest prompt and its decodes, in 2 pages */
#define CF_PAGES   2u
#define CF_ROUND   128u /* the most tokens a round holds: every prompt at once, 109 */
#define CF_THREADS 2u   /* the threads check: 2 against 1 (odd counts split unevenly) */

static const uint32_t cf_prompt_len[CF_SEQS] = {37, 5, 67};

/* How a run feeds the script: all sequences in every round (`together`),
 * or each alone, one after another; prompts in chunks of `chunk` tokens
 * (0: whole). Round r runs the sequences rotated by r, so that each sits
 * first, in the middle and last. */
struct cf_sched {
	bool together;
	uint32_t chunk;
};

/* ---- the state of a run over one backend --------------------------------- */

struct cf_bound {
	struct bem r;
	struct be_seq s[CF_SEQS];
};

struct cf_ctx {
	const char *backend;
	uint64_t seed;
	bool perf;
	/* the self-test's: the backend under test's table (NULL: found by its
	 * name), and comparisons that note a mismatch in `caught` instead of
	 * failing */
	const struct be_ops *ops;
	bool probe, caught;
	struct cf_model models[N_MODELS];
	/* the model the cases now run on: its file, open, and what was
	 * computed once for its cases (NULL until asked) */
	int cur;
	char path[256];
	struct mfile f;
	bool f_open;
	uint32_t tokens[CF_SEQS][CF_CONTEXT];
	float *alone; /* the backend's, each sequence alone, one thread, one pass */
	float *ref;   /* the cpu backend's, the same way */
	/* what the case running now holds (given back by its teardown) */
	struct cf_bound b;
	float *got;
	double secs; /* the case's rounds */
	uint64_t rounds, toks;
};

static size_t cf_rows_bytes(const struct cf_ctx *c)
{
	return (size_t)CF_SEQS * CF_STEPS * c->f.desc.vocab * sizeof(float);
}

static const float *cf_row(const struct cf_ctx *c, const float *all, uint32_t seq, uint32_t step)
{
	return all + ((size_t)seq * CF_STEPS + step) * c->f.desc.vocab;
}

static double cf_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The model's file written and open, its script's tokens drawn. */
static void cf_model_open(struct cf_ctx *c, int k)
{
	const struct cf_model *md = &c->models[k];
	const struct mdesc *src = mdesc_find(md->a->preset);
	struct mdesc lay;
	struct ig_errbuf eb = {0};
	uint64_t g = c->seed * 0x9e3779b97f4a7c15ull + 1;

	if (c->cur == k)
		return;
	if (c->f_open) {
		mfile_close(&c->f);
		c->f_open = false;
	}
	free(c->alone);
	free(c->ref);
	c->alone = c->ref = NULL;
	c->cur = -1;
	if (md->a->arch != MDESC_ARCH_IGNIS) {
		if (mfile_as_layout(src, md->a->arch, &lay, &eb))
			fail_msg("%s: %s", md->name, eb.msg);
		/* llama.cpp's MoE layouts at the oracle test's size, 4 layers (1
		 * full) of 8 experts: half the time, the same operations */
		if (lay.family == MDESC_MOE) {
			lay.layers = 4;
			lay.experts = 8;
		}
		src = &lay;
	}
	snprintf(c->path, sizeof c->path, "/tmp/ignis-conformance-%d.gguf", (int)getpid());
	if (mfile_write_synthetic(src, c->seed, md->t->t, c->path, &eb) ||
	    mfile_open(&c->f, c->path, &eb))
		fail_msg("%s: %s", md->name, eb.msg);
	unlink(c->path);
	c->f_open = true;
	c->cur = k;
	/* byte tokens: every vocabulary here has the 256 */
	for (uint32_t s = 0; s < CF_SEQS; s++)
		for (uint32_t t = 0; t < CF_CONTEXT; t++) {
			g = g * 6364136223846793005ull + 1442695040888963407ull;
			c->tokens[s][t] = (uint32_t)(g >> 33) % 256u;
		}
}

/* What a binding may vary: the backend, its threads, its regions. */
struct cf_bind {
	const char *backend;
	uint32_t threads;
	bool least; /* the least workspace and sampling: a token and a row a pass */
	bool few;   /* a workspace of a few tokens a pass, a row of logits */
	bool each;  /* every kernel launched on its own (be.launch_each) */
};

static void cf_bound_close(struct cf_bound *b)
{
	for (uint32_t i = 0; i < CF_SEQS; i++)
		bem_seq_close(&b->r, &b->s[i]);
	bem_close(&b->r);
	memset(b, 0, sizeof(*b));
}

static void cf_bound_open(struct cf_ctx *c, struct cf_bound *b, const struct cf_bind *how)
{
	const struct cf_model *md = &c->models[c->cur];
	struct bem_opts o = {.backend = how->backend,
	                     .ops = how->backend == c->backend ? c->ops : NULL,
	                     .max_round_tokens = CF_ROUND,
	                     .context = CF_CONTEXT,
	                     .threads = how->threads,
	                     .states = CF_SEQS,
	                     .pages = CF_SEQS * CF_PAGES,
	                     .fmt = md->fmt};
	struct ig_errbuf eb = {0};

	memset(b, 0, sizeof(*b));
	if (how->least || how->few) {
		struct be_needs n;

		if (bem_needs(&o, &c->f, &n, &eb))
			fail_msg("%s on the %s backend: %s", md->name, how->backend, eb.msg);
		o.sampling_bytes = n.sampling_min;
		o.workspace_bytes =
		    how->least ? n.workspace_min
		               : n.workspace_min + (n.workspace_one_pass - n.workspace_min) / 16;
	}
	if (bem_open(&b->r, &c->f, &o, &eb))
		fail_msg("%s on the %s backend: %s", md->name, how->backend, eb.msg);
	b->r.be.launch_each = how->each;
	for (uint32_t i = 0; i < CF_SEQS; i++)
		if (bem_seq_open(&b->r, &b->s[i], i + 1, CF_PAGES, &eb))
			fail_msg("%s: %s", md->name, eb.msg);
}

/* Run the script on `b` by `sc`: out gets each sequence's CF_STEPS rows of
 * logits. Timed into c->secs (the rounds only). */
static void cf_run(struct cf_ctx *c, struct cf_bound *b, const struct cf_sched *sc, float *out)
{
	const struct cf_model *md = &c->models[c->cur];
	uint32_t vocab = c->f.desc.vocab;
	uint32_t fed[CF_SEQS] = {0}, rows[CF_SEQS] = {0};
	float *logits = malloc((size_t)CF_SEQS * vocab * sizeof(float));
	struct ig_errbuf eb = {0};

	assert_non_null(logits);
	for (uint32_t first = 0; first < CF_SEQS; first++) {
		uint32_t lo = sc->together ? 0 : first, hi = sc->together ? CF_SEQS : first + 1;

		for (uint32_t r = 0;; r++) {
			struct be_step steps[CF_SEQS];
			uint32_t who[CF_SEQS], n = 0, k = 0;
			double t0;

			for (uint32_t j = 0; j < hi - lo; j++) {
				uint32_t i = lo + (j + r) % (hi - lo);
				uint32_t plen = cf_prompt_len[i], left, take;

				if (rows[i] == CF_STEPS)
					continue;
				left = fed[i] < plen ? plen - fed[i] : 1;
				take = fed[i] < plen && sc->chunk && sc->chunk < left ? sc->chunk
				                                                      : left;
				steps[n] = (struct be_step){&b->s[i], c->tokens[i] + fed[i], take,
				                            fed[i] + take >= plen};
				who[n++] = i;
			}
			if (!n)
				break;
			t0 = cf_now();
			if (bem_round(&b->r, steps, n, logits, &eb))
				fail_msg("%s: round %u: %s", md->name, r, eb.msg);
			c->secs += cf_now() - t0;
			c->rounds++;
			for (uint32_t j = 0; j < n; j++) {
				uint32_t i = who[j];

				c->toks += steps[j].n_tok;
				fed[i] += steps[j].n_tok;
				if (!steps[j].tail_logits)
					continue;
				memcpy(out + ((size_t)i * CF_STEPS + rows[i]) * vocab,
				       logits + (size_t)k++ * vocab, vocab * sizeof(float));
				rows[i]++;
			}
		}
		if (sc->together)
			break;
	}
	free(logits);
}

/* One binding, one run, given back. */
static void cf_bind_run(struct cf_ctx *c, const struct cf_bind *how, const struct cf_sched *sc,
                        float *out)
{
	cf_bound_open(c, &c->b, how);
	cf_run(c, &c->b, sc, out);
	cf_bound_close(&c->b);
}

static const struct cf_sched cf_alone = {false, 0};

/* The backend's own baseline: each sequence alone, one thread, one pass. */
static const float *cf_baseline(struct cf_ctx *c)
{
	if (!c->alone) {
		double secs = c->secs;
		uint64_t rounds = c->rounds, toks = c->toks;
		float *rows = malloc(cf_rows_bytes(c));

		assert_non_null(rows);
		cf_bind_run(c, &(struct cf_bind){c->backend, 1, false, false, false}, &cf_alone,
		            rows);
		c->alone = rows; /* kept only once whole */
		/* not the case's time */
		c->secs = secs, c->rounds = rounds, c->toks = toks;
	}
	return c->alone;
}

/* The cpu backend's, the same way: the reference. */
static const float *cf_reference(struct cf_ctx *c)
{
	if (!strcmp(c->backend, "cpu"))
		return cf_baseline(c);
	if (!c->ref) {
		double secs = c->secs;
		uint64_t rounds = c->rounds, toks = c->toks;
		float *rows = malloc(cf_rows_bytes(c));

		assert_non_null(rows);
		cf_bind_run(c, &(struct cf_bind){"cpu", 1, false, false, false}, &cf_alone, rows);
		c->ref = rows;
		c->secs = secs, c->rounds = rounds, c->toks = toks;
	}
	return c->ref;
}

/*
 * The two comparisons, on any vector (a row of logits; a layer operation's
 * output): `where` says which ("sequence 1 step 3"), the failure names the
 * model, the check, the first element that is off and the seed.
 */

/* `got` the same bits as `want`, n floats. */
static void cf_bits(struct cf_ctx *c, const char *what, const char *where, const float *want,
                    const float *got, size_t n)
{
	for (size_t v = 0; v < n; v++)
		if (memcmp(&want[v], &got[v], sizeof(float)) && c->probe) {
			c->caught = true;
			return;
		} else if (memcmp(&want[v], &got[v], sizeof(float)))
			fail_msg("%s on %s: %s: element %zu is %.9g, want %.9g (seed %" PRIu64 ")",
			         c->models[c->cur].name, what, where, v, (double)got[v],
			         (double)want[v], c->seed);
}

/* `got` within the model's type's tolerance of `ref`'s spread (max - min),
 * n floats, every one finite; the difference as a fraction of the spread
 * returned. */
static double cf_near(struct cf_ctx *c, const char *what, const char *where, const float *ref,
                      const float *got, size_t n)
{
	const struct cf_model *md = &c->models[c->cur];
	double lo = INFINITY, hi = -INFINITY, diff = 0, tol = md->tol;

	for (size_t v = 0; v < n; v++) {
		if (!isfinite(got[v]))
			fail_msg("%s on %s: %s: element %zu is %g", md->name, what, where, v,
			         (double)got[v]);
		lo = fmin(lo, ref[v]);
		hi = fmax(hi, ref[v]);
		diff = fmax(diff, fabs((double)ref[v] - got[v]));
	}
	if (!(hi > lo))
		fail_msg("%s on %s: %s: the reference is %g throughout", md->name, what, where, lo);
	if (diff > tol * (hi - lo) && c->probe)
		c->caught = true;
	else if (diff > tol * (hi - lo))
		fail_msg("%s on %s: %s: differs by %g, spread %g (tolerance %g of it; seed %" PRIu64
		         ")",
		         md->name, what, where, diff, hi - lo, tol, c->seed);
	return diff / (hi - lo);
}

/* Every row of logits the same bits as each alone's. */
static void cf_same(struct cf_ctx *c, const char *what, const float *want, const float *got)
{
	char where[64];

	for (uint32_t s = 0; s < CF_SEQS; s++)
		for (uint32_t k = 0; k < CF_STEPS; k++) {
			snprintf(where, sizeof where, "sequence %u step %u", s, k);
			cf_bits(c, what, where, cf_row(c, want, s, k), cf_row(c, got, s, k),
			        c->f.desc.vocab);
		}
}

/* Every row of logits near the reference's, and the greedy pick the
 * reference's wherever its top two are further apart than twice the
 * tolerance; the worst fraction of the spread returned. */
static double cf_close(struct cf_ctx *c, const char *what, const float *ref, const float *got)
{
	const struct cf_model *md = &c->models[c->cur];
	uint32_t vocab = c->f.desc.vocab;
	double worst = 0;
	char where[64];

	for (uint32_t s = 0; s < CF_SEQS; s++)
		for (uint32_t k = 0; k < CF_STEPS; k++) {
			const float *a = cf_row(c, ref, s, k), *b = cf_row(c, got, s, k);
			uint32_t best = a[1] > a[0], second = !best, mine = 0;
			float lo = a[0], hi = a[0];

			snprintf(where, sizeof where, "sequence %u step %u", s, k);
			worst = fmax(worst, cf_near(c, what, where, a, b, vocab));
			for (uint32_t v = 0; v < vocab; v++) {
				lo = a[v] < lo ? a[v] : lo;
				hi = a[v] > hi ? a[v] : hi;
				if (v > 1 && a[v] > a[best])
					second = best, best = v;
				else if (v > 1 && a[v] > a[second])
					second = v;
				mine = b[v] > b[mine] ? v : mine;
			}
			if ((double)a[best] - a[second] > 2 * md->tol * (hi - lo) && mine != best)
				fail_msg(
				    "%s on %s: %s: picks %u, the cpu backend %u (its top two %g "
				    "apart)",
				    md->name, what, where, mine, best,
				    (double)(a[best] - a[second]));
		}
	return worst;
}

/* ---- the operations ------------------------------------------------------ */

static float *cf_out(struct cf_ctx *c)
{
	if (!c->got)
		c->got = malloc(cf_rows_bytes(c));
	assert_non_null(c->got);
	return c->got;
}

/* A whole round, every sequence in it (prefill chunks beside decode
 * steps), against the cpu backend each alone. */
static void op_round(struct cf_ctx *c)
{
	const float *ref = cf_reference(c);
	float *got = cf_out(c);
	double worst;

	cf_bind_run(c, &(struct cf_bind){c->backend, 1, false, false, false},
	            &(struct cf_sched){true, 16}, got);
	worst = cf_close(c, "rounds against the cpu backend", ref, got);
	if (c->perf || worst > 0)
		print_message("# %s %s: worst logit %.3g of the spread (tolerance %.3g)\n",
		              c->backend, c->models[c->cur].name, worst, c->models[c->cur].tol);
}

/* Lanes: the sequences together in every round, whole prompts, bit for
 * bit each alone. */
static void op_lanes(struct cf_ctx *c)
{
	const float *want = cf_baseline(c);
	float *got = cf_out(c);

	cf_bind_run(c, &(struct cf_bind){c->backend, 1, false, false, false},
	            &(struct cf_sched){true, 0}, got);
	cf_same(c, "lanes (together against alone)", want, got);
}

/* Chunks: each alone, its prompt in chunks of 7 (and 5 in one), bit for
 * bit the prompt in one chunk. */
static void op_chunks(struct cf_ctx *c)
{
	const float *want = cf_baseline(c);
	float *got = cf_out(c);

	cf_bind_run(c, &(struct cf_bind){c->backend, 1, false, false, false},
	            &(struct cf_sched){false, 7}, got);
	cf_same(c, "chunks (chunks of 7 against one)", want, got);
}

/* Passes: the sequences together on a workspace of a few tokens and one
 * row of logits, then of the least (a token a pass), bit for bit each
 * alone in one pass. */
static void op_passes(struct cf_ctx *c)
{
	const float *want = cf_baseline(c);
	float *got = cf_out(c);

	cf_bound_open(c, &c->b, &(struct cf_bind){c->backend, 1, false, true, false});
	assert_true(c->b.r.d.pass_tokens < CF_ROUND);
	assert_int_equal(c->b.r.d.logit_rows, 1);
	cf_run(c, &c->b, &(struct cf_sched){true, 0}, got);
	cf_bound_close(&c->b);
	cf_same(c, "passes (a few tokens a pass against one pass)", want, got);
	cf_bound_open(c, &c->b, &(struct cf_bind){c->backend, 1, true, false, false});
	assert_int_equal(c->b.r.d.pass_tokens, 1);
	cf_run(c, &c->b, &(struct cf_sched){true, 16}, got);
	cf_bound_close(&c->b);
	cf_same(c, "passes (a token a pass against one pass)", want, got);
}

/* Rows: the longest prompt in one step asking the logits of every position
 * (be_step.tail_logits, a prompt's log-probabilities: docs/adr/0063), on
 * one pass and on the least sampling (a row a pass: the step cut by its
 * rows), bit for bit the logits each position gives as a prompt's end,
 * the prompt fed a token a step. */
static void op_rows(struct cf_ctx *c)
{
	const uint32_t s = CF_SEQS - 1, plen = cf_prompt_len[s];
	size_t vocab = c->f.desc.vocab;
	float *want = malloc(plen * vocab * sizeof(float)), *got = malloc(plen * vocab * sizeof(float));
	struct ig_errbuf eb = {0};
	char where[64];

	assert_non_null(want);
	assert_non_null(got);
	for (int how = 0; how < 3; how++) {
		cf_bound_open(c, &c->b, &(struct cf_bind){c->backend, 1, how == 2, false, false});
		for (uint32_t t = 0; how == 0 && t < plen; t++) {
			struct be_step st = {&c->b.s[s], c->tokens[s] + t, 1, 1};

			if (bem_round(&c->b.r, &st, 1, want + t * vocab, &eb))
				fail_msg("%s: a token at %u: %s", c->models[c->cur].name, t, eb.msg);
		}
		if (how) {
			struct be_step st = {&c->b.s[s], c->tokens[s], plen, plen};

			if (bem_round(&c->b.r, &st, 1, got, &eb))
				fail_msg("%s: every row: %s", c->models[c->cur].name, eb.msg);
		}
		cf_bound_close(&c->b);
		for (uint32_t t = 0; how && t < plen; t++) {
			snprintf(where, sizeof where, "position %u%s", t, how == 2 ? " (a row a pass)" : "");
			cf_bits(c, "rows (every position against each as a prompt's end)", where,
			        want + t * vocab, got + t * vocab, vocab);
		}
	}
	free(want);
	free(got);
}

/* Threads: the sequences together on CF_THREADS threads, bit for bit each
 * alone on one. */
static void op_threads(struct cf_ctx *c)
{
	const float *want = cf_baseline(c);
	float *got = cf_out(c);

	cf_bind_run(c, &(struct cf_bind){c->backend, CF_THREADS, false, false, false},
	            &(struct cf_sched){true, 16}, got);
	cf_same(c, "threads (2 against 1)", want, got);
}

/* Launches: the sequences together, every kernel launched on its own
 * (be.launch_each), bit for bit the same rounds with the backend's own
 * launching (the cuda backend replays recorded decode passes: a replay must
 * run what a fresh walk enqueues). The cpu backend has one way: the check
 * is the cuda backend's. */
static void op_launches(struct cf_ctx *c)
{
	float *want = malloc(cf_rows_bytes(c)), *got = cf_out(c);

	assert_non_null(want);
	cf_bind_run(c, &(struct cf_bind){c->backend, 1, false, false, false},
	            &(struct cf_sched){true, 0}, want);
	cf_bind_run(c, &(struct cf_bind){c->backend, 1, false, false, true},
	            &(struct cf_sched){true, 0}, got);
	cf_same(c, "launches (each kernel on its own against the backend's own)", want, got);
	free(want);
}

/* ---- each layer operation, through the table's trace (backend.h) -------- */

#define CF_TRACE_MAX 512u /* records a round gives at most: the embedding, 2 a layer */

struct cf_trace {
	struct be_trace t;
	float *all; /* the records' rows, one after another */
	uint64_t cap, used;
	uint32_t n;
	bool overflow;
	struct {
		char op[16];
		uint32_t layer;
		uint64_t off, len;
	} rec[CF_TRACE_MAX];
};

static void cf_trace_after(void *ctx, const char *op, uint32_t layer, const float *rows, uint64_t n)
{
	struct cf_trace *tr = ctx;

	if (tr->n == CF_TRACE_MAX || tr->used + n > tr->cap) {
		tr->overflow = true;
		return;
	}
	snprintf(tr->rec[tr->n].op, sizeof tr->rec[tr->n].op, "%s", op);
	tr->rec[tr->n].layer = layer;
	tr->rec[tr->n].off = tr->used;
	tr->rec[tr->n].len = n;
	memcpy(tr->all + tr->used, rows, n * sizeof(float));
	tr->used += n;
	tr->n++;
}

static void cf_trace_free(struct cf_trace *tr)
{
	if (!tr)
		return;
	free(tr->all);
	free(tr->t.rows);
	free(tr);
}

/* One round on the backend `name`, traced: every prompt whole, together. */
static struct cf_trace *cf_trace_run(struct cf_ctx *c, const char *name)
{
	const struct mdesc *m = &c->f.desc;
	struct cf_trace *tr = calloc(1, sizeof(*tr));
	float *logits = malloc((size_t)CF_SEQS * m->vocab * sizeof(float));
	struct be_step steps[CF_SEQS];
	struct ig_errbuf eb = {0};
	uint64_t tokens = 0;
	double t0;

	assert_true(tr && logits);
	for (uint32_t s = 0; s < CF_SEQS; s++)
		tokens += cf_prompt_len[s];
	tr->cap = (1u + 2ull * m->layers) * tokens * m->hidden;
	tr->all = malloc(tr->cap * sizeof(float));
	tr->t = (struct be_trace){cf_trace_after, tr, malloc(tokens * m->hidden * sizeof(float)),
	                          tokens * m->hidden};
	assert_true(tr->all && tr->t.rows);
	cf_bound_open(c, &c->b, &(struct cf_bind){name, 1, false, false, false});
	for (uint32_t s = 0; s < CF_SEQS; s++)
		steps[s] = (struct be_step){&c->b.s[s], c->tokens[s], cf_prompt_len[s], true};
	c->b.r.be.trace = &tr->t;
	t0 = cf_now();
	if (bem_round(&c->b.r, steps, CF_SEQS, logits, &eb))
		fail_msg("%s: the traced round: %s", c->models[c->cur].name, eb.msg);
	c->secs += cf_now() - t0;
	c->rounds++;
	c->toks += tokens;
	c->b.r.be.trace = NULL;
	cf_bound_close(&c->b);
	free(logits);
	if (tr->overflow)
		fail_msg("%s on %s: the trace holds %u records of %" PRIu64 " floats at most",
		         c->models[c->cur].name, name, CF_TRACE_MAX, tr->cap);
	return tr;
}

/* Layers: one round of every prompt, the residual rows after the
 * embedding and after each layer's token mixer and feed-forward (backend.h's
 * trace), each within the type's tolerance of the cpu backend's: which
 * operation of which layer first parts from the reference. */
static void op_layers(struct cf_ctx *c)
{
	struct cf_trace *want = cf_trace_run(c, "cpu"), *got = cf_trace_run(c, c->backend);
	const char *what = "layer operations against the cpu backend";
	double worst = 0;
	char where[64];

	if (!want->n)
		fail_msg("%s: the cpu backend traced no layer operation", c->models[c->cur].name);
	if (got->n != want->n && c->probe)
		c->caught = true;
	else if (got->n != want->n)
		fail_msg("%s on %s: %u layer operations traced, the cpu backend %u (every "
		         "backend honours be.trace)",
		         c->models[c->cur].name, c->backend, got->n, want->n);
	for (uint32_t k = 0; got->n == want->n && k < want->n; k++) {
		if (strcmp(want->rec[k].op, got->rec[k].op) ||
		    want->rec[k].layer != got->rec[k].layer || want->rec[k].len != got->rec[k].len)
			fail_msg(
			    "%s on %s: operation %u is %s of layer %u, the cpu backend's %s of "
			    "layer %u",
			    c->models[c->cur].name, c->backend, k, got->rec[k].op,
			    got->rec[k].layer, want->rec[k].op, want->rec[k].layer);
		snprintf(where, sizeof where, "%s of layer %u", want->rec[k].op,
		         want->rec[k].layer);
		worst = fmax(worst, cf_near(c, what, where, want->all + want->rec[k].off,
		                            got->all + got->rec[k].off, want->rec[k].len));
	}
	if (c->perf || worst > 0)
		print_message("# %s %s: %u layer operations, the worst %.3g of the spread "
		              "(tolerance %.3g)\n",
		              c->backend, c->models[c->cur].name, want->n, worst,
		              c->models[c->cur].tol);
	cf_trace_free(want);
	cf_trace_free(got);
}

/* The dense models: the ones every backend runs. */
static bool cf_dense(const struct mdesc *m)
{
	return m->family == MDESC_DENSE;
}

/*
 * The operations, a case each per model. `applies` (NULL: every model)
 * leaves out the models an operation has nothing to check on (a layer
 * operation of linear attention on qwen3, routing on a dense model).
 */
static const struct cf_op {
	const char *name;
	void (*run)(struct cf_ctx *c);
	bool (*applies)(const struct mdesc *m);
} cf_ops[] = {
    {"round", op_round, NULL},           {"lanes", op_lanes, NULL},     {"chunks", op_chunks, NULL},
    {"passes", op_passes, NULL},         {"threads", op_threads, NULL}, {"layers", op_layers, NULL},
    {"launches", op_launches, cf_dense}, {"rows", op_rows, NULL},
};

#define N_OPS (sizeof(cf_ops) / sizeof(cf_ops[0]))

/* ---- the cases, as cmocka tests ------------------------------------------ */

struct cf_case {
	struct cf_ctx *c;
	int model;
	const struct cf_op *op;
	char name[128];
};

static void cf_case_run(void **state)
{
	struct cf_case *k = *state;
	struct cf_ctx *c = k->c;

	cf_model_open(c, k->model);
	c->secs = 0;
	c->rounds = c->toks = 0;
	k->op->run(c);
	if (c->perf)
		print_message("# perf %s: %.2f ms (%" PRIu64 " rounds, %" PRIu64 " tokens)\n",
		              k->name, c->secs * 1e3, c->rounds, c->toks);
}

/* What a case held, given back even when it failed. */
static int cf_case_teardown(void **state)
{
	struct cf_case *k = *state;

	cf_bound_close(&k->c->b);
	free(k->c->got);
	k->c->got = NULL;
	return 0;
}

static bool cf_applies(const struct cf_ctx *c, const struct cf_model *md, const struct cf_op *op)
{
	struct mdesc lay;
	const struct mdesc *m = mdesc_find(md->a->preset);

	(void)c;
	if (!op->applies)
		return true;
	if (md->a->arch != MDESC_ARCH_IGNIS && !mfile_as_layout(m, md->a->arch, &lay, NULL))
		m = &lay;
	return op->applies(m);
}

/* Does `filter` (TEXT[,TEXT...]; NULL: every case) name `name`: does any of
 * its comma-separated parts occur in it? */
static bool cf_named(const char *name, const char *filter)
{
	const char *p = filter;

	if (!filter)
		return true;
	while (*p) {
		size_t len = strcspn(p, ",");
		char part[64];

		if (len && len < sizeof(part)) {
			memcpy(part, p, len);
			part[len] = '\0';
			if (strstr(name, part))
				return true;
		}
		p += len + (p[len] == ',');
	}
	return false;
}

/* Run every case on `c->backend` that `filter` names; the failures. */
static int cf_run_backend(struct cf_ctx *c, const char *filter)
{
	struct cf_case *cases = calloc(N_MODELS * N_OPS, sizeof(*cases));
	struct CMUnitTest *tests = calloc(N_MODELS * N_OPS, sizeof(*tests));
	size_t n = 0;
	int failed;

	assert_true(cases && tests);
	for (int m = 0; m < (int)N_MODELS; m++)
		for (size_t o = 0; o < N_OPS; o++) {
			struct cf_case *k = &cases[n];

			if (!cf_applies(c, &c->models[m], &cf_ops[o]))
				continue;
			*k = (struct cf_case){c, m, &cf_ops[o], ""};
			snprintf(k->name, sizeof k->name, "%s/%s/%s", c->backend, c->models[m].name,
			         cf_ops[o].name);
			if (!cf_named(k->name, filter))
				continue;
			tests[n++] =
			    (struct CMUnitTest){k->name, cf_case_run, NULL, cf_case_teardown, k};
		}
	failed = _cmocka_run_group_tests(c->backend, tests, n, NULL, NULL);
	if (c->f_open)
		mfile_close(&c->f);
	c->f_open = false;
	free(c->alone);
	free(c->ref);
	c->alone = c->ref = NULL;
	c->cur = -1;
	free(tests);
	free(cases);
	return failed;
}

/* ---- the self-test: each check fails on a backend that breaks it -------- */

/*
 * A wrapper of the cpu backend's table whose rounds are off where a
 * nonconforming backend's would be: by one ulp of each row's first logit
 * (what a bit-for-bit check must see) in a round of several sequences
 * (lanes), in the last chunk of a prompt that began earlier (chunks), in a
 * round cut in passes (passes), in a step asking more than one row of
 * logits (rows), on more than one thread (threads), in
 * every round not launched kernel by kernel (launches); by 1.0
 * in every round (round, against the cpu backend's tolerance) and in each
 * traced layer operation's rows (layers). The mode is
 * the test's (the table's round has no context of its own).
 */
static const struct be_ops *cf_cpu;
static const char *cf_break; /* the op whose check must see it */

/* layers: each traced operation's rows off by 1.0 in their first element */
static void cf_broken_after(void *ctx, const char *op, uint32_t layer, const float *rows,
                            uint64_t n)
{
	const struct be_trace *to = ctx;

	(void)rows;
	to->rows[0] += 1.0f;
	to->after(to->ctx, op, layer, to->rows, n);
}

static int cf_broken_round(struct be *b, const struct be_model *m, const struct be_step *steps,
                           uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                           uint64_t context, float *logits, struct ig_errbuf *eb)
{
	const struct be_trace *to = b->trace;
	struct be_trace shim = {cf_broken_after, (void *)to, to ? to->rows : NULL,
	                        to ? to->cap : 0};
	int rc;
	uint64_t tokens = 0;

	if (to && !strcmp(cf_break, "layers"))
		b->trace = &shim;
	rc = cf_cpu->round(b, m, steps, n_steps, fmt, kv, context, logits, eb);
	b->trace = to;
	uint32_t rows = 0;
	bool off = !strcmp(cf_break, "round") || (!strcmp(cf_break, "lanes") && n_steps > 1) ||
	           (!strcmp(cf_break, "threads") && m->threads > 1);

	for (uint32_t i = 0; i < n_steps; i++) {
		tokens += steps[i].n_tok;
		rows += steps[i].tail_logits;
		/* (the round moved the position past the step's tokens) */
		off |= !strcmp(cf_break, "rows") && steps[i].tail_logits > 1;
		off |= !strcmp(cf_break, "chunks") && steps[i].tail_logits && steps[i].n_tok > 1 &&
		       steps[i].s->pos > steps[i].n_tok;
	}
	off |= !strcmp(cf_break, "passes") && (tokens > m->pass_tokens || rows > m->logit_rows);
	off |= !strcmp(cf_break, "launches") && !b->launch_each;
	for (uint32_t r = 0; !rc && off && r < rows; r++) {
		float *x = &logits[(size_t)r * m->m->vocab];

		*x = strcmp(cf_break, "round") ? nextafterf(*x, INFINITY) : *x + 1.0f;
	}
	return rc;
}

/* The op on the wrapper breaking nothing, then breaking what the op checks:
 * its check must pass the first and see the second. */
static void cf_self_case(void **state)
{
	struct cf_case *k = *state;
	struct cf_ctx *c = k->c;
	for (int i = 0; i < 2; i++) {
		cf_break = i ? k->op->name : "nothing";
		c->cur = -1; /* the baselines again, on this breakage */
		cf_model_open(c, k->model);
		c->probe = true;
		c->caught = false;
		k->op->run(c);
		c->probe = false;
		if (c->caught != (i == 1))
			fail_msg("the %s check %s a backend that breaks %s", k->op->name,
			         i ? "passed" : "failed", cf_break);
	}
}

/* Each operation's check against a backend that breaks it, on one model. */
static int cf_self_test(struct cf_ctx *c)
{
	static struct be_ops broken;
	struct cf_case cases[N_OPS];
	struct CMUnitTest tests[N_OPS];
	struct ig_errbuf eb;
	int model = 0, failed;

	cf_cpu = backend_find("cpu", &eb);
	assert_non_null(cf_cpu);
	broken = *cf_cpu;
	broken.name = "cpu-broken";
	broken.round = cf_broken_round;
	c->backend = broken.name;
	c->ops = &broken;
	while (strcmp(c->models[model].name, "qwen35/q8_0"))
		model++;
	for (size_t o = 0; o < N_OPS; o++) {
		cases[o] = (struct cf_case){c, model, &cf_ops[o], ""};
		snprintf(cases[o].name, sizeof cases[o].name, "self-test: %s breaks %s",
		         broken.name, cf_ops[o].name);
		tests[o] = (struct CMUnitTest){cases[o].name, cf_self_case, NULL, cf_case_teardown,
		                               &cases[o]};
	}
	failed = _cmocka_run_group_tests("self-test", tests, N_OPS, NULL, NULL);
	if (c->f_open)
		mfile_close(&c->f);
	free(c->alone);
	free(c->ref);
	return failed;
}

int main(int argc, char **argv)
{
	static const char *const all[] = BEM_BACKENDS;
	static struct cf_ctx c;
	const char *names[sizeof(all) / sizeof(all[0])], *filter = NULL;
	size_t n_names = 0;
	int failed = 0, ran = 0;
	bool self = false;

	c.seed = 29;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--perf"))
			c.perf = true;
		else if (!strcmp(argv[i], "--backend") && i + 1 < argc && n_names < 1)
			names[n_names++] = argv[++i];
		else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
			filter = argv[++i];
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			c.seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--self-test"))
			self = true;
		else {
			fprintf(stderr, "usage: test-conformance [--backend NAME] [--perf] "
			                "[--filter TEXT] [--seed N] [--self-test]\n");
			return 2;
		}
	}
	if (!n_names)
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
			names[n_names++] = all[i];
	for (size_t a = 0, k = 0; a < N_ARCHS; a++)
		for (size_t t = 0; t < N_TYPES + N_KVS; t++, k++) {
			struct cf_model *md = &c.models[k];
			const struct cf_kv *kv = t < N_TYPES ? NULL : &cf_kvs[t - N_TYPES];

			md->a = &cf_archs[a];
			md->t = kv ? &cf_types[2] : &cf_types[t];
			md->fmt = kv ? kv->fmt : MDESC_KV_BF16;
			md->tol = kv ? kv->tol : md->t->tol;
			snprintf(md->name, sizeof md->name, "%s/%s%s", md->a->name, md->t->name,
			         kv ? kv->suffix : "");
		}
	printf("# seed %" PRIu64 " (--seed N to change it)\n", c.seed);
	if (self)
		return cf_self_test(&c);
	for (size_t i = 0; i < n_names; i++) {
		char why[256];

		if (!bem_backend_here(names[i], why, sizeof why)) {
			printf("# the %s backend: skipped: %s\n", names[i], why);
			continue;
		}
		c.backend = names[i];
		c.cur = -1;
		failed += cf_run_backend(&c, filter);
		ran++;
	}
	return failed ? failed : ran ? 0 : 77;
}
