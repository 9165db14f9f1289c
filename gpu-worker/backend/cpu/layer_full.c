/*
 * layer_full.c - one full-attention layer's token mixer on the cpu backend
 * (the math and the exactness rules: layer_full.h; the page layout: kvfmt.h).
 *
 * Scratch (floats, in this order):
 *   norm weights widened to fp32   hidden + 2 head_dim
 *   xn, later the output proj.     n_tok x hidden
 *   qg (query and gate)            n_tok x 2 q_heads head_dim (the gate's half
 *                                  unused when attn_q holds no gate)
 *   k, v                           2 x n_tok x kv_heads head_dim
 *   o (attention output)           n_tok x q_heads head_dim
 *   per q head: scores + one       q_heads x (max_context + head_dim)
 *   decoded vector
 * Tokens are attended one after another, each with a job over its q heads,
 * so the per-head scratch does not grow with the chunk.
 */
#include "layer_full.h"

#include <math.h>
#include <string.h>

#include "cpu_ops.h"
#include "common/err.h"
#include "model/gguf.h"
#include "model/kvfmt.h"

size_t lfull_scratch_bytes(const struct mdesc *m, uint32_t n_tok, uint64_t max_context)
{
	size_t hd = m->head_dim, qd = (size_t)m->q_heads * hd, kvd = (size_t)m->kv_heads * hd;
	size_t f = m->hidden + 2 * hd;

	f += (size_t)n_tok * (m->hidden + 2 * qd + 2 * kvd + qd);
	f += (size_t)m->q_heads * ((size_t)max_context + hd);
	return f * sizeof(float);
}

struct lfull_ctx;
static unsigned char *slot_addr(const struct lfull_ctx *c, uint64_t pos, uint32_t role,
                                uint32_t kh);

/* What the jobs share. */
struct lfull_ctx {
	const struct mdesc *m;
	uint32_t full_index;
	enum mdesc_kv_format fmt;
	const struct kvpool *kv;
	const struct kvseq *seq;
	uint64_t pos0;
	const float *q_norm, *k_norm;
	float *qg, *k, *v, *o;
	float *head_scratch; /* per q head: max_context + head_dim floats */
	size_t head_stride;
	uint32_t t; /* the attention job's token */
	float scale;
	size_t qs; /* floats a q head takes in qg: 2 head_dim (query, gate), or
	              head_dim when attn_q holds no gate */
	/* the segment's residual window (layer_full.h); NULL: none. While it is
	 * on, prep leaves in k and v each token's rotated vectors rounded to
	 * bf16: what the window holds of them once the chunk is over */
	uint16_t *win;
	uint32_t sinks, window;
};

/* Window slot of position `pos` (common/model.h's layout). */
static uint16_t *win_slot(const struct lfull_ctx *c, uint64_t pos, uint32_t role, uint32_t kh)
{
	const struct mdesc *m = c->m;
	uint64_t slots = (uint64_t)c->sinks + c->window;
	uint64_t slot = pos < c->sinks ? pos : c->sinks + pos % c->window;

	return c->win +
	       ((((uint64_t)c->full_index * 2u + role) * m->kv_heads + kh) * slots + slot) *
	           m->head_dim;
}

/* Position j's key (role 0) or value (1) of KV head kh, in the rotated basis,
 * as the token at position p reads it: from the window in bf16 (the chunk's
 * own tokens from k and v, the same bits), else decoded from its page into
 * `dec`. */
static const float *kv_read(const struct lfull_ctx *c, uint64_t p, uint64_t j, uint32_t role,
                            uint32_t kh, float *dec)
{
	size_t hd = c->m->head_dim;

	if (c->win && (j < c->sinks || j + c->window > p)) {
		const uint16_t *w;

		if (j >= c->pos0)
			return (role ? c->v : c->k) + ((j - c->pos0) * c->m->kv_heads + kh) * hd;
		w = win_slot(c, j, role, kh);
		for (size_t d = 0; d < hd; d++)
			dec[d] = gguf_bf16_to_f32(w[d]);
		return dec;
	}
	kvfmt_decode_rotated(c->fmt, slot_addr(c, j, role, kh), (uint32_t)hd, dec);
	return dec;
}

static unsigned char *slot_addr(const struct lfull_ctx *c, uint64_t pos, uint32_t role, uint32_t kh)
{
	unsigned char *page = kvpool_page(c->kv, c->seq->table[pos / MDESC_PAGE_TOKENS]);

	return page + kvfmt_page_offset(c->m, c->fmt, c->full_index, role, kh,
	                                (uint32_t)(pos % MDESC_PAGE_TOKENS));
}

/* The window's copy of a vector: rotated as the format stores it, rounded
 * to bf16 (kept as floats in place). */
static void win_round(const struct lfull_ctx *c, float *x, size_t hd)
{
	kvfmt_rotate(c->fmt, x, (uint32_t)hd);
	for (size_t d = 0; d < hd; d++)
		x[d] = gguf_bf16_to_f32(gguf_f32_to_bf16(x[d]));
}

/* Items = tokens: q/k norms, RoPE, then the token's K and V into its page. */
static void prep_fn(void *ctx, size_t begin, size_t end)
{
	const struct lfull_ctx *c = ctx;
	const struct mdesc *m = c->m;
	size_t hd = m->head_dim;

	for (size_t t = begin; t < end; t++) {
		int64_t pos = (int64_t)(c->pos0 + t);
		float *qg = c->qg + t * m->q_heads * c->qs;
		float *k = c->k + t * m->kv_heads * hd;
		float *v = c->v + t * m->kv_heads * hd;

		for (uint32_t h = 0; h < m->q_heads; h++) {
			float *q = qg + (size_t)h * c->qs;

			cop_rmsnorm(q, c->q_norm, q, hd, m->rms_eps);
			/* Arguments checked by lfull_forward: cannot fail. */
			(void)cop_rope_neox(q, 1, hd, m->rope_dims, pos, m->rope_theta);
			/* in the basis the format stores keys in (kvfmt.h): rotated
			 * once here, not every key at every read */
			kvfmt_rotate(c->fmt, q, (uint32_t)hd);
		}
		cop_rmsnorm_rows(k, c->k_norm, k, m->kv_heads, hd, m->rms_eps);
		(void)cop_rope_neox(k, m->kv_heads, hd, m->rope_dims, pos, m->rope_theta);
		for (uint32_t kh = 0; kh < m->kv_heads; kh++) {
			kvfmt_encode(c->fmt, k + kh * hd, (uint32_t)hd,
			             slot_addr(c, (uint64_t)pos, 0, kh));
			kvfmt_encode(c->fmt, v + kh * hd, (uint32_t)hd,
			             slot_addr(c, (uint64_t)pos, 1, kh));
			if (c->win) {
				win_round(c, k + kh * hd, hd);
				win_round(c, v + kh * hd, hd);
			}
		}
	}
}

/* Items = q heads of token c->t: attention over the stored positions. */
static void attn_fn(void *ctx, size_t begin, size_t end)
{
	const struct lfull_ctx *c = ctx;
	const struct mdesc *m = c->m;
	size_t hd = m->head_dim;
	uint32_t group = m->q_heads / m->kv_heads;
	uint64_t n = c->pos0 + c->t + 1; /* positions 0 .. pos */

	for (size_t h = begin; h < end; h++) {
		const float *q = c->qg + ((size_t)c->t * m->q_heads + h) * c->qs;
		const float *gate = m->attn_ungated ? NULL : q + hd;
		float *o = c->o + ((size_t)c->t * m->q_heads + h) * hd;
		float *s = c->head_scratch + h * c->head_stride;
		float *dec = s + (c->head_stride - hd);
		uint32_t kh = (uint32_t)(h / group);

		for (uint64_t j = 0; j < n; j++)
			s[j] = cop_dot_f32(q, kv_read(c, n - 1, j, 0, kh, dec), hd) * c->scale;
		(void)cop_softmax(s, (size_t)n);
		for (size_t d = 0; d < hd; d++)
			o[d] = 0.0f;
		for (uint64_t j = 0; j < n; j++) {
			const float *vj = kv_read(c, n - 1, j, 1, kh, dec);

			for (size_t d = 0; d < hd; d++)
				o[d] += s[j] * vj[d];
		}
		kvfmt_unrotate(c->fmt, o, (uint32_t)hd);
		if (gate)
			for (size_t d = 0; d < hd; d++)
				o[d] *= 1.0f / (1.0f + expf(-gate[d]));
	}
}

/* Once the segment's tokens have attended: the window takes its sinks and
 * its newest `window` positions (the rows prep left in k and v); a ring
 * slot is read only for positions past the sinks (kv_read). */
static void win_store(const struct lfull_ctx *c, uint32_t n_tok)
{
	size_t hd = c->m->head_dim;
	uint64_t end = c->pos0 + n_tok;

	for (uint32_t t = 0; t < n_tok; t++) {
		uint64_t p = c->pos0 + t;

		if (p >= c->sinks && p + c->window < end)
			continue; /* neither a sink nor among the newest */
		for (uint32_t kh = 0; kh < c->m->kv_heads; kh++)
			for (uint32_t role = 0; role < 2; role++) {
				const float *x =
				    (role ? c->v : c->k) + ((size_t)t * c->m->kv_heads + kh) * hd;
				uint16_t *w = win_slot(c, p, role, kh);

				for (size_t d = 0; d < hd; d++)
					w[d] = gguf_f32_to_bf16(x[d]);
			}
	}
}

int lfull_forward(const struct mdesc *m, uint32_t full_index, const struct lfull_weights *w,
                  enum mdesc_kv_format fmt, const struct kvpool *kv, const struct kvseq *seq,
                  uint64_t pos0, float *x, uint32_t n_tok, void *scratch, struct cpool *pool)
{
	struct lfull_seg one = {.seq = seq, .pos0 = pos0, .n_tok = n_tok};

	return lfull_forward_segs(m, full_index, w, fmt, kv, &one, 1, x, scratch, pool);
}

int lfull_forward_segs(const struct mdesc *m, uint32_t full_index, const struct lfull_weights *w,
                       enum mdesc_kv_format fmt, const struct kvpool *kv,
                       const struct lfull_seg *segs, uint32_t n_segs, float *x, void *scratch,
                       struct cpool *pool)
{
	size_t hd = m->head_dim, hidden = m->hidden;
	size_t qd = (size_t)m->q_heads * hd, kvd = (size_t)m->kv_heads * hd;
	uint64_t hb = mdesc_kv_head_bytes(fmt, m->head_dim);
	uint64_t longest = 0;
	size_t n_tok = 0, row = 0;
	struct lfull_ctx c;
	float *f = scratch, *qg, *k, *v, *o;

	if (full_index >= m->full_layers || m->kv_heads == 0 || m->q_heads % m->kv_heads != 0 ||
	    hb == 0 || kv->page_bytes < kvfmt_page_kv_bytes(m, fmt))
		return IG_E_INVAL;
	if (m->rope_dims == 0 || m->rope_dims % 2 != 0 || m->rope_dims > m->head_dim ||
	    !(m->rope_theta > 0.0f))
		return IG_E_INVAL;
	for (uint32_t i = 0; i < n_segs; i++) {
		uint64_t end = segs[i].pos0 + segs[i].n_tok;

		if (segs[i].n_tok == 0)
			continue;
		if ((end - 1) / MDESC_PAGE_TOKENS >= segs[i].seq->n_pages)
			return IG_E_INVAL;
		n_tok += segs[i].n_tok;
		longest = end > longest ? end : longest;
	}
	if (n_tok == 0)
		return 0;

	memset(&c, 0, sizeof(c));
	c.m = m;
	c.full_index = full_index;
	c.fmt = fmt;
	c.kv = kv;
	c.scale = (float)(1.0 / sqrt((double)hd));
	c.qs = m->attn_ungated ? hd : 2 * hd;

	float *attn_norm = f;
	float *q_norm = attn_norm + hidden;
	float *k_norm = q_norm + hd;
	float *xn = k_norm + hd;
	qg = xn + n_tok * hidden;
	k = qg + n_tok * 2 * qd; /* room for the gate whether or not there is one */
	v = k + n_tok * kvd;
	o = v + n_tok * kvd;
	c.head_scratch = o + n_tok * qd;
	c.head_stride = (size_t)longest + hd;
	c.q_norm = q_norm;
	c.k_norm = k_norm;

	cop_row(w->attn_norm, hidden, 0, attn_norm);
	cop_row(w->attn_q_norm, hd, 0, q_norm);
	cop_row(w->attn_k_norm, hd, 0, k_norm);

	/* The projections see every row of the round at once; a row's result
	 * does not depend on its neighbours (cpu_ops.h). */
	cop_rmsnorm_rows(x, attn_norm, xn, n_tok, hidden, m->rms_eps);
	cop_matmul(pool, w->attn_q, xn, qg, hidden, m->q_heads * c.qs, n_tok);
	cop_matmul(pool, w->attn_k, xn, k, hidden, kvd, n_tok);
	cop_matmul(pool, w->attn_v, xn, v, hidden, kvd, n_tok);

	/* Attention sequence by sequence: each over its own pages. */
	for (uint32_t i = 0; i < n_segs; i++) {
		if (segs[i].n_tok == 0)
			continue;
		c.seq = segs[i].seq;
		c.pos0 = segs[i].pos0;
		c.qg = qg + row * m->q_heads * c.qs;
		c.k = k + row * kvd;
		c.v = v + row * kvd;
		c.o = o + row * qd;
		c.win = mdesc_kv_compact(fmt) && segs[i].window ? segs[i].win : NULL;
		c.sinks = segs[i].sinks;
		c.window = segs[i].window;
		/* Every token's K and V stored before any token attends. */
		cpool_run_sized(pool, segs[i].n_tok,
		                (size_t)(m->q_heads + 2u * m->kv_heads) * hd * 4u, prep_fn, &c);
		for (uint32_t t = 0; t < segs[i].n_tok; t++) {
			c.t = t;
			cpool_run_sized(pool, m->q_heads, (size_t)(c.pos0 + t + 1) * hd * 2u,
			                attn_fn, &c);
		}
		if (c.win)
			win_store(&c, segs[i].n_tok);
		row += segs[i].n_tok;
	}

	cop_matmul(pool, w->attn_output, o, xn, qd, hidden, n_tok);
	cop_add(x, xn, x, n_tok * hidden);
	return 0;
}
