/*
 * test_hfvocab.c - a Hugging Face tokenizer.json turned into GGUF's
 * tokenizer keys (model/hfvocab.h, ignis-vocab convert) on small files
 * written here: ids that leave holes become padding tokens, within the
 * bound the file's own tokens set; ids far past what the file holds, ids
 * that are not whole numbers, and ids past --n-vocab are refused naming the
 * entry and the id (issue 26, item 8: a 3 KB file made a 2^24-token
 * vocabulary). The real Qwen3 vocabulary is test_bpe_oracle.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/bpe.h"
#include "model/gguf.h"
#include "model/hfvocab.h"

static char json_path[64], gguf_path[64];

/* GPT-2's byte alphabet, written again here from its definition. */
static uint32_t byte_char(unsigned b)
{
	unsigned k = 0;

	if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))
		return b;
	for (unsigned i = 0; i < b; i++)
		k += !((i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) ||
		       (i >= 0xae && i <= 0xff));
	return 0x100 + k;
}

/*
 * A tokenizer.json: the 256 byte tokens (ids 0..255), "Ġt" 256, "he" 257,
 * "<|endoftext|>" 258 (259 tokens, as the reporter's), the merges "Ġ t" and
 * "h e", and `added` (JSON objects, comma-separated; "" none) as its
 * added_tokens. `extra` goes into model.vocab after the others ("" none).
 */
static void write_json(const char *added, const char *extra)
{
	FILE *f = fopen(json_path, "w");

	assert_non_null(f);
	fprintf(f, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
	for (unsigned b = 0; b < 256; b++) {
		uint32_t cp = byte_char(b);

		/* JSON escapes for '"' and '\\'; the rest as UTF-8 */
		if (cp == '"' || cp == '\\')
			fprintf(f, "\"\\%c\": %u, ", (char)cp, b);
		else if (cp < 0x80)
			fprintf(f, "\"%c\": %u, ", (char)cp, b);
		else
			fprintf(f, "\"%c%c\": %u, ", (char)(0xc0 | cp >> 6),
			        (char)(0x80 | (cp & 0x3f)), b);
	}
	fprintf(f, "\"\xc4\xa0t\": 256, \"he\": 257, \"<|endoftext|>\": 258%s%s}, ",
	        *extra ? ", " : "", extra);
	fprintf(f, "\"merges\": [\"\xc4\xa0 t\", \"h e\"]}, \"added_tokens\": [%s]}", added);
	assert_int_equal(fclose(f), 0);
}

static void test_ids(void **state)
{
	static const struct {
		const char *name;
		const char *added, *extra;
		uint32_t n_vocab;
		int want;
		uint32_t padding; /* IG_E_OK: the padding tokens written */
		const char *words[3];
	} rows[] = {
	    {"dense ids",
	     "{\"id\": 259, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_OK,
	     0,
	     {NULL}},
	    {"an added token already in the vocabulary",
	     "{\"id\": 258, \"content\": \"<|endoftext|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_OK,
	     0,
	     {NULL}},
	    /* 260 entries given: ids up to 519, the holes padding */
	    {"holes up to the tokens given",
	     "{\"id\": 519, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_OK,
	     260,
	     {NULL}},
	    {"padded to --n-vocab", "", "", 4096, IG_E_OK, 4096 - 259, {NULL}},
	    {"an id below --n-vocab, past the entries' bound",
	     "{\"id\": 4000, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     4096,
	     IG_E_OK,
	     4096 - 260,
	     {NULL}},
	    /* the reporter's: 408 MB of vocabulary from 3 KB */
	    {"an added id of 2^24 - 1",
	     "{\"id\": 16777215, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_INVAL,
	     0,
	     {"added_tokens[0] ('<|im_end|>') has id 16777215", "260 tokens",
	      "accepted: ids below 520"}},
	    {"an added id one past the bound",
	     "{\"id\": 520, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_INVAL,
	     0,
	     {"has id 520", "accepted: ids below 520", "--n-vocab"}},
	    {"a vocabulary id of 2^24 - 1",
	     "",
	     "\"far\": 16777215",
	     0,
	     IG_E_INVAL,
	     0,
	     {"model.vocab['far'] has id 16777215", "accepted: ids below 520"}},
	    {"a vocabulary id past the most tokens",
	     "",
	     "\"far\": 1048576",
	     0,
	     IG_E_INVAL,
	     0,
	     {"model.vocab['far'] has id 1048576", "accepted: ids below 520"}},
	    {"an id past --n-vocab",
	     "{\"id\": 4096, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     4096,
	     IG_E_INVAL,
	     0,
	     {"has id 4096", "accepted: ids below 4096 (--n-vocab)"}},
	    {"an added id that is not a number",
	     "{\"id\": \"259\", \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_INVAL,
	     0,
	     {"added_tokens[0]", "id is not a whole number"}},
	    {"an added id that is negative",
	     "{\"id\": -1, \"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_INVAL,
	     0,
	     {"added_tokens[0] ('<|im_end|>') has id -1", "accepted: ids below 520"}},
	    {"an added token without an id",
	     "{\"content\": \"<|im_end|>\", \"special\": true}",
	     "",
	     0,
	     IG_E_INVAL,
	     0,
	     {"added_tokens[0]", "id is not a whole number"}},
	};
	int failures = 0;

	(void)state;
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct hfvocab_opts o = {.n_vocab = rows[i].n_vocab};
		struct hfvocab_stats st;
		struct gguf_writer w;
		struct ig_errbuf eb = {0};
		int rc;

		write_json(rows[i].added, rows[i].extra);
		gguf_writer_init(&w);
		gguf_writer_add_str(&w, "general.architecture", "qwen3");
		rc = hfvocab_add(&w, json_path, &o, &st, &eb);
		if (rc != rows[i].want) {
			printf("FAIL %s: %s, wanted %s: %s\n", rows[i].name, ig_err_name(rc),
			       ig_err_name(rows[i].want), rc ? eb.msg : "");
			failures++;
		} else if (rc == IG_E_OK) {
			struct gguf g;
			struct bpe *b = NULL;

			if (st.n_padding != rows[i].padding) {
				printf("FAIL %s: %u padding tokens, wanted %u\n", rows[i].name,
				       st.n_padding, rows[i].padding);
				failures++;
			}
			/* what it wrote is a vocabulary we open */
			if (gguf_writer_write(&w, gguf_path, &eb) ||
			    gguf_open(&g, gguf_path, &eb)) {
				printf("FAIL %s: %s\n", rows[i].name, eb.msg);
				failures++;
			} else {
				if (bpe_open(&b, &g, &eb)) {
					printf("FAIL %s: %s\n", rows[i].name, eb.msg);
					failures++;
				}
				bpe_close(b);
				gguf_close(&g);
			}
		} else {
			for (int k = 0; k < 3 && rows[i].words[k]; k++)
				if (!strstr(eb.msg, rows[i].words[k])) {
					printf("FAIL %s: message lacks '%s': %s\n", rows[i].name,
					       rows[i].words[k], eb.msg);
					failures++;
				}
			if (!strstr(eb.msg, json_path)) {
				printf("FAIL %s: message does not name the file: %s\n",
				       rows[i].name, eb.msg);
				failures++;
			}
		}
		gguf_writer_release(&w);
	}
	unlink(json_path);
	unlink(gguf_path);
	assert_int_equal(failures, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_ids)};

	snprintf(json_path, sizeof json_path, "/tmp/test-hfvocab-%d.json", (int)getpid());
	snprintf(gguf_path, sizeof gguf_path, "/tmp/test-hfvocab-%d.gguf", (int)getpid());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
