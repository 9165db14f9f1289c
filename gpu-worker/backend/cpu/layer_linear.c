/*
 * layer_linear.c - the gated delta rule layer on the cpu backend (see
 * layer_linear.h for the math, the state layout and the summation orders).
 *
 * Structure of one call (every step over the whole chunk):
 *   rmsnorm per token -> three matrix products (cop_matmul_bf16, which never
 *   splits a sum) -> the conv, one pool item per channel, each item walking
 *   the chunk's tokens in order -> the recurrence, one pool item per value
 *   head, each walking the tokens in order (heads share nothing but the read
 *   only q/k of their key head) -> lin_out -> the residual add.
 * Each output element belongs to exactly one item and is computed the same
 * way whatever thread runs it and whatever chunk the token came in, which is
 * what makes the results independent of thread count and chunking.
 *
 * Built with -ffp-contract=off (gpu-worker/meson.build): the compiler may
 * vectorise the loops over j below, but every element keeps its own order of
 * rounded products and sums.
 */
#include "layer_linear.h"

#include <math.h>
#include <string.h>

#include "cpu_ops.h"
#include "common/err.h"

/* softplus(s) = s above this, as torch's softplus threshold: log1p(exp(s))
 * equals s in fp32 there, and exp would overflow further up. */
#define LLIN_SOFTPLUS_THRESHOLD 20.0f
/* Scratch regions are rounded up to 16 floats (64 bytes). */
#define LLIN_ALIGN_FLOATS 16u

struct llin_dims {
	size_t hidden, lk, lv, dk, dv, K, qkv, lvdv;
	enum mdesc_lin_ba ba; /* how b and a are stored */
	bool tiled, a_neg;    /* mdesc_lin_tiled, mdesc_lin_a_neg */
};

static int llin_dims_of(const struct mdesc *m, struct llin_dims *d)
{
	if (!m->hidden || !m->lin_k_heads || !m->lin_v_heads || !m->lin_dk || !m->lin_dv ||
	    !m->conv_kernel || m->lin_v_heads % m->lin_k_heads)
		return IG_E_INVAL;
	d->hidden = m->hidden;
	d->lk = m->lin_k_heads;
	d->lv = m->lin_v_heads;
	d->dk = m->lin_dk;
	d->dv = m->lin_dv;
	d->K = m->conv_kernel;
	d->lvdv = d->lv * d->dv;
	d->qkv = 2 * d->lk * d->dk + d->lvdv;
	d->ba = mdesc_lin_ba(m);
	d->tiled = mdesc_lin_tiled(m);
	d->a_neg = mdesc_lin_a_neg(m);
	return 0;
}

static size_t round_floats(size_t n)
{
	return (n + LLIN_ALIGN_FLOATS - 1) / LLIN_ALIGN_FLOATS * LLIN_ALIGN_FLOATS;
}

/*
 * The scratch, in floats, each region rounded up to 64 bytes:
 *   attn_norm widened [hidden] | lin_norm widened [dv]
 *   xn [n][hidden] (reused for lin_out's output) | qkv [n][qkv] (conv'd in
 *   place) | z [n][lv*dv] | ba [n][2*lv] | o [n][lv*dv]
 *   per value head: q and k normalised [dk] each, kv/delta [dv]
 */
struct llin_scratch {
	float *attn_norm, *norm, *xn, *qkv, *z, *ba, *o, *work;
	size_t work_per_head;
	/* token t's b values at b + t * ba_stride, its a values at a + ...
	 * (indexed as llin_head_token says): views into ba */
	float *b, *a;
	size_t ba_stride;
};

static size_t llin_scratch_layout(const struct llin_dims *d, size_t n, float *base,
                                  struct llin_scratch *s)
{
	size_t off = 0;

#define LLIN_REGION(field, floats)                                                                 \
	do {                                                                                       \
		if (s)                                                                             \
			s->field = base + off;                                                     \
		off += round_floats(floats);                                                       \
	} while (0)
	LLIN_REGION(attn_norm, d->hidden);
	LLIN_REGION(norm, d->dv);
	LLIN_REGION(xn, n * d->hidden);
	LLIN_REGION(qkv, n * d->qkv);
	LLIN_REGION(z, n * d->lvdv);
	LLIN_REGION(ba, n * 2 * d->lv);
	LLIN_REGION(o, n * d->lvdv);
	LLIN_REGION(work, d->lv * round_floats(2 * d->dk + d->dv));
#undef LLIN_REGION
	if (s)
		s->work_per_head = round_floats(2 * d->dk + d->dv);
	return off;
}

size_t llin_scratch_bytes(const struct mdesc *m, uint32_t n_tok)
{
	struct llin_dims d;

	if (llin_dims_of(m, &d))
		return 0;
	return llin_scratch_layout(&d, n_tok, NULL, NULL) * sizeof(float);
}

struct llin_job {
	const struct llin_dims *d;
	const struct llin_weights *w;
	struct linstate *st;
	struct llin_scratch *s;
	size_t n;
	float eps;
};

static float llin_silu(float y)
{
	return y / (1.0f + expf(-y));
}

/* Channels [begin, end): conv over the chunk's tokens in order, in place in
 * s->qkv, sliding each channel's window in the conv state. */
static void llin_conv_items(void *ctx, size_t begin, size_t end)
{
	const struct llin_job *j = ctx;
	const struct llin_dims *d = j->d;
	size_t K = d->K, keep = K - 1;

	for (size_t c = begin; c < end; c++) {
		const struct cop_w wc = cop_w_rows(j->w->conv, K, c); /* the channel's taps */
		float *win = j->st->conv + c * keep;

		for (size_t t = 0; t < j->n; t++) {
			float *u = j->s->qkv + t * d->qkv + c;
			float y = 0.0f;

			for (size_t i = 0; i < keep; i++)
				y += cop_at(wc, i) * win[i];
			y += cop_at(wc, keep) * *u;
			if (keep) {
				memmove(win, win + 1, (keep - 1) * sizeof(float));
				win[keep - 1] = *u;
			}
			*u = llin_silu(y);
		}
	}
}

/* dst[i] = (src[i] * r) * scale with r the inverse L2 norm (layer_linear.h):
 * eps is the model's rms epsilon, as Qwen3-Next's l2norm and llama.cpp's. */
static void llin_l2norm(const float *src, float *dst, size_t n, float scale, float eps)
{
	float r = 1.0f / sqrtf(cop_dot_f32(src, src, n) + eps);

	for (size_t i = 0; i < n; i++)
		dst[i] = (src[i] * r) * scale;
}

static float llin_softplus(float s)
{
	return s > LLIN_SOFTPLUS_THRESHOLD ? s : log1pf(expf(s));
}

/* One token of one value head: steps 4-6 of layer_linear.h. */
static void llin_head_token(const struct llin_job *j, size_t h, size_t t, float *work)
{
	const struct llin_dims *d = j->d;
	size_t dk = d->dk, dv = d->dv, r = d->lv / d->lk, kh = d->tiled ? h % d->lk : h / r;
	const float *row = j->s->qkv + t * d->qkv;
	const float *v = row + 2 * d->lk * dk + h * dv;
	float *q = work, *k = work + dk, *kv = work + 2 * dk;
	float *S = j->st->S + h * dk * dv;
	float *o = j->s->o + t * d->lvdv + h * dv;
	/* b_h and a_h where the layout keeps them (llin_forward_segs) */
	size_t at = d->ba == MDESC_BA_GROUPED ? h / r * 2 * r + h % r : h;
	float b = j->s->b[t * j->s->ba_stride + at], a = j->s->a[t * j->s->ba_stride + at];
	float beta = 1.0f / (1.0f + expf(-b));
	float sp = llin_softplus(a + cop_at(j->w->dt_bias, h));
	/* -(e * sp) and sp * (-e) are the same bits: one line for both storages */
	float alpha = d->a_neg ? expf(sp * cop_at(j->w->a_log, h))
	                       : expf(-(expf(cop_at(j->w->a_log, h)) * sp));

	llin_l2norm(row + kh * dk, q, dk, 1.0f / sqrtf((float)dk), j->eps);
	llin_l2norm(row + d->lk * dk + kh * dk, k, dk, 1.0f, j->eps);

	/* Decay, and kv[j] = sum_i S[i][j] * k[i] in increasing i. */
	for (size_t jj = 0; jj < dv; jj++)
		kv[jj] = 0.0f;
	for (size_t i = 0; i < dk; i++) {
		float *Si = S + i * dv;
		float ki = k[i];

		for (size_t jj = 0; jj < dv; jj++) {
			float s = Si[jj] * alpha;

			Si[jj] = s;
			kv[jj] += s * ki;
		}
	}
	/* delta overwrites kv. */
	for (size_t jj = 0; jj < dv; jj++)
		kv[jj] = (v[jj] - kv[jj]) * beta;
	/* The rank-one update, and o[j] = sum_i S[i][j] * q[i] in increasing i. */
	for (size_t jj = 0; jj < dv; jj++)
		o[jj] = 0.0f;
	for (size_t i = 0; i < dk; i++) {
		float *Si = S + i * dv;
		float ki = k[i], qi = q[i];

		for (size_t jj = 0; jj < dv; jj++) {
			float s = Si[jj] + ki * kv[jj];

			Si[jj] = s;
			o[jj] += s * qi;
		}
	}
	cop_rmsnorm(o, j->s->norm, o, dv, j->eps);
	cop_swiglu(j->s->z + t * d->lvdv + h * dv, o, o, dv);
}

static void llin_head_items(void *ctx, size_t begin, size_t end)
{
	const struct llin_job *j = ctx;

	for (size_t h = begin; h < end; h++) {
		float *work = j->s->work + h * j->s->work_per_head;

		for (size_t t = 0; t < j->n; t++)
			llin_head_token(j, h, t, work);
	}
}

int llin_forward(const struct mdesc *m, const struct llin_weights *w, struct linstate *st, float *x,
                 uint32_t n_tok, void *scratch, struct cpool *pool)
{
	struct llin_seg one = {*st, n_tok};

	return llin_forward_segs(m, w, &one, 1, x, scratch, pool);
}

int llin_forward_segs(const struct mdesc *m, const struct llin_weights *w,
                      const struct llin_seg *segs, uint32_t n_segs, float *x, void *scratch,
                      struct cpool *pool)
{
	struct llin_dims d;
	struct llin_scratch s, part;
	struct llin_job job;
	size_t n = 0, row = 0;

	if (llin_dims_of(m, &d))
		return IG_E_INVAL;
	for (uint32_t i = 0; i < n_segs; i++)
		n += segs[i].n_tok;
	if (!n)
		return 0;
	llin_scratch_layout(&d, n, scratch, &s);
	cop_row(w->attn_norm, d.hidden, 0, s.attn_norm);
	cop_row(w->norm, d.dv, 0, s.norm);

	/* The projections over every row of the round at once. */
	cop_rmsnorm_rows(x, s.attn_norm, s.xn, n, d.hidden, m->rms_eps);
	cop_matmul(pool, w->qkv, s.xn, s.qkv, d.hidden, d.qkv, n);
	cop_matmul(pool, w->z, s.xn, s.z, d.hidden, d.lvdv, n);
	if (d.ba == MDESC_BA_SPLIT) {
		/* b rows [n][lv], then a rows [n][lv] */
		cop_matmul(pool, w->ba, s.xn, s.ba, d.hidden, d.lv, n);
		cop_matmul(pool, w->alpha, s.xn, s.ba + n * d.lv, d.hidden, d.lv, n);
	} else {
		cop_matmul(pool, w->ba, s.xn, s.ba, d.hidden, 2 * d.lv, n);
	}

	/* The conv and the recurrence sequence by sequence, each on its own
	 * state and rows. */
	for (uint32_t i = 0; i < n_segs; i++) {
		struct linstate st = segs[i].st;

		if (!segs[i].n_tok)
			continue;
		part = s;
		part.qkv = s.qkv + row * d.qkv;
		part.z = s.z + row * d.lvdv;
		if (d.ba == MDESC_BA_SPLIT) {
			part.b = s.ba + row * d.lv;
			part.a = s.ba + (n + row) * d.lv;
			part.ba_stride = d.lv;
		} else {
			/* FUSED: every b then every a; GROUPED: a key head's r b then
			 * its r a, so a_h sits r after b_h */
			part.b = s.ba + row * 2 * d.lv;
			part.a = part.b + (d.ba == MDESC_BA_GROUPED ? d.lv / d.lk : d.lv);
			part.ba_stride = 2 * d.lv;
		}
		part.o = s.o + row * d.lvdv;
		job = (struct llin_job){
		    .d = &d, .w = w, .st = &st, .s = &part, .n = segs[i].n_tok, .eps = m->rms_eps};
		cpool_run_sized(pool, d.qkv, (size_t)segs[i].n_tok * d.K, llin_conv_items, &job);
		cpool_run_sized(pool, d.lv, (size_t)segs[i].n_tok * d.dk * d.dv * 4u,
		                llin_head_items, &job);
		row += segs[i].n_tok;
	}

	/* lin_out into xn (no longer needed), then the residual add. */
	cop_matmul(pool, w->out, s.o, s.xn, d.lvdv, d.hidden, n);
	cop_add(x, s.xn, x, n * d.hidden);
	return 0;
}
