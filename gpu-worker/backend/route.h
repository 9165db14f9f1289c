/*
 * route.h - the mixture of experts' routing rule, the same on every backend
 * (docs/adr/0045): which experts a row goes to and with what weight, so
 * that two backends given the same router output route alike.
 *
 *   p = softmax(router . xn)           (the backend's kernel, over experts)
 *   the top_k experts by p, in rank order; ties to the lower id (a
 *   selection in a fixed order, never a sort that could reorder ties)
 *   weight of the r-th: p_e / sum of the kept p (0 when that sum is 0)
 *
 * and the order the routed experts' outputs are added in: each token's own
 * experts in rank order, then the gated shared expert (layer_ffn.h on the
 * cpu backend; every backend keeps it, so a token's sum is the same).
 */
#ifndef IGNIS_GPU_WORKER_ROUTE_H
#define IGNIS_GPU_WORKER_ROUTE_H

#include <stdint.h>

/* The top `k` of `experts` probabilities `p` into id[0..k) (ties to the
 * lower id); returns the sum of their p. */
float route_topk(const float *p, uint32_t experts, uint32_t k, uint32_t *id);

/* The weight of an expert of probability `pe` among kept ones summing to
 * `sum`. */
static inline float route_weight(float pe, float sum)
{
	return sum > 0.0f ? pe / sum : 0.0f;
}

#endif
