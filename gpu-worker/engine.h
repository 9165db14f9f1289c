/*
 * engine.h - requests, rounds and outputs on one model and one KV pool: the
 * part of the gpu-worker that applies the planner's rounds (roundplan.h) to the
 * model (model_cpu.h).
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
 * Not thread-safe: one thread submits, runs rounds and reads.
 */
#ifndef IGNIS_GPU_WORKER_ENGINE_H
#define IGNIS_GPU_WORKER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_pool.h"
#include "kvpool.h"
#include "model_cpu.h"
#include "sampler.h"
#include "roundplan.h"

struct eng_cfg {
	uint32_t lanes;              /* decode lanes, 1..64 */
	uint32_t chunk;              /* prefill tokens per round, >= 1 */
	uint64_t context;            /* the most tokens of one sequence */
	uint32_t default_max_tokens; /* a request's cap when it gives none */
	enum mdesc_kv_format fmt;
	uint32_t max_requests; /* live plus finished-and-kept; >= 1 */
	uint32_t eos;          /* the token that ends a generation, or UINT32_MAX */
	/* Told when a request finishes (may be NULL): the worker's event. */
	void (*on_finish)(void *ctx, uint64_t id, int finish, uint32_t prompt_tokens,
	                  uint32_t generated);
	void *ctx;
};

struct eng_req {
	const uint32_t *prompt;
	uint32_t n_prompt;   /* >= 1 */
	uint32_t max_tokens; /* 0: cfg.default_max_tokens */
	enum sched_class cls;
	struct smp_params smp;
};

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
};

struct eng_status {
	enum sched_phase phase;
	enum eng_finish finish;
	uint32_t generated;
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
	uint64_t finished_by[ENG_CANCELLED + 1]; /* by enum eng_finish (ENG_RUNNING: 0) */
	/* not cumulative: ttft[i] counts first tokens within (bound i-1, bound i] */
	uint64_t ttft[ENG_TTFT_NBUCKETS];
	uint64_t ttft_sum_us;
	uint32_t live, waiting, lanes_used;
	uint32_t prefill, ready; /* live requests in those phases (decode: lanes_used) */
	uint64_t free_pages;
	uint64_t pending_pages; /* what the waiting requests will reserve */
};

/* The bucket bounds above, for readers of eng_stats.ttft. */
extern const uint64_t eng_ttft_bounds_us[ENG_TTFT_NBOUNDS];

struct eng;

/* An engine over `d` and `kv` (borrowed; they outlive it), running its
 * rounds on backend `be`'s compute (its `round` entry) with `pool`
 * (borrowed; NULL runs inline). IG_E_INVAL naming the backend when it has
 * no compute for the model. */
int eng_create(struct eng **out, struct be *be, const struct mdl *d, struct kvpool *kv,
               struct cpool *pool, const struct eng_cfg *cfg, struct ig_errbuf *eb);
void eng_destroy(struct eng *e);

/* Check and queue a request. IG_E_INVAL naming the field (prompt empty, a
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

/* True when a round would run something. */
bool eng_busy(struct eng *e);

/* Up to `max` output tokens of request `id` from index `from` (0 is its
 * first generated token) into out; *n how many; st its state.
 * IG_E_NOTFOUND for an unknown or forgotten id; IG_E_INVAL for `from` past
 * what it generated. */
int eng_tokens(const struct eng *e, uint64_t id, uint32_t from, uint32_t max, uint32_t *out,
               uint32_t *n, struct eng_status *st, struct ig_errbuf *eb);

/* Stop a running request (its pages go back at once; its output so far is
 * kept, finish ENG_CANCELLED), or forget a finished one. IG_E_NOTFOUND for
 * an unknown id. */
int eng_cancel(struct eng *e, uint64_t id, struct ig_errbuf *eb);

void eng_stats(const struct eng *e, struct eng_stats *st);

const char *eng_finish_name(enum eng_finish f);

#endif
