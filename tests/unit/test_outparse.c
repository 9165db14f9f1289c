/*
 * test_outparse.c - supervisor/outparse.h: a model's text parsed into
 * reasoning, content and tool calls, in both Qwen formats. Every case is fed
 * whole, a byte at a time and in seeded random pieces, and must give the
 * same parse each way: the reasoning and content texts, each call's name and
 * arguments (the fragments' concatenation, which must be JSON equal to the
 * expected object), and the counts. Every event's text must be whole UTF-8
 * (jansson takes it as a JSON string), and the events of a call must come in
 * order (its name, then arguments, then its end, with one index).
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

#include "supervisor/outparse.h"

#define MAX_CALLS 8

struct got {
	char reasoning[4096], content[4096];
	size_t r_len, c_len;
	struct {
		char name[256];
		char args[4096];
		size_t args_len;
		bool ended;
	} call[MAX_CALLS];
	uint32_t n_calls, events;
	int open; /* the call between its begin and end, or -1 */
};

static void add(char *dst, size_t *len, size_t cap, const char *s, size_t n)
{
	assert_true(*len + n < cap);
	memcpy(dst + *len, s, n);
	*len += n;
	dst[*len] = '\0';
}

static int collect(void *ctx, const struct op_ev *ev)
{
	struct got *g = ctx;
	json_t *s = json_stringn(ev->text ? ev->text : "", ev->len);

	if (!s)
		fail_msg("event %u: its text is not whole UTF-8: '%.*s'", g->events, (int)ev->len,
		         ev->text);
	json_decref(s);
	g->events++;
	switch (ev->kind) {
	case OP_REASONING:
		assert_int_equal(g->open, -1);
		add(g->reasoning, &g->r_len, sizeof g->reasoning, ev->text, ev->len);
		break;
	case OP_CONTENT:
		if (g->open != -1)
			fail_msg("content '%.*s' inside call %d", (int)ev->len, ev->text, g->open);
		add(g->content, &g->c_len, sizeof g->content, ev->text, ev->len);
		break;
	case OP_CALL_BEGIN:
		assert_int_equal(g->open, -1);
		assert_int_equal(ev->index, g->n_calls);
		assert_true(g->n_calls < MAX_CALLS && ev->len < 256);
		memcpy(g->call[g->n_calls].name, ev->text, ev->len);
		g->open = (int)g->n_calls++;
		break;
	case OP_CALL_ARGS:
		assert_int_equal((int)ev->index, g->open);
		add(g->call[ev->index].args, &g->call[ev->index].args_len,
		    sizeof g->call[ev->index].args, ev->text, ev->len);
		break;
	case OP_CALL_END:
		assert_int_equal((int)ev->index, g->open);
		g->call[ev->index].ended = true;
		g->open = -1;
		break;
	}
	return 0;
}

/* Parse `text` fed in pieces: `cut` 0 whole, 1 a byte at a time, else
 * seeded random pieces of 1..cut bytes. */
static void parse(const struct op_opts *o, const char *text, unsigned cut, uint64_t seed,
                  struct got *g, uint32_t *bad)
{
	struct op p;
	size_t n = strlen(text), at = 0;

	memset(g, 0, sizeof(*g));
	g->open = -1;
	op_init(&p, o);
	while (at < n) {
		size_t k = n - at;

		if (cut == 1)
			k = 1;
		else if (cut > 1) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			k = 1 + (size_t)((seed >> 33) % cut);
			k = k > n - at ? n - at : k;
		}
		assert_int_equal(op_feed(&p, text + at, k, collect, g), 0);
		at += k;
	}
	assert_int_equal(op_finish(&p, collect, g), 0);
	assert_int_equal(g->open, -1);
	*bad = p.bad_calls;
	op_free(&p);
}

struct want_call {
	const char *name;
	const char *args; /* JSON */
};

/* The case's parse, every way of cutting it, against what is wanted. */
static void check(const struct op_opts *o, const char *text, const char *reasoning,
                  const char *content, const struct want_call *calls, uint32_t n_calls,
                  uint32_t bad)
{
	static const unsigned cuts[] = {0, 1, 2, 3, 5, 8, 13};

	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++)
		for (uint64_t seed = 1; seed <= (cuts[c] > 1 ? 6u : 1u); seed++) {
			struct got g;
			uint32_t b;

			parse(o, text, cuts[c], seed, &g, &b);
			if (strcmp(g.reasoning, reasoning) || strcmp(g.content, content))
				fail_msg(
				    "cut %u seed %u: reasoning '%s' content '%s'; want '%s' '%s'",
				    cuts[c], (unsigned)seed, g.reasoning, g.content, reasoning,
				    content);
			if (g.n_calls != n_calls || b != bad)
				fail_msg("cut %u seed %u: %u calls (%u bad), want %u (%u bad)",
				         cuts[c], (unsigned)seed, g.n_calls, b, n_calls, bad);
			for (uint32_t i = 0; i < n_calls; i++) {
				json_error_t je;
				json_t *a = json_loadb(g.call[i].args, g.call[i].args_len, 0, &je);
				json_t *w = json_loads(calls[i].args, 0, NULL);

				assert_non_null(w);
				assert_true(g.call[i].ended);
				if (strcmp(g.call[i].name, calls[i].name))
					fail_msg("call %u is '%s', want '%s'", i, g.call[i].name,
					         calls[i].name);
				if (!a)
					fail_msg(
					    "cut %u: call %u's arguments are not JSON (%s): %s",
					    cuts[c], i, je.text, g.call[i].args);
				if (!json_equal(a, w))
					fail_msg("cut %u seed %u: call %u's arguments %s, want %s",
					         cuts[c], (unsigned)seed, i, g.call[i].args,
					         calls[i].args);
				json_decref(a);
				json_decref(w);
			}
		}
}

static const struct op_opts hermes = {.format = OP_HERMES, .calls = true, .thinking = true};

static void test_plain(void **state)
{
	struct op_opts o = {.format = OP_PLAIN};

	(void)state;
	check(&o, "Hello <b>world</b>, a < b and <tool_call> too\n", "",
	      "Hello <b>world</b>, a < b and <tool_call> too\n", NULL, 0, 0);
	/* tools off: a call's text is content */
	o = hermes;
	o.calls = false;
	check(&o, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "",
	      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", NULL, 0, 0);
	/* whitespace kept where no call comes */
	check(&hermes, "  indented\n\n", "", "  indented\n\n", NULL, 0, 0);
	/* whole characters only, however cut */
	check(&hermes, "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!", "",
	      "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!", NULL, 0, 0);
}

static void test_thinking(void **state)
{
	struct op_opts o = hermes;

	(void)state;
	check(&hermes, "<think>\nI should answer.\nBriefly.\n</think>\n\nParis.",
	      "I should answer.\nBriefly.", "Paris.", NULL, 0, 0);
	/* no thinking parsed: the tags are content */
	o.thinking = false;
	check(&o, "<think>\nx\n</think>\n\ny", "", "<think>\nx\n</think>\n\ny", NULL, 0, 0);
	/* the prompt opened it (Qwen3.5's template) */
	o = hermes;
	o.think_open = true;
	check(&o, "plan\n</think>\n\nDone.", "plan", "Done.", NULL, 0, 0);
	/* cut before it ends: all reasoning */
	check(&o, "still thinking about <b>it", "still thinking about <b>it", "", NULL, 0, 0);
	/* a literal <tool_call> inside the thinking stays reasoning */
	check(&o, "I could use <tool_call> here\n</think>\nok", "I could use <tool_call> here",
	      "ok", NULL, 0, 0);
	/* a <think> later than the start is content */
	check(&hermes, "Say <think> aloud", "", "Say <think> aloud", NULL, 0, 0);
}

static void test_hermes(void **state)
{
	static const struct want_call one[] = {
	    {"get_weather", "{\"city\": \"Paris\", \"days\": 3}"}};
	static const struct want_call two[] = {{"a", "{\"x\": [1, {\"y\": \"}\"}]}"}, {"b", "{}"}};
	static const struct want_call str[] = {{"f", "{\"q\": \"a \\\"b\\\" <c>\"}"}};

	(void)state;
	check(&hermes,
	      "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
	      "\"Paris\", \"days\": 3}}\n</tool_call>",
	      "", "I'll check.", one, 1, 0);
	/* two calls, braces inside strings, a call with no arguments, thinking first */
	check(&hermes,
	      "<think>\ntwo\n</think>\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, "
	      "{\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\"}\n</tool_call>\n",
	      "two", "", two, 2, 0);
	/* arguments before the name; arguments JSON-encoded in a string */
	check(
	    &hermes,
	    "<tool_call>{\"arguments\": {\"q\": \"a \\\"b\\\" <c>\"}, \"name\": \"f\"}</tool_call>",
	    "", "", str, 1, 0);
	check(&hermes,
	      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": \\\"a \\\\\\\"b\\\\\\\" "
	      "<c>\\\"}\"}</tool_call>",
	      "", "", str, 1, 0);
	/* a literal <tool_call> in prose, and an object that is no call: content */
	check(&hermes, "Wrap calls in <tool_call> tags, like <tool_call>this</tool_call>.", "",
	      "Wrap calls in <tool_call> tags, like <tool_call>this</tool_call>.", NULL, 0, 0);
	check(&hermes, "<tool_call>\n{\"tool\": 1}\n</tool_call>", "",
	      "<tool_call>\n{\"tool\": 1}\n</tool_call>", NULL, 0, 0);
	/* the closing tag missing at the end is forgiven */
	check(&hermes,
	      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
	      "\"days\": 3}}",
	      "", "", one, 1, 0);
	/* cut inside the arguments: the call ends, counted bad */
	{
		struct got g;
		uint32_t bad;

		parse(&hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2", 0, 0,
		      &g, &bad);
		assert_int_equal(g.n_calls, 1);
		assert_int_equal(bad, 1);
		assert_string_equal(g.call[0].args, "{\"a\": [1, 2");
	}
}

static void test_xml(void **state)
{
	json_t *schema =
	    json_loads("{\"type\": \"object\", \"properties\": {"
	               "\"s\": {\"type\": \"string\"},"
	               "\"n\": {\"type\": \"integer\"},"
	               "\"r\": {\"type\": \"number\"},"
	               "\"b\": {\"type\": \"boolean\"},"
	               "\"o\": {\"type\": \"object\"},"
	               "\"a\": {\"type\": \"array\"},"
	               "\"e\": {\"enum\": [1, 2, 3]},"
	               "\"u\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]},"
	               "\"v\": {\"type\": [\"string\", \"integer\"]},"
	               "\"w\": {\"type\": \"string\", \"nullable\": true}"
	               "}}",
	               0, NULL);
	struct op_tool tools[] = {{"edit", schema}, {"ls", NULL}};
	struct op_opts o = {.format = OP_QWEN_XML,
	                    .calls = true,
	                    .thinking = true,
	                    .think_open = true,
	                    .tools = tools,
	                    .n_tools = 2};
	static const struct want_call typed[] = {
	    {"edit", "{\"s\": \"line \\\"one\\\"\\n  line <two> </para\", \"n\": 42, \"r\": 2.5, "
	             "\"b\": true, \"o\": {\"k\": [1, 2]}, \"a\": [1, \"two\"], \"e\": 2, \"u\": "
	             "null, \"x\": \"7\"}"}};
	static const struct want_call loose[] = {{"edit", "{\"n\": \"forty\", \"s\": \"42\"}"},
	                                         {"ls", "{\"path\": \"/tmp\"}"}};
	static const struct want_call inside[] = {{"ls", "{}"}};
	static const struct want_call marked[] = {
	    {"edit", "{\"o\": {\"html\": \"<p>a</parameter>b</function>\\\"</p>\", \"n\": "
	             "[\"]</parameter>\"]}, \"a\": [\"</function>\", {\"x\": \"\\\\\"}]}"}};
	static const struct want_call unclosed[] = {{"edit", "{\"o\": \"{\\\"k\\\": \\\"open\", "
	                                                     "\"n\": 3}"}};
	static const struct want_call quoted[] = {{"edit", "{\"o\": \"{\\\"k\\\": \\\"v\", "
	                                                   "\"s\": \"say \\\"hi\"}"}};
	static const struct want_call unions[] = {
	    {"edit", "{\"u\": \"  padded \\n\", \"v\": 12, \"w\": \"[1]\", \"e\": \"true\"}"}};

	(void)state;
	assert_non_null(schema);
	check(
	    &o,
	    "I will edit.\n</think>\n\nEditing now.\n<tool_call>\n<function=edit>\n<parameter=s>\n"
	    "line \"one\"\n  line <two> </para\n</parameter>\n<parameter=n>\n42\n</parameter>\n"
	    "<parameter=r>\n2.5\n</parameter>\n<parameter=b>\ntrue\n</parameter>\n<parameter=o>\n"
	    "{\"k\": [1, 2]}\n</parameter>\n<parameter=a>\n[1, \"two\"]\n</parameter>\n"
	    "<parameter=e>\n2\n</parameter>\n<parameter=u>\nnull\n</parameter>\n<parameter=x>\n7\n"
	    "</parameter>\n</function>\n</tool_call>",
	    "I will edit.", "Editing now.", typed, 1, 0);
	/* a value that is not its type's JSON is a string; a tool without a
	 * schema takes strings; a parameter left open at </function> */
	o.think_open = false;
	check(
	    &o,
	    "<tool_call>\n<function=edit>\n<parameter=n>\nforty\n</parameter>\n<parameter=s>\n42\n"
	    "</parameter>\n</function>\n</"
	    "tool_call>\n<tool_call>\n<function=ls>\n<parameter=path>\n"
	    "/tmp\n</function>\n</tool_call>",
	    "", "", loose, 2, 0);
	/* a call opened inside the thinking ends it */
	o.think_open = true;
	check(&o, "Need a listing.\n<tool_call>\n<function=ls>\n</function>\n</tool_call>",
	      "Need a listing.", "", inside, 1, 0);
	/* not a call after all: content */
	o.think_open = false;
	check(&o, "Type <tool_call> then <function=name without end", "",
	      "Type <tool_call> then <function=name without end", NULL, 0, 0);
	/* an object's or array's JSON may hold the markers inside its strings
	 * (docs/adr/0062); a string that never closes ends at the first
	 * marker after all, and what follows is read on */
	check(&o,
	      "<tool_call>\n<function=edit>\n<parameter=o>\n{\"html\": \"<p>a</parameter>b"
	      "</function>\\\"</p>\", \"n\": [\"]</parameter>\"]}\n</parameter>\n<parameter=a>\n"
	      "[\"</function>\", {\"x\": \"\\\\\"}]\n</parameter>\n</function>\n</tool_call>",
	      "", "", marked, 1, 0);
	check(&o,
	      "<tool_call>\n<function=edit>\n<parameter=o>\n{\"k\": \"open\n</parameter>\n"
	      "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
	      "", "", unclosed, 1, 0);
	check(&o,
	      "<tool_call>\n<function=edit>\n<parameter=o>\n{\"k\": \"v</parameter>\n"
	      "<parameter=s>\nsay \"hi\n</parameter>\n</function>\n</tool_call>",
	      "", "", quoted, 1, 0);
	/* a string or null: the text as it is unless it is null */
	check(&o,
	      "<tool_call>\n<function=edit>\n<parameter=u>\n  padded \n\n</parameter>\n"
	      "<parameter=v>\n 12 \n</parameter>\n<parameter=w>\n[1]\n</parameter>\n"
	      "<parameter=e>\ntrue\n</parameter>\n</function>\n</tool_call>",
	      "", "", unions, 1, 0);
	/* cut inside a value: ended with what came, counted bad */
	{
		struct got g;
		uint32_t bad;

		parse(&o, "<tool_call>\n<function=edit>\n<parameter=s>\nhalf a li", 1, 0, &g, &bad);
		assert_int_equal(g.n_calls, 1);
		assert_int_equal(bad, 1);
		assert_string_equal(g.call[0].args, "{\"s\": \"half a li\"}");
	}
	json_decref(schema);
}

static void test_format_of_template(void **state)
{
	bool thinks;

	(void)state;
	assert_int_equal(
	    op_format_of_template("{{ '<tool_call>\\n' }}{{ tool_call | tojson }}", &thinks),
	    OP_HERMES);
	assert_false(thinks);
	assert_int_equal(
	    op_format_of_template("<tool_call>\n<function=x>\n<parameter=y>\n<think>", &thinks),
	    OP_QWEN_XML);
	assert_true(thinks);
	assert_int_equal(op_format_of_template("{{ messages }}", &thinks), OP_PLAIN);
	assert_int_equal(op_format_of_template(NULL, &thinks), OP_PLAIN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_plain),
	    cmocka_unit_test(test_thinking),
	    cmocka_unit_test(test_hermes),
	    cmocka_unit_test(test_xml),
	    cmocka_unit_test(test_format_of_template),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
