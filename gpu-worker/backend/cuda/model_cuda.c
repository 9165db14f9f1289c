/*
 * model_cuda.c - the cuda backend's compute: a bound model's weights on the
 * device, its sequences' states in the plan's lane_state line, and a round
 * as the neutral layer walk (decoder.h) over kernels/'s launchers, on the
 * backend's compute stream.
 *
 * What runs. The dense architectures (ours, qwen3, qwen35: full attention
 * and the gated delta rule, dense SwiGLU), every tensor type kern_matvec
 * reads, the KV formats bf16, fp8 and compact (with its residual window).
 * A mixture of experts is refused by name at bind (its routing and expert
 * cache on the device are a later issue); the cpu backend runs it.
 *
 * Memory. Weights are placed through the caller's placer (the plan's
 * weights line: dectab.h); the cuda backend has no path that reads a
 * tensor from host memory, so a bind without a placer is refused. A round's
 * buffers are carved from the workspace line per pass (mc__carve): the
 * residual rows, the layer's buffers (the largest of the three layer kinds
 * at this many tokens), and the round's tables (each step's segment, each
 * row's segment, the tokens, the head's rows, the page tables), which are
 * written into pinned host memory taken at bind and copied up once per
 * pass. Nothing is allocated while serving.
 *
 * Order. Every launch of a pass goes on the compute stream in the walk's
 * order; the pass ends with the copy of its logits to the caller (or a
 * synchronisation when it has none), so when round returns the device has
 * finished every write to pages and states: the transfer stream's gathers
 * and scatters, which the engine orders between rounds, never race a
 * kernel. Kernel failures are taken at that synchronisation and reported
 * with the first launch that was refused, if any.
 *
 * Graphs. A decode pass (every step one token) is recorded once as a CUDA
 * graph (stream capture) and replayed in later passes of the same shape:
 * its launches' arguments depend only on the pass's token, step and
 * logit-row counts, the KV format and pool and the bound context (every
 * per-step figure, positions and page tables, travels in the round's
 * tables, which the graph copies up from the pinned staging each time),
 * so a replay runs what a fresh walk would enqueue, and the same bits. A
 * few shapes are kept (MC_GRAPHS, the least recently used replaced). A
 * prefill pass, a traced one and every pass with be.launch_each set launch
 * each kernel on its own. A capture the runtime refuses turns graphs off
 * for the model and the pass runs launch by launch instead.
 *
 * Fast products (be.fast_products, benchmarks only). A pass of
 * MC_FAST_MIN_TOKENS or more tokens may run its matrix products through
 * cuBLAS on TF32 tensor cores instead of kern_matvec: each weight matrix
 * widened to fp32 (kern_embed over every row) into a buffer of its own,
 * then one cublasGemmEx. Its bits depend on the batch (cuBLAS picks its
 * kernel and split by shape), so it is outside the exactness contract; it
 * is the fastest variant we build without the contract, and
 * ignis-roundbench measures our prefill against it. Its buffer and handle
 * are taken at first use, outside the plan: the worker never sets it.
 *
 * Exactness. Each kernel computes a row's outputs in an order fixed by the
 * shapes (kernels/kernels.h): a token's bits do not depend on the pass it
 * is in or its neighbours, so passes cut by bind.h give the same bits as
 * one pass, as on the cpu backend.
 */
#include <inttypes.h>
#include <math.h>

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "gpu-worker/backend/bind.h"
#include "gpu-worker/backend/dectab.h"
#include "gpu-worker/backend/decoder.h"
#include "kernels/kernels.h"
#include "model/mfile.h"

/* Buffers of a pass start on 256-byte boundaries (cudaMalloc's alignment:
 * every kernel's vector loads stay aligned). */
#define MC_ALIGN 256u

/* A pass of at least this many tokens takes the fast products when asked. */
#define MC_FAST_MIN_TOKENS 16u

/* Decode shapes whose graphs are kept (lane counts in practice). */
#define MC_GRAPHS 8u

/* A recorded decode pass, replayed while the pass's shape is the same. */
struct mc_graph {
	uint32_t n_tok, n_segs, n_head, fmt;
	const void *pool;
	uint64_t page_bytes, context;
	cudaGraphExec_t x; /* NULL: an empty slot */
	uint64_t last;     /* the pass it last ran in (the least recent goes first) */
};

struct mc_model {
	const struct mdesc *m;
	struct dectab t;
	bool t_bound;
	struct bind bd;
	uint32_t sinks, window; /* the compact formats' residual window; 0: none */
	cudaStream_t s;
	unsigned char *h_tables; /* pinned: a pass's tables before their copy up */
	uint64_t tables_bytes;
	struct mc_graph graphs[MC_GRAPHS];
	uint64_t passes;
	bool graphs_off; /* a capture was refused: every pass launch by launch */
	/* the fast products' (be.fast_products): taken at first use */
	cublasHandle_t cb;
	float *d_wide; /* a weight matrix widened to fp32 */
	uint64_t wide_floats;
	uint32_t *d_iota; /* 0, 1, 2, ...: every row, for kern_embed */
	uint32_t iota_n;
};

static uint64_t mc__al(uint64_t n)
{
	return (n + MC_ALIGN - 1) / MC_ALIGN * MC_ALIGN;
}

/* Page-table entries a step over sequences of `context` tokens needs at
 * most. */
static uint64_t mc__pages(uint64_t context)
{
	return (context + MDESC_PAGE_TOKENS - 1) / MDESC_PAGE_TOKENS;
}

/* The round's tables for n_tok tokens (n_tok steps at most). */
static uint64_t mc__tables_bytes(uint32_t n_tok, uint64_t context)
{
	return mc__al((uint64_t)n_tok * sizeof(struct kern_seg)) +
	       3 * mc__al((uint64_t)n_tok * 4u) + mc__al((uint64_t)n_tok * mc__pages(context) * 4u);
}

/* A layer's buffers, the largest kind of the model's at n_tok tokens. */
static uint64_t mc__layer_bytes(const struct mdesc *m, uint32_t n_tok, uint64_t context)
{
	uint64_t n = n_tok, hd = m->head_dim, qs = m->attn_ungated ? hd : 2 * hd;
	uint64_t qd = (uint64_t)m->q_heads * hd, kvd = (uint64_t)m->kv_heads * hd;
	uint64_t full = 0, lin = 0, ffn;

	if (m->full_layers)
		full = mc__al(n * m->q_heads * qs * 4u) + 2 * mc__al(n * kvd * 4u) +
		       mc__al(n * qd * 4u) +
		       mc__al(kern_attn_scratch_bytes(m->head_dim, m->q_heads, n_tok, context));
	if (m->layers > m->full_layers) {
		uint64_t lvdv = (uint64_t)m->lin_v_heads * m->lin_dv;
		uint64_t qkv = 2ull * m->lin_k_heads * m->lin_dk + lvdv;

		lin = mc__al(n * qkv * 4u) + 2 * mc__al(n * lvdv * 4u) +
		      mc__al(n * 2u * m->lin_v_heads * 4u);
	}
	ffn = 2 * mc__al(n * m->ffn_inter * 4u);
	return full > lin ? (full > ffn ? full : ffn) : (lin > ffn ? lin : ffn);
}

/* The workspace a pass of n_tok tokens needs: x, xn, y, the layer's
 * buffers, the tables (bind_scratch_fn). */
static uint64_t mc__scratch(const struct mdesc *m, uint32_t n_tok, uint64_t context)
{
	return 3 * mc__al((uint64_t)n_tok * m->hidden * 4u) + mc__layer_bytes(m, n_tok, context) +
	       mc__tables_bytes(n_tok, context);
}

/* A pass's buffers in the workspace. */
struct mc_at {
	float *x, *xn, *y;
	unsigned char *layer;  /* the layer's buffers (carved by each operation) */
	unsigned char *tables; /* device: the round's tables */
	struct kern_seg *segs; /* in the tables */
	uint32_t *row_seg, *tokens, *head_rows, *pages;
	uint64_t tables_bytes;
};

static void mc__carve(const struct mc_model *mc, uint32_t n_tok, uint64_t context,
                      unsigned char *base, struct mc_at *a)
{
	uint64_t rows = mc__al((uint64_t)n_tok * mc->m->hidden * 4u);
	unsigned char *p = base;

	a->x = (float *)p;
	a->xn = (float *)(p += rows);
	a->y = (float *)(p += rows);
	a->layer = (p += rows);
	a->tables = (p += mc__layer_bytes(mc->m, n_tok, context));
	a->segs = (struct kern_seg *)a->tables;
	p = a->tables + mc__al((uint64_t)n_tok * sizeof(struct kern_seg));
	a->row_seg = (uint32_t *)p;
	a->tokens = (uint32_t *)(p += mc__al((uint64_t)n_tok * 4u));
	a->head_rows = (uint32_t *)(p += mc__al((uint64_t)n_tok * 4u));
	a->pages = (uint32_t *)(p + mc__al((uint64_t)n_tok * 4u));
	a->tables_bytes = mc__tables_bytes(n_tok, context);
}

/* ---- one pass: the layer operations (decoder.h) on the kernels ---------- */

struct mc_run {
	struct mc_model *mc;
	enum mdesc_kv_format fmt;
	const struct kvpool *kv;
	struct mc_at a;
	uint32_t n_tok, n_segs, n_head;
	uint64_t context; /* the bound context: the positions' bound */
	bool fast;        /* the fast products (be.fast_products, a long pass) */
	cudaStream_t s;
	/* the first launch refused, if any: the pass fails with it */
	int err;
	const char *what;
	uint32_t layer;
};

/* Keep the first refusal: what was launched, in which layer. */
static void mc__chk(struct mc_run *r, int e, const char *what, uint32_t layer)
{
	if (e && !r->err) {
		r->err = e;
		r->what = what;
		r->layer = layer;
	}
}

/* The fast products' buffers for an n_out x n_in matrix: grown as needed
 * (a benchmark's, so allocating here is allowed). A cudaError_t. */
static int mc__fast_room(struct mc_model *mc, uint64_t n_in, uint64_t n_out)
{
	cudaError_t e = cudaSuccess;

	if (!mc->cb) {
		if (cublasCreate(&mc->cb) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetMathMode(mc->cb, CUBLAS_TF32_TENSOR_OP_MATH) !=
		        CUBLAS_STATUS_SUCCESS) {
			mc->cb = NULL;
			return (int)cudaErrorNotSupported;
		}
	}
	if (cublasSetStream(mc->cb, mc->s) != CUBLAS_STATUS_SUCCESS)
		return (int)cudaErrorNotSupported;
	if (n_in * n_out > mc->wide_floats) {
		(void)cudaStreamSynchronize(mc->s); /* the old buffer may be read still */
		(void)cudaFree(mc->d_wide);
		mc->d_wide = NULL;
		mc->wide_floats = 0;
		e = cudaMalloc((void **)&mc->d_wide, (size_t)(n_in * n_out * sizeof(float)));
		if (e != cudaSuccess)
			return (int)e;
		mc->wide_floats = n_in * n_out;
	}
	if (n_out > mc->iota_n) {
		uint32_t *h = malloc((size_t)n_out * sizeof(uint32_t));

		if (!h)
			return (int)cudaErrorMemoryAllocation;
		for (uint32_t i = 0; i < n_out; i++)
			h[i] = i;
		(void)cudaStreamSynchronize(mc->s);
		(void)cudaFree(mc->d_iota);
		mc->d_iota = NULL;
		mc->iota_n = 0;
		e = cudaMalloc((void **)&mc->d_iota, (size_t)n_out * sizeof(uint32_t));
		if (e == cudaSuccess)
			e = cudaMemcpy(mc->d_iota, h, (size_t)n_out * sizeof(uint32_t),
			               cudaMemcpyHostToDevice);
		free(h);
		if (e != cudaSuccess)
			return (int)e;
		mc->iota_n = (uint32_t)n_out;
	}
	return 0;
}

/* y = W x for the pass's rows through cuBLAS (the header's fast products):
 * W widened to fp32 rows [n_out][n_in], then, in cuBLAS's column-major
 * terms, Y (n_out x n_tok) = W^T (n_out x n_in) X (n_in x n_tok). */
static int mc__mv_fast(struct mc_run *r, struct be_weight w, const float *x, float *y,
                       uint64_t n_in, uint64_t n_out)
{
	struct mc_model *mc = r->mc;
	const float one = 1.0f, zero = 0.0f;
	int e = mc__fast_room(mc, n_in, n_out);

	if (!e)
		e = kern_embed(w.p, w.type, (int)n_in, mc->d_iota, (int)n_out, mc->d_wide, r->s);
	if (!e &&
	    cublasGemmEx(mc->cb, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)r->n_tok, (int)n_in,
	                 &one, mc->d_wide, CUDA_R_32F, (int)n_in, x, CUDA_R_32F, (int)n_in, &zero,
	                 y, CUDA_R_32F, (int)n_out, CUBLAS_COMPUTE_32F_FAST_TF32,
	                 CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
		e = (int)cudaErrorLaunchFailure;
	return e;
}

static int mc__mv(struct mc_run *r, struct be_weight w, const float *x, float *y, uint64_t n_in,
                  uint64_t n_out, const char *what, uint32_t layer)
{
	int e = r->fast
	            ? mc__mv_fast(r, w, x, y, n_in, n_out)
	            : kern_matvec(w.p, w.type, x, y, (int)n_in, (int)n_out, (int)r->n_tok, r->s);

	mc__chk(r, e, what, layer);
	return e;
}

static struct kern_vec mc__vec(struct be_weight w)
{
	return (struct kern_vec){w.p, w.type};
}

static void mc__embed(void *ctx, const struct be_step *steps, uint32_t n_steps)
{
	struct mc_run *r = ctx;
	const struct dectab *t = &r->mc->t;

	(void)steps;
	(void)n_steps;
	mc__chk(r,
	        kern_embed(t->embd.p, t->embd.type, (int)r->mc->m->hidden, r->a.tokens,
	                   (int)r->n_tok, r->a.x, r->s),
	        "the embedding", 0);
}

/* x += y over the pass's rows. */
static void mc__residual(struct mc_run *r, uint32_t layer)
{
	mc__chk(r, kern_add(r->a.x, r->a.y, (uint64_t)r->n_tok * r->mc->m->hidden, r->s),
	        "the residual add", layer);
}

static int mc__mixer_full(void *ctx, uint32_t layer, uint32_t index, const struct be_step *steps,
                          uint32_t n_steps)
{
	struct mc_run *r = ctx;
	const struct mdesc *m = r->mc->m;
	const struct dectab_full *w = &r->mc->t.layers[layer].fw;
	uint64_t n = r->n_tok, hd = m->head_dim, qs = m->attn_ungated ? hd : 2 * hd;
	uint64_t qd = (uint64_t)m->q_heads * hd, kvd = (uint64_t)m->kv_heads * hd;
	bool win = mdesc_kv_compact(r->fmt) && r->mc->window;
	unsigned char *p = r->a.layer;
	struct kern_attn a;

	(void)steps;
	(void)n_steps;
	memset(&a, 0, sizeof(a));
	a.d_qg = (float *)p;
	a.d_k = (float *)(p += mc__al(n * m->q_heads * qs * 4u));
	a.d_v = (float *)(p += mc__al(n * kvd * 4u));
	a.d_o = (float *)(p += mc__al(n * kvd * 4u));
	a.d_scratch = p + mc__al(n * qd * 4u);
	a.head_dim = m->head_dim;
	a.q_heads = m->q_heads;
	a.kv_heads = m->kv_heads;
	a.rope_dims = m->rope_dims;
	a.gated = !m->attn_ungated;
	a.rope_theta = m->rope_theta;
	a.eps = m->rms_eps;
	a.scale = (float)(1.0 / sqrt((double)hd));
	a.fmt = (uint32_t)r->fmt;
	a.full_index = index;
	a.head_bytes = mdesc_kv_head_bytes(r->fmt, m->head_dim);
	a.page_bytes = r->kv->page_bytes;
	a.d_pool = r->kv->base;
	a.q_norm = mc__vec(w->attn_q_norm);
	a.k_norm = mc__vec(w->attn_k_norm);
	if (win) {
		a.sinks = r->mc->sinks;
		a.window = r->mc->window;
		a.win_offset = mdesc_kv_window_offset(m);
	}
	a.d_segs = r->a.segs;
	a.n_segs = r->n_segs;
	a.d_row_seg = r->a.row_seg;
	a.n_tok = r->n_tok;
	/* the bound, not this pass's longest: the same in every pass of a
	 * shape, as a replayed graph has it */
	a.max_pos = r->context;

	mc__chk(r,
	        kern_rmsnorm(r->a.x, mc__vec(w->attn_norm), r->a.xn, (int)n, (int)m->hidden,
	                     m->rms_eps, NULL, r->s),
	        "attn_norm", layer);
	if (mc__mv(r, w->attn_q, r->a.xn, a.d_qg, m->hidden, m->q_heads * qs, "attn_q", layer) ||
	    mc__mv(r, w->attn_k, r->a.xn, a.d_k, m->hidden, kvd, "attn_k", layer) ||
	    mc__mv(r, w->attn_v, r->a.xn, a.d_v, m->hidden, kvd, "attn_v", layer))
		return IG_E_OK; /* r->err says which */
	mc__chk(r, kern_attn_prep(&a, r->s), "the attention's prep", layer);
	mc__chk(r, kern_attn(&a, r->s), "the attention", layer);
	if (win)
		mc__chk(r, kern_attn_window_store(&a, r->s), "the window's store", layer);
	if (!mc__mv(r, w->attn_output, a.d_o, r->a.y, qd, m->hidden, "attn_output", layer))
		mc__residual(r, layer);
	return IG_E_OK;
}

static int mc__mixer_linear(void *ctx, uint32_t layer, const struct be_step *steps,
                            uint32_t n_steps, const struct linstate *st)
{
	struct mc_run *r = ctx;
	const struct mdesc *m = r->mc->m;
	const struct dectab_layer *tl = &r->mc->t.layers[layer];
	const struct dectab_linear *w = &tl->lw;
	uint64_t n = r->n_tok, lv = m->lin_v_heads, lvdv = lv * m->lin_dv;
	enum mdesc_lin_ba ba = mdesc_lin_ba(m);
	struct mdesc_lin_state ls;
	unsigned char *p = r->a.layer;
	struct kern_lin l;
	float *d_ba;

	(void)steps;
	(void)n_steps;
	(void)st; /* each segment's state is found from its slot: kern_seg.d_state */
	mdesc_lin_state(m, &ls);
	memset(&l, 0, sizeof(l));
	l.lk = m->lin_k_heads;
	l.lv = m->lin_v_heads;
	l.dk = m->lin_dk;
	l.dv = m->lin_dv;
	l.conv_kernel = m->conv_kernel;
	l.qkv = 2u * m->lin_k_heads * m->lin_dk + (uint32_t)lvdv;
	l.grouped = ba == MDESC_BA_GROUPED;
	l.tiled = mdesc_lin_tiled(m);
	l.a_neg = mdesc_lin_a_neg(m);
	l.eps = m->rms_eps;
	l.conv = mc__vec(w->conv);
	l.a_log = mc__vec(w->a_log);
	l.dt_bias = mc__vec(w->dt_bias);
	l.norm = mc__vec(w->norm);
	l.lin_index = tl->index;
	l.layer_floats = ls.layer_floats;
	l.s_floats = ls.s_floats;
	l.d_segs = r->a.segs;
	l.n_segs = r->n_segs;
	l.n_tok = r->n_tok;
	l.d_qkv = (float *)p;
	l.d_z = (float *)(p += mc__al(n * l.qkv * 4u));
	l.d_o = (float *)(p += mc__al(n * lvdv * 4u));
	d_ba = (float *)(p + mc__al(n * lvdv * 4u));

	mc__chk(r,
	        kern_rmsnorm(r->a.x, mc__vec(w->attn_norm), r->a.xn, (int)n, (int)m->hidden,
	                     m->rms_eps, NULL, r->s),
	        "attn_norm", layer);
	if (mc__mv(r, w->qkv, r->a.xn, l.d_qkv, m->hidden, l.qkv, "attn_qkv", layer) ||
	    mc__mv(r, w->z, r->a.xn, l.d_z, m->hidden, lvdv, "attn_gate", layer))
		return IG_E_OK;
	if (ba == MDESC_BA_SPLIT) {
		/* b rows [n][lv], then a rows [n][lv] */
		if (mc__mv(r, w->ba, r->a.xn, d_ba, m->hidden, lv, "ssm_beta", layer) ||
		    mc__mv(r, w->alpha, r->a.xn, d_ba + n * lv, m->hidden, lv, "ssm_alpha", layer))
			return IG_E_OK;
		l.d_b = d_ba;
		l.d_a = d_ba + n * lv;
		l.ba_stride = (uint32_t)lv;
	} else {
		/* FUSED: a row's b then its a; GROUPED: a key head's r b then its
		 * r a, so a_h sits r after b_h */
		if (mc__mv(r, w->ba, r->a.xn, d_ba, m->hidden, 2 * lv, "ssm_ba", layer))
			return IG_E_OK;
		l.d_b = d_ba;
		l.d_a = d_ba + (ba == MDESC_BA_GROUPED ? lv / m->lin_k_heads : lv);
		l.ba_stride = (uint32_t)(2 * lv);
	}
	mc__chk(r, kern_lin_conv(&l, r->s), "the convolution", layer);
	mc__chk(r, kern_lin_recur(&l, r->s), "the delta rule", layer);
	if (!mc__mv(r, w->out, l.d_o, r->a.y, lvdv, m->hidden, "ssm_out", layer))
		mc__residual(r, layer);
	return IG_E_OK;
}

static void mc__ffn_dense(void *ctx, uint32_t layer, uint32_t n_tok)
{
	struct mc_run *r = ctx;
	const struct mdesc *m = r->mc->m;
	const struct dectab_ffn *w = &r->mc->t.layers[layer].ffn;
	uint64_t n = n_tok, inter = m->ffn_inter;
	float *g = (float *)r->a.layer, *u = (float *)(r->a.layer + mc__al(n * inter * 4u));

	mc__chk(r,
	        kern_rmsnorm(r->a.x, mc__vec(w->norm), r->a.xn, (int)n, (int)m->hidden, m->rms_eps,
	                     NULL, r->s),
	        "ffn_norm", layer);
	if (mc__mv(r, w->gate, r->a.xn, g, m->hidden, inter, "ffn_gate", layer) ||
	    mc__mv(r, w->up, r->a.xn, u, m->hidden, inter, "ffn_up", layer))
		return;
	mc__chk(r, kern_swiglu(g, u, g, n * inter, r->s), "the SwiGLU", layer);
	if (!mc__mv(r, w->down, g, r->a.y, inter, m->hidden, "ffn_down", layer))
		mc__residual(r, layer);
}

/* The final norm over the head's rows (the last of each step that wants
 * logits, gathered by their row numbers), then the output matrix into the
 * device rows of logits the pass carved (`logits`). */
static void mc__head(void *ctx, const struct be_step *steps, uint32_t n_steps, float *logits)
{
	struct mc_run *r = ctx;
	const struct mdesc *m = r->mc->m;
	const struct dectab *t = &r->mc->t;
	int e;

	(void)steps;
	(void)n_steps;
	if (!r->n_head)
		return;
	mc__chk(r,
	        kern_rmsnorm(r->a.x, mc__vec(t->out_norm), r->a.xn, (int)r->n_head, (int)m->hidden,
	                     m->rms_eps, r->a.head_rows, r->s),
	        "output_norm", m->layers);
	e = kern_matvec(t->output.p, t->output.type, r->a.xn, logits, (int)m->hidden, (int)m->vocab,
	                (int)r->n_head, r->s);
	mc__chk(r, e, "output", m->layers);
}

/* The pass's residual rows into host `out`, for a trace (waits for them). */
static void mc__rows(void *ctx, float *out)
{
	struct mc_run *r = ctx;
	cudaError_t e = cudaMemcpyAsync(out, r->a.x, (size_t)r->n_tok * r->mc->m->hidden * 4u,
	                                cudaMemcpyDeviceToHost, r->s);

	if (e == cudaSuccess)
		e = cudaStreamSynchronize(r->s);
	mc__chk(r, (int)e, "the trace's copy of the rows", 0);
}

/* Dense models only (bind refuses the rest): never called. */
static struct dec_route mc__route(void *ctx, uint32_t layer, uint32_t n_tok, bool predict)
{
	(void)ctx;
	(void)layer;
	(void)n_tok;
	(void)predict;
	return (struct dec_route){0};
}

static void mc__expert(void *ctx, uint32_t layer, uint32_t t, const struct be_weight w[3],
                       float weight)
{
	(void)ctx;
	(void)layer;
	(void)t;
	(void)w;
	(void)weight;
}

static void mc__shared(void *ctx, uint32_t layer, uint32_t t)
{
	(void)ctx;
	(void)layer;
	(void)t;
}

static void mc__xp_get(void *ctx, uint32_t layer, uint32_t e, struct be_weight w[3])
{
	(void)ctx;
	(void)layer;
	(void)e;
	memset(w, 0, 3 * sizeof(*w));
}

/*
 * The pass's tables in the pinned staging, laid out as on the device (the
 * device addresses they hold point into the device copy); mc__launch copies
 * them up. A step's page table is as long as its positions need:
 * ceil((pos + n_tok) / 64) entries of its reservation.
 */
static void mc__tables(struct mc_run *r, const struct be_step *steps, uint32_t n_steps)
{
	const struct mc_model *mc = r->mc;
	unsigned char *h = mc->h_tables;
	struct kern_seg *segs = (struct kern_seg *)h;
	uint32_t *row_seg = (uint32_t *)(h + ((unsigned char *)r->a.row_seg - r->a.tables));
	uint32_t *tokens = (uint32_t *)(h + ((unsigned char *)r->a.tokens - r->a.tables));
	uint32_t *head_rows = (uint32_t *)(h + ((unsigned char *)r->a.head_rows - r->a.tables));
	uint32_t *pages = (uint32_t *)(h + ((unsigned char *)r->a.pages - r->a.tables));
	uint64_t npg = 0;
	uint32_t row = 0;

	r->n_head = 0;
	for (uint32_t i = 0; i < n_steps; i++) {
		const struct be_step *st = &steps[i];
		uint64_t end = st->s->pos + st->n_tok;
		uint32_t need = (uint32_t)((end + MDESC_PAGE_TOKENS - 1) / MDESC_PAGE_TOKENS);

		/* bind_check_steps let only reserved positions by */
		segs[i] = (struct kern_seg){
		    .pos0 = st->s->pos,
		    .n_tok = st->n_tok,
		    .row0 = row,
		    .d_table = r->a.pages + npg,
		    .n_pages = need,
		    .d_state = st->s->state,
		};
		memcpy(pages + npg, st->s->kv.table, (size_t)need * 4u);
		npg += need;
		for (uint32_t t = 0; t < st->n_tok; t++) {
			row_seg[row + t] = i;
			tokens[row + t] = st->tokens[t];
		}
		row += st->n_tok;
		for (uint32_t t = st->tail_logits; t > 0; t--) /* its last rows, in order */
			head_rows[r->n_head++] = row - t;
	}
	r->n_segs = n_steps;
}

/* The pass's work on its stream, launch by launch: the tables up, then
 * the walk (recorded instead when the stream is capturing). */
static int mc__launch(struct mc_run *r, const struct dec_ops *ops, const struct dec_experts *xp,
                      const struct be_step *steps, uint32_t n_steps, struct ig_errbuf *eb)
{
	const struct mc_model *mc = r->mc;
	cudaError_t e = cudaMemcpyAsync(r->a.tables, mc->h_tables, (size_t)r->a.tables_bytes,
	                                cudaMemcpyHostToDevice, r->s);

	if (e != cudaSuccess)
		return be_cuda_fail(eb, IG_E_IO, e, "the round's tables to the device");
	return dec_round(mc->m, ops, xp, steps, n_steps, r->context, mc->bd.logits, eb);
}

/* The kept graph of this pass's shape, or NULL. */
static struct mc_graph *mc__graph_find(struct mc_model *mc, const struct mc_run *r)
{
	for (uint32_t i = 0; i < MC_GRAPHS; i++) {
		struct mc_graph *g = &mc->graphs[i];

		if (g->x && g->n_tok == r->n_tok && g->n_segs == r->n_segs &&
		    g->n_head == r->n_head && g->fmt == (uint32_t)r->fmt &&
		    g->pool == r->kv->base && g->page_bytes == r->kv->page_bytes &&
		    g->context == r->context)
			return g;
	}
	return NULL;
}

static void mc__graphs_drop(struct mc_model *mc)
{
	for (uint32_t i = 0; i < MC_GRAPHS; i++)
		if (mc->graphs[i].x)
			(void)cudaGraphExecDestroy(mc->graphs[i].x);
	memset(mc->graphs, 0, sizeof(mc->graphs));
}

/* A decode pass through its graph: replayed when its shape has one,
 * recorded and kept otherwise; launch by launch when the runtime refuses
 * the capture (graphs then stay off for the model). */
static int mc__graphed(struct mc_model *mc, struct mc_run *r, const struct dec_ops *ops,
                       const struct dec_experts *xp, const struct be_step *steps, uint32_t n_steps,
                       struct ig_errbuf *eb)
{
	struct mc_graph *g = mc__graph_find(mc, r);
	cudaGraph_t graph = NULL;
	cudaGraphExec_t x = NULL;
	cudaError_t e;
	int rc;

	if (!g) {
		e = cudaStreamBeginCapture(mc->s, cudaStreamCaptureModeThreadLocal);
		if (e != cudaSuccess)
			goto refused;
		rc = mc__launch(r, ops, xp, steps, n_steps, eb);
		e = cudaStreamEndCapture(mc->s, &graph);
		if (rc || r->err) { /* refused by a check: nothing ran, nothing kept */
			if (graph)
				(void)cudaGraphDestroy(graph);
			(void)cudaGetLastError();
			return rc;
		}
		if (e != cudaSuccess || !graph)
			goto refused;
		e = cudaGraphInstantiate(&x, graph, 0);
		(void)cudaGraphDestroy(graph);
		if (e != cudaSuccess)
			goto refused;
		g = &mc->graphs[0];
		for (uint32_t i = 1; i < MC_GRAPHS; i++)
			if (!mc->graphs[i].x || (g->x && mc->graphs[i].last < g->last))
				g = &mc->graphs[i];
		if (g->x)
			(void)cudaGraphExecDestroy(g->x);
		*g = (struct mc_graph){.n_tok = r->n_tok,
		                       .n_segs = r->n_segs,
		                       .n_head = r->n_head,
		                       .fmt = (uint32_t)r->fmt,
		                       .pool = r->kv->base,
		                       .page_bytes = r->kv->page_bytes,
		                       .context = r->context,
		                       .x = x};
	}
	g->last = ++mc->passes;
	e = cudaGraphLaunch(g->x, mc->s);
	if (e != cudaSuccess)
		return be_cuda_fail(eb, IG_E_IO, e, "a decode pass's graph");
	return IG_E_OK;

refused:
	/* the stream may still be capturing after a failed launch: end it */
	{
		enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;

		if (cudaStreamIsCapturing(mc->s, &st) == cudaSuccess &&
		    st != cudaStreamCaptureStatusNone &&
		    cudaStreamEndCapture(mc->s, &graph) == cudaSuccess && graph)
			(void)cudaGraphDestroy(graph);
	}
	(void)cudaGetLastError();
	mc->graphs_off = true;
	mc__graphs_drop(mc);
	r->err = 0;
	return mc__launch(r, ops, xp, steps, n_steps, eb);
}

/* One pass through the walk; waits for the device before it returns. */
static int mc__pass(struct mc_model *mc, const struct be *b, const struct be_step *steps,
                    uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                    uint64_t context, struct ig_errbuf *eb)
{
	const struct be_trace *trace = b->trace;
	struct mc_run r = {.mc = mc, .fmt = fmt, .kv = kv, .context = context, .s = mc->s};
	bool decode = !trace && !b->launch_each && !mc->graphs_off;
	struct dec_experts xp = {NULL, mc__xp_get, NULL, NULL};
	struct dec_ops ops = {mc__embed,     mc__mixer_full, mc__mixer_linear,
	                      mc__ffn_dense, mc__route,      mc__expert,
	                      mc__shared,    mc__head,       &r,
	                      mc__rows,      trace};
	cudaError_t e;
	int rc;

	for (uint32_t i = 0; i < n_steps; i++) {
		r.n_tok += steps[i].n_tok;
		decode &= steps[i].n_tok == 1;
	}
	r.fast = b->fast_products && r.n_tok >= MC_FAST_MIN_TOKENS;
	decode &= !r.fast;
	mc__carve(mc, r.n_tok, context, mc->bd.scratch, &r.a);
	mc__tables(&r, steps, n_steps);
	rc = decode ? mc__graphed(mc, &r, &ops, &xp, steps, n_steps, eb)
	            : mc__launch(&r, &ops, &xp, steps, n_steps, eb);
	/* the staging is the next pass's, and the caller reads what the device
	 * wrote: wait for the stream whatever happened */
	e = cudaStreamSynchronize(mc->s);
	if (rc)
		return rc;
	if (r.err)
		return ig_errf(eb, IG_E_INVAL, "the cuda backend refused %s of layer %u: %s (%s)",
		               r.what, r.layer, cudaGetErrorName((cudaError_t)r.err),
		               cudaGetErrorString((cudaError_t)r.err));
	if (e != cudaSuccess)
		return be_cuda_fail(eb, IG_E_IO, e, "a round's kernels");
	return IG_E_OK;
}

/* ---- the table's entries ------------------------------------------------ */

int be_cuda_model_needs(struct be *b, const struct mfile *f, const struct be_bind_opts *o,
                        struct be_needs *n, struct ig_errbuf *eb)
{
	(void)b;
	(void)eb;
	bind_needs(&f->desc, o, mc__scratch, n);
	return IG_E_OK;
}

void be_cuda_model_release(struct be *b, struct be_model *m)
{
	struct mc_model *mc = m->impl;

	(void)b;
	if (!mc)
		return;
	if (mc->s)
		(void)cudaStreamSynchronize(mc->s);
	mc__graphs_drop(mc);
	if (mc->cb)
		(void)cublasDestroy(mc->cb);
	(void)cudaFree(mc->d_wide);
	(void)cudaFree(mc->d_iota);
	if (mc->h_tables)
		(void)cudaFreeHost(mc->h_tables);
	(void)cudaGetLastError();
	bind_release(&mc->bd);
	if (mc->t_bound)
		dectab_release(&mc->t);
	free(mc);
	memset(m, 0, sizeof(*m));
}

int be_cuda_model_bind(struct be *b, struct mfile *f, const struct be_placer *placer,
                       const struct be_bind_opts *o, struct be_model *m, struct ig_errbuf *eb)
{
	const struct mdesc *d = &f->desc;
	struct mc_model *mc;
	cudaError_t e;
	int rc;

	memset(m, 0, sizeof(*m));
	if (d->family != MDESC_DENSE)
		return ig_errf(eb, IG_E_CONFIG,
		               "the cuda backend runs the dense architectures (ours, qwen3, "
		               "qwen35); '%s' is a mixture of experts, which only the cpu backend "
		               "runs so far (--backend cpu)",
		               d->name ? d->name : "this model");
	if (!placer)
		return ig_errf(eb, IG_E_INVAL,
		               "the cuda backend reads weights from device memory only: bind the "
		               "model through a placer (the plan's weights line)");
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return ig_errf(eb, IG_E_NOMEM, "host memory for a bound model");
	m->impl = mc;
	mc->m = d;
	mc->s = be_cuda_compute(b);
	mc->sinks = o->kv_window ? o->kv_sinks : 0;
	mc->window = o->kv_window;
	rc = dectab_bind(&mc->t, f, placer, eb);
	mc->t_bound = rc == IG_E_OK;
	if (!rc)
		rc = bind_carve(&mc->bd, be_cuda_mem(b), "cuda", d, o, mc__scratch, eb);
	if (!rc) {
		mc->tables_bytes = mc__tables_bytes(mc->bd.pass_tokens, mc->bd.context);
		e = cudaHostAlloc((void **)&mc->h_tables, (size_t)mc->tables_bytes,
		                  cudaHostAllocDefault);
		if (e != cudaSuccess) {
			mc->h_tables = NULL;
			rc = be_cuda_fail(eb, IG_E_NOMEM, e,
			                  "pinned host memory for a round's tables");
		}
	}
	if (rc) {
		be_cuda_model_release(b, m);
		return rc;
	}
	m->m = d;
	m->state_bytes = mdesc_seq_state_bytes(d, mc->sinks, mc->window);
	m->scratch_bytes = mc__scratch(d, mc->bd.pass_tokens, mc->bd.context);
	m->pass_tokens = mc->bd.pass_tokens;
	m->logit_rows = mc->bd.logit_rows;
	m->states = mc->bd.n_states;
	m->placed_bytes = mc->t.placed_bytes;
	m->threads = 1;
	return IG_E_OK;
}

int be_cuda_seq_init(struct be *b, const struct be_model *m, struct be_seq *s, struct ig_errbuf *eb)
{
	struct mc_model *mc = m->impl;
	int rc = bind_seq_take(&mc->bd, s, eb);
	cudaError_t e;

	(void)b;
	if (rc)
		return rc;
	/* zeroed before anything else may write it (a move's scatter on the
	 * transfer stream): waited for here */
	e = cudaMemsetAsync(s->state, 0, (size_t)m->state_bytes, mc->s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(mc->s);
	if (e != cudaSuccess) {
		bind_seq_give(&mc->bd, s);
		return be_cuda_fail(eb, IG_E_IO, e, "zeroing a sequence's state");
	}
	return IG_E_OK;
}

void be_cuda_seq_release(struct be *b, const struct be_model *m, struct be_seq *s)
{
	struct mc_model *mc = m->impl;

	(void)b;
	bind_seq_give(&mc->bd, s);
}

void be_cuda_seq_image(struct be *b, const struct be_model *m, const struct be_seq *s,
                       const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
                       uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out)
{
	(void)b;
	bind_seq_image(m->m, m->state_bytes, s, kv, fmt, last_token, sampler_bytes, h, pages_out);
}

void be_cuda_expert_stats(struct be *b, const struct be_model *m, struct be_expert_stats *st)
{
	(void)b;
	(void)m;
	memset(st, 0, sizeof(*st));
}

uint64_t be_cuda_expert_counts(struct be *b, const struct be_model *m, uint64_t *out, uint64_t n)
{
	(void)b;
	(void)m;
	(void)out;
	(void)n;
	return 0;
}

/* A round in the passes of bind.h, each pass's logits copied out of the
 * device rows (as the cpu backend does). */
int be_cuda_round(struct be *b, const struct be_model *m, const struct be_step *steps,
                  uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                  uint64_t context, float *logits, struct ig_errbuf *eb)
{
	struct mc_model *mc = m->impl;
	size_t vocab = mc->m->vocab;
	uint64_t out = 0;
	uint32_t i = 0, off = 0;
	int rc;

	if (fmt != MDESC_KV_BF16 && fmt != MDESC_KV_FP8 && fmt != MDESC_KV_COMPACT)
		return ig_errf(eb, IG_E_CONFIG,
		               "the cuda backend serves the KV formats bf16, fp8 and compact, not "
		               "%s",
		               mdesc_kv_format_name(fmt) ? mdesc_kv_format_name(fmt) : "this one");
	rc = bind_check_round(&mc->bd, steps, n_steps, context, eb);
	while (!rc && i < n_steps) {
		uint32_t rows, n = bind_pass(&mc->bd, steps, n_steps, &i, &off, &rows);

		rc = mc__pass(mc, b, mc->bd.pass, n, fmt, kv, context, eb);
		if (!rc && rows) {
			cudaError_t e = cudaMemcpy(logits + out * vocab, mc->bd.logits,
			                           (size_t)rows * vocab * sizeof(float),
			                           cudaMemcpyDeviceToHost);

			if (e != cudaSuccess)
				return be_cuda_fail(eb, IG_E_IO, e, "a round's logits to the host");
			out += rows;
		}
	}
	return rc;
}
