/* engine.c - requests, rounds and outputs (see engine.h). */
#include "engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kvclient.h"
#include "seqimg.h"

const uint64_t eng_ttft_bounds_us[ENG_TTFT_NBOUNDS] = ENG_TTFT_BOUNDS_US;

/* Rounds a victim whose move the tier refused stays off the victim list. */
#define ENG_STAY_ROUNDS 256u

struct eng_seq {
	bool used;
	struct sched_seq sch; /* the planner's view; sch.id is the request id */
	struct be_seq ms;     /* pages and fixed-size state while admitted */
	bool have_state;
	struct smp_params smp;
	struct smp_state rng;
	uint32_t *prompt;
	uint32_t *out, n_out, cap;
	bool cap_cut; /* cap shortened to fit the context */
	enum eng_finish finish;
	uint64_t finished_at; /* finish order: the oldest is forgotten first */
	uint64_t submit_us;   /* clk_mono_us at its submit, for the time to first token */
	/* moves */
	uint32_t n_prompt;       /* the request's prompt (sch.prompt counts a replay) */
	uint32_t *feed;          /* what prefill feeds: the prompt, or a replay */
	bool replay_skip;        /* the replay ends on a token already generated */
	enum sched_phase resume; /* where a moved sequence goes on */
	bool in_tier;            /* the kvstore may hold a record of it */
	uint64_t for_id;         /* the need it was moved for */
	uint64_t stay_until;     /* not a victim before this round (a move refused) */
};

/* One direction of moves: one sequence at a time, one window in flight. */
enum eng_xstep {
	XS_IDLE = 0,
	XS_RESERVE, /* out: kv_reserve sent */
	XS_COMMIT,  /* out: window k written, its kv_commit sent */
	XS_FETCH,   /* in: kv_fetch sent */
	XS_READ,    /* in: reading window k, one a round */
	XS_STAGE,   /* in, from KV-disk: kv_stage of window k sent */
	XS_COPY,    /* out: window k being gathered into the arena (transfer stream) */
	XS_SCATTER, /* in: windows k.. being scattered into the pages (transfer stream) */
	XS_DROP,    /* a kv_drop sent (after a restore, or for a cancelled one) */
};

struct eng_xfer {
	struct kvc *c;
	uint64_t window;
	enum eng_xstep step;
	bool waiting; /* a request is in flight on c */
	uint32_t slot;
	uint64_t id, key;
	uint64_t offset, image_bytes, t0_us;
	uint64_t r0, d0; /* the engine's rounds and decode tokens at the start */
	uint32_t k, windows;
	const char *tier;
	bool staged; /* KV-disk straight: every window through one staging window */
	struct seqimg_writer w;
	struct seqimg_reader r;
	void **pages; /* the pool's page count */
	uint8_t sampler[SMP_STATE_BYTES];
	uint64_t *sums;   /* KVC_MAX_WINDOWS */
	uint32_t backoff; /* rounds to wait before asking again (tier full) */
	/* the window copy in flight (XS_COPY, XS_SCATTER) on the backend's
	 * transfer stream, and its ticket: its results are read once done */
	struct be_img img;
	uint64_t ticket;
};

struct eng {
	struct be *be;
	const struct be_model *d;
	struct kvpool *kv;
	struct eng_cfg cfg;
	struct eng_seq *seqs;
	uint32_t n_slots;
	uint64_t next_id, arrivals, finishes;

	/* per round, sized once */
	struct sched_seq *snap;
	uint32_t *snap_slot, *order;
	struct sched_round r;
	struct be_step *steps;
	uint32_t *step_slot;
	float *logits;
	struct smp_scratch *smp_scratch;
	uint32_t max_steps;

	struct eng_stats st;

	/* moves: their window copies go on the backend's transfer stream,
	 * beside the rounds */
	bool moves;
	struct eng_xfer xo, xi;
	uint32_t *vq, n_vq; /* victims to move out, in order (slots) */
	uint32_t *iq, n_iq; /* restores to move in, in rank order (slots) */
	/* tier keys to drop when the out client is free, each once; room for
	 * one per request slot and as many more (a key past that stays in the
	 * tier until the next worker's sweep) */
	uint64_t *drops;
	uint32_t n_drops, cap_drops;
};

/* Wait for a window copy of the sequence in `slot` on the transfer stream,
 * if one runs (its pages and state are about to change hands). */
static void eng__xfer_quiet(struct eng *e, uint32_t slot)
{
	struct ig_errbuf eb;

	if (e->xo.step == XS_COPY && e->xo.slot == slot)
		e->be->ops->xfer_wait(e->be, e->xo.ticket, &eb);
	if (e->xi.step == XS_SCATTER && e->xi.slot == slot)
		e->be->ops->xfer_wait(e->be, e->xi.ticket, &eb);
}

static void eng__release_state(struct eng *e, struct eng_seq *s)
{
	uint32_t slot = (uint32_t)(s - e->seqs);

	/* a window copy of this sequence still running reads or writes its
	 * pages and state: it ends before they are given back */
	eng__xfer_quiet(e, slot);
	kvpool_free(e->kv, &s->ms.kv);
	if (s->have_state)
		e->be->ops->seq_release(e->be, &s->ms);
	s->have_state = false;
}

static void eng__forget(struct eng *e, struct eng_seq *s)
{
	eng__release_state(e, s);
	if (s->feed != s->prompt)
		free(s->feed);
	free(s->prompt);
	free(s->out);
	memset(s, 0, sizeof(*s));
}

static uint64_t eng__key(const struct eng *e, uint64_t id)
{
	return ((uint64_t)e->cfg.tier_nonce << 32) | (id & 0xffffffffu);
}

static void eng__queue_drop(struct eng *e, uint64_t key)
{
	for (uint32_t i = 0; i < e->n_drops; i++)
		if (e->drops[i] == key)
			return;
	if (e->n_drops < e->cap_drops)
		e->drops[e->n_drops++] = key;
}

static void eng__finish(struct eng *e, struct eng_seq *s, enum eng_finish why)
{
	if (s->in_tier) {
		eng__queue_drop(e, eng__key(e, s->sch.id));
		s->in_tier = false;
	}
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
	e->vq = calloc(n, sizeof(uint32_t));
	e->iq = calloc(n, sizeof(uint32_t));
	e->cap_drops = 2 * n;
	e->drops = calloc(e->cap_drops, sizeof(uint64_t));
	e->steps = calloc(e->max_steps, sizeof(*e->steps));
	e->step_slot = calloc(e->max_steps, sizeof(*e->step_slot));
	e->logits = calloc((size_t)e->max_steps * d->m->vocab, sizeof(float));
	e->smp_scratch = malloc(smp_scratch_bytes(d->m->vocab));
	if (!e->seqs || !e->snap || !e->snap_slot || !e->order || !e->r.admit || !e->r.grant ||
	    !e->r.decode || !e->r.prefill || !e->steps || !e->step_slot || !e->logits ||
	    !e->smp_scratch || !e->r.restore || !e->r.victims || !e->vq || !e->iq || !e->drops) {
		eng_destroy(e);
		return ig_errf(eb, IG_E_NOMEM, "no memory for an engine of %u requests", n);
	}
	e->next_id = 1;
	if ((cfg->kv_out != NULL) != (cfg->kv_in != NULL) ||
	    (cfg->kv_out && (!cfg->window_out || !cfg->window_in))) {
		eng_destroy(e);
		return ig_errf(eb, IG_E_INVAL,
		               "engine: moves need both kvstore clients and both window sizes "
		               "(out %llu, in %llu bytes)",
		               (unsigned long long)cfg->window_out,
		               (unsigned long long)cfg->window_in);
	}
	if (cfg->kv_out && (cfg->tier_nonce == 0 || cfg->tier_nonce > INT32_MAX)) {
		eng_destroy(e);
		return ig_errf(
		    eb, IG_E_INVAL,
		    "engine: tier nonce %u; accepted: 1 to 2^31-1 (a key's owner, msg.h)",
		    cfg->tier_nonce);
	}
	if (cfg->kv_out) {
		struct ig_errbuf e2 = {0};
		struct msg q;

		e->moves = true;
		e->xo = (struct eng_xfer){.c = cfg->kv_out, .window = cfg->window_out};
		e->xi = (struct eng_xfer){.c = cfg->kv_in, .window = cfg->window_in};
		e->xo.pages = calloc(kv->n_pages ? kv->n_pages : 1, sizeof(void *));
		e->xi.pages = calloc(kv->n_pages ? kv->n_pages : 1, sizeof(void *));
		e->xi.sums = calloc(KVC_MAX_WINDOWS, sizeof(uint64_t));
		if (!e->xo.pages || !e->xi.pages || !e->xi.sums) {
			eng_destroy(e);
			return ig_errf(eb, IG_E_NOMEM, "no memory for the engine's moves");
		}
		if (!be->ops->img_gather_async || !be->ops->img_scatter_async) {
			eng_destroy(e);
			return ig_errf(eb, IG_E_INVAL,
			               "the %s backend cannot move a sequence's windows (no image "
			               "copies on its transfer stream)",
			               be->ops->name);
		}
		/* first on the out client: what an earlier worker left in the
		 * tiers goes (its requests ended with it); the reply is only
		 * collected, the moves do not wait for it */
		kvc_req_sweep(&q, cfg->tier_nonce);
		e->xo.step = XS_DROP;
		e->xo.waiting = kvc_start(e->xo.c, &q, &e2) == IG_E_OK;
		if (!e->xo.waiting)
			e->xo.step = XS_IDLE;
	}
	*out = e;
	return IG_E_OK;
}

void eng_destroy(struct eng *e)
{
	if (!e)
		return;
	if (e->moves) { /* a window copy in flight ends first */
		struct ig_errbuf eb;

		e->be->ops->xfer_wait(e->be, e->xo.ticket, &eb);
		e->be->ops->xfer_wait(e->be, e->xi.ticket, &eb);
	}
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
	free(e->r.restore);
	free(e->r.victims);
	free(e->vq);
	free(e->iq);
	free(e->drops);
	free(e->xo.pages);
	free(e->xi.pages);
	free(e->xi.sums);
	free(e->steps);
	free(e->step_slot);
	free(e->logits);
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
		e->snap[n].stay = e->seqs[i].stay_until > e->st.rounds;
		e->snap_slot[n++] = i;
	}
	return n;
}

static uint32_t eng__plan(struct eng *e, uint32_t n)
{
	const struct sched_cfg cfg = {e->cfg.lanes, e->cfg.chunk, e->moves};

	return sched_plan(&cfg, e->snap, n, e->kv->n_free, e->order, &e->r);
}

bool eng_busy(struct eng *e)
{
	if (e->moves &&
	    (e->xo.step != XS_IDLE || e->xi.step != XS_IDLE || e->n_vq || e->n_iq || e->n_drops))
		return true;
	e->r.n_restore = e->r.n_victims = 0;
	return eng__plan(e, eng__snapshot(e)) > 0 || e->r.n_restore > 0 || e->r.n_victims > 0;
}

static void eng__stop(struct eng *e, struct eng_seq *s, uint32_t keep);

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
	if (e->cfg.on_token) {
		uint32_t keep = e->cfg.on_token(e->cfg.ctx, s->sch.id, s->out, s->n_out);

		if (keep < s->n_out) {
			eng__stop(e, s, keep);
			return;
		}
	}
	if (tok == e->cfg.eos)
		eng__finish(e, s, ENG_EOS);
	else if (s->n_out >= s->cap)
		eng__finish(e, s, s->cap_cut ? ENG_CONTEXT : ENG_LENGTH);
}

/* ---- moves (engine.h; ADR 0017) ---------------------------------------------- */

static void eng__event(struct eng *e, const struct eng_event *ev)
{
	if (e->cfg.on_event)
		e->cfg.on_event(e->cfg.ctx, ev);
}

static void eng__seq_event(struct eng *e, enum eng_event_kind kind, const struct eng_seq *s)
{
	eng__event(e, &(struct eng_event){.kind = kind,
	                                  .id = s->sch.id,
	                                  .for_id = s->for_id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages});
}

/* Is the sequence a transfer is working on still the one, in that phase? */
static struct eng_seq *eng__xfer_seq(struct eng *e, const struct eng_xfer *x, enum sched_phase ph)
{
	struct eng_seq *s = &e->seqs[x->slot];

	return s->used && s->sch.id == x->id && s->sch.phase == ph ? s : NULL;
}

/* Its tier record is gone (given up, lost, or the move in failed): prefill
 * it again from the start in the pages it holds, the tokens it generated
 * replayed (the last one is fed by the next decode, as before the move). */
static int eng__replay(struct eng *e, struct eng_seq *s, const char *why, struct ig_errbuf *eb)
{
	uint32_t n = s->n_prompt + (s->n_out ? s->n_out - 1 : 0);
	uint32_t *feed = s->feed;
	int rc;

	if (s->have_state)
		e->be->ops->seq_release(e->be, &s->ms);
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
	s->in_tier = false;
	e->st.lost++;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_LOST,
	                                  .id = s->sch.id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages,
	                                  .why = why});
	return IG_E_OK;
}

/* Start moving victim `s` out: its image header and parts, then kv_reserve. */
static int eng__out_start(struct eng *e, struct eng_seq *s, struct ig_errbuf *eb)
{
	struct eng_xfer *x = &e->xo;
	struct seqimg_header h;
	struct msg q;

	smp_state_save(&s->rng, x->sampler);
	e->be->ops->seq_image(e->be, e->d, &s->ms, e->kv, e->cfg.fmt,
	                      s->n_out ? s->out[s->n_out - 1] : 0, sizeof(x->sampler), &h,
	                      x->pages);
	seqimg_writer_init(&x->w, &h, &(struct seqimg_parts){x->pages, s->ms.state, x->sampler});
	x->image_bytes = x->w.h.image_bytes;
	x->windows = (uint32_t)((x->image_bytes + x->window - 1) / x->window);
	x->k = 0;
	x->slot = (uint32_t)(s - e->seqs);
	x->id = s->sch.id;
	x->key = eng__key(e, s->sch.id);
	kvc_req_reserve(&q, x->key, h.model_id, e->cfg.fmt,
	                s->sch.cls == SCHED_AGENT ? "agent" : "interactive", x->image_bytes,
	                x->window);
	x->step = XS_RESERVE;
	x->t0_us = clk_mono_us();
	x->r0 = e->st.rounds;
	x->d0 = e->st.decode_tokens;
	x->waiting = true;
	s->in_tier = true;
	return kvc_start(x->c, &q, eb);
}

/* Start window k's copy into the arena; its commit goes once it is done
 * (eng__out_copied). */
static int eng__out_window(struct eng *e, struct ig_errbuf *eb)
{
	struct eng_xfer *x = &e->xo;
	struct kvc_arena a = kvc_arena(x->c);
	/* straight to disk: every window at the staging window's offset */
	uint64_t at = x->staged ? 0 : (uint64_t)x->k * x->window;
	uint64_t extent = x->staged && x->window < x->image_bytes ? x->window : x->image_bytes;

	if (!a.base || x->offset + extent > a.bytes)
		return ig_errf(eb, IG_E_NOTFOUND, "the KV-RAM arena is not mapped (or too small)");
	x->img = (struct be_img){
	    .w = &x->w, .dst = (unsigned char *)a.base + x->offset + at, .window = x->window};
	x->waiting = false;
	if (e->be->ops->img_gather_async(e->be, &x->img, &x->ticket, eb) != IG_E_OK)
		return eb->code ? eb->code : IG_E_IO;
	x->step = XS_COPY;
	return IG_E_OK;
}

/* A move out gives up this try (timed out, the daemon lost the reservation
 * in a restart, a window could not be placed): what the tier got of it is
 * dropped, and the victim, which kept its pages, starts again a few rounds
 * later, first in line (it is still the victim). */
static void eng__out_retry(struct eng *e)
{
	struct eng_xfer *x = &e->xo;

	e->st.move_retries++;
	eng__queue_drop(e, x->key);
	x->step = XS_IDLE;
	x->waiting = false;
	x->backoff = 2;
	memmove(e->vq + 1, e->vq, (size_t)e->n_vq * sizeof(*e->vq));
	e->vq[0] = x->slot;
	e->n_vq++;
}

/* Window k is in the arena: send its commit. Nothing while the copy runs. */
static void eng__out_copied(struct eng *e)
{
	struct eng_xfer *x = &e->xo;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (x->step != XS_COPY || !e->be->ops->xfer_done(e->be, x->ticket))
		return;
	if (e->be->ops->xfer_wait(e->be, x->ticket, &eb) != IG_E_OK) {
		/* the device failed the copy: the worker cannot go on (style rule 5) */
		fprintf(stderr, "ignis-gpu-worker: %s\n", eb.msg);
		abort();
	}
	if (!eng__xfer_seq(e, x, SCHED_MOVING_OUT)) { /* cancelled meanwhile */
		eng__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	kvc_req_commit(&q, x->key, x->k, x->img.n, x->img.sum);
	x->step = XS_COMMIT;
	x->waiting = true;
	if (kvc_start(x->c, &q, &eb) != IG_E_OK)
		eng__out_retry(e);
}

/* The out direction: at most one new window a round. */
static void eng__out_turn(struct eng *e)
{
	struct eng_xfer *x = &e->xo;
	struct ig_errbuf eb = {0};
	struct eng_seq *s;
	struct msg rep;
	bool done = false;
	int rc = IG_E_OK;

	if (x->step == XS_COPY) { /* its commit goes once the copy is done */
		eng__out_copied(e);
		return;
	}
	if (x->waiting) {
		rc = kvc_poll(x->c, &rep, &done, &eb);
		if (!done)
			return;
		x->waiting = false;
		if (x->step == XS_DROP) {
			x->step = XS_IDLE;
		} else if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_OUT))) {
			/* cancelled meanwhile: forget what the tier got */
			eng__queue_drop(e, x->key);
			x->step = XS_IDLE;
		} else if (rc == IG_E_NOSPACE) {
			/* the tier has no room for it now (KV-RAM full and nothing it
			 * may give up with KV-disk off; KV-disk's ceiling, or its volume
			 * full midway through a write straight to disk): it stays and
			 * runs on; not a victim again for a while, so the need looks
			 * elsewhere or waits */
			e->st.move_retries++;
			if (x->step == XS_COMMIT) /* windows already on their way to disk */
				eng__queue_drop(e, x->key);
			s->sch.phase = s->resume;
			s->in_tier = false;
			s->stay_until = e->st.rounds + ENG_STAY_ROUNDS;
			x->step = XS_IDLE;
			eng__event(e, &(struct eng_event){.kind = ENG_EV_MOVE_REFUSED,
			                                  .id = s->sch.id,
			                                  .for_id = s->for_id,
			                                  .cls = (int)s->sch.cls,
			                                  .pages = s->sch.pages,
			                                  .bytes = x->image_bytes,
			                                  .why = eb.msg});
		} else if (rc) {
			eng__out_retry(e);
		} else if (x->step == XS_RESERVE) {
			x->offset = rep.u.kv_reserved.offset;
			x->staged = msg_str_eq(rep.u.kv_reserved.tier, "disk");
			x->tier = x->staged ? "disk" : "ram";
			x->step = XS_COMMIT;
			x->k = 0;
			x->waiting = false;
			goto window; /* the first window this round */
		} else if (++x->k < x->windows) {
			goto window; /* the next window, this round: one in flight */
		} else {
			/* landed: the pages go back, the requester can be admitted */
			uint64_t dt = clk_mono_us() - x->t0_us;

			eng__release_state(e, s);
			s->sch.phase = SCHED_MOVED;
			e->st.moves_out++;
			e->st.move_out_bytes += x->image_bytes;
			e->st.move_out_windows += x->windows;
			eng__event(
			    e, &(struct eng_event){.kind = ENG_EV_MOVED,
			                           .id = s->sch.id,
			                           .for_id = s->for_id,
			                           .cls = (int)s->sch.cls,
			                           .pages = s->sch.pages,
			                           .dir_out = true,
			                           .tier = x->tier,
			                           .bytes = x->image_bytes,
			                           .windows = x->windows,
			                           .duration_us = dt,
			                           .rounds = e->st.rounds - x->r0,
			                           .others_tokens = e->st.decode_tokens - x->d0});
			x->step = XS_IDLE;
		}
		return; /* one exchange a round */
	}
	if (x->step == XS_COMMIT)
		goto window; /* the next window, this round */
	if (x->step != XS_IDLE)
		return;
	if (x->backoff) {
		x->backoff--;
		return;
	}
	if (e->n_drops) {
		struct msg q;

		kvc_req_drop(&q, e->drops[--e->n_drops]);
		x->step = XS_DROP;
		x->waiting = true;
		if (kvc_start(x->c, &q, &eb) != IG_E_OK)
			x->step = XS_IDLE, x->waiting = false;
		return;
	}
	while (e->n_vq) {
		uint32_t slot = e->vq[0];

		memmove(e->vq, e->vq + 1, (size_t)--e->n_vq * sizeof(*e->vq));
		s = &e->seqs[slot];
		if (!s->used || s->sch.phase != SCHED_MOVING_OUT)
			continue;
		if (eng__out_start(e, s, &eb) != IG_E_OK) {
			x->step = XS_IDLE;
			x->waiting = false;
			e->vq[e->n_vq++] = slot;
			x->backoff = 8;
		}
		return;
	}
	return;
window:
	if (!eng__xfer_seq(e, x, SCHED_MOVING_OUT)) { /* cancelled meanwhile */
		eng__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	if (eng__out_window(e, &eb) != IG_E_OK)
		eng__out_retry(e);
}

/* Start the copy of `count` windows from k on, found consecutive at `off`
 * in the arena, into the sequence. False (eb) when they are not inside the
 * mapped arena. */
static bool eng__in_post(struct eng *e, uint64_t off, uint32_t count, struct ig_errbuf *eb)
{
	struct eng_xfer *x = &e->xi;
	struct kvc_arena a = kvc_arena(x->c);
	uint64_t at = (uint64_t)x->k * x->window;
	uint64_t end = at + (uint64_t)count * x->window;
	uint64_t bytes = (end < x->image_bytes ? end : x->image_bytes) - at;

	if (!a.base || off + bytes > a.bytes) {
		ig_errf(eb, IG_E_NOTFOUND, "the KV-RAM arena is not mapped (or too small)");
		return false;
	}
	x->img = (struct be_img){.r = &x->r,
	                         .src = (const unsigned char *)a.base + off,
	                         .k0 = x->k,
	                         .count = count,
	                         .sums = x->sums,
	                         .window = x->window,
	                         .image_bytes = x->image_bytes};
	if (e->be->ops->img_scatter_async(e->be, &x->img, &x->ticket, eb) != IG_E_OK)
		return false;
	x->step = XS_SCATTER;
	return true;
}

/* Ask for window k of a sequence coming straight from KV-disk. */
static void eng__in_stage(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	kvc_req_stage(&q, x->key, x->k);
	x->step = XS_STAGE;
	x->waiting = true;
	if (kvc_start(x->c, &q, &eb) != IG_E_OK) {
		x->waiting = false;
		x->backoff = 2; /* asked again after the backoff */
	}
}

/* The move in ends without the sequence restored: when `s` is given, it is
 * prefilled again (`why`: its record was lost, or did not read back);
 * either way what the tier holds under its key is dropped. */
static void eng__in_end(struct eng *e, struct eng_seq *s, const char *why)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};

	if (s && eng__replay(e, s, why, &eb) != IG_E_OK)
		e->st.move_retries++;
	eng__queue_drop(e, x->key);
	x->step = XS_IDLE;
}

/* Every window is in: the sequence resumes where it stopped, and the spent
 * record is dropped (the reply is not waited for). */
static void eng__in_done(struct eng *e, struct eng_seq *s)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (!seqimg_reader_done(&x->r) || smp_state_load(&s->rng, x->sampler, &eb) != IG_E_OK) {
		eng__in_end(e, s, "the image did not read whole");
		return;
	}
	s->ms.pos = x->r.h.tokens;
	s->sch.phase = s->resume;
	s->in_tier = false;
	e->st.moves_in++;
	e->st.move_in_bytes += x->image_bytes;
	e->st.move_in_windows += x->windows;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_MOVED,
	                                  .id = s->sch.id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages,
	                                  .dir_out = false,
	                                  .tier = x->tier,
	                                  .bytes = x->image_bytes,
	                                  .windows = x->windows,
	                                  .duration_us = clk_mono_us() - x->t0_us,
	                                  .rounds = e->st.rounds - x->r0,
	                                  .others_tokens = e->st.decode_tokens - x->d0});
	eng__seq_event(e, ENG_EV_RESTORED, s);
	kvc_req_drop(&q, x->key);
	x->step = XS_DROP;
	x->waiting = true;
	if (kvc_start(x->c, &q, &eb) != IG_E_OK)
		x->step = XS_IDLE, x->waiting = false;
}

/* The windows in flight are in: the next ones, or the sequence resumes;
 * nothing while the copy runs. */
static void eng__in_copied(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct eng_seq *s;

	if (x->step != XS_SCATTER || !e->be->ops->xfer_done(e->be, x->ticket))
		return;
	{
		struct ig_errbuf eb;

		if (e->be->ops->xfer_wait(e->be, x->ticket, &eb) != IG_E_OK) {
			fprintf(stderr, "ignis-gpu-worker: %s\n", eb.msg); /* style rule 5 */
			abort();
		}
	}
	if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_IN))) { /* cancelled meanwhile */
		eng__in_end(e, NULL, NULL);
		return;
	}
	if (x->img.rc != IG_E_OK) {
		eng__in_end(e, s, x->img.why);
		return;
	}
	x->k += x->img.count;
	if (x->k >= x->windows)
		eng__in_done(e, s);
	else if (x->staged)
		eng__in_stage(e); /* the next window's kv_stage, this round */
	else
		x->step = XS_READ; /* the next windows next round */
}

/* The in direction: fetch, then the windows (from KV-RAM as many a round as
 * the in-window takes; from KV-disk one a round, each staged by the daemon),
 * then drop the record. */
static void eng__in_turn(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct eng_seq *s;
	struct msg rep, q;
	bool done = false;
	int rc;

	if (x->step == XS_SCATTER) { /* the windows in flight first */
		eng__in_copied(e);
		return;
	}
	if (x->waiting) {
		rc = kvc_poll(x->c, &rep, &done, &eb);
		if (!done)
			return;
		x->waiting = false;
		if (x->step == XS_DROP) {
			x->step = XS_IDLE;
			return;
		}
		if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_IN))) {
			eng__in_end(e, NULL, NULL);
			return;
		}
		if (x->step == XS_STAGE) {
			if (rc == IG_E_NOTFOUND || rc == IG_E_KV_LOST) {
				eng__in_end(e, s, eb.msg);
				return;
			}
			if (rc) { /* the daemon is away: the same window, shortly */
				e->st.move_retries++;
				x->backoff = 2;
				return;
			}
			{
				uint64_t at = (uint64_t)x->k * x->window;
				uint64_t len = x->image_bytes - at < x->window ? x->image_bytes - at
				                                               : x->window;

				x->sums[x->k] = rep.u.kv_staged.sum;
				if (rep.u.kv_staged.window != x->k || rep.u.kv_staged.len != len ||
				    !eng__in_post(e, rep.u.kv_staged.offset, 1, &eb))
					eng__in_end(e, s,
					            eb.msg[0] ? eb.msg
					                      : "the daemon staged another window");
			}
			return; /* its copy runs beside the round (eng__in_copied) */
		}
		if (rc == IG_E_NOTFOUND || rc == IG_E_KV_LOST || (!rc && !rep.u.kv_seq.complete)) {
			eng__in_end(e, s, rc ? eb.msg : "incomplete in the tier");
			return;
		}
		if (rc) { /* the daemon is away: ask again shortly */
			e->st.move_retries++;
			x->backoff = 2;
			x->step = XS_IDLE;
			memmove(e->iq + 1, e->iq, (size_t)e->n_iq * sizeof(*e->iq));
			e->iq[0] = x->slot;
			e->n_iq++;
			return;
		}
		x->offset = rep.u.kv_seq.offset;
		x->image_bytes = rep.u.kv_seq.image_bytes;
		x->staged = msg_str_eq(rep.u.kv_seq.tier, "disk");
		x->tier = x->staged ? "disk" : "ram";
		/* read in the record's own windows (a checksum each) */
		x->window = rep.u.kv_seq.window_bytes;
		x->windows = (uint32_t)rep.u.kv_seq.windows;
		if (!x->staged && (kvc_sums(x->c, x->key, (uint32_t)rep.u.kv_seq.record, x->sums,
		                            KVC_MAX_WINDOWS, &x->windows, &eb) ||
		                   x->windows != rep.u.kv_seq.windows)) {
			eng__in_end(e, s, eb.msg[0] ? eb.msg : "its windows do not add up");
			return;
		}
		for (uint32_t i = 0; i < s->ms.kv.n_pages; i++)
			x->pages[i] = kvpool_page(e->kv, s->ms.kv.table[i]);
		seqimg_reader_init(&x->r, e->d->m, e->cfg.fmt,
		                   &(struct seqimg_parts){x->pages, s->ms.state, x->sampler},
		                   s->ms.kv.n_pages, e->d->state_bytes, sizeof(x->sampler));
		x->k = 0;
		if (x->staged)
			eng__in_stage(e); /* the first window, this round */
		else
			x->step = XS_READ; /* the first window next round */
		return;
	}
	if (x->backoff) {
		x->backoff--;
		return;
	}
	if (x->step == XS_STAGE) { /* a kv_stage to ask (again) */
		if (!eng__xfer_seq(e, x, SCHED_MOVING_IN)) {
			eng__in_end(e, NULL, NULL);
			return;
		}
		eng__in_stage(e);
		return;
	}
	if (x->step == XS_READ) {
		if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_IN))) {
			eng__in_end(e, NULL, NULL);
			return;
		}
		/* the record's own windows (its checksums are per window), as
		 * many as --reuse-move-in-window-bytes takes this round, copied
		 * beside the round (eng__in_copied) */
		{
			uint32_t count = 1;

			while (x->k + count < x->windows &&
			       (uint64_t)(count + 1) * x->window <= e->cfg.window_in)
				count++;
			if (!eng__in_post(e, x->offset + (uint64_t)x->k * x->window, count, &eb))
				eng__in_end(e, s, eb.msg);
		}
		return;
	}
	if (x->step != XS_IDLE)
		return;
	while (e->n_iq) {
		uint32_t slot = e->iq[0];

		memmove(e->iq, e->iq + 1, (size_t)--e->n_iq * sizeof(*e->iq));
		s = &e->seqs[slot];
		if (!s->used || s->sch.phase != SCHED_MOVING_IN)
			continue;
		x->slot = slot;
		x->id = s->sch.id;
		x->key = eng__key(e, s->sch.id);
		x->t0_us = clk_mono_us();
		x->r0 = e->st.rounds;
		x->d0 = e->st.decode_tokens;
		kvc_req_fetch(&q, x->key);
		x->step = XS_FETCH;
		x->waiting = true;
		if (kvc_start(x->c, &q, &eb) != IG_E_OK) {
			x->step = XS_IDLE;
			x->waiting = false;
			e->iq[e->n_iq++] = slot;
			x->backoff = 2;
		}
		return;
	}
}

/* Reserve a sequence's whole reservation and a fresh state (an admission
 * or a restore: the plan counted the free pages, so they fit). */
static int eng__take_pages(struct eng *e, struct eng_seq *s, struct ig_errbuf *eb)
{
	int err = 0, rc;

	if (!kvpool_try_reserve(e->kv, &s->ms.kv, (uint32_t)s->sch.id, s->sch.pages, &err))
		return ig_errf(eb, err ? err : IG_E_INVAL,
		               "request %llu: %u pages did not fit where the plan saw %u free",
		               (unsigned long long)s->sch.id, s->sch.pages, e->kv->n_free);
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
		int rc = eng__take_pages(e, s, eb);

		if (rc)
			return rc;
		s->sch.phase = SCHED_MOVING_IN;
		e->iq[e->n_iq++] = slot;
	}
	return IG_E_OK;
}

/* A victim moves out for one waiting request. When that request no longer
 * waits before the move lands (admitted from room freed elsewhere, say
 * another request ended, or cancelled), the move has no reason left: the
 * victim, which still holds its pages, runs on where it stopped, and what
 * the tier got of it is dropped (the transfer sees the phase change at its
 * next step: eng__xfer_seq). A window being gathered reads the pages on the
 * copy engine: it ends first. */
static void eng__stop_needless_moves(struct eng *e)
{
	for (uint32_t i = 0; i < e->n_slots; i++) {
		struct eng_seq *s = &e->seqs[i];
		const struct eng_seq *r;

		if (!s->used || s->sch.phase != SCHED_MOVING_OUT)
			continue;
		r = eng__find(e, s->for_id);
		if (r && r->sch.phase == SCHED_WAITING)
			continue;
		eng__xfer_quiet(e, i); /* a window being gathered reads the pages */
		if (e->xo.step != XS_IDLE && e->xo.step != XS_DROP && e->xo.slot == i &&
		    e->xo.id == s->sch.id)
			s->in_tier = false; /* the transfer drops its key */
		s->sch.phase = s->resume;
		e->st.moves_stopped++;
		eng__event(e, &(struct eng_event){.kind = ENG_EV_MOVE_STOPPED,
		                                  .id = s->sch.id,
		                                  .for_id = s->for_id,
		                                  .cls = (int)s->sch.cls,
		                                  .pages = s->sch.pages,
		                                  .why = r && r->sch.phase != SCHED_DONE
		                                             ? "it was admitted from room freed "
		                                               "elsewhere"
		                                             : "it ended"});
	}
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
		s->resume = s->sch.phase == SCHED_PREFILL ? SCHED_PREFILL : SCHED_READY;
		s->sch.phase = SCHED_MOVING_OUT;
		s->for_id = for_id;
		e->vq[e->n_vq++] = slot;
		eng__seq_event(e, ENG_EV_EVICTED, s);
	}
}

static int eng__round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb);

int eng_round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb)
{
	int rc = eng__round(e, ran, eb);

	/* the window copies posted at the start of the round ran beside its
	 * compute: their commits go, or the moved sequence resumes, now */
	if (e->moves) {
		eng__out_copied(e);
		eng__in_copied(e);
	}
	return rc;
}

static int eng__round(struct eng *e, uint32_t *ran, struct ig_errbuf *eb)
{
	uint32_t n = 0, n_steps = 0, n_logits = 0, tokens;
	int rc;

	*ran = 0;
	if (e->moves) {
		eng__stop_needless_moves(e);
		eng__out_turn(e);
		eng__in_turn(e);
	}
	n = eng__snapshot(e);
	tokens = eng__plan(e, n);
	rc = eng__restores(e, eb);
	if (rc)
		return rc;
	/* admissions: the plan counted the free pages, so each fits */
	for (uint32_t k = 0; k < e->r.n_admit; k++) {
		struct eng_seq *s = &e->seqs[e->snap_slot[e->r.admit[k]]];

		rc = eng__take_pages(e, s, eb);
		if (rc)
			return rc;
		s->sch.phase = SCHED_PREFILL;
		e->st.admitted++;
		eng__seq_event(e, ENG_EV_ADMITTED, s);
	}
	for (uint32_t k = 0; k < e->r.n_grant; k++)
		e->seqs[e->snap_slot[e->r.grant[k]]].sch.phase = SCHED_DECODE;
	if (tokens == 0) {
		eng__victims(e);
		return IG_E_OK;
	}
	/* the batch: decode tokens first, then the prefill chunks */
	for (uint32_t k = 0; k < e->r.n_decode; k++) {
		uint32_t slot = e->snap_slot[e->r.decode[k]];
		struct eng_seq *s = &e->seqs[slot];

		e->step_slot[n_steps] = slot;
		e->steps[n_steps++] = (struct be_step){&s->ms, &s->out[s->n_out - 1], 1, true};
		n_logits++;
	}
	for (uint32_t k = 0; k < e->r.n_prefill; k++) {
		const struct sched_chunk *c = &e->r.prefill[k];
		uint32_t slot = e->snap_slot[c->seq];
		struct eng_seq *s = &e->seqs[slot];
		/* the end of a replay takes no logits: its token was generated */
		bool last = c->from + c->n == s->sch.prompt && !s->replay_skip;

		e->step_slot[n_steps] = slot;
		e->steps[n_steps++] = (struct be_step){&s->ms, s->feed + c->from, c->n, last};
		n_logits += last;
	}
	rc = e->be->ops->round(e->be, e->d, e->steps, n_steps, e->cfg.fmt, e->kv, e->cfg.context,
	                       e->logits, eb);
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
			if (s->replay_skip) {
				s->replay_skip = false;
				continue;
			}
		}
		eng__emit(e, s, e->logits + (size_t)n_logits++ * e->d->m->vocab);
	}
	eng__victims(e);
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

void eng_stats(const struct eng *e, struct eng_stats *st)
{
	*st = e->st;
	st->live = st->waiting = st->lanes_used = st->prefill = st->ready = 0;
	st->moving_out = st->moved = st->moving_in = 0;
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
		st->moving_out += s->sch.phase == SCHED_MOVING_OUT;
		st->moved += s->sch.phase == SCHED_MOVED;
		st->moving_in += s->sch.phase == SCHED_MOVING_IN;
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
	case ENG_STOP:
		return "stop";
	}
	return "error";
}
