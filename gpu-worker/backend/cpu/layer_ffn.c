/* layer_ffn.c - the feed-forward half of a layer (see layer_ffn.h). */
#include "layer_ffn.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_ops.h"
#include "gpu-worker/backend/route.h"
#include "model/gguf.h"

static size_t lffn__align(size_t n)
{
	return (n + 63u) & ~(size_t)63u;
}

size_t lffn_scratch_bytes(const struct mdesc *m, uint32_t n_tok)
{
	size_t inter = m->family == MDESC_DENSE ? m->ffn_inter : m->expert_inter;
	size_t sh = m->family == MDESC_DENSE ? 0 : m->shared_inter;
	size_t f = 0;

	f += lffn__align((size_t)m->hidden * sizeof(float));         /* norm weights */
	f += lffn__align((size_t)n_tok * m->hidden * sizeof(float)); /* xn */
	f += 2 * lffn__align((size_t)n_tok * (inter > sh ? inter : sh) * sizeof(float)); /* g, u */
	f += lffn__align((size_t)n_tok * m->hidden * sizeof(float));                     /* out */
	f += lffn__align((size_t)n_tok * (m->experts + 1) * sizeof(float)); /* router p */
	f += lffn__align((size_t)m->hidden * sizeof(float));                /* shexp gate */
	f += lffn__align((size_t)m->hidden * sizeof(float)); /* one routed expert's output */
	f += lffn__align((size_t)n_tok * (m->top_k ? m->top_k : 1) * sizeof(uint32_t)); /* ids */
	f += lffn__align((size_t)n_tok * sizeof(float)); /* each row's sum of its top_k p */
	return f;
}

/* out[n_tok][hidden] = down(silu(gate xn) * up xn) for one set of weights. */
static void lffn__swiglu(struct cpool *pool, struct cop_w gate, struct cop_w up, struct cop_w down,
                         const float *xn, size_t hidden, size_t inter, uint32_t n_tok, float *g,
                         float *u, float *out)
{
	cop_matmul(pool, gate, xn, g, hidden, inter, n_tok);
	cop_matmul(pool, up, xn, u, hidden, inter, n_tok);
	cop_swiglu(g, u, g, (size_t)n_tok * inter);
	cop_matmul(pool, down, g, out, inter, hidden, n_tok);
}

/* Where lffn_forward's buffers sit in the scratch of n_tok tokens (the MoE
 * pieces below use the same, so their calls compose to lffn_forward's). */
struct lffn__at {
	float *normw, *xn, *g, *u, *out, *p, *shg, *eo, *sums;
	uint32_t *ids;
};

static void lffn__layout(const struct mdesc *m, uint32_t n_tok, void *scratch, struct lffn__at *a)
{
	size_t hidden = m->hidden;
	size_t inter = m->family == MDESC_DENSE ? m->ffn_inter : m->expert_inter;
	size_t sh = m->family == MDESC_DENSE ? 0 : m->shared_inter;
	size_t wide = inter > sh ? inter : sh;
	uint32_t k = m->top_k;
	char *s = scratch;

	a->normw = (float *)s;
	a->xn = (float *)(s += lffn__align(hidden * sizeof(float)));
	a->g = (float *)(s += lffn__align((size_t)n_tok * hidden * sizeof(float)));
	a->u = (float *)(s += lffn__align((size_t)n_tok * wide * sizeof(float)));
	a->out = (float *)(s += lffn__align((size_t)n_tok * wide * sizeof(float)));
	a->p = (float *)(s += lffn__align((size_t)n_tok * hidden * sizeof(float)));
	a->shg = (float *)(s += lffn__align((size_t)n_tok * (m->experts + 1) * sizeof(float)));
	a->eo = (float *)(s += lffn__align((size_t)hidden * sizeof(float)));
	a->ids = (uint32_t *)(s += lffn__align((size_t)hidden * sizeof(float)));
	a->sums = (float *)(s + lffn__align((size_t)n_tok * (k ? k : 1) * sizeof(uint32_t)));
}

struct lffn_moe lffn_moe_begin(const struct mdesc *m, const struct lffn_weights *w, const float *x,
                               uint32_t n_tok, void *scratch, struct cpool *pool)
{
	size_t hidden = m->hidden;
	struct lffn__at a;

	lffn__layout(m, n_tok, scratch, &a);
	cop_row(w->norm, hidden, 0, a.normw);
	cop_rmsnorm_rows(x, a.normw, a.xn, n_tok, hidden, m->rms_eps);
	cop_row(w->shexp_gate, hidden, 0, a.shg);
	cop_matmul(pool, w->router, a.xn, a.p, hidden, m->experts, n_tok);
	lffn__swiglu(pool, w->gate_sh, w->up_sh, w->down_sh, a.xn, hidden, m->shared_inter, n_tok,
	             a.g, a.u, a.out);
	for (uint32_t t = 0; t < n_tok; t++)
		cop_softmax(a.p + (size_t)t * m->experts, m->experts);
	return (struct lffn_moe){a.p, a.ids, a.sums};
}

struct lffn_moe lffn_moe_probs(const struct mdesc *m, const struct lffn_weights *w, const float *x,
                               uint32_t n_tok, void *scratch, struct cpool *pool)
{
	size_t hidden = m->hidden;
	char *s = scratch;
	float *normw = (float *)s;
	float *xn = (float *)(s += lffn__align(hidden * sizeof(float)));
	float *p = (float *)(s += lffn__align((size_t)n_tok * hidden * sizeof(float)));
	uint32_t *ids =
	    (uint32_t *)(s + lffn__align((size_t)n_tok * (m->experts + 1) * sizeof(float)));

	cop_row(w->norm, hidden, 0, normw);
	cop_rmsnorm_rows(x, normw, xn, n_tok, hidden, m->rms_eps);
	cop_matmul(pool, w->router, xn, p, hidden, m->experts, n_tok);
	for (uint32_t t = 0; t < n_tok; t++)
		cop_softmax(p + (size_t)t * m->experts, m->experts);
	return (struct lffn_moe){p, ids, NULL};
}

void lffn_moe_expert(const struct mdesc *m, const struct cop_w ew[3], float weight, uint32_t t,
                     float *x, uint32_t n_tok, void *scratch, struct cpool *pool)
{
	size_t hidden = m->hidden;
	float *x_t = x + (size_t)t * hidden;
	struct lffn__at a;

	lffn__layout(m, n_tok, scratch, &a);
	lffn__swiglu(pool, ew[0], ew[1], ew[2], a.xn + (size_t)t * hidden, hidden, m->expert_inter,
	             1, a.g, a.u, a.eo);
	cop_scale(a.eo, weight, a.eo, hidden);
	cop_add(x_t, a.eo, x_t, hidden);
}

void lffn_moe_shared(const struct mdesc *m, uint32_t t, float *x, uint32_t n_tok, void *scratch)
{
	size_t hidden = m->hidden;
	float *x_t = x + (size_t)t * hidden;
	struct lffn__at a;
	float gate_s;

	lffn__layout(m, n_tok, scratch, &a);
	gate_s = cop_dot_f32(a.shg, a.xn + (size_t)t * hidden, hidden);
	gate_s = 1.0f / (1.0f + expf(-gate_s));
	cop_scale(a.out + (size_t)t * hidden, gate_s, a.out + (size_t)t * hidden, hidden);
	cop_add(x_t, a.out + (size_t)t * hidden, x_t, hidden);
}

const uint32_t *lffn_predict(const struct mdesc *m, const struct lffn_weights *w, const float *x,
                             uint32_t n_tok, void *scratch, struct cpool *pool)
{
	struct lffn_moe a = lffn_moe_probs(m, w, x, n_tok, scratch, pool);

	for (uint32_t t = 0; t < n_tok; t++)
		(void)route_topk(a.p + (size_t)t * m->experts, m->experts, m->top_k,
		                 a.ids + (size_t)t * m->top_k);
	return a.ids;
}

int lffn_forward(const struct mdesc *m, const struct lffn_weights *w, uint32_t layer,
                 const struct lffn_experts *xp, float *x, uint32_t n_tok, void *scratch,
                 struct cpool *pool, uint32_t *chosen, struct ig_errbuf *eb)
{
	size_t hidden = m->hidden, inter = m->expert_inter;
	uint32_t k = m->top_k, E = m->experts;
	struct lffn_moe a;

	if (m->family == MDESC_DENSE) {
		struct lffn__at at;

		lffn__layout(m, n_tok, scratch, &at);
		cop_row(w->norm, hidden, 0, at.normw);
		cop_rmsnorm_rows(x, at.normw, at.xn, n_tok, hidden, m->rms_eps);
		lffn__swiglu(pool, w->gate, w->up, w->down, at.xn, hidden, m->ffn_inter, n_tok,
		             at.g, at.u, at.out);
		cop_add(x, at.out, x, (size_t)n_tok * hidden);
		return IG_E_OK;
	}
	/* The router and the shared expert see every row at once (their weights
	 * are the same for all tokens; a row's result does not depend on the
	 * others); every row's experts are chosen next (route.h; so that the
	 * expert cache can make the whole pass's experts readable at once), then
	 * the routed experts run token by token, each token on its own experts.
	 * The additions into a token's row keep their order: its experts in
	 * rank order, then the gated shared expert. The neutral layer walk
	 * (decoder.c) calls the same pieces in the same order. */
	a = lffn_moe_begin(m, w, x, n_tok, scratch, pool);
	for (uint32_t t = 0; t < n_tok; t++)
		a.sums[t] = route_topk(a.p + (size_t)t * E, E, k, a.ids + (size_t)t * k);
	if (xp) {
		int rc = xp->prepare(xp->ctx, layer, a.ids, n_tok * k, eb);

		if (rc)
			return rc;
	}
	for (uint32_t t = 0; t < n_tok; t++) {
		for (uint32_t r = 0; r < k; r++) {
			uint32_t e = a.ids[(size_t)t * k + r];
			struct cop_w ew[3];

			/* expert e: inter rows of hidden (gate, up), hidden rows of
			 * inter (down) into each [.., .., experts] tensor, or the same
			 * bytes where the expert cache keeps them */
			if (xp) {
				xp->get(xp->ctx, layer, e, ew);
			} else {
				ew[0] = cop_w_rows(w->gate_exps, hidden, (size_t)e * inter);
				ew[1] = cop_w_rows(w->up_exps, hidden, (size_t)e * inter);
				ew[2] = cop_w_rows(w->down_exps, inter, (size_t)e * hidden);
			}
			lffn_moe_expert(m, ew, route_weight(a.p[(size_t)t * E + e], a.sums[t]), t,
			                x, n_tok, scratch, pool);
			if (chosen)
				chosen[(size_t)t * k + r] = e;
		}
		lffn_moe_shared(m, t, x, n_tok, scratch);
	}
	return IG_E_OK;
}
