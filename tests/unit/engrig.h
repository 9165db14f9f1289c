/*
 * engrig.h - the engine tests' rig: a tiny preset written as a model file,
 * bound on the cpu backend (rounds of at most RIG_ROUND_TOKENS tokens over
 * contexts of at most RIG_CONTEXT, on `threads` threads; its regions those
 * of one pass, or the least it takes), and a KV pool of
 * `pages` pages of rig_fmt (bf16 unless the test's command line names
 * another: rig_args) in the backend's memory (on a test's wrapper of the
 * cpu table when rig_ops names one). Include after <cmocka.h> and
 * testutil.h.
 */
#ifndef IGNIS_TESTS_ENGRIG_H
#define IGNIS_TESTS_ENGRIG_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/kvpool.h"
#include "model/mfile.h"

#define RIG_ROUND_TOKENS 512u
#define RIG_CONTEXT      1024u
#define RIG_STATES       64u /* state slots: as many as an engine test runs at once */

struct rig {
	struct be be; /* the cpu backend: the pool lives in its memory */
	struct mfile f;
	struct be_bind_opts bo; /* the bound model's regions, reserved on `be` */
	struct be_model d;
	struct kvpool kv;
	void *region;
	uint64_t region_bytes;
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

/* The type the rig's model file is written in (ignis-mkmodel --dtype). */
static enum mfile_dtype rig_dtype = MFILE_BF16;
/* When not IGNIS, the preset's shapes in that llama.cpp layout
 * (mfile_as_layout: qwen3 or qwen35 for a dense preset, qwen35moe or
 * qwen3next for a moe one). */
static enum mdesc_arch rig_arch = MDESC_ARCH_IGNIS;
/* When not NULL, the table the rig opens and binds on instead of the cpu
 * backend's own: a test's wrapper of the cpu table, which watches what the
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
 * argv sets rig_fmt; the first other argument, if any, is returned in
 * *name (NULL: none). False, with a line on stderr, for an unknown format
 * or argument: the test exits 2. */
static inline bool rig_args(int argc, char **argv, const char **name)
{
	*name = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--kv-format") && i + 1 < argc) {
			rig_fmt = mdesc_kv_format_parse(argv[++i]);
			if (!rig_fmt) {
				fprintf(
				    stderr,
				    "no KV format '%s'; accepted: bf16, fp8, compact, compact1\n",
				    argv[i]);
				return false;
			}
		} else if (!*name && argv[i][0] != '-') {
			*name = argv[i];
		} else {
			fprintf(stderr, "usage: %s [--kv-format bf16|fp8|compact] [TEST]\n",
			        argv[0]);
			return false;
		}
	}
	return true;
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

static inline void rig_open_sized(struct rig *r, const char *preset, uint32_t pages,
                                  uint32_t threads, bool least)
{
	const struct mdesc *src = mdesc_find(preset);
	struct mdesc q3;
	char path[128];
	struct ig_errbuf eb;
	uint64_t pb;

	snprintf(path, sizeof(path), "/tmp/ignis-engine-%s-%d.gguf", preset, (int)getpid());
	memset(&r->be, 0, sizeof(r->be));
	r->be.ops = rig_ops ? rig_ops : backend_find("cpu", &eb);
	assert_non_null(r->be.ops);
	assert_int_equal(r->be.ops->open(&r->be, 1ull << 30, &eb), IG_E_OK);
	r->bo = (struct be_bind_opts){.max_round_tokens = RIG_ROUND_TOKENS,
	                              .context = RIG_CONTEXT,
	                              .threads = threads,
	                              .states = RIG_STATES,
	                              .kv_sinks = mdesc_kv_compact(rig_fmt) ? RIG_KV_SINKS : 0,
	                              .kv_window = mdesc_kv_compact(rig_fmt) ? RIG_KV_WINDOW : 0};
	if (rig_arch != MDESC_ARCH_IGNIS) {
		if (mfile_as_layout(src, rig_arch, &q3, &eb))
			fail_msg("%s: %s", preset, eb.msg);
		src = &q3;
	}
	if (mfile_write_synthetic(src, 5, rig_dtype, path, &eb) || mfile_open(&r->f, path, &eb) ||
	    be_bind_reserve(&r->be, &r->f, &r->bo, &eb))
		fail_msg("%s: %s", preset, eb.msg);
	if (least)
		rig_shrink(r);
	if (r->be.ops->model_bind(&r->be, &r->f, NULL, &r->bo, &r->d, &eb))
		fail_msg("%s: %s", preset, eb.msg);
	unlink(path);
	pb = mdesc_page_bytes(&r->f.desc, rig_fmt);
	r->region_bytes = (uint64_t)pages * pb;
	assert_int_equal(r->be.ops->alloc(&r->be, r->region_bytes, &r->region, &eb), IG_E_OK);
	assert_int_equal(kvpool_init(&r->kv, r->region, pb, pages, &eb), IG_E_OK);
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

static inline void rig_close(struct rig *r)
{
	kvpool_release(&r->kv);
	r->be.ops->free(&r->be, r->region, r->region_bytes);
	r->be.ops->model_release(&r->be, &r->d);
	be_bind_unreserve(&r->be, &r->bo);
	r->be.ops->close(&r->be);
	mfile_close(&r->f);
}

#endif
