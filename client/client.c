/*
 * client.c - libignis-client: the front door's protocol (docs/protocol.md,
 * "The front door") over one nng REQ socket (see ignis_client.h).
 *
 * Built on the codec and transport of proto/; the text of the tokens is the
 * server's (the gpu-worker decodes it: docs/adr/0025), never decoded here.
 * The library exports only igc_* (libignis-client.map).
 */
#include "ignis_client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "common/rtdir.h"
#include "proto/transport.h"

#define IGC_TIMEOUT_MS        30000
#define IGC_SUBMIT_TIMEOUT_MS 600000

struct igc_client {
	nng_socket s;
	char url[TP_PATH_MAX + 16];
	int timeout_ms, submit_timeout_ms;
	struct msg *q; /* the request being sent (struct msg is ~21 KB) */
};

struct igc_stream {
	struct igc_client *c;
	uint64_t id;
	uint32_t next;
	bool done;
	uint32_t cached;
	uint32_t *ids;
	char *text;
	char state[17], finish[17];
};

static int igc__err(struct igc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int igc__err(struct igc_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *igc_code_name(int code)
{
	return ig_err_name(code);
}

const char *igc_strerror(int code)
{
	return ig_err_str(code);
}

/* Send c->q and receive the answer of type `want` into rx (the caller
 * releases it). An `error` answer gives its code and message as they are. */
static int igc__call(struct igc_client *c, int timeout_ms, uint32_t want, struct tp_rx *rx,
                     struct igc_error *err)
{
	struct ig_errbuf eb;
	int rc;

	rx->nm = NULL;
	nng_socket_set_ms(c->s, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_ms(c->s, NNG_OPT_SENDTIMEO, timeout_ms);
	rc = tp_send(c->s, c->q, &eb);
	if (rc == IG_E_TIMEOUT)
		return igc__err(err, rc,
		                "cannot reach %s within %d ms: is ignis-supervisor running "
		                "there (ignis-supervisor status)?",
		                c->url, timeout_ms);
	if (rc)
		return igc__err(err, rc, "%s", eb.msg);
	rc = tp_recv(c->s, rx, &eb);
	if (rc == IG_E_TIMEOUT)
		return igc__err(err, rc,
		                "no answer from %s to %s within %d ms: is ignis-supervisor "
		                "running there (ignis-supervisor status)?",
		                c->url, msg_type_name(c->q->type), timeout_ms);
	if (rc)
		return igc__err(err, rc, "%s: %s", c->url, eb.msg);
	if (rx->m.type == MSG_ERROR) {
		uint64_t code = rx->m.u.error.code;

		rc = code && code <= INT32_MAX ? (int)code : IG_E_PROTO_UNEXPECTED;
		igc__err(err, rc, "%.*s", (int)rx->m.u.error.message.n, rx->m.u.error.message.p);
		tp_rx_release(rx);
		return rc;
	}
	if (rx->m.type != want) {
		rc = igc__err(err, IG_E_PROTO_UNEXPECTED, "%s answered %s with '%s'; expected '%s'",
		              c->url, msg_type_name(c->q->type), msg_type_name(rx->m.type),
		              msg_type_name(want));
		tp_rx_release(rx);
		return rc;
	}
	return IG_E_OK;
}

int igc_connect(struct igc_client **out, const char *server, const char *runtime_dir,
                struct igc_error *err)
{
	struct igc_client *c;
	struct ig_errbuf eb;
	int rc;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c || !(c->q = malloc(sizeof(*c->q)))) {
		free(c);
		return igc__err(err, IG_E_NOMEM, "no memory for a client");
	}
	c->timeout_ms = IGC_TIMEOUT_MS;
	c->submit_timeout_ms = IGC_SUBMIT_TIMEOUT_MS;
	if (!server || !*server) {
		const char *env = getenv("IGNIS_SERVER_BIND");

		server = env && *env ? env : NULL;
	}
	if (server) {
		if (strncmp(server, "ipc://", 6) && strncmp(server, "tcp://", 6)) {
			rc = igc__err(err, IG_E_INVAL,
			              "server '%s': accepted ipc:///absolute/path or "
			              "tcp://HOST:PORT",
			              server);
			goto fail;
		}
		if (snprintf(c->url, sizeof(c->url), "%s", server) >= (int)sizeof(c->url)) {
			rc = igc__err(err, IG_E_INVAL, "server '%s' is too long", server);
			goto fail;
		}
	} else {
		char dir[RTDIR_PATH_MAX + 1];

		rc = rtdir_resolve(runtime_dir && *runtime_dir ? runtime_dir : NULL, NULL, NULL,
		                   dir, sizeof(dir), &eb);
		if (rc) {
			igc__err(err, rc, "%s", eb.msg);
			goto fail;
		}
		snprintf(c->url, sizeof(c->url), "ipc://%s/client.sock", dir);
	}
	if (!strncmp(c->url, "ipc://", 6)) {
		char lock[sizeof(c->url)];

		/* said now, and why, rather than as a timeout at the first call */
		if (!tp_lock_path_of(c->url + 6, lock, sizeof(lock)))
			rc = ig_errf(&eb, IG_E_INVAL, "server '%s' is too long", c->url);
		else
			rc = tp_reach(c->url + 6, lock, "ignis-supervisor", &eb);
		if (!rc)
			rc = tp_dial_url(&c->s, c->url, c->timeout_ms, &eb);
	} else {
		rc = tp_dial_url_now(&c->s, c->url, c->timeout_ms, &eb);
		if (rc)
			ig_errprefix(&eb,
			             "cannot connect (is ignis-supervisor serving there, with "
			             "--server-bind %s?)",
			             c->url);
	}
	if (rc) {
		igc__err(err, rc, "%s", eb.msg);
		goto fail;
	}
	*out = c;
	return IG_E_OK;
fail:
	free(c->q);
	free(c);
	return rc;
}

void igc_close(struct igc_client *c)
{
	if (!c)
		return;
	nng_close(c->s);
	free(c->q);
	free(c);
}

const char *igc_server(const struct igc_client *c)
{
	return c->url;
}

void igc_set_timeout(struct igc_client *c, int ms)
{
	c->timeout_ms = ms > 0 ? ms : IGC_TIMEOUT_MS;
}

void igc_set_submit_timeout(struct igc_client *c, int ms)
{
	c->submit_timeout_ms = ms > 0 ? ms : IGC_SUBMIT_TIMEOUT_MS;
}

void igc_params_init(struct igc_params *p)
{
	memset(p, 0, sizeof(*p));
	p->cls = "interactive";
	p->top_p = 1.0;
}

int igc_submit(struct igc_client *c, const struct igc_params *p, struct igc_submitted *out,
               struct igc_error *err)
{
	struct msg_fd_submit *q = &c->q->u.fd_submit;
	struct tp_rx rx;
	int rc;

	memset(out, 0, sizeof(*out));
	if (p->n_ids > MSG_IDS_MAX)
		return igc__err(err, IG_E_PROTO_FIELD_RANGE,
		                "prompt: %zu token ids; accepted: at most %u", p->n_ids,
		                MSG_IDS_MAX);
	if (p->n_stop > MSG_STOP_MAX)
		return igc__err(err, IG_E_PROTO_FIELD_RANGE,
		                "stop: %zu strings; accepted: at most %u", p->n_stop, MSG_STOP_MAX);
	if ((p->grammar && strlen(p->grammar) > MSG_GRAMMAR_MAX) ||
	    (p->json_schema && strlen(p->json_schema) > MSG_GRAMMAR_MAX))
		return igc__err(err, IG_E_PROTO_FIELD_RANGE,
		                "%s: more than %u bytes; accepted: a smaller one",
		                p->grammar ? "grammar" : "json_schema", MSG_GRAMMAR_MAX);
	if (p->grammar_trigger && strlen(p->grammar_trigger) > MSG_TRIGGER_MAX)
		return igc__err(err, IG_E_PROTO_FIELD_RANGE,
		                "grammar_trigger: more than %u bytes; accepted: 1 to %u",
		                MSG_TRIGGER_MAX, MSG_TRIGGER_MAX);
	memset(q, 0, sizeof(*q));
	c->q->type = MSG_FD_SUBMIT;
	q->text = msg_str_of(p->text ? p->text : "");
	q->prompt.n = (uint32_t)p->n_ids;
	if (p->n_ids)
		memcpy(q->prompt.v, p->ids, p->n_ids * sizeof(uint32_t));
	q->max_tokens = p->max_tokens;
	q->class = msg_str_of(p->cls ? p->cls : "interactive");
	q->temperature = p->temperature;
	q->top_p = p->top_p;
	q->top_k = p->top_k;
	q->seed = p->seed;
	q->stop.n = (uint32_t)p->n_stop;
	for (size_t i = 0; i < p->n_stop; i++)
		q->stop.v[i].text = msg_str_of(p->stop[i] ? p->stop[i] : "");
	q->grammar = msg_str_of(p->grammar ? p->grammar : "");
	q->json_schema = msg_str_of(p->json_schema ? p->json_schema : "");
	q->grammar_trigger = msg_str_of(p->grammar_trigger ? p->grammar_trigger : "");
	rc = igc__call(c, c->submit_timeout_ms, MSG_FD_SUBMITTED, &rx, err);
	if (rc)
		return rc;
	out->id = rx.m.u.fd_submitted.id;
	out->prompt_tokens = (uint32_t)rx.m.u.fd_submitted.prompt_tokens;
	out->max_tokens = (uint32_t)rx.m.u.fd_submitted.max_tokens;
	out->reserved_pages = (uint32_t)rx.m.u.fd_submitted.reserved_pages;
	out->queued_ms = rx.m.u.fd_submitted.queued_ms;
	tp_rx_release(&rx);
	return IG_E_OK;
}

int igc_cancel(struct igc_client *c, uint64_t id, struct igc_error *err)
{
	struct tp_rx rx;
	int rc;

	c->q->type = MSG_FD_CANCEL;
	c->q->u.fd_cancel.id = id;
	rc = igc__call(c, c->timeout_ms, MSG_ACK, &rx, err);
	tp_rx_release(&rx);
	return rc;
}

int igc_status(struct igc_client *c, uint64_t id, struct igc_request *out, struct igc_error *err)
{
	const struct msg_fd_request *r;
	struct tp_rx rx;
	int rc;

	memset(out, 0, sizeof(*out));
	c->q->type = MSG_FD_STATUS;
	c->q->u.fd_status.id = id;
	rc = igc__call(c, c->timeout_ms, MSG_FD_REQUEST, &rx, err);
	if (rc)
		return rc;
	r = &rx.m.u.fd_request;
	out->id = r->id;
	msg_str_copy(out->state, sizeof(out->state), r->state);
	msg_str_copy(out->cls, sizeof(out->cls), r->class);
	msg_str_copy(out->finish, sizeof(out->finish), r->finish);
	out->prompt_tokens = (uint32_t)r->prompt_tokens;
	out->max_tokens = (uint32_t)r->max_tokens;
	out->generated = (uint32_t)r->generated;
	out->cached = (uint32_t)r->cached;
	out->done = r->done;
	out->code = (int)r->code;
	msg_str_copy(out->message, sizeof(out->message), r->message);
	out->age_ms = r->age_ms;
	tp_rx_release(&rx);
	return IG_E_OK;
}

int igc_model_info(struct igc_client *c, struct igc_model *out, struct igc_error *err)
{
	const struct msg_fd_model_reply *r;
	struct tp_rx rx;
	int rc;

	memset(out, 0, sizeof(*out));
	c->q->type = MSG_FD_MODEL;
	c->q->u.fd_model.seq = 0;
	rc = igc__call(c, c->timeout_ms, MSG_FD_MODEL_REPLY, &rx, err);
	if (rc)
		return rc;
	r = &rx.m.u.fd_model_reply;
	msg_str_copy(out->name, sizeof(out->name), r->model);
	msg_str_copy(out->backend, sizeof(out->backend), r->backend);
	msg_str_copy(out->kv_format, sizeof(out->kv_format), r->kv_format);
	msg_str_copy(out->tokenizer, sizeof(out->tokenizer), r->tokenizer);
	msg_str_copy(out->worker, sizeof(out->worker), r->worker);
	out->vocab = (uint32_t)r->vocab;
	out->eos = (uint32_t)r->eos;
	out->context_tokens = r->context_tokens;
	out->page_tokens = r->page_tokens;
	out->pool_pages = r->pool_pages;
	out->lanes = (uint32_t)r->lanes;
	out->chunk_tokens = (uint32_t)r->chunk_tokens;
	out->default_max_tokens = (uint32_t)r->default_max_tokens;
	out->serving = r->serving;
	tp_rx_release(&rx);
	return IG_E_OK;
}

int igc_stats(struct igc_client *c, struct igc_stats *out, struct igc_error *err)
{
	const struct msg_fd_stats_reply *r;
	struct tp_rx rx;
	int rc;

	memset(out, 0, sizeof(*out));
	c->q->type = MSG_FD_STATS;
	c->q->u.fd_stats.seq = 0;
	rc = igc__call(c, c->timeout_ms, MSG_FD_STATS_REPLY, &rx, err);
	if (rc)
		return rc;
	r = &rx.m.u.fd_stats_reply;
	out->uptime_ms = r->uptime_ms;
	msg_str_copy(out->worker, sizeof(out->worker), r->worker);
	out->worker_pid = (uint32_t)r->worker_pid;
	out->worker_restarts = r->worker_restarts;
	out->live = (uint32_t)r->live;
	out->queued = (uint32_t)r->queued;
	out->kept = (uint32_t)r->kept;
	out->waiting = (uint32_t)r->waiting;
	out->submitted = r->submitted;
	out->finished = r->finished;
	out->failed = r->failed;
	out->refused = r->refused;
	out->rejected = r->rejected;
	out->tokens = r->tokens;
	out->slot_waits = r->slot_waits;
	out->n_requests = r->requests.n;
	for (uint32_t i = 0; i < r->requests.n && i < IGC_STATS_REQUESTS; i++) {
		const struct msg_fd_req *e = &r->requests.v[i];
		struct igc_stats_request *o = &out->requests[i];

		o->id = e->id;
		msg_str_copy(o->state, sizeof(o->state), e->state);
		msg_str_copy(o->cls, sizeof(o->cls), e->class);
		msg_str_copy(o->finish, sizeof(o->finish), e->finish);
		o->prompt_tokens = (uint32_t)e->prompt_tokens;
		o->max_tokens = (uint32_t)e->max_tokens;
		o->generated = (uint32_t)e->generated;
		o->age_ms = e->age_ms;
	}
	tp_rx_release(&rx);
	return IG_E_OK;
}

/* ---- streams ---------------------------------------------------------------- */

int igc_stream_open(struct igc_client *c, uint64_t id, struct igc_stream **out,
                    struct igc_error *err)
{
	struct igc_stream *s;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (s) {
		s->ids = malloc(MSG_IDS_MAX * sizeof(uint32_t));
		s->text = malloc((size_t)MSG_TEXT_MAX + 1);
	}
	if (!s || !s->ids || !s->text) {
		if (s) {
			free(s->ids);
			free(s->text);
		}
		free(s);
		return igc__err(err, IG_E_NOMEM, "no memory for a stream");
	}
	s->c = c;
	s->id = id;
	*out = s;
	return IG_E_OK;
}

int igc_stream_next(struct igc_stream *s, int wait_ms, struct igc_chunk *out, struct igc_error *err)
{
	struct igc_client *c = s->c;
	const struct msg_fd_tokens *t;
	struct tp_rx rx;
	int rc;

	memset(out, 0, sizeof(*out));
	out->ids = s->ids;
	out->text = s->text;
	s->text[0] = '\0';
	out->from = s->next;
	if (s->done) {
		out->done = true;
		out->state = s->state;
		out->finish = s->finish;
		out->generated = s->next;
		out->cached = s->cached;
		return IG_E_OK;
	}
	if (wait_ms < 0)
		wait_ms = 0;
	if (wait_ms > (int)MSG_WAIT_MAX_MS)
		wait_ms = (int)MSG_WAIT_MAX_MS;
	c->q->type = MSG_FD_POLL;
	c->q->u.fd_poll = (struct msg_fd_poll){s->id, s->next, MSG_IDS_MAX, (uint64_t)wait_ms};
	rc = igc__call(c, wait_ms + c->timeout_ms, MSG_FD_TOKENS, &rx, err);
	if (rc)
		return rc;
	t = &rx.m.u.fd_tokens;
	if (t->id != s->id || t->from != s->next) {
		rc = igc__err(err, IG_E_PROTO_UNEXPECTED,
		              "the server answered a poll of request %llu from %u with request "
		              "%llu from %llu",
		              (unsigned long long)s->id, s->next, (unsigned long long)t->id,
		              (unsigned long long)t->from);
		tp_rx_release(&rx);
		return rc;
	}
	memcpy(s->ids, t->tokens.v, (size_t)t->tokens.n * sizeof(uint32_t));
	out->n = t->tokens.n;
	s->next += t->tokens.n;
	/* the server's text for these tokens, as it is */
	memcpy(s->text, t->text.p, t->text.n);
	s->text[t->text.n] = '\0';
	out->text_len = t->text.n;
	msg_str_copy(s->state, sizeof(s->state), t->state);
	msg_str_copy(s->finish, sizeof(s->finish), t->finish);
	s->done = t->done && s->next >= t->generated;
	out->done = s->done;
	out->state = s->state;
	out->finish = s->finish;
	out->generated = (uint32_t)t->generated;
	s->cached = (uint32_t)t->cached;
	out->cached = s->cached;
	rc = IG_E_OK;
	if (s->done && t->code)
		rc = igc__err(err, (int)t->code, "%.*s", (int)t->message.n, t->message.p);
	tp_rx_release(&rx);
	return rc;
}

void igc_stream_close(struct igc_stream *s)
{
	if (!s)
		return;
	if (s->done)
		igc_cancel(s->c, s->id, NULL); /* forget it on the server */
	free(s->ids);
	free(s->text);
	free(s);
}
