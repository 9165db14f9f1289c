/*
 * test_vplan.c - the VRAM plan against the reference's own figures, which
 * docs/design.md, sections 2 and 3, holds as ours.
 *
 * Rows are knob flags as "name=value" words; every row plans with
 * --profile none --backend cuda unless it says otherwise. The "32 GB card"
 * reports 33,140,203,520 bytes free: with the default 1536M headroom that is
 * the reference's budget of 31,529,590,784 bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/knobs.h"
#include "common/vplan.h"

#define CARD32 "33140203520"
#define FN32   "model=flash-next device-free-bytes=" CARD32
#define B27_32 "model=27b device-free-bytes=" CARD32

/* What every plan_of starts from: the reference's figures are those of its
 * format, compact (a test of another names it: the last value of a knob
 * wins; test_default_format empties it). */
static const char *plan_base = "profile=none backend=cuda model-kv-format=compact";

/* Plan from "name=value" words. Returns the rc; the plan and the error text
 * land in *p and *eb. */
static int plan_of(const char *words, struct vplan *p, struct ig_errbuf *eb)
{
	static char buf[1024];
	struct knob_input in;
	struct knobs k;
	struct vplan_device dev = {0};
	char *save = NULL;
	int rc;

	memset(&in, 0, sizeof(in));
	memset(p, 0, sizeof(*p));
	snprintf(buf, sizeof(buf), "%s %s", plan_base, words);
	for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(w, '=');
		int id;

		assert_non_null(eq);
		*eq = '\0';
		for (id = 0; id < KNOB__COUNT; id++)
			if (!strcmp(knob_defs[id].name, w))
				break;
		if (id == KNOB__COUNT)
			fail_msg("no knob '%s'", w);
		in.flag[id].text = eq + 1;
		snprintf(in.flag[id].where, sizeof(in.flag[id].where), "--%s", w);
	}
	rc = knob_resolve(&in, &k, eb);
	if (rc)
		return rc;
	dev.cuda = k.v[KNOB_BACKEND].u == 2;
	dev.free_bytes = k.v[KNOB_DEVICE_FREE_BYTES].u;
	dev.free_named = true;
	snprintf(dev.source, sizeof(dev.source), "%s", k.v[KNOB_DEVICE_FREE_BYTES].where);
	rc = vplan_compute(&k, &dev, p);
	if (rc)
		snprintf(eb->msg, sizeof(eb->msg), "%s", p->refusal);
	return rc;
}

static struct vplan ok_plan(const char *words)
{
	struct ig_errbuf eb = {0};
	struct vplan p;
	int rc = plan_of(words, &p, &eb);

	if (rc)
		fail_msg("'%s' refused: %s", words, eb.msg);
	return p;
}

/* The default format is fp8 (docs/adr/0046: compact failed the quality
 * bar); the rtx5090 profile, the reference's defaults, keeps compact, whose
 * bytes its context needs. fp8's figures on the 32 GB card, by hand:
 * 16 layers x 4 heads x 2 roles x (256 + 4) B = 33,280 B a token, 2,129,920
 * a page; (31,529,590,784 - 19,799,212,032 lines) / 2,129,920 = 5,507 pages
 * (no hq_residual_window line: the window is compact's). Flash-Next keeps
 * its 6,144 pages (the policy counts pages), at 798,720 B, and the expert
 * cache gives up the difference. */
static void test_default_format(void **state)
{
	const char *saved = plan_base;
	struct vplan p, q;

	(void)state;
	/* every plan before any check: a failed check must not leave the base
	 * changed for the tests after this one */
	plan_base = "profile=none backend=cuda";
	p = ok_plan(B27_32);
	q = ok_plan(FN32);
	plan_base = saved;
	assert_int_equal(p.kv_format, MDESC_KV_FP8);
	assert_int_equal(p.kv_bytes_per_token, 33280);
	assert_int_equal(p.page_bytes, 2129920);
	assert_int_equal(p.lines_total, 19799212032ull);
	assert_int_equal(p.pool_pages, 5507);
	assert_int_equal(p.line[VPLAN_HQ_RESIDUAL_WINDOW], 0);
	assert_int_equal(q.kv_format, MDESC_KV_FP8);
	assert_int_equal(q.pool_pages, 6144);
	assert_int_equal(q.page_bytes, 798720);
	assert_int_equal(q.expert_cache_bytes, 18369806336ull);
	/* the reference's profile: compact, and its 786,432-token context fits */
	plan_base = "profile=rtx5090";
	p = ok_plan("model=27b device-free-bytes=" CARD32);
	plan_base = saved;
	assert_int_equal(p.kv_format, MDESC_KV_COMPACT);
	assert_int_equal(p.kv_bytes_per_token, 9216);
	assert_int_equal(p.context, 786432);
	assert_false(p.context_adapted);
	/* which fp8 cannot hold (one context alone would be 26 GB): the load
	 * adapts its context to the pool instead */
	p = ok_plan("profile=rtx5090 model=27b device-free-bytes=" CARD32 " model-kv-format=fp8");
	assert_true(p.context_adapted);
	assert_true(p.context < 786432);
}

/* ---- the table ----------------------------------------------------------- */

struct row {
	const char *name;
	const char *words;
	int rc;
	int policy;          /* 0: not checked */
	uint64_t pool_pages; /* 0: not checked */
	uint64_t budget;     /* 0: not checked */
	unsigned warnings;
	const char *say[4]; /* words the refusal must contain */
};

static const struct row rows[] = {
    {"a named pool larger than the budget refuses (the 27B)",
     B27_32 " vram-kv-pool-bytes=40G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"more than the whole budget"}},
    {"a pool in tokens near 2^64 refuses, never wraps",
     B27_32 " vram-kv-pool-bytes=16384Ttok",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"more than the whole budget"}},
    {"a named pool that leaves the 27B's lines no room refuses",
     B27_32 " vram-kv-pool-bytes=1300000tok",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"--vram-kv-pool-bytes (from --vram-kv-pool-bytes)", "short by"}},
    {"pinning more than every expert on a resident load refuses",
     "model=flash-next device-free-bytes=200G vram-pinned-expert-bytes=100G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"the most it can pin is 37795446784"}},
    {"Flash-Next below its minimum, oversubscribed: the floor still refuses",
     "model=flash-next device-free-bytes=16G vram-budget-bytes=6G vram-allow-oversubscription=on",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"below its floor", "--vram-allow-expert-cache-below-floor"}},
    {"Flash-Next below its minimum, oversubscribed and allowed below the floor: two warnings",
     "model=flash-next device-free-bytes=16G vram-budget-bytes=6G vram-allow-oversubscription=on "
     "vram-allow-expert-cache-below-floor=on",
     IG_E_OK,
     VPLAN_OFFLOADED,
     2056,
     0,
     VPLAN_WARN_BELOW_MINIMUM | VPLAN_WARN_CACHE_BELOW_FLOOR,
     {0}},
    {"above free and below the minimum: two warnings",
     "model=27b device-free-bytes=8G vram-budget-bytes=10G vram-allow-oversubscription=on",
     IG_E_OK,
     0,
     0,
     0,
     VPLAN_WARN_OVERSUBSCRIBED | VPLAN_WARN_BELOW_MINIMUM,
     {0}},
    {"an explicit budget's refusals name the budget, not the headroom",
     "model=flash-next device-free-bytes=64G vram-budget-bytes=20G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"--vram-budget-bytes"}},
    /* lines 6,712,983,552 + ring and tables 1,577,852,928 + 6,144 pages x
     * 270,336 = 1,660,944,384 + the class minimum 556,228,608 =
     * 10,508,009,472: 508,009,472 over the budget (the residual window's
     * 35,651,584 B of lines more than the 472,357,888 before it) */
    {"the policy's pool over the class minimum, explicit budget: a larger one lifts it",
     "model=flash-next device-free-bytes=64G vram-budget-bytes=10000000000",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"the 6144-page pool leaves", "a smaller --vram-kv-pool-bytes",
      "or a larger --vram-budget-bytes", "short by 508009472 bytes"}},
    {"the 27B's adaptation refusal names the spare",
     "profile=rtx5090 model=27b device-free-bytes=20G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"--vram-adapt-spare-tokens", "short by"}},
    {"derived budget = free - headroom (Flash-Next, 32 GB)",
     FN32,
     IG_E_OK,
     VPLAN_OFFLOADED,
     0,
     31529590784ull,
     0,
     {0}},
    {"Flash-Next 32 GB, 1 lane: 4,104 pages (4,096 + 8 slots)",
     FN32 " model-max-context=262144 spec-decode-lanes=1",
     IG_E_OK,
     VPLAN_OFFLOADED,
     4104,
     0,
     0,
     {0}},
    {"Flash-Next 32 GB, 2 lanes: 8,192 pages",
     FN32 " model-max-context=262144 spec-decode-lanes=2",
     IG_E_OK,
     VPLAN_OFFLOADED,
     8192,
     0,
     0,
     {0}},
    {"Flash-Next 32 GB, 3 lanes: 8,192 pages",
     FN32 " model-max-context=262144",
     IG_E_OK,
     VPLAN_OFFLOADED,
     8192,
     0,
     0,
     {0}},
    {"Flash-Next 32 GB, 8 lanes: 8,192 pages",
     FN32 " model-max-context=262144 spec-decode-lanes=8",
     IG_E_OK,
     VPLAN_OFFLOADED,
     8192,
     0,
     0,
     {0}},
    {"one lane keeps a one-context pool (131,072: 2,048 + 8)",
     FN32 " spec-decode-lanes=1",
     IG_E_OK,
     VPLAN_OFFLOADED,
     2056,
     0,
     0,
     {0}},
    {"--model-max-context 524288 starts (floor 8,200 pages with 8 slots)",
     FN32 " model-max-context=524288",
     IG_E_OK,
     VPLAN_OFFLOADED,
     8200,
     0,
     VPLAN_WARN_CACHE_BELOW_FLOOR * 0,
     {0}},
    {"explicit budget above free refuses, naming both numbers and the flag",
     FN32 " vram-budget-bytes=40G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"42949672960", CARD32, "--vram-budget-bytes", "--vram-allow-oversubscription"}},
    {"oversubscription turns that into one warning",
     FN32 " vram-budget-bytes=40G vram-allow-oversubscription=on",
     IG_E_OK,
     0,
     0,
     42949672960ull,
     VPLAN_WARN_OVERSUBSCRIBED,
     {0}},
    {"a headroom larger than free refuses, never underflows",
     FN32 " vram-headroom-bytes=40G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"--vram-headroom-bytes", CARD32}},
    {"a named pool below the floor refuses (Flash-Next, one lane)",
     FN32 " model-max-context=262144 spec-decode-lanes=1 vram-kv-pool-bytes=262592tok",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"4224 bytes per token", "4104 pages", "4103 pages"}},
    {"a named pool below the floor refuses (the 27B)",
     B27_32 " vram-kv-pool-bytes=1G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"9216 bytes per token", "2064 pages"}},
    {"512Ktok is 8,192 pages on Flash-Next",
     FN32 " vram-kv-pool-bytes=512Ktok",
     IG_E_OK,
     VPLAN_OFFLOADED,
     8192,
     0,
     0,
     {0}},
    {"512Ktok is 8,192 pages on the 27B",
     B27_32 " vram-kv-pool-bytes=512Ktok",
     IG_E_OK,
     VPLAN_RESIDENT,
     8192,
     0,
     0,
     {0}},
    {"1M tokens = 16,384 pages (the 27B, resident)",
     B27_32 " vram-kv-pool-bytes=1Mtok",
     IG_E_OK,
     VPLAN_RESIDENT,
     16384,
     0,
     0,
     {0}},
    {"bytes buy whole pages",
     B27_32 " vram-kv-pool-bytes=2G",
     IG_E_OK,
     VPLAN_RESIDENT,
     2147483648ull / 589824,
     0,
     0,
     {0}},
    {"a 96,000,000,000-byte card: Flash-Next resident",
     "model=flash-next device-free-bytes=96000000000",
     IG_E_OK,
     VPLAN_RESIDENT,
     0,
     0,
     0,
     {0}},
    {"the expert cache below its floor refuses, naming the knobs",
     "model=flash-next device-free-bytes=20G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"floor", "--vram-kv-pool-bytes", "--model-prefill-chunk",
      "--vram-allow-expert-cache-below-floor"}},
    {"--vram-allow-expert-cache-below-floor starts with a warning",
     "model=flash-next device-free-bytes=20G vram-allow-expert-cache-below-floor=on",
     IG_E_OK,
     VPLAN_OFFLOADED,
     0,
     0,
     VPLAN_WARN_CACHE_BELOW_FLOOR,
     {0}},
    {"a cache below the class minimum refuses whatever the flag says",
     "model=flash-next device-free-bytes=10G vram-allow-expert-cache-below-floor=on",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"whatever", "one decode step's experts", "--spec-decode-lanes"}},
    {"pinning more than the widest step leaves refuses, naming the most",
     FN32 " vram-pinned-expert-bytes=30G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"the most it can pin is"}},
    {"pinning within the cache starts",
     FN32 " vram-pinned-expert-bytes=2G",
     IG_E_OK,
     VPLAN_OFFLOADED,
     0,
     0,
     0,
     {0}},
    {"the 27B below its minimum refuses with the bytes and the knobs",
     "model=27b device-free-bytes=20G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"short by", "--vram-headroom-bytes", "--model-max-context"}},
    {"below the minimum with an explicit budget and oversubscription: a warning",
     "model=27b device-free-bytes=20G vram-budget-bytes=19G vram-allow-oversubscription=on",
     IG_E_OK,
     VPLAN_RESIDENT,
     0,
     0,
     VPLAN_WARN_BELOW_MINIMUM,
     {0}},
    {"the 27B names no lanes knob in a refusal",
     "model=27b device-free-bytes=20G",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"--reuse-retained-host"}},
    {"tiny-moe on the cpu profile's device: resident",
     "profile=cpu backend=cpu model=tiny-moe",
     IG_E_OK,
     VPLAN_RESIDENT,
     0,
     0,
     0,
     {0}},
    {"tiny-moe on a 28 MiB device: offloaded",
     "profile=cpu backend=cpu model=tiny-moe device-free-bytes=28M",
     IG_E_OK,
     VPLAN_OFFLOADED,
     2 * 32,
     0,
     0,
     {0}},
    /* Between tiny-moe's minimum and its floor. In compact its lines hold
     * the residual window, 2 lanes x (32 + 512) x 1,024 B (2 layers x 2 KV
     * heads x 2 x 64 x 2 B a token in bf16) = 1,114,112 B, where they held
     * 2 x 64 x 1,024 = 131,072: 983,040 B more (both whole 4 KiB granules),
     * which the 23,592,960-byte device these rows had no longer holds with
     * its minimum. 23,592,960 + 983,040 = 24,576,000 leaves the cache what
     * it had. */
    {"tiny-moe below its scaled floor refuses",
     "profile=cpu backend=cpu model=tiny-moe device-free-bytes=24576000",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"floor", "--vram-allow-expert-cache-below-floor"}},
    {"tiny-moe below its floor, allowed",
     "profile=cpu backend=cpu model=tiny-moe device-free-bytes=24576000 "
     "vram-allow-expert-cache-below-floor=on",
     IG_E_OK,
     VPLAN_OFFLOADED,
     0,
     0,
     VPLAN_WARN_CACHE_BELOW_FLOOR,
     {0}},
    {"tiny-moe below its class minimum refuses even when allowed",
     "profile=cpu backend=cpu model=tiny-moe device-free-bytes=20M "
     "vram-allow-expert-cache-below-floor=on",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"whatever"}},
    {"the embedded default (tiny-chat)",
     "profile=cpu backend=cpu",
     IG_E_OK,
     VPLAN_RESIDENT,
     0,
     0,
     0,
     {0}},
    /* the simulated device's size is the first knob a refusal names */
    {"tiny-dense below its minimum refuses",
     "profile=cpu backend=cpu device-free-bytes=12M",
     IG_E_PLAN_REFUSED,
     0,
     0,
     0,
     0,
     {"short by", "Turn: --device-free-bytes, --vram-headroom-bytes"}},
};

static void test_rows(void **state)
{
	int failures = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct ig_errbuf eb = {0};
		struct vplan p;
		int rc = plan_of(r->words, &p, &eb);
		char why[256] = "";

		if (rc != r->rc)
			snprintf(why, sizeof(why), "rc %s, want %s (%s)", ig_err_name(rc),
			         ig_err_name(r->rc), eb.msg);
		else if (r->policy && (int)p.policy != r->policy)
			snprintf(why, sizeof(why), "policy %d, want %d", p.policy, r->policy);
		else if (r->pool_pages && p.pool_pages != r->pool_pages)
			snprintf(why, sizeof(why), "pool %llu pages, want %llu",
			         (unsigned long long)p.pool_pages,
			         (unsigned long long)r->pool_pages);
		else if (r->budget && p.budget_bytes != r->budget)
			snprintf(why, sizeof(why), "budget %llu, want %llu",
			         (unsigned long long)p.budget_bytes, (unsigned long long)r->budget);
		else if (rc == IG_E_OK && p.warnings != r->warnings)
			snprintf(why, sizeof(why), "warnings %u, want %u", p.warnings, r->warnings);
		/* a refusal is read whole from the plan (it may be longer than
		 * an ig_errbuf), as the supervisor prints it */
		const char *msg = rc == IG_E_PLAN_REFUSED ? p.refusal : eb.msg;

		for (int w = 0; !why[0] && w < 4 && r->say[w]; w++)
			if (!strstr(msg, r->say[w]))
				snprintf(why, sizeof(why), "message lacks '%s': %s", r->say[w],
				         msg);
		if (why[0]) {
			printf("FAIL %s: %s\n", r->name, why);
			failures++;
		}
	}
	assert_int_equal(failures, 0);
}

/* ---- relations the reference states -------------------------------------- */

static void test_line_names_and_order(void **state)
{
	static const char *const want[] = {"weights",         "cuda_context",       "workspace",
	                                   "media_embedding", "sampling",           "decode_graph",
	                                   "verify_round",    "drafter_round",      "lane_state",
	                                   "retained_slots",  "hq_residual_window", "residual"};

	(void)state;
	assert_int_equal(VPLAN_NLINES, 12);
	for (int i = 0; i < VPLAN_NLINES; i++)
		assert_string_equal(vplan_line_names[i], want[i]);
}

static void test_model_figures(void **state)
{
	const struct mdesc *b27 = mdesc_find("27b"), *fn = mdesc_find("flash-next");

	(void)state;
	/* docs/design.md, section 3: derived from the shapes */
	assert_int_equal(mdesc_kv_bytes_per_token(b27, MDESC_KV_BF16), 65536);
	assert_int_equal(mdesc_kv_bytes_per_token(fn, MDESC_KV_BF16), 24576);
	assert_int_equal(mdesc_kv_bytes_per_token(b27, MDESC_KV_COMPACT), 9216);
	assert_int_equal(mdesc_kv_bytes_per_token(fn, MDESC_KV_COMPACT), 4224);
	assert_int_equal(mdesc_page_bytes(b27, MDESC_KV_COMPACT), 589824);
	assert_int_equal(mdesc_page_bytes(fn, MDESC_KV_COMPACT), 270336);
	/* the staging ring and its pages (docs/design.md, section 2) */
	assert_int_equal(2 * fn->heaviest_layer_expert_bytes, 1574895616ull);
	assert_int_equal(2 * fn->heaviest_layer_expert_bytes / 270336, 5825);
	/* the smallest expert: gate_up and down at 2 bits */
	assert_int_equal(mdesc_min_expert_bytes(fn), 827392 + 417792);
	/* tiny-moe: its file's classes, one bf16 expert (docs/adr/0039) */
	assert_int_equal(mdesc_min_expert_bytes(mdesc_find("tiny-moe")), 65536 + 32768);
	/* the class minimum at 3 lanes: 3 x (10 + 16) = 78 slots */
	assert_int_equal(3 * (fn->top_k + fn->prefetch_width), 78);
}

/* The linear-attention state's size comes from one function (model.h): the
 * tiny models' derived images are the figures the plan always had, the
 * reference models keep the ones they carry, the layer counts agree with
 * the full layers, and a shape whose state passes 2^64 bytes is refused. */
static void test_lin_state(void **state)
{
	static const struct {
		const char *name;
		uint64_t s_floats, conv_floats;
		uint32_t layers;
		uint64_t image_bytes;
	} lin_rows[] = {
	    /* 4 v heads x 64 x 64; 3 taps x (2 x 2 x 64 + 4 x 64) */
	    {"tiny-dense", 16384, 1536, 3, 3ull * 17920 * 4 + 4096}, /* 219,136 */
	    {"tiny-moe", 16384, 1536, 6, 6ull * 17920 * 4 + 4096},   /* 434,176 */
	    {"27b", 48ull * 128 * 128, 3ull * (2 * 16 * 128 + 48 * 128), 48, 232532224},
	    {"flash-next", 32ull * 128 * 128, 3ull * (2 * 16 * 128 + 32 * 128), 36, 130014272},
	};
	struct mdesc_lin_state ls;
	struct mdesc big;

	(void)state;
	for (size_t i = 0; i < sizeof(lin_rows) / sizeof(lin_rows[0]); i++) {
		const struct mdesc *m = mdesc_find(lin_rows[i].name);

		assert_non_null(m);
		assert_true(mdesc_lin_state(m, &ls));
		assert_int_equal(ls.s_floats, lin_rows[i].s_floats);
		assert_int_equal(ls.conv_floats, lin_rows[i].conv_floats);
		assert_int_equal(ls.layer_floats, lin_rows[i].s_floats + lin_rows[i].conv_floats);
		assert_int_equal(ls.layers, lin_rows[i].layers);
		assert_int_equal(ls.layers, m->layers - m->full_layers);
		assert_int_equal(ls.floats, (uint64_t)ls.layers * ls.layer_floats);
		assert_int_equal(ls.bytes, ls.floats * 4u);
		assert_int_equal(ls.image_bytes, ls.bytes + MDESC_STATE_IMAGE_HEADER);
		assert_int_equal(mdesc_state_image_bytes(m), lin_rows[i].image_bytes);
	}
	/* the tiny models carry nothing: the image is the derived one */
	assert_int_equal(mdesc_find("tiny-dense")->state_image_bytes, 0);
	assert_true(mdesc_lin_state(mdesc_find("tiny-dense"), &ls));
	assert_int_equal(mdesc_state_image_bytes(mdesc_find("tiny-dense")), ls.image_bytes);
	big = *mdesc_find("tiny-dense");
	big.lin_v_heads = big.lin_dk = big.lin_dv = 1u << 24;
	assert_false(mdesc_lin_state(&big, &ls));
	assert_int_equal(ls.bytes, 0);
}

static void test_resident_pool_takes_the_rest_to_the_page(void **state)
{
	struct vplan p = ok_plan(B27_32);
	uint64_t rest = p.budget_bytes - p.lines_total;

	(void)state;
	assert_int_equal(p.policy, VPLAN_RESIDENT);
	assert_true(p.pool_pages * p.page_bytes <= rest);
	assert_true((p.pool_pages + 1) * p.page_bytes > rest); /* one more would not fit */
	assert_int_equal(p.total_bytes, p.lines_total + p.pool_bytes);
}

static void test_minimum_and_retained_slots(void **state)
{
	struct vplan p0 = ok_plan(B27_32 " reuse-retained-host=0");
	struct vplan p8 = ok_plan(B27_32 " reuse-retained-host=8");

	(void)state;
	/* 0 slots: exactly one context; 8 slots: 8 pages more */
	assert_int_equal(p0.minimum_bytes, p0.lines_total + 131072 / 64 * p0.page_bytes);
	assert_int_equal(p8.minimum_bytes - p0.minimum_bytes, 8 * p0.page_bytes);
}

static void test_minimum_refusal_is_exact(void **state)
{
	/* A named context does not adapt: the minimum decides. */
	struct vplan ok = ok_plan(B27_32 " model-max-context=131072"), p;
	struct ig_errbuf eb = {0};
	char words[256], want[64];

	(void)state;
	/* A budget one byte below the minimum: short by exactly one byte. */
	snprintf(words, sizeof(words), "%s model-max-context=131072 vram-budget-bytes=%llu", B27_32,
	         (unsigned long long)(ok.minimum_bytes - 1));
	assert_int_equal(plan_of(words, &p, &eb), IG_E_PLAN_REFUSED);
	assert_int_equal(p.shortfall_bytes, 1);
	snprintf(want, sizeof(want), "at least %llu bytes", (unsigned long long)ok.minimum_bytes);
	assert_non_null(strstr(eb.msg, want));
	/* Exactly the minimum starts, with the floor pool. */
	snprintf(words, sizeof(words), "%s model-max-context=131072 vram-budget-bytes=%llu", B27_32,
	         (unsigned long long)ok.minimum_bytes);
	p = ok_plan(words);
	assert_int_equal(p.pool_pages, p.floor_pages);
}

static void test_offloaded_cache_is_the_rest(void **state)
{
	struct vplan p = ok_plan(FN32 " model-max-context=262144");
	uint64_t rest = p.budget_bytes - p.lines_total - p.pool_bytes - p.residency_fixed_bytes;

	(void)state;
	/* the rest, in whole slot sets (one slot of every class) */
	assert_true(p.expert_cache_bytes <= rest);
	assert_true(rest - p.expert_cache_bytes < mdesc_class_set_bytes(p.model));
	assert_int_equal(p.expert_cache_bytes % mdesc_class_set_bytes(p.model), 0);
	assert_int_equal(p.residency_fixed_bytes, 1577852928ull);
	assert_int_equal(p.prefill_staging_bytes, 1574895616ull);
	assert_int_equal(p.total_bytes + p.unused_bytes, p.budget_bytes);
}

static void test_new_pool_gives_the_cache_1_033_gib(void **state)
{
	/* The old whole-context pool at 3 lanes: 3 x 4,096 + 8 = 12,296 pages. */
	struct vplan now = ok_plan(FN32 " model-max-context=262144");
	struct vplan old = ok_plan(FN32 " model-max-context=262144 vram-kv-pool-bytes=786944tok");

	(void)state;
	assert_int_equal(old.pool_pages, 12296);
	/* 4,104 pages more, to within one slot set (the cache is whole slot sets) */
	assert_true(now.expert_cache_bytes - old.expert_cache_bytes +
	                mdesc_class_set_bytes(now.model) >
	            4104ull * 270336);
	assert_true(now.expert_cache_bytes - old.expert_cache_bytes <
	            4104ull * 270336 + mdesc_class_set_bytes(now.model));
	/* 4,104 pages are 1,109,458,944 B = 1.033 GiB: the reference's figure */
	assert_int_equal(4104ull * 270336 * 1000 / (1ull << 30), 1033);
}

static void test_residency_threshold(void **state)
{
	struct vplan big = ok_plan("model=flash-next device-free-bytes=96000000000");
	uint64_t threshold = big.lines_total + big.expert_table_bytes + big.expert_cache_bytes +
	                     big.floor_pages * big.page_bytes;
	char words[256];
	struct vplan p;

	(void)state;
	/* 96 GB: resident, every expert cached, no ring, the rest to the page */
	assert_int_equal(big.policy, VPLAN_RESIDENT);
	assert_int_equal(big.expert_cache_bytes, big.model->expert_host_bytes);
	assert_int_equal(big.prefill_staging_bytes, 0);
	assert_true((big.pool_pages + 1) * big.page_bytes > big.budget_bytes - big.lines_total -
	                                                        big.expert_table_bytes -
	                                                        big.expert_cache_bytes);
	/* exactly on the threshold: resident with the floor pool */
	snprintf(words, sizeof(words),
	         "model=flash-next device-free-bytes=96000000000 vram-budget-bytes=%llu",
	         (unsigned long long)threshold);
	p = ok_plan(words);
	assert_int_equal(p.policy, VPLAN_RESIDENT);
	assert_int_equal(p.pool_pages, p.floor_pages);
	/* one byte less: offloaded with 8,192 pages (at 262,144 tokens and 3 lanes) */
	snprintf(words, sizeof(words),
	         "model=flash-next device-free-bytes=96000000000 vram-budget-bytes=%llu "
	         "model-max-context=131072",
	         (unsigned long long)threshold - 1);
	p = ok_plan(words);
	assert_int_equal(p.policy, VPLAN_OFFLOADED);
	assert_int_equal(p.pool_pages, 3 * 2048);
}

static void test_named_pool_on_resident_leaves_the_rest(void **state)
{
	struct vplan p = ok_plan(B27_32 " vram-kv-pool-bytes=1Mtok");

	(void)state;
	assert_int_equal(p.pool_pages, 16384);
	assert_int_equal(p.unused_bytes, p.budget_bytes - p.lines_total - 16384ull * 589824);
}

/* Issue 13, item 11: the pin holds per class. The plan cannot know which
 * experts calibration makes hottest, so it counts the pin in the class it
 * could fill fastest: experts of the smallest records (gate_up 827,392 B +
 * down 417,792 B = 1,245,184 B), each taking a slot of one gate_up class and
 * one of one down class. Every class keeps the widest step's slots. */
static void test_pinned_most_is_exact(void **state)
{
	struct vplan ok = ok_plan(FN32), p;
	uint64_t sets = ok.expert_cache_bytes / mdesc_class_set_bytes(ok.model);
	uint64_t most = (sets - ok.class_min_slots) * (827392 + 417792);
	struct ig_errbuf eb = {0};
	char words[256], want[64];

	(void)state;
	assert_int_equal(ok.class_min_slots, 78);
	snprintf(words, sizeof(words), "%s vram-pinned-expert-bytes=%llu", FN32,
	         (unsigned long long)most);
	p = ok_plan(words);
	assert_int_equal(p.pinned_expert_bytes, most);
	snprintf(words, sizeof(words), "%s vram-pinned-expert-bytes=%llu", FN32,
	         (unsigned long long)most + 1);
	assert_int_equal(plan_of(words, &p, &eb), IG_E_PLAN_REFUSED);
	assert_int_equal(p.shortfall_bytes, 1);
	snprintf(want, sizeof(want), "the most it can pin is %llu bytes", (unsigned long long)most);
	assert_non_null(strstr(p.refusal, want));
	/* what a count of total bytes allowed would starve a class: refused */
	snprintf(words, sizeof(words), "%s vram-pinned-expert-bytes=%llu", FN32,
	         (unsigned long long)(ok.expert_cache_bytes - ok.class_min_bytes));
	assert_int_equal(plan_of(words, &p, &eb), IG_E_PLAN_REFUSED);
	/* the reference's own default, 2G pinned under rtx5090 on its card, starts */
	p = ok_plan("profile=rtx5090 model=flash-next device-free-bytes=" CARD32);
	assert_int_equal(p.pinned_expert_bytes, 2ull << 30);
	/* oversubscribed below the minimum the cache is the class minimum: no pin */
	assert_int_equal(plan_of("model=flash-next device-free-bytes=16G vram-budget-bytes=6G "
	                         "vram-allow-oversubscription=on "
	                         "vram-allow-expert-cache-below-floor=on "
	                         "vram-pinned-expert-bytes=4K",
	                         &p, &eb),
	                 IG_E_PLAN_REFUSED);
	assert_non_null(strstr(p.refusal, "the most it can pin is 0 bytes"));
}

/* Issue 13, item 7: oversubscription does not waive the expert cache's
 * floor; only --vram-allow-expert-cache-below-floor does. An 8G budget is
 * below Flash-Next's minimum: oversubscribed, the plan of its minimum holds
 * a class-minimum cache (556,228,608 B), which is below the 12 GiB floor. */
static void test_oversubscription_keeps_the_floor(void **state)
{
	struct ig_errbuf eb = {0};
	struct vplan p, both;

	(void)state;
	assert_int_equal(
	    plan_of(FN32 " vram-budget-bytes=8G vram-allow-oversubscription=on", &p, &eb),
	    IG_E_PLAN_REFUSED);
	assert_non_null(strstr(p.refusal, "below its floor"));
	assert_non_null(strstr(p.refusal, "--vram-allow-expert-cache-below-floor"));
	assert_non_null(strstr(p.refusal, "a larger --vram-budget-bytes"));
	/* the budget the floor needs: lines + ring and tables + the floor pool +
	 * the floor in whole slot sets (1,807 of 7,131,136 B). The lines are
	 * 6,712,983,552 in compact: 3 lanes x (32 + 512) x 24,576 B (12 layers
	 * x 2 KV heads x 2 x 256 x 2 B a token in bf16) = 40,108,032 B of
	 * hq_residual_window, 20 granules of 2 MiB, where 3 x 64 x 24,576 =
	 * 4,718,592 took 3: 17 granules = 35,651,584 B more than 6,677,331,968 */
	assert_int_equal(p.shortfall_bytes, 6712983552ull + 1577852928ull + 2056ull * 270336 +
	                                        1807ull * 7131136 - (8ull << 30));
	both = ok_plan(FN32 " vram-budget-bytes=8G vram-allow-oversubscription=on "
	                    "vram-allow-expert-cache-below-floor=on");
	assert_int_equal(both.warnings, VPLAN_WARN_BELOW_MINIMUM | VPLAN_WARN_CACHE_BELOW_FLOOR);
	assert_int_equal(both.expert_cache_bytes, 556228608);
	assert_int_equal(both.pool_pages, 2056);
	assert_int_equal(both.minimum_bytes, both.total_bytes);
	/* 6,712,983,552 + 1,577,852,928 + 555,810,816 (2,056 pages) +
	 * 556,228,608 */
	assert_int_equal(both.total_bytes, 9402875904ull);
	/* the pool is at its floor: a smaller named pool cannot lift the cache */
	assert_null(strstr(both.knobs, "--vram-kv-pool-bytes"));
	assert_non_null(strstr(both.knobs, "--model-max-context"));
}

/* Issue 13, item 9: the floor refusal names the direction that lifts the
 * cache: a smaller headroom, or a larger explicit budget; its shortfall is
 * exact (the cache is whole slot sets, so the floor is 1,807 of them). At
 * 20G free the budget is 21,474,836,480 - 1,610,612,736 = 19,864,223,744;
 * the floor needs lines 6,712,983,552 + ring and tables 1,577,852,928 +
 * 6,144 pages x 270,336 = 1,660,944,384 + 1,807 x 7,131,136 =
 * 12,885,962,752, 22,837,743,616 in all: short by 2,973,519,872 (the
 * residual window's 35,651,584 B of lines more than 2,937,868,288). */
static void test_floor_refusal_lifts(void **state)
{
	struct ig_errbuf eb = {0};
	struct vplan d, e, p;
	char words[256];

	(void)state;
	assert_int_equal(plan_of("model=flash-next device-free-bytes=20G", &d, &eb),
	                 IG_E_PLAN_REFUSED);
	assert_non_null(strstr(d.refusal, "a smaller --vram-kv-pool-bytes, --model-prefill-chunk "
	                                  "or --vram-headroom-bytes"));
	assert_int_equal(d.shortfall_bytes, 2973519872ull);
	assert_int_equal(
	    plan_of("model=flash-next device-free-bytes=64G vram-budget-bytes=20G", &e, &eb),
	    IG_E_PLAN_REFUSED);
	assert_non_null(strstr(e.refusal, "a larger --vram-budget-bytes"));
	assert_null(strstr(e.refusal, "smaller --vram-budget-bytes"));
	assert_null(strstr(e.refusal, "--vram-headroom-bytes"));
	/* the derived refusal's bytes more, as an explicit budget, start with
	 * the cache at its floor; one byte less is short by one */
	snprintf(words, sizeof(words),
	         "model=flash-next device-free-bytes=64G vram-budget-bytes=%llu",
	         (unsigned long long)(d.budget_bytes + d.shortfall_bytes));
	p = ok_plan(words);
	assert_int_equal(p.warnings, 0);
	assert_int_equal(p.expert_cache_bytes, 1807ull * 7131136);
	snprintf(words, sizeof(words),
	         "model=flash-next device-free-bytes=64G vram-budget-bytes=%llu",
	         (unsigned long long)(d.budget_bytes + d.shortfall_bytes - 1));
	assert_int_equal(plan_of(words, &p, &eb), IG_E_PLAN_REFUSED);
	assert_int_equal(p.shortfall_bytes, 1);
	assert_non_null(strstr(p.refusal, "a larger --vram-budget-bytes"));
	/* one lane: the pool is its floor, so a smaller pool cannot lift it; a
	 * shorter context can; no device slots, so "fewer" of them is no knob */
	assert_int_equal(
	    plan_of("model=flash-next device-free-bytes=19G spec-decode-lanes=1", &p, &eb),
	    IG_E_PLAN_REFUSED);
	assert_null(strstr(p.refusal, "--vram-kv-pool-bytes"));
	assert_null(strstr(p.refusal, "--reuse-retained-device"));
	assert_non_null(strstr(p.refusal, "a smaller --model-max-context, --model-prefill-chunk"));
}

/* Issue 13, item 8: the 27B's adaptation refusal with a budget below its
 * fixed lines states the bytes really missing (it said 972,619,776, the
 * pages alone, when the lines were missing too), and oversubscription there
 * starts the plan of that minimum budget, whose bytes its warning carries.
 * The least pool: 1,024 spare pages + 16 retained + 38,912 / 64 + 1 = 609
 * pages of a request at the default cap, 1,649 x 589,824 = 972,619,776 B.
 * The lines in compact: 19,832,766,464 with the old window line (8 lanes x
 * 64 x 65,536 = 33,554,432), now 8 x (32 + 512) x 65,536 = 285,212,672 (16
 * layers x 4 KV heads x 2 x 256 x 2 B = 65,536 a token in bf16; both whole
 * 2 MiB granules): 251,658,240 more, 20,084,424,704. Needed 20,084,424,704
 * + 972,619,776 = 21,057,044,480; 18G is 19,327,352,832: short by
 * 1,729,691,648. */
static void test_adaptation_below_the_lines(void **state)
{
	struct ig_errbuf eb = {0};
	struct vplan p, at, over;
	char words[256];

	(void)state;
	assert_int_equal(plan_of(B27_32 " vram-budget-bytes=18G", &p, &eb), IG_E_PLAN_REFUSED);
	assert_true(p.lines_total > 18ull << 30);
	assert_int_equal(p.shortfall_bytes, 1729691648ull);
	assert_non_null(strstr(p.refusal, "short by 1729691648 bytes"));
	assert_non_null(strstr(p.refusal, "at least 21057044480 bytes"));
	/* exactly that much more starts, adapted; one byte less is short by one */
	snprintf(words, sizeof(words), B27_32 " vram-budget-bytes=%llu",
	         (18ull << 30) + 1729691648ull);
	at = ok_plan(words);
	assert_true(at.context_adapted);
	assert_int_equal(at.warnings, 0);
	assert_int_equal(at.pool_pages, 1024 + 16 + 38912 / 64 + 1);
	assert_int_equal(at.context, (38912 / 64 + 1) * 64);
	snprintf(words, sizeof(words), B27_32 " vram-budget-bytes=%llu",
	         (18ull << 30) + 1729691648ull - 1);
	assert_int_equal(plan_of(words, &p, &eb), IG_E_PLAN_REFUSED);
	assert_int_equal(p.shortfall_bytes, 1);
	/* oversubscribed: that plan, and its bytes as the minimum */
	over = ok_plan(B27_32 " vram-budget-bytes=18G vram-allow-oversubscription=on");
	assert_int_equal(over.warnings, VPLAN_WARN_BELOW_MINIMUM);
	assert_int_equal(over.minimum_bytes, (18ull << 30) + 1729691648ull);
	assert_int_equal(over.total_bytes, over.minimum_bytes);
	assert_int_equal(over.pool_pages, at.pool_pages);
	assert_int_equal(over.context, at.context);
	/* tiny-dense, the same rule at its own scale (4 lanes and the 64K-token
	 * spare) */
	assert_int_equal(
	    plan_of("model=tiny-dense profile=cpu backend=cpu vram-budget-bytes=7M", &p, &eb),
	    IG_E_PLAN_REFUSED);
	over = ok_plan("model=tiny-dense profile=cpu backend=cpu vram-budget-bytes=7M "
	               "vram-allow-oversubscription=on");
	assert_int_equal(over.minimum_bytes, (7ull << 20) + p.shortfall_bytes);
	assert_int_equal(over.total_bytes, over.minimum_bytes);
}

/* A context smaller than one request at the default cap is kept whole, and
 * the refusal asks for that much, not for the cap. */
static void test_adaptation_need_is_the_smaller(void **state)
{
	struct ig_errbuf eb = {0};
	struct vplan p, ok;
	char words[256];

	(void)state;
	/* 131,072-token default context, a default cap of 1M tokens */
	assert_int_equal(
	    plan_of(B27_32 " model-default-max-tokens=1048576 vram-budget-bytes=20G", &p, &eb),
	    IG_E_PLAN_REFUSED);
	snprintf(words, sizeof(words),
	         B27_32 " model-default-max-tokens=1048576 vram-budget-bytes=%llu",
	         (20ull << 30) + (unsigned long long)p.shortfall_bytes);
	ok = ok_plan(words);
	assert_false(ok.context_adapted);
	assert_int_equal(ok.context, 131072);
	assert_int_equal(ok.pool_pages, 2048 + 1024 + 16);
}

/* A named pool the budget cannot hold, oversubscribed: the warning's
 * minimum is that pool with the lines, what the plan reserves. */
static void test_named_pool_oversubscribed_minimum(void **state)
{
	struct vplan p = ok_plan(B27_32 " vram-budget-bytes=25G vram-kv-pool-bytes=1Mtok "
	                                "vram-allow-oversubscription=on");

	(void)state;
	assert_int_equal(p.warnings, VPLAN_WARN_BELOW_MINIMUM);
	assert_int_equal(p.pool_pages, 16384);
	assert_int_equal(p.minimum_bytes, p.lines_total + 16384ull * 589824);
	assert_int_equal(p.total_bytes, p.minimum_bytes);
}

/* Issue 13, item 12: a pool counts at most VPLAN_MAX_POOL_PAGES pages (the
 * worker's page tables and the plan message count in 32 bits). A device
 * figure that would give more is refused by the plan, naming the knob the
 * figure came from, instead of failing the start on a wire field. */
static void test_pool_pages_fit_the_worker(void **state)
{
	struct ig_errbuf eb = {0};
	struct vplan p;

	(void)state;
	assert_int_equal(VPLAN_MAX_POOL_PAGES, 4294967295ull);
	/* tiny-dense in compact: 4,608 B a page; 8,364,032 B of lines, of which
	 * hq_residual_window is 4 lanes x (32 + 512) x 512 B (1 layer x 2 KV
	 * heads x 2 x 64 x 2 B a token in bf16) = 1,114,112 (it was 4 x 64 x
	 * 512 = 131,072, and the lines 7,380,992). (2^64 - 1 - 8,388,608 of
	 * headroom - 8,364,032) / 4,608 = 4,003,199,668,770,138 pages (3,071 B
	 * over): 213 fewer than the 4,003,199,668,770,351 of 983,040 B fewer
	 * lines (983,040 = 213 x 4,608 + 1,536, and 4,607 - 1,536 = 3,071) */
	assert_int_equal(plan_of("model=tiny-dense profile=cpu backend=cpu "
	                         "device-free-bytes=18446744073709551615",
	                         &p, &eb),
	                 IG_E_PLAN_REFUSED);
	assert_non_null(strstr(p.refusal, "4003199668770138 pages"));
	assert_non_null(strstr(p.refusal, "more than the 4294967295 pages"));
	assert_non_null(strstr(p.refusal, "(from --device-free-bytes)"));
	assert_string_equal(p.knobs,
	                    "--device-free-bytes, --vram-budget-bytes, --vram-kv-pool-bytes");
	assert_int_equal(p.shortfall_bytes, (4003199668770138ull - 4294967295ull) * 4608);
	/* an explicit budget as large, oversubscribed: the budget is the knob */
	assert_int_equal(plan_of("model=tiny-dense profile=cpu backend=cpu "
	                         "vram-budget-bytes=16384T vram-allow-oversubscription=on",
	                         &p, &eb),
	                 IG_E_PLAN_REFUSED);
	assert_string_equal(p.knobs, "--vram-budget-bytes, --vram-kv-pool-bytes");
	/* Flash-Next resident on such a device: the same */
	assert_int_equal(
	    plan_of("model=flash-next device-free-bytes=18446744073709551615", &p, &eb),
	    IG_E_PLAN_REFUSED);
	assert_non_null(strstr(p.refusal, "more than the 4294967295 pages"));
	/* a named pool: exactly the limit starts, one page more is refused */
	p = ok_plan("model=tiny-dense profile=cpu backend=cpu "
	            "device-free-bytes=18446744073709551615 vram-kv-pool-bytes=274877906880tok");
	assert_int_equal(p.pool_pages, 4294967295ull);
	assert_int_equal(plan_of("model=tiny-dense profile=cpu backend=cpu "
	                         "device-free-bytes=18446744073709551615 "
	                         "vram-kv-pool-bytes=274877906944tok",
	                         &p, &eb),
	                 IG_E_PLAN_REFUSED);
	assert_string_equal(p.knobs, "--vram-kv-pool-bytes");
	assert_int_equal(p.shortfall_bytes, 4608);
}

/* Issue 13, item 10: Flash-Next's minimum refusal is whole (its text was cut
 * at 256 bytes, "...below-fl needs at least"). The minimum: lines
 * 6,712,983,552 (compact, with the residual window: test_oversubscription_
 * keeps_the_floor) + ring and tables 1,577,852,928 + the 2,056-page floor
 * pool 555,810,816 + the class minimum 556,228,608 = 9,402,875,904; 10G less
 * the 1,610,612,736 headroom is 9,126,805,504: short by 276,070,400. */
static void test_moe_minimum_refusal_is_whole(void **state)
{
	struct ig_errbuf eb = {0};
	struct vplan p;

	(void)state;
	assert_int_equal(plan_of("model=flash-next device-free-bytes=10G", &p, &eb),
	                 IG_E_PLAN_REFUSED);
	assert_int_equal(p.shortfall_bytes, 276070400);
	assert_non_null(strstr(p.refusal,
	                       "whatever --vram-allow-expert-cache-below-floor says: "
	                       "556228608 bytes) needs at least 9402875904 bytes but the "
	                       "budget is 9126805504 bytes: short by 276070400 bytes. Turn: "
	                       "--vram-headroom-bytes, --model-max-context"));
	/* whole: it ends with the last knob, in compact the window's (the
	 * refusal is longer than an ig_errbuf, so read it from the plan, as the
	 * supervisor prints it) */
	assert_true(strlen(p.refusal) > strlen("--model-kv-window, --model-kv-sinks"));
	assert_string_equal(p.refusal + strlen(p.refusal) -
	                        strlen("--model-kv-format, --model-kv-window, --model-kv-sinks"),
	                    "--model-kv-format, --model-kv-window, --model-kv-sinks");
}

/* The compact formats' residual window (common/model.h): each sequence's
 * first --model-kv-sinks (32) and newest --model-kv-window (512) tokens in
 * bf16, part of its fixed-size state. On the 27B a token in bf16 is 16
 * layers x 4 KV heads x 2 roles x 256 x 2 B = 65,536 B, so a sequence's
 * window is (32 + 512) x 65,536 = 35,651,584 B; the hq_residual_window line
 * holds one for each lane and each device retained slot, and a host slot
 * holds one beside its state image. */
static void test_window_line(void **state)
{
	const struct mdesc *b27 = mdesc_find("27b");
	struct vplan p, q;

	(void)state;
	assert_int_equal(mdesc_kv_window_bytes(b27, 32, 512), 544ull * 65536);
	assert_int_equal(mdesc_kv_window_bytes(b27, 32, 512), 35651584);
	/* the defaults, compact: 8 lanes + 0 device slots = 8 x 35,651,584 =
	 * 285,212,672 B (136 granules of 2 MiB: no rounding in residual) */
	p = ok_plan(B27_32);
	assert_int_equal(p.kv_sinks, 32);
	assert_int_equal(p.kv_window, 512);
	assert_int_equal(p.window_bytes, mdesc_kv_window_bytes(b27, 32, 512));
	assert_int_equal(p.line[VPLAN_HQ_RESIDUAL_WINDOW], (8ull + 0) * 544 * 65536);
	assert_int_equal(p.line[VPLAN_HQ_RESIDUAL_WINDOW], 285212672);
	/* the 16 host slots (2 a lane) each hold a state image of 232,532,224 B
	 * and a window: 16 x 268,183,808 = 4,290,940,928 B */
	assert_int_equal(p.retained_host, 16);
	assert_int_equal(p.retained_host_bytes, 16ull * (232532224 + 35651584));
	assert_int_equal(p.retained_host_bytes, 4290940928ull);
	/* without a window the line is 0 and the lines are 285,212,672 B fewer
	 * (the window is whole granules); the host slots hold the image alone,
	 * 16 x 232,532,224 = 3,720,515,584 B */
	q = ok_plan(B27_32 " model-kv-window=0");
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 0);
	assert_int_equal(q.kv_window, 0);
	assert_int_equal(q.kv_sinks, 0);
	assert_int_equal(q.window_bytes, 0);
	assert_int_equal(p.lines_total - q.lines_total, 285212672);
	assert_int_equal(q.retained_host_bytes, 3720515584ull);
	/* 2 device slots: (8 + 2) x 35,651,584 = 356,515,840 B */
	q = ok_plan(B27_32 " reuse-retained-device=2");
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], (8ull + 2) * 544 * 65536);
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 356515840);
	/* other sinks: (64 + 512) x 65,536 = 37,748,736 a sequence, 8 x that =
	 * 301,989,888; no sinks: 8 x 512 x 65,536 = 268,435,456 */
	q = ok_plan(B27_32 " model-kv-sinks=64");
	assert_int_equal(q.window_bytes, 576ull * 65536);
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 301989888);
	q = ok_plan(B27_32 " model-kv-sinks=0");
	assert_int_equal(q.window_bytes, 512ull * 65536);
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 268435456);
	/* another window: (32 + 1,024) x 65,536 x 8 = 553,648,128 */
	q = ok_plan(B27_32 " model-kv-window=1024");
	assert_int_equal(q.window_bytes, mdesc_kv_window_bytes(b27, 32, 1024));
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 553648128);
	/* fp8 and bf16 keep every token in their own format: no window, and
	 * the knobs are not carried */
	q = ok_plan(B27_32 " model-kv-format=fp8");
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 0);
	assert_int_equal(q.window_bytes, 0);
	assert_int_equal(q.kv_window, 0);
	assert_int_equal(q.retained_host_bytes, 3720515584ull);
	q = ok_plan(B27_32 " model-kv-format=bf16");
	assert_int_equal(q.line[VPLAN_HQ_RESIDUAL_WINDOW], 0);
	assert_int_equal(q.window_bytes, 0);
	assert_int_equal(q.kv_window, 0);
}

static void test_adaptation(void **state)
{
	struct vplan p;
	char words[256];
	uint64_t spare_pages = 65536 / 64;

	(void)state;
	/* The profile's 786,432-token context fits a 32 GB card with the spare. */
	p = ok_plan("profile=rtx5090 model=27b device-free-bytes=" CARD32);
	assert_false(p.context_adapted);
	assert_int_equal(p.context, 786432);
	assert_true(p.pool_pages >= p.context / 64 + spare_pages + p.retained_host);
	/* On a 24 GiB card it does not: the load adapts it to what leaves the spare. */
	p = ok_plan("profile=rtx5090 model=27b device-free-bytes=24G");
	assert_true(p.context_adapted);
	assert_int_equal(p.requested_context, 786432);
	assert_int_equal(p.context / 64 + spare_pages + p.retained_host, p.pool_pages);
	/* Spare 0: one sequence is enough, a longer context is kept. */
	{
		struct vplan p0 = ok_plan("profile=rtx5090 model=27b device-free-bytes=24G "
		                          "vram-adapt-spare-tokens=0");

		assert_int_equal(p0.context - p.context, 65536);
	}
	/* A context the operator named is not adapted: here it refuses. */
	{
		struct ig_errbuf eb = {0};

		snprintf(
		    words, sizeof(words),
		    "profile=rtx5090 model=27b device-free-bytes=24G model-max-context=786432");
		assert_int_equal(plan_of(words, &p, &eb), IG_E_PLAN_REFUSED);
		assert_non_null(strstr(eb.msg, "--model-max-context"));
	}
	/* Adaptation stops at the default output cap plus a page: below that
	 * the start is refused rather than serving almost nothing. */
	{
		struct ig_errbuf eb = {0};

		assert_int_equal(
		    plan_of("profile=rtx5090 model=27b device-free-bytes=20G", &p, &eb),
		    IG_E_PLAN_REFUSED);
		assert_non_null(strstr(eb.msg, "786432-token context"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rows),
	    cmocka_unit_test(test_default_format),
	    cmocka_unit_test(test_line_names_and_order),
	    cmocka_unit_test(test_model_figures),
	    cmocka_unit_test(test_lin_state),
	    cmocka_unit_test(test_resident_pool_takes_the_rest_to_the_page),
	    cmocka_unit_test(test_minimum_and_retained_slots),
	    cmocka_unit_test(test_minimum_refusal_is_exact),
	    cmocka_unit_test(test_offloaded_cache_is_the_rest),
	    cmocka_unit_test(test_new_pool_gives_the_cache_1_033_gib),
	    cmocka_unit_test(test_residency_threshold),
	    cmocka_unit_test(test_named_pool_on_resident_leaves_the_rest),
	    cmocka_unit_test(test_pinned_most_is_exact),
	    cmocka_unit_test(test_adaptation),
	    cmocka_unit_test(test_moe_minimum_refusal_is_whole),
	    cmocka_unit_test(test_pool_pages_fit_the_worker),
	    cmocka_unit_test(test_named_pool_oversubscribed_minimum),
	    cmocka_unit_test(test_oversubscription_keeps_the_floor),
	    cmocka_unit_test(test_floor_refusal_lifts),
	    cmocka_unit_test(test_adaptation_below_the_lines),
	    cmocka_unit_test(test_adaptation_need_is_the_smaller),
	    cmocka_unit_test(test_window_line),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
