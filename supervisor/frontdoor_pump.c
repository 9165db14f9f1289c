/*
 * frontdoor_pump.c - the front door's pump, the only thread that talks to the
 * gpu-worker: each pass sends the polls, cancels and submits due as one
 * flight and applies the answers in the order they were boarded. A submit
 * goes as the message the request holds (docs/adr/0043).
 */
#define _GNU_SOURCE
#include "frontdoor_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

/* ---- the pump: the worker's side -------------------------------------------------- */

/* A worker's reply of type `error` as its code and message as they are (the
 * client sees the worker's own words); rx released then. */
static int door__reply_code(struct tp_rx *rx, struct ig_errbuf *eb)
{
	uint64_t code;

	if (rx->m.type != MSG_ERROR)
		return IG_E_OK;
	code = rx->m.u.error.code;
	ig_errf(eb, 0, "%.*s", (int)rx->m.u.error.message.n, rx->m.u.error.message.p);
	eb->code = code && code <= INT32_MAX && ig_err_known((int)code) ? (int)code
	                                                                : IG_E_PROTO_UNEXPECTED;
	tp_rx_release(rx);
	return eb->code;
}

/* Room for `need` elements of `size` bytes in *pp, which holds *cap of
 * them (the capacity doubles from `first`); false when there is no memory
 * (*pp is then as it was). */
static bool door__room(void *pp, uint32_t *cap, uint64_t need, size_t size, uint32_t first)
{
	uint64_t c = *cap ? *cap : first;
	void *p;

	if (need <= *cap)
		return true;
	while (c < need)
		c *= 2;
	if (c > UINT32_MAX || !(p = realloc(*(void **)pp, (size_t)c * size)))
		return false;
	*(void **)pp = p;
	*cap = (uint32_t)c;
	return true;
}

/* True when an entry's text and its ends agree with its tokens: one end a
 * token, ascending, within the text. */
static bool door__text_ok(const struct msg_tokens_ent *t)
{
	if (t->text_ends.n != t->tokens.n)
		return false;
	for (uint32_t i = 0; i < t->text_ends.n; i++)
		if (t->text_ends.v[i] > t->text.n ||
		    (i && t->text_ends.v[i] < t->text_ends.v[i - 1]))
			return false;
	return true;
}

/* A tokens_lp's log-probabilities agree with its entry's tokens: a group
 * a token, each 1 + (at most the top asked) entries, the token's own
 * first (none at all for a prompt's position 0, and only there), a piece
 * an entry, bytes 0..255 ascending within `pieces`. */
static bool door__lp_ok(const struct door_req *r, const struct msg_tokens_lp *l, bool prompt)
{
	const struct msg_tokens_ent *t = &l->ent.v[0];
	uint32_t j = 0;

	if (l->lp_n.n != t->tokens.n || l->piece_ends.n != l->lps.n)
		return false;
	for (uint32_t i = 0; i < l->lp_n.n; i++) {
		uint32_t k = l->lp_n.v[i];

		if (prompt && t->from + i == 0) {
			if (k)
				return false;
			continue;
		}
		if (k < 1 || k > 1 + r->lp_top || j + k > l->lps.n ||
		    l->lps.v[j].id != t->tokens.v[i])
			return false;
		j += k;
	}
	if (j != l->lps.n)
		return false;
	for (uint32_t e = 0; e < l->piece_ends.n; e++)
		if (l->piece_ends.v[e] > l->pieces.n ||
		    (e && l->piece_ends.v[e] < l->piece_ends.v[e - 1]))
			return false;
	for (uint32_t b = 0; b < l->pieces.n; b++)
		if (l->pieces.v[b] > 255)
			return false;
	return true;
}

/* Append an entry's tokens and text (checked: door__text_ok) to run `u`,
 * and with `l` (checked: door__lp_ok) their log-probabilities; false, with
 * nothing appended, when there is no memory. */
static bool door__run_add(struct door_run *u, const struct msg_tokens_ent *t,
                          const struct msg_tokens_lp *l)
{
	uint32_t nt = t->tokens.n, ne = l ? l->lps.n : 0, nb = l ? l->pieces.n : 0;
	uint64_t n = (uint64_t)u->n + nt;

	if (!door__room(&u->toks, &u->cap, n, sizeof(*u->toks), 64) ||
	    !door__room(&u->tend, &u->ecap, n, sizeof(*u->tend), 64) ||
	    !door__room(&u->text, &u->tcap, (uint64_t)u->tlen + t->text.n, 1, 256) ||
	    (l &&
	     (!door__room(&u->lp_at, &u->lp_at_cap, n, sizeof(*u->lp_at), 64) ||
	      !door__room(&u->lpe, &u->lpe_cap, (uint64_t)u->nlpe + ne, sizeof(*u->lpe), 256) ||
	      !door__room(&u->lpb, &u->lpb_cap, (uint64_t)u->nlpb + nb, 1, 1024))))
		return false;
	if (l) {
		uint32_t j = 0, prev = 0;

		for (uint32_t i = 0; i < nt; i++) {
			u->lp_at[u->n + i] = u->nlpe + j;
			j += l->lp_n.v[i];
		}
		for (uint32_t e = 0; e < ne; e++) {
			u->lpe[u->nlpe + e] =
			    (struct door_lpe){(uint32_t)l->lps.v[e].id, l->lps.v[e].lp,
			                      u->nlpb + prev, l->piece_ends.v[e] - prev};
			prev = l->piece_ends.v[e];
		}
		for (uint32_t b = 0; b < nb; b++)
			u->lpb[u->nlpb + b] = (uint8_t)l->pieces.v[b];
		u->nlpe += ne;
		u->nlpb += nb;
	}
	/* the text is the worker's, from the end of what came before */
	for (uint32_t i = 0; i < nt; i++) {
		u->toks[u->n] = t->tokens.v[i];
		u->tend[u->n++] = u->tlen + t->text_ends.v[i];
	}
	if (t->text.n)
		memcpy(u->text + u->tlen, t->text.p, t->text.n);
	u->tlen += t->text.n;
	return true;
}

/* An answer about `r` (entry t) from worker `pid` that ends it: one from
 * another worker (every request of the one that admitted it is lost), or
 * one with a code (the worker no longer knows it, or cannot answer: `what`
 * it did not give, and `tail`). True when it did. */
static bool door__answer_ends(struct door *d, struct door_req *r, const struct msg_tokens_ent *t,
                              pid_t pid, const char *what, const char *tail)
{
	char text[320];

	if (r->wpid != pid) {
		door__lose_worker(d, r->wpid, "restarted");
		return true;
	}
	if (!t->code)
		return false;
	snprintf(text, sizeof(text),
	         "the gpu-worker %s request %" PRIu64 " (its id %" PRIu64 " there: %s)%s", what,
	         r->id, r->wid, ig_err_str((int)t->code), tail);
	r->wcancels = t->code == IG_E_NOTFOUND ? 0 : 2; /* else it is still there */
	door__finish(d, r, "error", IG_E_CHILD, text);
	return true;
}

/* Apply one entry of a tokens_many answer, or of a tokens_lp (`l`, its
 * log-probabilities kept with its tokens, so a reader never sees a token
 * without them), from worker `pid`. */
static bool door__apply_ent(struct door *d, struct door_req *r, const struct msg_tokens_ent *t,
                            pid_t pid, const struct msg_tokens_lp *l)
{
	char tail[64];

	if (r->st != RQ_RUNNING || r->wid != t->id || t->from != r->recv)
		return false; /* ended meanwhile, or an answer to an older question */
	snprintf(tail, sizeof(tail), "; it is lost after %u tokens", r->out.n);
	if (door__answer_ends(d, r, t, pid, "no longer knows", tail))
		return true;
	if (!door__text_ok(t)) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_PROTO_UNEXPECTED,
		             "the gpu-worker sent text that does not match its tokens");
		return true;
	}
	if (l && t->tokens.n && !door__lp_ok(r, l, false)) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_PROTO_UNEXPECTED,
		             "the gpu-worker sent log-probabilities that do not match its tokens");
		return true;
	}
	if (!door__run_add(&r->out, t, l)) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_NOMEM,
		             "the front door ran out of memory for this request's tokens");
		return true;
	}
	r->recv += t->tokens.n;
	r->cached = (uint32_t)t->cached;
	d->n_tokens += t->tokens.n;
	if (!msg_str_eq(t->state, r->phase)) {
		msg_str_copy(r->phase, sizeof(r->phase), t->state);
		if (!t->tokens.n)
			door__news(r); /* a move between tiers: its stream says so */
	}
	if (t->done && r->recv == t->generated && (!r->echo || r->prompt_in)) {
		char fin[17];

		msg_str_copy(fin, sizeof(fin), t->finish);
		r->wcancels = 1; /* forget it there */
		door__finish(d, r, fin, 0, NULL);
		d->submit_blocked_until = 0; /* a worker slot is free again */
		return true;
	}
	if (t->done && r->recv == t->generated)
		r->wdone = true; /* finished once its prompt is in */
	if (t->tokens.n)
		door__wake(d, r, false);
	return t->tokens.n > 0;
}

/* Apply a tokens_lp answer about request r's prompt (echo) from worker
 * `pid`: its positions kept, in order; the prompt is in once all are, and
 * a request done at the worker with fewer ready ends in error. Answers to
 * positions already kept, or not next, are stale and left. */
static bool door__apply_prompt(struct door *d, struct door_req *r, const struct msg_tokens_lp *l)
{
	const struct msg_tokens_ent *t = &l->ent.v[0];

	if (r->st != RQ_RUNNING || r->prompt_in || r->wid != t->id || t->from != r->prm.n)
		return false;
	if (door__answer_ends(d, r, t, (pid_t)l->pid, "did not give the prompt of", ""))
		return true;
	if (!door__text_ok(t) || !door__lp_ok(r, l, true) ||
	    r->prm.n + t->tokens.n > r->prompt_tokens) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_PROTO_UNEXPECTED,
		             "the gpu-worker sent a prompt whose log-probabilities or text do not "
		             "match its tokens");
		return true;
	}
	if (!door__run_add(&r->prm, t, l)) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_NOMEM,
		             "the front door ran out of memory for this request's prompt");
		return true;
	}
	if (r->prm.n == r->prompt_tokens) {
		r->prompt_in = true;
		door__news(r); /* a stream writes the prompt first */
		return true;
	}
	if (t->done && r->prm.n >= t->generated) {
		char text[256];

		snprintf(text, sizeof(text),
		         "the gpu-worker ended request %" PRIu64
		         " (%.*s) with the log-probabilities "
		         "of %u of its prompt's %u tokens",
		         r->id, (int)t->finish.n, t->finish.p, r->prm.n, r->prompt_tokens);
		r->wcancels = 1;
		door__finish(d, r, "error", IG_E_CHILD, text);
		return true;
	}
	return t->tokens.n > 0;
}

/* One message in flight to the worker, on a request context of its own:
 * the pump sends a pass's polls, cancels and submits together as one
 * flight, which the worker answers between two of its rounds (it serves
 * every waiting request there: proto/service.h), so that a pass costs a
 * round, not a round per message. The worker may answer a flight's
 * messages in any order: only a request's prompt polls and its poll
 * concern the same request, and each answer stands alone (its positions
 * and state as the worker had them); those are applied in the order they
 * were boarded, the prompt's first, so that a request whose prompt came
 * in ends in the same pass. */
enum door_fl { DOOR_FL_POLL, DOOR_FL_CANCEL, DOOR_FL_SUBMIT, DOOR_FL_POLL_LP, DOOR_FL_POLL_PROMPT };

struct door_flight {
	enum door_fl kind;
	uint64_t id;    /* cancel, submit: the door's id; poll: its poll_ids row */
	uint32_t npoll; /* poll: the ids in its row */
	nng_msg *nm;
	nng_ctx ctx;
	nng_aio *aio;
	bool ctx_open;
	int rc;
	struct tp_rx rx;
	struct ig_errbuf eb;
};

/* Wait for the operation on entry f; false, with f->rc saying `what`
 * failed (and a message that was not sent freed), when it did. */
static bool door__landed(struct door_flight *f, const char *what, bool sending)
{
	int rv;

	nng_aio_wait(f->aio);
	rv = nng_aio_result(f->aio);
	if (!rv)
		return true;
	if (sending)
		nng_msg_free(nng_aio_get_msg(f->aio));
	f->rc = tp_nng_err(&f->eb, rv, what);
	return false;
}

/* Send the flights' messages together, then take their answers (d->mu not
 * held). Each flight's rc and rx say how it went. */
static void door__fly(nng_socket ws, struct door_flight *f, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int rv;

		if (f[i].rc)
			continue;
		/* a context and an aio a flight entry, kept from pass to pass (nng
		 * 1.5.2's reaper is best spared a context closed per message) */
		rv = f[i].ctx_open ? 0 : nng_ctx_open(&f[i].ctx, ws);
		f[i].ctx_open = rv == 0;
		if (!rv && !f[i].aio)
			rv = nng_aio_alloc(&f[i].aio, NULL, NULL);
		if (rv) {
			f[i].rc = tp_nng_err(&f[i].eb, rv, "cannot open a request context");
			continue;
		}
		nng_aio_set_timeout(f[i].aio, DOOR_CALL_MS);
		nng_aio_set_msg(f[i].aio, f[i].nm);
		nng_ctx_send(f[i].ctx, f[i].aio);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (f[i].rc)
			continue;
		f[i].nm = NULL; /* nng's now, or freed by door__landed */
		if (!door__landed(&f[i], "send", true))
			continue;
		nng_aio_set_timeout(f[i].aio, DOOR_CALL_MS);
		nng_ctx_recv(f[i].ctx, f[i].aio);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (f[i].rc || !door__landed(&f[i], "receive", false))
			continue;
		f[i].rc = tp_decode(nng_aio_get_msg(f[i].aio), &f[i].rx, &f[i].eb);
		nng_aio_set_msg(f[i].aio, NULL);
		if (!f[i].rc)
			f[i].rc = door__reply_code(&f[i].rx, &f[i].eb);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (f[i].nm)
			nng_msg_free(f[i].nm);
		f[i].nm = NULL;
	}
}

static void door__reply_submitted(struct door *d, struct door_req *r)
{
	struct door_slot *s = r->submitter;
	struct msg *m = d->out;

	r->submitter = NULL;
	d->parked--;
	m->type = MSG_FD_SUBMITTED;
	m->u.fd_submitted =
	    (struct msg_fd_submitted){r->id, r->prompt_tokens, r->max_tokens, r->reserved_pages,
	                              r->admitted_ms - r->created_ms};
	door__send_msg(d, s, m);
}

/* Requests of ours that hold a slot at worker `pid`: running, or finished
 * there and not forgotten yet. */
static uint32_t door__at_worker(const struct door *d, pid_t pid)
{
	uint32_t n = 0;

	for (const struct door_req *r = d->head; r; r = r->next)
		if (r->wpid == pid && (r->st == RQ_RUNNING || r->wcancels))
			n++;
	return n;
}

/* Count the queued submits that now wait for a worker slot (once each). */
static void door__mark_waits(struct door *d)
{
	for (struct door_req *r = d->head; r; r = r->next)
		if (r->st == RQ_QUEUED && !r->slot_waited) {
			r->slot_waited = true;
			d->n_slot_waits++;
		}
}

/* The worker's answer to request `r`'s submit (rc, rx). True when the
 * request moved on (admitted or refused). */
static bool door__submit_answer(struct door *d, struct door_req *r, pid_t pid, int rc,
                                struct tp_rx *rx, struct ig_errbuf *eb, int *wfail)
{
	if (rc == IG_E_OK && rx->m.type != MSG_SUBMITTED)
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED, "the gpu-worker answered '%s'",
		             msg_type_name(rx->m.type));
	if (rc == IG_E_OK && d->wpid != pid)
		rc = IG_E_CLOSED; /* admitted by a worker that is gone: again */
	if (rc == IG_E_OK) {
		const struct msg_submitted *a = &rx->m.u.submitted;

		door__set_st(d, r, RQ_RUNNING);
		r->wid = a->id;
		r->wpid = pid;
		r->prompt_tokens = (uint32_t)a->prompt_tokens;
		r->max_tokens = (uint32_t)a->max_tokens;
		r->reserved_pages = (uint32_t)a->reserved_pages;
		r->admitted_ms = r->touched_ms = clk_mono_ms();
		nng_msg_free(r->sub); /* the worker has the prompt now */
		r->sub = NULL;
		d->n_submitted++;
		if (r->local)
			door__news(r);
		else
			door__reply_submitted(d, r);
		if (r->withdrawn) {
			/* nobody will read it: it goes at once */
			r->wcancels = 2;
			door__finish(d, r, "cancelled", 0, NULL);
			door__forget(d, r);
		}
		return true;
	}
	if (rc == IG_E_BUSY && d->running > 0) {
		/* every worker slot is taken: it waits, first in line */
		door__set_st(d, r, RQ_QUEUED);
		d->submit_blocked_until = clk_mono_ms() + 250;
		door__mark_waits(d);
		return false;
	}
	if (rc == IG_E_TIMEOUT || rc == IG_E_CLOSED || rc == IG_E_TRANSPORT || rc == IG_E_NOMEM) {
		door__set_st(d, r, RQ_QUEUED);
		*wfail = rc;
		return false;
	}
	door__refuse(d, r, rc, eb->msg);
	return true;
}

/* ---- a pass of the pump: one flight ------------------------------------------------ */

/* Add `q`, encoded, or when q is NULL a duplicate of the message `nm`, to
 * the flight (kind, door id or poll ids). */
static void door__board(struct door_flight *f, uint32_t *nf, const struct msg *q, nng_msg *nm,
                        enum door_fl kind, uint64_t id, uint32_t npoll)
{
	struct door_flight *e = &f[(*nf)++];
	int rv;

	e->kind = kind;
	e->id = id;
	e->npoll = npoll;
	e->rx.nm = NULL;
	if (q) {
		e->rc = tp_encode(q, &e->nm, &e->eb);
		return;
	}
	rv = nng_msg_dup(&e->nm, nm);
	e->rc = rv ? tp_nng_err(&e->eb, rv, "cannot copy a submit to send") : IG_E_OK;
	if (rv)
		e->nm = NULL;
}

/* Polls: every running request of worker `pid`, 64 to a poll_many. */
static void door__board_polls(struct door *d, pid_t pid, struct msg *q, struct door_flight *f,
                              uint32_t *nf)
{
	_Static_assert(DOOR_POLL_FLIGHTS * MSG_POLL_MANY_MAX >= MSG_WORKER_REQUESTS_MAX,
	               "one flight polls every request a worker can hold");
	uint64_t cursor = 0;
	uint32_t k = 0;

	while (k < DOOR_POLL_FLIGHTS) {
		struct msg_poll_many *pm = &q->u.poll_many;
		uint32_t n = 0;

		q->type = MSG_POLL_MANY;
		for (struct door_req *r = d->head; r && n < MSG_POLL_MANY_MAX; r = r->next) {
			if (r->id <= cursor || r->st != RQ_RUNNING || r->wpid != pid || r->lp)
				continue;
			d->poll_ids[k][n] = r->id;
			pm->reqs.v[n] = (struct msg_poll_ent){r->wid, r->recv};
			n++;
		}
		if (!n)
			return;
		pm->reqs.n = n;
		cursor = d->poll_ids[k][n - 1];
		door__board(f, nf, q, NULL, DOOR_FL_POLL, k, n);
		k++;
	}
}

/* Polls of the requests asking log-probabilities: one poll_lp each, up to
 * DOOR_FLIGHT_LPS a pass, going on from where the last pass stopped (so
 * that more than that many all get their turn). With `prompt`, of the
 * prompts still owed (echo; docs/adr/0063) once the worker has the first
 * token, or is done: DOOR_PROMPT_AHEAD polls a request, for its next
 * positions 16 apart (an answer that took fewer leaves the next one stale,
 * asked again the next pass), DOOR_FLIGHT_PROMPTS a pass. */
static void door__board_lp_polls(struct door *d, pid_t pid, struct msg *q, struct door_flight *f,
                                 uint32_t *nf, bool prompt)
{
	uint64_t *cursor = prompt ? &d->prompt_cursor : &d->lp_cursor;
	uint32_t n = 0, max = prompt ? DOOR_FLIGHT_PROMPTS : DOOR_FLIGHT_LPS;
	uint64_t last = *cursor;

	for (int round = 0; round < 2 && n < max; round++) {
		for (struct door_req *r = d->head; r && n < max; r = r->next) {
			if (!r->lp || r->st != RQ_RUNNING || r->wpid != pid ||
			    (round == 0 ? r->id <= *cursor : r->id > *cursor))
				continue;
			if (prompt && (!r->echo || r->prompt_in || (!r->out.n && !r->wdone)))
				continue;
			for (uint32_t k = 0; k < (prompt ? DOOR_PROMPT_AHEAD : 1u) && n < max;
			     k++) {
				uint32_t from = prompt ? r->prm.n + k * MSG_LP_TOKENS : r->recv;

				if (k && from >= r->prompt_tokens)
					break;
				q->type = MSG_POLL_LP;
				q->u.poll_lp = (struct msg_poll_lp){r->wid, from, prompt};
				door__board(f, nf, q, NULL,
				            prompt ? DOOR_FL_POLL_PROMPT : DOOR_FL_POLL_LP, r->id,
				            0);
				n++;
			}
			last = r->id;
		}
	}
	*cursor = n < max ? 0 : last;
}

/* Cancels owed to worker `pid`: one per request a pass (a stop, then a
 * forget the next pass). */
static void door__board_cancels(struct door *d, pid_t pid, struct msg *q, struct door_flight *f,
                                uint32_t *nf, bool *moved)
{
	uint32_t n = 0;

	for (struct door_req *r = d->head, *next; r && n < DOOR_FLIGHT_CANCELS; r = next) {
		next = r->next;
		if (!r->wcancels)
			continue;
		if (r->wpid != pid) {
			r->wcancels = 0; /* the worker that knew it is gone */
			*moved = true;
			if (r->forgotten)
				door__free_req(d, r);
			continue;
		}
		q->type = MSG_CANCEL;
		q->u.cancel.id = r->wid;
		door__board(f, nf, q, NULL, DOOR_FL_CANCEL, r->id, 0);
		n++;
	}
}

/* The order in which waiting submits take the worker's free slots: each
 * submit's rank is what its peer holds ahead of it (its requests at the
 * worker, and its submits queued before it); the lowest rank goes first;
 * between equals, the peer served longest ago (a new one first), then
 * arrival. A peer with nothing at the worker is served before one holding
 * many, whatever their arrival, and peers that hold the same take turns:
 * a client that floods the queue gets its share, not the queue. */
static int door__by_rank(const void *a, const void *b)
{
	const struct door_req *x = *(const struct door_req *const *)a;
	const struct door_req *y = *(const struct door_req *const *)b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->served != y->served)
		return x->served < y->served ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Submits: the queued ones in the order of their rank (above), as many as
 * the worker has slots for (--server-max-requests, counting those it still
 * keeps for us). */
static void door__board_submits(struct door *d, pid_t pid, struct door_flight *f, uint32_t *nf)
{
	uint32_t n = 0, nc = 0, room,
	         max = d->model.max_requests ? (uint32_t)d->model.max_requests : 1;
	uint32_t at = door__at_worker(d, pid);

	if (clk_mono_ms() < d->submit_blocked_until)
		return;
	room = at < max ? max - at : 0;
	for (struct door_req *r = d->head; r && nc < d->queue_max; r = r->next)
		if (r->st == RQ_QUEUED)
			d->cand[nc++] = r;
	if (!nc)
		return;
	if (!room) {
		/* every worker slot is ours: they wait, in line */
		door__mark_waits(d);
		d->submit_blocked_until = clk_mono_ms() + 20;
		return;
	}
	if (door__peers_reset(d, door__nreqs(d))) {
		for (struct door_req *r = d->head; r; r = r->next) {
			struct door_peer *p;

			if (r->st == RQ_QUEUED)
				continue;
			p = door__peer(d, r->peer);
			if (r->wpid == pid && (r->st == RQ_RUNNING || r->wcancels))
				p->held++;
			if (r->board_seq > p->served)
				p->served = r->board_seq;
		}
		for (uint32_t i = 0; i < nc; i++) {
			struct door_peer *p = door__peer(d, d->cand[i]->peer);

			d->cand[i]->rank = p->held + p->queued++;
			d->cand[i]->served = p->served;
		}
		qsort(d->cand, nc, sizeof(*d->cand), door__by_rank);
	} /* without memory for the table: in arrival order */
	for (uint32_t i = 0; i < nc && n < DOOR_FLIGHT_SUBMITS; i++) {
		struct door_req *r = d->cand[i];

		if (n >= room) {
			door__mark_waits(d);
			d->submit_blocked_until = clk_mono_ms() + 20;
			return;
		}
		door__board(f, nf, NULL, r->sub, DOOR_FL_SUBMIT, r->id, 0);
		door__set_st(d, r, RQ_SUBMITTING);
		r->board_seq = ++d->board_seq;
		n++;
	}
}

/* The flight's answers, in the order it was boarded. */
static bool door__land(struct door *d, pid_t pid, struct door_flight *f, uint32_t nf, int *wfail)
{
	bool moved = false;

	for (uint32_t k = 0; k < nf; k++) {
		struct door_flight *e = &f[k];
		struct tp_rx *rx = &e->rx;
		struct door_req *r;
		int rc = e->rc;

		switch (e->kind) {
		case DOOR_FL_POLL:
			if (rc == IG_E_OK && rx->m.type != MSG_TOKENS_MANY)
				rc = IG_E_PROTO_UNEXPECTED;
			if (rc)
				*wfail = rc;
			for (uint32_t i = 0; !rc && i < rx->m.u.tokens_many.reqs.n && i < e->npoll;
			     i++) {
				r = door__find(d, d->poll_ids[e->id][i], true);
				if (r && door__apply_ent(d, r, &rx->m.u.tokens_many.reqs.v[i],
				                         (pid_t)rx->m.u.tokens_many.pid, NULL))
					moved = true;
			}
			break;
		case DOOR_FL_POLL_LP:
		case DOOR_FL_POLL_PROMPT:
			if (rc == IG_E_OK && rx->m.type != MSG_TOKENS_LP)
				rc = IG_E_PROTO_UNEXPECTED;
			if (rc) {
				*wfail = rc;
				break;
			}
			r = door__find(d, e->id, true);
			if (r && (e->kind == DOOR_FL_POLL_PROMPT
			              ? door__apply_prompt(d, r, &rx->m.u.tokens_lp)
			              : door__apply_ent(d, r, &rx->m.u.tokens_lp.ent.v[0],
			                                (pid_t)rx->m.u.tokens_lp.pid,
			                                &rx->m.u.tokens_lp)))
				moved = true;
			break;
		case DOOR_FL_CANCEL:
			r = door__find(d, e->id, true);
			if (rc && rc != IG_E_NOTFOUND) {
				*wfail = rc;
				break;
			}
			moved = true;
			if (r)
				r->wcancels = rc ? 0 : r->wcancels - 1;
			if (r && r->forgotten && !r->wcancels)
				door__free_req(d, r);
			break;
		case DOOR_FL_SUBMIT:
			r = door__find(d, e->id, true);
			if (r)
				moved |= door__submit_answer(d, r, pid, rc, rx, &e->eb, wfail);
			break;
		}
		tp_rx_release(rx);
		e->rc = 0;
	}
	return moved;
}

/* One pass: the polls, cancels and submits due, as one flight (so that a
 * pass costs the worker one round, not one per message). */
static bool door__pass(struct door *d, pid_t pid, struct msg *q, struct door_flight *f, int *wfail)
{
	uint32_t nf = 0;
	bool moved = false;

	door__board_polls(d, pid, q, f, &nf);
	door__board_lp_polls(d, pid, q, f, &nf, true); /* a prompt's before its poll */
	door__board_lp_polls(d, pid, q, f, &nf, false);
	door__board_cancels(d, pid, q, f, &nf, &moved);
	door__board_submits(d, pid, f, &nf);
	if (!nf)
		return moved;
	pthread_mutex_unlock(&d->mu);
	door__fly(d->ws, f, nf);
	pthread_mutex_lock(&d->mu);
	return door__land(d, pid, f, nf, wfail) || moved;
}

/* Something for the pump to do with worker `pid`. */
static bool door__pump_has_work(const struct door *d)
{
	if (!d->wpid)
		return false;
	if (d->running)
		return true;
	for (const struct door_req *r = d->head; r; r = r->next)
		if (r->wcancels || (r->st == RQ_QUEUED && clk_mono_ms() >= d->submit_blocked_until))
			return true;
	return false;
}

void *door__pump(void *arg)
{
	struct door *d = arg;
	struct msg *q = malloc(sizeof(*q));
	struct door_flight *f = calloc(DOOR_FLIGHT_MAX, sizeof(*f));
	struct ig_errbuf eb;

	pthread_mutex_lock(&d->mu);
	while (!d->closing && q && f) {
		pid_t pid;
		bool moved = false;
		int wfail = 0;

		if (!door__pump_has_work(d)) {
			door__wait(&d->pump_cv, &d->mu, 100);
			continue;
		}
		pid = d->wpid;
		if (!d->ws_open) {
			nng_socket ws;
			int rc;

			pthread_mutex_unlock(&d->mu);
			rc = tp_dial(&ws, d->rtdir, "gpu-worker", DOOR_CALL_MS, &eb);
			pthread_mutex_lock(&d->mu);
			if (rc) {
				ev_msg(EV_WARN, "ignis.frontdoor.worker_unreachable", "%s", eb.msg);
				door__wait(&d->pump_cv, &d->mu, 500);
				continue;
			}
			if (d->closing) {
				pthread_mutex_unlock(&d->mu); /* nng_close: see door_close */
				nng_close(ws);
				pthread_mutex_lock(&d->mu);
				break;
			}
			d->ws = ws;
			d->ws_open = true;
		}
		moved = door__pass(d, pid, q, f, &wfail);
		if (wfail)
			door__wait(&d->pump_cv, &d->mu, 100); /* the worker is away: a moment */
		else if (!moved)
			door__wait(&d->pump_cv, &d->mu, 2); /* nothing new: don't spin */
	}
	pthread_mutex_unlock(&d->mu);
	for (uint32_t i = 0; f && i < DOOR_FLIGHT_MAX; i++) {
		if (f[i].ctx_open)
			nng_ctx_close(f[i].ctx);
		if (f[i].aio)
			nng_aio_free(f[i].aio);
	}
	free(f);
	free(q);
	return NULL;
}
