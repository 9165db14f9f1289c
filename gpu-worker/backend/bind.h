/*
 * bind.h - what binding a model means on every backend (docs/adr/0045): the
 * caller's regions checked and carved (the round scratch in workspace, the
 * device rows of logits in sampling, the state slots in lane_state:
 * be_bind_opts), the state slots given to sequences and taken back
 * (docs/adr/0027), a round cut in passes when the workspace holds fewer
 * tokens than the round, the round's checks, and a sequence's image header.
 *
 * A backend gives only how much scratch its rounds need for so many tokens
 * (bind_scratch_fn: its kernels' buffers) and zeroes a state slot it hands
 * out; the rest is here, the same arithmetic on each, so that the plan's
 * regions mean the same passes on every backend.
 *
 * Invariants: 1 <= pass_tokens <= max_tokens; logit_rows >= 1; a slot i is
 * held[i] exactly while a sequence's `state` points at states + i *
 * slot_bytes.
 */
#ifndef IGNIS_GPU_WORKER_BIND_H
#define IGNIS_GPU_WORKER_BIND_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "devmem.h"
#include "devseq.h"
#include "common/err.h"
#include "common/model.h"

struct kvpool;
struct seqimg_header;

/* The round scratch a backend needs for n_tok tokens over sequences of at
 * most `context` tokens (it grows with n_tok). */
typedef uint64_t (*bind_scratch_fn)(const struct mdesc *m, uint32_t n_tok, uint64_t context);

/* What a bound model's rounds hold and where, once carved. */
struct bind {
	const struct mdesc *m;
	uint32_t max_tokens;  /* a round's tokens at most ... */
	uint64_t context;     /* ... over sequences of this context at most */
	uint32_t pass_tokens; /* what the scratch holds */
	void *scratch;        /* the workspace region */
	float *logits;        /* logit_rows x vocab, device memory */
	uint32_t logit_rows;
	struct be_step *pass; /* max_tokens steps: one pass's (a step holds a token at least) */
	uint8_t *states;      /* n_states slots of slot_bytes, device memory */
	uint64_t slot_bytes;
	uint32_t n_states;
	bool *held; /* n_states: slot i is a sequence's */
};

/* A state slot's bytes: the linear states (model/linstate.h) and the KV
 * window of `o` (mdesc_seq_state_bytes), 64-byte aligned, and never 0 (a
 * model without linear layers still gives each sequence a slot of its own,
 * so slots count sequences alike on every model). */
uint64_t bind_slot_bytes(const struct mdesc *m, const struct be_bind_opts *o);

/* What each region of `o` must hold at least, and for rounds in one pass
 * (be_ops.model_needs), with the backend's scratch. */
void bind_needs(const struct mdesc *m, const struct be_bind_opts *o, bind_scratch_fn scratch,
                struct be_needs *n);

/* Check the regions of `o` (device memory of `mem`, each at least what
 * bind_needs says; `backend` names it in messages) and carve them into
 * `bd`: as many tokens a pass as the workspace holds, as many rows of
 * logits as sampling holds, o->states state slots. On failure `bd` is
 * left for bind_release. */
int bind_carve(struct bind *bd, const struct devmem *mem, const char *backend,
               const struct mdesc *m, const struct be_bind_opts *o, bind_scratch_fn scratch,
               struct ig_errbuf *eb);
/* Give back the books (the regions stay the caller's). Idempotent. */
void bind_release(struct bind *bd);

/* A free state slot for `s` (its `state` pointed at it, position 0): the
 * backend zeroes its state_bytes next. IG_E_NOSPACE when every slot is
 * held. */
int bind_seq_take(struct bind *bd, struct be_seq *s, struct ig_errbuf *eb);
/* `s`'s slot free again; its `state` NULL. */
void bind_seq_give(struct bind *bd, struct be_seq *s);

/* Everything a round could be refused for (its tokens, the context, the
 * reserved pages, no sequence twice, the tokens in the vocabulary), checked
 * before any state changes. */
int bind_check_steps(const struct mdesc *m, const struct be_step *steps, uint32_t n_steps,
                     uint64_t max_context, struct ig_errbuf *eb);
/* bind_check_steps, and the round within what the model was bound for. */
int bind_check_round(const struct bind *bd, const struct be_step *steps, uint32_t n_steps,
                     uint64_t context, struct ig_errbuf *eb);

/* The next pass of a round from step *i, token *off on: at most
 * pass_tokens tokens and logit_rows rows of logits; a step cut by the
 * pass's end (its tokens, or its rows: be_step.tail_logits) goes on in the
 * next, each piece with the rows of its own tokens.
 * Returns the pass's steps (in bd->pass) and its rows of logits in *rows. */
uint32_t bind_pass(struct bind *bd, const struct be_step *steps, uint32_t n_steps, uint32_t *i,
                   uint32_t *off, uint32_t *rows);

/* The image header of `s` (its pages in `kv`, its state, its position,
 * `last_token` and `sampler_bytes` of sampler state) and in `pages_out`
 * (room for s->kv.n_pages) the device addresses of its pages: what a
 * seqimg writer or reader over the sequence needs (be_ops.seq_image). Its
 * state is `state_bytes` (be_model.state_bytes). */
void bind_seq_image(const struct mdesc *m, uint64_t state_bytes, const struct be_seq *s,
                    const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
                    uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out);

#endif
