/*
 * test_model_cpu.c - the whole decoder on the cpu backend, on synthetic model
 * files of both families: the same greedy tokens whatever the prefill
 * chunking and the thread count, in bf16 and in the compact KV format (with
 * and without its residual window), and after the sequence's state moved to
 * other pages midway (the exactness a move to KV-RAM or KV-disk relies on).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu-worker/backend/cpu/model_cpu.h"
#include "gpu-worker/engine/sampler.h"

#define CONTEXT 256u
#define GEN     24u

struct rig {
	struct mfile f;
	struct mdl d;
	struct kvpool kv;
	void *region;
	uint64_t page_bytes;
};

/* The residual window the next rig_open binds with (common/model.h): a
 * test sets it and puts it back to none. */
static uint32_t rig_sinks, rig_window;

static void rig_open(struct rig *r, const char *preset, enum mdesc_kv_format fmt)
{
	char path[128];
	struct ig_errbuf eb;
	uint32_t pages = 3 * (CONTEXT / 64);

	snprintf(path, sizeof(path), "/tmp/ignis-model-%s-%d.gguf", preset, (int)getpid());
	if (mfile_write_synthetic(mdesc_find(preset), 11, MFILE_BF16, path, &eb) ||
	    mfile_open(&r->f, path, &eb) || mdl_bind(&r->d, &r->f, &eb))
		fail_msg("%s: %s", preset, eb.msg);
	unlink(path); /* the mapping stays */
	r->d.kv_sinks = rig_sinks;
	r->d.kv_window = rig_window;
	r->page_bytes = mdesc_page_bytes(&r->f.desc, fmt);
	r->region = calloc(pages, r->page_bytes);
	assert_int_equal(kvpool_init(&r->kv, r->region, r->page_bytes, pages, &eb), IG_E_OK);
}

static void rig_close(struct rig *r)
{
	kvpool_release(&r->kv);
	free(r->region);
	mdl_release(&r->d);
	mfile_close(&r->f);
}

/* A sequence's state: its linear states and its window (mdl_state_bytes). */
static size_t state_bytes(const struct rig *r)
{
	return (size_t)mdl_state_bytes(&r->d);
}

static uint32_t argmax(const float *x, uint32_t n)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* Prefill the prompt in chunks of `chunk`, then GEN greedy tokens; with
 * `move_at` > 0, after that many generated tokens the sequence's pages and
 * state are copied to a new sequence on other pages, which continues. */
static void generate(struct rig *r, enum mdesc_kv_format fmt, uint32_t chunk, int threads,
                     uint32_t move_at, uint32_t *out)
{
	static const char prompt[] = "Ignis: the same tokens, exactly.";
	const uint32_t n_prompt = sizeof(prompt) - 1;
	uint32_t toks[64], pages = CONTEXT / 64;
	struct be_seq s = {0}, s2 = {0}, *cur = &s;
	struct kvseq hold = {0};
	struct cpool *pool;
	struct ig_errbuf eb;
	float *logits = malloc(r->f.desc.vocab * sizeof(float));
	void *scratch =
	    aligned_alloc(64, (mdl_scratch_bytes(r->d.m, chunk, CONTEXT) + 63) / 64 * 64);
	int err;

	assert_int_equal(cpool_create(&pool, threads, &eb), IG_E_OK);
	assert_true(kvpool_try_reserve(&r->kv, &s.kv, 1, pages, &err));
	assert_int_equal(mdl_seq_init(&r->d, &s, &eb), IG_E_OK);
	for (uint32_t i = 0; i < n_prompt; i++)
		toks[i] = (unsigned char)prompt[i];
	for (uint32_t t = 0; t < n_prompt; t += chunk) {
		uint32_t n = n_prompt - t < chunk ? n_prompt - t : chunk;

		if (mdl_forward(&r->d, cur, toks + t, n, fmt, &r->kv, CONTEXT, logits, scratch,
		                pool, &eb))
			fail_msg("prefill: %s", eb.msg);
	}
	for (uint32_t g = 0; g < GEN; g++) {
		uint32_t next = argmax(logits, r->f.desc.vocab);

		for (uint32_t v = 0; v < r->f.desc.vocab; v++)
			assert_true(isfinite(logits[v]));
		out[g] = next;
		if (move_at && g == move_at) {
			/* move: other pages (a placeholder takes the next free ones
			 * first), the same bytes, the same state and position */
			assert_true(kvpool_try_reserve(&r->kv, &hold, 3, 1, &err));
			assert_true(kvpool_try_reserve(&r->kv, &s2.kv, 2, pages, &err));
			assert_int_equal(mdl_seq_init(&r->d, &s2, &eb), IG_E_OK);
			for (uint32_t p = 0; p < pages; p++) {
				assert_int_not_equal(s2.kv.table[p], s.kv.table[p]);
				memcpy(kvpool_page(&r->kv, s2.kv.table[p]),
				       kvpool_page(&r->kv, s.kv.table[p]), r->page_bytes);
			}
			memcpy(s2.state, s.state, state_bytes(r));
			s2.pos = s.pos;
			memset(kvpool_page(&r->kv, s.kv.table[0]), 0xa5,
			       r->page_bytes); /* old copy gone */
			kvpool_free(&r->kv, &s.kv);
			cur = &s2;
		}
		if (mdl_forward(&r->d, cur, &next, 1, fmt, &r->kv, CONTEXT, logits, scratch, pool,
		                &eb))
			fail_msg("decode: %s", eb.msg);
	}
	kvpool_free(&r->kv, &s.kv);
	kvpool_free(&r->kv, &s2.kv);
	kvpool_free(&r->kv, &hold);
	mdl_seq_release(&s);
	mdl_seq_release(&s2);
	cpool_destroy(pool);
	free(scratch);
	free(logits);
}

/* The greedy tokens of each preset and format (seed 11, the prompt of
 * generate()): every numeric change shows here. A deliberate one (a new
 * summation order, a new format) updates these rows and says so in its
 * commit; an accidental one fails. */
static const struct {
	const char *preset;
	enum mdesc_kv_format fmt;
	uint32_t tokens[GEN];
	uint32_t sinks, window; /* the residual window (0: none) */
} pinned[] = {
    {"tiny-dense",
     MDESC_KV_BF16,
     {68,  86, 127, 181, 216, 250, 169, 146, 178, 238, 124, 150,
      203, 14, 134, 248, 46,  61,  71,  248, 159, 137, 87,  13},
     0,
     0},
    {"tiny-dense",
     MDESC_KV_COMPACT,
     {77,  44, 82,  30,  128, 259, 225, 174, 63,  178, 232, 75,
      231, 9,  140, 134, 97,  30,  118, 244, 129, 68,  32,  246},
     0,
     0},
    /* the window of 4 sinks and 8 newest: 22 of compact's own, then apart */
    {"tiny-dense",
     MDESC_KV_COMPACT,
     {77,  44, 82,  30,  128, 259, 225, 174, 63,  178, 232, 75,
      231, 9,  140, 134, 97,  30,  118, 244, 129, 68,  223, 178},
     4,
     8},
    /* fp8 keeps every one of bf16's 24 here */
    {"tiny-dense",
     MDESC_KV_FP8,
     {68,  86, 127, 181, 216, 250, 169, 146, 178, 238, 124, 150,
      203, 14, 134, 248, 46,  61,  71,  248, 159, 137, 87,  13},
     0,
     0},
    {"tiny-moe",
     MDESC_KV_BF16,
     {236, 209, 183, 150, 182, 192, 245, 165, 49, 229, 36, 151,
      96,  198, 159, 64,  190, 149, 142, 201, 49, 73,  83, 118},
     0,
     0},
};

static void exact(const char *preset, enum mdesc_kv_format fmt, uint32_t *tokens)
{
	static const struct {
		uint32_t chunk;
		int threads;
		uint32_t move_at;
	} runs[] = {{64, 1, 0}, {3, 2, 0}, {1, 3, 0}, {7, 2, 9}};
	uint32_t ref[GEN], got[GEN];
	struct rig r;

	rig_open(&r, preset, fmt);
	generate(&r, fmt, runs[0].chunk, runs[0].threads, 0, ref);
	printf("# %s %s (window %u+%u): greedy", preset, mdesc_kv_format_name(fmt), rig_sinks,
	       rig_window);
	for (uint32_t g = 0; g < GEN; g++)
		printf(" %u", ref[g]);
	printf("\n");
	for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++)
		if (!strcmp(pinned[i].preset, preset) && pinned[i].fmt == fmt &&
		    pinned[i].sinks == rig_sinks && pinned[i].window == rig_window &&
		    memcmp(pinned[i].tokens, ref, sizeof(ref)))
			fail_msg("%s: the greedy tokens changed from the pinned ones: a numeric "
			         "change (see the comment above `pinned`)",
			         preset);
	for (size_t i = 1; i < sizeof(runs) / sizeof(runs[0]); i++) {
		generate(&r, fmt, runs[i].chunk, runs[i].threads, runs[i].move_at, got);
		if (memcmp(ref, got, sizeof(ref)))
			fail_msg("%s: chunk %u, %d threads, move at %u differs", preset,
			         runs[i].chunk, runs[i].threads, runs[i].move_at);
	}
	if (tokens)
		memcpy(tokens, ref, sizeof(ref));
	rig_close(&r);
}

static void test_dense_bf16(void **state)
{
	(void)state;
	exact("tiny-dense", MDESC_KV_BF16, NULL);
}

static void test_dense_compact(void **state)
{
	(void)state;
	exact("tiny-dense", MDESC_KV_COMPACT, NULL);
}

static void test_dense_fp8(void **state)
{
	(void)state;
	exact("tiny-dense", MDESC_KV_FP8, NULL);
}

static void test_moe_bf16(void **state)
{
	(void)state;
	exact("tiny-moe", MDESC_KV_BF16, NULL);
}

/* The residual window: a window of 8 after 4 sinks, so that the prompt's 32
 * tokens and the 24 generated cross it (positions 4 .. p - 8 read from their
 * coded pages), is as exact as the format alone, and its tokens are not the
 * windowless ones (the window is read). A window over the whole context reads
 * no page at all: the rotated vectors in bf16 give bf16's greedy tokens. */
static void test_dense_compact_window(void **state)
{
	uint32_t none[GEN], win[GEN], bf16[GEN];

	(void)state;
	exact("tiny-dense", MDESC_KV_COMPACT, none);
	exact("tiny-dense", MDESC_KV_BF16, bf16);
	rig_sinks = 4;
	rig_window = 8;
	exact("tiny-dense", MDESC_KV_COMPACT, win);
	assert_memory_not_equal(none, win, sizeof(win));
	rig_sinks = 0;
	rig_window = CONTEXT;
	exact("tiny-dense", MDESC_KV_COMPACT, win);
	rig_sinks = rig_window = 0;
	assert_memory_equal(bf16, win, sizeof(win));
}

/* Window sizes of a move: 0 stands for the whole image in one window, and
 * the page size for one page a window. */
struct move_windows {
	uint64_t out, in;
};

static uint64_t window_bytes(uint64_t w, uint64_t page_bytes, uint64_t image_bytes)
{
	return w == 0 ? image_bytes : w == 1 ? page_bytes : w;
}

/* Sampled generation that, after `move_at` generated tokens (0: never),
 * moves the sequence out as a sequence image through windows of mw.out
 * bytes, frees its pages, and brings it back through windows of mw.in bytes
 * into other pages, with its sampler state: the tokens must be the
 * uninterrupted run's. The prompt is 60 tokens, so generation crosses from
 * the first page into the second (a move at token 3 or later carries two
 * pages, one partly filled). */
static void sample(struct rig *r, enum mdesc_kv_format fmt, uint32_t move_at,
                   struct move_windows mw, uint32_t *out)
{
	static const char prompt[] = "Moved out, and back, exactly. Moved out, and back, exactly!!";
	const uint32_t n_prompt = sizeof(prompt) - 1, pages = CONTEXT / 64;
	struct smp_params sp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 77};
	struct be_seq s = {0};
	struct kvseq hold = {0};
	struct smp_state st;
	struct cpool *pool;
	struct ig_errbuf eb;
	uint32_t toks[64], next = 0;
	float *logits = malloc(r->f.desc.vocab * sizeof(float));
	void *scratch = aligned_alloc(64, (mdl_scratch_bytes(r->d.m, 64, CONTEXT) + 63) / 64 * 64);
	void *sscratch = malloc(smp_scratch_bytes(r->f.desc.vocab));
	int err;

	assert_true(n_prompt == 60);
	assert_int_equal(cpool_create(&pool, 2, &eb), IG_E_OK);
	assert_true(kvpool_try_reserve(&r->kv, &s.kv, 1, pages, &err));
	assert_int_equal(mdl_seq_init(&r->d, &s, &eb), IG_E_OK);
	smp_init(&st, &sp);
	for (uint32_t i = 0; i < n_prompt; i++)
		toks[i] = (unsigned char)prompt[i];
	assert_int_equal(mdl_forward(&r->d, &s, toks, n_prompt, fmt, &r->kv, CONTEXT, logits,
	                             scratch, pool, &eb),
	                 IG_E_OK);
	for (uint32_t g = 0; g < GEN; g++) {
		next = smp_pick(&sp, &st, logits, r->f.desc.vocab, sscratch);
		out[g] = next;
		if (move_at && g == move_at) {
			struct seqimg_header h;
			void *page_ptrs[8], *new_ptrs[8];
			uint8_t sampler[SMP_STATE_BYTES];
			struct seqimg_writer w;
			struct seqimg_reader rd;
			unsigned char *img, *win;
			uint64_t n, len = 0, wout, win_in;
			struct be_seq s2 = {0};

			smp_state_save(&st, sampler);
			mdl_seq_image(&r->d, &s, &r->kv, fmt, next, sizeof(sampler), &h, page_ptrs);
			seqimg_writer_init(&w, &h,
			                   &(struct seqimg_parts){page_ptrs, s.state, sampler});
			img = malloc(w.h.image_bytes);
			wout = window_bytes(mw.out, r->page_bytes, w.h.image_bytes);
			win_in = window_bytes(mw.in, r->page_bytes, w.h.image_bytes);
			win = malloc(wout);
			do {
				seqimg_write_window(&w, win, wout, &n);
				assert_true(n <= wout);
				memcpy(img + len, win, n);
				len += n;
			} while (n);
			assert_int_equal(len, w.h.image_bytes);
			free(win);
			/* gone: the pages scribbled and freed, the state freed */
			for (uint32_t p = 0; p < s.kv.n_pages; p++)
				memset(kvpool_page(&r->kv, s.kv.table[p]), 0x5a, r->page_bytes);
			kvpool_free(&r->kv, &s.kv);
			mdl_seq_release(&s);
			memset(sampler, 0, sizeof(sampler));
			/* back, into other pages */
			assert_true(kvpool_try_reserve(&r->kv, &hold, 3, 2, &err));
			assert_true(kvpool_try_reserve(&r->kv, &s2.kv, 2, pages, &err));
			assert_int_equal(mdl_seq_init(&r->d, &s2, &eb), IG_E_OK);
			for (uint32_t p = 0; p < pages; p++)
				new_ptrs[p] = kvpool_page(&r->kv, s2.kv.table[p]);
			seqimg_reader_init(&rd, r->d.m, fmt,
			                   &(struct seqimg_parts){new_ptrs, s2.state, sampler},
			                   pages, state_bytes(r), sizeof(sampler));
			for (uint64_t off = 0; off < len; off += win_in)
				if (seqimg_read_window(&rd, img + off,
				                       len - off < win_in ? len - off : win_in,
				                       &eb))
					fail_msg("restore: %s", eb.msg);
			assert_true(seqimg_reader_done(&rd));
			assert_int_equal(smp_state_load(&st, sampler, &eb), IG_E_OK);
			s2.pos = rd.h.tokens;
			next = rd.h.last_token;
			s = s2;
			free(img);
		}
		assert_int_equal(mdl_forward(&r->d, &s, &next, 1, fmt, &r->kv, CONTEXT, logits,
		                             scratch, pool, &eb),
		                 IG_E_OK);
	}
	kvpool_free(&r->kv, &s.kv);
	kvpool_free(&r->kv, &hold);
	mdl_seq_release(&s);
	cpool_destroy(pool);
	free(scratch);
	free(sscratch);
	free(logits);
}

/* Moved at several tokens (within the first page, at its end, in the second)
 * through windows from one page to the whole image, in both formats. */
static void test_move_through_a_sequence_image(void **state)
{
	static const struct {
		const char *preset;
		enum mdesc_kv_format fmt;
		uint32_t sinks, window; /* the residual window */
	} runs[] = {
	    {"tiny-dense", MDESC_KV_BF16, 0, 0},
	    {"tiny-moe", MDESC_KV_BF16, 0, 0},
	    {"tiny-dense", MDESC_KV_COMPACT, 0, 0},
	    /* the image carries the window: 60 prompt tokens and 24 more
	     * cross a window of 16 after 4 sinks */
	    {"tiny-dense", MDESC_KV_COMPACT, 4, 16},
	};
	/* 1: a page a window; 0: the whole image; others: bytes */
	static const struct move_windows ws[] = {
	    {4096, 1000}, {1, 1}, {0, 0}, {1, 0}, {0, 3 * 1024 + 17}};
	static const uint32_t at[] = {1, 3, 4, 9, GEN - 1};

	(void)state;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		uint32_t ref[GEN], got[GEN];
		struct rig r;

		rig_sinks = runs[i].sinks;
		rig_window = runs[i].window;
		rig_open(&r, runs[i].preset, runs[i].fmt);
		rig_sinks = rig_window = 0;
		sample(&r, runs[i].fmt, 0, ws[0], ref);
		for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
			struct move_windows mw = ws[(k + i) % (sizeof(ws) / sizeof(ws[0]))];

			sample(&r, runs[i].fmt, at[k], mw, got);
			if (memcmp(ref, got, sizeof(ref)))
				fail_msg("%s (%s, KV window %u): moved at token %u through windows "
				         "%llu/%llu: the tokens differ from the uninterrupted run",
				         runs[i].preset, mdesc_kv_format_name(runs[i].fmt),
				         runs[i].window, at[k], (unsigned long long)mw.out,
				         (unsigned long long)mw.in);
		}
		rig_close(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dense_bf16), cmocka_unit_test(test_dense_compact),
	    cmocka_unit_test(test_dense_fp8),  cmocka_unit_test(test_dense_compact_window),
	    cmocka_unit_test(test_moe_bf16),   cmocka_unit_test(test_move_through_a_sequence_image),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
