/*
 * test_anthropic.c - supervisor/anthropic.h: Anthropic's Messages requests
 * read into the chat path's request (a table of bodies taken, with what
 * they become, and of bodies refused, with the status, field and words),
 * its errors' shape, and its answers written from the output parser's
 * events: a model text with thinking, text and two tool calls (Hermes, as
 * Qwen3 writes them) fed whole, a byte at a time and in seeded random
 * pieces. Streamed, the events must come in Anthropic's order and assemble
 * (as a client does: blocks started, deltas appended, tool input parsed
 * from its partial JSON) into the whole answer, exactly. The stream of the
 * text fed whole is also compared with anth-tool.sse byte for byte, the
 * file anthropic.sh replays through Anthropic's own client (rewrite it with
 * IGNIS_UPDATE_GOLDEN=1 when the shape changes on purpose).
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

#include "supervisor/anthropic.h"

static const struct oai_limits lim = {
    .max_body = 1 << 20,
    .max_tokens = 4096,
    .vocab = 1000,
    .max_prompt_ids = 4096,
    .max_text = 1 << 16,
    .max_messages = 16,
};

static void take(const char *body, bool count, struct oai_req *r)
{
	struct oai_err e = {0};

	if (anth_parse(body, strlen(body), &lim, count, r, &e))
		fail_msg("refused (%d, %s): %s\n  body: %s", e.status, e.param, e.message, body);
	assert_int_equal(r->kind, OAI_CHAT);
}

static void expect_msg(const struct oai_req *r, size_t i, const char *role, const char *text)
{
	assert_true(i < r->n_messages);
	assert_string_equal(r->messages[i].role, role);
	assert_int_equal(r->messages[i].len, strlen(text));
	assert_memory_equal(r->messages[i].text, text, strlen(text));
}

static void test_taken(void **state)
{
	struct oai_req r;
	json_t *fn;

	(void)state;
	take("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
	     "\"hi\"}]}",
	     false, &r);
	assert_string_equal(r.model, "m");
	assert_int_equal(r.max_tokens, 5);
	assert_int_equal(r.n_messages, 1);
	expect_msg(&r, 0, "user", "hi");
	assert_false(r.stream);
	assert_false(r.thinking_set);
	assert_true(r.parallel_calls);
	assert_true(r.temperature == 1.0 && r.top_p == 1.0);
	oai_req_free(&r);

	/* system blocks joined; sampling; stops; thinking; our extension */
	take(
	    "{\"model\":\"m\",\"max_tokens\":7,\"system\":[{\"type\":\"text\",\"text\":\"a\","
	    "\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":\"b\"}],"
	    "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"stop_sequences\":[\"X\",\"YZ\"],"
	    "\"stream\":true,\"metadata\":{\"user_id\":\"u\"},\"thinking\":{\"type\":\"disabled\"},"
	    "\"ignis\":{\"class\":\"agent\",\"seed\":9},\"service_tier\":\"auto\","
	    "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\"}]}]}",
	    false, &r);
	assert_int_equal(r.n_messages, 2);
	expect_msg(&r, 0, "system", "ab");
	expect_msg(&r, 1, "user", "q");
	assert_true(r.temperature == 0.5 && r.top_p == 0.9);
	assert_int_equal(r.top_k, 40);
	assert_int_equal(r.n_stop, 2);
	assert_string_equal(r.stop[1], "YZ");
	assert_true(r.stream && r.thinking_set && !r.thinking);
	assert_true(r.agent && r.class_set && r.seed_set);
	assert_int_equal(r.seed, 9);
	oai_req_free(&r);

	/* a tool round trip: tools announced in OpenAI's form, the assistant's
	 * thinking as reasoning and tool_use as calls (input as JSON text),
	 * each tool_result a tool message, text runs user messages */
	take(
	    "{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"ls\",\"description\":"
	    "\"list\","
	    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\"}}}}],"
	    "\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":true},"
	    "\"messages\":[{\"role\":\"user\",\"content\":\"go\"},"
	    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
	    "\"signature\":\"s\"},{\"type\":\"redacted_thinking\",\"data\":\"zz\"},"
	    "{\"type\":\"text\",\"text\":\"ok\"},{\"type\":\"tool_use\",\"id\":\"t1\","
	    "\"name\":\"ls\",\"input\":{\"p\":\"/\"}},{\"type\":\"tool_use\",\"id\":\"t2\","
	    "\"name\":\"ls\",\"input\":{}}]},"
	    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
	    "\"content\":\"a.txt\"},{\"type\":\"tool_result\",\"tool_use_id\":\"t2\","
	    "\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":\"denied\"}]},"
	    "{\"type\":\"text\",\"text\":\"and\"},{\"type\":\"text\",\"text\":\" then\"}]}]}",
	    false, &r);
	assert_int_equal(r.n_tools, 1);
	assert_string_equal(r.tools[0].name, "ls");
	fn = json_object_get((json_t *)r.tools[0].obj, "function");
	assert_string_equal(json_string_value(json_object_get((json_t *)r.tools[0].obj, "type")),
	                    "function");
	assert_string_equal(json_string_value(json_object_get(fn, "description")), "list");
	assert_true(json_object_get(fn, "parameters") == r.tools[0].params);
	assert_false(r.parallel_calls);
	assert_int_equal(r.tool_choice, OAI_TC_AUTO);
	assert_int_equal(r.n_messages, 5);
	expect_msg(&r, 0, "user", "go");
	expect_msg(&r, 1, "assistant", "ok");
	assert_int_equal(r.messages[1].reasoning_len, 2);
	assert_memory_equal(r.messages[1].reasoning, "hm", 2);
	assert_int_equal(r.messages[1].n_calls, 2);
	assert_string_equal(r.messages[1].calls[0].id, "t1");
	assert_string_equal(r.messages[1].calls[0].args, "{\"p\":\"/\"}");
	assert_string_equal(r.messages[1].calls[1].args, "{}");
	expect_msg(&r, 2, "tool", "a.txt");
	assert_string_equal(r.messages[2].tool_call_id, "t1");
	expect_msg(&r, 3, "tool", "Error: denied");
	expect_msg(&r, 4, "user", "and then");
	oai_req_free(&r);

	/* count_tokens: no max_tokens needed, never a stream */
	take("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", true, &r);
	assert_int_equal(r.max_tokens, 0);
	oai_req_free(&r);
	take("{\"model\":\"m\",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
	     "\"tool_choice\":{\"type\":\"none\"},\"tools\":[],"
	     "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
	     true, &r);
	assert_true(r.thinking_set && r.thinking);
	assert_int_equal(r.tool_choice, OAI_TC_NONE);
	oai_req_free(&r);
}

static const struct {
	const char *name, *body;
	int status;
	const char *param, *words;
} refusals[] = {
    {"not json", "{\"model\"", 400, "", "not a JSON object"},
    {"no max_tokens", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
     "max_tokens", "max_tokens is missing"},
    {"max_tokens 0",
     "{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
     "max_tokens", "1 to 4096"},
    {"unknown field",
     "{\"model\":\"m\",\"max_tokens\":1,\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}"
     "]}",
     400, "n", "'n' is not one of"},
    {"no model", "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
     "model", "model is missing"},
    {"temperature", "{\"model\":\"m\",\"max_tokens\":1,\"temperature\":1.2,\"messages\":[]}", 400,
     "temperature", "0 to 1"},
    {"top_p 0", "{\"model\":\"m\",\"max_tokens\":1,\"top_p\":0,\"messages\":[]}", 400, "top_p",
     "above 0"},
    {"top_k", "{\"model\":\"m\",\"max_tokens\":1,\"top_k\":5000,\"messages\":[]}", 400, "top_k",
     "0 to 1000"},
    {"stops",
     "{\"model\":\"m\",\"max_tokens\":1,\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400,
     "stop_sequences", "up to 4"},
    {"no messages", "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[]}", 400, "messages",
     "messages is empty"},
    {"system role",
     "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
     400, "messages[0].role", "the top-level 'system'"},
    {"image",
     "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"image\",\"source\":{}}]}]}",
     400, "messages[0].content[0]", "'image' block"},
    {"tool_use in a user turn",
     "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"tool_use\",\"id\":\"a\",\"name\":\"b\",\"input\":{}}]}]}",
     400, "messages[0].content[0]", "accepted in a user message"},
    {"result of no call",
     "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"tool_result\",\"tool_use_id\":\"t9\",\"content\":\"x\"}]}]}",
     400, "tool_use_id", "'t9' answers no tool_use block"},
    {"tool_use input not an object",
     "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
     "\"type\":"
     "\"tool_use\",\"id\":\"a\",\"name\":\"b\",\"input\":\"{}\"}]}]}",
     400, "messages[0].content[0]", "not a tool_use block"},
    {"tool_choice any",
     "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"any\"},\"messages\":[]}", 400,
     "tool_choice", "'tools' holds none"},
    {"tool_choice names no tool",
     "{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"a\",\"input_schema\":{\"type\":"
     "\"object\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"b\"},\"messages\":[]}",
     400, "tool_choice", "'tools' does not hold"},
    {"tool_choice tool",
     "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"tool\",\"name\":\"x\"}}", 400,
     "tool_choice", "'tools' holds none"},
    {"tool_choice a string", "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":\"auto\"}", 400,
     "tool_choice", "tool_choice is a string"},
    {"server tool",
     "{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]"
     "}",
     400, "tools", "'bash_20250124'"},
    {"tool twice",
     "{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"a\",\"input_schema\":{\"type\":"
     "\"object\"}},{\"name\":\"a\",\"input_schema\":{}}]}",
     400, "tools", "taken twice"},
    {"schema not an object",
     "{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"a\",\"input_schema\":{\"type\":"
     "\"array\"}}]}",
     400, "tools", "not an object schema"},
    {"thinking", "{\"model\":\"m\",\"max_tokens\":1,\"thinking\":{\"type\":\"on\"}}", 400,
     "thinking", "enabled"},
    {"ignis", "{\"model\":\"m\",\"max_tokens\":1,\"ignis\":{\"klass\":1}}", 400, "ignis",
     "ignis.klass"},
    {"service tier", "{\"model\":\"m\",\"max_tokens\":1,\"service_tier\":\"priority\"}", 400,
     "service_tier", "one tier"},
    {"too many messages",
     "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"1\"},{"
     "\"role\":\"user\",\"content\":\"2\"},{\"role\":\"user\",\"content\":\"3\"},{\"role\":"
     "\"user\",\"content\":\"4\"},{\"role\":\"user\",\"content\":\"5\"},{\"role\":\"user\","
     "\"content\":\"6\"},{\"role\":\"user\",\"content\":\"7\"},{\"role\":\"user\",\"content\":"
     "\"8\"},{\"role\":\"user\",\"content\":\"9\"},{\"role\":\"user\",\"content\":\"10\"},{"
     "\"role\":\"user\",\"content\":\"11\"},{\"role\":\"user\",\"content\":\"12\"},{\"role\":"
     "\"user\",\"content\":\"13\"},{\"role\":\"user\",\"content\":\"14\"},{\"role\":\"user\","
     "\"content\":\"15\"},{\"role\":\"user\",\"content\":\"16\"},{\"role\":\"user\","
     "\"content\":\"17\"}]}",
     413, "messages", "up to 16"},
};

static void test_refusals(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++) {
		struct oai_req r;
		struct oai_err e = {0};
		const char *b = refusals[i].body;

		if (!anth_parse(b, strlen(b), &lim, false, &r, &e))
			fail_msg("%s: taken", refusals[i].name);
		if (e.status != refusals[i].status || strcmp(e.param, refusals[i].param) ||
		    !strstr(e.message, refusals[i].words))
			fail_msg("%s: %d '%s' '%s'; want %d '%s' with '%s'", refusals[i].name,
			         e.status, e.param, e.message, refusals[i].status,
			         refusals[i].param, refusals[i].words);
		assert_null(r.json); /* freed */
	}
}

static void test_errors(void **state)
{
	static const struct {
		int status;
		const char *type;
	} rows[] = {{400, "invalid_request_error"}, {401, "authentication_error"},
	            {403, "permission_error"},      {404, "not_found_error"},
	            {413, "request_too_large"},     {429, "rate_limit_error"},
	            {503, "overloaded_error"},      {500, "api_error"}};

	(void)state;
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		struct oai_err e;
		char *s;
		json_t *j;

		oai_errf(&e, rows[i].status, "x", "c", "what \"failed\"");
		s = anth_error_json(&e);
		j = json_loads(s, 0, NULL);
		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
		assert_string_equal(
		    json_string_value(json_object_get(json_object_get(j, "error"), "type")),
		    rows[i].type);
		assert_string_equal(
		    json_string_value(json_object_get(json_object_get(j, "error"), "message")),
		    "what \"failed\"");
		json_decref(j);
		free(s);
	}
	{
		char *s = anth_count_json(42);

		assert_string_equal(s, "{\"input_tokens\":42}");
		free(s);
	}
}

/* ---- answers ------------------------------------------------------------- */

static const char model_text[] =
    "<think>\nI need the weather.\n</think>\n\nLet me look. \xc3\xa9t\xc3\xa9"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>";

static const char whole_want[] =
    "{\"id\":\"msg_ignisT\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qm\","
    "\"content\":[{\"type\":\"thinking\",\"thinking\":\"I need the weather.\",\"signature\":\"\"},"
    "{\"type\":\"text\",\"text\":\"Let me look. \\u00E9t\\u00E9\"},"
    "{\"type\":\"tool_use\",\"id\":\"toolu_ignisT_0\",\"name\":\"get_weather\","
    "\"input\":{\"city\":\"Paris\",\"days\":2}},"
    "{\"type\":\"tool_use\",\"id\":\"toolu_ignisT_1\",\"name\":\"ls\",\"input\":{}}],"
    "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,"
    "\"usage\":{\"output_tokens\":30,\"input_tokens\":70,\"cache_read_input_tokens\":30,"
    "\"cache_creation_input_tokens\":0}}";

struct buf {
	char *p;
	size_t len;
};

static bool put(void *ctx, const char *p, size_t n)
{
	struct buf *b = ctx;

	return wire_grow(&b->p, &b->len, p, n);
}

static int feed_ev(void *ctx, const struct op_ev *ev)
{
	return anth_api.ans_event(ctx, ev);
}

/* The answer to model_text, its text cut by `cuts` (piece lengths; 0 ends;
 * NULL: whole), written whole (sse NULL) or streamed into *sse. */
static char *answer(const size_t *cuts, struct buf *sse)
{
	static const struct op_tool tools[] = {{"get_weather", NULL}, {"ls", NULL}};
	struct op_opts o = {
	    .format = OP_HERMES, .calls = true, .thinking = true, .tools = tools, .n_tools = 2};
	struct oai_req q = {.kind = OAI_CHAT, .parallel_calls = true};
	struct wire_sink sink = {put, sse};
	struct oai_usage u0 = {100, 0, 30};
	struct wire_end end = {"eos", {100, 30, 30}, 0};
	struct wire_ans *a = anth_api.ans_new(&q, "chatcmpl-ignisT", "qm", 0, sse ? &sink : NULL);
	struct op op;
	size_t off = 0, n = strlen(model_text);
	char *json = NULL;

	assert_non_null(a);
	op_init(&op, &o);
	assert_int_equal(anth_api.ans_begin(a, &u0), 0);
	for (size_t i = 0; off < n; i++) {
		size_t k = cuts && cuts[i] ? cuts[i] : n - off;

		if (k > n - off)
			k = n - off;
		assert_int_equal(op_feed(&op, model_text + off, k, feed_ev, a), 0);
		off += k;
	}
	assert_int_equal(op_finish(&op, feed_ev, a), 0);
	assert_int_equal(anth_api.ans_end(a, &end), 0);
	if (!sse)
		json = anth_api.ans_json(a);
	anth_api.ans_free(a);
	op_free(&op);
	return json;
}

/* A stream assembled as a client does; its message JSON. Checks the order. */
static char *assemble(const char *sse)
{
	json_t *msg = NULL;
	const char *p = sse;
	int open = -1;
	bool stopped = false, pinged = false;

	while (*p) {
		char name[64];
		const char *nl, *data, *end;
		json_t *d;
		const char *type;

		assert_true(sscanf(p, "event: %63[a-z_]\n", name) == 1);
		nl = strchr(p, '\n');
		assert_non_null(nl);
		assert_true(!strncmp(nl + 1, "data: ", 6));
		data = nl + 7;
		end = strstr(data, "\n\n");
		assert_non_null(end);
		d = json_loadb(data, (size_t)(end - data), 0, NULL);
		assert_non_null(d);
		type = json_string_value(json_object_get(d, "type"));
		assert_string_equal(type, name);
		assert_false(stopped);
		if (!strcmp(name, "message_start")) {
			assert_null(msg);
			msg = json_deep_copy(json_object_get(d, "message"));
		} else if (!strcmp(name, "ping")) {
			pinged = true;
		} else if (!strcmp(name, "content_block_start")) {
			json_t *content = json_object_get(msg, "content");

			assert_int_equal(open, -1);
			open = (int)json_integer_value(json_object_get(d, "index"));
			assert_int_equal(open, json_array_size(content));
			json_array_append(content, json_object_get(d, "content_block"));
		} else if (!strcmp(name, "content_block_delta")) {
			json_t *b = json_array_get(json_object_get(msg, "content"), (size_t)open),
			       *delta = json_object_get(d, "delta");
			const char *dt = json_string_value(json_object_get(delta, "type"));
			const char *field = !strcmp(dt, "text_delta")       ? "text"
			                    : !strcmp(dt, "thinking_delta") ? "thinking"
			                                                    : "partial_json";
			const char *key = !strcmp(field, "partial_json") ? "\x01json" : field;
			json_t *was = json_object_get(b, key);
			char *s = NULL;
			size_t sl = 0;

			assert_int_equal(json_integer_value(json_object_get(d, "index")), open);
			assert_true(
			    !strcmp(dt, "input_json_delta")
			        ? !strcmp(json_string_value(json_object_get(b, "type")), "tool_use")
			        : !strcmp(json_string_value(json_object_get(b, "type")), field));
			if (was)
				wire_grow(&s, &sl, json_string_value(was), json_string_length(was));
			wire_grow(&s, &sl, json_string_value(json_object_get(delta, field)),
			          json_string_length(json_object_get(delta, field)));
			json_object_set_new(b, key, json_stringn(s, sl));
			free(s);
		} else if (!strcmp(name, "content_block_stop")) {
			json_t *b = json_array_get(json_object_get(msg, "content"), (size_t)open);
			json_t *pj = json_object_get(b, "\x01json");

			assert_int_equal(json_integer_value(json_object_get(d, "index")), open);
			if (pj) {
				json_object_set_new(b, "input",
				                    json_loads(json_string_value(pj), 0, NULL));
				json_object_del(b, "\x01json");
			}
			open = -1;
		} else if (!strcmp(name, "message_delta")) {
			json_t *delta = json_object_get(d, "delta");

			assert_int_equal(open, -1);
			json_object_set(msg, "stop_reason", json_object_get(delta, "stop_reason"));
			json_object_set(msg, "stop_sequence",
			                json_object_get(delta, "stop_sequence"));
			json_object_set(msg, "usage", json_object_get(d, "usage"));
		} else if (!strcmp(name, "message_stop")) {
			stopped = true;
		} else {
			fail_msg("unknown event %s", name);
		}
		json_decref(d);
		p = end + 2;
	}
	assert_true(stopped && pinged);
	return wire_dump(msg);
}

static void test_answers(void **state)
{
	const char *path = *state; /* the pinned stream (NULL: not compared) */
	char *whole = answer(NULL, NULL);
	struct buf sse = {0};
	size_t bytes[1024], random[64];
	unsigned seed = (unsigned)strtoul(getenv("IGNIS_SEED") ? getenv("IGNIS_SEED") : "1", 0, 10);
	char *got;

	{ /* the same JSON, however jansson orders keys */
		json_t *a = json_loads(whole, 0, NULL), *b = json_loads(whole_want, 0, NULL);

		if (!json_equal(a, b))
			fail_msg("whole answer:\n  got  %s\n  want %s", whole, whole_want);
		json_decref(a);
		json_decref(b);
	}
	/* streamed whole: the file the client test replays */
	answer(NULL, &sse);
	if (path && getenv("IGNIS_UPDATE_GOLDEN")) {
		FILE *f = fopen(path, "w");

		assert_non_null(f);
		fwrite(sse.p, 1, sse.len, f);
		fclose(f);
	} else if (path) {
		FILE *f = fopen(path, "r");
		char file[8192];
		size_t n;

		assert_non_null(f);
		n = fread(file, 1, sizeof file, f);
		fclose(f);
		if (n != sse.len || memcmp(file, sse.p, n))
			fail_msg("the stream differs from %s:\n%.*s", path, (int)sse.len, sse.p);
	}
	sse.len = 0; /* assembled below with the rest */
	free(sse.p);
	/* a byte at a time, and in random pieces */
	for (size_t i = 0; i < 1024; i++)
		bytes[i] = 1;
	printf("# seed %u\n", seed);
	srand(seed);
	for (int round = -1; round < 20; round++) {
		const size_t *cuts = round > 0 ? random : round ? NULL : bytes;

		for (size_t i = 0; i < 63; i++)
			random[i] = 1 + (size_t)rand() % 9;
		random[63] = 0;
		sse = (struct buf){0};
		answer(cuts, &sse);
		got = assemble(sse.p);
		{
			json_t *a = json_loads(got, 0, NULL), *b = json_loads(whole, 0, NULL);

			if (!json_equal(a, b))
				fail_msg("round %d: assembled %s\n  whole %s", round, got, whole);
			json_decref(a);
			json_decref(b);
		}
		free(got);
		free(sse.p);
	}
	free(whole);
}

/* The stop reason of each end, and stop_sequence named when one can be. */
static void test_stop_reasons(void **state)
{
	static const struct {
		const char *finish;
		size_t n_stop;
		const char *want, *seq;
	} rows[] = {
	    {"eos", 0, "end_turn", NULL},       {"length", 0, "max_tokens", NULL},
	    {"context", 0, "max_tokens", NULL}, {"stop", 1, "stop_sequence", "END"},
	    {"stop", 2, "stop_sequence", NULL}, {"stop", 0, "end_turn", NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		struct oai_req q = {
		    .kind = OAI_CHAT, .stop = {"END", "FIN"}, .n_stop = rows[i].n_stop};
		struct oai_usage u = {5, 0, 0};
		struct wire_end end = {rows[i].finish, {5, 3, 0}, 0};
		struct wire_ans *a = anth_api.ans_new(&q, "x-y", "m", 0, NULL);
		char *s;
		json_t *j;

		anth_api.ans_begin(a, &u);
		anth_api.ans_end(a, &end);
		s = anth_api.ans_json(a);
		j = json_loads(s, 0, NULL);
		assert_string_equal(json_string_value(json_object_get(j, "stop_reason")),
		                    rows[i].want);
		if (rows[i].seq)
			assert_string_equal(json_string_value(json_object_get(j, "stop_sequence")),
			                    rows[i].seq);
		else
			assert_true(json_is_null(json_object_get(j, "stop_sequence")));
		assert_int_equal(json_array_size(json_object_get(j, "content")), 0);
		json_decref(j);
		free(s);
		anth_api.ans_free(a);
	}
}

int main(int argc, char **argv)
{
	char *path = argc > 1 ? argv[1] : NULL;

	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_taken),        cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_errors),       cmocka_unit_test_prestate(test_answers, path),
	    cmocka_unit_test(test_stop_reasons),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
