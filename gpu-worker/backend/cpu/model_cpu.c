/* model_cpu.c - the decoder assembled from its halves (see model_cpu.h). */
#include "model_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "gpu-worker/backend/bind.h"
#include "model/gguf.h"
#include "model/quant.h"

struct mdl__bind {
	const struct gguf *g;
	const struct mdl_placer *placer;
	struct ig_errbuf *eb;
	int rc;
	uint64_t placed;
};

/* A tensor's bytes where the worker keeps them; `matrix`: any type the
 * matrix product reads (model/quant.h), else (norms, the convolution, decay
 * and bias vectors) F32, F16 or BF16: vectors are read element by element. */
static const void *mdl__t(struct mdl__bind *b, const char *name, bool matrix, uint32_t *type)
{
	const struct gguf_tensor *t;

	if (b->rc)
		return NULL;
	t = gguf_find_tensor(b->g, name);
	if (!t) {
		b->rc = ig_errf(b->eb, IG_E_INVAL, "tensor '%s' is missing", name);
		return NULL;
	}
	if (matrix ? !quant_type_of(t->type) || !quant_row_bytes(t->type, t->dims[0])
	           : t->type != GGUF_TENSOR_BF16 && t->type != GGUF_TENSOR_F16 &&
	                 t->type != GGUF_TENSOR_F32) {
		b->rc = ig_errf(b->eb, IG_E_INVAL,
		                "tensor '%s' is %s; the cpu runtime takes %s here "
		                "(ignis-mkmodel --dtype writes them so)",
		                name, gguf_tensor_type_name(t->type),
		                matrix ? quant_accepted() : "F32, F16 or BF16");
		return NULL;
	}
	if (type)
		*type = t->type;
	/* device weights go where the placer puts them; the routed experts
	 * (ffn_*_exps) stay in host memory, as the plan keeps them */
	if (b->placer && !strstr(name, "_exps.")) {
		const void *at = NULL;

		b->rc = b->placer->place(b->placer->ctx, name, t->data, t->n_bytes, &at, b->eb);
		if (b->rc)
			return NULL;
		b->placed += t->n_bytes;
		return at;
	}
	return t->data;
}

static struct cop_w mdl__vec(struct mdl__bind *b, const char *name)
{
	struct cop_w w = {.type = QUANT_BF16};

	w.p = mdl__t(b, name, false, &w.type);
	return w;
}

static struct cop_w mdl__mat(struct mdl__bind *b, const char *name)
{
	struct cop_w w = {.type = QUANT_BF16};

	w.p = mdl__t(b, name, true, &w.type);
	return w;
}

/* The file's name of our tensor `what` of layer `layer` (mdesc_tensor_name). */
static const char *mdl__ln(const struct mdesc *m, char *name, size_t cap, uint32_t layer,
                           const char *what)
{
	mdesc_tensor_name(m, (int)layer, what, name, cap);
	return name;
}
#define LVEC(i, what) mdl__vec(&b, mdl__ln(m, nm, sizeof(nm), (i), (what)))
#define LMAT(i, what) mdl__mat(&b, mdl__ln(m, nm, sizeof(nm), (i), (what)))

int mdl_bind(struct mdl *d, struct mfile *f, struct ig_errbuf *eb)
{
	return mdl_bind_placed(d, f, NULL, eb);
}

int mdl_bind_placed(struct mdl *d, struct mfile *f, const struct mdl_placer *placer,
                    struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	struct mdl__bind b = {&f->g, placer, eb, 0, 0};
	uint32_t nf = 0, nl = 0;
	char nm[64];

	memset(d, 0, sizeof(*d));
	d->m = m;
	d->layers = calloc(m->layers, sizeof(*d->layers));
	if (!d->layers)
		return ig_errf(eb, IG_E_NOMEM, "no memory for %u layers", m->layers);
	d->embd = mdl__mat(&b, "token_embd.weight");
	d->out_norm = mdl__vec(&b, "output_norm.weight");
	/* tied: the embedding's rows give the logits (llama.cpp's qwen3 files) */
	d->output = m->tied_output ? d->embd : mdl__mat(&b, "output.weight");
	for (uint32_t i = 0; i < m->layers && !b.rc; i++) {
		struct mdl_layer *l = &d->layers[i];

		l->full = mdesc_is_full_layer(m, i);
		if (l->full) {
			l->index = nf++;
			l->fw.attn_norm = LVEC(i, "attn_norm");
			l->fw.attn_q = LMAT(i, "attn_q");
			l->fw.attn_k = LMAT(i, "attn_k");
			l->fw.attn_v = LMAT(i, "attn_v");
			l->fw.attn_q_norm = LVEC(i, "attn_q_norm");
			l->fw.attn_k_norm = LVEC(i, "attn_k_norm");
			l->fw.attn_output = LMAT(i, "attn_output");
		} else {
			l->index = nl++;
			l->lw.attn_norm = LVEC(i, "attn_norm");
			l->lw.qkv = LMAT(i, "lin_qkv");
			l->lw.z = LMAT(i, "lin_z");
			if (mdesc_lin_ba(m) == MDESC_BA_SPLIT) {
				l->lw.ba = LMAT(i, "lin_beta");
				l->lw.alpha = LMAT(i, "lin_alpha");
			} else {
				l->lw.ba = LMAT(i, "lin_ba");
			}
			l->lw.conv = LVEC(i, "lin_conv");
			l->lw.a_log = LVEC(i, "lin_a_log");
			l->lw.dt_bias = LVEC(i, "lin_dt_bias");
			l->lw.norm = LVEC(i, "lin_norm");
			l->lw.out = LMAT(i, "lin_out");
		}
		l->ffn.norm = LVEC(i, "ffn_norm");
		if (m->family == MDESC_DENSE) {
			l->ffn.gate = LMAT(i, "ffn_gate");
			l->ffn.up = LMAT(i, "ffn_up");
			l->ffn.down = LMAT(i, "ffn_down");
		} else {
			l->ffn.router = LMAT(i, "ffn_gate_inp");
			l->ffn.gate_exps = LMAT(i, "ffn_gate_exps");
			l->ffn.up_exps = LMAT(i, "ffn_up_exps");
			l->ffn.down_exps = LMAT(i, "ffn_down_exps");
			l->ffn.shexp_gate = LVEC(i, "ffn_gate_inp_shexp");
			l->ffn.gate_sh = LMAT(i, "ffn_gate_shexp");
			l->ffn.up_sh = LMAT(i, "ffn_up_shexp");
			l->ffn.down_sh = LMAT(i, "ffn_down_shexp");
		}
	}
	d->placed_bytes = b.placed;
	if (b.rc) {
		ig_errprefix(eb, "'%s'", f->g.path);
		mdl_release(d);
	}
	return b.rc;
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
