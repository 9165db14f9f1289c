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

/* The state after a '<' alone: the first marker's first prefix. */
#define XT_LT 1

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

/* ---- an XML value (docs/adr/0060, 0062) ----------------------------------- */

/* The ASCII a value's raw text may not begin with where JSON of a kind
 * the parameter takes, but not without condition, begins so (and then
 * whitespace, which JSON may lead with). */
#define XV_WS " \t\n\r"

/*
 * One parameter's value as the alternatives the parser reads back valid
 * (outparse.h, op_value_json): the JSON of each branch of another type
 * than a string (a part of its schema); a string branch's raw text (its
 * bounds and pattern kept, gs_raw_string_gbnf); an enum's or const's
 * values, strings as they are where they read back as themselves. Raw
 * text that would read as JSON of a kind some branch takes without
 * condition (an integer's, null) is that valid value; where the kind is
 * taken only with conditions (an enum of numbers, an object's schema),
 * the raw text may not begin as that JSON would.
 */
struct xv {
	struct cst_buf *b;   /* the rules (parts) */
	struct cst_buf alts; /* the value's alternatives */
	int kinds;           /* what the parser takes (op_kinds_of) */
	int free;            /* kinds of which every value is valid */
	const json_t *strs[16];
	size_t n_strs;    /* string branches, written when `free` is whole */
	json_t *estrs;    /* enum and const strings, likewise */
	bool any;         /* a branch that takes anything: raw text */
	char prefix[48];  /* the parameter's parts' prefix */
	unsigned parts;   /* parts made */
	unsigned depth;   /* of anyOf */
	const char *what; /* "tool 0 ('f')'s parameter 'x'" */
	struct oai_err *e;
};

static void xv__alt(struct xv *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void xv__alt(struct xv *x, const char *fmt, ...)
{
	char item[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(item, sizeof item, fmt, ap);
	va_end(ap);
	cst__put(&x->alts, "%s%s", x->alts.n ? " | " : "", item);
}

static int xv__refuse(struct xv *x, const char *why)
{
	oai_errf(x->e, 400, "tools", "invalid_schema", "%s: %s", x->what, why);
	return -1;
}

/* A part of the schema (its JSON) as an alternative. */
static int xv__json(struct xv *x, const json_t *s)
{
	char prefix[64];

	snprintf(prefix, sizeof prefix, "%sa%u-", x->prefix, x->parts++);
	if (cst__schema(x->b, s, prefix, "tools", x->what, x->e))
		return -1;
	xv__alt(x, "%sr0", prefix);
	return 0;
}

/* A branch of one type: a string's waits, any other's is its JSON. */
static int xv__type(struct xv *x, const json_t *s, const char *t)
{
	static const struct {
		const char *type;
		int free;
	} scalar[] = {
	    {"integer", OP_K_INT},
	    {"number", OP_K_INT | OP_K_NUM},
	    {"boolean", OP_K_BOOL},
	    {"null", OP_K_NULL},
	};
	json_t *one;
	int rc;

	if (!strcmp(t, "string")) {
		if (x->n_strs == sizeof x->strs / sizeof x->strs[0])
			return xv__refuse(x, "more than 16 string branches");
		x->strs[x->n_strs++] = s;
		return 0;
	}
	for (size_t k = 0; k < sizeof scalar / sizeof scalar[0]; k++)
		if (!strcmp(t, scalar[k].type))
			x->free |= scalar[k].free;
	/* this type alone (nullable is the walk's) */
	if (!(one = json_copy((json_t *)s))) {
		oai_errf(x->e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	json_object_set_new(one, "type", json_string(t));
	json_object_del(one, "nullable");
	rc = xv__json(x, one);
	json_decref(one);
	return rc;
}

/* An enum's or const's values: strings wait, the others are their JSON. */
static int xv__values(struct xv *x, const json_t *vals)
{
	size_t i;
	json_t *v;

	json_array_foreach(vals, i, v)
	{
		char *d;
		json_t *back;

		if (json_is_string(v)) {
			json_array_append(x->estrs, v);
			continue;
		}
		if (!(d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY))) {
			oai_errf(x->e, 500, NULL, NULL, "out of memory");
			return -1;
		}
		/* written as JSON, read back as it (the kinds hold its own) */
		if (op_value_json(x->kinds, d, strlen(d), &back) && json_equal(back, v)) {
			cst__put(&x->alts, "%s", x->alts.n ? " | " : "");
			cst__lit(&x->alts, d);
		}
		json_decref(back);
		free(d);
	}
	return 0;
}

/* The branches of schema s, in the order the JSON grammar reads its
 * keywords ($ref, const, enum, anyOf, type, properties or items). */
static int xv__walk(struct xv *x, const json_t *s)
{
	const json_t *v;
	size_t i;
	int rc = 0;

	if (json_is_true(s)) {
		x->any = true;
		return 0;
	}
	if (!json_is_object(s))
		return xv__refuse(x, "a schema must be an object (or true)");
	if (++x->depth > 16)
		return xv__refuse(x, "anyOf nested deeper than 16");
	if (json_object_get(s, "$ref"))
		return xv__refuse(x, "a $ref cannot be typed in the XML form; accepted: the "
		                     "schema written out");
	if ((v = json_object_get(s, "const"))) {
		json_t *one = json_pack("[O]", v);

		rc = one ? xv__values(x, one) : -1;
		json_decref(one);
	} else if ((v = json_object_get(s, "enum"))) {
		if (!json_is_array(v) || !json_array_size(v))
			return xv__refuse(x, "'enum' must be a non-empty array");
		rc = xv__values(x, v);
	} else if ((v = json_object_get(s, "anyOf"))) {
		if (!json_is_array(v) || !json_array_size(v))
			return xv__refuse(x, "'anyOf' must be a non-empty array of schemas");
		for (i = 0; i < json_array_size(v) && !rc; i++)
			rc = xv__walk(x, json_array_get(v, i));
	} else if ((v = json_object_get(s, "type"))) {
		if (json_is_string(v))
			rc = xv__type(x, s, json_string_value(v));
		else if (json_is_array(v) && json_array_size(v)) {
			const json_t *t;

			json_array_foreach(v, i, t)
			{
				if (!json_is_string(t))
					return xv__refuse(x, "'type' must be a name or a list of "
					                     "names");
				if ((rc = xv__type(x, s, json_string_value(t))))
					break;
			}
		} else
			return xv__refuse(x, "'type' must be a name or a list of names");
	} else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
	           json_object_get(s, "items")) {
		rc = xv__json(x, s);
	} else {
		x->any = true; /* says nothing: any text, a string as the peers read it */
	}
	if (!rc && json_is_true(json_object_get(s, "nullable"))) {
		x->free |= OP_K_NULL;
		xv__alt(x, "null");
	}
	x->depth--;
	return rc;
}

/* Does s hold a marker that ends a value? */
static bool xv__marked(const char *s)
{
	for (unsigned m = 0; m < XT_MARKS; m++)
		if (strstr(s, xt_marks[m]))
			return true;
	return false;
}

/* The string branches and strings, once what raw text may begin with is
 * known. */
static int xv__strings(struct xv *x)
{
	int bound = (x->kinds & ~OP_K_STR) & ~x->free;
	char no_first[32] = "", cls[192];
	bool plain = x->any;
	size_t i;
	json_t *v;

	if (x->kinds & (OP_K_OBJ | OP_K_ARR)) /* read as JSON when so begun */
		strcat(no_first, "{[");
	if (bound & (OP_K_INT | OP_K_NUM))
		strcat(no_first, "-0123456789");
	if (bound & OP_K_BOOL)
		strcat(no_first, "tf");
	if (bound & OP_K_NULL)
		strcat(no_first, "n");
	if (*no_first)
		strcat(no_first, XV_WS);
	for (size_t k = 0; k < x->n_strs; k++) {
		const json_t *s = x->strs[k];
		char prefix[64], *part = NULL;
		struct ig_errbuf eb = {0};
		int rc;

		snprintf(prefix, sizeof prefix, "%sa%u-", x->prefix, x->parts++);
		rc = gs_raw_string_gbnf((json_t *)s, prefix, "<", no_first, &part, &eb);
		if (rc == IG_E_NOMEM) {
			oai_errf(x->e, 500, NULL, NULL, "out of memory");
			return -1;
		}
		if (rc) {
			oai_errf(x->e, 400, "tools", "invalid_schema", "%s: %s%s", x->what, eb.msg,
			         *no_first && json_object_get(s, "pattern")
			             ? " (in the XML form a string beside an object, an array or "
			               "an enum of other types may not begin as their JSON, which "
			               "a pattern cannot be held to)"
			             : "");
			return -1;
		}
		if (json_object_get(s, "pattern") || json_object_get(s, "minLength") ||
		    json_object_get(s, "maxLength")) {
			cst__put(x->b, "%s", part);
			xv__alt(x, "%sr0", prefix);
		} else
			plain = true; /* its keywords checked: raw text */
		free(part);
	}
	if (plain && !*no_first)
		xv__alt(x, "xtext");
	else if (plain) {
		int k = snprintf(cls, sizeof cls, "( %%[^\\x3C");

		for (const char *c = no_first; *c; c++)
			k +=
			    snprintf(cls + k, sizeof cls - (size_t)k, "\\x%02X", (unsigned char)*c);
		snprintf(cls + k, sizeof cls - (size_t)k, "] xt-0 | \"<\" xt-%d )?", XT_LT);
		xv__alt(x, "%s", cls);
	}
	json_array_foreach(x->estrs, i, v)
	{
		const char *t = json_string_value(v);
		json_t *back;

		/* as it is, where it reads back as itself */
		if (op_value_json(x->kinds, t, strlen(t), &back) || xv__marked(t) ||
		    (*t && strchr(no_first, *t))) {
			json_decref(back);
			continue;
		}
		cst__put(&x->alts, "%s", x->alts.n ? " | " : "");
		cst__lit(&x->alts, t);
	}
	return 0;
}

/* The value of parameter ps as alternatives: xp's rule is
 * "<parameter=KEY>\n" ( alternatives ) "\n</parameter>\n". */
static int cst__xml_value(struct cst_buf *b, const json_t *ps, const char *prefix, const char *what,
                          struct oai_err *e)
{
	struct cst_buf parts = {0};
	struct xv x = {.b = &parts, .kinds = op_kinds_of(ps), .what = what, .e = e};
	int rc;

	snprintf(x.prefix, sizeof x.prefix, "%s", prefix);
	if (!(x.estrs = json_array())) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		return -1;
	}
	rc = xv__walk(&x, ps);
	if (!rc)
		rc = xv__strings(&x);
	if (!rc && !x.alts.n)
		rc = xv__refuse(&x, "no value of it can be written in the XML form so that it "
		                    "reads back as itself");
	if (!rc && (x.alts.oom || parts.oom)) {
		oai_errf(e, 500, NULL, NULL, "out of memory");
		rc = -1;
	}
	if (!rc)
		cst__put(b, " ( %s ) \"\\n</parameter>\\n\"\n%s", x.alts.s, parts.s ? parts.s : "");
	json_decref(x.estrs);
	free(x.alts.s);
	free(parts.s);
	return rc;
}

/* One XML call of tool i: "<function=NAME>\n", its parameters in schema
 * order (the required ones, the others optional), "</function>". Each
 * value as outparse.c reads it back (op_value_json): a value that can
 * only be JSON, its schema's JSON; anything else cst__xml_value's
 * alternatives. */
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
		snprintf(what, sizeof what, "tool %zu ('%s')'s parameter '%s'", i, t->name, k);
		if (!cst__xml_name_ok(k) || strlen(k) > 400) {
			oai_errf(e, 400, "tools", "invalid_schema",
			         "%s: a key in the XML form cannot hold '<', '>' or a newline",
			         what);
			return -1;
		}
		snprintf(lit, sizeof lit, "<parameter=%s>\n", k);
		snprintf(prefix, sizeof prefix, "t%zu-p%zu-", i, j);
		cst__put(b, "xp-%zu-%zu ::= ", i, j);
		cst__lit(b, lit);
		if (op_value_of(ps) == OP_VALUE_JSON) {
			cst__put(b, " %sr0 \"\\n</parameter>\\n\"\n", prefix);
			if (cst__schema(b, ps, prefix, "tools", what, e))
				return -1;
		} else if (cst__xml_value(b, ps, prefix, what, e))
			return -1;
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
