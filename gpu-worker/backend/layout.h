/*
 * layout.h - device memory laid out exactly as the plan says.
 *
 * One backend allocation per plan line (the fixed lines, the residency
 * lines, the expert cache, the KV pool), made once when the plan arrives; the
 * runtime then takes places inside a region with layout_take, and asking a
 * region for more than it holds is an error, never a fallback. The worker's
 * own accounting (layout_account) must equal the plan line by line, and the
 * pool's page count is read back from the pool region (docs/design.md,
 * section 1).
 */
#ifndef IGNIS_GPU_WORKER_LAYOUT_H
#define IGNIS_GPU_WORKER_LAYOUT_H

#include <stdint.h>

#include "backend.h"
#include "proto/msg.h"
#include "common/vplan.h"

enum layout_region_id {
	/* 0 .. VPLAN_NLINES-1: the fixed lines, in their order */
	LAYOUT_RESIDENCY = VPLAN_NLINES, /* the staging ring and expert tables */
	LAYOUT_EXPERT_CACHE,
	LAYOUT_KV_POOL,
	LAYOUT_NREGIONS
};

struct layout_region {
	void *base;
	uint64_t bytes; /* reserved */
	uint64_t taken; /* handed out by layout_take */
};

struct layout {
	struct be *be;
	struct layout_region r[LAYOUT_NREGIONS];
	uint64_t page_bytes, pool_pages;
	bool applied;
};

/* Reserve every line of `pl` on `be`. On failure nothing stays reserved and
 * `eb` names the line that did not fit. */
int layout_apply(struct layout *l, struct be *be, const struct msg_plan *pl, struct ig_errbuf *eb);
/* Return every reservation to the backend. Idempotent. */
void layout_release(struct layout *l);
/* Take `bytes` (64-byte aligned) from a region. IG_E_NOMEM when the region's
 * reservation would be exceeded. */
int layout_take(struct layout *l, enum layout_region_id id, uint64_t bytes, void **out,
                struct ig_errbuf *eb);
/* Take what is left of region `id` whole, for the backend to carve (the
 * workspace, sampling and lane_state lines: be_bind_opts); a line of 0
 * bytes gives an empty region. */
int layout_take_rest(struct layout *l, enum layout_region_id id, struct be_region *out,
                     struct ig_errbuf *eb);
/* Every device byte the backend holds is inside a region: nothing was
 * allocated beside the plan (checked again once the model is bound and the
 * engine made). */
int layout_check_held(const struct layout *l, struct ig_errbuf *eb);
/* Compare the reservations with the plan: line by line, and the pool's pages
 * read back from its region. */
int layout_check(const struct layout *l, const struct msg_plan *pl, struct ig_errbuf *eb);
/* "weights", ..., "residency", "expert_cache", "kv_pool" */
const char *layout_region_name(enum layout_region_id id);

#endif
