/*
 * layer_ffn.h - a decoder layer's feed-forward half on the cpu backend:
 * dense SwiGLU (the 27B's family) or mixture of experts with a shared expert
 * (Flash-Next's family), for n_tok tokens of the residual stream.
 *
 *   xn = rmsnorm(x, ffn_norm)
 *   dense: x += down(silu(gate xn) * up xn)
 *   moe:   p = softmax(router xn); the top_k experts by p (ties: lower id),
 *          weights p_e / sum of the kept p (the rule is the neutral
 *          gpu-worker/backend/route.h's); routed = sum over them, in rank
 *          order, of w_e down_e(silu(gate_e xn) * up_e xn);
 *          shared = sigmoid(gate_inp_shexp . xn) down_sh(silu(gate_sh xn) * up_sh xn);
 *          x += routed, then x += shared.
 *
 * Weights are in GGUF layout, in model/quant.h's types (docs/adr/0006, 0029).
 * Routed experts are addressed one by one: expert e of a [n_in, n_out, experts]
 * tensor is its rows e * n_out .. (e + 1) * n_out - 1 (cop_w_rows). Every
 * sum runs in a fixed order, so the result is bit-identical whatever the
 * thread count and whether the tokens come as one chunk or one by one.
 */
#ifndef IGNIS_GPU_WORKER_LAYER_FFN_H
#define IGNIS_GPU_WORKER_LAYER_FFN_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_ops.h"
#include "cpu_pool.h"
#include "common/err.h"
#include "common/model.h"

struct lffn_weights {
	struct cop_w norm; /* ffn_norm [hidden] */
	/* dense */
	struct cop_w gate, up, down;
	/* moe */
	struct cop_w router;                        /* ffn_gate_inp [hidden, experts] */
	struct cop_w gate_exps, up_exps, down_exps; /* [.., .., experts] */
	struct cop_w shexp_gate;                    /* ffn_gate_inp_shexp [hidden] */
	struct cop_w gate_sh, up_sh, down_sh;
};

/*
 * Where a layer's routed experts are read from (the expert cache,
 * docs/adr/0039). NULL: in place, each [.., .., experts] tensor of
 * lffn_weights. Otherwise, once the router has chosen every row's experts,
 * `prepare` is given them all (n ids of layer `layer`, repeats included) and
 * makes each readable; `get` then gives expert e's three projections (gate,
 * up, down: the same bytes as the tensors' slices, so the same arithmetic).
 * `prepare` fails only when the device does (a copy refused).
 */
struct lffn_experts {
	int (*prepare)(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n,
	               struct ig_errbuf *eb);
	void (*get)(void *ctx, uint32_t layer, uint32_t e, struct cop_w w[3]);
	/* May be NULL. The experts layer `layer` will likely route to (its
	 * router on the residual before the layer's token mixer): their copies
	 * may start now, beside the mixer's compute. A guess: what prepare
	 * is later given decides what is read. */
	void (*prefetch)(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n);
	void *ctx;
};

/* The experts each row of x (n_tok x hidden) would be routed to by this
 * layer's router (its norm, router and top_k, as lffn_forward chooses them),
 * into n_tok x top_k ids in `scratch` (lffn_scratch_bytes of n_tok);
 * returns them. x is not changed. */
const uint32_t *lffn_predict(const struct mdesc *m, const struct lffn_weights *w, const float *x,
                             uint32_t n_tok, void *scratch, struct cpool *pool);

/* Scratch bytes for n_tok tokens. */
size_t lffn_scratch_bytes(const struct mdesc *m, uint32_t n_tok);

/* x (n_tok x hidden) += the feed-forward of each token (layer `layer`; its
 * routed experts through `xp` when not NULL). The experts each token used go
 * to `chosen` (n_tok x top_k ids, in rank order) when not NULL. Fails only
 * when `xp->prepare` does. */
int lffn_forward(const struct mdesc *m, const struct lffn_weights *w, uint32_t layer,
                 const struct lffn_experts *xp, float *x, uint32_t n_tok, void *scratch,
                 struct cpool *pool, uint32_t *chosen, struct ig_errbuf *eb);

/*
 * The mixture of experts in pieces, for the neutral layer walk
 * (gpu-worker/backend/decoder.h), which routes and keeps the order; each
 * piece over the scratch of the round's n_tok tokens, composing to exactly
 * lffn_forward's arithmetic:
 *   begin   xn, the shared expert's output for every row, and every row's
 *           router probabilities (softmax) in host memory; `ids` and
 *           `sums` room for the routing (n_tok x top_k, n_tok)
 *   probs   the router probabilities alone (a prediction: nothing kept)
 *   expert  x[t] += weight * expert(ew)(xn[t])
 *   shared  x[t] += sigmoid(shexp_gate . xn[t]) * shared[t]
 */
struct lffn_moe {
	const float *p;
	uint32_t *ids;
	float *sums;
};
struct lffn_moe lffn_moe_begin(const struct mdesc *m, const struct lffn_weights *w, const float *x,
                               uint32_t n_tok, void *scratch, struct cpool *pool);
struct lffn_moe lffn_moe_probs(const struct mdesc *m, const struct lffn_weights *w, const float *x,
                               uint32_t n_tok, void *scratch, struct cpool *pool);
void lffn_moe_expert(const struct mdesc *m, const struct cop_w ew[3], float weight, uint32_t t,
                     float *x, uint32_t n_tok, void *scratch, struct cpool *pool);
void lffn_moe_shared(const struct mdesc *m, uint32_t t, float *x, uint32_t n_tok, void *scratch);

#endif
