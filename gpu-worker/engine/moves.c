/*
 * moves.c - the engine's two move state machines (engine.h, ADR 0017): a
 * victim's image out to the kvstore daemon's tiers a window at a time, and a
 * restored sequence's image back.
 *
 * Each direction (struct eng_xfer) has one sequence at a time, one request
 * in flight on its kvstore client and one window copy in flight on the
 * backend's transfer stream. A turn of a direction does one thing, chosen by
 * its state: collect the copy in flight, take the reply to the request in
 * flight (a handler per request sent), or start the next step (a handler per
 * state). Where a window lies in the arena is one function (mv_window_at):
 * the daemon's placement (an offset and the stride between windows) decides.
 *
 *   out:  IDLE -> RESERVE -> (COPY -> COMMIT) x windows -> IDLE (landed)
 *   in:   IDLE -> FETCH -> (READ -> SCATTER) x batches -> DROP -> IDLE
 *         from KV-disk: FETCH -> (STAGE -> SCATTER) x windows -> DROP
 *   both: a kv_drop of a spent or stale key goes from IDLE (out client)
 */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvclient.h"

/* ---- windows ---------------------------------------------------------------- */

/* Where window k of the image lies, as an offset in the mapped arena: the
 * daemon placed the image at `offset`, each window `stride` bytes after the
 * one before (the window's size when the image lies whole in KV-RAM; 0 when
 * every window passes through one staging window on its way to or from
 * KV-disk). */
static uint64_t mv_window_at(const struct eng_xfer *x, uint32_t k)
{
	return x->offset + (uint64_t)k * x->stride;
}

/* The bytes of window k (the last one may be short). */
static uint64_t mv_window_len(const struct eng_xfer *x, uint32_t k)
{
	uint64_t at = (uint64_t)k * x->window;

	return x->image_bytes - at < x->window ? x->image_bytes - at : x->window;
}

/* A pointer to `bytes` at `off` in the arena, or NULL (eb) when they are not
 * inside the mapped arena. */
static unsigned char *mv_arena(const struct eng_xfer *x, uint64_t off, uint64_t bytes,
                               struct ig_errbuf *eb)
{
	struct kvc_arena a = kvc_arena(x->c);

	if (!a.base || off > a.bytes || bytes > a.bytes - off) {
		ig_errf(eb, IG_E_NOTFOUND, "the KV-RAM arena is not mapped (or too small)");
		return NULL;
	}
	return (unsigned char *)a.base + off;
}

/* The device failed a copy: the worker cannot go on (style rule 5). */
static void mv_wait_copy(struct eng *e, uint64_t ticket)
{
	struct ig_errbuf eb = {0};

	if (e->be->ops->xfer_wait(e->be, ticket, &eb) != IG_E_OK) {
		fprintf(stderr, "ignis-gpu-worker: %s\n", eb.msg);
		abort();
	}
}

/* Send `q` on direction x's client; the reply is taken at a later turn. */
static int mv_send(struct eng_xfer *x, enum eng_xstep step, const struct msg *q,
                   struct ig_errbuf *eb)
{
	int rc = kvc_start(x->c, q, eb);

	x->step = step;
	x->waiting = rc == IG_E_OK;
	return rc;
}

/* ---- out ------------------------------------------------------------------------ */

/* A move out gives up this try (timed out, the daemon lost the reservation
 * in a restart, a window could not be placed): what the tier got of it is
 * dropped, and the victim, which kept its pages, starts again a few rounds
 * later, first in line (it is still the victim). */
static void mv_out_retry(struct eng *e)
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

/* Start moving victim `s` out: its image header and parts, then kv_reserve. */
static int mv_out_start(struct eng *e, struct eng_seq *s, struct ig_errbuf *eb)
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
	x->t0_us = clk_mono_us();
	x->r0 = e->st.rounds;
	x->d0 = e->st.decode_tokens;
	s->in_tier = true;
	return mv_send(x, XS_RESERVE, &q, eb);
}

/* Gather window k into the arena on the transfer stream; its commit goes
 * once the copy is done (mv_out_copied). */
static void mv_out_window(struct eng *e)
{
	struct eng_xfer *x = &e->xo;
	struct ig_errbuf eb = {0};
	unsigned char *dst;

	if (!eng__xfer_seq(e, x, SCHED_MOVING_OUT)) { /* cancelled or stopped meanwhile */
		eng__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	dst = mv_arena(x, mv_window_at(x, x->k), mv_window_len(x, x->k), &eb);
	x->img = (struct be_img){.w = &x->w, .dst = dst, .window = x->window};
	x->waiting = false;
	if (!dst || e->be->ops->img_gather_async(e->be, &x->img, &x->ticket, &eb) != IG_E_OK) {
		mv_out_retry(e);
		return;
	}
	x->step = XS_COPY;
}

/* The gather of window k is done: send its commit. Nothing while it runs. */
static void mv_out_copied(struct eng *e)
{
	struct eng_xfer *x = &e->xo;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (!e->be->ops->xfer_done(e->be, x->ticket))
		return;
	mv_wait_copy(e, x->ticket);
	if (!eng__xfer_seq(e, x, SCHED_MOVING_OUT)) { /* cancelled or stopped meanwhile */
		eng__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	kvc_req_commit(&q, x->key, x->k, x->img.n, x->img.sum);
	if (mv_send(x, XS_COMMIT, &q, &eb) != IG_E_OK)
		mv_out_retry(e);
}

/* The reservation is made: the daemon says where the windows go. The first
 * window's copy starts this round. */
static void mv_out_reserved(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct eng_xfer *x = &e->xo;

	(void)s;
	x->offset = rep->u.kv_reserved.offset;
	x->stride = rep->u.kv_reserved.stride;
	x->tier = msg_str_eq(rep->u.kv_reserved.tier, "disk") ? "disk" : "ram";
	x->k = 0;
	mv_out_window(e);
}

/* Window k is committed: the next one's copy starts this round (one in
 * flight), or the move has landed: the pages go back and the requester can
 * be admitted. */
static void mv_out_committed(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct eng_xfer *x = &e->xo;

	(void)rep;
	if (++x->k < x->windows) {
		mv_out_window(e);
		return;
	}
	eng__release_state(e, s);
	engru_moved_out(s);
	s->sch.phase = SCHED_MOVED;
	e->st.moves_out++;
	e->st.move_out_bytes += x->image_bytes;
	e->st.move_out_windows += x->windows;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_MOVED,
	                                  .id = s->sch.id,
	                                  .for_id = s->for_id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages,
	                                  .dir_out = true,
	                                  .tier = x->tier,
	                                  .bytes = x->image_bytes,
	                                  .windows = x->windows,
	                                  .duration_us = clk_mono_us() - x->t0_us,
	                                  .rounds = e->st.rounds - x->r0,
	                                  .others_tokens = e->st.decode_tokens - x->d0});
	x->step = XS_IDLE;
}

/* The tier has no room for the victim now (KV-RAM full and nothing it may
 * give up with KV-disk off; KV-disk's ceiling, or its volume full midway
 * through a write straight to disk): it stays and runs on, not a victim
 * again for a while, so the need looks elsewhere or waits. */
static void mv_out_refused(struct eng *e, struct eng_seq *s, const char *why)
{
	struct eng_xfer *x = &e->xo;

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
	                                  .why = why});
}

typedef void (*mv_reply_fn)(struct eng *e, struct eng_seq *s, const struct msg *rep);

static const mv_reply_fn mv_out_replies[] = {
    [XS_RESERVE] = mv_out_reserved,
    [XS_COMMIT] = mv_out_committed,
};

/* The reply to what the out direction sent. */
static void mv_out_reply(struct eng *e)
{
	struct eng_xfer *x = &e->xo;
	struct ig_errbuf eb = {0};
	struct eng_seq *s;
	struct msg rep;
	bool done = false;
	int rc = kvc_poll(x->c, &rep, &done, &eb);

	if (!done)
		return;
	x->waiting = false;
	if (x->step == XS_DROP) {
		x->step = XS_IDLE;
		return;
	}
	if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_OUT))) {
		/* cancelled or stopped meanwhile: forget what the tier got */
		eng__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	if (rc == IG_E_NOSPACE)
		mv_out_refused(e, s, eb.msg);
	else if (rc)
		mv_out_retry(e);
	else
		mv_out_replies[x->step](e, s, &rep);
}

/* Nothing in flight: a drop to send, else the next victim. */
static void mv_out_idle(struct eng *e)
{
	struct eng_xfer *x = &e->xo;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (x->backoff) {
		x->backoff--;
		return;
	}
	if (e->n_drops) {
		kvc_req_drop(&q, e->drops[--e->n_drops]);
		if (mv_send(x, XS_DROP, &q, &eb) != IG_E_OK)
			x->step = XS_IDLE;
		return;
	}
	while (e->n_vq) {
		uint32_t slot = e->vq[0];
		struct eng_seq *s = &e->seqs[slot];

		memmove(e->vq, e->vq + 1, (size_t)--e->n_vq * sizeof(*e->vq));
		if (!s->used || s->sch.phase != SCHED_MOVING_OUT)
			continue;
		if (mv_out_start(e, s, &eb) != IG_E_OK) {
			x->step = XS_IDLE;
			x->waiting = false;
			e->vq[e->n_vq++] = slot;
			x->backoff = 8;
		}
		return;
	}
}

/* What the out direction does in a state with nothing in flight. */
static void (*const mv_out_steps[])(struct eng *e) = {
    [XS_IDLE] = mv_out_idle,
    [XS_COPY] = mv_out_copied,
};

/* ---- in ------------------------------------------------------------------------- */

/* The move in ends without the sequence restored: when `s` is given, it is
 * prefilled again (`why`: its record was lost, or did not read back);
 * either way what the tier holds under its key is dropped. */
static void mv_in_end(struct eng *e, struct eng_seq *s, const char *why)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};

	if (s && eng__replay(e, s, why, &eb) != IG_E_OK)
		e->st.move_retries++;
	eng__queue_drop(e, x->key);
	x->step = XS_IDLE;
}

/* Scatter `count` windows from k on, consecutive at `off` in the arena, into
 * the sequence on the transfer stream (mv_in_copied collects them). */
static void mv_in_scatter(struct eng *e, struct eng_seq *s, uint64_t off, uint32_t count)
{
	struct eng_xfer *x = &e->xi;
	uint64_t bytes = (uint64_t)(count - 1) * x->window + mv_window_len(x, x->k + count - 1);
	struct ig_errbuf eb = {0};
	const unsigned char *src = mv_arena(x, off, bytes, &eb);

	x->img = (struct be_img){.r = &x->r,
	                         .src = src,
	                         .k0 = x->k,
	                         .count = count,
	                         .sums = x->sums,
	                         .window = x->window,
	                         .image_bytes = x->image_bytes};
	if (!src || e->be->ops->img_scatter_async(e->be, &x->img, &x->ticket, &eb) != IG_E_OK) {
		mv_in_end(e, s, eb.msg);
		return;
	}
	x->step = XS_SCATTER;
}

/* Ask the daemon to stage window k (the image comes through one staging
 * window, stride 0). */
static void mv_in_stage(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	kvc_req_stage(&q, x->key, x->k);
	if (mv_send(x, XS_STAGE, &q, &eb) != IG_E_OK)
		x->backoff = 2; /* asked again after the backoff */
}

/* Every window is in: the sequence resumes where it stopped, and the spent
 * record is dropped (the reply is not waited for). */
static void mv_in_done(struct eng *e, struct eng_seq *s)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (!seqimg_reader_done(&x->r) || smp_state_load(&s->rng, x->sampler, &eb) != IG_E_OK) {
		mv_in_end(e, s, "the image did not read whole");
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
	if (mv_send(x, XS_DROP, &q, &eb) != IG_E_OK)
		x->step = XS_IDLE;
}

/* The windows in flight are in: the next ones, or the sequence resumes.
 * Nothing while the copy runs. */
static void mv_in_copied(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct eng_seq *s;

	if (!e->be->ops->xfer_done(e->be, x->ticket))
		return;
	mv_wait_copy(e, x->ticket);
	if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_IN))) { /* cancelled meanwhile */
		mv_in_end(e, NULL, NULL);
		return;
	}
	if (x->img.rc != IG_E_OK) {
		mv_in_end(e, s, x->img.why);
		return;
	}
	x->k += x->img.count;
	if (x->k >= x->windows)
		mv_in_done(e, s);
	else if (!x->stride)
		mv_in_stage(e); /* the next window's kv_stage, this round */
	else
		x->step = XS_READ; /* the next windows next round */
}

/* The daemon found the record: where its windows are, their checksums. The
 * first window is asked for (staged) this round, or read next round. */
static void mv_in_fetched(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct eng_xfer *x = &e->xi;
	const struct msg_kv_seq *r = &rep->u.kv_seq;

	if (!r->complete) {
		mv_in_end(e, s, "incomplete in the tier");
		return;
	}
	x->offset = r->offset;
	x->image_bytes = r->image_bytes;
	x->tier = msg_str_eq(r->tier, "disk") ? "disk" : "ram";
	/* read in the record's own windows (a checksum each) */
	x->window = r->window_bytes;
	x->windows = (uint32_t)r->windows;
	x->stride = r->stride;
	if (r->sums.n != r->windows || (x->stride && x->stride != x->window)) {
		mv_in_end(e, s, "its windows do not add up");
		return;
	}
	memcpy(x->sums, r->sums.v, (size_t)r->sums.n * sizeof(uint64_t));
	for (uint32_t i = 0; i < s->ms.kv.n_pages; i++)
		x->pages[i] = kvpool_page(e->kv, s->ms.kv.table[i]);
	seqimg_reader_init(&x->r, e->d->m, e->cfg.fmt,
	                   &(struct seqimg_parts){x->pages, s->ms.state, x->sampler},
	                   s->ms.kv.n_pages, e->d->state_bytes, sizeof(x->sampler));
	x->k = 0;
	if (!x->stride)
		mv_in_stage(e); /* the first window, this round */
	else
		x->step = XS_READ; /* the first window next round */
}

/* The daemon staged window k: its copy runs beside the round. */
static void mv_in_staged(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct eng_xfer *x = &e->xi;
	const struct msg_kv_staged *r = &rep->u.kv_staged;

	if (r->window != x->k || r->len != mv_window_len(x, x->k) || r->sum != x->sums[x->k]) {
		mv_in_end(e, s, "the daemon staged another window");
		return;
	}
	mv_in_scatter(e, s, r->offset, 1);
}

static const mv_reply_fn mv_in_replies[] = {
    [XS_FETCH] = mv_in_fetched,
    [XS_STAGE] = mv_in_staged,
};

/* The reply to what the in direction sent. */
static void mv_in_reply(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct eng_seq *s;
	struct msg rep;
	bool done = false;
	int rc = kvc_poll(x->c, &rep, &done, &eb);

	if (!done)
		return;
	x->waiting = false;
	if (x->step == XS_DROP) {
		x->step = XS_IDLE;
		return;
	}
	if (!(s = eng__xfer_seq(e, x, SCHED_MOVING_IN))) {
		mv_in_end(e, NULL, NULL);
		return;
	}
	if (rc == IG_E_NOTFOUND || rc == IG_E_KV_LOST) {
		mv_in_end(e, s, eb.msg); /* held in no tier, or damaged: prefilled again */
		return;
	}
	if (rc) {
		/* the daemon is away: the same request, shortly */
		e->st.move_retries++;
		x->backoff = 2;
		if (x->step == XS_FETCH) { /* asked again from the start, first in line */
			x->step = XS_IDLE;
			memmove(e->iq + 1, e->iq, (size_t)e->n_iq * sizeof(*e->iq));
			e->iq[0] = x->slot;
			e->n_iq++;
		}
		return;
	}
	mv_in_replies[x->step](e, s, &rep);
}

/* The in direction waits a few rounds before asking again (the daemon was
 * away): true while it does. */
static bool mv_in_backoff(struct eng_xfer *x)
{
	if (!x->backoff)
		return false;
	x->backoff--;
	return true;
}

/* The next batch of KV-RAM windows: as many as --reuse-move-in-window-bytes
 * takes this round (each window keeps its own checksum). */
static void mv_in_read(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct eng_seq *s = eng__xfer_seq(e, x, SCHED_MOVING_IN);
	uint32_t count = 1;

	if (mv_in_backoff(x))
		return;
	if (!s) {
		mv_in_end(e, NULL, NULL);
		return;
	}
	while (x->k + count < x->windows && (uint64_t)(count + 1) * x->window <= e->cfg.window_in)
		count++;
	mv_in_scatter(e, s, mv_window_at(x, x->k), count);
}

/* A kv_stage to ask again (the daemon was away). */
static void mv_in_restage(struct eng *e)
{
	if (mv_in_backoff(&e->xi))
		return;
	if (!eng__xfer_seq(e, &e->xi, SCHED_MOVING_IN)) {
		mv_in_end(e, NULL, NULL);
		return;
	}
	mv_in_stage(e);
}

/* Nothing in flight: the next restore in rank order. */
static void mv_in_idle(struct eng *e)
{
	struct eng_xfer *x = &e->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (mv_in_backoff(x))
		return;
	while (e->n_iq) {
		uint32_t slot = e->iq[0];
		struct eng_seq *s = &e->seqs[slot];

		memmove(e->iq, e->iq + 1, (size_t)--e->n_iq * sizeof(*e->iq));
		if (!s->used || s->sch.phase != SCHED_MOVING_IN)
			continue;
		x->slot = slot;
		x->id = s->sch.id;
		x->key = eng__key(e, s->sch.id);
		x->t0_us = clk_mono_us();
		x->r0 = e->st.rounds;
		x->d0 = e->st.decode_tokens;
		kvc_req_fetch(&q, x->key);
		if (mv_send(x, XS_FETCH, &q, &eb) != IG_E_OK) {
			x->step = XS_IDLE;
			e->iq[e->n_iq++] = slot;
			x->backoff = 2;
		}
		return;
	}
}

/* What the in direction does in a state with nothing in flight. */
static void (*const mv_in_steps[])(struct eng *e) = {
    [XS_IDLE] = mv_in_idle,
    [XS_READ] = mv_in_read,
    [XS_STAGE] = mv_in_restage,
    [XS_SCATTER] = mv_in_copied,
};

/* ---- the engine's calls ---------------------------------------------------------- */

/* One direction's turn: the reply to the request in flight, else its
 * state's step (a state without one waits for something else). */
static void mv_turn(struct eng_xfer *x, struct eng *e, void (*reply)(struct eng *),
                    void (*const *steps)(struct eng *), size_t nsteps)
{
	if (x->waiting)
		reply(e);
	else if ((size_t)x->step < nsteps && steps[x->step])
		steps[x->step](e);
}

void engmv_turn(struct eng *e)
{
	mv_turn(&e->xo, e, mv_out_reply, mv_out_steps,
	        sizeof(mv_out_steps) / sizeof(mv_out_steps[0]));
	mv_turn(&e->xi, e, mv_in_reply, mv_in_steps, sizeof(mv_in_steps) / sizeof(mv_in_steps[0]));
}

void engmv_collect(struct eng *e)
{
	if (e->xo.step == XS_COPY)
		mv_out_copied(e);
	if (e->xi.step == XS_SCATTER)
		mv_in_copied(e);
}

void engmv_stop_needless(struct eng *e)
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
		    e->xo.id == s->sch.id) {
			s->in_tier = false; /* the transfer drops its key */
			/* ... and belongs to no sequence any more: were the victim
			 * evicted again before the transfer's pending answer came,
			 * the transfer would otherwise pass for the new move and
			 * land the image it captured at the first eviction, behind
			 * what the victim decoded since (ids start at 1) */
			e->xo.id = 0;
		}
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
