/*
 * ignis-roundbench: a model's rounds timed on a backend of this build, for
 * the device benchmarks (issue 29, item 7; tools/gpu-bench.sh runs it on
 * the card and reads it against ignis-devlimits). The model is bound as
 * bemodel.h binds it (every step through the backend table), so the figures
 * are those of the backend's own rounds: its kernels, its passes, the
 * logits copied to the host each round, as the engine has them.
 *
 *   ignis-roundbench --model FILE [--backend cuda] [--label NAME]
 *                    [--lanes 1,4,8] [--prompt 512] [--rounds 32]
 *                    [--chunk 512] [--context 4096] [--kv-format bf16]
 *                    [--move-context 0] [--move-window 12582912]
 *
 * Prints key=value lines, LABEL_ before each key (default label: the
 * backend's name):
 *   decode_ms_lL        median time of a decode round of L lanes (one token
 *                       each, every lane at about --prompt positions)
 *   decode_tps_lL       L / that time: tokens per second
 *   decode_read_GBps_lL the bytes a round must read at least (the weights
 *                       but the embedding's rows, each lane's KV and its
 *                       state read and written) over that time: against the
 *                       card's d2d_rw_GBps, the fraction of the roofline
 *   decode_each_ms_lL   the same rounds launching each kernel on its own
 *                       (be.launch_each: no recorded graph), interleaved
 *                       round by round with the others
 *   prefill_tps         tokens per second of one --chunk-token prefill
 *                       round (a fresh sequence each time), median
 *   prefill_tflops      2 x the matrices' weights x tokens per second
 *                       (attention's own products not counted)
 *   prefill_fast_tps    the same chunk with the backend's fast products
 *                       (be.fast_products: cuBLAS on TF32 tensor cores,
 *                       outside the exactness contract), interleaved with
 *                       ours: what the contract costs in prefill
 *   state_copy_ms       copy_d2d of one sequence's state, median
 *   window_h2d_GBps, window_d2h_GBps   a 12 MiB window between pinned host
 *                       memory (host_alloc) and the device on the transfer
 *                       stream, median
 *   weights_bytes, kv_bytes_per_token, state_bytes   what the figures use
 * With --move-context N (tokens; 0, the default: not run), a whole-context
 * move out to pinned host memory and back, as the engine runs one
 * (gpu-worker/engine/moves.c): the sequence's image in windows of
 * --move-window bytes, one window gather (then scatter) in flight on the
 * transfer stream at a time, the next enqueued in the first decode round
 * after the last landed, while the largest --lanes count of other lanes
 * keeps decoding on the compute stream:
 *   move_image_bytes, move_windows   the image (pages, state, header)
 *   move_out_s, move_in_s   wall time from the first window enqueued to the
 *                       last landed, with the lanes decoding
 *   move_rounds_out, move_rounds_in  the lanes' rounds meanwhile
 *   move_others_ms_base median round of those lanes with nothing moving
 *                       (rounds before the move out and between the two)
 *   move_others_ms_out, move_others_ms_in   the same during each move
 *   move_others_slowdown  max(out, in) / base - 1 (the spec's target: at
 *                       most 0.10)
 *   move_alone_GBps     the image gathered again with nothing else running,
 *                       every window enqueued at once (the stream's depth):
 *                       against the card's pinned copy rate
 * The image gathered the second time must have the first's window sums
 * (the move back restored every byte): otherwise exit 1. The victim's pages
 * hold whatever the pool held (a move copies bytes, not meaning), and the
 * lanes decode at positions that wrap back to --prompt after --rounds, so
 * that any number of rounds fits their pages.
 * Exit 0, 77 when the backend does not run here (why on stderr), 1 on a
 * failure (named), 2 on usage.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bemodel.h"
#include "model/seqimg.h"
#include "model/quant.h"

#define RB_WINDOW_BYTES (12ull << 20)
#define RB_COPY_REPS    20
#define RB_MAX_LANES    64

static double rb_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int rb_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double rb_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), rb_cmp);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void rb_die(const char *what, const struct ig_errbuf *eb)
{
	fprintf(stderr, "ignis-roundbench: %s: %s\n", what, eb->msg);
	exit(1);
}

/* A fixed pseudo-random token (the figures do not depend on which). */
static uint32_t rb_token(uint64_t *g, uint32_t vocab)
{
	*g = *g * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*g >> 33) % vocab;
}

/* The weights a decode round reads: every tensor but the embedding's rows
 * (a round reads a row a token), and the matrices' elements (prefill's
 * products). */
static void rb_weights(const struct mfile *f, uint64_t *read_bytes, uint64_t *matrix_elems)
{
	*read_bytes = *matrix_elems = 0;
	for (size_t i = 0; i < f->g.n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(&f->g, i);
		bool embd = t->name_len == 17 && !memcmp(t->name, "token_embd.weight", 17);

		if (!embd || f->desc.tied_output)
			*read_bytes += t->n_bytes;
		if (t->n_dims == 2 && (!embd || f->desc.tied_output))
			*matrix_elems += t->n_elements;
	}
}

/* One decode round of lanes s[0..L), their positions wrapped back to `lo`
 * when they reach `hi`; its wall time. */
static double rb_decode(struct bem *r, struct be_seq *s, uint32_t L, uint32_t lo, uint32_t hi,
                        uint64_t *g, float *logits)
{
	struct be_step st[RB_MAX_LANES];
	uint32_t tok[RB_MAX_LANES];
	struct ig_errbuf eb;
	double t0;

	for (uint32_t l = 0; l < L; l++) {
		if (s[l].pos >= hi)
			s[l].pos = lo;
		tok[l] = rb_token(g, r->d.m->vocab);
		st[l] = (struct be_step){&s[l], &tok[l], 1, true};
	}
	t0 = rb_now();
	if (bem_round(r, st, L, logits, &eb))
		rb_die("a decode round beside a move", &eb);
	return rb_now() - t0;
}

/* The move (see the header): the figures printed under `label`. */
static void rb_move(struct bem *r, const char *label, uint32_t L, uint32_t lane_pages,
                    uint32_t prompt, uint32_t rounds, uint64_t move_ctx, uint64_t window,
                    uint64_t *g, float *logits)
{
	const struct be_ops *ops = r->be.ops;
	struct be_seq s[RB_MAX_LANES], v;
	uint32_t move_pages = (uint32_t)mdesc_pages_for(move_ctx);
	uint32_t hi = prompt + rounds, nb = 0;
	unsigned char sampler[32] = {0};
	struct seqimg_header h;
	struct seqimg_writer w;
	struct seqimg_reader rd;
	struct ig_errbuf eb;
	void **pages = calloc(move_pages, sizeof(void *));
	double *base = malloc(2 * (size_t)rounds * sizeof(double)), t_out = 0, t_in = 0;
	double *during[2] = {NULL, NULL};
	uint32_t n_during[2] = {0, 0};
	uint64_t *sums, windows, image;
	unsigned char *host = NULL;

	if (!pages || !base)
		rb_die("the move", &(struct ig_errbuf){.msg = "out of host memory"});
	/* the lanes, prefilled, and the victim: move_ctx tokens of pages */
	memset(s, 0, sizeof(s));
	for (uint32_t l = 0; l < L; l++) {
		uint32_t *toks = malloc(prompt * sizeof(uint32_t));
		struct be_step st;

		if (!toks || bem_seq_open(r, &s[l], 300 + l, lane_pages, &eb))
			rb_die("a lane beside the move", &eb);
		for (uint32_t k = 0; k < prompt; k++)
			toks[k] = rb_token(g, r->d.m->vocab);
		st = (struct be_step){&s[l], toks, prompt, true};
		if (bem_round(r, &st, 1, logits, &eb))
			rb_die("a lane's prefill beside the move", &eb);
		free(toks);
	}
	if (bem_seq_open(r, &v, 299, move_pages, &eb))
		rb_die("the moved sequence", &eb);
	v.pos = (uint32_t)move_ctx;
	ops->seq_image(&r->be, &r->d, &v, &r->kv, r->fmt, 0, sizeof(sampler), &h, pages);
	seqimg_writer_init(&w, &h, &(struct seqimg_parts){pages, v.state, sampler});
	image = w.h.image_bytes;
	windows = (image + window - 1) / window;
	sums = calloc(windows, sizeof(uint64_t));
	during[0] = malloc((windows + 2) * 4 * sizeof(double));
	during[1] = malloc((windows + 2) * 4 * sizeof(double));
	/* whole windows: a gather's check covers its window in full, the last
	 * one's tail too, which must be ours and not whatever lies after the
	 * image (ASan's allocator once put device memory there) */
	if (!sums || !during[0] || !during[1] ||
	    ops->host_alloc(&r->be, windows * window, (void **)&host, &eb))
		rb_die("the move's host memory", &eb);
	printf("%s_move_image_bytes=%" PRIu64 "\n%s_move_windows=%" PRIu64 "\n", label, image,
	       label, windows);

	for (int dir = 0; dir < 2; dir++) {
		uint64_t k = 0, ticket = 0;
		struct be_img job;
		double t0;

		/* the lanes alone first: two warm-ups, then `rounds` timed */
		for (uint32_t i = 0; i < rounds + 2; i++) {
			double t = rb_decode(r, s, L, prompt, hi, g, logits);

			if (i >= 2)
				base[nb++] = t;
		}
		if (dir)
			seqimg_reader_init(&rd, r->d.m, r->fmt,
			                   &(struct seqimg_parts){pages, v.state, sampler},
			                   move_pages, r->d.state_bytes, sizeof(sampler));
		t0 = rb_now();
		while (k < windows || ticket) {
			if (ticket && ops->xfer_done(&r->be, ticket)) {
				if (ops->xfer_wait(&r->be, ticket, &eb))
					rb_die(dir ? "a window's scatter" : "a window's gather",
					       &eb);
				if (dir && job.rc) {
					fprintf(stderr,
					        "ignis-roundbench: window %" PRIu64
					        "'s scatter: %s\n",
					        k, job.why);
					exit(1);
				}
				if (!dir)
					sums[k] = job.sum;
				ticket = 0;
				k++;
				if (k == windows)
					break;
			}
			if (!ticket) {
				int rc;

				if (dir)
					job = (struct be_img){.r = &rd,
					                      .src = host + k * window,
					                      .k0 = (uint32_t)k,
					                      .count = 1,
					                      .sums = sums,
					                      .window = window,
					                      .image_bytes = image};
				else
					job = (struct be_img){
					    .w = &w, .dst = host + k * window, .window = window};
				rc = dir ? ops->img_scatter_async(&r->be, &job, &ticket, &eb)
				         : ops->img_gather_async(&r->be, &job, &ticket, &eb);
				if (rc)
					rb_die(dir ? "a window's scatter" : "a window's gather",
					       &eb);
			}
			if (n_during[dir] < (windows + 2) * 4)
				during[dir][n_during[dir]++] =
				    rb_decode(r, s, L, prompt, hi, g, logits);
			else
				rb_decode(r, s, L, prompt, hi, g, logits);
		}
		if (dir)
			t_in = rb_now() - t0;
		else
			t_out = rb_now() - t0;
		if (dir && !seqimg_reader_done(&rd))
			rb_die("the move back",
			       &(struct ig_errbuf){.msg = "the image did not read whole"});
	}

	/* gathered again, alone, every window at once up to the stream's
	 * depth: the sums must be the first gather's */
	{
		struct be_img jobs[BE_XFER_DEPTH];
		uint64_t tickets[BE_XFER_DEPTH], k = 0, done = 0;
		double t0 = rb_now();

		seqimg_writer_init(&w, &h, &(struct seqimg_parts){pages, v.state, sampler});
		while (done < windows) {
			while (k < windows && k - done < BE_XFER_DEPTH) {
				struct be_img *j = &jobs[k % BE_XFER_DEPTH];

				*j = (struct be_img){
				    .w = &w, .dst = host + k * window, .window = window};
				if (ops->img_gather_async(&r->be, j, &tickets[k % BE_XFER_DEPTH],
				                          &eb))
					rb_die("a window's gather alone", &eb);
				k++;
			}
			if (ops->xfer_wait(&r->be, tickets[done % BE_XFER_DEPTH], &eb))
				rb_die("a window's gather alone", &eb);
			if (jobs[done % BE_XFER_DEPTH].sum != sums[done]) {
				fprintf(stderr,
				        "ignis-roundbench: window %" PRIu64
				        " of the image gathered after "
				        "the move back differs from the one moved out\n",
				        done);
				exit(1);
			}
			done++;
		}
		double t = rb_now() - t0, b = rb_median(base, (int)nb);
		double o = n_during[0] ? rb_median(during[0], (int)n_during[0]) : 0;
		double i = n_during[1] ? rb_median(during[1], (int)n_during[1]) : 0;

		printf("%s_move_out_s=%.3f\n%s_move_in_s=%.3f\n%s_move_rounds_out=%u\n"
		       "%s_move_rounds_in=%u\n%s_move_others_ms_base=%.3f\n%s_move_others_ms_out=%."
		       "3f\n"
		       "%s_move_others_ms_in=%.3f\n%s_move_others_slowdown=%.3f\n"
		       "%s_move_alone_GBps=%.1f\n",
		       label, t_out, label, t_in, label, n_during[0], label, n_during[1], label,
		       b * 1e3, label, o * 1e3, label, i * 1e3, label, (o > i ? o : i) / b - 1.0,
		       label, (double)image / t / 1e9);
	}
	ops->host_free(&r->be, host, windows * window);
	for (uint32_t l = 0; l < L; l++)
		bem_seq_close(r, &s[l]);
	bem_seq_close(r, &v);
	free(during[0]);
	free(during[1]);
	free(sums);
	free(base);
	free(pages);
}

static void rb_usage(void)
{
	fprintf(stderr, "usage: ignis-roundbench --model FILE [--backend NAME] [--label NAME]\n"
	                "       [--lanes L,L,...] [--prompt N] [--rounds N] [--chunk N]\n"
	                "       [--context N] [--kv-format bf16|fp8|compact]\n"
	                "       [--move-context TOKENS] [--move-window BYTES]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *path = NULL, *backend = "cuda", *label = NULL, *lanes_arg = "1,4,8";
	uint32_t prompt = 512, rounds = 32, chunk = 512, lanes[16], n_lanes = 0, max_lanes = 0;
	uint64_t context = 4096, wbytes, melems, g = 42, move_ctx = 0,
	         move_window = RB_WINDOW_BYTES;
	enum mdesc_kv_format fmt = MDESC_KV_BF16;
	struct ig_errbuf eb;
	struct mfile f;
	struct bem r;
	char why[256];
	float *logits;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			rb_usage();
		if (!strcmp(a, "--model"))
			path = v;
		else if (!strcmp(a, "--backend"))
			backend = v;
		else if (!strcmp(a, "--label"))
			label = v;
		else if (!strcmp(a, "--lanes"))
			lanes_arg = v;
		else if (!strcmp(a, "--prompt"))
			prompt = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--rounds"))
			rounds = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--chunk"))
			chunk = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--context"))
			context = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--move-context"))
			move_ctx = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--move-window"))
			move_window = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--kv-format") && (fmt = mdesc_kv_format_parse(v)) != 0)
			;
		else
			rb_usage();
		i++;
	}
	for (const char *p = lanes_arg; *p && n_lanes < 16;) {
		char *end;
		unsigned long l = strtoul(p, &end, 10);

		if (end == p || l < 1 || l > RB_MAX_LANES)
			rb_usage();
		lanes[n_lanes++] = (uint32_t)l;
		max_lanes = (uint32_t)l > max_lanes ? (uint32_t)l : max_lanes;
		p = *end == ',' ? end + 1 : end;
	}
	if (!path || !n_lanes || !prompt || !rounds || !chunk ||
	    context < (uint64_t)prompt + 2 * (rounds + 2) || context < chunk ||
	    move_ctx > UINT32_MAX || move_window < 4096)
		rb_usage();
	if (!label)
		label = backend;
	if (!bem_backend_here(backend, why, sizeof(why))) {
		fprintf(stderr, "ignis-roundbench: skipped: %s\n", why);
		return 77;
	}
	if (mfile_open(&f, path, &eb))
		rb_die(path, &eb);
	memset(&r, 0, sizeof(r));
	uint32_t lane_pages = (uint32_t)((prompt + 2 * (rounds + 2) + 63) / 64);
	uint32_t chunk_pages = (chunk + 63) / 64;
	struct bem_opts o = {
	    .backend = backend,
	    .max_round_tokens = chunk > prompt ? chunk : prompt,
	    .context = context,
	    .states = max_lanes + 1,
	    .pages = max_lanes * lane_pages + chunk_pages + (uint32_t)mdesc_pages_for(move_ctx),
	    .fmt = fmt,
	    .kv_sinks = mdesc_kv_compact(fmt) ? MDESC_KV_SINKS_DEFAULT : 0,
	    .kv_window = mdesc_kv_compact(fmt) ? MDESC_KV_WINDOW_DEFAULT : 0,
	};
	if (o.max_round_tokens < max_lanes)
		o.max_round_tokens = max_lanes;
	double t_load = rb_now();

	if (bem_open(&r, &f, &o, &eb))
		rb_die("binding the model", &eb);
	const struct mdesc *m = &f.desc;
	uint64_t kv_tok = mdesc_kv_bytes_per_token(m, fmt), state = r.d.state_bytes;

	rb_weights(&f, &wbytes, &melems);
	printf("%s_load_s=%.1f\n", label, rb_now() - t_load);
	printf("%s_weights_bytes=%" PRIu64 "\n%s_kv_bytes_per_token=%" PRIu64
	       "\n%s_state_bytes=%" PRIu64 "\n",
	       label, wbytes, label, kv_tok, label, state);
	fflush(stdout);
	logits = malloc((size_t)max_lanes * m->vocab * sizeof(float));
	uint32_t *toks = malloc((size_t)(chunk > prompt ? chunk : prompt) * sizeof(uint32_t));
	double *t = malloc((rounds > RB_COPY_REPS ? rounds : RB_COPY_REPS) * sizeof(double));
	double *te = malloc(rounds * sizeof(double));
	if (!logits || !toks || !t || !te) {
		fprintf(stderr, "ignis-roundbench: out of host memory\n");
		return 1;
	}

	/* decode: each lane prefilled alone, then rounds of one token a lane */
	for (uint32_t li = 0; li < n_lanes; li++) {
		uint32_t L = lanes[li];
		struct be_seq s[RB_MAX_LANES];
		struct be_step st[RB_MAX_LANES];
		uint32_t dtok[RB_MAX_LANES];

		memset(s, 0, sizeof(s));
		for (uint32_t l = 0; l < L; l++) {
			if (bem_seq_open(&r, &s[l], l + 1, lane_pages, &eb))
				rb_die("a lane's sequence", &eb);
			for (uint32_t k = 0; k < prompt; k++)
				toks[k] = rb_token(&g, m->vocab);
			st[0] = (struct be_step){&s[l], toks, prompt, true};
			if (bem_round(&r, st, 1, logits, &eb))
				rb_die("a lane's prefill", &eb);
		}
		/* rounds in pairs, one with the backend's graphs, one launching
		 * each kernel on its own (be.launch_each): the two interleaved */
		for (uint32_t k = 0; k < 2 * (rounds + 2); k++) {
			double t0;

			for (uint32_t l = 0; l < L; l++) {
				dtok[l] = rb_token(&g, m->vocab);
				st[l] = (struct be_step){&s[l], &dtok[l], 1, true};
			}
			r.be.launch_each = k % 2;
			t0 = rb_now();
			if (bem_round(&r, st, L, logits, &eb))
				rb_die("a decode round", &eb);
			if (k >= 4) /* two warm-ups each */
				(k % 2 ? te : t)[k / 2 - 2] = rb_now() - t0;
		}
		r.be.launch_each = false;
		double med = rb_median(t, (int)rounds), med_each = rb_median(te, (int)rounds);
		double bytes =
		    (double)wbytes +
		    (double)L * ((double)(prompt + rounds / 2) * kv_tok + 2.0 * (double)state);

		printf(
		    "%s_decode_ms_l%u=%.3f\n%s_decode_tps_l%u=%.1f\n%s_decode_read_GBps_l%u=%.1f\n"
		    "%s_decode_each_ms_l%u=%.3f\n",
		    label, L, med * 1e3, label, L, L / med, label, L, bytes / med / 1e9, label, L,
		    med_each * 1e3);
		fflush(stdout);
		for (uint32_t l = 0; l < L; l++)
			bem_seq_close(&r, &s[l]);
	}

	/* prefill: a fresh sequence, one chunk; in pairs, ours then the fast
	 * products (be.fast_products: outside the contract), interleaved */
	{
		int reps = 5;
		struct be_seq s;
		double tf[5];

		for (uint32_t k = 0; k < chunk; k++)
			toks[k] = rb_token(&g, m->vocab);
		for (int k = 0; k < 2 * (reps + 1); k++) {
			struct be_step st;
			double t0;

			memset(&s, 0, sizeof(s));
			if (bem_seq_open(&r, &s, 100, chunk_pages, &eb))
				rb_die("the prefill's sequence", &eb);
			st = (struct be_step){&s, toks, chunk, true};
			r.be.fast_products = k % 2;
			t0 = rb_now();
			if (bem_round(&r, &st, 1, logits, &eb))
				rb_die(k % 2 ? "a prefill round with the fast products"
				             : "a prefill round",
				       &eb);
			if (k >= 2)
				(k % 2 ? tf : t)[k / 2 - 1] = rb_now() - t0;
			bem_seq_close(&r, &s);
		}
		r.be.fast_products = false;
		double med = rb_median(t, reps), medf = rb_median(tf, reps);

		printf("%s_prefill_tps=%.1f\n%s_prefill_tflops=%.2f\n%s_prefill_fast_tps=%.1f\n",
		       label, chunk / med, label, 2.0 * (double)melems * chunk / med / 1e12, label,
		       chunk / medf);
		fflush(stdout);
	}

	/* a state's device-to-device copy, between two slots */
	if (state) {
		struct be_seq a, b;

		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		if (bem_seq_open(&r, &a, 200, 1, &eb) || bem_seq_open(&r, &b, 201, 1, &eb))
			rb_die("the state copy's sequences", &eb);
		for (int k = 0; k < RB_COPY_REPS + 1; k++) {
			double t0 = rb_now();

			if (r.be.ops->copy_d2d(&r.be, b.state, a.state, state, &eb))
				rb_die("copy_d2d of a state", &eb);
			if (k)
				t[k - 1] = rb_now() - t0;
		}
		printf("%s_state_copy_ms=%.3f\n", label, rb_median(t, RB_COPY_REPS) * 1e3);
		bem_seq_close(&r, &a);
		bem_seq_close(&r, &b);
	}

	/* a window each way on the transfer stream, pinned host memory */
	{
		void *host = NULL, *dev = NULL;

		if (r.be.ops->host_alloc(&r.be, RB_WINDOW_BYTES, &host, &eb) ||
		    r.be.ops->alloc(&r.be, RB_WINDOW_BYTES, &dev, &eb))
			rb_die("a window's memory", &eb);
		memset(host, 0x5a, RB_WINDOW_BYTES);
		for (int dir = 0; dir < 2; dir++) {
			for (int k = 0; k < RB_COPY_REPS + 1; k++) {
				uint64_t ticket;
				double t0 = rb_now();
				int rc = dir ? r.be.ops->copy_d2h_async(
				                   &r.be, host, dev, RB_WINDOW_BYTES, &ticket, &eb)
				             : r.be.ops->copy_h2d_async(
				                   &r.be, dev, host, RB_WINDOW_BYTES, &ticket, &eb);

				if (!rc)
					rc = r.be.ops->xfer_wait(&r.be, ticket, &eb);
				if (rc)
					rb_die("a window's copy", &eb);
				if (k)
					t[k - 1] = rb_now() - t0;
			}
			printf("%s_window_%s_GBps=%.1f\n", label, dir ? "d2h" : "h2d",
			       (double)RB_WINDOW_BYTES / rb_median(t, RB_COPY_REPS) / 1e9);
		}
		r.be.ops->free(&r.be, dev, RB_WINDOW_BYTES);
		r.be.ops->host_free(&r.be, host, RB_WINDOW_BYTES);
	}
	if (move_ctx)
		rb_move(&r, label, max_lanes, lane_pages, prompt, rounds, move_ctx, move_window, &g,
		        logits);
	free(te);
	free(t);
	free(toks);
	free(logits);
	bem_close(&r);
	mfile_close(&f);
	return 0;
}
