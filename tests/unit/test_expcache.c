/*
 * test_expcache.c - the expert cache at run time (docs/adr/0039) on the cpu
 * backend, over a MoE model of 64 experts a layer and top-8 routing (tiny-moe's
 * shapes otherwise): the same requests (greedy and seeded, two lanes, prefill
 * chunks beside decode rows) give the same tokens read in place from the
 * file, resident in the expert_cache region, and offloaded behind a cache of
 * every size down to the class minimum, and below it (top_k slots: decode
 * passes then go through the staging ring); the class minimum holds at run
 * time: with lanes x top_k slots a class, no pass of decode rows alone needs
 * the ring; hits, misses, bytes and evictions add up. Pinned experts (the
 * hottest by a calibration's counts, written and read back as ignis-calibrate
 * and the worker do): the same tokens, always hits, their host copy gone,
 * each class keeping its minimum; a pin past the most is refused naming it,
 * and so is one without counts.
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

#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/kvpool.h"
#include "gpu-worker/engine/engine.h"
#include "model/expcounts.h"
#include "model/mfile.h"
#include "testutil.h"

#define LANES   2u
#define CHUNK   32u
#define CONTEXT 512u
#define NREQ    6u
#define MAXGEN  16u
#define PAGES   64u

struct req {
	uint32_t prompt[160], n;
	struct smp_params smp;
};

static char model_path[128];
static struct req reqs[NREQ];
static uint32_t want[NREQ][MAXGEN];

/* How the experts are bound: in place (no expert_cache region), resident,
 * or offloaded behind `sets` slot sets. */
enum how { IN_PLACE, RESIDENT, OFFLOADED };

/* pins for the next run (OFFLOADED) */
static uint64_t pin_bytes;
static const uint64_t *pin_counts;

struct run_out {
	uint32_t tok[NREQ][MAXGEN];
	uint64_t counts[8 * 64]; /* tokens routed to each expert (a cached run) */
	struct be_expert_stats xs;
	uint64_t decode_only_staged; /* staged layers in rounds with no prefill */
	uint64_t decode_only_rounds;
};

static void make_model(void)
{
	struct mdesc d = *mdesc_find("tiny-moe");
	struct ig_errbuf eb;

	d.experts = 64;
	d.top_k = 8;
	snprintf(model_path, sizeof(model_path), "/tmp/ignis-expcache-%d.gguf", (int)getpid());
	if (mfile_write_synthetic(&d, 9, MFILE_BF16, model_path, &eb))
		fail_msg("write: %s", eb.msg);
}

static void run(enum how how, uint64_t sets, struct run_out *o)
{
	struct be be = {0};
	struct mfile f;
	struct be_bind_opts bo = {
	    .max_round_tokens = LANES + CHUNK, .context = CONTEXT, .threads = 2, .states = LANES};
	struct be_model d;
	struct kvpool kv;
	struct eng *e;
	struct ig_errbuf eb;
	uint64_t ids[NREQ], set = 0, pb, heaviest;
	void *region;
	struct eng_cfg cfg = {.lanes = LANES,
	                      .chunk = CHUNK,
	                      .context = CONTEXT,
	                      .default_max_tokens = MAXGEN,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = 16,
	                      .eos = UINT32_MAX};

	memset(o, 0, sizeof(*o));
	be.ops = backend_find("cpu", &eb);
	assert_int_equal(be.ops->open(&be, 1ull << 30, &eb), IG_E_OK);
	if (mfile_open(&f, model_path, &eb) || be_bind_reserve(&be, &f, &bo, &eb))
		fail_msg("%s", eb.msg);
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
		set += f.desc.class_record_bytes[k];
	heaviest = f.desc.heaviest_layer_expert_bytes;
	if (how == RESIDENT)
		bo.expert_cache.bytes = f.desc.expert_host_bytes;
	else if (how == OFFLOADED)
		bo.expert_cache.bytes = sets * set;
	if (how != IN_PLACE) {
		bo.residency.bytes = 2 * heaviest;
		bo.experts_offloaded = how == OFFLOADED;
		bo.pinned_expert_bytes = how == OFFLOADED ? pin_bytes : 0;
		bo.expert_counts = pin_counts;
		assert_int_equal(
		    be.ops->alloc(&be, bo.expert_cache.bytes, &bo.expert_cache.base, &eb), IG_E_OK);
		assert_int_equal(be.ops->alloc(&be, bo.residency.bytes, &bo.residency.base, &eb),
		                 IG_E_OK);
	}
	if (be.ops->model_bind(&be, &f, NULL, &bo, &d, &eb))
		fail_msg("bind: %s", eb.msg);
	pb = mdesc_page_bytes(&f.desc, MDESC_KV_BF16);
	assert_int_equal(be.ops->alloc(&be, PAGES * pb, &region, &eb), IG_E_OK);
	assert_int_equal(kvpool_init(&kv, region, pb, PAGES, &eb), IG_E_OK);
	assert_int_equal(eng_create(&e, &be, &d, &kv, &cfg, &eb), IG_E_OK);
	/* three at once, the rest as lanes free: prefill chunks beside decode */
	for (uint32_t i = 0; i < NREQ; i++) {
		struct eng_req r = {reqs[i].prompt, reqs[i].n, MAXGEN, SCHED_INTERACTIVE,
		                    reqs[i].smp,    NULL,      NULL,   0, false};
		struct eng_admission adm;

		if (eng_submit(e, &r, &adm, &eb))
			fail_msg("submit: %s", eb.msg);
		ids[i] = adm.id;
	}
	for (uint32_t guard = 0;; guard++) {
		struct eng_stats before, after;
		struct be_expert_stats xs0, xs1;
		uint32_t ran;

		eng_stats(e, &before);
		be.ops->expert_stats(&be, &d, &xs0);
		if (eng_round(e, &ran, &eb))
			fail_msg("round: %s", eb.msg);
		eng_stats(e, &after);
		be.ops->expert_stats(&be, &d, &xs1);
		if (ran && after.prefill_tokens == before.prefill_tokens) {
			o->decode_only_rounds++;
			o->decode_only_staged += xs1.staged_layers - xs0.staged_layers;
		}
		if (!ran && !eng_busy(e))
			break;
		assert_true(guard < 10000);
	}
	for (uint32_t i = 0; i < NREQ; i++) {
		struct eng_status st;
		uint32_t n;

		assert_int_equal(eng_tokens(e, ids[i], 0, MAXGEN, o->tok[i], &n, &st, &eb),
		                 IG_E_OK);
		assert_int_equal(n, MAXGEN);
	}
	be.ops->expert_stats(&be, &d, &o->xs);
	if (how != IN_PLACE)
		assert_int_equal(be.ops->expert_counts(&be, &d, o->counts, 8 * 64),
		                 (uint64_t)f.desc.layers * f.desc.experts);
	eng_destroy(e);
	kvpool_release(&kv);
	be.ops->free(&be, region, PAGES * pb);
	be.ops->model_release(&be, &d);
	if (how != IN_PLACE) {
		be.ops->free(&be, bo.expert_cache.base, bo.expert_cache.bytes);
		be.ops->free(&be, bo.residency.base, bo.residency.bytes);
	}
	be_bind_unreserve(&be, &bo);
	be.ops->close(&be);
	mfile_close(&f);
}

static int setup(void **state)
{
	struct rng g = {77};
	static struct run_out o;

	(void)state;
	make_model();
	for (uint32_t i = 0; i < NREQ; i++) {
		reqs[i].n = 40 + 23 * i % 120;
		for (uint32_t t = 0; t < reqs[i].n; t++)
			reqs[i].prompt[t] = (uint32_t)(rng_next(&g) % 256u);
		reqs[i].smp = i % 2 ? (struct smp_params){0.9f, 40, 0.95f, 100 + i}
		                    : (struct smp_params){0.0f, 0, 1.0f, 0};
	}
	run(IN_PLACE, 0, &o);
	memcpy(want, o.tok, sizeof(want));
	assert_false(o.xs.cached);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(model_path);
	return 0;
}

static void same_as_in_place(const char *what, const struct run_out *o)
{
	for (uint32_t i = 0; i < NREQ; i++)
		if (memcmp(o->tok[i], want[i], sizeof(want[i])))
			fail_msg("%s: request %u differs from the experts read in place", what, i);
}

/* Resident: every expert copied once into the region, nothing after. */
static void test_resident(void **state)
{
	static struct run_out o;

	(void)state;
	run(RESIDENT, 0, &o);
	same_as_in_place("resident", &o);
	assert_true(o.xs.cached);
	assert_false(o.xs.offloaded);
	assert_int_equal(o.xs.host_bytes, 0);
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
		assert_int_equal(o.xs.cls[k].misses + o.xs.cls[k].bytes, 0);
	assert_int_equal(o.xs.staged_layers, 0);
}

/* Offloaded at every size: the same tokens; the books add up. */
static void test_offloaded_any_size(void **state)
{
	/* every expert (8 layers x 64), twice tiny-moe's 2 MiB floor, the floor,
	 * the class minimum (2 lanes x (8 + 2)), lanes x top_k, top_k */
	static const uint64_t sizes[] = {512, 43, 22, 20, 16, 8};
	static struct run_out o;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char what[64];
		uint64_t misses = 0, hits = 0;

		snprintf(what, sizeof(what), "offloaded, %llu slot sets",
		         (unsigned long long)sizes[i]);
		run(OFFLOADED, sizes[i], &o);
		same_as_in_place(what, &o);
		assert_true(o.xs.offloaded);
		assert_int_equal(o.xs.host_bytes, 8ull * 64 * 98304);
		for (int k = 0; k < MDESC_EXPERT_CLASSES; k++) {
			const struct be_expert_class *c = &o.xs.cls[k];

			if (!c->slots)
				continue;
			assert_int_equal(c->slots, sizes[i]);
			/* every fill (a miss, or a prefetch ahead of its layer) copies
			 * one record's worth (gate+up or down) */
			uint64_t fills = c->misses + c->prefetches;

			assert_int_equal(c->bytes, fills * (k < 4 ? 65536u : 32768u));
			/* evictions only once every slot was filled */
			assert_int_equal(c->evictions, fills > c->slots ? fills - c->slots : 0);
			misses += c->misses;
			hits += c->hits;
		}
		assert_true(misses > 0);
		if (sizes[i] == 512) /* all fit: each expert copied at most once */
			assert_true(misses <= 2u * 512);
		print_message(
		    "# %-28s hits %6llu misses %6llu prefetches %6llu staged layers %llu\n", what,
		    (unsigned long long)hits, (unsigned long long)misses,
		    (unsigned long long)(o.xs.cls[0].prefetches + o.xs.cls[4].prefetches),
		    (unsigned long long)o.xs.staged_layers);
	}
}

/* The class minimum at run time: with lanes x top_k slots a class, a pass
 * of decode rows alone (at most lanes x top_k distinct experts a layer)
 * never needs the staging ring; with fewer (top_k), such passes do, and the
 * tokens are the same all the same. */
static void test_class_minimum_holds(void **state)
{
	static struct run_out o;

	(void)state;
	run(OFFLOADED, LANES * 8, &o);
	assert_true(o.decode_only_rounds > 0);
	assert_int_equal(o.decode_only_staged, 0);
	run(OFFLOADED, 8, &o);
	same_as_in_place("top_k slots", &o);
	assert_true(o.decode_only_staged > 0);
}

/* A region too small for one slot set, or for a resident load, is refused
 * at bind, naming the line. */
static void test_refusals(void **state)
{
	struct be be = {0};
	struct mfile f;
	struct be_bind_opts bo = {
	    .max_round_tokens = LANES + CHUNK, .context = CONTEXT, .threads = 1, .states = LANES};
	struct be_model d;
	struct ig_errbuf eb;

	(void)state;
	be.ops = backend_find("cpu", &eb);
	assert_int_equal(be.ops->open(&be, 1ull << 30, &eb), IG_E_OK);
	if (mfile_open(&f, model_path, &eb) || be_bind_reserve(&be, &f, &bo, &eb))
		fail_msg("%s", eb.msg);
	bo.expert_cache.bytes = 65536; /* less than one set (98,304) */
	assert_int_equal(be.ops->alloc(&be, bo.expert_cache.bytes, &bo.expert_cache.base, &eb),
	                 IG_E_OK);
	bo.experts_offloaded = true;
	assert_int_equal(be.ops->model_bind(&be, &f, NULL, &bo, &d, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "expert_cache"));
	bo.experts_offloaded = false;
	assert_int_equal(be.ops->model_bind(&be, &f, NULL, &bo, &d, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "resident"));
	be.ops->free(&be, bo.expert_cache.base, bo.expert_cache.bytes);
	be_bind_unreserve(&be, &bo);
	be.ops->close(&be);
	mfile_close(&f);
}

/* A calibration's counts, written beside the model and read back; pins
 * from them: the same tokens, the pinned experts never copied in (fewer
 * fills than without the pin), their host copy gone, and the order keeps
 * the class minimum (decode rows never staged). */
static void test_pinned(void **state)
{
	static struct run_out cal, o, plain;
	struct ig_errbuf eb;
	struct mfile f;
	char path[200];
	uint64_t *back = NULL, pinned, most;

	(void)state;
	run(RESIDENT, 0, &cal); /* the calibration: these requests' routing */
	assert_int_equal(mfile_open(&f, model_path, &eb), IG_E_OK);
	assert_int_equal(expcounts_path(path, sizeof(path), model_path, &eb), IG_E_OK);
	assert_int_equal(expcounts_write(path, &f, cal.counts, &eb), IG_E_OK);
	assert_int_equal(expcounts_read(path, &f, &back, &eb), IG_E_OK);
	assert_memory_equal(back, cal.counts, sizeof(cal.counts));
	mfile_close(&f);
	/* 43 sets, 20 kept for a decode step (2 lanes x (8 + 2)): at most 23
	 * experts of 98,304 B; pin 20 */
	most = 23ull * 98304;
	pin_counts = back;
	pin_bytes = 20ull * 98304;
	run(OFFLOADED, 43, &o);
	pin_bytes = 0;
	run(OFFLOADED, 43, &plain);
	pin_counts = NULL;
	same_as_in_place("20 experts pinned of 43 slot sets", &o);
	pinned = o.xs.pinned_bytes;
	assert_int_equal(pinned, 20ull * 98304);
	assert_int_equal(o.xs.host_bytes, 8ull * 64 * 98304 - pinned);
	assert_int_equal(o.decode_only_staged, 0);
	for (int k = 0; k < 2; k++) {
		int c = k ? MDESC_EXPERT_WIDTHS : 0;

		/* a pinned expert is never copied in: fewer fills */
		assert_true(o.xs.cls[c].misses + o.xs.cls[c].prefetches <
		            plain.xs.cls[c].misses + plain.xs.cls[c].prefetches);
	}
	/* past the most: refused, naming it */
	{
		struct be be = {0};
		struct be_bind_opts bo = {.max_round_tokens = LANES + CHUNK,
		                          .context = CONTEXT,
		                          .threads = 1,
		                          .states = LANES};
		struct be_model d;
		char most_s[64];

		be.ops = backend_find("cpu", &eb);
		assert_int_equal(be.ops->open(&be, 1ull << 30, &eb), IG_E_OK);
		assert_int_equal(mfile_open(&f, model_path, &eb), IG_E_OK);
		assert_int_equal(be_bind_reserve(&be, &f, &bo, &eb), IG_E_OK);
		bo.expert_cache.bytes = 43ull * 98304;
		bo.residency.bytes = 2 * f.desc.heaviest_layer_expert_bytes;
		bo.experts_offloaded = true;
		assert_int_equal(
		    be.ops->alloc(&be, bo.expert_cache.bytes, &bo.expert_cache.base, &eb), IG_E_OK);
		assert_int_equal(be.ops->alloc(&be, bo.residency.bytes, &bo.residency.base, &eb),
		                 IG_E_OK);
		bo.pinned_expert_bytes = most + 1;
		bo.expert_counts = back;
		assert_int_equal(be.ops->model_bind(&be, &f, NULL, &bo, &d, &eb), IG_E_INVAL);
		snprintf(most_s, sizeof(most_s), "at most %llu bytes", (unsigned long long)most);
		if (!strstr(eb.msg, most_s))
			fail_msg("refusal without '%s': %s", most_s, eb.msg);
		bo.pinned_expert_bytes = most;
		bo.expert_counts = NULL;
		assert_int_equal(be.ops->model_bind(&be, &f, NULL, &bo, &d, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "ignis-calibrate"));
		be.ops->free(&be, bo.expert_cache.base, bo.expert_cache.bytes);
		be.ops->free(&be, bo.residency.base, bo.residency.bytes);
		be_bind_unreserve(&be, &bo);
		be.ops->close(&be);
		mfile_close(&f);
	}
	free(back);
	unlink(path);
}

/* The counts file: another model's, or a damaged one, is refused by name. */
static void test_counts_file(void **state)
{
	static uint64_t counts[8 * 64];
	struct ig_errbuf eb;
	struct mfile f, g;
	char path[200], other[200];
	uint64_t *back;
	struct mdesc d = *mdesc_find("tiny-moe");
	FILE *o;

	(void)state;
	for (uint32_t i = 0; i < 8 * 64; i++)
		counts[i] = i * 3u;
	snprintf(other, sizeof(other), "/tmp/ignis-expcache-other-%d.gguf", (int)getpid());
	d.experts = 64;
	d.top_k = 8;
	assert_int_equal(mfile_write_synthetic(&d, 10, MFILE_BF16, other, &eb), IG_E_OK);
	assert_int_equal(mfile_open(&f, model_path, &eb), IG_E_OK);
	assert_int_equal(mfile_open(&g, other, &eb), IG_E_OK);
	snprintf(path, sizeof(path), "/tmp/ignis-expcache-%d.counts", (int)getpid());
	assert_int_equal(expcounts_read(path, &f, &back, &eb), IG_E_NOTFOUND);
	assert_int_equal(expcounts_write(path, &f, counts, &eb), IG_E_OK);
	/* another model of the same shapes (another seed): refused */
	assert_int_equal(expcounts_read(path, &g, &back, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "another model"));
	/* a negative count: refused (it would wrap as unsigned) */
	{
		char *all;
		size_t n;
		FILE *in = fopen(path, "r");
		char *at;

		assert_non_null(in);
		all = calloc(1, 1u << 16);
		n = fread(all, 1, (1u << 16) - 1, in);
		fclose(in);
		assert_true(n > 0);
		at = strstr(all, "experts 64\n");
		assert_non_null(at);
		at += strlen("experts 64\n");
		at[0] = '-'; /* "0 3 6 ..." becomes "- 3 6 ..." */
		in = fopen(path, "w");
		fwrite(all, 1, n, in);
		fclose(in);
		assert_int_equal(expcounts_read(path, &f, &back, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "count 1 of"));
		free(all);
		assert_int_equal(expcounts_write(path, &f, counts, &eb), IG_E_OK);
	}
	/* cut short: refused, naming the count */
	o = fopen(path, "a");
	assert_non_null(o);
	fclose(o);
	assert_int_equal(truncate(path, 200), 0);
	assert_int_equal(expcounts_read(path, &f, &back, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "is missing or not a number"));
	mfile_close(&f);
	mfile_close(&g);
	unlink(path);
	unlink(other);
}

/* llama.cpp's qwen3next layout in Q4_K_M, experts 256 wide (gate and up Q4_K; down Q4_K in
 * some layers, Q6_K in others: two down classes), offloaded at the class
 * minimum and below it: the tokens of the experts read in place, and both
 * down classes in use. */
static void test_quantized_classes(void **state)
{
	static uint32_t base[NREQ][MAXGEN];
	static struct run_out o;
	struct mdesc q;
	struct ig_errbuf eb;
	char saved[128];
	int down_classes = 0;

	(void)state;
	memcpy(saved, model_path, sizeof(saved));
	snprintf(model_path, sizeof(model_path), "/tmp/ignis-expcache-q-%d.gguf", (int)getpid());
	assert_int_equal(mfile_as_layout(mdesc_find("tiny-moe"), MDESC_ARCH_QWEN3NEXT, &q, &eb),
	                 IG_E_OK);
	q.expert_inter = 256; /* down's rows whole Q4_K/Q6_K blocks */
	if (mfile_write_synthetic(&q, 13, MFILE_Q4_K_M, model_path, &eb))
		fail_msg("write: %s", eb.msg);
	run(IN_PLACE, 0, &o);
	memcpy(base, o.tok, sizeof(base));
	/* 2 lanes x (top_k 2 + prefetch 2) = 8: the class minimum; 4 below it */
	for (uint64_t sets = 8; sets >= 4; sets -= 4) {
		run(OFFLOADED, sets, &o);
		for (uint32_t i = 0; i < NREQ; i++)
			if (memcmp(o.tok[i], base[i], sizeof(base[i])))
				fail_msg("Q4_K_M, %llu sets: request %u differs from in place",
				         (unsigned long long)sets, i);
	}
	for (int k = MDESC_EXPERT_WIDTHS; k < MDESC_EXPERT_CLASSES; k++)
		down_classes += o.xs.cls[k].slots > 0 && o.xs.cls[k].misses > 0;
	assert_true(down_classes >= 2);
	unlink(model_path);
	memcpy(model_path, saved, sizeof(saved));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_resident),
	    cmocka_unit_test(test_offloaded_any_size),
	    cmocka_unit_test(test_class_minimum_holds),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_pinned),
	    cmocka_unit_test(test_counts_file),
	    cmocka_unit_test(test_quantized_classes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
