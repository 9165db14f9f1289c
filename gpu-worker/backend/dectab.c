/* dectab.c - the decoder's tensors on every backend (see dectab.h). */
#include "dectab.h"

#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/mfile.h"
#include "model/quant.h"

struct dectab__bind {
	const struct gguf *g;
	const struct be_placer *placer;
	struct ig_errbuf *eb;
	int rc;
	uint64_t placed;
};

/* A tensor's bytes where the worker keeps them; `matrix`: any type the
 * matrix product reads (model/quant.h), else (norms, the convolution, decay
 * and bias vectors) F32, F16 or BF16: vectors are read element by element. */
static const void *dectab__t(struct dectab__bind *b, const char *name, bool matrix, uint32_t *type)
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
		                "tensor '%s' is %s; the runtime takes %s here "
		                "(ignis-mkmodel --dtype writes them so)",
		                name, gguf_tensor_type_name(t->type),
		                matrix ? quant_accepted() : "F32, F16 or BF16");
		return NULL;
	}
	*type = t->type;
	/* device weights go where the placer puts them; the routed experts
	 * (ffn_*_exps) are the expert cache's (expcache.h), read from the
	 * mapping */
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

static struct be_weight dectab__w(struct dectab__bind *b, const char *name, bool matrix)
{
	struct be_weight w = {.type = QUANT_BF16};

	w.p = dectab__t(b, name, matrix, &w.type);
	return w;
}

/* Layer `layer`'s tensor `what` (our name: mdesc_tensor_name). */
static struct be_weight dectab__lw(struct dectab__bind *b, const struct mdesc *m, uint32_t layer,
                                   const char *what, bool matrix)
{
	char name[64];

	mdesc_tensor_name(m, (int)layer, what, name, sizeof(name));
	return dectab__w(b, name, matrix);
}
#define VEC(what) dectab__lw(&b, m, i, (what), false)
#define MAT(what) dectab__lw(&b, m, i, (what), true)

int dectab_bind(struct dectab *t, struct mfile *f, const struct be_placer *placer,
                struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	struct dectab__bind b = {&f->g, placer, eb, 0, 0};
	uint32_t nf = 0, nl = 0;

	memset(t, 0, sizeof(*t));
	t->m = m;
	t->layers = calloc(m->layers, sizeof(*t->layers));
	if (!t->layers)
		return ig_errf(eb, IG_E_NOMEM, "no memory for %u layers", m->layers);
	t->embd = dectab__w(&b, "token_embd.weight", true);
	t->out_norm = dectab__w(&b, "output_norm.weight", false);
	/* tied: the embedding's rows give the logits (llama.cpp's qwen3 files) */
	t->output = m->tied_output ? t->embd : dectab__w(&b, "output.weight", true);
	for (uint32_t i = 0; i < m->layers && !b.rc; i++) {
		struct dectab_layer *l = &t->layers[i];

		l->full = mdesc_is_full_layer(m, i);
		if (l->full) {
			l->index = nf++;
			l->fw.attn_norm = VEC("attn_norm");
			l->fw.attn_q = MAT("attn_q");
			l->fw.attn_k = MAT("attn_k");
			l->fw.attn_v = MAT("attn_v");
			l->fw.attn_q_norm = VEC("attn_q_norm");
			l->fw.attn_k_norm = VEC("attn_k_norm");
			l->fw.attn_output = MAT("attn_output");
		} else {
			l->index = nl++;
			l->lw.attn_norm = VEC("attn_norm");
			l->lw.qkv = MAT("lin_qkv");
			l->lw.z = MAT("lin_z");
			if (mdesc_lin_ba(m) == MDESC_BA_SPLIT) {
				l->lw.ba = MAT("lin_beta");
				l->lw.alpha = MAT("lin_alpha");
			} else {
				l->lw.ba = MAT("lin_ba");
			}
			l->lw.conv = VEC("lin_conv");
			l->lw.a_log = VEC("lin_a_log");
			l->lw.dt_bias = VEC("lin_dt_bias");
			l->lw.norm = VEC("lin_norm");
			l->lw.out = MAT("lin_out");
		}
		l->ffn.norm = VEC("ffn_norm");
		if (m->family == MDESC_DENSE) {
			l->ffn.gate = MAT("ffn_gate");
			l->ffn.up = MAT("ffn_up");
			l->ffn.down = MAT("ffn_down");
		} else {
			l->ffn.router = MAT("ffn_gate_inp");
			l->ffn.gate_exps = MAT("ffn_gate_exps");
			l->ffn.up_exps = MAT("ffn_up_exps");
			l->ffn.down_exps = MAT("ffn_down_exps");
			l->ffn.shexp_gate = VEC("ffn_gate_inp_shexp");
			l->ffn.gate_sh = MAT("ffn_gate_shexp");
			l->ffn.up_sh = MAT("ffn_up_shexp");
			l->ffn.down_sh = MAT("ffn_down_shexp");
		}
	}
	t->placed_bytes = b.placed;
	if (b.rc) {
		ig_errprefix(eb, "'%s'", f->g.path);
		dectab_release(t);
	}
	return b.rc;
}

void dectab_release(struct dectab *t)
{
	free(t->layers);
	t->layers = NULL;
}
