/*
 * layer_linear.h - one linear-attention layer's token mixer on the cpu
 * backend: the gated delta rule of Qwen3-Next, for a chunk of consecutive
 * tokens of ONE sequence (a prefill chunk, or one decode token), updating
 * that sequence's fixed-size state in place.
 *
 * Per token t, with x the residual stream (fp32 [hidden]) and the tensor
 * names of docs/adr/0006 (blk.N.*, any cop_w type, GGUF [n_in, n_out]):
 *
 *   1. xn  = rmsnorm(x, attn_norm, eps)                    (cop_rmsnorm)
 *   2. qkv = lin_qkv . xn;  z = lin_z . xn;  ba = lin_ba . xn (cop_matmul)
 *      qkv = [q: lk*dk | k: lk*dk | v: lv*dv], ba = [b: lv | a: lv]; a
 *      llama.cpp layout (mdesc_lin_ba) stores b and a in two matrices
 *      (SPLIT) or per key head (GROUPED): b_h and a_h are the same values
 *   3. per channel c of qkv, the causal depthwise convolution over the last
 *      K inputs u (the conv state holds the previous K-1, zeros at the start):
 *        y = +0;  y += w[c*K + i] * u_c(t - (K-1) + i)  for i = 0 .. K-1
 *      then silu(y) = y / (1 + expf(-y));
 *   4. per key head: q, k L2-normalised, r = 1 / sqrtf(cop_dot_f32(x, x) + eps),
 *      q[i] = (q[i] * r) * (1 / sqrtf(dk)),  k[i] = k[i] * r;
 *   5. per value head h (key head h / (lv / lk); h mod lk when
 *      mdesc_lin_tiled), state S_h [dk][dv] fp32:
 *        beta = 1 / (1 + expf(-b_h));
 *        g = -(expf(a_log_h) * softplus(a_h + dt_bias_h)),  alpha = expf(g)
 *        (a file holding A = -exp(A_log) (mdesc_lin_a_neg): g = softplus(..) * A,
 *        the same bits when A is exactly -expf(a_log));
 *        (softplus(s) = s for s > 20, else log1pf(expf(s)));
 *        S = alpha * S;
 *        kv[j] = sum_i S[i][j] * k[i]            (i increasing, from +0)
 *        delta[j] = (v[j] - kv[j]) * beta;
 *        S[i][j] = S[i][j] + k[i] * delta[j];
 *        o[j] = sum_i S[i][j] * q[i]             (i increasing, from +0)
 *   6. o_h = rmsnorm(o_h, lin_norm, eps) * silu(z_h)   (lin_norm [dv], shared)
 *   7. x += lin_out . concat(o_h).
 *
 * Every step is fp32 with -ffp-contract=off; every sum has the fixed order
 * written above or the one of cpu_ops.h. Parallel work is cut only over
 * independent outputs (matmul outputs, conv channels, value heads), so the
 * result is bit-identical for every pool thread count. A token's arithmetic
 * does not depend on the chunk it arrives in: one chunk of n tokens, n single
 * tokens, or any split give the same bits in x and in the state, so a
 * sequence whose state was copied elsewhere resumes exactly.
 *
 * THE STATE of one sequence in one linear layer is model/linstate.h's
 * (struct linstate: S, then the convolution's inputs), the layout every
 * backend shares since it travels in sequence images.
 */
#ifndef IGNIS_GPU_WORKER_LAYER_LINEAR_H
#define IGNIS_GPU_WORKER_LAYER_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_ops.h"
#include "cpu_pool.h"
#include "common/model.h"
#include "model/linstate.h"

/* One linear layer's weights: cop_w, pointers into memory the caller keeps
 * mapped or loaded for as long as the struct is used. */
struct llin_weights {
	struct cop_w attn_norm; /* [hidden] */
	struct cop_w qkv;       /* [hidden -> 2*lk*dk + lv*dv] */
	struct cop_w z;         /* [hidden -> lv*dv] */
	struct cop_w ba;        /* [hidden -> 2*lv]: b then a (mdesc_lin_ba FUSED),
	                           per key head its b then its a (GROUPED); SPLIT:
	                           [hidden -> lv], b only */
	struct cop_w alpha;     /* SPLIT: [hidden -> lv], a */
	struct cop_w conv;      /* [K, qkv]: channel c, tap i at c*K + i */
	struct cop_w a_log;     /* [lv]: A_log, or -exp(A_log) (mdesc_lin_a_neg) */
	struct cop_w dt_bias;   /* [lv] */
	struct cop_w norm;      /* [dv] */
	struct cop_w out;       /* [lv*dv -> hidden] */
};

/* Bytes of scratch llin_forward needs for a chunk of n_tok tokens (a multiple
 * of 64; pass memory aligned to at least 64 bytes). */
size_t llin_scratch_bytes(const struct mdesc *m, uint32_t n_tok);

/*
 * Run the token mixer over x [n_tok][hidden] (fp32, updated in place:
 * x += the layer's output), tokens strictly in order, updating `st`.
 * `scratch` holds llin_scratch_bytes(m, n_tok) bytes, borrowed for the call.
 * `pool` may be NULL (inline). Every pointer is borrowed for the call only.
 * Returns 0; n_tok 0 does nothing. IG_E_INVAL, touching nothing, when the
 * shapes are not a linear layer's (a zero dimension, conv_kernel 0, or
 * lin_v_heads not a multiple of lin_k_heads).
 */
int llin_forward(const struct mdesc *m, const struct llin_weights *w, struct linstate *st, float *x,
                 uint32_t n_tok, void *scratch, struct cpool *pool);

/* One sequence's rows in a round and its state in this layer. */
struct llin_seg {
	struct linstate st;
	uint32_t n_tok;
};

/*
 * The layer over a round of several sequences: x holds the rows of segs[0],
 * then of segs[1], ...; each sequence's tokens run in order on its own state.
 * The projections run over all rows at once; each row's result is
 * bit-identical to running its sequence alone with llin_forward. Scratch:
 * llin_scratch_bytes for the total rows. The same refusals as llin_forward.
 */
int llin_forward_segs(const struct mdesc *m, const struct llin_weights *w,
                      const struct llin_seg *segs, uint32_t n_segs, float *x, void *scratch,
                      struct cpool *pool);

#endif
