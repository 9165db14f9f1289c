/*
 * ignis-calibrate - route a calibration text through a MoE model and write
 * how often each expert was chosen beside the model (`<model>.experts`,
 * model/expcounts.h), from which the worker pins the hottest experts
 * (--vram-pinned-expert-bytes; docs/adr/0039).
 *
 *   ignis-calibrate --model FILE (--text FILE | --prompt TEXT) [-o OUT] [--threads N]
 *
 * The text is tokenized with the model's own tokenizer and run through the
 * model in windows of its context (prefill only: every token's routing is
 * counted, top_k experts a token a layer), on the cpu backend in this
 * process. Counts are tokens routed, layer by layer.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/backend/cpu/model_cpu.h"
#include "model/bpe.h"
#include "model/expcounts.h"
#include "model/tokenizer.h"

#define CAL_CHUNK 128u

struct cal {
	const struct mdl *d;
	uint64_t *counts; /* layers x experts */
	struct lffn_experts iface;
};

static int cal_prepare(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n,
                       struct ig_errbuf *eb)
{
	struct cal *c = ctx;

	(void)eb;
	for (uint32_t i = 0; i < n; i++)
		c->counts[(uint64_t)layer * c->d->m->experts + ids[i]]++;
	return IG_E_OK;
}

/* In place: each tensor's slice, as the feed-forward reads it uncached. */
static void cal_get(void *ctx, uint32_t layer, uint32_t e, struct cop_w w[3])
{
	const struct cal *c = ctx;
	const struct lffn_weights *f = &c->d->layers[layer].ffn;
	size_t hidden = c->d->m->hidden, inter = c->d->m->expert_inter;

	w[0] = cop_w_rows(f->gate_exps, hidden, (size_t)e * inter);
	w[1] = cop_w_rows(f->up_exps, hidden, (size_t)e * inter);
	w[2] = cop_w_rows(f->down_exps, inter, (size_t)e * hidden);
}

static int die(const char *msg)
{
	fprintf(stderr, "ignis-calibrate: %s\n", msg);
	return 1;
}

static void usage(FILE *f)
{
	fputs("usage: ignis-calibrate --model FILE (--text FILE | --prompt TEXT) [-o OUT]\n"
	      "                       [--threads N]\n"
	      "Route a calibration text through a MoE model and write how often each expert\n"
	      "was chosen to OUT (default: the model's path and \".experts\"), where the\n"
	      "worker looks for them to pin the hottest (--vram-pinned-expert-bytes).\n",
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
	                                     {"text", required_argument, NULL, 'T'},
	                                     {"prompt", required_argument, NULL, 'p'},
	                                     {"output", required_argument, NULL, 'o'},
	                                     {"threads", required_argument, NULL, 'j'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0, 0, 0, 0}};
	const char *model = NULL, *text_file = NULL, *out = NULL;
	char *text = NULL, path[4200];
	size_t n_text = 0, n_ids;
	int threads = 1, c, err;
	struct ig_errbuf eb;
	struct mfile f;
	struct bpe *bpe = NULL;
	struct mdl d;
	struct kvpool kv;
	struct cpool *pool;
	struct cal cal = {0};
	uint32_t *ids, pages;
	uint64_t ctx, total = 0;
	float *logits;
	void *scratch, *region;

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
	if (!n_text)
		return die("the calibration text is empty");
	if (mfile_open(&f, model, &eb) || mdl_bind(&d, &f, &eb))
		return die(eb.msg);
	if (f.desc.family != MDESC_MOE)
		return die("the model has no routed experts: nothing to calibrate");
	if (f.desc.tokenizer == MDESC_TOK_NONE)
		return die("the model has no tokenizer (tokenizer none): a text needs one");
	if (f.desc.tokenizer == MDESC_TOK_GPT2 && bpe_open(&bpe, &f.g, &eb))
		return die(eb.msg);
	ids = malloc((n_text + 1) * sizeof(uint32_t));
	if (!ids)
		return die("no memory for the tokens");
	if (bpe ? bpe_encode(bpe, text, n_text, BPE_PARSE_SPECIAL | BPE_ADD_SPECIAL, ids,
	                     n_text + 1, &n_ids, &eb)
	        : tok_encode(text, n_text, 0, ids, n_text + 1, &n_ids, &eb))
		return die(eb.msg);
	/* windows of the model's context */
	ctx = f.desc.default_context < n_ids ? f.desc.default_context : n_ids;
	pages = (uint32_t)mdesc_pages_for(ctx);
	cal.d = &d;
	cal.counts = calloc((size_t)f.desc.layers * f.desc.experts, sizeof(uint64_t));
	cal.iface = (struct lffn_experts){cal_prepare, cal_get, NULL, &cal};
	d.experts = &cal.iface;
	region = calloc(pages, mdesc_page_bytes(&f.desc, MDESC_KV_BF16));
	logits = malloc(f.desc.vocab * sizeof(float));
	scratch = aligned_alloc(64, (mdl_scratch_bytes(d.m, CAL_CHUNK, ctx) + 63) / 64 * 64);
	if (!cal.counts || !region || !logits || !scratch)
		return die("no host memory for the run");
	if (kvpool_init(&kv, region, mdesc_page_bytes(&f.desc, MDESC_KV_BF16), pages, &eb) ||
	    cpool_create(&pool, threads, &eb))
		return die(eb.msg);
	for (size_t w = 0; w < n_ids; w += ctx) {
		size_t end = w + ctx < n_ids ? w + ctx : n_ids;
		struct be_seq s = {0};

		if (mdl_seq_init(&d, &s, &eb))
			return die(eb.msg);
		if (!kvpool_try_reserve(&kv, &s.kv, 1, pages, &err))
			return die("the KV pool cannot hold a window");
		for (size_t t = w; t < end; t += CAL_CHUNK) {
			uint32_t n = (uint32_t)(end - t < CAL_CHUNK ? end - t : CAL_CHUNK);

			if (mdl_forward(&d, &s, ids + t, n, MDESC_KV_BF16, &kv, ctx, logits,
			                scratch, pool, &eb))
				return die(eb.msg);
		}
		mdl_seq_release(&s);
		kvpool_free(&kv, &s.kv);
	}
	if (!out) {
		if (expcounts_path(path, sizeof(path), model, &eb))
			return die(eb.msg);
		out = path;
	}
	if (expcounts_write(out, &f, cal.counts, &eb))
		return die(eb.msg);
	for (uint64_t i = 0; i < (uint64_t)f.desc.layers * f.desc.experts; i++)
		total += cal.counts[i];
	printf("ignis-calibrate: %zu tokens routed through %u layers (%" PRIu64
	       " choices of %u experts a layer) into %s\n",
	       n_ids, f.desc.layers, total, f.desc.experts, out);
	cpool_destroy(pool);
	kvpool_release(&kv);
	mdl_release(&d);
	bpe_close(bpe);
	mfile_close(&f);
	free(ids);
	free(region);
	free(logits);
	free(scratch);
	free(cal.counts);
	if (text_file)
		free(text);
	return 0;
}
