/*
 * ignis-generate - the developer's path to generate: one prompt, one
 * sequence, tokens to stdout as they come.
 *
 *   ignis-generate --model FILE --prompt TEXT [--backend NAME] [--max-tokens N]
 *                  [--seed S] [--temperature T] [--top-k K] [--top-p P]
 *                  [--threads N] [--chunk N] [--kv-format bf16|fp8|compact]
 *   ignis-generate --worker [--runtime-dir DIR] --prompt TEXT [--class agent]
 *                  [--max-tokens N] [--seed S] [--temperature T] [--top-k K] [--top-p P]
 *                  [--ids]
 *
 * The first runs the model in this process, on the backend named (cpu by
 * default) through the backend table as the worker does (tools/bemodel.h:
 * the weights placed on the backend, a MoE model's experts resident, the
 * KV pool in its memory, the prompt in rounds of --chunk tokens, then a
 * round a token). The second submits the prompt to
 * the running gpu-worker over its control socket (submit, then poll from the
 * last token received until done: docs/protocol.md) and prints the text the
 * worker sends with the tokens as it comes; --ids prints the token ids
 * instead, one per line. In this process the text is the worker's decoder's
 * (tok_text_delta), so both print the same bytes.
 *
 * The same arguments give the same text, whatever --threads and --chunk say,
 * and the worker gives the same text as this process on the same backend.
 *
 * Counts (--max-tokens, --top-k, --threads, --chunk) take K, M, G and T
 * suffixes as the knobs' counts do (common/bytesize.h: 1K = 1024).
 * --temperature and --top-p are read as doubles and checked as sent
 * (smp_params_set). Exit codes: 0 done, 1 failed, 2 bad usage.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bytesize.h"
#include "common/rtdir.h"
#include "gpu-worker/engine/sampler.h"
#include "model/bpe.h"
#include "model/tokenizer.h"
#include "proto/transport.h"
#include "bemodel.h"

static int die(const char *msg)
{
	fprintf(stderr, "ignis-generate: %s\n", msg);
	return 1;
}

#define GEN__STR2(x) #x
#define GEN__STR(x)  GEN__STR2(x)

#define USAGE                                                                                      \
	"usage: ignis-generate --model FILE --prompt TEXT [--backend NAME] [--max-tokens N]\n"     \
	"                      [--seed S] [--temperature T] [--top-k K] [--top-p P]\n"             \
	"                      [--threads N] [--chunk N] [--kv-format bf16|fp8|compact]\n"         \
	"                      [--kv-window N] [--kv-sinks N]\n"                                   \
	"   or: ignis-generate --worker [--runtime-dir DIR] --prompt TEXT\n"                       \
	"                      [--class interactive|agent] [--max-tokens N] [--seed S]\n"          \
	"                      [--temperature T] [--top-k K] [--top-p P] [--ids]\n"

static void usage(FILE *f)
{
	fputs(USAGE, f);
	if (f != stdout)
		return;
	fputs(
	    "\n"
	    "The first runs the model file in this process on a backend of this build; the second\n"
	    "sends the prompt to the running gpu-worker (its runtime directory: --runtime-dir,\n"
	    "else $IGNIS_RUNTIME_DIR, else the default) and prints its tokens as they come.\n"
	    "\n"
	    "  --backend NAME   the backend that runs the model in this process: cpu (the\n"
	    "                   default) or another of this build's\n"
	    "  --max-tokens N   tokens to generate (default 64)\n"
	    "  --seed S         the sampler's seed (default 1)\n"
	    "  --temperature T  0 (greedy, the default) to 100\n"
	    "  --top-k K        keep the K largest logits; 0 (the default) keeps all\n"
	    "  --top-p P        above 0 up to 1 (the default: keeps all)\n"
	    "  --threads N      1 to 256 (default 1)\n"
	    "  --chunk N        prompt tokens a round (default 64)\n"
	    "  --kv-format F    bf16 (the default), fp8, compact or compact1\n"
	    "  --kv-window N    compact only: the newest tokens attention reads in bf16, as\n"
	    "                   the server's --model-kv-window (default " GEN__STR(
	        MDESC_KV_WINDOW_DEFAULT) "; 0: none)\n"
	                                 "  --kv-sinks N     compact only: the first tokens kept "
	                                 "in bf16, as the\n"
	                                 "                   server's --model-kv-sinks "
	                                 "(default " GEN__STR(
	                                     MDESC_KV_SINKS_DEFAULT) ")\n"
	                                                             "  --class C        "
	                                                             "interactive (the default) or "
	                                                             "agent (--worker)\n"
	                                                             "  --ids            print "
	                                                             "token ids, one a line "
	                                                             "(--worker)\n"
	                                                             "  -h, --help       this "
	                                                             "text\n"
	                                                             "Counts take K, M, G or T "
	                                                             "(binary: 1K = 1024), as the "
	                                                             "knobs do.\n"
	                                                             "Exit status: 0 done, 1 "
	                                                             "failed, 2 bad usage.\n",
	    f);
}

/* A count in lo..hi (a whole number, K/M/G/T suffixes as the knobs' counts
 * take), or exit 2 naming the option and what is accepted. */
static unsigned long long num(const char *opt, const char *arg, unsigned long long lo,
                              unsigned long long hi)
{
	struct ig_errbuf eb;
	struct bsize b;

	if (bsize_parse(arg, false, &b, &eb) || b.n < lo || b.n > hi) {
		fprintf(stderr,
		        "ignis-generate: %s '%s'; accepted: a whole number in %llu..%llu (K, M, "
		        "G, T suffixes: 1K = 1024)\n",
		        opt, arg, lo, hi);
		exit(2);
	}
	return b.n;
}

/* The seed: any 64-bit value, in decimal or 0x hex (no suffixes: a seed is
 * not a count), or exit 2. */
static uint64_t seed_of(const char *arg)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(arg, &end, 0);
	if (errno || end == arg || *end || arg[0] == '-') {
		fprintf(stderr,
		        "ignis-generate: --seed '%s'; accepted: a whole number in "
		        "0..18446744073709551615\n",
		        arg);
		exit(2);
	}
	return v;
}

/* A number as sent (smp_params_set checks its range), or exit 2. */
static double real(const char *opt, const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || isspace((unsigned char)arg[0])) {
		fprintf(stderr, "ignis-generate: %s '%s' is not a number\n", opt, arg);
		exit(2);
	}
	return v;
}

struct remote {
	const char *rtdir; /* NULL: the default runtime directory */
	const char *cls;
	bool ids;
	double temperature, top_p; /* as given: the worker checks what was sent */
};

/* Submit to the running worker and print what comes back. */
static int generate_remote(const struct remote *r, const char *prompt, unsigned max_tokens,
                           const struct smp_params *sp)
{
	char dir[RTDIR_PATH_MAX + 1];
	struct ig_errbuf eb;
	struct msg q = {0};
	struct tp_rx rx;
	nng_socket s;
	uint64_t id;
	uint32_t from = 0;
	int rc;

	if (rtdir_resolve(r->rtdir, NULL, NULL, dir, sizeof(dir), &eb))
		return die(eb.msg);
	{
		char sock[RTDIR_PATH_MAX + 32], lock[RTDIR_PATH_MAX + 32];

		snprintf(sock, sizeof(sock), "%s/gpu-worker.sock", dir);
		snprintf(lock, sizeof(lock), "%s/gpu-worker.lock", dir);
		if (tp_reach(sock, lock, "gpu-worker", &eb) ||
		    tp_dial(&s, dir, "gpu-worker", 5000, &eb))
			return die(eb.msg);
	}
	q.type = MSG_SUBMIT;
	q.u.submit.text = msg_str_of(prompt);
	q.u.submit.max_tokens = max_tokens;
	q.u.submit.class = msg_str_of(r->cls);
	q.u.submit.temperature = r->temperature;
	q.u.submit.top_p = r->top_p;
	q.u.submit.top_k = sp->top_k;
	q.u.submit.seed = sp->seed;
	rc = tp_call(s, &q, &rx, &eb);
	if (rc || rx.m.type != MSG_SUBMITTED) {
		if (!rc)
			ig_errf(&eb, IG_E_PROTO_UNEXPECTED, "the worker answered '%s' to a submit",
			        msg_type_name(rx.m.type));
		tp_rx_release(&rx);
		nng_close(s);
		return die(eb.msg);
	}
	id = rx.m.u.submitted.id;
	tp_rx_release(&rx);
	for (;;) {
		const struct msg_tokens *t;
		bool done;

		memset(&q, 0, sizeof(q));
		q.type = MSG_POLL;
		q.u.poll = (struct msg_poll){id, from, MSG_IDS_MAX};
		rc = tp_call(s, &q, &rx, &eb);
		if (rc || rx.m.type != MSG_TOKENS) {
			if (!rc)
				ig_errf(&eb, IG_E_PROTO_UNEXPECTED,
				        "the worker answered '%s' to a poll",
				        msg_type_name(rx.m.type));
			tp_rx_release(&rx);
			nng_close(s);
			return die(eb.msg);
		}
		t = &rx.m.u.tokens;
		for (uint32_t i = 0; r->ids && i < t->tokens.n; i++)
			printf("%u\n", t->tokens.v[i]);
		if (!r->ids)
			fwrite(t->text.p, 1, t->text.n, stdout);
		fflush(stdout);
		from += t->tokens.n;
		done = t->done && from == t->generated;
		tp_rx_release(&rx);
		if (done)
			break;
		if (!t->tokens.n)
			usleep(2000);
	}
	if (!r->ids)
		putchar('\n');
	/* forget the finished request */
	memset(&q, 0, sizeof(q));
	q.type = MSG_CANCEL;
	q.u.cancel.id = id;
	if (tp_call(s, &q, &rx, &eb) == IG_E_OK)
		tp_rx_release(&rx);
	nng_close(s);
	return 0;
}

struct local {
	const char *model, *prompt, *backend;
	unsigned max_tokens, chunk;
	uint32_t threads;
	enum mdesc_kv_format fmt;
	uint32_t kv_sinks, kv_window; /* the compact formats' residual window */
};

/* Run the model in this process on l->backend; 0 done, 1 failed (said on
 * stderr). Everything taken is given back on every path. */
static int generate_local(const struct local *l, const struct smp_params *sp)
{
	struct ig_errbuf eb = {0};
	struct mfile f;
	struct bpe *bpe = NULL;
	struct tok_vocab vocab;
	struct bem r = {0};
	struct be_seq s = {0};
	struct smp_state st;
	uint32_t *ids = NULL, *gen = NULL, pages, ng = 0;
	size_t n_ids, ctx;
	float *logits = NULL;
	void *sscratch = NULL;
	int rc = 1;

	if (mfile_open(&f, l->model, &eb))
		return die(eb.msg);
	if (smp_params_check(sp, f.desc.vocab, &eb))
		goto out_err;
	if (f.desc.tokenizer == MDESC_TOK_NONE) {
		ig_errf(&eb, IG_E_INVAL,
		        "'%s' has no tokenizer (tokenizer none): a text prompt needs one",
		        l->model);
		goto out_err;
	}
	if (f.desc.tokenizer == MDESC_TOK_GPT2 && bpe_open(&bpe, &f.g, &eb))
		goto out_err;
	tok_vocab_init(&vocab, f.desc.tokenizer, bpe);
	n_ids = strlen(l->prompt);
	ctx = n_ids + l->max_tokens;
	if (ctx > f.desc.default_context) {
		ig_errf(&eb, IG_E_INVAL, "the prompt and --max-tokens pass the model's context");
		goto out_err;
	}
	ids = malloc((n_ids + 1) * sizeof(uint32_t));
	logits = malloc(f.desc.vocab * sizeof(float));
	sscratch = malloc(smp_scratch_bytes(f.desc.vocab));
	gen = malloc(((size_t)l->max_tokens + 1) * sizeof(uint32_t));
	if (!ids || !logits || !sscratch || !gen) {
		ig_errf(&eb, IG_E_NOMEM, "no host memory for the sequence");
		goto out_err;
	}
	if (bpe ? bpe_encode(bpe, l->prompt, n_ids, BPE_PARSE_SPECIAL | BPE_ADD_SPECIAL, ids,
	                     n_ids + 1, &n_ids, &eb)
	        : tok_encode(l->prompt, n_ids, 0, ids, n_ids + 1, &n_ids, &eb))
		goto out_err;
	if (!n_ids) {
		ig_errf(&eb, IG_E_INVAL, "the prompt is no tokens: there is nothing to continue");
		goto out_err;
	}
	ctx = n_ids + l->max_tokens;
	pages = (uint32_t)mdesc_pages_for(ctx);
	/* rounds of a prompt chunk at most, then of one token */
	if (bem_open(&r, &f,
	             &(struct bem_opts){.backend = l->backend,
	                                .max_round_tokens =
	                                    (uint32_t)(n_ids < l->chunk ? n_ids : l->chunk),
	                                .context = ctx,
	                                .threads = l->threads,
	                                .states = 1,
	                                .pages = pages,
	                                .fmt = l->fmt,
	                                .kv_sinks = mdesc_kv_compact(l->fmt) ? l->kv_sinks : 0,
	                                .kv_window = mdesc_kv_compact(l->fmt) ? l->kv_window : 0},
	             &eb) ||
	    bem_seq_open(&r, &s, 1, pages, &eb))
		goto out_err;
	smp_init(&st, sp);
	for (size_t t = 0; t < n_ids; t += l->chunk) {
		uint32_t n = (uint32_t)(n_ids - t < l->chunk ? n_ids - t : l->chunk);
		struct be_step step = {&s, ids + t, n, t + n == n_ids};

		if (bem_round(&r, &step, 1, logits, &eb))
			goto out_err;
	}
	for (unsigned g = 0; g < l->max_tokens; g++) {
		uint32_t next = smp_pick(sp, &st, logits, f.desc.vocab, sscratch), n;
		struct be_step step = {&s, &next, 1, true};
		char out[TOK_TEXT_TOKEN_MAX];
		size_t len;

		if (next == mdesc_eos(&f.desc) || (bpe && bpe_is_eog(bpe, next)))
			break;
		gen[ng++] = next;
		tok_text_delta(&vocab, gen, ng - 1, ng, false, out, sizeof(out), NULL, &n, &len);
		fwrite(out, 1, len, stdout);
		fflush(stdout);
		if (g + 1 < l->max_tokens && bem_round(&r, &step, 1, logits, &eb))
			goto out_err;
	}
	{
		char out[TOK_TEXT_TOKEN_MAX];
		uint32_t n;
		size_t len;

		/* the end: an incomplete character's U+FFFD */
		tok_text_delta(&vocab, gen, ng, ng, true, out, sizeof(out), NULL, &n, &len);
		fwrite(out, 1, len, stdout);
	}
	putchar('\n');
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
	free(logits);
	free(sscratch);
	free(gen);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"model", required_argument, NULL, 'm'},
	    {"backend", required_argument, NULL, 'b'},
	    {"prompt", required_argument, NULL, 'p'},
	    {"max-tokens", required_argument, NULL, 'n'},
	    {"seed", required_argument, NULL, 's'},
	    {"temperature", required_argument, NULL, 't'},
	    {"top-k", required_argument, NULL, 'k'},
	    {"top-p", required_argument, NULL, 'P'},
	    {"threads", required_argument, NULL, 'j'},
	    {"chunk", required_argument, NULL, 'c'},
	    {"kv-format", required_argument, NULL, 'f'},
	    {"kv-window", required_argument, NULL, 'W'},
	    {"kv-sinks", required_argument, NULL, 'S'},
	    {"worker", no_argument, NULL, 'w'},
	    {"runtime-dir", required_argument, NULL, 'r'},
	    {"class", required_argument, NULL, 'C'},
	    {"ids", no_argument, NULL, 'i'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct remote remote = {NULL, "interactive", false, 0.0, 1.0};
	bool worker = false, backend_given = false;
	struct smp_params sp;
	double temperature = 0.0, top_p = 1.0;
	uint32_t top_k = 0;
	uint64_t seed = 1;
	enum mdesc_kv_format fmt = MDESC_KV_BF16;
	uint32_t kv_window = MDESC_KV_WINDOW_DEFAULT, kv_sinks = MDESC_KV_SINKS_DEFAULT;
	const char *model = NULL, *prompt = NULL, *backend = "cpu";
	unsigned max_tokens = 64, chunk = 64;
	int threads = 1, c;
	struct ig_errbuf eb;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			model = optarg;
			break;
		case 'b':
			backend = optarg;
			backend_given = true;
			break;
		case 'p':
			prompt = optarg;
			break;
		case 'n':
			max_tokens = (unsigned)num("--max-tokens", optarg, 1, 1u << 24);
			break;
		case 's':
			seed = seed_of(optarg);
			break;
		case 't':
			temperature = real("--temperature", optarg);
			break;
		case 'k':
			top_k = (uint32_t)num("--top-k", optarg, 0, UINT32_MAX);
			break;
		case 'P':
			top_p = real("--top-p", optarg);
			break;
		case 'j':
			threads = (int)num("--threads", optarg, 1, 256);
			break;
		case 'c':
			chunk = (unsigned)num("--chunk", optarg, 1, 1u << 20);
			break;
		case 'w':
			worker = true;
			break;
		case 'W':
			kv_window = (uint32_t)num("--kv-window", optarg, 0, 65536);
			break;
		case 'S':
			kv_sinks = (uint32_t)num("--kv-sinks", optarg, 0, 4096);
			break;
		case 'r':
			remote.rtdir = optarg;
			break;
		case 'C':
			if (strcmp(optarg, "interactive") && strcmp(optarg, "agent")) {
				fprintf(
				    stderr,
				    "ignis-generate: --class '%s'; accepted: interactive, agent\n",
				    optarg);
				return 2;
			}
			remote.cls = optarg;
			break;
		case 'i':
			remote.ids = true;
			break;
		case 'f':
			fmt = mdesc_kv_format_parse(optarg);
			if (!fmt) {
				fprintf(stderr,
				        "ignis-generate: --kv-format '%s'; accepted: bf16, fp8, "
				        "compact, compact1 (the first compact code)\n",
				        optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			fprintf(stderr, "ignis-generate: unknown or incomplete option '%s'\n",
			        argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ignis-generate: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (smp_params_set(&sp, temperature, top_k, top_p, seed, &eb)) {
		fprintf(stderr, "ignis-generate: %s\n", eb.msg);
		return 2;
	}
	if (worker) {
		if (!prompt || !prompt[0] || model || backend_given) {
			fprintf(stderr,
			        "ignis-generate: --worker takes a non-empty --prompt and no "
			        "--model nor --backend (the worker has its own)\n");
			return 2;
		}
		remote.temperature = temperature;
		remote.top_p = top_p;
		return generate_remote(&remote, prompt, max_tokens, &sp);
	}
	if (!model || !prompt) {
		fprintf(stderr, "ignis-generate: --model and --prompt are needed (or --worker and "
		                "--prompt)\n");
		usage(stderr);
		return 2;
	}
	return generate_local(&(struct local){model, prompt, backend, max_tokens, chunk,
	                                      (uint32_t)threads, fmt, kv_sinks, kv_window},
	                      &sp);
}
