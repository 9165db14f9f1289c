/*
 * frontdoor.c - the client socket of the supervisor (see frontdoor.h).
 *
 * A request's life, and who moves it (all under d->mu):
 *
 *   QUEUED      fd_submit took it (nng callback); its client's context is
 *               parked until the worker admits or refuses it
 *   SUBMITTING  the pump is sending it to the worker
 *   RUNNING     admitted: the pump polls its tokens (poll_many) and appends
 *               them to toks[], and the text the worker sent with them to
 *               text[] (tend[i]: its bytes once token i is added)
 *   DONE        finished at the worker (a stop string included: the worker
 *               checks them), cancelled, or lost with its worker; readable
 *               until forgotten
 *
 * The door decodes nothing: the text is the worker's (docs/adr/0025), and
 * the worker holds back the tokens that could begin a stop string. A
 * request leaves the worker's table by cancels the pump sends (wcancels:
 * two for one still running, stop then forget; one for one finished there).
 * A forgotten request is freed once those are sent. Invariants: n == recv;
 * tend[] ascends and ends at or below tlen (beyond it, once done, the
 * worker's final U+FFFD); a RUNNING request has a worker id and the pid of
 * the worker that admitted it (wpid), and an answer from any other pid ends
 * it.
 */
#define _GNU_SOURCE
#include "frontdoor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "common/clock.h"
#include "common/event.h"
#include "common/model.h"
#include "proto/msg.h"
#include "proto/service.h"
#include "proto/transport.h"
#include "version.h"

enum door_slot_st { SLOT_SPARE, SLOT_RECV, SLOT_SEND, SLOT_PARKED };

/* One nng context and its aio. */
struct door_slot {
	struct door *d;
	nng_ctx ctx;
	nng_aio *aio;
	enum door_slot_st st;
	bool poll;             /* PARKED: a poll (else a submit) */
	uint64_t req;          /* PARKED: the request's door id */
	uint32_t from, max;    /* PARKED poll */
	uint64_t deadline_ms;  /* PARKED poll */
	uint32_t pipe;         /* the connection its request came on */
	struct door_slot *nxt; /* spare list, or the request's waiters */
};

enum door_rq { RQ_QUEUED, RQ_SUBMITTING, RQ_RUNNING, RQ_DONE };

struct door_req {
	uint64_t id;
	enum door_rq st;
	bool forgotten; /* no client can see it; freed once wcancels is 0 */
	/* the submit as it came (an nng client's message, or the one message
	 * an in-process client's was encoded into), re-tagged for the worker
	 * (msg_retag): the request's storage until the worker admits it; each
	 * attempt sends a duplicate, as nng frees what it sends once answered */
	nng_msg *sub;
	struct door_slot *submitter;
	char cls[17];
	bool slot_waited; /* counted in n_slot_waits */
	bool withdrawn;   /* its client left while the worker admitted it */
	/* at the worker */
	uint64_t wid;
	pid_t wpid;
	uint32_t prompt_tokens, max_tokens, reserved_pages;
	uint8_t wcancels;
	/* output: the tokens and the worker's text for them */
	uint32_t *toks, *tend, n, cap, recv;
	uint32_t cached; /* prompt tokens the worker took from a checkpoint */
	char *otext;
	uint32_t tlen, tcap;
	char phase[17], finish[17];
	int code;
	char *message; /* finish "error" */
	uint64_t created_ms, admitted_ms, touched_ms;
	struct door_slot *waiters; /* parked polls */
	struct door_req *prev, *next;
	struct door_req *hnext; /* the id table's chain */
	/* fairness: the peer it came from (an nng client's connection, or an
	 * in-process client's key) */
	uint64_t peer;
	/* in process (door_local_*): held by its caller until released (never
	 * forgotten before), refused there as news rather than by a reply; each
	 * news adds to ver and calls wake, once per arming, or at wake_at_ms */
	bool local, held, refused;
	uint32_t rank;     /* door__board_submits': what its peer holds ahead of it */
	uint64_t served;   /* ... and when its peer was last served (board_seq) */
	uint64_t board_seq; /* when it was sent to the worker (d->board_seq) */
	uint64_t ver;
	void (*wake)(void *arg);
	void *wake_arg;
	uint64_t wake_at_ms;
};

/* The id table: requests by door id, which count up from 1, so that the
 * low bits spread them evenly: chains stay a request or two long at the
 * default load (1,024 worker slots, 4,096 waiting, 1,024 finished kept),
 * a few at the largest --server-max-queued. */
#define DOOR_ID_BUCKETS 8192u

/* A peer's share of the queue and the worker's slots, counted per pass. */
struct door_peer {
	uint64_t key;
	uint32_t queued, held;
	uint64_t served; /* the latest board_seq of its requests the door still has */
	bool used;
};

struct door {
	pthread_mutex_t mu;
	pthread_cond_t pump_cv, clock_cv;
	bool closing;

	nng_socket sock;
	struct lisguard guard;
	bool guard_on;
	char url[TP_PATH_MAX + 16];
	char ipc_path[TP_PATH_MAX];
	char lockpath[TP_PATH_MAX + 8];
	char rtdir[TP_PATH_MAX];
	int lockfd;
	struct door_model model;
	int watchdog_ms;
	uint64_t started_ms;

	struct door_slot **slots;
	uint32_t nslots, receiving, parked;
	struct door_slot *spare;

	struct door_req *head, *tail;
	struct door_req **ids; /* DOOR_ID_BUCKETS chains */
	uint64_t next_id;
	/* scratch of the fairness rules (under mu): a peer table and the
	 * queued submits of a pass */
	struct door_peer *peers;
	uint32_t npeers_cap;
	struct door_req **cand;
	uint64_t board_seq; /* submits sent to the worker, counted */
	uint32_t queued, running, kept;
	uint32_t queue_max; /* submits waiting for a worker slot, at most */
	uint64_t submit_blocked_until;

	pid_t wpid; /* the worker the supervisor sees running; 0 none */
	const char *wstate;
	uint64_t wrestarts;
	nng_socket ws; /* the pump's socket to the worker */
	bool ws_open;
	uint64_t (*poll_ids)[MSG_POLL_MANY_MAX]; /* the pump's: a flight's polled ids */

	uint64_t n_submitted, n_finished, n_failed, n_refused, n_rejected, n_tokens;
	uint64_t n_slot_waits;
	struct svc_rejects rejects; /* messages that did not decode */
	uint64_t n_withdrawn;       /* submits whose client left before an answer */
	uint64_t n_displaced;       /* queued submits refused to make room for another peer's */
	struct ev_limit withdrawn_limit;
	struct msg *out; /* replies are built here, under mu */

	pthread_t pump, clock;
	bool pump_on, clock_on;
};

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

static void door__wait(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms)
{
	struct timespec ts;

	door__deadline(&ts, ms);
	pthread_cond_timedwait(cv, mu, &ts);
}

/* A request by door id: any (`internal`, the pump's view), or one a client
 * may see (admitted and not forgotten). */
static struct door_req *door__find(struct door *d, uint64_t id, bool internal)
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

static void door__set_st(struct door *d, struct door_req *r, enum door_rq st)
{
	door__count(d, r, -1);
	r->st = st;
	door__count(d, r, +1);
}

static void door__free_req(struct door *d, struct door_req *r)
{
	door__count(d, r, -1);
	door__unlink(d, r);
	if (r->sub)
		nng_msg_free(r->sub);
	free(r->toks);
	free(r->tend);
	free(r->otext);
	free(r->message);
	free(r);
}

/* ---- replies --------------------------------------------------------------- */

static int door__append(void *ctx, const char *buf, size_t len)
{
	return nng_msg_append(ctx, buf, len) == 0 ? 0 : -1;
}

static void door__send_msg(struct door *d, struct door_slot *s, const struct msg *m);

static void door__send_error(struct door *d, struct door_slot *s, int code, const char *text)
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
static void door__send_msg(struct door *d, struct door_slot *s, const struct msg *m)
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
static void door__arm(struct door *d)
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

/* ---- request views ----------------------------------------------------------- */

static const char *door__state(const struct door_req *r)
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

/* The worker's text of tokens [0, k): its bytes; with `end` (k is every
 * token of a finished request) the worker's final U+FFFD included. */
static uint32_t door__text_to(const struct door_req *r, uint32_t k, bool end)
{
	return end ? r->tlen : k ? r->tend[k - 1] : 0;
}

/* The fd_tokens answer to a poll of `r` from `from` (checked): the tokens
 * and the text the worker sent for them (fewer tokens when it would pass
 * the reply's limit). */
static void door__fill_tokens(struct door_req *r, uint32_t from, uint32_t max,
                              struct msg_fd_tokens *t)
{
	uint32_t n = r->n - from, start = door__text_to(r, from, false), end;

	if (n > max)
		n = max;
	for (;;) {
		end = door__text_to(r, from + n, r->st == RQ_DONE && from + n == r->n);
		if (end - start <= MSG_TEXT_MAX || !n)
			break;
		n--;
	}
	t->id = r->id;
	t->from = from;
	t->tokens.n = n;
	if (n)
		memcpy(t->tokens.v, r->toks + from, (size_t)n * sizeof(uint32_t));
	t->text = (struct msg_str){r->otext ? r->otext + start : "", end - start};
	t->state = msg_str_of(door__state(r));
	t->done = r->st == RQ_DONE;
	t->finish = msg_str_of(r->st == RQ_DONE ? r->finish : "");
	t->generated = r->n;
	t->cached = r->cached;
	t->code = r->st == RQ_DONE ? (uint64_t)r->code : 0;
	t->message = msg_str_of(r->st == RQ_DONE && r->message ? r->message : "");
}

static void door__reply_tokens(struct door *d, struct door_slot *s, struct door_req *r)
{
	struct msg *m = d->out;

	m->type = MSG_FD_TOKENS;
	door__fill_tokens(r, s->from, s->max, &m->u.fd_tokens);
	door__send_msg(d, s, m);
}

/* Something about `r` changed: its in-process reader is told. */
static void door__news(struct door_req *r)
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
static void door__wake(struct door *d, struct door_req *r, bool all)
{
	struct door_slot **pp = &r->waiters;

	door__news(r);
	while (*pp) {
		struct door_slot *s = *pp;

		if (all || r->st == RQ_DONE || r->n > s->from) {
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
static void door__finish(struct door *d, struct door_req *r, const char *finish, int code,
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
static void door__forget(struct door *d, struct door_req *r)
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
static void door__lose_worker(struct door *d, pid_t pid, const char *why)
{
	uint32_t lost = 0;

	for (struct door_req *r = d->head; r; r = r->next) {
		char text[256];

		if (r->st != RQ_RUNNING || r->wpid != pid)
			continue;
		snprintf(text, sizeof(text),
		         "the gpu-worker (pid %ld) %s while request %" PRIu64
		         " ran; it is lost after %u tokens: submit it again",
		         (long)pid, why, r->id, r->n);
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
	q->generated = r->n;
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

/* ---- fairness between peers ------------------------------------------------- */

/* An empty peer table for up to `n` peers (false: no memory). */
static bool door__peers_reset(struct door *d, uint32_t n)
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
static struct door_peer *door__peer(struct door *d, uint64_t key)
{
	uint32_t mask = d->npeers_cap - 1, i = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & mask;

	while (d->peers[i].used && d->peers[i].key != key)
		i = (i + 1) & mask;
	d->peers[i].used = true;
	d->peers[i].key = key;
	return &d->peers[i];
}

/* The requests in the door, for the size of a peer table. */
static uint32_t door__nreqs(const struct door *d)
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
static void door__refuse(struct door *d, struct door_req *r, int code, const char *message)
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
static struct door_req *door__take(struct door *d, const struct msg_fd_submit *q, nng_msg *nm,
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
		snprintf(text, cap,
		         q->text.n ? "fd_submit: give the prompt as `text` or as `prompt` token ids, "
		                     "not both (text %u bytes, prompt %u ids)"
		                   : "fd_submit: the prompt is empty: give it as `text` (1 to %u bytes) "
		                     "or as `prompt` token ids (1 to %u)",
		         q->text.n ? q->text.n : MSG_TEXT_MAX, q->text.n ? q->prompt.n : MSG_IDS_MAX);
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
			snprintf(text, cap,
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
	if (q->from > r->n) {
		snprintf(text, sizeof(text),
		         "fd_poll.from: %" PRIu64 " is past the %u tokens request %" PRIu64
		         " has generated; accepted: 0..%u",
		         q->from, r->n, r->id, r->n);
		{
			door__send_error(d, s, IG_E_INVAL, text);
			return;
		}
	}
	r->touched_ms = clk_mono_ms();
	s->from = (uint32_t)q->from;
	s->max = (uint32_t)q->max;
	if (r->st == RQ_DONE || r->n > q->from || !q->wait_ms ||
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
		e->generated = r->n;
		e->finish = msg_str_of(r->st == RQ_DONE ? r->finish : "");
		e->age_ms = now - r->created_ms;
		q->requests.n++;
	}
	door__send_msg(d, s, m);
}

/* A decoded request `q` (from *nm, which a queued submit takes): answer it,
 * or park the slot. Under mu. */
static void door__dispatch(struct door *d, struct door_slot *s, const struct msg *q,
                           nng_msg **nm)
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

/* Room for `more` tokens and `bytes` of text in `r`; false when there is
 * no memory. */
static bool door__grow(struct door_req *r, uint32_t more, uint32_t bytes)
{
	if (r->n + more > r->cap) {
		uint32_t cap = r->cap ? r->cap : 64;
		uint32_t *p, *e;

		while (cap < r->n + more)
			cap *= 2;
		p = realloc(r->toks, (size_t)cap * sizeof(uint32_t));
		if (p)
			r->toks = p;
		e = p ? realloc(r->tend, (size_t)cap * sizeof(uint32_t)) : NULL;
		if (!e)
			return false;
		r->tend = e;
		r->cap = cap;
	}
	if (bytes && r->tlen + bytes > r->tcap) {
		uint32_t cap = r->tcap ? r->tcap : 256;
		char *t;

		while (cap < r->tlen + bytes)
			cap *= 2;
		t = realloc(r->otext, cap);
		if (!t)
			return false;
		r->otext = t;
		r->tcap = cap;
	}
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

/* Apply one entry of a tokens_many answer from worker `pid`. */
static bool door__apply_ent(struct door *d, struct door_req *r, const struct msg_tokens_ent *t,
                            pid_t pid)
{
	if (r->st != RQ_RUNNING || r->wid != t->id || t->from != r->recv)
		return false; /* ended meanwhile, or an answer to an older question */
	if (r->wpid != pid) {
		door__lose_worker(d, r->wpid, "restarted");
		return true;
	}
	if (t->code) {
		char text[256];

		snprintf(text, sizeof(text),
		         "the gpu-worker no longer knows request %" PRIu64 " (its id %" PRIu64
		         " there: %s); it is lost after %u tokens",
		         r->id, r->wid, ig_err_str((int)t->code), r->n);
		r->wcancels = 0;
		door__finish(d, r, "error", IG_E_CHILD, text);
		return true;
	}
	if (!door__text_ok(t)) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_PROTO_UNEXPECTED,
		             "the gpu-worker sent text that does not match its tokens");
		return true;
	}
	if (!door__grow(r, t->tokens.n, t->text.n)) {
		r->wcancels = 2;
		door__finish(d, r, "error", IG_E_NOMEM,
		             "the front door ran out of memory for this request's tokens");
		return true;
	}
	/* the text is the worker's, from the end of what came before */
	for (uint32_t i = 0; i < t->tokens.n; i++) {
		r->toks[r->n] = t->tokens.v[i];
		r->tend[r->n++] = r->tlen + t->text_ends.v[i];
	}
	if (t->text.n)
		memcpy(r->otext + r->tlen, t->text.p, t->text.n);
	r->tlen += t->text.n;
	r->recv += t->tokens.n;
	r->cached = (uint32_t)t->cached;
	d->n_tokens += t->tokens.n;
	if (!msg_str_eq(t->state, r->phase)) {
		msg_str_copy(r->phase, sizeof(r->phase), t->state);
		if (!t->tokens.n)
			door__news(r); /* a move between tiers: its stream says so */
	}
	if (t->done && r->recv == t->generated) {
		char fin[17];

		msg_str_copy(fin, sizeof(fin), t->finish);
		r->wcancels = 1; /* forget it there */
		door__finish(d, r, fin, 0, NULL);
		d->submit_blocked_until = 0; /* a worker slot is free again */
		return true;
	}
	if (t->tokens.n)
		door__wake(d, r, false);
	return t->tokens.n > 0;
}

/* One message in flight to the worker, on a request context of its own:
 * the pump sends a pass's polls, cancels and submits together as one
 * flight, which the worker answers between two of its rounds (it serves
 * every waiting request there: proto/service.h), so that a pass costs a
 * round, not a round per message. The worker may answer a flight's
 * messages in any order: they never concern the same request. */
enum door_fl { DOOR_FL_POLL, DOOR_FL_CANCEL, DOOR_FL_SUBMIT };

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
			if (r->id <= cursor || r->st != RQ_RUNNING || r->wpid != pid)
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
	uint32_t n = 0, nc = 0, room, max = d->model.max_requests ? (uint32_t)d->model.max_requests : 1;
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
static bool door__land(struct door *d, pid_t pid, struct door_flight *f, uint32_t nf,
                       int *wfail)
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
			for (uint32_t i = 0; !rc && i < rx->m.u.tokens_many.reqs.n && i < e->npoll; i++) {
				r = door__find(d, d->poll_ids[e->id][i], true);
				if (r && door__apply_ent(d, r, &rx->m.u.tokens_many.reqs.v[i],
				                         (pid_t)rx->m.u.tokens_many.pid))
					moved = true;
			}
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
static bool door__pass(struct door *d, pid_t pid, struct msg *q, struct door_flight *f,
                       int *wfail)
{
	uint32_t nf = 0;
	bool moved = false;

	door__board_polls(d, pid, q, f, &nf);
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

static void *door__pump(void *arg)
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

/* ---- the clock: waits that ran out, requests nobody reads ------------------------ */

static void *door__clock(void *arg)
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
static void door__pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
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

/* ---- open, close, the supervisor's hook -------------------------------------------- */

void door_model_of(const struct msg_plan *pl, const struct mdesc *md, struct door_model *m)
{
	memset(m, 0, sizeof(*m));
	msg_str_copy(m->name, sizeof(m->name), pl->model);
	msg_str_copy(m->backend, sizeof(m->backend), pl->backend);
	msg_str_copy(m->kv_format, sizeof(m->kv_format), pl->kv_format);
	m->vocab = md->vocab;
	m->context_tokens = pl->context_tokens;
	m->page_tokens = MDESC_PAGE_TOKENS;
	m->pool_pages = pl->pool_pages;
	m->lanes = pl->lanes;
	m->chunk_tokens = pl->chunk_tokens;
	m->default_max_tokens = pl->default_max_tokens;
	m->max_requests = pl->max_requests;
	m->tokenizer = md->tokenizer;
	m->eos = mdesc_eos(md);
	m->serving = pl->model_path.n > 0;
}

void door_counts(struct door *d, uint64_t *rejected, uint64_t *queued, uint64_t *displaced)
{
	pthread_mutex_lock(&d->mu);
	*rejected = d->n_rejected;
	*queued = d->queued;
	*displaced = d->n_displaced;
	pthread_mutex_unlock(&d->mu);
}

void door_set_worker(struct door *d, pid_t pid, const char *state)
{
	pthread_mutex_lock(&d->mu);
	d->wstate = state;
	if (pid != d->wpid) {
		pid_t old = d->wpid;

		d->wpid = pid;
		if (old) {
			d->wrestarts++;
			door__lose_worker(d, old, pid ? "was replaced" : "stopped");
		}
		pthread_cond_signal(&d->pump_cv);
	}
	pthread_mutex_unlock(&d->mu);
}

static int door__paths(struct door *d, const struct door_opts *o, struct ig_errbuf *eb)
{
	const char *bind = o->bind && *o->bind ? o->bind : NULL;
	int n;

	if (snprintf(d->rtdir, sizeof(d->rtdir), "%s", o->rtdir) >= (int)sizeof(d->rtdir))
		return ig_errf(eb, IG_E_CONFIG, "runtime directory '%s' is too long", o->rtdir);
	if (!bind) {
		n = snprintf(d->ipc_path, sizeof(d->ipc_path), "%s/client.sock", o->rtdir);
		if (n >= (int)sizeof(d->ipc_path))
			return ig_errf(eb, IG_E_CONFIG, "socket path under '%s' is too long",
			               o->rtdir);
		snprintf(d->url, sizeof(d->url), "ipc://%s", d->ipc_path);
		snprintf(d->lockpath, sizeof(d->lockpath), "%s/client.lock", o->rtdir);
		return IG_E_OK;
	}
	if (!strncmp(bind, "ipc://", 6)) {
		size_t len = strlen(bind + 6);

		/* sun_path holds 108 bytes, the NUL included */
		if (len >= 108 || len >= sizeof(d->ipc_path))
			return ig_errf(eb, IG_E_CONFIG,
			               "--server-bind '%s': the path is %zu bytes; a socket "
			               "path holds at most 107",
			               bind, len);
		snprintf(d->ipc_path, sizeof(d->ipc_path), "%s", bind + 6);
		snprintf(d->url, sizeof(d->url), "%s", bind);
		if (len > 5 && !strcmp(d->ipc_path + len - 5, ".sock"))
			snprintf(d->lockpath, sizeof(d->lockpath), "%.*s.lock", (int)(len - 5),
			         d->ipc_path);
		else
			snprintf(d->lockpath, sizeof(d->lockpath), "%s.lock", d->ipc_path);
		return IG_E_OK;
	}
	if (snprintf(d->url, sizeof(d->url), "%s", bind) >= (int)sizeof(d->url))
		return ig_errf(eb, IG_E_CONFIG, "--server-bind '%s' is too long", bind);
	snprintf(d->lockpath, sizeof(d->lockpath), "%s/client.lock", o->rtdir);
	return IG_E_OK;
}

static bool door__loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >>
		        24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a =
		    &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;

		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		if (IN6_IS_ADDR_V4MAPPED(a))
			return a->s6_addr[12] == 127;
	}
	return false;
}

bool door_hostport_is_loopback(const char *rest)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	const char *colon;
	char host[256];
	bool loopback = true;
	size_t len;

	colon = strrchr(rest, ':');
	len = colon ? (size_t)(colon - rest) : strlen(rest);
	if (len >= 2 && rest[0] == '[' && rest[len - 1] == ']') {
		rest++;
		len -= 2;
	}
	if (len >= sizeof(host))
		len = sizeof(host) - 1;
	memcpy(host, rest, len);
	host[len] = '\0';
	if (!host[0] || !strcmp(host, "*")) {
		loopback = false;
	} else if (getaddrinfo(host, NULL, &hints, &ai) == 0) {
		for (struct addrinfo *p = ai; p && loopback; p = p->ai_next)
			loopback = door__loopback(p->ai_addr);
		freeaddrinfo(ai);
	} else {
		loopback = false; /* unknown: not known to be loopback */
	}
	return loopback;
}

int door_check_bind(const char *bind, bool allow_remote, struct ig_errbuf *eb)
{
	const char *rest;

	if (!bind || !*bind || allow_remote || strncmp(bind, "tcp", 3))
		return IG_E_OK;
	rest = strstr(bind, "://");
	if (!rest)
		return IG_E_OK; /* the address's own check refuses it */
	if (door_hostport_is_loopback(rest + 3))
		return IG_E_OK;
	return ig_errf(eb, IG_E_CONFIG,
	               "--server-bind '%s' is not a loopback address, and the front door has "
	               "no access control (anyone who reaches it can submit and cancel "
	               "requests): bind tcp://127.0.0.1:PORT or an ipc:// path, or give "
	               "--server-allow-remote (IGNIS_SERVER_ALLOW_REMOTE, server_allow_remote) "
	               "to serve it there anyway",
	               bind);
}

int door_open(struct door **out, const struct door_opts *o, struct ig_errbuf *eb)
{
	pthread_condattr_t ca;
	struct door *d;
	struct ev e;
	int rc, rv;

	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the front door");
	d->lockfd = -1;
	d->model = o->model;
	d->watchdog_ms = o->watchdog_ms > 0 ? o->watchdog_ms : DOOR_WATCHDOG_MS;
	d->wstate = "starting";
	d->next_id = 1;
	d->started_ms = clk_mono_ms();
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->pump_cv, &ca);
	pthread_cond_init(&d->clock_cv, &ca);
	pthread_condattr_destroy(&ca);
	d->out = malloc(sizeof(*d->out));
	d->slots = calloc(DOOR_SLOTS_MAX, sizeof(*d->slots));
	d->poll_ids = calloc(DOOR_POLL_FLIGHTS, sizeof(*d->poll_ids));
	d->ids = calloc(DOOR_ID_BUCKETS, sizeof(*d->ids));
	d->queue_max = o->queue_max ? o->queue_max : 4096;
	if (d->queue_max > DOOR_QUEUE_MAX)
		d->queue_max = DOOR_QUEUE_MAX;
	d->cand = calloc(d->queue_max, sizeof(*d->cand));
	if (!d->out || !d->slots || !d->poll_ids || !d->ids || !d->cand) {
		rc = ig_errf(eb, IG_E_NOMEM, "no memory for the front door");
		goto out_free;
	}
	rc = door__paths(d, o, eb);
	if (rc)
		goto out_free;
	d->rejects.socket = d->url;
	rc = tp_lock_take(d->lockpath, &d->lockfd, eb);
	if (rc)
		goto out_free;
	rv = nng_rep0_open(&d->sock);
	if (!rv)
		rv = nng_socket_set_size(d->sock, NNG_OPT_RECVMAXSZ, MSG_MAX_BYTES);
	if (rv) {
		rc = tp_nng_err(eb, rv, "cannot open the front door's reply socket");
		goto out_unlock;
	}
	nng_pipe_notify(d->sock, NNG_PIPE_EV_REM_POST, door__pipe_gone, d);
	rc = lg_open(&d->guard, d->sock, d->url, &(struct lg_opts){.ping_ms = d->watchdog_ms}, eb);
	if (rc)
		goto out_close_sock;
	d->guard_on = true;
	pthread_mutex_lock(&d->mu);
	door__arm(d);
	pthread_mutex_unlock(&d->mu);
	if (pthread_create(&d->pump, NULL, door__pump, d) == 0)
		d->pump_on = true;
	if (pthread_create(&d->clock, NULL, door__clock, d) == 0)
		d->clock_on = true;
	if (!d->pump_on || !d->clock_on) {
		door_close(d);
		return ig_errf(eb, IG_E_NOMEM, "cannot start the front door's threads");
	}
	ev_begin(&e, EV_INFO, "ignis.frontdoor.listening");
	ev_str(&e, "url", d->url);
	ev_str(&e, "model", d->model.name);
	ev_bool(&e, "serving", d->model.serving);
	ev_end(&e);
	*out = d;
	return IG_E_OK;

out_close_sock:
	nng_close(d->sock);
out_unlock:
	unlink(d->lockpath);
	close(d->lockfd);
out_free:
	free(d->out);
	free(d->poll_ids);
	free(d->ids);
	free(d->cand);
	free(d->slots);
	free(d);
	return rc;
}

void door_close(struct door *d)
{
	nng_socket ws;
	bool ws_open;

	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->closing = true;
	pthread_cond_broadcast(&d->pump_cv);
	pthread_cond_broadcast(&d->clock_cv);
	ws = d->ws;
	ws_open = d->ws_open;
	d->ws_open = false;
	pthread_mutex_unlock(&d->mu);
	/* a call in flight returns at once. Never under d->mu: nng_close waits
	 * for nng's reaper, which may be running a pipe callback of the door's
	 * socket (door__pipe_gone) that waits for d->mu */
	if (ws_open)
		nng_close(ws);
	if (d->guard_on)
		lg_close(&d->guard);
	d->guard_on = false;
	if (d->clock_on)
		pthread_join(d->clock, NULL);
	if (d->pump_on)
		pthread_join(d->pump, NULL);
	nng_close(d->sock); /* every context's operation ends */
	for (uint32_t i = 0; i < d->nslots; i++) {
		nng_aio_free(d->slots[i]->aio); /* waits for its callback */
		free(d->slots[i]);
	}
	while (d->head)
		door__free_req(d, d->head);
	if (d->ipc_path[0])
		unlink(d->ipc_path);
	unlink(d->lockpath);
	close(d->lockfd);
	pthread_cond_destroy(&d->pump_cv);
	pthread_cond_destroy(&d->clock_cv);
	pthread_mutex_destroy(&d->mu);
	free(d->out);
	free(d->poll_ids);
	free(d->ids);
	free(d->cand);
	free(d->peers);
	free(d->slots);
	free(d);
}

/* ---- in-process clients -------------------------------------------------------------- */

/* The bytes `q` encodes to, or a little more: its text, stop strings and
 * ids at their widest (5 bytes an id), and 256 for keys and the rest. */
static size_t door__submit_bytes(const struct msg_fd_submit *q)
{
	size_t n = 256 + (size_t)q->text.n + 5 * ((size_t)q->prompt.n + q->plain.n);

	for (uint32_t i = 0; i < q->stop.n; i++)
		n += 16 + q->stop.v[i].text.n;
	return n;
}

int door_local_submit(struct door *d, const struct msg *q, uint64_t peer, struct door_req **out,
                      struct ig_errbuf *eb)
{
	struct door_req *r;
	nng_msg *nm = NULL;
	char text[512];
	int code, rc, rv;

	*out = NULL;
	if (q->type != MSG_FD_SUBMIT)
		return ig_errf(eb, IG_E_INVAL, "door_local_submit takes fd_submit, not '%s'",
		               msg_type_name(q->type));
	/* encoded once, into room enough for it (no growing copies), and
	 * checked there as msg_decode would check it; from here on the
	 * request holds this message, as it holds an nng client's */
	rv = nng_msg_alloc(&nm, 0);
	if (!rv)
		rv = nng_msg_reserve(nm, door__submit_bytes(&q->u.fd_submit));
	if (rv) {
		if (nm)
			nng_msg_free(nm);
		return tp_nng_err(eb, rv, "cannot allocate a submit's message");
	}
	rc = msg_encode(q, door__append, nm, eb);
	if (!rc)
		rc = msg_retag(nng_msg_body(nm), nng_msg_len(nm), MSG_FD_SUBMIT, MSG_SUBMIT, eb);
	if (rc) {
		nng_msg_free(nm);
		return rc;
	}
	pthread_mutex_lock(&d->mu);
	r = d->closing ? NULL
	               : door__take(d, &q->u.fd_submit, nm, peer, &code, text, sizeof(text));
	if (r)
		r->local = r->held = true;
	else if (d->closing)
		code = IG_E_BUSY, snprintf(text, sizeof(text), "the front door is closing");
	pthread_mutex_unlock(&d->mu);
	if (!r) {
		nng_msg_free(nm);
		return ig_errf(eb, code, "%s", text);
	}
	*out = r;
	return IG_E_OK;
}

int door_local_read(struct door *d, struct door_req *r, uint64_t *version, uint32_t *from,
                    struct door_news *nw, char **text, size_t *text_len)
{
	uint32_t start, end;

	pthread_mutex_lock(&d->mu);
	r->touched_ms = clk_mono_ms();
	if (r->ver == *version) {
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	start = door__text_to(r, *from, false);
	end = door__text_to(r, r->n, r->st == RQ_DONE);
	if (end > start || !*text) {
		char *t = realloc(*text, *text_len + (end - start) + 1);

		if (!t) {
			pthread_mutex_unlock(&d->mu);
			return -1;
		}
		if (end > start)
			memcpy(t + *text_len, r->otext + start, end - start);
		*text_len += end - start;
		t[*text_len] = '\0';
		*text = t;
	}
	memset(nw, 0, sizeof(*nw));
	nw->id = r->id;
	nw->version = r->ver;
	nw->refused = r->refused;
	nw->done = r->st == RQ_DONE;
	nw->admitted = r->st == RQ_RUNNING || (nw->done && !r->refused);
	nw->prompt_tokens = r->prompt_tokens;
	nw->max_tokens = r->max_tokens;
	nw->generated = r->n;
	nw->cached = r->cached;
	snprintf(nw->state, sizeof(nw->state), "%s", door__state(r));
	if (nw->done) {
		snprintf(nw->finish, sizeof(nw->finish), "%s", r->finish);
		nw->code = r->code;
		snprintf(nw->message, sizeof(nw->message), "%s", r->message ? r->message : "");
	}
	*from = r->n;
	*version = r->ver;
	pthread_mutex_unlock(&d->mu);
	return 1;
}

bool door_local_wait(struct door *d, struct door_req *r, uint64_t version, uint32_t wait_ms,
                     void (*wake)(void *arg), void *arg)
{
	bool armed;

	pthread_mutex_lock(&d->mu);
	armed = r->ver == version;
	r->wake = armed ? wake : NULL;
	r->wake_arg = arg;
	r->wake_at_ms = clk_mono_ms() + wait_ms;
	if (armed)
		pthread_cond_signal(&d->clock_cv); /* its wait may end before the clock's */
	pthread_mutex_unlock(&d->mu);
	return armed;
}

void door_local_release(struct door *d, struct door_req *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&d->mu);
	r->wake = NULL;
	r->held = false;
	switch (r->st) {
	case RQ_QUEUED:
		d->n_withdrawn++;
		door__free_req(d, r);
		break;
	case RQ_SUBMITTING: /* cancelled once the worker answers */
		d->n_withdrawn++;
		r->withdrawn = true;
		break;
	case RQ_RUNNING:
		r->wcancels = 2; /* stop, then forget */
		door__finish(d, r, "cancelled", 0, NULL);
		door__forget(d, r);
		pthread_cond_signal(&d->pump_cv);
		break;
	case RQ_DONE:
		door__forget(d, r);
		break;
	}
	pthread_mutex_unlock(&d->mu);
}
