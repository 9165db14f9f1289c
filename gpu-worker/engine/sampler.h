/*
 * sampler.h - picking the next token from logits, per sequence, so that a
 * sequence moved to host RAM or disk and back continues bit-exactly.
 *
 * A pick is a pure function of (params, logits, u), where u in [0, 1) is the
 * one draw of the sequence's RNG that the pick consumes (smp_pick_at); the
 * RNG's whole state is struct smp_state, serialised by smp_state_save.
 *
 * The RNG is splitmix64 (Steele, Lea, Flood 2014; the seeding generator of
 * xoshiro): the state is one 64-bit word, each draw adds the golden gamma
 * 0x9E3779B97F4A7C15 and mixes, and u = (z >> 11) * 2^-53. Every pick, greedy
 * ones included, draws exactly once, so after k picks rng = seed + k * gamma
 * (mod 2^64) whatever the params were: a resumed sequence may even change
 * its params and stay on the same stream.
 *
 * The rules of a pick, in order:
 *   1. temperature 0 or top_k 1: greedy, the largest logit, ties to the
 *      lowest id. NaN is never picked; all NaN picks id 0 (the lowest id).
 *   2. candidates are the ids whose logit is neither NaN nor -inf (a -inf
 *      logit is masked: it never carries mass). None: the greedy pick (so
 *      all NaN or -inf gives the lowest non-NaN id, or 0).
 *   3. keep the top_k largest logits (0: all), ties to the lower id.
 *   4. weights exp((logit - max) / temperature) in double; +inf logits share
 *      all the mass equally when there are any.
 *   5. sort by logit descending, ties to the lower id; keep the smallest
 *      prefix whose share of the weight reaches top_p (at least one; top_p
 *      >= 1 keeps all). "Reaches" allows 1e-6 of slack: a float top_p of 0.8
 *      is 0.800000012, and probabilities 0.5 and 0.3 given as logits do sum
 *      to 0.8 only to about 1e-8, yet they are meant to reach it.
 *   6. walk the kept prefix in that order, summing weights, and pick the
 *      first whose running sum exceeds u times the kept weight (the last
 *      kept one with a positive weight when rounding leaves none).
 *
 * Bit-exactness: the arithmetic is IEEE double in a fixed order (no fused
 * multiply-add can form), with one libm call, exp. Resuming under the same
 * libm gives the same picks; another libm's exp may differ in the last bit,
 * which changes a pick only for a draw within about 1e-16 of a boundary.
 */
#ifndef IGNIS_GPU_WORKER_SAMPLER_H
#define IGNIS_GPU_WORKER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct smp_params {
	float temperature; /* [0, 100]; 0 is greedy */
	uint32_t top_k;    /* [0, vocab]; 0 keeps all, 1 is greedy */
	float top_p;       /* (0, 1]; 1 keeps all */
	uint64_t seed;     /* where the sequence's RNG starts */
};

/* A sequence's sampler state: a plain struct, copied freely. */
struct smp_state {
	uint64_t rng;  /* splitmix64 state: seed + step * gamma */
	uint64_t step; /* picks made so far */
};

/*
 * The serialised state, little-endian. On disk and in sequence images: never
 * renumber; a new layout takes a new version.
 *
 *   offset  size  field
 *   0       1     version, SMP_STATE_VERSION (1)
 *   1       7     reserved, zero
 *   8       8     rng
 *   16      8     step
 */
#define SMP_STATE_VERSION 1u
#define SMP_STATE_BYTES   24u

/* The largest temperature smp_params_check accepts: far past the point
 * where every candidate weighs about the same. */
#define SMP_TEMPERATURE_MAX 100.0f

/* Check params against a vocabulary of `vocab` ids: IG_E_INVAL naming the
 * field and the accepted range. smp_pick assumes checked params. */
int smp_params_check(const struct smp_params *p, uint32_t vocab, struct ig_errbuf *eb);

/*
 * Set `p` from params as sent (the wire's f64 fields, a command line's
 * numbers): temperature 0..100 and top_p above 0 up to 1, checked on the
 * doubles, so that a refusal names the value sent (in its shortest exact
 * form: "top_p 1.0000001", "temperature 1e+40"), not its float. A positive
 * value below the smallest float (1e-300) becomes the smallest float,
 * 2^-149, which picks as the value sent does: such a top_p keeps the first
 * candidate (rule 5's slack is 1e-6), such a temperature weighs every
 * candidate below the largest logit at 0. IG_E_INVAL leaves `p` untouched.
 * top_k is checked against the vocabulary later, by smp_params_check.
 */
int smp_params_set(struct smp_params *p, double temperature, uint32_t top_k, double top_p,
                   uint64_t seed, struct ig_errbuf *eb);

/* Start a sequence's state from p->seed. */
void smp_init(struct smp_state *st, const struct smp_params *p);

/* Write `st` in the layout above. */
void smp_state_save(const struct smp_state *st, uint8_t out[SMP_STATE_BYTES]);

/* Read a state written by smp_state_save. A version other than
 * SMP_STATE_VERSION, or reserved bytes not zero, is IG_E_INVAL and leaves
 * `st` untouched. */
int smp_state_load(struct smp_state *st, const uint8_t in[SMP_STATE_BYTES], struct ig_errbuf *eb);

/*
 * Working memory of a pick: the caller allocates smp_scratch_bytes(vocab)
 * bytes (malloc's alignment is enough), casts them to struct smp_scratch *,
 * and may reuse them for every pick of that vocabulary size or less; it owns
 * and frees them. A pick allocates nothing.
 */
struct smp_scratch;
size_t smp_scratch_bytes(uint32_t vocab);

/*
 * Pick a token from logits[0..vocab) (vocab >= 1; 0 returns 0) with checked
 * params, drawing once from `st` and advancing it by one step. The logits
 * are only read.
 */
uint32_t smp_pick(const struct smp_params *p, struct smp_state *st, const float *logits,
                  uint32_t vocab, struct smp_scratch *scratch);

/* The pick for the draw `u` in [0, 1), touching no state: smp_pick is this
 * with the next draw of the sequence's RNG. */
uint32_t smp_pick_at(const struct smp_params *p, double u, const float *logits, uint32_t vocab,
                     struct smp_scratch *scratch);

/*
 * Constrained picks (docs/adr/0057): the same rules over the ids whose bit
 * is set in allow[0..(vocab + 31) / 32] (bit i % 32 of word i / 32), as if
 * every other logit were -inf, but without writing the logits: rule 1's
 * greedy pick is the largest allowed logit, rule 2's candidates the
 * allowed ids that are neither NaN nor -inf (none: the greedy pick among
 * the allowed, or 0 when none is allowed: the caller checks that one is).
 * The draw is the same one, so a constrained sequence stays on its RNG
 * stream, and a mask that allows every id picks as smp_pick does.
 */
uint32_t smp_pick_masked(const struct smp_params *p, struct smp_state *st, const float *logits,
                         uint32_t vocab, const uint32_t *allow, struct smp_scratch *scratch);
uint32_t smp_pick_masked_at(const struct smp_params *p, double u, const float *logits,
                            uint32_t vocab, const uint32_t *allow, struct smp_scratch *scratch);

/*
 * Log-probabilities (docs/adr/0053): the model's own distribution over the
 * logits a pick read, log_softmax(logits) in double, before temperature,
 * top_k and top_p (OpenAI's and vLLM's default, "raw" logprobs), so that a
 * greedy pick has them too and they do not change with the sampling.
 *
 *   m    the largest logit that is not NaN (ids in order)
 *   s    the sum over ids in ascending order of exp((double)x - m), NaN
 *        skipped (-inf adds exp(-inf) = 0)
 *   lp   ((double)x - m) - log(s); NaN and -inf logits have -inf
 *
 * s >= 1 (the largest adds exp(0) = 1), so every lp <= 0 exactly. With +inf
 * logits (the sampler gives them all the mass, shared equally) those have
 * -log(count) and the rest -inf; with none but NaN or -inf, every lp is
 * -inf. The order of the sum is fixed and there is one exp a logit and one
 * log, so the same logits give the same bits on any lane, chunk or move,
 * under the same libm (the picks' own condition, above).
 *
 * The top list: the `k` (<= SMP_TOP_LOGPROBS_MAX) ids of largest logit
 * (so of largest lp), ties to the lower id, in that order; ids whose lp is
 * -inf (NaN, -inf, or below a +inf) carry no probability and are left
 * out, so the list may be shorter than k. Costs one more pass of exp over
 * the vocabulary: only requests that ask for log-probabilities pay it.
 */
#define SMP_TOP_LOGPROBS_MAX 20u

struct smp_logprob {
	uint32_t id;
	double lp;
};

/* The log-probability of `tok` into *tok_lp and the top list into
 * top[0..*n) (room for k), from logits[0..vocab) (vocab >= 1, tok < vocab,
 * k <= SMP_TOP_LOGPROBS_MAX). The logits are only read. */
void smp_logprobs(const float *logits, uint32_t vocab, uint32_t tok, uint32_t k, double *tok_lp,
                  struct smp_logprob *top, uint32_t *n);

/* The next draw of `st` in [0, 1), advancing it by one step (smp_pick's
 * draw, for tests and tools). */
double smp_next_u(struct smp_state *st);

#endif
