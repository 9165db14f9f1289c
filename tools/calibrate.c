/*
 * ignis-calibrate - route a calibration text through a MoE model and write
 * how often each expert was chosen beside the model (`<model>.experts`,
 * model/expcounts.h), from which the worker pins the hottest experts
 * (--vram-pinned-expert-bytes; docs/adr/0039).
 *
 *   ignis-calibrate --model FILE (--text FILE | --prompt TEXT) [-o OUT]
 *                   [--backend NAME] [--threads N]
 *
 * The text is tokenized with the model's own tokenizer and run through the
 * model in windows of its context (prefill only, in rounds of CAL_CHUNK
 * tokens: every token's routing is counted, top_k experts a token a
 * layer), on the backend named (cpu by default) through the backend table
 * in this process (tools/bemodel.h): its experts resident in the device's
 * expert cache, which counts the tokens routed to each (expert_counts).
 * Counts are tokens routed, layer by layer.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/bpe.h"
#include "model/expcounts.h"
#include "model/tokenizer.h"
#include "bemodel.h"

#define CAL_CHUNK 128u

static int die(const char *msg)
{
	fprintf(stderr, "ignis-calibrate: %s\n", msg);
	return 1;
}

static void usage(FILE *f)
{
	fputs("usage: ignis-calibrate --model FILE (--text FILE | --prompt TEXT) [-o OUT]\n"
	      "                       [--backend NAME] [--threads N]\n"
	      "Route a calibration text through a MoE model and write how often each expert\n"
	      "was chosen to OUT (default: the model's path and \".experts\"), where the\n"
	      "worker looks for them to pin the hottest (--vram-pinned-expert-bytes).\n"
	      "The model runs on --backend (cpu, the default, or another of this build's).\n",
	      f);
}

static char *slurp(const char *path, size_t *n)
{
	FILE *in = fopen(path, "rb");
	char *buf = NULL;
	long len;

	if (!in)
		return NULL;
	if (fseek(in, 0, SEEK_END) == 0 && (len = ftell(in)) >= 0 && fseek(in, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, in) == (size_t)len) {
		buf[len] = '\0';
		*n = (size_t)len;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(in);
	return buf;
}

/* Route the text through the model on `backend` and write the counts to
 * `out` (NULL: beside the model); 0 done, 1 failed (said on stderr).
 * Everything taken is given back on every path. */
static int calibrate(const char *model, const char *text, size_t n_text, const char *out,
                     const char *backend, uint32_t threads)
{
	struct ig_errbuf eb = {0};
	struct mfile f;
	struct bpe *bpe = NULL;
	struct bem r = {0};
	struct be_seq s = {0};
	char path[4200];
	uint32_t *ids = NULL, pages;
	uint64_t ctx, total = 0, *counts = NULL, n_counts;
	size_t n_ids;
	int rc = 1;

	if (mfile_open(&f, model, &eb))
		return die(eb.msg);
	if (f.desc.family != MDESC_MOE) {
		ig_errf(&eb, IG_E_INVAL, "the model has no routed experts: nothing to calibrate");
		goto out_err;
	}
	if (f.desc.tokenizer == MDESC_TOK_NONE) {
		ig_errf(&eb, IG_E_INVAL,
		        "the model has no tokenizer (tokenizer none): a text needs one");
		goto out_err;
	}
	if (f.desc.tokenizer == MDESC_TOK_GPT2 && bpe_open(&bpe, &f.g, &eb))
		goto out_err;
	n_counts = (uint64_t)f.desc.layers * f.desc.experts;
	ids = malloc((n_text + 1) * sizeof(uint32_t));
	counts = calloc(n_counts, sizeof(uint64_t));
	if (!ids || !counts) {
		ig_errf(&eb, IG_E_NOMEM, "no host memory for the tokens and the counts");
		goto out_err;
	}
	if (bpe ? bpe_encode(bpe, text, n_text, BPE_PARSE_SPECIAL | BPE_ADD_SPECIAL, ids,
	                     n_text + 1, &n_ids, &eb)
	        : tok_encode(text, n_text, 0, ids, n_text + 1, &n_ids, &eb))
		goto out_err;
	if (!n_ids) {
		ig_errf(&eb, IG_E_INVAL, "the calibration text is no tokens");
		goto out_err;
	}
	/* windows of the model's context, a sequence each */
	ctx = f.desc.default_context < n_ids ? f.desc.default_context : n_ids;
	pages = (uint32_t)mdesc_pages_for(ctx);
	if (bem_open(&r, &f,
	             &(struct bem_opts){.backend = backend,
	                                .max_round_tokens = CAL_CHUNK,
	                                .context = ctx,
	                                .threads = threads,
	                                .states = 1,
	                                .pages = pages,
	                                .fmt = MDESC_KV_BF16},
	             &eb))
		goto out_err;
	for (size_t w = 0; w < n_ids; w += ctx) {
		size_t end = w + ctx < n_ids ? w + ctx : n_ids;

		if (bem_seq_open(&r, &s, 1, pages, &eb))
			goto out_err;
		for (size_t t = w; t < end; t += CAL_CHUNK) {
			uint32_t n = (uint32_t)(end - t < CAL_CHUNK ? end - t : CAL_CHUNK);
			struct be_step step = {&s, ids + t, n, false}; /* routing only */

			if (bem_round(&r, &step, 1, NULL, &eb))
				goto out_err;
		}
		bem_seq_close(&r, &s);
	}
	if (r.be.ops->expert_counts(&r.be, &r.d, counts, n_counts) != n_counts) {
		ig_errf(&eb, IG_E_INVAL, "the %s backend kept no counts of the experts' routing",
		        r.be.ops->name);
		goto out_err;
	}
	if (!out) {
		if (expcounts_path(path, sizeof(path), model, &eb))
			goto out_err;
		out = path;
	}
	if (expcounts_write(out, &f, counts, &eb))
		goto out_err;
	for (uint64_t i = 0; i < n_counts; i++)
		total += counts[i];
	printf("ignis-calibrate: %zu tokens routed through %u layers (%" PRIu64
	       " choices of %u experts a layer) into %s\n",
	       n_ids, f.desc.layers, total, f.desc.experts, out);
	rc = 0;
	goto out;
out_err:
	die(eb.msg);
out:
	bem_seq_close(&r, &s);
	bem_close(&r);
	bpe_close(bpe);
	mfile_close(&f);
	free(ids);
	free(counts);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"model", required_argument, NULL, 'm'},   {"text", required_argument, NULL, 'T'},
	    {"prompt", required_argument, NULL, 'p'},  {"output", required_argument, NULL, 'o'},
	    {"threads", required_argument, NULL, 'j'}, {"backend", required_argument, NULL, 'b'},
	    {"help", no_argument, NULL, 'h'},          {0, 0, 0, 0}};
	const char *model = NULL, *text_file = NULL, *out = NULL, *backend = "cpu";
	char *text = NULL;
	size_t n_text = 0;
	int threads = 1, c, rc;

	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			model = optarg;
			break;
		case 'T':
			text_file = optarg;
			break;
		case 'p':
			text = optarg;
			n_text = strlen(optarg);
			break;
		case 'o':
			out = optarg;
			break;
		case 'b':
			backend = optarg;
			break;
		case 'j':
			threads = atoi(optarg);
			if (threads < 1 || threads > 256) {
				fprintf(stderr,
				        "ignis-calibrate: --threads '%s'; accepted: 1 to 256\n",
				        optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!model || (!text_file) == (!text) || optind < argc) {
		usage(stderr);
		return 2;
	}
	if (text_file && !(text = slurp(text_file, &n_text))) {
		fprintf(stderr, "ignis-calibrate: cannot read '%s': %s\n", text_file,
		        strerror(errno));
		return 1;
	}
	rc = n_text ? calibrate(model, text, n_text, out, backend, (uint32_t)threads)
	            : die("the calibration text is empty");
	if (text_file)
		free(text);
	return rc;
}
