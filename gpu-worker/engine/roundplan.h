/*
 * roundplan.h - the round planner: plain data in, plain data out
 * (the rules: docs/design.md, section 4).
 *
 * The planner looks at a snapshot of the live sequences, the free pages and
 * the state slots, and says what the next round does; the engine (engine.h)
 * applies it. It owns nothing, allocates nothing and changes nothing, so
 * every rule is a table-driven test of its own (tests/unit/test_sched.c).
 *
 * RANK: class (interactive above agent), then arrival (earlier above later).
 *
 * TWO RESOURCES, with the same rules: pages (a sequence's whole reservation)
 * and state slots (`slots`: one a sequence, for its fixed-size state on the
 * device; the engine has as many as lanes, the plan's lane_state line, ADR
 * 0027). A sequence holds a slot from its admission or restore until it is
 * done or its move out has landed: PREFILL, READY, DECODE, MOVING_OUT and
 * MOVING_IN hold one, WAITING, MOVED and DONE none.
 *
 * A ROUND, in this order:
 *  1. Admission. Waiting sequences and moved ones (in a tier) in rank order
 *     each reserve their whole reservation (`pages`) from the free pages and
 *     a free slot, all or nothing: a waiting one is admitted, a moved one
 *     restored (its windows come back; it sits out of rounds until the last
 *     lands). The first one that does not fit (pages or slot) stops
 *     admission: nobody ranked below it is admitted or restored before it (no
 *     starvation by smaller requests, and a moved sequence comes back before
 *     any newcomer ranked below it). Nobody is refused for room here; a
 *     sequence that can never fit was refused at submit (larger than the
 *     pool).
 *     The need. When the first that does not fit is a waiting sequence (a
 *     restore never moves anything), moves are on, and no victim is moving
 *     out already, the planner picks victims for what it lacks, the pages
 *     and the slot (docs/design.md, section 4): live sequences that hold
 *     pages, are not mid-move and rank below it; agent before interactive,
 *     then those off the decode round before lane holders, then the latest
 *     arrived first; taken in that order until their pages cover the pages
 *     it lacks and, when it lacks a slot, at least one is taken (each frees
 *     its slot). A need they cannot cover moves nothing. The victims move out
 *     (the engine's windows); their pages and slots are free once the last
 *     window lands, and the requester is admitted then.
 *  2. Lanes. Sequences whose prompt is done and that hold no lane ("ready")
 *     take the free lanes in rank order. A lane holder keeps its lane until
 *     it finishes (issue 7's moves are the only other way off a lane). With
 *     slots == lanes (the engine's) every ready sequence finds a free lane
 *     at once, since each slot holder holds at most one lane: READY lasts
 *     from the round its prompt ends (or its restore lands) to the next.
 *  3. Decode. Every lane holder runs one token.
 *  4. Prefill. Up to `chunk` prompt tokens, given in rank order to admitted
 *     sequences still prefilling (the just-admitted included): the highest
 *     ranked takes what it needs of the budget, the next the rest, and so on.
 *     A chunk that ends a prompt gives that sequence its first token. The
 *     chunks of sequences with rows_each take at most `rows` tokens in all
 *     (each token a row of logits); one that gets none this round waits.
 *
 * The decode tokens and the prefill chunks run together as one batch
 * (backend.h, the exactness contract of the table's round): which
 * sequences share a round never changes a token.
 */
#ifndef IGNIS_GPU_WORKER_ROUNDPLAN_H
#define IGNIS_GPU_WORKER_ROUNDPLAN_H

#include <stdbool.h>
#include <stdint.h>

/* Classes in rank order: a lower value ranks above. */
enum sched_class { SCHED_INTERACTIVE = 0, SCHED_AGENT = 1 };

enum sched_phase {
	SCHED_WAITING = 0, /* not admitted: no pages, no slot yet */
	SCHED_PREFILL,     /* admitted (pages and a slot), prompt not done */
	SCHED_READY,       /* prompt done, first token out, no lane (till the next round) */
	SCHED_DECODE,      /* holds a lane, one token a round */
	SCHED_DONE,        /* finished: pages and slot given back, output kept */
	SCHED_MOVING_OUT,  /* a victim: windows to a tier; pages, slot held; out of rounds */
	SCHED_MOVED,       /* in a tier: no pages, no slot; restored like an admission */
	SCHED_MOVING_IN,   /* restored: pages, slot reserved; windows coming back; out of rounds */
};

/* What the planner needs of one sequence. */
struct sched_seq {
	uint64_t id;
	enum sched_class cls;
	uint64_t arrival; /* a strictly increasing submit count */
	uint32_t prompt;  /* prompt tokens */
	uint32_t pages;   /* its whole reservation */
	uint32_t prefilled;
	enum sched_phase phase;
	bool stay;      /* not to be moved now (its last move was refused: the tier is full) */
	uint32_t split; /* 0, or a prompt position a chunk must end at (a shared
	                   prefix retained there: docs/adr/0037) */
	bool rows_each; /* each token of its chunks takes a row of logits (its
	                   prompt's log-probabilities: docs/adr/0063) */
};

struct sched_cfg {
	uint32_t lanes; /* decode lanes (1..64) */
	uint32_t slots; /* state slots (the engine gives lanes: ADR 0027) */
	uint32_t chunk; /* prefill tokens per round (>= 1) */
	uint32_t rows;  /* of those, the most that chunks of rows_each
	                   sequences take, in all */
	bool moves;     /* a tier takes victims: a need picks them */
};

/* One prefill chunk of a round: prompt tokens [from, from + n) of seq. */
struct sched_chunk {
	uint32_t seq; /* index into the snapshot */
	uint32_t from, n;
};

/*
 * A round's plan: indices into the snapshot given to sched_plan. The arrays
 * are the caller's, each with room for the snapshot's count.
 */
struct sched_round {
	uint32_t *admit, n_admit;     /* reserve their pages, then prefill */
	uint32_t *restore, n_restore; /* moved ones: reserve their pages, then move in */
	uint32_t *victims, n_victims; /* to move out, in this order, for the need */
	int64_t need;                 /* the waiting sequence they make room for; -1 none */
	uint64_t need_pages;          /* the pages it lacked (0: it lacked only a slot) */
	bool need_slot;               /* it lacked a state slot */
	uint32_t *grant, n_grant;     /* ready sequences that take a lane */
	uint32_t *decode, n_decode;   /* lane holders (granted ones included) */
	struct sched_chunk *prefill;  /* in rank order */
	uint32_t n_prefill, prefill_tokens;
	uint64_t pages_after; /* free pages once the admissions are made */
	uint32_t slots_after; /* free state slots then */
};

/* True when a ranks above b. */
bool sched_outranks(const struct sched_seq *a, const struct sched_seq *b);

/*
 * The victims for a need of sequence `req` (an index into seqs) that lacks
 * `need_pages` pages and, when `need_slot`, a state slot, in the order they
 * go (docs/design.md, section 4), into `out` (room for n); returns how many,
 * 0 when the eligible ones cannot cover the need (then nothing moves). Every
 * victim frees one slot once its move lands.
 */
uint32_t sched_victims(const struct sched_seq *seqs, uint32_t n, uint32_t req, uint64_t need_pages,
                       bool need_slot, uint32_t *out);

/*
 * Plan the next round for `n` sequences (any order; DONE ones are ignored)
 * with `free_pages` free; the lanes held are the DECODE ones, the slots held
 * those of the phases above (cfg->slots less them are free). `order` has
 * room for n indices (the rank order, kept for the caller). Returns the
 * tokens the round runs (decode + prefill); 0 means there is nothing to do
 * until something changes (a submit, a cancel, pages or slots given back).
 */
uint32_t sched_plan(const struct sched_cfg *cfg, const struct sched_seq *seqs, uint32_t n,
                    uint64_t free_pages, uint32_t *order, struct sched_round *out);

const char *sched_phase_name(enum sched_phase p);
const char *sched_class_name(enum sched_class c);

#endif
