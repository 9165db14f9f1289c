/*
 * engrig.h - the engine tests' rig: a tiny preset written as a model file,
 * bound on the backend the test's command line names (cpu unless
 * `--backend NAME`: rig_args; rounds of at most RIG_ROUND_TOKENS tokens
 * over contexts of at most RIG_CONTEXT, on `threads` threads; its regions
 * those of one pass, or the least it takes), its weights placed in the
 * backend's memory (alloc and copy_h2d, as the worker's plan places them:
 * on every backend, cpu included, so that the cpu rows bind as the cuda
 * ones must), and a KV pool of `pages` pages of rig_fmt (bf16 unless the
 * test's command line names another: rig_args) in the backend's memory
 * (on a test's wrapper of the backend's table when rig_ops names one).
 *
 * What the rig's backend holds (the pool's pages, the regions, a
 * sequence's state, the placed weights) is device memory: a test reads or
 * writes it through the table's copy_d2h and copy_h2d only (rig_page_fill),
 * never through a host pointer, so that each test means the same on a GPU.
 * Include after <cmocka.h> and testutil.h.
 */
#ifndef IGNIS_TESTS_ENGRIG_H
#define IGNIS_TESTS_ENGRIG_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/kvpool.h"
#include "model/mfile.h"

#define RIG_ROUND_TOKENS 512u
#define RIG_CONTEXT      1024u
#define RIG_STATES       64u /* state slots: as many as an engine test runs at once */

/* A tensor the rig's placer put in the backend's memory. */
struct rig_placed {
	void *base;
	uint64_t bytes;
};

struct rig {
	struct be be; /* the backend under test: the pool lives in its memory */
	struct mfile f;
	struct be_bind_opts bo; /* the bound model's regions, reserved on `be` */
	struct be_model d;
	struct kvpool kv;
	void *region;
	uint64_t region_bytes;
	/* the weights placed (rig_place), freed at rig_close; placed_used: the
	 * device bytes their allocations took (be.used's growth) */
	struct rig_placed *placed;
	uint32_t n_placed, cap_placed;
	uint64_t placed_used;
};

/* The least regions model_bind takes instead of those for one pass: a
 * workspace of one token and room for one row of logits, so that every
 * round runs a token and a row of logits a pass. */
static inline void rig_shrink(struct rig *r)
{
	struct be_needs n;
	struct ig_errbuf eb;

	assert_int_equal(r->be.ops->model_needs(&r->be, &r->f, &r->bo, &n, &eb), IG_E_OK);
	r->be.ops->free(&r->be, r->bo.workspace.base, r->bo.workspace.bytes);
	r->be.ops->free(&r->be, r->bo.sampling.base, r->bo.sampling.bytes);
	r->bo.workspace.bytes = n.workspace_min;
	r->bo.sampling.bytes = n.sampling_min;
	assert_int_equal(r->be.ops->alloc(&r->be, n.workspace_min, &r->bo.workspace.base, &eb),
	                 IG_E_OK);
	assert_int_equal(r->be.ops->alloc(&r->be, n.sampling_min, &r->bo.sampling.base, &eb),
	                 IG_E_OK);
}

/* The backend the rig binds on ("--backend NAME": rig_args). */
static const char *rig_backend = "cpu";
/* The type the rig's model file is written in (ignis-mkmodel --dtype). */
static enum mfile_dtype rig_dtype = MFILE_BF16;
/* When not IGNIS, the preset's shapes in that llama.cpp layout
 * (mfile_as_layout: qwen3 or qwen35 for a dense preset, qwen35moe or
 * qwen3next for a moe one). */
static enum mdesc_arch rig_arch = MDESC_ARCH_IGNIS;
/* When not NULL, the table the rig opens and binds on instead of
 * rig_backend's own: a test's wrapper of that table, which watches what the
 * engine asks of the backend (test_moves' hands-off checks). */
static const struct be_ops *rig_ops;
/* The KV format of the rig's pool (its page bytes) and of the engines a
 * test makes on it (eng_cfg.fmt takes it): bf16 unless the command line
 * names another (rig_args). */
static enum mdesc_kv_format rig_fmt = MDESC_KV_BF16;
/* In a compact format the rig binds with a residual window (common/model.h)
 * this small, so that the tests' prompts and outputs cross it: their
 * exactness covers the positions read in bf16 and those read from pages. */
#define RIG_KV_SINKS  4u
#define RIG_KV_WINDOW 16u

/* "--kv-format NAME" (bf16, fp8, compact: mdesc_kv_format_parse) anywhere in
 * argv sets rig_fmt, "--backend NAME" rig_backend; the first other
 * argument, if any, is returned in *name (NULL: none). 0 to run the tests;
 * otherwise the test's exit status, with a line on stderr: 2 for an
 * unknown format, backend or argument, 77 (meson's skip) for a backend
 * this build or machine does not run (cuda without CUDA or without a
 * device) or that has no compute for models yet. */
static inline int rig_args(int argc, char **argv, const char **name)
{
	struct ig_errbuf eb = {0};
	struct be b = {0};
	int rc;

	*name = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--kv-format") && i + 1 < argc) {
			rig_fmt = mdesc_kv_format_parse(argv[++i]);
			if (!rig_fmt) {
				fprintf(
				    stderr,
				    "no KV format '%s'; accepted: bf16, fp8, compact, compact1\n",
				    argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
			rig_backend = argv[++i];
		} else if (!*name && argv[i][0] != '-') {
			*name = argv[i];
		} else {
			fprintf(stderr,
			        "usage: %s [--backend cpu|cuda] [--kv-format bf16|fp8|compact] "
			        "[TEST]\n",
			        argv[0]);
			return 2;
		}
	}
	/* a backend this build or machine does not run: skipped, saying why
	 * (as test_backend.c and test_conformance.c do) */
	b.ops = backend_find(rig_backend, &eb);
	if (!b.ops) {
		fprintf(stderr, "%s: the %s backend: %s\n", argv[0], rig_backend, eb.msg);
		return strcmp(rig_backend, "cuda") ? 2 : 77;
	}
	if (!b.ops->model_bind || !b.ops->round) {
		fprintf(stderr, "%s: the %s backend: skipped: it has no compute for models yet\n",
		        argv[0], rig_backend);
		return 77;
	}
	rc = b.ops->open(&b, 1ull << 30, &eb);
	if (rc == IG_E_NOTFOUND) {
		fprintf(stderr, "%s: the %s backend: skipped: %s\n", argv[0], rig_backend, eb.msg);
		return 77;
	}
	if (rc) {
		fprintf(stderr, "%s: the %s backend does not open: %s\n", argv[0], rig_backend,
		        eb.msg);
		return 1;
	}
	b.ops->close(&b);
	return 0;
}

/* True on the cpu backend (its own table or a test's wrapper of it), where
 * device memory is host memory. */
static inline bool rig_on_cpu(void)
{
	return !strcmp(rig_backend, "cpu");
}

/* An engine test's main after rig_args: the test named, in the format
 * named; with no name, `all` in bf16, or `fmt` (the subset a format row of
 * tests/unit/meson.build runs) in another format. */
static inline int rig_run(const char *name, const struct CMUnitTest *all, size_t n_all,
                          const struct CMUnitTest *fmt, size_t n_fmt)
{
	if (name)
		cmocka_set_test_filter(name);
	if (rig_fmt != MDESC_KV_BF16 && !name)
		return _cmocka_run_group_tests(mdesc_kv_format_name(rig_fmt), fmt, n_fmt, NULL,
		                               NULL);
	return _cmocka_run_group_tests("tests", all, n_all, NULL, NULL);
}

/* The rig's placer (struct be_placer): each tensor in memory of its own on
 * the rig's backend, copied there, freed at rig_close (tools/bemodel.c's
 * bem__place). */
static inline int rig_place(void *ctx, const char *name, const void *src, uint64_t bytes,
                            const void **at, struct ig_errbuf *eb)
{
	struct rig *r = ctx;
	uint64_t used = r->be.used;
	void *dst = NULL;
	int rc;

	if (r->n_placed == r->cap_placed) {
		uint32_t cap = r->cap_placed ? 2 * r->cap_placed : 64;
		struct rig_placed *p = realloc(r->placed, cap * sizeof(*p));

		if (!p)
			return ig_errf(eb, IG_E_NOMEM, "host memory for the list of %u tensors",
			               cap);
		r->placed = p;
		r->cap_placed = cap;
	}
	rc = r->be.ops->alloc(&r->be, bytes, &dst, eb);
	if (!rc) {
		r->placed[r->n_placed++] = (struct rig_placed){dst, bytes};
		r->placed_used += r->be.used - used;
		rc = r->be.ops->copy_h2d(&r->be, dst, src, bytes, eb);
	}
	if (rc) {
		ig_errprefix(eb, "tensor '%s'", name);
		return rc;
	}
	*at = dst;
	return IG_E_OK;
}

/* The placer for a bind of the rig's model file on its backend (another
 * model_bind of a test's: freed with the rig's own). */
static inline struct be_placer rig_placer(struct rig *r)
{
	return (struct be_placer){rig_place, r};
}

static inline void rig__unplace(struct rig *r)
{
	for (uint32_t i = 0; i < r->n_placed; i++)
		r->be.ops->free(&r->be, r->placed[i].base, r->placed[i].bytes);
	free(r->placed);
	r->placed = NULL;
	r->n_placed = r->cap_placed = 0;
	r->placed_used = 0;
}

/* Opens the rig; false, with the backend's words in *eb and nothing held,
 * when the backend refuses the model as one it does not run (IG_E_CONFIG
 * at model_bind: the cuda backend and a mixture of experts) and is not the
 * cpu backend, the reference, which runs them all. */
static inline bool rig__open(struct rig *r, const char *preset, uint32_t pages, uint32_t threads,
                             bool least, struct ig_errbuf *eb)
{
	const struct mdesc *src = mdesc_find(preset);
	struct mdesc q3;
	struct be_placer pl;
	char path[128];
	uint64_t pb;
	int rc;

	snprintf(path, sizeof(path), "/tmp/ignis-engine-%s-%d.gguf", preset, (int)getpid());
	memset(r, 0, sizeof(*r));
	r->be.ops = rig_ops ? rig_ops : backend_find(rig_backend, eb);
	assert_non_null(r->be.ops);
	assert_int_equal(r->be.ops->open(&r->be, 1ull << 30, eb), IG_E_OK);
	r->bo = (struct be_bind_opts){.max_round_tokens = RIG_ROUND_TOKENS,
	                              .context = RIG_CONTEXT,
	                              .threads = threads,
	                              .states = RIG_STATES,
	                              .kv_sinks = mdesc_kv_compact(rig_fmt) ? RIG_KV_SINKS : 0,
	                              .kv_window = mdesc_kv_compact(rig_fmt) ? RIG_KV_WINDOW : 0};
	if (rig_arch != MDESC_ARCH_IGNIS) {
		if (mfile_as_layout(src, rig_arch, &q3, eb))
			fail_msg("%s: %s", preset, eb->msg);
		src = &q3;
	}
	if (mfile_write_synthetic(src, 5, rig_dtype, path, eb) || mfile_open(&r->f, path, eb) ||
	    be_bind_reserve(&r->be, &r->f, &r->bo, eb))
		fail_msg("%s: %s", preset, eb->msg);
	unlink(path);
	if (least)
		rig_shrink(r);
	pl = rig_placer(r);
	rc = r->be.ops->model_bind(&r->be, &r->f, &pl, &r->bo, &r->d, eb);
	if (rc == IG_E_CONFIG && !rig_on_cpu()) {
		rig__unplace(r);
		be_bind_unreserve(&r->be, &r->bo);
		r->be.ops->close(&r->be);
		mfile_close(&r->f);
		return false;
	}
	if (rc)
		fail_msg("%s: %s", preset, eb->msg);
	pb = mdesc_page_bytes(&r->f.desc, rig_fmt);
	r->region_bytes = (uint64_t)pages * pb;
	assert_int_equal(r->be.ops->alloc(&r->be, r->region_bytes, &r->region, eb), IG_E_OK);
	assert_int_equal(kvpool_init(&r->kv, r->region, pb, pages, eb), IG_E_OK);
	return true;
}

/* The rig on `preset` (in rig_dtype, rig_arch's layout), its pool of
 * `pages` pages, its backend's pool of `threads` threads, its regions the
 * least the backend takes when `least`. A model the backend under test
 * does not run (rig__open) skips the test: a test that runs one on the cpu
 * backend and others elsewhere asks rig_runs first, before it holds
 * anything a skip would leak. */
static inline void rig_open_sized(struct rig *r, const char *preset, uint32_t pages,
                                  uint32_t threads, bool least)
{
	struct ig_errbuf eb;

	if (!rig__open(r, preset, pages, threads, least, &eb)) {
		print_message("# %s on the %s backend: skipped: %s\n", preset, rig_backend, eb.msg);
		skip();
	}
}

/* A retained slot of the rig's model: a state image with the window the
 * rig bound (what the worker gives each: gpu-worker/main.c). */
static inline uint64_t rig_slot_bytes(const struct rig *r)
{
	return mdesc_state_image_bytes(&r->f.desc) +
	       mdesc_kv_window_bytes(&r->f.desc, r->bo.kv_sinks, r->bo.kv_window);
}

static inline void rig_open_threads(struct rig *r, const char *preset, uint32_t pages,
                                    uint32_t threads)
{
	rig_open_sized(r, preset, pages, threads, false);
}

static inline void rig_open(struct rig *r, const char *preset, uint32_t pages)
{
	rig_open_threads(r, preset, pages, 1);
}

/* Page `page` of the rig's pool filled with `byte`, through the table's
 * copy_h2d (the pool is device memory). */
static inline void rig_page_fill(struct rig *r, uint32_t page, unsigned char byte)
{
	unsigned char *buf = malloc(r->kv.page_bytes);
	struct ig_errbuf eb;

	assert_non_null(buf);
	memset(buf, byte, r->kv.page_bytes);
	if (r->be.ops->copy_h2d(&r->be, kvpool_page(&r->kv, page), buf, r->kv.page_bytes, &eb))
		fail_msg("page %u of the pool: %s", page, eb.msg);
	free(buf);
}

static inline void rig_close(struct rig *r)
{
	kvpool_release(&r->kv);
	r->be.ops->free(&r->be, r->region, r->region_bytes);
	r->be.ops->model_release(&r->be, &r->d);
	rig__unplace(r);
	be_bind_unreserve(&r->be, &r->bo);
	r->be.ops->close(&r->be);
	mfile_close(&r->f);
}

/* Whether the backend under test runs `preset` in rig_dtype and rig_arch's
 * layout (the cpu backend runs them all: no bind is tried); when it does
 * not, a line saying so and why. For a test to leave out its part on such
 * a model, or skip() before it holds anything. */
static inline bool rig_runs(const char *preset)
{
	struct ig_errbuf eb;
	struct rig r;

	if (rig_on_cpu())
		return true;
	if (!rig__open(&r, preset, 1, 1, false, &eb)) {
		print_message("# %s on the %s backend: left out: %s\n", preset, rig_backend,
		              eb.msg);
		return false;
	}
	rig_close(&r);
	return true;
}

#endif
