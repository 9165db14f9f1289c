/*
 * bemodel.c - a model file bound on a backend by name, outside a plan
 * (bemodel.h). Only the backend table is called: nothing here knows which
 * backend runs.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bemodel.h"

/* No plan says how large the device is: the cpu backend simulates one as
 * large as host memory lets its allocations be (64 TiB: past any host; an
 * allocation the host cannot give still fails, by name). A real device
 * ignores the figure. */
#define BEM_SIM_BYTES (1ull << 46)

/* The placer: each device tensor copied into an allocation of its own. */
static int bem__place(void *ctx, const char *name, const void *src, uint64_t bytes, const void **at,
                      struct ig_errbuf *eb)
{
	struct bem *r = ctx;
	void *dst = NULL;
	int rc;

	if (r->n_placed == r->cap_placed) {
		uint32_t cap = r->cap_placed ? 2 * r->cap_placed : 64;
		struct bem_alloc *p = realloc(r->placed, cap * sizeof(*p));

		if (!p)
			return ig_errf(eb, IG_E_NOMEM, "host memory for the list of %u tensors",
			               cap);
		r->placed = p;
		r->cap_placed = cap;
	}
	rc = r->be.ops->alloc(&r->be, bytes, &dst, eb);
	if (!rc) {
		r->placed[r->n_placed++] = (struct bem_alloc){dst, bytes};
		rc = r->be.ops->copy_h2d(&r->be, dst, src, bytes, eb);
	}
	if (rc) {
		ig_errprefix(eb, "tensor '%s'", name);
		return rc;
	}
	*at = dst;
	return IG_E_OK;
}

static void bem__free(struct bem *r, struct bem_alloc *a)
{
	if (a->base)
		r->be.ops->free(&r->be, a->base, a->bytes);
	*a = (struct bem_alloc){0};
}

void bem_close(struct bem *r)
{
	if (r->kv_ready)
		kvpool_release(&r->kv);
	r->kv_ready = false;
	if (r->bound)
		r->be.ops->model_release(&r->be, &r->d);
	r->bound = false;
	if (r->opened) {
		bem__free(r, &r->pool);
		bem__free(r, &r->experts);
		for (uint32_t i = 0; i < r->n_placed; i++)
			bem__free(r, &r->placed[i]);
		if (r->reserved)
			be_bind_unreserve(&r->be, &r->bo);
		r->be.ops->close(&r->be);
	}
	r->reserved = r->opened = false;
	free(r->placed);
	r->placed = NULL;
	r->n_placed = r->cap_placed = 0;
}

/* The regions of `o` that are not one pass's: freed and taken again at the
 * bytes asked, which must hold model_needs' least. */
static int bem__resize(struct bem *r, struct mfile *f, const struct bem_opts *o,
                       struct ig_errbuf *eb)
{
	struct be_needs n = {0};
	int rc = r->be.ops->model_needs(&r->be, f, &r->bo, &n, eb);
	struct {
		struct be_region *reg;
		uint64_t want, least;
		const char *line;
	} rs[2] = {{&r->bo.workspace, o->workspace_bytes, n.workspace_min, "workspace"},
	           {&r->bo.sampling, o->sampling_bytes, n.sampling_min, "sampling"}};

	if (rc)
		return rc;
	for (int i = 0; i < 2; i++) {
		if (!rs[i].want)
			continue;
		if (rs[i].want < rs[i].least)
			return ig_errf(eb, IG_E_INVAL,
			               "a %s region of %" PRIu64
			               " bytes; the %s backend needs %" PRIu64 " at least",
			               rs[i].line, rs[i].want, r->be.ops->name, rs[i].least);
		if (rs[i].reg->base)
			r->be.ops->free(&r->be, rs[i].reg->base, rs[i].reg->bytes);
		*rs[i].reg = (struct be_region){0};
		rc = r->be.ops->alloc(&r->be, rs[i].want, &rs[i].reg->base, eb);
		if (rc)
			return rc;
		rs[i].reg->bytes = rs[i].want;
	}
	return IG_E_OK;
}

int bem_open(struct bem *r, struct mfile *f, const struct bem_opts *o, struct ig_errbuf *eb)
{
	const char *name = o->backend ? o->backend : "cpu";
	uint64_t pb = mdesc_page_bytes(&f->desc, o->fmt);
	uint32_t pages = o->pages ? o->pages : (uint32_t)mdesc_pages_for(o->context);
	int rc;

	memset(r, 0, sizeof(*r));
	r->be.ops = o->ops ? o->ops : backend_find(name, eb);
	if (!r->be.ops)
		return IG_E_NOTFOUND;
	if (!r->be.ops->model_bind || !r->be.ops->round)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "the %s backend has no compute for models yet (no model_bind, "
		               "no round)",
		               name);
	rc = r->be.ops->open(&r->be, BEM_SIM_BYTES, eb);
	if (rc) {
		ig_errprefix(eb, "the %s backend", name);
		return rc;
	}
	r->opened = true;
	r->fmt = o->fmt;
	r->context = o->context;
	r->bo =
	    (struct be_bind_opts){.max_round_tokens = o->max_round_tokens ? o->max_round_tokens : 1,
	                          .context = o->context,
	                          .threads = o->threads ? o->threads : 1,
	                          .states = o->states ? o->states : 1,
	                          .kv_sinks = o->kv_sinks,
	                          .kv_window = o->kv_window};
	rc = be_bind_reserve(&r->be, f, &r->bo, eb);
	r->reserved = rc == IG_E_OK;
	if (!rc && (o->workspace_bytes || o->sampling_bytes))
		rc = bem__resize(r, f, o, eb);
	/* every routed expert in the device's expert cache (resident) */
	if (!rc && f->desc.family == MDESC_MOE && !o->experts_in_place) {
		r->experts.bytes = f->desc.expert_host_bytes;
		rc = r->be.ops->alloc(&r->be, r->experts.bytes, &r->experts.base, eb);
		if (rc)
			r->experts.bytes = 0;
		r->bo.expert_cache = (struct be_region){r->experts.base, r->experts.bytes};
	}
	if (!rc)
		rc = r->be.ops->model_bind(&r->be, f, &(struct be_placer){bem__place, r}, &r->bo,
		                           &r->d, eb);
	r->bound = rc == IG_E_OK;
	if (!rc) {
		r->pool.bytes = (uint64_t)pages * pb;
		rc = r->be.ops->alloc(&r->be, r->pool.bytes, &r->pool.base, eb);
		if (rc)
			r->pool.bytes = 0;
	}
	if (!rc)
		rc = kvpool_init(&r->kv, r->pool.base, pb, pages, eb);
	r->kv_ready = rc == IG_E_OK;
	if (rc)
		bem_close(r);
	return rc;
}

int bem_needs(const struct bem_opts *o, const struct mfile *f, struct be_needs *n,
              struct ig_errbuf *eb)
{
	struct be b = {0};
	struct be_bind_opts bo = {.max_round_tokens = o->max_round_tokens ? o->max_round_tokens : 1,
	                          .context = o->context,
	                          .threads = o->threads ? o->threads : 1,
	                          .states = o->states ? o->states : 1,
	                          .kv_sinks = o->kv_sinks,
	                          .kv_window = o->kv_window};
	int rc;

	b.ops = o->ops ? o->ops : backend_find(o->backend ? o->backend : "cpu", eb);
	if (!b.ops)
		return IG_E_NOTFOUND;
	if (!b.ops->model_needs)
		return ig_errf(eb, IG_E_NOTFOUND, "the %s backend has no compute for models yet",
		               b.ops->name);
	rc = b.ops->open(&b, BEM_SIM_BYTES, eb);
	if (rc)
		return rc;
	rc = b.ops->model_needs(&b, f, &bo, n, eb);
	b.ops->close(&b);
	return rc;
}

bool bem_backend_here(const char *name, char *why, size_t why_size)
{
	struct ig_errbuf eb = {0};
	struct be b = {0};

	b.ops = backend_find(name, &eb);
	if (b.ops && (!b.ops->model_bind || !b.ops->round))
		ig_errf(&eb, IG_E_NOTFOUND, "the %s backend has no compute for models yet", name);
	else if (b.ops && b.ops->open(&b, BEM_SIM_BYTES, &eb) == IG_E_OK) {
		b.ops->close(&b);
		return true;
	}
	snprintf(why, why_size, "%s", eb.msg);
	return false;
}

int bem_seq_open(struct bem *r, struct be_seq *s, uint32_t id, uint32_t pages, struct ig_errbuf *eb)
{
	int err = IG_E_OK, rc;

	memset(s, 0, sizeof(*s));
	rc = r->be.ops->seq_init(&r->be, &r->d, s, eb);
	if (rc)
		return rc;
	if (!kvpool_try_reserve(&r->kv, &s->kv, id, pages, &err)) {
		r->be.ops->seq_release(&r->be, &r->d, s);
		if (err)
			return ig_errf(eb, err, "host memory for a page table of %u pages", pages);
		return ig_errf(eb, IG_E_NOSPACE,
		               "the KV pool has %u pages free; the sequence needs %u", r->kv.n_free,
		               pages);
	}
	return IG_E_OK;
}

void bem_seq_close(struct bem *r, struct be_seq *s)
{
	if (s->state)
		r->be.ops->seq_release(&r->be, &r->d, s);
	if (s->kv.table)
		kvpool_free(&r->kv, &s->kv);
}

int bem_round(struct bem *r, const struct be_step *steps, uint32_t n_steps, float *logits,
              struct ig_errbuf *eb)
{
	return r->be.ops->round(&r->be, &r->d, steps, n_steps, r->fmt, &r->kv, r->context, logits,
	                        eb);
}
