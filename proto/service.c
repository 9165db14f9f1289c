/* service.c - the reply side of a control socket (see service.h). */
#include "service.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/event.h"
#include "version.h"

int svc_open(struct svc *s, const char *role, const char *rtdir, const char *name, int watchdog_ms,
             struct ig_errbuf *eb)
{
	struct lg_opts o = {.ping_ms = watchdog_ms};
	int rc;

	memset(s, 0, sizeof(*s));
	s->role = role;
	s->started_ms = clk_mono_ms();
	atomic_init(&s->polls, 0);
	o.progress = &s->polls;
	rc = tp_listen_guarded(&s->lis, rtdir, name, &o, eb);
	s->rejects.socket = s->lis.path;
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

static void svc__reply_error(struct svc *s, const struct ig_errbuf *eb)
{
	struct msg err = {.type = MSG_ERROR};
	struct ig_errbuf eb2;
	char text[1024];

	snprintf(text, sizeof(text), "%s", eb->msg);
	if (!msg_utf8_valid(text, strlen(text)))
		snprintf(text, sizeof(text), "%s", ig_err_str(eb->code));
	err.u.error.code = (uint64_t)eb->code;
	err.u.error.message = msg_str_of(text);
	if (tp_send(s->lis.sock, &err, &eb2) != IG_E_OK)
		ev_msg(EV_WARN, "ignis.proto.reply_failed", "%s", eb2.msg);
}

int svc_poll(struct svc *s, int timeout_ms, svc_handler_fn h, void *ctx)
{
	struct ig_errbuf eb;
	struct msg reply;
	struct tp_rx rx;
	int rc;

	atomic_fetch_add(&s->polls, 1);
	svc_reject_flush(&s->rejects);
	nng_socket_set_ms(s->lis.sock, NNG_OPT_RECVTIMEO, timeout_ms);
	rc = tp_recv(s->lis.sock, &rx, &eb);
	if (rc == IG_E_TIMEOUT)
		return IG_E_OK;
	if (rc == IG_E_CLOSED || rc == IG_E_TRANSPORT || rc == IG_E_NOMEM)
		return rc;
	if (rc) {
		svc_reject(&s->rejects, rc, eb.msg);
		svc__reply_error(s, &eb);
		return IG_E_OK;
	}
	memset(&reply, 0, sizeof(reply));
	ig_errclear(&eb);
	if (rx.m.type == MSG_HELLO || rx.m.type == MSG_PING || rx.m.type == MSG_SHUTDOWN || !h)
		rc = svc__builtin(s, &rx.m, &reply, &eb);
	else
		rc = h(ctx, &rx.m, &reply, &eb);
	if (rc == IG_E_OK)
		rc = tp_send(s->lis.sock, &reply, &eb);
	if (rc != IG_E_OK) {
		if (!eb.msg[0])
			snprintf(eb.msg, sizeof(eb.msg), "%s", ig_err_str(rc));
		eb.code = rc;
		svc__reply_error(s, &eb);
	}
	tp_rx_release(&rx);
	return IG_E_OK;
}

void svc_close(struct svc *s)
{
	tp_listener_close(&s->lis);
}

uint64_t svc_relistens(struct svc *s)
{
	return s->lis.sock_open ? lg_recreated(&s->lis.guard) : 0;
}
