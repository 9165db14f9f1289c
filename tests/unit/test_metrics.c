/*
 * test_metrics.c - the metrics page's table and renderer (supervisor/metrics.h).
 *
 * The page is parsed back line by line: every family of the table (and of the
 * kvstore's table, proto/kvmetrics.h) appears with HELP and TYPE exactly once,
 * before its samples; names and label names are valid Prometheus names;
 * every sample belongs to the family announced last (histograms: _bucket,
 * _sum, _count); counters end in _total; label names are the declared ones.
 * Then exact figures: the plan's lines, a histogram made cumulative, a daemon
 * that is down leaving its families out, and the checks of a worker's reply.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvmetrics.h"
#include "metrics.h"

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
		assert_string_equal(f->type, met_type_name(met_families[i].type));
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
