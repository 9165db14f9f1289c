/* model_cpu.c - the decoder assembled from its halves (see model_cpu.h). */
#include "model_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "gpu-worker/backend/bind.h"
#include "gpu-worker/backend/dectab.h"
#include "gpu-worker/backend/decoder.h"
#include "model/gguf.h"
#include "model/quant.h"

/* A neutral view as the kernels' weight (the same two fields). */
static struct cop_w mdl__w(struct be_weight w)
{
	return (struct cop_w){w.p, w.type};
}

int mdl_bind(struct mdl *d, struct mfile *f, struct ig_errbuf *eb)
{
	return mdl_bind_placed(d, f, NULL, eb);
}

/* The decoder's tensors are the neutral table's (dectab.h: which tensors,
 * their types, where they are placed); the cpu layers take its views. */
int mdl_bind_placed(struct mdl *d, struct mfile *f, const struct mdl_placer *placer,
                    struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	struct dectab t;
	int rc;

	memset(d, 0, sizeof(*d));
	d->m = m;
	rc =
	    dectab_bind(&t, f, placer ? &(struct be_placer){placer->place, placer->ctx} : NULL, eb);
	if (rc)
		return rc;
	d->layers = calloc(m->layers, sizeof(*d->layers));
	if (!d->layers) {
		dectab_release(&t);
		return ig_errf(eb, IG_E_NOMEM, "no memory for %u layers", m->layers);
	}
	d->embd = mdl__w(t.embd);
	d->out_norm = mdl__w(t.out_norm);
	d->output = mdl__w(t.output);
	for (uint32_t i = 0; i < m->layers; i++) {
		const struct dectab_layer *tl = &t.layers[i];
		struct mdl_layer *l = &d->layers[i];

		l->full = tl->full;
		l->index = tl->index;
		l->fw = (struct lfull_weights){
		    .attn_norm = mdl__w(tl->fw.attn_norm),
		    .attn_q = mdl__w(tl->fw.attn_q),
		    .attn_k = mdl__w(tl->fw.attn_k),
		    .attn_v = mdl__w(tl->fw.attn_v),
		    .attn_q_norm = mdl__w(tl->fw.attn_q_norm),
		    .attn_k_norm = mdl__w(tl->fw.attn_k_norm),
		    .attn_output = mdl__w(tl->fw.attn_output),
		};
		l->lw = (struct llin_weights){
		    .attn_norm = mdl__w(tl->lw.attn_norm),
		    .qkv = mdl__w(tl->lw.qkv),
		    .z = mdl__w(tl->lw.z),
		    .ba = mdl__w(tl->lw.ba),
		    .alpha = mdl__w(tl->lw.alpha),
		    .conv = mdl__w(tl->lw.conv),
		    .a_log = mdl__w(tl->lw.a_log),
		    .dt_bias = mdl__w(tl->lw.dt_bias),
		    .norm = mdl__w(tl->lw.norm),
		    .out = mdl__w(tl->lw.out),
		};
		l->ffn = (struct lffn_weights){
		    .norm = mdl__w(tl->ffn.norm),
		    .gate = mdl__w(tl->ffn.gate),
		    .up = mdl__w(tl->ffn.up),
		    .down = mdl__w(tl->ffn.down),
		    .router = mdl__w(tl->ffn.router),
		    .gate_exps = mdl__w(tl->ffn.gate_exps),
		    .up_exps = mdl__w(tl->ffn.up_exps),
		    .down_exps = mdl__w(tl->ffn.down_exps),
		    .shexp_gate = mdl__w(tl->ffn.shexp_gate),
		    .gate_sh = mdl__w(tl->ffn.gate_sh),
		    .up_sh = mdl__w(tl->ffn.up_sh),
		    .down_sh = mdl__w(tl->ffn.down_sh),
		};
	}
	d->placed_bytes = t.placed_bytes;
	dectab_release(&t);
	return IG_E_OK;
}

void mdl_release(struct mdl *d)
{
	free(d->layers);
	d->layers = NULL;
}

uint64_t mdl_state_bytes(const struct mdl *d)
{
	return mdesc_seq_state_bytes(d->m, d->kv_sinks, d->kv_window);
}

int mdl_seq_init(const struct mdl *d, struct be_seq *s, struct ig_errbuf *eb)
{
	size_t n = (size_t)mdl_state_bytes(d);

	s->state = calloc(n ? n : 1, 1);
	s->pos = 0;
	if (!s->state)
		return ig_errf(eb, IG_E_NOMEM, "no memory for a sequence's state");
	return IG_E_OK;
}

void mdl_seq_release(struct be_seq *s)
{
	free(s->state);
	s->state = NULL;
}

static size_t mdl__max(size_t a, size_t b)
{
	return a > b ? a : b;
}

size_t mdl_scratch_bytes(const struct mdesc *m, uint32_t n_tok, uint64_t max_context)
{
	size_t layer =
	    mdl__max(lfull_scratch_bytes(m, n_tok, max_context),
	             mdl__max(llin_scratch_bytes(m, n_tok), lffn_scratch_bytes(m, n_tok)));

	/* x, the final norm's weights and output, then the layers' scratch */
	return ((size_t)n_tok * m->hidden * 4u + 2u * m->hidden * 4u + 63u) / 64u * 64u + layer;
}

int mdl_forward(const struct mdl *d, struct be_seq *s, const uint32_t *tokens, uint32_t n_tok,
                enum mdesc_kv_format fmt, const struct kvpool *kv, uint64_t max_context,
                float *logits, void *scratch, struct cpool *pool, struct ig_errbuf *eb)
{
	struct be_step one = {s, tokens, n_tok, true};

	if (n_tok == 0)
		return IG_E_OK;
	return mdl_forward_round(d, &one, 1, fmt, kv, max_context, logits, scratch, pool, eb);
}

int mdl_check_round(const struct mdl *d, const struct be_step *steps, uint32_t n_steps,
                    uint64_t max_context, struct ig_errbuf *eb)
{
	return bind_check_steps(d->m, steps, n_steps, max_context, eb);
}

/* ---- the cpu backend's layer operations (decoder.h) over one round ---- */

struct mdl__run {
	const struct mdl *d;
	enum mdesc_kv_format fmt;
	const struct kvpool *kv;
	struct cpool *pool;
	float *x;  /* the residual rows */
	void *ls;  /* the layers' scratch */
	float *nw; /* the final norm's weights */
	uint32_t n_tok;
	struct lfull_seg *fsegs;
	struct llin_seg *lsegs;
};

static void mdl__embed(void *ctx, const struct be_step *steps, uint32_t n_steps)
{
	struct mdl__run *r = ctx;
	size_t h = r->d->m->hidden, row = 0;

	for (uint32_t i = 0; i < n_steps; i++)
		for (uint32_t t = 0; t < steps[i].n_tok; t++, row++)
			cop_row(r->d->embd, h, steps[i].tokens[t], r->x + row * h);
}

static int mdl__mixer_full(void *ctx, uint32_t layer, uint32_t index, const struct be_step *steps,
                           uint32_t n_steps)
{
	struct mdl__run *r = ctx;

	uint64_t woff = mdesc_kv_window_offset(r->d->m);

	for (uint32_t i = 0; i < n_steps; i++) {
		r->fsegs[i] = (struct lfull_seg){
		    .seq = &steps[i].s->kv, .pos0 = steps[i].s->pos, .n_tok = steps[i].n_tok};
		if (r->d->kv_window) {
			r->fsegs[i].win = (uint16_t *)((unsigned char *)steps[i].s->state + woff);
			r->fsegs[i].sinks = r->d->kv_sinks;
			r->fsegs[i].window = r->d->kv_window;
		}
	}
	return lfull_forward_segs(r->d->m, index, &r->d->layers[layer].fw, r->fmt, r->kv, r->fsegs,
	                          n_steps, r->x, r->ls, r->pool);
}

static int mdl__mixer_linear(void *ctx, uint32_t layer, const struct be_step *steps,
                             uint32_t n_steps, const struct linstate *st)
{
	struct mdl__run *r = ctx;

	for (uint32_t j = 0; j < n_steps; j++)
		r->lsegs[j] = (struct llin_seg){st[j], steps[j].n_tok};
	return llin_forward_segs(r->d->m, &r->d->layers[layer].lw, r->lsegs, n_steps, r->x, r->ls,
	                         r->pool);
}

static void mdl__ffn_dense(void *ctx, uint32_t layer, uint32_t n_tok)
{
	struct mdl__run *r = ctx;
	struct ig_errbuf eb;

	/* dense: nothing to prepare, so nothing fails */
	(void)lffn_forward(r->d->m, &r->d->layers[layer].ffn, layer, NULL, r->x, n_tok, r->ls,
	                   r->pool, NULL, &eb);
}

static struct dec_route mdl__route(void *ctx, uint32_t layer, uint32_t n_tok, bool predict)
{
	struct mdl__run *r = ctx;
	const struct lffn_weights *w = &r->d->layers[layer].ffn;
	struct lffn_moe a = predict ? lffn_moe_probs(r->d->m, w, r->x, n_tok, r->ls, r->pool)
	                            : lffn_moe_begin(r->d->m, w, r->x, n_tok, r->ls, r->pool);

	return (struct dec_route){a.p, a.ids, a.sums};
}

static void mdl__expert(void *ctx, uint32_t layer, uint32_t t, const struct be_weight w[3],
                        float weight)
{
	struct mdl__run *r = ctx;
	struct cop_w ew[3] = {mdl__w(w[0]), mdl__w(w[1]), mdl__w(w[2])};

	(void)layer;
	lffn_moe_expert(r->d->m, ew, weight, t, r->x, r->n_tok, r->ls, r->pool);
}

static void mdl__shared(void *ctx, uint32_t layer, uint32_t t)
{
	struct mdl__run *r = ctx;

	(void)layer;
	lffn_moe_shared(r->d->m, t, r->x, r->n_tok, r->ls);
}

static void mdl__head(void *ctx, const struct be_step *steps, uint32_t n_steps, float *logits)
{
	struct mdl__run *r = ctx;
	const struct mdesc *m = r->d->m;
	size_t h = m->hidden, row = 0, n_out = 0;

	cop_row(r->d->out_norm, h, 0, r->nw);
	for (uint32_t i = 0; i < n_steps; i++) {
		row += steps[i].n_tok;
		for (size_t t = steps[i].tail_logits; t > 0; t--) /* its last rows, in order */
			cop_rmsnorm(r->x + (row - t) * h, r->nw, (float *)r->ls + n_out++ * h, h,
			            m->rms_eps);
	}
	cop_matmul(r->pool, r->d->output, r->ls, logits, h, m->vocab, n_out);
}

/* The round's residual rows, for a trace. */
static void mdl__rows(void *ctx, float *out)
{
	struct mdl__run *r = ctx;

	memcpy(out, r->x, (size_t)r->n_tok * r->d->m->hidden * sizeof(float));
}

/* The routed experts through the bound model's hook (the expert cache's,
 * or a tool's), or in place: each [.., .., experts] tensor's slices. */
static int mdl__xp_prepare(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n,
                           struct ig_errbuf *eb)
{
	const struct mdl *d = ctx;

	return d->experts->prepare(d->experts->ctx, layer, ids, n, eb);
}

static void mdl__xp_get(void *ctx, uint32_t layer, uint32_t e, struct be_weight w[3])
{
	const struct mdl *d = ctx;
	struct cop_w ew[3];

	if (d->experts) {
		d->experts->get(d->experts->ctx, layer, e, ew);
	} else {
		const struct lffn_weights *f = &d->layers[layer].ffn;
		size_t hidden = d->m->hidden, inter = d->m->expert_inter;

		/* expert e: inter rows of hidden (gate, up), hidden rows of inter
		 * (down) into each [.., .., experts] tensor */
		ew[0] = cop_w_rows(f->gate_exps, hidden, (size_t)e * inter);
		ew[1] = cop_w_rows(f->up_exps, hidden, (size_t)e * inter);
		ew[2] = cop_w_rows(f->down_exps, inter, (size_t)e * hidden);
	}
	for (int i = 0; i < 3; i++)
		w[i] = (struct be_weight){ew[i].p, ew[i].type};
}

static void mdl__xp_prefetch(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n)
{
	const struct mdl *d = ctx;

	d->experts->prefetch(d->experts->ctx, layer, ids, n);
}

/* The neutral layer walk (decoder.h) on the cpu's layer operations. */
int mdl_forward_round(const struct mdl *d, const struct be_step *steps, uint32_t n_steps,
                      enum mdesc_kv_format fmt, const struct kvpool *kv, uint64_t max_context,
                      float *logits, void *scratch, struct cpool *pool, struct ig_errbuf *eb)
{
	enum { SEGS_ON_STACK = 64 };
	const struct mdesc *m = d->m;
	size_t h = m->hidden, n_tok = 0;
	struct lfull_seg fsegs_stack[SEGS_ON_STACK];
	struct llin_seg lsegs_stack[SEGS_ON_STACK];
	struct mdl__run r = {d, fmt, kv, pool, NULL, NULL, NULL, 0, fsegs_stack, lsegs_stack};
	struct dec_experts xp = {d->experts ? mdl__xp_prepare : NULL, mdl__xp_get,
	                         d->experts && d->experts->prefetch ? mdl__xp_prefetch : NULL,
	                         (void *)d};
	struct dec_ops ops = {mdl__embed, mdl__mixer_full, mdl__mixer_linear, mdl__ffn_dense,
	                      mdl__route, mdl__expert,     mdl__shared,       mdl__head,
	                      &r,         mdl__rows,       d->trace};
	int rc;

	if (n_steps == 0)
		return IG_E_OK;
	for (uint32_t i = 0; i < n_steps; i++)
		n_tok += steps[i].n_tok;
	if (n_steps > SEGS_ON_STACK) {
		r.fsegs = calloc(n_steps, sizeof(*r.fsegs));
		r.lsegs = calloc(n_steps, sizeof(*r.lsegs));
		if (!r.fsegs || !r.lsegs) {
			rc = ig_errf(eb, IG_E_NOMEM, "no memory for a round of %u sequences",
			             n_steps);
			goto out;
		}
	}
	r.n_tok = (uint32_t)n_tok;
	r.x = scratch;
	r.nw = r.x + n_tok * h;
	r.ls = (char *)scratch + (n_tok * h * 4u + 2u * h * 4u + 63u) / 64u * 64u;
	rc = dec_round(m, &ops, &xp, steps, n_steps, max_context, logits, eb);
out:
	if (r.fsegs != fsegs_stack)
		free(r.fsegs);
	if (r.lsegs != lsegs_stack)
		free(r.lsegs);
	return rc;
}

void mdl_seq_image(const struct mdl *d, const struct be_seq *s, const struct kvpool *kv,
                   enum mdesc_kv_format fmt, uint32_t last_token, uint64_t sampler_bytes,
                   struct seqimg_header *h, void **pages_out)
{
	bind_seq_image(d->m, mdl_state_bytes(d), s, kv, fmt, last_token, sampler_bytes, h,
	               pages_out);
}
