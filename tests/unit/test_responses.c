/*
 * test_responses.c - supervisor/responses.h: OpenAI's Responses requests
 * read into the chat path's request (a table of bodies taken, with the
 * messages they become, and of bodies refused, with the status, field and
 * words), and its answers written from the output parser's events: a model
 * text with thinking, text and two tool calls (Hermes, as Qwen3 writes
 * them) fed whole, a byte at a time and in seeded random pieces. Streamed,
 * the events must be numbered in order, each item added before its deltas
 * and done after them, and assemble (as the `openai` client does) into the
 * whole answer's output; the closing event carries the whole answer. The
 * stream of the text fed whole is compared with resp-tool.sse byte for
 * byte, the file responses.sh replays through OpenAI's own client (rewrite
 * it with IGNIS_UPDATE_GOLDEN=1 when the shape changes on purpose).
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

#include "supervisor/responses.h"

static const struct oai_limits lim = {
    .max_body = 1 << 20,
    .max_tokens = 4096,
    .vocab = 1000,
    .max_prompt_ids = 4096,
    .max_text = 1 << 16,
    .max_messages = 16,
};

static void take(const char *body, struct oai_req *r)
{
	struct oai_err e = {0};

	if (resp_parse(body, strlen(body), &lim, false, r, &e))
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

	(void)state;
	take("{\"model\":\"m\",\"input\":\"hi\"}", &r);
	assert_string_equal(r.model, "m");
	assert_int_equal(r.max_tokens, 0);
	assert_int_equal(r.n_messages, 1);
	expect_msg(&r, 0, "user", "hi");
	assert_true(r.parallel_calls && !r.stream && !r.thinking_set);
	oai_req_free(&r);

	/* the neutral and ignored fields; store true accepted */
	take("{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"be brief\",\"store\":true,"
	     "\"max_output_tokens\":9,\"temperature\":1.5,\"top_p\":0.5,\"stream\":true,"
	     "\"metadata\":{\"a\":\"b\"},\"user\":\"u\",\"include\":[\"reasoning.encrypted_"
	     "content\"],"
	     "\"reasoning\":{\"effort\":\"none\",\"summary\":\"auto\"},\"text\":{\"format\":{"
	     "\"type\":"
	     "\"text\"},\"verbosity\":\"low\"},\"truncation\":\"disabled\",\"service_tier\":"
	     "\"auto\","
	     "\"prompt_cache_key\":\"k\",\"safety_identifier\":\"s\",\"previous_response_id\":null,"
	     "\"background\":false,\"top_logprobs\":0,\"parallel_tool_calls\":false,"
	     "\"stream_options\":{\"include_obfuscation\":false},\"ignis\":{\"seed\":4}}",
	     &r);
	assert_int_equal(r.n_messages, 2);
	expect_msg(&r, 0, "system", "be brief");
	expect_msg(&r, 1, "user", "hi");
	assert_int_equal(r.max_tokens, 9);
	assert_true(r.temperature == 1.5 && r.top_p == 0.5 && r.stream);
	assert_true(r.thinking_set && !r.thinking);
	assert_false(r.parallel_calls);
	assert_true(r.seed_set && r.seed == 4);
	oai_req_free(&r);

	/* a tool round trip as Codex sends it: reasoning, an assistant
	 * message and calls make one assistant turn; each output a tool
	 * message; developer is system */
	take("{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"name\":\"ls\",\"description\":"
	     "\"list\",\"parameters\":{\"type\":\"object\",\"properties\":{}},\"strict\":false}],"
	     "\"tool_choice\":\"auto\",\"input\":["
	     "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\","
	     "\"text\":\"rules\"}]},"
	     "{\"role\":\"user\",\"content\":\"go\"},"
	     "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\","
	     "\"text\":\"a\"},{\"type\":\"summary_text\",\"text\":\"b\"}]},"
	     "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
	     "\"text\":\"ok\"}]},"
	     "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"ls\",\"arguments\":"
	     "\"{\\\"p\\\":1}\"},"
	     "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"ls\",\"arguments\":\"{}\"},"
	     "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"x\"},"
	     "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":"
	     "\"input_text\",\"text\":\"y\"}]},"
	     "{\"type\":\"reasoning\",\"id\":\"rs_2\",\"summary\":[],\"content\":[{\"type\":"
	     "\"reasoning_text\",\"text\":\"hm\"}]},"
	     "{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":\"ls\",\"arguments\":\"{}\"}]"
	     "}",
	     &r);
	assert_int_equal(r.n_tools, 1);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get((json_t *)r.tools[0].obj, "function"),
	                                      "description")),
	    "list");
	assert_int_equal(r.n_messages, 6);
	expect_msg(&r, 0, "system", "rules");
	expect_msg(&r, 1, "user", "go");
	expect_msg(&r, 2, "assistant", "ok");
	assert_int_equal(r.messages[2].reasoning_len, 4);
	assert_memory_equal(r.messages[2].reasoning, "a\n\nb", 4);
	assert_int_equal(r.messages[2].n_calls, 2);
	assert_string_equal(r.messages[2].calls[0].id, "c1");
	assert_string_equal(r.messages[2].calls[0].args, "{\"p\":1}");
	expect_msg(&r, 3, "tool", "x");
	assert_string_equal(r.messages[3].tool_call_id, "c1");
	expect_msg(&r, 4, "tool", "y");
	expect_msg(&r, 5, "assistant", "");
	assert_memory_equal(r.messages[5].reasoning, "hm", 2);
	assert_int_equal(r.messages[5].n_calls, 1);
	oai_req_free(&r);
}

static const struct {
	const char *name, *body;
	int status;
	const char *param, *words;
} refusals[] = {
    {"not json", "[1]", 400, "", "not a JSON object"},
    {"previous_response_id",
     "{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", 400,
     "previous_response_id", "keeps no responses"},
    {"conversation", "{\"model\":\"m\",\"input\":\"x\",\"conversation\":\"c\"}", 400,
     "conversation", "keeps no conversations"},
    {"background", "{\"model\":\"m\",\"input\":\"x\",\"background\":true}", 400, "background",
     "accepted: false"},
    {"store a string", "{\"model\":\"m\",\"input\":\"x\",\"store\":\"yes\"}", 400, "store",
     "a boolean"},
    {"unknown field", "{\"model\":\"m\",\"input\":\"x\",\"messages\":[]}", 400, "messages",
     "'messages' is not one of"},
    {"no model", "{\"input\":\"x\"}", 400, "model", "model is missing"},
    {"no input", "{\"model\":\"m\"}", 400, "input", "input is missing"},
    {"empty input", "{\"model\":\"m\",\"input\":[]}", 400, "input", "input is empty"},
    {"max_output_tokens", "{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}", 400,
     "max_output_tokens", "1 to 4096"},
    {"temperature", "{\"model\":\"m\",\"input\":\"x\",\"temperature\":3}", 400, "temperature",
     "0 to 2"},
    {"required", "{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":\"required\"}", 400,
     "tool_choice", "'tools' holds none"},
    {"named",
     "{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"b\"}],"
     "\"tool_choice\":{\"type\":\"function\",\"name\":\"a\"}}",
     400, "tool_choice", "'tools' does not hold"},
    {"hosted tool", "{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", 400,
     "tools", "'web_search'"},
    {"bad tool name",
     "{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}", 400,
     "tools", "1 to 64"},
    {"json schema output without its schema",
     "{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", 400,
     "text", "takes {\"name\": string, \"schema\": object"},
    {"an unknown format",
     "{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", 400, "text",
     "accepted: \"text\", \"json_object\""},
    {"truncation auto", "{\"model\":\"m\",\"input\":\"x\",\"truncation\":\"auto\"}", 400,
     "truncation", "does not drop input"},
    {"image",
     "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
     400, "input[0].content", "'input_image' part"},
    {"bad role", "{\"model\":\"m\",\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400,
     "input[0]", "input[0].role is 'tool'"},
    {"output of no call",
     "{\"model\":\"m\",\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c9\","
     "\"output\":\"x\"}]}",
     400, "input[0]", "'c9' answers no earlier function_call"},
    {"arguments not json",
     "{\"model\":\"m\",\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"a\","
     "\"arguments\":\"{nope\"}]}",
     400, "input[0]", "not the JSON text of an object"},
    {"item_reference", "{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}",
     400, "input[0]", "keeps no items"},
    {"unknown item", "{\"model\":\"m\",\"input\":[{\"type\":\"computer_call\"}]}", 400, "input[0]",
     "'computer_call'"},
};

static void test_refusals(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++) {
		struct oai_req r;
		struct oai_err e = {0};
		const char *b = refusals[i].body;

		if (!resp_parse(b, strlen(b), &lim, false, &r, &e))
			fail_msg("%s: taken", refusals[i].name);
		if (e.status != refusals[i].status || strcmp(e.param, refusals[i].param) ||
		    !strstr(e.message, refusals[i].words))
			fail_msg("%s: %d '%s' '%s'; want %d '%s' with '%s'", refusals[i].name,
			         e.status, e.param, e.message, refusals[i].status,
			         refusals[i].param, refusals[i].words);
		assert_null(r.json);
	}
}

/* ---- answers ------------------------------------------------------------- */

static const char model_text[] =
    "<think>\nI need the weather.\n</think>\n\nLet me look. \xc3\xa9t\xc3\xa9"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>";

static const char output_want[] =
    "[{\"type\":\"reasoning\",\"id\":\"rs_ignisT_0\",\"summary\":[],\"content\":[{\"type\":"
    "\"reasoning_text\",\"text\":\"I need the weather.\"}]},"
    "{\"type\":\"message\",\"id\":\"msg_ignisT_1\",\"status\":\"completed\",\"role\":"
    "\"assistant\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"text\":"
    "\"Let me look. \\u00e9t\\u00e9\",\"logprobs\":[]}]},"
    "{\"type\":\"function_call\",\"id\":\"fc_ignisT_0\",\"call_id\":\"call_ignisT_0\",\"name\":"
    "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}\","
    "\"status\":\"completed\"},"
    "{\"type\":\"function_call\",\"id\":\"fc_ignisT_1\",\"call_id\":\"call_ignisT_1\",\"name\":"
    "\"ls\",\"arguments\":\"{}\",\"status\":\"completed\"}]";

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
	return resp_api.ans_event(ctx, ev);
}

static char *answer(const size_t *cuts, struct buf *sse, const char *finish)
{
	static const struct op_tool tools[] = {{"get_weather", NULL}, {"ls", NULL}};
	struct op_opts o = {
	    .format = OP_HERMES, .calls = true, .thinking = true, .tools = tools, .n_tools = 2};
	struct oai_req q = {.kind = OAI_CHAT, .parallel_calls = true, .temperature = 1, .top_p = 1};
	struct wire_sink sink = {put, sse};
	struct oai_usage u0 = {100, 0, 30};
	struct wire_end end = {finish, {100, 30, 30}, 0};
	struct wire_ans *a = resp_api.ans_new(&q, "chatcmpl-ignisT", "qm", 7, sse ? &sink : NULL);
	struct op op;
	size_t off = 0, n = strlen(model_text);
	char *json = NULL;

	assert_non_null(a);
	op_init(&op, &o);
	assert_int_equal(resp_api.ans_begin(a, &u0), 0);
	for (size_t i = 0; off < n; i++) {
		size_t k = cuts && cuts[i] ? cuts[i] : n - off;

		if (k > n - off)
			k = n - off;
		assert_int_equal(op_feed(&op, model_text + off, k, feed_ev, a), 0);
		off += k;
	}
	assert_int_equal(op_finish(&op, feed_ev, a), 0);
	assert_int_equal(resp_api.ans_end(a, &end), 0);
	if (!sse)
		json = resp_api.ans_json(a);
	resp_api.ans_free(a);
	op_free(&op);
	return json;
}

/* The events assembled as the openai client's stream helper does; returns
 * the output (and *final, the closing event's response). */
static json_t *assemble(const char *sse, json_t **final)
{
	json_t *snap = NULL;
	const char *p = sse;
	json_int_t seq = 0;
	bool ended = false;

	while (*p) {
		char name[96];
		const char *nl, *data, *end;
		json_t *d, *out;
		const char *type;

		assert_true(sscanf(p, "event: %95[a-z_.]\n", name) == 1);
		nl = strchr(p, '\n');
		assert_true(!strncmp(nl + 1, "data: ", 6));
		data = nl + 7;
		end = strstr(data, "\n\n");
		assert_non_null(end);
		d = json_loadb(data, (size_t)(end - data), 0, NULL);
		assert_non_null(d);
		type = json_string_value(json_object_get(d, "type"));
		assert_string_equal(type, name);
		assert_int_equal(json_integer_value(json_object_get(d, "sequence_number")), seq++);
		assert_false(ended);
		out = snap ? json_object_get(snap, "output") : NULL;
		if (!strcmp(name, "response.created")) {
			assert_null(snap);
			snap = json_deep_copy(json_object_get(d, "response"));
			assert_string_equal(json_string_value(json_object_get(snap, "status")),
			                    "in_progress");
		} else if (!strcmp(name, "response.output_item.added")) {
			assert_int_equal(json_integer_value(json_object_get(d, "output_index")),
			                 json_array_size(out));
			json_array_append(out, json_object_get(d, "item"));
		} else if (!strcmp(name, "response.content_part.added")) {
			json_t *it = json_array_get(
			    out, (size_t)json_integer_value(json_object_get(d, "output_index")));

			json_array_append(json_object_get(it, "content"),
			                  json_object_get(d, "part"));
		} else if (!strcmp(name, "response.output_text.delta") ||
		           !strcmp(name, "response.reasoning_text.delta") ||
		           !strcmp(name, "response.function_call_arguments.delta")) {
			json_t *it = json_array_get(
			    out, (size_t)json_integer_value(json_object_get(d, "output_index")));
			json_t *dst = strstr(name, "arguments")
			                  ? it
			                  : json_array_get(json_object_get(it, "content"), 0);
			const char *key = strstr(name, "arguments") ? "arguments" : "text";
			char *s = NULL;
			size_t sl = 0;

			assert_non_null(dst);
			assert_string_equal(json_string_value(json_object_get(it, "id")),
			                    json_string_value(json_object_get(d, "item_id")));
			wire_grow(&s, &sl, json_string_value(json_object_get(dst, key)),
			          json_string_length(json_object_get(dst, key)));
			wire_grow(&s, &sl, json_string_value(json_object_get(d, "delta")),
			          json_string_length(json_object_get(d, "delta")));
			json_object_set_new(dst, key, json_stringn(s, sl));
			free(s);
		} else if (!strcmp(name, "response.output_item.done")) {
			/* the item as done: what the deltas built, status completed */
			json_t *it = json_array_get(
			    out, (size_t)json_integer_value(json_object_get(d, "output_index")));
			json_t *done = json_object_get(d, "item");

			if (json_object_get(it, "status"))
				json_object_set_new(it, "status", json_string("completed"));
			assert_true(json_equal(it, done));
		} else if (!strcmp(name, "response.completed") ||
		           !strcmp(name, "response.incomplete")) {
			*final = json_incref(json_object_get(d, "response"));
			ended = true;
		} else if (strcmp(name, "response.in_progress") &&
		           strcmp(name, "response.output_text.done") &&
		           strcmp(name, "response.reasoning_text.done") &&
		           strcmp(name, "response.function_call_arguments.done") &&
		           strcmp(name, "response.content_part.done")) {
			fail_msg("unknown event %s", name);
		}
		json_decref(d);
		p = end + 2;
	}
	assert_true(ended);
	{
		json_t *o = json_incref(json_object_get(snap, "output"));

		json_decref(snap);
		return o;
	}
}

static void test_answers(void **state)
{
	const char *path = *state; /* the pinned stream (NULL: not compared) */
	char *whole = answer(NULL, NULL, "eos");
	json_t *w = json_loads(whole, 0, NULL), *want = json_loads(output_want, 0, NULL);
	size_t bytes[1024], random[64];
	unsigned seed = (unsigned)strtoul(getenv("IGNIS_SEED") ? getenv("IGNIS_SEED") : "1", 0, 10);

	assert_non_null(w);
	if (!json_equal(json_object_get(w, "output"), want))
		fail_msg("whole output:\n  got  %s\n  want %s", whole, output_want);
	assert_string_equal(json_string_value(json_object_get(w, "status")), "completed");
	assert_string_equal(json_string_value(json_object_get(w, "id")), "resp_ignisT");
	assert_false(json_is_true(json_object_get(w, "store")));
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(w, "usage"), "total_tokens")), 130);
	for (size_t i = 0; i < 1024; i++)
		bytes[i] = 1;
	printf("# seed %u\n", seed);
	srand(seed);
	for (int round = -1; round < 20; round++) {
		const size_t *cuts = round > 0 ? random : round ? NULL : bytes;
		struct buf sse = {0};
		json_t *final = NULL, *out;

		for (size_t i = 0; i < 63; i++)
			random[i] = 1 + (size_t)rand() % 9;
		random[63] = 0;
		answer(cuts, &sse, "eos");
		if (round == -1 && path && getenv("IGNIS_UPDATE_GOLDEN")) {
			FILE *f = fopen(path, "w");

			assert_non_null(f);
			fwrite(sse.p, 1, sse.len, f);
			fclose(f);
		} else if (round == -1 && path) {
			FILE *f = fopen(path, "r");
			static char file[32768];
			size_t n;

			assert_non_null(f);
			n = fread(file, 1, sizeof file, f);
			fclose(f);
			if (n != sse.len || memcmp(file, sse.p, n))
				fail_msg("the stream differs from %s:\n%.*s", path, (int)sse.len,
				         sse.p);
		}
		out = assemble(sse.p, &final);
		if (!json_equal(out, want))
			fail_msg("round %d: assembled output differs", round);
		if (!json_equal(final, w))
			fail_msg("round %d: the closing event's response is not the whole answer",
			         round);
		json_decref(out);
		json_decref(final);
		free(sse.p);
	}
	json_decref(w);
	json_decref(want);
	free(whole);

	/* at the cap: incomplete, and its event */
	{
		struct buf sse = {0};
		json_t *final = NULL, *out;
		char *s = answer(NULL, NULL, "length");

		w = json_loads(s, 0, NULL);
		assert_string_equal(json_string_value(json_object_get(w, "status")), "incomplete");
		assert_string_equal(json_string_value(json_object_get(
		                        json_object_get(w, "incomplete_details"), "reason")),
		                    "max_output_tokens");
		answer(NULL, &sse, "length");
		assert_non_null(strstr(sse.p, "event: response.incomplete\n"));
		out = assemble(sse.p, &final);
		assert_true(json_equal(final, w));
		json_decref(out);
		json_decref(final);
		json_decref(w);
		free(s);
		free(sse.p);
	}
}

int main(int argc, char **argv)
{
	char *path = argc > 1 ? argv[1] : NULL;

	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_taken),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test_prestate(test_answers, path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
