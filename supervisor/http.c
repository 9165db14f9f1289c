/* http.c - OpenAI's HTTP API on the supervisor (see http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "client/ignis_client.h"
#include "common/clock.h"
#include "frontdoor.h"
#include "model/chat.h"
#include "proto/msg.h"

/* A stream waits this long for tokens before it writes a keep-alive comment
 * (which is how a client that hung up is found). */
#define HTTP_WAIT_MS 1000
/* A connection idle this long (no request, no byte of one) is closed, so an
 * idle or stalled client does not hold its thread for ever; a stream is
 * never idle (its keep-alive comments), and a request being answered is not
 * timed while its handler runs. */
#define HTTP_IDLE_S 60
/* connections to the front door kept for the next requests, at most */
#define HTTP_POOL_MAX 1024

struct http {
	struct MHD_Daemon *d;
	char addr[96];
	char *model, *door_server, *rtdir;
	struct oai_limits lim;
	bool has_template;
	struct chat_template tmpl;
	atomic_bool ready;
	atomic_uint_fast64_t seq;
	int (*metrics_page)(void *ctx, char **page, size_t *len);
	void *metrics_ctx;
	/* connections to the front door no request uses now, kept for the
	 * next: a connection a request would cost nng a socket made and
	 * closed, and closing hundreds at once can wedge nng 1.5.2's reaper
	 * (nanomsg/nng#1543) */
	pthread_mutex_t pool_mu;
	struct igc_client *idle[HTTP_POOL_MAX];
	unsigned nidle;
};

/* One HTTP request: its body as it arrives. */
struct hreq {
	char *body;
	size_t len, cap;
	bool too_big;
};

/* One streamed completion: the response's reader owns it. */
struct hstream {
	struct http *h;
	struct oai_req req;
	struct igc_client *c;
	struct igc_stream *s;
	uint64_t id;
	char rid[64];
	int64_t created;
	struct oai_usage usage;
	bool first, finished, done;
	char state[17];
	bool broken; /* a call to the door failed: its connection is not kept */
	char *out; /* bytes waiting to be written */
	size_t out_len, out_off, out_cap;
	uint64_t last_ms; /* when bytes were last handed over */
};

/* ---- replies -------------------------------------------------------------- */

static enum MHD_Result http__send(struct MHD_Connection *con, unsigned status, char *body,
                                  const char *type, bool retry)
{
	struct MHD_Response *resp;
	enum MHD_Result rc;

	if (!body)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (retry)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	rc = MHD_queue_response(con, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result http__error(struct MHD_Connection *con, const struct oai_err *e)
{
	return http__send(con, (unsigned)e->status, oai_error_json(e), "application/json",
	                  e->status == 503);
}

static enum MHD_Result http__json(struct MHD_Connection *con, unsigned status, char *body)
{
	return http__send(con, status, body, "application/json", false);
}

static char *http__strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* ---- a request into the front door ---------------------------------------- */

/* The door's answer to a submit, in OpenAI's shape. */
static void http__door_err(const struct igc_error *ie, enum oai_kind kind, struct oai_err *e)
{
	switch (ie->code) {
	case IGC_E_CONTEXT:
	case IGC_E_POOL:
		oai_errf(e, 413, kind == OAI_CHAT ? "messages" : "prompt", "context_length_exceeded",
		         "%s", ie->message);
		break;
	case IGC_E_INVAL:
	case IGC_E_FIELD_RANGE:
		oai_errf(e, 400, NULL, "invalid_value", "%s", ie->message);
		break;
	default:
		oai_errf(e, 503, NULL, "unavailable", "the front door: %s (%s)", ie->message,
		         igc_code_name(ie->code));
		break;
	}
}

/* The prompt of a request: a chat rendered by the template, or the text or
 * ids of a completion. *text is malloc'd for a chat. */
static int http__prompt(struct http *h, const struct oai_req *q, struct igc_params *p,
                        char **text, struct oai_err *e)
{
	struct chat_msg msgs[64], *m = msgs;
	struct ig_errbuf eb = {0};
	unsigned flags = CHAT_GENERATION_PROMPT;
	size_t len = 0;
	int rc;

	*text = NULL;
	if (q->kind == OAI_COMPLETION) {
		if (q->prompt && q->prompt_len > MSG_TEXT_MAX) {
			oai_errf(e, 413, "prompt", "context_length_exceeded",
			         "the prompt holds %zu bytes; accepted: up to %u", q->prompt_len,
			         MSG_TEXT_MAX);
			return -1;
		}
		p->text = q->prompt;
		p->ids = q->prompt_ids;
		p->n_ids = q->n_prompt_ids;
		return 0;
	}
	if (!h->has_template) {
		oai_errf(e, 400, "messages", "no_chat_template",
		         "the model '%s' has no chat template (tokenizer.chat_template); accepted: "
		         "/v1/completions with a prompt",
		         h->model);
		return -1;
	}
	if (q->n_messages > 64 && !(m = calloc(q->n_messages, sizeof(*m)))) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < q->n_messages; i++) {
		/* developer is OpenAI's newer name for the system turn */
		const char *role = strcmp(q->messages[i].role, "developer") ? q->messages[i].role
		                                                              : "system";

		m[i] = (struct chat_msg){role, q->messages[i].text, strlen(role), q->messages[i].len};
	}
	if (q->thinking_set && !q->thinking)
		flags |= CHAT_NO_THINKING;
	rc = chat_render(&h->tmpl, m, q->n_messages, flags, NULL, 0, &len, NULL);
	if (!(*text = malloc(len + 1)))
		rc = -1;
	else
		rc = chat_render(&h->tmpl, m, q->n_messages, flags, *text, len + 1, &len, &eb);
	if (m != msgs)
		free(m);
	if (rc) {
		oai_errf(e, 400, q->thinking_set ? "chat_template_kwargs" : "messages",
		         "invalid_value", "the chat template: %s", eb.msg[0] ? eb.msg : "no memory");
		free(*text);
		*text = NULL;
		return -1;
	}
	(*text)[len] = '\0';
	if (len > MSG_TEXT_MAX) {
		oai_errf(e, 413, "messages", "context_length_exceeded",
		         "the rendered conversation holds %zu bytes; accepted: up to %u", len,
		         MSG_TEXT_MAX);
		free(*text);
		*text = NULL;
		return -1;
	}
	p->text = *text;
	return 0;
}

/* A connection to the door: a kept one, else a new one. */
static int http__client(struct http *h, struct igc_client **c, struct igc_error *ie)
{
	pthread_mutex_lock(&h->pool_mu);
	*c = h->nidle ? h->idle[--h->nidle] : NULL;
	pthread_mutex_unlock(&h->pool_mu);
	return *c ? 0 : igc_connect(c, h->door_server, h->rtdir, ie);
}

/* Done with `c`: kept for the next request unless a call on it failed in
 * transport (`broken`) or enough are kept. */
static void http__client_done(struct http *h, struct igc_client *c, bool broken)
{
	if (!c)
		return;
	pthread_mutex_lock(&h->pool_mu);
	if (!broken && h->nidle < HTTP_POOL_MAX) {
		h->idle[h->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&h->pool_mu);
	igc_close(c);
}

/* A failure of the connection itself (not an answer from the door). */
static bool http__transport(int code)
{
	return code == IGC_E_TIMEOUT || code == IGC_E_CLOSED || code == IGC_E_TRANSPORT ||
	       code == IGC_E_NOMEM;
}

/* Connect to the door and submit `q`: the client and the submitted request. */
static int http__submit(struct http *h, const struct oai_req *q, struct igc_client **c,
                        struct igc_submitted *sub, struct oai_err *e)
{
	struct igc_params p;
	struct igc_error ie = {0};
	const char *stop[4];
	char *text = NULL;
	uint64_t seed;
	int rc;

	*c = NULL;
	if (!atomic_load(&h->ready)) {
		oai_errf(e, 503, NULL, "not_ready",
		         "the model is not being served yet (the gpu-worker is starting or "
		         "restarting); try again");
		return -1;
	}
	igc_params_init(&p);
	if (http__prompt(h, q, &p, &text, e))
		return -1;
	p.max_tokens = q->max_tokens;
	p.cls = q->agent ? "agent" : "interactive";
	p.temperature = q->temperature;
	p.top_p = q->top_p;
	p.top_k = q->top_k;
	/* no seed: a fresh one, as OpenAI's unseeded sampling */
	if (q->seed_set)
		seed = (uint64_t)q->seed;
	else if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
		seed = (uint64_t)time(NULL) ^ atomic_fetch_add(&h->seq, 1);
	p.seed = seed;
	for (size_t i = 0; i < q->n_stop; i++)
		stop[i] = q->stop[i];
	p.stop = stop;
	p.n_stop = q->n_stop;
	rc = http__client(h, c, &ie);
	if (!rc)
		rc = igc_submit(*c, &p, sub, &ie);
	free(text);
	if (rc) {
		http__door_err(&ie, q->kind, e);
		http__client_done(h, *c, http__transport(ie.code));
		*c = NULL;
		return -1;
	}
	return 0;
}

/* OpenAI's finish_reason for the door's. */
static const char *http__finish(const char *f)
{
	return !strcmp(f, "length") || !strcmp(f, "context") ? "length" : "stop";
}

static void http__rid(struct http *h, enum oai_kind kind, char *out, size_t cap)
{
	snprintf(out, cap, "%s-ignis%" PRIx64 "x%" PRIu64, kind == OAI_CHAT ? "chatcmpl" : "cmpl",
	         (uint64_t)time(NULL), (uint64_t)atomic_fetch_add(&h->seq, 1));
}

/* Has the client of `con` hung up? (A whole request's client sends nothing
 * more: a read that finds the end of the stream says it left.) */
static bool http__client_gone(struct MHD_Connection *con)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
	char b;

	if (!ci)
		return false;
	return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* A whole completion: read the request to its end, answer once; a client
 * that hangs up meanwhile has its request cancelled. */
static enum MHD_Result http__whole(struct http *h, struct MHD_Connection *con, struct oai_req *q)
{
	struct igc_client *c;
	struct igc_submitted sub;
	struct igc_stream *s = NULL;
	struct igc_chunk ch = {0};
	struct igc_error ie = {0};
	struct oai_err e;
	struct oai_usage u = {0};
	char rid[64], *text = NULL;
	const char *finish;
	size_t len = 0, cap = 0;
	int rc;

	if (http__submit(h, q, &c, &sub, &e))
		return http__error(con, &e);
	rc = igc_stream_open(c, sub.id, &s, &ie);
	while (!rc) {
		if (http__client_gone(con)) {
			igc_cancel(c, sub.id, NULL);
			igc_stream_close(s);
			http__client_done(h, c, false);
			free(text);
			return MHD_NO; /* nobody to answer */
		}
		rc = igc_stream_next(s, HTTP_WAIT_MS, &ch, &ie);
		if (ch.text_len) {
			if (len + ch.text_len > cap) {
				char *t;

				cap = (len + ch.text_len) * 2 + 256;
				if (!(t = realloc(text, cap))) {
					rc = -1;
					ie.code = IGC_E_NOMEM;
					snprintf(ie.message, sizeof ie.message, "out of memory");
					break;
				}
				text = t;
			}
			memcpy(text + len, ch.text, ch.text_len);
			len += ch.text_len;
		}
		if (ch.done)
			break;
	}
	if (rc || !ch.done || !strcmp(ch.finish, "error")) {
		bool broken = rc && http__transport(ie.code);

		if (!ch.done && !broken && igc_cancel(c, sub.id, &ie))
			broken = http__transport(ie.code);
		igc_stream_close(s);
		http__client_done(h, c, broken);
		free(text);
		oai_errf(&e, 503, NULL, "generation_failed", "the request did not complete: %s",
		         ie.message[0] ? ie.message : "the worker stopped");
		return http__error(con, &e);
	}
	/* the chunk points into the stream: what the answer needs is read
	 * before the stream is closed */
	u.prompt = sub.prompt_tokens;
	u.completion = ch.generated;
	u.cached = ch.cached;
	finish = http__finish(ch.finish);
	igc_stream_close(s);
	http__client_done(h, c, false);
	http__rid(h, q->kind, rid, sizeof rid);
	{
		char *body = oai_completion_json(q->kind, rid, (int64_t)time(NULL), h->model, text,
		                                 len, finish, &u);

		free(text);
		return http__json(con, MHD_HTTP_OK, body);
	}
}

/* ---- streams -------------------------------------------------------------- */

/* Queue `n` bytes, or an SSE event "data: <json>\n\n" (json freed). */
static bool http__out(struct hstream *st, const char *p, size_t n)
{
	if (st->out_len + n > st->out_cap) {
		size_t cap = (st->out_len + n) * 2 + 256;
		char *o = realloc(st->out, cap);

		if (!o)
			return false;
		st->out = o;
		st->out_cap = cap;
	}
	memcpy(st->out + st->out_len, p, n);
	st->out_len += n;
	return true;
}

static bool http__event(struct hstream *st, char *json)
{
	bool ok = json && http__out(st, "data: ", 6) && http__out(st, json, strlen(json)) &&
	          http__out(st, "\n\n", 2);

	free(json);
	return ok;
}

/* The next events of the stream (waits up to HTTP_WAIT_MS for tokens);
 * false when the stream cannot go on. */
static bool http__produce(struct hstream *st)
{
	struct http *h = st->h;
	struct igc_chunk ch = {0};
	struct igc_error ie = {0};
	int rc;

	st->out_len = st->out_off = 0;
	if (st->first && st->req.kind == OAI_CHAT) {
		st->first = false;
		return http__event(st, oai_chunk_json(OAI_CHAT, st->rid, st->created, h->model, true,
		                                      "", 0, NULL, NULL));
	}
	st->first = false;
	rc = igc_stream_next(st->s, HTTP_WAIT_MS, &ch, &ie);
	if (rc && http__transport(ie.code))
		st->broken = true;
	if (rc && !ch.done) { /* the door is gone */
		struct oai_err e;

		oai_errf(&e, 503, NULL, "generation_failed", "the stream broke: %s", ie.message);
		st->finished = true;
		return http__event(st, oai_error_json(&e)) && http__out(st, "data: [DONE]\n\n", 14);
	}
	/* a move between tiers, told as a comment line clients skip */
	if (ch.state && strcmp(ch.state, st->state)) {
		char line[128];
		bool moving = !strncmp(ch.state, "moving", 6) || !strcmp(ch.state, "moved") ||
		              !strncmp(st->state, "moving", 6) || !strcmp(st->state, "moved");

		snprintf(st->state, sizeof st->state, "%s", ch.state);
		if (moving) {
			int n = snprintf(line, sizeof line, ": ignis {\"index\":0,\"state\":\"%s\"}\n\n",
			                 st->state);

			if (!http__out(st, line, (size_t)n))
				return false;
		}
	}
	if (ch.text_len &&
	    !http__event(st, oai_chunk_json(st->req.kind, st->rid, st->created, h->model, false,
	                                    ch.text, ch.text_len, NULL, NULL)))
		return false;
	if (ch.done) {
		st->done = true;
		st->finished = true;
		st->usage.completion = ch.generated;
		st->usage.cached = ch.cached;
		if (!strcmp(ch.finish, "error")) {
			struct oai_err e;

			oai_errf(&e, 503, NULL, "generation_failed", "the request failed: %s",
			         ie.message[0] ? ie.message : "the worker stopped");
			if (!http__event(st, oai_error_json(&e)))
				return false;
		} else if (!http__event(st, oai_chunk_json(st->req.kind, st->rid, st->created,
		                                           h->model, false, "", 0,
		                                           http__finish(ch.finish), NULL))) {
			return false;
		}
		if (st->req.include_usage &&
		    !http__event(st, oai_chunk_json(st->req.kind, st->rid, st->created, h->model,
		                                    false, NULL, 0, NULL, &st->usage)))
			return false;
		return http__out(st, "data: [DONE]\n\n", 14);
	}
	/* nothing came for a while: a comment, so a client that left is found */
	if (!st->out_len && clk_mono_ms() - st->last_ms >= HTTP_WAIT_MS)
		return http__out(st, ": \n\n", 4);
	return true;
}

static ssize_t http__read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct hstream *st = cls;

	(void)pos;
	while (st->out_off == st->out_len) {
		if (st->finished)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (!http__produce(st))
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	{
		size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;

		memcpy(buf, st->out + st->out_off, n);
		st->out_off += n;
		st->last_ms = clk_mono_ms();
		return (ssize_t)n;
	}
}

/* The response is done with (ended, or the client left): a request still
 * running is cancelled. */
static void http__stream_free(void *cls)
{
	struct hstream *st = cls;

	struct igc_error ie;

	if (!st->done && st->c && !st->broken && igc_cancel(st->c, st->id, &ie))
		st->broken = http__transport(ie.code);
	igc_stream_close(st->s);
	http__client_done(st->h, st->c, st->broken);
	oai_req_free(&st->req);
	free(st->out);
	free(st);
}

static enum MHD_Result http__stream(struct http *h, struct MHD_Connection *con,
                                    struct oai_req *q)
{
	struct hstream *st = calloc(1, sizeof(*st));
	struct igc_submitted sub;
	struct igc_error ie = {0};
	struct MHD_Response *resp;
	struct oai_err e;
	enum MHD_Result rc;

	if (!st) {
		oai_errf(&e, 500, NULL, NULL, "out of memory");
		return http__error(con, &e);
	}
	if (http__submit(h, q, &st->c, &sub, &e)) {
		free(st);
		return http__error(con, &e);
	}
	if (igc_stream_open(st->c, sub.id, &st->s, &ie)) {
		igc_cancel(st->c, sub.id, NULL);
		http__client_done(h, st->c, true);
		free(st);
		http__door_err(&ie, q->kind, &e);
		return http__error(con, &e);
	}
	st->h = h;
	st->req = *q; /* the stream owns the request now */
	memset(q, 0, sizeof(*q));
	st->id = sub.id;
	st->first = true;
	st->created = (int64_t)time(NULL);
	st->usage.prompt = sub.prompt_tokens;
	st->last_ms = clk_mono_ms();
	snprintf(st->state, sizeof st->state, "queued");
	http__rid(h, st->req.kind, st->rid, sizeof st->rid);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, http__read, st,
	                                         http__stream_free);
	if (!resp) {
		http__stream_free(st);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	rc = MHD_queue_response(con, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* ---- routes --------------------------------------------------------------- */

static enum MHD_Result http__post(struct http *h, struct MHD_Connection *con, enum oai_kind kind,
                                  struct hreq *r)
{
	struct oai_req q;
	struct oai_err e;
	enum MHD_Result rc;

	if (r->too_big) {
		oai_errf(&e, 413, NULL, "request_too_large",
		         "the request body is over %zu bytes; accepted: up to %zu", h->lim.max_body,
		         h->lim.max_body);
		return http__error(con, &e);
	}
	if (oai_parse(kind, r->body ? r->body : "", r->len, &h->lim, &q, &e))
		return http__error(con, &e);
	/* the class: the body's ignis.class, else the X-Ignis-Class header */
	if (!q.class_set) {
		const char *c = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Ignis-Class");

		if (c && strcmp(c, "interactive") && strcmp(c, "agent")) {
			oai_errf(&e, 400, "X-Ignis-Class", "invalid_value",
			         "the X-Ignis-Class header is '%.64s'; accepted: interactive or agent", c);
			oai_req_free(&q);
			return http__error(con, &e);
		}
		q.agent = c && !strcmp(c, "agent");
	}
	if (strcmp(q.model, h->model)) {
		oai_errf(&e, 404, "model", "model_not_found",
		         "the model '%s' does not exist; accepted: '%s' (GET /v1/models)", q.model,
		         h->model);
		oai_req_free(&q);
		return http__error(con, &e);
	}
	rc = q.stream ? http__stream(h, con, &q) : http__whole(h, con, &q);
	oai_req_free(&q);
	return rc;
}

static enum MHD_Result http__handle(void *cls, struct MHD_Connection *con, const char *url,
                                    const char *method, const char *version,
                                    const char *upload, size_t *upload_size, void **ptr)
{
	struct http *h = cls;
	struct hreq *r = *ptr;
	bool get = !strcmp(method, MHD_HTTP_METHOD_GET), post = !strcmp(method, MHD_HTTP_METHOD_POST);
	struct oai_err e;

	(void)version;
	if (!r) {
		if (!(r = calloc(1, sizeof(*r))))
			return MHD_NO;
		*ptr = r;
		return MHD_YES;
	}
	if (*upload_size) { /* the body, kept up to the limit (the rest is counted) */
		if (!r->too_big && r->len + *upload_size > h->lim.max_body)
			r->too_big = true;
		if (!r->too_big) {
			if (r->len + *upload_size > r->cap) {
				size_t cap = (r->len + *upload_size) * 2;
				char *b = realloc(r->body, cap);

				if (!b)
					return MHD_NO;
				r->body = b;
				r->cap = cap;
			}
			memcpy(r->body + r->len, upload, *upload_size);
			r->len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions")) {
		if (!post) {
			oai_errf(&e, 405, NULL, "method_not_allowed",
			         "%s %s; accepted: POST with a JSON body", method, url);
			return http__error(con, &e);
		}
		return http__post(h, con, strcmp(url, "/v1/completions") ? OAI_CHAT : OAI_COMPLETION,
		                  r);
	}
	if (!strcmp(url, "/metrics") && h->metrics_page) {
		char *page;
		size_t len;

		if (!get) {
			oai_errf(&e, 405, NULL, "method_not_allowed", "%s %s; accepted: GET", method,
			         url);
			return http__error(con, &e);
		}
		if (h->metrics_page(h->metrics_ctx, &page, &len))
			return MHD_NO;
		return http__send(con, MHD_HTTP_OK, page, "text/plain; version=0.0.4; charset=utf-8",
		                  false);
	}
	if (!strcmp(url, "/v1/models") || !strcmp(url, "/health") || !strcmp(url, "/ready")) {
		if (!get) {
			oai_errf(&e, 405, NULL, "method_not_allowed", "%s %s; accepted: GET", method,
			         url);
			return http__error(con, &e);
		}
		if (!strcmp(url, "/v1/models"))
			return http__json(con, MHD_HTTP_OK, oai_models_json(h->model, 0));
		if (!strcmp(url, "/health"))
			return http__json(con, MHD_HTTP_OK, http__strdup("{\"status\":\"ok\"}"));
		if (atomic_load(&h->ready))
			return http__json(con, MHD_HTTP_OK, http__strdup("{\"status\":\"ready\"}"));
		return http__send(con, MHD_HTTP_SERVICE_UNAVAILABLE,
		                  http__strdup("{\"status\":\"not ready\"}"), "application/json", true);
	}
	oai_errf(&e, 404, NULL, "unknown_url",
	         "unknown path '%s'; accepted: POST /v1/chat/completions, POST /v1/completions, "
	         "GET /v1/models, GET /health, GET /ready, GET /metrics",
	         url);
	return http__error(con, &e);
}

static void http__done(void *cls, struct MHD_Connection *con, void **ptr,
                       enum MHD_RequestTerminationCode why)
{
	struct hreq *r = *ptr;

	(void)cls, (void)con, (void)why;
	if (r) {
		free(r->body);
		free(r);
		*ptr = NULL;
	}
}

/* ---- the server ----------------------------------------------------------- */

int http_check_bind(const char *bind, bool allow_remote, struct ig_errbuf *eb)
{
	if (!strcmp(bind, "off") || allow_remote || door_hostport_is_loopback(bind))
		return IG_E_OK;
	return ig_errf(eb, IG_E_CONFIG,
	               "--server-http-bind '%s' is not a loopback address, and the HTTP API has no "
	               "access control (anyone who reaches it can submit requests): bind "
	               "127.0.0.1:PORT, or give --server-allow-remote (IGNIS_SERVER_ALLOW_REMOTE, "
	               "server_allow_remote) to serve it there anyway, or off",
	               bind);
}

int http_open(struct http **out, const struct http_opts *o, struct ig_errbuf *eb)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char host[80];
	const char *colon = strrchr(o->bind, ':');
	struct http *h;
	int rc;

	*out = NULL;
	if (!colon || (size_t)(colon - o->bind) >= sizeof host)
		return ig_errf(eb, IG_E_CONFIG, "--server-http-bind '%s' is not HOST:PORT", o->bind);
	/* the same rule as the nng door's: loopback unless allowed */
	rc = http_check_bind(o->bind, o->allow_remote, eb);
	if (rc)
		return rc;
	memcpy(host, o->bind, (size_t)(colon - o->bind));
	host[colon - o->bind] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1] */
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if (getaddrinfo(host, colon + 1, &hints, &ai) || !ai)
		return ig_errf(eb, IG_E_CONFIG, "--server-http-bind '%s': cannot resolve '%s'",
		               o->bind, host);
	if (!(h = calloc(1, sizeof(*h)))) {
		freeaddrinfo(ai);
		return ig_errf(eb, IG_E_NOMEM, "no memory for the HTTP server");
	}
	h->lim = o->limits;
	pthread_mutex_init(&h->pool_mu, NULL);
	h->metrics_page = o->metrics_page;
	h->metrics_ctx = o->metrics_ctx;
	h->model = http__strdup(o->model);
	h->door_server = http__strdup(o->door_server && *o->door_server ? o->door_server : NULL);
	h->rtdir = http__strdup(o->rtdir);
	snprintf(h->addr, sizeof h->addr, "%s", o->bind);
	if (o->chat_template) {
		rc = chat_template_of(o->chat_template, strlen(o->chat_template), &h->tmpl, eb);
		if (rc) {
			freeaddrinfo(ai);
			http_close(h);
			return ig_errprefix(eb, "the model's chat template");
		}
		h->has_template = true;
	}
	h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
	                            (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
	                        0, NULL, NULL, http__handle, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
	                        MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
	                        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S,
	                        MHD_OPTION_NOTIFY_COMPLETED, http__done, h, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!h->d) {
		http_close(h);
		return ig_errf(eb, IG_E_BUSY,
		               "--server-http-bind %s: cannot listen there (in use, or not an "
		               "address of this machine)",
		               o->bind);
	}
	*out = h;
	return IG_E_OK;
}

const char *http_addr(const struct http *h)
{
	return h->addr;
}

void http_set_ready(struct http *h, bool ready)
{
	if (h)
		atomic_store(&h->ready, ready);
}

void http_close(struct http *h)
{
	if (!h)
		return;
	if (h->d)
		MHD_stop_daemon(h->d);
	while (h->nidle)
		igc_close(h->idle[--h->nidle]);
	pthread_mutex_destroy(&h->pool_mu);
	free(h->model);
	free(h->door_server);
	free(h->rtdir);
	free(h);
}
