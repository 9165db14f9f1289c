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
	        &(struct cst_in){OP_QWEN_XML, false, false}, "tool_choice", "Hermes form");
	refused("{\"model\":\"m\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
	        "\"name\":\"w\",\"schema\":{\"$ref\":\"#\"}}}," MSGS "}",
	        &hermes, "response_format", "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_required),        cmocka_unit_test(test_thinking),
	    cmocka_unit_test(test_response_format), cmocka_unit_test(test_strict_lazy),
	    cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
