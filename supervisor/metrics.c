/* metrics.c - the metrics page's table and renderer (see metrics.h). */
#include "metrics.h"

#include <inttypes.h>
#include <string.h>

#include "common/model.h"
#include "proto/kvmetrics.h"

const struct met_family met_families[MET__COUNT] = {
#define MET__ROW(ID, fname, ftype, flabels, fsource, fhelp)                                        \
	[MET_##ID] = {.name = #fname,                                                              \
	              .type = MET_##ftype,                                                         \
	              .labels = flabels,                                                           \
	              .source = MET_SRC_##fsource,                                                 \
	              .help = fhelp},
    MET_FAMILIES(MET__ROW)
#undef MET__ROW
};

/* The computed rows' figures (MET_ROWS' C rows). */
static uint64_t met__calc_free_pages(const struct met_snap *s)
{
	return s->w.pool_pages - s->w.used_pages;
}

/* Reused tokens: all tiers in reused_tokens (prefixes among them in
 * reused_prefix_tokens), the host tier's part in reused_host_tokens (its
 * prefixes in reused_host_prefix_tokens); checked by met_check_worker. */
static uint64_t met__calc_checkpoint_tokens(const struct met_snap *s)
{
	return (s->w.reused_tokens - s->w.reused_prefix_tokens) -
	       (s->w.reused_host_tokens - s->w.reused_host_prefix_tokens);
}

static uint64_t met__calc_device_prefix_tokens(const struct met_snap *s)
{
	return s->w.reused_prefix_tokens - s->w.reused_host_prefix_tokens;
}

static uint64_t met__calc_host_checkpoint_tokens(const struct met_snap *s)
{
	return s->w.reused_host_tokens - s->w.reused_host_prefix_tokens;
}

static uint64_t met__calc_free_slots(const struct met_snap *s)
{
	return s->w.retained_slots > s->w.checkpoints ? s->w.retained_slots - s->w.checkpoints : 0;
}

/* A row's member must be a uint64_t of the snapshot: read through its offset. */
#define MET__IS_U64(member)                                                                        \
	_Generic(((const struct met_snap *)0)->member, uint64_t : 1, default : 0)
#define MET__FIELD_ROW(ID, label, member)                                                          \
	{.id = MET_##ID, .label_value = label, .offset = offsetof(struct met_snap, member)},
#define MET__CALC_ROW(ID, label, name)                                                             \
	{.id = MET_##ID, .label_value = label, .calc = met__calc_##name},
const struct met_row met_rows[] = {MET_ROWS(MET__FIELD_ROW, MET__CALC_ROW)};
const size_t met_nrows = sizeof(met_rows) / sizeof(met_rows[0]);
#undef MET__CALC_ROW
#undef MET__FIELD_ROW

#define MET__CHECK_FIELD(ID, label, member)                                                        \
	_Static_assert(MET__IS_U64(member), "MET_ROWS: " #member " is not a uint64_t");
#define MET__CHECK_CALC(ID, label, name)
MET_ROWS(MET__CHECK_FIELD, MET__CHECK_CALC)
#undef MET__CHECK_CALC
#undef MET__CHECK_FIELD

static const char *const met__extra_names[MET_NEXTRA] = {
#define MET__EXTRA_NAME(ID, name) [MET_LINE_##ID] = name,
    MET_PLAN_EXTRA_LINES(MET__EXTRA_NAME)
#undef MET__EXTRA_NAME
};

/* "counter", "gauge", "histogram" */
static const char *met_type_name(enum met_type t)
{
	switch (t) {
	case MET_COUNTER:
		return "counter";
	case MET_GAUGE:
		return "gauge";
	case MET_HISTOGRAM:
		return "histogram";
	}
	return "untyped";
}

void met_snap_plan(struct met_snap *s, const struct vplan *p)
{
	memcpy(s->line, p->line, sizeof(s->line));
	s->extra[MET_LINE_PREFILL_STAGING] = p->prefill_staging_bytes;
	s->extra[MET_LINE_EXPERT_TABLES] = p->expert_table_bytes;
	s->extra[MET_LINE_EXPERT_CACHE] = p->expert_cache_bytes;
	s->extra[MET_LINE_KV_POOL] = p->pool_bytes;
	s->budget_bytes = p->budget_bytes;
	s->pool_pages = p->pool_pages;
	s->page_bytes = p->page_bytes;
}

int met_check_worker(const struct msg_worker_stats_reply *r, struct ig_errbuf *eb)
{
	if (r->ttft.n < 1 || r->ttft.v[r->ttft.n - 1].le_us != UINT64_MAX)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "worker_stats_reply.ttft: %u buckets, the last not +Inf; accepted: "
		               "1..32 buckets, the last with le_us 2^64-1",
		               r->ttft.n);
	for (uint32_t i = 1; i < r->ttft.n; i++)
		if (r->ttft.v[i].le_us <= r->ttft.v[i - 1].le_us)
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "worker_stats_reply.ttft[%u].le_us: %" PRIu64
			               " after %" PRIu64 "; accepted: strictly ascending bounds",
			               i, r->ttft.v[i].le_us, r->ttft.v[i - 1].le_us);
	if (r->used_pages > r->pool_pages)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "worker_stats_reply.used_pages: %" PRIu64 " of a pool of %" PRIu64
		               "; accepted: at most the pool",
		               r->used_pages, r->pool_pages);
	if (r->reused_prefix_tokens > r->reused_tokens)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "worker_stats_reply.reused_prefix_tokens: %" PRIu64 " of %" PRIu64,
		               r->reused_prefix_tokens, r->reused_tokens);
	if (r->reused_host_tokens > r->reused_tokens ||
	    r->reused_host_prefix_tokens > r->reused_host_tokens ||
	    r->reused_host_prefix_tokens > r->reused_prefix_tokens ||
	    r->reused_tokens - r->reused_prefix_tokens <
	        r->reused_host_tokens - r->reused_host_prefix_tokens)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "worker_stats_reply.reused_host_tokens: %" PRIu64 " (%" PRIu64
		               " of them prefixes) of %" PRIu64 " (%" PRIu64
		               " prefixes); accepted: a part of each",
		               r->reused_host_tokens, r->reused_host_prefix_tokens,
		               r->reused_tokens, r->reused_prefix_tokens);
	if (r->checkpoints > r->retained_slots)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "worker_stats_reply.checkpoints: %" PRIu64 " in %" PRIu64
		               " retained slots",
		               r->checkpoints, r->retained_slots);
	return IG_E_OK;
}

/* ---- rendering ------------------------------------------------------------ */

struct met__out {
	FILE *f;
	const struct met_snap *s;
	uint64_t now_ms;
};

static void met__head(struct met__out *o, enum met_id id)
{
	const struct met_family *m = &met_families[id];

	fprintf(o->f, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
	        met_type_name(m->type));
}

/* One sample: `label` is `name="value"` or "". */
static void met__u64(struct met__out *o, enum met_id id, const char *label, uint64_t v)
{
	fprintf(o->f, "%s%s%s%s %" PRIu64 "\n", met_families[id].name, label[0] ? "{" : "", label,
	        label[0] ? "}" : "", v);
}

static void met__lab(struct met__out *o, enum met_id id, const char *name, const char *value,
                     uint64_t v)
{
	char label[96];

	snprintf(label, sizeof(label), "%s=\"%s\"", name, value);
	met__u64(o, id, label, v);
}

static void met__ttft(struct met__out *o)
{
	const struct msg_worker_stats_reply *w = &o->s->w;
	const char *name = met_families[MET_TTFT].name;
	uint64_t cum = 0;

	for (uint32_t i = 0; i < w->ttft.n; i++) {
		cum += w->ttft.v[i].count;
		if (w->ttft.v[i].le_us == UINT64_MAX)
			fprintf(o->f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
		else
			fprintf(o->f, "%s_bucket{le=\"%.6g\"} %" PRIu64 "\n", name,
			        (double)w->ttft.v[i].le_us / 1e6, cum);
	}
	fprintf(o->f, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, (double)w->ttft_sum_us / 1e6,
	        name, cum);
}

static void met__src(struct met__out *o, enum met_id id, const char *source,
                     const struct met_src *src)
{
	char label[64];

	snprintf(label, sizeof(label), "source=\"%s\"", source);
	if (id == MET_STATS_UP)
		met__u64(o, id, label, src->up);
	else if (src->have)
		fprintf(o->f, "%s{%s} %.3f\n", met_families[id].name, label,
		        (double)(o->now_ms - src->at_ms) / 1e3);
}

/* The rows of family `id`, or false when it has none. */
static bool met__rows(struct met__out *o, enum met_id id)
{
	const char *label_name = met_families[id].labels;
	bool any = false;

	for (size_t i = 0; i < met_nrows; i++) {
		const struct met_row *r = &met_rows[i];
		uint64_t v;

		if (r->id != id)
			continue;
		if (r->calc)
			v = r->calc(o->s);
		else
			memcpy(&v, (const char *)o->s + r->offset, sizeof(v));
		if (strchr(label_name, ',')) {
			/* labels "a,b" and values "x,y": a="x",b="y" */
			char label[160];
			const char *n = label_name, *val = r->label_value;
			size_t k = 0;

			while (*n && k + 8 < sizeof(label)) {
				size_t nl = strcspn(n, ","), vl = strcspn(val, ",");

				k += (size_t)snprintf(label + k, sizeof(label) - k,
				                      "%s%.*s=\"%.*s\"", k ? "," : "", (int)nl, n,
				                      (int)vl, val);
				n += nl + (n[nl] == ',');
				val += vl + (val[vl] == ',');
			}
			met__u64(o, id, label, v);
		} else if (r->label_value[0]) {
			met__lab(o, id, label_name, r->label_value, v);
		} else {
			met__u64(o, id, "", v);
		}
		any = true;
	}
	return any;
}

bool met_family_per_class(enum met_id id)
{
	return id == MET_EXPERT_SLOTS || id == MET_EXPERT_HITS || id == MET_EXPERT_MISSES ||
	       id == MET_EXPERT_BYTES || id == MET_EXPERT_EVICTIONS || id == MET_EXPERT_PREFETCHES;
}

/* The families that are not rows (metrics.h says why). */
static void met__family(struct met__out *o, enum met_id id)
{
	const struct met_snap *s = o->s;

	if (met__rows(o, id))
		return;
	switch (id) {
	case MET_VRAM_RESERVED:
		for (int i = 0; i < VPLAN_NLINES; i++)
			met__lab(o, id, "line", vplan_line_names[i], s->line[i]);
		for (int i = 0; i < MET_NEXTRA; i++)
			met__lab(o, id, "line", met__extra_names[i], s->extra[i]);
		break;
	case MET_TTFT:
		met__ttft(o);
		break;
	case MET_EXPERT_SLOTS:
	case MET_EXPERT_HITS:
	case MET_EXPERT_MISSES:
	case MET_EXPERT_BYTES:
	case MET_EXPERT_EVICTIONS:
	case MET_EXPERT_PREFETCHES:
		for (uint32_t i = 0; i < s->w.experts.n && i < 8; i++) {
			const struct msg_expert_class *c = &s->w.experts.v[i];

			met__lab(o, id, "class", s->expert_names[i],
			         id == MET_EXPERT_SLOTS       ? c->slots
			         : id == MET_EXPERT_HITS      ? c->hits
			         : id == MET_EXPERT_MISSES    ? c->misses
			         : id == MET_EXPERT_BYTES     ? c->bytes
			         : id == MET_EXPERT_EVICTIONS ? c->evictions
			                                      : c->prefetches);
		}
		break;
	case MET_PROCESS_UP:
	case MET_PROCESS_RESTARTS:
		for (uint32_t i = 0; i < s->nprocs && i < MET_NPROC; i++)
			met__lab(o, id, "role", s->procs[i].role,
			         id == MET_PROCESS_UP ? s->procs[i].up : s->procs[i].restarts);
		break;
	case MET_STATS_UP:
	case MET_STATS_AGE:
		met__src(o, id, "gpu-worker", &s->worker);
		met__src(o, id, "kvstore", &s->kvstore);
		break;
	case MET_PROTO_REJECTED:
		met__lab(o, id, "socket", "client", s->rejected_client);
		met__lab(o, id, "socket", "supervisor", s->rejected_supervisor);
		if (s->worker.up)
			met__lab(o, id, "socket", "gpu-worker", s->w.rejected);
		if (s->kvstore.up)
			met__lab(o, id, "socket", "kvstore", s->kv.rejected);
		break;
	default: /* a family of rows */
		break;
	}
}

int met_render_gateway(FILE *f, const struct met_snap *s, const char *name, uint64_t door_queued)
{
	const struct msg_worker_stats_reply *w = &s->w;
	uint64_t waiting, running;
	char model[2 * 64 + 1];
	size_t n = 0;

	if (!s->worker.up)
		return ferror(f) ? -1 : 0;
	/* a label value: backslash, quote and line feed escaped */
	for (const char *p = name; *p && n + 2 < sizeof(model); p++) {
		if (*p == '\\' || *p == '"' || *p == '\n')
			model[n++] = '\\';
		model[n++] = *p == '\n' ? 'n' : *p;
	}
	model[n] = '\0';
	waiting = door_queued + w->waiting + w->moved;
	running = w->prefill + w->ready + w->decode + w->moving_out + w->moving_in;
	fprintf(f,
	        "# HELP vllm:num_requests_waiting Requests not being served: queued at the front "
	        "door, waiting for KV pages, or moved off the device (ignis_scheduler_requests).\n"
	        "# TYPE vllm:num_requests_waiting gauge\n"
	        "vllm:num_requests_waiting{model_name=\"%s\"} %" PRIu64 "\n",
	        model, waiting);
	fprintf(f,
	        "# HELP vllm:num_requests_running Requests being served: prefill, decode, or "
	        "moving between the device and KV-RAM.\n"
	        "# TYPE vllm:num_requests_running gauge\n"
	        "vllm:num_requests_running{model_name=\"%s\"} %" PRIu64 "\n",
	        model, running);
	fprintf(f,
	        "# HELP vllm:kv_cache_usage_perc KV pool pages reserved over the pool's pages, "
	        "0..1 (ignis_kv_pool_used_pages / ignis_kv_pool_pages).\n"
	        "# TYPE vllm:kv_cache_usage_perc gauge\n"
	        "vllm:kv_cache_usage_perc{model_name=\"%s\"} %.6f\n",
	        model, w->pool_pages ? (double)w->used_pages / (double)w->pool_pages : 0.0);
	fprintf(
	    f,
	    "# HELP vllm:cache_config_info The KV pool's shape: tokens a page (block_size) and "
	    "pages (num_gpu_blocks).\n"
	    "# TYPE vllm:cache_config_info gauge\n"
	    "vllm:cache_config_info{model_name=\"%s\",block_size=\"%u\",num_gpu_blocks=\"%" PRIu64
	    "\"} 1\n",
	    model, (unsigned)MDESC_PAGE_TOKENS, w->pool_pages);
	return ferror(f) ? -1 : 0;
}

int met_render(FILE *f, const struct met_snap *s, uint64_t now_ms)
{
	struct met__out o = {f, s, now_ms};

	for (int id = 0; id < MET__COUNT; id++) {
		enum met_source src = met_families[id].source;

		if ((src == MET_SRC_WORKER && !s->worker.up) ||
		    (src == MET_SRC_KVSTORE && !s->kvstore.up))
			continue;
		met__head(&o, (enum met_id)id);
		met__family(&o, (enum met_id)id);
	}
	if (s->kvstore.up)
		kvm_write_prom(f, &s->kv);
	return ferror(f) ? -1 : 0;
}
