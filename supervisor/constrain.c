/* constrain.c - the grammar a chat request asks for (constrain.h). */
#include "constrain.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

struct cst_buf {
	char *s;
	size_t n, cap;
	bool oom;
};

static void cst__put(struct cst_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void cst__put(struct cst_buf *b, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = true;
			return;
		}
		if (b->s && b->n + (size_t)k < b->cap) {
			b->n += (size_t)k;
			return;
		}
		{
			size_t cap = (b->cap ? 2 * b->cap : 4096) + (size_t)k;
			char *s = realloc(b->s, cap);

			if (!s) {
				b->oom = true;
				return;
			}
			b->s = s;
			b->cap = cap;
		}
	}
}

/* A literal of the text form holding s: '"' and '\' escaped, control
 * characters as \xHH (names and markers are ASCII). */
static void cst__lit(struct cst_buf *b, const char *s)
{
	cst__put(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			cst__put(b, "\\%c", c);
		else if (c == '\n')
			cst__put(b, "\\n");
		else if (c < 0x20)
			cst__put(b, "\\x%02X", c);
		else
			cst__put(b, "%c", c);
	}
	cst__put(b, "\"");
}

bool cst_think_open(const char *text, size_t len)
{
	const char *open = NULL, *close = NULL;

	for (size_t i = 0; i + 7 <= len; i++) {
		if (!memcmp(text + i, "<think>", 7))
			open = text + i;
		else if (i + 8 <= len && !memcmp(text + i, "</think>", 8))
			close = text + i;
	}
	return open && (!close || open > close);
}

/*
 * Text without "</think>", then "</think>": a byte automaton written as
 * rules, tk-K having matched the marker's first K bytes (its eight bytes
 * differ, so a mismatch falls back to 0, or to 1 on '<'). Every state may
 * stop: the marker comes next.
 */
static void cst__thinking(struct cst_buf *b, bool open)
{
	static const char mark[] = "</think>";

	for (unsigned k = 0; k < 8; k++) {
		cst__put(b, "tk-%u ::= \"\"", k);
		if (k > 0 && k < 7)
			cst__put(b, " | \"%c\" tk-%u", mark[k], k + 1);
		cst__put(b, " | \"<\" tk-1");
		if (k == 0)
			cst__put(b, " | %%[^\\x3C] tk-0\n");
		else
			cst__put(b, " | %%[^\\x3C\\x%02X] tk-0\n", (unsigned)mark[k]);
	}
	if (open)
		cst__put(b, "think ::= tk-0 \"</think>\"\n");
	else
		cst__put(b, "think ::= ( \"<think>\" tk-0 \"</think>\" )?\n");
}

/* The part of a schema, its root rule `prefix`r0, appended; its errors are
 * the field's 400. */
static int cst__schema(struct cst_buf *b, const json_t *schema, const char *prefix,
                       const char *field, const char *what, struct oai_err *e)
{
	struct ig_errbuf eb = {0};
	char *part;
	int rc = gs_part_gbnf((json_t *)schema, prefix, &part, &eb);

	if (rc == IG_E_NOMEM) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	if (rc) {
		oai_errf(e, 400, field, "invalid_schema", "%s: %s", what, eb.msg);
		return -1;
	}
	cst__put(b, "%s", part);
	free(part);
	return 0;
}

/* One Hermes call of tool i: its name and arguments. */
static int cst__call_alt(struct cst_buf *b, const struct oai_req *q, size_t i, struct oai_err *e)
{
	char prefix[32], what[96], lit[128];

	snprintf(prefix, sizeof prefix, "t%zu-", i);
	snprintf(lit, sizeof lit, "\"%s\", \"arguments\": ", q->tools[i].name);
	cst__put(b, "call-%zu ::= ", i);
	cst__lit(b, lit);
	if (!q->tools[i].params) {
		cst__put(b, " object\n");
		return 0;
	}
	cst__put(b, " t%zu-r0\n", i);
	snprintf(what, sizeof what, "tool %zu ('%s')'s parameters", i, q->tools[i].name);
	return cst__schema(b, q->tools[i].params, prefix, "tools", what, e);
}

/* ---- the XML form (Qwen3.5, Qwen3-Coder; docs/adr/0060) --------------------- */

/*
 * A raw value: any bytes without "</parameter>" or "</function>", the
 * markers that end a value where outparse.c reads one. A byte automaton
 * written as rules: xt-S has matched state S, the longest tail of the text
 * that begins a marker (S indexes the markers' prefixes, xt-0 the empty
 * one); a byte that would complete a marker has no way on. Every state may
 * stop ("\n</parameter>" comes next, and no marker holds a newline, so the
 * two cannot form one across the seam).
 */
#define XT_MARKS 2
static const char *const xt_marks[XT_MARKS] = {"</parameter>", "</function>"};

/* The prefixes of the markers, each once ("" first): at most the sum of
 * their lengths. */
struct xt_states {
	const char *p[32];
	size_t n[32];
	unsigned count;
};

static int xt_index(const struct xt_states *st, const char *t, size_t n)
{
	for (unsigned i = 0; i < st->count; i++)
		if (st->n[i] == n && !memcmp(st->p[i], t, n))
			return (int)i;
	return -1;
}

static void cst__xml_text(struct cst_buf *b)
{
	struct xt_states st = {.p = {""}, .n = {0}, .count = 1};

	for (unsigned m = 0; m < XT_MARKS; m++)
		for (size_t k = 1; k < strlen(xt_marks[m]); k++)
			if (xt_index(&st, xt_marks[m], k) < 0) {
				st.p[st.count] = xt_marks[m];
				st.n[st.count++] = k;
			}
	for (unsigned s = 0; s < st.count; s++) {
		bool special[256] = {false};
		char t[32];

		cst__put(b, "xt-%u ::= \"\"", s);
		memcpy(t, st.p[s], st.n[s]);
		for (unsigned m = 0; m < XT_MARKS; m++)
			for (const char *c = xt_marks[m]; *c; c++) {
				unsigned char ch = (unsigned char)*c;
				bool whole = false;
				int next = 0;

				if (special[ch])
					continue;
				t[st.n[s]] = (char)ch;
				for (unsigned w = 0; w < XT_MARKS; w++)
					whole |= st.n[s] + 1 == strlen(xt_marks[w]) &&
					         !memcmp(t, xt_marks[w], st.n[s] + 1);
				/* the longest tail of t that begins a marker */
				for (size_t from = 0; !whole && from <= st.n[s]; from++)
					if ((next = xt_index(&st, t + from, st.n[s] + 1 - from)) >=
					    0)
						break;
				if (whole || next > 0) {
					special[ch] = true;
					if (!whole)
						cst__put(b, " | \"%c\" xt-%d", ch, next);
				}
			}
		cst__put(b, " | %%[^");
		for (unsigned ch = 0; ch < 256; ch++)
			if (special[ch])
				cst__put(b, "\\x%02X", ch);
		cst__put(b, "] xt-0\n");
	}
	cst__put(b, "xtext ::= xt-0\n");
	/* a parameter of a tool whose schema names none */
	cst__put(b, "xany ::= \"<parameter=\" %%[^<>\\n]+ \">\\n\" xtext "
	            "\"\\n</parameter>\\n\"\n");
}

/* Is s free of what a key cannot hold in the XML form ('<', '>', a newline)? */
static bool cst__xml_name_ok(const char *s)
{
	return !strpbrk(s, "<>\n") && *s;
}

/* One XML call of tool i: "<function=NAME>\n", its parameters in schema
 * order (the required ones, the others optional), "</function>". Each
 * value as outparse.c reads it back (op_value_of): raw text for a string
 * (an enum's or const's strings as they are), the JSON of its schema for
 * the rest; a parameter that may be either, or a string bounded by a
 * pattern or a length, cannot be written so that it reads back: a 400. */
static int cst__xml_call_alt(struct cst_buf *b, const struct oai_req *q, size_t i,
                             struct oai_err *e)
{
	const struct oai_tool *t = &q->tools[i];
	const json_t *props = json_object_get(t->params, "properties"),
	             *req = json_object_get(t->params, "required");
	char lit[512], prefix[48], what[160];
	const char *k;
	json_t *ps;
	size_t j = 0;

	if (!cst__xml_name_ok(t->name)) {
		oai_errf(e, 400, "tools", "invalid_value",
		         "tool %zu's name '%s' cannot be written in the XML form (it holds '<', "
		         "'>' or a newline)",
		         i, t->name);
		return -1;
	}
	snprintf(lit, sizeof lit, "<function=%s>\n", t->name);
	cst__put(b, "call-%zu ::= ", i);
	cst__lit(b, lit);
	if (!json_is_object(props)) {
		cst__put(b, " xany* \"</function>\"\n");
		return 0;
	}
	json_object_foreach((json_t *)props, k, ps)
	{
		bool required = false;
		size_t r;
		json_t *x;

		json_array_foreach(req, r, x) required |=
		    json_is_string(x) && !strcmp(json_string_value(x), k);
		cst__put(b, " xp-%zu-%zu%s", i, j++, required ? "" : "?");
	}
	cst__put(b, " \"</function>\"\n");
	j = 0;
	json_object_foreach((json_t *)props, k, ps)
	{
		enum op_value form = op_value_of(ps);
		const json_t *en = json_object_get(ps, "enum"), *cn = json_object_get(ps, "const");

		snprintf(what, sizeof what, "tool %zu ('%s')'s parameter '%s'", i, t->name, k);
		if (!cst__xml_name_ok(k) || strlen(k) > 400) {
			oai_errf(e, 400, "tools", "invalid_schema",
			         "%s: a key in the XML form cannot hold '<', '>' or a newline",
			         what);
			return -1;
		}
		if (form == OP_VALUE_MIXED) {
			oai_errf(
			    e, 400, "tools", "invalid_schema",
			    "%s: a string or another type cannot be constrained in the XML form "
			    "(a string's raw text may read as the other); accepted: one or the "
			    "other",
			    what);
			return -1;
		}
		if (form == OP_VALUE_TEXT &&
		    (json_object_get(ps, "pattern") || json_object_get(ps, "minLength") ||
		     json_object_get(ps, "maxLength") || json_object_get(ps, "format"))) {
			oai_errf(
			    e, 400, "tools", "invalid_schema",
			    "%s: a string's pattern, format or length bounds are not constrained "
			    "in the XML form (its raw text); accepted: a plain string or an enum",
			    what);
			return -1;
		}
		snprintf(lit, sizeof lit, "<parameter=%s>\n", k);
		cst__put(b, "xp-%zu-%zu ::= ", i, j);
		cst__lit(b, lit);
		if (form == OP_VALUE_JSON) {
			snprintf(prefix, sizeof prefix, "t%zu-p%zu-", i, j);
			cst__put(b, " t%zu-p%zu-r0 \"\\n</parameter>\\n\"\n", i, j);
			if (cst__schema(b, ps, prefix, "tools", what, e))
				return -1;
		} else if (json_is_string(cn) || json_is_array(en)) {
			size_t r, alts = 0;
			json_t *x;

			cst__put(b, " ( ");
			if (json_is_string(cn)) {
				cst__lit(b, json_string_value(cn));
				alts++;
			}
			json_array_foreach(en, r, x)
			{
				if (!json_is_string(x))
					continue;
				cst__put(b, "%s", alts++ ? " | " : "");
				cst__lit(b, json_string_value(x));
			}
			cst__put(b, " ) \"\\n</parameter>\\n\"\n");
		} else
			cst__put(b, " xtext \"\\n</parameter>\\n\"\n");
		j++;
	}
	return 0;
}

/* calls ::= one call, or several (parallel_tool_calls); each of the tools
 * offered, or of the named one. */
static int cst__calls(struct cst_buf *b, const struct oai_req *q, bool xml, bool after_trigger,
                      struct oai_err *e)
{
	size_t from = q->tool_choice == OAI_TC_NAMED ? q->tc_tool : 0;
	size_t to = q->tool_choice == OAI_TC_NAMED ? q->tc_tool + 1 : q->n_tools;

	cst__put(b, xml ? "call-body ::= \"\\n\" ( " : "call-body ::= \"\\n{\\\"name\\\": \" ( ");
	for (size_t i = from; i < to; i++)
		cst__put(b, "%scall-%zu", i > from ? " | " : "", i);
	cst__put(b, xml ? " ) \"\\n</tool_call>\"\n" : " ) \"}\\n</tool_call>\"\n");
	cst__put(b, "call ::= \"<tool_call>\" call-body\n");
	/* after the trigger the first call's "<tool_call>" is behind us */
	if (after_trigger)
		cst__put(b, "calls ::= call-body%s\n",
		         q->parallel_calls ? " ( \"\\n\" call )*" : "");
	else
		cst__put(b, "calls ::= call%s\n", q->parallel_calls ? " ( \"\\n\" call )*" : "");
	if (xml)
		cst__xml_text(b);
	for (size_t i = from; i < to; i++)
		if (xml ? cst__xml_call_alt(b, q, i, e) : cst__call_alt(b, q, i, e))
			return -1;
	return 0;
}

int cst_grammar(const struct oai_req *q, const struct cst_in *in, char **gbnf, const char **trigger,
                struct oai_err *e)
{
	bool forced =
	    q->n_tools && (q->tool_choice == OAI_TC_REQUIRED || q->tool_choice == OAI_TC_NAMED);
	bool strict = false, json = q->format != OAI_RF_TEXT;
	bool calls = q->n_tools && q->tool_choice != OAI_TC_NONE;
	bool xml = in->format == OP_QWEN_XML;
	struct cst_buf b = {0};
	struct grammar *g = NULL;
	struct ig_errbuf eb = {0};

	*gbnf = NULL;
	*trigger = "";
	for (size_t i = 0; i < q->n_tools; i++)
		strict |= q->tools[i].strict;
	if (q->kind != OAI_CHAT || (!json && !forced && !(calls && strict)))
		return 0;
	if ((forced || (calls && strict)) && in->format != OP_HERMES && in->format != OP_QWEN_XML) {
		oai_errf(e, 400, "tool_choice", "unsupported_value",
		         "%s needs the calls constrained in the template's form, and this model's "
		         "template writes none; accepted: tool_choice \"auto\" or \"none\" with "
		         "non-strict tools",
		         forced ? "a required or named tool_choice" : "a strict tool");
		return -1;
	}
	if (forced && json) {
		oai_errf(e, 400, "response_format", "invalid_value",
		         "response_format asks for a JSON answer, and tool_choice for a call: the "
		         "answer cannot be both; accepted: one of them, or tool_choice \"auto\"");
		return -1;
	}
	if (!json && !forced) {
		/* strict tools under "auto": free until the trigger */
		cst__put(&b, "root ::= calls\n");
		if (cst__calls(&b, q, xml, true, e))
			goto fail;
		*trigger = CST_TRIGGER;
	} else {
		cst__put(&b, "root ::= %s[ \\t\\n]{0,4} ", in->thinking ? "think " : "");
		if (forced)
			cst__put(&b, "calls\n");
		else if (calls)
			cst__put(&b, "( answer | calls )\n");
		else
			cst__put(&b, "answer\n");
		if (in->thinking)
			cst__thinking(&b, in->think_open);
		if (json) {
			if (q->format == OAI_RF_JSON_OBJECT)
				cst__put(&b, "answer ::= object\n");
			else {
				cst__put(&b, "answer ::= a-r0\n");
				if (cst__schema(&b, q->rf_schema, "a-", "response_format",
				                "response_format.json_schema.schema", e))
					goto fail;
			}
		}
		if ((forced || calls) && cst__calls(&b, q, xml, false, e))
			goto fail;
	}
	cst__put(&b, "%s", gs_prelude_gbnf());
	if (b.oom) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		goto fail;
	}
	/* compiled once here, so that what the worker would refuse (a schema
	 * whose rules recurse without consuming) is this request's 400 */
	if (grammar_parse(b.s, b.n, "root", &g, &eb)) {
		oai_errf(e, 400, json ? "response_format" : "tools", "invalid_schema",
		         "the grammar made of the schema%s cannot be compiled: %s", json ? "" : "s",
		         eb.msg);
		goto fail;
	}
	grammar_destroy(g);
	*gbnf = b.s;
	return 0;
fail:
	free(b.s);
	return -1;
}
