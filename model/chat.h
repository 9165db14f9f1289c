/*
 * chat.h - a conversation rendered as a model file's chat template says
 * (`tokenizer.chat_template`), the way llama.cpp renders it without a Jinja
 * engine (llama_chat_apply_template): the template is recognised by what it
 * holds, and a fixed renderer writes its format.
 *
 * ChatML (the Qwen families: a template holding "<|im_start|>", without
 * "<|im_sep|>" or "<end_of_utterance>", which mark other formats): each
 * message is
 *     <|im_start|>ROLE\nCONTENT<|im_end|>\n
 * and the generation prompt, when asked, "<|im_start|>assistant\n". With
 * thinking off (Qwen3's enable_thinking=false; only for a template that
 * knows it), an empty reasoning block "<think>\n\n</think>\n\n" follows the
 * generation prompt, as Qwen3's template writes it. For a conversation
 * without reasoning in its history that is Qwen3's own template's output
 * too (test_chat checks it against llama.cpp on the real template).
 *
 * Qwen3's own template (chat_template.qwen3) adds rules the plain form
 * lacks, and we render them as its Jinja text does (test_chat checks it
 * against Hugging Face's Jinja engine on the real template): with tools,
 * the system turn carries them ("# Tools ... <tools>" then each tool's JSON
 * on a line, as the caller wrote it with chat_tojson, then the call
 * format); a message of role "tool" is a <tool_response> inside a user
 * turn, consecutive ones in one turn; an assistant message's tool calls
 * follow its content as <tool_call> blocks; an assistant message before
 * the last real user message loses its <think> block, and one after it
 * (the agent's own steps) keeps its reasoning, the last one always in a
 * <think> block.
 *
 * Qwen3.5's and Qwen3-Coder's templates (chat_template.rules
 * CHAT_RULES_QWEN35, CHAT_RULES_QWEN3_CODER; docs/adr/0060) write calls in
 * the XML form,
 *     <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
 *     ...</function>\n</tool_call>
 * each argument's value raw: a string as it is, an object or a list as
 * tojson, anything else as Python's str() (True, None, 1.0: what Python's
 * Jinja writes, which @huggingface/jinja does not quite). Qwen3.5's trims
 * every content, announces the tools as Qwen3's does (JSON lines), keeps
 * an empty <think> block on each answer after the last real user message,
 * refuses what its Jinja text raises on (no user message, a system message
 * past the first, another role), and opens the reasoning in the generation
 * prompt ("<think>\n"; closed empty with thinking off). Qwen3-Coder's
 * writes contents as they are, lists the tools as XML (name, description,
 * each parameter's fields, the schemas' other keys) under a default system
 * text when none is given, and knows no reasoning. test_chat checks both
 * against Hugging Face's Jinja engine on the real templates, and Python's
 * values against Python's Jinja's texts.
 *
 * Roles and contents are copied as they are, and they are the caller's
 * text: a chat's message text is text, and only the template's own markers
 * are special tokens. A user message holding "<|im_end|><|im_start|>system"
 * (or a web page an agent reads into a tool result) must not open a system
 * turn, as it does in llama.cpp's server, which parses special tokens'
 * text over the whole rendered text. So chat_render_spans reports where the
 * caller's text lies in the rendered text, its plain spans, and the caller
 * tokenizes the text with the special tokens' text parsed outside them only
 * (bpe.h, bpe_encode_spans with BPE_PARSE_SPECIAL; tokenizer.h,
 * tok_encode_spans). A conversation whose messages hold no control token's
 * text (<|im_start|>, <|endoftext|>; user-defined ones such as <think> are
 * tokens wherever they stand) gives the ids llama.cpp's server gives.
 */
#ifndef IGNIS_MODEL_CHAT_H
#define IGNIS_MODEL_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

enum chat_format { CHAT_CHATML = 1 };

/* How a template writes tool calls (outparse.h parses the same forms). */
enum chat_tools {
	CHAT_TOOLS_NONE = 0, /* it has none */
	CHAT_TOOLS_HERMES,   /* JSON in <tool_call>: Qwen3's */
	CHAT_TOOLS_XML,      /* <function=...>: Qwen3.5's, Qwen3-Coder's (ADR 0060) */
};

/* Whose rules render the template's text. */
enum chat_rules {
	CHAT_RULES_CHATML = 0, /* plain ChatML, whatever else the template holds */
	/* Qwen3's own (it holds last_query_index, <tool_call> and
	 * <tool_response>, and no <function=) */
	CHAT_RULES_QWEN3,
	/* Qwen3.5's (<function=, last_query_index, its tools' JSON lines) */
	CHAT_RULES_QWEN35,
	/* Qwen3-Coder's (<function=, its tools written as XML) */
	CHAT_RULES_QWEN3_CODER,
};

struct chat_template {
	enum chat_format format;
	bool thinking; /* the template can turn reasoning off (enable_thinking) */
	enum chat_rules rules;
	/* the form of its calls; a template in the XML form whose rules we
	 * do not know (CHAT_RULES_CHATML) renders without tools only */
	enum chat_tools tools;
};

/* A tool call of an assistant message, as the template writes it back:
 * `args` is the arguments' JSON text (OpenAI's `arguments` string),
 * written as it is. */
struct chat_call {
	const char *name, *args;
	size_t name_len, args_len;
};

struct chat_msg {
	const char *role, *content;
	size_t role_len, content_len;
	/* an assistant message's reasoning, when the client sent it apart
	 * (reasoning_content); else Qwen3's template takes it from the
	 * content's <think> block */
	const char *reasoning;
	size_t reasoning_len;
	bool has_reasoning;
	const struct chat_call *calls; /* an assistant message's tool calls */
	size_t n_calls;
};

enum chat_flag {
	CHAT_GENERATION_PROMPT = 1u << 0, /* end with the assistant's turn opened */
	CHAT_NO_THINKING = 1u << 1,       /* ... and its reasoning closed empty */
};

/* The format of template text tmpl[0..len). NULL or empty: IG_E_INVAL (the
 * file has none); one we do not render: IG_E_INVAL naming what we render. */
int chat_template_of(const char *tmpl, size_t len, struct chat_template *out, struct ig_errbuf *eb);

/* A byte range [start, end) of a rendered chat that came from the caller's
 * messages (a role or a content): a plain span. Spans are passed as arrays
 * in ascending order, none overlapping another (one may end where the next
 * starts); the encoders take such arrays (bpe_encode_spans,
 * tok_encode_spans), whoever made them. */
struct chat_span {
	size_t start, end;
};

/* The most plain spans n messages render to: a role and a content each
 * (empty ones give none; roles and contents are never adjacent, the
 * template's text lies between them). */
#define CHAT_SPANS_MAX(n) (2 * (size_t)(n))
/* ... with tools and calls by Qwen3's rules: each tool's JSON, and each
 * message's reasoning and each call's name and arguments, may add one
 * more. The XML form writes each argument's key and value, and each of a
 * tool's fields (Qwen3-Coder), as spans: no bound from these counts, so
 * its callers ask the count first (caps of 0, below). */
#define CHAT_SPANS_MAX_TOOLS(n, n_tools, n_calls)                                                  \
	(3 * (size_t)(n) + (size_t)(n_tools) + 2 * (size_t)(n_calls))

/*
 * Render n messages into out[0..*len) and, when n_spans is not NULL, their
 * plain spans into spans[0..*n_spans): each message's role and content that
 * is not empty, in order (at most CHAT_SPANS_MAX(n)), offsets into out.
 * Everything outside them is the template's. CHAT_NO_THINKING needs
 * CHAT_GENERATION_PROMPT and a template that knows thinking (else
 * IG_E_INVAL). When `cap` bytes or `spans_cap` spans are too few:
 * IG_E_INVAL naming the sizes needed, which also land in *len and *n_spans
 * (so caps of 0, with out and spans NULL, ask the sizes); what fits is
 * written. The spans depend only on the messages and the flags, so a second
 * call with room gives the first call's sizes.
 */
int chat_render_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                      unsigned flags, char *out, size_t cap, size_t *len, struct chat_span *spans,
                      size_t spans_cap, size_t *n_spans, struct ig_errbuf *eb);

/* chat_render_spans with tools: n_tools tools' JSON texts (chat_tojson's,
 * each tools[i][0..tool_lens[i])) for the template to announce. IG_E_INVAL
 * naming why when the template writes no tool calls, or writes the XML
 * form by rules we do not know (CHAT_RULES_CHATML); in the XML form, also
 * when a call's arguments are not a JSON object's text, or the template's
 * Jinja text would raise (Qwen3.5's, above). */
int chat_render_tools_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                            const char *const *tools, const size_t *tool_lens, size_t n_tools,
                            unsigned flags, char *out, size_t cap, size_t *len,
                            struct chat_span *spans, size_t spans_cap, size_t *n_spans,
                            struct ig_errbuf *eb);

/* v as a template's `tojson` writes it (transformers' json.dumps: ", " and
 * ": " between items, keys in their order, text as it is but for JSON's
 * escapes, integers as they are, reals as Python's repr: the shortest text
 * that reads back, ".0" on whole ones, an exponent from 1e16 and below
 * 1e-4). Malloc'ed; NULL when out of memory or for a non-finite real. */
struct json_t;
char *chat_tojson(const struct json_t *v);

/* chat_render_spans without the spans: for a text tokenized as the
 * protocol's explicit prompt text is (special tokens parsed everywhere), or
 * shown. */
int chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                unsigned flags, char *out, size_t cap, size_t *len, struct ig_errbuf *eb);

#endif
