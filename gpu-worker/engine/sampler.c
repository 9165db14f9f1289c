/*
 * sampler.c - the per-sequence sampler (sampler.h): greedy, temperature,
 * top-k and top-p over logits, with a splitmix64 stream per sequence.
 *
 * A pick sorts nothing it does not need: top_k keeps its candidates with a
 * bounded heap (O(vocab log k)); the kept set then becomes a max-heap popped
 * only as far as top_p or the draw needs, so a peaked distribution costs
 * O(vocab). The order is a strict total order (logit descending, then id
 * ascending) and every sum runs in an order that order fixes, so a pick
 * depends on nothing but (params, logits, u).
 */
#include "sampler.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64's increment, 2^64 / golden ratio, odd. */
#define SMP_GAMMA UINT64_C(0x9E3779B97F4A7C15)

/* How far short of top_p a prefix's share may fall and still reach it: more
 * than a float top_p's rounding (6e-8) and the softmax's (1e-8 for logits
 * given as float logarithms), far less than any probability that matters. */
#define SMP_TOP_P_SLACK 1e-6

_Static_assert(SMP_STATE_BYTES == 1 + 7 + 8 + 8, "version, reserved, rng, step");

/* A candidate: its logit orders it, its id breaks ties. */
struct smp_cand {
	float x;
	uint32_t id;
};

/* The strict total order of candidates: a before b. */
static int better(const struct smp_cand *a, const struct smp_cand *b)
{
	return a->x > b->x || (a->x == b->x && a->id < b->id);
}

/* Heap order: with best_on_top, a parent is better than its children; else
 * worse (the bounded heap of top_k, whose root is the one to evict). */
static int on_top(const struct smp_cand *a, const struct smp_cand *b, int best_on_top)
{
	return best_on_top ? better(a, b) : better(b, a);
}

static void sift_down(struct smp_cand *c, size_t n, size_t i, int best_on_top)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, top = i;
		struct smp_cand t;

		if (l < n && on_top(&c[l], &c[top], best_on_top))
			top = l;
		if (r < n && on_top(&c[r], &c[top], best_on_top))
			top = r;
		if (top == i)
			return;
		t = c[i];
		c[i] = c[top];
		c[top] = t;
		i = top;
	}
}

static void heapify(struct smp_cand *c, size_t n, int best_on_top)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(c, n, i, best_on_top);
}

/* Is id i allowed by the mask (NULL: every id)? */
static inline bool allowed(const uint32_t *allow, uint32_t i)
{
	return !allow || (allow[i / 32] >> (i % 32)) & 1u;
}

/* The largest logit, ties to the lowest id, NaN never; all NaN gives 0.
 * With a mask, only allowed ids count (none allowed gives 0). */
static uint32_t greedy(const float *logits, uint32_t vocab, const uint32_t *allow)
{
	uint32_t best = 0;
	int found = 0;

	for (uint32_t i = 0; i < vocab; i++) {
		if (isnan(logits[i]) || !allowed(allow, i))
			continue;
		if (!found || logits[i] > logits[best]) {
			best = i;
			found = 1;
		}
	}
	return best;
}

/* A candidate's unnormalised probability. x == max gives exactly 1, which
 * also makes +inf logits share the mass (inf - inf would be NaN). */
static double weight(float x, float max, double temperature)
{
	if (x == max)
		return 1.0;
	return exp(((double)x - (double)max) / temperature);
}

/* `v` in its shortest form that reads back exactly ("1e-300", "0.9",
 * "1.0000000000000002"): what a refusal says was sent. */
static const char *smp__num(double v, char *buf, size_t cap)
{
	for (int digits = 1; digits <= 17; digits++) {
		snprintf(buf, cap, "%.*g", digits, v);
		if (!isfinite(v) || strtod(buf, NULL) == v)
			break;
	}
	return buf;
}

static int smp__range(const char *what, double v, const char *accepted, struct ig_errbuf *eb)
{
	char num[32];

	return ig_errf(eb, IG_E_INVAL, "sampler %s %s is out of range: accepted %s", what,
	               smp__num(v, num, sizeof(num)), accepted);
}

/* A double known to be in a float's range as a float, never 0 for a
 * positive value (see smp_params_set). */
static float smp__float(double v)
{
	float f = (float)v;

	return f == 0.0f && v > 0.0 ? FLT_TRUE_MIN : f;
}

int smp_params_set(struct smp_params *p, double temperature, uint32_t top_k, double top_p,
                   uint64_t seed, struct ig_errbuf *eb)
{
	/* Negated comparisons: NaN fails them all. A -0.0 temperature is 0, a
	 * -0.0 top_p is not above 0. */
	if (!(temperature >= 0.0 && temperature <= (double)SMP_TEMPERATURE_MAX))
		return smp__range("temperature", temperature, "0 (greedy) to 100", eb);
	if (!(top_p > 0.0 && top_p <= 1.0))
		return smp__range("top_p", top_p, "above 0 up to 1 (1 keeps all)", eb);
	p->temperature = smp__float(temperature);
	p->top_k = top_k;
	p->top_p = smp__float(top_p);
	p->seed = seed;
	return IG_E_OK;
}

int smp_params_check(const struct smp_params *p, uint32_t vocab, struct ig_errbuf *eb)
{
	if (vocab == 0)
		return ig_errf(eb, IG_E_INVAL,
		               "sampler: a vocabulary of 0 ids: accepted 1 or more");
	if (!(p->temperature >= 0.0f && p->temperature <= SMP_TEMPERATURE_MAX))
		return ig_errf(eb, IG_E_INVAL,
		               "sampler temperature %g is out of range: accepted 0 (greedy) to %g",
		               (double)p->temperature, (double)SMP_TEMPERATURE_MAX);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return ig_errf(eb, IG_E_INVAL,
		               "sampler top_p %g is out of range: accepted above 0 up to 1 "
		               "(1 keeps all)",
		               (double)p->top_p);
	if (p->top_k > vocab)
		return ig_errf(eb, IG_E_INVAL,
		               "sampler top_k %" PRIu32 " is larger than the vocabulary of %" PRIu32
		               " ids: accepted 0 (all) to %" PRIu32,
		               p->top_k, vocab, vocab);
	return IG_E_OK;
}

void smp_init(struct smp_state *st, const struct smp_params *p)
{
	st->rng = p->seed;
	st->step = 0;
}

double smp_next_u(struct smp_state *st)
{
	uint64_t z = (st->rng += SMP_GAMMA);

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	z ^= z >> 31;
	st->step++;
	return (double)(z >> 11) * 0x1.0p-53;
}

static void put_le64(uint8_t *o, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		o[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *in)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)in[i] << (8 * i);
	return v;
}

void smp_state_save(const struct smp_state *st, uint8_t out[SMP_STATE_BYTES])
{
	memset(out, 0, SMP_STATE_BYTES);
	out[0] = SMP_STATE_VERSION;
	put_le64(out + 8, st->rng);
	put_le64(out + 16, st->step);
}

int smp_state_load(struct smp_state *st, const uint8_t in[SMP_STATE_BYTES], struct ig_errbuf *eb)
{
	if (in[0] != SMP_STATE_VERSION)
		return ig_errf(eb, IG_E_INVAL,
		               "sampler state version %u is not supported: accepted version %u",
		               (unsigned)in[0], SMP_STATE_VERSION);
	for (int i = 1; i < 8; i++)
		if (in[i])
			return ig_errf(eb, IG_E_INVAL,
			               "sampler state reserved byte %d is 0x%02x: it must be 0 in "
			               "version %u",
			               i, (unsigned)in[i], SMP_STATE_VERSION);
	st->rng = get_le64(in + 8);
	st->step = get_le64(in + 16);
	return IG_E_OK;
}

size_t smp_scratch_bytes(uint32_t vocab)
{
	return (size_t)(vocab ? vocab : 1) * sizeof(struct smp_cand);
}

static uint32_t smp__pick(const struct smp_params *p, double u, const float *logits, uint32_t vocab,
                          const uint32_t *allow, struct smp_scratch *scratch)
{
	struct smp_cand *c = (struct smp_cand *)(void *)scratch;
	double temperature = p->temperature;
	size_t k, n = 0, left;
	int heaped = 0;
	double z = 0.0, cum = 0.0, t;
	uint32_t last;
	float max;

	if (vocab == 0)
		return 0;
	if (p->temperature == 0.0f || p->top_k == 1)
		return greedy(logits, vocab, allow);
	k = (p->top_k == 0 || p->top_k > vocab) ? vocab : p->top_k;

	/* Candidates, the top k of them in a heap whose root is the worst. */
	for (uint32_t i = 0; i < vocab; i++) {
		struct smp_cand e = {logits[i], i};

		if (isnan(e.x) || e.x == -INFINITY || !allowed(allow, i))
			continue;
		if (n < k) {
			c[n++] = e;
			continue;
		}
		if (!heaped) {
			heapify(c, n, 0);
			heaped = 1;
		}
		if (better(&e, &c[0])) {
			c[0] = e;
			sift_down(c, n, 0, 0);
		}
	}
	if (n == 0)
		return greedy(logits, vocab, allow);

	max = c[0].x;
	for (size_t j = 1; j < n; j++)
		if (c[j].x > max)
			max = c[j].x;
	for (size_t j = 0; j < n; j++)
		z += weight(c[j].x, max, temperature);

	/* Pop best first; popped candidates gather at c[n-1], c[n-2], ... */
	heapify(c, n, 1);
	left = n;
	last = c[0].id; /* the best: weight 1, always kept */
	if (p->top_p < 1.0f) {
		double reach = ((double)p->top_p - SMP_TOP_P_SLACK) * z;
		double run = 0.0;

		do {
			struct smp_cand top = c[0];

			c[0] = c[--left];
			c[left] = top;
			sift_down(c, left, 0, 1);
			cum += weight(top.x, max, temperature);
		} while (left > 0 && cum < reach);
		t = u * cum;
		for (size_t j = n; j-- > left;) {
			double w = weight(c[j].x, max, temperature);

			if (w > 0.0) {
				last = c[j].id;
				run += w;
				if (t < run)
					return last;
			}
		}
		return last;
	}
	t = u * z;
	while (left > 0) {
		struct smp_cand top = c[0];
		double w;

		c[0] = c[--left];
		c[left] = top;
		sift_down(c, left, 0, 1);
		w = weight(top.x, max, temperature);
		if (w > 0.0) {
			last = top.id;
			cum += w;
			if (t < cum)
				return last;
		}
	}
	return last;
}

uint32_t smp_pick_at(const struct smp_params *p, double u, const float *logits, uint32_t vocab,
                     struct smp_scratch *scratch)
{
	return smp__pick(p, u, logits, vocab, NULL, scratch);
}

uint32_t smp_pick(const struct smp_params *p, struct smp_state *st, const float *logits,
                  uint32_t vocab, struct smp_scratch *scratch)
{
	return smp__pick(p, smp_next_u(st), logits, vocab, NULL, scratch);
}

uint32_t smp_pick_masked_at(const struct smp_params *p, double u, const float *logits,
                            uint32_t vocab, const uint32_t *allow, struct smp_scratch *scratch)
{
	return smp__pick(p, u, logits, vocab, allow, scratch);
}

uint32_t smp_pick_masked(const struct smp_params *p, struct smp_state *st, const float *logits,
                         uint32_t vocab, const uint32_t *allow, struct smp_scratch *scratch)
{
	return smp__pick(p, smp_next_u(st), logits, vocab, allow, scratch);
}

/* ---- log-probabilities ------------------------------------------------------ */

/* Keep `c` in the top list top[0..*n) of at most k, ordered by `better`. */
static void smp__top_insert(struct smp_cand *top, uint32_t *n, uint32_t k, struct smp_cand c)
{
	uint32_t i;

	if (*n == k && !better(&c, &top[k - 1]))
		return;
	i = *n < k ? (*n)++ : k - 1;
	while (i > 0 && better(&c, &top[i - 1])) {
		top[i] = top[i - 1];
		i--;
	}
	top[i] = c;
}

void smp_logprobs(const float *logits, uint32_t vocab, uint32_t tok, uint32_t k, double *tok_lp,
                  struct smp_logprob *top, uint32_t *n)
{
	struct smp_cand best[SMP_TOP_LOGPROBS_MAX];
	uint32_t nb = 0, n_inf = 0;
	double m = -INFINITY, s = 0.0, lse;

	if (k > SMP_TOP_LOGPROBS_MAX)
		k = SMP_TOP_LOGPROBS_MAX;
	/* the largest, the +inf count and the top list: one pass, ids in order
	 * (the list's order is strict, so the pass's order does not matter to
	 * it; the max's does not either) */
	for (uint32_t i = 0; i < vocab; i++) {
		float x = logits[i];

		if (isnan(x))
			continue;
		if ((double)x > m)
			m = (double)x;
		if (isinf(x) && x > 0)
			n_inf++;
		if (k && !(isinf(x) && x < 0))
			smp__top_insert(best, &nb, k, (struct smp_cand){x, i});
	}
	*n = 0;
	if (m == -INFINITY) { /* nothing but NaN and -inf: no probability anywhere */
		*tok_lp = -INFINITY;
		return;
	}
	if (n_inf) {
		/* the +inf logits share the mass equally (the sampler's rule 4) */
		double lp = -log((double)n_inf);
		float x = logits[tok];

		*tok_lp = isinf(x) && x > 0 ? lp : -INFINITY;
		for (uint32_t j = 0; j < nb && isinf(best[j].x) && best[j].x > 0; j++)
			top[(*n)++] = (struct smp_logprob){best[j].id, lp};
		return;
	}
	/* the sum in id order: a fixed order, whatever produced the logits */
	for (uint32_t i = 0; i < vocab; i++)
		if (!isnan(logits[i]))
			s += exp((double)logits[i] - m);
	lse = log(s);
	*tok_lp = isnan(logits[tok]) ? -INFINITY : ((double)logits[tok] - m) - lse;
	for (uint32_t j = 0; j < nb; j++)
		top[(*n)++] = (struct smp_logprob){best[j].id, ((double)best[j].x - m) - lse};
}
