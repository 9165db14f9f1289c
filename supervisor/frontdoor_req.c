/*
 * frontdoor_req.c - the front door's requests: the id table, their states and what
 * clients see of them, how they end, the fairness of the queue between
 * peers, the door's checks of a submit, and the clock (waits that ran out,
 * requests nobody reads). Everything here runs under d->mu.
 */
#define _GNU_SOURCE
#include "frontdoor_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

/* ---- small helpers -------------------------------------------------------- */

static void door__deadline(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void door__wait(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms)
{
	struct timespec ts;

	door__deadline(&ts, ms);
	pthread_cond_timedwait(cv, mu, &ts);
}

/* A request by door id: any (`internal`, the pump's view), or one a client
 * may see (admitted and not forgotten). */
struct door_req *door__find(struct door *d, uint64_t id, bool internal)
{
	for (struct door_req *r = d->ids[id & (DOOR_ID_BUCKETS - 1)]; r; r = r->hnext) {
		if (r->id != id)
			continue;
		if (internal)
			return r;
		return !r->forgotten && !r->refused && (r->st == RQ_RUNNING || r->st == RQ_DONE)
		           ? r
		           : NULL;
	}
	return NULL;
}

static void door__unlink(struct door *d, struct door_req *r)
{
	struct door_req **pp = &d->ids[r->id & (DOOR_ID_BUCKETS - 1)];

	while (*pp && *pp != r)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = r->hnext;
	if (r->prev)
		r->prev->next = r->next;
	else
		d->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		d->tail = r->prev;
}

static void door__count(struct door *d, struct door_req *r, int delta)
{
	switch (r->st) {
	case RQ_QUEUED:
	case RQ_SUBMITTING:
		d->queued += (uint32_t)delta;
		break;
	case RQ_RUNNING:
		d->running += (uint32_t)delta;
		break;
	case RQ_DONE:
		if (!r->forgotten)
			d->kept += (uint32_t)delta;
		break;
	}
}

void door__set_st(struct door *d, struct door_req *r, enum door_rq st)
{
	door__count(d, r, -1);
	r->st = st;
	door__count(d, r, +1);
}

void door__free_req(struct door *d, struct door_req *r)
{
	door__count(d, r, -1);
	door__unlink(d, r);
	if (r->sub)
		nng_msg_free(r->sub);
	door__run_release(&r->out);
	door__run_release(&r->prm);
	free(r->message);
	free(r);
}

/* ---- request views ----------------------------------------------------------- */

const char *door__state(const struct door_req *r)
{
	switch (r->st) {
	case RQ_QUEUED:
	case RQ_SUBMITTING:
		return "queued";
	case RQ_RUNNING:
		return r->phase[0] ? r->phase : "waiting";
	case RQ_DONE:
		break;
	}
	return "done";
}

uint32_t door__text_to(const struct door_run *u, uint32_t k, bool end)
{
	return end ? u->tlen : k ? u->tend[k - 1] : 0;
}

int door__run_lp(const struct door_run *u, uint32_t i, struct door_lp_tok *out)
{
	uint32_t a, b;

	if (i >= u->n || !u->lp_at)
		return -1;
	a = u->lp_at[i];
	b = i + 1 < u->n ? u->lp_at[i + 1] : u->nlpe;
	out->n = 0;
	out->text_off = door__text_to(u, i, false);
	out->text_end = door__text_to(u, i + 1, false);
	for (uint32_t j = a; j < b && out->n < DOOR_LP_MAX; j++) {
		const struct door_lpe *e = &u->lpe[j];
		uint32_t len = e->len < DOOR_PIECE_MAX ? e->len : DOOR_PIECE_MAX;

		out->e[out->n].id = e->id;
		out->e[out->n].lp = e->lp;
		out->e[out->n].len = len;
		memcpy(out->e[out->n].bytes, u->lpb + e->off, len);
		out->n++;
	}
	return 0;
}

void door__run_release(struct door_run *u)
{
	free(u->toks);
	free(u->tend);
	free(u->text);
	free(u->lpe);
	free(u->lp_at);
	free(u->lpb);
	memset(u, 0, sizeof(*u));
}

/* Something about `r` changed: its in-process reader is told. */
void door__news(struct door_req *r)
{
	void (*wake)(void *) = r->wake;

	r->ver++;
	if (wake) {
		r->wake = NULL;
		wake(r->wake_arg);
	}
}

/* Answer the parked polls of `r` that have something new (or all of them),
 * and tell its in-process reader. */
void door__wake(struct door *d, struct door_req *r, bool all)
{
	struct door_slot **pp = &r->waiters;

	door__news(r);
	while (*pp) {
		struct door_slot *s = *pp;

		if (all || r->st == RQ_DONE || r->out.n > s->from) {
			*pp = s->nxt;
			s->nxt = NULL;
			d->parked--;
			door__reply_tokens(d, s, r);
		} else {
			pp = &s->nxt;
		}
	}
}

/* End a request here (its output so far stays readable). */
void door__finish(struct door *d, struct door_req *r, const char *finish, int code,
                  const char *message)
{
	if (r->st != RQ_RUNNING)
		return;
	door__set_st(d, r, RQ_DONE);
	snprintf(r->finish, sizeof(r->finish), "%s", finish);
	r->code = code;
	if (message)
		r->message = strdup(message);
	if (code)
		d->n_failed++;
	else
		d->n_finished++;
	r->touched_ms = clk_mono_ms();
	door__wake(d, r, true);
}

/* Forget a request for clients; freed once the worker forgot it too. */
void door__forget(struct door *d, struct door_req *r)
{
	if (r->forgotten)
		return;
	door__count(d, r, -1);
	r->forgotten = true;
	door__count(d, r, +1);
	door__wake(d, r, true);
	if (!r->wcancels)
		door__free_req(d, r);
}

/* Every running request of worker `pid` ends with a clear error. */
void door__lose_worker(struct door *d, pid_t pid, const char *why)
{
	uint32_t lost = 0;

	for (struct door_req *r = d->head; r; r = r->next) {
		char text[256];

		if (r->st != RQ_RUNNING || r->wpid != pid)
			continue;
		snprintf(text, sizeof(text),
		         "the gpu-worker (pid %ld) %s while request %" PRIu64
		         " ran; it is lost after %u tokens: submit it again",
		         (long)pid, why, r->id, r->out.n);
		r->wcancels = 0; /* the worker that knew it is gone */
		door__finish(d, r, "error", IG_E_CHILD, text);
		lost++;
	}
	if (lost) {
		struct ev e;

		ev_begin(&e, EV_WARN, "ignis.frontdoor.requests_lost");
		ev_u64(&e, "worker_pid", (uint64_t)pid);
		ev_u64(&e, "requests", lost);
		ev_str(&e, "reason", why);
		ev_end(&e);
	}
}

/* ---- fairness between peers ------------------------------------------------- */

/* An empty peer table for up to `n` peers (false: no memory). */
bool door__peers_reset(struct door *d, uint32_t n)
{
	uint32_t cap = 64;

	while (cap < 2 * n)
		cap *= 2;
	if (cap > d->npeers_cap) {
		struct door_peer *p = realloc(d->peers, (size_t)cap * sizeof(*p));

		if (!p)
			return false;
		d->peers = p;
		d->npeers_cap = cap;
	}
	memset(d->peers, 0, (size_t)d->npeers_cap * sizeof(*d->peers));
	return true;
}

/* Peer `key`'s row (open addressing: the table is at least twice the peers
 * put in it). */
struct door_peer *door__peer(struct door *d, uint64_t key)
{
	uint32_t mask = d->npeers_cap - 1,
	         i = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & mask;

	while (d->peers[i].used && d->peers[i].key != key)
		i = (i + 1) & mask;
	d->peers[i].used = true;
	d->peers[i].key = key;
	return &d->peers[i];
}

/* The requests in the door, for the size of a peer table. */
uint32_t door__nreqs(const struct door *d)
{
	return d->queued + d->running + d->kept + 1;
}

/* The queue is full and `peer` submits: the newest waiting submit of the
 * peer holding the most waiting ones, when that peer holds at least two
 * more than `peer` (fewer would only swap their places); NULL otherwise
 * (or without memory). The longest queue gives way, so that one client
 * cannot hold the whole queue against the others. */
static struct door_req *door__displace(struct door *d, uint64_t peer)
{
	struct door_peer *mine, *most = NULL;

	if (!door__peers_reset(d, door__nreqs(d)))
		return NULL;
	mine = door__peer(d, peer);
	for (struct door_req *r = d->head; r; r = r->next)
		if (r->st == RQ_QUEUED)
			door__peer(d, r->peer)->queued++;
	for (uint32_t i = 0; i < d->npeers_cap; i++)
		if (d->peers[i].used && (!most || d->peers[i].queued > most->queued))
			most = &d->peers[i];
	if (!most || most->queued < mine->queued + 2)
		return NULL;
	for (struct door_req *r = d->tail; r; r = r->prev)
		if (r->st == RQ_QUEUED && r->peer == most->key)
			return r;
	return NULL;
}

/* Refuse a submit that was taken (queued, or answered by the worker): its
 * nng client is answered with the error, its in-process reader told. */
void door__refuse(struct door *d, struct door_req *r, int code, const char *message)
{
	d->n_refused++;
	if (!r->local) {
		d->parked--;
		door__send_error(d, r->submitter, code, message);
		r->submitter = NULL;
		door__free_req(d, r);
		return;
	}
	if (!r->held) { /* nobody reads it */
		door__free_req(d, r);
		return;
	}
	door__set_st(d, r, RQ_DONE);
	if (r->sub)
		nng_msg_free(r->sub); /* its reader reads the refusal, not the submit */
	r->sub = NULL;
	r->refused = true;
	r->code = code;
	snprintf(r->finish, sizeof(r->finish), "error");
	r->message = strdup(message);
	r->touched_ms = clk_mono_ms();
	door__news(r);
}

/* The door's checks of a submit `q` from `peer`, and the request made of
 * it, queued, holding `nm` (q's message, re-tagged: owned by the request
 * from here on). NULL, with *code and text[] saying why, when refused:
 * the caller keeps `nm` then. */
struct door_req *door__take(struct door *d, const struct msg_fd_submit *q, nng_msg *nm,
                            uint64_t peer, int *code, char *text, size_t cap)
{
	struct door_req *r;

	*code = IG_E_PROTO_FIELD_RANGE;
	if (!d->model.serving) {
		*code = IG_E_BUSY;
		snprintf(text, cap,
		         "no model is served: the supervisor was started on a built-in description "
		         "(start it with --model FILE)");
		return NULL;
	}
	if ((q->text.n > 0) == (q->prompt.n > 0)) {
		snprintf(
		    text, cap,
		    q->text.n ? "fd_submit: give the prompt as `text` or as `prompt` token ids, "
		                "not both (text %u bytes, prompt %u ids)"
		              : "fd_submit: the prompt is empty: give it as `text` (1 to %u bytes) "
		                "or as `prompt` token ids (1 to %u)",
		    q->text.n ? q->text.n : MSG_TEXT_MAX, q->text.n ? q->prompt.n : MSG_IDS_MAX);
		return NULL;
	}
	if (q->echo && !q->logprobs) {
		snprintf(text, cap,
		         "fd_submit.echo: true without logprobs; accepted: false, or logprobs true "
		         "(echo asks the prompt's log-probabilities too)");
		return NULL;
	}
	if (!msg_str_eq(q->class, "interactive") && !msg_str_eq(q->class, "agent")) {
		snprintf(text, cap, "fd_submit.class: '%.*s'; accepted: interactive, agent",
		         (int)q->class.n, q->class.p);
		return NULL;
	}
	if (d->queued >= d->queue_max) {
		struct door_req *v = door__displace(d, peer);

		if (!v) {
			d->n_refused++;
			*code = IG_E_BUSY;
			snprintf(
			    text, cap,
			    "%u requests already wait for a worker slot, the most the front door "
			    "holds, and no other client has more of them waiting than this one; "
			    "try again when some finish",
			    d->queued);
			return NULL;
		}
		d->n_displaced++;
		door__refuse(d, v, IG_E_BUSY,
		             "the front door's queue is full and this client holds the most of it: "
		             "its newest waiting request gave way to another client's; try again "
		             "when some finish");
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		*code = IG_E_NOMEM;
		snprintf(text, cap, "the front door is out of memory");
		return NULL;
	}
	r->sub = nm;
	r->lp = q->logprobs;
	r->lp_top = (uint32_t)q->top_logprobs;
	r->echo = q->echo;
	r->id = d->next_id++;
	r->st = RQ_QUEUED;
	r->peer = peer;
	msg_str_copy(r->cls, sizeof(r->cls), q->class);
	r->created_ms = r->touched_ms = clk_mono_ms();
	r->prev = d->tail;
	if (d->tail)
		d->tail->next = r;
	else
		d->head = r;
	d->tail = r;
	r->hnext = d->ids[r->id & (DOOR_ID_BUCKETS - 1)];
	d->ids[r->id & (DOOR_ID_BUCKETS - 1)] = r;
	door__count(d, r, +1);
	pthread_cond_signal(&d->pump_cv);
	return r;
}

/* ---- the clock: waits that ran out, requests nobody reads ------------------------ */

void *door__clock(void *arg)
{
	struct door *d = arg;

	pthread_mutex_lock(&d->mu);
	while (!d->closing) {
		uint64_t now = clk_mono_ms(), next = now + 1000;
		struct door_req *r = d->head;

		while (r) {
			struct door_req *nx = r->next;
			struct door_slot **pp = &r->waiters;

			while (*pp) {
				struct door_slot *s = *pp;

				if (s->deadline_ms <= now) {
					*pp = s->nxt;
					s->nxt = NULL;
					d->parked--;
					door__reply_tokens(d, s, r);
				} else {
					if (s->deadline_ms < next)
						next = s->deadline_ms;
					pp = &s->nxt;
				}
			}
			if (r->wake && r->wake_at_ms <= now) {
				void (*wake)(void *) = r->wake;

				r->wake = NULL; /* its wait ran out: the reader looks again */
				wake(r->wake_arg);
			} else if (r->wake && r->wake_at_ms < next) {
				next = r->wake_at_ms;
			}
			if (r->st == RQ_RUNNING && !r->waiters &&
			    now - r->touched_ms > DOOR_ABANDON_MS) {
				struct ev e;

				ev_begin(&e, EV_WARN, "ignis.frontdoor.abandoned");
				ev_u64(&e, "id", r->id);
				ev_u64(&e, "idle_ms", now - r->touched_ms);
				ev_end(&e);
				r->wcancels = 2;
				door__finish(d, r, "cancelled", 0, NULL);
				pthread_cond_signal(&d->pump_cv);
			} else if (r->st == RQ_DONE && !r->forgotten && !r->held &&
			           (now - r->touched_ms > DOOR_KEEP_MS ||
			            d->kept > DOOR_KEEP_MAX)) {
				door__forget(d, r); /* oldest first: the list is in id order */
			}
			r = nx;
		}
		svc_reject_flush(&d->rejects);
		door__wait(&d->clock_cv, &d->mu, next - now);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}
