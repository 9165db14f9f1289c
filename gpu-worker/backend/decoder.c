/* decoder.c - the layer walk of a round on every backend (see decoder.h). */
#include "decoder.h"

#include <stdlib.h>

#include "bind.h"
#include "route.h"

/* The rows after operation `op` of layer `layer`, to the trace if any. */
static void dec__trace(const struct mdesc *m, const struct dec_ops *ops, const char *op,
                       uint32_t layer, uint32_t n_tok)
{
	const struct be_trace *t = ops->trace;
	uint64_t n = (uint64_t)n_tok * m->hidden;

	if (!t || !ops->rows || n > t->cap)
		return;
	ops->rows(ops->ctx, t->rows);
	t->after(t->ctx, op, layer, t->rows, n);
}

/* The feed-forward of a mixture of experts: route every row, make the
 * pass's experts readable, then each row's experts in rank order and its
 * shared expert (the order every backend keeps: route.h). */
static int dec__moe(const struct mdesc *m, const struct dec_ops *ops, const struct dec_experts *xp,
                    uint32_t layer, uint32_t n_tok, struct ig_errbuf *eb)
{
	uint32_t k = m->top_k, E = m->experts;
	struct dec_route r = ops->route(ops->ctx, layer, n_tok, false);

	for (uint32_t t = 0; t < n_tok; t++)
		r.sums[t] = route_topk(r.p + (size_t)t * E, E, k, r.ids + (size_t)t * k);
	if (xp->prepare) {
		int rc = xp->prepare(xp->ctx, layer, r.ids, n_tok * k, eb);

		if (rc)
			return rc;
	}
	for (uint32_t t = 0; t < n_tok; t++) {
		for (uint32_t q = 0; q < k; q++) {
			uint32_t e = r.ids[(size_t)t * k + q];
			struct be_weight w[3];

			xp->get(xp->ctx, layer, e, w);
			ops->expert(ops->ctx, layer, t, w,
			            route_weight(r.p[(size_t)t * E + e], r.sums[t]));
		}
		ops->shared(ops->ctx, layer, t);
	}
	return IG_E_OK;
}

/* Layer `layer`'s likely experts, from the residual now: their copies
 * start beside the layer's token mixer (expcache.h). */
static void dec__prefetch(const struct mdesc *m, const struct dec_ops *ops,
                          const struct dec_experts *xp, uint32_t layer, uint32_t n_tok)
{
	struct dec_route r = ops->route(ops->ctx, layer, n_tok, true);

	for (uint32_t t = 0; t < n_tok; t++)
		(void)route_topk(r.p + (size_t)t * m->experts, m->experts, m->top_k,
		                 r.ids + (size_t)t * m->top_k);
	xp->prefetch(xp->ctx, layer, r.ids, n_tok * m->top_k);
}

int dec_round(const struct mdesc *m, const struct dec_ops *ops, const struct dec_experts *xp,
              const struct be_step *steps, uint32_t n_steps, uint64_t max_context, float *logits,
              struct ig_errbuf *eb)
{
	enum { ON_STACK = 64 };
	struct linstate st_stack[ON_STACK], *st = st_stack;
	struct mdesc_lin_state lst;
	uint32_t n_tok = 0, nf = 0, nl = 0;
	int rc;

	if (n_steps == 0)
		return IG_E_OK;
	rc = bind_check_steps(m, steps, n_steps, max_context, eb);
	if (rc)
		return rc;
	mdesc_lin_state(m, &lst);
	for (uint32_t i = 0; i < n_steps; i++)
		n_tok += steps[i].n_tok;
	if (n_steps > ON_STACK) {
		st = calloc(n_steps, sizeof(*st));
		if (!st)
			return ig_errf(eb, IG_E_NOMEM, "no memory for a round of %u sequences",
			               n_steps);
	}
	ops->embed(ops->ctx, steps, n_steps);
	dec__trace(m, ops, "embed", 0, n_tok);
	for (uint32_t i = 0; i < m->layers; i++) {
		if (mdesc_is_full_layer(m, i)) {
			rc = ops->mixer_full(ops->ctx, i, nf++, steps, n_steps);
		} else {
			for (uint32_t j = 0; j < n_steps; j++)
				st[j] = linstate_layer(&lst, steps[j].s->state, nl);
			nl++;
			rc = ops->mixer_linear(ops->ctx, i, steps, n_steps, st);
		}
		if (rc) {
			/* checked above: a refusal here is a shape the binding let by */
			rc = ig_errf(eb, rc, "layer %u refused its input", i);
			goto out;
		}
		dec__trace(m, ops, mdesc_is_full_layer(m, i) ? "mixer_full" : "mixer_linear", i,
		           n_tok);
		if (m->family == MDESC_DENSE) {
			ops->ffn_dense(ops->ctx, i, n_tok);
			dec__trace(m, ops, "ffn_dense", i, n_tok);
		} else {
			rc = dec__moe(m, ops, xp, i, n_tok, eb);
			if (rc)
				goto out;
			dec__trace(m, ops, "moe", i, n_tok);
			if (xp->prefetch && i + 1 < m->layers)
				dec__prefetch(m, ops, xp, i + 1, n_tok);
		}
	}
	ops->head(ops->ctx, steps, n_steps, logits);
	for (uint32_t i = 0; i < n_steps; i++)
		steps[i].s->pos += steps[i].n_tok;
out:
	if (st != st_stack)
		free(st);
	return rc;
}
