/*
 * engrig.h - the engine tests' rig: a tiny preset written as a model file,
 * bound on the cpu backend (rounds of at most RIG_ROUND_TOKENS tokens over
 * contexts of at most RIG_CONTEXT, on `threads` threads), and a KV pool of
 * `pages` bf16 pages in the backend's memory. Include after <cmocka.h> and
 * testutil.h.
 */
#ifndef IGNIS_TESTS_ENGRIG_H
#define IGNIS_TESTS_ENGRIG_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "kvpool.h"
#include "mfile.h"

#define RIG_ROUND_TOKENS 512u
#define RIG_CONTEXT      1024u

struct rig {
	struct be be; /* the cpu backend: the pool lives in its memory */
	struct mfile f;
	struct be_model d;
	struct kvpool kv;
	void *region;
	uint64_t region_bytes;
};

static inline void rig_open_threads(struct rig *r, const char *preset, uint32_t pages,
                                    uint32_t threads)
{
	char path[128];
	struct ig_errbuf eb;
	uint64_t pb;

	snprintf(path, sizeof(path), "/tmp/ignis-engine-%s-%d.gguf", preset, (int)getpid());
	memset(&r->be, 0, sizeof(r->be));
	r->be.ops = backend_find("cpu", &eb);
	assert_non_null(r->be.ops);
	assert_int_equal(r->be.ops->open(&r->be, 1ull << 30, &eb), IG_E_OK);
	if (mfile_write_synthetic(mdesc_find(preset), 5, MFILE_BF16, path, &eb) ||
	    mfile_open(&r->f, path, &eb) ||
	    r->be.ops->model_bind(&r->be, &r->f, NULL,
	                          &(struct be_bind_opts){.max_round_tokens = RIG_ROUND_TOKENS,
	                                                 .context = RIG_CONTEXT,
	                                                 .threads = threads},
	                          &r->d, &eb))
		fail_msg("%s: %s", preset, eb.msg);
	unlink(path);
	pb = mdesc_page_bytes(&r->f.desc, MDESC_KV_BF16);
	r->region_bytes = (uint64_t)pages * pb;
	assert_int_equal(r->be.ops->alloc(&r->be, r->region_bytes, &r->region, &eb), IG_E_OK);
	assert_int_equal(kvpool_init(&r->kv, r->region, pb, pages, &eb), IG_E_OK);
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
	r->be.ops->close(&r->be);
	mfile_close(&r->f);
}

#endif
