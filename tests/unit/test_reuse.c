/*
 * test_reuse.c - retained prompt checkpoints in the engine (docs/adr/0037):
 * a request that starts from a checkpoint gives the same tokens as the same
 * request run alone on a fresh engine, greedy and seeded, at any prefill
 * chunking and lane count, whether its prompt equals the checkpoint's (its
 * first token from the stored logits) or extends it (at a page boundary or
 * inside a page); the pool's books hold after every round (pages shared
 * between a checkpoint and its claimants are counted); a capture with no
 * free slot gives up an agent checkpoint before an interactive one, then the
 * least recently used; an admission that lacks pages has checkpoints given
 * up before it waits.
 *
 * Host slots (docs/adr/0038), in a real kvstore daemon: the same family of
 * requests from host checkpoints; an image changed in its slot is refused
 * at the claim (the request runs whole, as alone); a kill -9 of the daemon
 * with slots held loses none of them; an interactive checkpoint idle past
 * the TTL is given up as an agent's would be.
 *
 * n choices (docs/adr/0059): n requests of one prompt submitted at once,
 * seeds seed + i, each the tokens of itself alone, the prompt prefilled
 * once where slots exist (the others held, then claiming its checkpoint),
 * from device or host slots; with none each prefills.
 *
 * Reuse off with slots named (ADR 0037): the slots hold shared prefixes
 * only, device or host; no prompt's end is retained, so a repeat takes only
 * the prefix it shares with another prompt; with no slots nothing is.
 *
 * On bf16 pages, or in the KV format --kv-format names (fp8 and compact run
 * the few in main's fmt_tests); on the backend --backend names (cpu unless
 * another: engrig.h), the MoE cases left out where it runs no MoE.
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
#include <xxhash.h>

#include "gpu-worker/engine/engine.h"
#include "gpu-worker/engine/kvclient.h"
#include "testutil.h"
#include "engrig.h"
#include "kvdrig.h"

#define CONTEXT 512u
#define MAXGEN  24u
#define MAXP    300u

struct rq {
	uint32_t prompt[MAXP], n;
	uint32_t max_tokens;
	enum sched_class cls;
	struct smp_params smp;
};

struct ev_log {
	uint32_t captured, claimed, given_up, skipped;
	uint32_t host_captured, host_claimed;
	uint32_t prefix_captured; /* of captured: shared prefixes */
	char last_why[16];
};

static void on_event(void *ctx, const struct eng_event *ev)
{
	struct ev_log *l = ctx;

	switch (ev->kind) {
	case ENG_EV_REUSE_CAPTURED:
		l->captured++;
		l->host_captured += ev->tier && !strcmp(ev->tier, "host");
		l->prefix_captured += ev->prefix;
		break;
	case ENG_EV_REUSE_CLAIMED:
		l->claimed++;
		l->host_claimed += ev->tier && !strcmp(ev->tier, "host");
		break;
	case ENG_EV_REUSE_GIVEN_UP:
		l->given_up++;
		snprintf(l->last_why, sizeof(l->last_why), "%s", ev->why ? ev->why : "");
		break;
	case ENG_EV_REUSE_SKIPPED:
		l->skipped++;
		break;
	default:
		break;
	}
}

struct bench {
	struct rig r;
	void *slots;
	uint64_t slot_bytes;
	uint32_t n_slots;
	struct eng *e;
	struct ev_log log;
	/* host slots: a kvstore daemon of their own, and the engine's client */
	struct daemon k;
	struct kvc *kc;
	struct eng_cfg cfg;
};

/* n_slots device slots and n_host host slots (a daemon started for them;
 * an interactive checkpoint there ranks as an agent's after ttl_s idle). */
static void bench_open_reuse(struct bench *b, const char *preset, uint32_t pages, uint32_t n_slots,
                             uint32_t n_host, uint64_t ttl_s, uint32_t lanes, uint32_t chunk,
                             bool prefixes_only);

static void bench_open_host(struct bench *b, const char *preset, uint32_t pages, uint32_t n_slots,
                            uint32_t n_host, uint64_t ttl_s, uint32_t lanes, uint32_t chunk)
{
	bench_open_reuse(b, preset, pages, n_slots, n_host, ttl_s, lanes, chunk, false);
}

static void bench_open(struct bench *b, const char *preset, uint32_t pages, uint32_t n_slots,
                       uint32_t lanes, uint32_t chunk)
{
	bench_open_host(b, preset, pages, n_slots, 0, 0, lanes, chunk);
}

/* ... with prefixes_only: --reuse-prompt off with those slots named. */
static void bench_open_reuse(struct bench *b, const char *preset, uint32_t pages, uint32_t n_slots,
                             uint32_t n_host, uint64_t ttl_s, uint32_t lanes, uint32_t chunk,
                             bool prefixes_only)
{
	struct ig_errbuf eb;
	struct eng_cfg cfg = {.lanes = lanes,
	                      .chunk = chunk,
	                      .context = CONTEXT,
	                      .default_max_tokens = 8,
	                      .fmt = rig_fmt,
	                      .max_requests = 32,
	                      .eos = UINT32_MAX,
	                      .on_event = on_event};

	memset(b, 0, sizeof(*b));
	rig_open(&b->r, preset, pages);
	b->n_slots = n_slots;
	b->slot_bytes = rig_slot_bytes(&b->r);
	if (n_slots)
		assert_int_equal(
		    b->r.be.ops->alloc(&b->r.be, (uint64_t)n_slots * b->slot_bytes, &b->slots, &eb),
		    IG_E_OK);
	cfg.ctx = &b->log;
	cfg.prefixes_only = prefixes_only;
	cfg.retained_device = n_slots;
	cfg.retained_slot_bytes = b->slot_bytes;
	cfg.retained = (struct be_region){b->slots, (uint64_t)n_slots * b->slot_bytes};
	if (n_host) {
		daemon_open_slots(&b->k, "reuse", 4u << 20, 0, n_host, b->slot_bytes, ttl_s);
		assert_int_equal(kvc_open(&b->kc, b->k.dir, &eb), IG_E_OK);
		cfg.kv_slots = b->kc;
		cfg.retained_host = n_host;
		cfg.interactive_ttl_s = ttl_s;
		cfg.reuse_ns = 0x1234567;
	}
	b->cfg = cfg;
	if (eng_create(&b->e, &b->r.be, &b->r.d, &b->r.kv, &cfg, &eb))
		fail_msg("eng_create: %s", eb.msg);
}

/* Another engine on the same daemon (a worker started again), its host
 * slots' keys under `ns` (another model file, format or tokenizer when it
 * differs). */
static void bench_reengine(struct bench *b, uint64_t ns)
{
	struct ig_errbuf eb;

	eng_destroy(b->e);
	b->cfg.reuse_ns = ns;
	memset(&b->log, 0, sizeof(b->log));
	if (eng_create(&b->e, &b->r.be, &b->r.d, &b->r.kv, &b->cfg, &eb))
		fail_msg("eng_create: %s", eb.msg);
}

static void bench_close(struct bench *b)
{
	eng_destroy(b->e);
	/* every page back once the engine (and its checkpoints) went */
	assert_int_equal(b->r.kv.n_free, b->r.kv.n_pages);
	if (b->slots)
		b->r.be.ops->free(&b->r.be, b->slots, (uint64_t)b->n_slots * b->slot_bytes);
	kvc_close(b->kc);
	if (b->k.pid)
		daemon_close(&b->k);
	rig_close(&b->r);
}

static uint64_t submit(struct bench *b, const struct rq *q)
{
	struct eng_req er = {q->prompt, q->n, q->max_tokens, q->cls, q->smp, NULL, NULL, 0, false};
	struct eng_admission adm;
	struct ig_errbuf eb;

	if (eng_submit(b->e, &er, &adm, &eb))
		fail_msg("submit: %s", eb.msg);
	return adm.id;
}

/* Free pages scribbled over (0xff bytes: NaNs in bf16 and fp8, NaN scales
 * in fp8 and compact), so that a page a claimant should have copied and
 * did not shows in its tokens. */
static void poison_free(struct bench *b)
{
	/* through the table: the pool is device memory */
	for (uint32_t i = 0; i < b->r.kv.n_free; i++)
		rig_page_fill(&b->r, b->r.kv.free_stack[i], 0xff);
}

/* Rounds until nothing runs; the books checked after each. */
static void drain(struct bench *b)
{
	struct ig_errbuf eb;

	poison_free(b);

	for (uint32_t guard = 0;; guard++) {
		uint32_t ran = 0;

		if (eng_round(b->e, &ran, &eb))
			fail_msg("round: %s", eb.msg);
		if (!eng_check(b->e, &eb))
			fail_msg("the pool's books after round %u: %s", guard, eb.msg);
		if (ran == 0 && !eng_busy(b->e))
			break;
		if (ran == 0)
			usleep(200); /* a host slot's exchange with the daemon */
		assert_true(guard < 100000);
	}
}

static uint32_t result(struct bench *b, uint64_t id, uint32_t *out, uint32_t *cached)
{
	struct eng_status st;
	struct ig_errbuf eb;
	uint32_t n = 0;

	assert_int_equal(eng_tokens(b->e, id, 0, MAXGEN, out, &n, &st, &eb), IG_E_OK);
	assert_int_equal(st.phase, SCHED_DONE);
	if (cached)
		*cached = st.cached;
	return n;
}

/* Request q alone on a fresh engine with no retained slots. */
static uint32_t alone(const char *preset, const struct rq *q, uint32_t *out)
{
	struct bench b;
	uint32_t n;
	uint64_t id;

	bench_open(&b, preset, 64, 0, 1, 64);
	id = submit(&b, q);
	drain(&b);
	n = result(&b, id, out, NULL);
	assert_int_equal(b.log.captured, 0);
	bench_close(&b);
	return n;
}

static void fill(struct rng *g, uint32_t *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = (uint32_t)(rng_next(g) % 256u);
}

/* The family: a prompt, the same prompt (seeded), extensions of it (inside
 * a page, at a page boundary), an extension of an extension, a prompt that
 * leaves it before its end (no claim, but the 80 tokens they share are
 * retained as a prefix on its way), another that leaves it there (claims
 * that prefix), the prefix itself (its first token from the logits kept at
 * the prefix's end), each with the tokens it had alone. */
#define NFAM 9

struct family {
	struct rq q[NFAM];
	uint32_t want[NFAM][MAXGEN], n_want[NFAM];
	uint32_t cached[NFAM]; /* what each must take from a checkpoint */
};

static void make_family(struct family *f, const char *preset, uint64_t seed)
{
	struct rng g = {seed};
	struct rq *q = f->q;

	memset(f, 0, sizeof(*f));
	q[0].n = 100;
	fill(&g, q[0].prompt, 100);
	/* 1: the same prompt, sampled: its first token from the stored logits */
	q[1] = q[0];
	q[1].smp = (struct smp_params){0.9f, 40, 0.95f, seed + 1};
	/* 2: an extension inside the next page */
	q[2] = q[0];
	q[2].n = 150;
	fill(&g, q[2].prompt + 100, 50);
	/* 3: an extension of the extension, sampled */
	q[3] = q[2];
	q[3].n = 190;
	fill(&g, q[3].prompt + 150, 40);
	q[3].smp = (struct smp_params){0.8f, 0, 0.9f, seed + 3};
	/* 4: leaves the first prompt at token 80: nothing matches; the 80 are
	 * retained as a shared prefix */
	q[4] = q[0];
	q[4].n = 120;
	fill(&g, q[4].prompt + 80, 40);
	/* 5: a prompt of exactly two pages, then 6: its extension (no partial
	 * page to copy) */
	q[5].n = 128;
	fill(&g, q[5].prompt, 128);
	q[6] = q[5];
	q[6].n = 140;
	fill(&g, q[6].prompt + 128, 12);
	q[6].cls = SCHED_AGENT;
	/* 7: leaves the first prompt at token 80 too, another way: the prefix */
	q[7] = q[0];
	q[7].n = 110;
	fill(&g, q[7].prompt + 80, 30);
	/* 8: the 80 tokens alone, sampled */
	q[8] = q[0];
	q[8].n = 80;
	q[8].smp = (struct smp_params){0.7f, 20, 1.0f, seed + 8};
	for (uint32_t i = 0; i < NFAM; i++) {
		q[i].max_tokens = 12 + i;
		if (i != 1 && i != 3 && i != 8)
			q[i].smp = (struct smp_params){0.0f, 0, 1.0f, 0};
		f->n_want[i] = alone(preset, &q[i], f->want[i]);
		assert_int_equal(f->n_want[i], q[i].max_tokens);
	}
	f->cached[0] = 0;
	f->cached[1] = 100;
	f->cached[2] = 100;
	f->cached[3] = 150;
	f->cached[4] = 0;
	f->cached[5] = 0;
	f->cached[6] = 128;
	f->cached[7] = 80;
	f->cached[8] = 80;
}

static void family_run_in(const char *preset, const struct family *f, uint32_t lanes,
                          uint32_t chunk, uint32_t n_dev, uint32_t n_host)
{
	struct bench b;
	uint32_t out[MAXGEN], n, cached;
	struct eng_stats st;
	uint64_t reused = 0;

	bench_open_host(&b, preset, 64, n_dev, n_host, 300, lanes, chunk);
	/* one after another: each finds the checkpoints of those before */
	for (uint32_t i = 0; i < NFAM; i++) {
		uint64_t id = submit(&b, &f->q[i]);

		drain(&b);
		n = result(&b, id, out, &cached);
		if (n != f->n_want[i] || memcmp(out, f->want[i], n * sizeof(uint32_t)))
			fail_msg("%s, %u lanes, chunk %u: request %u (%u tokens, %u from a "
			         "checkpoint) differs from itself alone",
			         preset, lanes, chunk, i, f->q[i].n, cached);
		assert_int_equal(cached, f->cached[i]);
		reused += cached;
	}
	eng_stats(b.e, &st);
	assert_int_equal(st.reused_tokens, reused);
	assert_int_equal(st.reused_prefix_tokens, 160);
	assert_int_equal(st.reuse_hits, 6);
	assert_int_equal(b.log.claimed, 6);
	assert_int_equal(st.reuse_misses, 3); /* 0, 4 and 5: admitted with nothing to claim */
	/* captured: every prompt but the two equal to retained ones, and the
	 * prefix where 4 parted from 0; with host slots, 4's own end may come
	 * while its prefix's host capture is still under way (no one claims
	 * it): skipped, or, with device slots, one of those given up for it */
	assert_int_equal(st.reuse_captures + st.reuse_skips_host_busy, NFAM - 1);
	assert_true(st.reuse_skips_host_busy <= (n_dev ? 0u : 1u));
	assert_true(st.reuse_given_up_slot <= (n_host && n_dev ? 1u : 0u));
	assert_int_equal(st.reuse_prefixes, 1);
	assert_int_equal(st.checkpoints + st.host_checkpoints,
	                 st.reuse_captures - st.reuse_given_up_slot);
	/* the device slots first, then the host ones */
	assert_int_equal(st.checkpoints, n_dev < NFAM - 1 ? n_dev : NFAM - 1);
	assert_int_equal(b.log.host_captured, st.host_checkpoints);
	if (!n_dev) {
		assert_int_equal(st.reused_host_tokens, reused);
		assert_int_equal(st.reused_host_prefix_tokens, 160);
		assert_int_equal(b.log.host_claimed, 6);
	}
	bench_close(&b);
}

static void family_run(const char *preset, const struct family *f, uint32_t lanes, uint32_t chunk)
{
	family_run_in(preset, f, lanes, chunk, 8, 0);
}

static void reuse_exact(const char *preset)
{
	static const uint32_t chunks[] = {1, 7, 64, 256};
	struct family *f;

	/* a model the backend under test does not run (the cuda backend and
	 * a mixture of experts): skipped before anything is held */
	if (!rig_runs(preset))
		skip();
	f = malloc(sizeof(*f));
	assert_non_null(f);
	make_family(f, preset, 41);
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++)
		family_run(preset, f, c % 2 ? 4 : 1, chunks[c]);
	free(f);
}

static void test_dense_exact(void **state)
{
	(void)state;
	reuse_exact("tiny-dense");
}

static void test_moe_exact(void **state)
{
	(void)state;
	reuse_exact("tiny-moe");
}

/* Requests submitted together: the second, the same prompt as the first,
 * is held until the first's prompt ends and claims its checkpoint
 * (docs/adr/0059); the third, submitted after the first finished, claims
 * it too. */
static void test_concurrent(void **state)
{
	struct family *f = malloc(sizeof(*f));
	struct bench b;
	uint32_t out[MAXGEN], n, cached;
	uint64_t id0, id1, id2;

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 43);
	bench_open(&b, "tiny-dense", 64, 4, 4, 16);
	id0 = submit(&b, &f->q[0]);
	id1 = submit(&b, &f->q[1]);
	drain(&b);
	id2 = submit(&b, &f->q[2]);
	drain(&b);
	n = result(&b, id0, out, &cached);
	assert_int_equal(cached, 0);
	assert_memory_equal(out, f->want[0], n * sizeof(uint32_t));
	n = result(&b, id1, out, &cached);
	assert_int_equal(cached, 100);
	assert_memory_equal(out, f->want[1], n * sizeof(uint32_t));
	n = result(&b, id2, out, &cached);
	assert_int_equal(cached, 100);
	assert_memory_equal(out, f->want[2], n * sizeof(uint32_t));
	bench_close(&b);
	free(f);
}

/* ---- n choices (docs/adr/0059) ------------------------------------------ */

#define NCH 4u

/* n requests of one prompt submitted together, seeds seed + i (what the
 * supervisor submits for OpenAI's `n`): each the tokens of the same
 * request alone with its seed, and, where a checkpoint can be captured,
 * the prompt prefilled once (prefill_tokens), the others held and started
 * from its checkpoint (reused_tokens), their first tokens from its kept
 * logits. With no slots each prefills: the same tokens, n prefills. */
static void n_choices_in(const char *preset, uint32_t lanes, uint32_t chunk, uint32_t n_dev,
                         uint32_t n_host, bool grammar_free_greedy)
{
	struct rq *q = calloc(NCH, sizeof(*q));
	uint32_t want[NCH][MAXGEN], n_want[NCH], out[MAXGEN], n, cached;
	uint64_t id[NCH], pre;
	struct rng g = {77};
	struct eng_stats st;
	struct bench b;
	bool slots = n_dev || n_host;

	assert_non_null(q);
	q[0].n = 100;
	q[0].max_tokens = 10;
	fill(&g, q[0].prompt, q[0].n);
	for (uint32_t i = 0; i < NCH; i++) {
		if (i)
			q[i] = q[0];
		q[i].smp = grammar_free_greedy ? (struct smp_params){0.0f, 0, 1.0f, 0}
		                               : (struct smp_params){0.9f, 40, 0.95f, 1000 + i};
		n_want[i] = alone(preset, &q[i], want[i]);
	}
	/* the seeds make them differ (else the test proves little) */
	if (!grammar_free_greedy)
		assert_true(memcmp(want[0], want[1], n_want[0] * 4) ||
		            memcmp(want[1], want[2], n_want[1] * 4));
	bench_open_host(&b, preset, 64, n_dev, n_host, 300, lanes, chunk);
	eng_stats(b.e, &st);
	pre = st.prefill_tokens;
	for (uint32_t i = 0; i < NCH; i++)
		id[i] = submit(&b, &q[i]);
	drain(&b);
	for (uint32_t i = 0; i < NCH; i++) {
		n = result(&b, id[i], out, &cached);
		if (n != n_want[i] || memcmp(out, want[i], n * sizeof(uint32_t)))
			fail_msg("%s, %u lanes, chunk %u, %u+%u slots: choice %u differs from "
			         "its request alone",
			         preset, lanes, chunk, n_dev, n_host, i);
		assert_int_equal(cached, slots && i ? q[0].n : 0);
	}
	eng_stats(b.e, &st);
	if (slots) {
		assert_int_equal(st.prefill_tokens - pre, q[0].n); /* one prefill */
		assert_int_equal(st.reused_tokens, (NCH - 1) * q[0].n);
		assert_int_equal(st.reuse_hits, NCH - 1);
		assert_int_equal(b.log.captured, 1);
	} else {
		assert_int_equal(st.prefill_tokens - pre, NCH * q[0].n);
		assert_int_equal(st.reused_tokens, 0);
	}
	bench_close(&b);
	free(q);
}

/* The first of the n cancelled before it ran: the second prefills the
 * prompt, the others hold for it and claim its checkpoint; each the tokens
 * of itself alone. */
static void test_n_choices_first_cancelled(void **state)
{
	struct rq *q = calloc(NCH, sizeof(*q));
	uint32_t want[MAXGEN], out[MAXGEN], n, cached;
	uint64_t id[NCH];
	struct rng g = {78};
	struct eng_stats st;
	struct ig_errbuf eb;
	struct bench b;

	(void)state;
	assert_non_null(q);
	q[0].n = 90;
	q[0].max_tokens = 8;
	fill(&g, q[0].prompt, q[0].n);
	for (uint32_t i = 0; i < NCH; i++) {
		if (i)
			q[i] = q[0];
		q[i].smp = (struct smp_params){0.9f, 40, 0.95f, 500 + i};
	}
	bench_open(&b, "tiny-dense", 64, 2, 4, 16);
	for (uint32_t i = 0; i < NCH; i++)
		id[i] = submit(&b, &q[i]);
	assert_int_equal(eng_cancel(b.e, id[0], &eb), IG_E_OK);
	drain(&b);
	for (uint32_t i = 1; i < NCH; i++) {
		n = result(&b, id[i], out, &cached);
		assert_int_equal(alone("tiny-dense", &q[i], want), n);
		assert_memory_equal(out, want, n * sizeof(uint32_t));
		assert_int_equal(cached, i > 1 ? q[0].n : 0);
	}
	eng_stats(b.e, &st);
	assert_int_equal(st.prefill_tokens, q[0].n);
	assert_int_equal(st.reused_tokens, (NCH - 2) * q[0].n);
	bench_close(&b);
	free(q);
}

static void test_n_choices(void **state)
{
	(void)state;
	n_choices_in("tiny-dense", 4, 16, 2, 0, false);
	n_choices_in("tiny-dense", 1, 7, 2, 0, false);
	n_choices_in("tiny-dense", 4, 64, 0, 4, false); /* host slots: held until published */
	n_choices_in("tiny-dense", 4, 16, 0, 0, false); /* no slots: each prefills */
	n_choices_in("tiny-dense", 2, 16, 1, 0, true);
	if (rig_runs("tiny-moe"))
		n_choices_in("tiny-moe", 4, 16, 2, 0, false);
}

/* Two slots: an agent's checkpoint goes before an interactive one, then the
 * least recently used; a claim refreshes. */
static uint32_t one(struct bench *b, const struct rq *base, uint32_t extra)
{
	struct rq q = *base;
	uint32_t out[MAXGEN], cached;
	uint64_t id;

	q.prompt[q.n++] = extra;
	id = submit(b, &q);
	drain(b);
	result(b, id, out, &cached);
	return cached;
}

static void test_give_up_order(void **state)
{
	struct rq a = {0}, ag = {0}, c = {0};
	struct rng g = {7};
	struct bench b;

	(void)state;
	a.n = ag.n = c.n = 40;
	fill(&g, a.prompt, 40);
	fill(&g, ag.prompt, 40);
	fill(&g, c.prompt, 40);
	a.max_tokens = ag.max_tokens = c.max_tokens = 4;
	a.smp = ag.smp = c.smp = (struct smp_params){0.0f, 0, 1.0f, 0};
	ag.cls = SCHED_AGENT;
	bench_open(&b, "tiny-dense", 64, 2, 1, 64);
	submit(&b, &a); /* interactive, slot 0 */
	drain(&b);
	submit(&b, &ag); /* agent, slot 1 */
	drain(&b);
	submit(&b, &c); /* interactive: no free slot; the agent's goes */
	drain(&b);
	assert_int_equal(b.log.captured, 3);
	assert_int_equal(b.log.given_up, 1);
	assert_string_equal(b.log.last_why, "slot");
	/* the agent's is gone; its prompt's capture gives up the least
	 * recently used interactive one, a's */
	ag.cls = SCHED_INTERACTIVE;
	assert_int_equal(one(&b, &ag, 1), 0);
	assert_int_equal(b.log.given_up, 2);
	/* c's is there: claimed */
	assert_int_equal(one(&b, &c, 2), 40);
	/* a's is not */
	assert_int_equal(one(&b, &a, 3), 0);
	bench_close(&b);
}

/* A pool the checkpoints fill: a request that needs their pages has them
 * given up, and runs as it would alone. */
static void test_room(void **state)
{
	struct rq a = {0}, big = {0};
	struct rng g = {9};
	struct bench b;
	uint32_t want[MAXGEN], out[MAXGEN], n_want, n, cached;
	struct eng_stats st;
	uint64_t id;

	(void)state;
	a.n = 150; /* 3 pages with its output */
	fill(&g, a.prompt, 150);
	a.max_tokens = 8;
	big.n = 200;
	fill(&g, big.prompt, 200);
	big.max_tokens = 20; /* 4 pages: the whole pool */
	a.smp = big.smp = (struct smp_params){0.0f, 0, 1.0f, 0};
	n_want = alone("tiny-dense", &big, want);
	bench_open(&b, "tiny-dense", 4, 2, 1, 64);
	submit(&b, &a);
	drain(&b);
	eng_stats(b.e, &st);
	assert_int_equal(st.checkpoints, 1);
	assert_int_equal(b.r.kv.n_free, 1); /* the checkpoint holds 3 pages */
	id = submit(&b, &big);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(n, n_want);
	assert_memory_equal(out, want, n * sizeof(uint32_t));
	eng_stats(b.e, &st);
	assert_int_equal(st.reuse_given_up_room, 1);
	assert_string_equal(b.log.last_why, "room");
	/* its own capture found no free page for its partial last page: skipped */
	assert_int_equal(st.reuse_skips_page, 1);
	assert_int_equal(b.log.skipped, 1);
	assert_int_equal(st.checkpoints, 0);
	bench_close(&b);
}

/* The first in line lacks pages the only checkpoint holds, and a request
 * ranked below it counts on that checkpoint: it is given up all the same
 * (else each would wait for the other), and both run as they would alone. */
static void test_room_over_a_later_claim(void **state)
{
	struct rq a = {0}, big = {0}, later = {0};
	struct rng g = {13};
	struct bench b;
	uint32_t want_big[MAXGEN], want_later[MAXGEN], out[MAXGEN], n_big, n_later, n, cached;
	struct eng_stats st;
	uint64_t id_big, id_later;

	(void)state;
	a.n = 150;
	fill(&g, a.prompt, 150);
	a.max_tokens = 8;
	a.cls = SCHED_AGENT;
	big.n = 200;
	fill(&g, big.prompt, 200);
	big.max_tokens = 20; /* the whole pool */
	later = a;           /* begins with a's prompt: counts on its checkpoint */
	later.n = 160;
	fill(&g, later.prompt + 150, 10);
	a.smp = big.smp = later.smp = (struct smp_params){0.0f, 0, 1.0f, 0};
	n_big = alone("tiny-dense", &big, want_big);
	n_later = alone("tiny-dense", &later, want_later);
	bench_open(&b, "tiny-dense", 4, 2, 1, 64);
	submit(&b, &a);
	drain(&b);
	id_big = submit(&b, &big);     /* interactive: first in line */
	id_later = submit(&b, &later); /* agent: behind it, counting on a's */
	drain(&b);
	n = result(&b, id_big, out, &cached);
	assert_int_equal(n, n_big);
	assert_memory_equal(out, want_big, n * sizeof(uint32_t));
	n = result(&b, id_later, out, &cached);
	assert_int_equal(n, n_later);
	assert_memory_equal(out, want_later, n * sizeof(uint32_t));
	assert_int_equal(cached, 0); /* its checkpoint went for the room */
	eng_stats(b.e, &st);
	assert_int_equal(st.reuse_given_up_room, 1);
	assert_int_equal(st.reuse_misses_given_up, 1);
	bench_close(&b);
}

/* ---- host slots --------------------------------------------------------- */

/* The family from host slots alone, and from two device slots then host
 * ones: the same tokens as alone, the same prompt tokens reused. */
static void test_host_exact(void **state)
{
	struct family *f = malloc(sizeof(*f));

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 41);
	family_run_in("tiny-dense", f, 1, 7, 0, 8);
	family_run_in("tiny-dense", f, 4, 64, 2, 8);
	/* left out where the backend under test runs no MoE */
	if (rig_runs("tiny-moe")) {
		make_family(f, "tiny-moe", 47);
		family_run_in("tiny-moe", f, 4, 64, 0, 8);
	}
	free(f);
}

/* The held host slot of checkpoint `nth` in the daemon's arena, as the
 * engine's client maps it. */
static unsigned char *held_image(struct bench *b)
{
	struct kvc_arena a = kvc_arena(b->kc);
	struct arena_slot_info in;
	struct ig_errbuf eb;

	for (uint32_t i = 0; i < b->k.slots; i++)
		if (kvc_slot_now(b->kc, i, &in, &eb) == IG_E_OK && in.state == ARENA_SLOT_HELD)
			return (unsigned char *)a.base + in.offset;
	fail_msg("no held host slot");
	return NULL;
}

/* The daemon's held slots, counted through the engine's client's mapping. */
static uint32_t held_slots(struct bench *b)
{
	struct arena_slot_info in;
	struct ig_errbuf eb;
	uint32_t n = 0;

	for (uint32_t i = 0; i < b->k.slots; i++)
		n += kvc_slot_now(b->kc, i, &in, &eb) == IG_E_OK && in.state == ARENA_SLOT_HELD;
	return n;
}

/* Host slots outlive a worker. A worker of another model (file, format or
 * tokenizer: another reuse_ns) never takes the slot an earlier one left for
 * the same tokens; a worker of the same model adopts it (the same image,
 * checked by its checksum) and its requests claim it. */
static void test_host_key_names_the_model(void **state)
{
	struct family *f = malloc(sizeof(*f));
	uint32_t out[MAXGEN], n, cached;
	struct eng_stats st;
	struct bench b;
	uint64_t id;

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 67);
	bench_open_host(&b, "tiny-dense", 64, 0, 4, 300, 1, 64);
	submit(&b, &f->q[0]);
	drain(&b);
	assert_int_equal(held_slots(&b), 1);
	/* another model: its own slot for the same tokens */
	bench_reengine(&b, 0x7654321);
	submit(&b, &f->q[0]);
	drain(&b);
	assert_int_equal(held_slots(&b), 2);
	assert_int_equal(b.log.host_captured, 1);
	/* the first model again: the slot it left is adopted, none taken */
	bench_reengine(&b, 0x1234567);
	submit(&b, &f->q[0]);
	drain(&b);
	assert_int_equal(held_slots(&b), 2);
	assert_int_equal(b.log.host_captured, 1);
	id = submit(&b, &f->q[2]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 100);
	assert_memory_equal(out, f->want[2], n * sizeof(uint32_t));
	eng_stats(b.e, &st);
	assert_int_equal(st.reused_host_tokens, 100);
	bench_close(&b);
	free(f);
}

/* A byte of a held image changed: the claim finds it out, gives the
 * checkpoint up, and the request runs its whole prompt, as alone. */
static void test_host_damaged(void **state)
{
	struct family *f = malloc(sizeof(*f));
	uint32_t out[MAXGEN], n, cached;
	struct eng_stats st;
	struct bench b;
	unsigned char *img;
	uint64_t id;

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 53);
	bench_open_host(&b, "tiny-dense", 64, 0, 2, 300, 1, 64);
	id = submit(&b, &f->q[0]);
	drain(&b);
	eng_stats(b.e, &st);
	assert_int_equal(st.host_checkpoints, 1);
	img = held_image(&b);
	img[b.r.d.state_bytes / 2] ^= 0x40;
	id = submit(&b, &f->q[2]); /* would claim q0's 100 tokens */
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 0);
	assert_int_equal(n, f->n_want[2]);
	assert_memory_equal(out, f->want[2], n * sizeof(uint32_t));
	eng_stats(b.e, &st);
	assert_int_equal(st.reuse_host_claim_fails, 1);
	assert_int_equal(st.reuse_given_up_tier, 1);
	assert_int_equal(st.reuse_misses_given_up, 1);
	assert_int_equal(st.reuse_hits, 0);
	/* the damaged slot was freed (kv_slot_drop), not kept to fail again:
	 * only q2's own is held */
	assert_int_equal(held_slots(&b), 1);
	/* q2's own prompt was captured meanwhile: its extension claims it */
	id = submit(&b, &f->q[3]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 150);
	assert_memory_equal(out, f->want[3], n * sizeof(uint32_t));
	bench_close(&b);
	free(f);
}

/* kill -9 of the kvstore daemon with host slots held: restarted on the
 * same arena, it keeps them, and they are claimed as before; captures go
 * on. */
static void test_host_daemon_killed(void **state)
{
	struct family *f = malloc(sizeof(*f));
	uint32_t out[MAXGEN], n, cached;
	struct eng_stats st;
	struct bench b;
	uint64_t id;

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 59);
	bench_open_host(&b, "tiny-dense", 64, 0, 4, 300, 1, 64);
	submit(&b, &f->q[0]);
	drain(&b);
	submit(&b, &f->q[5]);
	drain(&b);
	eng_stats(b.e, &st);
	assert_int_equal(st.host_checkpoints, 2);
	daemon_stop(&b.k, SIGKILL);
	daemon_start(&b.k);
	daemon_configure(&b.k);
	id = submit(&b, &f->q[2]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 100);
	assert_memory_equal(out, f->want[2], n * sizeof(uint32_t));
	id = submit(&b, &f->q[6]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 128);
	assert_memory_equal(out, f->want[6], n * sizeof(uint32_t));
	/* captured after the restart (q2's prompt), and claimed */
	id = submit(&b, &f->q[3]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 150);
	assert_memory_equal(out, f->want[3], n * sizeof(uint32_t));
	eng_stats(b.e, &st);
	assert_int_equal(st.reuse_given_up_tier, 0);
	assert_int_equal(st.reused_host_tokens, 100 + 128 + 150);
	bench_close(&b);
	free(f);
}

/* Two host slots hold an interactive checkpoint (a) and an agent's (ag); a
 * third capture gives one up. Within the TTL the agent's goes; with a's
 * idle past it, a ranks as an agent's too and, the least recently used,
 * goes instead. */
static void ttl_case(uint64_t ttl_s, bool idle)
{
	struct rq a = {0}, ag = {0}, c = {0};
	struct rng g = {61};
	struct bench b;

	a.n = ag.n = c.n = 40;
	fill(&g, a.prompt, 40);
	fill(&g, ag.prompt, 40);
	fill(&g, c.prompt, 40);
	a.max_tokens = ag.max_tokens = c.max_tokens = 4;
	a.smp = ag.smp = c.smp = (struct smp_params){0.0f, 0, 1.0f, 0};
	ag.cls = SCHED_AGENT;
	bench_open_host(&b, "tiny-dense", 64, 0, 2, ttl_s, 1, 64);
	submit(&b, &a);
	drain(&b);
	submit(&b, &ag);
	drain(&b);
	if (idle)
		usleep((useconds_t)(ttl_s * 1000000u + 300000u));
	submit(&b, &c);
	drain(&b);
	assert_int_equal(b.log.host_captured, 3);
	assert_int_equal(b.log.given_up, 1);
	ag.cls = SCHED_INTERACTIVE;
	if (idle) {
		assert_int_equal(one(&b, &ag, 1), 40); /* the agent's is there */
		assert_int_equal(one(&b, &a, 2), 0);   /* a's went */
	} else {
		assert_int_equal(one(&b, &a, 2), 40);
		assert_int_equal(one(&b, &ag, 1), 0);
	}
	bench_close(&b);
}

static void test_host_ttl(void **state)
{
	(void)state;
	ttl_case(300, false);
	ttl_case(1, true);
}

/* A capture its writer never published (a worker killed between capture
 * and publish) holds its slot, and its key, writing: a capture of the same
 * tokens is skipped meanwhile (the request runs whole, as alone), and once
 * the daemon takes the stale slot back (IGNIS_TEST_SLOT_WRITE_STALE_S: 1 s
 * here, 120 s by default) the same prompt is captured and claimed. */
static void test_host_stale_capture(void **state)
{
	struct family *f = malloc(sizeof(*f));
	uint32_t out[MAXGEN], n, cached;
	struct msg q = {.type = MSG_KV_SLOT_CAPTURE};
	struct ig_errbuf eb = {0};
	struct eng_stats st;
	struct bench b;
	struct tp_rx rx;
	nng_socket sk;
	uint64_t id, key;

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 71);
	setenv("IGNIS_TEST_SLOT_WRITE_STALE_S", "1", 1);
	bench_open_host(&b, "tiny-dense", 64, 0, 2, 300, 1, 64);
	unsetenv("IGNIS_TEST_SLOT_WRITE_STALE_S");
	/* a writer that dies after kv_slot_capture: q0's key, never published */
	key = XXH3_64bits_withSeed(f->q[0].prompt, (size_t)f->q[0].n * 4, b.cfg.reuse_ns);
	q.u.kv_slot_capture = (struct msg_kv_slot_capture){.key = key ? key : 1,
	                                                   .model_id = b.cfg.reuse_ns,
	                                                   .kind = msg_str_of("checkpoint"),
	                                                   .class = msg_str_of("interactive"),
	                                                   .tokens = f->q[0].n,
	                                                   .image_bytes = b.r.d.state_bytes};
	assert_int_equal(tp_dial(&sk, b.k.dir, "kvstore", 10000, &eb), IG_E_OK);
	if (tp_call(sk, &q, &rx, &eb))
		fail_msg("kv_slot_capture: %s", eb.msg);
	tp_rx_release(&rx);
	nng_close(sk);
	submit(&b, &f->q[0]);
	drain(&b);
	eng_stats(b.e, &st);
	assert_int_equal(st.host_checkpoints, 0);
	assert_int_equal(st.reuse_skips_host_refused, 1);
	sleep(2);
	submit(&b, &f->q[0]); /* taken back now: captured */
	drain(&b);
	eng_stats(b.e, &st);
	assert_int_equal(st.host_checkpoints, 1);
	id = submit(&b, &f->q[2]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 100);
	assert_memory_equal(out, f->want[2], n * sizeof(uint32_t));
	bench_close(&b);
	free(f);
}

/* ---- --reuse-prompt off with slots named -------------------------------- */

/* The slots hold shared prefixes only (docs/adr/0037, "Reuse off with slots
 * named"): the family's requests in this order, each with the prompt
 * tokens it takes from a slot, and the same tokens as alone. No prompt's
 * end is retained, so a repeat or an extension of a prompt takes only the
 * prefix it shares with another prompt, never the prompt's own end. */
static const struct off_step {
	uint32_t q, cached;
} off_steps[] = {
    {0, 0},  /* a prompt: its end not retained, its tokens remembered */
    {0, 0},  /* the same again: no checkpoint of its end to claim */
    {4, 0},  /* parts from 0 at token 80: the 80 retained as a prefix on its way */
    {7, 80}, /* parts from 0 there too: claims the prefix */
    {7, 80}, /* the same again: the prefix, not its own end */
    {1, 80}, /* the first prompt, sampled: the prefix it begins with */
    {2, 80}, /* an extension of the first: the prefix, not the first's end */
    {3, 80}, /* an extension of that: the same */
    {8, 80}, /* the 80 alone: the prefix, its first token from the prefix's logits */
    {5, 0},  /* two pages, shared with no other prompt */
    {6, 0},  /* its extension: its end was not retained */
};

static void off_run(const char *preset, const struct family *f, uint32_t n_dev, uint32_t n_host,
                    uint32_t lanes, uint32_t chunk)
{
	uint32_t out[MAXGEN], n, cached, reused = 0, prefixes = n_dev + n_host ? 1 : 0;
	struct eng_stats st;
	struct bench b;

	bench_open_reuse(&b, preset, 64, n_dev, n_host, 300, lanes, chunk, true);
	for (size_t k = 0; k < sizeof(off_steps) / sizeof(off_steps[0]); k++) {
		const struct off_step *o = &off_steps[k];
		uint64_t id = submit(&b, &f->q[o->q]);

		drain(&b);
		n = result(&b, id, out, &cached);
		if (n != f->n_want[o->q] || memcmp(out, f->want[o->q], n * sizeof(uint32_t)))
			fail_msg("%s, reuse off, %u device and %u host slots, %u lanes, chunk %u: "
			         "step %zu (request %u, %u tokens from a slot) differs from itself "
			         "alone",
			         preset, n_dev, n_host, lanes, chunk, k, o->q, cached);
		if (cached != (prefixes ? o->cached : 0))
			fail_msg("%s, reuse off, %u device and %u host slots: step %zu (request "
			         "%u) took %u tokens from a slot; want %u",
			         preset, n_dev, n_host, k, o->q, cached, prefixes ? o->cached : 0);
		reused += cached;
	}
	eng_stats(b.e, &st);
	/* one capture, the prefix where 4 parted from 0; no prompt's end */
	assert_int_equal(b.log.captured, prefixes);
	assert_int_equal(b.log.prefix_captured, prefixes);
	assert_int_equal(st.reuse_captures, prefixes);
	assert_int_equal(st.reuse_prefixes, prefixes);
	assert_int_equal(st.reuse_skips_slot + st.reuse_skips_host_busy, 0);
	assert_int_equal(st.reused_tokens, reused);
	assert_int_equal(st.reused_prefix_tokens, reused);
	assert_int_equal(st.checkpoints + st.host_checkpoints, prefixes);
	if (n_host && !n_dev) {
		assert_int_equal(b.log.host_captured, 1);
		assert_int_equal(st.reused_host_prefix_tokens, reused);
	}
	bench_close(&b);
}

static void test_off_prefixes_only(void **state)
{
	struct family *f = malloc(sizeof(*f));

	(void)state;
	assert_non_null(f);
	make_family(f, "tiny-dense", 41);
	off_run("tiny-dense", f, 2, 0, 1, 7);
	off_run("tiny-dense", f, 2, 0, 4, 64);
	off_run("tiny-dense", f, 0, 2, 1, 64); /* host slots, a real daemon */
	off_run("tiny-dense", f, 2, 2, 4, 7);
	off_run("tiny-dense", f, 0, 0, 1, 64); /* no slots: nothing reused */
	/* left out where the backend under test runs no MoE */
	if (rig_runs("tiny-moe")) {
		make_family(f, "tiny-moe", 47);
		off_run("tiny-moe", f, 2, 0, 4, 64);
		off_run("tiny-moe", f, 0, 2, 1, 7);
	}
	free(f);
}

/* As many prompts' ends are remembered as there are slots, the least
 * recently ended forgotten: with one slot, a prompt that parts from one
 * ended two prompts ago retains nothing; one that parts from the last
 * (at token 90) retains the prefix there, and the next claims it. */
static void test_off_remembers_as_many_as_slots(void **state)
{
	struct rq q[5];
	struct rng g = {83};
	uint32_t out[MAXGEN], want[MAXGEN], n, cached;
	struct bench b;
	uint64_t id;

	(void)state;
	memset(q, 0, sizeof(q));
	for (int i = 0; i < 2; i++) {
		q[i].n = 100;
		fill(&g, q[i].prompt, 100);
	}
	q[2] = q[0]; /* parts from 0 at 80 */
	fill(&g, q[2].prompt + 80, 20);
	for (int i = 3; i < 5; i++) { /* part from 2 at 90 */
		q[i] = q[2];
		fill(&g, q[i].prompt + 90, 10);
	}
	for (int i = 0; i < 5; i++) {
		q[i].max_tokens = 6;
		q[i].smp = (struct smp_params){0.0f, 0, 1.0f, 0};
	}
	bench_open_reuse(&b, "tiny-dense", 64, 1, 0, 0, 1, 64, true);
	for (int i = 0; i < 4; i++) {
		id = submit(&b, &q[i]);
		drain(&b);
		result(&b, id, out, &cached);
		assert_int_equal(cached, 0);
		assert_int_equal(b.log.captured, i == 3 ? 1 : 0);
	}
	id = submit(&b, &q[4]);
	drain(&b);
	n = result(&b, id, out, &cached);
	assert_int_equal(cached, 90);
	assert_int_equal(alone("tiny-dense", &q[4], want), n);
	assert_memory_equal(out, want, n * sizeof(uint32_t));
	assert_int_equal(b.log.prefix_captured, 1);
	bench_close(&b);
}

/* A model with no fixed-size state (every layer full attention: Qwen3's
 * dense layout, llama.cpp's qwen3): a checkpoint is its pages and its
 * logits only, nothing for a slot of either tier to hold. The host slots
 * the supervisor gives by default (the only slots it gives by default)
 * retain its prompts all the same: the same prompt again starts from the
 * checkpoint, with the tokens it had alone. (They used to retain nothing:
 * a host slot holds a state, and this model has none.) */
static void test_stateless_host_slots(void **state)
{
	struct rq q = {.n = 100, .max_tokens = 12, .cls = SCHED_INTERACTIVE};
	uint32_t out[MAXGEN], want[MAXGEN], n, cached;
	enum mdesc_arch was = rig_arch;
	struct rng g = {43};
	struct bench b;
	uint64_t id;

	(void)state;
	rig_arch = MDESC_ARCH_QWEN3;
	fill(&g, q.prompt, q.n);
	q.smp = (struct smp_params){0.0f, 0, 1.0f, 0};
	n = alone("tiny-dense", &q, want);
	assert_int_equal(n, q.max_tokens);
	bench_open_host(&b, "tiny-dense", 64, 0, 8, 300, 1, 64);
	assert_int_equal(b.r.d.state_bytes, 0);
	for (uint32_t i = 0; i < 3; i++) {
		id = submit(&b, &q);
		drain(&b);
		assert_int_equal(result(&b, id, out, &cached), n);
		assert_memory_equal(out, want, n * sizeof(uint32_t));
		assert_int_equal(cached, i ? q.n : 0);
	}
	assert_int_equal(b.log.captured, 1);
	assert_int_equal(b.log.claimed, 2);
	assert_int_equal(b.log.skipped, 0);
	bench_close(&b);
	rig_arch = was;
}

/* A test's name as the argument: that test alone. --kv-format NAME: the pool
 * and the engines in that format; fp8 and compact run fmt_tests unless a
 * name picks a test. */
int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dense_exact),
	    cmocka_unit_test(test_moe_exact),
	    cmocka_unit_test(test_concurrent),
	    cmocka_unit_test(test_give_up_order),
	    cmocka_unit_test(test_room),
	    cmocka_unit_test(test_room_over_a_later_claim),
	    cmocka_unit_test(test_host_exact),
	    cmocka_unit_test(test_host_damaged),
	    cmocka_unit_test(test_host_daemon_killed),
	    cmocka_unit_test(test_host_ttl),
	    cmocka_unit_test(test_host_key_names_the_model),
	    cmocka_unit_test(test_host_stale_capture),
	    cmocka_unit_test(test_off_prefixes_only),
	    cmocka_unit_test(test_off_remembers_as_many_as_slots),
	    cmocka_unit_test(test_stateless_host_slots),
	    cmocka_unit_test(test_n_choices),
	    cmocka_unit_test(test_n_choices_first_cancelled),
	};
	/* What fp8 and compact run (--kv-format: engrig.h's rig_args; the rows
	 * reuse-fp8, reuse-compact), issue 28: the family from device
	 * checkpoints at four chunkings and lane counts, checkpoints given up
	 * for room, host checkpoints kept through a kill -9 of the daemon and
	 * claimed; each request with its tokens alone in the same format. */
	const struct CMUnitTest fmt_tests[] = {
	    cmocka_unit_test(test_dense_exact),
	    cmocka_unit_test(test_room),
	    cmocka_unit_test(test_host_daemon_killed),
	};
	const char *name;
	int rc;

	if ((rc = rig_args(argc, argv, &name)))
		return rc;
	return rig_run(name, tests, sizeof(tests) / sizeof(tests[0]), fmt_tests,
	               sizeof(fmt_tests) / sizeof(fmt_tests[0]));
}
