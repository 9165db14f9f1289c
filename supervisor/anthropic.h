/*
 * anthropic.h - Anthropic's Messages API (issue 30, docs/adr/0056):
 * POST /v1/messages and POST /v1/messages/count_tokens, read into the chat
 * path's request (wire.h) and answered in Anthropic's shapes: a message
 * {"id": "msg_...", "type": "message", "role": "assistant", "model",
 * "content": [thinking, text, tool_use blocks], "stop_reason",
 * "stop_sequence", "usage"}, its stream of named SSE events (message_start,
 * content_block_start / _delta / _stop, message_delta, message_stop; a ping
 * after the start), and errors as {"type": "error", "error": {"type",
 * "message"}}. No I/O; JSON through jansson.
 *
 * What is taken (docs/http.md lists each field with why):
 *   model, max_tokens (required but for count_tokens), messages (user and
 *   assistant; content a string or blocks: text, tool_use {id, name,
 *   input}, tool_result {tool_use_id, content, is_error}, thinking
 *   {thinking, signature}, redacted_thinking (dropped: we cannot read it)),
 *   system (a string or text blocks), tools ({name, description,
 *   input_schema}; type absent or "custom"), tool_choice {type: auto |
 *   none, disable_parallel_tool_use}, temperature (0..1), top_p, top_k,
 *   stop_sequences (up to 4), stream, metadata (user_id), thinking {type:
 *   enabled | disabled, budget_tokens} (the template's enable_thinking),
 *   service_tier ("auto", "standard_only"), and our extension `ignis`
 *   {"class", "seed"}. cache_control on any block is accepted and has no
 *   effect: the server reuses every prompt's prefix by itself.
 * What is refused by name: tool_choice any and tool (they need constrained
 * decoding: anth_tool_choice is the one place that changes), images and
 * documents, server tools, any field Anthropic does not have.
 */
#ifndef IGNIS_SUPERVISOR_ANTHROPIC_H
#define IGNIS_SUPERVISOR_ANTHROPIC_H

#include "wire.h"

/* The Messages API's table (both routes; `count` picks count_tokens). */
extern const struct wire_api anth_api;

/* Read `body` as a Messages request (or a count_tokens one: max_tokens then
 * not required) into *out. 0, or -1 and *err (400 naming the field, 413). */
int anth_parse(const char *body, size_t len, const struct oai_limits *lim, bool count,
               struct oai_req *out, struct oai_err *err);

/* An error in Anthropic's shape; its type from the status (400
 * invalid_request_error, 401 authentication_error, 403 permission_error,
 * 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503
 * overloaded_error, other api_error). */
char *anth_error_json(const struct oai_err *err);

/* {"input_tokens": N} */
char *anth_count_json(uint64_t input_tokens);

#endif
