/*
 * ignis-vocab - the byte-level BPE tokenizers of real model files, from the
 * command line.
 *
 *   ignis-vocab convert TOKENIZER.json -o OUT.gguf [--arch NAME] [--pre NAME]
 *               [--n-vocab N] [--bos TEXT] [--eos TEXT] [--pad TEXT] [--add-bos]
 *               [--config TOKENIZER_CONFIG.json]
 *   ignis-vocab encode MODEL.gguf [--parse-special] [--add-special]  < text
 *   ignis-vocab decode MODEL.gguf [--special] ID...
 *   ignis-vocab info MODEL.gguf
 *
 * convert writes a vocabulary-only GGUF (general.architecture, default
 * "qwen3", and the tokenizer keys as llama.cpp's converter writes them:
 * model/hfvocab.h) from a Hugging Face tokenizer.json, so that a real
 * vocabulary can go into the files we write and llama.cpp can read it
 * (vocab_only), with the chat template of tokenizer_config.json when
 * given. encode prints the ids of its standard input, one line,
 * space-separated; decode writes the bytes of the ids' pieces (model/bpe.h)
 * as they are; info prints what the tokenizer holds.
 *
 * Exit status: 0 done, 1 the file is refused or cannot be written, 2 bad
 * arguments.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/bpe.h"
#include "model/gguf.h"
#include "model/hfvocab.h"

#define PROG "ignis-vocab"

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " convert TOKENIZER.json -o OUT.gguf [--arch NAME] [--pre NAME]\n"
	           "                   [--n-vocab N] [--bos TEXT] [--eos TEXT] [--pad TEXT] "
	           "[--add-bos]\n"
	           "                   [--config TOKENIZER_CONFIG.json]\n"
	           "       " PROG " encode MODEL.gguf [--parse-special] [--add-special] < text\n"
	           "       " PROG " decode MODEL.gguf [--special] ID...\n"
	           "       " PROG " info MODEL.gguf\n");
}

static int convert(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'}, {"arch", required_argument, NULL, 'a'},
	    {"pre", required_argument, NULL, 'p'},    {"n-vocab", required_argument, NULL, 'n'},
	    {"bos", required_argument, NULL, 'b'},    {"eos", required_argument, NULL, 'e'},
	    {"pad", required_argument, NULL, 'd'},    {"add-bos", no_argument, NULL, 'B'},
	    {"config", required_argument, NULL, 'c'}, {NULL, 0, NULL, 0}};
	struct hfvocab_opts o = {0};
	struct hfvocab_stats st;
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	const char *out = NULL, *arch = "qwen3";
	int c;

	while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'a': arch = optarg; break;
		case 'p': o.pre = optarg; break;
		case 'n': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);

			if (*end || !*optarg || v == 0 || v > BPE_MAX_TOKENS) {
				fprintf(stderr, PROG ": --n-vocab '%s': a count of 1 to %u\n", optarg,
				        BPE_MAX_TOKENS);
				return 2;
			}
			o.n_vocab = (uint32_t)v;
			break;
		}
		case 'b': o.bos = optarg; break;
		case 'e': o.eos = optarg; break;
		case 'd': o.pad = optarg; break;
		case 'B': o.add_bos = true; break;
		case 'c': o.config = optarg; break;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc || !out) {
		usage(stderr);
		return 2;
	}
	gguf_writer_init(&w);
	gguf_writer_add_str(&w, "general.architecture", arch);
	gguf_writer_add_str(&w, "general.name", "vocabulary");
	if (hfvocab_add(&w, argv[optind], &o, &st, &eb) || gguf_writer_write(&w, out, &eb)) {
		fprintf(stderr, PROG ": %s\n", eb.msg);
		gguf_writer_release(&w);
		return 1;
	}
	gguf_writer_release(&w);
	printf("%s: %u tokens of the vocabulary, %u added (%u special), %u padding, %u merges\n",
	       out, st.n_tokens, st.n_added, st.n_special, st.n_padding, st.n_merges);
	return 0;
}

static int open_bpe(const char *path, struct gguf *g, struct bpe **b)
{
	struct ig_errbuf eb = {0};

	if (gguf_open(g, path, &eb)) {
		fprintf(stderr, PROG ": %s\n", eb.msg);
		return 1;
	}
	if (bpe_open(b, g, &eb)) {
		fprintf(stderr, PROG ": %s: %s\n", path, eb.msg);
		gguf_close(g);
		return 1;
	}
	return 0;
}

static int encode(int argc, char **argv)
{
	static const struct option opts[] = {{"parse-special", no_argument, NULL, 'p'},
	                                     {"add-special", no_argument, NULL, 'a'},
	                                     {NULL, 0, NULL, 0}};
	unsigned flags = 0;
	struct gguf g;
	struct bpe *b;
	struct ig_errbuf eb = {0};
	char *text = NULL;
	size_t len = 0, cap = 0, n;
	uint32_t *ids;
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'p')
			flags |= BPE_PARSE_SPECIAL;
		else if (c == 'a')
			flags |= BPE_ADD_SPECIAL;
		else {
			usage(stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return 2;
	}
	for (;;) {
		size_t got;

		if (len == cap) {
			char *t = realloc(text, cap = cap ? 2 * cap : 65536);

			if (!t) {
				free(text);
				fprintf(stderr, PROG ": out of memory\n");
				return 1;
			}
			text = t;
		}
		if (!(got = fread(text + len, 1, cap - len, stdin)))
			break;
		len += got;
	}
	if (open_bpe(argv[optind], &g, &b)) {
		free(text);
		return 1;
	}
	bpe_encode(b, text, len, flags, NULL, 0, &n, &eb);
	if (!(ids = malloc((n ? n : 1) * sizeof(uint32_t))) ||
	    bpe_encode(b, text, len, flags, ids, n, &n, &eb)) {
		fprintf(stderr, PROG ": %s\n", ids ? eb.msg : "out of memory");
		rc = 1;
	} else {
		for (size_t i = 0; i < n; i++)
			printf(i ? " %u" : "%u", ids[i]);
		printf("\n");
	}
	free(ids);
	free(text);
	bpe_close(b);
	gguf_close(&g);
	return rc;
}

static int decode(int argc, char **argv)
{
	static const struct option opts[] = {{"special", no_argument, NULL, 's'},
	                                     {NULL, 0, NULL, 0}};
	bool special = false;
	struct gguf g;
	struct bpe *b;
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c != 's') {
			usage(stderr);
			return 2;
		}
		special = true;
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (open_bpe(argv[optind], &g, &b))
		return 1;
	for (int i = optind + 1; i < argc && !rc; i++) {
		char *end;
		unsigned long id = strtoul(argv[i], &end, 10);
		const uint8_t *p;
		size_t n;

		if (*end || !*argv[i] || id > UINT32_MAX ||
		    !bpe_piece(b, (uint32_t)id, special, &p, &n)) {
			fprintf(stderr, PROG ": '%s' is not a token id below %u\n", argv[i],
			        bpe_info(b)->n_tokens);
			rc = 2;
		} else
			fwrite(p, 1, n, stdout);
	}
	bpe_close(b);
	gguf_close(&g);
	return rc;
}

static int info(int argc, char **argv)
{
	const struct bpe_info *in;
	struct gguf g;
	struct bpe *b;

	if (argc != 2) {
		usage(stderr);
		return 2;
	}
	if (open_bpe(argv[1], &g, &b))
		return 1;
	in = bpe_info(b);
	printf("tokens %u\nmerges %u\nspecials %u\npre %s\nadd_bos %s\n", in->n_tokens, in->n_merges,
	       in->n_specials, bpe_pre_name(in->pre), in->add_bos ? "true" : "false");
	printf("end of generation");
	for (uint32_t k = 0; k < in->n_eog; k++) {
		size_t len;
		const char *t = bpe_text(b, in->eog[k], &len);

		printf(" %u:%.*s", in->eog[k], (int)len, t);
	}
	printf("\n");
	bpe_close(b);
	gguf_close(&g);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "convert"))
		return convert(argc - 1, argv + 1);
	if (!strcmp(argv[1], "encode"))
		return encode(argc - 1, argv + 1);
	if (!strcmp(argv[1], "decode"))
		return decode(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return info(argc - 1, argv + 1);
	fprintf(stderr, PROG ": unknown command '%s'; commands: convert, encode, decode, info\n",
	        argv[1]);
	return 2;
}
