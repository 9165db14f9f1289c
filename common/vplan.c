/*
 * vplan.c - the VRAM plan (see vplan.h). Pure: no I/O, no allocation.
 *
 * How the lines the reference gives no figure for are derived (ADR 0005):
 *   weights          the model description (section 2 figures, or shapes)
 *   cuda_context     VPLAN_CUDA_CONTEXT_BYTES on cuda, 0 on cpu
 *   workspace        chunk x one token's activations through one layer
 *                    (layers run one at a time, so one layer's scratch)
 *   media_embedding  0: text-only models
 *   sampling         lanes x vocab x 12 B (fp32 logits, fp32 probabilities,
 *                    int32 candidate indices)
 *   decode_graph     lanes x one token's activations through one layer
 *   verify_round     0: no speculative decoding (speculation "off")
 *   drafter_round    0: likewise
 *   lane_state       lanes x one sequence's fixed-size state image
 *   retained_slots   device retained slots x the state image
 *   hq_residual_window  compact format: the residual window of each lane's
 *                    and each device retained slot's sequence (sinks + window
 *                    tokens in bf16, common/model.h): (lanes + retained
 *                    device) x mdesc_kv_window_bytes; it lives in their
 *                    state images (the worker lays it out with them)
 *   residual         the rounding of every line to the allocation granule,
 *                    and a granule for each region after the lines
 */
#include "vplan.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bytesize.h"

const char *const vplan_line_names[VPLAN_NLINES] = {
#define VPLAN__LINE_NAME(ID, name) [VPLAN_##ID] = name,
    VPLAN_LINES(VPLAN__LINE_NAME)
#undef VPLAN__LINE_NAME
};

const char *vplan_event_name(const struct vplan *p)
{
	return p->model->family == MDESC_MOE ? "ignis.runtime.flash_next_plan"
	                                     : "ignis.runtime.vram_plan";
}

static uint64_t vplan__round(uint64_t v, uint64_t g)
{
	return (v + g - 1) / g * g;
}

static int vplan__refuse(struct vplan *p, uint64_t shortfall, const char *knobs, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

static int vplan__refuse(struct vplan *p, uint64_t shortfall, const char *knobs, const char *fmt,
                         ...)
{
	va_list ap;

	p->shortfall_bytes = shortfall;
	snprintf(p->knobs, sizeof(p->knobs), "%s", knobs);
	va_start(ap, fmt);
	vsnprintf(p->refusal, sizeof(p->refusal), fmt, ap);
	va_end(ap);
	return IG_E_PLAN_REFUSED;
}

/* The knob that sets the budget in this plan. */
static const char *vplan__budget_knob(const struct vplan *p)
{
	/* the cpu backend's simulated device: its size is a knob too, the first
	 * one to turn for a real model */
	if (p->derived && p->free_named && !p->cuda)
		return "--device-free-bytes, --vram-headroom-bytes";
	return p->derived ? "--vram-headroom-bytes" : "--vram-budget-bytes";
}

/* The way the budget knob lifts a shortfall: a smaller headroom, or a larger
 * explicit budget. */
static const char *vplan__budget_lift(const struct vplan *p)
{
	return p->derived ? "a smaller --vram-headroom-bytes" : "a larger --vram-budget-bytes";
}

/* The knobs that lift a minimum for this model (only those it takes). */
static const char *vplan__minimum_knobs(const struct vplan *p, char *buf, size_t cap)
{
	snprintf(buf, cap,
	         "%s, --model-max-context, --model-prefill-chunk, %s--reuse-retained-device, "
	         "--reuse-retained-host, --model-kv-format%s%s",
	         vplan__budget_knob(p),
	         p->model->family == MDESC_MOE ? "--spec-decode-lanes, " : "",
	         p->kv_window ? ", --model-kv-window, --model-kv-sinks" : "",
	         p->pool_named ? ", --vram-kv-pool-bytes" : "");
	return buf;
}

static void vplan__lines(struct vplan *p)
{
	const struct mdesc *m = p->model;
	uint64_t act = mdesc_token_activation_bytes(m), g, raw = 0;

	memset(p->line, 0, sizeof(p->line));
	p->line[VPLAN_WEIGHTS] = mdesc_weight_bytes(m);
	p->line[VPLAN_CUDA_CONTEXT] = p->cuda ? VPLAN_CUDA_CONTEXT_BYTES : 0;
	p->line[VPLAN_WORKSPACE] = (uint64_t)p->chunk * act;
	p->line[VPLAN_MEDIA_EMBEDDING] = 0;
	p->line[VPLAN_SAMPLING] = (uint64_t)p->lanes * m->vocab * 12u;
	p->line[VPLAN_DECODE_GRAPH] = (uint64_t)p->lanes * act;
	p->line[VPLAN_VERIFY_ROUND] = 0;
	p->line[VPLAN_DRAFTER_ROUND] = 0;
	p->line[VPLAN_LANE_STATE] = (uint64_t)p->lanes * mdesc_state_image_bytes(m);
	p->line[VPLAN_RETAINED_SLOTS] = (uint64_t)p->retained_device * mdesc_state_image_bytes(m);
	p->line[VPLAN_HQ_RESIDUAL_WINDOW] =
	    ((uint64_t)p->lanes + p->retained_device) * p->window_bytes;
	/* Each line is reserved in whole granules; `residual` is what that
	 * rounding adds, so the lines sum to what is reserved. */
	g = p->cuda ? VPLAN_GRANULE_CUDA : VPLAN_GRANULE_CPU;
	p->lines_total = 0;
	for (int i = 0; i < VPLAN_RESIDUAL; i++) {
		raw += p->line[i];
		if (i != VPLAN_LANE_STATE && i != VPLAN_RETAINED_SLOTS &&
		    i != VPLAN_HQ_RESIDUAL_WINDOW)
			p->lines_total += vplan__round(p->line[i], g);
	}
	/* The windows are reserved with the states they belong to (the worker's
	 * layout, gpu-worker/backend/layout.c): rounded as those two regions. */
	p->lines_total +=
	    vplan__round(p->line[VPLAN_LANE_STATE] + (uint64_t)p->lanes * p->window_bytes, g) +
	    vplan__round(p->line[VPLAN_RETAINED_SLOTS] +
	                     (uint64_t)p->retained_device * p->window_bytes,
	                 g);
	/* ...and one granule for each region reserved after the lines (the
	 * pool; on Flash-Next's family also the residency lines and the expert
	 * cache), whose sizes are not granule multiples: the layout rounds each
	 * up, and this keeps it inside the budget. */
	p->lines_total += g * (p->model->family == MDESC_MOE ? 3u : 1u);
	p->line[VPLAN_RESIDUAL] = p->lines_total - raw;
}

/* Pages a named pool buys: tokens round up to pages, bytes buy whole pages. */
static uint64_t vplan__named_pages(const struct knob_value *v, uint64_t page_bytes)
{
	return v->tokens ? mdesc_pages_for(v->u) : v->u / page_bytes;
}

/* The 27B's family: adapt a context that came from a default or a profile
 * (ADR 0005). False when the pool holds neither the context nor one request
 * at the default output cap and a page, each with the spare and the retained
 * pages: *need_pages is the least pool that starts, the smaller of the two. */
static bool vplan__adapt(struct vplan *p, uint64_t spare_tokens, uint64_t min_tokens,
                         uint64_t *need_pages)
{
	uint64_t retained = (uint64_t)p->retained_device + p->retained_host;
	uint64_t room = p->lanes > 1 ? mdesc_pages_for(spare_tokens) + retained : retained;
	uint64_t ctx_pages = mdesc_pages_for(p->context), least = mdesc_pages_for(min_tokens) + 1;

	*need_pages = room + (ctx_pages < least ? ctx_pages : least);
	if (p->pool_pages >= ctx_pages + room)
		return true; /* kept as it is */
	if (p->pool_pages < *need_pages)
		return false;
	p->context_adapted = true;
	p->context = (p->pool_pages - room) * MDESC_PAGE_TOKENS;
	p->floor_pages = mdesc_pages_for(p->context) + retained;
	return true;
}

/* What a refusal says was short, and the knobs it names: the longest "what"
 * (Flash-Next's minimum, every region named) is about 330 bytes; with the
 * figures (about 100 bytes) and the knobs it stays inside vplan.refusal. */
#define VPLAN__WHAT  512
#define VPLAN__KNOBS 256
_Static_assert(VPLAN__WHAT + VPLAN__KNOBS + 160 <= sizeof(((struct vplan *)0)->refusal),
               "a refusal holds its what, its figures and its knobs whole");

/* Below the minimum: a refusal, or with an explicit budget and
 * --vram-allow-oversubscription, a warning. */
static int vplan__short(struct vplan *p, uint64_t need, const char *what)
{
	char knobs[VPLAN__KNOBS];

	if (!p->derived && p->allow_oversubscription) {
		p->warnings |= VPLAN_WARN_BELOW_MINIMUM;
		return IG_E_OK;
	}
	vplan__minimum_knobs(p, knobs, sizeof(knobs));
	return vplan__refuse(p, need - p->budget_bytes, knobs,
	                     "%s needs at least %" PRIu64 " bytes but the budget is %" PRIu64
	                     " bytes: short by %" PRIu64 " bytes. Turn: %s",
	                     what, need, p->budget_bytes, need - p->budget_bytes, knobs);
}

static int vplan__dense(struct vplan *p, const struct knobs *k, uint64_t named_pages)
{
	const struct knob_value *ctx = &k->v[KNOB_MODEL_MAX_CONTEXT];
	uint64_t avail = p->budget_bytes > p->lines_total ? p->budget_bytes - p->lines_total : 0;
	char what[VPLAN__WHAT];

	p->policy = VPLAN_RESIDENT;
	p->pool_pages = p->pool_named ? named_pages : avail / p->page_bytes;
	if (!p->pool_named && ctx->src <= KS_PROFILE) {
		uint64_t need_pages;

		if (!vplan__adapt(p, k->v[KNOB_VRAM_ADAPT_SPARE_TOKENS].u,
		                  k->v[KNOB_MODEL_DEFAULT_MAX_TOKENS].u, &need_pages)) {
			uint64_t need = p->lines_total + need_pages * p->page_bytes;
			char knobs[VPLAN__KNOBS];

			p->minimum_bytes = need;
			if (!p->derived && p->allow_oversubscription) {
				/* The plan of the least budget that starts (ADR 0022):
				 * that pool, the context adapted to it. */
				p->pool_pages = need_pages;
				vplan__adapt(p, k->v[KNOB_VRAM_ADAPT_SPARE_TOKENS].u,
				             k->v[KNOB_MODEL_DEFAULT_MAX_TOKENS].u, &need_pages);
				p->warnings |= VPLAN_WARN_BELOW_MINIMUM;
				return IG_E_OK;
			}
			snprintf(
			    knobs, sizeof(knobs),
			    "%s, --vram-adapt-spare-tokens, "
			    "--model-max-context, --model-default-max-tokens, "
			    "--model-prefill-chunk, "
			    "--reuse-retained-device, --reuse-retained-host, --model-kv-format%s",
			    vplan__budget_knob(p),
			    p->kv_window ? ", --model-kv-window, --model-kv-sinks" : "");
			return vplan__refuse(
			    p, need - p->budget_bytes, knobs,
			    "the load adapts its %" PRIu64 "-token context to the pool, but the "
			    "pool's %" PRIu64 " pages cannot hold even one request at the default "
			    "cap of %" PRIu64 " tokens with the spare reservation of %" PRIu64
			    " tokens and %u retained pages (%" PRIu64
			    " pages): that needs at least "
			    "%" PRIu64 " bytes (fixed lines %" PRIu64 " + %" PRIu64
			    " pages of %" PRIu64 " bytes) but the budget is %" PRIu64
			    " bytes: short by %" PRIu64 " bytes. Turn: %s",
			    p->requested_context, p->pool_pages,
			    k->v[KNOB_MODEL_DEFAULT_MAX_TOKENS].u,
			    p->lanes > 1 ? k->v[KNOB_VRAM_ADAPT_SPARE_TOKENS].u : 0,
			    p->retained_device + p->retained_host, need_pages, need, p->lines_total,
			    need_pages, p->page_bytes, p->budget_bytes, need - p->budget_bytes,
			    knobs);
		}
	}
	p->minimum_bytes = p->lines_total + p->floor_pages * p->page_bytes;
	if (p->pool_pages < p->floor_pages || p->minimum_bytes > p->budget_bytes) {
		snprintf(what, sizeof(what),
		         "the plan (fixed lines %" PRIu64 " + one %" PRIu64 "-token context and %u "
		         "retained slots: %" PRIu64 " pages of %" PRIu64 " bytes)",
		         p->lines_total, p->context, p->retained_device + p->retained_host,
		         p->floor_pages, p->page_bytes);
		if (vplan__short(p, p->minimum_bytes, what))
			return IG_E_PLAN_REFUSED;
		p->pool_pages = p->floor_pages;
	}
	if (p->pool_named && p->lines_total + p->pool_pages * p->page_bytes > p->budget_bytes) {
		/* a named pool replaces the floor pool in the minimum */
		p->minimum_bytes = p->lines_total + p->pool_pages * p->page_bytes;
		snprintf(what, sizeof(what),
		         "--vram-kv-pool-bytes (from %s) with the fixed lines (%" PRIu64 " bytes)",
		         k->v[KNOB_VRAM_KV_POOL_BYTES].where, p->lines_total);
		return vplan__short(p, p->lines_total + p->pool_pages * p->page_bytes, what);
	}
	return IG_E_OK;
}

/*
 * The expert cache below its floor (`used`: everything reserved before it).
 * A refusal, or with --vram-allow-expert-cache-below-floor a warning; both
 * name only the knobs that lift it (ADR 0022): a smaller named pool when
 * the pool is above its floor, else a shorter context; a smaller chunk; the
 * budget (smaller headroom, larger explicit budget); fewer device slots when
 * there are any. The shortfall is exact: the floor in whole slot sets.
 */
static int vplan__below_floor(struct vplan *p, const struct knobs *k, uint64_t used,
                              uint64_t set_bytes)
{
	uint64_t floor_cache = (p->cache_floor_bytes + set_bytes - 1) / set_bytes * set_bytes;
	uint64_t need = used + floor_cache;
	const char *pool_knob =
	    p->pool_pages > p->floor_pages ? "--vram-kv-pool-bytes" : "--model-max-context";
	bool slots = p->retained_device > 0;
	char lift[256], a[32], b[32];

	snprintf(p->knobs, sizeof(p->knobs), "%s, --model-prefill-chunk, %s%s", pool_knob,
	         vplan__budget_knob(p), slots ? ", --reuse-retained-device" : "");
	if (k->v[KNOB_VRAM_ALLOW_EXPERT_CACHE_BELOW_FLOOR].u) {
		p->warnings |= VPLAN_WARN_CACHE_BELOW_FLOOR;
		return IG_E_OK;
	}
	if (p->derived)
		snprintf(lift, sizeof(lift),
		         "a smaller %s, --model-prefill-chunk or "
		         "--vram-headroom-bytes%s",
		         pool_knob, slots ? ", or fewer --reuse-retained-device" : "");
	else
		snprintf(lift, sizeof(lift),
		         "a smaller %s or --model-prefill-chunk, %sa larger "
		         "--vram-budget-bytes%s",
		         pool_knob, slots ? "" : "or ",
		         slots ? ", or fewer --reuse-retained-device" : "");
	bsize_format(a, sizeof(a), p->expert_cache_bytes);
	bsize_format(b, sizeof(b), p->cache_floor_bytes);
	return vplan__refuse(
	    p, need - p->budget_bytes, p->knobs,
	    "the expert cache would get %" PRIu64 " bytes (%s), below its floor of %" PRIu64
	    " bytes (%s); decode slows sharply there. The floor in whole slot sets (%" PRIu64
	    " of %" PRIu64 " bytes) needs a budget of %" PRIu64 " bytes: short by %" PRIu64
	    " bytes. Lift it with %s; --vram-allow-expert-cache-below-floor starts anyway "
	    "with a warning",
	    p->expert_cache_bytes, a, p->cache_floor_bytes, b, floor_cache / set_bytes, set_bytes,
	    need, need - p->budget_bytes, lift);
}

static int vplan__moe(struct vplan *p, const struct knobs *k, uint64_t named_pages)
{
	const struct mdesc *m = p->model;
	uint64_t min_pool = (p->pool_named ? named_pages : p->floor_pages) * p->page_bytes;
	uint64_t set_bytes = mdesc_class_set_bytes(m), used;
	char what[VPLAN__WHAT], knobs[VPLAN__KNOBS], a[32];

	p->expert_table_bytes = m->expert_table_bytes;
	p->cache_floor_bytes = m->cache_floor_bytes;
	p->class_min_slots = (uint64_t)p->lanes * (m->top_k + m->prefetch_width);
	p->class_min_bytes = p->class_min_slots * set_bytes;
	p->pinned_expert_bytes = k->v[KNOB_VRAM_PINNED_EXPERT_BYTES].u;
	if (p->budget_bytes >=
	    p->lines_total + p->expert_table_bytes + mdesc_expert_bytes(m) + min_pool) {
		/* Every expert has its slot: no staging ring; the pool takes the rest. */
		p->policy = VPLAN_RESIDENT;
		p->residency_fixed_bytes = p->expert_table_bytes;
		p->expert_cache_bytes = mdesc_expert_bytes(m);
		p->pool_pages = p->pool_named ? named_pages
		                              : (p->budget_bytes - p->lines_total -
		                                 p->residency_fixed_bytes - p->expert_cache_bytes) /
		                                    p->page_bytes;
		p->minimum_bytes = p->lines_total + p->residency_fixed_bytes +
		                   p->expert_cache_bytes + p->floor_pages * p->page_bytes;
		if (p->pinned_expert_bytes > mdesc_expert_bytes(m))
			return vplan__refuse(
			    p, p->pinned_expert_bytes - mdesc_expert_bytes(m),
			    "--vram-pinned-expert-bytes",
			    "--vram-pinned-expert-bytes %" PRIu64 " (from %s) is more than every "
			    "expert (%" PRIu64 " bytes): the most it can pin is %" PRIu64 " bytes",
			    p->pinned_expert_bytes, k->v[KNOB_VRAM_PINNED_EXPERT_BYTES].where,
			    mdesc_expert_bytes(m), mdesc_expert_bytes(m));
		return IG_E_OK;
	}

	/* Offloaded: the pool first, the staging ring and tables, then the cache. */
	p->policy = VPLAN_OFFLOADED;
	p->prefill_staging_bytes = 2 * m->heaviest_layer_expert_bytes;
	p->residency_fixed_bytes = p->prefill_staging_bytes + p->expert_table_bytes;
	p->minimum_bytes =
	    p->lines_total + p->residency_fixed_bytes + min_pool + p->class_min_bytes;
	if (p->minimum_bytes > p->budget_bytes) {
		char pool_what[160];

		if (p->pool_named)
			snprintf(pool_what, sizeof(pool_what),
			         "the %" PRIu64 "-page pool --vram-kv-pool-bytes names (%" PRIu64
			         " bytes a page)",
			         named_pages, p->page_bytes);
		else
			snprintf(pool_what, sizeof(pool_what),
			         "one %" PRIu64 "-token context and %u retained slots: %" PRIu64
			         " pages of %" PRIu64 " bytes",
			         p->context, p->retained_device + p->retained_host, p->floor_pages,
			         p->page_bytes);
		snprintf(what, sizeof(what),
		         "the plan (fixed lines %" PRIu64 ", staging ring and tables %" PRIu64
		         ", %s, and one decode step's experts in every class, which no flag "
		         "lifts, whatever --vram-allow-expert-cache-below-floor says: %" PRIu64
		         " bytes)",
		         p->lines_total, p->residency_fixed_bytes, pool_what, p->class_min_bytes);
		if (vplan__short(p, p->minimum_bytes, what))
			return IG_E_PLAN_REFUSED;
		/* Oversubscribed: the plan of the minimum budget (ADR 0022), whose
		 * class-minimum cache still answers to the floor below. */
		p->pool_pages = min_pool / p->page_bytes;
		used = p->lines_total + p->residency_fixed_bytes + min_pool;
		p->expert_cache_bytes = p->class_min_bytes;
	} else {
		if (p->pool_named) {
			p->pool_pages = named_pages;
		} else {
			uint64_t want = (uint64_t)p->lanes * mdesc_pages_for(p->context);

			if (want > m->offload_pool_pages)
				want = m->offload_pool_pages;
			p->pool_pages = want > p->floor_pages ? want : p->floor_pages;
		}
		used = p->lines_total + p->residency_fixed_bytes + p->pool_pages * p->page_bytes;
		if (used + p->class_min_bytes > p->budget_bytes) {
			uint64_t need = used + p->class_min_bytes;

			bsize_format(a, sizeof(a), p->class_min_bytes);
			snprintf(knobs, sizeof(knobs),
			         "--vram-kv-pool-bytes, --spec-decode-lanes, %s",
			         vplan__budget_knob(p));
			return vplan__refuse(
			    p, need - p->budget_bytes, knobs,
			    "the %" PRIu64 "-page pool leaves the expert cache less than one "
			    "decode step's experts in every class (%" PRIu64 " slots per class, "
			    "%" PRIu64 " bytes = %s), whatever "
			    "--vram-allow-expert-cache-below-floor says: short by %" PRIu64
			    " bytes. Turn: a smaller --vram-kv-pool-bytes, fewer "
			    "--spec-decode-lanes, or %s",
			    p->pool_pages, p->class_min_slots, p->class_min_bytes, a,
			    need - p->budget_bytes, vplan__budget_lift(p));
		}
		/* The cache in whole slot sets (one slot of every class). */
		p->expert_cache_bytes = (p->budget_bytes - used) / set_bytes * set_bytes;
	}
	if (p->expert_cache_bytes < p->cache_floor_bytes) {
		int rc = vplan__below_floor(p, k, used, set_bytes);

		if (rc)
			return rc;
	}
	/* Pinned experts: never into the slots of the widest decode step, in any
	 * class (ADR 0022). The cache holds `sets` slots of every class; which
	 * experts calibration pins is not known here, so the pin is counted in
	 * the class it fills fastest: as experts of the smallest records, each
	 * a slot of one gate_up class and one of one down class. */
	{
		uint64_t sets = p->expert_cache_bytes / set_bytes, e = mdesc_min_expert_bytes(m);
		uint64_t most = (sets - p->class_min_slots) * e;

		if (p->pinned_expert_bytes > most)
			return vplan__refuse(
			    p, p->pinned_expert_bytes - most, "--vram-pinned-expert-bytes",
			    "--vram-pinned-expert-bytes %" PRIu64 " (from %s) could leave a class "
			    "fewer than the %" PRIu64 " slots of the widest decode step: the cache "
			    "holds %" PRIu64 " slots of every class, and the pin may fall in one "
			    "class as experts of %" PRIu64 " bytes (the smallest gate_up and down "
			    "records): the most it can pin is %" PRIu64 " bytes",
			    p->pinned_expert_bytes, k->v[KNOB_VRAM_PINNED_EXPERT_BYTES].where,
			    p->class_min_slots, sets, e, most);
	}
	/* the host allocation behind the cache: every expert but the pinned
	 * (at most their bytes fewer: which are pinned, and so their exact
	 * bytes, the worker's load event says) */
	p->expert_host_bytes = mdesc_expert_bytes(m) > p->pinned_expert_bytes
	                           ? mdesc_expert_bytes(m) - p->pinned_expert_bytes
	                           : 0;
	return IG_E_OK;
}

/* More pages than a pool counts (VPLAN_MAX_POOL_PAGES): refused, naming the
 * knob the size came from: a named pool, else the budget, else the device
 * figure when the operator gave it (ADR 0022). `pages` fit the budget, so
 * the excess in bytes cannot wrap. */
static int vplan__too_many_pages(struct vplan *p, const struct knobs *k, uint64_t pages)
{
	uint64_t over = (pages - VPLAN_MAX_POOL_PAGES) * p->page_bytes;
	const char *knobs, *lift;
	char from[192];

	if (p->pool_named) {
		knobs = "--vram-kv-pool-bytes";
		lift = "a smaller --vram-kv-pool-bytes";
		snprintf(from, sizeof(from), "--vram-kv-pool-bytes (from %s) names",
		         k->v[KNOB_VRAM_KV_POOL_BYTES].where);
	} else if (!p->derived) {
		knobs = "--vram-budget-bytes, --vram-kv-pool-bytes";
		lift = "a smaller --vram-budget-bytes, or name --vram-kv-pool-bytes";
		snprintf(from, sizeof(from),
		         "the rest of --vram-budget-bytes %" PRIu64 " (from %s) would be",
		         p->budget_bytes, k->v[KNOB_VRAM_BUDGET_BYTES].where);
	} else {
		knobs = p->free_named
		            ? "--device-free-bytes, --vram-budget-bytes, --vram-kv-pool-bytes"
		            : "--vram-budget-bytes, --vram-kv-pool-bytes";
		lift = p->free_named ? "a smaller --device-free-bytes, or name --vram-budget-bytes "
		                       "or --vram-kv-pool-bytes"
		                     : "name --vram-budget-bytes or --vram-kv-pool-bytes";
		snprintf(from, sizeof(from),
		         "the rest of the budget derived from %" PRIu64 " bytes free at start "
		         "(from %s) would be",
		         p->free_bytes, p->device_source);
	}
	return vplan__refuse(p, over, knobs,
	                     "a KV pool of %" PRIu64 " pages of %" PRIu64 " bytes, which %s, is "
	                     "more than the %" PRIu64 " pages a pool counts (the worker's page "
	                     "tables count in 32 bits), by %" PRIu64 " bytes. Turn: %s",
	                     pages, p->page_bytes, from, VPLAN_MAX_POOL_PAGES, over, lift);
}

/* The knob's choice (an index into its accepted names, spelled as
 * mdesc_kv_format_name spells them) as a format. */
static enum mdesc_kv_format vplan__kv_format(uint64_t index)
{
	const char *p = knob_defs[KNOB_MODEL_KV_FORMAT].accepted;
	char name[16];
	size_t n;

	for (; index > 0 && p; index--) {
		p = strchr(p, '|');
		p = p ? p + 1 : NULL;
	}
	if (!p)
		return 0;
	n = strcspn(p, "|");
	if (n >= sizeof(name))
		return 0;
	memcpy(name, p, n);
	name[n] = 0;
	return mdesc_kv_format_parse(name);
}

int vplan_compute(const struct knobs *k, const struct vplan_device *dev, struct vplan *p)
{
	const struct mdesc *m = k->model;
	const struct knob_value *pool = &k->v[KNOB_VRAM_KV_POOL_BYTES];
	uint64_t named_pages = 0;
	int rc;

	memset(p, 0, sizeof(*p));
	p->model = m;
	p->cuda = dev->cuda;
	p->kv_format = vplan__kv_format(k->v[KNOB_MODEL_KV_FORMAT].u);
	p->kv_bytes_per_token = mdesc_kv_bytes_per_token(m, p->kv_format);
	p->page_bytes = mdesc_page_bytes(m, p->kv_format);
	p->lanes = k->lanes;
	p->chunk = (uint32_t)k->v[KNOB_MODEL_PREFILL_CHUNK].u;
	p->context = p->requested_context = k->v[KNOB_MODEL_MAX_CONTEXT].u;
	p->retained_device = (uint32_t)k->v[KNOB_REUSE_RETAINED_DEVICE].u;
	p->retained_host = (uint32_t)k->v[KNOB_REUSE_RETAINED_HOST].u;
	if (mdesc_kv_compact(p->kv_format) && k->v[KNOB_MODEL_KV_WINDOW].u) {
		p->kv_window = (uint32_t)k->v[KNOB_MODEL_KV_WINDOW].u;
		p->kv_sinks = (uint32_t)k->v[KNOB_MODEL_KV_SINKS].u;
		p->window_bytes = mdesc_kv_window_bytes(m, p->kv_sinks, p->kv_window);
	}
	p->retained_host_bytes =
	    (uint64_t)p->retained_host * (mdesc_state_image_bytes(m) + p->window_bytes);
	p->floor_pages = mdesc_pages_for(p->context) + p->retained_device + p->retained_host;
	p->free_bytes = dev->free_bytes;
	p->free_named = dev->free_named;
	snprintf(p->device_source, sizeof(p->device_source), "%s", dev->source);
	p->allow_oversubscription = k->v[KNOB_VRAM_ALLOW_OVERSUBSCRIPTION].u != 0;

	/* ---- the budget ---- */
	if (k->v[KNOB_VRAM_BUDGET_BYTES].set) {
		p->derived = false;
		p->budget_bytes = k->v[KNOB_VRAM_BUDGET_BYTES].u;
		if (p->budget_bytes > p->free_bytes) {
			if (!p->allow_oversubscription)
				return vplan__refuse(
				    p, p->budget_bytes - p->free_bytes,
				    "--vram-budget-bytes, --vram-allow-oversubscription",
				    "--vram-budget-bytes %" PRIu64
				    " (from %s) is more than the %" PRIu64
				    " bytes free on the device, by %" PRIu64
				    " bytes: lower --vram-budget-bytes, or add "
				    "--vram-allow-oversubscription to start with a warning",
				    p->budget_bytes, k->v[KNOB_VRAM_BUDGET_BYTES].where,
				    p->free_bytes, p->budget_bytes - p->free_bytes);
			p->warnings |= VPLAN_WARN_OVERSUBSCRIBED;
		}
	} else {
		p->derived = true;
		p->headroom_bytes = k->v[KNOB_VRAM_HEADROOM_BYTES].u;
		if (p->headroom_bytes >= p->free_bytes)
			return vplan__refuse(
			    p, p->headroom_bytes - p->free_bytes + 1,
			    "--vram-headroom-bytes, --vram-budget-bytes",
			    "--vram-headroom-bytes %" PRIu64
			    " (from %s) leaves nothing of the %" PRIu64
			    " bytes free on the device: lower --vram-headroom-bytes, or name "
			    "--vram-budget-bytes",
			    p->headroom_bytes, k->v[KNOB_VRAM_HEADROOM_BYTES].where, p->free_bytes);
		p->budget_bytes = p->free_bytes - p->headroom_bytes;
	}

	/* ---- the fixed lines ---- */
	vplan__lines(p);

	/* ---- a named pool: at least the floor, at most the whole budget ---- */
	if (pool->set) {
		p->pool_named = true;
		named_pages = vplan__named_pages(pool, p->page_bytes);
		if (named_pages < p->floor_pages)
			return vplan__refuse(
			    p, (p->floor_pages - named_pages) * p->page_bytes,
			    "--vram-kv-pool-bytes, --model-max-context, --reuse-retained-device, "
			    "--reuse-retained-host",
			    "--vram-kv-pool-bytes (from %s) buys %" PRIu64 " pages at %" PRIu64
			    " bytes per token (%" PRIu64 " per page); the floor is %" PRIu64
			    " pages (one %" PRIu64 "-token context and %u retained slots): name "
			    "at least %" PRIu64 " bytes (%" PRIu64 "tok), or lower "
			    "--model-max-context or the retained slots",
			    pool->where, named_pages, p->kv_bytes_per_token, p->page_bytes,
			    p->floor_pages, p->context, p->retained_device + p->retained_host,
			    p->floor_pages * p->page_bytes, p->floor_pages * MDESC_PAGE_TOKENS);
		if (named_pages > p->budget_bytes / p->page_bytes)
			return vplan__refuse(p, 0, "--vram-kv-pool-bytes",
			                     "--vram-kv-pool-bytes (from %s) names %" PRIu64
			                     " pages, more than the "
			                     "whole budget of %" PRIu64 " bytes holds (%" PRIu64
			                     " pages of %" PRIu64 " bytes)",
			                     pool->where, named_pages, p->budget_bytes,
			                     p->budget_bytes / p->page_bytes, p->page_bytes);
		/* within the budget, so the excess below cannot wrap */
		if (named_pages > VPLAN_MAX_POOL_PAGES)
			return vplan__too_many_pages(p, k, named_pages);
	}

	rc = m->family == MDESC_MOE ? vplan__moe(p, k, named_pages)
	                            : vplan__dense(p, k, named_pages);
	if (rc)
		return rc;
	if (p->pool_pages > VPLAN_MAX_POOL_PAGES)
		return vplan__too_many_pages(p, k, p->pool_pages);
	p->pool_bytes = p->pool_pages * p->page_bytes;
	p->total_bytes =
	    p->lines_total + p->residency_fixed_bytes + p->expert_cache_bytes + p->pool_bytes;
	p->unused_bytes = p->budget_bytes > p->total_bytes ? p->budget_bytes - p->total_bytes : 0;
	return IG_E_OK;
}
