/*
 * ignis-gpu-worker - owns device memory, the model, the kernels, the paged KV
 * pool and the scheduler. So far: it starts, says hello, answers pings, takes
 * the supervisor's VRAM plan (checking that it is whole and adds up), exits
 * cleanly when asked, and reports which compute backends this build has.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "layout.h"
#include "daemon.h"
#include "event.h"
#include "vplan.h"

/* The worker's device and the plan laid out on it. */
struct worker {
	struct be be;
	bool be_open;
	struct layout layout;
	bool have_plan;
	uint64_t lines_bytes, pool_bytes, total_bytes;
};

/* Lay the plan out on its backend, check the accounting, say so. */
static int worker_lay_out(struct worker *w, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	const struct be_ops *ops;
	char name[17];
	uint64_t free_after, total;
	struct ev e;
	int rc;

	layout_release(&w->layout);
	if (w->be_open) {
		w->be.ops->close(&w->be);
		w->be_open = false;
	}
	msg_str_copy(name, sizeof(name), pl->backend);
	ops = backend_find(name, eb);
	if (!ops)
		return IG_E_NOTFOUND;
	memset(&w->be, 0, sizeof(w->be));
	w->be.ops = ops;
	rc = ops->open(&w->be, pl->free_bytes, eb);
	if (rc)
		return rc;
	w->be_open = true;
	rc = layout_apply(&w->layout, &w->be, pl, eb);
	if (!rc)
		rc = layout_check(&w->layout, pl, eb);
	if (rc) {
		layout_release(&w->layout);
		return rc;
	}
	ops->mem_info(&w->be, &free_after, &total);
	ev_begin(&e, EV_INFO, "ignis.runtime.vram_loaded");
	ev_str(&e, "backend", name);
	ev_u64(&e, "allocated_bytes", total - free_after);
	ev_u64(&e, "free_after_load_bytes", free_after);
	ev_u64(&e, "kv_pool_pages", w->layout.pool_pages);
	ev_end(&e);
	return IG_E_OK;
}

/* Check a plan message: the lines of common/vplan.h in their order, and a
 * total that is the sum of its parts. */
static int worker_take_plan(struct worker *w, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	uint64_t lines = 0, pool, sum;
	struct ev e;

	if (pl->lines.n != VPLAN_NLINES)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "plan.lines: %u lines; this worker lays "
		               "out %d",
		               pl->lines.n, VPLAN_NLINES);
	for (uint32_t i = 0; i < pl->lines.n; i++) {
		if (!msg_str_eq(pl->lines.v[i].name, vplan_line_names[i]))
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "plan.lines[%u] is '%.*s'; expected '%s' (a plan from "
			               "another build?)",
			               i, (int)pl->lines.v[i].name.n, pl->lines.v[i].name.p,
			               vplan_line_names[i]);
		lines += pl->lines.v[i].bytes;
	}
	pool = pl->pool_pages * pl->page_bytes;
	sum = lines + pool + pl->residency_fixed_bytes + pl->expert_cache_bytes;
	if (sum != pl->total_bytes || pl->total_bytes > pl->budget_bytes)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "plan.total_bytes %" PRIu64 " is not the sum of its parts %" PRIu64
		               " within the budget %" PRIu64,
		               pl->total_bytes, sum, pl->budget_bytes);
	{
		int rc = worker_lay_out(w, pl, eb);

		if (rc)
			return rc;
	}
	w->have_plan = true;
	w->lines_bytes = lines;
	w->pool_bytes = pool;
	w->total_bytes = pl->total_bytes;
	ev_begin(&e, EV_INFO, "ignis.gpu_worker.plan_received");
	ev_strn(&e, "model", pl->model.p, pl->model.n);
	ev_strn(&e, "kv_pool_policy", pl->policy.p, pl->policy.n);
	ev_u64(&e, "lines_bytes", lines);
	ev_u64(&e, "kv_pool_pages", pl->pool_pages);
	ev_u64(&e, "kv_pool_bytes", pool);
	ev_u64(&e, "total_bytes", pl->total_bytes);
	ev_end(&e);
	return IG_E_OK;
}

static int worker_handle(void *ctx, const struct msg *req, struct msg *reply, struct ig_errbuf *eb)
{
	int rc;

	if (req->type != MSG_PLAN)
		return ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		               "the gpu-worker does not take '%s' messages",
		               msg_type_name(req->type));
	rc = worker_take_plan(ctx, &req->u.plan, eb);
	if (rc)
		return rc;
	reply->type = MSG_ACK;
	reply->u.ack.of = MSG_PLAN;
	return IG_E_OK;
}

int main(int argc, char **argv)
{
	static struct worker w;
	const struct dmn_spec spec = {
	    .role = "gpu-worker",
	    .program = "ignis-gpu-worker",
	    .sockname = "gpu-worker",
	    .summary = "The Ignis GPU worker: device memory, model, KV pool, scheduler.",
	    .ready_fields = backend_ready_fields,
	    .handle = worker_handle,
	    .ctx = &w,
	};
	struct dmn_args args;
	int rc = dmn_parse_args(&spec, argc, argv, &args);

	if (rc)
		return rc > 0 ? 0 : 2;
	return dmn_run(&spec, &args);
}
