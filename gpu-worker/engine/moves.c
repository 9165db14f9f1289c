/*
 * moves.c - the engine's two move state machines (engine.h, ADR 0017): a
 * victim's image out to the kvstore daemon's tiers a window at a time, and a
 * restored sequence's image back.
 *
 * This file owns the moves' state (struct engmv, opaque to the rest of the
 * engine): both machines, the victims waiting to move out, the restores
 * waiting to move in and the tier keys to drop. The engine hands it victims
 * (engmv__evict) and restores (engmv__restore), gives it a turn before each
 * round's plan and the collection of its copies after the round's compute,
 * and asks whether it is busy; the one thing of a move it reads is the
 * ticket kept on each sequence whose pages a window copy is using
 * (eng_seq.xfer, set and cleared here), waited for before those pages
 * change hands.
 *
 * Each direction (struct engmv_dir) has one sequence at a time, one request
 * in flight on its kvstore client and one window copy in flight on the
 * backend's transfer stream. A turn of a direction does one thing, chosen by
 * its state: collect the copy in flight, take the reply to the request in
 * flight (a handler per request sent), or start the next step (a handler per
 * state). Where a window lies in the arena is one function (engmv__window_at):
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
#include "model/seqimg.h"

/* Rounds a victim whose move the tier refused stays off the victim list. */
#define ENGMV_STAY_ROUNDS 256u

/* One direction of moves: one sequence at a time, one window in flight. */
enum engmv_step {
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

struct engmv_dir {
	struct kvc *c;
	uint64_t window;
	enum engmv_step step;
	bool waiting; /* a request is in flight on c */
	uint32_t slot;
	uint64_t id, key;
	uint64_t offset, image_bytes, t0_us;
	uint64_t r0, d0; /* the engine's rounds and decode tokens at the start */
	uint32_t k, windows;
	const char *tier;
	uint64_t stride; /* bytes between two windows in the arena: the window's
	                    size, or 0 when every window passes through one
	                    staging window (KV-disk) */
	struct seqimg_writer w;
	struct seqimg_reader r;
	void **pages; /* the pool's page count */
	uint8_t sampler[SMP_STATE_BYTES];
	uint64_t *sums;   /* KVC_MAX_WINDOWS */
	uint32_t backoff; /* rounds to wait before asking again (tier full) */
	/* the window copy in flight (XS_COPY, XS_SCATTER) on the backend's
	 * transfer stream, and its ticket (also on the sequence: eng_seq.xfer):
	 * its results are read once done */
	struct be_img img;
	uint64_t ticket;
};

/* Sequences waiting for a direction, by slot, first in line first: room
 * for every request slot (a sequence is in one at most once). */
struct engmv_queue {
	uint32_t *slot, n;
};

/* The moves' state: the window copies go on the backend's transfer stream,
 * beside the rounds. */
struct engmv {
	struct engmv_dir xo, xi;
	struct engmv_queue vq; /* victims to move out, in the plan's order */
	struct engmv_queue iq; /* restores to move in, in rank order */
	/* tier keys to drop when the out client is free, each once; room for
	 * one per request slot and as many more (a key past that stays in the
	 * tier until the next worker's sweep) */
	uint64_t *drops;
	uint32_t n_drops, cap_drops;
};

/* ---- queues, sequences and keys ---------------------------------------------- */

static void engmv__q_push(struct engmv_queue *q, uint32_t slot)
{
	q->slot[q->n++] = slot;
}

/* Back at the head of the line (a try that did not get through). */
static void engmv__q_push_first(struct engmv_queue *q, uint32_t slot)
{
	memmove(q->slot + 1, q->slot, (size_t)q->n * sizeof(*q->slot));
	q->slot[0] = slot;
	q->n++;
}

static uint32_t engmv__q_pop(struct engmv_queue *q)
{
	uint32_t slot = q->slot[0];

	memmove(q->slot, q->slot + 1, (size_t)--q->n * sizeof(*q->slot));
	return slot;
}

/* A sequence's key in the tiers: its id under the engine's nonce. */
static uint64_t engmv__key(const struct eng *e, uint64_t id)
{
	return ((uint64_t)e->cfg.tier_nonce << 32) | (id & 0xffffffffu);
}

static void engmv__queue_drop(struct eng *e, uint64_t key)
{
	struct engmv *m = e->mv;

	for (uint32_t i = 0; i < m->n_drops; i++)
		if (m->drops[i] == key)
			return;
	if (m->n_drops < m->cap_drops)
		m->drops[m->n_drops++] = key;
}

/* Is the sequence a transfer is working on still the one, in that phase? */
static struct eng_seq *engmv__seq(struct eng *e, const struct engmv_dir *x, enum sched_phase ph)
{
	struct eng_seq *s = &e->seqs[x->slot];

	return s->used && s->sch.id == x->id && s->sch.phase == ph ? s : NULL;
}

/* A window copy of the sequence in x->slot was posted: its ticket on the
 * sequence too, for the engine to wait for. */
static void engmv__posted(struct eng *e, const struct engmv_dir *x)
{
	e->seqs[x->slot].xfer = x->ticket;
}

/* The copy x posted is collected: the sequence in its slot (whichever it
 * is now) no longer waits for that ticket, unless it waits for a later one. */
static void engmv__collected(struct eng *e, const struct engmv_dir *x)
{
	struct eng_seq *s = &e->seqs[x->slot];

	if (s->xfer == x->ticket)
		s->xfer = 0;
}

/* ---- windows ---------------------------------------------------------------- */

/* Where window k of the image lies, as an offset in the mapped arena: the
 * daemon placed the image at `offset`, each window `stride` bytes after the
 * one before (the window's size when the image lies whole in KV-RAM; 0 when
 * every window passes through one staging window on its way to or from
 * KV-disk). */
static uint64_t engmv__window_at(const struct engmv_dir *x, uint32_t k)
{
	return x->offset + (uint64_t)k * x->stride;
}

/* The bytes of window k (the last one may be short). */
static uint64_t engmv__window_len(const struct engmv_dir *x, uint32_t k)
{
	uint64_t at = (uint64_t)k * x->window;

	return x->image_bytes - at < x->window ? x->image_bytes - at : x->window;
}

/* A pointer to `bytes` at `off` in the arena, or NULL (eb) when they are not
 * inside the mapped arena. */
static unsigned char *engmv__arena(const struct engmv_dir *x, uint64_t off, uint64_t bytes,
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
static void engmv__wait_copy(struct eng *e, uint64_t ticket)
{
	struct ig_errbuf eb = {0};

	if (e->be->ops->xfer_wait(e->be, ticket, &eb) != IG_E_OK) {
		fprintf(stderr, "ignis-gpu-worker: %s\n", eb.msg);
		abort();
	}
}

/* Send `q` on direction x's client; the reply is taken at a later turn. */
static int engmv__send(struct engmv_dir *x, enum engmv_step step, const struct msg *q,
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
static void engmv__out_retry(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xo;

	e->st.move_retries++;
	engmv__queue_drop(e, x->key);
	x->step = XS_IDLE;
	x->waiting = false;
	x->backoff = 2;
	engmv__q_push_first(&e->mv->vq, x->slot);
}

/* Start moving victim `s` out: its image header and parts, then kv_reserve. */
static int engmv__out_start(struct eng *e, struct eng_seq *s, struct ig_errbuf *eb)
{
	struct engmv_dir *x = &e->mv->xo;
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
	x->key = engmv__key(e, s->sch.id);
	kvc_req_reserve(&q, x->key, h.model_id, e->cfg.fmt,
	                s->sch.cls == SCHED_AGENT ? "agent" : "interactive", x->image_bytes,
	                x->window);
	x->t0_us = clk_mono_us();
	x->r0 = e->st.rounds;
	x->d0 = e->st.decode_tokens;
	s->in_tier = true;
	return engmv__send(x, XS_RESERVE, &q, eb);
}

/* Gather window k into the arena on the transfer stream; its commit goes
 * once the copy is done (engmv__out_copied). */
static void engmv__out_window(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xo;
	struct ig_errbuf eb = {0};
	uint64_t len = engmv__window_len(x, x->k);
	unsigned char *dst;

	if (!engmv__seq(e, x, SCHED_MOVING_OUT)) { /* cancelled or stopped meanwhile */
		engmv__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	dst = engmv__arena(x, engmv__window_at(x, x->k), len, &eb);
	/* the window's own bytes: the last one's are fewer, and what follows
	 * them in the arena is not this move's */
	x->img = (struct be_img){.w = &x->w, .dst = dst, .window = len};
	x->waiting = false;
	if (!dst || e->be->ops->img_gather_async(e->be, &x->img, &x->ticket, &eb) != IG_E_OK) {
		engmv__out_retry(e);
		return;
	}
	engmv__posted(e, x);
	x->step = XS_COPY;
}

/* The gather of window k is done: send its commit. Nothing while it runs. */
static void engmv__out_copied(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xo;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (!e->be->ops->xfer_done(e->be, x->ticket))
		return;
	engmv__wait_copy(e, x->ticket);
	engmv__collected(e, x);
	if (!engmv__seq(e, x, SCHED_MOVING_OUT)) { /* cancelled or stopped meanwhile */
		engmv__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	kvc_req_commit(&q, x->key, x->k, x->img.n, x->img.sum);
	if (engmv__send(x, XS_COMMIT, &q, &eb) != IG_E_OK)
		engmv__out_retry(e);
}

/* The reservation is made: the daemon says where the windows go. The first
 * window's copy starts this round. */
static void engmv__out_reserved(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct engmv_dir *x = &e->mv->xo;

	(void)s;
	x->offset = rep->u.kv_reserved.offset;
	x->stride = rep->u.kv_reserved.stride;
	x->tier = msg_str_eq(rep->u.kv_reserved.tier, "disk") ? "disk" : "ram";
	x->k = 0;
	engmv__out_window(e);
}

/* Window k is committed: the next one's copy starts this round (one in
 * flight), or the move has landed: the pages go back and the requester can
 * be admitted. */
static void engmv__out_committed(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct engmv_dir *x = &e->mv->xo;

	(void)rep;
	if (++x->k < x->windows) {
		engmv__out_window(e);
		return;
	}
	eng__release_state(e, s);
	engru__moved_out(s);
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
static void engmv__out_refused(struct eng *e, struct eng_seq *s, const char *why)
{
	struct engmv_dir *x = &e->mv->xo;

	e->st.move_retries++;
	if (x->step == XS_COMMIT) /* windows already on their way to disk */
		engmv__queue_drop(e, x->key);
	s->sch.phase = s->resume;
	s->in_tier = false;
	s->stay_until = e->st.rounds + ENGMV_STAY_ROUNDS;
	x->step = XS_IDLE;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_MOVE_REFUSED,
	                                  .id = s->sch.id,
	                                  .for_id = s->for_id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = s->sch.pages,
	                                  .bytes = x->image_bytes,
	                                  .why = why});
}

typedef void (*engmv_reply_fn)(struct eng *e, struct eng_seq *s, const struct msg *rep);

static const engmv_reply_fn engmv__out_replies[] = {
    [XS_RESERVE] = engmv__out_reserved,
    [XS_COMMIT] = engmv__out_committed,
};

/* The reply to what the out direction sent. */
static void engmv__out_reply(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xo;
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
	if (!(s = engmv__seq(e, x, SCHED_MOVING_OUT))) {
		/* cancelled or stopped meanwhile: forget what the tier got */
		engmv__queue_drop(e, x->key);
		x->step = XS_IDLE;
		return;
	}
	if (rc == IG_E_NOSPACE)
		engmv__out_refused(e, s, eb.msg);
	else if (rc)
		engmv__out_retry(e);
	else
		engmv__out_replies[x->step](e, s, &rep);
}

/* Nothing in flight: a drop to send, else the next victim. */
static void engmv__out_idle(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xo;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (x->backoff) {
		x->backoff--;
		return;
	}
	if (e->mv->n_drops) {
		kvc_req_drop(&q, e->mv->drops[--e->mv->n_drops]);
		if (engmv__send(x, XS_DROP, &q, &eb) != IG_E_OK)
			x->step = XS_IDLE;
		return;
	}
	while (e->mv->vq.n) {
		uint32_t slot = engmv__q_pop(&e->mv->vq);
		struct eng_seq *s = &e->seqs[slot];

		if (!s->used || s->sch.phase != SCHED_MOVING_OUT)
			continue;
		if (engmv__out_start(e, s, &eb) != IG_E_OK) {
			x->step = XS_IDLE;
			x->waiting = false;
			engmv__q_push(&e->mv->vq, slot);
			x->backoff = 8;
		}
		return;
	}
}

/* What the out direction does in a state with nothing in flight. */
static void (*const engmv__out_steps[])(struct eng *e) = {
    [XS_IDLE] = engmv__out_idle,
    [XS_COPY] = engmv__out_copied,
};

/* ---- in ------------------------------------------------------------------------- */

/* The move in ends without the sequence restored: when `s` is given, it is
 * prefilled again (`why`: its record was lost, or did not read back);
 * either way what the tier holds under its key is dropped. */
static void engmv__in_end(struct eng *e, struct eng_seq *s, const char *why)
{
	struct engmv_dir *x = &e->mv->xi;
	struct ig_errbuf eb = {0};

	if (s && eng__replay(e, s, why, &eb) != IG_E_OK)
		e->st.move_retries++;
	else if (s)
		s->in_tier = false; /* its key is dropped below */
	engmv__queue_drop(e, x->key);
	x->step = XS_IDLE;
}

/* Scatter `count` windows from k on, consecutive at `off` in the arena, into
 * the sequence on the transfer stream (engmv__in_copied collects them). */
static void engmv__in_scatter(struct eng *e, struct eng_seq *s, uint64_t off, uint32_t count)
{
	struct engmv_dir *x = &e->mv->xi;
	uint64_t bytes = (uint64_t)(count - 1) * x->window + engmv__window_len(x, x->k + count - 1);
	struct ig_errbuf eb = {0};
	const unsigned char *src = engmv__arena(x, off, bytes, &eb);

	x->img = (struct be_img){.r = &x->r,
	                         .src = src,
	                         .k0 = x->k,
	                         .count = count,
	                         .sums = x->sums,
	                         .window = x->window,
	                         .image_bytes = x->image_bytes};
	if (!src || e->be->ops->img_scatter_async(e->be, &x->img, &x->ticket, &eb) != IG_E_OK) {
		engmv__in_end(e, s, eb.msg);
		return;
	}
	engmv__posted(e, x);
	x->step = XS_SCATTER;
}

/* Ask the daemon to stage window k (the image comes through one staging
 * window, stride 0). */
static void engmv__in_stage(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	kvc_req_stage(&q, x->key, x->k);
	if (engmv__send(x, XS_STAGE, &q, &eb) != IG_E_OK)
		x->backoff = 2; /* asked again after the backoff */
}

/* Every window is in: the sequence resumes where it stopped, and the spent
 * record is dropped (the reply is not waited for). */
static void engmv__in_done(struct eng *e, struct eng_seq *s)
{
	struct engmv_dir *x = &e->mv->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (!seqimg_reader_done(&x->r) || smp_state_load(&s->rng, x->sampler, &eb) != IG_E_OK) {
		engmv__in_end(e, s, "the image did not read whole");
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
	if (engmv__send(x, XS_DROP, &q, &eb) != IG_E_OK)
		x->step = XS_IDLE;
}

/* The windows in flight are in: the next ones, or the sequence resumes.
 * Nothing while the copy runs. */
static void engmv__in_copied(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xi;
	struct eng_seq *s;

	if (!e->be->ops->xfer_done(e->be, x->ticket))
		return;
	engmv__wait_copy(e, x->ticket);
	engmv__collected(e, x);
	if (!(s = engmv__seq(e, x, SCHED_MOVING_IN))) { /* cancelled meanwhile */
		engmv__in_end(e, NULL, NULL);
		return;
	}
	if (x->img.rc != IG_E_OK) {
		engmv__in_end(e, s, x->img.why);
		return;
	}
	x->k += x->img.count;
	if (x->k >= x->windows)
		engmv__in_done(e, s);
	else if (!x->stride)
		engmv__in_stage(e); /* the next window's kv_stage, this round */
	else
		x->step = XS_READ; /* the next windows next round */
}

/* The daemon found the record: where its windows are, their checksums. The
 * first window is asked for (staged) this round, or read next round. */
static void engmv__in_fetched(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct engmv_dir *x = &e->mv->xi;
	const struct msg_kv_seq *r = &rep->u.kv_seq;

	if (!r->complete) {
		engmv__in_end(e, s, "incomplete in the tier");
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
		engmv__in_end(e, s, "its windows do not add up");
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
		engmv__in_stage(e); /* the first window, this round */
	else
		x->step = XS_READ; /* the first window next round */
}

/* The daemon staged window k: its copy runs beside the round. */
static void engmv__in_staged(struct eng *e, struct eng_seq *s, const struct msg *rep)
{
	struct engmv_dir *x = &e->mv->xi;
	const struct msg_kv_staged *r = &rep->u.kv_staged;

	if (r->window != x->k || r->len != engmv__window_len(x, x->k) || r->sum != x->sums[x->k]) {
		engmv__in_end(e, s, "the daemon staged another window");
		return;
	}
	engmv__in_scatter(e, s, r->offset, 1);
}

static const engmv_reply_fn engmv__in_replies[] = {
    [XS_FETCH] = engmv__in_fetched,
    [XS_STAGE] = engmv__in_staged,
};

/* The reply to what the in direction sent. */
static void engmv__in_reply(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xi;
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
	if (!(s = engmv__seq(e, x, SCHED_MOVING_IN))) {
		engmv__in_end(e, NULL, NULL);
		return;
	}
	if (rc == IG_E_NOTFOUND || rc == IG_E_KV_LOST) {
		engmv__in_end(e, s, eb.msg); /* held in no tier, or damaged: prefilled again */
		return;
	}
	if (rc) {
		/* the daemon is away: the same request, shortly */
		e->st.move_retries++;
		x->backoff = 2;
		if (x->step == XS_FETCH) { /* asked again from the start, first in line */
			x->step = XS_IDLE;
			engmv__q_push_first(&e->mv->iq, x->slot);
		}
		return;
	}
	engmv__in_replies[x->step](e, s, &rep);
}

/* The in direction waits a few rounds before asking again (the daemon was
 * away): true while it does. */
static bool engmv__in_backoff(struct engmv_dir *x)
{
	if (!x->backoff)
		return false;
	x->backoff--;
	return true;
}

/* The next batch of KV-RAM windows: as many as --reuse-move-in-window-bytes
 * takes this round (each window keeps its own checksum). */
static void engmv__in_read(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xi;
	struct eng_seq *s = engmv__seq(e, x, SCHED_MOVING_IN);
	uint32_t count = 1;

	if (engmv__in_backoff(x))
		return;
	if (!s) {
		engmv__in_end(e, NULL, NULL);
		return;
	}
	while (x->k + count < x->windows && (uint64_t)(count + 1) * x->window <= e->cfg.window_in)
		count++;
	engmv__in_scatter(e, s, engmv__window_at(x, x->k), count);
}

/* A kv_stage to ask again (the daemon was away). */
static void engmv__in_restage(struct eng *e)
{
	if (engmv__in_backoff(&e->mv->xi))
		return;
	if (!engmv__seq(e, &e->mv->xi, SCHED_MOVING_IN)) {
		engmv__in_end(e, NULL, NULL);
		return;
	}
	engmv__in_stage(e);
}

/* Nothing in flight: the next restore in rank order. */
static void engmv__in_idle(struct eng *e)
{
	struct engmv_dir *x = &e->mv->xi;
	struct ig_errbuf eb = {0};
	struct msg q;

	if (engmv__in_backoff(x))
		return;
	while (e->mv->iq.n) {
		uint32_t slot = engmv__q_pop(&e->mv->iq);
		struct eng_seq *s = &e->seqs[slot];

		if (!s->used || s->sch.phase != SCHED_MOVING_IN)
			continue;
		x->slot = slot;
		x->id = s->sch.id;
		x->key = engmv__key(e, s->sch.id);
		x->t0_us = clk_mono_us();
		x->r0 = e->st.rounds;
		x->d0 = e->st.decode_tokens;
		kvc_req_fetch(&q, x->key);
		if (engmv__send(x, XS_FETCH, &q, &eb) != IG_E_OK) {
			x->step = XS_IDLE;
			engmv__q_push(&e->mv->iq, slot);
			x->backoff = 2;
		}
		return;
	}
}

/* What the in direction does in a state with nothing in flight. */
static void (*const engmv__in_steps[])(struct eng *e) = {
    [XS_IDLE] = engmv__in_idle,
    [XS_READ] = engmv__in_read,
    [XS_STAGE] = engmv__in_restage,
    [XS_SCATTER] = engmv__in_copied,
};

/* ---- the engine's calls ---------------------------------------------------------- */

int engmv__init(struct eng *e, struct ig_errbuf *eb)
{
	const struct eng_cfg *cfg = &e->cfg;
	uint32_t n = e->n_slots, pages = e->kv->n_pages ? e->kv->n_pages : 1;
	struct ig_errbuf e2 = {0};
	struct engmv *m;
	struct msg q;

	if ((cfg->kv_out != NULL) != (cfg->kv_in != NULL) ||
	    (cfg->kv_out && (!cfg->window_out || !cfg->window_in)))
		return ig_errf(eb, IG_E_INVAL,
		               "engine: moves need both kvstore clients and both window sizes "
		               "(out %llu, in %llu bytes)",
		               (unsigned long long)cfg->window_out,
		               (unsigned long long)cfg->window_in);
	if (cfg->kv_out && (cfg->tier_nonce == 0 || cfg->tier_nonce > INT32_MAX))
		return ig_errf(
		    eb, IG_E_INVAL,
		    "engine: tier nonce %u; accepted: 1 to 2^31-1 (a key's owner, msg.h)",
		    cfg->tier_nonce);
	if (!cfg->kv_out)
		return IG_E_OK; /* moves off */
	e->mv = m = calloc(1, sizeof(*m));
	if (!m)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the engine's moves");
	m->xo = (struct engmv_dir){.c = cfg->kv_out, .window = cfg->window_out};
	m->xi = (struct engmv_dir){.c = cfg->kv_in, .window = cfg->window_in};
	m->vq.slot = calloc(n, sizeof(uint32_t));
	m->iq.slot = calloc(n, sizeof(uint32_t));
	m->cap_drops = 2 * n;
	m->drops = calloc(m->cap_drops, sizeof(uint64_t));
	m->xo.pages = calloc(pages, sizeof(void *));
	m->xi.pages = calloc(pages, sizeof(void *));
	m->xi.sums = calloc(KVC_MAX_WINDOWS, sizeof(uint64_t));
	if (!m->vq.slot || !m->iq.slot || !m->drops || !m->xo.pages || !m->xi.pages || !m->xi.sums)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the engine's moves");
	if (!e->be->ops->img_gather_async || !e->be->ops->img_scatter_async)
		return ig_errf(eb, IG_E_INVAL,
		               "the %s backend cannot move a sequence's windows (no image "
		               "copies on its transfer stream)",
		               e->be->ops->name);
	/* first on the out client: what an earlier worker left in the tiers
	 * goes (its requests ended with it); the reply is only collected, the
	 * moves do not wait for it */
	kvc_req_sweep(&q, cfg->tier_nonce);
	m->xo.step = XS_DROP;
	m->xo.waiting = kvc_start(m->xo.c, &q, &e2) == IG_E_OK;
	if (!m->xo.waiting)
		m->xo.step = XS_IDLE;
	return IG_E_OK;
}

void engmv__release(struct eng *e)
{
	struct engmv *m = e->mv;
	struct ig_errbuf eb;

	if (!m)
		return;
	/* a window copy in flight ends first: it uses the writer or reader
	 * and the page list freed here */
	e->be->ops->xfer_wait(e->be, m->xo.ticket, &eb);
	e->be->ops->xfer_wait(e->be, m->xi.ticket, &eb);
	free(m->vq.slot);
	free(m->iq.slot);
	free(m->drops);
	free(m->xo.pages);
	free(m->xi.pages);
	free(m->xi.sums);
	free(m);
	e->mv = NULL;
}

bool engmv__busy(const struct eng *e)
{
	const struct engmv *m = e->mv;

	return m &&
	       (m->xo.step != XS_IDLE || m->xi.step != XS_IDLE || m->vq.n || m->iq.n || m->n_drops);
}

void engmv__evict(struct eng *e, struct eng_seq *s, uint64_t for_id)
{
	struct engmv *m = e->mv;

	s->resume = s->sch.phase == SCHED_PREFILL ? SCHED_PREFILL : SCHED_READY;
	s->sch.phase = SCHED_MOVING_OUT;
	s->for_id = for_id;
	engmv__q_push(&m->vq, (uint32_t)(s - e->seqs));
	eng__seq_event(e, ENG_EV_EVICTED, s);
}

void engmv__restore(struct eng *e, struct eng_seq *s)
{
	struct engmv *m = e->mv;

	s->sch.phase = SCHED_MOVING_IN;
	engmv__q_push(&m->iq, (uint32_t)(s - e->seqs));
}

void engmv__ended(struct eng *e, struct eng_seq *s)
{
	if (!e->mv || !s->in_tier)
		return;
	engmv__queue_drop(e, engmv__key(e, s->sch.id));
	s->in_tier = false;
}

/* Stop the moves out whose need went before they landed: the victim, which
 * kept its pages, runs on (ADR 0017, issue 13). */
static void engmv__stop_needless(struct eng *e)
{
	struct engmv *m = e->mv;

	for (uint32_t i = 0; i < e->n_slots; i++) {
		struct eng_seq *s = &e->seqs[i];
		const struct eng_seq *r;

		if (!s->used || s->sch.phase != SCHED_MOVING_OUT)
			continue;
		r = eng__find(e, s->for_id);
		if (r && r->sch.phase == SCHED_WAITING)
			continue;
		eng__xfer_wait(e, s); /* a window being gathered reads the pages */
		if (m->xo.step != XS_IDLE && m->xo.step != XS_DROP && m->xo.slot == i &&
		    m->xo.id == s->sch.id) {
			s->in_tier = false; /* the transfer drops its key */
			/* ... and belongs to no sequence any more: were the victim
			 * evicted again before the transfer's pending answer came,
			 * the transfer would otherwise pass for the new move and
			 * land the image it captured at the first eviction, behind
			 * what the victim decoded since (ids start at 1) */
			m->xo.id = 0;
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

/* One direction's turn: the reply to the request in flight, else its
 * state's step (a state without one waits for something else). */
static void engmv__dir_turn(struct engmv_dir *x, struct eng *e, void (*reply)(struct eng *),
                            void (*const *steps)(struct eng *), size_t nsteps)
{
	if (x->waiting)
		reply(e);
	else if ((size_t)x->step < nsteps && steps[x->step])
		steps[x->step](e);
}

void engmv__turn(struct eng *e)
{
	if (!e->mv)
		return;
	engmv__stop_needless(e);
	engmv__dir_turn(&e->mv->xo, e, engmv__out_reply, engmv__out_steps,
	                sizeof(engmv__out_steps) / sizeof(engmv__out_steps[0]));
	engmv__dir_turn(&e->mv->xi, e, engmv__in_reply, engmv__in_steps,
	                sizeof(engmv__in_steps) / sizeof(engmv__in_steps[0]));
}

void engmv__collect(struct eng *e)
{
	if (!e->mv)
		return;
	if (e->mv->xo.step == XS_COPY)
		engmv__out_copied(e);
	if (e->mv->xi.step == XS_SCATTER)
		engmv__in_copied(e);
}
