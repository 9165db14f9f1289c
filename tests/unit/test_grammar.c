/*
 * test_grammar.c - the grammar engine (grammar/grammar.h, json_schema.h).
 *
 *   - the text form's refusals as rows: each names its line and column
 *     and what was expected; left recursion and undefined rules refused;
 *   - matcher rows: a grammar, an input, accepted or not (and where not,
 *     the state unchanged), complete or not;
 *   - the mask against a brute-force oracle: on a synthetic vocabulary of
 *     a few thousand random byte strings (single bytes, UTF-8 pieces whole
 *     and cut, whitespace runs, pieces across JSON tokens like "\":\"" and
 *     "},{"), at random reachable states of several grammars, each
 *     token's bit equals "a copy of the matcher accepts all its bytes",
 *     both from a fresh walk and from the cache; specials never set;
 *   - save and load: round trips continue as the original, damaged and
 *     foreign states refused;
 *   - lazy activation: free before the trigger, constrained after, the
 *     token that completes the trigger checked, its mask against the same
 *     oracle;
 *   - JSON Schema: a corpus of schemas, documents that must be accepted
 *     (and be complete) and ones that must be refused; refusals of
 *     unsupported keywords name the place and the keyword.
 *
 * Random draws come from IGNIS_TEST_SEED (printed; default 52).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

static uint64_t seed = 52;

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static struct grammar *parse_ok(const char *text)
{
	struct ig_errbuf eb = {0};
	struct grammar *g = NULL;
	int rc = grammar_parse(text, strlen(text), "root", &g, &eb);

	if (rc)
		fail_msg("grammar refused: %s\n%s", eb.msg, text);
	return g;
}

/* ---- the text form's refusals -------------------------------------------------------- */

struct parse_row {
	const char *text;
	const char *say; /* in the message */
};

static const struct parse_row parse_rows[] = {
    {"# a comment\nroot = \"a\"", "line 2 column 6: expected '::=' after rule name 'root'"},
    {"root ::= \"a\"\nitem = \"b\"", "line 2 column 6: expected an item"},
    {"root ::= \"abc", "line 1 column 10: this literal has no closing '\"'"},
    {"root ::= [a-z", "line 1 column 10: this class has no closing ']'"},
    {"root ::= ( \"a\" | \"b\" ", "expected ')' to close the group opened at line 1 column 10"},
    {"root ::= \"a\" )", "line 1 column 14: a ')' with no group open"},
    {"root ::= other", "line 1 column 10: rule 'other' is used but never defined"},
    {"root ::= \"a\"\nroot ::= \"b\"", "line 2 column 1: rule 'root' is defined twice"},
    {"root ::= \"a\"{3,1}", "the upper bound is below the lower"},
    {"root ::= \"a\"{2", "expected '}' to close the repetition"},
    {"root ::= \"\\q\"", "line 1 column 11: unknown escape '\\q'"},
    {"root ::= [z-a]", "a range from U+007A down to U+0061"},
    {"root ::= \"\"*", "nothing to repeat"},
    {"root ::= @", "line 1 column 10: expected an item"},
    {"::= \"a\"", "line 1 column 1: expected a rule name"},
    {"root ::= root \"a\" | \"b\"", "left recursion: rule 'root' can reach itself"},
    {"root ::= a\na ::= b? root \"x\"\nb ::= \"y\"", "left recursion"},
    {"root ::= (\"a\"?)*", "left recursion"},
    {"start ::= \"a\"", "no rule 'root' to start from"},
    {"root ::= %[\\x00-\\u0100]", "a byte class holds bytes"},
    {"root ::= \"a\"{1,99999}", "a repetition bound past 10000"},
};

static void test_parse_errors(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(parse_rows) / sizeof(parse_rows[0]); i++) {
		const struct parse_row *r = &parse_rows[i];
		struct ig_errbuf eb = {0};
		struct grammar *g = NULL;
		int rc = grammar_parse(r->text, strlen(r->text), "root", &g, &eb);

		if (rc != IG_E_INVAL || g || !strstr(eb.msg, r->say))
			fail_msg("row %zu: rc %d, message \"%s\", wanted \"%s\"", i, rc, eb.msg,
			         r->say);
	}
}

/* ---- the matcher ------------------------------------------------------------------------ */

struct match_row {
	const char *grammar;
	const char *input;
	bool accept, complete;
};

#define ARITH                                                                                      \
	"root ::= expr\n"                                                                          \
	"expr ::= term ( [-+] term )*\n"                                                           \
	"term ::= factor ( [*/] factor )*\n"                                                       \
	"factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n"

static const struct match_row match_rows[] = {
    {"root ::= \"a\" [0-9]+ | other\nother ::= \"x\"", "a123", true, true},
    {"root ::= \"a\" [0-9]+ | other\nother ::= \"x\"", "a", true, false},
    {"root ::= \"a\" [0-9]+ | other\nother ::= \"x\"", "x", true, true},
    {"root ::= \"a\" [0-9]+ | other\nother ::= \"x\"", "ax", false, false},
    {"root ::= \"a\" [0-9]+ | other\nother ::= \"x\"", "xx", false, false},
    {ARITH, "1+2*(3-4)", true, true},
    {ARITH, "1+2*(3-4", true, false},
    {ARITH, "1+*2", false, false},
    {ARITH, "--(((7)))", true, true},
    {"root ::= \"ab\"{2,3}", "abab", true, true},
    {"root ::= \"ab\"{2,3}", "ababab", true, true},
    {"root ::= \"ab\"{2,3}", "abababab", false, false},
    {"root ::= \"ab\"{2,3}", "ab", true, false},
    {"root ::= \"a\"{2,} \"b\"", "aaaaab", true, true},
    {"root ::= \"a\"{2,} \"b\"", "ab", false, false},
    {"root ::= \"a\"? \"b\"", "b", true, true},
    {"root ::= \"a\"? \"b\"", "aab", false, false},
    {"root ::= [^a-z]+", "ABC\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", true, true},
    {"root ::= [^a-z]+", "ABc", false, false},
    {"root ::= [^a-z]+", "\xc3", true, false},          /* a cut character: not yet whole */
    {"root ::= [^a-z]+", "\xc3\x28", false, false},     /* not a continuation byte */
    {"root ::= [^a-z]+", "\xed\xa0\x80", false, false}, /* a surrogate: never UTF-8 */
    {"root ::= [^a-z]+", "\xc0\xaf", false, false},     /* overlong */
    {"root ::= [\\u00e9-\\u4e2d]", "\xe4\xb8\xad", true, true},
    {"root ::= [\\u00e9-\\u4e2d]", "\xe4\xb8\xae", false, false},
    {"root ::= [\\u00e9-\\u4e2d]", "\xc3\xa8", false, false},
    {"root ::= .", "\xf4\x8f\xbf\xbf", true, true},
    {"root ::= .", "\xf4\x90\x80\x80", false, false},
    {"root ::= %[\\x80-\\xff]+", "\xff\x80", true, true},
    {"root ::= %[^\\x00-\\x7f]", "a", false, false},
    {"root ::= \"caf\\u00e9\" # a comment\n", "caf\xc3\xa9", true, true},
    {"root ::= \"\"", "", true, true},
    {"root ::= \"\"", "a", false, true},
    {"root ::= a\na ::= \"x\" a | \"y\"", "xxxxxxxxxxy", true, true},
    /* ambiguous: both alternatives live until the end */
    {"root ::= \"a\"* \"a\" | \"a\" \"b\"*", "aaa", true, true},
};

static void test_match_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(match_rows) / sizeof(match_rows[0]); i++) {
		const struct match_row *r = &match_rows[i];
		struct grammar *g = parse_ok(r->grammar);
		struct gmatch m, before;
		size_t n = strlen(r->input);
		bool ok;

		assert_int_equal(gm_init(&m, g, NULL), 0);
		memset(&before, 0, sizeof(before));
		assert_int_equal(gm_copy(&before, &m, NULL), 0);
		ok = gm_accept_bytes(&m, r->input, n);
		if (ok != r->accept)
			fail_msg("row %zu: \"%s\" %s", i, r->input, ok ? "accepted" : "refused");
		if (!ok) {
			/* refused: the state is as before */
			assert_int_equal(m.nw, before.nw);
			assert_memory_equal(m.w, before.w, m.nw * 4);
		} else if (gm_can_end(&m) != r->complete) {
			fail_msg("row %zu: \"%s\" complete %d", i, r->input, gm_can_end(&m));
		}
		/* byte by byte agrees with all at once */
		if (r->accept) {
			struct gmatch b;

			assert_int_equal(gm_init(&b, g, NULL), 0);
			for (size_t k = 0; k < n; k++)
				assert_true(gm_accept_bytes(&b, r->input + k, 1));
			assert_int_equal(b.nw, m.nw);
			assert_memory_equal(b.w, m.w, m.nw * 4);
			gm_release(&b);
		}
		gm_release(&m);
		gm_release(&before);
		grammar_destroy(g);
	}
}

/* A repetition that costs no stack: a million bytes through X* stay at
 * one frame. */
static void test_star_is_flat(void **state)
{
	struct grammar *g = parse_ok("root ::= \"[\" [a-z]* \"]\"");
	struct gmatch m;

	(void)state;
	assert_int_equal(gm_init(&m, g, NULL), 0);
	assert_true(gm_accept_bytes(&m, "[", 1));
	for (int i = 0; i < 100000; i++)
		assert_true(gm_accept_bytes(&m, "q", 1));
	assert_true(m.nw < 8);
	assert_true(gm_accept_bytes(&m, "]", 1));
	assert_true(gm_can_end(&m));
	gm_release(&m);
	grammar_destroy(g);
}

/* Nesting past the bound is refused with IG_E_NOSPACE, not memory. */
static void test_depth_bound(void **state)
{
	struct grammar *g = parse_ok("root ::= \"(\" root \")\" | \"x\"");
	struct gmatch m;
	bool ok = true;
	int i;

	(void)state;
	assert_int_equal(gm_init(&m, g, NULL), 0);
	for (i = 0; i < 5000 && ok; i++)
		ok = gm_accept_bytes(&m, "(", 1);
	assert_false(ok);
	assert_true(i > 500);
	assert_int_equal(gm_error(&m), IG_E_NOSPACE);
	assert_false(gm_accept_bytes(&m, "x", 1));
	gm_release(&m);
	grammar_destroy(g);
}

/* An ambiguous grammar whose stacks multiply: capped with an error. */
static void test_stack_bound(void **state)
{
	struct grammar *g =
	    parse_ok("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\" y\n"
	             "y ::= \"a\"? \"a\"? \"a\"?");
	struct gmatch m;
	bool ok = true;

	(void)state;
	assert_int_equal(gm_init(&m, g, NULL), 0);
	for (int i = 0; i < 2000 && ok; i++)
		ok = gm_accept_bytes(&m, "a", 1);
	/* either the set stays small (deduplicated) or the bound says so */
	if (!ok)
		assert_int_equal(gm_error(&m), IG_E_NOSPACE);
	else
		assert_true(m.nstk <= GM_MAX_STACKS);
	gm_release(&m);
	grammar_destroy(g);
}

/* ---- the vocabulary and the mask against the oracle ------------------------------------ */

struct vocab {
	uint32_t n;
	struct gv_token *t;
	uint8_t *store;
	struct gvocab *gv;
};

static const char *const pieces[] = {
    "\":\"",
    "\"},{\"",
    "{\"",
    "\":",
    "\",",
    "\"}",
    "},",
    "[{",
    "]}",
    "\\n",
    "\\u00",
    "\\\"",
    "true",
    "false",
    "null",
    "123",
    "0.",
    "e+",
    "-1",
    "\": ",
    ", \"",
    "{\n",
    "\n  ",
    "  ",
    "    ",
    "\n",
    "\n\n",
    " ",
    "\t",
    "\xc3\xa9",
    "\xe4\xb8\xad\xe6\x96\x87",
    "\xe4\xb8",
    "\xad",
    "\xf0\x9f\x98",
    "\x80",
    "caf\xc3\xa9",
    "\"name\"",
    "\"age\":",
    "[]",
    "{}",
    "\"\"",
    "}]}",
    "\"]",
    "0",
    "1.5e-3",
    "<tool_call>",
    "<tool",
    "_call>",
    "\n<tool_call>\n{\"",
    "\"a\"",
    "\"b\":",
    "\"tags\":[\"",
    "\"x\"}",
    ")",
    "(",
    "+",
    "*",
    "(1",
    "2)",
    "ab",
};

static void vocab_make(struct vocab *v, uint64_t *rs, uint32_t n_random)
{
	static const char alpha[] = "{}[]\":,  \n\t0123456789.-+eEabcnrstuflxyz\\/()*<>_";
	uint32_t np = sizeof(pieces) / sizeof(pieces[0]);
	size_t off = 0;
	struct ig_errbuf eb = {0};

	v->n = 256 + np + n_random + 4;
	v->t = calloc(v->n, sizeof(*v->t));
	v->store = malloc((size_t)v->n * 16);
	assert_non_null(v->t);
	assert_non_null(v->store);
	for (uint32_t i = 0; i < v->n; i++) {
		uint8_t *b = v->store + off;
		uint32_t len;

		if (i < 256) {
			b[0] = (uint8_t)i;
			len = 1;
		} else if (i < 256 + np) {
			len = (uint32_t)strlen(pieces[i - 256]);
			memcpy(b, pieces[i - 256], len);
		} else if (i < 256 + np + n_random) {
			len = 2 + (uint32_t)(rnd(rs) % 7);
			for (uint32_t k = 0; k < len; k++) {
				uint64_t x = rnd(rs) % 100;

				/* mostly JSON's alphabet, some UTF-8 lead and
				 * continuation bytes, some anything */
				b[k] = x < 85   ? (uint8_t)alpha[rnd(rs) % (sizeof(alpha) - 1)]
				       : x < 92 ? (uint8_t)(0xC3 + rnd(rs) % 0x2D)
				       : x < 97 ? (uint8_t)(0x80 + rnd(rs) % 0x40)
				                : (uint8_t)rnd(rs);
			}
		} else {
			/* specials: bytes a grammar would accept, never allowed */
			len = 1;
			b[0] = (uint8_t) "a{1\""[i - (256 + np + n_random)];
			v->t[i].special = true;
		}
		v->t[i].bytes = b;
		v->t[i].len = len;
		off += 16;
	}
	if (gv_build(&v->gv, v->t, v->n, &eb))
		fail_msg("gv_build: %s", eb.msg);
}

static void vocab_free(struct vocab *v)
{
	gv_destroy(v->gv);
	free(v->t);
	free(v->store);
}

static bool bit(const uint32_t *bits, uint32_t i)
{
	return (bits[i >> 5] >> (i & 31)) & 1u;
}

/* Every token's bit against a copy of the matcher fed its bytes. */
static void oracle_check(struct gmatch *m, const struct vocab *v, const uint32_t *bits,
                         const char *what, int step)
{
	for (uint32_t i = 0; i < v->n; i++) {
		struct gmatch c;
		bool want;

		memset(&c, 0, sizeof(c));
		assert_int_equal(gm_copy(&c, m, NULL), 0);
		want = !v->t[i].special && v->t[i].len &&
		       gm_accept_bytes(&c, v->t[i].bytes, v->t[i].len);
		gm_release(&c);
		if (want != bit(bits, i))
			fail_msg("%s step %d: token %u (%u bytes, first 0x%02x) bit %d, accepting "
			         "it %d",
			         what, step, i, v->t[i].len, v->t[i].bytes[0], bit(bits, i), want);
	}
}

/* Random walks through the grammar by allowed tokens; at each state the
 * mask (fresh, then cached) against the oracle. */
static void oracle_walks(struct grammar *g, const struct vocab *v, uint64_t *rs, int walks,
                         int steps, const char *what)
{
	size_t nw = gv_mask_words(v->gv);
	uint32_t *bits = malloc(nw * 4), *again = malloc(nw * 4), *allowed = malloc(v->n * 4);
	struct ig_errbuf eb = {0};
	int checked = 0;

	assert_non_null(bits);
	assert_non_null(again);
	assert_non_null(allowed);
	for (int w = 0; w < walks; w++) {
		struct gmatch m;

		assert_int_equal(gm_init(&m, g, NULL), 0);
		for (int s = 0; s < steps; s++) {
			uint32_t n_allowed = 0, pick;

			if (gm_mask(&m, v->gv, bits, &eb))
				fail_msg("%s: gm_mask: %s", what, eb.msg);
			oracle_check(&m, v, bits, what, s);
			checked++;
			assert_int_equal(gm_mask(&m, v->gv, again, &eb), 0);
			assert_memory_equal(bits, again, nw * 4);
			for (uint32_t i = 0; i < v->n; i++)
				if (bit(bits, i))
					allowed[n_allowed++] = i;
			if (!n_allowed)
				break;
			/* prefer ending tokens half the time near the end */
			pick = allowed[rnd(rs) % n_allowed];
			assert_true(gm_accept_bytes(&m, v->t[pick].bytes, v->t[pick].len));
		}
		gm_release(&m);
	}
	printf("# %s: %d states checked against the oracle\n", what, checked);
	assert_true(checked >= walks * 2);
	free(bits);
	free(again);
	free(allowed);
}

static const char *const oracle_grammars[] = {
    ARITH,
    "root ::= \"{\" ws ( pair ( ws \",\" ws pair )* )? ws \"}\"\n"
    "pair ::= str ws \":\" ws val\n"
    "val ::= str | [0-9]+ | \"true\" | \"null\" | \"[\" ws ( val ( ws \",\" ws val )* )? ws \"]\" "
    "| root\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"
    "ws ::= ( \" \" | \"\\n\" \" \"{0,4} )?\n",
    "root ::= ( [\\u00e0-\\u00ff] | [\\u4e00-\\u9fff] | \"caf\" )+ \"!\"?",
    "root ::= \"<tool_call>\" \"\\n\"? \"{\\\"name\\\": \\\"\" [a-z_]{1,8} \"\\\"}\" ",
};

static void test_mask_oracle(void **state)
{
	uint64_t rs = seed;
	struct vocab v;

	(void)state;
	vocab_make(&v, &rs, 3000);
	for (size_t i = 0; i < sizeof(oracle_grammars) / sizeof(oracle_grammars[0]); i++) {
		struct grammar *g = parse_ok(oracle_grammars[i]);
		char what[32];

		snprintf(what, sizeof(what), "grammar %zu", i);
		oracle_walks(g, &v, &rs, 6, 20, what);
		grammar_destroy(g);
	}
	vocab_free(&v);
}

/* The oracle must be able to fail: a mask with one bit flipped differs. */
static void test_oracle_bites(void **state)
{
	uint64_t rs = seed;
	struct vocab v;
	struct grammar *g = parse_ok(ARITH);
	struct gmatch m;
	uint32_t *bits;
	size_t nw;

	(void)state;
	vocab_make(&v, &rs, 200);
	nw = gv_mask_words(v.gv);
	bits = calloc(nw, 4);
	assert_int_equal(gm_init(&m, g, NULL), 0);
	assert_int_equal(gm_mask(&m, v.gv, bits, NULL), 0);
	/* "1" (byte 0x31) is allowed at the start, "+" is not */
	assert_true(bit(bits, '1'));
	assert_false(bit(bits, '+'));
	assert_false(bit(bits, '*'));
	for (uint32_t i = 0; i < v.n; i++)
		if (v.t[i].special)
			assert_false(bit(bits, i));
	gm_release(&m);
	free(bits);
	grammar_destroy(g);
	vocab_free(&v);
}

/* ---- save and load ------------------------------------------------------------------------ */

static void test_save_load(void **state)
{
	struct grammar *g = parse_ok(oracle_grammars[1]), *h = parse_ok(ARITH);
	struct gmatch m, l, x;
	struct ig_errbuf eb = {0};
	const char *doc = "{\"a\": [1, \"x\\n\", {\"b\": null}], \"c\": true}";
	size_t cut = 17, len;
	uint8_t buf[4096];

	(void)state;
	assert_int_equal(gm_init(&m, g, NULL), 0);
	assert_true(gm_accept_bytes(&m, doc, cut));
	assert_int_equal(gm_state_save(&m, buf, sizeof(buf), &len, NULL), 0);
	assert_int_equal(len, gm_state_size(&m));
	assert_int_equal(gm_state_save(&m, buf, len - 1, &len, &eb), IG_E_INVAL);
	assert_int_equal(gm_state_save(&m, buf, sizeof(buf), &len, NULL), 0);
	assert_int_equal(gm_init(&l, g, NULL), 0);
	assert_int_equal(gm_state_load(&l, buf, len, &eb), 0);
	assert_true(gm_accept_bytes(&l, doc + cut, strlen(doc) - cut));
	assert_true(gm_can_end(&l));
	assert_true(gm_accept_bytes(&m, doc + cut, strlen(doc) - cut));
	assert_int_equal(l.nw, m.nw);
	assert_memory_equal(l.w, m.w, m.nw * 4);
	/* another grammar's matcher refuses it */
	assert_int_equal(gm_init(&x, h, NULL), 0);
	assert_int_equal(gm_state_load(&x, buf, len, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "another grammar"));
	/* damaged: short, a position out of the grammar, a frame at an END */
	assert_int_equal(gm_state_load(&l, buf, len - 4, &eb), IG_E_INVAL);
	{
		uint8_t bad[4096];

		memcpy(bad, buf, len);
		bad[len - 4] = 0xff, bad[len - 3] = 0xff;
		assert_int_equal(gm_state_load(&l, bad, len, &eb), IG_E_INVAL);
		memcpy(bad, buf, len);
		bad[0] ^= 1;
		assert_int_equal(gm_state_load(&l, bad, len, &eb), IG_E_INVAL);
	}
	/* and the refusal left l as it was: complete */
	assert_true(gm_can_end(&l));
	gm_release(&m);
	gm_release(&l);
	gm_release(&x);
	grammar_destroy(g);
	grammar_destroy(h);
}

/* ---- lazy activation -------------------------------------------------------------------- */

static void test_lazy(void **state)
{
	struct grammar *g = parse_ok("root ::= \"{\\\"n\\\":\" [0-9]+ \"}\"");
	struct gm_lazy z, c;
	struct ig_errbuf eb = {0};
	uint64_t rs = seed;
	struct vocab v;
	uint32_t *bits;
	uint8_t buf[1024];
	size_t len;

	(void)state;
	assert_int_equal(gm_lazy_init(&z, g, "<tool_call>", 11, &eb), 0);
	assert_true(gm_lazy_can_end(&z));
	assert_true(gm_lazy_accept_bytes(&z, "Sure, I will call <tool", 23));
	assert_false(gm_lazy_active(&z));
	assert_true(gm_lazy_accept_bytes(&z, "s> anything <tool_", 18));
	assert_false(gm_lazy_active(&z));
	/* completing the trigger with bytes the grammar refuses: refused, and
	 * nothing changed */
	assert_false(gm_lazy_accept_bytes(&z, "call>x", 6));
	assert_false(gm_lazy_active(&z));
	assert_true(gm_lazy_accept_bytes(&z, "call>{\"n", 8));
	assert_true(gm_lazy_active(&z));
	assert_false(gm_lazy_can_end(&z));
	assert_false(gm_lazy_accept_bytes(&z, "x", 1));
	/* a save in the middle, loaded into another, continues the same */
	assert_int_equal(gm_lazy_state_save(&z, buf, sizeof(buf), &len, &eb), 0);
	assert_int_equal(gm_lazy_init(&c, g, "<tool_call>", 11, &eb), 0);
	assert_int_equal(gm_lazy_state_load(&c, buf, len, &eb), 0);
	assert_true(gm_lazy_accept_bytes(&c, "\":42}", 5));
	assert_true(gm_lazy_can_end(&c));
	gm_lazy_release(&c);

	/* the masks against the oracle: inactive at several trigger prefixes,
	 * then active */
	vocab_make(&v, &rs, 2000);
	bits = malloc(gv_mask_words(v.gv) * 4);
	gm_lazy_release(&z);
	assert_int_equal(gm_lazy_init(&z, g, "<tool_call>", 11, &eb), 0);
	{
		const char *feed[] = {"", "hello <", "tool", "_call", ">{\"n\":", "1"};

		for (size_t f = 0; f < sizeof(feed) / sizeof(feed[0]); f++) {
			assert_true(gm_lazy_accept_bytes(&z, feed[f], strlen(feed[f])));
			assert_int_equal(gm_lazy_mask(&z, v.gv, bits, &eb), 0);
			for (uint32_t i = 0; i < v.n; i++) {
				struct gm_lazy cl;
				bool want;

				memset(&cl, 0, sizeof(cl));
				assert_int_equal(gm_lazy_copy(&cl, &z, NULL), 0);
				want = (v.t[i].special && !gm_lazy_active(&z)) ||
				       (!v.t[i].special &&
				        gm_lazy_accept_bytes(&cl, v.t[i].bytes, v.t[i].len));
				gm_lazy_release(&cl);
				if (want != bit(bits, i))
					fail_msg("lazy after \"%s\": token %u bit %d, want %d",
					         feed[f], i, bit(bits, i), want);
			}
		}
		assert_true(gm_lazy_active(&z));
	}
	/* the token "<tool_call>" itself is allowed inactive; the piece
	 * "\n<tool_call>\n{\"" too (the grammar takes "\n"? no: it takes
	 * "{\"" only), so the piece must be off */
	gm_lazy_release(&z);
	assert_int_equal(gm_lazy_init(&z, g, "<tool_call>", 11, &eb), 0);
	assert_int_equal(gm_lazy_mask(&z, v.gv, bits, &eb), 0);
	for (uint32_t i = 0; i < v.n; i++) {
		if (v.t[i].len == 11 && !memcmp(v.t[i].bytes, "<tool_call>", 11))
			assert_true(bit(bits, i));
		if (v.t[i].len == 15 && !memcmp(v.t[i].bytes, "\n<tool_call>\n{\"", 15))
			assert_false(bit(bits, i));
	}
	/* the inactive masks are the grammar's, shared by matchers with the
	 * same trigger (that one came from the first matcher's), and kept
	 * apart by trigger: under "<fn>" that piece completes nothing */
	{
		struct gm_lazy f;

		assert_int_equal(gm_lazy_init(&f, g, "<fn>", 4, &eb), 0);
		assert_int_equal(gm_lazy_mask(&f, v.gv, bits, &eb), 0);
		for (uint32_t i = 0; i < v.n; i++)
			if (v.t[i].len == 15 && !memcmp(v.t[i].bytes, "\n<tool_call>\n{\"", 15))
				assert_true(bit(bits, i));
		gm_lazy_release(&f);
	}
	free(bits);
	vocab_free(&v);
	gm_lazy_release(&z);
	grammar_destroy(g);
}

/* ---- JSON Schema ------------------------------------------------------------------------ */

struct schema_row {
	const char *schema;
	const char *accept[8]; /* complete documents */
	const char *refuse[8]; /* refused somewhere, or accepted but incomplete */
};

static const struct schema_row schema_rows[] = {
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
     {"{\"name\":\"Ann\",\"age\":42}", "{ \"name\": \"A\\\"b\\u00e9\", \"age\": -7 }",
      "{\n  \"name\": \"caf\xc3\xa9 \xe4\xb8\xad\",\n  \"age\": 0\n}"},
     {"{\"age\":42,\"name\":\"Ann\"}", "{\"name\":\"Ann\"}", "{\"name\":\"Ann\",\"age\":4.5}",
      "{\"name\":\"A\nB\",\"age\":1}", "{\"name\":\"Ann\",\"age\":01}",
      "{\"name\":\"Ann\",  \"age\":1}", "{\"name\":\"Ann\",\"age\":1,\"x\":1}",
      " {\"name\":\"Ann\",\"age\":1}"}},
    /* optional members, in schema order, any subset */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":"
     "\"null\"},\"c\":{\"type\":\"number\"}},\"required\":[\"b\"]}",
     {"{\"b\":null}", "{\"a\":true,\"b\":null}", "{\"b\":null,\"c\":1.5e-3}",
      "{\"a\":false,\"b\":null,\"c\":-0.25}"},
     {"{}", "{\"a\":true}", "{\"c\":1,\"b\":null}", "{\"b\":null,}", "{,\"b\":null}",
      "{\"a\":true,\"a\":true,\"b\":null}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}",
     {"{}", "{\"a\":1}", "{ }"},
     {"{\"a\":1,\"b\":2}", "{\"b\":2}"}},
    /* extras allowed after the declared members */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
     "\"additionalProperties\":true}",
     {"{}", "{\"a\":1}", "{\"a\":1,\"zz\":[1,{\"q\":null}]}", "{\"zz\":\"x\"}"},
     {"{\"a\":1,}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{}", "{\"x\":1,\"y\":2}"},
     {"{\"x\":\"1\"}"}},
    /* arrays with bounds */
    {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"]},"
     "\"minItems\":2,\"maxItems\":3}",
     {"[\"x\",\"y\"]", "[\"x\", \"x\", \"y\"]", "[\n\"y\",\n\"y\"\n]"},
     {"[]", "[\"x\"]", "[\"x\",\"y\",\"x\",\"y\"]", "[\"z\",\"x\"]", "[\"x\",,\"y\"]"}},
    {"{\"type\":\"array\",\"maxItems\":0}", {"[]", "[ ]"}, {"[1]"}},
    {"{\"type\":\"array\"}", {"[]", "[1,\"a\",[],{}]"}, {"[1,]"}},
    /* enum and const of any JSON value, compact */
    {"{\"enum\":[1,\"two\",null,{\"a\":[true]}]}",
     {"1", "\"two\"", "null", "{\"a\":[true]}"},
     {"2", "\"three\"", "{\"a\": [true]}"}},
    {"{\"const\":\"fixed\"}", {"\"fixed\""}, {"\"fixe\"", "\"fixedd\""}},
    /* anyOf, type lists */
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}",
     {"12", "\"ab\"", "\"\""},
     {"\"abc\"", "1.5", "true"}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"s\"", "null"}, {"1"}},
    /* strings: lengths in characters (an escape or a multibyte one each) */
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"\xc3\xa9\xe4\xb8\xad\"", "\"\\n\\u0041b\""},
     /* ... past U+FFFF none, raw or as surrogates (one code point, two
      * UTF-16 units: the two ways of counting length would differ) */
     {"\"a\"", "\"abcd\"", "\"\\x\"", "\"\\u00g0\"", "\"a\xf0\x9f\x98\x80\"",
      "\"\\ud83d\\ude00\""}},
    /* $ref, recursion through $defs and definitions and "#" */
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
     "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}"},
     {"{\"v\":1,\"kids\":[{}]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"w\":3}]}]}"}},
    {"{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{"
     "\"x\":{\"$ref\":\"#/definitions/s\"}},\"required\":[\"x\"]}",
     {"{\"x\":\"y\"}"},
     {"{\"x\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":"
     "\"null\"}]}},\"required\":[\"next\"]}",
     {"{\"next\":null}", "{\"next\":{\"next\":{\"next\":null}}}"},
     {"{\"next\":{}}"}},
    /* nullable (OpenAPI 3.0's, as OpenAI's zod helper writes it) */
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\",\"nullable\":true},"
     "\"m\":{\"type\":\"integer\",\"nullable\":false}},\"required\":[\"n\",\"m\"]}",
     {"{\"n\":null,\"m\":1}", "{\"n\":\"x\",\"m\":2}"},
     {"{\"n\":1,\"m\":1}", "{\"n\":null,\"m\":null}"}},
    /* patterns, anchored */
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,4}$\"}",
     {"\"AB-123\"", "\"ZZ-0000\""},
     {"\"AB-12\"", "\"ab-123\"", "\"XAB-123\"", "\"AB-12345\""}},
    {"{\"type\":\"string\",\"pattern\":\"(cat|dog)s?( and (cat|dog)s?)*\"}",
     {"\"cats\"", "\"dog and cats and dog\""},
     {"\"cow\"", "\"cats and\""}},
    {"{\"type\":\"string\",\"pattern\":\"a.c[^x\\\"]\\\\.\"}",
     {"\"abc1.\"",
      "\"a\xc3\xa9"
      "c\\\\.\"",
      "\"a\\\"cz.\""},
     {"\"abcx.\"", "\"abc\\\".\"", "\"a\\ncz.\""}},
    {"{\"type\":\"string\",\"pattern\":\"\\\\w+@\\\\w+\\\\.com\"}",
     {"\"me@host.com\""},
     {"\"me@host.org\"", "\"@host.com\""}},
};

static bool doc_accepted(struct grammar *g, const char *doc)
{
	struct gmatch m;
	bool ok;

	assert_int_equal(gm_init(&m, g, NULL), 0);
	ok = gm_accept_bytes(&m, doc, strlen(doc)) && gm_can_end(&m);
	gm_release(&m);
	return ok;
}

static struct grammar *schema_ok(const char *text)
{
	json_error_t je;
	json_t *s = json_loads(text, 0, &je);
	struct ig_errbuf eb = {0};
	struct grammar *g = NULL;

	if (!s)
		fail_msg("the test's schema is not JSON: %s\n%s", je.text, text);
	if (gs_compile(s, &g, &eb))
		fail_msg("schema refused: %s\n%s", eb.msg, text);
	json_decref(s);
	return g;
}

static void test_schema_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(schema_rows) / sizeof(schema_rows[0]); i++) {
		const struct schema_row *r = &schema_rows[i];
		struct grammar *g = schema_ok(r->schema);

		for (int k = 0; k < 8 && r->accept[k]; k++)
			if (!doc_accepted(g, r->accept[k]))
				fail_msg("schema row %zu: refused %s", i, r->accept[k]);
		for (int k = 0; k < 8 && r->refuse[k]; k++)
			if (doc_accepted(g, r->refuse[k]))
				fail_msg("schema row %zu: accepted %s", i, r->refuse[k]);
		grammar_destroy(g);
	}
}

struct schema_refusal {
	const char *schema;
	const char *say;
};

static const struct schema_refusal schema_refusals[] = {
    {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"date\"}}}",
     "schema at /properties/x: 'format' is not supported; supported: type, properties"},
    {"{\"type\":\"integer\",\"minimum\":3}", "schema at /: 'minimum' is not supported"},
    {"{\"oneOf\":[{\"type\":\"integer\"}]}", "'oneOf' is not supported"},
    {"{\"type\":\"array\",\"items\":{\"allOf\":[]}}", "schema at /items: 'allOf' is not"},
    {"{\"$ref\":\"#/components/x\"}", "$ref '#/components/x' is not supported"},
    {"{\"$ref\":\"#/$defs/nope\"}", "$ref '#/$defs/nope' names no schema"},
    {"{\"type\":\"date\"}", "type 'date' is not one of"},
    {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "look-arounds"},
    {"{\"type\":\"string\",\"pattern\":\"a\\\\bc\"}", "this escape"},
    {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "an anchor inside the pattern"},
    {"{\"type\":\"string\",\"pattern\":\"(ab\"}", "a group with no closing ')'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
     "'required' names 'b'"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "'maxItems' 2 is below"},
    {"{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}]}", "tuples"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}},"
     "\"$ref\":\"#/$defs/a\"}",
     "left recursion"},
    {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties' is not supported"},
};

static void test_schema_refusals(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(schema_refusals) / sizeof(schema_refusals[0]); i++) {
		json_t *s = json_loads(schema_refusals[i].schema, 0, NULL);
		struct ig_errbuf eb = {0};
		struct grammar *g = NULL;
		int rc;

		assert_non_null(s);
		rc = gs_compile(s, &g, &eb);
		if (rc != IG_E_INVAL || g || !strstr(eb.msg, schema_refusals[i].say))
			fail_msg("refusal row %zu: rc %d, \"%s\", wanted \"%s\"", i, rc, eb.msg,
			         schema_refusals[i].say);
		json_decref(s);
	}
}

static void test_json_object_mode(void **state)
{
	struct grammar *g = NULL;
	static const char *const ok[] = {"{}", "{\"a\":[1,2.5e3,\"x\",true,null,{\"b\":{}}]}",
	                                 "{\n  \"k\": \"v\"\n}"};
	static const char *const bad[] = {"[]",      "1",          "\"s\"",      "{\"a\":}",
	                                  "{'a':1}", "{\"a\":1}}", "{\"a\":tru}"};

	(void)state;
	assert_int_equal(gs_json_object(&g, NULL), 0);
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!doc_accepted(g, ok[i]))
			fail_msg("json_object refused %s", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (doc_accepted(g, bad[i]))
			fail_msg("json_object accepted %s", bad[i]);
	grammar_destroy(g);
}

/* The mask against the oracle on schema grammars too. */
static void test_schema_mask_oracle(void **state)
{
	uint64_t rs = seed ^ 0x5c4e3a;
	struct vocab v;
	struct grammar *g;

	(void)state;
	vocab_make(&v, &rs, 3000);
	g = schema_ok(schema_rows[0].schema);
	oracle_walks(g, &v, &rs, 6, 25, "schema 0");
	grammar_destroy(g);
	g = schema_ok(schema_rows[13].schema);
	oracle_walks(g, &v, &rs, 6, 25, "schema 13");
	grammar_destroy(g);
	assert_int_equal(gs_json_object(&g, NULL), 0);
	oracle_walks(g, &v, &rs, 6, 25, "json_object");
	grammar_destroy(g);
	vocab_free(&v);
}

int main(void)
{
	const char *s = getenv("IGNIS_TEST_SEED");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_errors),
	    cmocka_unit_test(test_match_rows),
	    cmocka_unit_test(test_star_is_flat),
	    cmocka_unit_test(test_depth_bound),
	    cmocka_unit_test(test_stack_bound),
	    cmocka_unit_test(test_mask_oracle),
	    cmocka_unit_test(test_oracle_bites),
	    cmocka_unit_test(test_save_load),
	    cmocka_unit_test(test_lazy),
	    cmocka_unit_test(test_schema_rows),
	    cmocka_unit_test(test_schema_refusals),
	    cmocka_unit_test(test_json_object_mode),
	    cmocka_unit_test(test_schema_mask_oracle),
	};

	if (s && *s)
		seed = strtoull(s, NULL, 0);
	printf("# seed %llu (IGNIS_TEST_SEED)\n", (unsigned long long)seed);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
