/* chat.c - chat templates recognised and rendered (chat.h). */
#define _GNU_SOURCE /* memmem */
#include "chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static bool holds(const char *t, size_t len, const char *what)
{
	return memmem(t, len, what, strlen(what)) != NULL;
}

int chat_template_of(const char *tmpl, size_t len, struct chat_template *out, struct ig_errbuf *eb)
{
	if (!tmpl || !len)
		return ig_errf(eb, IG_E_INVAL,
		               "no chat template (tokenizer.chat_template is missing or empty); "
		               "accepted: a ChatML template (the Qwen families)");
	if (!holds(tmpl, len, "<|im_start|>") || holds(tmpl, len, "<|im_sep|>") ||
	    holds(tmpl, len, "<end_of_utterance>"))
		return ig_errf(eb, IG_E_INVAL,
		               "a chat template we do not render ('%.*s...'); accepted: ChatML "
		               "(<|im_start|>role ... <|im_end|>, the Qwen families)",
		               (int)(len < 40 ? len : 40), tmpl);
	out->format = CHAT_CHATML;
	out->thinking = holds(tmpl, len, "enable_thinking");
	out->rules = CHAT_RULES_CHATML;
	out->tools = CHAT_TOOLS_NONE;
	if (holds(tmpl, len, "<function=") && holds(tmpl, len, "<parameter=")) {
		out->tools = CHAT_TOOLS_XML;
		/* Qwen3.5's: the reasoning rules of Qwen3's, a tools list
		 * of JSON lines; Qwen3-Coder's: the tools as XML */
		if (holds(tmpl, len, "last_query_index") && holds(tmpl, len, "<tool_response>") &&
		    holds(tmpl, len, "You have access to the following functions:"))
			out->rules = CHAT_RULES_QWEN35;
		else if (holds(tmpl, len, "render_extra_keys") &&
		         holds(tmpl, len, "<tool_response>") &&
		         holds(tmpl, len, "You have access to the following tools:"))
			out->rules = CHAT_RULES_QWEN3_CODER;
	} else if (holds(tmpl, len, "last_query_index") && holds(tmpl, len, "<tool_call>") &&
	           holds(tmpl, len, "<tool_response>")) {
		out->rules = CHAT_RULES_QWEN3;
		out->tools = CHAT_TOOLS_HERMES;
	}
	return IG_E_OK;
}

/* Appends while there is room; counts all. With `plain`, each stretch of
 * the caller's text that is not empty is noted as a plain span, again while
 * there is room, all counted. */
struct sink {
	char *out;
	size_t cap, len;
	bool plain;
	struct chat_span *spans;
	size_t spans_cap, n_spans;
};

static void put(struct sink *s, const char *p, size_t n)
{
	if (s->len + n <= s->cap && n)
		memcpy(s->out + s->len, p, n);
	s->len += n;
}

static void puts_(struct sink *s, const char *p)
{
	put(s, p, strlen(p));
}

/* The caller's text: a role or a content. */
static void put_plain(struct sink *s, const char *p, size_t n)
{
	if (s->plain && n) {
		if (s->n_spans < s->spans_cap)
			s->spans[s->n_spans] = (struct chat_span){s->len, s->len + n};
		s->n_spans++;
	}
	put(s, p, n);
}

/* ---- Qwen3's template's rules ------------------------------------------- */

static bool eq(const char *p, size_t n, const char *lit)
{
	return n == strlen(lit) && !memcmp(p, lit, n);
}

static bool starts(const char *p, size_t n, const char *lit)
{
	return n >= strlen(lit) && !memcmp(p, lit, strlen(lit));
}

static bool ends(const char *p, size_t n, const char *lit)
{
	return n >= strlen(lit) && !memcmp(p + n - strlen(lit), lit, strlen(lit));
}

/* The last occurrence of lit in p[0..n), or NULL. */
static const char *last_of(const char *p, size_t n, const char *lit)
{
	const char *found = NULL, *at = p;
	size_t l = strlen(lit);

	while ((at = memmem(at, n - (size_t)(at - p), lit, l))) {
		found = at;
		at++;
	}
	return found;
}

/* Python's strip of '\n' on either side. */
static void strip_nl(const char **p, size_t *n, bool left, bool right)
{
	while (left && *n && **p == '\n')
		(*p)++, (*n)--;
	while (right && *n && (*p)[*n - 1] == '\n')
		(*n)--;
}

#define Q3_TOOLS_HEAD                                                                              \
	"# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are " \
	"provided with function signatures within <tools></tools> XML tags:\n<tools>"
#define Q3_TOOLS_TAIL                                                                              \
	"\n</tools>\n\nFor each function call, return a json object with function name and "       \
	"arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "             \
	"<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"

/* An assistant message by Qwen3's template: its reasoning and content (the
 * content's <think> block split off unless the reasoning came apart), the
 * reasoning kept after the last real user message (always on the last
 * message), then its calls. */
static void q3_assistant(struct sink *s, const struct chat_msg *m, bool after_query, bool last)
{
	const char *c = m->content ? m->content : "", *r = "";
	size_t cn = m->content ? m->content_len : 0, rn = 0;

	if (m->has_reasoning) {
		r = m->reasoning ? m->reasoning : "";
		rn = m->reasoning ? m->reasoning_len : 0;
	} else {
		const char *end = last_of(c, cn, "</think>");

		if (end) {
			/* reasoning: before the first </think>, less trailing
			 * newlines, after its last <think>, less leading ones */
			const char *first = memmem(c, cn, "</think>", 8), *open;
			size_t before = (size_t)(first - c);

			r = c;
			rn = before;
			strip_nl(&r, &rn, false, true);
			if ((open = last_of(r, rn, "<think>"))) {
				rn -= (size_t)(open + 7 - r);
				r = open + 7;
			}
			strip_nl(&r, &rn, true, false);
			/* content: after the last </think>, less leading newlines */
			cn -= (size_t)(end + 8 - c);
			c = end + 8;
			strip_nl(&c, &cn, true, false);
		}
	}
	puts_(s, "<|im_start|>assistant\n");
	if (after_query && (last || rn)) {
		strip_nl(&r, &rn, true, true);
		strip_nl(&c, &cn, true, false);
		puts_(s, "<think>\n");
		put_plain(s, r, rn);
		puts_(s, "\n</think>\n\n");
	}
	put_plain(s, c, cn);
	for (size_t k = 0; k < m->n_calls; k++) {
		const struct chat_call *cl = &m->calls[k];

		if (k || cn)
			puts_(s, "\n");
		puts_(s, "<tool_call>\n{\"name\": \"");
		put_plain(s, cl->name, cl->name_len);
		puts_(s, "\", \"arguments\": ");
		put_plain(s, cl->args, cl->args_len);
		puts_(s, "}\n</tool_call>");
	}
	puts_(s, "<|im_end|>\n");
}

static void q3_render(struct sink *s, const struct chat_msg *msgs, size_t n,
                      const char *const *tools, const size_t *tool_lens, size_t n_tools)
{
	bool sys0 = n && eq(msgs[0].role, msgs[0].role_len, "system");
	size_t last_query = n ? n - 1 : 0;

	if (n_tools) {
		puts_(s, "<|im_start|>system\n");
		if (sys0) {
			put_plain(s, msgs[0].content, msgs[0].content_len);
			puts_(s, "\n\n");
		}
		puts_(s, Q3_TOOLS_HEAD);
		for (size_t i = 0; i < n_tools; i++) {
			puts_(s, "\n");
			put_plain(s, tools[i], tool_lens[i]);
		}
		puts_(s, Q3_TOOLS_TAIL);
	} else if (sys0) {
		puts_(s, "<|im_start|>system\n");
		put_plain(s, msgs[0].content, msgs[0].content_len);
		puts_(s, "<|im_end|>\n");
	}
	/* the last real user message: not a tool response wrapped as one */
	for (size_t i = n; i-- > 0;) {
		const struct chat_msg *m = &msgs[i];

		if (eq(m->role, m->role_len, "user") &&
		    !(starts(m->content, m->content_len, "<tool_response>") &&
		      ends(m->content, m->content_len, "</tool_response>"))) {
			last_query = i;
			break;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct chat_msg *m = &msgs[i];

		if (eq(m->role, m->role_len, "user") || (eq(m->role, m->role_len, "system") && i)) {
			puts_(s, "<|im_start|>");
			put(s, m->role, m->role_len);
			puts_(s, "\n");
			put_plain(s, m->content, m->content_len);
			puts_(s, "<|im_end|>\n");
		} else if (eq(m->role, m->role_len, "assistant")) {
			q3_assistant(s, m, i > last_query, i + 1 == n);
		} else if (eq(m->role, m->role_len, "tool")) {
			if (!i || !eq(msgs[i - 1].role, msgs[i - 1].role_len, "tool"))
				puts_(s, "<|im_start|>user");
			puts_(s, "\n<tool_response>\n");
			put_plain(s, m->content, m->content_len);
			puts_(s, "\n</tool_response>");
			if (i + 1 == n || !eq(msgs[i + 1].role, msgs[i + 1].role_len, "tool"))
				puts_(s, "<|im_end|>\n");
		}
		/* the template writes nothing for another role, nor for the
		 * first system message (above) */
	}
}

/* The XML form's templates (below). */
static int q35_render(struct sink *s, const struct chat_msg *msgs, size_t n,
                      const char *const *tools, const size_t *tool_lens, size_t n_tools,
                      unsigned flags, struct ig_errbuf *eb);
static int coder_render(struct sink *s, const struct chat_msg *msgs, size_t n,
                        const char *const *tools, const size_t *tool_lens, size_t n_tools,
                        unsigned flags, struct ig_errbuf *eb);

int chat_render_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                      unsigned flags, char *out, size_t cap, size_t *len, struct chat_span *spans,
                      size_t spans_cap, size_t *n_spans, struct ig_errbuf *eb)
{
	return chat_render_tools_spans(t, msgs, n, NULL, NULL, 0, flags, out, cap, len, spans,
	                               spans_cap, n_spans, eb);
}

int chat_render_tools_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                            const char *const *tools, const size_t *tool_lens, size_t n_tools,
                            unsigned flags, char *out, size_t cap, size_t *len,
                            struct chat_span *spans, size_t spans_cap, size_t *n_spans,
                            struct ig_errbuf *eb)
{
	struct sink s = {out, cap, 0, n_spans != NULL, spans, spans_cap, 0};

	*len = 0;
	if (s.plain)
		*n_spans = 0;
	if (flags & ~(unsigned)(CHAT_GENERATION_PROMPT | CHAT_NO_THINKING))
		return ig_errf(eb, IG_E_INVAL, "chat_render: unknown flags 0x%x", flags);
	if ((flags & CHAT_NO_THINKING) && !t->thinking)
		return ig_errf(eb, IG_E_INVAL,
		               "thinking off: this chat template cannot turn thinking off (it has "
		               "no enable_thinking)");
	if ((flags & CHAT_NO_THINKING) && !(flags & CHAT_GENERATION_PROMPT))
		return ig_errf(eb, IG_E_INVAL,
		               "thinking off closes the assistant's reasoning: it needs the "
		               "generation prompt");
	if (n_tools && t->tools == CHAT_TOOLS_NONE)
		return ig_errf(eb, IG_E_INVAL,
		               "tools: this model's chat template has no tool calls");
	if (n_tools && t->rules == CHAT_RULES_CHATML)
		return ig_errf(eb, IG_E_INVAL,
		               "tools: this model's chat template writes tool calls in the XML "
		               "form, but it is not one whose rules Ignis renders; accepted: "
		               "Qwen3's, Qwen3.5's and Qwen3-Coder's templates");
	if (t->rules == CHAT_RULES_QWEN35 || t->rules == CHAT_RULES_QWEN3_CODER) {
		int rc = t->rules == CHAT_RULES_QWEN35
		             ? q35_render(&s, msgs, n, tools, tool_lens, n_tools, flags, eb)
		             : coder_render(&s, msgs, n, tools, tool_lens, n_tools, flags, eb);

		if (rc) {
			*len = 0;
			if (s.plain)
				*n_spans = 0;
			return rc;
		}
	} else {
		if (t->rules == CHAT_RULES_QWEN3) {
			q3_render(&s, msgs, n, tools, tool_lens, n_tools);
		} else
			for (size_t i = 0; i < n; i++) {
				puts_(&s, "<|im_start|>");
				put_plain(&s, msgs[i].role, msgs[i].role_len);
				puts_(&s, "\n");
				put_plain(&s, msgs[i].content, msgs[i].content_len);
				puts_(&s, "<|im_end|>\n");
			}
		if (flags & CHAT_GENERATION_PROMPT)
			puts_(&s, "<|im_start|>assistant\n");
		if (flags & CHAT_NO_THINKING)
			puts_(&s, "<think>\n\n</think>\n\n");
	}
	*len = s.len;
	if (s.plain)
		*n_spans = s.n_spans;
	if (s.len > cap && s.plain && s.n_spans > spans_cap)
		return ig_errf(eb, IG_E_INVAL,
		               "the conversation renders to %zu bytes and %zu plain spans; room "
		               "for %zu and %zu",
		               s.len, s.n_spans, cap, spans_cap);
	if (s.len > cap)
		return ig_errf(eb, IG_E_INVAL,
		               "the conversation renders to %zu bytes; room for %zu", s.len, cap);
	if (s.plain && s.n_spans > spans_cap)
		return ig_errf(eb, IG_E_INVAL, "the conversation has %zu plain spans; room for %zu",
		               s.n_spans, spans_cap);
	return IG_E_OK;
}

int chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                unsigned flags, char *out, size_t cap, size_t *len, struct ig_errbuf *eb)
{
	return chat_render_spans(t, msgs, n, flags, out, cap, len, NULL, 0, NULL, eb);
}

/* ---- tojson, as transformers' templates write it ------------------------ */

struct jbuf {
	char *p;
	size_t len, cap;
	bool bad;
};

static void jput(struct jbuf *b, const char *s, size_t n)
{
	if (b->bad)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		char *q;

		while (c < b->len + n + 1)
			c *= 2;
		if (!(q = realloc(b->p, c))) {
			b->bad = true;
			return;
		}
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void jputs(struct jbuf *b, const char *s)
{
	jput(b, s, strlen(s));
}

/* A JSON string, escaped as Python's json.dumps with ensure_ascii off: ",
 * \\ and the control characters (\n, \r, \t, \b, \f by name, the rest as
 * \u00XX); everything else as it is. */
static void jstr(struct jbuf *b, const char *s, size_t n)
{
	size_t run = 0;

	jputs(b, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		jput(b, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\')
			snprintf(esc, sizeof esc, "\\%c", c);
		else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
			snprintf(esc, sizeof esc, "\\%c",
			         c == '\n'   ? 'n'
			         : c == '\r' ? 'r'
			         : c == '\t' ? 't'
			         : c == '\b' ? 'b'
			                     : 'f');
		else
			snprintf(esc, sizeof esc, "\\u%04x", c);
		jputs(b, esc);
	}
	jput(b, s + run, n - run);
	jputs(b, "\"");
}

/* A real as Python's repr: the shortest %.Ne that reads back, then written
 * as repr writes it (an exponent from 1e16 and below 1e-4, "e+NN"/"e-NN"
 * with two digits at least, ".0" on a whole number). */
static bool jreal(struct jbuf *b, double v)
{
	char digits[40], out[64];
	int prec, exp10;
	const char *e;

	if (!isfinite(v))
		return false;
	if (v == 0) {
		jputs(b, signbit(v) ? "-0.0" : "0.0");
		return true;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(digits, sizeof digits, "%.*e", prec - 1, v);
		if (strtod(digits, NULL) == v)
			break;
	}
	/* digits: [-]d.ddde[+-]XX */
	e = strchr(digits, 'e');
	exp10 = atoi(e + 1);
	if (exp10 >= 16 || exp10 < -4) {
		char mant[32];
		size_t ml = (size_t)(e - digits);

		memcpy(mant, digits, ml);
		mant[ml] = '\0';
		snprintf(out, sizeof out, "%se%c%02d", mant, exp10 < 0 ? '-' : '+', abs(exp10));
	} else {
		snprintf(out, sizeof out, "%.*f", prec - 1 - exp10 > 0 ? prec - 1 - exp10 : 0, v);
		if (!strchr(out, '.'))
			strcat(out, ".0");
	}
	jputs(b, out);
	return true;
}

static bool jval(struct jbuf *b, const json_t *v)
{
	char num[32];
	const char *k;
	json_t *x;
	size_t i;
	bool first = true;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		jputs(b, "{");
		json_object_foreach((json_t *)v, k, x)
		{
			if (!first)
				jputs(b, ", ");
			first = false;
			jstr(b, k, strlen(k));
			jputs(b, ": ");
			if (!jval(b, x))
				return false;
		}
		jputs(b, "}");
		return true;
	case JSON_ARRAY:
		jputs(b, "[");
		json_array_foreach(v, i, x)
		{
			if (i)
				jputs(b, ", ");
			if (!jval(b, x))
				return false;
		}
		jputs(b, "]");
		return true;
	case JSON_STRING:
		jstr(b, json_string_value(v), json_string_length(v));
		return true;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		jputs(b, num);
		return true;
	case JSON_REAL:
		return jreal(b, json_real_value(v));
	case JSON_TRUE:
		jputs(b, "true");
		return true;
	case JSON_FALSE:
		jputs(b, "false");
		return true;
	case JSON_NULL:
		jputs(b, "null");
		return true;
	}
	return false;
}

char *chat_tojson(const struct json_t *v)
{
	struct jbuf b = {0};

	if (!jval(&b, v) || b.bad) {
		free(b.p);
		return NULL;
	}
	return b.p ? b.p : strdup("");
}

/* ---- the XML form: Qwen3.5's and Qwen3-Coder's templates ----------------- */

/* A value as Python's str() writes it, which the templates' `| string`
 * gives: text as it is, True/False/None, integers, reals as repr; a list or
 * a dict as repr (quoted items) - what Python's Jinja writes, the engine
 * the models were trained with (ADR 0060; @huggingface/jinja writes true,
 * 1 for 1.0, and refuses null, so the oracle's table keeps off those). */
static bool pyval(struct jbuf *b, const json_t *v, bool top);

static void pystr_quoted(struct jbuf *b, const char *p, size_t n)
{
	/* repr's quotes: single, unless the text holds one and no double */
	char q = memchr(p, '\'', n) && !memchr(p, '"', n) ? '"' : '\'';
	char esc[8];

	jput(b, &q, 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c == '\\' || c == (unsigned char)q)
			snprintf(esc, sizeof esc, "\\%c", c);
		else if (c == '\n' || c == '\r' || c == '\t')
			snprintf(esc, sizeof esc, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
		else if (c < 0x20 || c == 0x7f)
			snprintf(esc, sizeof esc, "\\x%02x", c);
		else {
			jput(b, p + i, 1);
			continue;
		}
		jputs(b, esc);
	}
	jput(b, &q, 1);
}

static bool pyval(struct jbuf *b, const json_t *v, bool top)
{
	char num[32];
	const char *k;
	json_t *x;
	size_t i;
	bool first = true;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		jputs(b, "{");
		json_object_foreach((json_t *)v, k, x)
		{
			if (!first)
				jputs(b, ", ");
			first = false;
			pystr_quoted(b, k, strlen(k));
			jputs(b, ": ");
			if (!pyval(b, x, false))
				return false;
		}
		jputs(b, "}");
		return true;
	case JSON_ARRAY:
		jputs(b, "[");
		json_array_foreach(v, i, x)
		{
			if (i)
				jputs(b, ", ");
			if (!pyval(b, x, false))
				return false;
		}
		jputs(b, "]");
		return true;
	case JSON_STRING:
		if (top)
			jput(b, json_string_value(v), json_string_length(v));
		else
			pystr_quoted(b, json_string_value(v), json_string_length(v));
		return true;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		jputs(b, num);
		return true;
	case JSON_REAL:
		return jreal(b, json_real_value(v));
	case JSON_TRUE:
		jputs(b, "True");
		return true;
	case JSON_FALSE:
		jputs(b, "False");
		return true;
	case JSON_NULL:
		jputs(b, "None");
		return true;
	}
	return false;
}

/* An argument's value or a schema's field as the templates write it: an
 * object or a list as tojson, anything else as `| string`; the caller's
 * text, a plain span. False when out of memory or not finite. */
static bool xml_value(struct sink *s, const json_t *v)
{
	struct jbuf b = {0};
	bool ok = json_is_object(v) || json_is_array(v) ? jval(&b, v) : pyval(&b, v, true);

	ok = ok && !b.bad;
	if (ok)
		put_plain(s, b.p ? b.p : "", b.len);
	free(b.p);
	return ok;
}

/* Python's strip() of ASCII whitespace (a NUL byte is no space, as
 * strchr would take it). */
static bool space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

static void trim(const char **p, size_t *n)
{
	while (*n && space(**p))
		(*p)++, (*n)--;
	while (*n && space((*p)[*n - 1]))
		(*n)--;
}

/* A call in the XML form, after what comes before its <tool_call>: its
 * arguments (a JSON object's text) key by key in their order. */
static int xml_call(struct sink *s, const struct chat_call *cl, struct ig_errbuf *eb)
{
	json_t *args = json_loadb(cl->args ? cl->args : "", cl->args_len, 0, NULL);
	const char *k;
	json_t *v;
	int rc = IG_E_OK;

	if (!json_is_object(args)) {
		json_decref(args);
		return ig_errf(
		    eb, IG_E_INVAL,
		    "tool call '%.*s': its arguments are not a JSON object; the XML form "
		    "writes them key by key",
		    (int)cl->name_len, cl->name);
	}
	puts_(s, "<tool_call>\n<function=");
	put_plain(s, cl->name, cl->name_len);
	puts_(s, ">\n");
	json_object_foreach(args, k, v)
	{
		puts_(s, "<parameter=");
		put_plain(s, k, strlen(k));
		puts_(s, ">\n");
		if (!xml_value(s, v)) {
			rc = ig_errf(eb, IG_E_INVAL,
			             "tool call '%.*s': argument '%s' cannot be written",
			             (int)cl->name_len, cl->name, k);
			break;
		}
		puts_(s, "\n</parameter>\n");
	}
	puts_(s, "</function>\n</tool_call>");
	json_decref(args);
	return rc;
}

#define Q35_TOOLS_HEAD "# Tools\n\nYou have access to the following functions:\n\n<tools>"
/* The format both templates teach after the tools list; they differ in a
 * few words, the second parameter's example and the first reminder. */
#define XML_FORMAT_A                                                                               \
	"\n</tools>\n\nIf you choose to call a %s ONLY reply in the following format with NO "     \
	"suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_"  \
	"1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\n"
#define XML_FORMAT_B                                                                               \
	"\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls "   \
	"MUST follow the specified format: "
#define XML_FORMAT_C                                                                               \
	"\n- Required parameters MUST be specified\n- You may provide optional reasoning for "     \
	"your "                                                                                    \
	"function call in natural language BEFORE the function call, but NOT after\n- If there "   \
	"is no function call available, answer the question like normal with your current "        \
	"knowledge and do not tell the user about function calls\n</IMPORTANT>"

static void xml_format(struct sink *s, bool coder)
{
	char head[512];

	snprintf(head, sizeof head, XML_FORMAT_A, coder ? "tool" : "function");
	puts_(s, head);
	puts_(s, coder
	             ? "value_2"
	             : "This is the value for the second parameter\nthat can span\nmultiple lines");
	puts_(s, XML_FORMAT_B);
	puts_(s, coder
	             ? "the tool calling block MUST begin with an opening <tool_call> tag and end "
	               "with a closing </tool_call> tag."
	             : "an inner <function=...></function> block must be nested within "
	               "<tool_call></tool_call> XML tags");
	puts_(s, XML_FORMAT_C);
}

static bool is_tool_response(const char *c, size_t n)
{
	return starts(c, n, "<tool_response>") && ends(c, n, "</tool_response>");
}

/* Qwen3.5's template: every content trimmed; Qwen3's reasoning rules but
 * that each answer after the last real user message carries a <think>
 * block, empty or not; calls in the XML form; the generation prompt opens
 * the reasoning (or closes it empty with thinking off). */
static int q35_render(struct sink *s, const struct chat_msg *msgs, size_t n,
                      const char *const *tools, const size_t *tool_lens, size_t n_tools,
                      unsigned flags, struct ig_errbuf *eb)
{
	bool sys0 = n && eq(msgs[0].role, msgs[0].role_len, "system");
	size_t last_query = n;

	if (!n)
		return ig_errf(eb, IG_E_INVAL, "messages: Qwen3.5's template needs one at least");
	for (size_t i = n; i-- > 0;) {
		const char *c = msgs[i].content ? msgs[i].content : "";
		size_t cn = msgs[i].content ? msgs[i].content_len : 0;

		trim(&c, &cn);
		if (eq(msgs[i].role, msgs[i].role_len, "user") && !is_tool_response(c, cn)) {
			last_query = i;
			break;
		}
	}
	if (last_query == n)
		return ig_errf(eb, IG_E_INVAL,
		               "messages: Qwen3.5's template needs a user message (one that is not "
		               "a wrapped <tool_response>)");
	if (n_tools) {
		puts_(s, "<|im_start|>system\n" Q35_TOOLS_HEAD);
		for (size_t i = 0; i < n_tools; i++) {
			puts_(s, "\n");
			put_plain(s, tools[i], tool_lens[i]);
		}
		xml_format(s, false);
	}
	if (sys0) {
		const char *c = msgs[0].content ? msgs[0].content : "";
		size_t cn = msgs[0].content ? msgs[0].content_len : 0;

		trim(&c, &cn);
		if (!n_tools)
			puts_(s, "<|im_start|>system\n");
		else if (cn)
			puts_(s, "\n\n");
		put_plain(s, c, cn);
		if (!n_tools)
			puts_(s, "<|im_end|>\n");
	}
	if (n_tools)
		puts_(s, "<|im_end|>\n");
	for (size_t i = 0; i < n; i++) {
		const struct chat_msg *m = &msgs[i];
		const char *c = m->content ? m->content : "";
		size_t cn = m->content ? m->content_len : 0;
		int rc;

		trim(&c, &cn);
		if (eq(m->role, m->role_len, "system")) {
			if (i)
				return ig_errf(eb, IG_E_INVAL,
				               "messages[%zu]: Qwen3.5's template takes a system "
				               "message first only",
				               i);
		} else if (eq(m->role, m->role_len, "user")) {
			puts_(s, "<|im_start|>user\n");
			put_plain(s, c, cn);
			puts_(s, "<|im_end|>\n");
		} else if (eq(m->role, m->role_len, "assistant")) {
			const char *r = "";
			size_t rn = 0;

			if (m->has_reasoning) {
				r = m->reasoning ? m->reasoning : "";
				rn = m->reasoning ? m->reasoning_len : 0;
			} else if (memmem(c, cn, "</think>", 8)) {
				const char *first = memmem(c, cn, "</think>", 8),
				           *end = last_of(c, cn, "</think>"), *open;

				r = c;
				rn = (size_t)(first - c);
				strip_nl(&r, &rn, false, true);
				if ((open = last_of(r, rn, "<think>"))) {
					rn -= (size_t)(open + 7 - r);
					r = open + 7;
				}
				strip_nl(&r, &rn, true, false);
				cn -= (size_t)(end + 8 - c);
				c = end + 8;
				strip_nl(&c, &cn, true, false);
			}
			trim(&r, &rn);
			puts_(s, "<|im_start|>assistant\n");
			if (i > last_query) {
				puts_(s, "<think>\n");
				put_plain(s, r, rn);
				puts_(s, "\n</think>\n\n");
			}
			put_plain(s, c, cn);
			for (size_t k = 0; k < m->n_calls; k++) {
				const char *tc = c;
				size_t tn = cn;

				trim(&tc, &tn);
				puts_(s, k ? "\n" : tn ? "\n\n" : "");
				if ((rc = xml_call(s, &m->calls[k], eb)))
					return rc;
			}
			puts_(s, "<|im_end|>\n");
		} else if (eq(m->role, m->role_len, "tool")) {
			if (i && !eq(msgs[i - 1].role, msgs[i - 1].role_len, "tool"))
				puts_(s, "<|im_start|>user");
			puts_(s, "\n<tool_response>\n");
			put_plain(s, c, cn);
			puts_(s, "\n</tool_response>");
			if (i + 1 == n || !eq(msgs[i + 1].role, msgs[i + 1].role_len, "tool"))
				puts_(s, "<|im_end|>\n");
		} else
			return ig_errf(
			    eb, IG_E_INVAL,
			    "messages[%zu]: role '%.*s' is not one Qwen3.5's template takes "
			    "(system, user, assistant, tool)",
			    i, (int)m->role_len, m->role);
	}
	if (flags & CHAT_GENERATION_PROMPT)
		puts_(s, flags & CHAT_NO_THINKING ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
		                                  : "<|im_start|>assistant\n<think>\n");
	return IG_E_OK;
}

/* Qwen3-Coder's render_extra_keys: each key of object o not in `skip` (a
 * NULL-ended list) as "\n<KEY>VALUE</KEY>". */
static bool coder_extra(struct sink *s, const json_t *o, const char *const *skip)
{
	const char *k;
	json_t *v;

	if (!json_is_object(o))
		return true;
	json_object_foreach((json_t *)o, k, v)
	{
		bool skipped = false;

		for (const char *const *x = skip; *x; x++)
			skipped |= !strcmp(*x, k);
		if (skipped)
			continue;
		puts_(s, "\n<");
		put_plain(s, k, strlen(k));
		puts_(s, ">");
		if (!xml_value(s, v))
			return false;
		puts_(s, "</");
		put_plain(s, k, strlen(k));
		puts_(s, ">");
	}
	return true;
}

/* A description: trimmed when it is text, else as `| string`. */
static bool coder_trimmed(struct sink *s, const json_t *v)
{
	const char *p;
	size_t n;

	if (!json_is_string(v))
		return xml_value(s, v);
	p = json_string_value(v);
	n = json_string_length(v);
	trim(&p, &n);
	put_plain(s, p, n);
	return true;
}

/* One tool of Qwen3-Coder's list, from its JSON text. */
static int coder_tool(struct sink *s, const char *text, size_t len, struct ig_errbuf *eb)
{
	static const char *const param_keys[] = {"name", "type", "description", NULL},
	                         *params_keys[] = {"type", "properties", NULL},
	                         *tool_keys[] = {"type", "name", "description", "parameters", NULL};
	json_t *root = json_loadb(text, len, 0, NULL), *tool = root, *params, *props, *name;
	bool ok = true;

	if (!json_is_object(root)) {
		json_decref(root);
		return ig_errf(eb, IG_E_INVAL, "tools: a tool is not a JSON object");
	}
	if (json_object_get(root, "function"))
		tool = json_object_get(root, "function");
	name = json_object_get(tool, "name");
	puts_(s, "\n<function>\n<name>");
	ok = !name || xml_value(s, name);
	puts_(s, "</name>");
	if (json_object_get(tool, "description")) {
		puts_(s, "\n<description>");
		ok = ok && coder_trimmed(s, json_object_get(tool, "description"));
		puts_(s, "</description>");
	}
	puts_(s, "\n<parameters>");
	params = json_object_get(tool, "parameters");
	props = json_object_get(params, "properties");
	if (json_is_object(params) && json_is_object(props)) {
		const char *k;
		json_t *f;

		json_object_foreach(props, k, f)
		{
			puts_(s, "\n<parameter>\n<name>");
			put_plain(s, k, strlen(k));
			puts_(s, "</name>");
			if (json_object_get(f, "type")) {
				struct jbuf b = {0};

				/* `| string` even on a list of types: repr */
				ok = ok && pyval(&b, json_object_get(f, "type"), true) && !b.bad;
				puts_(s, "\n<type>");
				put_plain(s, b.p ? b.p : "", b.len);
				puts_(s, "</type>");
				free(b.p);
			}
			if (json_object_get(f, "description")) {
				puts_(s, "\n<description>");
				ok = ok && coder_trimmed(s, json_object_get(f, "description"));
				puts_(s, "</description>");
			}
			ok = ok && coder_extra(s, f, param_keys);
			puts_(s, "\n</parameter>");
		}
	}
	ok = ok && coder_extra(s, params, params_keys);
	puts_(s, "\n</parameters>");
	ok = ok && coder_extra(s, tool, tool_keys);
	puts_(s, "\n</function>");
	json_decref(root);
	return ok ? IG_E_OK : ig_errf(eb, IG_E_INVAL, "tools: a tool's value cannot be written");
}

/* Qwen3-Coder's template: contents as they are; the tools listed as XML
 * with a default system text when none is given; no reasoning. */
static int coder_render(struct sink *s, const struct chat_msg *msgs, size_t n,
                        const char *const *tools, const size_t *tool_lens, size_t n_tools,
                        unsigned flags, struct ig_errbuf *eb)
{
	bool sys0 = n && eq(msgs[0].role, msgs[0].role_len, "system");
	size_t first = sys0 ? 1 : 0;
	int rc;

	if (sys0) {
		puts_(s, "<|im_start|>system\n");
		put_plain(s, msgs[0].content, msgs[0].content_len);
	} else if (n_tools)
		puts_(s,
		      "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact "
		      "with a computer to solve tasks.");
	if (n_tools) {
		puts_(s, "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>");
		for (size_t i = 0; i < n_tools; i++)
			if ((rc = coder_tool(s, tools[i], tool_lens[i], eb)))
				return rc;
		xml_format(s, true);
	}
	if (sys0 || n_tools)
		puts_(s, "<|im_end|>\n");
	for (size_t i = first; i < n; i++) {
		const struct chat_msg *m = &msgs[i];

		if (eq(m->role, m->role_len, "assistant") && m->n_calls) {
			const char *c = m->content ? m->content : "";
			size_t cn = m->content ? m->content_len : 0;

			trim(&c, &cn);
			puts_(s, "<|im_start|>assistant");
			if (cn) {
				puts_(s, "\n");
				put_plain(s, c, cn);
				puts_(s, "\n");
			}
			for (size_t k = 0; k < m->n_calls; k++) {
				puts_(s, "\n");
				if ((rc = xml_call(s, &m->calls[k], eb)))
					return rc;
			}
			puts_(s, "<|im_end|>\n");
		} else if (eq(m->role, m->role_len, "tool")) {
			if (i > first && !eq(msgs[i - 1].role, msgs[i - 1].role_len, "tool"))
				puts_(s, "<|im_start|>user\n");
			puts_(s, "<tool_response>\n");
			put_plain(s, m->content, m->content_len);
			puts_(s, "\n</tool_response>\n");
			if (i + 1 == n || !eq(msgs[i + 1].role, msgs[i + 1].role_len, "tool"))
				puts_(s, "<|im_end|>\n");
		} else {
			puts_(s, "<|im_start|>");
			put_plain(s, m->role, m->role_len);
			puts_(s, "\n");
			put_plain(s, m->content, m->content_len);
			puts_(s, "<|im_end|>\n");
		}
	}
	if (flags & CHAT_GENERATION_PROMPT)
		puts_(s, "<|im_start|>assistant\n");
	return IG_E_OK;
}
