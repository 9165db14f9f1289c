/* engine.c - requests, rounds and outputs (see engine.h). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"

const uint64_t eng_ttft_bounds_us[ENG_TTFT_NBOUNDS] = ENG_TTFT_BOUNDS_US;

struct eng_seq {
	bool used;
	struct sched_seq sch; /* the planner's view; sch.id is the request id */
	struct mdl_seq ms;    /* pages and linear states while admitted */
	bool have_state;
	struct smp_params smp;
	struct smp_state rng;
	uint32_t *prompt;
	uint32_t *out, n_out, cap;
	bool cap_cut; /* cap shortened to fit the context */
	enum eng_finish finish;
	uint64_t finished_at; /* finish order: the oldest is forgotten first */
	uint64_t submit_us;   /* clk_mono_us at its submit, for the time to first token */
};

struct eng {
	struct be *be;
	const struct mdl *d;
	struct kvpool *kv;
	struct cpool *pool;
	struct eng_cfg cfg;
	struct eng_seq *seqs;
	uint32_t n_slots;
	uint64_t next_id, arrivals, finishes;

	/* per round, sized once */
	struct sched_seq *snap;
	uint32_t *snap_slot, *order;
	struct sched_round r;
	struct mdl_step *steps;
	uint32_t *step_slot;
	float *logits;
	void *scratch;
	struct smp_scratch *smp_scratch;
	uint32_t max_steps;

	struct eng_stats st;
};

static void eng__release_state(struct eng *e, struct eng_seq *s)
{
	kvpool_free(e->kv, &s->ms.kv);
	if (s->have_state)
		mdl_seq_release(&s->ms);
	s->have_state = false;
}

static void eng__forget(struct eng *e, struct eng_seq *s)
{
	eng__release_state(e, s);
	free(s->prompt);
	free(s->out);
	memset(s, 0, sizeof(*s));
}

static void eng__finish(struct eng *e, struct eng_seq *s, enum eng_finish why)
{
	eng__release_state(e, s);
	s->sch.phase = SCHED_DONE;
	s->finish = why;
	s->finished_at = ++e->finishes;
	e->st.finished++;
	e->st.finished_by[why]++;
	if (e->cfg.on_finish)
		e->cfg.on_finish(e->cfg.ctx, s->sch.id, (int)why, s->sch.prompt, s->n_out);
}

int eng_create(struct eng **out, struct be *be, const struct mdl *d, struct kvpool *kv,
               struct cpool *pool, const struct eng_cfg *cfg, struct ig_errbuf *eb)
{
	struct eng *e;
	uint32_t n;
	size_t scratch;

	*out = NULL;
	if (!be || !be->ops || !be->ops->round)
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
	e = calloc(1, sizeof(*e));
	if (!e)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the engine");
	e->be = be;
	e->d = d;
	e->kv = kv;
	e->pool = pool;
	e->cfg = *cfg;
	e->n_slots = n = cfg->max_requests;
	/* a round runs every lane holder and at most `chunk` prefill steps */
	e->max_steps = cfg->lanes + (cfg->chunk < n ? cfg->chunk : n);
	scratch = mdl_scratch_bytes(d, cfg->lanes + cfg->chunk, cfg->context);
	e->seqs = calloc(n, sizeof(*e->seqs));
	e->snap = calloc(n, sizeof(*e->snap));
	e->snap_slot = calloc(n, sizeof(*e->snap_slot));
	e->order = calloc(n, sizeof(*e->order));
	e->r.admit = calloc(n, sizeof(uint32_t));
	e->r.grant = calloc(n, sizeof(uint32_t));
	e->r.decode = calloc(n, sizeof(uint32_t));
	e->r.prefill = calloc(n, sizeof(*e->r.prefill));
	e->steps = calloc(e->max_steps, sizeof(*e->steps));
	e->step_slot = calloc(e->max_steps, sizeof(*e->step_slot));
	e->logits = calloc((size_t)e->max_steps * d->m->vocab, sizeof(float));
	e->scratch = aligned_alloc(64, (scratch + 63) / 64 * 64);
	e->smp_scratch = malloc(smp_scratch_bytes(d->m->vocab));
	if (!e->seqs || !e->snap || !e->snap_slot || !e->order || !e->r.admit || !e->r.grant ||
	    !e->r.decode || !e->r.prefill || !e->steps || !e->step_slot || !e->logits ||
	    !e->scratch || !e->smp_scratch) {
		eng_destroy(e);
		return ig_errf(eb, IG_E_NOMEM,
		               "no memory for an engine of %u requests (%zu bytes of scratch)", n,
		               scratch);
	}
	e->next_id = 1;
	*out = e;
	return IG_E_OK;
}

void eng_destroy(struct eng *e)
{
	if (!e)
		return;
	for (uint32_t i = 0; e->seqs && i < e->n_slots; i++)
		if (e->seqs[i].used)
			eng__forget(e, &e->seqs[i]);
	free(e->seqs);
	free(e->snap);
	free(e->snap_slot);
	free(e->order);
	free(e->r.admit);
	free(e->r.grant);
	free(e->r.decode);
	free(e->r.prefill);
	free(e->steps);
	free(e->step_slot);
	free(e->logits);
	free(e->scratch);
	free(e->smp_scratch);
	free(e);
}

static struct eng_seq *eng__find(const struct eng *e, uint64_t id)
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
		               (unsigned long long)e->kv->n_pages * KVPOOL_PAGE_TOKENS);
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
		if (!e->seqs[i].used || e->seqs[i].sch.phase == SCHED_DONE)
			continue;
		e->snap[n] = e->seqs[i].sch;
		e->snap_slot[n++] = i;
	}
	return n;
}

static uint32_t eng__plan(struct eng *e, uint32_t n)
{
	const struct sched_cfg cfg = {e->cfg.lanes, e->cfg.chunk};

	return sched_plan(&cfg, e->snap, n, e->kv->n_free, e->order, &e->r);
}

bool eng_busy(struct eng *e)
{
	return eng__plan(e, eng__snapshot(e)) > 0;
}

/* Take the sampled token of a step that produced logits. */
static void eng__emit(struct eng *e, struct eng_seq *s, const float *logits)
{
	uint32_t tok = smp_pick(&s->smp, &s->rng, logits, e->d->m->vocab, e->smp_scratch);

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
	if (tok == e->cfg.eos)
		eng__finish(e, s, ENG_EOS);
	else if (s->n_out >= s->cap)
		eng__finish(e, s, s->cap_cut ? ENG_CONTEXT : ENG_LENGTH);
}

int eng_round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb)
{
	uint32_t n = 0, n_steps = 0, n_logits = 0, tokens;
	int rc;

	*ran = 0;
	n = eng__snapshot(e);
	tokens = eng__plan(e, n);
	/* admissions: the plan counted the free pages, so each fits */
	for (uint32_t k = 0; k < e->r.n_admit; k++) {
		struct eng_seq *s = &e->seqs[e->snap_slot[e->r.admit[k]]];
		int err = 0;

		if (!kvpool_try_reserve(e->kv, &s->ms.kv, (uint32_t)s->sch.id, s->sch.pages, &err))
			return ig_errf(
			    eb, err ? err : IG_E_INVAL,
			    "request %llu: %u pages did not fit where the plan saw %u free",
			    (unsigned long long)s->sch.id, s->sch.pages, e->kv->n_free);
		rc = mdl_seq_init(e->d, &s->ms, eb);
		if (rc) {
			kvpool_free(e->kv, &s->ms.kv);
			return rc;
		}
		s->have_state = true;
		s->sch.phase = SCHED_PREFILL;
		e->st.admitted++;
	}
	for (uint32_t k = 0; k < e->r.n_grant; k++)
		e->seqs[e->snap_slot[e->r.grant[k]]].sch.phase = SCHED_DECODE;
	if (tokens == 0)
		return IG_E_OK;
	/* the batch: decode tokens first, then the prefill chunks */
	for (uint32_t k = 0; k < e->r.n_decode; k++) {
		uint32_t slot = e->snap_slot[e->r.decode[k]];
		struct eng_seq *s = &e->seqs[slot];

		e->step_slot[n_steps] = slot;
		e->steps[n_steps++] = (struct mdl_step){&s->ms, &s->out[s->n_out - 1], 1, true};
		n_logits++;
	}
	for (uint32_t k = 0; k < e->r.n_prefill; k++) {
		const struct sched_chunk *c = &e->r.prefill[k];
		uint32_t slot = e->snap_slot[c->seq];
		struct eng_seq *s = &e->seqs[slot];
		bool last = c->from + c->n == s->sch.prompt;

		e->step_slot[n_steps] = slot;
		e->steps[n_steps++] = (struct mdl_step){&s->ms, s->prompt + c->from, c->n, last};
		n_logits += last;
	}
	rc = e->be->ops->round(e->be, e->d, e->steps, n_steps, e->cfg.fmt, e->kv, e->cfg.context,
	                       e->logits, e->scratch, e->pool, eb);
	if (rc)
		return rc;
	n_logits = 0;
	for (uint32_t k = 0; k < n_steps; k++) {
		struct eng_seq *s = &e->seqs[e->step_slot[k]];

		if (s->sch.phase == SCHED_PREFILL) {
			s->sch.prefilled += e->steps[k].n_tok;
			if (s->sch.prefilled < s->sch.prompt)
				continue;
			s->sch.phase = SCHED_READY;
		}
		eng__emit(e, s, e->logits + (size_t)n_logits++ * e->d->m->vocab);
	}
	e->st.rounds++;
	e->st.decode_tokens += e->r.n_decode;
	e->st.prefill_tokens += e->r.prefill_tokens;
	*ran = tokens;
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
	return IG_E_OK;
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

void eng_stats(const struct eng *e, struct eng_stats *st)
{
	*st = e->st;
	st->live = st->waiting = st->lanes_used = st->prefill = st->ready = 0;
	st->pending_pages = 0;
	for (uint32_t i = 0; i < e->n_slots; i++) {
		const struct eng_seq *s = &e->seqs[i];

		if (!s->used || s->sch.phase == SCHED_DONE)
			continue;
		st->live++;
		st->waiting += s->sch.phase == SCHED_WAITING;
		st->prefill += s->sch.phase == SCHED_PREFILL;
		st->ready += s->sch.phase == SCHED_READY;
		st->lanes_used += s->sch.phase == SCHED_DECODE;
		if (s->sch.phase == SCHED_WAITING)
			st->pending_pages += s->sch.pages;
	}
	st->free_pages = e->kv->n_free;
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
	}
	return "error";
}
