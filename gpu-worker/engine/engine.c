/* engine.c - requests, rounds and outputs (see engine.h): the public face
 * of the engine, which applies each round's plan; the moves (moves.c) and
 * prompt reuse (reuse.c) are called from here (engine_int.h). */
#include "engine_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvclient.h"
#include "model/seqimg.h"

const uint64_t eng_ttft_bounds_us[ENG_TTFT_NBOUNDS] = ENG_TTFT_BOUNDS_US;

/* The ticket of a window copy of its pages on the transfer stream, set by
 * moves.c: waited for, never a move's state read. A copy that failed is
 * moves.c's to report when it collects it. */
void eng__xfer_wait(struct eng *e, struct eng_seq *s)
{
	struct ig_errbuf eb;

	if (!s->xfer)
		return;
	e->be->ops->xfer_wait(e->be, s->xfer, &eb);
	s->xfer = 0;
}

void eng__release_state(struct eng *e, struct eng_seq *s)
{
	/* a window copy of this sequence still running reads or writes its
	 * pages and state: it ends before they are given back */
	eng__xfer_wait(e, s);
	kvpool_free(e->kv, &s->ms.kv);
	if (s->have_state)
		e->be->ops->seq_release(e->be, e->d, &s->ms);
	s->have_state = false;
}

static void eng__forget(struct eng *e, struct eng_seq *s)
{
	engcs__detach(e, s);
	eng__release_state(e, s);
	if (s->feed != s->prompt)
		free(s->feed);
	free(s->prompt);
	free(s->out);
	free(s->lp);
	free(s->lp_n);
	free(s->plp);
	free(s->plp_n);
	memset(s, 0, sizeof(*s));
}

static void eng__finish(struct eng *e, struct eng_seq *s, enum eng_finish why)
{
	engmv__ended(e, s); /* what a tier holds of it goes */
	engcs__detach(e, s);
	eng__release_state(e, s);
	s->sch.phase = SCHED_DONE;
	s->finish = why;
	s->finished_at = ++e->finishes;
	e->st.finished++;
	e->st.finished_by[why]++;
	if (e->cfg.on_finish)
		e->cfg.on_finish(e->cfg.ctx, s->sch.id, (int)why, s->n_prompt, s->n_out);
}

int eng_create(struct eng **out, struct be *be, const struct be_model *d, struct kvpool *kv,
               const struct eng_cfg *cfg, struct ig_errbuf *eb)
{
	struct eng *e;
	uint32_t n;
	int rc;

	*out = NULL;
	if (!be || !be->ops || !be->ops->round || !d || !d->impl)
		return ig_errf(eb, IG_E_INVAL,
		               "the %s backend has no compute for the model yet; accepted: a "
		               "backend with a round entry (cpu)",
		               be && be->ops ? be->ops->name : "(none)");
	if (cfg->lanes < 1 || cfg->lanes > 64 || cfg->chunk < 1 || cfg->max_requests < 1 ||
	    cfg->context < 1 || cfg->default_max_tokens < 1)
		return ig_errf(eb, IG_E_INVAL,
		               "engine: lanes %u (1..64), chunk %u, max_requests %u, context %llu "
		               "and default max tokens %u (each >= 1)",
		               cfg->lanes, cfg->chunk, cfg->max_requests,
		               (unsigned long long)cfg->context, cfg->default_max_tokens);
	if (d->states < cfg->lanes || d->states < cfg->slots ||
	    (cfg->slots && cfg->slots < cfg->lanes))
		return ig_errf(eb, IG_E_INVAL,
		               "engine: %u lanes and %u slots, but the model was bound with %u "
		               "state slots (a running sequence holds one: bind it with states >= "
		               "slots >= lanes; slots 0 means lanes)",
		               cfg->lanes, cfg->slots, d->states);
	e = calloc(1, sizeof(*e));
	if (!e)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the engine");
	e->be = be;
	e->d = d;
	e->kv = kv;
	e->cfg = *cfg;
	e->n_slots = n = cfg->max_requests;
	/* a round runs every lane holder and at most `chunk` prefill steps */
	e->max_steps = cfg->lanes + (cfg->chunk < n ? cfg->chunk : n);
	e->seqs = calloc(n, sizeof(*e->seqs));
	e->snap = calloc(n, sizeof(*e->snap));
	e->snap_slot = calloc(n, sizeof(*e->snap_slot));
	e->order = calloc(n, sizeof(*e->order));
	e->r.admit = calloc(n, sizeof(uint32_t));
	e->r.grant = calloc(n, sizeof(uint32_t));
	e->r.decode = calloc(n, sizeof(uint32_t));
	e->r.prefill = calloc(n, sizeof(*e->r.prefill));
	e->r.restore = calloc(n, sizeof(uint32_t));
	e->r.victims = calloc(n, sizeof(uint32_t));
	e->steps = calloc(e->max_steps, sizeof(*e->steps));
	e->step_slot = calloc(e->max_steps, sizeof(*e->step_slot));
	e->logits = calloc((size_t)e->max_steps * d->m->vocab, sizeof(float));
	e->logit_rows = e->max_steps;
	e->smp_scratch = malloc(smp_scratch_bytes(d->m->vocab));
	if (!e->seqs || !e->snap || !e->snap_slot || !e->order || !e->r.admit || !e->r.grant ||
	    !e->r.decode || !e->r.prefill || !e->steps || !e->step_slot || !e->logits ||
	    !e->smp_scratch || !e->r.restore || !e->r.victims) {
		eng_destroy(e);
		return ig_errf(eb, IG_E_NOMEM, "no memory for an engine of %u requests", n);
	}
	e->next_id = 1;
	rc = engmv__init(e, eb);
	if (!rc)
		rc = engru__init(e, eb);
	if (rc) {
		eng_destroy(e);
		return rc;
	}
	*out = e;
	return IG_E_OK;
}

void eng_destroy(struct eng *e)
{
	if (!e)
		return;
	engmv__release(e); /* a window copy in flight ends first */
	for (uint32_t i = 0; e->seqs && i < e->n_slots; i++)
		if (e->seqs[i].used)
			eng__forget(e, &e->seqs[i]);
	engru__release(e);
	engcs__release(e);
	free(e->seqs);
	free(e->snap);
	free(e->snap_slot);
	free(e->order);
	free(e->r.admit);
	free(e->r.grant);
	free(e->r.decode);
	free(e->r.prefill);
	free(e->r.restore);
	free(e->r.victims);
	free(e->steps);
	free(e->step_slot);
	free(e->logits);
	free(e->smp_scratch);
	free(e);
}

struct eng_seq *eng__find(const struct eng *e, uint64_t id)
{
	for (uint32_t i = 0; i < e->n_slots; i++)
		if (e->seqs[i].used && e->seqs[i].sch.id == id)
			return &e->seqs[i];
	return NULL;
}

/* A free slot, forgetting the oldest finished request if need be. */
static struct eng_seq *eng__slot(struct eng *e)
{
	struct eng_seq *oldest = NULL;

	for (uint32_t i = 0; i < e->n_slots; i++) {
		struct eng_seq *s = &e->seqs[i];

		if (!s->used)
			return s;
		if (s->sch.phase == SCHED_DONE && (!oldest || s->finished_at < oldest->finished_at))
			oldest = s;
	}
	if (oldest)
		eng__forget(e, oldest);
	return oldest;
}

/* Room for the rows of logits echo requests' chunks take (ENG_ECHO_ROWS
 * in a round), made at the first one's submit: a round never allocates. */
static int eng__echo_rows(struct eng *e, struct ig_errbuf *eb)
{
	size_t vocab = e->d->m->vocab;
	uint32_t want = e->max_steps + ENG_ECHO_ROWS;
	float *p;

	if (e->logit_rows >= want)
		return IG_E_OK;
	p = realloc(e->logits, (size_t)want * vocab * sizeof(float));
	if (!p)
		return ig_errf(eb, IG_E_NOMEM,
		               "echo: no memory for %u rows of logits (%zu MiB) beside the round's",
		               ENG_ECHO_ROWS, (size_t)ENG_ECHO_ROWS * vocab * sizeof(float) >> 20);
	e->logits = p;
	e->logit_rows = want;
	return IG_E_OK;
}

int eng_submit(struct eng *e, const struct eng_req *r, struct eng_admission *out,
               struct ig_errbuf *eb)
{
	const struct mdesc *m = e->d->m;
	uint64_t cap = r->max_tokens ? r->max_tokens : e->cfg.default_max_tokens;
	uint32_t pages;
	bool cut = false;
	struct eng_seq *s;
	int rc;

	if (r->n_prompt == 0)
		return ig_errf(eb, IG_E_INVAL, "prompt: empty; give at least one token");
	if (r->n_prompt >= e->cfg.context)
		return ig_errf(eb, IG_E_REQ_CONTEXT,
		               "prompt: %u tokens; the context is %llu, and the prompt must leave "
		               "room for one generated token",
		               r->n_prompt, (unsigned long long)e->cfg.context);
	for (uint32_t i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] >= m->vocab)
			return ig_errf(eb, IG_E_INVAL,
			               "prompt[%u]: token %u is outside the vocabulary (0..%u)", i,
			               r->prompt[i], m->vocab - 1);
	if (r->cls != SCHED_INTERACTIVE && r->cls != SCHED_AGENT)
		return ig_errf(eb, IG_E_INVAL, "class: %d; accepted: interactive, agent",
		               (int)r->cls);
	rc = smp_params_check(&r->smp, m->vocab, eb);
	if (rc)
		return rc;
	if (r->echo && (rc = eng__echo_rows(e, eb)) != IG_E_OK)
		return rc;
	if (r->n_prompt + cap > e->cfg.context) {
		cap = e->cfg.context - r->n_prompt;
		cut = true;
	}
	pages = kvpool_pages_for(r->n_prompt, cap, e->cfg.context);
	if (m->full_layers && pages > e->kv->n_pages)
		return ig_errf(eb, IG_E_REQ_POOL,
		               "prompt %u + max_tokens %llu tokens reserve %u pages; the whole KV "
		               "pool has %u (%llu tokens): lower max_tokens or the prompt",
		               r->n_prompt, (unsigned long long)cap, pages, e->kv->n_pages,
		               (unsigned long long)e->kv->n_pages * MDESC_PAGE_TOKENS);
	if (!m->full_layers)
		pages = 0;
	s = eng__slot(e);
	if (!s)
		return ig_errf(eb, IG_E_BUSY,
		               "%u requests are running, the most this worker keeps; try again "
		               "when one finishes",
		               e->n_slots);
	s->prompt = malloc((size_t)r->n_prompt * sizeof(uint32_t));
	s->out = malloc((size_t)cap * sizeof(uint32_t));
	if (!s->prompt || !s->out) {
		free(s->prompt);
		free(s->out);
		s->prompt = s->out = NULL;
		return ig_errf(eb, IG_E_NOMEM, "no memory for a request of %u + %llu tokens",
		               r->n_prompt, (unsigned long long)cap);
	}
	memcpy(s->prompt, r->prompt, (size_t)r->n_prompt * sizeof(uint32_t));
	s->feed = s->prompt;
	s->n_prompt = r->n_prompt;
	s->used = true;
	s->sch = (struct sched_seq){.id = e->next_id++,
	                            .cls = r->cls,
	                            .arrival = ++e->arrivals,
	                            .prompt = r->n_prompt,
	                            .pages = pages,
	                            .prefilled = 0,
	                            .phase = SCHED_WAITING};
	s->smp = r->smp;
	smp_init(&s->rng, &r->smp);
	s->cap = (uint32_t)cap;
	s->cap_cut = cut;
	s->pages_all = pages;
	s->cached = 0;
	s->ck_lost = false;
	s->echo = r->echo;
	if (r->grammar && (rc = engcs__attach(e, s, r, eb)) != IG_E_OK) {
		free(s->prompt);
		free(s->out);
		memset(s, 0, sizeof(*s));
		e->next_id--;
		e->arrivals--;
		return rc;
	}
	s->twin = 0;
	engru__match(e, s);
	engru__hold(e, s);
	s->submit_us = clk_mono_us();
	e->st.submitted++;
	e->st.prompt_tokens += r->n_prompt;
	*out = (struct eng_admission){s->sch.id, r->n_prompt, (uint32_t)cap, pages};
	return IG_E_OK;
}

/* The planner's view of the live requests, in e->snap (slots in snap_slot). */
static uint32_t eng__snapshot(struct eng *e)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->n_slots; i++) {
		/* a held request (reuse.c: its twin's prefill first) is not planned */
		if (!e->seqs[i].used || e->seqs[i].sch.phase == SCHED_DONE || e->seqs[i].twin)
			continue;
		e->snap[n] = e->seqs[i].sch;
		e->snap[n].stay = e->seqs[i].stay_until > e->st.rounds;
		e->snap_slot[n++] = i;
	}
	return n;
}

static uint32_t eng__plan(struct eng *e, uint32_t n)
{
	/* a state slot a lane: the plan's lane_state line holds `lanes` states
	 * (ADR 0027); more only where the caller bound more (cfg.slots) */
	const struct sched_cfg cfg = {.lanes = e->cfg.lanes,
	                              .slots = e->cfg.slots ? e->cfg.slots : e->cfg.lanes,
	                              .chunk = e->cfg.chunk,
	                              .rows = ENG_ECHO_ROWS,
	                              .moves = e->mv != NULL};

	return sched_plan(&cfg, e->snap, n, e->kv->n_free, e->order, &e->r);
}

bool eng_busy(struct eng *e)
{
	if (engmv__busy(e) || engru__busy(e))
		return true;
	e->r.n_restore = e->r.n_victims = 0;
	return eng__plan(e, eng__snapshot(e)) > 0 || e->r.n_restore > 0 || e->r.n_victims > 0;
}

static void eng__stop(struct eng *e, struct eng_seq *s, uint32_t keep);

/* Take the sampled token of a step that produced logits. */
static void eng__emit(struct eng *e, struct eng_seq *s, const float *logits)
{
	uint32_t tok;

	if (s->g) {
		/* among the tokens its grammar allows (docs/adr/0057); none
		 * allowed (a matcher bound) ends it, no token drawn */
		if (!engcs__mask(e, s)) {
			eng__finish(e, s, ENG_GRAMMAR);
			return;
		}
		tok = smp_pick_masked(&s->smp, &s->rng, logits, e->d->m->vocab, e->mask,
		                      e->smp_scratch);
		if (!engcs__accept(e, s, tok)) {
			eng__finish(e, s, ENG_GRAMMAR);
			return;
		}
	} else {
		tok = smp_pick(&s->smp, &s->rng, logits, e->d->m->vocab, e->smp_scratch);
	}

	if (s->lp) {
		/* from the logits the pick read (docs/adr/0053) */
		struct smp_logprob *g = s->lp + (size_t)s->n_out * (1 + s->lp_k);
		uint32_t n;

		smp_logprobs(logits, e->d->m->vocab, tok, s->lp_k, &g[0].lp, g + 1, &n);
		g[0].id = tok;
		s->lp_n[s->n_out] = (uint8_t)n;
	}
	s->out[s->n_out++] = tok;
	e->st.generated_tokens++;
	if (s->n_out == 1) {
		/* one clock read per request: the first token's latency */
		uint64_t us = clk_mono_us() - s->submit_us;
		uint32_t b = 0;

		while (b < ENG_TTFT_NBOUNDS && us > eng_ttft_bounds_us[b])
			b++;
		e->st.ttft[b]++;
		e->st.ttft_sum_us += us;
	}
	if (e->cfg.on_token) {
		uint32_t keep = e->cfg.on_token(e->cfg.ctx, s->sch.id, s->out, s->n_out);

		if (keep < s->n_out) {
			eng__stop(e, s, keep);
			return;
		}
	}
	if (tok == e->cfg.eos || (e->cfg.is_eog && e->cfg.is_eog(e->cfg.ctx, tok)))
		eng__finish(e, s, ENG_EOS);
	else if (s->n_out >= s->cap)
		eng__finish(e, s, s->cap_cut ? ENG_CONTEXT : ENG_LENGTH);
}

/* The prompt's log-probabilities an echo chunk's rows give (docs/adr/0063):
 * the chunk fed positions [from, from + n), its row j the logits after
 * position from + j, so the distribution of position from + j + 1. Each
 * position is computed once, in order (a replay's rows for positions done
 * are passed over); the row of the prompt's end is its first token's. */
static void eng__prompt_lps(struct eng *e, struct eng_seq *s, uint32_t from,
                            const struct be_step *st, const float *rows)
{
	uint32_t vocab = e->d->m->vocab;

	for (uint32_t j = 0; j < st->tail_logits; j++) {
		uint32_t p = from + (st->n_tok - st->tail_logits) + j + 1;
		struct smp_logprob *g;
		uint32_t n;

		if (p != s->plp_ready || p >= s->n_prompt)
			continue;
		g = s->plp + (size_t)p * (1 + s->lp_k);
		smp_logprobs(rows + (size_t)j * vocab, vocab, s->prompt[p], s->lp_k, &g[0].lp, g + 1,
		             &n);
		g[0].id = s->prompt[p];
		s->plp_n[p] = (uint8_t)n;
		s->plp_ready = p + 1;
	}
	if (s->plp_ready >= s->n_prompt)
		s->sch.rows_each = false; /* nothing more to compute */
}

/* ---- what moves.c and reuse.c call; the plan's moves applied --------------- */

void eng__event(struct eng *e, const struct eng_event *ev)
{
	if (e->cfg.on_event)
		e->cfg.on_event(e->cfg.ctx, ev);
}

void eng__seq_event(struct eng *e, enum eng_event_kind kind, const struct eng_seq *s)
{
	eng__event(e, &(struct eng_event){.kind = kind,
	                                  .id = s->sch.id,
	                                  .for_id = s->for_id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages});
}

/* Its tier record is gone (given up, lost, or the move in failed): prefill
 * it again from the start in the pages it holds, the tokens it generated
 * replayed (the last one is fed by the next decode, as before the move). */
int eng__replay(struct eng *e, struct eng_seq *s, const char *why, struct ig_errbuf *eb)
{
	uint32_t n = s->n_prompt + (s->n_out ? s->n_out - 1 : 0);
	uint32_t *feed = s->feed;
	int rc;

	if (s->have_state)
		e->be->ops->seq_release(e->be, e->d, &s->ms);
	s->have_state = false;
	rc = e->be->ops->seq_init(e->be, e->d, &s->ms, eb);
	if (rc)
		return rc;
	s->have_state = true;
	if (n > s->n_prompt) {
		feed = malloc((size_t)n * sizeof(uint32_t));
		if (!feed)
			return ig_errf(eb, IG_E_NOMEM, "no memory to replay request %llu",
			               (unsigned long long)s->sch.id);
		memcpy(feed, s->prompt, (size_t)s->n_prompt * sizeof(uint32_t));
		memcpy(feed + s->n_prompt, s->out, (size_t)(n - s->n_prompt) * sizeof(uint32_t));
		if (s->feed != s->prompt)
			free(s->feed);
	} else {
		feed = s->prompt;
	}
	s->feed = feed;
	s->sch.prompt = n;
	s->sch.prefilled = 0;
	s->replay_skip = s->n_out > 0;
	s->sch.phase = SCHED_PREFILL;
	e->st.lost++;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_LOST,
	                                  .id = s->sch.id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages,
	                                  .why = why});
	return IG_E_OK;
}

int eng__take_pages(struct eng *e, struct eng_seq *s, const uint32_t *shared, uint32_t n_shared,
                    uint32_t pages, struct ig_errbuf *eb)
{
	int err = 0, rc;

	if (!kvpool_try_reserve_after(e->kv, &s->ms.kv, (uint32_t)s->sch.id, shared, n_shared,
	                              pages, &err))
		return ig_errf(
		    eb, err ? err : IG_E_INVAL,
		    "request %llu: %u fresh pages did not fit where the plan saw %u free",
		    (unsigned long long)s->sch.id, pages - n_shared, e->kv->n_free);
	rc = e->be->ops->seq_init(e->be, e->d, &s->ms, eb);
	if (rc) {
		kvpool_free(e->kv, &s->ms.kv);
		return rc;
	}
	s->have_state = true;
	return IG_E_OK;
}

/* Apply the plan's restores (pages reserved now, windows later) and its
 * victims (after the round's compute: they ran this round still). */
static int eng__restores(struct eng *e, struct ig_errbuf *eb)
{
	for (uint32_t k = 0; k < e->r.n_restore; k++) {
		uint32_t slot = e->snap_slot[e->r.restore[k]];
		struct eng_seq *s = &e->seqs[slot];
		int rc = eng__take_pages(e, s, NULL, 0, s->sch.pages, eb);

		if (rc)
			return rc;
		engmv__restore(e, s);
	}
	return IG_E_OK;
}

static void eng__victims(struct eng *e)
{
	uint64_t for_id;

	if (!e->r.n_victims || e->r.need < 0)
		return;
	for_id = e->snap[e->r.need].id;
	for (uint32_t k = 0; k < e->r.n_victims; k++) {
		uint32_t slot = e->snap_slot[e->r.victims[k]];
		struct eng_seq *s = &e->seqs[slot];

		if (!s->used || (s->sch.phase != SCHED_PREFILL && s->sch.phase != SCHED_READY &&
		                 s->sch.phase != SCHED_DECODE))
			continue; /* finished this round */
		engmv__evict(e, s, for_id);
	}
}

static int eng__round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb);

int eng_round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb)
{
	int rc = eng__round(e, ran, eb);

	/* the window copies posted at the start of the round ran beside its
	 * compute: their commits go, or the moved sequence resumes, now */
	engmv__collect(e);
	return rc;
}

static int eng__round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb)
{
	uint32_t n = 0, n_steps = 0, n_logits = 0, tokens, skipped = 0;
	int rc;

	*ran = 0;
	engmv__turn(e); /* the needless moves stopped, then each direction's turn */
	engru__before_plan(e);
	n = eng__snapshot(e);
	tokens = eng__plan(e, n);
	rc = eng__restores(e, eb);
	if (rc)
		return rc;
	/* admissions: the plan counted the free pages, so each fits */
	for (uint32_t k = 0; k < e->r.n_admit; k++) {
		struct eng_seq *s = &e->seqs[e->snap_slot[e->r.admit[k]]];
		const float *first = NULL;
		bool admitted = true;

		if (s->ck >= 0) {
			/* from a retained checkpoint (reuse.c): the rest of the prompt,
			 * or, for the same prompt, its first token at once; a host
			 * checkpoint whose image went leaves it waiting, planned again
			 * next round with its whole prompt */
			rc = engru__admit(e, s, &first, &admitted, eb);
		} else {
			engru__admitted_whole(e, s);
			rc = eng__take_pages(e, s, NULL, 0, s->sch.pages, eb);
			s->sch.phase = SCHED_PREFILL;
		}
		if (rc)
			return rc;
		if (!admitted)
			continue;
		e->st.admitted++;
		eng__seq_event(e, ENG_EV_ADMITTED, s);
		if (first)
			eng__emit(e, s, first);
	}
	for (uint32_t k = 0; k < e->r.n_grant; k++) {
		struct eng_seq *s = &e->seqs[e->snap_slot[e->r.grant[k]]];

		if (s->sch.phase == SCHED_READY) /* not one its first token ended */
			s->sch.phase = SCHED_DECODE;
	}
	if (tokens == 0) {
		eng__victims(e);
		return IG_E_OK;
	}
	/* the batch: decode tokens first, then the prefill chunks */
	for (uint32_t k = 0; k < e->r.n_decode; k++) {
		uint32_t slot = e->snap_slot[e->r.decode[k]];
		struct eng_seq *s = &e->seqs[slot];

		if (s->sch.phase != SCHED_DECODE)
			continue; /* admitted with its first token, which ended it */
		e->step_slot[n_steps] = slot;
		e->steps[n_steps++] = (struct be_step){&s->ms, &s->out[s->n_out - 1], 1, true};
	}
	for (uint32_t k = 0; k < e->r.n_prefill; k++) {
		const struct sched_chunk *c = &e->r.prefill[k];
		uint32_t slot = e->snap_slot[c->seq];
		struct eng_seq *s = &e->seqs[slot];
		/* the end of a replay takes no logits: its token was generated */
		bool last = c->from + c->n == s->sch.prompt && !s->replay_skip;
		/* a shared prefix is retained where the chunk ends (reuse.c) */
		bool split = s->sch.split && c->from + c->n == s->sch.split;

		if (s->sch.phase != SCHED_PREFILL || c->from != s->sch.prefilled) {
			skipped +=
			    c->n; /* not admitted after all (its claim failed: engru__admit) */
			continue;
		}
		e->step_slot[n_steps] = slot;
		/* an echo request's chunk: a row of logits a token, its prompt's
		 * log-probabilities (the planner counted them: sch.rows_each) */
		e->steps[n_steps++] =
		    (struct be_step){&s->ms, s->feed + c->from, c->n,
		                     s->sch.rows_each && s->plp ? c->n : (uint32_t)(last || split)};
	}
	n_logits = 0;
	for (uint32_t k = 0; k < n_steps; k++)
		n_logits += e->steps[k].tail_logits;
	if (n_logits > e->logit_rows)
		return ig_errf(eb, IG_E_INVAL,
		               "a round asks %u rows of logits; the engine holds %u (a planner "
		               "bug)",
		               n_logits, e->logit_rows);
	n_logits = 0;
	if (n_steps)
		rc = e->be->ops->round(e->be, e->d, e->steps, n_steps, e->cfg.fmt, e->kv,
		                       e->cfg.context, e->logits, eb);
	if (rc)
		return rc;
	for (uint32_t k = 0; k < n_steps; k++) {
		struct eng_seq *s = &e->seqs[e->step_slot[k]];
		const struct be_step *st = &e->steps[k];
		const float *rows = e->logits + (size_t)n_logits * e->d->m->vocab;
		/* the step's last token's row, when it has rows */
		const float *end =
		    st->tail_logits ? rows + (size_t)(st->tail_logits - 1) * e->d->m->vocab : NULL;

		n_logits += st->tail_logits;
		if (s->sch.phase == SCHED_PREFILL) {
			if (s->plp && s->plp_ready < s->n_prompt && st->tail_logits)
				eng__prompt_lps(e, s, s->sch.prefilled, st, rows);
			s->sch.prefilled += st->n_tok;
			if (s->sch.split && s->sch.prefilled == s->sch.split) {
				engru__capture(e, s, s->sch.split, ENG_CK_PREFIX, end);
				s->sch.split = 0;
				continue;
			}
			if (s->sch.prefilled < s->sch.prompt)
				continue;
			s->sch.phase = SCHED_READY;
			if (s->replay_skip) {
				s->replay_skip = false;
				continue;
			}
			/* its prompt, retained for the next that begins with it */
			engru__capture(e, s, s->n_prompt, ENG_CK_CHECKPOINT, end);
		}
		eng__emit(e, s, end);
	}
	eng__victims(e);
	e->st.rounds++;
	e->st.decode_tokens += e->r.n_decode;
	e->st.prefill_tokens += e->r.prefill_tokens - skipped;
	*ran = tokens - skipped;
	return IG_E_OK;
}

int eng_tokens(const struct eng *e, uint64_t id, uint32_t from, uint32_t max, uint32_t *out,
               uint32_t *n, struct eng_status *st, struct ig_errbuf *eb)
{
	const struct eng_seq *s = eng__find(e, id);
	uint32_t k;

	*n = 0;
	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "id: no request %llu (finished ones are kept "
		               "until forgotten)",
		               (unsigned long long)id);
	if (from > s->n_out)
		return ig_errf(eb, IG_E_INVAL, "from: %u; request %llu has generated %u tokens",
		               from, (unsigned long long)id, s->n_out);
	k = s->n_out - from < max ? s->n_out - from : max;
	memcpy(out, s->out + from, (size_t)k * sizeof(uint32_t));
	*n = k;
	st->phase = s->sch.phase;
	st->finish = s->finish;
	st->generated = s->n_out;
	st->cached = s->cached;
	return IG_E_OK;
}

int eng_output(const struct eng *e, uint64_t id, const uint32_t **out, struct eng_status *st,
               struct ig_errbuf *eb)
{
	const struct eng_seq *s = eng__find(e, id);

	*out = NULL;
	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "id: no request %llu (finished ones are kept "
		               "until forgotten)",
		               (unsigned long long)id);
	*out = s->n_out ? s->out : NULL;
	st->phase = s->sch.phase;
	st->finish = s->finish;
	st->generated = s->n_out;
	st->cached = s->cached;
	return IG_E_OK;
}

int eng_logprobs_ask(struct eng *e, uint64_t id, uint32_t top, struct ig_errbuf *eb)
{
	struct eng_seq *s = eng__find(e, id);

	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND, "id: no request %llu", (unsigned long long)id);
	if (top > SMP_TOP_LOGPROBS_MAX)
		return ig_errf(eb, IG_E_INVAL, "top_logprobs: %u; accepted 0..%u", top,
		               SMP_TOP_LOGPROBS_MAX);
	if (s->n_out || s->lp)
		return ig_errf(eb, IG_E_INVAL,
		               "request %llu: log-probabilities are asked before its first token",
		               (unsigned long long)id);
	/* the whole cap at once, as `out`, and the prompt's with echo: a
	 * round never allocates */
	s->lp = malloc((size_t)s->cap * (1 + top) * sizeof(*s->lp));
	s->lp_n = malloc(s->cap);
	if (s->echo) {
		s->plp = malloc((size_t)s->n_prompt * (1 + top) * sizeof(*s->plp));
		s->plp_n = calloc(s->n_prompt, 1);
	}
	if (!s->lp || !s->lp_n || (s->echo && (!s->plp || !s->plp_n))) {
		free(s->lp);
		free(s->lp_n);
		free(s->plp);
		free(s->plp_n);
		s->lp = s->plp = NULL;
		s->lp_n = s->plp_n = NULL;
		return ig_errf(eb, IG_E_NOMEM,
		               "no memory for the log-probabilities of %u tokens (top %u)",
		               s->cap + (s->echo ? s->n_prompt : 0), top);
	}
	s->lp_k = top;
	s->plp_ready = s->echo ? 1 : 0; /* position 0 has none */
	s->sch.rows_each = s->echo && s->plp_ready < s->n_prompt;
	return IG_E_OK;
}

int eng_logprobs(const struct eng *e, uint64_t id, uint32_t i, double *lp, struct smp_logprob *top,
                 uint32_t *n, struct ig_errbuf *eb)
{
	const struct eng_seq *s = eng__find(e, id);
	const struct smp_logprob *g;

	*n = 0;
	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND, "id: no request %llu", (unsigned long long)id);
	if (!s->lp || i >= s->n_out)
		return ig_errf(eb, IG_E_INVAL,
		               "request %llu: no log-probabilities of token %u (%s; %u generated)",
		               (unsigned long long)id, i, s->lp ? "asked" : "not asked", s->n_out);
	g = s->lp + (size_t)i * (1 + s->lp_k);
	*lp = g[0].lp;
	*n = s->lp_n[i];
	memcpy(top, g + 1, (size_t)*n * sizeof(*top));
	return IG_E_OK;
}

int eng_prompt(const struct eng *e, uint64_t id, const uint32_t **tokens, uint32_t *n,
               uint32_t *ready, struct ig_errbuf *eb)
{
	const struct eng_seq *s = eng__find(e, id);

	*tokens = NULL;
	*n = *ready = 0;
	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND, "id: no request %llu", (unsigned long long)id);
	*tokens = s->prompt;
	*n = s->n_prompt;
	*ready = s->plp ? s->plp_ready : 0;
	return IG_E_OK;
}

int eng_prompt_logprobs(const struct eng *e, uint64_t id, uint32_t i, double *lp,
                        struct smp_logprob *top, uint32_t *n, struct ig_errbuf *eb)
{
	const struct eng_seq *s = eng__find(e, id);
	const struct smp_logprob *g;

	*n = 0;
	*lp = 0;
	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND, "id: no request %llu", (unsigned long long)id);
	if (!s->plp || i >= s->plp_ready)
		return ig_errf(eb, IG_E_INVAL,
		               "request %llu: no log-probabilities of prompt token %u (%s; %u of "
		               "%u ready)",
		               (unsigned long long)id, i,
		               !s->echo  ? "submitted without echo"
		               : !s->plp ? "not asked"
		                         : "not prefilled yet",
		               s->plp ? s->plp_ready : 0, s->n_prompt);
	if (i == 0)
		return IG_E_OK;
	g = s->plp + (size_t)i * (1 + s->lp_k);
	*lp = g[0].lp;
	*n = s->plp_n[i];
	memcpy(top, g + 1, (size_t)*n * sizeof(*top));
	return IG_E_OK;
}

/* End a running request at its first `keep` tokens (a stop string found by
 * cfg.on_token): the tokens after are dropped, finish ENG_STOP. */
static void eng__stop(struct eng *e, struct eng_seq *s, uint32_t keep)
{
	s->n_out = keep;
	eng__finish(e, s, ENG_STOP);
}

int eng_cancel(struct eng *e, uint64_t id, struct ig_errbuf *eb)
{
	struct eng_seq *s = eng__find(e, id);

	if (!s)
		return ig_errf(eb, IG_E_NOTFOUND, "id: no request %llu", (unsigned long long)id);
	if (s->sch.phase == SCHED_DONE)
		eng__forget(e, s);
	else
		eng__finish(e, s, ENG_CANCELLED);
	return IG_E_OK;
}

bool eng_check(const struct eng *e, struct ig_errbuf *eb)
{
	const struct kvseq **live = calloc((size_t)e->n_slots + e->n_ck + 1, sizeof(*live));
	uint32_t n = 0;
	bool ok;

	if (!live) {
		ig_errf(eb, IG_E_NOMEM, "no memory to check the pool");
		return false;
	}
	for (uint32_t i = 0; i < e->n_slots; i++)
		if (e->seqs[i].used && e->seqs[i].ms.kv.table)
			live[n++] = &e->seqs[i].ms.kv;
	for (uint32_t i = 0; i < e->n_ck; i++)
		if (e->ck[i].used && e->ck[i].kv.table)
			live[n++] = &e->ck[i].kv;
	ok = kvpool_check(e->kv, live, n, eb);
	free(live);
	return ok;
}

void eng_stats(const struct eng *e, struct eng_stats *st)
{
	*st = e->st;
	st->live = st->waiting = st->lanes_used = st->prefill = st->ready = 0;
	st->moving_out = st->moved = st->moving_in = 0;
	st->pending_pages = 0;
	st->checkpoints = st->host_checkpoints = 0;
	st->retained_slots = e->n_ck_dev;
	st->retained_host = e->n_ck - e->n_ck_dev;
	for (uint32_t i = 0; i < e->n_ck; i++) {
		st->checkpoints += e->ck[i].used && !e->ck[i].host;
		st->host_checkpoints += e->ck[i].used && e->ck[i].host && e->ck[i].hs == CKH_HELD;
	}
	for (uint32_t i = 0; i < e->n_slots; i++) {
		const struct eng_seq *s = &e->seqs[i];

		if (!s->used || s->sch.phase == SCHED_DONE)
			continue;
		st->live++;
		st->waiting += s->sch.phase == SCHED_WAITING;
		st->prefill += s->sch.phase == SCHED_PREFILL;
		st->ready += s->sch.phase == SCHED_READY;
		st->lanes_used += s->sch.phase == SCHED_DECODE;
		st->moving_out += s->sch.phase == SCHED_MOVING_OUT;
		st->moved += s->sch.phase == SCHED_MOVED;
		st->moving_in += s->sch.phase == SCHED_MOVING_IN;
		if (s->sch.phase == SCHED_WAITING)
			st->pending_pages += s->sch.pages;
	}
	st->free_pages = e->kv->n_free;
	st->retained_pages = engru__retained_pages(e);
}

const char *eng_finish_name(enum eng_finish f)
{
	switch (f) {
	case ENG_RUNNING:
		return "";
	case ENG_LENGTH:
		return "length";
	case ENG_CONTEXT:
		return "context";
	case ENG_EOS:
		return "eos";
	case ENG_CANCELLED:
		return "cancelled";
	case ENG_STOP:
		return "stop";
	case ENG_GRAMMAR:
		return "grammar";
	}
	return "error";
}
