/*
 * http.h - OpenAI's HTTP API on the supervisor (--server-http-bind; issue
 * 16, docs/http.md, docs/adr/0034 and 0041): POST /v1/chat/completions and
 * /v1/completions, streamed as server-sent events or whole; POST /tokenize
 * and /detokenize (issue 30: the model's own tokenizer, here, without the
 * worker); GET /v1/models, /health (the process lives), /ready (the worker
 * runs the model) and /metrics. The model answers to each of its served
 * names (--served-model-name), and an answer names the one asked for.
 *
 * Each HTTP request is a client of the front door in process
 * (door_local_*): the same queue, classes, stop strings, text and moves as
 * an nng client's, with no socket between, so a request's text is the same
 * whichever door it came through. The JSON is oai.h's; a chat's messages are
 * rendered with the model file's chat template (model/chat.h) and sent as
 * text with the spans of the messages' own text, which the worker tokenizes
 * as text (only the template's markers become special tokens).
 *
 * libmicrohttpd serves it over epoll from a few threads, none of them ever
 * waiting on a request: a connection whose request waits for the worker is
 * suspended and resumed by the door's news (or after a second without any:
 * a stream then sends a comment line, which is how a client that hung up is
 * found). Connections are bounded in all (from the descriptor limit) and
 * per client address; a request's headers must arrive within the header
 * timeout of the connection's start (or of its last answer), its body within
 * the body timeout of its headers. On a loopback bind the Host header must
 * name loopback (a rebound DNS name is refused); a request body must be
 * application/json (what a page may send cross-origin without a preflight
 * is not); an Origin is served only when named (--server-cors-origins); an
 * API key, when set, is asked of every route but /health and /ready.
 */
#ifndef IGNIS_SUPERVISOR_HTTP_H
#define IGNIS_SUPERVISOR_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/model.h"
#include "oai.h"

struct door;

struct http_opts {
	const char *bind;               /* HOST:PORT (KT_LISTEN; "off" is the caller's) */
	bool allow_remote;              /* --server-allow-remote: a bind past loopback */
	bool allow_no_key;              /* --server-allow-remote-without-api-key */
	const char *api_key;            /* NULL or "": none */
	const char *cors_origins;       /* "https://a.example,http://b:8080"; NULL or "": none */
	struct door *door;              /* where requests go (the caller's, outlives us) */
	const char *model;              /* the served model's name (/v1/models, "model") */
	const char *names;              /* --served-model-name: "a,b" (the first the primary);
	                                   NULL or "": `model` alone */
	enum mdesc_tokenizer tokenizer; /* the model's (/tokenize, /detokenize) */
	const struct bpe *bpe;          /* GPT2's (model/bpe.h): the caller's, outliving us */
	const char *chat_template;      /* the model file's, NUL-terminated; NULL: none */
	struct oai_limits limits;
	uint32_t max_connections;   /* in all; 0: from the descriptor limit */
	uint32_t max_per_address;   /* from one client address; 0: half of the above */
	uint32_t header_timeout_ms; /* a request's headers, from the connection's start or
	                               its last answer */
	uint32_t body_timeout_ms;   /* its body, from its headers */
	/* GET /metrics: the metrics page with the families an inference
	 * gateway reads (the port a gateway targets is this one); NULL: 404.
	 * Returns 0 and a malloc'd page, or -1. */
	int (*metrics_page)(void *ctx, char **page, size_t *len);
	void *metrics_ctx;
};

/* What the server has refused and cut, for the metrics page. */
struct http_counts {
	uint64_t connections;     /* open now */
	uint64_t max_connections; /* the limit in force */
	uint64_t timeouts;        /* connections cut: headers or body too slow */
	uint64_t refused_host;    /* a Host that is not loopback on a loopback bind */
	uint64_t refused_origin;  /* an Origin not named */
	uint64_t refused_key;     /* no API key, or a wrong one */
	uint64_t refused_type;    /* a body that is not application/json */
};

struct http;

/* The rule of the nng door's bind (door_check_bind) for the API's, and the
 * key's: a HOST other than loopback needs `allow_remote`, and an API key
 * unless `allow_no_key`; "off" passes. IG_E_CONFIG naming the knob
 * otherwise. */
int http_check_bind(const char *bind, bool allow_remote, bool has_key, bool allow_no_key,
                    struct ig_errbuf *eb);

/* Listen and serve. IG_E_BUSY when the address is in use, IG_E_CONFIG for
 * a remote address without allow_remote, a template we cannot render or an
 * origin that is not scheme://host[:port] (named), each with a message. */
int http_open(struct http **out, const struct http_opts *o, struct ig_errbuf *eb);
/* "127.0.0.1:8000": where it listens. */
const char *http_addr(const struct http *h);
/* The worker's state, told every loop turn: completions are served while
 * it runs, answered 503 with Retry-After otherwise; /ready says so. */
void http_set_ready(struct http *h, bool ready);
void http_counts(struct http *h, struct http_counts *c);
/* Stop serving (open requests are released at the door, their connections
 * closed), free `h`. NULL accepted. Before door_close. */
void http_close(struct http *h);

#endif
