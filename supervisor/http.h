/*
 * http.h - OpenAI's HTTP API on the supervisor (--server-http-bind; issue
 * 16, docs/http.md, docs/adr/0034): POST /v1/chat/completions and
 * /v1/completions, streamed as server-sent events or whole; GET /v1/models,
 * /health (the process lives) and /ready (the worker runs the model).
 *
 * Each HTTP request is a client of the front door (libignis-client over
 * the door's own socket): the same queue, classes, stop strings, text and
 * moves as an nng client's, so a request's text is the same whichever door
 * it came through. The JSON is oai.h's; a chat's messages are rendered with
 * the model file's chat template (model/chat.h) and sent as text, whose
 * special tokens' text the worker turns into them.
 *
 * libmicrohttpd serves it, a thread per connection (a stream's thread
 * waits on its request's tokens); a stream sends a comment line (": ignis
 * ...") when its request moves between tiers, and when nothing came for a
 * second, so a client that hung up is found and its request cancelled.
 */
#ifndef IGNIS_SUPERVISOR_HTTP_H
#define IGNIS_SUPERVISOR_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "oai.h"

struct http_opts {
	const char *bind;        /* HOST:PORT (KT_LISTEN; "off" is the caller's) */
	bool allow_remote;       /* --server-allow-remote: a bind past loopback */
	const char *door_server; /* the front door's address, NULL or "": the default */
	const char *rtdir;       /* the runtime directory (the door's default socket) */
	const char *model;       /* the served model's name (/v1/models, "model") */
	const char *chat_template; /* the model file's, NUL-terminated; NULL: none */
	struct oai_limits limits;
	/* GET /metrics: the metrics page with the families an inference
	 * gateway reads (the port a gateway targets is this one); NULL: 404.
	 * Returns 0 and a malloc'd page, or -1. */
	int (*metrics_page)(void *ctx, char **page, size_t *len);
	void *metrics_ctx;
};

struct http;

/* The rule of the nng door's bind (door_check_bind) for the API's: a HOST
 * other than loopback needs `allow_remote`; "off" passes. IG_E_CONFIG naming
 * --server-http-bind otherwise. */
int http_check_bind(const char *bind, bool allow_remote, struct ig_errbuf *eb);

/* Listen and serve. IG_E_BUSY when the address is in use, IG_E_CONFIG for
 * a remote address without allow_remote or a template we cannot render
 * (named), each with a message. */
int http_open(struct http **out, const struct http_opts *o, struct ig_errbuf *eb);
/* "127.0.0.1:8000": where it listens (the port the system gave for :0). */
const char *http_addr(const struct http *h);
/* The worker's state, told every loop turn: completions are served while
 * it runs, answered 503 with Retry-After otherwise; /ready says so. */
void http_set_ready(struct http *h, bool ready);
/* Stop serving (open streams end), free `h`. NULL accepted. */
void http_close(struct http *h);

#endif
