/* layout.c - the plan's reservations on the device (see layout.h). */
#include "layout.h"

#include <inttypes.h>
#include <string.h>

const char *layout_region_name(enum layout_region_id id)
{
	switch (id) {
	case LAYOUT_RESIDENCY:
		return "residency";
	case LAYOUT_EXPERT_CACHE:
		return "expert_cache";
	case LAYOUT_KV_POOL:
		return "kv_pool";
	default:
		return (unsigned)id < VPLAN_NLINES ? vplan_line_names[id] : "unknown";
	}
}

/* What the plan gives region `id`. The cuda_context line is the runtime's
 * own context, measured rather than allocated; residual is the rounding of
 * the other regions to the allocation granule, held by them. The
 * hq_residual_window line is the residual windows of the lanes' and the
 * device retained slots' sequences, which are part of their states
 * (common/model.h): each share is laid out with the states it belongs to. */
static uint64_t layout__planned(const struct msg_plan *pl, enum layout_region_id id)
{
	uint64_t lanes_window = pl->lanes * pl->kv_window_bytes;
	uint64_t window = pl->lines.v[VPLAN_HQ_RESIDUAL_WINDOW].bytes;

	switch ((int)id) {
	case VPLAN_LANE_STATE:
		return pl->lines.v[id].bytes + lanes_window;
	case VPLAN_RETAINED_SLOTS:
		return pl->lines.v[id].bytes + (window > lanes_window ? window - lanes_window : 0);
	case VPLAN_HQ_RESIDUAL_WINDOW:
		return 0;
	case LAYOUT_RESIDENCY:
		return pl->residency_fixed_bytes;
	case LAYOUT_EXPERT_CACHE:
		return pl->expert_cache_bytes;
	case LAYOUT_KV_POOL:
		return pl->pool_pages * pl->page_bytes;
	default:
		return pl->lines.v[id].bytes;
	}
}

void layout_release(struct layout *l)
{
	for (int i = 0; i < LAYOUT_NREGIONS; i++) {
		if (l->r[i].base)
			l->be->ops->free(l->be, l->r[i].base, l->r[i].bytes);
		l->r[i] = (struct layout_region){0};
	}
	l->applied = false;
}

int layout_apply(struct layout *l, struct be *be, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	memset(l, 0, sizeof(*l));
	l->be = be;
	if (pl->lines.n != VPLAN_NLINES)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "the plan has %u lines; this worker lays out %d", pl->lines.n,
		               VPLAN_NLINES);
	/* the window line is the lanes' windows and a whole number of retained
	 * slots' (layout__planned lays them out with their states) */
	{
		uint64_t wb = pl->kv_window_bytes, hq = pl->lines.v[VPLAN_HQ_RESIDUAL_WINDOW].bytes;
		uint64_t lanes_w;

		if (__builtin_mul_overflow(pl->lanes, wb, &lanes_w) || hq < lanes_w ||
		    (wb ? (hq - lanes_w) % wb != 0 : hq != 0))
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "the plan's hq_residual_window line of %" PRIu64
			               " bytes is not %" PRIu64 " lanes' and whole retained slots' "
			               "windows of %" PRIu64 " bytes",
			               hq, (uint64_t)pl->lanes, wb);
	}
	for (int i = 0; i < LAYOUT_NREGIONS; i++) {
		uint64_t bytes = layout__planned(pl, (enum layout_region_id)i);
		int rc;

		if (i == VPLAN_CUDA_CONTEXT || i == VPLAN_RESIDUAL || bytes == 0)
			continue;
		bytes = (bytes + be->ops->granule - 1) / be->ops->granule * be->ops->granule;
		rc = be->ops->alloc(be, bytes, &l->r[i].base, eb);
		if (rc) {
			ig_errprefix(eb, "cannot reserve the plan's %s line (%" PRIu64 " bytes)",
			             layout_region_name((enum layout_region_id)i), bytes);
			layout_release(l);
			return rc;
		}
		l->r[i].bytes = bytes;
	}
	l->page_bytes = pl->page_bytes;
	/* read back from the region itself; the check compares it with the plan */
	l->pool_pages = l->r[LAYOUT_KV_POOL].bytes / pl->page_bytes;
	l->applied = true;
	return IG_E_OK;
}

int layout_take(struct layout *l, enum layout_region_id id, uint64_t bytes, void **out,
                struct ig_errbuf *eb)
{
	struct layout_region *r = &l->r[id];
	uint64_t at = (r->taken + 63u) & ~(uint64_t)63u;

	if (bytes > r->bytes || at > r->bytes - bytes)
		return ig_errf(
		    eb, IG_E_NOMEM,
		    "%" PRIu64 " bytes asked of the %s line, which has %" PRIu64 " of its %" PRIu64
		    " reserved bytes left: the plan did not reserve this",
		    bytes, layout_region_name(id), at <= r->bytes ? r->bytes - at : 0, r->bytes);
	*out = (char *)r->base + at;
	r->taken = at + bytes;
	return IG_E_OK;
}

int layout_check(const struct layout *l, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	uint64_t g = l->be->ops->granule, held = 0, planned = 0;

	for (int i = 0; i < LAYOUT_NREGIONS; i++) {
		uint64_t plan = layout__planned(pl, (enum layout_region_id)i);
		uint64_t want =
		    (i == VPLAN_CUDA_CONTEXT || i == VPLAN_RESIDUAL) ? 0 : (plan + g - 1) / g * g;

		if (i != VPLAN_CUDA_CONTEXT)
			planned += plan;
		held += l->r[i].bytes;
		if (l->r[i].bytes != want)
			return ig_errf(
			    eb, IG_E_INVAL,
			    "the worker holds %" PRIu64 " bytes for the %s line; the plan "
			    "says %" PRIu64,
			    l->r[i].bytes, layout_region_name((enum layout_region_id)i), want);
	}
	/* The rounding must fit in what the plan's residual line set aside. */
	if (held > planned)
		return ig_errf(eb, IG_E_INVAL,
		               "the worker holds %" PRIu64 " bytes; the plan's lines and regions "
		               "come to %" PRIu64 " (its residual line is short of the %" PRIu64
		               "-byte granule's rounding)",
		               held, planned, g);
	/* The pool region holds the plan's pages, plus at most the granule's
	 * rounding, which holds no whole page the plan counted on. */
	if (l->pool_pages < pl->pool_pages ||
	    (l->pool_pages - pl->pool_pages) * pl->page_bytes >= g)
		return ig_errf(eb, IG_E_INVAL,
		               "the pool region holds %" PRIu64 " pages; the plan says %" PRIu64,
		               l->pool_pages, pl->pool_pages);
	return IG_E_OK;
}

int layout_take_rest(struct layout *l, enum layout_region_id id, struct be_region *out,
                     struct ig_errbuf *eb)
{
	struct layout_region *r = &l->r[id];
	uint64_t at = (r->taken + 63u) & ~(uint64_t)63u;

	*out = (struct be_region){0};
	if (!r->base)
		return IG_E_OK; /* a line of 0 bytes: the backend says whether it needs it */
	if (at >= r->bytes)
		return ig_errf(eb, IG_E_NOMEM,
		               "the %s line has nothing left of its %" PRIu64 " reserved bytes",
		               layout_region_name(id), r->bytes);
	*out = (struct be_region){(char *)r->base + at, r->bytes - at};
	r->taken = r->bytes;
	return IG_E_OK;
}

int layout_check_held(const struct layout *l, struct ig_errbuf *eb)
{
	uint64_t held = 0;

	for (int i = 0; i < LAYOUT_NREGIONS; i++)
		held += l->r[i].bytes;
	if (l->be->used != held)
		return ig_errf(eb, IG_E_INVAL,
		               "the %s backend holds %" PRIu64 " device bytes; the plan's "
		               "reservations are %" PRIu64 ": %" PRIu64
		               " bytes were allocated beside the plan",
		               l->be->ops->name, l->be->used, held,
		               l->be->used > held ? l->be->used - held : 0);
	return IG_E_OK;
}
