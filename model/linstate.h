/*
 * linstate.h - the inner layout of a sequence's linear-attention state, the
 * bytes that travel in every sequence image (seqimg.h) beside the KV pages
 * (kvfmt.h): so every backend must lay them out alike, and a sequence moved
 * out by one backend resumes on another. Its size is common/model.h's
 * (mdesc_lin_state, the one place it is computed).
 *
 * A sequence's state is its linear layers' states one after the other, in
 * layer order (the i-th linear layer at i x layer_floats floats), each:
 *
 *   field  shape            element
 *   -----  ---------------  ------------------------------------------------
 *   S      [lv][dk][dv]     S[(h * dk + i) * dv + j]: value head h, row i
 *                           (key dim), column j: the delta rule's state
 *   conv   [qkv][K - 1]     conv[c * (K - 1) + j] = u_c(t - (K - 1) + j),
 *                           oldest first, where t is the next token and
 *                           qkv = 2 lk dk + lv dv: the convolution's inputs
 *
 * fp32 throughout (lv lin_v_heads, lk lin_k_heads, dk lin_dk, dv lin_dv, K
 * conv_kernel). A fresh sequence's state is all zeros; copying both arrays
 * of every layer is a complete save of the sequence's state.
 *
 * In sequence images: never change this layout without a new image format.
 */
#ifndef IGNIS_MODEL_LINSTATE_H
#define IGNIS_MODEL_LINSTATE_H

#include <stdint.h>
#include <string.h>

#include "common/model.h"

/* One sequence's state in one linear layer (the layout above); both arrays
 * are the caller's. */
struct linstate {
	float *S;    /* mdesc_lin_state(m).s_floats floats */
	float *conv; /* mdesc_lin_state(m).conv_floats floats */
};

/* The state of the `index`-th linear layer inside a sequence's `state`. */
static inline struct linstate linstate_layer(const struct mdesc_lin_state *ls, void *state,
                                             uint32_t index)
{
	float *base = (float *)state + (uint64_t)index * ls->layer_floats;

	return (struct linstate){base, base + ls->s_floats};
}

/* Zero one layer's state: its state before the sequence's first token. */
static inline void linstate_zero(const struct mdesc *m, struct linstate *st)
{
	struct mdesc_lin_state ls;

	mdesc_lin_state(m, &ls);
	memset(st->S, 0, ls.s_floats * sizeof(float));
	if (ls.conv_floats)
		memset(st->conv, 0, ls.conv_floats * sizeof(float));
}

#endif
