/*
 * engine_int.h - what engine.c and moves.c share inside the engine: its
 * private state and the helpers both call. Not a public header: engine.h is.
 */
#ifndef IGNIS_GPU_WORKER_ENGINE_INT_H
#define IGNIS_GPU_WORKER_ENGINE_INT_H

#include "engine.h"
#include "model/seqimg.h"

/* Rounds a victim whose move the tier refused stays off the victim list. */
#define ENG_STAY_ROUNDS 256u

struct eng_seq {
	bool used;
	struct sched_seq sch; /* the planner's view; sch.id is the request id */
	struct be_seq ms;     /* pages and fixed-size state while admitted */
	bool have_state;
	struct smp_params smp;
	struct smp_state rng;
	uint32_t *prompt;
	uint32_t *out, n_out, cap;
	bool cap_cut; /* cap shortened to fit the context */
	enum eng_finish finish;
	uint64_t finished_at; /* finish order: the oldest is forgotten first */
	uint64_t submit_us;   /* clk_mono_us at its submit, for the time to first token */
	/* moves */
	uint32_t n_prompt;       /* the request's prompt (sch.prompt counts a replay) */
	uint32_t *feed;          /* what prefill feeds: the prompt, or a replay */
	bool replay_skip;        /* the replay ends on a token already generated */
	enum sched_phase resume; /* where a moved sequence goes on */
	bool in_tier;            /* the kvstore may hold a record of it */
	uint64_t for_id;         /* the need it was moved for */
	uint64_t stay_until;     /* not a victim before this round (a move refused) */
	/* prompt reuse (reuse.c) */
	uint32_t pages_all; /* its whole reservation, with nothing shared */
	int32_t ck;         /* waiting: the checkpoint it will start from, or -1 */
	uint32_t ck_gen;    /* ... while that entry holds the same checkpoint */
	uint32_t cached;    /* prompt tokens it took from a checkpoint */
	bool ck_lost;       /* its claim went before admission (counted given up) */
};

/* A retained prompt checkpoint (docs/adr/0037): the state of a sequence
 * after tokens[0..n), in a device retained slot, its KV in kv: the full
 * pages shared with the sequences that made or claimed it, the partial last
 * page its own copy; and the logits of token n-1, so that a prompt equal
 * to tokens takes its first token without running anything. */
enum eng_ck_kind { ENG_CK_CHECKPOINT = 0, ENG_CK_PREFIX = 1 };

/* A host checkpoint's state (docs/adr/0038): its state image copied out of
 * the device (CKH_STAGED, waiting for the slots' client), a kv_slot_capture
 * sent (CKH_CAPTURE), the image in its slot and kv_slot_publish sent
 * (CKH_PUBLISH), held by the kvstore daemon (CKH_HELD: only then claimed). */
enum eng_ck_host { CKH_NONE = 0, CKH_STAGED, CKH_CAPTURE, CKH_ADOPT, CKH_PUBLISH, CKH_HELD };

struct eng_ckpt {
	bool used;
	enum eng_ck_kind kind; /* a prompt's end, or where two prompts part */
	uint32_t *tokens, n;
	struct kvseq kv;
	float *logits;
	enum sched_class cls;
	uint64_t used_at; /* its capture or last claim, on the engine's reuse clock */
	uint32_t gen;     /* bumped each time the entry takes another checkpoint */
	/* a host entry's state is in a slot of the kvstore daemon's, not a
	 * device retained slot (entries n_ck_dev..n_ck) */
	bool host;
	enum eng_ck_host hs;
	uint32_t hslot;            /* the daemon's slot, */
	uint64_t hgen, hoff, hsum; /* its generation, offset in the arena, checksum */
	uint64_t key;              /* the tokens under the engine's reuse_ns */
	uint64_t used_us;          /* clk_mono_us of its capture or last claim (TTL) */
};

/* A prompt's end remembered by its tokens alone (cfg.prefixes_only: no
 * checkpoint of it is retained), so that a later prompt that parts from it
 * retains the shared prefix there. */
struct eng_end {
	uint32_t *tokens, n; /* n 0: a free record */
	uint64_t used_at;    /* its prompt's last end, on the engine's reuse clock */
};

/* The host slots' client: one request in flight; a capture at a time, its
 * image staged in `stage` meanwhile. */
enum eng_hstep { HS_IDLE = 0, HS_DROP, HS_CAPTURE, HS_ADOPT, HS_PUBLISH, HS_TOUCH };

struct eng_hslot_ref {
	uint32_t slot;
	uint64_t gen;
};

struct eng_host {
	struct kvc *c;
	enum eng_hstep step;
	bool waiting;
	int32_t cap;                 /* the entry whose capture is under way, or -1 */
	uint32_t cap_gen;            /* ... while it holds the same checkpoint */
	void *stage;                 /* its state image, until copied into its slot */
	void *claim;                 /* a claimed image, checked before it is used */
	struct eng_hslot_ref *drops; /* slots to drop, each once */
	uint32_t n_drops, cap_drops;
	uint64_t *touch; /* keys claimed here: the daemon counts the use (LRU, TTL) */
	uint32_t n_touch, cap_touch;
	uint64_t touch_key; /* the one in flight */
	bool rematch;       /* a checkpoint became claimable: match the waiting again */
};

/* One direction of moves: one sequence at a time, one window in flight. */
enum eng_xstep {
	XS_IDLE = 0,
	XS_RESERVE, /* out: kv_reserve sent */
	XS_COMMIT,  /* out: window k written, its kv_commit sent */
	XS_FETCH,   /* in: kv_fetch sent */
	XS_READ,    /* in: reading window k, one a round */
	XS_STAGE,   /* in, from KV-disk: kv_stage of window k sent */
	XS_COPY,    /* out: window k being gathered into the arena (transfer stream) */
	XS_SCATTER, /* in: windows k.. being scattered into the pages (transfer stream) */
	XS_DROP,    /* a kv_drop sent (after a restore, or for a cancelled one) */
};

struct eng_xfer {
	struct kvc *c;
	uint64_t window;
	enum eng_xstep step;
	bool waiting; /* a request is in flight on c */
	uint32_t slot;
	uint64_t id, key;
	uint64_t offset, image_bytes, t0_us;
	uint64_t r0, d0; /* the engine's rounds and decode tokens at the start */
	uint32_t k, windows;
	const char *tier;
	uint64_t stride; /* bytes between two windows in the arena: the window's
	                    size, or 0 when every window passes through one
	                    staging window (KV-disk) */
	struct seqimg_writer w;
	struct seqimg_reader r;
	void **pages; /* the pool's page count */
	uint8_t sampler[SMP_STATE_BYTES];
	uint64_t *sums;   /* KVC_MAX_WINDOWS */
	uint32_t backoff; /* rounds to wait before asking again (tier full) */
	/* the window copy in flight (XS_COPY, XS_SCATTER) on the backend's
	 * transfer stream, and its ticket: its results are read once done */
	struct be_img img;
	uint64_t ticket;
};

struct eng {
	struct be *be;
	const struct be_model *d;
	struct kvpool *kv;
	struct eng_cfg cfg;
	struct eng_seq *seqs;
	uint32_t n_slots;
	uint64_t next_id, arrivals, finishes;

	/* per round, sized once */
	struct sched_seq *snap;
	uint32_t *snap_slot, *order;
	struct sched_round r;
	struct be_step *steps;
	uint32_t *step_slot;
	float *logits;
	struct smp_scratch *smp_scratch;
	uint32_t max_steps;

	struct eng_stats st;

	/* moves: their window copies go on the backend's transfer stream,
	 * beside the rounds */
	bool moves;
	struct eng_xfer xo, xi;
	uint32_t *vq, n_vq; /* victims to move out, in order (slots) */
	uint32_t *iq, n_iq; /* restores to move in, in rank order (slots) */
	/* tier keys to drop when the out client is free, each once; room for
	 * one per request slot and as many more (a key past that stays in the
	 * tier until the next worker's sweep) */
	uint64_t *drops;
	uint32_t n_drops, cap_drops;

	/* prompt reuse: one checkpoint a device retained slot (entries
	 * 0..n_ck_dev), then one a host slot (n_ck_dev..n_ck) */
	struct eng_ckpt *ck;
	uint32_t n_ck, n_ck_dev;
	uint64_t ck_clock;
	struct eng_host hst;
	/* with prefixes only: as many prompts' ends remembered as there are
	 * slots (what checkpoints would remember), the least recent replaced */
	struct eng_end *ends;
	uint32_t n_ends;
};

/* engine.c */
struct eng_seq *eng__find(const struct eng *e, uint64_t id);
uint64_t eng__key(const struct eng *e, uint64_t id);
void eng__queue_drop(struct eng *e, uint64_t key);
void eng__event(struct eng *e, const struct eng_event *ev);
void eng__seq_event(struct eng *e, enum eng_event_kind kind, const struct eng_seq *s);
/* Is the sequence a transfer is working on still the one, in that phase? */
struct eng_seq *eng__xfer_seq(struct eng *e, const struct eng_xfer *x, enum sched_phase ph);
/* Wait for a window copy of the sequence in `slot`, if one runs. */
void eng__xfer_quiet(struct eng *e, uint32_t slot);
/* Its pages and state back (after any copy of them in flight). */
void eng__release_state(struct eng *e, struct eng_seq *s);
/* Reserve its pages (the first n_shared listed from `shared`, counted
 * again; the rest fresh: the plan counted them, so they fit) and a fresh
 * state: an admission or a restore. */
int eng__take_pages(struct eng *e, struct eng_seq *s, const uint32_t *shared, uint32_t n_shared,
                    uint32_t pages, struct ig_errbuf *eb);
/* Prefill it again from the start, its generated tokens replayed. */
int eng__replay(struct eng *e, struct eng_seq *s, const char *why, struct ig_errbuf *eb);

/* reuse.c: retained prompt checkpoints (docs/adr/0037) */
int engru_init(struct eng *e, struct ig_errbuf *eb);
void engru_free(struct eng *e);
/* At submit: the longest checkpoint its prompt begins with, counted on. */
void engru_match(struct eng *e, struct eng_seq *s);
/* An admission with no checkpoint: counted as a miss (once). */
void engru_admitted_whole(struct eng *e, const struct eng_seq *s);
/* Before a round's plan: claims whose checkpoint went are dropped; a
 * checkpoint is given up for the first waiting request that lacks pages. */
void engru_before_plan(struct eng *e);
/* The admission of `s`, which counts on a checkpoint: its pages (the full
 * ones shared), state and position from it. A prompt equal to the
 * checkpoint's takes its first token from the stored logits. A host
 * checkpoint whose image is no longer in its slot is given up: `s` stays
 * waiting, its claim dropped (*admitted false), and is planned again. */
int engru_admit(struct eng *e, struct eng_seq *s, const float **first, bool *admitted,
                struct ig_errbuf *eb);
/* The host slots' client, each round: a reply taken, the next request sent. */
void engru_host_turn(struct eng *e);
/* A prompt prefilled to `n` tokens (its end: a checkpoint; where it parts
 * from an earlier prompt: a shared prefix), the logits of token n-1:
 * retained; with cfg.prefixes_only a prompt's end leaves its tokens alone,
 * for later prompts to part from. */
void engru_capture(struct eng *e, struct eng_seq *s, uint32_t n, enum eng_ck_kind kind,
                   const float *logits);
/* Pages the checkpoints hold and no live sequence lists (what room could
 * take from them at most). */
uint64_t engru_retained_pages(const struct eng *e);
/* Its pages go back whole on a restore (nothing shared then). */
void engru_moved_out(struct eng_seq *s);

/* moves.c: the two move state machines */
/* Each direction's turn, at the start of a round. */
void engmv_turn(struct eng *e);
/* The window copies posted this round, collected after its compute. */
void engmv_collect(struct eng *e);
/* Stop the moves out whose need went before they landed. */
void engmv_stop_needless(struct eng *e);

#endif
