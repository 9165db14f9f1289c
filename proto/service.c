/* service.c - the reply side of a control socket (see service.h). */
#include "service.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/event.h"
#include "version.h"

/*
 * Pings are answered here, on nng's thread, not by the loop: a loop busy in
 * a long step (a round of a large model on the cpu backend takes seconds)
 * is alive, and a ping that waited for it would have the process killed.
 * The pong says how long ago the loop last served (loop_ms), so that a
 * supervisor still tells a loop that is stuck from one that is busy.
 */
static void svc__pong_sent(void *arg)
{
	struct svc_ctx *c = arg;
	int rv = nng_aio_result(c->pong);

	if (rv)
		nng_msg_free(nng_aio_get_msg(c->pong));
	if (rv != NNG_ECLOSED && rv != NNG_ECANCELED)
		nng_ctx_recv(c->ctx, c->aio);
}

/* True when the request on `c` was a ping, now answered. */
static bool svc__pong_here(struct svc_ctx *c)
{
	struct svc *s = c->s;
	nng_msg *nm = nng_aio_get_msg(c->aio), *copy, *out;
	struct msg pong = {.type = MSG_PONG};
	struct ig_errbuf eb;
	struct tp_rx rx;
	uint64_t now = clk_mono_ms(), last;

	const uint8_t *b = nm ? nng_msg_body(nm) : NULL;

	/* a ping is a few bytes, and our encoders write its `t` first (a map,
	 * "t", 2): only such a message is decoded here, every other goes to
	 * the loop undecoded (a ping written otherwise is still answered,
	 * there) */
	if (!nm || nng_msg_len(nm) > 48 || nng_msg_len(nm) < 4 || (b[0] & 0xF0) != 0x80 ||
	    b[1] != 0xA1 || b[2] != 't' || b[3] != MSG_PING || nng_msg_dup(&copy, nm))
		return false;
	if (tp_decode(copy, &rx, &eb)) /* the loop answers it with the error */
		return false;
	if (rx.m.type != MSG_PING) {
		tp_rx_release(&rx);
		return false;
	}
	last = atomic_load(&s->last_poll_ms);
	pong.u.pong.seq = rx.m.u.ping.seq;
	pong.u.pong.uptime_ms = now - s->started_ms;
	pong.u.pong.loop_ms = now > last ? now - last : 0;
	tp_rx_release(&rx);
	if (tp_encode(&pong, &out, &eb))
		return false;
	nng_msg_free(nm);
	nng_aio_set_msg(c->aio, NULL);
	nng_aio_set_msg(c->pong, out);
	nng_ctx_send(c->ctx, c->pong);
	return true;
}

static void svc__recv_done(void *arg)
{
	struct svc_ctx *c = arg;
	struct svc *s = c->s;

	if (nng_aio_result(c->aio) == 0 && svc__pong_here(c))
		return;
	pthread_mutex_lock(&s->mu);
	c->next = NULL;
	*s->ready_tail = c;
	s->ready_tail = &c->next;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void svc__free_ctxs(struct svc *s)
{
	if (!s->ctxs)
		return;
	/* stopping an aio waits for its callback: none runs after this */
	for (unsigned i = 0; i < SVC_CTXS; i++) {
		if (s->ctxs[i].aio)
			nng_aio_stop(s->ctxs[i].aio);
		if (s->ctxs[i].pong)
			nng_aio_stop(s->ctxs[i].pong);
	}
	if (s->send_aio)
		nng_aio_stop(s->send_aio);
	for (unsigned i = 0; i < SVC_CTXS; i++) {
		struct svc_ctx *c = &s->ctxs[i];

		if (c->open)
			nng_ctx_close(c->ctx);
		if (c->aio) {
			/* a request received and never answered */
			if (nng_aio_result(c->aio) == 0 && nng_aio_get_msg(c->aio))
				nng_msg_free(nng_aio_get_msg(c->aio));
			nng_aio_free(c->aio);
		}
		if (c->pong)
			nng_aio_free(c->pong);
	}
	if (s->send_aio)
		nng_aio_free(s->send_aio);
	free(s->ctxs);
	s->ctxs = NULL;
	s->send_aio = NULL;
	s->ready = NULL;
	s->ready_tail = &s->ready;
	if (s->sync_ready) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
		s->sync_ready = false;
	}
}

int svc_open(struct svc *s, const char *role, const char *rtdir, const char *name, int watchdog_ms,
             struct ig_errbuf *eb)
{
	struct lg_opts o = {.ping_ms = watchdog_ms};
	int rc, rv;

	memset(s, 0, sizeof(*s));
	s->role = role;
	s->started_ms = clk_mono_ms();
	atomic_init(&s->polls, 0);
	atomic_init(&s->last_poll_ms, s->started_ms);
	o.progress = &s->polls;
	rc = tp_listen_guarded(&s->lis, rtdir, name, &o, eb);
	s->rejects.socket = s->lis.path;
	if (rc)
		return rc;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->sync_ready = true;
	s->ready = NULL;
	s->ready_tail = &s->ready;
	s->ctxs = calloc(SVC_CTXS, sizeof(*s->ctxs));
	if (!s->ctxs) {
		rc = ig_errf(eb, IG_E_NOMEM, "cannot allocate %s's reply contexts", role);
		goto fail;
	}
	rv = nng_aio_alloc(&s->send_aio, NULL, NULL);
	for (unsigned i = 0; i < SVC_CTXS && !rv; i++) {
		struct svc_ctx *c = &s->ctxs[i];

		c->s = s;
		rv = nng_aio_alloc(&c->aio, svc__recv_done, c);
		if (!rv)
			rv = nng_aio_alloc(&c->pong, svc__pong_sent, c);
		if (!rv)
			rv = nng_ctx_open(&c->ctx, s->lis.sock);
		c->open = rv == 0;
	}
	if (rv) {
		rc = tp_nng_err(eb, rv, "cannot open the reply contexts");
		goto fail;
	}
	for (unsigned i = 0; i < SVC_CTXS; i++)
		nng_ctx_recv(s->ctxs[i].ctx, s->ctxs[i].aio);
	return IG_E_OK;

fail:
	svc__free_ctxs(s);
	tp_listener_close(&s->lis);
	return rc;
}

void svc_reject(struct svc_rejects *r, int code, const char *message)
{
	unsigned k = code > 0 && code < SVC_REJECT_KINDS ? (unsigned)code : 0;
	uint64_t now = clk_mono_ms();
	struct ev e;

	r->total++;
	if (!ev_limit_take(&r->kind[k], now)) {
		r->held = true;
		return;
	}
	ev_begin(&e, EV_WARN, "ignis.proto.rejected");
	ev_str(&e, "socket", r->socket ? r->socket : "");
	ev_str(&e, "code", ig_err_name(code));
	ev_str(&e, "message", message);
	ev_end(&e);
}

void svc_reject_flush(struct svc_rejects *r)
{
	uint64_t now;
	bool held = false;

	if (!r->held)
		return;
	now = clk_mono_ms();
	for (unsigned k = 0; k < SVC_REJECT_KINDS; k++) {
		uint64_t n = ev_limit_due(&r->kind[k], now);
		struct ev e;

		if (n) {
			ev_begin(&e, EV_WARN, "ignis.proto.rejected_summary");
			ev_str(&e, "socket", r->socket ? r->socket : "");
			ev_str(&e, "code", k ? ig_err_name((int)k) : "other");
			ev_u64(&e, "count", n);
			ev_u64(&e, "period_ms", EV_LIMIT_PERIOD_MS);
			ev_u64(&e, "total", r->total);
			ev_end(&e);
		}
		held |= r->kind[k].held > 0;
	}
	r->held = held;
}

uint64_t svc_uptime_ms(const struct svc *s)
{
	return clk_mono_ms() - s->started_ms;
}

static int svc__builtin(struct svc *s, const struct msg *req, struct msg *reply,
                        struct ig_errbuf *eb)
{
	switch (req->type) {
	case MSG_HELLO:
		reply->type = MSG_HELLO;
		reply->u.hello.role = msg_str_of(s->role);
		reply->u.hello.pid = (uint64_t)getpid();
		reply->u.hello.build = msg_str_of(IGNIS_VERSION);
		return IG_E_OK;
	case MSG_PING:
		reply->type = MSG_PONG;
		reply->u.pong.seq = req->u.ping.seq;
		reply->u.pong.uptime_ms = svc_uptime_ms(s);
		return IG_E_OK;
	case MSG_SHUTDOWN:
		s->stop_requested = true;
		msg_str_copy(s->stop_reason, sizeof(s->stop_reason), req->u.shutdown.reason);
		reply->type = MSG_ACK;
		reply->u.ack.of = MSG_SHUTDOWN;
		return IG_E_OK;
	default:
		return ig_errf(eb, IG_E_PROTO_UNEXPECTED, "%s does not take '%s' messages", s->role,
		               msg_type_name(req->type));
	}
}

/* Send `m` as the answer to the request received on `c`. */
static int svc__send(struct svc *s, struct svc_ctx *c, const struct msg *m, struct ig_errbuf *eb)
{
	nng_msg *nm;
	int rc = tp_encode(m, &nm, eb), rv;

	if (rc)
		return rc;
	nng_aio_set_msg(s->send_aio, nm);
	/* a client that stopped reading must not stall the loop */
	nng_aio_set_timeout(s->send_aio, 1000);
	nng_ctx_send(c->ctx, s->send_aio);
	nng_aio_wait(s->send_aio);
	rv = nng_aio_result(s->send_aio);
	if (rv) {
		nng_msg_free(nng_aio_get_msg(s->send_aio));
		return tp_nng_err(eb, rv, "send");
	}
	return IG_E_OK;
}

static void svc__reply_error(struct svc *s, struct svc_ctx *c, const struct ig_errbuf *eb)
{
	struct msg err = {.type = MSG_ERROR};
	struct ig_errbuf eb2;
	char text[1024];

	snprintf(text, sizeof(text), "%s", eb->msg);
	if (!msg_utf8_valid(text, strlen(text)))
		snprintf(text, sizeof(text), "%s", ig_err_str(eb->code));
	err.u.error.code = (uint64_t)eb->code;
	err.u.error.message = msg_str_of(text);
	if (svc__send(s, c, &err, &eb2) != IG_E_OK)
		ev_msg(EV_WARN, "ignis.proto.reply_failed", "%s", eb2.msg);
}

/* Answer the request that came on `c` and listen on it again. IG_E_CLOSED
 * when the socket is gone (the context is not listened on again). */
static int svc__serve(struct svc *s, struct svc_ctx *c, svc_handler_fn h, void *ctx)
{
	struct ig_errbuf eb;
	struct msg reply;
	struct tp_rx rx;
	int rv = nng_aio_result(c->aio), rc;

	if (rv == NNG_ECLOSED)
		return IG_E_CLOSED;
	if (rv) {
		/* a receive that failed (no memory, a cancel) leaves nothing to answer */
		nng_ctx_recv(c->ctx, c->aio);
		return rv == NNG_ENOMEM ? IG_E_NOMEM : IG_E_OK;
	}
	rc = tp_decode(nng_aio_get_msg(c->aio), &rx, &eb);
	nng_aio_set_msg(c->aio, NULL);
	if (rc) {
		svc_reject(&s->rejects, rc, eb.msg);
		svc__reply_error(s, c, &eb);
		nng_ctx_recv(c->ctx, c->aio);
		return IG_E_OK;
	}
	memset(&reply, 0, sizeof(reply));
	ig_errclear(&eb);
	if (rx.m.type == MSG_HELLO || rx.m.type == MSG_PING || rx.m.type == MSG_SHUTDOWN || !h)
		rc = svc__builtin(s, &rx.m, &reply, &eb);
	else
		rc = h(ctx, &rx.m, &reply, &eb);
	if (rc == IG_E_OK)
		rc = svc__send(s, c, &reply, &eb);
	if (rc != IG_E_OK) {
		if (!eb.msg[0])
			snprintf(eb.msg, sizeof(eb.msg), "%s", ig_err_str(rc));
		eb.code = rc;
		svc__reply_error(s, c, &eb);
	}
	tp_rx_release(&rx);
	nng_ctx_recv(c->ctx, c->aio);
	return IG_E_OK;
}

/* The requests received so far, oldest first; waits up to `timeout_ms`
 * for one when there are none. */
static struct svc_ctx *svc__take(struct svc *s, int timeout_ms)
{
	struct svc_ctx *got;

	pthread_mutex_lock(&s->mu);
	if (!s->ready && timeout_ms > 0) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		while (!s->ready && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
			;
	}
	got = s->ready;
	s->ready = NULL;
	s->ready_tail = &s->ready;
	pthread_mutex_unlock(&s->mu);
	return got;
}

int svc_poll(struct svc *s, int timeout_ms, svc_handler_fn h, void *ctx)
{
	uint64_t t0 = 0, served = 0;
	struct svc_ctx *c;

	atomic_fetch_add(&s->polls, 1);
	atomic_store(&s->last_poll_ms, clk_mono_ms());
	svc_reject_flush(&s->rejects);
	if (!s->ctxs)
		return IG_E_CLOSED;
	/* serve what has come, then what came meanwhile, within the batch's bounds */
	for (c = svc__take(s, timeout_ms); c; c = svc__take(s, 0)) {
		if (!t0)
			t0 = clk_mono_ms();
		while (c) {
			struct svc_ctx *next = c->next;
			int rc = svc__serve(s, c, h, ctx);

			served++;
			if (rc) {
				/* the rest go back first in line */
				pthread_mutex_lock(&s->mu);
				if (next) {
					struct svc_ctx *last = next;

					while (last->next)
						last = last->next;
					last->next = s->ready;
					if (!s->ready)
						s->ready_tail = &last->next;
					s->ready = next;
				}
				pthread_mutex_unlock(&s->mu);
				return rc;
			}
			c = next;
		}
		if (served >= SVC_BATCH_MAX || clk_mono_ms() - t0 >= SVC_BATCH_MS)
			break;
	}
	return IG_E_OK;
}

void svc_close(struct svc *s)
{
	svc__free_ctxs(s);
	tp_listener_close(&s->lis);
}

uint64_t svc_relistens(struct svc *s)
{
	return s->lis.sock_open ? lg_recreated(&s->lis.guard) : 0;
}
