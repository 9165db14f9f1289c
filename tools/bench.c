/*
 * ignis-bench - measurements that are not tests: each reports a ratio
 * measured in the same run against the machine's own memcpy, so the figures
 * travel between machines better than absolute times do.
 *
 *   ignis-bench [--quick] [seqimg|matmul|codec|model ...]   (default: all)
 *
 * 1. sequence images: a 64 MiB image written and read back through 12 MiB
 *    windows (the default move-out window), from and into scattered pages,
 *    against memcpy of the same bytes twice;
 * 2. the cpu bf16 matrix product 4096 x 4096, 1 and 16 tokens: weight bytes
 *    streamed per second against memcpy's bandwidth, and GFLOP/s;
 * 3. the control codec: status_reply messages encoded and decoded per second;
 * 4. the model on the cpu backend: prefill and decode tokens per second of
 *    the tiny presets at 1, 2, 4 and 8 lanes (as many requests as lanes, 128
 *    prompt tokens and 64 generated each, the engine's rounds timed one by
 *    one: rounds with a prefill chunk count as prefill, the others as
 *    decode), with the decode rate against one lane's.
 * Best of several repetitions; results go to docs/benchmarks.md by hand with
 * the command that produced them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_ops.h"
#include "cpu_pool.h"
#include "engine.h"
#include "gguf.h"
#include "msg.h"
#include "seqimg.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double bench_memcpy(void *dst, const void *src, size_t n, int reps)
{
	double best = 1e30;

	for (int r = 0; r < reps; r++) {
		double t = now();

		memcpy(dst, src, n);
		t = now() - t;
		best = t < best ? t : best;
	}
	return (double)n / best; /* bytes per second */
}

static void bench_seqimg(int reps)
{
	const struct mdesc *m = mdesc_find("tiny-dense");
	const uint64_t page = mdesc_page_bytes(m, MDESC_KV_COMPACT);
	const uint32_t pages = (uint32_t)((64ull << 20) / page);
	const uint64_t window = 12ull << 20, bytes = (uint64_t)pages * page;
	void **src = malloc(pages * sizeof(void *)), **dst = malloc(pages * sizeof(void *));
	unsigned char *win = malloc(window), *flat = malloc(bytes), *flat2 = malloc(bytes);
	struct seqimg_header h = {0};
	double best = 1e30, mc;

	for (uint32_t i = 0; i < pages; i++) {
		src[i] = malloc(page);
		dst[i] = malloc(page);
		memset(src[i], (int)i, page);
		memset(dst[i], 0, page);
	}
	memset(flat, 1, bytes);
	snprintf(h.model, sizeof(h.model), "%s", m->name);
	h.model_id = seqimg_model_id(m);
	h.kv_format = MDESC_KV_COMPACT;
	h.page_bytes = (uint32_t)page;
	h.pages = pages;
	h.tokens = (uint64_t)pages * 64;
	for (int r = 0; r < reps; r++) {
		struct seqimg_parts ps = {src, NULL, NULL}, pd = {dst, NULL, NULL};
		struct seqimg_writer w;
		struct seqimg_reader rd;
		struct ig_errbuf eb;
		uint64_t n;
		double t = now();

		seqimg_writer_init(&w, &h, &ps);
		seqimg_reader_init(&rd, m, MDESC_KV_COMPACT, &pd, pages, 0, 0);
		do {
			seqimg_write_window(&w, win, window, &n);
			if (n && seqimg_read_window(&rd, win, n, &eb)) {
				fprintf(stderr, "seqimg: %s\n", eb.msg);
				exit(1);
			}
		} while (n);
		t = now() - t;
		best = t < best ? t : best;
	}
	mc = bench_memcpy(flat2, flat, bytes, reps);
	printf("seqimg   %llu MiB out and back in 12 MiB windows: %.2f GB/s; memcpy %.2f GB/s; "
	       "ratio %.2f (1.00 = two memcpys' worth)\n",
	       (unsigned long long)(bytes >> 20), 2.0 * (double)bytes / best / 1e9, mc / 1e9,
	       (2.0 * (double)bytes / best) / mc);
	for (uint32_t i = 0; i < pages; i++) {
		free(src[i]);
		free(dst[i]);
	}
	free(src);
	free(dst);
	free(win);
	free(flat);
	free(flat2);
}

static void bench_matmul(int reps)
{
	const size_t n = 4096;
	uint16_t *w = malloc(n * n * 2);
	float *x = malloc(16 * n * sizeof(float)), *y = malloc(16 * n * sizeof(float));
	unsigned char *a = malloc(n * n * 2), *b = malloc(n * n * 2);
	struct ig_errbuf eb;
	double mc;

	for (size_t i = 0; i < n * n; i++)
		w[i] = gguf_f32_to_bf16((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
	for (size_t i = 0; i < 16 * n; i++)
		x[i] = (float)(i % 7) * 0.1f;
	memset(a, 3, n * n * 2);
	mc = bench_memcpy(b, a, n * n * 2, reps);
	for (int threads = 1; threads <= 2; threads++) {
		struct cpool *pool;

		if (cpool_create(&pool, threads, &eb))
			exit(1);
		for (size_t tok = 1; tok <= 16; tok += 15) {
			double best = 1e30;

			for (int r = 0; r < reps; r++) {
				double t = now();

				cop_matmul_bf16(pool, w, x, y, n, n, tok);
				t = now() - t;
				best = t < best ? t : best;
			}
			printf(
			    "matmul   4096x4096 bf16, %2zu token(s), %d thread(s): %.1f GFLOP/s, "
			    "weights at %.2f GB/s = %.2f x memcpy (%.2f GB/s)\n",
			    tok, threads, 2.0 * (double)n * n * tok / best / 1e9,
			    (double)n * n * 2 / best / 1e9, ((double)n * n * 2 / best) / mc,
			    mc / 1e9);
		}
		cpool_destroy(pool);
	}
	free(w);
	free(x);
	free(y);
	free(a);
	free(b);
}

static int bench_sink(void *ctx, const char *buf, size_t len)
{
	struct msg_buf *b = ctx;

	(void)buf;
	b->n += len;
	return 0;
}

static void bench_codec(int reps)
{
	struct msg m = {.type = MSG_STATUS_REPLY}, out;
	struct msg_buf enc = {0};
	struct ig_errbuf eb;
	double t, best = 1e30;
	const int per = 20000;

	m.u.status_reply.seq = 42;
	m.u.status_reply.procs.n = 3;
	for (int i = 0; i < 3; i++)
		m.u.status_reply.procs.v[i] = (struct msg_proc){msg_str_of("gpu-worker"), 1234,
		                                                msg_str_of("running"), 99999, 1};
	msg_encode(&m, msg_buf_write, &enc, &eb);
	for (int r = 0; r < reps; r++) {
		struct msg_buf sink = {0};

		t = now();
		for (int i = 0; i < per; i++) {
			msg_encode(&m, bench_sink, &sink, &eb);
			msg_decode(enc.p, enc.n, &out, &eb);
		}
		t = now() - t;
		best = t < best ? t : best;
	}
	printf("codec    status_reply (%zu bytes) encode + decode: %.0f per second\n", enc.n,
	       per / best);
	msg_buf_release(&enc);
}

/* One preset at `lanes` lanes: prefill and decode tokens per second. */
static void bench_model_lanes(struct mdl *d, uint32_t lanes, int threads, double *prefill_tps,
                              double *decode_tps)
{
	enum { PROMPT = 128, GEN = 64 };
	const uint64_t ctx = 256;
	uint64_t pb = mdesc_page_bytes(d->m, MDESC_KV_BF16);
	uint32_t pages = lanes * (uint32_t)(ctx / 64), prompt[PROMPT];
	struct be be = {.ops = backend_find("cpu", NULL)};
	void *region = NULL;
	struct eng_cfg cfg = {lanes, d->m->default_chunk, ctx,  GEN, MDESC_KV_BF16,
	                      lanes, UINT32_MAX,          NULL, NULL};
	struct ig_errbuf eb;
	struct cpool *pool;
	struct kvpool kv;
	struct eng *e;
	struct eng_stats before, after;
	double tp = 0, td = 0;
	uint64_t np = 0, nd = 0;

	if (!be.ops || be.ops->open(&be, 1ull << 30, &eb) ||
	    be.ops->alloc(&be, (uint64_t)pages * pb, &region, &eb) ||
	    kvpool_init(&kv, region, pb, pages, &eb) || cpool_create(&pool, threads, &eb) ||
	    eng_create(&e, &be, d, &kv, pool, &cfg, &eb)) {
		fprintf(stderr, "ignis-bench: model: %s\n", eb.msg);
		exit(1);
	}
	for (uint32_t i = 0; i < lanes; i++) {
		struct eng_admission adm;
		struct eng_req r = {prompt, PROMPT, GEN, SCHED_INTERACTIVE, {0.0f, 0, 1.0f, 0}};

		for (uint32_t t = 0; t < PROMPT; t++)
			prompt[t] = (t * 7 + i * 13) % 256;
		if (eng_submit(e, &r, &adm, &eb)) {
			fprintf(stderr, "ignis-bench: model: %s\n", eb.msg);
			exit(1);
		}
	}
	for (;;) {
		uint32_t ran;
		double t;

		eng_stats(e, &before);
		t = now();
		if (eng_round(e, &ran, &eb)) {
			fprintf(stderr, "ignis-bench: model: %s\n", eb.msg);
			exit(1);
		}
		t = now() - t;
		if (!ran)
			break;
		eng_stats(e, &after);
		if (after.prefill_tokens > before.prefill_tokens) {
			tp += t;
			np += after.prefill_tokens - before.prefill_tokens;
		} else {
			td += t;
			nd += after.decode_tokens - before.decode_tokens;
		}
	}
	*prefill_tps = tp > 0 ? (double)np / tp : 0;
	*decode_tps = td > 0 ? (double)nd / td : 0;
	eng_destroy(e);
	cpool_destroy(pool);
	kvpool_release(&kv);
	be.ops->free(&be, region, (uint64_t)pages * pb);
	be.ops->close(&be);
}

static void bench_model(int reps)
{
	static const char *const presets[] = {"tiny-dense", "tiny-moe"};
	static const uint32_t lanes[] = {1, 2, 4, 8};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;

	for (size_t p = 0; p < sizeof(presets) / sizeof(presets[0]); p++) {
		char path[128];
		struct ig_errbuf eb;
		struct mfile f;
		struct mdl d;
		double one = 0;

		snprintf(path, sizeof(path), "/tmp/ignis-bench-%s-%d.gguf", presets[p],
		         (int)getpid());
		if (mfile_write_synthetic(mdesc_find(presets[p]), 1, MFILE_BF16, path, &eb) ||
		    mfile_open(&f, path, &eb) || mdl_bind(&d, &f, &eb)) {
			fprintf(stderr, "ignis-bench: model: %s\n", eb.msg);
			exit(1);
		}
		unlink(path);
		for (size_t l = 0; l < sizeof(lanes) / sizeof(lanes[0]); l++) {
			double bp = 0, bd = 0;

			for (int r = 0; r < reps; r++) {
				double tp, td;

				bench_model_lanes(&d, lanes[l], threads, &tp, &td);
				bp = tp > bp ? tp : bp;
				bd = td > bd ? td : bd;
			}
			if (l == 0)
				one = bd;
			printf("model    %-10s %d threads, %u lane%s: prefill %8.0f tok/s, decode "
			       "%7.0f tok/s (%.2fx one lane)\n",
			       presets[p], threads, lanes[l], lanes[l] > 1 ? "s" : " ", bp, bd,
			       one > 0 ? bd / one : 0);
		}
		mdl_release(&d);
		mfile_close(&f);
	}
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(int reps);
	} parts[] = {
	    {"seqimg", bench_seqimg},
	    {"matmul", bench_matmul},
	    {"codec", bench_codec},
	    {"model", bench_model},
	};
	int reps = 5, first = 1, any = 0;

	if (argc > 1 && !strcmp(argv[1], "--quick")) {
		reps = 2;
		first = 2;
	}
	for (int i = first; i < argc; i++) {
		size_t k = 0;

		while (k < sizeof(parts) / sizeof(parts[0]) && strcmp(argv[i], parts[k].name))
			k++;
		if (k == sizeof(parts) / sizeof(parts[0])) {
			fprintf(stderr,
			        "ignis-bench: unknown part '%s'; accepted: --quick first, then any "
			        "of seqimg, matmul, codec, model\n",
			        argv[i]);
			return 2;
		}
		parts[k].fn(reps);
		any = 1;
	}
	if (!any)
		for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++)
			parts[k].fn(reps);
	return 0;
}
