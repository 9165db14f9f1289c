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
 *   prefill_tps         tokens per second of one --chunk-token prefill
 *                       round (a fresh sequence each time), median
 *   prefill_tflops      2 x the matrices' weights x tokens per second
 *                       (attention's own products not counted)
 *   state_copy_ms       copy_d2d of one sequence's state, median
 *   window_h2d_GBps, window_d2h_GBps   a 12 MiB window between pinned host
 *                       memory (host_alloc) and the device on the transfer
 *                       stream, median
 *   weights_bytes, kv_bytes_per_token, state_bytes   what the figures use
 * Exit 0, 77 when the backend does not run here (why on stderr), 1 on a
 * failure (named), 2 on usage.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bemodel.h"
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

static void rb_usage(void)
{
	fprintf(stderr, "usage: ignis-roundbench --model FILE [--backend NAME] [--label NAME]\n"
	                "       [--lanes L,L,...] [--prompt N] [--rounds N] [--chunk N]\n"
	                "       [--context N] [--kv-format bf16|fp8|compact]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *path = NULL, *backend = "cuda", *label = NULL, *lanes_arg = "1,4,8";
	uint32_t prompt = 512, rounds = 32, chunk = 512, lanes[16], n_lanes = 0, max_lanes = 0;
	uint64_t context = 4096, wbytes, melems, g = 42;
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
	    context < (uint64_t)prompt + rounds + 2 || context < chunk)
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
	uint32_t lane_pages = (uint32_t)((prompt + rounds + 2 + 63) / 64);
	uint32_t chunk_pages = (chunk + 63) / 64;
	struct bem_opts o = {
	    .backend = backend,
	    .max_round_tokens = chunk > prompt ? chunk : prompt,
	    .context = context,
	    .states = max_lanes + 1,
	    .pages = max_lanes * lane_pages + chunk_pages,
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
	if (!logits || !toks || !t) {
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
		for (uint32_t k = 0; k < rounds + 2; k++) {
			double t0;

			for (uint32_t l = 0; l < L; l++) {
				dtok[l] = rb_token(&g, m->vocab);
				st[l] = (struct be_step){&s[l], &dtok[l], 1, true};
			}
			t0 = rb_now();
			if (bem_round(&r, st, L, logits, &eb))
				rb_die("a decode round", &eb);
			if (k >= 2) /* two warm-ups */
				t[k - 2] = rb_now() - t0;
		}
		double med = rb_median(t, (int)rounds);
		double bytes = (double)wbytes + (double)L * ((double)(prompt + rounds / 2) * kv_tok +
		                                             2.0 * (double)state);

		printf("%s_decode_ms_l%u=%.3f\n%s_decode_tps_l%u=%.1f\n%s_decode_read_GBps_l%u=%.1f\n",
		       label, L, med * 1e3, label, L, L / med, label, L, bytes / med / 1e9);
		fflush(stdout);
		for (uint32_t l = 0; l < L; l++)
			bem_seq_close(&r, &s[l]);
	}

	/* prefill: a fresh sequence, one chunk */
	{
		int reps = 5;
		struct be_seq s;

		for (uint32_t k = 0; k < chunk; k++)
			toks[k] = rb_token(&g, m->vocab);
		for (int k = 0; k < reps + 1; k++) {
			struct be_step st;
			double t0;

			memset(&s, 0, sizeof(s));
			if (bem_seq_open(&r, &s, 100, chunk_pages, &eb))
				rb_die("the prefill's sequence", &eb);
			st = (struct be_step){&s, toks, chunk, true};
			t0 = rb_now();
			if (bem_round(&r, &st, 1, logits, &eb))
				rb_die("a prefill round", &eb);
			if (k)
				t[k - 1] = rb_now() - t0;
			bem_seq_close(&r, &s);
		}
		double med = rb_median(t, reps);

		printf("%s_prefill_tps=%.1f\n%s_prefill_tflops=%.2f\n", label, chunk / med, label,
		       2.0 * (double)melems * chunk / med / 1e12);
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
				int rc = dir ? r.be.ops->copy_d2h_async(&r.be, host, dev, RB_WINDOW_BYTES,
				                                        &ticket, &eb)
				             : r.be.ops->copy_h2d_async(&r.be, dev, host, RB_WINDOW_BYTES,
				                                        &ticket, &eb);

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
	free(t);
	free(toks);
	free(logits);
	bem_close(&r);
	mfile_close(&f);
	return 0;
}
