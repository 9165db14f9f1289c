/*
 * dectab.h - the decoder's tensors, the same on every backend
 * (docs/adr/0045): which tensors each layer of each architecture reads
 * (full attention or the gated delta rule as the token mixer; dense SwiGLU
 * or a mixture of experts with a shared expert as the feed-forward), the
 * types each may have, and where each is read: a device weight placed
 * through the caller's placer (the plan's weights line), the routed
 * experts (ffn_*_exps) left in the file's mapping for the expert cache
 * (expcache.h), everything read in place when there is no placer.
 *
 * The names are our own (docs/adr/0006); mdesc_tensor_name maps them to a
 * file's (llama.cpp's qwen3, qwen35, qwen35moe, qwen3next layouts too:
 * docs/adr/0033), and a file whose architecture lays b and a out apart
 * (mdesc_lin_ba SPLIT) gives lin_beta and lin_alpha. A backend takes the
 * views (weight.h) into its own layer operations' weights.
 */
#ifndef IGNIS_GPU_WORKER_DECTAB_H
#define IGNIS_GPU_WORKER_DECTAB_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "weight.h"
#include "common/err.h"
#include "common/model.h"

struct mfile;

/* A full-attention layer's tensors (gated attention, Qwen3-Next style). */
struct dectab_full {
	struct be_weight attn_norm, attn_q, attn_k, attn_v, attn_q_norm, attn_k_norm, attn_output;
};

/* A linear-attention layer's tensors (the gated delta rule). */
struct dectab_linear {
	struct be_weight attn_norm, qkv, z;
	struct be_weight ba;    /* FUSED or GROUPED: b and a; SPLIT: b */
	struct be_weight alpha; /* SPLIT: a */
	struct be_weight conv, a_log, dt_bias, norm, out;
};

/* The feed-forward's tensors: dense, or a mixture of experts. */
struct dectab_ffn {
	struct be_weight norm;
	struct be_weight gate, up, down; /* dense */
	struct be_weight router;         /* moe: ffn_gate_inp */
	struct be_weight gate_exps, up_exps, down_exps;
	struct be_weight shexp_gate; /* ffn_gate_inp_shexp */
	struct be_weight gate_sh, up_sh, down_sh;
};

struct dectab_layer {
	bool full;
	uint32_t index; /* among the full, or among the linear layers */
	struct dectab_full fw;
	struct dectab_linear lw;
	struct dectab_ffn ffn;
};

struct dectab {
	const struct mdesc *m;
	struct be_weight embd, output; /* [hidden, vocab] each (tied: the same) */
	struct be_weight out_norm;     /* [hidden] */
	struct dectab_layer *layers;   /* m->layers */
	uint64_t placed_bytes;         /* copied through the placer */
};

/* Find every tensor of the open file `f` (kept open while `t` is used),
 * check its type (matrices: any type model/quant.h reads; vectors: F32,
 * F16 or BF16), and place the device weights through `placer` (NULL: read
 * in place). A missing tensor or a type refused is named, with the file. */
int dectab_bind(struct dectab *t, struct mfile *f, const struct be_placer *placer,
                struct ig_errbuf *eb);
void dectab_release(struct dectab *t);

#endif
