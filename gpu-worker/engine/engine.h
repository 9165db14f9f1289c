/*
 * engine.h - requests, rounds and outputs on one model and one KV pool: the
 * part of the gpu-worker that applies the planner's rounds (roundplan.h) to a
 * model bound on a backend. It sees only the backend table (backend.h) and
 * its neutral types (devseq.h): no backend's own type, no device memory read
 * or written but through the table.
 *
 * A request is submitted with its prompt as token ids, its cap and its
 * sampling; it is checked at once (a prompt longer than the context, or a
 * reservation larger than the whole pool, is refused naming the figures;
 * anything else waits for room and is never refused for it). Each call of
 * eng_round runs one round: admissions, lanes, one decode token per lane
 * holder and the prefill chunks, all as one batch. Outputs are kept per
 * request until it is forgotten (eng_forget, or a cancel of a finished one),
 * read from any index as often as wanted: a reader that lost a reply asks
 * again from the same index and gets the same tokens.
 *
 * Exactness: a request's tokens depend only on the model, its prompt and its
 * sampling (seed included), never on the lanes, the chunk width or the other
 * requests in flight (tests/unit/test_engine.c).
 *
 * Moves (issue 7; docs/design.md, section 4; ADR 0017). With the kvstore daemon's
 * clients in the configuration, a waiting request that does not fit makes
 * room: the planner picks victims (roundplan.h), each sits out of rounds and
 * goes to KV-RAM (straight to KV-disk when KV-RAM cannot take it) as a
 * sequence image (seqimg.h) a window at a time, one window per round per
 * direction, each copied beside the round's compute on the backend's
 * transfer stream (be_ops.img_gather_async, img_scatter_async); its pages
 * are given back once its last window is committed, and the requester is
 * admitted then. A moved sequence comes back in rank order into free room
 * for its whole reservation, up to the in-window a round from KV-RAM or a
 * window a round from KV-disk, and resumes where it stopped (a lane holder
 * takes a lane again, a half-prefilled one goes on prefilling): the
 * same tokens as if it had never moved. A sequence whose record the tier
 * lost (given up with KV-disk off, or found torn or corrupt) is prefilled
 * again from the start, its generated tokens replayed: still the same
 * tokens. The kvstore daemon dying mid-move loses nothing: a move out that
 * did not land leaves the victim its pages; the clients resend to the
 * restarted daemon and a move in starts again.
 *
 * Not thread-safe: one thread submits, runs rounds and reads.
 */
#ifndef IGNIS_GPU_WORKER_ENGINE_H
#define IGNIS_GPU_WORKER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/devseq.h"
#include "gpu-worker/backend/kvpool.h"
#include "grammar/grammar.h"
#include "model/tokenizer.h"
#include "roundplan.h"
#include "sampler.h"

struct kvc;

/* What the engine tells its owner (the worker's events; may be ignored). */
enum eng_event_kind {
	ENG_EV_ADMITTED = 1, /* pages reserved, prefill starts */
	ENG_EV_EVICTED,      /* chosen as a victim for `for_id`: its move out starts */
	ENG_EV_MOVED,        /* a move ended: out (dir_out) or in, `bytes` in `windows` */
	ENG_EV_RESTORED,     /* back on the device, resuming */
	ENG_EV_LOST,         /* its tier record is gone: prefilled again from the start */
	ENG_EV_MOVE_REFUSED, /* the tier had no room for it: it stays, and runs on */
	ENG_EV_MOVE_STOPPED, /* its need went (admitted from room freed elsewhere, or
	                        gone) before the move landed: it keeps its pages and
	                        runs on, the tier drops what it got */
	/* prompt reuse (docs/adr/0037): `tokens` the checkpoint's, `slot` its
	 * retained slot, `why` a skip's or a give-up's reason */
	ENG_EV_REUSE_CAPTURED, /* a request's prompt retained at its end */
	ENG_EV_REUSE_CLAIMED,  /* a request started from a checkpoint: `tokens` not prefilled */
	ENG_EV_REUSE_GIVEN_UP, /* a checkpoint given up ("room": for an admission; "slot": for
	                          a newer capture) */
	ENG_EV_REUSE_SKIPPED,  /* a capture that could not be made ("no_slot", "no_page") */
};

struct eng_event {
	enum eng_event_kind kind;
	uint64_t id, for_id;
	int cls; /* enum sched_class */
	uint32_t pages;
	bool dir_out;     /* ENG_EV_MOVED */
	const char *tier; /* "ram" or "disk" (where a move in found it) */
	uint64_t bytes, duration_us;
	/* ENG_EV_MOVED: the rounds the move spanned, from its first request to
	 * the round that saw it land, and the decode tokens the other
	 * sequences made in them (a move never stops the others) */
	uint64_t rounds, others_tokens;
	uint32_t windows;
	const char *why;       /* ENG_EV_LOST, ENG_EV_REUSE_* */
	uint32_t tokens, slot; /* ENG_EV_REUSE_* */
	bool prefix;           /* ENG_EV_REUSE_*: a shared prefix, not a prompt's end */
};

struct eng_cfg {
	uint32_t lanes; /* decode lanes, 1..64 */
	/* Sequences that may hold a backend state at once (ADR 0027); 0: `lanes`,
	 * what the plan's lane_state line holds and the worker runs. More than
	 * lanes only where the model was bound with that many states (a
	 * benchmark keeping a prefilled sequence off the lanes). */
	uint32_t slots;
	uint32_t chunk;              /* prefill tokens per round, >= 1 */
	uint64_t context;            /* the most tokens of one sequence */
	uint32_t default_max_tokens; /* a request's cap when it gives none */
	enum mdesc_kv_format fmt;
	uint32_t max_requests; /* live plus finished-and-kept; >= 1 */
	uint32_t eos;          /* the token that ends a generation, or UINT32_MAX */
	/* Other tokens that end one (may be NULL): a real vocabulary's
	 * end-of-generation set (model/bpe.h), e.g. <|endoftext|> beside
	 * Qwen's eos <|im_end|>. Kept in the output as eos is; ENG_EOS. */
	bool (*is_eog)(void *ctx, uint32_t tok);
	/* Told when a request finishes (may be NULL): the worker's event. */
	void (*on_finish)(void *ctx, uint64_t id, int finish, uint32_t prompt_tokens,
	                  uint32_t generated);
	/* Told each token a request generates, before its end of sequence and
	 * its cap are looked at (may be NULL): the request's id and its output
	 * out[0..n), the new token last. Returns n to go on, or the tokens to
	 * keep (< n): the request ends there with finish ENG_STOP, its output
	 * cut (the worker's stop strings). */
	uint32_t (*on_token)(void *ctx, uint64_t id, const uint32_t *out, uint32_t n);
	void *ctx;
	/* Moves: two clients of the kvstore daemon, one per direction (both
	 * NULL: no moves, a request that does not fit waits), and the window
	 * sizes (--reuse-move-out-window-bytes, --reuse-move-in-window-bytes). */
	struct kvc *kv_out, *kv_in;
	uint64_t window_out, window_in;
	/* Prompt reuse (docs/adr/0037): `retained_device` device retained slots
	 * of `retained_slot_bytes` each in `retained` (the plan's retained_slots
	 * line); 0 slots: no checkpoint is captured or claimed. */
	uint32_t retained_device;
	uint64_t retained_slot_bytes;
	struct be_region retained;
	/* Host retained slots (docs/adr/0038): `retained_host` slots of the
	 * kvstore daemon's (kv_config's retained_slots), reached through
	 * `kv_slots` (NULL: none). A checkpoint's state goes there, its pages
	 * stay in the pool as a device checkpoint's. `reuse_ns` names the
	 * model file, its KV format and tokenizer in every slot's model_id and
	 * key, so that no other model's slot is claimed. An interactive
	 * checkpoint idle `interactive_ttl_s` in a host slot ranks as an
	 * agent's when one is given up. */
	uint32_t retained_host;
	struct kvc *kv_slots;
	uint64_t reuse_ns;
	uint64_t interactive_ttl_s;
	/* --reuse-prompt off with slots named (docs/adr/0037, "Reuse off with
	 * slots named"): the slots hold shared prefixes only. A prompt's end
	 * is not retained (no checkpoint); its tokens alone are remembered, so
	 * that a later prompt that parts from it retains the prefix there. */
	bool prefixes_only;
	/* A nonce that keeps this engine's keys in the tiers apart from an
	 * earlier worker's (a restarted worker's ids start again at 1). */
	uint32_t tier_nonce; /* the owner in every key (1..2^31-1, msg.h kv_sweep) */
	void (*on_event)(void *ctx, const struct eng_event *ev);
	/* Constrained sampling (docs/adr/0057): what the model's ids are as
	 * bytes (NULL: a request with a grammar is refused), and who is told
	 * when a request no longer needs its grammar (may be NULL: the caller
	 * keeps every grammar it gave until eng_destroy). */
	const struct tok_vocab *vocab;
	void (*grammar_done)(void *ctx, struct grammar *g);
};

struct eng_req {
	const uint32_t *prompt;
	uint32_t n_prompt;   /* >= 1 */
	uint32_t max_tokens; /* 0: cfg.default_max_tokens */
	enum sched_class cls;
	struct smp_params smp;
	/* Constrained sampling (docs/adr/0057), optional: each token is picked
	 * among those whose bytes the grammar accepts next (its end-of-
	 * generation tokens once the grammar may end). With a trigger
	 * (1..GM_MAX_TRIGGER bytes) the output is free until it contains the
	 * trigger, and the bytes after it follow the grammar. Once eng_submit
	 * accepts the request the grammar is borrowed until cfg.grammar_done is
	 * called with it, once (when the request finishes, or the engine is
	 * destroyed); a refused submit leaves it the caller's. */
	struct grammar *grammar;
	const void *trigger;
	uint32_t trigger_len;
	/* The prompt's log-probabilities too (docs/adr/0063; completions'
	 * `echo` with `logprobs`): each prompt token's under the logits of the
	 * tokens before it, for eng_prompt_logprobs once eng_logprobs_ask is
	 * called. Its prompt is prefilled whole, never taken from a retained
	 * checkpoint or another request's prefill, and each of its prefill
	 * chunks takes a row of logits per token (a round holds at most
	 * ENG_ECHO_ROWS such rows). */
	bool echo;
};

/* Rows of logits a round gives the prefill chunks of echo requests, in
 * all: what a chunk of theirs may hold (its logits buffer grows by this
 * many vocabulary rows at the first such request). */
#define ENG_ECHO_ROWS 64u

/* What a submit answers. */
struct eng_admission {
	uint64_t id;
	uint32_t prompt_tokens, max_tokens, pages;
};

enum eng_finish {
	ENG_RUNNING = 0,
	ENG_LENGTH,    /* its max_tokens */
	ENG_CONTEXT,   /* its cap was cut at the context and reached */
	ENG_EOS,       /* the model said end */
	ENG_CANCELLED, /* a cancel */
	ENG_STOP,      /* cfg.on_token cut it (a stop string) */
	ENG_GRAMMAR,   /* its grammar allowed no next token (a matcher bound: gm_error) */
};

struct eng_status {
	enum sched_phase phase;
	enum eng_finish finish;
	uint32_t generated;
	uint32_t cached; /* prompt tokens taken from a checkpoint, not prefilled */
};

/* Time to first token (submit to the first generated token), counted in
 * buckets whose upper bounds are these microseconds, the last one +Inf:
 * Prometheus's usual latency ladder, stretched to 2 minutes because a request
 * may wait long for room. */
#define ENG_TTFT_BOUNDS_US                                                                         \
	{                                                                                          \
		5000u, 10000u, 25000u, 50000u, 100000u, 250000u, 500000u, 1000000u, 2500000u,      \
		    5000000u, 10000000u, 30000000u, 60000000u, 120000000u                          \
	}
#define ENG_TTFT_NBOUNDS  14
#define ENG_TTFT_NBUCKETS (ENG_TTFT_NBOUNDS + 1)

/* Counters since eng_create, and the state now (live .. pending_pages). */
struct eng_stats {
	uint64_t rounds, decode_tokens, prefill_tokens, admitted, finished;
	uint64_t submitted;        /* requests accepted by eng_submit */
	uint64_t prompt_tokens;    /* of the accepted requests */
	uint64_t generated_tokens; /* every token emitted, cancelled requests' included */
	uint64_t finished_by[ENG_GRAMMAR + 1]; /* by enum eng_finish (ENG_RUNNING: 0) */
	/* not cumulative: ttft[i] counts first tokens within (bound i-1, bound i] */
	uint64_t ttft[ENG_TTFT_NBUCKETS];
	uint64_t ttft_sum_us;
	uint32_t live, waiting, lanes_used;
	uint32_t prefill, ready; /* live requests in those phases (decode: lanes_used) */
	uint64_t free_pages;
	uint64_t retained_pages; /* held by retained checkpoints and no live sequence */
	uint64_t pending_pages;  /* what the waiting requests will reserve */
	/* moves */
	uint64_t moves_out, moves_in, move_out_bytes, move_in_bytes;
	uint64_t move_out_windows, move_in_windows;
	uint64_t lost;                         /* records the tier lost: prefilled again */
	uint64_t move_retries;                 /* reserves refused (tier full) or moves restarted */
	uint64_t moves_stopped;                /* moves out whose need went before they landed */
	uint32_t moving_out, moved, moving_in; /* live requests in those phases */
	/* prompt reuse */
	uint64_t reuse_captures, reuse_hits, reuse_misses; /* misses: no checkpoint matched */
	uint64_t reuse_misses_given_up; /* claims whose checkpoint went before admission */
	uint64_t reused_tokens;         /* prompt tokens not prefilled */
	uint64_t reused_prefix_tokens;  /* ... of them from shared prefixes */
	uint64_t reuse_prefixes;        /* shared prefixes captured */
	uint64_t reuse_skips_slot, reuse_skips_page;       /* captures skipped, by reason */
	uint64_t reuse_given_up_room, reuse_given_up_slot; /* checkpoints given up, by reason */
	uint32_t checkpoints, retained_slots;              /* retained now; the slots */
	/* ... the host slots' part */
	uint32_t host_checkpoints, retained_host;
	uint64_t reused_host_tokens, reused_host_prefix_tokens;
	uint64_t reuse_skips_host_busy, reuse_skips_host_refused;
	uint64_t reuse_given_up_tier;    /* the kvstore gave it up or lost it */
	uint64_t reuse_host_claim_fails; /* a claimed image no longer there (given_up too) */
	/* constrained sampling: tokens picked under a grammar, and the time
	 * their masks took (the vocabulary's trie built once, not counted) */
	uint64_t grammar_tokens, grammar_mask_us;
	uint32_t grammar_live; /* live requests with a grammar */
};

/* The bucket bounds above, for readers of eng_stats.ttft. */
extern const uint64_t eng_ttft_bounds_us[ENG_TTFT_NBOUNDS];

struct eng;

/* An engine over model `d`, bound on backend `be` (be_ops.model_bind, with
 * rounds of at most cfg->lanes + cfg->chunk tokens), and `kv` (all borrowed;
 * they outlive it), running its rounds on the backend's compute and its
 * moves' window copies on the backend's transfer stream. IG_E_INVAL naming
 * the backend when it has no compute for the model (or, with moves, no image
 * copies). */
int eng_create(struct eng **out, struct be *be, const struct be_model *d, struct kvpool *kv,
               const struct eng_cfg *cfg, struct ig_errbuf *eb);
void eng_destroy(struct eng *e);

/* Check and queue a request. With retained slots (checkpoints on), one whose
 * prompt equals that of a live request still waiting or prefilling is held
 * until that request's prompt ends, then starts from the checkpoint
 * captured there: n requests of one prompt (OpenAI's `n`) prefill it once
 * (docs/adr/0059); the tokens are those of each alone. IG_E_INVAL naming the field (prompt empty, a
 * token outside the vocabulary, sampling out of range), IG_E_REQ_CONTEXT
 * when the prompt leaves no room in the context for one token, IG_E_REQ_POOL
 * when its reservation is larger than the whole pool, IG_E_BUSY
 * when max_requests are live. A finished request is forgotten, oldest
 * first, to make a slot. */
int eng_submit(struct eng *e, const struct eng_req *r, struct eng_admission *out,
               struct ig_errbuf *eb);

/* Run one round. *ran is the tokens it ran (0: nothing to do until a submit
 * or a cancel). An error is the model's or host memory's, named in eb. */
int eng_round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb);

/* True when a round would run something (a move in progress included). */
bool eng_busy(struct eng *e);

/* Up to `max` output tokens of request `id` from index `from` (0 is its
 * first generated token) into out; *n how many; st its state.
 * IG_E_NOTFOUND for an unknown or forgotten id; IG_E_INVAL for `from` past
 * what it generated. */
int eng_tokens(const struct eng *e, uint64_t id, uint32_t from, uint32_t max, uint32_t *out,
               uint32_t *n, struct eng_status *st, struct ig_errbuf *eb);

/* The output of request `id` as the engine holds it: *out points at its
 * st->generated tokens (NULL when none), valid until the next eng_round,
 * eng_submit or eng_cancel. IG_E_NOTFOUND for an unknown or forgotten id
 * (eb may be NULL). */
int eng_output(const struct eng *e, uint64_t id, const uint32_t **out, struct eng_status *st,
               struct ig_errbuf *eb);

/* Keep the log-probabilities of each token request `id` generates
 * (docs/adr/0053): the sampled token's and its `top` (0..
 * SMP_TOP_LOGPROBS_MAX) likeliest ids' (smp_logprobs, from the logits the
 * pick reads), for eng_logprobs. Asked right after eng_submit, before the
 * next eng_round; without it nothing is computed or kept. IG_E_INVAL for
 * a `top` out of range or a request that has generated already,
 * IG_E_NOTFOUND for an unknown id, IG_E_NOMEM (the request stays, without
 * them). */
int eng_logprobs_ask(struct eng *e, uint64_t id, uint32_t top, struct ig_errbuf *eb);

/* The log-probabilities of token `i` (< st->generated of eng_output) of
 * request `id`, asked with eng_logprobs_ask: *lp the sampled token's, top[0..*n)
 * its top list (smp_logprobs: at most the request's top_logprobs). The
 * same bits on every read, whatever lanes, chunks or moves made the token.
 * IG_E_NOTFOUND for an unknown or forgotten id, IG_E_INVAL for a request
 * without logprobs or an `i` past its output (eb may be NULL). */
int eng_logprobs(const struct eng *e, uint64_t id, uint32_t i, double *lp, struct smp_logprob *top,
                 uint32_t *n, struct ig_errbuf *eb);

/* Request `id`'s prompt: *tokens its *n tokens (valid until the next
 * eng_round, eng_submit or eng_cancel), and *ready how many of its
 * positions have their log-probabilities (eng_prompt_logprobs; position 0
 * has none and counts as ready): 0 for a request without echo, *n once
 * its first token exists. IG_E_NOTFOUND for an unknown or forgotten id (eb
 * may be NULL). */
int eng_prompt(const struct eng *e, uint64_t id, const uint32_t **tokens, uint32_t *n,
               uint32_t *ready, struct ig_errbuf *eb);

/* The log-probabilities of prompt token `i` (below eng_prompt's *ready) of
 * request `id`, submitted with echo and asked with eng_logprobs_ask: *lp
 * the prompt token's under the logits after tokens [0, i), top[0..*n) the
 * top list of those logits (smp_logprobs, as eng_logprobs). Position 0 has
 * none: *n 0 and *lp 0, IG_E_OK. The same bits as eng_logprobs gives the
 * same token generated after the same tokens, whatever the chunks, lanes
 * or moves. IG_E_NOTFOUND for an unknown id, IG_E_INVAL for a request
 * without echo or logprobs or an `i` not ready (eb may be NULL). */
int eng_prompt_logprobs(const struct eng *e, uint64_t id, uint32_t i, double *lp,
                        struct smp_logprob *top, uint32_t *n, struct ig_errbuf *eb);

/* Stop a running request (its pages go back at once; its output so far is
 * kept, finish ENG_CANCELLED), or forget a finished one. IG_E_NOTFOUND for
 * an unknown id. */
int eng_cancel(struct eng *e, uint64_t id, struct ig_errbuf *eb);

void eng_stats(const struct eng *e, struct eng_stats *st);
/* The pool's invariants over every live sequence and retained checkpoint
 * (kvpool_check): for the tests, after any round. */
bool eng_check(const struct eng *e, struct ig_errbuf *eb);

const char *eng_finish_name(enum eng_finish f);

#endif
