/*
 * layer_full.h - one full-attention decoder layer's token mixer (Qwen3-Next
 * style gated attention) on the cpu backend, over the paged KV pool.
 *
 * For a chunk of n_tok consecutive tokens of ONE sequence at positions
 * pos0 .. pos0 + n_tok - 1 (a prefill chunk, or one decode token), with
 * x [n_tok][hidden] the residual stream (fp32), in place:
 *
 *   xn = rmsnorm(x, attn_norm)
 *   qg = attn_q · xn   (per q head h: query [h 2hd, h 2hd + hd),
 *                       gate [h 2hd + hd, (h + 1) 2hd))
 *   k = attn_k · xn, v = attn_v · xn
 *   q_h = rmsnorm(q_h, attn_q_norm), k_h = rmsnorm(k_h, attn_k_norm)
 *   NeoX RoPE on the first rope_dims of every q and k head at the token's
 *   position (cop_rope_neox, rope_theta)
 *   STORE k, v of every token of the chunk into its page (kvfmt_encode), THEN
 *   for each token t and q head h (kv head kh = h / (q_heads / kv_heads)):
 *     s_j = (q_h . K_j) * (1 / sqrt(hd))   for j = 0 .. pos_t, K_j decoded
 *                                          back from the page (the token's
 *                                          own key included)
 *     p = softmax(s)                       (cop_softmax)
 *     o_h[d] = sum_j p_j V_j[d]            (j increasing, fp32, V decoded)
 *     o_h[d] *= 1 / (1 + expf(-gate_h[d]))
 *   x += attn_output · concat_h(o_h)
 *
 * Exactness: every output element is computed by one thread in a fixed
 * order, so results are bit-identical for every thread count; a token's
 * attention reads only stored keys and values 0 .. pos_t in index order, so
 * the same token gives the same bits processed in any chunking (the stored
 * bytes too: kvfmt_encode is a function of the vector).
 *
 * Where each stored vector sits in its page is the KV formats' page layout
 * (kvfmt.h: kvfmt_page_offset); the page of position p is
 * seq->table[p / 64], its address kvpool_page(kv, page).
 */
#ifndef IGNIS_GPU_WORKER_LAYER_FULL_H
#define IGNIS_GPU_WORKER_LAYER_FULL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_ops.h"
#include "cpu_pool.h"
#include "gpu-worker/backend/kvpool.h"
#include "common/model.h"

/* One full-attention layer's weights, any cop_w type, GGUF [n_in, n_out] layout
 * (w[o * n_in + i]). Borrowed: the caller keeps them alive for the call. */
struct lfull_weights {
	struct cop_w attn_norm;   /* [hidden] */
	struct cop_w attn_q;      /* hidden -> 2 * q_heads * head_dim (query, gate) */
	struct cop_w attn_k;      /* hidden -> kv_heads * head_dim */
	struct cop_w attn_v;      /* hidden -> kv_heads * head_dim */
	struct cop_w attn_q_norm; /* [head_dim] */
	struct cop_w attn_k_norm; /* [head_dim] */
	struct cop_w attn_output; /* q_heads * head_dim -> hidden */
};

/* Scratch bytes lfull_forward needs for chunks of up to `n_tok` tokens at
 * positions below `max_context` (float-aligned memory, e.g. malloc's). */
size_t lfull_scratch_bytes(const struct mdesc *m, uint32_t n_tok, uint64_t max_context);

/*
 * Run the layer (above) on x [n_tok][hidden] in place, storing the chunk's
 * keys and values in format `fmt` into `seq`'s pages of `kv` and attending
 * over positions 0 .. pos of each token (positions below pos0 must have been
 * stored by earlier calls). `scratch` holds lfull_scratch_bytes(m, n_tok,
 * max_context) bytes with pos0 + n_tok <= max_context; `pool` may be NULL.
 * Everything is borrowed for the call.
 * Returns 0, or IG_E_INVAL touching nothing when: full_index >= full_layers,
 * q_heads is not a multiple of kv_heads, the format does not suit head_dim,
 * a page is smaller than the layout needs, the sequence has no page for a
 * position of the chunk, or rope_dims / rope_theta are refused by
 * cop_rope_neox. n_tok 0 does nothing.
 */
int lfull_forward(const struct mdesc *m, uint32_t full_index, const struct lfull_weights *w,
                  enum mdesc_kv_format fmt, const struct kvpool *kv, const struct kvseq *seq,
                  uint64_t pos0, float *x, uint32_t n_tok, void *scratch, struct cpool *pool);

/* One sequence's rows in a round: n_tok consecutive tokens from pos0.
 * `win`: its residual window (common/model.h, mdesc_kv_window_bytes; the
 * sequence's state at mdesc_kv_window_offset), read and written in a compact
 * format: a token at position p reads position j in bf16 when j < sinks or
 * j > p - window, else from its coded page. The rule is a function of p and
 * j alone, so a token's result does not depend on the chunk it is in. NULL
 * or window 0: none (every position from its page). */
struct lfull_seg {
	const struct kvseq *seq;
	uint64_t pos0;
	uint32_t n_tok;
	uint16_t *win;
	uint32_t sinks, window;
};

/*
 * The layer over a round of several sequences: x holds the rows of segs[0],
 * then of segs[1], ... (sum of n_tok rows), each sequence attending over its
 * own pages only. The projections run over all rows at once (one pass over
 * the weights for the whole round); each row's result is bit-identical to
 * running its sequence alone with lfull_forward. Scratch: lfull_scratch_bytes
 * for the total rows, with every pos0 + n_tok <= max_context. The same
 * refusals as lfull_forward, for any segment.
 */
int lfull_forward_segs(const struct mdesc *m, uint32_t full_index, const struct lfull_weights *w,
                       enum mdesc_kv_format fmt, const struct kvpool *kv,
                       const struct lfull_seg *segs, uint32_t n_segs, float *x, void *scratch,
                       struct cpool *pool);

#endif
