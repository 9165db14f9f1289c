/*
 * test_oai.c - OpenAI's request bodies read and checked, answers written
 * (supervisor/oai.h): what is taken comes out as the front door will run it;
 * every refusal has OpenAI's status, the field at fault, a code and words
 * that say what is accepted; the answers are JSON of OpenAI's shape (read
 * back with jansson).
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

#include "supervisor/oai.h"

static const struct oai_limits lim = {
    .max_body = 1u << 20,
    .max_tokens = 4096,
    .vocab = 260,
    .max_prompt_ids = 64,
    .max_text = 1000,
    .max_messages = 8,
};

static void take(enum oai_kind kind, const char *body, struct oai_req *r)
{
	struct oai_err e = {0};

	if (oai_parse(kind, body, strlen(body), &lim, r, &e))
		fail_msg("refused %s: %d %s (%s)", body, e.status, e.message, e.param);
}

/* A refusal of `body`: its status, param and code, and words in the message. */
static void refuse(enum oai_kind kind, const char *body, int status, const char *param,
                   const char *code, const char *words)
{
	struct oai_req r;
	struct oai_err e = {0};

	if (!oai_parse(kind, body, strlen(body), &lim, &r, &e)) {
		oai_req_free(&r);
		fail_msg("taken: %s", body);
	}
	if (e.status != status || strcmp(e.param, param) || strcmp(e.code, code) ||
	    !strstr(e.message, words))
		fail_msg("%s: got %d '%s' '%s' \"%s\"; expected %d '%s' '%s' with \"%s\"", body,
		         e.status, e.param, e.code, e.message, status, param, code, words);
	/* the error's JSON: OpenAI's shape */
	{
		char *j = oai_error_json(&e);
		json_t *root = json_loads(j, 0, NULL), *x = json_object_get(root, "error");

		assert_non_null(x);
		assert_string_equal(json_string_value(json_object_get(x, "message")), e.message);
		assert_string_equal(json_string_value(json_object_get(x, "type")),
		                    "invalid_request_error");
		if (param[0])
			assert_string_equal(json_string_value(json_object_get(x, "param")), param);
		else
			assert_true(json_is_null(json_object_get(x, "param")));
		json_decref(root);
		free(j);
	}
}

static void test_chat_taken(void **state)
{
	struct oai_req r;

	(void)state;
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
	     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hel\"},"
	     "{\"type\":\"text\",\"text\":\"lo \\u00e9\"}],\"name\":\"ann\"}],"
	     "\"max_completion_tokens\":12,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
	     "\"seed\":-7,\"stop\":[\"\\n\\n\",\"END\"],\"stream\":true,"
	     "\"stream_options\":{\"include_usage\":true},\"n\":1,\"ignis\":{\"class\":\"agent\"},"
	     "\"chat_template_kwargs\":{\"enable_thinking\":false},\"logprobs\":false,"
	     "\"presence_penalty\":0,\"tools\":[],\"response_format\":{\"type\":\"text\"},"
	     "\"user\":\"u1\"}",
	     &r);
	assert_int_equal(r.kind, OAI_CHAT);
	assert_string_equal(r.model, "m");
	assert_int_equal(r.n_messages, 2);
	assert_string_equal(r.messages[0].role, "system");
	assert_string_equal(r.messages[0].text, "be brief");
	assert_string_equal(r.messages[1].role, "user");
	assert_string_equal(r.messages[1].text, "hello \xc3\xa9"); /* parts joined as they are */
	assert_int_equal(r.messages[1].len, 8);
	assert_int_equal(r.max_tokens, 12);
	assert_true(r.temperature == 0.5 && r.top_p == 0.9 && r.top_k == 40);
	assert_true(r.seed_set && r.seed == -7);
	assert_int_equal(r.n_stop, 2);
	assert_string_equal(r.stop[0], "\n\n");
	assert_string_equal(r.stop[1], "END");
	assert_true(r.stream && r.include_usage && r.agent);
	assert_true(r.thinking_set && !r.thinking);
	oai_req_free(&r);

	/* the defaults: OpenAI's temperature and top_p of 1, interactive */
	take(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
	     &r);
	assert_true(r.temperature == 1.0 && r.top_p == 1.0 && r.top_k == 0);
	assert_false(r.seed_set || r.stream || r.agent || r.thinking_set || r.logprobs);
	assert_int_equal(r.max_tokens, 0);
	oai_req_free(&r);

	/* log-probabilities, the top list in either order of the fields */
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"top_logprobs\":20,\"messages\":[{\"role\":\"user\","
	     "\"content\":\"hi\"}],\"logprobs\":true}",
	     &r);
	assert_true(r.logprobs);
	assert_int_equal(r.top_logprobs, 20);
	oai_req_free(&r);
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
	     "\"logprobs\":true,\"top_logprobs\":null}",
	     &r);
	assert_true(r.logprobs);
	assert_int_equal(r.top_logprobs, 0);
	oai_req_free(&r);
}

static void test_completion_taken(void **state)
{
	struct oai_req r;

	(void)state;
	take(OAI_COMPLETION,
	     "{\"model\":\"m\",\"prompt\":\"once\",\"max_tokens\":3,\"stop\":\"x\"}", &r);
	assert_string_equal(r.prompt, "once");
	assert_int_equal(r.n_stop, 1);
	oai_req_free(&r);
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"one string\"],\"echo\":false}", &r);
	assert_string_equal(r.prompt, "one string");
	oai_req_free(&r);
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2,259]}", &r);
	assert_int_equal(r.n_prompt_ids, 3);
	assert_int_equal(r.prompt_ids[2], 259);
	oai_req_free(&r);
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[7,8]],\"best_of\":1,\"suffix\":null}",
	     &r);
	assert_int_equal(r.n_prompt_ids, 2);
	assert_int_equal(r.prompt_ids[0], 7);
	oai_req_free(&r);
	/* legacy logprobs N: the top list's length; 0 the sampled token's only */
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":5}", &r);
	assert_true(r.logprobs);
	assert_int_equal(r.top_logprobs, 5);
	oai_req_free(&r);
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":0}", &r);
	assert_true(r.logprobs);
	assert_int_equal(r.top_logprobs, 0);
	oai_req_free(&r);
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":null}", &r);
	assert_false(r.logprobs);
	oai_req_free(&r);
}

/* completions' echo (docs/adr/0063): taken with or without logprobs, with
 * max_tokens 0 only beside it; chat has none; the first prompt token's
 * logprobs written null. */
static void test_echo(void **state)
{
	static const struct {
		const char *body;
		bool echo, max_zero, logprobs;
		uint32_t max_tokens;
	} taken[] = {
	    {"{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true}", true, false, false, 0},
	    {"{\"model\":\"m\",\"prompt\":\"a\",\"echo\":null}", false, false, false, 0},
	    {"{\"model\":\"m\",\"prompt\":[1,2],\"echo\":true,\"max_tokens\":0,\"logprobs\":5}",
	     true, true, true, 0},
	    {"{\"model\":\"m\",\"prompt\":\"a\",\"max_tokens\":0,\"echo\":true,\"logprobs\":0}",
	     true, true, true, 0},
	    {"{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true,\"max_tokens\":1,\"logprobs\":1}",
	     true, false, true, 1},
	    {"{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true,\"max_completion_tokens\":0}", true,
	     true, false, 0},
	};
	struct oai_lps *a;
	struct oai_lp_tok t = {0};
	char *j;

	(void)state;
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		struct oai_req r;

		take(OAI_COMPLETION, taken[i].body, &r);
		if (r.echo != taken[i].echo || r.max_zero != taken[i].max_zero ||
		    r.logprobs != taken[i].logprobs || r.max_tokens != taken[i].max_tokens)
			fail_msg("%s: echo %d max_zero %d logprobs %d max_tokens %u", taken[i].body,
			         r.echo, r.max_zero, r.logprobs, r.max_tokens);
		oai_req_free(&r);
	}
	refuse(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"echo\":1}", 400, "echo",
	       "invalid_value", "true or false");
	refuse(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"max_tokens\":0}", 400,
	       "max_tokens", "invalid_value", "or 0 with echo");
	refuse(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"max_tokens\":0,\"echo\":false}",
	       400, "max_tokens", "invalid_value", "0 without \"echo\": true");
	refuse(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"max_tokens\":-1,\"echo\":true}",
	       400, "max_tokens", "invalid_value", "from 0 to 4096");
	refuse(OAI_CHAT,
	       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
	       "\"echo\":true}",
	       400, "echo", "unknown_parameter", "echo");
	refuse(OAI_CHAT,
	       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
	       "\"max_tokens\":0}",
	       400, "max_tokens", "invalid_value", "from 1 to 4096");
	/* the prompt's first token: its text alone, nulls; then entries as a
	 * generated token's, text_offset as given */
	a = oai_lps_new(OAI_COMPLETION);
	assert_non_null(a);
	t.none = true;
	t.tok = (struct oai_lp_alt){(const uint8_t *)"He", 2, 0};
	assert_int_equal(oai_lps_add(a, &t), 0);
	t.none = false;
	t.tok = (struct oai_lp_alt){(const uint8_t *)"llo", 3, -0.5};
	t.n_top = 2;
	t.top[0] = (struct oai_lp_alt){(const uint8_t *)"llo", 3, -0.5};
	t.top[1] = (struct oai_lp_alt){(const uint8_t *)"y", 1, -1.25};
	t.text_offset = 2;
	assert_int_equal(oai_lps_add(a, &t), 0);
	assert_int_equal(oai_lps_count(a), 2);
	j = oai_completion_json(OAI_COMPLETION, "cmpl-1", 1, "m", "Hello", 5, "length",
	                        &(struct oai_usage){2, 0, 0}, a, NULL);
	assert_non_null(j);
	assert_non_null(strstr(j, "\"logprobs\":{\"tokens\":[\"He\",\"llo\"],\"token_logprobs\":"
	                          "[null,-0.5],\"top_logprobs\":[null,{\"llo\":-0.5,\"y\":-1.25}],"
	                          "\"text_offset\":[0,2]}"));
	free(j);
	oai_lps_free(a);
}

static void test_refusals(void **state)
{
	const enum oai_kind C = OAI_CHAT, P = OAI_COMPLETION;
	const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
	char b[512];

	(void)state;
	refuse(C, "{\"model\":", 400, "", "invalid_json", "not JSON");
	refuse(C, "[1]", 400, "", "invalid_json", "accepted: a JSON object");
	refuse(C, "{\"model\":\"m\",\"model\":\"n\"}", 400, "", "invalid_json", "duplicate");
	refuse(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 400, "model",
	       "missing_required_parameter", "'model' is missing");
	refuse(C, "{\"model\":\"m\"}", 400, "messages", "missing_required_parameter",
	       "'messages' is missing");
	refuse(P, "{\"model\":\"m\"}", 400, "prompt", "missing_required_parameter",
	       "'prompt' is missing");
	refuse(C, "{\"model\":\"m\",\"prompt\":\"x\"}", 400, "prompt", "unknown_parameter",
	       "unknown field 'prompt' for /v1/chat/completions");
	refuse(P, "{\"model\":\"m\",\"messages\":[]}", 400, "messages", "unknown_parameter",
	       "unknown field 'messages' for /v1/completions");
	refuse(C, "{\"model\":\"m\",\"frobnicate\":1}", 400, "frobnicate", "unknown_parameter",
	       "unknown field 'frobnicate'");
	refuse(C, "{\"model\":7}", 400, "model", "invalid_value", "'model' is an integer");
#define WITH(field) (snprintf(b, sizeof b, "{\"model\":\"m\",%s,%s}", u, field), b)
	refuse(C, WITH("\"temperature\":2.5"), 400, "temperature", "invalid_value",
	       "'temperature' is 2.5; accepted: a number from 0 to 2");
	refuse(C, WITH("\"temperature\":\"hot\""), 400, "temperature", "invalid_value",
	       "is a string");
	refuse(C, WITH("\"top_p\":0"), 400, "top_p", "invalid_value", "above 0, at most 1");
	refuse(C, WITH("\"top_k\":261"), 400, "top_k", "invalid_value", "from 0 to 260");
	refuse(C, WITH("\"max_tokens\":0"), 400, "max_tokens", "invalid_value",
	       "accepted: an integer from 1 to 4096");
	refuse(C, WITH("\"max_completion_tokens\":5000"), 400, "max_completion_tokens",
	       "invalid_value", "5000");
	refuse(C, WITH("\"seed\":1.5"), 400, "seed", "invalid_value", "an integer");
	refuse(C, WITH("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), 400, "stop", "invalid_value",
	       "holds 5 strings; accepted: up to 4");
	refuse(C, WITH("\"stop\":\"\""), 400, "stop", "invalid_value", "1 to 64 bytes");
	/* n: 1 to OAI_N_MAX choices (docs/adr/0059) */
	refuse(C, WITH("\"n\":17"), 400, "n", "invalid_value", "an integer 1 to 16");
	refuse(C, WITH("\"n\":0"), 400, "n", "invalid_value", "an integer 1 to 16");
	refuse(C, WITH("\"n\":1.5"), 400, "n", "invalid_value", "an integer 1 to 16");
	/* log-probabilities: the ranges named (docs/http.md) */
	refuse(C, WITH("\"logprobs\":1"), 400, "logprobs", "invalid_value", "true or false");
	refuse(C, WITH("\"logprobs\":true,\"top_logprobs\":21"), 400, "top_logprobs",
	       "invalid_value", "accepted: an integer from 0 to 20");
	refuse(C, WITH("\"top_logprobs\":-1"), 400, "top_logprobs", "invalid_value",
	       "from 0 to 20");
	refuse(C, WITH("\"top_logprobs\":2"), 400, "top_logprobs", "invalid_value",
	       "only for a request with \"logprobs\": true");
	refuse(C, WITH("\"logprobs\":false,\"top_logprobs\":2"), 400, "top_logprobs",
	       "invalid_value", "\"logprobs\": true");
	/* tools (docs/adr/0054) */
	refuse(C, WITH("\"tools\":[{\"type\":\"function\"}]"), 400, "tools", "invalid_value",
	       "is not {\"type\": \"function\", \"function\"");
	refuse(C, WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]"), 400,
	       "tools", "invalid_value", "not 1 to 64 of");
	refuse(C,
	       WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
	            "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"),
	       400, "tools", "invalid_value", "both named 'f'");
	refuse(C,
	       WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"code\":1}}]"),
	       400, "tools", "unsupported_value", "has 'code'");
	refuse(C,
	       WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
	            "3}}]"),
	       400, "tools", "invalid_value", "JSON Schema object");
	refuse(C, WITH("\"tool_choice\":\"required\""), 400, "tool_choice", "invalid_value",
	       "without 'tools'");
	refuse(C, WITH("\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"),
	       400, "tool_choice", "invalid_value", "which 'tools' does not hold");
	refuse(C,
	       WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
	            "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"),
	       400, "tool_choice", "invalid_value", "names the function 'f'");
	refuse(C, WITH("\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}"), 400,
	       "tool_choice", "invalid_value", "{\"type\": \"function\", \"function\"");
	refuse(C, WITH("\"tool_choice\":\"any\""), 400, "tool_choice", "invalid_value",
	       "\"auto\", \"none\", \"required\"");
	refuse(C, WITH("\"parallel_tool_calls\":1"), 400, "parallel_tool_calls", "invalid_value",
	       "true or false");
	refuse(C, WITH("\"presence_penalty\":0.5"), 400, "presence_penalty", "unsupported_value",
	       "accepted: 0");
	refuse(C, WITH("\"response_format\":{\"type\":\"xml\"}"), 400, "response_format",
	       "invalid_value", "\"json_schema\"");
	refuse(C, WITH("\"response_format\":{\"type\":\"json_schema\"}"), 400, "response_format",
	       "invalid_value", "takes one other field");
	refuse(C,
	       WITH("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
	            "\"a b\",\"schema\":{}}}"),
	       400, "response_format", "invalid_value", "name is missing or not");
	refuse(C,
	       WITH("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
	            "\"x\",\"schema\":[]}}"),
	       400, "response_format", "invalid_value", "a JSON Schema object");
	refuse(C,
	       WITH("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
	            "\"x\",\"schema\":{},\"extra\":1}}"),
	       400, "response_format", "invalid_value", "has 'extra'");
	refuse(C, WITH("\"stream_options\":{\"include_usage\":true}"), 400, "stream_options",
	       "invalid_value", "only for a streamed request");
	refuse(C, WITH("\"ignis\":{\"class\":\"batch\"}"), 400, "ignis.class", "invalid_value",
	       "\"interactive\" or \"agent\"");
	refuse(C, WITH("\"chat_template_kwargs\":{\"add_vision_id\":true}"), 400,
	       "chat_template_kwargs", "invalid_value", "enable_thinking");
#undef WITH
	refuse(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400,
	       "messages.tool_call_id", "invalid_value", "no tool_call_id");
	refuse(
	    C,
	    "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"c9\",\"content\":"
	    "\"x\"}]}",
	    400, "messages.tool_call_id", "invalid_value", "answers call 'c9', which no earlier");
	refuse(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400,
	       "messages.role", "invalid_value", "role 'robot'");
	refuse(C,
	       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
	       "\"tool_calls\":[]}]}",
	       400, "messages", "unsupported_value", "has 'tool_calls'");
	refuse(C, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", 400, "messages.content",
	       "invalid_value", "no content");
	refuse(C,
	       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	       "\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
	       400, "messages.content", "invalid_value", "not a text part");
	refuse(C,
	       "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"x\","
	       "\"tool_calls\":[{\"id\":\"a\"}]}]}",
	       400, "messages.tool_calls", "invalid_value", "tool call 0 is not");
	refuse(C, "{\"model\":\"m\",\"messages\":[]}", 400, "messages", "invalid_value",
	       "non-empty array");
	refuse(P, "{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":21}", 400, "logprobs",
	       "invalid_value", "'logprobs' is 21; accepted: an integer from 0 to 20");
	refuse(P, "{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":true}", 400, "logprobs",
	       "invalid_value", "from 0 to 20");
	refuse(P, "{\"model\":\"m\",\"prompt\":\"a\",\"top_logprobs\":2}", 400, "top_logprobs",
	       "unknown_parameter", "top_logprobs");
	refuse(P, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "unsupported_value",
	       "holds 2 prompts");
	refuse(P, "{\"model\":\"m\",\"prompt\":[1,260]}", 400, "prompt", "invalid_value",
	       "token 1 of the prompt is not a token id; accepted: integers from 0 to 259");
	/* ids written as floats are one prompt of ids, refused as such (issue 26) */
	refuse(P, "{\"model\":\"m\",\"prompt\":[1.0,2.0]}", 400, "prompt", "invalid_value",
	       "token 0 of the prompt is 1, not a whole number");
	refuse(P, "{\"model\":\"m\",\"prompt\":[[3,2.5]]}", 400, "prompt", "invalid_value",
	       "token 1 of the prompt is 2.5, not a whole number");
	/* an empty prompt is refused in OpenAI's shape, not by the door */
	refuse(P, "{\"model\":\"m\",\"prompt\":\"\"}", 400, "prompt", "invalid_value",
	       "the prompt is empty");
	refuse(P, "{\"model\":\"m\",\"prompt\":[\"\"]}", 400, "prompt", "invalid_value",
	       "the prompt is empty");
	refuse(P, "{\"model\":\"m\",\"prompt\":{}}", 400, "prompt", "invalid_value",
	       "'prompt' is an object");
	refuse(P, "{\"model\":\"m\",\"prompt\":[]}", 400, "prompt", "invalid_value",
	       "'prompt' is an array");
}

/* Past the limits: 413, the body before it is read, a prompt or chat too
 * long with context_length_exceeded. */
static void test_too_large(void **state)
{
	struct oai_req r;
	struct oai_err e = {0};
	char *big = malloc(4096);
	size_t n;

	(void)state;
	assert_non_null(big);
	assert_int_equal(oai_parse(OAI_CHAT, "{}", lim.max_body + 1, &lim, &r, &e), -1);
	assert_int_equal(e.status, 413);
	assert_string_equal(e.code, "request_too_large");
	n = (size_t)snprintf(big, 4096, "{\"model\":\"m\",\"prompt\":\"%01100d\"}", 0);
	assert_int_equal(oai_parse(OAI_COMPLETION, big, n, &lim, &r, &e), -1);
	assert_int_equal(e.status, 413);
	assert_string_equal(e.code, "context_length_exceeded");
	assert_non_null(strstr(e.message, "1100 bytes; accepted: up to 1000"));
	n = (size_t)snprintf(big, 4096, "{\"model\":\"m\",\"prompt\":[");
	for (int i = 0; i < 65; i++)
		n += (size_t)snprintf(big + n, 4096 - n, "%s1", i ? "," : "");
	n += (size_t)snprintf(big + n, 4096 - n, "]}");
	assert_int_equal(oai_parse(OAI_COMPLETION, big, n, &lim, &r, &e), -1);
	assert_int_equal(e.status, 413);
	assert_non_null(strstr(e.message, "65 token ids; accepted: up to 64"));
	n = (size_t)snprintf(big, 4096, "{\"model\":\"m\",\"messages\":[");
	for (int i = 0; i < 9; i++)
		n += (size_t)snprintf(big + n, 4096 - n, "%s{\"role\":\"user\",\"content\":\"x\"}",
		                      i ? "," : "");
	n += (size_t)snprintf(big + n, 4096 - n, "]}");
	assert_int_equal(oai_parse(OAI_CHAT, big, n, &lim, &r, &e), -1);
	assert_int_equal(e.status, 413);
	assert_non_null(strstr(e.message, "9 messages; accepted: up to 8"));
	free(big);
}

static json_t *load(char *s)
{
	json_t *j;

	assert_non_null(s);
	j = json_loads(s, 0, NULL);
	free(s);
	assert_non_null(j);
	return j;
}

static const char *str_at(json_t *root, const char *path)
{
	json_t *v = json_object_get(root, path);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* An agent's conversation: tools, calls, a tool's answer, reasoning. */
static void test_tools_taken(void **state)
{
	struct oai_req r;

	(void)state;
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,\"tools\":"
	     "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
	     "\"parameters\":{\"type\":\"object\"},\"strict\":true}}],\"messages\":["
	     "{\"role\":\"user\",\"content\":\"Paris?\"},"
	     "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"think\",\"tool_"
	     "calls\":"
	     "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	     "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
	     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21C\"}]}",
	     &r);
	assert_int_equal(r.n_tools, 1);
	assert_string_equal(r.tools[0].name, "get_weather");
	assert_non_null(r.tools[0].params);
	assert_true(r.tools[0].strict);
	assert_int_equal(r.tool_choice, OAI_TC_AUTO);
	assert_false(r.parallel_calls);
	assert_int_equal(r.n_messages, 3);
	assert_string_equal(r.messages[1].role, "assistant");
	assert_int_equal(r.messages[1].len, 0);
	assert_int_equal(r.messages[1].n_calls, 1);
	assert_string_equal(r.messages[1].calls[0].id, "c1");
	assert_memory_equal(r.messages[1].calls[0].args, "{\"city\": \"Paris\"}", 18);
	assert_memory_equal(r.messages[1].reasoning, "think", 5);
	assert_string_equal(r.messages[2].role, "tool");
	assert_string_equal(r.messages[2].tool_call_id, "c1");
	oai_req_free(&r);
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"tool_choice\":\"none\",\"messages\":[{\"role\":\"user\","
	     "\"content\":\"x\"}]}",
	     &r);
	assert_int_equal(r.tool_choice, OAI_TC_NONE);
	assert_true(r.parallel_calls);
	assert_int_equal(r.format, OAI_RF_TEXT);
	oai_req_free(&r);
	/* the choices a grammar enforces (docs/adr/0057), and response_format */
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
	     "\"b\"}},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
	     "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"strict\":false}}],"
	     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
	     &r);
	assert_int_equal(r.tool_choice, OAI_TC_NAMED);
	assert_int_equal(r.tc_tool, 1);
	assert_false(r.tools[0].strict);
	oai_req_free(&r);
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
	     "\"function\":{\"name\":\"a\"}}],\"response_format\":{\"type\":\"json_object\"},"
	     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
	     &r);
	assert_int_equal(r.tool_choice, OAI_TC_REQUIRED);
	assert_int_equal(r.format, OAI_RF_JSON_OBJECT);
	oai_req_free(&r);
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
	     "{\"name\":\"w\",\"strict\":true,\"schema\":{\"type\":\"object\"}}},"
	     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
	     &r);
	assert_int_equal(r.format, OAI_RF_JSON_SCHEMA);
	assert_string_equal(r.rf_name, "w");
	assert_non_null(r.rf_schema);
	oai_req_free(&r);
}

/* n choices: taken up to OAI_N_MAX; a whole answer's choices indexed 0..n-1,
 * each its own; a stream's chunk moved to its choice's index. */
static void test_n_choices(void **state)
{
	const struct oai_choice ch[3] = {{"a", 1, "stop", NULL, NULL},
	                                 {"bc", 2, "length", NULL, NULL},
	                                 {"d", 1, "stop", NULL, NULL}};
	struct oai_usage u = {5, 4, 0};
	struct oai_req r;
	json_t *j, *c;

	(void)state;
	take(OAI_CHAT,
	     "{\"model\":\"m\",\"n\":16,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
	assert_int_equal(r.n, 16);
	oai_req_free(&r);
	take(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\"}", &r);
	assert_int_equal(r.n, 1);
	oai_req_free(&r);
	j = load(oai_choices_json(OAI_CHAT, "chatcmpl-1", 1, "m", ch, 3, &u));
	assert_int_equal(json_array_size(json_object_get(j, "choices")), 3);
	for (size_t i = 0; i < 3; i++) {
		c = json_array_get(json_object_get(j, "choices"), i);
		assert_int_equal(json_integer_value(json_object_get(c, "index")), i);
		assert_string_equal(str_at(json_object_get(c, "message"), "content"), ch[i].text);
		assert_string_equal(str_at(c, "finish_reason"), ch[i].finish_reason);
	}
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")),
	    4);
	json_decref(j);
	j = load(oai_chunk_at(
	    oai_chunk_json(OAI_COMPLETION, "cmpl-1", 1, "m", false, "z", 1, NULL, NULL, NULL), 2));
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_int_equal(json_integer_value(json_object_get(c, "index")), 2);
	assert_string_equal(str_at(c, "text"), "z");
	json_decref(j);
	/* a chunk with no choice (usage) is left as it was */
	j = load(oai_chunk_at(
	    oai_chunk_json(OAI_CHAT, "chatcmpl-1", 1, "m", false, NULL, 0, NULL, &u, NULL), 1));
	assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
	json_decref(j);
}

static void test_answers(void **state)
{
	struct oai_usage u = {5, 3, 0};
	json_t *j, *c;

	(void)state;
	j = load(oai_completion_json(OAI_CHAT, "chatcmpl-1", 1700000000, "m", "hi \xc3\xa9", 5,
	                             "stop", &u, NULL, NULL));
	assert_string_equal(str_at(j, "object"), "chat.completion");
	assert_string_equal(str_at(j, "id"), "chatcmpl-1");
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_string_equal(str_at(json_object_get(c, "message"), "content"), "hi \xc3\xa9");
	assert_string_equal(str_at(json_object_get(c, "message"), "role"), "assistant");
	assert_string_equal(str_at(c, "finish_reason"), "stop");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 8);
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"),
	                     "cached_tokens")),
	                 0);
	json_decref(j);

	/* a chat answer taken apart: calls, reasoning, no content */
	{
		struct oai_call call = {"call_x_0", "get_weather", "{\"city\": \"Paris\"}", 17};
		struct oai_parts parts = {"hmm", "", 3, 0, &call, 1};
		json_t *m, *tc;

		j = load(oai_completion_json(OAI_CHAT, "chatcmpl-2", 1, "m", "ignored", 7,
		                             "tool_calls", &u, NULL, &parts));
		c = json_array_get(json_object_get(j, "choices"), 0);
		m = json_object_get(c, "message");
		assert_true(json_is_null(json_object_get(m, "content")));
		assert_string_equal(str_at(m, "reasoning_content"), "hmm");
		tc = json_array_get(json_object_get(m, "tool_calls"), 0);
		assert_string_equal(str_at(tc, "id"), "call_x_0");
		assert_string_equal(str_at(tc, "type"), "function");
		assert_string_equal(str_at(json_object_get(tc, "function"), "name"), "get_weather");
		assert_string_equal(str_at(json_object_get(tc, "function"), "arguments"),
		                    "{\"city\": \"Paris\"}");
		assert_string_equal(str_at(c, "finish_reason"), "tool_calls");
		json_decref(j);
		/* the stream's deltas: a call's start, an arguments fragment */
		j = load(
		    oai_delta_json("chatcmpl-2", 1, "m", OAI_D_CALL, 1, "call_x_1", "ls", 2, NULL));
		c = json_array_get(json_object_get(j, "choices"), 0);
		tc = json_array_get(json_object_get(json_object_get(c, "delta"), "tool_calls"), 0);
		assert_int_equal(json_integer_value(json_object_get(tc, "index")), 1);
		assert_string_equal(str_at(tc, "id"), "call_x_1");
		assert_string_equal(str_at(json_object_get(tc, "function"), "name"), "ls");
		assert_string_equal(str_at(json_object_get(tc, "function"), "arguments"), "");
		assert_true(json_is_null(json_object_get(c, "finish_reason")));
		json_decref(j);
		j = load(
		    oai_delta_json("chatcmpl-2", 1, "m", OAI_D_ARGS, 1, NULL, "{\"p", 3, NULL));
		c = json_array_get(json_object_get(j, "choices"), 0);
		tc = json_array_get(json_object_get(json_object_get(c, "delta"), "tool_calls"), 0);
		assert_null(json_object_get(tc, "id"));
		assert_string_equal(str_at(json_object_get(tc, "function"), "arguments"), "{\"p");
		json_decref(j);
		j = load(
		    oai_delta_json("chatcmpl-2", 1, "m", OAI_D_REASONING, 0, NULL, "so", 2, NULL));
		c = json_array_get(json_object_get(j, "choices"), 0);
		assert_string_equal(str_at(json_object_get(c, "delta"), "reasoning_content"), "so");
		json_decref(j);
	}

	j = load(oai_completion_json(OAI_COMPLETION, "cmpl-1", 1, "m", "ab", 2, "length", &u, NULL,
	                             NULL));
	assert_string_equal(str_at(j, "object"), "text_completion");
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_string_equal(str_at(c, "text"), "ab");
	assert_string_equal(str_at(c, "finish_reason"), "length");
	json_decref(j);

	/* a stream's chunks: the role first, then content, then the finish */
	j = load(oai_chunk_json(OAI_CHAT, "chatcmpl-2", 1, "m", true, "", 0, NULL, NULL, NULL));
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_string_equal(str_at(json_object_get(c, "delta"), "role"), "assistant");
	assert_true(json_is_null(json_object_get(c, "finish_reason")));
	json_decref(j);
	j = load(oai_chunk_json(OAI_CHAT, "chatcmpl-2", 1, "m", false, "to", 2, NULL, NULL, NULL));
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_string_equal(str_at(json_object_get(c, "delta"), "content"), "to");
	assert_null(json_object_get(json_object_get(c, "delta"), "role"));
	json_decref(j);
	j = load(oai_chunk_json(OAI_CHAT, "chatcmpl-2", 1, "m", false, "", 0, "stop", NULL, NULL));
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_string_equal(str_at(c, "finish_reason"), "stop");
	assert_int_equal(json_object_size(json_object_get(c, "delta")), 0);
	json_decref(j);
	j = load(oai_chunk_json(OAI_CHAT, "chatcmpl-2", 1, "m", false, NULL, 0, NULL, &u, NULL));
	assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")),
	    3);
	json_decref(j);
	/* bytes that are not UTF-8 come out as U+FFFD, the rest kept */
	j = load(oai_chunk_json(OAI_COMPLETION, "cmpl-2", 1, "m", false, "a\xff\xc3\xa9z", 5, NULL,
	                        NULL, NULL));
	c = json_array_get(json_object_get(j, "choices"), 0);
	assert_string_equal(str_at(c, "text"), "a\xef\xbf\xbd\xc3\xa9z");
	json_decref(j);

	j = load(oai_models_json((const char *const[]){"qwen3"}, 1, 7));
	assert_string_equal(str_at(j, "object"), "list");
	c = json_array_get(json_object_get(j, "data"), 0);
	assert_string_equal(str_at(c, "id"), "qwen3");
	assert_string_equal(str_at(c, "owned_by"), "ignis");
	json_decref(j);
	/* several served names: each an entry, in order */
	{
		static const char *const names[] = {"qwen3", "gpt-4o", "org/m:1"};

		j = load(oai_models_json(names, 3, 7));
		assert_int_equal(json_array_size(json_object_get(j, "data")), 3);
		for (size_t i = 0; i < 3; i++) {
			c = json_array_get(json_object_get(j, "data"), i);
			assert_string_equal(str_at(c, "id"), names[i]);
			assert_string_equal(str_at(c, "object"), "model");
		}
	}
	json_decref(j);
}

/* /tokenize's and /detokenize's bodies: the defaults, each field, and the
 * refusals naming the field. */
static void test_tokenize_taken(void **state)
{
	struct oai_req r;

	(void)state;
	/* model optional; add_special and the generation prompt on */
	take(OAI_TOKENIZE, "{\"prompt\":\"hi <|im_end|>\"}", &r);
	assert_string_equal(r.model, "");
	assert_int_equal(r.prompt_len, 13);
	assert_memory_equal(r.prompt, "hi <|im_end|>", 13);
	assert_true(r.add_special && r.gen_prompt);
	assert_false(r.with_pieces || r.token_strs || r.n_messages);
	oai_req_free(&r);
	/* an empty prompt has no ids, and is no error */
	take(OAI_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"\"}", &r);
	assert_non_null(r.prompt);
	assert_int_equal(r.prompt_len, 0);
	oai_req_free(&r);
	/* llama.cpp's names */
	take(OAI_TOKENIZE, "{\"content\":\"x\",\"add_special\":false,\"with_pieces\":true}", &r);
	assert_int_equal(r.prompt_len, 1);
	assert_false(r.add_special);
	assert_true(r.with_pieces);
	oai_req_free(&r);
	/* vLLM's chat form */
	take(OAI_TOKENIZE,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
	     "\"add_generation_prompt\":false,\"add_special_tokens\":false,"
	     "\"return_token_strs\":true,\"chat_template_kwargs\":{\"enable_thinking\":false}}",
	     &r);
	assert_int_equal(r.n_messages, 1);
	assert_null(r.prompt);
	assert_false(r.gen_prompt || r.add_special);
	assert_true(r.token_strs && r.thinking_set && !r.thinking);
	oai_req_free(&r);
	/* detokenize: ids from 0 (the vocabulary is the server's check), maybe none */
	take(OAI_DETOKENIZE, "{\"model\":\"m\",\"tokens\":[0,259,4000000000]}", &r);
	assert_int_equal(r.n_prompt_ids, 3);
	assert_int_equal(r.prompt_ids[1], 259);
	assert_int_equal(r.prompt_ids[2], 4000000000u);
	oai_req_free(&r);
	take(OAI_DETOKENIZE, "{\"tokens\":[]}", &r);
	assert_true(r.tokens_set);
	assert_int_equal(r.n_prompt_ids, 0);
	oai_req_free(&r);

	refuse(OAI_TOKENIZE, "{\"model\":\"m\"}", 400, "prompt", "missing_required_parameter",
	       "'prompt' (a string) or 'messages'");
	refuse(OAI_TOKENIZE,
	       "{\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}", 400,
	       "messages", "invalid_value", "one of the two");
	refuse(OAI_TOKENIZE, "{\"prompt\":\"a\",\"content\":\"b\"}", 400, "content",
	       "invalid_value", "the same field");
	refuse(OAI_TOKENIZE, "{\"prompt\":[1,2]}", 400, "prompt", "invalid_value", "a string");
	refuse(OAI_TOKENIZE, "{\"prompt\":\"a\",\"add_special_tokens\":1}", 400,
	       "add_special_tokens", "invalid_value", "true or false");
	refuse(OAI_TOKENIZE, "{\"prompt\":\"a\",\"tokens\":[1]}", 400, "tokens",
	       "unknown_parameter", "/tokenize");
	refuse(OAI_TOKENIZE, "{\"prompt\":\"a\",\"model\":7}", 400, "model", "invalid_value",
	       "the model's name");
	refuse(OAI_DETOKENIZE, "{\"model\":\"m\"}", 400, "tokens", "missing_required_parameter",
	       "'tokens' is missing");
	refuse(OAI_DETOKENIZE, "{\"tokens\":\"1 2\"}", 400, "tokens", "invalid_value",
	       "an array of token ids");
	refuse(OAI_DETOKENIZE, "{\"tokens\":[1,-1]}", 400, "tokens", "invalid_value",
	       "token 1 of 'tokens'");
	refuse(OAI_DETOKENIZE, "{\"tokens\":[1.5]}", 400, "tokens", "invalid_value",
	       "token 0 of 'tokens' is a number");
	refuse(OAI_DETOKENIZE, "{\"tokens\":[1],\"prompt\":\"x\"}", 400, "prompt",
	       "unknown_parameter", "/detokenize");
}

/* /tokenize's and /detokenize's answers. */
static void test_tokenize_answers(void **state)
{
	static const uint32_t ids[] = {72, 257, 195};
	const struct oai_piece pieces[] = {{(const uint8_t *)"H", 1},
	                                   {(const uint8_t *)"<|im_start|>", 12},
	                                   {(const uint8_t *)"\xc3", 1}};
	json_t *j, *t;

	(void)state;
	j = load(oai_tokens_json(ids, 3, NULL, 1024, false, false));
	t = json_object_get(j, "tokens");
	assert_int_equal(json_array_size(t), 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(json_integer_value(json_array_get(t, i)), ids[i]);
	assert_int_equal(json_integer_value(json_object_get(j, "count")), 3);
	assert_int_equal(json_integer_value(json_object_get(j, "max_model_len")), 1024);
	assert_null(json_object_get(j, "token_strs"));
	json_decref(j);
	/* pieces beside ids (llama.cpp) and apart (vLLM); a byte that is not
	 * UTF-8 by itself as U+FFFD */
	j = load(oai_tokens_json(ids, 3, pieces, 1024, true, true));
	t = json_array_get(json_object_get(j, "tokens"), 1);
	assert_int_equal(json_integer_value(json_object_get(t, "id")), 257);
	assert_string_equal(str_at(t, "piece"), "<|im_start|>");
	t = json_object_get(j, "token_strs");
	assert_string_equal(json_string_value(json_array_get(t, 0)), "H");
	assert_string_equal(json_string_value(json_array_get(t, 2)), "\xef\xbf\xbd");
	json_decref(j);
	/* none */
	j = load(oai_tokens_json(NULL, 0, NULL, 7, false, true));
	assert_int_equal(json_array_size(json_object_get(j, "tokens")), 0);
	assert_int_equal(json_array_size(json_object_get(j, "token_strs")), 0);
	assert_int_equal(json_integer_value(json_object_get(j, "count")), 0);
	json_decref(j);

	j = load(oai_detokenize_json("hi \xc3\xa9\xff", 6));
	assert_string_equal(str_at(j, "prompt"), "hi \xc3\xa9\xef\xbf\xbd");
	assert_string_equal(str_at(j, "content"), "hi \xc3\xa9\xef\xbf\xbd");
	json_decref(j);
	j = load(oai_detokenize_json(NULL, 0));
	assert_string_equal(str_at(j, "prompt"), "");
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chat_taken),     cmocka_unit_test(test_completion_taken),
	    cmocka_unit_test(test_echo),           cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_too_large),      cmocka_unit_test(test_tools_taken),
	    cmocka_unit_test(test_answers),        cmocka_unit_test(test_n_choices),
	    cmocka_unit_test(test_tokenize_taken), cmocka_unit_test(test_tokenize_answers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
