/* model_cpu.c - the decoder assembled from its halves (see model_cpu.h). */
#include "model_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "gpu-worker/backend/bind.h"
#include "gpu-worker/backend/dectab.h"
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

int mdl_seq_init(const struct mdl *d, struct be_seq *s, struct ig_errbuf *eb)
{
	struct mdesc_lin_state ls;
	size_t n;

	mdesc_lin_state(d->m, &ls);
	n = (size_t)ls.floats;

	s->state = calloc(n ? n : 1, sizeof(float));
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

int mdl_forward_round(const struct mdl *d, const struct be_step *steps, uint32_t n_steps,
                      enum mdesc_kv_format fmt, const struct kvpool *kv, uint64_t max_context,
                      float *logits, void *scratch, struct cpool *pool, struct ig_errbuf *eb)
{
	enum { SEGS_ON_STACK = 64 };
	const struct mdesc *m = d->m;
	size_t h = m->hidden, n_tok = 0, row = 0, n_out = 0;
	struct lfull_seg fsegs_stack[SEGS_ON_STACK], *fsegs = fsegs_stack;
	struct llin_seg lsegs_stack[SEGS_ON_STACK], *lsegs = lsegs_stack;
	struct mdesc_lin_state lst;
	float *x, *nw;
	void *ls;
	int rc;

	if (n_steps == 0)
		return IG_E_OK;
	mdesc_lin_state(m, &lst);
	rc = mdl_check_round(d, steps, n_steps, max_context, eb);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n_steps; i++)
		n_tok += steps[i].n_tok;
	if (n_steps > SEGS_ON_STACK) {
		fsegs = calloc(n_steps, sizeof(*fsegs));
		lsegs = calloc(n_steps, sizeof(*lsegs));
		if (!fsegs || !lsegs) {
			rc = ig_errf(eb, IG_E_NOMEM, "no memory for a round of %u sequences",
			             n_steps);
			goto out;
		}
	}
	x = scratch;
	nw = x + n_tok * h;
	ls = (char *)scratch + (n_tok * h * 4u + 2u * h * 4u + 63u) / 64u * 64u;

	for (uint32_t i = 0; i < n_steps; i++) {
		for (uint32_t t = 0; t < steps[i].n_tok; t++, row++)
			cop_row(d->embd, h, steps[i].tokens[t], x + row * h);
		fsegs[i] = (struct lfull_seg){&steps[i].s->kv, steps[i].s->pos, steps[i].n_tok};
	}
	for (uint32_t i = 0; i < m->layers; i++) {
		const struct mdl_layer *l = &d->layers[i];

		if (l->full) {
			rc = lfull_forward_segs(m, l->index, &l->fw, fmt, kv, fsegs, n_steps, x, ls,
			                        pool);
		} else {
			for (uint32_t j = 0; j < n_steps; j++)
				lsegs[j] = (struct llin_seg){
				    linstate_layer(&lst, steps[j].s->state, l->index),
				    steps[j].n_tok};
			rc = llin_forward_segs(m, &l->lw, lsegs, n_steps, x, ls, pool);
		}
		if (rc) {
			/* checked above: a refusal here is a shape the binding let by */
			rc = ig_errf(eb, rc, "layer %u refused its input", i);
			goto out;
		}
		rc =
		    lffn_forward(m, &l->ffn, i, d->experts, x, (uint32_t)n_tok, ls, pool, NULL, eb);
		if (rc)
			goto out;
		/* the next layer's likely experts, from this residual: their copies
		 * go now, beside the next token mixer's compute (expcache.h) */
		if (d->experts && d->experts->prefetch && i + 1 < m->layers)
			d->experts->prefetch(
			    d->experts->ctx, i + 1,
			    lffn_predict(m, &d->layers[i + 1].ffn, x, (uint32_t)n_tok, ls, pool),
			    (uint32_t)n_tok * m->top_k);
	}
	/* The head over the last row of each step that wants logits, at once. */
	cop_row(d->out_norm, h, 0, nw);
	row = 0;
	for (uint32_t i = 0; i < n_steps; i++) {
		row += steps[i].n_tok;
		if (steps[i].want_logits)
			cop_rmsnorm(x + (row - 1) * h, nw, (float *)ls + n_out++ * h, h,
			            m->rms_eps);
		steps[i].s->pos += steps[i].n_tok;
	}
	cop_matmul(pool, d->output, ls, logits, h, m->vocab, n_out);
	rc = IG_E_OK;
out:
	if (fsegs != fsegs_stack)
		free(fsegs);
	if (lsegs != lsegs_stack)
		free(lsegs);
	return rc;
}

void mdl_seq_image(const struct mdl *d, const struct be_seq *s, const struct kvpool *kv,
                   enum mdesc_kv_format fmt, uint32_t last_token, uint64_t sampler_bytes,
                   struct seqimg_header *h, void **pages_out)
{
	bind_seq_image(d->m, s, kv, fmt, last_token, sampler_bytes, h, pages_out);
}
