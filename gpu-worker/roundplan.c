/* roundplan.c - the round planner (see roundplan.h). */
#include "roundplan.h"

bool sched_outranks(const struct sched_seq *a, const struct sched_seq *b)
{
	if (a->cls != b->cls)
		return a->cls < b->cls;
	return a->arrival < b->arrival;
}

/* Insertion sort of the live sequences' indices by rank: the snapshot is
 * nearly in arrival order already, and n is a few hundred at most. */
static uint32_t sched__rank(const struct sched_seq *seqs, uint32_t n, uint32_t *order)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = k;

		if (seqs[i].phase == SCHED_DONE)
			continue;
		while (j > 0 && sched_outranks(&seqs[i], &seqs[order[j - 1]])) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
		k++;
	}
	return k;
}

uint32_t sched_plan(const struct sched_cfg *cfg, const struct sched_seq *seqs, uint32_t n,
                    uint64_t free_pages, uint32_t *order, struct sched_round *out)
{
	uint32_t live = sched__rank(seqs, n, order), lanes_used = 0, budget = cfg->chunk;
	bool blocked = false;

	out->n_admit = out->n_grant = out->n_decode = out->n_prefill = 0;
	out->prefill_tokens = 0;
	for (uint32_t k = 0; k < live; k++)
		lanes_used += seqs[order[k]].phase == SCHED_DECODE;

	for (uint32_t k = 0; k < live; k++) {
		uint32_t i = order[k];
		const struct sched_seq *s = &seqs[i];
		enum sched_phase ph = s->phase;

		/* 1. admission, strictly in rank order */
		if (ph == SCHED_WAITING) {
			if (blocked || s->pages > free_pages) {
				blocked = true;
				continue;
			}
			free_pages -= s->pages;
			out->admit[out->n_admit++] = i;
			ph = s->prompt > s->prefilled ? SCHED_PREFILL : SCHED_READY;
		}
		/* 2. lanes */
		if (ph == SCHED_READY && lanes_used < cfg->lanes) {
			out->grant[out->n_grant++] = i;
			lanes_used++;
			ph = SCHED_DECODE;
		}
		/* 3. decode */
		if (ph == SCHED_DECODE)
			out->decode[out->n_decode++] = i;
		/* 4. prefill */
		if (ph == SCHED_PREFILL && budget > 0) {
			uint32_t left = s->prompt - s->prefilled;
			uint32_t take = left < budget ? left : budget;

			out->prefill[out->n_prefill++] =
			    (struct sched_chunk){i, s->prefilled, take};
			out->prefill_tokens += take;
			budget -= take;
		}
	}
	out->pages_after = free_pages;
	return out->n_decode + out->prefill_tokens;
}

const char *sched_phase_name(enum sched_phase p)
{
	switch (p) {
	case SCHED_WAITING:
		return "waiting";
	case SCHED_PREFILL:
		return "prefill";
	case SCHED_READY:
		return "ready";
	case SCHED_DECODE:
		return "decode";
	case SCHED_DONE:
		return "done";
	}
	return "unknown";
}

const char *sched_class_name(enum sched_class c)
{
	return c == SCHED_INTERACTIVE ? "interactive" : c == SCHED_AGENT ? "agent" : "unknown";
}
