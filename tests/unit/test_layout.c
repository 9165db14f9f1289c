/*
 * test_layout.c - the plan laid out on the cpu backend's simulated device:
 * every line reserved as planned and inside the budget, places taken only
 * inside a line's reservation, a device too small refused naming the line,
 * and an accounting that does not match the plan refused naming the line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpu-worker/backend/layout.h"
#include "supervisor/plan.h"

/* The plan of `words` ("name=value" flags) as the worker receives it. */
static void plan_msg(const char *words, struct vplan *p, struct msg *m)
{
	static char buf[512];
	struct knob_input in;
	struct knobs k;
	struct ig_errbuf eb;
	char *save = NULL;

	memset(&in, 0, sizeof(in));
	snprintf(buf, sizeof(buf), "%s", words);
	for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(w, '=');

		*eq = '\0';
		for (int id = 0; id < KNOB__COUNT; id++)
			if (!strcmp(knob_defs[id].name, w)) {
				in.flag[id].text = eq + 1;
				snprintf(in.flag[id].where, sizeof(in.flag[id].where), "--%s", w);
			}
	}
	if (knob_resolve(&in, &k, &eb) || plan_make(&k, false, p, &eb))
		fail_msg("%s: %s %s", words, eb.msg, p->refusal);
	plan_to_msg(p, &k, NULL, m);
}

static void test_lays_out_both_families(void **state)
{
	static const char *const plans[] = {
	    "profile=cpu model=tiny-dense",
	    "profile=cpu model=tiny-moe",
	    "profile=cpu model=tiny-moe device-free-bytes=28M",
	};

	(void)state;
	for (int i = 0; i < 3; i++) {
		struct ig_errbuf eb;
		struct layout l;
		struct vplan p;
		struct msg m;
		struct be be = {.ops = backend_find("cpu", &eb)};
		uint64_t free_after, total;

		plan_msg(plans[i], &p, &m);
		assert_int_equal(be.ops->open(&be, p.free_bytes, &eb), IG_E_OK);
		if (layout_apply(&l, &be, &m.u.plan, &eb) || layout_check(&l, &m.u.plan, &eb))
			fail_msg("%s: %s", plans[i], eb.msg);
		be.ops->mem_info(&be, &free_after, &total);
		/* everything reserved, all of it inside the budget */
		assert_true(total - free_after <= p.budget_bytes);
		assert_true(total - free_after + p.line[VPLAN_RESIDUAL] >= p.total_bytes);
		assert_true(l.pool_pages >= p.pool_pages);
		layout_release(&l);
		be.ops->mem_info(&be, &free_after, &total);
		assert_int_equal(free_after, total);
		be.ops->close(&be);
	}
}

static void test_take_stays_inside_a_line(void **state)
{
	struct ig_errbuf eb;
	struct layout l;
	struct vplan p;
	struct msg m;
	struct be be = {.ops = backend_find("cpu", &eb)};
	uint64_t ws;
	void *a, *b;

	(void)state;
	plan_msg("profile=cpu model=tiny-dense", &p, &m);
	be.ops->open(&be, p.free_bytes, &eb);
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_OK);
	ws = l.r[VPLAN_WORKSPACE].bytes;
	assert_int_equal(layout_take(&l, (enum layout_region_id)VPLAN_WORKSPACE, ws / 2, &a, &eb),
	                 IG_E_OK);
	assert_int_equal(layout_take(&l, (enum layout_region_id)VPLAN_WORKSPACE, ws / 4, &b, &eb),
	                 IG_E_OK);
	assert_true((char *)b >= (char *)a + ws / 2);
	assert_int_equal(layout_take(&l, (enum layout_region_id)VPLAN_WORKSPACE, ws / 2, &b, &eb),
	                 IG_E_NOMEM);
	assert_non_null(strstr(eb.msg, "workspace"));
	assert_non_null(strstr(eb.msg, "the plan did not reserve this"));
	layout_release(&l);
	layout_release(&l); /* idempotent */
	be.ops->close(&be);
}

static void test_too_small_a_device_names_the_line(void **state)
{
	struct ig_errbuf eb;
	struct layout l;
	struct vplan p;
	struct msg m;
	struct be be = {.ops = backend_find("cpu", &eb)};
	uint64_t free_after, total;

	(void)state;
	plan_msg("profile=cpu model=tiny-dense", &p, &m);
	/* a device half the size the plan was made for */
	be.ops->open(&be, p.free_bytes / 2, &eb);
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_NOMEM);
	assert_non_null(strstr(eb.msg, "cannot reserve the plan's"));
	be.ops->mem_info(&be, &free_after, &total);
	assert_int_equal(free_after, total); /* nothing left behind */
	be.ops->close(&be);
}

static void test_accounting_mismatch_names_the_line(void **state)
{
	struct ig_errbuf eb;
	struct layout l;
	struct vplan p;
	struct msg m;
	struct be be = {.ops = backend_find("cpu", &eb)};

	(void)state;
	plan_msg("profile=cpu model=tiny-dense", &p, &m);
	be.ops->open(&be, p.free_bytes, &eb);
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_OK);
	m.u.plan.lines.v[VPLAN_SAMPLING].bytes += 8192; /* the plan says more than was laid out */
	assert_int_equal(layout_check(&l, &m.u.plan, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "sampling"));
	m.u.plan.lines.v[VPLAN_SAMPLING].bytes -= 8192;
	m.u.plan.pool_pages += 2;
	assert_int_equal(layout_check(&l, &m.u.plan, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "kv_pool"));
	layout_release(&l);
	be.ops->close(&be);
}

/* A window line that is not the lanes' windows and whole retained slots'
 * (a forged or stale plan) is refused before anything is reserved. */
static void test_forged_window_line_refused(void **state)
{
	struct ig_errbuf eb;
	struct layout l;
	struct vplan p;
	struct msg m;
	struct be be = {.ops = backend_find("cpu", &eb)};
	uint64_t *hq, *wb, good_hq, good_wb;
	uint64_t free_before, free_after, total;

	(void)state;
	plan_msg("profile=cpu model=tiny-dense model-kv-format=compact reuse-retained-device=2", &p,
	         &m);
	hq = &m.u.plan.lines.v[VPLAN_HQ_RESIDUAL_WINDOW].bytes;
	wb = &m.u.plan.kv_window_bytes;
	good_hq = *hq;
	good_wb = *wb;
	assert_int_equal(good_hq, (p.lanes + 2) * good_wb);
	be.ops->open(&be, p.free_bytes, &eb);
	be.ops->mem_info(&be, &free_before, &total);
	*hq = (p.lanes - 1) * good_wb; /* short of the lanes' own */
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "hq_residual_window"));
	*hq = good_hq + good_wb / 2; /* half a slot's */
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_PROTO_FIELD_RANGE);
	*hq = good_hq;
	*wb = UINT64_MAX / 2; /* lanes x window wraps */
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_PROTO_FIELD_RANGE);
	*wb = 0; /* no window, and a line */
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_PROTO_FIELD_RANGE);
	be.ops->mem_info(&be, &free_after, &total);
	assert_int_equal(free_after, free_before); /* nothing reserved */
	*wb = good_wb;
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_OK);
	assert_int_equal(layout_check(&l, &m.u.plan, &eb), IG_E_OK);
	layout_release(&l);
	be.ops->close(&be);
}

static void test_unknown_backend(void **state)
{
	struct ig_errbuf eb;

	(void)state;
	assert_null(backend_find("tpu", &eb));
	assert_non_null(strstr(eb.msg, "'tpu'"));
	assert_non_null(backend_find("cpu", &eb));
}

/* The rest of a line goes whole to the backend; a byte of the device held
 * beside the regions fails the worker's check, by how much. */
static void test_nothing_beside_the_plan(void **state)
{
	struct ig_errbuf eb;
	struct layout l;
	struct vplan p;
	struct msg m;
	struct be be = {.ops = backend_find("cpu", &eb)};
	struct be_region r;
	void *a, *extra;

	(void)state;
	plan_msg("profile=cpu model=tiny-dense", &p, &m);
	be.ops->open(&be, p.free_bytes, &eb);
	assert_int_equal(layout_apply(&l, &be, &m.u.plan, &eb), IG_E_OK);
	assert_int_equal(layout_check_held(&l, &eb), IG_E_OK);
	assert_int_equal(layout_take(&l, (enum layout_region_id)VPLAN_SAMPLING, 100, &a, &eb),
	                 IG_E_OK);
	assert_int_equal(layout_take_rest(&l, (enum layout_region_id)VPLAN_SAMPLING, &r, &eb),
	                 IG_E_OK);
	assert_ptr_equal(r.base, (char *)a + 128); /* 64-byte aligned after the 100 */
	assert_int_equal(r.bytes, l.r[VPLAN_SAMPLING].bytes - 128);
	assert_int_equal(layout_take_rest(&l, (enum layout_region_id)VPLAN_SAMPLING, &r, &eb),
	                 IG_E_NOMEM);
	assert_int_equal(layout_take_rest(&l, (enum layout_region_id)VPLAN_VERIFY_ROUND, &r, &eb),
	                 IG_E_OK); /* a line of 0 bytes: an empty region */
	assert_null(r.base);
	assert_int_equal(be.ops->alloc(&be, 4096, &extra, &eb), IG_E_OK);
	assert_int_equal(layout_check_held(&l, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "4096 bytes were allocated beside the plan"));
	be.ops->free(&be, extra, 4096);
	assert_int_equal(layout_check_held(&l, &eb), IG_E_OK);
	layout_release(&l);
	be.ops->close(&be);
}

/* The compact formats' residual windows (docs/adr/0047) are reserved with
 * the states they belong to: the lanes' in lane_state's region, the device
 * retained slots' in theirs. Across windows, sinks and slots the layout
 * matches the plan (layout_check: its rounding inside the residual line),
 * stays inside the budget, and each region holds its states whole. */
static void test_windows_laid_out_with_their_states(void **state)
{
	static const char *const models[] = {"tiny-dense", "tiny-moe"};
	static const unsigned windows[] = {1, 512}, sinks[] = {0, 3}, slots[] = {0, 3};
	unsigned n = 0;

	(void)state;
	for (size_t mi = 0; mi < 2; mi++)
		for (size_t wi = 0; wi < 2; wi++)
			for (size_t si = 0; si < 2; si++)
				for (size_t ri = 0; ri < 2; ri++) {
					char words[256];
					struct ig_errbuf eb;
					struct layout l;
					struct vplan p;
					struct msg m;
					struct be be = {.ops = backend_find("cpu", &eb)};
					uint64_t free_after, total, img;

					snprintf(words, sizeof(words),
					         "profile=cpu model=%s model-kv-format=compact "
					         "model-kv-window=%u model-kv-sinks=%u "
					         "reuse-retained-device=%u",
					         models[mi], windows[wi], sinks[si], slots[ri]);
					plan_msg(words, &p, &m);
					assert_true(p.window_bytes > 0);
					assert_int_equal(p.line[VPLAN_HQ_RESIDUAL_WINDOW],
					                 (p.lanes + p.retained_device) *
					                     p.window_bytes);
					assert_int_equal(be.ops->open(&be, p.free_bytes, &eb),
					                 IG_E_OK);
					if (layout_apply(&l, &be, &m.u.plan, &eb) ||
					    layout_check(&l, &m.u.plan, &eb))
						fail_msg("%s: %s", words, eb.msg);
					be.ops->mem_info(&be, &free_after, &total);
					assert_true(total - free_after <= p.budget_bytes);
					img = mdesc_state_image_bytes(p.model) + p.window_bytes;
					assert_true(l.r[VPLAN_LANE_STATE].bytes >= p.lanes * img);
					assert_true(l.r[VPLAN_RETAINED_SLOTS].bytes >=
					            p.retained_device * img);
					assert_null(l.r[VPLAN_HQ_RESIDUAL_WINDOW].base);
					layout_release(&l);
					be.ops->close(&be);
					n++;
				}
	printf("# %u compact plans laid out with their windows\n", n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lays_out_both_families),
	    cmocka_unit_test(test_windows_laid_out_with_their_states),
	    cmocka_unit_test(test_take_stays_inside_a_line),
	    cmocka_unit_test(test_nothing_beside_the_plan),
	    cmocka_unit_test(test_too_small_a_device_names_the_line),
	    cmocka_unit_test(test_accounting_mismatch_names_the_line),
	    cmocka_unit_test(test_forged_window_line_refused),
	    cmocka_unit_test(test_unknown_backend),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
