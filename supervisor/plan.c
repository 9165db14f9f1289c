/* plan.c - showing the VRAM plan (see plan.h). */
#include "plan.h"

#include <inttypes.h>
#include <string.h>

#include "common/bytesize.h"
#include "devprobe.h"
#include "common/event.h"
#include "version.h"

int plan_make(const struct knobs *k, bool for_start, struct vplan *p, struct ig_errbuf *eb)
{
	const struct knob_value *knob = &k->v[KNOB_DEVICE_FREE_BYTES];
	struct vplan_device dev = {0};
	uint64_t nvml_free = 0;
	char name[96] = "";
	struct ig_errbuf probe;
	bool named;
	int have_nvml;

	/* The device's own figure, read once, before any context exists. Not
	 * asked for the cpu backend: its device is simulated. */
	have_nvml = k->v[KNOB_BACKEND].u != 1 &&
	            devprobe_free_bytes(0, &nvml_free, name, sizeof(name), &probe) == IG_E_OK;
	switch (k->v[KNOB_BACKEND].u) {
	case 1: /* cpu */
		dev.cuda = false;
		break;
	case 2: /* cuda */
		dev.cuda = true;
		break;
	default: /* auto: cuda where this build has it and a device answers */
		dev.cuda = IGNIS_HAVE_CUDA && have_nvml;
		break;
	}
	named = knob->set && knob->src >= KS_YAML;
	if (dev.cuda && have_nvml && (for_start || !named)) {
		/* A cuda start plans for the card it runs on, whatever the knob says. */
		dev.free_bytes = nvml_free;
		snprintf(dev.source, sizeof(dev.source), "NVML: %s%s", name,
		         named ? " (--device-free-bytes ignored)" : "");
	} else if (dev.cuda && for_start) {
		return ig_errf(eb, IG_E_CONFIG,
		               "a start on the cuda backend reads the device's free memory, and "
		               "cannot: %s; start on --backend cpu, or plan with `ignis-supervisor "
		               "plan --device-free-bytes`",
		               probe.msg);
	} else if (knob->set) {
		dev.free_bytes = knob->u;
		dev.free_named = true;
		snprintf(dev.source, sizeof(dev.source), "%s", knob->where);
	} else {
		return ig_errf(eb, IG_E_CONFIG,
		               "the plan needs the device memory free at start: name "
		               "--device-free-bytes (IGNIS_DEVICE_FREE_BYTES), e.g. 32G for a card "
		               "that is not here%s%s",
		               dev.cuda ? "; reading the card failed: " : "",
		               dev.cuda ? probe.msg : "");
	}
	return vplan_compute(k, &dev, p);
}

void plan_to_msg(const struct vplan *p, const struct knobs *k, const char *model_path,
                 struct msg *m)
{
	struct msg_plan *pl = &m->u.plan;

	memset(m, 0, sizeof(*m));
	m->type = MSG_PLAN;
	pl->backend = msg_str_of(p->cuda ? "cuda" : "cpu");
	pl->free_bytes = p->free_bytes;
	pl->model = msg_str_of(p->model->name);
	pl->kv_format = msg_str_of(mdesc_kv_format_name(p->kv_format));
	pl->policy = msg_str_of(p->policy == VPLAN_RESIDENT ? "resident" : "offloaded");
	pl->budget_bytes = p->budget_bytes;
	pl->lines.n = VPLAN_NLINES;
	for (int i = 0; i < VPLAN_NLINES; i++) {
		pl->lines.v[i].name = msg_str_of(vplan_line_names[i]);
		pl->lines.v[i].bytes = p->line[i];
	}
	pl->pool_pages = p->pool_pages;
	pl->page_bytes = p->page_bytes;
	pl->residency_fixed_bytes = p->residency_fixed_bytes;
	pl->expert_cache_bytes = p->expert_cache_bytes;
	pl->total_bytes = p->total_bytes;
	pl->lanes = p->lanes;
	pl->context_tokens = p->context;
	pl->model_path = msg_str_of(model_path ? model_path : "");
	pl->chunk_tokens = p->chunk;
	pl->default_max_tokens = k->v[KNOB_MODEL_DEFAULT_MAX_TOKENS].u;
	pl->move_out_window = k->v[KNOB_REUSE_MOVE_OUT_WINDOW_BYTES].u;
	pl->move_in_window = k->v[KNOB_REUSE_MOVE_IN_WINDOW_BYTES].u;
	pl->max_requests = k->v[KNOB_SERVER_MAX_REQUESTS].u;
	pl->reuse_prompt = k->v[KNOB_REUSE_PROMPT].u != 0;
	pl->retained_host = p->retained_host;
	pl->interactive_ttl_s = k->v[KNOB_REUSE_RETAINED_INTERACTIVE_TTL].u;
	pl->pinned_expert_bytes = p->pinned_expert_bytes;
	pl->kv_sinks = p->kv_sinks;
	pl->kv_window = p->kv_window;
	pl->kv_window_bytes = p->window_bytes;
}

static void plan__lines_fields(struct ev *e, const struct vplan *p)
{
	for (int i = 0; i < VPLAN_NLINES; i++) {
		char key[64];

		snprintf(key, sizeof(key), "%s_bytes", vplan_line_names[i]);
		ev_u64(e, key, p->line[i]);
	}
}

void plan_emit(const struct vplan *p, const struct knobs *k)
{
	bool moe = p->model->family == MDESC_MOE;
	struct ev e;

	ev_begin(&e, EV_INFO, vplan_event_name(p));
	ev_str(&e, "model", p->model->name);
	ev_str(&e, "mode", p->derived ? "derived" : "explicit");
	ev_u64(&e, "free_at_start_bytes", p->free_bytes);
	ev_str(&e, "free_at_start_source", p->device_source);
	if (p->derived)
		ev_u64(&e, "headroom_bytes", p->headroom_bytes);
	else
		ev_bool(&e, "allow_oversubscription", p->allow_oversubscription);
	ev_u64(&e, "budget_bytes", p->budget_bytes);
	plan__lines_fields(&e, p);
	ev_u64(&e, "kv_pool_bytes", p->pool_bytes);
	ev_u64(&e, "kv_page_count", p->pool_pages);
	ev_u64(&e, "total_bytes", p->total_bytes);
	ev_bool(&e, "oversubscribed",
	        (p->warnings & (VPLAN_WARN_OVERSUBSCRIBED | VPLAN_WARN_BELOW_MINIMUM)) != 0);
	ev_u64(&e, "retained_device_slots", p->retained_device);
	ev_u64(&e, "retained_host_slots", p->retained_host);
	ev_u64(&e, "retained_host_bytes", p->retained_host_bytes);
	ev_str(&e, "kv_pool_policy", p->policy == VPLAN_RESIDENT ? "resident" : "offloaded");
	ev_u64(&e, "kv_pool_pages", p->pool_pages);
	ev_u64(&e, "kv_pool_tokens", p->pool_pages * MDESC_PAGE_TOKENS);
	ev_str(&e, "kv_format", mdesc_kv_format_name(p->kv_format));
	ev_u64(&e, "kv_bytes_per_token", p->kv_bytes_per_token);
	ev_u64(&e, "kv_page_bytes", p->page_bytes);
	if (p->kv_window) {
		ev_u64(&e, "kv_sinks", p->kv_sinks);
		ev_u64(&e, "kv_window", p->kv_window);
		ev_u64(&e, "kv_window_bytes_per_sequence", p->window_bytes);
	}
	ev_u64(&e, "max_context_tokens", p->context);
	if (p->context_adapted)
		ev_u64(&e, "requested_context_tokens", p->requested_context);
	ev_u64(&e, "unused_bytes", p->unused_bytes);
	if (moe) {
		ev_u64(&e, "program_bytes", p->lines_total - p->line[VPLAN_WEIGHTS]);
		ev_u64(&e, "residency_fixed_bytes", p->residency_fixed_bytes);
		ev_u64(&e, "prefill_staging_bytes", p->prefill_staging_bytes);
		ev_u64(&e, "expert_cache_bytes", p->expert_cache_bytes);
		ev_u64(&e, "lanes", p->lanes);
		ev_str(&e, "speculation", "off");
		ev_u64(&e, "pinned_expert_bytes", p->pinned_expert_bytes);
		ev_u64(&e, "expert_host_bytes", p->expert_host_bytes);
	}
	ev_end(&e);
	/* One event per warning (docs/design.md, section 2). */
	if (p->warnings & VPLAN_WARN_OVERSUBSCRIBED) {
		ev_begin(&e, EV_WARN, "ignis.runtime.vram_oversubscribed");
		ev_str(&e, "reason", "budget above free memory");
		ev_u64(&e, "budget_bytes", p->budget_bytes);
		ev_u64(&e, "free_at_start_bytes", p->free_bytes);
		ev_str(&e, "knob", "--vram-allow-oversubscription");
		ev_end(&e);
	}
	if (p->warnings & VPLAN_WARN_BELOW_MINIMUM) {
		ev_begin(&e, EV_WARN, "ignis.runtime.vram_oversubscribed");
		ev_str(&e, "reason", "budget below the plan's minimum");
		ev_u64(&e, "budget_bytes", p->budget_bytes);
		ev_u64(&e, "minimum_bytes", p->minimum_bytes);
		ev_str(&e, "knob", "--vram-allow-oversubscription");
		ev_end(&e);
	}
	if (p->warnings & VPLAN_WARN_CACHE_BELOW_FLOOR) {
		ev_begin(&e, EV_WARN, "ignis.runtime.expert_cache_below_floor");
		ev_u64(&e, "expert_cache_bytes", p->expert_cache_bytes);
		ev_u64(&e, "floor_bytes", p->cache_floor_bytes);
		ev_str(&e, "knobs", p->knobs);
		ev_end(&e);
	}
	(void)k;
}

static void plan__row(FILE *f, const char *name, uint64_t bytes, const char *note)
{
	char h[32];

	bsize_format(h, sizeof(h), bytes);
	fprintf(f, "  %-24s %18" PRIu64 "  %12s  %s\n", name, bytes, h, note ? note : "");
}

void plan_print(FILE *f, const struct vplan *p, const struct knobs *k)
{
	char note[160];

	fprintf(f,
	        "VRAM plan: %s, %s KV (%" PRIu64 " B/token, %" PRIu64 " B/page), %u lanes, "
	        "context %" PRIu64 " tokens%s, %s backend\n",
	        p->model->name, mdesc_kv_format_name(p->kv_format), p->kv_bytes_per_token,
	        p->page_bytes, p->lanes, p->context, p->context_adapted ? " (adapted)" : "",
	        p->cuda ? "cuda" : "cpu");
	plan__row(f, "free at start", p->free_bytes, p->device_source);
	if (p->derived) {
		plan__row(f, "headroom", p->headroom_bytes, k->v[KNOB_VRAM_HEADROOM_BYTES].where);
		plan__row(f, "budget", p->budget_bytes, "derived: free - headroom");
	} else {
		plan__row(f, "budget", p->budget_bytes, k->v[KNOB_VRAM_BUDGET_BYTES].where);
	}
	fprintf(f, "  lines:\n");
	for (int i = 0; i < VPLAN_NLINES; i++) {
		const char *n = NULL;

		if (i == VPLAN_HQ_RESIDUAL_WINDOW && p->kv_window) {
			snprintf(note, sizeof(note),
			         "%u sinks + %u newest tokens in bf16 per sequence, %u lanes + %u "
			         "retained",
			         p->kv_sinks, p->kv_window, p->lanes, p->retained_device);
			n = note;
		}
		plan__row(f, vplan_line_names[i], p->line[i], n);
	}
	plan__row(f, "lines total", p->lines_total, NULL);
	if (p->model->family == MDESC_MOE) {
		plan__row(f, "prefill_staging", p->prefill_staging_bytes,
		          p->policy == VPLAN_RESIDENT ? "resident: every expert has its slot"
		                                      : NULL);
		plan__row(f, "expert tables", p->expert_table_bytes, NULL);
		snprintf(note, sizeof(note), "%s; floor %" PRIu64 ", class minimum %" PRIu64,
		         p->policy == VPLAN_RESIDENT ? "every expert" : "offloaded",
		         p->cache_floor_bytes, p->class_min_bytes);
		plan__row(f, "expert_cache", p->expert_cache_bytes, note);
	}
	snprintf(note, sizeof(note),
	         "%s: %" PRIu64 " pages = %" PRIu64 " tokens (floor %" PRIu64 ")%s",
	         p->policy == VPLAN_RESIDENT ? "resident" : "offloaded", p->pool_pages,
	         p->pool_pages * MDESC_PAGE_TOKENS, p->floor_pages, p->pool_named ? ", named" : "");
	plan__row(f, "kv pool", p->pool_bytes, note);
	plan__row(f, "total", p->total_bytes, NULL);
	if (p->unused_bytes)
		plan__row(f, "unused", p->unused_bytes, "budget left unused");
	snprintf(note, sizeof(note), "%u host slots, %u device", p->retained_host,
	         p->retained_device);
	plan__row(f, "retained host block", p->retained_host_bytes, note);
	if (p->expert_host_bytes)
		plan__row(f, "experts in host memory", p->expert_host_bytes,
		          p->pinned_expert_bytes ? "every expert but the pinned (at most)"
		                                 : "every expert, behind the cache");
}
