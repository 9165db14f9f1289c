/*
 * responses.h - OpenAI's Responses API without server-side state (issue
 * 30, docs/adr/0056): POST /v1/responses, read into the chat path's request
 * (wire.h) and answered as a response object {"id": "resp_...", "object":
 * "response", "status", "output": [reasoning, message, function_call
 * items], "usage", ...}, or its stream of named SSE events
 * (response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta / .done,
 * response.reasoning_text.delta / .done, response.function_call_arguments
 * .delta / .done, response.content_part.done, response.output_item.done,
 * then response.completed, or response.incomplete at the token cap, or
 * response.failed), each with its sequence_number. Errors in OpenAI's
 * shape (oai_error_json). No I/O; JSON through jansson.
 *
 * What is taken (docs/http.md lists each field with why):
 *   model, input (a string, or items: messages of role user, system,
 *   developer or assistant with content a string or input_text /
 *   output_text parts; function_call {call_id, name, arguments};
 *   function_call_output {call_id, output}; reasoning {summary, content}),
 *   instructions, tools (function tools {type: "function", name,
 *   description, parameters, strict}), tool_choice "auto" | "none",
 *   parallel_tool_calls, max_output_tokens, temperature, top_p, stream,
 *   store (accepted, nothing is kept: the response says false), metadata,
 *   user, include, reasoning {effort, summary} ("none" turns thinking
 *   off), text.format text, truncation "disabled", service_tier,
 *   prompt_cache_key and safety_identifier (ignored), and our extension
 *   `ignis` {"class", "seed"}.
 * What is refused by name: previous_response_id, conversation, prompt,
 * background true, item_reference items (all need stored state),
 * tool_choice required and a named function (constrained decoding:
 * resp_tool_choice is the one place that changes), tools other than
 * functions, images and files, text.format other than text.
 */
#ifndef IGNIS_SUPERVISOR_RESPONSES_H
#define IGNIS_SUPERVISOR_RESPONSES_H

#include "wire.h"

/* The Responses API's table. */
extern const struct wire_api resp_api;

/* Read `body` as a Responses request into *out. 0, or -1 and *err (400
 * naming the field, 413). `count` is not used (no counting route). */
int resp_parse(const char *body, size_t len, const struct oai_limits *lim, bool count,
               struct oai_req *out, struct oai_err *err);

#endif
