/*
 * decoder.h - the layer walk of a round, the same on every backend
 * (docs/adr/0045): the embedding, then per layer its token mixer (full
 * attention over the paged KV pool, or the gated delta rule on each
 * sequence's linear state, model/linstate.h) and its feed-forward (dense,
 * or a mixture of experts routed here: route.h, its experts made readable
 * by the expert cache and added in rank order, then the shared expert),
 * the next layer's likely experts prefetched, then the head over each step
 * that wants logits.
 *
 * A backend gives its LAYER OPERATIONS (struct dec_ops): the arithmetic of
 * each piece, on its own kernels and memory, over the round's rows (the
 * residual stream and scratch are the backend's; this walk never reads
 * them). The set is small and fixed so that a GPU backend can capture a
 * whole round's calls as one graph. Each operation keeps the exactness
 * contract of backend.h: a row's result does not depend on the other rows.
 */
#ifndef IGNIS_GPU_WORKER_DECODER_H
#define IGNIS_GPU_WORKER_DECODER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "devseq.h"
#include "weight.h"
#include "common/err.h"
#include "common/model.h"
#include "model/linstate.h"

/* A mixture-of-experts layer's routing, in host memory the backend gives:
 * each row's probabilities (n_tok x experts, softmax done), room for the
 * experts chosen (n_tok x top_k) and each row's sum of their p (n_tok;
 * NULL for a prediction). */
struct dec_route {
	const float *p;
	uint32_t *ids;
	float *sums;
};

struct dec_ops {
	/* The residual rows of the round: each step's tokens embedded, in
	 * step order. */
	void (*embed)(void *ctx, const struct be_step *steps, uint32_t n_steps);
	/* Layer `layer`, the `index`-th full-attention layer, over the rows:
	 * each step's tokens stored into its pages and attending over them. */
	int (*mixer_full)(void *ctx, uint32_t layer, uint32_t index, const struct be_step *steps,
	                  uint32_t n_steps);
	/* Layer `layer`, a linear-attention layer, each step on its state
	 * st[i] (updated in place). */
	int (*mixer_linear)(void *ctx, uint32_t layer, const struct be_step *steps,
	                    uint32_t n_steps, const struct linstate *st);
	/* A dense feed-forward over the round's n_tok rows. */
	void (*ffn_dense)(void *ctx, uint32_t layer, uint32_t n_tok);
	/* A mixture of experts' first half: every row's router probabilities
	 * (and, unless `predict`, what expert and shared need: the normed rows,
	 * the shared expert's output). `predict`: from the residual before the
	 * layer's token mixer, a guess for the prefetch; nothing kept. */
	struct dec_route (*route)(void *ctx, uint32_t layer, uint32_t n_tok, bool predict);
	/* Row t += weight * the expert of views w (gate, up, down) on row t. */
	void (*expert)(void *ctx, uint32_t layer, uint32_t t, const struct be_weight w[3],
	               float weight);
	/* Row t += the gated shared expert's output of row t. */
	void (*shared)(void *ctx, uint32_t layer, uint32_t t);
	/* The final norm and the output matrix over the last row of each step
	 * that wants logits: vocab floats each, in step order, into `logits`. */
	void (*head)(void *ctx, const struct be_step *steps, uint32_t n_steps, float *logits);
	void *ctx;
	/* The round's residual rows (n_tok x hidden floats) into host `out`,
	 * for `trace` (backend.h's struct be_trace); both NULL: not traced. */
	void (*rows)(void *ctx, float *out);
	const struct be_trace *trace;
};

/* Where the routed experts are read (the expert cache, expcache.h, or the
 * tensors in place): `prepare` (may be NULL: nothing to do) makes a pass's
 * experts of a layer readable, `get` gives one's views, `prefetch` (may be
 * NULL) starts the copies of a guess. */
struct dec_experts {
	int (*prepare)(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n,
	               struct ig_errbuf *eb);
	void (*get)(void *ctx, uint32_t layer, uint32_t e, struct be_weight w[3]);
	void (*prefetch)(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n);
	void *ctx;
};

/* One round (pass) of the decoder of `m` over `steps` through `ops`, the
 * routed experts through `xp` (MoE models): checked first (bind.h's
 * bind_check_steps: a refusal touches nothing), each step's position
 * advanced after. Fails only when an operation or xp->prepare does. */
int dec_round(const struct mdesc *m, const struct dec_ops *ops, const struct dec_experts *xp,
              const struct be_step *steps, uint32_t n_steps, uint64_t max_context, float *logits,
              struct ig_errbuf *eb);

#endif
