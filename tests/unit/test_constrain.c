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
	/* what cannot read back as written is refused by name */
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	        "\"x\":{\"type\":[\"string\",\"null\"]}}}}}]," MSGS "}",
	        &xml, "tools", "parameter 'x': a string or another type");
	refused("{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
	        "\"x\":{\"type\":\"string\",\"maxLength\":3}}}}}]," MSGS "}",
	        &xml, "tools", "length bounds");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_required),        cmocka_unit_test(test_thinking),
	    cmocka_unit_test(test_response_format), cmocka_unit_test(test_strict_lazy),
	    cmocka_unit_test(test_refusals),        cmocka_unit_test(test_xml),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
