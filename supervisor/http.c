/* http.c - OpenAI's HTTP API on the supervisor (see http.h).
 *
 * A request's life on a connection (libmicrohttpd calls http__handle for
 * its headers, each piece of its body, and then until it is answered):
 *
 *   headers   checked at once: Host, Origin, the route and method, the API
 *             key, the content type and length; a refusal is answered now
 *             (the body is not read)
 *   body      kept up to the limit (the rest counted, then refused 413)
 *   admit     parsed, rendered, submitted to the door in process; the
 *             connection is suspended until the door says the worker
 *             admitted or refused it (an admission's refusal keeps its
 *             HTTP status: 413 for a prompt past the context)
 *   whole     suspended until the request is done, then answered once
 *   stream    a response whose reader takes the door's news as it comes,
 *             suspending the connection between them
 *
 * A suspended connection is resumed by the door's wake (its news, or a
 * second without any: then a stream writes a keep-alive comment, and a
 * whole request looks whether its client reset the connection). Nothing
 * here ever blocks an MHD thread. The wake is armed only while its
 * connection is suspended, and disarmed by door_local_release before the
 * request is freed, so it never reaches a connection that is gone.
 *
 * The connections' deadlines are kept here, not by libmicrohttpd (whose
 * timeout counts idle seconds, which a client sending a byte every few
 * seconds never reaches): a sweeper thread cuts (shutdown) a connection
 * whose request's headers or body are late; the descriptor stays
 * libmicrohttpd's, which closes it, and the sweeper forgets it under the
 * same lock before libmicrohttpd closes it.
 */
#define _GNU_SOURCE
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "anthropic.h"
#include "common/clock.h"
#include "frontdoor.h"
#include "model/chat.h"
#include "constrain.h"
#include "tokenize.h"
#include "outparse.h"
#include "responses.h"
#include "proto/msg.h"

/* A waiting request looks again after this long without news: a stream
 * writes a keep-alive comment (how a client that hung up is found), a
 * whole request checks its connection was not reset. */
#define HTTP_WAIT_MS 1000
/* A connection libmicrohttpd sees idle this long is closed: one whose client
 * stopped reading a stream (a suspended connection is never idle). */
#define HTTP_IDLE_S 60
/* The sweeper's period: deadlines are kept to within this. */
#define HTTP_SWEEP_MS 100
/* Descriptors left to the rest of the supervisor when the connection limit
 * comes from the descriptor limit (the nng door's clients, the daemons'
 * sockets, the metrics server, files): a quarter, at most this many. */
#define HTTP_FD_RESERVE 1024u
/* Threads serving connections (each its own epoll set). */
#define HTTP_THREADS 2u

enum hc_phase { HC_HEAD, HC_BODY, HC_BUSY };

/* One connection: its deadline's phase, since when. */
struct hconn {
	int fd;
	uint64_t peer; /* the door's fairness key: the client's address */
	enum hc_phase phase;
	uint64_t since_ms;
	bool cut;
	struct hconn *prev, *next;
};

/* The routes, the POST ones first (through R_POST_LAST). */
enum hr_route {
	R_CHAT = 1,
	R_COMPLETIONS,
	R_TOKENIZE,
	R_DETOKENIZE,
	R_MESSAGES,       /* Anthropic's (anthropic.h) */
	R_MESSAGES_COUNT, /* its count_tokens */
	R_RESPONSES,      /* OpenAI's Responses (responses.h) */
	R_MODELS,
	R_HEALTH,
	R_READY,
	R_METRICS
};
/* The routes up to this one take a POST; the rest a GET. */
#define R_POST_LAST R_RESPONSES
enum hr_state { HR_BODY, HR_ADMIT, HR_WHOLE, HR_STREAM };

/* One request: libmicrohttpd's request context, freed when it completes. */
struct hreq {
	struct http *h;
	struct MHD_Connection *con;
	struct hconn *hc;
	enum hr_route route;
	enum hr_state st;
	const char *origin; /* an Origin we serve (h's copy), or NULL */
	char *body;
	size_t len, cap;
	bool too_big;
	struct oai_req q;
	/* another API on the chat path (wire.h): its table, and its answer */
	const struct wire_api *api;
	struct wire_ans *ans;
	/* at the door */
	struct door_req *dr;
	uint64_t ver;
	uint32_t from;
	struct door_news nw;
	bool fresh; /* nw and text hold news the stream has not written */
	char *text; /* the answer's text (whole), or what the stream has yet to write */
	size_t text_len;
	/* log-probabilities (oai_req.logprobs): of tokens [0, lp_from) written;
	 * the text written before `text` (bytes and characters, for
	 * completions' text_offset); one token's, read from the door */
	uint32_t lp_from;
	uint64_t text_bytes, text_chars;
	struct door_lp_tok *lpt;
	/* completions' echo (docs/adr/0063): the prompt's text (and with
	 * logprobs its tokens' entries) before the completion's; a stream's
	 * first chunk once it is at hand (`echoed` then) */
	bool echoed;
	/* a chat answer taken apart (outparse.h): reasoning, content, calls */
	struct op op;
	bool op_on, op_calls;
	bool think_open; /* the rendered prompt ended inside a thinking block */
	struct op_tool *op_tools;
	/* whole: the parts collected; a stream: the chunk's logprobs, given to
	 * the first event of a feed */
	char *a_reason, *a_content;
	size_t a_reason_len, a_content_len;
	struct oai_call *a_calls;
	size_t a_n_calls;
	struct oai_lps *ev_lps;
	bool ev_ok;
	/* the answer */
	char rid[64];
	int64_t created;
	bool first, finished;
	char state[17];
	char *out; /* stream bytes waiting for the reader */
	size_t out_len, out_off, out_cap;
	uint64_t last_ms; /* when stream bytes were last handed over */
	/* n choices (oai_req.n; docs/adr/0059): this request is choice 0 and
	 * `more` the others, choice i at more[i - 1], each a request of its
	 * own at the door (seed + i) with the fields above from `dr` on as
	 * its own; they share this one's body, connection and stream bytes
	 * (`top`: this request; NULL for choice 0). `c_done`: the choice's
	 * last chunk is written (the stream ends once every choice's is). */
	struct hreq *top, *more;
	uint32_t index, n_more;
	bool c_done;
	/* suspended and not yet resumed: the first wake of the choices armed
	 * resumes it, once (libmicrohttpd's resume of a connection that is
	 * not suspended is undefined) */
	atomic_bool susp;
};

struct http {
	struct MHD_Daemon *d;
	struct door *door;
	char addr[96];
	bool loopback; /* a loopback bind: the Host header must name loopback */
	char *model;   /* the primary name: names[0] */
	char **names;  /* every name the model is served under */
	size_t nnames; /* 1 to KNOB_NAMES_MAX */
	enum mdesc_tokenizer tokenizer;
	const struct bpe *bpe; /* the caller's, for GPT2 */
	struct oai_limits lim;
	bool has_template;
	struct chat_template tmpl;
	char *api_key;
	size_t api_key_len;
	char **origins;
	size_t norigins;
	atomic_bool ready;
	atomic_uint_fast64_t seq;
	int (*metrics_page)(void *ctx, char **page, size_t *len);
	void *metrics_ctx;
	uint32_t max_connections, header_ms, body_ms;
	/* the connections, for the sweeper */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hconn *conns;
	uint64_t nconns;
	bool closing, sweeper_on;
	pthread_t sweeper;
	atomic_uint_fast64_t n_timeouts, n_host, n_origin, n_key, n_type;
};

/* ---- replies -------------------------------------------------------------- */

/* CORS headers for an Origin we serve. */
static void http__cors(struct MHD_Response *resp, const char *origin)
{
	if (!origin)
		return;
	MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
	MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result http__send(struct hreq *r, unsigned status, char *body, const char *type)
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
	if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	http__cors(resp, r->origin);
	rc = MHD_queue_response(r->con, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result http__error(struct hreq *r, const struct oai_err *e)
{
	return http__send(r, (unsigned)e->status,
	                  r->api ? r->api->error_json(e) : oai_error_json(e), "application/json");
}

static enum MHD_Result http__json(struct hreq *r, unsigned status, char *body)
{
	return http__send(r, status, body, "application/json");
}

static char *http__strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* The door's refusal of a submit (at once, or the worker's at admission),
 * in OpenAI's shape. */
static void http__refusal(int code, const char *message, enum oai_kind kind, struct oai_err *e)
{
	switch (code) {
	case IG_E_REQ_CONTEXT:
	case IG_E_REQ_POOL:
		oai_errf(e, 413, kind == OAI_COMPLETION ? "prompt" : "messages",
		         "context_length_exceeded", "%s", message);
		break;
	case IG_E_INVAL:
	case IG_E_PROTO_FIELD_RANGE:
		oai_errf(e, 400, NULL, "invalid_value", "%s", message);
		break;
	default:
		oai_errf(e, 503, NULL, "unavailable", "the front door: %s (%s)", message,
		         ig_err_name(code));
		break;
	}
}

/* OpenAI's finish_reason for the door's. */
static const char *http__finish(const char *f)
{
	return !strcmp(f, "length") || !strcmp(f, "context") ? "length" : "stop";
}

/* A choice's finish_reason: "tool_calls" for a stop after calls, "length"
 * for max_tokens 0 (echo: the prompt alone), else its finish's. */
static const char *http__finish_reason(const struct hreq *r, bool calls)
{
	const char *f = http__finish(r->nw.finish);

	if (!strcmp(f, "stop") && calls)
		return "tool_calls";
	return r->q.max_zero && strcmp(r->nw.finish, "error") ? "length" : f;
}

static void http__rid(struct http *h, enum oai_kind kind, char *out, size_t cap)
{
	snprintf(out, cap, "%s-ignis%" PRIx64 "x%" PRIu64, kind == OAI_CHAT ? "chatcmpl" : "cmpl",
	         (uint64_t)time(NULL), (uint64_t)atomic_fetch_add(&h->seq, 1));
}

/* ---- the checks of a request's headers -------------------------------------- */

/* True when `host` (a Host header: NAME or ADDRESS, with or without :PORT)
 * names loopback by itself: localhost or a name under .localhost (RFC 6761:
 * never looked up), an address in 127.0.0.0/8, or ::1. A name that merely
 * resolves to loopback is not taken: that is what a rebound DNS name does. */
static bool http__host_loopback(const char *host)
{
	char name[256];
	const char *end, *port;
	size_t n;

	if (host[0] == '[') {
		end = strchr(host, ']');
		if (!end)
			return false;
		host++;
		port = end + 1;
	} else {
		end = strchr(host, ':');
		port = end ? end : host + strlen(host);
		end = port;
	}
	n = (size_t)(end - host);
	if (!n || n >= sizeof(name))
		return false;
	if (*port) { /* ":" and 1 to 5 digits */
		size_t d = strspn(port + 1, "0123456789");

		if (port[0] != ':' || !d || d > 5 || port[1 + d])
			return false;
	}
	memcpy(name, host, n);
	name[n] = '\0';
	if (!strcasecmp(name, "localhost") || (n > 10 && !strcasecmp(name + n - 10, ".localhost")))
		return true;
	{
		struct in_addr a4;
		struct in6_addr a6;

		if (inet_pton(AF_INET, name, &a4) == 1)
			return (ntohl(a4.s_addr) >> 24) == 127;
		if (inet_pton(AF_INET6, name, &a6) == 1)
			return IN6_IS_ADDR_LOOPBACK(&a6) ||
			       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	}
	return false;
}

/* The API key given (Authorization: Bearer KEY, or X-Api-Key: KEY) equals
 * ours, compared in time that depends on our key's length only. */
static bool http__key_ok(const struct http *h, struct MHD_Connection *con)
{
	const char *a = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
	const char *given = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Api-Key");
	volatile unsigned char diff;
	size_t glen;

	if (a && !strncasecmp(a, "Bearer ", 7)) {
		given = a + 7;
		given += strspn(given, " ");
	}
	if (!given)
		return false;
	glen = strlen(given);
	diff = glen != h->api_key_len;
	for (size_t i = 0; i < h->api_key_len; i++)
		diff |= (unsigned char)h->api_key[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return diff == 0;
}

/* Our copy of `origin` when it is one we serve, else NULL. */
static const char *http__origin(const struct http *h, const char *origin)
{
	for (size_t i = 0; i < h->norigins; i++)
		if (!strcasecmp(origin, h->origins[i]))
			return h->origins[i];
	return NULL;
}

/* The media type of a Content-Type is application/json (parameters such as
 * charset allowed). */
static bool http__is_json(const char *ct)
{
	size_t n;

	if (!ct)
		return false;
	ct += strspn(ct, " \t");
	n = strcspn(ct, ";");
	while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
		n--;
	return n == 16 && !strncasecmp(ct, "application/json", 16);
}

static const char http__routes[] =
    "POST /v1/chat/completions, POST /v1/completions, POST /v1/messages, "
    "POST /v1/messages/count_tokens, POST /v1/responses, POST /tokenize, POST /detokenize, "
    "GET /v1/models, GET /health, GET /ready, GET /metrics";

/* The route of `url`, or 0. */
static enum hr_route http__route(const struct http *h, const char *url)
{
	if (!strcmp(url, "/v1/chat/completions"))
		return R_CHAT;
	if (!strcmp(url, "/v1/completions"))
		return R_COMPLETIONS;
	if (!strcmp(url, "/v1/messages"))
		return R_MESSAGES;
	if (!strcmp(url, "/v1/messages/count_tokens"))
		return R_MESSAGES_COUNT;
	if (!strcmp(url, "/v1/responses"))
		return R_RESPONSES;
	if (!strcmp(url, "/tokenize"))
		return R_TOKENIZE;
	if (!strcmp(url, "/detokenize"))
		return R_DETOKENIZE;
	if (!strcmp(url, "/v1/models"))
		return R_MODELS;
	if (!strcmp(url, "/health"))
		return R_HEALTH;
	if (!strcmp(url, "/ready"))
		return R_READY;
	if (!strcmp(url, "/metrics") && h->metrics_page)
		return R_METRICS;
	return 0;
}

/* The API a route speaks beside OpenAI's (wire.h), or NULL for OpenAI's. */
static const struct wire_api *http__api(enum hr_route route)
{
	return route == R_MESSAGES || route == R_MESSAGES_COUNT ? &anth_api
	       : route == R_RESPONSES                           ? &resp_api
	                                                        : NULL;
}

/* A CORS preflight from an Origin we serve. */
static enum MHD_Result http__preflight(struct hreq *r)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result rc;

	if (!resp)
		return MHD_NO;
	http__cors(resp, r->origin);
	MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	MHD_add_response_header(resp, "Access-Control-Allow-Headers",
	                        "Authorization, Content-Type, X-Api-Key, X-Ignis-Class, "
	                        "Anthropic-Version, Anthropic-Beta");
	MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
	rc = MHD_queue_response(r->con, MHD_HTTP_NO_CONTENT, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* The checks a request's headers pass or fail, in order: Host (a rebound
 * DNS name), Origin (a page we do not serve), route and method, the API key
 * (every route but the probes), the body's type and size. MHD_YES to read
 * the body; otherwise the answer is queued (and the body not read). */
static enum MHD_Result http__headers(struct hreq *r, const char *url, const char *method)
{
	struct http *h = r->h;
	struct MHD_Connection *con = r->con;
	const char *host = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Host");
	const char *origin = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Origin");
	bool get = !strcmp(method, MHD_HTTP_METHOD_GET),
	     post = !strcmp(method, MHD_HTTP_METHOD_POST);
	struct oai_err e;

	if (h->loopback && (!host || !http__host_loopback(host))) {
		atomic_fetch_add(&h->n_host, 1);
		if (!host)
			oai_errf(
			    &e, 400, NULL, "missing_host",
			    "the request has no Host header; accepted: Host naming this loopback "
			    "server (localhost, 127.0.0.1 or [::1], with its port)");
		else
			oai_errf(
			    &e, 403, NULL, "host_not_allowed",
			    "the Host header '%.100s' does not name this server, which listens on "
			    "loopback (%s); accepted: localhost, an address in 127.0.0.0/8 or "
			    "[::1], with the port (a name that only resolves there is refused: "
			    "DNS rebinding)",
			    host, h->addr);
		return http__error(r, &e);
	}
	if (origin && !(r->origin = http__origin(h, origin))) {
		atomic_fetch_add(&h->n_origin, 1);
		oai_errf(&e, 403, NULL, "origin_not_allowed",
		         "requests from the web page origin '%.100s' are not served; accepted: the "
		         "origins --server-cors-origins names (%s)",
		         origin, h->norigins ? "this is not one of them" : "it names none");
		return http__error(r, &e);
	}
	r->route = http__route(h, url);
	r->api = http__api(r->route);
	if (!r->route) {
		oai_errf(&e, 404, NULL, "unknown_url", "unknown path '%.200s'; accepted: %s", url,
		         http__routes);
		return http__error(r, &e);
	}
	if (!strcmp(method, MHD_HTTP_METHOD_OPTIONS) && r->origin)
		return http__preflight(r);
	if ((r->route <= R_POST_LAST && !post) || (r->route > R_POST_LAST && !get)) {
		oai_errf(&e, 405, NULL, "method_not_allowed", "%.16s %.200s; accepted: %s", method,
		         url, r->route <= R_POST_LAST ? "POST with a JSON body" : "GET");
		return http__error(r, &e);
	}
	if (h->api_key && r->route != R_HEALTH && r->route != R_READY && !http__key_ok(h, con)) {
		atomic_fetch_add(&h->n_key, 1);
		oai_errf(&e, 401, NULL, "invalid_api_key",
		         "this server asks for an API key: send it as 'Authorization: Bearer KEY' "
		         "(or 'X-Api-Key: KEY'); the one given is %s",
		         MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization") ||
		                 MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Api-Key")
		             ? "not the server's"
		             : "missing");
		return http__error(r, &e);
	}
	if (post) {
		const char *ct = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Type");
		const char *cl =
		    MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");

		if (!http__is_json(ct)) {
			atomic_fetch_add(&h->n_type, 1);
			oai_errf(
			    &e, 415, NULL, "unsupported_media_type",
			    "the body's Content-Type is %s%.100s%s; accepted: application/json",
			    ct ? "'" : "", ct ? ct : "missing", ct ? "'" : "");
			return http__error(r, &e);
		}
		if (cl && strtoull(cl, NULL, 10) > h->lim.max_body) {
			oai_errf(&e, 413, NULL, "request_too_large",
			         "the request body is %.24s bytes; accepted: up to %zu", cl,
			         h->lim.max_body);
			return http__error(r, &e);
		}
	}
	return MHD_YES;
}

/* ---- a request into the front door ---------------------------------------- */

/* The prompt of a request into `q`: a chat rendered by the template, with
 * the spans of its messages' own text (tokenized as text), or the text or
 * ids of a completion. *text is malloc'd for a chat. */
static int http__prompt(struct http *h, const struct oai_req *oq, struct msg_fd_submit *q,
                        char **text, struct oai_err *e)
{
	/* /tokenize's chat without the generation prompt, else as chat runs */
	bool gen_prompt = oq->kind != OAI_TOKENIZE || oq->gen_prompt;

	struct chat_msg msgs[64], *m = msgs;
	struct chat_span spans[128], *sp = spans;
	struct chat_call *calls = NULL;
	char **tools = NULL;
	size_t *tool_lens = NULL;
	struct ig_errbuf eb = {0};
	unsigned flags = 0;
	size_t len = 0, nsp = 0, spcap;
	int rc;

	*text = NULL;
	if (gen_prompt)
		flags |= CHAT_GENERATION_PROMPT;
	if (oq->kind == OAI_COMPLETION || (oq->kind == OAI_TOKENIZE && oq->prompt)) {
		if (oq->prompt && oq->prompt_len > MSG_TEXT_MAX) {
			oai_errf(e, 413, "prompt", "context_length_exceeded",
			         "the prompt holds %zu bytes; accepted: up to %u", oq->prompt_len,
			         MSG_TEXT_MAX);
			return -1;
		}
		if (oq->prompt)
			q->text = (struct msg_str){oq->prompt, (uint32_t)oq->prompt_len};
		q->prompt.n = (uint32_t)oq->n_prompt_ids;
		if (oq->n_prompt_ids)
			memcpy(q->prompt.v, oq->prompt_ids, oq->n_prompt_ids * sizeof(uint32_t));
		return 0;
	}
	if (!h->has_template) {
		oai_errf(e, 400, "messages", "no_chat_template",
		         "the model '%s' has no chat template (tokenizer.chat_template); accepted: "
		         "/v1/completions with a prompt",
		         h->model);
		return -1;
	}
	{
		size_t n_calls = 0;

		for (size_t i = 0; i < oq->n_messages; i++)
			n_calls += oq->messages[i].n_calls;
		if (n_calls && !(calls = calloc(n_calls, sizeof(*calls)))) {
			oai_errf(e, 500, NULL, NULL, "out of memory");
			return -1;
		}
	}
	if ((oq->n_messages > 64 && !(m = calloc(oq->n_messages, sizeof(*m)))) ||
	    (oq->n_tools && (!(tools = calloc(oq->n_tools, sizeof(*tools))) ||
	                     !(tool_lens = calloc(oq->n_tools, sizeof(*tool_lens)))))) {
		rc = -1;
		goto out;
	}
	/* each tool as the template's tojson writes it */
	for (size_t i = 0; i < oq->n_tools; i++) {
		if (!(tools[i] = chat_tojson(oq->tools[i].obj))) {
			rc = -1;
			goto out;
		}
		tool_lens[i] = strlen(tools[i]);
	}
	for (size_t i = 0, c = 0; i < oq->n_messages; i++) {
		const struct oai_message *om = &oq->messages[i];
		/* developer is OpenAI's newer name for the system turn */
		const char *role = strcmp(om->role, "developer") ? om->role : "system";

		m[i] = (struct chat_msg){.role = role,
		                         .content = om->text,
		                         .role_len = strlen(role),
		                         .content_len = om->len,
		                         .reasoning = om->reasoning,
		                         .reasoning_len = om->reasoning_len,
		                         .has_reasoning = om->reasoning != NULL,
		                         .calls = om->n_calls ? calls + c : NULL,
		                         .n_calls = om->n_calls};
		for (size_t k = 0; k < om->n_calls; k++, c++)
			calls[c] = (struct chat_call){.name = om->calls[k].name,
			                              .args = om->calls[k].args,
			                              .name_len = om->calls[k].name_len,
			                              .args_len = om->calls[k].args_len};
	}
	if (oq->thinking_set && !oq->thinking)
		flags |= CHAT_NO_THINKING;
	/* the sizes asked, the spans' count too: the XML form writes each
	 * argument and each tool field as spans, more than the counts of
	 * messages, tools and calls bound (a refusal leaves len 0) */
	rc = chat_render_tools_spans(&h->tmpl, m, oq->n_messages, (const char *const *)tools,
	                             tool_lens, oq->n_tools, flags, NULL, 0, &len, NULL, 0, &spcap,
	                             &eb);
	if (rc && len)
		rc = 0;
	if (!rc && spcap > 128 && !(sp = calloc(spcap, sizeof(*sp))))
		rc = -1;
	else if (!rc && spcap <= 128)
		spcap = 128;
	if (!rc && !(*text = malloc(len + 1)))
		rc = -1;
	else if (!rc)
		rc = chat_render_tools_spans(&h->tmpl, m, oq->n_messages,
		                             (const char *const *)tools, tool_lens, oq->n_tools,
		                             flags, *text, len + 1, &len, sp, spcap, &nsp, &eb);
out:
	for (size_t i = 0; tools && i < oq->n_tools; i++)
		free(tools[i]);
	free(tools);
	free(tool_lens);
	free(calls);
	if (rc == -1 && !eb.msg[0])
		snprintf(eb.msg, sizeof eb.msg, "no memory");
	if (m != msgs)
		free(m);
	if (!rc && len > MSG_TEXT_MAX) {
		oai_errf(e, 413, "messages", "context_length_exceeded",
		         "the rendered conversation holds %zu bytes; accepted: up to %u", len,
		         MSG_TEXT_MAX);
		rc = 1;
	} else if (!rc && 2 * nsp > MSG_IDS_MAX) {
		oai_errf(e, 413, "messages", "context_length_exceeded",
		         "the conversation holds %zu pieces of text; accepted: up to %u", nsp,
		         MSG_IDS_MAX / 2);
		rc = 1;
	} else if (rc) {
		oai_errf(e, 400,
		         !strncmp(eb.msg, "tools:", 6) ? "tools"
		         : oq->thinking_set            ? "chat_template_kwargs"
		                                       : "messages",
		         "invalid_value", "the chat template: %s",
		         eb.msg[0] ? eb.msg : "no memory");
	}
	if (rc) {
		if (sp != spans)
			free(sp);
		free(*text);
		*text = NULL;
		return -1;
	}
	(*text)[len] = '\0';
	q->text = (struct msg_str){*text, (uint32_t)len};
	q->plain.n = (uint32_t)(2 * nsp);
	for (size_t i = 0; i < nsp; i++) {
		q->plain.v[2 * i] = (uint32_t)sp[i].start;
		q->plain.v[2 * i + 1] = (uint32_t)sp[i].end;
	}
	if (sp != spans)
		free(sp);
	return 0;
}

/* The grammar the request asks for (constrain.h), into the submit's
 * grammar fields: *gbnf holds its text (NULL when none) until the submit
 * is encoded. */
static int http__constrain(const struct http *h, const struct oai_req *oq, struct msg_fd_submit *q,
                           char **gbnf, struct oai_err *e)
{
	const struct cst_in in = {
	    .format = h->tmpl.tools == CHAT_TOOLS_HERMES ? OP_HERMES
	              : h->tmpl.tools == CHAT_TOOLS_XML  ? OP_QWEN_XML
	                                                 : OP_PLAIN,
	    .thinking = h->tmpl.thinking && !(oq->thinking_set && !oq->thinking),
	    .think_open = cst_think_open(q->text.p, q->text.n),
	};
	const char *trigger;
	size_t n;

	*gbnf = NULL;
	if (oq->kind != OAI_CHAT || !h->has_template)
		return 0;
	if (cst_grammar(oq, &in, gbnf, &trigger, e))
		return -1;
	if (!*gbnf)
		return 0;
	n = strlen(*gbnf);
	if (n > MSG_GRAMMAR_MAX) {
		oai_errf(e, 400, oq->format != OAI_RF_TEXT ? "response_format" : "tools",
		         "invalid_value",
		         "the grammar made of the schema%s holds %zu bytes; accepted: up to %u "
		         "(a smaller schema, or fewer tools)",
		         oq->format != OAI_RF_TEXT ? "" : "s", n, MSG_GRAMMAR_MAX);
		free(*gbnf);
		*gbnf = NULL;
		return -1;
	}
	q->grammar = (struct msg_str){*gbnf, (uint32_t)n};
	q->grammar_trigger = msg_str_of(trigger);
	return 0;
}

/* Submit the parsed request at the door. */
static bool http__op_start(struct hreq *r);
static struct hreq *http__choice(struct hreq *r, uint32_t i);

static int http__submit(struct hreq *r, struct oai_err *e)
{
	struct http *h = r->h;
	const struct oai_req *oq = &r->q;
	struct ig_errbuf eb = {0};
	struct msg *m;
	struct msg_fd_submit *q;
	char *text = NULL, *gbnf = NULL;
	uint64_t seed;
	uint32_t n;
	int rc;

	if (!atomic_load(&h->ready)) {
		oai_errf(e, 503, NULL, "not_ready",
		         "the model is not being served yet (the gpu-worker is starting or "
		         "restarting); try again");
		return -1;
	}
	if (!(m = calloc(1, sizeof(*m)))) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	m->type = MSG_FD_SUBMIT;
	q = &m->u.fd_submit;
	if (http__prompt(h, oq, q, &text, e)) {
		free(m);
		return -1;
	}
	r->think_open = cst_think_open(q->text.p, q->text.n);
	if (http__constrain(h, oq, q, &gbnf, e)) {
		free(text);
		free(m);
		return -1;
	}
	if (!http__op_start(r)) {
		free(gbnf);
		free(text);
		free(m);
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}

	/* max_tokens 0 (only with echo): one token generated, as the prompt's
	 * last logits are computed anyway, and left out of the answer */
	q->max_tokens = oq->max_zero ? 1 : oq->max_tokens;
	q->class = msg_str_of(oq->agent ? "agent" : "interactive");
	q->temperature = oq->temperature;
	q->top_p = oq->top_p;
	q->top_k = oq->top_k;
	/* no seed: a fresh one, as OpenAI's unseeded sampling */
	if (oq->seed_set)
		seed = (uint64_t)oq->seed;
	else if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
		seed = (uint64_t)time(NULL) ^ atomic_fetch_add(&h->seq, 1);
	q->seed = seed;
	q->stop.n = (uint32_t)oq->n_stop;
	for (size_t i = 0; i < oq->n_stop; i++)
		q->stop.v[i].text = msg_str_of(oq->stop[i]);
	q->logprobs = oq->logprobs;
	q->top_logprobs = oq->logprobs ? oq->top_logprobs : 0;
	/* echo: the worker's prompt with logprobs, or of ids (whose text only
	 * the worker decodes: docs/adr/0025), asked with logprobs then, top 0,
	 * none of them written; a string's echo without logprobs is the string */
	q->echo = oq->echo && (oq->logprobs || !oq->prompt);
	q->logprobs = q->logprobs || q->echo;
	if (oq->logprobs && !r->lpt && !(r->lpt = malloc(sizeof(*r->lpt)))) {
		free(gbnf);
		free(text);
		free(m);
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	/* n choices: choice i a request of its own, seed + i (the worker
	 * prefills their shared prompt once: docs/adr/0059) */
	n = oq->n > 1 ? oq->n : 1; /* 0: a request read elsewhere, one choice */
	if (n > 1 && !(r->more = calloc(n - 1, sizeof(*r->more))))
		rc = IG_E_NOMEM;
	else
		rc = IG_E_OK;
	for (uint32_t i = 1; !rc && i < n; i++) {
		struct hreq *c = &r->more[i - 1];

		*c = (struct hreq){
		    .h = h, .con = r->con, .hc = r->hc, .q = r->q, .top = r, .index = i};
		r->n_more = i;
		if (!http__op_start(c) || (oq->logprobs && !(c->lpt = malloc(sizeof(*c->lpt)))))
			rc = IG_E_NOMEM;
	}
	for (uint32_t i = 0; !rc && i < n; i++) {
		q->seed = seed + i;
		rc = door_local_submit(h->door, m, r->hc ? r->hc->peer : 0, &http__choice(r, i)->dr,
		                       &eb);
	}
	if (rc == IG_E_NOMEM && !eb.msg[0])
		snprintf(eb.msg, sizeof eb.msg, "out of memory for %u choices", n);
	free(gbnf);
	free(text);
	free(m);
	if (rc) {
		http__refusal(rc, eb.msg, oq->kind, e);
		return -1;
	}
	return 0;
}

/* ---- waiting for the door ----------------------------------------------------- */

/* The door's wake: the request's connection goes on (libmicrohttpd's thread
 * calls us again). Called under the door's lock; resume only signals. */
static void http__wake(void *arg)
{
	struct hreq *r = arg;

	if (atomic_exchange(&r->susp, false))
		MHD_resume_connection(r->con);
}

/* Wait for the door's next news: the connection suspended, the wake armed
 * (or, when news came meanwhile, resumed at once). From libmicrohttpd's
 * thread, in a callback of this connection. */
static void http__suspend(struct hreq *r, uint32_t wait_ms)
{
	bool armed = true;

	MHD_suspend_connection(r->con);
	atomic_store(&r->susp, true);
	/* any choice's news wakes it: the first wake resumes it, a later one
	 * of an arming before finds it resumed (or resumes a later wait, which
	 * looks and waits again) */
	for (uint32_t i = 0; armed && i <= r->n_more; i++) {
		struct hreq *c = i ? &r->more[i - 1] : r;

		if (!c->c_done && !c->nw.done)
			armed = door_local_wait(r->h->door, c->dr, c->ver, wait_ms, http__wake, r);
	}
	if (!armed && atomic_exchange(&r->susp, false))
		MHD_resume_connection(r->con);
}

/* Did the client reset its connection? A client that only closed its
 * sending side (HTTP lets one, after its request) has an answer coming:
 * its end of stream is not a hang-up. */
static bool http__reset(const struct hreq *r)
{
	char b;

	if (!r->hc || r->hc->fd < 0)
		return false;
	if (recv(r->hc->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
		return false;
	return errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN || errno == ETIMEDOUT;
}

/* ---- streams -------------------------------------------------------------- */

/* Queue `n` bytes, or an SSE event "data: <json>\n\n" (json freed). */
static bool http__out(struct hreq *r, const char *p, size_t n)
{
	if (r->top)
		r = r->top; /* a choice's bytes are its request's stream */
	if (r->out_len + n > r->out_cap) {
		size_t cap = (r->out_len + n) * 2 + 256;
		char *o = realloc(r->out, cap);

		if (!o)
			return false;
		r->out = o;
		r->out_cap = cap;
	}
	memcpy(r->out + r->out_len, p, n);
	r->out_len += n;
	return true;
}

static bool http__event(struct hreq *r, char *json)
{
	bool ok;

	json = oai_chunk_at(json, r->index); /* its choice's index */
	ok = json && http__out(r, "data: ", 6) && http__out(r, json, strlen(json)) &&
	     http__out(r, "\n\n", 2);

	free(json);
	return ok;
}

/* Characters (code points) of n bytes of UTF-8: the worker's text is. */
static uint64_t http__chars(const char *p, size_t n)
{
	uint64_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)p[i] & 0xc0) != 0x80;
	return c;
}

/* One token's entry (door_lp_tok d, at text_offset `off`) added to `a`;
 * d->n 0 (the prompt's first token): its text `tok` alone, no logprobs.
 * -1 when out of memory. */
static int http__lp_add(struct oai_lps *a, struct oai_lp_tok *t, const struct door_lp_tok *d,
                        struct oai_lp_alt tok, uint64_t off)
{
	t->none = !d->n;
	t->tok = d->n ? (struct oai_lp_alt){d->e[0].bytes, d->e[0].len, d->e[0].lp} : tok;
	t->n_top = 0;
	for (uint32_t j = 1; j < d->n && t->n_top < OAI_TOP_LP_MAX; j++)
		t->top[t->n_top++] = (struct oai_lp_alt){d->e[j].bytes, d->e[j].len, d->e[j].lp};
	t->text_offset = off;
	return oai_lps_add(a, t);
}

/*
 * The log-probabilities of tokens [r->lp_from, to) into the accumulator
 * *out (a new one when NULL; left NULL when the request asked none),
 * r->text holding the text that starts at r->text_bytes, after
 * r->text_chars characters (for completions' text_offset); r->lp_from
 * moves to `to`. False when out of memory (*out freed).
 */
static bool http__lps(struct hreq *r, uint32_t to, struct oai_lps **out)
{
	struct oai_lp_tok *t;

	if (!r->q.logprobs)
		return true;
	if ((!*out && !(*out = oai_lps_new(r->q.kind))) || !(t = malloc(sizeof(*t)))) {
		oai_lps_free(*out);
		*out = NULL;
		return false;
	}
	for (; r->lp_from < to; r->lp_from++) {
		const struct door_lp_tok *d = r->lpt;
		uint64_t off;

		if (door_local_logprobs(r->h->door, r->dr, r->lp_from, r->lpt) || !d->n)
			continue; /* none (cannot be: every token of the request has them) */
		off = d->text_off > r->text_bytes ? d->text_off - r->text_bytes : 0;
		if (off > r->text_len)
			off = r->text_len;
		if (http__lp_add(*out, t, d, (struct oai_lp_alt){0},
		                 r->text_chars + http__chars(r->text, off))) {
			free(t);
			oai_lps_free(*out);
			*out = NULL;
			return false;
		}
	}
	free(t);
	return true;
}

/* The prompt's echo is at hand: the client's string, or the worker's
 * text of the prompt (and its log-probabilities) all kept at the door. */
static bool http__echo_ready(const struct hreq *r)
{
	return r->nw.prompt_in || (!r->q.logprobs && r->q.prompt);
}

/*
 * The echo of r's prompt (completions' echo, once http__echo_ready): its
 * text, the client's string or the worker's text of its ids
 * (door_local_prompt), malloc'd into *text (*len bytes), and with logprobs
 * its tokens' entries into *lps (a new accumulator): the first token's
 * text alone, null logprobs, then each token's as a generated one's;
 * text_offset in characters of the worker's text of the prompt (the
 * string's whenever it holds no special token's text: the text of specials
 * is not decoded). False when out of memory (nothing held).
 */
static bool http__echo(struct hreq *r, char **text, size_t *len, struct oai_lps **lps)
{
	struct oai_lp_tok *t = NULL;
	char *wt = NULL;
	size_t wlen = 0;
	uint32_t n = 0;
	bool ok = false;

	*text = NULL;
	*len = 0;
	*lps = NULL;
	if ((r->q.logprobs || !r->q.prompt) && door_local_prompt(r->h->door, r->dr, &wt, &wlen, &n))
		return false;
	if (!(*text = r->q.prompt ? strndup(r->q.prompt, r->q.prompt_len) : wt))
		goto out;
	*len = r->q.prompt ? r->q.prompt_len : wlen;
	if (!r->q.prompt)
		wt = NULL; /* *text's */
	ok = true;
	if (!r->q.logprobs)
		goto out;
	ok = (*lps = oai_lps_new(r->q.kind)) && (t = malloc(sizeof(*t)));
	for (uint32_t i = 0; ok && i < n; i++) {
		const struct door_lp_tok *d = r->lpt;
		const char *p = r->q.prompt ? wt : *text; /* the worker's text */

		if (door_local_prompt_logprobs(r->h->door, r->dr, i, r->lpt))
			continue; /* none (cannot be once the prompt is in) */
		ok = !http__lp_add(*lps, t, d,
		                   (struct oai_lp_alt){(const uint8_t *)p + d->text_off,
		                                       d->text_end - d->text_off, 0},
		                   http__chars(p, d->text_off));
	}
out:
	free(t);
	free(wt);
	if (!ok) {
		free(*text);
		oai_lps_free(*lps);
		*text = NULL;
		*lps = NULL;
	}
	return ok;
}

/* The events of the news the stream holds (r->nw, r->text). */
/* ---- a chat answer taken apart (outparse.h) ------------------------------ */

/* The parser for a chat request, by the template's forms and the request's
 * tools: false when out of memory. */
static bool http__op_start(struct hreq *r)
{
	const struct http *h = r->h;
	const struct oai_req *q = &r->q;
	struct op_opts o = {
	    .format = h->tmpl.tools == CHAT_TOOLS_HERMES ? OP_HERMES
	              : h->tmpl.tools == CHAT_TOOLS_XML  ? OP_QWEN_XML
	                                                 : OP_PLAIN,
	    .calls = q->n_tools && q->tool_choice != OAI_TC_NONE,
	    /* reasoning comes apart where the template thinks and it is on */
	    .thinking = h->tmpl.thinking && !(q->thinking_set && !q->thinking),
	};

	if (q->kind != OAI_CHAT || !h->has_template)
		return true;
	if (q->n_tools && !(r->op_tools = calloc(q->n_tools, sizeof(*r->op_tools))))
		return false;
	for (size_t i = 0; i < q->n_tools; i++)
		r->op_tools[i] = (struct op_tool){q->tools[i].name, q->tools[i].params};
	o.tools = r->op_tools;
	o.n_tools = q->n_tools;
	/* a template that opens the block itself (Qwen3.5's): the answer
	 * starts inside it */
	o.think_open = o.thinking && r->think_open;
	op_init(&r->op, &o);
	r->op_on = true;
	return true;
}

static void http__call_id(const struct hreq *r, uint32_t index, char *out, size_t cap)
{
	const char *tail = strchr(r->rid, '-');

	if (r->index) /* ids unique across the choices */
		snprintf(out, cap, "call_%s_%u_%u", tail ? tail + 1 : r->rid, r->index, index);
	else
		snprintf(out, cap, "call_%s_%u", tail ? tail + 1 : r->rid, index);
}

static bool http__grow(char **p, size_t *len, const char *s, size_t n)
{
	char *q = realloc(*p, *len + n + 1);

	if (!q)
		return false;
	memcpy(q + *len, s, n);
	*len += n;
	q[*len] = '\0';
	*p = q;
	return true;
}

/* An event of a whole answer: collected. */
static int http__op_collect(void *ctx, const struct op_ev *ev)
{
	struct hreq *r = ctx;
	struct oai_call *c;

	if (ev->kind != OP_REASONING && ev->kind != OP_CONTENT && ev->index && !r->q.parallel_calls)
		return 0; /* parallel_tool_calls false: the first call only */
	if (r->ans)
		return r->api->ans_event(r->ans, ev);
	switch (ev->kind) {
	case OP_REASONING:
		return http__grow(&r->a_reason, &r->a_reason_len, ev->text, ev->len) ? 0
		                                                                     : IG_E_NOMEM;
	case OP_CONTENT:
		return http__grow(&r->a_content, &r->a_content_len, ev->text, ev->len) ? 0
		                                                                       : IG_E_NOMEM;
	case OP_CALL_BEGIN:
		if (!(c = realloc(r->a_calls, (r->a_n_calls + 1) * sizeof(*c))))
			return IG_E_NOMEM;
		r->a_calls = c;
		c = &r->a_calls[r->a_n_calls++];
		memset(c, 0, sizeof(*c));
		http__call_id(r, ev->index, c->id, sizeof c->id);
		if (!(c->name = strndup(ev->text, ev->len)))
			return IG_E_NOMEM;
		return http__grow(&c->args, &c->args_len, "", 0) ? 0 : IG_E_NOMEM;
	case OP_CALL_ARGS:
		c = &r->a_calls[r->a_n_calls - 1];
		return http__grow(&c->args, &c->args_len, ev->text, ev->len) ? 0 : IG_E_NOMEM;
	case OP_CALL_END:
		return 0;
	}
	return 0;
}

/* An event of a stream: its chunk, the feed's logprobs on the first. */
static int http__op_chunk(void *ctx, const struct op_ev *ev)
{
	struct hreq *r = ctx;
	char id[48];
	char *json = NULL;

	if (ev->kind != OP_REASONING && ev->kind != OP_CONTENT && ev->index && !r->q.parallel_calls)
		return 0;
	if (r->ans) {
		if (ev->kind == OP_CALL_BEGIN)
			r->op_calls = true;
		if (r->api->ans_event(r->ans, ev)) {
			r->ev_ok = false;
			return IG_E_IO;
		}
		return 0;
	}
	switch (ev->kind) {
	case OP_CONTENT:
		json = oai_chunk_json(OAI_CHAT, r->rid, r->created, r->q.model, false, ev->text,
		                      ev->len, NULL, NULL, r->ev_lps);
		break;
	case OP_REASONING:
		json = oai_delta_json(r->rid, r->created, r->q.model, OAI_D_REASONING, 0, NULL,
		                      ev->text, ev->len, r->ev_lps);
		break;
	case OP_CALL_BEGIN:
		r->op_calls = true;
		http__call_id(r, ev->index, id, sizeof id);
		json = oai_delta_json(r->rid, r->created, r->q.model, OAI_D_CALL, ev->index, id,
		                      ev->text, ev->len, r->ev_lps);
		break;
	case OP_CALL_ARGS:
		json = oai_delta_json(r->rid, r->created, r->q.model, OAI_D_ARGS, ev->index, NULL,
		                      ev->text, ev->len, r->ev_lps);
		break;
	case OP_CALL_END:
		return 0;
	}
	oai_lps_free(r->ev_lps);
	r->ev_lps = NULL;
	if (!http__event(r, json)) {
		r->ev_ok = false;
		return IG_E_IO;
	}
	return 0;
}

/* Another API's stream (wire.h): its sink is the stream's bytes. */
static bool http__put(void *ctx, const char *p, size_t n)
{
	return http__out(ctx, p, n);
}

/* Another API's answer, begun at admission: where a stream's events go,
 * and (a stream) its opening events. */
static bool http__wire_begin(struct hreq *r)
{
	struct wire_sink sink = {http__put, r};
	struct oai_usage u = {r->nw.prompt_tokens, 0, r->nw.cached};

	if (!r->ans && !(r->ans = r->api->ans_new(&r->q, r->rid, r->q.model, r->created,
	                                          r->q.stream ? &sink : NULL)))
		return false;
	return !r->api->ans_begin(r->ans, &u);
}

/* Another API's end: its closing events, or its error event. */
static bool http__wire_end(struct hreq *r)
{
	const struct door_news *nw = &r->nw;
	struct wire_end end = {nw->finish,
	                       {nw->prompt_tokens, nw->generated, nw->cached},
	                       r->op_on ? r->op.bad_calls : 0};

	if (!strcmp(nw->finish, "error")) {
		struct oai_err e;

		oai_errf(&e, 503, NULL, "generation_failed", "the request failed: %s",
		         nw->message[0] ? nw->message : "the worker stopped");
		return !r->api->ans_fail(r->ans, &e);
	}
	return !r->api->ans_end(r->ans, &end);
}

/* A stream's echo (completions' echo): the prompt's text and its logprobs
 * as its first chunk, once at hand; the text_offset of what follows counts
 * from its end. */
static bool http__emit_echo(struct hreq *r)
{
	struct oai_lps *lps;
	char *text;
	size_t len;
	bool ok;

	if (!http__echo(r, &text, &len, &lps))
		return false;
	ok = http__event(r, oai_chunk_json(r->q.kind, r->rid, r->created, r->q.model, false, text,
	                                   len, NULL, NULL, lps));
	r->text_chars += http__chars(text, len);
	r->echoed = true;
	free(text);
	oai_lps_free(lps);
	return ok;
}

static bool http__emit(struct hreq *r)
{
	const struct door_news *nw = &r->nw;

	r->fresh = false;
	if (r->q.echo && !r->echoed) {
		/* the prompt first: the text that came meanwhile waits (in
		 * r->text) for the news that the prompt is in */
		if (http__echo_ready(r)) {
			if (!http__emit_echo(r))
				return false;
		} else if (!nw->done) {
			return true;
		}
	}
	if (r->q.max_zero) { /* the one token generated is not the answer's */
		r->text_len = 0;
		r->lp_from = r->from;
	}
	/* a move between tiers, told as a comment line clients skip */
	if (strcmp(nw->state, r->state)) {
		bool moving = !strncmp(nw->state, "moving", 6) || !strcmp(nw->state, "moved") ||
		              !strncmp(r->state, "moving", 6) || !strcmp(r->state, "moved");

		snprintf(r->state, sizeof r->state, "%s", nw->state);
		if (moving) {
			char line[128];
			int n = snprintf(line, sizeof line,
			                 ": ignis {\"index\":%u,\"state\":\"%s\"}\n\n", r->index,
			                 r->state);

			if (!http__out(r, line, (size_t)n))
				return false;
		}
	}
	if (r->text_len || (nw->done && r->q.logprobs && r->lp_from < r->from)) {
		/* the text, with the log-probabilities of the tokens it came with:
		 * a token that adds no text yet (a character's first bytes, a
		 * special) waits for the text that holds it, or for the end */
		struct oai_lps *lps = NULL;
		bool ok = http__lps(r, r->from, &lps);

		if (ok && r->op_on) {
			/* taken apart: each event a chunk, the logprobs on the
			 * first; none when nothing came out yet but logprobs */
			r->ev_lps = lps;
			r->ev_ok = true;
			ok = !op_feed(&r->op, r->text, r->text_len, http__op_chunk, r) && r->ev_ok;
			lps = r->ev_lps;
			r->ev_lps = NULL;
			if (ok && lps && oai_lps_count(lps))
				ok = http__event(r, oai_chunk_json(OAI_CHAT, r->rid, r->created,
				                                   r->q.model, false, "", 0, NULL,
				                                   NULL, lps));
		} else
			ok = ok && http__event(r, oai_chunk_json(r->q.kind, r->rid, r->created,
			                                         r->q.model, false, r->text,
			                                         r->text_len, NULL, NULL, lps));
		oai_lps_free(lps);
		if (!ok)
			return false;
	}
	r->text_bytes += r->text_len;
	r->text_chars += http__chars(r->text, r->text_len);
	r->text_len = 0;
	if (!nw->done)
		return true;
	r->c_done = true;
	if (r->op_on && strcmp(nw->finish, "error")) { /* what the parser held */
		r->ev_ok = true;
		if (op_finish(&r->op, http__op_chunk, r) || !r->ev_ok)
			return false;
	}
	if (r->ans)
		return http__wire_end(r);
	if (!strcmp(nw->finish, "error")) {
		struct oai_err e;

		oai_errf(&e, 503, NULL, "generation_failed", "the request failed: %s",
		         nw->message[0] ? nw->message : "the worker stopped");
		if (!http__event(r, oai_error_json(&e)))
			return false;
	} else if (!http__event(r, oai_chunk_json(r->q.kind, r->rid, r->created, r->q.model, false,
	                                          "", 0, http__finish_reason(r, r->op_calls), NULL,
	                                          NULL))) {
		return false;
	}
	return true;
}

/* Choice i of r (0: r itself). */
static struct hreq *http__choice(struct hreq *r, uint32_t i)
{
	return i ? &r->more[i - 1] : r;
}

/* The request's usage: its prompt counted once (choice 0's, as its cached
 * tokens: the other choices start from its prefill), the tokens of every
 * choice summed. */
static struct oai_usage http__usage(struct hreq *r)
{
	struct oai_usage u = {r->nw.prompt_tokens, 0, r->nw.cached};

	for (uint32_t i = 0; i <= r->n_more && !r->q.max_zero; i++)
		u.completion += http__choice(r, i)->nw.generated;
	return u;
}

/* Every choice's last chunk written: the usage (when asked) and the end. */
static bool http__end(struct hreq *r)
{
	r->finished = true;
	if (r->ans)
		return true; /* another API's closing events: http__wire_end */
	if (r->q.include_usage) {
		struct oai_usage u = http__usage(r);

		if (!http__event(r, oai_chunk_json(r->q.kind, r->rid, r->created, r->q.model, false,
		                                   NULL, 0, NULL, &u, NULL)))
			return false;
	}
	return http__out(r, "data: [DONE]\n\n", 14);
}

/* The stream's next bytes into r->out: 1 when something was taken (maybe
 * nothing to write), 0 when there is no news, -1 when it cannot go on. */
static int http__produce(struct hreq *r)
{
	bool took = false, done = true;
	int rc;

	if (r->first) { /* a chat's stream opens with the assistant's role, a choice each */
		r->first = false;
		if (r->api)
			return http__wire_begin(r) ? 1 : -1;
		if (r->q.kind == OAI_CHAT) {
			for (uint32_t i = 0; i <= r->n_more; i++)
				if (!http__event(http__choice(r, i),
				                 oai_chunk_json(OAI_CHAT, r->rid, r->created,
				                                r->q.model, true, "", 0, NULL, NULL,
				                                NULL)))
					return -1;
			return 1;
		}
	}
	/* the choices' news as it comes, interleaved (as OpenAI streams them) */
	for (uint32_t i = 0; i <= r->n_more; i++) {
		struct hreq *c = http__choice(r, i);

		if (c->c_done)
			continue;
		if (!c->fresh) {
			rc = door_local_read(r->h->door, c->dr, &c->ver, &c->from, &c->nw, &c->text,
			                     &c->text_len);
			if (rc < 0)
				return rc;
			c->fresh = rc > 0;
		}
		if (c->fresh) {
			if (!http__emit(c))
				return -1;
			took = true;
		}
		done = done && c->c_done;
	}
	if (done)
		return http__end(r) ? 1 : -1;
	return took;
}

static ssize_t http__read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct hreq *r = cls;

	(void)pos;
	for (;;) {
		uint64_t now;
		int rc;

		if (r->out_off < r->out_len) {
			size_t n = r->out_len - r->out_off < max ? r->out_len - r->out_off : max;

			memcpy(buf, r->out + r->out_off, n);
			r->out_off += n;
			r->last_ms = clk_mono_ms();
			return (ssize_t)n;
		}
		r->out_len = r->out_off = 0;
		if (r->finished)
			return MHD_CONTENT_READER_END_OF_STREAM;
		rc = http__produce(r);
		if (rc < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (rc > 0)
			continue;
		/* nothing came for a while: a comment, so a client that left is
		 * found (its write fails) */
		now = clk_mono_ms();
		if (now - r->last_ms >= HTTP_WAIT_MS) {
			if (!http__out(r, ": \n\n", 4))
				return MHD_CONTENT_READER_END_WITH_ERROR;
			continue;
		}
		http__suspend(r, (uint32_t)(HTTP_WAIT_MS - (now - r->last_ms)));
		return 0;
	}
}

static enum MHD_Result http__stream_start(struct hreq *r)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, http__read, r, NULL);
	enum MHD_Result rc;

	if (!resp)
		return MHD_NO;
	r->st = HR_STREAM;
	r->first = true;
	r->last_ms = clk_mono_ms();
	snprintf(r->state, sizeof r->state, "queued");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	http__cors(resp, r->origin);
	rc = MHD_queue_response(r->con, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* ---- whole answers, and waiting for admission ------------------------------ */

/* Choice c of a whole answer into *o: its text taken apart (a chat's) and
 * its logprobs (*lps, the caller's to free). False when out of memory. */
static bool http__whole_choice(struct hreq *c, struct oai_choice *o, struct oai_parts *parts,
                               struct oai_lps **lps)
{
	*lps = NULL;
	if (c->q.max_zero) { /* the one token generated is not the answer's */
		c->text_len = 0;
		c->lp_from = c->from;
	}
	if (c->op_on &&
	    (op_feed(&c->op, c->text ? c->text : "", c->text_len, http__op_collect, c) ||
	     op_finish(&c->op, http__op_collect, c)))
		return false;
	if (c->q.echo) {
		/* the prompt's text, then the completion's; its entries first,
		 * the completion's text_offset counting from its end */
		char *text, *all;
		size_t len;

		if (!http__echo(c, &text, &len, lps))
			return false;
		c->text_chars = http__chars(text, len);
		if (!http__lps(c, c->from, lps) || !(all = realloc(text, len + c->text_len + 1))) {
			free(text);
			return false;
		}
		if (c->text_len)
			memcpy(all + len, c->text, c->text_len);
		all[len + c->text_len] = '\0';
		free(c->text);
		c->text = all;
		c->text_len += len;
	} else if (!http__lps(c, c->from, lps)) {
		return false;
	}
	*parts = (struct oai_parts){c->a_reason,      c->a_content, c->a_reason_len,
	                            c->a_content_len, c->a_calls,   c->a_n_calls};
	*o = (struct oai_choice){c->text ? c->text : "", c->text_len,
	                         http__finish_reason(c, c->a_n_calls > 0), *lps,
	                         c->op_on ? parts : NULL};
	return true;
}

static enum MHD_Result http__whole_answer(struct hreq *r)
{
	uint32_t n = 1 + r->n_more, i;
	struct oai_usage u = http__usage(r);
	struct oai_choice ch[OAI_N_MAX];
	struct oai_parts parts[OAI_N_MAX];
	struct oai_lps *lps[OAI_N_MAX] = {0};
	char *json = NULL;
	struct oai_err e;

	for (i = 0; i < n; i++) {
		const struct door_news *nw = &http__choice(r, i)->nw;

		if (!strcmp(nw->finish, "error")) {
			oai_errf(&e, 503, NULL, "generation_failed",
			         "the request did not complete: %s",
			         nw->message[0] ? nw->message : "the worker stopped");
			return http__error(r, &e);
		}
	}
	if (r->api) { /* another API's answer (one choice) */
		if (!http__wire_begin(r) ||
		    (r->op_on &&
		     (op_feed(&r->op, r->text ? r->text : "", r->text_len, http__op_collect, r) ||
		      op_finish(&r->op, http__op_collect, r))) ||
		    !http__wire_end(r)) {
			oai_errf(&e, 500, NULL, NULL, "out of memory for the answer");
			return http__error(r, &e);
		}
		return http__json(r, MHD_HTTP_OK, r->api->ans_json(r->ans));
	}
	for (i = 0; i < n; i++)
		if (!http__whole_choice(http__choice(r, i), &ch[i], &parts[i], &lps[i]))
			break;
	if (i == n)
		json =
		    oai_choices_json(r->q.kind, r->rid, (int64_t)time(NULL), r->q.model, ch, n, &u);
	for (i = 0; i < n; i++)
		oai_lps_free(lps[i]);
	if (!json) {
		oai_errf(&e, 500, NULL, NULL, "out of memory for the answer");
		return http__error(r, &e);
	}
	return http__json(r, MHD_HTTP_OK, json);
}

/* A submitted request: its admission, then (whole) its end. */
static enum MHD_Result http__await(struct hreq *r)
{
	bool admitted = true, done = true;
	struct oai_err e;

	for (uint32_t i = 0; i <= r->n_more; i++) {
		struct hreq *c = http__choice(r, i);

		for (;;) {
			int rc = door_local_read(r->h->door, c->dr, &c->ver, &c->from, &c->nw,
			                         &c->text, &c->text_len);

			if (rc < 0) {
				oai_errf(&e, 500, NULL, NULL, "out of memory for the answer");
				return http__error(r, &e);
			}
			if (!rc)
				break;
			if (c->nw.refused) {
				http__refusal(c->nw.code, c->nw.message, r->q.kind, &e);
				return http__error(r, &e);
			}
		}
		admitted = admitted && (c->nw.admitted || c->nw.done);
		done = done && c->nw.done;
	}
	/* every choice admitted: a stream starts (each choice's news so far
	 * is its first to write), a whole answer waits for every end */
	if (r->st == HR_ADMIT && admitted) {
		/* a count: the prompt's tokens are known; the request is
		 * cancelled when released */
		if (r->route == R_MESSAGES_COUNT)
			return http__json(r, MHD_HTTP_OK, r->api->count_json(r->nw.prompt_tokens));
		if (r->q.stream) {
			for (uint32_t i = 0; i <= r->n_more; i++)
				http__choice(r, i)->fresh = true;
			return http__stream_start(r);
		}
		r->st = HR_WHOLE;
	}
	if (r->st == HR_WHOLE && done)
		return http__whole_answer(r);
	if (http__reset(r))
		return MHD_NO; /* nobody to answer: closed, and released at the door */
	http__suspend(r, HTTP_WAIT_MS);
	return MHD_YES;
}

/* ---- /tokenize and /detokenize ------------------------------------------- */

/* The bytes token `id` stands for, with a special token's text (as
 * /detokenize gives it back, so that text holding <|im_start|> round-trips
 * through /tokenize): the model's tokenizer's piece. False past the
 * vocabulary. */
static bool http__piece(const struct http *h, uint32_t id, struct oai_piece *p)
{
	return stok_piece(h->tokenizer, h->bpe, id, &p->bytes, &p->len);
}

/* The ids the worker runs for a prompt: the text rendered and spanned as a
 * submit carries it (http__prompt), encoded by the model's tokenizer by the
 * worker's rule (gpu-worker/main.c, worker_submit: a real vocabulary's
 * special tokens parsed outside the chat's message spans, BOS where the
 * file asks; the byte tokenizer's bytes). add_special false leaves BOS out. */
/* The prompt of `oq` rendered (a chat) and encoded as the worker encodes
 * it (the supervisor's copy of the model's tokenizer): *ids (malloc'd, the
 * caller frees) and *n. -1 with *e filled. */
static int http__encode(struct http *h, const struct oai_req *oq, bool add_special, uint32_t **ids,
                        size_t *n, struct oai_err *e)
{
	struct ig_errbuf eb = {0};
	struct chat_span *spans = NULL;
	struct msg *m;
	char *text = NULL;
	size_t nsp;
	int rc = -1;

	*ids = NULL;
	*n = 0;
	if (!(m = calloc(1, sizeof(*m)))) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	if (http__prompt(h, oq, &m->u.fd_submit, &text, e)) {
		free(m);
		return -1;
	}
	nsp = m->u.fd_submit.plain.n / 2;
	if ((nsp && !(spans = calloc(nsp, sizeof(*spans)))) ||
	    !(*ids = malloc((m->u.fd_submit.text.n + 1) * sizeof(**ids)))) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < nsp; i++)
		spans[i] = (struct chat_span){m->u.fd_submit.plain.v[2 * i],
		                              m->u.fd_submit.plain.v[2 * i + 1]};
	rc = stok_encode(h->tokenizer, h->bpe, m->u.fd_submit.text.p, m->u.fd_submit.text.n, spans,
	                 nsp, add_special, *ids, m->u.fd_submit.text.n + 1, n, &eb);
	if (rc) {
		oai_errf(e, rc == IG_E_NOMEM ? 500 : 400, oq->prompt ? "prompt" : "messages",
		         "invalid_value", "the tokenizer: %s", eb.msg);
		rc = -1;
	}
out:
	if (rc) {
		free(*ids);
		*ids = NULL;
	}
	free(spans);
	free(text);
	free(m);
	return rc ? -1 : 0;
}

static enum MHD_Result http__tokenize(struct hreq *r)
{
	struct http *h = r->h;
	const struct oai_req *oq = &r->q;
	struct oai_piece *pieces = NULL;
	uint32_t *ids = NULL;
	char *json = NULL;
	size_t n = 0;
	struct oai_err e;

	if (http__encode(h, oq, oq->add_special, &ids, &n, &e))
		return http__error(r, &e);
	if ((oq->with_pieces || oq->token_strs) && n && !(pieces = calloc(n, sizeof(*pieces)))) {
		oai_errf(&e, 500, NULL, NULL, "out of memory");
		goto out;
	}
	for (size_t i = 0; pieces && i < n; i++)
		http__piece(h, ids[i], &pieces[i]);
	json = oai_tokens_json(ids, n, pieces, h->lim.max_tokens, oq->with_pieces, oq->token_strs);
	if (!json)
		oai_errf(&e, 500, NULL, NULL, "out of memory for the answer");
out:
	free(pieces);
	free(ids);
	return json ? http__json(r, MHD_HTTP_OK, json) : http__error(r, &e);
}

/* The text of ids: their pieces joined, special tokens' text included. */
static enum MHD_Result http__detokenize(struct hreq *r)
{
	const struct oai_req *oq = &r->q;
	char *text = NULL, *json;
	size_t len = 0, cap = 0;
	struct oai_err e;

	for (size_t i = 0; i < oq->n_prompt_ids; i++) {
		struct oai_piece p;

		if (!http__piece(r->h, oq->prompt_ids[i], &p)) {
			free(text);
			oai_errf(
			    &e, 400, "tokens", "invalid_value",
			    "token %zu of 'tokens' is %u, not in the vocabulary; accepted: token "
			    "ids from 0 to %u",
			    i, oq->prompt_ids[i], stok_vocab(r->h->tokenizer, r->h->bpe) - 1);
			return http__error(r, &e);
		}
		if (len + p.len + 1 > cap) {
			char *t = realloc(text, cap = 2 * (len + p.len + 1));

			if (!t) {
				free(text);
				oai_errf(&e, 500, NULL, NULL, "out of memory");
				return http__error(r, &e);
			}
			text = t;
		}
		if (p.len)
			memcpy(text + len, p.bytes, p.len);
		len += p.len;
	}
	json = oai_detokenize_json(text, len);
	free(text);
	if (!json) {
		oai_errf(&e, 500, NULL, NULL, "out of memory for the answer");
		return http__error(r, &e);
	}
	return http__json(r, MHD_HTTP_OK, json);
}

/* ---- routes --------------------------------------------------------------- */

/* The request's `model` is one of the names we serve under. */
static bool http__model_known(const struct http *h, const char *name)
{
	for (size_t i = 0; i < h->nnames; i++)
		if (!strcmp(name, h->names[i]))
			return true;
	return false;
}

static enum MHD_Result http__post(struct hreq *r)
{
	struct http *h = r->h;
	struct oai_err e;
	enum oai_kind kind = r->route == R_COMPLETIONS  ? OAI_COMPLETION
	                     : r->route == R_TOKENIZE   ? OAI_TOKENIZE
	                     : r->route == R_DETOKENIZE ? OAI_DETOKENIZE
	                                                : OAI_CHAT;

	if (r->too_big) {
		oai_errf(&e, 413, NULL, "request_too_large",
		         "the request body is over %zu bytes; accepted: up to %zu", h->lim.max_body,
		         h->lim.max_body);
		return http__error(r, &e);
	}
	if (r->api ? r->api->parse(r->body ? r->body : "", r->len, &h->lim,
	                           r->route == R_MESSAGES_COUNT, &r->q, &e)
	           : oai_parse(kind, r->body ? r->body : "", r->len, &h->lim, &r->q, &e))
		return http__error(r, &e);
	if (r->route == R_MESSAGES_COUNT)
		r->q.max_tokens = 1; /* counted at admission, then cancelled */
	/* the class: the body's ignis.class, else the X-Ignis-Class header */
	if (!r->q.class_set) {
		const char *c =
		    MHD_lookup_connection_value(r->con, MHD_HEADER_KIND, "X-Ignis-Class");

		if (c && strcmp(c, "interactive") && strcmp(c, "agent")) {
			oai_errf(
			    &e, 400, "X-Ignis-Class", "invalid_value",
			    "the X-Ignis-Class header is '%.64s'; accepted: interactive or agent",
			    c);
			return http__error(r, &e);
		}
		r->q.agent = c && !strcmp(c, "agent");
	}
	if (r->q.model[0] && !http__model_known(h, r->q.model)) {
		oai_errf(&e, 404, "model", "model_not_found",
		         "the model '%s' does not exist; accepted: '%s'%s (GET /v1/models)",
		         r->q.model, h->model, h->nnames > 1 ? " or another name it lists" : "");
		return http__error(r, &e);
	}
	if (kind >= OAI_TOKENIZE && h->tokenizer == MDESC_TOK_NONE) {
		oai_errf(&e, 400, NULL, "no_tokenizer",
		         "the model '%s' has no tokenizer (tokenizer none): its prompts are token "
		         "ids",
		         h->model);
		return http__error(r, &e);
	}
	if (kind == OAI_TOKENIZE)
		return http__tokenize(r);
	/* Anthropic's count: the prompt encoded here, as the worker would
	 * (the special tokens the file asks for included) */
	if (r->route == R_MESSAGES_COUNT && h->tokenizer != MDESC_TOK_NONE) {
		uint32_t *ids;
		size_t n;

		if (http__encode(h, &r->q, true, &ids, &n, &e))
			return http__error(r, &e);
		free(ids);
		return http__json(r, MHD_HTTP_OK, r->api->count_json(n));
	}
	if (kind == OAI_DETOKENIZE)
		return http__detokenize(r);
	if (http__submit(r, &e))
		return http__error(r, &e);
	r->st = HR_ADMIT;
	r->created = (int64_t)time(NULL);
	http__rid(h, kind, r->rid, sizeof r->rid);
	for (uint32_t i = 0; i < r->n_more; i++) {
		r->more[i].created = r->created;
		memcpy(r->more[i].rid, r->rid, sizeof r->rid);
	}
	return http__await(r);
}

static enum MHD_Result http__get(struct hreq *r)
{
	struct http *h = r->h;

	switch (r->route) {
	case R_METRICS: {
		char *page;
		size_t len;

		if (h->metrics_page(h->metrics_ctx, &page, &len))
			return MHD_NO;
		return http__send(r, MHD_HTTP_OK, page, "text/plain; version=0.0.4; charset=utf-8");
	}
	case R_MODELS:
		return http__json(r, MHD_HTTP_OK,
		                  oai_models_json((const char *const *)h->names, h->nnames, 0));
	case R_HEALTH:
		return http__json(r, MHD_HTTP_OK, http__strdup("{\"status\":\"ok\"}"));
	case R_READY:
		if (atomic_load(&h->ready))
			return http__json(r, MHD_HTTP_OK, http__strdup("{\"status\":\"ready\"}"));
		return http__json(r, MHD_HTTP_SERVICE_UNAVAILABLE,
		                  http__strdup("{\"status\":\"not ready\"}"));
	default:
		return MHD_NO;
	}
}

static void http__phase(struct http *h, struct hconn *hc, enum hc_phase phase)
{
	if (!hc)
		return;
	pthread_mutex_lock(&h->mu);
	hc->phase = phase;
	hc->since_ms = clk_mono_ms();
	pthread_mutex_unlock(&h->mu);
}

static enum MHD_Result http__handle(void *cls, struct MHD_Connection *con, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **ptr)
{
	struct http *h = cls;
	struct hreq *r = *ptr;

	(void)version;
	if (!r) { /* the headers are in */
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

		if (!(r = calloc(1, sizeof(*r))))
			return MHD_NO;
		r->h = h;
		r->con = con;
		r->hc = ci ? ci->socket_context : NULL;
		*ptr = r;
		http__phase(h, r->hc, HC_BODY);
		return http__headers(r, url, method);
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
	switch (r->st) {
	case HR_BODY: /* the whole request is in */
		http__phase(h, r->hc, HC_BUSY);
		return r->route <= R_POST_LAST ? http__post(r) : http__get(r);
	case HR_ADMIT:
	case HR_WHOLE:
		return http__await(r); /* resumed by the door's wake */
	case HR_STREAM:
		break;
	}
	return MHD_YES;
}

/* What a choice holds: its request at the door released (a request still
 * running is cancelled there), its parser and parts freed. */
static void http__choice_free(struct http *h, struct hreq *c)
{
	door_local_release(h->door, c->dr);
	if (c->op_on)
		op_free(&c->op);
	free(c->op_tools);
	free(c->a_reason);
	free(c->a_content);
	for (size_t i = 0; i < c->a_n_calls; i++) {
		free(c->a_calls[i].name);
		free(c->a_calls[i].args);
	}
	free(c->a_calls);
	oai_lps_free(c->ev_lps);
	free(c->text);
	free(c->lpt);
}

/* A request ended (answered, or its connection closed): released at the
 * door (a request still running is cancelled there), its connection's next
 * request timed from now. */
static void http__done(void *cls, struct MHD_Connection *con, void **ptr,
                       enum MHD_RequestTerminationCode why)
{
	struct http *h = cls;
	struct hreq *r = *ptr;

	(void)con, (void)why;
	if (!r)
		return;
	http__phase(h, r->hc, HC_HEAD);
	for (uint32_t i = 0; i < r->n_more; i++)
		http__choice_free(h, &r->more[i]); /* their q is r's: freed once, below */
	free(r->more);
	http__choice_free(h, r);
	oai_req_free(&r->q);
	if (r->ans)
		r->api->ans_free(r->ans);
	free(r->body);
	free(r->out);
	free(r);
	*ptr = NULL;
}

/* ---- connections and their deadlines ------------------------------------------ */

/* The door's fairness key of a client address (FNV-1a of its bytes), apart
 * from the nng door's keys (pipe ids, below 2^32). */
static uint64_t http__peer(const struct sockaddr *sa)
{
	const unsigned char *p = NULL;
	uint64_t k = 1469598103934665603ull;
	size_t n = 0;

	if (sa && sa->sa_family == AF_INET) {
		p = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)
		        ->sin_addr;
		n = 4;
	} else if (sa && sa->sa_family == AF_INET6) {
		p = (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)sa)
		        ->sin6_addr;
		n = 16;
	}
	for (size_t i = 0; i < n; i++)
		k = (k ^ p[i]) * 1099511628211ull;
	return k | (1ull << 63);
}

static void http__conn(void *cls, struct MHD_Connection *con, void **socket_context,
                       enum MHD_ConnectionNotificationCode code)
{
	struct http *h = cls;
	struct hconn *hc = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *fd =
		    MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *sa =
		    MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

		if (!(hc = calloc(1, sizeof(*hc))))
			return; /* served without deadlines */
		hc->fd = fd ? fd->connect_fd : -1;
		hc->peer = http__peer(sa ? sa->client_addr : NULL);
		hc->phase = HC_HEAD;
		hc->since_ms = clk_mono_ms();
		pthread_mutex_lock(&h->mu);
		hc->next = h->conns;
		if (h->conns)
			h->conns->prev = hc;
		h->conns = hc;
		h->nconns++;
		pthread_mutex_unlock(&h->mu);
		*socket_context = hc;
		return;
	}
	if (!hc)
		return;
	pthread_mutex_lock(&h->mu); /* before libmicrohttpd closes the descriptor */
	if (hc->prev)
		hc->prev->next = hc->next;
	else
		h->conns = hc->next;
	if (hc->next)
		hc->next->prev = hc->prev;
	h->nconns--;
	pthread_mutex_unlock(&h->mu);
	free(hc);
	*socket_context = NULL;
}

/* Cut the connections whose request's headers or body are late. */
static void *http__sweep(void *arg)
{
	struct http *h = arg;

	pthread_mutex_lock(&h->mu);
	while (!h->closing) {
		uint64_t now = clk_mono_ms();
		struct timespec ts;

		for (struct hconn *hc = h->conns; hc; hc = hc->next) {
			uint64_t limit = hc->phase == HC_HEAD   ? h->header_ms
			                 : hc->phase == HC_BODY ? h->body_ms
			                                        : 0;

			if (limit && !hc->cut && hc->fd >= 0 && now - hc->since_ms > limit) {
				shutdown(hc->fd, SHUT_RDWR); /* libmicrohttpd sees it and closes */
				hc->cut = true;
				atomic_fetch_add(&h->n_timeouts, 1);
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += HTTP_SWEEP_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->cv, &h->mu, &ts);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* A path holding %00 is left as it came (it would be cut at the NUL and
 * served as the path before it): it then matches no route. */
static size_t http__unescape(void *cls, struct MHD_Connection *con, char *s)
{
	(void)cls, (void)con;
	for (const char *p = s; (p = strchr(p, '%')); p++)
		if (p[1] == '0' && p[2] == '0')
			return strlen(s);
	return MHD_http_unescape(s);
}

/* ---- the server ----------------------------------------------------------- */

int http_check_bind(const char *bind, bool allow_remote, bool has_key, bool allow_no_key,
                    struct ig_errbuf *eb)
{
	if (!strcmp(bind, "off") || door_hostport_is_loopback(bind))
		return IG_E_OK;
	if (!allow_remote)
		return ig_errf(
		    eb, IG_E_CONFIG,
		    "--server-http-bind '%s' is not a loopback address: bind "
		    "127.0.0.1:PORT, or give --server-allow-remote "
		    "(IGNIS_SERVER_ALLOW_REMOTE, server_allow_remote) to serve it there, "
		    "with an API key (--server-api-key or --server-api-key-file), or off",
		    bind);
	if (!has_key && !allow_no_key)
		return ig_errf(
		    eb, IG_E_CONFIG,
		    "--server-http-bind '%s' serves past loopback without an API key: "
		    "anyone who reaches it could submit requests and read the metrics; "
		    "give --server-api-key KEY or --server-api-key-file FILE "
		    "(IGNIS_SERVER_API_KEY), or --server-allow-remote-without-api-key to "
		    "serve it so anyway",
		    bind);
	return IG_E_OK;
}

/* The origins of `list` ("https://a.example, http://b:8080"): each
 * scheme://host[:port], nothing after. */
static int http__origins(struct http *h, const char *list, struct ig_errbuf *eb)
{
	const char *p = list;

	while (p && *p) {
		size_t n, skip = strspn(p, " \t,");
		char *o, **v;

		p += skip;
		n = strcspn(p, " \t,");
		if (!n)
			break;
		if (!(o = strndup(p, n)))
			return ig_errf(eb, IG_E_NOMEM, "no memory for the CORS origins");
		if ((strncmp(o, "http://", 7) && strncmp(o, "https://", 8)) ||
		    !o[strcspn(o, ":") + 3] || strchr(o + strcspn(o, ":") + 3, '/')) {
			int rc =
			    ig_errf(eb, IG_E_CONFIG,
			            "--server-cors-origins: '%s' is not an origin; accepted: "
			            "scheme://host[:port] (http or https, no path), separated by "
			            "commas",
			            o);

			free(o);
			return rc;
		}
		if (!(v = realloc(h->origins, (h->norigins + 1) * sizeof(*v)))) {
			free(o);
			return ig_errf(eb, IG_E_NOMEM, "no memory for the CORS origins");
		}
		h->origins = v;
		h->origins[h->norigins++] = o;
		p += n;
	}
	return IG_E_OK;
}

/* The names of `list` (the knob's: "a, b,c"), or `model` alone when it
 * names none; h->model is the first. The knob checked them (KT_NAMES). */
static int http__names(struct http *h, const char *list, const char *model, struct ig_errbuf *eb)
{
	const char *p = list && *list ? list : model;

	while (p && *p) {
		size_t n = strcspn(p, ","), skip;
		char *name, **v;

		p += strspn(p, " \t");
		n = strcspn(p, ",");
		skip = n;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n) {
			if (!(name = strndup(p, n)))
				return ig_errf(eb, IG_E_NOMEM, "no memory for the model's names");
			if (!(v = realloc(h->names, (h->nnames + 1) * sizeof(*v)))) {
				free(name);
				return ig_errf(eb, IG_E_NOMEM, "no memory for the model's names");
			}
			h->names = v;
			h->names[h->nnames++] = name;
		}
		p += skip;
		if (*p == ',')
			p++;
	}
	if (!h->nnames)
		return ig_errf(eb, IG_E_CONFIG, "--served-model-name '%s' names no model",
		               list ? list : "");
	h->model = h->names[0];
	return IG_E_OK;
}

/* The connections the descriptor limit allows (raised to its hard limit
 * first: the HTTP API is where a server needs many). */
static uint32_t http__fd_budget(void)
{
	struct rlimit rl;
	uint64_t n, reserve;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 768;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = {rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max,
		                    rl.rlim_max};

		if (up.rlim_cur > rl.rlim_cur && !setrlimit(RLIMIT_NOFILE, &up))
			rl = up;
	}
	n = rl.rlim_cur == RLIM_INFINITY ? (1u << 20) : rl.rlim_cur;
	reserve = n / 4 < HTTP_FD_RESERVE ? n / 4 : HTTP_FD_RESERVE;
	n -= reserve;
	return n > UINT32_MAX ? UINT32_MAX : n < 16 ? 16 : (uint32_t)n;
}

int http_open(struct http **out, const struct http_opts *o, struct ig_errbuf *eb)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char host[80];
	const char *colon = strrchr(o->bind, ':');
	uint32_t per_address;
	pthread_condattr_t ca;
	struct http *h;
	int rc;

	*out = NULL;
	if (!colon || (size_t)(colon - o->bind) >= sizeof host)
		return ig_errf(eb, IG_E_CONFIG, "--server-http-bind '%s' is not HOST:PORT",
		               o->bind);
	rc = http_check_bind(o->bind, o->allow_remote, o->api_key && *o->api_key, o->allow_no_key,
	                     eb);
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
	h->door = o->door;
	h->lim = o->limits;
	pthread_mutex_init(&h->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cv, &ca);
	pthread_condattr_destroy(&ca);
	h->metrics_page = o->metrics_page;
	h->metrics_ctx = o->metrics_ctx;
	h->tokenizer = o->tokenizer;
	h->bpe = o->bpe;
	h->loopback = door_hostport_is_loopback(o->bind);
	h->header_ms = o->header_timeout_ms;
	h->body_ms = o->body_timeout_ms;
	if (o->api_key && *o->api_key) {
		h->api_key = strdup(o->api_key);
		h->api_key_len = strlen(o->api_key);
	}
	snprintf(h->addr, sizeof h->addr, "%s", o->bind);
	rc = http__origins(h, o->cors_origins, eb);
	if (!rc)
		rc = http__names(h, o->names, o->model, eb);
	if (!rc && o->chat_template) {
		rc = chat_template_of(o->chat_template, strlen(o->chat_template), &h->tmpl, eb);
		if (rc)
			ig_errprefix(eb, "the model's chat template");
		h->has_template = !rc;
	}
	if (rc) {
		freeaddrinfo(ai);
		http_close(h);
		return rc;
	}
	h->max_connections = o->max_connections ? o->max_connections : http__fd_budget();
	/* one address cannot take everything; one gateway still gets thousands */
	per_address = o->max_per_address       ? o->max_per_address
	              : h->max_connections / 2 ? h->max_connections / 2
	                                       : 1;
	if (pthread_create(&h->sweeper, NULL, http__sweep, h) == 0)
		h->sweeper_on = true;
	h->d = MHD_start_daemon(
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
	        (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
	    0, NULL, NULL, http__handle, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
	    MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
	    (unsigned)h->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)per_address,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S, MHD_OPTION_LISTEN_BACKLOG_SIZE,
	    (unsigned)4096, MHD_OPTION_NOTIFY_COMPLETED, http__done, h,
	    MHD_OPTION_NOTIFY_CONNECTION, http__conn, h, MHD_OPTION_UNESCAPE_CALLBACK,
	    http__unescape, h, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!h->d || !h->sweeper_on) {
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

void http_counts(struct http *h, struct http_counts *c)
{
	memset(c, 0, sizeof(*c));
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	c->connections = h->nconns;
	pthread_mutex_unlock(&h->mu);
	c->max_connections = h->max_connections;
	c->timeouts = atomic_load(&h->n_timeouts);
	c->refused_host = atomic_load(&h->n_host);
	c->refused_origin = atomic_load(&h->n_origin);
	c->refused_key = atomic_load(&h->n_key);
	c->refused_type = atomic_load(&h->n_type);
}

void http_close(struct http *h)
{
	if (!h)
		return;
	/* every connection closes, suspended ones too, each request released
	 * at the door (http__done) */
	if (h->d)
		MHD_stop_daemon(h->d);
	pthread_mutex_lock(&h->mu);
	h->closing = true;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	if (h->sweeper_on)
		pthread_join(h->sweeper, NULL);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	for (size_t i = 0; i < h->norigins; i++)
		free(h->origins[i]);
	free(h->origins);
	free(h->api_key);
	for (size_t i = 0; i < h->nnames; i++)
		free(h->names[i]);
	free(h->names);
	free(h);
}
