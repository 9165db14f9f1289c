/*
 * reuse.c - retained prompt checkpoints (engine_int.h; docs/adr/0037).
 *
 * A checkpoint is what a request's prompt left on the device once
 * prefilled: the sequence's fixed-size state (copied into a device retained
 * slot), its KV (the full pages shared, counted in the pool, the partial
 * last page copied into a page of the checkpoint's own) and the logits of
 * the prompt's last token (host memory). A later request whose prompt
 * begins with a checkpoint's tokens starts from it: the shared pages listed
 * first in its own table, a copy of the partial page, the state copied back,
 * its position there; it prefills only the rest. A prompt equal to the
 * checkpoint's takes its first token from the stored logits. Nothing of the
 * model's arithmetic differs from prefilling the whole prompt with a chunk
 * boundary at the checkpoint (a token's arithmetic does not depend on the
 * chunk it is in: model_cpu.h), so the tokens are the same.
 *
 * Shared prefixes: a request whose prompt parts from a checkpoint's tokens
 * after at least ENGRU_MIN_PREFIX of them (two prompts with a common start:
 * a system prompt, a conversation that forks) ends a prefill chunk there,
 * and what it has then is retained too, as a shared prefix: the next
 * request that begins with those tokens starts from it, whatever follows.
 * So a prefix is reusable at the depth where prompts part, not only at
 * page boundaries or prompt ends.
 *
 * Giving up, when a capture finds no free slot or an admission lacks pages:
 * checkpoints before shared prefixes, agent before interactive, then the
 * least recently used; for a capture never one a waiting request counts on,
 * for room never the one the request lacking pages counts on (a later
 * request's claim does not hold room: the first in line would wait for it,
 * and it behind the first). A capture that finds nothing to give up is
 * skipped and counted.
 */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

/* A shared prefix shorter than this is not worth a slot. */
#define ENGRU_MIN_PREFIX 64u

static bool engru__paged(const struct eng *e)
{
	return e->d->m->full_layers > 0;
}

static void *engru__slot(const struct eng *e, uint32_t i)
{
	return (unsigned char *)e->cfg.retained.base + (uint64_t)i * e->cfg.retained_slot_bytes;
}

/* Pages of a checkpoint of n tokens a claimant shares: the full ones. */
static uint32_t engru__shared(const struct eng *e, uint32_t n)
{
	return engru__paged(e) ? n / KVPOOL_PAGE_TOKENS : 0;
}

int engru_init(struct eng *e, struct ig_errbuf *eb)
{
	uint32_t n = e->cfg.retained_device;

	if (!n)
		return IG_E_OK;
	if (!e->be->ops->copy_d2d)
		return ig_errf(eb, IG_E_INVAL,
		               "engine: the %s backend cannot copy inside the device: no prompt "
		               "reuse on it (--reuse-retained-device 0)",
		               e->be->ops->name);
	if (e->cfg.retained_slot_bytes < e->d->state_bytes ||
	    e->cfg.retained.bytes / n < e->cfg.retained_slot_bytes || !e->cfg.retained.base)
		return ig_errf(eb, IG_E_INVAL,
		               "engine: %u retained slots of %llu bytes in a region of %llu; a "
		               "sequence's state is %llu bytes",
		               n, (unsigned long long)e->cfg.retained_slot_bytes,
		               (unsigned long long)e->cfg.retained.bytes,
		               (unsigned long long)e->d->state_bytes);
	e->ck = calloc(n, sizeof(*e->ck));
	if (!e->ck)
		return ig_errf(eb, IG_E_NOMEM, "engine: no memory for %u checkpoints", n);
	e->n_ck = n;
	return IG_E_OK;
}

static void engru__drop(struct eng *e, uint32_t i, enum eng_event_kind kind, const char *why)
{
	struct eng_ckpt *c = &e->ck[i];

	eng__event(e, &(struct eng_event){.kind = kind,
	                                  .cls = (int)c->cls,
	                                  .pages = c->kv.n_pages,
	                                  .why = why,
	                                  .tokens = c->n,
	                                  .slot = i,
	                                  .prefix = c->kind == ENG_CK_PREFIX});
	kvpool_free(e->kv, &c->kv);
	free(c->tokens);
	c->tokens = NULL;
	c->n = 0;
	c->used = false;
	c->gen++;
}

void engru_free(struct eng *e)
{
	for (uint32_t i = 0; i < e->n_ck; i++) {
		kvpool_free(e->kv, &e->ck[i].kv);
		free(e->ck[i].tokens);
		free(e->ck[i].logits);
	}
	free(e->ck);
	e->ck = NULL;
	e->n_ck = 0;
}

/* Tokens a and b have in common from the start, at most n. */
static uint32_t engru__common(const uint32_t *a, const uint32_t *b, uint32_t n)
{
	uint32_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

void engru_match(struct eng *e, struct eng_seq *s)
{
	int32_t best = -1;
	uint32_t split = 0;

	s->ck = -1;
	s->sch.split = 0;
	if (!e->n_ck)
		return;
	/* where this prompt parts from a retained one, past what it can claim:
	 * a shared prefix to retain on the way */
	for (uint32_t i = 0; i < e->n_ck; i++) {
		const struct eng_ckpt *c = &e->ck[i];
		uint32_t k;

		if (!c->used)
			continue;
		k = engru__common(c->tokens, s->prompt, c->n < s->n_prompt ? c->n : s->n_prompt);
		if (k < c->n && k < s->n_prompt && k >= ENGRU_MIN_PREFIX && k > split)
			split = k;
	}
	for (uint32_t i = 0; i < e->n_ck; i++) {
		const struct eng_ckpt *c = &e->ck[i];

		if (c->used && c->n <= s->n_prompt && (best < 0 || c->n > e->ck[best].n) &&
		    !memcmp(c->tokens, s->prompt, (size_t)c->n * sizeof(uint32_t)))
			best = (int32_t)i;
	}
	if (split && (best < 0 || split > e->ck[best].n))
		s->sch.split = split;
	if (best < 0) {
		e->st.reuse_misses++;
		return;
	}
	s->ck = best;
	s->ck_gen = e->ck[best].gen;
	s->sch.pages = s->pages_all - engru__shared(e, e->ck[best].n);
	s->sch.prefilled = e->ck[best].n;
}

/* Does a waiting request count on checkpoint i? */
static bool engru__counted_on(const struct eng *e, uint32_t i)
{
	for (uint32_t k = 0; k < e->n_slots; k++) {
		const struct eng_seq *s = &e->seqs[k];

		if (s->used && s->sch.phase == SCHED_WAITING && s->ck == (int32_t)i &&
		    s->ck_gen == e->ck[i].gen)
			return true;
	}
	return false;
}

/* The checkpoint to give up first (checkpoints before prefixes, agent before
 * interactive, then the least recently used), `spare` excepted; for a
 * capture (`for_room` false) those waiting requests count on too; for room
 * only one whose giving up frees a page. -1 when none. */
static int32_t engru__victim(const struct eng *e, int32_t spare, bool for_room)
{
	int32_t best = -1;

	for (uint32_t i = 0; i < e->n_ck; i++) {
		const struct eng_ckpt *c = &e->ck[i];
		const struct eng_ckpt *b = best >= 0 ? &e->ck[best] : NULL;

		if (!c->used || (int32_t)i == spare || (for_room && !kvpool_private(e->kv, &c->kv)))
			continue;
		/* checkpoints before prefixes, agent before interactive, then LRU */
		if (b && (c->kind != b->kind   ? c->kind != ENG_CK_CHECKPOINT
		          : c->cls != b->cls ? c->cls != SCHED_AGENT
		                             : c->used_at >= b->used_at))
			continue;
		/* room is never refused for a later request's claim: the first in
		 * line would wait for it, and it behind the first */
		if (!for_room && engru__counted_on(e, i))
			continue;
		best = (int32_t)i;
	}
	return best;
}

/* Claims whose checkpoint went: the whole prompt again. */
static void engru__validate(struct eng *e)
{
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (!s->used || s->sch.phase != SCHED_WAITING || s->ck < 0)
			continue;
		if (!e->ck[s->ck].used || e->ck[s->ck].gen != s->ck_gen) {
			e->st.reuse_misses_given_up++;
			s->ck = -1;
			s->sch.pages = s->pages_all;
			s->sch.prefilled = 0;
		}
	}
}

void engru_before_plan(struct eng *e)
{
	struct eng_seq *first = NULL;

	if (!e->n_ck)
		return;
	engru__validate(e);
	/* room: the first in line (waiting or moved) that lacks pages has the
	 * checkpoints given up before any live sequence moves for it */
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (s->used && (s->sch.phase == SCHED_WAITING || s->sch.phase == SCHED_MOVED) &&
		    (!first || sched_outranks(&s->sch, &first->sch)))
			first = s;
	}
	while (first && first->sch.pages > e->kv->n_free) {
		int32_t spare = first->sch.phase == SCHED_WAITING ? first->ck : -1;
		int32_t v = engru__victim(e, spare, true);

		if (v < 0)
			break;
		e->st.reuse_given_up_room++;
		engru__drop(e, (uint32_t)v, ENG_EV_REUSE_GIVEN_UP, "room");
	}
	/* a claimant's pages, for the planner, are what moving it would free:
	 * those it shares with a checkpoint still there do not count (and count
	 * again once that checkpoint is given up) */
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (s->used && s->cached && s->ms.kv.table &&
		    (s->sch.phase == SCHED_PREFILL || s->sch.phase == SCHED_READY ||
		     s->sch.phase == SCHED_DECODE))
			s->sch.pages = kvpool_private(e->kv, &s->ms.kv);
	}
	engru__validate(e); /* the claims of those given up for room */
}

int engru_admit(struct eng *e, struct eng_seq *s, const float **first, struct ig_errbuf *eb)
{
	uint32_t i = (uint32_t)s->ck;
	struct eng_ckpt *c = &e->ck[i];
	uint32_t full = engru__shared(e, c->n);
	int rc;

	*first = NULL;
	rc = eng__take_pages(e, s, c->kv.table, full, engru__paged(e) ? s->pages_all : 0, eb);
	if (rc)
		return rc;
	/* the partial last page: a copy of its own (it writes there next) */
	if (engru__paged(e) && c->n % KVPOOL_PAGE_TOKENS)
		rc = e->be->ops->copy_d2d(e->be, kvpool_page(e->kv, s->ms.kv.table[full]),
		                          kvpool_page(e->kv, c->kv.table[full]), e->kv->page_bytes,
		                          eb);
	if (!rc && e->d->state_bytes)
		rc = e->be->ops->copy_d2d(e->be, s->ms.state, engru__slot(e, i), e->d->state_bytes,
		                          eb);
	if (rc)
		return rc;
	s->ms.pos = c->n;
	s->sch.prefilled = c->n;
	s->cached = c->n;
	s->ck = -1;
	c->used_at = ++e->ck_clock;
	e->st.reuse_hits++;
	e->st.reused_tokens += c->n;
	if (c->kind == ENG_CK_PREFIX)
		e->st.reused_prefix_tokens += c->n;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_CLAIMED,
	                                  .id = s->sch.id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = full,
	                                  .tokens = c->n,
	                                  .slot = i,
	                                  .prefix = c->kind == ENG_CK_PREFIX});
	if (c->n == s->sch.prompt) {
		s->sch.phase = SCHED_READY;
		*first = c->logits;
	} else {
		s->sch.phase = SCHED_PREFILL;
	}
	return IG_E_OK;
}

void engru_capture(struct eng *e, struct eng_seq *s, uint32_t n, enum eng_ck_kind kind,
                   const float *logits)
{
	uint32_t full = engru__shared(e, n), vocab = e->d->m->vocab;
	bool tail = engru__paged(e) && n % KVPOOL_PAGE_TOKENS;
	struct ig_errbuf eb;
	struct eng_ckpt *c;
	int32_t slot = -1;
	int err = 0;

	if (!e->n_ck || s->cached >= n)
		return; /* reuse off, or nothing the claimed checkpoint lacks */
	for (uint32_t i = 0; i < e->n_ck; i++) {
		c = &e->ck[i];
		if (c->used && c->n == n && !memcmp(c->tokens, s->prompt, (size_t)n * 4)) {
			c->used_at = ++e->ck_clock; /* the same prompt: kept, fresher */
			return;
		}
		if (!c->used && slot < 0)
			slot = (int32_t)i;
	}
	if (tail && !e->kv->n_free) {
		e->st.reuse_skips_page++;
		eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_SKIPPED,
		                                  .id = s->sch.id,
		                                  .cls = (int)s->sch.cls,
		                                  .why = "no_page",
		                                  .tokens = n});
		return;
	}
	if (slot < 0) {
		slot = engru__victim(e, -1, false);
		if (slot < 0) {
			e->st.reuse_skips_slot++;
			eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_SKIPPED,
			                                  .id = s->sch.id,
			                                  .cls = (int)s->sch.cls,
			                                  .why = "no_slot",
			                                  .tokens = n});
			return;
		}
		e->st.reuse_given_up_slot++;
		engru__drop(e, (uint32_t)slot, ENG_EV_REUSE_GIVEN_UP, "slot");
	}
	c = &e->ck[slot];
	c->tokens = malloc((size_t)n * sizeof(uint32_t));
	if (!c->logits)
		c->logits = malloc((size_t)vocab * sizeof(float));
	if (!c->tokens || !c->logits ||
	    !kvpool_try_reserve_after(e->kv, &c->kv, 0x80000000u | (uint32_t)slot, s->ms.kv.table,
	                              full, full + tail, &err)) {
		free(c->tokens);
		c->tokens = NULL;
		return; /* no host memory: a checkpoint is a cache, nothing lost */
	}
	if ((tail && e->be->ops->copy_d2d(e->be, kvpool_page(e->kv, c->kv.table[full]),
	                                  kvpool_page(e->kv, s->ms.kv.table[full]),
	                                  e->kv->page_bytes, &eb)) ||
	    (e->d->state_bytes && e->be->ops->copy_d2d(e->be, engru__slot(e, (uint32_t)slot),
	                                               s->ms.state, e->d->state_bytes, &eb))) {
		kvpool_free(e->kv, &c->kv);
		free(c->tokens);
		c->tokens = NULL;
		return;
	}
	memcpy(c->tokens, s->prompt, (size_t)n * sizeof(uint32_t));
	memcpy(c->logits, logits, (size_t)vocab * sizeof(float));
	c->n = n;
	c->kind = kind;
	c->cls = s->sch.cls;
	c->used = true;
	c->used_at = ++e->ck_clock;
	e->st.reuse_captures++;
	e->st.reuse_prefixes += kind == ENG_CK_PREFIX;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_CAPTURED,
	                                  .id = s->sch.id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = c->kv.n_pages,
	                                  .tokens = n,
	                                  .slot = (uint32_t)slot,
	                                  .prefix = kind == ENG_CK_PREFIX});
}

void engru_moved_out(struct eng_seq *s)
{
	s->sch.pages = s->pages_all; /* it comes back with pages of its own */
}
