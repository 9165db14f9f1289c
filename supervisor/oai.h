/*
 * oai.h - OpenAI's HTTP API, its JSON half (issue 16): a request body of
 * POST /v1/chat/completions or /v1/completions read and checked into what
 * the front door runs, and the answers written: a whole completion, the
 * chunks of a stream, the model list and errors in OpenAI's shape
 * ({"error": {"message", "type", "param", "code"}}). No I/O: the HTTP server
 * calls these. JSON through jansson.
 *
 * What is taken (every field of OpenAI's two requests is known; one we do
 * not run is accepted only at its neutral value, so a client that sends a
 * default is served and one that asks for more is told; a field OpenAI
 * does not have is refused by name):
 *   model (string, required), messages (chat: system, developer, user,
 *   assistant; content a string or an array of {"type":"text","text"}
 *   parts, joined without separator), prompt (completions: a string, an
 *   array of one string, or token ids: an array of integers or an array of
 *   one such array), max_tokens and max_completion_tokens (1 to the
 *   limit), temperature (0 to 2), top_p (above 0, at most 1), top_k (0 to
 *   the vocabulary; 0 off), seed (any 64-bit integer), stop (a string or
 *   up to 4), stream, stream_options.include_usage, n (1 to OAI_N_MAX: that many
 *   choices, choice i sampled with seed + i, the prompt prefilled once:
 *   docs/adr/0059), the extension
 *   `ignis` {"class": "interactive" | "agent"} and, as llama.cpp's server
 *   takes it, chat_template_kwargs {"enable_thinking": bool}.
 *   logprobs (chat: true or false, with top_logprobs 0..20; completions: an
 *   integer 0..20, the top list's length), the log-probabilities of the
 *   generated tokens (docs/adr/0053); completions' echo (the prompt's text
 *   and, with logprobs, its log-probabilities before the completion's;
 *   max_tokens 0 with it: docs/adr/0063).
 *   Chat's tools (docs/adr/0054): tools (up to OAI_TOOLS_MAX functions,
 *   {"type": "function", "function": {"name", "description",
 *   "parameters", "strict"}}, names unique), tool_choice "auto", "none",
 *   "required" or {"type": "function", "function": {"name"}} (the last two
 *   enforced by a grammar: docs/adr/0057), parallel_tool_calls; messages of role "tool" (with the
 *   tool_call_id of an earlier assistant message's call) and assistant
 *   messages with tool_calls ({"id", "type": "function", "function":
 *   {"name", "arguments"}}; content then null or absent) and
 *   reasoning_content.
 *   response_format (chat): {"type": "text"}, {"type": "json_object"}, or
 *   {"type": "json_schema", "json_schema": {"name", "schema", "strict",
 *   "description"}}: the answer constrained to JSON (docs/adr/0057).
 *   Neutral only: presence_penalty and
 *   frequency_penalty (0), logit_bias ({}), best_of (1),
 *   suffix (null), functions ([]),
 *   function_call ("none"), user, metadata, store
 *   (false), service_tier ("auto" or "default"), modalities (["text"]),
 *   reasoning_effort (null), prediction (null).
 */
#ifndef IGNIS_SUPERVISOR_OAI_H
#define IGNIS_SUPERVISOR_OAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bodies read: the two generation requests, and /tokenize and
 * /detokenize (docs/http.md; vLLM's and llama.cpp's servers' shapes):
 *   tokenize    model (optional), prompt (a string; "content", llama.cpp's
 *               name, too) or messages (a chat, with tools and
 *               chat_template_kwargs as chat takes them), one of the two;
 *               add_generation_prompt (chat; default true),
 *               add_special_tokens or add_special (default true: the ids
 *               the server runs), with_pieces, return_token_strs
 *   detokenize  model (optional), tokens (integers from 0, maybe none; the
 *               vocabulary is the caller's to check)
 */
enum oai_kind { OAI_CHAT = 1, OAI_COMPLETION = 2, OAI_TOKENIZE = 3, OAI_DETOKENIZE = 4 };

/* A refusal in OpenAI's shape: the HTTP status, "invalid_request_error" (or
 * another type), the field at fault ("" for none), a code ("" for none) and
 * a message saying what was wrong and what is accepted. */
struct oai_err {
	int status;
	const char *type;
	char param[64];
	char code[48];
	char message[512];
};

/* What a server takes: a body longer than max_body is refused before it is
 * read (413); the rest bound the request's fields. */
struct oai_limits {
	size_t max_body;       /* bytes */
	uint32_t max_tokens;   /* the most a request may ask to generate */
	uint32_t vocab;        /* token ids below this */
	size_t max_prompt_ids; /* token ids in a prompt */
	size_t max_text;       /* bytes of a prompt, or of all messages */
	size_t max_messages;   /* messages in a chat */
};

/* A tool call of an assistant message in the conversation (strings into
 * the body). */
struct oai_msg_call {
	const char *id, *name, *args; /* args: OpenAI's `arguments` string */
	size_t name_len, args_len;
};

struct oai_message {
	char role[16];    /* system, developer, user, assistant, tool */
	const char *text; /* the content: the body's string, or `joined` */
	size_t len;
	char *joined; /* a content of text parts, joined; NULL for a string */
	/* assistant: its tool calls, and its reasoning when sent apart
	 * (reasoning_content, as this server returns it) */
	struct oai_msg_call *calls;
	size_t n_calls;
	const char *reasoning;
	size_t reasoning_len;
	/* tool: the call it answers */
	const char *tool_call_id;
};

/* A tool the request offers (chat's `tools`): the function's name and
 * parameters' schema, and the whole tool object as the client wrote it
 * (the template announces it as it is). Borrowed from the body. */
struct oai_tool {
	const char *name;
	const struct json_t *obj, *params;
	bool strict; /* function.strict: its arguments follow its schema (ADR 0057) */
};

/* tool_choice: "auto", "none", "required" (at least one call), or a named
 * function (exactly its calls: oai_req.tc_tool) */
enum oai_tool_choice { OAI_TC_AUTO = 0, OAI_TC_NONE, OAI_TC_REQUIRED, OAI_TC_NAMED };

/* response_format: "text", "json_object" (any JSON object), "json_schema"
 * (the document follows oai_req.rf_schema) */
enum oai_format { OAI_RF_TEXT = 0, OAI_RF_JSON_OBJECT, OAI_RF_JSON_SCHEMA };

/* The most choices a request may ask for (`n`; OpenAI's bound is 128).
 * Each choice is a sequence of its own in the worker (a lane, its KV pages
 * past the shared prompt, a request slot of the front door's): 16 keeps one
 * request from filling the lanes of a worker many times over while
 * covering what clients ask for (best-of-n sampling, self-consistency
 * votes); docs/adr/0059. */
#define OAI_N_MAX 16u

/* The most tools a request may offer, and calls an assistant message may
 * hold. */
#define OAI_TOOLS_MAX 128u
#define OAI_CALLS_MAX 64u

/* Strings (prompt, a message's content, stop) point into the parsed body,
 * which the request holds (`json`) until oai_req_free: a prompt is decoded
 * from JSON once, here, and not copied again before it is encoded into the
 * front door's submit (docs/adr/0043). */
struct oai_req {
	enum oai_kind kind;
	char model[128];
	struct json_t *json; /* the parsed body (jansson's), held */
	/* completions: text, or token ids */
	const char *prompt;
	size_t prompt_len;
	uint32_t *prompt_ids;
	size_t n_prompt_ids;
	/* chat */
	struct oai_message *messages;
	size_t n_messages;
	bool thinking_set, thinking; /* chat_template_kwargs.enable_thinking */
	/* tools (chat): tool_choice "auto" (the default) or "none" (the tools
	 * are announced, no call is read from the answer); parallel_tool_calls
	 * false keeps the answer's first call only */
	struct oai_tool *tools;
	size_t n_tools;
	enum oai_tool_choice tool_choice;
	size_t tc_tool; /* OAI_TC_NAMED: the index of the named tool in `tools` */
	bool parallel_calls;
	/* response_format (docs/adr/0057): the schema of json_schema (borrowed
	 * from the body) and its name */
	enum oai_format format;
	const struct json_t *rf_schema;
	const char *rf_name;
	/* sampling and the end */
	uint32_t max_tokens; /* 0: not given (the model's default), or max_zero */
	/* completions' echo (docs/adr/0063): the prompt's text first, and with
	 * logprobs its tokens' log-probabilities first (the first token's
	 * null); max_zero: max_tokens 0, only with echo (the prompt alone) */
	bool echo, max_zero;
	double temperature; /* 1 when not given, as OpenAI's default */
	double top_p;       /* 1 when not given */
	uint32_t top_k;     /* 0: off */
	uint32_t n;         /* choices, 1..OAI_N_MAX (1 when not given) */
	bool seed_set;
	int64_t seed;
	const char *stop[4];
	size_t n_stop;
	/* log-probabilities (docs/adr/0053): chat's logprobs and top_logprobs
	 * (0..OAI_TOP_LP_MAX, only with logprobs), completions' logprobs N
	 * (logprobs true, top N) */
	bool logprobs;
	uint32_t top_logprobs;
	/* the answer */
	bool stream, include_usage;
	bool agent;     /* ignis.class "agent"; interactive otherwise */
	bool class_set; /* ignis.class was given */
	/* tokenize (model "" when not given): the chat's generation prompt,
	 * special tokens added (BOS where the file asks), each token's piece
	 * beside its id (llama.cpp's with_pieces) or apart (vLLM's
	 * token_strs); detokenize: the ids in prompt_ids (tokens_set) */
	bool gen_prompt, add_special, with_pieces, token_strs, tokens_set;
};

/*
 * Read `body` (len bytes) as a request of `kind`. 0 and *out filled (free
 * it with oai_req_free), or -1 and *err filled: 400 for a malformed body or
 * a field out of bounds, naming the field (`param`) and saying what is
 * accepted; 413 for a prompt past the limits (code "context_length_exceeded"
 * for one past max_prompt_ids or max_text).
 */
int oai_parse(enum oai_kind kind, const char *body, size_t len, const struct oai_limits *lim,
              struct oai_req *out, struct oai_err *err);
void oai_req_free(struct oai_req *r);

/* Fill *err (status, type, param, code and a printf message). */
void oai_errf(struct oai_err *err, int status, const char *param, const char *code, const char *fmt,
              ...) __attribute__((format(printf, 5, 6)));

/* The answers, as malloc'd NUL-terminated JSON (NULL only when out of
 * memory). `id` ("chatcmpl-..." or "cmpl-..."), `created` (seconds since
 * the epoch) and `model` are the response's. */
char *oai_error_json(const struct oai_err *err);

/* usage: prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens */
struct oai_usage {
	uint64_t prompt, completion, cached;
};

/* The most alternatives a token's top list may ask for (OpenAI's 20). */
#define OAI_TOP_LP_MAX 20u

/* One entry of a token's log-probabilities: its piece (bytes, not
 * necessarily whole UTF-8) and lp (<= 0; -inf, or the wire's stand-in for
 * it, is written as OpenAI's floor, -9999.0). */
struct oai_lp_alt {
	const uint8_t *bytes;
	size_t len;
	double lp;
};

/* One generated token's log-probabilities: the sampled token, its top list
 * (likeliest first), and (completions) its text's offset in characters.
 * `none` (completions' echo: the prompt's first token, which nothing comes
 * before): the token alone, its token_logprobs and top_logprobs null. */
struct oai_lp_tok {
	bool none;
	struct oai_lp_alt tok;
	size_t n_top;
	struct oai_lp_alt top[OAI_TOP_LP_MAX];
	uint64_t text_offset;
};

/*
 * The `logprobs` of a choice, built a token at a time: chat's
 * {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
 * "logprob", "bytes"}]}], "refusal": null}, completions' {"tokens",
 * "token_logprobs", "top_logprobs": [{token: lp}], "text_offset"}. A
 * token's text is its piece as UTF-8, each byte that is not part of a
 * whole character as U+FFFD; `bytes` its bytes exactly.
 */
struct oai_lps;
struct oai_lps *oai_lps_new(enum oai_kind kind);                /* NULL: no memory */
int oai_lps_add(struct oai_lps *a, const struct oai_lp_tok *t); /* -1: no memory */
size_t oai_lps_count(const struct oai_lps *a);
void oai_lps_free(struct oai_lps *a); /* NULL accepted */

/* A tool call of the answer (outparse.h's, collected). */
struct oai_call {
	char id[48];
	char *name, *args;
	size_t args_len;
};

/* A chat answer taken apart: its reasoning (reasoning_content), content and
 * tool calls. */
struct oai_parts {
	const char *reasoning, *content;
	size_t reasoning_len, content_len;
	const struct oai_call *calls;
	size_t n_calls;
};

/* A whole answer: one choice, text and finish_reason ("stop", "length",
 * "tool_calls"); `lps` its logprobs (NULL: null). A chat answer taken
 * apart passes `parts` (its text then unused): message.content (null when
 * empty beside calls), reasoning_content when there is some, tool_calls. */
char *oai_completion_json(enum oai_kind kind, const char *id, int64_t created, const char *model,
                          const char *text, size_t len, const char *finish_reason,
                          const struct oai_usage *usage, const struct oai_lps *lps,
                          const struct oai_parts *parts);

/* One choice of a whole answer, as oai_completion_json takes it. */
struct oai_choice {
	const char *text;
	size_t len;
	const char *finish_reason;
	const struct oai_lps *lps;
	const struct oai_parts *parts;
};
/* A whole answer of n choices (`n` above 1), choice i at index i; usage
 * the request's (completion tokens summed over the choices). */
char *oai_choices_json(enum oai_kind kind, const char *id, int64_t created, const char *model,
                       const struct oai_choice *ch, size_t n, const struct oai_usage *usage);

/* A chat stream's delta beside plain content: reasoning text, or a tool
 * call's start (index, id, name, empty arguments) or arguments fragment
 * (index and text), as OpenAI streams them. */
enum oai_delta_kind { OAI_D_REASONING = 1, OAI_D_CALL, OAI_D_ARGS };
char *oai_delta_json(const char *id, int64_t created, const char *model, enum oai_delta_kind kind,
                     uint32_t index, const char *call_id, const char *text, size_t len,
                     const struct oai_lps *lps);
/*
 * One chunk of a stream (the payload of a "data: " line): chat chunks
 * carry `delta` ({"role": "assistant"} in the first, {"content": ...}
 * after), completion chunks `text`; `finish_reason` NULL until the last.
 * `usage` non-NULL: the final usage chunk (no choices), as OpenAI sends it
 * when stream_options.include_usage is set.
 */
char *oai_chunk_json(enum oai_kind kind, const char *id, int64_t created, const char *model,
                     bool first, const char *text, size_t len, const char *finish_reason,
                     const struct oai_usage *usage, const struct oai_lps *lps);
/* A chunk of choice `index` (`n` above 1): `json`, from oai_chunk_json or
 * oai_delta_json, taken (freed or returned), with its choice's index set.
 * NULL when json is NULL or there is no memory. */
char *oai_chunk_at(char *json, uint32_t index);
/* GET /v1/models: the model under each of its names[0..n), owned by
 * "ignis". */
char *oai_models_json(const char *const *names, size_t n, int64_t created);

/* A token's piece: the bytes it stands for (not necessarily whole UTF-8). */
struct oai_piece {
	const uint8_t *bytes;
	size_t len;
};

/* /tokenize's answer: {"tokens": ids (or, with_pieces, [{"id", "piece"}]),
 * "count", "max_model_len"} and, with token_strs, "token_strs"; pieces
 * (n of them) are needed only for those two. A piece's bytes that are not
 * whole UTF-8 are written as U+FFFD. */
char *oai_tokens_json(const uint32_t *ids, size_t n, const struct oai_piece *pieces,
                      uint64_t max_model_len, bool with_pieces, bool token_strs);
/* /detokenize's answer: {"prompt": text, "content": text} (vLLM's name and
 * llama.cpp's), bytes that are not whole UTF-8 as U+FFFD. */
char *oai_detokenize_json(const char *text, size_t len);

#endif
