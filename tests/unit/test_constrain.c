/*
 * test_constrain.c - the grammars a chat request asks for (supervisor/
 * constrain.h; docs/adr/0057), read back by the grammar engine: a forced
 * call in the Hermes form and nothing else, a thinking block before it
 * where the template thinks, one call or several as parallel_tool_calls
 * says, a named function only, response_format's document, strict tools
 * behind their trigger; and what is refused, naming the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <regex.h>

#include <cmocka.h>
#include <jansson.h>

#include "grammar/grammar.h"
#include "supervisor/constrain.h"

static const struct oai_limits lim = {
    .max_body = 1u << 20,
    .max_tokens = 4096,
    .vocab = 260,
    .max_prompt_ids = 64,
    .max_text = 1000,
    .max_messages = 8,
};

#define TOOLS                                                                                      \
	"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" \
	"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":"  \
	"\"integer\"}},\"required\":[\"city\"],\"additionalProperties\":false}}},"                 \
	"{\"type\":\"function\",\"function\":{\"name\":\"ls\"}}]"
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

static const struct cst_in hermes = {OP_HERMES, false, false};
static const struct cst_in thinks = {OP_HERMES, true, false};

/* The grammar of `body` (asserted to be one) and its trigger. */
static struct grammar *build(const char *body, const struct cst_in *in, const char **trigger)
{
	struct oai_req r;
	struct oai_err e = {0};
	struct ig_errbuf eb;
	struct grammar *g;
	char *text;

	if (oai_parse(OAI_CHAT, body, strlen(body), &lim, &r, &e))
		fail_msg("refused %s: %s", body, e.message);
	if (cst_grammar(&r, in, &text, trigger, &e))
		fail_msg("no grammar for %s: %s", body, e.message);
	assert_non_null(text);
	if (grammar_parse(text, strlen(text), "root", &g, &eb))
		fail_msg("%s: %s", eb.msg, text);
	free(text);
	oai_req_free(&r);
	return g;
}

/* Does g take `s` whole (a sentence: `end`), or at least as a prefix? */
static bool takes(struct grammar *g, const char *s, bool end)
{
	struct gmatch m = {0};
	struct ig_errbuf eb;
	bool ok;

	assert_int_equal(gm_init(&m, g, &eb), IG_E_OK);
	ok = gm_accept_bytes(&m, s, strlen(s)) && (!end || gm_can_end(&m));
	gm_release(&m);
	return ok;
}

static const char call_w[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                             "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>";
static const char call_ls[] = "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": "
                              "\"/tmp\"}}\n</tool_call>";

static void test_required(void **state)
{
	const char *trig;
	struct grammar *g;
	char two[512];

	(void)state;
	snprintf(two, sizeof two, "%s\n%s", call_w, call_ls);
	g = build("{\"model\":\"m\",\"tool_choice\":\"required\"," TOOLS "," MSGS "}", &hermes,
	          &trig);
	assert_string_equal(trig, "");
	assert_true(takes(g, call_w, true));
	assert_true(takes(g, call_ls, true)); /* no parameters: any object */
	assert_true(takes(g, two, true));     /* parallel calls by default */
	assert_true(takes(g, "\n\n", false)); /* a little whitespace first */
	assert_false(takes(g, "Sure! ", false));
	assert_false(takes(g, "<tool_call>\n{\"name\": \"rm\"", false));
	assert_false(takes(g,
	                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
	                   "{\"days\": 2}}",
	                   false)); /* city is required */
	assert_false(takes(g,
	                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
	                   "{\"city\": \"P\", \"x\": 1",
	                   false)); /* no other members */
	assert_false(takes(g, "", true));
	grammar_destroy(g);
	/* one call only */
	g = build(
	    "{\"model\":\"m\",\"tool_choice\":\"required\",\"parallel_tool_calls\":false," TOOLS
	    "," MSGS "}",
	    &hermes, &trig);
	assert_true(takes(g, call_w, true));
	assert_false(takes(g, two, false));
	grammar_destroy(g);
	/* a named function: its calls only */
	g = build("{\"model\":\"m\",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
	          "\"ls\"}}," TOOLS "," MSGS "}",
	          &hermes, &trig);
	assert_true(takes(g, call_ls, true));
	assert_false(takes(g, call_w, false));
	grammar_destroy(g);
}

/* Where the template thinks: a thinking block first (any text without its
 * end marker), or none; where the prompt opened it, its text and end. */
static void test_thinking(void **state)
{
	const char *trig;
	struct grammar *g;
	char s[1024];

	(void)state;
	g = build("{\"model\":\"m\",\"tool_choice\":\"required\"," TOOLS "," MSGS "}", &thinks,
	          &trig);
	snprintf(s, sizeof s, "<think>\nA <b> tag, </thin, </think\n> and more.\n</think>\n\n%s",
	         call_w);
	assert_true(takes(g, s, true));
	assert_true(takes(g, call_w, true)); /* no thinking at all */
	assert_false(takes(g, "<think>\nhm</think>\nSure", false));
	assert_false(takes(g, "<think>a</think></think>", false));
	grammar_destroy(g);
	g = build("{\"model\":\"m\",\"response_format\":{\"type\":\"json_object\"}," MSGS "}",
	          &(struct cst_in){OP_HERMES, true, true}, &trig);
	assert_true(takes(g, "let me see</think>\n\n{\"a\": [1, 2]}", true));
	assert_false(takes(g, "{\"a\": 1}", true)); /* the block must end first */
	grammar_destroy(g);
	assert_true(cst_think_open("<|im_start|>assistant\n<think>\n", 29));
	assert_false(cst_think_open("<think>\n\n</think>\n\n", 19));
	assert_false(cst_think_open("hello", 5));
}

static void test_response_format(void **state)
{
	const char *trig;
	struct grammar *g;

	(void)state;
	g = build(
	    "{\"model\":\"m\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
	    "\"name\":\"w\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{"
	    "\"t\":{\"type\":\"integer\"},\"u\":{\"enum\":[\"C\",\"F\"]}},\"required\":[\"t\","
	    "\"u\"],\"additionalProperties\":false}}}," MSGS "}",
	    &hermes, &trig);
	assert_string_equal(trig, "");
	assert_true(takes(g, "{\"t\": -3, \"u\": \"C\"}", true));
	assert_false(takes(g, "{\"t\": 1.5", false));
	assert_false(takes(g, "{\"t\": 1, \"u\": \"K\"", false));
	assert_false(takes(g, "{\"t\": 1, \"u\": \"C\"} ", false)); /* nothing after it */
	grammar_destroy(g);
	/* with tools under "auto": the document or calls */
	g = build("{\"model\":\"m\",\"response_format\":{\"type\":\"json_object\"}," TOOLS "," MSGS
	          "}",
	          &hermes, &trig);
	assert_true(takes(g, "{\"a\": {\"b\": null}}", true));
	assert_true(takes(g, call_ls, true));
	assert_false(takes(g, "[1]", false));
	grammar_destroy(g);
}

/* Strict tools under "auto": free text until the trigger; after it, what
 * the grammar takes is the rest of a call. */
static void test_strict_lazy(void **state)
{
	const char *trig;
	struct grammar *g;
	struct oai_req r;
	struct oai_err e = {0};
	char *text;
	const char plain[] = "{\"model\":\"m\"," TOOLS "," MSGS "}";

	(void)state;
	g = build(
	    "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"ls\","
	    "\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{"
	    "\"type\":\"string\"}},\"required\":[\"path\"],\"additionalProperties\":false}}}]," MSGS
	    "}",
	    &hermes, &trig);
	assert_string_equal(trig, CST_TRIGGER);
	assert_true(takes(g, call_ls + strlen(CST_TRIGGER), true));
	assert_false(takes(g, "\n{\"name\": \"ls\", \"arguments\": {}}", false));
	grammar_destroy(g);
	/* no strict tool, no format, no forced choice: no grammar */
	assert_int_equal(oai_parse(OAI_CHAT, plain, strlen(plain), &lim, &r, &e), 0);
	assert_int_equal(cst_grammar(&r, &hermes, &text, &trig, &e), 0);
	assert_null(text);
	oai_req_free(&r);
}

static void refused(const char *body, const struct cst_in *in, const char *param, const char *words)
{
	struct oai_req r;
	struct oai_err e = {0};
	const char *trig;
	char *text;

	if (oai_parse(OAI_CHAT, body, strlen(body), &lim, &r, &e))
		fail_msg("refused at parse %s: %s", body, e.message);
	if (!cst_grammar(&r, in, &text, &trig, &e))
		fail_msg("not refused: %s", body);
	assert_int_equal(e.status, 400);
	assert_string_equal(e.param, param);
	if (!strstr(e.message, words))
		fail_msg("no '%s' in: %s", words, e.message);
	oai_req_free(&r);
}

static void test_refusals(void **state)
{
	(void)state;
	refused("{\"model\":\"m\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
	        "\"name\":\"w\",\"schema\":{\"type\":\"string\",\"format\":\"email\"}}}," MSGS "}",
	        &hermes, "response_format", "'format' is not supported");
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	        "\"x\":{\"type\":\"string\",\"minLength\":\"3\"}}}}}]," MSGS "}",
	        &hermes, "tools", "tool 0 ('f')'s parameters");
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"response_format\":{\"type\":"
	        "\"json_object\"}," TOOLS "," MSGS "}",
	        &hermes, "response_format", "cannot be both");
	refused("{\"model\":\"m\",\"tool_choice\":\"required\"," TOOLS "," MSGS "}",
	        &(struct cst_in){OP_PLAIN, false, false}, "tool_choice", "writes none");
	refused("{\"model\":\"m\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
	        "\"name\":\"w\",\"schema\":{\"$ref\":\"#\"}}}," MSGS "}",
	        &hermes, "response_format", "");
}

/* ---- the XML form (docs/adr/0060) ------------------------------------------ */

static const struct cst_in xml = {OP_QWEN_XML, false, false};

#define XML_TOOLS                                                                                  \
	"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" \
	"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":"  \
	"\"integer\"},\"unit\":{\"enum\":[\"C\",\"F\"]},\"opts\":{\"type\":\"object\","            \
	"\"properties\":{\"x\":{\"type\":\"boolean\"}},\"required\":[\"x\"],"                      \
	"\"additionalProperties\":false}},\"required\":[\"city\"],\"additionalProperties\":"       \
	"false}}},{\"type\":\"function\",\"function\":{\"name\":\"ls\"}}]"

static const char xw_full[] =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</para </function \"q\"\n"
    "</parameter>\n<parameter=days>\n-2\n</parameter>\n<parameter=unit>\nF\n</parameter>\n"
    "<parameter=opts>\n{\"x\": true}\n</parameter>\n</function>\n</tool_call>";
static const char xw_args[] =
    "{\"city\": \"New York\\n</para </function \\\"q\\\"\", \"days\": -2, \"unit\": \"F\", "
    "\"opts\": {\"x\": true}}";
static const char xw_min[] = "<tool_call>\n<function=get_weather>\n<parameter=city>\n\n"
                             "</parameter>\n</function>\n</tool_call>";
static const char xls[] = "<tool_call>\n<function=ls>\n<parameter=path>\n/tmp\n</parameter>\n"
                          "</function>\n</tool_call>";

struct collect {
	char name[64], args[1024];
	size_t args_len;
	int calls;
};

static int collect_ev(void *ctx, const struct op_ev *ev)
{
	struct collect *c = ctx;

	if (ev->kind == OP_CALL_BEGIN) {
		c->calls++;
		snprintf(c->name, sizeof c->name, "%.*s", (int)ev->len, ev->text);
	} else if (ev->kind == OP_CALL_ARGS && c->args_len + ev->len < sizeof c->args) {
		memcpy(c->args + c->args_len, ev->text, ev->len);
		c->args_len += ev->len;
		c->args[c->args_len] = '\0';
	}
	return 0;
}

/* What outparse.c reads from a call the grammar took: one call of `name`
 * whose arguments equal the JSON `want` (and so are of the schema's
 * types). */
static void reads_back(const struct oai_req *r, const char *text, const char *name,
                       const char *want)
{
	struct op_tool tools[4];
	struct op_opts o = {
	    .format = OP_QWEN_XML, .calls = true, .tools = tools, .n_tools = r->n_tools};
	struct collect c = {0};
	struct op p;
	json_t *got, *w = json_loads(want, 0, NULL);

	for (size_t i = 0; i < r->n_tools; i++)
		tools[i] = (struct op_tool){r->tools[i].name, r->tools[i].params};
	op_init(&p, &o);
	/* a byte at a time, as tokens may cut it */
	for (size_t i = 0; text[i]; i++)
		assert_int_equal(op_feed(&p, text + i, 1, collect_ev, &c), 0);
	assert_int_equal(op_finish(&p, collect_ev, &c), 0);
	op_free(&p);
	assert_int_equal(c.calls, 1);
	assert_string_equal(c.name, name);
	got = json_loads(c.args, 0, NULL);
	if (!got || !w || !json_equal(got, w))
		fail_msg("%s read back as %s, wanted %s", text, c.args, want);
	json_decref(got);
	json_decref(w);
}

static void test_xml(void **state)
{
	const char *trig;
	struct grammar *g;
	struct oai_req r;
	struct oai_err e = {0};
	const char body[] = "{\"model\":\"m\",\"tool_choice\":\"required\"," XML_TOOLS "," MSGS "}";
	char two[1024];

	(void)state;
	g = build(body, &xml, &trig);
	assert_string_equal(trig, "");
	assert_true(takes(g, xw_full, true));
	assert_true(takes(g, xw_min, true));
	assert_true(takes(g, xls, true)); /* no schema: any keys, raw values */
	snprintf(two, sizeof two, "%s\n%s", xw_min, xls);
	assert_true(takes(g, two, true));
	/* city is required; days is an integer; unit is C or F; a value
	 * cannot end the parameter early or hold the function's end */
	assert_false(takes(g, "<tool_call>\n<function=get_weather>\n<parameter=days>", false));
	assert_false(takes(g,
	                   "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n"
	                   "</parameter>\n<parameter=days>\n1.5",
	                   false));
	assert_false(takes(g,
	                   "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n"
	                   "</parameter>\n<parameter=unit>\nK",
	                   false));
	assert_false(takes(
	    g, "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>", false));
	assert_false(
	    takes(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\na</function>", false));
	assert_false(takes(g,
	                   "<tool_call>\n<function=get_weather>\n<parameter=city>\n<</</paramete"
	                   "</parameter>",
	                   false)); /* a marker's start inside another's */
	assert_true(takes(g,
	                  "<tool_call>\n<function=get_weather>\n<parameter=city>\n<</</paramete"
	                  "r </functio</f\n</parameter>\n</function>\n</tool_call>",
	                  true));
	assert_false(takes(g, "<tool_call>\n{\"name\": \"ls\"", false)); /* not Hermes */
	grammar_destroy(g);
	/* what the grammar takes reads back typed as the schema says */
	assert_int_equal(oai_parse(OAI_CHAT, body, strlen(body), &lim, &r, &e), 0);
	reads_back(&r, xw_full, "get_weather", xw_args);
	reads_back(&r, xw_min, "get_weather", "{\"city\": \"\"}");
	reads_back(&r, xls, "ls", "{\"path\": \"/tmp\"}");
	oai_req_free(&r);
	/* named, behind a thinking block the prompt opened */
	g = build("{\"model\":\"m\",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
	          "\"ls\"}}," XML_TOOLS "," MSGS "}",
	          &(struct cst_in){OP_QWEN_XML, true, true}, &trig);
	snprintf(two, sizeof two, "hm</think>\n\n%s", xls);
	assert_true(takes(g, two, true));
	assert_false(takes(g, xls, true));
	grammar_destroy(g);
	/* strict under "auto": free until the trigger */
	g = build(
	    "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"ls\","
	    "\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{"
	    "\"type\":\"string\"}},\"required\":[\"path\"],\"additionalProperties\":false}}}]," MSGS
	    "}",
	    &xml, &trig);
	assert_string_equal(trig, CST_TRIGGER);
	assert_true(takes(g, xls + strlen(CST_TRIGGER), true));
	grammar_destroy(g);
	/* what cannot be typed is refused by name */
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	        "\"x\":{\"$ref\":\"#/$defs/y\"}}}}}]," MSGS "}",
	        &xml, "tools", "parameter 'x': a $ref");
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	        "\"x\":{\"type\":\"string\",\"format\":\"email\"}}}}}]," MSGS "}",
	        &xml, "tools", "parameter 'x': schema at /: 'format' is not supported");
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	        "\"x\":{\"type\":\"string\",\"pattern\":\"^<b>$\"}}}}}]," MSGS "}",
	        &xml, "tools", "'<' cannot be written in this raw text");
	refused(
	    "{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	    "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	    "\"x\":{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^a+$\"},{\"type\":\"array\"}]}"
	    "}}}}]," MSGS "}",
	    &xml, "tools", "a pattern cannot be held to");
}

/* ---- XML values of several types, bounded strings (docs/adr/0062) ---------- */

#define TYPED_PARAMS                                                                               \
	"{\"type\":\"object\",\"properties\":{"                                                    \
	"\"note\":{\"type\":[\"string\",\"null\"]},"                                               \
	"\"level\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":4}]},"    \
	"\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{3}$\"},"                      \
	"\"name\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":5},"                          \
	"\"tags\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":"      \
	"\"string\",\"maxLength\":3},\"maxItems\":2}]},"                                           \
	"\"pick\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"enum\":[1,2,\"null\"]}]},"  \
	"\"obj\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":"   \
	"14}},\"required\":[\"s\"],\"additionalProperties\":false},"                               \
	"\"opt\":{\"type\":\"string\",\"nullable\":true,\"maxLength\":3},"                         \
	"\"flag\":{\"type\":[\"boolean\",\"string\"],\"enum\":[true,\"no\",\"true\"]},"            \
	"\"mix\":{\"anyOf\":[{\"type\":\"string\"},{\"enum\":[1,true,null]},{\"type\":\"array\","  \
	"\"items\":{\"type\":\"integer\"},\"maxItems\":2}]}"                                       \
	"},\"required\":[\"note\",\"level\"],\"additionalProperties\":false}"
#define TYPED_BODY                                                                                 \
	"{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","         \
	"\"function\":{\"name\":\"t\",\"parameters\":" TYPED_PARAMS "}}]," MSGS "}"

/* "<tool_call>\n<function=t>\n" + params + "</function>\n</tool_call>" */
static bool takes_call(struct grammar *g, const char *params)
{
	char s[1024];

	snprintf(s, sizeof s, "<tool_call>\n<function=t>\n%s</function>\n</tool_call>", params);
	return takes(g, s, true);
}

#define P(k, v) "<parameter=" k ">\n" v "\n</parameter>\n"
#define REQ     P("note", "x") P("level", "1")

static void test_xml_typed(void **state)
{
	const char *trig;
	struct grammar *g;
	struct oai_req r;
	struct oai_err e = {0};

	(void)state;
	g = build(TYPED_BODY, &xml, &trig);
	/* a string or null: either */
	assert_true(takes_call(g, P("note", "null") P("level", "7")));
	assert_true(takes_call(g, P("note", "  any text, 12 or null\nat all") P("level", "-7")));
	/* an integer, or a string of 4: the integer's digits are not bounded */
	assert_true(takes_call(g, P("note", "") P("level", "123456")));
	assert_true(takes_call(g, P("note", "") P("level", "high")));
	assert_false(takes_call(g, P("note", "") P("level", "higher")));
	/* a pattern, length bounds, as raw text */
	assert_true(takes_call(g, REQ P("code", "AB-123")));
	assert_false(takes_call(g, REQ P("code", "ab-123")));
	assert_false(takes_call(g, REQ P("code", "\"AB-123\"")));
	assert_true(takes_call(g, REQ P("name", "Ann")));
	assert_true(takes_call(g, REQ P("name", "\xc3\xa9t\xc3\xa9")));
	assert_false(takes_call(g, REQ P("name", "A")));
	assert_false(takes_call(g, REQ P("name", "Annabel")));
	assert_false(takes_call(g, REQ P("name", "a<b")));
	/* a string or an array of short strings: the array's JSON, or text
	 * that does not begin as JSON would */
	assert_true(takes_call(g, REQ P("tags", "[\"a\", \"bc\"]")));
	assert_true(takes_call(g, REQ P("tags", "a, b and [c]")));
	assert_false(takes_call(g, REQ P("tags", "[1]")));
	assert_false(takes_call(g, REQ P("tags", " [\"abcd\"]")));
	assert_false(takes_call(g, REQ P("tags", "{x}")));
	/* a short string or 1 or 2 (or "null"): what reads back as an enum's
	 * other values cannot be the string's */
	assert_true(takes_call(g, REQ P("pick", "2")));
	assert_true(takes_call(g, REQ P("pick", "abc")));
	assert_false(takes_call(g, REQ P("pick", "3")));
	assert_false(takes_call(g, REQ P("pick", "-1")));
	assert_true(takes_call(g, REQ P("pick", "null"))); /* the enum's string */
	/* an object's strings may hold the markers (outparse.c reads JSON) */
	assert_true(takes_call(g, REQ P("obj", "{\"s\": \"</parameter>\"}")));
	/* nullable */
	assert_true(takes_call(g, REQ P("opt", "null")));
	assert_true(takes_call(g, REQ P("opt", "nul")));
	assert_false(takes_call(g, REQ P("opt", "nulls")));
	/* true, "no", and "true" which reads back as true: not offered apart */
	assert_true(takes_call(g, REQ P("flag", "true")));
	assert_true(takes_call(g, REQ P("flag", "no")));
	assert_false(takes_call(g, REQ P("flag", "yes")));
	/* every first character ruled out at once: text begins otherwise */
	assert_true(takes_call(g, REQ P("mix", "x 1 true")));
	assert_true(takes_call(g, REQ P("mix", "null")));
	assert_true(takes_call(g, REQ P("mix", "[3]")));
	assert_false(takes_call(g, REQ P("mix", "nullish")));
	assert_false(takes_call(g, REQ P("mix", "7 days")));
	assert_false(takes_call(g, REQ P("mix", " x")));
	grammar_destroy(g);
	assert_int_equal(oai_parse(OAI_CHAT, TYPED_BODY, strlen(TYPED_BODY), &lim, &r, &e), 0);
	reads_back(&r,
	           "<tool_call>\n<function=t>\n" P("note", "null") P("level", "123456")
	               P("tags", "a, b") P("pick", "null") P("obj", "{\"s\": \"</parameter>\"}")
	                   P("opt", "nul") "</function>\n</tool_call>",
	           "t",
	           "{\"note\": null, \"level\": 123456, \"tags\": \"a, b\", \"pick\": \"null\", "
	           "\"obj\": {\"s\": \"</parameter>\"}, \"opt\": \"nul\"}");
	reads_back(&r,
	           "<tool_call>\n<function=t>\n" P("note", " 12 ") P("level", "high")
	               P("tags", "[\"a\"]") P("pick", "1")
	                   P("flag", "true") "</function>\n</tool_call>",
	           "t",
	           "{\"note\": \" 12 \", \"level\": \"high\", \"tags\": [\"a\"], \"pick\": 1, "
	           "\"flag\": true}");
	oai_req_free(&r);
}

/* ---- every call the grammar takes validates: seeded random walks ---------- */

/* Is v valid against s, in the subset the tests' schemas use? */
static bool valid(const json_t *s, const json_t *v)
{
	const json_t *t = json_object_get(s, "type"), *x;
	size_t i;

	if (json_is_true(json_object_get(s, "nullable")) && json_is_null(v))
		return true;
	if ((x = json_object_get(s, "anyOf"))) {
		json_array_foreach(x, i, t) if (valid(t, v)) return true;
		return false;
	}
	if ((x = json_object_get(s, "enum"))) {
		json_array_foreach(x, i, t) if (json_equal(t, v)) return true;
		return false;
	}
	if (json_is_array(t)) {
		json_array_foreach(t, i, x)
		{
			json_t *one = json_copy((json_t *)s);
			bool ok;

			json_object_set(one, "type", (json_t *)x);
			ok = valid(one, v);
			json_decref(one);
			if (ok)
				return true;
		}
		return false;
	}
	if (json_is_string(t)) {
		const char *n = json_string_value(t);

		if (!strcmp(n, "null"))
			return json_is_null(v);
		if (!strcmp(n, "boolean"))
			return json_is_boolean(v);
		if (!strcmp(n, "integer"))
			return json_is_integer(v);
		if (!strcmp(n, "number"))
			return json_is_number(v);
		if (!strcmp(n, "string")) {
			const char *str = json_string_value(v);
			size_t cps = 0;

			if (!str)
				return false;
			for (size_t c = 0; c < json_string_length(v); c++)
				cps += ((unsigned char)str[c] & 0xC0) != 0x80;
			if ((x = json_object_get(s, "maxLength")) &&
			    cps > (size_t)json_integer_value(x))
				return false;
			if ((x = json_object_get(s, "minLength")) &&
			    cps < (size_t)json_integer_value(x))
				return false;
			if ((x = json_object_get(s, "pattern"))) {
				regex_t re;
				bool ok;

				assert_int_equal(
				    regcomp(&re, json_string_value(x), REG_EXTENDED | REG_NOSUB),
				    0);
				ok = !regexec(&re, str, 0, NULL, 0);
				regfree(&re);
				return ok;
			}
			return true;
		}
		if (!strcmp(n, "array")) {
			if (!json_is_array(v))
				return false;
			if ((x = json_object_get(s, "maxItems")) &&
			    json_array_size(v) > (size_t)json_integer_value(x))
				return false;
			json_array_foreach(
			    v, i, x) if (!valid(json_object_get(s, "items"), x)) return false;
			return true;
		}
		if (!strcmp(n, "object")) {
			const json_t *props = json_object_get(s, "properties");
			const char *k;

			if (!json_is_object(v))
				return false;
			json_array_foreach(
			    json_object_get(s, "required"), i,
			    x) if (!json_object_get(v, json_string_value(x))) return false;
			json_object_foreach((json_t *)v, k, x)
			{
				const json_t *ps = json_object_get(props, k);

				if (!ps || !valid(ps, x))
					return false;
			}
			return true;
		}
	}
	return !t; /* no type: anything */
}

static uint64_t rnd(uint64_t *seed)
{
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	return *seed >> 33;
}

/* A random text the grammar takes whole (NULL when the walk gave up):
 * random bytes among those it allows, and once past `budget` bytes the
 * ones that close what is open first. */
static char *walk(struct grammar *g, uint64_t *seed, size_t budget)
{
	/* what closes a value, a call, a string, an object, an array */
	static const char *const closers[] = {
	    "\n</parameter>\n", "</function>\n</tool_call>", "\"", "}", "]", "0", "a", NULL};
	static char text[2048];
	struct gmatch m = {0}, t = {0};
	struct ig_errbuf eb;
	size_t n = 0;
	bool end;

	assert_int_equal(gm_init(&m, g, &eb), IG_E_OK);
	while (n + 32 < sizeof text) {
		unsigned char ok[256];
		size_t nok = 0;
		const char *add = NULL;

		if (gm_can_end(&m) && (n > budget || rnd(seed) % 64 == 0))
			break;
		for (int k = 0; n > budget && !add && closers[k]; k++) {
			assert_int_equal(gm_copy(&t, &m, &eb), IG_E_OK);
			if (gm_accept_bytes(&t, closers[k], strlen(closers[k])))
				add = closers[k];
			gm_release(&t);
		}
		if (!add) {
			/* printable ASCII, a newline, and one two-byte character */
			for (unsigned c = 0x1e; c < 0x7f; c++) {
				const char *u = c == 0x1f   ? "\xc3\xa9"
				                : c == 0x1e ? "\n"
				                            : (char[]){(char)c, 0};

				assert_int_equal(gm_copy(&t, &m, &eb), IG_E_OK);
				if (gm_accept_bytes(&t, u, strlen(u)))
					ok[nok++] = (unsigned char)c;
				gm_release(&t);
			}
			if (!nok)
				break;
			/* half the time JSON's own bytes, where allowed: raw text
			 * that looks like another type's JSON is what a union's
			 * grammar must get right */
			text[n] = (char)ok[rnd(seed) % nok];
			if (rnd(seed) % 2) {
				static const char json[] = "[]{}\"-019.enulltruefalse";
				char c = json[rnd(seed) % (sizeof json - 1)];

				if (memchr(ok, c, nok))
					text[n] = c;
			}
			if (text[n] == 0x1f)
				memcpy(text + n, "\xc3\xa9", 3);
			else if (text[n] == 0x1e)
				memcpy(text + n, "\n", 2);
			else
				text[n + 1] = '\0';
			add = text + n;
		}
		assert_true(gm_accept_bytes(&m, add, strlen(add)));
		memmove(text + n, add, strlen(add));
		n += strlen(add);
	}
	text[n] = '\0';
	end = gm_can_end(&m);
	gm_release(&m);
	if (!end && getenv("IGNIS_TEST_VERBOSE"))
		print_message("gave up: %s\n", text);
	return end ? text : NULL;
}

/* What outparse.c reads from text: every call's arguments valid. */
static unsigned check_calls(const struct oai_req *r, const char *text, uint64_t seed)
{
	struct op_tool tools[4];
	struct op_opts o = {
	    .format = OP_QWEN_XML, .calls = true, .tools = tools, .n_tools = r->n_tools};
	struct collect c = {0};
	struct op p;
	json_t *got;

	for (size_t i = 0; i < r->n_tools; i++)
		tools[i] = (struct op_tool){r->tools[i].name, r->tools[i].params};
	op_init(&p, &o);
	for (size_t i = 0; text[i]; i += 3)
		assert_int_equal(op_feed(&p, text + i, strnlen(text + i, 3), collect_ev, &c), 0);
	assert_int_equal(op_finish(&p, collect_ev, &c), 0);
	op_free(&p);
	got = json_loads(c.args, JSON_ALLOW_NUL, NULL);
	if (c.calls != 1 || !got || !valid(r->tools[0].params, got))
		fail_msg("seed %llu: %s\nread back as %d call(s): %s", (unsigned long long)seed,
		         text, c.calls, c.args);
	json_decref(got);
	return 1;
}

/* Each parameter of TYPED_PARAMS alone and required, so that every walk
 * writes it. */
static void test_xml_walks(void **state)
{
	json_t *all = json_loads(TYPED_PARAMS, 0, NULL), *ps;
	uint64_t seed0 = 30, walks = 100;
	const char *k;

	(void)state;
	assert_non_null(all);
	if (getenv("IGNIS_TEST_SEED"))
		seed0 = strtoull(getenv("IGNIS_TEST_SEED"), NULL, 10);
	if (getenv("IGNIS_TEST_WALKS"))
		walks = strtoull(getenv("IGNIS_TEST_WALKS"), NULL, 10);
	print_message("walks from seed %llu (IGNIS_TEST_SEED)\n", (unsigned long long)seed0);
	json_object_foreach(json_object_get(all, "properties"), k, ps)
	{
		json_t *params =
		    json_pack("{s:s, s:{s:O}, s:[s], s:b}", "type", "object", "properties", k, ps,
		              "required", k, "additionalProperties", 0);
		json_t *body =
		    json_pack("{s:s, s:s, s:b, s:[{s:s, s:{s:s, s:o}}], s:[{s:s, s:s}]}", "model",
		              "m", "tool_choice", "required", "parallel_tool_calls", 0, "tools",
		              "type", "function", "function", "name", "t", "parameters", params,
		              "messages", "role", "user", "content", "x");
		char *text = json_dumps(body, JSON_COMPACT);
		const char *trig;
		struct grammar *g;
		struct oai_req r;
		struct oai_err e = {0};
		unsigned done = 0;

		assert_non_null(text);
		g = build(text, &xml, &trig);
		assert_int_equal(oai_parse(OAI_CHAT, text, strlen(text), &lim, &r, &e), 0);
		for (uint64_t w = 0; w < walks; w++) {
			uint64_t seed = seed0 + w, sd = seed;
			char *call = walk(g, &sd, 44 + (size_t)(seed % 12));

			if (call)
				done += check_calls(&r, call, seed);
		}
		if (done < walks * 3 / 4)
			fail_msg("'%s': only %u of %llu walks ended", k, done,
			         (unsigned long long)walks);
		oai_req_free(&r);
		grammar_destroy(g);
		free(text);
		json_decref(body);
	}
	json_decref(all);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_required),        cmocka_unit_test(test_thinking),
	    cmocka_unit_test(test_response_format), cmocka_unit_test(test_strict_lazy),
	    cmocka_unit_test(test_refusals),        cmocka_unit_test(test_xml),
	    cmocka_unit_test(test_xml_typed),       cmocka_unit_test(test_xml_walks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
