/*
 * devseq.h - what the engine and every backend share about a model and a
 * sequence on the device, with none of a backend's own types: a bound model
 * (a handle and the facts the engine needs), a sequence's device state and
 * one sequence's part of a round. The backend table (backend.h) takes and
 * gives these; only a backend looks inside `impl` or dereferences `state`.
 */
#ifndef IGNIS_GPU_WORKER_DEVSEQ_H
#define IGNIS_GPU_WORKER_DEVSEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool.h"
#include "common/model.h"

/* A model whose weights a backend holds (be_ops.model_bind). */
struct be_model {
	const struct mdesc *m;  /* its description (the file's) */
	uint64_t state_bytes;   /* one sequence's fixed-size state (linear layers, the
	                           KV window: mdesc_seq_state_bytes) */
	uint64_t scratch_bytes; /* the round scratch the backend carved for it */
	uint32_t pass_tokens;   /* tokens a pass of a round holds (the workspace's) */
	uint32_t logit_rows;    /* rows of logits a pass holds (the sampling line's) */
	uint32_t states;        /* sequences holding a state at once (lane_state) */
	uint64_t placed_bytes;  /* device weights placed (through the placer) */
	uint32_t threads;       /* host threads its rounds use */
	void *impl;             /* the backend's */
};

/* A sequence's state on the device: its pages (the pool's books: indices,
 * not memory), its fixed-size state (device memory the backend gave it at
 * seq_init: the engine passes the pointer on, never reads through it), and
 * how many tokens it has seen. */
struct be_seq {
	struct kvseq kv;
	void *state;
	uint64_t pos;
};

/* One sequence's part of a round: a prefill chunk or one decode token. */
struct be_step {
	struct be_seq *s;
	const uint32_t *tokens; /* host memory */
	uint32_t n_tok;         /* >= 1 */
	/* Rows of logits it gives: those of its last tail_logits tokens, in
	 * order (0..n_tok: 1 for a prompt's end or a decode, n_tok for every
	 * position of a prompt whose log-probabilities are asked, 0 for none) */
	uint32_t tail_logits;
};

#endif
