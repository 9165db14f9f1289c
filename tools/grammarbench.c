/*
 * ignis-grammarbench: the grammar engine's token mask timed on a real
 * vocabulary (issue 30, item 2; docs/adr/0052).
 *
 *   ignis-grammarbench VOCAB.gguf [--reps N] [--plain]
 *
 * VOCAB.gguf is any model file with a byte-level BPE tokenizer, or a
 * vocabulary-only one (`ignis-vocab convert tokenizer.json -o VOCAB.gguf`).
 * Control, unknown and unused tokens are the specials no grammar allows.
 *
 * For each case (a nested JSON schema, pretty-printed; a tool call behind
 * the lazy trigger "<tool_call>"), a valid document is tokenized with the
 * vocabulary's own BPE, and walked token by token: gm_mask (or
 * gm_lazy_mask) timed before each token, the token checked against the
 * mask, then accepted. "cold" is the first walk on a freshly compiled
 * grammar (every state met for the first time: its transitions computed,
 * its mask walked); "warm" walks the same document again over the same
 * grammar, as the next request with the same schema would (masks of
 * states seen before are copies). Each is repeated --reps times (default
 * 5, a fresh grammar for each cold one) and the figures pooled. The
 * first cold walk also builds the vocabulary's class sets (docs/adr/0061)
 * that later grammars share: CASE_cold_first_{mean,max}_us are its
 * figures alone. --plain turns the class sets off (every new state's mask
 * the plain trie walk), for a before and after on one binary.
 *
 * Prints key=value lines: vocab_tokens, trie_nodes, trie_build_ms; then
 * per case CASE_tokens, CASE_{cold,warm}_{mean,p50,p99,max}_us,
 * CASE_cold_first_{mean,max}_us, CASE_class_masks (the cold walks' masks
 * from the class sets), CASE_accept_mean_us (gm_accept_bytes per token);
 * last vocab_class_sets, vocab_trigger_parts, vocab_class_kib (what the
 * vocabulary keeps for them all).
 * Exit status: 0 done,
 * 1 a failure (a document refused, a token of it masked off), 2 bad
 * arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "model/bpe.h"
#include "model/gguf.h"

#define PROG "ignis-grammarbench"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static const char nested_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\"},"
    "\"name\":{\"type\":\"string\",\"maxLength\":64},"
    "\"status\":{\"enum\":[\"active\",\"inactive\",\"pending\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"street\",\"city\",\"zip\"],\"additionalProperties\":false},"
    "\"orders\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/order\"}},"
    "\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"id\",\"name\",\"status\",\"tags\",\"address\",\"orders\",\"note\"],"
    "\"additionalProperties\":false,"
    "\"$defs\":{\"order\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},"
    "\"qty\":{\"type\":\"integer\"},\"price\":{\"type\":\"number\"},\"gift\":{\"type\":"
    "\"boolean\"}},\"required\":[\"sku\",\"qty\",\"price\"],\"additionalProperties\":false}}}";

static const char nested_doc[] =
    "{\n"
    "  \"id\": 48213,\n"
    "  \"name\": \"Margarethe Okonkwo-Lindqvist\",\n"
    "  \"status\": \"active\",\n"
    "  \"tags\": [\"premium\", \"early adopter\", \"newsletter\", \"caf\xc3\xa9 \xe2\x98\x95\"],\n"
    "  \"address\": {\n"
    "    \"street\": \"17 Rue des Trois Fr\xc3\xa8res, b\xc3\xa2timent B\",\n"
    "    \"city\": \"Paris\",\n"
    "    \"zip\": \"75018\"\n"
    "  },\n"
    "  \"orders\": [\n"
    "    {\"sku\": \"KB-0042-BLK\", \"qty\": 2, \"price\": 89.9, \"gift\": false},\n"
    "    {\"sku\": \"MS-7781\", \"qty\": 1, \"price\": 24.5},\n"
    "    {\n"
    "      \"sku\": \"USB-C-2M\",\n"
    "      \"qty\": 12,\n"
    "      \"price\": 7.25e0\n"
    "    }\n"
    "  ],\n"
    "  \"note\": \"Leave the parcel with the concierge if nobody answers; she is in "
    "until 6 pm.\\nThanks!\"\n"
    "}";

static const char tool_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"const\":\"get_weather\"},"
    "\"arguments\":{\"type\":\"object\",\"properties\":{"
    "\"location\":{\"type\":\"string\"},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\"}},"
    "\"required\":[\"location\",\"unit\"],\"additionalProperties\":false}},"
    "\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false}";

static const char tool_doc[] =
    "I will look the forecast up for you.\n<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", \"unit\": "
    "\"celsius\", \"days\": 3}}\n</tool_call>";

struct bench {
	struct bpe *b;
	struct gvocab *gv;
	uint32_t n;
	uint32_t *bits;
	int reps;
	bool plain;
};

struct kase {
	const char *name;
	const char *doc;
	bool lazy;
	int (*make)(struct grammar **g, struct ig_errbuf *eb);
};

static int make_nested(struct grammar **g, struct ig_errbuf *eb)
{
	json_t *s = json_loads(nested_schema, 0, NULL);
	int rc = s ? gs_compile(s, g, eb) : ig_errf(eb, IG_E_INVAL, "bad schema text");

	json_decref(s);
	return rc;
}

/* After the trigger: a newline, the call's JSON, a newline, the closing tag. */
static int make_tool(struct grammar **g, struct ig_errbuf *eb)
{
	json_t *s = json_loads(tool_schema, 0, NULL);
	char *text = NULL, *full;
	const char *head = "root ::= \"\\n\" r0 \"\\n</tool_call>\"\n";
	int rc;

	if (!s)
		return ig_errf(eb, IG_E_INVAL, "bad schema text");
	rc = gs_to_gbnf(s, &text, eb);
	json_decref(s);
	if (rc)
		return rc;
	/* the schema's own first line is "root ::= r0": replace it */
	full = malloc(strlen(head) + strlen(text) + 1);
	if (!full) {
		free(text);
		return IG_E_NOMEM;
	}
	strcpy(full, head);
	strcat(full, strchr(text, '\n') + 1);
	rc = grammar_parse(full, strlen(full), "root", g, eb);
	free(full);
	free(text);
	return rc;
}

static void stats(const char *name, const char *what, double *t, size_t n)
{
	double sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += t[i];
	qsort(t, n, sizeof(*t), cmp_d);
	printf("%s_%s_mean_us=%.1f\n", name, what, sum / (double)n);
	printf("%s_%s_p50_us=%.1f\n", name, what, t[n / 2]);
	printf("%s_%s_p99_us=%.1f\n", name, what, t[(size_t)((double)(n - 1) * 0.99)]);
	printf("%s_%s_max_us=%.1f\n", name, what, t[n - 1]);
}

/* Walk the document once: the mask before each token, timed. */
static int walk(struct bench *B, const struct kase *k, struct grammar *g, const uint32_t *ids,
                size_t n_ids, double *mask_us, double *accept_us)
{
	struct ig_errbuf eb = {0};
	struct gmatch m;
	struct gm_lazy z;
	int rc;

	if (k->lazy)
		rc = gm_lazy_init(&z, g, "<tool_call>", 11, &eb);
	else
		rc = gm_init(&m, g, &eb);
	if (rc) {
		fprintf(stderr, PROG ": %s: %s\n", k->name, eb.msg);
		return 1;
	}
	for (size_t i = 0; i < n_ids; i++) {
		const uint8_t *p;
		size_t len;
		double t0 = now_us(), t1;
		bool ok;

		rc = k->lazy ? gm_lazy_mask(&z, B->gv, B->bits, &eb)
		             : gm_mask(&m, B->gv, B->bits, &eb);
		t1 = now_us();
		mask_us[i] = t1 - t0;
		if (rc) {
			fprintf(stderr, PROG ": %s: token %zu: %s\n", k->name, i, eb.msg);
			return 1;
		}
		if (!((B->bits[ids[i] >> 5] >> (ids[i] & 31)) & 1u)) {
			fprintf(stderr,
			        PROG ": %s: token %zu (id %u) of the document is masked off\n",
			        k->name, i, ids[i]);
			return 1;
		}
		bpe_piece(B->b, ids[i], false, &p, &len);
		t0 = now_us();
		ok = k->lazy ? gm_lazy_accept_bytes(&z, p, len) : gm_accept_bytes(&m, p, len);
		accept_us[i] = now_us() - t0;
		if (!ok) {
			fprintf(stderr, PROG ": %s: token %zu refused\n", k->name, i);
			return 1;
		}
	}
	if (!(k->lazy ? gm_lazy_can_end(&z) : gm_can_end(&m))) {
		fprintf(stderr, PROG ": %s: the document is not complete\n", k->name);
		return 1;
	}
	if (k->lazy)
		gm_lazy_release(&z);
	else
		gm_release(&m);
	return 0;
}

static int run_case(struct bench *B, const struct kase *k)
{
	struct ig_errbuf eb = {0};
	uint32_t ids[4096];
	size_t n_ids, tot;
	double *cold, *warm, *acc, acc_sum = 0, first = 0, first_max = 0;
	uint64_t n_class = 0;
	int rc = 1;

	if (bpe_encode(B->b, k->doc, strlen(k->doc), 0, ids, 4096, &n_ids, &eb)) {
		fprintf(stderr, PROG ": %s: %s\n", k->name, eb.msg);
		return 1;
	}
	tot = n_ids * (size_t)B->reps;
	cold = malloc(tot * sizeof(*cold));
	warm = malloc(tot * sizeof(*warm));
	acc = malloc(tot * sizeof(*acc));
	if (!cold || !warm || !acc)
		goto out;
	for (int r = 0; r < B->reps; r++) {
		struct grammar *g = NULL;

		if (k->make(&g, &eb)) {
			fprintf(stderr, PROG ": %s: %s\n", k->name, eb.msg);
			goto out;
		}
		grammar_set_class_masks(g, !B->plain);
		if (walk(B, k, g, ids, n_ids, cold + r * n_ids, acc + r * n_ids)) {
			grammar_destroy(g);
			goto out;
		}
		n_class += grammar_class_masks(g);
		if (walk(B, k, g, ids, n_ids, warm + r * n_ids, acc + r * n_ids)) {
			grammar_destroy(g);
			goto out;
		}
		if (r == 0)
			printf("%s_rules=%u\n%s_elements=%u\n", k->name, grammar_n_rules(g),
			       k->name, grammar_n_elems(g));
		grammar_destroy(g);
	}
	for (size_t i = 0; i < tot; i++)
		acc_sum += acc[i];
	for (size_t i = 0; i < n_ids; i++) {
		first += cold[i];
		first_max = cold[i] > first_max ? cold[i] : first_max;
	}
	printf("%s_tokens=%zu\n", k->name, n_ids);
	printf("%s_cold_first_mean_us=%.1f\n%s_cold_first_max_us=%.1f\n", k->name,
	       first / (double)n_ids, k->name, first_max);
	printf("%s_class_masks=%llu\n", k->name, (unsigned long long)n_class);
	stats(k->name, "cold", cold, tot);
	stats(k->name, "warm", warm, tot);
	printf("%s_accept_mean_us=%.2f\n", k->name, acc_sum / (double)tot);
	rc = 0;
out:
	free(cold);
	free(warm);
	free(acc);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct kase cases[] = {
	    {"nested", nested_doc, false, make_nested},
	    {"toolcall", tool_doc, true, make_tool},
	};
	struct bench B = {0};
	struct ig_errbuf eb = {0};
	struct gv_token *toks = NULL;
	struct gguf g;
	const char *path = NULL;
	double t0;
	int rc = 1;

	B.reps = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			B.reps = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--plain")) {
			B.plain = true;
		} else if (argv[i][0] != '-' && !path) {
			path = argv[i];
		} else {
			fprintf(stderr, "usage: " PROG " VOCAB.gguf [--reps N] [--plain]\n");
			return 2;
		}
	}
	if (!path || B.reps < 1) {
		fprintf(stderr, "usage: " PROG " VOCAB.gguf [--reps N] [--plain]\n");
		return 2;
	}
	if (gguf_open(&g, path, &eb) || bpe_open(&B.b, &g, &eb)) {
		fprintf(stderr, PROG ": %s: %s\n", path, eb.msg);
		return 1;
	}
	B.n = bpe_info(B.b)->n_tokens;
	toks = calloc(B.n, sizeof(*toks));
	if (!toks)
		goto out;
	for (uint32_t i = 0; i < B.n; i++) {
		enum bpe_type t = bpe_token_type(B.b, i);
		const uint8_t *p;
		size_t len;

		bpe_piece(B.b, i, false, &p, &len);
		toks[i].bytes = p;
		toks[i].len = (uint32_t)len;
		toks[i].special = t == BPE_CONTROL || t == BPE_UNKNOWN || t == BPE_UNUSED;
	}
	t0 = now_us();
	if (gv_build(&B.gv, toks, B.n, &eb)) {
		fprintf(stderr, PROG ": %s\n", eb.msg);
		goto out;
	}
	printf("vocab_tokens=%u\ntrie_nodes=%u\ntrie_build_ms=%.1f\n", B.n, gv_n_nodes(B.gv),
	       (now_us() - t0) / 1e3);
	B.bits = malloc(gv_mask_words(B.gv) * 4);
	if (!B.bits)
		goto out;
	rc = 0;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]) && !rc; c++)
		rc = run_case(&B, &cases[c]);
	if (!rc) {
		uint32_t n_cls, n_trig;
		size_t bytes;

		gv_class_stats(B.gv, &n_cls, &n_trig, &bytes);
		printf("vocab_class_sets=%u\nvocab_trigger_parts=%u\nvocab_class_kib=%zu\n", n_cls,
		       n_trig, bytes >> 10);
	}
out:
	free(B.bits);
	free(toks);
	gv_destroy(B.gv);
	bpe_close(B.b);
	gguf_close(&g);
	return rc;
}
