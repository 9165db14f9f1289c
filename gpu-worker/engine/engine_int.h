/*
 * engine_int.h - what the engine's three files share: engine.c (requests,
 * rounds and outputs; the public face, engine.h), moves.c (the move
 * machines: docs/adr/0017), reuse.c (retained prompt checkpoints:
 * docs/adr/0037, 0038) and constrain.c (grammars: docs/adr/0057). Not a
 * public header: engine.h is.
 *
 * Names. `eng_` is the public API (engine.h), engine.c's. Every other
 * function of the engine carries its file's prefix and two underscores:
 * `eng__` (engine.c), `engmv__` (moves.c), `engru__` (reuse.c), `engcs__`
 * (constrain.c), as libuv
 * has uv_ and uv__ (docs/adr/0044). Those this header declares are the ones
 * another file calls; the rest are static. Types and constants this header
 * shares keep the engine's `eng_`/`ENG_`; a type one file keeps to itself
 * takes its file's prefix (struct engmv).
 *
 * Who writes what. Each part of the shared structs below names its writer;
 * a part that names none is engine.c's. The others may read any of it. Some
 * parts have more than one writer, each for the transitions it owns:
 *   - eng_seq.sch.phase: engine.c WAITING at submit, PREFILL at an
 *     admission or a replay (eng__replay), READY at a prompt's end, DECODE
 *     for a lane, DONE at the end; moves.c MOVING_OUT, MOVED, MOVING_IN and
 *     back to `resume`; reuse.c PREFILL or READY at a claim's admission.
 *   - eng_seq.sch.pages, .prefilled and .split: engine.c at submit, after
 *     each chunk and at a replay; reuse.c for a claim (the shared pages do
 *     not count, the checkpoint's tokens are prefilled; the whole
 *     reservation again when the claim goes or the sequence moves out) and
 *     where a prompt parts from a known one (split).
 *   - eng_seq.ms: engine.c's helpers take and give back its pages and state
 *     (eng__take_pages, eng__release_state, eng__replay: whoever calls);
 *     moves.c (a restore's image) and reuse.c (a claim) write them through
 *     the backend and set its position.
 *   - eng.st: each file counts its own figures (moves.c the moves', reuse.c
 *     the reuse ones, engine.c the rest).
 */
#ifndef IGNIS_GPU_WORKER_ENGINE_INT_H
#define IGNIS_GPU_WORKER_ENGINE_INT_H

#include "engine.h"

struct engmv;

struct eng_seq {
	bool used;
	struct sched_seq sch; /* the planner's view; sch.id is the request id */
	struct be_seq ms;     /* pages and fixed-size state while admitted */
	bool have_state;
	struct smp_params smp;
	struct smp_state rng; /* moves.c saves it into an image and loads it back */
	uint32_t *prompt;
	uint32_t *out, n_out, cap;
	/* log-probabilities (eng_req.logprobs), token i's at lp[i * (1 + lp_k)]:
	 * the sampled token's, then its top list's lp_n[i] entries; NULL when
	 * the request asked for none */
	struct smp_logprob *lp;
	uint8_t *lp_n;
	uint32_t lp_k;
	/* the prompt's (eng_req.echo; docs/adr/0063), position i's at
	 * plp[i * (1 + lp_k)] as lp's, for positions [1, plp_ready): NULL
	 * until eng_logprobs_ask */
	bool echo;
	struct smp_logprob *plp;
	uint8_t *plp_n;
	uint32_t plp_ready;
	bool cap_cut; /* cap shortened to fit the context */
	enum eng_finish finish;
	uint64_t finished_at; /* finish order: the oldest is forgotten first */
	uint64_t submit_us;   /* clk_mono_us at its submit, for the time to first token */
	uint32_t n_prompt;    /* the request's prompt (sch.prompt counts a replay) */
	uint32_t *feed;       /* what prefill feeds: the prompt, or a replay */
	bool replay_skip;     /* the replay ends on a token already generated */
	/* The window copy of its pages and state on the backend's transfer
	 * stream: the latest ticket (waiting for it waits for every earlier
	 * one), 0 when none. moves.c sets it when it posts a copy and clears
	 * it when it collects that copy; eng__xfer_wait waits for it, and
	 * clears it, before the pages or the state change hands. What the
	 * engine knows of a move's copies is this, never a move's state. */
	uint64_t xfer;
	/* moves.c's */
	enum sched_phase resume; /* where a moved sequence goes on */
	bool in_tier;            /* the kvstore may hold a record of it */
	uint64_t for_id;         /* the need it was moved for */
	uint64_t stay_until;     /* not a victim before this round (a move refused) */
	/* reuse.c's (engine.c starts them at submit: pages_all the whole
	 * reservation, nothing cached, no claim lost) */
	uint32_t pages_all; /* its whole reservation, with nothing shared */
	int32_t ck;         /* waiting: the checkpoint it will start from, or -1 */
	uint32_t ck_gen;    /* ... while that entry holds the same checkpoint */
	uint32_t cached;    /* prompt tokens it took from a checkpoint */
	bool ck_lost;       /* its claim went before admission (counted given up) */
	/* Held (docs/adr/0059): the live request with the same prompt whose
	 * prefill it waits for, to claim that prompt's checkpoint instead of
	 * prefilling it again; 0 when not held. A held request is out of the
	 * planner's view (no room, no lane) until reuse.c lets it go. */
	uint64_t twin;
	/* constrain.c's: its grammar (eng_req.grammar, NULL: none) and the
	 * matcher over what it generated, from submit until it finishes. The
	 * matcher is a function of the output alone and stays here while the
	 * sequence moves (an image holds pages and backend state): a sequence
	 * back from a tier, or replayed, goes on from the same state. */
	struct grammar *g;
	struct gm_lazy *gz; /* with a trigger */
	struct gmatch *gm;  /* without */
};

/* ---- reuse.c's types ------------------------------------------------------- */

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

/* ---- the engine ------------------------------------------------------------ */

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
	float *logits; /* logit_rows rows of the vocabulary: max_steps, and
	                  ENG_ECHO_ROWS more from the first echo request on */
	uint32_t logit_rows;
	struct smp_scratch *smp_scratch;
	uint32_t max_steps;

	struct eng_stats st; /* each file its own figures (above) */

	/* moves.c's: the two move machines, their victim and restore queues
	 * and the tier keys to drop; NULL when moves are off (no kvstore
	 * clients in the configuration) */
	struct engmv *mv;

	/* reuse.c's: one checkpoint a device retained slot (entries
	 * 0..n_ck_dev), then one a host slot (n_ck_dev..n_ck) */
	struct eng_ckpt *ck;
	uint32_t n_ck, n_ck_dev;
	uint64_t ck_clock;
	struct eng_host hst;
	/* with prefixes only: as many prompts' ends remembered as there are
	 * slots (what checkpoints would remember), the least recent replaced */
	struct eng_end *ends;
	uint32_t n_ends;

	/* constrain.c's: the vocabulary's trie (built at the first request
	 * with a grammar), a mask's words, the end-of-generation ids */
	struct gvocab *gv;
	uint32_t *mask;
	uint32_t *eog, n_eog;
};

/* ---- engine.c -------------------------------------------------------------- */

struct eng_seq *eng__find(const struct eng *e, uint64_t id);
void eng__event(struct eng *e, const struct eng_event *ev);
void eng__seq_event(struct eng *e, enum eng_event_kind kind, const struct eng_seq *s);
/* Wait for the window copy of its pages and state in flight (s->xfer), if
 * one is: they are about to change hands, or to be written by a round. */
void eng__xfer_wait(struct eng *e, struct eng_seq *s);
/* Its pages and state back (after any copy of them in flight). */
void eng__release_state(struct eng *e, struct eng_seq *s);
/* Reserve its pages (the first n_shared listed from `shared`, counted
 * again; the rest fresh: the plan counted them, so they fit) and a fresh
 * state: an admission or a restore. */
int eng__take_pages(struct eng *e, struct eng_seq *s, const uint32_t *shared, uint32_t n_shared,
                    uint32_t pages, struct ig_errbuf *eb);
/* Prefill it again from the start, its generated tokens replayed (a fresh
 * state, the pages it holds). */
int eng__replay(struct eng *e, struct eng_seq *s, const char *why, struct ig_errbuf *eb);

/* ---- moves.c: the two move machines (docs/adr/0017) ------------------------- */

/* Moves on when cfg names the kvstore clients (e->mv set, the sweep of an
 * earlier worker's records sent); e->mv stays NULL when it names none.
 * IG_E_INVAL for half a configuration, a nonce out of range or a backend
 * with no image copies; IG_E_NOMEM. Called once the slots exist. */
int engmv__init(struct eng *e, struct ig_errbuf *eb);
/* The copies in flight waited for, everything freed; e->mv NULL. */
void engmv__release(struct eng *e);
/* Has a move something to do: a step under way, a victim or a restore
 * queued, a tier key to drop? False with moves off. */
bool engmv__busy(const struct eng *e);
/* Victim `s`, chosen for request `for_id`, sits out from now on, queued to
 * move out (moves on). */
void engmv__evict(struct eng *e, struct eng_seq *s, uint64_t for_id);
/* Moved `s` has its pages again (eng__take_pages): queued to move in. */
void engmv__restore(struct eng *e, struct eng_seq *s);
/* `s` ends: what a tier may hold of it is dropped. */
void engmv__ended(struct eng *e, struct eng_seq *s);
/* At the start of a round: the moves out whose need went are stopped, then
 * each direction takes its turn. Nothing with moves off. */
void engmv__turn(struct eng *e);
/* After the round's compute: the window copies posted at its start. */
void engmv__collect(struct eng *e);

/* ---- reuse.c: retained prompt checkpoints (docs/adr/0037, 0038) ------------ */

int engru__init(struct eng *e, struct ig_errbuf *eb);
void engru__release(struct eng *e);
/* Has the host slots' client a reply to take or a request to send? */
bool engru__busy(const struct eng *e);
/* At submit: the longest checkpoint its prompt begins with, counted on. */
void engru__match(struct eng *e, struct eng_seq *s);
/* At submit, after engru__match: a request whose prompt a live request
 * still waiting or prefilling has too, with nothing retained to claim
 * for the whole of it, is held for that request's checkpoint (s->twin)
 * where one can be captured (slots, checkpoints on). */
void engru__hold(struct eng *e, struct eng_seq *s);
/* An admission with no checkpoint: counted as a miss (once). */
void engru__admitted_whole(struct eng *e, const struct eng_seq *s);
/* Before a round's plan: claims whose checkpoint went are dropped; a
 * checkpoint is given up for the first waiting request that lacks pages. */
void engru__before_plan(struct eng *e);
/* The admission of `s`, which counts on a checkpoint: its pages (the full
 * ones shared), state and position from it. A prompt equal to the
 * checkpoint's takes its first token from the stored logits. A host
 * checkpoint whose image is no longer in its slot is given up: `s` stays
 * waiting, its claim dropped (*admitted false), and is planned again. */
int engru__admit(struct eng *e, struct eng_seq *s, const float **first, bool *admitted,
                 struct ig_errbuf *eb);
/* A prompt prefilled to `n` tokens (its end: a checkpoint; where it parts
 * from an earlier prompt: a shared prefix), the logits of token n-1:
 * retained; with cfg.prefixes_only a prompt's end leaves its tokens alone,
 * for later prompts to part from. */
void engru__capture(struct eng *e, struct eng_seq *s, uint32_t n, enum eng_ck_kind kind,
                    const float *logits);
/* Pages the checkpoints hold and no live sequence lists (what room could
 * take from them at most). */
uint64_t engru__retained_pages(const struct eng *e);
/* Its pages go back whole on a restore (nothing shared then). */
void engru__moved_out(struct eng_seq *s);

/* ---- constrain.c: grammars (docs/adr/0057) ----------------------------------- */

/* At submit, r->grammar set: its matcher started (the vocabulary's trie
 * built first if need be). IG_E_INVAL without cfg.vocab or for a bad
 * trigger, IG_E_NOMEM. */
int engcs__attach(struct eng *e, struct eng_seq *s, const struct eng_req *r, struct ig_errbuf *eb);
/* Its matcher freed and its grammar handed back (cfg.grammar_done); nothing
 * without one. */
void engcs__detach(struct eng *e, struct eng_seq *s);
/* The ids its grammar allows next, into e->mask (end-of-generation ids
 * when it may end): true when one is allowed, false when none is (the
 * sequence then finishes ENG_GRAMMAR). */
bool engcs__mask(struct eng *e, struct eng_seq *s);
/* The picked token's bytes fed to its matcher (an end-of-generation token
 * feeds none): false when the grammar refuses them (never for a token the
 * mask allowed). */
bool engcs__accept(struct eng *e, struct eng_seq *s, uint32_t tok);
void engcs__release(struct eng *e);

#endif
