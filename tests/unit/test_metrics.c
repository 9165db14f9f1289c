/*
 * test_metrics.c - the metrics page's table and renderer (supervisor/metrics.h).
 *
 * The page is parsed back line by line: every family of the table (and of the
 * kvstore's table, proto/kvmetrics.h) appears with HELP and TYPE exactly once,
 * before its samples; names and label names are valid Prometheus names;
 * every sample belongs to the family announced last (histograms: _bucket,
 * _sum, _count); counters end in _total; label names are the declared ones.
 * Then exact figures: the plan's lines, a histogram made cumulative, a daemon
 * that is down leaving its families out, and the checks of a worker's reply;
 * the rows of MET_ROWS against the families; and the whole page byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/kvmetrics.h"
#include "supervisor/metrics.h"

#define MAXFAM 64

/* What the parser saw of one family. */
struct seen {
	char name[96];
	char type[16];
	int helps, types, samples;
};

struct page {
	char *text;
	size_t len;
	struct seen fam[MAXFAM];
	int nfam;
};

static bool name_ok(const char *s, size_t n, bool label)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
		             (!label && c == ':');

		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return !(label && n >= 2 && s[0] == '_' && s[1] == '_');
}

static struct seen *find(struct page *p, const char *name, size_t n)
{
	for (int i = 0; i < p->nfam; i++)
		if (strlen(p->fam[i].name) == n && !strncmp(p->fam[i].name, name, n))
			return &p->fam[i];
	return NULL;
}

static struct seen *add(struct page *p, const char *name, size_t n)
{
	struct seen *s = find(p, name, n);

	if (s)
		return s;
	assert_true(p->nfam < MAXFAM);
	s = &p->fam[p->nfam++];
	memset(s, 0, sizeof(*s));
	assert_true(n < sizeof(s->name));
	memcpy(s->name, name, n);
	return s;
}

/* The family a sample name belongs to, given the one announced last. */
static bool belongs(const struct seen *last, const char *name, size_t n)
{
	size_t k = strlen(last->name);

	if (n == k && !strncmp(name, last->name, k))
		return strcmp(last->type, "histogram") != 0;
	if (strcmp(last->type, "histogram") || n <= k || strncmp(name, last->name, k))
		return false;
	return (n - k == 7 && !strncmp(name + k, "_bucket", 7)) ||
	       (n - k == 4 && !strncmp(name + k, "_sum", 4)) ||
	       (n - k == 6 && !strncmp(name + k, "_count", 6));
}

/* Check the labels `{a="x",b="y"}` at s (up to the closing brace). */
static const char *labels_ok(const char *s, const char *declared)
{
	assert_int_equal(*s, '{');
	s++;
	while (*s != '}') {
		const char *eq = strchr(s, '=');
		char want[64];

		assert_non_null(eq);
		assert_true(name_ok(s, (size_t)(eq - s), true));
		snprintf(want, sizeof(want), "%.*s", (int)(eq - s), s);
		if (strcmp(want, "le"))
			assert_non_null(strstr(declared, want));
		assert_int_equal(eq[1], '"');
		s = strchr(eq + 2, '"');
		assert_non_null(s);
		s++;
		if (*s == ',')
			s++;
	}
	return s + 1;
}

static void parse(struct page *p)
{
	struct seen *last = NULL;
	char *save = NULL;

	p->nfam = 0;
	for (char *line = strtok_r(p->text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
			const char *name = line + 7, *sp = strchr(name, ' ');
			struct seen *s;

			assert_non_null(sp);
			assert_true(name_ok(name, (size_t)(sp - name), false));
			s = add(p, name, (size_t)(sp - name));
			assert_int_equal(s->samples, 0); /* HELP and TYPE before samples */
			if (line[2] == 'H') {
				s->helps++;
				assert_true(strlen(sp + 1) > 0);
			} else {
				s->types++;
				snprintf(s->type, sizeof(s->type), "%s", sp + 1);
				assert_true(!strcmp(s->type, "counter") ||
				            !strcmp(s->type, "gauge") ||
				            !strcmp(s->type, "histogram"));
			}
			last = s;
			continue;
		}
		assert_true(line[0] != '#');
		{
			size_t n = strcspn(line, "{ ");
			const char *rest = line + n,
			           *declared = "state,from,op,tier,reason,result"; /* kvstore's */
			char *end;

			assert_non_null(last);
			if (!belongs(last, line, n))
				fail_msg("sample '%s' after the family %s", line, last->name);
			for (int i = 0; i < MET__COUNT; i++)
				if (!strcmp(met_families[i].name, last->name))
					declared = met_families[i].labels;
			if (*rest == '{') {
				assert_true(declared[0] !=
				            '\0'); /* a family without labels has none */
				rest = labels_ok(rest, declared);
			}
			assert_int_equal(*rest, ' ');
			strtod(rest + 1, &end);
			assert_true(end > rest + 1 && *end == '\0');
			last->samples++;
		}
	}
}

static void render(struct page *p, const struct met_snap *s, uint64_t now)
{
	FILE *f = open_memstream(&p->text, &p->len);

	assert_non_null(f);
	assert_int_equal(met_render(f, s, now), 0);
	assert_int_equal(fclose(f), 0);
}

/* A snapshot with every source up and distinct figures. */
static void full_snap(struct met_snap *s)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < VPLAN_NLINES; i++)
		s->line[i] = 1000u + (uint64_t)i;
	for (int i = 0; i < MET_NEXTRA; i++)
		s->extra[i] = 2000u + (uint64_t)i;
	s->budget_bytes = 1ull << 40;
	s->pool_pages = 100;
	s->page_bytes = 589824;
	s->nprocs = 3;
	snprintf(s->procs[0].role, sizeof(s->procs[0].role), "supervisor");
	snprintf(s->procs[1].role, sizeof(s->procs[1].role), "kvstore");
	snprintf(s->procs[2].role, sizeof(s->procs[2].role), "gpu-worker");
	s->procs[0].up = s->procs[1].up = s->procs[2].up = true;
	s->procs[2].restarts = 4;
	s->worker = (struct met_src){true, true, 1000};
	s->kvstore = (struct met_src){true, true, 1500};
	s->w.loaded = true;
	s->w.pool_pages = 100;
	/* two expert classes, each figure its own */
	s->w.experts.n = 2;
	for (uint32_t i = 0; i < 2; i++) {
		uint64_t b = 100u * (i + 1);

		s->w.experts.v[i] = (struct msg_expert_class){.record = b + 1,
		                                              .slots = b + 2,
		                                              .hits = b + 3,
		                                              .misses = b + 4,
		                                              .bytes = b + 5,
		                                              .evictions = b + 6,
		                                              .prefetches = b + 7};
		snprintf(s->expert_names[i], sizeof(s->expert_names[i]), "%s",
		         i ? "down:q6_k" : "gate_up:q4_k");
	}
	s->w.used_pages = 30;
	s->w.pending_pages = 7;
	s->w.waiting = 1;
	s->w.decode = 2;
	s->w.accepted = 9;
	s->w.finished_length = 3;
	s->w.finished_eos = 2;
	s->w.cancelled = 1;
	s->w.prompt_tokens = 123;
	s->w.generated_tokens = 456;
	s->w.ttft.n = 3;
	s->w.ttft.v[0] = (struct msg_ttft_bucket){5000, 2};
	s->w.ttft.v[1] = (struct msg_ttft_bucket){250000, 3};
	s->w.ttft.v[2] = (struct msg_ttft_bucket){UINT64_MAX, 1};
	s->w.ttft_sum_us = 1500000;
	s->kv.ram_bytes = 1 << 20;
	s->kv.ram_used_bytes = 1 << 10;
	s->kv.arena_name = msg_str_of("");
}

static void test_table(void **state)
{
	(void)state;
	for (int i = 0; i < MET__COUNT; i++) {
		const struct met_family *m = &met_families[i];

		assert_true(name_ok(m->name, strlen(m->name), false));
		assert_true(strncmp(m->name, "ignis_", 6) == 0);
		assert_true(strlen(m->help) > 10);
		/* counters end in _total, nothing else does */
		assert_int_equal(m->type == MET_COUNTER,
		                 strlen(m->name) > 6 &&
		                     !strcmp(m->name + strlen(m->name) - 6, "_total"));
		if (m->type == MET_HISTOGRAM)
			assert_string_equal(m->labels, "le");
		for (int j = 0; j < i; j++)
			assert_string_not_equal(m->name, met_families[j].name);
	}
}

/* The rows (MET_ROWS): in the order of the page, a family's consecutive; a
 * label value exactly when the family has its one label; every figure inside
 * the snapshot; every gpu-worker family a row family but the histogram, which
 * has none (the renderer's switch draws it). */
static void test_rows(void **state)
{
	bool has_rows[MET__COUNT] = {false};

	(void)state;
	assert_true(met_nrows > 0);
	for (size_t i = 0; i < met_nrows; i++) {
		const struct met_row *r = &met_rows[i];
		const struct met_family *m;

		assert_true(r->id < MET__COUNT);
		m = &met_families[r->id];
		if (i > 0 && r->id != met_rows[i - 1].id) {
			if (r->id < met_rows[i - 1].id || has_rows[r->id])
				fail_msg("row %zu (%s) is out of the page's order", i, m->name);
		}
		has_rows[r->id] = true;
		if (m->type == MET_HISTOGRAM)
			fail_msg("row %zu: the histogram %s has a row", i, m->name);
		{
			/* as many values as labels ("tier,kind": "device,checkpoint") */
			size_t nl = 0, nv = 0;

			for (const char *c = m->labels; *c; c++)
				nl += *c == ',';
			for (const char *c = r->label_value; *c; c++)
				nv += *c == ',';
			if (nl != nv)
				fail_msg("row %zu of %s: %zu values for %zu labels", i, m->name,
				         nv + 1, nl + 1);
		}
		if ((r->label_value[0] != '\0') != (m->labels[0] != '\0'))
			fail_msg("row %zu of %s: label value \"%s\" for labels \"%s\"", i, m->name,
			         r->label_value, m->labels);
		if (!r->calc && r->offset + sizeof(uint64_t) > sizeof(struct met_snap))
			fail_msg("row %zu of %s: offset %zu outside the snapshot", i, m->name,
			         r->offset);
		for (size_t j = 0; j < i; j++)
			if (met_rows[j].id == r->id &&
			    !strcmp(met_rows[j].label_value, r->label_value))
				fail_msg("rows %zu and %zu of %s are one sample", j, i, m->name);
	}
	for (int i = 0; i < MET__COUNT; i++)
		if (met_families[i].source == MET_SRC_WORKER &&
		    has_rows[i] == (met_families[i].type == MET_HISTOGRAM ||
		                    met_family_per_class((enum met_id)i)))
			fail_msg("the worker's family %s: %s", met_families[i].name,
			         has_rows[i] ? "a histogram with rows" : "no row");
}

static void test_every_family_once(void **state)
{
	static const char *const kv_families[] = {
#define KVF(family, type, label, value, help) #family,
	    KVM_ROWS(KVF)
#undef KVF
	};
	struct met_snap s;
	struct page p = {0};

	(void)state;
	full_snap(&s);
	render(&p, &s, 2000);
	parse(&p);
	for (int i = 0; i < p.nfam; i++) {
		assert_int_equal(p.fam[i].helps, 1);
		assert_int_equal(p.fam[i].types, 1);
	}
	for (int i = 0; i < MET__COUNT; i++) {
		struct seen *f = find(&p, met_families[i].name, strlen(met_families[i].name));

		if (!f)
			fail_msg("family %s not rendered", met_families[i].name);
		assert_string_equal(f->type, met_families[i].type == MET_COUNTER ? "counter"
		                             : met_families[i].type == MET_GAUGE ? "gauge"
		                                                                 : "histogram");
		assert_true(f->samples > 0);
	}
	for (size_t i = 0; i < sizeof(kv_families) / sizeof(kv_families[0]); i++) {
		struct seen *f = find(&p, kv_families[i], strlen(kv_families[i]));

		if (!f)
			fail_msg("kvstore family %s not rendered", kv_families[i]);
		assert_true(f->samples > 0);
	}
	free(p.text);
}

static void test_figures(void **state)
{
	struct met_snap s;
	struct page p = {0};
	char want[160];

	(void)state;
	full_snap(&s);
	render(&p, &s, 2000);
	for (int i = 0; i < VPLAN_NLINES; i++) {
		snprintf(want, sizeof(want), "\nignis_vram_reserved_bytes{line=\"%s\"} %d\n",
		         vplan_line_names[i], 1000 + i);
		assert_non_null(strstr(p.text, want));
	}
	assert_non_null(strstr(p.text, "\nignis_vram_reserved_bytes{line=\"kv_pool\"} 2003\n"));
	assert_non_null(strstr(p.text, "\nignis_vram_budget_bytes 1099511627776\n"));
	assert_non_null(strstr(p.text, "\nignis_kv_pool_used_pages 30\n"));
	assert_non_null(strstr(p.text, "\nignis_kv_pool_free_pages 70\n"));
	assert_non_null(strstr(p.text, "\nignis_requests_completed_total{reason=\"eos\"} 2\n"));
	assert_non_null(strstr(p.text, "\nignis_generated_tokens_total 456\n"));
	assert_non_null(strstr(p.text, "\nignis_process_restarts_total{role=\"gpu-worker\"} 4\n"));
	/* the histogram made cumulative, in seconds */
	assert_non_null(strstr(p.text, "\nignis_request_ttft_seconds_bucket{le=\"0.005\"} 2\n"
	                               "ignis_request_ttft_seconds_bucket{le=\"0.25\"} 5\n"
	                               "ignis_request_ttft_seconds_bucket{le=\"+Inf\"} 6\n"
	                               "ignis_request_ttft_seconds_sum 1.500000\n"
	                               "ignis_request_ttft_seconds_count 6\n"));
	assert_non_null(strstr(p.text, "\nignis_stats_age_seconds{source=\"gpu-worker\"} 1.000\n"));
	assert_non_null(strstr(p.text, "\nignis_stats_age_seconds{source=\"kvstore\"} 0.500\n"));
	free(p.text);
}

static void test_down_sources_left_out(void **state)
{
	struct met_snap s;
	struct page p = {0};

	(void)state;
	full_snap(&s);
	s.kvstore.up = false;
	s.worker = (struct met_src){false, false, 0}; /* never answered */
	s.procs[2].up = false;
	render(&p, &s, 2000);
	assert_null(strstr(p.text, "ignis_kv_pool_used_pages"));
	assert_null(strstr(p.text, "ignis_request_ttft_seconds"));
	assert_null(strstr(p.text, "ignis_kv_ram_arena_bytes"));
	assert_non_null(strstr(p.text, "\nignis_stats_up{source=\"kvstore\"} 0\n"));
	assert_non_null(strstr(p.text, "\nignis_stats_up{source=\"gpu-worker\"} 0\n"));
	assert_non_null(strstr(p.text, "\nignis_process_up{role=\"gpu-worker\"} 0\n"));
	/* the last figures' age still shows; a source never heard of has none */
	assert_non_null(strstr(p.text, "\nignis_stats_age_seconds{source=\"kvstore\"} 0.500\n"));
	assert_null(strstr(p.text, "ignis_stats_age_seconds{source=\"gpu-worker\"}"));
	assert_non_null(strstr(p.text, "\nignis_vram_budget_bytes "));
	parse(&p);
	free(p.text);
}

static void test_check_worker(void **state)
{
	struct met_snap s;
	struct ig_errbuf eb;

	(void)state;
	full_snap(&s);
	assert_int_equal(met_check_worker(&s.w, &eb), IG_E_OK);
	s.w.ttft.v[2].le_us = 9999999;
	assert_int_equal(met_check_worker(&s.w, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "worker_stats_reply.ttft"));
	full_snap(&s);
	s.w.ttft.v[1].le_us = 5000;
	assert_int_equal(met_check_worker(&s.w, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "ttft[1].le_us"));
	full_snap(&s);
	s.w.ttft.n = 0;
	assert_int_equal(met_check_worker(&s.w, &eb), IG_E_PROTO_FIELD_RANGE);
	full_snap(&s);
	s.w.used_pages = 101;
	assert_int_equal(met_check_worker(&s.w, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "used_pages"));
}

/* A snapshot whose every figure differs: each number field of both replies
 * (walked with msg.h's field lists, so a field added there is covered), the
 * pool above its used pages, the slots above the held and writing ones. */
static void distinct_snap(struct met_snap *s)
{
	uint64_t next = 11;

	full_snap(s);
#define DS_U64(wr, name) s->wr.name = next++ * 7;
#define DS_BOOL(wr, name)
#define DS_STR(wr, name)
#define DS_ARR(wr, name)
#define DS_W(R, T, name, lo, hi, sub)  DS_##T(w, name)
#define DS_KV(R, T, name, lo, hi, sub) DS_##T(kv, name)
	MSG_FIELDS_worker_stats_reply(DS_W, _);
	MSG_FIELDS_kv_stats_reply(DS_KV, _);
#undef DS_KV
#undef DS_W
#undef DS_ARR
#undef DS_STR
#undef DS_BOOL
#undef DS_U64
	s->w.pool_pages = 100000;
	s->kv.ram_bytes = 1ull << 30;
	s->kv.slots = 1000;
	s->door_displaced = 901;
	s->http = (struct http_counts){902, 903, 904, 905, 906, 907, 908};
}

/* The whole page, byte for byte, for that snapshot: a row that reads the
 * wrong field, a label out of place or a changed format fails here. */
static const char want_page[] =
    "# HELP ignis_vram_reserved_bytes Device memory reserved at load, by plan line (the fixed "
    "lines, Flash-Next's residency and expert cache, and the KV pool), in bytes.\n"
    "# TYPE ignis_vram_reserved_bytes gauge\n"
    "ignis_vram_reserved_bytes{line=\"weights\"} 1000\n"
    "ignis_vram_reserved_bytes{line=\"cuda_context\"} 1001\n"
    "ignis_vram_reserved_bytes{line=\"workspace\"} 1002\n"
    "ignis_vram_reserved_bytes{line=\"media_embedding\"} 1003\n"
    "ignis_vram_reserved_bytes{line=\"sampling\"} 1004\n"
    "ignis_vram_reserved_bytes{line=\"decode_graph\"} 1005\n"
    "ignis_vram_reserved_bytes{line=\"verify_round\"} 1006\n"
    "ignis_vram_reserved_bytes{line=\"drafter_round\"} 1007\n"
    "ignis_vram_reserved_bytes{line=\"lane_state\"} 1008\n"
    "ignis_vram_reserved_bytes{line=\"retained_slots\"} 1009\n"
    "ignis_vram_reserved_bytes{line=\"hq_residual_window\"} 1010\n"
    "ignis_vram_reserved_bytes{line=\"residual\"} 1011\n"
    "ignis_vram_reserved_bytes{line=\"prefill_staging\"} 2000\n"
    "ignis_vram_reserved_bytes{line=\"expert_tables\"} 2001\n"
    "ignis_vram_reserved_bytes{line=\"expert_cache\"} 2002\n"
    "ignis_vram_reserved_bytes{line=\"kv_pool\"} 2003\n"
    "# HELP ignis_vram_budget_bytes The device memory budget of the plan, in bytes.\n"
    "# TYPE ignis_vram_budget_bytes gauge\n"
    "ignis_vram_budget_bytes 1099511627776\n"
    "# HELP ignis_kv_pool_pages Pages of the KV pool (64 tokens each).\n"
    "# TYPE ignis_kv_pool_pages gauge\n"
    "ignis_kv_pool_pages 100\n"
    "# HELP ignis_kv_page_bytes Bytes of one KV pool page.\n"
    "# TYPE ignis_kv_page_bytes gauge\n"
    "ignis_kv_page_bytes 589824\n"
    "# HELP ignis_kv_pool_used_pages KV pool pages reserved by admitted requests (a request "
    "reserves its whole bound at admission) and by retained prompt checkpoints.\n"
    "# TYPE ignis_kv_pool_used_pages gauge\n"
    "ignis_kv_pool_used_pages 84\n"
    "# HELP ignis_kv_pool_retained_pages KV pool pages only retained prompt checkpoints hold: "
    "given up for an admission before any live sequence moves.\n"
    "# TYPE ignis_kv_pool_retained_pages gauge\n"
    "ignis_kv_pool_retained_pages 91\n"
    "# HELP ignis_kv_pool_free_pages KV pool pages free.\n"
    "# TYPE ignis_kv_pool_free_pages gauge\n"
    "ignis_kv_pool_free_pages 99916\n"
    "# HELP ignis_kv_pool_pending_pages KV pool pages the waiting requests will reserve at their "
    "admission.\n"
    "# TYPE ignis_kv_pool_pending_pages gauge\n"
    "ignis_kv_pool_pending_pages 98\n"
    "# HELP ignis_scheduler_requests Live requests by state: waiting (no pages yet), prefill, "
    "ready (prompt done, no lane), decode (on a lane), moving_out, moved (in a tier), moving_in.\n"
    "# TYPE ignis_scheduler_requests gauge\n"
    "ignis_scheduler_requests{state=\"waiting\"} 105\n"
    "ignis_scheduler_requests{state=\"prefill\"} 112\n"
    "ignis_scheduler_requests{state=\"ready\"} 119\n"
    "ignis_scheduler_requests{state=\"decode\"} 126\n"
    "ignis_scheduler_requests{state=\"moving_out\"} 203\n"
    "ignis_scheduler_requests{state=\"moved\"} 210\n"
    "ignis_scheduler_requests{state=\"moving_in\"} 217\n"
    "# HELP ignis_kv_cache_evictions_total Sequences moved off the device to make room (moves out "
    "that landed).\n"
    "# TYPE ignis_kv_cache_evictions_total counter\n"
    "ignis_kv_cache_evictions_total 224\n"
    "# HELP ignis_kv_moves_total Moves between the device and KV-RAM that landed, by direction "
    "(out, in).\n"
    "# TYPE ignis_kv_moves_total counter\n"
    "ignis_kv_moves_total{direction=\"out\"} 224\n"
    "ignis_kv_moves_total{direction=\"in\"} 231\n"
    "# HELP ignis_kv_move_bytes_total Sequence-image bytes moved, by direction.\n"
    "# TYPE ignis_kv_move_bytes_total counter\n"
    "ignis_kv_move_bytes_total{direction=\"out\"} 238\n"
    "ignis_kv_move_bytes_total{direction=\"in\"} 245\n"
    "# HELP ignis_kv_reprefills_total Moved sequences whose record a tier gave up or lost: "
    "prefilled again from the start.\n"
    "# TYPE ignis_kv_reprefills_total counter\n"
    "ignis_kv_reprefills_total 252\n"
    "# HELP ignis_kv_moves_stopped_total Moves out stopped before they landed: the request they "
    "made room for no longer waited (admitted from room freed elsewhere, or ended); the victim "
    "kept its pages.\n"
    "# TYPE ignis_kv_moves_stopped_total counter\n"
    "ignis_kv_moves_stopped_total 266\n"
    "# HELP ignis_kv_move_retries_total Moves the tier refused (no room) or that started again "
    "(the kvstore daemon away).\n"
    "# TYPE ignis_kv_move_retries_total counter\n"
    "ignis_kv_move_retries_total 259\n"
    "# HELP ignis_requests_accepted_total Requests accepted by the gpu-worker.\n"
    "# TYPE ignis_requests_accepted_total counter\n"
    "ignis_requests_accepted_total 133\n"
    "# HELP ignis_requests_completed_total Requests finished, by reason: length (max_tokens), eos, "
    "context.\n"
    "# TYPE ignis_requests_completed_total counter\n"
    "ignis_requests_completed_total{reason=\"length\"} 140\n"
    "ignis_requests_completed_total{reason=\"eos\"} 147\n"
    "ignis_requests_completed_total{reason=\"context\"} 154\n"
    "# HELP ignis_requests_cancelled_total Requests cancelled before they finished.\n"
    "# TYPE ignis_requests_cancelled_total counter\n"
    "ignis_requests_cancelled_total 161\n"
    "# HELP ignis_prompt_tokens_total Prompt tokens of the accepted requests.\n"
    "# TYPE ignis_prompt_tokens_total counter\n"
    "ignis_prompt_tokens_total 168\n"
    "# HELP ignis_generated_tokens_total Tokens generated (those of cancelled requests included).\n"
    "# TYPE ignis_generated_tokens_total counter\n"
    "ignis_generated_tokens_total 175\n"
    "# HELP ignis_prefill_tokens_total Prompt tokens run through the model (prefill chunks).\n"
    "# TYPE ignis_prefill_tokens_total counter\n"
    "ignis_prefill_tokens_total 182\n"
    "# HELP ignis_scheduler_rounds_total Rounds run by the gpu-worker (one batch of decode tokens "
    "and prefill chunks each).\n"
    "# TYPE ignis_scheduler_rounds_total counter\n"
    "ignis_scheduler_rounds_total 189\n"
    "# HELP ignis_request_ttft_seconds Time from a request's submit to its first generated token, "
    "in seconds.\n"
    "# TYPE ignis_request_ttft_seconds histogram\n"
    "ignis_request_ttft_seconds_bucket{le=\"0.005\"} 2\n"
    "ignis_request_ttft_seconds_bucket{le=\"0.25\"} 5\n"
    "ignis_request_ttft_seconds_bucket{le=\"+Inf\"} 6\n"
    "ignis_request_ttft_seconds_sum 0.000196\n"
    "ignis_request_ttft_seconds_count 6\n"
    "# HELP ignis_retained_device_slots Device retained slots by state: used (a prompt "
    "checkpoint), free (the host tier's: ignis_retained_slots{tier=\"host\"}).\n"
    "# TYPE ignis_retained_device_slots gauge\n"
    "ignis_retained_device_slots{state=\"used\"} 287\n"
    "ignis_retained_device_slots{state=\"free\"} 0\n"
    "# HELP ignis_retained_reused_tokens_total Prompt tokens requests took from retained state "
    "instead of prefilling them, by tier (device, host) and kind (checkpoint: a prompt's end; "
    "prefix: where two prompts part).\n"
    "# TYPE ignis_retained_reused_tokens_total counter\n"
    "ignis_retained_reused_tokens_total{tier=\"device\",kind=\"checkpoint\"} 0\n"
    "ignis_retained_reused_tokens_total{tier=\"device\",kind=\"prefix\"} 18446744073709551567\n"
    "ignis_retained_reused_tokens_total{tier=\"host\",kind=\"checkpoint\"} 18446744073709551609\n"
    "ignis_retained_reused_tokens_total{tier=\"host\",kind=\"prefix\"} 378\n"
    "# HELP ignis_retained_claims_total Requests by what prompt reuse found: hit (started from a "
    "checkpoint), no_match, given_up (its checkpoint went before it was admitted).\n"
    "# TYPE ignis_retained_claims_total counter\n"
    "ignis_retained_claims_total{result=\"hit\"} 301\n"
    "ignis_retained_claims_total{result=\"no_match\"} 308\n"
    "ignis_retained_claims_total{result=\"given_up\"} 315\n"
    "# HELP ignis_retained_captures_total Prompts retained as checkpoints.\n"
    "# TYPE ignis_retained_captures_total counter\n"
    "ignis_retained_captures_total 294\n"
    "# HELP ignis_retained_capture_skips_total Captures skipped: no_slot (every slot held by a "
    "checkpoint a waiting request counts on), no_page (no free KV page for the partial last page), "
    "host_busy (no device slot and a host capture under way), host_refused (the kvstore daemon "
    "skipped it).\n"
    "# TYPE ignis_retained_capture_skips_total counter\n"
    "ignis_retained_capture_skips_total{reason=\"no_slot\"} 336\n"
    "ignis_retained_capture_skips_total{reason=\"no_page\"} 343\n"
    "ignis_retained_capture_skips_total{reason=\"host_busy\"} 385\n"
    "ignis_retained_capture_skips_total{reason=\"host_refused\"} 392\n"
    "# HELP ignis_retained_given_up_total Checkpoints given up: room (for an admission), slot (for "
    "a newer capture), tier (the kvstore daemon gave its host slot up or lost it).\n"
    "# TYPE ignis_retained_given_up_total counter\n"
    "ignis_retained_given_up_total{reason=\"room\"} 350\n"
    "ignis_retained_given_up_total{reason=\"slot\"} 357\n"
    "ignis_retained_given_up_total{reason=\"tier\"} 399\n"
    "# HELP ignis_expert_cache_slots Slots of the expert cache by class (a projection in its "
    "tensor type(s): gate_up:bf16, down:q6_k); none for a model without routed experts or with "
    "every expert resident.\n"
    "# TYPE ignis_expert_cache_slots gauge\n"
    "ignis_expert_cache_slots{class=\"gate_up:q4_k\"} 102\n"
    "ignis_expert_cache_slots{class=\"down:q6_k\"} 202\n"
    "# HELP ignis_expert_cache_hits_total Experts a pass found in the expert cache, by class.\n"
    "# TYPE ignis_expert_cache_hits_total counter\n"
    "ignis_expert_cache_hits_total{class=\"gate_up:q4_k\"} 103\n"
    "ignis_expert_cache_hits_total{class=\"down:q6_k\"} 203\n"
    "# HELP ignis_expert_cache_misses_total Experts a pass copied into the expert cache from host "
    "memory, by class.\n"
    "# TYPE ignis_expert_cache_misses_total counter\n"
    "ignis_expert_cache_misses_total{class=\"gate_up:q4_k\"} 104\n"
    "ignis_expert_cache_misses_total{class=\"down:q6_k\"} 204\n"
    "# HELP ignis_expert_cache_streamed_bytes_total Bytes of experts copied host to device (misses "
    "and prefetches), by class.\n"
    "# TYPE ignis_expert_cache_streamed_bytes_total counter\n"
    "ignis_expert_cache_streamed_bytes_total{class=\"gate_up:q4_k\"} 105\n"
    "ignis_expert_cache_streamed_bytes_total{class=\"down:q6_k\"} 205\n"
    "# HELP ignis_expert_cache_evictions_total Experts the cache gave up for a miss (the least "
    "recently used of the class), by class.\n"
    "# TYPE ignis_expert_cache_evictions_total counter\n"
    "ignis_expert_cache_evictions_total{class=\"gate_up:q4_k\"} 106\n"
    "ignis_expert_cache_evictions_total{class=\"down:q6_k\"} 206\n"
    "# HELP ignis_expert_cache_prefetches_total Experts copied into the cache ahead of their layer "
    "(its router on the residual before the layer's token mixer), by class; a hit later if the "
    "guess was right.\n"
    "# TYPE ignis_expert_cache_prefetches_total counter\n"
    "ignis_expert_cache_prefetches_total{class=\"gate_up:q4_k\"} 107\n"
    "ignis_expert_cache_prefetches_total{class=\"down:q6_k\"} 207\n"
    "# HELP ignis_expert_cache_staged_layers_total Layers of passes that routed more experts than "
    "a class holds (prefill chunks) and read the whole layer from the staging ring.\n"
    "# TYPE ignis_expert_cache_staged_layers_total counter\n"
    "ignis_expert_cache_staged_layers_total 406\n"
    "# HELP ignis_process_up 1 when the process is running and answered its handshake, else 0.\n"
    "# TYPE ignis_process_up gauge\n"
    "ignis_process_up{role=\"supervisor\"} 1\n"
    "ignis_process_up{role=\"kvstore\"} 1\n"
    "ignis_process_up{role=\"gpu-worker\"} 1\n"
    "# HELP ignis_process_restarts_total Restarts of the process by the supervisor (after a crash, "
    "a hang or an operator's restart).\n"
    "# TYPE ignis_process_restarts_total counter\n"
    "ignis_process_restarts_total{role=\"supervisor\"} 0\n"
    "ignis_process_restarts_total{role=\"kvstore\"} 0\n"
    "ignis_process_restarts_total{role=\"gpu-worker\"} 4\n"
    "# HELP ignis_stats_up 1 when the daemon answered the supervisor's last request for its "
    "figures (gathered every second); 0 leaves its families off the page.\n"
    "# TYPE ignis_stats_up gauge\n"
    "ignis_stats_up{source=\"gpu-worker\"} 1\n"
    "ignis_stats_up{source=\"kvstore\"} 1\n"
    "# HELP ignis_stats_age_seconds Seconds since the daemon's figures were last gathered (absent "
    "until the first answer).\n"
    "# TYPE ignis_stats_age_seconds gauge\n"
    "ignis_stats_age_seconds{source=\"gpu-worker\"} 1.000\n"
    "ignis_stats_age_seconds{source=\"kvstore\"} 0.500\n"
    "# HELP ignis_proto_rejected_total Messages refused because they did not decode (malformed, "
    "oversize, another protocol version, an unknown type or field), by the socket that got them: "
    "client (the front door), supervisor; gpu-worker and kvstore while they are up. Only the first "
    "few of a kind each period are logged (ignis.proto.rejected).\n"
    "# TYPE ignis_proto_rejected_total counter\n"
    "ignis_proto_rejected_total{socket=\"client\"} 0\n"
    "ignis_proto_rejected_total{socket=\"supervisor\"} 0\n"
    "ignis_proto_rejected_total{socket=\"gpu-worker\"} 273\n"
    "ignis_proto_rejected_total{socket=\"kvstore\"} 623\n"
    "# HELP ignis_frontdoor_displaced_total Waiting submits refused to make room in the front "
    "door's full queue for another client's: the newest of the client holding the most of "
    "the queue.\n"
    "# TYPE ignis_frontdoor_displaced_total counter\n"
    "ignis_frontdoor_displaced_total 901\n"
    "# HELP ignis_http_connections Connections open to the HTTP API.\n"
    "# TYPE ignis_http_connections gauge\n"
    "ignis_http_connections 902\n"
    "# HELP ignis_http_connections_limit The most connections the HTTP API takes at once "
    "(--server-http-max-connections, or from the descriptor limit).\n"
    "# TYPE ignis_http_connections_limit gauge\n"
    "ignis_http_connections_limit 903\n"
    "# HELP ignis_http_timeouts_total HTTP connections cut because a request's headers or body "
    "came too slowly (--server-http-header-timeout, --server-http-body-timeout), or sat idle "
    "that long.\n"
    "# TYPE ignis_http_timeouts_total counter\n"
    "ignis_http_timeouts_total 904\n"
    "# HELP ignis_http_refused_total HTTP requests refused before they were read: host (a Host "
    "header that does not name a loopback server), origin (a web page's origin not named), "
    "api_key (missing or wrong), content_type (a body that is not application/json).\n"
    "# TYPE ignis_http_refused_total counter\n"
    "ignis_http_refused_total{reason=\"host\"} 905\n"
    "ignis_http_refused_total{reason=\"origin\"} 906\n"
    "ignis_http_refused_total{reason=\"api_key\"} 907\n"
    "ignis_http_refused_total{reason=\"content_type\"} 908\n"
    "# HELP ignis_kv_ram_arena_bytes KV-RAM arena bytes by state.\n"
    "# TYPE ignis_kv_ram_arena_bytes gauge\n"
    "ignis_kv_ram_arena_bytes{state=\"used\"} 427\n"
    "ignis_kv_ram_arena_bytes{state=\"free\"} 1073741397\n"
    "# HELP ignis_kv_ram_evictions_total Moved sequences KV-RAM gave up (each is prefilled again): "
    "with KV-disk off, or with both tiers full, for a read from KV-disk.\n"
    "# TYPE ignis_kv_ram_evictions_total counter\n"
    "ignis_kv_ram_evictions_total 511\n"
    "# HELP ignis_kv_disk_bytes KV-disk bytes: used, and the effective ceiling.\n"
    "# TYPE ignis_kv_disk_bytes gauge\n"
    "ignis_kv_disk_bytes{state=\"used\"} 455\n"
    "ignis_kv_disk_bytes{state=\"ceiling\"} 448\n"
    "# HELP ignis_kv_disk_spills_total Sequences written to KV-disk, by where they came from.\n"
    "# TYPE ignis_kv_disk_spills_total counter\n"
    "ignis_kv_disk_spills_total{from=\"ram\"} 490\n"
    "ignis_kv_disk_spills_total{from=\"device\"} 497\n"
    "# HELP ignis_kv_disk_failures_total KV-disk and KV-RAM records found torn, corrupt or foreign "
    "(never served).\n"
    "# TYPE ignis_kv_disk_failures_total counter\n"
    "ignis_kv_disk_failures_total{op=\"read\"} 518\n"
    "# HELP ignis_kv_tier_sequences Sequences held, by tier.\n"
    "# TYPE ignis_kv_tier_sequences gauge\n"
    "ignis_kv_tier_sequences{tier=\"ram\"} 441\n"
    "ignis_kv_tier_sequences{tier=\"disk\"} 462\n"
    "# HELP ignis_kv_tier_refusals_total Reservations and demotions refused at once because the "
    "tier was full.\n"
    "# TYPE ignis_kv_tier_refusals_total counter\n"
    "ignis_kv_tier_refusals_total 483\n"
    "# HELP ignis_retained_slots Retained slots by tier and state (writing: a capture in "
    "progress).\n"
    "# TYPE ignis_retained_slots gauge\n"
    "ignis_retained_slots{tier=\"host\",state=\"free\"} 0\n"
    "ignis_retained_slots{tier=\"host\",state=\"writing\"} 553\n"
    "ignis_retained_slots{tier=\"host\",state=\"held\"} 546\n"
    "# HELP ignis_retained_slot_skips_total Captures skipped: every slot being written (busy), the "
    "key already held (duplicate), an image larger than a slot (size), no slots (none).\n"
    "# TYPE ignis_retained_slot_skips_total counter\n"
    "ignis_retained_slot_skips_total{reason=\"busy\"} 595\n"
    "ignis_retained_slot_skips_total{reason=\"duplicate\"} 602\n"
    "ignis_retained_slot_skips_total{reason=\"size\"} 609\n"
    "ignis_retained_slot_skips_total{reason=\"none\"} 616\n"
    "# HELP ignis_retained_slot_given_up_total Held retained slots given up for a newer capture.\n"
    "# TYPE ignis_retained_slot_given_up_total counter\n"
    "ignis_retained_slot_given_up_total{tier=\"host\"} 588\n"
    "# HELP ignis_retained_slot_claims_total Claims of a retained slot: found (hit) or not "
    "(miss).\n"
    "# TYPE ignis_retained_slot_claims_total counter\n"
    "ignis_retained_slot_claims_total{tier=\"host\",result=\"hit\"} 574\n"
    "ignis_retained_slot_claims_total{tier=\"host\",result=\"miss\"} 581\n";

static void test_page_exact(void **state)
{
	struct met_snap s;
	struct page p = {0};

	(void)state;
	distinct_snap(&s);
	render(&p, &s, 2000);
	if (getenv("IGNIS_DUMP_PAGE")) {
		FILE *f = fopen(getenv("IGNIS_DUMP_PAGE"), "w");

		fputs(p.text, f);
		fclose(f);
	}
	assert_string_equal(p.text, want_page);
	free(p.text);
}

/* The plan's lines and the extra ones add up to its total. */
static void test_plan_lines_add_up(void **state)
{
	struct vplan p;
	struct met_snap s;
	uint64_t sum = 0;

	(void)state;
	memset(&p, 0, sizeof(p));
	for (int i = 0; i < VPLAN_NLINES; i++)
		p.line[i] = 4096u * (uint64_t)(i + 1);
	p.prefill_staging_bytes = 11;
	p.expert_table_bytes = 13;
	p.residency_fixed_bytes = 24;
	p.expert_cache_bytes = 17;
	p.pool_bytes = 19;
	p.total_bytes = 4096u * 78u + 24 + 17 + 19;
	memset(&s, 0, sizeof(s));
	met_snap_plan(&s, &p);
	for (int i = 0; i < VPLAN_NLINES; i++)
		sum += s.line[i];
	for (int i = 0; i < MET_NEXTRA; i++)
		sum += s.extra[i];
	assert_int_equal(sum, p.total_bytes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),        cmocka_unit_test(test_every_family_once),
	    cmocka_unit_test(test_figures),      cmocka_unit_test(test_down_sources_left_out),
	    cmocka_unit_test(test_check_worker), cmocka_unit_test(test_plan_lines_add_up),
	    cmocka_unit_test(test_page_exact),   cmocka_unit_test(test_rows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
