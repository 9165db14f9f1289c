/* model_cpu.c - the decoder assembled from its halves (see model_cpu.h). */
#include "model_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "gguf.h"

struct mdl__bind {
	const struct gguf *g;
	struct ig_errbuf *eb;
	int rc;
};

static const uint16_t *mdl__t(struct mdl__bind *b, const char *name)
{
	const struct gguf_tensor *t;

	if (b->rc)
		return NULL;
	t = gguf_find_tensor(b->g, name);
	if (!t) {
		b->rc = ig_errf(b->eb, IG_E_INVAL, "tensor '%s' is missing", name);
		return NULL;
	}
	if (t->type != GGUF_TENSOR_BF16) {
		b->rc = ig_errf(b->eb, IG_E_INVAL,
		                "tensor '%s' is %s; the cpu runtime takes bf16 weights for now "
		                "(ignis-mkmodel --dtype bf16)",
		                name, gguf_tensor_type_name(t->type));
		return NULL;
	}
	return t->data;
}

static const uint16_t *mdl__lt(struct mdl__bind *b, uint32_t layer, const char *what)
{
	char name[64];

	snprintf(name, sizeof(name), "blk.%u.%s.weight", layer, what);
	return mdl__t(b, name);
}

int mdl_bind(struct mdl *d, struct mfile *f, struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	struct mdl__bind b = {&f->g, eb, 0};
	uint32_t nf = 0, nl = 0;

	memset(d, 0, sizeof(*d));
	d->m = m;
	d->layers = calloc(m->layers, sizeof(*d->layers));
	if (!d->layers)
		return ig_errf(eb, IG_E_NOMEM, "no memory for %u layers", m->layers);
	d->embd = mdl__t(&b, "token_embd.weight");
	d->out_norm = mdl__t(&b, "output_norm.weight");
	d->output = mdl__t(&b, "output.weight");
	for (uint32_t i = 0; i < m->layers && !b.rc; i++) {
		struct mdl_layer *l = &d->layers[i];

		l->full = mdesc_is_full_layer(m, i);
		if (l->full) {
			l->index = nf++;
			l->fw.attn_norm = mdl__lt(&b, i, "attn_norm");
			l->fw.attn_q = mdl__lt(&b, i, "attn_q");
			l->fw.attn_k = mdl__lt(&b, i, "attn_k");
			l->fw.attn_v = mdl__lt(&b, i, "attn_v");
			l->fw.attn_q_norm = mdl__lt(&b, i, "attn_q_norm");
			l->fw.attn_k_norm = mdl__lt(&b, i, "attn_k_norm");
			l->fw.attn_output = mdl__lt(&b, i, "attn_output");
		} else {
			l->index = nl++;
			l->lw.attn_norm = mdl__lt(&b, i, "attn_norm");
			l->lw.qkv = mdl__lt(&b, i, "lin_qkv");
			l->lw.z = mdl__lt(&b, i, "lin_z");
			l->lw.ba = mdl__lt(&b, i, "lin_ba");
			l->lw.conv = mdl__lt(&b, i, "lin_conv");
			l->lw.a_log = mdl__lt(&b, i, "lin_a_log");
			l->lw.dt_bias = mdl__lt(&b, i, "lin_dt_bias");
			l->lw.norm = mdl__lt(&b, i, "lin_norm");
			l->lw.out = mdl__lt(&b, i, "lin_out");
		}
		l->ffn.norm = mdl__lt(&b, i, "ffn_norm");
		if (m->family == MDESC_DENSE) {
			l->ffn.gate = mdl__lt(&b, i, "ffn_gate");
			l->ffn.up = mdl__lt(&b, i, "ffn_up");
			l->ffn.down = mdl__lt(&b, i, "ffn_down");
		} else {
			l->ffn.router = mdl__lt(&b, i, "ffn_gate_inp");
			l->ffn.gate_exps = mdl__lt(&b, i, "ffn_gate_exps");
			l->ffn.up_exps = mdl__lt(&b, i, "ffn_up_exps");
			l->ffn.down_exps = mdl__lt(&b, i, "ffn_down_exps");
			l->ffn.shexp_gate = mdl__lt(&b, i, "ffn_gate_inp_shexp");
			l->ffn.gate_sh = mdl__lt(&b, i, "ffn_gate_shexp");
			l->ffn.up_sh = mdl__lt(&b, i, "ffn_up_shexp");
			l->ffn.down_sh = mdl__lt(&b, i, "ffn_down_shexp");
		}
	}
	d->n_linear = nl;
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

size_t mdl_seq_state_floats(const struct mdl *d)
{
	return (size_t)d->n_linear * llin_state_floats(d->m);
}

int mdl_seq_init(const struct mdl *d, struct mdl_seq *s, struct ig_errbuf *eb)
{
	size_t n = mdl_seq_state_floats(d);

	s->lin_state = calloc(n ? n : 1, sizeof(float));
	s->pos = 0;
	if (!s->lin_state)
		return ig_errf(eb, IG_E_NOMEM, "no memory for a sequence's state");
	return IG_E_OK;
}

void mdl_seq_release(struct mdl_seq *s)
{
	free(s->lin_state);
	s->lin_state = NULL;
}

static size_t mdl__max(size_t a, size_t b)
{
	return a > b ? a : b;
}

size_t mdl_scratch_bytes(const struct mdl *d, uint32_t n_tok, uint64_t max_context)
{
	size_t layer =
	    mdl__max(lfull_scratch_bytes(d->m, n_tok, max_context),
	             mdl__max(llin_scratch_bytes(d->m, n_tok), lffn_scratch_bytes(d->m, n_tok)));

	/* x, the final norm's weights and output, then the layers' scratch */
	return ((size_t)n_tok * d->m->hidden * 4u + 2u * d->m->hidden * 4u + 63u) / 64u * 64u +
	       layer;
}

int mdl_forward(const struct mdl *d, struct mdl_seq *s, const uint32_t *tokens, uint32_t n_tok,
                enum mdesc_kv_format fmt, const struct kvpool *kv, uint64_t max_context,
                float *logits, void *scratch, struct cpool *pool, struct ig_errbuf *eb)
{
	const struct mdesc *m = d->m;
	size_t h = m->hidden;
	float *x = scratch, *nw = x + (size_t)n_tok * h, *xl = nw + h;
	void *ls = (char *)scratch + ((size_t)n_tok * h * 4u + 2u * h * 4u + 63u) / 64u * 64u;
	size_t per = llin_state_floats(m), s_floats = llin_state_s_floats(m);

	if (n_tok == 0)
		return IG_E_OK;
	if (s->pos + n_tok > max_context)
		return ig_errf(eb, IG_E_INVAL, "%llu tokens would pass the context of %llu",
		               (unsigned long long)(s->pos + n_tok),
		               (unsigned long long)max_context);
	for (uint32_t t = 0; t < n_tok; t++) {
		if (tokens[t] >= m->vocab)
			return ig_errf(eb, IG_E_INVAL,
			               "token %u at %u is outside the vocabulary of %u", tokens[t],
			               t, m->vocab);
		for (size_t i = 0; i < h; i++)
			x[(size_t)t * h + i] = gguf_bf16_to_f32(d->embd[(size_t)tokens[t] * h + i]);
	}
	for (uint32_t i = 0; i < m->layers; i++) {
		const struct mdl_layer *l = &d->layers[i];
		int rc;

		if (l->full) {
			rc = lfull_forward(m, l->index, &l->fw, fmt, kv, &s->kv, s->pos, x, n_tok,
			                   ls, pool);
		} else {
			struct llin_state st = {s->lin_state + l->index * per,
			                        s->lin_state + l->index * per + s_floats};

			rc = llin_forward(m, &l->lw, &st, x, n_tok, ls, pool);
		}
		if (rc)
			return ig_errf(eb, rc, "layer %u refused its input", i);
		lffn_forward(m, &l->ffn, x, n_tok, ls, pool, NULL);
	}
	for (size_t i = 0; i < h; i++)
		nw[i] = gguf_bf16_to_f32(d->out_norm[i]);
	cop_rmsnorm(x + (size_t)(n_tok - 1) * h, nw, xl, h, m->rms_eps);
	cop_matmul_bf16(pool, d->output, xl, logits, h, m->vocab, 1);
	s->pos += n_tok;
	return IG_E_OK;
}

void mdl_seq_image(const struct mdl *d, const struct mdl_seq *s, const struct kvpool *kv,
                   enum mdesc_kv_format fmt, uint32_t last_token, uint64_t sampler_bytes,
                   struct seqimg_header *h, void **pages_out)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->model, sizeof(h->model), "%s", d->m->name);
	h->model_id = seqimg_model_id(d->m);
	h->kv_format = fmt;
	h->page_bytes = (uint32_t)mdesc_page_bytes(d->m, fmt);
	h->tokens = s->pos;
	/* only the pages that hold tokens travel */
	h->pages = (uint32_t)((s->pos + 63) / 64);
	h->last_token = last_token;
	h->state_bytes = mdl_seq_state_floats(d) * sizeof(float);
	h->sampler_bytes = sampler_bytes;
	for (uint32_t i = 0; i < h->pages && i < s->kv.n_pages; i++)
		pages_out[i] = kvpool_page(kv, s->kv.table[i]);
}
