/*
 * frontdoor_nng.c - the front door's nng clients: the reply socket's contexts and
 * their callback, the answer to each request (a submit parks its context
 * until the worker admits it), and connections that close.
 */
#define _GNU_SOURCE
#include "frontdoor_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "version.h"

/* ---- replies --------------------------------------------------------------- */

int door__append(void *ctx, const char *buf, size_t len)
{
	return nng_msg_append(ctx, buf, len) == 0 ? 0 : -1;
}

void door__send_error(struct door *d, struct door_slot *s, int code, const char *text)
{
	struct msg *m = d->out;

	memset(&m->u.error, 0, sizeof(m->u.error));
	m->type = MSG_ERROR;
	m->u.error.code = (uint64_t)(code > 0 ? code : IG_E_INVAL);
	m->u.error.message =
	    msg_str_of(msg_utf8_valid(text, strlen(text)) ? text : ig_err_str(code));
	if (m->u.error.message.n > 1024)
		m->u.error.message.n = 1024; /* our messages are shorter; never cut mid-way */
	door__send_msg(d, s, m);
}

/* Encode `m` and send it on the slot's context (asynchronously: the
 * callback sees SLOT_SEND when it is gone). Called under mu. */
void door__send_msg(struct door *d, struct door_slot *s, const struct msg *m)
{
	struct ig_errbuf eb;
	nng_msg *nm;

	if (nng_msg_alloc(&nm, 0) != 0) {
		s->st = SLOT_SPARE; /* the client times out; its context goes back */
		s->nxt = d->spare;
		d->spare = s;
		return;
	}
	if (msg_encode(m, door__append, nm, &eb) != IG_E_OK) {
		nng_msg_free(nm);
		if (m->type != MSG_ERROR) {
			door__send_error(d, s, eb.code, eb.msg);
			return;
		}
		s->st = SLOT_SPARE;
		s->nxt = d->spare;
		d->spare = s;
		return;
	}
	s->st = SLOT_SEND;
	nng_aio_set_msg(s->aio, nm);
	nng_ctx_send(s->ctx, s->aio);
}

/* A slot to receive on: a spare one, else a new one. NULL at the cap. */
static struct door_slot *door__slot(struct door *d);

/* Keep DOOR_RECEIVERS contexts waiting for requests. */
void door__arm(struct door *d)
{
	while (!d->closing && d->receiving < DOOR_RECEIVERS) {
		struct door_slot *s = door__slot(d);

		if (!s)
			return;
		s->st = SLOT_RECV;
		d->receiving++;
		nng_ctx_recv(s->ctx, s->aio);
	}
}

/* The fd_tokens answer to a poll of `r` from `from` (checked): the tokens
 * and the text the worker sent for them (fewer tokens when it would pass
 * the reply's limit). */
static void door__fill_tokens(struct door_req *r, uint32_t from, uint32_t max,
                              struct msg_fd_tokens *t)
{
	uint32_t n = r->out.n - from, start = door__text_to(&r->out, from, false), end;

	if (n > max)
		n = max;
	for (;;) {
		end = door__text_to(&r->out, from + n, r->st == RQ_DONE && from + n == r->out.n);
		if (end - start <= MSG_TEXT_MAX || !n)
			break;
		n--;
	}
	t->id = r->id;
	t->from = from;
	t->tokens.n = n;
	if (n)
		memcpy(t->tokens.v, r->out.toks + from, (size_t)n * sizeof(uint32_t));
	t->text = (struct msg_str){r->out.text ? r->out.text + start : "", end - start};
	t->state = msg_str_of(door__state(r));
	t->done = r->st == RQ_DONE;
	t->finish = msg_str_of(r->st == RQ_DONE ? r->finish : "");
	t->generated = r->out.n;
	t->cached = r->cached;
	t->code = r->st == RQ_DONE ? (uint64_t)r->code : 0;
	t->message = msg_str_of(r->st == RQ_DONE && r->message ? r->message : "");
}

void door__reply_tokens(struct door *d, struct door_slot *s, struct door_req *r)
{
	struct msg *m = d->out;

	m->type = MSG_FD_TOKENS;
	door__fill_tokens(r, s->from, s->max, &m->u.fd_tokens);
	door__send_msg(d, s, m);
}

/* ---- requests from clients ----------------------------------------------------- */

static void door__reply_status(struct door *d, struct door_slot *s, struct door_req *r)
{
	struct msg *m = d->out;
	struct msg_fd_request *q = &m->u.fd_request;

	m->type = MSG_FD_REQUEST;
	q->id = r->id;
	q->state = msg_str_of(door__state(r));
	q->class = msg_str_of(r->cls);
	q->prompt_tokens = r->prompt_tokens;
	q->max_tokens = r->max_tokens;
	q->generated = r->out.n;
	q->cached = r->cached;
	q->done = r->st == RQ_DONE;
	q->finish = msg_str_of(r->st == RQ_DONE ? r->finish : "");
	q->code = r->st == RQ_DONE ? (uint64_t)r->code : 0;
	q->message = msg_str_of(r->st == RQ_DONE && r->message ? r->message : "");
	q->age_ms = clk_mono_ms() - r->created_ms;
	door__send_msg(d, s, m);
}

static void door__not_found(struct door *d, struct door_slot *s, const char *what, uint64_t id)
{
	char text[256];

	snprintf(text, sizeof(text),
	         "%s.id: no request %" PRIu64
	         " (never submitted here, or forgotten: after fd_cancel of a finished "
	         "request, or %d s after it finished)",
	         what, id, DOOR_KEEP_MS / 1000);
	door__send_error(d, s, IG_E_NOTFOUND, text);
}

/* An nng client's fd_submit `q`, decoded from *nm (already re-tagged): the
 * request takes *nm (set to NULL) when it is queued. */
static void door__submit(struct door *d, struct door_slot *s, const struct msg_fd_submit *q,
                         nng_msg **nm)
{
	char text[512];
	struct door_req *r;
	int code;

	if (d->parked >= DOOR_SLOTS_MAX - 2 * DOOR_RECEIVERS) {
		door__send_error(d, s, IG_E_BUSY,
		                 "the front door holds as many waiting clients as it can; try "
		                 "again shortly");
		return;
	}
	if (q->logprobs) {
		/* fd_tokens has no room for them yet: the HTTP API gives them */
		door__send_error(d, s, IG_E_PROTO_FIELD_RANGE,
		                 "fd_submit.logprobs: true; accepted: false (log-probabilities are "
		                 "served by the HTTP API, not yet by fd_tokens)");
		return;
	}
	r = door__take(d, q, *nm, s->pipe, &code, text, sizeof(text));
	if (!r) {
		door__send_error(d, s, code, text);
		return;
	}
	*nm = NULL;
	r->submitter = s;
	s->st = SLOT_PARKED;
	s->poll = false;
	s->req = r->id;
	d->parked++;
}

static void door__poll(struct door *d, struct door_slot *s, const struct msg_fd_poll *q)
{
	struct door_req *r = door__find(d, q->id, false);
	char text[256];

	if (!r) {
		door__not_found(d, s, "fd_poll", q->id);
		return;
	}
	if (q->from > r->out.n) {
		snprintf(text, sizeof(text),
		         "fd_poll.from: %" PRIu64 " is past the %u tokens request %" PRIu64
		         " has generated; accepted: 0..%u",
		         q->from, r->out.n, r->id, r->out.n);
		{
			door__send_error(d, s, IG_E_INVAL, text);
			return;
		}
	}
	r->touched_ms = clk_mono_ms();
	s->from = (uint32_t)q->from;
	s->max = (uint32_t)q->max;
	if (r->st == RQ_DONE || r->out.n > q->from || !q->wait_ms ||
	    d->parked >= DOOR_SLOTS_MAX - 2 * DOOR_RECEIVERS) {
		door__reply_tokens(d, s, r);
		return;
	}
	s->st = SLOT_PARKED;
	s->poll = true;
	s->req = r->id;
	s->deadline_ms = r->touched_ms + q->wait_ms;
	s->nxt = r->waiters;
	r->waiters = s;
	d->parked++;
	pthread_cond_signal(&d->clock_cv);
}

static void door__cancel(struct door *d, struct door_slot *s, uint64_t id)
{
	struct door_req *r = door__find(d, id, false);
	struct msg *m = d->out;

	if (!r) {
		door__not_found(d, s, "fd_cancel", id);
		return;
	}
	if (r->st == RQ_RUNNING) {
		r->wcancels = 2; /* stop, then forget */
		door__finish(d, r, "cancelled", 0, NULL);
		pthread_cond_signal(&d->pump_cv);
	} else {
		door__forget(d, r);
	}
	m->type = MSG_ACK;
	m->u.ack.of = MSG_FD_CANCEL;
	door__send_msg(d, s, m);
}

static void door__model_reply(struct door *d, struct door_slot *s)
{
	struct msg *m = d->out;
	struct msg_fd_model_reply *q = &m->u.fd_model_reply;

	m->type = MSG_FD_MODEL_REPLY;
	q->model = msg_str_of(d->model.name);
	q->backend = msg_str_of(d->model.backend);
	q->kv_format = msg_str_of(d->model.kv_format);
	q->vocab = d->model.vocab;
	q->context_tokens = d->model.context_tokens;
	q->page_tokens = d->model.page_tokens;
	q->pool_pages = d->model.pool_pages;
	q->lanes = d->model.lanes;
	q->chunk_tokens = d->model.chunk_tokens;
	q->default_max_tokens = d->model.default_max_tokens;
	q->tokenizer = msg_str_of(mdesc_tokenizer_name(d->model.tokenizer));
	q->eos = d->model.eos;
	q->serving = d->model.serving;
	q->worker = msg_str_of(d->wstate);
	door__send_msg(d, s, m);
}

static void door__stats_reply(struct door *d, struct door_slot *s)
{
	struct msg *m = d->out;
	struct msg_fd_stats_reply *q = &m->u.fd_stats_reply;
	uint64_t now = clk_mono_ms();

	m->type = MSG_FD_STATS_REPLY;
	q->uptime_ms = now - d->started_ms;
	q->worker = msg_str_of(d->wstate);
	q->worker_pid = (uint64_t)(d->wpid > 0 ? d->wpid : 0);
	q->worker_restarts = d->wrestarts;
	q->live = d->running;
	q->queued = d->queued;
	q->kept = d->kept;
	q->waiting = d->parked;
	q->submitted = d->n_submitted;
	q->finished = d->n_finished;
	q->failed = d->n_failed;
	q->refused = d->n_refused;
	q->rejected = d->n_rejected;
	q->tokens = d->n_tokens;
	q->slot_waits = d->n_slot_waits;
	q->requests.n = 0;
	for (struct door_req *r = d->head; r && q->requests.n < 64; r = r->next) {
		struct msg_fd_req *e = &q->requests.v[q->requests.n];

		if (r->forgotten || r->st == RQ_QUEUED || r->st == RQ_SUBMITTING)
			continue;
		e->id = r->id;
		e->state = msg_str_of(door__state(r));
		e->class = msg_str_of(r->cls);
		e->prompt_tokens = r->prompt_tokens;
		e->max_tokens = r->max_tokens;
		e->generated = r->out.n;
		e->finish = msg_str_of(r->st == RQ_DONE ? r->finish : "");
		e->age_ms = now - r->created_ms;
		q->requests.n++;
	}
	door__send_msg(d, s, m);
}

/* A decoded request `q` (from *nm, which a queued submit takes): answer it,
 * or park the slot. Under mu. */
static void door__dispatch(struct door *d, struct door_slot *s, const struct msg *q, nng_msg **nm)
{
	struct msg *m = d->out;
	char text[400];
	struct door_req *r;

	switch (q->type) {
	case MSG_HELLO:
		m->type = MSG_HELLO;
		m->u.hello.role = msg_str_of("frontdoor");
		m->u.hello.pid = (uint64_t)getpid();
		m->u.hello.build = msg_str_of(IGNIS_VERSION);
		{
			door__send_msg(d, s, m);
			return;
		}
	case MSG_PING:
		m->type = MSG_PONG;
		m->u.pong.seq = q->u.ping.seq;
		m->u.pong.uptime_ms = clk_mono_ms() - d->started_ms;
		{
			door__send_msg(d, s, m);
			return;
		}
	case MSG_FD_SUBMIT: {
		door__submit(d, s, &q->u.fd_submit, nm);
		return;
	}
	case MSG_FD_POLL: {
		door__poll(d, s, &q->u.fd_poll);
		return;
	}
	case MSG_FD_CANCEL: {
		door__cancel(d, s, q->u.fd_cancel.id);
		return;
	}
	case MSG_FD_STATUS:
		r = door__find(d, q->u.fd_status.id, false);
		if (!r) {
			door__not_found(d, s, "fd_status", q->u.fd_status.id);
			return;
		}
		r->touched_ms = clk_mono_ms();
		{
			door__reply_status(d, s, r);
			return;
		}
	case MSG_FD_MODEL: {
		door__model_reply(d, s);
		return;
	}
	case MSG_FD_STATS: {
		door__stats_reply(d, s);
		return;
	}
	default:
		d->n_rejected++;
		snprintf(text, sizeof(text),
		         "the front door does not take '%s' messages (type %u); it takes "
		         "fd_submit, fd_poll, fd_cancel, fd_status, fd_model, fd_stats, hello "
		         "and ping",
		         msg_type_name(q->type), q->type);
		{
			door__send_error(d, s, IG_E_PROTO_UNEXPECTED, text);
			return;
		}
	}
}

/* ---- the contexts' callback ------------------------------------------------------ */

static void door__cb(void *arg)
{
	struct door_slot *s = arg;
	struct door *d = s->d;
	int rv = nng_aio_result(s->aio);
	struct ig_errbuf eb;
	struct msg *q = NULL;
	nng_msg *nm = NULL;
	int rc = IG_E_OK;

	if (s->st == SLOT_SEND) {
		if (rv)
			nng_msg_free(nng_aio_get_msg(s->aio));
		pthread_mutex_lock(&d->mu);
		if (!d->closing && d->receiving < DOOR_RECEIVERS) {
			s->st = SLOT_RECV;
			d->receiving++;
			nng_ctx_recv(s->ctx, s->aio);
		} else {
			s->st = SLOT_SPARE;
			s->nxt = d->spare;
			d->spare = s;
		}
		pthread_mutex_unlock(&d->mu);
		return;
	}
	if (rv == 0) {
		nm = nng_aio_get_msg(s->aio);
		s->pipe = nng_pipe_id(nng_msg_get_pipe(nm));
		q = malloc(sizeof(*q));
		rc = q ? msg_decode(nng_msg_body(nm), nng_msg_len(nm), q, &eb)
		       : ig_errf(&eb, IG_E_NOMEM, "no memory to decode a request");
		/* a submit goes on to the worker as it came: only its type
		 * changes (fd_submit and submit are one declaration), and the
		 * reply socket's routing header goes */
		if (!rc && q->type == MSG_FD_SUBMIT) {
			rc = msg_retag(nng_msg_body(nm), nng_msg_len(nm), MSG_FD_SUBMIT, MSG_SUBMIT,
			               &eb);
			nng_msg_header_clear(nm);
		}
	}
	pthread_mutex_lock(&d->mu);
	d->receiving--;
	if (rv) {
		s->st = SLOT_SPARE;
		s->nxt = d->spare;
		d->spare = s;
	} else if (d->closing) {
		s->st = SLOT_SPARE;
	} else if (rc) {
		d->n_rejected++;
		svc_reject(&d->rejects, rc, eb.msg);
		door__send_error(d, s, rc, eb.msg);
	} else {
		door__dispatch(d, s, q, &nm);
	}
	door__arm(d);
	pthread_mutex_unlock(&d->mu);
	if (nm)
		nng_msg_free(nm);
	free(q);
	if (rv && rv != NNG_ECLOSED && rv != NNG_ECANCELED)
		clk_sleep_ms(1); /* a failing receive must not spin */
}

static struct door_slot *door__slot(struct door *d)
{
	struct door_slot *s = d->spare;

	if (s) {
		d->spare = s->nxt;
		s->nxt = NULL;
		return s;
	}
	if (d->nslots >= DOOR_SLOTS_MAX)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->d = d;
	if (nng_ctx_open(&s->ctx, d->sock) != 0) {
		free(s);
		return NULL;
	}
	if (nng_aio_alloc(&s->aio, door__cb, s) != 0) {
		nng_ctx_close(s->ctx);
		free(s);
		return NULL;
	}
	d->slots[d->nslots++] = s;
	return s;
}

/* ---- clients that leave ----------------------------------------------------------- */

static void door__slot_back(struct door *d, struct door_slot *s)
{
	s->st = SLOT_SPARE;
	s->nxt = d->spare;
	d->spare = s;
	d->parked--;
}

/* A client's connection closed (it exited, was killed, or its pipe went
 * with a retired listener): what it waits for goes. A submit still queued
 * is dropped, one being admitted is cancelled once admitted, parked polls
 * free their contexts. A client that is still there sends its request
 * again on its new connection (nng's REQ does), so nothing runs twice. */
void door__pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct door *d = arg;
	uint32_t id = nng_pipe_id(p);
	uint64_t dropped = 0;

	(void)ev;
	pthread_mutex_lock(&d->mu);
	for (struct door_req *r = d->head, *nx; r; r = nx) {
		struct door_slot **pp = &r->waiters;

		nx = r->next;
		while (*pp) {
			struct door_slot *s = *pp;

			if (s->pipe == id) {
				*pp = s->nxt;
				door__slot_back(d, s);
			} else {
				pp = &s->nxt;
			}
		}
		if (!r->submitter || r->submitter->pipe != id)
			continue;
		if (r->st == RQ_QUEUED) {
			door__slot_back(d, r->submitter);
			r->submitter = NULL;
			door__free_req(d, r);
			dropped++;
		} else if (r->st == RQ_SUBMITTING) {
			r->withdrawn = true;
			dropped++;
		}
	}
	d->n_withdrawn += dropped;
	if (dropped && ev_limit_take(&d->withdrawn_limit, clk_mono_ms())) {
		struct ev e;

		ev_begin(&e, EV_INFO, "ignis.frontdoor.withdrawn");
		ev_u64(&e, "requests", dropped);
		ev_u64(&e, "total", d->n_withdrawn);
		ev_str(&e, "reason",
		       "the client's connection closed before its submit was answered");
		ev_end(&e);
	}
	pthread_mutex_unlock(&d->mu);
}
