/*
 * wire.h - the APIs served beside OpenAI's chat on one request model (issue
 * 30, docs/adr/0056): Anthropic's Messages (anthropic.h) and OpenAI's
 * Responses (responses.h). Each reads its body into the `struct oai_req`
 * the chat path runs (kind OAI_CHAT: the same template rendering, submit,
 * reuse and moves), and writes its own answers from the same parsed output
 * (outparse.h's events), whole or streamed. The HTTP server holds one
 * `struct wire_api` per route and calls it at the few places where the
 * chat path writes OpenAI's JSON; nothing else differs.
 *
 * An answer (`struct wire_ans`, the API's own) is built the same way whole
 * and streamed: begun, fed the parser's events, ended. Streamed, each step
 * writes its events to the sink as it goes; whole, the answer is kept and
 * written once by `json`. So a stream's assembled answer and the whole one
 * are the same by construction.
 */
#ifndef IGNIS_SUPERVISOR_WIRE_H
#define IGNIS_SUPERVISOR_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "oai.h"
#include "outparse.h"

/* Where a stream's bytes go: put returns false when it cannot take them
 * (no memory), which ends the stream. */
struct wire_sink {
	bool (*put)(void *ctx, const char *p, size_t n);
	void *ctx;
};

struct wire_ans;

/* The answer's end, as the door tells it. */
struct wire_end {
	const char *finish; /* the door's: "eos", "stop", "length", "context", ... */
	struct oai_usage usage;
	uint32_t bad_calls; /* calls the parser cut short (outparse.h) */
};

struct wire_api {
	const char *name; /* "anthropic", "responses" */
	/* The body into *out (oai_req_free frees it, whatever was made here
	 * is held by out->json); `count` for a route that only counts the
	 * prompt's tokens (fields of the generation not required). 0, or -1
	 * with *err (the status and the field at fault). */
	int (*parse)(const char *body, size_t len, const struct oai_limits *lim, bool count,
	             struct oai_req *out, struct oai_err *err);
	/* An error in the API's shape (malloc'd JSON; NULL: no memory). */
	char *(*error_json)(const struct oai_err *err);
	/* A new answer for request `q` (borrowed until free): `rid` the
	 * server's unique tail for ids, `sink` NULL for a whole answer (kept)
	 * or where a stream's events go (copied). NULL: no memory. */
	struct wire_ans *(*ans_new)(const struct oai_req *q, const char *rid, const char *model,
	                            int64_t created, const struct wire_sink *sink);
	/* A stream's opening events, once admitted (usage.prompt, cached). */
	int (*ans_begin)(struct wire_ans *a, const struct oai_usage *u);
	/* One of the parser's events. 0, or IG_E_NOMEM / IG_E_IO. */
	int (*ans_event)(struct wire_ans *a, const struct op_ev *ev);
	/* The end: a stream's closing events; a whole answer's last facts. */
	int (*ans_end)(struct wire_ans *a, const struct wire_end *end);
	/* A stream that fails after it began: its error event. */
	int (*ans_fail)(struct wire_ans *a, const struct oai_err *err);
	/* A whole answer's JSON (malloc'd; NULL: no memory). */
	char *(*ans_json)(struct wire_ans *a);
	void (*ans_free)(struct wire_ans *a); /* NULL accepted */
	/* count: the answer to a request that only counts (malloc'd JSON). */
	char *(*count_json)(uint64_t input_tokens);
};

/* Helpers the APIs share. */

/* `text` as a JSON string, each byte that is not UTF-8 as U+FFFD. */
json_t *wire_text(const char *text, size_t len);
/* `root` serialised compactly and released (NULL: no memory). */
char *wire_dump(json_t *root);
/* An SSE event, "event: NAME\ndata: JSON\n\n" (`root` released), to the
 * sink. False: no memory, or the sink refused. */
bool wire_sse(const struct wire_sink *s, const char *name, json_t *root);
/* The unique tail of the server's request id ("chatcmpl-ignisX" -> "ignisX"). */
const char *wire_tail(const char *rid);
/* A growing string (p NUL-terminated once anything was added). */
bool wire_grow(char **p, size_t *len, const char *s, size_t n);

#endif
