/*
 * model_cpu.h - the decoder on the cpu backend: its layer operations (the
 * token mixers of layer_full.h and layer_linear.h, the feed-forward of
 * layer_ffn.h, the embedding and the head on cpu_ops.h's kernels) walked by
 * the neutral decoder (gpu-worker/backend/decoder.h), over the neutral
 * tensor table (dectab.h).
 *
 * A sequence's state is its KV pages (kvpool.h), one linear-attention state
 * per linear layer (model/linstate.h), and its position. Every step keeps
 * the exactness contract of backend.h: bit-identical whatever the batch,
 * the chunking of the prompt, the passes and the thread count, so a
 * sequence that moved and came back continues exactly.
 *
 * The mdl_* calls below are the decoder without the backend table, for the
 * tools and tests that still call it directly (ignis-generate,
 * ignis-calibrate, the oracle test); the table's entries (be_cpu.c) use the
 * same calls.
 */
#ifndef IGNIS_GPU_WORKER_MODEL_CPU_H
#define IGNIS_GPU_WORKER_MODEL_CPU_H

#include <stdint.h>

#include "cpu_pool.h"
#include "gpu-worker/backend/devseq.h"
#include "gpu-worker/backend/kvpool.h"
#include "layer_ffn.h"
#include "layer_full.h"
#include "layer_linear.h"
#include "model/mfile.h"
#include "model/seqimg.h"

struct be_trace;

struct mdl_layer {
	bool full;
	uint32_t index; /* among the full, or among the linear layers */
	struct lfull_weights fw;
	struct llin_weights lw;
	struct lffn_weights ffn;
};

struct mdl {
	const struct mdesc *m;
	struct cop_w embd, output; /* token_embd [hidden, vocab], output [hidden, vocab] */
	struct cop_w out_norm;     /* [hidden] */
	struct mdl_layer *layers;
	uint64_t placed_bytes; /* weights copied by a placer (mdl_bind_placed) */
	/* where the routed experts are read (the expert cache, ADR 0039); NULL:
	 * in place, from the file mapping */
	const struct lffn_experts *experts;
	/* a test's trace of the layer operations (backend.h); NULL: none */
	const struct be_trace *trace;
	/* the compact formats' residual window (common/model.h): set before
	 * the first mdl_seq_init; kv_window 0: none */
	uint32_t kv_sinks, kv_window;
};

/* A sequence's state bytes under `d` (mdesc_seq_state_bytes). */
uint64_t mdl_state_bytes(const struct mdl *d);

/* Bind the tensors of an open model file (dectab.h: matrices in
 * model/quant.h's types, vectors F32, F16 or BF16; others are refused naming
 * the tensor). The file stays open while `d` is used. */
int mdl_bind(struct mdl *d, struct mfile *f, struct ig_errbuf *eb);

/* Where the device weights go: `place` copies `bytes` of tensor `name` from
 * `src` (the file mapping) into device memory and returns its address in
 * *at (the worker takes it from the plan's weights line). The routed experts
 * are not placed: they are the expert cache's (expcache.h), or read in
 * place from the mapping. */
struct mdl_placer {
	int (*place)(void *ctx, const char *name, const void *src, uint64_t bytes, const void **at,
	             struct ig_errbuf *eb);
	void *ctx;
};

/* mdl_bind with every device weight copied through `placer` (NULL: read in
 * place from the file mapping). */
int mdl_bind_placed(struct mdl *d, struct mfile *f, const struct mdl_placer *placer,
                    struct ig_errbuf *eb);
void mdl_release(struct mdl *d);

/* A sequence (devseq.h): its reserved pages in kv, its linear states in
 * `state` (mdesc_lin_state(m).floats floats: one layer's after another),
 * then its KV window (mdl_state_bytes in all), its position. */

/* A fresh sequence (position 0, zero states); its pages are reserved by the
 * caller in seq->kv. */
int mdl_seq_init(const struct mdl *d, struct be_seq *s, struct ig_errbuf *eb);
void mdl_seq_release(struct be_seq *s);

/* The round scratch of n_tok tokens over contexts of at most max_context:
 * the residual stream and the head's rows, then the widest layer's. */
size_t mdl_scratch_bytes(const struct mdesc *m, uint32_t n_tok, uint64_t max_context);

/* The image header of `s` (its pages, linear states, position, last token
 * and `sampler_bytes` of sampler state) and, in `pages_out` (room for
 * s->kv.n_pages), the addresses of its pages: what seqimg.h needs to move
 * the sequence out, or in once the pages are reserved. */
void mdl_seq_image(const struct mdl *d, const struct be_seq *s, const struct kvpool *kv,
                   enum mdesc_kv_format fmt, uint32_t last_token, uint64_t sampler_bytes,
                   struct seqimg_header *h, void **pages_out);

/* Run `n_tok` tokens of `s` (a prefill chunk or one decode token) and write
 * the logits of the last one (vocab floats). */
int mdl_forward(const struct mdl *d, struct be_seq *s, const uint32_t *tokens, uint32_t n_tok,
                enum mdesc_kv_format fmt, const struct kvpool *kv, uint64_t max_context,
                float *logits, void *scratch, struct cpool *pool, struct ig_errbuf *eb);

/* One sequence's part of a round: struct be_step (devseq.h). */

/* Everything mdl_forward_round could refuse of a round (its tokens, the
 * context, the reserved pages, no sequence twice), checked before any state
 * changes: a caller running a round in passes checks the whole round first. */
int mdl_check_round(const struct mdl *d, const struct be_step *steps, uint32_t n_steps,
                    uint64_t max_context, struct ig_errbuf *eb);

/*
 * One round of continuous batching: several sequences (each at most once)
 * each run their tokens, the projections and the feed-forward over all rows
 * of the round at once. Each sequence's state, pages and logits are
 * bit-identical to running its step alone with mdl_forward (tested): which
 * sequences share a round never changes a token. `logits` receives vocab
 * floats per row a step asks (be_step.tail_logits), in step order. `scratch` holds
 * mdl_scratch_bytes(d, total tokens of the round, max_context). Every step
 * is checked (tokens, context, reserved pages, no sequence twice) before any
 * state changes; a refusal names the step and touches nothing.
 */
int mdl_forward_round(const struct mdl *d, const struct be_step *steps, uint32_t n_steps,
                      enum mdesc_kv_format fmt, const struct kvpool *kv, uint64_t max_context,
                      float *logits, void *scratch, struct cpool *pool, struct ig_errbuf *eb);

#endif
