/*
 * test_grammar_ci.c - masks from the vocabulary's class sets (docs/adr/0061)
 * against the plain trie walk, bit for bit.
 *
 * Each case compiles its grammar twice, one with the class sets
 * (grammar_set_class_masks on, the default) and one without, and walks
 * both matchers with the same tokens: before each token, the two masks
 * must be equal. The walks pick at random among the allowed tokens, a
 * third of the time preferring one with a structural byte (quote,
 * backslash, brackets, comma, colon, digit, newline), so that they go deep
 * into strings, out of them, and near the ends of bounded ones. The cases:
 * a nested JSON schema (strings, a bounded string, an enum, a patterned
 * string, arrays, numbers, a nullable); a schema of short bounds and
 * patterns (maxLength 5, 2 to 20, [a-z0-9_-]{3,30}, [A-Za-z ]+, items of
 * at most 40, and [a-z]{2}[a-z0-9]*, whose count runs out into a wider
 * class); json_object mode; a text grammar of Unicode classes, byte
 * classes and `.`; a tool call behind the lazy trigger "<tool_call>".
 * Each case must have had masks from the class sets (the test would be
 * empty otherwise) and says how many. Before the lazy trigger, where the
 * two share the vocabulary's part of the mask, the synthetic vocabulary's
 * every token is checked against a copy of the matcher fed its bytes.
 *
 *   test-grammar-ci           a synthetic vocabulary of some 7,000 tokens:
 *                             every byte, JSON pieces, words past the
 *                             counted 16 characters, UTF-8 whole and cut
 *                             (E0, ED, F0, F4 leads), escapes, blanks,
 *                             digits
 *   test-grammar-ci --qwen3   the real Qwen3 vocabulary (tokenizer.json at
 *                             IGNIS_QWEN3_TOKENIZER); exits 77, meson's
 *                             skip, without it
 *
 * Random draws come from IGNIS_TEST_SEED (printed; default 61).
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "model/bpe.h"
#include "model/gguf.h"
#include "model/hfvocab.h"

static uint64_t seed = 61;

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ---- the vocabularies ------------------------------------------------------------------- */

struct voc {
	uint32_t n;
	struct gv_token *t;
	uint8_t *store;
	struct gvocab *gv;
	struct bpe *b; /* the real one's tokenizer: owns the bytes */
	int walks, steps;
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
    "\\u00e9",
    "\\\"",
    "\\\\",
    "\\/",
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
    "\n\n",
    "\t",
    "\xc3\xa9",
    "\xe4\xb8\xad\xe6\x96\x87",
    "\xe4\xb8",
    "\xad",
    "\xf0\x9f\x98",
    "\xf0\x9f\x98\x80",
    "\xe0\xa0\x80",
    "\xed\x9f\xbf",
    "\xed\xa0\x80",
    "\xf4\x8f\xbf\xbf",
    "\xf4\x90\x80\x80",
    "\xc0\xaf",
    "\x80",
    "caf\xc3\xa9",
    "\"name\"",
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
    "</tool_call>",
    "\"a\"",
    "'",
    "''",
    "<a>",
    "a>",
    ">,",
    "\"x\"}",
};

/* A random word of `len` bytes: letters mostly, some digits, blanks,
 * punctuation, quotes and backslashes. */
static void word(uint64_t *rs, uint8_t *b, uint32_t len)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                            "abcdefghijklmnopqrstuvwxyz0123456789   _-.,:;!?'<>/()";

	for (uint32_t k = 0; k < len; k++) {
		uint64_t x = rnd(rs) % 100;

		b[k] = x < 94   ? (uint8_t)alpha[rnd(rs) % (sizeof(alpha) - 1)]
		       : x < 97 ? (uint8_t) "\"\\\n"[rnd(rs) % 3]
		                : (uint8_t)(rnd(rs) % 32);
	}
}

/* Random code points as UTF-8 (all lengths, near the edges of E0, ED, F0,
 * F4), up to `cap` bytes; a third cut short. The length written. */
static uint32_t utf8_run(uint64_t *rs, uint8_t *b, uint32_t cap)
{
	static const uint32_t edges[] = {0x80,   0x7FF,  0x800,   0xFFF,   0x1000,   0xD7FF,
	                                 0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x100000, 0x10FFFF};
	uint32_t n = 0;

	while (n + 4 <= cap && rnd(rs) % 4) {
		uint32_t c, k = (uint32_t)(rnd(rs) % 4);

		if (k == 0)
			c = 0x20 + (uint32_t)(rnd(rs) % 0x5F);
		else if (k == 1)
			c = edges[rnd(rs) % 12];
		else
			c = 0xA0 + (uint32_t)(rnd(rs) % 0x5000);
		if (c >= 0xD800 && c <= 0xDFFF)
			c = 0x4E2D;
		if (c < 0x80) {
			b[n++] = (uint8_t)c;
		} else if (c < 0x800) {
			b[n++] = (uint8_t)(0xC0 | c >> 6), b[n++] = (uint8_t)(0x80 | (c & 63));
		} else if (c < 0x10000) {
			b[n++] = (uint8_t)(0xE0 | c >> 12);
			b[n++] = (uint8_t)(0x80 | ((c >> 6) & 63));
			b[n++] = (uint8_t)(0x80 | (c & 63));
		} else {
			b[n++] = (uint8_t)(0xF0 | c >> 18);
			b[n++] = (uint8_t)(0x80 | ((c >> 12) & 63));
			b[n++] = (uint8_t)(0x80 | ((c >> 6) & 63));
			b[n++] = (uint8_t)(0x80 | (c & 63));
		}
	}
	if (n > 1 && rnd(rs) % 3 == 0)
		n -= 1 + (uint32_t)(rnd(rs) % (n - 1)); /* cut anywhere, a character too */
	if (!n)
		b[n++] = 'x';
	return n;
}

/* Token i of the synthetic vocabulary into b (room for 48 bytes). */
static uint32_t synth_token(uint64_t *rs, uint32_t i, uint8_t *b)
{
	uint32_t np = sizeof(pieces) / sizeof(pieces[0]), len, kind;

	if (i < 256) {
		b[0] = (uint8_t)i;
		return 1;
	}
	if (i < 256 + np) {
		len = (uint32_t)strlen(pieces[i - 256]);
		memcpy(b, pieces[i - 256], len);
		return len;
	}
	kind = (uint32_t)(rnd(rs) % 10);
	if (kind < 5) {
		/* words, a tenth of them past 16 characters */
		len = rnd(rs) % 10 ? 1 + (uint32_t)(rnd(rs) % 9) : 17 + (uint32_t)(rnd(rs) % 24);
		word(rs, b, len);
		return len;
	}
	if (kind < 8)
		return utf8_run(rs, b, 40);
	len = 1 + (uint32_t)(rnd(rs) % 40);
	for (uint32_t k = 0; k < len; k++)
		b[k] = kind == 8 ? (uint8_t) "  \t"[rnd(rs) % 3] : (uint8_t)('0' + rnd(rs) % 10);
	if (kind == 8 && rnd(rs) % 2)
		b[0] = '\n';
	return len;
}

static void voc_synth(struct voc *v)
{
	uint64_t rs = seed;
	struct ig_errbuf eb = {0};

	memset(v, 0, sizeof(*v));
	v->n = 7000;
	v->t = calloc(v->n, sizeof(*v->t));
	v->store = malloc((size_t)v->n * 48);
	assert_non_null(v->t);
	assert_non_null(v->store);
	for (uint32_t i = 0; i < v->n; i++) {
		uint8_t *b = v->store + (size_t)i * 48;

		v->t[i].bytes = b;
		v->t[i].len = synth_token(&rs, i, b);
		v->t[i].special = i >= v->n - 4; /* a few never allowed */
	}
	if (gv_build(&v->gv, v->t, v->n, &eb))
		fail_msg("gv_build: %s", eb.msg);
	v->walks = 40;
	v->steps = 120;
}

/* The real Qwen3 vocabulary, as ignis-vocab converts it; false when its
 * tokenizer.json is not installed. */
static bool voc_qwen3(struct voc *v)
{
	const char *json = getenv("IGNIS_QWEN3_TOKENIZER");
	struct hfvocab_opts o = {.pre = "qwen2"};
	struct ig_errbuf eb = {0};
	struct gguf_writer w;
	struct hfvocab_stats st;
	struct gguf g;
	char dir[] = "/tmp/test-grammar-ci.XXXXXX", path[64];

	memset(v, 0, sizeof(*v));
	if (!json || access(json, R_OK))
		return false;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/vocab.gguf", dir);
	gguf_writer_init(&w);
	gguf_writer_add_str(&w, "general.architecture", "qwen3");
	if (hfvocab_add(&w, json, &o, &st, &eb) || gguf_writer_write(&w, path, &eb))
		fail_msg("%s: %s", json, eb.msg);
	gguf_writer_release(&w);
	if (gguf_open(&g, path, &eb) || bpe_open(&v->b, &g, &eb))
		fail_msg("%s: %s", path, eb.msg);
	gguf_close(&g);
	unlink(path);
	rmdir(dir);
	v->n = bpe_info(v->b)->n_tokens;
	v->t = calloc(v->n, sizeof(*v->t));
	assert_non_null(v->t);
	for (uint32_t i = 0; i < v->n; i++) {
		enum bpe_type t = bpe_token_type(v->b, i);
		const uint8_t *p;
		size_t len;

		bpe_piece(v->b, i, false, &p, &len);
		v->t[i] = (struct gv_token){
		    p, (uint32_t)len, t == BPE_CONTROL || t == BPE_UNKNOWN || t == BPE_UNUSED};
	}
	if (gv_build(&v->gv, v->t, v->n, &eb))
		fail_msg("gv_build: %s", eb.msg);
	printf("# Qwen3: %u tokens, %u trie nodes\n", v->n, gv_n_nodes(v->gv));
	v->walks = 8;
	v->steps = 100;
	return true;
}

static void voc_free(struct voc *v)
{
	gv_destroy(v->gv);
	free(v->t);
	free(v->store);
	if (v->b)
		bpe_close(v->b);
}

/* ---- the cases ---------------------------------------------------------------------------- */

enum kind { K_SCHEMA, K_GBNF, K_JSON_OBJECT, K_TOOL };

struct kase {
	const char *name;
	enum kind kind;
	const char *text;
};

static const struct kase cases[] = {
    {"nested schema", K_SCHEMA,
     "{\"type\":\"object\",\"properties\":{"
     "\"id\":{\"type\":\"integer\"},"
     "\"name\":{\"type\":\"string\",\"maxLength\":64},"
     "\"status\":{\"enum\":[\"active\",\"inactive\",\"pending\"]},"
     "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
     "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"},"
     "\"orders\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
     "\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\"},\"price\":{\"type\":"
     "\"number\"},\"gift\":{\"type\":\"boolean\"}},\"required\":[\"sku\",\"qty\",\"price\"],"
     "\"additionalProperties\":false}},"
     "\"note\":{\"type\":[\"string\",\"null\"]}},"
     "\"required\":[\"id\",\"name\",\"status\",\"tags\",\"zip\",\"orders\",\"note\"],"
     "\"additionalProperties\":false}"},
    {"bounds and patterns", K_SCHEMA,
     "{\"type\":\"object\",\"properties\":{"
     "\"a\":{\"type\":\"string\",\"maxLength\":5},"
     "\"b\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":20},"
     "\"c\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9_-]{3,30}$\"},"
     "\"d\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z ]+$\"},"
     "\"e\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":40}},"
     "\"f\":{\"type\":\"number\"},"
     "\"g\":{\"type\":\"string\",\"pattern\":\"^[a-z]{2}[a-z0-9]*$\"}},"
     "\"required\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\"],"
     "\"additionalProperties\":false}"},
    {"json_object", K_JSON_OBJECT, NULL},
    {"text grammar", K_GBNF,
     "root ::= item ( \",\" item )*\n"
     "item ::= word | wide | quoted | raw | angle\n"
     "word ::= [a-zA-Z_ ]{1,24}\n"
     "wide ::= [\\u00e0-\\u00ff\\u4e00-\\u9fff]+\n"
     "quoted ::= \"'\" [^'\\n]* \"'\"\n"
     "raw ::= \"#\" %[\\x80-\\xff]{2,6}\n"
     "angle ::= \"<\" .* \">\"\n"},
    {"tool call (lazy)", K_TOOL,
     "{\"type\":\"object\",\"properties\":{"
     "\"name\":{\"const\":\"get_weather\"},"
     "\"arguments\":{\"type\":\"object\",\"properties\":{"
     "\"location\":{\"type\":\"string\"},"
     "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
     "\"days\":{\"type\":\"integer\"}},"
     "\"required\":[\"location\",\"unit\"],\"additionalProperties\":false}},"
     "\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false}"},
};

#define TRIGGER "<tool_call>"

/* After the trigger: a newline, the call's JSON, a newline, the closing
 * tag (as the bench and the server write it). */
static struct grammar *make_tool(const char *schema)
{
	const char *head = "root ::= \"\\n\" r0 \"\\n</tool_call>\"\n";
	struct ig_errbuf eb = {0};
	json_t *s = json_loads(schema, 0, NULL);
	struct grammar *g = NULL;
	char *text = NULL, *full;

	assert_non_null(s);
	if (gs_to_gbnf(s, &text, &eb))
		fail_msg("schema: %s", eb.msg);
	json_decref(s);
	full = malloc(strlen(head) + strlen(text) + 1);
	assert_non_null(full);
	strcpy(full, head);
	strcat(full, strchr(text, '\n') + 1);
	if (grammar_parse(full, strlen(full), "root", &g, &eb))
		fail_msg("tool grammar: %s", eb.msg);
	free(full);
	free(text);
	return g;
}

static struct grammar *make(const struct kase *k)
{
	struct ig_errbuf eb = {0};
	struct grammar *g = NULL;
	json_t *s;
	int rc = 0;

	switch (k->kind) {
	case K_SCHEMA:
		s = json_loads(k->text, 0, NULL);
		assert_non_null(s);
		rc = gs_compile(s, &g, &eb);
		json_decref(s);
		break;
	case K_GBNF:
		rc = grammar_parse(k->text, strlen(k->text), "root", &g, &eb);
		break;
	case K_JSON_OBJECT:
		rc = gs_json_object(&g, &eb);
		break;
	case K_TOOL:
		return make_tool(k->text);
	}
	if (rc)
		fail_msg("%s: %s", k->name, eb.msg);
	return g;
}

/* ---- the walks ---------------------------------------------------------------------------- */

/* A matcher of either kind over one grammar. */
struct mt {
	bool lazy;
	struct gmatch m;
	struct gm_lazy z;
};

static void mt_init(struct mt *x, struct grammar *g, bool lazy)
{
	x->lazy = lazy;
	if (lazy)
		assert_int_equal(gm_lazy_init(&x->z, g, TRIGGER, strlen(TRIGGER), NULL), 0);
	else
		assert_int_equal(gm_init(&x->m, g, NULL), 0);
}

static void mt_mask(struct mt *x, const struct voc *v, uint32_t *bits, const char *what)
{
	struct ig_errbuf eb = {0};
	int rc = x->lazy ? gm_lazy_mask(&x->z, v->gv, bits, &eb) : gm_mask(&x->m, v->gv, bits, &eb);

	if (rc)
		fail_msg("%s: mask: %s", what, eb.msg);
}

static bool mt_accept(struct mt *x, const struct gv_token *t)
{
	return x->lazy ? gm_lazy_accept_bytes(&x->z, t->bytes, t->len)
	               : gm_accept_bytes(&x->m, t->bytes, t->len);
}

static void mt_release(struct mt *x)
{
	if (x->lazy)
		gm_lazy_release(&x->z);
	else
		gm_release(&x->m);
}

static bool bit(const uint32_t *bits, uint32_t i)
{
	return (bits[i >> 5] >> (i & 31)) & 1u;
}

static bool structural(const struct gv_token *t)
{
	for (uint32_t k = 0; k < t->len; k++)
		if (strchr("\"\\{}[],:\n0123456789'<>#", t->bytes[k]) && t->bytes[k])
			return true;
	return false;
}

static bool has_trigger(const struct gv_token *t)
{
	return memmem(t->bytes, t->len, TRIGGER, strlen(TRIGGER)) != NULL;
}

/* The next token: any allowed one, or a third of the time one with a
 * structural byte when a few draws find one; before a lazy grammar's
 * trigger, a third of the time one that holds it. */
static uint32_t pick(const struct voc *v, const struct mt *x, const uint32_t *allowed, uint32_t n,
                     uint64_t *rs)
{
	uint32_t p = allowed[rnd(rs) % n];

	if (x->lazy && !gm_lazy_active(&x->z) && rnd(rs) % 3 == 0)
		for (uint32_t i = 0; i < n; i++)
			if (has_trigger(&v->t[allowed[i]]))
				return allowed[i];

	if (rnd(rs) % 3 == 0)
		for (int tries = 0; tries < 32; tries++) {
			uint32_t c = allowed[rnd(rs) % n];

			if (structural(&v->t[c]))
				return c;
		}
	return p;
}

/* The first token whose bit differs, for the message. */
static void report(const struct voc *v, const uint32_t *fast, const uint32_t *plain,
                   const char *what, int w, int s)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (bit(fast, i) != bit(plain, i))
			fail_msg(
			    "%s walk %d step %d: token %u (%u bytes, first 0x%02x): class sets "
			    "%d, plain walk %d",
			    what, w, s, i, v->t[i].len, v->t[i].len ? v->t[i].bytes[0] : 0,
			    bit(fast, i), bit(plain, i));
}

/* Before the trigger both matchers share the vocabulary's part of the
 * inactive mask (vclass.c), so on the synthetic vocabulary each token's
 * bit is also checked against a copy of the matcher fed its bytes. */
static void lazy_oracle(const struct mt *x, const struct voc *v, const uint32_t *bits,
                        const char *what, int w, int s)
{
	for (uint32_t i = 0; i < v->n; i++) {
		struct gm_lazy c;
		bool want;

		memset(&c, 0, sizeof(c));
		assert_int_equal(gm_lazy_copy(&c, &x->z, NULL), 0);
		want = v->t[i].special || gm_lazy_accept_bytes(&c, v->t[i].bytes, v->t[i].len);
		gm_lazy_release(&c);
		if (want != bit(bits, i))
			fail_msg(
			    "%s walk %d step %d, before the trigger: token %u bit %d, accepting "
			    "it %d",
			    what, w, s, i, bit(bits, i), want);
	}
}

/* One walk over a fresh pair of grammars (so that each walk meets its
 * states new, in its own order): its class masks counted into *n_class. */
static int walk_once(const struct kase *k, const struct voc *v, uint64_t *rs, int w, uint32_t *fast,
                     uint32_t *plain, uint32_t *allowed, uint64_t *n_class)
{
	struct grammar *gf = make(k), *gp = make(k);
	size_t nw = gv_mask_words(v->gv);
	struct mt a, b;
	int s;

	grammar_set_class_masks(gp, false);
	mt_init(&a, gf, k->kind == K_TOOL);
	mt_init(&b, gp, k->kind == K_TOOL);
	for (s = 0; s < v->steps; s++) {
		uint32_t n = 0, t;

		mt_mask(&a, v, fast, k->name);
		mt_mask(&b, v, plain, k->name);
		if (memcmp(fast, plain, nw * 4))
			report(v, fast, plain, k->name, w, s);
		if (a.lazy && !gm_lazy_active(&a.z) && !v->b)
			lazy_oracle(&a, v, fast, k->name, w, s);
		for (uint32_t i = 0; i < v->n; i++)
			if (bit(fast, i) && !v->t[i].special)
				allowed[n++] = i;
		if (!n)
			break;
		t = pick(v, &a, allowed, n, rs);
		assert_true(mt_accept(&a, &v->t[t]));
		assert_true(mt_accept(&b, &v->t[t]));
	}
	mt_release(&a);
	mt_release(&b);
	*n_class += grammar_class_masks(gf);
	assert_int_equal(grammar_class_masks(gp), 0);
	grammar_destroy(gf);
	grammar_destroy(gp);
	return s;
}

static void walk_case(const struct kase *k, const struct voc *v, uint64_t *rs)
{
	size_t nw = gv_mask_words(v->gv);
	uint32_t *fast = malloc(nw * 4), *plain = malloc(nw * 4), *allowed = malloc(v->n * 4);
	uint64_t n_class = 0;
	int states = 0;

	assert_non_null(fast);
	assert_non_null(plain);
	assert_non_null(allowed);
	for (int w = 0; w < v->walks; w++)
		states += walk_once(k, v, rs, w, fast, plain, allowed, &n_class);
	printf("# %s: %d states equal, %llu masks from the class sets\n", k->name, states,
	       (unsigned long long)n_class);
	if (!n_class)
		fail_msg("%s: no mask came from the class sets: the comparison is empty", k->name);
	free(fast);
	free(plain);
	free(allowed);
}

static void run_all(const struct voc *v)
{
	uint64_t rs = seed ^ 0xC1A55;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		walk_case(&cases[i], v, &rs);
}

static void test_synthetic(void **state)
{
	struct voc v;

	(void)state;
	voc_synth(&v);
	run_all(&v);
	voc_free(&v);
}

static void test_qwen3(void **state)
{
	struct voc v;

	(void)state;
	assert_true(voc_qwen3(&v));
	run_all(&v);
	voc_free(&v);
}

int main(int argc, char **argv)
{
	const char *s = getenv("IGNIS_TEST_SEED");
	const struct CMUnitTest synth[] = {cmocka_unit_test(test_synthetic)};
	const struct CMUnitTest real[] = {cmocka_unit_test(test_qwen3)};
	const char *json = getenv("IGNIS_QWEN3_TOKENIZER");

	if (s)
		seed = strtoull(s, NULL, 0);
	printf("# seed %llu\n", (unsigned long long)seed);
	if (argc < 2 || strcmp(argv[1], "--qwen3"))
		return cmocka_run_group_tests(synth, NULL, NULL);
	if (!json || access(json, R_OK)) {
		printf("# no Qwen3 tokenizer.json (IGNIS_QWEN3_TOKENIZER): skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(real, NULL, NULL);
}
