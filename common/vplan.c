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
 *   hq_residual_window  compact format: each lane keeps its newest page in
 *                    bf16 until it fills: lanes x 64 x bf16 bytes per token
 *   residual         the rounding of every line to the allocation granule
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

/* The knobs that lift a minimum for this model (only those it takes). */
static const char *vplan__minimum_knobs(const struct vplan *p)
{
	if (p->derived)
		return p->model->family == MDESC_MOE
		           ? "--vram-headroom-bytes, --model-max-context, --model-prefill-chunk, "
		             "--spec-decode-lanes, --reuse-retained-device, --reuse-retained-host, "
		             "--model-kv-format"
		           : "--vram-headroom-bytes, --model-max-context, --model-prefill-chunk, "
		             "--reuse-retained-device, --reuse-retained-host, --model-kv-format";
	return p->model->family == MDESC_MOE
	           ? "--vram-budget-bytes, --model-max-context, --model-prefill-chunk, "
	             "--spec-decode-lanes, --reuse-retained-device, --reuse-retained-host, "
	             "--model-kv-format"
	           : "--vram-budget-bytes, --model-max-context, --model-prefill-chunk, "
	             "--reuse-retained-device, --reuse-retained-host, --model-kv-format";
}

static void vplan__lines(struct vplan *p)
{
	const struct mdesc *m = p->model;
	uint64_t act = mdesc_token_activation_bytes(m), g, raw = 0;

	memset(p->line, 0, sizeof(p->line));
	p->line[VPLAN_WEIGHTS] = m->weight_bytes;
	p->line[VPLAN_CUDA_CONTEXT] = p->cuda ? VPLAN_CUDA_CONTEXT_BYTES : 0;
	p->line[VPLAN_WORKSPACE] = (uint64_t)p->chunk * act;
	p->line[VPLAN_MEDIA_EMBEDDING] = 0;
	p->line[VPLAN_SAMPLING] = (uint64_t)p->lanes * m->vocab * 12u;
	p->line[VPLAN_DECODE_GRAPH] = (uint64_t)p->lanes * act;
	p->line[VPLAN_VERIFY_ROUND] = 0;
	p->line[VPLAN_DRAFTER_ROUND] = 0;
	p->line[VPLAN_LANE_STATE] = (uint64_t)p->lanes * m->state_image_bytes;
	p->line[VPLAN_RETAINED_SLOTS] = (uint64_t)p->retained_device * m->state_image_bytes;
	p->line[VPLAN_HQ_RESIDUAL_WINDOW] = p->kv_format == MDESC_KV_COMPACT
	                                        ? (uint64_t)p->lanes * MDESC_PAGE_TOKENS *
	                                              mdesc_kv_bytes_per_token(m, MDESC_KV_BF16)
	                                        : 0;
	/* Each line is reserved in whole granules; `residual` is what that
	 * rounding adds, so the lines sum to what is reserved. */
	g = p->cuda ? VPLAN_GRANULE_CUDA : VPLAN_GRANULE_CPU;
	p->lines_total = 0;
	for (int i = 0; i < VPLAN_RESIDUAL; i++) {
		raw += p->line[i];
		p->lines_total += vplan__round(p->line[i], g);
	}
	p->line[VPLAN_RESIDUAL] = p->lines_total - raw;
}

/* Pages a named pool buys: tokens round up to pages, bytes buy whole pages. */
static uint64_t vplan__named_pages(const struct knob_value *v, uint64_t page_bytes)
{
	return v->tokens ? mdesc_pages_for(v->u) : v->u / page_bytes;
}

/* The 27B's family: adapt a context that came from a default or a profile
 * (ADR 0005). Returns false when even one page does not fit. */
static bool vplan__adapt(struct vplan *p, uint64_t spare_tokens, uint64_t min_tokens)
{
	uint64_t retained = (uint64_t)p->retained_device + p->retained_host;
	uint64_t need = p->floor_pages, fit;

	if (p->lanes > 1)
		need = mdesc_pages_for(p->context) + mdesc_pages_for(spare_tokens) + retained;
	if (p->pool_pages >= need)
		return true;
	/* The largest whole-page context that leaves the spare (or, at one
	 * lane, the retained pages) in the pool. */
	fit = p->lanes > 1 ? mdesc_pages_for(spare_tokens) + retained : retained;
	/* Never below one request at the default output cap and a page of prompt. */
	if (p->pool_pages < fit + mdesc_pages_for(min_tokens) + 1)
		return false;
	p->context_adapted = true;
	p->context = (p->pool_pages - fit) * MDESC_PAGE_TOKENS;
	p->floor_pages = mdesc_pages_for(p->context) + retained;
	return true;
}

int vplan_compute(const struct knobs *k, const struct vplan_device *dev, struct vplan *p)
{
	const struct mdesc *m = k->model;
	const struct knob_value *pool = &k->v[KNOB_VRAM_KV_POOL_BYTES];
	const struct knob_value *ctx = &k->v[KNOB_MODEL_MAX_CONTEXT];
	uint64_t named_pages = 0, avail;
	char a[32], b[32];

	memset(p, 0, sizeof(*p));
	p->model = m;
	p->cuda = dev->cuda;
	p->kv_format = k->v[KNOB_MODEL_KV_FORMAT].u == 0 ? MDESC_KV_BF16 : MDESC_KV_COMPACT;
	p->kv_bytes_per_token = mdesc_kv_bytes_per_token(m, p->kv_format);
	p->page_bytes = mdesc_page_bytes(m, p->kv_format);
	p->lanes = k->lanes;
	p->chunk = (uint32_t)k->v[KNOB_MODEL_PREFILL_CHUNK].u;
	p->context = p->requested_context = ctx->u;
	p->retained_device = (uint32_t)k->v[KNOB_REUSE_RETAINED_DEVICE].u;
	p->retained_host = (uint32_t)k->v[KNOB_REUSE_RETAINED_HOST].u;
	p->retained_host_bytes = (uint64_t)p->retained_host * m->state_image_bytes;
	p->floor_pages = mdesc_pages_for(p->context) + p->retained_device + p->retained_host;
	p->free_bytes = dev->free_bytes;
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
			    p, p->headroom_bytes - p->free_bytes + 1, "--vram-headroom-bytes",
			    "--vram-headroom-bytes %" PRIu64
			    " (from %s) leaves nothing of the %" PRIu64
			    " bytes free on the device: lower --vram-headroom-bytes below %" PRIu64,
			    p->headroom_bytes, k->v[KNOB_VRAM_HEADROOM_BYTES].where, p->free_bytes,
			    p->free_bytes);
		p->budget_bytes = p->free_bytes - p->headroom_bytes;
	}

	/* ---- the fixed lines ---- */
	vplan__lines(p);

	/* ---- a named pool ---- */
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
	}

	/* ---- the pool policy ---- */
	if (m->family == MDESC_MOE) {
		uint64_t min_pool = (pool->set ? named_pages : p->floor_pages) * p->page_bytes;
		uint64_t resident_need =
		    p->lines_total + m->expert_table_bytes + m->expert_host_bytes + min_pool;

		p->expert_table_bytes = m->expert_table_bytes;
		p->cache_floor_bytes = m->cache_floor_bytes;
		p->class_min_slots = (uint64_t)p->lanes * (m->top_k + m->prefetch_width);
		p->class_min_bytes = p->class_min_slots * mdesc_class_set_bytes(m);
		p->pinned_expert_bytes = k->v[KNOB_VRAM_PINNED_EXPERT_BYTES].u;
		if (p->budget_bytes >= resident_need) {
			/* Every expert has its slot: no staging ring. */
			p->policy = VPLAN_RESIDENT;
			p->prefill_staging_bytes = 0;
			p->residency_fixed_bytes = p->expert_table_bytes;
			p->expert_cache_bytes = m->expert_host_bytes;
			avail = p->budget_bytes - p->lines_total - p->residency_fixed_bytes -
			        p->expert_cache_bytes;
			p->pool_pages = pool->set ? named_pages : avail / p->page_bytes;
		} else {
			uint64_t ctx_pages = mdesc_pages_for(p->context), want, used;

			p->policy = VPLAN_OFFLOADED;
			p->prefill_staging_bytes = 2 * m->heaviest_layer_expert_bytes;
			p->residency_fixed_bytes = p->prefill_staging_bytes + p->expert_table_bytes;
			want = (uint64_t)p->lanes * ctx_pages;
			if (want > m->offload_pool_pages)
				want = m->offload_pool_pages;
			p->pool_pages = pool->set               ? named_pages
			                : want > p->floor_pages ? want
			                                        : p->floor_pages;
			used = p->lines_total + p->pool_pages * p->page_bytes +
			       p->residency_fixed_bytes;
			if (used + p->class_min_bytes > p->budget_bytes) {
				uint64_t need = used + p->class_min_bytes;

				bsize_format(a, sizeof(a), p->class_min_bytes);
				return vplan__refuse(
				    p, need - p->budget_bytes,
				    "--vram-kv-pool-bytes, --model-prefill-chunk, "
				    "--vram-headroom-bytes, --reuse-retained-device, "
				    "--spec-decode-lanes",
				    "the expert cache cannot hold one decode step's experts in "
				    "every "
				    "class (%" PRIu64 " slots per class, %" PRIu64 " bytes = %s), "
				    "whatever --vram-allow-expert-cache-below-floor says: the "
				    "budget "
				    "of %" PRIu64 " bytes is short by %" PRIu64
				    " bytes. Lift it with a "
				    "smaller --vram-kv-pool-bytes, --model-prefill-chunk or "
				    "--vram-headroom-bytes, fewer --reuse-retained-device, or "
				    "fewer "
				    "--spec-decode-lanes",
				    p->class_min_slots, p->class_min_bytes, a, p->budget_bytes,
				    need - p->budget_bytes);
			}
			p->expert_cache_bytes = p->budget_bytes - used;
			if (p->expert_cache_bytes < p->cache_floor_bytes) {
				snprintf(p->knobs, sizeof(p->knobs),
				         "--vram-kv-pool-bytes, --model-prefill-chunk, "
				         "--vram-headroom-bytes, --reuse-retained-device");
				if (!k->v[KNOB_VRAM_ALLOW_EXPERT_CACHE_BELOW_FLOOR].u) {
					bsize_format(a, sizeof(a), p->expert_cache_bytes);
					bsize_format(b, sizeof(b), p->cache_floor_bytes);
					return vplan__refuse(
					    p, p->cache_floor_bytes - p->expert_cache_bytes,
					    p->knobs,
					    "the expert cache would get %" PRIu64
					    " bytes (%s), below "
					    "its floor of %" PRIu64 " bytes (%s) by %" PRIu64
					    " bytes; decode slows sharply there. Lift it with a "
					    "smaller --vram-kv-pool-bytes, --model-prefill-chunk "
					    "or "
					    "--vram-headroom-bytes, or fewer "
					    "--reuse-retained-device; "
					    "--vram-allow-expert-cache-below-floor starts anyway "
					    "with a "
					    "warning",
					    p->expert_cache_bytes, a, p->cache_floor_bytes, b,
					    p->cache_floor_bytes - p->expert_cache_bytes);
				}
				p->warnings |= VPLAN_WARN_CACHE_BELOW_FLOOR;
			}
		}
		/* Pinned experts: never into the slots of the widest decode step. */
		if (p->pinned_expert_bytes) {
			uint64_t most = p->expert_cache_bytes - p->class_min_bytes;

			if (p->policy == VPLAN_OFFLOADED && p->pinned_expert_bytes > most)
				return vplan__refuse(
				    p, p->pinned_expert_bytes - most, "--vram-pinned-expert-bytes",
				    "--vram-pinned-expert-bytes %" PRIu64 " (from %s) would leave "
				    "some class fewer than the %" PRIu64
				    " slots of the widest decode "
				    "step: the most it can pin is %" PRIu64 " bytes",
				    p->pinned_expert_bytes,
				    k->v[KNOB_VRAM_PINNED_EXPERT_BYTES].where, p->class_min_slots,
				    most);
		}
	} else {
		p->policy = VPLAN_RESIDENT;
		avail = p->budget_bytes > p->lines_total ? p->budget_bytes - p->lines_total : 0;
		p->pool_pages = pool->set ? named_pages : avail / p->page_bytes;
		/* Adaptation: a context its load chose (default or profile), not
		 * one the operator named. */
		if (!pool->set && ctx->src <= KS_PROFILE &&
		    !vplan__adapt(p, k->v[KNOB_VRAM_ADAPT_SPARE_TOKENS].u,
		                  k->v[KNOB_MODEL_DEFAULT_MAX_TOKENS].u))
			p->pool_pages = avail / p->page_bytes; /* the minimum check refuses */
	}

	/* ---- the minimum ---- */
	p->pool_bytes = p->pool_pages * p->page_bytes;
	p->minimum_bytes =
	    p->lines_total + p->floor_pages * p->page_bytes +
	    (p->policy == VPLAN_OFFLOADED ? p->residency_fixed_bytes + p->class_min_bytes
	                                  : p->residency_fixed_bytes + p->expert_cache_bytes);
	if (p->pool_pages < p->floor_pages || p->minimum_bytes > p->budget_bytes) {
		uint64_t short_by = p->minimum_bytes > p->budget_bytes
		                        ? p->minimum_bytes - p->budget_bytes
		                        : (p->floor_pages - p->pool_pages) * p->page_bytes;

		if (!(p->allow_oversubscription && !p->derived))
			return vplan__refuse(
			    p, short_by, vplan__minimum_knobs(p),
			    "the plan needs at least %" PRIu64 " bytes (fixed lines %" PRIu64
			    " + one %" PRIu64 "-token context and %u retained slots: %" PRIu64
			    " pages of %" PRIu64 " bytes) but the budget is %" PRIu64
			    " bytes: short by %" PRIu64 " bytes. Turn: %s",
			    p->minimum_bytes, p->lines_total, p->context,
			    p->retained_device + p->retained_host, p->floor_pages, p->page_bytes,
			    p->budget_bytes, short_by, vplan__minimum_knobs(p));
		/* Explicitly allowed: the floor pool, with a warning. */
		p->pool_pages = p->floor_pages;
		p->pool_bytes = p->pool_pages * p->page_bytes;
		p->warnings |= VPLAN_WARN_OVERSUBSCRIBED;
	}
	p->total_bytes =
	    p->lines_total + p->residency_fixed_bytes + p->expert_cache_bytes + p->pool_bytes;
	p->unused_bytes = p->budget_bytes > p->total_bytes ? p->budget_bytes - p->total_bytes : 0;
	return IG_E_OK;
}
