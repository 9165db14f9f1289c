/*
 * ignis-bench - measurements that are not tests: each reports a ratio
 * measured in the same run against the machine's own memcpy, so the figures
 * travel between machines better than absolute times do.
 *
 *   ignis-bench [--quick] [seqimg|matmul|codec|model|types|llama|kvstore|moves|reuse|
 *               experts|kvformat ...]
 *   (default: all)
 *   ignis-bench --help
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
 *    decode), with the decode rate against one lane's;
 * 5. the kvstore tiers at 256 KiB, 12 MiB and 16 MiB windows: KV-RAM commit
 *    and read against memcpy of the same windows, KV-disk put and get
 *    against raw LMDB with the same flags and map size (bench_kvstore);
 * 6. moves (issue 7): the other lanes' decode-round latency (p50, p99) while
 *    a whole-context sequence moves out to KV-RAM and back through a real
 *    ignis-kvstored, against the same rounds of a run where nothing moves,
 *    at several window sizes; the move's throughput against memcpy of the
 *    image; the rounds it took and the tokens decoded meanwhile (mv_group).
 *    The daemon is $IGNIS_KVSTORED, else ../kvstore-daemon/ignis-kvstored
 *    from this program's directory (the build tree).
 * kvformat is not a speed: the KV formats' error against exact vectors,
 * per vector, in attention and end to end (bench_kvformat.c).
 * Best of several repetitions; results go to docs/benchmarks.md by hand with
 * the command that produced them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lmdb.h>
#include <nng/nng.h>

#include "kvstore-daemon/arena.h"
#include "kvram/kvcopy.h"
#include "gpu-worker/backend/cpu/cpu_ops.h"
#include "gpu-worker/backend/cpu/cpu_pool.h"
#include "gpu-worker/engine/engine.h"
#include "model/gguf.h"
#include "model/bpe.h"
#include "model/tokenizer.h"
#include "grammar/json_schema.h"
#include "gpu-worker/engine/kvclient.h"
#include "kvstore-daemon/kvdisk.h"
#include "model/mfile.h"
#include "proto/msg.h"
#include "model/seqimg.h"
#include "proto/transport.h"
#include "tests/unit/llama_oracle.h"
#include "tools/bench_kvformat.h"

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

/* Constrained decoding for bench_model_lanes (NULL: none, greedy): the
 * grammar, the ids' bytes, the end of generation, each request's sampling
 * (seeded with its lane); out: the mask's time per constrained token. */
struct bgram {
	struct grammar *g;
	const struct tok_vocab *vocab;
	uint32_t eos;
	const struct bpe *bpe;
	float temperature;
	double mask_us;  /* out */
	uint64_t tokens; /* out: tokens picked under the grammar */
};

static bool bench_is_eog(void *ctx, uint32_t tok)
{
	return bpe_is_eog(ctx, tok);
}

/* One preset at `lanes` lanes: prefill and decode tokens per second. */
static void bench_model_lanes_g(struct mfile *f, uint32_t lanes, int threads, double *prefill_tps,
                                double *decode_tps, struct bgram *gr)
{
	enum { PROMPT = 128, GEN = 64 };
	const uint64_t ctx = 256;
	const struct mdesc *m = &f->desc;
	uint64_t pb = mdesc_page_bytes(m, MDESC_KV_BF16);
	uint32_t pages = lanes * (uint32_t)mdesc_pages_for(ctx), prompt[PROMPT];
	struct be be = {.ops = backend_find("cpu", NULL)};
	void *region = NULL;
	struct eng_cfg cfg = {.lanes = lanes,
	                      .chunk = m->default_chunk,
	                      .context = ctx,
	                      .default_max_tokens = GEN,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = lanes,
	                      .eos = gr ? gr->eos : UINT32_MAX,
	                      .is_eog = gr ? bench_is_eog : NULL,
	                      .ctx = gr ? (void *)gr->bpe : NULL,
	                      .vocab = gr ? gr->vocab : NULL};
	struct be_bind_opts bo = {.max_round_tokens = lanes + m->default_chunk,
	                          .context = ctx,
	                          .threads = (uint32_t)threads,
	                          .states = lanes};
	struct ig_errbuf eb;
	struct be_model d;
	struct kvpool kv;
	struct eng *e;
	struct eng_stats before, after;
	double tp = 0, td = 0;
	uint64_t np = 0, nd = 0;

	if (!be.ops || be.ops->open(&be, 1ull << 30, &eb) || be_bind_reserve(&be, f, &bo, &eb) ||
	    be.ops->model_bind(&be, f, NULL, &bo, &d, &eb) ||
	    be.ops->alloc(&be, (uint64_t)pages * pb, &region, &eb) ||
	    kvpool_init(&kv, region, pb, pages, &eb) || eng_create(&e, &be, &d, &kv, &cfg, &eb)) {
		fprintf(stderr, "ignis-bench: model: %s\n", eb.msg);
		exit(1);
	}
	for (uint32_t i = 0; i < lanes; i++) {
		struct eng_admission adm;
		struct eng_req r = {prompt, PROMPT, GEN, SCHED_INTERACTIVE, {0.0f, 0, 1.0f, 0},
		                    NULL,   NULL,   0, false};

		if (gr) {
			r.smp = (struct smp_params){gr->temperature, 0, 1.0f, 100 + i};
			r.grammar = gr->g;
		}
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
	if (gr) {
		gr->tokens = after.grammar_tokens;
		gr->mask_us = after.grammar_tokens
		                  ? (double)after.grammar_mask_us / (double)after.grammar_tokens
		                  : 0;
	}
	eng_destroy(e);
	kvpool_release(&kv);
	be.ops->free(&be, region, (uint64_t)pages * pb);
	be.ops->model_release(&be, &d);
	be_bind_unreserve(&be, &bo);
	be.ops->close(&be);
}

static void bench_model_lanes(struct mfile *f, uint32_t lanes, int threads, double *prefill_tps,
                              double *decode_tps)
{
	bench_model_lanes_g(f, lanes, threads, prefill_tps, decode_tps, NULL);
}

/*
 * Constrained decoding's cost in decode (issue 30, item 7): a model of
 * Qwen3-0.6B's shape (28 layers, hidden 1024, 16/8 heads of 128, FFN
 * 3072; Q8_0) over the real Qwen3 vocabulary (--vocab VOCAB.gguf, from
 * `ignis-vocab convert tokenizer.json`), 1 and 4 lanes, 128 prompt and up
 * to 64 generated tokens each, greedy (a pick costs the same argmax pass
 * with and without a mask, so the difference is the grammar's): free, then under
 * a nested JSON schema with the grammar fresh (its first documents: every
 * state new) and kept (the next requests with the same schema, as the
 * worker's grammar cache keeps it), interleaved within each repetition.
 * The decode rate against the free one's, and the mask's time per token.
 */
static const char *bench_vocab_path;

static void bench_grammar(int reps)
{
	static const char schema_text[] =
	    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":"
	    "24},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},"
	    "\"maxItems\":8},\"score\":{\"type\":\"number\"},\"kind\":{\"enum\":[\"a\",\"b\","
	    "\"c\"]},\"items\":{\"type\":\"array\",\"maxItems\":6,\"items\":{\"type\":\"object\","
	    "\"properties\":{\"id\":{\"type\":\"integer\"},\"label\":{\"type\":\"string\","
	    "\"maxLength\":16},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"id\",\"label\","
	    "\"ok\"],\"additionalProperties\":false}}},\"required\":[\"name\",\"tags\",\"score\","
	    "\"kind\",\"items\"],\"additionalProperties\":false}";
	static const uint32_t lanes[] = {1, 4};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
	struct mdesc m = *mdesc_find("tiny-dense");
	double free_tps[2] = {0}, cold_tps[2] = {0}, warm_tps[2] = {0};
	double cold_us[2] = {1e30, 1e30}, warm_us[2] = {1e30, 1e30};
	uint64_t cold_n[2] = {0}, warm_n[2] = {0};
	struct ig_errbuf eb;
	struct tok_vocab tv;
	struct gguf vg;
	struct bpe *b = NULL;
	struct grammar *warm = NULL;
	json_t *schema;
	struct mfile f;
	char path[128];

	if (!bench_vocab_path) {
		printf("grammar  skipped: give --vocab VOCAB.gguf (ignis-vocab convert "
		       "tokenizer.json -o VOCAB.gguf)\n");
		return;
	}
	schema = json_loads(schema_text, 0, NULL);
	if (!schema || gguf_open(&vg, bench_vocab_path, &eb) || bpe_open(&b, &vg, &eb) ||
	    gs_compile(schema, &warm, &eb)) {
		fprintf(stderr, "ignis-bench: grammar: %s\n", schema ? eb.msg : "the schema");
		exit(1);
	}
	tok_vocab_init(&tv, MDESC_TOK_GPT2, b);
	m.layers = 28;
	m.full_interval = 1;
	m.hidden = 1024;
	m.q_heads = 16;
	m.kv_heads = 8;
	m.head_dim = 128;
	m.ffn_inter = 3072;
	m.vocab = bpe_info(b)->n_tokens;
	m.tokenizer = MDESC_TOK_NONE;
	m.name = "bench-qwen3-0.6b-shape";
	snprintf(path, sizeof(path), "/tmp/ignis-bench-grammar-%d.gguf", (int)getpid());
	if (mfile_write_synthetic(&m, 1, MFILE_Q8_0, path, &eb) || mfile_open(&f, path, &eb)) {
		fprintf(stderr, "ignis-bench: grammar: %s\n", eb.msg);
		unlink(path);
		exit(1);
	}
	unlink(path);
	for (int r = 0; r < reps; r++)
		for (size_t l = 0; l < 2; l++) {
			struct bgram gr = {.vocab = &tv,
			                   .eos = bpe_find(b, "<|im_end|>", 10),
			                   .bpe = b,
			                   .temperature = 0.0f};
			struct grammar *cold;
			double tp, td;

			gr.g = NULL;
			bench_model_lanes_g(&f, lanes[l], threads, &tp, &td, &gr);
			free_tps[l] = td > free_tps[l] ? td : free_tps[l];
			if (gs_compile(schema, &cold, &eb)) {
				fprintf(stderr, "ignis-bench: grammar: %s\n", eb.msg);
				exit(1);
			}
			gr.g = cold;
			bench_model_lanes_g(&f, lanes[l], threads, &tp, &td, &gr);
			grammar_destroy(cold);
			cold_tps[l] = td > cold_tps[l] ? td : cold_tps[l];
			cold_us[l] = gr.mask_us < cold_us[l] ? gr.mask_us : cold_us[l];
			cold_n[l] = gr.tokens;
			gr.g = warm; /* kept across repetitions, as the grammar cache keeps it */
			bench_model_lanes_g(&f, lanes[l], threads, &tp, &td, &gr);
			if (r > 0 || l > 0) {
				warm_tps[l] = td > warm_tps[l] ? td : warm_tps[l];
				warm_us[l] = gr.mask_us < warm_us[l] ? gr.mask_us : warm_us[l];
				warm_n[l] = gr.tokens;
			}
		}
	for (size_t l = 0; l < 2; l++)
		/* the masks' share of a token's decode time: the slowdown they
		 * cause, apart from the VM's drift between runs */
		printf(
		    "grammar  %u lane%s, %d threads, vocab %u: decode free %.2f tok/s; schema "
		    "fresh %.2f tok/s (%+.1f%%; mask %.0f us/token over %llu, %.2f%% of decode), "
		    "kept %.2f tok/s (%+.1f%%; mask %.1f us/token over %llu, %.3f%% of decode)\n",
		    lanes[l], lanes[l] > 1 ? "s" : "", threads, m.vocab, free_tps[l], cold_tps[l],
		    free_tps[l] > 0 ? 100.0 * (cold_tps[l] / free_tps[l] - 1) : 0, cold_us[l],
		    (unsigned long long)cold_n[l], 100.0 * cold_us[l] * 1e-6 * cold_tps[l],
		    warm_tps[l], free_tps[l] > 0 ? 100.0 * (warm_tps[l] / free_tps[l] - 1) : 0,
		    warm_us[l], (unsigned long long)warm_n[l],
		    100.0 * warm_us[l] * 1e-6 * warm_tps[l]);
	grammar_destroy(warm);
	json_decref(schema);
	mfile_close(&f);
	bpe_close(b);
	gguf_close(&vg);
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
		double one = 0;

		snprintf(path, sizeof(path), "/tmp/ignis-bench-%s-%d.gguf", presets[p],
		         (int)getpid());
		if (mfile_write_synthetic(mdesc_find(presets[p]), 1, MFILE_BF16, path, &eb) ||
		    mfile_open(&f, path, &eb)) {
			fprintf(stderr, "ignis-bench: model: %s\n", eb.msg);
			exit(1);
		}
		unlink(path);
		for (size_t l = 0; l < sizeof(lanes) / sizeof(lanes[0]); l++) {
			double bp = 0, bd = 0;

			for (int r = 0; r < reps; r++) {
				double tp, td;

				bench_model_lanes(&f, lanes[l], threads, &tp, &td);
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
		mfile_close(&f);
	}
}

/*
 * Tensor types: the same dense shape (8 layers, hidden 1024, 2816
 * intermediate: 156 MB in bf16, past the caches) written in bf16 and in
 * block types, prefill and decode at 1 and 4 lanes, the types interleaved
 * within each repetition (the shared VM's drift falls on all alike), best of
 * the repetitions; ratios against bf16 from the same run.
 */
static void bench_types(int reps)
{
	static const struct {
		const char *name;
		enum mfile_dtype dt;
	} types[] = {{"bf16", MFILE_BF16},
	             {"q8_0", MFILE_Q8_0},
	             {"q6_k", MFILE_Q6_K},
	             {"q4_k", MFILE_Q4_K},
	             {"q4_0", MFILE_Q4_0}};
	enum { NT = sizeof(types) / sizeof(types[0]) };
	static const uint32_t lanes[] = {1, 4};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
	struct mdesc m = *mdesc_find("tiny-dense");
	struct mfile f[NT];
	double bp[2][NT] = {{0}}, bd[2][NT] = {{0}};

	m.layers = 8;
	m.hidden = 1024;
	m.ffn_inter = 2816;
	m.name = "bench-dense-1024";
	for (size_t t = 0; t < NT; t++) {
		char path[128];
		struct ig_errbuf eb;

		snprintf(path, sizeof(path), "/tmp/ignis-bench-types-%s-%d.gguf", types[t].name,
		         (int)getpid());
		if (mfile_write_synthetic(&m, 1, types[t].dt, path, &eb) ||
		    mfile_open(&f[t], path, &eb)) {
			fprintf(stderr, "ignis-bench: types: %s\n", eb.msg);
			unlink(path);
			exit(1);
		}
		unlink(path);
	}
	for (int r = 0; r < reps; r++)
		for (size_t l = 0; l < 2; l++)
			for (size_t t = 0; t < NT; t++) {
				double tp, td;

				bench_model_lanes(&f[t], lanes[l], threads, &tp, &td);
				bp[l][t] = tp > bp[l][t] ? tp : bp[l][t];
				bd[l][t] = td > bd[l][t] ? td : bd[l][t];
			}
	for (size_t l = 0; l < 2; l++)
		for (size_t t = 0; t < NT; t++)
			printf("types    %-4s %4.0f MB %d threads, %u lane%s: prefill %6.0f tok/s "
			       "(%.2fx bf16), decode %5.0f tok/s (%.2fx bf16)\n",
			       types[t].name, (double)mdesc_weight_bytes(&f[t].desc) / 1e6, threads,
			       lanes[l], lanes[l] > 1 ? "s" : " ", bp[l][t],
			       bp[l][0] > 0 ? bp[l][t] / bp[l][0] : 0, bd[l][t],
			       bd[l][0] > 0 ? bd[l][t] / bd[l][0] : 0);
	for (size_t t = 0; t < NT; t++)
		mfile_close(&f[t]);
}

/* ---- llama: ours against llama.cpp on the same files ---------------------- */

/* llama.cpp on `path` at `lanes` sequences: PROMPT tokens each prefilled in
 * one batch, then GEN decode steps of one token a sequence (greedy). */
static int bench_llama_side(struct llo *ll, void *lm, uint32_t lanes, int threads,
                            double *prefill_tps, double *decode_tps)
{
	enum { PROMPT = 128, GEN = 64 };
	struct llo_context_params cp = ll->context_defaults();
	struct llo_batch b;
	void *lc;
	double t;
	int32_t last[8];

	cp.n_ctx = lanes * 256;
	cp.n_batch = cp.n_ubatch = lanes * PROMPT;
	cp.n_seq_max = lanes;
	cp.n_threads = cp.n_threads_batch = threads;
	if (!(lc = ll->init_context(lm, cp)))
		return -1;
	b = ll->batch_init((int32_t)(lanes * PROMPT), 0, (int32_t)lanes);
	b.n_tokens = 0;
	for (uint32_t i = 0; i < lanes; i++)
		for (uint32_t k = 0; k < PROMPT; k++) {
			int32_t j = b.n_tokens++;

			b.token[j] = (int32_t)((k * 7 + i * 13) % 256);
			b.pos[j] = (int32_t)k;
			b.n_seq_id[j] = 1;
			b.seq_id[j][0] = (int32_t)i;
			b.logits[j] = k + 1 == PROMPT;
		}
	t = now();
	if (ll->decode(lc, b))
		goto fail;
	*prefill_tps = lanes * PROMPT / (now() - t);
	for (uint32_t i = 0; i < lanes; i++)
		last[i] = 0;
	t = now();
	for (uint32_t g = 0; g < GEN; g++) {
		b.n_tokens = 0;
		for (uint32_t i = 0; i < lanes; i++) {
			int32_t j = b.n_tokens++;

			b.token[j] = last[i];
			b.pos[j] = (int32_t)(PROMPT + g);
			b.n_seq_id[j] = 1;
			b.seq_id[j][0] = (int32_t)i;
			b.logits[j] = 1;
		}
		if (ll->decode(lc, b))
			goto fail;
		/* the next token: the best byte token (its only use is to be fed
		 * back; ours feeds back its greedy pick too) */
		for (uint32_t i = 0; i < lanes; i++) {
			const float *lg = ll->logits_ith(lc, (int32_t)i);
			int32_t best = 0;

			for (int32_t v = 1; v < 256; v++)
				best = lg[v] > lg[best] ? v : best;
			last[i] = best;
		}
	}
	*decode_tps = (double)lanes * GEN / (now() - t);
	ll->batch_free(b);
	ll->free_context(lc);
	return 0;
fail:
	ll->batch_free(b);
	ll->free_context(lc);
	return -1;
}

/*
 * The same dense shape in llama.cpp's qwen3 layout (4 layers, hidden 2048,
 * 5632 intermediate, 16 heads over 8 KV heads of 128: 377 MB in bf16, past
 * the caches), and in its qwen35 layout (the same, with 3 of the 4 layers
 * the gated delta rule: 8 key heads, 16 value heads of 128; 400 MB),
 * written in bf16, Q8_0 and Q4_K, run by our cpu backend (the engine's
 * rounds, bf16 KV) and by llama.cpp (libllama from the oracle, its
 * defaults) with the same threads: prefill and decode tokens per second at
 * 1 and 4 sequences, the two sides interleaved (which goes first
 * alternates) within each repetition, best of the repetitions.
 */
static void bench_llama_layout(int reps, enum mdesc_arch arch)
{
	static const struct {
		const char *name;
		enum mfile_dtype dt;
	} types[] = {{"bf16", MFILE_BF16}, {"q8_0", MFILE_Q8_0}, {"q4_k", MFILE_Q4_K}};
	enum { NT = sizeof(types) / sizeof(types[0]) };
	static const uint32_t lanes[] = {1, 4};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
	struct mdesc src = *mdesc_find("tiny-dense"), m;
	struct llo ll;
	char path[NT][128];
	struct mfile f[NT];
	void *lm[NT];
	double op[2][NT] = {{0}}, od[2][NT] = {{0}}, lp[2][NT] = {{0}}, ld[2][NT] = {{0}};
	int rc;

	if (!getenv("IGNIS_ORACLE_LIB_DIR"))
		setenv("IGNIS_ORACLE_LIB_DIR",
		       ".deps/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64", 0);
	rc = llo_open_fastest(&ll);
	if (rc <= 0) {
		printf("llama    skipped: %s\n",
		       rc < 0 ? ll.why : "llama.cpp is not installed (tools/install-oracle.sh)");
		return;
	}
	src.layers = 4;
	src.hidden = 2048;
	src.ffn_inter = 5632;
	src.q_heads = 16;
	src.kv_heads = 8;
	src.head_dim = 128;
	src.name = arch == MDESC_ARCH_QWEN3 ? "bench-qwen3-2048" : "bench-qwen35-2048";
	src.lin_k_heads = 8;
	src.lin_v_heads = 16;
	src.lin_dk = src.lin_dv = 128;
	src.rope_dims = 32;
	if (mfile_as_layout(&src, arch, &m, NULL)) {
		fprintf(stderr, "ignis-bench: llama: no %s shape\n", mdesc_arch_name(arch));
		exit(1);
	}
	for (size_t t = 0; t < NT; t++) {
		struct llo_model_params mp = ll.model_defaults();
		struct ig_errbuf eb;

		snprintf(path[t], sizeof(path[t]), "/tmp/ignis-bench-llama-%s-%d.gguf",
		         types[t].name, (int)getpid());
		if (mfile_write_synthetic(&m, 1, types[t].dt, path[t], &eb) ||
		    mfile_open(&f[t], path[t], &eb)) {
			fprintf(stderr, "ignis-bench: llama: %s\n", eb.msg);
			exit(1);
		}
		mp.n_gpu_layers = 0;
		if (!(lm[t] = ll.load(path[t], mp))) {
			fprintf(stderr, "ignis-bench: llama: llama.cpp could not load %s\n",
			        path[t]);
			exit(1);
		}
	}
	for (int r = 0; r < reps; r++)
		for (size_t l = 0; l < 2; l++)
			for (size_t t = 0; t < NT; t++)
				for (int side = 0; side < 2; side++) {
					double tp = 0, td = 0;

					if ((side + r) % 2 == 0) {
						bench_model_lanes(&f[t], lanes[l], threads, &tp,
						                  &td);
						op[l][t] = tp > op[l][t] ? tp : op[l][t];
						od[l][t] = td > od[l][t] ? td : od[l][t];
					} else {
						if (bench_llama_side(&ll, lm[t], lanes[l], threads,
						                     &tp, &td)) {
							fprintf(stderr, "ignis-bench: llama: "
							                "llama.cpp failed\n");
							exit(1);
						}
						lp[l][t] = tp > lp[l][t] ? tp : lp[l][t];
						ld[l][t] = td > ld[l][t] ? td : ld[l][t];
					}
				}
	for (size_t l = 0; l < 2; l++)
		for (size_t t = 0; t < NT; t++)
			printf("llama    %-6s %-4s %-6s %4.0f MB %d threads, %u seq%s: prefill "
			       "%6.0f vs "
			       "%6.0f tok/s (%.2fx), decode %5.1f vs %5.1f tok/s (%.2fx)\n",
			       mdesc_arch_name(arch), types[t].name, cop_kernels(),
			       (double)mdesc_weight_bytes(&f[t].desc) / 1e6, threads, lanes[l],
			       lanes[l] > 1 ? "s" : " ", op[l][t], lp[l][t],
			       lp[l][t] > 0 ? op[l][t] / lp[l][t] : 0, od[l][t], ld[l][t],
			       ld[l][t] > 0 ? od[l][t] / ld[l][t] : 0);
	for (size_t t = 0; t < NT; t++) {
		ll.free_model(lm[t]);
		mfile_close(&f[t]);
		unlink(path[t]);
	}
	dlclose(ll.lib);
}

static void bench_llama(int reps)
{
	bench_llama_layout(reps, MDESC_ARCH_QWEN3);
	bench_llama_layout(reps, MDESC_ARCH_QWEN35);
}

/* ---- kvstore: KV-RAM and KV-disk against memcpy and raw LMDB -------------- */

/*
 * One image of KVB_IMAGE bytes (enough windows at every size: 768 of 256 KiB,
 * 16 of 12 MiB, 12 of 16 MiB) moved through the libraries in-process, the
 * way the daemon and the worker use them:
 *   KV-RAM commit: arena_reserve, then per window the worker's copy into
 *     the extent with its checksum taken in the same pass (kvcopy_hash, as
 *     kvc_write_window) and arena_commit recording it (ADR 0015); against
 *     memcpy of the same windows from the same source into the same extent.
 *   KV-RAM read: arena_get (kvs_fetch's), then the worker's copy of each
 *     window out, checked against its recorded checksum in the same pass
 *     (kvcopy_check, as kvc_read_window); against memcpy of the same
 *     windows from the extent to the same destination.
 *   KV-disk put and get: kvdisk_put of the complete sequence from the arena
 *     and kvdisk_get into the destination; against raw LMDB in another
 *     directory with the same flags and map size, one write transaction
 *     putting the windows (MDB_RESERVE + memcpy, 16-byte keys) and one read
 *     transaction (mdb_get + memcpy out).
 * Ours runs first in even repetitions, the reference in odd ones; the best
 * of each is kept. Both LMDB files are emptied after every repetition (and
 * a one-record commit lets the next put reuse the freed pages, as
 * kvdisk_drop does), so each holds about one image: 0.65 GiB of blocks at
 * the peak, measured. Puts mostly land on pages still dirty from the
 * previous repetition and gets read what the put left in the page cache:
 * both measure copying, hashing and LMDB's work, not the device.
 */
#define KVB_IMAGE (192ull << 20)
/* KV-disk's flag ceiling, the volume rule off: room for one image with its
 * record headers, whatever the window. */
#define KVB_CEILING    (512ull << 20)
#define KVB_LMDB_FLAGS (MDB_NOSYNC | MDB_WRITEMAP | MDB_NOTLS) /* ADR 0011 */

struct kvb {
	char dir[256], disk_dir[272], raw_dir[272], shm[64];
	struct arena *ram;
	struct kvdisk *disk;
	MDB_env *env;
	MDB_dbi dbi;
	unsigned char *src, *dst;
	struct arena_window *w; /* ARENA_MAX_WINDOWS of them */
	uint64_t next_seq;
	bool made_dir;
};

/* The best rate (bytes per second) of each measurement at one window size. */
struct kvb_rates {
	double commit, commit_mc, read, read_mc, put, put_raw, get, get_raw;
};

static void kvb_keep(double *best, double bytes, double t)
{
	double r = bytes / t;

	*best = r > *best ? r : *best;
}

static int kvb_lmdb_err(struct ig_errbuf *eb, const char *dir, const char *what, int rc)
{
	return ig_errf(eb, IG_E_IO, "raw LMDB at '%s': %s: %s", dir, what, mdb_strerror(rc));
}

static void kvb_rm(const char *dir, const char *file)
{
	char p[300];

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	if (unlink(p) != 0 && errno != ENOENT)
		fprintf(stderr, "ignis-bench: kvstore: removing '%s': %s\n", p, strerror(errno));
}

/* Remove the directory and what is in it (once). Open files and mappings
 * live on until closed, so kvb_open calls this as soon as everything is
 * open: an interrupted run leaves nothing behind. */
static void kvb_remove_dir(struct kvb *k)
{
	static const char *const files[] = {"data.mdb", "lock.mdb", "kvdisk.state"};

	if (!k->made_dir)
		return;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		kvb_rm(k->disk_dir, files[i]);
		kvb_rm(k->raw_dir, files[i]);
	}
	if ((rmdir(k->disk_dir) != 0 && errno != ENOENT) ||
	    (rmdir(k->raw_dir) != 0 && errno != ENOENT) || rmdir(k->dir) != 0)
		fprintf(stderr, "ignis-bench: kvstore: could not remove '%s': %s\n", k->dir,
		        strerror(errno));
	k->made_dir = false;
}

/* Undo kvb_open, whatever part of it was done. */
static void kvb_release(struct kvb *k)
{
	kvb_remove_dir(k);
	kvdisk_close(k->disk);
	k->disk = NULL;
	if (k->env)
		mdb_env_close(k->env);
	k->env = NULL;
	arena_close(k->ram); /* its name was removed at open */
	k->ram = NULL;
	free(k->src);
	free(k->dst);
	free(k->w);
	k->src = k->dst = NULL;
	k->w = NULL;
}

static int kvb_open(struct kvb *k, struct ig_errbuf *eb)
{
	const char *tmp = getenv("TMPDIR");
	MDB_txn *txn;
	int rc;

	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(k->dir, sizeof(k->dir), "%s/ignis-bench-kv-XXXXXX", tmp);
	if (!mkdtemp(k->dir))
		return ig_errf(eb, IG_E_IO, "making a directory in '%s': %s; set TMPDIR", tmp,
		               strerror(errno));
	k->made_dir = true;
	snprintf(k->disk_dir, sizeof(k->disk_dir), "%s/kvdisk", k->dir);
	snprintf(k->raw_dir, sizeof(k->raw_dir), "%s/raw", k->dir);
	if (mkdir(k->disk_dir, 0700) != 0 || mkdir(k->raw_dir, 0700) != 0)
		return ig_errf(eb, IG_E_IO, "making directories in '%s': %s", k->dir,
		               strerror(errno));

	/* Block-aligned, as the worker's KV pages and the arena's extents are.
	 * (malloc's large blocks start 16 bytes into a page: with an aligned
	 * source, glibc's memcpy of 256 KiB into such a destination runs at a
	 * third of its speed on the AMD development VM.) */
	k->src = aligned_alloc(ARENA_BLOCK, KVB_IMAGE);
	k->dst = aligned_alloc(ARENA_BLOCK, KVB_IMAGE);
	k->w = calloc(ARENA_MAX_WINDOWS, sizeof(*k->w));
	if (!k->src || !k->dst || !k->w)
		return ig_errf(eb, IG_E_NOMEM, "no memory for two %llu MiB buffers",
		               KVB_IMAGE >> 20);
	for (uint64_t i = 0; i < KVB_IMAGE; i += 8) { /* every page touched, not constant */
		uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;

		memcpy(k->src + i, &x, 8);
	}
	memset(k->dst, 0, KVB_IMAGE);

	/* The name goes as soon as the mapping is held: an interrupted run
	 * leaves nothing in /dev/shm. */
	snprintf(k->shm, sizeof(k->shm), "ignis-bench-kv-%d", (int)getpid());
	rc = arena_open(&k->ram, k->shm, KVB_IMAGE + 16 * ARENA_BLOCK, eb);
	if (rc)
		return rc;
	rc = arena_unlink(k->shm, eb);
	if (rc)
		return rc;

	rc = kvdisk_open(&k->disk, k->disk_dir, KVB_CEILING, 16ull << 20, KVDISK_OPEN_IGNORE_VOLUME,
	                 eb);
	if (rc)
		return rc;

	rc = mdb_env_create(&k->env);
	if (rc)
		return kvb_lmdb_err(eb, k->raw_dir, "mdb_env_create", rc);
	/* the raw environment gets KV-disk's own map size */
	{
		struct kvdisk_stats ds;

		kvdisk_stats(k->disk, &ds);
		rc = mdb_env_set_mapsize(k->env, ds.map_bytes);
	}
	if (!rc)
		rc = mdb_env_open(k->env, k->raw_dir, KVB_LMDB_FLAGS, 0600);
	if (rc)
		return kvb_lmdb_err(eb, k->raw_dir, "opening", rc);
	rc = mdb_txn_begin(k->env, NULL, 0, &txn);
	if (rc)
		return kvb_lmdb_err(eb, k->raw_dir, "mdb_txn_begin", rc);
	rc = mdb_dbi_open(txn, NULL, 0, &k->dbi);
	if (rc) {
		mdb_txn_abort(txn);
		return kvb_lmdb_err(eb, k->raw_dir, "mdb_dbi_open", rc);
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return kvb_lmdb_err(eb, k->raw_dir, "mdb_txn_commit", rc);
	/* LMDB and KV-disk work on their descriptors from here on (KV-disk uses
	 * its path again only to rebuild a damaged environment, which a fresh
	 * one is not) */
	kvb_remove_dir(k);
	return IG_E_OK;
}

static void kvb_key(unsigned char kb[16], uint64_t seq, uint64_t win)
{
	for (int i = 0; i < 8; i++) {
		kb[i] = (unsigned char)(seq >> (56 - 8 * i));
		kb[8 + i] = (unsigned char)(win >> (56 - 8 * i));
	}
}

/* Raw LMDB: the windows in one write transaction, reserved and copied. */
static int kvb_raw_put(struct kvb *k, uint64_t seq, const struct arena_meta *m,
                       struct ig_errbuf *eb)
{
	const unsigned char *base = arena_base(k->ram);
	unsigned char kb[16];
	MDB_txn *txn;
	int rc = mdb_txn_begin(k->env, NULL, 0, &txn);

	if (rc)
		return kvb_lmdb_err(eb, k->raw_dir, "mdb_txn_begin", rc);
	for (uint32_t i = 0; i < m->windows; i++) {
		MDB_val key = {16, kb}, v = {k->w[i].len, NULL};

		kvb_key(kb, seq, i);
		rc = mdb_put(txn, k->dbi, &key, &v, MDB_RESERVE);
		if (rc) {
			mdb_txn_abort(txn);
			return kvb_lmdb_err(eb, k->raw_dir, "mdb_put", rc);
		}
		memcpy(v.mv_data, base + k->w[i].offset, k->w[i].len);
	}
	rc = mdb_txn_commit(txn);
	return rc ? kvb_lmdb_err(eb, k->raw_dir, "mdb_txn_commit", rc) : IG_E_OK;
}

/* Raw LMDB: the windows read in one read transaction and copied out. */
static int kvb_raw_get(struct kvb *k, uint64_t seq, const struct arena_meta *m,
                       struct ig_errbuf *eb)
{
	unsigned char kb[16];
	MDB_txn *txn;
	int rc = mdb_txn_begin(k->env, NULL, MDB_RDONLY, &txn);

	if (rc)
		return kvb_lmdb_err(eb, k->raw_dir, "mdb_txn_begin", rc);
	for (uint32_t i = 0; i < m->windows; i++) {
		MDB_val key = {16, kb}, v;

		kvb_key(kb, seq, i);
		rc = mdb_get(txn, k->dbi, &key, &v);
		if (rc) {
			mdb_txn_abort(txn);
			return kvb_lmdb_err(eb, k->raw_dir, "mdb_get", rc);
		}
		memcpy(k->dst + (uint64_t)i * m->window_bytes, v.mv_data, v.mv_size);
	}
	mdb_txn_abort(txn);
	return IG_E_OK;
}

/* Raw LMDB: empty the database, then one more small commit so that the next
 * put may reuse the freed pages (LMDB reuses a page two transactions after
 * the one that freed it; kvdisk_drop does the same). */
static int kvb_raw_clear(struct kvb *k, struct ig_errbuf *eb)
{
	unsigned char kb[8] = "tick", vb[8] = {0};
	MDB_val key = {sizeof(kb), kb}, v = {sizeof(vb), vb};
	MDB_txn *txn;
	int rc = mdb_txn_begin(k->env, NULL, 0, &txn);

	if (!rc) {
		rc = mdb_drop(txn, k->dbi, 0);
		if (rc)
			mdb_txn_abort(txn);
		else
			rc = mdb_txn_commit(txn);
	}
	if (!rc)
		rc = mdb_txn_begin(k->env, NULL, 0, &txn);
	if (!rc) {
		rc = mdb_put(txn, k->dbi, &key, &v, 0);
		if (rc)
			mdb_txn_abort(txn);
		else
			rc = mdb_txn_commit(txn);
	}
	return rc ? kvb_lmdb_err(eb, k->raw_dir, "emptying", rc) : IG_E_OK;
}

/* KV-RAM commit, the worker's copy then the daemon's commit per window; or
 * (mc) the copies alone. */
static int kvb_ram_commit(struct kvb *k, const struct arena_meta *m, uint64_t offset, bool mc,
                          double *t, struct ig_errbuf *eb)
{
	unsigned char *ext = (unsigned char *)arena_base(k->ram) + offset;

	*t = now();
	for (uint32_t i = 0; i < m->windows; i++) {
		uint64_t at = (uint64_t)i * m->window_bytes;
		uint64_t len =
		    m->image_bytes - at < m->window_bytes ? m->image_bytes - at : m->window_bytes;
		int rc;

		if (mc) {
			memcpy(ext + at, k->src + at, len);
			continue;
		}
		rc = arena_commit(k->ram, m->seq, i, len, kvcopy_hash(ext + at, k->src + at, len),
		                  eb);
		if (rc)
			return rc;
	}
	*t = now() - *t;
	return IG_E_OK;
}

/* KV-RAM read: arena_get, the daemon's check of every window, the worker's
 * copy of each out; or (mc) the copies alone. Leaves the windows in k->w. */
static int kvb_ram_read(struct kvb *k, const struct arena_meta *m, bool mc, double *t,
                        struct ig_errbuf *eb)
{
	const unsigned char *base = arena_base(k->ram);
	struct arena_info info;
	int rc;

	*t = now();
	if (!mc) {
		rc = arena_get(k->ram, m->seq, &info, k->w, ARENA_MAX_WINDOWS, eb);
		if (rc)
			return rc;
		for (uint32_t i = 0; i < m->windows; i++)
			if (!kvcopy_check(k->dst + (uint64_t)i * m->window_bytes,
			                  base + k->w[i].offset, k->w[i].len, k->w[i].sum, NULL))
				return ig_errf(eb, IG_E_KV_LOST,
				               "KV-RAM seq %" PRIu64 " window %u: checksum differs",
				               m->seq, i);
	} else {
		for (uint32_t i = 0; i < m->windows; i++)
			memcpy(k->dst + (uint64_t)i * m->window_bytes, base + k->w[i].offset,
			       k->w[i].len);
	}
	*t = now() - *t;
	return IG_E_OK;
}

/* One repetition at one window size: every measurement once, ours and the
 * reference in the order `ours_first` says. */
static int kvb_round(struct kvb *k, uint32_t window, bool ours_first, struct kvb_rates *best,
                     struct ig_errbuf *eb)
{
	const double bytes = (double)KVB_IMAGE;
	struct arena_meta m = {.seq = k->next_seq++,
	                       .model_id = 1,
	                       .cls = ARENA_INTERACTIVE,
	                       .image_bytes = KVB_IMAGE,
	                       .window_bytes = window,
	                       .windows = (uint32_t)((KVB_IMAGE + window - 1) / window)};
	struct arena_meta got;
	uint64_t offset;
	double t;
	int rc = arena_reserve(k->ram, &m, &offset, eb);

	if (rc)
		return rc;
	for (int pass = 0; pass < 2; pass++) {
		bool ours = (pass == 0) == ours_first;

		rc = kvb_ram_commit(k, &m, offset, !ours, &t, eb);
		if (rc)
			return rc;
		kvb_keep(ours ? &best->commit : &best->commit_mc, bytes, t);
	}
	/* the copies-only read needs the windows' places: the first read fills
	 * k->w, so it is ours; the order alternates from the second pass on */
	rc = kvb_ram_read(k, &m, false, &t, eb);
	if (rc)
		return rc;
	for (int pass = 0; pass < 2; pass++) {
		bool ours = (pass == 0) == ours_first;

		rc = kvb_ram_read(k, &m, !ours, &t, eb);
		if (rc)
			return rc;
		kvb_keep(ours ? &best->read : &best->read_mc, bytes, t);
	}
	for (int pass = 0; pass < 2; pass++) {
		bool ours = (pass == 0) == ours_first;

		t = now();
		rc = ours ? kvdisk_put(k->disk, &m, arena_base(k->ram), k->w, eb)
		          : kvb_raw_put(k, m.seq, &m, eb);
		if (rc)
			return rc;
		kvb_keep(ours ? &best->put : &best->put_raw, bytes, now() - t);
	}
	for (int pass = 0; pass < 2; pass++) {
		bool ours = (pass == 0) == ours_first;

		t = now();
		rc = ours ? kvdisk_get(k->disk, m.seq, &got, k->dst, KVB_IMAGE, NULL, eb)
		          : kvb_raw_get(k, m.seq, &m, eb);
		if (rc)
			return rc;
		kvb_keep(ours ? &best->get : &best->get_raw, bytes, now() - t);
	}
	rc = kvdisk_drop(k->disk, m.seq, eb);
	if (!rc)
		rc = kvb_raw_clear(k, eb);
	if (!rc)
		rc = arena_drop(k->ram, m.seq, eb);
	return rc;
}

static void bench_kvstore(int reps)
{
	static const uint32_t windows[] = {256u << 10, 12u << 20, 16u << 20};
	struct kvb k = {.next_seq = 1};
	struct ig_errbuf eb;
	int rc = kvb_open(&k, &eb);

	for (size_t s = 0; !rc && s < sizeof(windows) / sizeof(windows[0]); s++) {
		const uint32_t wb = windows[s];
		struct kvb_rates b = {0};
		char name[16];

		for (int r = 0; !rc && r < reps; r++)
			rc = kvb_round(&k, wb, r % 2 == 0, &b, &eb);
		if (rc)
			break;
		if (wb < (1u << 20))
			snprintf(name, sizeof(name), "%u KiB", wb >> 10);
		else
			snprintf(name, sizeof(name), "%u MiB", wb >> 20);
		printf(
		    "kvstore  KV-RAM commit %s windows: %.2f GB/s; memcpy %.2f GB/s; ratio %.2f\n",
		    name, b.commit / 1e9, b.commit_mc / 1e9, b.commit / b.commit_mc);
		printf("kvstore  KV-RAM read %s windows: %.2f GB/s; memcpy %.2f GB/s; ratio %.2f\n",
		       name, b.read / 1e9, b.read_mc / 1e9, b.read / b.read_mc);
		printf(
		    "kvstore  KV-disk put %s windows: %.2f GB/s; raw LMDB %.2f GB/s; ratio %.2f\n",
		    name, b.put / 1e9, b.put_raw / 1e9, b.put / b.put_raw);
		printf(
		    "kvstore  KV-disk get %s windows: %.2f GB/s; raw LMDB %.2f GB/s; ratio %.2f\n",
		    name, b.get / 1e9, b.get_raw / 1e9, b.get / b.get_raw);
		fflush(stdout);
	}
	if (rc)
		fprintf(stderr, "ignis-bench: kvstore: %s\n", eb.msg);
	kvb_release(&k);
	if (rc)
		exit(1);
}

/* ---- moves: the other lanes' rounds while a long sequence moves ----------- */

/*
 * An engine's run: three interactive requests (B, C, D: MV_OTHER_PROMPT
 * prompt tokens, up to MV_OTHER_GEN generated, greedy) hold the MV_LANES
 * lanes and decode; an agent request (A: MV_LONG_PROMPT tokens, capped at the
 * context, so its reservation is the whole context: 32 pages) prefills and
 * then waits for a lane, holding its pages. Once it has prefilled, an
 * interactive request (I: MV_ASK_PROMPT tokens, one generated) arrives on a
 * pool sized so that it lacks exactly one page: the planner moves A out (the
 * only sequence ranked below I) a window a round, I runs (its prefill gives
 * its one token) and is done, and A comes back in as soon as its 32 pages
 * are free again; B, C and D decode all along. When A is back the next I
 * comes: `cycles` moves out and back in one run, A prefilled once.
 *
 * One such engine per window size, and a reference with the same requests
 * on a pool with room for all (its kvstore clients configured all the same:
 * nothing moves), run in lockstep (mv_group). A round is compared when it
 * ran exactly the three decode tokens of B, C and D and nothing else (the
 * rounds where an I prefills are left out), against the reference's round
 * where B decoded the same token: the same work but for the move's.
 *
 * The kvstore daemon is the real one (mvd_open), in a private runtime
 * directory with a KV-RAM arena of MV_ARENA bytes in /dev/shm named after our
 * pid and KV-disk off; both go at the end (mvd_close).
 */
#define MV_CONTEXT      2048u /* the tiny presets' default context */
#define MV_LONG_PROMPT  1900u /* A's reservation: ceil(2048 / 64) = 32 pages */
#define MV_OTHER_PROMPT 64u
/* B's cap, and no new move once B has fewer than MV_CYCLE_ROOM tokens to go:
 * room for the longest cycle (tiny-moe, 64 KiB windows: about 115 rounds)
 * after 768 tokens, which bounds the run to about two minutes on the 2-core
 * development VM */
#define MV_OTHER_GEN  1024u
#define MV_CYCLE_ROOM 256u
#define MV_ASK_PROMPT 32u /* I: one page */
#define MV_LANES      3u  /* B, C and D hold them all: A waits off the lanes */
/* B, C, D, A (ready off the lanes) and I each hold a state (ADR 0027): more
 * slots than lanes, so that only pages make A move, as the scenario says */
#define MV_SLOTS      (MV_LANES + 2u)
#define MV_ARENA      (32ull << 20)
#define MV_MAX_ROUNDS 4096u
#define MV_MAX_CYCLES 32u

/* The window sizes: the defaults (--reuse-move-out-window-bytes 12 MiB,
 * --reuse-move-in-window-bytes 16 MiB) take a tiny image in one window; the
 * smaller ones spread the move over several rounds, as the defaults do a
 * real model's image (a 27B's whole context is gigabytes). A move in reads
 * the record in the windows it was written in (engine.c), so the in size
 * does not change what these runs do. */
static const struct {
	uint64_t out, in;
	const char *name;
} mv_windows[] = {
    {64u << 10, 64u << 10, "64 KiB"},
    {256u << 10, 256u << 10, "256 KiB"},
    {1u << 20, 1u << 20, "1 MiB"},
    {12u << 20, 16u << 20, "12/16 MiB"},
};
#define MV_NW (sizeof(mv_windows) / sizeof(mv_windows[0]))

struct mvd {
	char dir[256], arena[64], bin[4096];
	pid_t pid;
	bool made_dir;
	/* retained host slots to configure (the reuse benchmark); 0: none */
	uint32_t slots;
	uint64_t slot_bytes;
};

/* The daemon binary: $IGNIS_KVSTORED, else the build tree's, next to ours. */
static int mvd_find(struct mvd *k, struct ig_errbuf *eb)
{
	const char *env = getenv("IGNIS_KVSTORED");
	char self[3800];
	ssize_t n;
	char *slash;

	if (env && *env) {
		snprintf(k->bin, sizeof(k->bin), "%s", env);
		if (access(k->bin, X_OK) != 0)
			return ig_errf(eb, IG_E_NOTFOUND,
			               "IGNIS_KVSTORED='%s' is not an executable ignis-kvstored: "
			               "%s",
			               k->bin, strerror(errno));
		return IG_E_OK;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "no kvstore daemon: /proc/self/exe unreadable (%s); set "
		               "IGNIS_KVSTORED to an ignis-kvstored binary",
		               strerror(errno));
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(k->bin, sizeof(k->bin), "%s/../kvstore-daemon/ignis-kvstored", self);
	if (access(k->bin, X_OK) != 0)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "no kvstore daemon at '%s' (%s): build it (ninja -C <build> "
		               "kvstore-daemon/ignis-kvstored) or set IGNIS_KVSTORED to an "
		               "ignis-kvstored binary",
		               k->bin, strerror(errno));
	return IG_E_OK;
}

/* Stop the daemon (SIGTERM, SIGKILL after 5 s), remove its arena and its
 * directory; whatever part of mvd_open was done. */
static void mvd_close(struct mvd *k)
{
	if (k->pid > 0) {
		int status, i = 0;

		kill(k->pid, SIGTERM);
		while (waitpid(k->pid, &status, WNOHANG) == 0) {
			if (++i == 500)
				kill(k->pid, SIGKILL);
			usleep(10000);
		}
		k->pid = 0;
	}
	if (k->arena[0]) {
		(void)arena_unlink(k->arena, NULL);
		k->arena[0] = '\0';
	}
	if (k->made_dir) {
		DIR *d = opendir(k->dir);
		struct dirent *de;

		while (d && (de = readdir(d))) {
			char p[520];

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			snprintf(p, sizeof(p), "%s/%s", k->dir, de->d_name);
			if (unlink(p) != 0)
				fprintf(stderr, "ignis-bench: moves: removing '%s': %s\n", p,
				        strerror(errno));
		}
		if (d)
			closedir(d);
		if (rmdir(k->dir) != 0)
			fprintf(stderr, "ignis-bench: moves: removing '%s': %s\n", k->dir,
			        strerror(errno));
		k->made_dir = false;
	}
}

/* Copy the daemon's log to stderr (after a failure). */
static void mvd_dump_log(const struct mvd *k)
{
	char p[300], line[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/kvstored.log", k->dir);
	f = fopen(p, "r");
	if (!f)
		return;
	fprintf(stderr, "ignis-bench: moves: the kvstore daemon's log:\n");
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  %s", line);
	fclose(f);
}

/* Start ignis-kvstored in a private runtime directory (it exits with us:
 * --supervisor-pid) and configure it as the supervisor would: KV-RAM of
 * MV_ARENA bytes, KV-disk off. */
static int mvd_open(struct mvd *k, struct ig_errbuf *eb)
{
	const char *tmp = getenv("TMPDIR");
	struct msg q = {.type = MSG_KV_CONFIG};
	char parent[16];
	struct tp_rx rx;
	nng_socket s;
	pid_t pid;
	int rc;

	rc = mvd_find(k, eb);
	if (rc)
		return rc;
	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(k->dir, sizeof(k->dir), "%s/ignis-bench-mv-XXXXXX", tmp);
	if (!mkdtemp(k->dir))
		return ig_errf(eb, IG_E_IO, "making a directory in '%s': %s; set TMPDIR", tmp,
		               strerror(errno));
	k->made_dir = true;
	snprintf(k->arena, sizeof(k->arena), "ignis-bench-moves-%d", (int)getpid());
	(void)arena_unlink(k->arena, NULL); /* a stale one of an earlier pid */
	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return ig_errf(eb, IG_E_IO, "fork: %s", strerror(errno));
	if (pid == 0) {
		char log[300];
		int fd;

		snprintf(log, sizeof(log), "%s/kvstored.log", k->dir);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(k->bin, k->bin, "--runtime-dir", k->dir, "--supervisor-pid", parent,
		      (char *)NULL);
		_exit(127);
	}
	k->pid = pid;
	rc = tp_dial(&s, k->dir, "kvstore", 10000, eb);
	if (rc)
		return rc;
	q.u.kv_config = (struct msg_kv_config){.arena_name = msg_str_of(k->arena),
	                                       .arena_bytes = MV_ARENA,
	                                       .disk_path = msg_str_of(""),
	                                       .disk_bytes = 0,
	                                       .interactive_ttl_s = 0,
	                                       .retained_slots = k->slots,
	                                       .slot_bytes = k->slots ? k->slot_bytes : 0};
	rc = tp_call(s, &q, &rx, eb);
	if (!rc)
		tp_rx_release(&rx);
	nng_close(s);
	return rc;
}

/* One round of a run, as measured. */
struct mv_round {
	double t;        /* eng_round's wall time, seconds */
	uint32_t g;      /* tokens B had generated before it */
	uint32_t decode; /* decode tokens it ran */
	uint32_t prefill;
	uint8_t moving; /* A was moving at its start: 1 out, 2 in; 0 not */
};

/* A round where B, C and D decoded and nothing else ran. */
static bool mv_plain(const struct mv_round *r)
{
	return r->decode == MV_LANES && r->prefill == 0;
}

/* One engine's figures; per cycle c (one move out and back) where it moves. */
struct mv_run {
	struct mv_round r[MV_MAX_ROUNDS];
	uint32_t n;
	uint32_t asked; /* interactive requests submitted */
	uint64_t image; /* from the ENG_EV_MOVED events (their durations count the
	                 * other engines' rounds too: not used) */
	uint64_t out_rounds[MV_MAX_CYCLES], in_rounds[MV_MAX_CYCLES];
	uint64_t out_tokens[MV_MAX_CYCLES], in_tokens[MV_MAX_CYCLES]; /* the others' decode */
	/* the engine's own time over a move: its plain rounds' seconds, and how
	 * many rounds ran something more (the landing round prefills I) */
	double out_s[MV_MAX_CYCLES], in_s[MV_MAX_CYCLES];
	uint32_t out_other[MV_MAX_CYCLES], in_other[MV_MAX_CYCLES];
	uint32_t windows;
	uint32_t evicted, moved_out, moved_in, lost;
	uint64_t long_id;
	bool wrong_victim;
};

static void mv_on_event(void *ctx, const struct eng_event *ev)
{
	struct mv_run *m = ctx;

	if (ev->kind == ENG_EV_EVICTED) {
		m->evicted++;
		m->wrong_victim |= ev->id != m->long_id;
	} else if (ev->kind == ENG_EV_MOVED && ev->dir_out) {
		m->moved_out++;
		m->image = ev->bytes;
		m->windows = ev->windows;
	} else if (ev->kind == ENG_EV_MOVED) {
		m->moved_in++;
	} else if (ev->kind == ENG_EV_LOST) {
		m->lost++;
	}
}

static void mv_prompt(uint32_t *p, uint32_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (uint32_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (x >> 16) % 256u; /* byte tokens: in every preset's vocabulary */
	}
}

/* The phase of request `id`. */
static int mv_phase(struct eng *e, uint64_t id, struct eng_status *st, struct ig_errbuf *eb)
{
	uint32_t tok, n;

	return eng_tokens(e, id, 0, 0, &tok, &n, st, eb);
}

/* One engine of the group: its pool, its kvstore clients, its requests. */
struct mv_side {
	struct be be;
	struct be_bind_opts bo; /* its regions, reserved on `be` */
	struct be_model d;      /* the model, bound on this side's backend */
	bool d_bound;
	struct kvpool kv;
	void *region;
	uint64_t region_bytes;
	struct kvc *kout, *kin;
	struct eng *e;
	uint64_t ids[4]; /* B, C, D, A */
	uint64_t ask_id; /* the latest I */
	struct mv_run *m;
	bool be_open, kv_init;
};

/* Undo mv_side_open, whatever part of it was done: what is left is
 * cancelled, and a drop still in flight is let land first. */
static void mv_side_close(struct mv_side *s)
{
	if (s->e) {
		struct ig_errbuf eb;

		for (uint32_t i = 0; i < 4; i++)
			if (s->ids[i])
				(void)eng_cancel(s->e, s->ids[i], NULL);
		for (int i = 0; i < 10000 && eng_busy(s->e); i++) {
			uint32_t ran;

			if (eng_round(s->e, &ran, &eb))
				break;
			if (!ran)
				usleep(200);
		}
		eng_destroy(s->e);
		s->e = NULL;
	}
	kvc_close(s->kout);
	kvc_close(s->kin);
	s->kout = s->kin = NULL;
	if (s->kv_init)
		kvpool_release(&s->kv);
	s->kv_init = false;
	if (s->d_bound)
		s->be.ops->model_release(&s->be, &s->d);
	s->d_bound = false;
	if (s->be_open)
		be_bind_unreserve(&s->be, &s->bo);
	if (s->region)
		s->be.ops->free(&s->be, s->region, s->region_bytes);
	s->region = NULL;
	if (s->be_open)
		s->be.ops->close(&s->be);
	s->be_open = false;
}

/*
 * An engine with its kvstore clients (opened per engine, as a worker's are)
 * and B, C, D and A submitted. Moving: the pool that forces the move;
 * otherwise room for all and some.
 */
static int mv_side_open(struct mv_side *s, struct mfile *f, const struct mvd *k,
                        uint64_t window_out, uint64_t window_in, bool moving, uint32_t nonce,
                        struct mv_run *m, struct ig_errbuf *eb)
{
	const uint32_t other_pages = (uint32_t)mdesc_pages_for(MV_OTHER_PROMPT + MV_OTHER_GEN);
	const uint32_t pages =
	    3 * other_pages + MV_CONTEXT / MDESC_PAGE_TOKENS + (moving ? 0 : 1 + 8);
	const struct mdesc *dm = &f->desc;
	const uint64_t pb = mdesc_page_bytes(dm, MDESC_KV_BF16);
	static uint32_t longp[MV_LONG_PROMPT], otherp[3][MV_OTHER_PROMPT];
	struct eng_cfg cfg = {.lanes = MV_LANES,
	                      .slots = MV_SLOTS,
	                      .chunk = dm->default_chunk,
	                      .context = MV_CONTEXT,
	                      .default_max_tokens = 1,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = 8,
	                      .eos = UINT32_MAX,
	                      .ctx = m,
	                      .on_event = mv_on_event,
	                      .window_out = window_out,
	                      .window_in = window_in,
	                      .tier_nonce = nonce};
	int rc;

	memset(s, 0, sizeof(*s));
	memset(m, 0, sizeof(*m));
	s->m = m;
	s->be.ops = backend_find("cpu", eb);
	if (!s->be.ops)
		return IG_E_NOTFOUND;
	rc = s->be.ops->open(&s->be, 1ull << 30, eb);
	if (rc)
		return rc;
	s->be_open = true;
	/* one compute thread (bench_moves) */
	s->bo = (struct be_bind_opts){.max_round_tokens = MV_LANES + dm->default_chunk,
	                              .context = MV_CONTEXT,
	                              .threads = 1,
	                              .states = MV_SLOTS};
	rc = be_bind_reserve(&s->be, f, &s->bo, eb);
	if (!rc)
		rc = s->be.ops->model_bind(&s->be, f, NULL, &s->bo, &s->d, eb);
	if (rc)
		return rc;
	s->d_bound = true;
	s->region_bytes = (uint64_t)pages * pb;
	rc = s->be.ops->alloc(&s->be, s->region_bytes, &s->region, eb);
	if (!rc)
		rc = kvpool_init(&s->kv, s->region, pb, pages, eb);
	if (rc)
		return rc;
	s->kv_init = true;
	rc = kvc_open(&s->kout, k->dir, eb);
	if (!rc)
		rc = kvc_open(&s->kin, k->dir, eb);
	if (rc)
		return rc;
	cfg.kv_out = s->kout;
	cfg.kv_in = s->kin;
	rc = eng_create(&s->e, &s->be, &s->d, &s->kv, &cfg, eb);
	mv_prompt(longp, MV_LONG_PROMPT, 1);
	for (uint32_t i = 0; i < 4 && !rc; i++) {
		struct eng_req q = {i < 3 ? otherp[i] : longp,
		                    i < 3 ? MV_OTHER_PROMPT : MV_LONG_PROMPT,
		                    i < 3 ? MV_OTHER_GEN : MV_CONTEXT - MV_LONG_PROMPT,
		                    i < 3 ? SCHED_INTERACTIVE : SCHED_AGENT,
		                    {0.0f, 0, 1.0f, 0},
		                    NULL,
		                    NULL,
		                    0, false};
		struct eng_admission adm;

		if (i < 3)
			mv_prompt(otherp[i], MV_OTHER_PROMPT, 10 + i);
		rc = eng_submit(s->e, &q, &adm, eb);
		s->ids[i] = adm.id;
	}
	m->long_id = s->ids[3];
	return rc;
}

/* One round of a side, timed; I submitted first when `ask`. */
static int mv_side_round(struct mv_side *s, bool ask, struct ig_errbuf *eb)
{
	static uint32_t askp[MV_ASK_PROMPT];
	struct mv_run *m = s->m;
	struct eng_stats before, after;
	struct eng_status sb;
	struct mv_round *r;
	uint32_t ran, c_out = m->moved_out, c_in = m->moved_in;
	double t;
	int rc;

	if (ask) {
		struct eng_req q = {askp, MV_ASK_PROMPT, 1, SCHED_INTERACTIVE, {0.0f, 0, 1.0f, 0},
		                    NULL, NULL,          0, false};
		struct eng_admission adm;

		mv_prompt(askp, MV_ASK_PROMPT, 2);
		rc = eng_submit(s->e, &q, &adm, eb);
		if (rc)
			return rc;
		s->ask_id = adm.id;
		m->asked++;
	}
	if (m->n == MV_MAX_ROUNDS)
		return ig_errf(eb, IG_E_INVAL, "no end after %u rounds", MV_MAX_ROUNDS);
	rc = mv_phase(s->e, s->ids[0], &sb, eb);
	if (rc)
		return rc;
	eng_stats(s->e, &before);
	t = now();
	rc = eng_round(s->e, &ran, eb);
	t = now() - t;
	if (rc)
		return rc;
	eng_stats(s->e, &after);
	r = &m->r[m->n++];
	r->t = t;
	r->g = sb.generated;
	r->decode = (uint32_t)(after.decode_tokens - before.decode_tokens);
	r->prefill = (uint32_t)(after.prefill_tokens - before.prefill_tokens);
	r->moving = before.moving_out ? 1 : before.moving_in ? 2 : 0;
	if (r->moving == 1 && c_out < MV_MAX_CYCLES) {
		m->out_rounds[c_out]++;
		m->out_tokens[c_out] += r->decode;
		if (mv_plain(r))
			m->out_s[c_out] += t;
		else
			m->out_other[c_out]++;
	} else if (r->moving == 2 && c_in < MV_MAX_CYCLES) {
		m->in_rounds[c_in]++;
		m->in_tokens[c_in] += r->decode;
		if (mv_plain(r))
			m->in_s[c_in] += t;
		else
			m->in_other[c_in]++;
	}
	if (!ran)
		usleep(200); /* nothing to run: waiting for the daemon */
	return IG_E_OK;
}

/* The moving side's state before a round: ask an I now? Its moves done? */
static int mv_side_next(struct mv_side *s, uint32_t cycles, bool *ask, bool *end,
                        struct ig_errbuf *eb)
{
	struct eng_status sa, sb, si = {.phase = SCHED_DONE};
	const struct mv_run *m = s->m;
	bool room;
	int rc = mv_phase(s->e, s->ids[3], &sa, eb);

	if (!rc)
		rc = mv_phase(s->e, s->ids[0], &sb, eb);
	if (!rc && s->ask_id)
		rc = mv_phase(s->e, s->ask_id, &si, eb);
	if (rc)
		return rc;
	room = sb.generated + MV_CYCLE_ROOM < MV_OTHER_GEN;
	*ask = m->asked < cycles && room && sa.phase == SCHED_READY && si.phase == SCHED_DONE &&
	       m->moved_in == m->asked;
	/* B done early: mv_check says so */
	*end = sb.phase == SCHED_DONE || (m->moved_in == m->asked && (m->asked == cycles || !room));
	return IG_E_OK;
}

/*
 * The engines of one preset run in lockstep, one round each per step, in an
 * order drawn afresh every step (seeded): one moving engine per window size
 * and the reference with room for all, given the same requests at the same
 * rounds (the reference gets its I's when the first moving engine does). So
 * B has decoded the same tokens in all of them at each step, and the shared
 * VM's load, which drifts over seconds, falls on all alike; A's prefill,
 * most of the time a run takes, is paid once per engine. Each I is asked
 * once that engine's A has prefilled or is back (and its previous I is
 * done), up to `cycles` times while B has MV_CYCLE_ROOM tokens to go; an
 * engine stops when its A is back from its last move, the group when all
 * have.
 */
static int mv_group(struct mfile *f, const struct mvd *k, uint32_t cycles, struct mv_run *runs,
                    struct mv_run *base, struct ig_errbuf *eb)
{
	struct mv_side s[MV_NW + 1];
	bool done[MV_NW + 1] = {false};
	uint32_t order[MV_NW + 1], x = 0x5eed2911u;
	int rc = IG_E_OK;

	memset(s, 0, sizeof(s));
	for (size_t w = 0; !rc && w <= MV_NW; w++)
		rc = w < MV_NW ? mv_side_open(&s[w], f, k, mv_windows[w].out, mv_windows[w].in,
		                              true, (uint32_t)w + 1, &runs[w], eb)
		               : mv_side_open(&s[w], f, k, 12ull << 20, 16ull << 20, false,
		                              (uint32_t)w + 1, base, eb);
	while (!rc) {
		bool ask[MV_NW + 1] = {false}, end = false, all = true;
		uint32_t n = 0;

		for (size_t w = 0; !rc && w < MV_NW; w++) {
			if (done[w])
				continue;
			rc = mv_side_next(&s[w], cycles, &ask[w], &end, eb);
			done[w] = end;
			all &= end;
		}
		if (rc || all)
			break;
		ask[MV_NW] = ask[0] && !done[0];
		for (uint32_t w = 0; w <= MV_NW; w++)
			if (!done[w])
				order[n++] = w;
		for (uint32_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
			uint32_t j, t;

			x = x * 1664525u + 1013904223u;
			j = (x >> 8) % (i + 1);
			t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (uint32_t i = 0; !rc && i < n; i++)
			rc = mv_side_round(&s[order[i]], ask[order[i]], eb);
	}
	for (size_t w = 0; w <= MV_NW; w++)
		mv_side_close(&s[w]);
	return rc;
}

static int mv_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The p-th quantile (0 < p <= 1) of v[0..n), nearest rank; sorts v. */
static double mv_quantile(double *v, uint32_t n, double p)
{
	uint32_t k;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), mv_cmp);
	k = (uint32_t)(p * n);
	k += (double)k < p * n; /* the ceiling */
	return v[(k ? k : 1) - 1];
}

/*
 * The plain rounds of moving engine `mv` during its moves (ms), the
 * reference's plain rounds where B decoded the same token (bs), and each
 * pair's ratio (pr: moving over reference). B decodes one token a round, so
 * a token names one round of each.
 */
static void mv_samples(const struct mv_run *mv, const struct mv_run *base, double *ms, double *bs,
                       double *pr, uint32_t *n_ms, uint32_t *n_bs)
{
	static double at[MV_OTHER_GEN + 1];

	for (uint32_t g = 0; g <= MV_OTHER_GEN; g++)
		at[g] = 0;
	for (uint32_t i = 0; i < base->n; i++)
		if (mv_plain(&base->r[i]))
			at[base->r[i].g] = base->r[i].t;
	*n_ms = *n_bs = 0;
	for (uint32_t i = 0; i < mv->n; i++) {
		const struct mv_round *r = &mv->r[i];

		if (!r->moving || !mv_plain(r))
			continue;
		ms[(*n_ms)++] = r->t;
		if (at[r->g] > 0) {
			pr[*n_bs] = r->t / at[r->g];
			bs[(*n_bs)++] = at[r->g];
		}
	}
}

/* "a" or "a-b": the range of v[0..n). */
static void mv_range(char *buf, size_t len, const uint64_t *v, uint32_t n)
{
	uint64_t lo = v[0], hi = v[0];

	for (uint32_t i = 1; i < n; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	if (lo == hi)
		snprintf(buf, len, "%" PRIu64, lo);
	else
		snprintf(buf, len, "%" PRIu64 "-%" PRIu64, lo, hi);
}

static int mv_check(const struct mv_run *m, bool moving, struct ig_errbuf *eb)
{
	if (!moving && m->evicted)
		return ig_errf(eb, IG_E_INVAL, "the run with room for all moved something");
	if (moving &&
	    (!m->asked || m->asked > MV_MAX_CYCLES || m->evicted != m->asked ||
	     m->moved_out != m->asked || m->moved_in != m->asked || m->wrong_victim || m->lost))
		return ig_errf(eb, IG_E_INVAL,
		               "the long sequence did not move out and back once per interactive "
		               "request, alone (%u requests, %u evicted%s, %u moved out, %u in, "
		               "%u lost)",
		               m->asked, m->evicted, m->wrong_victim ? ", not all it" : "",
		               m->moved_out, m->moved_in, m->lost);
	return IG_E_OK;
}

/* One line per window size for one preset. */
static void mv_report(const char *preset, size_t w, const struct mv_run *mv,
                      const struct mv_run *base, double mc, double *ms, double *bs)
{
	uint32_t c = mv->moved_in < MV_MAX_CYCLES ? mv->moved_in : MV_MAX_CYCLES, n_ms, n_bs;
	double bo = 0, bi = 0, p50, p99, b50, b99, r50;
	double *pr = bs + MV_MAX_ROUNDS;
	char ro[32], ri[32], to[32], ti[32];

	mv_samples(mv, base, ms, bs, pr, &n_ms, &n_bs);
	p50 = mv_quantile(ms, n_ms, 0.50);
	p99 = mv_quantile(ms, n_ms, 0.99);
	b50 = mv_quantile(bs, n_bs, 0.50);
	b99 = mv_quantile(bs, n_bs, 0.99);
	r50 = n_bs ? mv_quantile(pr, n_bs, 0.50) : 1;
	/* a round that ran more than the move and the decode (the landing
	 * round prefills I) counts as a median one */
	for (uint32_t i = 0; i < c; i++) {
		kvb_keep(&bo, (double)mv->image, mv->out_s[i] + mv->out_other[i] * p50);
		kvb_keep(&bi, (double)mv->image, mv->in_s[i] + mv->in_other[i] * p50);
	}
	mv_range(ro, sizeof(ro), mv->out_rounds, c);
	mv_range(ri, sizeof(ri), mv->in_rounds, c);
	mv_range(to, sizeof(to), mv->out_tokens, c);
	mv_range(ti, sizeof(ti), mv->in_tokens, c);
	printf("moves    %-10s window %-9s (%2u windows, %2u moves): other lanes p50 %.2f ms "
	       "(no move %.2f ms, %+.1f%%; round by round %+.1f%%), p99 %.2f ms (no move %.2f "
	       "ms, %+.1f%%), %u rounds; move out %.3f GB/s (memcpy %.2f GB/s, ratio %.3f), %s "
	       "rounds, %s tokens meanwhile; in %.3f GB/s (ratio %.3f), %s rounds, %s tokens\n",
	       preset, mv_windows[w].name, mv->windows, c, p50 * 1e3, b50 * 1e3,
	       b50 > 0 ? (p50 / b50 - 1) * 100 : 0, (r50 - 1) * 100, p99 * 1e3, b99 * 1e3,
	       b99 > 0 ? (p99 / b99 - 1) * 100 : 0, n_ms, bo / 1e9, mc / 1e9, bo / mc, ro, to,
	       bi / 1e9, bi / mc, ri, ti);
	fflush(stdout);
}

static int mv_preset(const char *preset, const struct mvd *k, uint32_t cycles, int reps,
                     struct ig_errbuf *eb)
{
	/* a moving engine per window size, and the reference */
	struct mv_run *runs = calloc(MV_NW + 1, sizeof(*runs)), *base = runs + MV_NW;
	/* the samples: moving, reference, their ratios */
	double *ms = malloc(3 * MV_MAX_ROUNDS * sizeof(double)), *bs = ms + MV_MAX_ROUNDS;
	unsigned char *a = NULL, *b = NULL;
	struct mfile f;
	char path[128];
	int rc = IG_E_OK;

	if (!runs || !ms) {
		rc = ig_errf(eb, IG_E_NOMEM, "no memory for the runs' figures");
		goto out_free;
	}
	snprintf(path, sizeof(path), "/tmp/ignis-bench-%s-%d.gguf", preset, (int)getpid());
	rc = mfile_write_synthetic(mdesc_find(preset), 1, MFILE_BF16, path, eb);
	if (rc)
		goto out_free;
	rc = mfile_open(&f, path, eb);
	unlink(path);
	if (rc)
		goto out_free;
	rc = mv_group(&f, k, cycles, runs, base, eb);
	for (size_t w = 0; !rc && w < MV_NW; w++)
		rc = mv_check(&runs[w], true, eb);
	if (!rc)
		rc = mv_check(base, false, eb);
	if (rc)
		goto out_release;

	{
		uint64_t image = runs[0].image, pb = mdesc_page_bytes(&f.desc, MDESC_KV_BF16);
		uint64_t room = (image + ARENA_BLOCK - 1) / ARENA_BLOCK * ARENA_BLOCK;
		double mc;

		a = aligned_alloc(ARENA_BLOCK, room);
		b = aligned_alloc(ARENA_BLOCK, room);
		if (!a || !b) {
			rc = ig_errf(eb, IG_E_NOMEM, "no memory for memcpy's buffers");
			goto out_release;
		}
		memset(a, 1, image);
		memset(b, 2, image);
		mc = bench_memcpy(b, a, image, 5 * reps);
		printf(
		    "moves    %-10s image %.2f MiB (%u prompt tokens of a %u context in %u pages "
		    "of %" PRIu64 " KiB, %" PRIu64 " KiB of state); %u lanes decoding, 1 "
		    "thread, %u engines in lockstep\n",
		    preset, (double)image / (1 << 20), MV_LONG_PROMPT, MV_CONTEXT,
		    (unsigned)mdesc_pages_for(MV_LONG_PROMPT), pb >> 10,
		    mdesc_state_image_bytes(&f.desc) >> 10, MV_LANES, (unsigned)MV_NW + 1);
		for (size_t w = 0; w < MV_NW; w++)
			mv_report(preset, w, &runs[w], base, mc, ms, bs);
	}
out_release:
	mfile_close(&f);
out_free:
	free(a);
	free(b);
	free(runs);
	free(ms);
	return rc;
}

/*
 * One compute thread: on the 2-core VM the second core is left to the
 * kvstore daemon and the clients' threads, as a GPU leaves the host's cores
 * to them. (With both cores computing, every daemon wake-up preempts one
 * of the two threads of a round and the other waits at the round's barrier
 * for a scheduler slice: the comparison then measures the scheduler.)
 */
static void bench_moves(int reps)
{
	static const char *const presets[] = {"tiny-dense", "tiny-moe"};
	const uint32_t cycles =
	    (uint32_t)reps * 2 > MV_MAX_CYCLES ? MV_MAX_CYCLES : (uint32_t)reps * 2;
	struct mvd k = {0};
	struct ig_errbuf eb = {0};
	int rc;

	rc = mvd_open(&k, &eb);
	for (size_t p = 0; !rc && p < sizeof(presets) / sizeof(presets[0]); p++)
		rc = mv_preset(presets[p], &k, cycles, reps, &eb);
	if (rc) {
		fprintf(stderr, "ignis-bench: moves: %s\n", eb.msg);
		mvd_dump_log(&k);
	}
	mvd_close(&k);
	if (rc)
		exit(1);
}

/*
 * Prompt reuse (issue 17; docs/adr/0037, 0038): time to first token with
 * retained checkpoints in device slots, and in host slots (a real kvstore
 * daemon's), against none, on the engine in this process (cpu backend,
 * tiny-dense, every thread), the three sides interleaved in each
 * repetition, best of the repetitions per request. Two workloads:
 *   chat    8 turns, each prompt the last one and 10% more (a conversation
 *           that grows: each turn claims the last turn's checkpoint);
 *   system  16 requests, a 1,843-token system prompt (90%) and 205 tokens of
 *           their own: the first is cold, the second parts from it at the
 *           system prompt (retained there as a shared prefix), the rest
 *           claim the prefix.
 * Reported: reused tokens over the tokens shared with an earlier prompt, and
 * the time to first token of the warm requests against the same requests
 * with reuse off (mean of the per-request best times).
 */
#define RU_CONTEXT 4096u
#define RU_NREQ    16u

struct ru_req {
	uint32_t *prompt, n;
	uint32_t shared; /* tokens it shares with an earlier request's prompt */
};

/* Where the checkpoints go: nowhere (reuse off), 8 device slots, 8 host
 * slots of the daemon `ru_kvd`. */
enum ru_side { RU_OFF = 0, RU_DEVICE, RU_HOST };
static struct mvd ru_kvd;

static double ru_run(struct mfile *f, const struct ru_req *q, uint32_t nq, enum ru_side side,
                     int threads, double *ttft, uint64_t *cached)
{
	static uint64_t runs;
	uint32_t slots = side == RU_DEVICE ? 8 : 0;
	struct kvc *kc = NULL;
	const struct mdesc *m = &f->desc;
	uint64_t pb = mdesc_page_bytes(m, MDESC_KV_BF16), sb = mdesc_state_image_bytes(m);
	uint32_t pages = (2 + slots) * (RU_CONTEXT / MDESC_PAGE_TOKENS);
	struct be be = {.ops = backend_find("cpu", NULL)};
	void *region = NULL, *sregion = NULL;
	struct eng_cfg cfg = {.lanes = 1,
	                      .chunk = m->default_chunk,
	                      .context = RU_CONTEXT,
	                      .default_max_tokens = 1,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = 4,
	                      .eos = UINT32_MAX};
	struct be_bind_opts bo = {.max_round_tokens = 1 + m->default_chunk,
	                          .context = RU_CONTEXT,
	                          .threads = (uint32_t)threads,
	                          .states = 1};
	struct ig_errbuf eb;
	struct be_model d;
	struct kvpool kv;
	struct eng *e;
	double total = 0;

	if (!be.ops || be.ops->open(&be, 2ull << 30, &eb) || be_bind_reserve(&be, f, &bo, &eb) ||
	    be.ops->model_bind(&be, f, NULL, &bo, &d, &eb) ||
	    be.ops->alloc(&be, (uint64_t)pages * pb, &region, &eb) ||
	    (slots && be.ops->alloc(&be, (uint64_t)slots * sb, &sregion, &eb)) ||
	    kvpool_init(&kv, region, pb, pages, &eb))
		goto fail;
	cfg.retained_device = slots;
	cfg.retained_slot_bytes = sb;
	cfg.retained = (struct be_region){sregion, (uint64_t)slots * sb};
	if (side == RU_HOST) {
		if (kvc_open(&kc, ru_kvd.dir, &eb))
			goto fail;
		cfg.kv_slots = kc;
		cfg.retained_host = ru_kvd.slots;
		cfg.reuse_ns = ++runs; /* an earlier run's slots are not this one's */
	}
	if (eng_create(&e, &be, &d, &kv, &cfg, &eb))
		goto fail;
	for (uint32_t i = 0; i < nq; i++) {
		struct eng_req r = {q[i].prompt,        q[i].n, 1,    SCHED_INTERACTIVE,
		                    {0.0f, 0, 1.0f, 0}, NULL,   NULL, 0, false};
		struct eng_admission adm;
		struct eng_status st;
		uint32_t tok, n = 0, ran;
		double t0 = now();

		if (eng_submit(e, &r, &adm, &eb))
			goto fail;
		do {
			if (eng_round(e, &ran, &eb) ||
			    eng_tokens(e, adm.id, 0, 1, &tok, &n, &st, &eb))
				goto fail;
		} while (!n);
		ttft[i] = now() - t0;
		cached[i] = st.cached;
		total += ttft[i];
		while (eng_busy(e))
			if (eng_round(e, &ran, &eb))
				goto fail;
	}
	eng_destroy(e);
	kvc_close(kc);
	kvpool_release(&kv);
	be.ops->free(&be, region, (uint64_t)pages * pb);
	if (sregion)
		be.ops->free(&be, sregion, (uint64_t)slots * sb);
	be.ops->model_release(&be, &d);
	be_bind_unreserve(&be, &bo);
	be.ops->close(&be);
	return total;
fail:
	fprintf(stderr, "ignis-bench: reuse: %s\n", eb.msg);
	exit(1);
}

static void ru_workload(struct mfile *f, const char *name, const struct ru_req *q, uint32_t nq,
                        uint32_t first_warm, int threads, int reps)
{
	static const char *const names[] = {"off", "device", "host"};
	double best[3][RU_NREQ], t[RU_NREQ], sum[3] = {0};
	uint64_t cached[RU_NREQ], shared = 0, reused[3] = {0};

	for (int k = 0; k < 3; k++)
		for (uint32_t i = 0; i < nq; i++)
			best[k][i] = 1e30;
	for (int r = 0; r < reps; r++)
		for (int k = 0; k < 3; k++) {
			enum ru_side side =
			    (enum ru_side)((k + r) % 3); /* interleaved, each first in turn */

			ru_run(f, q, nq, side, threads, t, cached);
			for (uint32_t i = 0; i < nq; i++) {
				if (t[i] < best[side][i])
					best[side][i] = t[i];
				if (r == 0) {
					shared += side == RU_OFF ? q[i].shared : 0;
					reused[side] += cached[i];
				}
			}
		}
	for (int k = 0; k < 3; k++)
		for (uint32_t i = first_warm; i < nq; i++)
			sum[k] += best[k][i];
	for (int k = 1; k < 3; k++)
		printf("reuse    %-6s %-6s %2u requests, %u threads: %5.1f%% of the shared tokens "
		       "reused; time to first token of requests %u..%u: %7.1f ms off, %6.1f ms on "
		       "(%.3fx)\n",
		       name, names[k], nq, threads,
		       shared ? 100.0 * (double)reused[k] / (double)shared : 0.0, first_warm,
		       nq - 1, 1e3 * sum[0] / (nq - first_warm), 1e3 * sum[k] / (nq - first_warm),
		       sum[0] > 0 ? sum[k] / sum[0] : 0);
}

static void bench_reuse(int reps)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
	static uint32_t chat[2048], sys[RU_NREQ][2048];
	struct ru_req q[RU_NREQ];
	char path[128];
	struct ig_errbuf eb;
	struct mfile f;
	uint32_t n;

	snprintf(path, sizeof(path), "/tmp/ignis-bench-reuse-%d.gguf", (int)getpid());
	if (mfile_write_synthetic(mdesc_find("tiny-dense"), 1, MFILE_BF16, path, &eb) ||
	    mfile_open(&f, path, &eb)) {
		fprintf(stderr, "ignis-bench: reuse: %s\n", eb.msg);
		exit(1);
	}
	unlink(path);
	/* the host slots' daemon: 8 slots of the model's state image */
	ru_kvd.slots = 8;
	ru_kvd.slot_bytes = mdesc_state_image_bytes(&f.desc);
	if (mvd_open(&ru_kvd, &eb)) {
		fprintf(stderr, "ignis-bench: reuse: %s\n", eb.msg);
		mvd_dump_log(&ru_kvd);
		mvd_close(&ru_kvd);
		exit(1);
	}
	/* chat: 1,000 tokens, then 10% more a turn */
	for (uint32_t t = 0; t < 2048; t++)
		chat[t] = (t * 2654435761u >> 7) % 256;
	n = 1000;
	for (uint32_t k = 0; k < 8; k++) {
		q[k] = (struct ru_req){chat, n, k ? q[k - 1].n : 0};
		n += n / 10;
	}
	ru_workload(&f, "chat", q, 8, 1, threads, reps);
	/* system: 1,843 shared, 205 each its own */
	for (uint32_t i = 0; i < RU_NREQ; i++) {
		for (uint32_t t = 0; t < 2048; t++)
			sys[i][t] = t < 1843 ? (t * 40503u >> 3) % 256 : (t * 7 + i * 131) % 256;
		q[i] = (struct ru_req){sys[i], 2048, i ? 1843 : 0};
	}
	ru_workload(&f, "system", q, RU_NREQ, 2, threads, reps);
	mfile_close(&f);
	mvd_close(&ru_kvd);
}

/*
 * The expert cache at run time (issue 18; docs/adr/0039): decode tokens per
 * second and the cache's hit rate against its size, on a MoE model of 64
 * experts a layer and top-8 routing (tiny-moe's shapes otherwise: 8 layers,
 * 512 experts of 96 KiB), the engine in this process on the cpu backend,
 * one compute thread (the other core is the transfer stream's: a miss is a
 * real copy into the simulated device). Sides, interleaved in each
 * repetition: the experts read in place (no cache), resident, and offloaded
 * behind a cache of 100%, 50% and 25% of the experts and of the plan's
 * floor (2 MiB: 21 slots a class). Two lanes decode 128 tokens each after
 * a 64-token prompt; the decode rounds alone are timed.
 */
#define XB_SIDES 6
#define XB_GEN   128u

static const char *const xb_names[XB_SIDES] = {"in place",  "resident",  "cache 100%",
                                               "cache 50%", "cache 25%", "cache floor"};
static const uint64_t xb_sets[XB_SIDES] = {0, 0, 512, 256, 128, 21};

static void xb_run(const char *path, int side, double *tok_s, double *hit)
{
	struct be be = {.ops = backend_find("cpu", NULL)};
	struct be_bind_opts bo = {
	    .max_round_tokens = 2 + 64, .context = 512, .threads = 1, .states = 2};
	struct eng_cfg cfg = {.lanes = 2,
	                      .chunk = 64,
	                      .context = 512,
	                      .default_max_tokens = XB_GEN,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = 4,
	                      .eos = UINT32_MAX};
	struct be_expert_stats x0, x1;
	struct ig_errbuf eb;
	struct mfile f;
	struct be_model d;
	struct kvpool kv;
	struct eng *e;
	void *region = NULL;
	uint64_t pb, set = 0, h = 0, m = 0, tokens = 0;
	uint32_t prompt[2][64], ran;
	double t = 0;

	if (!be.ops || be.ops->open(&be, 1ull << 30, &eb) || mfile_open(&f, path, &eb) ||
	    be_bind_reserve(&be, &f, &bo, &eb))
		goto fail;
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
		set += f.desc.class_record_bytes[k];
	if (side >= 1) {
		bo.experts_offloaded = side >= 2;
		bo.expert_cache.bytes = side == 1 ? f.desc.expert_host_bytes : xb_sets[side] * set;
		bo.residency.bytes = 2 * f.desc.heaviest_layer_expert_bytes;
		if (be.ops->alloc(&be, bo.expert_cache.bytes, &bo.expert_cache.base, &eb) ||
		    be.ops->alloc(&be, bo.residency.bytes, &bo.residency.base, &eb))
			goto fail;
	}
	pb = mdesc_page_bytes(&f.desc, MDESC_KV_BF16);
	if (be.ops->model_bind(&be, &f, NULL, &bo, &d, &eb) ||
	    be.ops->alloc(&be, 32 * pb, &region, &eb) || kvpool_init(&kv, region, pb, 32, &eb) ||
	    eng_create(&e, &be, &d, &kv, &cfg, &eb))
		goto fail;
	for (uint32_t r = 0; r < 2; r++) {
		struct eng_req q = {prompt[r],          64,   XB_GEN, SCHED_INTERACTIVE,
		                    {0.0f, 0, 1.0f, 0}, NULL, NULL,   0, false};
		struct eng_admission adm;

		for (uint32_t i = 0; i < 64; i++)
			prompt[r][i] = (i * 2654435761u + r * 97u) >> 9 & 255u;
		if (eng_submit(e, &q, &adm, &eb))
			goto fail;
	}
	do {
		struct eng_stats a, b;
		double t0;

		eng_stats(e, &a);
		be.ops->expert_stats(&be, &d, &x0);
		t0 = now();
		if (eng_round(e, &ran, &eb))
			goto fail;
		t0 = now() - t0;
		eng_stats(e, &b);
		be.ops->expert_stats(&be, &d, &x1);
		if (ran && b.prefill_tokens == a.prefill_tokens) { /* a decode round */
			t += t0;
			tokens += b.decode_tokens - a.decode_tokens;
			for (int k = 0; k < MDESC_EXPERT_CLASSES; k++) {
				h += x1.cls[k].hits - x0.cls[k].hits;
				m += x1.cls[k].misses - x0.cls[k].misses;
			}
		}
	} while (ran || eng_busy(e));
	*tok_s = t > 0 ? (double)tokens / t : 0;
	*hit = side >= 2 && h + m ? (double)h / (double)(h + m) : 1.0;
	eng_destroy(e);
	kvpool_release(&kv);
	be.ops->free(&be, region, 32 * pb);
	be.ops->model_release(&be, &d);
	if (side >= 1) {
		be.ops->free(&be, bo.expert_cache.base, bo.expert_cache.bytes);
		be.ops->free(&be, bo.residency.base, bo.residency.bytes);
	}
	be_bind_unreserve(&be, &bo);
	be.ops->close(&be);
	mfile_close(&f);
	return;
fail:
	fprintf(stderr, "ignis-bench: experts: %s\n", eb.msg);
	exit(1);
}

static void bench_experts(int reps)
{
	struct mdesc d = *mdesc_find("tiny-moe");
	double best[XB_SIDES] = {0}, hit[XB_SIDES] = {0};
	struct ig_errbuf eb;
	char path[128];

	d.experts = 64;
	d.top_k = 8;
	snprintf(path, sizeof(path), "/tmp/ignis-bench-experts-%d.gguf", (int)getpid());
	if (mfile_write_synthetic(&d, 5, MFILE_BF16, path, &eb)) {
		fprintf(stderr, "ignis-bench: experts: %s\n", eb.msg);
		exit(1);
	}
	for (int r = 0; r < reps; r++)
		for (int k = 0; k < XB_SIDES; k++) {
			int side = (k + r) % XB_SIDES; /* interleaved, each first in turn */
			double ts, hr;

			xb_run(path, side, &ts, &hr);
			if (ts > best[side])
				best[side] = ts;
			hit[side] = hr;
		}
	unlink(path);
	for (int k = 0; k < XB_SIDES; k++)
		printf("experts  %-12s %4llu slots a class: decode %7.1f tok/s (%.3fx in place), "
		       "hit rate %5.1f%%\n",
		       xb_names[k],
		       (unsigned long long)(k >= 2   ? xb_sets[k]
		                            : k == 1 ? 512
		                                     : 0),
		       best[k], best[0] > 0 ? best[k] / best[0] : 0, 100.0 * hit[k]);
}

static void usage(FILE *f)
{
	fputs("usage: ignis-bench [--quick] [--base-kernels] [--vocab VOCAB.gguf] "
	      "[seqimg|matmul|codec|model|types|llama|kvstore|moves|reuse|experts|"
	      "kvformat|grammar ...]\n",
	      f);
	if (f != stdout)
		return;
	fputs("\n"
	      "Measurements, not tests: each part reports ratios against this machine's own\n"
	      "memcpy, best of several repetitions (docs/benchmarks.md records them). With no\n"
	      "part named, every part runs, in this order:\n"
	      "  seqimg   a 64 MiB sequence image through 12 MiB windows\n"
	      "  matmul   the cpu bf16 matrix product 4096 x 4096, 1 and 16 tokens\n"
	      "  codec    control messages encoded and decoded per second\n"
	      "  model    prefill and decode tokens per second of the tiny presets\n"
	      "  types    the same 156 MB dense shape in bf16 and block types, against bf16\n"
	      "  llama    a 377 MB qwen3 shape and a 400 MB qwen35 one in bf16, Q8_0 and Q4_K:\n"
	      "           ours against llama.cpp\n"
	      "           (the oracle's libllama) on the same files and threads\n"
	      "  kvstore  KV-RAM and KV-disk windows (192 MiB in /dev/shm, 0.8 GiB in $TMPDIR)\n"
	      "  moves    other lanes' round latency while a sequence moves (ignis-kvstored:\n"
	      "           $IGNIS_KVSTORED, else the build tree's)\n"
	      "  reuse    time to first token with prompt reuse on and off: a growing chat,\n"
	      "           requests sharing a system prompt (tiny-dense, device and host slots)\n"
	      "  experts  decode tokens per second and the expert cache's hit rate against its\n"
	      "           size (64 experts a layer, top-8)\n"
	      "  kvformat each KV format's error against exact vectors, not a speed: per\n"
	      "           vector, in attention over 1K-32K keys with and without the residual\n"
	      "           window, end to end against bf16 KV on every architecture's\n"
	      "           synthetic model (--quick: 1K-4K keys, 512 tokens)\n"
	      "  grammar  decode with and without a JSON schema's grammar, 1 and 4 lanes, on a\n"
	      "           Qwen3-0.6B-shaped model over a real vocabulary (--vocab VOCAB.gguf)\n"
	      "  --quick  two repetitions instead of five\n"
	      "  --base-kernels  the matrix product's baseline kernels, not the CPU's best\n"
	      "           (AVX-512 where it has it): the same bits, to compare speeds\n"
	      "  -h, --help  this text\n"
	      "Exit status: 0 measured, 1 a part failed, 2 bad usage.\n",
	      f);
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
	    {"types", bench_types},
	    /* llama.cpp from the oracle (tools/install-oracle.sh); says so without it */
	    {"llama", bench_llama},
	    /* needs room for 192 MiB in /dev/shm and about 0.8 GiB under $TMPDIR */
	    {"kvstore", bench_kvstore},
	    /* starts ignis-kvstored ($IGNIS_KVSTORED, else the build tree's) */
	    {"moves", bench_moves},
	    {"reuse", bench_reuse},
	    {"experts", bench_experts},
	    /* fixed seeds: the same table every run on a machine */
	    {"kvformat", bkvf_run},
	    /* --vocab VOCAB.gguf (a real vocabulary); says so without it */
	    {"grammar", bench_grammar},
	};
	enum { NPARTS = sizeof(parts) / sizeof(parts[0]) };
	size_t run[64], nrun = 0;
	int reps = 5;

	/* Every argument is read before any part runs: a bad one runs nothing. */
	for (int i = 1; i < argc; i++) {
		size_t k = 0;

		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--quick")) {
			reps = 2;
			continue;
		}
		if (!strcmp(argv[i], "--vocab") && i + 1 < argc) {
			bench_vocab_path = argv[++i];
			continue;
		}
		if (!strcmp(argv[i], "--base-kernels")) {
			cop_kernels_force(COP_KERNELS_BASE);
			continue;
		}
		if (argv[i][0] == '-') {
			fprintf(stderr, "ignis-bench: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
		while (k < NPARTS && strcmp(argv[i], parts[k].name))
			k++;
		if (k == NPARTS) {
			fprintf(stderr,
			        "ignis-bench: unknown part '%s'; accepted: seqimg, matmul, codec, "
			        "model, types, llama, kvstore, moves, reuse, experts, kvformat, "
			        "grammar\n",
			        argv[i]);
			usage(stderr);
			return 2;
		}
		if (nrun == sizeof(run) / sizeof(run[0])) {
			fprintf(stderr, "ignis-bench: at most %zu parts a run\n", nrun);
			return 2;
		}
		run[nrun++] = k;
	}
	if (!nrun)
		for (size_t k = 0; k < NPARTS; k++)
			run[nrun++] = k;
	for (size_t i = 0; i < nrun; i++)
		parts[run[i]].fn(reps);
	return 0;
}
