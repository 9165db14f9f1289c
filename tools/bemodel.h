/*
 * bemodel.h - a model file bound on a backend of this build, by name, for a
 * program that runs without a plan: ignis-generate and ignis-calibrate in
 * this process, the llama.cpp oracle test and the conformance suite. Every
 * step goes through the backend table (backend.h), as the worker's do, so
 * whichever backend runs is what these programs check:
 *
 *   - the backend found by name (backend_find) and opened;
 *   - the device weights placed through the table, each tensor copied into a
 *     device allocation of its own (the worker places them in the plan's
 *     weights line instead);
 *   - the bind's regions reserved on the backend for rounds of the size
 *     asked in one pass (be_bind_reserve), or a workspace and sampling
 *     region of the bytes asked, so that rounds run in passes;
 *   - a MoE model's routed experts resident in an expert_cache region of
 *     every expert (the worker's "resident" policy), which is also where the
 *     backend counts their routing (expert_counts);
 *   - a KV pool of `pages` pages in the backend's memory.
 *
 * The file stays the caller's, open while the binding is used. One thread
 * at a time, as the backend's own contract.
 */
#ifndef IGNIS_TOOLS_BEMODEL_H
#define IGNIS_TOOLS_BEMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/model.h"
#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/kvpool.h"
#include "model/mfile.h"

/* The backends a build may have, by name, for a program that runs over
 * each (backend_find says whether this build has it; bem_backend_here
 * whether it runs here). */
#define BEM_BACKENDS                                                                               \
	{                                                                                          \
		"cpu", "cuda"                                                                      \
	}

/* What to bind. Zeroed fields take the defaults named. */
struct bem_opts {
	const char *backend; /* backend_find's name; NULL: "cpu" */
	/* A table to bind on instead of the named backend's (a test's wrapper
	 * of one); NULL: backend_find(backend). */
	const struct be_ops *ops;
	uint32_t max_round_tokens; /* decode lanes + the prefill chunk; 0: 1 */
	uint64_t context;          /* the longest sequence */
	uint32_t threads;          /* host threads the backend may use; 0: 1 */
	uint32_t states;           /* sequences holding a state at once; 0: 1 */
	uint32_t pages;            /* the KV pool; 0: one context's */
	enum mdesc_kv_format fmt;  /* the pool's format */
	/* the compact formats' residual window (common/model.h): each state
	 * holds it; rounds in a compact format read it. kv_window 0: none */
	uint32_t kv_sinks, kv_window;
	/* The round scratch and the rows of logits: 0, what a round needs in
	 * one pass (model_needs' *_one_pass); else these bytes, at least
	 * model_needs' *_min (rounds then run in passes). */
	uint64_t workspace_bytes;
	uint64_t sampling_bytes;
	/* A MoE model's experts read in place from the file mapping (only the
	 * cpu backend can: its device memory is host memory) instead of
	 * resident in an expert_cache region. Counts are kept only there. */
	bool experts_in_place;
};

struct bem_alloc {
	void *base;
	uint64_t bytes;
};

/* A bound model; embed it, zeroed before bem_open. */
struct bem {
	struct be be;
	struct be_bind_opts bo;
	struct be_model d;
	struct kvpool kv;
	enum mdesc_kv_format fmt;
	uint64_t context;
	struct bem_alloc pool;    /* the KV pool's pages */
	struct bem_alloc experts; /* the expert_cache region (MoE, resident) */
	struct bem_alloc *placed; /* the device weights, one allocation each */
	uint32_t n_placed, cap_placed;
	bool opened, reserved, bound, kv_ready;
};

/* Open the backend `o->backend` and bind the open model file `f` on it,
 * with a KV pool. IG_E_NOTFOUND when this build has no such backend (the
 * registry's message); a refusal of the backend (no device, no compute for
 * models yet, a region too small) with its own code and message. On
 * failure nothing is held; on success bem_close gives it all back. */
int bem_open(struct bem *r, struct mfile *f, const struct bem_opts *o, struct ig_errbuf *eb);
/* Give back everything bem_open took; idempotent on a zeroed or closed `r`.
 * Sequences must have been closed first. */
void bem_close(struct bem *r);

/* What binding `f` with `o` needs of each region (be_ops.model_needs), on
 * the backend `o->backend`, opened for the question and closed. */
int bem_needs(const struct bem_opts *o, const struct mfile *f, struct be_needs *n,
              struct ig_errbuf *eb);

/* Can a model run on backend `name` here (in this build, on this machine,
 * with compute for models)? When not, `why` says so (skip, and say it). */
bool bem_backend_here(const char *name, char *why, size_t why_size);

/* A fresh sequence (seq_init) holding `pages` pages of the pool, its books
 * under `id`. IG_E_NOSPACE when no state slot or not enough pages are
 * free. */
int bem_seq_open(struct bem *r, struct be_seq *s, uint32_t id, uint32_t pages,
                 struct ig_errbuf *eb);
/* Its state slot and pages given back; idempotent on a zeroed `s`. */
void bem_seq_close(struct bem *r, struct be_seq *s);

/* One round (be_ops.round) over the binding's pool and format, over a
 * context of r->context. */
int bem_round(struct bem *r, const struct be_step *steps, uint32_t n_steps, float *logits,
              struct ig_errbuf *eb);

#endif
