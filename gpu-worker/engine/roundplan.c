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

/* Holds pages and runs in rounds: what a victim may be. */
static bool sched__holds_pages(const struct sched_seq *s)
{
	return s->phase == SCHED_PREFILL || s->phase == SCHED_READY || s->phase == SCHED_DECODE;
}

/* Holds a state slot: from its admission or restore until it is done or its
 * move out has landed (ADR 0027). */
static bool sched__holds_slot(const struct sched_seq *s)
{
	return sched__holds_pages(s) || s->phase == SCHED_MOVING_OUT || s->phase == SCHED_MOVING_IN;
}

/* True when victim a goes before victim b. */
static bool sched__victim_before(const struct sched_seq *a, const struct sched_seq *b)
{
	bool a_lane = a->phase == SCHED_DECODE, b_lane = b->phase == SCHED_DECODE;

	if (a->cls != b->cls)
		return a->cls == SCHED_AGENT;
	if (a_lane != b_lane)
		return !a_lane;
	return a->arrival > b->arrival;
}

uint32_t sched_victims(const struct sched_seq *seqs, uint32_t n, uint32_t req, uint64_t need_pages,
                       bool need_slot, uint32_t *out)
{
	uint32_t k = 0, taken = 0;
	uint64_t covered = 0;

	/* the eligible ones, in victim order (insertion sort: n is small); each
	 * holds a slot, so one that frees no page still serves a need of a slot
	 * alone (when pages are lacking, a victim with pages frees the slot) */
	for (uint32_t i = 0; i < n; i++) {
		const struct sched_seq *s = &seqs[i];
		uint32_t j = k;

		if (i == req || !sched__holds_pages(s) || (s->pages == 0 && need_pages > 0) ||
		    s->stay || !sched_outranks(&seqs[req], s))
			continue;
		while (j > 0 && sched__victim_before(s, &seqs[out[j - 1]])) {
			out[j] = out[j - 1];
			j--;
		}
		out[j] = i;
		k++;
	}
	/* in that order until they cover the pages and the slot (any one does) */
	while (taken < k && (covered < need_pages || (need_slot && taken == 0)))
		covered += seqs[out[taken++]].pages;
	if (covered < need_pages || (need_slot && taken == 0))
		return 0;
	return taken;
}

uint32_t sched_plan(const struct sched_cfg *cfg, const struct sched_seq *seqs, uint32_t n,
                    uint64_t free_pages, uint32_t *order, struct sched_round *out)
{
	uint32_t live = sched__rank(seqs, n, order), lanes_used = 0, budget = cfg->chunk;
	uint32_t rows = cfg->rows;
	uint32_t slots_held = 0, free_slots;
	bool blocked = false, moving_out = false;

	out->n_admit = out->n_grant = out->n_decode = out->n_prefill = 0;
	out->n_restore = out->n_victims = 0;
	out->need = -1;
	out->need_pages = 0;
	out->need_slot = false;
	out->prefill_tokens = 0;
	for (uint32_t k = 0; k < live; k++) {
		lanes_used += seqs[order[k]].phase == SCHED_DECODE;
		slots_held += sched__holds_slot(&seqs[order[k]]);
		moving_out |= seqs[order[k]].phase == SCHED_MOVING_OUT;
	}
	/* a snapshot holding more than the slots (none the engine makes) frees
	 * none until enough of them are gone */
	free_slots = slots_held < cfg->slots ? cfg->slots - slots_held : 0;

	for (uint32_t k = 0; k < live; k++) {
		uint32_t i = order[k];
		const struct sched_seq *s = &seqs[i];
		enum sched_phase ph = s->phase;

		/* 1. admission and restores, strictly in rank order: pages and a
		 * slot, all or nothing */
		if (ph == SCHED_WAITING || ph == SCHED_MOVED) {
			if (blocked || s->pages > free_pages || free_slots == 0) {
				uint64_t lack = s->pages > free_pages ? s->pages - free_pages : 0;
				bool lack_slot = free_slots == 0;

				if (!blocked && ph == SCHED_WAITING && cfg->moves && !moving_out) {
					out->n_victims = sched_victims(seqs, n, i, lack, lack_slot,
					                               out->victims);
					if (out->n_victims) {
						out->need = (int64_t)i;
						out->need_pages = lack;
						out->need_slot = lack_slot;
					}
				}
				blocked = true;
				continue;
			}
			free_pages -= s->pages;
			free_slots--;
			if (ph == SCHED_MOVED) {
				out->restore[out->n_restore++] = i;
				continue; /* out of rounds until its windows are back */
			}
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
			uint32_t end =
			    s->split > s->prefilled && s->split < s->prompt ? s->split : s->prompt;
			uint32_t left = end - s->prefilled;
			uint32_t take = left < budget ? left : budget;

			if (s->rows_each && take > rows)
				take = rows;
			if (take == 0)
				continue; /* the round's rows are taken: the next round's */
			rows -= s->rows_each ? take : 0;
			out->prefill[out->n_prefill++] =
			    (struct sched_chunk){i, s->prefilled, take};
			out->prefill_tokens += take;
			budget -= take;
		}
	}
	out->pages_after = free_pages;
	out->slots_after = free_slots;
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
	case SCHED_MOVING_OUT:
		return "moving_out";
	case SCHED_MOVED:
		return "moved";
	case SCHED_MOVING_IN:
		return "moving_in";
	}
	return "unknown";
}

const char *sched_class_name(enum sched_class c)
{
	return c == SCHED_INTERACTIVE ? "interactive" : c == SCHED_AGENT ? "agent" : "unknown";
}
