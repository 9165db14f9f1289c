/* metrics.c - the metrics page's table and renderer (see metrics.h). */
#include "metrics.h"

#include <inttypes.h>
#include <string.h>

#include "kvmetrics.h"

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

static const char *const met__extra_names[MET_NEXTRA] = {
#define MET__EXTRA_NAME(ID, name) [MET_LINE_##ID] = name,
    MET_PLAN_EXTRA_LINES(MET__EXTRA_NAME)
#undef MET__EXTRA_NAME
};

const char *met_type_name(enum met_type t)
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

static void met__family(struct met__out *o, enum met_id id)
{
	const struct met_snap *s = o->s;
	const struct msg_worker_stats_reply *w = &s->w;

	switch (id) {
	case MET_VRAM_RESERVED:
		for (int i = 0; i < VPLAN_NLINES; i++)
			met__lab(o, id, "line", vplan_line_names[i], s->line[i]);
		for (int i = 0; i < MET_NEXTRA; i++)
			met__lab(o, id, "line", met__extra_names[i], s->extra[i]);
		break;
	case MET_VRAM_BUDGET:
		met__u64(o, id, "", s->budget_bytes);
		break;
	case MET_KV_POOL_PAGES:
		met__u64(o, id, "", s->pool_pages);
		break;
	case MET_KV_PAGE_BYTES:
		met__u64(o, id, "", s->page_bytes);
		break;
	case MET_KV_POOL_USED:
		met__u64(o, id, "", w->used_pages);
		break;
	case MET_KV_POOL_FREE:
		met__u64(o, id, "", w->pool_pages - w->used_pages);
		break;
	case MET_KV_POOL_PENDING:
		met__u64(o, id, "", w->pending_pages);
		break;
	case MET_SCHED_REQUESTS:
		met__lab(o, id, "state", "waiting", w->waiting);
		met__lab(o, id, "state", "prefill", w->prefill);
		met__lab(o, id, "state", "ready", w->ready);
		met__lab(o, id, "state", "decode", w->decode);
		met__lab(o, id, "state", "moving_out", w->moving_out);
		met__lab(o, id, "state", "moved", w->moved);
		met__lab(o, id, "state", "moving_in", w->moving_in);
		break;
	case MET_KV_EVICTIONS:
		met__u64(o, id, "", w->moves_out);
		break;
	case MET_KV_MOVES:
		met__lab(o, id, "direction", "out", w->moves_out);
		met__lab(o, id, "direction", "in", w->moves_in);
		break;
	case MET_KV_MOVE_BYTES:
		met__lab(o, id, "direction", "out", w->move_out_bytes);
		met__lab(o, id, "direction", "in", w->move_in_bytes);
		break;
	case MET_KV_REPREFILLS:
		met__u64(o, id, "", w->reprefills);
		break;
	case MET_KV_MOVE_RETRIES:
		met__u64(o, id, "", w->move_retries);
		break;
	case MET_REQ_ACCEPTED:
		met__u64(o, id, "", w->accepted);
		break;
	case MET_REQ_COMPLETED:
		met__lab(o, id, "reason", "length", w->finished_length);
		met__lab(o, id, "reason", "eos", w->finished_eos);
		met__lab(o, id, "reason", "context", w->finished_context);
		break;
	case MET_REQ_CANCELLED:
		met__u64(o, id, "", w->cancelled);
		break;
	case MET_PROMPT_TOKENS:
		met__u64(o, id, "", w->prompt_tokens);
		break;
	case MET_GENERATED_TOKENS:
		met__u64(o, id, "", w->generated_tokens);
		break;
	case MET_PREFILL_TOKENS:
		met__u64(o, id, "", w->prefill_tokens);
		break;
	case MET_ROUNDS:
		met__u64(o, id, "", w->rounds);
		break;
	case MET_TTFT:
		met__ttft(o);
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
			met__lab(o, id, "socket", "gpu-worker", w->rejected);
		if (s->kvstore.up)
			met__lab(o, id, "socket", "kvstore", s->kv.rejected);
		break;
	case MET_KV_MOVES_STOPPED:
		met__u64(o, id, "", w->moves_stopped);
		break;
	case MET__COUNT:
		break;
	}
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
