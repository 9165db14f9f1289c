/*
 * test_gramcache.c - the worker's compiled grammars kept by their text
 * (gpu-worker/engine/gramcache.h): the same text and kind is compiled
 * once and found after; a grammar in use is never let go; idle ones past
 * GCACHE_IDLE_MAX go, the least recently used first; a text that does not
 * compile is refused with the compiler's words and kept nowhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpu-worker/engine/gramcache.h"

static struct grammar *get(struct gcache *c, enum gcache_kind k, const char *text)
{
	struct ig_errbuf eb = {0};
	struct grammar *g;

	if (gcache_get(c, k, text, strlen(text), &g, &eb))
		fail_msg("gcache_get %s: %s", text, eb.msg);
	return g;
}

static void test_kept_by_text(void **state)
{
	struct gcache *c;
	struct gcache_stats st;
	struct ig_errbuf eb = {0};
	struct grammar *a, *b, *s, *bad = NULL, *held;
	char text[64];

	(void)state;
	assert_int_equal(gcache_create(&c, &eb), IG_E_OK);
	a = get(c, GCACHE_GBNF, "root ::= \"yes\" | \"no\"");
	b = get(c, GCACHE_GBNF, "root ::= \"yes\" | \"no\"");
	assert_ptr_equal(a, b);
	s = get(c, GCACHE_SCHEMA, "{\"type\":\"boolean\"}");
	assert_ptr_not_equal(s, a);
	gcache_stats(c, &st);
	assert_int_equal(st.compiled, 2);
	assert_int_equal(st.found, 1);
	assert_int_equal(st.in_use, 2);
	/* refusals name the place, and keep nothing */
	assert_int_equal(gcache_get(c, GCACHE_GBNF, "root ::= x", 10, &bad, &eb), IG_E_INVAL);
	assert_null(bad);
	assert_non_null(strstr(eb.msg, "'x'"));
	assert_int_equal(gcache_get(c, GCACHE_SCHEMA, "{\"format\":1}", 12, &bad, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "'format' is not supported"));
	assert_int_equal(gcache_get(c, GCACHE_SCHEMA, "{", 1, &bad, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "not JSON"));
	gcache_stats(c, &st);
	assert_int_equal(st.kept, 2);
	/* `a` held twice: never let go while used, however many idle ones come */
	gcache_put(c, b);
	gcache_put(c, s);
	for (int i = 0; i < 3 * (int)GCACHE_IDLE_MAX; i++) {
		snprintf(text, sizeof text, "root ::= \"w%d\"", i);
		gcache_put(c, get(c, GCACHE_GBNF, text));
	}
	gcache_stats(c, &st);
	assert_int_equal(st.in_use, 1);
	assert_int_equal(st.kept, GCACHE_IDLE_MAX + 1);
	held = get(c, GCACHE_GBNF, "root ::= \"yes\" | \"no\"");
	assert_ptr_equal(held, a);
	/* the most recent idle ones stayed, the oldest went */
	snprintf(text, sizeof text, "root ::= \"w%d\"", 3 * (int)GCACHE_IDLE_MAX - 1);
	gcache_put(c, get(c, GCACHE_GBNF, text));
	gcache_stats(c, &st);
	assert_int_equal(st.found, 3);
	gcache_put(c, get(c, GCACHE_GBNF, "root ::= \"w0\""));
	gcache_stats(c, &st);
	assert_int_equal(st.compiled, 2 + 3 * GCACHE_IDLE_MAX + 1);
	gcache_put(c, a);
	gcache_put(c, held);
	gcache_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_kept_by_text)};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
